/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the HTTP metadata store (mooncake-master/admin/http.c):
 * raw request bytes -- request line, headers, URL-encoded keys, bodies --
 * go over a real loopback connection to the store served by evhttp, as
 * they would from any peer on the port.  Two stores run, one per dialect
 * (the first input byte picks one), with small limits (64 KiB values, a
 * 1 MiB quota) and a write check that owns every key of odd length, so
 * the 413/414/507/403 paths are reached.  The store must answer or close,
 * never crash, overflow or leak (ASan, UBSan); its byte count must stay
 * within the quota.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "../../mooncake-master/admin/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct event_base *base;
static mc_meta_server_t *srv[2];
static uint16_t port[2];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_http_meta: %s\n", what);
    abort();
}

static int odd_keys_owned(void *arg, const char *key, const char *token)
{
    (void)arg;
    return ((strlen(key) % 2) == 0) || ((token != NULL) && (strcmp(token, "owner") == 0));
}

static void setup_once(void)
{
    base = event_base_new();
    if (base == NULL)
        fail("event_base_new");
    for (int d = 0; d < 2; d++) {
        const char *bound, *colon;
        if (mc_meta_server_create(base, d ? MC_META_DIALECT_STANDALONE : MC_META_DIALECT_MASTER,
                                  "127.0.0.1", 0, &srv[d]) != MC_OK)
            fail("cannot serve a store on 127.0.0.1");
        mc_meta_server_set_limits(srv[d], 64u << 10, 1u << 20);
        mc_meta_server_set_write_check(srv[d], odd_keys_owned, NULL);
        bound = mc_meta_server_bound(srv[d]);
        colon = strrchr(bound, ':');
        port[d] = (uint16_t)atoi(colon ? colon + 1 : "0");
    }
}

/* Run the loop a little: the server reads, answers, notices closes. */
static void spin(int rounds)
{
    for (int i = 0; i < rounds; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_in sa;
    char buf[65536];
    int fd, d;
    size_t sent = 0;

    if (base == NULL)
        setup_once();
    if (size == 0)
        return 0;
    d = data[0] & 1;
    data++;
    size--;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_port        = htons(port[d]);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return 0;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    /* send everything while the server reads; then half-close and drain
     * answers until the server closes or has nothing more to say */
    for (int round = 0; (round < 2000) && (sent < size); round++) {
        ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else if ((n < 0) && (errno != EAGAIN) && (errno != EINTR))
            break;
        spin(1);
        while (recv(fd, buf, sizeof(buf), 0) > 0) {
        }
    }
    shutdown(fd, SHUT_WR);
    for (int round = 0; round < 200; round++) {
        ssize_t n;
        spin(1);
        n = recv(fd, buf, sizeof(buf), 0);
        if ((n == 0) || ((n < 0) && (errno != EAGAIN) && (errno != EINTR)))
            break;
    }
    {
        /* reset, not FIN: no TIME_WAIT, so a long soak keeps its ports */
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    close(fd);
    spin(5); /* the server sees the close and frees the connection */
    return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Baseline for the store benchmark: raw single-connection loopback TCP
 * moving the same bytes as a get.  A forked server answers each 8-byte
 * request "send me N bytes" with N bytes from a warm buffer; the client
 * receives them into a warm buffer.  This is what a get costs with no
 * store at all: one request/response round trip per value on one socket.
 *
 *   raw_tcp VALUE_SIZE COUNT   ->  one JSON line with throughput and
 *                                  per-op latency percentiles
 *
 * Across two network namespaces (store_bench.py --net veth) the two ends
 * run apart: `raw_tcp --serve ADDR MAX_SIZE` listens on ADDR (an IPv4
 * address, port chosen by the kernel), prints the port on one line and
 * serves one connection; `raw_tcp VALUE_SIZE COUNT ADDR:PORT` is the
 * client alone.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int xfer(int fd, void *buf, size_t len, int sending)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n <= 0) {
            if ((n < 0) && (errno == EINTR))
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void serve(int lfd, size_t max)
{
    uint8_t *buf = malloc(max);
    uint64_t want;
    int fd = accept(lfd, NULL, NULL);
    int one = 1;
    if ((buf == NULL) || (fd < 0))
        _exit(1);
    memset(buf, 0x5a, max);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    while (xfer(fd, &want, sizeof(want), 0) == 0) {
        if ((want > max) || (xfer(fd, buf, want, 1) != 0))
            break;
    }
    _exit(0);
}

/* A listening socket on @p addr (network order), port in *sa. */
static int listen_on(uint32_t addr, struct sockaddr_in *sa)
{
    socklen_t slen = sizeof(*sa);
    int lfd        = socket(AF_INET, SOCK_STREAM, 0);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family      = AF_INET;
    sa->sin_addr.s_addr = addr;
    if ((lfd < 0) || (bind(lfd, (struct sockaddr *)sa, sizeof(*sa)) != 0) ||
        (listen(lfd, 1) != 0) || (getsockname(lfd, (struct sockaddr *)sa, &slen) != 0)) {
        perror("raw_tcp: listen");
        return -1;
    }
    return lfd;
}

int main(int argc, char **argv)
{
    struct sockaddr_in sa;
    size_t size;
    long count;
    int one     = 1;
    pid_t child = -1;

    if ((argc == 4) && (strcmp(argv[1], "--serve") == 0)) {
        struct in_addr ia;
        size = strtoull(argv[3], NULL, 10);
        if ((inet_pton(AF_INET, argv[2], &ia) != 1) || (size == 0)) {
            fprintf(stderr, "raw_tcp: --serve wants an IPv4 address and a size\n");
            return 2;
        }
        int lfd = listen_on(ia.s_addr, &sa);
        if (lfd < 0)
            return 1;
        printf("%u\n", (unsigned)ntohs(sa.sin_port));
        fflush(stdout);
        serve(lfd, size);
    }
    if ((argc != 3) && (argc != 4)) {
        fprintf(stderr, "usage: %s VALUE_SIZE COUNT [ADDR:PORT]\n"
                        "       %s --serve ADDR MAX_SIZE\n", argv[0], argv[0]);
        return 2;
    }
    size  = strtoull(argv[1], NULL, 10);
    count = strtol(argv[2], NULL, 10);
    if ((size == 0) || (count <= 0))
        return 2;

    if (argc == 4) { /* the server runs elsewhere (--serve) */
        char host[64];
        const char *colon = strrchr(argv[3], ':');
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        if ((colon == NULL) || ((size_t)(colon - argv[3]) >= sizeof(host))) {
            fprintf(stderr, "raw_tcp: bad server address %s\n", argv[3]);
            return 2;
        }
        memcpy(host, argv[3], (size_t)(colon - argv[3]));
        host[colon - argv[3]] = '\0';
        sa.sin_port           = htons((uint16_t)strtoul(colon + 1, NULL, 10));
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
            fprintf(stderr, "raw_tcp: bad server address %s\n", argv[3]);
            return 2;
        }
    } else {
        int lfd = listen_on(htonl(INADDR_LOOPBACK), &sa);
        if (lfd < 0)
            return 1;
        child = fork();
        if (child == 0)
            serve(lfd, size);
        close(lfd);
    }

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("raw_tcp: connect");
        if (child > 0)
            kill(child, SIGKILL);
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t *buf  = malloc(size);
    uint64_t *lat = malloc(sizeof(*lat) * (size_t)count);
    memset(buf, 0, size);
    uint64_t want = size;
    for (int i = 0; i < 3; i++) { /* warm up */
        xfer(fd, &want, sizeof(want), 1);
        xfer(fd, buf, size, 0);
    }
    uint64_t t0 = now_ns();
    for (long i = 0; i < count; i++) {
        uint64_t s = now_ns();
        if ((xfer(fd, &want, sizeof(want), 1) != 0) || (xfer(fd, buf, size, 0) != 0)) {
            fprintf(stderr, "raw_tcp: transfer failed\n");
            return 1;
        }
        lat[i] = now_ns() - s;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    close(fd);
    if (child > 0)
        waitpid(child, NULL, 0);
    qsort(lat, (size_t)count, sizeof(*lat), cmp_u64);
    printf("{\"value_size\": %zu, \"count\": %ld, \"seconds\": %.6f, \"gbps\": %.4f, "
           "\"ops\": %.1f, \"p50_us\": %.2f, \"p99_us\": %.2f}\n",
           size, count, secs, (double)size * (double)count / secs / 1e9, (double)count / secs,
           (double)lat[count / 2] / 1e3, (double)lat[(count * 99) / 100] / 1e3);
    free(buf);
    free(lat);
    return 0;
}

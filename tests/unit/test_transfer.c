/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Transfer engine, in-process: two or three engines on 127.0.0.1 in
 * P2PHANDSHAKE mode move bytes between buffers of this one process, which
 * lets every test look straight at the target memory.  Besides round trips
 * and batches, the tests attack the target: ranges outside registered
 * memory (through the API, where the initiator's descriptor check answers,
 * and through raw sockets, where only the target's own check stands),
 * garbage headers, deregistration under an in-flight request, and a peer
 * that restarted behind a pooled connection.  A tiny HTTP key-value server
 * in a thread exercises the HTTP metadata mode.  Every wait is bounded.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <mooncake/transfer.h>

#include "check_suites.h"
#include "coord/redis.h"
#include "common/util.h"
#include "transfer/descriptor.h"
#include "transfer/engine.h"
#include "transfer/proto.h"
#include "te_util.h"

#define MiB (1024u * 1024u)

static uint16_t te_port(mc_te_h te)
{
    char host[256];
    uint16_t port = 0;
    ck_assert_int_eq(mc_parse_host_port(mc_te_local_name(te), host, sizeof(host), &port), 0);
    return port;
}

/* ---- two engines, A initiates, B serves ---------------------------------- */


START_TEST(test_create_names_and_ports)
{
    const char *n = mc_te_local_name(A);
    uint16_t port = te_port(A);
    ck_assert_msg(strncmp(n, "127.0.0.1:", 10) == 0, "segment name %s should be host:port", n);
    ck_assert_msg((port >= 12300) && (port <= 14300), "port %u should be in [12300, 14300]",
                  (unsigned)port);
    ck_assert_msg(te_port(B) != port, "two engines should not share a port");

    mc_te_h L = te_new("localhost", NULL);
    ck_assert_msg(strncmp(mc_te_local_name(L), "localhost:", 10) == 0,
                  "a localhost engine should be named localhost:<port>, not %s",
                  mc_te_local_name(L));
    /* an explicit port is used as is, and a taken one is refused */
    char name[64];
    uint16_t lp = te_port(L);
    snprintf(name, sizeof(name), "127.0.0.1:%u", (unsigned)lp);
    mc_te_params_t p = {.field_mask = MC_TE_PARAM_LOCAL_HOSTNAME, .local_hostname = name};
    mc_te_h dup      = NULL;
    ck_assert_status_eq(mc_te_create(&p, &dup), MC_INVALID_PARAMS);
    ck_assert_msg(dup == NULL, "a failed create should not write the handle");
    mc_te_destroy(L);
    mc_te_h again = NULL;
    ck_assert_status_ok(mc_te_create(&p, &again));
    ck_assert_str_eq(mc_te_local_name(again), name);
    mc_te_destroy(again);

    /* a narrow explicit range is honoured */
    mc_te_params_t r = {.field_mask = MC_TE_PARAM_PORT_RANGE | MC_TE_PARAM_LOCAL_HOSTNAME,
                        .local_hostname = "127.0.0.1", .port_min = 14290, .port_max = 14299};
    mc_te_h ranged = NULL;
    ck_assert_status_ok(mc_te_create(&r, &ranged));
    ck_assert_msg((te_port(ranged) >= 14290) && (te_port(ranged) <= 14299),
                  "port %u should be in the requested range", (unsigned)te_port(ranged));
    mc_te_destroy(ranged);
    r.port_min = 200;
    r.port_max = 100;
    ck_assert_status_eq(mc_te_create(&r, &ranged), MC_INVALID_PARAMS);
    mc_te_destroy(NULL);
}
END_TEST

START_TEST(test_protocols_and_metadata_refused)
{
    mc_te_params_t p = {.field_mask = MC_TE_PARAM_PROTOCOL, .protocol = "rdma"};
    mc_te_h te       = NULL;
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_msg(strstr(mc_last_error_detail(), "rdma") != NULL,
                  "the detail should name rdma: %s", mc_last_error_detail());
    p.protocol = "cxl";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_int_eq(mc_te_protocol_built("cxl"), 0);
    ck_assert_int_eq(mc_te_protocol_built("tcp"), 1);
    ck_assert_int_eq(mc_te_protocol_built(NULL), 0);
#ifndef MC_HAVE_FABRIC
    p.protocol = "efa";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_int_eq(mc_te_protocol_built("efa"), 0);
#else
    ck_assert_int_eq(mc_te_protocol_built("EFA"), 1);
#endif
    p.protocol = "ascend";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    p.protocol = "carrier-pigeon";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_INVALID_PARAMS);
    /* redis metadata: a build with hiredis cannot publish to a redis that
     * is not there (port 1); one without refuses it; a path is refused */
    mc_te_params_t m = {.field_mask = MC_TE_PARAM_METADATA_SERVER,
                        .metadata_server = "redis://127.0.0.1:1"};
    ck_assert_status_eq(mc_te_create(&m, &te),
                        mc_redis_available() ? MC_RPC_FAIL : MC_UNAVAILABLE_IN_CURRENT_MODE);
    m.metadata_server = "redis://127.0.0.1:6379/0";
    ck_assert_status_eq(mc_te_create(&m, &te), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "redis") != NULL,
                  "the detail should name the redis connection string: %s",
                  mc_last_error_detail());
    /* etcd is supported; with no etcd listening the engine cannot publish
     * its descriptor and says so (port 1: nothing listens there) */
    m.metadata_server = "etcd://127.0.0.1:1";
    ck_assert_status_eq(mc_te_create(&m, &te), MC_RPC_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "127.0.0.1:1") != NULL,
                  "the detail should name the etcd endpoint: %s", mc_last_error_detail());
    m.metadata_server = "127.0.0.1:1"; /* upstream: bare host:port means etcd */
    ck_assert_status_eq(mc_te_create(&m, &te), MC_RPC_FAIL);
    m.metadata_server = "etcd://"; /* no endpoint at all */
    ck_assert_status_eq(mc_te_create(&m, &te), MC_INVALID_PARAMS);
    ck_assert_msg(te == NULL, "a refused create should not write the handle");
    p.protocol = "tcp";
    ck_assert_status_ok(mc_te_create(&p, &te));
    mc_te_destroy(te);
}
END_TEST

START_TEST(test_mem_reg_rules)
{
    uint8_t *buf = malloc(3 * 4096);
    ck_assert_status_eq(mc_te_mem_reg(A, NULL, 10, "", 0), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_mem_reg(A, buf, 0, "", 0), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_mem_reg(A, buf, 10, "", 0x80), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_mem_reg(A, (void *)(UINTPTR_MAX - 10), 100, "", 0),
                        MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_mem_reg(A, buf + 4096, 4096, "cpu:0", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_eq(mc_te_mem_reg(A, buf + 4096, 4096, "", 0), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_mem_reg(A, buf + 4000, 200, "", 0), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_mem_reg(A, buf + 8000, 200, "", 0), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_mem_reg(A, buf, 3 * 4096, "", 0), MC_INVALID_PARAMS);
    /* touching neighbours are fine */
    ck_assert_status_ok(mc_te_mem_reg(A, buf, 4096, "", 0));
    ck_assert_status_ok(mc_te_mem_reg(A, buf + 8192, 4096, "", 0));
    ck_assert(mc_te_mem_is_registered(A, buf + 4096, 4096));
    ck_assert(mc_te_mem_is_registered(A, buf + 5000, 10));
    ck_assert_msg(!mc_te_mem_is_registered(A, buf + 4000, 200),
                  "a range spanning two regions is not inside one region");
    ck_assert(!mc_te_mem_is_registered(A, buf + 3 * 4096, 1));
    ck_assert_status_eq(mc_te_mem_dereg(A, buf + 4097), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_mem_dereg(A, buf + 4096));
    ck_assert(!mc_te_mem_is_registered(A, buf + 5000, 10));
    ck_assert_status_eq(mc_te_mem_dereg(A, buf + 4096), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_mem_dereg(A, buf));
    ck_assert_status_ok(mc_te_mem_dereg(A, buf + 8192));
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_sizes)
{
    static const size_t sizes[] = {1, 4096, MiB + 7, 16 * MiB};
    size_t cap     = 16 * MiB + 64;
    uint8_t *tgt   = malloc(cap);
    uint8_t *src   = malloc(cap);
    uint8_t *back  = malloc(cap);
    memset(tgt, 0, cap);
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "cpu:0", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    ck_assert_msg(seg != 0, "a remote segment should not get the self id");
    ck_assert_uint_eq(te_open(A, B), seg);

    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        size_t n    = sizes[i];
        size_t off  = (i * 13) % 64; /* unaligned addresses too */
        uint64_t at = (uint64_t)(uintptr_t)(tgt + off);
        te_fill(src, n, (uint32_t)i + 1);
        memset(back, 0xee, n);
        ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, at, n, seg));
        ck_assert_msg(memcmp(tgt + off, src, n) == 0, "the target should hold the %zu written bytes",
                      n);
        ck_assert_status_ok(te_xfer1(A, MC_TE_READ, back, at, n, seg));
        ck_assert_msg(memcmp(back, src, n) == 0, "reading back %zu bytes should match", n);
    }
    /* zero-length requests are no-ops */
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, NULL, (uint64_t)(uintptr_t)tgt, 0, seg));
    free(src);
    free(back);
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
}
END_TEST

START_TEST(test_batch_one_peer)
{
    enum { N = 96 };
    size_t chunk    = 9000; /* odd size: slices and requests do not line up */
    size_t big      = 9 * MiB + 3; /* above the slice size: split across lanes */
    size_t cap      = N * chunk + big;
    uint8_t *tgt    = calloc(1, cap);
    uint8_t *src    = malloc(cap);
    uint8_t *back   = malloc(cap);
    mc_te_request_t reqs[N + 1];
    mc_status_t st[N + 1];

    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "cpu:0", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, cap, 77);
    for (size_t i = 0; i <= N; i++) {
        size_t off = i * chunk;
        reqs[i]    = (mc_te_request_t){MC_TE_WRITE, src + off, (uint64_t)(uintptr_t)(tgt + off),
                                       (i == N) ? big : chunk, seg};
        st[i]      = MC_INTERNAL_ERROR;
    }
    ck_assert_status_ok(mc_te_transfer(A, reqs, N + 1, st));
    for (size_t i = 0; i <= N; i++)
        ck_assert_msg(st[i] == MC_OK, "request %zu should succeed", i);
    ck_assert_msg(memcmp(tgt, src, cap) == 0, "the batch should land byte-exact");
    memset(back, 0, cap);
    for (size_t i = 0; i <= N; i++) {
        reqs[i].op    = MC_TE_READ;
        reqs[i].local = back + i * chunk;
    }
    ck_assert_status_ok(mc_te_transfer(A, reqs, N + 1, NULL));
    ck_assert_msg(memcmp(back, src, cap) == 0, "the batch read should match");

    /* one bad request fails alone; the others still run */
    memset(back, 0, cap);
    reqs[5].remote  = (uint64_t)(uintptr_t)(tgt + cap - 10);
    reqs[5].length  = 100;
    reqs[9].segment = 12345;
    ck_assert_status_eq(mc_te_transfer(A, reqs, N + 1, st), MC_INVALID_READ);
    ck_assert_status_eq(st[5], MC_INVALID_READ);
    ck_assert_msg(strstr(mc_last_error_detail(), "refused") != NULL,
                  "the detail should describe the first failing request: %s",
                  mc_last_error_detail());
    ck_assert_status_eq(st[9], MC_INVALID_PARAMS);
    ck_assert_status_ok(st[6]);
    ck_assert_msg(memcmp(back + 6 * chunk, src + 6 * chunk, chunk) == 0,
                  "a good request next to a bad one should complete");
    ck_assert_status_ok(mc_te_transfer(A, reqs, 0, NULL));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
    free(src);
    free(back);
}
END_TEST

START_TEST(test_batch_two_peers)
{
    enum { N = 40 };
    size_t chunk = 64 * 1024;
    mc_te_h C    = te_new("127.0.0.1", NULL);
    uint8_t *tb  = calloc(1, N * chunk);
    uint8_t *tc  = calloc(1, N * chunk);
    uint8_t *src = malloc(2 * N * chunk);
    uint8_t *back = calloc(1, 2 * N * chunk);
    mc_te_request_t reqs[2 * N];

    ck_assert_status_ok(mc_te_mem_reg(B, tb, N * chunk, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(mc_te_mem_reg(C, tc, N * chunk, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t sb = te_open(A, B), sc = te_open(A, C);
    ck_assert_msg(sb != sc, "two peers should get two ids");
    te_fill(src, 2 * N * chunk, 5);
    for (size_t i = 0; i < 2 * N; i++) {
        int to_c   = (int)(i & 1);
        uint8_t *t = (to_c ? tc : tb) + (i / 2) * chunk;
        reqs[i]    = (mc_te_request_t){MC_TE_WRITE, src + i * chunk, (uint64_t)(uintptr_t)t, chunk,
                                       to_c ? sc : sb};
    }
    ck_assert_status_ok(mc_te_transfer(A, reqs, 2 * N, NULL));
    for (size_t i = 0; i < 2 * N; i++) {
        uint8_t *t = ((i & 1) ? tc : tb) + (i / 2) * chunk;
        ck_assert_msg(memcmp(t, src + i * chunk, chunk) == 0, "request %zu should land", i);
        reqs[i].op    = MC_TE_READ;
        reqs[i].local = back + i * chunk;
    }
    ck_assert_status_ok(mc_te_transfer(A, reqs, 2 * N, NULL));
    ck_assert_msg(memcmp(back, src, 2 * N * chunk) == 0, "reads from two peers should match");
    mc_te_destroy(C);
    ck_assert_status_ok(mc_te_mem_dereg(B, tb));
    free(tb);
    free(tc);
    free(src);
    free(back);
}
END_TEST

/* Guarded target: [guard | region | guard], guards never registered. */
#define GUARD 4096u
#define REG   65536u

static void check_untouched(const uint8_t *mem, const uint8_t *snap, const char *what)
{
    ck_assert_msg(memcmp(mem, snap, GUARD + REG + GUARD) == 0,
                  "%s: target memory should be untouched", what);
}

START_TEST(test_out_of_range_refused)
{
    uint8_t *mem  = malloc(GUARD + REG + GUARD);
    uint8_t *snap = malloc(GUARD + REG + GUARD);
    uint8_t *loc  = malloc(2 * REG);
    uint8_t *reg  = mem + GUARD;
    uint64_t base = (uint64_t)(uintptr_t)reg;
    static int other_static_object;
    struct {
        const char *what;
        uint64_t addr;
        uint64_t len;
    } bad[] = {
        {"crossing the end", base + REG - 10, 20},
        {"one past the end", base + REG, 1},
        {"starting before", base - 1, 16},
        {"covering it all and more", base - GUARD, REG + 2 * GUARD},
        {"length UINT64_MAX", base, UINT64_MAX},
        {"length wrapping from the middle", base + 100, UINT64_MAX - 50},
        {"unregistered memory", (uint64_t)(uintptr_t)&other_static_object, 4},
        {"address zero", 0, 8},
    };

    te_fill(mem, GUARD + REG + GUARD, 9);
    memcpy(snap, mem, GUARD + REG + GUARD);
    ck_assert_status_ok(mc_te_mem_reg(B, reg, REG, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(loc, 2 * REG, 10);
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        uint64_t len = bad[i].len;
        mc_status_t w, r;
        w = te_xfer1(A, MC_TE_WRITE, loc, bad[i].addr, len, seg);
        ck_assert_msg(w == MC_INVALID_WRITE, "a write %s should be refused, got %s", bad[i].what,
                      mc_status_name(w));
        check_untouched(mem, snap, bad[i].what);
        r = te_xfer1(A, MC_TE_READ, loc, bad[i].addr, len, seg);
        ck_assert_msg(r == MC_INVALID_READ, "a read %s should be refused, got %s", bad[i].what,
                      mc_status_name(r));
        /* and the engine keeps serving */
        ck_assert_status_ok(te_xfer1(A, MC_TE_READ, loc, base + 8, 64, seg));
        ck_assert_msg(memcmp(loc, reg + 8, 64) == 0, "a valid read after a refusal should work");
    }
    /* exactly the region works */
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, loc, base, REG, seg));
    /* a petabyte request in a batch is refused, not cut into a billion slices */
    mc_te_request_t two[2] = {{MC_TE_READ, loc, base, 1ull << 50, seg},
                              {MC_TE_READ, loc, base + 64, 64, seg}};
    mc_status_t st2[2];
    ck_assert_status_eq(mc_te_transfer(A, two, 2, st2), MC_INVALID_READ);
    ck_assert_status_eq(st2[0], MC_INVALID_READ);
    ck_assert_status_ok(st2[1]);
    ck_assert_status_eq(mc_te_transfer(A, two, 1, st2), MC_INVALID_READ);
    ck_assert_status_ok(mc_te_mem_dereg(B, reg));
    free(mem);
    free(snap);
    free(loc);
}
END_TEST

/* ---- raw sockets against the target: only its own check stands ---------- */

static int raw_connect(mc_te_h te)
{
    int fd = mc_tcp_connect("127.0.0.1", te_port(te), 2000);
    ck_assert_msg(fd >= 0, "connecting to the data port should work");
    mc_tcp_tune(fd, 5);
    return fd;
}

static void raw_send_req(int fd, uint8_t opcode, uint64_t addr, uint64_t len)
{
    uint8_t h[MC_TE_REQ_HDR_SIZE];
    mc_te_req_encode(h, opcode, addr, len);
    ck_assert_int_eq(mc_write_full(fd, h, sizeof(h)), 0);
}

static mc_te_resp_hdr_t raw_recv_resp(int fd)
{
    uint8_t b[MC_TE_RESP_HDR_SIZE];
    mc_te_resp_hdr_t r;
    ck_assert_msg(mc_read_full(fd, b, sizeof(b)) == 0, "the target should answer");
    ck_assert_msg(mc_te_resp_decode(b, &r) == 0, "the answer should be well-formed");
    return r;
}

/* True when the peer closed fd within timeout_ms (bounded poll). */
static int raw_closed_within(int fd, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    uint8_t junk[256];
    for (;;) {
        uint64_t now = mc_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (now >= deadline)
            return 0;
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
        if ((n == 0) || ((n < 0) && (errno == ECONNRESET)))
            return 1;
    }
}

START_TEST(test_raw_range_checks_on_target)
{
    uint8_t *mem  = malloc(GUARD + REG + GUARD);
    uint8_t *snap = malloc(GUARD + REG + GUARD);
    uint8_t *reg  = mem + GUARD;
    uint64_t base = (uint64_t)(uintptr_t)reg;
    uint8_t payload[64];
    uint8_t back[64];
    mc_te_resp_hdr_t r;
    int fd;

    te_fill(mem, GUARD + REG + GUARD, 3);
    memcpy(snap, mem, GUARD + REG + GUARD);
    ck_assert_status_ok(mc_te_mem_reg(B, reg, REG, "", MC_TE_MEM_REMOTE_ACCESS));

    /* a refused READ is answered; the connection carries on */
    fd = raw_connect(B);
    raw_send_req(fd, MC_TE_OPC_READ, base + REG - 8, 16);
    r = raw_recv_resp(fd);
    ck_assert_int_eq(r.status, MC_INVALID_READ);
    ck_assert_uint_eq(r.length, 0);
    raw_send_req(fd, MC_TE_OPC_READ, base, UINT64_MAX);
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_INVALID_READ);
    raw_send_req(fd, MC_TE_OPC_READ, UINT64_MAX - 4, 8);
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_INVALID_READ);
    raw_send_req(fd, MC_TE_OPC_READ, base + 16, sizeof(back));
    r = raw_recv_resp(fd);
    ck_assert_int_eq(r.status, MC_OK);
    ck_assert_uint_eq(r.length, sizeof(back));
    ck_assert_int_eq(mc_read_full(fd, back, sizeof(back)), 0);
    ck_assert_msg(memcmp(back, reg + 16, sizeof(back)) == 0, "a valid raw read should match");

    /* a refused WRITE is answered, its payload never read, the connection closed */
    memset(payload, 0xab, sizeof(payload));
    raw_send_req(fd, MC_TE_OPC_WRITE, base - 32, sizeof(payload));
    (void)mc_write_full(fd, payload, sizeof(payload));
    r = raw_recv_resp(fd);
    ck_assert_int_eq(r.status, MC_INVALID_WRITE);
    ck_assert_msg(raw_closed_within(fd, 5000), "the target should close after a refused write");
    close(fd);
    check_untouched(mem, snap, "raw write before the region");

    fd = raw_connect(B);
    raw_send_req(fd, MC_TE_OPC_WRITE, base + REG - 8, UINT64_MAX);
    (void)mc_write_full(fd, payload, sizeof(payload));
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_INVALID_WRITE);
    ck_assert(raw_closed_within(fd, 5000));
    close(fd);
    check_untouched(mem, snap, "raw write of UINT64_MAX bytes");

    /* and a good raw write lands */
    fd = raw_connect(B);
    raw_send_req(fd, MC_TE_OPC_WRITE, base + 100, sizeof(payload));
    ck_assert_int_eq(mc_write_full(fd, payload, sizeof(payload)), 0);
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_OK);
    ck_assert_msg(memcmp(reg + 100, payload, sizeof(payload)) == 0, "a raw write should land");
    close(fd);
    ck_assert_status_ok(mc_te_mem_dereg(B, reg));
    free(mem);
    free(snap);
}
END_TEST

START_TEST(test_garbage_headers_disconnect)
{
    uint8_t *tgt = calloc(1, 4096);
    uint8_t src[256], back[256];
    static const struct {
        const char *what;
        int byte;     /* offset to corrupt, -1: all garbage */
        uint8_t value;
    } bad[] = {
        {"garbage", -1, 0}, {"bad magic", 0, 'X'}, {"bad version", 4, 9},
        {"bad opcode", 5, 77}, {"flags set", 6, 1}, {"reserved set", 27, 1},
    };
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, sizeof(src), 1);
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        uint8_t h[MC_TE_REQ_HDR_SIZE];
        int fd = raw_connect(B);
        mc_te_req_encode(h, MC_TE_OPC_READ, (uint64_t)(uintptr_t)tgt, 16);
        if (bad[i].byte < 0)
            te_fill(h, sizeof(h), 99);
        else
            h[bad[i].byte] = bad[i].value;
        ck_assert_int_eq(mc_write_full(fd, h, sizeof(h)), 0);
        /* meanwhile another client is served normally */
        ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)tgt + i, 200, seg));
        ck_assert_status_ok(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)tgt + i, 200, seg));
        ck_assert_msg(memcmp(back, src, 200) == 0, "the other client should keep working");
        ck_assert_msg(raw_closed_within(fd, 5000), "a %s header should close the connection",
                      bad[i].what);
        close(fd);
    }
    /* a truncated header followed by a close is harmless too */
    int fd = raw_connect(B);
    ck_assert_int_eq(mc_write_full(fd, "MCTE", 4), 0);
    close(fd);
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)tgt, 16, seg));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
}
END_TEST

START_TEST(test_dereg_then_access_refused)
{
    uint8_t *tgt = calloc(1, 8192);
    uint8_t *loc = malloc(8192);
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, 8192, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(loc, 8192, 4);
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, loc, (uint64_t)(uintptr_t)tgt, 8192, seg));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    memset(tgt, 0, 8192);
    ck_assert_status_eq(te_xfer1(A, MC_TE_WRITE, loc, (uint64_t)(uintptr_t)tgt, 100, seg),
                        MC_INVALID_WRITE);
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, loc, (uint64_t)(uintptr_t)tgt, 100, seg),
                        MC_INVALID_READ);
    for (size_t i = 0; i < 8192; i++)
        ck_assert_msg(tgt[i] == 0, "deregistered memory should not be written");
    /* the target refuses too, whatever the initiator believes */
    int fd = raw_connect(B);
    raw_send_req(fd, MC_TE_OPC_READ, (uint64_t)(uintptr_t)tgt, 16);
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_INVALID_READ);
    close(fd);
    /* registering again makes it reachable again (the descriptor is refreshed) */
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, 8192, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, loc, (uint64_t)(uintptr_t)tgt, 8192, seg));
    ck_assert(memcmp(tgt, loc, 8192) == 0);
    /* local-only registration is not served */
    uint8_t *priv = calloc(1, 4096);
    ck_assert_status_ok(mc_te_mem_reg(B, priv, 4096, "", 0));
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, loc, (uint64_t)(uintptr_t)priv, 16, seg),
                        MC_INVALID_READ);
    fd = raw_connect(B);
    raw_send_req(fd, MC_TE_OPC_READ, (uint64_t)(uintptr_t)priv, 16);
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_INVALID_READ);
    close(fd);
    ck_assert_status_ok(mc_te_mem_dereg(B, priv));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(priv);
    free(tgt);
    free(loc);
}
END_TEST

START_TEST(test_stale_descriptor_refused_in_pipeline)
{
    enum { N = 12 };
    uint8_t *r1 = calloc(1, 65536), *r2 = calloc(1, 65536);
    uint8_t *src = malloc(N * 1000), *back = calloc(1, N * 1000);
    mc_te_request_t reqs[N];
    mc_status_t st[N];

    ck_assert_status_ok(mc_te_mem_reg(B, r1, 65536, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(mc_te_mem_reg(B, r2, 65536, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    /* B withdraws r1 without telling A (P2P has no push): A's cached
     * descriptor still lists it, so only the target's check can refuse */
    ck_assert_status_ok(mc_te_mem_dereg(B, r1));
    te_fill(src, N * 1000, 21);
    for (size_t i = 0; i < N; i++) {
        uint8_t *t = ((i == 3) || (i == 7)) ? r1 : r2;
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + i * 1000,
                                    (uint64_t)(uintptr_t)(t + i * 1000), 1000, seg};
    }
    ck_assert_status_eq(mc_te_transfer(A, reqs, N, st), MC_INVALID_WRITE);
    for (size_t i = 0; i < N; i++) {
        if ((i == 3) || (i == 7)) {
            ck_assert_msg(st[i] == MC_INVALID_WRITE, "write %zu into withdrawn memory should be "
                          "refused by the target, got %s", i, mc_status_name(st[i]));
        } else {
            ck_assert_msg(st[i] == MC_OK, "write %zu should succeed (after a refusal closed the "
                          "connection, the rest of the run is resent), got %s", i,
                          mc_status_name(st[i]));
            ck_assert(memcmp(r2 + i * 1000, src + i * 1000, 1000) == 0);
        }
    }
    for (size_t i = 0; i < 65536; i++)
        ck_assert_msg(r1[i] == 0, "withdrawn memory should be untouched");
    for (size_t i = 0; i < N; i++) {
        reqs[i].op    = MC_TE_READ;
        reqs[i].local = back + i * 1000;
    }
    ck_assert_status_eq(mc_te_transfer(A, reqs, N, st), MC_INVALID_READ);
    for (size_t i = 0; i < N; i++) {
        if ((i == 3) || (i == 7))
            ck_assert_status_eq(st[i], MC_INVALID_READ);
        else
            ck_assert_msg((st[i] == MC_OK) && (memcmp(back + i * 1000, src + i * 1000, 1000) == 0),
                          "read %zu should succeed", i);
    }
    ck_assert_status_ok(mc_te_mem_dereg(B, r2));
    free(r1);
    free(r2);
    free(src);
    free(back);
}
END_TEST

typedef struct dereg_arg {
    mc_te_h te;
    void *addr;
    int done; /* atomic */
} dereg_arg_t;

static void *dereg_thread(void *p)
{
    dereg_arg_t *a = p;
    mc_status_t st = mc_te_mem_dereg(a->te, a->addr);
    __atomic_store_n(&a->done, st == MC_OK ? 1 : -1, __ATOMIC_RELEASE);
    return NULL;
}

START_TEST(test_dereg_waits_for_inflight)
{
    /* Half the payload is far more than loopback socket buffers hold (a few
     * MiB each way), so once it is sent the target is inside the write. */
    size_t n      = 64 * MiB;
    uint8_t *tgt  = calloc(1, n);
    uint8_t *data = malloc(n);
    dereg_arg_t a = {B, tgt, 0};
    pthread_t th;
    int fd;

    te_fill(data, n, 8);
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, n, "", MC_TE_MEM_REMOTE_ACCESS));
    fd = raw_connect(B);
    raw_send_req(fd, MC_TE_OPC_WRITE, (uint64_t)(uintptr_t)tgt, n);
    ck_assert_int_eq(mc_write_full(fd, data, n / 2), 0);
    /* the target is now inside the write, holding the region */
    ck_assert_int_eq(pthread_create(&th, NULL, dereg_thread, &a), 0);
    (void)poll(NULL, 0, 200);
    ck_assert_msg(__atomic_load_n(&a.done, __ATOMIC_ACQUIRE) == 0,
                  "dereg should wait while a served write uses the region");
    ck_assert_int_eq(mc_write_full(fd, data + n / 2, n - n / 2), 0);
    ck_assert_int_eq(raw_recv_resp(fd).status, MC_OK);
    pthread_join(th, NULL);
    ck_assert_msg(a.done == 1, "dereg should succeed once the write finished");
    ck_assert_msg(memcmp(tgt, data, n) == 0, "the in-flight write should have completed");
    close(fd);
    free(tgt);
    free(data);
}
END_TEST

START_TEST(test_self_target_memcpy)
{
    uint8_t *mine = calloc(1, 8192);
    uint8_t *loc  = malloc(8192);
    mc_te_segment_id_t self = 99;
    ck_assert_status_ok(mc_te_segment_open(A, mc_te_local_name(A), &self));
    ck_assert_uint_eq(self, 0);
    ck_assert_status_ok(mc_te_mem_reg(A, mine, 8192, "", MC_TE_MEM_REMOTE_ACCESS));
    te_fill(loc, 8192, 6);
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, loc, (uint64_t)(uintptr_t)mine, 8192, self));
    ck_assert(memcmp(mine, loc, 8192) == 0);
    memset(loc, 0, 8192);
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, loc + 1, (uint64_t)(uintptr_t)mine + 1, 100, self));
    ck_assert(memcmp(loc + 1, mine + 1, 100) == 0);
    ck_assert_status_eq(te_xfer1(A, MC_TE_WRITE, loc, (uint64_t)(uintptr_t)mine + 8000, 193, self),
                        MC_INVALID_WRITE);
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, loc, (uint64_t)(uintptr_t)loc, 10, self),
                        MC_INVALID_READ);
    ck_assert_status_ok(mc_te_mem_dereg(A, mine));
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, loc, (uint64_t)(uintptr_t)mine, 10, self),
                        MC_INVALID_READ);
    free(mine);
    free(loc);
}
END_TEST

/*
 * mc_te_transfer_gen_sent runs its hook exactly once: over TCP after the
 * requests went out (the hook waits, bounded, for a WRITE's bytes to land
 * at the target, which they can only if they were sent before it) and
 * before the answers are taken (a READ's bytes are not in the caller's
 * buffer yet when it runs), and for this engine's own memory before the
 * bytes move (the target still holds its old bytes).  Also once for a
 * request refused before anything moved.
 */
typedef struct {
    int calls;
    const uint8_t *at;   /* the target bytes the hook looks at */
    const uint8_t *want; /* what they hold once the transfer's bytes landed */
    size_t len;
    int landed;          /* when the hook ran: 1 landed, 0 not yet */
    int wait;            /* wait (bounded) for them to land */
} sent_probe_t;

static void sent_probe(void *arg)
{
    sent_probe_t *p = arg;
    uint64_t end    = mc_now_ms() + 5000;
    p->calls++;
    if (p->at == NULL)
        return;
    do {
        p->landed = memcmp(p->at, p->want, p->len) == 0;
        if (p->landed || !p->wait)
            break;
        usleep(200);
    } while (mc_now_ms() < end);
}

/* @p n requests of @p each bytes between @p local and @p remote (on
 * @p seg, as @p op) through mc_te_transfer_gen_sent with sent_probe
 * looking at @p at (wanting @p want there, @p wait: until it is): the
 * hook ran once, and found the bytes landed as @p landed says. */
static void sent_check(mc_te_op_t op, mc_te_segment_id_t seg, uint8_t *local, uint8_t *remote,
                       size_t n, size_t each, const uint8_t *at, const uint8_t *want, int wait,
                       int landed, const char *what)
{
    mc_te_request_t r[4];
    mc_status_t st[4];
    sent_probe_t p = {0, at, want, n * each, !landed, wait};
    ck_assert_uint_le(n, 4);
    for (size_t i = 0; i < n; i++)
        r[i] = (mc_te_request_t){op, local + i * each, (uint64_t)(uintptr_t)(remote + i * each),
                                 each, seg};
    ck_assert_status_ok(mc_te_transfer_gen_sent(A, r, NULL, n, st, sent_probe, &p));
    ck_assert_int_eq(p.calls, 1);
    ck_assert_msg(p.landed == landed, "the hook ran %s", what);
}

START_TEST(test_transfer_sent_hook)
{
    size_t cap    = 4 * MiB;
    uint8_t *tgt  = calloc(1, cap);
    uint8_t *src  = malloc(cap);
    uint8_t *back = calloc(1, cap);
    uint8_t *mine = calloc(1, 8192);
    mc_te_request_t r;
    mc_status_t st;
    mc_te_segment_id_t seg, self = 99;
    sent_probe_t p = {0, NULL, NULL, 0, 0, 0};

    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "cpu:0", MC_TE_MEM_REMOTE_ACCESS));
    seg = te_open(A, B);
    te_fill(src, cap, 21);

    /* WRITEs over TCP, one and a pipelined run: their bytes reach the
     * target while the hook waits */
    sent_check(MC_TE_WRITE, seg, src, tgt, 1, 4096, tgt, src, 1, 1, "before the WRITE was sent");
    memset(tgt, 0, cap);
    sent_check(MC_TE_WRITE, seg, src, tgt, 4, 8192, tgt, src, 1, 1, "before the run was sent");

    /* READs -- one, a pipelined run, slices over lanes: the hook runs
     * before their answers are taken */
    memcpy(tgt, src, cap);
    sent_check(MC_TE_READ, seg, back, tgt, 1, 4096, back, src, 0, 0,
               "after the READ's answer was taken");
    ck_assert(memcmp(back, src, 4096) == 0);
    memset(back, 0, cap);
    sent_check(MC_TE_READ, seg, back, tgt, 4, 8192, back, src, 0, 0,
               "after the run's answers were taken");
    ck_assert(memcmp(back, src, 4 * 8192) == 0);
    memset(back, 0, cap);
    sent_check(MC_TE_READ, seg, back, tgt, 1, 2 * MiB + 5, back, src, 0, 0,
               "after the slices' answers were taken");
    ck_assert(memcmp(back, src, 2 * MiB + 5) == 0);

    /* refused before anything moved: still once */
    r = (mc_te_request_t){MC_TE_READ, back, (uint64_t)(uintptr_t)tgt + cap - 8, 64, seg};
    ck_assert_status_eq(mc_te_transfer_gen_sent(A, &r, NULL, 1, &st, sent_probe, &p),
                        MC_INVALID_READ);
    ck_assert_int_eq(p.calls, 1);

    /* this engine's own memory: the hook runs before the copy */
    ck_assert_status_ok(mc_te_segment_open(A, mc_te_local_name(A), &self));
    ck_assert_status_ok(mc_te_mem_reg(A, mine, 8192, "", MC_TE_MEM_REMOTE_ACCESS));
    sent_check(MC_TE_WRITE, self, src, mine, 1, 8192, mine, src, 0, 0, "after the copy");
    ck_assert(memcmp(mine, src, 8192) == 0);

    /* no hook: a plain transfer */
    r = (mc_te_request_t){MC_TE_READ, back, (uint64_t)(uintptr_t)mine, 8192, self};
    ck_assert_status_ok(mc_te_transfer_gen_sent(A, &r, NULL, 1, &st, NULL, NULL));

    ck_assert_status_ok(mc_te_mem_dereg(A, mine));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(mine);
    free(back);
    free(src);
    free(tgt);
}
END_TEST

/*
 * Generation reads (docs/transfer.md, "Generations"): a READ that names a
 * registration generation is served only from a region registered with
 * it -- by a peer over TCP, one request, a pipelined run or the slices of
 * a large read, and by this engine for its own memory.  A READ naming
 * none is not affected.  (Writes: test_generation_writes.)
 */
START_TEST(test_generation_reads)
{
    const uint64_t G = UINT64_C(0x8000001234000000), H = UINT64_C(0x8000009999000000);
    size_t cap          = 2 * MiB;
    uint8_t *tgt        = malloc(cap);
    uint8_t *mine       = malloc(4096);
    uint8_t *back       = malloc(cap);
    uint64_t base       = (uint64_t)(uintptr_t)tgt;
    mc_te_request_t r[4];
    uint64_t gens[4]    = {G, H, 0, G};
    mc_status_t st[4];
    mc_te_segment_id_t self;

    te_fill(tgt, cap, 41);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, G));
    mc_te_segment_id_t seg = te_open(A, B);
    for (int i = 0; i < 4; i++)
        r[i] = (mc_te_request_t){MC_TE_READ, back + 100 * i, base + 100 * i, 64, seg};
    /* one at a time */
    ck_assert_status_ok(mc_te_transfer_gen(A, &r[0], &gens[0], 1, NULL));
    ck_assert(memcmp(back, tgt, 64) == 0);
    ck_assert_status_eq(mc_te_transfer_gen(A, &r[1], &gens[1], 1, NULL), MC_INVALID_READ);
    ck_assert_status_ok(mc_te_transfer_gen(A, &r[2], &gens[2], 1, NULL));
    /* a pipelined run: only the request naming another generation fails */
    memset(back, 0, cap);
    ck_assert_status_eq(mc_te_transfer_gen(A, r, gens, 4, st), MC_INVALID_READ);
    ck_assert_status_ok(st[0]);
    ck_assert_status_eq(st[1], MC_INVALID_READ);
    ck_assert_status_ok(st[2]);
    ck_assert_status_ok(st[3]);
    ck_assert_msg(memcmp(back + 300, tgt + 300, 64) == 0, "the run goes on after a refusal");
    /* a read cut into slices over several lanes */
    r[0].length = cap;
    ck_assert_status_eq(mc_te_transfer_gen(A, &r[0], &gens[1], 1, NULL), MC_INVALID_READ);
    memset(back, 0, cap);
    ck_assert_status_ok(mc_te_transfer_gen(A, &r[0], &gens[0], 1, NULL));
    ck_assert(memcmp(back, tgt, cap) == 0);
    /* registered again: the old generation is refused, the new one served */
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    ck_assert_status_ok(mc_te_mem_reg_gen(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, H));
    r[0].length = 64;
    ck_assert_status_eq(mc_te_transfer_gen(A, &r[0], &gens[0], 1, NULL), MC_INVALID_READ);
    ck_assert_status_ok(mc_te_transfer_gen(A, &r[0], &gens[1], 1, NULL));
    /* this engine's own memory */
    ck_assert_status_ok(mc_te_segment_open(A, mc_te_local_name(A), &self));
    ck_assert_status_ok(mc_te_mem_reg_gen(A, mine, 4096, "", MC_TE_MEM_REMOTE_ACCESS, -1, G));
    r[0] = (mc_te_request_t){MC_TE_READ, back, (uint64_t)(uintptr_t)mine, 64, self};
    ck_assert_status_ok(mc_te_transfer_gen(A, &r[0], &gens[0], 1, NULL));
    ck_assert_status_eq(mc_te_transfer_gen(A, &r[0], &gens[1], 1, NULL), MC_INVALID_READ);
    ck_assert_int_eq(mc_te_read_direct_gen(A, &r[0], &gens[1], 1, &st[0]), 1);
    ck_assert_status_eq(st[0], MC_INVALID_READ);
    ck_assert_int_eq(mc_te_read_direct_gen(A, &r[0], &gens[0], 1, &st[0]), 1);
    ck_assert_status_ok(st[0]);
    ck_assert_status_ok(mc_te_mem_dereg(A, mine));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
    free(mine);
    free(back);
}
END_TEST

/*
 * The reuse counter of a generation (common/gen.h): a request naming a
 * later counter of a region's registration makes the holder adopt it, and
 * from then on reads naming the earlier one are refused, as are requests
 * of another registration.  Writes naming an earlier counter still land
 * (their own placements) down to the last fence, a counter that is a
 * multiple of MC_GEN_FENCE_STEP.  A WRITE naming a later counter waits
 * until the requests of the earlier one are done: its bytes never land
 * under a reader still copying the old ones.
 */
typedef struct gen_writer {
    mc_te_h te;
    mc_te_request_t rq;
    uint64_t gen;
    mc_status_t st;
    int done;
} gen_writer_t;

static void *gen_writer_main(void *arg)
{
    gen_writer_t *w = arg;
    w->st           = mc_te_transfer_gen(w->te, &w->rq, &w->gen, 1, NULL);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

START_TEST(test_generation_counter)
{
    const uint64_t G = UINT64_C(0x8000004321000000), OTHER = UINT64_C(0x8000005555000001);
    const uint64_t G1 = mc_gen_next(G), G2 = mc_gen_next(G1);
    size_t cap        = 64 * 1024;
    uint8_t *tgt      = malloc(cap);
    uint8_t *src      = malloc(cap);
    uint8_t *back     = malloc(cap);
    uint8_t *mine     = malloc(4096);
    uint64_t base     = (uint64_t)(uintptr_t)tgt;
    uint64_t g;
    mc_te_region_t *reg;
    mc_te_segment_id_t self;
    pthread_t th;
    int t;

    ck_assert(mc_gen_newer(G1, G) && mc_gen_newer(G2, G) && !mc_gen_newer(G, G1));
    ck_assert(!mc_gen_newer(OTHER, G) && !mc_gen_newer(G, G));
    te_fill(tgt, cap, 5);
    te_fill(src, cap, 9);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, G));
    mc_te_segment_id_t seg = te_open(A, B);
    mc_te_request_t rd     = {MC_TE_READ, back, base, 4096, seg};
    mc_te_request_t wr     = {MC_TE_WRITE, src, base, 4096, seg};
    g = G;
    ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
    g = G1; /* a later counter: adopted */
    ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
    ck_assert(memcmp(back, tgt, 4096) == 0);
    g = G; /* the earlier one: reads refused from now on */
    ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
    /* a write of it still lands: G is the registration's fence, not older */
    ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
    ck_assert(memcmp(tgt, src, 4096) == 0);
    g = OTHER;
    ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
    ck_assert_status_eq(mc_te_transfer_gen(A, &wr, &g, 1, NULL), MC_INVALID_WRITE);
    g = G1;
    ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
    ck_assert(memcmp(tgt, src, 4096) == 0);

    /* a request of G1 in progress on the holder: a write of G2 waits for it */
    reg = mc_te_region_acquire(B, base, 4096, MC_TE_MEM_REMOTE_ACCESS);
    ck_assert_ptr_nonnull(reg);
    t = mc_te_gen_enter(B, reg, G1, 0, 1000);
    ck_assert_int_ge(t, 0);
    gen_writer_t w = {A, {MC_TE_WRITE, src + 4096, base, 4096, seg}, G2, MC_TRANSFER_FAIL, 0};
    ck_assert_int_eq(pthread_create(&th, NULL, gen_writer_main, &w), 0);
    (void)poll(NULL, 0, 300);
    ck_assert_msg(!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST),
                  "a write of a later generation went ahead while a request of the earlier one "
                  "was in progress");
    ck_assert_msg(memcmp(tgt, src, 4096) == 0, "bytes landed under a request in progress");
    mc_te_gen_exit(reg, t);
    mc_te_region_release(B, reg);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_status_ok(w.st);
    ck_assert(memcmp(tgt, src + 4096, 4096) == 0);
    g = G1;
    ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
    g = G2;
    ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
    /* a fence: from then on writes of anything earlier are refused too,
     * with no byte changed */
    {
        const uint64_t F = mc_gen_fence_after(G2, MC_GEN_FENCE_STEP);
        ck_assert(mc_gen_is_fence(F) && mc_gen_newer(F, G2) && !mc_gen_is_fence(G2));
        g = F;
        ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
        memcpy(back, tgt, 4096);
        wr.local = src + 8192;
        g        = G2;
        ck_assert_status_eq(mc_te_transfer_gen(A, &wr, &g, 1, NULL), MC_INVALID_WRITE);
        ck_assert_msg(memcmp(tgt, back, 4096) == 0, "a write from before the fence landed");
        g = F;
        ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
        ck_assert(memcmp(tgt, src + 8192, 4096) == 0);
        /* past the fence, a write of a counter between it and the one now
         * (its own placement) lands */
        g = mc_gen_next(mc_gen_next(F));
        ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
        g = mc_gen_next(F);
        ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
        ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
        /* the remount fence: the step ahead, and the generation reported */
        ck_assert_int_eq(mc_te_gen_fence(B, base, &g), 0);
        ck_assert_uint_eq(g, mc_gen_fence_after(F, MC_GEN_REMOUNT_STEP));
        ck_assert_status_eq(mc_te_transfer_gen(A, &wr, &(uint64_t){F}, 1, NULL),
                            MC_INVALID_WRITE);
        ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
    }

    /* this engine's own memory: the same rules */
    ck_assert_status_ok(mc_te_segment_open(A, mc_te_local_name(A), &self));
    ck_assert_status_ok(mc_te_mem_reg_gen(A, mine, 4096, "", MC_TE_MEM_REMOTE_ACCESS, -1, G));
    rd = (mc_te_request_t){MC_TE_READ, back, (uint64_t)(uintptr_t)mine, 64, self};
    g  = G1;
    ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
    g = G;
    ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
    {
        mc_status_t st;
        ck_assert_int_eq(mc_te_read_direct_gen(A, &rd, &g, 1, &st), 1);
        ck_assert_status_eq(st, MC_INVALID_READ);
    }
    ck_assert_uint_eq(mc_te_gen_at(A, (uint64_t)(uintptr_t)mine), G1);
    ck_assert_status_ok(mc_te_mem_dereg(A, mine));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
    free(src);
    free(back);
    free(mine);
}
END_TEST

/*
 * Generation writes: a WRITE that names a registration generation lands
 * only in a region registered with it, and one naming another changes no
 * byte -- over TCP (one request, a pipelined run whose target closes after
 * the refusal, the slices of a large write) and in this engine's own
 * memory.  A WRITE naming none is served as before.
 */
START_TEST(test_generation_writes)
{
    const uint64_t G = UINT64_C(0x8000001234000000), H = UINT64_C(0x8000009999000000);
    size_t cap       = 2 * MiB;
    uint8_t *tgt     = malloc(cap);
    uint8_t *keep    = malloc(cap);
    uint8_t *src     = malloc(cap);
    uint8_t *mine    = malloc(4096);
    uint64_t base    = (uint64_t)(uintptr_t)tgt;
    mc_te_request_t w[4];
    uint64_t gens[4] = {G, H, 0, G};
    mc_status_t st[4];
    mc_te_segment_id_t self;

    te_fill(tgt, cap, 41);
    te_fill(src, cap, 97);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, G));
    mc_te_segment_id_t seg = te_open(A, B);
    for (int i = 0; i < 4; i++)
        w[i] = (mc_te_request_t){MC_TE_WRITE, src + 100 * i, base + 100 * i, 64, seg};
    /* one at a time */
    memcpy(keep, tgt, cap);
    ck_assert_status_eq(mc_te_transfer_gen(A, &w[1], &gens[1], 1, NULL), MC_INVALID_WRITE);
    ck_assert_msg(memcmp(tgt, keep, cap) == 0, "a refused write changed the target");
    ck_assert_status_ok(mc_te_transfer_gen(A, &w[0], &gens[0], 1, NULL));
    ck_assert(memcmp(tgt, src, 64) == 0);
    ck_assert_status_ok(mc_te_transfer_gen(A, &w[2], &gens[2], 1, NULL));
    ck_assert(memcmp(tgt + 200, src + 200, 64) == 0);
    /* a pipelined run: the refused write is the only one lost */
    te_fill(tgt, cap, 41);
    memcpy(keep, tgt, cap);
    ck_assert_status_eq(mc_te_transfer_gen(A, w, gens, 4, st), MC_INVALID_WRITE);
    ck_assert_status_ok(st[0]);
    ck_assert_status_eq(st[1], MC_INVALID_WRITE);
    ck_assert_status_ok(st[2]);
    ck_assert_status_ok(st[3]);
    ck_assert(memcmp(tgt, src, 64) == 0);
    ck_assert_msg(memcmp(tgt + 100, keep + 100, 64) == 0, "the refused write landed");
    ck_assert(memcmp(tgt + 200, src + 200, 64) == 0);
    ck_assert(memcmp(tgt + 300, src + 300, 64) == 0);
    /* a write cut into slices over several lanes */
    te_fill(tgt, cap, 41);
    w[0].length = cap;
    ck_assert_status_eq(mc_te_transfer_gen(A, &w[0], &gens[1], 1, NULL), MC_INVALID_WRITE);
    ck_assert_msg(memcmp(tgt, keep, cap) == 0, "a refused slice landed");
    ck_assert_status_ok(mc_te_transfer_gen(A, &w[0], &gens[0], 1, NULL));
    ck_assert(memcmp(tgt, src, cap) == 0);
    /* registered again: the old generation is refused, the new one served */
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    ck_assert_status_ok(mc_te_mem_reg_gen(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, H));
    te_fill(tgt, cap, 41);
    w[0].length = 64;
    ck_assert_status_eq(mc_te_transfer_gen(A, &w[0], &gens[0], 1, NULL), MC_INVALID_WRITE);
    ck_assert(memcmp(tgt, keep, 64) == 0);
    ck_assert_status_ok(mc_te_transfer_gen(A, &w[0], &gens[1], 1, NULL));
    ck_assert(memcmp(tgt, src, 64) == 0);
    /* this engine's own memory */
    ck_assert_status_ok(mc_te_segment_open(A, mc_te_local_name(A), &self));
    memset(mine, 0x5a, 4096);
    ck_assert_status_ok(mc_te_mem_reg_gen(A, mine, 4096, "", MC_TE_MEM_REMOTE_ACCESS, -1, G));
    w[0] = (mc_te_request_t){MC_TE_WRITE, src, (uint64_t)(uintptr_t)mine, 64, self};
    ck_assert_status_eq(mc_te_transfer_gen(A, &w[0], &gens[1], 1, NULL), MC_INVALID_WRITE);
    ck_assert_uint_eq(mine[0], 0x5a);
    ck_assert_status_ok(mc_te_transfer_gen(A, &w[0], &gens[0], 1, NULL));
    ck_assert(memcmp(mine, src, 64) == 0);
    ck_assert_status_ok(mc_te_mem_dereg(A, mine));
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
    free(keep);
    free(src);
    free(mine);
}
END_TEST

START_TEST(test_segment_open_errors)
{
    mc_te_segment_id_t id = 7;
    uint8_t buf[16];
    ck_assert_status_eq(mc_te_segment_open(A, "no-port-here", &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_segment_open(A, "", &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_segment_open(A, NULL, &id), MC_INVALID_PARAMS);
    /* a port nobody listens on: take one from an engine that is gone */
    mc_te_h gone = te_new("127.0.0.1", NULL);
    char name[64];
    snprintf(name, sizeof(name), "%s", mc_te_local_name(gone));
    mc_te_destroy(gone);
    uint64_t t0 = mc_now_ms();
    ck_assert_status_eq(mc_te_segment_open(A, name, &id), MC_TRANSFER_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "refused") != NULL,
                  "the detail should say the connection was refused: %s", mc_last_error_detail());
    ck_assert_msg(mc_now_ms() - t0 < 4000, "a refused connect should fail within the timeout");
    ck_assert_uint_eq(id, 7);
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, buf, 0, 16, 4242), MC_INVALID_PARAMS);
    mc_te_request_t r = {(mc_te_op_t)7, buf, 0, 16, 0};
    ck_assert_status_eq(mc_te_transfer(A, &r, 1, NULL), MC_INVALID_PARAMS);
    r = (mc_te_request_t){MC_TE_READ, NULL, 0, 16, 0};
    ck_assert_status_eq(mc_te_transfer(A, &r, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_transfer(NULL, &r, 1, NULL), MC_INVALID_PARAMS);
}
END_TEST

typedef struct worker_arg {
    mc_te_h te;
    mc_te_h target;
    uint8_t *tgt;
    size_t off, len;
    int ok;
} worker_arg_t;

static void *hammer(void *p)
{
    worker_arg_t *w = p;
    uint8_t *src = malloc(w->len), *back = malloc(w->len);
    mc_te_segment_id_t seg;
    w->ok = 0;
    if (mc_te_segment_open(w->te, mc_te_local_name(w->target), &seg) != MC_OK)
        goto out;
    for (int round = 0; round < 20; round++) {
        te_fill(src, w->len, (uint32_t)(w->off + round));
        mc_te_request_t r[2] = {
            {MC_TE_WRITE, src, (uint64_t)(uintptr_t)(w->tgt + w->off), w->len / 2, seg},
            {MC_TE_WRITE, src + w->len / 2, (uint64_t)(uintptr_t)(w->tgt + w->off + w->len / 2),
             w->len - w->len / 2, seg}};
        if (mc_te_transfer(w->te, r, 2, NULL) != MC_OK)
            goto out;
        mc_te_request_t rd = {MC_TE_READ, back, (uint64_t)(uintptr_t)(w->tgt + w->off), w->len, seg};
        if ((mc_te_transfer(w->te, &rd, 1, NULL) != MC_OK) || (memcmp(back, src, w->len) != 0))
            goto out;
    }
    w->ok = 1;
out:
    free(src);
    free(back);
    return NULL;
}

START_TEST(test_concurrent_callers)
{
    enum { T = 6 };
    size_t each  = 300 * 1024 + 11;
    uint8_t *tgt = calloc(T, each);
    pthread_t th[T];
    worker_arg_t w[T];
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, T * each, "", MC_TE_MEM_REMOTE_ACCESS));
    for (int i = 0; i < T; i++) {
        w[i] = (worker_arg_t){A, B, tgt, (size_t)i * each, each, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(w[i].ok, "caller thread %d should see all its transfers succeed", i);
    }
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
}
END_TEST

/* B stops; its name (host:port) in @p name. */
static void b_gone(char *name, size_t n)
{
    snprintf(name, n, "%s", mc_te_local_name(B));
    mc_te_destroy(B);
    B = NULL;
}

/* B starts again as @p name. */
static void b_back(const char *name)
{
    mc_te_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask     = MC_TE_PARAM_LOCAL_HOSTNAME;
    p.local_hostname = name;
    ck_assert_status_ok(mc_te_create(&p, &B));
}

START_TEST(test_peer_restart_behind_pooled_connection)
{
    uint8_t *t1 = calloc(1, 4096), *t2 = calloc(1, 4096);
    uint8_t src[512], back[512];
    char name[64];

    ck_assert_status_ok(mc_te_mem_reg(B, t1, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, sizeof(src), 12);
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t1, sizeof(src), seg));
    /* B goes away and comes back on the same port with other memory */
    b_gone(name, sizeof(name));
    b_back(name);
    ck_assert_status_ok(mc_te_mem_reg(B, t2, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    /* the pooled connection is dead; the request is retried on a new one,
     * and the stale descriptor is refreshed on the miss */
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t2, sizeof(src), seg));
    ck_assert(memcmp(t2, src, sizeof(src)) == 0);
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)t2, sizeof(back), seg));
    ck_assert(memcmp(back, src, sizeof(src)) == 0);
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)t1, 16, seg),
                        MC_INVALID_READ);
    ck_assert_status_ok(mc_te_mem_dereg(B, t2));
    free(t1);
    free(t2);
}
END_TEST

/*
 * A peer that refused a connection counts as down for a second: requests
 * fail at once, even once it is back.  mc_te_segment_revive forgets that
 * verdict for a second try (the store's write on a fresh placement), but
 * only one reached before the time it names: a verdict reached later, by
 * the write's own first try, stands.  The time is in nanoseconds: a
 * verdict reached in the same millisecond as the write began (the request
 * just before it timed out) counts as before it.
 */
START_TEST(test_revive_forgets_only_an_older_down_verdict)
{
    uint8_t *t = calloc(1, 4096);
    uint8_t src[256];
    char name[64];
    uint64_t before_verdict, after_verdict;

    ck_assert_status_ok(mc_te_mem_reg(B, t, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, sizeof(src), 21);
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t, sizeof(src), seg));
    b_gone(name, sizeof(name));
    /* gone: the pooled connection is dead and the reconnect refused */
    before_verdict = mc_now_ns();
    ck_assert_status_eq(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t, 16, seg),
                        MC_TRANSFER_FAIL);
    after_verdict = mc_now_ns(); /* usually the verdict's millisecond */
    /* back on the same port, serving the same memory */
    b_back(name);
    ck_assert_status_ok(mc_te_mem_reg(B, t, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    memset(t, 0, 4096);
    /* the verdict still fails it at once, without a connect */
    ck_assert_status_eq(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t, sizeof(src), seg),
                        MC_TRANSFER_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "marked down") != NULL,
                  "the write should have failed on the down verdict: %s", mc_last_error_detail());
    /* a verdict reached after the time named stands */
    mc_te_segment_revive(A, seg, before_verdict);
    ck_assert_status_eq(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t, sizeof(src), seg),
                        MC_TRANSFER_FAIL);
    /* one reached before it is forgotten: the write reaches the peer */
    mc_te_segment_revive(A, seg, after_verdict);
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)t, sizeof(src), seg));
    ck_assert(memcmp(t, src, sizeof(src)) == 0);
    /* the engine's own segment has no transport peer: nothing to forget */
    mc_te_segment_revive(A, 0, after_verdict);
    ck_assert_status_ok(mc_te_mem_dereg(B, t));
    free(t);
}
END_TEST

/*
 * One READ above the slice size is cut into slices that the calling thread
 * sends on separate lanes before reading any answer (tcp_xfer_spread):
 * sizes around the slice size and the lane count, offsets that do not line
 * up, ranges the target refuses, a restarted peer behind every pooled
 * lane, and callers competing for the lanes.
 */
typedef struct spread_arg {
    uint8_t *tgt;
    const uint8_t *src;
    size_t off, len;
    mc_te_segment_id_t seg;
    int ok;
} spread_arg_t;

static void *spread_reader(void *p)
{
    spread_arg_t *w = p;
    uint8_t *back   = malloc(w->len);
    w->ok           = 0;
    for (int round = 0; (back != NULL) && (round < 10); round++) {
        mc_te_request_t r = {MC_TE_READ, back, (uint64_t)(uintptr_t)(w->tgt + w->off), w->len,
                             w->seg};
        memset(back, 0, w->len);
        if ((mc_te_transfer(A, &r, 1, NULL) != MC_OK) ||
            (memcmp(back, w->src + w->off, w->len) != 0))
            goto out;
    }
    w->ok = 1;
out:
    free(back);
    return NULL;
}

START_TEST(test_large_read_spread_over_lanes)
{
    enum { T = 6 };
    const size_t sizes[] = {512 * 1024 + 1, MiB, MiB + 4097, 2 * MiB, 2 * MiB + 1, 3 * MiB + 5};
    size_t cap    = 4 * MiB;
    uint8_t *tgt  = calloc(1, cap);
    uint8_t *src  = malloc(cap);
    uint8_t *back = malloc(cap + 1);
    pthread_t th[T];
    spread_arg_t w[T];
    char name[64];
    mc_te_params_t p;
    mc_te_h B2 = NULL;

    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, cap, 31);
    ck_assert_status_ok(te_xfer1(A, MC_TE_WRITE, src, (uint64_t)(uintptr_t)tgt, cap, seg));
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        for (size_t off = 0; off < 8; off += 7) {
            memset(back, 0, cap + 1);
            ck_assert_status_ok(
                te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)(tgt + off), sizes[i], seg));
            ck_assert_msg(memcmp(back, src + off, sizes[i]) == 0,
                          "a read of %zu bytes at offset %zu should be byte-exact", sizes[i], off);
            ck_assert_msg(back[sizes[i]] == 0, "a read of %zu bytes should not overrun",
                          sizes[i]);
        }
    }

    /* callers competing for the lanes: a spread gets fewer lanes than
     * slices and runs the rest one by one */
    for (int i = 0; i < T; i++) {
        w[i] = (spread_arg_t){tgt, src, (size_t)i * 333333, MiB + MiB / 2 + 3, seg, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, spread_reader, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(w[i].ok, "reader %d should see every spread read succeed", i);
    }

    /* the target stops serving the range: every slice is refused, and the
     * lanes stay usable once it serves it again */
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    ck_assert_status_eq(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)tgt, 2 * MiB, seg),
                        MC_INVALID_READ);
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS));
    memset(back, 0, cap);
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)tgt, 2 * MiB, seg));
    ck_assert(memcmp(back, src, 2 * MiB) == 0);

    /* the peer restarts on the same port and serves the same memory: every
     * pooled lane is dead, and each slice is retried on a fresh connection */
    snprintf(name, sizeof(name), "%s", mc_te_local_name(B));
    mc_te_destroy(B);
    B = NULL;
    memset(&p, 0, sizeof(p));
    p.field_mask     = MC_TE_PARAM_LOCAL_HOSTNAME;
    p.local_hostname = name;
    ck_assert_status_ok(mc_te_create(&p, &B2));
    B = B2;
    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS));
    memset(back, 0, cap);
    ck_assert_status_ok(te_xfer1(A, MC_TE_READ, back, (uint64_t)(uintptr_t)tgt, 2 * MiB, seg));
    ck_assert(memcmp(back, src, 2 * MiB) == 0);
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
    free(src);
    free(back);
}
END_TEST

/* ---- descriptor and frame codecs ---------------------------------------- */

START_TEST(test_descriptor_codec)
{
    mc_te_desc_t d, back;
    mc_te_buf_desc_t bufs[2] = {{.addr = 0x7f0000001000ull, .length = 4096, .name = "cpu:0"},
                                {.addr = 0x1000, .length = 16, .name = "cpu:1"}};
    char *json = NULL;
    size_t len = 0;

    mc_te_desc_init(&d);
    d.name = "h:1";
    snprintf(d.protocol, sizeof(d.protocol), "tcp");
    d.tcp_data_port = 12345;
    d.nbuffers      = 2;
    d.buffers       = bufs;
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_msg(strstr(json, "\"tcp_data_port\":12345") != NULL, "port in %s", json);
    ck_assert_msg(strstr(json, "\"timestamp\"") != NULL, "timestamp in %s", json);
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    free(json);
    ck_assert_str_eq(back.name, "h:1");
    ck_assert_uint_eq(back.nbuffers, 2);
    ck_assert_uint_eq(back.buffers[0].addr, 0x1000); /* sorted */
    ck_assert_str_eq(back.buffers[1].name, "cpu:0");
    ck_assert(mc_te_desc_contains(&back, 0x7f0000001000ull, 4096));
    ck_assert(mc_te_desc_contains(&back, 0x1008, 8));
    ck_assert(!mc_te_desc_contains(&back, 0x1008, 9));
    ck_assert(!mc_te_desc_contains(&back, 0xfff, 2));
    ck_assert(!mc_te_desc_contains(&back, 0x1000, UINT64_MAX));
    ck_assert(!mc_te_desc_contains(&back, UINT64_MAX, 1));
    mc_te_desc_cleanup(&back);

    static const char *const bad[] = {
        "", "[]", "{", "{\"name\":\"a:1\"}",
        "{\"name\":1,\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":0,\"buffers\":[]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":70000,\"buffers\":[]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":{}}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[{\"addr\":-1,\"length\":4}]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[{\"addr\":1,\"length\":0}]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[{\"addr\":\"1\",\"length\":4}]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[{\"addr\":18446744073709551615,\"length\":4}]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[{\"addr\":100,\"length\":50},{\"addr\":120,\"length\":4}]}",
        "{\"name\":\"a:1\",\"name\":\"b:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"buffers\":[]}",
        "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":1,\"tcp_readv\":1,\"buffers\":[]}",
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        mc_te_desc_t x;
        mc_te_desc_init(&x);
        ck_assert_msg(mc_te_desc_decode(bad[i], strlen(bad[i]), &x) != MC_OK,
                      "descriptor %zu (%s) should be refused", i, bad[i]);
        ck_assert_msg(x.name == NULL && x.buffers == NULL, "a refused decode writes nothing");
    }
    /* upstream extras are ignored */
    const char *up = "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":9,"
                     "\"tcp_proto_version\":2,\"timestamp\":\"x\",\"buffers\":"
                     "[{\"name\":\"cpu:0\",\"addr\":4096,\"length\":4096}]}";
    ck_assert_status_ok(mc_te_desc_decode(up, strlen(up), &back));
    ck_assert_uint_eq(back.tcp_data_port, 9);
    ck_assert_int_eq(back.tcp_readv, 0); /* an engine that does not offer READV */
    mc_te_desc_cleanup(&back);
    /* "tcp_readv" round-trips; absent when not offered */
    d.tcp_readv = 1;
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_msg(strstr(json, "\"tcp_readv\":true") != NULL, "tcp_readv in %s", json);
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    free(json);
    ck_assert_int_eq(back.tcp_readv, 1);
    mc_te_desc_cleanup(&back);
    d.tcp_readv = 0;
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_msg(strstr(json, "tcp_readv") == NULL, "no tcp_readv in %s", json);
    free(json);
}
END_TEST

/* The libfabric members (docs/transfer.md §14): provider, endpoint address
 * and per-buffer keys round-trip; every malformed form is refused whole. */
START_TEST(test_descriptor_fabric_members)
{
    mc_te_desc_t d, back;
    mc_te_buf_desc_t bufs[2] = {
        {.addr = 0x10000, .length = 4096, .name = "cpu:0", .fabric_key = UINT64_MAX,
         .has_fabric_key = 1},
        {.addr = 0x20000, .length = 64, .name = "cpu:1"}};
    char *json = NULL;
    size_t len = 0;

    mc_te_desc_init(&d);
    d.name = "h:1";
    snprintf(d.protocol, sizeof(d.protocol), "efa");
    d.tcp_data_port = 7;
    d.nbuffers      = 2;
    d.buffers       = bufs;
    snprintf(d.fabric_provider, sizeof(d.fabric_provider), "tcp;ofi_rxm");
    d.fabric_addrlen = 3;
    memcpy(d.fabric_addr, "\x00\xab\xff", 3);
    d.fabric_virt_addr = 1;
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_msg(strstr(json, "\"fabric_key\":\"ffffffffffffffff\"") != NULL, "key in %s", json);
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    free(json);
    ck_assert_str_eq(back.fabric_provider, "tcp;ofi_rxm");
    ck_assert_uint_eq(back.fabric_addrlen, 3);
    ck_assert(memcmp(back.fabric_addr, "\x00\xab\xff", 3) == 0);
    ck_assert_int_eq(back.fabric_virt_addr, 1);
    ck_assert(back.buffers[0].has_fabric_key && (back.buffers[0].fabric_key == UINT64_MAX));
    ck_assert(!back.buffers[1].has_fabric_key);
    mc_te_desc_cleanup(&back);

#define FAB_DESC(FABRIC, KEY)                                                                  \
    "{\"name\":\"a:1\",\"protocol\":\"efa\",\"tcp_data_port\":1," FABRIC                       \
    "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":4096,\"length\":64" KEY "}]}"
#define FAB_OK "\"fabric\":{\"provider\":\"sockets\",\"address\":\"0a0b\",\"virt_addr\":false},"
    static const char *const bad[] = {
        FAB_DESC("\"fabric\":[],", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"sockets\",\"address\":\"0a0\",\"virt_addr\":false},", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"sockets\",\"address\":\"0g\",\"virt_addr\":false},", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"sockets\",\"address\":\"\",\"virt_addr\":false},", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"a b\",\"address\":\"00\",\"virt_addr\":false},", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"\",\"address\":\"00\",\"virt_addr\":false},", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"sockets\",\"address\":\"00\",\"virt_addr\":1},", ""),
        FAB_DESC("\"fabric\":{\"provider\":\"sockets\",\"address\":\"00\"},", ""),
        FAB_DESC("", ",\"fabric_key\":\"1\""),                /* a key without "fabric" */
        FAB_DESC(FAB_OK, ",\"fabric_key\":\"10000000000000000\""), /* 17 digits */
        FAB_DESC(FAB_OK, ",\"fabric_key\":\"x1\""),
        FAB_DESC(FAB_OK, ",\"fabric_key\":\"\""),
        FAB_DESC(FAB_OK, ",\"fabric_key\":12"),
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        mc_te_desc_t x;
        mc_te_desc_init(&x);
        ck_assert_msg(mc_te_desc_decode(bad[i], strlen(bad[i]), &x) != MC_OK,
                      "descriptor %zu (%s) should be refused", i, bad[i]);
        ck_assert_msg(x.name == NULL && x.buffers == NULL, "a refused decode writes nothing");
    }
    {
        /* an address of the longest size is taken; one byte more is not */
        char big[2 * MC_TE_DESC_MAX_FABRIC_ADDR + 3], desc[1024];
        for (int extra = 0; extra <= 2; extra += 2) {
            mc_te_desc_t x;
            memset(big, 'a', sizeof(big));
            big[2 * MC_TE_DESC_MAX_FABRIC_ADDR + extra] = '\0';
            snprintf(desc, sizeof(desc),
                     "{\"name\":\"a:1\",\"protocol\":\"efa\",\"tcp_data_port\":1,\"fabric\":"
                     "{\"provider\":\"p\",\"address\":\"%s\",\"virt_addr\":true},\"buffers\":[]}",
                     big);
            mc_te_desc_init(&x);
            if (extra == 0) {
                ck_assert_status_ok(mc_te_desc_decode(desc, strlen(desc), &x));
                ck_assert_uint_eq(x.fabric_addrlen, MC_TE_DESC_MAX_FABRIC_ADDR);
                mc_te_desc_cleanup(&x);
            } else {
                ck_assert(mc_te_desc_decode(desc, strlen(desc), &x) != MC_OK);
            }
        }
    }
#undef FAB_DESC
#undef FAB_OK
}
END_TEST

START_TEST(test_frame_codec)
{
    uint8_t h[MC_TE_REQ_HDR_SIZE], r[MC_TE_RESP_HDR_SIZE];
    mc_te_req_hdr_t q;
    mc_te_resp_hdr_t s;
    mc_te_req_encode(h, MC_TE_OPC_WRITE, 0x0102030405060708ull, 0x1122334455667788ull);
    ck_assert(memcmp(h, "MCTE", 4) == 0);
    ck_assert_uint_eq(h[8], 0x08); /* little endian */
    ck_assert_uint_eq(h[16], 0x88);
    ck_assert_int_eq(mc_te_req_decode(h, &q), 0);
    ck_assert_uint_eq(q.opcode, MC_TE_OPC_WRITE);
    ck_assert_uint_eq(q.addr, 0x0102030405060708ull);
    ck_assert_uint_eq(q.length, 0x1122334455667788ull);
    mc_te_resp_encode(r, MC_INVALID_WRITE, 0);
    ck_assert(memcmp(r, "MCTR", 4) == 0);
    ck_assert_int_eq(mc_te_resp_decode(r, &s), 0);
    ck_assert_int_eq(s.status, MC_INVALID_WRITE);
    mc_te_resp_encode(r, 5, 0); /* positive statuses do not exist */
    ck_assert_int_eq(mc_te_resp_decode(r, &s), -1);
    /* a READ naming a generation: flag 1, the generation at offset 24 */
    mc_te_req_encode_gen(h, MC_TE_OPC_READ, 4096, 64, 0x8877665544332211ull);
    ck_assert_uint_eq(h[6], 1);
    ck_assert_uint_eq(h[24], 0x11);
    ck_assert_int_eq(mc_te_req_decode(h, &q), 0);
    ck_assert_uint_eq(q.flags, MC_TE_REQ_FLAG_GEN);
    ck_assert_uint_eq(q.gen, 0x8877665544332211ull);
    /* a WRITE names one the same way */
    mc_te_req_encode_gen(h, MC_TE_OPC_WRITE, 4096, 64, 5);
    ck_assert_uint_eq(h[6], 1);
    ck_assert_int_eq(mc_te_req_decode(h, &q), 0);
    ck_assert_uint_eq(q.flags, MC_TE_REQ_FLAG_GEN);
    ck_assert_uint_eq(q.gen, 5);
    /* the flag without a generation, or on another opcode, is a violation */
    mc_te_req_encode_gen(h, MC_TE_OPC_READ, 4096, 64, 0);
    ck_assert_uint_eq(h[6], 0);
    h[6] = 1;
    ck_assert_int_eq(mc_te_req_decode(h, &q), -1);
    mc_te_req_encode_gen(h, MC_TE_OPC_DESCRIBE, 0, 0, 5);
    ck_assert_uint_eq(h[6], 0); /* never encoded there */
    ck_assert_int_eq(mc_te_req_decode(h, &q), 0);
    h[6]  = 1;
    h[24] = 5;
    ck_assert_int_eq(mc_te_req_decode(h, &q), -1);
    mc_te_req_encode_gen(h, MC_TE_OPC_DISK_READ, 4096, 64, 0);
    h[6]  = 1;
    h[24] = 5;
    ck_assert_int_eq(mc_te_req_decode(h, &q), -1);
    /* a READV names one like a READ; its counts are checked on their own */
    mc_te_req_encode_gen(h, MC_TE_OPC_READV, 3, 300, 7);
    ck_assert_uint_eq(h[5], 5);
    ck_assert_uint_eq(h[6], 1);
    ck_assert_int_eq(mc_te_req_decode(h, &q), 0);
    ck_assert_uint_eq(q.gen, 7);
    ck_assert_int_eq(mc_te_readv_hdr_check(&q), 0);
    q.addr = 0;
    ck_assert_int_eq(mc_te_readv_hdr_check(&q), -1);
    q.addr = MC_TE_READV_MAX_RANGES + 1;
    ck_assert_int_eq(mc_te_readv_hdr_check(&q), -1);
    q.addr   = 1;
    q.length = MC_TE_READV_MAX_LEN + 1ull;
    ck_assert_int_eq(mc_te_readv_hdr_check(&q), -1);
    h[5] = 6; /* READV_STRIDED: a generation too */
    ck_assert_int_eq(mc_te_req_decode(h, &q), 0);
    ck_assert_int_eq(mc_te_readvs_hdr_check(&q), 0);
    ck_assert_int_eq(mc_te_readv_hdr_check(&q), -1);
    h[5] = 7; /* an opcode past READV_STRIDED */
    ck_assert_int_eq(mc_te_req_decode(h, &q), -1);
    {
        mc_te_range_t in[2] = {{0x1000, 100}, {0x9000, 200}}, out[2];
        uint8_t list[2 * MC_TE_READV_ENTRY_SIZE];
        mc_te_req_hdr_t v = {1, MC_TE_OPC_READV, 0, 2, 300, 0};
        mc_te_readv_encode(list, in, 2);
        ck_assert_uint_eq(list[0], 0x00);
        ck_assert_uint_eq(list[1], 0x10); /* little endian */
        ck_assert_int_eq(mc_te_readv_decode(&v, list, out), 0);
        ck_assert_uint_eq(out[1].addr, 0x9000);
        ck_assert_uint_eq(out[1].len, 200);
        v.length = 299; /* the lengths must add up, exactly */
        ck_assert_int_eq(mc_te_readv_decode(&v, list, out), -1);
        v.length = 301;
        ck_assert_int_eq(mc_te_readv_decode(&v, list, out), -1);
        in[1].len = UINT64_MAX; /* no overflow of the sum */
        mc_te_readv_encode(list, in, 2);
        v.length = 99;
        ck_assert_int_eq(mc_te_readv_decode(&v, list, out), -1);
    }
}
END_TEST

/* Walk entries e[0..m) and compare their rows with r[0..n). */
static void strided_rows_are(const mc_te_strided_t *e, size_t m, const mc_te_range_t *r, size_t n)
{
    mc_te_strided_walk_t w;
    mc_te_range_t x;
    size_t i = 0;

    mc_te_strided_walk_init(&w, e, m);
    while (mc_te_strided_next(&w, &x)) {
        ck_assert_uint_lt(i, n);
        ck_assert_msg((x.addr == r[i].addr) && (x.len == r[i].len),
                      "row %zu: [0x%llx, +%llu) for [0x%llx, +%llu)", i,
                      (unsigned long long)x.addr, (unsigned long long)x.len,
                      (unsigned long long)r[i].addr, (unsigned long long)r[i].len);
        i++;
    }
    ck_assert_uint_eq(i, n);
}

/* One READV_STRIDED entry list @p e of @p m entries, encoded, decodes (0)
 * or not (-1) against a header of @p len bytes. */
static int readvs_decodes(const mc_te_strided_t *e, size_t m, uint64_t len)
{
    uint8_t list[8 * MC_TE_READVS_ENTRY_SIZE];
    mc_te_strided_t out[8];
    mc_te_req_hdr_t v = {1, MC_TE_OPC_READV_STRIDED, 0, m, len, 0};
    size_t rows       = 0;

    ck_assert_uint_le(m, 8);
    mc_te_readvs_encode(list, e, m);
    if (mc_te_readvs_decode(&v, list, out, &rows) != 0)
        return -1;
    for (size_t i = 0; i < m; i++)
        ck_assert((out[i].addr == e[i].addr) && (out[i].stride == e[i].stride) &&
                  (out[i].len == e[i].len) && (out[i].count == e[i].count) &&
                  (out[i].group == e[i].group));
    return 0;
}

/*
 * READV_STRIDED's entries (proto.h): ranges packed by mc_te_readvs_pack
 * walk back to exactly those ranges -- the rows of two objects
 * interleaved (one group of two), one object's rows at a stride (a group
 * of one), a list that breaks its period midway, ranges without any
 * (entries of one row each) -- and the packing is short where rows are
 * regular.  Encoded, they decode to the same entries; the decoder refuses
 * every malformed entry and group the holder must close on.
 */
START_TEST(test_readvs_codec)
{
    enum { N = 600 };
    mc_te_range_t r[N];
    mc_te_strided_t e[N];
    size_t m;

    /* two objects interleaved: X rows of 1 KiB back to back, Y of 2 KiB */
    for (size_t i = 0; i < N / 2; i++) {
        r[2 * i]     = (mc_te_range_t){0x100000 + i * 1024, 1024};
        r[2 * i + 1] = (mc_te_range_t){0x900000 + i * 2048, 2048};
    }
    m = mc_te_readvs_pack(r, N, e);
    ck_assert_uint_eq(m, 2);
    ck_assert_uint_eq(e[0].group, 2);
    ck_assert_uint_eq(e[1].group, 0);
    ck_assert_uint_eq(e[0].count, N / 2);
    ck_assert_uint_eq(e[1].stride, 2048);
    strided_rows_are(e, m, r, N);
    /* one object's half rows: stride 4096, rows of 1000 bytes */
    for (size_t i = 0; i < N; i++)
        r[i] = (mc_te_range_t){0x200000 + i * 4096, 1000};
    m = mc_te_readvs_pack(r, N, e);
    ck_assert_uint_eq(m, 1);
    ck_assert_uint_eq(e[0].stride, 4096);
    strided_rows_are(e, m, r, N);
    /* the period breaks at 250 (another length) and at 400 (another stride) */
    r[250].len = 999;
    for (size_t i = 400; i < N; i++)
        r[i].addr += 8;
    m = mc_te_readvs_pack(r, N, e);
    ck_assert_uint_le(m, 6);
    strided_rows_are(e, m, r, N);
    /* no regularity: one entry per range */
    for (size_t i = 0; i < 50; i++)
        r[i] = (mc_te_range_t){0x300000 + (i * i * 97) % 50000 * 16, 1 + (i * 31) % 700};
    m = mc_te_readvs_pack(r, 50, e);
    strided_rows_are(e, m, r, 50);
    /* rows that go backwards or overlap are not strided */
    r[0] = (mc_te_range_t){0x5000, 100};
    r[1] = (mc_te_range_t){0x4000, 100};
    r[2] = (mc_te_range_t){0x3000, 100};
    r[3] = (mc_te_range_t){0x3050, 100};
    r[4] = (mc_te_range_t){0x30a0, 100};
    m    = mc_te_readvs_pack(r, 5, e);
    ck_assert_uint_eq(m, 5);
    strided_rows_are(e, m, r, 5);
    r[0].len = (uint64_t)UINT32_MAX + 1; /* cannot be a row: READV */
    ck_assert_uint_eq(mc_te_readvs_pack(r, 1, e), 0);
    r[0].len = 0;
    ck_assert_uint_eq(mc_te_readvs_pack(r, 1, e), 0);

    /* the decoder */
    {
        mc_te_strided_t g[3] = {{0x1000, 100, 10, 4, 2},
                                {0x9000, 20, 20, 4, 0},
                                {0x7000, 8, 8, 1, 1}};
        uint64_t len         = 4 * 10 + 4 * 20 + 8;
        uint8_t list[3 * MC_TE_READVS_ENTRY_SIZE];
        mc_te_strided_t out[3];
        mc_te_req_hdr_t v = {1, MC_TE_OPC_READV_STRIDED, 0, 3, len, 0};
        size_t rows       = 0;

        ck_assert_int_eq(readvs_decodes(g, 3, len), 0);
        ck_assert_int_eq(readvs_decodes(g, 3, len - 1), -1); /* bytes do not add up */
        ck_assert_int_eq(readvs_decodes(g, 3, len + 1), -1);
        mc_te_readvs_encode(list, g, 3);
        ck_assert_int_eq(mc_te_readvs_decode(&v, list, out, &rows), 0);
        ck_assert_uint_eq(rows, 9);
        list[28] = 1; /* a reserved word */
        ck_assert_int_eq(mc_te_readvs_decode(&v, list, out, &rows), -1);
        g[1].len = 0; /* an empty row */
        ck_assert_int_eq(readvs_decodes(g, 3, len - 80), -1);
        g[1].len   = 20;
        g[1].count = 0; /* no rows */
        ck_assert_int_eq(readvs_decodes(g, 3, len - 80), -1);
        g[1].count = 3; /* a count other than its group's */
        ck_assert_int_eq(readvs_decodes(g, 3, len - 20), -1);
        g[1].count  = 4;
        g[1].stride = 19; /* rows that overlap */
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        g[1].stride = 20;
        g[1].group  = 1; /* a group inside a group */
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        g[1].group = 0;
        g[0].group = 0; /* no group started */
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        g[0].group = 3; /* a group of three, its last entry's count differs */
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        g[0].group = 4; /* past the list */
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        g[0].group = 2;
        g[2].group = 0; /* the last entry continues nothing */
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        g[2].group = 1;
        /* the last row past the address space, however the product falls */
        g[2] = (mc_te_strided_t){UINT64_MAX - 100, 64, 8, 2, 1};
        ck_assert_int_eq(readvs_decodes(g, 3, len + 8), 0);
        g[2].stride = 92; /* ends at UINT64_MAX */
        ck_assert_int_eq(readvs_decodes(g, 3, len + 8), 0);
        g[2].stride = 93; /* one past */
        ck_assert_int_eq(readvs_decodes(g, 3, len + 8), -1);
        g[2]        = (mc_te_strided_t){0x1000, UINT64_MAX / 2 + 1, 8, 3, 1};
        ck_assert_int_eq(readvs_decodes(g, 3, len + 16), -1);
        g[2] = (mc_te_strided_t){UINT64_MAX - 4, 8, 8, 1, 1};
        ck_assert_int_eq(readvs_decodes(g, 3, len), -1);
        /* more rows than MC_TE_READVS_MAX_ROWS, each of one byte */
        g[0] = (mc_te_strided_t){0x1000, 1, 1, MC_TE_READVS_MAX_ROWS + 1, 1};
        ck_assert_int_eq(readvs_decodes(g, 1, MC_TE_READVS_MAX_ROWS + 1), -1);
        g[0].count = MC_TE_READVS_MAX_ROWS;
        ck_assert_int_eq(readvs_decodes(g, 1, MC_TE_READVS_MAX_ROWS), 0);
        /* len * count past the header's length (and past 32 bits) */
        g[0] = (mc_te_strided_t){0x1000, UINT32_MAX, UINT32_MAX, 3, 1};
        ck_assert_int_eq(readvs_decodes(g, 1, MC_TE_READV_MAX_LEN), -1);
    }
}
END_TEST

/* ---- HTTP metadata mode against a tiny in-test KV server ---------------- */

typedef struct kv_server {
    int fd;
    uint16_t port;
    pthread_t th;
    int stop; /* atomic */
    pthread_mutex_t mu;
    char *keys[16];
    char *vals[16];
    int puts, deletes;
} kv_server_t;

static char *kv_find(kv_server_t *s, const char *k, int *slot)
{
    for (int i = 0; i < 16; i++)
        if (s->keys[i] && strcmp(s->keys[i], k) == 0) {
            *slot = i;
            return s->vals[i];
        }
    *slot = -1;
    return NULL;
}

static void url_decode(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if ((s[0] == '%') && s[1] && s[2]) {
            char hex[3] = {s[1], s[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

/* One request per connection (curl is told nothing; we answer with
 * Connection: close).  Just enough HTTP for GET/PUT/DELETE ?key=. */
static void kv_handle(kv_server_t *s, int c)
{
    char req[65536];
    size_t got = 0;
    char *body, *p;
    long clen = 0;
    char resp[70000];
    int slot;

    mc_tcp_tune(c, 5);
    for (;;) {
        ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
        if (n <= 0)
            return;
        got += (size_t)n;
        req[got] = '\0';
        body     = strstr(req, "\r\n\r\n");
        if (body == NULL)
            continue;
        p = strcasestr(req, "Content-Length:");
        clen = p ? strtol(p + 15, NULL, 10) : 0;
        if (strcasestr(req, "Expect: 100-continue") && (got == (size_t)(body + 4 - req)))
            (void)mc_write_full(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        if ((size_t)(body + 4 - req) + (size_t)clen <= got)
            break;
    }
    body += 4;
    body[clen] = '\0';
    char method[8] = {0}, key[1024] = {0};
    sscanf(req, "%7s", method);
    p = strstr(req, "key=");
    if (p != NULL)
        sscanf(p + 4, "%1023[^ &]", key);
    url_decode(key);
    pthread_mutex_lock(&s->mu);
    char *v = kv_find(s, key, &slot);
    const char *status = "200 OK", *out = "";
    if (strcmp(method, "GET") == 0) {
        if (v == NULL)
            status = "404 Not Found";
        else
            out = v;
    } else if (strcmp(method, "PUT") == 0) {
        if (slot < 0)
            for (slot = 0; slot < 16 && s->keys[slot]; slot++)
                ;
        if (slot < 16) {
            free(s->keys[slot]);
            free(s->vals[slot]);
            s->keys[slot] = strdup(key);
            s->vals[slot] = strdup(body);
            s->puts++;
        }
    } else if (strcmp(method, "DELETE") == 0) {
        if (slot >= 0) {
            free(s->keys[slot]);
            free(s->vals[slot]);
            s->keys[slot] = s->vals[slot] = NULL;
            s->deletes++;
        } else {
            status = "404 Not Found";
        }
    }
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", status,
                     strlen(out), out);
    pthread_mutex_unlock(&s->mu);
    (void)mc_write_full(c, resp, (size_t)n);
}

static void *kv_main(void *arg)
{
    kv_server_t *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        kv_handle(s, c);
        close(c);
    }
    return NULL;
}

static void kv_start(kv_server_t *s)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s->fd, 16), 0);
    getsockname(s->fd, (struct sockaddr *)&a, &alen);
    s->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&s->th, NULL, kv_main, s), 0);
}

static void kv_stop(kv_server_t *s)
{
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    pthread_join(s->th, NULL);
    close(s->fd);
    for (int i = 0; i < 16; i++) {
        free(s->keys[i]);
        free(s->vals[i]);
    }
    pthread_mutex_destroy(&s->mu);
}

START_TEST(test_http_metadata_mode)
{
    kv_server_t kv;
    char url[128], key[256];
    int slot;
    kv_start(&kv);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metadata", (unsigned)kv.port);
    mc_te_h H1 = te_new("127.0.0.1", url);
    mc_te_h H2 = te_new("127.0.0.1", url);
    uint8_t *tgt = calloc(1, 65536), src[1000], back[1000];

    snprintf(key, sizeof(key), "mooncake/rpc_meta/%s", mc_te_local_name(H2));
    pthread_mutex_lock(&kv.mu);
    char *rpc = kv_find(&kv, key, &slot);
    ck_assert_msg(rpc && strstr(rpc, "\"ip_or_host_name\":\"127.0.0.1\""),
                  "rpc_meta should be published: %s", rpc ? rpc : "(none)");
    pthread_mutex_unlock(&kv.mu);

    ck_assert_status_ok(mc_te_mem_reg(H2, tgt, 65536, "cpu:0", MC_TE_MEM_REMOTE_ACCESS));
    snprintf(key, sizeof(key), "mooncake/ram/%s", mc_te_local_name(H2));
    pthread_mutex_lock(&kv.mu);
    char *ram = kv_find(&kv, key, &slot);
    ck_assert_msg(ram && strstr(ram, "\"length\":65536"), "the descriptor should list the region: %s",
                  ram ? ram : "(none)");
    pthread_mutex_unlock(&kv.mu);

    mc_te_segment_id_t seg = 0;
    ck_assert_status_ok(mc_te_segment_open(H1, mc_te_local_name(H2), &seg));
    te_fill(src, sizeof(src), 31);
    ck_assert_status_ok(te_xfer1(H1, MC_TE_WRITE, src, (uint64_t)(uintptr_t)tgt + 5, sizeof(src), seg));
    ck_assert_status_ok(te_xfer1(H1, MC_TE_READ, back, (uint64_t)(uintptr_t)tgt + 5, sizeof(back), seg));
    ck_assert(memcmp(back, src, sizeof(src)) == 0);
    ck_assert_status_eq(mc_te_segment_open(H1, "127.0.0.1:1", &seg), MC_SEGMENT_NOT_FOUND);

    ck_assert_status_ok(mc_te_mem_dereg(H2, tgt));
    pthread_mutex_lock(&kv.mu);
    ram = kv_find(&kv, key, &slot);
    ck_assert_msg(ram && strstr(ram, "\"buffers\":[]"), "dereg should republish: %s",
                  ram ? ram : "(none)");
    pthread_mutex_unlock(&kv.mu);
    mc_te_destroy(H2);
    pthread_mutex_lock(&kv.mu);
    ck_assert_msg(kv_find(&kv, key, &slot) == NULL, "destroy should delete the ram key");
    pthread_mutex_unlock(&kv.mu);
    mc_te_destroy(H1);
    kv_stop(&kv);

    /* a dead metadata server fails creation cleanly */
    mc_te_params_t p = {.field_mask = MC_TE_PARAM_METADATA_SERVER | MC_TE_PARAM_LOCAL_HOSTNAME,
                        .local_hostname = "127.0.0.1", .metadata_server = url};
    mc_te_h dead = NULL;
    ck_assert_status_eq(mc_te_create(&p, &dead), MC_RPC_FAIL);
    ck_assert_msg(dead == NULL, "a failed create should not write the handle");
    free(tgt);
}
END_TEST

/* A background job moves the same bytes as mc_te_transfer, reports per
 * request, and can be released while it runs. */
START_TEST(test_job_submit_wait_release)
{
    enum { N = 40 };
    size_t chunk  = 70000;
    size_t cap    = N * chunk;
    uint8_t *tgt  = calloc(1, cap);
    uint8_t *src  = malloc(cap);
    mc_te_request_t reqs[N];
    mc_status_t st[N];
    mc_te_job_h job = NULL;
    int done        = 0;

    ck_assert_status_ok(mc_te_mem_reg(B, tgt, cap, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, cap, 5);
    for (size_t i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + i * chunk,
                                    (uint64_t)(uintptr_t)(tgt + i * chunk), chunk, seg};
    ck_assert_status_ok(mc_te_transfer_submit(A, reqs, N, &job));
    memset(reqs, 0xee, sizeof(reqs)); /* the job keeps its own copy */
    ck_assert_status_ok(mc_te_job_wait(job, 30000, &done, st));
    ck_assert_msg(done == 1, "the job should finish within 30 s");
    for (size_t i = 0; i < N; i++)
        ck_assert_status_ok(st[i]);
    ck_assert_msg(memcmp(tgt, src, cap) == 0, "the job should land byte-exact");
    ck_assert_status_ok(mc_te_job_wait(job, 0, &done, NULL));
    ck_assert_msg(done == 1, "a finished job stays finished");
    mc_te_job_release(job);

    /* one refused request: the job fails with its status and detail, the
     * others land */
    memset(tgt, 0, cap);
    for (size_t i = 0; i < 3; i++)
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + i * chunk,
                                    (uint64_t)(uintptr_t)(tgt + i * chunk), chunk, seg};
    reqs[1].remote = (uint64_t)(uintptr_t)(tgt + cap - 10);
    ck_assert_status_ok(mc_te_transfer_submit(A, reqs, 3, &job));
    ck_assert_status_eq(mc_te_job_wait(job, -1, &done, st), MC_INVALID_WRITE);
    ck_assert_msg(strstr(mc_last_error_detail(), "refused") != NULL,
                  "the detail should say why: %s", mc_last_error_detail());
    ck_assert_status_ok(st[0]);
    ck_assert_status_eq(st[1], MC_INVALID_WRITE);
    ck_assert_status_ok(st[2]);
    ck_assert_msg(memcmp(tgt + 2 * chunk, src + 2 * chunk, chunk) == 0,
                  "a good request next to a refused one should complete");
    ck_assert_msg(tgt[cap - 1] == 0, "the refused range must stay untouched");
    mc_te_job_release(job);

    /* an unknown segment is refused up front: finished at once */
    reqs[0].segment = 999;
    ck_assert_status_ok(mc_te_transfer_submit(A, reqs, 1, &job));
    ck_assert_status_eq(mc_te_job_wait(job, 0, &done, NULL), MC_INVALID_PARAMS);
    ck_assert_msg(done == 1, "a job refused up front is finished");
    mc_te_job_release(job);

    ck_assert_status_eq(mc_te_transfer_submit(A, reqs, 0, &job), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_job_wait(NULL, 0, &done, NULL), MC_INVALID_PARAMS);
    mc_te_job_release(NULL);

    /* released while running: the engine frees it when it completes
     * (ASan sees a leak otherwise).  Its buffers stay in use until then,
     * and nothing else says when that is: mc_te_destroy() lets queued jobs
     * finish, so the buffers may go once it has returned. */
    memset(tgt, 0, cap);
    for (size_t i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + i * chunk,
                                    (uint64_t)(uintptr_t)(tgt + i * chunk), chunk, seg};
    ck_assert_status_ok(mc_te_transfer_submit(A, reqs, N, &job));
    mc_te_job_release(job);
    mc_te_destroy(A);
    A = NULL;
    ck_assert_msg(memcmp(tgt, src, cap) == 0,
                  "a released job should have finished when mc_te_destroy returns");
    ck_assert_status_ok(mc_te_mem_dereg(B, tgt));
    free(tgt);
    free(src);
}
END_TEST

/* Buffers of a segment, own and peer, in address order; refresh picks up
 * what the peer registered after it was opened. */
START_TEST(test_segment_buffer_query)
{
    uint8_t *lo = malloc(8192), *hi = malloc(8192), *priv = malloc(4096);
    uint8_t *a  = (lo < hi) ? lo : hi, *b = (lo < hi) ? hi : lo;
    mc_te_segment_id_t self, seg;
    uint64_t addr = 0, len = 0;

    ck_assert_status_ok(mc_te_segment_open(B, mc_te_local_name(B), &self));
    seg = te_open(A, B);
    ck_assert_status_eq(mc_te_segment_buffer_query(A, seg, 0, &addr, &len), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_mem_reg(B, priv, 4096, "", 0)); /* local only: not listed */
    ck_assert_status_ok(mc_te_mem_reg(B, b, 8192, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(mc_te_mem_reg(B, a, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(mc_te_segment_buffer_query(B, self, 0, &addr, &len));
    ck_assert_msg(addr == (uint64_t)(uintptr_t)a && len == 4096, "own lowest buffer first");
    ck_assert_status_ok(mc_te_segment_buffer_query(B, self, 1, &addr, NULL));
    ck_assert_msg(addr == (uint64_t)(uintptr_t)b, "own second buffer");
    ck_assert_status_eq(mc_te_segment_buffer_query(B, self, 2, &addr, NULL), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_segment_refresh(B, self));

    ck_assert_status_ok(mc_te_segment_refresh(A, seg));
    ck_assert_status_ok(mc_te_segment_buffer_query(A, seg, 0, &addr, &len));
    ck_assert_msg(addr == (uint64_t)(uintptr_t)a && len == 4096,
                  "the peer's lowest buffer after a refresh");
    ck_assert_status_ok(mc_te_segment_buffer_query(A, seg, 1, &addr, &len));
    ck_assert_msg(addr == (uint64_t)(uintptr_t)b && len == 8192, "the peer's second buffer");
    ck_assert_status_eq(mc_te_segment_refresh(A, 999), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_segment_buffer_query(A, 999, 0, &addr, NULL), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_mem_dereg(B, a));
    ck_assert_status_ok(mc_te_mem_dereg(B, b));
    ck_assert_status_ok(mc_te_mem_dereg(B, priv));
    free(lo);
    free(hi);
    free(priv);
}
END_TEST

Suite *mc_test_transfer_suite(void)
{
    Suite *s = suite_create("transfer");
    TCase *codec = tcase_create("codec");
    TCase *two   = tcase_create("engines");
    TCase *http  = tcase_create("http");

    tcase_add_test(codec, test_frame_codec);
    tcase_add_test(codec, test_readvs_codec);
    tcase_add_test(codec, test_descriptor_codec);
    tcase_add_test(codec, test_descriptor_fabric_members);
    tcase_add_test(codec, test_protocols_and_metadata_refused);
    suite_add_tcase(s, codec);

    tcase_add_checked_fixture(two, te_setup_two, te_teardown_two);
    tcase_set_timeout(two, 60);
    tcase_add_test(two, test_create_names_and_ports);
    tcase_add_test(two, test_mem_reg_rules);
    tcase_add_test(two, test_roundtrip_sizes);
    tcase_add_test(two, test_batch_one_peer);
    tcase_add_test(two, test_batch_two_peers);
    tcase_add_test(two, test_out_of_range_refused);
    tcase_add_test(two, test_raw_range_checks_on_target);
    tcase_add_test(two, test_garbage_headers_disconnect);
    tcase_add_test(two, test_dereg_then_access_refused);
    tcase_add_test(two, test_stale_descriptor_refused_in_pipeline);
    tcase_add_test(two, test_dereg_waits_for_inflight);
    tcase_add_test(two, test_self_target_memcpy);
    tcase_add_test(two, test_transfer_sent_hook);
    tcase_add_test(two, test_generation_reads);
    tcase_add_test(two, test_generation_writes);
    tcase_add_test(two, test_generation_counter);
    tcase_add_test(two, test_segment_open_errors);
    tcase_add_test(two, test_concurrent_callers);
    tcase_add_test(two, test_peer_restart_behind_pooled_connection);
    tcase_add_test(two, test_revive_forgets_only_an_older_down_verdict);
    tcase_add_test(two, test_large_read_spread_over_lanes);
    tcase_add_test(two, test_job_submit_wait_release);
    tcase_add_test(two, test_segment_buffer_query);
    suite_add_tcase(s, two);

    tcase_set_timeout(http, 30);
    tcase_add_test(http, test_http_metadata_mode);
    suite_add_tcase(s, http);
    return s;
}

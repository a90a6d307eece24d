/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hand-written etcd protobuf codec (libmooncake/coord/etcd_pb.c):
 * a guarded Txn encodes to the bytes protoc would send (built here by hand
 * from rpc.proto's field numbers; the first one was also sent to a real
 * etcd 3.4 with curl, which took it); TxnResponse answers decode, unknown
 * fields are skipped; every malformed answer (cut short, a length past
 * the end, a bad wire type, an overlong varint, a field of the wrong type)
 * is -1, and no cut of a valid answer reads outside it.
 *
 * Against a real etcd member started here (skipped without /usr/bin/etcd
 * or $MC_ETCD_BIN): a handle with mc_etcd_use_grpc sends its guarded
 * transactions over gRPC, many in a row on one kept-alive connection
 * (libcurl 7.88's reuse bug, etcd_grpc.c), binary and 1 MiB values read
 * back intact through the gateway, a stale term and a missing guard are
 * MC_ETCD_TRANSACTION_FAIL, a dead first endpoint is skipped, and a
 * member killed and restarted is reconnected to.
 */
#include "config.h"

#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"
#include "coord/etcd_pb.h"
#include "master_proc.h"

static void assert_bytes(const mc_buf_t *b, const uint8_t *want, size_t n)
{
    ck_assert_int_eq(b->oom, 0);
    ck_assert_uint_eq(b->len, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b->data[i] == want[i], "byte %zu: 0x%02x, want 0x%02x", i, b->data[i],
                      want[i]);
}

START_TEST(test_txn_put_encodes)
{
    /* if create_revision("nokey") == 0 then put k/x = hello */
    static const uint8_t want[] = {
        0, 0, 0, 0, 29,                                /* gRPC frame: 29 bytes */
        0x0a, 11,                                      /* compare (1), 11 bytes */
        0x10, 1,                                       /*   target (2) = CREATE */
        0x1a, 5, 'n', 'o', 'k', 'e', 'y',              /*   key (3) */
        0x28, 0,                                       /*   create_revision (5) = 0 */
        0x12, 14,                                      /* success (2), 14 bytes */
        0x12, 12,                                      /*   request_put (2) */
        0x0a, 3, 'k', '/', 'x',                        /*     key (1) */
        0x12, 5, 'h', 'e', 'l', 'l', 'o',              /*     value (2) */
    };
    mc_etcd_op_t op = {.key = "k/x", .val = "hello", .len = 5};
    mc_buf_t b;
    mc_buf_init(&b);
    mc_etcd_pb_txn_guarded_encode(&b, "nokey", 0, &op, 1);
    assert_bytes(&b, want, sizeof(want));
    mc_buf_cleanup(&b);
}
END_TEST

START_TEST(test_txn_delete_and_revisions_encode)
{
    /* revision 300 (varint ac 02); a put of an empty value (no value
     * field); a delete of [a, b) */
    static const uint8_t want[] = {
        0, 0, 0, 0, 27,
        0x0a, 8, 0x10, 1, 0x1a, 1, 'g', 0x28, 0xac, 0x02,
        0x12, 5, 0x12, 3, 0x0a, 1, 'e',
        0x12, 8, 0x1a, 6, 0x0a, 1, 'a', 0x12, 1, 'b',
    };
    mc_etcd_op_t ops[2] = {{.key = "e"}, {.del = 1, .key = "a", .range_end = "b"}};
    mc_buf_t b;
    mc_buf_init(&b);
    mc_etcd_pb_txn_guarded_encode(&b, "g", 300, ops, 2);
    assert_bytes(&b, want, sizeof(want));

    /* a negative int64 is ten varint bytes (two's complement) */
    mc_buf_reset(&b);
    mc_etcd_pb_txn_guarded_encode(&b, "g", -1, NULL, 0);
    ck_assert_uint_eq(b.len, 5 + 2 + 2 + 3 + 11);
    ck_assert_uint_eq(b.data[4], 2 + 2 + 3 + 11);
    ck_assert_uint_eq(b.data[b.len - 1], 0x01);
    mc_buf_cleanup(&b);
}
END_TEST

START_TEST(test_txn_large_values_encode)
{
    /* a 1 MiB value: multi-byte lengths at every level, and the frame
     * length big-endian */
    size_t n = 1u << 20;
    char *v  = malloc(n);
    mc_etcd_op_t op = {.key = "big", .val = v, .len = n};
    mc_buf_t b;
    size_t msg;
    ck_assert_ptr_nonnull(v);
    memset(v, 'x', n);
    mc_buf_init(&b);
    mc_etcd_pb_txn_guarded_encode(&b, "g", 7, &op, 1);
    ck_assert_int_eq(b.oom, 0);
    msg = ((size_t)b.data[1] << 24) | ((size_t)b.data[2] << 16) | ((size_t)b.data[3] << 8) |
          b.data[4];
    ck_assert_uint_eq(msg, b.len - 5);
    /* compare 2 + 3 + 2 = 7 -> 9; put body 5 + 1 + 3 + n (3-byte length),
     * request_put 1 + 3 + body, success 1 + 3 + that */
    size_t body = 5 + (1 + 3 + n);
    ck_assert_uint_eq(msg, 9 + (1 + 3 + (1 + 3 + body)));
    ck_assert_int_eq(memcmp(b.data + b.len - n, v, n), 0);
    mc_buf_cleanup(&b);
    free(v);
}
END_TEST

START_TEST(test_txn_response_decodes)
{
    /* as etcd sends it: header {cluster_id 129, member_id 2, revision 300,
     * raft_term 2}, succeeded, responses [{response_put {header {}}}] */
    static const uint8_t ok[] = {
        0x0a, 10, 0x08, 0x81, 0x01, 0x10, 0x02, 0x18, 0xac, 0x02, 0x20, 0x02, /* header */
        0x10, 0x01,                                                           /* succeeded */
        0x1a, 4, 0x12, 2, 0x0a, 0,                                            /* responses */
    };
    static const uint8_t failed[] = {0x0a, 2, 0x18, 0x05, 0x1a, 0};
    static const uint8_t unknown[] = {
        0x10, 0x01,
        0x9a, 0x06, 3, 'a', 'b', 'c',             /* field 99, length-delimited */
        0x25, 1, 2, 3, 4,                         /* field 4, fixed32 */
        0x29, 1, 2, 3, 4, 5, 6, 7, 8,             /* field 5, fixed64 */
        0x30, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, /* field 6, max varint */
    };
    mc_etcd_pb_txn_resp_t r;

    ck_assert_int_eq(mc_etcd_pb_txn_resp_decode(ok, sizeof(ok), &r), 0);
    ck_assert_int_eq(r.succeeded, 1);
    ck_assert_int_eq(r.revision, 300);
    /* failed: succeeded left out (false); header, then an empty responses */
    ck_assert_int_eq(mc_etcd_pb_txn_resp_decode(failed, 4, &r), 0);
    ck_assert_int_eq(r.succeeded, 0);
    ck_assert_int_eq(r.revision, 5);
    ck_assert_int_eq(mc_etcd_pb_txn_resp_decode(failed, sizeof(failed), &r), 0);
    ck_assert_int_eq(r.succeeded, 0);
    ck_assert_int_eq(mc_etcd_pb_txn_resp_decode(unknown, sizeof(unknown), &r), 0);
    ck_assert_int_eq(r.succeeded, 1);
    /* the empty message: all defaults */
    ck_assert_int_eq(mc_etcd_pb_txn_resp_decode(ok, 0, &r), 0);
    ck_assert_int_eq(r.succeeded, 0);

    /* every cut of the valid answer: 0 or -1, never a read past the cut
     * (ASan builds see it); cuts inside a field are -1 */
    for (size_t n = 0; n < sizeof(ok); n++) {
        uint8_t *cut = malloc(n + 1);
        int rc;
        ck_assert_ptr_nonnull(cut);
        memcpy(cut, ok, n);
        rc = mc_etcd_pb_txn_resp_decode(cut, n, &r);
        if ((n == 0) || (n == 12) || (n == 14))
            ck_assert_msg(rc == 0, "cut at a field boundary %zu: %d", n, rc);
        else
            ck_assert_msg(rc == -1, "cut inside a field at %zu decoded", n);
        free(cut);
    }
}
END_TEST

START_TEST(test_txn_response_malformed)
{
    static const struct {
        const char *what;
        uint8_t b[16];
        size_t n;
    } bad[] = {
        {"length past the end", {0x0a, 5, 0x18, 1}, 4},
        {"truncated varint", {0x10, 0x80}, 2},
        {"eleven-byte varint",
         {0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 12},
        {"varint over 64 bits",
         {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 11},
        {"wire type 3 (group)", {0x0b}, 1},
        {"wire type 4 (group end)", {0x0c}, 1},
        {"wire type 6", {0x0e, 0}, 2},
        {"wire type 7", {0x0f, 0}, 2},
        {"field number 0", {0x00, 0}, 2},
        {"fixed32 cut short", {0x25, 1, 2}, 3},
        {"fixed64 cut short", {0x29, 1, 2, 3, 4, 5, 6, 7}, 8},
        {"header not length-delimited", {0x08, 1}, 2},
        {"succeeded not a varint", {0x12, 0}, 2},
        {"revision not a varint", {0x0a, 2, 0x1a, 0}, 4},
        {"responses not length-delimited", {0x18, 1}, 2},
        {"a malformed response inside", {0x1a, 2, 0x12, 5}, 4},
        {"a malformed header inside", {0x0a, 2, 0x18, 0x80}, 4},
    };
    mc_etcd_pb_txn_resp_t r;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(mc_etcd_pb_txn_resp_decode(bad[i].b, bad[i].n, &r) == -1, "%s decoded",
                      bad[i].what);
}
END_TEST

START_TEST(test_grpc_unframe)
{
    static const uint8_t ok[] = {0, 0, 0, 0, 2, 0x10, 1};
    static const uint8_t zip[] = {1, 0, 0, 0, 2, 0x10, 1};
    static const uint8_t empty[] = {0, 0, 0, 0, 0};
    const uint8_t *m;
    size_t n;

    ck_assert_int_eq(mc_etcd_grpc_unframe(ok, sizeof(ok), &m, &n), 0);
    ck_assert_ptr_eq(m, ok + 5);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(mc_etcd_grpc_unframe(empty, sizeof(empty), &m, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(mc_etcd_grpc_unframe(zip, sizeof(zip), &m, &n), -1);      /* compressed */
    ck_assert_int_eq(mc_etcd_grpc_unframe(ok, sizeof(ok) - 1, &m, &n), -1);   /* cut short */
    ck_assert_int_eq(mc_etcd_grpc_unframe(ok, 4, &m, &n), -1);                /* no prefix */
    ck_assert_int_eq(mc_etcd_grpc_unframe(empty, 0, &m, &n), -1);
    {
        uint8_t two[12];
        memcpy(two, ok, 7);
        memcpy(two + 7, empty, 5); /* a second message: not a unary answer */
        ck_assert_int_eq(mc_etcd_grpc_unframe(two, sizeof(two), &m, &n), -1);
    }
}
END_TEST

/* ---- against a real etcd ------------------------------------------------------------ */

typedef struct live_etcd {
    pid_t pid;
    char dir[PATH_MAX];
    char ep[64];
    uint16_t cport, pport;
} live_etcd_t;

static const char *etcd_path(void)
{
    const char *b = getenv("MC_ETCD_BIN");
    return ((b != NULL) && (*b != '\0')) ? b : "/usr/bin/etcd";
}

/* (Re)start the member in l->dir on its ports; wait until it takes a write. */
static void live_run(live_etcd_t *l)
{
    char client[64], peer[64], initial[96], data[PATH_MAX + 8];
    mc_etcd_t *e = NULL;
    uint64_t deadline;

    snprintf(data, sizeof(data), "%s/data", l->dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%u", (unsigned)l->cport);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", (unsigned)l->pport);
    snprintf(initial, sizeof(initial), "p=%s", peer);
    l->pid = fork();
    ck_assert_msg(l->pid >= 0, "fork works");
    if (l->pid == 0) {
        int null = open("/dev/null", O_RDWR);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        execl(etcd_path(), "etcd", "--name", "p", "--data-dir", data, "--listen-client-urls",
              client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
              "--initial-advertise-peer-urls", peer, "--initial-cluster", initial, (char *)NULL);
        _exit(127);
    }
    ck_assert_status_ok(mc_etcd_create(l->ep, 1000, &e));
    deadline = mc_test_now_ms() + 20000;
    while (mc_etcd_put(e, "pb-test/ready", "1", 1, 0) != MC_OK) {
        ck_assert_msg(mc_test_now_ms() < deadline, "etcd should accept a write within 20 s");
        poll(NULL, 0, 50);
    }
    mc_etcd_destroy(e);
}

static int live_start(live_etcd_t *l)
{
    if (access(etcd_path(), X_OK) != 0) {
        fprintf(stderr, "test_etcd_pb: no etcd at %s; skipping the live cases\n", etcd_path());
        return 0;
    }
    memset(l, 0, sizeof(*l));
    snprintf(l->dir, sizeof(l->dir), "/tmp/mc-test-etcdpb-XXXXXX");
    ck_assert_msg(mkdtemp(l->dir) != NULL, "a temporary directory can be made");
    l->cport = mc_test_free_port();
    l->pport = mc_test_free_port();
    snprintf(l->ep, sizeof(l->ep), "127.0.0.1:%u", (unsigned)l->cport);
    live_run(l);
    return 1;
}

static void live_kill(live_etcd_t *l)
{
    if (l->pid > 0) {
        kill(l->pid, SIGKILL);
        waitpid(l->pid, NULL, 0);
        l->pid = -1;
    }
}

static void live_stop(live_etcd_t *l)
{
    char cmd[PATH_MAX + 16];
    live_kill(l);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", l->dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_grpc_txns_against_etcd)
{
    live_etcd_t l;
    mc_etcd_t *e = NULL;
    mc_etcd_kv_t kv = {0};
    int64_t term;
    int created = 0;
    char eps[160], key[32];
    size_t big_n = 1u << 20;
    char *big;

    if (!live_start(&l))
        return;
    /* a dead first endpoint: skipped, as on the gateway */
    snprintf(eps, sizeof(eps), "127.0.0.1:%u;%s", (unsigned)mc_test_free_port(), l.ep);
    ck_assert_status_ok(mc_etcd_create(eps, 2000, &e));
    mc_etcd_use_grpc(e);
    ck_assert_status_ok(mc_etcd_create_if_absent(e, "pb/leader", "me", 2, 0, &created, &kv));
    term = kv.create_revision;
    mc_etcd_kv_cleanup(&kv);

    /* many in a row: one connection, reused */
    for (int i = 0; i < 50; i++) {
        char val[8] = {'v', 0, (char)i, (char)0xff, '\n', '"', '\\', 'z'};
        mc_etcd_op_t op = {.key = key, .val = val, .len = sizeof(val)};
        snprintf(key, sizeof(key), "pb/log/%02d", i);
        ck_assert_status_ok(mc_etcd_txn_guarded(e, "pb/leader", term, &op, 1));
        ck_assert_int_eq(mc_etcd_grpc_active(e), 1);
        ck_assert_status_ok(mc_etcd_get(e, key, &kv, NULL));
        ck_assert_uint_eq(kv.len, sizeof(val));
        ck_assert_int_eq(memcmp(kv.value, val, sizeof(val)), 0);
        mc_etcd_kv_cleanup(&kv);
    }
    /* a stale term and a missing guard do nothing */
    {
        mc_etcd_op_t op = {.key = "pb/log/00", .val = "X", .len = 1};
        ck_assert_status_eq(mc_etcd_txn_guarded(e, "pb/leader", term - 1, &op, 1),
                            MC_ETCD_TRANSACTION_FAIL);
        ck_assert_status_eq(mc_etcd_txn_guarded(e, "pb/nobody", term, &op, 1),
                            MC_ETCD_TRANSACTION_FAIL);
        ck_assert_status_ok(mc_etcd_get(e, "pb/log/00", &kv, NULL));
        ck_assert_uint_eq(kv.len, 8);
        mc_etcd_kv_cleanup(&kv);
    }
    /* a range delete and a 1 MiB value in one transaction */
    big = malloc(big_n);
    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i < big_n; i++)
        big[i] = (char)(i * 7 + 3);
    {
        mc_etcd_op_t ops[2] = {{.del = 1, .key = "pb/log/", .range_end = "pb/log0"},
                               {.key = "pb/big", .val = big, .len = big_n}};
        ck_assert_status_ok(mc_etcd_txn_guarded(e, "pb/leader", term, ops, 2));
    }
    ck_assert_status_eq(mc_etcd_get(e, "pb/log/07", &kv, NULL), MC_ETCD_KEY_NOT_EXIST);
    ck_assert_status_ok(mc_etcd_get(e, "pb/big", &kv, NULL));
    ck_assert_uint_eq(kv.len, big_n);
    ck_assert_int_eq(memcmp(kv.value, big, big_n), 0);
    mc_etcd_kv_cleanup(&kv);
    free(big);

    /* the member killed: an error, not a hang; restarted: reconnected */
    live_kill(&l);
    {
        mc_etcd_op_t op = {.key = "pb/after", .val = "1", .len = 1};
        ck_assert_status_eq(mc_etcd_txn_guarded(e, "pb/leader", term, &op, 1),
                            MC_ETCD_OPERATION_ERROR);
        live_run(&l);
        ck_assert_status_ok(mc_etcd_txn_guarded(e, "pb/leader", term, &op, 1));
        ck_assert_int_eq(mc_etcd_grpc_active(e), 1);
    }
    mc_etcd_destroy(e);
    live_stop(&l);
}
END_TEST

Suite *mc_test_etcd_pb_suite(void)
{
    Suite *s  = suite_create("etcd_pb");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_txn_put_encodes);
    tcase_add_test(tc, test_txn_delete_and_revisions_encode);
    tcase_add_test(tc, test_txn_large_values_encode);
    tcase_add_test(tc, test_txn_response_decodes);
    tcase_add_test(tc, test_txn_response_malformed);
    tcase_add_test(tc, test_grpc_unframe);
    suite_add_tcase(s, tc);
    tc = tcase_create("live");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_grpc_txns_against_etcd);
    suite_add_tcase(s, tc);
    return s;
}

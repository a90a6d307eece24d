/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The etcd client (libmooncake/coord/etcd.c) against a real etcd member
 * started here on free loopback ports, and one mooncake_master
 * --enable_ha campaigning in it (its clean shutdown hands the key back;
 * under the sanitizers it must also exit 0, leak-free).
 *
 * Without an etcd binary (/usr/bin/etcd, or $MC_ETCD_BIN) the cases that
 * need one say so and pass: scripts/deps.sh installs etcd-server for CI.
 */
#include "config.h"

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
#include "coord/etcd.h"
#include "master_proc.h"

static pid_t etcd_pid = -1;
static char etcd_dir[PATH_MAX];
static char etcd_ep[64];

static const char *etcd_bin(void)
{
    const char *b = getenv("MC_ETCD_BIN");
    return ((b != NULL) && (*b != '\0')) ? b : "/usr/bin/etcd";
}

/* Start one member; 0 when there is no etcd binary. */
static int etcd_start(void)
{
    char client[64], peer[64], initial[96], data[PATH_MAX + 8];
    uint16_t cport = mc_test_free_port(), pport = mc_test_free_port();
    mc_etcd_t *e = NULL;
    uint64_t deadline;

    if (access(etcd_bin(), X_OK) != 0) {
        fprintf(stderr, "test_etcd: no etcd at %s; skipping the cases that need one\n",
                etcd_bin());
        return 0;
    }
    snprintf(etcd_dir, sizeof(etcd_dir), "/tmp/mc-test-etcd-XXXXXX");
    ck_assert_msg(mkdtemp(etcd_dir) != NULL, "a temporary directory can be made");
    snprintf(data, sizeof(data), "%s/data", etcd_dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%u", (unsigned)cport);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", (unsigned)pport);
    snprintf(initial, sizeof(initial), "t=%s", peer);
    snprintf(etcd_ep, sizeof(etcd_ep), "127.0.0.1:%u", (unsigned)cport);
    etcd_pid = fork();
    ck_assert_msg(etcd_pid >= 0, "fork works");
    if (etcd_pid == 0) {
        int null = open("/dev/null", O_RDWR);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        execl(etcd_bin(), "etcd", "--name", "t", "--data-dir", data, "--listen-client-urls",
              client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
              "--initial-advertise-peer-urls", peer, "--initial-cluster", initial, (char *)NULL);
        _exit(127);
    }
    ck_assert_status_ok(mc_etcd_create(etcd_ep, 1000, &e));
    deadline = mc_test_now_ms() + 20000;
    while (mc_etcd_put(e, "mc-test/ready", "1", 1, 0) != MC_OK) {
        ck_assert_msg(mc_test_now_ms() < deadline, "etcd should accept a write within 20 s");
        poll(NULL, 0, 50);
    }
    mc_etcd_destroy(e);
    return 1;
}

static void etcd_stop(void)
{
    char cmd[PATH_MAX + 16];
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
        etcd_pid = -1;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", etcd_dir);
        ck_assert_int_eq(system(cmd), 0);
    }
}

START_TEST(test_base64_roundtrip)
{
    static const char *const known[][2] = {
        {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="},
        {"mooncake-store/mooncake_cluster/master_view",
         "bW9vbmNha2Utc3RvcmUvbW9vbmNha2VfY2x1c3Rlci9tYXN0ZXJfdmlldw=="},
    };
    unsigned char all[256];
    char *enc, *dec;
    size_t len;

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        enc = mc_etcd_b64_encode(known[i][0], strlen(known[i][0]));
        ck_assert_str_eq(enc, known[i][1]);
        ck_assert_int_eq(mc_etcd_b64_decode(enc, strlen(enc), &dec, &len), 0);
        ck_assert_uint_eq(len, strlen(known[i][0]));
        ck_assert_str_eq(dec, known[i][0]);
        free(enc);
        free(dec);
    }
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    for (size_t n = 0; n <= sizeof(all); n += 37) {
        enc = mc_etcd_b64_encode(all, n);
        ck_assert_int_eq(mc_etcd_b64_decode(enc, strlen(enc), &dec, &len), 0);
        ck_assert_msg((len == n) && (memcmp(dec, all, n) == 0), "%zu bytes round-trip", n);
        free(enc);
        free(dec);
    }
    /* malformed input is refused, never read past */
    ck_assert_int_eq(mc_etcd_b64_decode("abc", 3, &dec, &len), -1);
    ck_assert_int_eq(mc_etcd_b64_decode("ab!d", 4, &dec, &len), -1);
    ck_assert_int_eq(mc_etcd_b64_decode("a===", 4, &dec, &len), -1);
    ck_assert_int_eq(mc_etcd_b64_decode("=abc", 4, &dec, &len), -1);
}
END_TEST

START_TEST(test_endpoints_parsed)
{
    mc_etcd_t *e = NULL;
    ck_assert_status_eq(mc_etcd_create("", 0, &e), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_etcd_create(";;", 0, &e), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_etcd_create("host-without-port", 0, &e), MC_INVALID_PARAMS);
    ck_assert_msg(e == NULL, "a refused create should not write the handle");
    ck_assert_status_ok(mc_etcd_create("etcd://127.0.0.1:1;http://127.0.0.1:2/, 127.0.0.1:3", 0,
                                       &e));
    ck_assert_str_eq(mc_etcd_endpoints(e), "etcd://127.0.0.1:1;http://127.0.0.1:2/, 127.0.0.1:3");
    /* nothing listens on ports 1-3: every request fails, bounded */
    ck_assert_status_eq(mc_etcd_put(e, "k", "v", 1, 0), MC_ETCD_OPERATION_ERROR);
    mc_etcd_destroy(e);
    mc_etcd_destroy(NULL);
}
END_TEST

START_TEST(test_kv_txn_and_leases)
{
    mc_etcd_t *e = NULL;
    mc_etcd_kv_t kv = {0};
    int64_t rev = 0, lease = 0, ttl = 0, term;
    int created = -1;
    char eps[128];
    static const char bin[] = {'a', 0, 'b', (char)0xff};

    if (!etcd_start())
        return;
    /* the first endpoint is dead: requests fail over to the second */
    snprintf(eps, sizeof(eps), "127.0.0.1:1;%s", etcd_ep);
    ck_assert_status_ok(mc_etcd_create(eps, 1000, &e));

    ck_assert_status_eq(mc_etcd_get(e, "mc/absent", &kv, NULL), MC_ETCD_KEY_NOT_EXIST);
    ck_assert_status_ok(mc_etcd_put(e, "mc/bin", bin, sizeof(bin), 0));
    ck_assert_status_ok(mc_etcd_get(e, "mc/bin", &kv, &rev));
    ck_assert_msg((kv.len == sizeof(bin)) && (memcmp(kv.value, bin, sizeof(bin)) == 0),
                  "binary values round-trip");
    ck_assert_msg(rev >= kv.mod_revision && kv.create_revision > 0, "revisions are read");
    mc_etcd_kv_cleanup(&kv);
    ck_assert_status_ok(mc_etcd_put(e, "mc/empty", "", 0, 0));
    ck_assert_status_ok(mc_etcd_get(e, "mc/empty", &kv, NULL));
    ck_assert_uint_eq(kv.len, 0);
    mc_etcd_kv_cleanup(&kv);
    ck_assert_status_ok(mc_etcd_delete(e, "mc/bin"));
    ck_assert_status_ok(mc_etcd_delete(e, "mc/bin")); /* absent: still fine */
    ck_assert_status_eq(mc_etcd_get(e, "mc/bin", &kv, NULL), MC_ETCD_KEY_NOT_EXIST);

    /* election: the first create wins, the second reads the winner */
    ck_assert_status_ok(mc_etcd_lease_grant(e, 2, &lease, &ttl));
    ck_assert_int_eq(ttl, 2);
    ck_assert_status_ok(mc_etcd_create_if_absent(e, "mc/leader", "me:1", 4, lease, &created, &kv));
    ck_assert_int_eq(created, 1);
    term = kv.create_revision;
    ck_assert_msg(term > 0, "the winner learns its term");
    mc_etcd_kv_cleanup(&kv);
    ck_assert_status_ok(mc_etcd_create_if_absent(e, "mc/leader", "you:2", 5, 0, &created, &kv));
    ck_assert_int_eq(created, 0);
    ck_assert_str_eq(kv.value, "me:1");
    ck_assert_int_eq(kv.create_revision, term);
    ck_assert_int_eq(kv.lease, lease);
    mc_etcd_kv_cleanup(&kv);
    /* a stale term cannot delete the key */
    ck_assert_status_eq(mc_etcd_delete_if_created(e, "mc/leader", term - 1),
                        MC_ETCD_TRANSACTION_FAIL);
    ck_assert_status_ok(mc_etcd_lease_keepalive(e, lease, &ttl));
    ck_assert_int_eq(ttl, 2);
    /* revoking the lease takes the key with it */
    ck_assert_status_ok(mc_etcd_lease_revoke(e, lease));
    ck_assert_status_eq(mc_etcd_get(e, "mc/leader", &kv, NULL), MC_ETCD_KEY_NOT_EXIST);
    ck_assert_status_eq(mc_etcd_lease_keepalive(e, lease, &ttl), MC_ETCD_KEY_NOT_EXIST);
    ck_assert_status_ok(mc_etcd_lease_revoke(e, lease)); /* unknown: fine */
    /* the owner deletes its own term */
    ck_assert_status_ok(mc_etcd_create_if_absent(e, "mc/leader", "me:1", 4, 0, &created, &kv));
    term = kv.create_revision;
    mc_etcd_kv_cleanup(&kv);
    ck_assert_status_ok(mc_etcd_delete_if_created(e, "mc/leader", term));
    ck_assert_status_eq(mc_etcd_get(e, "mc/leader", &kv, NULL), MC_ETCD_KEY_NOT_EXIST);
    mc_etcd_destroy(e);
    etcd_stop();
}
END_TEST

typedef struct range_seen {
    char keys[8][32];
    char vals[8][8];
    int n;
} range_seen_t;

static int range_cb(void *arg, const char *key, size_t keylen, const char *val, size_t len)
{
    range_seen_t *r = arg;
    ck_assert_int_lt(r->n, 8);
    snprintf(r->keys[r->n], sizeof(r->keys[0]), "%.*s", (int)keylen, key);
    snprintf(r->vals[r->n], sizeof(r->vals[0]), "%.*s", (int)len, val);
    r->n++;
    return 0;
}

/* The guarded transaction (a leader's fenced log append) and ranges. */
START_TEST(test_guarded_txn_and_range)
{
    mc_etcd_t *e = NULL;
    mc_etcd_kv_t kv = {0};
    range_seen_t seen;
    int64_t term;
    int created = 0, more = -1;

    if (!etcd_start())
        return;
    ck_assert_status_ok(mc_etcd_create(etcd_ep, 1000, &e));
    ck_assert_status_ok(mc_etcd_create_if_absent(e, "g/leader", "me", 2, 0, &created, &kv));
    term = kv.create_revision;
    mc_etcd_kv_cleanup(&kv);
    {
        mc_etcd_op_t ops[3] = {{.key = "g/log/1", .val = "a", .len = 1},
                               {.key = "g/log/2", .val = "b", .len = 1},
                               {.key = "g/log/3", .val = "c", .len = 1}};
        ck_assert_status_ok(mc_etcd_txn_guarded(e, "g/leader", term, ops, 3));
        /* a stale term does nothing, not even part of the ops */
        ops[0].val = "X";
        ck_assert_status_eq(mc_etcd_txn_guarded(e, "g/leader", term - 1, ops, 1),
                            MC_ETCD_TRANSACTION_FAIL);
    }
    memset(&seen, 0, sizeof(seen));
    ck_assert_status_ok(mc_etcd_range(e, "g/log/", "g/log0", 2, range_cb, &seen, &more));
    ck_assert_int_eq(seen.n, 2);
    ck_assert_int_eq(more, 1);
    ck_assert_str_eq(seen.keys[0], "g/log/1");
    ck_assert_str_eq(seen.vals[0], "a");
    ck_assert_str_eq(seen.keys[1], "g/log/2");
    {
        /* delete a range under the guard: g/log/1 and g/log/2 go */
        mc_etcd_op_t del = {.del = 1, .key = "g/log/", .range_end = "g/log/3"};
        ck_assert_status_ok(mc_etcd_txn_guarded(e, "g/leader", term, &del, 1));
    }
    memset(&seen, 0, sizeof(seen));
    ck_assert_status_ok(mc_etcd_range(e, "g/log/", "g/log0", 0, range_cb, &seen, &more));
    ck_assert_int_eq(seen.n, 1);
    ck_assert_int_eq(more, 0);
    ck_assert_str_eq(seen.keys[0], "g/log/3");
    /* the guard key gone: nothing passes */
    ck_assert_status_ok(mc_etcd_delete(e, "g/leader"));
    {
        mc_etcd_op_t op = {.key = "g/log/4", .val = "d", .len = 1};
        ck_assert_status_eq(mc_etcd_txn_guarded(e, "g/leader", term, &op, 1),
                            MC_ETCD_TRANSACTION_FAIL);
    }
    ck_assert_status_eq(mc_etcd_get(e, "g/log/4", &kv, NULL), MC_ETCD_KEY_NOT_EXIST);
    mc_etcd_destroy(e);
    etcd_stop();
}
END_TEST

/* A master with --enable_ha takes the key with its address, and a clean
 * stop (SIGTERM) gives it back and exits 0. */
START_TEST(test_master_campaigns_and_hands_back)
{
    mc_test_master_t m;
    mc_etcd_t *e = NULL;
    mc_etcd_kv_t kv = {0};
    char ep_arg[96];
    const char *extra[] = {"--enable_ha=true", ep_arg, "--ha_lease_ttl_sec=2", NULL};
    uint64_t deadline;

    if (!etcd_start())
        return;
    snprintf(ep_arg, sizeof(ep_arg), "--etcd_endpoints=%s", etcd_ep);
    ck_assert_status_ok(mc_etcd_create(etcd_ep, 1000, &e));
    mc_test_master_start(&m, extra);
    deadline = mc_test_now_ms() + 10000;
    while (mc_etcd_get(e, "mooncake-store/mooncake_cluster/master_view", &kv, NULL) != MC_OK) {
        ck_assert_msg(mc_test_now_ms() < deadline, "the master should be elected within 10 s");
        poll(NULL, 0, 20);
    }
    ck_assert_str_eq(kv.value, m.addr);
    ck_assert_msg(kv.lease != 0, "the leader key is bound to a lease");
    mc_etcd_kv_cleanup(&kv);
    ck_assert_int_eq(mc_test_master_stop(&m), 0);
    ck_assert_status_eq(mc_etcd_get(e, "mooncake-store/mooncake_cluster/master_view", &kv, NULL),
                        MC_ETCD_KEY_NOT_EXIST);
    mc_etcd_destroy(e);
    etcd_stop();
}
END_TEST

Suite *mc_test_etcd_suite(void)
{
    Suite *s   = suite_create("etcd");
    TCase *tc  = tcase_create("codec");
    TCase *real = tcase_create("real etcd");

    tcase_add_test(tc, test_base64_roundtrip);
    tcase_add_test(tc, test_endpoints_parsed);
    suite_add_tcase(s, tc);
    tcase_set_timeout(real, 60);
    tcase_add_test(real, test_kv_txn_and_leases);
    tcase_add_test(real, test_guarded_txn_and_range);
    tcase_add_test(real, test_master_campaigns_and_hands_back);
    suite_add_tcase(s, real);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The write side of the store client against the real mooncake_master:
 * upsert (in place, resized, batch), zero-copy writes from registered
 * memory, the ReplicateConfig rules checked on the client, the removal
 * family, replica descriptors, and the host memory and NUMA helpers.
 *
 * Every case of the "master" TCase starts its own mooncake_master
 * (master_proc.h) and stops it in teardown.  Values are
 * compared byte for byte after a read through the normal get path.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/mooncake.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store_util.h"

/* ---- the real master ------------------------------------------------------ */

static mc_test_master_t master;

static void master_start(void)
{
    static const char *const flags[] = {"--default_kv_lease_ttl=3000", NULL};
    mc_test_master_start(&master, flags);
}

static void master_stop(void)
{
    mc_test_master_stop(&master);
}

/* ---- stores ------------------------------------------------------------------ */

static mc_store_h store;

static void setup_master(void)
{
    master_start();
    store = st_open(master.addr, 8u << 20);
}

static void teardown_master(void)
{
    mc_store_destroy(store);
    store = NULL;
    master_stop();
}

/* ---- upsert ------------------------------------------------------------------ */

START_TEST(test_upsert_new_same_and_resized)
{
    uint8_t a[3000], b[3000], c[7000], d[100];

    st_pattern(a, sizeof(a), 1);
    st_pattern(b, sizeof(b), 2);
    st_pattern(c, sizeof(c), 3);
    st_pattern(d, sizeof(d), 4);

    /* a new key behaves as put */
    ck_assert_status_ok(mc_store_upsert(store, "up-k", a, sizeof(a), NULL));
    st_value(store, "up-k", a, sizeof(a));
    /* put of an existing key keeps the old value; upsert replaces it */
    ck_assert_status_ok(mc_store_put(store, "up-k", b, sizeof(b), NULL));
    st_value(store, "up-k", a, sizeof(a));
    /* same size (assert_value left a read lease: fresh buffers, same bytes) */
    ck_assert_status_ok(mc_store_upsert(store, "up-k", b, sizeof(b), NULL));
    st_value(store, "up-k", b, sizeof(b));
    /* larger, then smaller */
    ck_assert_status_ok(mc_store_upsert(store, "up-k", c, sizeof(c), NULL));
    st_value(store, "up-k", c, sizeof(c));
    ck_assert_status_ok(mc_store_upsert(store, "up-k", d, sizeof(d), NULL));
    st_value(store, "up-k", d, sizeof(d));

    /* an empty value stores nothing, as for put */
    ck_assert_status_ok(mc_store_upsert(store, "up-empty", d, 0, NULL));
    st_missing(store, "up-empty");
    ck_assert_status_eq(mc_store_upsert(store, "", d, sizeof(d), NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_upsert(store, "up-null", NULL, 10, NULL), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_upsert_in_place_without_lease)
{
    uint8_t a[4096], b[4096];
    mc_store_h other;

    st_pattern(a, sizeof(a), 5);
    st_pattern(b, sizeof(b), 6);
    /* written by a second client so that this one never takes a lease */
    other = st_open(master.addr, 0);
    ck_assert_status_ok(mc_store_put(store, "ip-k", a, sizeof(a), NULL));
    ck_assert_status_ok(mc_store_upsert(other, "ip-k", b, sizeof(b), NULL));
    st_value(other, "ip-k", b, sizeof(b));
    mc_store_destroy(other);
}
END_TEST

START_TEST(test_upsert_parts_and_batch)
{
    uint8_t a[1000], b[2000], c[500];
    uint8_t joined[3500];
    mc_iov_t parts[3];
    const char *keys[4] = {"ub-old", "ub-new", "", "ub-empty"};
    mc_iov_t vals[4];
    mc_status_t st[4];

    st_pattern(a, sizeof(a), 7);
    st_pattern(b, sizeof(b), 8);
    st_pattern(c, sizeof(c), 9);
    parts[0] = (mc_iov_t){a, sizeof(a)};
    parts[1] = (mc_iov_t){NULL, 0}; /* empty parts are fine */
    parts[2] = (mc_iov_t){b, sizeof(b)};
    memcpy(joined, a, sizeof(a));
    memcpy(joined + sizeof(a), b, sizeof(b));

    ck_assert_status_ok(mc_store_put(store, "up-parts", c, sizeof(c), NULL));
    ck_assert_status_ok(mc_store_upsert_parts(store, "up-parts", parts, 3, NULL));
    st_value(store, "up-parts", joined, sizeof(a) + sizeof(b));

    ck_assert_status_ok(mc_store_put(store, "ub-old", c, sizeof(c), NULL));
    vals[0] = (mc_iov_t){b, sizeof(b)};
    vals[1] = (mc_iov_t){a, sizeof(a)};
    vals[2] = (mc_iov_t){a, sizeof(a)};
    vals[3] = (mc_iov_t){a, 0};
    ck_assert_status_eq(mc_store_upsert_batch(store, keys, vals, 4, NULL, st),
                        MC_INVALID_PARAMS);
    ck_assert_status_ok(st[0]);
    ck_assert_status_ok(st[1]);
    ck_assert_status_eq(st[2], MC_INVALID_PARAMS);
    ck_assert_status_ok(st[3]);
    st_value(store, "ub-old", b, sizeof(b));
    st_value(store, "ub-new", a, sizeof(a));
    st_missing(store, "ub-empty");

    /* the batch form replaces in one go as well */
    vals[0] = (mc_iov_t){c, sizeof(c)};
    vals[1] = (mc_iov_t){c, sizeof(c)};
    ck_assert_status_ok(mc_store_upsert_batch(store, keys, vals, 2, NULL, st));
    st_value(store, "ub-old", c, sizeof(c));
    st_value(store, "ub-new", c, sizeof(c));
}
END_TEST

/* ---- zero copy ------------------------------------------------------------------ */

START_TEST(test_put_from_needs_registered_memory)
{
    size_t len  = 64u << 10;
    uint8_t *rg = NULL, *plain = malloc(8192);
    void *pool  = NULL;

    ck_assert_ptr_nonnull(plain);
    st_pattern(plain, 8192, 10);
    ck_assert_status_eq(mc_store_put_from(store, "pf-plain", plain, 8192, NULL),
                        MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "registered") != NULL,
                  "the detail should say the memory is not registered, not \"%s\"",
                  mc_last_error_detail());
    st_missing(store, "pf-plain");
    ck_assert_status_eq(mc_store_upsert_from(store, "pf-plain", plain, 8192, NULL),
                        MC_INVALID_PARAMS);
    st_missing(store, "pf-plain");
    /* a zero-length write stores nothing and needs no memory */
    ck_assert_status_ok(mc_store_put_from(store, "pf-zero", plain, 0, NULL));
    st_missing(store, "pf-zero");

    /* registered memory from the host allocator */
    ck_assert_status_ok(mc_host_mem_alloc(len, (void **)&rg));
    st_pattern(rg, len, 11);
    ck_assert_status_ok(mc_store_register_buffer(store, rg, len));
    ck_assert_status_ok(mc_store_put_from(store, "pf-reg", rg + 100, 5000, NULL));
    st_value(store, "pf-reg", rg + 100, 5000);
    /* a range that leaves the region is refused */
    ck_assert_status_eq(mc_store_put_from(store, "pf-over", rg + len - 10, 20, NULL),
                        MC_INVALID_PARAMS);
    st_missing(store, "pf-over");
    st_pattern(rg, len, 12);
    ck_assert_status_ok(mc_store_upsert_from(store, "pf-reg", rg, 9000, NULL));
    st_value(store, "pf-reg", rg, 9000);

    /* the store's own pool counts as registered */
    ck_assert_status_ok(mc_store_mem_pool_alloc(store, 4096, &pool));
    st_pattern(pool, 4096, 13);
    ck_assert_status_ok(mc_store_put_from(store, "pf-pool", pool, 4096, NULL));
    st_value(store, "pf-pool", pool, 4096);
    ck_assert_status_ok(mc_store_mem_pool_free(store, pool));

    ck_assert_status_ok(mc_store_unregister_buffer(store, rg));
    ck_assert_status_eq(mc_store_put_from(store, "pf-after", rg, 100, NULL), MC_INVALID_PARAMS);
    st_missing(store, "pf-after");
    ck_assert_status_ok(mc_host_mem_free(rg));
    free(plain);
}
END_TEST

START_TEST(test_batch_put_from_multi_scatter)
{
    size_t len  = 64u << 10;
    uint8_t *rg = NULL, *plain = malloc(256);
    const char *keys[5] = {"bm-0", "bm-1", "bm-bad", "bm-empty", "bm-3"};
    mc_iov_t k0[3], k1[1], kbad[2], k3[2];
    const mc_iov_t *bufs[5];
    size_t counts[5] = {3, 1, 2, 0, 2};
    mc_status_t st[5];
    uint8_t want0[700], want3[300];

    ck_assert_ptr_nonnull(plain);
    ck_assert_status_ok(mc_host_mem_alloc(len, (void **)&rg));
    st_pattern(rg, len, 14);
    ck_assert_status_ok(mc_store_register_buffer(store, rg, len));

    k0[0] = (mc_iov_t){rg + 9000, 100};
    k0[1] = (mc_iov_t){rg + 10, 500};
    k0[2] = (mc_iov_t){rg + 30000, 100};
    memcpy(want0, rg + 9000, 100);
    memcpy(want0 + 100, rg + 10, 500);
    memcpy(want0 + 600, rg + 30000, 100);
    k1[0]   = (mc_iov_t){rg + 40000, 20000};
    kbad[0] = (mc_iov_t){rg, 100};
    kbad[1] = (mc_iov_t){plain, 256}; /* not registered: the whole key fails */
    k3[0]   = (mc_iov_t){rg + 50, 200};
    k3[1]   = (mc_iov_t){rg + 50, 100}; /* the same bytes twice is fine */
    memcpy(want3, rg + 50, 200);
    memcpy(want3 + 200, rg + 50, 100);
    bufs[0] = k0;
    bufs[1] = k1;
    bufs[2] = kbad;
    bufs[3] = NULL;
    bufs[4] = k3;

    ck_assert_status_eq(mc_store_batch_put_from_multi(store, keys, bufs, counts, 5, NULL, st),
                        MC_INVALID_PARAMS);
    ck_assert_status_ok(st[0]);
    ck_assert_status_ok(st[1]);
    ck_assert_status_eq(st[2], MC_INVALID_PARAMS);
    ck_assert_status_ok(st[3]);
    ck_assert_status_ok(st[4]);
    st_value(store, "bm-0", want0, sizeof(want0));
    st_value(store, "bm-1", rg + 40000, 20000);
    st_missing(store, "bm-bad");
    st_missing(store, "bm-empty");
    st_value(store, "bm-3", want3, sizeof(want3));

    /* the upsert form replaces: bm-0 becomes one fragment */
    counts[0] = 1;
    k0[0]     = (mc_iov_t){rg + 1234, 4321};
    ck_assert_status_ok(mc_store_batch_upsert_from_multi(store, keys, bufs, counts, 2, NULL, st));
    st_value(store, "bm-0", rg + 1234, 4321);
    st_value(store, "bm-1", rg + 40000, 20000);

    /* missing arrays: one INVALID_PARAMS per key */
    ck_assert_status_eq(mc_store_batch_put_from_multi(store, keys, NULL, counts, 2, NULL, st),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(st[0], MC_INVALID_PARAMS);
    ck_assert_status_eq(st[1], MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_batch_put_from_multi(store, keys, bufs, counts, 0, NULL, st));
    /* hostile shapes fail key by key: a NULL list with a huge count, a NULL key */
    {
        const mc_iov_t *hb[2] = {NULL, k1};
        size_t hc[2]          = {SIZE_MAX, 1};
        const char *hk[2]     = {"bm-h0", NULL};
        ck_assert_status_eq(mc_store_batch_put_from_multi(store, hk, hb, hc, 2, NULL, st),
                            MC_INVALID_PARAMS);
        ck_assert_status_eq(st[0], MC_INVALID_PARAMS);
        ck_assert_status_eq(st[1], MC_INVALID_PARAMS);
        st_missing(store, "bm-h0");
    }

    ck_assert_status_ok(mc_store_unregister_buffer(store, rg));
    ck_assert_status_ok(mc_host_mem_free(rg));
    free(plain);
}
END_TEST

/* ---- ReplicateConfig ---------------------------------------------------------- */

START_TEST(test_prefer_alloc_in_same_node_rules)
{
    uint8_t v[512];
    uint8_t *rg = NULL;
    mc_replicate_config_t cfg;
    const char *keys[2] = {"sn-b0", "sn-b1"};
    mc_iov_t vals[2];
    const mc_iov_t *bufs[2];
    size_t counts[2] = {1, 1};
    mc_status_t st[2];

    st_pattern(v, sizeof(v), 15);
    ck_assert_status_ok(mc_host_mem_alloc(4096, (void **)&rg));
    memcpy(rg, v, sizeof(v));
    ck_assert_status_ok(mc_store_register_buffer(store, rg, 4096));
    mc_replicate_config_init(&cfg);
    cfg.prefer_alloc_in_same_node = 1;

    /* refused by the single-buffer writes, as upstream */
    ck_assert_status_eq(mc_store_put(store, "sn-put", v, sizeof(v), &cfg), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_put_parts(store, "sn-put", vals, 0, &cfg), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_put_from(store, "sn-put", rg, sizeof(v), &cfg),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_upsert(store, "sn-put", v, sizeof(v), &cfg),
                        MC_INVALID_PARAMS);
    vals[0] = (mc_iov_t){v, sizeof(v)};
    vals[1] = (mc_iov_t){v, sizeof(v)};
    ck_assert_status_eq(mc_store_put_batch(store, keys, vals, 2, &cfg, st), MC_INVALID_PARAMS);
    ck_assert_status_eq(st[0], MC_INVALID_PARAMS);
    ck_assert_status_eq(st[1], MC_INVALID_PARAMS);
    st_missing(store, "sn-put");
    st_missing(store, "sn-b0");

    /* accepted by the multi-buffer writes, with replica_num 1 only */
    bufs[0] = &vals[0];
    bufs[1] = &vals[1];
    vals[0] = (mc_iov_t){rg, sizeof(v)};
    vals[1] = (mc_iov_t){rg, 100};
    cfg.replica_num = 2;
    ck_assert_status_eq(mc_store_batch_put_from_multi(store, keys, bufs, counts, 2, &cfg, st),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(st[0], MC_INVALID_PARAMS);
    st_missing(store, "sn-b0");
    cfg.replica_num = 1;
    ck_assert_status_ok(mc_store_batch_put_from_multi(store, keys, bufs, counts, 2, &cfg, st));
    st_value(store, "sn-b0", v, sizeof(v));
    st_value(store, "sn-b1", v, 100);

    ck_assert_status_ok(mc_store_unregister_buffer(store, rg));
    ck_assert_status_ok(mc_host_mem_free(rg));
}
END_TEST

START_TEST(test_config_rules)
{
    uint8_t v[256];
    mc_replicate_config_t cfg;
    const char *gids2[2] = {"g-a", "g-b"};
    const char *keys[2]  = {"cf-b0", "cf-b1"};
    mc_iov_t vals[2]     = {{v, sizeof(v)}, {v, sizeof(v)}};
    mc_status_t st[2];

    st_pattern(v, sizeof(v), 16);

    /* soft_pin_ttl_ms needs ENABLE */
    mc_replicate_config_init(&cfg);
    cfg.field_mask      = MC_RC_FIELD_SOFT_PIN_TTL;
    cfg.soft_pin_ttl_ms = 1000;
    ck_assert_status_eq(mc_store_put(store, "cf-pin", v, sizeof(v), &cfg), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_upsert(store, "cf-pin", v, sizeof(v), &cfg), MC_INVALID_PARAMS);
    cfg.soft_pin_action = MC_SOFT_PIN_ENABLE;
    ck_assert_status_ok(mc_store_put(store, "cf-pin", v, sizeof(v), &cfg));
    st_value(store, "cf-pin", v, sizeof(v));

    /* group_ids: exactly one for a single write, one per key for a batch */
    mc_replicate_config_init(&cfg);
    cfg.field_mask      = MC_RC_FIELD_GROUP_IDS;
    cfg.group_ids       = gids2;
    cfg.group_ids_count = 2;
    ck_assert_status_eq(mc_store_put(store, "cf-g", v, sizeof(v), &cfg), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_put_batch(store, keys, vals, 2, &cfg, st));
    ck_assert_status_ok(st[0]);
    ck_assert_status_ok(st[1]);
    cfg.group_ids_count = 1;
    ck_assert_status_ok(mc_store_put(store, "cf-g", v, sizeof(v), &cfg));
    ck_assert_status_eq(mc_store_upsert_batch(store, keys, vals, 2, &cfg, st),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(st[1], MC_INVALID_PARAMS);

    /* zero replicas of every kind */
    mc_replicate_config_init(&cfg);
    cfg.replica_num = 0;
    ck_assert_status_eq(mc_store_put(store, "cf-zero", v, sizeof(v), &cfg), MC_INVALID_PARAMS);

    /* NoF replicas with no NoF segment mounted: the write fails whole */
    mc_replicate_config_init(&cfg);
    cfg.nof_replica_num = 1;
    ck_assert_status_eq(mc_store_put(store, "cf-nof", v, sizeof(v), &cfg),
                        MC_NO_AVAILABLE_HANDLE);
    st_missing(store, "cf-nof");
    /* a NoF preference without NoF replicas would be ignored: refused */
    {
        const char *pref[] = {"node:1"};
        mc_replicate_config_init(&cfg);
        cfg.field_mask |= MC_RC_FIELD_PREFERRED_NOF;
        cfg.preferred_nof_segments       = pref;
        cfg.preferred_nof_segments_count = 1;
        ck_assert_status_eq(mc_store_put(store, "cf-pref", v, sizeof(v), &cfg),
                            MC_INVALID_PARAMS);
        cfg.preferred_nof_segments_count = 17; /* one above the bound */
        cfg.nof_replica_num              = 1;
        ck_assert_status_eq(mc_store_put(store, "cf-pref", v, sizeof(v), &cfg),
                            MC_INVALID_PARAMS);
        st_missing(store, "cf-pref");
    }
}
END_TEST

/* ---- removal ------------------------------------------------------------------ */

START_TEST(test_batch_remove)
{
    uint8_t v[128];
    uint64_t size;
    const char *keys[4] = {"br-1", "br-missing", "br-leased", ""};
    mc_status_t st[4];

    st_pattern(v, sizeof(v), 17);
    ck_assert_status_ok(mc_store_put(store, "br-1", v, sizeof(v), NULL));
    ck_assert_status_ok(mc_store_put(store, "br-leased", v, sizeof(v), NULL));
    ck_assert_status_ok(mc_store_get_size(store, "br-leased", &size)); /* takes a lease */

    ck_assert_int_lt(mc_store_batch_remove(store, keys, 4, 0, st), 0);
    ck_assert_status_ok(st[0]);
    ck_assert_status_eq(st[1], MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(st[2], MC_OBJECT_HAS_LEASE);
    ck_assert_status_eq(st[3], MC_INVALID_PARAMS);
    st_missing(store, "br-1");
    st_value(store, "br-leased", v, sizeof(v));

    /* force ignores the lease */
    ck_assert_status_ok(mc_store_batch_remove(store, &keys[2], 1, 1, st));
    ck_assert_status_ok(st[0]);
    st_missing(store, "br-leased");
    ck_assert_status_ok(mc_store_batch_remove(store, keys, 0, 0, st));
    ck_assert_status_eq(mc_store_batch_remove(store, NULL, 2, 0, st), MC_INVALID_PARAMS);
    ck_assert_status_eq(st[1], MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_remove_by_regex_and_all)
{
    uint8_t v[64];
    int64_t count = -1;
    const char *names[5] = {"rx-a-1", "rx-a-2", "rx-a", "rx-b-1", "other"};

    st_pattern(v, sizeof(v), 18);
    for (size_t i = 0; i < 5; i++)
        ck_assert_status_ok(mc_store_put(store, names[i], v, sizeof(v), NULL));

    ck_assert_status_eq(mc_store_remove_by_regex(store, "rx-(a", 0, &count), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "POSIX extended") != NULL,
                  "the detail should explain the pattern, not \"%s\"", mc_last_error_detail());
    ck_assert_int_eq(count, -1);
    ck_assert_status_eq(mc_store_remove_by_regex(store, NULL, 0, &count), MC_INVALID_PARAMS);

    ck_assert_status_ok(mc_store_remove_by_regex(store, "^rx-a-[0-9]+$", 0, &count));
    ck_assert_int_eq(count, 2);
    ck_assert_status_ok(mc_store_remove_by_regex(store, "^nothing-matches$", 0, &count));
    ck_assert_int_eq(count, 0);
    st_missing(store, "rx-a-1");
    st_missing(store, "rx-a-2");

    ck_assert_status_ok(mc_store_remove_all(store, 0, &count));
    ck_assert_int_eq(count, 3);
    st_missing(store, "rx-a");
    st_missing(store, "rx-b-1");
    st_missing(store, "other");
    ck_assert_status_ok(mc_store_remove_all(store, 1, &count));
    ck_assert_int_eq(count, 0);
}
END_TEST

/* ---- replica descriptors ------------------------------------------------------- */

START_TEST(test_replica_descriptors)
{
    uint8_t v[10000];
    mc_store_h b;
    mc_store_query_h q = NULL;
    mc_replica_desc_t d[2];
    mc_replicate_config_t cfg;
    const char *ha, *hb;
    int seen_a = 0, seen_b = 0;

    st_pattern(v, sizeof(v), 19);
    b  = st_open(master.addr, 8u << 20);
    ha = mc_store_hostname(store);
    hb = mc_store_hostname(b);
    mc_replicate_config_init(&cfg);
    cfg.replica_num = 2;
    ck_assert_status_ok(mc_store_put(store, "rd-k", v, sizeof(v), &cfg));

    ck_assert_status_ok(mc_store_query(store, "rd-k", &q));
    ck_assert_uint_eq(mc_store_query_replica_count(q), 2);
    for (size_t i = 0; i < 2; i++) {
        ck_assert_status_ok(mc_store_query_replica(q, i, &d[i]));
        ck_assert_int_eq(d[i].status, MC_REPLICA_COMPLETE);
        ck_assert_int_eq(d[i].is_memory, 1);
        ck_assert_uint_eq(d[i].size, sizeof(v));
        ck_assert_uint_ne(d[i].addr, 0);
        ck_assert_str_eq(d[i].protocol, "tcp");
        seen_a += (strcmp(d[i].segment, ha) == 0);
        seen_b += (strcmp(d[i].segment, hb) == 0);
    }
    ck_assert_msg((seen_a == 1) && (seen_b == 1),
                  "the two replicas should be on the two clients' segments (%s, %s), "
                  "not on %s and %s", ha, hb, d[0].segment, d[1].segment);
    /* the first one is this client's own */
    ck_assert_str_eq(d[0].segment, ha);
    ck_assert_status_eq(mc_store_query_replica(q, 2, &d[0]), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_query_replica(q, 0, NULL), MC_INVALID_PARAMS);
    mc_store_query_release(q);
    ck_assert_uint_eq(mc_store_query_replica_count(NULL), 0);

    /* the other client goes away: its replica goes, the object stays readable */
    mc_store_destroy(b);
    ck_assert_status_ok(mc_store_query(store, "rd-k", &q));
    ck_assert_uint_eq(mc_store_query_replica_count(q), 1);
    ck_assert_status_ok(mc_store_query_replica(q, 0, &d[0]));
    ck_assert_str_eq(d[0].segment, ha);
    mc_store_query_release(q);
    st_value(store, "rd-k", v, sizeof(v));
}
END_TEST

/* ---- segment mounting (mount.c) ------------------------------------------------ */

/* A /dev/shm file of @p size bytes mapped here too: what the store writes
 * into a segment mounted from it shows up in @p view_p. */
static int shm_file(char *path, size_t cap, size_t size, uint8_t **view_p)
{
    int fd;

    snprintf(path, cap, "/dev/shm/mc-unit-%d-%llu", (int)getpid(),
             (unsigned long long)mc_test_now_ms());
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    *view_p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(*view_p, MAP_FAILED);
    close(fd);
    return 0;
}

START_TEST(test_mount_segments)
{
    uint8_t v[20000], *view;
    char path[128];
    mc_store_h b = st_open(master.addr, 0);
    mc_segment_id_t id, aid;
    const char *ids[2];
    uint64_t allocated = 0;
    mc_replicate_config_t cfg;
    uint64_t size;
    int gone = 0;

    shm_file(path, sizeof(path), 4u << 20, &view);
    mc_replicate_config_init(&cfg);
    cfg.preferred_segment = mc_store_hostname(b);

    /* misuse first: nothing gets mounted */
    ck_assert_status_eq(mc_store_mount_segment(b, path, 1u << 20, 100, "tcp", "", &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_mount_segment(b, path, 8u << 20, 0, "tcp", "", &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_mount_segment(b, path, 0, 0, NULL, NULL, &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_mount_segment(b, "/nonexistent/x", 4096, 0, NULL, NULL, &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_mount_segment(b, NULL, 4096, 0, NULL, NULL, &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_mount_segment(b, path, 4096, 0, NULL, NULL, NULL),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_allocate_and_mount_segment(b, 0, NULL, NULL, &aid, NULL),
                        MC_INVALID_PARAMS);

    /* a file segment: objects for b land in the file's bytes */
    ck_assert_status_ok(mc_store_mount_segment(b, path, 4u << 20, 0, "tcp", "", &id));
    ck_assert_uint_eq(strlen(id.id), 36);
    st_pattern(v, sizeof(v), 23);
    ck_assert_status_ok(mc_store_put(store, "ms-k", v, sizeof(v), &cfg));
    ck_assert_ptr_nonnull(memmem(view, 4u << 20, v, sizeof(v)));
    st_value(store, "ms-k", v, sizeof(v));

    /* an allocated one, page rounded; unmount_and_free refuses the file one */
    ck_assert_status_ok(mc_store_allocate_and_mount_segment(b, 5000, NULL, "", &aid,
                                                            &allocated));
    ck_assert_uint_eq(allocated % (uint64_t)sysconf(_SC_PAGESIZE), 0);
    ck_assert_uint_ge(allocated, 5000);
    ids[0] = aid.id;
    ids[1] = id.id;
    ck_assert_status_eq(mc_store_unmount_and_free_segments(b, ids, 2, 0), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_unmount_and_free_segments(b, ids, 1, 0));
    ck_assert_status_eq(mc_store_unmount_and_free_segments(b, ids, 1, 0), MC_SEGMENT_NOT_FOUND);

    /* graceful: readable meanwhile, no new object lands there, then gone.
     * The put may fill a reservation placed there before the drain
     * (docs/protocol.md §5.16): its commit is refused and the value is
     * stored elsewhere, which the read after the unmount shows. */
    ck_assert_status_ok(mc_store_unmount_segments(b, &ids[1], 1, 1));
    st_value(store, "ms-k", v, sizeof(v));
    st_pattern(v, sizeof(v), 29);
    ck_assert_status_ok(mc_store_put(store, "ms-new", v, sizeof(v), &cfg));
    for (int i = 0; (i < 1000) && !gone; i++) {
        gone = (mc_store_get_size(store, "ms-k", &size) == MC_OBJECT_NOT_FOUND);
        if (!gone)
            usleep(10000);
    }
    ck_assert_msg(gone, "the drained segment should be unmounted after its grace period");
    st_value(store, "ms-new", v, sizeof(v));
    ck_assert_status_eq(mc_store_unmount_segments(b, &ids[1], 1, 0), MC_SEGMENT_NOT_FOUND);
    ids[0] = "not-a-uuid";
    ck_assert_status_eq(mc_store_unmount_segments(b, ids, 1, 0), MC_INVALID_PARAMS);

    mc_store_destroy(b);
    ck_assert_status_eq(mc_store_unmount_segments(NULL, ids, 1, 0), MC_INVALID_PARAMS);
    munmap(view, 4u << 20);
    unlink(path);
}
END_TEST

/* ---- host memory and NUMA (no master) ------------------------------------------ */

START_TEST(test_host_mem)
{
    void *p = NULL, *q = NULL;
    long page = sysconf(_SC_PAGESIZE);
    int on_stack;

    ck_assert_status_ok(mc_host_mem_alloc(1, &p));
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(((uintptr_t)p % (uintptr_t)page) == 0, "host memory should be page aligned");
    memset(p, 0xab, (size_t)page); /* the whole page is ours */
    ck_assert_status_ok(mc_host_mem_alloc(3u << 20, &q));
    memset(q, 0xcd, 3u << 20);
    ck_assert_ptr_ne(p, q);

    ck_assert_status_eq(mc_host_mem_alloc(0, &p), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_host_mem_alloc(SIZE_MAX, &p), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_host_mem_alloc(16, NULL), MC_INVALID_PARAMS);

    ck_assert_status_eq(mc_host_mem_free(&on_stack), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_host_mem_free(NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_host_mem_free((uint8_t *)q + 4096), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_host_mem_free(p));
    ck_assert_status_eq(mc_host_mem_free(p), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_host_mem_free(q));
}
END_TEST

START_TEST(test_numa_bind)
{
    mc_status_t st = mc_numa_bind(0);

    if (st == MC_NOT_SUPPORTED) {
        ck_assert_msg(strstr(mc_last_error_detail(), "NUMA is not available") != NULL,
                      "NOT_SUPPORTED should say why, not \"%s\"", mc_last_error_detail());
        ck_assert_status_eq(mc_numa_bind(-1), MC_NOT_SUPPORTED);
        return;
    }
    ck_assert_status_ok(st);
    ck_assert_status_eq(mc_numa_bind(-1), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_numa_bind(1 << 20), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "does not exist") != NULL,
                  "a bad node should be named in the detail, not \"%s\"",
                  mc_last_error_detail());
}
END_TEST

Suite *mc_test_store_write_suite(void)
{
    Suite *s  = suite_create("store_write");
    TCase *tc = tcase_create("local");
    tcase_add_test(tc, test_host_mem);
    tcase_add_test(tc, test_numa_bind);
    suite_add_tcase(s, tc);

    tc = tcase_create("master");
    tcase_add_checked_fixture(tc, setup_master, teardown_master);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_upsert_new_same_and_resized);
    tcase_add_test(tc, test_upsert_in_place_without_lease);
    tcase_add_test(tc, test_upsert_parts_and_batch);
    tcase_add_test(tc, test_put_from_needs_registered_memory);
    tcase_add_test(tc, test_batch_put_from_multi_scatter);
    tcase_add_test(tc, test_prefer_alloc_in_same_node_rules);
    tcase_add_test(tc, test_config_rules);
    tcase_add_test(tc, test_batch_remove);
    tcase_add_test(tc, test_remove_by_regex_and_all);
    tcase_add_test(tc, test_replica_descriptors);
    tcase_add_test(tc, test_mount_segments);
    suite_add_tcase(s, tc);
    return s;
}

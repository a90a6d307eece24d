/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The completion queue of a store handle (mc_store_aq_*, store/threads/async.c)
 * against a real mooncake_master: its eventfd is readable exactly while
 * completions wait; every request gets the result its single call gives,
 * also inside a coalesced burst with misses and bad arguments; the batch
 * requests (MC_STORE_AQ_BATCH_GET_INTO_LOCAL giving what batch_get_into
 * gives, also with the caller helping: mc_store_aq_help); closing the store under a queue, closing the queue with
 * requests queued, and the argument checks.
 *
 * Each test starts its own master on free loopback ports; every wait on
 * the eventfd is a poll() with a bounded timeout.
 */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/store.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store_util.h"

#define WAIT_MS 10000
#define NKEYS 64
#define VSIZE 1000

static mc_test_master_t master;
static mc_store_h store;
static mc_store_aq_h aq;

static void store_setup(void)
{
    mc_store_params_t p;
    st_params(&p, master.addr, 32u << 20, 4u << 20);
    ck_assert_status_ok(mc_store_setup(store, &p));
}

static void setup(void)
{
    const char *flags[] = {"--default_kv_lease_ttl=5000", NULL};
    mc_test_master_start(&master, flags);
    ck_assert_status_ok(mc_store_create(&store));
    store_setup();
    ck_assert_status_ok(mc_store_aq_open(store, 0, &aq));
}

static void teardown(void)
{
    mc_store_aq_close(aq); /* the queue first: it must not outlive the store */
    aq = NULL;
    mc_store_destroy(store);
    store = NULL;
    mc_test_master_stop(&master);
}

static int fd_readable(int timeout_ms)
{
    struct pollfd pfd = {mc_store_aq_fd(aq), POLLIN, 0};
    int rc            = poll(&pfd, 1, timeout_ms);
    ck_assert_msg(rc >= 0, "poll on the queue's eventfd should not fail");
    return (rc > 0) && (pfd.revents & POLLIN);
}

/* Reap @p want completions into @p out, indexed by tag (0..want-1),
 * waiting on the eventfd; every wake-up must find a completion. */
static void reap_all(mc_store_aq_done_t *out, size_t want)
{
    mc_store_aq_done_t buf[32];
    size_t got = 0;

    while (got < want) {
        size_t n;
        ck_assert_msg(fd_readable(WAIT_MS),
                      "the eventfd should become readable while %zu of %zu completions "
                      "are missing", want - got, want);
        n = mc_store_aq_reap(aq, buf, 32);
        ck_assert_msg(n > 0, "a readable eventfd should mean a completion to reap");
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(buf[i].tag < want, "tag %llu should be one that was submitted",
                          (unsigned long long)buf[i].tag);
            ck_assert_msg(out[buf[i].tag].op == (mc_store_aq_op_t)-1,
                          "tag %llu should complete once", (unsigned long long)buf[i].tag);
            out[buf[i].tag] = buf[i];
        }
        got += n;
    }
    ck_assert_msg(!fd_readable(0), "the eventfd should not be readable once all are reaped");
}

static mc_store_aq_done_t *done_array(size_t n)
{
    mc_store_aq_done_t *d = calloc(n, sizeof(*d));
    ck_assert_ptr_nonnull(d);
    for (size_t i = 0; i < n; i++)
        d[i].op = (mc_store_aq_op_t)-1;
    return d;
}

static void value_of(uint8_t *v, size_t n, unsigned i)
{
    for (size_t k = 0; k < n; k++)
        v[k] = (uint8_t)(k * 7u + i);
}

static void key_of(char *k, size_t cap, const char *prefix, unsigned i)
{
    snprintf(k, cap, "%s_%u", prefix, i);
}

/* ---- the eventfd ----------------------------------------------------------------- */

START_TEST(test_eventfd_readable_iff_pending)
{
    mc_store_aq_done_t d[1];
    uint8_t v[VSIZE];
    char key[32];

    ck_assert_msg(mc_store_aq_fd(aq) >= 0, "an open queue should have an eventfd");
    ck_assert_msg(!fd_readable(0), "a new queue's eventfd should not be readable");
    ck_assert_uint_eq(mc_store_aq_reap(aq, d, 1), 0);

    value_of(v, sizeof(v), 1);
    for (unsigned i = 0; i < 3; i++) {
        key_of(key, sizeof(key), "efd", i);
        ck_assert_status_ok(mc_store_aq_put(aq, key, v, sizeof(v), NULL, i));
    }
    /* one at a time: while completions are outstanding the fd becomes
     * readable, and every time it is, one is there */
    for (unsigned got = 0; got < 3; got++) {
        ck_assert_msg(fd_readable(WAIT_MS), "completion %u should make the fd readable", got);
        ck_assert_uint_eq(mc_store_aq_reap(aq, d, 1), 1);
        ck_assert_msg(d[0].result == MC_OK, "put %llu should succeed, got %lld",
                      (unsigned long long)d[0].tag, (long long)d[0].result);
        ck_assert_int_eq(d[0].op, MC_STORE_AQ_PUT);
        mc_store_aq_done_release(d, 1);
    }
    ck_assert_msg(!fd_readable(0), "the fd should not be readable after the last reap");
    ck_assert_uint_eq(mc_store_aq_reap(aq, d, 1), 0);
}
END_TEST

/* ---- results as the single calls give them ---------------------------------------- */

START_TEST(test_burst_matches_sync_calls)
{
    enum { N = 2 * NKEYS + 13 };
    static uint8_t vals[NKEYS][VSIZE], regbuf[NKEYS + 4][VSIZE];
    static char keys[NKEYS][32];
    static char longkey[5000];
    mc_store_aq_done_t *d = done_array(N);
    int64_t want[N];
    size_t t = 0;

    for (unsigned i = 0; i < NKEYS; i++) {
        key_of(keys[i], sizeof(keys[i]), "burst", i);
        value_of(vals[i], VSIZE, i);
        ck_assert_status_ok(mc_store_put(store, keys[i], vals[i], VSIZE, NULL));
    }
    memset(longkey, 'k', sizeof(longkey) - 1);
    ck_assert_status_ok(mc_store_register_buffer(store, regbuf, sizeof(regbuf)));

    /* plugged: the whole burst reaches the worker in one take, so each kind
     * runs as one batch call (gets: one lookup) with the misses inside */
    mc_store_aq_plug(aq);
    for (unsigned i = 0; i < NKEYS; i++)
        ck_assert_status_ok(mc_store_aq_get(aq, keys[i], t++));
    ck_assert_status_ok(mc_store_aq_get(aq, "burst_missing", t++));
    ck_assert_status_ok(mc_store_aq_get(aq, "", t++));
    ck_assert_status_ok(mc_store_aq_get(aq, longkey, t++));
    /* get_into: hits, a miss, too small, unregistered, an empty key */
    for (unsigned i = 0; i < NKEYS; i++) {
        want[t] = mc_store_get_into(store, keys[i], regbuf[i], VSIZE);
        ck_assert_status_ok(mc_store_aq_get_into(aq, keys[i], regbuf[i], VSIZE, t++));
    }
    want[t] = mc_store_get_into(store, "burst_missing", regbuf[NKEYS], VSIZE);
    ck_assert_status_ok(mc_store_aq_get_into(aq, "burst_missing", regbuf[NKEYS], VSIZE, t++));
    want[t] = mc_store_get_into(store, keys[0], regbuf[NKEYS + 1], 10);
    ck_assert_status_ok(mc_store_aq_get_into(aq, keys[0], regbuf[NKEYS + 1], 10, t++));
    want[t] = mc_store_get_into(store, keys[1], vals[1], VSIZE); /* not registered */
    ck_assert_status_ok(mc_store_aq_get_into(aq, keys[1], vals[1], VSIZE, t++));
    want[t] = mc_store_get_into(store, "", regbuf[NKEYS + 2], VSIZE);
    ck_assert_status_ok(mc_store_aq_get_into(aq, "", regbuf[NKEYS + 2], VSIZE, t++));
    /* exists and sizes, hits and misses */
    want[t] = mc_store_exist(store, keys[2]);
    ck_assert_status_ok(mc_store_aq_exist(aq, keys[2], t++));
    want[t] = mc_store_exist(store, "burst_missing");
    ck_assert_status_ok(mc_store_aq_exist(aq, "burst_missing", t++));
    want[t] = mc_store_exist(store, "");
    ck_assert_status_ok(mc_store_aq_exist(aq, "", t++));
    {
        uint64_t size = 0;
        mc_status_t st = mc_store_get_size(store, keys[3], &size);
        want[t]        = (st == MC_OK) ? (int64_t)size : st;
        ck_assert_status_ok(mc_store_aq_get_size(aq, keys[3], t++));
        st      = mc_store_get_size(store, "burst_missing", &size);
        want[t] = st;
        ck_assert_status_ok(mc_store_aq_get_size(aq, "burst_missing", t++));
    }
    ck_assert_uint_eq(t, N - 1);
    want[t] = mc_store_remove(store, "burst_missing", 0);
    ck_assert_status_ok(mc_store_aq_remove(aq, "burst_missing", 0, t++));
    ck_assert_msg(!fd_readable(50), "a plugged queue should run nothing");
    mc_store_aq_unplug(aq);
    reap_all(d, N);

    for (unsigned i = 0; i < NKEYS; i++) {
        ck_assert_msg(d[i].result == MC_OK, "get of %s should succeed, got %lld", keys[i],
                      (long long)d[i].result);
        ck_assert_msg((d[i].size == VSIZE) && (memcmp(d[i].data, vals[i], VSIZE) == 0),
                      "get of %s should return the bytes put", keys[i]);
    }
    ck_assert_int_eq(d[NKEYS].result, MC_OBJECT_NOT_FOUND);
    ck_assert_ptr_null(d[NKEYS].data);
    ck_assert_int_eq(d[NKEYS + 1].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(d[NKEYS + 2].result, MC_INVALID_PARAMS);
    for (size_t i = NKEYS + 3; i < N; i++)
        ck_assert_msg(d[i].result == want[i],
                      "request %zu (op %d) should give its single call's %lld, got %lld", i,
                      (int)d[i].op, (long long)want[i], (long long)d[i].result);
    for (unsigned i = 0; i < NKEYS; i++)
        ck_assert_msg(memcmp(regbuf[i], vals[i], VSIZE) == 0,
                      "get_into of %s should land the bytes", keys[i]);
    mc_store_aq_done_release(d, N);
    free(d);
    ck_assert_status_ok(mc_store_unregister_buffer(store, regbuf));
}
END_TEST

START_TEST(test_burst_of_writes)
{
    enum { N = 200 };
    static uint8_t vals[N][VSIZE];
    static char keys[N][32];
    mc_store_aq_done_t *d = done_array(N + 4);
    uint8_t got[VSIZE], other[VSIZE];
    uint64_t size;
    size_t t;

    mc_store_aq_plug(aq);
    for (unsigned i = 0; i < N; i++) {
        key_of(keys[i], sizeof(keys[i]), "wburst", i);
        value_of(vals[i], VSIZE, i);
        ck_assert_status_ok(mc_store_aq_put(aq, keys[i], vals[i], VSIZE, NULL, i));
    }
    /* a repeated key in the same burst: the first writer wins (put never
     * overwrites), and two removes of one key: one of them finds it gone */
    value_of(other, VSIZE, 99);
    ck_assert_status_ok(mc_store_aq_put(aq, keys[0], other, VSIZE, NULL, N));
    ck_assert_status_ok(mc_store_aq_put(aq, "", other, VSIZE, NULL, N + 1));
    ck_assert_status_ok(mc_store_aq_upsert(aq, keys[1], other, VSIZE, NULL, N + 2));
    ck_assert_status_ok(mc_store_aq_put(aq, "wburst_empty", other, 0, NULL, N + 3));
    mc_store_aq_unplug(aq);
    reap_all(d, N + 4);
    for (unsigned i = 0; i <= N; i++)
        ck_assert_msg(d[i].result == MC_OK, "put %u should return 0, got %lld", i,
                      (long long)d[i].result);
    ck_assert_int_eq(d[N + 1].result, mc_store_put(store, "", other, VSIZE, NULL));
    ck_assert_int_eq(d[N + 2].result, MC_OK);
    ck_assert_int_eq(d[N + 3].result, mc_store_put(store, "wburst_empty2", other, 0, NULL));
    ck_assert_status_ok(mc_store_get(store, keys[0], got, sizeof(got), &size));
    ck_assert_msg(memcmp(got, vals[0], VSIZE) == 0, "the first put of a key should win");
    ck_assert_status_ok(mc_store_get(store, keys[1], got, sizeof(got), &size));
    ck_assert_msg(memcmp(got, other, VSIZE) == 0, "the upsert should replace the value");
    for (unsigned i = 2; i < N; i++) {
        ck_assert_status_ok(mc_store_get(store, keys[i], got, sizeof(got), &size));
        ck_assert_msg(memcmp(got, vals[i], VSIZE) == 0, "%s should hold its value", keys[i]);
    }
    mc_store_aq_done_release(d, N + 4);
    free(d);

    /* two upserts of one key in one burst run one after the other: the
     * second value stays, whatever its size */
    d = done_array(3);
    mc_store_aq_plug(aq);
    ck_assert_status_ok(mc_store_aq_upsert(aq, keys[2], other, 100, NULL, 0));
    ck_assert_status_ok(mc_store_aq_upsert(aq, keys[3], other, 200, NULL, 1));
    ck_assert_status_ok(mc_store_aq_upsert(aq, keys[2], vals[7], VSIZE, NULL, 2));
    mc_store_aq_unplug(aq);
    reap_all(d, 3);
    for (t = 0; t < 3; t++)
        ck_assert_msg(d[t].result == MC_OK, "upsert %zu should return 0, got %lld", t,
                      (long long)d[t].result);
    ck_assert_status_ok(mc_store_get(store, keys[2], got, sizeof(got), &size));
    ck_assert_msg((size == VSIZE) && (memcmp(got, vals[7], VSIZE) == 0),
                  "the later upsert of a key should win");
    free(d);

    d = done_array(3);
    mc_store_aq_plug(aq);
    for (t = 0; t < 2; t++)
        ck_assert_status_ok(mc_store_aq_remove(aq, keys[5], 1, t));
    ck_assert_status_ok(mc_store_aq_remove(aq, keys[6], 1, t));
    mc_store_aq_unplug(aq);
    reap_all(d, 3);
    ck_assert_msg(((d[0].result == MC_OK) && (d[1].result == MC_OBJECT_NOT_FOUND)) ||
                      ((d[1].result == MC_OK) && (d[0].result == MC_OBJECT_NOT_FOUND)),
                  "two removes of one key should find it once, got %lld and %lld",
                  (long long)d[0].result, (long long)d[1].result);
    ck_assert_int_eq(d[2].result, MC_OK);
    ck_assert_int_eq(mc_store_exist(store, keys[5]), 0);
    free(d);
}
END_TEST

/* ---- batch requests ------------------------------------------------------------ */

START_TEST(test_batch_requests)
{
    static uint8_t vals[4][VSIZE], regbuf[8][VSIZE];
    const char *keys[5] = {"b_0", "b_missing", "b_1", "b_2", "b_3"};
    const char *pkeys[2] = {"b_zc0", "b_zc1"};
    mc_iov_t bufs[5], pbufs[2];
    mc_store_aq_done_t *d = done_array(4);
    int sync_exist[5];
    const uint8_t *p;

    for (unsigned i = 0; i < 4; i++) {
        value_of(vals[i], VSIZE, 10 + i);
        ck_assert_status_ok(mc_store_put(store, keys[(i == 0) ? 0 : i + 1], vals[i],
                                         (i == 3) ? 0 : VSIZE, NULL));
    }
    ck_assert_status_ok(mc_store_register_buffer(store, regbuf, sizeof(regbuf)));
    for (unsigned i = 0; i < 5; i++) {
        bufs[i].base = regbuf[i];
        bufs[i].len  = VSIZE;
    }
    value_of(regbuf[6], VSIZE, 60);
    value_of(regbuf[7], VSIZE, 70);
    pbufs[0].base = regbuf[6];
    pbufs[0].len  = VSIZE;
    pbufs[1].base = regbuf[7];
    pbufs[1].len  = 17;
    (void)mc_store_batch_exist(store, keys, 5, sync_exist);

    mc_store_aq_plug(aq);
    mc_store_aq_plug(aq); /* plugs nest */
    ck_assert_status_ok(mc_store_aq_get_batch(aq, keys, 5, 0));
    ck_assert_status_ok(mc_store_aq_batch_exist(aq, keys, 5, 1));
    ck_assert_status_ok(mc_store_aq_batch_get_into(aq, keys, bufs, 5, 2));
    ck_assert_status_ok(mc_store_aq_batch_put_from(aq, pkeys, pbufs, 2, NULL, 3));
    mc_store_aq_unplug(aq);
    ck_assert_msg(!fd_readable(50), "one plug left should still hold the requests");
    mc_store_aq_unplug(aq);
    reap_all(d, 4);

    /* get_batch: sizes or errors, the objects read back to back */
    ck_assert_uint_eq(d[0].n, 5);
    ck_assert_int_eq(d[0].results[0], VSIZE);
    ck_assert_int_eq(d[0].results[1], MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(d[0].results[2], VSIZE);
    ck_assert_int_eq(d[0].results[3], VSIZE);
    ck_assert_msg(d[0].results[4] <= 0, "an empty value brings no bytes");
    ck_assert_uint_eq(d[0].size, 3 * VSIZE);
    p = d[0].data;
    ck_assert_msg(memcmp(p, vals[0], VSIZE) == 0, "b_0 should come first");
    ck_assert_msg(memcmp(p + VSIZE, vals[1], VSIZE) == 0, "b_1 should follow");
    ck_assert_msg(memcmp(p + 2 * VSIZE, vals[2], VSIZE) == 0, "then b_2");
    ck_assert_int_eq(d[0].result, MC_OBJECT_NOT_FOUND);
    /* batch_exist: as the sync call */
    ck_assert_uint_eq(d[1].n, 5);
    for (unsigned i = 0; i < 5; i++)
        ck_assert_msg(d[1].results[i] == sync_exist[i],
                      "batch_exist of %s should give %d, got %lld", keys[i], sync_exist[i],
                      (long long)d[1].results[i]);
    /* batch_get_into */
    ck_assert_int_eq(d[2].results[0], VSIZE);
    ck_assert_int_eq(d[2].results[1], MC_OBJECT_NOT_FOUND);
    ck_assert_msg(memcmp(regbuf[0], vals[0], VSIZE) == 0, "b_0 should land in buffer 0");
    ck_assert_msg(memcmp(regbuf[3], vals[2], VSIZE) == 0, "b_2 should land in buffer 3");
    /* batch_put_from */
    ck_assert_int_eq(d[3].results[0], MC_OK);
    ck_assert_int_eq(d[3].results[1], MC_OK);
    {
        uint8_t got[VSIZE];
        uint64_t size = 0;
        ck_assert_status_ok(mc_store_get(store, "b_zc1", got, sizeof(got), &size));
        ck_assert_uint_eq(size, 17);
        ck_assert_msg(memcmp(got, regbuf[7], 17) == 0, "b_zc1 should hold its 17 bytes");
    }
    mc_store_aq_done_release(d, 4);
    ck_assert_ptr_null(d[0].data);
    free(d);
    ck_assert_status_ok(mc_store_unregister_buffer(store, regbuf));
}
END_TEST

/*
 * MC_STORE_AQ_BATCH_GET_INTO_LOCAL: every key's result and bytes are those
 * of the plain batch_get_into, for values below, at and far above the
 * engine's 64 KiB item and the speculative-read sizes, a missing key, a
 * buffer too small and one not registered; the worker's setting does not
 * leak into its next request.
 */
START_TEST(test_batch_get_into_local)
{
    enum { NK = 6 };
    static const size_t sizes[NK] = {1000, 65536, 65537, 3u << 20, 100, 4096};
    const char *keys[NK] = {"l_0", "l_1", "l_2", "l_3", "l_missing", "l_5"};
    size_t total = 0, off[NK];
    uint8_t *want, *a, *b, *stray; /* want, a and b: one block, a and b registered */
    mc_iov_t ia[NK], ib[NK];
    mc_store_aq_done_t *d = done_array(3);

    for (unsigned i = 0; i < NK; i++) {
        off[i] = total;
        total += sizes[i];
    }
    want  = calloc(3, total);
    stray = calloc(1, sizes[5]);
    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(stray);
    a = want + total;
    b = a + total;
    for (unsigned i = 0; i < NK; i++) {
        value_of(want + off[i], sizes[i], 30 + i);
        if (i != 4)
            ck_assert_status_ok(mc_store_put(store, keys[i], want + off[i], sizes[i], NULL));
    }
    ck_assert_status_ok(mc_store_register_buffer(store, a, 2 * total));
    for (unsigned i = 0; i < NK; i++) {
        ia[i] = (mc_iov_t){a + off[i], sizes[i]};
        ib[i] = (mc_iov_t){b + off[i], sizes[i]};
    }
    ia[2].len = ib[2].len = 65536;              /* one byte short */
    ia[5] = ib[5] = (mc_iov_t){stray, sizes[5]}; /* not registered */
    ck_assert_status_ok(mc_store_aq_batch_get_into_local(aq, keys, ia, NK, 0));
    ck_assert_status_ok(mc_store_aq_batch_get_into(aq, keys, ib, NK, 1));
    /* the same queue's worker again, plain and local: nothing carried over */
    ck_assert_status_ok(mc_store_aq_batch_get_into_local(aq, keys, ib, 2, 2));
    reap_all(d, 3);
    ck_assert_int_eq(d[0].op, MC_STORE_AQ_BATCH_GET_INTO_LOCAL);
    ck_assert_int_eq(d[1].op, MC_STORE_AQ_BATCH_GET_INTO);
    ck_assert_uint_eq(d[0].n, NK);
    for (unsigned i = 0; i < NK; i++) {
        ck_assert_msg(d[0].results[i] == d[1].results[i],
                      "the local read of %s should give %lld, as batch_get_into, got %lld",
                      keys[i], (long long)d[1].results[i], (long long)d[0].results[i]);
        if (d[0].results[i] > 0)
            ck_assert_msg(memcmp(a + off[i], want + off[i], sizes[i]) == 0,
                          "the local read of %s should bring its bytes", keys[i]);
    }
    ck_assert_int_eq(d[0].results[0], (int64_t)sizes[0]);
    ck_assert_int_eq(d[0].results[3], (int64_t)sizes[3]);
    ck_assert_int_eq(d[0].results[4], MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(d[0].results[2], MC_INVALID_PARAMS);
    ck_assert_int_eq(d[0].results[5], MC_INVALID_PARAMS);
    ck_assert_int_eq(d[2].result, MC_OK);
    ck_assert_int_eq(d[2].results[1], (int64_t)sizes[1]);
    mc_store_aq_done_release(d, 3);
    free(d);
    ck_assert_int_eq(mc_store_aq_batch_get_into_local(aq, keys, NULL, 1, 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_batch_get_into_local(NULL, keys, ia, 1, 0), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_unregister_buffer(store, a));
    free(want);
    free(stray);
}
END_TEST

/*
 * mc_store_aq_help: a local read of two 8 MiB values goes in 1 MiB pieces,
 * and a thread that calls mc_store_aq_help while it runs copies some of
 * them; every round's bytes are the values'.  Whether the helper gets a
 * piece in a given round is up to the scheduler (on a busy machine the
 * worker may copy all sixteen while the helper waits for a CPU), so the
 * rounds go on, at least MIN_ROUNDS and at most MAX_ROUNDS, until it has.
 * With no such read in progress, or a NULL queue, it copies nothing.
 */
START_TEST(test_batch_get_into_local_helped)
{
    enum { NK = 2, MIN_ROUNDS = 8, MAX_ROUNDS = 400 };
    const size_t size    = 8u << 20;
    const char *keys[NK] = {"h_0", "h_1"};
    uint8_t *want        = malloc(NK * size), *got = malloc(NK * size);
    mc_iov_t iov[NK];
    size_t helped = 0;

    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(got);
    for (unsigned i = 0; i < NK; i++) {
        value_of(want + i * size, size, 50 + i);
        ck_assert_status_ok(mc_store_put(store, keys[i], want + i * size, size, NULL));
        iov[i] = (mc_iov_t){got + i * size, size};
    }
    ck_assert_status_ok(mc_store_register_buffer(store, got, NK * size));
    ck_assert_uint_eq(mc_store_aq_help(NULL), 0);
    ck_assert_uint_eq(mc_store_aq_help(aq), 0);
    for (unsigned r = 0; (r < MIN_ROUNDS) || ((helped == 0) && (r < MAX_ROUNDS)); r++) {
        mc_store_aq_done_t d;
        uint64_t deadline = mc_test_now_ms() + WAIT_MS;
        memset(got, 0, NK * size);
        ck_assert_status_ok(mc_store_aq_batch_get_into_local(aq, keys, iov, NK, r));
        while (!fd_readable(0)) {
            helped += mc_store_aq_help(aq);
            ck_assert_msg(mc_test_now_ms() < deadline, "the local read should complete");
        }
        ck_assert_uint_eq(mc_store_aq_reap(aq, &d, 1), 1);
        ck_assert_int_eq(d.op, MC_STORE_AQ_BATCH_GET_INTO_LOCAL);
        ck_assert_uint_eq(d.tag, r);
        for (unsigned i = 0; i < NK; i++)
            ck_assert_int_eq(d.results[i], (int64_t)size);
        ck_assert_msg(memcmp(got, want, NK * size) == 0,
                      "round %u: the helped local read should bring both values whole", r);
        mc_store_aq_done_release(&d, 1);
    }
    ck_assert_msg(helped > 0, "mc_store_aq_help should have copied pieces in %d rounds",
                  (int)MAX_ROUNDS);
    ck_assert_uint_eq(mc_store_aq_help(aq), 0); /* nothing in progress any more */
    ck_assert_status_ok(mc_store_unregister_buffer(store, got));
    free(want);
    free(got);
}
END_TEST

/* ---- lifetime ------------------------------------------------------------------- */

START_TEST(test_store_closed_under_queue)
{
    enum { N = 300 };
    static uint8_t val[VSIZE];
    mc_store_aq_done_t *d = done_array(N);
    size_t ok = 0, closed = 0;

    value_of(val, VSIZE, 5);
    ck_assert_status_ok(mc_store_put(store, "closing", val, VSIZE, NULL));
    for (unsigned i = 0; i < N; i++)
        ck_assert_status_ok(mc_store_aq_get(aq, "closing", i));
    ck_assert_status_ok(mc_store_close(store));
    reap_all(d, N);
    for (unsigned i = 0; i < N; i++) {
        if (d[i].result == MC_OK) {
            ck_assert_msg((d[i].size == VSIZE) && (memcmp(d[i].data, val, VSIZE) == 0),
                          "a get that succeeded should have the bytes");
            ok++;
        } else {
            ck_assert_msg(d[i].result < 0, "a get that failed should say why");
            ck_assert_ptr_null(d[i].data);
            closed += d[i].result == MC_UNAVAILABLE_IN_CURRENT_STATUS;
        }
    }
    mc_store_aq_done_release(d, N);
    /* the queue serves the store again after a new setup */
    for (unsigned i = 0; i < N; i++)
        d[i].op = (mc_store_aq_op_t)-1;
    ck_assert_status_ok(mc_store_aq_exist(aq, "closing", 0));
    reap_all(d, 1);
    ck_assert_int_eq(d[0].result, MC_UNAVAILABLE_IN_CURRENT_STATUS);
    store_setup();
    d[0].op = (mc_store_aq_op_t)-1;
    ck_assert_status_ok(mc_store_aq_exist(aq, "closing", 0));
    reap_all(d, 1);
    ck_assert_int_eq(d[0].result, 0); /* gone with the closed client's segment */
    free(d);
    ck_assert_msg(ok + closed == N,
                  "every get should succeed or fail as a closed store's call (%zu + %zu)", ok,
                  closed);
}
END_TEST

START_TEST(test_close_with_requests_queued)
{
    static uint8_t val[VSIZE];
    mc_store_aq_h q2 = NULL;
    char key[32];

    /* one worker, many requests, closed at once: those not started are
     * dropped, the reaped ones never were (nothing leaks: the ASan build) */
    ck_assert_status_ok(mc_store_aq_open(store, 1, &q2));
    value_of(val, VSIZE, 3);
    ck_assert_status_ok(mc_store_aq_put(q2, "queued_first", val, VSIZE, NULL, 9999));
    mc_store_aq_plug(q2); /* the rest is never started */
    for (unsigned i = 0; i < 2000; i++) {
        key_of(key, sizeof(key), "queued", i % 50);
        ck_assert_status_ok((i % 2) ? mc_store_aq_get(q2, key, i)
                                    : mc_store_aq_put(q2, key, val, VSIZE, NULL, i));
    }
    mc_store_aq_close(q2);
    mc_store_aq_close(NULL);
    /* what was held never ran; the store is untouched by the close */
    ck_assert_int_eq(mc_store_exist(store, "queued_0"), 0);
    ck_assert_int_ge(mc_store_exist(store, "queued_first"), 0);
}
END_TEST

START_TEST(test_arguments)
{
    mc_store_aq_h q2 = NULL;
    mc_store_aq_done_t d[1];
    const char *keys[2] = {"a", NULL};
    mc_iov_t iov[2] = {{NULL, 0}, {NULL, 0}};

    ck_assert_int_eq(mc_store_aq_open(NULL, 0, &q2), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_open(store, 0, NULL), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_open(store, 65, &q2), MC_INVALID_PARAMS);
    ck_assert_ptr_null(q2);
    ck_assert_int_eq(mc_store_aq_get(NULL, "k", 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_get(aq, NULL, 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_put(aq, NULL, "x", 1, NULL, 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_get_batch(aq, keys, 2, 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_get_batch(aq, NULL, 1, 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_batch_get_into(aq, keys, NULL, 1, 0), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_batch_put_from(aq, keys, iov, 2, NULL, 0),
                     MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_aq_fd(NULL), -1);
    ck_assert_uint_eq(mc_store_aq_reap(NULL, d, 1), 0);
    ck_assert_uint_eq(mc_store_aq_reap(aq, NULL, 1), 0);
    mc_store_aq_done_release(NULL, 3);
    mc_store_aq_plug(NULL);
    mc_store_aq_unplug(NULL);
    mc_store_aq_unplug(aq); /* not plugged: nothing to undo */
    ck_assert_msg(!fd_readable(0), "refused submissions should queue nothing");
}
END_TEST

Suite *mc_test_async_suite(void)
{
    Suite *s = suite_create("async");
    TCase *tc = tcase_create("queue");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_eventfd_readable_iff_pending);
    tcase_add_test(tc, test_burst_matches_sync_calls);
    tcase_add_test(tc, test_burst_of_writes);
    tcase_add_test(tc, test_batch_requests);
    tcase_add_test(tc, test_batch_get_into_local);
    tcase_add_test(tc, test_batch_get_into_local_helped);
    tcase_add_test(tc, test_store_closed_under_queue);
    tcase_add_test(tc, test_close_with_requests_queued);
    tcase_add_test(tc, test_arguments);
    suite_add_tcase(s, tc);
    return s;
}

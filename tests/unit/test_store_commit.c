/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mc_store_batch_put_parts_commit against the real mooncake_master: the
 * commit key is published only after every payload, a failed payload
 * leaves nothing visible, and the window between the payloads' END and
 * the commit key's END raced (through mc_store_commit_test_hook) against
 * a forced remove of the commit key, a forced remove of a payload and a
 * master restart.  A second handle plays the other process: it reads and
 * removes while the writer is inside the call.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/mooncake.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store_util.h"
#include "store/store_internal.h"
#include "store/write/write.h"
#include "transfer/engine.h"

static mc_test_master_t master;
static mc_store_h store; /* the writer */
static mc_store_h other; /* another client: reads and removes in the window */

static void setup_master(void)
{
    mc_test_master_start(&master, NULL);
    store = st_open(master.addr, 8u << 20);
    other = st_open(master.addr, 0);
}

static void teardown_master(void)
{
    mc_store_commit_test_hook = NULL;
    mc_store_destroy(other);
    mc_store_destroy(store);
    other = store = NULL;
    mc_test_master_stop(&master);
}

/* ---- an object of three payloads and a manifest ------------------------------ */

#define NKEYS 4

typedef struct obj {
    char names[NKEYS][64];
    const char *keys[NKEYS];
    uint8_t a[3000], b[70000], m[200];
    mc_iov_t parts[NKEYS][2];
    const mc_iov_t *bufs[NKEYS];
    size_t counts[NKEYS];
    mc_status_t st[NKEYS];
} obj_t;

/* keys <prefix>/a (two parts), <prefix>/b, <prefix>/empty (nothing),
 * <prefix>/manifest (the commit key) */
static void obj_init(obj_t *o, const char *prefix)
{
    static const char *const names[NKEYS] = {"a", "b", "empty", "manifest"};

    memset(o, 0, sizeof(*o));
    for (size_t i = 0; i < NKEYS; i++) {
        snprintf(o->names[i], sizeof(o->names[i]), "%s/%s", prefix, names[i]);
        o->keys[i] = o->names[i];
        o->bufs[i] = o->parts[i];
    }
    st_pattern(o->a, sizeof(o->a), 1);
    st_pattern(o->b, sizeof(o->b), 2);
    st_pattern(o->m, sizeof(o->m), 3);
    o->parts[0][0] = (mc_iov_t){o->a, 1000};
    o->parts[0][1] = (mc_iov_t){o->a + 1000, sizeof(o->a) - 1000};
    o->counts[0]   = 2;
    o->parts[1][0] = (mc_iov_t){o->b, sizeof(o->b)};
    o->counts[1]   = 1;
    o->counts[2]   = 0;
    o->parts[3][0] = (mc_iov_t){o->m, sizeof(o->m)};
    o->counts[3]   = 1;
}

static mc_status_t obj_put(obj_t *o)
{
    return mc_store_batch_put_parts_commit(store, o->keys, o->bufs, o->counts, NKEYS, NULL,
                                           o->st);
}

static void assert_obj_stored(const obj_t *o)
{
    for (size_t i = 0; i < NKEYS; i++)
        ck_assert_status_ok(o->st[i]);
    st_value(other, o->keys[0], o->a, sizeof(o->a));
    st_value(other, o->keys[1], o->b, sizeof(o->b));
    st_missing(other, o->keys[2]);
    st_value(other, o->keys[3], o->m, sizeof(o->m));
}

static void assert_obj_gone(const obj_t *o)
{
    for (size_t i = 0; i < NKEYS; i++)
        st_missing(other, o->keys[i]);
}

/* ---- plain use ------------------------------------------------------------------ */

START_TEST(test_commit_publishes_every_key)
{
    obj_t o;

    obj_init(&o, "plain");
    ck_assert_status_ok(obj_put(&o));
    assert_obj_stored(&o);
}
END_TEST

START_TEST(test_commit_refuses_before_writing)
{
    obj_t o;
    mc_iov_t none = {NULL, 0};

    obj_init(&o, "refused");
    ck_assert_status_eq(mc_store_batch_put_parts_commit(store, o.keys, o.bufs, o.counts, 0,
                                                        NULL, o.st),
                        MC_INVALID_PARAMS);
    /* an empty commit value could never be found: refused, nothing written */
    o.parts[3][0] = none;
    ck_assert_status_eq(obj_put(&o), MC_INVALID_PARAMS);
    for (size_t i = 0; i < NKEYS; i++)
        ck_assert_status_eq(o.st[i], MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "empty value") != NULL,
                  "the detail should say the commit value is empty, not \"%s\"",
                  mc_last_error_detail());
    assert_obj_gone(&o);
}
END_TEST

/* A DataProto's shape: hundreds of row-sized parts beside one large payload
 * (the rows copied directly, the large one by the engine's workers), from
 * the other client into the writer's segment, read back byte for byte. */
START_TEST(test_commit_many_small_parts_and_a_large_one)
{
    enum { ROWS = 300, ROW = 3000, BIG = 200000 };
    static uint8_t rows[ROWS * ROW], big[BIG], m[100];
    mc_iov_t row_parts[ROWS], big_part = {big, BIG}, m_part = {m, sizeof(m)};
    const mc_iov_t *bufs[3] = {row_parts, &big_part, &m_part};
    const size_t counts[3]  = {ROWS, 1, 1};
    const char *keys[3]     = {"shape/rows", "shape/big", "shape/manifest"};
    mc_status_t st[3];

    st_pattern(rows, sizeof(rows), 4);
    st_pattern(big, sizeof(big), 5);
    st_pattern(m, sizeof(m), 6);
    for (size_t i = 0; i < ROWS; i++)
        row_parts[i] = (mc_iov_t){rows + i * ROW, ROW};
    ck_assert_status_ok(mc_store_batch_put_parts_commit(other, keys, bufs, counts, 3, NULL, st));
    st_value(store, keys[0], rows, sizeof(rows));
    st_value(store, keys[1], big, sizeof(big));
    st_value(store, keys[2], m, sizeof(m));
}
END_TEST

/* ---- a payload fails: nothing of the call stays -------------------------------- */

START_TEST(test_commit_payload_too_large_leaves_nothing)
{
    obj_t o;
    uint8_t *big = malloc(12u << 20); /* more than the 8 MiB segment */

    ck_assert_ptr_nonnull(big);
    memset(big, 7, 12u << 20);
    obj_init(&o, "toolarge");
    o.parts[1][0] = (mc_iov_t){big, 12u << 20};
    ck_assert_msg(obj_put(&o) != MC_OK, "a payload that cannot be placed fails the commit");
    ck_assert_status_ok(o.st[0]); /* written, then removed again */
    ck_assert_msg(o.st[1] != MC_OK, "the payload that did not fit reports its error");
    ck_assert_status_eq(o.st[3], o.st[1]);
    ck_assert_msg(strstr(mc_last_error_detail(), "not committed") != NULL,
                  "the detail should say the commit key was not committed, not \"%s\"",
                  mc_last_error_detail());
    assert_obj_gone(&o);
    free(big);
}
END_TEST

START_TEST(test_commit_existing_key_is_refused_and_kept)
{
    obj_t o;
    uint8_t old[64];

    st_pattern(old, sizeof(old), 9);
    obj_init(&o, "exists");
    ck_assert_status_ok(mc_store_put(other, o.keys[1], old, sizeof(old), NULL));
    ck_assert_status_eq(obj_put(&o), MC_OBJECT_ALREADY_EXISTS);
    ck_assert_status_eq(o.st[1], MC_OBJECT_ALREADY_EXISTS);
    ck_assert_status_eq(o.st[3], MC_OBJECT_ALREADY_EXISTS);
    /* the other writer's object is not the call's to remove */
    st_value(other, o.keys[1], old, sizeof(old));
    st_missing(other, o.keys[0]);
    st_missing(other, o.keys[3]);

    /* an existing commit key: the payloads go again */
    obj_init(&o, "exists2");
    ck_assert_status_ok(mc_store_put(other, o.keys[3], old, sizeof(old), NULL));
    ck_assert_status_eq(obj_put(&o), MC_OBJECT_ALREADY_EXISTS);
    ck_assert_status_ok(o.st[0]);
    ck_assert_status_eq(o.st[3], MC_OBJECT_ALREADY_EXISTS);
    st_missing(other, o.keys[0]);
    st_missing(other, o.keys[1]);
    st_value(other, o.keys[3], old, sizeof(old));
}
END_TEST

/* ---- races in the window between the payloads' END and the commit's END -------- */

static enum { RACE_NONE, RACE_REMOVE_COMMIT, RACE_REMOVE_PAYLOAD, RACE_RESTART } race;
static obj_t *race_obj;
static int race_ran;

static void race_hook(mc_store_h s, const char *commit_key)
{
    ck_assert_ptr_eq(s, store);
    ck_assert_str_eq(commit_key, race_obj->keys[3]);
    race_ran++;
    /* the payloads are complete already; the commit key is not visible yet */
    st_value(other, race_obj->keys[0], race_obj->a, sizeof(race_obj->a));
    st_value(other, race_obj->keys[1], race_obj->b, sizeof(race_obj->b));
    {
        uint64_t size;
        ck_assert_msg(mc_store_get_size(other, commit_key, &size) != MC_OK,
                      "the commit key must not be readable before its END");
    }
    switch (race) {
    case RACE_REMOVE_COMMIT:
        ck_assert_status_ok(mc_store_remove(other, commit_key, 1));
        break;
    case RACE_REMOVE_PAYLOAD:
        ck_assert_status_ok(mc_store_remove(other, race_obj->keys[0], 1));
        break;
    case RACE_RESTART:
        mc_test_master_restart(&master, NULL);
        break;
    case RACE_NONE:
        break;
    }
}

static void race_arm(obj_t *o, int kind)
{
    race                      = kind;
    race_obj                  = o;
    race_ran                  = 0;
    mc_store_commit_test_hook = race_hook;
}

/* A race of @p kind in the window leaves the object unpublished and
 * nothing of it visible. */
static void assert_race_unpublished(const char *prefix, int kind, const char *why)
{
    obj_t o;

    obj_init(&o, prefix);
    race_arm(&o, kind);
    ck_assert_msg(obj_put(&o) != MC_OK, "%s", why);
    ck_assert_int_eq(race_ran, 1);
    ck_assert_msg(o.st[3] != MC_OK, "the commit key reports its END's failure");
    assert_obj_gone(&o);
}

/*
 * Rows written into memory the master freed under a lease (a reader held
 * it when the object was force-removed: the segment's counter moved).
 * The holder adopts a counter only from a request over the network, and
 * a batch of rows used to go there row by row; now the first row does and
 * the others are copied through shared memory.  Checked through the
 * writer's engine counters, and every byte read back.
 */
START_TEST(test_rows_into_memory_freed_under_a_lease)
{
    enum { ROWS = 64, ROW = 8 * 1024 };
    static uint8_t rows[ROWS][ROW];
    mc_iov_t iov[ROWS];
    const mc_iov_t *bufs[1] = {iov};
    size_t counts[1]        = {ROWS};
    const char *keys[1]     = {"leased/rows"};
    mc_status_t st[1];
    uint64_t ops0, bytes0, ops1, bytes1;
    uint8_t *got = malloc((size_t)ROWS * ROW);
    uint64_t size = 0;

    ck_assert_ptr_nonnull(got);
    for (size_t i = 0; i < ROWS; i++) {
        st_pattern(rows[i], ROW, (unsigned)i + 7);
        iov[i] = (mc_iov_t){rows[i], ROW};
    }
    /* other (no segment) writes into store's segment, through shared memory */
    ck_assert_status_ok(mc_store_batch_put_parts(other, keys, bufs, counts, 1, NULL, st));
    ck_assert_status_ok(st[0]);
    for (int round = 0; round < 3; round++) {
        /* a read takes a lease; the forced remove frees the memory under it */
        ck_assert_status_ok(mc_store_get(other, keys[0], got, (size_t)ROWS * ROW, &size));
        ck_assert_status_ok(mc_store_remove(other, keys[0], 1));
        mc_te_shm_stats(other->te, &ops0, &bytes0);
        for (size_t i = 0; i < ROWS; i++)
            rows[i][round] ^= 0x5a; /* new bytes each round */
        ck_assert_status_ok(mc_store_batch_put_parts(other, keys, bufs, counts, 1, NULL, st));
        ck_assert_status_ok(st[0]);
        mc_te_shm_stats(other->te, &ops1, &bytes1);
        ck_assert_msg((ops1 - ops0 >= ROWS - 1) && (bytes1 - bytes0 >= (ROWS - 1) * ROW),
                      "round %d: %llu rows / %llu bytes went through shared memory, want at "
                      "least %d", round, (unsigned long long)(ops1 - ops0),
                      (unsigned long long)(bytes1 - bytes0), ROWS - 1);
        ck_assert_status_ok(mc_store_get(store, keys[0], got, (size_t)ROWS * ROW, &size));
        ck_assert_uint_eq(size, (uint64_t)ROWS * ROW);
        for (size_t i = 0; i < ROWS; i++)
            ck_assert_msg(memcmp(got + i * ROW, rows[i], ROW) == 0, "round %d row %zu differs",
                          round, i);
    }
    free(got);
}
END_TEST

START_TEST(test_commit_race_forced_remove_of_commit_key)
{
    assert_race_unpublished("race-commit", RACE_REMOVE_COMMIT,
                            "a commit key removed before its END is not published");
}
END_TEST

START_TEST(test_commit_race_forced_remove_of_payload)
{
    obj_t o;
    uint8_t out[128];
    uint64_t size;

    obj_init(&o, "race-payload");
    race_arm(&o, RACE_REMOVE_PAYLOAD);
    /* the remove is ordered before the commit, as if it came after it: the
     * object is published incomplete, and its missing payload reads as
     * missing, never as other bytes */
    ck_assert_status_ok(obj_put(&o));
    ck_assert_int_eq(race_ran, 1);
    ck_assert_status_eq(mc_store_get(other, o.keys[0], out, sizeof(out), &size),
                        MC_OBJECT_NOT_FOUND);
    st_value(other, o.keys[1], o.b, sizeof(o.b));
    st_value(other, o.keys[3], o.m, sizeof(o.m));
}
END_TEST

START_TEST(test_commit_race_master_restart)
{
    /* the new master knows none of it: nothing is visible */
    assert_race_unpublished("race-restart", RACE_RESTART,
                            "a commit whose master restarted is not published");
}
END_TEST

Suite *mc_test_store_commit_suite(void)
{
    Suite *s  = suite_create("store_commit");
    TCase *tc = tcase_create("master");

    tcase_add_checked_fixture(tc, setup_master, teardown_master);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_commit_publishes_every_key);
    tcase_add_test(tc, test_commit_refuses_before_writing);
    tcase_add_test(tc, test_commit_many_small_parts_and_a_large_one);
    tcase_add_test(tc, test_commit_payload_too_large_leaves_nothing);
    tcase_add_test(tc, test_commit_existing_key_is_refused_and_kept);
    tcase_add_test(tc, test_commit_race_forced_remove_of_commit_key);
    tcase_add_test(tc, test_commit_race_forced_remove_of_payload);
    tcase_add_test(tc, test_commit_race_master_restart);
    tcase_add_test(tc, test_rows_into_memory_freed_under_a_lease);
    suite_add_tcase(s, tc);
    return s;
}

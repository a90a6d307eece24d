/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store client's location cache (libmooncake/store/read/loc_cache.c) on its
 * own: entries live until their deadline, a hit copies the blob out, an
 * invalidation that happened after a lookup was asked for keeps its answer
 * out, the size is bounded least recently used first, and the setting is
 * parsed strictly.  The store's use of it is tested against real
 * processes in tests/python/test_loc_cache.py.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "store/read/loc_cache.h"

static void *get(mc_loc_cache_t *c, const char *key, uint64_t now, size_t *len_p)
{
    uint64_t deadline = 0;
    return mc_loc_cache_get(c, key, strlen(key), now, len_p, &deadline);
}

static void put(mc_loc_cache_t *c, const char *key, const char *blob, uint64_t deadline,
                uint64_t epoch)
{
    mc_loc_cache_put(c, key, strlen(key), blob, strlen(blob) + 1, deadline, epoch);
}

START_TEST(test_hit_until_deadline)
{
    mc_loc_cache_t *c = NULL;
    size_t len        = 0;
    char *b;
    ck_assert_status_ok(mc_loc_cache_create(8, &c));
    put(c, "k", "where k lives", 1000, mc_loc_cache_epoch(c));
    b = get(c, "k", 999, &len);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b, "where k lives");
    ck_assert_uint_eq(len, strlen("where k lives") + 1);
    free(b);
    ck_assert_msg(get(c, "kk", 10, &len) == NULL, "another key should miss");
    ck_assert_msg(get(c, "k", 1000, &len) == NULL, "an entry at its deadline should miss");
    ck_assert_msg(get(c, "k", 10, &len) == NULL, "an expired entry should be gone");
    mc_loc_cache_stats_t st;
    mc_loc_cache_stats(c, &st);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 3);
    ck_assert_uint_eq(st.entries, 0);
    mc_loc_cache_destroy(c);
}
END_TEST

START_TEST(test_invalidation_wins_over_older_answers)
{
    mc_loc_cache_t *c = NULL;
    size_t len;
    uint64_t e;
    ck_assert_status_ok(mc_loc_cache_create(8, &c));
    e = mc_loc_cache_epoch(c);
    put(c, "a", "old a", 100, e);
    put(c, "b", "old b", 100, e);
    /* a lookup of a starts (epoch read), then a local write of a ends */
    e = mc_loc_cache_epoch(c);
    mc_loc_cache_drop(c, "a", 1);
    ck_assert_msg(get(c, "a", 1, &len) == NULL, "a dropped key should miss");
    put(c, "a", "answer from before the write", 100, e);
    ck_assert_msg(get(c, "a", 1, &len) == NULL,
                  "an answer asked for before an invalidation should not be cached");
    free(get(c, "b", 1, &len)); /* b is untouched by a's drop */
    e = mc_loc_cache_epoch(c);
    put(c, "a", "new a", 100, e);
    char *b = get(c, "a", 1, &len);
    ck_assert_str_eq(b, "new a");
    free(b);
    mc_loc_cache_clear(c);
    ck_assert_msg(get(c, "a", 1, &len) == NULL && get(c, "b", 1, &len) == NULL,
                  "clear should forget every key");
    put(c, "a", "late", 100, e);
    ck_assert_msg(get(c, "a", 1, &len) == NULL, "clear should move the epoch too");
    mc_loc_cache_destroy(c);
}
END_TEST

START_TEST(test_bounded_lru)
{
    mc_loc_cache_t *c = NULL;
    size_t len;
    char key[16];
    ck_assert_status_ok(mc_loc_cache_create(3, &c));
    put(c, "k0", "0", 100, mc_loc_cache_epoch(c));
    put(c, "k1", "1", 100, mc_loc_cache_epoch(c));
    put(c, "k2", "2", 100, mc_loc_cache_epoch(c));
    free(get(c, "k0", 1, &len)); /* k0 is now the most recently used */
    put(c, "k3", "3", 100, mc_loc_cache_epoch(c));
    ck_assert_msg(get(c, "k1", 1, &len) == NULL, "the least recently used entry should go");
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        void *b = get(c, key, 1, &len);
        ck_assert_msg((b != NULL) == (i != 1), "%s should %sbe cached", key, i != 1 ? "" : "not ");
        free(b);
    }
    /* replacing an entry keeps one */
    put(c, "k3", "three", 100, mc_loc_cache_epoch(c));
    mc_loc_cache_stats_t st;
    mc_loc_cache_stats(c, &st);
    ck_assert_uint_eq(st.entries, 3);
    mc_loc_cache_destroy(c);
}
END_TEST

START_TEST(test_setting)
{
    size_t n = 0;
    unsetenv("MC_STORE_LOCATION_CACHE");
    ck_assert_status_ok(mc_loc_cache_config(&n));
    ck_assert_uint_eq(n, MC_LOC_CACHE_DEFAULT_ENTRIES);
    setenv("MC_STORE_LOCATION_CACHE", "0", 1);
    ck_assert_status_ok(mc_loc_cache_config(&n));
    ck_assert_uint_eq(n, 0);
    setenv("MC_STORE_LOCATION_CACHE", "128", 1);
    ck_assert_status_ok(mc_loc_cache_config(&n));
    ck_assert_uint_eq(n, 128);
    static const char *bad[] = {"-1", "12x", "lots", " 5", "99999999999999999999", "16777217"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("MC_STORE_LOCATION_CACHE", bad[i], 1);
        ck_assert_status_eq(mc_loc_cache_config(&n), MC_INVALID_PARAMS);
        ck_assert_msg(strstr(mc_last_error_detail(), "MC_STORE_LOCATION_CACHE") != NULL,
                      "the refusal of \"%s\" should name the variable", bad[i]);
    }
    unsetenv("MC_STORE_LOCATION_CACHE");
}
END_TEST

Suite *mc_test_loc_cache_suite(void)
{
    Suite *s  = suite_create("loc_cache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_hit_until_deadline);
    tcase_add_test(tc, test_invalidation_wins_over_older_answers);
    tcase_add_test(tc, test_bounded_lru);
    tcase_add_test(tc, test_setting);
    suite_add_tcase(s, tc);
    return s;
}

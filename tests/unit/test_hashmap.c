/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intrusive hash map: thousands of inserts, lookups and removals checked
 * against a plain array, iteration that removes as it goes, growth, and
 * keys that all collide (equality, not the hash, must decide).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "common/hashmap.h"
#include "common/util.h"

typedef struct entry {
    mc_hnode_t node;
    uint64_t key;
    int present;
    int seen;
} entry_t;

static int entry_eq(const mc_hnode_t *n, const void *key)
{
    return mc_container_of(n, entry_t, node)->key == *(const uint64_t *)key;
}

static uint64_t key_hash(uint64_t k)
{
    return mc_hash_bytes(&k, sizeof(k), 0);
}

static entry_t *find(const mc_hmap_t *m, uint64_t k, uint64_t h)
{
    mc_hnode_t *n = mc_hmap_find(m, h, &k, entry_eq);
    return n ? mc_container_of(n, entry_t, node) : NULL;
}

enum { N = 20000 };

START_TEST(test_insert_find_remove)
{
    mc_hmap_t m;
    entry_t *e = calloc(N, sizeof(*e));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(mc_hmap_init(&m, 0), 0);
    size_t initial = m.nbuckets;
    for (int i = 0; i < N; i++) {
        e[i].key     = (uint64_t)i * 1000003u + 17;
        e[i].present = 1;
        if (mc_hmap_insert(&m, &e[i].node, key_hash(e[i].key)) != 0)
            ck_abort_msg("insert %d should succeed", i);
    }
    ck_assert_msg(m.count == N, "count should be %d, not %zu", N, m.count);
    /* grown to keep the load at most 2 (and no more than needed) */
    ck_assert_msg(m.nbuckets > initial && 2 * m.nbuckets >= N && m.nbuckets < N,
                  "the table should have grown to a load of at most 2 (%zu buckets for %d)",
                  m.nbuckets, N);
    ck_assert_msg((m.nbuckets & (m.nbuckets - 1)) == 0, "bucket count should be a power of 2");
    for (int i = 0; i < N; i++)
        if (find(&m, e[i].key, key_hash(e[i].key)) != &e[i])
            ck_abort_msg("key %d should be found after growth", i);
    for (int i = 0; i < 1000; i++) {
        uint64_t k = (uint64_t)i * 1000003u + 18; /* never inserted */
        if (find(&m, k, key_hash(k)) != NULL)
            ck_abort_msg("absent key %llu should not be found", (unsigned long long)k);
    }
    for (int i = 0; i < N; i += 3) {
        mc_hmap_remove(&m, &e[i].node);
        e[i].present = 0;
    }
    for (int i = 0; i < N; i++) {
        entry_t *f = find(&m, e[i].key, key_hash(e[i].key));
        if (f != (e[i].present ? &e[i] : NULL))
            ck_abort_msg("key %d should be %s after removals", i,
                         e[i].present ? "present" : "gone");
    }
    ck_assert_msg(m.count == N - (N + 2) / 3, "count should drop by the removals");
    /* re-insert what was removed */
    for (int i = 0; i < N; i += 3)
        ck_assert_int_eq(mc_hmap_insert(&m, &e[i].node, key_hash(e[i].key)), 0);
    ck_assert_msg(m.count == N, "everything should be back");
    mc_hmap_cleanup(&m);
    ck_assert_msg(m.buckets == NULL && m.count == 0, "cleanup should reset the map");
    free(e);
}
END_TEST

START_TEST(test_iterate_and_remove)
{
    mc_hmap_t m;
    mc_hmap_iter_t it;
    entry_t *e = calloc(N, sizeof(*e));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(mc_hmap_init(&m, 64), 0);
    ck_assert_msg(m.nbuckets == 64, "64 initial buckets were asked for");
    for (int i = 0; i < N; i++) {
        e[i].key = (uint64_t)i;
        ck_assert_int_eq(mc_hmap_insert(&m, &e[i].node, key_hash(e[i].key)), 0);
    }
    /* visit everything once; remove the odd keys while iterating */
    size_t visited = 0;
    for (mc_hnode_t *n = mc_hmap_first(&m, &it); n != NULL; n = mc_hmap_next(&m, &it)) {
        entry_t *x = mc_container_of(n, entry_t, node);
        if (x->seen++)
            ck_abort_msg("key %llu should be visited once", (unsigned long long)x->key);
        if (x->key & 1)
            mc_hmap_remove(&m, n);
        visited++;
    }
    ck_assert_msg(visited == N, "iteration should visit all %d entries, not %zu", N, visited);
    ck_assert_msg(m.count == N / 2, "half the entries should remain");
    visited = 0;
    for (mc_hnode_t *n = mc_hmap_first(&m, &it); n != NULL; n = mc_hmap_next(&m, &it)) {
        entry_t *x = mc_container_of(n, entry_t, node);
        if (x->key & 1)
            ck_abort_msg("removed key %llu should not be visited", (unsigned long long)x->key);
        mc_hmap_remove(&m, n); /* remove everything */
        visited++;
    }
    ck_assert_msg(visited == N / 2 && m.count == 0, "the second pass should empty the map");
    ck_assert_msg(mc_hmap_first(&m, &it) == NULL, "an empty map has nothing to iterate");
    mc_hmap_cleanup(&m);
    free(e);
}
END_TEST

START_TEST(test_colliding_hashes)
{
    enum { C = 500 };
    mc_hmap_t m;
    entry_t e[C];
    memset(e, 0, sizeof(e));
    ck_assert_int_eq(mc_hmap_init(&m, 0), 0);
    for (int i = 0; i < C; i++) {
        e[i].key = (uint64_t)i;
        ck_assert_int_eq(mc_hmap_insert(&m, &e[i].node, 0xabcdefull), 0);
    }
    for (int i = 0; i < C; i++)
        if (find(&m, (uint64_t)i, 0xabcdefull) != &e[i])
            ck_abort_msg("colliding key %d should be told apart by equality", i);
    uint64_t absent = C;
    ck_assert_msg(find(&m, absent, 0xabcdefull) == NULL, "an absent colliding key");
    ck_assert_msg(find(&m, 3, 0xabcdeeull) == NULL, "a different hash should not match");
    for (int i = C - 1; i >= 0; i -= 2)
        mc_hmap_remove(&m, &e[i].node);
    for (int i = 0; i < C; i++)
        if (find(&m, (uint64_t)i, 0xabcdefull) != ((i & 1) ? NULL : &e[i]))
            ck_abort_msg("removing from a long chain should keep the others (key %d)", i);
    mc_hmap_cleanup(&m);
}
END_TEST

/* ---- the compact map (mc_chmap_t): the entry keeps 32 bits of hash ---- */

typedef struct centry {
    mc_cnode_t node;
    uint32_t hash;
    uint64_t key;
    int present;
    int seen;
} centry_t;

static uint32_t centry_hash(const mc_cnode_t *n)
{
    return mc_container_of(n, centry_t, node)->hash;
}

static int centry_eq(const mc_cnode_t *n, const void *key)
{
    return mc_container_of(n, centry_t, node)->key == *(const uint64_t *)key;
}

static centry_t *cfind(const mc_chmap_t *m, uint64_t k, uint32_t h)
{
    mc_cnode_t *n = mc_chmap_find(m, h, &k, centry_eq);
    return n ? mc_container_of(n, centry_t, node) : NULL;
}

/* Inserts, growth (which places entries by the hash they keep), lookups of
 * present and absent keys, removals during iteration, and keys whose
 * hashes all collide; checked against the array. */
START_TEST(test_compact_map)
{
    mc_chmap_t m;
    mc_chmap_iter_t it;
    centry_t *e = calloc(N, sizeof(*e));
    size_t seen = 0;
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(mc_chmap_init(&m, 0, centry_hash), 0);
    for (int i = 0; i < N; i++) {
        e[i].key     = (uint64_t)i * 7919u + 3;
        /* a quarter of the keys share one hash: equality must decide */
        e[i].hash    = (i % 4 == 0) ? 0xabcdu : (uint32_t)key_hash(e[i].key);
        e[i].present = 1;
        if (mc_chmap_insert(&m, &e[i].node, e[i].hash) != 0)
            ck_abort_msg("insert %d should succeed", i);
    }
    ck_assert_msg(m.count == N && 2 * m.nbuckets >= N && m.nbuckets < N,
                  "%zu entries in %zu buckets: the load should be at most 2", m.count,
                  m.nbuckets);
    for (int i = 0; i < N; i++)
        if (cfind(&m, e[i].key, e[i].hash) != &e[i])
            ck_abort_msg("key %d should be found after growth", i);
    for (int i = 0; i < 1000; i++) {
        uint64_t k = (uint64_t)i * 7919u + 4; /* never inserted */
        if ((cfind(&m, k, (uint32_t)key_hash(k)) != NULL) || (cfind(&m, k, 0xabcdu) != NULL))
            ck_abort_msg("absent key %llu should not be found", (unsigned long long)k);
    }
    /* iterate, removing every odd key as we go: each entry seen once */
    for (mc_cnode_t *n = mc_chmap_first(&m, &it); n != NULL; n = mc_chmap_next(&m, &it)) {
        centry_t *c = mc_container_of(n, centry_t, node);
        seen++;
        if (c->key % 2 == 1) {
            mc_chmap_remove(&m, n);
            c->present = 0;
        }
    }
    ck_assert_msg(seen == N, "iteration saw %zu of %d entries", seen, N);
    for (int i = 0; i < N; i++)
        if (cfind(&m, e[i].key, e[i].hash) != (e[i].present ? &e[i] : NULL))
            ck_abort_msg("key %d should be %s after removals", i,
                         e[i].present ? "present" : "gone");
    ck_assert_msg(m.count == (size_t)N / 2, "half the keys should be left, not %zu", m.count);
    mc_chmap_cleanup(&m);
    ck_assert_msg(m.buckets == NULL && m.count == 0, "cleanup should reset the map");
    free(e);
}
END_TEST

/* A table whose bucket array is a huge-page block (MC_HUGE_BLOCK or more),
 * grown from one that is not into one that is.  The growth moves the
 * entries a few buckets per later insert: right after it starts nearly
 * all are still on the old chains, and every lookup, removal, whole walk
 * and walk by bucket number must find each entry exactly where its hash
 * says, until the old array is gone.  mc_chmap_head then starts the
 * key's chain. */
static void check_walks(const mc_chmap_t *m, centry_t *e, size_t n)
{
    mc_chmap_iter_t it;
    size_t seen = 0;

    for (size_t i = 0; i < n; i++)
        e[i].seen = 0;
    for (mc_cnode_t *c = mc_chmap_first(m, &it); c != NULL; c = mc_chmap_next(m, &it)) {
        mc_container_of(c, centry_t, node)->seen++;
        seen++;
    }
    ck_assert_msg(seen == m->count, "a walk saw %zu of %zu entries", seen, m->count);
    for (size_t b = 0; b < m->nbuckets; b++)
        for (mc_cnode_t *c = mc_chmap_bucket_first(m, b, &it); c != NULL;
             c = mc_chmap_next(m, &it)) {
            centry_t *x = mc_container_of(c, centry_t, node);
            if ((x->hash & (m->nbuckets - 1)) != b)
                ck_abort_msg("bucket %zu's walk gave an entry of bucket %zu", b,
                             (size_t)(x->hash & (m->nbuckets - 1)));
            x->seen++;
        }
    for (size_t i = 0; i < n; i++)
        if (e[i].seen != 2 * e[i].present)
            ck_abort_msg("entry %zu (%s) was seen %d times by the two walks", i,
                         e[i].present ? "present" : "gone", e[i].seen);
}

START_TEST(test_large_table)
{
    const size_t small = MC_HUGE_BLOCK / sizeof(mc_cnode_t *) / 2; /* half a block */
    const size_t n     = 2 * small + 1;                           /* starts a growth */
    const size_t more  = small / MC_CHMAP_MOVE_STEP;              /* end it */
    mc_chmap_t m;
    centry_t *e = calloc(n + more, sizeof(*e));

    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(mc_chmap_init(&m, small, centry_hash), 0);
    ck_assert_uint_eq(m.nbuckets, small);
    for (size_t i = 0; i < n + more; i++) {
        e[i].key  = (uint64_t)i * 2654435761u + 1;
        e[i].hash = (uint32_t)key_hash(e[i].key);
    }
    for (size_t i = 0; i < n; i++) {
        mc_chmap_prefetch(&m, e[i].hash); /* a hint: changes nothing */
        e[i].present = 1;
        if (mc_chmap_insert(&m, &e[i].node, e[i].hash) != 0)
            ck_abort_msg("insert %zu should succeed", i);
    }
    ck_assert_msg(m.nbuckets == 2 * small, "%zu entries should have doubled %zu buckets, not %zu",
                  n, small, m.nbuckets);
    ck_assert_msg(((uintptr_t)m.buckets % MC_HUGE_BLOCK) == 0,
                  "a bucket array of a block or more should be block-aligned");
    ck_assert_msg((m.old != NULL) && (m.moved <= MC_CHMAP_MOVE_STEP),
                  "the insert that doubled the table should have moved at most %u old buckets, "
                  "not %zu", MC_CHMAP_MOVE_STEP, m.old ? m.moved : small);
    /* mid-growth: found, walked, removed wherever they sit */
    for (size_t i = 0; i < n; i++)
        if (cfind(&m, e[i].key, e[i].hash) != &e[i])
            ck_abort_msg("entry %zu should be found while the growth moves entries", i);
    check_walks(&m, e, n);
    for (size_t i = 0; i < n; i += 2) {
        mc_chmap_remove(&m, &e[i].node);
        e[i].present = 0;
    }
    ck_assert_uint_eq(m.count, n / 2);
    for (size_t i = n; i < n + more / 2; i++) {
        e[i].present = 1;
        ck_assert_int_eq(mc_chmap_insert(&m, &e[i].node, e[i].hash), 0);
    }
    ck_assert_msg(m.old != NULL, "half way, the growth should still be moving entries");
    check_walks(&m, e, n + more);
    for (size_t i = n + more / 2; i < n + more; i++) {
        e[i].present = 1;
        ck_assert_int_eq(mc_chmap_insert(&m, &e[i].node, e[i].hash), 0);
    }
    ck_assert_msg(m.old == NULL, "%zu inserts should have moved every old bucket", more);
    check_walks(&m, e, n + more);
    for (size_t i = 0; i < n + more; i++) {
        const mc_cnode_t *c = mc_chmap_head(&m, e[i].hash);
        while ((c != NULL) && (c != &e[i].node))
            c = c->next;
        if ((c == NULL) != !e[i].present)
            ck_abort_msg("entry %zu: mc_chmap_head's chain disagrees", i);
        if (cfind(&m, e[i].key, e[i].hash) != (e[i].present ? &e[i] : NULL))
            ck_abort_msg("entry %zu should be %s", i, e[i].present ? "present" : "gone");
    }
    mc_chmap_cleanup(&m);
    ck_assert_msg(m.buckets == NULL && m.count == 0 && m.old == NULL,
                  "cleanup should reset the map");
    free(e);
}
END_TEST

/* The snapshot's walk (mooncake-master/durability/snapshot.c): bucket by bucket,
 * with inserts between buckets that start a growth and move entries.
 * Going on at the same bucket number over the doubled table, the walk
 * sees every entry that was there before it began. */
START_TEST(test_walk_across_growth)
{
    enum { FIRST = 2048, LATER = 4096 };
    mc_chmap_t m;
    mc_chmap_iter_t it;
    centry_t *e = calloc(FIRST + LATER, sizeof(*e));
    size_t next = FIRST, grown = 0;

    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(mc_chmap_init(&m, FIRST / 2, centry_hash), 0);
    for (size_t i = 0; i < FIRST + LATER; i++) {
        e[i].key  = (uint64_t)i * 40503u + 7;
        e[i].hash = (uint32_t)key_hash(e[i].key);
    }
    for (size_t i = 0; i < FIRST; i++)
        ck_assert_int_eq(mc_chmap_insert(&m, &e[i].node, e[i].hash), 0);
    ck_assert_msg(m.old == NULL, "a load of exactly 2 should not grow yet");
    for (size_t b = 0; b < m.nbuckets; b++) {
        for (mc_cnode_t *c = mc_chmap_bucket_first(&m, b, &it); c != NULL;
             c = mc_chmap_next(&m, &it))
            mc_container_of(c, centry_t, node)->seen++;
        /* two inserts per bucket walked: a growth starts at once and
         * moves entries while the walk goes on */
        for (int k = 0; (k < 2) && (next < FIRST + LATER); k++, next++) {
            size_t before = m.nbuckets;
            ck_assert_int_eq(mc_chmap_insert(&m, &e[next].node, e[next].hash), 0);
            grown += (m.nbuckets != before);
        }
    }
    ck_assert_msg(grown >= 1, "the inserts should have doubled the table during the walk");
    for (size_t i = 0; i < FIRST; i++)
        if (e[i].seen == 0)
            ck_abort_msg("entry %zu, there before the walk, was missed", i);
    mc_chmap_cleanup(&m);
    free(e);
}
END_TEST

START_TEST(test_hash_bytes)
{
    const char *s = "tenant/key-1";
    ck_assert_msg(mc_hash_bytes(s, strlen(s), 0) == mc_hash_bytes(s, strlen(s), 0),
                  "hashing should be deterministic");
    ck_assert_msg(mc_hash_bytes(s, strlen(s), 0) != mc_hash_bytes(s, strlen(s), 1),
                  "the seed should change the hash");
    ck_assert_msg(mc_hash_bytes("a", 1, 0) != mc_hash_bytes("b", 1, 0), "a and b differ");
    ck_assert_msg(mc_hash_bytes("", 0, 0) != mc_hash_bytes("\0", 1, 0),
                  "length should matter");
    /* sequential keys should spread over the low bits used for buckets */
    int used[64] = {0}, distinct = 0;
    for (int i = 0; i < 256; i++) {
        char k[16];
        int n = snprintf(k, sizeof(k), "key-%d", i);
        used[mc_hash_bytes(k, (size_t)n, 0) & 63] = 1;
    }
    for (int i = 0; i < 64; i++)
        distinct += used[i];
    ck_assert_msg(distinct >= 56, "256 keys should hit most of 64 buckets, hit %d", distinct);
}
END_TEST

Suite *mc_test_hashmap_suite(void)
{
    Suite *s  = suite_create("hashmap");
    TCase *tc = tcase_create("core");
    /* the large table walks half a million entries several times: room
     * for the sanitizer build on a loaded machine */
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_insert_find_remove);
    tcase_add_test(tc, test_iterate_and_remove);
    tcase_add_test(tc, test_colliding_hashes);
    tcase_add_test(tc, test_hash_bytes);
    tcase_add_test(tc, test_compact_map);
    tcase_add_test(tc, test_large_table);
    tcase_add_test(tc, test_walk_across_growth);
    suite_add_tcase(s, tc);
    return s;
}

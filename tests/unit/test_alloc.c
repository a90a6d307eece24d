/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Offset allocator.  Besides the targeted cases (alignment, exhaustion,
 * exact fit, fragmentation, forged and double frees, restore by offset),
 * a seeded random walk of allocs and frees over several capacities and
 * alignments keeps a shadow list of live blocks and, after every step,
 * demands that mc_alloc_check() passes, that the new block overlaps no
 * live one and that the counters match the shadow.  Every few steps it
 * also computes the true largest gap from the shadow and requires that
 * exactly that much (and no more) can be allocated.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "alloc/offset_alloc.h"
#include "check_suites.h"

/* splitmix64: a fixed seed gives the same walk on every machine */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * ck_assert_msg() records a checkpoint (a write to Check's pipe) even when
 * it passes; the hot loops below assert through this instead.
 */
#define require(cond, ...)                  \
    do {                                    \
        if (!(cond))                        \
            ck_abort_msg(__VA_ARGS__);      \
    } while (0)
#define require_status(expr, want)                                                   \
    do {                                                                             \
        int st_ = (int)(expr);                                                       \
        require(st_ == (int)(want), "%s should return %s but returned %d (%s)", #expr, \
                mc_status_name(want), st_, mc_status_name(st_));                     \
    } while (0)

static uint64_t max_u64(uint64_t x, uint64_t y) { return x > y ? x : y; }

static void assert_consistent(const mc_alloc_t *a)
{
    int rc = mc_alloc_check(a);
    require(rc == 0, "the allocator should be consistent but check line %d failed", rc);
}

static void assert_stats_equal(const mc_alloc_stats_t *x, const mc_alloc_stats_t *y)
{
    ck_assert_msg(memcmp(x, y, sizeof(*x)) == 0,
                  "stats should be unchanged (allocated %llu vs %llu, free %u vs %u, "
                  "used %u vs %u, largest %llu vs %llu)",
                  (unsigned long long)x->allocated, (unsigned long long)y->allocated,
                  x->free_blocks, y->free_blocks, x->used_blocks, y->used_blocks,
                  (unsigned long long)x->largest_free, (unsigned long long)y->largest_free);
}

START_TEST(test_create_rejects_bad_params)
{
    mc_alloc_t *a = NULL;
    ck_assert_status_eq(mc_alloc_create(0, 1, &a), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_create(4096, 0, &a), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_create(4096, 3, &a), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_create(4096, 48, &a), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_create(63, 64, &a), MC_INVALID_PARAMS);
    ck_assert_msg(a == NULL, "a failed create should not write the handle");
    mc_alloc_destroy(NULL);
}
END_TEST

START_TEST(test_capacity_rounds_down_to_alignment)
{
    mc_alloc_t *a = NULL;
    mc_alloc_stats_t st;
    mc_alloc_block_t b;
    ck_assert_status_ok(mc_alloc_create(1000, 64, &a));
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.capacity == 960, "capacity 1000 at alignment 64 should manage 960 bytes");
    ck_assert_msg(st.largest_free == 960, "the whole rounded space should be free");
    ck_assert_status_eq(mc_alloc_get(a, 961, &b), MC_NO_AVAILABLE_HANDLE);
    ck_assert_status_ok(mc_alloc_get(a, 960, &b));
    ck_assert_msg(b.offset == 0 && b.size == 960, "the whole space should be granted");
    assert_consistent(a);
    mc_alloc_destroy(a);
}
END_TEST

START_TEST(test_offsets_and_sizes_are_aligned)
{
    mc_alloc_t *a = NULL;
    mc_alloc_block_t b[6];
    const uint64_t req[6] = {1, 63, 64, 65, 100, 4097};
    ck_assert_status_ok(mc_alloc_create(1 << 20, 64, &a));
    for (int i = 0; i < 6; i++) {
        ck_assert_status_ok(mc_alloc_get(a, req[i], &b[i]));
        ck_assert_msg(b[i].offset % 64 == 0, "offset %llu should be 64-aligned",
                      (unsigned long long)b[i].offset);
        ck_assert_msg(b[i].size == (req[i] + 63) / 64 * 64,
                      "a request of %llu should be granted %llu bytes, not %llu",
                      (unsigned long long)req[i], (unsigned long long)((req[i] + 63) / 64 * 64),
                      (unsigned long long)b[i].size);
    }
    /* first allocations carve the space from the front, in order */
    for (int i = 1; i < 6; i++)
        ck_assert_msg(b[i].offset == b[i - 1].offset + b[i - 1].size,
                      "block %d should follow block %d", i, i - 1);
    mc_alloc_stats_t st;
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.used_blocks == 6 && st.free_blocks == 1, "6 used blocks and 1 free");
    ck_assert_msg(st.allocated == 64 + 64 + 64 + 128 + 128 + 4160, "allocated should be the sum");
    assert_consistent(a);
    mc_alloc_destroy(a);
}
END_TEST

START_TEST(test_zero_and_oversized_requests)
{
    mc_alloc_t *a = NULL;
    mc_alloc_block_t b;
    ck_assert_status_ok(mc_alloc_create(4096, 1, &a));
    ck_assert_status_eq(mc_alloc_get(a, 0, &b), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_get(a, 4097, &b), MC_NO_AVAILABLE_HANDLE);
    ck_assert_status_eq(mc_alloc_get(a, UINT64_MAX, &b), MC_NO_AVAILABLE_HANDLE);
    ck_assert_status_eq(mc_alloc_get(NULL, 1, &b), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_get(a, 1, NULL), MC_INVALID_PARAMS);
    assert_consistent(a);
    mc_alloc_destroy(a);
}
END_TEST

START_TEST(test_exhaustion)
{
    mc_alloc_t *a = NULL;
    mc_alloc_block_t b[16], extra;
    ck_assert_status_ok(mc_alloc_create(16 * 4096, 4096, &a));
    for (int i = 0; i < 16; i++)
        ck_assert_status_ok(mc_alloc_get(a, 4000, &b[i]));
    ck_assert_status_eq(mc_alloc_get(a, 1, &extra), MC_NO_AVAILABLE_HANDLE);
    mc_alloc_stats_t st;
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.free_blocks == 0 && st.largest_free == 0 && st.allocated == st.capacity,
                  "a full allocator should have no free block");
    ck_assert_status_ok(mc_alloc_put(a, &b[7]));
    ck_assert_status_ok(mc_alloc_get(a, 4096, &extra));
    ck_assert_msg(extra.offset == b[7].offset, "the freed hole should be reused exactly");
    assert_consistent(a);
    mc_alloc_destroy(a);
}
END_TEST

/* A size that is not a bin boundary: the round-up search alone misses it. */
START_TEST(test_whole_space_off_bin_boundary)
{
    static const uint64_t caps[] = {100, 1000, 12345, 3ull << 30, (3ull << 30) + 4097,
                                    (1ull << 48) - 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        mc_alloc_t *a = NULL;
        mc_alloc_block_t b;
        ck_assert_status_ok(mc_alloc_create(caps[i], 1, &a));
        ck_assert_status_ok(mc_alloc_get(a, caps[i], &b));
        ck_assert_msg(b.offset == 0 && b.size == caps[i], "the whole space %llu should fit",
                      (unsigned long long)caps[i]);
        ck_assert_status_eq(mc_alloc_get(a, 1, &b), MC_NO_AVAILABLE_HANDLE);
        ck_assert_status_ok(mc_alloc_put(a, &b));
        /* one byte short of everything, then the last byte */
        mc_alloc_block_t c, d;
        ck_assert_status_ok(mc_alloc_get(a, caps[i] - 1, &c));
        ck_assert_status_ok(mc_alloc_get(a, 1, &d));
        ck_assert_msg(d.offset == caps[i] - 1, "the last byte should be granted");
        assert_consistent(a);
        ck_assert_status_ok(mc_alloc_put(a, &c));
        ck_assert_status_ok(mc_alloc_put(a, &d));
        mc_alloc_stats_t st;
        mc_alloc_get_stats(a, &st);
        ck_assert_msg(st.free_blocks == 1 && st.largest_free == caps[i],
                      "freeing everything should leave one block of the whole space");
        mc_alloc_destroy(a);
    }
}
END_TEST

START_TEST(test_exact_fit)
{
    mc_alloc_t *a = NULL;
    mc_alloc_block_t x, y, z, w;
    ck_assert_status_ok(mc_alloc_create(1000, 1, &a));
    ck_assert_status_ok(mc_alloc_get(a, 300, &x));
    ck_assert_status_ok(mc_alloc_get(a, 437, &y));
    ck_assert_status_ok(mc_alloc_get(a, 263, &z));
    ck_assert_status_ok(mc_alloc_put(a, &y));
    /* the only hole is exactly 437 bytes; 437 is not a bin boundary */
    ck_assert_status_eq(mc_alloc_get(a, 438, &w), MC_NO_AVAILABLE_HANDLE);
    ck_assert_status_ok(mc_alloc_get(a, 437, &w));
    ck_assert_msg(w.offset == 300 && w.size == 437, "the exact hole should be granted");
    mc_alloc_stats_t st;
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.free_blocks == 0 && st.allocated == 1000, "nothing should be left free");
    assert_consistent(a);
    mc_alloc_destroy(a);
}
END_TEST

START_TEST(test_fragmentation_and_coalescing)
{
    enum { N = 64, SZ = 1024 };
    mc_alloc_t *a = NULL;
    mc_alloc_block_t b[N], big;
    mc_alloc_stats_t st;
    ck_assert_status_ok(mc_alloc_create(N * SZ, 1, &a));
    for (int i = 0; i < N; i++)
        ck_assert_status_ok(mc_alloc_get(a, SZ, &b[i]));
    for (int i = 0; i < N; i += 2)
        ck_assert_status_ok(mc_alloc_put(a, &b[i]));
    assert_consistent(a);
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.free_blocks == N / 2, "every other block should be a separate hole");
    ck_assert_msg(st.largest_free == SZ, "the largest hole should be one block");
    ck_assert_msg(st.allocated == (N / 2) * SZ, "half the space should be allocated");
    ck_assert_status_eq(mc_alloc_get(a, SZ + 1, &big), MC_NO_AVAILABLE_HANDLE);
    ck_assert_status_eq(mc_alloc_get(a, 2 * SZ, &big), MC_NO_AVAILABLE_HANDLE);
    for (int i = 1; i < N; i += 2) {
        ck_assert_status_ok(mc_alloc_put(a, &b[i]));
        assert_consistent(a);
    }
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.free_blocks == 1 && st.used_blocks == 0 && st.largest_free == N * SZ,
                  "freeing the rest should coalesce into one block");
    ck_assert_status_ok(mc_alloc_get(a, N * SZ, &big));
    ck_assert_msg(big.offset == 0, "the big block should start at 0");
    mc_alloc_destroy(a);
}
END_TEST

START_TEST(test_double_free_and_forged_blocks)
{
    mc_alloc_t *a = NULL;
    mc_alloc_block_t x, y, forged;
    mc_alloc_stats_t before, after;
    ck_assert_status_ok(mc_alloc_create(1 << 20, 256, &a));
    ck_assert_status_ok(mc_alloc_get(a, 1000, &x));
    ck_assert_status_ok(mc_alloc_get(a, 5000, &y));
    ck_assert_status_ok(mc_alloc_put(a, &x));
    mc_alloc_get_stats(a, &before);

    ck_assert_status_eq(mc_alloc_put(a, &x), MC_INVALID_PARAMS); /* double free */
    forged      = y;
    forged.node = 1000000;
    ck_assert_status_eq(mc_alloc_put(a, &forged), MC_INVALID_PARAMS);
    forged.node = UINT32_MAX;
    ck_assert_status_eq(mc_alloc_put(a, &forged), MC_INVALID_PARAMS);
    forged = y;
    forged.offset += 256;
    ck_assert_status_eq(mc_alloc_put(a, &forged), MC_INVALID_PARAMS);
    forged = y;
    forged.size -= 256;
    ck_assert_status_eq(mc_alloc_put(a, &forged), MC_INVALID_PARAMS);
    forged = y;
    forged.size += 256;
    ck_assert_status_eq(mc_alloc_put(a, &forged), MC_INVALID_PARAMS);
    for (uint32_t n = 0; n < 8; n++) { /* every other node, whatever its state */
        if (n == y.node)
            continue;
        forged      = y;
        forged.node = n;
        ck_assert_status_eq(mc_alloc_put(a, &forged), MC_INVALID_PARAMS);
    }
    ck_assert_status_eq(mc_alloc_put(a, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_put(NULL, &y), MC_INVALID_PARAMS);

    mc_alloc_get_stats(a, &after);
    assert_stats_equal(&before, &after);
    assert_consistent(a);
    ck_assert_status_ok(mc_alloc_put(a, &y));
    ck_assert_status_eq(mc_alloc_put(a, &y), MC_INVALID_PARAMS);
    mc_alloc_get_stats(a, &after);
    ck_assert_msg(after.free_blocks == 1 && after.largest_free == (1 << 20),
                  "everything should be free again");
    mc_alloc_destroy(a);
}
END_TEST

/* mc_alloc_lookup rebuilds a granted handle from its node index and
 * refuses every node that is not a granted block. */
START_TEST(test_lookup_by_node)
{
    mc_alloc_t *a = NULL;
    mc_alloc_block_t x, y, z, l;
    ck_assert_status_ok(mc_alloc_create(10000, 1, &a));
    ck_assert_status_ok(mc_alloc_get(a, 1, &x));
    ck_assert_status_ok(mc_alloc_get(a, 777, &y));
    ck_assert_status_ok(mc_alloc_get(a, 3, &z));
    ck_assert_status_ok(mc_alloc_lookup(a, y.node, &l));
    ck_assert_msg(l.offset == 1 && l.size == 777 && l.node == y.node,
                  "lookup should give [1,+777), not [%llu,+%llu)", (unsigned long long)l.offset,
                  (unsigned long long)l.size);
    ck_assert_msg(mc_alloc_offset(a, y.node) == 1, "y should start at 1");
    ck_assert_msg(mc_alloc_offset(a, z.node) == 778, "z should start at 778");
    ck_assert_status_ok(mc_alloc_lookup(a, x.node, &l));
    ck_assert_msg(l.offset == 0 && l.size == 1, "lookup of the first block");
    ck_assert_status_ok(mc_alloc_put(a, &y));
    ck_assert_status_eq(mc_alloc_lookup(a, y.node, &l), MC_INVALID_PARAMS); /* freed */
    ck_assert_msg(mc_alloc_offset(a, y.node) == UINT64_MAX, "a freed node has no offset");
    ck_assert_msg(mc_alloc_offset(a, UINT32_MAX) == UINT64_MAX, "NIL has no offset");
    ck_assert_msg(mc_alloc_offset(NULL, x.node) == UINT64_MAX, "no allocator, no offset");
    /* the free tail after z, out-of-range nodes and the reserved markers */
    for (uint32_t n = 0; n < 8; n++) {
        if ((n != x.node) && (n != z.node))
            ck_assert_status_eq(mc_alloc_lookup(a, n, &l), MC_INVALID_PARAMS);
    }
    ck_assert_status_eq(mc_alloc_lookup(a, UINT32_MAX, &l), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_lookup(a, UINT32_MAX - 1, &l), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_lookup(a, UINT32_MAX - 2, &l), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_lookup(a, x.node, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_alloc_lookup(NULL, x.node, &l), MC_INVALID_PARAMS);
    /* z's size is the distance to the end of its block, not to the end of
     * the space: the free tail after it must not count */
    ck_assert_status_ok(mc_alloc_lookup(a, z.node, &l));
    ck_assert_msg(l.offset == 778 && l.size == 3, "lookup of z");
    ck_assert_status_ok(mc_alloc_put(a, &x));
    ck_assert_status_ok(mc_alloc_put(a, &z));
    assert_consistent(a);
    mc_alloc_destroy(a);
}
END_TEST

/* ---- randomized walk --------------------------------------------------- */

typedef struct walk {
    mc_alloc_block_t *live;
    size_t n, cap;
} walk_t;

static int cmp_offset(const void *x, const void *y)
{
    const mc_alloc_block_t *p = x, *q = y;
    return (p->offset > q->offset) - (p->offset < q->offset);
}

/* Largest gap between live blocks: what the allocator must be able to grant. */
static uint64_t shadow_largest_gap(walk_t *w, uint64_t capacity)
{
    uint64_t pos = 0, best = 0;
    qsort(w->live, w->n, sizeof(*w->live), cmp_offset);
    for (size_t i = 0; i < w->n; i++) {
        if (w->live[i].offset - pos > best)
            best = w->live[i].offset - pos;
        pos = w->live[i].offset + w->live[i].size;
    }
    return max_u64(best, capacity - pos);
}

static uint64_t random_size(uint64_t *seed, uint64_t capacity)
{
    uint64_t r = rng_next(seed);
    /* log-uniform up to a sixteenth of the space, sometimes anything */
    uint64_t limit = (r & 15) == 0 ? capacity : max_u64(capacity / 16, 1);
    unsigned bits  = 64u - (unsigned)__builtin_clzll(limit);
    uint64_t v     = rng_next(seed) >> (64u - 1u - (unsigned)(rng_next(seed) % bits));
    return 1 + (v % limit);
}

static void random_walk(uint64_t capacity, uint64_t alignment, int steps, uint64_t seed)
{
    mc_alloc_t *a = NULL;
    walk_t w      = {NULL, 0, 0};
    uint64_t live_bytes = 0;
    mc_alloc_stats_t st;

    ck_assert_status_ok(mc_alloc_create(capacity, alignment, &a));
    capacity &= ~(alignment - 1);
    for (int step = 0; step < steps; step++) {
        uint64_t r = rng_next(&seed);
        /* bias towards allocation early, towards freeing when crowded */
        int do_alloc = (w.n == 0) || ((r % 100) < (w.n < 64 ? 65u : 45u));
        if (do_alloc) {
            mc_alloc_block_t b;
            uint64_t size = random_size(&seed, capacity);
            mc_status_t s = mc_alloc_get(a, size, &b);
            if (s == MC_OK) {
                require(b.offset % alignment == 0 && b.size % alignment == 0,
                              "step %d: block should be aligned", step);
                require(b.size >= size && b.size - size < alignment,
                              "step %d: %llu bytes granted for %llu", step,
                              (unsigned long long)b.size, (unsigned long long)size);
                require(b.size <= capacity && b.offset <= capacity - b.size,
                              "step %d: block should lie inside the space", step);
                for (size_t i = 0; i < w.n; i++)
                    require(b.offset + b.size <= w.live[i].offset ||
                                      w.live[i].offset + w.live[i].size <= b.offset,
                                  "step %d: [%llu,+%llu) overlaps live [%llu,+%llu)", step,
                                  (unsigned long long)b.offset, (unsigned long long)b.size,
                                  (unsigned long long)w.live[i].offset,
                                  (unsigned long long)w.live[i].size);
                if (w.n == w.cap) {
                    w.cap  = w.cap ? w.cap * 2 : 64;
                    w.live = realloc(w.live, w.cap * sizeof(*w.live));
                    ck_assert_ptr_nonnull(w.live);
                }
                w.live[w.n++] = b;
                live_bytes += b.size;
            } else {
                require_status(s, MC_NO_AVAILABLE_HANDLE);
                mc_alloc_get_stats(a, &st);
                require(st.largest_free < size,
                              "step %d: a refused request of %llu should exceed the largest "
                              "free block %llu", step, (unsigned long long)size,
                              (unsigned long long)st.largest_free);
            }
        } else {
            size_t i = (size_t)(rng_next(&seed) % w.n);
            mc_alloc_block_t l;
            /* the handle is rebuilt from its node alone until it is freed */
            require_status(mc_alloc_lookup(a, w.live[i].node, &l), MC_OK);
            require((l.offset == w.live[i].offset) && (l.size == w.live[i].size) &&
                        (l.node == w.live[i].node),
                    "step %d: lookup of node %u gave [%llu,+%llu), not [%llu,+%llu)", step,
                    w.live[i].node, (unsigned long long)l.offset, (unsigned long long)l.size,
                    (unsigned long long)w.live[i].offset, (unsigned long long)w.live[i].size);
            require(mc_alloc_offset(a, w.live[i].node) == w.live[i].offset,
                    "step %d: offset of node %u", step, w.live[i].node);
            require_status(mc_alloc_put(a, &w.live[i]), MC_OK);
            live_bytes -= w.live[i].size;
            w.live[i] = w.live[--w.n];
        }
        assert_consistent(a);
        mc_alloc_get_stats(a, &st);
        require(st.allocated == live_bytes, "step %d: allocated %llu, live %llu", step,
                      (unsigned long long)st.allocated, (unsigned long long)live_bytes);
        require(st.used_blocks == w.n, "step %d: used_blocks should count live blocks",
                      step);
        if (step % 16 == 0) {
            uint64_t gap = shadow_largest_gap(&w, capacity);
            require(st.largest_free == gap, "step %d: largest_free %llu, true gap %llu",
                          step, (unsigned long long)st.largest_free, (unsigned long long)gap);
            if (gap > 0) {
                mc_alloc_block_t t;
                if (gap < UINT64_MAX)
                    require_status(mc_alloc_get(a, gap + 1, &t), MC_NO_AVAILABLE_HANDLE);
                require_status(mc_alloc_get(a, gap, &t), MC_OK);
                require_status(mc_alloc_put(a, &t), MC_OK);
            }
        }
    }
    for (size_t i = 0; i < w.n; i++)
        require_status(mc_alloc_put(a, &w.live[i]), MC_OK);
    assert_consistent(a);
    mc_alloc_get_stats(a, &st);
    require(st.free_blocks == 1 && st.used_blocks == 0 && st.allocated == 0 &&
                      st.largest_free == capacity,
                  "freeing everything should leave one free block of the full capacity");
    free(w.live);
    mc_alloc_destroy(a);
}

static const struct {
    uint64_t capacity, alignment;
} walks[] = {
    {1000, 1},
    {4096, 8},
    {1ull << 20, 1},
    {(1ull << 20) + 777, 64},
    {(3ull << 30) + 12345, 4096},
    {1ull << 48, 1},
    {(1ull << 48) + (1ull << 40), 1ull << 20},
    {UINT64_MAX, 1},
};

START_TEST(test_random_walk)
{
    random_walk(walks[_i].capacity, walks[_i].alignment, 20000, 0x5eed0000u + (uint64_t)_i);
}
END_TEST

/* Many equal sizes: the workload of a KV cache (one bin holds every hole). */
START_TEST(test_uniform_sizes_churn)
{
    enum { N = 4096 };
    mc_alloc_t *a = NULL;
    mc_alloc_block_t *b = calloc(N, sizeof(*b));
    uint64_t seed = 42;
    ck_assert_ptr_nonnull(b);
    ck_assert_status_ok(mc_alloc_create((uint64_t)N * 3000, 1, &a));
    for (int i = 0; i < N; i++)
        ck_assert_status_ok(mc_alloc_get(a, 3000, &b[i]));
    for (int round = 0; round < 20000; round++) {
        int i = (int)(rng_next(&seed) % N);
        require_status(mc_alloc_put(a, &b[i]), MC_OK);
        require_status(mc_alloc_get(a, 3000, &b[i]), MC_OK);
    }
    assert_consistent(a);
    mc_alloc_stats_t st;
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.allocated == st.capacity, "uniform churn should keep the space full");
    for (int i = 0; i < N; i++)
        ck_assert_status_ok(mc_alloc_put(a, &b[i]));
    mc_alloc_get_stats(a, &st);
    ck_assert_msg(st.free_blocks == 1, "everything should coalesce");
    free(b);
    mc_alloc_destroy(a);
}
END_TEST

Suite *mc_test_alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_create_rejects_bad_params);
    tcase_add_test(tc, test_capacity_rounds_down_to_alignment);
    tcase_add_test(tc, test_offsets_and_sizes_are_aligned);
    tcase_add_test(tc, test_zero_and_oversized_requests);
    tcase_add_test(tc, test_exhaustion);
    tcase_add_test(tc, test_whole_space_off_bin_boundary);
    tcase_add_test(tc, test_exact_fit);
    tcase_add_test(tc, test_fragmentation_and_coalescing);
    tcase_add_test(tc, test_double_free_and_forged_blocks);
    tcase_add_test(tc, test_lookup_by_node);
    suite_add_tcase(s, tc);

    TCase *tr = tcase_create("random");
    tcase_set_timeout(tr, 120);
    tcase_add_loop_test(tr, test_random_walk, 0, (int)(sizeof(walks) / sizeof(walks[0])));
    tcase_add_test(tr, test_uniform_sizes_churn);
    suite_add_tcase(s, tr);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Offset allocator (see offset_alloc.h for the contract).
 *
 * The managed space is tiled, in address order, by blocks; each block is a
 * node in a pool of our own (a growable array indexed by uint32_t, with a
 * list of released nodes for reuse).  A node records its start offset, its
 * physical neighbours (the blocks just before and after it) and, while it
 * is free, its place in the free list of one size bin.  mc_alloc_block_t
 * hands the node index to the caller so a free finds its block in O(1).
 *
 * A node is 16 bytes because the master keeps one per stored object: the
 * size is not stored but is the distance to the next block's offset (or
 * to the capacity for the last block), and the node's state takes the top
 * two bits of its predecessor link (so a pool holds at most 2^30 - 2
 * nodes).  Only a free block in a bin needs bin links, so it borrows a
 * second node from the pool for them (its "companion"): the block's
 * phys_next field then names the companion, which keeps the block's real
 * successor link and packs the two bin links into its offset field.  So a
 * granted block costs one node, a free one two, and free blocks are never
 * more than the granted ones plus one.  The size of a block in a bin
 * never changes while it is there: its neighbours are used blocks, and a
 * neighbour is only merged into it after it has left its bin.
 *
 * Size bins ("small floats", as in TLSF and Sebastian Aaltonen's
 * OffsetAllocator that upstream Mooncake uses).  Sizes are counted in
 * alignment units u >= 1.  Units 1..7 each have a bin of their own; above
 * that, with h = floor(log2 u), bin = (h - 2) * 8 + the three bits below
 * the leading one.  So each power of two is split into 8 sub-bins of equal
 * width, a bin spans at most 12.5% of its lower bound, and 62 levels of 8
 * cover every 64-bit size (496 bins).  A free block lives in the bin of its
 * size rounded DOWN, so every block in bin b is at least bin_min(b) units.
 *
 * Allocation rounds the request UP to the next bin boundary and asks the
 * two-level bitmap (one bit per level, 8 bits per level for its sub-bins)
 * for the first non-empty bin at or above it: two count-trailing-zeros
 * instructions.  Every block in that bin fits, so we take the head of its
 * list, split off the tail as a new free block, and are done in O(1).
 *
 * The round-up has a blind spot: a block in the request's own bin that is
 * large enough but not a whole bin larger (the extreme case: the whole
 * empty space, asked for in one piece).  Only when the O(1) search finds
 * nothing do we look there, and each bin caches the size of its largest
 * block (with a count of blocks that size) so the fallback can refuse at
 * once when nothing in the bin fits.  The fallback walks that one bin; a
 * full walk that finds nothing repairs the cache, so a refused request
 * costs O(1) the next time.  The cache is exact while valid: it goes
 * invalid only when the last block of the largest size leaves a bin that
 * still has others.
 *
 * Free marks the block free and merges it at once with a free physical
 * predecessor and successor (each is unlinked from its bin first), then
 * files the result in its bin: O(1), and no two free blocks are ever
 * adjacent, so freeing everything leaves one block spanning the space.
 *
 * The largest free block is in the highest non-empty bin (bins are ordered
 * by size); the bin cache gives its size in O(1) unless invalid, when
 * mc_alloc_get_stats() walks that one bin.
 *
 * Hazards: node indices are recycled, so a stale block handle whose node
 * now holds a different grant is rejected by the offset/size check, but a
 * stale handle identical to a live grant (same node, offset and size) is
 * indistinguishable from it.  Callers own their handles.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "alloc/offset_alloc.h"
#include "common/log.h"

#define NIL UINT32_MAX
#define PREV_BITS 30u
#define PREV_MASK ((1u << PREV_BITS) - 1u)
#define PREV_NIL PREV_MASK            /* "no predecessor" in a prev_state field */
#define MAX_NODES (PREV_MASK - 1u)    /* indices stay below PREV_NIL */
#define INITIAL_NODES 64u

#define SUB_BINS 8u
#define LEVELS 62u
#define NUM_BINS (LEVELS * SUB_BINS) /* 496: bin_floor(UINT64_MAX) == 495 */

enum node_state {
    /* a granted block, or (only inside one call) a free block in no bin */
    NODE_USED   = 0,
    NODE_FREE   = 1, /* a free block in a bin: phys_next names its companion */
    NODE_UNUSED = 2, /* in the node pool (chained through phys_next) */
    NODE_COMP   = 3  /* a free block's companion */
};

typedef struct node {
    uint64_t offset;     /* companion: bin links, prev << 32 | next */
    uint32_t prev_state; /* state << PREV_BITS | physical predecessor */
    uint32_t phys_next;  /* free: its companion; companion: the block's successor */
} node_t;

_Static_assert(sizeof(node_t) == 16, "the master keeps one node per stored object");

static enum node_state node_state(const node_t *n)
{
    return (enum node_state)(n->prev_state >> PREV_BITS);
}

static void set_state(node_t *n, enum node_state st)
{
    n->prev_state = (n->prev_state & PREV_MASK) | ((uint32_t)st << PREV_BITS);
}

static uint32_t phys_prev(const mc_alloc_t *a, uint32_t idx);
static uint32_t phys_next(const mc_alloc_t *a, uint32_t idx);

typedef struct bin_cache {
    uint64_t max;    /* largest block size in the bin, bytes */
    uint32_t count;  /* blocks of exactly that size */
    uint8_t valid;
} bin_cache_t;

struct mc_alloc {
    uint64_t capacity; /* managed bytes: a multiple of the alignment */
    uint64_t alignment;
    unsigned shift;    /* log2(alignment) */

    node_t *nodes;
    uint32_t nodes_cap;  /* slots allocated */
    uint32_t nodes_init; /* slots ever handed out: [0, nodes_init) are initialised */
    uint32_t pool_head;  /* released nodes */
    uint32_t pool_count;

    uint32_t phys_head; /* the block at offset 0 */

    uint64_t top_bits;          /* bit l: some sub-bin of level l is non-empty */
    uint8_t sub_bits[LEVELS];   /* bit s: bin l*8+s is non-empty */
    uint32_t bin_head[NUM_BINS];
    bin_cache_t bin_cache[NUM_BINS];

    uint64_t allocated;
    uint32_t free_blocks;
    uint32_t used_blocks;
};

/* ---- node links ---------------------------------------------------------- */

static uint32_t phys_prev(const mc_alloc_t *a, uint32_t idx)
{
    uint32_t p = a->nodes[idx].prev_state & PREV_MASK;
    return (p == PREV_NIL) ? NIL : p;
}

static void set_phys_prev(mc_alloc_t *a, uint32_t idx, uint32_t prev)
{
    node_t *n     = &a->nodes[idx];
    n->prev_state = (n->prev_state & ~PREV_MASK) | ((prev == NIL) ? PREV_NIL : prev);
}

/* The successor of block @p idx, through its companion when it is free. */
static uint32_t phys_next(const mc_alloc_t *a, uint32_t idx)
{
    const node_t *n = &a->nodes[idx];
    return (node_state(n) == NODE_FREE) ? a->nodes[n->phys_next].phys_next : n->phys_next;
}

/* Bin links of the free block @p idx, kept by its companion. */
static uint32_t free_prev(const mc_alloc_t *a, uint32_t idx)
{
    return (uint32_t)(a->nodes[a->nodes[idx].phys_next].offset >> 32);
}

static uint32_t free_next(const mc_alloc_t *a, uint32_t idx)
{
    return (uint32_t)a->nodes[a->nodes[idx].phys_next].offset;
}

static void set_free_links(mc_alloc_t *a, uint32_t idx, uint32_t prev, uint32_t next)
{
    a->nodes[a->nodes[idx].phys_next].offset = ((uint64_t)prev << 32) | next;
}

/* ---- size bins ----------------------------------------------------------- */

static unsigned bin_floor(uint64_t units)
{
    if (units < SUB_BINS)
        return (unsigned)units;
    unsigned h = 63u - (unsigned)__builtin_clzll(units);
    return ((h - 2u) << 3) + (unsigned)((units >> (h - 3u)) & 7u);
}

/* Smallest bin whose every block is at least @p units; may be NUM_BINS. */
static unsigned bin_ceil(uint64_t units)
{
    unsigned b = bin_floor(units);
    if (units >= SUB_BINS) {
        unsigned h = 63u - (unsigned)__builtin_clzll(units);
        if ((units & ((1ull << (h - 3u)) - 1u)) != 0)
            b++;
    }
    return b;
}

/* First non-empty bin >= b, or NIL. */
static uint32_t bin_find(const mc_alloc_t *a, unsigned b)
{
    if (b >= NUM_BINS)
        return NIL;
    unsigned level = b >> 3;
    unsigned sub   = b & 7u;
    unsigned bits  = a->sub_bits[level] & (0xffu << sub) & 0xffu;
    if (bits != 0)
        return (level << 3) + (unsigned)__builtin_ctz(bits);
    if (level + 1u >= 64u)
        return NIL;
    uint64_t levels = a->top_bits & (~0ull << (level + 1u));
    if (levels == 0)
        return NIL;
    level = (unsigned)__builtin_ctzll(levels);
    return (level << 3) + (unsigned)__builtin_ctz(a->sub_bits[level]);
}

/* Bytes of block @p idx: up to the next block, or to the end. */
static uint64_t node_size(const mc_alloc_t *a, uint32_t idx)
{
    uint32_t next = phys_next(a, idx);
    uint64_t end  = (next != NIL) ? a->nodes[next].offset : a->capacity;
    return end - a->nodes[idx].offset;
}

static unsigned node_bin(const mc_alloc_t *a, uint32_t idx)
{
    return bin_floor(node_size(a, idx) >> a->shift);
}

static uint32_t node_take(mc_alloc_t *a);
static void node_release(mc_alloc_t *a, uint32_t idx);

/* File the free block @p idx (in no bin) in the bin of its size; takes its
 * companion node, which the caller has reserved. */
static void bin_insert(mc_alloc_t *a, uint32_t idx)
{
    uint64_t size  = node_size(a, idx);
    unsigned b     = bin_floor(size >> a->shift);
    bin_cache_t *c = &a->bin_cache[b];
    uint32_t head  = a->bin_head[b];
    uint32_t comp  = node_take(a);

    a->nodes[comp].phys_next = a->nodes[idx].phys_next;
    set_state(&a->nodes[comp], NODE_COMP);
    a->nodes[idx].phys_next = comp;
    set_state(&a->nodes[idx], NODE_FREE);
    set_free_links(a, idx, NIL, head);
    if (head != NIL) {
        set_free_links(a, head, idx, free_next(a, head));
        if (c->valid) {
            if (size > c->max) {
                c->max   = size;
                c->count = 1;
            } else if (size == c->max) {
                c->count++;
            }
        }
    } else {
        /* first block of an empty bin: the cache is exact again */
        c->max   = size;
        c->count = 1;
        c->valid = 1;
        a->sub_bits[b >> 3] = (uint8_t)(a->sub_bits[b >> 3] | (1u << (b & 7u)));
        a->top_bits |= 1ull << (b >> 3);
    }
    a->bin_head[b] = idx;
}

/* Take the free block @p idx out of its bin; it gives its companion back
 * and stays free, in no bin (state NODE_USED until the caller decides). */
static void bin_remove(mc_alloc_t *a, uint32_t idx)
{
    node_t *n      = &a->nodes[idx];
    uint64_t size  = node_size(a, idx);
    unsigned b     = bin_floor(size >> a->shift);
    bin_cache_t *c = &a->bin_cache[b];
    uint32_t fp    = free_prev(a, idx), fn = free_next(a, idx);
    uint32_t comp  = n->phys_next;

    if (fp != NIL)
        set_free_links(a, fp, free_prev(a, fp), fn);
    else
        a->bin_head[b] = fn;
    if (fn != NIL)
        set_free_links(a, fn, fp, free_next(a, fn));
    n->phys_next = a->nodes[comp].phys_next;
    set_state(n, NODE_USED);
    node_release(a, comp);

    if (a->bin_head[b] == NIL) {
        c->valid = 0;
        a->sub_bits[b >> 3] = (uint8_t)(a->sub_bits[b >> 3] & ~(1u << (b & 7u)));
        if (a->sub_bits[b >> 3] == 0)
            a->top_bits &= ~(1ull << (b >> 3));
    } else if (c->valid && (size == c->max) && (--c->count == 0)) {
        c->valid = 0; /* the largest left; we no longer know the next one */
    }
}

/* ---- node pool ----------------------------------------------------------- */

/* Make sure @p k nodes can be taken without failing. */
static int pool_reserve(mc_alloc_t *a, uint32_t k)
{
    uint64_t avail = (uint64_t)a->pool_count + (a->nodes_cap - a->nodes_init);
    if (avail >= k)
        return 0;
    uint64_t want = (uint64_t)a->nodes_init + k;
    if (want > MAX_NODES)
        return -1;
    uint64_t ncap = a->nodes_cap ? a->nodes_cap : INITIAL_NODES;
    while (ncap < want)
        ncap *= 2;
    if (ncap > MAX_NODES)
        ncap = MAX_NODES;
    if (ncap > SIZE_MAX / sizeof(node_t))
        return -1;
    node_t *nn = realloc(a->nodes, (size_t)ncap * sizeof(node_t));
    /* growth only moves the array: nothing in it points into it */
    if (nn == NULL)
        return -1;
    a->nodes     = nn;
    a->nodes_cap = (uint32_t)ncap;
    return 0;
}

/* Take a node; the caller has reserved it with pool_reserve(). */
static uint32_t node_take(mc_alloc_t *a)
{
    uint32_t idx;
    if (a->pool_head != NIL) {
        idx          = a->pool_head;
        a->pool_head = a->nodes[idx].phys_next;
        a->pool_count--;
    } else {
        idx = a->nodes_init++;
    }
    node_t *n     = &a->nodes[idx];
    n->offset     = 0;
    n->prev_state = ((uint32_t)NODE_USED << PREV_BITS) | PREV_NIL; /* free, in no bin */
    n->phys_next  = NIL;
    return idx;
}

static void node_release(mc_alloc_t *a, uint32_t idx)
{
    node_t *n     = &a->nodes[idx];
    n->offset     = 0;
    n->prev_state = ((uint32_t)NODE_UNUSED << PREV_BITS) | PREV_NIL;
    n->phys_next  = a->pool_head;
    a->pool_head  = idx;
    a->pool_count++;
}

/*
 * Cut free block @p idx (not in a bin) after its first @p keep bytes; the
 * tail becomes a new free node (in no bin), linked after it.  One node
 * must be reserved.  Returns the tail.
 */
static uint32_t split_after(mc_alloc_t *a, uint32_t idx, uint64_t keep)
{
    uint32_t t    = node_take(a);
    uint32_t next = a->nodes[idx].phys_next;

    a->nodes[t].offset    = a->nodes[idx].offset + keep;
    set_phys_prev(a, t, idx);
    a->nodes[t].phys_next = next;
    if (next != NIL)
        set_phys_prev(a, next, t);
    a->nodes[idx].phys_next = t;
    return t;
}

/*
 * Merge the free block after @p idx into it (the inverse of split_after);
 * neither may be in a bin.  Its node goes back to the pool.
 */
static void absorb_next(mc_alloc_t *a, uint32_t idx)
{
    uint32_t next  = a->nodes[idx].phys_next;
    uint32_t after = a->nodes[next].phys_next;

    a->nodes[idx].phys_next = after;
    if (after != NIL)
        set_phys_prev(a, after, idx);
    node_release(a, next);
    a->free_blocks--;
}

/* ---- lifecycle ----------------------------------------------------------- */

mc_status_t mc_alloc_create(uint64_t capacity, uint64_t alignment, mc_alloc_t **alloc_p)
{
    mc_status_t st = MC_OK;
    mc_alloc_t *a  = NULL;

    if ((alloc_p == NULL) || (alignment == 0) || ((alignment & (alignment - 1)) != 0)) {
        mc_set_error_detail("allocator alignment %llu is not a power of two",
                            (unsigned long long)alignment);
        return MC_INVALID_PARAMS;
    }
    capacity &= ~(alignment - 1);
    if (capacity == 0) {
        mc_set_error_detail("allocator capacity is smaller than one alignment unit");
        return MC_INVALID_PARAMS;
    }

    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        st = MC_INTERNAL_ERROR;
        goto cleanup;
    }
    a->capacity  = capacity;
    a->alignment = alignment;
    a->shift     = (unsigned)__builtin_ctzll(alignment);
    a->pool_head = NIL;
    for (unsigned b = 0; b < NUM_BINS; b++)
        a->bin_head[b] = NIL;
    if (pool_reserve(a, 2) != 0) { /* the block and its companion */
        st = MC_INTERNAL_ERROR;
        goto cleanup;
    }

    uint32_t idx     = node_take(a);
    node_t *n        = &a->nodes[idx];
    n->offset        = 0;
    a->phys_head     = idx;
    a->free_blocks   = 1;
    bin_insert(a, idx);

    *alloc_p = a;
    return MC_OK;

cleanup:
    mc_alloc_destroy(a);
    mc_set_error_detail("out of memory creating an allocator");
    return st;
}

void mc_alloc_destroy(mc_alloc_t *alloc)
{
    if (alloc == NULL)
        return;
    free(alloc->nodes);
    free(alloc);
}

/* ---- allocation ---------------------------------------------------------- */

/* Round a request to the alignment; 0 when it cannot fit at all. */
static uint64_t round_request(const mc_alloc_t *a, uint64_t size)
{
    if (size > a->capacity)
        return 0;
    /* cannot overflow: capacity <= 2^64 - alignment */
    return (size + a->alignment - 1) & ~(a->alignment - 1);
}

/*
 * The fallback of the header comment: a block of at least @p size in the
 * request's own bin.  Returns NIL when there is none.
 */
static uint32_t find_in_own_bin(mc_alloc_t *a, uint64_t size)
{
    unsigned b     = bin_floor(size >> a->shift);
    bin_cache_t *c = &a->bin_cache[b];
    uint64_t max   = 0;
    uint32_t count = 0;

    if (a->bin_head[b] == NIL)
        return NIL;
    if (c->valid && (c->max < size))
        return NIL;
    for (uint32_t i = a->bin_head[b]; i != NIL; i = free_next(a, i)) {
        uint64_t s = node_size(a, i);
        if (s >= size)
            return i;
        if (s > max) {
            max   = s;
            count = 1;
        } else if (s == max) {
            count++;
        }
    }
    /* walked the whole bin: now we know its largest block exactly */
    c->max   = max;
    c->count = count;
    c->valid = 1;
    return NIL;
}

/*
 * Grant the first @p size bytes of free block @p idx (already removed from
 * its bin by the caller); the tail goes back to a bin.  Two nodes
 * reserved (the tail and its companion).
 */
static void grant(mc_alloc_t *a, uint32_t idx, uint64_t size, mc_alloc_block_t *block_p)
{
    node_t *n;
    if (node_size(a, idx) > size) {
        uint32_t t = split_after(a, idx, size);
        bin_insert(a, t);
        a->free_blocks++;
    }
    n = &a->nodes[idx];
    a->free_blocks--;
    a->used_blocks++;
    a->allocated += size;

    block_p->offset = n->offset;
    block_p->size   = size;
    block_p->node   = idx;
}

mc_status_t mc_alloc_get(mc_alloc_t *alloc, uint64_t size, mc_alloc_block_t *block_p)
{
    if ((alloc == NULL) || (block_p == NULL) || (size == 0))
        return MC_INVALID_PARAMS;

    uint64_t want = round_request(alloc, size);
    if (want == 0)
        return MC_NO_AVAILABLE_HANDLE;

    uint32_t idx = NIL;
    uint32_t b   = bin_find(alloc, bin_ceil(want >> alloc->shift));
    if (b != NIL)
        idx = alloc->bin_head[b];
    else
        idx = find_in_own_bin(alloc, want);
    if (idx == NIL)
        return MC_NO_AVAILABLE_HANDLE;

    /* reserve the split's node and its companion before anything changes
     * (the companion that bin_remove gives back may be one of them) */
    if ((node_size(alloc, idx) > want) && (pool_reserve(alloc, 2) != 0)) {
        mc_set_error_detail("out of memory growing the allocator node pool");
        return MC_INTERNAL_ERROR;
    }
    bin_remove(alloc, idx);
    grant(alloc, idx, want, block_p);
    return MC_OK;
}

mc_status_t mc_alloc_put(mc_alloc_t *alloc, const mc_alloc_block_t *block)
{
    if ((alloc == NULL) || (block == NULL) || (block->node >= alloc->nodes_init))
        return MC_INVALID_PARAMS;
    uint32_t idx = block->node;
    node_t *n    = &alloc->nodes[idx];
    uint64_t size;
    if ((node_state(n) != NODE_USED) || (n->offset != block->offset) ||
        ((size = node_size(alloc, idx)) != block->size)) {
        mc_set_error_detail("freeing a block that is not granted (offset %llu size %llu)",
                            (unsigned long long)block->offset,
                            (unsigned long long)block->size);
        return MC_INVALID_PARAMS;
    }

    uint32_t prev = phys_prev(alloc, idx);
    int prev_free = (prev != NIL) && (node_state(&alloc->nodes[prev]) == NODE_FREE);
    uint32_t next0 = n->phys_next;
    int next_free = (next0 != NIL) && (node_state(&alloc->nodes[next0]) == NODE_FREE);
    /* a block that merges with no neighbour needs a companion of its own;
     * a merge gives one back first */
    if (!prev_free && !next_free && (pool_reserve(alloc, 1) != 0)) {
        mc_set_error_detail("out of memory growing the allocator node pool");
        return MC_INTERNAL_ERROR;
    }

    alloc->allocated -= size;
    alloc->used_blocks--;
    alloc->free_blocks++;
    /* free from here on, in no bin yet */

    if (prev_free) {
        /* absorb ourselves into the predecessor */
        bin_remove(alloc, prev);
        absorb_next(alloc, prev);
        idx = prev;
    }
    if (next_free) {
        bin_remove(alloc, next0);
        absorb_next(alloc, idx);
    }
    bin_insert(alloc, idx);
    return MC_OK;
}

mc_status_t mc_alloc_lookup(const mc_alloc_t *alloc, uint32_t node, mc_alloc_block_t *block_p)
{
    if ((alloc == NULL) || (block_p == NULL) || (node >= alloc->nodes_init) ||
        (node_state(&alloc->nodes[node]) != NODE_USED))
        return MC_INVALID_PARAMS;
    block_p->offset = alloc->nodes[node].offset;
    block_p->size   = node_size(alloc, node);
    block_p->node   = node;
    return MC_OK;
}

uint64_t mc_alloc_offset(const mc_alloc_t *alloc, uint32_t node)
{
    if ((alloc == NULL) || (node >= alloc->nodes_init) ||
        (node_state(&alloc->nodes[node]) != NODE_USED))
        return UINT64_MAX;
    return alloc->nodes[node].offset;
}

/* ---- introspection ------------------------------------------------------- */

void mc_alloc_get_stats(const mc_alloc_t *alloc, mc_alloc_stats_t *stats)
{
    memset(stats, 0, sizeof(*stats));
    if (alloc == NULL)
        return;
    stats->capacity    = alloc->capacity;
    stats->allocated   = alloc->allocated;
    stats->free_blocks = alloc->free_blocks;
    stats->used_blocks = alloc->used_blocks;
    if (alloc->top_bits == 0)
        return;

    unsigned level = 63u - (unsigned)__builtin_clzll(alloc->top_bits);
    unsigned b     = (level << 3) + (31u - (unsigned)__builtin_clz(alloc->sub_bits[level]));
    const bin_cache_t *c = &alloc->bin_cache[b];
    if (c->valid) {
        stats->largest_free = c->max;
        return;
    }
    for (uint32_t i = alloc->bin_head[b]; i != NIL; i = free_next(alloc, i)) {
        if (node_size(alloc, i) > stats->largest_free)
            stats->largest_free = node_size(alloc, i);
    }
}

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            mc_error("allocator invariant: " __VA_ARGS__); \
            return __LINE__;                            \
        }                                               \
    } while (0)

int mc_alloc_check(const mc_alloc_t *a)
{
    uint64_t end = 0, allocated = 0;
    uint32_t nfree = 0, nused = 0, steps = 0;
    uint32_t prev = NIL;

    CHECK(a != NULL, "no allocator");
    CHECK((a->capacity != 0) && ((a->capacity & (a->alignment - 1)) == 0),
          "capacity %llu is not a positive multiple of the alignment",
          (unsigned long long)a->capacity);
    CHECK(a->nodes_init <= a->nodes_cap, "node pool overrun");

    /* the physical chain tiles [0, capacity) in order */
    for (uint32_t i = a->phys_head; i != NIL; i = phys_next(a, i)) {
        CHECK(i < a->nodes_init, "physical link %u out of range", i);
        CHECK(++steps <= a->nodes_init, "physical chain has a cycle");
        const node_t *n = &a->nodes[i];
        if (node_state(n) == NODE_FREE) {
            CHECK(n->phys_next < a->nodes_init, "companion link %u out of range", n->phys_next);
            CHECK(node_state(&a->nodes[n->phys_next]) == NODE_COMP,
                  "free node %u has no companion", i);
        }
        uint32_t next = phys_next(a, i);
        CHECK(phys_prev(a, i) == prev, "node %u has a wrong predecessor", i);
        CHECK(n->offset == end, "node %u starts at %llu, not %llu", i,
              (unsigned long long)n->offset, (unsigned long long)end);
        CHECK((next == NIL) || (next < a->nodes_init), "physical link %u out of range", next);
        CHECK((next == NIL) || (a->nodes[next].offset > n->offset),
              "node %u is followed by a block that does not start after it", i);
        uint64_t size = node_size(a, i);
        CHECK((size != 0) && ((size & (a->alignment - 1)) == 0),
              "node %u has bad size %llu", i, (unsigned long long)size);
        CHECK(size <= a->capacity - end, "node %u runs past the end", i);
        if (node_state(n) == NODE_FREE) {
            CHECK((prev == NIL) || (node_state(&a->nodes[prev]) != NODE_FREE),
                  "free nodes %u and %u are adjacent", prev, i);
            nfree++;
        } else {
            CHECK(node_state(n) == NODE_USED, "node %u in the chain is unused", i);
            nused++;
            allocated += size;
        }
        end += size;
        prev = i;
    }
    CHECK(end == a->capacity, "blocks cover %llu of %llu bytes", (unsigned long long)end,
          (unsigned long long)a->capacity);
    CHECK(nfree == a->free_blocks, "free_blocks %u but %u free nodes", a->free_blocks, nfree);
    CHECK(nused == a->used_blocks, "used_blocks %u but %u used nodes", a->used_blocks, nused);
    CHECK(allocated == a->allocated, "allocated counter is off");

    /* bins hold exactly the free nodes, each in the bin of its size */
    uint32_t binned = 0;
    for (unsigned b = 0; b < NUM_BINS; b++) {
        int bit = (a->sub_bits[b >> 3] >> (b & 7u)) & 1;
        CHECK(bit == (a->bin_head[b] != NIL), "bitmap disagrees with bin %u", b);
        uint32_t bprev = NIL, count_max = 0;
        uint64_t max = 0;
        for (uint32_t i = a->bin_head[b]; i != NIL; i = free_next(a, i)) {
            CHECK(i < a->nodes_init, "bin link %u out of range", i);
            CHECK(++binned <= nfree, "bins hold more nodes than are free");
            const node_t *n = &a->nodes[i];
            CHECK(node_state(n) == NODE_FREE, "node %u in bin %u is not free", i, b);
            CHECK(free_prev(a, i) == bprev, "node %u has a wrong bin predecessor", i);
            uint64_t size = node_size(a, i);
            CHECK(node_bin(a, i) == b, "node %u of size %llu is in bin %u", i,
                  (unsigned long long)size, b);
            if (size > max) {
                max       = size;
                count_max = 1;
            } else if (size == max) {
                count_max++;
            }
            bprev = i;
        }
        const bin_cache_t *c = &a->bin_cache[b];
        CHECK(!c->valid || ((c->max == max) && (c->count == count_max)),
              "bin %u caches a largest block it does not have", b);
    }
    CHECK(binned == nfree, "%u free nodes but %u in bins", nfree, binned);
    for (unsigned l = 0; l < LEVELS; l++)
        CHECK((int)((a->top_bits >> l) & 1) == (a->sub_bits[l] != 0),
              "top bitmap disagrees with level %u", l);
    CHECK((a->top_bits >> LEVELS) == 0, "top bitmap has bits past the last level");

    /* every other initialised node is in the pool */
    uint32_t pooled = 0;
    for (uint32_t i = a->pool_head; i != NIL; i = a->nodes[i].phys_next) {
        CHECK(i < a->nodes_init, "pool link %u out of range", i);
        CHECK(++pooled <= a->nodes_init, "node pool has a cycle");
        CHECK(node_state(&a->nodes[i]) == NODE_UNUSED, "pooled node %u is in use", i);
    }
    CHECK(pooled == a->pool_count, "pool count is off");
    /* each free block has one companion */
    CHECK(pooled + 2 * nfree + nused == a->nodes_init, "%u nodes are lost",
          a->nodes_init - pooled - 2 * nfree - nused);
    return 0;
}

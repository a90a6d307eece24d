/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Extent allocator of the DFS tier's shards (dfs_alloc.h).  Each shard
 * keeps its free extents in an array sorted by offset; take() is first
 * fit, give() inserts and merges with its neighbours (binary search), so
 * the array holds at most one more entry than the shard has live
 * extents.  DFS replicas are large and few next to memory objects, so a
 * linear first-fit scan costs less than the file write it precedes.
 *
 * Owns: the extent allocator of the DFS shards.
 * May call: dfs_alloc.h only: no master type, so the unit tests build it
 *   alone.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dfs_alloc.h"

static uint64_t round_up(uint64_t len, uint32_t align)
{
    if (len > UINT64_MAX - align)
        return 0;
    return (len + align - 1) & ~((uint64_t)align - 1);
}

/* Make room for one more free extent in @p s. */
static int shard_grow(mc_dfs_shard_t *s)
{
    mc_dfs_extent_t *v;
    uint32_t nc;

    if (s->nfree < s->cap)
        return 0;
    nc = s->cap ? s->cap * 2 : 8;
    v  = realloc(s->free, nc * sizeof(*v));
    if (v == NULL)
        return -1;
    s->free = v;
    s->cap  = nc;
    return 0;
}

static void shard_insert_at(mc_dfs_shard_t *s, uint32_t i, uint64_t off, uint64_t len)
{
    memmove(&s->free[i + 1], &s->free[i], (s->nfree - i) * sizeof(s->free[0]));
    s->free[i].off = off;
    s->free[i].len = len;
    s->nfree++;
}

static void shard_remove_at(mc_dfs_shard_t *s, uint32_t i)
{
    memmove(&s->free[i], &s->free[i + 1], (s->nfree - i - 1) * sizeof(s->free[0]));
    s->nfree--;
}

/* Index of the first free extent whose offset is > @p off. */
static uint32_t shard_upper(const mc_dfs_shard_t *s, uint64_t off)
{
    uint32_t lo = 0, hi = s->nfree;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->free[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int mc_dfs_alloc_init(mc_dfs_alloc_t *a, uint32_t nshards, uint64_t capacity, uint32_t alignment)
{
    memset(a, 0, sizeof(*a));
    if ((nshards == 0) || (alignment == 0) || ((alignment & (alignment - 1)) != 0) ||
        (capacity < alignment) || (capacity % alignment != 0))
        return -1;
    a->shards = calloc(nshards, sizeof(*a->shards));
    if (a->shards == NULL)
        return -1;
    a->nshards   = nshards;
    a->alignment = alignment;
    a->capacity  = capacity;
    for (uint32_t i = 0; i < nshards; i++) {
        if (shard_grow(&a->shards[i]) != 0) {
            mc_dfs_alloc_cleanup(a);
            return -1;
        }
        shard_insert_at(&a->shards[i], 0, 0, capacity);
    }
    return 0;
}

void mc_dfs_alloc_cleanup(mc_dfs_alloc_t *a)
{
    if (a->shards != NULL) {
        for (uint32_t i = 0; i < a->nshards; i++)
            free(a->shards[i].free);
    }
    free(a->shards);
    memset(a, 0, sizeof(*a));
}

int mc_dfs_alloc_take(mc_dfs_alloc_t *a, uint64_t len, uint32_t *shard_p, uint64_t *off_p)
{
    len = round_up(len, a->alignment);
    if ((len == 0) || (len > a->capacity))
        return -1;
    for (uint32_t k = 0; k < a->nshards; k++) {
        uint32_t si       = (a->next + k) % a->nshards;
        mc_dfs_shard_t *s = &a->shards[si];
        for (uint32_t i = 0; i < s->nfree; i++) {
            mc_dfs_extent_t *e = &s->free[i];
            if (e->len < len)
                continue;
            *shard_p = si;
            *off_p   = e->off;
            e->off += len;
            e->len -= len;
            if (e->len == 0)
                shard_remove_at(s, i);
            a->used += len;
            a->next = (si + 1) % a->nshards;
            return 0;
        }
    }
    return -1;
}

int mc_dfs_alloc_reserve(mc_dfs_alloc_t *a, uint32_t shard, uint64_t off, uint64_t len)
{
    mc_dfs_shard_t *s;
    mc_dfs_extent_t *e;
    uint32_t i;
    uint64_t tail;

    len = round_up(len, a->alignment);
    if ((shard >= a->nshards) || (len == 0) || (off % a->alignment != 0) ||
        (off > a->capacity) || (len > a->capacity - off))
        return -1;
    s = &a->shards[shard];
    i = shard_upper(s, off);
    if (i == 0)
        return -1;
    e = &s->free[i - 1]; /* the last extent starting at or before off */
    if ((off - e->off > e->len) || (len > e->len - (off - e->off)))
        return -1;
    tail = (e->off + e->len) - (off + len);
    if (off == e->off) {
        e->off += len;
        e->len -= len;
        if (e->len == 0)
            shard_remove_at(s, i - 1);
    } else if (tail == 0) {
        e->len -= len;
    } else {
        if (shard_grow(s) != 0)
            return -1;
        e      = &s->free[i - 1];
        e->len = off - e->off;
        shard_insert_at(s, i, off + len, tail);
    }
    a->used += len;
    return 0;
}

void mc_dfs_alloc_give(mc_dfs_alloc_t *a, uint32_t shard, uint64_t off, uint64_t len)
{
    mc_dfs_shard_t *s;
    uint32_t i;
    int prev, next;

    len = round_up(len, a->alignment);
    if ((shard >= a->nshards) || (len == 0))
        return;
    s    = &a->shards[shard];
    i    = shard_upper(s, off);
    prev = (i > 0) && (s->free[i - 1].off + s->free[i - 1].len == off);
    next = (i < s->nfree) && (off + len == s->free[i].off);
    a->used -= (len <= a->used) ? len : a->used;
    if (prev && next) {
        s->free[i - 1].len += len + s->free[i].len;
        shard_remove_at(s, i);
    } else if (prev) {
        s->free[i - 1].len += len;
    } else if (next) {
        s->free[i].off = off;
        s->free[i].len += len;
    } else if (shard_grow(s) == 0) {
        shard_insert_at(s, i, off, len);
    }
    /* else OOM: the extent is lost until the master restarts (logged by
     * nobody: the caller cannot do better) */
}

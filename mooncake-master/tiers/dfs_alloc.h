/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Space in the DFS tier's shard files (docs/tiers.md §6): one extent
 * allocator per shard, in the master.  A shard is an address space of
 * `capacity` bytes; a DFS replica takes one extent, a multiple of the
 * alignment, at an aligned offset.  Free extents are kept sorted by
 * offset and coalesced, so a shard never fragments past what its live
 * extents force.  Allocation takes the first extent that fits, starting
 * at the shard after the last one used (writes spread over the shards).
 *
 * No I/O: the master only does the bookkeeping; writers and readers open
 * the files.  Stand-alone (no master state) so the unit tests drive it.
 *
 * Owns: the extent allocator's interface (tiers/).
 * May call: nothing.
 */
#ifndef MC_MASTER_DFS_ALLOC_H
#define MC_MASTER_DFS_ALLOC_H

#include <stdint.h>

typedef struct mc_dfs_extent {
    uint64_t off;
    uint64_t len;
} mc_dfs_extent_t;

typedef struct mc_dfs_shard {
    mc_dfs_extent_t *free;   /* sorted by off, never adjacent */
    uint32_t nfree;
    uint32_t cap;
} mc_dfs_shard_t;

typedef struct mc_dfs_alloc {
    mc_dfs_shard_t *shards;
    uint32_t nshards;
    uint32_t next;           /* shard the next allocation tries first */
    uint32_t alignment;
    uint64_t capacity;       /* per shard */
    uint64_t used;           /* bytes in live extents, all shards */
} mc_dfs_alloc_t;

/* 0, or -1 on OOM / a bad layout (alignment not a power of two, capacity
 * not a multiple of it, no shards). */
int mc_dfs_alloc_init(mc_dfs_alloc_t *a, uint32_t nshards, uint64_t capacity, uint32_t alignment);
void mc_dfs_alloc_cleanup(mc_dfs_alloc_t *a);

/* An extent of @p len bytes (rounded up to the alignment): 0 and
 * *shard_p and *off_p, or -1 when no shard has room (or OOM). */
int mc_dfs_alloc_take(mc_dfs_alloc_t *a, uint64_t len, uint32_t *shard_p, uint64_t *off_p);

/* Take exactly [off, off+len) of @p shard (restore): 0, or -1 when that
 * range is not wholly free or not aligned. */
int mc_dfs_alloc_reserve(mc_dfs_alloc_t *a, uint32_t shard, uint64_t off, uint64_t len);

/* Give back an extent of take() or reserve(). */
void mc_dfs_alloc_give(mc_dfs_alloc_t *a, uint32_t shard, uint64_t off, uint64_t len);

/* Bytes of all shards. */
static inline uint64_t mc_dfs_alloc_capacity(const mc_dfs_alloc_t *a)
{
    return a->capacity * a->nshards;
}

#endif /* MC_MASTER_DFS_ALLOC_H */

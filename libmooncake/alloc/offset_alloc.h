/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Offset allocator: hands out [offset, offset+size) ranges of an abstract
 * space of `capacity` bytes (a mounted segment on the master, the local
 * staging buffer on a client).  It never touches the memory it manages;
 * block bookkeeping lives in a node pool of its own.
 *
 * Allocation and free are O(1): free blocks sit in size bins indexed by a
 * two-level bitmap (TLSF-style "small float" bins: 8 sub-bins per power of
 * two), and a freed block coalesces with free physical neighbours at once,
 * so freeing everything leaves exactly one free block.
 *
 * Not thread-safe: callers serialise (the master is single-threaded; a
 * client wraps its local buffer allocator in a mutex).
 */
#ifndef MC_ALLOC_OFFSET_ALLOC_H
#define MC_ALLOC_OFFSET_ALLOC_H

#include <stdint.h>

#include <mooncake/status.h>

typedef struct mc_alloc mc_alloc_t;

/* A granted range; `node` identifies it for mc_alloc_put(). */
typedef struct mc_alloc_block {
    uint64_t offset;
    uint64_t size;  /* as granted (request rounded up to the alignment) */
    uint32_t node;
} mc_alloc_block_t;

typedef struct mc_alloc_stats {
    uint64_t capacity;
    uint64_t allocated;      /* bytes in granted blocks */
    uint64_t largest_free;   /* largest single free block */
    uint32_t free_blocks;
    uint32_t used_blocks;
} mc_alloc_stats_t;

/*
 * @param capacity   bytes managed, > 0; rounded down to a multiple of the
 *                   alignment (the tail cannot hold an aligned block), and
 *                   stats report the rounded value.
 * @param alignment  power of two >= 1; every offset and size is a multiple.
 * @return MC_INVALID_PARAMS (also when capacity < alignment) or
 *         MC_INTERNAL_ERROR (out of memory).
 */
mc_status_t mc_alloc_create(uint64_t capacity, uint64_t alignment, mc_alloc_t **alloc_p);
void mc_alloc_destroy(mc_alloc_t *alloc);

/* MC_NO_AVAILABLE_HANDLE when no free block fits; MC_INVALID_PARAMS for 0;
 * MC_INTERNAL_ERROR when the node pool cannot grow (nothing changes). */
mc_status_t mc_alloc_get(mc_alloc_t *alloc, uint64_t size, mc_alloc_block_t *block_p);

/* Free a block from mc_alloc_get().  MC_INVALID_PARAMS (and nothing
 * changes) when the block is not currently granted (double free, forged). */
mc_status_t mc_alloc_put(mc_alloc_t *alloc, const mc_alloc_block_t *block);

/* The block granted under node index @p node (a handle's `node`), so a
 * caller that keeps many blocks may store only that 32-bit index and
 * rebuild the handle.  MC_INVALID_PARAMS when the node is not a granted
 * block (never granted, or freed since). */
mc_status_t mc_alloc_lookup(const mc_alloc_t *alloc, uint32_t node, mc_alloc_block_t *block_p);
/* Just the offset of that block (one node read where the size needs two);
 * UINT64_MAX when the node is not a granted block. */
uint64_t mc_alloc_offset(const mc_alloc_t *alloc, uint32_t node);

void mc_alloc_get_stats(const mc_alloc_t *alloc, mc_alloc_stats_t *stats);

/* Walk every structure and check the invariants (blocks tile the space in
 * order, no two adjacent free blocks, bins and bitmaps agree, counters
 * match).  0 when consistent, otherwise a positive code naming the
 * violated check (logged with mc_error); used by the unit tests. */
int mc_alloc_check(const mc_alloc_t *alloc);

#endif /* MC_ALLOC_OFFSET_ALLOC_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DFS tier's layout (docs/tiers.md §6), shared by the master, which
 * places DFS replicas, and the clients, which write and read them: a root
 * directory on a file system every host mounts at the same path, and
 * shard_count shard files in it, each an address space of shard_capacity
 * bytes handed out in multiples of alignment.
 *
 * Master and clients must agree on all four: the master announces its
 * layout in the HELLO answer and a client refuses to start on a
 * mismatch.
 */
#ifndef MC_COMMON_DFS_LAYOUT_H
#define MC_COMMON_DFS_LAYOUT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

#define MC_DFS_DEFAULT_SHARD_COUNT    8u
#define MC_DFS_DEFAULT_SHARD_CAPACITY (64ull << 30) /* 64 GiB, sparse */
#define MC_DFS_DEFAULT_ALIGNMENT      4096u
#define MC_DFS_MAX_SHARD_COUNT        4096u
#define MC_DFS_MAX_ALIGNMENT          (1u << 20)
#define MC_DFS_MAX_SHARD_CAPACITY     (1ull << 50)
/* bytes of the record header before the key (the SSD tier's record) */
#define MC_DFS_RECORD_HDR             24u

typedef struct mc_dfs_layout {
    char root[PATH_MAX];     /* absolute, no trailing '/'; "" = no DFS tier */
    uint32_t shard_count;
    uint64_t shard_capacity;
    uint32_t alignment;      /* a power of two */
} mc_dfs_layout_t;

/*
 * Fill @p out from @p root and the environment (MOONCAKE_DFS_SHARD_COUNT,
 * MOONCAKE_DFS_SHARD_CAPACITY, MOONCAKE_DFS_ALIGNMENT; defaults above).
 * @p root must be an absolute path without "..", naming an existing
 * directory.  MC_INVALID_PARAMS with the detail naming what is wrong
 * (@p what names the setting @p root came from).
 */
mc_status_t mc_dfs_layout_init(mc_dfs_layout_t *out, const char *root, const char *what);

/* Name of shard @p idx, relative to the root ("mooncake-dfs-00003.shard"). */
void mc_dfs_shard_name(uint32_t idx, char *out, size_t cap);

/* Bytes a record of a @p klen-byte key and a @p vlen-byte value takes in
 * a shard: header, key, value, rounded up to @p alignment; 0 when that
 * overflows. */
uint64_t mc_dfs_record_span(uint64_t klen, uint64_t vlen, uint32_t alignment);

#endif /* MC_COMMON_DFS_LAYOUT_H */

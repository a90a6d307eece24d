/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DFS replicas in the master (dfs.c, docs/tiers.md §6).
 *
 * With --root_fs_dir the master places, besides the memory replicas of a
 * write that asks for dfs_replica_num=1, one record in a shard file of
 * the shared root: it picks the shard and the aligned offset (an extent
 * allocator per shard, dfs_alloc.h) and hands them out; the writer
 * writes the record (header with the value's CRC32C, key, value) there,
 * and any client that mounts the root reads it back.  A DFS replica
 * belongs to its object, not to a client: holders dying or eviction take
 * only memory, and the object stays readable from the file.  Its extent
 * is given back when the object goes or its value is replaced.
 *
 * Owns: the DFS tier's interface and mc_master_dfs_t (tiers/).
 * May call: nothing.
 */
#ifndef MC_MASTER_DFS_H
#define MC_MASTER_DFS_H

#include <stdint.h>

#include "common/buf.h"
#include "common/dfs_layout.h"
#include "dfs_alloc.h"
#include "wire/wire.h"

struct mc_master;
struct mc_req_ctx;

/* One DFS replica: the extent of its record in a shard file. */
typedef struct mc_dfs_replica {
    uint64_t id;             /* from the replica id counter */
    uint64_t offset;         /* of the record in the shard */
    uint64_t span;           /* bytes reserved (aligned) */
    uint32_t shard;
    uint32_t replica_num;    /* memory replicas the write asked for (topology) */
    uint8_t status;          /* MC_REPLICA_PROCESSING or MC_REPLICA_COMPLETE */
    /* deferred (mc_master_dfs_defer): on the tier's list until then */
    uint64_t release_ms;
    uint64_t size;
    struct mc_dfs_replica *next;
} mc_dfs_replica_t;

/* The DFS tier of a master (m->dfs), NULL without --root_fs_dir. */
typedef struct mc_master_dfs {
    mc_dfs_layout_t layout;
    mc_dfs_alloc_t alloc;
    uint64_t replicas;       /* DFS replicas now */
    uint64_t bytes;          /* their value bytes */
    uint64_t writes;         /* DFS replicas placed, ever */
    uint64_t alloc_failures; /* writes refused for want of room */
    mc_dfs_replica_t *deferred; /* extents a stale writer may still write */
} mc_master_dfs_t;

/* Set up m->dfs from --root_fs_dir and the MOONCAKE_DFS_* variables;
 * nothing without it.  MC_INVALID_PARAMS (logged) on a bad layout. */
int32_t mc_master_dfs_init(struct mc_master *m);
void mc_master_dfs_cleanup(struct mc_master *m);

/* What a ReplicateConfig asking for DFS replicas must satisfy: 0 or 1 of
 * them, replica_num >= 1, the default tenant (INVALID_PARAMS), a master
 * with a DFS tier (NOT_SUPPORTED).  MC_OK when none is asked. */
int32_t mc_master_dfs_config_check(const struct mc_master *m, mc_str_t tenant,
                                   const mc_wire_config_t *c);

/* A new PROCESSING DFS replica for a @p klen-byte key and a @p size-byte
 * value; NULL when no shard has room (*st_p NO_AVAILABLE_HANDLE) or OOM. */
mc_dfs_replica_t *mc_master_dfs_new(struct mc_master *m, uint32_t klen, uint64_t size,
                                    uint32_t replica_num, int32_t *st_p);
/* The replica of a restored object (snapshot.c): its extent taken back
 * exactly; NULL when the master has no DFS tier, the extent is out of
 * its layout or taken already. */
mc_dfs_replica_t *mc_master_dfs_restore(struct mc_master *m, uint32_t shard, uint64_t offset,
                                        uint64_t span, uint32_t replica_num, uint64_t size);
/* Give back the extent of @p d (a @p size-byte value) and free it; NULL
 * is fine. */
void mc_master_dfs_free(struct mc_master *m, mc_dfs_replica_t *d, uint64_t size);
/* Give back the extent of @p d at @p release_ms, not before: the writer
 * of a preempted put may still be writing there (objects.c mc_idx_obj_discard). */
void mc_master_dfs_defer(struct mc_master *m, mc_dfs_replica_t *d, uint64_t size,
                         uint64_t release_ms);
/* Give back the deferred extents whose time came (the objects' tick). */
void mc_master_dfs_tick(struct mc_master *m, uint64_t now_ms);

/* Wire form (type DFS) of @p d, a @p size-byte value; the shard name is
 * arena storage of @p x. */
void mc_master_dfs_to_wire(struct mc_req_ctx *x, mc_wire_replica_t *w, const mc_dfs_replica_t *d,
                           uint64_t size);
#endif /* MC_MASTER_DFS_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tiers/: the door of the master's storage tiers below memory
 * (docs/tiers.md).  Other folders include this header and no other file
 * of tiers/ (master.h alone includes dfs.h, for the handle it holds).
 *
 * Owns: the DFS tier (dfs.c, --root_fs_dir: files on a shared file
 * system, extents from dfs_alloc.c) and the NoF pool (nof.c: NVMe-oF
 * segments, their placement and eviction).  The disk tier's offload
 * bookkeeping (OFFLOAD_REPORT, disk replicas) lives with the objects in
 * index/offload.c.
 *
 * May call: ../master.h, index/ (segments, objects, the LRU), admin/ (the
 * Prometheus metric helper), libmooncake's common/, alloc/ and wire/.
 * Called by: rpc.c (NoF opcodes), index/ (placement, eviction, replica
 * release), events/ (is a replica in memory), admin/ (metrics) and
 * master.c.
 */
#ifndef MC_MASTER_TIERS_H
#define MC_MASTER_TIERS_H

#include <stdint.h>

#include "master.h"

#include "dfs.h"

/* ---- nof.c: the NoF pool (docs/tiers.md §8, docs/protocol.md §5.17) ----- */

int32_t mc_master_mount_nof_segment(mc_req_ctx_t *x, const mc_wire_mount_nof_segment_req_t *req);
int32_t mc_master_remount_nof_segments(mc_req_ctx_t *x,
                                       const mc_wire_remount_nof_segments_req_t *req);
int32_t mc_master_unmount_nof_segment(mc_req_ctx_t *x,
                                      const mc_wire_unmount_nof_segment_req_t *req);
int32_t mc_master_get_all_nof_segments(mc_req_ctx_t *x,
                                       const mc_wire_get_all_nof_segments_req_t *req,
                                       mc_wire_get_all_nof_segments_resp_t *resp);
int32_t mc_master_get_nof_segments_by_name(mc_req_ctx_t *x,
                                           const mc_wire_get_nof_segments_by_name_req_t *req,
                                           mc_wire_get_nof_segments_by_name_resp_t *resp);
/* Unmount NoF segment @p seg (its replicas dropped) and free it. */
void mc_master_nof_unmount(mc_master_t *m, mc_segment_t *seg);
/* Free every NoF segment (teardown, objects already gone). */
void mc_master_nof_cleanup(mc_master_t *m);
/* Allocate up to cfg->nof_replica_num replicas of @p size bytes on
 * distinct NoF segments (cfg->preferred_nof_segments first) into @p out,
 * evicting from the pool (never @p keep) when nothing fits; returns how
 * many were placed. */
uint32_t mc_master_nof_place(mc_master_t *m, uint64_t now_ms, uint64_t size,
                             const mc_wire_config_t *cfg, const mc_object_t *keep,
                             mc_replica_t **out);
/* A NoF replica's block @p b was given back to its allocator. */
void mc_master_nof_release(mc_master_t *m, mc_alloc_block_t b);
/* Memory eviction of @p o when it has a NoF replica: its memory replicas
 * go, it stays (off the LRU); returns 1 then, 0 when @p o has no NoF or
 * no memory replica (nothing done). */
int mc_master_nof_drop_memory(mc_master_t *m, mc_object_t *o);
/* Drop NoF replicas of evictable objects other than @p keep until
 * @p target bytes are freed; returns the bytes freed. */
uint64_t mc_master_nof_evict(mc_master_t *m, uint64_t now_ms, uint64_t target,
                             const mc_object_t *keep);
/* Background pass above --nof_eviction_high_watermark_ratio. */
void mc_master_nof_evict_tick(mc_master_t *m, uint64_t now_ms);
/* master_nof_* and per-NoF-segment Prometheus metrics. */
void mc_master_nof_metrics(mc_master_t *m, struct evbuffer *b);

#endif /* MC_MASTER_TIERS_H */

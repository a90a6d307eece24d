/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index/: the door of the master's index.  Other folders include this
 * header and no other file of index/.
 *
 * Owns: the objects and their replicas (objects.c: the index, the records
 * and their life; writes.c: puts, upserts, reservations; queries.c: gets;
 * removes.c: removes; offload.c: the disk-tier bookkeeping of
 * OFFLOAD_REPORT; their shared helpers in objects_internal.h, which no
 * other folder includes),
 * the segments and placement onto them (segments.c, placement.h), the
 * clients and their liveness (clients.c), tenants (tenants.c), the LRU
 * and eviction (evict.c), dynamic replication (dynrep.c) and the copy and
 * move tasks (tasks.c).  The records themselves (mc_object_t,
 * mc_segment_t, ...) are the master's shared types, in ../master.h.
 *
 * May call: ../master.h (the context, the shared types, and the journal
 * through which every durable change is reported), tiers/ (DFS and NoF
 * replicas), events/ (KV cache events), admin/ (clients.c deletes a gone
 * client's descriptors from the metadata store), libmooncake's common/,
 * alloc/ and wire/.  Called by: rpc.c (the handlers), master.c (init,
 * ticks, cleanup), ha/ (the index emptied on stepping down), admin/,
 * durability/ (restore) and tiers/.
 */
#ifndef MC_MASTER_INDEX_H
#define MC_MASTER_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "master.h"

/* The files of index/ that other folders call into. */
#include "dynrep.h"
#include "evict.h"
#include "placement.h"
#include "tenants.h"

/* ---- the whole index (objects.c) ------------------------------------------ */
/* Create the objects', segments', clients' and tasks' maps (at start). */
mc_status_t mc_master_index_init(mc_master_t *m);
/* Free all of them (at exit), each only if it was created. */
void mc_master_index_cleanup(mc_master_t *m);
/* Forget every client, segment, object and task, as a master that has
 * just started knows none (ha/, after stepping down as leader). */
void mc_master_index_reset(mc_master_t *m);

/* ---- objects.c, writes.c, queries.c, removes.c, offload.c (§5.5-§5.15) --- */
mc_status_t mc_master_objects_init(mc_master_t *m);
void mc_master_objects_cleanup(mc_master_t *m);
/* Periodic work: release discarded replicas, erase abandoned puts. */
void mc_master_objects_tick(mc_master_t *m, uint64_t now_ms);
/* Drop one replica whose segment goes away; an object left with none is
 * erased. */
void mc_master_replica_drop(mc_master_t *m, mc_replica_t *r);
/* Chooses a replica (1) for mc_master_object_drop_where(). */
typedef int (*mc_master_replica_pick_func_t)(const mc_replica_t *r, const void *arg);
/* mc_master_replica_drop() on the memory replicas of @p o that @p pick
 * chooses; returns how many.  Dropping the last one may erase @p o. */
size_t mc_master_object_drop_where(mc_master_t *m, mc_object_t *o,
                                   mc_master_replica_pick_func_t pick, const void *arg);
/* Drop every replica on @p seg (objects', fresh upserts', discarded ones)
 * with mc_master_replica_drop(): a walk of the whole index.  Returns how
 * many went. */
size_t mc_master_objects_drop_segment(mc_master_t *m, const mc_segment_t *seg);
/* Free every put reservation of @p owner (any tenant): CLIENT_CLOSE. */
void mc_master_reservations_drop_owner(mc_master_t *m, mc_uuid_t owner);

int32_t mc_master_put_start(mc_req_ctx_t *x, const mc_wire_put_start_req_t *req,
                            mc_wire_put_start_resp_t *resp);
int32_t mc_master_put_end(mc_req_ctx_t *x, const mc_wire_put_end_req_t *req);
int32_t mc_master_put_reserve(mc_req_ctx_t *x, const mc_wire_put_reserve_req_t *req,
                              mc_wire_put_reserve_resp_t *resp);
int32_t mc_master_put_commit(mc_req_ctx_t *x, const mc_wire_put_commit_req_t *req,
                             mc_wire_put_commit_resp_t *resp);
int32_t mc_master_put_revoke(mc_req_ctx_t *x, const mc_wire_put_revoke_req_t *req);
int32_t mc_master_get_replica_list(mc_req_ctx_t *x, const mc_wire_get_replica_list_req_t *req,
                                   mc_wire_get_replica_list_resp_t *resp);
int32_t mc_master_exist_key(mc_req_ctx_t *x, const mc_wire_exist_key_req_t *req,
                            mc_wire_exist_key_resp_t *resp);
int32_t mc_master_remove(mc_req_ctx_t *x, const mc_wire_remove_req_t *req);
int32_t mc_master_remove_all(mc_req_ctx_t *x, const mc_wire_remove_all_req_t *req,
                             mc_wire_remove_all_resp_t *resp);
int32_t mc_master_batch_put_start(mc_req_ctx_t *x, const mc_wire_batch_put_start_req_t *req,
                                  mc_wire_batch_put_start_resp_t *resp);
int32_t mc_master_batch_put_end(mc_req_ctx_t *x, const mc_wire_batch_put_end_req_t *req,
                                mc_wire_batch_put_end_resp_t *resp);
int32_t mc_master_batch_put_revoke(mc_req_ctx_t *x, const mc_wire_batch_put_revoke_req_t *req,
                                   mc_wire_batch_put_revoke_resp_t *resp);
int32_t mc_master_batch_get_replica_list(mc_req_ctx_t *x,
                                         const mc_wire_batch_get_replica_list_req_t *req,
                                         mc_wire_batch_get_replica_list_resp_t *resp);
int32_t mc_master_batch_exist_key(mc_req_ctx_t *x, const mc_wire_batch_exist_key_req_t *req,
                                  mc_wire_batch_exist_key_resp_t *resp);
int32_t mc_master_batch_remove(mc_req_ctx_t *x, const mc_wire_batch_remove_req_t *req,
                               mc_wire_batch_remove_resp_t *resp);

/* Remove-by-regex and upsert (docs/protocol.md §5.8, §5.11). */
int32_t mc_master_upsert_start(mc_req_ctx_t *x, const mc_wire_upsert_start_req_t *req,
                               mc_wire_upsert_start_resp_t *resp);
int32_t mc_master_upsert_end(mc_req_ctx_t *x, const mc_wire_upsert_end_req_t *req);

/* Disk tier (docs/protocol.md §5.15, docs/tiers.md): a holder reports the
 * disk copy it wrote, or that copies went with a bucket.  A client's
 * disk replicas go with it (mc_master_objects_drop_holder). */
int32_t mc_master_offload_report(mc_req_ctx_t *x, const mc_wire_offload_report_req_t *req);
int32_t mc_master_disk_replica_drop(mc_req_ctx_t *x, const mc_wire_disk_replica_drop_req_t *req,
                                    mc_wire_disk_replica_drop_resp_t *resp);
size_t mc_master_objects_drop_holder(mc_master_t *m, mc_uuid_t client_id);
/* Eviction of an object with a disk replica: free its memory replicas
 * and keep it, disk-only and off the LRU; returns 1 when it did. */
int mc_master_object_drop_memory(mc_master_t *m, mc_object_t *o);
static inline int mc_master_object_has_disk(const mc_object_t *o)
{
    return (o->ext != NULL) && (o->ext->disk != NULL);
}
int32_t mc_master_upsert_revoke(mc_req_ctx_t *x, const mc_wire_upsert_revoke_req_t *req);
int32_t mc_master_batch_upsert_start(mc_req_ctx_t *x, const mc_wire_batch_upsert_start_req_t *req,
                                     mc_wire_batch_upsert_start_resp_t *resp);
int32_t mc_master_batch_upsert_end(mc_req_ctx_t *x, const mc_wire_batch_upsert_end_req_t *req,
                                   mc_wire_batch_upsert_end_resp_t *resp);
int32_t mc_master_batch_upsert_revoke(mc_req_ctx_t *x,
                                      const mc_wire_batch_upsert_revoke_req_t *req,
                                      mc_wire_batch_upsert_revoke_resp_t *resp);
/* §5.8 REMOVE_BY_REGEX runs in slices (rpc.c): _start checks and compiles
 * the pattern (INVALID_PARAMS past common/regex_limit.h), _step walks the
 * index for about @p budget_us and returns 1 once it has visited it all,
 * _finish frees the walk and returns how many objects went; _free drops
 * an unfinished walk (NULL is fine). */
typedef struct mc_regex_walk mc_regex_walk_t;
int32_t mc_master_regex_walk_start(mc_req_ctx_t *x, const mc_wire_remove_by_regex_req_t *req,
                                   mc_regex_walk_t **walk_p);
int mc_master_regex_walk_step(mc_req_ctx_t *x, mc_regex_walk_t *w, uint64_t budget_us);
int64_t mc_master_regex_walk_finish(mc_regex_walk_t *w);
void mc_master_regex_walk_free(mc_regex_walk_t *w);

/* BATCH_REPLICA_CLEAR (docs/protocol.md §5.14): the caller's own keys. */
int32_t mc_master_batch_replica_clear(mc_req_ctx_t *x,
                                      const mc_wire_batch_replica_clear_req_t *req,
                                      mc_wire_batch_replica_clear_resp_t *resp);

size_t mc_master_objects_count(const mc_master_t *m);

/* ---- segments.c (docs/protocol.md §5.3) ---------------------------------- */

mc_status_t mc_master_segments_init(mc_master_t *m);
void mc_master_segments_cleanup(mc_master_t *m);
mc_segment_t *mc_master_segment_find(mc_master_t *m, mc_uuid_t id);
/* Validate and mount one segment for @p c (idempotent for the same id). */
/* The generation of @p seg from its owner's mount @p s (segments.c). */
void mc_master_segment_take_gen(mc_segment_t *seg, const mc_wire_segment_t *s);
mc_status_t mc_master_segment_mount(mc_master_t *m, mc_client_t *c, const mc_wire_segment_t *s);
/* Check a segment description without mounting it. */
mc_status_t mc_master_segment_check(mc_master_t *m, mc_client_t *c, const mc_wire_segment_t *s);
/* Drop every replica on @p seg (objects left empty are erased), destroy
 * its allocator and forget it. */
void mc_master_segment_unmount(mc_master_t *m, mc_segment_t *seg);

/*
 * Placement (docs/protocol.md §5.5): allocate up to @p want buffers of
 * @p size bytes on distinct segment names, the preferred one first, then
 * (when @p local is not NULL: prefer_alloc_in_same_node) the segments of
 * that client, then the others on its host, then the rest.
 * Writes the new replicas (status PROCESSING, not linked to an object) to
 * @p out and returns how many; 0 means nothing fitted.
 */
uint32_t mc_master_segments_allocate(mc_master_t *m, uint64_t size, uint32_t want,
                                     mc_str_t preferred, const mc_client_t *local,
                                     mc_replica_t **out);
/* Host part of a segment name: what precedes its last ':' (all of it
 * when there is none). */
mc_str_t mc_master_segment_host(const char *name);
/* Give a replica's range back to its segment and unlink it from the
 * segment (the caller frees the struct). */
void mc_master_segment_release(mc_master_t *m, mc_replica_t *r);
/* The range of @p r in its segment (offset, size, node). */
mc_alloc_block_t mc_master_replica_block(const mc_replica_t *r);

/* ---- clients.c (docs/protocol.md §5.2, §5.4) ------------------------------ */

mc_status_t mc_master_clients_init(mc_master_t *m);
void mc_master_clients_cleanup(mc_master_t *m);
mc_client_t *mc_master_client_find(mc_master_t *m, mc_uuid_t id);
/* Find or create; refreshes the liveness deadline.  NULL on OOM. */
mc_client_t *mc_master_client_touch(mc_master_t *m, mc_uuid_t id, uint64_t now_ms);
/* Unmount every segment of @p c and free it. */
void mc_master_client_forget(mc_master_t *m, mc_client_t *c, const char *why);
/* A client that has missed --client_suspect_heartbeats of its own
 * heartbeats (the gap between its last two pings, 1 s until it has
 * pinged twice) is suspect: placement avoids its segments. */
int mc_master_client_suspect(const mc_master_t *m, const mc_client_t *c, uint64_t now_ms);
/* Expire clients whose deadline passed; @p serving is 0 while the master
 * answers no request (ha.h), time that does not count against them. */
void mc_master_clients_tick(mc_master_t *m, uint64_t now_ms, int serving);
size_t mc_master_clients_count(const mc_master_t *m);

int32_t mc_master_ping(mc_req_ctx_t *x, const mc_wire_ping_req_t *req, mc_wire_ping_resp_t *resp);
/* Check, then mount, each of v[0..n) for client_id (MOUNT_SEGMENT,
 * REMOUNT_SEGMENTS and their NoF forms): nothing is registered when a
 * check fails.  *c_p (may be NULL) is the client on success. */
typedef mc_status_t (*mc_master_seg_fn)(mc_master_t *m, mc_client_t *c,
                                        const mc_wire_segment_t *s);
int32_t mc_master_mount_each(mc_req_ctx_t *x, mc_uuid_t client_id, const mc_wire_segment_t *v,
                             uint32_t n, mc_master_seg_fn check, mc_master_seg_fn mount,
                             mc_client_t **c_p);
int32_t mc_master_mount_segment(mc_req_ctx_t *x, const mc_wire_mount_segment_req_t *req);
int32_t mc_master_remount_segments(mc_req_ctx_t *x, const mc_wire_remount_segments_req_t *req);
int32_t mc_master_unmount_segment(mc_req_ctx_t *x, const mc_wire_unmount_segment_req_t *req);
/* SET_SEGMENT_DRAINING (segments.c): the caller's segment stops taking
 * allocations; its replicas stay readable until UNMOUNT_SEGMENT. */
int32_t mc_master_set_segment_draining(mc_req_ctx_t *x,
                                       const mc_wire_set_segment_draining_req_t *req);
int32_t mc_master_client_close(mc_req_ctx_t *x, const mc_wire_client_close_req_t *req);

/* ---- objects.c, for admin.c ------------------------------------------------ */

/* The object (tenant, key), or NULL. */
mc_object_t *mc_master_object_find(mc_master_t *m, mc_str_t tenant, mc_str_t key);

/* ---- objects.c, for evict.c ------------------------------------------------ */

/* Free every replica of @p o at once and erase it (eviction). */
void mc_master_object_erase(mc_master_t *m, mc_object_t *o);

/* ---- segments.c, for nof.c -------------------------------------------------- */

/* One allocation of @p size bytes on @p seg (memory or NoF, accounted to
 * its pool), or NULL when it does not fit or its owner is suspect
 * (segments.c). */
mc_replica_t *mc_master_segment_try(mc_master_t *m, mc_segment_t *seg, uint64_t size,
                                    uint64_t now_ms);

/* ---- tasks.c: copy and move tasks (docs/protocol.md §5.13) -------------- */

mc_status_t mc_master_tasks_init(mc_master_t *m);
void mc_master_tasks_cleanup(mc_master_t *m);
/* Pending and processing timeouts. */
void mc_master_tasks_tick(mc_master_t *m, uint64_t now_ms);
/* Fail every unfinished task assigned to a client that is going away. */
void mc_master_tasks_client_gone(mc_master_t *m, mc_uuid_t client_id);
/* Called by objects.c when an object with staged tasks is erased. */
void mc_master_tasks_object_gone(mc_master_t *m, mc_object_t *o);
/* 1 when a task is between TASK_REPLICA_START and END/REVOKE on @p o. */
static inline int mc_object_replicating(const mc_object_t *o)
{
    return (o->ext != NULL) && !mc_mlist_empty(&o->ext->tasks);
}

int32_t mc_master_create_copy_task(mc_req_ctx_t *x, const mc_wire_create_copy_task_req_t *req,
                                   mc_wire_create_copy_task_resp_t *resp);
int32_t mc_master_create_move_task(mc_req_ctx_t *x, const mc_wire_create_move_task_req_t *req,
                                   mc_wire_create_move_task_resp_t *resp);
int32_t mc_master_query_task(mc_req_ctx_t *x, const mc_wire_query_task_req_t *req,
                             mc_wire_query_task_resp_t *resp);
int32_t mc_master_fetch_tasks(mc_req_ctx_t *x, const mc_wire_fetch_tasks_req_t *req,
                              mc_wire_fetch_tasks_resp_t *resp);
int32_t mc_master_mark_task_complete(mc_req_ctx_t *x,
                                     const mc_wire_mark_task_complete_req_t *req);
int32_t mc_master_task_replica_start(mc_req_ctx_t *x, const mc_wire_task_replica_start_req_t *req,
                                     mc_wire_task_replica_start_resp_t *resp);
int32_t mc_master_task_replica_end(mc_req_ctx_t *x, const mc_wire_task_replica_end_req_t *req);
int32_t mc_master_task_replica_revoke(mc_req_ctx_t *x,
                                      const mc_wire_task_replica_revoke_req_t *req);

/* ---- objects.c and queries.c, for tasks.c ---------------------------------- */

/* The ext of @p o, allocated on first use; NULL on OOM. */
mc_object_ext_t *mc_master_object_ext(mc_object_t *o);
/* The wire form (type DISK) of disk replica @p d. */
void mc_master_disk_to_wire(mc_wire_replica_t *w, const struct mc_disk_replica *d);
/* A read of the disk-only object @p o (--promotion_on_hit, tasks.c): at
 * --promotion_admission_threshold reads, queue a copy of it back to memory
 * on its holder's segment, executed by the holder. */
void mc_master_promote_hit(mc_req_ctx_t *x, mc_object_t *o);
/* Grant the read lease of a GET on @p o (and its group). */
void mc_master_object_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms);
/* Free every replica on @p list without giving its range back (teardown:
 * the allocators go right after). */
void mc_master_replicas_forget(mc_mlist_t *list);
/* Give back the range of @p r, unlink it from its list and free it. */
void mc_master_replica_free(mc_master_t *m, mc_replica_t *r);
/* Give back and free every replica on @p list (mc_replica_t.link). */
void mc_master_replicas_free(mc_master_t *m, mc_mlist_t *list);
/* Park every replica on @p list on m->discarded until @p release_ms. */
void mc_master_replicas_defer(mc_master_t *m, mc_mlist_t *list, uint64_t release_ms);
/* Wire form of replica @p r of an object of @p size bytes. */
void mc_master_replica_to_wire(mc_wire_replica_t *w, const mc_replica_t *r, uint64_t size);
/* Drop replica @p r from its object @p o now, or when the lease of @p o
 * ends if a reader may hold it; @p o is left with its other replicas. */
void mc_master_replica_retire(mc_master_t *m, mc_object_t *o, mc_replica_t *r, uint64_t now_ms);

/* ---- segments.c, for tasks.c ------------------------------------------------ */

/* A buffer of @p size bytes on a segment named @p name that takes
 * allocations, or NULL: *found_p says whether any segment has the name. */
mc_replica_t *mc_master_segment_allocate_named(mc_master_t *m, const char *name, uint64_t size,
                                               int *found_p);
/* 1 when some mounted segment is named @p name. */
int mc_master_segment_name_exists(mc_master_t *m, mc_str_t name);

/* Hash of a UUID for the segment and client maps. */
static inline uint64_t mc_master_uuid_hash(mc_uuid_t id)
{
    uint8_t b[16];
    mc_store_le64(b, id.hi);
    mc_store_le64(b + 8, id.lo);
    return mc_hash_bytes(b, sizeof(b), 0);
}

/* ---- restore: the records of the operation log back into the index ------ */

struct mc_oplog_record; /* durability/oplog.h */
/* A complete object from an OBJ_SET record, with the @p n replicas of
 * @p reps (status COMPLETE, seg and node set, on no list); NULL on OOM
 * (the replicas are then the caller's).  (objects.c) */
mc_object_t *mc_master_object_restore(mc_master_t *m, const struct mc_oplog_record *r,
                                      mc_replica_t **reps, uint32_t n, uint64_t now_ms);
/* A segment from a SEG_MOUNT record, owned by @p c, in state
 * MC_SEG_AWAITING: no allocation, no reads, until its owner remounts it.
 * (segments.c) */
mc_segment_t *mc_master_segment_restore(mc_master_t *m, mc_client_t *c,
                                        const struct mc_oplog_record *r);
/* A task from a TASK_SET record; one that was processing comes back
 * FAILED (its executor's new buffers are gone).  0, or -1.  (tasks.c) */
int mc_master_task_restore(mc_master_t *m, const struct mc_oplog_record *r, uint64_t now_ms);

#endif /* MC_MASTER_INDEX_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index's own helpers, shared by its five files and by nothing
 * else: other folders (and the other files of index/) use the door,
 * index/index.h.
 *
 *   objects.c  the index itself: lookup, the writer and group records, an
 *              object's and a replica's life (create, park, fence, erase,
 *              settle), segment loss, the tick, leases, restore
 *   writes.c   PUT_START/END/REVOKE, UPSERT_*, PUT_RESERVE/COMMIT and their
 *              batch forms, placement of a write
 *   queries.c  GET_REPLICA_LIST, EXIST_KEY and their batch forms
 *   removes.c  REMOVE, REMOVE_ALL, REMOVE_BY_REGEX, BATCH_REPLICA_CLEAR
 *   offload.c  the disk tier's books: OFFLOAD_REPORT, DISK_REPLICA_DROP, a
 *              holder's departure
 *
 * Each helper is documented at its definition; the names are those they
 * had as static functions of one objects.c, so a caller reads the same in
 * every file.  They link only inside mooncake_master.
 *
 * Owns: the helpers' prototypes and the batch key pipe (key_pipe_t).
 * May call: nothing.
 */
#ifndef MC_MASTER_OBJECTS_INTERNAL_H
#define MC_MASTER_OBJECTS_INTERNAL_H

#include <stdint.h>

#include "index.h"
#include "master.h"

/* ---- objects.c: lookup and the batch key pipe ------------------------------- */

mc_object_t *obj_find(mc_master_t *m, mc_str_t tenant, mc_str_t key);

/*
 * A batch's keys in request order, with the index's cache misses
 * overlapped: the index of millions of objects is far larger than the
 * caches, so a lookup stalls on its bucket slot and then on the first
 * object of its chain.  pipe_init hashes every key once and starts the
 * first slots; pipe_at(i), before key i is worked on, starts the slot of
 * key i + 2 * PIPE_AHEAD and the first object of key i + PIPE_AHEAD, and
 * leaves key i's hash in m->key_memo for obj_find and obj_alloc;
 * pipe_done clears it.  Hints only: without memory for the hashes the
 * batch runs as it would without them.
 */
typedef struct key_pipe {
    mc_master_t *m;
    mc_str_t tenant;
    const mc_str_t *keys;
    uint32_t n;
    uint32_t *hash; /* NULL: no hints */
} key_pipe_t;

void pipe_init(key_pipe_t *p, mc_req_ctx_t *x, const mc_wire_str_list_t *keys);
void pipe_at(key_pipe_t *p, uint32_t i);
void pipe_done(key_pipe_t *p);

/* Arena storage for the per-key answers of a batch form; -1 on OOM. */
int i32_list(mc_req_ctx_t *x, uint32_t n, mc_wire_i32_list_t *out);
int result_list(mc_req_ctx_t *x, uint32_t n, mc_wire_result_list_t *out);

/* ---- objects.c: records ------------------------------------------------------ */

mc_writer_t *writer_get(mc_master_t *m, mc_str_t tenant, mc_uuid_t owner);
void writer_put(mc_master_t *m, mc_writer_t *w);
void group_sync(mc_master_t *m, mc_object_t *o);
mc_object_t *obj_alloc(mc_master_t *m, mc_str_t tenant, mc_str_t key);
mc_object_ext_t *obj_ext(mc_object_t *o);
void obj_free(mc_master_t *m, mc_object_t *o);
void obj_attach(mc_object_t *o, mc_replica_t **reps, uint32_t n);
mc_upsert_t *obj_up(const mc_object_t *o);
mc_dfs_replica_t *obj_dfs(const mc_object_t *o);

/* ---- objects.c: an object's replicas and its end ----------------------------- */

void replica_free(mc_master_t *m, mc_replica_t *r);
void obj_free_replicas(mc_master_t *m, mc_object_t *o);
void obj_free_fenced(mc_master_t *m, mc_object_t *o, uint8_t who);
void upsert_clear(mc_master_t *m, mc_object_t *o);
void upsert_drop(mc_master_t *m, mc_object_t *o, int writer_done);
void obj_erase(mc_master_t *m, mc_object_t *o);
int obj_settle(mc_master_t *m, mc_object_t *o);
void obj_discard(mc_master_t *m, mc_object_t *o);
void upsert_discard(mc_master_t *m, mc_object_t *o);

/* ---- objects.c: leases and replica descriptors ------------------------------- */

int obj_leased(const mc_object_t *o, uint64_t now_ms);
void obj_grant_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms);
void fill_wire_replica(mc_wire_replica_t *w, const mc_replica_t *r, uint64_t size);

/* ---- objects.c: disk replica records (docs/tiers.md) -------------------------- */

mc_disk_replica_t *obj_disk(const mc_object_t *o);
int disk_readable(mc_master_t *m, const mc_disk_replica_t *d);
int obj_has_copy(const mc_object_t *o);
mc_disk_replica_t *disk_new(mc_master_t *m, mc_uuid_t holder, mc_str_t segment, mc_str_t path,
                            uint64_t offset, uint64_t length, uint32_t crc);
void disk_free(mc_master_t *m, mc_object_t *o);

/* ---- writes.c: put reservations (§5.18), for the teardown and the tick ------- */

void resv_unlink(mc_master_t *m, mc_reservation_t *r);
void resv_free(mc_master_t *m, mc_reservation_t *r);

#endif /* MC_MASTER_OBJECTS_INTERNAL_H */

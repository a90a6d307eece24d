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
 * every file.  They link only inside mooncake_master.  The few that run
 * for every key of a request (the lookup, the pipe's step, the small
 * accessors) are defined here, inline, as the compiler had them when the
 * index was one file (bench/meta_bench measured the batch forms slower
 * with them out of line).
 *
 * Owns: the helpers' prototypes, the inline ones and the batch key pipe
 *   (key_pipe_t).
 * May call: nothing.
 */
#ifndef MC_MASTER_OBJECTS_INTERNAL_H
#define MC_MASTER_OBJECTS_INTERNAL_H

#include <stdint.h>

#include "common/util.h"
#include "index.h"
#include "master.h"

/* ---- objects.c: lookup and the batch key pipe ------------------------------- *
 * The lookup of a key and the pipe's step run once per key of every request,
 * in every file of the index: they are inline here, as they were when the
 * index was one file. */

typedef struct obj_lookup {
    mc_str_t tenant;
    mc_str_t key;
} obj_lookup_t;

static inline uint64_t obj_hash(mc_str_t tenant, mc_str_t key)
{
    return mc_hash_bytes(key.ptr, key.len, mc_hash_bytes(tenant.ptr, tenant.len, 0));
}

static inline int obj_eq(const mc_cnode_t *node, const void *k)
{
    const mc_object_t *o = mc_container_of(node, mc_object_t, node);
    const obj_lookup_t *l = k;
    /* the key first: it is inline, the tenant is in the writer record */
    return mc_str_eq(mc_object_key(o), l->key) && mc_str_eq(mc_object_tenant(o), l->tenant);
}

/* The index hash of (@p tenant, @p key): m->key_memo's when it is that
 * very key (the same bytes in the same request), else computed. */
static inline uint32_t obj_hash_of(const mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    if ((key.ptr != NULL) && (key.ptr == m->key_memo.key.ptr) &&
        (key.len == m->key_memo.key.len) && (tenant.ptr == m->key_memo.tenant.ptr) &&
        (tenant.len == m->key_memo.tenant.len))
        return m->key_memo.hash;
    return (uint32_t)obj_hash(tenant, key);
}

static inline mc_object_t *obj_find(mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    obj_lookup_t l = {tenant, key};
    mc_cnode_t *n  = mc_chmap_find(&m->objects, obj_hash_of(m, tenant, key), &l, obj_eq);
    return n ? mc_container_of(n, mc_object_t, node) : NULL;
}

/*
 * A batch's keys in request order, with the index's cache misses
 * overlapped: the index of millions of objects is far larger than the
 * caches, so a lookup stalls on its bucket slot and then on the first
 * object of its chain.  mc_idx_pipe_init hashes every key once and starts the
 * first slots; pipe_at(i), before key i is worked on, starts the slot of
 * key i + 2 * PIPE_AHEAD and the first object of key i + PIPE_AHEAD, and
 * leaves key i's hash in m->key_memo for obj_find and mc_idx_obj_alloc;
 * mc_idx_pipe_done clears it.  Hints only: without memory for the hashes the
 * batch runs as it would without them.
 */
typedef struct key_pipe {
    mc_master_t *m;
    mc_str_t tenant;
    const mc_str_t *keys;
    uint32_t n;
    uint32_t *hash; /* NULL: no hints */
} key_pipe_t;

#define PIPE_AHEAD 4u

void mc_idx_pipe_init(key_pipe_t *p, mc_req_ctx_t *x, const mc_wire_str_list_t *keys);
void mc_idx_pipe_done(key_pipe_t *p);

/* Start loading the first object of the chain of @p hash: the line that
 * holds its link and hash, and its key. */
static inline void obj_prefetch(const mc_master_t *m, uint32_t hash)
{
    const mc_cnode_t *n = mc_chmap_head(&m->objects, hash);
    if (n != NULL) {
        const mc_object_t *o = mc_container_of(n, mc_object_t, node);
        __builtin_prefetch(o);
        __builtin_prefetch(o->strs);
    }
}

static inline void pipe_at(key_pipe_t *p, uint32_t i)
{
    if (p->hash == NULL)
        return;
    if (i + 2 * PIPE_AHEAD < p->n)
        mc_chmap_prefetch(&p->m->objects, p->hash[i + 2 * PIPE_AHEAD]);
    if (i + PIPE_AHEAD < p->n)
        obj_prefetch(p->m, p->hash[i + PIPE_AHEAD]);
    p->m->key_memo.tenant = p->tenant;
    p->m->key_memo.key    = p->keys[i];
    p->m->key_memo.hash   = p->hash[i];
}

/* Arena storage for the per-key answers of a batch form; -1 on OOM. */
int mc_idx_i32_list(mc_req_ctx_t *x, uint32_t n, mc_wire_i32_list_t *out);
int mc_idx_result_list(mc_req_ctx_t *x, uint32_t n, mc_wire_result_list_t *out);

/* ---- objects.c: records ------------------------------------------------------ */

mc_writer_t *mc_idx_writer_get(mc_master_t *m, mc_str_t tenant, mc_uuid_t owner);
void mc_idx_writer_put(mc_master_t *m, mc_writer_t *w);
void mc_idx_group_sync(mc_master_t *m, mc_object_t *o);
mc_object_t *mc_idx_obj_alloc(mc_master_t *m, mc_str_t tenant, mc_str_t key);
mc_object_ext_t *mc_idx_obj_ext(mc_object_t *o);
void mc_idx_obj_free(mc_master_t *m, mc_object_t *o);
void mc_idx_obj_attach(mc_object_t *o, mc_replica_t **reps, uint32_t n);

static inline mc_disk_replica_t *obj_disk(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->disk : NULL;
}

/* The DFS replica of @p o (docs/tiers.md §6), or NULL. */
static inline mc_dfs_replica_t *obj_dfs(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->dfs : NULL;
}

/* The upsert in progress on @p o (non-NULL exactly while o->upsert is
 * not NONE); it hangs off the ext, since few objects are being upserted. */
static inline mc_upsert_t *obj_up(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->up : NULL;
}

/* ---- objects.c: an object's replicas and its end ----------------------------- */

void mc_idx_replica_free(mc_master_t *m, mc_replica_t *r);
void mc_idx_obj_free_replicas(mc_master_t *m, mc_object_t *o);
void mc_idx_obj_free_fenced(mc_master_t *m, mc_object_t *o, uint8_t who);
void mc_idx_upsert_clear(mc_master_t *m, mc_object_t *o);
void mc_idx_upsert_drop(mc_master_t *m, mc_object_t *o, int writer_done);
void mc_idx_obj_erase(mc_master_t *m, mc_object_t *o);
int mc_idx_obj_settle(mc_master_t *m, mc_object_t *o);
void mc_idx_obj_discard(mc_master_t *m, mc_object_t *o);
void mc_idx_upsert_discard(mc_master_t *m, mc_object_t *o);

/* ---- objects.c: leases and replica descriptors ------------------------------- */

void mc_idx_obj_grant_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms);

static inline int obj_leased(const mc_object_t *o, uint64_t now_ms)
{
    return o->lease_deadline_ms > now_ms;
}

static inline void fill_wire_replica(mc_wire_replica_t *w, const mc_replica_t *r, uint64_t size)
{
    w->gen        = r->seg->gen;
    w->id         = r->id;
    w->status     = r->status;
    w->type       = r->seg->nof ? MC_WIRE_REPLICA_NOF : MC_WIRE_REPLICA_MEMORY;
    w->addr       = r->seg->base + mc_alloc_offset(r->seg->alloc, r->node);
    w->size       = size;
    w->segment    = mc_str_from_cstr(r->seg->name);
    w->segment_id = r->seg->id;
}

/* ---- objects.c: disk replica records (docs/tiers.md) -------------------------- */

int mc_idx_disk_readable(mc_master_t *m, const mc_disk_replica_t *d);
int mc_idx_obj_has_copy(const mc_object_t *o);
mc_disk_replica_t *mc_idx_disk_new(mc_master_t *m, mc_uuid_t holder, mc_str_t segment,
                                    mc_str_t path, uint64_t offset, uint64_t length, uint32_t crc);
void mc_idx_disk_free(mc_master_t *m, mc_object_t *o);

/* ---- writes.c: put reservations (§5.18), for the teardown and the tick ------- */

void mc_idx_resv_unlink(mc_master_t *m, mc_reservation_t *r);
void mc_idx_resv_free(mc_master_t *m, mc_reservation_t *r);

#endif /* MC_MASTER_OBJECTS_INTERNAL_H */

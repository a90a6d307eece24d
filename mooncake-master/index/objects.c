/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index (docs/protocol.md §5.5-§5.9, §5.11, §5.14).
 *
 * Objects are keyed by (tenant, key): one hash map, the hash chaining the
 * tenant bytes into the key bytes, so tenants never see each other's keys.
 * An object is written in two phases.  PUT_START allocates its replicas
 * (PROCESSING) and puts it on m->pending; PUT_END marks every replica
 * COMPLETE and takes it off.  Readers only ever see complete objects.
 *
 * Abandoned writes are handled as upstream does:
 *  - a PUT_START on a key whose previous PUT_START is older than
 *    --put_start_discard_timeout_sec preempts it.  The old replicas are
 *    not freed at once, because the old writer may still be moving bytes
 *    into them; they wait on m->discarded until their PUT_START is
 *    --put_start_release_timeout_sec old.
 *  - an object still incomplete --put_start_release_timeout_sec after its
 *    PUT_START is erased.  m->pending is ordered by PUT_START time (objects
 *    are appended when created), so the tick only looks at its head.
 *
 * Upsert (§5.11) rewrites an existing complete object either in place
 * (same size, no lease: the object goes back to the incomplete state,
 * owned by the upserter, and rides m->pending like a put) or into fresh
 * buffers kept on o->ext->up->replicas while the old value stays readable; the
 * object then sits on m->upserting, also ordered by start time, so the
 * tick can drop abandoned ones.  Old buffers replaced while a reader holds
 * a lease are freed at once under a later generation of their segments
 * (mc_idx_obj_free_fenced).
 *
 * Leases are monotonic-clock deadlines: a read (GET_REPLICA_LIST,
 * EXIST_KEY and their batch forms) moves the deadline to at least
 * now + --default_kv_lease_ttl; REMOVE refuses a leased object unless
 * forced.
 *
 * Groups (docs/protocol.md §5.12): a complete object with a group id is a
 * member of the (tenant, group id) record in m->groups, which lists its
 * members, so a lease granted on one member is extended to all of them in
 * O(group size) and eviction (evict.c) can check and take a whole group
 * without scanning the index.  An object joins at PUT_END/UPSERT_END (the
 * group id of the config in force from then on) and leaves when erased.
 *
 * Memory: an object costs about 140 bytes with a 16-byte key, plus a
 * 16-byte allocator node for its buffer and its share of the index's
 * buckets (bench/meta_bench), so the record is packed (master.h) and comes
 * from a slab (m->objslab) without a malloc header.  Its first replica is
 * embedded (rep0) and finds its object by position; its tenant and owner
 * are a shared mc_writer_t (m->writers); one link serves m->pending and
 * m->lru; the index keeps no hash of its own (the object holds 32 bits of
 * it).  A rep0 that must outlive its place in the object (a discarded
 * buffer) moves to a record of its own (replica_park()), so an object's
 * record goes as soon as it is erased; replica_dispose() is the one place
 * a replica struct goes.
 *
 * The index's requests land in the files beside this one, which share
 * its helpers through objects_internal.h: writes.c (puts, upserts,
 * reservations), queries.c (gets, exists), removes.c (removes, regex,
 * replica clear) and offload.c (the disk tier's books).  This file keeps
 * what every one of them works on.
 *
 * Owns: the object index (m->objects) and its records: the writer and
 *   group records, an object's and a replica's life (create, park, fence,
 *   erase, settle), the disk replica record, segment loss, the tick,
 *   leases, teardown and restore.
 * May call: index/ (its own files), the journal (../master.h: every
 *   durable change), tiers/ (DFS and NoF replicas), events/ (a KV event
 *   per key); durability/'s header only for the log record a restore
 *   reads.
 */
#include "config.h"

#include <inttypes.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regex_limit.h"
#include "durability/durability.h" /* the log record a restore reads */
#include "dynrep.h"
#include "events/events.h"
#include "evict.h"
#include "index.h"
#include "master.h"
#include "objects_internal.h"
#include "placement.h"
#include "tenants.h"
#include "tiers/tiers.h"

/* The index keeps the low 32 bits of it in the object (mc_chmap_t). */
static uint32_t obj_node_hash(const mc_cnode_t *node)
{
    return mc_container_of(node, mc_object_t, node)->hash;
}

/* ---- writers (master.h: mc_writer_t) ------------------------------------------ */

typedef struct writer_lookup {
    mc_str_t tenant;
    mc_uuid_t owner;
} writer_lookup_t;

static uint64_t writer_hash(mc_str_t tenant, mc_uuid_t owner)
{
    return mc_hash_bytes(tenant.ptr, tenant.len, mc_master_uuid_hash(owner));
}

static int writer_eq(const mc_hnode_t *node, const void *k)
{
    const mc_writer_t *w     = mc_container_of(node, mc_writer_t, node);
    const writer_lookup_t *l = k;
    mc_str_t t               = {w->tenant, w->tenant_len};
    return mc_uuid_eq(w->owner, l->owner) && mc_str_eq(t, l->tenant);
}

/* A new reference to the record of (@p tenant, @p owner); NULL on OOM. */
mc_writer_t *mc_idx_writer_get(mc_master_t *m, mc_str_t tenant, mc_uuid_t owner)
{
    writer_lookup_t l = {tenant, owner};
    uint64_t h        = writer_hash(tenant, owner);
    mc_hnode_t *n     = mc_hmap_find(&m->writers, h, &l, writer_eq);
    mc_writer_t *w;

    if (n != NULL) {
        w = mc_container_of(n, mc_writer_t, node);
        w->refs++;
        return w;
    }
    w = malloc(sizeof(*w) + tenant.len);
    if (w == NULL)
        return NULL;
    memset(w, 0, sizeof(*w));
    w->owner      = owner;
    w->refs       = 1;
    w->tenant_len = tenant.len;
    if (tenant.len > 0)
        memcpy(w->tenant, tenant.ptr, tenant.len);
    if (mc_hmap_insert(&m->writers, &w->node, h) != 0) {
        mc_hmap_remove(&m->writers, &w->node);
        free(w);
        return NULL;
    }
    return w;
}

/* Drop a reference from mc_idx_writer_get(); the record goes with the last. */
void mc_idx_writer_put(mc_master_t *m, mc_writer_t *w)
{
    if ((w == NULL) || (--w->refs > 0))
        return;
    mc_hmap_remove(&m->writers, &w->node);
    free(w);
}

mc_status_t mc_master_objects_init(mc_master_t *m)
{
    mc_slab_init(&m->objslab);
    if (mc_chmap_init(&m->objects, 1024, obj_node_hash) != 0)
        return MC_INTERNAL_ERROR;
    mc_mlist_init(&m->pending);
    mc_mlist_init(&m->discarded);
    mc_mlist_init(&m->upserting);
    mc_mlist_init(&m->lru);
    if (mc_hmap_init(&m->groups, 64) != 0) {
        mc_chmap_cleanup(&m->objects);
        return MC_INTERNAL_ERROR;
    }
    if (mc_hmap_init(&m->writers, 64) != 0) {
        mc_hmap_cleanup(&m->groups);
        mc_chmap_cleanup(&m->objects);
        return MC_INTERNAL_ERROR;
    }
    if (mc_hmap_init(&m->reservations, 64) != 0) {
        mc_hmap_cleanup(&m->writers);
        mc_hmap_cleanup(&m->groups);
        mc_hmap_cleanup(&m->objects);
        return MC_INTERNAL_ERROR;
    }
    mc_mlist_init(&m->resv_order);
    {
        mc_uuid_t u;
        mc_uuid_generate(&u); /* ids of an earlier run are not reissued */
        m->next_resv_id = u.hi ^ u.lo;
    }
    {
        /* A reader confirms that the bytes it read are a value's by its
         * replica id (docs/architecture.md, "Proof of identity"), so ids
         * are never reissued, not even by a master that restarted without
         * its state: each run starts at a random point of a 2^62 range
         * (two runs' ids collide only if their starts lie within the
         * number of replicas one run creates). */
        mc_uuid_t u;
        mc_uuid_generate(&u);
        m->next_replica_id = (u.hi ^ u.lo) & ((UINT64_C(1) << 62) - 1u);
    }
    /* the next block of records faulted in off the loop (slab.h); without
     * the thread the loop maps its blocks itself, as before */
    if (mc_slab_prefault_start(&m->objslab) != 0)
        mc_warn("index: no thread to fault the object records' blocks in ahead: "
                "the event loop takes those page faults itself");
    return mc_master_dfs_init(m);
}

size_t mc_master_objects_count(const mc_master_t *m)
{
    return m->objects.count;
}


void mc_idx_pipe_init(key_pipe_t *p, mc_req_ctx_t *x, const mc_wire_str_list_t *keys)
{
    p->m      = x->m;
    p->tenant = x->tenant;
    p->keys   = keys->v;
    p->n      = keys->n;
    p->hash   = (keys->n > 1) ? mc_arena_alloc(x->arena, keys->n * sizeof(*p->hash)) : NULL;
    if (p->hash == NULL)
        return;
    for (uint32_t i = 0; i < p->n; i++)
        p->hash[i] = (uint32_t)obj_hash(p->tenant, p->keys[i]);
    for (uint32_t i = 0; (i < p->n) && (i < 2 * PIPE_AHEAD); i++)
        mc_chmap_prefetch(&p->m->objects, p->hash[i]);
}

void mc_idx_pipe_done(key_pipe_t *p)
{
    memset(&p->m->key_memo, 0, sizeof(p->m->key_memo));
}

/* ---- groups ------------------------------------------------------------------ */

typedef struct group_lookup {
    mc_str_t tenant;
    mc_str_t id;
} group_lookup_t;

static mc_str_t group_tenant(const mc_group_t *g)
{
    mc_str_t s = {g->strs, g->tenant_len};
    return s;
}

static mc_str_t group_id(const mc_group_t *g)
{
    mc_str_t s = {g->strs + g->tenant_len, g->id_len};
    return s;
}

static int group_eq(const mc_hnode_t *node, const void *k)
{
    const mc_group_t *g     = mc_container_of(node, mc_group_t, node);
    const group_lookup_t *l = k;
    return mc_str_eq(group_tenant(g), l->tenant) && mc_str_eq(group_id(g), l->id);
}

/* Take @p o out of its group; the group goes with its last member. */
static void group_leave(mc_master_t *m, mc_object_t *o)
{
    mc_group_t *g = mc_object_group(o);

    if (g == NULL)
        return;
    mc_mlist_remove(&o->ext->group_link);
    o->ext->group = NULL;
    if (--g->count == 0) {
        mc_hmap_remove(&m->groups, &g->node);
        free(g);
    }
}

/*
 * Make @p o (complete) a member of the group its group_id names, leaving
 * the one it was in.  On OOM the object stays ungrouped (logged): it is
 * then leased and evicted on its own, which loses no data.
 */
void mc_idx_group_sync(mc_master_t *m, mc_object_t *o)
{
    const char *id   = mc_object_group_id(o);
    group_lookup_t l = {mc_object_tenant(o), {id, id ? strlen(id) : 0}};
    mc_group_t *g    = mc_object_group(o);
    mc_hnode_t *n;
    uint64_t h;

    if ((g != NULL) && (id != NULL) && group_eq(&g->node, &l)) {
        /* its lease may have been reset (upsert): grants go to all again */
        g->lease_deadline_ms = 0;
        return;
    }
    group_leave(m, o);
    if (id == NULL)
        return; /* then o->ext, if any, is there for a soft pin */
    h = mc_hash_bytes(l.id.ptr, l.id.len, mc_hash_bytes(l.tenant.ptr, l.tenant.len, 1));
    n = mc_hmap_find(&m->groups, h, &l, group_eq);
    if (n != NULL) {
        g = mc_container_of(n, mc_group_t, node);
    } else {
        if (l.id.len > UINT32_MAX - l.tenant.len)
            return;
        g = malloc(sizeof(*g) + (size_t)l.tenant.len + l.id.len);
        if (g == NULL) {
            mc_warn("out of memory: key '%.*s' left out of group '%.*s'",
                    (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr,
                    (int)MC_MIN(l.id.len, 200u), l.id.ptr);
            return;
        }
        memset(g, 0, sizeof(*g));
        mc_mlist_init(&g->members);
        g->tenant_len = l.tenant.len;
        g->id_len     = (uint32_t)l.id.len;
        if (l.tenant.len > 0)
            memcpy(g->strs, l.tenant.ptr, l.tenant.len);
        memcpy(g->strs + l.tenant.len, l.id.ptr, l.id.len);
        if (mc_hmap_insert(&m->groups, &g->node, h) != 0) {
            mc_warn("out of memory: key '%.*s' left out of group '%.*s'",
                    (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr,
                    (int)MC_MIN(l.id.len, 200u), l.id.ptr);
            free(g);
            return;
        }
    }
    mc_mlist_insert_tail(&g->members, &o->ext->group_link);
    g->count++;
    g->lease_deadline_ms = 0; /* the newcomer has not had the last grant */
    o->ext->group        = g;
}

/* ---- replicas and objects --------------------------------------------------- */

/* A zeroed record for an object of @p key (copied in, with its index hash
 * for @p tenant), from m->objslab; NULL on OOM. */
mc_object_t *mc_idx_obj_alloc(mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    mc_object_t *o;

    if (key.len > MC_WIRE_MAX_KEY) /* the wire refuses longer keys */
        return NULL;
    o = mc_slab_alloc(&m->objslab, mc_object_alloc_size(key.len));
    if (o == NULL)
        return NULL;
    /* the key starts over rep0's last field (master.h): zero up to it */
    memset(o, 0, offsetof(mc_object_t, strs));
    o->hash    = obj_hash_of(m, tenant, key);
    o->key_len = (uint16_t)key.len;
    memcpy(o->strs, key.ptr, key.len);
    return o;
}

/* Give the record of @p o back to m->objslab. */
static void obj_release(mc_master_t *m, mc_object_t *o)
{
    mc_slab_free(&m->objslab, o, mc_object_alloc_size(o->key_len));
}

/* Free the struct of @p r, already unlinked: an embedded rep0 only marks
 * its slot unused. */
static void replica_dispose(mc_replica_t *r)
{
    if (!r->embedded) {
        free(r);
        return;
    }
    mc_container_of(r, mc_object_t, rep0)->rep0.seg = NULL;
}

/* Give back the range of @p r, unlink and free it. */
void mc_idx_replica_free(mc_master_t *m, mc_replica_t *r)
{
    mc_master_segment_release(m, r);
    mc_replica_unlink(r);
    replica_dispose(r);
}

/* Give back and free every replica on @p list. */
static void free_replicas(mc_master_t *m, mc_mlist_t *list)
{
    mc_mlist_t *pos, *tmp;
    mc_mlist_for_each_safe(pos, tmp, list)
        mc_idx_replica_free(m, mc_container_of(pos, mc_replica_t, link));
}

/* free_replicas() for the memory replicas of @p o, rep0 included. */
void mc_idx_obj_free_replicas(mc_master_t *m, mc_object_t *o)
{
    if (o->rep0.seg != NULL) {
        mc_master_segment_release(m, &o->rep0);
        o->rep0.seg = NULL; /* mc_idx_replica_free() of rep0, which is on no list */
    }
    free_replicas(m, &o->replicas);
}

/* Free every replica on @p list without giving its range back (teardown). */
static void forget_replicas(mc_mlist_t *list)
{
    mc_mlist_t *pos, *tmp;
    mc_mlist_for_each_safe(pos, tmp, list)
    {
        mc_mlist_remove(pos);
        replica_dispose(mc_container_of(pos, mc_replica_t, link));
    }
}

/*
 * Put @p r, just unlinked, on m->discarded until @p release_ms.  An
 * object's rep0 has no room for the release time, so it moves to a record
 * of its own and the object's slot becomes free; without memory for that
 * its range is never given back (logged), since a writer or reader may
 * still be using it.
 */
static void replica_park(mc_master_t *m, mc_replica_t *r, uint64_t release_ms)
{
    if (r->embedded) {
        mc_replica_t *h = malloc(sizeof(*h));
        if (h == NULL) {
            mc_error("out of memory: %" PRIu64 " bytes of segment %s are not given back",
                     mc_master_replica_block(r).size, r->seg->name);
            r->seg = NULL; /* the slot is free; the range stays allocated */
            return;
        }
        memcpy(h, r, MC_REPLICA_EMBEDDED_SIZE);
        h->embedded = 0;
        r->seg      = NULL;
        r           = h;
    }
    r->discarded  = 1; /* its object is gone from here on */
    r->fresh      = 0;
    r->release_ms = release_ms;
    mc_mlist_insert_tail(&m->discarded, &r->link);
}

/* Move every replica on @p list to m->discarded, released at @p release_ms:
 * someone (a writer, or a reader holding a lease) may still be using it. */
static void defer_replicas(mc_master_t *m, mc_mlist_t *list, uint64_t release_ms)
{
    mc_mlist_t *pos, *tmp;
    mc_mlist_for_each_safe(pos, tmp, list)
    {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        mc_mlist_remove(&r->link);
        replica_park(m, r, release_ms);
    }
}

/* defer_replicas() for the memory replicas of @p o, rep0 included. */
static void obj_defer_replicas(mc_master_t *m, mc_object_t *o, uint64_t release_ms)
{
    if (o->rep0.seg != NULL)
        replica_park(m, &o->rep0, release_ms);
    defer_replicas(m, &o->replicas, release_ms);
}

/*
 * The memory replicas of @p o go now although a reader may still hold a
 * lease on them (@p who MC_SEG_GEN_READER) or, for a put in progress, its
 * writer may still be writing (MC_SEG_GEN_WRITER): each of their segments
 * moves to a later generation before any memory of it is handed out again
 * (segments.c, mc_master_segment_try), so the holder refuses a reader (or
 * writer) still on the old one instead of mixing it with the next owner's
 * bytes (docs/architecture.md, "Proof of identity").  The space is free at
 * once.
 */
void mc_idx_obj_free_fenced(mc_master_t *m, mc_object_t *o, uint8_t who)
{
    mc_replica_t *r;
    mc_object_for_each_replica(r, o)
        if (r->seg->gen_dirty < who)
            r->seg->gen_dirty = who;
    mc_idx_obj_free_replicas(m, o);
}

/* ---- disk replicas (docs/tiers.md) ---- */

/* 1 when the disk replica @p d may be read: its holder is known and not
 * a client restored from the operation log that has yet to remount (its
 * files are vouched for again once it is back, docs/tiers.md). */
int mc_idx_disk_readable(mc_master_t *m, const mc_disk_replica_t *d)
{
    const mc_client_t *c = mc_master_client_find(m, d->holder);
    return (c != NULL) && !c->restored;
}

/* 1 when @p o keeps a copy outside memory that is readable once complete
 * (a disk or a DFS replica): losing its memory does not end it. */
int mc_idx_obj_has_copy(const mc_object_t *o)
{
    return (obj_disk(o) != NULL) || (obj_dfs(o) != NULL);
}

/* A new disk replica (not attached to an object); NULL on OOM. */
mc_disk_replica_t *mc_idx_disk_new(mc_master_t *m, mc_uuid_t holder, mc_str_t segment,
                                    mc_str_t path, uint64_t offset, uint64_t length, uint32_t crc)
{
    mc_disk_replica_t *d = calloc(1, sizeof(*d));

    if (d == NULL)
        return NULL;
    d->segment = mc_str_dup(segment);
    d->path    = mc_str_dup(path);
    if ((d->segment == NULL) || (d->path == NULL)) {
        free(d->segment);
        free(d->path);
        free(d);
        return NULL;
    }
    d->id     = ++m->next_replica_id;
    d->holder = holder;
    d->offset = offset;
    d->length = length;
    d->crc    = crc;
    return d;
}

static void disk_destroy(mc_disk_replica_t *d)
{
    if (d == NULL)
        return;
    free(d->segment);
    free(d->path);
    free(d);
}

/* Forget the disk replica of @p o, if any.  The holder's bytes stay in
 * its bucket until its tier reclaims them; nobody is pointed there again. */
void mc_idx_disk_free(mc_master_t *m, mc_object_t *o)
{
    mc_disk_replica_t *d = obj_disk(o);

    if (d == NULL)
        return;
    o->ext->disk = NULL;
    m->disk_replicas--;
    m->disk_bytes -= d->length;
    m->disk_dropped_keys++;
    disk_destroy(d);
}

/* The ext of @p o, allocated on first use; NULL on OOM. */
mc_object_ext_t *mc_idx_obj_ext(mc_object_t *o)
{
    mc_object_ext_t *e = o->ext;

    if (e != NULL)
        return e;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->obj = o;
    mc_mlist_init(&e->group_link);
    mc_mlist_init(&e->tasks);
    o->ext = e;
    return e;
}

mc_object_ext_t *mc_master_object_ext(mc_object_t *o)
{
    return mc_idx_obj_ext(o);
}

/* Free @p o and what hangs off it, once unlinked from everything (its
 * replicas, rep0 included, already gone). */
void mc_idx_obj_free(mc_master_t *m, mc_object_t *o)
{
    /* the tenant's quota charge (tenants.h), taken with the size */
    if ((o->writer != NULL) && (o->size > 0))
        mc_master_tenant_charge(m, (mc_str_t){o->writer->tenant, o->writer->tenant_len},
                                -(int64_t)o->size);
    mc_idx_writer_put(m, o->writer);
    o->writer = NULL;
    mc_idx_disk_free(m, o);
    if (o->ext != NULL) {
        mc_master_dfs_free(m, o->ext->dfs, o->size);
        o->ext->dfs = NULL;
        free(o->ext->group_id);
        free(o->ext);
        o->ext = NULL;
    }
    obj_release(m, o);
}

/*
 * Make the freshly placed replicas @p reps[0..n) (on no list yet) the
 * memory replicas of @p o, whose rep0 is unused and whose list is empty:
 * the first moves into rep0 (reps[0] then points there), the rest go on
 * o->replicas in order.
 */
void mc_idx_obj_attach(mc_object_t *o, mc_replica_t **reps, uint32_t n)
{
    if (n == 0)
        return;
    memcpy(&o->rep0, reps[0], MC_REPLICA_EMBEDDED_SIZE); /* the rest is the key's */
    o->rep0.embedded = 1;
    free(reps[0]);
    reps[0] = &o->rep0;
    for (uint32_t i = 1; i < n; i++) {
        mc_replica_set_obj(reps[i], o);
        mc_mlist_insert_tail(&o->replicas, &reps[i]->link);
    }
}

/* Forget the upsert state of @p o (its fresh buffers are already gone). */
void mc_idx_upsert_clear(mc_master_t *m, mc_object_t *o)
{
    mc_upsert_t *up = obj_up(o);

    o->upsert = MC_UPSERT_NONE;
    if (up == NULL)
        return;
    mc_master_dfs_free(m, up->dfs, up->size); /* NULL once UPSERT_END took it */
    o->ext->up = NULL;
    mc_idx_writer_put(m, up->writer);
    mc_mlist_remove(&up->link);
    free(up->group_id);
    free(up);
}

/* Move the segment of every replica on @p list to at least generation
 * step @p who before their space is handed out again (mc_idx_obj_free_fenced). */
static void fence_replicas(mc_mlist_t *list, uint8_t who)
{
    mc_mlist_t *pos, *tmp;
    mc_mlist_for_each_safe(pos, tmp, list)
    {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        if (r->seg->gen_dirty < who)
            r->seg->gen_dirty = who;
    }
}

/* Drop the fresh buffers of an upsert and forget it; the old value stays.
 * Unless @p writer_done (the upserter itself revoked), the upserter may
 * still be moving bytes into them, so their segments move to the next
 * fence before that space is handed out again, as for a put in progress
 * (mc_idx_obj_erase). */
void mc_idx_upsert_drop(mc_master_t *m, mc_object_t *o, int writer_done)
{
    if (!writer_done)
        fence_replicas(&obj_up(o)->replicas, MC_SEG_GEN_WRITER);
    free_replicas(m, &obj_up(o)->replicas);
    mc_idx_upsert_clear(m, o);
}

/* Free every replica of @p o, unlink and free it.  The readable
 * replicas of an object that a reader still holds a lease on (a forced
 * remove, REMOVE_ALL / REMOVE_BY_REGEX with force) are free at once too,
 * under a later generation of their segments (mc_idx_obj_free_fenced, §5.8), and
 * so are those of a put still in progress, whose writer may still be
 * moving bytes: the holder lets the memory's next owner write only once
 * its writes are done. */
void mc_idx_obj_erase(mc_master_t *m, mc_object_t *o)
{
    uint64_t now_ms = mc_now_ms();

    /* every disappearance passes here, so routers hear of each one; an
     * in-place upsert's object was announced by its earlier PutEnd
     * (docs/events.md §3) */
    if (o->complete || (o->upsert == MC_UPSERT_INPLACE))
        mc_kv_events_removed(m, o);
    if (o->complete)
        mc_journal_erase(m, o);
    if (mc_object_replicating(o))
        mc_master_tasks_object_gone(m, o);
    if (!o->complete)
        mc_idx_obj_free_fenced(m, o, MC_SEG_GEN_WRITER); /* its writer may still be at it */
    else if (obj_leased(o, now_ms))
        mc_idx_obj_free_fenced(m, o, MC_SEG_GEN_READER);
    else
        mc_idx_obj_free_replicas(m, o);
    if (obj_up(o) != NULL)
        mc_idx_upsert_drop(m, o, 0); /* its upserter may still be at it */
    else
        mc_idx_upsert_clear(m, o);
    mc_chmap_remove(&m->objects, &o->node);
    mc_mlist_remove(&o->pending_link);
    mc_mlist_remove(&o->lru_link);
    group_leave(m, o);
    mc_idx_obj_free(m, o);
}

/*
 * @p o lost memory replicas: erase it when nothing readable is left, else
 * log its new state.  A disk-only object leaves the LRU, since evicting it
 * would free no memory.  Returns 1 when @p o was erased.
 */
int mc_idx_obj_settle(mc_master_t *m, mc_object_t *o)
{
    if (mc_object_has_replicas(o)) {
        mc_journal_object(m, o);
        return 0;
    }
    if (!o->complete || !mc_idx_obj_has_copy(o)) {
        mc_debug("object %.*s lost its last replica", (int)MC_MIN(o->key_len, 200u),
                 mc_object_key(o).ptr);
        mc_idx_obj_erase(m, o);
        return 1;
    }
    mc_mlist_remove(&o->lru_link);
    o->ext->disk_hits = 0; /* disk-only again: count afresh */
    mc_journal_object(m, o);
    return 0;
}

/* Teardown: segments are destroyed right after, so ranges are not given
 * back one by one. */
void mc_master_objects_cleanup(mc_master_t *m)
{
    mc_chmap_iter_t oit;
    mc_cnode_t *on;
    mc_hmap_iter_t it;
    mc_hnode_t *n;

    /* the buffers parked there are records of their own */
    forget_replicas(&m->discarded);
    on = mc_chmap_first(&m->objects, &oit);
    while (on != NULL) {
        mc_object_t *o = mc_container_of(on, mc_object_t, node);
        on             = mc_chmap_next(&m->objects, &oit);
        o->rep0.seg    = NULL;
        forget_replicas(&o->replicas);
        if (obj_up(o) != NULL) {
            forget_replicas(&obj_up(o)->replicas);
            mc_master_dfs_free(m, obj_up(o)->dfs, obj_up(o)->size);
            mc_idx_writer_put(m, obj_up(o)->writer);
            free(obj_up(o)->group_id);
            free(obj_up(o));
        }
        mc_chmap_remove(&m->objects, &o->node);
        mc_idx_obj_free(m, o);
    }
    mc_mlist_init(&m->discarded);
    mc_mlist_init(&m->pending);
    mc_mlist_init(&m->upserting);
    mc_mlist_init(&m->lru);
    mc_chmap_cleanup(&m->objects);
    mc_slab_cleanup(&m->objslab);
    n = mc_hmap_first(&m->groups, &it);
    while (n != NULL) {
        mc_group_t *g = mc_container_of(n, mc_group_t, node);
        n             = mc_hmap_next(&m->groups, &it);
        mc_hmap_remove(&m->groups, &g->node);
        free(g);
    }
    mc_hmap_cleanup(&m->groups);
    while (!mc_mlist_empty(&m->resv_order)) {
        mc_reservation_t *r = mc_container_of(m->resv_order.next, mc_reservation_t, link);
        for (uint32_t i = 0; i < r->n; i++)
            free(r->reps[i]);
        mc_idx_resv_unlink(m, r);
    }
    mc_hmap_cleanup(&m->reservations);
    /* every reference went with the objects, upserts and reservations above */
    n = mc_hmap_first(&m->writers, &it);
    while (n != NULL) {
        mc_writer_t *w = mc_container_of(n, mc_writer_t, node);
        n              = mc_hmap_next(&m->writers, &it);
        mc_hmap_remove(&m->writers, &w->node);
        free(w);
    }
    mc_hmap_cleanup(&m->writers);
    mc_master_dfs_cleanup(m); /* after the objects gave their extents back */
}

/* ---- the whole index ------------------------------------------------------ */

mc_status_t mc_master_index_init(mc_master_t *m)
{
    if ((mc_master_objects_init(m) != MC_OK) || (mc_master_segments_init(m) != MC_OK) ||
        (mc_master_clients_init(m) != MC_OK) || (mc_master_tasks_init(m) != MC_OK))
        return MC_INTERNAL_ERROR;
    return MC_OK;
}

/* Tasks before objects (staged tasks hang off objects), objects before
 * segments (replicas point into segments), segments before clients
 * (segments point at their owner). */
void mc_master_index_cleanup(mc_master_t *m)
{
    if (m->tasks.buckets != NULL)
        mc_master_tasks_cleanup(m);
    if (m->objects.buckets != NULL)
        mc_master_objects_cleanup(m);
    if (m->segments.buckets != NULL)
        mc_master_segments_cleanup(m);
    mc_master_nof_cleanup(m);
    if (m->clients.buckets != NULL)
        mc_master_clients_cleanup(m);
}

void mc_master_index_reset(mc_master_t *m)
{
    mc_master_index_cleanup(m);
    m->capacity_bytes      = 0;
    m->allocated_bytes     = 0;
    m->nof_capacity_bytes  = 0;
    m->nof_allocated_bytes = 0;
    if (mc_master_index_init(m) != MC_OK) {
        /* a master with a broken index must not serve */
        mc_error("out of memory re-creating the index after a step-down; exiting");
        exit(1);
    }
}

void mc_master_replica_drop(mc_master_t *m, mc_replica_t *r)
{
    mc_object_t *o = mc_replica_obj(r);
    int fresh      = r->fresh;
    mc_idx_replica_free(m, r);
    if ((o != NULL) && fresh) {
        /* An upsert lost its last new buffer: the old value stays, and the
         * writer's UPSERT_END will answer OBJECT_NOT_FOUND (§5.11). */
        if ((obj_up(o) != NULL) && mc_mlist_empty(&obj_up(o)->replicas))
            mc_debug("upsert of %.*s lost its last new replica", (int)MC_MIN(o->key_len, 200u),
                     mc_object_key(o).ptr);
        return;
    }
    if (o != NULL)
        (void)mc_idx_obj_settle(m, o);
}

/*
 * mc_master_replica_drop() on the replicas of @p list that @p pick
 * chooses.  Dropping the only replica of a list may erase the list's
 * object, so the walk stops there (the list is empty by then anyway).
 */
static size_t drop_listed(mc_master_t *m, mc_mlist_t *list, mc_master_replica_pick_func_t pick,
                          const void *arg)
{
    mc_mlist_t *pos = list->next;
    size_t n        = 0;

    while (pos != list) {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        int only        = (pos->prev == list) && (pos->next == list);
        pos             = pos->next;
        if (!pick(r, arg))
            continue;
        mc_master_replica_drop(m, r);
        n++;
        if (only)
            break;
    }
    return n;
}

size_t mc_master_object_drop_where(mc_master_t *m, mc_object_t *o,
                                   mc_master_replica_pick_func_t pick, const void *arg)
{
    if ((o->rep0.seg != NULL) && pick(&o->rep0, arg)) {
        int only = mc_mlist_empty(&o->replicas);
        mc_master_replica_drop(m, &o->rep0);
        if (only)
            return 1; /* o may be gone */
        return 1 + drop_listed(m, &o->replicas, pick, arg);
    }
    /* with rep0 in use the list's last replica is not the object's */
    return drop_listed(m, &o->replicas, pick, arg);
}

static int on_segment(const mc_replica_t *r, const void *seg)
{
    return r->seg == seg;
}

size_t mc_master_objects_drop_segment(mc_master_t *m, const mc_segment_t *seg)
{
    mc_chmap_iter_t it;
    mc_cnode_t *n = mc_chmap_first(&m->objects, &it);
    size_t dropped = drop_listed(m, &m->discarded, on_segment, seg);
    const mc_mlist_t *q = &m->taskq[MC_TASKQ_PROCESSING].list;
    const mc_mlist_t *pos;
    mc_mlist_t *rpos, *rtmp;

    /* a reservation with a buffer there goes whole: its writer puts anew */
    mc_mlist_for_each_safe(rpos, rtmp, &m->resv_order)
    {
        mc_reservation_t *r = mc_container_of(rpos, mc_reservation_t, link);
        for (uint32_t i = 0; i < r->n; i++) {
            if (r->reps[i]->seg == seg) {
                dropped++;
                mc_idx_resv_free(m, r);
                break;
            }
        }
    }

    /* buffers staged by copy/move tasks (tasks.c): only processing tasks
     * have any; END notices the loss */
    for (pos = q->next; pos != q; pos = pos->next)
        dropped += drop_listed(m, &mc_container_of(pos, mc_task_t, state_link)->staged,
                               on_segment, seg);
    while (n != NULL) {
        mc_object_t *o = mc_container_of(n, mc_object_t, node);
        /* step first: dropping may erase o, never another object */
        n = mc_chmap_next(&m->objects, &it);
        /* the upsert's new buffers first, since losing the last old one
         * erases o together with its upsert */
        if (obj_up(o) != NULL)
            dropped += drop_listed(m, &obj_up(o)->replicas, on_segment, seg);
        dropped += mc_master_object_drop_where(m, o, on_segment, seg);
    }
    return dropped;
}

/* Preempt a stale PUT_START: keep its ranges reserved until the old
 * writer can no longer be writing, then erase the object. */
void mc_idx_obj_discard(mc_master_t *m, mc_object_t *o)
{
    uint64_t release = o->put_start_ms + (uint64_t)m->cfg->put_start_release_timeout_sec * 1000u;
    obj_defer_replicas(m, o, release);
    if (obj_dfs(o) != NULL) {
        mc_master_dfs_defer(m, obj_dfs(o), o->size, release);
        o->ext->dfs = NULL;
    }
    mc_idx_obj_erase(m, o);
}

/* Preempt a stale fresh-buffer upsert the same way; the old value stays. */
void mc_idx_upsert_discard(mc_master_t *m, mc_object_t *o)
{
    mc_upsert_t *up  = obj_up(o);
    uint64_t release = up->start_ms + (uint64_t)m->cfg->put_start_release_timeout_sec * 1000u;
    defer_replicas(m, &up->replicas, release);
    mc_master_dfs_defer(m, up->dfs, up->size, release);
    up->dfs = NULL;
    mc_idx_upsert_clear(m, o);
}

void mc_master_objects_tick(mc_master_t *m, uint64_t now_ms)
{
    mc_mlist_t *pos, *tmp;
    uint64_t release = (uint64_t)m->cfg->put_start_release_timeout_sec * 1000u;

    /* one TTL for all: granted order is deadline order */
    while (!mc_mlist_empty(&m->resv_order)) {
        mc_reservation_t *r = mc_container_of(m->resv_order.next, mc_reservation_t, link);
        if (r->deadline_ms > now_ms)
            break;
        mc_idx_resv_free(m, r);
    }

    mc_mlist_for_each_safe(pos, tmp, &m->discarded)
    {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        if (r->release_ms <= now_ms)
            mc_idx_replica_free(m, r);
    }
    mc_master_dfs_tick(m, now_ms);
    while (!mc_mlist_empty(&m->pending)) {
        mc_object_t *o = mc_container_of(m->pending.next, mc_object_t, pending_link);
        if (o->put_start_ms + release > now_ms)
            break;
        mc_info("releasing abandoned put of key '%.*s' (no PutEnd within %" PRId64 " s)",
                (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr,
                m->cfg->put_start_release_timeout_sec);
        mc_idx_obj_erase(m, o);
    }
    while (!mc_mlist_empty(&m->upserting)) {
        mc_object_t *o = mc_container_of(m->upserting.next, mc_upsert_t, link)->obj;
        if (obj_up(o)->start_ms + release > now_ms)
            break;
        mc_info("releasing abandoned upsert of key '%.*s' (no UpsertEnd within %" PRId64 " s)",
                (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr,
                m->cfg->put_start_release_timeout_sec);
        mc_idx_upsert_drop(m, o, 0);
    }
}

/* ---- helpers ------------------------------------------------------------------ */

static void obj_lease_one(mc_master_t *m, mc_object_t *o, uint64_t d)
{
    /* a group member being rewritten in place has no reader to protect,
     * and its word holds the rewrite's start (master.h) */
    if (!o->complete)
        return;
    if (d > o->lease_deadline_ms)
        o->lease_deadline_ms = d;
    mc_master_lru_touch(m, o);
}

/* A lease on a grouped object is a lease on its whole group (§5.12).
 * g->lease_deadline_ms remembers the last deadline every member got, so
 * a batch read of a whole group costs O(group size), not its square. */
void mc_idx_obj_grant_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms)
{
    uint64_t d    = now_ms + m->cfg->default_kv_lease_ttl;
    mc_group_t *g = mc_object_group(o);
    mc_mlist_t *pos, *tmp;

    if (g == NULL) {
        obj_lease_one(m, o, d);
        return;
    }
    if (d <= g->lease_deadline_ms) {
        mc_master_lru_touch(m, o);
        return;
    }
    mc_mlist_for_each_safe(pos, tmp, &g->members)
        obj_lease_one(m, mc_container_of(pos, mc_object_ext_t, group_link)->obj, d);
    g->lease_deadline_ms = d;
}

/* ---- §5.9 batch forms: one result per key, in request order ---------------------- */

/* Arena storage for @p n statuses; -1 when out of memory. */
int mc_idx_i32_list(mc_req_ctx_t *x, uint32_t n, mc_wire_i32_list_t *out)
{
    out->n = 0;
    out->v = NULL;
    if (n == 0)
        return 0;
    out->v = mc_arena_calloc(x->arena, n, sizeof(*out->v));
    if (out->v == NULL)
        return -1;
    out->n = n;
    return 0;
}

/* Arena storage for @p n results; -1 when out of memory. */
int mc_idx_result_list(mc_req_ctx_t *x, uint32_t n, mc_wire_result_list_t *out)
{
    out->n = 0;
    out->v = n ? mc_arena_calloc(x->arena, n, sizeof(*out->v)) : NULL;
    if ((n > 0) && (out->v == NULL))
        return -1;
    out->n = n;
    return 0;
}

void mc_master_object_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms)
{
    mc_idx_obj_grant_lease(m, o, now_ms);
}

void mc_master_replicas_forget(mc_mlist_t *list)
{
    forget_replicas(list);
}

void mc_master_replica_free(mc_master_t *m, mc_replica_t *r)
{
    mc_idx_replica_free(m, r);
}

void mc_master_replicas_free(mc_master_t *m, mc_mlist_t *list)
{
    free_replicas(m, list);
}

void mc_master_replicas_defer(mc_master_t *m, mc_mlist_t *list, uint64_t release_ms)
{
    defer_replicas(m, list, release_ms);
}

void mc_master_replica_to_wire(mc_wire_replica_t *w, const mc_replica_t *r, uint64_t size)
{
    fill_wire_replica(w, r, size);
}

void mc_master_replica_retire(mc_master_t *m, mc_object_t *o, mc_replica_t *r, uint64_t now_ms)
{
    if (obj_leased(o, now_ms))
        if (r->seg->gen_dirty < MC_SEG_GEN_READER) /* as mc_idx_obj_free_fenced() */
            r->seg->gen_dirty = MC_SEG_GEN_READER;
    mc_idx_replica_free(m, r);
    mc_journal_object(m, o);
}

mc_object_t *mc_master_object_find(mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    return obj_find(m, tenant, key);
}

void mc_master_object_erase(mc_master_t *m, mc_object_t *o)
{
    mc_idx_obj_erase(m, o);
}

/* ---- restore (snapshot.c) ------------------------------------------------------- */

/* The disk replica of OBJ_SET record @p r, when its holder was restored
 * with its segments (and waits to remount); NULL otherwise or on OOM. */
static mc_disk_replica_t *disk_restore(mc_master_t *m, const mc_oplog_record_t *r)
{
    const mc_client_t *c = mc_master_client_find(m, r->disk_holder);

    if ((c == NULL) || !c->restored || (r->disk_path.len == 0) || (r->disk_path.ptr[0] != '/'))
        return NULL;
    return mc_idx_disk_new(m, r->disk_holder, r->disk_segment, r->disk_path, r->disk_offset,
                    r->disk_length, r->disk_crc);
}

mc_object_t *mc_master_object_restore(mc_master_t *m, const mc_oplog_record_t *r,
                                      mc_replica_t **reps, uint32_t n, uint64_t now_ms)
{
    mc_object_t *o;
    mc_dfs_replica_t *dfs  = NULL;
    mc_disk_replica_t *dsk = NULL;

    if (((n == 0) && !r->has_dfs && !r->has_disk) || (r->size == 0) ||
        (r->tenant.len > UINT16_MAX) || (obj_find(m, r->tenant, r->key) != NULL))
        return NULL;
    /* a DFS record outlives the master: its extent is taken back (the
     * files are on shared storage, docs/tiers.md §6) */
    if (r->has_dfs)
        dfs = mc_master_dfs_restore(m, r->dfs_shard, r->dfs_offset, r->dfs_span,
                                    r->dfs_replica_num, r->size);
    /* a disk replica waits, unread, for its holder to remount (it was
     * restored with its segments); if it does not within the grace
     * period, the holder's departure takes the replica (docs/tiers.md) */
    if (r->has_disk && (r->disk_length == r->size))
        dsk = disk_restore(m, r);
    if ((n == 0) && (dfs == NULL) && (dsk == NULL))
        return NULL;
    o = mc_idx_obj_alloc(m, r->tenant, r->key);
    if (o == NULL)
        goto fail;
    o->size   = r->size; /* mc_idx_obj_free gives a DFS extent back by it */
    o->writer = mc_idx_writer_get(m, r->tenant, r->owner);
    if (o->writer != NULL) /* mc_idx_obj_free gives the tenant's charge back */
        mc_master_tenant_charge(m, r->tenant, (int64_t)r->size);
    if ((o->writer == NULL) || (((dfs != NULL) || (dsk != NULL)) && (mc_idx_obj_ext(o) == NULL))) {
        mc_idx_obj_free(m, o);
        goto fail;
    }
    if (dfs != NULL)
        o->ext->dfs = dfs;
    if (dsk != NULL) {
        o->ext->disk = dsk;
        m->disk_replicas++;
        m->disk_bytes += dsk->length;
    }
    /* A soft pin is not restored (upstream C.7): it is runtime state, and a
     * log written before it was dropped from the records may still carry
     * a TTL, which is ignored here.  The object is ordinary cache until a
     * write asks for SoftPinAction.ENABLE again. */
    if (r->has_group) {
        if ((mc_idx_obj_ext(o) == NULL) || ((o->ext->group_id = mc_str_dup(r->group_id)) == NULL)) {
            mc_idx_obj_free(m, o);
            return NULL;
        }
    }
    mc_mlist_init(&o->replicas);
    o->size              = r->size;
    o->lease_deadline_ms = 0; /* complete: the word holds the lease (none) */
    o->hard_pin          = r->hard_pin;
    o->complete          = 1;
    mc_chmap_insert(&m->objects, &o->node, o->hash);
    mc_mlist_init(&o->lru_link);
    mc_idx_obj_attach(o, reps, n);
    if (n > 0)
        mc_master_lru_touch(m, o); /* a disk- or DFS-only object stays off the LRU */
    mc_idx_group_sync(m, o);
    return o;

fail:
    mc_master_dfs_free(m, dfs, r->size);
    disk_destroy(dsk);
    return NULL;
}

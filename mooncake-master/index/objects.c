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
 * (obj_free_fenced).
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
 * Owns: the object index: puts, gets, upserts, removes, reservations,
 *   leases, the disk tier's bookkeeping (OFFLOAD_REPORT) and the replicas'
 *   lists.
 * May call: index/ (its own files), durability/ (a hook on every durable
 *   change), tiers/ (DFS and NoF replicas), events/ (a KV event per key).
 */
#include "config.h"

#include <inttypes.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regex_limit.h"
#include "durability/durability.h"
#include "dynrep.h"
#include "events/events.h"
#include "evict.h"
#include "index.h"
#include "master.h"
#include "placement.h"
#include "tenants.h"
#include "tiers/tiers.h"

typedef struct obj_lookup {
    mc_str_t tenant;
    mc_str_t key;
} obj_lookup_t;

static uint64_t obj_hash(mc_str_t tenant, mc_str_t key)
{
    return mc_hash_bytes(key.ptr, key.len, mc_hash_bytes(tenant.ptr, tenant.len, 0));
}

/* The index keeps the low 32 bits of it in the object (mc_chmap_t). */
static uint32_t obj_node_hash(const mc_cnode_t *node)
{
    return mc_container_of(node, mc_object_t, node)->hash;
}

static int obj_eq(const mc_cnode_t *node, const void *k)
{
    const mc_object_t *o = mc_container_of(node, mc_object_t, node);
    const obj_lookup_t *l = k;
    /* the key first: it is inline, the tenant is in the writer record */
    return mc_str_eq(mc_object_key(o), l->key) && mc_str_eq(mc_object_tenant(o), l->tenant);
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
static mc_writer_t *writer_get(mc_master_t *m, mc_str_t tenant, mc_uuid_t owner)
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

/* Drop a reference from writer_get(); the record goes with the last. */
static void writer_put(mc_master_t *m, mc_writer_t *w)
{
    if ((w == NULL) || (--w->refs > 0))
        return;
    mc_hmap_remove(&m->writers, &w->node);
    free(w);
}

static void resv_unlink(mc_master_t *m, mc_reservation_t *r);
static void resv_free(mc_master_t *m, mc_reservation_t *r);

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
    return mc_master_dfs_init(m);
}

size_t mc_master_objects_count(const mc_master_t *m)
{
    return m->objects.count;
}

/* The index hash of (@p tenant, @p key): m->key_memo's when it is that
 * very key (the same bytes in the same request), else computed. */
static uint32_t obj_hash_of(const mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    if ((key.ptr != NULL) && (key.ptr == m->key_memo.key.ptr) &&
        (key.len == m->key_memo.key.len) && (tenant.ptr == m->key_memo.tenant.ptr) &&
        (tenant.len == m->key_memo.tenant.len))
        return m->key_memo.hash;
    return (uint32_t)obj_hash(tenant, key);
}

static mc_object_t *obj_find(mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    obj_lookup_t l = {tenant, key};
    mc_cnode_t *n  = mc_chmap_find(&m->objects, obj_hash_of(m, tenant, key), &l, obj_eq);
    return n ? mc_container_of(n, mc_object_t, node) : NULL;
}

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
#define PIPE_AHEAD 4u

typedef struct key_pipe {
    mc_master_t *m;
    mc_str_t tenant;
    const mc_str_t *keys;
    uint32_t n;
    uint32_t *hash; /* NULL: no hints */
} key_pipe_t;

/* Start loading the first object of the chain of @p hash: the line that
 * holds its link and hash, and its key. */
static void obj_prefetch(const mc_master_t *m, uint32_t hash)
{
    const mc_cnode_t *n = mc_chmap_head(&m->objects, hash);
    if (n != NULL) {
        const mc_object_t *o = mc_container_of(n, mc_object_t, node);
        __builtin_prefetch(o);
        __builtin_prefetch(o->strs);
    }
}

static void pipe_init(key_pipe_t *p, mc_req_ctx_t *x, const mc_wire_str_list_t *keys)
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

static void pipe_at(key_pipe_t *p, uint32_t i)
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

static void pipe_done(key_pipe_t *p)
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
static void group_sync(mc_master_t *m, mc_object_t *o)
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
static mc_object_t *obj_alloc(mc_master_t *m, mc_str_t tenant, mc_str_t key)
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
static void replica_free(mc_master_t *m, mc_replica_t *r)
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
        replica_free(m, mc_container_of(pos, mc_replica_t, link));
}

/* free_replicas() for the memory replicas of @p o, rep0 included. */
static void obj_free_replicas(mc_master_t *m, mc_object_t *o)
{
    if (o->rep0.seg != NULL) {
        mc_master_segment_release(m, &o->rep0);
        o->rep0.seg = NULL; /* replica_free() of rep0, which is on no list */
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

static int obj_leased(const mc_object_t *o, uint64_t now_ms);

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
static void obj_free_fenced(mc_master_t *m, mc_object_t *o, uint8_t who)
{
    mc_replica_t *r;
    mc_object_for_each_replica(r, o)
        if (r->seg->gen_dirty < who)
            r->seg->gen_dirty = who;
    obj_free_replicas(m, o);
}

/* ---- disk replicas (docs/tiers.md) ---- */

static mc_disk_replica_t *obj_disk(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->disk : NULL;
}

/* The DFS replica of @p o (docs/tiers.md §6), or NULL. */
static mc_dfs_replica_t *obj_dfs(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->dfs : NULL;
}

/* 1 when the disk replica @p d may be read: its holder is known and not
 * a client restored from the operation log that has yet to remount (its
 * files are vouched for again once it is back, docs/tiers.md). */
static int disk_readable(mc_master_t *m, const mc_disk_replica_t *d)
{
    const mc_client_t *c = mc_master_client_find(m, d->holder);
    return (c != NULL) && !c->restored;
}

/* 1 when @p o keeps a copy outside memory that is readable once complete
 * (a disk or a DFS replica): losing its memory does not end it. */
static int obj_has_copy(const mc_object_t *o)
{
    return (obj_disk(o) != NULL) || (obj_dfs(o) != NULL);
}

/* A new disk replica (not attached to an object); NULL on OOM. */
static mc_disk_replica_t *disk_new(mc_master_t *m, mc_uuid_t holder, mc_str_t segment,
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

/* The upsert in progress on @p o (non-NULL exactly while o->upsert is
 * not NONE); it hangs off the ext, since few objects are being upserted. */
static mc_upsert_t *obj_up(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->up : NULL;
}

/* Forget the disk replica of @p o, if any.  The holder's bytes stay in
 * its bucket until its tier reclaims them; nobody is pointed there again. */
static void disk_free(mc_master_t *m, mc_object_t *o)
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
static mc_object_ext_t *obj_ext(mc_object_t *o)
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
    return obj_ext(o);
}

/* Free @p o and what hangs off it, once unlinked from everything (its
 * replicas, rep0 included, already gone). */
static void obj_free(mc_master_t *m, mc_object_t *o)
{
    /* the tenant's quota charge (tenants.h), taken with the size */
    if ((o->writer != NULL) && (o->size > 0))
        mc_master_tenant_charge(m, (mc_str_t){o->writer->tenant, o->writer->tenant_len},
                                -(int64_t)o->size);
    writer_put(m, o->writer);
    o->writer = NULL;
    disk_free(m, o);
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
static void obj_attach(mc_object_t *o, mc_replica_t **reps, uint32_t n)
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
static void upsert_clear(mc_master_t *m, mc_object_t *o)
{
    mc_upsert_t *up = obj_up(o);

    o->upsert = MC_UPSERT_NONE;
    if (up == NULL)
        return;
    mc_master_dfs_free(m, up->dfs, up->size); /* NULL once UPSERT_END took it */
    o->ext->up = NULL;
    writer_put(m, up->writer);
    mc_mlist_remove(&up->link);
    free(up->group_id);
    free(up);
}

/* Move the segment of every replica on @p list to at least generation
 * step @p who before their space is handed out again (obj_free_fenced). */
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
 * (obj_erase). */
static void upsert_drop(mc_master_t *m, mc_object_t *o, int writer_done)
{
    if (!writer_done)
        fence_replicas(&obj_up(o)->replicas, MC_SEG_GEN_WRITER);
    free_replicas(m, &obj_up(o)->replicas);
    upsert_clear(m, o);
}

/* Free every replica of @p o, unlink and free it.  The readable
 * replicas of an object that a reader still holds a lease on (a forced
 * remove, REMOVE_ALL / REMOVE_BY_REGEX with force) are free at once too,
 * under a later generation of their segments (obj_free_fenced, §5.8), and
 * so are those of a put still in progress, whose writer may still be
 * moving bytes: the holder lets the memory's next owner write only once
 * its writes are done. */
static void obj_erase(mc_master_t *m, mc_object_t *o)
{
    uint64_t now_ms = mc_now_ms();

    /* every disappearance passes here, so routers hear of each one; an
     * in-place upsert's object was announced by its earlier PutEnd
     * (docs/events.md §3) */
    if (o->complete || (o->upsert == MC_UPSERT_INPLACE))
        mc_kv_events_removed(m, o);
    if (o->complete)
        mc_durable_erase(m, o);
    if (mc_object_replicating(o))
        mc_master_tasks_object_gone(m, o);
    if (!o->complete)
        obj_free_fenced(m, o, MC_SEG_GEN_WRITER); /* its writer may still be at it */
    else if (obj_leased(o, now_ms))
        obj_free_fenced(m, o, MC_SEG_GEN_READER);
    else
        obj_free_replicas(m, o);
    if (obj_up(o) != NULL)
        upsert_drop(m, o, 0); /* its upserter may still be at it */
    else
        upsert_clear(m, o);
    mc_chmap_remove(&m->objects, &o->node);
    mc_mlist_remove(&o->pending_link);
    mc_mlist_remove(&o->lru_link);
    group_leave(m, o);
    obj_free(m, o);
}

/*
 * @p o lost memory replicas: erase it when nothing readable is left, else
 * log its new state.  A disk-only object leaves the LRU, since evicting it
 * would free no memory.  Returns 1 when @p o was erased.
 */
static int obj_settle(mc_master_t *m, mc_object_t *o)
{
    if (mc_object_has_replicas(o)) {
        mc_durable_object(m, o);
        return 0;
    }
    if (!o->complete || !obj_has_copy(o)) {
        mc_debug("object %.*s lost its last replica", (int)MC_MIN(o->key_len, 200u),
                 mc_object_key(o).ptr);
        obj_erase(m, o);
        return 1;
    }
    mc_mlist_remove(&o->lru_link);
    o->ext->disk_hits = 0; /* disk-only again: count afresh */
    mc_durable_object(m, o);
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
            writer_put(m, obj_up(o)->writer);
            free(obj_up(o)->group_id);
            free(obj_up(o));
        }
        mc_chmap_remove(&m->objects, &o->node);
        obj_free(m, o);
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
        resv_unlink(m, r);
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

void mc_master_replica_drop(mc_master_t *m, mc_replica_t *r)
{
    mc_object_t *o = mc_replica_obj(r);
    int fresh      = r->fresh;
    replica_free(m, r);
    if ((o != NULL) && fresh) {
        /* An upsert lost its last new buffer: the old value stays, and the
         * writer's UPSERT_END will answer OBJECT_NOT_FOUND (§5.11). */
        if ((obj_up(o) != NULL) && mc_mlist_empty(&obj_up(o)->replicas))
            mc_debug("upsert of %.*s lost its last new replica", (int)MC_MIN(o->key_len, 200u),
                     mc_object_key(o).ptr);
        return;
    }
    if (o != NULL)
        (void)obj_settle(m, o);
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
                resv_free(m, r);
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
static void obj_discard(mc_master_t *m, mc_object_t *o)
{
    uint64_t release = o->put_start_ms + (uint64_t)m->cfg->put_start_release_timeout_sec * 1000u;
    obj_defer_replicas(m, o, release);
    if (obj_dfs(o) != NULL) {
        mc_master_dfs_defer(m, obj_dfs(o), o->size, release);
        o->ext->dfs = NULL;
    }
    obj_erase(m, o);
}

/* Preempt a stale fresh-buffer upsert the same way; the old value stays. */
static void upsert_discard(mc_master_t *m, mc_object_t *o)
{
    mc_upsert_t *up  = obj_up(o);
    uint64_t release = up->start_ms + (uint64_t)m->cfg->put_start_release_timeout_sec * 1000u;
    defer_replicas(m, &up->replicas, release);
    mc_master_dfs_defer(m, up->dfs, up->size, release);
    up->dfs = NULL;
    upsert_clear(m, o);
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
        resv_free(m, r);
    }

    mc_mlist_for_each_safe(pos, tmp, &m->discarded)
    {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        if (r->release_ms <= now_ms)
            replica_free(m, r);
    }
    mc_master_dfs_tick(m, now_ms);
    while (!mc_mlist_empty(&m->pending)) {
        mc_object_t *o = mc_container_of(m->pending.next, mc_object_t, pending_link);
        if (o->put_start_ms + release > now_ms)
            break;
        mc_info("releasing abandoned put of key '%.*s' (no PutEnd within %" PRId64 " s)",
                (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr,
                m->cfg->put_start_release_timeout_sec);
        obj_erase(m, o);
    }
    while (!mc_mlist_empty(&m->upserting)) {
        mc_object_t *o = mc_container_of(m->upserting.next, mc_upsert_t, link)->obj;
        if (obj_up(o)->start_ms + release > now_ms)
            break;
        mc_info("releasing abandoned upsert of key '%.*s' (no UpsertEnd within %" PRId64 " s)",
                (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr,
                m->cfg->put_start_release_timeout_sec);
        upsert_drop(m, o, 0);
    }
}

/* ---- helpers ------------------------------------------------------------------ */

static int obj_leased(const mc_object_t *o, uint64_t now_ms)
{
    return o->lease_deadline_ms > now_ms;
}

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
static void obj_grant_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms)
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

static void fill_wire_replica(mc_wire_replica_t *w, const mc_replica_t *r, uint64_t size)
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

/* The COMPLETE replicas of @p o into @p out (arena storage). */
static int32_t list_complete(mc_req_ctx_t *x, const mc_object_t *o, mc_wire_replica_list_t *out)
{
    const mc_replica_t *r;
    const mc_disk_replica_t *d = obj_disk(o);
    const mc_dfs_replica_t *f  = obj_dfs(o);
    uint32_t n = mc_object_replica_count(o) + (d != NULL) + (f != NULL);

    out->n = 0;
    out->v = n ? mc_arena_calloc(x->arena, n, sizeof(*out->v)) : NULL;
    if ((n > 0) && (out->v == NULL))
        return MC_INTERNAL_ERROR;
    /* memory first, then NoF (docs/tiers.md §8): readers take the first */
    for (int nof = 0; nof <= 1; nof++) {
        mc_object_for_each_replica(r, o)
        {
            /* a restored segment's bytes are not vouched for until its
             * owner remounts it */
            if ((r->status == MC_REPLICA_COMPLETE) && (r->seg->state != MC_SEG_AWAITING) &&
                ((int)r->seg->nof == nof))
                fill_wire_replica(&out->v[out->n++], r, o->size);
        }
    }
    if ((d != NULL) && disk_readable(x->m, d)) {
        /* last: readers prefer memory (docs/tiers.md) */
        mc_master_disk_to_wire(&out->v[out->n++], d);
    }
    if ((f != NULL) && (f->status == MC_REPLICA_COMPLETE))
        mc_master_dfs_to_wire(x, &out->v[out->n++], f, o->size);
    return MC_OK;
}

void mc_master_disk_to_wire(mc_wire_replica_t *w, const mc_disk_replica_t *d)
{
    w->id         = d->id;
    w->status     = MC_REPLICA_COMPLETE;
    w->type       = MC_WIRE_REPLICA_DISK;
    w->addr       = d->offset;
    w->size       = d->length;
    w->segment    = mc_str_from_cstr(d->segment);
    w->segment_id = d->holder;
    w->file_path  = mc_str_from_cstr(d->path);
    w->crc        = d->crc;
}

/* Complete with a replica that may be read (not only on segments restored
 * from the operation log and not remounted yet). */
static int obj_readable(mc_master_t *m, const mc_object_t *o)
{
    const mc_replica_t *r;
    if (!o->complete)
        return 0;
    if ((obj_dfs(o) != NULL) || ((obj_disk(o) != NULL) && disk_readable(m, obj_disk(o))))
        return 1;
    mc_object_for_each_replica(r, o)
    {
        if (r->seg->state != MC_SEG_AWAITING)
            return 1;
    }
    return 0;
}

/* §5.5: what a ReplicateConfig may ask for.  Malformed requests first
 * (-600), then what is well formed but not built yet (-1012). */
static int32_t config_check(mc_req_ctx_t *x, const mc_wire_config_t *c)
{
    mc_master_t *m = x->m;
    if (c->replica_num == 0)
        return MC_INVALID_PARAMS;
    if (c->dfs_replica_num > 1)
        return MC_INVALID_PARAMS;
    if (c->soft_pin_action > MC_SOFT_PIN_DISABLE)
        return MC_INVALID_PARAMS;
    if (c->has_soft_pin_ttl) {
        if (c->soft_pin_action != MC_SOFT_PIN_ENABLE)
            return MC_INVALID_PARAMS;
        if (c->soft_pin_ttl_ms > m->cfg->max_kv_soft_pin_ttl)
            return MC_INVALID_PARAMS;
    }
    if (c->prefer_alloc_in_same_node && (c->replica_num != 1))
        return MC_INVALID_PARAMS;
    /* NoF segments to prefer name where nof replicas go: none asked, a
     * preference would be ignored */
    if ((c->preferred_nof_segments.n > 0) && (c->nof_replica_num == 0))
        return MC_INVALID_PARAMS;
    return mc_master_dfs_config_check(m, x->tenant, c);
}

/* prefer_alloc_in_same_node: the writer, when it mounted segments. */
static const mc_client_t *writer_of(mc_master_t *m, mc_uuid_t client_id,
                                    const mc_wire_config_t *cfg)
{
    return cfg->prefer_alloc_in_same_node ? mc_master_client_find(m, client_id) : NULL;
}

/* --allocation_strategy=local_first: the writer of a single-replica put,
 * whose host comes first (placement.h). */
static const mc_client_t *local_first_writer(mc_master_t *m, mc_uuid_t client_id,
                                             const mc_wire_config_t *cfg)
{
    if ((cfg->replica_num != 1) || (m->alloc_strategy != MC_ALLOC_LOCAL_FIRST))
        return NULL;
    return mc_master_client_find(m, client_id);
}

/* One placement attempt of place(), repeated by inline eviction. */
typedef struct place_try {
    mc_master_t *m;
    uint64_t length;
    uint32_t want;
    mc_str_t preferred;
    const mc_client_t *local;
    const mc_client_t *writer; /* local_first, else NULL */
    mc_str_t key;              /* empty for a reservation (no key yet) */
    mc_replica_t **reps;
} place_try_t;

static uint32_t place_try(void *arg)
{
    place_try_t *p = arg;
    return mc_master_segments_allocate_keyed(p->m, p->length, p->want, p->preferred, p->local,
                                             p->writer, p->key, p->reps);
}

static void release_placed(mc_master_t *m, mc_replica_t **reps, uint32_t n);

/* Allocate the replicas of one write (arena array in *reps_p); returns
 * how many were placed, 0 when none fitted even after evicting every
 * evictable object but @p keep (evict.h) -- or at once, without evicting,
 * when @p evict is 0. */
static uint32_t place_ex(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, uint64_t length,
                         const mc_wire_config_t *cfg, const mc_object_t *keep, int evict,
                         mc_replica_t ***reps_p, int32_t *st_p)
{
    mc_master_t *m = x->m;
    place_try_t p;
    uint32_t want, n;

    *reps_p = NULL;
    if (m->nseg == 0) {
        *st_p = MC_NO_AVAILABLE_HANDLE;
        return 0;
    }
    want    = MC_MIN(cfg->replica_num, m->nseg);
    /* room for the NoF replicas after the memory ones (nof.c) */
    *reps_p = mc_arena_calloc(x->arena, (size_t)want + MC_MIN(cfg->nof_replica_num, m->nnof),
                              sizeof(**reps_p));
    if (*reps_p == NULL) {
        *st_p = MC_INTERNAL_ERROR;
        return 0;
    }
    p.m         = m;
    p.length    = length;
    p.want      = want;
    p.preferred = cfg->preferred_segment;
    p.local     = writer_of(m, client_id, cfg);
    p.writer    = local_first_writer(m, client_id, cfg);
    p.key       = key;
    p.reps      = *reps_p;
    n           = place_try(&p);
    if ((n == 0) && evict)
        n = mc_master_evict_until(m, x->now_ms, length, keep, place_try, &p);
    if ((n > 0) && (cfg->nof_replica_num > 0)) {
        /* best effort like memory, but none at all of the NoF replicas
         * asked for fails the write: the caller wanted a copy off memory */
        uint32_t k = mc_master_nof_place(m, x->now_ms, length, cfg, keep, *reps_p + n);
        if (k == 0) {
            mc_debug("no NoF segment has room for %" PRIu64 " bytes", length);
            release_placed(m, *reps_p, n);
            n = 0;
        }
        n += k;
    }
    *st_p = n ? MC_OK : MC_NO_AVAILABLE_HANDLE;
    return n;
}

static uint32_t place(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, uint64_t length,
                      const mc_wire_config_t *cfg, const mc_object_t *keep,
                      mc_replica_t ***reps_p, int32_t *st_p)
{
    return place_ex(x, client_id, key, length, cfg, keep, 1, reps_p, st_p);
}

/* Undo place(): give back the @p n replicas it allocated. */
static void release_placed(mc_master_t *m, mc_replica_t **reps, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        mc_master_segment_release(m, reps[i]);
        free(reps[i]);
    }
}

/* Copy of a group id ("" = ungrouped → NULL in *out); -1 on OOM. */
static int dup_group(const mc_str_t *group, char **out)
{
    *out = NULL;
    if ((group == NULL) || (group->len == 0))
        return 0;
    *out = malloc((size_t)group->len + 1);
    if (*out == NULL)
        return -1;
    memcpy(*out, group->ptr, group->len);
    (*out)[group->len] = '\0';
    return 0;
}

static mc_object_t *obj_create(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key,
                               uint64_t length, const mc_wire_config_t *cfg,
                               const mc_str_t *group, mc_replica_t **reps, uint32_t n,
                               mc_dfs_replica_t *dfs, mc_wire_replica_list_t *out);

/*
 * One PUT_START after config_check: @p group is the key's group id ("" or
 * NULL = none), @p out receives the replica descriptors.
 */
/* May a new put take @p key?  OBJECT_ALREADY_EXISTS while it exists or
 * its put is younger than the discard timeout; a stale put is preempted. */
static int32_t key_claim(mc_req_ctx_t *x, mc_str_t key)
{
    mc_master_t *m = x->m;
    mc_object_t *o = obj_find(m, x->tenant, key);

    if (o != NULL) {
        uint64_t discard = (uint64_t)m->cfg->put_start_discard_timeout_sec * 1000u;
        if (o->complete || (x->now_ms < o->put_start_ms + discard))
            return MC_OBJECT_ALREADY_EXISTS;
        mc_info("preempting stale put of key '%.*s'", (int)MC_MIN(key.len, 200u), key.ptr);
        obj_discard(m, o);
    }
    return MC_OK;
}

static int32_t put_start_one(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, uint64_t length,
                             const mc_wire_config_t *cfg, const mc_str_t *group,
                             mc_wire_replica_list_t *out)
{
    mc_object_t *o;
    mc_replica_t **reps;
    mc_dfs_replica_t *dfs = NULL;
    uint32_t n;
    int32_t st;

    out->n = 0;
    out->v = NULL;
    if ((length == 0) || (x->tenant.len > UINT16_MAX)) /* rpc.c caps tenants far lower */
        return MC_INVALID_PARAMS;

    st = key_claim(x, key);
    if (st == MC_OK) /* --enable_multi_tenants: registration and quota */
        st = mc_master_tenant_admit(x->m, x->tenant, length);
    if (st != MC_OK)
        return st;

    n = place(x, client_id, key, length, cfg, NULL, &reps, &st);
    if (n == 0)
        return st;
    if (cfg->dfs_replica_num > 0) {
        /* the DFS copy is placed with the memory ones (docs/tiers.md §6) */
        dfs = mc_master_dfs_new(x->m, key.len, length, cfg->replica_num, &st);
        if (dfs == NULL) {
            release_placed(x->m, reps, n);
            return st;
        }
    }
    o = obj_create(x, client_id, key, length, cfg, group, reps, n, dfs, out);
    return (o != NULL) ? MC_OK : MC_INTERNAL_ERROR;
}

/*
 * The object of a new put of @p key (known absent) on the @p n placed
 * replicas @p reps and the DFS extent @p dfs (or NULL), incomplete (on
 * m->pending); their descriptors go to @p out when it is not NULL.  On
 * OOM the replicas and the extent are given back and NULL returned.
 */
static mc_object_t *obj_create(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key,
                               uint64_t length, const mc_wire_config_t *cfg,
                               const mc_str_t *group, mc_replica_t **reps, uint32_t n,
                               mc_dfs_replica_t *dfs, mc_wire_replica_list_t *out)
{
    mc_master_t *m = x->m;
    mc_object_t *o;

    if (out != NULL) {
        out->v = mc_arena_calloc(x->arena, n + (dfs != NULL), sizeof(*out->v));
        if (out->v == NULL)
            goto oom;
    }

    o = obj_alloc(m, x->tenant, key);
    if (o == NULL)
        goto oom;
    o->writer = writer_get(m, x->tenant, client_id);
    if (o->writer == NULL) {
        obj_free(m, o);
        goto oom;
    }
    if ((dfs != NULL) && (obj_ext(o) == NULL)) {
        obj_free(m, o);
        goto oom;
    }
    if ((cfg->soft_pin_action == MC_SOFT_PIN_ENABLE) || ((group != NULL) && (group->len > 0))) {
        if ((obj_ext(o) == NULL) || (dup_group(group, &o->ext->group_id) != 0)) {
            obj_free(m, o);
            goto oom;
        }
        if (cfg->soft_pin_action == MC_SOFT_PIN_ENABLE)
            o->ext->soft_pin_ttl_ms = cfg->has_soft_pin_ttl ? cfg->soft_pin_ttl_ms
                                                            : m->cfg->default_kv_soft_pin_ttl;
    }
    mc_mlist_init(&o->replicas);
    o->size         = length;
    mc_master_tenant_charge(m, x->tenant, (int64_t)length); /* given back by obj_free */
    o->put_start_ms = x->now_ms;
    o->hard_pin     = cfg->with_hard_pin ? 1 : 0;
    mc_chmap_insert(&m->objects, &o->node, o->hash);
    mc_mlist_init(&o->pending_link);
    mc_mlist_insert_tail(&m->pending, &o->pending_link); /* m->lru at PUT_END */

    obj_attach(o, reps, n);
    for (uint32_t i = 0; (i < n) && (out != NULL); i++)
        fill_wire_replica(&out->v[i], reps[i], length);
    if (out != NULL)
        out->n = n;
    if (dfs != NULL) {
        o->ext->dfs = dfs;
        if (out != NULL)
            mc_master_dfs_to_wire(x, &out->v[out->n++], dfs, length);
    }
    if (n < cfg->replica_num)
        mc_debug("put of key '%.*s': %" PRIu32 " of %" PRIu32 " replicas placed",
                 (int)MC_MIN(key.len, 200u), key.ptr, n, cfg->replica_num);
    return o;

oom:
    release_placed(m, reps, n);
    mc_master_dfs_free(m, dfs, length);
    return NULL;
}

/* UPSERT_END: the config given at UPSERT_START takes effect (§5.11). */
static void apply_upsert_config(mc_object_t *o, uint64_t now_ms)
{
    mc_upsert_t *up    = obj_up(o);
    mc_object_ext_t *e = o->ext; /* upsert_stage made it if anything is set */

    o->hard_pin = up->hard_pin;
    switch (up->pin_action) {
    case MC_SOFT_PIN_ENABLE:
        if (e != NULL) {
            e->soft_pin_ttl_ms      = up->pin_ttl_ms;
            e->soft_pin_deadline_ms = up->pin_ttl_ms ? now_ms + up->pin_ttl_ms : 0;
        }
        break;
    case MC_SOFT_PIN_DISABLE:
        if (e != NULL) {
            e->soft_pin_ttl_ms      = 0;
            e->soft_pin_deadline_ms = 0;
        }
        break;
    default: /* PRESERVE: keep the old deadline */
        break;
    }
    if (up->has_group && (e != NULL)) {
        free(e->group_id);
        e->group_id  = up->group_id;
        up->group_id = NULL;
    }
}

/* Fresh-buffer UPSERT_END: the new buffers replace the old ones.  Old
 * buffers a reader may still be copying from (lease active) are freed
 * now under a later generation of their segments (obj_free_fenced). */
static void upsert_swap(mc_master_t *m, mc_object_t *o, uint64_t now_ms)
{
    mc_mlist_t *pos, *tmp;

    if (obj_leased(o, now_ms))
        obj_free_fenced(m, o, MC_SEG_GEN_READER);
    else
        obj_free_replicas(m, o);
    mc_mlist_for_each_safe(pos, tmp, &obj_up(o)->replicas)
    {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        mc_mlist_remove(&r->link);
        r->fresh  = 0;
        r->status = MC_REPLICA_COMPLETE;
        mc_mlist_insert_tail(&o->replicas, &r->link);
    }
    /* the old DFS record goes with the old value; a reader still on it
     * finds its checks fail once the extent is rewritten (a miss) */
    mc_master_dfs_free(m, o->ext->dfs, o->size);
    o->ext->dfs       = obj_up(o)->dfs;
    obj_up(o)->dfs    = NULL;
    if (o->ext->dfs != NULL)
        o->ext->dfs->status = MC_REPLICA_COMPLETE;
    mc_master_tenant_charge(m, (mc_str_t){o->writer->tenant, o->writer->tenant_len},
                            (int64_t)obj_up(o)->size - (int64_t)o->size);
    o->size              = obj_up(o)->size;
    writer_put(m, o->writer); /* the upserter's reference moves to the object */
    o->writer            = obj_up(o)->writer;
    obj_up(o)->writer        = NULL;
    o->lease_deadline_ms = 0; /* as after PUT_END: the new value has no reader */
    apply_upsert_config(o, now_ms);
    upsert_clear(m, o);
    mc_master_lru_touch(m, o);
}

/* Every replica of the incomplete @p o COMPLETE: readable from now on. */
static void obj_complete(mc_req_ctx_t *x, mc_object_t *o)
{
    mc_replica_t *r;

    mc_object_for_each_replica(r, o)
        r->status = MC_REPLICA_COMPLETE;
    if (obj_dfs(o) != NULL)
        obj_dfs(o)->status = MC_REPLICA_COMPLETE;
    o->complete          = 1;
    o->lease_deadline_ms = 0; /* was its PutStart time: no reader yet */
    mc_mlist_remove(&o->pending_link);
    mc_master_lru_touch(x->m, o);
}

/* The end of a new put (PUT_END, PUT_COMMIT): @p o readable, its soft pin
 * running, in its group, in the operation log. */
static void obj_publish(mc_req_ctx_t *x, mc_object_t *o)
{
    obj_complete(x, o);
    /* The soft pin starts when the object becomes readable; a fresh object
     * carries no lease (upstream grants a lease of 0 at PutEnd). */
    if ((o->ext != NULL) && (o->ext->soft_pin_ttl_ms > 0))
        o->ext->soft_pin_deadline_ms = x->now_ms + o->ext->soft_pin_ttl_ms;
    group_sync(x->m, o);
    mc_durable_object(x->m, o);
    mc_kv_events_stored(x->m, o);
}

/* PUT_END, and UPSERT_END when @p upsert. */
static int32_t end_one(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, int upsert)
{
    mc_master_t *m = x->m;
    mc_object_t *o = obj_find(m, x->tenant, key);

    if (o == NULL)
        return MC_OBJECT_NOT_FOUND;
    if (upsert && (o->upsert == MC_UPSERT_FRESH)) {
        if (!mc_uuid_eq(obj_up(o)->writer->owner, client_id))
            return MC_ILLEGAL_CLIENT;
        if (mc_mlist_empty(&obj_up(o)->replicas)) {
            /* every new buffer went away with its segment */
            upsert_clear(m, o);
            return MC_OBJECT_NOT_FOUND;
        }
        upsert_swap(x->m, o, x->now_ms);
        group_sync(x->m, o);
        mc_durable_object(m, o);
        mc_kv_events_stored(m, o);
        return MC_OK;
    }
    if (upsert && o->complete && (o->upsert == MC_UPSERT_NONE)) {
        /* No upsert of this key is in progress here: this master never saw
         * its start (it took over from one that did: an upsert in progress
         * is not carried over), or it was dropped.  Its bytes are not the
         * value, and answering OK would tell the writer they were. */
        return MC_OBJECT_NOT_FOUND;
    }
    if (!mc_uuid_eq(mc_object_owner(o), client_id))
        return MC_ILLEGAL_CLIENT;
    if (o->complete)
        return MC_OK; /* a retried PutEnd */
    if (o->upsert != MC_UPSERT_INPLACE) {
        obj_publish(x, o);
        return MC_OK;
    }
    obj_complete(x, o);
    apply_upsert_config(o, x->now_ms);
    upsert_clear(m, o);
    group_sync(x->m, o);
    mc_durable_object(m, o);
    mc_kv_events_stored(m, o);
    return MC_OK;
}

/* PUT_REVOKE, and UPSERT_REVOKE when @p upsert. */
static int32_t revoke_one(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, int upsert)
{
    mc_object_t *o = obj_find(x->m, x->tenant, key);
    if (o == NULL)
        return MC_OBJECT_NOT_FOUND;
    if (upsert && (o->upsert == MC_UPSERT_FRESH)) {
        /* the revoking client is the writer: nothing writes there now */
        if (!mc_uuid_eq(obj_up(o)->writer->owner, client_id))
            return MC_ILLEGAL_CLIENT;
        upsert_drop(x->m, o, 1);
        return MC_OK;
    }
    if (!mc_uuid_eq(mc_object_owner(o), client_id))
        return MC_ILLEGAL_CLIENT;
    if (o->complete)
        return MC_INVALID_WRITE;
    /* a new put, or an in-place upsert whose old bytes are half
     * overwritten: either way the object goes */
    obj_erase(x->m, o);
    return MC_OK;
}

static int32_t get_one(mc_req_ctx_t *x, mc_str_t key, uint64_t *size_p,
                       mc_wire_replica_list_t *out)
{
    mc_object_t *o = obj_find(x->m, x->tenant, key);
    int32_t st;

    out->n = 0;
    out->v = NULL;
    if (o == NULL)
        return MC_OBJECT_NOT_FOUND;
    if (!o->complete)
        return MC_REPLICA_IS_NOT_READY;
    st = list_complete(x, o, out);
    if (st != MC_OK)
        return st;
    if (out->n == 0)
        return MC_OBJECT_NOT_FOUND; /* only on segments not remounted since a restart */
    obj_grant_lease(x->m, o, x->now_ms);
    mc_master_dynrep_hit(x, o); /* --dynamic_replication_mode */
    if (x->m->cfg->promotion_on_hit && !mc_object_has_replicas(o) && (obj_disk(o) != NULL) &&
        disk_readable(x->m, obj_disk(o)))
        mc_master_promote_hit(x, o);
    *size_p = o->size;
    return MC_OK;
}

/* 1 when readable (and leased), 0 otherwise. */
static int32_t exist_one(mc_req_ctx_t *x, mc_str_t key)
{
    mc_object_t *o = obj_find(x->m, x->tenant, key);
    if ((o == NULL) || !obj_readable(x->m, o))
        return 0;
    obj_grant_lease(x->m, o, x->now_ms);
    return 1;
}

/* What REMOVE_ALL and REMOVE_BY_REGEX take without force: complete,
 * not being upserted, unleased. */
static int removable(const mc_object_t *o, uint64_t now_ms)
{
    return o->complete && (o->upsert == MC_UPSERT_NONE) && !obj_leased(o, now_ms) &&
           !mc_object_replicating(o);
}

/*
 * Erase the objects of the tenant that are removable (all of them with
 * @p force) and whose key @p match accepts (every key when NULL); returns
 * how many went.  *@p kept_p counts the objects of the tenant left that
 * KV events announced (complete, or upserted in place).
 */
static int64_t remove_where(mc_req_ctx_t *x, int force, int (*match)(mc_str_t key, void *arg),
                            void *arg, int64_t *kept_p)
{
    mc_chmap_iter_t it;
    mc_cnode_t *n = mc_chmap_first(&x->m->objects, &it);
    int64_t count = 0;

    *kept_p = 0;
    while (n != NULL) {
        mc_object_t *o = mc_container_of(n, mc_object_t, node);
        n              = mc_chmap_next(&x->m->objects, &it);
        if (!mc_str_eq(mc_object_tenant(o), x->tenant))
            continue;
        if (!force && !removable(o, x->now_ms)) {
            *kept_p += o->complete || (o->upsert == MC_UPSERT_INPLACE);
            continue;
        }
        if ((match != NULL) && !match(mc_object_key(o), arg)) {
            *kept_p += o->complete || (o->upsert == MC_UPSERT_INPLACE);
            continue;
        }
        obj_erase(x->m, o);
        count++;
    }
    return count;
}

static int32_t remove_one(mc_req_ctx_t *x, mc_str_t key, int force)
{
    mc_object_t *o = obj_find(x->m, x->tenant, key);
    if (o == NULL)
        return MC_OBJECT_NOT_FOUND;
    if (!force) {
        if (obj_leased(o, x->now_ms))
            return MC_OBJECT_HAS_LEASE;
        if (!o->complete || (o->upsert != MC_UPSERT_NONE))
            return MC_REPLICA_IS_NOT_READY;
        if (mc_object_replicating(o))
            return MC_OBJECT_HAS_REPLICATION_TASK;
    }
    obj_erase(x->m, o);
    return MC_OK;
}

/* ---- RPC handlers --------------------------------------------------------------- */

/* put_start_one or upsert_start_one. */
typedef int32_t (*start_one_fn)(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key,
                                uint64_t length, const mc_wire_config_t *cfg,
                                const mc_str_t *group, mc_wire_replica_list_t *out);

/* PUT_START and UPSERT_START: a single-key config carries at most one
 * group id. */
static int32_t start_single(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, uint64_t length,
                            const mc_wire_config_t *cfg, start_one_fn start,
                            mc_wire_replica_list_t *out)
{
    int32_t st = config_check(x, cfg);
    const mc_str_t *group = NULL;

    if (st != MC_OK)
        return st;
    if (cfg->has_group_ids) {
        if (cfg->group_ids.n != 1)
            return MC_INVALID_PARAMS;
        group = &cfg->group_ids.v[0];
    }
    return start(x, client_id, key, length, cfg, group, out);
}

/* §5.5 PUT_START */
int32_t mc_master_put_start(mc_req_ctx_t *x, const mc_wire_put_start_req_t *req,
                            mc_wire_put_start_resp_t *resp)
{
    return start_single(x, req->client_id, req->key, req->length, &req->config, put_start_one,
                        &resp->replicas);
}

/* §5.6 PUT_END */
int32_t mc_master_put_end(mc_req_ctx_t *x, const mc_wire_put_end_req_t *req)
{
    return end_one(x, req->client_id, req->key, 0);
}

/* §5.6 PUT_REVOKE */
int32_t mc_master_put_revoke(mc_req_ctx_t *x, const mc_wire_put_revoke_req_t *req)
{
    return revoke_one(x, req->client_id, req->key, 0);
}

/* ---- put reservations (§5.18) ---------------------------------------------------
 *
 * A reservation is a PUT_START whose key comes later: place() ran, the
 * buffers belong to the writer, and PUT_COMMIT turns them into a complete
 * object in one step (obj_create + obj_publish, as PUT_START + PUT_END
 * would).  The writer fills them before it commits, so a reservation's
 * space must never be reused while the writer may still be writing there:
 * it goes back only at its deadline (the writer stops using it at half its
 * TTL), on CLIENT_CLOSE, or with its segment (whose owner is gone).
 */

static int resv_eq(const mc_hnode_t *node, const void *k)
{
    return mc_container_of(node, mc_reservation_t, node)->id == *(const uint64_t *)k;
}

static uint64_t resv_hash(uint64_t id)
{
    return mc_hash_bytes(&id, sizeof(id), 0);
}

/* Unlink @p r; its replicas stay with the caller. */
static void resv_unlink(mc_master_t *m, mc_reservation_t *r)
{
    mc_hmap_remove(&m->reservations, &r->node);
    mc_mlist_remove(&r->link);
    writer_put(m, r->writer);
    free(r);
}

/* Unlink @p r and give its space back.  Its writer may still be filling
 * it (a write held up past the deadline by a slow link, a writer whose
 * client expired but lives on): each segment moves to its next fence
 * before any of that space is handed out again (obj_free_fenced). */
static void resv_free(mc_master_t *m, mc_reservation_t *r)
{
    for (uint32_t i = 0; i < r->n; i++)
        r->reps[i]->seg->gen_dirty = MC_SEG_GEN_WRITER;
    release_placed(m, r->reps, r->n);
    resv_unlink(m, r);
}

/* The caller's reservation @p id, or NULL. */
static mc_reservation_t *resv_find(mc_req_ctx_t *x, mc_uuid_t client_id, uint64_t id)
{
    mc_hnode_t *n = mc_hmap_find(&x->m->reservations, resv_hash(id), &id, resv_eq);
    mc_reservation_t *r;
    mc_str_t t;

    if (n == NULL)
        return NULL;
    r = mc_container_of(n, mc_reservation_t, node);
    t = (mc_str_t){r->writer->tenant, r->writer->tenant_len};
    if (!mc_uuid_eq(r->writer->owner, client_id) || !mc_str_eq(t, x->tenant))
        return NULL;
    return r;
}

/*
 * A new reservation of @p length bytes placed for @p cfg (inline eviction
 * only when @p evict), its descriptors in @p out.  MC_OK, or why not.
 */
static int32_t resv_grant(mc_req_ctx_t *x, mc_uuid_t client_id, uint64_t length,
                          const mc_wire_config_t *cfg, int evict, uint64_t *id_p,
                          mc_wire_replica_list_t *out)
{
    mc_master_t *m = x->m;
    mc_reservation_t *r;
    mc_replica_t **reps;
    uint32_t n;
    int32_t st;

    out->n = 0;
    out->v = NULL;
    n      = place_ex(x, client_id, (mc_str_t){"", 0}, length, cfg, NULL, evict, &reps, &st);
    if (n == 0)
        return st;
    out->v = mc_arena_calloc(x->arena, n, sizeof(*out->v));
    r      = malloc(sizeof(*r) + (size_t)n * sizeof(r->reps[0]));
    if ((out->v == NULL) || (r == NULL))
        goto oom;
    memset(r, 0, sizeof(*r));
    r->writer = writer_get(m, x->tenant, client_id);
    if (r->writer == NULL)
        goto oom;
    do
        r->id = m->next_resv_id++;
    while ((r->id == 0) || (mc_hmap_find(&m->reservations, resv_hash(r->id), &r->id,
                                         resv_eq) != NULL));
    r->length      = length;
    r->deadline_ms = x->now_ms + (uint64_t)m->cfg->put_reservation_ttl_sec * 1000u;
    r->n           = n;
    for (uint32_t i = 0; i < n; i++) {
        r->reps[i] = reps[i];
        fill_wire_replica(&out->v[i], reps[i], length);
    }
    out->n = n;
    if (mc_hmap_insert(&m->reservations, &r->node, resv_hash(r->id)) != 0) {
        mc_hmap_remove(&m->reservations, &r->node);
        writer_put(m, r->writer);
        goto oom;
    }
    mc_mlist_insert_tail(&m->resv_order, &r->link);
    *id_p = r->id;
    return MC_OK;

oom:
    free(r);
    out->n = 0;
    release_placed(m, reps, n);
    return MC_INTERNAL_ERROR;
}

/* §5.18 PUT_RESERVE */
int32_t mc_master_put_reserve(mc_req_ctx_t *x, const mc_wire_put_reserve_req_t *req,
                              mc_wire_put_reserve_resp_t *resp)
{
    int32_t st;

    if (x->m->cfg->put_reservation_ttl_sec == 0)
        return MC_NOT_SUPPORTED;
    st = config_check(x, &req->config);
    if (st != MC_OK)
        return st;
    /* reservations hold memory replicas only: a DFS extent belongs to a
     * key from the start (docs/tiers.md §6) and NoF replicas have their
     * own pool; such puts take PUT_START */
    if ((req->length == 0) || (x->tenant.len > UINT16_MAX) ||
        (req->config.dfs_replica_num > 0) || (req->config.nof_replica_num > 0))
        return MC_INVALID_PARAMS;
    st = resv_grant(x, req->client_id, req->length, &req->config, 1, &resp->reservation_id,
                    &resp->replicas);
    if (st == MC_OK)
        resp->ttl_ms = (uint64_t)x->m->cfg->put_reservation_ttl_sec * 1000u;
    return st;
}

/* §5.18 PUT_COMMIT */
int32_t mc_master_put_commit(mc_req_ctx_t *x, const mc_wire_put_commit_req_t *req,
                             mc_wire_put_commit_resp_t *resp)
{
    mc_master_t *m = x->m;
    const mc_str_t *group = NULL;
    mc_reservation_t *r;
    mc_replica_t **reps;
    mc_object_t *o;
    uint64_t length;
    uint32_t n;
    int32_t st = config_check(x, &req->config);

    if (st != MC_OK)
        return st;
    if ((req->config.dfs_replica_num > 0) || (req->config.nof_replica_num > 0))
        return MC_INVALID_PARAMS; /* reservations hold memory only (PUT_RESERVE) */
    if (req->config.has_group_ids) {
        if (req->config.group_ids.n != 1)
            return MC_INVALID_PARAMS;
        group = &req->config.group_ids.v[0];
    }
    r = resv_find(x, req->client_id, req->reservation_id);
    if (r == NULL)
        return MC_OBJECT_NOT_FOUND;
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->reps[i]->seg->state != MC_SEG_OK) {
            /* draining: it takes no new object; the writer puts anew */
            resv_free(m, r);
            return MC_OBJECT_NOT_FOUND;
        }
    }
    st = key_claim(x, req->key);
    if (st == MC_OK)
        st = mc_master_tenant_admit(m, x->tenant, r->length);
    if (st != MC_OK)
        return st; /* the reservation stays the writer's */

    length = r->length;
    n      = r->n;
    reps   = mc_arena_calloc(x->arena, n, sizeof(*reps));
    if (reps == NULL)
        return MC_INTERNAL_ERROR;
    memcpy(reps, r->reps, (size_t)n * sizeof(*reps));
    resv_unlink(m, r); /* the buffers move to the object (or go back on OOM) */
    o = obj_create(x, req->client_id, req->key, length, &req->config, group, reps, n, NULL, NULL);
    if (o == NULL)
        return MC_INTERNAL_ERROR;
    obj_publish(x, o);
    if (req->renew &&
        (resv_grant(x, req->client_id, length, &req->config, 0, &resp->next_id, &resp->next) ==
         MC_OK))
        resp->ttl_ms = (uint64_t)m->cfg->put_reservation_ttl_sec * 1000u;
    return MC_OK;
}

void mc_master_reservations_drop_owner(mc_master_t *m, mc_uuid_t owner)
{
    mc_mlist_t *pos, *tmp;
    mc_mlist_for_each_safe(pos, tmp, &m->resv_order)
    {
        mc_reservation_t *r = mc_container_of(pos, mc_reservation_t, link);
        if (mc_uuid_eq(r->writer->owner, owner))
            resv_free(m, r);
    }
}

/* §5.7 GET_REPLICA_LIST */
int32_t mc_master_get_replica_list(mc_req_ctx_t *x, const mc_wire_get_replica_list_req_t *req,
                                   mc_wire_get_replica_list_resp_t *resp)
{
    resp->lease_ttl_ms = x->m->cfg->default_kv_lease_ttl;
    return get_one(x, req->key, &resp->size, &resp->replicas);
}

/* §5.7 EXIST_KEY */
int32_t mc_master_exist_key(mc_req_ctx_t *x, const mc_wire_exist_key_req_t *req,
                            mc_wire_exist_key_resp_t *resp)
{
    resp->exists = (uint8_t)exist_one(x, req->key);
    return MC_OK;
}

/* §5.8 REMOVE */
int32_t mc_master_remove(mc_req_ctx_t *x, const mc_wire_remove_req_t *req)
{
    return remove_one(x, req->key, req->force != 0);
}

/* §5.8 REMOVE_ALL: complete, unleased objects of the tenant (force: all). */
int32_t mc_master_remove_all(mc_req_ctx_t *x, const mc_wire_remove_all_req_t *req,
                             mc_wire_remove_all_resp_t *resp)
{
    int64_t kept;
    int64_t count = remove_where(x, req->force, NULL, NULL, &kept);

    /* routers may drop the tenant's whole index: nothing they know of is left */
    if (kept == 0)
        mc_kv_events_cleared(x->m, x->tenant.ptr, x->tenant.len);

    resp->count = count;
    if (count > 0)
        mc_info("remove_all%s: %" PRId64 " objects removed", req->force ? " (force)" : "", count);
    return MC_OK;
}

/* ---- §5.9 batch forms: one result per key, in request order ---------------------- */

/* Arena storage for @p n statuses; -1 when out of memory. */
static int i32_list(mc_req_ctx_t *x, uint32_t n, mc_wire_i32_list_t *out)
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
static int result_list(mc_req_ctx_t *x, uint32_t n, mc_wire_result_list_t *out)
{
    out->n = 0;
    out->v = n ? mc_arena_calloc(x->arena, n, sizeof(*out->v)) : NULL;
    if ((n > 0) && (out->v == NULL))
        return -1;
    out->n = n;
    return 0;
}

/* BATCH_PUT_START and BATCH_UPSERT_START: group ids, when given, come one
 * per key; a config that config_check refuses fails every key. */
static int32_t start_batch(mc_req_ctx_t *x, mc_uuid_t client_id, const mc_wire_str_list_t *keys,
                           const mc_wire_u64_list_t *lengths, const mc_wire_config_t *cfg,
                           start_one_fn start, mc_wire_result_list_t *results)
{
    uint32_t n = keys->n;
    int32_t cst;

    if (lengths->n != n)
        return MC_INVALID_PARAMS;
    if (cfg->has_group_ids && (cfg->group_ids.n != n))
        return MC_INVALID_PARAMS;
    if (result_list(x, n, results) != 0)
        return MC_INTERNAL_ERROR;

    cst = config_check(x, cfg);
    if (cst != MC_OK) {
        for (uint32_t i = 0; i < n; i++) {
            results->v[i].size   = lengths->v[i];
            results->v[i].status = cst;
        }
        return MC_OK;
    }
    key_pipe_t p;
    pipe_init(&p, x, keys);
    for (uint32_t i = 0; i < n; i++) {
        mc_wire_result_t *r = &results->v[i];
        pipe_at(&p, i);
        r->size   = lengths->v[i];
        r->status = start(x, client_id, keys->v[i], lengths->v[i], cfg,
                          cfg->has_group_ids ? &cfg->group_ids.v[i] : NULL, &r->replicas);
    }
    pipe_done(&p);
    return MC_OK;
}

/* end_one or revoke_one. */
typedef int32_t (*finish_one_fn)(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, int upsert);

/* The batch END and REVOKE forms: @p finish on every key. */
static int32_t finish_batch(mc_req_ctx_t *x, mc_uuid_t client_id, const mc_wire_str_list_t *keys,
                            finish_one_fn finish, int upsert, mc_wire_i32_list_t *statuses)
{
    key_pipe_t p;

    if (i32_list(x, keys->n, statuses) != 0)
        return MC_INTERNAL_ERROR;
    pipe_init(&p, x, keys);
    for (uint32_t i = 0; i < keys->n; i++) {
        pipe_at(&p, i);
        statuses->v[i] = finish(x, client_id, keys->v[i], upsert);
    }
    pipe_done(&p);
    return MC_OK;
}

int32_t mc_master_batch_put_start(mc_req_ctx_t *x, const mc_wire_batch_put_start_req_t *req,
                                  mc_wire_batch_put_start_resp_t *resp)
{
    return start_batch(x, req->client_id, &req->keys, &req->lengths, &req->config, put_start_one,
                       &resp->results);
}

int32_t mc_master_batch_put_end(mc_req_ctx_t *x, const mc_wire_batch_put_end_req_t *req,
                                mc_wire_batch_put_end_resp_t *resp)
{
    return finish_batch(x, req->client_id, &req->keys, end_one, 0, &resp->statuses);
}

int32_t mc_master_batch_put_revoke(mc_req_ctx_t *x, const mc_wire_batch_put_revoke_req_t *req,
                                   mc_wire_batch_put_revoke_resp_t *resp)
{
    return finish_batch(x, req->client_id, &req->keys, revoke_one, 0, &resp->statuses);
}

int32_t mc_master_batch_get_replica_list(mc_req_ctx_t *x,
                                         const mc_wire_batch_get_replica_list_req_t *req,
                                         mc_wire_batch_get_replica_list_resp_t *resp)
{
    uint32_t n = req->keys.n;
    key_pipe_t p;

    resp->lease_ttl_ms = x->m->cfg->default_kv_lease_ttl;
    if (result_list(x, n, &resp->results) != 0)
        return MC_INTERNAL_ERROR;
    pipe_init(&p, x, &req->keys);
    for (uint32_t i = 0; i < n; i++) {
        mc_wire_result_t *r = &resp->results.v[i];
        pipe_at(&p, i);
        r->status = get_one(x, req->keys.v[i], &r->size, &r->replicas);
    }
    pipe_done(&p);
    return MC_OK;
}

int32_t mc_master_batch_exist_key(mc_req_ctx_t *x, const mc_wire_batch_exist_key_req_t *req,
                                  mc_wire_batch_exist_key_resp_t *resp)
{
    key_pipe_t p;

    if (i32_list(x, req->keys.n, &resp->results) != 0)
        return MC_INTERNAL_ERROR;
    pipe_init(&p, x, &req->keys);
    for (uint32_t i = 0; i < req->keys.n; i++) {
        pipe_at(&p, i);
        resp->results.v[i] = exist_one(x, req->keys.v[i]);
    }
    pipe_done(&p);
    return MC_OK;
}

int32_t mc_master_batch_remove(mc_req_ctx_t *x, const mc_wire_batch_remove_req_t *req,
                               mc_wire_batch_remove_resp_t *resp)
{
    key_pipe_t p;

    if (i32_list(x, req->keys.n, &resp->statuses) != 0)
        return MC_INTERNAL_ERROR;
    pipe_init(&p, x, &req->keys);
    for (uint32_t i = 0; i < req->keys.n; i++) {
        pipe_at(&p, i);
        resp->statuses.v[i] = remove_one(x, req->keys.v[i], req->force != 0);
    }
    pipe_done(&p);
    return MC_OK;
}

/* ---- §5.11 upsert ----------------------------------------------------------------- */

/* Stage the config of an upsert of an existing object on @p o; applied by
 * UPSERT_END.  -1 on OOM (nothing changed). */
static int upsert_stage(mc_master_t *m, mc_object_t *o, const mc_wire_config_t *cfg,
                        const mc_str_t *group)
{
    mc_upsert_t *up = obj_up(o);
    char *g         = NULL;

    if ((group != NULL) && (dup_group(group, &g) != 0))
        return -1;
    /* UPSERT_END must not fail for memory: make the ext now if it will
     * hold a pin or a group (dropping an OOM'd upsert loses nothing) */
    if (((cfg->soft_pin_action == MC_SOFT_PIN_ENABLE) || (g != NULL)) && (obj_ext(o) == NULL))
        goto oom;
    if (up == NULL) {
        /* the caller sets o->upsert right after, so obj_up(o) is never
         * allocated without an upsert in progress */
        if (obj_ext(o) == NULL) /* the upsert hangs off the ext */
            goto oom;
        up = calloc(1, sizeof(*up));
        if (up == NULL)
            goto oom;
        up->obj = o;
        mc_mlist_init(&up->replicas);
        mc_mlist_init(&up->link);
        o->ext->up = up;
    }
    free(up->group_id);
    up->group_id   = g;
    up->has_group  = group != NULL;
    up->hard_pin   = cfg->with_hard_pin ? 1 : 0;
    up->pin_action = cfg->soft_pin_action;
    up->pin_ttl_ms = 0;
    if (cfg->soft_pin_action == MC_SOFT_PIN_ENABLE)
        up->pin_ttl_ms = cfg->has_soft_pin_ttl ? cfg->soft_pin_ttl_ms
                                               : m->cfg->default_kv_soft_pin_ttl;
    return 0;

oom:
    free(g);
    return -1;
}

/*
 * One UPSERT_START after config_check.  A new key is exactly PUT_START.
 * An existing complete object of the same size that no reader holds a
 * lease on is rewritten in place; otherwise fresh buffers are allocated
 * and the old ones stay readable until UPSERT_END.
 */
static int32_t upsert_start_one(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key,
                                uint64_t length, const mc_wire_config_t *cfg,
                                const mc_str_t *group, mc_wire_replica_list_t *out)
{
    mc_master_t *m   = x->m;
    uint64_t discard = (uint64_t)m->cfg->put_start_discard_timeout_sec * 1000u;
    mc_object_t *o;
    mc_replica_t **reps, *r;
    uint32_t n;
    int32_t st;

    out->n = 0;
    out->v = NULL;
    if (length == 0)
        return MC_INVALID_PARAMS;

    o = obj_find(m, x->tenant, key);
    if ((o != NULL) && mc_object_replicating(o))
        return MC_OBJECT_HAS_REPLICATION_TASK; /* a copy is reading its bytes */
    if ((o != NULL) && !o->complete) {
        /* a put or an in-place upsert is writing it */
        if (x->now_ms < o->put_start_ms + discard)
            return MC_OBJECT_REPLICA_BUSY;
        mc_info("preempting stale write of key '%.*s'", (int)MC_MIN(key.len, 200u), key.ptr);
        obj_discard(m, o);
        o = NULL;
    } else if ((o != NULL) && (o->upsert == MC_UPSERT_FRESH)) {
        if (mc_mlist_empty(&obj_up(o)->replicas)) {
            upsert_clear(m, o); /* its new buffers went away with their segment */
        } else {
            if (x->now_ms < obj_up(o)->start_ms + discard)
                return MC_OBJECT_REPLICA_BUSY;
            mc_info("preempting stale upsert of key '%.*s'", (int)MC_MIN(key.len, 200u),
                    key.ptr);
            upsert_discard(m, o);
        }
    }
    if ((o != NULL) && (length == o->size) && ((obj_dfs(o) != NULL) || (cfg->dfs_replica_num > 0))) {
        /* upstream's rule for a same-size upsert where DFS is involved:
         * the request keeps the object's topology (docs/tiers.md §6) */
        const mc_dfs_replica_t *f = obj_dfs(o);
        if ((f == NULL) || (cfg->dfs_replica_num != 1) || (cfg->nof_replica_num != 0) ||
            (cfg->replica_num != f->replica_num))
            return MC_INVALID_PARAMS;
        if (!mc_object_has_replicas(o)) {
            /* DFS-only: written again as a new key, its extent freed */
            obj_erase(m, o);
            o = NULL;
        }
    }
    if ((o != NULL) && (obj_disk(o) != NULL)) {
        /* the disk copy would be stale: a disk-only object is replaced
         * as a new key, another loses its disk copy (docs/tiers.md) */
        if (!mc_object_has_replicas(o)) {
            obj_erase(m, o);
            o = NULL;
        } else {
            disk_free(m, o);
            mc_durable_object(m, o);
        }
    }
    if (o == NULL)
        return put_start_one(x, client_id, key, length, cfg, group, out);

    if ((length == o->size) && !obj_leased(o, x->now_ms)) {
        /* In place: the same buffers, unreadable until UPSERT_END. */
        mc_writer_t *w = writer_get(m, x->tenant, client_id);
        if (w == NULL)
            return MC_INTERNAL_ERROR;
        n      = mc_object_replica_count(o) + (obj_dfs(o) != NULL);
        out->v = mc_arena_calloc(x->arena, n, sizeof(*out->v));
        if ((out->v == NULL) || (upsert_stage(m, o, cfg, group) != 0)) {
            writer_put(m, w);
            return MC_INTERNAL_ERROR;
        }
        mc_object_for_each_replica(r, o)
        {
            r->status       = MC_REPLICA_PROCESSING;
            /* a new value: a copy read from the old id is stale (§5.15) */
            r->id           = ++m->next_replica_id;
            fill_wire_replica(&out->v[out->n++], r, length);
        }
        if (obj_dfs(o) != NULL) {
            /* its record is rewritten in place too: unreadable meanwhile */
            mc_dfs_replica_t *f = obj_dfs(o);
            f->status           = MC_REPLICA_PROCESSING;
            f->id               = ++m->next_replica_id;
            mc_master_dfs_to_wire(x, &out->v[out->n++], f, length);
        }
        mc_durable_erase(m, o); /* its bytes are overwritten from now on */
        o->upsert       = MC_UPSERT_INPLACE;
        o->complete     = 0;
        writer_put(m, o->writer);
        o->writer       = w;
        o->put_start_ms = x->now_ms;
        mc_mlist_remove(&o->lru_link); /* the same link as pending_link */
        mc_mlist_insert_tail(&m->pending, &o->pending_link);
        return MC_OK;
    }

    /* Fresh buffers; the old value stays readable meanwhile. */
    mc_writer_t *w = writer_get(m, x->tenant, client_id);
    if (w == NULL)
        return MC_INTERNAL_ERROR;
    n = place(x, client_id, mc_object_key(o), length, cfg, o, &reps, &st);
    if (n == 0) {
        writer_put(m, w);
        return st;
    }
    mc_dfs_replica_t *dfs = NULL;
    if (cfg->dfs_replica_num > 0) {
        dfs = mc_master_dfs_new(m, key.len, length, cfg->replica_num, &st);
        if (dfs == NULL) {
            writer_put(m, w);
            release_placed(m, reps, n);
            return st;
        }
    }
    out->v = mc_arena_calloc(x->arena, n + (dfs != NULL), sizeof(*out->v));
    if ((out->v == NULL) || ((dfs != NULL) && (obj_ext(o) == NULL)) ||
        (upsert_stage(m, o, cfg, group) != 0)) {
        writer_put(m, w);
        release_placed(m, reps, n);
        mc_master_dfs_free(m, dfs, length);
        return MC_INTERNAL_ERROR;
    }
    for (uint32_t i = 0; i < n; i++) {
        mc_replica_set_obj(reps[i], o);
        reps[i]->fresh = 1;
        mc_mlist_insert_tail(&obj_up(o)->replicas, &reps[i]->link);
        fill_wire_replica(&out->v[i], reps[i], length);
    }
    out->n         = n;
    o->upsert      = MC_UPSERT_FRESH;
    obj_up(o)->size     = length;
    obj_up(o)->dfs      = dfs; /* freed with up unless UPSERT_END takes it */
    if (dfs != NULL)
        mc_master_dfs_to_wire(x, &out->v[out->n++], dfs, length);
    obj_up(o)->start_ms = x->now_ms;
    writer_put(m, obj_up(o)->writer); /* none: upsert_stage made obj_up(o) just now */
    obj_up(o)->writer   = w;
    mc_mlist_insert_tail(&m->upserting, &obj_up(o)->link);
    return MC_OK;
}

int32_t mc_master_upsert_start(mc_req_ctx_t *x, const mc_wire_upsert_start_req_t *req,
                               mc_wire_upsert_start_resp_t *resp)
{
    return start_single(x, req->client_id, req->key, req->length, &req->config, upsert_start_one,
                        &resp->replicas);
}

int32_t mc_master_upsert_end(mc_req_ctx_t *x, const mc_wire_upsert_end_req_t *req)
{
    return end_one(x, req->client_id, req->key, 1);
}

int32_t mc_master_upsert_revoke(mc_req_ctx_t *x, const mc_wire_upsert_revoke_req_t *req)
{
    return revoke_one(x, req->client_id, req->key, 1);
}

int32_t mc_master_batch_upsert_start(mc_req_ctx_t *x, const mc_wire_batch_upsert_start_req_t *req,
                                     mc_wire_batch_upsert_start_resp_t *resp)
{
    return start_batch(x, req->client_id, &req->keys, &req->lengths, &req->config,
                       upsert_start_one, &resp->results);
}

int32_t mc_master_batch_upsert_end(mc_req_ctx_t *x, const mc_wire_batch_upsert_end_req_t *req,
                                   mc_wire_batch_upsert_end_resp_t *resp)
{
    return finish_batch(x, req->client_id, &req->keys, end_one, 1, &resp->statuses);
}

int32_t mc_master_batch_upsert_revoke(mc_req_ctx_t *x,
                                      const mc_wire_batch_upsert_revoke_req_t *req,
                                      mc_wire_batch_upsert_revoke_resp_t *resp)
{
    return finish_batch(x, req->client_id, &req->keys, revoke_one, 1, &resp->statuses);
}

/* ---- §5.8 REMOVE_BY_REGEX ----------------------------------------------------------- */

/*
 * A REMOVE_BY_REGEX walk.  The pattern is measured before regcomp()
 * (common/regex_limit.h: what it may unroll to, no back-references), so
 * compiling is cheap and one regexec() is bounded; the walk over the index
 * runs in slices that rpc.c schedules between other events, and the answer
 * goes when the last slice is done.  It resumes at a bucket index: the
 * table only grows, and growing splits bucket b into b and b + old size,
 * so every key present at the start is still visited (some twice, which
 * is harmless: a matching one is gone after its first visit).
 */
struct mc_regex_walk {
    regex_t re;
    int force;
    size_t bucket; /* next bucket of m->objects to visit */
    int64_t count;
};

/* remove_where() match: @p arg is the compiled regex_t. */
static int regex_match(mc_str_t key, void *arg)
{
    char keybuf[MC_WIRE_MAX_KEY + 1];
    uint32_t klen = MC_MIN(key.len, (uint32_t)MC_WIRE_MAX_KEY);

    memcpy(keybuf, key.ptr, klen);
    keybuf[klen] = '\0';
    return regexec(arg, keybuf, 0, NULL, 0) == 0;
}

/*
 * POSIX extended regular expression, searched (not anchored) in each key of
 * the tenant; same skipping rules as REMOVE_ALL.  The pattern is bounded by
 * the STR field (64 KiB), may not contain NUL or back-references, and must
 * stay within the limits of common/regex_limit.h (INVALID_PARAMS).
 */
int32_t mc_master_regex_walk_start(mc_req_ctx_t *x, const mc_wire_remove_by_regex_req_t *req,
                                   mc_regex_walk_t **walk_p)
{
    mc_regex_walk_t *w;
    char why[160];
    char *pat;
    int rc;

    (void)x;
    if ((req->regex.len > 0) && (memchr(req->regex.ptr, '\0', req->regex.len) != NULL))
        return MC_INVALID_PARAMS;
    if (mc_regex_check(req->regex.ptr, req->regex.len, why, sizeof(why)) != 0) {
        mc_log_ratelimited(MC_LOG_INFO, "remove_by_regex: refused: %s", why);
        return MC_INVALID_PARAMS;
    }
    pat = malloc((size_t)req->regex.len + 1);
    w   = calloc(1, sizeof(*w));
    if ((pat == NULL) || (w == NULL)) {
        free(pat);
        free(w);
        return MC_INTERNAL_ERROR;
    }
    if (req->regex.len > 0)
        memcpy(pat, req->regex.ptr, req->regex.len);
    pat[req->regex.len] = '\0';
    rc = regcomp(&w->re, pat, REG_EXTENDED | REG_NOSUB);
    free(pat);
    if (rc != 0) {
        char err[256];
        regerror(rc, &w->re, err, sizeof(err));
        mc_debug("remove_by_regex: bad pattern: %s", err);
        free(w);
        return rc == REG_ESPACE ? MC_INTERNAL_ERROR : MC_INVALID_PARAMS;
    }
    w->force = req->force != 0;
    *walk_p  = w;
    return MC_OK;
}

int mc_master_regex_walk_step(mc_req_ctx_t *x, mc_regex_walk_t *w, uint64_t budget_us)
{
    mc_chmap_t *h     = &x->m->objects;
    uint64_t deadline = mc_now_us() + budget_us;

    while (w->bucket < h->nbuckets) {
        mc_cnode_t *n = h->buckets[w->bucket++];
        while (n != NULL) {
            mc_object_t *o = mc_container_of(n, mc_object_t, node);
            n              = n->next; /* erasing o leaves the rest of the chain */
            if (!mc_str_eq(mc_object_tenant(o), x->tenant))
                continue;
            if (!w->force && !removable(o, x->now_ms))
                continue;
            if (!regex_match(mc_object_key(o), &w->re))
                continue;
            obj_erase(x->m, o);
            w->count++;
        }
        if (mc_now_us() >= deadline)
            return w->bucket >= h->nbuckets;
    }
    return 1;
}

int64_t mc_master_regex_walk_finish(mc_regex_walk_t *w)
{
    int64_t count = w->count;

    if (count > 0)
        mc_info("remove_by_regex%s: %" PRId64 " objects removed", w->force ? " (force)" : "",
                count);
    mc_master_regex_walk_free(w);
    return count;
}

void mc_master_regex_walk_free(mc_regex_walk_t *w)
{
    if (w == NULL)
        return;
    regfree(&w->re);
    free(w);
}

/* ---- §5.14 BATCH_REPLICA_CLEAR ------------------------------------------------------ */

/*
 * Clear @p key for its owner @p client_id, as upstream's BatchReplicaClear:
 * the whole object when @p seg is empty, else its COMPLETE replicas on
 * segments named @p seg, the object going with its last one.  Besides
 * upstream's checks (owner, lease, completeness) it skips what REMOVE
 * without force refuses, an upsert or a copy/move task in progress, since
 * someone is writing or reading those buffers; pins do not stop it, as
 * they do not stop REMOVE.  No reader holds a lease, so ranges are free
 * at once.
 */
static int32_t clear_one(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, mc_str_t seg)
{
    mc_object_t *o = obj_find(x->m, x->tenant, key);
    mc_replica_t *r, *tmp;
    int hit = 0;

    if (o == NULL)
        return MC_OBJECT_NOT_FOUND;
    if (!mc_uuid_eq(mc_object_owner(o), client_id))
        return MC_ILLEGAL_CLIENT;
    if (obj_leased(o, x->now_ms))
        return MC_OBJECT_HAS_LEASE;
    if (!o->complete || (o->upsert != MC_UPSERT_NONE))
        return MC_REPLICA_IS_NOT_READY;
    if (mc_object_replicating(o))
        return MC_OBJECT_HAS_REPLICATION_TASK;
    if (seg.len == 0) {
        obj_erase(x->m, o);
        return MC_OK;
    }
    mc_object_for_each_replica_safe(r, tmp, o)
    {
        if ((r->status != MC_REPLICA_COMPLETE) ||
            !mc_str_eq(mc_str_from_cstr(r->seg->name), seg))
            continue;
        replica_free(x->m, r);
        hit = 1;
    }
    if (!hit)
        return MC_REPLICA_NOT_FOUND;
    (void)obj_settle(x->m, o);
    return MC_OK;
}

int32_t mc_master_batch_replica_clear(mc_req_ctx_t *x,
                                      const mc_wire_batch_replica_clear_req_t *req,
                                      mc_wire_batch_replica_clear_resp_t *resp)
{
    uint32_t n       = req->keys.n;
    uint32_t cleared = 0;

    x->m->replica_clear_items += n;
    x->m->replica_clear_failed_items += n;
    if (i32_list(x, n, &resp->statuses) != 0)
        return MC_INTERNAL_ERROR;
    for (uint32_t i = 0; i < n; i++) {
        resp->statuses.v[i] = clear_one(x, req->client_id, req->keys.v[i], req->segment_name);
        cleared += (resp->statuses.v[i] == MC_OK);
    }
    x->m->replica_clear_failed_items -= cleared;
    if (cleared > 0)
        mc_debug("batch_replica_clear: %" PRIu32 " of %" PRIu32 " keys cleared%s%.*s", cleared,
                 n, req->segment_name.len ? " on " : "",
                 (int)MC_MIN(req->segment_name.len, 200u), req->segment_name.ptr);
    return MC_OK;
}

void mc_master_object_lease(mc_master_t *m, mc_object_t *o, uint64_t now_ms)
{
    obj_grant_lease(m, o, now_ms);
}

void mc_master_replicas_forget(mc_mlist_t *list)
{
    forget_replicas(list);
}

void mc_master_replica_free(mc_master_t *m, mc_replica_t *r)
{
    replica_free(m, r);
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
        if (r->seg->gen_dirty < MC_SEG_GEN_READER) /* as obj_free_fenced() */
            r->seg->gen_dirty = MC_SEG_GEN_READER;
    replica_free(m, r);
    mc_durable_object(m, o);
}

mc_object_t *mc_master_object_find(mc_master_t *m, mc_str_t tenant, mc_str_t key)
{
    return obj_find(m, tenant, key);
}

void mc_master_object_erase(mc_master_t *m, mc_object_t *o)
{
    obj_erase(m, o);
}

/* ---- restore (snapshot.c) ------------------------------------------------------- */

/* The disk replica of OBJ_SET record @p r, when its holder was restored
 * with its segments (and waits to remount); NULL otherwise or on OOM. */
static mc_disk_replica_t *disk_restore(mc_master_t *m, const mc_oplog_record_t *r)
{
    const mc_client_t *c = mc_master_client_find(m, r->disk_holder);

    if ((c == NULL) || !c->restored || (r->disk_path.len == 0) || (r->disk_path.ptr[0] != '/'))
        return NULL;
    return disk_new(m, r->disk_holder, r->disk_segment, r->disk_path, r->disk_offset,
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
    o = obj_alloc(m, r->tenant, r->key);
    if (o == NULL)
        goto fail;
    o->size   = r->size; /* obj_free gives a DFS extent back by it */
    o->writer = writer_get(m, r->tenant, r->owner);
    if (o->writer != NULL) /* obj_free gives the tenant's charge back */
        mc_master_tenant_charge(m, r->tenant, (int64_t)r->size);
    if ((o->writer == NULL) || (((dfs != NULL) || (dsk != NULL)) && (obj_ext(o) == NULL))) {
        obj_free(m, o);
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
        if ((obj_ext(o) == NULL) || ((o->ext->group_id = mc_str_dup(r->group_id)) == NULL)) {
            obj_free(m, o);
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
    obj_attach(o, reps, n);
    if (n > 0)
        mc_master_lru_touch(m, o); /* a disk- or DFS-only object stays off the LRU */
    group_sync(m, o);
    return o;

fail:
    mc_master_dfs_free(m, dfs, r->size);
    disk_destroy(dsk);
    return NULL;
}

/* ---- §5.15 disk tier ------------------------------------------------------------ */

/* 1 when @p o has the COMPLETE memory replica @p id.  Replica ids are
 * never reused and an in-place upsert renews them, so a copy read from
 * @p id holds the current value. */
static int has_replica(const mc_object_t *o, uint64_t id)
{
    const mc_replica_t *r;
    mc_object_for_each_replica(r, o)
    {
        if ((r->id == id) && (r->status == MC_REPLICA_COMPLETE))
            return 1;
    }
    return 0;
}

/* A mounted segment of @p client_id that takes reads, or NULL. */
static const mc_segment_t *segment_of(mc_master_t *m, mc_uuid_t client_id)
{
    mc_client_t *c = mc_master_client_find(m, client_id);

    if (c == NULL)
        return NULL;
    for (const mc_mlist_t *pos = c->segments.next; pos != &c->segments; pos = pos->next) {
        const mc_segment_t *seg = mc_container_of(pos, mc_segment_t, client_link);
        if (seg->state != MC_SEG_AWAITING)
            return seg;
    }
    return NULL;
}

int32_t mc_master_offload_report(mc_req_ctx_t *x, const mc_wire_offload_report_req_t *req)
{
    mc_master_t *m = x->m;
    const mc_segment_t *seg;
    mc_disk_replica_t *d;
    mc_object_t *o;

    if (!m->cfg->enable_offload)
        return MC_NOT_SUPPORTED;
    if ((req->file_path.len == 0) || (req->file_path.ptr[0] != '/') ||
        (memchr(req->file_path.ptr, '\0', req->file_path.len) != NULL) ||
        (req->offset > UINT64_MAX - req->length))
        return MC_INVALID_PARAMS;
    o = obj_find(m, x->tenant, req->key);
    if (o == NULL)
        return MC_OBJECT_NOT_FOUND;
    if (!o->complete || (o->upsert != MC_UPSERT_NONE))
        return MC_REPLICA_IS_NOT_READY;
    if (req->length != o->size)
        return MC_INVALID_PARAMS;
    if (!has_replica(o, req->source_replica))
        return MC_REPLICA_NOT_FOUND;
    seg = segment_of(m, req->client_id);
    if (seg == NULL)
        return MC_ILLEGAL_CLIENT;
    if (obj_ext(o) == NULL)
        return MC_INTERNAL_ERROR;
    d = disk_new(m, req->client_id, mc_str_from_cstr(seg->name), req->file_path, req->offset,
                 req->length, req->crc);
    if (d == NULL)
        return MC_INTERNAL_ERROR;
    if (obj_disk(o) != NULL) {
        disk_free(m, o); /* rewritten into a newer bucket */
        m->disk_dropped_keys--;
    }
    o->ext->disk = d;
    m->disk_replicas++;
    m->disk_bytes += d->length;
    m->offloaded_keys++;
    m->offloaded_bytes += d->length;
    mc_durable_object(m, o);
    return MC_OK;
}

int32_t mc_master_disk_replica_drop(mc_req_ctx_t *x, const mc_wire_disk_replica_drop_req_t *req,
                                    mc_wire_disk_replica_drop_resp_t *resp)
{
    uint32_t n = req->keys.n;

    if (i32_list(x, n, &resp->statuses) != 0)
        return MC_INTERNAL_ERROR;
    for (uint32_t i = 0; i < n; i++) {
        mc_object_t *o = obj_find(x->m, x->tenant, req->keys.v[i]);
        const mc_disk_replica_t *d = (o != NULL) ? obj_disk(o) : NULL;
        int32_t st = MC_OK;

        if (o == NULL) {
            st = MC_OBJECT_NOT_FOUND;
        } else if ((d == NULL) || !mc_uuid_eq(d->holder, req->client_id) ||
                   !mc_str_eq(mc_str_from_cstr(d->path), req->file_path)) {
            st = MC_REPLICA_NOT_FOUND;
        } else {
            disk_free(x->m, o);
            (void)obj_settle(x->m, o);
        }
        resp->statuses.v[i] = st;
    }
    return MC_OK;
}

size_t mc_master_objects_drop_holder(mc_master_t *m, mc_uuid_t client_id)
{
    mc_chmap_iter_t it;
    mc_cnode_t *n;
    size_t dropped = 0;

    if (m->disk_replicas == 0)
        return 0; /* no walk of the index when the tier is unused */
    n = mc_chmap_first(&m->objects, &it);
    while (n != NULL) {
        mc_object_t *o = mc_container_of(n, mc_object_t, node);
        const mc_disk_replica_t *d = obj_disk(o);
        /* step first: settling may erase o, never another object */
        n = mc_chmap_next(&m->objects, &it);
        if ((d == NULL) || !mc_uuid_eq(d->holder, client_id))
            continue;
        disk_free(m, o);
        (void)obj_settle(m, o);
        dropped++;
    }
    return dropped;
}

int mc_master_object_drop_memory(mc_master_t *m, mc_object_t *o)
{
    if (!obj_has_copy(o) || !mc_object_has_replicas(o))
        return 0;
    obj_free_replicas(m, o);
    return !obj_settle(m, o);
}

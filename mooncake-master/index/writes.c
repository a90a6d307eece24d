/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index's write path (docs/protocol.md §5.5, §5.6, §5.9,
 * §5.11, §5.18): PUT_START, PUT_END and PUT_REVOKE, UPSERT_START/END/
 * REVOKE, their batch forms, and put reservations (PUT_RESERVE,
 * PUT_COMMIT).  objects.c's opening comment tells the two phases of a
 * write, the in-place and the fresh-buffer upsert and what happens to an
 * abandoned one; this file is where each request lands.
 *
 * A write is checked (config_check), claims its key (key_claim: a stale
 * put in the way is preempted), is admitted by its tenant, gets its
 * buffers placed (place: memory, then NoF, inline eviction when nothing
 * fits) and becomes an incomplete object (obj_create) that its END
 * publishes (obj_publish) or its REVOKE erases.
 *
 * Owns: the write RPCs, placement of a write (place, release_placed) and
 *   the reservation records (m->reservations, m->resv_order).
 * May call: objects.c (objects_internal.h), index/ (segments, eviction,
 *   tenants), the journal (../master.h: every durable change), tiers/
 *   (DFS and NoF replicas), events/ (a KV event per key).
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "events/events.h"
#include "evict.h"
#include "index.h"
#include "master.h"
#include "objects_internal.h"
#include "placement.h"
#include "tenants.h"
#include "tiers/tiers.h"

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
    /* no segment takes writes now (every owner suspect, draining or
     * awaiting its remount): a lack of room was not what failed it, and
     * evicting would drop objects for nothing */
    if ((n == 0) && evict && mc_master_any_writable(m, m->segv, m->nseg, x->now_ms))
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
        mc_idx_obj_discard(m, o);
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

    o = mc_idx_obj_alloc(m, x->tenant, key);
    if (o == NULL)
        goto oom;
    o->writer = mc_idx_writer_get(m, x->tenant, client_id);
    if (o->writer == NULL) {
        mc_idx_obj_free(m, o);
        goto oom;
    }
    if ((dfs != NULL) && (mc_idx_obj_ext(o) == NULL)) {
        mc_idx_obj_free(m, o);
        goto oom;
    }
    if ((cfg->soft_pin_action == MC_SOFT_PIN_ENABLE) || ((group != NULL) && (group->len > 0))) {
        if ((mc_idx_obj_ext(o) == NULL) || (dup_group(group, &o->ext->group_id) != 0)) {
            mc_idx_obj_free(m, o);
            goto oom;
        }
        if (cfg->soft_pin_action == MC_SOFT_PIN_ENABLE)
            o->ext->soft_pin_ttl_ms = cfg->has_soft_pin_ttl ? cfg->soft_pin_ttl_ms
                                                            : m->cfg->default_kv_soft_pin_ttl;
    }
    mc_mlist_init(&o->replicas);
    o->size         = length;
    mc_master_tenant_charge(m, x->tenant, (int64_t)length); /* given back by mc_idx_obj_free */
    o->put_start_ms = x->now_ms;
    o->hard_pin     = cfg->with_hard_pin ? 1 : 0;
    mc_chmap_insert(&m->objects, &o->node, o->hash);
    mc_mlist_init(&o->pending_link);
    mc_mlist_insert_tail(&m->pending, &o->pending_link); /* m->lru at PUT_END */

    mc_idx_obj_attach(o, reps, n);
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
 * now under a later generation of their segments (mc_idx_obj_free_fenced). */
static void upsert_swap(mc_master_t *m, mc_object_t *o, uint64_t now_ms)
{
    mc_mlist_t *pos, *tmp;

    if (obj_leased(o, now_ms))
        mc_idx_obj_free_fenced(m, o, MC_SEG_GEN_READER);
    else
        mc_idx_obj_free_replicas(m, o);
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
    mc_idx_writer_put(m, o->writer); /* the upserter's reference moves to the object */
    o->writer            = obj_up(o)->writer;
    obj_up(o)->writer        = NULL;
    o->lease_deadline_ms = 0; /* as after PUT_END: the new value has no reader */
    apply_upsert_config(o, now_ms);
    mc_idx_upsert_clear(m, o);
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
    mc_idx_group_sync(x->m, o);
    mc_journal_object(x->m, o);
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
            mc_idx_upsert_clear(m, o);
            return MC_OBJECT_NOT_FOUND;
        }
        upsert_swap(x->m, o, x->now_ms);
        mc_idx_group_sync(x->m, o);
        mc_journal_object(m, o);
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
    mc_idx_upsert_clear(m, o);
    mc_idx_group_sync(x->m, o);
    mc_journal_object(m, o);
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
        mc_idx_upsert_drop(x->m, o, 1);
        return MC_OK;
    }
    if (!mc_uuid_eq(mc_object_owner(o), client_id))
        return MC_ILLEGAL_CLIENT;
    if (o->complete)
        return MC_INVALID_WRITE;
    /* a new put, or an in-place upsert whose old bytes are half
     * overwritten: either way the object goes */
    mc_idx_obj_erase(x->m, o);
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
void mc_idx_resv_unlink(mc_master_t *m, mc_reservation_t *r)
{
    mc_hmap_remove(&m->reservations, &r->node);
    mc_mlist_remove(&r->link);
    mc_idx_writer_put(m, r->writer);
    free(r);
}

/* Unlink @p r and give its space back.  Its writer may still be filling
 * it (a write held up past the deadline by a slow link, a writer whose
 * client expired but lives on): each segment moves to its next fence
 * before any of that space is handed out again (mc_idx_obj_free_fenced). */
void mc_idx_resv_free(mc_master_t *m, mc_reservation_t *r)
{
    for (uint32_t i = 0; i < r->n; i++)
        r->reps[i]->seg->gen_dirty = MC_SEG_GEN_WRITER;
    release_placed(m, r->reps, r->n);
    mc_idx_resv_unlink(m, r);
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
    r->writer = mc_idx_writer_get(m, x->tenant, client_id);
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
        mc_idx_writer_put(m, r->writer);
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
            mc_idx_resv_free(m, r);
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
    mc_idx_resv_unlink(m, r); /* the buffers move to the object (or go back on OOM) */
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
            mc_idx_resv_free(m, r);
    }
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
    if (mc_idx_result_list(x, n, results) != 0)
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
    mc_idx_pipe_init(&p, x, keys);
    for (uint32_t i = 0; i < n; i++) {
        mc_wire_result_t *r = &results->v[i];
        pipe_at(&p, i);
        r->size   = lengths->v[i];
        r->status = start(x, client_id, keys->v[i], lengths->v[i], cfg,
                          cfg->has_group_ids ? &cfg->group_ids.v[i] : NULL, &r->replicas);
    }
    mc_idx_pipe_done(&p);
    return MC_OK;
}

/* end_one or revoke_one. */
typedef int32_t (*finish_one_fn)(mc_req_ctx_t *x, mc_uuid_t client_id, mc_str_t key, int upsert);

/* The batch END and REVOKE forms: @p finish on every key. */
static int32_t finish_batch(mc_req_ctx_t *x, mc_uuid_t client_id, const mc_wire_str_list_t *keys,
                            finish_one_fn finish, int upsert, mc_wire_i32_list_t *statuses)
{
    key_pipe_t p;

    if (mc_idx_i32_list(x, keys->n, statuses) != 0)
        return MC_INTERNAL_ERROR;
    mc_idx_pipe_init(&p, x, keys);
    for (uint32_t i = 0; i < keys->n; i++) {
        pipe_at(&p, i);
        statuses->v[i] = finish(x, client_id, keys->v[i], upsert);
    }
    mc_idx_pipe_done(&p);
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
    if (((cfg->soft_pin_action == MC_SOFT_PIN_ENABLE) || (g != NULL)) &&
        (mc_idx_obj_ext(o) == NULL))
        goto oom;
    if (up == NULL) {
        /* the caller sets o->upsert right after, so obj_up(o) is never
         * allocated without an upsert in progress */
        if (mc_idx_obj_ext(o) == NULL) /* the upsert hangs off the ext */
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
        mc_idx_obj_discard(m, o);
        o = NULL;
    } else if ((o != NULL) && (o->upsert == MC_UPSERT_FRESH)) {
        if (mc_mlist_empty(&obj_up(o)->replicas)) {
            mc_idx_upsert_clear(m, o); /* its new buffers went away with their segment */
        } else {
            if (x->now_ms < obj_up(o)->start_ms + discard)
                return MC_OBJECT_REPLICA_BUSY;
            mc_info("preempting stale upsert of key '%.*s'", (int)MC_MIN(key.len, 200u),
                    key.ptr);
            mc_idx_upsert_discard(m, o);
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
            mc_idx_obj_erase(m, o);
            o = NULL;
        }
    }
    if ((o != NULL) && (obj_disk(o) != NULL)) {
        /* the disk copy would be stale: a disk-only object is replaced
         * as a new key, another loses its disk copy (docs/tiers.md) */
        if (!mc_object_has_replicas(o)) {
            mc_idx_obj_erase(m, o);
            o = NULL;
        } else {
            mc_idx_disk_free(m, o);
            mc_journal_object(m, o);
        }
    }
    if (o == NULL)
        return put_start_one(x, client_id, key, length, cfg, group, out);

    if ((length == o->size) && !obj_leased(o, x->now_ms)) {
        /* In place: the same buffers, unreadable until UPSERT_END. */
        mc_writer_t *w = mc_idx_writer_get(m, x->tenant, client_id);
        if (w == NULL)
            return MC_INTERNAL_ERROR;
        n      = mc_object_replica_count(o) + (obj_dfs(o) != NULL);
        out->v = mc_arena_calloc(x->arena, n, sizeof(*out->v));
        if ((out->v == NULL) || (upsert_stage(m, o, cfg, group) != 0)) {
            mc_idx_writer_put(m, w);
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
        mc_journal_erase(m, o); /* its bytes are overwritten from now on */
        o->upsert       = MC_UPSERT_INPLACE;
        o->complete     = 0;
        mc_idx_writer_put(m, o->writer);
        o->writer       = w;
        o->put_start_ms = x->now_ms;
        mc_mlist_remove(&o->lru_link); /* the same link as pending_link */
        mc_mlist_insert_tail(&m->pending, &o->pending_link);
        return MC_OK;
    }

    /* Fresh buffers; the old value stays readable meanwhile. */
    mc_writer_t *w = mc_idx_writer_get(m, x->tenant, client_id);
    if (w == NULL)
        return MC_INTERNAL_ERROR;
    n = place(x, client_id, mc_object_key(o), length, cfg, o, &reps, &st);
    if (n == 0) {
        mc_idx_writer_put(m, w);
        return st;
    }
    mc_dfs_replica_t *dfs = NULL;
    if (cfg->dfs_replica_num > 0) {
        dfs = mc_master_dfs_new(m, key.len, length, cfg->replica_num, &st);
        if (dfs == NULL) {
            mc_idx_writer_put(m, w);
            release_placed(m, reps, n);
            return st;
        }
    }
    out->v = mc_arena_calloc(x->arena, n + (dfs != NULL), sizeof(*out->v));
    if ((out->v == NULL) || ((dfs != NULL) && (mc_idx_obj_ext(o) == NULL)) ||
        (upsert_stage(m, o, cfg, group) != 0)) {
        mc_idx_writer_put(m, w);
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
    mc_idx_writer_put(m, obj_up(o)->writer); /* none: upsert_stage made obj_up(o) just now */
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

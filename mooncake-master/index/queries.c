/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index's reads (docs/protocol.md §5.7, §5.9):
 * GET_REPLICA_LIST, EXIST_KEY and their batch forms.  A read of a
 * complete object lists its readable replicas (memory, then NoF, then
 * disk and DFS) and grants it a lease (objects.c, mc_idx_obj_grant_lease), which
 * keeps REMOVE and eviction off it while the reader copies.
 *
 * Owns: the read RPCs and the replica list a reader gets.
 * May call: objects.c (objects_internal.h), index/ (dynamic replication,
 *   promotion of a disk hit), tiers/ (DFS descriptors).
 */
#include "config.h"

#include "index.h"
#include "master.h"
#include "objects_internal.h"
#include "tiers/tiers.h"

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
    if ((d != NULL) && mc_idx_disk_readable(x->m, d)) {
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
    if ((obj_dfs(o) != NULL) || ((obj_disk(o) != NULL) && mc_idx_disk_readable(m, obj_disk(o))))
        return 1;
    mc_object_for_each_replica(r, o)
    {
        if (r->seg->state != MC_SEG_AWAITING)
            return 1;
    }
    return 0;
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
    mc_idx_obj_grant_lease(x->m, o, x->now_ms);
    mc_master_dynrep_hit(x, o); /* --dynamic_replication_mode */
    if (x->m->cfg->promotion_on_hit && !mc_object_has_replicas(o) && (obj_disk(o) != NULL) &&
        mc_idx_disk_readable(x->m, obj_disk(o)))
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
    mc_idx_obj_grant_lease(x->m, o, x->now_ms);
    return 1;
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

int32_t mc_master_batch_get_replica_list(mc_req_ctx_t *x,
                                         const mc_wire_batch_get_replica_list_req_t *req,
                                         mc_wire_batch_get_replica_list_resp_t *resp)
{
    uint32_t n = req->keys.n;
    key_pipe_t p;

    resp->lease_ttl_ms = x->m->cfg->default_kv_lease_ttl;
    if (mc_idx_result_list(x, n, &resp->results) != 0)
        return MC_INTERNAL_ERROR;
    mc_idx_pipe_init(&p, x, &req->keys);
    for (uint32_t i = 0; i < n; i++) {
        mc_wire_result_t *r = &resp->results.v[i];
        pipe_at(&p, i);
        r->status = get_one(x, req->keys.v[i], &r->size, &r->replicas);
    }
    mc_idx_pipe_done(&p);
    return MC_OK;
}

int32_t mc_master_batch_exist_key(mc_req_ctx_t *x, const mc_wire_batch_exist_key_req_t *req,
                                  mc_wire_batch_exist_key_resp_t *resp)
{
    key_pipe_t p;

    if (mc_idx_i32_list(x, req->keys.n, &resp->results) != 0)
        return MC_INTERNAL_ERROR;
    mc_idx_pipe_init(&p, x, &req->keys);
    for (uint32_t i = 0; i < req->keys.n; i++) {
        pipe_at(&p, i);
        resp->results.v[i] = exist_one(x, req->keys.v[i]);
    }
    mc_idx_pipe_done(&p);
    return MC_OK;
}

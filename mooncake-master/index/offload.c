/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index's books of the disk tier (docs/protocol.md §5.15,
 * docs/tiers.md): OFFLOAD_REPORT gives a complete object a disk replica,
 * DISK_REPLICA_DROP and a holder's departure take it away, and eviction
 * may drop the memory of an object that keeps a copy elsewhere.  The disk
 * replica record itself (mc_idx_disk_new, mc_idx_disk_free) and what a reader is told
 * of it live in objects.c and queries.c.
 *
 * Owns: the disk tier's RPCs and counters (m->disk_replicas, ...).
 * May call: objects.c (objects_internal.h), index/ (clients),
 *   the journal (../master.h: every durable change).
 */
#include "config.h"

#include <string.h>

#include "index.h"
#include "master.h"
#include "objects_internal.h"

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
    if (mc_idx_obj_ext(o) == NULL)
        return MC_INTERNAL_ERROR;
    d = mc_idx_disk_new(m, req->client_id, mc_str_from_cstr(seg->name), req->file_path, req->offset,
                 req->length, req->crc);
    if (d == NULL)
        return MC_INTERNAL_ERROR;
    if (obj_disk(o) != NULL) {
        mc_idx_disk_free(m, o); /* rewritten into a newer bucket */
        m->disk_dropped_keys--;
    }
    o->ext->disk = d;
    m->disk_replicas++;
    m->disk_bytes += d->length;
    m->offloaded_keys++;
    m->offloaded_bytes += d->length;
    mc_journal_object(m, o);
    return MC_OK;
}

int32_t mc_master_disk_replica_drop(mc_req_ctx_t *x, const mc_wire_disk_replica_drop_req_t *req,
                                    mc_wire_disk_replica_drop_resp_t *resp)
{
    uint32_t n = req->keys.n;

    if (mc_idx_i32_list(x, n, &resp->statuses) != 0)
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
            mc_idx_disk_free(x->m, o);
            (void)mc_idx_obj_settle(x->m, o);
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
        mc_idx_disk_free(m, o);
        (void)mc_idx_obj_settle(m, o);
        dropped++;
    }
    return dropped;
}

int mc_master_object_drop_memory(mc_master_t *m, mc_object_t *o)
{
    if (!mc_idx_obj_has_copy(o) || !mc_object_has_replicas(o))
        return 0;
    mc_idx_obj_free_replicas(m, o);
    return !mc_idx_obj_settle(m, o);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object index's removes (docs/protocol.md §5.8, §5.9, §5.14):
 * REMOVE, REMOVE_ALL, REMOVE_BY_REGEX (a walk in slices) and
 * BATCH_REPLICA_CLEAR.  Without force a remove skips what someone still
 * uses (a lease, a write or an upsert in progress, a copy task); with
 * force the buffers of a leased object go at once under a later
 * generation of their segments (objects.c, mc_idx_obj_erase and
 * mc_idx_obj_free_fenced).
 *
 * Owns: the remove RPCs and the REMOVE_BY_REGEX walk (mc_regex_walk_t).
 * May call: objects.c (objects_internal.h), events/ (REMOVE_ALL clears a
 *   tenant's index), common/regex_limit.h.
 */
#include "config.h"

#include <inttypes.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regex_limit.h"
#include "events/events.h"
#include "index.h"
#include "master.h"
#include "objects_internal.h"

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
        mc_idx_obj_erase(x->m, o);
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
    mc_idx_obj_erase(x->m, o);
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

int32_t mc_master_batch_remove(mc_req_ctx_t *x, const mc_wire_batch_remove_req_t *req,
                               mc_wire_batch_remove_resp_t *resp)
{
    key_pipe_t p;

    if (mc_idx_i32_list(x, req->keys.n, &resp->statuses) != 0)
        return MC_INTERNAL_ERROR;
    mc_idx_pipe_init(&p, x, &req->keys);
    for (uint32_t i = 0; i < req->keys.n; i++) {
        pipe_at(&p, i);
        resp->statuses.v[i] = remove_one(x, req->keys.v[i], req->force != 0);
    }
    mc_idx_pipe_done(&p);
    return MC_OK;
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
            mc_idx_obj_erase(x->m, o);
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
        mc_idx_obj_erase(x->m, o);
        return MC_OK;
    }
    mc_object_for_each_replica_safe(r, tmp, o)
    {
        if ((r->status != MC_REPLICA_COMPLETE) ||
            !mc_str_eq(mc_str_from_cstr(r->seg->name), seg))
            continue;
        mc_idx_replica_free(x->m, r);
        hit = 1;
    }
    if (!hit)
        return MC_REPLICA_NOT_FOUND;
    (void)mc_idx_obj_settle(x->m, o);
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
    if (mc_idx_i32_list(x, n, &resp->statuses) != 0)
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

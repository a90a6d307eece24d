/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copy and move tasks (docs/protocol.md §5.13; upstream TaskManager).
 *
 * A user asks the master to copy an object to more segments, or to move
 * one replica to another segment.  The master only keeps the books: the
 * task is assigned to the client that owns the source replica, which
 * fetches it (FETCH_TASKS), asks for buffers on the targets
 * (TASK_REPLICA_START), writes the bytes with its transfer engine, commits
 * (TASK_REPLICA_END) and reports the outcome (MARK_TASK_COMPLETE).
 *
 *   PENDING --fetch--> PROCESSING --mark--> SUCCESS | FAILED
 *      |                   |
 *      +--timeout/client gone--> FAILED
 *
 * Every task is in m->tasks by id and on one of three lists, oldest state
 * change first, so the timeouts and the pruning of finished tasks look
 * only at list heads.  Finished tasks are kept for QUERY_TASK up to
 * --max_total_finished_tasks, then forgotten oldest first.
 *
 * While a task is staged (between START and END/REVOKE) its new buffers
 * belong to the task (mc_task_t.staged, replicas with no object) and the
 * task is linked to its object, which then cannot be removed without
 * force, evicted or upserted: the executor is reading its bytes.  If the
 * object goes anyway (a forced remove, its segment gone) objects.c calls
 * mc_master_tasks_object_gone() and END answers OBJECT_NOT_FOUND.  A
 * staged buffer whose segment goes away is dropped from the list by
 * mc_master_replica_drop(); END notices the shortfall (REPLICA_IS_GONE).
 * When the master fails a task on its own (timeout, executor gone) the
 * executor may still be writing into the staged buffers, so they are
 * parked on m->discarded for --put_start_release_timeout_sec like the
 * buffers of an abandoned put; when the executor itself revokes or
 * reports, they are freed at once.
 *
 * Single-threaded like the rest of the daemon (docs/threads.md).
 *
 * Owns: the copy and move tasks: their queue per client, states and
 *   timeouts.
 * May call: index/, the journal (../master.h: task records).
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "durability/durability.h" /* the log record a restore reads */
#include "evict.h"
#include "index.h"
#include "master.h"

/* MC_TASK_MESSAGE_MAX (mooncake/store.h) bounds a kept message, NUL included. */
#define MC_TASK_FETCH_MAX   1024 /* tasks handed out by one FETCH_TASKS */

static int task_eq(const mc_hnode_t *node, const void *key)
{
    const mc_task_t *t = mc_container_of(node, mc_task_t, node);
    return mc_uuid_eq(t->id, *(const mc_uuid_t *)key);
}

static void queues_init(mc_master_t *m)
{
    for (int q = 0; q < MC_TASKQ_COUNT; q++) {
        mc_mlist_init(&m->taskq[q].list);
        m->taskq[q].n = 0;
    }
}

mc_status_t mc_master_tasks_init(mc_master_t *m)
{
    queues_init(m);
    return mc_hmap_init(&m->tasks, 64) == 0 ? MC_OK : MC_INTERNAL_ERROR;
}

static void task_free(mc_task_t *t)
{
    free(t->tenant);
    free(t->key);
    free(t->source);
    for (uint32_t i = 0; i < t->ntargets; i++)
        free(t->targets[i]);
    free(t->targets);
    free(t->message);
    free(t);
}

/* Teardown, before objects and segments: staged buffers are not given
 * back one by one because every allocator is destroyed right after. */
void mc_master_tasks_cleanup(mc_master_t *m)
{
    mc_hmap_iter_t it;
    mc_hnode_t *n = mc_hmap_first(&m->tasks, &it);

    while (n != NULL) {
        mc_task_t *t = mc_container_of(n, mc_task_t, node);
        n            = mc_hmap_next(&m->tasks, &it);
        mc_master_replicas_forget(&t->staged);
        mc_mlist_remove(&t->obj_link);
        mc_hmap_remove(&m->tasks, &t->node);
        task_free(t);
    }
    mc_hmap_cleanup(&m->tasks);
    queues_init(m);
}

static mc_task_t *task_find(mc_master_t *m, mc_uuid_t id)
{
    mc_hnode_t *n = mc_hmap_find(&m->tasks, mc_master_uuid_hash(id), &id, task_eq);
    return n ? mc_container_of(n, mc_task_t, node) : NULL;
}

/* The queue of a task in @p status (FAILED and SUCCESS share one). */
static mc_task_queue_t *queue_of(mc_master_t *m, uint8_t status)
{
    return &m->taskq[(status == MC_TASK_PENDING)      ? MC_TASKQ_PENDING
                     : (status == MC_TASK_PROCESSING) ? MC_TASKQ_PROCESSING
                                                      : MC_TASKQ_FINISHED];
}

/* The oldest task of queue @p q, or NULL. */
static mc_task_t *queue_head(mc_master_t *m, int q)
{
    mc_mlist_t *l = &m->taskq[q].list;
    return mc_mlist_empty(l) ? NULL : mc_container_of(l->next, mc_task_t, state_link);
}

/* Move @p t to @p status (tail of its queue), stamping the change. */
static void task_set_state(mc_master_t *m, mc_task_t *t, uint8_t status, uint64_t now_ms)
{
    mc_task_queue_t *q = queue_of(m, status);

    queue_of(m, t->status)->n--;
    mc_mlist_remove(&t->state_link);
    t->status         = status;
    t->updated_ms     = mc_wall_ms();
    t->state_since_ms = now_ms;
    mc_mlist_insert_tail(&q->list, &t->state_link);
    q->n++;
    mc_journal_task(m, t, 1);
}

/* Forget finished tasks beyond --max_total_finished_tasks, oldest first. */
static void prune_finished(mc_master_t *m)
{
    uint64_t keep = (uint64_t)m->cfg->max_total_finished_tasks;
    mc_task_t *t;

    while ((m->taskq[MC_TASKQ_FINISHED].n > keep) &&
           ((t = queue_head(m, MC_TASKQ_FINISHED)) != NULL)) {
        mc_mlist_remove(&t->state_link);
        m->taskq[MC_TASKQ_FINISHED].n--;
        mc_hmap_remove(&m->tasks, &t->node);
        mc_journal_task(m, t, 0);
        task_free(t);
    }
}

/* Unstage @p t: its new buffers are freed now (@p defer 0: the executor
 * is not writing them any more) or parked until no executor can be
 * (@p defer 1); the object is released. */
static void task_unstage(mc_master_t *m, mc_task_t *t, int defer, uint64_t now_ms)
{
    if (defer)
        mc_master_replicas_defer(
            m, &t->staged, now_ms + (uint64_t)m->cfg->put_start_release_timeout_sec * 1000u);
    else
        mc_master_replicas_free(m, &t->staged);
    mc_mlist_remove(&t->obj_link);
    t->obj            = NULL;
    t->nstaged        = 0;
    t->source_replica = 0; /* END now has nothing to commit */
}

/* A promotion failed: the object's next reads may queue another. */
static void promotion_failed(mc_master_t *m, const mc_task_t *t)
{
    mc_object_t *o = mc_master_object_find(m, (mc_str_t){t->tenant, t->tenant_len},
                                           (mc_str_t){t->key, t->key_len});
    if ((o != NULL) && (o->ext != NULL))
        o->ext->disk_hits = 0;
}

/* End @p t with @p status and a message (printf style). */
static void task_finish(mc_master_t *m, mc_task_t *t, uint8_t status, int defer, uint64_t now_ms,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void task_finish(mc_master_t *m, mc_task_t *t, uint8_t status, int defer, uint64_t now_ms,
                        const char *fmt, ...)
{
    char buf[MC_TASK_MESSAGE_MAX];
    va_list ap;
    char idbuf[37];

    task_unstage(m, t, defer, now_ms);
    if (t->promote && (status != MC_TASK_SUCCESS))
        promotion_failed(m, t);
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    free(t->message);
    t->message = mc_strdup(buf); /* NULL on OOM reads as "" */
    task_set_state(m, t, status, now_ms);
    mc_uuid_format(t->id, idbuf);
    mc_debug("task %s %s: %s", idbuf, status == MC_TASK_SUCCESS ? "succeeded" : "failed", buf);
    prune_finished(m);
}

/* Fail the tasks of queue @p q that have been in it @p timeout_s or
 * longer (0: no limit); @p what names the state and @p flag the limit. */
static void expire_queue(mc_master_t *m, int q, int64_t timeout_s, const char *what,
                         const char *flag, uint64_t now_ms)
{
    uint64_t limit = (uint64_t)timeout_s * 1000u;
    mc_task_t *t;

    while ((limit > 0) && ((t = queue_head(m, q)) != NULL) &&
           (t->state_since_ms + limit <= now_ms))
        task_finish(m, t, MC_TASK_FAILED, 1, now_ms, "%s within %" PRId64 " s (%s)", what,
                    timeout_s, flag);
}

void mc_master_tasks_tick(mc_master_t *m, uint64_t now_ms)
{
    expire_queue(m, MC_TASKQ_PENDING, m->cfg->pending_task_timeout_sec, "not picked up",
                 "pending_task_timeout_sec", now_ms);
    expire_queue(m, MC_TASKQ_PROCESSING, m->cfg->processing_task_timeout_sec, "not completed",
                 "processing_task_timeout_sec", now_ms);
}

/* Fail the unfinished tasks of @p client_id found on @p list. */
static void fail_on_list(mc_master_t *m, mc_mlist_t *list, mc_uuid_t client_id, uint64_t now_ms)
{
    mc_mlist_t *pos, *tmp;
    char idbuf[37];

    mc_uuid_format(client_id, idbuf);
    mc_mlist_for_each_safe(pos, tmp, list)
    {
        mc_task_t *t = mc_container_of(pos, mc_task_t, state_link);
        if (mc_uuid_eq(t->assigned, client_id))
            task_finish(m, t, MC_TASK_FAILED, 1, now_ms,
                        "assigned client %s is gone (closed or expired)", idbuf);
    }
}

void mc_master_tasks_client_gone(mc_master_t *m, mc_uuid_t client_id)
{
    uint64_t now = mc_now_ms();
    /* failing a task appends it to the finished list, never to these two */
    fail_on_list(m, &m->taskq[MC_TASKQ_PENDING].list, client_id, now);
    fail_on_list(m, &m->taskq[MC_TASKQ_PROCESSING].list, client_id, now);
}

void mc_master_tasks_object_gone(mc_master_t *m, mc_object_t *o)
{
    mc_mlist_t *pos, *tmp;
    (void)m;
    if (o->ext == NULL)
        return;
    mc_mlist_for_each_safe(pos, tmp, &o->ext->tasks)
    {
        mc_task_t *t = mc_container_of(pos, mc_task_t, obj_link);
        mc_mlist_remove(&t->obj_link);
        t->obj = NULL; /* END will answer OBJECT_NOT_FOUND */
    }
}

/* ---- creation ------------------------------------------------------------- */

/*
 * A task's target, as upstream answers it: INVALID_PARAMS when no segment
 * of that name is mounted (an empty name or one with a NUL is never
 * mounted), UNAVAILABLE_IN_CURRENT_STATUS when some are but none takes
 * allocations (draining, unmounting, restored and awaiting its owner).
 * Callers check the key first: a missing key is OBJECT_NOT_FOUND whatever
 * the targets are.
 */
static int32_t check_target(mc_master_t *m, mc_str_t name)
{
    int mounted = 0;

    if ((name.len == 0) || (memchr(name.ptr, '\0', name.len) != NULL))
        return MC_INVALID_PARAMS;
    for (uint32_t i = 0; i < m->nseg; i++) {
        const mc_segment_t *seg = m->segv[i];
        if (!mc_str_eq(mc_str_from_cstr(seg->name), name))
            continue;
        if (seg->state == MC_SEG_OK)
            return MC_OK;
        mounted = 1;
    }
    return mounted ? MC_UNAVAILABLE_IN_CURRENT_STATUS : MC_INVALID_PARAMS;
}

/* The replica on @p list (mc_replica_t.link) on a segment named @p name,
 * or NULL.  Every replica of a complete object is COMPLETE. */
static mc_replica_t *replica_named(mc_mlist_t *list, mc_str_t name)
{
    mc_mlist_t *pos;
    for (pos = list->next; pos != list; pos = pos->next) {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        if (mc_str_eq(mc_str_from_cstr(r->seg->name), name))
            return r;
    }
    return NULL;
}

/* The memory replica of @p o on a segment named @p name, or NULL. */
static mc_replica_t *replica_of(const mc_object_t *o, mc_str_t name)
{
    mc_replica_t *r;
    mc_object_for_each_replica(r, o)
    {
        if (mc_str_eq(mc_str_from_cstr(r->seg->name), name))
            return r;
    }
    return NULL;
}

static mc_replica_t *replica_on(const mc_object_t *o, const char *name)
{
    return replica_of(o, mc_str_from_cstr(name));
}

/* 1 when @p name is one of @p names[0..n). */
static int name_in(const char *name, const mc_str_t *names, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (mc_str_eq(mc_str_from_cstr(name), names[i]))
            return 1;
    }
    return 0;
}

/* Create a PENDING task of @p type for @p o read from segment @p source
 * by client @p assigned. */
static int32_t task_create(mc_req_ctx_t *x, uint8_t type, mc_object_t *o, const char *source,
                           mc_uuid_t assigned, const mc_str_t *targets, uint32_t ntargets,
                           mc_uuid_t *id_p)
{
    mc_master_t *m = x->m;
    mc_task_t *t;

    if ((uint64_t)m->taskq[MC_TASKQ_PENDING].n >= (uint64_t)m->cfg->max_total_pending_tasks)
        return MC_TASK_PENDING_LIMIT_EXCEEDED;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return MC_INTERNAL_ERROR;
    mc_mlist_init(&t->obj_link);
    mc_mlist_init(&t->staged);
    mc_mlist_init(&t->state_link);
    t->tenant     = mc_str_dup(mc_object_tenant(o));
    t->key        = mc_str_dup(mc_object_key(o));
    t->tenant_len = (uint32_t)mc_object_tenant(o).len;
    t->key_len    = o->key_len;
    t->source     = mc_strdup(source);
    t->targets    = calloc(ntargets, sizeof(*t->targets));
    if ((t->tenant == NULL) || (t->key == NULL) || (t->source == NULL) || (t->targets == NULL))
        goto oom;
    for (t->ntargets = 0; t->ntargets < ntargets; t->ntargets++) {
        t->targets[t->ntargets] = mc_str_dup(targets[t->ntargets]);
        if (t->targets[t->ntargets] == NULL)
            goto oom;
    }
    do
        mc_uuid_generate(&t->id);
    while (mc_uuid_is_nil(t->id) || (task_find(m, t->id) != NULL));
    t->type           = type;
    t->status         = MC_TASK_PENDING;
    t->assigned       = assigned;
    t->created_ms     = mc_wall_ms();
    t->updated_ms     = t->created_ms;
    t->state_since_ms = x->now_ms;
    if (mc_hmap_insert(&m->tasks, &t->node, mc_master_uuid_hash(t->id)) != 0)
        goto oom;
    mc_mlist_insert_tail(&m->taskq[MC_TASKQ_PENDING].list, &t->state_link);
    m->taskq[MC_TASKQ_PENDING].n++;
    mc_journal_task(m, t, 1);
    *id_p = t->id;
    return MC_OK;

oom:
    task_free(t);
    return MC_INTERNAL_ERROR;
}

/* The complete object (tenant, key) of the request, or why not. */
static int32_t find_complete(mc_req_ctx_t *x, mc_str_t key, mc_object_t **o_p)
{
    *o_p = mc_master_object_find(x->m, x->tenant, key);
    if ((*o_p == NULL) || !(*o_p)->complete)
        return MC_OBJECT_NOT_FOUND;
    return MC_OK;
}

/*
 * The checks run in upstream's order, so callers that match on the code
 * see upstream's: no targets (INVALID_PARAMS), the key (OBJECT_NOT_FOUND),
 * each target in turn (check_target()), a memory replica to read
 * (INTERNAL_ERROR for a disk-only object, as upstream's "no valid source
 * replicas"), the pending queue (TASK_PENDING_LIMIT_EXCEEDED).  Duplicate
 * targets and targets that already hold a replica are accepted; the
 * executor skips the latter.
 */
int32_t mc_master_create_copy_task(mc_req_ctx_t *x, const mc_wire_create_copy_task_req_t *req,
                                   mc_wire_create_copy_task_resp_t *resp)
{
    mc_object_t *o;
    mc_replica_t *src = NULL;
    mc_replica_t *r;
    int32_t st;

    if (req->targets.n == 0)
        return MC_INVALID_PARAMS;
    if ((st = find_complete(x, req->key, &o)) != MC_OK)
        return st;
    for (uint32_t i = 0; i < req->targets.n; i++) {
        if ((st = check_target(x->m, req->targets.v[i])) != MC_OK)
            return st;
    }
    /* read from a replica that is not itself a target when there is one */
    mc_object_for_each_replica(r, o)
    {
        src = r;
        if (!name_in(src->seg->name, req->targets.v, req->targets.n))
            break;
    }
    if (src == NULL)
        return MC_INTERNAL_ERROR; /* disk-only: no memory replica to read */
    return task_create(x, MC_TASK_REPLICA_COPY, o, src->seg->name, src->seg->owner->id,
                       req->targets.v, req->targets.n, &resp->task_id);
}

/*
 * Upstream's order: the key (OBJECT_NOT_FOUND, also while incomplete),
 * source == target (INVALID_PARAMS), the target (check_target()), a
 * replica on the source (INVALID_PARAMS, an unknown or empty source
 * included), the pending queue.
 */
int32_t mc_master_create_move_task(mc_req_ctx_t *x, const mc_wire_create_move_task_req_t *req,
                                   mc_wire_create_move_task_resp_t *resp)
{
    mc_object_t *o;
    mc_replica_t *src;
    int32_t st;

    if ((st = find_complete(x, req->key, &o)) != MC_OK)
        return st;
    if (mc_str_eq(req->source, req->target))
        return MC_INVALID_PARAMS;
    if ((st = check_target(x->m, req->target)) != MC_OK)
        return st;
    src = (req->source.len == 0) ? NULL : replica_of(o, req->source);
    if (src == NULL)
        return MC_INVALID_PARAMS; /* the source holds no replica of the key */
    return task_create(x, MC_TASK_REPLICA_MOVE, o, src->seg->name, src->seg->owner->id,
                       &req->target, 1, &resp->task_id);
}

void mc_master_promote_hit(mc_req_ctx_t *x, mc_object_t *o)
{
    mc_object_ext_t *ext = mc_master_object_ext(o);
    const mc_disk_replica_t *d;
    mc_str_t target;
    mc_uuid_t id;
    int32_t st;

    if ((ext == NULL) || ((d = ext->disk) == NULL) || (ext->disk_hits == UINT32_MAX))
        return;
    if (++ext->disk_hits != (uint64_t)x->m->cfg->promotion_admission_threshold)
        return; /* below it, or a promotion is already on its way */
    target = mc_str_from_cstr(d->segment);
    if (!mc_master_segment_name_exists(x->m, target)) {
        ext->disk_hits = 0;
        return;
    }
    /* a copy from the holder's disk to the holder's memory: the holder's
     * task executor reads the record (its CRCs checked) and writes it */
    st = task_create(x, MC_TASK_REPLICA_COPY, o, d->segment, d->holder, &target, 1, &id);
    if (st != MC_OK) {
        mc_debug("promotion of %.*s not queued: %s", (int)MC_MIN(o->key_len, 200u),
                 mc_object_key(o).ptr, mc_status_name(st));
        ext->disk_hits = 0; /* the next reads try again */
        return;
    }
    task_find(x->m, id)->promote = 1;
    x->m->promotions_queued++;
}

/* ---- queries and execution --------------------------------------------------- */

int32_t mc_master_query_task(mc_req_ctx_t *x, const mc_wire_query_task_req_t *req,
                             mc_wire_query_task_resp_t *resp)
{
    mc_task_t *t = task_find(x->m, req->task_id);

    if ((t == NULL) || !mc_str_eq((mc_str_t){t->tenant, t->tenant_len}, x->tenant))
        return MC_TASK_NOT_FOUND;
    resp->type               = t->type;
    resp->status             = t->status;
    resp->created_at_ms      = t->created_ms;
    resp->last_updated_at_ms = t->updated_ms;
    resp->assigned_client    = t->assigned;
    resp->message            = mc_str_from_cstr(t->message != NULL ? t->message : "");
    return MC_OK;
}

int32_t mc_master_fetch_tasks(mc_req_ctx_t *x, const mc_wire_fetch_tasks_req_t *req,
                              mc_wire_fetch_tasks_resp_t *resp)
{
    mc_master_t *m = x->m;
    uint64_t room  = (uint64_t)m->cfg->max_total_processing_tasks;
    uint32_t want  = MC_MIN(req->batch_size, (uint32_t)MC_TASK_FETCH_MAX);
    mc_mlist_t *pos, *tmp;

    resp->tasks.n = 0;
    resp->tasks.v = NULL;
    room          = (room > m->taskq[MC_TASKQ_PROCESSING].n) ? room - m->taskq[MC_TASKQ_PROCESSING].n
                                                            : 0;
    if ((uint64_t)want > room)
        want = (uint32_t)room;
    if ((want == 0) || (m->taskq[MC_TASKQ_PENDING].n == 0))
        return MC_OK;
    resp->tasks.v = mc_arena_calloc(x->arena, want, sizeof(*resp->tasks.v));
    if (resp->tasks.v == NULL)
        return MC_INTERNAL_ERROR;
    mc_mlist_for_each_safe(pos, tmp, &m->taskq[MC_TASKQ_PENDING].list)
    {
        mc_task_t *t = mc_container_of(pos, mc_task_t, state_link);
        mc_wire_task_t *w;
        if (resp->tasks.n == want)
            break;
        if (!mc_uuid_eq(t->assigned, req->client_id))
            continue;
        w            = &resp->tasks.v[resp->tasks.n];
        w->targets.v = mc_arena_calloc(x->arena, t->ntargets, sizeof(mc_str_t));
        if (w->targets.v == NULL)
            break; /* this one stays pending; the ones before are handed out */
        resp->tasks.n++;
        w->id                 = t->id;
        w->type               = t->type;
        w->tenant             = (mc_str_t){t->tenant, t->tenant_len};
        w->key                = (mc_str_t){t->key, t->key_len};
        w->source             = mc_str_from_cstr(t->source);
        w->targets.n          = t->ntargets;
        w->created_at_ms      = t->created_ms;
        w->max_retry_attempts = (uint32_t)MC_MIN(m->cfg->max_retry_attempts, (int64_t)UINT32_MAX);
        for (uint32_t i = 0; i < t->ntargets; i++)
            w->targets.v[i] = mc_str_from_cstr(t->targets[i]);
        task_set_state(m, t, MC_TASK_PROCESSING, x->now_ms);
    }
    return MC_OK;
}

/* The PROCESSING task @p id of @p client_id, or why not. */
static int32_t own_task(mc_req_ctx_t *x, mc_uuid_t client_id, mc_uuid_t id, mc_task_t **t_p)
{
    mc_task_t *t = task_find(x->m, id);

    *t_p = NULL;
    if ((t == NULL) || (t->status != MC_TASK_PROCESSING))
        return MC_TASK_NOT_FOUND;
    if (!mc_uuid_eq(t->assigned, client_id))
        return MC_ILLEGAL_CLIENT;
    *t_p = t;
    return MC_OK;
}

int32_t mc_master_task_replica_start(mc_req_ctx_t *x, const mc_wire_task_replica_start_req_t *req,
                                     mc_wire_task_replica_start_resp_t *resp)
{
    mc_master_t *m = x->m;
    mc_task_t *t;
    mc_object_t *o;
    mc_replica_t *src;
    const mc_disk_replica_t *disk = NULL;
    mc_object_ext_t *ext;
    mc_mlist_t *pos;
    uint32_t n = 0;
    int32_t st;

    memset(resp, 0, sizeof(*resp));
    if ((st = own_task(x, req->client_id, req->task_id, &t)) != MC_OK)
        return st;
    if (t->committed)
        return MC_INVALID_PARAMS;
    if (t->obj != NULL || !mc_mlist_empty(&t->staged))
        task_unstage(m, t, 0, x->now_ms); /* a repeated START starts over */
    o = mc_master_object_find(m, (mc_str_t){t->tenant, t->tenant_len},
                              (mc_str_t){t->key, t->key_len});
    if ((o == NULL) || !o->complete)
        return MC_OBJECT_NOT_FOUND;
    /* a promotion reads the disk replica of a disk-only object, nothing
     * else: once the object is back in memory it has nothing to do */
    src = t->promote ? NULL : replica_on(o, t->source);
    if ((src == NULL) && (t->type == MC_TASK_REPLICA_COPY) && !t->promote) {
        /* the copy source went away: any other complete replica of ours */
        mc_replica_t *r;
        mc_object_for_each_replica(r, o)
        {
            if ((r->status == MC_REPLICA_COMPLETE) && mc_uuid_eq(r->seg->owner->id, t->assigned)) {
                src = r;
                break;
            }
        }
    }
    if ((ext = mc_master_object_ext(o)) == NULL)
        return MC_INTERNAL_ERROR;
    if (t->promote && !mc_object_has_replicas(o) && (ext->disk != NULL) &&
        mc_uuid_eq(ext->disk->holder, t->assigned))
        disk = ext->disk; /* disk-only: the holder reads its record */
    if ((src == NULL) && (disk == NULL))
        return MC_REPLICA_NOT_FOUND;

    for (uint32_t i = 0; i < t->ntargets; i++) {
        mc_replica_t *r;
        int found;
        if ((replica_on(o, t->targets[i]) != NULL) ||
            (replica_named(&t->staged, mc_str_from_cstr(t->targets[i])) != NULL))
            continue; /* already there, or a repeated target: nothing to copy */
        r = mc_master_segment_allocate_named(m, t->targets[i], o->size, &found);
        if (r == NULL) {
            mc_master_replicas_free(m, &t->staged);
            return found ? MC_NO_AVAILABLE_HANDLE : MC_SEGMENT_NOT_FOUND;
        }
        mc_replica_set_obj(r, NULL); /* the task's until END */
        mc_mlist_insert_tail(&t->staged, &r->link);
        n++;
    }

    resp->size      = o->size;
    resp->source.n  = 1;
    resp->source.v  = mc_arena_calloc(x->arena, 1, sizeof(*resp->source.v));
    resp->targets.v = n ? mc_arena_calloc(x->arena, n, sizeof(*resp->targets.v)) : NULL;
    if ((resp->source.v == NULL) || (n && (resp->targets.v == NULL))) {
        mc_master_replicas_free(m, &t->staged);
        memset(resp, 0, sizeof(*resp));
        return MC_INTERNAL_ERROR;
    }
    if (src != NULL)
        mc_master_replica_to_wire(&resp->source.v[0], src, o->size);
    else
        mc_master_disk_to_wire(&resp->source.v[0], disk);
    for (pos = t->staged.next; pos != &t->staged; pos = pos->next)
        mc_master_replica_to_wire(&resp->targets.v[resp->targets.n++],
                                  mc_container_of(pos, mc_replica_t, link), o->size);
    t->obj            = o;
    t->nstaged        = n;
    t->source_replica = (src != NULL) ? src->id : disk->id;
    mc_mlist_insert_tail(&ext->tasks, &t->obj_link);
    return MC_OK;
}

/* The replica of @p o with id @p id, or NULL. */
static mc_replica_t *replica_by_id(mc_object_t *o, uint64_t id)
{
    mc_replica_t *r;
    mc_object_for_each_replica(r, o)
    {
        if (r->id == id)
            return r;
    }
    return NULL;
}

static uint32_t list_len(const mc_mlist_t *h)
{
    uint32_t n = 0;
    for (const mc_mlist_t *p = h->next; p != h; p = p->next)
        n++;
    return n;
}

int32_t mc_master_task_replica_end(mc_req_ctx_t *x, const mc_wire_task_replica_end_req_t *req)
{
    mc_master_t *m = x->m;
    mc_task_t *t;
    mc_object_t *o;
    mc_replica_t *src;
    mc_mlist_t *pos, *tmp;
    int from_disk;
    int32_t st;

    if ((st = own_task(x, req->client_id, req->task_id, &t)) != MC_OK)
        return st;
    if (t->committed)
        return MC_OK; /* a retried END */
    o = t->obj;
    if (o == NULL) {
        /* never started (or revoked), or the object went away since START */
        st = (t->source_replica == 0) ? MC_INVALID_PARAMS : MC_OBJECT_NOT_FOUND;
        task_unstage(m, t, 0, x->now_ms);
        return st;
    }
    src = replica_by_id(o, t->source_replica);
    /* a promotion read the disk replica: it must still be the one
     * handed out (an upsert drops it, a re-offload renews its id) */
    from_disk = (src == NULL) && t->promote && (o->ext != NULL) && (o->ext->disk != NULL) &&
                (o->ext->disk->id == t->source_replica);
    if (((src == NULL) && !from_disk) || (list_len(&t->staged) != t->nstaged)) {
        /* the bytes read or a buffer written went away under the copy */
        task_unstage(m, t, 0, x->now_ms);
        return MC_REPLICA_IS_GONE;
    }
    mc_mlist_for_each_safe(pos, tmp, &t->staged)
    {
        mc_replica_t *r = mc_container_of(pos, mc_replica_t, link);
        if (replica_on(o, r->seg->name) != NULL) {
            /* another task put a replica there meanwhile: one is enough */
            mc_master_replica_free(m, r);
            continue;
        }
        mc_mlist_remove(&r->link);
        r->status = MC_REPLICA_COMPLETE;
        mc_replica_set_obj(r, o);
        mc_mlist_insert_tail(&o->replicas, &r->link);
    }
    t->nstaged = 0;
    mc_mlist_remove(&t->obj_link);
    t->obj = NULL;
    /* a move drops its source (never its target: creation refused
     * target == source) once the target holds the bytes, which it may no
     * longer when a replica skipped at START went with its segment */
    if ((t->type == MC_TASK_REPLICA_MOVE) && (replica_on(o, t->targets[0]) != NULL))
        mc_master_replica_retire(m, o, src, x->now_ms);
    if (from_disk && mc_object_has_replicas(o)) {
        /* promoted: in memory again, so on the LRU again */
        o->ext->disk_hits = 0;
        mc_master_lru_touch(m, o);
        m->promotions_done++;
    }
    mc_journal_object(m, o); /* the new replicas */
    t->committed = 1;
    return MC_OK;
}

int32_t mc_master_task_replica_revoke(mc_req_ctx_t *x,
                                      const mc_wire_task_replica_revoke_req_t *req)
{
    mc_task_t *t;
    int32_t st;

    if ((st = own_task(x, req->client_id, req->task_id, &t)) != MC_OK)
        return st;
    if (t->committed)
        return MC_INVALID_PARAMS; /* END already made them replicas */
    task_unstage(x->m, t, 0, x->now_ms);
    return MC_OK;
}

int32_t mc_master_mark_task_complete(mc_req_ctx_t *x,
                                     const mc_wire_mark_task_complete_req_t *req)
{
    mc_task_t *t;
    const char *nul;
    int32_t st;
    size_t len;

    if ((req->status != MC_TASK_SUCCESS) && (req->status != MC_TASK_FAILED))
        return MC_INVALID_PARAMS;
    if ((st = own_task(x, req->client_id, req->task_id, &t)) != MC_OK)
        return st;
    if ((req->status == MC_TASK_SUCCESS) && !t->committed)
        return MC_INVALID_PARAMS;
    len = MC_MIN(req->message.len, (size_t)MC_TASK_MESSAGE_MAX - 1);
    nul = (len > 0) ? memchr(req->message.ptr, '\0', len) : NULL;
    if (nul != NULL)
        len = (size_t)(nul - req->message.ptr);
    task_finish(x->m, t, req->status, 0, x->now_ms, "%.*s", (int)len,
                len ? req->message.ptr : "");
    return MC_OK;
}

/* ---- restore (snapshot.c) ------------------------------------------------------- */

int mc_master_task_restore(mc_master_t *m, const mc_oplog_record_t *r, uint64_t now_ms)
{
    mc_task_t *t;
    mc_str_t msg = r->message;
    uint8_t status = r->status;

    if ((r->ntargets == 0) || (task_find(m, r->id) != NULL) ||
        ((status != MC_TASK_PENDING) && (status != MC_TASK_PROCESSING) &&
         (status != MC_TASK_SUCCESS) && (status != MC_TASK_FAILED)))
        return -1;
    if (status == MC_TASK_PROCESSING) {
        /* its executor's new buffers were not kept: it cannot commit */
        status = MC_TASK_FAILED;
        msg    = mc_str_from_cstr("the master restarted while the task was processing");
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -1;
    mc_mlist_init(&t->obj_link);
    mc_mlist_init(&t->staged);
    mc_mlist_init(&t->state_link);
    t->id         = r->id;
    t->assigned   = r->owner;
    t->type       = r->task_type;
    t->status     = status;
    t->created_ms = r->created_ms;
    t->updated_ms = r->updated_ms;
    t->state_since_ms = now_ms;
    t->tenant     = mc_str_dup(r->tenant);
    t->key        = mc_str_dup(r->key);
    t->tenant_len = r->tenant.len;
    t->key_len    = r->key.len;
    t->source     = mc_str_dup(r->name);
    t->targets    = calloc(r->ntargets, sizeof(*t->targets));
    if ((status != MC_TASK_PENDING) && ((r->has_message) || (status != r->status)))
        t->message = mc_str_dup(msg);
    if ((t->tenant == NULL) || (t->key == NULL) || (t->source == NULL) || (t->targets == NULL))
        goto oom;
    {
        mc_str_t *tg = calloc(r->ntargets, sizeof(*tg));
        if (tg == NULL)
            goto oom;
        mc_oplog_record_targets(r, tg);
        for (t->ntargets = 0; t->ntargets < r->ntargets; t->ntargets++) {
            t->targets[t->ntargets] = mc_str_dup(tg[t->ntargets]);
            if (t->targets[t->ntargets] == NULL) {
                free(tg);
                goto oom;
            }
        }
        free(tg);
    }
    if (mc_hmap_insert(&m->tasks, &t->node, mc_master_uuid_hash(t->id)) != 0)
        goto oom;
    mc_mlist_insert_tail(&queue_of(m, status)->list, &t->state_link);
    queue_of(m, status)->n++;
    return 0;
oom:
    task_free(t);
    return -1;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copy and move tasks: the public calls that submit and query them, and
 * the executor thread that carries out the tasks the master assigns to
 * this client (docs/protocol.md §5.13, docs/threads.md).
 *
 * Submitting (CREATE_COPY_TASK, CREATE_MOVE_TASK) and querying
 * (QUERY_TASK) are plain calls on the store's connection pool.  Arguments
 * no master could take (a bad key, a NULL or over-long segment name, no
 * targets, a task id that is not a UUID) are refused here, before any
 * round trip; everything else -- an empty or unknown segment name
 * included -- is the master's to answer, in upstream's order of checks
 * (mooncake-master/index/tasks.c), so C, Lua and Python callers get the same
 * codes.
 *
 * The executor: the master assigns a task to the client owning the
 * replica to read, so every client that can own replicas polls
 * FETCH_TASKS every second (upstream's TaskPollThreadMain; the
 * MC_TASK_POLL_INTERVAL_MS environment variable overrides it for tests).
 * A client that has no segment mounted owns nothing and skips the poll,
 * so the thread costs no master traffic until a segment appears.  Like the
 * heartbeat it has its own master connection, so a long copy never delays
 * a ping and a busy pool never delays a task; the thread and its
 * connection are a worker (worker.c), so stopping is prompt.
 *
 * One task: TASK_REPLICA_START (the master allocates a buffer on each
 * target without a replica and pins the object), the bytes move from the
 * source replica to every new buffer in one mc_te_transfer(), then
 * TASK_REPLICA_END (the buffers become COMPLETE replicas; a move drops the
 * source) and MARK_TASK_COMPLETE SUCCESS ("Task completed successfully").
 * NO_AVAILABLE_HANDLE from START is retried up to the task's
 * max_retry_attempts with a short backoff; any other failure ends the task
 * FAILED with upstream's message "STATUS_NAME (max retries reached: N)",
 * after TASK_REPLICA_REVOKE when buffers were allocated; the log line
 * ("Copy failed for key: K ...") has the step and the detail.
 * The tasks of one fetch run one after another.
 *
 * The source replica is normally in one of our own segments.  Its bytes
 * are then written straight out of that memory: the range must lie inside
 * a segment we have mounted, and the engine region holding it is pinned
 * (mc_te_region_acquire) for the duration of the transfer, so an unmount
 * racing with the copy waits for it instead of unmapping the memory under
 * it.  A source anywhere else (another segment name, or a range that is
 * not ours) is read through the transfer engine into a bounce buffer, in
 * chunks, exactly as a get would read it; the owner's range check is then
 * the authority.  Descriptors from the master are checked before use: a
 * replica smaller than the object, a wrapping range or an unusable segment
 * name fails the task without moving a byte.
 *
 * May call: threads.h (this folder), ../calls.c, ../tiers/tiers.h (a source
 * replica on the SSD tier), the master pool, the engine.  Called by: the
 * public API, store.c (start, stop).
 */
#include "config.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"
#include "store/tiers/tiers.h"
#include "transfer/engine.h"

#define MC_TASK_POLL_MS 1000
#define MC_TASK_BATCH 8
#define MC_TASK_CONNECT_TIMEOUT_MS 1000
#define MC_TASK_IO_TIMEOUT_MS 10000
/* Backoff between NO_AVAILABLE_HANDLE retries: 100 ms doubling, at most 1 s. */
#define MC_TASK_BACKOFF_MS 100
#define MC_TASK_BACKOFF_MAX_MS 1000
/* A hostile retry budget cannot keep the thread on one task for ever. */
#define MC_TASK_RETRY_CAP 100
/* Bounce buffer of a source that is not in our own memory. */
#define MC_TASK_CHUNK (4u << 20)
#define MC_TASK_MSG 512

/* ---- submission and queries ------------------------------------------------ */

/*
 * A segment name the wire can carry: at most MC_WIRE_MAX_KEY bytes.  An
 * empty name goes to the master, which answers INVALID_PARAMS for it (no
 * segment has that name) only after it checked the key, so the caller
 * sees upstream's order of checks (OBJECT_NOT_FOUND first).
 */
static mc_status_t check_segment_name(const char *what, const char *name)
{
    if (name == NULL) {
        mc_set_error_detail("%s segment name is NULL", what);
        return MC_INVALID_PARAMS;
    }
    if (strnlen(name, MC_WIRE_MAX_KEY + 1) > MC_WIRE_MAX_KEY) {
        mc_set_error_detail("%s segment name is longer than %u bytes", what,
                            (unsigned)MC_WIRE_MAX_KEY);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

mc_status_t mc_emb_copy_task(mc_store_h s, const char *key, const char *const *targets, size_t n,
                             mc_task_id_t *id_out)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *wt     = NULL;
    mc_wire_create_copy_task_req_t req;
    mc_wire_create_copy_task_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_check_key(key, NULL);
    if (st != MC_OK)
        goto out;
    if ((id_out == NULL) || (targets == NULL) || (n == 0) || (n > MC_WIRE_MAX_LIST)) {
        mc_set_error_detail("a copy task needs 1 to %u target segments and an id output",
                            (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        st = check_segment_name("target", targets[i]);
        if (st != MC_OK)
            goto out;
    }
    wt = calloc(n, sizeof(*wt));
    if (wt == NULL) {
        mc_set_error_detail("out of memory");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        wt[i] = mc_str_from_cstr(targets[i]);
        /* A target is a KEY on the wire, never empty: "" travels as the
         * name "\0", which no segment can have, so the master still
         * answers INVALID_PARAMS for it after its key check. */
        if (wt[i].len == 0)
            wt[i] = (mc_str_t){"", 1};
    }

    memset(&req, 0, sizeof(req));
    req.key       = mc_str_from_cstr(key);
    req.targets.n = (uint32_t)n;
    req.targets.v = wt;
    st            = mc_master_pool_call_create_copy_task(&s->pool, &conn, &req, &resp);
    if (st == MC_OK)
        mc_uuid_format(resp.task_id, id_out->id);

out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    free(wt);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_create_copy_task(mc_store_h s, const char *key,
                                             const char *const *targets, size_t n,
                                             mc_task_id_t *id_out)
{
    return MC_STORE_DISPATCH(s, copy_task, key, targets, n, id_out);
}

mc_status_t mc_emb_move_task(mc_store_h s, const char *key, const char *source, const char *target,
                             mc_task_id_t *id_out)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_create_move_task_req_t req;
    mc_wire_create_move_task_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_check_key(key, NULL);
    if (st == MC_OK)
        st = check_segment_name("source", source);
    if (st == MC_OK)
        st = check_segment_name("target", target);
    if ((st == MC_OK) && (id_out == NULL)) {
        mc_set_error_detail("id output is NULL");
        st = MC_INVALID_PARAMS;
    }
    if (st != MC_OK)
        goto out;

    memset(&req, 0, sizeof(req));
    req.key    = mc_str_from_cstr(key);
    req.source = mc_str_from_cstr(source);
    req.target = mc_str_from_cstr(target);
    st         = mc_master_pool_call_create_move_task(&s->pool, &conn, &req, &resp);
    if (st == MC_OK)
        mc_uuid_format(resp.task_id, id_out->id);

out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_create_move_task(mc_store_h s, const char *key,
                                             const char *source, const char *target,
                                             mc_task_id_t *id_out)
{
    return MC_STORE_DISPATCH(s, move_task, key, source, target, id_out);
}

/* Copy @p m into @p out (cap bytes, NUL included): stops at an embedded
 * NUL and cuts a too long message at a UTF-8 character boundary. */
static void copy_message(char *out, size_t cap, mc_str_t m)
{
    size_t len = m.len;
    const char *nul = (len > 0) ? memchr(m.ptr, '\0', len) : NULL;

    if (nul != NULL)
        len = (size_t)(nul - m.ptr);
    if (len >= cap) {
        len = cap - 1;
        /* back off continuation bytes (10xxxxxx) to the start of a character */
        while ((len > 0) && (((unsigned char)m.ptr[len] & 0xc0u) == 0x80u))
            len--;
    }
    if (len > 0)
        memcpy(out, m.ptr, len);
    out[len] = '\0';
}

mc_status_t mc_emb_query_task(mc_store_h s, const char *task_id, mc_store_task_info_t *out)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_uuid_t id;
    mc_wire_query_task_req_t req;
    mc_wire_query_task_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if ((out == NULL) || (task_id == NULL) || (strnlen(task_id, 37) != 36) ||
        (mc_uuid_parse(task_id, &id) != 0)) {
        mc_set_error_detail("query_task needs a task id (UUID text) and an output");
        st = MC_INVALID_PARAMS;
        goto out;
    }

    memset(&req, 0, sizeof(req));
    req.task_id = id;
    st          = mc_master_pool_call_query_task(&s->pool, &conn, &req, &resp);
    if (st != MC_OK)
        goto out;
    memset(out, 0, sizeof(*out));
    mc_uuid_format(id, out->id.id);
    out->type                     = (mc_task_type_t)resp.type;
    out->status                   = (mc_task_status_t)resp.status;
    out->created_at_ms_epoch      = resp.created_at_ms;
    out->last_updated_at_ms_epoch = resp.last_updated_at_ms;
    mc_uuid_format(resp.assigned_client, out->assigned_client);
    copy_message(out->message, sizeof(out->message), resp.message);

out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_query_task(mc_store_h s, const char *task_id,
                                       mc_store_task_info_t *out)
{
    return MC_STORE_DISPATCH(s, query_task, task_id, out);
}

/* ---- the executor: its connection ------------------------------------------- */

/* What the thread keeps of a fetched task (the response borrows from the
 * connection, which the next call reuses). */
typedef struct task {
    mc_uuid_t id;
    uint8_t type;
    uint32_t max_retry;
    char idtext[37];
    char key[MC_WIRE_MAX_KEY + 1]; /* a promotion checks it against the disk record */
    size_t key_len;
} task_t;

/* After a call: a connection whose transport failed is dropped. */
static void tasks_after_call(mc_store_worker_t *t, mc_mconn_t *conn)
{
    if (conn->broken)
        mc_store_worker_drop_conn(t);
}

/* ---- the executor: one task -------------------------------------------------- */

static void task_revoke(mc_store_h s, const mc_master_target_t *target, const task_t *k)
{
    mc_store_worker_t *t = &s->tasks;
    mc_mconn_t *conn    = mc_store_worker_conn(t, target);
    mc_wire_task_replica_revoke_req_t req;
    mc_wire_task_replica_revoke_resp_t resp;
    mc_status_t st;

    if (conn == NULL)
        return;
    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.task_id   = k->id;
    st            = mc_master_call_task_replica_revoke(conn, &req, &resp);
    if (st != MC_OK)
        mc_debug("task %s: TASK_REPLICA_REVOKE: %s (%s)", k->idtext, mc_status_name(st),
                 mc_last_error_detail());
    tasks_after_call(t, conn);
}

/* MARK_TASK_COMPLETE; a connection lost on the way is dialled again once,
 * so a transport hiccup does not leave the task PROCESSING until the
 * master's timeout. */
static void task_complete(mc_store_h s, const mc_master_target_t *target, const task_t *k,
                          mc_task_status_t status, const char *msg)
{
    mc_store_worker_t *t = &s->tasks;
    mc_wire_mark_task_complete_req_t req;
    mc_wire_mark_task_complete_resp_t resp;
    mc_status_t st = MC_RPC_FAIL;

    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.task_id   = k->id;
    req.status    = (uint8_t)status;
    req.message   = mc_str_from_cstr(msg);
    for (int attempt = 0; attempt < 2; attempt++) {
        mc_mconn_t *conn = mc_store_worker_conn(t, target);
        if (conn == NULL)
            break;
        st = mc_master_call_mark_task_complete(conn, &req, &resp);
        tasks_after_call(t, conn);
        if ((st != MC_RPC_FAIL) && (st != MC_RPC_TIMEOUT))
            break;
    }
    if (st != MC_OK)
        mc_warn("task %s (%.128s): reporting %s failed: %s (%s)", k->idtext, k->key,
                (status == MC_TASK_SUCCESS) ? "SUCCESS" : "FAILED", mc_status_name(st),
                mc_last_error_detail());
    else if (status == MC_TASK_SUCCESS)
        mc_debug("task %s (%.128s) done", k->idtext, k->key);
}

/*
 * A task that failed with @p st at step @p what.  The log line names the
 * key first, as upstream's ("Copy failed for key: K" / "Move failed for
 * key: K"), then the step, the status and its detail; the task's message
 * on the master is upstream's "STATUS_NAME (max retries reached: N)", N
 * the task's retry budget (only NO_AVAILABLE_HANDLE is retried), which is
 * what callers of query_task match on.  @p revoke frees the buffers a
 * START allocated first (the detail is read before that call replaces it).
 */
static void task_failed(mc_store_h s, const mc_master_target_t *target, const task_t *k,
                        const char *what, mc_status_t st, int revoke)
{
    char msg[MC_TASK_MSG];
    const char *detail = mc_last_error_detail();
    int has_detail     = (detail != NULL) && (*detail != '\0');

    mc_warn("%s failed for key: %.128s (task %s): %s: %s%s%s%s",
            (k->type == MC_TASK_REPLICA_MOVE) ? "Move" : "Copy", k->key, k->idtext, what,
            mc_status_name(st), has_detail ? " (" : "", has_detail ? detail : "",
            has_detail ? ")" : "");
    if (revoke)
        task_revoke(s, target, k);
    snprintf(msg, sizeof(msg), "%s (max retries reached: %u)", mc_status_name(st),
             (unsigned)k->max_retry);
    task_complete(s, target, k, MC_TASK_FAILED, msg);
}

/* A replica descriptor good for @p size bytes: a memory replica whose range
 * does not wrap and whose segment name fits. */
static mc_status_t check_replica(const mc_wire_replica_t *r, uint64_t size, const char *what)
{
    if ((r->type != 0) || (r->size < size) || (r->addr > UINT64_MAX - size) ||
        (r->segment.len == 0) || (r->segment.len >= MC_STORE_NAME_MAX) ||
        (memchr(r->segment.ptr, '\0', r->segment.len) != NULL)) {
        mc_set_error_detail("master returned an unusable %s replica (type %u, %llu bytes "
                            "for a %llu-byte object, segment name of %u bytes)",
                            what, (unsigned)r->type, (unsigned long long)r->size,
                            (unsigned long long)size, (unsigned)r->segment.len);
        return MC_INVALID_REPLICA;
    }
    return MC_OK;
}

static mc_status_t open_segment(mc_store_h s, mc_str_t name, mc_te_segment_id_t *seg_p)
{
    char buf[MC_STORE_NAME_MAX];
    memcpy(buf, name.ptr, name.len); /* length checked by check_replica */
    buf[name.len] = '\0';
    return mc_te_segment_open(s->te, buf, seg_p);
}

/* The writes reqs[0..tg->n) into the target replicas @p tg, each naming
 * its segment's registration generation: a holder that registered that
 * memory again since the master placed the target refuses the write. */
static mc_status_t write_targets(mc_store_h s, const mc_te_request_t *reqs,
                                 const mc_wire_replica_list_t *tg)
{
    uint64_t stack[8] = {0};
    uint64_t *gens = (tg->n <= MC_ARRAY_SIZE(stack)) ? stack : malloc(tg->n * sizeof(*gens));
    mc_status_t st;

    if (gens == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    for (uint32_t i = 0; i < tg->n; i++)
        gens[i] = mc_store_replica_gen(&tg->v[i]);
    st = mc_te_transfer_gen(s->te, reqs, gens, tg->n, NULL);
    if (gens != stack)
        free(gens);
    return st;
}

/* Pin the engine region of [addr, addr+size) when the range lies inside
 * one of our mounted segments (checked under seg_lock, so an unmount cannot
 * slip between the check and the pin); NULL otherwise. */
static mc_te_region_t *pin_local_source(mc_store_h s, uint64_t addr, uint64_t size)
{
    mc_te_region_t *r = NULL;

    pthread_mutex_lock(&s->seg_lock);
    for (size_t i = 0; i < s->nsegs; i++) {
        const mc_store_segment_t *g = &s->segs[i];
        uint64_t base               = (uint64_t)(uintptr_t)g->base;
        if (!g->registered || (addr < base) || (addr - base > g->size) ||
            (size > g->size - (addr - base)))
            continue;
        r = mc_te_region_acquire(s->te, addr, size, MC_TE_MEM_REMOTE_ACCESS);
        break;
    }
    pthread_mutex_unlock(&s->seg_lock);
    return r;
}

/* Write @p size bytes from the source replica to every target replica. */
static mc_status_t task_copy(mc_store_h s, const mc_wire_replica_t *src,
                             const mc_wire_replica_list_t *tg, uint64_t size)
{
    mc_status_t st = MC_OK;
    mc_te_request_t *reqs = NULL;
    mc_te_segment_id_t *segs = NULL;
    mc_te_segment_id_t src_seg;
    mc_te_region_t *region = NULL;
    uint8_t *bounce        = NULL;
    int local;

    if (size == 0)
        return MC_OK;
    reqs = calloc(tg->n, sizeof(*reqs));
    segs = calloc(tg->n, sizeof(*segs));
    if ((reqs == NULL) || (segs == NULL)) {
        mc_set_error_detail("out of memory");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (uint32_t i = 0; i < tg->n; i++) {
        st = open_segment(s, tg->v[i].segment, &segs[i]);
        if (st != MC_OK)
            goto out;
    }

    local = (src->segment.len == strlen(s->hostname)) &&
            (memcmp(src->segment.ptr, s->hostname, src->segment.len) == 0);
    if (local)
        region = pin_local_source(s, src->addr, size);
    if (region != NULL) {
        /* zero copy: straight out of our own segment */
        for (uint32_t i = 0; i < tg->n; i++) {
            reqs[i].op      = MC_TE_WRITE;
            reqs[i].local   = (void *)(uintptr_t)src->addr;
            reqs[i].remote  = tg->v[i].addr;
            reqs[i].length  = size;
            reqs[i].segment = segs[i];
        }
        st = write_targets(s, reqs, tg);
        goto out;
    }

    /* anywhere else: read it through the engine, chunk by chunk */
    if (local)
        mc_debug("task source [0x%llx, +%llu) is not in a mounted segment of ours; "
                 "reading it through the engine", (unsigned long long)src->addr,
                 (unsigned long long)size);
    st = open_segment(s, src->segment, &src_seg);
    if (st != MC_OK)
        goto out;
    bounce = malloc((size < MC_TASK_CHUNK) ? (size_t)size : MC_TASK_CHUNK);
    if (bounce == NULL) {
        mc_set_error_detail("out of memory");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (uint64_t off = 0; off < size;) {
        uint64_t len = size - off;
        mc_te_request_t rd;
        if (len > MC_TASK_CHUNK)
            len = MC_TASK_CHUNK;
        memset(&rd, 0, sizeof(rd));
        rd.op      = MC_TE_READ;
        rd.local   = bounce;
        rd.remote  = src->addr + off;
        rd.length  = len;
        rd.segment = src_seg;
        st         = mc_te_transfer(s->te, &rd, 1, NULL);
        if (st != MC_OK)
            goto out;
        for (uint32_t i = 0; i < tg->n; i++) {
            reqs[i].op      = MC_TE_WRITE;
            reqs[i].local   = bounce;
            reqs[i].remote  = tg->v[i].addr + off;
            reqs[i].length  = len;
            reqs[i].segment = segs[i];
        }
        st = write_targets(s, reqs, tg);
        if (st != MC_OK)
            goto out;
        off += len;
    }

out:
    if (region != NULL)
        mc_te_region_release(s->te, region);
    free(bounce);
    free(segs);
    free(reqs);
    return st;
}

/* 1 when @p r is a disk replica on our own tier: the source of a
 * promotion (docs/tiers.md), which only the holder can read. */
static int own_disk_replica(mc_store_h s, const mc_wire_replica_t *r, uint64_t size)
{
    return (r->type == MC_WIRE_REPLICA_DISK) && (r->size == size) && (size <= SIZE_MAX) &&
           (r->segment.len == strlen(s->hostname)) &&
           (memcmp(r->segment.ptr, s->hostname, r->segment.len) == 0) &&
           (r->file_path.len > 0) && (r->file_path.len < PATH_MAX) &&
           (memchr(r->file_path.ptr, '\0', r->file_path.len) == NULL);
}

/* A promotion: read the record of @p src from our tier (key, length and
 * both CRCs checked, so a damaged or reused record is never copied), then
 * write the bytes to every target. */
static mc_status_t task_copy_disk(mc_store_h s, const task_t *k, const mc_wire_replica_t *src,
                                  const mc_wire_replica_list_t *tg, uint64_t size)
{
    char path[PATH_MAX];
    mc_te_request_t *reqs = calloc(tg->n ? tg->n : 1, sizeof(*reqs));
    uint8_t *buf          = malloc(size ? (size_t)size : 1);
    mc_status_t st        = MC_OK;

    if ((reqs == NULL) || (buf == NULL)) {
        mc_set_error_detail("out of memory");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    memcpy(path, src->file_path.ptr, src->file_path.len);
    path[src->file_path.len] = '\0';
    st = mc_store_disk_read(path, src->addr, (mc_str_t){k->key, k->key_len}, size, src->crc, buf);
    for (uint32_t i = 0; (st == MC_OK) && (i < tg->n); i++) {
        st               = open_segment(s, tg->v[i].segment, &reqs[i].segment);
        reqs[i].op       = MC_TE_WRITE;
        reqs[i].local    = buf;
        reqs[i].remote   = tg->v[i].addr;
        reqs[i].length   = size;
    }
    if ((st == MC_OK) && (size > 0) && (tg->n > 0))
        st = write_targets(s, reqs, tg);
out:
    free(buf);
    free(reqs);
    return st;
}

static void task_run(mc_store_h s, const mc_master_target_t *target, const task_t *k)
{
    mc_store_worker_t *t = &s->tasks;
    mc_status_t st = MC_OK;
    mc_mconn_t *conn;
    mc_wire_task_replica_start_req_t req;
    mc_wire_task_replica_start_resp_t resp;
    const mc_wire_replica_t *src = NULL;
    uint32_t retries = 0, budget = k->max_retry;
    int from_disk = 0;

    if (budget > MC_TASK_RETRY_CAP)
        budget = MC_TASK_RETRY_CAP;
    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.task_id   = k->id;
    for (;;) {
        conn = mc_store_worker_conn(t, target);
        if (conn == NULL)
            return; /* stopping, or no master: its timeout ends the task */
        st = mc_master_call_task_replica_start(conn, &req, &resp);
        if ((st == MC_NO_AVAILABLE_HANDLE) && (retries < budget)) {
            unsigned delay = MC_TASK_BACKOFF_MS << (retries < 4 ? retries : 4);
            if (delay > MC_TASK_BACKOFF_MAX_MS)
                delay = MC_TASK_BACKOFF_MAX_MS;
            retries++;
            mc_debug("task %s: no room on a target, retry %u of %u in %u ms", k->idtext,
                     retries, budget, delay);
            if (mc_store_worker_wait_ms(t, delay))
                return;
            continue;
        }
        break;
    }
    if (st != MC_OK) {
        char what[64];
        snprintf(what, sizeof(what), "TASK_REPLICA_START after %u retries", retries);
        /* Even when the answer was lost the report is right: FAILED frees
         * whatever a START that did reach the master allocated. */
        tasks_after_call(t, conn);
        task_failed(s, target, k, what, st, 0);
        return;
    }

    /* The response borrows from conn; nothing else uses conn until END. */
    for (uint32_t i = 0; (i < resp.source.n) && (src == NULL); i++)
        if ((resp.source.v[i].status == MC_REPLICA_COMPLETE) &&
            (check_replica(&resp.source.v[i], resp.size, "source") == MC_OK))
            src = &resp.source.v[i];
    for (uint32_t i = 0; (i < resp.source.n) && (src == NULL); i++)
        if (own_disk_replica(s, &resp.source.v[i], resp.size)) {
            src      = &resp.source.v[i];
            from_disk = 1;
        }
    if (src == NULL) {
        if (resp.source.n == 0)
            mc_set_error_detail("master returned no source replica");
        st = MC_INVALID_REPLICA;
    }
    for (uint32_t i = 0; (st == MC_OK) && (i < resp.targets.n); i++)
        st = check_replica(&resp.targets.v[i], resp.size, "target");
    if ((st == MC_OK) && from_disk)
        st = task_copy_disk(s, k, src, &resp.targets, resp.size);
    else if (st == MC_OK)
        st = task_copy(s, src, &resp.targets, resp.size);
    if (st != MC_OK) {
        char what[64];
        snprintf(what, sizeof(what), "copying %llu bytes", (unsigned long long)resp.size);
        task_failed(s, target, k, what, st, 1);
        return;
    }

    conn = mc_store_worker_conn(t, target);
    if (conn == NULL)
        return;
    {
        mc_wire_task_replica_end_req_t ereq;
        mc_wire_task_replica_end_resp_t eresp;
        memset(&ereq, 0, sizeof(ereq));
        ereq.client_id = s->client_id;
        ereq.task_id   = k->id;
        st             = mc_master_call_task_replica_end(conn, &ereq, &eresp);
        tasks_after_call(t, conn);
    }
    if (st != MC_OK) {
        task_failed(s, target, k, "TASK_REPLICA_END", st, 0);
        return;
    }
    task_complete(s, target, k, MC_TASK_SUCCESS, "Task completed successfully");
}

/* ---- the executor: polling ------------------------------------------------- */

static int owns_segments(mc_store_h s)
{
    size_t n;
    pthread_mutex_lock(&s->seg_lock);
    n = s->nsegs;
    pthread_mutex_unlock(&s->seg_lock);
    return n > 0;
}

/* One FETCH_TASKS and the tasks it brought. */
static void tasks_poll(mc_store_h s, const mc_master_target_t *target)
{
    mc_store_worker_t *t = &s->tasks;
    task_t batch[MC_TASK_BATCH];
    uint32_t n = 0;
    mc_mconn_t *conn;
    mc_status_t st;
    mc_wire_fetch_tasks_req_t req;
    mc_wire_fetch_tasks_resp_t resp;

    conn = mc_store_worker_conn(t, target);
    if (conn == NULL)
        return;
    memset(&req, 0, sizeof(req));
    req.client_id  = s->client_id;
    req.batch_size = MC_TASK_BATCH;
    st             = mc_master_call_fetch_tasks(conn, &req, &resp);
    if (st != MC_OK) {
        mc_debug("FETCH_TASKS failed: %s (%s)", mc_status_name(st), mc_last_error_detail());
        tasks_after_call(t, conn);
        return;
    }
    /* copy out: the next call on conn reuses the response's memory */
    for (uint32_t i = 0; (i < resp.tasks.n) && (n < MC_TASK_BATCH); i++) {
        const mc_wire_task_t *w = &resp.tasks.v[i];
        task_t *k               = &batch[n++];
        size_t klen             = (w->key.len < sizeof(k->key)) ? w->key.len
                                                                : sizeof(k->key) - 1;
        memset(k, 0, offsetof(task_t, key));
        k->id        = w->id;
        k->type      = w->type;
        k->max_retry = w->max_retry_attempts;
        mc_uuid_format(w->id, k->idtext);
        memcpy(k->key, w->key.ptr, klen);
        k->key[klen] = '\0';
        k->key_len   = klen;
    }
    if (resp.tasks.n > MC_TASK_BATCH)
        mc_warn("master sent %u tasks for a batch of %u; the rest stay PROCESSING",
                (unsigned)resp.tasks.n, (unsigned)MC_TASK_BATCH);
    for (uint32_t i = 0; i < n; i++) {
        if (mc_store_worker_stopping(t))
            break;
        mc_debug("task %s: %s of %.128s", batch[i].idtext,
                 (batch[i].type == MC_TASK_REPLICA_MOVE) ? "move" : "copy", batch[i].key);
        task_run(s, target, &batch[i]);
    }
}

static void *tasks_main(void *arg)
{
    mc_store_h s              = arg;
    mc_store_worker_t *t       = &s->tasks;
    mc_master_target_t target = s->target;

    target.connect_timeout_ms = MC_TASK_CONNECT_TIMEOUT_MS;
    /* one look for the leader per tick (etcd://): stopping stays prompt */
    target.failover_wait_ms = 0;
    if ((target.io_timeout_ms == 0) || (target.io_timeout_ms > MC_TASK_IO_TIMEOUT_MS))
        target.io_timeout_ms = MC_TASK_IO_TIMEOUT_MS;

    while (!mc_store_worker_stopping(t)) {
        if (owns_segments(s))
            tasks_poll(s, &target);
        if (mc_store_worker_wait_ms(t, t->interval_ms))
            break;
    }
    mc_store_worker_drop_conn(t);
    return NULL;
}

mc_status_t mc_store_tasks_start(mc_store_h s)
{
    /* Tests poll faster (or practically never, to keep tasks PENDING). */
    return mc_store_worker_start(
        &s->tasks, "task executor",
        mc_store_env_interval_ms("MC_TASK_POLL_INTERVAL_MS", MC_TASK_POLL_MS, 10, 86400000),
        tasks_main, s);
}

void mc_store_tasks_stop(mc_store_h s)
{
    mc_store_worker_stop(&s->tasks);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master RPC server (docs/protocol.md §1-§4).
 *
 * One libevent listener; one bufferevent per connection for its output,
 * and an event of our own for its input (conn_readable_cb: one recv into
 * the input buffer per wake-up, with no FIONREAD ioctl before it as
 * libevent's reader makes, and up to MC_CONN_READ_CHUNK at once, not
 * libevent's 4 KiB); everything runs on the master's single event loop.
 * Each connection is a small state machine driven by conn_drive():
 *
 *   READ_HEADER --16 bytes, valid--> READ_BODY --body_len bytes--> dispatch
 *        ^                                                          |
 *        +----------------------------------------------------------+
 *   any state --bad frame / peer gone--> CLOSING (flush, then free)
 *
 * Every complete frame already in the input buffer is handled in order
 * before returning to the loop (pipelining); each response carries the
 * request_id of its request.  The responses of one such pass are
 * gathered in c->tx and, when nothing older is waiting in the
 * bufferevent's output, written with one send() right away (conn_flush):
 * a request/response exchange then costs the master one read and one
 * send, not the extra loop pass and the two epoll_ctl calls of arming a
 * write event.  Whatever the socket does not take goes to the bufferevent,
 * which keeps the order and the backpressure below.  A frame that breaks the protocol (bad magic,
 * version or flags, a body over MC_WIRE_MAX_BODY, an unknown opcode, a body
 * that does not decode) closes that connection only: there is no way to
 * resynchronise a byte stream, and the peer is either broken or hostile.
 * Responses already queued for earlier frames are still flushed.
 *
 * Backpressure: when more than MC_CONN_OUT_HIGH bytes of responses wait
 * for a peer that does not read them, the connection stops reading (and so
 * stops producing responses) until the backlog drains below
 * MC_CONN_OUT_LOW.  A peer that reads nothing for MC_CONN_WRITE_TIMEOUT_S
 * is closed.  Input: each message type has a largest body
 * (conn_admit_body()); a connection buffers at most MC_CONN_IN_BASE
 * beyond a large frame, whose body is reserved against
 * --rpc_max_buffered_input for all connections together.
 *
 * Owns: the RPC listener, its connections and frames, and the dispatch of
 *   each opcode to its handler.
 * May call: index/ (the handlers), tiers/ (the NoF opcodes), durability/
 *   (answers held until durable), ha/ (serving or not), admin/ (HELLO's
 *   metadata token).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "admin/admin.h"
#include "common/auth.h"
#include "common/log.h"
#include "durability/durability.h"
#include "ha/ha.h"
#include "index/index.h"
#include "master.h"
#include "tiers/tiers.h"

#define MC_CONN_OUT_HIGH        (8u << 20) /* stop reading above this backlog */
#define MC_CONN_OUT_LOW         (1u << 20) /* resume below it */
#define MC_CONN_WRITE_TIMEOUT_S 60
#define MC_CONN_OUT_KEEP        (1u << 20) /* shrink the scratch buffer above this */
#define MC_TENANT_MAX           256
/* Input a connection may buffer beyond its current frame: room for
 * pipelined frames, and more than any request without a list can be
 * (mc_wire_req_max_body()).  A larger frame reserves its body against
 * --rpc_max_buffered_input while it is read. */
#define MC_CONN_IN_BASE         (256u << 10)
/* Most one receive takes into the input buffer (below malloc's mmap
 * threshold, so the buffer's chunk comes from the heap). */
#define MC_CONN_READ_CHUNK      (64u << 10)

typedef enum mc_conn_state {
    MC_CONN_AUTH,        /* --auth_token_file: challenge sent, waiting for the proof */
    MC_CONN_READ_HEADER,
    MC_CONN_READ_BODY,
    MC_CONN_CLOSING
} mc_conn_state_t;

static const char *conn_state_str(mc_conn_state_t s)
{
    switch (s) {
    case MC_CONN_AUTH:
        return "AUTH";
    case MC_CONN_READ_HEADER:
        return "READ_HEADER";
    case MC_CONN_READ_BODY:
        return "READ_BODY";
    case MC_CONN_CLOSING:
        return "CLOSING";
    }
    return "?";
}

typedef struct mc_conn {
    mc_mlist_t link;           /* in m->conns */
    mc_master_t *m;
    struct bufferevent *bev;   /* output, and the write timeout */
    struct event *rev;         /* input: conn_readable_cb */
    size_t read_high;          /* reading pauses with this much buffered */
    struct timeval read_tmo;   /* no byte for this long closes (0: never) */
    int read_on;               /* reading enabled (conn_read_enable) */
    mc_conn_state_t state;
    mc_wire_header_t hdr;      /* the frame being read (READ_BODY) */
    int hello;                 /* HELLO accepted */
    int read_paused;           /* backpressure: EV_READ disabled */
    mc_uuid_t client_id;
    uint8_t auth_nonce[MC_AUTH_NONCE_SIZE]; /* the challenge's server nonce */
    char auth_tenant[MC_AUTH_TENANT_MAX + 1]; /* the tenant the proof was for */
    char tenant[MC_TENANT_MAX];
    uint32_t tenant_len;
    mc_arena_t arena;          /* decoded request + response, one frame */
    mc_buf_t out;              /* encoded response scratch */
    mc_buf_t tx;               /* responses of this conn_drive() pass */
    /* --enable_snapshot: answers that wait until the records of the
     * changes they acknowledge are durable, in order; held[0, marks[i].end)
     * may go once the log is durable up to marks[i].seq */
    mc_buf_t held;
    struct held_mark {
        size_t end;
        uint64_t seq;
    } *marks;
    uint32_t nmarks;
    uint32_t cap_marks;
    mc_mlist_t held_link;      /* in m->held_conns while held is not empty */
    uint64_t frames;
    char peer[INET6_ADDRSTRLEN + 8];
    uint32_t in_reserved;      /* body bytes of the frame being read, counted in
                                * m->in_reserved (frames over MC_CONN_IN_BASE) */
    mc_regex_walk_t *walk;     /* a REMOVE_BY_REGEX in slices: frames after it wait */
    struct event *walk_ev;     /* runs the next slice */
} mc_conn_t;

/* Wait for input when reading is enabled and the input buffer is under
 * its mark, with the read timeout counted afresh (libevent's bufferevent
 * semantics: the timeout is for silence, and paused reading has none). */
static void conn_read_arm(mc_conn_t *c)
{
    size_t have = evbuffer_get_length(bufferevent_get_input(c->bev));

    if (c->read_on && (have < c->read_high))
        event_add(c->rev, evutil_timerisset(&c->read_tmo) ? &c->read_tmo : NULL);
    else
        event_del(c->rev);
}

static void conn_read_enable(mc_conn_t *c)
{
    c->read_on = 1;
    conn_read_arm(c);
}

static void conn_read_disable(mc_conn_t *c)
{
    c->read_on = 0;
    event_del(c->rev);
}

/* Reading pauses once @p high bytes are buffered. */
static void conn_read_mark(mc_conn_t *c, size_t high)
{
    c->read_high = high;
    conn_read_arm(c);
}

/* Give back the reservation of a large frame (read, or never finished)
 * and the ordinary read window. */
static void conn_unreserve(mc_conn_t *c)
{
    if (c->in_reserved == 0)
        return;
    c->m->in_reserved -= c->in_reserved;
    c->in_reserved = 0;
    conn_read_mark(c, MC_CONN_IN_BASE);
}

static void conn_free(mc_conn_t *c)
{
    conn_unreserve(c);
    if (c->walk_ev != NULL)
        event_free(c->walk_ev);
    mc_master_regex_walk_free(c->walk);
    mc_mlist_remove(&c->link);
    mc_mlist_remove(&c->held_link);
    c->m->nconns--;
    event_free(c->rev);
    bufferevent_free(c->bev);
    mc_arena_cleanup(&c->arena);
    mc_buf_cleanup(&c->out);
    mc_buf_cleanup(&c->tx);
    mc_buf_cleanup(&c->held);
    free(c->marks);
    free(c);
}

/* Write @p len bytes of responses: straight to the socket when the
 * bufferevent has nothing older queued, the rest (or all) through it. */
static void conn_write_bytes(mc_conn_t *c, const uint8_t *data, size_t len)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t sent          = 0;

    if (len == 0)
        return;
    if (evbuffer_get_length(out) == 0) {
        ssize_t n = send(bufferevent_getfd(c->bev), data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        /* an error shows again on the bufferevent's own write */
        if (n > 0)
            sent = (size_t)n;
    }
    if ((sent < len) && (bufferevent_write(c->bev, data + sent, len - sent) != 0))
        mc_warn("rpc %s: cannot queue %zu bytes of responses", c->peer, len - sent);
}

/* Write the responses gathered in @p b (c->tx or c->held) and empty it. */
static void conn_write(mc_conn_t *c, mc_buf_t *b)
{
    conn_write_bytes(c, b->data, b->len);
    if (b->cap > MC_CONN_OUT_KEEP) {
        mc_buf_cleanup(b);
        mc_buf_init(b);
    } else {
        mc_buf_reset(b);
    }
}

/* Send c->tx, or hold it while a change it acknowledges (or an answer
 * before it) waits for the operation log (docs/ha.md). */
static void conn_flush(mc_conn_t *c)
{
    uint64_t need;

    if (c->tx.len == 0)
        return;
    need = mc_durable_pending(c->m);
    if ((need == 0) && (c->held.len == 0)) {
        conn_write(c, &c->tx);
        return;
    }
    if (c->nmarks > 0)
        need = MC_MAX(need, c->marks[c->nmarks - 1].seq);
    if ((c->nmarks == 0) || (c->marks[c->nmarks - 1].seq != need)) {
        if (c->nmarks == c->cap_marks) {
            uint32_t nc = c->cap_marks ? c->cap_marks * 2 : 8;
            struct held_mark *nm = realloc(c->marks, nc * sizeof(*nm));
            if (nm == NULL)
                c->held.oom = 1;
            else {
                c->marks     = nm;
                c->cap_marks = nc;
            }
        }
        if (!c->held.oom)
            c->marks[c->nmarks++].seq = need;
    }
    if (!c->held.oom)
        mc_buf_put_bytes(&c->held, c->tx.data, c->tx.len);
    if (c->held.oom) {
        /* never send an answer early: without memory to hold it, drop
         * the connection (the client retries) */
        mc_error("rpc %s: out of memory holding answers for the operation log", c->peer);
        c->tx.len = 0;
        mc_buf_reset(&c->held);
        c->held.oom = 0;
        c->nmarks   = 0;
        mc_mlist_remove(&c->held_link);
        conn_read_disable(c);
        c->state = MC_CONN_CLOSING;
        return;
    }
    c->marks[c->nmarks - 1].end = c->held.len;
    mc_buf_reset(&c->tx);
    if (mc_mlist_empty(&c->held_link))
        mc_mlist_insert_tail(&c->m->held_conns, &c->held_link);
}

static void conn_drive(mc_conn_t *c);

void mc_master_rpc_release(mc_master_t *m, uint64_t durable_seq)
{
    mc_mlist_t *pos, *tmp;
    mc_mlist_for_each_safe(pos, tmp, &m->held_conns)
    {
        mc_conn_t *c = mc_container_of(pos, mc_conn_t, held_link);
        uint32_t k   = 0;
        size_t n;

        while ((k < c->nmarks) && (c->marks[k].seq <= durable_seq))
            k++;
        if (k == 0)
            continue;
        /* the answers whose records are durable go; later ones wait on */
        n = c->marks[k - 1].end;
        conn_write_bytes(c, c->held.data, n);
        memmove(c->held.data, c->held.data + n, c->held.len - n);
        c->held.len -= n;
        for (uint32_t i = k; i < c->nmarks; i++) {
            c->marks[i - k].seq = c->marks[i].seq;
            c->marks[i - k].end = c->marks[i].end - n;
        }
        c->nmarks -= k;
        if (c->nmarks > 0)
            continue;
        mc_mlist_remove(&c->held_link);
        if (c->held.cap > MC_CONN_OUT_KEEP) {
            mc_buf_cleanup(&c->held);
            mc_buf_init(&c->held);
        }
        if (c->state != MC_CONN_CLOSING) {
            /* paused on the held backlog, which the socket took at once
             * (no write callback will come to resume it) */
            if (c->read_paused &&
                (evbuffer_get_length(bufferevent_get_output(c->bev)) <= MC_CONN_OUT_LOW)) {
                c->read_paused = 0;
                conn_read_enable(c);
                conn_drive(c);
            }
            continue;
        }
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_free(c);
        else
            bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    }
}

/* Stop reading; free once queued responses are written (or at once). */
static void conn_close(mc_conn_t *c, const char *why)
{
    if (c->state == MC_CONN_CLOSING)
        return;
    conn_flush(c); /* answers to the frames before the bad one still go */
    mc_debug("rpc %s: closing in state %s after %" PRIu64 " frames: %s", c->peer,
             conn_state_str(c->state), c->frames, why);
    c->state = MC_CONN_CLOSING;
    conn_read_disable(c);
    if (c->walk != NULL) { /* nobody will read its answer */
        event_del(c->walk_ev);
        mc_master_regex_walk_free(c->walk);
        c->walk = NULL;
    }
    if (c->held.len > 0)
        return; /* mc_master_rpc_release() sends them, then frees */
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        conn_free(c);
        return;
    }
    /* the write callback fires when the output is fully drained */
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
}

/* ---- handlers: adapters from wire structs to the master's parts ---------- */

/* §5.1 HELLO: protocol version, client id, tenant. */
static int32_t handle_hello(mc_conn_t *c, mc_req_ctx_t *x, const mc_wire_hello_req_t *req,
                            mc_wire_hello_resp_t *resp)
{
    mc_str_t t = req->tenant_id;
    (void)x;
    if (req->proto_version != MC_WIRE_VERSION)
        return MC_INVALID_VERSION;
    if (t.len == 0)
        t = mc_str_from_cstr("default");
    if (t.len >= MC_TENANT_MAX)
        return MC_INVALID_PARAMS;
    /* with authentication on, a client acts only as the tenant it proved
     * a secret for (§9.1) */
    if ((c->m->auth != NULL) &&
        ((strlen(c->auth_tenant) != t.len) || (memcmp(c->auth_tenant, t.ptr, t.len) != 0))) {
        mc_log_ratelimited(MC_LOG_WARN, "rpc %s: HELLO as tenant \"%.*s\" after proving "
                           "tenant \"%s\"", c->peer, (int)t.len, t.ptr, c->auth_tenant);
        return MC_INVALID_PARAMS;
    }
    for (uint32_t i = 0; i < t.len; i++) {
        if ((unsigned char)t.ptr[i] < 0x20 || t.ptr[i] == 0x7f)
            return MC_INVALID_PARAMS;
    }
    /* Upstream C.9: without --enable_multi_tenants the tenant id a client
     * sends is ignored (it was checked above, and still selects the
     * client's secret) and every connection works in tenant "default", so
     * clients of different tenants share keys.  With it on, tenants are
     * key namespaces with registration and quotas (index/tenants.c). */
    if (!c->m->cfg->enable_multi_tenants)
        t = mc_str_from_cstr("default");
    memcpy(c->tenant, t.ptr, t.len);
    c->tenant_len = t.len;
    c->client_id  = req->client_id;
    c->hello      = 1;
    resp->server_version = mc_str_from_cstr(mc_version_string());
    resp->view_version   = c->m->view_version;
    resp->metadata_token = mc_master_metadata_token(c->m, req->client_id);
    if (c->m->dfs != NULL) {
        /* clients with a DFS tier check theirs against this (docs/tiers.md §6) */
        const mc_dfs_layout_t *l = &c->m->dfs->layout;
        resp->dfs_root           = mc_str_from_cstr(l->root);
        resp->dfs_shard_count    = l->shard_count;
        resp->dfs_shard_capacity = l->shard_capacity;
        resp->dfs_alignment      = l->alignment;
    }
    return MC_OK;
}

#define MC_RPC_PLAIN_HANDLER_(low)                                                          \
    static int32_t handle_##low(mc_conn_t *c, mc_req_ctx_t *x,                              \
                                const mc_wire_##low##_req_t *req,                           \
                                mc_wire_##low##_resp_t *resp)                               \
    {                                                                                       \
        (void)c;                                                                            \
        (void)resp;                                                                         \
        return mc_master_##low(x, req);                                                     \
    }
#define MC_RPC_RESP_HANDLER_(low)                                                           \
    static int32_t handle_##low(mc_conn_t *c, mc_req_ctx_t *x,                              \
                                const mc_wire_##low##_req_t *req,                           \
                                mc_wire_##low##_resp_t *resp)                               \
    {                                                                                       \
        (void)c;                                                                            \
        return mc_master_##low(x, req, resp);                                               \
    }

MC_RPC_RESP_HANDLER_(ping)
MC_RPC_PLAIN_HANDLER_(mount_segment)
MC_RPC_PLAIN_HANDLER_(remount_segments)
MC_RPC_PLAIN_HANDLER_(unmount_segment)
MC_RPC_PLAIN_HANDLER_(client_close)
MC_RPC_RESP_HANDLER_(put_start)
MC_RPC_PLAIN_HANDLER_(put_end)
MC_RPC_PLAIN_HANDLER_(put_revoke)
MC_RPC_RESP_HANDLER_(get_replica_list)
MC_RPC_RESP_HANDLER_(exist_key)
MC_RPC_PLAIN_HANDLER_(remove)
MC_RPC_RESP_HANDLER_(remove_all)
MC_RPC_RESP_HANDLER_(batch_put_start)
MC_RPC_RESP_HANDLER_(batch_put_end)
MC_RPC_RESP_HANDLER_(batch_put_revoke)
MC_RPC_RESP_HANDLER_(batch_get_replica_list)
MC_RPC_RESP_HANDLER_(batch_exist_key)
MC_RPC_RESP_HANDLER_(batch_remove)
MC_RPC_RESP_HANDLER_(upsert_start)
MC_RPC_PLAIN_HANDLER_(upsert_end)
MC_RPC_PLAIN_HANDLER_(upsert_revoke)
MC_RPC_RESP_HANDLER_(batch_upsert_start)
MC_RPC_RESP_HANDLER_(batch_upsert_end)
MC_RPC_RESP_HANDLER_(batch_upsert_revoke)
MC_RPC_PLAIN_HANDLER_(set_segment_draining)
MC_RPC_RESP_HANDLER_(create_copy_task)
MC_RPC_RESP_HANDLER_(create_move_task)
MC_RPC_RESP_HANDLER_(query_task)
MC_RPC_RESP_HANDLER_(fetch_tasks)
MC_RPC_PLAIN_HANDLER_(mark_task_complete)
MC_RPC_RESP_HANDLER_(task_replica_start)
MC_RPC_PLAIN_HANDLER_(task_replica_end)
MC_RPC_PLAIN_HANDLER_(task_replica_revoke)
MC_RPC_RESP_HANDLER_(batch_replica_clear)
MC_RPC_PLAIN_HANDLER_(offload_report)
MC_RPC_RESP_HANDLER_(disk_replica_drop)
MC_RPC_PLAIN_HANDLER_(mount_nof_segment)
MC_RPC_PLAIN_HANDLER_(remount_nof_segments)
MC_RPC_PLAIN_HANDLER_(unmount_nof_segment)
MC_RPC_RESP_HANDLER_(get_all_nof_segments)
MC_RPC_RESP_HANDLER_(get_nof_segments_by_name)
MC_RPC_RESP_HANDLER_(put_reserve)
MC_RPC_RESP_HANDLER_(put_commit)

/* A handler's answer that comes later (not a status: those are <= 0). */
#define MC_RPC_DEFERRED 1

static void walk_slice_cb(evutil_socket_t fd, short what, void *arg);

/* §5.8 REMOVE_BY_REGEX: a checked, compiled pattern starts a walk over the
 * index that runs in slices between other events (walk_slice_cb); the
 * connection handles no later frame until it has answered. */
static int32_t handle_remove_by_regex(mc_conn_t *c, mc_req_ctx_t *x,
                                      const mc_wire_remove_by_regex_req_t *req,
                                      mc_wire_remove_by_regex_resp_t *resp)
{
    static const struct timeval now = {0, 0};
    int32_t st;

    (void)resp;
    if (c->walk_ev == NULL) {
        c->walk_ev = evtimer_new(c->m->base, walk_slice_cb, c);
        if (c->walk_ev == NULL)
            return MC_INTERNAL_ERROR;
    }
    st = mc_master_regex_walk_start(x, req, &c->walk);
    if (st != MC_OK)
        return st;
    evtimer_add(c->walk_ev, &now);
    return MC_RPC_DEFERRED;
}

/* Queue the encoded response in c->out on the socket. */
static void conn_send(mc_conn_t *c, uint16_t opcode)
{
    if (c->out.oom) {
        /* could not build the response: a short error instead */
        mc_buf_cleanup(&c->out);
        mc_buf_init(&c->out);
        mc_wire_encode_error(&c->out, opcode, c->hdr.request_id, MC_INTERNAL_ERROR);
    }
    mc_buf_put_bytes(&c->tx, c->out.data, c->out.len);
    if (c->tx.oom) {
        /* no room to gather it: what was gathered, then this one, directly */
        mc_buf_cleanup(&c->tx);
        mc_buf_init(&c->tx);
        mc_warn("rpc %s: out of memory gathering responses", c->peer);
        if (bufferevent_write(c->bev, c->out.data, c->out.len) != 0)
            mc_warn("rpc %s: cannot queue a %zu-byte response", c->peer, c->out.len);
    }
    if (c->out.cap > MC_CONN_OUT_KEEP) {
        mc_buf_cleanup(&c->out);
        mc_buf_init(&c->out);
    } else {
        mc_buf_reset(&c->out);
    }
}

/*
 * Per-key counts of a batch request, for master_batch_<op>_items_total and
 * friends (admin.c): the keys are the request's top-level key lists, a
 * failed key is a per-key result (RESULTS) or status (I32S) below zero.
 * Selected by field type with _Generic, so a batch message added to the
 * wire table is counted without code here.
 */
static void items_none(const void *field, uint64_t *n)
{
    (void)field;
    (void)n;
}

static void items_keys(const mc_wire_str_list_t *keys, uint64_t *n)
{
    *n += keys->n;
}

static void items_failed_results(const mc_wire_result_list_t *r, uint64_t *n)
{
    for (uint32_t i = 0; i < r->n; i++)
        *n += r->v[i].status < 0;
}

static void items_failed_i32s(const mc_wire_i32_list_t *r, uint64_t *n)
{
    for (uint32_t i = 0; i < r->n; i++)
        *n += r->v[i] < 0;
}

#define MC_RPC_REQ_ITEMS_(TYPE, fname)                                                      \
    _Generic(&req.fname, mc_wire_str_list_t *: items_keys, default: items_none)(&req.fname, \
                                                                                &items);
#define MC_RPC_RESP_FAILED_(TYPE, fname)                                                    \
    _Generic(&resp.fname, mc_wire_result_list_t *: items_failed_results,                    \
             mc_wire_i32_list_t *: items_failed_i32s, default: items_none)(&resp.fname,     \
                                                                           &failed);

/*
 * Decode, handle and answer the frame in c->hdr with @p body.  Returns -1
 * when the body does not decode (the caller closes the connection).
 */
static int conn_dispatch(mc_conn_t *c, const uint8_t *body)
{
    uint16_t op  = c->hdr.opcode;
    size_t len   = c->hdr.body_len;
    uint32_t rid = c->hdr.request_id;
    mc_req_ctx_t x;

    x.m      = c->m;
    x.tenant = (mc_str_t){c->tenant, c->tenant_len};
    x.arena  = &c->arena;
    x.now_ms = mc_now_ms();

    /* §5.1: nothing but HELLO before HELLO. */
    if (!c->hello && (op != MC_WIRE_OP_HELLO)) {
        mc_log_ratelimited(MC_LOG_WARN, "rpc %s: %s before HELLO", c->peer,
                           mc_wire_op_name(op));
        mc_wire_encode_error(&c->out, op, rid, MC_ILLEGAL_CLIENT);
        conn_send(c, op);
        return 0;
    }

    /* Fencing (ha.h): a standby, or a leader whose lease is not confirmed
     * any more, answers nothing, HELLO included; the status tells the
     * client to find the leader again.  Checked per frame, so a master
     * resumed after SIGSTOP refuses what was queued while it slept. */
    if (!mc_master_ha_serving(c->m)) {
        mc_debug("rpc %s: %s refused: not the serving leader", c->peer, mc_wire_op_name(op));
        c->m->op_requests[op]++;
        c->m->op_failures[op]++;
        atomic_fetch_add(&c->m->ha->fenced, 1);
        mc_wire_encode_error(&c->out, op, rid, MC_UNAVAILABLE_IN_CURRENT_STATUS);
        conn_send(c, op);
        return 0;
    }

    switch (op) {
#define MC_RPC_DISPATCH_(UP, low, code)                                                   \
    case code: {                                                                          \
        mc_wire_##low##_req_t req;                                                        \
        mc_wire_##low##_resp_t resp;                                                      \
        int32_t st;                                                                       \
        memset(&resp, 0, sizeof(resp));                                                   \
        if (mc_wire_decode_##low##_req(body, len, &c->arena, &req) != MC_OK) {            \
            mc_log_ratelimited(MC_LOG_WARN, "rpc %s: undecodable %s body (%zu bytes)",     \
                               c->peer, #UP, len);                                        \
            return -1;                                                                    \
        }                                                                                 \
        st = handle_##low(c, &x, &req, &resp);                                            \
        _Static_assert((code) < MC_MASTER_NOPS, "opcode outside the counter arrays");   \
        c->m->op_requests[(code)]++;                                                      \
        if (st == MC_RPC_DEFERRED)                                                        \
            return 0; /* the handler answers later */                                     \
        if (st != MC_OK)                                                                  \
            c->m->op_failures[(code)]++;                                                  \
        if (strncmp(#low, "batch_", 6) == 0) {                                            \
            uint64_t items = 0, failed = 0;                                               \
            MC_WIRE_REQ_##low(MC_RPC_REQ_ITEMS_)                                          \
            MC_WIRE_RESP_##low(MC_RPC_RESP_FAILED_)                                       \
            if (st != MC_OK)                                                              \
                failed = items; /* no key went through */                                 \
            c->m->op_items[(code)] += items;                                              \
            c->m->op_failed_items[(code)] += MC_MIN(failed, items);                       \
            if ((st == MC_OK) && (failed > 0) && (failed < items))                        \
                c->m->op_partial[(code)]++;                                               \
        }                                                                                 \
        mc_trace("rpc %s: %s #%" PRIu32 " -> %d (%s)", c->peer, #UP, rid, (int)st,        \
                 mc_status_name(st));                                                     \
        mc_wire_encode_##low##_resp(&c->out, rid, st, &resp);                             \
        break;                                                                            \
    }
        MC_WIRE_MESSAGES(MC_RPC_DISPATCH_)
#undef MC_RPC_DISPATCH_
    default:
        return -1; /* unreachable: the opcode was checked with the header */
    }
    conn_send(c, op);
    return 0;
}

/*
 * Bounds on the frame whose header is in c->hdr, before any of its body is
 * buffered: its message type's largest body (mc_wire_req_max_body(), or
 * --rpc_max_batch_frame_size for a message with a list), and for a body
 * over MC_CONN_IN_BASE a reservation against --rpc_max_buffered_input,
 * the input of all connections together.  Returns 0, or 1 after closing
 * the connection.
 */
static int conn_admit_body(mc_conn_t *c)
{
    mc_master_t *m = c->m;
    uint32_t len   = c->hdr.body_len;
    uint64_t max   = mc_wire_req_max_body(c->hdr.opcode);

    if (max >= MC_WIRE_MAX_BODY)
        max = m->cfg->rpc_max_batch_frame_size;
    if (len > max) {
        mc_log_ratelimited(MC_LOG_WARN,
                           "rpc %s: a %s frame of %" PRIu32 " bytes is over its limit of %"
                           PRIu64 " bytes",
                           c->peer, mc_wire_op_name(c->hdr.opcode), len, max);
        conn_close(c, "frame over the limit of its type");
        return 1;
    }
    if (len <= MC_CONN_IN_BASE)
        return 0;
    if (m->in_reserved + len > m->cfg->rpc_max_buffered_input) {
        mc_log_ratelimited(MC_LOG_WARN,
                           "rpc %s: a %" PRIu32 "-byte %s frame would take the unfinished input "
                           "of all connections past --rpc_max_buffered_input=%" PRIu64
                           " (%" PRIu64 " bytes held)",
                           c->peer, len, mc_wire_op_name(c->hdr.opcode),
                           (uint64_t)m->cfg->rpc_max_buffered_input, m->in_reserved);
        conn_close(c, "buffered input over --rpc_max_buffered_input");
        return 1;
    }
    m->in_reserved += len;
    c->in_reserved = len;
    conn_read_mark(c, MC_WIRE_HEADER_SIZE + (size_t)len);
    return 0;
}

static void conn_set_read_timeout(mc_conn_t *c, uint64_t ms)
{
    c->read_tmo.tv_sec  = (time_t)(ms / 1000);
    c->read_tmo.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    /* re-adding a pending event without a timeout would keep its old one
     * (the handshake deadline after the handshake): take it off first */
    event_del(c->rev);
    conn_read_arm(c);
}

/* §9.1: the client's PROOF, once it is all in.  Returns 1 when the
 * connection was closed, 0 otherwise (state READ_HEADER once it passed). */
static int conn_auth(mc_conn_t *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t have         = evbuffer_get_length(in), used = 0;
    uint8_t buf[MC_AUTH_PROOF_FIXED + MC_AUTH_TENANT_MAX], acc[MC_AUTH_ACCEPT_SIZE];
    mc_auth_proof_t p;
    const mc_auth_key_t *k;
    int rc;

    if (have > sizeof(buf))
        have = sizeof(buf);
    evbuffer_copyout(in, buf, have);
    rc = mc_auth_proof_unpack(buf, have, &p, &used);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        mc_log_ratelimited(MC_LOG_WARN, "rpc %s: no authentication proof (is the client "
                           "configured with the cluster secret?)", c->peer);
        conn_close(c, "malformed authentication proof");
        return 1;
    }
    k = mc_auth_proof_verify(c->m->auth, MC_AUTH_SVC_RPC, c->auth_nonce, &p);
    if (k == NULL) {
        mc_log_ratelimited(MC_LOG_WARN, "rpc %s: authentication failed for tenant \"%s\" "
                           "(wrong secret)", c->peer, p.tenant);
        conn_close(c, "authentication failed");
        return 1;
    }
    evbuffer_drain(in, used);
    memcpy(c->auth_tenant, p.tenant, (size_t)p.tenant_len + 1);
    mc_auth_accept_pack(k, MC_AUTH_SVC_RPC, c->auth_nonce, p.nonce, p.tenant, acc);
    conn_write_bytes(c, acc, sizeof(acc));
    conn_set_read_timeout(c, (uint64_t)c->m->cfg->rpc_conn_timeout_seconds * 1000u);
    conn_read_mark(c, MC_CONN_IN_BASE);
    c->state = MC_CONN_READ_HEADER;
    mc_debug("rpc %s: authenticated as tenant \"%s\"", c->peer, c->auth_tenant);
    return 0;
}

/* Handle every complete frame in the input buffer (pipelining).  Returns
 * 1 when the connection was closed (and may be freed), 0 otherwise. */
static int conn_drive_frames(mc_conn_t *c)
{
    struct evbuffer *in  = bufferevent_get_input(c->bev);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    uint8_t hbuf[MC_WIRE_HEADER_SIZE];

    for (;;) {
        switch (c->state) {
        case MC_CONN_CLOSING:
            return 1;

        case MC_CONN_AUTH:
            if (conn_auth(c) != 0)
                return 1;
            if (c->state == MC_CONN_AUTH)
                return 0;
            break;

        case MC_CONN_READ_HEADER:
            if (c->walk != NULL)
                return 0; /* answers keep request order: wait for the walk's */
            if (evbuffer_get_length(out) + c->tx.len + c->held.len > MC_CONN_OUT_HIGH) {
                /* the peer is not reading its responses */
                conn_read_disable(c);
                c->read_paused = 1;
                return 0;
            }
            if (evbuffer_get_length(in) < MC_WIRE_HEADER_SIZE)
                return 0;
            evbuffer_copyout(in, hbuf, MC_WIRE_HEADER_SIZE);
            if (mc_wire_header_unpack(hbuf, &c->hdr) != MC_OK) {
                mc_log_ratelimited(MC_LOG_WARN,
                                   "rpc %s: bad frame header (magic 0x%08" PRIx32
                                   " version %u flags 0x%02x body %" PRIu32 ")",
                                   c->peer, c->hdr.magic, c->hdr.version, c->hdr.flags,
                                   c->hdr.body_len);
                conn_close(c, "bad frame header");
                return 1;
            }
            if (c->hdr.flags & MC_WIRE_FLAG_RESPONSE) {
                mc_log_ratelimited(MC_LOG_WARN, "rpc %s: a response frame sent to the master",
                                   c->peer);
                conn_close(c, "response flag on a request");
                return 1;
            }
            if (mc_wire_op_name(c->hdr.opcode) == NULL) {
                mc_log_ratelimited(MC_LOG_WARN, "rpc %s: unknown opcode %u", c->peer,
                                   c->hdr.opcode);
                conn_close(c, "unknown opcode");
                return 1;
            }
            if (conn_admit_body(c) != 0)
                return 1;
            evbuffer_drain(in, MC_WIRE_HEADER_SIZE);
            c->state = MC_CONN_READ_BODY;
            break;

        case MC_CONN_READ_BODY: {
            const uint8_t *body = (const uint8_t *)"";
            int rc;
            if (evbuffer_get_length(in) < c->hdr.body_len)
                return 0;
            if (c->hdr.body_len > 0) {
                body = evbuffer_pullup(in, (ev_ssize_t)c->hdr.body_len);
                if (body == NULL) {
                    mc_error("rpc %s: out of memory for a %" PRIu32 "-byte frame", c->peer,
                             c->hdr.body_len);
                    conn_close(c, "out of memory");
                    return 1;
                }
            }
            c->frames++;
            rc = conn_dispatch(c, body);
            evbuffer_drain(in, c->hdr.body_len);
            mc_arena_reset(&c->arena);
            conn_unreserve(c);
            if (rc != 0) {
                conn_close(c, "undecodable body");
                return 1;
            }
            c->state = MC_CONN_READ_HEADER;
            break;
        }
        }
    }
}

static void conn_drive(mc_conn_t *c)
{
    if (conn_drive_frames(c) != 0)
        return; /* closing, perhaps freed */
    conn_flush(c);
    if (c->state != MC_CONN_CLOSING)
        conn_read_arm(c); /* the frames taken may have made room to read */
}

/* Slice of REMOVE_BY_REGEX walk time, short enough that the other
 * connections' requests see no stall. */
#define MC_WALK_SLICE_US 2000

/* One slice of the connection's regex walk; the answer and the frames
 * that waited behind it once the walk is done.  The next slice is a
 * zero timer, so the loop polls the sockets in between. */
static void walk_slice_cb(evutil_socket_t fd, short what, void *arg)
{
    static const struct timeval now = {0, 0};
    mc_conn_t *c = arg;
    mc_wire_remove_by_regex_resp_t resp;
    mc_req_ctx_t x;

    (void)fd;
    (void)what;
    x.m      = c->m;
    x.tenant = (mc_str_t){c->tenant, c->tenant_len};
    x.arena  = &c->arena;
    x.now_ms = mc_now_ms();
    if (!mc_master_regex_walk_step(&x, c->walk, MC_WALK_SLICE_US)) {
        evtimer_add(c->walk_ev, &now);
        return;
    }
    memset(&resp, 0, sizeof(resp));
    resp.count = mc_master_regex_walk_finish(c->walk);
    c->walk    = NULL;
    /* c->hdr is still the REMOVE_BY_REGEX frame: no header was read since */
    mc_wire_encode_remove_by_regex_resp(&c->out, c->hdr.request_id, MC_OK, &resp);
    conn_send(c, MC_WIRE_OP_REMOVE_BY_REGEX);
    conn_drive(c);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg);

/* Input: one receive into the input buffer, up to its mark, then every
 * complete frame; the peer's close, a socket error or the read timeout
 * go where libevent's would (conn_event_cb). */
static void conn_readable_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_conn_t *c        = arg;
    mc_master_t *m      = c->m;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t have         = evbuffer_get_length(in);
    size_t want;
    struct evbuffer_iovec vec;
    ssize_t n;

    if (what & EV_TIMEOUT) {
        conn_event_cb(c->bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT, c);
        return;
    }
    if (have >= c->read_high) { /* a stale wake-up: the mark was lowered */
        conn_read_arm(c);
        return;
    }
    want = MC_MIN(c->read_high - have, (size_t)MC_CONN_READ_CHUNK);
    if (evbuffer_reserve_space(in, (ev_ssize_t)want, &vec, 1) != 1) {
        mc_error("rpc %s: out of memory for input", c->peer);
        conn_close(c, "out of memory");
        return;
    }
    n = recv(fd, vec.iov_base, want, 0);
    if (n <= 0) {
        if (n == 0) {
            conn_event_cb(c->bev, BEV_EVENT_READING | BEV_EVENT_EOF, c);
        } else if ((errno != EAGAIN) && (errno != EWOULDBLOCK) && (errno != EINTR)) {
            conn_event_cb(c->bev, BEV_EVENT_READING | BEV_EVENT_ERROR, c);
        }
        return; /* the reservation lapses unused */
    }
    vec.iov_len = (size_t)n;
    evbuffer_commit_space(in, &vec, 1);
    conn_drive(c); /* c may be gone from here on */
    /* answers of rounds that became durable meanwhile go now, not after
     * the rest of the turn (last: it may free connections, this one too) */
    mc_durable_poll(m);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
    mc_conn_t *c = arg;
    size_t left  = evbuffer_get_length(bufferevent_get_output(bev));

    if (c->state == MC_CONN_CLOSING) {
        if (left == 0)
            conn_free(c);
        return;
    }
    if (c->read_paused && (left <= MC_CONN_OUT_LOW)) {
        c->read_paused = 0;
        conn_read_enable(c);
        conn_drive(c); /* frames that waited in the input buffer */
    }
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    mc_conn_t *c = arg;

    if (what & BEV_EVENT_TIMEOUT) {
        mc_info("rpc %s: %s timeout, closing", c->peer, (what & BEV_EVENT_READING) ? "idle" : "write");
        conn_free(c);
        return;
    }
    if (what & BEV_EVENT_ERROR) {
        mc_debug("rpc %s: connection error: %s", c->peer,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_free(c);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        /* A peer may half-close after its last request: still answer it. */
        if ((c->state != MC_CONN_CLOSING) &&
            ((evbuffer_get_length(bufferevent_get_output(bev)) > 0) || (c->held.len > 0))) {
            conn_close(c, "peer closed its side");
            return;
        }
        mc_debug("rpc %s: peer closed after %" PRIu64 " frames", c->peer, c->frames);
        conn_free(c);
    }
}

static void format_peer(const struct sockaddr *sa, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port               = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
        snprintf(out, outlen, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(out, outlen, "[%s]:%u", host, port);
    } else {
        snprintf(out, outlen, "?");
    }
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    mc_master_t *m = arg;
    mc_conn_t *c;
    (void)l;
    (void)salen;

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        mc_error("rpc: out of memory for a new connection");
        evutil_closesocket(fd);
        return;
    }
    c->m     = m;
    c->state = MC_CONN_READ_HEADER;
    mc_arena_init(&c->arena);
    mc_buf_init(&c->out);
    mc_buf_init(&c->tx);
    mc_buf_init(&c->held);
    mc_mlist_init(&c->held_link);
    format_peer(sa, c->peer, sizeof(c->peer));
    if (m->cfg->rpc_enable_tcp_no_delay) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    c->bev = bufferevent_socket_new(m->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->rev = event_new(m->base, fd, EV_READ | EV_PERSIST, conn_readable_cb, c);
    if ((c->bev == NULL) || (c->rev == NULL)) {
        mc_error("rpc: cannot create the events of %s", c->peer);
        if (c->rev != NULL)
            event_free(c->rev);
        if (c->bev != NULL)
            bufferevent_free(c->bev); /* closes fd */
        else
            evutil_closesocket(fd);
        mc_arena_cleanup(&c->arena);
        free(c);
        return;
    }
    mc_mlist_insert_tail(&m->conns, &c->link);
    m->nconns++;

    bufferevent_setcb(c->bev, NULL, conn_write_cb, conn_event_cb, c);
    /* Reading pauses at MC_CONN_IN_BASE buffered, or once a large frame
     * admitted by conn_admit_body() is all in. */
    c->read_high = MC_CONN_IN_BASE;
    /* the bufferevent never reads: its input buffer, which it keeps frozen
     * at the end between its own reads, is ours to fill */
    evbuffer_unfreeze(bufferevent_get_input(c->bev), 0);
    bufferevent_setwatermark(c->bev, EV_WRITE, MC_CONN_OUT_LOW, 0);
    {
        struct timeval wt = {MC_CONN_WRITE_TIMEOUT_S, 0};
        bufferevent_set_timeouts(c->bev, NULL, &wt);
    }
    if (m->auth != NULL) {
        /* §9.1: nothing but the proof is read until it has passed; a
         * connection that does not send it in time is closed */
        uint8_t ch[MC_AUTH_CHALLENGE_SIZE];
        if (mc_auth_random(c->auth_nonce, sizeof(c->auth_nonce)) != 0) {
            mc_error("rpc %s: cannot draw a nonce: %m", c->peer);
            conn_close(c, "no nonce");
            return;
        }
        c->state = MC_CONN_AUTH;
        mc_auth_challenge_pack(ch, c->auth_nonce);
        conn_write_bytes(c, ch, sizeof(ch));
        conn_set_read_timeout(c, m->cfg->auth_handshake_timeout);
        /* an unauthenticated peer buffers no more than a proof */
        c->read_high = MC_AUTH_PROOF_FIXED + MC_AUTH_TENANT_MAX;
    } else {
        conn_set_read_timeout(c, (uint64_t)m->cfg->rpc_conn_timeout_seconds * 1000u);
    }
    bufferevent_enable(c->bev, EV_WRITE);
    conn_read_enable(c);
    mc_debug("rpc %s: connected (%" PRIu32 " connections)", c->peer, m->nconns);
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    int err = EVUTIL_SOCKET_ERROR();
    (void)l;
    (void)arg;
    /* EMFILE and friends: keep serving the connections we have. */
    mc_warn("rpc: accept failed: %s", evutil_socket_error_to_string(err));
}

mc_status_t mc_master_rpc_start(mc_master_t *m)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[8];
    int gai;
    uint16_t want = mc_master_config_rpc_port(m->cfg);

    mc_mlist_init(&m->conns);
    mc_mlist_init(&m->held_conns);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", (unsigned)want);
    gai = getaddrinfo(m->cfg->rpc_address, port, &hints, &res);
    if (gai != 0) {
        mc_error("rpc: cannot resolve --rpc_address=%s: %s", m->cfg->rpc_address,
                 gai_strerror(gai));
        return MC_INVALID_PARAMS;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        m->listener = evconnlistener_new_bind(
            m->base, accept_cb, m,
            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 1024,
            ai->ai_addr, (int)ai->ai_addrlen);
        if (m->listener != NULL)
            break;
    }
    if (m->listener == NULL) {
        mc_error("rpc: cannot listen on %s:%u: %s", m->cfg->rpc_address, (unsigned)want,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        freeaddrinfo(res);
        return MC_INVALID_PARAMS;
    }
    freeaddrinfo(res);
    evconnlistener_set_error_cb(m->listener, accept_error_cb);
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        evutil_socket_t fd = evconnlistener_get_fd(m->listener);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            format_peer((struct sockaddr *)&ss, m->rpc_bound, sizeof(m->rpc_bound));
        else
            snprintf(m->rpc_bound, sizeof(m->rpc_bound), "%s:%u", m->cfg->rpc_address,
                     (unsigned)want);
    }
    return MC_OK;
}

void mc_master_rpc_stop(mc_master_t *m)
{
    mc_mlist_t *pos, *tmp;
    if (m->listener != NULL) {
        evconnlistener_free(m->listener);
        m->listener = NULL;
    }
    if (m->conns.next == NULL)
        return; /* never started */
    mc_mlist_for_each_safe(pos, tmp, &m->conns)
        conn_free(mc_container_of(pos, mc_conn_t, link));
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Store client against a scripted in-process master.
 *
 * The fake master below speaks the real wire protocol (wire.h codecs) on a
 * loopback port and keeps a tiny object table whose replicas live in the
 * segment the client mounted, so every byte really moves through the
 * client's transfer engine (its same-process path).  Knobs make it
 * misbehave the way a broken or hostile master would: replicas outside the
 * registered segment or smaller than the object, responses with the wrong
 * request id, a zero lease, a dead first replica, NEED_REMOUNT on ping.
 * Counters of the requests it received let the tests check the protocol
 * the client followed (PUT_REVOKE after a failed transfer, no PUT_START
 * for an empty value, CLIENT_CLOSE on close, REMOUNT after NEED_REMOUNT).
 *
 * The end-to-end suites against the real mooncake_master live in
 * tests/python; these cases are the ones a real master cannot stage.
 */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mooncake/mooncake.h>

#include "check_suites.h"
#include "common/util.h"
#include "wire/wire.h"

/* ---- the fake master ------------------------------------------------------ */

enum fm_mode {
    FM_NORMAL = 0,
    FM_OUTSIDE,      /* PUT_START: replica outside the registered segment */
    FM_SMALL,        /* PUT_START: replica one byte smaller than the object */
    FM_BAD_ID,       /* next response carries a wrong request id */
    FM_FALLBACK,     /* GET_REPLICA_LIST: a dead replica first, then the real one */
    FM_TRUNCATED     /* next response body is cut short */
};

#define FM_MAX_OBJS 256
#define FM_MAX_CONNS 64

typedef struct fm_obj {
    char key[128];
    uint64_t addr, size;
    int complete;
} fm_obj_t;

typedef struct fake_master {
    int lfd;
    uint16_t port;
    int stop_pipe[2];
    pthread_t thread;
    pthread_mutex_t mu;
    /* mounted by the client */
    uint64_t seg_base, seg_size, seg_used;
    mc_uuid_t seg_id;
    char seg_name[320];
    fm_obj_t objs[FM_MAX_OBJS];
    /* knobs */
    int put_mode, get_mode, once_mode;
    int once_op; /* the request once_mode spoils (another, a background
                  * one of the client's, is answered as ever) */
    uint64_t lease_ttl_ms;
    int ping_status;
    /* copy/move tasks: one task handed out by FETCH_TASKS once armed */
    int task_armed;
    uint32_t task_retry;         /* max_retry_attempts of the task */
    int task_nah;                /* START answers NO_AVAILABLE_HANDLE this often */
    uint64_t task_size;
    mc_wire_replica_t task_src, task_dst;
    char task_src_name[320];     /* task_src.segment points here */
    int task_done;               /* MARK_TASK_COMPLETE seen */
    uint8_t task_status;
    char task_msg[512];
    /* requests seen, by opcode */
    int seen[64];
    int drops; /* times every client connection was cut */
} fake_master_t;

static fake_master_t fm;

static fm_obj_t *fm_find(mc_str_t key)
{
    for (int i = 0; i < FM_MAX_OBJS; i++)
        if ((fm.objs[i].key[0] != '\0') && (strlen(fm.objs[i].key) == key.len) &&
            (memcmp(fm.objs[i].key, key.ptr, key.len) == 0))
            return &fm.objs[i];
    return NULL;
}

static int32_t fm_put_start(mc_str_t key, uint64_t len, mc_wire_replica_t *r)
{
    fm_obj_t *o = fm_find(key);
    if (o != NULL)
        return MC_OBJECT_ALREADY_EXISTS;
    if ((key.len >= sizeof(o->key)) || (fm.seg_used + len > fm.seg_size))
        return MC_NO_AVAILABLE_HANDLE;
    for (int i = 0; i < FM_MAX_OBJS && o == NULL; i++)
        if (fm.objs[i].key[0] == '\0')
            o = &fm.objs[i];
    if (o == NULL)
        return MC_NO_AVAILABLE_HANDLE;
    memcpy(o->key, key.ptr, key.len);
    o->key[key.len] = '\0';
    o->addr         = fm.seg_base + fm.seg_used;
    o->size         = len;
    o->complete     = 0;
    fm.seg_used += (len + 63) & ~(uint64_t)63;
    memset(r, 0, sizeof(*r));
    r->status  = MC_REPLICA_PROCESSING;
    r->addr    = o->addr;
    r->size    = len;
    r->segment = mc_str_from_cstr(fm.seg_name);
    if (fm.put_mode == FM_OUTSIDE)
        r->addr = fm.seg_base + fm.seg_size + (1u << 20);
    else if (fm.put_mode == FM_SMALL)
        r->size = len - 1;
    return MC_OK;
}

/* Replicas of a complete object into @p v (room for two). */
static int32_t fm_lookup(mc_str_t key, uint64_t *size, mc_wire_replica_list_t *l,
                         mc_wire_replica_t *v)
{
    fm_obj_t *o = fm_find(key);
    if ((o == NULL) || !o->complete)
        return MC_OBJECT_NOT_FOUND;
    memset(v, 0, 2 * sizeof(*v));
    *size = o->size;
    l->v  = v;
    l->n  = 1;
    if (fm.get_mode == FM_FALLBACK) {
        v[0].status  = MC_REPLICA_COMPLETE;
        v[0].addr    = fm.seg_base + fm.seg_size + (1u << 20); /* not registered */
        v[0].size    = o->size;
        v[0].segment = mc_str_from_cstr(fm.seg_name);
        v++;
        l->n = 2;
    }
    v[0].status     = MC_REPLICA_COMPLETE;
    v[0].addr       = o->addr;
    v[0].size       = o->size;
    v[0].segment    = mc_str_from_cstr(fm.seg_name);
    v[0].segment_id = fm.seg_id; /* readers name its generation */
    return MC_OK;
}

#define FM_DECODE(low)                                                             \
    mc_wire_##low##_req_t req;                                                     \
    mc_wire_##low##_resp_t resp;                                                   \
    int32_t st = MC_OK;                                                            \
    memset(&resp, 0, sizeof(resp));                                                \
    if (mc_wire_decode_##low##_req(body, len, arena, &req) != MC_OK)               \
        return -1;

#define FM_REPLY(low) mc_wire_encode_##low##_resp(out, id, st, &resp)

/* Handle one request; -1 closes the connection. */
static int fm_handle(uint16_t op, uint32_t id, const uint8_t *body, size_t len,
                     mc_arena_t *arena, mc_buf_t *out)
{
    mc_wire_replica_t reps[2 * FM_MAX_OBJS];
    if (op < 64)
        fm.seen[op]++;
    switch (op) {
    case MC_WIRE_OP_HELLO: {
        FM_DECODE(hello);
        resp.server_version = mc_str_from_cstr("fake");
        resp.view_version   = 1;
        FM_REPLY(hello);
        break;
    }
    case MC_WIRE_OP_PING: {
        FM_DECODE(ping);
        resp.client_status = (uint8_t)fm.ping_status;
        if (fm.ping_status == 2)
            fm.ping_status = 1;
        FM_REPLY(ping);
        break;
    }
    case MC_WIRE_OP_MOUNT_SEGMENT: {
        FM_DECODE(mount_segment);
        fm.seg_base = req.segment.base;
        fm.seg_size = req.segment.size;
        fm.seg_id   = req.segment.id;
        fm.seg_used = 0;
        snprintf(fm.seg_name, sizeof(fm.seg_name), "%.*s", (int)req.segment.name.len,
                 req.segment.name.ptr);
        FM_REPLY(mount_segment);
        break;
    }
    case MC_WIRE_OP_REMOUNT_SEGMENTS: {
        FM_DECODE(remount_segments);
        FM_REPLY(remount_segments);
        break;
    }
    case MC_WIRE_OP_CLIENT_CLOSE: {
        FM_DECODE(client_close);
        memset(fm.objs, 0, sizeof(fm.objs));
        fm.seg_base = fm.seg_size = fm.seg_used = 0;
        FM_REPLY(client_close);
        break;
    }
    case MC_WIRE_OP_PUT_START: {
        FM_DECODE(put_start);
        st = fm_put_start(req.key, req.length, &reps[0]);
        resp.replicas.n = 1;
        resp.replicas.v = reps;
        FM_REPLY(put_start);
        break;
    }
    case MC_WIRE_OP_PUT_END: {
        FM_DECODE(put_end);
        fm_obj_t *o = fm_find(req.key);
        if (o == NULL)
            st = MC_OBJECT_NOT_FOUND;
        else
            o->complete = 1;
        FM_REPLY(put_end);
        break;
    }
    case MC_WIRE_OP_PUT_REVOKE: {
        FM_DECODE(put_revoke);
        fm_obj_t *o = fm_find(req.key);
        if (o == NULL)
            st = MC_OBJECT_NOT_FOUND;
        else
            memset(o, 0, sizeof(*o));
        FM_REPLY(put_revoke);
        break;
    }
    case MC_WIRE_OP_GET_REPLICA_LIST: {
        FM_DECODE(get_replica_list);
        st                = fm_lookup(req.key, &resp.size, &resp.replicas, reps);
        resp.lease_ttl_ms = fm.lease_ttl_ms;
        FM_REPLY(get_replica_list);
        break;
    }
    case MC_WIRE_OP_EXIST_KEY: {
        FM_DECODE(exist_key);
        fm_obj_t *o = fm_find(req.key);
        resp.exists = (o != NULL) && o->complete;
        FM_REPLY(exist_key);
        break;
    }
    case MC_WIRE_OP_REMOVE: {
        FM_DECODE(remove);
        fm_obj_t *o = fm_find(req.key);
        if (o == NULL)
            st = MC_OBJECT_NOT_FOUND;
        else
            memset(o, 0, sizeof(*o));
        FM_REPLY(remove);
        break;
    }
    case MC_WIRE_OP_BATCH_PUT_START: {
        FM_DECODE(batch_put_start);
        if ((req.keys.n != req.lengths.n) || (req.keys.n > 2 * FM_MAX_OBJS))
            return -1;
        resp.results.n = req.keys.n;
        resp.results.v = mc_arena_calloc(arena, req.keys.n, sizeof(mc_wire_result_t));
        for (uint32_t i = 0; i < req.keys.n; i++) {
            mc_wire_result_t *r = &resp.results.v[i];
            r->status = fm_put_start(req.keys.v[i], req.lengths.v[i], &reps[i]);
            r->replicas.n = (r->status == MC_OK) ? 1 : 0;
            r->replicas.v = &reps[i];
        }
        FM_REPLY(batch_put_start);
        break;
    }
    case MC_WIRE_OP_BATCH_PUT_END:
    case MC_WIRE_OP_BATCH_PUT_REVOKE: {
        FM_DECODE(batch_put_end); /* same layout as BATCH_PUT_REVOKE */
        resp.statuses.n = req.keys.n;
        resp.statuses.v = mc_arena_calloc(arena, req.keys.n, sizeof(int32_t));
        for (uint32_t i = 0; i < req.keys.n; i++) {
            fm_obj_t *o = fm_find(req.keys.v[i]);
            if (o == NULL)
                resp.statuses.v[i] = MC_OBJECT_NOT_FOUND;
            else if (op == MC_WIRE_OP_BATCH_PUT_END)
                o->complete = 1;
            else
                memset(o, 0, sizeof(*o));
        }
        if (op == MC_WIRE_OP_BATCH_PUT_END) {
            FM_REPLY(batch_put_end);
        } else {
            mc_wire_batch_put_revoke_resp_t rr = {.statuses = resp.statuses};
            mc_wire_encode_batch_put_revoke_resp(out, id, st, &rr);
        }
        break;
    }
    case MC_WIRE_OP_BATCH_GET_REPLICA_LIST: {
        FM_DECODE(batch_get_replica_list);
        resp.lease_ttl_ms = fm.lease_ttl_ms;
        resp.results.n    = req.keys.n;
        resp.results.v    = mc_arena_calloc(arena, req.keys.n, sizeof(mc_wire_result_t));
        for (uint32_t i = 0; i < req.keys.n && i < FM_MAX_OBJS; i++) {
            mc_wire_result_t *r = &resp.results.v[i];
            r->status = fm_lookup(req.keys.v[i], &r->size, &r->replicas, &reps[2 * i]);
        }
        FM_REPLY(batch_get_replica_list);
        break;
    }
    case MC_WIRE_OP_BATCH_EXIST_KEY: {
        FM_DECODE(batch_exist_key);
        resp.results.n = req.keys.n;
        resp.results.v = mc_arena_calloc(arena, req.keys.n, sizeof(int32_t));
        for (uint32_t i = 0; i < req.keys.n; i++) {
            fm_obj_t *o        = fm_find(req.keys.v[i]);
            resp.results.v[i] = (o != NULL) && o->complete;
        }
        FM_REPLY(batch_exist_key);
        break;
    }
    case MC_WIRE_OP_FETCH_TASKS: {
        mc_wire_task_t *t = mc_arena_alloc(arena, sizeof(*t));
        mc_str_t *tg      = mc_arena_alloc(arena, sizeof(*tg));
        FM_DECODE(fetch_tasks);
        if (fm.task_armed && (t != NULL) && (tg != NULL)) {
            memset(t, 0, sizeof(*t));
            t->id.lo              = 42;
            t->type               = 0;
            t->key                = mc_str_from_cstr("task-key");
            t->source             = fm.task_src.segment;
            *tg                   = fm.task_dst.segment;
            t->targets.n          = 1;
            t->targets.v          = tg;
            t->max_retry_attempts = fm.task_retry;
            resp.tasks.n          = 1;
            resp.tasks.v          = t;
            fm.task_armed         = 0;
        }
        FM_REPLY(fetch_tasks);
        break;
    }
    case MC_WIRE_OP_TASK_REPLICA_START: {
        FM_DECODE(task_replica_start);
        if (fm.task_nah > 0) {
            fm.task_nah--;
            st = MC_NO_AVAILABLE_HANDLE;
        } else {
            reps[0]           = fm.task_src;
            reps[1]           = fm.task_dst;
            resp.size         = fm.task_size;
            resp.source.n     = 1;
            resp.source.v     = &reps[0];
            resp.targets.n    = 1;
            resp.targets.v    = &reps[1];
        }
        FM_REPLY(task_replica_start);
        break;
    }
    case MC_WIRE_OP_TASK_REPLICA_END: {
        FM_DECODE(task_replica_end);
        FM_REPLY(task_replica_end);
        break;
    }
    case MC_WIRE_OP_TASK_REPLICA_REVOKE: {
        FM_DECODE(task_replica_revoke);
        FM_REPLY(task_replica_revoke);
        break;
    }
    case MC_WIRE_OP_MARK_TASK_COMPLETE: {
        FM_DECODE(mark_task_complete);
        fm.task_done   = 1;
        fm.task_status = req.status;
        snprintf(fm.task_msg, sizeof(fm.task_msg), "%.*s", (int)req.message.len,
                 req.message.ptr);
        FM_REPLY(mark_task_complete);
        break;
    }
    default:
        mc_wire_encode_error(out, op, id, MC_NOT_SUPPORTED);
    }
    return 0;
}

/* Serve one frame from @p fd; -1 when the connection should close. */
static int fm_serve(int fd)
{
    uint8_t raw[MC_WIRE_HEADER_SIZE];
    mc_wire_header_t h;
    uint8_t *body = NULL;
    mc_arena_t arena;
    mc_buf_t out;
    int rc = -1;

    if ((mc_read_full(fd, raw, sizeof(raw)) != 0) || (mc_wire_header_unpack(raw, &h) != MC_OK))
        return -1;
    body = malloc(h.body_len ? h.body_len : 1);
    if ((body == NULL) || ((h.body_len > 0) && (mc_read_full(fd, body, h.body_len) != 0))) {
        free(body);
        return -1;
    }
    mc_arena_init(&arena);
    mc_buf_init(&out);
    pthread_mutex_lock(&fm.mu);
    rc = fm_handle(h.opcode, h.request_id, body, h.body_len, &arena, &out);
    if ((rc == 0) && (h.opcode == fm.once_op) && (fm.once_mode != FM_NORMAL)) {
        if (fm.once_mode == FM_BAD_ID)
            mc_store_le32(out.data + 8, h.request_id + 7);
        else if ((fm.once_mode == FM_TRUNCATED) && (out.len > MC_WIRE_HEADER_SIZE + 4)) {
            out.len -= 1;
            mc_store_le32(out.data + 12, (uint32_t)(out.len - MC_WIRE_HEADER_SIZE));
        }
        fm.once_mode = FM_NORMAL;
    }
    pthread_mutex_unlock(&fm.mu);
    if ((rc == 0) && (mc_write_full(fd, out.data, out.len) != 0))
        rc = -1;
    mc_buf_cleanup(&out);
    mc_arena_cleanup(&arena);
    free(body);
    return rc;
}

static void *fm_main(void *arg)
{
    struct pollfd p[FM_MAX_CONNS + 2];
    int n = 2;
    (void)arg;
    p[0] = (struct pollfd){fm.lfd, POLLIN, 0};
    p[1] = (struct pollfd){fm.stop_pipe[0], POLLIN, 0};
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        if (p[1].revents) {
            char cmd = 'x';
            if ((read(fm.stop_pipe[0], &cmd, 1) != 1) || (cmd == 'x'))
                break;
            /* 'd': cut every client connection, as a master restart would */
            for (int i = 2; i < n; i++)
                close(p[i].fd);
            n = 2;
            pthread_mutex_lock(&fm.mu);
            fm.drops++;
            pthread_mutex_unlock(&fm.mu);
            continue;
        }
        if (p[0].revents & POLLIN) {
            int c = accept(fm.lfd, NULL, NULL);
            if ((c >= 0) && (n < FM_MAX_CONNS + 2))
                p[n++] = (struct pollfd){c, POLLIN, 0};
            else if (c >= 0)
                close(c);
        }
        for (int i = 2; i < n; i++) {
            if (p[i].revents == 0)
                continue;
            if (fm_serve(p[i].fd) != 0) {
                close(p[i].fd);
                p[i--] = p[--n];
            }
        }
    }
    for (int i = 2; i < n; i++)
        close(p[i].fd);
    return NULL;
}

static void fm_start(void)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);

    memset(&fm, 0, sizeof(fm));
    pthread_mutex_init(&fm.mu, NULL);
    fm.lease_ttl_ms = 10000;
    fm.ping_status  = 1;
    fm.lfd          = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_msg(fm.lfd >= 0, "the fake master needs a socket");
    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(bind(fm.lfd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind should work");
    ck_assert_msg(listen(fm.lfd, 64) == 0, "listen should work");
    getsockname(fm.lfd, (struct sockaddr *)&a, &alen);
    fm.port = ntohs(a.sin_port);
    ck_assert_msg(pipe(fm.stop_pipe) == 0, "pipe should work");
    ck_assert_msg(pthread_create(&fm.thread, NULL, fm_main, NULL) == 0,
                  "the fake master thread should start");
}

static void fm_stop(void)
{
    ck_assert_int_eq(write(fm.stop_pipe[1], "x", 1), 1);
    pthread_join(fm.thread, NULL);
    close(fm.lfd);
    close(fm.stop_pipe[0]);
    close(fm.stop_pipe[1]);
    pthread_mutex_destroy(&fm.mu);
}

/* Cut every connection and wait until the fake master has done it. */
static void fm_drop_conns(void)
{
    int before, now = 0;
    pthread_mutex_lock(&fm.mu);
    before = fm.drops;
    pthread_mutex_unlock(&fm.mu);
    ck_assert_int_eq(write(fm.stop_pipe[1], "d", 1), 1);
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&fm.mu);
        now = fm.drops;
        pthread_mutex_unlock(&fm.mu);
        if (now > before)
            break;
        usleep(1000);
    }
    ck_assert_msg(now > before, "the fake master should cut its connections");
}

static int fm_seen(int op)
{
    int v;
    pthread_mutex_lock(&fm.mu);
    v = fm.seen[op];
    pthread_mutex_unlock(&fm.mu);
    return v;
}

static void fm_set(int *knob, int v)
{
    pthread_mutex_lock(&fm.mu);
    *knob = v;
    pthread_mutex_unlock(&fm.mu);
}

/* ---- fixtures ------------------------------------------------------------- */

static mc_store_h store;
static char master_addr[64];

static void fill_params(mc_store_params_t *p, uint64_t lbuf)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                    MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_LOCAL_BUFFER_SIZE |
                    MC_STORE_PARAM_MASTER_SERVER_ADDR;
    p->local_hostname      = "127.0.0.1";
    p->metadata_server     = "P2PHANDSHAKE";
    p->global_segment_size = 4u << 20;
    p->local_buffer_size   = lbuf;
    p->master_server_addr  = master_addr;
}

static void setup_live(void)
{
    mc_store_params_t p;
    fm_start();
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", (unsigned)fm.port);
    ck_assert_status_ok(mc_store_create(&store));
    fill_params(&p, 1u << 20);
    ck_assert_status_ok(mc_store_setup(store, &p));
}

static void teardown_live(void)
{
    mc_store_destroy(store);
    store = NULL;
    fm_stop();
}

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31u + seed);
}

/* ---- without a master ----------------------------------------------------- */

START_TEST(test_config_defaults)
{
    mc_replicate_config_t c;
    memset(&c, 0xa5, sizeof(c));
    mc_replicate_config_init(&c);
    ck_assert_msg(c.replica_num == 1, "the default replica_num should be 1");
    ck_assert_msg(c.soft_pin_action == MC_SOFT_PIN_PRESERVE, "the default action is PRESERVE");
    ck_assert_msg((c.field_mask == 0) && (c.nof_replica_num == 0) && (c.dfs_replica_num == 0) &&
                      (c.with_hard_pin == 0) && (c.preferred_segment == NULL) &&
                      (c.group_ids == NULL) && (c.group_ids_count == 0),
                  "every other field should be zero");
    mc_replicate_config_init(NULL); /* must not crash */
}
END_TEST

START_TEST(test_calls_before_setup)
{
    mc_store_h s;
    uint8_t buf[8];
    uint64_t size = 77;
    mc_store_query_h q = (mc_store_query_h)(uintptr_t)1;
    const char *keys[2] = {"a", "b"};
    mc_iov_t vals[2]    = {{buf, 1}, {buf, 1}};
    mc_status_t sts[2]  = {1, 1};
    int res[2]          = {5, 5};

    ck_assert_status_ok(mc_store_create(&s));
    ck_assert_str_eq(mc_store_hostname(s), "");
    ck_assert_msg(mc_store_engine(s) == NULL, "no engine before setup");
    ck_assert_status_eq(mc_store_put(s, "k", buf, 1, NULL), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_put_parts(s, "k", vals, 2, NULL),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_put_batch(s, keys, vals, 2, NULL, sts),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_msg(sts[0] == MC_UNAVAILABLE_IN_CURRENT_STATUS && sts[1] == sts[0],
                  "per-key statuses should say the store is not set up");
    ck_assert_status_eq(mc_store_get(s, "k", buf, sizeof(buf), &size),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_msg(size == 77, "size must not be written on failure");
    ck_assert_status_eq(mc_store_query(s, "k", &q), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_exist(s, "k"), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_batch_exist(s, keys, 2, res),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_msg(res[0] == MC_UNAVAILABLE_IN_CURRENT_STATUS, "batch_exist fills results");
    ck_assert_status_eq(mc_store_get_size(s, "k", &size), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_remove(s, "k", 1), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_query_read(s, NULL, 0, buf, 1),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_msg(strlen(mc_last_error_detail()) > 0, "a failure should leave a detail");
    ck_assert_status_ok(mc_store_close(s));
    ck_assert_status_ok(mc_store_close(s));
    mc_store_destroy(s);
    mc_store_destroy(NULL);
    ck_assert_status_eq(mc_store_exist(NULL, "k"), MC_INVALID_PARAMS);
    ck_assert_str_eq(mc_store_hostname(NULL), "");
}
END_TEST

START_TEST(test_setup_invalid_params)
{
    mc_store_h s;
    mc_store_params_t p;

    ck_assert_status_ok(mc_store_create(&s));
    ck_assert_status_eq(mc_store_setup(s, NULL), MC_INVALID_PARAMS);
    memset(&p, 0, sizeof(p));
    p.field_mask      = MC_STORE_PARAM_METADATA_SERVER;
    p.metadata_server = "P2PHANDSHAKE";
    ck_assert_status_eq(mc_store_setup(s, &p), MC_INVALID_PARAMS);
    p.field_mask     = MC_STORE_PARAM_LOCAL_HOSTNAME;
    p.local_hostname = "127.0.0.1";
    ck_assert_status_eq(mc_store_setup(s, &p), MC_INVALID_PARAMS);
    p.field_mask |= MC_STORE_PARAM_METADATA_SERVER | MC_STORE_PARAM_MASTER_SERVER_ADDR;
    p.master_server_addr = "";
    p.metadata_server    = "";
    ck_assert_status_eq(mc_store_setup(s, &p), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_exist(s, "k"), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_store_destroy(s);
}
END_TEST

START_TEST(test_setup_without_master)
{
    mc_store_h s;
    mc_store_params_t p;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    int fd         = socket(AF_INET, SOCK_STREAM, 0);

    /* a port that was free a moment ago and has no listener now */
    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    close(fd);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));

    ck_assert_status_ok(mc_store_create(&s));
    fill_params(&p, 0);
    ck_assert_status_eq(mc_store_setup(s, &p), MC_RPC_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "master") != NULL,
                  "the detail should name the master, got \"%s\"", mc_last_error_detail());
    ck_assert_str_eq(mc_store_hostname(s), "");
    ck_assert_status_eq(mc_store_exist(s, "k"), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_store_destroy(s);
}
END_TEST

/*
 * A master that accepts the connection (the kernel completes it from the
 * listen backlog) and never answers: setup gives up after rpc_timeout_ms,
 * names the master, and refuses a limit above an hour.
 */
START_TEST(test_setup_silent_master_times_out)
{
    mc_store_h s;
    mc_store_params_t p;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    struct timespec t0, t1;
    double took;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));

    ck_assert_status_ok(mc_store_create(&s));
    fill_params(&p, 0);
    p.field_mask |= MC_STORE_PARAM_RPC_TIMEOUT_MS;
    p.rpc_timeout_ms = 3600001;
    ck_assert_status_eq(mc_store_setup(s, &p), MC_INVALID_PARAMS);
    p.rpc_timeout_ms = 300;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_status_eq(mc_store_setup(s, &p), MC_RPC_FAIL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_msg(took >= 0.25 && took < 3.0,
                  "setup should give up after about 300 ms, it took %.2f s", took);
    ck_assert_msg(strstr(mc_last_error_detail(), master_addr) != NULL &&
                      strstr(mc_last_error_detail(), "300 ms") != NULL,
                  "the detail should name the master and the limit, got \"%s\"",
                  mc_last_error_detail());
    ck_assert_str_eq(mc_store_hostname(s), "");
    ck_assert_status_ok(mc_store_close(s));
    mc_store_destroy(s);
    close(fd);
}
END_TEST

/* ---- against the fake master ------------------------------------------------ */

START_TEST(test_put_get_roundtrip)
{
    static uint8_t val[10000], out[10000];
    uint8_t small[16];
    uint64_t size = 0;
    mc_store_params_t p;

    ck_assert_msg(strncmp(mc_store_hostname(store), "127.0.0.1:", 10) == 0,
                  "hostname should be host:port, got \"%s\"", mc_store_hostname(store));
    ck_assert_msg(mc_store_engine(store) != NULL, "engine after setup");
    ck_assert_str_eq(fm.seg_name, mc_store_hostname(store));
    fill_params(&p, 0);
    ck_assert_status_eq(mc_store_setup(store, &p), MC_INVALID_PARAMS);

    pattern(val, sizeof(val), 1);
    ck_assert_status_ok(mc_store_put(store, "k1", val, sizeof(val), NULL));
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_PUT_END), 1);
    ck_assert_status_ok(mc_store_get(store, "k1", out, sizeof(out), &size));
    ck_assert_msg(size == sizeof(val) && memcmp(out, val, sizeof(val)) == 0,
                  "get should return the bytes put");

    memset(small, 0x5c, sizeof(small));
    size = 0;
    ck_assert_status_eq(mc_store_get(store, "k1", small, sizeof(small), &size),
                        MC_BUFFER_OVERFLOW);
    ck_assert_msg(size == sizeof(val), "overflow should report the size");
    for (size_t i = 0; i < sizeof(small); i++)
        ck_assert_msg(small[i] == 0x5c, "a too-small buffer must stay untouched");

    /* first writer wins: a second put reports OK and keeps the value */
    pattern(out, sizeof(out), 9);
    ck_assert_status_ok(mc_store_put(store, "k1", out, 100, NULL));
    ck_assert_status_ok(mc_store_get(store, "k1", out, sizeof(out), &size));
    ck_assert_msg(size == sizeof(val) && memcmp(out, val, sizeof(val)) == 0,
                  "an existing key keeps its value");

    /* empty value: OK, nothing sent */
    int starts = fm_seen(MC_WIRE_OP_PUT_START);
    ck_assert_status_ok(mc_store_put(store, "empty", NULL, 0, NULL));
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_PUT_START), starts);
    ck_assert_int_eq(mc_store_exist(store, "empty"), 0);

    ck_assert_int_eq(mc_store_exist(store, "k1"), 1);
    ck_assert_int_eq(mc_store_exist(store, "nope"), 0);
    ck_assert_status_ok(mc_store_get_size(store, "k1", &size));
    ck_assert_msg(size == sizeof(val), "get_size");
    ck_assert_status_eq(mc_store_get(store, "nope", out, sizeof(out), &size),
                        MC_OBJECT_NOT_FOUND);
    ck_assert_status_ok(mc_store_remove(store, "k1", 0));
    ck_assert_status_eq(mc_store_remove(store, "k1", 0), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(mc_store_exist(store, "k1"), 0);

    /* bad keys never reach the master */
    char big[MC_WIRE_MAX_KEY + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_status_eq(mc_store_put(store, "", val, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_put(store, NULL, val, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_put(store, big, val, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_put(store, "k", NULL, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_exist(store, big), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_query_ranges)
{
    static uint8_t val[5000], out[5000];
    mc_store_query_h q = NULL;

    pattern(val, sizeof(val), 3);
    ck_assert_status_ok(mc_store_put(store, "r", val, sizeof(val), NULL));
    ck_assert_status_ok(mc_store_query(store, "r", &q));
    ck_assert_msg(mc_store_query_size(q) == sizeof(val), "query size");
    ck_assert_status_ok(mc_store_query_read(store, q, 100, out, 50));
    ck_assert_msg(memcmp(out, val + 100, 50) == 0, "a ranged read returns that range");
    ck_assert_status_ok(mc_store_query_read(store, q, sizeof(val), out, 0));
    ck_assert_status_eq(mc_store_query_read(store, q, sizeof(val) - 1, out, 2),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_query_read(store, q, UINT64_MAX, out, 2), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_query_read(store, q, 1, out, SIZE_MAX), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_query_read(store, NULL, 0, out, 1), MC_INVALID_PARAMS);
    mc_store_query_release(q);
    mc_store_query_release(NULL);
    ck_assert_status_eq(mc_store_query(store, "absent", &q), MC_OBJECT_NOT_FOUND);
}
END_TEST

START_TEST(test_put_parts_and_batch)
{
    static uint8_t a[3000], b[5], c[70000], out[80000];
    mc_iov_t parts[4] = {{a, sizeof(a)}, {NULL, 0}, {b, sizeof(b)}, {c, sizeof(c)}};
    uint64_t size;
    const char *keys[4] = {"b0", "", "b2", "b3"};
    mc_iov_t vals[4]    = {{a, sizeof(a)}, {b, sizeof(b)}, {b, 0}, {c, sizeof(c)}};
    mc_status_t sts[4];
    mc_store_query_h qs[5];
    mc_status_t qst[5];
    const char *qkeys[5] = {"b0", "nope", "b3", "", "parts"};
    void *bufs[5];
    int ex[3];

    pattern(a, sizeof(a), 1);
    pattern(b, sizeof(b), 2);
    pattern(c, sizeof(c), 3);
    ck_assert_status_ok(mc_store_put_parts(store, "parts", parts, 4, NULL));
    ck_assert_status_ok(mc_store_get(store, "parts", out, sizeof(out), &size));
    ck_assert_msg(size == sizeof(a) + sizeof(b) + sizeof(c), "parts concatenate");
    ck_assert_msg(memcmp(out, a, sizeof(a)) == 0 &&
                      memcmp(out + sizeof(a), b, sizeof(b)) == 0 &&
                      memcmp(out + sizeof(a) + sizeof(b), c, sizeof(c)) == 0,
                  "parts land at consecutive offsets");

    ck_assert_status_eq(mc_store_put_batch(store, keys, vals, 4, NULL, sts), MC_INVALID_PARAMS);
    ck_assert_msg(sts[0] == MC_OK && sts[1] == MC_INVALID_PARAMS && sts[2] == MC_OK &&
                      sts[3] == MC_OK,
                  "per-key statuses: %d %d %d %d", sts[0], sts[1], sts[2], sts[3]);
    ck_assert_int_eq(mc_store_exist(store, "b2"), 0);

    ck_assert_status_eq(mc_store_batch_query(store, qkeys, 5, qs, qst), MC_OBJECT_NOT_FOUND);
    ck_assert_msg(qst[0] == MC_OK && qst[1] == MC_OBJECT_NOT_FOUND && qst[2] == MC_OK &&
                      qst[3] == MC_INVALID_PARAMS && qst[4] == MC_OK,
                  "batch query statuses %d %d %d %d %d", qst[0], qst[1], qst[2], qst[3], qst[4]);
    ck_assert_msg(qs[1] == NULL && qs[3] == NULL, "failed lookups give NULL");
    for (int i = 0; i < 5; i++)
        bufs[i] = calloc(1, 80000);
    ck_assert_status_eq(mc_store_batch_query_read(store, qs, 5, bufs, qst), MC_INVALID_PARAMS);
    ck_assert_msg(qst[0] == MC_OK && qst[2] == MC_OK && qst[4] == MC_OK &&
                      qst[1] == MC_INVALID_PARAMS,
                  "batch read statuses %d %d %d %d %d", qst[0], qst[1], qst[2], qst[3], qst[4]);
    ck_assert_msg(memcmp(bufs[0], a, sizeof(a)) == 0 && memcmp(bufs[2], c, sizeof(c)) == 0 &&
                      memcmp(bufs[4], out, size) == 0,
                  "batch reads return every object");
    for (int i = 0; i < 5; i++) {
        mc_store_query_release(qs[i]);
        free(bufs[i]);
    }

    ck_assert_status_eq(mc_store_batch_exist(store, keys, 3, ex), MC_INVALID_PARAMS);
    ck_assert_msg(ex[0] == 1 && ex[1] == MC_INVALID_PARAMS && ex[2] == 0,
                  "batch exist %d %d %d", ex[0], ex[1], ex[2]);
}
END_TEST

START_TEST(test_config_validation)
{
    uint8_t v[8] = {0};
    mc_replicate_config_t c;
    const char *g[2] = {"g1", "g2"};
    const char *keys[2] = {"x1", "x2"};
    mc_iov_t vals[2]    = {{v, 8}, {v, 8}};
    mc_status_t sts[2];
    int starts = fm_seen(MC_WIRE_OP_PUT_START);

    mc_replicate_config_init(&c);
    c.field_mask |= MC_RC_FIELD_SOFT_PIN_TTL;
    c.soft_pin_ttl_ms = 1000;
    ck_assert_status_eq(mc_store_put(store, "x", v, 8, &c), MC_INVALID_PARAMS);
    c.soft_pin_action = MC_SOFT_PIN_ENABLE;
    ck_assert_status_ok(mc_store_put(store, "x", v, 8, &c));

    mc_replicate_config_init(&c);
    c.replica_num = 0;
    ck_assert_status_eq(mc_store_put(store, "y", v, 8, &c), MC_INVALID_PARAMS);

    mc_replicate_config_init(&c);
    c.field_mask |= MC_RC_FIELD_GROUP_IDS;
    c.group_ids       = g;
    c.group_ids_count = 2;
    ck_assert_status_eq(mc_store_put(store, "y", v, 8, &c), MC_INVALID_PARAMS);
    c.group_ids_count = 1;
    ck_assert_status_ok(mc_store_put(store, "y", v, 8, &c));
    ck_assert_status_eq(mc_store_put_batch(store, keys, vals, 2, &c, sts), MC_INVALID_PARAMS);
    ck_assert_msg(sts[0] == MC_INVALID_PARAMS && sts[1] == MC_INVALID_PARAMS,
                  "a wrong group_ids count fails every key");
    c.group_ids_count = 2;
    ck_assert_status_ok(mc_store_put_batch(store, keys, vals, 2, &c, sts));
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_PUT_START), starts + 2);
}
END_TEST

START_TEST(test_transfer_failure_revokes)
{
    uint8_t v[4096] = {1};
    const char *keys[2] = {"bo", "bp"};
    mc_iov_t vals[2]    = {{v, sizeof(v)}, {v, sizeof(v)}};
    mc_status_t sts[2];
    int rev;

    fm_set(&fm.put_mode, FM_OUTSIDE);
    rev = fm_seen(MC_WIRE_OP_PUT_REVOKE);
    ck_assert_msg(mc_store_put(store, "out", v, sizeof(v), NULL) < 0,
                  "a write outside the owner's registered memory must fail");
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_PUT_REVOKE), rev + 1);
    ck_assert_int_eq(mc_store_exist(store, "out"), 0);

    rev = fm_seen(MC_WIRE_OP_BATCH_PUT_REVOKE);
    ck_assert_msg(mc_store_put_batch(store, keys, vals, 2, NULL, sts) < 0, "batch fails");
    ck_assert_msg(sts[0] < 0 && sts[1] < 0, "both keys fail");
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_BATCH_PUT_REVOKE), rev + 1);

    fm_set(&fm.put_mode, FM_SMALL);
    rev = fm_seen(MC_WIRE_OP_PUT_REVOKE);
    ck_assert_status_eq(mc_store_put(store, "small", v, sizeof(v), NULL), MC_INVALID_REPLICA);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_PUT_REVOKE), rev + 1);

    fm_set(&fm.put_mode, FM_NORMAL);
    ck_assert_status_ok(mc_store_put(store, "out", v, sizeof(v), NULL));
}
END_TEST

START_TEST(test_hostile_responses)
{
    uint8_t v[64] = {7}, out[64];
    uint64_t size;

    ck_assert_status_ok(mc_store_put(store, "h", v, sizeof(v), NULL));
    fm_set(&fm.once_op, MC_WIRE_OP_EXIST_KEY);
    fm_set(&fm.once_mode, FM_BAD_ID);
    ck_assert_status_eq(mc_store_exist(store, "h"), MC_RPC_FAIL);
    ck_assert_int_eq(mc_store_exist(store, "h"), 1); /* a fresh connection works */
    fm_set(&fm.once_op, MC_WIRE_OP_GET_REPLICA_LIST);
    fm_set(&fm.once_mode, FM_TRUNCATED);
    ck_assert_status_eq(mc_store_get(store, "h", out, sizeof(out), &size), MC_RPC_FAIL);
    ck_assert_status_ok(mc_store_get(store, "h", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, v, sizeof(v)) == 0, "reads work after a bad response");
}
END_TEST

START_TEST(test_master_restart_is_transparent)
{
    uint8_t v[256], out[256];
    uint64_t size;

    pattern(v, sizeof(v), 11);
    ck_assert_status_ok(mc_store_put(store, "before", v, sizeof(v), NULL));
    fm_drop_conns();
    /* every pooled connection is dead now; calls redial once, silently */
    ck_assert_int_eq(mc_store_exist(store, "before"), 1);
    fm_drop_conns();
    ck_assert_status_ok(mc_store_get(store, "before", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, v, sizeof(v)) == 0, "get after a reconnect");
    fm_drop_conns();
    ck_assert_status_ok(mc_store_put(store, "after", v, sizeof(v), NULL));
    ck_assert_int_eq(mc_store_exist(store, "after"), 1);
}
END_TEST

START_TEST(test_lease_and_fallback)
{
    static uint8_t v[8192], out[8192];
    uint64_t size;

    pattern(v, sizeof(v), 5);
    ck_assert_status_ok(mc_store_put(store, "l", v, sizeof(v), NULL));
    fm_set(&fm.get_mode, FM_FALLBACK);
    memset(out, 0, sizeof(out));
    ck_assert_status_ok(mc_store_get(store, "l", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, v, sizeof(v)) == 0, "the second replica serves the read");
    fm_set(&fm.get_mode, FM_NORMAL);

    /* a lookup whose lease is over before the read ends: the data is
     * refused (a fresh key: "l" is in the location cache under the lease
     * its first lookup granted) */
    ck_assert_status_ok(mc_store_put(store, "l0", v, sizeof(v), NULL));
    pthread_mutex_lock(&fm.mu);
    fm.lease_ttl_ms = 0;
    pthread_mutex_unlock(&fm.mu);
    ck_assert_status_eq(mc_store_get(store, "l0", out, sizeof(out), &size), MC_LEASE_EXPIRED);
}
END_TEST

static void *close_racer(void *arg)
{
    long seen_ok = 0;
    for (;;) {
        int r = mc_store_exist(store, "k");
        if (r == MC_UNAVAILABLE_IN_CURRENT_STATUS)
            break;
        if (r < 0)
            return (void *)-1L;
        seen_ok++;
    }
    (void)arg;
    return (void *)seen_ok;
}

START_TEST(test_close_semantics)
{
    pthread_t t[4];
    void *ret;
    mc_store_params_t p;
    uint8_t v[16] = {3}, out[16];
    uint64_t size;

    ck_assert_status_ok(mc_store_put(store, "c", v, sizeof(v), NULL));
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, close_racer, NULL), 0);
    /* let the racers get going, then close underneath them */
    for (int spins = 0; spins < 2000 && fm_seen(MC_WIRE_OP_EXIST_KEY) < 40; spins++)
        usleep(1000);
    ck_assert_status_ok(mc_store_close(store));
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], &ret);
        ck_assert_msg(ret != (void *)-1L, "calls racing close return OK or -1010 only");
    }
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_CLIENT_CLOSE), 1);
    ck_assert_str_eq(mc_store_hostname(store), "");
    ck_assert_status_ok(mc_store_close(store));

    /* the handle is reusable; the old objects are gone */
    fill_params(&p, 1u << 20);
    ck_assert_status_ok(mc_store_setup(store, &p));
    ck_assert_status_eq(mc_store_get(store, "c", out, sizeof(out), &size), MC_OBJECT_NOT_FOUND);
    ck_assert_status_ok(mc_store_put(store, "c", v, sizeof(v), NULL));
    ck_assert_status_ok(mc_store_get(store, "c", out, sizeof(out), &size));
}
END_TEST

START_TEST(test_staging_needed_without_local_buffer)
{
    mc_store_params_t p;
    uint8_t heap_val[32] = {1};
    void *reg = NULL;

    ck_assert_status_ok(mc_store_close(store));
    fill_params(&p, 0);
    ck_assert_status_ok(mc_store_setup(store, &p));
    ck_assert_status_eq(mc_store_put(store, "s", heap_val, sizeof(heap_val), NULL),
                        MC_INVALID_PARAMS);
    ck_assert_int_eq(posix_memalign(&reg, 4096, 4096), 0);
    memset(reg, 9, 4096);
    ck_assert_status_ok(mc_te_mem_reg(mc_store_engine(store), reg, 4096, "", 0));
    ck_assert_status_ok(mc_store_put(store, "s", reg, 4096, NULL));
    ck_assert_status_ok(mc_te_mem_dereg(mc_store_engine(store), reg));
    free(reg);
}
END_TEST

START_TEST(test_heartbeat_remount)
{
    mc_store_params_t p;
    int base;

    ck_assert_status_ok(mc_store_close(store));
    setenv("MC_STORE_HEARTBEAT_MS", "20", 1);
    fill_params(&p, 0);
    ck_assert_status_ok(mc_store_setup(store, &p));
    unsetenv("MC_STORE_HEARTBEAT_MS");
    base = fm_seen(MC_WIRE_OP_PING);
    for (int i = 0; i < 3000 && fm_seen(MC_WIRE_OP_PING) < base + 3; i++)
        usleep(1000);
    ck_assert_msg(fm_seen(MC_WIRE_OP_PING) >= base + 3, "pings should arrive every 20 ms");
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_REMOUNT_SEGMENTS), 0);
    fm_set(&fm.ping_status, 2);
    for (int i = 0; i < 3000 && fm_seen(MC_WIRE_OP_REMOUNT_SEGMENTS) == 0; i++)
        usleep(1000);
    ck_assert_msg(fm_seen(MC_WIRE_OP_REMOUNT_SEGMENTS) == 1,
                  "NEED_REMOUNT should trigger exactly one REMOUNT_SEGMENTS");
}
END_TEST

/* ---- copy and move tasks ------------------------------------------------------ */

/* Bad arguments are refused before any round trip; a good call reaches the
 * master (which answers NOT_SUPPORTED here), so the counts mean something. */
START_TEST(test_task_calls_validate)
{
    mc_task_id_t id;
    mc_store_task_info_t info;
    mc_store_h idle;
    const char *tg[2]    = {"127.0.0.1:1", NULL};
    const char *empty[1] = {""};
    static char big[MC_WIRE_MAX_KEY + 2];
    int c0 = fm_seen(MC_WIRE_OP_CREATE_COPY_TASK), m0 = fm_seen(MC_WIRE_OP_CREATE_MOVE_TASK);
    int q0 = fm_seen(MC_WIRE_OP_QUERY_TASK);

    memset(big, 'x', sizeof(big) - 1);
    memset(&id, 0x55, sizeof(id));
    ck_assert_status_eq(mc_store_create_copy_task(store, NULL, tg, 1, &id), MC_INVALID_PARAMS);
    ck_assert_msg((unsigned char)id.id[0] == 0x55, "the id is not written on failure");
    ck_assert_status_eq(mc_store_create_copy_task(store, "", tg, 1, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_copy_task(store, big, tg, 1, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_copy_task(store, "k", tg, 0, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_copy_task(store, "k", NULL, 1, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_copy_task(store, "k", tg, 2, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_copy_task(store, "k", tg, 1, NULL), MC_INVALID_PARAMS);

    ck_assert_status_eq(mc_store_create_move_task(store, NULL, "a:1", "b:1", &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_move_task(store, "", "a:1", "b:1", &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_move_task(store, "k", NULL, "b:1", &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_move_task(store, "k", big, "b:1", &id),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_create_move_task(store, "k", "a:1", "b:1", NULL),
                        MC_INVALID_PARAMS);

    memset(&info, 0x55, sizeof(info));
    ck_assert_status_eq(mc_store_query_task(store, NULL, &info), MC_INVALID_PARAMS);
    ck_assert_msg((unsigned char)info.message[0] == 0x55, "the output is not written on failure");
    ck_assert_status_eq(mc_store_query_task(store, "nope", &info), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_query_task(store, "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", &info),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(
        mc_store_query_task(store, "0e2d1f6c-3a56-4f0e-9d5c-6f1c2b7a8e90-and-more", &info),
        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_query_task(store, "0e2d1f6c-3a56-4f0e-9d5c-6f1c2b7a8e90", NULL),
                        MC_INVALID_PARAMS);

    ck_assert_int_eq(fm_seen(MC_WIRE_OP_CREATE_COPY_TASK), c0);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_CREATE_MOVE_TASK), m0);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_QUERY_TASK), q0);

    /* well-formed calls do reach the master; so do empty segment names,
     * which the master refuses after its key check (upstream's order) */
    ck_assert_status_eq(mc_store_create_copy_task(store, "k", tg, 1, &id), MC_NOT_SUPPORTED);
    ck_assert_status_eq(mc_store_create_copy_task(store, "k", empty, 1, &id), MC_NOT_SUPPORTED);
    ck_assert_status_eq(mc_store_create_move_task(store, "k", "a:1", "b:1", &id),
                        MC_NOT_SUPPORTED);
    ck_assert_status_eq(mc_store_create_move_task(store, "k", "a:1", "", &id),
                        MC_NOT_SUPPORTED);
    ck_assert_status_eq(mc_store_query_task(store, "0e2d1f6c-3a56-4f0e-9d5c-6f1c2b7a8e90", &info),
                        MC_NOT_SUPPORTED);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_CREATE_COPY_TASK), c0 + 2);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_CREATE_MOVE_TASK), m0 + 2);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_QUERY_TASK), q0 + 1);

    /* before setup */
    ck_assert_status_ok(mc_store_create(&idle));
    ck_assert_status_eq(mc_store_create_copy_task(idle, "k", tg, 1, &id),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_create_move_task(idle, "k", "a:1", "b:1", &id),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_query_task(idle, "0e2d1f6c-3a56-4f0e-9d5c-6f1c2b7a8e90", &info),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_store_destroy(idle);
    ck_assert_status_eq(mc_store_create_copy_task(NULL, "k", tg, 1, &id), MC_INVALID_PARAMS);
}
END_TEST

/* The executor polls every 10 ms in these cases. */
static void setup_tasks(void)
{
    setenv("MC_TASK_POLL_INTERVAL_MS", "10", 1);
    setup_live();
}

static void teardown_tasks(void)
{
    teardown_live();
    unsetenv("MC_TASK_POLL_INTERVAL_MS");
}

/* Address of object @p key of the fake master. */
static uint64_t fm_addr_of(const char *key)
{
    fm_obj_t *o;
    uint64_t a;
    pthread_mutex_lock(&fm.mu);
    o = fm_find(mc_str_from_cstr(key));
    a = (o != NULL) ? o->addr : 0;
    pthread_mutex_unlock(&fm.mu);
    ck_assert_msg(a != 0, "object %s should exist", key);
    return a;
}

/* Reserve @p size bytes of the client's segment as complete object @p key
 * (fresh segment memory: zeros); returns the address. */
static uint64_t fm_reserve(const char *key, uint64_t size)
{
    mc_wire_replica_t r;
    int32_t st;
    pthread_mutex_lock(&fm.mu);
    st = fm_put_start(mc_str_from_cstr(key), size, &r);
    if (st == MC_OK)
        fm_find(mc_str_from_cstr(key))->complete = 1;
    pthread_mutex_unlock(&fm.mu);
    ck_assert_int_eq(st, MC_OK);
    return r.addr;
}

/* Hand out one task: copy @p size bytes from [src, +src_size) of segment
 * @p src_name (NULL: the client's own) to [dst, +dst_size) of the client's
 * segment; START answers NO_AVAILABLE_HANDLE @p nah times first. */
static void fm_arm_task(const char *src_name, uint64_t src, uint64_t src_size, uint64_t dst,
                        uint64_t dst_size, uint64_t size, uint32_t retry, int nah)
{
    pthread_mutex_lock(&fm.mu);
    snprintf(fm.task_src_name, sizeof(fm.task_src_name), "%s",
             (src_name != NULL) ? src_name : fm.seg_name);
    memset(&fm.task_src, 0, sizeof(fm.task_src));
    fm.task_src.status  = MC_REPLICA_COMPLETE;
    fm.task_src.addr    = src;
    fm.task_src.size    = src_size;
    fm.task_src.segment = mc_str_from_cstr(fm.task_src_name);
    memset(&fm.task_dst, 0, sizeof(fm.task_dst));
    fm.task_dst.status  = MC_REPLICA_PROCESSING;
    fm.task_dst.addr    = dst;
    fm.task_dst.size    = dst_size;
    fm.task_dst.segment = mc_str_from_cstr(fm.seg_name);
    fm.task_size        = size;
    fm.task_retry       = retry;
    fm.task_nah         = nah;
    fm.task_done        = 0;
    fm.task_msg[0]      = '\0';
    fm.task_armed       = 1;
    pthread_mutex_unlock(&fm.mu);
}

/* Wait (at most 10 s) for MARK_TASK_COMPLETE; the reported status. */
static int fm_wait_task(void)
{
    for (int i = 0; i < 10000; i++) {
        int done, st;
        pthread_mutex_lock(&fm.mu);
        done = fm.task_done;
        st   = fm.task_status;
        pthread_mutex_unlock(&fm.mu);
        if (done)
            return st;
        usleep(1000);
    }
    ck_abort_msg("the executor never reported the task");
    return -1;
}

START_TEST(test_task_executor_copies)
{
    static uint8_t v[10000], out[10000];
    char alias[64];
    const char *colon;
    uint64_t size, src, dst;
    int ends, starts;

    pattern(v, sizeof(v), 5);
    ck_assert_status_ok(mc_store_put(store, "task-src", v, sizeof(v), NULL));
    src = fm_addr_of("task-src");

    /* the source is in our segment: written straight out of it */
    dst  = fm_reserve("task-dst", sizeof(v));
    ends = fm_seen(MC_WIRE_OP_TASK_REPLICA_END);
    fm_arm_task(NULL, src, sizeof(v), dst, sizeof(v), sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_SUCCESS);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_TASK_REPLICA_END), ends + 1);
    ck_assert_status_ok(mc_store_get(store, "task-dst", out, sizeof(out), &size));
    ck_assert_msg((size == sizeof(v)) && (memcmp(out, v, sizeof(v)) == 0),
                  "the copy holds the object's bytes");

    /* a source named otherwise is read through the engine (over TCP here) */
    colon = strchr(mc_store_hostname(store), ':');
    ck_assert_msg(colon != NULL, "hostname is host:port");
    snprintf(alias, sizeof(alias), "localhost%s", colon);
    dst = fm_reserve("task-dst2", sizeof(v));
    fm_arm_task(alias, src, sizeof(v), dst, sizeof(v), sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_SUCCESS);
    ck_assert_status_ok(mc_store_get(store, "task-dst2", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, v, sizeof(v)) == 0, "the bounced copy holds the bytes");

    /* NO_AVAILABLE_HANDLE is retried within the budget... */
    dst    = fm_reserve("task-dst3", sizeof(v));
    starts = fm_seen(MC_WIRE_OP_TASK_REPLICA_START);
    fm_arm_task(NULL, src, sizeof(v), dst, sizeof(v), sizeof(v), 3, 2);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_SUCCESS);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_TASK_REPLICA_START), starts + 3);
    ck_assert_status_ok(mc_store_get(store, "task-dst3", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, v, sizeof(v)) == 0, "the retried copy holds the bytes");

    /* ...and fails the task once the budget is spent */
    starts = fm_seen(MC_WIRE_OP_TASK_REPLICA_START);
    fm_arm_task(NULL, src, sizeof(v), dst, sizeof(v), sizeof(v), 1, 5);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_FAILED);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_TASK_REPLICA_START), starts + 2);
    ck_assert_msg(strstr(fm.task_msg, "NO_AVAILABLE_HANDLE") != NULL,
                  "the message names the cause, got \"%s\"", fm.task_msg);
}
END_TEST

START_TEST(test_task_executor_hostile)
{
    static uint8_t v[4096], out[4096], zero[4096];
    uint64_t size, src, dst;
    int revokes, ends;

    pattern(v, sizeof(v), 9);
    ck_assert_status_ok(mc_store_put(store, "task-src", v, sizeof(v), NULL));
    src     = fm_addr_of("task-src");
    dst     = fm_reserve("task-dst", sizeof(v));
    ends    = fm_seen(MC_WIRE_OP_TASK_REPLICA_END);

    /* a source outside our memory: the engine refuses the read */
    revokes = fm_seen(MC_WIRE_OP_TASK_REPLICA_REVOKE);
    fm_arm_task(NULL, fm.seg_base + fm.seg_size + (1u << 20), sizeof(v), dst, sizeof(v),
                sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_FAILED);
    ck_assert_msg(strstr(fm.task_msg, "INVALID_READ") != NULL, "got \"%s\"", fm.task_msg);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_TASK_REPLICA_REVOKE), revokes + 1);

    /* a target smaller than the object */
    fm_arm_task(NULL, src, sizeof(v), dst, sizeof(v) - 1, sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_FAILED);
    ck_assert_msg(strstr(fm.task_msg, "INVALID_REPLICA") != NULL, "got \"%s\"", fm.task_msg);

    /* a target range that wraps around */
    fm_arm_task(NULL, src, sizeof(v), UINT64_MAX - 10, sizeof(v), sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_FAILED);

    /* a source smaller than the object */
    fm_arm_task(NULL, src, sizeof(v) - 1, dst, sizeof(v), sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_FAILED);

    ck_assert_int_eq(fm_seen(MC_WIRE_OP_TASK_REPLICA_REVOKE), revokes + 4);
    ck_assert_int_eq(fm_seen(MC_WIRE_OP_TASK_REPLICA_END), ends);
    ck_assert_status_ok(mc_store_get(store, "task-dst", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, zero, sizeof(zero)) == 0, "no byte moved");

    /* the executor survived all of it */
    fm_arm_task(NULL, src, sizeof(v), dst, sizeof(v), sizeof(v), 0, 0);
    ck_assert_int_eq(fm_wait_task(), MC_TASK_SUCCESS);
    ck_assert_status_ok(mc_store_get(store, "task-dst", out, sizeof(out), &size));
    ck_assert_msg(memcmp(out, v, sizeof(v)) == 0, "the copy holds the bytes");
}
END_TEST

Suite *mc_test_store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("offline");
    tcase_add_test(tc, test_config_defaults);
    tcase_add_test(tc, test_calls_before_setup);
    tcase_add_test(tc, test_setup_invalid_params);
    tcase_add_test(tc, test_setup_without_master);
    tcase_add_test(tc, test_setup_silent_master_times_out);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake_master");
    tcase_add_checked_fixture(tc, setup_live, teardown_live);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_put_get_roundtrip);
    tcase_add_test(tc, test_query_ranges);
    tcase_add_test(tc, test_put_parts_and_batch);
    tcase_add_test(tc, test_config_validation);
    tcase_add_test(tc, test_transfer_failure_revokes);
    tcase_add_test(tc, test_hostile_responses);
    tcase_add_test(tc, test_master_restart_is_transparent);
    tcase_add_test(tc, test_lease_and_fallback);
    tcase_add_test(tc, test_close_semantics);
    tcase_add_test(tc, test_staging_needed_without_local_buffer);
    tcase_add_test(tc, test_heartbeat_remount);
    tcase_add_test(tc, test_task_calls_validate);
    suite_add_tcase(s, tc);

    tc = tcase_create("task_executor");
    tcase_add_checked_fixture(tc, setup_tasks, teardown_tasks);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_task_executor_copies);
    tcase_add_test(tc, test_task_executor_hostile);
    suite_add_tcase(s, tc);
    return s;
}

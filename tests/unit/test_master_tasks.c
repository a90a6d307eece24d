/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master's copy/move task manager (docs/protocol.md §5.13), driven
 * over the real RPC against a real mooncake_master.
 *
 * The test plays every client itself with raw protocol calls: it mounts
 * segments (the master never touches segment memory, so their addresses
 * are just numbers here), writes objects with PUT_START/PUT_END, and acts
 * as the executor (FETCH_TASKS, TASK_REPLICA_START/END/REVOKE,
 * MARK_TASK_COMPLETE).  That reaches the master's rules directly: who may
 * execute, what a commit does to the replica list, the limits, the
 * timeouts, and what happens when an object or a segment goes away in
 * the middle.  The byte copying of a real client is tested end to end by
 * tests/python/test_tasks.py.
 */
#include "config.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <mooncake/config.h>
#include <mooncake/store.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store/master_client.h"

#define SEG_SIZE (1u << 20)

static mc_test_master_t master;

/* One raw client: a connection, an id and a segment named "host:port". */
typedef struct raw_client {
    mc_master_target_t target;
    mc_mconn_t *conn;
    mc_uuid_t id;
    mc_uuid_t seg_id;
    char name[32];
} raw_client_t;

static raw_client_t a, b, c;

static void raw_open(raw_client_t *rc, const char *tenant)
{
    memset(rc, 0, sizeof(*rc));
    mc_uuid_generate(&rc->id);
    ck_assert_status_ok(mc_master_target_init(&rc->target, master.addr, rc->id, tenant));
    ck_assert_status_ok(mc_mconn_open(&rc->target, &rc->conn));
}

static void raw_mount(raw_client_t *rc, const char *name, uint64_t base, uint64_t size)
{
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    memset(&req, 0, sizeof(req));
    mc_uuid_generate(&rc->seg_id);
    snprintf(rc->name, sizeof(rc->name), "%s", name);
    req.client_id        = rc->id;
    req.segment.id       = rc->seg_id;
    req.segment.name     = mc_str_from_cstr(rc->name);
    req.segment.base     = base;
    req.segment.size     = size;
    req.segment.protocol = mc_str_from_cstr("tcp");
    ck_assert_status_ok(mc_master_call_mount_segment(rc->conn, &req, &resp));
}

static void raw_close(raw_client_t *rc)
{
    mc_mconn_close(rc->conn);
    rc->conn = NULL;
}

static void start_with(const char *const *flags)
{
    /* tenants isolate only in multi-tenant mode (upstream C.9) */
    const char *all[16] = {"--enable_multi_tenants=true", mc_test_tenant_policy_flag()};
    size_t n = 2;

    for (size_t i = 0; (flags != NULL) && (flags[i] != NULL) && (n < 15); i++)
        all[n++] = flags[i];
    all[n] = NULL;
    mc_test_master_start(&master, all);
    raw_open(&a, "default");
    raw_open(&b, "default");
    raw_open(&c, "default");
    raw_mount(&a, "10.0.0.1:1", 0x100000000ull, SEG_SIZE);
    raw_mount(&b, "10.0.0.2:1", 0x200000000ull, SEG_SIZE);
    raw_mount(&c, "10.0.0.3:1", 0x300000000ull, SEG_SIZE);
}

/* Leases of 1 ms: reading a replica list must not block the removals. */
static void setup_default(void)
{
    static const char *const flags[] = {"--default_kv_lease_ttl=1", NULL};
    start_with(flags);
}

static void teardown(void)
{
    raw_close(&a);
    raw_close(&b);
    raw_close(&c);
    /* a clean exit: a sanitizer build also fails it on a leak */
    ck_assert_int_eq(mc_test_master_stop(&master), 0);
}

/* Write @p key of @p size bytes on @p rc's segment (preferred), complete. */
static void put_on(raw_client_t *rc, const char *key, uint64_t size)
{
    mc_wire_put_start_req_t req;
    mc_wire_put_start_resp_t resp;
    mc_wire_put_end_req_t ereq;
    mc_wire_put_end_resp_t eresp;

    memset(&req, 0, sizeof(req));
    req.client_id                = rc->id;
    req.key                      = mc_str_from_cstr(key);
    req.length                   = size;
    req.config.replica_num       = 1;
    req.config.preferred_segment = mc_str_from_cstr(rc->name);
    ck_assert_status_ok(mc_master_call_put_start(rc->conn, &req, &resp));
    ck_assert_uint_eq(resp.replicas.n, 1);
    ck_assert_msg(mc_str_eq(resp.replicas.v[0].segment, mc_str_from_cstr(rc->name)),
                  "the object should land on the preferred segment");
    memset(&ereq, 0, sizeof(ereq));
    ereq.client_id = rc->id;
    ereq.key       = mc_str_from_cstr(key);
    ck_assert_status_ok(mc_master_call_put_end(rc->conn, &ereq, &eresp));
}

/* The segment names holding COMPLETE replicas of @p key, joined by ','. */
static int32_t holders(raw_client_t *rc, const char *key, char *out, size_t cap)
{
    mc_wire_get_replica_list_req_t req;
    mc_wire_get_replica_list_resp_t resp;
    mc_status_t st;

    out[0]  = '\0';
    req.key = mc_str_from_cstr(key);
    st      = mc_master_call_get_replica_list(rc->conn, &req, &resp);
    if (st != MC_OK)
        return st;
    for (uint32_t i = 0; i < resp.replicas.n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%.*s", i ? "," : "", (int)resp.replicas.v[i].segment.len,
                 resp.replicas.v[i].segment.ptr);
    }
    return MC_OK;
}

static int32_t copy_task(raw_client_t *rc, const char *key, const char *const *targets, uint32_t n,
                         mc_uuid_t *id)
{
    mc_wire_create_copy_task_req_t req;
    mc_wire_create_copy_task_resp_t resp;
    mc_str_t t[4];
    mc_status_t st;

    for (uint32_t i = 0; i < n; i++)
        t[i] = mc_str_from_cstr(targets[i]);
    req.key       = mc_str_from_cstr(key);
    req.targets.n = n;
    req.targets.v = t;
    st            = mc_master_call_create_copy_task(rc->conn, &req, &resp);
    if (st == MC_OK)
        *id = resp.task_id;
    return st;
}

static int32_t move_task(raw_client_t *rc, const char *key, const char *src, const char *dst,
                         mc_uuid_t *id)
{
    mc_wire_create_move_task_req_t req;
    mc_wire_create_move_task_resp_t resp;
    mc_status_t st;

    req.key    = mc_str_from_cstr(key);
    req.source = mc_str_from_cstr(src);
    req.target = mc_str_from_cstr(dst);
    st         = mc_master_call_create_move_task(rc->conn, &req, &resp);
    if (st == MC_OK)
        *id = resp.task_id;
    return st;
}

static int32_t query(raw_client_t *rc, mc_uuid_t id, mc_wire_query_task_resp_t *resp)
{
    mc_wire_query_task_req_t req;
    req.task_id = id;
    return mc_master_call_query_task(rc->conn, &req, resp);
}

static uint32_t fetch(raw_client_t *rc, uint32_t batch, mc_wire_fetch_tasks_resp_t *resp)
{
    mc_wire_fetch_tasks_req_t req;
    req.client_id  = rc->id;
    req.batch_size = batch;
    ck_assert_status_ok(mc_master_call_fetch_tasks(rc->conn, &req, resp));
    return resp->tasks.n;
}

static int32_t rstart(raw_client_t *rc, mc_uuid_t id, mc_wire_task_replica_start_resp_t *resp)
{
    mc_wire_task_replica_start_req_t req;
    req.client_id = rc->id;
    req.task_id   = id;
    return mc_master_call_task_replica_start(rc->conn, &req, resp);
}

static int32_t rend(raw_client_t *rc, mc_uuid_t id)
{
    mc_wire_task_replica_end_req_t req;
    mc_wire_task_replica_end_resp_t resp;
    req.client_id = rc->id;
    req.task_id   = id;
    return mc_master_call_task_replica_end(rc->conn, &req, &resp);
}

static int32_t rrevoke(raw_client_t *rc, mc_uuid_t id)
{
    mc_wire_task_replica_revoke_req_t req;
    mc_wire_task_replica_revoke_resp_t resp;
    req.client_id = rc->id;
    req.task_id   = id;
    return mc_master_call_task_replica_revoke(rc->conn, &req, &resp);
}

static int32_t mark(raw_client_t *rc, mc_uuid_t id, uint8_t status, const char *msg)
{
    mc_wire_mark_task_complete_req_t req;
    mc_wire_mark_task_complete_resp_t resp;
    req.client_id = rc->id;
    req.task_id   = id;
    req.status    = status;
    req.message   = mc_str_from_cstr(msg);
    return mc_master_call_mark_task_complete(rc->conn, &req, &resp);
}

static int32_t remove_key(raw_client_t *rc, const char *key, int force)
{
    mc_wire_remove_req_t req;
    mc_wire_remove_resp_t resp;
    req.key   = mc_str_from_cstr(key);
    req.force = (uint8_t)force;
    return mc_master_call_remove(rc->conn, &req, &resp);
}

/* Remove @p key without force once the read leases (1 ms) are over. */
static void remove_unleased(raw_client_t *rc, const char *key)
{
    uint64_t deadline = mc_test_now_ms() + 2000;
    int32_t st;

    while ((st = remove_key(rc, key, 0)) == MC_OBJECT_HAS_LEASE) {
        ck_assert_msg(mc_test_now_ms() < deadline, "a 1 ms lease should end");
        poll(NULL, 0, 2);
    }
    ck_assert_status_ok(st);
}

/* Poll QUERY_TASK until @p id reaches @p want (bounded). */
static void wait_status(raw_client_t *rc, mc_uuid_t id, uint8_t want, uint64_t ms)
{
    mc_wire_query_task_resp_t q;
    uint64_t deadline = mc_test_now_ms() + ms;

    for (;;) {
        ck_assert_status_ok(query(rc, id, &q));
        if (q.status == want)
            return;
        ck_assert_msg(mc_test_now_ms() < deadline, "task should reach status %u, is %u", want,
                      q.status);
        poll(NULL, 0, 20);
    }
}

/* ---- the whole copy -------------------------------------------------------- */

START_TEST(test_copy_lifecycle)
{
    const char *targets[2] = {b.name, c.name};
    mc_wire_query_task_resp_t q;
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_task_replica_start_resp_t s;
    mc_uuid_t id;
    char who[128];

    put_on(&a, "k", 5000);
    ck_assert_status_ok(copy_task(&c, "k", targets, 2, &id));
    ck_assert_status_ok(query(&c, id, &q));
    ck_assert_uint_eq(q.status, MC_TASK_PENDING);
    ck_assert_uint_eq(q.type, MC_TASK_REPLICA_COPY);
    ck_assert_msg(mc_uuid_eq(q.assigned_client, a.id), "the source's owner executes a copy");
    ck_assert_msg(q.created_at_ms > 1600000000000ull, "timestamps are wall-clock ms");
    ck_assert_uint_eq(q.message.len, 0);

    /* only the assigned client gets it */
    ck_assert_uint_eq(fetch(&b, 8, &f), 0);
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_msg(mc_uuid_eq(f.tasks.v[0].id, id), "the fetched task is ours");
    ck_assert_msg(mc_str_eq(f.tasks.v[0].key, mc_str_from_cstr("k")), "the key is carried");
    ck_assert_msg(mc_str_eq(f.tasks.v[0].source, mc_str_from_cstr(a.name)), "and the source");
    ck_assert_uint_eq(f.tasks.v[0].targets.n, 2);
    ck_assert_uint_eq(f.tasks.v[0].max_retry_attempts, 10);
    ck_assert_uint_eq(fetch(&a, 8, &f), 0); /* handed out once */
    ck_assert_status_ok(query(&c, id, &q));
    ck_assert_uint_eq(q.status, MC_TASK_PROCESSING);
    ck_assert_msg(q.last_updated_at_ms >= q.created_at_ms, "updates come after creation");

    /* someone else cannot execute it */
    ck_assert_status_eq(rstart(&b, id, &s), MC_ILLEGAL_CLIENT);
    ck_assert_status_eq(mark(&a, id, MC_TASK_SUCCESS, ""), MC_INVALID_PARAMS);
    ck_assert_status_ok(rstart(&a, id, &s));
    ck_assert_uint_eq(s.size, 5000);
    ck_assert_uint_eq(s.source.n, 1);
    ck_assert_msg(mc_str_eq(s.source.v[0].segment, mc_str_from_cstr(a.name)), "read from a");
    ck_assert_uint_eq(s.targets.n, 2);
    for (uint32_t i = 0; i < 2; i++) {
        ck_assert_uint_eq(s.targets.v[i].size, 5000);
        ck_assert_uint_eq(s.targets.v[i].status, MC_REPLICA_PROCESSING);
    }
    ck_assert_msg(mc_str_eq(s.targets.v[0].segment, mc_str_from_cstr(b.name)) &&
                      mc_str_eq(s.targets.v[1].segment, mc_str_from_cstr(c.name)),
                  "one buffer on each target, in order");
    /* the object is pinned by the copy until END */
    ck_assert_status_eq(remove_key(&c, "k", 0), MC_OBJECT_HAS_REPLICATION_TASK);
    ck_assert_status_ok(holders(&c, "k", who, sizeof(who)));
    ck_assert_str_eq(who, a.name); /* staged buffers are not readable */

    ck_assert_status_ok(rend(&a, id));
    ck_assert_status_ok(rend(&a, id)); /* a retried END */
    ck_assert_status_eq(rrevoke(&a, id), MC_INVALID_PARAMS);
    ck_assert_status_ok(holders(&c, "k", who, sizeof(who)));
    ck_assert_str_eq(who, "10.0.0.1:1,10.0.0.2:1,10.0.0.3:1");
    ck_assert_status_eq(mark(&a, id, 7, "x"), MC_INVALID_PARAMS);
    ck_assert_status_ok(mark(&a, id, MC_TASK_SUCCESS, "copied"));
    ck_assert_status_ok(query(&c, id, &q));
    ck_assert_uint_eq(q.status, MC_TASK_SUCCESS);
    ck_assert_msg(mc_str_eq(q.message, mc_str_from_cstr("copied")), "the message is kept");
    ck_assert_status_eq(mark(&a, id, MC_TASK_FAILED, ""), MC_TASK_NOT_FOUND);
    ck_assert_status_eq(rstart(&a, id, &s), MC_TASK_NOT_FOUND);

    /* a copy to segments that already hold it has nothing to stage */
    ck_assert_status_ok(copy_task(&c, "k", targets, 2, &id));
    ck_assert_uint_eq(fetch(&a, 8, &f) + fetch(&b, 8, &f) + fetch(&c, 8, &f), 1);
    ck_assert_status_ok(query(&c, id, &q));
    raw_client_t *ex = mc_uuid_eq(q.assigned_client, a.id) ? &a : &b;
    ck_assert_status_ok(rstart(ex, id, &s));
    ck_assert_uint_eq(s.targets.n, 0);
    ck_assert_status_ok(rend(ex, id));
    ck_assert_status_ok(mark(ex, id, MC_TASK_SUCCESS, ""));
    /* once released it can be removed (after the 1 ms read leases) */
    remove_unleased(&c, "k");
}
END_TEST

START_TEST(test_move_lifecycle)
{
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_task_replica_start_resp_t s;
    mc_wire_query_task_resp_t q;
    mc_uuid_t id;
    char who[128];

    put_on(&a, "m", 3000);
    ck_assert_status_ok(move_task(&b, "m", a.name, c.name, &id));
    ck_assert_status_ok(query(&b, id, &q));
    ck_assert_uint_eq(q.type, MC_TASK_REPLICA_MOVE);
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_uint_eq(f.tasks.v[0].type, MC_TASK_REPLICA_MOVE);
    ck_assert_status_ok(rstart(&a, id, &s));
    ck_assert_uint_eq(s.targets.n, 1);
    ck_assert_msg(mc_str_eq(s.targets.v[0].segment, mc_str_from_cstr(c.name)), "onto c");
    ck_assert_status_ok(rend(&a, id));
    ck_assert_status_ok(holders(&b, "m", who, sizeof(who)));
    ck_assert_str_eq(who, c.name); /* the source replica is gone */
    ck_assert_status_ok(mark(&a, id, MC_TASK_SUCCESS, ""));

    /* revoke gives the staged buffers back and leaves the object as it was */
    ck_assert_status_ok(move_task(&b, "m", c.name, b.name, &id));
    ck_assert_uint_eq(fetch(&c, 8, &f), 1);
    ck_assert_status_ok(rstart(&c, id, &s));
    ck_assert_status_ok(rrevoke(&c, id));
    ck_assert_status_eq(rend(&c, id), MC_INVALID_PARAMS); /* nothing staged */
    ck_assert_status_ok(mark(&c, id, MC_TASK_FAILED, "transfer failed"));
    ck_assert_status_ok(holders(&b, "m", who, sizeof(who)));
    ck_assert_str_eq(who, c.name);
    ck_assert_status_ok(query(&b, id, &q));
    ck_assert_uint_eq(q.status, MC_TASK_FAILED);
    ck_assert_msg(mc_str_eq(q.message, mc_str_from_cstr("transfer failed")), "message kept");
}
END_TEST

START_TEST(test_submission_errors)
{
    const char *one[1]     = {b.name};
    const char *unknown[2] = {b.name, "10.9.9.9:1"};
    mc_wire_query_task_resp_t q;
    mc_uuid_t id, rnd;
    raw_client_t other;

    put_on(&a, "e", 100);
    /* upstream's codes in upstream's order: copy checks the targets' count,
     * the key, then each target (unknown: INVALID_PARAMS); move checks the
     * key, source == target, the target, the source's replica */
    ck_assert_status_eq(copy_task(&b, "nope", one, 1, &id), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(copy_task(&b, "nope", unknown, 2, &id), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(copy_task(&b, "nope", one, 0, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(copy_task(&b, "e", one, 0, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(copy_task(&b, "e", unknown, 2, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(move_task(&b, "nope", a.name, b.name, &id), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(move_task(&b, "nope", a.name, a.name, &id), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(move_task(&b, "nope", a.name, "10.9.9.9:1", &id), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(move_task(&b, "e", b.name, c.name, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(move_task(&b, "e", a.name, a.name, &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(move_task(&b, "e", a.name, "10.9.9.9:1", &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(move_task(&b, "e", a.name, "", &id), MC_INVALID_PARAMS);
    ck_assert_status_eq(move_task(&b, "e", "", b.name, &id), MC_INVALID_PARAMS);
    mc_uuid_generate(&rnd);
    ck_assert_status_eq(query(&b, rnd, &q), MC_TASK_NOT_FOUND);

    /* tasks belong to the tenant that created them, as keys do */
    ck_assert_status_ok(copy_task(&b, "e", one, 1, &id));
    raw_open(&other, "tenant-2");
    ck_assert_status_eq(query(&other, id, &q), MC_TASK_NOT_FOUND);
    ck_assert_status_eq(copy_task(&other, "e", one, 1, &id), MC_OBJECT_NOT_FOUND);
    raw_close(&other);
}
END_TEST

START_TEST(test_object_or_target_gone_mid_task)
{
    const char *tb[1] = {b.name};
    const char *tc[1] = {c.name};
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_task_replica_start_resp_t s;
    mc_wire_unmount_segment_req_t ureq;
    mc_wire_unmount_segment_resp_t uresp;
    mc_uuid_t id;
    char who[128];

    /* a forced remove under a staged copy: END reports it */
    put_on(&a, "g", 4000);
    ck_assert_status_ok(copy_task(&b, "g", tb, 1, &id));
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_status_ok(rstart(&a, id, &s));
    ck_assert_status_ok(remove_key(&b, "g", 1));
    ck_assert_status_eq(rend(&a, id), MC_OBJECT_NOT_FOUND);
    ck_assert_status_ok(mark(&a, id, MC_TASK_FAILED, "object removed"));
    /* a new object of the same key is not confused with the old one */
    put_on(&a, "g", 4000);
    ck_assert_status_ok(holders(&b, "g", who, sizeof(who)));
    ck_assert_str_eq(who, a.name);
    ck_assert_status_ok(remove_key(&b, "g", 1));

    /* the target segment unmounted under a staged copy */
    put_on(&a, "h", 4000);
    ck_assert_status_ok(copy_task(&b, "h", tc, 1, &id));
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_status_ok(rstart(&a, id, &s));
    ureq.client_id  = c.id;
    ureq.segment_id = c.seg_id;
    ck_assert_status_ok(mc_master_call_unmount_segment(c.conn, &ureq, &uresp));
    ck_assert_status_eq(rend(&a, id), MC_REPLICA_IS_GONE);
    ck_assert_status_ok(holders(&b, "h", who, sizeof(who)));
    ck_assert_str_eq(who, a.name);
    /* a retry from the start finds the target gone */
    ck_assert_status_eq(rstart(&a, id, &s), MC_SEGMENT_NOT_FOUND);
    ck_assert_status_ok(mark(&a, id, MC_TASK_FAILED, "target gone"));
}
END_TEST

START_TEST(test_no_room_on_target)
{
    const char *tb[1] = {b.name};
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_task_replica_start_resp_t s;
    mc_uuid_t id;

    put_on(&b, "fill", SEG_SIZE - 4096); /* b is nearly full */
    put_on(&a, "big", 64 * 1024);
    ck_assert_status_ok(copy_task(&c, "big", tb, 1, &id));
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_status_eq(rstart(&a, id, &s), MC_NO_AVAILABLE_HANDLE);
    /* room made: the retry succeeds */
    ck_assert_status_ok(remove_key(&c, "fill", 1));
    ck_assert_status_ok(rstart(&a, id, &s));
    ck_assert_uint_eq(s.targets.n, 1);
    ck_assert_status_ok(rend(&a, id));
    ck_assert_status_ok(mark(&a, id, MC_TASK_SUCCESS, ""));
}
END_TEST

START_TEST(test_client_gone_fails_its_tasks)
{
    const char *tb[1] = {b.name};
    mc_wire_client_close_req_t req;
    mc_wire_client_close_resp_t resp;
    mc_wire_query_task_resp_t q;
    mc_uuid_t id;

    put_on(&a, "x", 100);
    ck_assert_status_ok(copy_task(&b, "x", tb, 1, &id));
    req.client_id = a.id;
    ck_assert_status_ok(mc_master_call_client_close(a.conn, &req, &resp));
    ck_assert_status_ok(query(&b, id, &q));
    ck_assert_uint_eq(q.status, MC_TASK_FAILED);
    ck_assert_msg(q.message.len > 0, "a failed task says why");
}
END_TEST

/* ---- limits and timeouts ------------------------------------------------------ */

static void setup_limits(void)
{
    static const char *const flags[] = {"--max_total_pending_tasks=2",
                                        "--max_total_processing_tasks=1",
                                        "--max_total_finished_tasks=1",
                                        "--max_retry_attempts=3", NULL};
    start_with(flags);
}

START_TEST(test_limits)
{
    const char *tb[1] = {b.name};
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_query_task_resp_t q;
    mc_uuid_t id1, id2, id3;

    put_on(&a, "l", 100);
    ck_assert_status_ok(copy_task(&c, "l", tb, 1, &id1));
    ck_assert_status_ok(copy_task(&c, "l", tb, 1, &id2));
    ck_assert_status_eq(copy_task(&c, "l", tb, 1, &id3), MC_TASK_PENDING_LIMIT_EXCEEDED);
    /* one processing at a time */
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_uint_eq(f.tasks.v[0].max_retry_attempts, 3);
    ck_assert_msg(mc_uuid_eq(f.tasks.v[0].id, id1), "oldest first");
    ck_assert_uint_eq(fetch(&a, 8, &f), 0);
    ck_assert_status_ok(mark(&a, id1, MC_TASK_FAILED, "one"));
    ck_assert_uint_eq(fetch(&a, 8, &f), 1);
    ck_assert_status_ok(mark(&a, id2, MC_TASK_FAILED, "two"));
    /* only the newest finished task is remembered */
    ck_assert_status_eq(query(&c, id1, &q), MC_TASK_NOT_FOUND);
    ck_assert_status_ok(query(&c, id2, &q));
    /* the pending queue has room again */
    ck_assert_status_ok(copy_task(&c, "l", tb, 1, &id3));
}
END_TEST

static void setup_timeouts(void)
{
    static const char *const flags[] = {"--pending_task_timeout_sec=1",
                                        "--processing_task_timeout_sec=1",
                                        "--put_start_discard_timeout_sec=0",
                                        "--put_start_release_timeout_sec=1", NULL};
    start_with(flags);
}

START_TEST(test_timeouts)
{
    const char *tb[1] = {b.name};
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_task_replica_start_resp_t s;
    mc_wire_query_task_resp_t q;
    mc_uuid_t pend, proc;

    put_on(&a, "t", 100);
    ck_assert_status_ok(copy_task(&c, "t", tb, 1, &proc));
    ck_assert_status_ok(copy_task(&c, "t", tb, 1, &pend));
    /* batch_size bounds a fetch: the older one is processing, the other pending */
    ck_assert_uint_eq(fetch(&a, 1, &f), 1);
    ck_assert_msg(mc_uuid_eq(f.tasks.v[0].id, proc), "oldest first");
    ck_assert_status_ok(rstart(&a, proc, &s));
    wait_status(&c, proc, MC_TASK_FAILED, 5000);
    wait_status(&c, pend, MC_TASK_FAILED, 5000);
    ck_assert_status_ok(query(&c, proc, &q));
    ck_assert_msg(q.message.len > 0, "a timed-out task says why");
    /* the executor can no longer act on it, and the object is free again */
    ck_assert_status_eq(rend(&a, proc), MC_TASK_NOT_FOUND);
    remove_unleased(&c, "t");
}
END_TEST

/* --enable_snapshot: tasks survive a restart (docs/ha.md).  A finished
 * task keeps its status and message, a pending one stays pending, and one
 * that was processing comes back FAILED: its executor's new buffers were
 * not kept, so it cannot commit. */
static char durable_dir[] = "/tmp/mc-tasks-durable-XXXXXX";
static char durable_flag[128];

static void setup_durable(void)
{
    static const char *flags[] = {"--default_kv_lease_ttl=1", "--enable_snapshot",
                                  "--enable_snapshot_restore", durable_flag, NULL};
    strcpy(durable_dir, "/tmp/mc-tasks-durable-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(durable_dir));
    snprintf(durable_flag, sizeof(durable_flag), "--snapshot_backup_dir=%s", durable_dir);
    start_with(flags);
}

static void teardown_durable(void)
{
    DIR *dp;
    struct dirent *de;
    char path[512];

    teardown();
    dp = opendir(durable_dir);
    while ((dp != NULL) && ((de = readdir(dp)) != NULL)) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", durable_dir, de->d_name);
        unlink(path);
    }
    if (dp != NULL)
        closedir(dp);
    rmdir(durable_dir);
}

START_TEST(test_tasks_survive_restart)
{
    static const char *flags[] = {"--default_kv_lease_ttl=1", "--enable_snapshot",
                                  "--enable_snapshot_restore", durable_flag, NULL};
    const char *tb[1] = {b.name};
    mc_wire_query_task_resp_t q;
    mc_wire_fetch_tasks_resp_t f;
    mc_wire_task_replica_start_resp_t st;
    mc_uuid_t done, proc, pend;

    put_on(&a, "k", 4000);
    ck_assert_status_ok(copy_task(&c, "k", tb, 1, &done));
    ck_assert_uint_eq(fetch(&a, 1, &f), 1);
    ck_assert_status_ok(mark(&a, done, MC_TASK_FAILED, "boom"));
    ck_assert_status_ok(copy_task(&c, "k", tb, 1, &proc));
    ck_assert_uint_eq(fetch(&a, 1, &f), 1);
    ck_assert_status_ok(rstart(&a, proc, &st));
    ck_assert_status_ok(copy_task(&c, "k", tb, 1, &pend));

    /* a crash: the answers above were only sent once logged */
    kill(master.pid, SIGKILL);
    mc_test_master_stop(&master);
    raw_close(&a);
    raw_close(&b);
    raw_close(&c);
    start_with(flags);

    ck_assert_status_ok(query(&c, done, &q));
    ck_assert_uint_eq(q.status, MC_TASK_FAILED);
    ck_assert_msg(mc_str_eq(q.message, mc_str_from_cstr("boom")), "the message is kept");
    ck_assert_uint_eq(q.type, MC_TASK_REPLICA_COPY);
    ck_assert_status_ok(query(&c, proc, &q));
    ck_assert_uint_eq(q.status, MC_TASK_FAILED);
    ck_assert_msg(q.message.len > 0, "a task cut short by the restart says so");
    ck_assert_status_ok(query(&c, pend, &q));
    ck_assert_uint_eq(q.status, MC_TASK_PENDING);
    ck_assert_msg(q.created_at_ms > 1600000000000ull, "its creation time is kept");
}
END_TEST

Suite *mc_test_master_tasks_suite(void)
{
    Suite *s  = suite_create("master_tasks");
    TCase *tc = tcase_create("tasks");
    TCase *tl = tcase_create("limits");

    tcase_add_checked_fixture(tc, setup_default, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_copy_lifecycle);
    tcase_add_test(tc, test_move_lifecycle);
    tcase_add_test(tc, test_submission_errors);
    tcase_add_test(tc, test_object_or_target_gone_mid_task);
    tcase_add_test(tc, test_no_room_on_target);
    tcase_add_test(tc, test_client_gone_fails_its_tasks);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(tl, setup_limits, teardown);
    tcase_set_timeout(tl, 60);
    tcase_add_test(tl, test_limits);
    suite_add_tcase(s, tl);

    tl = tcase_create("timeouts");
    tcase_add_checked_fixture(tl, setup_timeouts, teardown);
    tcase_set_timeout(tl, 60);
    tcase_add_test(tl, test_timeouts);
    suite_add_tcase(s, tl);

    tl = tcase_create("durable");
    tcase_add_checked_fixture(tl, setup_durable, teardown_durable);
    tcase_set_timeout(tl, 60);
    tcase_add_test(tl, test_tasks_survive_restart);
    suite_add_tcase(s, tl);
    return s;
}

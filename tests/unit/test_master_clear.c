/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BATCH_REPLICA_CLEAR (docs/protocol.md §5.14) against a real
 * mooncake_master, over raw protocol calls.
 *
 * As in test_master_tasks.c the test plays every client: it mounts
 * segments (their addresses are only numbers to the master) and writes
 * objects with PUT_START/PUT_END, so each rule of the clear is reached
 * directly: whose objects, leases, unfinished writes, upserts and tasks in
 * progress, the segment-specific form, tenants, and that cleared space can
 * be allocated again.  tests/python/test_replica_clear.py runs the same
 * call end to end from Python clients that move real bytes.
 */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <mooncake/config.h>
#include <mooncake/store.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store/master_client.h"

#define SEG_SIZE  (1u << 20)
#define BIG       (600u << 10) /* two of these never fit one segment */
#define LEASE_MS  2000

static mc_test_master_t master;

typedef struct raw_client {
    mc_master_target_t target;
    mc_mconn_t *conn;
    mc_uuid_t id;
    char name[32];
} raw_client_t;

static raw_client_t a, b;

static void raw_open_as(raw_client_t *rc, mc_uuid_t id, const char *tenant)
{
    memset(rc, 0, sizeof(*rc));
    rc->id = id;
    ck_assert_status_ok(mc_master_target_init(&rc->target, master.addr, rc->id, tenant));
    ck_assert_status_ok(mc_mconn_open(&rc->target, &rc->conn));
}

static void raw_mount(raw_client_t *rc, const char *name, uint64_t base)
{
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    memset(&req, 0, sizeof(req));
    snprintf(rc->name, sizeof(rc->name), "%s", name);
    mc_uuid_generate(&req.segment.id);
    req.client_id        = rc->id;
    req.segment.name     = mc_str_from_cstr(rc->name);
    req.segment.base     = base;
    req.segment.size     = SEG_SIZE;
    req.segment.protocol = mc_str_from_cstr("tcp");
    ck_assert_status_ok(mc_master_call_mount_segment(rc->conn, &req, &resp));
}

static void setup(void)
{
    /* tenants isolate only in multi-tenant mode (upstream C.9) */
    const char *const flags[] = {"--default_kv_lease_ttl=2000", "--enable_multi_tenants=true",
                                 mc_test_tenant_policy_flag(), NULL};
    mc_uuid_t id;

    mc_test_master_start(&master, flags);
    mc_uuid_generate(&id);
    raw_open_as(&a, id, "default");
    mc_uuid_generate(&id);
    raw_open_as(&b, id, "default");
    raw_mount(&a, "10.0.0.1:1", 0x100000000ull);
    raw_mount(&b, "10.0.0.2:1", 0x200000000ull);
}

static void teardown(void)
{
    mc_mconn_close(a.conn);
    mc_mconn_close(b.conn);
    /* a clean exit: a sanitizer build also fails it on a leak */
    ck_assert_int_eq(mc_test_master_stop(&master), 0);
}

/* PUT_START of @p key by @p rc: @p nrep replicas, @p rc's segment first. */
static void put_start(raw_client_t *rc, const char *key, uint64_t size, uint32_t nrep,
                      uint8_t hard_pin, const char *group)
{
    mc_wire_put_start_req_t req;
    mc_wire_put_start_resp_t resp;
    mc_str_t g;

    memset(&req, 0, sizeof(req));
    req.client_id                = rc->id;
    req.key                      = mc_str_from_cstr(key);
    req.length                   = size;
    req.config.replica_num       = nrep;
    req.config.with_hard_pin     = hard_pin;
    req.config.preferred_segment = mc_str_from_cstr(rc->name);
    if (group != NULL) {
        g                         = mc_str_from_cstr(group);
        req.config.has_group_ids  = 1;
        req.config.group_ids.n    = 1;
        req.config.group_ids.v    = &g;
    }
    ck_assert_status_ok(mc_master_call_put_start(rc->conn, &req, &resp));
    ck_assert_msg(resp.replicas.n == nrep, "%s should get %u replicas, got %u", key, nrep,
                  resp.replicas.n);
    ck_assert_msg(mc_str_eq(resp.replicas.v[0].segment, mc_str_from_cstr(rc->name)),
                  "%s should land on the preferred segment first", key);
}

static void put_end(raw_client_t *rc, const char *key)
{
    mc_wire_put_end_req_t req;
    mc_wire_put_end_resp_t resp;

    req.client_id = rc->id;
    req.key       = mc_str_from_cstr(key);
    ck_assert_status_ok(mc_master_call_put_end(rc->conn, &req, &resp));
}

static void put(raw_client_t *rc, const char *key, uint64_t size, uint32_t nrep)
{
    put_start(rc, key, size, nrep, 0, NULL);
    put_end(rc, key);
}

/*
 * BATCH_REPLICA_CLEAR of @p keys as @p rc on @p seg; the per-key statuses
 * go to @p sts.  Returns the whole-request status.
 */
static int32_t clear(raw_client_t *rc, const char *const *keys, uint32_t n, const char *seg,
                     int32_t *sts)
{
    mc_wire_batch_replica_clear_req_t req;
    mc_wire_batch_replica_clear_resp_t resp;
    mc_str_t k[8];
    int32_t st;

    ck_assert_uint_le(n, 8);
    for (uint32_t i = 0; i < n; i++)
        k[i] = mc_str_from_cstr(keys[i]);
    req.client_id    = rc->id;
    req.keys.n       = n;
    req.keys.v       = k;
    req.segment_name = mc_str_from_cstr(seg);
    st               = mc_master_call_batch_replica_clear(rc->conn, &req, &resp);
    if (st != MC_OK)
        return st;
    ck_assert_msg(resp.statuses.n == n, "one status per key: %u for %u", resp.statuses.n, n);
    for (uint32_t i = 0; i < n; i++)
        sts[i] = resp.statuses.v[i];
    return MC_OK;
}

/* The status of clearing the single @p key as @p rc on @p seg. */
static int32_t clear1(raw_client_t *rc, const char *key, const char *seg)
{
    int32_t st = 1;
    ck_assert_status_ok(clear(rc, &key, 1, seg, &st));
    return st;
}

/* The segments holding COMPLETE replicas of @p key, joined by ','
 * (grants a read lease, so only for objects the test is done clearing). */
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

/* 1 when @p key exists for @p rc's tenant.  A read would grant a lease;
 * a clear in the name of a client that owns nothing (the nil id) touches
 * nothing and tells "not found" from "another client's". */
static int exists(raw_client_t *rc, const char *key)
{
    raw_client_t nobody = *rc;
    int32_t st;

    memset(&nobody.id, 0, sizeof(nobody.id));
    st = clear1(&nobody, key, "");
    ck_assert_msg(st == MC_ILLEGAL_CLIENT || st == MC_OBJECT_NOT_FOUND,
                  "a clear by nobody should find %s or not, got %d", key, st);
    return st == MC_ILLEGAL_CLIENT;
}

/* Clear @p key as @p rc once the read lease is over; fails past 3 leases. */
static void clear_when_unleased(raw_client_t *rc, const char *key, const char *seg)
{
    uint64_t deadline = mc_test_now_ms() + 3 * LEASE_MS;
    int32_t st;

    while ((st = clear1(rc, key, seg)) == MC_OBJECT_HAS_LEASE) {
        ck_assert_msg(mc_test_now_ms() < deadline, "the lease on %s should end", key);
        poll(NULL, 0, 20);
    }
    ck_assert_msg(st == MC_OK, "%s should be cleared once unleased, got %d (%s)", key, st,
                  mc_status_name(st));
}

/* ---- the whole-object form -------------------------------------------------- */

START_TEST(test_clear_own_objects)
{
    const char *keys[] = {"a-1", "missing", "b-1", "a-2", "a-1"};
    int32_t sts[5];
    char where[128];

    put(&a, "a-1", BIG, 1);
    put(&a, "a-2", 4096, 1);
    put(&b, "b-1", 4096, 1);
    ck_assert_status_ok(clear(&a, keys, 5, "", sts));
    ck_assert_msg(sts[0] == MC_OK, "the caller's own key should be cleared, got %d", sts[0]);
    ck_assert_msg(sts[1] == MC_OBJECT_NOT_FOUND, "a missing key should be skipped, got %d",
                  sts[1]);
    ck_assert_msg(sts[2] == MC_ILLEGAL_CLIENT, "another client's key should be skipped, got %d",
                  sts[2]);
    ck_assert_msg(sts[3] == MC_OK, "the caller's second key should be cleared, got %d", sts[3]);
    ck_assert_msg(sts[4] == MC_OBJECT_NOT_FOUND, "a repeated key should find the object gone");
    ck_assert_status_eq(holders(&a, "a-1", where, sizeof(where)), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(holders(&a, "a-2", where, sizeof(where)), MC_OBJECT_NOT_FOUND);
    ck_assert_status_ok(holders(&b, "b-1", where, sizeof(where)));
    ck_assert_str_eq(where, b.name);

    /* a-1's range is free again: a second BIG object fits a's segment */
    put(&a, "a-3", BIG, 1);

    /* nothing to clear is no error */
    ck_assert_status_ok(clear(&a, NULL, 0, "", sts));
}
END_TEST

/* A hard pin keeps an object from eviction, not from its owner's clear
 * (nor from REMOVE): upstream's BatchReplicaClear ignores pins too. */
START_TEST(test_clear_ignores_pins)
{
    put_start(&a, "pinned", 4096, 1, 1, NULL);
    put_end(&a, "pinned");
    ck_assert_int_eq(clear1(&a, "pinned", ""), MC_OK);
    ck_assert_msg(!exists(&a, "pinned"), "the hard-pinned object should be gone");
}
END_TEST

/* ---- what is skipped ----------------------------------------------------------- */

START_TEST(test_clear_skips_leased)
{
    char where[128];

    put(&a, "leased", 4096, 1);
    ck_assert_status_ok(holders(&b, "leased", where, sizeof(where))); /* a read: a lease */
    ck_assert_int_eq(clear1(&a, "leased", ""), MC_OBJECT_HAS_LEASE);
    ck_assert_int_eq(clear1(&a, "leased", a.name), MC_OBJECT_HAS_LEASE);
    ck_assert_msg(exists(&a, "leased"), "a leased object should stay");
    clear_when_unleased(&a, "leased", "");
    ck_assert_msg(!exists(&a, "leased"), "the object should be gone once cleared");

    /* a read of one member of a group leases the whole group */
    put_start(&a, "g-1", 4096, 1, 0, "grp");
    put_end(&a, "g-1");
    put_start(&a, "g-2", 4096, 1, 0, "grp");
    put_end(&a, "g-2");
    ck_assert_status_ok(holders(&a, "g-1", where, sizeof(where)));
    ck_assert_int_eq(clear1(&a, "g-2", ""), MC_OBJECT_HAS_LEASE);
    clear_when_unleased(&a, "g-2", "");
    ck_assert_int_eq(clear1(&a, "g-1", ""), MC_OK);
}
END_TEST

START_TEST(test_clear_skips_unfinished_writes)
{
    mc_wire_upsert_start_req_t ureq;
    mc_wire_upsert_start_resp_t uresp;
    mc_wire_upsert_revoke_req_t rreq;
    mc_wire_upsert_revoke_resp_t rresp;
    mc_wire_upsert_end_req_t ereq;
    mc_wire_upsert_end_resp_t eresp;

    /* a put between PUT_START and PUT_END */
    put_start(&a, "half", 4096, 1, 0, NULL);
    ck_assert_int_eq(clear1(&a, "half", ""), MC_REPLICA_IS_NOT_READY);
    ck_assert_int_eq(clear1(&a, "half", a.name), MC_REPLICA_IS_NOT_READY);
    put_end(&a, "half");
    ck_assert_int_eq(clear1(&a, "half", ""), MC_OK);

    /* an upsert into fresh buffers (another size) while the old value
     * stays readable: its writer is still using the new buffers */
    put(&a, "up", 4096, 1);
    memset(&ureq, 0, sizeof(ureq));
    ureq.client_id          = a.id;
    ureq.key                = mc_str_from_cstr("up");
    ureq.length             = 8192;
    ureq.config.replica_num = 1;
    ck_assert_status_ok(mc_master_call_upsert_start(a.conn, &ureq, &uresp));
    ck_assert_int_eq(clear1(&a, "up", ""), MC_REPLICA_IS_NOT_READY);
    ck_assert_int_eq(clear1(&a, "up", a.name), MC_REPLICA_IS_NOT_READY);
    rreq.client_id = a.id;
    rreq.key       = mc_str_from_cstr("up");
    ck_assert_status_ok(mc_master_call_upsert_revoke(a.conn, &rreq, &rresp));
    ck_assert_int_eq(clear1(&a, "up", ""), MC_OK);

    /* an upsert by another client makes it the owner */
    put(&a, "taken", 4096, 1);
    ureq.client_id = b.id;
    ureq.key       = mc_str_from_cstr("taken");
    ureq.length    = 4096;
    ck_assert_status_ok(mc_master_call_upsert_start(b.conn, &ureq, &uresp));
    ereq.client_id = b.id;
    ereq.key       = mc_str_from_cstr("taken");
    ck_assert_status_ok(mc_master_call_upsert_end(b.conn, &ereq, &eresp));
    ck_assert_int_eq(clear1(&a, "taken", ""), MC_ILLEGAL_CLIENT);
    ck_assert_int_eq(clear1(&b, "taken", ""), MC_OK);
}
END_TEST

START_TEST(test_clear_skips_replicating)
{
    mc_wire_create_copy_task_req_t creq;
    mc_wire_create_copy_task_resp_t cresp;
    mc_wire_fetch_tasks_req_t freq;
    mc_wire_fetch_tasks_resp_t fresp;
    mc_wire_task_replica_start_req_t sreq;
    mc_wire_task_replica_start_resp_t sresp;
    mc_wire_task_replica_revoke_req_t rreq;
    mc_wire_task_replica_revoke_resp_t rresp;
    mc_str_t target = mc_str_from_cstr(b.name);
    mc_uuid_t id;

    put(&a, "copied", 4096, 1);
    creq.key       = mc_str_from_cstr("copied");
    creq.targets.n = 1;
    creq.targets.v = &target;
    ck_assert_status_ok(mc_master_call_create_copy_task(a.conn, &creq, &cresp));
    id              = cresp.task_id;
    freq.client_id  = a.id;
    freq.batch_size = 8;
    ck_assert_status_ok(mc_master_call_fetch_tasks(a.conn, &freq, &fresp));
    ck_assert_uint_eq(fresp.tasks.n, 1);
    sreq.client_id = a.id;
    sreq.task_id   = id;
    ck_assert_status_ok(mc_master_call_task_replica_start(a.conn, &sreq, &sresp));
    /* the executor reads the source replica and writes the new buffer */
    ck_assert_int_eq(clear1(&a, "copied", ""), MC_OBJECT_HAS_REPLICATION_TASK);
    ck_assert_int_eq(clear1(&a, "copied", a.name), MC_OBJECT_HAS_REPLICATION_TASK);
    rreq.client_id = a.id;
    rreq.task_id   = id;
    ck_assert_status_ok(mc_master_call_task_replica_revoke(a.conn, &rreq, &rresp));
    ck_assert_int_eq(clear1(&a, "copied", ""), MC_OK);
}
END_TEST

/* ---- the segment form ---------------------------------------------------------- */

START_TEST(test_clear_one_segment)
{
    char where[128];

    /* two replicas: a's segment first, then b's */
    put(&a, "two", BIG, 2);
    ck_assert_int_eq(clear1(&b, "two", b.name), MC_ILLEGAL_CLIENT);
    ck_assert_int_eq(clear1(&a, "two", "10.9.9.9:1"), MC_REPLICA_NOT_FOUND);
    ck_assert_int_eq(clear1(&a, "two", b.name), MC_OK);
    ck_assert_int_eq(clear1(&a, "two", b.name), MC_REPLICA_NOT_FOUND);
    ck_assert_msg(exists(&a, "two"), "the object should keep its other replica");

    /* b's range is free again: a BIG object of b's own fits there */
    put(&b, "b-big", BIG, 1);

    /* the last replica takes the object with it */
    ck_assert_int_eq(clear1(&a, "two", a.name), MC_OK);
    ck_assert_status_eq(holders(&a, "two", where, sizeof(where)), MC_OBJECT_NOT_FOUND);
    put(&a, "a-big", BIG, 1);
    ck_assert_status_ok(holders(&a, "a-big", where, sizeof(where)));
    ck_assert_str_eq(where, a.name);
}
END_TEST

/* ---- tenants --------------------------------------------------------------------- */

START_TEST(test_clear_is_per_tenant)
{
    raw_client_t other;
    char where[128];

    /* the same client id speaking for another tenant */
    raw_open_as(&other, a.id, "other");
    snprintf(other.name, sizeof(other.name), "%s", a.name);
    put(&a, "shared", 4096, 1);
    put(&other, "shared", 4096, 1);
    put(&a, "only-default", 4096, 1);
    ck_assert_int_eq(clear1(&other, "only-default", ""), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(clear1(&other, "shared", ""), MC_OK);
    ck_assert_status_ok(holders(&a, "shared", where, sizeof(where)));
    ck_assert_status_eq(holders(&other, "shared", where, sizeof(where)), MC_OBJECT_NOT_FOUND);
    mc_mconn_close(other.conn);
}
END_TEST

Suite *mc_test_master_clear_suite(void)
{
    Suite *s  = suite_create("master_clear");
    TCase *tc = tcase_create("batch_replica_clear");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_clear_own_objects);
    tcase_add_test(tc, test_clear_ignores_pins);
    tcase_add_test(tc, test_clear_skips_leased);
    tcase_add_test(tc, test_clear_skips_unfinished_writes);
    tcase_add_test(tc, test_clear_skips_replicating);
    tcase_add_test(tc, test_clear_one_segment);
    tcase_add_test(tc, test_clear_is_per_tenant);
    suite_add_tcase(s, tc);
    return s;
}

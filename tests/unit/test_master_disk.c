/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master's side of the disk tier (docs/tiers.md, docs/protocol.md
 * §5.15) against a real mooncake_master, over raw protocol calls.
 *
 * The test plays the clients: holder A mounts the only segment, writes
 * objects with PUT_START/PUT_END and reports disk copies with
 * OFFLOAD_REPORT; B is another client with no segment.  Each rule is
 * reached directly: who may report, what a get returns, eviction that
 * keeps an object readable from disk, DISK_REPLICA_DROP, an upsert, and
 * the holder's departure.
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

#define SEG_SIZE (1u << 20)
#define BIG      (600u << 10) /* two of these never fit the segment */
#define PATH     "/var/tmp/ssd/7.bucket"

static mc_test_master_t master;

typedef struct raw_client {
    mc_master_target_t target;
    mc_mconn_t *conn;
    mc_uuid_t id;
} raw_client_t;

static raw_client_t a, b;

static void raw_open(raw_client_t *rc)
{
    memset(rc, 0, sizeof(*rc));
    mc_uuid_generate(&rc->id);
    ck_assert_status_ok(mc_master_target_init(&rc->target, master.addr, rc->id, "default"));
    ck_assert_status_ok(mc_mconn_open(&rc->target, &rc->conn));
}

/* A master with --enable_offload and @p offload (and @p more unless NULL). */
static void start_with(const char *offload, const char *more)
{
    const char *const flags[] = {"--default_kv_lease_ttl=100", "--enable_offload=true", offload,
                                 more, NULL};
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    mc_test_master_start(&master, flags);
    raw_open(&a);
    raw_open(&b);
    memset(&req, 0, sizeof(req));
    mc_uuid_generate(&req.segment.id);
    req.client_id        = a.id;
    req.segment.name     = mc_str_from_cstr("10.0.0.1:1");
    req.segment.base     = 0x100000000ull;
    req.segment.size     = SEG_SIZE;
    req.segment.protocol = mc_str_from_cstr("tcp");
    ck_assert_status_ok(mc_master_call_mount_segment(a.conn, &req, &resp));
}

static void start(const char *offload) { start_with(offload, NULL); }

static void setup(void) { start("--offload_on_evict=false"); }

static void teardown(void)
{
    mc_mconn_close(a.conn);
    mc_mconn_close(b.conn);
    /* a clean exit: a sanitizer build also fails it on a leak */
    ck_assert_int_eq(mc_test_master_stop(&master), 0);
}

/* Ids of the memory replicas put() wrote, by key (the last put wins). */
static uint64_t last_rep;

/* PUT_START/PUT_END of @p key by A; returns its replica's id. */
static uint64_t put(const char *key, uint64_t size)
{
    mc_wire_put_start_req_t req;
    mc_wire_put_start_resp_t resp;
    mc_wire_put_end_req_t ereq;
    mc_wire_put_end_resp_t eresp;

    memset(&req, 0, sizeof(req));
    req.client_id          = a.id;
    req.key                = mc_str_from_cstr(key);
    req.length             = size;
    req.config.replica_num = 1;
    ck_assert_status_ok(mc_master_call_put_start(a.conn, &req, &resp));
    ck_assert_uint_eq(resp.replicas.n, 1);
    last_rep       = resp.replicas.v[0].id;
    ereq.client_id = a.id;
    ereq.key       = req.key;
    ck_assert_status_ok(mc_master_call_put_end(a.conn, &ereq, &eresp));
    return last_rep;
}

static int32_t report_from(raw_client_t *rc, const char *key, uint64_t src, const char *path,
                           uint64_t off, uint64_t len, uint32_t crc)
{
    mc_wire_offload_report_req_t req;
    mc_wire_offload_report_resp_t resp;

    req.client_id = rc->id;
    req.key       = mc_str_from_cstr(key);
    req.source_replica = src;
    req.file_path = mc_str_from_cstr(path);
    req.offset    = off;
    req.length    = len;
    req.crc       = crc;
    return mc_master_call_offload_report(rc->conn, &req, &resp);
}

/* Report a copy read from the replica of the last put(). */
static int32_t report(raw_client_t *rc, const char *key, const char *path, uint64_t off,
                      uint64_t len, uint32_t crc)
{
    return report_from(rc, key, last_rep, path, off, len, crc);
}

static int32_t drop_in(raw_client_t *rc, const char *key, const char *path)
{
    mc_wire_disk_replica_drop_req_t req;
    mc_wire_disk_replica_drop_resp_t resp;
    mc_str_t k = mc_str_from_cstr(key);
    int32_t st;

    req.client_id = rc->id;
    req.file_path = mc_str_from_cstr(path);
    req.keys.n    = 1;
    req.keys.v    = &k;
    st            = mc_master_call_disk_replica_drop(rc->conn, &req, &resp);
    if (st != MC_OK)
        return st;
    ck_assert_msg(resp.statuses.n == 1, "one status per key");
    return resp.statuses.v[0];
}

static int32_t drop(raw_client_t *rc, const char *key)
{
    return drop_in(rc, key, PATH);
}

/* GET_REPLICA_LIST of @p key; replica types into @p types ("0", "02", "2"). */
static int32_t get(const char *key, char *types, mc_wire_replica_t *disk)
{
    mc_wire_get_replica_list_req_t req;
    mc_wire_get_replica_list_resp_t resp;
    int32_t st;

    types[0] = '\0';
    req.key  = mc_str_from_cstr(key);
    st       = mc_master_call_get_replica_list(b.conn, &req, &resp);
    if (st != MC_OK)
        return st;
    for (uint32_t i = 0; i < resp.replicas.n && i < 7; i++) {
        types[i]     = (char)('0' + resp.replicas.v[i].type);
        types[i + 1] = '\0';
        if ((resp.replicas.v[i].type == 2) && (disk != NULL))
            *disk = resp.replicas.v[i];
    }
    return MC_OK;
}

START_TEST(test_report_rules)
{
    put("k", 4096);
    ck_assert_int_eq(report(&a, "nope", PATH, 0, 4096, 1), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(report(&a, "k", PATH, 0, 4095, 1), MC_INVALID_PARAMS);
    ck_assert_int_eq(report(&a, "k", "relative/7.bucket", 0, 4096, 1), MC_INVALID_PARAMS);
    ck_assert_int_eq(report(&a, "k", PATH, UINT64_MAX, 4096, 1), MC_INVALID_PARAMS);
    /* a copy of a replica the object does not have is refused */
    ck_assert_int_eq(report_from(&a, "k", last_rep + 1000, PATH, 0, 4096, 1),
                     MC_REPLICA_NOT_FOUND);
    /* readers reach a disk replica through its holder's segment: a client
     * without one cannot hold one */
    ck_assert_int_eq(report(&b, "k", PATH, 0, 4096, 1), MC_ILLEGAL_CLIENT);
    ck_assert_int_eq(report(&a, "k", PATH, 64, 4096, 0xabcdef01u), MC_OK);
}
END_TEST

START_TEST(test_get_lists_memory_then_disk)
{
    char types[8];
    mc_wire_replica_t d;

    put("k", 4096);
    ck_assert_int_eq(get("k", types, NULL), MC_OK);
    ck_assert_str_eq(types, "0");
    ck_assert_int_eq(report(&a, "k", PATH, 64, 4096, 0xabcdef01u), MC_OK);
    memset(&d, 0, sizeof(d));
    ck_assert_int_eq(get("k", types, &d), MC_OK);
    ck_assert_msg(strcmp(types, "02") == 0, "memory first, then disk: got %s", types);
    ck_assert_msg(mc_str_eq(d.file_path, mc_str_from_cstr(PATH)), "the disk replica names its file");
    ck_assert_uint_eq(d.addr, 64);
    ck_assert_uint_eq(d.size, 4096);
    ck_assert_uint_eq(d.crc, 0xabcdef01u);
    ck_assert_msg(mc_str_eq(d.segment, mc_str_from_cstr("10.0.0.1:1")),
                  "the disk replica names its holder's segment");
    ck_assert_msg(mc_uuid_eq(d.segment_id, a.id), "segment_id of a disk replica is its holder");
    /* a newer report replaces the old copy */
    ck_assert_int_eq(report(&a, "k", "/var/tmp/ssd/8.bucket", 0, 4096, 2), MC_OK);
    ck_assert_int_eq(get("k", types, &d), MC_OK);
    ck_assert_str_eq(types, "02");
    ck_assert_msg(mc_str_eq(d.file_path, mc_str_from_cstr("/var/tmp/ssd/8.bucket")),
                  "the newer report wins");
}
END_TEST

/* Memory pressure evicts the memory copy and keeps the object on disk; an
 * object without a disk copy is erased as before. */
START_TEST(test_eviction_keeps_disk_copy)
{
    char types[8];
    mc_wire_replica_t d;

    put("x1", BIG);
    ck_assert_int_eq(report(&a, "x1", PATH, 0, BIG, 7), MC_OK);
    put("x2", BIG); /* only fits by evicting x1's memory */
    memset(&d, 0, sizeof(d));
    ck_assert_int_eq(get("x1", types, &d), MC_OK);
    ck_assert_msg(strcmp(types, "2") == 0, "x1 should be disk-only, got '%s'", types);
    ck_assert_uint_eq(d.size, BIG);
    ck_assert_int_eq(get("x2", types, NULL), MC_OK);
    ck_assert_str_eq(types, "0");
    /* x2 has no disk copy: evicting it erases it */
    {
        uint64_t deadline = mc_test_now_ms() + 5000;
        mc_wire_put_start_req_t req;
        mc_wire_put_start_resp_t resp;
        mc_status_t st;
        memset(&req, 0, sizeof(req));
        req.client_id          = a.id;
        req.key                = mc_str_from_cstr("x3");
        req.length             = BIG;
        req.config.replica_num = 1;
        /* x2 is leased by the get above for 100 ms */
        while (((st = mc_master_call_put_start(a.conn, &req, &resp)) != MC_OK) &&
               (mc_test_now_ms() < deadline))
            (void)poll(NULL, 0, 10);
        ck_assert_status_ok(st);
    }
    ck_assert_int_eq(get("x2", types, NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "2");
}
END_TEST

START_TEST(test_drop_and_holder_departure)
{
    char types[8];
    mc_wire_client_close_req_t creq;
    mc_wire_client_close_resp_t cresp;

    put("x1", BIG);
    ck_assert_int_eq(report(&a, "x1", PATH, 0, BIG, 7), MC_OK);
    put("x2", BIG); /* x1 disk-only */
    ck_assert_int_eq(report(&a, "x2", PATH, BIG, BIG, 8), MC_OK);
    ck_assert_int_eq(drop(&b, "x2"), MC_REPLICA_NOT_FOUND);
    /* a drop of an older bucket leaves a newer copy alone */
    ck_assert_int_eq(drop_in(&a, "x2", "/var/tmp/ssd/6.bucket"), MC_REPLICA_NOT_FOUND);
    ck_assert_int_eq(drop(&a, "nope"), MC_OBJECT_NOT_FOUND);
    /* a dropped disk copy of an object still in memory: memory stays */
    ck_assert_int_eq(drop(&a, "x2"), MC_OK);
    ck_assert_int_eq(get("x2", types, NULL), MC_OK);
    ck_assert_str_eq(types, "0");
    ck_assert_int_eq(drop(&a, "x2"), MC_REPLICA_NOT_FOUND);
    /* the holder goes: its disk copies go with it */
    creq.client_id = a.id;
    ck_assert_status_ok(mc_master_call_client_close(a.conn, &creq, &cresp));
    ck_assert_int_eq(get("x1", types, NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(get("x2", types, NULL), MC_OBJECT_NOT_FOUND);
}
END_TEST

START_TEST(test_drop_of_disk_only_erases)
{
    char types[8];

    put("x1", BIG);
    ck_assert_int_eq(report(&a, "x1", PATH, 0, BIG, 7), MC_OK);
    put("x2", BIG);
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "2");
    ck_assert_int_eq(drop(&a, "x1"), MC_OK);
    ck_assert_int_eq(get("x1", types, NULL), MC_OBJECT_NOT_FOUND);
}
END_TEST

/* No stale disk copy after an upsert: a disk-only object is replaced. */
START_TEST(test_upsert_forgets_disk_copy)
{
    char types[8];
    mc_wire_upsert_start_req_t req;
    mc_wire_upsert_start_resp_t resp;
    mc_wire_upsert_end_req_t ereq;
    mc_wire_upsert_end_resp_t eresp;

    put("k", 4096);
    ck_assert_int_eq(report(&a, "k", PATH, 0, 4096, 1), MC_OK);
    memset(&req, 0, sizeof(req));
    req.client_id          = a.id;
    req.key                = mc_str_from_cstr("k");
    req.length             = 4096;
    req.config.replica_num = 1;
    ck_assert_status_ok(mc_master_call_upsert_start(a.conn, &req, &resp));
    ereq.client_id = a.id;
    ereq.key       = req.key;
    ck_assert_status_ok(mc_master_call_upsert_end(a.conn, &ereq, &eresp));
    ck_assert_int_eq(get("k", types, NULL), MC_OK);
    ck_assert_msg(strcmp(types, "0") == 0, "the upserted value has no disk copy, got %s", types);
    /* a copy of the old value that arrives late is refused: the in-place
     * upsert renewed the replica id */
    ck_assert_uint_eq(resp.replicas.n, 1);
    ck_assert_uint_ne(resp.replicas.v[0].id, last_rep);
    ck_assert_int_eq(report(&a, "k", PATH, 0, 4096, 1), MC_REPLICA_NOT_FOUND);
    ck_assert_int_eq(report_from(&a, "k", resp.replicas.v[0].id, PATH, 0, 4096, 1), MC_OK);
}
END_TEST

/* --promotion_on_hit: the threshold-th read of a disk-only object queues
 * a copy task for its holder whose source is the disk replica; its END
 * puts the object back in memory, listed before its kept disk copy. */
START_TEST(test_promotion_queues_a_task_for_the_holder)
{
    char types[8];
    mc_wire_fetch_tasks_req_t freq;
    mc_wire_fetch_tasks_resp_t fresp;
    mc_wire_task_replica_start_req_t sreq;
    mc_wire_task_replica_start_resp_t sresp;
    mc_wire_task_replica_end_req_t ereq;
    mc_wire_task_replica_end_resp_t eresp;
    mc_wire_remove_req_t rreq;
    mc_wire_remove_resp_t rresp;

    teardown();
    start_with("--promotion_on_hit", "--promotion_admission_threshold=2");
    put("x1", BIG);
    ck_assert_int_eq(report(&a, "x1", PATH, 64, BIG, 7), MC_OK);
    put("x2", BIG); /* evicts x1's memory */
    memset(&rreq, 0, sizeof(rreq));
    rreq.key = mc_str_from_cstr("x2");
    ck_assert_status_ok(mc_master_call_remove(a.conn, &rreq, &rresp)); /* room for x1 */
    memset(&freq, 0, sizeof(freq));
    freq.client_id  = a.id;
    freq.batch_size = 8;

    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "2");
    ck_assert_status_ok(mc_master_call_fetch_tasks(a.conn, &freq, &fresp));
    ck_assert_uint_eq(fresp.tasks.n, 0); /* one read: below the threshold */
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_status_ok(mc_master_call_fetch_tasks(a.conn, &freq, &fresp));
    ck_assert_uint_eq(fresp.tasks.n, 1);
    ck_assert_int_eq(fresp.tasks.v[0].type, MC_TASK_REPLICA_COPY);
    ck_assert(mc_str_eq(fresp.tasks.v[0].key, mc_str_from_cstr("x1")));

    memset(&sreq, 0, sizeof(sreq));
    sreq.client_id = a.id;
    sreq.task_id   = fresp.tasks.v[0].id;
    ck_assert_status_ok(mc_master_call_task_replica_start(a.conn, &sreq, &sresp));
    ck_assert_uint_eq(sresp.size, BIG);
    ck_assert_uint_eq(sresp.source.n, 1);
    ck_assert_int_eq(sresp.source.v[0].type, 2); /* the disk replica */
    ck_assert_uint_eq(sresp.source.v[0].addr, 64);
    ck_assert_uint_eq(sresp.source.v[0].crc, 7);
    ck_assert(mc_str_eq(sresp.source.v[0].file_path, mc_str_from_cstr(PATH)));
    ck_assert_uint_eq(sresp.targets.n, 1);
    ck_assert_int_eq(sresp.targets.v[0].type, 0);
    ck_assert(mc_str_eq(sresp.targets.v[0].segment, mc_str_from_cstr("10.0.0.1:1")));
    /* more reads while it is on its way queue nothing more */
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "2");

    memset(&ereq, 0, sizeof(ereq));
    ereq.client_id = a.id;
    ereq.task_id   = sreq.task_id;
    ck_assert_status_ok(mc_master_call_task_replica_end(a.conn, &ereq, &eresp));
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "02");
    ck_assert_status_ok(mc_master_call_fetch_tasks(a.conn, &freq, &fresp));
    ck_assert_uint_eq(fresp.tasks.n, 0);
}
END_TEST

/* Without --enable_offload the master takes no disk replica. */
START_TEST(test_report_needs_enable_offload)
{
    teardown();
    start("--enable_offload=false");
    put("k", 4096);
    ck_assert_int_eq(report(&a, "k", PATH, 0, 4096, 1), MC_NOT_SUPPORTED);
}
END_TEST

/* --offload_on_evict: nothing leaves memory before its disk copy exists;
 * a put waits (NO_AVAILABLE_HANDLE) until one does. */
START_TEST(test_offload_on_evict_waits_for_copy)
{
    char types[8];
    mc_wire_put_start_req_t req;
    mc_wire_put_start_resp_t resp;

    teardown();
    start("--offload_on_evict");
    put("x1", BIG);
    memset(&req, 0, sizeof(req));
    req.client_id          = a.id;
    req.key                = mc_str_from_cstr("x2");
    req.length             = BIG;
    req.config.replica_num = 1;
    ck_assert_int_eq(mc_master_call_put_start(a.conn, &req, &resp), MC_NO_AVAILABLE_HANDLE);
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "0");
    ck_assert_int_eq(report(&a, "x1", PATH, 0, BIG, 7), MC_OK);
    {
        /* x1 is leased by the get above for 100 ms */
        uint64_t deadline = mc_test_now_ms() + 5000;
        mc_status_t st;
        while (((st = mc_master_call_put_start(a.conn, &req, &resp)) != MC_OK) &&
               (mc_test_now_ms() < deadline))
            (void)poll(NULL, 0, 10);
        ck_assert_status_ok(st);
    }
    ck_assert_int_eq(get("x1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "2");
}
END_TEST

Suite *mc_test_master_disk_suite(void)
{
    Suite *s   = suite_create("master_disk");
    TCase *tc  = tcase_create("disk");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_report_rules);
    tcase_add_test(tc, test_get_lists_memory_then_disk);
    tcase_add_test(tc, test_eviction_keeps_disk_copy);
    tcase_add_test(tc, test_drop_and_holder_departure);
    tcase_add_test(tc, test_drop_of_disk_only_erases);
    tcase_add_test(tc, test_upsert_forgets_disk_copy);
    tcase_add_test(tc, test_report_needs_enable_offload);
    tcase_add_test(tc, test_offload_on_evict_waits_for_copy);
    tcase_add_test(tc, test_promotion_queues_a_task_for_the_holder);
    suite_add_tcase(s, tc);
    return s;
}

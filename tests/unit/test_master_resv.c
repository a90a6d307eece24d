/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PUT_RESERVE / PUT_COMMIT (docs/protocol.md §5.16) against a real
 * mooncake_master, over raw protocol calls: the test plays every client and
 * reaches each rule of a commit directly -- whose reservation, which
 * tenant, used up, an existing key, a draining segment, renewal, and the
 * three ways a reservation goes back (expiry, CLIENT_CLOSE, its segment).
 * tests/python/test_put_one_trip.py runs the same frames end to end from
 * clients that move real bytes.
 */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <mooncake/store.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store/master_client.h"

#define SEG_SIZE (1u << 20)
#define BIG      (600u << 10) /* two of these never fit one segment */

static mc_test_master_t master;

/* One raw client: its id, connection and (when it mounted one) segment. */
typedef struct peer {
    mc_master_target_t target;
    mc_mconn_t *conn;
    mc_uuid_t id;
    mc_uuid_t seg_id;
    char seg[32];
} peer_t;

static peer_t a, b;

/* Connect as @p id in @p tenant; mount a segment named @p seg unless NULL. */
static void peer_open(peer_t *p, mc_uuid_t id, const char *tenant, const char *seg,
                      uint64_t base)
{
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    memset(p, 0, sizeof(*p));
    p->id = id;
    ck_assert_status_ok(mc_master_target_init(&p->target, master.addr, id, tenant));
    ck_assert_status_ok(mc_mconn_open(&p->target, &p->conn));
    if (seg == NULL)
        return;
    snprintf(p->seg, sizeof(p->seg), "%s", seg);
    memset(&req, 0, sizeof(req));
    mc_uuid_generate(&p->seg_id);
    req.client_id        = id;
    req.segment.id       = p->seg_id;
    req.segment.name     = mc_str_from_cstr(p->seg);
    req.segment.base     = base;
    req.segment.size     = SEG_SIZE;
    req.segment.protocol = mc_str_from_cstr("tcp");
    ck_assert_status_ok(mc_master_call_mount_segment(p->conn, &req, &resp));
}

static void start(const char *ttl_flag)
{
    /* tenants isolate only in multi-tenant mode (upstream C.9) */
    const char *const flags[] = {ttl_flag, "--enable_multi_tenants=true",
                                 mc_test_tenant_policy_flag(), NULL};
    mc_uuid_t id;

    mc_test_master_start(&master, flags);
    mc_uuid_generate(&id);
    peer_open(&a, id, "default", "10.0.0.1:1", 0x100000000ull);
    mc_uuid_generate(&id);
    peer_open(&b, id, "default", "10.0.0.2:1", 0x200000000ull);
}

static void setup(void) { start("--put_reservation_ttl_sec=10"); }
static void setup_short(void) { start("--put_reservation_ttl_sec=1"); }
static void setup_none(void) { start("--put_reservation_ttl_sec=0"); }

static void teardown(void)
{
    mc_mconn_close(a.conn);
    mc_mconn_close(b.conn);
    /* a clean exit: a sanitizer build also fails it on a leak */
    ck_assert_int_eq(mc_test_master_stop(&master), 0);
}

/* A config placing one replica on @p seg first. */
static mc_wire_config_t on(const char *seg)
{
    mc_wire_config_t c;
    memset(&c, 0, sizeof(c));
    c.replica_num       = 1;
    c.preferred_segment = mc_str_from_cstr(seg);
    return c;
}

/* PUT_RESERVE of @p len bytes by @p p placed for @p cfg; the id, or 0
 * with the status in *st_p. */
static uint64_t reserve(peer_t *p, uint64_t len, mc_wire_config_t cfg, mc_status_t *st_p,
                        mc_wire_put_reserve_resp_t *resp)
{
    mc_wire_put_reserve_req_t req;
    mc_wire_put_reserve_resp_t r;

    memset(&req, 0, sizeof(req));
    req.client_id = p->id;
    req.length    = len;
    req.config    = cfg;
    if (resp == NULL)
        resp = &r;
    *st_p = mc_master_call_put_reserve(p->conn, &req, resp);
    return (*st_p == MC_OK) ? resp->reservation_id : 0;
}

static mc_status_t commit(peer_t *p, const char *key, uint64_t id, mc_wire_config_t cfg,
                          uint8_t renew, uint64_t *next_p)
{
    mc_wire_put_commit_req_t req;
    mc_wire_put_commit_resp_t resp;
    mc_status_t st;

    memset(&req, 0, sizeof(req));
    req.client_id      = p->id;
    req.key            = mc_str_from_cstr(key);
    req.reservation_id = id;
    req.config         = cfg;
    req.renew          = renew;
    st                 = mc_master_call_put_commit(p->conn, &req, &resp);
    if (next_p != NULL)
        *next_p = (st == MC_OK) ? resp.next_id : 0;
    return st;
}

/* GET_REPLICA_LIST of @p key: the status, its size and first address. */
static mc_status_t lookup(peer_t *p, const char *key, uint64_t *size_p, uint64_t *addr_p,
                          uint8_t *status_p)
{
    mc_wire_get_replica_list_req_t req;
    mc_wire_get_replica_list_resp_t resp;
    mc_status_t st;

    memset(&req, 0, sizeof(req));
    req.key = mc_str_from_cstr(key);
    st      = mc_master_call_get_replica_list(p->conn, &req, &resp);
    if (st == MC_OK) {
        *size_p   = resp.size;
        *addr_p   = resp.replicas.v[0].addr;
        *status_p = resp.replicas.v[0].status;
    }
    return st;
}

START_TEST(test_commit_rules)
{
    mc_wire_put_reserve_resp_t granted;
    mc_wire_config_t cfg = on(a.seg), bad = on(a.seg);
    uint64_t id, next, next2, size = 0, addr = 0, raddr;
    uint8_t status = 0;
    mc_status_t st;
    peer_t other;

    id = reserve(&b, 4096, cfg, &st, &granted);
    ck_assert_status_ok(st);
    ck_assert_msg(id != 0, "a reservation id is never 0");
    ck_assert_uint_eq(granted.ttl_ms, 10000);
    ck_assert_uint_eq(granted.replicas.n, 1);
    ck_assert_msg(mc_str_eq(granted.replicas.v[0].segment, mc_str_from_cstr(a.seg)),
                  "the reservation should be placed on the preferred segment");
    raddr = granted.replicas.v[0].addr;
    ck_assert_status_eq(lookup(&a, "k", &size, &addr, &status), MC_OBJECT_NOT_FOUND);

    /* only its writer, in its tenant, may commit it */
    ck_assert_status_eq(commit(&a, "k", id, cfg, 1, NULL), MC_OBJECT_NOT_FOUND);
    peer_open(&other, b.id, "another-tenant", NULL, 0);
    ck_assert_status_eq(commit(&other, "k", id, cfg, 1, NULL), MC_OBJECT_NOT_FOUND);
    mc_mconn_close(other.conn);
    ck_assert_status_eq(commit(&b, "k", id ^ 1, cfg, 1, NULL), MC_OBJECT_NOT_FOUND);
    /* a malformed config is refused and the reservation stays */
    bad.replica_num = 0;
    ck_assert_status_eq(commit(&b, "k", id, bad, 1, NULL), MC_INVALID_PARAMS);

    /* the commit: complete at once, on the reserved buffer, a new one back */
    ck_assert_status_ok(commit(&b, "k", id, cfg, 1, &next));
    ck_assert_msg((next != 0) && (next != id), "a commit with renew brings a new reservation");
    ck_assert_status_ok(lookup(&a, "k", &size, &addr, &status));
    ck_assert_uint_eq(size, 4096);
    ck_assert_uint_eq(addr, raddr);
    ck_assert_uint_eq(status, MC_REPLICA_COMPLETE);
    ck_assert_status_eq(commit(&b, "k2", id, cfg, 1, NULL), MC_OBJECT_NOT_FOUND);

    /* an existing key: put never overwrites, and the reservation stays */
    ck_assert_status_eq(commit(&b, "k", next, cfg, 1, NULL), MC_OBJECT_ALREADY_EXISTS);
    ck_assert_status_ok(commit(&b, "k2", next, cfg, 0, &next2));
    ck_assert_msg(next2 == 0, "renew 0 brings no reservation");
}
END_TEST

START_TEST(test_draining_segment_and_close_free_them)
{
    mc_wire_set_segment_draining_req_t dreq;
    mc_wire_set_segment_draining_resp_t dresp;
    mc_wire_client_close_req_t creq;
    mc_wire_client_close_resp_t cresp;
    uint64_t id, big;
    mc_status_t st;

    /* a segment that drains takes no new object, reserved or not */
    id = reserve(&b, 4096, on(a.seg), &st, NULL);
    ck_assert_status_ok(st);
    memset(&dreq, 0, sizeof(dreq));
    dreq.client_id  = a.id;
    dreq.segment_id = a.seg_id;
    ck_assert_status_ok(mc_master_call_set_segment_draining(a.conn, &dreq, &dresp));
    ck_assert_status_eq(commit(&b, "d", id, on(a.seg), 1, NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(commit(&b, "d", id, on(a.seg), 1, NULL), MC_OBJECT_NOT_FOUND);

    /* b's own segment: a reservation holds space until its writer closes */
    big = reserve(&a, BIG, on(b.seg), &st, NULL);
    ck_assert_status_ok(st);
    ck_assert_msg(big != 0, "the first big reservation fits");
    (void)reserve(&b, BIG, on(b.seg), &st, NULL);
    ck_assert_status_eq(st, MC_NO_AVAILABLE_HANDLE);
    memset(&creq, 0, sizeof(creq));
    creq.client_id = a.id;
    ck_assert_status_ok(mc_master_call_client_close(a.conn, &creq, &cresp));
    (void)reserve(&b, BIG, on(b.seg), &st, NULL);
    ck_assert_status_ok(st);
}
END_TEST

START_TEST(test_expired_reservation_goes_back)
{
    uint64_t id, t0 = mc_test_now_ms();
    mc_status_t st = MC_INTERNAL_ERROR;

    /* one big reservation fills each segment */
    id = reserve(&a, BIG, on(b.seg), &st, NULL);
    ck_assert_status_ok(st);
    (void)reserve(&b, BIG, on(a.seg), &st, NULL);
    ck_assert_status_ok(st);
    (void)reserve(&b, BIG, on(b.seg), &st, NULL);
    ck_assert_status_eq(st, MC_NO_AVAILABLE_HANDLE);
    /* --put_reservation_ttl_sec=1: the space is free again within a few
     * master ticks, and the id is gone */
    while (mc_test_now_ms() < t0 + 10000) {
        (void)reserve(&b, BIG, on(b.seg), &st, NULL);
        if (st == MC_OK)
            break;
        poll(NULL, 0, 50);
    }
    ck_assert_status_ok(st);
    ck_assert_msg(mc_test_now_ms() >= t0 + 900, "a reservation should live its TTL");
    ck_assert_status_eq(commit(&a, "late", id, on(b.seg), 1, NULL), MC_OBJECT_NOT_FOUND);
}
END_TEST

START_TEST(test_master_without_reservations)
{
    mc_status_t st;
    (void)reserve(&a, 4096, on(a.seg), &st, NULL);
    ck_assert_status_eq(st, MC_NOT_SUPPORTED);
}
END_TEST

Suite *mc_test_master_resv_suite(void)
{
    Suite *s  = suite_create("master_resv");
    TCase *tc = tcase_create("reservations");
    TCase *ex = tcase_create("expiry");
    TCase *no = tcase_create("none");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_commit_rules);
    tcase_add_test(tc, test_draining_segment_and_close_free_them);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(ex, setup_short, teardown);
    tcase_set_timeout(ex, 30);
    tcase_add_test(ex, test_expired_reservation_goes_back);
    suite_add_tcase(s, ex);
    tcase_add_checked_fixture(no, setup_none, teardown);
    tcase_set_timeout(no, 30);
    tcase_add_test(no, test_master_without_reservations);
    suite_add_tcase(s, no);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master's side of DFS replicas (docs/tiers.md §6, docs/protocol.md
 * §5.16) against a real mooncake_master with --root_fs_dir, over raw
 * protocol calls (so a sanitizer build checks the master's bookkeeping).
 *
 * A mounts the only segment and writes; B reads.  Each rule is reached
 * directly: the HELLO announcement, what PUT_START hands out, that a DFS
 * replica outlives its memory holder and eviction, the upsert topology
 * rule, the refusals, and that every extent is given back.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mooncake/config.h>
#include <mooncake/store.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store/master_client.h"

#define SEG_SIZE (1u << 20)
#define BIG      (600u << 10) /* two of these never fit the segment */

static mc_test_master_t master;
static char root[64];
static char root_flag[96];

typedef struct raw_client {
    mc_master_target_t target;
    mc_mconn_t *conn;
    mc_uuid_t id;
} raw_client_t;

static raw_client_t a, b;

static void raw_open(raw_client_t *rc, const char *tenant)
{
    memset(rc, 0, sizeof(*rc));
    mc_uuid_generate(&rc->id);
    ck_assert_status_ok(mc_master_target_init(&rc->target, master.addr, rc->id, tenant));
    ck_assert_status_ok(mc_mconn_open(&rc->target, &rc->conn));
}

static void mount_a(void)
{
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    memset(&req, 0, sizeof(req));
    mc_uuid_generate(&req.segment.id);
    req.client_id        = a.id;
    req.segment.name     = mc_str_from_cstr("10.0.0.1:1");
    req.segment.base     = 0x100000000ull;
    req.segment.size     = SEG_SIZE;
    req.segment.protocol = mc_str_from_cstr("tcp");
    ck_assert_status_ok(mc_master_call_mount_segment(a.conn, &req, &resp));
}

static void setup(void)
{
    /* tenants isolate only in multi-tenant mode (upstream C.9) */
    const char *flags[] = {"--default_kv_lease_ttl=100", root_flag,
                           "--enable_multi_tenants=true", mc_test_tenant_policy_flag(), NULL};

    snprintf(root, sizeof(root), "/tmp/mc-master-dfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(root_flag, sizeof(root_flag), "--root_fs_dir=%s", root);
    unsetenv("MOONCAKE_DFS_SHARD_COUNT");
    unsetenv("MOONCAKE_DFS_SHARD_CAPACITY");
    setenv("MOONCAKE_DFS_ALIGNMENT", "4096", 1);
    mc_test_master_start(&master, flags);
    raw_open(&a, "default");
    raw_open(&b, "default");
    mount_a();
}

static void teardown(void)
{
    mc_mconn_close(a.conn);
    mc_mconn_close(b.conn);
    /* a clean exit: a sanitizer build also fails it on a leak */
    ck_assert_int_eq(mc_test_master_stop(&master), 0);
    rmdir(root);
    unsetenv("MOONCAKE_DFS_ALIGNMENT");
}

/* START (put or upsert) of @p key by @p rc; the replicas into @p out
 * (borrowed from the connection until its next call). */
static int32_t start(raw_client_t *rc, int upsert, const char *key, uint64_t size,
                     uint32_t replica_num, uint32_t dfs, mc_wire_replica_list_t *out)
{
    int32_t st;

    if (upsert) {
        mc_wire_upsert_start_req_t req;
        mc_wire_upsert_start_resp_t resp;
        memset(&req, 0, sizeof(req));
        req.client_id              = rc->id;
        req.key                    = mc_str_from_cstr(key);
        req.length                 = size;
        req.config.replica_num     = replica_num;
        req.config.dfs_replica_num = dfs;
        st = mc_master_call_upsert_start(rc->conn, &req, &resp);
        if (st == MC_OK)
            *out = resp.replicas;
    } else {
        mc_wire_put_start_req_t req;
        mc_wire_put_start_resp_t resp;
        memset(&req, 0, sizeof(req));
        req.client_id              = rc->id;
        req.key                    = mc_str_from_cstr(key);
        req.length                 = size;
        req.config.replica_num     = replica_num;
        req.config.dfs_replica_num = dfs;
        st = mc_master_call_put_start(rc->conn, &req, &resp);
        if (st == MC_OK)
            *out = resp.replicas;
    }
    return st;
}

static void end(int upsert, const char *key)
{
    if (upsert) {
        mc_wire_upsert_end_req_t req = {.client_id = a.id, .key = mc_str_from_cstr(key)};
        mc_wire_upsert_end_resp_t resp;
        ck_assert_status_ok(mc_master_call_upsert_end(a.conn, &req, &resp));
    } else {
        mc_wire_put_end_req_t req = {.client_id = a.id, .key = mc_str_from_cstr(key)};
        mc_wire_put_end_resp_t resp;
        ck_assert_status_ok(mc_master_call_put_end(a.conn, &req, &resp));
    }
}

/* A put of @p key with a DFS replica, sealed; that replica into @p f
 * (may be NULL). */
static void put_dfs(const char *key, uint64_t size, mc_wire_replica_t *f)
{
    mc_wire_replica_list_t l;
    ck_assert_status_ok(start(&a, 0, key, size, 1, 1, &l));
    ck_assert_uint_eq(l.n, 2);
    if (f != NULL)
        *f = l.v[1];
    end(0, key);
}

/* GET_REPLICA_LIST of @p key by B: replica types as letters ("m" memory,
 * "f" DFS) into @p types; the DFS replica into @p dfs (may be NULL). */
static int32_t get(const char *key, char *types, mc_wire_replica_t *dfs)
{
    mc_wire_get_replica_list_req_t req;
    mc_wire_get_replica_list_resp_t resp;
    int32_t st;

    types[0] = '\0';
    req.key  = mc_str_from_cstr(key);
    st       = mc_master_call_get_replica_list(b.conn, &req, &resp);
    if (st != MC_OK)
        return st;
    for (uint32_t i = 0; (i < resp.replicas.n) && (i < 6); i++) {
        const mc_wire_replica_t *r = &resp.replicas.v[i];
        types[i]     = (r->type == MC_WIRE_REPLICA_DFS) ? 'f' : (r->type == 0) ? 'm' : '?';
        types[i + 1] = '\0';
        if ((r->type == MC_WIRE_REPLICA_DFS) && (dfs != NULL))
            *dfs = *r;
    }
    return MC_OK;
}

static int32_t remove_key(const char *key)
{
    mc_wire_remove_req_t req = {.key = mc_str_from_cstr(key), .force = 1};
    mc_wire_remove_resp_t resp;
    return mc_master_call_remove(b.conn, &req, &resp);
}

START_TEST(test_hello_announces_the_layout)
{
    mc_wire_hello_req_t req;
    mc_wire_hello_resp_t resp;

    memset(&req, 0, sizeof(req));
    req.proto_version = MC_WIRE_VERSION;
    req.client_id     = b.id;
    ck_assert_status_ok(mc_master_call_hello(b.conn, &req, &resp));
    ck_assert_msg(mc_str_eq(resp.dfs_root, mc_str_from_cstr(root)), "HELLO names the root");
    ck_assert_uint_eq(resp.dfs_shard_count, 8);
    ck_assert_uint_eq(resp.dfs_shard_capacity, 64ull << 30);
    ck_assert_uint_eq(resp.dfs_alignment, 4096);
}
END_TEST

START_TEST(test_put_start_hands_out_an_extent)
{
    mc_wire_replica_list_t l;
    mc_wire_replica_t f;
    char types[8];

    ck_assert_status_ok(start(&a, 0, "k1", 5000, 1, 1, &l));
    ck_assert_uint_eq(l.n, 2);
    ck_assert_uint_eq(l.v[0].type, 0);
    f = l.v[1];
    ck_assert_uint_eq(f.type, MC_WIRE_REPLICA_DFS);
    ck_assert_uint_eq(f.status, MC_REPLICA_PROCESSING);
    ck_assert_uint_eq(f.size, 5000);
    ck_assert_uint_eq(f.aligned_size, 8192); /* 24 + 2 + 5000 rounded up */
    ck_assert_uint_eq(f.addr % 4096, 0);
    ck_assert_msg(f.file_path.len > 0 && memchr(f.file_path.ptr, '/', f.file_path.len) == NULL,
                  "the shard file is named relative to the root");
    /* not listed until PUT_END */
    ck_assert_int_eq(get("k1", types, NULL), MC_REPLICA_IS_NOT_READY);
    end(0, "k1");
    ck_assert_int_eq(get("k1", types, &f), MC_OK);
    ck_assert_str_eq(types, "mf");
    ck_assert_uint_eq(f.status, MC_REPLICA_COMPLETE);
    /* a second record goes to another shard (spread), never over the first */
    ck_assert_status_ok(start(&a, 0, "k2", 5000, 1, 1, &l));
    ck_assert_msg((l.v[1].shard_idx != f.shard_idx) || (l.v[1].addr >= f.addr + 8192) ||
                      (l.v[1].addr + 8192 <= f.addr),
                  "two live records overlap");
    end(0, "k2");
    ck_assert_int_eq(remove_key("k1"), MC_OK);
    ck_assert_int_eq(remove_key("k2"), MC_OK);
}
END_TEST

/* The holder leaves (CLIENT_CLOSE) and eviction runs: the DFS replica stays. */
START_TEST(test_dfs_outlives_its_holder_and_eviction)
{
    char types[8];
    mc_wire_exist_key_req_t ereq = {.key = mc_str_from_cstr("big1")};
    mc_wire_exist_key_resp_t eresp;
    mc_wire_replica_list_t l;

    put_dfs("big1", BIG, NULL);
    /* the next put needs big1's memory (never read, so not leased):
     * eviction keeps big1 on DFS */
    ck_assert_status_ok(start(&a, 0, "big2", BIG, 1, 0, &l));
    end(0, "big2");
    ck_assert_int_eq(get("big1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "f");
    /* the holder leaves: big2 goes, big1 stays readable from its record */
    {
        mc_wire_client_close_req_t req = {.client_id = a.id};
        mc_wire_client_close_resp_t resp;
        ck_assert_status_ok(mc_master_call_client_close(a.conn, &req, &resp));
    }
    ck_assert_int_eq(get("big2", types, NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(get("big1", types, NULL), MC_OK);
    ck_assert_str_eq(types, "f");
    ck_assert_status_ok(mc_master_call_exist_key(b.conn, &ereq, &eresp));
    ck_assert_uint_eq(eresp.exists, 1);
}
END_TEST

START_TEST(test_upsert_topology)
{
    mc_wire_replica_list_t l;
    mc_wire_replica_t f0, f1;
    char types[8];

    put_dfs("u", 3000, &f0);
    /* same size: the topology must match */
    ck_assert_int_eq(start(&a, 1, "u", 3000, 1, 0, &l), MC_INVALID_PARAMS);
    ck_assert_int_eq(start(&a, 1, "u", 3000, 2, 1, &l), MC_INVALID_PARAMS);
    /* in place (nobody read it, so no lease): the same extent, a new id */
    ck_assert_status_ok(start(&a, 1, "u", 3000, 1, 1, &l));
    ck_assert_uint_eq(l.n, 2);
    ck_assert_uint_eq(l.v[1].addr, f0.addr);
    ck_assert_uint_eq(l.v[1].shard_idx, f0.shard_idx);
    ck_assert_uint_ne(l.v[1].id, f0.id);
    end(1, "u");
    /* another size: a new topology, here without DFS */
    ck_assert_status_ok(start(&a, 1, "u", 9000, 1, 0, &l));
    ck_assert_uint_eq(l.n, 1);
    end(1, "u");
    ck_assert_int_eq(get("u", types, NULL), MC_OK);
    ck_assert_str_eq(types, "m");
    /* and back, with DFS, at yet another size (fresh buffers) */
    ck_assert_status_ok(start(&a, 1, "u", 100, 1, 1, &l));
    ck_assert_uint_eq(l.n, 2);
    end(1, "u");
    ck_assert_int_eq(get("u", types, &f1), MC_OK);
    ck_assert_str_eq(types, "mf");
    ck_assert_uint_eq(f1.aligned_size, 4096);
    ck_assert_int_eq(remove_key("u"), MC_OK);
}
END_TEST

START_TEST(test_refusals)
{
    mc_wire_replica_list_t l;
    raw_client_t t;

    ck_assert_int_eq(start(&a, 0, "r", 100, 0, 1, &l), MC_INVALID_PARAMS); /* DFS-only */
    ck_assert_int_eq(start(&a, 0, "r", 100, 1, 2, &l), MC_INVALID_PARAMS);
    raw_open(&t, "other");
    ck_assert_int_eq(start(&t, 0, "r", 100, 1, 1, &l), MC_INVALID_PARAMS); /* tenant */
    mc_mconn_close(t.conn);
    /* a revoked put gives its extent back: the next one takes it again */
    ck_assert_status_ok(start(&a, 0, "r", 100, 1, 1, &l));
    {
        uint64_t off = l.v[1].addr;
        uint32_t sh  = l.v[1].shard_idx;
        mc_wire_put_revoke_req_t req = {.client_id = a.id, .key = mc_str_from_cstr("r")};
        mc_wire_put_revoke_resp_t resp;
        ck_assert_status_ok(mc_master_call_put_revoke(a.conn, &req, &resp));
        for (int i = 0; i < 8; i++) { /* round the shards back to it */
            char k[16];
            snprintf(k, sizeof(k), "r%d", i);
            ck_assert_status_ok(start(&a, 0, k, 100, 1, 1, &l));
            if (l.v[1].shard_idx == sh)
                ck_assert_uint_eq(l.v[1].addr, off);
            end(0, k);
        }
    }
}
END_TEST

Suite *mc_test_master_dfs_suite(void)
{
    Suite *s  = suite_create("master_dfs");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_hello_announces_the_layout);
    tcase_add_test(tc, test_put_start_hands_out_an_extent);
    tcase_add_test(tc, test_dfs_outlives_its_holder_and_eviction);
    tcase_add_test(tc, test_upsert_topology);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return s;
}

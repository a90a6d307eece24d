/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master's compact object records, through the RPC against the real
 * mooncake_master: what each packing trick must still get right.
 *
 *  - The first replica of a put lives inside its object (rep0).  When the
 *    object is erased while that replica still waits on the discarded
 *    list (a preempted put), the range must stay reserved until its
 *    release time and then come back; the record goes with it.  Buffers
 *    freed under a reader's lease are free at once, under a later
 *    generation of their segment.
 *  - rep0 is on no list: the object's other replicas are.  Losing either
 *    kind leaves the object readable from the rest, rep0 still listed
 *    first while it lasts.
 *  - A segment keeps no replica list: unmounting walks the index, and must
 *    drop object replicas, an upsert's new buffers and discarded ones.
 *  - The owner and tenant of an object are a shared "writer" record: PUT_END
 *    from another client is refused, and an upsert hands the object over
 *    to the upserter.
 *  - Stopping the master with all of that in flight exits cleanly (under
 *    the sanitizer build, a leak or bad free makes the exit status non-zero).
 *
 * Every case starts its own master ($MC_MASTER_BIN) with a discard timeout
 * of 0 (a second PUT_START preempts at once), a 1 s release timeout and a
 * 1 s read lease, on a fake 64 KiB segment that the master only does
 * arithmetic on.  Waits for the release are polls with a deadline.
 */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"
#include "master_proc.h"
#include "common/gen.h"
#include "common/util.h"
#include "store/master_client.h"
#include "wire/wire.h"

#define SEG_SIZE (64u * 1024u)
#define SEG_BASE (1ull << 40)
#define SEG_BASE2 (2ull << 40)

static mc_test_master_t master;
static mc_mconn_t *conn;
static mc_uuid_t client_a, client_b;

static void master_start(void)
{
    static const char *const flags[] = {
        "--default_kv_lease_ttl=1000", "--put_start_discard_timeout_sec=0",
        "--put_start_release_timeout_sec=1", NULL};
    mc_master_target_t t;

    mc_test_master_start(&master, flags);
    mc_uuid_generate(&client_a);
    mc_uuid_generate(&client_b);
    ck_assert_status_ok(mc_master_target_init(&t, master.addr, client_a, "mem-tenant"));
    ck_assert_status_ok(mc_mconn_open(&t, &conn));
}

/* SIGTERM and wait; the exit status, or -1 when it had to be killed. */
static int master_stop(void)
{
    if (conn != NULL) {
        mc_mconn_close(conn);
        conn = NULL;
    }
    return mc_test_master_stop(&master);
}

static void teardown(void)
{
    master_stop();
}

/* ---- RPC helpers ----------------------------------------------------------- */

static mc_str_t S(const char *s)
{
    return mc_str_from_cstr(s);
}

static mc_uuid_t mount_named(uint64_t base, const char *name)
{
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    memset(&req, 0, sizeof(req));
    req.client_id = client_a;
    mc_uuid_generate(&req.segment.id);
    req.segment.name     = S(name);
    req.segment.base     = base;
    req.segment.size     = SEG_SIZE;
    req.segment.protocol = S("tcp");
    ck_assert_status_ok(mc_master_call_mount_segment(conn, &req, &resp));
    return req.segment.id;
}

static mc_uuid_t mount(uint64_t base)
{
    return mount_named(base, "127.0.0.1:1");
}

static void unmount(mc_uuid_t seg)
{
    mc_wire_unmount_segment_req_t req = {.client_id = client_a, .segment_id = seg};
    mc_wire_unmount_segment_resp_t resp;
    ck_assert_status_ok(mc_master_call_unmount_segment(conn, &req, &resp));
}

/* The generation the last successful put_start_n's first replica named. */
static uint64_t last_gen;

/* PUT_START (or UPSERT_START when @p upsert) asking for @p nrep replicas,
 * which it must get when it succeeds; the first one's address in *addr_p. */
static int put_start_n(mc_uuid_t who, const char *key, uint64_t len, int upsert, uint32_t nrep,
                       uint64_t *addr_p)
{
    mc_wire_config_t cfg;
    mc_wire_replica_list_t got = {0};
    mc_status_t st;

    memset(&cfg, 0, sizeof(cfg));
    cfg.replica_num = nrep;
    if (upsert) {
        mc_wire_upsert_start_req_t req = {.client_id = who, .key = S(key), .length = len,
                                          .config = cfg};
        mc_wire_upsert_start_resp_t resp;
        st  = mc_master_call_upsert_start(conn, &req, &resp);
        got = resp.replicas;
    } else {
        mc_wire_put_start_req_t req = {.client_id = who, .key = S(key), .length = len,
                                       .config = cfg};
        mc_wire_put_start_resp_t resp;
        st  = mc_master_call_put_start(conn, &req, &resp);
        got = resp.replicas;
    }
    if (st == MC_OK) {
        ck_assert_uint_eq(got.n, nrep);
        last_gen = got.v[0].gen;
        if (addr_p != NULL)
            *addr_p = got.v[0].addr;
    }
    return st;
}

static int put_start(mc_uuid_t who, const char *key, uint64_t len, int upsert, uint64_t *addr_p)
{
    return put_start_n(who, key, len, upsert, 1, addr_p);
}

static int put_end(mc_uuid_t who, const char *key, int upsert)
{
    if (upsert) {
        mc_wire_upsert_end_req_t req = {.client_id = who, .key = S(key)};
        mc_wire_upsert_end_resp_t resp;
        return mc_master_call_upsert_end(conn, &req, &resp);
    } else {
        mc_wire_put_end_req_t req = {.client_id = who, .key = S(key)};
        mc_wire_put_end_resp_t resp;
        return mc_master_call_put_end(conn, &req, &resp);
    }
}

/* GET_REPLICA_LIST (takes a 1 s lease); the address in *addr_p. */
static int get(const char *key, uint64_t *addr_p)
{
    mc_wire_get_replica_list_req_t req = {.key = S(key)};
    mc_wire_get_replica_list_resp_t resp;
    mc_status_t st = mc_master_call_get_replica_list(conn, &req, &resp);

    if ((st == MC_OK) && (addr_p != NULL)) {
        ck_assert_uint_eq(resp.replicas.n, 1);
        *addr_p = resp.replicas.v[0].addr;
    }
    return st;
}

/* GET_REPLICA_LIST of @p key, which must have @p n replicas: their
 * addresses and segments into @p addr and @p seg (in the answer's order). */
static void get_n(const char *key, uint32_t n, uint64_t *addr, mc_uuid_t *seg)
{
    mc_wire_get_replica_list_req_t req = {.key = S(key)};
    mc_wire_get_replica_list_resp_t resp;

    ck_assert_status_ok(mc_master_call_get_replica_list(conn, &req, &resp));
    ck_assert_msg(resp.replicas.n == n, "key %s should have %u replicas, not %u", key, n,
                  resp.replicas.n);
    for (uint32_t i = 0; i < n; i++) {
        addr[i] = resp.replicas.v[i].addr;
        seg[i]  = resp.replicas.v[i].segment_id;
    }
}

/* PUT_START of @p key with two replicas (UPSERT_START when @p upsert),
 * then the matching END. */
static void put_two(const char *key, uint64_t len, int upsert)
{
    ck_assert_status_ok(put_start_n(client_a, key, len, upsert, 2, NULL));
    ck_assert_status_ok(put_end(client_a, key, upsert));
}

static int remove_key(const char *key, int force)
{
    mc_wire_remove_req_t req = {.key = S(key), .force = (uint8_t)force};
    mc_wire_remove_resp_t resp;
    return mc_master_call_remove(conn, &req, &resp);
}

static int exists(const char *key)
{
    mc_wire_exist_key_req_t req = {.key = S(key)};
    mc_wire_exist_key_resp_t resp;
    ck_assert_status_ok(mc_master_call_exist_key(conn, &req, &resp));
    return resp.exists;
}

/* Poll PUT_START of @p key until it stops answering NO_AVAILABLE_HANDLE
 * (the held range was released); fails after 5 s. */
static void put_start_when_released(const char *key, uint64_t len, uint64_t *addr_p)
{
    uint64_t deadline = mc_now_ms() + 5000;
    int st;

    while ((st = put_start(client_a, key, len, 0, addr_p)) == MC_NO_AVAILABLE_HANDLE) {
        ck_assert_msg(mc_now_ms() < deadline, "the held range should be released within 5 s");
        poll(NULL, 0, 20);
    }
    ck_assert_status_ok(st);
}

/* ---- cases ------------------------------------------------------------------- */

/* The batch forms work on their keys in order with the index lookups of
 * later keys started ahead (index/objects_internal.h: key_pipe_t), each key's hash worked
 * out once and kept for it: every key must still get its own answer, with
 * keys repeated and absent ones in between, and batches longer than the
 * lookahead. */
START_TEST(test_batches_answer_every_key_for_itself)
{
    enum { N = 40 };
    char names[2 * N + 4][8];
    mc_str_t put[N], ask[2 * N + 4];
    uint64_t lens[N];
    uint32_t nask = 0;

    master_start();
    mount(SEG_BASE);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "b%02d", i);
        put[i]  = S(names[i]);
        lens[i] = 64u * (uint64_t)(i % 7 + 1);
    }
    {
        mc_wire_batch_put_start_req_t req = {.client_id = client_a,
                                             .keys      = {N, put},
                                             .lengths   = {N, lens}};
        mc_wire_batch_put_start_resp_t resp;
        req.config.replica_num = 1;
        ck_assert_status_ok(mc_master_call_batch_put_start(conn, &req, &resp));
        ck_assert_uint_eq(resp.results.n, N);
        for (int i = 0; i < N; i++) {
            ck_assert_msg(resp.results.v[i].status == MC_OK, "key %d: status %d", i,
                          resp.results.v[i].status);
            ck_assert_uint_eq(resp.results.v[i].replicas.n, 1);
        }
    }
    {
        mc_wire_batch_put_end_req_t req = {.client_id = client_a, .keys = {N, put}};
        mc_wire_batch_put_end_resp_t resp;
        ck_assert_status_ok(mc_master_call_batch_put_end(conn, &req, &resp));
        for (int i = 0; i < N; i++)
            ck_assert_msg(resp.statuses.v[i] == MC_OK, "end of key %d: %d", i,
                          resp.statuses.v[i]);
    }
    /* backwards, each present key followed by an absent one, and b05 and
     * b07 again at the end (the same bytes, elsewhere in the request) */
    for (int i = N - 1; i >= 0; i--) {
        snprintf(names[N + i], sizeof(names[N + i]), "x%02d", i);
        ask[nask++] = put[i];
        ask[nask++] = S(names[N + i]);
    }
    ask[nask++] = S("b05");
    ask[nask++] = S("b07");
    {
        mc_wire_batch_get_replica_list_req_t req = {.keys = {nask, ask}};
        mc_wire_batch_get_replica_list_resp_t resp;
        ck_assert_status_ok(mc_master_call_batch_get_replica_list(conn, &req, &resp));
        ck_assert_uint_eq(resp.results.n, nask);
        for (uint32_t j = 0; j < nask; j++) {
            const mc_wire_result_t *r = &resp.results.v[j];
            if (ask[j].ptr[0] == 'x') {
                ck_assert_msg(r->status == MC_OBJECT_NOT_FOUND, "%.*s: status %d",
                              (int)ask[j].len, ask[j].ptr, r->status);
                continue;
            }
            int i = atoi(ask[j].ptr + 1);
            ck_assert_msg((r->status == MC_OK) && (r->size == lens[i]),
                          "%.*s: status %d, size %llu, not %llu", (int)ask[j].len, ask[j].ptr,
                          r->status, (unsigned long long)r->size, (unsigned long long)lens[i]);
        }
    }
    {
        mc_wire_batch_remove_req_t req = {.keys = {nask, ask}, .force = 1};
        mc_wire_batch_remove_resp_t resp;
        /* every other present key goes: ask[4k] is b39, b37, ... */
        for (uint32_t j = 0; j < 2 * N; j += 4)
            ask[j / 4] = ask[j];
        req.keys.n = N / 2;
        ck_assert_status_ok(mc_master_call_batch_remove(conn, &req, &resp));
        for (uint32_t j = 0; j < N / 2; j++)
            ck_assert_msg(resp.statuses.v[j] == MC_OK, "remove %u: %d", j, resp.statuses.v[j]);
    }
    {
        mc_wire_batch_exist_key_req_t req = {.keys = {N, put}};
        mc_wire_batch_exist_key_resp_t resp;
        ck_assert_status_ok(mc_master_call_batch_exist_key(conn, &req, &resp));
        ck_assert_uint_eq(resp.results.n, N);
        /* removed: b39, b37, ... (the odd ones) */
        for (int i = 0; i < N; i++)
            ck_assert_msg(resp.results.v[i] == (i % 2 == 0), "b%02d should %s", i,
                          (i % 2 == 0) ? "exist" : "be gone");
    }
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* A preempted put's buffer stays reserved (the old writer may still be
 * writing) although its object is gone, then comes back. */
START_TEST(test_preempted_put_holds_its_range_until_release)
{
    uint64_t a1, a2;

    master_start();
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "k", 40 * 1024, 0, &a1));
    ck_assert_uint_eq(a1, SEG_BASE);
    /* the discard timeout is 0: this preempts at once, but 40 KiB no
     * longer fit beside the old 40 KiB still held */
    ck_assert_status_eq(put_start(client_b, "k", 40 * 1024, 0, NULL), MC_NO_AVAILABLE_HANDLE);
    ck_assert_int_eq(exists("k"), 0);
    ck_assert_status_ok(put_start(client_b, "small", 8 * 1024, 0, &a2));
    ck_assert_msg(a2 >= SEG_BASE + 40 * 1024, "the held range must not be handed out again");
    ck_assert_status_ok(put_end(client_b, "small", 0));

    put_start_when_released("k", 40 * 1024, &a2);
    ck_assert_uint_eq(a2, SEG_BASE);
    ck_assert_status_ok(put_end(client_a, "k", 0));
    ck_assert_status_ok(get("k", &a2));
    ck_assert_uint_eq(a2, SEG_BASE);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* An upsert's old buffer under a reader's lease, and then the object
 * itself, removed by force: their space is free at once, and the segment's
 * generation moves on before any of it is handed out again
 * (docs/architecture.md, "Proof of identity"), so a reader still on the
 * old one is refused by the holder. */
START_TEST(test_removed_leased_object_frees_at_once_under_a_later_generation)
{
    uint64_t a1, a2, g1, g2;

    master_start();
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "k", 30 * 1024, 0, &a1));
    g1 = last_gen;
    ck_assert_msg(g1 >> 63, "a memory replica names its segment's generation");
    ck_assert_status_ok(put_end(client_a, "k", 0));
    ck_assert_status_ok(get("k", &a1)); /* a 1 s lease */
    ck_assert_status_ok(put_start(client_b, "k", 20 * 1024, 1, &a2)); /* fresh buffers */
    ck_assert_msg(a2 != a1, "a resized upsert should get a new buffer");
    ck_assert_uint_eq(last_gen, g1); /* nothing freed under a lease yet */
    ck_assert_status_ok(put_end(client_b, "k", 1));
    ck_assert_status_ok(get("k", &a2));
    {
        mc_wire_remove_req_t req = {.key = S("k"), .force = 1};
        mc_wire_remove_resp_t resp;
        ck_assert_status_ok(mc_master_call_remove(conn, &req, &resp));
    }
    ck_assert_int_eq(exists("k"), 0);
    ck_assert_status_ok(put_start(client_a, "all", SEG_SIZE, 0, &a1));
    ck_assert_uint_eq(a1, SEG_BASE);
    g2 = last_gen;
    ck_assert_msg(g2 == mc_gen_next(g1), "generation %016llx after the forced frees, %016llx "
                  "before", (unsigned long long)g2, (unsigned long long)g1);
    ck_assert_status_ok(put_end(client_a, "all", 0));
    /* moved on once: the next allocation keeps it */
    ck_assert_status_ok(remove_key("all", 0));
    ck_assert_status_ok(put_start(client_a, "again", 4096, 0, NULL));
    ck_assert_uint_eq(last_gen, g2);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* A put in progress removed by force: its writer may still be writing,
 * so the segment moves to its next fence before that memory is handed out
 * again (the holder then refuses writes of anything earlier); a remount
 * takes the owner's generation as it stands. */
START_TEST(test_forced_remove_of_a_put_in_progress_fences_its_segment)
{
    uint64_t a1, a2, g1;
    mc_uuid_t seg;

    master_start();
    seg = mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "p", 40 * 1024, 0, &a1));
    g1 = last_gen;
    ck_assert_uint_eq(g1, mc_gen_of_segment(seg.hi, seg.lo));
    ck_assert_status_ok(remove_key("p", 1));
    ck_assert_status_eq(put_end(client_a, "p", 0), MC_OBJECT_NOT_FOUND);
    ck_assert_status_ok(put_start(client_b, "q", 40 * 1024, 0, &a2));
    ck_assert_uint_eq(a2, a1);
    ck_assert_uint_eq(last_gen, mc_gen_fence_after(g1, MC_GEN_FENCE_STEP));
    ck_assert_status_ok(put_end(client_b, "q", 0));
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* An object removed by force while another client upserts it into fresh
 * buffers:
 * the upserter may still be writing them, so, as for a put in progress,
 * the segment moves to its next fence before that memory is handed out
 * again, and the late write is refused instead of landing in the next
 * owner's value.  (Found by the fault suite: a plain remove freed the
 * fresh buffers unfenced, and a late upsert write overwrote another
 * key's value placed there.)  A plain remove refuses while the upsert is
 * in flight. */
START_TEST(test_remove_during_a_resized_upsert_fences_its_buffers)
{
    uint64_t a0, a1, a2, g1;

    master_start();
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "u", 8 * 1024, 0, &a0));
    ck_assert_status_ok(put_end(client_a, "u", 0));
    ck_assert_status_ok(put_start(client_b, "u", 40 * 1024, 1, &a1)); /* fresh buffers */
    ck_assert_msg(a1 != a0, "a resized upsert should get a new buffer");
    g1 = last_gen;
    ck_assert_status_eq(remove_key("u", 0), MC_REPLICA_IS_NOT_READY);
    ck_assert_status_ok(remove_key("u", 1));
    ck_assert_int_eq(exists("u"), 0);
    ck_assert_status_eq(put_end(client_b, "u", 1), MC_OBJECT_NOT_FOUND);
    /* the whole segment: the upsert's buffer is part of it again */
    ck_assert_status_ok(put_start(client_a, "q", SEG_SIZE, 0, &a2));
    ck_assert_uint_eq(a2, SEG_BASE);
    ck_assert_msg(a1 > a2 && a1 < a2 + SEG_SIZE, "the upsert's buffer is inside the new one");
    ck_assert_uint_eq(last_gen, mc_gen_fence_after(g1, MC_GEN_FENCE_STEP));
    ck_assert_status_ok(put_end(client_a, "q", 0));
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* UPSERT_END for a key with no upsert in progress (a new leader never saw
 * its start, which is not carried over at takeover): not OK, even from
 * the client that owns the current value, which would otherwise be told
 * that bytes nobody published are the value.  A PUT_END repeated on a
 * complete object stays OK. */
START_TEST(test_upsert_end_without_its_start_is_refused)
{
    master_start();
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "u", 8 * 1024, 0, NULL));
    ck_assert_status_ok(put_end(client_a, "u", 0));
    ck_assert_status_eq(put_end(client_a, "u", 1), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(put_end(client_b, "u", 1), MC_OBJECT_NOT_FOUND);
    ck_assert_status_ok(put_end(client_a, "u", 0)); /* a retried PutEnd */
    /* a real upsert still ends, once */
    ck_assert_status_ok(put_start(client_b, "u", 4 * 1024, 1, NULL));
    ck_assert_status_ok(put_end(client_b, "u", 1));
    ck_assert_status_eq(put_end(client_b, "u", 1), MC_OBJECT_NOT_FOUND);
    /* an upsert of a missing key is a put: it ends too */
    ck_assert_status_ok(put_start(client_a, "n", 4 * 1024, 1, NULL));
    ck_assert_status_ok(put_end(client_a, "n", 1));
    ck_assert_int_eq(exists("n"), 1);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* Unmount finds every replica on the segment by walking the index. */
START_TEST(test_unmount_drops_every_kind_of_replica)
{
    uint64_t a;
    mc_uuid_t seg;

    master_start();
    seg = mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "p", 4096, 0, NULL));  /* complete */
    ck_assert_status_ok(put_end(client_a, "p", 0));
    ck_assert_status_ok(put_start(client_a, "u", 4096, 0, NULL));  /* upsert in flight */
    ck_assert_status_ok(put_end(client_a, "u", 0));
    ck_assert_status_ok(get("u", NULL));
    ck_assert_status_ok(put_start(client_a, "u", 1000, 1, NULL));
    ck_assert_status_ok(put_start(client_a, "w", 2000, 0, NULL)); /* incomplete */
    ck_assert_status_ok(put_start(client_a, "z", 8192, 0, NULL)); /* preempted: discarded */
    ck_assert_status_ok(put_start(client_b, "z", 8192, 0, NULL));
    ck_assert_status_ok(put_start(client_a, "r", 4096, 0, NULL)); /* leased old buffer */
    ck_assert_status_ok(put_end(client_a, "r", 0));
    ck_assert_status_ok(get("r", NULL));
    ck_assert_status_ok(put_start(client_a, "r", 100, 1, NULL));
    ck_assert_status_ok(put_end(client_a, "r", 1));
    {
        mc_wire_unmount_segment_req_t req = {.client_id = client_a, .segment_id = seg};
        mc_wire_unmount_segment_resp_t resp;
        ck_assert_status_ok(mc_master_call_unmount_segment(conn, &req, &resp));
    }
    ck_assert_status_eq(get("p", NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(get("u", NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(get("r", NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(exists("w"), 0);
    ck_assert_int_eq(exists("z"), 0);
    /* a new segment at the same place is entirely free */
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "all", SEG_SIZE, 0, &a));
    ck_assert_uint_eq(a, SEG_BASE);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* Two replicas: rep0 (first) in the record, the second on its list.
 * Losing either leaves the other readable; losing both ends the object. */
START_TEST(test_embedded_and_listed_replicas)
{
    uint64_t a[2], b[2], c[2];
    mc_uuid_t sa[2], sb[2], sc[2];

    master_start();
    mount_named(SEG_BASE, "127.0.0.1:1");
    mount_named(SEG_BASE2, "127.0.0.1:2");
    put_two("a", 4096, 0);
    put_two("b", 4096, 0);
    get_n("a", 2, a, sa);
    get_n("b", 2, b, sb);
    ck_assert_msg(!mc_uuid_eq(sa[0], sa[1]), "the two replicas should be on two segments");
    /* a fresh-buffer upsert: its new replicas all come from the list */
    put_two("c", 4096, 0);
    get_n("c", 2, c, sc);
    put_two("c", 8192, 1);
    get_n("c", 2, c, sc);

    /* the segment of a's first replica goes: a keeps its second, b (whose
     * first replica may be on either segment) keeps the other one */
    unmount(sa[0]);
    {
        uint64_t x;
        mc_uuid_t sx;
        get_n("a", 1, &x, &sx);
        ck_assert_msg(x == a[1] && mc_uuid_eq(sx, sa[1]), "a should be left with its second replica");
        get_n("b", 1, &x, &sx);
        ck_assert_msg(mc_uuid_eq(sx, sa[1]), "b should be left with the replica on the other segment");
        ck_assert_uint_eq(x, mc_uuid_eq(sb[0], sa[1]) ? b[0] : b[1]);
        get_n("c", 1, &x, &sx);
        ck_assert_msg(mc_uuid_eq(sx, sa[1]), "c should be left with the replica on the other segment");
    }
    /* a remount at the same place is entirely free again */
    mount_named(SEG_BASE, "127.0.0.1:1");
    ck_assert_status_ok(put_start(client_b, "fill", SEG_SIZE, 0, &a[0]));
    ck_assert_uint_eq(a[0], SEG_BASE);
    unmount(sa[1]);
    ck_assert_status_eq(get("a", NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(get("b", NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_status_eq(get("c", NULL), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* A leased two-replica object removed by force: both ranges, rep0's and
 * the listed one's, are free at once, each segment under a later
 * generation. */
START_TEST(test_removed_two_replica_object_frees_both_ranges)
{
    uint64_t a[2], g[2];
    mc_uuid_t sa[2];

    master_start();
    mount_named(SEG_BASE, "127.0.0.1:1");
    mount_named(SEG_BASE2, "127.0.0.1:2");
    put_two("k", 40 * 1024, 0);
    get_n("k", 2, a, sa); /* a 1 s lease */
    {
        mc_wire_remove_req_t req = {.key = S("k"), .force = 1};
        mc_wire_remove_resp_t resp;
        ck_assert_status_ok(mc_master_call_remove(conn, &req, &resp));
    }
    ck_assert_int_eq(exists("k"), 0);
    ck_assert_status_ok(put_start(client_a, "all", SEG_SIZE, 0, &a[0]));
    g[0] = last_gen;
    ck_assert_status_ok(put_start(client_a, "all2", SEG_SIZE, 0, &a[1]));
    g[1] = last_gen;
    ck_assert_msg(a[0] != a[1], "the two segments should each take a whole object");
    ck_assert_msg(mc_gen_base(g[0]) != mc_gen_base(g[1]), "two segments, two registrations");
    /* each moved on once from the counter its owner mounted it with (0) */
    for (int i = 0; i < 2; i++)
        ck_assert_uint_eq(g[i] & MC_GEN_COUNTER_MASK, 1);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* PUT_END/REVOKE answer by owner; an upsert makes the upserter the owner. */
START_TEST(test_owner_follows_the_writer)
{
    master_start();
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "k", 100, 0, NULL));
    ck_assert_status_eq(put_end(client_b, "k", 0), MC_ILLEGAL_CLIENT);
    ck_assert_status_ok(put_end(client_a, "k", 0));
    ck_assert_status_ok(put_end(client_a, "k", 0)); /* a retried PutEnd */
    ck_assert_status_eq(put_end(client_b, "k", 0), MC_ILLEGAL_CLIENT);
    /* resized: fresh buffers, the object passes to B at UPSERT_END */
    ck_assert_status_ok(put_start(client_b, "k", 200, 1, NULL));
    ck_assert_status_eq(put_end(client_a, "k", 1), MC_ILLEGAL_CLIENT);
    ck_assert_status_ok(put_end(client_b, "k", 1));
    ck_assert_status_eq(put_end(client_a, "k", 0), MC_ILLEGAL_CLIENT);
    ck_assert_status_ok(put_end(client_b, "k", 0));
    /* same size, no lease: in place, owned by A from UPSERT_START on */
    ck_assert_status_ok(put_start(client_a, "k", 200, 1, NULL));
    ck_assert_status_eq(put_end(client_b, "k", 1), MC_ILLEGAL_CLIENT);
    ck_assert_status_ok(put_end(client_a, "k", 1));
    ck_assert_status_ok(put_end(client_a, "k", 0));
    ck_assert_status_eq(put_end(client_b, "k", 0), MC_ILLEGAL_CLIENT);
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

/* Shutdown with a preempted put's record and a live object's old buffer
 * both still on the discarded list. */
START_TEST(test_shutdown_with_held_ranges)
{
    master_start();
    mount(SEG_BASE);
    ck_assert_status_ok(put_start(client_a, "z", 8192, 0, NULL));
    ck_assert_status_ok(put_start(client_b, "z", 8192, 0, NULL));
    ck_assert_status_ok(put_start(client_a, "r", 4096, 0, NULL));
    ck_assert_status_ok(put_end(client_a, "r", 0));
    ck_assert_status_ok(get("r", NULL));
    ck_assert_status_ok(put_start(client_a, "r", 100, 1, NULL));
    ck_assert_status_ok(put_end(client_a, "r", 1));
    ck_assert_int_eq(master_stop(), 0);
}
END_TEST

Suite *mc_test_master_mem_suite(void)
{
    Suite *s  = suite_create("master_mem");
    TCase *tc = tcase_create("master");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_preempted_put_holds_its_range_until_release);
    tcase_add_test(tc, test_removed_leased_object_frees_at_once_under_a_later_generation);
    tcase_add_test(tc, test_forced_remove_of_a_put_in_progress_fences_its_segment);
    tcase_add_test(tc, test_remove_during_a_resized_upsert_fences_its_buffers);
    tcase_add_test(tc, test_upsert_end_without_its_start_is_refused);
    tcase_add_test(tc, test_unmount_drops_every_kind_of_replica);
    tcase_add_test(tc, test_embedded_and_listed_replicas);
    tcase_add_test(tc, test_removed_two_replica_object_frees_both_ranges);
    tcase_add_test(tc, test_owner_follows_the_writer);
    tcase_add_test(tc, test_shutdown_with_held_ranges);
    tcase_add_test(tc, test_batches_answer_every_key_for_itself);
    suite_add_tcase(s, tc);
    return s;
}

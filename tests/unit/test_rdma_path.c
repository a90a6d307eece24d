/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The RDMA data path, as far as it runs without a device: the slice
 * planner across NICs, WR batching, the remote range and rkey checks, the
 * descriptor's RDMA members, the queue-pair attributes built from a
 * handshake endpoint, the GID choice, the handshake frame between two
 * engines over a real TCP listener, and the rdma transport's refusals
 * when libibverbs has no device.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include <mooncake/transfer.h>

#include "check_suites.h"
#include "common/log.h"
#include "te_util.h"
#include "transfer/descriptor.h"
#include "transfer/engine.h"
#include "transfer/proto.h"
#include "transfer/rdma/codec.h"
#include "transfer/rdma/plan.h"
#include "transfer/rdma/rdma.h"
#include "transfer/tcp/tcp.h"
#ifdef MC_HAVE_RDMA
#include <infiniband/verbs.h>
#include "transfer/rdma/verbs.h"
#endif

#define MiB (1024ull * 1024ull)

/* ---- planner -------------------------------------------------------------- */

/* Slices tile the request in order, each within one MR on both sides and
 * at most slice bytes, paths dealt round-robin. */
static void check_plan(const mc_rdma_side_t *l, const mc_rdma_side_t *r, uint64_t len,
                       uint64_t slice, uint32_t npaths, uint32_t first)
{
    mc_rdma_slice_t sl[512];
    size_t n = mc_rdma_plan(l, r, len, slice, npaths, first, sl, 512);
    uint64_t at = 0;
    ck_assert_msg((n > 0) && (n <= 512), "the plan should have 1..512 slices, not %zu", n);
    ck_assert_uint_eq(mc_rdma_plan(l, r, len, slice, npaths, first, NULL, 0), n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(sl[i].local == l->addr + at, "slice %zu should start at local +%llu", i,
                      (unsigned long long)at);
        ck_assert_uint_eq(sl[i].remote, r->addr + at);
        ck_assert_msg((sl[i].len > 0) && ((slice == 0) || (sl[i].len <= slice)),
                      "slice %zu is %u bytes, above the slice size", i, sl[i].len);
        ck_assert_uint_eq(sl[i].path, (first + i) % npaths);
        ck_assert_uint_eq(sl[i].lmr, mc_rdma_mr_index(l->base, l->max_mr, sl[i].local));
        ck_assert_msg(mc_rdma_mr_index(l->base, l->max_mr, sl[i].local + sl[i].len - 1) ==
                          sl[i].lmr, "slice %zu crosses a local MR", i);
        ck_assert_uint_eq(sl[i].rmr, mc_rdma_mr_index(r->base, r->max_mr, sl[i].remote));
        ck_assert_msg(mc_rdma_mr_index(r->base, r->max_mr, sl[i].remote + sl[i].len - 1) ==
                          sl[i].rmr, "slice %zu crosses a remote MR", i);
        at += sl[i].len;
    }
    ck_assert_uint_eq(at, len);
}

START_TEST(test_plan_across_nics)
{
    mc_rdma_side_t l = {0x10000, 0, 0x10000}, r = {0x900000, 0, 0x900000};
    mc_rdma_slice_t sl[8];
    /* 4 MiB in 512 KiB slices over 3 NICs: 8 slices, paths 2,0,1,2,... */
    check_plan(&l, &r, 4 * MiB, 512 * 1024, 3, 2);
    ck_assert_uint_eq(mc_rdma_plan(&l, &r, 4 * MiB, 512 * 1024, 3, 2, sl, 8), 8);
    ck_assert_uint_eq(sl[0].path, 2);
    ck_assert_uint_eq(sl[1].path, 0);
    ck_assert_uint_eq(sl[7].path, 0);
    /* MR cuts on both sides, not aligned with each other or the slices */
    l = (mc_rdma_side_t){1000, 3 * MiB, 1000 + 5 * MiB + 17};
    r = (mc_rdma_side_t){7, 2 * MiB, 7 + MiB + 3};
    check_plan(&l, &r, 9 * MiB + 5, 700 * 1024, 4, 0);
    check_plan(&l, &r, 9 * MiB + 5, 0, 1, 0);
    check_plan(&l, &r, 1, 0, 2, 1);
    /* a long request without a slice size is cut below 2^32 per WR */
    l = (mc_rdma_side_t){0, 0, 0};
    r = (mc_rdma_side_t){0, 0, 0};
    ck_assert_uint_eq(mc_rdma_plan(&l, &r, 5ull << 30, 0, 2, 0, sl, 8), 5);
    ck_assert_uint_eq(sl[4].len, 1u << 30);
    /* refusals: no path, empty, below the base, wrapping */
    l = (mc_rdma_side_t){4096, 0, 4096};
    r = (mc_rdma_side_t){4096, 0, 4096};
    ck_assert_uint_eq(mc_rdma_plan(&l, &r, 100, 0, 0, 0, sl, 8), 0);
    ck_assert_uint_eq(mc_rdma_plan(&l, &r, 0, 0, 1, 0, sl, 8), 0);
    r.addr = 4095;
    ck_assert_uint_eq(mc_rdma_plan(&l, &r, 100, 0, 1, 0, sl, 8), 0);
    r = (mc_rdma_side_t){0, 0, UINT64_MAX - 10};
    ck_assert_uint_eq(mc_rdma_plan(&l, &r, 100, 0, 1, 0, sl, 8), 0);
}
END_TEST

START_TEST(test_tunables)
{
    mc_rdma_tunables_t t;
    ck_assert_status_ok(mc_rdma_tunables(NULL, "", NULL, &t));
    ck_assert_uint_eq(t.max_wr, 256);
    ck_assert_uint_eq(t.slice, 65536);
    ck_assert_uint_eq(t.mtu, 0);
    ck_assert_status_ok(mc_rdma_tunables("16", "1MiB", "1024", &t));
    ck_assert_uint_eq(t.max_wr, 16);
    ck_assert_uint_eq(t.slice, 1024 * 1024);
    ck_assert_uint_eq(t.mtu, 3); /* IBV_MTU_1024 */
    ck_assert_status_ok(mc_rdma_tunables(NULL, NULL, "4096", &t));
    ck_assert_uint_eq(t.mtu, 5);
    ck_assert_status_eq(mc_rdma_tunables("4097", NULL, NULL, &t), MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_MAX_WR"));
    ck_assert_status_eq(mc_rdma_tunables("-1", NULL, NULL, &t), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_rdma_tunables(NULL, "1024", NULL, &t), MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_SLICE_SIZE"));
    ck_assert_status_eq(mc_rdma_tunables(NULL, "2GiB", NULL, &t), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_rdma_tunables(NULL, "fast", NULL, &t), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_rdma_tunables(NULL, NULL, "9000", &t), MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_MTU"));
    ck_assert_status_eq(mc_rdma_tunables(NULL, NULL, "128", &t), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_wr_batching)
{
    /* as many as fit, at most one chain */
    ck_assert_uint_eq(mc_rdma_batch_size(100, 0, 64, 16), 16);
    ck_assert_uint_eq(mc_rdma_batch_size(100, 60, 64, 16), 4);
    ck_assert_uint_eq(mc_rdma_batch_size(3, 0, 64, 16), 3);
    ck_assert_uint_eq(mc_rdma_batch_size(100, 64, 64, 16), 0);
    ck_assert_uint_eq(mc_rdma_batch_size(100, 70, 64, 16), 0); /* never negative room */
    ck_assert_uint_eq(mc_rdma_batch_size(0, 0, 64, 16), 0);
}
END_TEST

/* ---- descriptors with RDMA members ------------------------------------------ */

/* Two NICs, rdma_mr_size 1 MiB; buffer 0 is 2.5 MiB (3 MRs), buffer 1 has
 * no rkeys (registered by an older holder). */
static void desc_make(mc_te_desc_t *d)
{
    mc_te_desc_init(d);
    d->name = strdup("10.0.0.2:12345");
    snprintf(d->protocol, sizeof(d->protocol), "rdma");
    d->tcp_data_port = 12345;
    d->ndevices      = 2;
    d->devices       = calloc(2, sizeof(*d->devices));
    snprintf(d->devices[0].name, 64, "mlx5_0");
    snprintf(d->devices[1].name, 64, "mlx5_1");
    d->devices[0].lid = 7;
    for (int i = 0; i < 16; i++)
        d->devices[1].gid[i] = (uint8_t)(i * 17);
    d->rdma_mr_size = MiB;
    d->nbuffers     = 2;
    d->buffers      = calloc(2, sizeof(*d->buffers));
    d->buffers[0]   = (mc_te_buf_desc_t){.addr = 0x100000, .length = 5 * MiB / 2};
    snprintf(d->buffers[0].name, sizeof(d->buffers[0].name), "cpu:0");
    d->buffers[0].nrkeys = 6;
    d->buffers[0].rkeys  = calloc(6, sizeof(uint32_t));
    for (uint32_t k = 0; k < 6; k++)
        d->buffers[0].rkeys[k] = 0xa000 + k; /* MR k/2, NIC k%2 */
    d->buffers[1] = (mc_te_buf_desc_t){.addr = 0x10000000, .length = 4096};
}

START_TEST(test_remote_key_checks)
{
    mc_te_desc_t d;
    uint32_t rkey = 0;
    const mc_te_buf_desc_t *b = NULL;
    desc_make(&d);
    ck_assert_status_ok(mc_rdma_remote_key(&d, MC_TE_READ, 0x100000, 4096, 1, &rkey, &b));
    ck_assert_uint_eq(rkey, 0xa001);
    ck_assert_ptr_eq(b, &d.buffers[0]);
    /* third MR, NIC 0 */
    ck_assert_status_ok(mc_rdma_remote_key(&d, MC_TE_WRITE, 0x100000 + 2 * MiB, MiB / 2, 0,
                                           &rkey, NULL));
    ck_assert_uint_eq(rkey, 0xa004);
    /* across an MR boundary: refused */
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, 0x100000 + MiB - 1, 2, 0, &rkey,
                                           NULL), MC_INVALID_READ);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "crosses"));
    /* past the buffer's end, before it, between buffers */
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_WRITE, 0x100000 + 5 * MiB / 2 - 1, 2, 0,
                                           &rkey, NULL), MC_INVALID_WRITE);
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, 0xfffff, 1, 0, &rkey, NULL),
                        MC_INVALID_READ);
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, 0x5000000, 1, 0, &rkey, NULL),
                        MC_INVALID_READ);
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, 0x100000, 0, 0, &rkey, NULL),
                        MC_INVALID_READ);
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, UINT64_MAX - 1, 4, 0, &rkey, NULL),
                        MC_INVALID_READ);
    /* no rkey published, or no such NIC: not one-sided (tcp instead) */
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, 0x10000000, 8, 0, &rkey, NULL),
                        MC_NOT_SUPPORTED);
    ck_assert_status_eq(mc_rdma_remote_key(&d, MC_TE_READ, 0x100000, 8, 2, &rkey, NULL),
                        MC_NOT_SUPPORTED);
    ck_assert_int_eq(mc_rdma_desc_device(&d, "mlx5_1"), 1);
    ck_assert_int_eq(mc_rdma_desc_device(&d, "mlx5_7"), -1);
    ck_assert_ptr_eq(mc_te_desc_find(&d, 0x10000000, 4096), &d.buffers[1]);
    ck_assert_ptr_null(mc_te_desc_find(&d, 0x10000000, 4097));
    mc_te_desc_cleanup(&d);
}
END_TEST

/* Replace the first occurrence of @p from in @p json by @p to and decode. */
static mc_status_t decode_edited(const char *json, const char *from, const char *to)
{
    char buf[8192];
    const char *at = strstr(json, from);
    mc_te_desc_t d;
    mc_status_t st;
    ck_assert_msg(at != NULL, "the encoded descriptor should contain %s: %s", from, json);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    st = mc_te_desc_decode(buf, strlen(buf), &d);
    if (st == MC_OK)
        mc_te_desc_cleanup(&d);
    return st;
}

START_TEST(test_descriptor_rdma_members)
{
    mc_te_desc_t d, back;
    char *json = NULL;
    size_t len = 0;
    desc_make(&d);
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_ptr_nonnull(strstr(json, "\"rkey\":[40960,40961,40962,40963,40964,40965]"));
    ck_assert_ptr_nonnull(strstr(json, "\"gid\":\"00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff\""));
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    ck_assert_uint_eq(back.ndevices, 2);
    ck_assert_str_eq(back.devices[1].name, "mlx5_1");
    ck_assert_uint_eq(back.devices[0].lid, 7);
    ck_assert_int_eq(memcmp(back.devices[1].gid, d.devices[1].gid, 16), 0);
    ck_assert_uint_eq(back.rdma_mr_size, MiB);
    ck_assert_uint_eq(back.buffers[0].nrkeys, 6);
    ck_assert_uint_eq(back.buffers[0].rkeys[5], 0xa005);
    ck_assert_uint_eq(back.buffers[1].nrkeys, 0);
    mc_te_desc_cleanup(&back);
    /* hostile members are refused */
    ck_assert_status_eq(decode_edited(json, "40965]", "40965,1]"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "40960,", "4294967296,"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "40960,", "-1,"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "00:11:22", "00:11:2g"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "00:11:22", "00:11-22"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"lid\":7", "\"lid\":65536"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"rdma_mr_size\":1048576", "\"rdma_mr_size\":4096"),
                        MC_DESERIALIZE_FAIL);
    /* an MR size twice as large: 2 MRs, so the 6 keys no longer fit */
    ck_assert_status_eq(decode_edited(json, "\"rdma_mr_size\":1048576",
                                      "\"rdma_mr_size\":2097152"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"devices\":[", "\"devices\":[7,"),
                        MC_DESERIALIZE_FAIL);
    free(json);
    mc_te_desc_cleanup(&d);
}
END_TEST

/* ---- queue-pair attributes and GID ---------------------------------------- */

/* The generation words (docs/transfer.md §12.8): "rdma_gen_words" and a
 * buffer's "rdma_gen_slot" round-trip; every malformed form is refused. */
START_TEST(test_descriptor_gen_words)
{
    mc_te_desc_t d, back;
    char *json = NULL;
    size_t len = 0;
    desc_make(&d);
    d.gen_words.addr     = 0x7000000;
    d.gen_words.nwords   = 4096;
    d.gen_words.rkeys[0] = 0xb000;
    d.gen_words.rkeys[1] = UINT32_MAX;
    d.buffers[0].gen_slot     = 4095;
    d.buffers[0].has_gen_slot = 1;
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    ck_assert_uint_eq(back.gen_words.addr, 0x7000000);
    ck_assert_uint_eq(back.gen_words.nwords, 4096);
    ck_assert_uint_eq(back.gen_words.rkeys[0], 0xb000);
    ck_assert_uint_eq(back.gen_words.rkeys[1], UINT32_MAX);
    ck_assert(back.buffers[0].has_gen_slot && (back.buffers[0].gen_slot == 4095));
    ck_assert(!back.buffers[1].has_gen_slot);
    mc_te_desc_cleanup(&back);
    /* a slot past the count, negative, or a count of 0 or too large */
    ck_assert_status_eq(decode_edited(json, "\"rdma_gen_slot\":4095", "\"rdma_gen_slot\":4096"),
                        MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"rdma_gen_slot\":4095", "\"rdma_gen_slot\":-1"),
                        MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"count\":4096", "\"count\":0"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"count\":4096", "\"count\":65537"),
                        MC_DESERIALIZE_FAIL);
    /* one key per device, each 32 bits */
    ck_assert_status_eq(decode_edited(json, "[45056,4294967295]", "[45056]"), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "[45056,4294967295]", "[45056,4294967296]"),
                        MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "[45056,4294967295]", "[45056,\"1\"]"),
                        MC_DESERIALIZE_FAIL);
    /* words that would wrap the address space, or not an object */
    ck_assert_status_eq(decode_edited(json, "\"addr\":117440512", "\"addr\":9223372036854775800"),
                        MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(decode_edited(json, "\"rdma_gen_words\":{", "\"rdma_gen_words\":[{"),
                        MC_DESERIALIZE_FAIL);
    /* a slot without words */
    ck_assert_status_eq(decode_edited(json, "\"rdma_gen_words\"", "\"rdma_gen_wordz\""),
                        MC_DESERIALIZE_FAIL);
    free(json);
    mc_te_desc_cleanup(&d);
}
END_TEST

START_TEST(test_qp_attrs_from_handshake)
{
    mc_rdma_local_t roce = {.port = 1, .mtu = 5, .gid_index = 3, .ethernet = 1, .psn = 0x1abcdef};
    mc_rdma_local_t ib   = {.port = 2, .mtu = 4, .gid_index = 0, .ethernet = 0, .psn = 42};
    mc_rdma_ep_t ep;
    mc_rdma_qp_attrs_t a;

    memset(&ep, 0, sizeof(ep));
    snprintf(ep.nic, sizeof(ep.nic), "mlx5_3");
    ep.port = 1;
    ep.mtu  = 3;
    ep.lid  = 0;
    ep.qpn  = 0x123;
    ep.psn  = 0x456;
    /* RoCE without a peer GID cannot route */
    ck_assert_status_eq(mc_rdma_qp_attrs(&roce, &ep, &a), MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_GID_INDEX"));
    ep.gid[10] = 0xff;
    ep.gid[11] = 0xff;
    ep.gid[15] = 9;
    ck_assert_status_ok(mc_rdma_qp_attrs(&roce, &ep, &a));
    ck_assert_uint_eq(a.path_mtu, 3); /* min of both ends */
    ck_assert_uint_eq(a.dest_qpn, 0x123);
    ck_assert_uint_eq(a.rq_psn, 0x456);
    ck_assert_uint_eq(a.sq_psn, 0xabcdef); /* 24 bits of ours */
    ck_assert_int_eq(a.is_global, 1);
    ck_assert_uint_eq(a.sgid_index, 3);
    ck_assert_int_eq(memcmp(a.dgid, ep.gid, 16), 0);
    ck_assert_uint_eq(a.port, 1);
    ck_assert_uint_eq(a.access, MC_RDMA_ACCESS_LOCAL_WRITE | MC_RDMA_ACCESS_REMOTE_READ |
                                    MC_RDMA_ACCESS_REMOTE_WRITE);
    /* InfiniBand with a LID: no GRH */
    memset(ep.gid, 0, 16);
    ep.lid = 0x21;
    ep.mtu = 5;
    ck_assert_status_ok(mc_rdma_qp_attrs(&ib, &ep, &a));
    ck_assert_int_eq(a.is_global, 0);
    ck_assert_uint_eq(a.dlid, 0x21);
    ck_assert_uint_eq(a.path_mtu, 4);
    ck_assert_uint_eq(a.port, 2);
    /* InfiniBand with neither LID nor GID; bad MTU; port 0 */
    ep.lid = 0;
    ck_assert_status_eq(mc_rdma_qp_attrs(&ib, &ep, &a), MC_INVALID_PARAMS);
    ep.lid = 1;
    ep.mtu = 6;
    ck_assert_status_eq(mc_rdma_qp_attrs(&ib, &ep, &a), MC_INVALID_PARAMS);
    ep.mtu  = 1;
    ib.port = 0;
    ck_assert_status_eq(mc_rdma_qp_attrs(&ib, &ep, &a), MC_INVALID_PARAMS);
#ifdef MC_HAVE_RDMA
    {
        struct ibv_qp_attr attr;
        int mask = 0;
        ck_assert_status_ok(mc_rdma_qp_attrs(&roce, &(mc_rdma_ep_t){.nic = "x", .port = 1,
                                                                 .mtu = 4, .qpn = 77, .psn = 5,
                                                                 .gid = {1}}, &a));
        ck_assert_int_eq(mc_rdma_verbs_attr(&a, IBV_QPS_INIT, &attr, &mask), 0);
        ck_assert_int_eq(attr.qp_state, IBV_QPS_INIT);
        ck_assert_int_eq(attr.port_num, 1);
        ck_assert_int_eq(attr.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                                   IBV_ACCESS_REMOTE_WRITE);
        ck_assert_int_eq(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_ACCESS_FLAGS);
        ck_assert_int_eq(mc_rdma_verbs_attr(&a, IBV_QPS_RTR, &attr, &mask), 0);
        ck_assert_int_eq(attr.path_mtu, IBV_MTU_2048);
        ck_assert_uint_eq(attr.dest_qp_num, 77);
        ck_assert_uint_eq(attr.rq_psn, 5);
        ck_assert_int_eq(attr.ah_attr.is_global, 1);
        ck_assert_uint_eq(attr.ah_attr.grh.sgid_index, 3);
        ck_assert_uint_eq(attr.ah_attr.grh.dgid.raw[0], 1);
        ck_assert_int_eq(mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU),
                         IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU);
        ck_assert_int_eq(mc_rdma_verbs_attr(&a, IBV_QPS_RTS, &attr, &mask), 0);
        ck_assert_uint_eq(attr.sq_psn, 0xabcdef);
        ck_assert_int_eq(mask & IBV_QP_SQ_PSN, IBV_QP_SQ_PSN);
        ck_assert_int_eq(mc_rdma_verbs_attr(&a, IBV_QPS_SQD, &attr, &mask), -1);
    }
    /* completions: what a request reports, as the tcp path would */
    ck_assert_status_ok(mc_rdma_verbs_wc_status(IBV_WC_SUCCESS, MC_TE_READ));
    ck_assert_status_eq(mc_rdma_verbs_wc_status(IBV_WC_REM_ACCESS_ERR, MC_TE_READ),
                        MC_INVALID_READ);
    ck_assert_status_eq(mc_rdma_verbs_wc_status(IBV_WC_REM_ACCESS_ERR, MC_TE_WRITE),
                        MC_INVALID_WRITE);
    ck_assert_status_eq(mc_rdma_verbs_wc_status(IBV_WC_LOC_PROT_ERR, MC_TE_WRITE),
                        MC_INVALID_WRITE);
    ck_assert_status_eq(mc_rdma_verbs_wc_status(IBV_WC_RETRY_EXC_ERR, MC_TE_READ),
                        MC_TRANSFER_FAIL);
    ck_assert_status_eq(mc_rdma_verbs_wc_status(IBV_WC_WR_FLUSH_ERR, MC_TE_WRITE),
                        MC_TRANSFER_FAIL);
#endif
}
END_TEST

START_TEST(test_gid_choice)
{
    uint8_t gids[4][16];
    uint8_t idx = 99;
    memset(gids, 0, sizeof(gids));
    ck_assert_status_eq(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, NULL, &idx),
                        MC_NOT_SUPPORTED);
    gids[0][0] = 0xfe; /* link-local fe80:: */
    gids[0][1] = 0x80;
    gids[0][15] = 1;
    ck_assert_status_ok(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, NULL, &idx));
    ck_assert_uint_eq(idx, 0);
    gids[1][0] = 0x20; /* a global IPv6 GID */
    gids[1][15] = 2;
    ck_assert_status_ok(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, "", &idx));
    ck_assert_uint_eq(idx, 1);
    gids[3][10] = 0xff; /* ::ffff:10.0.0.3, RoCE v2 over IPv4 */
    gids[3][11] = 0xff;
    gids[3][12] = 10;
    gids[3][15] = 3;
    ck_assert_status_ok(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, NULL, &idx));
    ck_assert_uint_eq(idx, 3);
    /* MC_GID_INDEX: used as given, refused when empty, out of range or junk */
    ck_assert_status_ok(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, "1", &idx));
    ck_assert_uint_eq(idx, 1);
    ck_assert_status_eq(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, "2", &idx),
                        MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_GID_INDEX"));
    ck_assert_status_eq(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, "4", &idx),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_rdma_gid_pick((const uint8_t(*)[16])gids, 4, "x1", &idx),
                        MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_GID_INDEX"));
}
END_TEST

/* ---- the handshake frame between two engines ------------------------------- */

static int hs_calls;
static uint64_t hs_last_id;

/* A target handler that answers each endpoint with its own, qpn + 1. */
static mc_status_t hs_echo(void *arg, uint64_t conn_id, const uint8_t *req, size_t len,
                           uint8_t *resp, size_t cap, size_t *resp_len_p)
{
    mc_rdma_ep_t eps[MC_RDMA_HS_MAX_EPS];
    size_t n = 0;
    mc_status_t st;
    (void)arg;
    hs_calls++;
    hs_last_id = conn_id;
    st         = mc_rdma_hs_decode(req, len, eps, MC_RDMA_HS_MAX_EPS, &n);
    if (st != MC_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        eps[i].qpn = (eps[i].qpn + 1) & 0xffffffu;
        snprintf(eps[i].nic, sizeof(eps[i].nic), "srv_%zu", i);
    }
    *resp_len_p = mc_rdma_hs_encode(eps, n, resp, cap);
    return (*resp_len_p > 0) ? MC_OK : MC_INTERNAL_ERROR;
}

START_TEST(test_handshake_over_tcp)
{
    mc_te_segment_id_t seg;
    te_setup_two();
    seg = te_open(A, B);
    mc_rdma_ep_t eps[2], back[4];
    uint8_t req[MC_RDMA_HS_MAX_SIZE], *resp = NULL;
    size_t qlen, rlen = 0, n = 0;
    void *peer;
    static uint8_t mem[4096];

    memset(eps, 0, sizeof(eps));
    for (int i = 0; i < 2; i++) {
        snprintf(eps[i].nic, sizeof(eps[i].nic), "mlx5_%d", i);
        eps[i].port = 1;
        eps[i].mtu  = 5;
        eps[i].qpn  = 100u + (uint32_t)i;
        eps[i].psn  = 7;
        eps[i].gid[15] = (uint8_t)i;
    }
    qlen = mc_rdma_hs_encode(eps, 2, req, sizeof(req));
    ck_assert_uint_gt(qlen, 0);
    peer = A->segs[seg]->peer;
    /* a tcp engine has no handler: NOT_SUPPORTED, and the lane stays usable */
    ck_assert_status_eq(mc_tcp_hs_call(peer, 1, req, qlen, &resp, &rlen), MC_NOT_SUPPORTED);
    ck_assert_status_ok(mc_te_mem_reg(B, mem, sizeof(mem), "cpu:0", MC_TE_MEM_REMOTE_ACCESS));
    memset(mem, 0x5a, sizeof(mem));
    {
        uint8_t got[64];
        ck_assert_status_ok(te_xfer1(A, MC_TE_READ, got, (uint64_t)(uintptr_t)mem, 64, seg));
        ck_assert_uint_eq(got[63], 0x5a);
    }
    /* with a handler: the record goes through the listener and back */
    mc_tcp_hs_handler_set(B->tp, hs_echo, NULL);
    hs_calls = 0;
    ck_assert_status_ok(mc_tcp_hs_call(peer, 0xfeedbeef12345ull, req, qlen, &resp, &rlen));
    ck_assert_int_eq(hs_calls, 1);
    ck_assert_uint_eq(hs_last_id, 0xfeedbeef12345ull);
    ck_assert_status_ok(mc_rdma_hs_decode(resp, rlen, back, 4, &n));
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(back[1].qpn, 102);
    ck_assert_str_eq(back[0].nic, "srv_0");
    ck_assert_int_eq(memcmp(back[1].gid, eps[1].gid, 16), 0);
    free(resp);
    resp = NULL;
    /* a malformed record is refused by the target, the connection lives on */
    req[5] = 9;
    ck_assert_status_eq(mc_tcp_hs_call(peer, 2, req, qlen, &resp, &rlen), MC_DESERIALIZE_FAIL);
    ck_assert_ptr_null(resp);
    req[5] = MC_RDMA_HS_VERSION;
    ck_assert_status_ok(mc_tcp_hs_call(peer, 3, req, qlen, &resp, &rlen));
    free(resp);
    /* the initiator refuses records the target would drop */
    ck_assert_status_eq(mc_tcp_hs_call(peer, 4, req, 0, &resp, &rlen), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_tcp_hs_call(peer, 4, req, MC_TE_HS_MAX + 1, &resp, &rlen),
                        MC_INVALID_PARAMS);
    mc_tcp_hs_handler_set(B->tp, NULL, NULL);
    te_teardown_two();
}
END_TEST

#ifdef MC_HAVE_RDMA
/* The rdma transport's install on a host whose libibverbs lists no
 * device: refused with the NIC named, nothing left running. */
START_TEST(test_transport_refusals_without_device)
{
    mc_te_t *te = calloc(1, sizeof(*te));
    void *priv  = NULL;
    uint16_t port = 0;
    ck_assert_ptr_nonnull(te);
    te->cfg.io_timeout_s = 1;
    te->cfg.max_conns    = 4;
    te->cfg.lanes        = 1;
    /* no NIC selected */
    ck_assert_status_eq(mc_rdma_transport_ops.install(te, "127.0.0.1", 0, &priv, &port),
                        MC_NOT_SUPPORTED);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "no RDMA device"));
    snprintf(te->rdma_nics[0].name, sizeof(te->rdma_nics[0].name), "mlx5_4");
    te->rdma_nics[0].port = 1;
    te->rdma_nnics        = 1;
    ck_assert_status_eq(mc_rdma_transport_ops.install(te, "127.0.0.1", 0, &priv, &port),
                        MC_NOT_SUPPORTED);
    ck_assert_msg(strstr(mc_last_error_detail(), "mlx5_4") != NULL ||
                      strstr(mc_last_error_detail(), "no RDMA device") != NULL,
                  "the refusal should name the NIC: %s", mc_last_error_detail());
    ck_assert_ptr_null(priv);
    /* a bad tunable is refused by name before any device is opened */
    ck_assert_int_eq(setenv("MC_MAX_WR", "0", 1), 0);
    ck_assert_status_eq(mc_rdma_transport_ops.install(te, "127.0.0.1", 0, &priv, &port),
                        MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_MAX_WR"));
    unsetenv("MC_MAX_WR");
    ck_assert_int_eq(setenv("MC_MTU", "1500", 1), 0);
    ck_assert_status_eq(mc_rdma_transport_ops.install(te, "127.0.0.1", 0, &priv, &port),
                        MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "MC_MTU"));
    unsetenv("MC_MTU");
    free(te);
}
END_TEST
#endif

Suite *mc_test_rdma_path_suite(void)
{
    Suite *s  = suite_create("rdma_path");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_plan_across_nics);
    tcase_add_test(tc, test_tunables);
    tcase_add_test(tc, test_wr_batching);
    tcase_add_test(tc, test_remote_key_checks);
    tcase_add_test(tc, test_descriptor_rdma_members);
    tcase_add_test(tc, test_descriptor_gen_words);
    tcase_add_test(tc, test_qp_attrs_from_handshake);
    tcase_add_test(tc, test_gid_choice);
    tcase_add_test(tc, test_handshake_over_tcp);
#ifdef MC_HAVE_RDMA
    tcase_add_test(tc, test_transport_refusals_without_device);
#endif
    suite_add_tcase(s, tc);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* Device-free decisions of the RDMA data path (plan.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "transfer/rdma/plan.h"

/* A WR carries a 32-bit length; keep slices well below it. */
#define PLAN_MAX_PIECE (1ull << 30)

/* Bytes from @p s->addr + off to the end of its MR. */
static uint64_t mr_room(const mc_rdma_side_t *s, uint64_t at)
{
    uint64_t off = at - s->base;
    if (s->max_mr == 0)
        return UINT64_MAX;
    return (off / s->max_mr + 1) * s->max_mr - off;
}

size_t mc_rdma_plan(const mc_rdma_side_t *local, const mc_rdma_side_t *remote, uint64_t len,
                    uint64_t slice, uint32_t npaths, uint32_t first_path,
                    mc_rdma_slice_t *out, size_t cap)
{
    uint64_t done = 0;
    size_t n      = 0;

    if ((len == 0) || (npaths == 0) || (local->addr < local->base) ||
        (remote->addr < remote->base) || (local->addr > UINT64_MAX - len) ||
        (remote->addr > UINT64_MAX - len))
        return 0;
    if ((slice == 0) || (slice > PLAN_MAX_PIECE))
        slice = PLAN_MAX_PIECE;
    while (done < len) {
        uint64_t la = local->addr + done, ra = remote->addr + done;
        uint64_t piece = MC_MIN(len - done, slice);
        piece          = MC_MIN(piece, mr_room(local, la));
        piece          = MC_MIN(piece, mr_room(remote, ra));
        if (n < cap) {
            out[n].local  = la;
            out[n].remote = ra;
            out[n].len    = (uint32_t)piece;
            out[n].path   = (uint32_t)((first_path + n) % npaths);
            out[n].lmr    = (uint32_t)mc_rdma_mr_index(local->base, local->max_mr, la);
            out[n].rmr    = (uint32_t)mc_rdma_mr_index(remote->base, remote->max_mr, ra);
        }
        n++;
        done += piece;
    }
    return n;
}

int mc_rdma_desc_device(const mc_te_desc_t *d, const char *name)
{
    for (size_t i = 0; i < d->ndevices; i++)
        if (strcmp(d->devices[i].name, name) == 0)
            return (int)i;
    return -1;
}

mc_status_t mc_rdma_remote_key(const mc_te_desc_t *d, mc_te_op_t op, uint64_t addr,
                               uint64_t len, size_t dev, uint32_t *rkey_p,
                               const mc_te_buf_desc_t **buf_p)
{
    const char *what = (op == MC_TE_READ) ? "read" : "write";
    mc_status_t bad  = (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
    const mc_te_buf_desc_t *b = mc_te_desc_find(d, addr, len);
    size_t mr;

    if ((b == NULL) || (len == 0)) {
        mc_set_error_detail("rdma %s of [0x%llx, +%llu) refused: not inside one buffer of "
                            "segment %s", what, (unsigned long long)addr,
                            (unsigned long long)len, d->name ? d->name : "?");
        return bad;
    }
    mr = mc_rdma_mr_index(b->addr, d->rdma_mr_size, addr);
    if (mc_rdma_mr_index(b->addr, d->rdma_mr_size, addr + len - 1) != mr) {
        mc_set_error_detail("rdma %s of [0x%llx, +%llu) crosses a memory region of segment %s",
                            what, (unsigned long long)addr, (unsigned long long)len,
                            d->name ? d->name : "?");
        return bad;
    }
    if ((dev >= d->ndevices) || (b->nrkeys == 0) || (mr * d->ndevices + dev >= b->nrkeys)) {
        mc_set_error_detail("segment %s publishes no rkey for [0x%llx, +%llu) on NIC #%zu",
                            d->name ? d->name : "?", (unsigned long long)addr,
                            (unsigned long long)len, dev);
        return MC_NOT_SUPPORTED;
    }
    *rkey_p = b->rkeys[mr * d->ndevices + dev];
    if (buf_p != NULL)
        *buf_p = b;
    return MC_OK;
}

static int gid_zero(const uint8_t *g)
{
    for (int i = 0; i < 16; i++)
        if (g[i] != 0)
            return 0;
    return 1;
}

mc_status_t mc_rdma_qp_attrs(const mc_rdma_local_t *local, const mc_rdma_ep_t *ep,
                             mc_rdma_qp_attrs_t *a_p)
{
    mc_rdma_qp_attrs_t a;
    int remote_gid = !gid_zero(ep->gid);

    if ((local->port == 0) || (local->mtu < 1) || (local->mtu > 5) || (ep->mtu < 1) ||
        (ep->mtu > 5) || (ep->port == 0)) {
        mc_set_error_detail("rdma: cannot connect to %s: port or MTU out of range (local "
                            "port %u mtu %u, remote port %u mtu %u)", ep->nic,
                            (unsigned)local->port, (unsigned)local->mtu, (unsigned)ep->port,
                            (unsigned)ep->mtu);
        return MC_INVALID_PARAMS;
    }
    if (local->ethernet && !remote_gid) {
        mc_set_error_detail("rdma: cannot connect to %s over RoCE: the peer sent no GID "
                            "(check MC_GID_INDEX on the peer)", ep->nic);
        return MC_INVALID_PARAMS;
    }
    if (!local->ethernet && (ep->lid == 0) && !remote_gid) {
        mc_set_error_detail("rdma: cannot connect to %s over InfiniBand: neither LID nor GID "
                            "(is the subnet manager running?)", ep->nic);
        return MC_INVALID_PARAMS;
    }
    memset(&a, 0, sizeof(a));
    a.port   = local->port;
    a.access = MC_RDMA_ACCESS_LOCAL_WRITE | MC_RDMA_ACCESS_REMOTE_WRITE |
               MC_RDMA_ACCESS_REMOTE_READ;
    a.path_mtu           = MC_MIN(local->mtu, ep->mtu);
    a.dest_qpn           = ep->qpn;
    a.rq_psn             = ep->psn;
    a.dlid               = ep->lid;
    a.is_global          = local->ethernet || (ep->lid == 0);
    if (a.is_global) {
        memcpy(a.dgid, ep->gid, 16);
        a.sgid_index = local->gid_index;
        a.hop_limit  = 64;
    }
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer      = 12;
    a.sq_psn             = local->psn & 0xffffffu;
    a.timeout            = 14; /* 4.096 us * 2^14 = 67 ms per retry */
    a.retry_cnt          = 7;
    a.rnr_retry          = 7;
    a.max_rd_atomic      = 16;
    *a_p                 = a;
    return MC_OK;
}

static int gid_v4_mapped(const uint8_t *g)
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g, pfx, sizeof(pfx)) == 0;
}

mc_status_t mc_rdma_gid_pick(const uint8_t (*gids)[16], size_t n, const char *env,
                             uint8_t *index_p)
{
    size_t i;
    if ((env != NULL) && (*env != '\0')) {
        uint64_t v;
        if ((mc_parse_u64(env, &v) != 0) || (v >= n) || (v > 255)) {
            mc_set_error_detail("MC_GID_INDEX=\"%s\": expected an integer below %zu (the "
                                "port's GID table)", env, MC_MIN(n, (size_t)256));
            return MC_INVALID_PARAMS;
        }
        if (gid_zero(gids[v])) {
            mc_set_error_detail("MC_GID_INDEX=%llu names an empty GID table entry",
                                (unsigned long long)v);
            return MC_INVALID_PARAMS;
        }
        *index_p = (uint8_t)v;
        return MC_OK;
    }
    for (i = 0; (i < n) && (i < 256); i++)
        if (!gid_zero(gids[i]) && gid_v4_mapped(gids[i]))
            goto found;
    for (i = 0; (i < n) && (i < 256); i++)
        if (!gid_zero(gids[i]) && !((gids[i][0] == 0xfe) && ((gids[i][1] & 0xc0) == 0x80)))
            goto found;
    if ((n > 0) && !gid_zero(gids[0])) {
        i = 0;
        goto found;
    }
    mc_set_error_detail("no usable GID in the port's table (%zu entries)", n);
    return MC_NOT_SUPPORTED;
found:
    *index_p = (uint8_t)i;
    return MC_OK;
}

mc_status_t mc_rdma_tunables(const char *max_wr, const char *slice, const char *mtu,
                             mc_rdma_tunables_t *t_p)
{
    mc_rdma_tunables_t t = {MC_RDMA_DEFAULT_MAX_WR, MC_RDMA_DEFAULT_SLICE, 0};
    uint64_t v;

    if ((max_wr != NULL) && (*max_wr != '\0')) {
        if ((mc_parse_u64(max_wr, &v) != 0) || (v < 1) || (v > MC_RDMA_MAX_WR_LIMIT)) {
            mc_set_error_detail("MC_MAX_WR=\"%s\": expected an integer in [1, %d]", max_wr,
                                MC_RDMA_MAX_WR_LIMIT);
            return MC_INVALID_PARAMS;
        }
        t.max_wr = (unsigned)v;
    }
    if ((slice != NULL) && (*slice != '\0')) {
        if ((mc_parse_size(slice, &v) != 0) || (v < MC_RDMA_MIN_SLICE) ||
            (v > MC_RDMA_MAX_SLICE)) {
            mc_set_error_detail("MC_SLICE_SIZE=\"%s\": expected a size in [4KiB, 1GiB]", slice);
            return MC_INVALID_PARAMS;
        }
        t.slice = v;
    }
    if ((mtu != NULL) && (*mtu != '\0')) {
        uint8_t e = 0;
        if (mc_parse_u64(mtu, &v) == 0)
            for (uint8_t i = 1; i <= 5; i++)
                if (v == (128ull << i))
                    e = i;
        if (e == 0) {
            mc_set_error_detail("MC_MTU=\"%s\": expected 256, 512, 1024, 2048 or 4096", mtu);
            return MC_INVALID_PARAMS;
        }
        t.mtu = e;
    }
    *t_p = t;
    return MC_OK;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rdma transport (rdma.h, docs/transfer.md §12).
 *
 * Devices.  install opens every selected NIC: context, one protection
 * domain, one completion queue with a completion channel, and one poller
 * thread per NIC (never one per peer).  The tcp transport is installed
 * underneath: it owns the data port, serves descriptors and carries the
 * queue-pair handshake as RDMA_CONNECT frames.
 *
 * Memory.  Every region the engine registers (local-only ones too: they
 * are the local end of READ and WRITE) gets one MR per NIC, or several
 * when it is longer than the smallest max_mr_size of the NICs, which is
 * then the cut size published as rdma_mr_size.  The descriptor lists the
 * NICs and each remote-access buffer's rkeys; a peer can name only those
 * ranges, and the NIC holding them enforces each MR's bounds.
 *
 * Queue pairs.  One RC QP per (peer, local NIC), created on the first
 * request to the peer: the initiator sends its endpoints (QPN, PSN, GID,
 * LID, port, MTU per NIC) with a connection id; the target creates one QP
 * for each on its NIC (index modulo its NIC count), takes them to RTS and
 * answers with its endpoints; the initiator then takes its QPs to RTS.  A
 * repeated connection id replaces the target's earlier QPs, and the target
 * keeps at most cfg.max_conns sets (the oldest goes).
 *
 * Requests.  A request is planned into slices (plan.h) cut at both sides'
 * MR boundaries and every MC_SLICE_SIZE bytes, dealt round-robin over the
 * QPs in the order of the NICs nearest the local buffer's NUMA node, and
 * posted in chains of at most MC_RDMA_POST_BATCH WRs while a QP has fewer
 * than max_wr outstanding.  Every WR is signalled; its completion, seen by
 * the NIC's poller, counts down the request, whose first failure is its
 * status: remote access errors are INVALID_READ/INVALID_WRITE, anything
 * else TRANSFER_FAIL.  A failed or timed-out request marks the peer's QPs
 * broken; the next request to the peer waits for the others to leave,
 * destroys them and handshakes again (the reset).
 *
 * Generation reads (docs/transfer.md §3.6).  The holder keeps one 64-bit
 * word per registered region with a generation, holding that generation
 * while the region is registered (zeroed before the region is given up,
 * rewritten when a reuse counter is adopted), in one array registered for
 * remote READ only and published in the descriptor.  A READ naming a
 * generation posts its data READs and then, on every QP that carries a
 * slice, a fenced READ of the word: it is executed only after the data
 * READs of that QP completed, so a word still equal to the generation
 * proves the data was read before the holder changed it, and so before
 * the memory was reused.  Any other value sends the request over tcp,
 * where the target decides.
 *
 * Fallback.  Local memory the engine does not know has no lkey, and a
 * target whose descriptor has no rkey for a range (a tcp engine) cannot be
 * reached one-sidedly: those requests go over the tcp transport.
 *
 * What this file owns, and may call.  The part rdma shares with fabric/
 * is transfer/onesided.c: the tcp transport and peers underneath, the
 * target's descriptor, the reset under the peer's use lock, a request's
 * way (one attempt, one more on fresh QPs when rdma_retry allows it, then
 * tcp with a notice logged once per peer), and describe and DISK_READ,
 * which only forward to tcp.  This file passes in what is rdma's own
 * (rdma_os_ops): the handshake (peer_connect), one attempt (xfer_rdma)
 * and the retry rule; it owns the NICs, the MRs, the queue pairs, the
 * pollers and the generation words.  It calls onesided.h, tcp.h (the
 * handshake frames), the rdma/ helpers (ibv, verbs, codec, plan, nic) and
 * the engine's regions.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "common/log.h"
#include "common/util.h"
#include "transfer/onesided.h"
#include "transfer/rdma/codec.h"
#include "transfer/rdma/ibv.h"
#include "transfer/rdma/plan.h"
#include "transfer/rdma/rdma.h"
#include "transfer/rdma/verbs.h"
#include "transfer/tcp/tcp.h"

#define RDMA_CQ_DEPTH        4096
#define RDMA_POLL_BATCH      32
#define RDMA_SPIN_NS         50000u    /* busy-poll window after a completion */
#define RDMA_POLL_WAKE_MS    100       /* pollers re-check for shutdown */
#define RDMA_PLAN_CHUNK      256       /* slices planned at a time */
#define RDMA_GID_SCAN        256
#define RDMA_MAX_SERVED      256       /* initiators with QPs to us at once */
#define RDMA_GEN_WORDS       4096      /* regions with a generation word at once */
#define RDMA_GEN_LANDINGS    1024      /* generation reads in flight at once */
#define RDMA_NO_SLOT         UINT32_MAX
/* mc_rdma_slice_t.rmr of a generation word READ: posted fenced */
#define RDMA_WORD_SLICE      UINT32_MAX

typedef struct rdma_nic {
    mc_rdma_nic_t info;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    uint64_t max_mr;
    unsigned max_qp_wr;
    uint8_t max_rd_atom;
    mc_rdma_local_t local;   /* port, mtu, gid index, ethernet (psn per QP) */
    uint8_t gid[16];
    uint16_t lid;
    pthread_t poller;
    int poller_started;
} rdma_nic_t;

/* A target-side set of QPs for one initiator connection. */
typedef struct rdma_served {
    struct rdma_served *next;
    uint64_t conn_id;
    size_t nqps;
    struct ibv_qp *qps[MC_RDMA_MAX_NICS];
} rdma_served_t;

typedef struct mc_rdma {
    mc_onesided_t os;        /* first: the tcp transport underneath (onesided.h) */
    mc_te_t *te;
    size_t nnics;
    rdma_nic_t nics[MC_RDMA_MAX_NICS];
    uint64_t mr_cut;         /* MR size regions are cut at, 0: one MR */
    mc_rdma_tunables_t tun;  /* MC_MAX_WR, MC_SLICE_SIZE, MC_MTU */
    int stopping;            /* atomic */
    pthread_mutex_t srv_mu;
    rdma_served_t *served;   /* newest first */
    size_t nserved;
    /* generation words (docs/transfer.md §3.6): NULL when not registered */
    uint64_t *gw;            /* RDMA_GEN_WORDS words, remote READ only */
    struct ibv_mr *gw_mr[MC_RDMA_MAX_NICS];
    pthread_mutex_t gw_mu;   /* slot allocation and word stores */
    uint8_t gw_used[RDMA_GEN_WORDS];
    /* where the trailing word READs land: RDMA_GEN_LANDINGS entries of
     * one word per QP, handed out from a free stack */
    uint64_t *land;
    struct ibv_mr *land_mr[MC_RDMA_MAX_NICS];
    uint32_t land_free[RDMA_GEN_LANDINGS];
    size_t nland_free;       /* under gw_mu */
} mc_rdma_t;

/* One region's MRs: mrs[m * nnics + k] is MR m on NIC k. */
typedef struct rdma_mr {
    uint32_t gen_slot;       /* its generation word, or RDMA_NO_SLOT */
    int gen_dead;            /* under gw_mu: zeroed for good (dereg) */
    size_t nmr;
    struct ibv_mr *mrs[];
} rdma_mr_t;

/* One request in flight: counted down by the pollers. */
typedef struct rdma_wait {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    size_t pending;          /* WRs posted, not completed */
    mc_status_t st;          /* first failure */
    int wc_status;
    int abandoned;           /* the caller gave up: the last completion frees it */
    mc_te_op_t op;
} rdma_wait_t;

typedef struct rdma_qp {
    struct ibv_qp *qp;
    size_t nic;              /* local NIC index */
    char remote_nic[MC_RDMA_NIC_NAME_MAX];
    unsigned outstanding;    /* atomic */
} rdma_qp_t;

/* os.desc is the target's descriptor, with rkeys; os.no_onesided is set
 * when the handshake is answered NOT_SUPPORTED (a tcp engine). */
typedef struct rdma_peer {
    mc_onesided_peer_t os;   /* first (onesided.h); os.tp is the mc_rdma_t */
    uint64_t conn_id;
    size_t nqps;
    rdma_qp_t qps[MC_RDMA_MAX_NICS];
    uint32_t rr;             /* atomic: round-robin start */
    unsigned abandoned;      /* atomic: requests whose WRs never completed */
} rdma_peer_t;

_Static_assert(offsetof(mc_rdma_t, os) == 0, "the engine's priv is the one-sided base");
_Static_assert(offsetof(rdma_peer_t, os) == 0, "the engine's peer is the one-sided base");

static mc_rdma_t *peer_rd(const rdma_peer_t *p)
{
    return (mc_rdma_t *)p->os.tp;
}

/* ---- completions -------------------------------------------------------- */

static void wait_done(rdma_wait_t *w, const struct ibv_wc *wc)
{
    int free_it = 0;
    pthread_mutex_lock(&w->mu);
    if ((wc->status != IBV_WC_SUCCESS) && (w->st == MC_OK)) {
        w->wc_status = (int)wc->status;
        w->st        = mc_rdma_verbs_wc_status((int)wc->status, (int)w->op);
    }
    w->pending--;
    if (w->pending == 0)
        free_it = w->abandoned;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    if (free_it) {
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
}

/* wr_id of a WR: the request and the QP, so the poller can count both. */
typedef struct rdma_wr_ctx {
    rdma_wait_t *w;
    rdma_qp_t *q;
} rdma_wr_ctx_t;

/* Poll one batch and account it; the count, or -1. */
static int cq_drain(rdma_nic_t *nic)
{
    struct ibv_wc wc[RDMA_POLL_BATCH];
    int n = ibv_poll_cq(nic->cq, RDMA_POLL_BATCH, wc);
    for (int i = 0; i < n; i++) {
        rdma_wr_ctx_t *c = (rdma_wr_ctx_t *)(uintptr_t)wc[i].wr_id;
        if (c == NULL)
            continue;
        {
            /* saturating: a QP reset after an abandoned request zeroed it */
            unsigned o = __atomic_load_n(&c->q->outstanding, __ATOMIC_ACQUIRE);
            while ((o > 0) && !__atomic_compare_exchange_n(&c->q->outstanding, &o, o - 1, 0,
                                                           __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                ;
        }
        wait_done(c->w, &wc[i]);
        free(c);
    }
    return n;
}

static void *poller_main(void *arg)
{
    rdma_nic_t *nic = arg;

    while (__atomic_load_n(&nic->poller_started, __ATOMIC_ACQUIRE)) {
        uint64_t until;
        int n = cq_drain(nic);
        if (n < 0) {
            mc_log_ratelimited(MC_LOG_ERROR, "rdma: polling the CQ of %s failed",
                               nic->info.name);
            (void)poll(NULL, 0, RDMA_POLL_WAKE_MS);
            continue;
        }
        if (n > 0)
            continue;
        /* nothing: spin a bounded window, then sleep on the channel */
        until = mc_now_ns() + RDMA_SPIN_NS;
        while ((n == 0) && (mc_now_ns() < until))
            n = cq_drain(nic);
        if (n != 0)
            continue;
        if (ibv_req_notify_cq(nic->cq, 0) != 0)
            continue;
        if (cq_drain(nic) != 0) /* a completion that raced the arming */
            continue;
        {
            struct pollfd pfd = {.fd = nic->ch->fd, .events = POLLIN};
            if (poll(&pfd, 1, RDMA_POLL_WAKE_MS) > 0) {
                struct ibv_cq *cq;
                void *ctx;
                if (mc_ibv()->get_cq_event(nic->ch, &cq, &ctx) == 0)
                    mc_ibv()->ack_cq_events(cq, 1);
            }
        }
    }
    return NULL;
}

/* ---- devices ------------------------------------------------------------- */

static void nic_close(rdma_nic_t *nic)
{
    if (nic->poller_started) {
        __atomic_store_n(&nic->poller_started, 0, __ATOMIC_RELEASE);
        pthread_join(nic->poller, NULL);
    }
    if (nic->cq != NULL)
        mc_ibv()->destroy_cq(nic->cq);
    if (nic->ch != NULL)
        mc_ibv()->destroy_comp_channel(nic->ch);
    if (nic->pd != NULL)
        mc_ibv()->dealloc_pd(nic->pd);
    if (nic->ctx != NULL)
        mc_ibv()->close_device(nic->ctx);
    memset(nic, 0, sizeof(*nic));
}

/* The port's GID index: MC_GID_INDEX, or chosen from the table. */
static mc_status_t nic_gid(rdma_nic_t *nic, int tbl_len)
{
    static uint8_t zero[16];
    uint8_t (*gids)[16];
    size_t n = (size_t)MC_MIN(MC_MAX(tbl_len, 0), RDMA_GID_SCAN);
    mc_status_t st;

    gids = calloc(n ? n : 1, 16);
    if (gids == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    for (size_t i = 0; i < n; i++) {
        union ibv_gid g;
        if (mc_ibv()->query_gid(nic->ctx, nic->local.port, (int)i, &g) == 0)
            memcpy(gids[i], g.raw, 16);
    }
    st = mc_rdma_gid_pick((const uint8_t(*)[16])gids, n, getenv("MC_GID_INDEX"),
                          &nic->local.gid_index);
    if (st == MC_OK)
        memcpy(nic->gid, gids[nic->local.gid_index], 16);
    else if (!nic->local.ethernet) {
        /* InfiniBand routes on the LID: no GID is needed */
        memcpy(nic->gid, zero, 16);
        nic->local.gid_index = 0;
        st                   = MC_OK;
    }
    free(gids);
    if (st != MC_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", mc_last_error_detail());
        mc_set_error_detail("rdma: %s port %u: %s", nic->info.name, (unsigned)nic->local.port,
                            why);
    }
    return st;
}

static mc_status_t nic_open(mc_rdma_t *rd, rdma_nic_t *nic, struct ibv_device **list, int nlist)
{
    struct ibv_device_attr attr;
    struct ibv_port_attr pattr;
    mc_status_t st;
    int j, rc;

    for (j = 0; j < nlist; j++)
        if (strcmp(mc_ibv()->get_device_name(list[j]), nic->info.name) == 0)
            break;
    if (j == nlist) {
        mc_set_error_detail("RDMA device %s is not listed by libibverbs", nic->info.name);
        return MC_NOT_SUPPORTED;
    }
    nic->ctx = mc_ibv()->open_device(list[j]);
    if (nic->ctx == NULL) {
        mc_set_error_detail("RDMA device %s cannot be opened: %s", nic->info.name,
                            strerror(errno));
        return MC_NOT_SUPPORTED;
    }
    if ((mc_ibv()->query_device(nic->ctx, &attr) != 0) ||
        (mc_ibv_query_port(nic->ctx, (uint8_t)nic->info.port, &pattr) != 0)) {
        mc_set_error_detail("RDMA device %s cannot be queried: %s", nic->info.name,
                            strerror(errno));
        return MC_NOT_SUPPORTED;
    }
    if (pattr.state != IBV_PORT_ACTIVE) {
        mc_set_error_detail("RDMA device %s port %d is not ACTIVE", nic->info.name,
                            nic->info.port);
        return MC_NOT_SUPPORTED;
    }
    nic->max_mr         = attr.max_mr_size;
    nic->max_qp_wr      = (unsigned)MC_MAX(attr.max_qp_wr, 1);
    nic->max_rd_atom    = (uint8_t)MC_MIN(MC_MAX(MC_MIN(attr.max_qp_rd_atom,
                                                        attr.max_qp_init_rd_atom), 1), 16);
    nic->local.port     = (uint8_t)nic->info.port;
    nic->local.mtu      = (uint8_t)pattr.active_mtu;
    if ((rd->tun.mtu != 0) && (rd->tun.mtu < nic->local.mtu))
        nic->local.mtu = rd->tun.mtu; /* MC_MTU caps the port's */
    nic->local.ethernet = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
    nic->lid            = pattr.lid;
    st                  = nic_gid(nic, pattr.gid_tbl_len);
    if (st != MC_OK)
        return st;
    nic->pd = mc_ibv()->alloc_pd(nic->ctx);
    nic->ch = mc_ibv()->create_comp_channel(nic->ctx);
    if ((nic->pd == NULL) || (nic->ch == NULL)) {
        mc_set_error_detail("RDMA device %s: cannot allocate a protection domain or a "
                            "completion channel: %s", nic->info.name, strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    (void)fcntl(nic->ch->fd, F_SETFL, fcntl(nic->ch->fd, F_GETFL) | O_NONBLOCK);
    nic->cq = mc_ibv()->create_cq(nic->ctx, MC_MIN(RDMA_CQ_DEPTH, MC_MAX(attr.max_cqe, 1)),
                                  NULL, nic->ch, 0);
    if (nic->cq == NULL) {
        mc_set_error_detail("RDMA device %s: cannot create a completion queue: %s",
                            nic->info.name, strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    nic->poller_started = 1;
    rc                  = pthread_create(&nic->poller, NULL, poller_main, nic);
    if (rc != 0) {
        nic->poller_started = 0;
        mc_set_error_detail("rdma: cannot start the completion poller of %s: %s",
                            nic->info.name, strerror(rc));
        return MC_INTERNAL_ERROR;
    }
    mc_info("rdma: %s port %u %s, mtu %d, lid %u, gid index %u, max_mr_size %llu",
            nic->info.name, (unsigned)nic->local.port,
            nic->local.ethernet ? "RoCE" : "InfiniBand", 128 << nic->local.mtu,
            (unsigned)nic->lid, (unsigned)nic->local.gid_index,
            (unsigned long long)nic->max_mr);
    return MC_OK;
}

/* ---- served queue pairs -------------------------------------------------- */

static void served_free(rdma_served_t *s)
{
    for (size_t i = 0; i < s->nqps; i++)
        if (s->qps[i] != NULL)
            mc_ibv()->destroy_qp(s->qps[i]);
    free(s);
}

/* A QP on @p nic in INIT. */
static struct ibv_qp *qp_create(mc_rdma_t *rd, rdma_nic_t *nic)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr attr;
    mc_rdma_qp_attrs_t a;
    struct ibv_qp *qp;
    int mask;

    memset(&ia, 0, sizeof(ia));
    ia.send_cq          = nic->cq;
    ia.recv_cq          = nic->cq;
    ia.qp_type          = IBV_QPT_RC;
    ia.sq_sig_all       = 0;
    ia.cap.max_send_wr  = MC_MIN(rd->tun.max_wr, nic->max_qp_wr);
    ia.cap.max_recv_wr  = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    qp                  = mc_ibv()->create_qp(nic->pd, &ia);
    if (qp == NULL) {
        mc_set_error_detail("rdma: cannot create a queue pair on %s: %s", nic->info.name,
                            strerror(errno));
        return NULL;
    }
    memset(&a, 0, sizeof(a));
    a.port   = nic->local.port;
    a.access = MC_RDMA_ACCESS_LOCAL_WRITE | MC_RDMA_ACCESS_REMOTE_WRITE |
               MC_RDMA_ACCESS_REMOTE_READ;
    (void)mc_rdma_verbs_attr(&a, IBV_QPS_INIT, &attr, &mask);
    if (mc_ibv()->modify_qp(qp, &attr, mask) != 0) {
        mc_set_error_detail("rdma: %s: queue pair to INIT failed: %s", nic->info.name,
                            strerror(errno));
        mc_ibv()->destroy_qp(qp);
        return NULL;
    }
    return qp;
}

/* Take an INIT QP to RTR and RTS towards @p ep. */
static mc_status_t qp_connect(rdma_nic_t *nic, struct ibv_qp *qp, uint32_t psn,
                              const mc_rdma_ep_t *ep)
{
    mc_rdma_local_t local = nic->local;
    mc_rdma_qp_attrs_t a;
    struct ibv_qp_attr attr;
    mc_status_t st;
    int mask;

    local.psn = psn;
    st        = mc_rdma_qp_attrs(&local, ep, &a);
    if (st != MC_OK)
        return st;
    a.max_dest_rd_atomic = MC_MIN(a.max_dest_rd_atomic, nic->max_rd_atom);
    a.max_rd_atomic      = MC_MIN(a.max_rd_atomic, nic->max_rd_atom);
    (void)mc_rdma_verbs_attr(&a, IBV_QPS_RTR, &attr, &mask);
    if (mc_ibv()->modify_qp(qp, &attr, mask) != 0) {
        mc_set_error_detail("rdma: %s -> %s: queue pair to RTR failed: %s", nic->info.name,
                            ep->nic, strerror(errno));
        return MC_TRANSFER_FAIL;
    }
    (void)mc_rdma_verbs_attr(&a, IBV_QPS_RTS, &attr, &mask);
    if (mc_ibv()->modify_qp(qp, &attr, mask) != 0) {
        mc_set_error_detail("rdma: %s -> %s: queue pair to RTS failed: %s", nic->info.name,
                            ep->nic, strerror(errno));
        return MC_TRANSFER_FAIL;
    }
    return MC_OK;
}

/* A starting PSN (24 bits) that differs per QP and per run. */
static uint32_t psn_new(void)
{
    static uint64_t seq;
    uint64_t x = mc_now_ns() ^ (__atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED) *
                                0x9e3779b97f4a7c15ull);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (uint32_t)x & 0xffffffu;
}

static void ep_fill(const rdma_nic_t *nic, const struct ibv_qp *qp, uint32_t psn,
                    mc_rdma_ep_t *ep)
{
    memset(ep, 0, sizeof(*ep));
    snprintf(ep->nic, sizeof(ep->nic), "%s", nic->info.name);
    ep->port = nic->local.port;
    ep->mtu  = nic->local.mtu;
    ep->lid  = nic->lid;
    memcpy(ep->gid, nic->gid, 16);
    ep->qpn = qp->qp_num;
    ep->psn = psn;
}

/* The target side of the handshake (runs on a tcp connection thread). */
static mc_status_t hs_serve(void *arg, uint64_t conn_id, const uint8_t *req, size_t len,
                            uint8_t *resp, size_t cap, size_t *resp_len_p)
{
    mc_rdma_t *rd = arg;
    mc_rdma_ep_t in[MC_RDMA_HS_MAX_EPS], out[MC_RDMA_HS_MAX_EPS];
    rdma_served_t *s, **pp, *old = NULL, *evict = NULL;
    size_t n = 0, rlen;
    mc_status_t st;

    st = mc_rdma_hs_decode(req, len, in, MC_RDMA_HS_MAX_EPS, &n);
    if (st != MC_OK)
        return st;
    if (n > MC_RDMA_MAX_NICS) {
        mc_set_error_detail("rdma handshake: %zu endpoints (one per NIC, at most %d)", n,
                            MC_RDMA_MAX_NICS);
        return MC_INVALID_PARAMS;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    s->conn_id = conn_id;
    for (size_t i = 0; i < n; i++) {
        rdma_nic_t *nic = &rd->nics[i % rd->nnics];
        uint32_t psn    = psn_new();
        s->qps[i]       = qp_create(rd, nic);
        s->nqps         = i + 1;
        if (s->qps[i] == NULL) {
            served_free(s);
            return MC_INTERNAL_ERROR;
        }
        st = qp_connect(nic, s->qps[i], psn, &in[i]);
        if (st != MC_OK) {
            served_free(s);
            return st;
        }
        ep_fill(nic, s->qps[i], psn, &out[i]);
    }
    rlen = mc_rdma_hs_encode(out, n, resp, cap);
    if (rlen == 0) {
        served_free(s);
        mc_set_error_detail("rdma: the handshake answer does not fit");
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_lock(&rd->srv_mu);
    for (pp = &rd->served; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->conn_id == conn_id) {
            old = *pp;
            *pp = old->next;
            rd->nserved--;
            break;
        }
    }
    s->next    = rd->served;
    rd->served = s;
    rd->nserved++;
    if (rd->nserved > MC_MIN(rd->te->cfg.max_conns, RDMA_MAX_SERVED)) {
        for (pp = &rd->served; (*pp)->next != NULL; pp = &(*pp)->next)
            ;
        evict = *pp;
        *pp   = NULL;
        rd->nserved--;
    }
    pthread_mutex_unlock(&rd->srv_mu);
    if (old != NULL)
        served_free(old);
    if (evict != NULL)
        served_free(evict);
    *resp_len_p = rlen;
    return MC_OK;
}

/* ---- generation words ------------------------------------------------------ */

static void gw_close(mc_rdma_t *rd)
{
    for (size_t k = 0; k < rd->nnics; k++) {
        if (rd->gw_mr[k] != NULL)
            mc_ibv()->dereg_mr(rd->gw_mr[k]);
        if (rd->land_mr[k] != NULL)
            mc_ibv()->dereg_mr(rd->land_mr[k]);
        rd->gw_mr[k] = rd->land_mr[k] = NULL;
    }
    free(rd->gw);
    free(rd->land);
    rd->gw   = NULL;
    rd->land = NULL;
}

/* Register the generation words (remote READ only: a peer can read them,
 * never change them) and the landing area of our own word READs on every
 * NIC.  Without them peers read generations over tcp, as from an older
 * engine: a failure here is logged, not fatal. */
static void gw_open(mc_rdma_t *rd)
{
    size_t gwlen = RDMA_GEN_WORDS * sizeof(uint64_t);
    size_t llen  = (size_t)RDMA_GEN_LANDINGS * MC_RDMA_MAX_NICS * sizeof(uint64_t);
    void *a = NULL, *b = NULL;

    if ((posix_memalign(&a, 4096, gwlen) != 0) || (posix_memalign(&b, 4096, llen) != 0)) {
        free(a);
        mc_warn("rdma: no memory for generation words; generation reads go over tcp");
        return;
    }
    memset(a, 0, gwlen);
    memset(b, 0, llen);
    rd->gw   = a;
    rd->land = b;
    for (size_t k = 0; k < rd->nnics; k++) {
        rd->gw_mr[k]   = mc_ibv()->reg_mr(rd->nics[k].pd, a, gwlen, IBV_ACCESS_REMOTE_READ);
        rd->land_mr[k] = mc_ibv()->reg_mr(rd->nics[k].pd, b, llen, IBV_ACCESS_LOCAL_WRITE);
        if ((rd->gw_mr[k] == NULL) || (rd->land_mr[k] == NULL)) {
            mc_warn("rdma: registering the generation words with %s failed (%s); generation "
                    "reads from this engine go over tcp", rd->nics[k].info.name,
                    strerror(errno));
            gw_close(rd);
            return;
        }
    }
    for (uint32_t i = 0; i < RDMA_GEN_LANDINGS; i++)
        rd->land_free[i] = RDMA_GEN_LANDINGS - 1u - i;
    rd->nland_free = RDMA_GEN_LANDINGS;
}

/* A landing entry (one word per QP) for a generation read, or -1 when all
 * are in use (the read then goes over tcp). */
static int64_t land_get(mc_rdma_t *rd)
{
    int64_t e = -1;
    pthread_mutex_lock(&rd->gw_mu);
    if (rd->nland_free > 0)
        e = rd->land_free[--rd->nland_free];
    pthread_mutex_unlock(&rd->gw_mu);
    return e;
}

static void land_put(mc_rdma_t *rd, int64_t e)
{
    pthread_mutex_lock(&rd->gw_mu);
    rd->land_free[rd->nland_free++] = (uint32_t)e;
    pthread_mutex_unlock(&rd->gw_mu);
}

/* Give region @p m a word holding @p gen; no word when all are taken (its
 * generation reads then go over tcp). */
static void gw_slot_open(mc_rdma_t *rd, rdma_mr_t *m, uint64_t gen)
{
    m->gen_slot = RDMA_NO_SLOT;
    if ((rd->gw == NULL) || (gen == 0))
        return;
    pthread_mutex_lock(&rd->gw_mu);
    for (uint32_t i = 0; i < RDMA_GEN_WORDS; i++) {
        if (!rd->gw_used[i]) {
            rd->gw_used[i] = 1;
            m->gen_slot    = i;
            __atomic_store_n(&rd->gw[i], gen, __ATOMIC_SEQ_CST);
            break;
        }
    }
    pthread_mutex_unlock(&rd->gw_mu);
    if (m->gen_slot == RDMA_NO_SLOT)
        mc_debug("rdma: every generation word is taken; generation reads of a region go "
                 "over tcp");
}

/* Store @p v in @p m's word; 0 zeroes it for good (the region is being
 * given up), after which later adoptions no longer write it. */
static void gw_slot_set(mc_rdma_t *rd, rdma_mr_t *m, uint64_t v)
{
    if ((rd->gw == NULL) || (m->gen_slot == RDMA_NO_SLOT))
        return;
    pthread_mutex_lock(&rd->gw_mu);
    if (!m->gen_dead) {
        /* seq_cst: ordered before any later store to the region's memory,
         * so a NIC that read the new bytes reads this word changed too */
        __atomic_store_n(&rd->gw[m->gen_slot], v, __ATOMIC_SEQ_CST);
        m->gen_dead = v == 0;
    }
    pthread_mutex_unlock(&rd->gw_mu);
}

void mc_rdma_gen_word_set(mc_te_t *te, mc_te_region_t *r, uint64_t v)
{
    if ((te == NULL) || (te->tp_ops != &mc_rdma_transport_ops) || (te->tp == NULL) ||
        (r->tp_mr == NULL))
        return;
    gw_slot_set(te->tp, r->tp_mr, v);
}

/* ---- install ------------------------------------------------------------- */

static const mc_onesided_ops_t rdma_os_ops; /* with the requests, below */

static void rdma_uninstall(void *priv)
{
    mc_rdma_t *rd = priv;
    if (rd == NULL)
        return;
    __atomic_store_n(&rd->stopping, 1, __ATOMIC_RELEASE);
    if (rd->os.tcp != NULL)
        mc_tcp_hs_handler_set(rd->os.tcp, NULL, NULL);
    mc_onesided_uninstall(&rd->os);
    while (rd->served != NULL) {
        rdma_served_t *s = rd->served;
        rd->served       = s->next;
        served_free(s);
    }
    gw_close(rd);
    for (size_t i = 0; i < rd->nnics; i++)
        nic_close(&rd->nics[i]);
    pthread_mutex_destroy(&rd->srv_mu);
    pthread_mutex_destroy(&rd->gw_mu);
    free(rd);
}

static mc_status_t rdma_install(mc_te_t *te, const char *bind_addr, uint16_t port,
                                void **priv_p, uint16_t *port_p)
{
    mc_rdma_t *rd = calloc(1, sizeof(*rd));
    struct ibv_device **list;
    uint64_t cut = UINT64_MAX;
    int nlist = 0;
    mc_status_t st = MC_OK;

    if (rd == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    rd->te             = te;
    rd->os.why_unkeyed = "local memory not registered, or no rkey published for the range";
    pthread_mutex_init(&rd->srv_mu, NULL);
    pthread_mutex_init(&rd->gw_mu, NULL);
    st = mc_rdma_tunables(getenv("MC_MAX_WR"), getenv("MC_SLICE_SIZE"), getenv("MC_MTU"),
                          &rd->tun);
    if (st != MC_OK) {
        rdma_uninstall(rd);
        return st;
    }
    if (te->rdma_nnics == 0) {
        mc_set_error_detail("no RDMA device found");
        rdma_uninstall(rd);
        return MC_NOT_SUPPORTED;
    }
    st = mc_ibv_load(); /* normally done already by the engine's verbs check */
    if (st != MC_OK) {
        rdma_uninstall(rd);
        return st;
    }
    list = mc_ibv()->get_device_list(&nlist);
    if (list == NULL) {
        mc_set_error_detail("no RDMA device found: libibverbs lists none (%s)", strerror(errno));
        rdma_uninstall(rd);
        return MC_NOT_SUPPORTED;
    }
    for (size_t i = 0; (i < te->rdma_nnics) && (st == MC_OK); i++) {
        rd->nics[i].info = te->rdma_nics[i];
        rd->nnics        = i + 1;
        st               = nic_open(rd, &rd->nics[i], list, nlist);
        if (st == MC_OK)
            cut = MC_MIN(cut, rd->nics[i].max_mr);
    }
    mc_ibv()->free_device_list(list);
    if (st != MC_OK) {
        rdma_uninstall(rd);
        return st;
    }
    /* one cut for every NIC, so one MR index names the same bytes on each */
    rd->mr_cut = (cut >= (1ull << 62)) ? 0 : MC_MAX(cut & ~((uint64_t)MC_TE_DESC_MIN_MR_SIZE - 1),
                                                    (uint64_t)MC_TE_DESC_MIN_MR_SIZE);
    /* MC_RDMA_GEN_WORDS=0 publishes none, as an older engine (tests) */
    if ((getenv("MC_RDMA_GEN_WORDS") == NULL) || (strcmp(getenv("MC_RDMA_GEN_WORDS"), "0") != 0))
        gw_open(rd);
    st = mc_onesided_install(&rd->os, &rdma_os_ops, te, bind_addr, port, port_p);
    if (st != MC_OK) {
        rdma_uninstall(rd);
        return st;
    }
    mc_tcp_hs_handler_set(rd->os.tcp, hs_serve, rd);
    *priv_p = rd;
    return MC_OK;
}

/* ---- memory --------------------------------------------------------------- */

static mc_status_t rdma_mem_reg(void *priv, mc_te_region_t *r)
{
    mc_rdma_t *rd = priv;
    /* how many MRs first: a small max_mr_size cuts a large arena into
     * many, as many as the descriptor can carry rkeys for */
    size_t nmr = mc_rdma_mr_split(r->addr, r->len, rd->mr_cut, NULL, 0);
    mc_rdma_span_t *spans;
    rdma_mr_t *m;

    if ((nmr == 0) || (nmr * rd->nnics > MC_TE_DESC_MAX_RKEYS)) {
        mc_set_error_detail("rdma: [0x%llx, +%zu) needs %zu memory regions per NIC (at most "
                            "%zu)", (unsigned long long)r->addr, r->len, nmr,
                            (size_t)(MC_TE_DESC_MAX_RKEYS / rd->nnics));
        return MC_INVALID_PARAMS;
    }
    spans = calloc(nmr, sizeof(*spans));
    m     = calloc(1, sizeof(*m) + nmr * rd->nnics * sizeof(m->mrs[0]));
    if ((spans == NULL) || (m == NULL)) {
        free(spans);
        free(m);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    (void)mc_rdma_mr_split(r->addr, r->len, rd->mr_cut, spans, nmr);
    m->nmr      = nmr;
    m->gen_slot = RDMA_NO_SLOT;
    for (size_t i = 0; i < nmr; i++) {
        for (size_t k = 0; k < rd->nnics; k++) {
            /* constant flags without optional-range bits: the header's
             * ibv_reg_mr macro would call this same symbol (ibv.h) */
            struct ibv_mr *mr = mc_ibv()->reg_mr(
                rd->nics[k].pd, (void *)(uintptr_t)spans[i].addr, (size_t)spans[i].len,
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
            if (mr == NULL) {
                mc_set_error_detail("rdma: registering [0x%llx, +%llu) with %s failed: %s",
                                    (unsigned long long)spans[i].addr,
                                    (unsigned long long)spans[i].len, rd->nics[k].info.name,
                                    strerror(errno));
                free(spans);
                r->tp_mr = m;
                mc_te_tp_mem_dereg(rd->te, r);
                return MC_INTERNAL_ERROR;
            }
            m->mrs[i * rd->nnics + k] = mr;
        }
    }
    free(spans);
    if (r->flags & MC_TE_MEM_REMOTE_ACCESS)
        gw_slot_open(rd, m, r->gen);
    r->tp_mr = m;
    return MC_OK;
}

static void rdma_mem_dereg(void *priv, mc_te_region_t *r)
{
    mc_rdma_t *rd = priv;
    rdma_mr_t *m  = r->tp_mr;
    if (m == NULL)
        return;
    /* the word first (the engine zeroed it already when the region was
     * given up): no word READ after this sees the generation */
    gw_slot_set(rd, m, 0);
    if (m->gen_slot != RDMA_NO_SLOT) {
        pthread_mutex_lock(&rd->gw_mu);
        rd->gw_used[m->gen_slot] = 0;
        pthread_mutex_unlock(&rd->gw_mu);
    }
    for (size_t i = 0; i < m->nmr * rd->nnics; i++)
        if (m->mrs[i] != NULL)
            mc_ibv()->dereg_mr(m->mrs[i]);
    free(m);
    r->tp_mr = NULL;
}

static mc_status_t rdma_desc_fill(void *priv, mc_te_desc_t *d, mc_te_region_t *const *regions)
{
    mc_rdma_t *rd = priv;
    d->devices    = calloc(rd->nnics, sizeof(*d->devices));
    if (d->devices == NULL)
        goto oom;
    for (size_t k = 0; k < rd->nnics; k++) {
        snprintf(d->devices[k].name, sizeof(d->devices[k].name), "%s", rd->nics[k].info.name);
        d->devices[k].lid = rd->nics[k].lid;
        memcpy(d->devices[k].gid, rd->nics[k].gid, 16);
    }
    d->ndevices     = rd->nnics;
    d->rdma_mr_size = rd->mr_cut;
    if (rd->gw != NULL) {
        d->gen_words.addr   = (uint64_t)(uintptr_t)rd->gw;
        d->gen_words.nwords = RDMA_GEN_WORDS;
        for (size_t k = 0; k < rd->nnics; k++)
            d->gen_words.rkeys[k] = rd->gw_mr[k]->rkey;
    }
    for (size_t i = 0; i < d->nbuffers; i++) {
        const rdma_mr_t *m = regions[i]->tp_mr;
        mc_te_buf_desc_t *b = &d->buffers[i];
        if (m == NULL)
            continue;
        b->rkeys = calloc(m->nmr * rd->nnics, sizeof(*b->rkeys));
        if (b->rkeys == NULL)
            goto oom;
        for (size_t j = 0; j < m->nmr * rd->nnics; j++)
            b->rkeys[j] = m->mrs[j]->rkey;
        b->nrkeys = m->nmr * rd->nnics;
        if ((rd->gw != NULL) && (m->gen_slot != RDMA_NO_SLOT)) {
            b->gen_slot     = m->gen_slot;
            b->has_gen_slot = 1;
        }
    }
    return MC_OK;
oom:
    mc_set_error_detail("out of memory");
    return MC_INTERNAL_ERROR;
}

/* ---- peers ------------------------------------------------------------------ */

static mc_status_t rdma_peer_open(void *priv, const char *host, uint16_t port, void **peer_p)
{
    mc_status_t st = mc_onesided_peer_create(priv, sizeof(rdma_peer_t), host, port, peer_p);
    if (st == MC_OK) {
        rdma_peer_t *p = *peer_p;
        p->conn_id = ((uint64_t)psn_new() << 40) ^ mc_now_ns() ^ (uint64_t)(uintptr_t)p;
    }
    return st;
}

/* Destroy the peer's QPs (use held for writing, nothing outstanding). */
static void peer_qps_destroy(rdma_peer_t *p)
{
    for (size_t i = 0; i < p->nqps; i++)
        if (p->qps[i].qp != NULL)
            mc_ibv()->destroy_qp(p->qps[i].qp);
    memset(p->qps, 0, sizeof(p->qps));
    p->nqps         = 0;
    p->os.connected = 0;
}

static void rdma_peer_close(void *priv, void *peer)
{
    rdma_peer_t *p     = peer;
    unsigned abandoned = __atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE);
    (void)priv;
    peer_qps_destroy(p);
    /* a late completion may still name one of its QP slots: keep it */
    mc_onesided_peer_destroy(&p->os, abandoned > 0);
    if (abandoned > 0)
        mc_warn("rdma: keeping a closed peer's state: %u requests never completed",
                abandoned);
}

/* Handshake: one QP per local NIC.  use held for writing (ops.connect). */
static mc_status_t peer_connect(mc_onesided_peer_t *op)
{
    rdma_peer_t *p = (rdma_peer_t *)op;
    mc_rdma_t *rd  = peer_rd(p);
    mc_rdma_ep_t mine[MC_RDMA_MAX_NICS], theirs[MC_RDMA_HS_MAX_EPS];
    uint32_t psn[MC_RDMA_MAX_NICS];
    uint8_t req[MC_RDMA_HS_MAX_SIZE];
    uint8_t *resp = NULL;
    size_t rlen = 0, n = 0, qlen;
    mc_status_t st;

    peer_qps_destroy(p);
    for (size_t k = 0; k < rd->nnics; k++) {
        p->qps[k].qp  = qp_create(rd, &rd->nics[k]);
        p->qps[k].nic = k;
        p->nqps       = k + 1;
        if (p->qps[k].qp == NULL) {
            peer_qps_destroy(p);
            return MC_INTERNAL_ERROR;
        }
        psn[k] = psn_new();
        ep_fill(&rd->nics[k], p->qps[k].qp, psn[k], &mine[k]);
    }
    qlen = mc_rdma_hs_encode(mine, rd->nnics, req, sizeof(req));
    st   = (qlen > 0) ? mc_tcp_hs_call(p->os.tcp_peer, p->conn_id, req, qlen, &resp, &rlen)
                      : MC_INTERNAL_ERROR;
    if (st == MC_OK) {
        st = mc_rdma_hs_decode(resp, rlen, theirs, MC_RDMA_HS_MAX_EPS, &n);
        if ((st == MC_OK) && (n != rd->nnics)) {
            mc_set_error_detail("rdma handshake: %zu endpoints answered for %zu", n,
                                rd->nnics);
            st = MC_DESERIALIZE_FAIL;
        }
    }
    free(resp);
    if (st == MC_NOT_SUPPORTED) {
        mc_debug("rdma: the target has no RDMA; requests to it go over tcp");
        __atomic_store_n(&p->os.no_onesided, 1, __ATOMIC_RELEASE);
    }
    for (size_t k = 0; (st == MC_OK) && (k < rd->nnics); k++) {
        st = qp_connect(&rd->nics[k], p->qps[k].qp, psn[k], &theirs[k]);
        memcpy(p->qps[k].remote_nic, theirs[k].nic, sizeof(p->qps[k].remote_nic));
    }
    if (st != MC_OK) {
        peer_qps_destroy(p);
        return st;
    }
    p->os.connected = 1;
    __atomic_store_n(&p->os.broken, 0, __ATOMIC_RELEASE);
    mc_info("rdma: connected to %s:%u with %zu queue pair(s), first %s -> %s",
            mc_tcp_peer_host(p->os.tcp_peer), (unsigned)mc_tcp_peer_port(p->os.tcp_peer),
            p->nqps, rd->nics[0].info.name, p->qps[0].remote_nic);
    return MC_OK;
}

/* ---- requests ---------------------------------------------------------------- */

/* Wait for the request's completions, at most @p ms; 0 when all came. */
static int wait_bounded(rdma_wait_t *w, uint64_t ms)
{
    struct timespec ts;
    int done;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000u);
    ts.tv_nsec += (long)(ms % 1000u) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while ((w->pending > 0) && (pthread_cond_timedwait(&w->cond, &w->mu, &ts) == 0))
        ;
    done = w->pending == 0;
    pthread_mutex_unlock(&w->mu);
    return done ? 0 : -1;
}

/* Reserve room for up to @p want WRs on @p q (at most @p max outstanding,
 * other requests post on it too); returns how many were reserved. */
static size_t qp_reserve(rdma_qp_t *q, size_t want, size_t max)
{
    unsigned o = __atomic_load_n(&q->outstanding, __ATOMIC_ACQUIRE);
    for (;;) {
        size_t k = mc_rdma_batch_size(want, o, max, MC_RDMA_POST_BATCH);
        if (k == 0)
            return 0;
        if (__atomic_compare_exchange_n(&q->outstanding, &o, o + (unsigned)k, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return k;
    }
}

/* Post @p n slices (all to QP @p q, room reserved) as one chain.  0, or
 * -1 (errno) with the unposted WRs' room given back. */
static int post_chain(mc_rdma_t *rd, rdma_qp_t *q, rdma_wait_t *w, mc_te_op_t op,
                      const mc_rdma_slice_t *sl, size_t n, const uint32_t *lkeys,
                      const uint32_t *rkeys)
{
    struct ibv_send_wr wr[MC_RDMA_POST_BATCH], *bad = NULL;
    struct ibv_sge sge[MC_RDMA_POST_BATCH];
    rdma_wr_ctx_t *ctx[MC_RDMA_POST_BATCH];
    int rc;
    (void)rd;

    for (size_t i = 0; i < n; i++) {
        ctx[i] = malloc(sizeof(*ctx[i]));
        if (ctx[i] == NULL) {
            while (i-- > 0)
                free(ctx[i]);
            __atomic_sub_fetch(&q->outstanding, (unsigned)n, __ATOMIC_ACQ_REL);
            errno = ENOMEM;
            return -1;
        }
        ctx[i]->w = w;
        ctx[i]->q = q;
        memset(&wr[i], 0, sizeof(wr[i]));
        sge[i].addr                = sl[i].local;
        sge[i].length              = sl[i].len;
        sge[i].lkey                = lkeys[i];
        wr[i].wr_id                = (uint64_t)(uintptr_t)ctx[i];
        wr[i].sg_list              = &sge[i];
        wr[i].num_sge              = 1;
        wr[i].opcode               = (op == MC_TE_READ) ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
        /* a generation word READ waits for the QP's earlier READs to
         * complete (the fence), so the holder's memory behind it was read
         * before the word is (docs/transfer.md §12.8) */
        wr[i].send_flags           = IBV_SEND_SIGNALED |
                                     ((sl[i].rmr == RDMA_WORD_SLICE) ? IBV_SEND_FENCE : 0);
        wr[i].wr.rdma.remote_addr  = sl[i].remote;
        wr[i].wr.rdma.rkey         = rkeys[i];
        wr[i].next                 = (i + 1 < n) ? &wr[i + 1] : NULL;
    }
    pthread_mutex_lock(&w->mu);
    w->pending += n;
    pthread_mutex_unlock(&w->mu);
    rc = ibv_post_send(q->qp, wr, &bad);
    if (rc != 0) {
        /* WRs from bad on were not posted: take them back */
        size_t first = (bad != NULL) ? (size_t)(bad - wr) : 0, left = n - first;
        pthread_mutex_lock(&w->mu);
        w->pending -= left;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->mu);
        __atomic_sub_fetch(&q->outstanding, (unsigned)left, __ATOMIC_ACQ_REL);
        for (size_t i = first; i < n; i++)
            free(ctx[i]);
        errno = rc;
        return -1;
    }
    return 0;
}

/* The remote side of a request from the target's descriptor: the buffer
 * holding it and the target's device of each QP.  MC_INVALID_READ/WRITE
 * when no buffer holds the range (after one refresh), MC_NOT_SUPPORTED
 * when it has no rkeys or names none of our QPs' NICs (tcp instead). */
static mc_status_t remote_side(rdma_peer_t *p, mc_te_op_t op, uint64_t remote, uint64_t len,
                               mc_rdma_side_t *rs, int *rdev)
{
    const mc_te_buf_desc_t *b;
    mc_status_t st = MC_OK;
    int have;

    pthread_mutex_lock(&p->os.desc_mu);
    have = p->os.have_desc && mc_te_desc_contains(&p->os.desc, remote, len);
    pthread_mutex_unlock(&p->os.desc_mu);
    if (!have) {
        /* first use, or the target registered more since we looked */
        st = mc_onesided_desc_refresh(&p->os);
        if (st != MC_OK)
            return st;
    }
    pthread_mutex_lock(&p->os.desc_mu);
    b = mc_te_desc_find(&p->os.desc, remote, len);
    if ((b == NULL) || (len == 0)) {
        mc_set_error_detail("rdma %s of [0x%llx, +%llu) refused: not inside one buffer of "
                            "segment %s registered for remote access",
                            (op == MC_TE_READ) ? "read" : "write", (unsigned long long)remote,
                            (unsigned long long)len, p->os.desc.name ? p->os.desc.name : "?");
        st = (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
    } else if (b->nrkeys == 0) {
        st = MC_NOT_SUPPORTED;
    } else {
        *rs = (mc_rdma_side_t){b->addr, p->os.desc.rdma_mr_size, remote};
        for (size_t k = 0; k < p->nqps; k++) {
            rdev[k] = mc_rdma_desc_device(&p->os.desc, p->qps[k].remote_nic);
            if (rdev[k] < 0)
                st = MC_NOT_SUPPORTED;
        }
    }
    pthread_mutex_unlock(&p->os.desc_mu);
    return st;
}

/* Post the planned slices, each QP in chains while it has room, waiting
 * for completions when none has, until all are posted, a completion
 * failed, or @p deadline_ms.  Returns MC_OK or the failure. */
static mc_status_t post_all(rdma_peer_t *p, rdma_wait_t *w, mc_te_op_t op,
                            const mc_rdma_slice_t *sl, const uint32_t *lkeys,
                            const uint32_t *rkeys, size_t ns, uint64_t deadline_ms)
{
    mc_rdma_t *rd = peer_rd(p);
    size_t cnt[MC_RDMA_MAX_NICS] = {0}, start[MC_RDMA_MAX_NICS], fill[MC_RDMA_MAX_NICS];
    size_t pos[MC_RDMA_MAX_NICS] = {0}, posted = 0, *idx;
    mc_status_t st = MC_OK;

    idx = calloc(ns, sizeof(*idx));
    if (idx == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    /* slices grouped by QP, in order */
    for (size_t i = 0; i < ns; i++)
        cnt[sl[i].path]++;
    for (size_t k = 0, acc = 0; k < p->nqps; k++) {
        start[k] = fill[k] = acc;
        acc += cnt[k];
    }
    for (size_t i = 0; i < ns; i++)
        idx[fill[sl[i].path]++] = i;
    while ((posted < ns) && (st == MC_OK)) {
        int progress = 0;
        for (size_t k = 0; (k < p->nqps) && (st == MC_OK); k++) {
            rdma_qp_t *q = &p->qps[k];
            mc_rdma_slice_t bs[MC_RDMA_POST_BATCH];
            uint32_t bl[MC_RDMA_POST_BATCH], br[MC_RDMA_POST_BATCH];
            size_t b = qp_reserve(q, cnt[k] - pos[k],
                                  MC_MIN(rd->tun.max_wr, rd->nics[q->nic].max_qp_wr));
            for (size_t j = 0; j < b; j++) {
                size_t si = idx[start[k] + pos[k] + j];
                bs[j]     = sl[si];
                bl[j]     = lkeys[si];
                br[j]     = rkeys[si];
            }
            if ((b > 0) && (post_chain(rd, q, w, op, bs, b, bl, br) != 0)) {
                mc_set_error_detail("rdma: posting to %s failed: %s",
                                    rd->nics[q->nic].info.name, strerror(errno));
                st = MC_TRANSFER_FAIL;
            }
            pos[k] += b;
            posted += b;
            progress |= b > 0;
        }
        if ((st != MC_OK) || progress || (posted == ns))
            continue;
        pthread_mutex_lock(&w->mu);
        st = w->st; /* a failed slice ends the posting */
        pthread_mutex_unlock(&w->mu);
        if ((st == MC_OK) && (mc_now_ms() >= deadline_ms)) {
            mc_set_error_detail("rdma: no room on the queue pairs within %d s",
                                rd->te->cfg.io_timeout_s);
            st = MC_TRANSFER_FAIL;
        }
        if (st == MC_OK) {
            pthread_mutex_lock(&w->mu);
            size_t before = w->pending;
            pthread_mutex_unlock(&w->mu);
            /* any completion frees room; wake at least every millisecond */
            if (before > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_mutex_lock(&w->mu);
                if (w->pending == before)
                    (void)pthread_cond_timedwait(&w->cond, &w->mu, &ts);
                pthread_mutex_unlock(&w->mu);
            }
        }
    }
    free(idx);
    return st;
}

/* Whether a request that failed with work completion status @p wc_status
 * may succeed on fresh QPs: the target's NIC refused a key (the region was
 * registered anew: fetch the descriptor again), the peer's QP is gone (it
 * restarted, or evicted our QP set: retries exceeded), or the WR was only
 * flushed behind another request's failure on the same QP. */
static int wc_retryable(int wc_status)
{
    return (wc_status == IBV_WC_REM_ACCESS_ERR) || (wc_status == IBV_WC_LOC_PROT_ERR) ||
           (wc_status == IBV_WC_RETRY_EXC_ERR) || (wc_status == IBV_WC_WR_FLUSH_ERR);
}

/* Wait for every posted WR of @p w; on a timeout the QPs are moved to ERR
 * so the NIC flushes them.  Frees w, or leaves it to the poller when even
 * the flush does not come back.  Returns the request's status; *again_p
 * is set when the failure came from a completion that fresh QPs (and a
 * fresh descriptor) may cure (wc_retryable), never after a timeout: 2 when
 * the target's QP was gone (retries exceeded: it may have restarted), else
 * 1. */
static mc_status_t wait_all(rdma_peer_t *p, rdma_wait_t *w, mc_status_t st, mc_te_op_t op,
                            uint64_t remote, uint64_t len, int *again_p)
{
    mc_te_t *te   = peer_rd(p)->te;
    int timed_out = 0;
    if (wait_bounded(w, (uint64_t)MC_MAX(te->cfg.io_timeout_s, 1) * 1000u) != 0) {
        timed_out = 1;
        struct ibv_qp_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.qp_state = IBV_QPS_ERR;
        for (size_t k = 0; k < p->nqps; k++)
            (void)mc_ibv()->modify_qp(p->qps[k].qp, &attr, IBV_QP_STATE);
        if (st == MC_OK) {
            mc_set_error_detail("rdma: %s of %llu bytes got no completion within %d s",
                                (op == MC_TE_READ) ? "read" : "write",
                                (unsigned long long)len, te->cfg.io_timeout_s);
            st = MC_TRANSFER_FAIL;
        }
        __atomic_store_n(&p->os.broken, 1, __ATOMIC_RELEASE);
        if (wait_bounded(w, 5000) != 0) {
            int mine;
            pthread_mutex_lock(&w->mu);
            w->abandoned = 1; /* the last flushed completion frees it */
            mine         = w->pending == 0;
            pthread_mutex_unlock(&w->mu);
            if (!mine) {
                __atomic_add_fetch(&p->abandoned, 1, __ATOMIC_ACQ_REL);
                return st;
            }
        }
    }
    if (w->st != MC_OK) {
        if ((w->st == MC_INVALID_READ) || (w->st == MC_INVALID_WRITE) ||
            (w->wc_status == IBV_WC_RETRY_EXC_ERR)) {
            /* the target's NIC refused a key we took from its descriptor
             * (the region may have been registered anew), or the target
             * may have restarted: fetch the descriptor again */
            pthread_mutex_lock(&p->os.desc_mu);
            p->os.have_desc = 0;
            pthread_mutex_unlock(&p->os.desc_mu);
        }
        if (!timed_out && wc_retryable(w->wc_status))
            *again_p = (w->wc_status == IBV_WC_RETRY_EXC_ERR) ? 2 : 1;
        if (st == MC_OK) {
            st = w->st;
            mc_set_error_detail("rdma: %s of [0x%llx, +%llu) failed: %s",
                                (op == MC_TE_READ) ? "read" : "write",
                                (unsigned long long)remote, (unsigned long long)len,
                                mc_ibv()->wc_status_str((enum ibv_wc_status)w->wc_status));
        }
        __atomic_store_n(&p->os.broken, 1, __ATOMIC_RELEASE); /* the QP is in ERR */
    }
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return st;
}

/* Where the trailing word READs of a READ naming a generation go (the
 * word of the buffer holding [remote, +len) and its rkey per QP), or
 * MC_NOT_SUPPORTED when the target published no word for it (an older
 * engine, or every word taken): such a read goes over tcp.  desc_mu held. */
static mc_status_t gen_word_remote(rdma_peer_t *p, uint64_t remote, uint64_t len,
                                   const int *rdev, uint64_t *waddr_p, uint32_t *wrkeys)
{
    const mc_te_buf_desc_t *b = mc_te_desc_find(&p->os.desc, remote, len);
    if ((b == NULL) || !b->has_gen_slot || (p->os.desc.gen_words.nwords == 0) ||
        (peer_rd(p)->land == NULL))
        return MC_NOT_SUPPORTED;
    *waddr_p = p->os.desc.gen_words.addr + 8u * (uint64_t)b->gen_slot;
    for (size_t k = 0; k < p->nqps; k++)
        wrkeys[k] = p->os.desc.gen_words.rkeys[rdev[k]];
    return MC_OK;
}

/*
 * The one-sided path.  Returns MC_OK or the failure; MC_NOT_SUPPORTED
 * (nothing delivered) when the request must go over tcp instead: *stale_p
 * is then set when a READ naming generation @p gen found its word changed
 * (the bytes read are not the caller's; the tcp path adopts or refuses).
 * *again_p is set when the request may succeed once more on fresh QPs
 * (wait_all).  use held for reading.
 */
static mc_status_t xfer_rdma(rdma_peer_t *p, mc_te_op_t op, void *local, uint64_t remote,
                             uint64_t len, uint64_t gen, int *again_p, int *stale_p)
{
    mc_rdma_t *rd = peer_rd(p);
    mc_te_t *te   = rd->te;
    mc_te_region_t *lr;
    const rdma_mr_t *lm;
    mc_rdma_side_t ls, rs;
    size_t order[MC_RDMA_MAX_NICS];
    int rdev[MC_RDMA_MAX_NICS];
    mc_rdma_slice_t *sl = NULL;
    uint32_t *lkeys = NULL, *rkeys = NULL, first, wrkeys[MC_RDMA_MAX_NICS];
    uint64_t waddr = 0;
    int used[MC_RDMA_MAX_NICS] = {0};
    int64_t land = -1;
    unsigned abandoned;
    rdma_wait_t *w;
    size_t ns, nt;
    mc_status_t st;

    if (op != MC_TE_READ)
        gen = 0; /* a WRITE's generation is not checked one-sidedly (§3.6) */
    lr = mc_te_region_acquire(te, (uint64_t)(uintptr_t)local, len, 0);
    if ((lr == NULL) || (lr->tp_mr == NULL)) {
        if (lr != NULL)
            mc_te_region_release(te, lr);
        return MC_NOT_SUPPORTED; /* unregistered local memory: no lkey */
    }
    lm = lr->tp_mr;
    st = remote_side(p, op, remote, len, &rs, rdev);
    if (st != MC_OK) {
        mc_te_region_release(te, lr);
        return st;
    }
    if (gen != 0) {
        pthread_mutex_lock(&p->os.desc_mu);
        st = gen_word_remote(p, remote, len, rdev, &waddr, wrkeys);
        pthread_mutex_unlock(&p->os.desc_mu);
        land = (st == MC_OK) ? land_get(rd) : -1;
        if (land < 0) {
            mc_te_region_release(te, lr);
            return MC_NOT_SUPPORTED; /* the tcp path checks the generation */
        }
    }
    ls    = (mc_rdma_side_t){lr->addr, rd->mr_cut, (uint64_t)(uintptr_t)local};
    first = __atomic_fetch_add(&p->rr, 1, __ATOMIC_RELAXED);
    ns    = mc_rdma_plan(&ls, &rs, len, rd->tun.slice, (uint32_t)p->nqps, first, NULL, 0);
    nt    = ns + ((gen != 0) ? p->nqps : 0); /* room for the trailing word READs */
    sl    = calloc(nt ? nt : 1, sizeof(*sl));
    lkeys = calloc(nt ? nt : 1, sizeof(*lkeys));
    rkeys = calloc(nt ? nt : 1, sizeof(*rkeys));
    w     = calloc(1, sizeof(*w));
    if ((ns == 0) || (sl == NULL) || (lkeys == NULL) || (rkeys == NULL) || (w == NULL)) {
        st = (ns == 0) ? ((op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE)
                       : MC_INTERNAL_ERROR;
        mc_set_error_detail((ns == 0) ? "rdma: the request cannot be planned"
                                      : "out of memory");
        free(w);
        goto out;
    }
    (void)mc_rdma_plan(&ls, &rs, len, rd->tun.slice, (uint32_t)p->nqps, first, sl, ns);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->op = op;
    /* paths in the order of the NICs nearest the local memory; each
     * slice's keys, the remote one checked per slice (confinement) */
    mc_rdma_nic_order(te->rdma_nics, rd->nnics, mc_rdma_addr_numa(local), order);
    pthread_mutex_lock(&p->os.desc_mu);
    for (size_t i = 0; (i < ns) && (st == MC_OK); i++) {
        size_t qi  = order[sl[i].path];
        sl[i].path = (uint32_t)qi;
        lkeys[i]   = lm->mrs[sl[i].lmr * rd->nnics + p->qps[qi].nic]->lkey;
        st = mc_rdma_remote_key(&p->os.desc, op, sl[i].remote, sl[i].len, (size_t)rdev[qi],
                                &rkeys[i], NULL);
        used[qi] = 1;
    }
    pthread_mutex_unlock(&p->os.desc_mu);
    /* after the data on each QP that carries some, a fenced READ of the
     * word: post_all keeps a QP's slices in array order, the responder
     * executes one QP's READs in order, and the fence holds the word READ
     * back until the data READs completed (docs/transfer.md §12.8) */
    nt = ns;
    for (size_t qi = 0; (gen != 0) && (qi < p->nqps); qi++) {
        uint64_t *dst;
        if (!used[qi])
            continue;
        dst = &rd->land[(size_t)land * MC_RDMA_MAX_NICS + qi];
        __atomic_store_n(dst, 0, __ATOMIC_RELAXED);
        sl[nt]    = (mc_rdma_slice_t){(uint64_t)(uintptr_t)dst, waddr, 8u, (uint32_t)qi, 0,
                                      RDMA_WORD_SLICE};
        lkeys[nt] = rd->land_mr[p->qps[qi].nic]->lkey;
        rkeys[nt] = wrkeys[qi];
        nt++;
    }
    abandoned = __atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE);
    if (st == MC_OK)
        st = post_all(p, w, op, sl, lkeys, rkeys, nt,
                      mc_now_ms() + (uint64_t)MC_MAX(te->cfg.io_timeout_s, 1) * 1000u);
    st = wait_all(p, w, st, op, remote, len, again_p);
    for (size_t qi = 0; (st == MC_OK) && (gen != 0) && (qi < p->nqps); qi++) {
        uint64_t v;
        if (!used[qi])
            continue;
        v = __atomic_load_n(&rd->land[(size_t)land * MC_RDMA_MAX_NICS + qi], __ATOMIC_ACQUIRE);
        if (v != gen) {
            /* registered anew, given up, or another counter: the bytes are
             * not the ones named; tcp adopts or refuses as the target says */
            mc_debug("rdma: read of [0x%llx, +%llu): generation word %016llx, expected "
                     "%016llx; asking over tcp", (unsigned long long)remote,
                     (unsigned long long)len, (unsigned long long)v, (unsigned long long)gen);
            *stale_p = 1;
            st       = MC_NOT_SUPPORTED;
        }
    }
    if ((land >= 0) && (__atomic_load_n(&p->abandoned, __ATOMIC_ACQUIRE) != abandoned))
        land = -1; /* a late completion may still land there: never reuse it */
out:
    if (land >= 0)
        land_put(rd, land);
    free(sl);
    free(lkeys);
    free(rkeys);
    mc_te_region_release(te, lr);
    return st;
}

/* ops.run: one attempt on the peer's QPs (xfer_rdma). */
static mc_status_t rdma_run(mc_onesided_peer_t *op, mc_onesided_req_t *rq)
{
    return xfer_rdma((rdma_peer_t *)op, rq->op, rq->local, rq->remote, rq->len, rq->gen,
                     &rq->again, &rq->stale);
}

/* ops.retry: once more on reset QPs, with a fresh descriptor after a
 * refused key or a lost peer: a target that restarted or dropped our QPs,
 * or a request only flushed behind another one's failure, then succeeds;
 * the handshake and the range check decide the rest.  A WRITE naming a
 * generation is not sent again to a target that may have restarted: where
 * to write came from before the restart, and the one-sided path cannot
 * check the generation (§3.6). */
static int rdma_retry(mc_onesided_peer_t *op, const mc_onesided_req_t *rq, mc_status_t st)
{
    (void)st;
    if (!rq->again || ((rq->again == 2) && (rq->op == MC_TE_WRITE) && (rq->gen != 0)))
        return 0;
    mc_debug("rdma: %s:%u: retrying a %s on fresh queue pairs (%s)",
             mc_tcp_peer_host(op->tcp_peer), (unsigned)mc_tcp_peer_port(op->tcp_peer),
             (rq->op == MC_TE_READ) ? "read" : "write", mc_last_error_detail());
    return 1;
}

/*
 * A READ naming a registration generation (a cached location,
 * docs/transfer.md §3.6) is checked one-sidedly by a trailing READ of the
 * region's generation word (xfer_rdma); one the target published no word
 * for, or whose word differs, takes the tcp path, which checks it.  A
 * WRITE's generation is not checked here: puts keep the one-sided path,
 * and the writer's 1 s rule on reservations (docs/protocol.md) bounds that
 * hazard on rdma; over tcp, a WRITE's generation is checked.
 */
static const mc_onesided_ops_t rdma_os_ops = {
    .name          = "rdma",
    .connect       = peer_connect,
    .run           = rdma_run,
    .retry         = rdma_retry,
    .broken_detail = "rdma: the queue pairs to the target keep breaking",
    .why_none      = "the target has no RDMA",
};

const mc_te_transport_ops_t mc_rdma_transport_ops = {
    .size       = sizeof(mc_te_transport_ops_t),
    .name       = "rdma",
    .install    = rdma_install,
    .uninstall  = rdma_uninstall,
    .peer_open  = rdma_peer_open,
    .peer_close = rdma_peer_close,
    .describe   = mc_onesided_describe,
    .xfer       = mc_onesided_xfer,
    .mem_reg    = rdma_mem_reg,
    .mem_dereg  = rdma_mem_dereg,
    .desc_fill  = rdma_desc_fill,
    .disk_read  = mc_onesided_disk_read,
    .peer_revive = mc_onesided_peer_revive,
};

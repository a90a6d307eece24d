/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decisions of the RDMA data path that need no device (docs/transfer.md,
 * "RDMA"), kept free of libibverbs so they run and are unit-tested on any
 * host:
 *  - the slice planner: a request cut at local and remote MR boundaries
 *    and every slice bytes, its slices spread over the NIC paths;
 *  - work-request batching under a bound on outstanding WRs per QP;
 *  - the remote range and rkey check against a peer's descriptor;
 *  - the queue-pair attributes (INIT, RTR, RTS) derived from a handshake
 *    endpoint, and the GID index choice (MC_GID_INDEX or a table scan).
 * Not installed.
 */
#ifndef MC_TRANSFER_RDMA_PLAN_H
#define MC_TRANSFER_RDMA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>
#include <mooncake/transfer.h>

#include "transfer/descriptor.h"
#include "transfer/rdma/codec.h"

/* Most WRs posted in one ibv_post_send (a chain). */
#define MC_RDMA_POST_BATCH      16

/* ---- tunables (upstream's environment names) ------------------------------ */

#define MC_RDMA_DEFAULT_MAX_WR     256         /* MC_MAX_WR: outstanding per QP */
#define MC_RDMA_MAX_WR_LIMIT       4096
#define MC_RDMA_DEFAULT_SLICE      (64u * 1024u) /* MC_SLICE_SIZE: bytes per WR */
#define MC_RDMA_MIN_SLICE          4096u
#define MC_RDMA_MAX_SLICE          (1u << 30)

typedef struct mc_rdma_tunables {
    unsigned max_wr;     /* WRs outstanding per QP */
    uint64_t slice;      /* largest WR */
    uint8_t mtu;         /* enum ibv_mtu cap (1..5), 0: the port's active MTU */
} mc_rdma_tunables_t;

/*
 * Resolve the values of MC_MAX_WR (1..4096, default 256), MC_SLICE_SIZE
 * (a size in 4 KiB..1 GiB, default 64 KiB) and MC_MTU (256, 512, 1024,
 * 2048 or 4096; default the port's); NULL or "" is the default.  Anything
 * else is MC_INVALID_PARAMS naming the variable (setup is refused).
 */
mc_status_t mc_rdma_tunables(const char *max_wr, const char *slice, const char *mtu,
                             mc_rdma_tunables_t *t_p);

/* ---- slice planner ------------------------------------------------------- */

/* One side of a request: the registration holding it (base and the
 * device's max MR size, 0 for one MR) and the address inside it. */
typedef struct mc_rdma_side {
    uint64_t base;
    uint64_t max_mr;
    uint64_t addr;
} mc_rdma_side_t;

/* One work request to post. */
typedef struct mc_rdma_slice {
    uint64_t local;    /* local address */
    uint64_t remote;   /* remote address */
    uint32_t len;
    uint32_t path;     /* index into the caller's path order */
    uint32_t lmr;      /* MR index of the local registration */
    uint32_t rmr;      /* MR index of the remote registration */
} mc_rdma_slice_t;

/*
 * Cut a request of @p len bytes between @p local and @p remote into
 * slices: every piece lies inside one local MR and one remote MR and is
 * at most @p slice bytes (0: no cut besides MRs; pieces are also capped
 * at 1 GiB, a WR's 32-bit length).  Slices are dealt round-robin over
 * @p npaths paths starting at @p first_path, so a large transfer uses
 * every NIC.  Writes min(count, cap) slices and returns count; 0 for len
 * 0, npaths 0, an address below its base, or a range that wraps.
 */
size_t mc_rdma_plan(const mc_rdma_side_t *local, const mc_rdma_side_t *remote, uint64_t len,
                    uint64_t slice, uint32_t npaths, uint32_t first_path,
                    mc_rdma_slice_t *out, size_t cap);

/* ---- WR batching ---------------------------------------------------------- */

/* How many of @p pending WRs to post now on a QP that has @p outstanding
 * of at most @p max_outstanding in flight: as many as fit, at most
 * @p batch per post (a chained list).  0: wait for completions first. */
static inline size_t mc_rdma_batch_size(size_t pending, size_t outstanding,
                                        size_t max_outstanding, size_t batch)
{
    size_t room = (outstanding >= max_outstanding) ? 0 : max_outstanding - outstanding;
    size_t k    = (pending < room) ? pending : room;
    return (k < batch) ? k : batch;
}

/* ---- remote range and rkey ------------------------------------------------ */

/*
 * The rkey the peer described for [addr, addr+len) through its NIC
 * @p dev (index into d->devices).  The range must lie inside one listed
 * buffer and one of its MRs (the planner cuts there).  MC_INVALID_READ /
 * MC_INVALID_WRITE (by @p op) with a detail when the range is not in a
 * buffer or crosses an MR; MC_NOT_SUPPORTED when the buffer carries no
 * rkey for that NIC (a tcp peer, or an older descriptor).  *buf_p gets
 * the buffer when non-NULL.
 */
mc_status_t mc_rdma_remote_key(const mc_te_desc_t *d, mc_te_op_t op, uint64_t addr,
                               uint64_t len, size_t dev, uint32_t *rkey_p,
                               const mc_te_buf_desc_t **buf_p);

/* Index of NIC @p name in d->devices, or -1. */
int mc_rdma_desc_device(const mc_te_desc_t *d, const char *name);

/* ---- queue-pair attributes ----------------------------------------------- */

/* Local facts needed to connect one QP (from the opened NIC). */
typedef struct mc_rdma_local {
    uint8_t port;        /* 1-based */
    uint8_t mtu;         /* active MTU, enum ibv_mtu 1..5 */
    uint8_t gid_index;
    int ethernet;        /* RoCE: the path needs a GRH */
    uint32_t psn;        /* our starting PSN */
} mc_rdma_local_t;

/* The values of the three transitions, in the units of libibverbs. */
typedef struct mc_rdma_qp_attrs {
    /* INIT */
    uint8_t port;
    unsigned access;        /* MC_RDMA_ACCESS_* */
    /* RTR */
    uint8_t path_mtu;       /* min of both ends */
    uint32_t dest_qpn;
    uint32_t rq_psn;        /* the peer's PSN */
    uint16_t dlid;
    int is_global;          /* GRH: RoCE, or a GID given on InfiniBand */
    uint8_t dgid[16];
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    /* RTS */
    uint32_t sq_psn;        /* ours */
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t max_rd_atomic;
} mc_rdma_qp_attrs_t;

/* Remote access the QP grants: exactly one-sided READ and WRITE. */
#define MC_RDMA_ACCESS_LOCAL_WRITE  1u
#define MC_RDMA_ACCESS_REMOTE_WRITE 2u
#define MC_RDMA_ACCESS_REMOTE_READ  4u

/*
 * The attributes that connect a local QP to the peer's endpoint @p ep.
 * MC_INVALID_PARAMS with a detail when they cannot connect: RoCE with a
 * zero GID on either side of the choice, InfiniBand with LID 0 and no
 * GID, an MTU outside 1..5, a local port 0.
 */
mc_status_t mc_rdma_qp_attrs(const mc_rdma_local_t *local, const mc_rdma_ep_t *ep,
                             mc_rdma_qp_attrs_t *a_p);

/*
 * The GID index to use on a port whose table is @p gids[0..n) (zero
 * entries are unused).  @p env is MC_GID_INDEX (NULL or "": choose):
 * an integer below n naming a non-zero entry, else MC_INVALID_PARAMS
 * naming the variable.  Choosing prefers an IPv4-mapped GID
 * (::ffff:a.b.c.d, what RoCE v2 routes on), then any non-zero one other
 * than link-local fe80::, then index 0 when it is non-zero.
 * MC_NOT_SUPPORTED when the table has no usable entry.
 */
mc_status_t mc_rdma_gid_pick(const uint8_t (*gids)[16], size_t n, const char *env,
                             uint8_t *index_p);

#endif /* MC_TRANSFER_RDMA_PLAN_H */

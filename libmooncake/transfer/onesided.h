/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The base of the one-sided transports (rdma/, fabric/): what both do
 * around their own memory access, on the tcp transport each keeps
 * underneath (docs/transfer.md §12, §14).  Not installed.
 *
 * Such a transport installs tcp for the data port, the descriptors and the
 * requests it cannot serve one-sidedly; each of its peers wraps a tcp peer
 * and caches the target's descriptor.  This module owns that shared part:
 * the tcp transport and peers underneath, the descriptor cache and its
 * refresh, the peer's use lock with the reconnect ("the reset") under it,
 * the request's path (one attempt, at most one more on a reset peer, then
 * tcp with a notice logged once per peer), and the ops that only forward
 * to tcp (describe, DISK_READ).  The transport passes in what differs
 * (mc_onesided_ops_t): how a peer connects (queue pairs and a handshake;
 * an endpoint and an address), how one attempt runs, and when a failed one
 * runs again.
 *
 * Not here, by design: completions, pollers and waits.  rdma has a verbs
 * CQ and completion channel per NIC and counts WRs per queue pair; fabric
 * has one libfabric queue, read with or without a wait object, whose
 * poller must step out while an endpoint opens (tcp;ofi_rxm): the loops
 * share a shape, not their logic.
 *
 * Layout: mc_onesided_t is the first member of the transport's state
 * (its priv) and mc_onesided_peer_t the first member of its peers, so the
 * engine's priv and peer pointers are these too; the transport checks it
 * with a _Static_assert.  May call: tcp/ (through mc_tcp_transport_ops and
 * tcp.h), descriptor.h, common/.
 */
#ifndef MC_TRANSFER_ONESIDED_H
#define MC_TRANSFER_ONESIDED_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "transfer/engine.h"

typedef struct mc_onesided_peer mc_onesided_peer_t;

/* One request on its way (mc_onesided_xfer). */
typedef struct mc_onesided_req {
    mc_te_op_t op;
    void *local;
    uint64_t remote;
    uint64_t len;
    uint64_t gen;   /* the region's expected generation, or 0 */
    /* set by run: */
    int again;      /* the transport's reason why it may succeed once more */
    int stale;      /* a generation READ the one-sided path could not confirm:
                     * tcp decides, and no fallback notice is logged */
} mc_onesided_req_t;

/* What a one-sided transport does its own way. */
typedef struct mc_onesided_ops {
    const char *name;           /* log prefix: "rdma", "fabric" */
    /* Drop what the peer had and connect it anew from a fresh look at the
     * target (use held for writing).  On success the peer is connected and
     * not broken; MC_NOT_SUPPORTED, with no_onesided set, when the target
     * cannot be reached one-sidedly (its requests go over tcp). */
    mc_status_t (*connect)(mc_onesided_peer_t *p);
    /* One attempt (use held for reading): MC_OK or the failure, and
     * MC_NOT_SUPPORTED, nothing delivered, when it must go over tcp. */
    mc_status_t (*run)(mc_onesided_peer_t *p, mc_onesided_req_t *rq);
    /* Whether an attempt that failed with @p st runs once more on a reset
     * peer (reads and writes are idempotent); logs why when it does. */
    int (*retry)(mc_onesided_peer_t *p, const mc_onesided_req_t *rq, mc_status_t st);
    const char *broken_detail;  /* error detail when the reset does not hold */
    const char *why_none;       /* the fallback notice's reason with no_onesided */
    /* Nonzero: a READ naming a generation goes straight over tcp (the
     * transport cannot confirm a generation one-sidedly, docs/transfer.md
     * §3.6); zero: run sees it and sets stale when it could not. */
    int gen_reads_tcp;
} mc_onesided_ops_t;

/* The first member of a one-sided transport's state. */
typedef struct mc_onesided {
    const mc_onesided_ops_t *ops;
    void *tcp;                  /* the tcp transport underneath, or NULL */
    const char *why_unkeyed;    /* the notice's reason otherwise (no lkey or key) */
} mc_onesided_t;

/* The first member of a one-sided transport's peers. */
struct mc_onesided_peer {
    mc_onesided_t *tp;
    void *tcp_peer;
    pthread_rwlock_t use;       /* requests read-lock; (re)connect write-locks */
    int connected;              /* under use (write) */
    int broken;                 /* atomic: a failure; reconnect before the next */
    int no_onesided;            /* atomic: the target has no endpoint of ours */
    int warned_tcp;             /* atomic: the fallback to tcp was logged */
    pthread_mutex_t desc_mu;
    mc_te_desc_t desc;          /* the target's descriptor, under desc_mu */
    int have_desc;              /* under desc_mu: desc may be used (set by each
                                 * refresh; rdma clears it to fetch again) */
};

/* Install the tcp transport underneath @p os (the last step of the
 * transport's install: it owns the data port) and take @p ops. */
mc_status_t mc_onesided_install(mc_onesided_t *os, const mc_onesided_ops_t *ops, mc_te_t *te,
                                const char *bind_addr, uint16_t port, uint16_t *port_p);
/* Uninstall the tcp transport underneath, if any (the first step of the
 * transport's uninstall: no request is served past it). */
void mc_onesided_uninstall(mc_onesided_t *os);

/* A zeroed peer of @p size bytes (the transport's peer, this base first)
 * with its tcp peer open to host:port. */
mc_status_t mc_onesided_peer_create(mc_onesided_t *os, size_t size, const char *host,
                                    uint16_t port, void **peer_p);
/* Close the tcp peer and drop the descriptor; then, unless @p keep (a late
 * completion may still name the peer's memory), free the peer. */
void mc_onesided_peer_destroy(mc_onesided_peer_t *p, int keep);

/* Fetch the target's descriptor into p->desc (over tcp). */
mc_status_t mc_onesided_desc_refresh(mc_onesided_peer_t *p);

/* Ops-table entries (priv an mc_onesided_t, peer an mc_onesided_peer_t).
 * xfer: one-sided (ops->run, once more when ops->retry says so), or over
 * tcp when that answers MC_NOT_SUPPORTED.  The descriptor and DISK_READ go
 * over the peer's tcp connection. */
mc_status_t mc_onesided_xfer(void *priv, void *peer, mc_te_op_t op, void *local,
                             uint64_t remote, uint64_t len, uint64_t gen);
mc_status_t mc_onesided_describe(void *priv, void *peer, char **json_p, size_t *len_p);
mc_status_t mc_onesided_disk_read(void *priv, void *peer, const mc_te_disk_req_t *req,
                                  void *buf);
void mc_onesided_peer_revive(void *priv, void *peer, uint64_t before_ns);

#endif /* MC_TRANSFER_ONESIDED_H */

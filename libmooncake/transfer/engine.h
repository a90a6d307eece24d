/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Transfer engine internals shared by engine.c, metadata.c and the
 * transports (tcp/, later rdma/ and shm/).  Not installed.
 *
 * Ownership and locking (docs/transfer.md, "Threads and locks"):
 *  - regions: a sorted array of pointers under regions_lock (rwlock).  A
 *    served request pins its region with a reference taken under the read
 *    lock; mc_te_mem_dereg unlinks the region under the write lock and then
 *    waits on region_cond until the references drain, so memory is never
 *    released under an in-flight request.
 *  - segments: name -> segment hash and id -> segment array under seg_lock.
 *    Segments live until the engine is destroyed (a cache of peers); a
 *    segment's descriptor changes only under its own desc_mu.
 *  - the worker pool: queue and per-batch counters under pool_mu.
 *  - publish_mu serialises metadata publications so the last PUT always
 *    carries the newest region list.
 */
#ifndef MC_TRANSFER_ENGINE_H
#define MC_TRANSFER_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <mooncake/transfer.h>

#include "common/auth.h"
#include "common/gen.h"
#include "common/hashmap.h"
#include "transfer/descriptor.h"
#include "transfer/proto.h"
#include "transfer/rdma/nic.h"
#include "transfer/shm/shm.h"

/* Defaults (docs/transfer.md, "Tuning"). */
#define MC_TE_DEFAULT_PORT_MIN        12300
#define MC_TE_DEFAULT_PORT_MAX        14300
#define MC_TE_DEFAULT_LANES           4
#define MC_TE_MAX_LANES               64
#define MC_TE_DEFAULT_IO_TIMEOUT_S    5   /* no progress this long: the peer is gone */
#define MC_TE_DEFAULT_CONNECT_MS      3000
#define MC_TE_DEFAULT_MAX_CONNS       1024
#define MC_TE_DEFAULT_MAX_CONNS_PEER  256   /* served connections from one address */
#define MC_TE_DEFAULT_IDLE_TIMEOUT_S  120   /* a served connection idle this long is closed */
#define MC_TE_DEFAULT_HANDSHAKE_MS    3000  /* ... and one without a first request this long */
#define MC_TE_DEFAULT_SLICE_SIZE      (512u * 1024u)
#define MC_TE_MAX_WORKERS             64
#define MC_TE_PORT_RANDOM_TRIES       50
#define MC_TE_HTTP_CONNECT_MS         1500
#define MC_TE_HTTP_TOTAL_MS           3000
/* Id of the engine's own segment (upstream LOCAL_SEGMENT_ID). */
#define MC_TE_SELF_SEGMENT            0

typedef struct mc_te mc_te_t;
typedef struct mc_te_segment mc_te_segment_t;

/* Resolved tunables of one engine. */
typedef struct mc_te_config {
    uint16_t port_min;
    uint16_t port_max;
    unsigned lanes;          /* pooled connections per peer */
    unsigned workers;        /* batch worker threads (started lazily) */
    unsigned max_conns;      /* served connections at once */
    unsigned max_conns_peer; /* ... from one peer address */
    int idle_timeout_s;      /* close a served connection idle this long (0: never) */
    unsigned handshake_ms;   /* ... one whose first request header is not complete by then */
    int io_timeout_s;        /* SO_RCVTIMEO / SO_SNDTIMEO on data sockets */
    int connect_timeout_ms;
    uint64_t slice_size;     /* batch requests above this are split */
    unsigned busy_poll_us;   /* poll a socket this long before sleeping on it (tcp) */
    unsigned serve_poll_us;  /* ... a served connection, for its next request (tcp) */
} mc_te_config_t;

/* One registered region. */
typedef struct mc_te_region {
    uintptr_t addr;
    size_t len;
    unsigned flags;                      /* enum mc_te_mem_flag */
    char location[MC_TE_LOCATION_MAX];
    unsigned refs;                       /* atomic: requests using it */
    int dying;                           /* atomic: unlinked by dereg */
    int fd;                              /* sealed memfd to share, or -1 */
    uint32_t shm_slot;                   /* control word, or UINT32_MAX */
    uint64_t shm_gen;                    /* its value while registered */
    void *tp_mr;                         /* the transport's registration, or NULL */
    uint64_t gen;                        /* registration generation (0: none),
                                          * checked by generation READs and WRITEs;
                                          * atomic: its reuse counter moves
                                          * (mc_te_gen_enter) */
    uint64_t gen_floor;                  /* atomic: its last fence (common/gen.h):
                                          * writes naming an earlier one are refused */
    uint32_t gen_seq;                    /* atomic: generations adopted so far */
    uint32_t gen_drained;                /* atomic: gen_seq once the requests of the
                                          * generation before it were done */
    unsigned gen_users[2];               /* atomic: requests in progress that named
                                          * the generation, by gen_seq parity */
    /* a file segment (transfer/file/file.h): its bytes are moved by the
     * backend at offset addr - this->addr, never by memcpy; NULL for memory */
    const struct mc_te_file_ops *fops;
    void *fpriv;
} mc_te_region_t;

/* One element of a pipelined run (mc_te_tp_xfer_run). */
typedef struct mc_te_xfer {
    void *local;
    uint64_t remote;
    uint64_t len;
    uint64_t gen; /* the region's expected generation, or 0 */
} mc_te_xfer_t;

/* Most requests handed to mc_te_tp_xfer_spread at once. */
#define MC_TE_SPREAD_MAX       MC_TE_MAX_LANES

/* Runs handed to a transport at once: small same-direction requests to one
 * peer travel back to back on one connection (docs/transfer.md,
 * "Pipelining"). */
#define MC_TE_RUN_MAX_ITEMS    64
#define MC_TE_RUN_MAX_ITEM_LEN (64u * 1024u)
#define MC_TE_RUN_MAX_BYTES    (1024u * 1024u)

/* A same-host direct write (mc_te_write_direct_gen) of at least this many
 * bytes in all is split into pieces of at least half of it, copied by the
 * calling thread and the workers together; at most this many pieces. */
#define MC_TE_DIRECT_SPREAD_MIN  ((uint64_t)4 << 20)
#define MC_TE_DIRECT_PIECES_MAX  4u

/* A same-host write of at least MC_TE_ADOPT_SPLIT_MIN bytes naming a
 * generation the holder has not adopted yet sends only its first
 * MC_TE_ADOPT_HEAD bytes over the network, where the holder adopts it,
 * and copies the rest straight into the holder's memory. */
#define MC_TE_ADOPT_SPLIT_MIN    ((uint64_t)64 << 10)
#define MC_TE_ADOPT_HEAD         ((uint64_t)4 << 10)

/*
 * A transport is an ops table.  The engine calls it only through the
 * inline wrappers below, whose comments are the contract every transport
 * implements.  The table starts with its size so it can grow.
 */
typedef struct mc_te_transport_ops {
    size_t size;
    const char *name;
    mc_status_t (*install)(mc_te_t *te, const char *bind_addr, uint16_t port,
                           void **priv_p, uint16_t *port_p);
    void (*uninstall)(void *priv);
    mc_status_t (*peer_open)(void *priv, const char *host, uint16_t port, void **peer_p);
    void (*peer_close)(void *priv, void *peer);
    mc_status_t (*describe)(void *priv, void *peer, char **json_p, size_t *len_p);
    mc_status_t (*xfer)(void *priv, void *peer, mc_te_op_t op, void *local,
                        uint64_t remote, uint64_t len, uint64_t gen);
    void (*xfer_run)(void *priv, void *peer, mc_te_op_t op, const mc_te_xfer_t *v, size_t n,
                     mc_status_t *statuses); /* optional */
    void (*xfer_spread)(void *priv, void *peer, mc_te_op_t op, const mc_te_xfer_t *v,
                        size_t n, mc_status_t *statuses); /* optional */
    mc_status_t (*disk_read)(void *priv, void *peer, const mc_te_disk_req_t *req,
                             void *buf); /* optional */
    mc_status_t (*mem_reg)(void *priv, mc_te_region_t *r);     /* optional */
    void (*mem_dereg)(void *priv, mc_te_region_t *r);          /* optional */
    mc_status_t (*desc_fill)(void *priv, mc_te_desc_t *d,
                             mc_te_region_t *const *regions);  /* optional */
    /* Nonzero: xfer, xfer_run and xfer_spread call mc_te_sent_hook_run()
     * once their requests are sent, before they wait for the answers
     * (mc_te_transfer_gen_sent). */
    int runs_sent_hook;
    /* One READ of [remote, +len) whose answer lands in runs[0..nruns) in
     * order (mc_te_read_scatter_gen); optional: without it the engine
     * reads the runs as requests of their own. */
    mc_status_t (*read_scatter)(void *priv, void *peer, uint64_t remote, uint64_t len,
                                uint64_t gen, const struct iovec *runs, size_t nruns);
    /* One READV of ranges[0..nranges) (their lengths adding up to @p len,
     * within proto.h's limits) whose answer lands in runs[0..nruns) in
     * order (mc_te_read_gather_gen); optional, and used only towards a
     * peer whose descriptor says "tcp_readv".  @p flags: 0, or
     * MC_TE_GATHER_STRIDED when its descriptor also says
     * "tcp_readv_strided" (the ranges may go as a READV_STRIDED). */
    mc_status_t (*read_gather)(void *priv, void *peer, const mc_te_range_t *ranges,
                               size_t nranges, uint64_t len, uint64_t gen, unsigned flags,
                               const struct iovec *runs, size_t nruns);
    /* One READV_STRIDED of the entries e[0..n) (checked as
     * mc_te_readvs_decode would, their rows adding up to @p len) whose
     * answer lands in runs[0..nruns) in order; optional, and used only
     * towards a peer whose descriptor says "tcp_readv_strided". */
    mc_status_t (*read_gather_strided)(void *priv, void *peer, const mc_te_strided_t *e,
                                       size_t n, uint64_t len, uint64_t gen,
                                       const struct iovec *runs, size_t nruns);
    /* Forget a fail-fast verdict on the peer (it counts as down after a
     * failed connect or an unanswered request) reached before @p
     * before_ns (mc_now_ns()); optional: a transport without such
     * verdicts has none to forget. */
    void (*peer_revive)(void *priv, void *peer, uint64_t before_ns);
} mc_te_transport_ops_t;

/* read_gather's flag: the peer serves READV_STRIDED. */
#define MC_TE_GATHER_STRIDED 0x1u

/*
 * The holder's side of DISK_READ: the store's disk tier installs it
 * (mc_te_disk_serve_set).  It checks @p req against the records the tier
 * wrote and still holds and, only for one of them, reads the value into
 * a malloc'd buffer of req->length bytes (*buf_p, freed by the caller).
 * MC_OBJECT_NOT_FOUND for anything it cannot vouch for.
 */
typedef mc_status_t (*mc_te_disk_serve_func_t)(void *arg, const mc_te_disk_req_t *req,
                                               void **buf_p);

/* Disk reads served at once by one engine (each holds a value buffer);
 * more wait, up to the I/O timeout, then are answered as busy. */
#define MC_TE_DISK_SERVE_MAX 16

/* Segment states while it is being opened (see mc_te_segment_open). */
typedef enum mc_te_seg_state {
    MC_TE_SEG_OPENING = 0, /**< one thread is fetching the descriptor */
    MC_TE_SEG_READY   = 1  /**< id assigned, usable */
} mc_te_seg_state_t;

struct mc_te_segment {
    mc_hnode_t hnode;          /* in te->seg_by_name */
    mc_te_segment_id_t id;
    char *name;
    mc_te_seg_state_t state;   /* under te->seg_lock */
    int is_self;
    void *peer;                /* transport peer (NULL for self) */
    mc_te_shm_peer_t *shm;     /* same-host path (atomic pointer), or NULL */
    struct mc_te_shm_retired *shm_retired; /* replaced paths, freed with it */
    pthread_mutex_t desc_mu;
    mc_te_desc_t desc;         /* last fetched descriptor, under desc_mu */
};

typedef enum mc_te_meta_kind {
    MC_TE_META_P2P  = 0, /**< descriptors from the peers themselves */
    MC_TE_META_HTTP = 1, /**< GET/PUT/DELETE <url>?key=... */
    MC_TE_META_ETCD = 2, /**< keys in etcd (coord/etcd.h) */
    MC_TE_META_REDIS = 3 /**< keys in redis: SET/GET/DEL (coord/redis.h) */
} mc_te_meta_kind_t;

typedef struct mc_te_batch mc_te_batch_t;

struct mc_te {
    mc_te_config_t cfg;
    char host[256];        /* host part of local_hostname */
    char bind_addr[256];   /* address the data port listens on */
    uint16_t port;         /* data port */
    char *local_name;      /* "host:port" */

    mc_te_meta_kind_t meta_kind;
    char *meta_url;        /* HTTP metadata endpoint, or the etcd endpoints */
    struct mc_etcd *meta_etcd; /* etcd metadata: the client handle */
    struct mc_redis *meta_redis; /* redis metadata: the client handle */
    char *key_prefix;      /* "mooncake/" or "mooncake/<cluster>/" */
    int published;         /* HTTP keys were written (delete at destroy) */
    pthread_mutex_t publish_mu;
    char owner_token[33];  /* sent with HTTP PUT/DELETE (under publish_mu); "" none */
    struct mc_auth *auth;  /* cluster authentication (MC_AUTH_TOKEN_FILE), or NULL */

    pthread_rwlock_t regions_lock;
    mc_te_region_t **regions; /* sorted by addr */
    size_t nregions;
    size_t regions_cap;
    pthread_mutex_t region_mu; /* with region_cond: dereg waits for refs */
    pthread_mutex_t gen_mu;    /* one generation adoption at a time */
    pthread_cond_t region_cond;

    pthread_mutex_t seg_lock;
    pthread_cond_t seg_cond;   /* an OPENING segment settled */
    mc_hmap_t seg_by_name;
    mc_te_segment_t **segs;    /* by id; [0] is self */
    size_t nsegs;
    size_t segs_cap;

    const mc_te_transport_ops_t *tp_ops;
    void *tp;
    mc_rdma_nic_t rdma_nics[MC_RDMA_MAX_NICS]; /* protocol rdma: the selected NICs */
    size_t rdma_nnics;

    int shm_enabled;           /* MC_TE_SHM (default 1) */
    int readv_enabled;         /* MC_TE_READV (default 1): serve READV and say so
                                * in the descriptor, and send it to peers that do */
    int readvs_enabled;        /* MC_TE_READV_STRIDED (default 1; with readv_enabled):
                                * the same for READV_STRIDED */
    mc_te_shm_server_t *shm;   /* our same-host server, or NULL */
    uint64_t readv_ops;        /* atomic: gathered reads sent as one READV */
    uint64_t readvs_ops;       /* atomic: ... of them as one READV_STRIDED */
    uint64_t shm_ops;          /* atomic: requests moved by memcpy ... */
    uint64_t shm_bytes;        /* ... and their bytes (tests, debugging) */

    pthread_rwlock_t disk_lock; /* held (read) while disk_fn runs */
    mc_te_disk_serve_func_t disk_fn; /* the disk tier's server, or NULL */
    void *disk_arg;
    pthread_mutex_t disk_mu;    /* with disk_cond: the cap on served disk reads */
    pthread_cond_t disk_cond;
    unsigned disk_busy;

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cond;  /* work queued or stopping */
    mc_te_batch_t *queue_head;
    mc_te_batch_t *queue_tail;
    pthread_t *workers;
    unsigned nworkers;
    int pool_stopping;
    unsigned direct_pieces;    /* threads a large direct write is split over
                                * (write_direct_spread): the caller and the
                                * workers, at most one per CPU */
};

/* ---- transport wrappers (the contract) ---------------------------------- */

/* Bind a listening socket on bind_addr:port (port 0: pick one from
 * [cfg.port_min, cfg.port_max]) and start serving te's REMOTE_ACCESS
 * regions; write the bound port.  The transport may call
 * mc_te_region_acquire/release and mc_te_describe_local from its own
 * threads from then on, until uninstall returns. */
static inline mc_status_t mc_te_tp_install(mc_te_t *te, const char *bind_addr, uint16_t port,
                                           uint16_t *port_p)
{
    return te->tp_ops->install(te, bind_addr, port, &te->tp, port_p);
}

/* Stop serving: after it returns no transport thread runs and no region
 * reference is held. Peers must have been closed first. */
static inline void mc_te_tp_uninstall(mc_te_t *te)
{
    if (te->tp != NULL)
        te->tp_ops->uninstall(te->tp);
    te->tp = NULL;
}

/* Create the client-side state for a peer at host:port; connects lazily. */
static inline mc_status_t mc_te_tp_peer_open(mc_te_t *te, const char *host, uint16_t port,
                                             void **peer_p)
{
    return te->tp_ops->peer_open(te->tp, host, port, peer_p);
}

/* Close every pooled connection of the peer and free it; no request may be
 * running on it. */
static inline void mc_te_tp_peer_close(mc_te_t *te, void *peer)
{
    if (peer != NULL)
        te->tp_ops->peer_close(te->tp, peer);
}

/* Ask the peer for its descriptor JSON (malloc'd, NUL-terminated).
 * Thread-safe; blocks at most the configured timeouts. */
static inline mc_status_t mc_te_tp_describe(mc_te_t *te, void *peer, char **json_p,
                                            size_t *len_p)
{
    return te->tp_ops->describe(te->tp, peer, json_p, len_p);
}

/* Move len bytes between local memory and [remote, remote+len) of the
 * peer, on one pooled connection, blocking the calling thread.  A READ
 * with @p gen non-zero is served only from a region registered with that
 * generation (docs/transfer.md, "Generations").  Returns MC_OK, the status
 * the target answered (MC_INVALID_READ/WRITE for a refused range or
 * generation) or MC_TRANSFER_FAIL.  Thread-safe. */
static inline mc_status_t mc_te_tp_xfer(mc_te_t *te, void *peer, mc_te_op_t op, void *local,
                                        uint64_t remote, uint64_t len, uint64_t gen)
{
    return te->tp_ops->xfer(te->tp, peer, op, local, remote, len, gen);
}

/* Run n (<= MC_TE_RUN_MAX_ITEMS) requests of one direction to one peer,
 * writing one status per request, with the same outcomes as n calls of
 * mc_te_tp_xfer.  A transport may pipeline them on one connection; one
 * without xfer_run gets them one by one. */
static inline void mc_te_tp_xfer_run(mc_te_t *te, void *peer, mc_te_op_t op,
                                     const mc_te_xfer_t *v, size_t n, mc_status_t *statuses)
{
    if (te->tp_ops->xfer_run != NULL) {
        te->tp_ops->xfer_run(te->tp, peer, op, v, n, statuses);
        return;
    }
    for (size_t i = 0; i < n; i++)
        statuses[i] = te->tp_ops->xfer(te->tp, peer, op, v[i].local, v[i].remote, v[i].len,
                                       v[i].gen);
}

/* Run n (<= MC_TE_SPREAD_MAX) requests of one direction to one peer at
 * the same time from the calling thread, each on its own connection where
 * one is free: all are sent before any answer is read.  Used for the
 * slices of one large READ, so that the target sends them in parallel
 * without a hand-off to worker threads here.  Same outcomes as n calls of
 * mc_te_tp_xfer.  Returns 0 (nothing done) when the transport has no such
 * operation. */
static inline int mc_te_tp_xfer_spread(mc_te_t *te, void *peer, mc_te_op_t op,
                                       const mc_te_xfer_t *v, size_t n, mc_status_t *statuses)
{
    if (te->tp_ops->xfer_spread == NULL)
        return 0;
    te->tp_ops->xfer_spread(te->tp, peer, op, v, n, statuses);
    return 1;
}

/* Ask the peer for the value of one disk record (DISK_READ) into @p buf
 * (req->length bytes).  MC_NOT_SUPPORTED when the transport has none. */
static inline mc_status_t mc_te_tp_disk_read(mc_te_t *te, void *peer, const mc_te_disk_req_t *req,
                                             void *buf)
{
    if ((te->tp_ops->size < offsetof(mc_te_transport_ops_t, disk_read) + sizeof(void *)) ||
        (te->tp_ops->disk_read == NULL))
        return MC_NOT_SUPPORTED;
    return te->tp_ops->disk_read(te->tp, peer, req, buf);
}

/* Forget what made the transport fail requests to the peer at once, when
 * it was learnt before @p before_ns (mc_te_segment_revive). */
static inline void mc_te_tp_peer_revive(mc_te_t *te, void *peer, uint64_t before_ns)
{
    if ((te->tp_ops->size < offsetof(mc_te_transport_ops_t, peer_revive) + sizeof(void *)) ||
        (te->tp_ops->peer_revive == NULL) || (peer == NULL))
        return;
    te->tp_ops->peer_revive(te->tp, peer, before_ns);
}

/* Register region @p r (not yet linked) with the transport's devices, so
 * that it can be the local or the remote end of a one-sided operation;
 * r->tp_mr holds the result.  MC_OK for a transport without devices. */
static inline mc_status_t mc_te_tp_mem_reg(mc_te_t *te, mc_te_region_t *r)
{
    if ((te->tp == NULL) || (te->tp_ops->mem_reg == NULL))
        return MC_OK;
    return te->tp_ops->mem_reg(te->tp, r);
}

/* Undo mc_te_tp_mem_reg once no request uses @p r any more. */
static inline void mc_te_tp_mem_dereg(mc_te_t *te, mc_te_region_t *r)
{
    if ((te->tp != NULL) && (r->tp_mr != NULL) && (te->tp_ops->mem_dereg != NULL))
        te->tp_ops->mem_dereg(te->tp, r);
    r->tp_mr = NULL;
}

/* Add what peers need to reach the regions through the transport (RDMA:
 * the NICs and each buffer's rkeys) to the engine's descriptor @p d;
 * regions[i] is the region described by d->buffers[i], pinned by the
 * caller. */
static inline mc_status_t mc_te_tp_desc_fill(mc_te_t *te, mc_te_desc_t *d,
                                             mc_te_region_t *const *regions)
{
    if ((te->tp == NULL) || (te->tp_ops->desc_fill == NULL))
        return MC_OK;
    return te->tp_ops->desc_fill(te->tp, d, regions);
}

/* ---- engine services for transports and metadata ------------------------ */

/*
 * The disk tier of this process (docs/tiers.md §4): install (@p fn set) or
 * remove (NULL) the function that serves DISK_READ.  Removing waits for
 * the reads it is serving, so the tier may be freed when it returns.
 */
void mc_te_disk_serve_set(mc_te_t *te, mc_te_disk_serve_func_t fn, void *arg);
/* Serve one DISK_READ (transports call it): at most MC_TE_DISK_SERVE_MAX
 * at once.  *buf_p as for mc_te_disk_serve_func_t. */
mc_status_t mc_te_disk_serve(mc_te_t *te, const mc_te_disk_req_t *req, void **buf_p);
/* Read the value of a disk record held by the process behind segment
 * @p segment into @p buf (req->length bytes): through the local tier when
 * the segment is this engine's own, else with a DISK_READ to its engine.
 * MC_OBJECT_NOT_FOUND when the holder does not vouch for it. */
mc_status_t mc_te_disk_read(mc_te_t *te, const char *segment, const mc_te_disk_req_t *req,
                            void *buf);

/* Pin the region that wholly contains [addr, addr+len) and carries all of
 * @p need_flags.  Returns NULL when there is none.  len 0 is refused. */
/*
 * Many small READs of one segment by memcpy, without the request
 * machinery: reqs[0..n) all READ on one segment, each checked as
 * mc_te_transfer checks it.  Applies when the segment is this process's
 * own (the span of the pieces inside one region open to remote access) or
 * a same-host peer's whose region holding the span is already mapped.
 * Returns 1 when it handled every request (*st_p: MC_OK or the failure),
 * 0 when it moved nothing and the caller should use mc_te_transfer.
 * With @p st_p NULL it moves nothing and only says whether it would apply
 * now (the answer can change before the call that moves them).
 */
int mc_te_read_direct(mc_te_t *te, const mc_te_request_t *reqs, size_t n, mc_status_t *st_p);
/*
 * 1 when requests on @p seg are served by copies: this engine's own
 * memory, or a peer on this host whose memory is mapped here (§10).  There
 * the local side of a request needs no registration; a one-sided
 * transport (rdma) needs it everywhere else.  0 for an unknown id.
 */
int mc_te_segment_same_host(mc_te_t *te, mc_te_segment_id_t seg);
/* A second try towards @p seg: the transport forgets a fail-fast verdict on
 * its holder reached before @p before_ns (mc_now_ns()), so the try reaches
 * the holder instead of failing at once on what an earlier request
 * learnt.  The store calls it when it writes once more on a fresh
 * placement: the master has just placed there again, so the holder
 * heartbeats, and a link healed since that verdict works at once.  A
 * verdict reached after @p before_ns (by this write's first try) stands. */
void mc_te_segment_revive(mc_te_t *te, mc_te_segment_id_t seg, uint64_t before_ns);

/* mc_te_read_direct where every READ names the generation of the region it
 * expects (@p gens[i], 0 for none): a mismatch fails the call with
 * MC_INVALID_READ.  @p gens NULL is mc_te_read_direct. */
int mc_te_read_direct_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                          size_t n, mc_status_t *st_p);
/*
 * Many small WRITEs of one same-host peer's segment by copies on the
 * calling thread, without the request machinery (mc_te_shm_write_many):
 * reqs[0..n) (n >= 2) all WRITE on one segment, each at most
 * MC_TE_RUN_MAX_ITEM_LEN bytes (as the pieces mc_te_read_direct takes; larger
 * ones are worth the engine's workers copying in parallel) and checked as
 * mc_te_transfer checks it, the span of them in one region of the
 * holder's already mapped and live under generation @p gens (0 or NULL:
 * any; all the same).  MC_TE_DIRECT_SPREAD_MIN bytes or more in all are
 * cut into pieces that the calling thread and the workers copy together,
 * each piece a direct write of its own (writer count, gate, word) and one
 * that a fence made decline moved by mc_te_transfer_gen.  Returns 1 when
 * it handled every request (*st_p: MC_OK, or the first failure, which then
 * stands for all of them: the caller must treat every request as failed),
 * 0 when it moved nothing and the caller should use mc_te_transfer_gen
 * (this engine's own segment, a region not mapped yet, a large piece,
 * mixed generations, a generation the holder has not adopted yet or a
 * fence under way...).
 */
int mc_te_write_direct_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                           size_t n, mc_status_t *st_p);

/*
 * READs that another thread may help with: reqs[0..n) are cut into
 * pieces of at most MC_TE_SHARED_PIECE bytes, each run as mc_te_transfer_gen
 * runs one item (a same-host holder's mapping copied with its generation
 * word checked around the copy, else the network), by the calling thread
 * in order and by any thread in mc_te_assist, which takes the pieces
 * nobody has started yet; no worker is woken for them.  A request's
 * status is the first failure of its pieces, so a request is read whole
 * under the generation it names or fails.  statuses[i]: request i's
 * result; returns the first failure.  For a caller whose own thread has
 * nothing else to do while a second thread may come free: the completion
 * queue's local reads (mc_store_aq_help).
 */
#define MC_TE_SHARED_PIECE ((uint64_t)1 << 20)
mc_status_t mc_te_read_shared_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                                  size_t n, mc_status_t *statuses);

/* Run, on the calling thread, the pieces of shared reads in progress that
 * nobody has claimed yet, until none is left; the number run. */
size_t mc_te_assist(mc_te_t *te);

/*
 * mc_te_transfer where request i names the registration generation of the
 * region it expects to find (@p gens[i]; 0 or @p gens NULL: any).  The
 * target -- this engine for its own memory, a same-host holder's mapping,
 * or the peer over the network -- refuses a request whose range lies in a
 * region of another generation with MC_INVALID_READ ("not here") or
 * MC_INVALID_WRITE: the memory was unregistered and registered again
 * since the initiator learned where the bytes live.  The rdma transport
 * checks a READ's generation (it takes the tcp path), not a WRITE's: a
 * one-sided WRITE cannot be checked.  Used by the store, whose segments
 * are registered with the generation the master hands out with each
 * replica.
 */
mc_status_t mc_te_transfer_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                               size_t n, mc_status_t *statuses);

/*
 * mc_te_transfer_gen that also runs @p sent(@p arg) exactly once: as soon
 * as the requests are on their way.  Where this thread sends them over a
 * transport that reports it (tcp), that is between the send and the wait
 * for the answers; where the bytes move without such a send (this
 * engine's own memory, a same-host holder's mapping, another transport,
 * a batch that workers take part in), before they move.  The store sends
 * its lookup to the master there: the holder, often polling for its next
 * request, starts on the read while the master wakes up, where a lookup
 * sent first got the CPU first on a small host and the two ran one after
 * the other.  @p sent must not transfer through this engine.
 */
mc_status_t mc_te_transfer_gen_sent(mc_te_t *te, const mc_te_request_t *reqs,
                                    const uint64_t *gens, size_t n, mc_status_t *statuses,
                                    void (*sent)(void *), void *arg);

/* For transports: run the hook mc_te_transfer_gen_sent armed on this
 * thread, if it is still armed (it runs once). */
void mc_te_sent_hook_run(void);

/*
 * A scattered READ: the contiguous range [remote, +total) of @p segment,
 * total being the sum of the runs' lengths, lands in runs[0..nruns) in
 * order -- the first runs[0].iov_len bytes in runs[0], and so on (the rows
 * of a column block that lie back to back in one stored object, each
 * going to its own place).  Over a transport with read_scatter (tcp) this
 * is one request on the wire, received straight into the runs; for this
 * engine's own memory, a same-host holder's mapping or another transport
 * the runs are read as requests of their own (mc_te_transfer_gen).
 *
 * Every run must be non-empty and lie inside one region registered with
 * this engine (any flags, memory not a file): otherwise MC_INVALID_PARAMS
 * before anything is sent.  Those regions stay pinned until the call
 * returns.  @p gen names the generation as mc_te_transfer_gen does: over
 * the network a refusal (MC_INVALID_READ) comes before any byte and none
 * lands in the runs; a failure after the answer started (a short or
 * closed answer: MC_TRANSFER_FAIL) may have filled some of them, and the
 * caller must not use any.  Thread-safe; blocks the calling thread.
 */
mc_status_t mc_te_read_scatter_gen(mc_te_t *te, mc_te_segment_id_t segment, uint64_t remote,
                                   uint64_t gen, const struct iovec *runs, size_t nruns);
/* One scattered READ (mc_te_read_scatter_gen's arguments), or with
 * @p ranges a gathered one (mc_te_read_gather_gen's; remote unused). */
typedef struct mc_te_scatter {
    mc_te_segment_id_t segment;
    uint64_t remote;
    uint64_t gen;
    const struct iovec *runs;
    size_t nruns;
    const mc_te_range_t *ranges; /* NULL: one range [remote, +sum of the runs) */
    size_t nranges;
    /* not NULL: a strided gathered read of these entries
     * (mc_te_read_gather_strided_gen's; remote and ranges unused) */
    const mc_te_strided_t *strided;
    size_t nstrided;
} mc_te_scatter_t;

/*
 * A gathered READ: the remote ranges ranges[0..nranges) of @p segment, in
 * that order, land in runs[0..nruns) in order, as if the ranges were one
 * contiguous range read by mc_te_read_scatter_gen (the two lists need not
 * cut at the same places: the rows of two stored objects that lie side by
 * side in one destination row arrive interleaved and land in one run).
 * The ranges add up to the runs' total, at most MC_TE_READV_MAX_RANGES of
 * them and MC_TE_READV_MAX_LEN bytes; each non-empty and not wrapping.
 * Towards a peer that serves READV (mc_te_read_gather_native) it is one
 * request on the wire; otherwise each piece (a range's part in a run) is
 * a request of its own.  Runs, pins, generation and failures as
 * mc_te_read_scatter_gen: a refusal lands no byte; a failure after the
 * answer started may have filled some runs, none of which may be used.
 */
mc_status_t mc_te_read_gather_gen(mc_te_t *te, mc_te_segment_id_t segment, uint64_t gen,
                                  const mc_te_range_t *ranges, size_t nranges,
                                  const struct iovec *runs, size_t nruns);

/*
 * A gathered read named by READV_STRIDED entries e[0..n) (proto.h: groups
 * of entries of one row count, answered row by row across each group)
 * instead of one range per row: the rows, walked, land in runs[0..nruns)
 * in order as with mc_te_read_gather_gen.  The entries hold as
 * mc_te_readvs_decode requires (at most MC_TE_READVS_MAX_ENTRIES of them,
 * MC_TE_READVS_MAX_ROWS rows and MC_TE_READV_MAX_LEN bytes), and each
 * entry's rows lie in one of the segment's regions.  Towards a peer that
 * serves READV_STRIDED it is one request on the wire; otherwise the rows
 * go as a READV (up to MC_TE_READV_MAX_RANGES of them) or as requests of
 * their own.  Runs, pins, generation and failures as mc_te_read_gather_gen.
 */
mc_status_t mc_te_read_gather_strided_gen(mc_te_t *te, mc_te_segment_id_t segment, uint64_t gen,
                                          const mc_te_strided_t *e, size_t n,
                                          const struct iovec *runs, size_t nruns);

/* 1 when mc_te_read_gather_strided_gen against @p segment is one
 * READV_STRIDED on the wire (mc_te_read_gather_native, and the peer's
 * descriptor says "tcp_readv_strided", and this engine's
 * MC_TE_READV_STRIDED not 0). */
int mc_te_read_gather_strided_native(mc_te_t *te, mc_te_segment_id_t segment);

/* 1 when mc_te_read_gather_gen against @p segment is one READV on the wire:
 * a peer reached over a transport with read_gather whose descriptor says
 * it serves READV, and this engine's MC_TE_READV not 0. */
int mc_te_read_gather_native(mc_te_t *te, mc_te_segment_id_t segment);

/*
 * mc_te_transfer_submit_gen that also runs the scattered reads sc[0..nsc)
 * (each as mc_te_read_scatter_gen, cut at run boundaries into pieces of
 * about the slice size, each piece on whichever worker takes it, so
 * several go at once on their own connections; a gathered read, with
 * ranges, runs whole as mc_te_read_gather_gen: its caller sizes it).  The job's statuses are
 * the n requests' then the nsc reads' (a read fails when any of its
 * pieces does; the bytes of a failed read must not be used).  @p sc and
 * the runs it names must stay valid until the job is done.
 */
mc_status_t mc_te_transfer_submit_scatter_gen(mc_te_t *te, const mc_te_request_t *reqs,
                                              const uint64_t *gens, size_t n,
                                              const mc_te_scatter_t *sc, size_t nsc,
                                              mc_te_job_h *job_p);

/*
 * The calling thread runs items of @p job (submitted on @p te, not yet
 * released) that no worker has claimed yet, until none is left; then it
 * returns (mc_te_job_wait waits for the ones still running).  A caller
 * that would only wait for its job so adds itself to the workers, as a
 * synchronous mc_te_transfer_gen does: one more lane busy.
 */
void mc_te_job_help(mc_te_t *te, mc_te_job_h job);

/* 1 when mc_te_read_scatter_gen against @p segment is one request on the
 * wire (a peer reached over a transport with read_scatter); 0 when it
 * would read the runs as requests of their own, which a caller batching
 * many of them does better itself. */
int mc_te_read_scatter_native(mc_te_t *te, mc_te_segment_id_t segment);

/* mc_te_transfer_submit with generations, as mc_te_transfer_gen. */
mc_status_t mc_te_transfer_submit_gen(mc_te_t *te, const mc_te_request_t *reqs,
                                      const uint64_t *gens, size_t n, mc_te_job_h *job_p);

mc_te_region_t *mc_te_region_acquire(mc_te_t *te, uint64_t addr, uint64_t len,
                                     unsigned need_flags);
void mc_te_region_release(mc_te_t *te, mc_te_region_t *r);

/*
 * Generations and their reuse counter (common/gen.h, docs/transfer.md
 * §3.6): the first request that names a later counter of a region's
 * generation makes the engine adopt it, once the requests of the earlier
 * one are done, so no byte of the memory's new owner lands while an old
 * reader copies, and no old reader is served afterwards.
 */
/* No generation named: mc_te_gen_enter's answer for @p want 0. */
#define MC_TE_GEN_NONE 2

/*
 * A request naming generation @p want (0: none) begins on @p r (held):
 * the region's generation is adopted first when @p want is a later counter
 * of it.  A WRITE (@p write) then waits, at most @p wait_ms, until the
 * requests that named an earlier one are done; a READ does not wait.  A
 * READ must name the region's counter; a WRITE may name an earlier one
 * down to the region's last fence (common/gen.h).  Returns the ticket to hand to
 * mc_te_gen_exit (0 or 1, or MC_TE_GEN_NONE for @p want 0), or -1 when
 * the request must be refused: another registration, an earlier counter,
 * or older requests still running after @p wait_ms.
 */
int mc_te_gen_enter(mc_te_t *te, mc_te_region_t *r, uint64_t want, int write, int wait_ms);
void mc_te_gen_exit(mc_te_region_t *r, int ticket);
/* The region's generation now. */
static inline uint64_t mc_te_region_gen(const mc_te_region_t *r)
{
    return __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE);
}
/* The generation of the region holding @p addr (0: none, or no region). */
uint64_t mc_te_gen_at(mc_te_t *te, uint64_t addr);
/* Move the region holding @p addr to the fence MC_GEN_REMOUNT_STEP ahead
 * (common/gen.h), once the requests under its generation now are done:
 * before its segment is mounted again after the master was lost, so that
 * nothing an earlier master placed or answered is served or lands.
 * *gen_p: its generation after.  0, or -1 (no region; older requests
 * still running after the wait). */
int mc_te_gen_fence(mc_te_t *te, uint64_t addr, uint64_t *gen_p);
/* The longest a request waits for older ones in mc_te_gen_enter: the I/O
 * timeout that bounds each of them, and a second more. */
int mc_te_gen_wait_ms(const mc_te_t *te);

/* mc_te_region_acquire and mc_te_gen_enter in one: NULL when no region
 * holds the range or the generation is refused; *ticket_p for
 * mc_te_region_release_gen. */
mc_te_region_t *mc_te_region_acquire_gen(mc_te_t *te, uint64_t addr, uint64_t len,
                                         unsigned need_flags, uint64_t gen, int write,
                                         int *ticket_p);
void mc_te_region_release_gen(mc_te_t *te, mc_te_region_t *r, int ticket);

/* A file segment's bytes: @p len bytes at address @p addr of @p r (held,
 * acquired for that range) from @p buf into the store when @p to_region,
 * else from the store into @p buf.  MC_OK or the backend's I/O status. */
mc_status_t mc_te_region_file_io(mc_te_region_t *r, int to_region, void *buf, uint64_t addr,
                                 size_t len);

/* mc_te_mem_reg for memory mapped from @p fd (offset 0): with
 * MC_TE_MEM_REMOTE_ACCESS, and when fd is a memfd sealed against shrinking
 * (mc_te_shm_fd_shareable), same-host peers may map the region instead of
 * going through the network transport.  The engine keeps its own duplicate
 * of fd until dereg; any other fd registers the region unshared. */
mc_status_t mc_te_mem_reg_shared(mc_te_t *te, void *addr, size_t len, const char *location,
                                 unsigned flags, int fd);
/* mc_te_mem_reg_shared with the region's registration generation @p gen
 * (non-zero; 0 registers it without one, as mc_te_mem_reg_shared does):
 * READs and WRITEs that name a generation (mc_te_transfer_gen) are served
 * by it only when they name this one. */
mc_status_t mc_te_mem_reg_gen(mc_te_t *te, void *addr, size_t len, const char *location,
                              unsigned flags, int fd, uint64_t gen);
/* mc_te_file_reg with the region's registration generation @p gen (as
 * mc_te_mem_reg_gen: requests that name a generation are served only when
 * they name this one). */
mc_status_t mc_te_file_reg_gen(mc_te_t *te, const char *path, uint64_t size, const char *backend,
                               uint64_t gen, uint64_t *addr_p);
/* Look for same-host holders that hung up and unmap their memory, also
 * of segments nobody reads any more (one poll per segment; the store's
 * heartbeat calls it every tick).  Requests do the same check themselves. */
void mc_te_shm_sweep(mc_te_t *te);
/* Requests and bytes this engine moved through same-host shared memory. */
void mc_te_shm_stats(mc_te_t *te, uint64_t *ops_p, uint64_t *bytes_p);

/* The engine's own descriptor (REMOTE_ACCESS regions), as JSON. */
mc_status_t mc_te_describe_local(mc_te_t *te, char **json_p, size_t *len_p);

/* ---- metadata (metadata.c) ---------------------------------------------- */

/* Parse params->metadata_server into te->meta_kind/meta_url/key_prefix. */
mc_status_t mc_te_meta_configure(mc_te_t *te, const char *conn);
/* HTTP and etcd modes: put ram/<name> (and rpc_meta/<name> when
 * @p with_rpc_meta).  P2P: nothing to do. */
mc_status_t mc_te_meta_publish(mc_te_t *te, int with_rpc_meta);
/* HTTP and etcd modes: delete both keys; failures are logged only. */
void mc_te_meta_unpublish(mc_te_t *te);
/* Fetch the descriptor of @p seg: from the peer itself (P2P) or from the
 * metadata service (HTTP).  When seg->peer is still NULL — only while the
 * segment is OPENING, so by one thread — this also opens the transport
 * peer: at the host and port of the name (P2P), or at rpc_meta's host and
 * the descriptor's tcp_data_port (HTTP). */
mc_status_t mc_te_meta_fetch(mc_te_t *te, mc_te_segment_t *seg, mc_te_desc_t *desc_p);

/* HTTP helpers (libcurl): key is URL-encoded by the callee. */
/* PUT/DELETE send @p token (32 hex digits, or NULL/"" for none) as
 * X-Mooncake-Owner-Token (docs/protocol.md §6.1), and with @p auth an
 * X-Mooncake-Auth signature (§9.2; a 401 answer is MC_RPC_FAIL). */
mc_status_t mc_te_http_put(const char *url, const char *key, const char *body,
                           const char *token, const struct mc_auth *auth);
mc_status_t mc_te_http_get(const char *url, const char *key, char **body_p, size_t *len_p);
mc_status_t mc_te_http_delete(const char *url, const char *key, const char *token,
                              const struct mc_auth *auth);
/* The metadata token the master gave the store that uses this engine
 * (HELLO); sent with every later descriptor PUT and DELETE. */
void mc_te_meta_token_set(mc_te_t *te, const char *token);

#endif /* MC_TRANSFER_ENGINE_H */

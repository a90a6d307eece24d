/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The root of the store client: the handle (struct mc_store), the records
 * every folder shares (segments, workers, reservations), the backend
 * dispatch (ops.h, MC_STORE_DISPATCH) and the helpers of calls.c.  Every
 * file of the store includes it; it includes only the handle types it
 * holds (master_client.h, metrics.h, ops.h).  Each folder's door says
 * what the folder owns and may call (docs/architecture.md, "The client's
 * map").
 *
 * Lifetime: every public call takes `life` for reading and checks `ready`;
 * setup and close take it for writing, so close waits for the calls in
 * flight and later calls see ready == 0 (MC_UNAVAILABLE_IN_CURRENT_STATUS).
 * The rwlock prefers writers, so a busy handle cannot starve close.
 * The heartbeat thread never takes `life`: close stops it (and joins it)
 * before tearing anything down.
 */
#ifndef MC_STORE_STORE_INTERNAL_H
#define MC_STORE_STORE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <mooncake/store.h>

#include "alloc/offset_alloc.h"
#include "common/util.h"
#include "store/master_client.h"
#include "store/metrics.h"
#include "store/ops.h"

#define MC_STORE_POOL_CAP 16
#define MC_STORE_NAME_MAX 320
#define MC_STORE_HEARTBEAT_MS 1000
#define MC_STORE_HEARTBEAT_MAX_FAILS 3

/* Memory this client contributes to the pool, mounted on the master. */
typedef struct mc_store_segment {
    mc_uuid_t id;
    void *base;
    uint64_t size;     /* as mounted */
    size_t map_len;    /* size rounded up to pages */
    int fd;            /* memfd backing the mapping, -1 for anonymous memory */
    int registered;    /* with the transfer engine */
    int kind;          /* MC_STORE_SEG_* */
    int pinned;        /* cudaHostRegister'ed (MC_STORE_PIN_MEMORY_MAX_BYTES) */
    uint64_t drain_deadline_ms; /* draining: unmount at this monotonic ms; 0 none */
} mc_store_segment_t;

/* Where a segment's memory came from (mount.c). */
#define MC_STORE_SEG_SETUP 0     /* global_segment_size of setup */
#define MC_STORE_SEG_FILE 1      /* mc_store_mount_segment(): a mapped file */
#define MC_STORE_SEG_ALLOCATED 2 /* mc_store_allocate_and_mount_segment() */

/* A library thread with its own master connection (worker.c): the
 * heartbeat and the copy/move task executor. */
typedef struct mc_store_worker {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;  /* guards stop and conn */
    pthread_cond_t cond;   /* CLOCK_MONOTONIC; signalled to stop */
    int stop;
    mc_mconn_t *conn;      /* the thread's own master connection */
    unsigned interval_ms;  /* between rounds of work */
    const char *name;      /* for messages: "heartbeat", "task executor" */
} mc_store_worker_t;

/* One put reservation held by the writer (reserve.c). */
typedef struct mc_resv {
    uint64_t id;                /* 0: none */
    uint64_t length;            /* exactly this many bytes */
    uint64_t use_by_us;         /* mc_now_us(): unusable from then on */
    uint64_t view;              /* view_version of the master that granted it */
    uint32_t replica_num;       /* placement it was asked for */
    uint8_t same_node;
    const char *preferred;      /* "" none; in mem */
    mc_wire_replica_list_t reps; /* in mem */
    void *mem;
} mc_resv_t;

#define MC_RESV_SLOTS 4
#define MC_RESV_SEEN  8

/* A put shape (length and placement) seen lately without a reservation. */
typedef struct mc_resv_seen {
    uint64_t length;
    uint64_t placement;         /* hash of the placement fields */
    uint64_t at_us;             /* 0: unused */
} mc_resv_seen_t;

typedef struct mc_store_resvs {
    pthread_mutex_t mu;
    int disabled;               /* MC_PUT_ONE_TRIP=0, or the master grants none */
    uint64_t view;              /* master view the slots belong to */
    mc_resv_t slot[MC_RESV_SLOTS];
    mc_resv_seen_t seen[MC_RESV_SEEN];
} mc_store_resvs_t;

struct mc_store {
    /* the backend (ops.h): &mc_store_embedded_ops from create on, the
     * dummy's while in dummy mode; written with `life` held for writing,
     * read atomically (MC_STORE_DISPATCH) */
    const mc_store_ops_t *ops;
    pthread_rwlock_t life;
    int ready;
    /* dummy mode (dummy_client.c): set by setup_dummy, cleared by close,
     * both with `life` held for writing; ready stays 0 */
    struct mc_dummy *dummy;

    char hostname[MC_STORE_NAME_MAX]; /* engine segment name; "" when closed */
    char protocol[32];
    mc_uuid_t client_id;
    mc_te_h te;
    int te_borrowed;  /* te came with MC_STORE_PARAM_ENGINE: never destroyed here */
    struct mc_store_nof *nof; /* NoF segments this client serves (nof.c), or NULL */

    mc_master_target_t target;
    mc_master_pool_t pool;
    int pool_ready;

    /* the master's metadata token (HELLO), hex; token_te is the engine that
     * sends it with its descriptor writes, set and cleared by setup and
     * close; both under token_mu (docs/protocol.md §6.1) */
    pthread_mutex_t token_mu;
    char meta_token[33];
    struct mc_auth *auth; /* cluster authentication, or NULL (off) */
    mc_te_h token_te;

    /* global segments: setup's and mounted ones (mount.c); remount sends
     * those not draining */
    pthread_mutex_t seg_lock;
    mc_store_segment_t *segs;
    size_t nsegs;

    /* registered staging buffer (mirrors of rd->lbuf while set up; its
     * allocator and lock live in that reference-counted mapping) */
    void *lbuf;
    uint64_t lbuf_size;
    int lbuf_registered;

    mc_store_worker_t hb;
    /* heartbeat thread only: a ping was answered OK since setup, and the
     * master process (view_version) that answered the last one; a remount
     * after either fences the segments first (heartbeat.c) */
    int hb_ok_once;
    uint64_t hb_view;
    mc_store_worker_t tasks;
    /* the disk tier (disk.c): set by mc_store_offload_start() and cleared
     * by teardown, both with `life` held for writing; its queue is guarded
     * by offload.lock */
    mc_store_worker_t offload;
    struct mc_store_disk *disk;
    /* the disk hints of the SSD tier (tiers/disk_hints.c), or NULL (the
     * location cache is off); created with the read-side state at setup,
     * destroyed by teardown */
    struct mc_loc_cache *disk_hints;
    /* the DFS tier's layout (dfs.c): MOONCAKE_DFS_ROOT_DIR at setup, NULL
     * without it; read-only after setup */
    struct mc_dfs_layout *dfs;

    /* read side: regions, mem pool, sessions (read/read.h); set up
     * and torn down with the local buffer */
    struct mc_store_rd *rd;

    /* one-round-trip puts (reserve.c): reservations kept for the next put */
    mc_store_resvs_t resv;

    /* the client's counters (metrics.h); atomics, no lock */
    mc_store_metrics_t metrics;
    /* client HTTP server (http.c): started last by setup, stopped by close
     * before it takes `life`; http_lock guards the pointer */
    pthread_mutex_t http_lock;
    struct mc_store_http *http;
};

/*
 * One call through the backend of @p s (ops.h): s->ops->op(s, ...), or the
 * embedded op for a NULL handle, which reports it.  The embedded op is
 * named directly, not through the table, so a file whose public calls
 * dispatch here refers to its own mc_emb_ functions only.
 */
#define MC_STORE_DISPATCH(s, op, ...)                                                        \
    (((s) != NULL) ? __atomic_load_n(&(s)->ops, __ATOMIC_ACQUIRE)->op((s), __VA_ARGS__)     \
                   : mc_emb_##op((s), __VA_ARGS__))

/* Public entry: read-lock the handle and check it is set up.  On failure
 * nothing is held and the detail is set. */
mc_status_t mc_store_enter(mc_store_h s);
void mc_store_leave(mc_store_h s);
/* mc_store_enter() for a batch call: on failure every one of the @p n
 * per-key entries gets the same status (a NULL array is skipped). */
mc_status_t mc_store_enter_statuses(mc_store_h s, mc_status_t *statuses, size_t n);
mc_status_t mc_store_enter_results(mc_store_h s, int64_t *results, size_t n);
/* Set the @p n entries of @p statuses (a NULL array is skipped) to @p st. */
void mc_store_fill_statuses(mc_status_t *statuses, size_t n, mc_status_t st);
/* A batch call whose caller passed no statuses still needs one per key:
 * when *@p statuses is NULL, allocate @p n into *@p own (the caller frees
 * it) and point *@p statuses at them.  MC_INTERNAL_ERROR, with the detail
 * set, when out of memory. */
mc_status_t mc_store_own_statuses(mc_status_t **statuses, size_t n, mc_status_t **own);
/* The first per-key status that is not MC_OK, else MC_OK: what a batch
 * call returns. */
mc_status_t mc_store_first_error(const mc_status_t *statuses, size_t n);

/* A key the master would accept: non-NULL, 1..MC_WIRE_MAX_KEY bytes. */
mc_status_t mc_store_check_key(const char *key, size_t *len_p);
/* Check keys[0..n) into @p statuses; the valid ones go to wkeys/sel
 * (their index in the call), in order.  Returns how many are valid. */
size_t mc_store_select_keys(const char *const *keys, size_t n, mc_status_t *statuses,
                            mc_str_t *wkeys, size_t *sel);

/* How a write call may be used (flags of mc_store_config_check and the
 * write paths). */
#define MC_WF_ZERO_COPY 0x1u /* every source byte must be registered memory */
#define MC_WF_SAME_NODE 0x2u /* prefer_alloc_in_same_node is accepted */

/* calls.c: what upstream checks of a ReplicateConfig on the client before
 * any RPC (NULL passes); @p nkeys keys are written by the call. */
mc_status_t mc_store_config_check(const mc_replicate_config_t *cfg, size_t nkeys,
                                  unsigned flags);

/* calls.c: wire form of a checked @p cfg (NULL: the defaults) for the keys
 * sel[0..nsel) of the call (sel NULL: the identity); @p gids holds nsel
 * strings and must outlive @p w. */
void mc_store_config_to_wire(const mc_replicate_config_t *cfg, const size_t *sel, size_t nsel,
                             mc_str_t *gids, mc_wire_config_t *w);

/* calls.c: the generation a segment with id @p id is registered with (top bit set,
 * so never 0; 0 for the nil id): the holder registers its segments with it
 * and readers name it with every read of a replica there. */
uint64_t mc_store_segment_gen(mc_uuid_t id);
/* The generation a read or write of replica @p r names: the one the master
 * handed out with it (its segment's now, common/gen.h), or counter 0 of
 * its segment when the master named none of that segment's base. */
uint64_t mc_store_replica_gen(const mc_wire_replica_t *r);

/* calls.c.  Over rdma, memory the engine does not know has no lkey, so a transfer
 * from or into it with a peer on another host would go over tcp
 * (docs/transfer.md §12.0): 1 when [@p base, +@p len) should go through a
 * block of the staging buffer instead (protocol rdma, not registered, fits
 * the staging buffer, segment @p seg not reached by copies). */
int mc_store_rdma_stage_wanted(mc_store_h s, const void *base, size_t len,
                               mc_te_segment_id_t seg);

#endif /* MC_STORE_STORE_INTERNAL_H */

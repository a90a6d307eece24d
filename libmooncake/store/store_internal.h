/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle and the functions its source files share.
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
    /* the backend (ops.h): NULL or &mc_store_embedded_ops, else the
     * dummy's; written with `life` held for writing, read atomically */
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
    /* the DFS tier's layout (dfs.c): MOONCAKE_DFS_ROOT_DIR at setup, NULL
     * without it; read-only after setup */
    struct mc_dfs_layout *dfs;

    /* read side: regions, mem pool, sessions (read_internal.h); set up
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

/* The backend of @p s: the embedded one for NULL (which reports it) and
 * before setup. */
static inline const mc_store_ops_t *mc_store_ops(mc_store_h s)
{
    const mc_store_ops_t *ops = (s != NULL) ? __atomic_load_n(&s->ops, __ATOMIC_ACQUIRE) : NULL;
    return (ops != NULL) ? ops : &mc_store_embedded_ops;
}

/* Public entry: read-lock the handle and check it is set up.  On failure
 * nothing is held and the detail is set. */
/* reserve.c: the writer's reservations (docs/protocol.md §5.16) */
void mc_store_resv_init(mc_store_h s);
/* MC_PUT_ONE_TRIP (0 off, 1 or unset on), read at setup: MC_INVALID_PARAMS
 * for any other value. */
mc_status_t mc_store_resv_config(mc_store_h s);
void mc_store_resv_cleanup(mc_store_h s);
/* Drop every kept reservation (teardown, a master that may have restarted). */
void mc_store_resv_clear(mc_store_h s);
/* The heartbeat saw master view @p view: a new one empties the cache. */
void mc_store_resv_view(mc_store_h s, uint64_t view);
/* The master grants none (NOT_SUPPORTED): two round trips from now on. */
void mc_store_resv_disable(mc_store_h s);
/* Whether a put of @p length bytes may go through a reservation. */
int mc_store_resv_wanted(mc_store_h s, uint64_t length);
/* Whether a put of this shape came lately (then a reservation is worth
 * asking for); records it either way. */
int mc_store_resv_seen(mc_store_h s, uint64_t length, const mc_wire_config_t *cfg);
/* Move a usable reservation for (@p length, placement of @p cfg) into
 * @p out; 0 when there is none. */
int mc_store_resv_take(mc_store_h s, uint64_t length, const mc_wire_config_t *cfg,
                       mc_resv_t *out);
/* Keep @p r (cleared) for a later put, or free it when unusable. */
void mc_store_resv_give(mc_store_h s, mc_resv_t *r);
/* A reservation from a grant: @p sent_us when the request was sent
 * (mc_now_us), @p view the connection's master view. */
mc_status_t mc_store_resv_make(mc_resv_t *r, uint64_t id, uint64_t ttl_ms, uint64_t sent_us,
                               uint64_t view, uint64_t length, const mc_wire_config_t *cfg,
                               const mc_wire_replica_list_t *reps);
void mc_store_resv_free(mc_resv_t *r);

mc_status_t mc_store_enter(mc_store_h s);
void mc_store_leave(mc_store_h s);
/* mc_store_enter() for a batch call: on failure every one of the @p n
 * per-key entries gets the same status (a NULL array is skipped). */
mc_status_t mc_store_enter_statuses(mc_store_h s, mc_status_t *statuses, size_t n);
mc_status_t mc_store_enter_results(mc_store_h s, int64_t *results, size_t n);
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

struct mc_store_query;

/*
 * A batch put with a commit key (commit.c, mc_store_batch_put_parts_commit):
 * do_write_batch starts the key at call index @c last with the others and
 * writes its bytes, but neither ends nor revokes it when its write went
 * well (@c held 1, its status MC_OK for now); an existing key fails as
 * MC_OBJECT_ALREADY_EXISTS (no first-writer-wins: every key of a commit
 * is the call's own) and the commit key is not retried.
 * mc_store_commit_seal() then ends or revokes it.
 */
typedef struct mc_store_commit {
    size_t last; /* call index of the commit key */
    int held;    /* out: allocated and written, waiting for END or REVOKE */
} mc_store_commit_t;

/* store.c: the batch put of mc_store_batch_put_parts() with @p commit
 * (write_many; MC_WF_SAME_NODE flags). */
mc_status_t mc_store_put_parts_commit(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *const *bufs, const size_t *counts,
                                      size_t n, const mc_replicate_config_t *cfg,
                                      mc_status_t *statuses, mc_store_commit_t *commit);
/* store.c: PUT_END (PUT_REVOKE with @p revoke) of one key; an END that
 * succeeds queues the key for the disk tier as every put does. */
mc_status_t mc_store_put_seal(mc_store_h s, int revoke, mc_str_t key);
/* store.c: one BATCH_REMOVE, `life` held (mc_store_batch_remove's body). */
mc_status_t mc_store_do_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                     mc_status_t *statuses);
/* commit.c: after the payloads of a commit batch are sealed (statuses[i]
 * of every i != last final): END the held commit key when every payload is
 * MC_OK, else REVOKE it; when the commit key is not published, remove the
 * payloads that were.  Releases specs[last] (and the removed payloads'
 * specs) unless published.  `life` held. */
void mc_store_commit_seal(mc_store_h s, const char *const *keys, mc_status_t *statuses,
                          struct mc_store_query **specs, mc_store_commit_t *commit);
/* commit.c, tests only: called between the payloads' END and the commit
 * key's END (NULL: nothing), to race events against that window. */
extern void (*mc_store_commit_test_hook)(mc_store_h s, const char *commit_key);

/* store.c: what upstream checks of a ReplicateConfig on the client before
 * any RPC (NULL passes); @p nkeys keys are written by the call. */
mc_status_t mc_store_config_check(const mc_replicate_config_t *cfg, size_t nkeys,
                                  unsigned flags);

/* store.c: 0 when @p regex is a pattern remove_by_regex sends (POSIX
 * extended, within the limits of common/regex_limit.h), else
 * MC_INVALID_PARAMS with the detail set. */
mc_status_t mc_store_regex_check(const char *regex);

/* store.c: wire form of a checked @p cfg (NULL: the defaults) for the keys
 * sel[0..nsel) of the call (sel NULL: the identity); @p gids holds nsel
 * strings and must outlive @p w. */
void mc_store_config_to_wire(const mc_replicate_config_t *cfg, const size_t *sel, size_t nsel,
                             mc_str_t *gids, mc_wire_config_t *w);

/* Over rdma, memory the engine does not know has no lkey, so a transfer
 * from or into it with a peer on another host would go over tcp
 * (docs/transfer.md §12.0): 1 when [@p base, +@p len) should go through a
 * block of the staging buffer instead (protocol rdma, not registered, fits
 * the staging buffer, segment @p seg not reached by copies). */
int mc_store_rdma_stage_wanted(mc_store_h s, const void *base, size_t len,
                               mc_te_segment_id_t seg);

#endif /* MC_STORE_STORE_INTERNAL_H */

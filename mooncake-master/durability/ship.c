/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log shipped through etcd (ship.h, docs/ha.md).
 *
 * Leader: the log writer's pipelined sink.  submit cuts a group-commit
 * round into log/<seq> keys (at most --oplog_batch_max_entries records and
 * MC_SHIP_PIECE bytes each), codes their values and queues them;
 * MC_SHIP_WORKERS threads, each with its own etcd connection, write them
 * as gRPC calls (mc_etcd_use_grpc: etcd's JSON gateway cost it more CPU
 * than the commit).  A worker that comes free takes every key queued by
 * then (at most MC_SHIP_TXN_KEYS keys and MC_SHIP_TXN_BYTES), so while
 * etcd commits, the rounds that arrive meanwhile wait for one
 * transaction, not one each.  It first gathers (gather_ready): when its
 * last transaction carried R records and Q more were queued when it came
 * back, it waits until R + Q records are queued, at most MC_SHIP_GATHER_US
 * after that transaction, and no longer than MC_SHIP_GATHER_QUIET_US
 * after the last round queued since it (a client whose window that
 * transaction answered only in part sends nothing until the rest is
 * answered, so the count is not always reached).  The clients that
 * transaction answered send their next requests meanwhile; without the
 * wait, the rounds of clients
 * answered by different transactions stay out of step and each go
 * alone, twice the commits for the same puts.  A lone client waits only
 * when its next round has fewer records than its last.  Every
 * transaction's compare is "the leader key's create
 * revision is my term", so a deposed leader can never append; a
 * transaction is atomic, so its keys land together or not at all.  Keys of
 * different transactions may land in etcd out of order, so order is fenced
 * on both sides:
 *   - a round is reported durable (its answers released) only once it and
 *     every key before it are in etcd: acknowledgements go out in order;
 *   - a reader applies only the gap-free prefix of the keys, so a key
 *     written before the one before it is never applied ahead of it;
 *   - a new term's first key goes alone, and its transaction deletes every
 *     key after it: what a dead leader left beyond a gap (never
 *     acknowledged, since its acknowledgements were in order) is gone
 *     before anything of the new term can follow it.
 * The leader keeps no replay state: its index is the state.  From time
 * to time the loop walks the index into a snapshot (snapshot.c, the walk
 * the disk snapshots use) and hands its records over; a thread of its own
 * writes them to etcd once every record appended up to the walk's end is
 * durable, labelled with the last log key whose records all precede the
 * walk's start, and deletes the log keys up to that one in the same
 * fenced transaction that publishes it.  The walk is fuzzy: an object
 * changed while it ran may be caught in either state, but every change
 * made after its start is in the log after that key, and records are
 * whole states, so the snapshot followed by the log from the next key is
 * the exact state once the log has been read past the walk's end (which
 * is durable before the snapshot is published).
 *
 * Standby: the follower reads log keys from its last applied one, checks
 * every record's CRC and folds it into the same kind of state; when the
 * keys it needs were compacted away it loads the newest snapshot first.
 * Records may straddle two keys of one round; a round cut short by a
 * leader's death is dropped when the next term's keys begin.
 *
 * Owns: the operation log shipped through etcd: the leader's sink and the
 *   standby's tail.
 * May call: oplog.h, libmooncake's coord/etcd and common/; no master type.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "coord/etcd.h"
#include "ship.h"

/* keys read per request: 8 keys of MC_SHIP_PIECE, base64, stay well under
 * the etcd client's 16 MiB answer limit */
#define MC_SHIP_RANGE_LIMIT 8
#define MC_SHIP_RETRY_MS    100
#define MC_SHIP_QUEUE       256 /* keys queued or in flight; submit waits beyond */
#define MC_SHIP_POLL_READS  1000 /* range requests of one standby poll at most */
/* One transaction carries the log keys queued when a writer takes them
 * (group commit), at most this many and this many value bytes: etcd's
 * defaults refuse a txn of more than 128 operations (--max-txn-ops) and a
 * request over 1.5 MiB (--max-request-bytes, counted on the values as
 * sent, not as base64). */
#define MC_SHIP_TXN_KEYS  64
#define MC_SHIP_TXN_BYTES (1u << 20)
/* A log value's term with this bit set: the records that follow are
 * delta-coded (mc_ship_encode), not raw frames. */
#define MC_SHIP_CODED (1ull << 63)

/* One log key on its way to etcd. */
typedef struct piece {
    uint64_t seq;       /* log/<seq> */
    uint8_t *val;       /* its value: 8 bytes for the term (set when sent) + records */
    size_t val_len;
    size_t len;         /* bytes of records before coding */
    uint32_t nrec;      /* records that start in it */
    int coded;          /* the records in val are delta-coded */
    int round_end;      /* the last key of a round */
    uint64_t round_seq; /* the writer's sequence number of the round's last record */
    uint64_t queued_ns; /* when submitted (for the round latency in the stop log) */
    int state;          /* PIECE_QUEUED, PIECE_SENDING, PIECE_DONE */
} piece_t;

enum { PIECE_QUEUED, PIECE_SENDING, PIECE_DONE };

struct mc_ship {
    mc_oplog_sink_t sink;     /* first: the writer's handle */
    mc_etcd_t *etcd;          /* the writer thread's own handle */
    char prefix[300];         /* mooncake-store/<cluster_id>/oplog/ */
    char guard[300];          /* the leader key */
    int64_t ttl_ms;

    mc_oplog_state_t state;   /* standby: the state followed (empty once installed) */
    _Atomic int64_t term;     /* set by the loop once the state is installed */
    _Atomic int install_pending;

    uint32_t batch_entries;   /* records per log key (--oplog_batch_max_entries) */
    uint64_t poll_ms;         /* standby read period (--oplog_poll_interval_ms) */
    uint64_t retry_ms;        /* standby gives up after (--batch_oplog_retry_timeout_sec) */

    /* as leader: the pipeline, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* room in the queue, the queue empty, a failure */
    pthread_cond_t cv_work;   /* a key to send, a stop */
    pthread_t workers[MC_SHIP_WORKERS];
    mc_etcd_t *w_etcd[MC_SHIP_WORKERS];
    int nworkers;
    int w_taken;              /* handles taken by started threads */
    int stopping;
    piece_t q[MC_SHIP_QUEUE]; /* ring: q[q_head] is the oldest key not yet reported */
    size_t q_head, q_len;
    int sending;              /* keys in flight */
    int term_clean;           /* this term's first key (which clears leftovers) is in */
    int p_failed;             /* a key could not be written: nothing more is durable */
    int p_errno;
    uint64_t last_key;        /* the last key of the last round reported durable */
    uint64_t gather_recs;     /* records a free worker waits for (gather_ready) */
    uint64_t gather_from_ns;  /* ... from when the last transaction came back,
                               * MC_SHIP_GATHER_US at most */
    uint64_t round_ns;        /* when the last round was queued */
    uint64_t durable_rec;     /* the writer's sequence number of that round's last record */
    /* the snapshot being walked: mark_key follows the rounds reported
     * while their records precede the walk (mark_rec and before) */
    int mark_on;
    uint64_t mark_rec;
    uint64_t mark_key;
    mc_buf_t pending;         /* append/sync (the unpipelined calls) collect here */
    mc_buf_t enc, enc_scratch; /* the writer thread's: coding a key's value */
    uint64_t next_seq;        /* of the next key queued */
    /* the compaction thread (started and joined by the loop thread) */
    mc_etcd_t *c_etcd;        /* its own handle: chunks do not delay appends */
    pthread_t c_thread;
    int c_live;
    /* the snapshot's records, from the walk: chunks of at most
     * MC_SHIP_PIECE bytes of whole records (c_len each), so a large
     * index never makes the loop copy one growing buffer and each chunk
     * codes as a log value does; a record larger than a chunk is split
     * over chunks that then go raw (c_split) */
    uint8_t **c_chunks;
    size_t *c_len;
    uint8_t *c_split;
    size_t c_nchunks, c_cap;
    int c_oom;
    uint64_t c_rec_end;       /* the writer's sequence number at the walk's end */
    uint64_t c_seq;           /* the log key the snapshot follows (set by the thread) */
    _Atomic int c_done;
    _Atomic int c_deposed;    /* its fenced txn was refused */

    /* election thread, as standby */
    uint64_t applied_seq;     /* last log key folded in */
    uint64_t applied_term;    /* term of that key */
    mc_buf_t tail;            /* bytes of a record continued in the next key */
    mc_buf_t scratch;         /* decoding a coded key */
    uint64_t refused_seq;     /* last key refused (logged once) */
    int failed;               /* a decode/apply error in the current call */
    uint64_t f_next_ms;       /* no read before (poll period, or back-off) */
    uint64_t f_backoff_ms;    /* current back-off after failed reads, 0: none */
    uint64_t f_fail_since;    /* first of the failed reads in a row, 0: none */
    int takeover_failed;      /* the read at election failed: do not serve */

    _Atomic uint64_t st_applied, st_snap_seq, st_snaps, st_refused, st_puts;
    _Atomic uint64_t st_raw, st_coded; /* bytes of records shipped, and as sent */
    _Atomic uint64_t st_txns;          /* transactions that carried them */
    _Atomic uint64_t st_txn_ns;        /* time in the log keys' transactions */
    uint64_t st_round_ns, st_rounds;   /* submit to durable, under mu */
    uint64_t st_wait_ns;               /* submit to a worker taking the key, under mu */
};

/* The log values' delta code (mc_ship_encode, mc_ship_decode) is in
 * ship_code.c. */

static void key_of(const mc_ship_t *s, char *out, size_t cap, const char *kind, uint64_t seq)
{
    snprintf(out, cap, "%s%s/%016" PRIx64, s->prefix, kind, seq);
}

static void compact_reap(mc_ship_t *s, int wait);
static void *worker_main(void *arg);

/* Forget the snapshot's chunks (the loop thread, while no compaction
 * thread owns them). */
static void chunks_free(mc_ship_t *s)
{
    for (size_t i = 0; i < s->c_nchunks; i++)
        free(s->c_chunks[i]);
    free(s->c_chunks);
    free(s->c_len);
    free(s->c_split);
    s->c_chunks  = NULL;
    s->c_len     = NULL;
    s->c_split   = NULL;
    s->c_nchunks = s->c_cap = 0;
}

mc_ship_t *mc_ship_create(const mc_ship_config_t *cfg)
{
    mc_ship_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    if (mc_oplog_state_init(&s->state) != 0) {
        free(s);
        return NULL;
    }
    mc_buf_init(&s->pending);
    mc_buf_init(&s->enc);
    mc_buf_init(&s->enc_scratch);
    mc_buf_init(&s->tail);
    mc_buf_init(&s->scratch);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    snprintf(s->prefix, sizeof(s->prefix), "mooncake-store/%s/oplog/", cfg->cluster_id);
    snprintf(s->guard, sizeof(s->guard), "mooncake-store/%s/master_view", cfg->cluster_id);
    s->ttl_ms         = cfg->ttl_s * 1000;
    s->batch_entries  = MC_MAX(cfg->batch_entries, 1u); /* upstream: 0 -> 1 */
    s->poll_ms        = MC_MAX(cfg->poll_ms, 1u);
    s->retry_ms       = cfg->retry_ms;
    int tmo           = (int)MC_MAX(300, s->ttl_ms / 3);
    if ((mc_etcd_create(cfg->endpoints, tmo, &s->etcd) != MC_OK) ||
        (mc_etcd_create(cfg->endpoints, tmo, &s->c_etcd) != MC_OK))
        goto fail;
    /* the appends and the snapshot chunks are fenced txns: etcd's native
     * gRPC API spares it the JSON gateway on every commit (etcd.h) */
    mc_etcd_use_grpc(s->c_etcd);
    for (int i = 0; i < MC_SHIP_WORKERS; i++) {
        if (mc_etcd_create(cfg->endpoints, tmo, &s->w_etcd[i]) != MC_OK)
            goto fail;
        mc_etcd_use_grpc(s->w_etcd[i]);
        if (pthread_create(&s->workers[i], NULL, worker_main, s) != 0) {
            mc_etcd_destroy(s->w_etcd[i]);
            s->w_etcd[i] = NULL;
            mc_error("operation log: cannot start an etcd writer thread: %s", strerror(errno));
            mc_ship_destroy(s);
            return NULL;
        }
        s->nworkers++;
    }
    return s;
fail:
    mc_error("operation log: %s", mc_last_error_detail());
    mc_ship_destroy(s);
    return NULL;
}

void mc_ship_destroy(mc_ship_t *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv_work);
    pthread_cond_broadcast(&s->cv); /* a compaction waiting for rounds gives up */
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nworkers; i++)
        pthread_join(s->workers[i], NULL);
    int grpc = (s->w_etcd[0] != NULL) && mc_etcd_grpc_active(s->w_etcd[0]);
    for (int i = 0; i < MC_SHIP_WORKERS; i++)
        mc_etcd_destroy(s->w_etcd[i]);
    for (; s->q_len > 0; s->q_len--, s->q_head = (s->q_head + 1) % MC_SHIP_QUEUE)
        free(s->q[s->q_head].val);
    if (atomic_load(&s->st_raw) > 0)
        mc_info("operation log: %" PRIu64 " keys shipped to etcd in %" PRIu64 " transactions "
                "over %s (%" PRIu64 " rounds), %.1f MiB of records sent as %.1f MiB, %.2f ms a "
                "transaction, %.2f ms from a round's submission to its acknowledgement "
                "(%.2f ms of it queued)",
                atomic_load(&s->st_puts), atomic_load(&s->st_txns),
                grpc ? "gRPC" : "the JSON gateway", s->st_rounds,
                (double)atomic_load(&s->st_raw) / 1048576.0,
                (double)atomic_load(&s->st_coded) / 1048576.0,
                (double)atomic_load(&s->st_txn_ns) / 1e6 /
                    (double)MC_MAX(atomic_load(&s->st_txns), 1u),
                (double)s->st_round_ns / 1e6 / (double)MC_MAX(s->st_rounds, 1u),
                (double)s->st_wait_ns / 1e6 / (double)MC_MAX(atomic_load(&s->st_puts), 1u));
    compact_reap(s, 1);
    chunks_free(s);
    mc_etcd_destroy(s->etcd);
    mc_etcd_destroy(s->c_etcd);
    mc_oplog_state_cleanup(&s->state);
    mc_buf_cleanup(&s->pending);
    mc_buf_cleanup(&s->enc);
    mc_buf_cleanup(&s->enc_scratch);
    mc_buf_cleanup(&s->tail);
    mc_buf_cleanup(&s->scratch);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->cv_work);
    free(s);
}

/* ---- leader: the sink ------------------------------------------------------------ */

/* One fenced transaction under @p term, retried over etcd errors for at
 * most a TTL (the leader's lease cannot outlive an etcd that does not
 * answer for that long).  0, or -1 with errno EPERM (no longer the leader)
 * or EIO. */
static int txn_retry(mc_ship_t *s, mc_etcd_t *e, int64_t term, const mc_etcd_op_t *ops,
                     size_t n)
{
    uint64_t end = mc_now_ms() + (uint64_t)s->ttl_ms;

    for (;;) {
        mc_status_t st = mc_etcd_txn_guarded(e, s->guard, term, ops, n);
        if (st == MC_OK)
            return 0;
        if (st == MC_ETCD_TRANSACTION_FAIL) {
            mc_error("operation log: etcd refused the append: term %" PRId64 " is no longer "
                     "the leader's",
                     term);
            errno = EPERM;
            return -1;
        }
        if (mc_now_ms() >= end) {
            mc_error("operation log: etcd did not take the append within the lease TTL: %s",
                     mc_last_error_detail());
            errno = EIO;
            return -1;
        }
        struct timespec ts = {0, MC_SHIP_RETRY_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* The value of a log key or snapshot chunk holding @p n bytes of records
 * at @p raw into @p b (reset): 8 bytes left for the term, then the
 * records coded (mc_ship_encode) when @p whole (no share of a record
 * split over values) and that is smaller, else as they are.  1 when
 * coded: the term then carries MC_SHIP_CODED.  b->oom on failure. */
static int value_into(mc_buf_t *b, mc_buf_t *scratch, const uint8_t *raw, size_t n, int whole)
{
    mc_buf_reset(b);
    mc_buf_put_u64(b, 0);
    if (whole && (mc_ship_encode(b, scratch, raw, n) == 0) && !b->oom && (b->len < n + 8))
        return 1;
    mc_buf_reset(b);
    mc_buf_put_u64(b, 0);
    mc_buf_put_bytes(b, raw, n);
    return 0;
}

/* A snapshot chunk (@p n bytes at @p p, whole records unless @p split) as
 * its key's value, coded as a log key's records are when that is smaller. */
static int put_chunk(mc_ship_t *s, mc_etcd_t *e, const char *key, uint64_t term,
                     const uint8_t *p, size_t n, int split)
{
    mc_etcd_op_t op = {0};
    mc_buf_t v, scratch;
    int coded, rc = -1;

    mc_buf_init(&v);
    mc_buf_init(&scratch);
    coded = value_into(&v, &scratch, p, n, !split);
    if (!v.oom) {
        mc_store_le64(v.data, term | (coded ? MC_SHIP_CODED : 0));
        op.key = key;
        op.val = v.data;
        op.len = v.len;
        rc     = txn_retry(s, e, (int64_t)term, &op, 1);
    } else {
        errno = ENOMEM;
    }
    mc_buf_cleanup(&v);
    mc_buf_cleanup(&scratch);
    return rc;
}

static int apply_cb(void *arg, const mc_oplog_record_t *r)
{
    mc_ship_t *s = arg;
    if (mc_oplog_state_apply(&s->state, r) != 0) {
        s->failed = 1;
        return 1;
    }
    return 0;
}

/* The compaction thread: once every record the walk may have seen is
 * durable, write the snapshot's chunks as snap/<c_seq>/<n> and
 * publish it, deleting the log keys and the older snapshots it replaces
 * (the writer goes on appending meanwhile: keys after c_seq are not
 * touched). */
static void *compact_main(void *arg)
{
    mc_ship_t *s = arg;
    char key[400], meta[400], meta_v[64], log0[400], logend[400], snap0[400], snapend[400];
    mc_etcd_op_t ops[3] = {{0}};
    uint64_t t0 = mc_now_ms(), term = (uint64_t)atomic_load(&s->term);
    uint32_t n  = 0;
    int rc      = 0, go;

    pthread_mutex_lock(&s->mu);
    while (!s->stopping && !s->p_failed && (s->durable_rec < s->c_rec_end))
        pthread_cond_wait(&s->cv, &s->mu);
    /* every round up to the walk's start is reported by now: the key is final */
    go         = !s->stopping && !s->p_failed;
    s->c_seq   = s->mark_key;
    s->mark_on = 0;
    pthread_mutex_unlock(&s->mu);
    /* nothing to compact, or a snapshot there already (no log since) */
    if (!go || (s->c_seq == 0) || (s->c_seq <= atomic_load(&s->st_snap_seq))) {
        atomic_store(&s->c_done, 1);
        return NULL;
    }
    for (; (rc == 0) && (n < s->c_nchunks); n++) {
        snprintf(key, sizeof(key), "%ssnap/%016" PRIx64 "/%016" PRIx32, s->prefix, s->c_seq, n);
        rc = put_chunk(s, s->c_etcd, key, term, s->c_chunks[n], s->c_len[n], s->c_split[n]);
    }
    if (rc == 0) {
        snprintf(meta, sizeof(meta), "%ssnapmeta", s->prefix);
        snprintf(meta_v, sizeof(meta_v), "%016" PRIx64 " %" PRIu32, s->c_seq, n);
        key_of(s, log0, sizeof(log0), "log", 0);
        key_of(s, logend, sizeof(logend), "log", s->c_seq + 1);
        snprintf(snap0, sizeof(snap0), "%ssnap/", s->prefix);
        key_of(s, snapend, sizeof(snapend), "snap", s->c_seq);
        ops[0] = (mc_etcd_op_t){.key = meta, .val = meta_v, .len = strlen(meta_v)};
        ops[1] = (mc_etcd_op_t){.del = 1, .key = log0, .range_end = logend};
        ops[2] = (mc_etcd_op_t){.del = 1, .key = snap0, .range_end = snapend};
        rc     = txn_retry(s, s->c_etcd, (int64_t)term, ops, 3);
    }
    if (rc == 0) {
        atomic_store(&s->st_snap_seq, s->c_seq);
        atomic_fetch_add(&s->st_snaps, 1);
        mc_info("operation log: snapshot at log key %" PRIu64 " written to etcd in %" PRIu64
                " ms (%" PRIu32 " chunks); the log before it deleted",
                s->c_seq, mc_now_ms() - t0, n);
    } else if (errno == EPERM) {
        atomic_store(&s->c_deposed, 1); /* the next round fails too */
    } else {
        mc_warn("operation log: the snapshot at log key %" PRIu64 " could not be written to "
                "etcd; the next one will be", s->c_seq);
    }
    atomic_store(&s->c_done, 1);
    return NULL;
}

/* Join a compaction that has ended (or, with @p wait, any); loop thread. */
static void compact_reap(mc_ship_t *s, int wait)
{
    if (!s->c_live || (!wait && !atomic_load(&s->c_done)))
        return;
    pthread_join(s->c_thread, NULL);
    s->c_live = 0;
    chunks_free(s); /* a snapshot's worth: not kept between snapshots */
}

/* The bytes of the records at the start of @p p (@p n bytes) that make at
 * most @p max records and, unless one record alone is larger, at most
 * MC_SHIP_PIECE bytes: a log key's share of a round.  Frames are only
 * walked by their length here; the reader checks every CRC. */
static size_t piece_len(const uint8_t *p, size_t n, uint32_t max, uint32_t *nrec_p)
{
    size_t off = 0;
    uint32_t k;
    for (k = 0; (k < max) && (off + MC_OPLOG_FRAME_HEADER <= n); k++) {
        size_t f = mc_oplog_frame_len(p + off);
        if ((off > 0) && (off + f > MC_SHIP_PIECE))
            break;
        off += f;
    }
    *nrec_p = MC_MAX(k, 1u);
    /* a record larger than a key straddles keys (the reader joins them) */
    return MC_MIN(MC_MAX(off, (size_t)1), MC_MIN(n, (size_t)MC_SHIP_PIECE));
}

/* Fail the pipeline (mu held): nothing from here on is durable. */
static void pipeline_fail(mc_ship_t *s, int err)
{
    if (s->p_failed)
        return;
    s->p_failed = 1;
    s->p_errno  = err;
    if (s->sink.done != NULL)
        s->sink.done(s->sink.done_arg, 0, -1);
    pthread_cond_broadcast(&s->cv);
}

/* Report the rounds whose keys are all in etcd, oldest first (mu held). */
static void advance(mc_ship_t *s)
{
    while ((s->q_len > 0) && (s->q[s->q_head].state == PIECE_DONE) && !s->p_failed) {
        piece_t *p = &s->q[s->q_head];
        if (p->round_end) {
            if (s->sink.done != NULL)
                s->sink.done(s->sink.done_arg, p->round_seq, 0);
            s->st_round_ns += mc_now_ns() - p->queued_ns;
            s->st_rounds++;
            s->last_key = p->seq;
            /* a round of 0 (sink_sync's) has no sequence number: it
             * never counts as preceding a walk */
            if (p->round_seq != 0) {
                s->durable_rec = p->round_seq;
                if (s->mark_on && (p->round_seq <= s->mark_rec))
                    s->mark_key = p->seq;
            }
            atomic_store(&s->st_applied, p->seq);
        }
        free(p->val);
        memset(p, 0, sizeof(*p));
        s->q_head = (s->q_head + 1) % MC_SHIP_QUEUE;
        s->q_len--;
    }
    pthread_cond_broadcast(&s->cv);
}

/* Where in the queue the oldest key a worker may send now is, or -1 (mu
 * held).  Until the term's first key is in, it goes alone: its
 * transaction deletes what follows it. */
static long next_piece(mc_ship_t *s)
{
    if (s->p_failed || (!s->term_clean && (s->sending > 0)))
        return -1;
    for (size_t i = 0; i < s->q_len; i++) {
        piece_t *p = &s->q[(s->q_head + i) % MC_SHIP_QUEUE];
        if (p->state == PIECE_QUEUED)
            return (long)i;
        if (!s->term_clean)
            return -1;
    }
    return -1;
}

/* Group commit (mu held): the keys queued from position @p at on, as
 * many as one transaction takes.  Workers take keys oldest first, so the
 * queued ones are the queue's tail and the group is consecutive.  The
 * term's first key goes alone (its delete must not cover keys it puts). */
static size_t take_group(mc_ship_t *s, size_t at, piece_t **group)
{
    size_t n = 0, bytes = 0;
    for (size_t i = at; (i < s->q_len) && (n < MC_SHIP_TXN_KEYS); i++) {
        piece_t *p = &s->q[(s->q_head + i) % MC_SHIP_QUEUE];
        if ((p->state != PIECE_QUEUED) || ((n > 0) && (bytes + p->val_len > MC_SHIP_TXN_BYTES)))
            break;
        p->state = PIECE_SENDING;
        s->st_wait_ns += mc_now_ns() - p->queued_ns;
        bytes += p->val_len;
        group[n++] = p;
        if (!s->term_clean)
            break;
    }
    return n;
}

/* The records queued from position @p at on (mu held); *full_p: they
 * fill a transaction already, or the queue. */
static uint64_t queued_recs(mc_ship_t *s, size_t at, int *full_p)
{
    uint64_t recs = 0, bytes = 0;
    size_t n = 0;
    for (size_t i = at; i < s->q_len; i++) {
        piece_t *p = &s->q[(s->q_head + i) % MC_SHIP_QUEUE];
        if (p->state != PIECE_QUEUED)
            break;
        recs += p->nrec;
        bytes += p->val_len;
        n++;
    }
    *full_p = (n >= MC_SHIP_TXN_KEYS) || (bytes >= MC_SHIP_TXN_BYTES) ||
              (s->q_len == MC_SHIP_QUEUE);
    return recs;
}

/* Whether a free worker sends the keys queued from @p at on now (mu
 * held): as many records as it gathers are queued, or a transaction's
 * worth, or its wait is over.  *wait_ns: how long it may still wait. */
static int gather_ready(mc_ship_t *s, size_t at, uint64_t *wait_ns)
{
    uint64_t now = mc_now_ns();
    int full;
    uint64_t quiet_end = s->round_ns + (uint64_t)MC_SHIP_GATHER_QUIET_US * 1000u;
    uint64_t until     = s->gather_from_ns + (uint64_t)MC_SHIP_GATHER_US * 1000u;
    *wait_ns = 0;
    if (!s->term_clean || s->stopping || s->p_failed || (now >= until) ||
        (queued_recs(s, at, &full) >= s->gather_recs) || full)
        return 1;
    /* rounds came since the last transaction, and none for a while: the
     * clients it answered have sent what they will (one whose window was
     * answered only in part waits for the rest before it sends again) */
    if (s->round_ns > s->gather_from_ns) {
        if (now >= quiet_end)
            return 1;
        *wait_ns = MC_MIN(until, quiet_end) - now;
        return 0;
    }
    *wait_ns = until - now;
    return 0;
}

/* A writer thread: sends what is queued when it is free, in one fenced
 * transaction. */
static void *worker_main(void *arg)
{
    mc_ship_t *s = arg;
    mc_etcd_t *e;
    char keys[MC_SHIP_TXN_KEYS][400]; /* 25 KiB of the thread's stack */
    char end[400], next[400];
    piece_t *group[MC_SHIP_TXN_KEYS];
    mc_etcd_op_t ops[MC_SHIP_TXN_KEYS + 1];

    pthread_mutex_lock(&s->mu);
    /* handles are created before the thread that may take them */
    e = s->w_etcd[s->w_taken++];
    for (;;) {
        size_t n, nops;
        long at = -1;
        int first, rc, err;
        int64_t term;
        uint64_t t0, raw = 0, sent = 0, wait_ns = 0;

        while (!s->stopping && (((at = next_piece(s)) < 0) ||
                                !gather_ready(s, (size_t)at, &wait_ns))) {
            if (at < 0) {
                pthread_cond_wait(&s->cv_work, &s->mu);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                wait_ns += (uint64_t)ts.tv_nsec;
                ts.tv_sec += (time_t)(wait_ns / 1000000000u);
                ts.tv_nsec = (long)(wait_ns % 1000000000u);
                pthread_cond_timedwait(&s->cv_work, &s->mu, &ts);
            }
        }
        if (s->stopping)
            break;
        first = !s->term_clean;
        n     = take_group(s, (size_t)at, group);
        s->sending++;
        term = atomic_load(&s->term);
        pthread_mutex_unlock(&s->mu);

        /* the values are the worker's until reported: their term goes in now */
        for (size_t i = 0; i < n; i++) {
            piece_t *p = group[i];
            mc_store_le64(p->val, (uint64_t)term | (p->coded ? MC_SHIP_CODED : 0));
            key_of(s, keys[i], sizeof(keys[i]), "log", p->seq);
            ops[i] = (mc_etcd_op_t){.key = keys[i], .val = p->val, .len = p->val_len};
            raw += p->len;
            sent += p->val_len - 8;
        }
        nops = n;
        if (first) {
            /* a dead leader's keys beyond the last one it had acknowledged */
            key_of(s, next, sizeof(next), "log", group[n - 1]->seq + 1);
            snprintf(end, sizeof(end), "%slog0", s->prefix);
            ops[nops++] = (mc_etcd_op_t){.del = 1, .key = next, .range_end = end};
        }
        atomic_fetch_add(&s->st_raw, raw);
        atomic_fetch_add(&s->st_coded, sent);
        t0  = mc_now_ns();
        rc  = txn_retry(s, e, term, ops, nops);
        err = errno;
        atomic_fetch_add(&s->st_txn_ns, mc_now_ns() - t0);

        pthread_mutex_lock(&s->mu);
        s->sending--;
        if (rc != 0) {
            pipeline_fail(s, err);
            continue;
        }
        atomic_fetch_add(&s->st_puts, n);
        atomic_fetch_add(&s->st_txns, 1);
        {
            /* the next one gathers this one's records and those queued now */
            long nx = next_piece(s);
            int full;
            s->gather_recs = 0;
            for (size_t i = 0; i < n; i++)
                s->gather_recs += group[i]->nrec;
            if (nx >= 0)
                s->gather_recs += queued_recs(s, (size_t)nx, &full);
            s->gather_from_ns = mc_now_ns();
        }
        for (size_t i = 0; i < n; i++)
            group[i]->state = PIECE_DONE;
        if (first) {
            s->term_clean = 1; /* the keys queued behind it may go now */
            pthread_cond_broadcast(&s->cv_work);
        }
        advance(s);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The value of a log key holding @p n bytes of records at @p raw (writer
 * thread, value_into; a share of a record larger than a key goes as it
 * is).  0, or -1 when out of memory. */
static int piece_value(mc_ship_t *s, piece_t *p, const uint8_t *raw, size_t n, int partial)
{
    mc_buf_t *b = &s->enc;

    p->coded = value_into(b, &s->enc_scratch, raw, n, !partial);
    if (b->oom)
        return -1;
    p->val     = malloc(b->len);
    p->val_len = b->len;
    if (p->val == NULL)
        return -1;
    memcpy(p->val, b->data, b->len);
    if (b->cap > (4u << 20)) {
        mc_buf_cleanup(b);
        mc_buf_init(b);
    }
    return 0;
}

/* Queue a round as log keys (writer thread); waits while the queue is full. */
static int ship_submit(mc_oplog_sink_t *sk, const void *data, size_t len, uint64_t seq)
{
    mc_ship_t *s     = (mc_ship_t *)sk;
    uint64_t term    = (uint64_t)atomic_load(&s->term);
    const uint8_t *d = data;

    if (len == 0)
        return 0;
    if (term == 0 || atomic_load(&s->install_pending)) {
        mc_error("operation log: records appended while not the leader");
        errno = EPERM;
        return -1;
    }
    if (atomic_load(&s->c_deposed)) {
        errno = EPERM;
        return -1;
    }
    for (size_t off = 0, rec_left = 0; off < len;) {
        piece_t np = {.state = PIECE_QUEUED, .queued_ns = mc_now_ns()};
        size_t n;
        int partial = (rec_left > 0);
        if (partial) {
            /* the rest of a record larger than a key */
            n = MC_MIN(rec_left, (size_t)MC_SHIP_PIECE);
            rec_left -= n;
        } else {
            n = piece_len(d + off, len - off, s->batch_entries, &np.nrec);
            if ((len - off >= MC_OPLOG_FRAME_HEADER) && (mc_oplog_frame_len(d + off) > n)) {
                rec_left = mc_oplog_frame_len(d + off) - n;
                partial  = 1;
            }
        }
        /* coded here, off the lock: the workers only send */
        np.len = n;
        if (piece_value(s, &np, d + off, n, partial) != 0) {
            free(np.val);
            pthread_mutex_lock(&s->mu);
            mc_error("operation log: out of memory coding a log key");
            pipeline_fail(s, ENOMEM); /* this round's keys already queued are never reported */
            pthread_mutex_unlock(&s->mu);
            errno = ENOMEM;
            return -1;
        }
        off += n;
        if (off == len) {
            np.round_end = 1;
            np.round_seq = seq;
        }
        pthread_mutex_lock(&s->mu);
        while (!s->p_failed && (s->q_len == MC_SHIP_QUEUE)) {
            pthread_cond_signal(&s->cv_work);
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (s->p_failed) {
            /* the keys of this round already queued are dropped with it */
            int err = s->p_errno;
            pthread_mutex_unlock(&s->mu);
            free(np.val);
            errno = err;
            return -1;
        }
        np.seq = s->next_seq++;
        s->q[(s->q_head + s->q_len) % MC_SHIP_QUEUE] = np;
        s->q_len++;
        /* a whole round at once: a free worker takes all of it in one txn */
        if (off == len) {
            s->round_ns = mc_now_ns();
            pthread_cond_signal(&s->cv_work);
        }
        pthread_mutex_unlock(&s->mu);
    }
    return 0;
}

/* Wait until every queued key is reported (or the pipeline failed). */
static int ship_drain(mc_ship_t *s)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->p_failed && (s->q_len > 0))
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->p_failed) {
        errno = s->p_errno;
        rc    = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sink_append(mc_oplog_sink_t *sk, const void *data, size_t len)
{
    mc_ship_t *s = (mc_ship_t *)sk;
    mc_buf_put_bytes(&s->pending, data, len);
    if (s->pending.oom) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

static int sink_sync(mc_oplog_sink_t *sk)
{
    mc_ship_t *s = (mc_ship_t *)sk;
    if (s->pending.len > 0) {
        /* the writer counts this round through its own sequence numbers;
         * 0 reports nothing new */
        int rc = ship_submit(sk, s->pending.data, s->pending.len, 0);
        mc_buf_reset(&s->pending);
        if (rc != 0)
            return -1;
    }
    return ship_drain(s);
}

static int sink_rotate(mc_oplog_sink_t *sk, uint64_t gen)
{
    (void)sk;
    (void)gen;
    return 0; /* compaction is the sink's own (compact_start) */
}

static void sink_close(mc_oplog_sink_t *sk)
{
    (void)sk; /* mc_ship_destroy frees it, after the writer is gone */
}

mc_oplog_sink_t *mc_ship_sink(mc_ship_t *s)
{
    s->sink.append = sink_append;
    s->sink.sync   = sink_sync;
    s->sink.rotate = sink_rotate;
    s->sink.close  = sink_close;
    s->sink.submit = ship_submit;
    return &s->sink;
}

/* ---- standby: the follower ---------------------------------------------------------- */

typedef struct gather {
    mc_ship_t *s;
    mc_buf_t b;
    mc_buf_t scratch; /* decoding a coded chunk */
    uint64_t expect; /* next chunk number */
    int bad;         /* 1: a chunk missing or misnamed; 2: one that does not decode */
} gather_t;

static int parse_hex(const char *p, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (n != 16)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i], d;
        if ((c >= '0') && (c <= '9'))
            d = c - '0';
        else if ((c >= 'a') && (c <= 'f'))
            d = c - 'a' + 10;
        else
            return -1;
        x = (x << 4) | (uint64_t)d;
    }
    *v = x;
    return 0;
}

static int gather_cb(void *arg, const char *key, size_t keylen, const char *val, size_t len)
{
    gather_t *g = arg;
    uint64_t n;
    if ((keylen < 16) || (parse_hex(key + keylen - 16, 16, &n) != 0) || (n != g->expect) ||
        (len < 8)) {
        g->bad = 1;
        return 1;
    }
    if (mc_load_le64((const uint8_t *)val) & MC_SHIP_CODED) {
        if (mc_ship_decode(&g->b, &g->scratch, (const uint8_t *)val + 8, len - 8) != 0) {
            g->bad = 2; /* corrupt, not a chunk missing */
            return 1;
        }
    } else {
        mc_buf_put_bytes(&g->b, val + 8, len - 8);
    }
    g->expect++;
    return 0;
}

/* The newest snapshot, when the log we need starts after it.  1 loaded,
 * 0 nothing to load, -1 error. */
static int load_snapshot(mc_ship_t *s, mc_etcd_t *e)
{
    char meta[400], from[400], to[400];
    mc_etcd_kv_t kv = {0};
    gather_t g      = {.s = s};
    uint64_t seq, n;
    size_t valid;
    mc_status_t st;
    char *sp;

    snprintf(meta, sizeof(meta), "%ssnapmeta", s->prefix);
    st = mc_etcd_get(e, meta, &kv, NULL);
    if (st == MC_ETCD_KEY_NOT_EXIST)
        return 0;
    if (st != MC_OK)
        return -1;
    sp = (kv.len > 17) ? memchr(kv.value, ' ', kv.len) : NULL;
    if ((sp == NULL) || (parse_hex(kv.value, (size_t)(sp - kv.value), &seq) != 0) ||
        (mc_parse_u64(sp + 1, &n) != 0)) {
        mc_error("operation log: REFUSING the snapshot marker %s in etcd: malformed", meta);
        mc_etcd_kv_cleanup(&kv);
        return -1;
    }
    mc_etcd_kv_cleanup(&kv);
    if (seq <= s->applied_seq)
        return 0;
    snprintf(to, sizeof(to), "%ssnap/%016" PRIx64 "0", s->prefix, seq);
    mc_buf_init(&g.b);
    mc_buf_init(&g.scratch);
    for (int more = 1; more && !g.bad && (g.expect < n);) {
        snprintf(from, sizeof(from), "%ssnap/%016" PRIx64 "/%016" PRIx64, s->prefix, seq,
                 g.expect);
        st = mc_etcd_range(e, from, to, MC_SHIP_RANGE_LIMIT, gather_cb, &g, &more);
        if (st != MC_OK)
            break;
    }
    if (g.bad == 2) {
        mc_error("operation log: REFUSING the snapshot at log key %" PRIu64 " in etcd: chunk "
                 "%" PRIu64 " does not decode (or fails its CRC)",
                 seq, g.expect);
        atomic_fetch_add(&s->st_refused, 1);
        mc_buf_cleanup(&g.b);
        mc_buf_cleanup(&g.scratch);
        return -1;
    }
    if ((st != MC_OK) || g.bad || (g.expect != n) || g.b.oom) {
        if (st == MC_OK)
            mc_warn("operation log: the snapshot at log key %" PRIu64 " in etcd has chunks "
                    "missing or misnamed (replaced by a newer one while read?): reading "
                    "again",
                    seq);
        mc_buf_cleanup(&g.b);
        mc_buf_cleanup(&g.scratch);
        return -1;
    }
    mc_oplog_state_clear(&s->state);
    s->failed = 0;
    if ((mc_oplog_scan(g.b.data, g.b.len, apply_cb, s, &valid) != MC_OPLOG_DECODED) ||
        s->failed) {
        mc_error("operation log: REFUSING the snapshot at log key %" PRIu64 " in etcd: a "
                 "record fails its CRC or framing at byte %zu",
                 seq, valid);
        mc_oplog_state_clear(&s->state);
        s->applied_seq = 0;
        atomic_fetch_add(&s->st_refused, 1);
        mc_buf_cleanup(&g.b);
        mc_buf_cleanup(&g.scratch);
        return -1;
    }
    mc_buf_cleanup(&g.b);
    mc_buf_cleanup(&g.scratch);
    s->applied_seq  = seq;
    s->applied_term = 0;
    mc_buf_reset(&s->tail);
    atomic_store(&s->st_snap_seq, seq);
    atomic_store(&s->st_applied, seq);
    mc_info("operation log: loaded the snapshot at log key %" PRIu64 " from etcd (%" PRIu64
            " objects, %" PRIu64 " segments)",
            seq, (uint64_t)s->state.objs.count, (uint64_t)s->state.segs.count);
    return 1;
}

typedef struct follow {
    mc_ship_t *s;
    int gap;
    int bad;
    int more;
    unsigned n;
} follow_t;

static int follow_cb(void *arg, const char *key, size_t keylen, const char *val, size_t len)
{
    follow_t *f  = arg;
    mc_ship_t *s = f->s;
    uint64_t seq, term = 0;
    size_t before, valid;
    mc_oplog_decode_t rc;
    int coded;

    if ((keylen < 16) || (parse_hex(key + keylen - 16, 16, &seq) != 0)) {
        f->bad = 1;
        return 1;
    }
    if (seq != s->applied_seq + 1) {
        f->gap = 1; /* compacted away: a snapshot covers it */
        return 1;
    }
    if (len < 8)
        goto corrupt;
    for (int i = 0; i < 8; i++)
        term |= (uint64_t)(uint8_t)val[i] << (8 * i);
    coded = (term & MC_SHIP_CODED) != 0;
    term &= ~MC_SHIP_CODED;
    if (term != s->applied_term)
        mc_buf_reset(&s->tail); /* a round a dead leader did not finish */
    before = s->tail.len;
    if (coded && (mc_ship_decode(&s->tail, &s->scratch, (const uint8_t *)val + 8, len - 8) != 0)) {
        if (s->tail.oom) {
            f->bad = 1;
            return 1;
        }
        goto corrupt;
    }
    if (!coded)
        mc_buf_put_bytes(&s->tail, val + 8, len - 8);
    if (s->tail.oom) {
        f->bad = 1;
        return 1;
    }
    s->failed = 0;
    rc = mc_oplog_scan(s->tail.data, s->tail.len, apply_cb, s, &valid);
    if (s->failed) {
        f->bad = 1;
        return 1;
    }
    if (rc == MC_OPLOG_CORRUPT) {
        s->tail.len = before;
        goto corrupt;
    }
    memmove(s->tail.data, s->tail.data + valid, s->tail.len - valid);
    s->tail.len     = s->tail.len - valid;
    s->applied_seq  = seq;
    s->applied_term = term;
    atomic_store(&s->st_applied, seq);
    f->n++;
    return 0;
corrupt:
    if (s->refused_seq != seq) {
        s->refused_seq = seq;
        atomic_fetch_add(&s->st_refused, 1);
        mc_error("operation log: REFUSING corrupt log entry %.*s in etcd (a record fails its CRC "
                 "or framing): not following the log past it, and not taking over on it",
                 (int)MC_MIN(keylen, 400u), key);
    }
    f->bad = 1;
    return 1;
}

/* Read the log to its end, or to its first gap: 0; or, with @p max_reads
 * requests done and more keys waiting, 1 (a poll stays short; a takeover
 * passes 0, no limit); -1 on an error. */
static int follow_read(mc_ship_t *s, mc_etcd_t *e, int max_reads)
{
    char from[400], to[400];
    int loaded = 0;

    for (int round = 0;; round++) {
        follow_t f = {.s = s};
        mc_status_t st;

        if (!loaded) {
            int rc = load_snapshot(s, e);
            if (rc < 0)
                return -1;
            loaded = 1;
        }
        key_of(s, from, sizeof(from), "log", s->applied_seq + 1);
        snprintf(to, sizeof(to), "%slog0", s->prefix);
        st = mc_etcd_range(e, from, to, MC_SHIP_RANGE_LIMIT, follow_cb, &f, &f.more);
        if ((st != MC_OK) || f.bad)
            return -1;
        if (f.gap) {
            uint64_t before = s->applied_seq;
            int rc          = load_snapshot(s, e);
            if (rc < 0)
                return -1;
            if ((rc > 0) && (s->applied_seq != before))
                continue; /* the keys were compacted into it */
            /* A key not in yet while a later one is (the leader keeps
             * several in flight), or one a dead leader never wrote: what
             * follows it was never acknowledged.  The gap-free prefix is
             * the log; the next term's first key deletes the rest. */
            mc_debug("operation log: log key %" PRIu64 " not in etcd while a later one is: "
                     "following up to it",
                     before + 1);
            return 0;
        }
        if (!f.more)
            return 0;
        if ((max_reads > 0) && (round + 1 >= max_reads))
            return 1;
    }
}

int mc_ship_follow(mc_ship_t *s, mc_etcd_t *e)
{
    uint64_t now = mc_now_ms();
    int rc;

    if (now < s->f_next_ms) {
        if (s->f_fail_since != 0)
            return -1; /* backing off: still not read to the end */
        return 0;
    }
    rc = follow_read(s, e, MC_SHIP_POLL_READS);
    if (rc >= 0) {
        s->f_fail_since = 0;
        s->f_backoff_ms = 0;
        s->f_next_ms    = (rc > 0) ? now : now + s->poll_ms;
        return 0;
    }
    /* upstream's back-off: the poll period, doubled up to max(5 s, poll) */
    if (s->f_fail_since == 0)
        s->f_fail_since = now;
    s->f_backoff_ms = (s->f_backoff_ms == 0) ? s->poll_ms
                                             : MC_MIN(s->f_backoff_ms * 2,
                                                      MC_MAX(5000u, s->poll_ms));
    s->f_next_ms = mc_now_ms() + s->f_backoff_ms;
    if (mc_now_ms() - s->f_fail_since >= s->retry_ms) {
        mc_error("operation log: the log in etcd could not be read for %" PRIu64 " s "
                 "(--batch_oplog_retry_timeout_sec): this standby gives up and exits "
                 "(status 1); restart it once etcd answers",
                 s->retry_ms / 1000);
        fflush(NULL);
        _exit(1);
    }
    return -1;
}

/* ---- takeover ----------------------------------------------------------------------- */

void mc_ship_elected(mc_ship_t *s, int64_t term)
{
    /* Always read the log to its end now: the old leader can no longer
     * append (its compare fails against this term), and whatever it
     * appended since this standby's last good poll -- a poll skipped
     * within --oplog_poll_interval_ms, polls failing while an etcd member
     * was down, or keys written after the last one -- was acknowledged.
     * Serving without it, this term's first key would delete it.  The
     * writer's handle is idle until the state is installed. */
    s->takeover_failed = 0;
    if (follow_read(s, s->etcd, 0) != 0) {
        mc_error("operation log: elected, but the log in etcd cannot be read to its end: "
                 "not serving on it");
        s->takeover_failed = 1;
    }
    atomic_store(&s->term, term);
    atomic_store(&s->install_pending, 1);
}

int mc_ship_takeover_ok(mc_ship_t *s)
{
    return !s->takeover_failed;
}

int mc_ship_install_pending(mc_ship_t *s)
{
    return (s != NULL) && atomic_load(&s->install_pending);
}

mc_oplog_state_t *mc_ship_state(mc_ship_t *s)
{
    return &s->state;
}

void mc_ship_installed(mc_ship_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->next_seq   = s->applied_seq + 1;
    s->last_key   = s->applied_seq; /* what a snapshot before any new round follows */
    s->term_clean = 0; /* the term's first key clears what lies beyond it */
    pthread_mutex_unlock(&s->mu);
    /* the index holds it now; snapshots are walked from the index */
    mc_oplog_state_clear(&s->state);
    mc_buf_reset(&s->tail);
    mc_buf_reset(&s->pending);
    atomic_store(&s->install_pending, 0);
}

int mc_ship_leading(mc_ship_t *s)
{
    return (atomic_load(&s->term) != 0) && !atomic_load(&s->install_pending) &&
           !atomic_load(&s->c_deposed);
}

int mc_ship_snapshot_begin(mc_ship_t *s, uint64_t rec_seq)
{
    compact_reap(s, 0);
    if (s->c_live)
        return -1;
    chunks_free(s);
    s->c_oom = 0;
    pthread_mutex_lock(&s->mu);
    s->mark_on  = 1;
    s->mark_rec = rec_seq;
    s->mark_key = s->last_key; /* rounds reported so far end before the walk */
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A new chunk at the end; 0, or -1 (c_oom set). */
static int chunk_new(mc_ship_t *s)
{
    uint8_t *c;
    if (s->c_nchunks == s->c_cap) {
        size_t cap  = s->c_cap ? 2 * s->c_cap : 16;
        uint8_t **v = realloc(s->c_chunks, cap * sizeof(*v));
        size_t *l;
        uint8_t *sp;
        if (v != NULL)
            s->c_chunks = v;
        l = (v != NULL) ? realloc(s->c_len, cap * sizeof(*l)) : NULL;
        if (l != NULL)
            s->c_len = l;
        sp = (l != NULL) ? realloc(s->c_split, cap) : NULL;
        if (sp == NULL) {
            s->c_oom = 1;
            return -1;
        }
        s->c_split = sp;
        s->c_cap   = cap;
    }
    if ((c = malloc(MC_SHIP_PIECE)) == NULL) {
        s->c_oom = 1;
        return -1;
    }
    s->c_chunks[s->c_nchunks] = c;
    s->c_len[s->c_nchunks]    = 0;
    s->c_split[s->c_nchunks]  = 0;
    s->c_nchunks++;
    return 0;
}

void mc_ship_snapshot_add(mc_ship_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;

    while ((len > 0) && !s->c_oom) {
        /* the next record whole, where it fits in a chunk; else (a record
         * larger than a chunk, or bytes that are not a frame) the bytes
         * spread over chunks that go raw, as the loader concatenates */
        int framed = (len >= MC_OPLOG_FRAME_HEADER) && (mc_oplog_frame_len(p) <= len);
        size_t rec = framed ? mc_oplog_frame_len(p) : len;
        int whole  = framed && (rec <= MC_SHIP_PIECE);
        if (whole && ((s->c_nchunks == 0) || (s->c_len[s->c_nchunks - 1] + rec > MC_SHIP_PIECE)) &&
            (chunk_new(s) != 0))
            break;
        for (size_t left = rec; (left > 0) && !s->c_oom;) {
            size_t n, *cl;
            if (((s->c_nchunks == 0) || (s->c_len[s->c_nchunks - 1] == MC_SHIP_PIECE)) &&
                (chunk_new(s) != 0))
                break;
            cl = &s->c_len[s->c_nchunks - 1];
            n  = MC_MIN(left, (size_t)MC_SHIP_PIECE - *cl);
            memcpy(s->c_chunks[s->c_nchunks - 1] + *cl, p, n);
            if (!whole)
                s->c_split[s->c_nchunks - 1] = 1;
            *cl += n;
            p += n;
            left -= n;
        }
        len -= rec;
    }
}

void mc_ship_snapshot_publish(mc_ship_t *s, uint64_t rec_seq)
{
    s->c_rec_end = rec_seq;
    atomic_store(&s->c_done, 0);
    if (s->c_oom) {
        mc_warn("operation log: out of memory walking the index for a snapshot");
    } else if (pthread_create(&s->c_thread, NULL, compact_main, s) != 0) {
        mc_warn("operation log: cannot start the snapshot thread: %s", strerror(errno));
    } else {
        s->c_live = 1;
        return;
    }
    mc_ship_snapshot_abort(s);
}

void mc_ship_snapshot_abort(mc_ship_t *s)
{
    chunks_free(s);
    s->c_oom = 1; /* records added after this are dropped, and nothing is published */
    pthread_mutex_lock(&s->mu);
    s->mark_on = 0;
    pthread_mutex_unlock(&s->mu);
}

void mc_ship_get_stats(mc_ship_t *s, mc_ship_stats_t *st)
{
    st->applied_seq  = atomic_load(&s->st_applied);
    st->snapshot_seq = atomic_load(&s->st_snap_seq);
    st->snapshots    = atomic_load(&s->st_snaps);
    st->refused      = atomic_load(&s->st_refused);
    st->puts         = atomic_load(&s->st_puts);
}

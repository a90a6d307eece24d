/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log shipped through etcd (ship.h, docs/ha.md).
 *
 * Leader: the log writer's sink.  append collects a group-commit round;
 * sync writes it as log/<seq> keys, each in a transaction whose compare is
 * "the leader key's create revision is my term", so a deposed leader can
 * never append; only then are the round's answers released.  The round is
 * also folded into the replay state, which a snapshot writes to etcd from
 * time to time (a copy of its records, written by a thread of its own;
 * the log keys it covers are deleted in the same fenced transaction that
 * publishes it).
 *
 * Standby: the follower reads log keys from its last applied one, checks
 * every record's CRC and folds it into the same kind of state; when the
 * keys it needs were compacted away it loads the newest snapshot first.
 * Records may straddle two keys of one round; a round cut short by a
 * leader's death is dropped when the next term's keys begin.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "coord/etcd.h"
#include "ship.h"

/* keys read per request: 8 keys of MC_SHIP_PIECE, base64, stay well under
 * the etcd client's 16 MiB answer limit */
#define MC_SHIP_RANGE_LIMIT 8
#define MC_SHIP_RETRY_MS    100

struct mc_ship {
    mc_oplog_sink_t sink;     /* first: the writer's handle */
    mc_etcd_t *etcd;          /* the writer thread's own handle */
    char prefix[300];         /* mooncake-store/<cluster_id>/oplog/ */
    char guard[300];          /* the leader key */
    int64_t ttl_ms;
    uint64_t compact_ms;

    mc_oplog_state_t state;
    _Atomic int64_t term;     /* set by the loop once the state is installed */
    _Atomic int install_pending;

    /* writer thread, as leader */
    mc_buf_t pending;         /* the round being collected */
    uint64_t next_seq;
    uint64_t log_bytes;       /* since the last snapshot */
    uint64_t last_compact_ms;
    /* the compaction thread (started and joined by the writer thread) */
    mc_etcd_t *c_etcd;        /* its own handle: chunks do not delay appends */
    pthread_t c_thread;
    int c_live;
    mc_buf_t c_buf;           /* the state's records, copied */
    uint64_t c_seq;           /* the log key the copy ends at */
    _Atomic int c_done;
    _Atomic int c_deposed;    /* its fenced txn was refused */

    /* election thread, as standby */
    uint64_t applied_seq;     /* last log key folded in */
    uint64_t applied_term;    /* term of that key */
    mc_buf_t tail;            /* bytes of a record continued in the next key */
    uint64_t refused_seq;     /* last key refused (logged once) */
    int failed;               /* a decode/apply error in the current call */

    _Atomic uint64_t st_applied, st_snap_seq, st_snaps, st_refused, st_puts;
};

static void key_of(const mc_ship_t *s, char *out, size_t cap, const char *kind, uint64_t seq)
{
    snprintf(out, cap, "%s%s/%016" PRIx64, s->prefix, kind, seq);
}

static void compact_reap(mc_ship_t *s, int wait);

mc_ship_t *mc_ship_create(const char *endpoints, const char *cluster_id, int64_t ttl_s,
                          uint64_t compact_ms)
{
    mc_ship_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    if (mc_oplog_state_init(&s->state) != 0) {
        free(s);
        return NULL;
    }
    mc_buf_init(&s->pending);
    mc_buf_init(&s->tail);
    mc_buf_init(&s->c_buf);
    snprintf(s->prefix, sizeof(s->prefix), "mooncake-store/%s/oplog/", cluster_id);
    snprintf(s->guard, sizeof(s->guard), "mooncake-store/%s/master_view", cluster_id);
    s->ttl_ms     = ttl_s * 1000;
    s->compact_ms = compact_ms;
    if ((mc_etcd_create(endpoints, (int)MC_MAX(300, s->ttl_ms / 3), &s->etcd) != MC_OK) ||
        (mc_etcd_create(endpoints, (int)MC_MAX(300, s->ttl_ms / 3), &s->c_etcd) != MC_OK)) {
        mc_error("operation log: %s", mc_last_error_detail());
        mc_ship_destroy(s);
        return NULL;
    }
    return s;
}

void mc_ship_destroy(mc_ship_t *s)
{
    if (s == NULL)
        return;
    compact_reap(s, 1);
    mc_etcd_destroy(s->etcd);
    mc_etcd_destroy(s->c_etcd);
    mc_buf_cleanup(&s->c_buf);
    mc_oplog_state_cleanup(&s->state);
    mc_buf_cleanup(&s->pending);
    mc_buf_cleanup(&s->tail);
    free(s);
}

/* ---- leader: the sink ------------------------------------------------------------ */

/* One fenced transaction, retried over etcd errors for at most a TTL.  0,
 * or -1 with errno EPERM (no longer the leader) or EIO. */
static int txn_retry(mc_ship_t *s, mc_etcd_t *e, const mc_etcd_op_t *ops, size_t n)
{
    uint64_t end = mc_now_ms() + (uint64_t)s->ttl_ms;
    int64_t term = atomic_load(&s->term);

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

static int put_chunk(mc_ship_t *s, mc_etcd_t *e, const char *key, uint64_t term,
                     const uint8_t *p, size_t n)
{
    mc_etcd_op_t op = {0};
    uint8_t *v      = malloc(n + 8);
    int rc;
    if (v == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < 8; i++)
        v[i] = (uint8_t)(term >> (8 * i));
    memcpy(v + 8, p, n);
    op.key = key;
    op.val = v;
    op.len = n + 8;
    rc     = txn_retry(s, e, &op, 1);
    free(v);
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

/* The compaction thread: write the state copied into c_buf as
 * snap/<c_seq>/<n> and publish it, deleting the log keys and the older
 * snapshots it replaces (the writer goes on appending meanwhile: keys
 * after c_seq are not touched). */
static void *compact_main(void *arg)
{
    mc_ship_t *s = arg;
    char key[400], meta[400], meta_v[64], log0[400], logend[400], snap0[400], snapend[400];
    mc_etcd_op_t ops[3] = {{0}};
    uint64_t t0 = mc_now_ms(), term = (uint64_t)atomic_load(&s->term);
    uint32_t n  = 0;
    int rc      = 0;

    for (size_t off = 0; (rc == 0) && (off < s->c_buf.len); off += MC_SHIP_PIECE, n++) {
        snprintf(key, sizeof(key), "%ssnap/%016" PRIx64 "/%016" PRIx32, s->prefix, s->c_seq, n);
        rc = put_chunk(s, s->c_etcd, key, term, s->c_buf.data + off,
                       MC_MIN((size_t)MC_SHIP_PIECE, s->c_buf.len - off));
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
        rc     = txn_retry(s, s->c_etcd, ops, 3);
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

/* Join a compaction that has ended (or, with @p wait, any). */
static void compact_reap(mc_ship_t *s, int wait)
{
    if (!s->c_live || (!wait && !atomic_load(&s->c_done)))
        return;
    pthread_join(s->c_thread, NULL);
    s->c_live = 0;
    mc_buf_reset(&s->c_buf);
}

/* Copy the state's records (segments first) and hand them to a thread. */
static void compact_start(mc_ship_t *s)
{
    mc_hmap_t *maps[3] = {&s->state.segs, &s->state.tasks, &s->state.objs};
    mc_hmap_iter_t it;

    mc_buf_reset(&s->c_buf);
    for (int i = 0; i < 3; i++) {
        for (mc_hnode_t *n = mc_hmap_first(maps[i], &it); n != NULL;
             n = mc_hmap_next(maps[i], &it)) {
            mc_oplog_entry_t *e = mc_container_of(n, mc_oplog_entry_t, node);
            mc_buf_put_bytes(&s->c_buf, e->frame, e->len);
        }
    }
    if (s->c_buf.oom) {
        mc_warn("operation log: out of memory copying the state for a snapshot");
        mc_buf_cleanup(&s->c_buf);
        mc_buf_init(&s->c_buf);
        return;
    }
    s->c_seq = s->next_seq - 1;
    atomic_store(&s->c_done, 0);
    if (pthread_create(&s->c_thread, NULL, compact_main, s) != 0) {
        mc_warn("operation log: cannot start the snapshot thread: %s", strerror(errno));
        return;
    }
    s->c_live = 1;
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
    uint64_t term = (uint64_t)atomic_load(&s->term);
    size_t valid;
    char key[400];

    if (s->pending.len == 0)
        return 0;
    if (atomic_load(&s->c_deposed)) {
        errno = EPERM;
        return -1;
    }
    if (term == 0 || atomic_load(&s->install_pending)) {
        mc_error("operation log: records appended while not the leader");
        errno = EPERM;
        return -1;
    }
    for (size_t off = 0; off < s->pending.len; off += MC_SHIP_PIECE) {
        size_t n = MC_MIN((size_t)MC_SHIP_PIECE, s->pending.len - off);
        key_of(s, key, sizeof(key), "log", s->next_seq);
        if (put_chunk(s, s->etcd, key, term, s->pending.data + off, n) != 0)
            return -1;
        s->next_seq++;
        atomic_fetch_add(&s->st_puts, 1);
    }
    atomic_store(&s->st_applied, s->next_seq - 1);
    s->failed = 0;
    (void)mc_oplog_scan(s->pending.data, s->pending.len, apply_cb, s, &valid);
    s->log_bytes += s->pending.len;
    mc_buf_reset(&s->pending);
    if (s->failed) {
        errno = ENOMEM;
        return -1;
    }
    compact_reap(s, 0);
    if (!s->c_live && ((s->log_bytes >= MC_SHIP_COMPACT_BYTES) ||
                       (mc_now_ms() - s->last_compact_ms >= s->compact_ms))) {
        /* an etcd outage delays the compaction, not the log */
        s->log_bytes       = 0;
        s->last_compact_ms = mc_now_ms();
        compact_start(s);
    }
    return 0;
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
    return &s->sink;
}

/* ---- standby: the follower ---------------------------------------------------------- */

typedef struct gather {
    mc_ship_t *s;
    mc_buf_t b;
    uint64_t expect; /* next chunk number */
    int bad;
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
    mc_buf_put_bytes(&g->b, val + 8, len - 8);
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
    for (int more = 1; more && !g.bad && (g.expect < n);) {
        snprintf(from, sizeof(from), "%ssnap/%016" PRIx64 "/%016" PRIx64, s->prefix, seq,
                 g.expect);
        st = mc_etcd_range(e, from, to, MC_SHIP_RANGE_LIMIT, gather_cb, &g, &more);
        if (st != MC_OK)
            break;
    }
    if ((st != MC_OK) || g.bad || (g.expect != n) || g.b.oom) {
        if (st == MC_OK)
            mc_warn("operation log: the snapshot at log key %" PRIu64 " in etcd has chunks "
                    "missing or misnamed (replaced by a newer one while read?): reading "
                    "again",
                    seq);
        mc_buf_cleanup(&g.b);
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
        return -1;
    }
    mc_buf_cleanup(&g.b);
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
    if (term != s->applied_term)
        mc_buf_reset(&s->tail); /* a round a dead leader did not finish */
    before = s->tail.len;
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

int mc_ship_follow(mc_ship_t *s, mc_etcd_t *e)
{
    char from[400], to[400];
    int loaded = 0;

    for (int round = 0; round < 1000; round++) {
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
            if ((load_snapshot(s, e) <= 0) || (s->applied_seq == before)) {
                mc_error("operation log: log key %" PRIu64 " is missing in etcd and no "
                         "snapshot covers it",
                         before + 1);
                return -1;
            }
            continue;
        }
        if (!f.more)
            return 0;
    }
    return 0;
}

/* ---- takeover ----------------------------------------------------------------------- */

void mc_ship_elected(mc_ship_t *s, int64_t term)
{
    atomic_store(&s->term, term);
    atomic_store(&s->install_pending, 1);
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
    s->next_seq        = s->applied_seq + 1;
    s->log_bytes       = 0;
    s->last_compact_ms = mc_now_ms();
    mc_buf_reset(&s->tail);
    mc_buf_reset(&s->pending);
    atomic_store(&s->install_pending, 0);
}

void mc_ship_get_stats(mc_ship_t *s, mc_ship_stats_t *st)
{
    st->applied_seq  = atomic_load(&s->st_applied);
    st->snapshot_seq = atomic_load(&s->st_snap_seq);
    st->snapshots    = atomic_load(&s->st_snaps);
    st->refused      = atomic_load(&s->st_refused);
    st->puts         = atomic_load(&s->st_puts);
}

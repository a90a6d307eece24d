/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The durable master: operation log, snapshots and restore (snapshot.h,
 * docs/ha.md "Durability").
 *
 * Files in --snapshot_backup_dir (gen = 16 hex digits, increasing):
 *   oplog.<gen>     records appended since snapshot <gen> was cut;
 *   snapshot.<gen>  the whole state as of the start of oplog.<gen>;
 *   snapshot.<gen>.tmp   a snapshot being written (removed at start);
 *   snapshot.<gen>.corrupt   a snapshot refused at restore, kept for
 *                    inspection.
 * The state is the newest valid snapshot <S> plus oplog.<S>,
 * oplog.<S+1>, ... in order.
 *
 * A snapshot is a fuzzy checkpoint written by an incremental walker, so
 * the event loop never stops for more than one slice (MC_SNAP_SLICE_US):
 * the loop asks the log writer to rotate to oplog.<G> (records appended so
 * far stay in the old file), writes SNAP_BEGIN and every segment, then
 * walks the object index a slice of buckets per loop turn, encoding each
 * complete object as it is at that moment; a thread writes the encoded
 * chunks to snapshot.<G>.tmp, syncs and renames it.  Changes made during
 * the walk are in oplog.<G>, and records are whole states (idempotent), so
 * snapshot.<G> followed by oplog.<G> from its start gives the exact state
 * whichever version of an object the walk caught.  The index only grows
 * by doubling, keeping each node in bucket b or b + old size (bucket
 * numbers follow the new size from the growth's start, while nodes still
 * move: mc_chmap_t), so a walk that goes on at the same bucket number
 * after a growth misses nothing (it may see an object twice, which
 * replays the same).  The tick gives
 * up on a snapshot older than --snapshot_child_timeout_seconds and
 * deletes what the newest --snapshot_retention_count snapshots no longer
 * need.
 *
 * Owns: the durable master: the log writer thread, snapshots, the restore
 *   at start and the mc_durable_* hooks.
 * May call: durability/ (oplog, ship), index/ (restore rebuilds clients,
 *   segments, objects, tasks), ha/ (the etcd endpoints), rpc.c (answers
 *   released when durable).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/log.h"
#include "ha/ha.h"
#include "index/index.h"
#include "ship.h"
#include "snapshot.h"

#define MC_GEN_MAX 4096 /* files of one kind considered in the directory */
#define MC_SNAP_SLICE_US 1000u        /* the longest a walk slice holds the loop */
#define MC_SNAP_QUEUE_MAX (32u << 20) /* encoded bytes waiting for the file: pause above */
#define MC_SNAP_LOG_BYTES (1ull << 30) /* a log this large is compacted without waiting */

/* A snapshot being written: the walker (loop thread) encodes into @c q,
 * the thread writes it to the file; or, for the log shipped through etcd
 * (@c ship set; no file, no thread), each slice's records go to ship.c
 * (mc_ship_snapshot_add), which publishes them at the walk's end. */
typedef struct snap_job {
    mc_ship_t *ship;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_buf_t q;
    int end;         /* loop: everything is in q */
    int abort;       /* loop: give up */
    int done;        /* thread: finished (failed or not) */
    int failed;      /* thread */
    int err;
    int fd;
    uint64_t gen;
    char dir[PATH_MAX];
    char path[PATH_MAX + 64];
    char tmp[PATH_MAX + 80];
} snap_job_t;

struct mc_durable {
    mc_oplog_writer_t *w;
    char dir[PATH_MAX];
    uint64_t gen;               /* generation of the log being appended */
    uint64_t durable_seen;      /* writer's durable seq, as last read by the loop */
    int wake_fd;
    struct event *wake_ev;
    struct event *kick_ev;
    int kick_armed;
    int quiet;                  /* installing a restore: nothing to log */
    snap_job_t *job;            /* the snapshot being written, or NULL */
    struct event *walk_ev;
    size_t walk_pos;            /* next bucket of m->objects */
    uint64_t walk_objs;
    uint32_t walk_segs;
    uint32_t walk_slices;
    uint64_t walk_max_us;       /* longest slice, wall clock */
    uint64_t walk_max_cpu_us;   /* the longest slice's own CPU time */
    uint64_t job_start_ms;
    uint64_t next_snapshot_ms;
    uint64_t log_bytes_at_rotation; /* the writer's byte count when the log last rotated */
    uint64_t grace_deadline_ms; /* 0: no restored segment awaits its owner */
    mc_ship_t *ship;            /* HA: the log goes to etcd (ship.c), not to dir */
    mc_durable_stats_t st;
};

/* ---- appending ------------------------------------------------------------------ */

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_durable_t *d = arg;
    (void)fd;
    (void)what;
    d->kick_armed = 0;
    mc_oplog_writer_kick(d->w);
}

static mc_buf_t *append_begin(mc_durable_t *d)
{
    return mc_oplog_writer_begin(d->w);
}

/* The group-commit point is the end of the loop turn: kick_ev runs after
 * the callbacks already active. */
static void append_end(mc_durable_t *d, unsigned n)
{
    mc_oplog_writer_end(d->w, n);
    if (!d->kick_armed) {
        d->kick_armed = 1;
        event_active(d->kick_ev, EV_TIMEOUT, 0);
    }
}

/* Store @p s as the log's strings are (u32 length, bytes) at @p p; the end. */
static uint8_t *store_str(uint8_t *p, mc_str_t s)
{
    mc_store_le32(p, (uint32_t)s.len);
    memcpy(p + 4, s.ptr, s.len);
    return p + 4 + s.len;
}

static uint8_t *store_uuid(uint8_t *p, mc_uuid_t u)
{
    mc_store_le64(p, u.hi);
    mc_store_le64(p + 8, u.lo);
    return p + 16;
}

/* OBJ_SET of @p o straight from the index (same layout as
 * mc_oplog_record_encode).  A record per key of every put: the fixed part
 * and the replicas are sized first and stored in one reservation, not
 * appended field by field (the loop's share of a logged put). */
static void encode_object(mc_buf_t *b, const mc_object_t *o)
{
    mc_str_t tenant = mc_object_tenant(o), key = mc_object_key(o);
    const char *gid = mc_object_group_id(o);
    mc_str_t group  = mc_str_from_cstr(gid);
    size_t at       = b->len;
    uint32_t n      = 0;
    const mc_replica_t *r;
    uint8_t *p;

    /* NoF segments are not logged (docs/tiers.md §8): nor their replicas */
    mc_object_for_each_replica(r, o)
        n += !r->seg->nof;
    p = mc_buf_reserve(b, MC_OPLOG_FRAME_HEADER + 4 + tenant.len + 4 + key.len + 8 + 16 + 1 +
                              8 + 1 + ((gid != NULL) ? 4 + group.len : 0) + 4 + (size_t)n * 32);
    if (p == NULL)
        return; /* b->oom: the writer reports it */
    memset(p, 0, 8); /* length and CRC: mc_oplog_frame_end */
    p[8] = MC_OPLOG_OBJ_SET;
    p    = store_str(p + MC_OPLOG_FRAME_HEADER, tenant);
    p    = store_str(p, key);
    mc_store_le64(p, o->size);
    p    = store_uuid(p + 8, mc_object_owner(o));
    *p++ = o->hard_pin;
    /* soft pin is runtime-only, as upstream's snapshots and oplog keep it:
     * the slot stays in the layout but is always 0, so a restored or
     * promoted index holds ordinary cache until a later write pins again */
    mc_store_le64(p, 0);
    p += 8;
    *p++ = (gid != NULL);
    if (gid != NULL)
        p = store_str(p, group);
    mc_store_le32(p, n);
    p += 4;
    mc_object_for_each_replica(r, o)
    {
        mc_alloc_block_t blk;
        if (r->seg->nof)
            continue;
        blk = mc_master_replica_block(r);
        p   = store_uuid(p, r->seg->id);
        mc_store_le64(p, blk.offset);
        mc_store_le64(p + 8, blk.size);
        p += 16;
    }
    if ((o->ext != NULL) && (o->ext->disk != NULL)) {
        const mc_disk_replica_t *dr = o->ext->disk;
        mc_oplog_put_disk_tail(b, dr->holder, mc_str_from_cstr(dr->segment),
                               mc_str_from_cstr(dr->path), dr->offset, dr->length, dr->crc);
    }
    if ((o->ext != NULL) && (o->ext->dfs != NULL)) {
        const mc_dfs_replica_t *f = o->ext->dfs;
        mc_oplog_put_dfs_tail(b, f->shard, f->offset, f->span, f->replica_num);
    }
    mc_oplog_frame_end(b, at);
}

static void encode_segment(mc_buf_t *b, const mc_segment_t *seg)
{
    mc_oplog_record_t r;
    memset(&r, 0, sizeof(r));
    r.type     = MC_OPLOG_SEG_MOUNT;
    r.id       = seg->id;
    r.owner    = seg->owner->id;
    r.name     = mc_str_from_cstr(seg->name);
    r.protocol = mc_str_from_cstr(seg->protocol);
    r.base     = seg->base;
    r.size     = seg->size;
    mc_oplog_record_encode(b, &r);
}

void mc_durable_object(mc_master_t *m, const mc_object_t *o)
{
    mc_durable_t *d = m->durable;
    if ((d == NULL) || d->quiet || !o->complete)
        return;
    encode_object(append_begin(d), o);
    append_end(d, 1);
}

void mc_durable_erase(mc_master_t *m, const mc_object_t *o)
{
    mc_durable_t *d = m->durable;
    mc_oplog_record_t r;

    if ((d == NULL) || d->quiet)
        return;
    memset(&r, 0, sizeof(r));
    r.type   = MC_OPLOG_OBJ_DEL;
    r.tenant = mc_object_tenant(o);
    r.key    = mc_object_key(o);
    mc_oplog_record_encode(append_begin(d), &r);
    append_end(d, 1);
}

/* Append a record that names only an id (SEG_UNMOUNT, TASK_DEL). */
static void append_id_record(mc_durable_t *d, uint8_t type, mc_uuid_t id)
{
    mc_oplog_record_t r;
    memset(&r, 0, sizeof(r));
    r.type = type;
    r.id   = id;
    mc_oplog_record_encode(append_begin(d), &r);
    append_end(d, 1);
}

void mc_durable_segment(mc_master_t *m, const mc_segment_t *seg, int mounted)
{
    mc_durable_t *d = m->durable;

    if ((d == NULL) || d->quiet)
        return;
    if (!mounted) {
        append_id_record(d, MC_OPLOG_SEG_UNMOUNT, seg->id);
        return;
    }
    encode_segment(append_begin(d), seg);
    append_end(d, 1);
}

static void encode_task(mc_buf_t *b, const mc_task_t *t)
{
    mc_oplog_record_t r;
    mc_str_t tg[MC_OPLOG_MAX_TARGETS];
    memset(&r, 0, sizeof(r));
    r.type        = MC_OPLOG_TASK_SET;
    r.id          = t->id;
    r.owner       = t->assigned;
    r.task_type   = t->type;
    r.status      = t->status;
    r.created_ms  = t->created_ms;
    r.updated_ms  = t->updated_ms;
    r.tenant      = (mc_str_t){t->tenant, t->tenant_len};
    r.key         = (mc_str_t){t->key, t->key_len};
    r.name        = mc_str_from_cstr(t->source);
    r.has_message = t->message != NULL;
    r.message     = mc_str_from_cstr(t->message);
    r.ntargets    = MC_MIN(t->ntargets, MC_OPLOG_MAX_TARGETS);
    for (uint32_t i = 0; i < r.ntargets; i++)
        tg[i] = mc_str_from_cstr(t->targets[i]);
    r.targets = tg;
    mc_oplog_record_encode(b, &r);
}

void mc_durable_task(mc_master_t *m, const mc_task_t *t, int live)
{
    mc_durable_t *d = m->durable;

    if ((d == NULL) || d->quiet)
        return;
    if (!live) {
        append_id_record(d, MC_OPLOG_TASK_DEL, t->id);
        return;
    }
    encode_task(append_begin(d), t);
    append_end(d, 1);
}

/* The journal index/ reports its changes through (master.h). */
static const mc_master_journal_t durable_journal = {
    .object  = mc_durable_object,
    .erase   = mc_durable_erase,
    .segment = mc_durable_segment,
    .task    = mc_durable_task,
};

uint64_t mc_durable_pending(mc_master_t *m)
{
    mc_durable_t *d = m->durable;
    uint64_t a;
    if (d == NULL)
        return 0;
    a = mc_oplog_writer_appended(d->w);
    return (a > d->durable_seen) ? a : 0;
}

void mc_durable_poll(mc_master_t *m)
{
    mc_durable_t *d = m->durable;

    /* one atomic load when nothing changed; a failure is wake_cb's */
    if ((d == NULL) || (mc_oplog_writer_durable_peek(d->w) <= d->durable_seen))
        return;
    d->durable_seen = mc_oplog_writer_durable(d->w);
    mc_master_rpc_release(m, d->durable_seen);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_master_t *m  = arg;
    mc_durable_t *d = m->durable;
    uint64_t v;
    (void)what;

    /* drain first, then read: a round that ends after this read wakes us
     * again */
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        mc_debug("operation log: wake read: %s", strerror(errno));
    if (mc_oplog_writer_failed(d->w)) {
        mc_error("operation log in %s cannot be written: stopping the master, since no "
                 "change could be acknowledged any more", d->dir);
        m->fatal = 1;
        event_base_loopbreak(m->base);
        return;
    }
    d->durable_seen = mc_oplog_writer_durable(d->w);
    mc_master_rpc_release(m, d->durable_seen);
}

/* ---- snapshot files -------------------------------------------------------------- */

typedef struct snap_out {
    int fd;
    mc_buf_t b;
    int err;
} snap_out_t;

static void snap_flush(snap_out_t *o, size_t at_least)
{
    if (o->b.oom)
        o->err = ENOMEM;
    if (!o->err && (o->b.len >= at_least) && (o->b.len > 0)) {
        if (mc_oplog_write_all(o->fd, o->b.data, o->b.len) != 0)
            o->err = errno ? errno : EIO;
        mc_buf_reset(&o->b);
    }
}

/* Write the whole state of @p m to @p path (created, synced); 0 or -1. */
static int write_snapshot(mc_master_t *m, const char *path, uint64_t gen)
{
    snap_out_t o;
    mc_oplog_record_t r;
    mc_hmap_iter_t it;
    mc_chmap_iter_t oit;
    mc_hnode_t *n;
    uint64_t nobjs = 0;

    memset(&o, 0, sizeof(o));
    o.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o.fd < 0)
        return -1;
    mc_buf_init(&o.b);
    memset(&r, 0, sizeof(r));
    r.type    = MC_OPLOG_SNAP_BEGIN;
    r.gen     = gen;
    r.wall_ms = mc_wall_ms();
    mc_oplog_record_encode(&o.b, &r);
    for (uint32_t i = 0; i < m->nseg; i++)
        encode_segment(&o.b, m->segv[i]);
    for (n = mc_hmap_first(&m->tasks, &it); n != NULL; n = mc_hmap_next(&m->tasks, &it))
        encode_task(&o.b, mc_container_of(n, mc_task_t, node));
    for (mc_cnode_t *on = mc_chmap_first(&m->objects, &oit); (on != NULL) && !o.err;
         on = mc_chmap_next(&m->objects, &oit)) {
        const mc_object_t *obj = mc_container_of(on, mc_object_t, node);
        if (!obj->complete)
            continue;
        encode_object(&o.b, obj);
        nobjs++;
        snap_flush(&o, 1u << 20);
    }
    memset(&r, 0, sizeof(r));
    r.type  = MC_OPLOG_SNAP_END;
    r.nsegs = m->nseg;
    r.nobjs = nobjs;
    mc_oplog_record_encode(&o.b, &r);
    snap_flush(&o, 0);
    if (!o.err && (fsync(o.fd) != 0))
        o.err = errno;
    close(o.fd);
    mc_buf_cleanup(&o.b);
    if (o.err) {
        errno = o.err;
        return -1;
    }
    return 0;
}

/* Write snapshot.<gen> through its .tmp; 0 or -1. */
static int publish_snapshot(mc_master_t *m, const char *dir, uint64_t gen)
{
    char path[PATH_MAX + 64], tmp[PATH_MAX + 64];
    if ((mc_oplog_path(path, sizeof(path), dir, "snapshot", gen) != 0) ||
        (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (write_snapshot(m, tmp, gen) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    if ((rename(tmp, path) != 0) || (mc_oplog_fsync_dir(dir) != 0))
        return -1;
    return 0;
}

/* ---- the directory ------------------------------------------------------------------ */

typedef struct gen_list {
    uint64_t snap[MC_GEN_MAX];
    uint32_t nsnap;
    uint64_t log[MC_GEN_MAX];
    uint32_t nlog;
} gen_list_t;

static int gen_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int parse_gen(const char *s, uint64_t *gen)
{
    char *end;
    if (strlen(s) != 16)
        return -1;
    errno = 0;
    *gen  = strtoull(s, &end, 16);
    return ((errno != 0) || (*end != '\0') || (*gen == 0)) ? -1 : 0;
}

/* List the generations in @p dir, ascending; stale .tmp files go. */
static int list_dir(const char *dir, gen_list_t *g)
{
    DIR *dp = opendir(dir);
    struct dirent *de;

    g->nsnap = g->nlog = 0;
    if (dp == NULL)
        return -1;
    while ((de = readdir(dp)) != NULL) {
        uint64_t gen;
        size_t len = strlen(de->d_name);
        if ((len > 4) && (strcmp(de->d_name + len - 4, ".tmp") == 0) &&
            (strncmp(de->d_name, "snapshot.", 9) == 0)) {
            char p[PATH_MAX + 300];
            snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
            unlink(p);
            continue;
        }
        if ((strncmp(de->d_name, "snapshot.", 9) == 0) && (parse_gen(de->d_name + 9, &gen) == 0) &&
            (g->nsnap < MC_GEN_MAX))
            g->snap[g->nsnap++] = gen;
        else if ((strncmp(de->d_name, "oplog.", 6) == 0) &&
                 (parse_gen(de->d_name + 6, &gen) == 0) && (g->nlog < MC_GEN_MAX))
            g->log[g->nlog++] = gen;
    }
    closedir(dp);
    qsort(g->snap, g->nsnap, sizeof(uint64_t), gen_cmp);
    qsort(g->log, g->nlog, sizeof(uint64_t), gen_cmp);
    return 0;
}

/* Keep the newest --snapshot_retention_count snapshots and the logs from
 * the oldest of them on; delete the rest. */
static void retention(mc_master_t *m)
{
    mc_durable_t *d = m->durable;
    gen_list_t *g   = malloc(sizeof(*g));
    uint32_t keep   = (uint32_t)m->cfg->snapshot_retention_count;
    uint64_t oldest;
    char path[PATH_MAX + 64];

    if ((g == NULL) || (list_dir(d->dir, g) != 0) || (g->nsnap == 0)) {
        free(g);
        return;
    }
    if (keep == 0)
        keep = 1;
    oldest = g->snap[g->nsnap > keep ? g->nsnap - keep : 0];
    for (uint32_t i = 0; i < g->nsnap; i++) {
        if ((g->snap[i] < oldest) &&
            (mc_oplog_path(path, sizeof(path), d->dir, "snapshot", g->snap[i]) == 0))
            unlink(path);
    }
    for (uint32_t i = 0; i < g->nlog; i++) {
        if ((g->log[i] < oldest) &&
            (mc_oplog_path(path, sizeof(path), d->dir, "oplog", g->log[i]) == 0))
            unlink(path);
    }
    free(g);
}

/* ---- restore ------------------------------------------------------------------------- */

typedef struct mapped {
    uint8_t *data;
    size_t len;
    int fd;
} mapped_t;

static int map_file(const char *path, mapped_t *mf)
{
    struct stat sb;
    mf->data = NULL;
    mf->len  = 0;
    mf->fd   = open(path, O_RDWR | O_CLOEXEC);
    if (mf->fd < 0)
        return -1;
    if (fstat(mf->fd, &sb) != 0) {
        close(mf->fd);
        return -1;
    }
    mf->len = (size_t)sb.st_size;
    if (mf->len == 0)
        return 0;
    mf->data = mmap(NULL, mf->len, PROT_READ, MAP_PRIVATE, mf->fd, 0);
    if (mf->data == MAP_FAILED) {
        mf->data = NULL;
        close(mf->fd);
        return -1;
    }
    return 0;
}

static void unmap_file(mapped_t *mf)
{
    if (mf->data != NULL)
        munmap(mf->data, mf->len);
    close(mf->fd);
}

typedef struct replay {
    mc_oplog_state_t *state;
    uint64_t gen;
    uint64_t nrec;
    int begun;
    int ended;
    uint64_t nsegs, nobjs;       /* snapshot: what SNAP_END claims */
    uint64_t seen_segs, seen_objs;
    int bad;
    const char *why;
    int snapshot;
} replay_t;

static int replay_cb(void *arg, const mc_oplog_record_t *r)
{
    replay_t *rp = arg;
    uint8_t first = rp->snapshot ? MC_OPLOG_SNAP_BEGIN : MC_OPLOG_LOG_BEGIN;

    if (rp->nrec++ == 0) {
        if ((r->type != first) || (r->gen != rp->gen)) {
            rp->bad = 1;
            rp->why = "it does not start with its own header";
            return 1;
        }
        rp->begun = 1;
        return 0;
    }
    if (rp->ended || (r->type == MC_OPLOG_LOG_BEGIN) || (r->type == MC_OPLOG_SNAP_BEGIN) ||
        ((r->type == MC_OPLOG_SNAP_END) && !rp->snapshot)) {
        rp->bad = 1;
        rp->why = "a record out of place";
        return 1;
    }
    if (r->type == MC_OPLOG_SNAP_END) {
        rp->ended = 1;
        rp->nsegs = r->nsegs;
        rp->nobjs = r->nobjs;
        return 0;
    }
    rp->seen_segs += (r->type == MC_OPLOG_SEG_MOUNT);
    rp->seen_objs += (r->type == MC_OPLOG_OBJ_SET);
    if (mc_oplog_state_apply(rp->state, r) != 0) {
        rp->bad = 1;
        rp->why = "out of memory";
        return 1;
    }
    return 0;
}

/* Map <kind>.<gen> of @p dir (its name in @p path) for replay into @p s
 * with @p rp; 0, or -1 with the reason logged. */
static int replay_open(const char *dir, const char *kind, uint64_t gen, mc_oplog_state_t *s,
                       replay_t *rp, char *path, size_t pathlen, mapped_t *mf)
{
    memset(rp, 0, sizeof(*rp));
    rp->state    = s;
    rp->gen      = gen;
    rp->snapshot = strcmp(kind, "snapshot") == 0;
    mc_oplog_path(path, pathlen, dir, kind, gen);
    if (map_file(path, mf) != 0) {
        mc_error("restore: cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Load snapshot <gen> into @p s; 0, or -1 with the reason logged. */
static int load_snapshot(const char *dir, uint64_t gen, mc_oplog_state_t *s)
{
    char path[PATH_MAX + 64];
    mapped_t mf;
    replay_t rp;
    size_t valid = 0;
    mc_oplog_decode_t dr;

    if (replay_open(dir, "snapshot", gen, s, &rp, path, sizeof(path), &mf) != 0)
        return -1;
    dr = mc_oplog_scan(mf.data, mf.len, replay_cb, &rp, &valid);
    unmap_file(&mf);
    if (dr != MC_OPLOG_DECODED) {
        rp.bad = 1;
        rp.why = (dr == MC_OPLOG_TRUNCATED) ? "it is truncated" : "a record fails its checksum";
    } else if (!rp.bad && (!rp.ended || (valid != mf.len))) {
        rp.bad = 1;
        rp.why = "it has no end record (an interrupted write)";
    } else if (!rp.bad && ((rp.nsegs != rp.seen_segs) || (rp.nobjs != rp.seen_objs))) {
        rp.bad = 1;
        rp.why = "its record counts do not match its end record";
    }
    if (rp.bad) {
        char dst[PATH_MAX + 80];
        mc_error("restore: REFUSING corrupt snapshot %s: %s (at byte %zu); it is renamed "
                 "to .corrupt and an older snapshot is tried",
                 path, rp.why, valid);
        snprintf(dst, sizeof(dst), "%s.corrupt", path);
        if (rename(path, dst) != 0)
            mc_warn("restore: cannot rename %s: %s", path, strerror(errno));
        return -1;
    }
    mc_info("restore: snapshot %s: %" PRIu64 " segments, %" PRIu64 " objects", path, rp.nsegs,
            rp.nobjs);
    return 0;
}

/* Replay oplog.<gen> into @p s.  Returns 0 when the whole file applied,
 * 1 when it ended in a torn or corrupt record (cut there), -1 when it
 * cannot be read. */
static int replay_log(const char *dir, uint64_t gen, mc_oplog_state_t *s)
{
    char path[PATH_MAX + 64];
    mapped_t mf;
    replay_t rp;
    size_t valid = 0;
    mc_oplog_decode_t dr;

    if (replay_open(dir, "oplog", gen, s, &rp, path, sizeof(path), &mf) != 0)
        return -1;
    dr = mc_oplog_scan(mf.data, mf.len, replay_cb, &rp, &valid);
    if (rp.bad) {
        /* the records before are applied; stop as at a torn record */
        dr = MC_OPLOG_CORRUPT;
        mc_error("restore: log %s: %s", path, rp.why);
    }
    if (dr != MC_OPLOG_DECODED) {
        mc_warn("restore: log %s ends in a %s record at byte %zu of %zu: cutting it there "
                "(%" PRIu64 " records applied)",
                path, dr == MC_OPLOG_TRUNCATED ? "torn" : "corrupt", valid, mf.len,
                rp.nrec ? rp.nrec - 1 : 0);
        if (ftruncate(mf.fd, (off_t)valid) != 0 || fdatasync(mf.fd) != 0)
            mc_warn("restore: cannot cut %s: %s", path, strerror(errno));
        unmap_file(&mf);
        return 1;
    }
    unmap_file(&mf);
    mc_info("restore: log %s: %" PRIu64 " records", path, rp.nrec ? rp.nrec - 1 : 0);
    return 0;
}

typedef struct pend {
    mc_segment_t *seg;
    uint64_t offset;
    uint64_t size;
    uint32_t obj;      /* index in the object table */
    uint32_t node;     /* out: allocator node */
    int ok;            /* out */
} pend_t;

static int pend_cmp(const void *a, const void *b)
{
    const pend_t *x = a, *y = b;
    if (x->seg != y->seg)
        return ((uintptr_t)x->seg > (uintptr_t)y->seg) ? 1 : -1;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int pend_obj_cmp(const void *a, const void *b)
{
    const pend_t *x = a, *y = b;
    return (x->obj > y->obj) - (x->obj < y->obj);
}

/*
 * Take exactly the ranges of @p p[0..n) (one segment, ascending offsets)
 * in the segment's fresh allocator.  It grants from the start of its one
 * free block, so each range is taken by asking for the gap before it
 * (a filler, given back at the end) and then for the range itself.  A
 * range that overlaps the one before is refused (ok = 0).
 */
static void reserve_ranges(mc_master_t *m, mc_segment_t *seg, pend_t *p, size_t n)
{
    uint64_t at = 0;
    mc_alloc_block_t *fill = calloc(n + 1, sizeof(*fill));
    size_t nfill = 0;

    for (size_t i = 0; i < n; i++) {
        mc_alloc_block_t b;
        p[i].ok = 0;
        if ((p[i].offset < at) || (p[i].size == 0) || (p[i].offset > seg->size) ||
            (p[i].size > seg->size - p[i].offset))
            continue;
        if (p[i].offset > at) {
            if ((fill == NULL) || (mc_alloc_get(seg->alloc, p[i].offset - at, &b) != MC_OK) ||
                (b.offset != at) || (b.size != p[i].offset - at)) {
                mc_warn("restore: segment %s: cannot rebuild its allocation at %" PRIu64,
                        seg->name, at);
                break;
            }
            fill[nfill++] = b;
            at            = p[i].offset;
        }
        if ((mc_alloc_get(seg->alloc, p[i].size, &b) != MC_OK) || (b.offset != p[i].offset) ||
            (b.size != p[i].size)) {
            mc_warn("restore: segment %s: cannot rebuild its allocation at %" PRIu64, seg->name,
                    at);
            break;
        }
        p[i].node = b.node;
        p[i].ok   = 1;
        at        = p[i].offset + p[i].size;
        m->allocated_bytes += b.size;
    }
    for (size_t i = 0; i < nfill; i++)
        mc_alloc_put(seg->alloc, &fill[i]);
    free(fill);
}

/* Build the index from @p s: segments await their owners, objects keep
 * the replicas whose ranges could be taken again. */
static mc_status_t install(mc_master_t *m, mc_oplog_state_t *s)
{
    mc_durable_t *d = m->durable;
    uint64_t now    = mc_now_ms();
    uint64_t grace  = (uint64_t)m->cfg->snapshot_restore_grace_seconds * 1000u;
    mc_oplog_entry_t **objs = NULL;
    pend_t *p               = NULL;
    size_t nobj = 0, np = 0, cap = 0, dropped = 0;
    mc_hmap_iter_t it;
    mc_hnode_t *n;
    mc_status_t st = MC_INTERNAL_ERROR;

    d->quiet = 1;
    for (n = mc_hmap_first(&s->segs, &it); n != NULL; n = mc_hmap_next(&s->segs, &it)) {
        mc_oplog_entry_t *e = mc_container_of(n, mc_oplog_entry_t, node);
        mc_oplog_record_t r;
        size_t used;
        mc_client_t *c;
        mc_oplog_record_decode(e->frame, e->len, &r, &used);
        c = mc_master_client_touch(m, r.owner, now);
        if (c == NULL)
            goto out;
        c->restored    = 1;
        c->deadline_ms = now + grace;
        if (mc_master_segment_restore(m, c, &r) == NULL)
            mc_warn("restore: segment %.*s cannot be restored", (int)MC_MIN(r.name.len, 200u),
                    r.name.ptr);
        else
            d->st.restored_segments++;
    }

    objs = malloc(MC_MAX(s->objs.count, 1) * sizeof(*objs));
    if (objs == NULL)
        goto out;
    for (n = mc_hmap_first(&s->objs, &it); n != NULL; n = mc_hmap_next(&s->objs, &it)) {
        mc_oplog_entry_t *e = mc_container_of(n, mc_oplog_entry_t, node);
        mc_oplog_record_t r;
        size_t used;
        mc_oplog_record_decode(e->frame, e->len, &r, &used);
        for (uint32_t i = 0; i < r.nreplicas; i++) {
            mc_oplog_replica_t rep;
            mc_segment_t *seg;
            mc_oplog_record_replica(&r, i, &rep);
            seg = mc_master_segment_find(m, rep.seg);
            if (seg == NULL)
                continue; /* its segment was unmounted: the replica went with it */
            if (np == cap) {
                size_t nc = cap ? cap * 2 : 1024;
                pend_t *q = realloc(p, nc * sizeof(*p));
                if (q == NULL)
                    goto out;
                p   = q;
                cap = nc;
            }
            p[np].seg    = seg;
            p[np].offset = rep.offset;
            p[np].size   = rep.size;
            p[np].obj    = (uint32_t)nobj;
            p[np].ok     = 0;
            np++;
        }
        objs[nobj++] = e;
    }
    if (np > 0)
        qsort(p, np, sizeof(*p), pend_cmp);
    for (size_t i = 0; i < np;) {
        size_t j = i;
        while ((j < np) && (p[j].seg == p[i].seg))
            j++;
        reserve_ranges(m, p[i].seg, p + i, j - i);
        i = j;
    }
    if (np > 0)
        qsort(p, np, sizeof(*p), pend_obj_cmp);
    for (size_t k = 0, i = 0; k < nobj; k++) {
        mc_replica_t *reps[MC_OPLOG_MAX_REPLICAS];
        uint32_t nr = 0;
        mc_oplog_record_t r;
        size_t used;
        mc_oplog_record_decode(objs[k]->frame, objs[k]->len, &r, &used);
        for (; (i < np) && (p[i].obj == k); i++) {
            mc_replica_t *rep;
            if (!p[i].ok)
                continue;
            rep = calloc(1, sizeof(*rep));
            if (rep == NULL)
                break;
            rep->id     = ++m->next_replica_id;
            rep->seg    = p[i].seg;
            rep->node   = p[i].node;
            rep->status = MC_REPLICA_COMPLETE;
            mc_mlist_init(&rep->link);
            reps[nr++] = rep;
            p[i].ok    = 0; /* owned by reps[] now */
        }
        /* an object whose memory is gone lives on from its DFS record or
         * its holder's disk */
        if (((nr == 0) && !r.has_dfs && !r.has_disk) ||
            (mc_master_object_restore(m, &r, reps, nr, now) == NULL)) {
            for (uint32_t q = 0; q < nr; q++) {
                mc_master_segment_release(m, reps[q]);
                free(reps[q]);
            }
            dropped++;
            continue;
        }
        d->st.restored_objects++;
    }
    /* ranges taken for replicas that found no object */
    for (size_t i = 0; i < np; i++) {
        if (p[i].ok) {
            mc_replica_t tmp;
            memset(&tmp, 0, sizeof(tmp));
            tmp.seg  = p[i].seg;
            tmp.node = p[i].node;
            mc_master_segment_release(m, &tmp);
        }
    }
    for (n = mc_hmap_first(&s->tasks, &it); n != NULL; n = mc_hmap_next(&s->tasks, &it)) {
        mc_oplog_entry_t *e = mc_container_of(n, mc_oplog_entry_t, node);
        mc_oplog_record_t r;
        size_t used;
        mc_oplog_record_decode(e->frame, e->len, &r, &used);
        if (mc_master_task_restore(m, &r, now) == 0)
            d->st.restored_tasks++;
    }
    if (d->st.restored_segments > 0)
        d->grace_deadline_ms = now + grace;
    mc_info("restore: %" PRIu64 " objects, %" PRIu64 " segments and %" PRIu64 " tasks restored "
            "(%zu objects dropped: no replica left); segments serve again as their owners "
            "remount, within %" PRIu64 " s",
            d->st.restored_objects, d->st.restored_segments, d->st.restored_tasks, dropped,
            grace / 1000u);
    st = MC_OK;
out:
    d->quiet = 0;
    free(objs);
    free(p);
    return st;
}

/* Fold the newest valid snapshot and the logs after it into @p s.
 * Returns 1 when the state is usable, 0 when the master must start empty. */
static int restore_state(mc_durable_t *d, const gen_list_t *g, mc_oplog_state_t *s)
{
    uint64_t base = 0;
    int have      = 0;

    for (uint32_t i = g->nsnap; i-- > 0;) {
        mc_oplog_state_clear(s);
        if (load_snapshot(d->dir, g->snap[i], s) == 0) {
            base = g->snap[i];
            have = 1;
            break;
        }
    }
    if (!have) {
        mc_oplog_state_clear(s);
        if (g->nsnap > 0)
            mc_error("restore: no valid snapshot in %s: starting EMPTY (clients remount "
                     "their segments; their objects are gone)", d->dir);
        else if (g->nlog > 0)
            mc_error("restore: logs but no snapshot in %s: starting EMPTY", d->dir);
        else
            mc_info("restore: nothing to restore in %s", d->dir);
        return 0;
    }
    for (uint32_t i = 0, expect = 0; i < g->nlog; i++) {
        int rc;
        if (g->log[i] < base)
            continue;
        if (expect && (g->log[i] != (uint64_t)expect)) {
            mc_error("restore: log generation %" PRIx64 " is missing: later logs are not "
                     "replayed", (uint64_t)expect);
            break;
        }
        rc = replay_log(d->dir, g->log[i], s);
        if (rc != 0) {
            if (i + 1 < g->nlog)
                mc_error("restore: logs after %016" PRIx64 " are not replayed (the records "
                         "before the damage are)", g->log[i]);
            break;
        }
        expect = (uint32_t)(g->log[i] + 1);
    }
    return 1;
}

static void walk_cb(evutil_socket_t fd, short what, void *arg);
static void ship_walk_end(mc_master_t *m);

/* Is the log shipped through etcd (ship.c) rather than written to
 * --snapshot_backup_dir?  --enable_oplog (upstream's flag), or the older
 * form --enable_snapshot_restore, with --enable_ha. */
static int mc_durable_shipped(const mc_master_config_t *cfg)
{
    return cfg->enable_ha && (cfg->enable_oplog || cfg->enable_snapshot_restore);
}

/* The writer thread over @p sink and the loop's events around it. */
static mc_status_t start_writer(mc_master_t *m, mc_durable_t *d, mc_oplog_sink_t *sink)
{
    mc_master_config_t *cfg = m->cfg;

    d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->wake_fd < 0) {
        sink->close(sink);
        return MC_INTERNAL_ERROR;
    }
    d->w = mc_oplog_writer_start(sink, d->wake_fd);
    if (d->w == NULL)
        return MC_INTERNAL_ERROR;
    d->wake_ev = event_new(m->base, d->wake_fd, EV_READ | EV_PERSIST, wake_cb, m);
    d->kick_ev = event_new(m->base, -1, 0, kick_cb, d);
    d->walk_ev = evtimer_new(m->base, walk_cb, m);
    if ((d->wake_ev == NULL) || (d->kick_ev == NULL) || (d->walk_ev == NULL) ||
        (event_priority_set(d->wake_ev, MC_MASTER_PRIO_RELEASE) != 0) ||
        (event_add(d->wake_ev, NULL) != 0))
        return MC_INTERNAL_ERROR;
    d->next_snapshot_ms = mc_now_ms() + (uint64_t)cfg->snapshot_interval_seconds * 1000u;
    if (d->ship != NULL) {
        mc_info("durability: the operation log is shipped through etcd %s (a snapshot there "
                "every %" PRId64 " s while writes come, or every %llu MiB of log)",
                mc_master_ha_endpoints(cfg), cfg->snapshot_interval_seconds,
                MC_SHIP_COMPACT_BYTES >> 20);
        return MC_OK;
    }
    retention(m);
    mc_info("durability: operation log %s/oplog.%016" PRIx64 ", a snapshot every %" PRId64
            " s, %" PRId64 " kept",
            d->dir, d->gen, cfg->snapshot_interval_seconds, cfg->snapshot_retention_count);
    return MC_OK;
}

mc_status_t mc_durable_start(mc_master_t *m)
{
    mc_master_config_t *cfg = m->cfg;
    mc_durable_t *d;
    gen_list_t *g = NULL;
    mc_oplog_state_t s;
    mc_oplog_sink_t *sink;
    uint64_t maxgen = 0;
    int restored    = 0;
    mc_status_t st  = MC_INTERNAL_ERROR;

    if (!cfg->enable_snapshot && !mc_durable_shipped(cfg))
        return MC_OK;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return MC_INTERNAL_ERROR;
    d->wake_fd = -1;
    m->durable = d;
    m->journal = &durable_journal;
    if (mc_durable_shipped(cfg)) {
        /* the log lives in etcd: standbys follow it, a new leader installs
         * it; no local directory is read or written */
        mc_ship_config_t sc = {
            .endpoints     = mc_master_ha_endpoints(cfg),
            .cluster_id    = cfg->cluster_id,
            .ttl_s         = cfg->ha_lease_ttl_sec,
            .batch_entries = (uint32_t)MC_MIN(cfg->oplog_batch_max_entries, (int64_t)UINT32_MAX),
            .poll_ms       = (uint64_t)cfg->oplog_poll_interval_ms,
            .retry_ms      = (uint64_t)cfg->batch_oplog_retry_timeout_sec * 1000u,
        };
        d->ship = mc_ship_create(&sc);
        if (d->ship == NULL)
            return MC_INVALID_PARAMS;
        return start_writer(m, d, mc_ship_sink(d->ship));
    }
    if (strlen(cfg->snapshot_backup_dir) >= sizeof(d->dir)) {
        mc_error("--snapshot_backup_dir is too long");
        return MC_INVALID_PARAMS;
    }
    strcpy(d->dir, cfg->snapshot_backup_dir);
    if ((mkdir(d->dir, 0755) != 0) && (errno != EEXIST)) {
        mc_error("cannot create --snapshot_backup_dir=%s: %s", d->dir, strerror(errno));
        return MC_INVALID_PARAMS;
    }
    g = malloc(sizeof(*g));
    if ((g == NULL) || (mc_oplog_state_init(&s) != 0)) {
        free(g);
        return MC_INTERNAL_ERROR;
    }
    if (list_dir(d->dir, g) != 0) {
        mc_error("cannot read --snapshot_backup_dir=%s: %s", d->dir, strerror(errno));
        st = MC_INVALID_PARAMS;
        goto out;
    }
    if (g->nsnap > 0)
        maxgen = g->snap[g->nsnap - 1];
    if ((g->nlog > 0) && (g->log[g->nlog - 1] > maxgen))
        maxgen = g->log[g->nlog - 1];
    if (cfg->enable_snapshot_restore) {
        uint64_t t0 = mc_now_ms();
        restored    = restore_state(d, g, &s);
        if (restored && (install(m, &s) != MC_OK)) {
            mc_error("restore: out of memory installing the restored state");
            goto out;
        }
        if (restored)
            mc_info("restore: done in %" PRIu64 " ms", mc_now_ms() - t0);
    } else if (maxgen > 0) {
        mc_info("%s holds an earlier state, but --enable_snapshot_restore is off: starting "
                "empty", d->dir);
    }
    d->gen = maxgen + 1;
    if (!restored) {
        /* later restores start here, not from older files */
        if (publish_snapshot(m, d->dir, d->gen) != 0) {
            mc_error("cannot write a snapshot in %s: %s", d->dir, strerror(errno));
            st = MC_INVALID_PARAMS;
            goto out;
        }
    }
    sink = mc_oplog_file_sink_open(d->dir, d->gen);
    if (sink == NULL) {
        mc_error("cannot create the operation log in %s: %s", d->dir, strerror(errno));
        st = MC_INVALID_PARAMS;
        goto out;
    }
    st = start_writer(m, d, sink);
out:
    mc_oplog_state_cleanup(&s);
    free(g);
    return st;
}

/* ---- snapshots at run time ------------------------------------------------------------ */

static void *snap_thread(void *arg)
{
    snap_job_t *j = arg;
    mc_buf_t b;
    int err = 0;

    mc_buf_init(&b);
    pthread_mutex_lock(&j->mu);
    for (;;) {
        mc_buf_t t;
        int end;
        while ((j->q.len == 0) && !j->end && !j->abort)
            pthread_cond_wait(&j->cv, &j->mu);
        if (j->abort)
            break;
        t    = b;
        b    = j->q;
        j->q = t;
        mc_buf_reset(&j->q);
        end = j->end && (b.len > 0 ? 0 : 1);
        pthread_mutex_unlock(&j->mu);
        if (b.oom)
            err = ENOMEM;
        else if ((b.len > 0) && (mc_oplog_write_all(j->fd, b.data, b.len) != 0))
            err = errno ? errno : EIO;
        mc_buf_reset(&b);
        b.oom = 0;
        if (!err && end) {
            if ((fsync(j->fd) != 0) || (rename(j->tmp, j->path) != 0) ||
                (mc_oplog_fsync_dir(j->dir) != 0))
                err = errno ? errno : EIO;
        }
        pthread_mutex_lock(&j->mu);
        if (err || end)
            break;
    }
    j->failed = err || j->abort;
    j->err    = err;
    j->done   = 1;
    pthread_mutex_unlock(&j->mu);
    mc_buf_cleanup(&b);
    return NULL;
}

/* Hand @p b (encoded records) to the job's thread; @p end: the last. */
static void snap_push(snap_job_t *j, mc_buf_t *b, int end)
{
    if (j->ship != NULL) {
        mc_ship_snapshot_add(j->ship, b->data, b->len);
        if (b->oom)
            mc_ship_snapshot_abort(j->ship); /* publish then has nothing to write */
        mc_buf_reset(b);
        return;
    }
    pthread_mutex_lock(&j->mu);
    mc_buf_put_bytes(&j->q, b->data, b->len);
    if (b->oom)
        j->q.oom = 1;
    j->end = end;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    mc_buf_reset(b);
}

static size_t snap_queued(snap_job_t *j)
{
    size_t n;
    pthread_mutex_lock(&j->mu);
    n = j->q.len;
    pthread_mutex_unlock(&j->mu);
    return n;
}

/* Stop the job's thread (asking it to give up when @p abort), remove its
 * temporary file if it did not finish, and free it. */
static void snap_finish(snap_job_t *j, int abort)
{
    if (j->ship != NULL) {
        if (abort)
            mc_ship_snapshot_abort(j->ship);
    } else {
        pthread_mutex_lock(&j->mu);
        if (abort)
            j->abort = 1;
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->thread, NULL);
        close(j->fd);
        if (j->failed)
            unlink(j->tmp);
    }
    mc_buf_cleanup(&j->q);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* One slice of the walk: buckets from d->walk_pos until the slice's time
 * is up; the last slice ends the snapshot. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void note_walk(mc_durable_t *d, uint64_t now)
{
    d->st.snapshots_ok++;
    d->st.last_snapshot_ms = now - d->job_start_ms;
    d->st.last_pause_us    = d->walk_max_us;
    if (d->walk_max_us > d->st.max_pause_us)
        d->st.max_pause_us = d->walk_max_us;
}

/* The walk of a snapshot for etcd is over: its records go to ship.c,
 * which publishes them once what the walk saw is durable. */
static void ship_walk_end(mc_master_t *m)
{
    mc_durable_t *d = m->durable;
    snap_job_t *j   = d->job;
    uint64_t now    = mc_now_ms();

    note_walk(d, now);
    mc_info("operation log: the index walked for a snapshot in %" PRIu64 " ms: %" PRIu64
            " objects in %" PRIu32 " slices, longest loop pause %" PRIu64 " us (%" PRIu64
            " us of it on the CPU)",
            d->st.last_snapshot_ms, d->walk_objs, d->walk_slices, d->walk_max_us,
            d->walk_max_cpu_us);
    mc_ship_snapshot_publish(d->ship, mc_oplog_writer_appended(d->w));
    snap_finish(j, 0);
    d->job              = NULL;
    d->next_snapshot_ms = now + (uint64_t)m->cfg->snapshot_interval_seconds * 1000u;
}

static void walk_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_master_t *m  = arg;
    mc_durable_t *d = m->durable;
    snap_job_t *j   = d->job;
    uint64_t t0     = mc_now_ns(), c0 = thread_cpu_ns(), us;
    struct timeval tv = {0, 0};
    mc_buf_t b;
    int end = 0;
    (void)fd;
    (void)what;

    if ((j->ship == NULL) && (snap_queued(j) > MC_SNAP_QUEUE_MAX)) {
        tv.tv_usec = 1000; /* the disk is behind: let it catch up */
        event_add(d->walk_ev, &tv);
        return;
    }
    mc_buf_init(&b);
    while (d->walk_pos < m->objects.nbuckets) {
        mc_chmap_iter_t it;
        for (mc_cnode_t *n = mc_chmap_bucket_first(&m->objects, d->walk_pos, &it); n != NULL;
             n = mc_chmap_next(&m->objects, &it)) {
            const mc_object_t *o = mc_container_of(n, mc_object_t, node);
            if (!o->complete)
                continue;
            encode_object(&b, o);
            d->walk_objs++;
        }
        d->walk_pos++;
        if (((d->walk_pos & 63) == 0) && (mc_now_ns() - t0 >= MC_SNAP_SLICE_US * 1000u))
            break;
    }
    if (d->walk_pos >= m->objects.nbuckets) {
        mc_oplog_record_t r;
        memset(&r, 0, sizeof(r));
        r.type  = MC_OPLOG_SNAP_END;
        r.nsegs = d->walk_segs;
        r.nobjs = d->walk_objs;
        mc_oplog_record_encode(&b, &r);
        end = 1;
    }
    snap_push(j, &b, end);
    mc_buf_cleanup(&b);
    us = (mc_now_ns() - t0) / 1000u;
    d->walk_slices++;
    if (us > d->walk_max_us) {
        d->walk_max_us     = us;
        d->walk_max_cpu_us = (thread_cpu_ns() - c0) / 1000u;
    }
    if (!end)
        event_add(d->walk_ev, &tv);
    else if (j->ship != NULL)
        ship_walk_end(m);
}

/* 0 when the walk started, -1 when it is to be tried again later. */
static int start_snapshot(mc_master_t *m, uint64_t now)
{
    mc_durable_t *d = m->durable;
    uint64_t gen    = d->gen + 1;
    uint64_t t0     = mc_now_ns(), us;
    snap_job_t *j;
    mc_oplog_record_t r;
    mc_buf_t b;
    struct timeval tv = {0, 0};

    /* for etcd: the log keys whose rounds end before the walk are what
     * the snapshot replaces */
    if ((d->ship != NULL) &&
        (mc_ship_snapshot_begin(d->ship, mc_oplog_writer_appended(d->w)) != 0))
        return -1; /* the previous one is still being written */
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        if (d->ship != NULL)
            mc_ship_snapshot_abort(d->ship);
        goto fail;
    }
    mc_buf_init(&j->q);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->fd = -1;
    if (d->ship != NULL) {
        /* no file, no rotation, no thread: the records stay in j->q */
        j->ship = d->ship;
        gen     = 0;
        goto walk;
    }
    strcpy(j->dir, d->dir);
    j->gen = gen;
    mc_oplog_path(j->path, sizeof(j->path), d->dir, "snapshot", gen);
    snprintf(j->tmp, sizeof(j->tmp), "%s.tmp", j->path);
    j->fd = open(j->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (j->fd < 0)
        goto fail;
    /* everything appended so far belongs to the old log; the walk starts
     * now, in this loop turn */
    if (mc_oplog_writer_rotate(d->w, gen) != 0) {
        /* the previous rotation is not written yet: next tick */
        close(j->fd);
        unlink(j->tmp);
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
        free(j);
        return -1;
    }
    if (pthread_create(&j->thread, NULL, snap_thread, j) != 0) {
        /* the log rotated anyway: a generation without a snapshot is fine */
        close(j->fd);
        unlink(j->tmp);
        d->gen = gen;
        goto fail;
    }
    d->gen = gen;
walk:
    d->next_snapshot_ms = now + (uint64_t)m->cfg->snapshot_interval_seconds * 1000u;
    mc_buf_init(&b);
    memset(&r, 0, sizeof(r));
    r.type    = MC_OPLOG_SNAP_BEGIN;
    r.gen     = gen;
    r.wall_ms = mc_wall_ms();
    mc_oplog_record_encode(&b, &r);
    for (uint32_t i = 0; i < m->nseg; i++)
        encode_segment(&b, m->segv[i]);
    {
        mc_hmap_iter_t it;
        for (mc_hnode_t *n = mc_hmap_first(&m->tasks, &it); n != NULL;
             n = mc_hmap_next(&m->tasks, &it))
            encode_task(&b, mc_container_of(n, mc_task_t, node));
    }
    d->walk_segs = m->nseg; /* the count SNAP_END carries */
    snap_push(j, &b, 0);
    mc_buf_cleanup(&b);
    d->job          = j;
    d->job_start_ms = now;
    d->walk_pos     = 0;
    d->walk_objs    = 0;
    d->walk_slices  = 0;
    us              = (mc_now_ns() - t0) / 1000u;
    d->walk_max_us  = us;
    d->walk_max_cpu_us = us;
    event_add(d->walk_ev, &tv);
    return 0;
fail:
    mc_error("snapshot %016" PRIx64 ": cannot start: %s (the log keeps growing until the next "
             "try)", gen, strerror(errno));
    if (j != NULL) {
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
    }
    free(j);
    d->st.snapshots_failed++;
    d->next_snapshot_ms = now + (uint64_t)m->cfg->snapshot_interval_seconds * 1000u;
    return 0;
}

static void reap_snapshot(mc_master_t *m, uint64_t now)
{
    mc_durable_t *d = m->durable;
    snap_job_t *j   = d->job;
    int done, failed, err;

    pthread_mutex_lock(&j->mu);
    done   = j->done;
    failed = j->failed;
    err    = j->err;
    pthread_mutex_unlock(&j->mu);
    if (!done) {
        if (now - d->job_start_ms <= (uint64_t)m->cfg->snapshot_child_timeout_seconds * 1000u)
            return;
        mc_error("snapshot %016" PRIx64 " ran past --snapshot_child_timeout_seconds: giving up",
                 j->gen);
        event_del(d->walk_ev);
        failed = 1;
    }
    if (failed) {
        mc_error("snapshot %016" PRIx64 " failed%s%s; the previous snapshot and the logs since "
                 "still hold the state",
                 j->gen, err ? ": " : "", err ? strerror(err) : "");
        d->st.snapshots_failed++;
    } else {
        note_walk(d, now);
        mc_info("snapshot %016" PRIx64 " written in %" PRIu64 " ms: %" PRIu64 " objects in %"
                PRIu32 " slices, longest loop pause %" PRIu64 " us (%" PRIu64 " us of it on "
                "the CPU)",
                j->gen, d->st.last_snapshot_ms, d->walk_objs, d->walk_slices, d->walk_max_us,
                d->walk_max_cpu_us);
    }
    snap_finish(j, !done);
    d->job = NULL;
    if (!failed && (d->ship == NULL))
        retention(m);
    d->next_snapshot_ms = now + (uint64_t)m->cfg->snapshot_interval_seconds * 1000u;
}

/* The end of the grace period: restored segments whose owners did not
 * remount them go, and their objects with them (logged as usual). */
static void end_grace(mc_master_t *m)
{
    uint32_t i = 0, gone = 0;
    while (i < m->nseg) {
        mc_segment_t *seg = m->segv[i];
        if (seg->state != MC_SEG_AWAITING) {
            i++;
            continue;
        }
        mc_warn("restore: segment %s was not remounted within "
                "--snapshot_restore_grace_seconds: dropping it and its replicas", seg->name);
        mc_master_segment_unmount(m, seg); /* moves the last segment into slot i */
        gone++;
    }
    if (gone == 0)
        mc_info("restore: grace period over, no restored segment left awaiting its owner");
}

void mc_durable_tick(mc_master_t *m, uint64_t now_ms)
{
    mc_durable_t *d = m->durable;
    if (d == NULL)
        return;
    if ((d->grace_deadline_ms != 0) && (now_ms >= d->grace_deadline_ms)) {
        d->grace_deadline_ms = 0;
        end_grace(m);
    }
    if (d->job != NULL) {
        reap_snapshot(m, now_ms); /* a walk for etcd ends in walk_cb: only its timeout */
    } else if (d->ship != NULL) {
        uint64_t rounds, records, bytes;
        mc_oplog_writer_stats(d->w, &rounds, &records, &bytes);
        /* the leader, while writes come: every --snapshot_interval_seconds,
         * sooner after MC_SHIP_COMPACT_BYTES of log */
        if (mc_ship_leading(d->ship) && (bytes > d->log_bytes_at_rotation) &&
            ((now_ms >= d->next_snapshot_ms) ||
             (bytes - d->log_bytes_at_rotation >= MC_SHIP_COMPACT_BYTES)) &&
            (start_snapshot(m, now_ms) == 0))
            d->log_bytes_at_rotation = bytes;
    } else {
        uint64_t rounds, records, bytes;
        mc_oplog_writer_stats(d->w, &rounds, &records, &bytes);
        /* a busy master compacts its log before the interval is up */
        if ((now_ms >= d->next_snapshot_ms) ||
            (bytes - d->log_bytes_at_rotation >= MC_SNAP_LOG_BYTES)) {
            d->log_bytes_at_rotation = bytes;
            (void)start_snapshot(m, now_ms);
        }
    }
}

void mc_durable_drain(mc_master_t *m)
{
    mc_durable_t *d = m->durable;
    uint64_t want, end = mc_now_ms() + 10000;

    if ((d == NULL) || (d->w == NULL))
        return;
    want = mc_oplog_writer_appended(d->w);
    mc_oplog_writer_kick(d->w);
    while ((mc_oplog_writer_durable(d->w) < want) && !mc_oplog_writer_failed(d->w) &&
           (mc_now_ms() < end)) {
        struct pollfd p = {d->wake_fd, POLLIN, 0};
        uint64_t v;
        if ((poll(&p, 1, 100) > 0) && (read(d->wake_fd, &v, sizeof(v)) < 0))
            mc_debug("operation log: wake read: %s", strerror(errno));
    }
    d->durable_seen = mc_oplog_writer_durable(d->w);
    mc_master_rpc_release(m, d->durable_seen);
}

void mc_durable_stop(mc_master_t *m)
{
    mc_durable_t *d = m->durable;
    if (d == NULL)
        return;
    if (d->job != NULL) {
        /* a half-written snapshot is only a .tmp: the logs hold the state */
        event_del(d->walk_ev);
        snap_finish(d->job, 1);
        d->job = NULL;
    }
    mc_oplog_writer_stop(d->w);
    mc_ship_destroy(d->ship);
    if (d->walk_ev != NULL)
        event_free(d->walk_ev);
    if (d->wake_ev != NULL)
        event_free(d->wake_ev);
    if (d->kick_ev != NULL)
        event_free(d->kick_ev);
    if (d->wake_fd >= 0)
        close(d->wake_fd);
    free(d);
    m->journal = NULL;
    m->durable = NULL;
}

mc_ship_t *mc_durable_ship(mc_master_t *m)
{
    return (m->durable != NULL) ? m->durable->ship : NULL;
}

mc_status_t mc_durable_ship_install(mc_master_t *m)
{
    mc_durable_t *d = m->durable;
    uint64_t t0     = mc_now_ms();
    mc_status_t st;
    if (!mc_ship_takeover_ok(d->ship))
        return MC_INTERNAL_ERROR; /* never serve a log not read to its end */
    st = install(m, mc_ship_state(d->ship));
    if (st == MC_OK)
        mc_info("takeover: index installed from the shipped log in %" PRIu64 " ms",
                mc_now_ms() - t0);
    mc_ship_installed(d->ship);
    return st;
}

int mc_durable_get_stats(mc_master_t *m, mc_durable_stats_t *st)
{
    mc_durable_t *d = m->durable;
    if (d == NULL)
        return -1;
    *st = d->st;
    if (d->w != NULL)
        mc_oplog_writer_stats(d->w, &st->log_rounds, &st->log_records, &st->log_bytes);
    return 0;
}

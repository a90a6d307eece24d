/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Operation log records, the replay state and the group-commit writer
 * (oplog.h).
 *
 * The writer thread: the event loop encodes records into `pending` under
 * the mutex and, once per loop turn (mc_oplog_writer_kick), signals the
 * thread.  The thread swaps `pending` for an empty buffer, writes it with
 * one append and one sync, publishes the new durable sequence number and
 * writes to the wake fd; whatever the loop appended meanwhile goes in the
 * next round.  So the loop never waits for the disk, and one sync covers
 * every record of the requests that arrived while the previous one ran.
 *
 * Owns: the operation log's record codec, its replay state and the
 *   group-commit writer.
 * May call: oplog.h and libmooncake's common/ only: no master type, so
 *   tests and the fuzzer build it alone.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "oplog.h"

/* ---- codec ------------------------------------------------------------------ */

size_t mc_oplog_frame_begin(mc_buf_t *out, uint8_t type)
{
    size_t at = out->len;
    uint8_t hdr[MC_OPLOG_FRAME_HEADER] = {0};
    hdr[8] = type;
    mc_buf_put_bytes(out, hdr, sizeof(hdr));
    return at;
}

void mc_oplog_frame_end(mc_buf_t *out, size_t at)
{
    uint8_t *f;
    size_t plen;

    if (out->oom)
        return;
    f    = out->data + at;
    plen = out->len - at - MC_OPLOG_FRAME_HEADER;
    mc_store_le32(f, (uint32_t)plen);
    mc_store_le32(f + 4, mc_crc32c(0, f + 8, plen + 1));
}

static void put_uuid(mc_buf_t *b, mc_uuid_t u)
{
    mc_buf_put_u64(b, u.hi);
    mc_buf_put_u64(b, u.lo);
}

void mc_oplog_record_encode(mc_buf_t *out, const mc_oplog_record_t *r)
{
    size_t at = mc_oplog_frame_begin(out, r->type);

    switch (r->type) {
    case MC_OPLOG_LOG_BEGIN:
        mc_buf_put_u64(out, r->gen);
        break;
    case MC_OPLOG_SNAP_BEGIN:
        mc_buf_put_u64(out, r->gen);
        mc_buf_put_u64(out, r->wall_ms);
        break;
    case MC_OPLOG_SNAP_END:
        mc_buf_put_u64(out, r->nsegs);
        mc_buf_put_u64(out, r->nobjs);
        break;
    case MC_OPLOG_SEG_MOUNT:
        put_uuid(out, r->id);
        put_uuid(out, r->owner);
        mc_buf_put_str(out, r->name);
        mc_buf_put_str(out, r->protocol);
        mc_buf_put_u64(out, r->base);
        mc_buf_put_u64(out, r->size);
        break;
    case MC_OPLOG_SEG_UNMOUNT:
        put_uuid(out, r->id);
        break;
    case MC_OPLOG_OBJ_SET:
        mc_buf_put_str(out, r->tenant);
        mc_buf_put_str(out, r->key);
        mc_buf_put_u64(out, r->size);
        put_uuid(out, r->owner);
        mc_buf_put_u8(out, r->hard_pin);
        mc_buf_put_u64(out, r->soft_pin_ttl_ms);
        mc_buf_put_u8(out, r->has_group);
        if (r->has_group)
            mc_buf_put_str(out, r->group_id);
        mc_buf_put_u32(out, r->nreplicas);
        for (uint32_t i = 0; i < r->nreplicas; i++) {
            put_uuid(out, r->replicas[i].seg);
            mc_buf_put_u64(out, r->replicas[i].offset);
            mc_buf_put_u64(out, r->replicas[i].size);
        }
        if (r->has_disk)
            mc_oplog_put_disk_tail(out, r->disk_holder, r->disk_segment, r->disk_path,
                                   r->disk_offset, r->disk_length, r->disk_crc);
        if (r->has_dfs)
            mc_oplog_put_dfs_tail(out, r->dfs_shard, r->dfs_offset, r->dfs_span,
                                  r->dfs_replica_num);
        break;
    case MC_OPLOG_OBJ_DEL:
        mc_buf_put_str(out, r->tenant);
        mc_buf_put_str(out, r->key);
        break;
    case MC_OPLOG_TASK_SET:
        put_uuid(out, r->id);
        put_uuid(out, r->owner);
        mc_buf_put_u8(out, r->task_type);
        mc_buf_put_u8(out, r->status);
        mc_buf_put_u64(out, r->created_ms);
        mc_buf_put_u64(out, r->updated_ms);
        mc_buf_put_str(out, r->tenant);
        mc_buf_put_str(out, r->key);
        mc_buf_put_str(out, r->name);
        mc_buf_put_u8(out, r->has_message);
        if (r->has_message)
            mc_buf_put_str(out, r->message);
        mc_buf_put_u32(out, r->ntargets);
        for (uint32_t i = 0; i < r->ntargets; i++)
            mc_buf_put_str(out, r->targets[i]);
        break;
    case MC_OPLOG_TASK_DEL:
        put_uuid(out, r->id);
        break;
    default:
        break;
    }
    mc_oplog_frame_end(out, at);
}

static mc_uuid_t get_uuid(mc_rbuf_t *rb)
{
    mc_uuid_t u;
    u.hi = mc_rbuf_get_u64(rb);
    u.lo = mc_rbuf_get_u64(rb);
    return u;
}

#define MC_OPLOG_REPLICA_BYTES 32u

mc_oplog_decode_t mc_oplog_record_decode(const uint8_t *p, size_t n, mc_oplog_record_t *r,
                                         size_t *used)
{
    uint32_t plen;
    mc_rbuf_t rb;

    memset(r, 0, sizeof(*r));
    if (n < MC_OPLOG_FRAME_HEADER)
        return MC_OPLOG_TRUNCATED;
    plen = mc_load_le32(p);
    if (plen > MC_OPLOG_MAX_PAYLOAD)
        return MC_OPLOG_CORRUPT;
    if (n - MC_OPLOG_FRAME_HEADER < plen)
        return MC_OPLOG_TRUNCATED;
    if (mc_crc32c(0, p + 8, (size_t)plen + 1) != mc_load_le32(p + 4))
        return MC_OPLOG_CORRUPT;
    r->type      = p[8];
    r->frame     = p;
    r->frame_len = MC_OPLOG_FRAME_HEADER + (size_t)plen;
    mc_rbuf_init(&rb, p + MC_OPLOG_FRAME_HEADER, plen);

    switch (r->type) {
    case MC_OPLOG_LOG_BEGIN:
        r->gen = mc_rbuf_get_u64(&rb);
        break;
    case MC_OPLOG_SNAP_BEGIN:
        r->gen     = mc_rbuf_get_u64(&rb);
        r->wall_ms = mc_rbuf_get_u64(&rb);
        break;
    case MC_OPLOG_SNAP_END:
        r->nsegs = mc_rbuf_get_u64(&rb);
        r->nobjs = mc_rbuf_get_u64(&rb);
        break;
    case MC_OPLOG_SEG_MOUNT:
        r->id       = get_uuid(&rb);
        r->owner    = get_uuid(&rb);
        r->name     = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->protocol = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->base     = mc_rbuf_get_u64(&rb);
        r->size     = mc_rbuf_get_u64(&rb);
        break;
    case MC_OPLOG_SEG_UNMOUNT:
        r->id = get_uuid(&rb);
        break;
    case MC_OPLOG_OBJ_SET:
        r->tenant          = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->key             = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->size            = mc_rbuf_get_u64(&rb);
        r->owner           = get_uuid(&rb);
        r->hard_pin        = mc_rbuf_get_u8(&rb);
        r->soft_pin_ttl_ms = mc_rbuf_get_u64(&rb);
        r->has_group       = mc_rbuf_get_u8(&rb);
        if (r->has_group)
            r->group_id = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->nreplicas = mc_rbuf_get_u32(&rb);
        if (rb.err || (r->nreplicas > MC_OPLOG_MAX_REPLICAS) || (r->hard_pin > 1) ||
            (r->has_group > 1))
            return MC_OPLOG_CORRUPT;
        r->raw_replicas = mc_rbuf_get_bytes(&rb, (size_t)r->nreplicas * MC_OPLOG_REPLICA_BYTES);
        while (!rb.err && (rb.left > 0)) {
            /* the tail: tagged sections, only tags this build knows, each
             * at most once */
            uint8_t tag = mc_rbuf_get_u8(&rb);
            if ((tag == MC_OPLOG_OBJ_TAIL_DISK) && !r->has_disk) {
                r->has_disk     = 1;
                r->disk_holder  = get_uuid(&rb);
                r->disk_segment = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
                r->disk_path    = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
                r->disk_offset  = mc_rbuf_get_u64(&rb);
                r->disk_length  = mc_rbuf_get_u64(&rb);
                r->disk_crc     = mc_rbuf_get_u32(&rb);
            } else if ((tag == MC_OPLOG_OBJ_TAIL_DFS) && !r->has_dfs) {
                r->has_dfs         = 1;
                r->dfs_shard       = mc_rbuf_get_u32(&rb);
                r->dfs_offset      = mc_rbuf_get_u64(&rb);
                r->dfs_span        = mc_rbuf_get_u64(&rb);
                r->dfs_replica_num = mc_rbuf_get_u32(&rb);
            } else {
                return MC_OPLOG_CORRUPT;
            }
        }
        break;
    case MC_OPLOG_OBJ_DEL:
        r->tenant = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->key    = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        break;
    case MC_OPLOG_TASK_SET:
        r->id          = get_uuid(&rb);
        r->owner       = get_uuid(&rb);
        r->task_type   = mc_rbuf_get_u8(&rb);
        r->status      = mc_rbuf_get_u8(&rb);
        r->created_ms  = mc_rbuf_get_u64(&rb);
        r->updated_ms  = mc_rbuf_get_u64(&rb);
        r->tenant      = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->key         = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->name        = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->has_message = mc_rbuf_get_u8(&rb);
        if (r->has_message)
            r->message = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        r->ntargets = mc_rbuf_get_u32(&rb);
        if (rb.err || (r->has_message > 1) || (r->ntargets > MC_OPLOG_MAX_TARGETS))
            return MC_OPLOG_CORRUPT;
        r->raw_targets = rb.p;
        for (uint32_t i = 0; (i < r->ntargets) && !rb.err; i++)
            (void)mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
        break;
    case MC_OPLOG_TASK_DEL:
        r->id = get_uuid(&rb);
        break;
    default:
        return MC_OPLOG_CORRUPT;
    }
    /* a valid CRC over fields that do not parse, or bytes left over, is
     * a writer bug or a forged frame: refuse it all the same */
    if (rb.err || (rb.left != 0))
        return MC_OPLOG_CORRUPT;
    *used = r->frame_len;
    return MC_OPLOG_DECODED;
}

void mc_oplog_put_disk_tail(mc_buf_t *out, mc_uuid_t holder, mc_str_t segment, mc_str_t path,
                            uint64_t offset, uint64_t length, uint32_t crc)
{
    mc_buf_put_u8(out, MC_OPLOG_OBJ_TAIL_DISK);
    put_uuid(out, holder);
    mc_buf_put_str(out, segment);
    mc_buf_put_str(out, path);
    mc_buf_put_u64(out, offset);
    mc_buf_put_u64(out, length);
    mc_buf_put_u32(out, crc);
}

void mc_oplog_put_dfs_tail(mc_buf_t *out, uint32_t shard, uint64_t offset, uint64_t span,
                           uint32_t replica_num)
{
    mc_buf_put_u8(out, MC_OPLOG_OBJ_TAIL_DFS);
    mc_buf_put_u32(out, shard);
    mc_buf_put_u64(out, offset);
    mc_buf_put_u64(out, span);
    mc_buf_put_u32(out, replica_num);
}

void mc_oplog_record_replica(const mc_oplog_record_t *r, uint32_t i, mc_oplog_replica_t *out)
{
    const uint8_t *p = r->raw_replicas + (size_t)i * MC_OPLOG_REPLICA_BYTES;
    out->seg.hi = mc_load_le64(p);
    out->seg.lo = mc_load_le64(p + 8);
    out->offset = mc_load_le64(p + 16);
    out->size   = mc_load_le64(p + 24);
}

void mc_oplog_record_targets(const mc_oplog_record_t *r, mc_str_t *out)
{
    mc_rbuf_t rb;
    /* the targets were checked at decode; they run to the end of the frame */
    mc_rbuf_init(&rb, r->raw_targets, (size_t)(r->frame + r->frame_len - r->raw_targets));
    for (uint32_t i = 0; i < r->ntargets; i++)
        out[i] = mc_rbuf_get_str(&rb, MC_OPLOG_MAX_STR);
}

mc_oplog_decode_t mc_oplog_scan(const uint8_t *data, size_t len, mc_oplog_scan_cb cb, void *arg,
                                size_t *valid_p)
{
    size_t off = 0;

    *valid_p = 0;
    while (off < len) {
        mc_oplog_record_t r;
        size_t used = 0;
        mc_oplog_decode_t d = mc_oplog_record_decode(data + off, len - off, &r, &used);
        if (d != MC_OPLOG_DECODED)
            return d;
        off += used;
        *valid_p = off;
        if ((cb != NULL) && (cb(arg, &r) != 0))
            break;
    }
    return MC_OPLOG_DECODED;
}

/* ---- replay state ------------------------------------------------------------- */

typedef struct key_lookup {
    mc_str_t tenant;
    mc_str_t key;
} key_lookup_t;

static uint64_t key_hash(mc_str_t tenant, mc_str_t key)
{
    return mc_hash_bytes(key.ptr, key.len, mc_hash_bytes(tenant.ptr, tenant.len, 7));
}

static uint64_t id_hash(mc_uuid_t id)
{
    uint8_t b[16];
    mc_store_le64(b, id.hi);
    mc_store_le64(b + 8, id.lo);
    return mc_hash_bytes(b, sizeof(b), 0);
}

/* Entries hold frames that decoded once, so they decode again. */
static void entry_decode(const mc_oplog_entry_t *e, mc_oplog_record_t *r)
{
    size_t used;
    (void)mc_oplog_record_decode(e->frame, e->len, r, &used);
}

static int obj_entry_eq(const mc_hnode_t *n, const void *k)
{
    const key_lookup_t *l = k;
    mc_oplog_record_t r;
    entry_decode(mc_container_of(n, mc_oplog_entry_t, node), &r);
    return mc_str_eq(r.tenant, l->tenant) && mc_str_eq(r.key, l->key);
}

/* Segments and tasks: entries keyed by the record's id. */
static int seg_entry_eq(const mc_hnode_t *n, const void *k)
{
    mc_oplog_record_t r;
    entry_decode(mc_container_of(n, mc_oplog_entry_t, node), &r);
    return mc_uuid_eq(r.id, *(const mc_uuid_t *)k);
}

int mc_oplog_state_init(mc_oplog_state_t *s)
{
    memset(s, 0, sizeof(*s));
    mc_slab_init(&s->slab);
    if (mc_hmap_init(&s->objs, 1024) != 0)
        return -1;
    if (mc_hmap_init(&s->segs, 16) != 0) {
        mc_hmap_cleanup(&s->objs);
        return -1;
    }
    if (mc_hmap_init(&s->tasks, 16) != 0) {
        mc_hmap_cleanup(&s->objs);
        mc_hmap_cleanup(&s->segs);
        return -1;
    }
    return 0;
}

static void entry_free(mc_oplog_state_t *s, mc_oplog_entry_t *e)
{
    mc_slab_free(&s->slab, e, sizeof(*e) + e->len);
}

static void map_free_all(mc_oplog_state_t *s, mc_hmap_t *m)
{
    mc_hmap_iter_t it;
    mc_hnode_t *n = mc_hmap_first(m, &it);
    while (n != NULL) {
        mc_hnode_t *next = mc_hmap_next(m, &it);
        mc_hmap_remove(m, n);
        entry_free(s, mc_container_of(n, mc_oplog_entry_t, node));
        n = next;
    }
}

void mc_oplog_state_clear(mc_oplog_state_t *s)
{
    map_free_all(s, &s->objs);
    map_free_all(s, &s->segs);
    map_free_all(s, &s->tasks);
    /* no entry is left: the slab's blocks go back too */
    mc_slab_cleanup(&s->slab);
    s->applied = 0;
}

void mc_oplog_state_cleanup(mc_oplog_state_t *s)
{
    if (s->objs.buckets == NULL)
        return;
    mc_oplog_state_clear(s);
    mc_hmap_cleanup(&s->objs);
    mc_hmap_cleanup(&s->segs);
    mc_hmap_cleanup(&s->tasks);
}

/* Replace (or drop, when @p r is NULL) the entry of @p m found under @p old. */
static int put_entry(mc_oplog_state_t *s, mc_hmap_t *m, mc_hnode_t *old, uint64_t h,
                     const mc_oplog_record_t *r)
{
    mc_oplog_entry_t *e = NULL;

    if (r != NULL) {
        e = mc_slab_alloc(&s->slab, sizeof(*e) + r->frame_len);
        if (e == NULL)
            return -1;
        e->len = r->frame_len;
        memcpy(e->frame, r->frame, r->frame_len);
    }
    if (old != NULL) {
        mc_hmap_remove(m, old);
        entry_free(s, mc_container_of(old, mc_oplog_entry_t, node));
    }
    if (e != NULL)
        mc_hmap_insert(m, &e->node, h);
    return 0;
}

/* The map a record's state lives in and its key's hash (NULL for the
 * markers, which carry no state). */
static mc_hmap_t *record_map(mc_oplog_state_t *s, const mc_oplog_record_t *r, uint64_t *h)
{
    switch (r->type) {
    case MC_OPLOG_SEG_MOUNT:
    case MC_OPLOG_SEG_UNMOUNT:
        *h = id_hash(r->id);
        return &s->segs;
    case MC_OPLOG_TASK_SET:
    case MC_OPLOG_TASK_DEL:
        *h = id_hash(r->id);
        return &s->tasks;
    case MC_OPLOG_OBJ_SET:
    case MC_OPLOG_OBJ_DEL:
        *h = key_hash(r->tenant, r->key);
        return &s->objs;
    default:
        return NULL;
    }
}

/* mc_oplog_state_apply with the record's map and hash known. */
static int apply_hashed(mc_oplog_state_t *s, const mc_oplog_record_t *r, mc_hmap_t *m,
                        uint64_t h)
{
    mc_hnode_t *o;
    int set;

    s->applied++;
    if (m == NULL)
        return 0;
    if (m == &s->objs) {
        key_lookup_t l = {r->tenant, r->key};
        o              = mc_hmap_find(m, h, &l, obj_entry_eq);
        set            = (r->type == MC_OPLOG_OBJ_SET);
    } else {
        o   = mc_hmap_find(m, h, &r->id, seg_entry_eq);
        set = (r->type == MC_OPLOG_SEG_MOUNT) || (r->type == MC_OPLOG_TASK_SET);
    }
    return put_entry(s, m, o, h, set ? r : NULL);
}

int mc_oplog_state_apply(mc_oplog_state_t *s, const mc_oplog_record_t *r)
{
    uint64_t h   = 0;
    mc_hmap_t *m = record_map(s, r, &h);
    return apply_hashed(s, r, m, h);
}

/* Records decoded this far ahead of the one applied: their bucket slots
 * are loading meanwhile, and the chains' first entries from half-way. */
#define FOLD_AHEAD 8

typedef struct fold_slot {
    mc_oplog_record_t r;
    mc_hmap_t *map;
    uint64_t hash;
} fold_slot_t;

int mc_oplog_state_apply_all(mc_oplog_state_t *s, const uint8_t *data, size_t len)
{
    fold_slot_t ring[FOLD_AHEAD];
    size_t off = 0, n = 0, head = 0; /* n records decoded, not applied; head: the oldest */
    int bad    = 0;

    for (;;) {
        /* decode ahead: a full ring, or to the end of the data */
        while (!bad && (n < FOLD_AHEAD) && (off < len)) {
            fold_slot_t *f = &ring[(head + n) % FOLD_AHEAD];
            size_t used    = 0;
            if (mc_oplog_record_decode(data + off, len - off, &f->r, &used) != MC_OPLOG_DECODED) {
                bad = 1;
                break;
            }
            off += used;
            f->map = record_map(s, &f->r, &f->hash);
            if (f->map != NULL)
                mc_chmap_prefetch(f->map, (uint32_t)f->hash);
            n++;
        }
        if (n == 0)
            return bad ? 1 : 0;
        if (n > FOLD_AHEAD / 2) {
            /* its slot was asked for FOLD_AHEAD / 2 records ago */
            const fold_slot_t *mid = &ring[(head + FOLD_AHEAD / 2) % FOLD_AHEAD];
            const mc_cnode_t *c =
                (mid->map != NULL) ? mc_chmap_head(mid->map, (uint32_t)mid->hash) : NULL;
            if (c != NULL)
                __builtin_prefetch(c);
        }
        if (apply_hashed(s, &ring[head].r, ring[head].map, ring[head].hash) != 0)
            return -1;
        head = (head + 1) % FOLD_AHEAD;
        n--;
    }
}

/* ---- file sink ------------------------------------------------------------------ */

int mc_oplog_write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if ((n < 0) && (errno != EINTR)) {
            return -1;
        } else if (n == 0) {
            errno = EIO;
            return -1;
        }
    }
    return 0;
}

int mc_oplog_path(char *out, size_t outlen, const char *dir, const char *kind, uint64_t gen)
{
    int n = snprintf(out, outlen, "%s/%s.%016" PRIx64, dir, kind, gen);
    return ((n < 0) || ((size_t)n >= outlen)) ? -1 : 0;
}

typedef struct file_sink {
    mc_oplog_sink_t ops;
    int fd;
    char dir[4096];
} file_sink_t;

int mc_oplog_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

/* Create oplog.<gen> holding its LOG_BEGIN record, durable. */
static int open_log(file_sink_t *fs, uint64_t gen)
{
    char path[4200];
    mc_buf_t b;
    mc_oplog_record_t r;
    int fd, rc;

    if (mc_oplog_path(path, sizeof(path), fs->dir, "oplog", gen) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    memset(&r, 0, sizeof(r));
    r.type = MC_OPLOG_LOG_BEGIN;
    r.gen  = gen;
    mc_buf_init(&b);
    mc_oplog_record_encode(&b, &r);
    rc = b.oom ? -1 : mc_oplog_write_all(fd, b.data, b.len);
    mc_buf_cleanup(&b);
    if ((rc != 0) || (fdatasync(fd) != 0) || (mc_oplog_fsync_dir(fs->dir) != 0)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    fs->fd = fd;
    return 0;
}

static int fs_append(mc_oplog_sink_t *sk, const void *data, size_t len)
{
    file_sink_t *fs = (file_sink_t *)sk;
    return mc_oplog_write_all(fs->fd, data, len);
}

static int fs_sync(mc_oplog_sink_t *sk)
{
    return fdatasync(((file_sink_t *)sk)->fd);
}

static int fs_rotate(mc_oplog_sink_t *sk, uint64_t gen)
{
    file_sink_t *fs = (file_sink_t *)sk;
    int old         = fs->fd;
    if ((fdatasync(old) != 0) || (open_log(fs, gen) != 0))
        return -1;
    close(old);
    return 0;
}

static void fs_close(mc_oplog_sink_t *sk)
{
    file_sink_t *fs = (file_sink_t *)sk;
    if (fs->fd >= 0)
        close(fs->fd);
    free(fs);
}

mc_oplog_sink_t *mc_oplog_file_sink_open(const char *dir, uint64_t gen)
{
    file_sink_t *fs = calloc(1, sizeof(*fs));
    if (fs == NULL)
        return NULL;
    fs->ops.append = fs_append;
    fs->ops.sync   = fs_sync;
    fs->ops.rotate = fs_rotate;
    fs->ops.close  = fs_close;
    fs->fd         = -1;
    if (strlen(dir) >= sizeof(fs->dir)) {
        free(fs);
        errno = ENAMETOOLONG;
        return NULL;
    }
    strcpy(fs->dir, dir);
    if (open_log(fs, gen) != 0) {
        int e = errno;
        free(fs);
        errno = e;
        return NULL;
    }
    return &fs->ops;
}

/* ---- writer thread --------------------------------------------------------------- */

struct mc_oplog_writer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    mc_oplog_sink_t *sink;
    int wake_fd;
    mc_buf_t pending;        /* appended, not yet taken by the thread */
    uint64_t pending_seq;    /* seq of the last record in pending */
    uint64_t appended_seq;   /* loop thread's view (== pending_seq after end) */
    uint64_t durable_seq;    /* written under mu, atomically: read without it by peek */
    uint64_t rotate_gen;     /* 0: none asked */
    size_t rotate_at;        /* pending[0, rotate_at) still goes to the old log */
    int kicked;
    unsigned pending_recs;   /* records in pending */
    int stop;
    int failed;
    uint64_t rounds, records, bytes;
    uint64_t write_ns, sync_ns;
    /* where a round's time goes besides the sink (the stop log): from its
     * first record to the thread taking it, and from the sink reporting
     * it durable to the loop reading that */
    uint64_t first_ns, take_ns, takes;
    uint64_t done_ns, seen_ns, seens;
};

static void wake_loop(mc_oplog_writer_t *w)
{
    uint64_t one = 1;
    ssize_t n    = write(w->wake_fd, &one, sizeof(one));
    (void)n; /* a full eventfd/pipe already wakes the loop */
}

static void *writer_main(void *arg)
{
    mc_oplog_writer_t *w = arg;
    mc_buf_t batch;

    mc_buf_init(&batch);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        uint64_t seq, rot;
        size_t first;
        int rc = 0;
        mc_buf_t tmp;

        while (!w->stop && !w->kicked)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop && (w->pending.len == 0) && (w->rotate_gen == 0))
            break;
        w->kicked = 0;
        if (w->first_ns != 0) {
            w->take_ns += mc_now_ns() - w->first_ns;
            w->takes++;
            w->first_ns = 0;
        }
        tmp        = batch;
        batch      = w->pending;
        w->pending = tmp;
        mc_buf_reset(&w->pending);
        w->pending_recs = 0;
        seq           = w->pending_seq;
        rot           = w->rotate_gen;
        if (batch.oom) {
            /* a record of the round was lost to an allocation failure:
             * none of it, nor anything after it, may be reported durable */
            mc_error("operation log: out of memory appending records; nothing after this "
                     "is durable");
            w->failed = 1;
        }
        first         = rot ? w->rotate_at : batch.len;
        w->rotate_gen = 0;
        pthread_mutex_unlock(&w->mu);

        if (!w->failed && (w->sink->submit != NULL) && (rot == 0)) {
            /* pipelined: the sink reports the round durable (writer_done)
             * while the next ones are already on their way */
            uint64_t t0 = mc_now_ns();
            rc = w->sink->submit(w->sink, batch.data, batch.len, seq);
            w->write_ns += mc_now_ns() - t0;
            if (rc != 0)
                mc_error("operation log: cannot hand a round over: %s; nothing after this is "
                         "durable", strerror(errno));
            pthread_mutex_lock(&w->mu);
            if (rc != 0)
                w->failed = 1;
            w->bytes += batch.len;
            mc_buf_reset(&batch);
            if (rc != 0)
                wake_loop(w);
            continue;
        }
        if (!w->failed) {
            uint64_t t0 = mc_now_ns(), t1;
            /* what was appended before the rotation goes to the old log,
             * the rest to the new one */
            if (first > 0)
                rc = w->sink->append(w->sink, batch.data, first);
            t1 = mc_now_ns();
            if ((rc == 0) && (first > 0))
                rc = w->sink->sync(w->sink);
            w->write_ns += t1 - t0;
            w->sync_ns += mc_now_ns() - t1;
            if ((rc == 0) && (rot != 0))
                rc = w->sink->rotate(w->sink, rot);
            if ((rc == 0) && (rot != 0) && (batch.len > first)) {
                rc = w->sink->append(w->sink, batch.data + first, batch.len - first);
                if (rc == 0)
                    rc = w->sink->sync(w->sink);
            }
            if (rc != 0)
                mc_error("operation log: cannot write or sync: %s; nothing after this is "
                         "durable", strerror(errno));
        }
        pthread_mutex_lock(&w->mu);
        if (rc != 0)
            w->failed = 1;
        if (!w->failed) {
            __atomic_store_n(&w->durable_seq, seq, __ATOMIC_RELEASE);
            w->rounds++;
            w->bytes += batch.len;
        }
        if (batch.cap > (4u << 20)) {
            mc_buf_cleanup(&batch);
            mc_buf_init(&batch);
        } else {
            mc_buf_reset(&batch);
        }
        wake_loop(w);
    }
    pthread_mutex_unlock(&w->mu);
    /* a pipelined sink: what was handed over goes out before the stop */
    if ((w->sink->submit != NULL) && (w->sink->sync(w->sink) != 0))
        mc_error("operation log: rounds still in flight at the stop could not be made "
                 "durable: %s", strerror(errno));
    mc_buf_cleanup(&batch);
    return NULL;
}

/* A pipelined sink's report (any thread): rounds end in order. */
static void writer_done(void *arg, uint64_t seq, int failed)
{
    mc_oplog_writer_t *w = arg;
    pthread_mutex_lock(&w->mu);
    if (failed) {
        w->failed = 1;
    } else if (!w->failed && (seq > w->durable_seq)) {
        __atomic_store_n(&w->durable_seq, seq, __ATOMIC_RELEASE);
        w->rounds++;
        if (w->done_ns == 0)
            w->done_ns = mc_now_ns();
    }
    wake_loop(w);
    pthread_mutex_unlock(&w->mu);
}

mc_oplog_writer_t *mc_oplog_writer_start(mc_oplog_sink_t *sink, int wake_fd)
{
    mc_oplog_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        sink->close(sink);
        return NULL;
    }
    w->sink    = sink;
    w->wake_fd = wake_fd;
    if (sink->submit != NULL) {
        sink->done     = writer_done;
        sink->done_arg = w;
    }
    mc_buf_init(&w->pending);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        sink->close(sink);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

void mc_oplog_writer_stop(mc_oplog_writer_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop   = 1;
    w->kicked = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    mc_info("operation log: %" PRIu64 " records, %" PRIu64 " bytes in %" PRIu64
            " write+sync rounds (%.0f records a round; %.2f ms writing, %.2f ms syncing a round)",
            w->records, w->bytes, w->rounds,
            w->rounds ? (double)w->records / (double)w->rounds : 0.0,
            w->rounds ? (double)w->write_ns / 1e6 / (double)w->rounds : 0.0,
            w->rounds ? (double)w->sync_ns / 1e6 / (double)w->rounds : 0.0);
    if (w->sink->submit != NULL)
        mc_info("operation log: a round's first record waited %.2f ms for the log thread to "
                "take it; a durable round %.2f ms for the event loop to answer",
                (double)w->take_ns / 1e6 / (double)MC_MAX(w->takes, 1u),
                (double)w->seen_ns / 1e6 / (double)MC_MAX(w->seens, 1u));
    w->sink->close(w->sink);
    mc_buf_cleanup(&w->pending);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

mc_buf_t *mc_oplog_writer_begin(mc_oplog_writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    return &w->pending;
}

uint64_t mc_oplog_writer_end(mc_oplog_writer_t *w, unsigned nrecords)
{
    uint64_t seq;
    if (w->first_ns == 0)
        w->first_ns = mc_now_ns();
    w->pending_seq += nrecords;
    w->records += nrecords;
    seq = w->pending_seq;
    /* A pipelined sink codes a round before it sends it: a long turn's
     * records go to the thread in parts while the loop appends the rest,
     * so that after the turn's kick only its last part is left to code.
     * (A file sink syncs every round: it waits for the kick.) */
    w->pending_recs += nrecords;
    if ((w->sink->submit != NULL) && (w->pending_recs >= MC_OPLOG_EARLY_RECORDS) &&
        !w->kicked && (w->rotate_gen == 0)) {
        w->kicked = 1;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    w->appended_seq = seq;
    return seq;
}

void mc_oplog_writer_kick(mc_oplog_writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    if ((w->pending.len > 0) || (w->rotate_gen != 0)) {
        w->kicked = 1;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

int mc_oplog_writer_rotate(mc_oplog_writer_t *w, uint64_t gen)
{
    int rc = -1;
    pthread_mutex_lock(&w->mu);
    if (w->rotate_gen == 0) {
        w->rotate_gen = gen;
        w->rotate_at  = w->pending.len;
        w->kicked     = 1;
        pthread_cond_signal(&w->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

uint64_t mc_oplog_writer_appended(const mc_oplog_writer_t *w)
{
    return w->appended_seq;
}

uint64_t mc_oplog_writer_durable(mc_oplog_writer_t *w)
{
    uint64_t d;
    pthread_mutex_lock(&w->mu);
    d = w->durable_seq;
    if (w->done_ns != 0) {
        w->seen_ns += mc_now_ns() - w->done_ns;
        w->seens++;
        w->done_ns = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return d;
}

uint64_t mc_oplog_writer_durable_peek(const mc_oplog_writer_t *w)
{
    return __atomic_load_n(&w->durable_seq, __ATOMIC_ACQUIRE);
}

int mc_oplog_writer_failed(mc_oplog_writer_t *w)
{
    int f;
    pthread_mutex_lock(&w->mu);
    f = w->failed;
    pthread_mutex_unlock(&w->mu);
    return f;
}

void mc_oplog_writer_stats(mc_oplog_writer_t *w, uint64_t *rounds, uint64_t *records,
                           uint64_t *bytes)
{
    pthread_mutex_lock(&w->mu);
    *rounds  = w->rounds;
    *records = w->records;
    *bytes   = w->bytes;
    pthread_mutex_unlock(&w->mu);
}

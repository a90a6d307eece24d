/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Segment registry and replica placement (docs/protocol.md §5.3, §5.5).
 *
 * A segment is a range of some client's memory, mounted so the master can
 * hand out parts of it.  Each one gets its own offset allocator (alignment
 * 8); the master only does arithmetic on offsets and never touches the
 * memory.  Segments live in a hash map by id (mount/unmount) and in a
 * dense array m->segv (placement walks it); a segment remembers its index
 * so removal is a swap with the last entry.
 *
 * Placement follows upstream's RandomAllocationStrategy: the preferred
 * segment first when it is mounted, then a walk over segv from a random
 * start, one replica per distinct segment *name* (several segments of one
 * client share the name of its transfer engine, and two replicas in one
 * process would not survive that process).  free_ratio_first orders the
 * walk by free share instead.  prefer_alloc_in_same_node puts the
 * writer's own segments, then the other segments on its host (the part of
 * the name before its last ':'), ahead of that walk.  Best effort: fewer replicas than asked is
 * success; the caller turns zero into NO_AVAILABLE_HANDLE.
 *
 * Owns: the segment registry, each segment's allocator, and placement onto
 *   them.
 * May call: index/, the journal (../master.h: mount and unmount
 *   records), tiers/ (NoF segments).
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gen.h"
#include "common/log.h"
#include "durability/durability.h" /* the log record a restore reads */
#include "index.h"
#include "master.h"
#include "placement.h"
#include "tiers/tiers.h"

#define MC_SEGMENT_ALIGNMENT 8
#define MC_SEGMENT_MAX_NAME  1024
#define MC_SEGMENT_MAX_PROTO 64

static int seg_eq(const mc_hnode_t *node, const void *key)
{
    const mc_segment_t *s = mc_container_of(node, mc_segment_t, node);
    return mc_uuid_eq(s->id, *(const mc_uuid_t *)key);
}

static uint64_t rng_next(mc_master_t *m)
{
    /* xorshift64*: placement only needs spread, not secrecy */
    uint64_t x = m->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    m->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

mc_status_t mc_master_segments_init(mc_master_t *m)
{
    if (mc_hmap_init(&m->segments, 64) != 0)
        return MC_INTERNAL_ERROR;
    m->segv     = NULL;
    m->nseg     = 0;
    m->segv_cap = 0;
    m->rng      = mc_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ull;
    if (m->rng == 0)
        m->rng = 1;
    return MC_OK;
}

static void segment_free(mc_segment_t *seg)
{
    mc_alloc_destroy(seg->alloc);
    free(seg->name);
    free(seg->protocol);
    free(seg);
}

/* Objects are gone by now (mc_master_objects_cleanup runs first), so the
 * replica lists are not walked. */
void mc_master_segments_cleanup(mc_master_t *m)
{
    for (uint32_t i = 0; i < m->nseg; i++)
        segment_free(m->segv[i]);
    free(m->segv);
    m->segv = NULL;
    m->nseg = 0;
    mc_hmap_cleanup(&m->segments);
}

mc_segment_t *mc_master_segment_find(mc_master_t *m, mc_uuid_t id)
{
    mc_hnode_t *n = mc_hmap_find(&m->segments, mc_master_uuid_hash(id), &id, seg_eq);
    return n ? mc_container_of(n, mc_segment_t, node) : NULL;
}

static int str_has_nul(mc_str_t s)
{
    return (s.len > 0) && (memchr(s.ptr, '\0', s.len) != NULL);
}

static int str_eq_cstr(mc_str_t s, const char *c)
{
    return (strlen(c) == s.len) && ((s.len == 0) || (memcmp(c, s.ptr, s.len) == 0));
}

mc_status_t mc_master_segment_check(mc_master_t *m, mc_client_t *c, const mc_wire_segment_t *s)
{
    mc_segment_t *old;

    if (mc_uuid_is_nil(s->id) || (s->size < MC_SEGMENT_ALIGNMENT) || (s->base == 0) ||
        (s->base > UINT64_MAX - s->size) || (s->name.len == 0) ||
        (s->name.len > MC_SEGMENT_MAX_NAME) || str_has_nul(s->name) ||
        (s->protocol.len > MC_SEGMENT_MAX_PROTO) || str_has_nul(s->protocol)) {
        mc_debug("mount: malformed segment description (size %" PRIu64 ", name %" PRIu32
                 " bytes)", s->size, s->name.len);
        return MC_INVALID_PARAMS;
    }
    old = mc_master_segment_find(m, s->id);
    if (old == NULL)
        return MC_OK;
    /* Mounting the same segment again is a no-op (a retried RPC); the same
     * id with another owner or other bounds is a conflict. */
    if ((old->owner != c) || (old->base != s->base) || (old->size != s->size) ||
        !str_eq_cstr(s->name, old->name))
        return MC_SEGMENT_ALREADY_EXISTS;
    return MC_OK;
}

/*
 * A segment's name is its owner's transfer endpoint, host:port, and one
 * process serves a host:port at a time.  So when client @p c mounts a name
 * that segments of another client still carry, that client's process is
 * gone (it died and its port was taken again before its TTL ran out): the
 * replicas in those segments went with it, and a write placed there would
 * reach the new process at an address of the old one's, i.e. into memory
 * the new owner allocates for its own objects.  Unmount them now.  (Two live
 * clients can share a name only when two hosts are configured with the same
 * local_hostname, which breaks the data path anyway; the warning says so.)
 */
static void drop_stale_namesakes(mc_master_t *m, const mc_client_t *c, mc_str_t name)
{
    uint32_t i = 0;

    while (i < m->nseg) {
        mc_segment_t *old = m->segv[i];
        if ((old->owner == c) || !str_eq_cstr(name, old->name)) {
            i++;
            continue;
        }
        mc_warn("segment name %s is now mounted by another client: its previous owner is "
                "gone (or two hosts share a local_hostname); dropping the stale segment",
                old->name);
        mc_master_segment_unmount(m, old); /* moves the last segment into slot i */
    }
}

/* Create segment @p id in @p state; NULL with *st_p set on failure. */
static mc_segment_t *segment_add(mc_master_t *m, mc_client_t *c, mc_uuid_t id, mc_str_t name,
                                 mc_str_t protocol, uint64_t base, uint64_t size,
                                 mc_segment_state_t state, mc_status_t *st_p)
{
    mc_status_t st;
    mc_segment_t *seg;
    char idbuf[37];

    *st_p = MC_INTERNAL_ERROR;
    if (m->nseg == m->segv_cap) {
        uint32_t ncap = m->segv_cap ? m->segv_cap * 2 : 16;
        mc_segment_t **nv = realloc(m->segv, (size_t)ncap * sizeof(*nv));
        if (nv == NULL)
            return NULL;
        m->segv     = nv;
        m->segv_cap = ncap;
    }
    seg = calloc(1, sizeof(*seg));
    if (seg == NULL)
        return NULL;
    seg->id       = id;
    seg->owner    = c;
    seg->base     = base;
    seg->size     = size;
    seg->state    = state;
    seg->name     = mc_str_dup(name);
    seg->protocol = mc_str_dup(protocol.len ? protocol : mc_str_from_cstr("tcp"));
    mc_mlist_init(&seg->client_link);
    if ((seg->name == NULL) || (seg->protocol == NULL)) {
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    st = mc_alloc_create(size, MC_SEGMENT_ALIGNMENT, &seg->alloc);
    if (st != MC_OK) {
        mc_warn("mount: cannot manage a segment of %" PRIu64 " bytes", size);
        goto fail;
    }

    mc_hmap_insert(&m->segments, &seg->node, mc_master_uuid_hash(seg->id));
    seg->index          = m->nseg;
    m->segv[m->nseg++]  = seg;
    m->capacity_bytes  += seg->size;
    mc_mlist_insert_tail(&c->segments, &seg->client_link);
    c->nsegments++;

    mc_uuid_format(seg->id, idbuf);
    mc_info("%s segment %s name=%s base=0x%" PRIx64 " size=%" PRIu64 " protocol=%s",
            state == MC_SEG_AWAITING ? "restored (awaiting its owner)" : "mounted", idbuf,
            seg->name, seg->base, seg->size, seg->protocol);
    *st_p = MC_OK;
    return seg;

fail:
    segment_free(seg);
    *st_p = st;
    return NULL;
}

/*
 * The generation of @p seg from its owner's mount @p s: the owner's, or
 * ours when we moved it on since.  An owner that mounts again after losing
 * its master has already moved its memory to a fence of its own (common/
 * gen.h), past every read and write an earlier master placed; a segment
 * restored from the log knows no generation until then (0).
 */
void mc_master_segment_take_gen(mc_segment_t *seg, const mc_wire_segment_t *s)
{
    uint64_t g = (s->gen != 0) ? s->gen : mc_gen_of_segment(s->id.hi, s->id.lo);
    if ((seg->gen == 0) || (mc_gen_base(g) != mc_gen_base(seg->gen)) ||
        mc_gen_newer(g, seg->gen))
        seg->gen = g;
}

mc_status_t mc_master_segment_mount(mc_master_t *m, mc_client_t *c, const mc_wire_segment_t *s)
{
    mc_status_t st = mc_master_segment_check(m, c, s);
    mc_segment_t *seg;

    if (st != MC_OK)
        return st;
    seg = mc_master_segment_find(m, s->id);
    if (seg != NULL) {
        if (seg->state == MC_SEG_AWAITING) {
            /* a restored segment, remounted by its owner: it serves again */
            seg->state = MC_SEG_OK;
            mc_info("segment %s is back: remounted by its owner", seg->name);
        }
        mc_master_segment_take_gen(seg, s);
        return MC_OK;
    }
    drop_stale_namesakes(m, c, s->name);
    seg = segment_add(m, c, s->id, s->name, s->protocol, s->base, s->size, MC_SEG_OK, &st);
    if (seg != NULL) {
        mc_master_segment_take_gen(seg, s);
        mc_journal_segment(m, seg, 1);
    }
    return st;
}

mc_segment_t *mc_master_segment_restore(mc_master_t *m, mc_client_t *c,
                                        const mc_oplog_record_t *r)
{
    mc_status_t st;
    if ((r->size < MC_SEGMENT_ALIGNMENT) || (r->name.len == 0) ||
        (r->name.len > MC_SEGMENT_MAX_NAME) || (mc_master_segment_find(m, r->id) != NULL))
        return NULL;
    mc_segment_t *seg = segment_add(m, c, r->id, r->name, r->protocol, r->base, r->size,
                                    MC_SEG_AWAITING, &st);
    if (seg != NULL)
        seg->gen = 0; /* its owner's remount says where it stands */
    return seg;
}

void mc_master_segment_unmount(mc_master_t *m, mc_segment_t *seg)
{
    char idbuf[37];
    size_t dropped;

    if (seg->nof) { /* on its client's list like memory, kept apart (nof.c) */
        mc_master_nof_unmount(m, seg);
        return;
    }

    /* No allocation may land here while its replicas go. */
    seg->state = MC_SEG_UNMOUNTING;
    dropped    = mc_master_objects_drop_segment(m, seg);

    mc_hmap_remove(&m->segments, &seg->node);
    m->segv[seg->index]        = m->segv[m->nseg - 1];
    m->segv[seg->index]->index = seg->index;
    m->nseg--;
    m->capacity_bytes -= seg->size;
    mc_mlist_remove(&seg->client_link);
    if (seg->owner != NULL)
        seg->owner->nsegments--;

    mc_uuid_format(seg->id, idbuf);
    mc_info("unmounted segment %s name=%s (%zu replicas dropped)", idbuf, seg->name, dropped);
    mc_journal_segment(m, seg, 0);
    segment_free(seg);
}

/* SET_SEGMENT_DRAINING: the first half of a graceful unmount.  The segment
 * stays in segv (readers still find its replicas) but try_segment() skips
 * it; the owner sends UNMOUNT_SEGMENT when its grace period is over, or the
 * segment goes with the client when that expires.  Idempotent. */
int32_t mc_master_set_segment_draining(mc_req_ctx_t *x,
                                       const mc_wire_set_segment_draining_req_t *req)
{
    mc_segment_t *seg = mc_master_segment_find(x->m, req->segment_id);
    char idbuf[37];

    if (seg == NULL)
        return MC_SEGMENT_NOT_FOUND;
    if ((seg->owner == NULL) || !mc_uuid_eq(seg->owner->id, req->client_id))
        return MC_ILLEGAL_CLIENT;
    mc_master_client_touch(x->m, req->client_id, x->now_ms);
    if (seg->state == MC_SEG_OK) {
        seg->state = MC_SEG_DRAINING;
        mc_uuid_format(seg->id, idbuf);
        mc_info("segment %s name=%s is draining", idbuf, seg->name);
    }
    return MC_OK;
}

mc_alloc_block_t mc_master_replica_block(const mc_replica_t *r)
{
    mc_alloc_block_t b;
    if (mc_alloc_lookup(r->seg->alloc, r->node, &b) != MC_OK) {
        /* a replica owns its node until segment_release: a bug */
        mc_error("segment %s: replica %" PRIu64 " has no block (node %" PRIu32 ")",
                 r->seg->name, r->id, r->node);
        memset(&b, 0, sizeof(b));
    }
    return b;
}

void mc_master_segment_release(mc_master_t *m, mc_replica_t *r)
{
    mc_segment_t *seg  = r->seg;
    mc_alloc_block_t b = mc_master_replica_block(r);
    if ((b.size == 0) || (mc_alloc_put(seg->alloc, &b) != MC_OK))
        mc_error("segment %s: allocator refused block offset=%" PRIu64 " size=%" PRIu64,
                 seg->name, b.offset, b.size);
    else if (seg->nof)
        mc_master_nof_release(m, b);
    else
        m->allocated_bytes -= b.size;
}

/* What mc_master_segment_try() asks of a segment besides room. */
static int seg_writable(mc_master_t *m, const mc_segment_t *seg, uint64_t now_ms)
{
    if (seg->state != MC_SEG_OK)
        return 0;
    /* an owner that stopped pinging is likely dead: do not write there */
    return (seg->owner == NULL) || !mc_master_client_suspect(m, seg->owner, now_ms);
}

int mc_master_any_writable(mc_master_t *m, mc_segment_t *const *v, uint32_t n, uint64_t now_ms)
{
    for (uint32_t i = 0; i < n; i++) {
        if (seg_writable(m, v[i], now_ms))
            return 1;
    }
    return 0;
}

/* One allocation on @p seg, or NULL when it does not fit. */
static mc_replica_t *try_segment(mc_master_t *m, mc_segment_t *seg, uint64_t size)
{
    return mc_master_segment_try(m, seg, size, mc_now_ms());
}

mc_replica_t *mc_master_segment_try(mc_master_t *m, mc_segment_t *seg, uint64_t size,
                                    uint64_t now_ms)
{
    mc_alloc_block_t block;
    mc_replica_t *r;

    if (!seg_writable(m, seg, now_ms))
        return NULL;
    if (mc_alloc_get(seg->alloc, size, &block) != MC_OK)
        return NULL;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        mc_alloc_put(seg->alloc, &block);
        return NULL;
    }
    if (seg->gen_dirty) {
        /* memory of this segment was freed under a reader's lease, or while
         * its writer may still be writing: a later generation first
         * (master.h) */
        seg->gen       = (seg->gen_dirty == MC_SEG_GEN_WRITER)
                             ? mc_gen_fence_after(seg->gen, MC_GEN_FENCE_STEP)
                             : mc_gen_next(seg->gen);
        seg->gen_dirty = 0;
    }
    r->id     = ++m->next_replica_id;
    r->status = MC_REPLICA_PROCESSING;
    r->seg    = seg;
    r->node   = block.node;
    mc_mlist_init(&r->link);
    if (seg->nof)
        m->nof_allocated_bytes += block.size;
    else
        m->allocated_bytes += block.size;
    return r;
}

static int name_taken(mc_replica_t **out, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(out[i]->seg->name, name) == 0)
            return 1;
    }
    return 0;
}

typedef struct seg_rank {
    double free_ratio;
    mc_segment_t *seg;
} seg_rank_t;

static int rank_cmp(const void *a, const void *b)
{
    double fa = ((const seg_rank_t *)a)->free_ratio;
    double fb = ((const seg_rank_t *)b)->free_ratio;
    return (fa < fb) - (fa > fb); /* descending */
}

mc_str_t mc_master_segment_host(const char *name)
{
    const char *colon = strrchr(name, ':');
    mc_str_t h = {name, colon ? (uint32_t)(colon - name) : (uint32_t)strlen(name)};
    return h;
}

uint32_t mc_master_segments_allocate(mc_master_t *m, uint64_t size, uint32_t want,
                                     mc_str_t preferred, const mc_client_t *local,
                                     mc_replica_t **out)
{
    mc_str_t local_host = {"", 0};
    uint32_t n = 0;
    mc_replica_t *r;

    if ((m->nseg == 0) || (want == 0) || (size == 0))
        return 0;
    if (want > m->nseg)
        want = m->nseg;

    if (preferred.len > 0) {
        for (uint32_t i = 0; (i < m->nseg) && (n == 0); i++) {
            mc_segment_t *seg = m->segv[i];
            if (str_eq_cstr(preferred, seg->name) && ((r = try_segment(m, seg, size)) != NULL))
                out[n++] = r;
        }
    }

    /* prefer_alloc_in_same_node: the writer's own segments first (no
     * network at all), then the others on its host, from a random start so
     * one node's segments share the load. */
    if ((local != NULL) && !mc_mlist_empty(&local->segments)) {
        const mc_mlist_t *pos;
        for (pos = local->segments.next; (pos != &local->segments) && (n < want);
             pos = pos->next) {
            mc_segment_t *seg = mc_container_of(pos, mc_segment_t, client_link);
            if (seg->nof)
                continue; /* the NoF pool is placed apart (nof.c) */
            if (!name_taken(out, n, seg->name) && ((r = try_segment(m, seg, size)) != NULL))
                out[n++] = r;
        }
        local_host = mc_master_segment_host(
            mc_container_of(local->segments.next, mc_segment_t, client_link)->name);
    }
    if ((local_host.len > 0) && (n < want)) {
        uint32_t start = (uint32_t)(rng_next(m) % m->nseg);
        for (uint32_t k = 0; (k < m->nseg) && (n < want); k++) {
            mc_segment_t *seg = m->segv[(start + k) % m->nseg];
            if (mc_str_eq(mc_master_segment_host(seg->name), local_host) &&
                !name_taken(out, n, seg->name) && ((r = try_segment(m, seg, size)) != NULL))
                out[n++] = r;
        }
    }

    if (m->alloc_strategy == MC_ALLOC_FREE_RATIO_FIRST) {
        seg_rank_t *rank = malloc((size_t)m->nseg * sizeof(*rank));
        if (rank != NULL) {
            for (uint32_t i = 0; i < m->nseg; i++) {
                mc_alloc_stats_t st;
                mc_alloc_get_stats(m->segv[i]->alloc, &st);
                rank[i].seg        = m->segv[i];
                rank[i].free_ratio = st.capacity
                                         ? (double)(st.capacity - st.allocated) / (double)st.capacity
                                         : 0.0;
            }
            qsort(rank, m->nseg, sizeof(*rank), rank_cmp);
            for (uint32_t i = 0; (i < m->nseg) && (n < want); i++) {
                if (!name_taken(out, n, rank[i].seg->name) &&
                    ((r = try_segment(m, rank[i].seg, size)) != NULL))
                    out[n++] = r;
            }
            free(rank);
            return n;
        }
        /* out of memory for the ranking: fall through to random */
    }

    uint32_t start = (uint32_t)(rng_next(m) % m->nseg);
    for (uint32_t k = 0; (k < m->nseg) && (n < want); k++) {
        mc_segment_t *seg = m->segv[(start + k) % m->nseg];
        if (!name_taken(out, n, seg->name) && ((r = try_segment(m, seg, size)) != NULL))
            out[n++] = r;
    }
    return n;
}

/* ---- local_first (upstream C.8) -------------------------------------------- */

/* The host a writer works on: the host part of its first memory segment's
 * name, none for the loopback and wildcard names upstream ignores (every
 * client of a one-machine test would share them). */
static mc_str_t writer_host(const mc_client_t *c)
{
    static const char *const none[] = {"localhost", "127.0.0.1", "0.0.0.0", "::1",
                                       "[::1]",     "::",        "[::]"};
    const mc_mlist_t *pos;
    mc_str_t h = {"", 0};

    for (pos = c->segments.next; pos != &c->segments; pos = pos->next) {
        const mc_segment_t *seg = mc_container_of(pos, mc_segment_t, client_link);
        if (!seg->nof) {
            h = mc_master_segment_host(seg->name);
            break;
        }
    }
    for (size_t i = 0; i < MC_ARRAY_SIZE(none); i++) {
        if (str_eq_cstr(h, none[i]))
            return (mc_str_t){"", 0};
    }
    return h;
}

static int host_cmp(const void *a, const void *b)
{
    const mc_str_t *x = a, *y = b;
    int c = memcmp(x->ptr, y->ptr, MC_MIN(x->len, y->len));
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* FNV-1a of the key: a stable rotation across restarts and builds. */
static uint64_t key_hash(mc_str_t key)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < key.len; i++)
        h = (h ^ (uint8_t)key.ptr[i]) * 1099511628211ull;
    return h;
}

/* Try the segments of @p host in mount order, from hash(key) % n on. */
static mc_replica_t *try_host(mc_master_t *m, mc_str_t host, uint64_t hash, uint64_t size)
{
    uint32_t n = 0;
    mc_replica_t *r;

    for (uint32_t i = 0; i < m->nseg; i++)
        n += mc_str_eq(mc_master_segment_host(m->segv[i]->name), host);
    /* the j-th segment of the host, j = hash % n, then the next ones */
    for (uint32_t step = 0; step < n; step++) {
        uint32_t want = (uint32_t)((hash + step) % n), j = 0;
        for (uint32_t i = 0; i < m->nseg; i++) {
            mc_segment_t *seg = m->segv[i];
            if (!mc_str_eq(mc_master_segment_host(seg->name), host))
                continue;
            if (j++ != want)
                continue;
            if ((r = try_segment(m, seg, size)) != NULL)
                return r;
            break;
        }
    }
    return NULL;
}

uint32_t mc_master_segments_allocate_keyed(mc_master_t *m, uint64_t size, uint32_t want,
                                           mc_str_t preferred, const mc_client_t *local,
                                           const mc_client_t *writer, mc_str_t key,
                                           mc_replica_t **out)
{
    mc_str_t host = {"", 0};
    mc_str_t *hosts;
    uint32_t nh = 0, first = 0;
    uint64_t hash;
    mc_replica_t *r = NULL;

    if ((want != 1) || (m->nseg == 0) || (size == 0) || (writer == NULL) ||
        (m->alloc_strategy != MC_ALLOC_LOCAL_FIRST))
        return mc_master_segments_allocate(m, size, want, preferred, local, out);
    host = writer_host(writer);
    if (host.len == 0)
        return mc_master_segments_allocate(m, size, want, preferred, local, out);
    /* the caller's preferred segment keeps its place in front */
    for (uint32_t i = 0; (preferred.len > 0) && (i < m->nseg) && (r == NULL); i++) {
        if (str_eq_cstr(preferred, m->segv[i]->name))
            r = try_segment(m, m->segv[i], size);
    }
    hosts = (r == NULL) ? malloc((size_t)m->nseg * sizeof(*hosts)) : NULL;
    if (hosts != NULL) {
        for (uint32_t i = 0; i < m->nseg; i++) {
            mc_str_t h = mc_master_segment_host(m->segv[i]->name);
            uint32_t k = 0;
            while ((k < nh) && !mc_str_eq(hosts[k], h))
                k++;
            if (k == nh)
                hosts[nh++] = h;
        }
        qsort(hosts, nh, sizeof(*hosts), host_cmp);
        /* the writer's host, else the first name after it (wrapping) */
        while ((first < nh) && (host_cmp(&hosts[first], &host) < 0))
            first++;
        hash = key_hash(key);
        for (uint32_t k = 0; (k < nh) && (r == NULL); k++)
            r = try_host(m, hosts[(first + k) % nh], hash, size);
        free(hosts);
    }
    if (r != NULL) {
        out[0] = r;
        return 1;
    }
    /* full everywhere in that order (or out of memory): random fallback */
    return mc_master_segments_allocate(m, size, want, preferred, local, out);
}

/* ---- copy/move task targets ---------------------------------------------- */

int mc_master_segment_name_exists(mc_master_t *m, mc_str_t name)
{
    for (uint32_t i = 0; i < m->nseg; i++) {
        if (str_eq_cstr(name, m->segv[i]->name))
            return 1;
    }
    return 0;
}

mc_replica_t *mc_master_segment_allocate_named(mc_master_t *m, const char *name, uint64_t size,
                                               int *found_p)
{
    mc_replica_t *r;

    *found_p = 0;
    for (uint32_t i = 0; i < m->nseg; i++) {
        mc_segment_t *seg = m->segv[i];
        if (strcmp(seg->name, name) != 0)
            continue;
        *found_p = 1;
        if ((r = try_segment(m, seg, size)) != NULL)
            return r;
    }
    return NULL;
}

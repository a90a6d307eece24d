/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NoF pool (docs/tiers.md §8, docs/protocol.md §5.17): segments that a
 * storage node's transfer engine serves from a file or a device, and the
 * replicas placed in them (ReplicateConfig.nof_replica_num).
 *
 * A NoF segment is an mc_segment_t with @c nof set.  It is kept apart from
 * memory: not in m->segments/m->segv (so memory placement, copy/move task
 * targets and UNMOUNT_SEGMENT never see it) but in m->nofv, with its own
 * capacity and allocated counters.  It is still on its owner's
 * client->segments list, so it goes with its client exactly as memory
 * segments do (mc_master_segment_unmount() hands it to
 * mc_master_nof_unmount()), and its replicas with it.
 *
 * A NoF replica is an ordinary mc_replica_t on such a segment: the writer
 * writes it through its engine, PUT_END completes it, upsert rewrites or
 * replaces it, remove frees it, like any replica.  The wire calls it type
 * 3 and lists it after memory, so readers try memory first.
 *
 * Eviction.  Memory eviction of an object with a NoF replica frees only its
 * memory: the object stays, readable from NoF, off the LRU
 * (mc_master_nof_drop_memory).  The pool evicts on its own: above
 * --nof_eviction_high_watermark_ratio the background tick, and a put that
 * finds no room inline (when some NoF segment takes writes), drop the NoF
 * replicas of objects that are evictable (complete, not pinned, not
 * leased, not being upserted or copied), --nof_eviction_ratio of the pool
 * per pass.  The walk is over
 * the index (the LRU holds memory objects only), so a pass costs a scan;
 * it runs only when the pool is over its watermark or full.  Members of a
 * group of two or more are never taken (their memory eviction keeps them
 * together).
 *
 * Owns: the NoF pool: NoF segments, their placement, their eviction and
 *   metrics.
 * May call: tiers/, index/ (segments, clients, objects), admin/ (the
 *   metric helper).
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "admin/admin.h"
#include "common/log.h"
#include "index/index.h"
#include "master.h"
#include "tiers.h"

#define MC_NOF_ALIGNMENT 8
#define MC_NOF_MAX_NAME  1024
#define MC_NOF_MAX_PROTO 64

static int str_is(mc_str_t s, const char *c)
{
    return (strlen(c) == s.len) && ((s.len == 0) || (memcmp(c, s.ptr, s.len) == 0));
}

static mc_segment_t *nof_find(const mc_master_t *m, mc_uuid_t id)
{
    for (uint32_t i = 0; i < m->nnof; i++) {
        if (mc_uuid_eq(m->nofv[i]->id, id))
            return m->nofv[i];
    }
    return NULL;
}

static void nof_free(mc_segment_t *seg)
{
    mc_alloc_destroy(seg->alloc);
    free(seg->name);
    free(seg->protocol);
    free(seg);
}

void mc_master_nof_cleanup(mc_master_t *m)
{
    for (uint32_t i = 0; i < m->nnof; i++)
        nof_free(m->nofv[i]);
    free(m->nofv);
    m->nofv = NULL;
    m->nnof = m->nofv_cap = 0;
}

/* A well-formed description, not clashing with a segment of this id. */
static mc_status_t nof_check(mc_master_t *m, mc_client_t *c, const mc_wire_segment_t *s)
{
    const mc_segment_t *old;

    if (mc_uuid_is_nil(s->id) || (s->size < MC_NOF_ALIGNMENT) || (s->base == 0) ||
        (s->base > UINT64_MAX - s->size) || (s->name.len == 0) ||
        (s->name.len > MC_NOF_MAX_NAME) || (memchr(s->name.ptr, '\0', s->name.len) != NULL) ||
        (s->protocol.len > MC_NOF_MAX_PROTO) ||
        ((s->protocol.len > 0) && (memchr(s->protocol.ptr, '\0', s->protocol.len) != NULL))) {
        mc_debug("nof mount: malformed segment description (size %" PRIu64 ")", s->size);
        return MC_INVALID_PARAMS;
    }
    if (mc_master_segment_find(m, s->id) != NULL)
        return MC_SEGMENT_ALREADY_EXISTS; /* a memory segment has this id */
    old = nof_find(m, s->id);
    if ((old != NULL) && ((old->owner != c) || (old->base != s->base) ||
                          (old->size != s->size) || !str_is(s->name, old->name)))
        return MC_SEGMENT_ALREADY_EXISTS;
    return MC_OK;
}

static mc_status_t nof_add(mc_master_t *m, mc_client_t *c, const mc_wire_segment_t *s)
{
    mc_segment_t *seg;
    char idbuf[37];

    if (nof_find(m, s->id) != NULL)
        return MC_OK; /* a retried mount */
    /* Another client's NoF segment of this name: its process is gone and
     * the port serves a new one (as drop_stale_namesakes in segments.c). */
    for (uint32_t i = 0; i < m->nnof;) {
        mc_segment_t *old = m->nofv[i];
        if ((old->owner == c) || !str_is(s->name, old->name)) {
            i++;
            continue;
        }
        mc_warn("NoF segment name %s is now mounted by another client: dropping the stale "
                "segment", old->name);
        mc_master_nof_unmount(m, old); /* moves the last segment into slot i */
    }
    if (m->nnof == m->nofv_cap) {
        uint32_t ncap      = m->nofv_cap ? m->nofv_cap * 2 : 8;
        mc_segment_t **nv = realloc(m->nofv, (size_t)ncap * sizeof(*nv));
        if (nv == NULL)
            return MC_INTERNAL_ERROR;
        m->nofv     = nv;
        m->nofv_cap = ncap;
    }
    seg = calloc(1, sizeof(*seg));
    if (seg == NULL)
        return MC_INTERNAL_ERROR;
    seg->id       = s->id;
    seg->owner    = c;
    seg->base     = s->base;
    seg->size     = s->size;
    seg->state    = MC_SEG_OK;
    seg->nof      = 1;
    mc_master_segment_take_gen(seg, s);
    seg->name     = mc_str_dup(s->name);
    seg->protocol = mc_str_dup(s->protocol.len ? s->protocol : mc_str_from_cstr("tcp"));
    mc_mlist_init(&seg->client_link);
    if ((seg->name == NULL) || (seg->protocol == NULL) ||
        (mc_alloc_create(s->size, MC_NOF_ALIGNMENT, &seg->alloc) != MC_OK)) {
        nof_free(seg);
        return MC_INTERNAL_ERROR;
    }
    seg->index            = m->nnof;
    m->nofv[m->nnof++]    = seg;
    m->nof_capacity_bytes += seg->size;
    mc_mlist_insert_tail(&c->segments, &seg->client_link);
    c->nsegments++;
    mc_uuid_format(seg->id, idbuf);
    mc_info("mounted NoF segment %s name=%s base=0x%" PRIx64 " size=%" PRIu64, idbuf, seg->name,
            seg->base, seg->size);
    return MC_OK;
}

void mc_master_nof_unmount(mc_master_t *m, mc_segment_t *seg)
{
    char idbuf[37];
    size_t dropped;

    seg->state = MC_SEG_UNMOUNTING;
    dropped    = mc_master_objects_drop_segment(m, seg);
    m->nofv[seg->index]        = m->nofv[m->nnof - 1];
    m->nofv[seg->index]->index = seg->index;
    m->nnof--;
    m->nof_capacity_bytes -= seg->size;
    mc_mlist_remove(&seg->client_link);
    if (seg->owner != NULL)
        seg->owner->nsegments--;
    mc_uuid_format(seg->id, idbuf);
    mc_info("unmounted NoF segment %s name=%s (%zu replicas dropped)", idbuf, seg->name,
            dropped);
    nof_free(seg);
}

int32_t mc_master_mount_nof_segment(mc_req_ctx_t *x, const mc_wire_mount_nof_segment_req_t *req)
{
    return mc_master_mount_each(x, req->client_id, &req->segment, 1, nof_check, nof_add, NULL);
}

int32_t mc_master_remount_nof_segments(mc_req_ctx_t *x,
                                       const mc_wire_remount_nof_segments_req_t *req)
{
    return mc_master_mount_each(x, req->client_id, req->segments.v, req->segments.n, nof_check,
                                nof_add, NULL);
}

int32_t mc_master_unmount_nof_segment(mc_req_ctx_t *x,
                                      const mc_wire_unmount_nof_segment_req_t *req)
{
    mc_segment_t *seg = nof_find(x->m, req->segment_id);

    if (seg == NULL)
        return MC_SEGMENT_NOT_FOUND;
    if ((seg->owner == NULL) || !mc_uuid_eq(seg->owner->id, req->client_id))
        return MC_ILLEGAL_CLIENT;
    mc_master_client_touch(x->m, req->client_id, x->now_ms);
    mc_master_nof_unmount(x->m, seg);
    return MC_OK;
}

/* The NoF segments named @p name (all when @p name is NULL) into @p out. */
static int32_t list_nof(mc_req_ctx_t *x, const mc_str_t *name, mc_wire_segment_list_t *out)
{
    mc_master_t *m = x->m;
    uint32_t n     = 0;

    out->n = 0;
    out->v = m->nnof ? mc_arena_calloc(x->arena, m->nnof, sizeof(*out->v)) : NULL;
    if ((m->nnof > 0) && (out->v == NULL))
        return MC_INTERNAL_ERROR;
    for (uint32_t i = 0; i < m->nnof; i++) {
        const mc_segment_t *seg = m->nofv[i];
        if ((name != NULL) && !str_is(*name, seg->name))
            continue;
        out->v[n].id       = seg->id;
        out->v[n].name     = mc_str_from_cstr(seg->name);
        out->v[n].base     = seg->base;
        out->v[n].size     = seg->size;
        out->v[n].protocol = mc_str_from_cstr(seg->protocol);
        n++;
    }
    out->n = n;
    return MC_OK;
}

int32_t mc_master_get_all_nof_segments(mc_req_ctx_t *x,
                                       const mc_wire_get_all_nof_segments_req_t *req,
                                       mc_wire_get_all_nof_segments_resp_t *resp)
{
    (void)req;
    return list_nof(x, NULL, &resp->segments);
}

int32_t mc_master_get_nof_segments_by_name(mc_req_ctx_t *x,
                                           const mc_wire_get_nof_segments_by_name_req_t *req,
                                           mc_wire_get_nof_segments_by_name_resp_t *resp)
{
    int32_t st = list_nof(x, &req->name, &resp->segments);
    if ((st == MC_OK) && (resp->segments.n == 0))
        return MC_SEGMENT_NOT_FOUND;
    return st;
}

/* ---- placement ------------------------------------------------------------ */

static int nof_taken(mc_replica_t **out, uint32_t n, const mc_segment_t *seg)
{
    for (uint32_t i = 0; i < n; i++) {
        if (out[i]->seg == seg)
            return 1;
    }
    return 0;
}

/* One placement pass: the preferred segments in order, then the others
 * from a rotating start; one replica per NoF segment. */
static uint32_t nof_place_once(mc_master_t *m, uint64_t size, uint32_t want,
                               const mc_wire_str_list_t *pref, uint64_t now_ms,
                               mc_replica_t **out)
{
    uint32_t n = 0;
    mc_replica_t *r;

    for (uint32_t p = 0; (pref != NULL) && (p < pref->n) && (n < want); p++) {
        for (uint32_t i = 0; (i < m->nnof) && (n < want); i++) {
            mc_segment_t *seg = m->nofv[i];
            if (str_is(pref->v[p], seg->name) && !nof_taken(out, n, seg) &&
                ((r = mc_master_segment_try(m, seg, size, now_ms)) != NULL))
                out[n++] = r;
        }
    }
    if (m->nnof > 0) {
        uint32_t start = (uint32_t)(m->nof_rr++ % m->nnof);
        for (uint32_t k = 0; (k < m->nnof) && (n < want); k++) {
            mc_segment_t *seg = m->nofv[(start + k) % m->nnof];
            if (!nof_taken(out, n, seg) && ((r = mc_master_segment_try(m, seg, size, now_ms)) != NULL))
                out[n++] = r;
        }
    }
    return n;
}

uint32_t mc_master_nof_place(mc_master_t *m, uint64_t now_ms, uint64_t size,
                             const mc_wire_config_t *cfg, const mc_object_t *keep,
                             mc_replica_t **out)
{
    uint32_t want = MC_MIN(cfg->nof_replica_num, m->nnof);
    uint32_t n;

    if ((want == 0) || (size == 0))
        return 0;
    n = nof_place_once(m, size, want, &cfg->preferred_nof_segments, now_ms, out);
    /* full: evict from the pool, then try once more -- unless no NoF
     * segment takes writes now (its node suspect or its segment draining):
     * then room was not what failed, and evicting would drop NoF copies,
     * the only ones of objects whose memory was evicted, for nothing */
    if ((n == 0) && mc_master_any_writable(m, m->nofv, m->nnof, now_ms)) {
        uint64_t free_now = m->nof_capacity_bytes > m->nof_allocated_bytes
                                ? m->nof_capacity_bytes - m->nof_allocated_bytes : 0;
        uint64_t need     = size > free_now ? size - free_now : size;
        m->nof_eviction_attempts++;
        if (mc_master_nof_evict(m, now_ms, need, keep) > 0) {
            m->nof_evictions++;
            n = nof_place_once(m, size, want, &cfg->preferred_nof_segments, now_ms, out);
        }
    }
    return n;
}

void mc_master_nof_release(mc_master_t *m, mc_alloc_block_t b)
{
    m->nof_allocated_bytes -= MC_MIN(b.size, m->nof_allocated_bytes);
}

/* ---- eviction ------------------------------------------------------------- */

static int object_has_nof(const mc_object_t *o)
{
    return mc_object_has_kind(o, 1);
}

/* Picks for mc_master_object_drop_where(): @p kind points at 1 for the
 * replicas in NoF segments, 0 for the others. */
static int of_kind(const mc_replica_t *r, const void *kind)
{
    return (int)r->seg->nof == *(const int *)kind;
}
static const int kind_memory = 0, kind_nof = 1;

int mc_master_nof_drop_memory(mc_master_t *m, mc_object_t *o)
{
    if (!object_has_nof(o) || !mc_master_object_has_memory(o))
        return 0;
    /* a NoF replica stays, so o does too */
    (void)mc_master_object_drop_where(m, o, of_kind, &kind_memory);
    mc_mlist_remove(&o->lru_link); /* no memory left to free */
    return 1;
}

static int nof_evictable(const mc_object_t *o, uint64_t now_ms)
{
    if (!o->complete || o->hard_pin || (o->upsert != MC_UPSERT_NONE) ||
        mc_object_replicating(o) || (o->lease_deadline_ms > now_ms) ||
        (mc_object_soft_pin_deadline(o) > now_ms))
        return 0;
    if ((mc_object_group(o) != NULL) && (mc_object_group(o)->count > 1))
        return 0;
    return object_has_nof(o);
}

uint64_t mc_master_nof_evict(mc_master_t *m, uint64_t now_ms, uint64_t target,
                             const mc_object_t *keep)
{
    uint64_t before = m->nof_allocated_bytes;
    uint64_t freed  = 0;
    mc_hmap_iter_t it;
    mc_hnode_t *n = mc_hmap_first(&m->objects, &it);

    while ((n != NULL) && (freed < target)) {
        mc_object_t *o = mc_container_of(n, mc_object_t, node);
        /* step first: dropping may erase o, never another object */
        n = mc_hmap_next(&m->objects, &it);
        if ((o == keep) || !nof_evictable(o, now_ms))
            continue;
        mc_debug("evicting the NoF replicas of key '%.*s'", (int)MC_MIN(o->key_len, 200u),
                 mc_object_key(o).ptr);
        (void)mc_master_object_drop_where(m, o, of_kind, &kind_nof);
        freed = before >= m->nof_allocated_bytes ? before - m->nof_allocated_bytes : 0;
        m->nof_evicted_keys++;
    }
    m->nof_evicted_bytes += freed;
    return freed;
}

void mc_master_nof_evict_tick(mc_master_t *m, uint64_t now_ms)
{
    double used, target_d;

    if (m->nof_capacity_bytes == 0)
        return;
    used = (double)m->nof_allocated_bytes / (double)m->nof_capacity_bytes;
    if (used <= m->cfg->nof_eviction_high_watermark_ratio)
        return;
    m->nof_eviction_attempts++;
    target_d = m->cfg->nof_eviction_ratio * (double)m->nof_capacity_bytes;
    if (mc_master_nof_evict(m, now_ms, target_d < 1.0 ? 1 : (uint64_t)target_d, NULL) > 0)
        m->nof_evictions++;
}

/* ---- metrics -------------------------------------------------------------- */

/* A Prometheus label value: backslash, quote and newline escaped. */
static void label_value(struct evbuffer *b, const char *s)
{
    for (; *s != '\0'; s++) {
        if ((*s == '\\') || (*s == '"'))
            evbuffer_add_printf(b, "\\%c", *s);
        else if (*s == '\n')
            evbuffer_add(b, "\\n", 2);
        else
            evbuffer_add(b, s, 1);
    }
}

static void per_segment(mc_master_t *m, struct evbuffer *b, const char *name, const char *help,
                        int allocated)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (uint32_t i = 0; i < m->nnof; i++) {
        mc_alloc_stats_t st;
        mc_alloc_get_stats(m->nofv[i]->alloc, &st);
        evbuffer_add_printf(b, "%s{segment=\"", name);
        label_value(b, m->nofv[i]->name);
        evbuffer_add_printf(b, "\"} %" PRIu64 "\n", allocated ? st.allocated : m->nofv[i]->size);
    }
}

/* The eviction counters carry upstream's names, which do not end in
 * _total: they are "untyped", as master_evicted_key_count is (admin.c). */
void mc_master_nof_metrics(mc_master_t *m, struct evbuffer *b)
{
    mc_master_metric(b, "master_nof_allocated_bytes", "gauge", "Bytes allocated in NoF segments.",
          m->nof_allocated_bytes);
    mc_master_metric(b, "master_total_nof_capacity_bytes", "gauge", "Capacity of all NoF segments.",
          m->nof_capacity_bytes);
    mc_master_metric(b, "master_mounted_nof_segments", "gauge", "Mounted NoF segments.", m->nnof);
    per_segment(m, b, "nof_segment_allocated_bytes", "Bytes allocated in one NoF segment.", 1);
    per_segment(m, b, "nof_segment_total_capacity_bytes", "Capacity of one NoF segment.", 0);
    mc_master_metric(b, "master_evicted_key_count_nof", "untyped",
          "Objects whose NoF replicas were evicted since start.", m->nof_evicted_keys);
    mc_master_metric(b, "master_evicted_size_bytes_nof", "untyped",
          "Bytes of NoF replicas evicted since start.", m->nof_evicted_bytes);
    mc_master_metric(b, "master_attempted_evictions_nof", "untyped", "NoF eviction passes started.",
          m->nof_eviction_attempts);
    mc_master_metric(b, "master_successful_evictions_nof", "untyped",
          "NoF eviction passes that freed something.", m->nof_evictions);
    /* upstream counts REMOUNT_NOF_SEGMENTS under the singular name */
    mc_master_metric(b, "master_remount_nof_segment_requests_total", "counter",
                     "REMOUNT_NOF_SEGMENTS requests handled (upstream's name).",
                     m->op_requests[MC_WIRE_OP_REMOUNT_NOF_SEGMENTS]);
    mc_master_metric(b, "master_remount_nof_segment_failures_total", "counter",
                     "REMOUNT_NOF_SEGMENTS requests answered with an error status (upstream's "
                     "name).",
                     m->op_failures[MC_WIRE_OP_REMOUNT_NOF_SEGMENTS]);
    mc_master_metric(b, "master_evicted_key_count_mem", "untyped", "Objects evicted from memory since start.",
          m->evicted_keys);
    mc_master_metric(b, "master_evicted_size_bytes_mem", "untyped", "Bytes evicted from memory since start.",
          m->evicted_bytes);
    mc_master_metric(b, "master_attempted_evictions_mem", "untyped", "Memory eviction passes started.",
          m->eviction_attempts);
    mc_master_metric(b, "master_successful_evictions_mem", "untyped",
          "Memory eviction passes that freed something.", m->evictions);
}

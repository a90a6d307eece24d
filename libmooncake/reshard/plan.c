/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The resharding planner's arithmetic (include/mooncake/reshard.h).
 *
 * mc_reshard_plan_create() walks the targets in the caller's planning order
 * and intersects each with its candidate sources, checking upstream's
 * limits and per-target coverage in exactly the order the Python reference
 * does (mooncake/reshard/weight/planner.py, _regions), so the first refusal
 * is the same one with the same numbers.  Only then are the regions put in
 * upstream's operation order: the targets by their id's rank, and the few
 * regions of one target by (target base, source rank, source base) --
 * small sorts instead of one sort of every region.
 *
 * mc_reshard_plan_lower() expands regions into runs and merges runs that
 * continue each other in the object and in the target fragment: a target
 * that reads a whole stored payload costs one read however the region was
 * split into loops.
 *
 * Every count is checked for overflow: the Python layer passes manifests it
 * validated, but this is a public entry point and must hold against any
 * input.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/reshard.h>

#include "common/log.h"

enum table_kind { TABLE_PLAN, TABLE_READS, TABLE_BLOCKS };

struct mc_reshard_table {
    enum table_kind kind;
    size_t rows;
    size_t width;
    int64_t *cols[MC_RESHARD_PLAN_COLUMNS];
};

/* Columns of a plan table that hold width entries per row. */
static int wide_column(enum table_kind kind, int col)
{
    return (kind == TABLE_PLAN) &&
           ((col == MC_RESHARD_COL_OVERLAP_OFFSET) || (col == MC_RESHARD_COL_OVERLAP_SHAPE));
}

static int table_columns(enum table_kind kind)
{
    return (kind == TABLE_PLAN)    ? MC_RESHARD_PLAN_COLUMNS
           : (kind == TABLE_BLOCKS) ? MC_RESHARD_BLOCK_COLUMNS
                                    : MC_RESHARD_READ_COLUMNS;
}

MC_API void mc_reshard_table_destroy(mc_reshard_table_h t)
{
    if (t == NULL)
        return;
    for (int c = 0; c < MC_RESHARD_PLAN_COLUMNS; c++)
        free(t->cols[c]);
    free(t);
}

MC_API size_t mc_reshard_table_rows(mc_reshard_table_h t)
{
    return (t == NULL) ? 0 : t->rows;
}

MC_API size_t mc_reshard_table_width(mc_reshard_table_h t)
{
    return (t == NULL) ? 0 : t->width;
}

MC_API const int64_t *mc_reshard_table_column(mc_reshard_table_h t, int col)
{
    if ((t == NULL) || (col < 0) || (col >= table_columns(t->kind)))
        return NULL;
    return t->cols[col];
}

/* A table of @p rows rows with every column allocated (at least one entry
 * each, so an empty table still has valid column pointers). */
static mc_reshard_table_h table_new(enum table_kind kind, size_t rows, size_t width)
{
    mc_reshard_table_h t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->kind  = kind;
    t->rows  = rows;
    t->width = width;
    for (int c = 0; c < table_columns(kind); c++) {
        size_t n = wide_column(kind, c) ? rows * width : rows;
        t->cols[c] = malloc((n ? n : 1) * sizeof(int64_t));
        if (t->cols[c] == NULL) {
            mc_reshard_table_destroy(t);
            return NULL;
        }
    }
    return t;
}

/* ---- input checks ---------------------------------------------------------- */

static int check_frags(const mc_reshard_frags_t *f, const char *what)
{
    if (f->n == 0)
        return 0;
    if ((f->offsets == NULL) || (f->shapes == NULL) || (f->ndims == NULL) ||
        (f->order == NULL)) {
        mc_set_error_detail("reshard: %s columns must not be NULL", what);
        return -1;
    }
    if ((f->width == 0) || (f->width > MC_RESHARD_MAX_NDIM)) {
        mc_set_error_detail("reshard: %s width %zu is not in 1..%d", what, f->width,
                            MC_RESHARD_MAX_NDIM);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++) {
        int64_t nd = f->ndims[i];
        if ((nd < 1) || ((uint64_t)nd > f->width)) {
            mc_set_error_detail("reshard: %s %zu has %lld dimensions (width %zu)", what, i,
                                (long long)nd, f->width);
            return -1;
        }
        for (int64_t d = 0; d < nd; d++) {
            int64_t o = f->offsets[i * f->width + d], n = f->shapes[i * f->width + d];
            if ((o < 0) || (n < 1) || (o > INT64_MAX - n)) {
                mc_set_error_detail("reshard: %s %zu has offset %lld and extent %lld in "
                                    "dimension %lld", what, i, (long long)o, (long long)n,
                                    (long long)d);
                return -1;
            }
        }
    }
    return 0;
}

/* Bytes of a box of @p nd extents at @p item bytes each, or -1 on overflow. */
static int64_t box_bytes(const int64_t *shape, int64_t nd, int64_t item)
{
    int64_t v = item;

    for (int64_t d = 0; d < nd; d++)
        if (__builtin_mul_overflow(v, shape[d], &v))
            return -1;
    return v;
}

static int check_params(const mc_reshard_plan_params_t *p)
{
    const mc_reshard_frags_t *t = &p->targets, *s = &p->sources;

    if (p->field_mask != 0) {
        mc_set_error_detail("reshard: field_mask 0x%llx has unknown bits",
                            (unsigned long long)p->field_mask);
        return -1;
    }
    if ((p->max_transfer_regions == 0) || (p->max_segments_per_region == 0) ||
        (p->max_total_lowered_segments == 0)) {
        mc_set_error_detail("reshard: every planning limit must be at least 1");
        return -1;
    }
    if ((check_frags(t, "target") != 0) || (check_frags(s, "source") != 0))
        return -1;
    if ((t->n > 0) && (s->n > 0) && (t->width != s->width)) {
        mc_set_error_detail("reshard: target width %zu differs from source width %zu",
                            t->width, s->width);
        return -1;
    }
    if ((t->n > 0) && ((p->target_itemsizes == NULL) || (p->target_sets == NULL))) {
        mc_set_error_detail("reshard: target_itemsizes and target_sets must not be NULL");
        return -1;
    }
    if ((p->set_starts == NULL) || (p->set_starts[0] != 0)) {
        mc_set_error_detail("reshard: set_starts must start at 0");
        return -1;
    }
    for (size_t i = 0; i < p->n_sets; i++) {
        if (p->set_starts[i + 1] < p->set_starts[i]) {
            mc_set_error_detail("reshard: set_starts decreases at set %zu", i);
            return -1;
        }
    }
    size_t members = (size_t)p->set_starts[p->n_sets];
    if ((members > 0) && (p->set_members == NULL)) {
        mc_set_error_detail("reshard: set_members must not be NULL");
        return -1;
    }
    for (size_t i = 0; i < members; i++) {
        if ((p->set_members[i] < 0) || ((uint64_t)p->set_members[i] >= s->n)) {
            mc_set_error_detail("reshard: set member %zu names source %lld of %zu", i,
                                (long long)p->set_members[i], s->n);
            return -1;
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        int64_t item = p->target_itemsizes[i], set = p->target_sets[i];
        if (item < 1 || box_bytes(t->shapes + i * t->width, t->ndims[i], item) < 0) {
            mc_set_error_detail("reshard: target %zu has element size %lld (or too many "
                                "bytes)", i, (long long)item);
            return -1;
        }
        if ((set < 0) || ((uint64_t)set >= p->n_sets)) {
            mc_set_error_detail("reshard: target %zu names candidate set %lld of %zu", i,
                                (long long)set, p->n_sets);
            return -1;
        }
    }
    return 0;
}

/* ---- geometry ---------------------------------------------------------------- */

/* C-order byte strides of a box. */
static void c_strides(const int64_t *shape, int64_t nd, int64_t item, int64_t *out)
{
    int64_t s = item;

    for (int64_t d = nd - 1; d >= 0; d--) {
        out[d] = s;
        s *= shape[d];
    }
}

/* The overlap of two boxes of @p nd dimensions; 0 when they do not meet. */
static int intersect(const int64_t *ao, const int64_t *as, const int64_t *bo,
                     const int64_t *bs, int64_t nd, int64_t *off, int64_t *shape)
{
    for (int64_t d = 0; d < nd; d++) {
        int64_t lo = ao[d] > bo[d] ? ao[d] : bo[d];
        int64_t ae = ao[d] + as[d], be = bo[d] + bs[d];
        int64_t hi = ae < be ? ae : be;
        if (lo >= hi)
            return 0;
        off[d]   = lo;
        shape[d] = hi - lo;
    }
    return 1;
}

typedef struct region_geo {
    int64_t sbase, tbase, inner, nloops;
} region_geo_t;

/* upstream's region_geometry(): bases, the run absorbing leading dimensions
 * while both fragments are contiguous across them, the remaining loops. */
static region_geo_t geometry(const int64_t *so, const int64_t *ss_shape, const int64_t *to,
                             const int64_t *ts_shape, const int64_t *off, const int64_t *shape,
                             int64_t nd, int64_t item, int64_t *ss, int64_t *ts)
{
    region_geo_t g = {0, 0, 0, 0};
    int64_t d;

    c_strides(ss_shape, nd, item, ss);
    c_strides(ts_shape, nd, item, ts);
    for (d = 0; d < nd; d++) {
        g.sbase += (off[d] - so[d]) * ss[d];
        g.tbase += (off[d] - to[d]) * ts[d];
    }
    d       = nd - 1;
    g.inner = shape[d] * item;
    while ((d > 0) && (ss[d - 1] == g.inner) && (ts[d - 1] == g.inner)) {
        d--;
        g.inner *= shape[d];
    }
    g.nloops = d;
    return g;
}

/* ---- planning ---------------------------------------------------------------- */

/* A growable set of region rows in planning order. */
typedef struct regions {
    size_t n, cap, width;
    int64_t *target, *source, *sbase, *tbase, *inner, *nloops, *segments, *off, *shape;
} regions_t;

static void regions_free(regions_t *r)
{
    free(r->target);
    free(r->source);
    free(r->sbase);
    free(r->tbase);
    free(r->inner);
    free(r->nloops);
    free(r->segments);
    free(r->off);
    free(r->shape);
}

static int grow(int64_t **col, size_t n)
{
    int64_t *p = realloc(*col, n * sizeof(int64_t));

    if (p == NULL)
        return -1;
    *col = p;
    return 0;
}

static int regions_reserve(regions_t *r)
{
    if (r->n < r->cap)
        return 0;
    size_t cap = r->cap ? 2 * r->cap : 1024;
    if ((grow(&r->target, cap) != 0) || (grow(&r->source, cap) != 0) ||
        (grow(&r->sbase, cap) != 0) || (grow(&r->tbase, cap) != 0) ||
        (grow(&r->inner, cap) != 0) || (grow(&r->nloops, cap) != 0) ||
        (grow(&r->segments, cap) != 0) || (grow(&r->off, cap * r->width) != 0) ||
        (grow(&r->shape, cap * r->width) != 0))
        return -1;
    r->cap = cap;
    return 0;
}

static void refuse(mc_reshard_plan_error_t *e, int64_t kind, size_t index, uint64_t value,
                   uint64_t limit)
{
    e->kind  = kind;
    e->index = (int64_t)index;
    e->value = value;
    e->limit = limit;
}

/* Every region of every target in planning order, or -1 with @p err (a
 * refusal) or a detail (memory) set. */
static int collect(const mc_reshard_plan_params_t *p, regions_t *r, size_t *first,
                   mc_reshard_plan_error_t *err)
{
    const mc_reshard_frags_t *T = &p->targets, *S = &p->sources;
    const size_t w = T->width;
    int64_t ss[MC_RESHARD_MAX_NDIM], ts[MC_RESHARD_MAX_NDIM];
    uint64_t total = 0;

    for (size_t t = 0; t < T->n; t++) {
        const int64_t *to = T->offsets + t * w, *tsh = T->shapes + t * w;
        const int64_t nd = T->ndims[t], item = p->target_itemsizes[t];
        const int64_t set = p->target_sets[t];
        uint64_t covered = 0, volume = 1;

        first[t] = r->n;
        for (int64_t d = 0; d < nd; d++)
            volume *= (uint64_t)tsh[d];
        for (int64_t m = p->set_starts[set]; m < p->set_starts[set + 1]; m++) {
            size_t s = (size_t)p->set_members[m];
            const int64_t *so = S->offsets + s * w, *ssh = S->shapes + s * w;
            if (S->ndims[s] != nd)
                continue; /* another tensor's box: never meets */
            if (box_bytes(ssh, nd, item) < 0) {
                /* its strides at the target's element size would overflow */
                refuse(err, MC_RESHARD_BAD_INPUT, t, s, 0);
                mc_set_error_detail("reshard: source %zu has too many bytes", s);
                return -1;
            }
            if (regions_reserve(r) != 0) {
                mc_set_error_detail("reshard: out of memory after %zu regions", r->n);
                return -1;
            }
            int64_t *off = r->off + r->n * w, *shape = r->shape + r->n * w;
            if (!intersect(so, ssh, to, tsh, nd, off, shape))
                continue;
            region_geo_t g = geometry(so, ssh, to, tsh, off, shape, nd, item, ss, ts);
            uint64_t segments = 1, vol = 1;
            for (int64_t d = 0; d < g.nloops; d++)
                segments *= (uint64_t)shape[d];
            for (int64_t d = 0; d < nd; d++)
                vol *= (uint64_t)shape[d];
            if (segments > p->max_segments_per_region) {
                refuse(err, MC_RESHARD_REGION_SEGMENTS, t, segments,
                       p->max_segments_per_region);
                return -1;
            }
            total += segments;
            if (total > p->max_total_lowered_segments) {
                refuse(err, MC_RESHARD_TOTAL_SEGMENTS, t, total, p->max_total_lowered_segments);
                return -1;
            }
            for (size_t d = (size_t)nd; d < w; d++) {
                off[d]   = 0;
                shape[d] = 0;
            }
            r->target[r->n]   = (int64_t)t;
            r->source[r->n]   = (int64_t)s;
            r->sbase[r->n]    = g.sbase;
            r->tbase[r->n]    = g.tbase;
            r->inner[r->n]    = g.inner;
            r->nloops[r->n]   = g.nloops;
            r->segments[r->n] = (int64_t)segments;
            r->n++;
            if (r->n > p->max_transfer_regions) {
                refuse(err, MC_RESHARD_TOO_MANY_REGIONS, t, r->n, p->max_transfer_regions);
                return -1;
            }
            covered += vol;
        }
        if (covered != volume) {
            refuse(err, MC_RESHARD_NOT_COVERED, t, covered, volume);
            return -1;
        }
    }
    first[T->n] = r->n;
    return 0;
}

/* Sort keys of one region within its target, and of the targets. */
typedef struct sort_key {
    int64_t a, b, c;
    size_t idx;
} sort_key_t;

static int cmp_key(const void *x, const void *y)
{
    const sort_key_t *p = x, *q = y;

    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->b != q->b)
        return p->b < q->b ? -1 : 1;
    if (p->c != q->c)
        return p->c < q->c ? -1 : 1;
    return (p->idx > q->idx) - (p->idx < q->idx);
}

/* The permutation that puts regions in upstream's operation order. */
static size_t *operation_order(const mc_reshard_plan_params_t *p, const regions_t *r,
                               const size_t *first)
{
    const size_t nt = p->targets.n;
    size_t *perm       = malloc((r->n ? r->n : 1) * sizeof(*perm));
    sort_key_t *tk     = malloc((nt ? nt : 1) * sizeof(*tk));
    sort_key_t *rk     = NULL;
    size_t widest      = 0, k = 0;

    if ((perm == NULL) || (tk == NULL))
        goto fail;
    for (size_t t = 0; t < nt; t++) {
        tk[t] = (sort_key_t){p->targets.order[t], 0, 0, t};
        if (first[t + 1] - first[t] > widest)
            widest = first[t + 1] - first[t];
    }
    qsort(tk, nt, sizeof(*tk), cmp_key);
    rk = malloc((widest ? widest : 1) * sizeof(*rk));
    if (rk == NULL)
        goto fail;
    for (size_t i = 0; i < nt; i++) {
        size_t t = tk[i].idx, n = first[t + 1] - first[t];
        for (size_t j = 0; j < n; j++) {
            size_t x = first[t] + j;
            rk[j] = (sort_key_t){r->tbase[x], p->sources.order[r->source[x]], r->sbase[x], x};
        }
        if (n > 1)
            qsort(rk, n, sizeof(*rk), cmp_key);
        for (size_t j = 0; j < n; j++)
            perm[k++] = rk[j].idx;
    }
    free(tk);
    free(rk);
    return perm;
fail:
    free(perm);
    free(tk);
    free(rk);
    mc_set_error_detail("reshard: out of memory ordering %zu regions", r->n);
    return NULL;
}

MC_API mc_status_t mc_reshard_plan_create(const mc_reshard_plan_params_t *p,
                                          mc_reshard_table_h *table_p,
                                          mc_reshard_plan_error_t *error_p)
{
    mc_reshard_plan_error_t err = {MC_RESHARD_OK, -1, 0, 0};
    regions_t r                 = {0};
    size_t *first = NULL, *perm = NULL;
    mc_reshard_table_h t = NULL;
    mc_status_t st       = MC_INVALID_PARAMS;

    if ((p == NULL) || (table_p == NULL)) {
        mc_set_error_detail("reshard: params and table_p must not be NULL");
        err.kind = MC_RESHARD_BAD_INPUT;
        goto out;
    }
    if (check_params(p) != 0) {
        err.kind = MC_RESHARD_BAD_INPUT;
        goto out;
    }
    r.width = p->targets.n ? p->targets.width : 1;
    first   = malloc((p->targets.n + 1) * sizeof(*first));
    if (first == NULL) {
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("reshard: out of memory for %zu targets", p->targets.n);
        goto out;
    }
    if (collect(p, &r, first, &err) != 0) {
        if (err.kind == MC_RESHARD_OK) {
            st = MC_INTERNAL_ERROR;
            goto out;
        }
        if (err.kind == MC_RESHARD_BAD_INPUT)
            goto out; /* the detail is set */
        mc_set_error_detail("reshard: planning refused (%lld) at target %lld: %llu > %llu",
                            (long long)err.kind, (long long)err.index,
                            (unsigned long long)err.value, (unsigned long long)err.limit);
        goto out;
    }
    perm = operation_order(p, &r, first);
    t    = perm ? table_new(TABLE_PLAN, r.n, r.width) : NULL;
    if (t == NULL) {
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("reshard: out of memory for a plan of %zu regions", r.n);
        goto out;
    }
    for (size_t i = 0; i < r.n; i++) {
        size_t x = perm[i];
        t->cols[MC_RESHARD_COL_TARGET][i]      = r.target[x];
        t->cols[MC_RESHARD_COL_SOURCE][i]      = r.source[x];
        t->cols[MC_RESHARD_COL_SOURCE_BASE][i] = r.sbase[x];
        t->cols[MC_RESHARD_COL_TARGET_BASE][i] = r.tbase[x];
        t->cols[MC_RESHARD_COL_INNER][i]       = r.inner[x];
        t->cols[MC_RESHARD_COL_NLOOPS][i]      = r.nloops[x];
        t->cols[MC_RESHARD_COL_SEGMENTS][i]    = r.segments[x];
        memcpy(t->cols[MC_RESHARD_COL_OVERLAP_OFFSET] + i * r.width, r.off + x * r.width,
               r.width * sizeof(int64_t));
        memcpy(t->cols[MC_RESHARD_COL_OVERLAP_SHAPE] + i * r.width, r.shape + x * r.width,
               r.width * sizeof(int64_t));
    }
    *table_p = t;
    st       = MC_OK;
out:
    regions_free(&r);
    free(first);
    free(perm);
    if (error_p != NULL)
        *error_p = err;
    return st;
}

/* ---- lowering ---------------------------------------------------------------- */

/* The reads (or, with @c blocks, the strided blocks) being lowered: a
 * block is @c rows runs of @c len bytes, run i at src + i * sstride and
 * dst + i * dstride. */
typedef struct reads {
    size_t n, cap;
    int blocks;
    int64_t *key, *src, *len, *target, *dst, *rows, *sstride, *dstride;
} reads_t;

/* Run (key, src, len, target, dst) after the last read or block: merged
 * into it when it continues it on both sides (a one-row read grows), or,
 * with r->blocks, when it is the last block's next row (one more row at
 * the block's strides; a one-row block takes the strides from it). */
static int reads_push(reads_t *r, int64_t key, int64_t src, int64_t len, int64_t target,
                      int64_t dst)
{
    if (r->n > 0) {
        size_t l     = r->n - 1;
        int64_t rows = r->blocks ? r->rows[l] : 1;
        if ((r->key[l] == key) && (r->target[l] == target)) {
            if ((rows == 1) && (r->src[l] + r->len[l] == src) && (r->dst[l] + r->len[l] == dst)) {
                r->len[l] += len; /* continues the previous read on both sides */
                return 0;
            }
            if (r->blocks && (r->len[l] == len)) {
                int64_t ss = src - r->src[l], ds = dst - r->dst[l];
                if ((rows == 1) && (ss >= len) && (ds >= len)) {
                    r->sstride[l] = ss; /* rows that do not overlap on either side */
                    r->dstride[l] = ds;
                    r->rows[l]    = 2;
                    return 0;
                }
                if ((rows > 1) && (ss == rows * r->sstride[l]) && (ds == rows * r->dstride[l])) {
                    r->rows[l]++;
                    return 0;
                }
            }
        }
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        if ((grow(&r->key, cap) != 0) || (grow(&r->src, cap) != 0) ||
            (grow(&r->len, cap) != 0) || (grow(&r->target, cap) != 0) ||
            (grow(&r->dst, cap) != 0) ||
            (r->blocks && ((grow(&r->rows, cap) != 0) || (grow(&r->sstride, cap) != 0) ||
                           (grow(&r->dstride, cap) != 0))))
            return -1;
        r->cap = cap;
    }
    r->key[r->n]    = key;
    r->src[r->n]    = src;
    r->len[r->n]    = len;
    r->target[r->n] = target;
    r->dst[r->n]    = dst;
    if (r->blocks) {
        r->rows[r->n]    = 1;
        r->sstride[r->n] = 0;
        r->dstride[r->n] = 0;
    }
    r->n++;
    return 0;
}

/* Every run of one region, the last loop dimension fastest. */
static int lower_region(reads_t *out, const mc_reshard_plan_params_t *p, int64_t key,
                        int64_t objoff, int64_t t, int64_t s, int64_t sbase, int64_t tbase,
                        int64_t inner, int64_t nloops, const int64_t *shape)
{
    const size_t w = p->targets.width;
    const int64_t nd = p->targets.ndims[t], item = p->target_itemsizes[t];
    int64_t ss[MC_RESHARD_MAX_NDIM], ts[MC_RESHARD_MAX_NDIM], idx[MC_RESHARD_MAX_NDIM];
    int64_t src = objoff + sbase, dst = tbase;

    c_strides(p->sources.shapes + (size_t)s * w, nd, item, ss);
    c_strides(p->targets.shapes + (size_t)t * w, nd, item, ts);
    memset(idx, 0, sizeof(idx));
    for (;;) {
        if (reads_push(out, key, src, inner, t, dst) != 0)
            return -1;
        int64_t d = nloops - 1;
        while (d >= 0) { /* odometer step: carry into the next slower dimension */
            idx[d]++;
            src += ss[d];
            dst += ts[d];
            if (idx[d] < shape[d])
                break;
            src -= ss[d] * shape[d];
            dst -= ts[d] * shape[d];
            idx[d] = 0;
            d--;
        }
        if (d < 0)
            return 0;
    }
}

/* mc_reshard_plan_lower(), or with @p blocks mc_reshard_plan_lower_blocks() */
static mc_status_t plan_lower(mc_reshard_table_h plan, const mc_reshard_plan_params_t *p,
                              const int64_t *source_keys, const int64_t *source_object_offsets,
                              const uint8_t *target_selected, int blocks,
                              mc_reshard_table_h *table_p)
{
    reads_t r = {.blocks = blocks};
    mc_reshard_table_h t;
    mc_status_t st = MC_INVALID_PARAMS;

    if ((plan == NULL) || (plan->kind != TABLE_PLAN) || (p == NULL) || (table_p == NULL) ||
        ((p->sources.n > 0) && ((source_keys == NULL) || (source_object_offsets == NULL)))) {
        mc_set_error_detail("reshard: lowering needs a plan, its params, source keys and "
                            "offsets");
        return MC_INVALID_PARAMS;
    }
    for (size_t s = 0; s < p->sources.n; s++) {
        if ((source_keys[s] < 0) || (source_object_offsets[s] < 0)) {
            mc_set_error_detail("reshard: source %zu has key %lld at offset %lld", s,
                                (long long)source_keys[s], (long long)source_object_offsets[s]);
            return MC_INVALID_PARAMS;
        }
    }
    for (size_t i = 0; i < plan->rows; i++) {
        int64_t tg = plan->cols[MC_RESHARD_COL_TARGET][i];
        int64_t s  = plan->cols[MC_RESHARD_COL_SOURCE][i];
        if ((uint64_t)tg >= p->targets.n || (uint64_t)s >= p->sources.n) {
            mc_set_error_detail("reshard: the plan does not match its params");
            goto out;
        }
        if ((target_selected != NULL) && !target_selected[tg])
            continue;
        {
            /* the fragment's bytes after its object offset stay addressable */
            int64_t bytes = box_bytes(p->sources.shapes + (size_t)s * p->sources.width,
                                      p->targets.ndims[tg], p->target_itemsizes[tg]);
            if ((bytes < 0) || (source_object_offsets[s] > INT64_MAX - bytes)) {
                mc_set_error_detail("reshard: source %lld at object offset %lld overflows",
                                    (long long)s, (long long)source_object_offsets[s]);
                goto out;
            }
        }
        if (lower_region(&r, p, source_keys[s], source_object_offsets[s], tg, s,
                         plan->cols[MC_RESHARD_COL_SOURCE_BASE][i],
                         plan->cols[MC_RESHARD_COL_TARGET_BASE][i],
                         plan->cols[MC_RESHARD_COL_INNER][i],
                         plan->cols[MC_RESHARD_COL_NLOOPS][i],
                         plan->cols[MC_RESHARD_COL_OVERLAP_SHAPE] + i * plan->width) != 0) {
            mc_set_error_detail("reshard: out of memory after %zu reads", r.n);
            st = MC_INTERNAL_ERROR;
            goto out;
        }
    }
    t = table_new(blocks ? TABLE_BLOCKS : TABLE_READS, r.n, 1);
    if (t == NULL) {
        mc_set_error_detail("reshard: out of memory for %zu reads", r.n);
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    if (r.n > 0) {
        memcpy(t->cols[MC_RESHARD_READ_KEY], r.key, r.n * sizeof(int64_t));
        memcpy(t->cols[MC_RESHARD_READ_SRC], r.src, r.n * sizeof(int64_t));
        memcpy(t->cols[MC_RESHARD_READ_LENGTH], r.len, r.n * sizeof(int64_t));
        memcpy(t->cols[MC_RESHARD_READ_TARGET], r.target, r.n * sizeof(int64_t));
        memcpy(t->cols[MC_RESHARD_READ_DST], r.dst, r.n * sizeof(int64_t));
        if (blocks) {
            memcpy(t->cols[MC_RESHARD_BLOCK_ROWS], r.rows, r.n * sizeof(int64_t));
            memcpy(t->cols[MC_RESHARD_BLOCK_SRC_STRIDE], r.sstride, r.n * sizeof(int64_t));
            memcpy(t->cols[MC_RESHARD_BLOCK_DST_STRIDE], r.dstride, r.n * sizeof(int64_t));
        }
    }
    *table_p = t;
    st       = MC_OK;
out:
    free(r.key);
    free(r.src);
    free(r.len);
    free(r.target);
    free(r.dst);
    free(r.rows);
    free(r.sstride);
    free(r.dstride);
    return st;
}

MC_API mc_status_t mc_reshard_plan_lower(mc_reshard_table_h plan,
                                         const mc_reshard_plan_params_t *p,
                                         const int64_t *source_keys,
                                         const int64_t *source_object_offsets,
                                         const uint8_t *target_selected,
                                         mc_reshard_table_h *table_p)
{
    return plan_lower(plan, p, source_keys, source_object_offsets, target_selected, 0, table_p);
}

MC_API mc_status_t mc_reshard_plan_lower_blocks(mc_reshard_table_h plan,
                                                const mc_reshard_plan_params_t *p,
                                                const int64_t *source_keys,
                                                const int64_t *source_object_offsets,
                                                const uint8_t *target_selected,
                                                mc_reshard_table_h *table_p)
{
    return plan_lower(plan, p, source_keys, source_object_offsets, target_selected, 1, table_p);
}

/* ---- mc_reshard_boxes_tile() ---------------------------------------------------- */

/* The boxes being proven: row i has @c width offsets and extents. */
typedef struct tile_rows {
    const int64_t *off, *shape;
    size_t width;
} tile_rows_t;

/* Whole boxes in (offset, shape) order, dimension by dimension. */
static int tile_box_cmp(const tile_rows_t *r, int64_t a, int64_t b)
{
    const int64_t *pa[2] = {r->off + a * (int64_t)r->width, r->shape + a * (int64_t)r->width};
    const int64_t *pb[2] = {r->off + b * (int64_t)r->width, r->shape + b * (int64_t)r->width};
    for (int s = 0; s < 2; s++)
        for (size_t d = 0; d < r->width; d++)
            if (pa[s][d] != pb[s][d])
                return pa[s][d] < pb[s][d] ? -1 : 1;
    return 0;
}

/* The boxes' intervals (offset, extent) in dimension @p d, in that order. */
static int tile_span_cmp(const tile_rows_t *r, size_t d, int64_t a, int64_t b)
{
    int64_t oa = r->off[a * (int64_t)r->width + d], ob = r->off[b * (int64_t)r->width + d];
    int64_t la = r->shape[a * (int64_t)r->width + d];
    int64_t lb = r->shape[b * (int64_t)r->width + d];
    if (oa != ob)
        return oa < ob ? -1 : 1;
    return la == lb ? 0 : (la < lb ? -1 : 1);
}

#define TILE_WHOLE_BOX SIZE_MAX

/* Sort @p k row indices by whole box (@p dim TILE_WHOLE_BOX) or by their
 * interval in dimension @p dim: insertion sort for the few boxes a group
 * usually has, a bottom-up merge sort through @p tmp (k slots) beyond. */
static void tile_sort(const tile_rows_t *r, size_t dim, int64_t *idx, int64_t *tmp, size_t k)
{
#define TILE_CMP(a, b) \
    (dim == TILE_WHOLE_BOX ? tile_box_cmp(r, a, b) : tile_span_cmp(r, dim, a, b))
    if (k <= 16) {
        for (size_t i = 1; i < k; i++) {
            int64_t v = idx[i];
            size_t j  = i;
            for (; j > 0 && TILE_CMP(idx[j - 1], v) > 0; j--)
                idx[j] = idx[j - 1];
            idx[j] = v;
        }
        return;
    }
    for (size_t run = 1; run < k; run *= 2) {
        for (size_t lo = 0; lo < k; lo += 2 * run) {
            size_t mid = lo + run < k ? lo + run : k;
            size_t hi  = lo + 2 * run < k ? lo + 2 * run : k;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                tmp[o++] = TILE_CMP(idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[o++] = idx[i++];
            while (j < hi)
                tmp[o++] = idx[j++];
        }
        memcpy(idx, tmp, k * sizeof(*idx));
    }
#undef TILE_CMP
}

/* Whether the distinct boxes among rows idx[0..k) provably tile @p ext
 * (width extents), @p tmp being 2k scratch slots: see the header. */
static int tile_group(const tile_rows_t *r, const int64_t *ext, int64_t *idx, int64_t *tmp,
                      size_t k)
{
    size_t w = r->width, m = 0;
    int64_t total = 1, sum = 0;
    tile_sort(r, TILE_WHOLE_BOX, idx, tmp, k);
    for (size_t i = 0; i < k; i++)      /* identical boxes count once */
        if (m == 0 || tile_box_cmp(r, idx[m - 1], idx[i]) != 0)
            idx[m++] = idx[i];
    for (size_t d = 0; d < w; d++)
        if (ext[d] < 1 || __builtin_mul_overflow(total, ext[d], &total))
            return 0;
    for (size_t i = 0; i < m; i++) {
        const int64_t *o = r->off + idx[i] * (int64_t)w, *s = r->shape + idx[i] * (int64_t)w;
        int64_t vol = 1;
        for (size_t d = 0; d < w; d++) {
            if (o[d] < 0 || s[d] < 1 || s[d] > ext[d] - o[d])
                return 0;           /* empty, or not inside the extent */
            if (__builtin_mul_overflow(vol, s[d], &vol))
                return 0;
        }
        if (__builtin_add_overflow(sum, vol, &sum))
            return 0;
    }
    if (sum != total)
        return 0;
    for (size_t d = 0; d < w; d++) {
        int64_t end = 0, prev = -1;
        memcpy(tmp, idx, m * sizeof(*idx));
        tile_sort(r, d, tmp, tmp + m, m);
        for (size_t i = 0; i < m; i++) {
            int64_t b = tmp[i];
            if (prev >= 0 && tile_span_cmp(r, d, prev, b) == 0)
                continue;           /* the same interval again */
            if (r->off[b * (int64_t)w + d] != end)
                return 0;           /* a gap, an overlap, or not from 0 */
            end  = r->off[b * (int64_t)w + d] + r->shape[b * (int64_t)w + d];
            prev = b;
        }
        if (end != ext[d])
            return 0;
    }
    return 1;
}

MC_API mc_status_t mc_reshard_boxes_tile(size_t n, size_t width, const int64_t *group,
                                         const int64_t *offsets, const int64_t *shapes,
                                         const int64_t *extents, size_t n_groups, uint8_t *ok)
{
    tile_rows_t rows = {offsets, shapes, width};
    int64_t *idx;
    if ((n > 0 && (group == NULL || offsets == NULL || shapes == NULL || extents == NULL)) ||
        (n_groups > 0 && ok == NULL)) {
        mc_set_error_detail("reshard: boxes_tile columns must not be NULL");
        return MC_INVALID_PARAMS;
    }
    if (width < 1 || width > MC_RESHARD_MAX_NDIM) {
        mc_set_error_detail("reshard: boxes_tile width %zu is not in 1..%d", width,
                            MC_RESHARD_MAX_NDIM);
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++)
        if (group[i] < 0 || (uint64_t)group[i] >= n_groups || (i > 0 && group[i] < group[i - 1])) {
            mc_set_error_detail("reshard: boxes_tile group %lld of row %zu is not sorted or "
                                "not below %zu", (long long)group[i], i, n_groups);
            return MC_INVALID_PARAMS;
        }
    if (n > SIZE_MAX / 3 / sizeof(*idx) || (idx = malloc((3 * n + 1) * sizeof(*idx))) == NULL) {
        mc_set_error_detail("reshard: out of memory for %zu boxes", n);
        return MC_INTERNAL_ERROR;
    }
    if (n_groups > 0)
        memset(ok, 0, n_groups);        /* a group without rows is not proven */
    for (size_t lo = 0, hi; lo < n; lo = hi) {
        for (hi = lo; hi < n && group[hi] == group[lo]; hi++)
            idx[hi - lo] = (int64_t)hi;
        ok[group[lo]] = (uint8_t)tile_group(&rows, extents + lo * width, idx, idx + n, hi - lo);
    }
    free(idx);
    return MC_OK;
}

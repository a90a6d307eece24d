/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Zero-copy reads: user-registered memory, get_into, batch_get_into_multi
 * and ranged reads.
 *
 * A user region is registered with the transfer engine for local use only
 * (flags 0): the engine may read into it and write from it, but peers can
 * never reach it.  The store also keeps its own sorted list of the regions
 * so that every zero-copy entry point can refuse, before a byte moves,
 * memory that is neither inside one user region nor inside the local
 * buffer (mc_store_mem_is_usable()).
 *
 * All the reads here share mc_store_read_pieces(): one BATCH lookup for
 * the keys of a call, then one pipelined engine transfer for every piece
 * of every key, so a batch costs one master round trip plus one transfer
 * whatever its size.  Only when a replica fails does an object fall back
 * to its other replicas, one transfer each.
 *
 * May call: read.h (this folder), ../calls.c, metrics, the engine.  Called
 * by: the public API, ../write/ (registered memory), ../sessions/.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/cuda.h"
#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/tiers/tiers.h"
#include "transfer/engine.h"

/* Pieces, requests and statuses kept on the stack for small batches. */
#define MC_ZC_STACK 64

/* ---- registered regions ----------------------------------------------------- */

/* Index of the first region whose base is > p (caller holds reg_lock). */
static size_t region_upper(const struct mc_store_rd *rd, uintptr_t p)
{
    size_t lo = 0, hi = rd->nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rd->regions[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * The usable region holding address @p p: a user region or the local
 * buffer.  Returns 0 when there is none.
 */
static int region_of(mc_store_h s, const void *p, uintptr_t *base_p, size_t *len_p,
                     int device)
{
    struct mc_store_rd *rd = s->rd;
    uintptr_t a            = (uintptr_t)p;
    int found              = 0;

    if ((rd == NULL) || (p == NULL))
        return 0;
    if (!device && (rd->lbuf != NULL) && (a >= (uintptr_t)rd->lbuf->base) &&
        (a - (uintptr_t)rd->lbuf->base < rd->lbuf->size)) {
        *base_p = (uintptr_t)rd->lbuf->base;
        *len_p  = (size_t)rd->lbuf->size;
        return 1;
    }
    pthread_mutex_lock(&rd->reg_lock);
    {
        size_t k = region_upper(rd, a);
        if (k > 0) {
            const mc_store_region_t *r = &rd->regions[k - 1];
            if ((a - r->base < r->len) && (r->device == device)) {
                *base_p = r->base;
                *len_p  = r->len;
                found   = 1;
            }
        }
    }
    pthread_mutex_unlock(&rd->reg_lock);
    return found;
}

int mc_store_mem_is_usable(mc_store_h s, const void *p, size_t len)
{
    uintptr_t base;
    size_t rlen;

    if (!region_of(s, p, &base, &rlen, 0))
        return 0;
    return len <= rlen - ((uintptr_t)p - base);
}

/* [p, p+len) lies in one registered CUDA device region. */
static int mem_is_device_registered(mc_store_h s, const void *p, size_t len)
{
    uintptr_t base;
    size_t rlen;

    if (!region_of(s, p, &base, &rlen, 1))
        return 0;
    return len <= rlen - ((uintptr_t)p - base);
}

int mc_emb_mem_is_registered(mc_store_h s, const void *p, size_t len)
{
    int ok;

    if (mc_store_enter(s) != MC_OK)
        return 0;
    ok = mc_store_mem_is_usable(s, p, len);
    mc_store_leave(s);
    return ok;
}

MC_API int mc_store_mem_is_registered(mc_store_h s, const void *p, size_t len)
{
    return MC_STORE_DISPATCH(s, mem_is_registered, p, len);
}

mc_status_t mc_emb_register_buffer(mc_store_h s, void *addr, size_t len)
{
    mc_status_t st;
    struct mc_store_rd *rd;
    uintptr_t a = (uintptr_t)addr;
    size_t k;
    int device;

    if ((addr == NULL) || (len == 0) || (a > UINTPTR_MAX - len)) {
        mc_set_error_detail("register_buffer needs a non-NULL address and a length > 0");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    if ((rd->lbuf != NULL) && (a < (uintptr_t)rd->lbuf->base + rd->lbuf->size) &&
        ((uintptr_t)rd->lbuf->base < a + len)) {
        mc_set_error_detail("[%p, +%zu) overlaps the store's local buffer", addr, len);
        st = MC_INVALID_PARAMS;
        goto out;
    }
    pthread_mutex_lock(&rd->reg_lock);
    k = region_upper(rd, a);
    if (((k > 0) && (a - rd->regions[k - 1].base < rd->regions[k - 1].len)) ||
        ((k < rd->nregions) && (rd->regions[k].base < a + len))) {
        mc_set_error_detail("[%p, +%zu) overlaps a registered buffer", addr, len);
        st = MC_INVALID_PARAMS;
        goto unlock;
    }
    if (rd->nregions == rd->cap_regions) {
        size_t cap                = rd->cap_regions ? rd->cap_regions * 2 : 16;
        mc_store_region_t *grown = realloc(rd->regions, cap * sizeof(*grown));
        if (grown == NULL) {
            mc_set_error_detail("out of memory registering a buffer");
            st = MC_INTERNAL_ERROR;
            goto unlock;
        }
        rd->regions     = grown;
        rd->cap_regions = cap;
    }
    /* local use only: peers must never reach user memory.  CUDA device
     * memory is not given to the engine at all: reads and writes of it are
     * staged through host memory (docs/cuda.md). */
    device = mc_cuda_is_device_ptr(addr);
    if (!device) {
        st = mc_te_mem_reg(s->te, addr, len, "", 0);
        if (st != MC_OK)
            goto unlock;
    }
    memmove(&rd->regions[k + 1], &rd->regions[k], (rd->nregions - k) * sizeof(rd->regions[0]));
    rd->regions[k] = (mc_store_region_t){a, len, device};
    rd->nregions++;
unlock:
    pthread_mutex_unlock(&rd->reg_lock);
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_register_buffer(mc_store_h s, void *addr, size_t len)
{
    return MC_STORE_DISPATCH(s, register_buffer, addr, len);
}

mc_status_t mc_emb_unregister_buffer(mc_store_h s, void *addr)
{
    mc_status_t st;
    struct mc_store_rd *rd;
    size_t k;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    pthread_mutex_lock(&rd->reg_lock);
    k = region_upper(rd, (uintptr_t)addr);
    if ((addr == NULL) || (k == 0) || (rd->regions[k - 1].base != (uintptr_t)addr)) {
        mc_set_error_detail("%p is not the start of a registered buffer", addr);
        st = MC_INVALID_PARAMS;
        goto unlock;
    }
    st = rd->regions[k - 1].device ? MC_OK : mc_te_mem_dereg(s->te, addr);
    if (st != MC_OK)
        goto unlock;
    k--;
    memmove(&rd->regions[k], &rd->regions[k + 1],
            (rd->nregions - k - 1) * sizeof(rd->regions[0]));
    rd->nregions--;
unlock:
    pthread_mutex_unlock(&rd->reg_lock);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_unregister_buffer(mc_store_h s, void *addr)
{
    return MC_STORE_DISPATCH(s, unregister_buffer, addr);
}

void mc_store_regions_release(mc_store_h s)
{
    struct mc_store_rd *rd = s->rd;

    for (size_t k = 0; k < rd->nregions; k++) {
        mc_status_t st;
        if (rd->regions[k].device)
            continue;
        st = mc_te_mem_dereg(s->te, (void *)rd->regions[k].base);
        if (st != MC_OK)
            mc_warn("cannot unregister buffer %p: %s", (void *)rd->regions[k].base,
                    mc_status_name(st));
    }
    free(rd->regions);
    rd->regions     = NULL;
    rd->nregions    = 0;
    rd->cap_regions = 0;
}

/* ---- reading pieces ---------------------------------------------------------- */

/* Requests for pieces[0..n) against replica @p k of @p q. */
static mc_status_t pieces_to_reqs(mc_store_h s, mc_store_query_h q, uint32_t k,
                                  const mc_read_piece_t *pieces, size_t n, mc_te_request_t *reqs,
                                  uint64_t *gens)
{
    mc_te_segment_id_t seg;
    mc_status_t st = mc_te_segment_open(s->te, q->r[k].segment, &seg);
    if (st != MC_OK)
        return st;
    for (size_t j = 0; j < n; j++) {
        reqs[j].op      = MC_TE_READ;
        reqs[j].local   = pieces[j].local;
        reqs[j].remote  = q->r[k].addr + pieces[j].src_offset;
        reqs[j].length  = pieces[j].length;
        reqs[j].segment = seg;
        gens[j]         = q->r[k].gen;
    }
    return MC_OK;
}

/* Length of the run of pieces starting at @p i that share its owner. */
static size_t group_len(const mc_read_piece_t *pieces, size_t n, size_t i)
{
    size_t j = i + 1;
    while ((j < n) && (pieces[j].owner == pieces[i].owner))
        j++;
    return j - i;
}

enum {
    PIECE_SKIP    = 0,
    PIECE_SENT    = 1,
    PIECE_RETRY   = 2,
    PIECE_DIRECT  = 3,
    PIECE_SCATTER = 4,
    PIECE_GATHER  = 5
};

/* mc_store_read_local_set(): this thread copies same-host replicas itself */
static __thread int read_local;

int mc_store_read_local_set(int on)
{
    int was    = read_local;
    read_local = on;
    return was;
}

/*
 * A group of many small pieces of one object (rows of a ranged read) is
 * copied at once when its replica is in reach of a memcpy (own segment,
 * or a same-host mapping): one lookup and one lock for the group instead
 * of a request, an item and a lock each.  Large pieces stay with the
 * transfer, which spreads them over its workers.
 */
static int pieces_direct(const mc_read_piece_t *pieces, size_t g)
{
    if (g < 2)
        return 0;
    for (size_t j = 0; j < g; j++)
        if (pieces[j].length > MC_TE_RUN_MAX_ITEM_LEN)
            return 0;
    return 1;
}

/* Piece @p j of a group starts where piece j-1 ends in the object. */
static int piece_follows(const mc_read_piece_t *pieces, size_t j)
{
    return pieces[j].src_offset == pieces[j - 1].src_offset + pieces[j - 1].length;
}

/*
 * A group of small pieces of one object that lie mostly back to back in
 * it (the rows of a column block: contiguous in the payload, each going
 * to its own place) is read as scattered READs, one per stretch of
 * adjoining pieces, when the replica is reached over a transport that
 * receives one straight into many runs (mc_te_read_scatter_native): one
 * request instead of one per row, and no staging copy.  On average at
 * least two pieces a stretch, or the per-piece requests stay cheaper.
 */
static int pieces_scatter_ok(mc_store_h s, const mc_te_request_t *req0,
                             const mc_read_piece_t *pieces, size_t g)
{
    size_t stretches = 1;

    if (g < 2)
        return 0;
    for (size_t j = 0; j < g; j++) {
        if (pieces[j].length > MC_TE_RUN_MAX_ITEM_LEN)
            return 0;
        if ((j > 0) && !piece_follows(pieces, j))
            stretches++;
    }
    return (2 * stretches <= g) && mc_te_read_scatter_native(s->te, req0->segment);
}

/* The scattered READs of a group (pieces_scatter_ok) whose requests
 * pieces_to_reqs made (@p reqs, @p gens): one per stretch of adjoining
 * pieces, into sc[*nsc_p...], their runs in @p runs (one per piece). */
static void pieces_scatter_add(const mc_read_piece_t *pieces, size_t g,
                               const mc_te_request_t *reqs, const uint64_t *gens,
                               struct iovec *runs, mc_te_scatter_t *sc, size_t *nsc_p)
{
    for (size_t j = 0; j < g; j++)
        runs[j] = (struct iovec){pieces[j].local, (size_t)pieces[j].length};
    for (size_t a = 0, b; a < g; a = b) {
        for (b = a + 1; (b < g) && piece_follows(pieces, b); b++)
            ;
        sc[(*nsc_p)++] = (mc_te_scatter_t){reqs[a].segment, reqs[a].remote, gens[a], &runs[a],
                                           b - a, NULL, 0, NULL, 0};
    }
}

/* Room for the scattered reads of a call of @p npieces pieces (at most one
 * run per piece and one read per run): one block, taken at the first. */
static int scatter_room(size_t npieces, struct iovec **runs_p, mc_te_scatter_t **sc_p)
{
    if (*runs_p == NULL) {
        *runs_p = malloc(npieces * (sizeof(**runs_p) + sizeof(**sc_p)));
        if (*runs_p == NULL)
            return 0;
        *sc_p = (mc_te_scatter_t *)(void *)(*runs_p + npieces);
    }
    return 1;
}

/* How many scattered READs pieces_scatter_add makes of a group. */
static size_t pieces_stretches(const mc_read_piece_t *pieces, size_t g)
{
    size_t k = 1;
    for (size_t j = 1; j < g; j++)
        k += !piece_follows(pieces, j);
    return k;
}

/*
 * Gathered reads (docs/transfer.md §3.3, READV).  Where a target row is
 * filled by the rows of several stored objects side by side (a TP=2 row
 * is the rows of two TP=4 fragments), per-object scattered reads land
 * each object's rows in every other half row, and the kernel's receive
 * copy into such strided runs costs far more per byte than into one
 * contiguous buffer.  So the scattered-read groups of a call towards a
 * holder that serves READV are merged across objects in destination
 * order and read as READVs: the holder sends the rows of the objects
 * interleaved, and they land in the destination as few long runs.
 */
typedef struct gather_group {
    size_t i, g;                /* its pieces: pieces[i..i+g) */
    mc_te_segment_id_t segment; /* of its first replica */
    uint64_t base;              /* the object's address there */
    uint64_t gen;
} gather_group_t;

/* Room for the gathered reads' groups, ranges and piece-to-read map of a
 * call of @p npieces pieces: one block, taken at the first. */
static int gather_room(size_t npieces, gather_group_t **gr_p, mc_te_range_t **ranges_p,
                       uint32_t **gread_p)
{
    if ((*gr_p == NULL) && (npieces < UINT32_MAX)) {
        *gr_p = malloc(npieces * (sizeof(**gr_p) + sizeof(**ranges_p) + sizeof(**gread_p)));
        if (*gr_p == NULL)
            return 0;
        *ranges_p = (mc_te_range_t *)(void *)(*gr_p + npieces);
        *gread_p  = (uint32_t *)(void *)(*ranges_p + npieces);
    }
    return *gr_p != NULL;
}

/* The pieces of a group go to ascending, disjoint destinations. */
static int pieces_ascending(const mc_read_piece_t *pieces, size_t g)
{
    for (size_t j = 1; j < g; j++)
        if ((uintptr_t)pieces[j].local <
            (uintptr_t)pieces[j - 1].local + (uintptr_t)pieces[j - 1].length)
            return 0;
    return 1;
}

/* Groups read from the same segment under the same generation compare
 * equal: only they may share a read. */
static int gather_group_cmp(const gather_group_t *x, const gather_group_t *y)
{
    if (x->segment != y->segment)
        return (x->segment < y->segment) ? -1 : 1;
    if (x->gen != y->gen)
        return (x->gen < y->gen) ? -1 : 1;
    return 0;
}

/* Groups merged at once at most; a larger cluster of overlapping groups
 * is read group after group (correct, only not interleaved). */
#define GATHER_MERGE_MAX 8

/* The reads being built: the ranges, runs and reads of a call's gathers,
 * each read's pieces noted in @p gread (piece index -> read index). */
typedef struct gather_out {
    mc_te_range_t *ranges;
    size_t nranges;
    struct iovec *runs;
    size_t *nruns_p;
    mc_te_scatter_t *sc;
    size_t *nsc_p;
    uint32_t *gread;
    uint64_t cut; /* bytes per read: about the engine's slice size */
    /* the read open now */
    size_t r0, u0;
    uint64_t bytes;
    int open;
} gather_out_t;

static void gather_close(gather_out_t *o, const gather_group_t *gr)
{
    if (!o->open)
        return;
    o->sc[(*o->nsc_p)++] = (mc_te_scatter_t){gr->segment, 0, gr->gen, &o->runs[o->u0],
                                             *o->nruns_p - o->u0, &o->ranges[o->r0],
                                             o->nranges - o->r0, NULL, 0};
    o->open = 0;
}

/* Append piece @p p (of group @p gr) to the open read, or to a new one. */
static void gather_add(gather_out_t *o, const gather_group_t *gr, const mc_read_piece_t *pieces,
                       size_t p)
{
    uint64_t remote = gr->base + pieces[p].src_offset;
    uint8_t *local  = pieces[p].local;
    mc_te_range_t *lr;
    struct iovec *lu;

    if (o->open && ((o->bytes + pieces[p].length > o->cut) ||
                    (o->nranges - o->r0 >= MC_TE_READV_MAX_RANGES)))
        gather_close(o, gr);
    if (!o->open) {
        o->r0    = o->nranges;
        o->u0    = *o->nruns_p;
        o->bytes = 0;
        o->open  = 1;
    }
    lr = (o->nranges > o->r0) ? &o->ranges[o->nranges - 1] : NULL;
    lu = (*o->nruns_p > o->u0) ? &o->runs[*o->nruns_p - 1] : NULL;
    if ((lr != NULL) && (lr->addr + lr->len == remote))
        lr->len += pieces[p].length;
    else
        o->ranges[o->nranges++] = (mc_te_range_t){remote, pieces[p].length};
    if ((lu != NULL) && ((uint8_t *)lu->iov_base + lu->iov_len == local))
        lu->iov_len += (size_t)pieces[p].length;
    else
        o->runs[(*o->nruns_p)++] = (struct iovec){local, (size_t)pieces[p].length};
    o->bytes += pieces[p].length;
    o->gread[p] = (uint32_t)*o->nsc_p;
}

/* The pieces of groups gr[0..k) merged in destination order (each group's
 * own are ascending) into gathered reads. */
static void gather_merge(gather_out_t *o, const gather_group_t *gr, size_t k,
                         const mc_read_piece_t *pieces)
{
    size_t next[GATHER_MERGE_MAX];

    for (size_t a = 0; a < k; a++)
        next[a] = 0;
    for (;;) {
        size_t best = k;
        for (size_t a = 0; a < k; a++)
            if ((next[a] < gr[a].g) &&
                ((best == k) || ((uintptr_t)pieces[gr[a].i + next[a]].local <
                                 (uintptr_t)pieces[gr[best].i + next[best]].local)))
                best = a;
        if (best == k)
            break;
        gather_add(o, &gr[best], pieces, gr[best].i + next[best]);
        next[best]++;
    }
}

/* First and end of a group's destinations. */
static uintptr_t group_lo(const gather_group_t *g, const mc_read_piece_t *pieces)
{
    return (uintptr_t)pieces[g->i].local;
}

static uintptr_t group_hi(const gather_group_t *g, const mc_read_piece_t *pieces)
{
    const mc_read_piece_t *l = &pieces[g->i + g->g - 1];
    return (uintptr_t)l->local + (uintptr_t)l->length;
}

/*
 * Build the gathered reads of groups gr[0..ng) (sorted here): groups of
 * one segment and generation whose destinations overlap (a cluster: the
 * objects filling one target tensor) are merged piece by piece in
 * destination order; each read takes pieces until about o->cut bytes or
 * MC_TE_READV_MAX_RANGES ranges.
 */
static void gather_build(gather_out_t *o, gather_group_t *gr, size_t ng,
                         const mc_read_piece_t *pieces)
{
    /* insertion sort by (segment, gen, first destination): a call has few
     * groups (one per object read in rows) */
    for (size_t a = 1; a < ng; a++) {
        gather_group_t t = gr[a];
        size_t b         = a;
        while ((b > 0) && ((gather_group_cmp(&gr[b - 1], &t) > 0) ||
                           ((gather_group_cmp(&gr[b - 1], &t) == 0) &&
                            (group_lo(&gr[b - 1], pieces) > group_lo(&t, pieces))))) {
            gr[b] = gr[b - 1];
            b--;
        }
        gr[b] = t;
    }
    for (size_t a = 0, b; a < ng; a = b) {
        uintptr_t hi = group_hi(&gr[a], pieces);
        for (b = a + 1; (b < ng) && (gather_group_cmp(&gr[a], &gr[b]) == 0) &&
                        (group_lo(&gr[b], pieces) < hi);
             b++)
            hi = MC_MAX(hi, group_hi(&gr[b], pieces));
        if (b - a <= GATHER_MERGE_MAX) {
            gather_merge(o, &gr[a], b - a, pieces);
        } else {
            for (size_t c = a; c < b; c++)
                gather_merge(o, &gr[c], 1, pieces);
        }
        gather_close(o, &gr[a]);
    }
}

/* The pieces of a disk-only object (docs/tiers.md: the record, checked,
 * then copies) or of one whose bytes came with the lookup (query.c,
 * speculative reads: copies). */
static mc_status_t pieces_from_copy(mc_store_h s, mc_store_query_h q,
                                    const mc_read_piece_t *pieces, size_t g)
{
    mc_status_t st;

    if ((g == 1) && (q->copy == NULL) && (pieces[0].src_offset == 0) &&
        (pieces[0].length == q->size))
        return mc_store_query_disk_read(s, q, pieces[0].local); /* no staging copy */
    st = mc_store_query_load_disk(s, q);
    for (size_t j = 0; (j < g) && (st == MC_OK); j++)
        memcpy(pieces[j].local, q->copy + pieces[j].src_offset, (size_t)pieces[j].length);
    return st;
}

/*
 * The pieces of @p q's object, after its replicas refused them as "not
 * here" (MC_INVALID_READ: the holder's generation moved on since the
 * lookup, docs/architecture.md "Proof of identity"): ask the master again
 * and read from where it says the object is now, as a whole-object read
 * does (query.c, cached_read_again).  An object that changed size
 * meanwhile fails with MC_LEASE_EXPIRED.  @p reqs and @p gens hold @p g.
 */
static mc_status_t pieces_read_again(mc_store_h s, mc_store_query_h q,
                                     const mc_read_piece_t *pieces, size_t g,
                                     mc_te_request_t *reqs, uint64_t *gens)
{
    mc_status_t st = MC_INVALID_READ;
    const char *key = q->ckey;

    for (int tries = 0; (tries < MC_READ_AGAIN_TRIES) && (st == MC_INVALID_READ); tries++) {
        mc_store_query_h fq = NULL;
        mc_status_t qst     = MC_OK;

        mc_store_read_again_pause(tries);
        mc_debug("ranged read of %s refused (%s); asking the master again", key,
                 mc_status_name(st));
        mc_store_cache_drop(s, key);
        st = mc_store_do_batch_query(s, &key, 1, &fq, &qst);
        if (st == MC_OK)
            st = qst;
        if (st != MC_OK)
            return st;
        if (fq->size != q->size) {
            mc_set_error_detail("%s changed from %llu to %llu bytes while it was read; read it "
                                "again", key, (unsigned long long)q->size,
                                (unsigned long long)fq->size);
            st = MC_LEASE_EXPIRED;
        } else if ((fq->n == 0) || (fq->copy != NULL)) {
            st = pieces_from_copy(s, fq, pieces, g);
        } else {
            for (uint32_t k = 0; k < fq->n; k++) {
                st = pieces_to_reqs(s, fq, k, pieces, g, reqs, gens);
                if (st == MC_OK)
                    st = mc_te_transfer_gen(s->te, reqs, gens, g, NULL);
                if (st == MC_OK)
                    break;
            }
        }
        if (st == MC_OK)
            st = mc_store_query_lease_check(fq);
        mc_store_query_release(fq);
    }
    return st;
}

/*
 * The groups of a call (runs of pieces sharing an owner) in the order they
 * are read: first the objects read as one piece each (whole values), then
 * those read in several (the rows of a ranged read).  The first kind costs
 * nothing to prepare, so their requests go out as a job of their own
 * before the rows are grouped into scattered and gathered reads (~2 ms for
 * 164 k rows): the holder serves them meanwhile instead of waiting for the
 * whole call to be built.  Writes the groups to @p grp (room for
 * @p npieces); returns their number, and in *nfirst_p that of the first
 * kind.
 */
typedef struct piece_group {
    size_t i, g; /* pieces[i..i+g) */
} piece_group_t;

static size_t groups_order(const mc_read_piece_t *pieces, size_t npieces, piece_group_t *grp,
                           size_t *nfirst_p)
{
    size_t a = 0, b = 0;

    for (size_t i = 0, g; i < npieces; i += g) {
        g = group_len(pieces, npieces, i);
        if (g == 1)
            grp[a++] = (piece_group_t){i, g};
        else
            grp[npieces - ++b] = (piece_group_t){i, g}; /* from the end, reversed */
    }
    for (size_t k = 0; k < b; k++)
        grp[a + k] = grp[npieces - 1 - k];
    *nfirst_p = a;
    return a + b;
}

/*
 * The copies of a local read (mc_store_read_local_set) of
 * MC_TE_DIRECT_SPREAD_MIN bytes or more, as one shared read: this thread
 * copies them piece by piece and a thread in mc_store_read_assist takes
 * the pieces it has not reached (the completion queue's caller, once its
 * own work is done).  @p dst gets each request's status.  0 (nothing
 * moved) when it does not apply or memory is short.
 */
static int direct_shared(mc_store_h s, const mc_te_request_t *dreqs, const uint64_t *dgens,
                         size_t ndreq, mc_status_t **dst_p)
{
    uint64_t bytes = 0;

    for (size_t d = 0; d < ndreq; d++)
        bytes += dreqs[d].length;
    if ((bytes < MC_TE_DIRECT_SPREAD_MIN) || ((*dst_p = malloc(ndreq * sizeof(**dst_p))) == NULL))
        return 0;
    (void)mc_te_read_shared_gen(s->te, dreqs, dgens, ndreq, *dst_p);
    return 1;
}

/* Each direct group's result from its requests' statuses @p dst (in group
 * order, as the requests were collected): a group fails with its first
 * failing request and is retried on another replica. */
static void direct_shared_status(const piece_group_t *grp, size_t ngrp,
                                 const mc_read_piece_t *pieces, unsigned char *phase,
                                 const mc_status_t *dst, mc_status_t *ostatus)
{
    for (size_t k = 0, d = 0; k < ngrp; k++) {
        size_t i = grp[k].i, g = grp[k].g;
        if (phase[i] != PIECE_DIRECT)
            continue;
        for (size_t j = 0; j < g; j++, d++) {
            if ((dst[d] != MC_OK) && (phase[i] == PIECE_DIRECT)) {
                ostatus[pieces[i].owner] = dst[d];
                phase[i]                 = PIECE_RETRY;
            }
        }
    }
}

size_t mc_store_read_assist(mc_store_h s)
{
    return mc_te_assist(s->te);
}

void mc_store_read_pieces(mc_store_h s, mc_store_query_h const *queries,
                          const mc_read_piece_t *pieces, size_t npieces, mc_status_t *ostatus)
{
    mc_te_request_t reqs_stack[MC_ZC_STACK];
    mc_te_request_t dreqs_stack[MC_ZC_STACK];
    uint64_t gens_stack[MC_ZC_STACK];
    uint64_t dgens_stack[MC_ZC_STACK];
    mc_status_t rst_stack[MC_ZC_STACK];
    unsigned char phase_stack[MC_ZC_STACK];
    piece_group_t grp_stack[MC_ZC_STACK];
    mc_te_request_t *reqs  = reqs_stack;
    mc_te_request_t *dreqs = dreqs_stack; /* groups read by memcpy (pieces_direct) */
    uint64_t *gens         = gens_stack;  /* generation each request names */
    uint64_t *dgens        = dgens_stack;
    mc_status_t *rst       = rst_stack;
    unsigned char *phase   = phase_stack; /* per group, at its first piece */
    piece_group_t *grp     = grp_stack;   /* the groups, in reading order */
    struct iovec *sruns    = NULL;        /* destinations of the scattered reads */
    mc_te_scatter_t *sc    = NULL;        /* the scattered reads (in sruns' block) */
    gather_group_t *ggr    = NULL;        /* groups read as gathered reads */
    mc_te_range_t *granges = NULL;        /* their ranges (in ggr's block) */
    uint32_t *gread        = NULL;        /* piece -> its gathered read in sc */
    size_t nsc = 0, nsruns = 0, nggr = 0;
    mc_te_job_h early      = NULL; /* the first groups' requests, reqs[0..nearly) */
    mc_te_job_h job        = NULL; /* the rest: reqs[nearly..nreq) and sc */
    mc_status_t *dst       = NULL; /* the statuses of a shared read of dreqs */
    size_t nreq = 0, ndreq = 0, nearly = 0, ngrp, nfirst;
    mc_status_t st, est = MC_OK;

    if (npieces == 0)
        return;
    if (npieces > MC_ZC_STACK) {
        reqs  = malloc(npieces * sizeof(*reqs));
        dreqs = malloc(npieces * sizeof(*dreqs));
        gens  = malloc(npieces * sizeof(*gens));
        dgens = malloc(npieces * sizeof(*dgens));
        rst   = malloc(npieces * sizeof(*rst));
        phase = malloc(npieces);
        grp   = malloc(npieces * sizeof(*grp));
        if ((reqs == NULL) || (dreqs == NULL) || (gens == NULL) || (dgens == NULL) ||
            (rst == NULL) || (phase == NULL) || (grp == NULL)) {
            mc_set_error_detail("out of memory for %zu reads", npieces);
            for (size_t i = 0; i < npieces; i++)
                ostatus[pieces[i].owner] = MC_INTERNAL_ERROR;
            goto out;
        }
    }
    ngrp = groups_order(pieces, npieces, grp, &nfirst);

    /* Pass 1: every owner's pieces against its first replica, one transfer
     * (the groups read by memcpy aside). */
    for (size_t k = 0; k < ngrp; k++) {
        size_t i = grp[k].i, g = grp[k].g;
        size_t o = pieces[i].owner;
        phase[i] = PIECE_SKIP;
        if ((k == nfirst) && (nreq > 0) && (ndreq == 0) &&
            (mc_te_transfer_submit_gen(s->te, reqs, gens, nreq, &early) == MC_OK)) {
            /* the rows are built while the holder serves these */
            nearly = nreq;
        }
        if ((ostatus[o] == MC_OK) && (queries[o]->landed != NULL) &&
            mc_store_query_landed(queries[o], pieces[i].local, pieces[i].src_offset,
                                  (g == 1) ? pieces[i].length : 0)) {
            /* the whole value came with the lookup, into this buffer */
        } else if ((ostatus[o] == MC_OK) &&
                   ((queries[o]->n == 0) || (queries[o]->copy != NULL))) {
            ostatus[o] = pieces_from_copy(s, queries[o], &pieces[i], g);
        } else if (ostatus[o] == MC_OK) {
            st = pieces_to_reqs(s, queries[o], 0, &pieces[i], g, &reqs[nreq], &gens[nreq]);
            if ((st == MC_OK) && (read_local || pieces_direct(&pieces[i], g)) &&
                mc_te_read_direct_gen(s->te, &reqs[nreq], &gens[nreq], g, NULL)) {
                memcpy(&dreqs[ndreq], &reqs[nreq], g * sizeof(*reqs));
                memcpy(&dgens[ndreq], &gens[nreq], g * sizeof(*gens));
                phase[i] = PIECE_DIRECT;
                ndreq += g;
            } else if ((st == MC_OK) && pieces_scatter_ok(s, &reqs[nreq], &pieces[i], g) &&
                       mc_te_read_gather_native(s->te, reqs[nreq].segment) &&
                       pieces_ascending(&pieces[i], g) && scatter_room(npieces, &sruns, &sc) &&
                       gather_room(npieces, &ggr, &granges, &gread)) {
                ggr[nggr++] = (gather_group_t){i, g, reqs[nreq].segment, queries[o]->r[0].addr,
                                               gens[nreq]};
                phase[i]    = PIECE_GATHER; /* read with other objects' rows, below */
            } else if ((st == MC_OK) && pieces_scatter_ok(s, &reqs[nreq], &pieces[i], g) &&
                       scatter_room(npieces, &sruns, &sc)) {
                pieces_scatter_add(&pieces[i], g, &reqs[nreq], &gens[nreq], &sruns[nsruns], sc,
                                   &nsc);
                nsruns += g;
                phase[i] = PIECE_SCATTER; /* in the job, beside the requests */
            } else if (st == MC_OK) {
                phase[i] = PIECE_SENT;
                nreq += g;
            } else {
                phase[i]   = PIECE_RETRY;
                ostatus[o] = st;
            }
        }
    }
    if (nggr > 0) {
        gather_out_t go = {granges, 0, sruns + nsruns, &nsruns, sc, &nsc, gread,
                           MC_MIN(s->te->cfg.slice_size, (uint64_t)MC_TE_READV_MAX_LEN), 0, 0,
                           0, 0};
        size_t base     = nsruns;
        nsruns          = 0; /* counted from sruns + base by the builder */
        gather_build(&go, ggr, nggr, pieces);
        nsruns += base;
    }
    /* the transfer runs on the engine's workers while this thread copies */
    if ((nreq > nearly) && ((ndreq > 0) || (early != NULL)) && (nsc == 0) &&
        (mc_te_transfer_submit_gen(s->te, reqs + nearly, gens + nearly, nreq - nearly, &job) !=
         MC_OK))
        job = NULL;
    /* scattered reads: always in a job, whose workers run several at once */
    if ((nsc > 0) && (mc_te_transfer_submit_scatter_gen(s->te, reqs + nearly, gens + nearly,
                                                        nreq - nearly, sc, nsc, &job) != MC_OK))
        job = NULL;
    if (read_local && direct_shared(s, dreqs, dgens, ndreq, &dst)) {
        direct_shared_status(grp, ngrp, pieces, phase, dst, ostatus);
        free(dst);
        ndreq = 0; /* read: the loop below has nothing left to copy */
    }
    for (size_t k = 0, d = 0; (k < ngrp) && (d < ndreq); k++) {
        size_t i = grp[k].i, g = grp[k].g;
        size_t o = pieces[i].owner;
        if (phase[i] == PIECE_DIRECT) {
            /* the mapping may have gone since the probe: transfer them then */
            if (!mc_te_read_direct_gen(s->te, &dreqs[d], &dgens[d], g, &st))
                st = mc_te_transfer_gen(s->te, &dreqs[d], &dgens[d], g, NULL);
            if (st != MC_OK) {
                ostatus[o] = st;
                phase[i]   = PIECE_RETRY;
            }
            d += g;
        }
    }
    /* the copies done, this thread takes its share of the jobs */
    if (early != NULL)
        mc_te_job_help(s->te, early);
    if (job != NULL)
        mc_te_job_help(s->te, job);
    if (early != NULL) {
        for (size_t j = 0; j < nearly; j++)
            rst[j] = MC_TRANSFER_FAIL;
        est = mc_te_job_wait(early, -1, NULL, rst);
        mc_te_job_release(early);
    }
    if ((nreq > nearly) || (nsc > 0)) {
        for (size_t j = nearly; j < nreq + nsc; j++)
            rst[j] = MC_TRANSFER_FAIL;
        if (job != NULL) {
            st = mc_te_job_wait(job, -1, NULL, rst + nearly);
            mc_te_job_release(job);
        } else {
            st = (nreq > nearly) ? mc_te_transfer_gen(s->te, reqs + nearly, gens + nearly,
                                                      nreq - nearly, rst + nearly)
                                 : MC_OK;
            for (size_t j = 0; j < nsc; j++) {
                rst[nreq + j] = (sc[j].ranges != NULL)
                                    ? mc_te_read_gather_gen(s->te, sc[j].segment, sc[j].gen,
                                                            sc[j].ranges, sc[j].nranges,
                                                            sc[j].runs, sc[j].nruns)
                                    : mc_te_read_scatter_gen(s->te, sc[j].segment, sc[j].remote,
                                                             sc[j].gen, sc[j].runs, sc[j].nruns);
                if (st == MC_OK)
                    st = rst[nreq + j];
            }
        }
    } else {
        st = MC_OK;
    }
    if (st == MC_OK)
        st = est;
    if ((nreq > 0) || (nsc > 0)) {
        size_t r = 0, c = nreq;
        /* sent requests are in group order: map their statuses back (when
         * every transfer succeeded there is nothing to map) */
        for (size_t k = 0; (k < ngrp) && (st != MC_OK); k++) {
            size_t i = grp[k].i, g = grp[k].g;
            size_t o = pieces[i].owner;
            if (phase[i] == PIECE_SENT) {
                for (size_t j = 0; j < g; j++, r++) {
                    if ((rst[r] != MC_OK) && (ostatus[o] == MC_OK)) {
                        ostatus[o] = (rst[r] < 0) ? rst[r] : MC_TRANSFER_FAIL;
                        phase[i]   = PIECE_RETRY;
                    }
                }
            } else if (phase[i] == PIECE_GATHER) {
                /* each piece's read, wherever the merge put it */
                for (size_t j = 0; j < g; j++) {
                    mc_status_t gs = rst[nreq + gread[i + j]];
                    if ((gs != MC_OK) && (ostatus[o] == MC_OK)) {
                        ostatus[o] = (gs < 0) ? gs : MC_TRANSFER_FAIL;
                        phase[i]   = PIECE_RETRY;
                    }
                }
            } else if (phase[i] == PIECE_SCATTER) {
                /* its scattered reads follow the requests, in group order */
                for (size_t m = pieces_stretches(&pieces[i], g); m > 0; m--, c++) {
                    if ((rst[c] != MC_OK) && (ostatus[o] == MC_OK)) {
                        ostatus[o] = (rst[c] < 0) ? rst[c] : MC_TRANSFER_FAIL;
                        phase[i]   = PIECE_RETRY;
                    }
                }
            }
        }
    }

    /* Pass 2: owners whose first replica failed try the others in turn. */
    for (size_t k = 0; k < ngrp; k++) {
        size_t i           = grp[k].i, g = grp[k].g;
        size_t o           = pieces[i].owner;
        mc_store_query_h q = queries[o];
        if (phase[i] == PIECE_RETRY) {
            for (uint32_t rk = 1; rk < q->n; rk++) {
                st = pieces_to_reqs(s, q, rk, &pieces[i], g, reqs, gens);
                if (st == MC_OK)
                    st = mc_te_transfer_gen(s->te, reqs, gens, g, NULL);
                mc_debug("read retried on replica %u (%s): %s", (unsigned)rk, q->r[rk].segment,
                         mc_status_name(st));
                if (st == MC_OK) {
                    ostatus[o] = MC_OK;
                    break;
                }
            }
        }
        /* data read after the lease ran out may be stale: refuse it */
        if ((phase[i] != PIECE_SKIP) && (ostatus[o] == MC_OK))
            ostatus[o] = mc_store_query_lease_check(q);
        /* every replica answered "not here": where is it now? */
        if ((phase[i] != PIECE_SKIP) && (ostatus[o] == MC_INVALID_READ) && (q->ckey != NULL))
            ostatus[o] = pieces_read_again(s, q, &pieces[i], g, reqs, gens);
    }

out:
    free(sruns);
    free(ggr);
    if (reqs != reqs_stack)
        free(reqs);
    if (dreqs != dreqs_stack)
        free(dreqs);
    if (gens != gens_stack)
        free(gens);
    if (dgens != dgens_stack)
        free(dgens);
    if (rst != rst_stack)
        free(rst);
    if (phase != phase_stack)
        free(phase);
    if (grp != grp_stack)
        free(grp);
}

/* ---- get_into ------------------------------------------------------------------ */

/* get_into of CUDA device memory: the object is read into host memory
 * (mapped lazily, so a large cap costs only what the object fills) and
 * copied to the device.  The device buffer must be registered. */
static int64_t staged_get_into(mc_store_h s, const char *key, void *dev, size_t cap)
{
    mc_status_t st;
    uint64_t size = 0;
    void *host;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if (!mem_is_device_registered(s, dev, cap)) {
        mc_set_error_detail("[%p, +%zu) is CUDA device memory that is not registered "
                            "(register_buffer it)", dev, cap);
        mc_store_leave(s);
        return MC_INVALID_PARAMS;
    }
    mc_store_leave(s);
    if (cap == 0)
        return MC_INVALID_PARAMS;
    host = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0);
    if (host == MAP_FAILED) {
        mc_set_error_detail("cannot map %zu bytes to stage a device read: %s", cap,
                            strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    st = mc_store_get(s, key, host, cap, &size);
    if (st == MC_BUFFER_OVERFLOW) {
        mc_set_error_detail("object is %llu bytes, the buffer holds %zu",
                            (unsigned long long)size, cap);
        st = MC_INVALID_PARAMS;
    }
    if ((st == MC_OK) && (size > (uint64_t)INT64_MAX))
        st = MC_INVALID_PARAMS;
    if (st == MC_OK)
        st = mc_cuda_copy(dev, host, (size_t)size);
    munmap(host, cap);
    return (st == MC_OK) ? (int64_t)size : st;
}

int64_t mc_emb_get_into(mc_store_h s, const char *key, void *buf, size_t cap)
{
    mc_status_t st, kst;
    mc_store_query_h q = NULL;
    mc_read_piece_t piece;
    int64_t ret;
    int attempt = 0, have = 0;
    uint64_t t0 = mc_store_metrics_now_us();

    if (mc_cuda_is_device_ptr(buf))
        return staged_get_into(s, key, buf, cap);
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if ((buf == NULL) || !mc_store_mem_is_usable(s, buf, cap)) {
        mc_set_error_detail("[%p, +%zu) is not registered memory (register_buffer it or "
                            "allocate it from the store's pool)", buf, cap);
        ret = MC_INVALID_PARAMS;
        goto out;
    }
again:
    /* the first lookup may come from the location cache (or overlap the
     * read of a disk-only object's record, mc_store_query_spec); if
     * reading from where it said fails, the master is asked, once */
    have = 0;
    if (attempt > 0)
        mc_store_do_batch_query(s, &key, 1, &q, &kst);
    else if (!mc_store_query_spec(s, key, buf, cap, &q, &have, &kst))
        mc_store_do_batch_query_cached_to(s, &key, 1, &q, &kst, &buf, &cap);
    if (kst != MC_OK) {
        ret = kst;
        goto out;
    }
    if (q->size > cap) {
        mc_set_error_detail("object is %llu bytes, the buffer holds %zu",
                            (unsigned long long)q->size, cap);
        ret = MC_INVALID_PARAMS;
        goto out;
    }
    if (q->size > (uint64_t)INT64_MAX) {
        ret = MC_INVALID_PARAMS;
        goto out;
    }
    if ((q->size > 0) && !have) {
        piece = (mc_read_piece_t){buf, 0, q->size, 0};
        mc_store_read_pieces(s, &q, &piece, 1, &kst);
    }
    if ((kst != MC_OK) && q->cached && (attempt++ == 0)) {
        mc_store_cache_drop(s, key);
        mc_store_query_release(q);
        q = NULL;
        goto again;
    }
    ret = (kst == MC_OK) ? (int64_t)q->size : kst;
out:
    mc_store_metrics_record(&s->metrics, MC_MOP_GET, t0, 1, ret < 0,
                            (ret > 0) ? (uint64_t)ret : 0);
    mc_store_query_release(q);
    mc_store_leave(s);
    return ret;
}

MC_API int64_t mc_store_get_into(mc_store_h s, const char *key, void *buf, size_t cap)
{
    return MC_STORE_DISPATCH(s, get_into, key, buf, cap);
}

/* ---- batch_get_into_multi ----------------------------------------------------- */

mc_status_t mc_emb_batch_get_into(mc_store_h s, const char *const *keys,
                                  const mc_iov_t *const *bufs, const size_t *counts, size_t n,
                                  int64_t *results)
{
    mc_status_t st;
    mc_store_query_h q_stack[MC_ZC_STACK];
    mc_status_t kst_stack[MC_ZC_STACK];
    mc_read_piece_t p_stack[MC_ZC_STACK];
    mc_store_query_h *qs  = q_stack;
    mc_status_t *kst      = kst_stack;
    mc_read_piece_t *ps   = p_stack;
    void *d_stack[MC_ZC_STACK];
    size_t c_stack[MC_ZC_STACK];
    void **dsts    = d_stack; /* each key's single buffer, for speculative reads */
    size_t *caps   = c_stack;
    size_t npieces = 0, maxpieces = 0;
    int queried    = 0, attempt = 0;
    uint64_t t0    = mc_store_metrics_now_us();

    if ((n > 0) && ((keys == NULL) || (bufs == NULL) || (counts == NULL) || (results == NULL))) {
        mc_set_error_detail("keys, bufs, counts and results are required");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter_results(s, results, n);
    if (st != MC_OK)
        return st;
    if (n == 0)
        goto out;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (counts[i] > SIZE_MAX / sizeof(*ps) - maxpieces) {
            mc_set_error_detail("too many buffers");
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        maxpieces += counts[i];
    }
    if (n > MC_ZC_STACK) {
        qs   = calloc(n, sizeof(*qs));
        kst  = malloc(n * sizeof(*kst));
        dsts = malloc(n * sizeof(*dsts));
        caps = malloc(n * sizeof(*caps));
    }
    if (maxpieces > MC_ZC_STACK)
        ps = malloc(maxpieces * sizeof(*ps));
    if ((qs == NULL) || (kst == NULL) || (ps == NULL) || (dsts == NULL) || (caps == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }

again:
    /* from the location cache first; when a read from a cached location
     * fails, the whole batch is looked up at the master and read again
     * (reads are idempotent, and such a failure is rare: a holder that
     * restarted, or a lease that ran out) */
    if (attempt == 0) {
        /* a value read into one registered buffer can land there with
         * the lookup (query.c, speculative reads) */
        for (size_t i = 0; i < n; i++) {
            int one = !read_local && (counts[i] == 1) && (bufs[i] != NULL) &&
                      (bufs[i][0].base != NULL) &&
                      mc_store_mem_is_usable(s, bufs[i][0].base, bufs[i][0].len);
            dsts[i] = one ? (void *)(uintptr_t)bufs[i][0].base : NULL;
            caps[i] = one ? bufs[i][0].len : 0;
        }
        mc_store_do_batch_query_cached_to(s, keys, n, qs, kst, dsts, caps);
    } else
        mc_store_do_batch_query(s, keys, n, qs, kst);
    queried = 1;
    npieces = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t cap = 0, left;
        if (kst[i] != MC_OK)
            continue;
        if ((counts[i] > 0) && (bufs[i] == NULL)) {
            mc_set_error_detail("bufs[%zu] is NULL", i);
            kst[i] = MC_INVALID_PARAMS;
            continue;
        }
        for (size_t j = 0; j < counts[i]; j++) {
            const mc_iov_t *b = &bufs[i][j];
            /* a key's single buffer was checked before the lookup (dsts) */
            int checked = (j == 0) && (dsts[i] != NULL);
            if ((b->base == NULL) || (!checked && !mc_store_mem_is_usable(s, b->base, b->len))) {
                mc_set_error_detail("buffer %zu of key %zu is not registered memory", j, i);
                kst[i] = MC_INVALID_PARAMS;
                break;
            }
            cap = (b->len > UINT64_MAX - cap) ? UINT64_MAX : cap + b->len;
        }
        if (kst[i] != MC_OK)
            continue;
        if ((qs[i]->size > cap) || (qs[i]->size > (uint64_t)INT64_MAX)) {
            mc_set_error_detail("object %s is %llu bytes, its buffers hold %llu", keys[i],
                                (unsigned long long)qs[i]->size, (unsigned long long)cap);
            kst[i] = MC_INVALID_PARAMS;
            continue;
        }
        /* scatter the object over the buffers in order */
        left = qs[i]->size;
        for (size_t j = 0; (j < counts[i]) && (left > 0); j++) {
            uint64_t len = (bufs[i][j].len < left) ? bufs[i][j].len : left;
            if (len == 0)
                continue;
            ps[npieces++] = (mc_read_piece_t){(void *)(uintptr_t)bufs[i][j].base,
                                              qs[i]->size - left, len, i};
            left -= len;
        }
    }
    mc_store_read_pieces(s, qs, ps, npieces, kst);
    if (attempt++ == 0) {
        int redo = 0;
        for (size_t i = 0; i < n; i++) {
            if ((kst[i] != MC_OK) && (qs[i] != NULL) && qs[i]->cached) {
                mc_store_cache_drop(s, keys[i]);
                redo = 1;
            }
        }
        if (redo) {
            for (size_t i = 0; i < n; i++) {
                mc_store_query_release(qs[i]);
                qs[i] = NULL;
            }
            goto again;
        }
    }
    st = MC_OK;
    for (size_t i = 0; i < n; i++) {
        results[i] = (kst[i] == MC_OK) ? (int64_t)qs[i]->size : kst[i];
        if ((st == MC_OK) && (kst[i] != MC_OK))
            st = kst[i];
    }
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        results[i] = st;
out:
    if (queried)
        for (size_t i = 0; i < n; i++)
            mc_store_query_release(qs[i]);
    if (qs != q_stack)
        free(qs);
    if (kst != kst_stack)
        free(kst);
    if (ps != p_stack)
        free(ps);
    if (dsts != d_stack)
        free(dsts);
    if (caps != c_stack)
        free(caps);
    if (n > 0) {
        uint64_t bytes = 0;
        int failed     = 0;
        for (size_t i = 0; i < n; i++) {
            if (results[i] < 0)
                failed = 1;
            else
                bytes += (uint64_t)results[i];
        }
        mc_store_metrics_record(&s->metrics, MC_MOP_BATCH_GET, t0, n, failed, bytes);
    }
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_batch_get_into_multi(mc_store_h s, const char *const *keys,
                                                 const mc_iov_t *const *bufs,
                                                 const size_t *counts, size_t n,
                                                 int64_t *results)
{
    return MC_STORE_DISPATCH(s, batch_get_into, keys, bufs, counts, n, results);
}

/* ---- read_ranges -------------------------------------------------------------- */

/* A run of consecutive ranges of one key: ranges[start..start+len) in
 * call order (a caller reading many rows of an object lists them
 * together, so grouping by key sorts the runs, not every range). */
typedef struct range_run {
    const char *key;
    size_t start, len;
} range_run_t;

static int run_cmp(const void *a, const void *b)
{
    const range_run_t *x = a, *y = b;
    int c                = (x->key == y->key) ? 0 : strcmp(x->key, y->key);
    if (c != 0)
        return c;
    return (x->start < y->start) ? -1 : (x->start > y->start);
}

static int same_key(const char *a, const char *b)
{
    return (a == b) || (strcmp(a, b) == 0);
}

/* The usable region of the previous range, reused while the buffer stays
 * inside it (the lookup takes a lock). */
typedef struct dst_region {
    uintptr_t base;
    size_t len;
} dst_region_t;

/* The buffer of a range is usable memory: NULL or unregistered is
 * INVALID_PARAMS.  Checked before the key's lookup result, as upstream: a
 * missing key read into a bad buffer is INVALID_PARAMS, not
 * OBJECT_NOT_FOUND.  Leaves the region holding the buffer in @p last. */
static mc_status_t range_buf_check(mc_store_h s, const mc_store_range_t *r, dst_region_t *last)
{
    uintptr_t b = (uintptr_t)r->buffer;

    if ((r->buffer == NULL) ||
        (((last->len == 0) || (b < last->base) || (b - last->base >= last->len)) &&
         !region_of(s, r->buffer, &last->base, &last->len, 0))) {
        mc_set_error_detail("buffer %p is not registered memory", r->buffer);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* Destination check: [buffer+dst_offset, +length) inside the room left in
 * the one usable region that contains buffer (@p last, from
 * range_buf_check()), without overflowing. */
static mc_status_t range_dst_check(const mc_store_range_t *r, const dst_region_t *last)
{
    uint64_t room = (uint64_t)(last->len - ((uintptr_t)r->buffer - last->base));

    if ((r->dst_offset > room) || (r->length > room - r->dst_offset)) {
        mc_set_error_detail("destination [+%llu, +%llu) leaves the registered buffer",
                            (unsigned long long)r->dst_offset, (unsigned long long)r->length);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* An item's result once its key was read (ks[@p owner]): still MC_OK
 * (checked, and read with its key) it becomes @p ok_bytes or the key's
 * failure; the bytes moved and the call's first failure follow it.  An
 * item that failed before it had a key has no valid @p owner: ks is only
 * indexed for one still MC_OK. */
static void ranged_result(int64_t *result, int64_t ok_bytes, const mc_status_t *ks, size_t owner,
                          uint64_t *bytes_p, mc_status_t *st_p)
{
    if (*result == MC_OK)
        *result = (ks[owner] == MC_OK) ? ok_bytes : ks[owner];
    if (*result > 0)
        *bytes_p += (uint64_t)*result;
    else if ((*result < 0) && (*st_p == MC_OK))
        *st_p = (mc_status_t)*result;
}

/* The end of a ranged read of @p n items: counted as one batch read, with
 * the bytes it moved, for the client's transfer statistics (read_bytes);
 * the lookups qs[0..nd) released. */
static void ranged_end(mc_store_h s, uint64_t t0, size_t n, mc_status_t st, uint64_t bytes,
                       mc_store_query_h *qs, size_t nd)
{
    if (n > 0)
        mc_store_metrics_record(&s->metrics, MC_MOP_BATCH_GET, t0, n, st != MC_OK, bytes);
    if (qs != NULL)
        for (size_t d = 0; d < nd; d++)
            mc_store_query_release(qs[d]);
}

mc_status_t mc_emb_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n)
{
    size_t *order          = NULL; /* range indices grouped by key */
    range_run_t *runs      = NULL;
    dst_region_t last      = {0, 0};
    size_t *owner_of       = NULL; /* range -> distinct key */
    const char **dkeys     = NULL;
    mc_store_query_h *qs   = NULL;
    mc_status_t *ks        = NULL;
    mc_read_piece_t *ps    = NULL;
    size_t nd = 0, np = 0;
    uint64_t t0 = mc_store_metrics_now_us(), bytes = 0;
    mc_status_t st;

    st = mc_store_enter(s);
    if (st != MC_OK) {
        for (size_t i = 0; i < n; i++)
            ranges[i].result = st;
        return st;
    }
    if (n == 0)
        goto out;
    order    = malloc(n * sizeof(*order));
    runs     = malloc(n * sizeof(*runs));
    owner_of = malloc(n * sizeof(*owner_of));
    dkeys    = malloc(n * sizeof(*dkeys));
    ps       = calloc(n, sizeof(*ps)); /* calloc: gcc -O2 + ASan flags the const read otherwise */
    if ((order == NULL) || (runs == NULL) || (owner_of == NULL) || (dkeys == NULL) ||
        (ps == NULL)) {
        mc_set_error_detail("out of memory for %zu ranges", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }

    /* group by key: invalid keys first get their own result */
    {
        size_t m = 0, nr = 0;
        for (size_t i = 0; i < n; i++) {
            const char *key = ranges[i].key;
            if ((nr > 0) && (key != NULL) && same_key(runs[nr - 1].key, key)) {
                ranges[i].result = MC_OK; /* checked with the run's first */
            } else {
                ranges[i].result = mc_store_check_key(key, NULL);
                if (ranges[i].result != MC_OK)
                    continue;
                runs[nr++] = (range_run_t){key, i, 0};
            }
            if (runs[nr - 1].start + runs[nr - 1].len != i) /* a bad key came between */
                runs[nr++] = (range_run_t){key, i, 0};
            runs[nr - 1].len++;
        }
        qsort(runs, nr, sizeof(*runs), run_cmp);
        for (size_t k = 0; k < nr; k++) {
            if ((nd == 0) || !same_key(dkeys[nd - 1], runs[k].key))
                dkeys[nd++] = runs[k].key;
            for (size_t i = runs[k].start; i < runs[k].start + runs[k].len; i++) {
                order[m++]  = i;
                owner_of[i] = nd - 1;
            }
        }
        if (nd > MC_WIRE_MAX_LIST) {
            mc_set_error_detail("at most %u distinct keys per call", (unsigned)MC_WIRE_MAX_LIST);
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        /* one per distinct key (a few hundred where n is 100 k+ rows) */
        qs = calloc(nd + 1, sizeof(*qs));
        ks = malloc((nd + 1) * sizeof(*ks));
        if ((qs == NULL) || (ks == NULL)) {
            mc_set_error_detail("out of memory for %zu keys", nd);
            st = MC_INTERNAL_ERROR;
            goto fail;
        }
        mc_store_do_batch_query(s, dkeys, nd, qs, ks);

        /* validate each fragment; pieces stay grouped by key */
        for (size_t k = 0; k < m; k++) {
            size_t i              = order[k];
            mc_store_range_t *r   = &ranges[i];
            size_t o              = owner_of[i];
            r->result = range_buf_check(s, r, &last);
            if (r->result != MC_OK)
                continue;
            if (ks[o] != MC_OK) {
                r->result = ks[o];
                continue;
            }
            r->result = range_dst_check(r, &last);
            if (r->result != MC_OK)
                continue;
            if ((r->src_offset > qs[o]->size) || (r->length > qs[o]->size - r->src_offset) ||
                (r->length > (uint64_t)INT64_MAX)) {
                mc_set_error_detail("source [%llu, +%llu) is outside the %llu-byte object",
                                    (unsigned long long)r->src_offset,
                                    (unsigned long long)r->length,
                                    (unsigned long long)qs[o]->size);
                r->result = MC_INVALID_PARAMS;
                continue;
            }
            if (r->length > 0)
                ps[np++] = (mc_read_piece_t){(uint8_t *)r->buffer + r->dst_offset,
                                             r->src_offset, r->length, o};
        }
        mc_store_read_pieces(s, qs, ps, np, ks);
    }
    /* One pass in call order, after the last answer: each range's result
     * (those still MC_OK were read with their key's), the bytes moved
     * and the first failure. */
    st = MC_OK;
    for (size_t i = 0; i < n; i++) {
        ranged_result(&ranges[i].result, (int64_t)ranges[i].length, ks, owner_of[i], &bytes,
                      &st);
    }
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        ranges[i].result = st;
out:
    ranged_end(s, t0, n, st, bytes, qs, nd);
    free(order);
    free(runs);
    free(owner_of);
    free(dkeys);
    free(qs);
    free(ks);
    free(ps);
    mc_store_leave(s);
    return st;
}

/* ---- read_blocks --------------------------------------------------------------- */

/*
 * A strided block (mc_store_block_t) is checked as the range of its span
 * (first row's start to last row's end, on both sides) and read, towards
 * a holder that serves READV_STRIDED, as one entry of a strided gathered
 * read (mc_te_read_gather_strided_gen): no per-row piece, request or range
 * on the way.  The blocks of a call that fill one destination row side by
 * side (the fragments of a column-split tensor) become one group of
 * entries, so their rows arrive interleaved and land as long runs.  Every
 * other key's blocks -- a copy query, a same-host mapping, a holder
 * without READV_STRIDED -- are read as their rows by mc_store_read_pieces,
 * and so is every block of a key one of whose strided reads failed: again
 * whole, replicas and a fresh lookup included, so that a key's blocks come
 * from one version or all fail.
 */

/* A block's spans: destination *dspan_p and source *sspan_p bytes from its
 * first row's start to its last row's end (0 for an empty block).
 * MC_INVALID_PARAMS when a stride is shorter than a row or a span
 * overflows. */
static mc_status_t block_spans(const mc_store_block_t *b, uint64_t *dspan_p, uint64_t *sspan_p)
{
    uint64_t m;

    *dspan_p = 0;
    *sspan_p = 0;
    if ((b->rows == 0) || (b->row_len == 0))
        return MC_OK;
    m = b->rows - 1;
    if ((m > 0) && ((b->dst_stride < b->row_len) || (b->src_stride < b->row_len) ||
                    (b->dst_stride > (UINT64_MAX - b->row_len) / m) ||
                    (b->src_stride > (UINT64_MAX - b->row_len) / m))) {
        mc_set_error_detail("block of %llu rows of %llu bytes at strides %llu / %llu: a stride "
                            "is shorter than a row or the block overflows",
                            (unsigned long long)b->rows, (unsigned long long)b->row_len,
                            (unsigned long long)b->dst_stride,
                            (unsigned long long)b->src_stride);
        return MC_INVALID_PARAMS;
    }
    *dspan_p = b->dst_stride * m + b->row_len;
    *sspan_p = b->src_stride * m + b->row_len;
    return MC_OK;
}

/* A block read strided: where it is read from and where it lands. */
typedef struct sblock {
    const mc_store_block_t *b;
    size_t o;               /* its key */
    mc_te_segment_id_t seg; /* of the key's first replica */
    uint64_t gen;
    uint64_t base;          /* the object's address there */
    uintptr_t dst;          /* row 0's destination */
} sblock_t;

static int sblock_cmp(const void *x, const void *y)
{
    const sblock_t *a = x, *b = y;
    if (a->seg != b->seg)
        return (a->seg < b->seg) ? -1 : 1;
    if (a->gen != b->gen)
        return (a->gen < b->gen) ? -1 : 1;
    return (a->dst < b->dst) ? -1 : (a->dst > b->dst);
}

/* One strided read being built: its entries and runs (by index until the
 * arrays stop moving) and the groups of blocks it reads rows of. */
typedef struct sread {
    size_t e0, ne, u0, nu;
    size_t g0, g1; /* groups [g0, g1] */
} sread_t;

/* The strided reads of a call. */
typedef struct sreads {
    mc_te_strided_t *e;
    size_t ne, cap_e;
    struct iovec *runs;
    size_t nruns, cap_runs;
    sread_t *rd;
    size_t nrd, cap_rd;
    uint64_t cut; /* bytes per read: about the engine's slice size */
    /* the read open now */
    uint64_t bytes;
    size_t rows;
    int open;
} sreads_t;

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t c;
    void *q;

    if (need <= *cap)
        return 1;
    c = MC_MAX(MC_MAX(need, 2 * *cap), (size_t)64);
    q = realloc(*p, c * size);
    if (q == NULL)
        return 0;
    *p   = q;
    *cap = c;
    return 1;
}

/* A run appended to the open read, joined to its last when adjoining. */
static int sreads_run(sreads_t *r, uintptr_t dst, uint64_t len)
{
    sread_t *rd     = &r->rd[r->nrd - 1];
    struct iovec *l = (rd->nu > 0) ? &r->runs[r->nruns - 1] : NULL;

    if ((l != NULL) && ((uintptr_t)l->iov_base + l->iov_len == dst)) {
        l->iov_len += (size_t)len;
        return 1;
    }
    if (!grow((void **)&r->runs, &r->cap_runs, r->nruns + 1, sizeof(*r->runs)))
        return 0;
    r->runs[r->nruns++] = (struct iovec){(void *)dst, (size_t)len};
    rd->nu++;
    return 1;
}

/*
 * Group number @p g, sblocks sb[0..w) (same segment and generation, same
 * rows and destination stride, each landing right after the one before:
 * w = 1 for any other block), each row of the group @p p bytes: its rows,
 * cut into reads of about r->cut bytes and within READV_STRIDED's limits.
 * @p same: the group may join the read open now (same segment and
 * generation as its groups).
 */
static int sreads_group(sreads_t *r, const sblock_t *sb, size_t w, uint64_t p, size_t g,
                        int same)
{
    const mc_store_block_t *b0 = sb[0].b;
    uint64_t c = b0->rows, dstride = b0->dst_stride;
    int whole  = (c == 1) || (dstride == p); /* the group's rows land back to back */

    if (!same)
        r->open = 0;
    for (uint64_t i0 = 0, k; i0 < c; i0 += k) {
        sread_t *rd;
        if (r->open) {
            rd = &r->rd[r->nrd - 1];
            if ((r->bytes + p > r->cut) || (rd->ne + w > MC_TE_READVS_MAX_ENTRIES) ||
                (r->rows + w > MC_TE_READVS_MAX_ROWS))
                r->open = 0;
        }
        if (!r->open) {
            if (!grow((void **)&r->rd, &r->cap_rd, r->nrd + 1, sizeof(*r->rd)))
                return 0;
            r->rd[r->nrd++] = (sread_t){r->ne, 0, r->nruns, 0, g, g};
            r->bytes        = 0;
            r->rows         = 0;
            r->open         = 1;
        }
        rd = &r->rd[r->nrd - 1];
        k  = MC_MIN(c - i0, MC_MAX((r->cut - MC_MIN(r->bytes, r->cut)) / p, (uint64_t)1));
        k  = MC_MIN(k, (uint64_t)((MC_TE_READVS_MAX_ROWS - r->rows) / w));
        if (!grow((void **)&r->e, &r->cap_e, r->ne + w, sizeof(*r->e)))
            return 0;
        for (size_t j = 0; j < w; j++) {
            const mc_store_block_t *b = sb[j].b;
            uint64_t stride           = (b->rows > 1) ? b->src_stride : b->row_len;
            r->e[r->ne++] = (mc_te_strided_t){sb[j].base + b->src_offset + i0 * stride, stride,
                                              (uint32_t)b->row_len, (uint32_t)k,
                                              (j == 0) ? (uint32_t)w : 0};
        }
        rd->ne += w;
        rd->g1 = g;
        if (whole) {
            if (!sreads_run(r, sb[0].dst + (uintptr_t)(i0 * dstride), k * p))
                return 0;
        } else {
            for (uint64_t i = i0; i < i0 + k; i++)
                if (!sreads_run(r, sb[0].dst + (uintptr_t)(i * dstride), p))
                    return 0;
        }
        r->bytes += k * p;
        r->rows += (size_t)k * w;
    }
    return 1;
}

/* Key @p q's blocks may go strided: a memory replica on a holder that
 * serves READV_STRIDED, neither a copy nor a same-host mapping, rows of at
 * most @p cut bytes.  Its first replica's segment in *seg_p. */
static int key_strided(mc_store_h s, mc_store_query_h q, const mc_store_block_t *b,
                       uint64_t cut, mc_te_segment_id_t *seg_p)
{
    mc_te_request_t probe;

    if ((q->n == 0) || (q->copy != NULL) || (q->landed != NULL) || read_local ||
        (b->row_len > cut) ||
        (mc_te_segment_open(s->te, q->r[0].segment, seg_p) != MC_OK) ||
        !mc_te_read_gather_strided_native(s->te, *seg_p))
        return 0;
    probe = (mc_te_request_t){MC_TE_READ, (uint8_t *)b->buffer + b->dst_offset,
                              q->r[0].addr + b->src_offset, b->row_len, *seg_p};
    return !mc_te_read_direct_gen(s->te, &probe, &q->r[0].gen, 1, NULL);
}

/* The rows of the blocks of the keys marked in @p redo (all when NULL)
 * read as pieces by mc_store_read_pieces; blocks of a key not MC_OK are
 * skipped.  0 when memory is short (the keys' statuses say so). */
static void blocks_as_pieces(mc_store_h s, mc_store_block_t *const *vb, size_t nvb,
                             const size_t *vo, const unsigned char *redo,
                             mc_store_query_h *qs, mc_status_t *ks)
{
    mc_read_piece_t *ps = NULL;
    size_t np = 0, cap = 0;

    for (size_t v = 0; v < nvb; v++)
        if (((redo == NULL) || redo[vo[v]]) && (ks[vo[v]] == MC_OK))
            cap += (size_t)vb[v]->rows;
    if (cap == 0)
        return;
    ps = calloc(cap, sizeof(*ps));
    for (size_t v = 0; v < nvb; v++) {
        const mc_store_block_t *b = vb[v];
        if (((redo != NULL) && !redo[vo[v]]) || (ks[vo[v]] != MC_OK))
            continue;
        if (ps == NULL) {
            ks[vo[v]] = MC_INTERNAL_ERROR;
            continue;
        }
        for (uint64_t i = 0; i < b->rows; i++)
            ps[np++] = (mc_read_piece_t){(uint8_t *)b->buffer + b->dst_offset + i * b->dst_stride,
                                         b->src_offset + i * b->src_stride, b->row_len, vo[v]};
    }
    if (ps == NULL)
        mc_set_error_detail("out of memory for %zu rows", cap);
    else
        mc_store_read_pieces(s, qs, ps, np, ks);
    free(ps);
}

/*
 * The blocks vb[0..nvb) (checked, not empty; vo[v] its key) of the keys
 * marked in @p strided: grouped, cut into strided reads and run in one
 * job, while this thread reads the other keys' rows.  A key one of whose
 * reads failed is read again as rows; the others get their lease checked.
 */
static void blocks_read(mc_store_h s, mc_store_block_t *const *vb, size_t nvb, const size_t *vo,
                        const unsigned char *strided, const mc_te_segment_id_t *kseg,
                        mc_store_query_h *qs, mc_status_t *ks, size_t nd)
{
    sreads_t r        = {0};
    sblock_t *sb      = NULL;
    size_t *grp       = NULL; /* group g: sb[grp[g]..grp[g + 1]) */
    unsigned char *redo = NULL;
    mc_te_scatter_t *sc = NULL;
    mc_status_t *rst    = NULL;
    mc_te_job_h job     = NULL;
    size_t nsb = 0, ngrp = 0, nredo = 0;

    r.cut = MC_MIN(s->te->cfg.slice_size, (uint64_t)MC_TE_READV_MAX_LEN);
    sb    = malloc((nvb + 1) * sizeof(*sb));
    grp   = malloc((nvb + 1) * sizeof(*grp));
    redo  = calloc(nd + 1, 1);
    if ((sb == NULL) || (grp == NULL) || (redo == NULL))
        goto oom;
    for (size_t v = 0; v < nvb; v++) {
        size_t o = vo[v];
        if (strided[o] && (ks[o] == MC_OK))
            sb[nsb++] = (sblock_t){vb[v], o, kseg[o], qs[o]->r[0].gen, qs[o]->r[0].addr,
                                   (uintptr_t)vb[v]->buffer + (uintptr_t)vb[v]->dst_offset};
    }
    qsort(sb, nsb, sizeof(*sb), sblock_cmp);
    for (size_t a = 0, b; a < nsb; a = b) {
        const mc_store_block_t *x = sb[a].b;
        uint64_t p                = x->row_len;
        for (b = a + 1; (b < nsb) && (b - a < MC_TE_READVS_PACK_WIDTH) && (x->rows > 1) &&
                        (sb[b].seg == sb[a].seg) && (sb[b].gen == sb[a].gen) &&
                        (sb[b].b->rows == x->rows) && (sb[b].b->dst_stride == x->dst_stride) &&
                        (sb[b].dst == sb[b - 1].dst + (uintptr_t)sb[b - 1].b->row_len) &&
                        (p + sb[b].b->row_len <= x->dst_stride) &&
                        (p + sb[b].b->row_len <= r.cut);
             b++)
            p += sb[b].b->row_len;
        grp[ngrp] = a;
        if (!sreads_group(&r, &sb[a], b - a, p, ngrp,
                          (a > 0) && (sb[a].seg == sb[a - 1].seg) && (sb[a].gen == sb[a - 1].gen)))
            goto oom;
        ngrp++;
    }
    grp[ngrp] = nsb;
    if (r.nrd > 0) {
        sc  = malloc(r.nrd * sizeof(*sc));
        rst = malloc(r.nrd * sizeof(*rst));
        if ((sc == NULL) || (rst == NULL))
            goto oom;
        for (size_t j = 0; j < r.nrd; j++) {
            const sread_t *d = &r.rd[j];
            const sblock_t *f = &sb[grp[d->g0]];
            sc[j]  = (mc_te_scatter_t){f->seg, 0, f->gen, &r.runs[d->u0], d->nu, NULL, 0,
                                       &r.e[d->e0], d->ne};
            rst[j] = MC_TRANSFER_FAIL;
        }
        if (mc_te_transfer_submit_scatter_gen(s->te, NULL, NULL, 0, sc, r.nrd, &job) != MC_OK)
            job = NULL;
    }
    /* the other keys' rows meanwhile */
    {
        unsigned char *rest = redo; /* the keys not read strided, for a moment */
        for (size_t o = 0; o < nd; o++)
            rest[o] = !strided[o];
        blocks_as_pieces(s, vb, nvb, vo, rest, qs, ks);
        memset(redo, 0, nd);
    }
    if (job != NULL) {
        mc_te_job_help(s->te, job);
        (void)mc_te_job_wait(job, -1, NULL, rst);
        mc_te_job_release(job);
    } else {
        for (size_t j = 0; j < r.nrd; j++)
            rst[j] = mc_te_read_gather_strided_gen(s->te, sc[j].segment, sc[j].gen, sc[j].strided,
                                                   sc[j].nstrided, sc[j].runs, sc[j].nruns);
    }
    /* a failed read: every key it read rows of is read again, whole */
    for (size_t j = 0; j < r.nrd; j++) {
        if (rst[j] == MC_OK)
            continue;
        for (size_t g = r.rd[j].g0; g <= r.rd[j].g1; g++)
            for (size_t k = grp[g]; k < grp[g + 1]; k++)
                if (!redo[sb[k].o]) {
                    redo[sb[k].o] = 1;
                    nredo++;
                }
    }
    for (size_t o = 0; o < nd; o++)
        if (strided[o] && (ks[o] == MC_OK) && !redo[o])
            ks[o] = mc_store_query_lease_check(qs[o]);
    if (nredo > 0) {
        mc_debug("%zu keys' strided reads failed: reading their rows again", nredo);
        blocks_as_pieces(s, vb, nvb, vo, redo, qs, ks);
    }
    goto out;

oom:
    mc_set_error_detail("out of memory for the strided reads of %zu blocks", nvb);
    for (size_t o = 0; o < nd; o++)
        if (strided[o] && (ks[o] == MC_OK))
            ks[o] = MC_INTERNAL_ERROR;
    if (redo != NULL) {
        for (size_t o = 0; o < nd; o++)
            redo[o] = !strided[o];
        blocks_as_pieces(s, vb, nvb, vo, redo, qs, ks);
    }
out:
    free(sb);
    free(grp);
    free(redo);
    free(sc);
    free(rst);
    free(r.e);
    free(r.runs);
    free(r.rd);
}

/* Blocks by key (then call order), for one lookup per distinct key. */
typedef struct block_key {
    const char *key;
    size_t i;
} block_key_t;

static int block_key_cmp(const void *a, const void *b)
{
    const block_key_t *x = a, *y = b;
    int c                = (x->key == y->key) ? 0 : strcmp(x->key, y->key);
    if (c != 0)
        return c;
    return (x->i < y->i) ? -1 : (x->i > y->i);
}

mc_status_t mc_emb_read_blocks(mc_store_h s, mc_store_block_t *blocks, size_t n)
{
    block_key_t *bk          = NULL;
    size_t *owner_of         = NULL; /* block -> distinct key */
    const char **dkeys       = NULL;
    mc_store_query_h *qs     = NULL;
    mc_status_t *ks          = NULL;
    mc_store_block_t **vb    = NULL; /* the blocks to read, by key */
    size_t *vo               = NULL;
    unsigned char *strided   = NULL; /* per key: its blocks go strided */
    mc_te_segment_id_t *kseg = NULL;
    dst_region_t last        = {0, 0};
    size_t nd = 0, nbk = 0, nvb = 0;
    uint64_t t0 = mc_store_metrics_now_us(), bytes = 0;
    uint64_t cut;
    mc_status_t st;

    st = mc_store_enter(s);
    if (st != MC_OK) {
        for (size_t i = 0; i < n; i++)
            blocks[i].result = st;
        return st;
    }
    if (n == 0)
        goto out;
    cut      = MC_MIN(s->te->cfg.slice_size, (uint64_t)MC_TE_READV_MAX_LEN);
    bk       = malloc(n * sizeof(*bk));
    owner_of = malloc(n * sizeof(*owner_of));
    dkeys    = malloc(n * sizeof(*dkeys));
    vb       = malloc(n * sizeof(*vb));
    vo       = malloc(n * sizeof(*vo));
    if ((bk == NULL) || (owner_of == NULL) || (dkeys == NULL) || (vb == NULL) || (vo == NULL)) {
        mc_set_error_detail("out of memory for %zu blocks", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        blocks[i].result = mc_store_check_key(blocks[i].key, NULL);
        if (blocks[i].result == MC_OK)
            bk[nbk++] = (block_key_t){blocks[i].key, i};
    }
    qsort(bk, nbk, sizeof(*bk), block_key_cmp);
    for (size_t k = 0; k < nbk; k++) {
        if ((nd == 0) || !same_key(dkeys[nd - 1], bk[k].key))
            dkeys[nd++] = bk[k].key;
        owner_of[bk[k].i] = nd - 1;
    }
    if (nd > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("at most %u distinct keys per call", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    qs      = calloc(nd + 1, sizeof(*qs));
    ks      = malloc((nd + 1) * sizeof(*ks));
    strided = calloc(nd + 1, 1);
    kseg    = calloc(nd + 1, sizeof(*kseg));
    if ((qs == NULL) || (ks == NULL) || (strided == NULL) || (kseg == NULL)) {
        mc_set_error_detail("out of memory for %zu keys", nd);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    mc_store_do_batch_query(s, dkeys, nd, qs, ks);
    for (size_t o = 0; o < nd; o++)
        strided[o] = 1; /* until a block of the key says otherwise */

    /* each block checked as the range of its span, in read_ranges' order */
    for (size_t k = 0; k < nbk; k++) {
        mc_store_block_t *b = &blocks[bk[k].i];
        size_t o            = owner_of[bk[k].i];
        uint64_t dspan, sspan;
        mc_store_range_t span = {b->key, b->buffer, b->dst_offset, b->src_offset, 0, 0};
        b->result = range_buf_check(s, &span, &last);
        if (b->result != MC_OK)
            continue;
        if (ks[o] != MC_OK) {
            b->result = ks[o];
            continue;
        }
        b->result = block_spans(b, &dspan, &sspan);
        if (b->result != MC_OK)
            continue;
        span.length = dspan;
        b->result   = range_dst_check(&span, &last);
        if (b->result != MC_OK)
            continue;
        if ((b->src_offset > qs[o]->size) || (sspan > qs[o]->size - b->src_offset) ||
            (b->rows * b->row_len > (uint64_t)INT64_MAX)) {
            mc_set_error_detail("source [%llu, +%llu) is outside the %llu-byte object",
                                (unsigned long long)b->src_offset, (unsigned long long)sspan,
                                (unsigned long long)qs[o]->size);
            b->result = MC_INVALID_PARAMS;
            continue;
        }
        if (sspan == 0)
            continue;
        if (strided[o] && !key_strided(s, qs[o], b, cut, &kseg[o]))
            strided[o] = 0;
        vb[nvb]   = b;
        vo[nvb++] = o;
    }
    blocks_read(s, vb, nvb, vo, strided, kseg, qs, ks, nd);

    /* each block's result in call order, the bytes and the first failure */
    st = MC_OK;
    for (size_t i = 0; i < n; i++) {
        mc_store_block_t *b = &blocks[i];
        ranged_result(&b->result, (int64_t)(b->rows * b->row_len), ks, owner_of[i], &bytes,
                      &st);
    }
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        blocks[i].result = st;
out:
    ranged_end(s, t0, n, st, bytes, qs, nd);
    free(bk);
    free(owner_of);
    free(dkeys);
    free(qs);
    free(ks);
    free(vb);
    free(vo);
    free(strided);
    free(kseg);
    mc_store_leave(s);
    return st;
}

mc_status_t mc_store_read_blocks_as_ranges(mc_store_h s, mc_store_block_t *blocks, size_t n)
{
    mc_store_range_t *r;
    size_t nr = 0, k = 0;
    mc_status_t st, first = MC_OK;

    for (size_t i = 0; i < n; i++) {
        uint64_t dspan, sspan;
        blocks[i].result = block_spans(&blocks[i], &dspan, &sspan);
        if (blocks[i].result == MC_OK)
            nr += (blocks[i].rows > 0) ? (size_t)blocks[i].rows : 1;
    }
    r = calloc(nr + 1, sizeof(*r));
    if (r == NULL) {
        mc_set_error_detail("out of memory for %zu rows", nr);
        for (size_t i = 0; i < n; i++)
            blocks[i].result = MC_INTERNAL_ERROR;
        return MC_INTERNAL_ERROR;
    }
    for (size_t i = 0; i < n; i++) {
        const mc_store_block_t *b = &blocks[i];
        if (b->result != MC_OK)
            continue;
        if (b->rows == 0)
            r[k++] = (mc_store_range_t){b->key, b->buffer, b->dst_offset, b->src_offset, 0, 0};
        for (uint64_t j = 0; j < b->rows; j++)
            r[k++] = (mc_store_range_t){b->key, b->buffer, b->dst_offset + j * b->dst_stride,
                                        b->src_offset + j * b->src_stride, b->row_len, 0};
    }
    st = mc_store_read_ranges(s, r, nr);
    for (size_t i = 0, j = 0; i < n; i++) {
        mc_store_block_t *b = &blocks[i];
        size_t m            = (b->rows > 0) ? (size_t)b->rows : 1;
        if (b->result != MC_OK) {
            if (first == MC_OK)
                first = (mc_status_t)b->result;
            continue;
        }
        for (size_t q = 0; q < m; q++, j++)
            if ((r[j].result < 0) && (b->result >= 0))
                b->result = r[j].result;
        if (b->result == MC_OK)
            b->result = (int64_t)(b->rows * b->row_len);
        else if (first == MC_OK)
            first = (mc_status_t)b->result;
    }
    free(r);
    return (first != MC_OK) ? first : st;
}

MC_API mc_status_t mc_store_read_blocks(mc_store_h s, mc_store_block_t *blocks, size_t n)
{
    if ((n > 0) && (blocks == NULL)) {
        mc_set_error_detail("blocks is NULL");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, read_blocks, blocks, n);
}

MC_API mc_status_t mc_store_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n)
{
    if ((n > 0) && (ranges == NULL)) {
        mc_set_error_detail("ranges is NULL");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, read_ranges, ranges, n);
}

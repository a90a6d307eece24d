/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reads: lookups (GET_REPLICA_LIST and its batch form), replica choice,
 * the reads themselves, and the small calls that only ask the master
 * (exist, get_size).
 *
 * A lookup grants a read lease of lease_ttl_ms, measured by the master
 * from when it handled the request.  We start our clock just before
 * sending, so our deadline is never later than the master's; a read that
 * finishes after it reports MC_LEASE_EXPIRED because the object may have
 * been evicted or removed (and its memory reused) while we copied it.
 *
 * A query keeps every COMPLETE memory replica, best first: one in this
 * process's own segment (the engine serves it with memcpy), then one on
 * the same host, then the rest in the master's order.  When a read fails
 * on one replica (a dead peer, a refused range) the next one is tried, so
 * a lost client costs a retry instead of a failed get.
 *
 * Bytes move straight from the owner's memory into the caller's buffer:
 * the engine writes into it directly, no staging, no copy here.  Every
 * read names the generation the master handed out with the replica (its
 * segment's registration and reuse counter, common/gen.h), so a holder
 * that restarted, remounted or handed the memory to another value since
 * refuses it instead of serving other bytes.
 *
 * The location cache (loc_cache.h, docs/architecture.md): get, get_into,
 * batch_get_into, the query calls and get_batch read a cached key from
 * where it was while the master answers the lookup of the same call, and
 * keep the bytes only when the answer lists that very replica
 * (speculative reads, below): a cached location is never trusted alone,
 * so a get sees every write acknowledged before it began.
 *
 * A disk-only object's record is read the same way while the master
 * answers, from where the SSD tier last found it (its disk hints, behind
 * the hooks note, size_hint, speculate and speculated: docs/tiers.md §4).
 *
 * May call: read.h (this folder), ../calls.c, ../tiers/tiers.h (the hook
 * table: the file replica to fall back to and its read, the tiers' reads
 * during a lookup), metrics, the master pool, the engine.  Called by: the
 * public API, ../write/ (the location cache), ../sessions/,
 * ../threads/tasks.c, the dummy's copies.
 */
#include "config.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "store/read/loc_cache.h"
#include "store/read/read.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "store/tiers/tiers.h"
#include "store/write/write.h"
#include "transfer/engine.h"

static uint64_t lease_deadline(uint64_t t0_ns, uint64_t ttl_ms)
{
    if (ttl_ms > (UINT64_MAX - t0_ns) / 1000000u)
        return UINT64_MAX;
    return t0_ns + ttl_ms * 1000000u;
}

/* Length of the host part of a "host:port" segment name. */
static size_t host_len(const char *name, size_t len)
{
    for (size_t i = len; i > 0; i--)
        if (name[i - 1] == ':')
            return i - 1;
    return len;
}

/* 0 same process, 1 same host, 2 elsewhere. */
static int replica_rank(mc_store_h s, mc_str_t seg)
{
    size_t own_len = strlen(s->hostname);
    size_t own_host, seg_host;

    if ((seg.len == own_len) && (memcmp(seg.ptr, s->hostname, own_len) == 0))
        return 0;
    own_host = host_len(s->hostname, own_len);
    seg_host = host_len(seg.ptr, seg.len);
    if ((own_host == seg_host) && (memcmp(seg.ptr, s->hostname, own_host) == 0))
        return 1;
    return 2;
}

/* A memory or NoF replica (NoF is read like memory, through the storage
 * node's engine, docs/tiers.md §8). */
static int replica_usable(const mc_wire_replica_t *r, uint64_t size)
{
    return (r->status == MC_REPLICA_COMPLETE) &&
           ((r->type == MC_WIRE_REPLICA_MEMORY) || (r->type == MC_WIRE_REPLICA_NOF)) &&
           (r->size >= size) &&
           (r->addr <= UINT64_MAX - size) && (r->segment.len > 0) &&
           (r->segment.len < MC_STORE_NAME_MAX) &&
           (memchr(r->segment.ptr, '\0', r->segment.len) == NULL);
}

/* Build a query from a lookup result (one allocation). */
static mc_status_t query_build(mc_store_h s, const char *key, uint64_t size,
                               const mc_wire_replica_list_t *reps, uint64_t deadline_ns,
                               mc_store_query_h *query_p)
{
    struct mc_store_query *q;
    size_t n = 0, names = 0, k = 0, klen = strlen(key);
    char *np;
    char fpath[PATH_MAX];
    mc_store_file_ref_t f;
    int file;

    for (uint32_t i = 0; i < reps->n; i++) {
        if (replica_usable(&reps->v[i], size)) {
            n++;
            names += reps->v[i].segment.len + 1;
        }
    }
    /* the tiers' file replica: the SSD record, else the DFS record
     * (docs/tiers.md) */
    file = mc_store_tiers_find_file(s, reps, size, &f, fpath, sizeof(fpath));
    if (file)
        names += f.path_len + 1 + f.segment_len + 1 + klen + 1;
    if ((n == 0) && !file) {
        mc_set_error_detail("%s has no complete replica to read", key);
        return MC_REPLICA_IS_NOT_READY;
    }
    names += klen + 1; /* the key, for the location cache */
    q = malloc(sizeof(*q) + n * sizeof(q->r[0]) + names);
    if (q == NULL) {
        mc_set_error_detail("out of memory for a query");
        return MC_INTERNAL_ERROR;
    }
    q->size        = size;
    q->deadline_ns = deadline_ns;
    q->n           = (uint32_t)n;
    q->copy        = NULL;
    q->disk_path   = NULL;
    q->disk_bytes  = NULL;
    q->disk_dfs    = 0;
    q->owner       = NULL;
    q->describe    = NULL;
    q->key         = NULL;
    q->descs       = NULL;
    q->cached      = 0;
    q->spec        = 0;
    q->landed      = NULL;
    q->blob_base   = (uintptr_t)q;
    q->blob_len    = !file ? sizeof(*q) + n * sizeof(q->r[0]) + names : 0;
    np             = (char *)&q->r[n];
    memcpy(np, key, klen + 1);
    q->ckey = np;
    np += klen + 1;
    /* memory before NoF, each nearest first */
    for (int rank = 0; rank <= 5; rank++) {
        for (uint32_t i = 0; i < reps->n; i++) {
            const mc_wire_replica_t *r = &reps->v[i];
            if (!replica_usable(r, size) ||
                ((r->type == MC_WIRE_REPLICA_NOF) != (rank >= 3)) ||
                (replica_rank(s, r->segment) != rank % 3))
                continue;
            memcpy(np, r->segment.ptr, r->segment.len);
            np[r->segment.len] = '\0';
            q->r[k].id         = r->id;
            q->r[k].addr       = r->addr;
            q->r[k].gen        = mc_store_replica_gen(r);
            q->r[k].segment    = np;
            q->r[k].nof        = r->type == MC_WIRE_REPLICA_NOF;
            np += r->segment.len + 1;
            k++;
        }
    }
    if (file) {
        q->disk_tier   = f.tier;
        q->disk_offset = f.offset;
        q->disk_crc    = f.crc;
        if (f.dfs) {
            q->disk_dfs   = 1;
            q->disk_shard = f.shard;
            q->disk_span  = f.span;
        }
        q->disk_path = np;
        memcpy(np, f.path, f.path_len);
        np[f.path_len] = '\0';
        np += f.path_len + 1;
        q->disk_segment = np;
        memcpy(np, f.segment, f.segment_len);
        np[f.segment_len] = '\0';
        np += f.segment_len + 1;
        q->disk_key = np;
        memcpy(np, key, klen + 1);
    }
    *query_p = q;
    return MC_OK;
}

/* The file replica through the tier that found it (tiers.h): an SSD
 * record from the file, else its holder; a DFS record from the shared
 * file. */
mc_status_t mc_store_query_disk_read(mc_store_h s, mc_store_query_h q, void *buf)
{
    return q->disk_tier->read_file(s, q->disk_path, q->disk_segment, q->disk_offset,
                                   mc_str_from_cstr(q->disk_key), q->size, q->disk_crc, buf);
}

static mc_status_t read_whole_disk(mc_store_h s, mc_store_query_h q);

mc_status_t mc_store_query_load_disk(mc_store_h s, mc_store_query_h q)
{
    mc_status_t st;

    if (q->copy != NULL)
        return MC_OK;
    if ((q->n > 0) || (q->disk_path == NULL)) {
        mc_set_error_detail("query has no disk replica to read");
        return MC_INVALID_PARAMS;
    }
    st = read_whole_disk(s, q);
    if (st == MC_OK)
        q->copy = q->disk_bytes;
    return st;
}

/* The disk (or DFS) record of @p q into q->disk_bytes, once: a part of
 * it needs the whole record for its checksum. */
static mc_status_t read_whole_disk(mc_store_h s, mc_store_query_h q)
{
    uint8_t *b;
    mc_status_t st;

    if (q->disk_bytes != NULL)
        return MC_OK;
    b = malloc(q->size ? (size_t)q->size : 1);
    if (b == NULL) {
        mc_set_error_detail("out of memory reading a %llu-byte disk replica",
                            (unsigned long long)q->size);
        return MC_INTERNAL_ERROR;
    }
    st = mc_store_query_disk_read(s, q, b);
    if (st != MC_OK) {
        free(b);
        return st;
    }
    q->disk_bytes = b;
    return MC_OK;
}

/* ---- the location cache ---------------------------------------------------------- */

static mc_loc_cache_t *store_cache(mc_store_h s)
{
    return (s->rd != NULL) ? s->rd->loc : NULL;
}

void mc_store_cache_drop(mc_store_h s, const char *key)
{
    mc_loc_cache_t *c = store_cache(s);
    if ((c != NULL) && (key != NULL))
        mc_loc_cache_drop(c, key, strlen(key));
}

void mc_store_cache_clear(mc_store_h s)
{
    mc_loc_cache_t *c = store_cache(s);
    if (c != NULL)
        mc_loc_cache_clear(c);
}

/*
 * How long before the lease deadline a cached location stops being used:
 * a twentieth of the lease plus 1 ms (0.5 s of the default 10 s).  Our
 * deadline already starts before the request was sent, so it is earlier
 * than the master's; the margin adds room for a read that starts just
 * before it (the read's own lease check then refuses late data) and for
 * clocks that run at slightly different rates.
 */
static uint64_t cache_deadline(uint64_t lease_deadline_ns, uint64_t t0_ns)
{
    uint64_t ttl = (lease_deadline_ns > t0_ns) ? lease_deadline_ns - t0_ns : 0;
    uint64_t margin = ttl / 20u + 1000000u;
    return (ttl > margin) ? lease_deadline_ns - margin : 0;
}

/* Cache a query the master just answered (it was asked for after @p epoch
 * was read, at @p t0_ns). */
static void cache_insert(mc_loc_cache_t *c, const struct mc_store_query *q, uint64_t t0_ns,
                         uint64_t epoch)
{
    uint64_t d;
    if ((c == NULL) || (q->blob_len == 0) || (q->n == 0))
        return;
    d = cache_deadline(q->deadline_ns, t0_ns);
    if (d <= mc_now_ns())
        return;
    mc_loc_cache_put(c, q->ckey, strlen(q->ckey), q, q->blob_len, d, epoch);
}

static int spec_usable(const struct mc_store_query *q, const void *dst, size_t cap);

/* A query for @p key from the cache, or NULL.  The blob was built at
 * blob_base: its string pointers move with it.  A speculative entry
 * (spec set: no lease behind it) is returned only with @p spec_ok, and
 * when its size allows a read into @p dst (@p cap bytes; NULL: none,
 * spec_usable); else it counts as a miss and stays until the master's
 * answer replaces it. */
static struct mc_store_query *cache_lookup(mc_loc_cache_t *c, const char *key, size_t klen,
                                           int spec_ok, const void *dst, size_t cap)
{
    size_t len;
    uint64_t deadline;
    struct mc_store_query *q = mc_loc_cache_get(c, key, klen, mc_now_ns(), &len, &deadline);
    uintptr_t delta;

    if (q == NULL)
        return NULL;
    /* never trusted alone: a lease says the buffers stay allocated, not
     * that they still hold the newest value (docs/architecture.md,
     * "Location cache", "Freshness"), so every entry is read as a
     * speculative one, confirmed by the master's answer to a lookup sent
     * after the read began */
    q->spec = 1;
    if (!spec_ok || !spec_usable(q, dst, cap)) {
        free(q);
        return NULL;
    }
    delta = (uintptr_t)q - q->blob_base;
    for (uint32_t k = 0; k < q->n; k++)
        q->r[k].segment = (const char *)((uintptr_t)q->r[k].segment + delta);
    q->ckey        = (const char *)((uintptr_t)q->ckey + delta);
    q->blob_base   = (uintptr_t)q;
    q->copy        = NULL; /* bytes read with the query that was cached stay with it */
    q->disk_bytes  = NULL;
    q->landed      = NULL;
    q->deadline_ns = deadline;
    q->cached      = 1;
    return q;
}

/* ---- the tiers' part in a lookup (docs/tiers.md §4) ------------------------------ */

/* The file replica a query falls back to, as a tier's hooks see it, or
 * NULL when it has none. */
static const mc_store_file_ref_t *query_file(const struct mc_store_query *q,
                                             mc_store_file_ref_t *f)
{
    if (q->disk_path == NULL)
        return NULL;
    memset(f, 0, sizeof(*f));
    f->tier        = q->disk_tier;
    f->path        = q->disk_path;
    f->path_len    = strlen(q->disk_path);
    f->segment     = q->disk_segment;
    f->segment_len = strlen(q->disk_segment);
    f->offset      = q->disk_offset;
    f->crc         = q->disk_crc;
    f->dfs         = q->disk_dfs;
    f->shard       = q->disk_shard;
    f->span        = q->disk_span;
    return f;
}

/* The master's answer @p q for @p key, told to the tiers: the file replica
 * of an object with no memory replica (the SSD tier remembers where its
 * record is, docs/tiers.md §4); @p spec: the speculative read that ran
 * with the lookup, or NULL. */
static void tiers_note(mc_store_h s, const struct mc_store_query *q, const char *key,
                       size_t klen, const mc_store_tier_spec_t *spec)
{
    mc_store_file_ref_t f;
    mc_str_t k = {key, (uint32_t)klen};

    mc_store_tiers_note(s, k, q->size, (q->n == 0) ? query_file(q, &f) : NULL, spec);
}

MC_API mc_status_t mc_store_get_size_hint(mc_store_h s, const char *key, uint64_t *size_p)
{
    size_t klen;
    mc_status_t st;
    int have = 0;

    if (size_p == NULL) {
        mc_set_error_detail("size_p is NULL");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_check_key(key, &klen);
    if (st == MC_OK) {
        mc_str_t k = {key, (uint32_t)klen};
        have       = mc_store_tiers_size_hint(s, k, size_p);
    }
    if ((st == MC_OK) && !have) {
        /* where this handle put it (a speculative entry) or holds a lease:
         * the query's first field is the size */
        mc_loc_cache_t *c = store_cache(s);
        uint64_t size     = 0;
        _Static_assert(offsetof(struct mc_store_query, size) == 0, "size leads the query");
        if ((c != NULL) &&
            (mc_loc_cache_peek(c, key, klen, mc_now_ns(), &size, sizeof(size)) == sizeof(size)) &&
            (size > 0)) {
            *size_p = size;
        } else {
            mc_set_error_detail("no size remembered for %s", key);
            st = MC_OBJECT_NOT_FOUND;
        }
    }
    mc_store_leave(s);
    return st;
}

/* ---- lookups --------------------------------------------------------------------- */

/* GET_REPLICA_LIST of @p key (checked, @p klen bytes) from the master,
 * with @p during run while it answers (NULL: nothing); an answer goes to
 * the location cache @p c (NULL: not cached), which was at @p epoch before
 * the call, and to the tiers (tiers_note; @p spec: the tier's read that
 * ran with the lookup, or NULL).  @p query_p may be NULL (get_size). */
static mc_status_t query_master(mc_store_h s, const char *key, size_t klen,
                                mc_store_query_h *query_p, uint64_t *size_p, mc_loc_cache_t *c,
                                uint64_t epoch, mc_mconn_during_t *during,
                                const mc_store_tier_spec_t *spec)
{
    mc_status_t st;
    mc_mconn_t *conn;
    uint64_t t0;
    mc_wire_get_replica_list_req_t req;
    mc_wire_get_replica_list_resp_t resp;

    memset(&req, 0, sizeof(req));
    req.key.ptr = key;
    req.key.len = (uint32_t)klen;
    t0 = mc_now_ns();
    st = mc_master_pool_call_during_get_replica_list(&s->pool, &conn, &req, &resp, during);
    if (conn == NULL)
        return st;
    if (st == MC_OK) {
        if (size_p != NULL)
            *size_p = resp.size;
        if (query_p != NULL)
            st = query_build(s, key, resp.size, &resp.replicas,
                             lease_deadline(t0, resp.lease_ttl_ms), query_p);
        if ((st == MC_OK) && (query_p != NULL)) {
            if (c != NULL)
                cache_insert(c, *query_p, t0, epoch);
            tiers_note(s, *query_p, key, klen, spec);
        }
    }
    mc_master_pool_put(&s->pool, conn);
    return st;
}

/*
 * Speculative reads.  A put leaves this client knowing where the value
 * went, but with no lease: another client may remove or upsert the key,
 * or eviction take it, and its buffers go to another object.  So that
 * location is cached marked `spec` (mc_store_spec_note), and a lookup that
 * finds it reads the bytes from there into a buffer of its own while the
 * master's answer to the same lookup is on its way, the two round trips
 * overlapping.  The bytes are kept only when the answer lists the replica
 * read, by its id, at the same place: the master gives every value new
 * replica ids (an in-place upsert renumbers them, §5.15 of
 * docs/protocol.md) and never reuses one, so a replica still listed
 * after our read held this value since the put and through the read (or,
 * if the answer came first, is held by the lease it grants until the read
 * is done).  Otherwise the answer is used as any lookup's, and the bytes
 * read are thrown away.  Either way the answer's lease replaces the entry
 * with an ordinary one.
 *
 * Where the caller's buffer for the whole value is known before the
 * lookup (get, get_into, batch_get_into with one buffer per key), the
 * read goes straight into it instead, and a confirmed read leaves the
 * query marked `landed` there: no copy.  A refuted one leaves no byte of
 * another value behind: the range read is zeroed before the ordinary
 * read (or the error) that follows.
 *
 * Sizes (spec_usable): a value of at most MC_SPEC_MAX_BYTES is read
 * speculatively either way; a larger one, up to MC_SPEC_MAX_INTO_BYTES,
 * only straight into the caller's buffer (into our own it would cost a
 * copy of its whole size); above that, or a larger one with no caller's
 * buffer, the lookup goes first, as a miss.  A refuted read of a large
 * value wastes that many bytes of the holder's bandwidth, which is why
 * the entries stop at MC_SPEC_MAX_INTO_BYTES.
 */
#define MC_SPEC_MAX_BYTES      (256u * 1024u)
#define MC_SPEC_MAX_INTO_BYTES (16u * 1024u * 1024u)
/* speculative entries read with one batch lookup at most (the rest wait
 * for the answer, as misses) */
#define MC_SPEC_BATCH     64u
#define MC_SPEC_TTL_NS    (60ull * 1000000000ull)

struct mc_store_query *mc_store_spec_build(mc_store_h s, const char *key, uint64_t size,
                                           const mc_wire_replica_list_t *reps)
{
    mc_wire_replica_t stack[8];
    mc_wire_replica_list_t l;
    struct mc_store_query *q = NULL;

    if ((store_cache(s) == NULL) || (size == 0) || (size > MC_SPEC_MAX_INTO_BYTES) ||
        (reps->n == 0) || (reps->n > MC_ARRAY_SIZE(stack)))
        return NULL;
    /* written and sealed: complete, as the master now says too */
    l.n = reps->n;
    l.v = stack;
    for (uint32_t i = 0; i < reps->n; i++) {
        stack[i]        = reps->v[i];
        stack[i].status = MC_REPLICA_COMPLETE;
    }
    if ((query_build(s, key, size, &l, 0, &q) != MC_OK) || (q->n == 0) || (q->blob_len == 0)) {
        mc_store_query_release(q);
        return NULL;
    }
    q->spec = 1;
    return q;
}

/* May speculative entry @p q be read before its lookup is answered, with
 * @p dst (@p cap bytes; NULL: none) the caller's buffer for the value? */
static int spec_usable(const struct mc_store_query *q, const void *dst, size_t cap)
{
    return (q->size <= MC_SPEC_MAX_BYTES) || ((dst != NULL) && (q->size <= cap));
}

void mc_store_spec_note(mc_store_h s, struct mc_store_query *q)
{
    mc_loc_cache_t *c = store_cache(s);
    if ((c != NULL) && (q != NULL))
        mc_loc_cache_put(c, q->ckey, strlen(q->ckey), q, q->blob_len,
                         mc_now_ns() + MC_SPEC_TTL_NS, mc_loc_cache_epoch(c));
    mc_store_query_release(q);
}

/* Reads of speculative entries made while the master answers the lookup
 * of the same keys. */
typedef struct spec_reads {
    mc_store_h s;
    size_t n;
    size_t *pos;                /* batch lookups: the index of each entry's key */
    struct mc_store_query **sq; /* the entries (owned) */
    uint8_t **bufs;             /* their bytes (owned until adopted, unless into) */
    mc_status_t *st;            /* per read */
    void **dst;                 /* per entry, the caller's buffer for the value, or NULL;
                                 * NULL: none for any */
    size_t *cap;                /* its size */
    uint8_t *into;              /* per entry: read into dst (bufs[i] is dst[i]) */
    mc_mconn_during_t *during;  /* the lookup these reads run within (its request
                                 * goes out once theirs are: mc_mconn_during_send) */
} spec_reads_t;

/* Give up entry @p i's bytes unadopted: a buffer of ours is freed, the
 * caller's loses what was read into it. */
static void spec_drop_bytes(spec_reads_t *sr, size_t i)
{
    if (sr->bufs[i] == NULL)
        return;
    if (sr->into[i])
        memset(sr->bufs[i], 0, (size_t)sr->sq[i]->size);
    else
        free(sr->bufs[i]);
    sr->bufs[i] = NULL;
}

/* Read every entry of spec_reads_t @p arg into a buffer of its own, in one
 * transfer (run while the master answers: mc_mconn_during_t). */
static void spec_read_all(void *arg)
{
    spec_reads_t *sr = arg;
    mc_store_h s     = sr->s;
    mc_te_request_t stack_r[32];
    uint64_t stack_g[32];
    size_t stack_i[32];
    mc_te_request_t *reqs = stack_r;
    uint64_t *gens        = stack_g;
    size_t *idx           = stack_i;
    mc_status_t stack_t[32];
    mc_status_t *tst = stack_t;
    size_t k         = 0;

    if (sr->n > MC_ARRAY_SIZE(stack_r)) {
        reqs = malloc(sr->n * sizeof(*reqs));
        gens = malloc(sr->n * sizeof(*gens));
        idx  = malloc(sr->n * sizeof(*idx));
        tst  = malloc(sr->n * sizeof(*tst));
        if ((reqs == NULL) || (gens == NULL) || (idx == NULL) || (tst == NULL))
            goto out; /* nothing read: every lookup takes its answer */
    }
    for (size_t i = 0; i < sr->n; i++) {
        struct mc_store_query *q = sr->sq[i];
        mc_te_segment_id_t seg;
        sr->into[i] = (sr->dst != NULL) && (sr->dst[i] != NULL) && (q->size <= sr->cap[i]);
        sr->bufs[i] = sr->into[i] ? sr->dst[i] : malloc((size_t)q->size);
        if ((sr->bufs[i] == NULL) || (mc_te_segment_open(s->te, q->r[0].segment, &seg) != MC_OK)) {
            /* nothing read: not "into" either, so nothing to zero */
            if (sr->into[i])
                sr->bufs[i] = NULL;
            sr->into[i] = 0;
            continue;
        }
        reqs[k].op      = MC_TE_READ;
        reqs[k].local   = sr->bufs[i];
        reqs[k].remote  = q->r[0].addr;
        reqs[k].length  = q->size;
        reqs[k].segment = seg;
        gens[k]         = q->r[0].gen;
        idx[k++]        = i;
    }
    if (k > 0) {
        (void)mc_te_transfer_gen_sent(s->te, reqs, gens, k, tst, mc_mconn_during_send,
                                      sr->during);
        for (size_t j = 0; j < k; j++)
            sr->st[idx[j]] = tst[j];
    }
out:
    if (reqs != stack_r) {
        free(reqs);
        free(gens);
        free(idx);
        free(tst);
    }
}

/*
 * Keep the bytes read for entry @p i of @p sr behind @p q, the query the
 * master's answer built, when that answer lists the replica read: the same
 * id at the same place, in a registration of the same generation.  When
 * the read of that listed replica failed (a dead or cut holder: it took
 * the engine's timeout already), the query tries it last, and a query
 * with no other replica fails now with the read's status instead of
 * waiting for the same timeout again: the returned status (MC_OK else).
 */
static mc_status_t spec_adopt(mc_store_h s, spec_reads_t *sr, size_t i,
                              struct mc_store_query *q)
{
    const struct mc_store_query *sq = sr->sq[i];
    const mc_query_replica_t *r     = &sq->r[0];
    uint32_t k                      = 0;

    while ((q != NULL) && (k < q->n)) {
        const mc_query_replica_t *a = &q->r[k];
        if ((a->id == r->id) && (a->addr == r->addr) && (a->gen == r->gen) && !a->nof &&
            (strcmp(a->segment, r->segment) == 0))
            break;
        k++;
    }
    if ((q == NULL) || (k == q->n)) {
        atomic_fetch_add_explicit(&s->metrics.spec_refuted, 1, memory_order_relaxed);
        spec_drop_bytes(sr, i);
        return MC_OK;
    }
    /* The answer proves the replica held this value until the master
     * answered, and its lease keeps it from being rewritten in place or
     * evicted until the lease ends; a read that only finished after that
     * (a holder stopped, packets lost) may have met the memory's next
     * value, so it counts as refuted, as a late read does anywhere
     * (mc_store_query_lease_check). */
    if ((sr->st[i] == MC_OK) && (sr->bufs[i] != NULL) && (q->copy == NULL) &&
        (q->landed == NULL) && (q->size == sq->size) && (mc_now_ns() <= q->deadline_ns)) {
        if (sr->into[i]) {
            q->landed = sr->bufs[i];
        } else {
            q->disk_bytes = sr->bufs[i]; /* freed with the query */
            q->copy       = sr->bufs[i];
        }
        sr->bufs[i] = NULL;
        atomic_fetch_add_explicit(&s->metrics.spec_confirmed, 1, memory_order_relaxed);
        return MC_OK;
    }
    atomic_fetch_add_explicit(&s->metrics.spec_refuted, 1, memory_order_relaxed);
    int read = sr->bufs[i] != NULL;
    spec_drop_bytes(sr, i);
    /* not read (out of memory), or "not here" (the holder's generation
     * moved on since: the ordinary read asks again, cached_read_again):
     * read as the answer says */
    if ((sr->st[i] == MC_OK) || !read || (sr->st[i] == MC_INVALID_READ))
        return MC_OK;
    if ((q->n == 1) && (q->disk_path == NULL)) {
        mc_set_error_detail("reading %s from %s failed: %s", q->ckey, r->segment,
                            mc_status_name(sr->st[i]));
        return sr->st[i];
    }
    if (k + 1 < q->n) { /* the failed one last */
        mc_query_replica_t failed = q->r[k];
        memmove(&q->r[k], &q->r[k + 1], (q->n - k - 1) * sizeof(q->r[0]));
        q->r[q->n - 1] = failed;
    }
    return MC_OK;
}

static void spec_reads_free(spec_reads_t *sr)
{
    for (size_t i = 0; i < sr->n; i++) {
        spec_drop_bytes(sr, i); /* not adopted (the lookup failed) */
        free(sr->sq[i]);
    }
}

/*
 * The lookup of @p key when the cache holds a speculative entry @p sq
 * (consumed): GET_REPLICA_LIST with the read of @p sq made meanwhile,
 * answered as do_query_ex answers (*query_p on MC_OK), its bytes already
 * read when the answer confirmed them.
 */
static mc_status_t spec_query(mc_store_h s, mc_loc_cache_t *c, const char *key, size_t klen,
                              struct mc_store_query *sq, uint64_t epoch, void *dst, size_t cap,
                              mc_store_query_h *query_p)
{
    uint8_t *buf        = NULL;
    uint8_t into        = 0;
    mc_status_t rst     = MC_TRANSFER_FAIL, st;
    spec_reads_t sr     = {s, 1, NULL, &sq, &buf, &rst, &dst, &cap, &into, NULL};
    mc_mconn_during_t d = {spec_read_all, &sr, 1, NULL, MC_OK};

    sr.during = &d;

    st = query_master(s, key, klen, query_p, NULL, c, epoch, &d, NULL);
    if (st == MC_OK) {
        /* the lease's entry has replaced ours */
        st = spec_adopt(s, &sr, 0, *query_p);
        if (st != MC_OK) {
            mc_store_query_release(*query_p);
            *query_p = NULL;
        }
    } else {
        mc_loc_cache_drop(c, key, klen);
        spec_adopt(s, &sr, 0, NULL);
    }
    spec_reads_free(&sr);
    return st;
}

/* GET_REPLICA_LIST; @p query_p may be NULL (get_size).  With @p use_cache,
 * answered from the location cache when it can be, and a new answer is
 * cached; a speculative read then goes straight into @p dst (@p cap
 * bytes; NULL: none), the buffer the caller reads the whole value into. */
static mc_status_t do_query_to(mc_store_h s, const char *key, mc_store_query_h *query_p,
                               uint64_t *size_p, int use_cache, void *dst, size_t cap)
{
    mc_status_t st;
    size_t klen;
    mc_loc_cache_t *c = ((query_p != NULL) && use_cache) ? store_cache(s) : NULL;
    uint64_t epoch    = 0;

    st = mc_store_check_key(key, &klen);
    if (st != MC_OK)
        return st;
    if (c != NULL) {
        epoch                    = mc_loc_cache_epoch(c);
        struct mc_store_query *q = cache_lookup(c, key, klen, 1, dst, cap);
        if ((q != NULL) && !q->spec) {
            *query_p = q;
            return MC_OK;
        }
        if (q != NULL) {
            st = spec_query(s, c, key, klen, q, epoch, dst, cap, query_p);
            if ((st == MC_OK) && (size_p != NULL))
                *size_p = (*query_p)->size;
            return st;
        }
    }
    return query_master(s, key, klen, query_p, size_p, c, epoch, NULL, NULL);
}

static mc_status_t do_query_ex(mc_store_h s, const char *key, mc_store_query_h *query_p,
                               uint64_t *size_p, int use_cache)
{
    return do_query_to(s, key, query_p, size_p, use_cache, NULL, 0);
}

/* A tier's read (the SSD tier's hinted record) runs while the master
 * answers; the tier keeps its bytes only when the answer names that very
 * file replica (mc_store_tier_hooks_t.speculated). */
int mc_store_query_spec(mc_store_h s, const char *key, void *buf, size_t cap,
                        mc_store_query_h *query_p, int *have_p, mc_status_t *st_p)
{
    mc_loc_cache_t *c = store_cache(s);
    struct mc_store_query *q;
    mc_store_tier_spec_t sp;
    mc_store_file_ref_t f;
    uint64_t epoch = 0;
    size_t klen;

    *have_p = 0;
    if ((buf == NULL) || (mc_store_check_key(key, &klen) != MC_OK))
        return 0;
    mc_str_t k = {key, (uint32_t)klen};
    if (!mc_store_tiers_speculate(s, k, buf, cap, &sp))
        return 0;
    if (c != NULL) {
        q = cache_lookup(c, key, klen, 0, NULL, 0);
        if (q != NULL) {
            mc_store_tiers_speculated(&sp, NULL, 0);
            *query_p = q;
            *st_p    = MC_OK;
            return 1;
        }
        epoch = mc_loc_cache_epoch(c);
    }
    /* the master looks the key up while the record is read */
    mc_mconn_during_t d = {sp.run, &sp, 0, NULL, MC_OK};
    *st_p               = query_master(s, key, klen, query_p, NULL, c, epoch, &d, &sp);
    if (*st_p == MC_OK) {
        q       = *query_p;
        /* kept only from a read that ran, of the record the answer names */
        *have_p = mc_store_tiers_speculated(&sp, query_file(q, &f), q->size) &&
                  (d.fn == NULL);
    } else {
        /* no answer: the tier forgets what its read was guessed from */
        mc_store_tiers_note(s, k, 0, NULL, &sp);
        mc_store_tiers_speculated(&sp, NULL, 0);
    }
    return 1;
}

static mc_status_t do_query(mc_store_h s, const char *key, mc_store_query_h *query_p,
                            uint64_t *size_p)
{
    return do_query_ex(s, key, query_p, size_p, 0);
}

/*
 * Read [offset, offset+len) into buf from replica @p first, falling back
 * to the ones after it.  @p first_err, when not MC_OK, is the error that
 * made the caller skip earlier replicas.
 */
static mc_status_t read_from(mc_store_h s, mc_store_query_h q, uint32_t first, uint64_t offset,
                             void *buf, size_t len, mc_status_t first_err)
{
    mc_status_t st = first_err;
    char detail[512];

    detail[0] = '\0';
    for (uint32_t k = first; k < q->n; k++) {
        mc_te_segment_id_t seg;
        mc_te_request_t req;
        mc_status_t rs = mc_te_segment_open(s->te, q->r[k].segment, &seg);
        if (rs == MC_OK) {
            mc_alloc_block_t block;
            void *staged = NULL;
            /* over rdma into memory without an lkey: by READ into the
             * staging buffer, then a copy (mc_store_rdma_stage_wanted) */
            if (mc_store_rdma_stage_wanted(s, buf, len, seg) &&
                (mc_store_lbuf_alloc(s, len, &staged, &block) != MC_OK))
                staged = NULL;
            req.op      = MC_TE_READ;
            req.local   = (staged != NULL) ? staged : buf;
            req.remote  = q->r[k].addr + offset;
            req.length  = len;
            req.segment = seg;
            rs          = mc_te_transfer_gen(s->te, &req, &q->r[k].gen, 1, NULL);
            if ((rs == MC_OK) && (staged != NULL))
                memcpy(buf, staged, len);
            if (staged != NULL)
                mc_store_lbuf_free(s, &block);
            if (rs == MC_OK)
                return MC_OK;
        }
        mc_debug("read from replica on %s failed: %s (%s)%s", q->r[k].segment,
                 mc_status_name(rs), mc_last_error_detail(),
                 (k + 1 < q->n) ? "; trying the next replica" : "");
        if (st == MC_OK) {
            st = rs;
            snprintf(detail, sizeof(detail), "reading from %s failed: %s", q->r[k].segment,
                     mc_last_error_detail());
        }
    }
    if (detail[0] != '\0')
        mc_set_error_detail("%s", detail);
    if (st == MC_OK) {
        mc_set_error_detail("no replica left to read");
        st = MC_TRANSFER_FAIL;
    }
    return st;
}

int mc_store_query_landed(mc_store_query_h q, const void *buf, uint64_t offset, uint64_t len)
{
    int done = (q->landed != NULL) && (q->landed == buf) && (offset == 0) && (len == q->size);
    q->landed = NULL; /* once: the caller may change the buffer afterwards */
    return done;
}

mc_status_t mc_store_query_lease_check(mc_store_query_h q)
{
    if (mc_now_ns() > q->deadline_ns) {
        mc_set_error_detail("read finished after the lease expired; discard the data");
        return MC_LEASE_EXPIRED;
    }
    return MC_OK;
}

/* Lookups and reads after the first, for a read refused as "not here":
 * the holder's generation moved on (memory reused under another reader,
 * a remount) or the object went elsewhere.  Each asks the master again;
 * a segment whose memory is freed under leases and reused all the time
 * moves its generation on between an answer and the read now and then, so
 * after a few tries each waits a little longer (mc_store_read_again_pause),
 * at most about a second in all. */
void mc_store_read_again_pause(int tries)
{
    if (tries >= 4) {
        unsigned shift = (unsigned)MC_MIN(tries - 4, 5);
        struct timespec ts = {0, (long)(50000u << shift)}; /* 50 us .. 1.6 ms */
        nanosleep(&ts, NULL);
    }
}

static mc_status_t do_query_read_once(mc_store_h s, mc_store_query_h q, uint64_t offset,
                                      void *buf, size_t len);

/*
 * A read failed with @p st.  One from the location cache (the holder
 * answered "not here", a transfer failed, the lease ran out), or any
 * refused as "not here" (INVALID_READ: the holder's generation moved on
 * since the master answered, docs/architecture.md "Proof of identity"):
 * drop the entry and read again from where the master says the object is
 * now, up to MC_READ_AGAIN_TRIES times while the answer is "not here".  The
 * caller sized its buffer for q->size, so an object that changed size
 * meanwhile fails the read.  Other failures just return @p st.
 */
static mc_status_t cached_read_again(mc_store_h s, mc_store_query_h q, uint64_t offset,
                                     void *buf, size_t len, mc_status_t st)
{
    if ((q->ckey == NULL) || (!q->cached && (st != MC_INVALID_READ)))
        return st;
    for (int tries = 0; tries < MC_READ_AGAIN_TRIES; tries++) {
        mc_store_query_h fq = NULL;
        mc_store_read_again_pause(tries);
        mc_debug("read of %s failed (%s); asking the master again", q->ckey,
                 mc_status_name(st));
        mc_store_cache_drop(s, q->ckey);
        st = do_query_ex(s, q->ckey, &fq, NULL, 0);
        if (st != MC_OK)
            return st;
        if (fq->size != q->size) {
            mc_set_error_detail("%s changed from %llu to %llu bytes while it was read; read it "
                                "again", q->ckey, (unsigned long long)q->size,
                                (unsigned long long)fq->size);
            st = MC_LEASE_EXPIRED;
        } else {
            st = do_query_read_once(s, fq, offset, buf, len);
        }
        mc_store_query_release(fq);
        if (st != MC_INVALID_READ)
            return st;
    }
    return st;
}

static mc_status_t do_query_read_once(mc_store_h s, mc_store_query_h q, uint64_t offset,
                                      void *buf, size_t len)
{
    mc_status_t st;

    if (q == NULL) {
        mc_set_error_detail("query is NULL");
        return MC_INVALID_PARAMS;
    }
    if ((offset > q->size) || (len > q->size - offset)) {
        mc_set_error_detail("range [%llu, +%zu) is outside the %llu-byte object",
                            (unsigned long long)offset, len, (unsigned long long)q->size);
        return MC_INVALID_PARAMS;
    }
    if (len == 0)
        return MC_OK;
    if (buf == NULL) {
        mc_set_error_detail("buf is NULL");
        return MC_INVALID_PARAMS;
    }
    if (mc_store_query_landed(q, buf, offset, len))
        return MC_OK;
    if ((q->copy == NULL) && (q->n == 0)) {
        /* a disk-only object: read whole, straight into the caller's buffer
         * (one copy, as a read of the file would); a part needs the whole
         * record once, for its checksum */
        if ((offset == 0) && (len == q->size))
            return mc_store_query_disk_read(s, q, buf);
        st = mc_store_query_load_disk(s, q);
        if (st != MC_OK)
            return st;
    }
    if (q->copy != NULL) {
        memcpy(buf, q->copy + offset, len);
        return MC_OK;
    }
    st = read_from(s, q, 0, offset, buf, len, MC_OK);
    if ((st != MC_OK) && q->disk_dfs) {
        /* every memory holder failed (dead, not yet expired by the
         * master): the DFS record outlives them (docs/tiers.md §6) */
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        if ((offset == 0) && (len == q->size)) {
            if (mc_store_query_disk_read(s, q, buf) == MC_OK)
                return MC_OK;
        } else if (read_whole_disk(s, q) == MC_OK) {
            memcpy(buf, q->disk_bytes + offset, len);
            return MC_OK;
        }
        mc_set_error_detail("%s", detail);
    }
    if (st == MC_OK)
        st = mc_store_query_lease_check(q);
    return st;
}

static mc_status_t do_query_read(mc_store_h s, mc_store_query_h q, uint64_t offset, void *buf,
                                 size_t len)
{
    mc_status_t st = do_query_read_once(s, q, offset, buf, len);
    if ((st == MC_OK) || (q == NULL) || (st == MC_INVALID_PARAMS))
        return st;
    return cached_read_again(s, q, offset, buf, len, st);
}

/* ---- public --------------------------------------------------------------------- */

/* Queries of whole copies (a backend with no replicas of its own, the
 * dummy: read.h).  The reads that follow are copies. */
void mc_store_queries_from_copies(mc_store_h s, const char *const *keys, size_t n, void **mems,
                                  uint64_t *sizes, mc_store_describe_func_t describe,
                                  mc_store_query_h *queries, mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        struct mc_store_query *q = (mems != NULL) ? mems[i] : NULL;
        queries[i]               = NULL;
        if ((statuses[i] != MC_OK) || (q == NULL)) {
            free(q);
            continue;
        }
        q->size        = sizes[i];
        q->deadline_ns = UINT64_MAX;
        q->n           = 0;
        q->copy        = (const uint8_t *)q + MC_STORE_QUERY_COPY_HDR;
        q->disk_path   = NULL;
        q->disk_bytes  = NULL;
        q->owner       = s;
        q->describe    = describe;
        q->key         = strdup(keys[i]);
        q->descs       = NULL;
        q->blob_len    = 0;
        q->ckey        = NULL;
        q->cached      = 0;
        q->spec        = 0;
        q->landed      = NULL;
        if (q->key == NULL) {
            free(q);
            mc_set_error_detail("out of memory");
            statuses[i] = MC_INTERNAL_ERROR;
            continue;
        }
        queries[i]     = q;
    }
    free(mems);
    free(sizes);
}

mc_status_t mc_emb_query(mc_store_h s, const char *key, mc_store_query_h *query_p, int use_cache)
{
    mc_status_t st;

    uint64_t t0 = mc_store_metrics_now_us();

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = do_query_ex(s, key, query_p, NULL, use_cache);
    /* a lookup that fails is the whole get (metrics); one that succeeds
     * is counted by the read that follows */
    if (st != MC_OK)
        mc_store_metrics_record(&s->metrics, MC_MOP_GET, t0, 1, 1, 0);
    mc_store_leave(s);
    return st;
}

static mc_status_t store_query(mc_store_h s, const char *key, mc_store_query_h *query_p,
                               int use_cache)
{
    if (query_p == NULL) {
        mc_set_error_detail("query_p is NULL");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, query, key, query_p, use_cache);
}

MC_API mc_status_t mc_store_query(mc_store_h s, const char *key, mc_store_query_h *query_p)
{
    return store_query(s, key, query_p, 0);
}

MC_API mc_status_t mc_store_query_cached(mc_store_h s, const char *key,
                                         mc_store_query_h *query_p)
{
    return store_query(s, key, query_p, 1);
}

MC_API uint64_t mc_store_query_size(mc_store_query_h q)
{
    return (q != NULL) ? q->size : 0;
}

MC_API void mc_store_query_release(mc_store_query_h q)
{
    if ((q != NULL) && (q->owner != NULL)) { /* a copy query */
        free(q->key);
        free(q->descs);
    }
    if (q != NULL)
        free(q->disk_bytes);
    free(q);
}

MC_API mc_status_t mc_store_query_read(mc_store_h s, mc_store_query_h q, uint64_t offset,
                                       void *buf, size_t len)
{
    if ((q != NULL) && (q->owner != NULL)) /* a copy query: its bytes are here */
        return do_query_read(s, q, offset, buf, len);
    uint64_t t0    = mc_store_metrics_now_us();
    mc_status_t st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = do_query_read(s, q, offset, buf, len);
    mc_store_metrics_record(&s->metrics, MC_MOP_GET, t0, 1, st != MC_OK,
                            (st == MC_OK) ? len : 0);
    mc_store_leave(s);
    return st;
}

mc_status_t mc_emb_get(mc_store_h s, const char *key, void *buf, size_t cap, uint64_t *size_p)
{
    uint64_t t0 = mc_store_metrics_now_us();
    mc_status_t st;
    mc_store_query_h q = NULL;
    int have           = 0;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if (!mc_store_query_spec(s, key, buf, cap, &q, &have, &st))
        st = do_query_to(s, key, &q, NULL, 1, buf, cap);
    if (st != MC_OK)
        goto out;
    if (q->size > cap) {
        mc_set_error_detail("object is %llu bytes, buffer holds %zu",
                            (unsigned long long)q->size, cap);
        if (size_p != NULL)
            *size_p = q->size;
        st = MC_BUFFER_OVERFLOW;
        goto out;
    }
    if (!have)
        st = do_query_read(s, q, 0, buf, (size_t)q->size);
    if ((st == MC_OK) && (size_p != NULL))
        *size_p = q->size;
out:
    mc_store_metrics_record(&s->metrics, MC_MOP_GET, t0, 1, st != MC_OK,
                            (st == MC_OK) ? q->size : 0);
    mc_store_query_release(q);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_get(mc_store_h s, const char *key, void *buf, size_t cap,
                                uint64_t *size_p)
{
    return MC_STORE_DISPATCH(s, get, key, buf, cap, size_p);
}

mc_status_t mc_emb_get_size(mc_store_h s, const char *key, uint64_t *size_p)
{
    mc_status_t st;
    uint64_t size = 0;

    if (size_p == NULL) {
        mc_set_error_detail("size_p is NULL");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = do_query(s, key, NULL, &size);
    if (st == MC_OK)
        *size_p = size;
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_get_size(mc_store_h s, const char *key, uint64_t *size_p)
{
    return MC_STORE_DISPATCH(s, get_size, key, size_p);
}

static mc_status_t batch_query(mc_store_h s, const char *const *keys, size_t n,
                               mc_store_query_h *queries, mc_status_t *statuses,
                               spec_reads_t *sr);

mc_status_t mc_store_do_batch_query(mc_store_h s, const char *const *keys, size_t n,
                                    mc_store_query_h *queries, mc_status_t *statuses)
{
    return batch_query(s, keys, n, queries, statuses, NULL);
}

/* mc_store_do_batch_query, overlapping the reads of @p sr (NULL: none)
 * with the lookup, and keeping what the answers confirm (spec_adopt). */
static mc_status_t batch_query(mc_store_h s, const char *const *keys, size_t n,
                               mc_store_query_h *queries, mc_status_t *statuses,
                               spec_reads_t *sr)
{
    mc_status_t st   = MC_OK;
    mc_mconn_t *conn = NULL;
    mc_str_t wkeys_stack[64];
    size_t sel_stack[64];
    mc_str_t *wkeys = wkeys_stack;
    size_t *sel     = sel_stack;
    size_t nsel     = 0;
    uint64_t t0, deadline;
    mc_wire_batch_get_replica_list_req_t req;
    mc_wire_batch_get_replica_list_resp_t resp;

    for (size_t i = 0; i < n; i++) {
        queries[i]  = NULL;
        statuses[i] = MC_OK;
    }
    if (n == 0)
        return MC_OK;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    /* the common small batch needs no allocation */
    if (n > 64) {
        wkeys = malloc(n * sizeof(*wkeys));
        sel   = malloc(n * sizeof(*sel));
        if ((wkeys == NULL) || (sel == NULL)) {
            mc_set_error_detail("out of memory for a batch of %zu keys", n);
            st = MC_INTERNAL_ERROR;
            goto fail;
        }
    }
    nsel = mc_store_select_keys(keys, n, statuses, wkeys, sel);
    if (nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.keys.n = (uint32_t)nsel;
    req.keys.v = wkeys;
    t0 = mc_now_ns();
    mc_mconn_during_t d = {spec_read_all, sr, 1, NULL, MC_OK};
    if (sr != NULL)
        sr->during = &d;
    st = mc_master_pool_call_during_batch_get_replica_list(
        &s->pool, &conn, &req, &resp, ((sr != NULL) && (sr->n > 0)) ? &d : NULL);
    if ((st == MC_OK) && (resp.results.n != nsel)) {
        mc_set_error_detail("BATCH_GET_REPLICA_LIST answered %u results for %zu keys",
                            (unsigned)resp.results.n, nsel);
        conn->broken = 1;
        st           = MC_RPC_FAIL;
    }
    if (st != MC_OK)
        goto fail;
    deadline = lease_deadline(t0, resp.lease_ttl_ms);
    for (size_t j = 0; j < nsel; j++) {
        const mc_wire_result_t *r = &resp.results.v[j];
        size_t i                  = sel[j];
        if (r->status != MC_OK) {
            statuses[i] = (r->status < 0) ? (mc_status_t)r->status : MC_RPC_FAIL;
            continue;
        }
        statuses[i] = query_build(s, keys[i], r->size, &r->replicas, deadline, &queries[i]);
        if (statuses[i] == MC_OK)
            tiers_note(s, queries[i], keys[i], strlen(keys[i]), NULL);
    }
    for (size_t j = 0; (sr != NULL) && (j < sr->n); j++) {
        size_t i = sr->pos[j];
        mc_status_t as = spec_adopt(s, sr, j, (statuses[i] == MC_OK) ? queries[i] : NULL);
        if (as != MC_OK) {
            mc_store_query_release(queries[i]);
            queries[i]  = NULL;
            statuses[i] = as;
        }
    }
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        if (statuses[i] == MC_OK)
            statuses[i] = st;
out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (wkeys != wkeys_stack)
        free(wkeys);
    if (sel != sel_stack)
        free(sel);
    return st;
}

mc_status_t mc_store_do_batch_query_cached(mc_store_h s, const char *const *keys, size_t n,
                                           mc_store_query_h *queries, mc_status_t *statuses)
{
    return mc_store_do_batch_query_cached_to(s, keys, n, queries, statuses, NULL, NULL);
}

mc_status_t mc_store_do_batch_query_cached_to(mc_store_h s, const char *const *keys, size_t n,
                                              mc_store_query_h *queries, mc_status_t *statuses,
                                              void *const *dsts, const size_t *caps)
{
    mc_loc_cache_t *c = store_cache(s);
    const char *mk_stack[64];
    size_t mi_stack[64];
    mc_store_query_h mq_stack[64];
    mc_status_t ms_stack[64];
    const char **mk     = mk_stack;
    size_t *mi          = mi_stack;
    mc_store_query_h *mq = mq_stack;
    mc_status_t *ms     = ms_stack;
    mc_status_t st      = MC_OK;
    size_t m            = 0;
    uint64_t epoch, t0;
    /* speculative entries (spec_query): read while the misses are looked up */
    size_t sp_pos[MC_SPEC_BATCH];
    struct mc_store_query *sp_q[MC_SPEC_BATCH];
    uint8_t *sp_buf[MC_SPEC_BATCH];
    mc_status_t sp_st[MC_SPEC_BATCH];
    void *sp_dst[MC_SPEC_BATCH];
    size_t sp_cap[MC_SPEC_BATCH];
    uint8_t sp_into[MC_SPEC_BATCH];
    spec_reads_t sr = {s, 0, sp_pos, sp_q, sp_buf, sp_st, sp_dst, sp_cap, sp_into, NULL};

    if ((c == NULL) || (n == 0) || (n > MC_WIRE_MAX_LIST))
        return mc_store_do_batch_query(s, keys, n, queries, statuses);
    if (n > 64) {
        mk = malloc(n * sizeof(*mk));
        mi = malloc(n * sizeof(*mi));
        mq = malloc(n * sizeof(*mq));
        ms = malloc(n * sizeof(*ms));
        if ((mk == NULL) || (mi == NULL) || (mq == NULL) || (ms == NULL)) {
            free(mk);
            free(mi);
            free(mq);
            free(ms);
            return mc_store_do_batch_query(s, keys, n, queries, statuses);
        }
    }
    epoch = mc_loc_cache_epoch(c);
    t0    = mc_now_ns();
    for (size_t i = 0; i < n; i++) {
        size_t klen;
        queries[i]  = NULL;
        statuses[i] = MC_OK;
        if ((keys[i] != NULL) && (strlen(keys[i]) > 0) &&
            (mc_store_check_key(keys[i], &klen) == MC_OK))
            queries[i] = cache_lookup(c, keys[i], klen, sr.n < MC_SPEC_BATCH,
                                      (dsts != NULL) ? dsts[i] : NULL,
                                      (dsts != NULL) ? caps[i] : 0);
        if ((queries[i] != NULL) && queries[i]->spec) {
            sp_q[sr.n]     = queries[i];
            sp_buf[sr.n]   = NULL;
            sp_st[sr.n]    = MC_TRANSFER_FAIL;
            sp_dst[sr.n]   = (dsts != NULL) ? dsts[i] : NULL;
            sp_cap[sr.n]   = (dsts != NULL) ? caps[i] : 0;
            sp_into[sr.n]  = 0;
            sp_pos[sr.n++] = m;
            queries[i]     = NULL;
        }
        if (queries[i] == NULL) {
            mk[m]   = keys[i];
            mi[m++] = i;
        }
    }
    if (m > 0) {
        st = batch_query(s, mk, m, mq, ms, &sr);
        spec_reads_free(&sr);
        for (size_t j = 0; j < m; j++) {
            queries[mi[j]]  = mq[j];
            statuses[mi[j]] = ms[j];
            if (ms[j] == MC_OK)
                cache_insert(c, mq[j], t0, epoch);
        }
    }
    if (mk != mk_stack) {
        free(mk);
        free(mi);
        free(mq);
        free(ms);
    }
    return st;
}

mc_status_t mc_emb_batch_query(mc_store_h s, const char *const *keys, size_t n,
                               mc_store_query_h *queries, mc_status_t *statuses, int use_cache)
{
    mc_status_t st;

    st = mc_store_enter(s);
    if (st != MC_OK) {
        for (size_t i = 0; i < n; i++) {
            queries[i]  = NULL;
            statuses[i] = st;
        }
        return st;
    }
    if (use_cache)
        mc_store_do_batch_query_cached(s, keys, n, queries, statuses);
    else
        mc_store_do_batch_query(s, keys, n, queries, statuses);
    mc_store_leave(s);
    return mc_store_first_error(statuses, n);
}

static mc_status_t store_batch_query(mc_store_h s, const char *const *keys, size_t n,
                                     mc_store_query_h *queries, mc_status_t *statuses,
                                     int use_cache)
{
    if ((n > 0) && ((keys == NULL) || (queries == NULL) || (statuses == NULL))) {
        mc_set_error_detail("keys, queries and statuses are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, batch_query, keys, n, queries, statuses, use_cache);
}

MC_API mc_status_t mc_store_batch_query(mc_store_h s, const char *const *keys, size_t n,
                                        mc_store_query_h *queries, mc_status_t *statuses)
{
    return store_batch_query(s, keys, n, queries, statuses, 0);
}

MC_API mc_status_t mc_store_batch_query_cached(mc_store_h s, const char *const *keys, size_t n,
                                               mc_store_query_h *queries,
                                               mc_status_t *statuses)
{
    return store_batch_query(s, keys, n, queries, statuses, 1);
}

MC_API mc_status_t mc_store_batch_query_read(mc_store_h s, mc_store_query_h const *queries,
                                             size_t n, void *const *bufs,
                                             mc_status_t *statuses)
{
    mc_status_t st;
    mc_te_request_t *reqs = NULL;
    uint64_t *gens        = NULL;
    mc_status_t *tst      = NULL;
    size_t *owner         = NULL;
    size_t nreq           = 0;
    uint64_t t0           = mc_store_metrics_now_us();
    uint64_t bytes        = 0;

    if ((n > 0) && ((queries == NULL) || (bufs == NULL) || (statuses == NULL))) {
        mc_set_error_detail("queries, bufs and statuses are required");
        return MC_INVALID_PARAMS;
    }
    if ((n > 0) && (queries[0] != NULL) && (queries[0]->owner != NULL)) {
        /* copy queries hold their bytes */
        for (size_t i = 0; i < n; i++)
            statuses[i] = (queries[i] == NULL)
                              ? MC_INVALID_PARAMS
                              : do_query_read(s, queries[i], 0, bufs[i], (size_t)queries[i]->size);
        return mc_store_first_error(statuses, n);
    }
    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (n == 0)
        goto out;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u reads", (unsigned)MC_WIRE_MAX_LIST);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INVALID_PARAMS;
        goto out;
    }

    reqs  = malloc(n * sizeof(*reqs));
    gens  = malloc(n * sizeof(*gens));
    tst   = malloc(n * sizeof(*tst));
    owner = malloc(n * sizeof(*owner));
    if ((reqs == NULL) || (gens == NULL) || (tst == NULL) || (owner == NULL)) {
        mc_set_error_detail("out of memory for %zu reads", n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        goto out;
    }

    /* first choice of every query, all in one transfer */
    for (size_t i = 0; i < n; i++) {
        mc_store_query_h q = queries[i];
        mc_te_segment_id_t seg;

        statuses[i] = MC_OK;
        if (q == NULL) {
            mc_set_error_detail("query %zu is NULL (its lookup failed)", i);
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (q->size == 0)
            continue;
        if (bufs[i] == NULL) {
            mc_set_error_detail("buffer %zu is NULL", i);
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (q->n == 0) {
            /* disk-only: straight from its bucket file */
            statuses[i] = do_query_read(s, q, 0, bufs[i], (size_t)q->size);
            continue;
        }
        st = mc_te_segment_open(s->te, q->r[0].segment, &seg);
        if (st != MC_OK) {
            /* retried below from the next replica */
            statuses[i] = read_from(s, q, 1, 0, bufs[i], (size_t)q->size, st);
            if (statuses[i] == MC_OK)
                statuses[i] = mc_store_query_lease_check(q);
            if (statuses[i] != MC_OK)
                statuses[i] = cached_read_again(s, q, 0, bufs[i], (size_t)q->size,
                                                statuses[i]);
            continue;
        }
        reqs[nreq].op      = MC_TE_READ;
        reqs[nreq].local   = bufs[i];
        reqs[nreq].remote  = q->r[0].addr;
        reqs[nreq].length  = q->size;
        reqs[nreq].segment = seg;
        gens[nreq]         = q->r[0].gen;
        tst[nreq]          = MC_TRANSFER_FAIL;
        owner[nreq++]      = i;
    }
    if (nreq > 0) {
        st = mc_te_transfer_gen(s->te, reqs, gens, nreq, tst);
        for (size_t k = 0; k < nreq; k++) {
            size_t i           = owner[k];
            mc_store_query_h q = queries[i];
            if ((st != MC_OK) && (tst[k] != MC_OK))
                statuses[i] = read_from(s, q, 1, 0, bufs[i], (size_t)q->size,
                                        (tst[k] < 0) ? tst[k] : st);
            if (statuses[i] == MC_OK)
                statuses[i] = mc_store_query_lease_check(q);
            if (statuses[i] != MC_OK)
                statuses[i] = cached_read_again(s, q, 0, bufs[i], (size_t)q->size,
                                                statuses[i]);
        }
    }

out:
    free(reqs);
    free(gens);
    free(tst);
    free(owner);
    for (size_t i = 0; i < n; i++)
        if ((statuses[i] == MC_OK) && (queries[i] != NULL))
            bytes += queries[i]->size;
    if (n > 0)
        mc_store_metrics_record(&s->metrics, MC_MOP_BATCH_GET, t0, n,
                                mc_store_first_error(statuses, n) != MC_OK, bytes);
    mc_store_leave(s);
    return mc_store_first_error(statuses, n);
}

/* ---- existence ------------------------------------------------------------------- */

int mc_emb_exist(mc_store_h s, const char *key)
{
    mc_status_t st;
    size_t klen;
    mc_mconn_t *conn;
    mc_wire_exist_key_req_t req;
    mc_wire_exist_key_resp_t resp;
    int ret;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_check_key(key, &klen);
    if (st != MC_OK) {
        ret = st;
        goto out;
    }
    memset(&req, 0, sizeof(req));
    req.key.ptr = key;
    req.key.len = (uint32_t)klen;
    st = mc_master_pool_call_exist_key(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (st == MC_OK)
        ret = resp.exists ? 1 : 0;
    else if (st == MC_OBJECT_NOT_FOUND)
        ret = 0;
    else
        ret = st;
out:
    mc_store_leave(s);
    return ret;
}

MC_API int mc_store_exist(mc_store_h s, const char *key)
{
    return MC_STORE_DISPATCH(s, exist, key);
}

mc_status_t mc_emb_batch_exist(mc_store_h s, const char *const *keys, size_t n, int *results)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *wkeys  = NULL;
    size_t *sel      = NULL;
    size_t nsel      = 0;
    mc_status_t first = MC_OK;
    mc_wire_batch_exist_key_req_t req;
    mc_wire_batch_exist_key_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK) {
        for (size_t i = 0; i < n; i++)
            results[i] = st;
        return st;
    }
    if (n == 0)
        goto out;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    wkeys = malloc(n * sizeof(*wkeys));
    sel   = malloc(n * sizeof(*sel));
    if ((wkeys == NULL) || (sel == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        size_t klen;
        results[i] = mc_store_check_key(keys[i], &klen);
        if (results[i] != MC_OK)
            continue;
        wkeys[nsel] = (mc_str_t){keys[i], (uint32_t)klen};
        sel[nsel++] = i;
    }
    if (nsel == 0)
        goto out;
    memset(&req, 0, sizeof(req));
    req.keys.n = (uint32_t)nsel;
    req.keys.v = wkeys;
    st = mc_master_pool_call_batch_exist_key(&s->pool, &conn, &req, &resp);
    if ((st == MC_OK) && (resp.results.n != nsel)) {
        mc_set_error_detail("BATCH_EXIST_KEY answered %u results for %zu keys",
                            (unsigned)resp.results.n, nsel);
        conn->broken = 1;
        st           = MC_RPC_FAIL;
    }
    if (st != MC_OK)
        goto fail;
    for (size_t j = 0; j < nsel; j++) {
        int32_t v = resp.results.v[j];
        if (v == MC_OBJECT_NOT_FOUND)
            v = 0;
        else if (v > 1)
            v = MC_RPC_FAIL; /* not 1, 0 or an error: garbage */
        results[sel[j]] = v;
    }
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        if ((nsel == 0) || (results[i] == MC_OK))
            results[i] = st;
out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    free(wkeys);
    free(sel);
    mc_store_leave(s);
    for (size_t i = 0; i < n; i++) {
        if (results[i] < 0) {
            first = (mc_status_t)results[i];
            break;
        }
    }
    return first;
}

MC_API mc_status_t mc_store_batch_exist(mc_store_h s, const char *const *keys, size_t n,
                                        int *results)
{
    if ((n > 0) && ((keys == NULL) || (results == NULL))) {
        mc_set_error_detail("keys and results are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, batch_exist, keys, n, results);
}

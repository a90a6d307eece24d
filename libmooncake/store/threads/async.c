/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The asynchronous completion queue of a store handle (store.h,
 * "Asynchronous completion queue").
 *
 * Callers submit tagged requests; library threads (workers) run them with
 * the store's public calls; completions wait in a list until
 * mc_store_aq_reap() takes them.  The queue's eventfd is readable exactly
 * while that list is not empty: a worker writes it when the list goes from
 * empty to not empty, reap drains it when it empties the list, both under
 * q->mu.  So a loop watching it (asyncio's add_reader, epoll) never misses
 * a completion and never wakes for one already taken.
 *
 * Why it is fast: one get costs a master round trip for its lookup and a
 * transfer for its bytes; a thousand gets one by one cost a thousand of
 * each, and a thousand threads to wait in.  A worker takes everything
 * queued at once (at most AQ_TAKE requests; it wakes an idle worker for
 * the rest) and runs the single-key requests of one kind as one batch
 * call: gets as one mc_store_batch_query_cached() and one
 * mc_store_batch_query_read(), get_into as mc_store_batch_get_into_multi(),
 * exists as mc_store_batch_exist(), removes (of one force) as
 * mc_store_batch_remove(), puts and upserts as mc_store_put_batch() /
 * mc_store_upsert_batch(), put_from and upsert_from as
 * mc_store_batch_{put,upsert}_from_multi().  The submitter's thread only
 * queues: nothing blocks it.
 *
 * Exactness: a batch call answers each key as the single call would (a
 * missing key fails its own request only).  Where the two could differ, a
 * request runs alone through its single call: get_size always (a size
 * needs no readable query, which the batch lookup builds); writes whose
 * configuration holds group ids (the batch calls take one per key), DFS
 * replicas (written key by key anyway) or prefer_alloc_in_same_node
 * (put_from refuses it, the batch form honours it); empty values; and a
 * group of one.  A write or remove group never holds a key twice (a batch
 * call with a repeated key is not two calls in a row: upsert_batch refuses
 * it): the later request waits for a later group.  A batch call that fails as a whole gives its
 * status to every key it left unanswered, as the Python binding does for
 * its own batch calls.
 *
 * Lifetime: the queue never closes or frees the store; its owner closes
 * the queue before mc_store_destroy() (store.h).  mc_store_close() in
 * between is fine: the calls made afterwards report it.
 *
 * Plugging (mc_store_aq_plug) holds the submissions back until the
 * matching unplug, so a burst a caller submits in one go reaches a worker
 * as one take, however fast the workers are: the Python binding plugs at
 * the first submission of an event-loop iteration and unplugs at its end,
 * which also spares the submitting thread a wake-up per request.
 *
 * Locking: q->mu guards the submission list, the completion list,
 * q->signalled, q->plugged, q->idle and q->closing.  Workers call the
 * store without it, and no library call is made with it held.
 *
 * MC_STORE_AQ_BATCH_GET_INTO_LOCAL is a get_into batch whose worker copies
 * same-host replicas without the engine's workers (mc_store_read_local_set(),
 * read/read.h: a setting of the reading thread); the caller may take
 * pieces of a large one (mc_store_aq_help: mc_store_read_assist()).  The
 * worker runs it under SCHED_BATCH (aq_background_enter()): a copy that
 * runs beside its submitter is background work, and its wake-ups must not
 * preempt the thread that woke it.  The one that matters is the master's
 * answer to the batch's lookup: as a normal thread the worker took the
 * master's CPU from it there, and copied for 1-3 ms while the master, not
 * yet done answering the submitter's own lookup, waited behind it with
 * the other CPU idle (a DataProto get on two CPUs: half its small reads
 * waited out the whole large copy; bench/README.md, structured section).
 *
 * May call: the public API (the batch calls), mc_store_read_local_set() and
 * mc_store_read_assist().
 * Called by: the public API.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <mooncake/store.h>

#include "common/log.h"
#include "store/read/read.h"

#define AQ_WORKERS_DEFAULT 2
#define AQ_WORKERS_MAX 64
/* Requests a worker takes at once, so the largest coalesced batch call. */
#define AQ_TAKE 512
/* Slots of the set of keys of a write group (a power of two > AQ_TAKE). */
#define AQ_KEYSET 1024
/* Objects this large get huge-page advice (mc_store_prepare_buffer). */
#define AQ_HUGE_ADVICE ((uint64_t)2 << 20)

typedef struct aq_req aq_req_t;

/* One request, then its completion.  Keys, and a batch's arrays, live in
 * the same allocation; results (batches) and data (gets) are handed to
 * the reaper. */
struct aq_req {
    aq_req_t *next;
    mc_store_aq_op_t op;
    uint64_t tag;
    const mc_replicate_config_t *cfg;
    int force;
    void *buf;          /* single: get_into destination, write source */
    size_t len;
    const char *key;    /* single requests */
    size_t n;           /* batches: keys */
    const char **keys;  /* batches */
    mc_iov_t *iovs;     /* batches with buffers */
    /* the completion */
    int64_t result;
    int64_t *results;   /* batches: n entries, allocated at submission */
    void *data;
    uint64_t size;
};

/* A worker's arrays for one coalesced group (at most AQ_TAKE requests). */
typedef struct aq_scratch {
    aq_req_t *g[AQ_TAKE];
    uint8_t taken[AQ_TAKE];
    const char *keys[AQ_TAKE];
    mc_store_query_h qs[AQ_TAKE];
    mc_store_query_h rq[AQ_TAKE];
    void *dst[AQ_TAKE];
    void *rd[AQ_TAKE];
    mc_status_t sts[AQ_TAKE];
    mc_status_t rsts[AQ_TAKE];
    size_t pos[AQ_TAKE];
    int64_t res[AQ_TAKE];
    int ires[AQ_TAKE];
    mc_iov_t iov[AQ_TAKE];
    const mc_iov_t *bufs[AQ_TAKE];
    size_t counts[AQ_TAKE];
    const char *keyset[AQ_KEYSET];
} aq_scratch_t;

typedef struct aq_worker {
    struct mc_store_aq *q;
    pthread_t thread;
    aq_scratch_t *s;
} aq_worker_t;

struct mc_store_aq {
    mc_store_h store;
    int efd;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* workers wait here for requests or closing */
    aq_req_t *head, *tail;           /* submitted, not taken yet */
    aq_req_t *done_head, *done_tail; /* completions, not reaped yet */
    int signalled;                   /* the eventfd counter is not 0 */
    unsigned plugged;                /* mc_store_aq_plug() depth: hold submissions */
    int closing;
    unsigned idle;                   /* workers waiting on cond */
    unsigned nworkers;               /* started */
    aq_worker_t *workers;
};

/* ---- requests ----------------------------------------------------------- */

static size_t round8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static void req_free(aq_req_t *r)
{
    if (r == NULL)
        return;
    free(r->results);
    free(r->data);
    free(r);
}

/* A request of @p op for the single @p key (not NULL).  NULL with the
 * detail set when memory runs out. */
static aq_req_t *req_single(mc_store_aq_op_t op, const char *key, uint64_t tag)
{
    size_t klen;
    aq_req_t *r;

    klen = strlen(key) + 1;
    r    = calloc(1, round8(sizeof(*r)) + klen);
    if (r == NULL) {
        mc_set_error_detail("out of memory for a request");
        return NULL;
    }
    r->key = memcpy((char *)r + round8(sizeof(*r)), key, klen);
    r->op  = op;
    r->tag = tag;
    return r;
}

/* A batch request of @p op for @p keys[0..n) (checked), with a copy of
 * @p iovs (NULL: none) and room for n results.  NULL with the detail set
 * when memory runs out. */
static aq_req_t *req_batch(mc_store_aq_op_t op, const char *const *keys, const mc_iov_t *iovs,
                           size_t n, uint64_t tag)
{
    size_t head = round8(sizeof(aq_req_t)), text = 0, total;
    size_t niov = (iovs != NULL) ? n : 0;
    aq_req_t *r;
    char *p;

    if (n > (SIZE_MAX / 4) / (sizeof(mc_iov_t) + sizeof(char *) + sizeof(int64_t))) {
        mc_set_error_detail("a batch of %zu keys is too large", n);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        text += strlen(keys[i]) + 1;
    total = head + niov * sizeof(mc_iov_t) + n * sizeof(char *) + text;
    r     = calloc(1, total);
    if (r == NULL) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        return NULL;
    }
    r->results = malloc((n > 0 ? n : 1) * sizeof(*r->results));
    if (r->results == NULL) {
        free(r);
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        return NULL;
    }
    p       = (char *)r + head;
    r->iovs = (niov > 0) ? memcpy(p, iovs, niov * sizeof(mc_iov_t)) : NULL;
    p += niov * sizeof(mc_iov_t);
    r->keys = (const char **)(void *)p;
    p += n * sizeof(char *);
    for (size_t i = 0; i < n; i++) {
        size_t l   = strlen(keys[i]) + 1;
        r->keys[i] = memcpy(p, keys[i], l);
        p += l;
    }
    r->n   = n;
    r->op  = op;
    r->tag = tag;
    return r;
}

/* Append @p r to the submissions and wake a worker if none is awake. */
static void enqueue(mc_store_aq_h q, aq_req_t *r)
{
    pthread_mutex_lock(&q->mu);
    r->next = NULL;
    /* a worker that is awake takes the whole list, so only an empty one
     * needs a wake-up; a plugged queue wakes one when it is unplugged */
    if ((q->head == NULL) && (q->idle > 0) && !q->plugged)
        pthread_cond_signal(&q->cond);
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    pthread_mutex_unlock(&q->mu);
}

/* ---- running a group ------------------------------------------------------- */

/* A configuration the batch writes treat as the single ones do. */
static int cfg_plain(const mc_replicate_config_t *cfg)
{
    return (cfg == NULL) ||
           (!(cfg->field_mask & MC_RC_FIELD_GROUP_IDS) && (cfg->group_ids == NULL) &&
            (cfg->group_ids_count == 0) && (cfg->dfs_replica_num == 0) &&
            !cfg->prefer_alloc_in_same_node);
}

static int is_write(mc_store_aq_op_t op)
{
    return (op == MC_STORE_AQ_PUT) || (op == MC_STORE_AQ_UPSERT) ||
           (op == MC_STORE_AQ_PUT_FROM) || (op == MC_STORE_AQ_UPSERT_FROM);
}

/* May @p r share a batch call with others of its kind? */
static int coalescable(const aq_req_t *r)
{
    switch (r->op) {
    case MC_STORE_AQ_GET:
    case MC_STORE_AQ_GET_INTO:
    case MC_STORE_AQ_EXIST:
    case MC_STORE_AQ_REMOVE:
        return 1;
    case MC_STORE_AQ_PUT:
    case MC_STORE_AQ_UPSERT:
    case MC_STORE_AQ_PUT_FROM:
    case MC_STORE_AQ_UPSERT_FROM:
        return (r->len > 0) && cfg_plain(r->cfg);
    default:
        return 0;
    }
}

/* May @p b join the group that @p a started (both coalescable)? */
static int compatible(const aq_req_t *a, const aq_req_t *b)
{
    if ((a->op != b->op) || !coalescable(b))
        return 0;
    if (a->op == MC_STORE_AQ_REMOVE)
        return !a->force == !b->force;
    if (is_write(a->op))
        return a->cfg == b->cfg;
    return 1;
}

static uint64_t key_hash(const char *k)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *k != '\0'; k++)
        h = (h ^ (uint8_t)*k) * 1099511628211ull;
    return h;
}

/* Add @p key to the group's key set; 0 when it is there already. */
static int keyset_add(const char **set, const char *key)
{
    size_t i = (size_t)key_hash(key) & (AQ_KEYSET - 1);
    while (set[i] != NULL) {
        if (strcmp(set[i], key) == 0)
            return 0;
        i = (i + 1) & (AQ_KEYSET - 1);
    }
    set[i] = key;
    return 1;
}

/* The group started by v[i]: s->g[0..return), each marked taken. */
static size_t group_from(aq_scratch_t *s, aq_req_t **v, size_t m, size_t i)
{
    aq_req_t *r = v[i];
    int uniq    = is_write(r->op) || (r->op == MC_STORE_AQ_REMOVE);
    size_t n    = 1;

    s->g[0]     = r;
    s->taken[i] = 1;
    if (!coalescable(r))
        return 1;
    if (uniq) {
        memset(s->keyset, 0, sizeof(s->keyset));
        keyset_add(s->keyset, r->key);
    }
    for (size_t j = i + 1; j < m; j++) {
        if (s->taken[j] || !compatible(r, v[j]))
            continue;
        if (uniq && !keyset_add(s->keyset, v[j]->key))
            continue; /* a repeated key: a later group */
        s->g[n++]   = v[j];
        s->taken[j] = 1;
    }
    return n;
}

/* The result of key @p i of a batch call that returned @p st: its own,
 * unless the call failed as a whole before answering it (still @p unset). */
static int64_t batch_result(mc_status_t st, int64_t own, int64_t unset)
{
    return ((st != MC_OK) && (own == unset)) ? (int64_t)st : own;
}

/*
 * Read the objects of the successful lookups qs[i] (sts[i] MC_OK) into
 * dst[i] (NULL: skip that one) in one mc_store_batch_query_read(); sts[i]
 * becomes the read's status.  rq, rd, rsts and pos: n entries of room.
 */
static void read_found(mc_store_h st, mc_store_query_h *qs, void **dst, mc_status_t *sts,
                       size_t n, mc_store_query_h *rq, void **rd, mc_status_t *rsts,
                       size_t *pos)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if ((sts[i] != MC_OK) || (qs[i] == NULL) || (dst[i] == NULL))
            continue;
        rq[k]   = qs[i];
        rd[k]   = dst[i];
        rsts[k] = MC_INTERNAL_ERROR;
        pos[k]  = i;
        k++;
    }
    if (k > 0)
        (void)mc_store_batch_query_read(st, rq, k, rd, rsts);
    for (size_t j = 0; j < k; j++)
        sts[pos[j]] = rsts[j];
}

/* A fresh buffer for an object of @p size bytes; NULL with the status. */
static void *object_buffer(uint64_t size, mc_status_t *st_p)
{
    void *p = (size <= SIZE_MAX) ? malloc((size_t)size) : NULL;

    if (p == NULL) {
        mc_error("async get: no memory for an object of %llu bytes",
                 (unsigned long long)size);
        *st_p = MC_INTERNAL_ERROR;
        return NULL;
    }
    if (size >= AQ_HUGE_ADVICE)
        mc_store_prepare_buffer(p, (size_t)size);
    return p;
}

/* MC_STORE_AQ_GET for s->g[0..n): one lookup, one transfer; each request
 * gets its object in a buffer of its own. */
static void run_gets(mc_store_h st, aq_scratch_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s->keys[i] = s->g[i]->key;
        s->qs[i]   = NULL;
        s->sts[i]  = MC_INTERNAL_ERROR;
        s->dst[i]  = NULL;
    }
    (void)mc_store_batch_query_cached(st, s->keys, n, s->qs, s->sts);
    for (size_t i = 0; i < n; i++) {
        aq_req_t *r = s->g[i];
        if ((s->sts[i] == MC_OK) && (s->qs[i] == NULL))
            s->sts[i] = MC_INTERNAL_ERROR;
        if (s->sts[i] != MC_OK)
            continue;
        r->size = mc_store_query_size(s->qs[i]);
        if (r->size > 0)
            s->dst[i] = r->data = object_buffer(r->size, &s->sts[i]);
    }
    read_found(st, s->qs, s->dst, s->sts, n, s->rq, s->rd, s->rsts, s->pos);
    for (size_t i = 0; i < n; i++) {
        aq_req_t *r = s->g[i];
        r->result   = s->sts[i];
        if (s->sts[i] != MC_OK) {
            free(r->data);
            r->data = NULL;
            r->size = 0;
        }
        mc_store_query_release(s->qs[i]);
        s->qs[i] = NULL;
    }
}

/* MC_STORE_AQ_GET_BATCH: as run_gets, the objects back to back in one
 * buffer (r->data), results[i] the size of object i or its error. */
static void run_get_batch(mc_store_h st, aq_req_t *r)
{
    size_t n = r->n;
    mc_store_query_h *qs, *rq;
    void **dst, **rd;
    mc_status_t *sts, *rsts;
    size_t *pos;
    uint64_t total = 0, w = 0;
    uint8_t *data = NULL;
    mc_status_t ast = MC_OK;
    void *block;

    if (n == 0) {
        r->result = MC_OK;
        return;
    }
    block = calloc(n, 2 * sizeof(*qs) + 2 * sizeof(*dst) + 2 * sizeof(*sts) + sizeof(*pos));
    if (block == NULL) {
        mc_error("async get_batch: no memory for %zu keys", n);
        for (size_t i = 0; i < n; i++)
            r->results[i] = MC_INTERNAL_ERROR;
        r->result = MC_INTERNAL_ERROR;
        return;
    }
    qs   = block;
    rq   = qs + n;
    dst  = (void **)(rq + n);
    rd   = dst + n;
    pos  = (size_t *)(rd + n);
    sts  = (mc_status_t *)(pos + n);
    rsts = sts + n;
    for (size_t i = 0; i < n; i++)
        sts[i] = MC_INTERNAL_ERROR;
    (void)mc_store_batch_query_cached(st, r->keys, n, qs, sts);
    for (size_t i = 0; i < n; i++) {
        uint64_t size = (qs[i] != NULL) ? mc_store_query_size(qs[i]) : 0;
        if ((sts[i] == MC_OK) && (qs[i] == NULL))
            sts[i] = MC_INTERNAL_ERROR;
        if ((sts[i] == MC_OK) && (total + size < total))
            sts[i] = MC_INTERNAL_ERROR; /* more than the address space */
        if (sts[i] == MC_OK)
            total += size;
    }
    if (total > 0)
        data = object_buffer(total, &ast);
    for (size_t i = 0; i < n; i++) {
        uint64_t size = (sts[i] == MC_OK) ? mc_store_query_size(qs[i]) : 0;
        if (size == 0)
            continue;
        if (data == NULL)
            sts[i] = ast;
        else
            dst[i] = data + w;
        w += size;
    }
    read_found(st, qs, dst, sts, n, rq, rd, rsts, pos);
    /* the objects read, back to back: close the gaps failed reads left */
    w = 0;
    r->result = MC_OK;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = (sts[i] == MC_OK) ? mc_store_query_size(qs[i]) : 0;
        r->results[i] = (sts[i] == MC_OK) ? (int64_t)size : (int64_t)sts[i];
        if ((sts[i] != MC_OK) && (r->result == MC_OK))
            r->result = sts[i];
        if (size > 0) {
            if ((uint8_t *)dst[i] != data + w)
                memmove(data + w, dst[i], (size_t)size);
            w += size;
        }
        mc_store_query_release(qs[i]);
    }
    if (w == 0) {
        free(data);
        data = NULL;
    }
    r->data = data;
    r->size = w;
    free(block);
}

/* Single-key requests of one kind, coalescable, in s->g[0..n). */
static void run_group(mc_store_h st, aq_scratch_t *s, size_t n)
{
    const aq_req_t *r0 = s->g[0];
    mc_status_t cst;

    if (r0->op == MC_STORE_AQ_GET) {
        run_gets(st, s, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        s->keys[i]     = s->g[i]->key;
        s->iov[i].base = s->g[i]->buf;
        s->iov[i].len  = s->g[i]->len;
        s->bufs[i]     = &s->iov[i];
        s->counts[i]   = 1;
        s->res[i]      = MC_INTERNAL_ERROR;
        s->ires[i]     = MC_INTERNAL_ERROR;
        s->sts[i]      = MC_INTERNAL_ERROR;
    }
    switch (r0->op) {
    case MC_STORE_AQ_GET_INTO:
        cst = mc_store_batch_get_into_multi(st, s->keys, s->bufs, s->counts, n, s->res);
        for (size_t i = 0; i < n; i++)
            s->g[i]->result = batch_result(cst, s->res[i], MC_INTERNAL_ERROR);
        return;
    case MC_STORE_AQ_EXIST:
        cst = mc_store_batch_exist(st, s->keys, n, s->ires);
        for (size_t i = 0; i < n; i++)
            s->g[i]->result = batch_result(cst, s->ires[i], MC_INTERNAL_ERROR);
        return;
    case MC_STORE_AQ_REMOVE:
        cst = mc_store_batch_remove(st, s->keys, n, r0->force, s->sts);
        break;
    case MC_STORE_AQ_PUT:
        cst = mc_store_put_batch(st, s->keys, s->iov, n, r0->cfg, s->sts);
        break;
    case MC_STORE_AQ_UPSERT:
        cst = mc_store_upsert_batch(st, s->keys, s->iov, n, r0->cfg, s->sts);
        break;
    case MC_STORE_AQ_PUT_FROM:
        cst = mc_store_batch_put_from_multi(st, s->keys, s->bufs, s->counts, n, r0->cfg,
                                            s->sts);
        break;
    case MC_STORE_AQ_UPSERT_FROM:
        cst = mc_store_batch_upsert_from_multi(st, s->keys, s->bufs, s->counts, n, r0->cfg,
                                               s->sts);
        break;
    default:
        cst = MC_INTERNAL_ERROR; /* not coalescable: never here */
        break;
    }
    for (size_t i = 0; i < n; i++)
        s->g[i]->result = batch_result(cst, s->sts[i], MC_INTERNAL_ERROR);
}

/* Run the calling thread as background work (SCHED_BATCH: its wake-ups do
 * not preempt the running thread; its share of the CPU is unchanged) when
 * it is a normal thread: 1 when it was switched (aq_background_leave()
 * switches it back), else 0.  A policy the application chose is left as
 * it is, and a refusal (seccomp, a sandbox) only costs the gain. */
static int aq_background_enter(void)
{
    struct sched_param sp = {.sched_priority = 0};

    if (sched_getscheduler(0) != SCHED_OTHER)
        return 0;
    return sched_setscheduler(0, SCHED_BATCH, &sp) == 0;
}

static void aq_background_leave(int entered)
{
    struct sched_param sp = {.sched_priority = 0};

    if (entered && (sched_setscheduler(0, SCHED_OTHER, &sp) != 0))
        mc_warn("async queue worker: back to SCHED_OTHER failed: %m");
}

/* A batch request of the zero-copy or existence kind: one batch call. */
static void run_batch(mc_store_h st, aq_req_t *r)
{
    size_t n = r->n;
    const mc_iov_t **bufs = NULL;
    size_t *counts        = NULL;
    mc_status_t *sts      = NULL;
    int *ires             = NULL;
    mc_status_t cst;

    for (size_t i = 0; i < n; i++)
        r->results[i] = MC_INTERNAL_ERROR;
    if (r->op == MC_STORE_AQ_BATCH_EXIST) {
        ires = malloc((n > 0 ? n : 1) * sizeof(*ires));
        if (ires == NULL)
            goto oom;
        for (size_t i = 0; i < n; i++)
            ires[i] = MC_INTERNAL_ERROR;
        cst = mc_store_batch_exist(st, r->keys, n, ires);
        for (size_t i = 0; i < n; i++)
            r->results[i] = batch_result(cst, ires[i], MC_INTERNAL_ERROR);
        r->result = cst;
        free(ires);
        return;
    }
    bufs   = malloc((n > 0 ? n : 1) * sizeof(*bufs));
    counts = malloc((n > 0 ? n : 1) * sizeof(*counts));
    sts    = malloc((n > 0 ? n : 1) * sizeof(*sts));
    if ((bufs == NULL) || (counts == NULL) || (sts == NULL))
        goto oom;
    for (size_t i = 0; i < n; i++) {
        bufs[i]   = &r->iovs[i];
        counts[i] = 1;
        sts[i]    = MC_INTERNAL_ERROR;
    }
    switch (r->op) {
    case MC_STORE_AQ_BATCH_GET_INTO:
    case MC_STORE_AQ_BATCH_GET_INTO_LOCAL: {
        /* _LOCAL: this worker copies same-host replicas alone (read.h), as
         * background work (aq_background_enter) */
        int local = (r->op == MC_STORE_AQ_BATCH_GET_INTO_LOCAL);
        int bg    = local ? aq_background_enter() : 0;
        int was   = mc_store_read_local_set(local);
        cst       = mc_store_batch_get_into_multi(st, r->keys, bufs, counts, n, r->results);
        mc_store_read_local_set(was);
        aq_background_leave(bg);
        for (size_t i = 0; i < n; i++)
            r->results[i] = batch_result(cst, r->results[i], MC_INTERNAL_ERROR);
        break;
    }
    case MC_STORE_AQ_BATCH_PUT_FROM:
    case MC_STORE_AQ_BATCH_UPSERT_FROM:
        cst = (r->op == MC_STORE_AQ_BATCH_PUT_FROM)
                  ? mc_store_batch_put_from_multi(st, r->keys, bufs, counts, n, r->cfg, sts)
                  : mc_store_batch_upsert_from_multi(st, r->keys, bufs, counts, n, r->cfg,
                                                     sts);
        for (size_t i = 0; i < n; i++)
            r->results[i] = batch_result(cst, sts[i], MC_INTERNAL_ERROR);
        break;
    default:
        cst = MC_INTERNAL_ERROR;
        break;
    }
    r->result = cst;
    free(bufs);
    free(counts);
    free(sts);
    return;

oom:
    mc_error("async %s: no memory for %zu keys",
             (r->op == MC_STORE_AQ_BATCH_EXIST) ? "batch_is_exist" : "batch call", n);
    free(bufs);
    free(counts);
    free(sts);
    r->result = MC_INTERNAL_ERROR;
    for (size_t i = 0; i < n; i++)
        r->results[i] = MC_INTERNAL_ERROR;
}

/* One request through its own call. */
static void run_single(mc_store_h st, aq_scratch_t *s, aq_req_t *r)
{
    uint64_t size = 0;
    mc_status_t cst;

    switch (r->op) {
    case MC_STORE_AQ_GET:
        s->g[0] = r;
        run_gets(st, s, 1);
        break;
    case MC_STORE_AQ_GET_INTO:
        r->result = mc_store_get_into(st, r->key, r->buf, r->len);
        break;
    case MC_STORE_AQ_PUT:
        r->result = mc_store_put(st, r->key, r->buf, r->len, r->cfg);
        break;
    case MC_STORE_AQ_UPSERT:
        r->result = mc_store_upsert(st, r->key, r->buf, r->len, r->cfg);
        break;
    case MC_STORE_AQ_PUT_FROM:
        r->result = mc_store_put_from(st, r->key, r->buf, r->len, r->cfg);
        break;
    case MC_STORE_AQ_UPSERT_FROM:
        r->result = mc_store_upsert_from(st, r->key, r->buf, r->len, r->cfg);
        break;
    case MC_STORE_AQ_EXIST:
        r->result = mc_store_exist(st, r->key);
        break;
    case MC_STORE_AQ_REMOVE:
        r->result = mc_store_remove(st, r->key, r->force);
        break;
    case MC_STORE_AQ_GET_SIZE:
        cst       = mc_store_get_size(st, r->key, &size);
        r->result = (cst != MC_OK)            ? (int64_t)cst
                    : (size > (uint64_t)INT64_MAX) ? (int64_t)MC_INTERNAL_ERROR
                                                   : (int64_t)size;
        break;
    case MC_STORE_AQ_GET_BATCH:
        run_get_batch(st, r);
        break;
    default:
        run_batch(st, r);
        break;
    }
}

/* Run the requests v[0..m) taken together, grouped by kind in order of
 * their first request. */
static void run_all(mc_store_h st, aq_scratch_t *s, aq_req_t **v, size_t m)
{
    memset(s->taken, 0, m);
    for (size_t i = 0; i < m; i++) {
        size_t n;
        if (s->taken[i])
            continue;
        n = group_from(s, v, m, i);
        if (n == 1)
            run_single(st, s, s->g[0]);
        else
            run_group(st, s, n);
    }
}

/* ---- workers ------------------------------------------------------------------ */

/* Hand v[0..m) to the reapers; q->mu held. */
static void complete(mc_store_aq_h q, aq_req_t **v, size_t m)
{
    for (size_t i = 0; i < m; i++) {
        v[i]->next = NULL;
        if (q->done_tail != NULL)
            q->done_tail->next = v[i];
        else
            q->done_head = v[i];
        q->done_tail = v[i];
    }
    if ((m > 0) && !q->signalled) {
        uint64_t one = 1;
        if (write(q->efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
            mc_error("async queue: cannot signal its eventfd: %m");
        else
            q->signalled = 1;
    }
}

static void *aq_worker_main(void *arg)
{
    aq_worker_t *w  = arg;
    mc_store_aq_h q = w->q;
    aq_req_t *v[AQ_TAKE];
    size_t m;

    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (((q->head == NULL) || q->plugged) && !q->closing) {
            q->idle++;
            pthread_cond_wait(&q->cond, &q->mu);
            q->idle--;
        }
        if (q->closing)
            break;
        for (m = 0; (m < AQ_TAKE) && (q->head != NULL); m++) {
            v[m]    = q->head;
            q->head = q->head->next;
        }
        if (q->head == NULL)
            q->tail = NULL;
        else if (q->idle > 0)
            pthread_cond_signal(&q->cond); /* the rest to another worker */
        pthread_mutex_unlock(&q->mu);
        run_all(q->store, w->s, v, m);
        pthread_mutex_lock(&q->mu);
        complete(q, v, m);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* ---- public ----------------------------------------------------------------- */

MC_API mc_status_t mc_store_aq_open(mc_store_h store, unsigned workers, mc_store_aq_h *q_p)
{
    mc_store_aq_h q;
    int rc;

    if ((store == NULL) || (q_p == NULL)) {
        mc_set_error_detail("store and q_p are required");
        return MC_INVALID_PARAMS;
    }
    if (workers > AQ_WORKERS_MAX) {
        mc_set_error_detail("%u workers asked, at most %u", workers, AQ_WORKERS_MAX);
        return MC_INVALID_PARAMS;
    }
    if (workers == 0)
        workers = AQ_WORKERS_DEFAULT;
    q = calloc(1, sizeof(*q));
    if (q != NULL)
        q->workers = calloc(workers, sizeof(*q->workers));
    if ((q == NULL) || (q->workers == NULL)) {
        free(q);
        mc_set_error_detail("out of memory for a completion queue");
        return MC_INTERNAL_ERROR;
    }
    q->store = store;
    q->efd   = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        mc_set_error_detail("cannot create the completion queue's eventfd: %s",
                            strerror(errno));
        mc_error("cannot create a completion queue's eventfd: %m");
        free(q->workers);
        free(q);
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cond, NULL);
    for (unsigned i = 0; i < workers; i++) {
        aq_worker_t *w = &q->workers[i];
        w->q           = q;
        w->s           = malloc(sizeof(*w->s));
        if (w->s == NULL) {
            mc_set_error_detail("out of memory for a completion queue worker");
            goto fail;
        }
        rc = pthread_create(&w->thread, NULL, aq_worker_main, w);
        if (rc != 0) {
            free(w->s);
            w->s = NULL;
            mc_set_error_detail("cannot start a completion queue worker: %s", strerror(rc));
            mc_error("cannot start a completion queue worker: %s", strerror(rc));
            goto fail;
        }
        q->nworkers++;
    }
    *q_p = q;
    return MC_OK;

fail:
    mc_store_aq_close(q);
    return MC_INTERNAL_ERROR;
}

MC_API void mc_store_aq_close(mc_store_aq_h q)
{
    aq_req_t *r, *next;

    if (q == NULL)
        return;
    pthread_mutex_lock(&q->mu);
    q->closing = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
    /* each worker finishes the batch in hand, completes it and leaves */
    for (unsigned i = 0; i < q->nworkers; i++) {
        pthread_join(q->workers[i].thread, NULL);
        free(q->workers[i].s);
    }
    for (r = q->head; r != NULL; r = next) { /* never started */
        next = r->next;
        req_free(r);
    }
    for (r = q->done_head; r != NULL; r = next) { /* never reaped */
        next = r->next;
        req_free(r);
    }
    close(q->efd);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mu);
    free(q->workers);
    free(q);
}

MC_API void mc_store_aq_plug(mc_store_aq_h q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->mu);
    q->plugged++;
    pthread_mutex_unlock(&q->mu);
}

MC_API void mc_store_aq_unplug(mc_store_aq_h q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->mu);
    if ((q->plugged > 0) && (--q->plugged == 0) && (q->head != NULL) && (q->idle > 0))
        pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->mu);
}

MC_API int mc_store_aq_fd(mc_store_aq_h q)
{
    return (q != NULL) ? q->efd : -1;
}

MC_API size_t mc_store_aq_help(mc_store_aq_h q)
{
    return (q != NULL) ? mc_store_read_assist(q->store) : 0;
}

MC_API size_t mc_store_aq_reap(mc_store_aq_h q, mc_store_aq_done_t *done, size_t max)
{
    aq_req_t *got = NULL, **tailp = &got, *r;
    size_t k = 0;

    if ((q == NULL) || (done == NULL) || (max == 0))
        return 0;
    pthread_mutex_lock(&q->mu);
    while ((k < max) && (q->done_head != NULL)) {
        r            = q->done_head;
        q->done_head = r->next;
        *tailp       = r;
        tailp        = &r->next;
        k++;
    }
    *tailp = NULL;
    if (q->done_head == NULL) {
        q->done_tail = NULL;
        if (q->signalled) {
            uint64_t c;
            /* nonblocking; the counter is not 0 while signalled */
            if (read(q->efd, &c, sizeof(c)) != (ssize_t)sizeof(c))
                mc_error("async queue: cannot drain its eventfd: %m");
            q->signalled = 0;
        }
    }
    pthread_mutex_unlock(&q->mu);
    /* handed over outside the lock: the workers need it */
    for (size_t i = 0; i < k; i++, got = r) {
        r                = got->next;
        done[i].tag      = got->tag;
        done[i].op       = got->op;
        done[i].result   = got->result;
        done[i].n        = (got->results != NULL) ? got->n : 0;
        done[i].results  = got->results;
        done[i].data     = got->data;
        done[i].size     = got->size;
        got->results     = NULL;
        got->data        = NULL;
        req_free(got);
    }
    return k;
}

MC_API void mc_store_aq_done_release(mc_store_aq_done_t *done, size_t n)
{
    if (done == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        free(done[i].results);
        free(done[i].data);
        done[i].results = NULL;
        done[i].data    = NULL;
        done[i].n       = 0;
        done[i].size    = 0;
    }
}

/* ---- submission ----------------------------------------------------------------- */

/* Queue a single-key request of @p op with its arguments. */
static mc_status_t submit_single(mc_store_aq_h q, mc_store_aq_op_t op, const char *key,
                                 const void *buf, size_t len,
                                 const mc_replicate_config_t *cfg, int force, uint64_t tag)
{
    aq_req_t *r;

    if ((q == NULL) || (key == NULL)) {
        mc_set_error_detail("%s is NULL", (q == NULL) ? "the queue" : "key");
        return MC_INVALID_PARAMS;
    }
    r = req_single(op, key, tag);
    if (r == NULL)
        return MC_INTERNAL_ERROR;
    r->buf   = (void *)(uintptr_t)buf; /* written only by the read kinds */
    r->len   = len;
    r->cfg   = cfg;
    r->force = force ? 1 : 0;
    enqueue(q, r);
    return MC_OK;
}

/* Queue a batch request of @p op; @p bufs is copied when @p need_bufs. */
static mc_status_t submit_batch(mc_store_aq_h q, mc_store_aq_op_t op, const char *const *keys,
                                const mc_iov_t *bufs, size_t n,
                                const mc_replicate_config_t *cfg, int need_bufs, uint64_t tag)
{
    aq_req_t *r;
    int bad = (q == NULL) || ((n > 0) && (keys == NULL)) ||
              (need_bufs && (n > 0) && (bufs == NULL));

    for (size_t i = 0; !bad && (i < n); i++)
        bad = keys[i] == NULL;
    if (bad) {
        mc_set_error_detail("the queue, keys%s and every key are required",
                            need_bufs ? ", bufs" : "");
        return MC_INVALID_PARAMS;
    }
    r = req_batch(op, keys, need_bufs ? bufs : NULL, n, tag);
    if (r == NULL)
        return MC_INTERNAL_ERROR;
    r->cfg = cfg;
    enqueue(q, r);
    return MC_OK;
}

MC_API mc_status_t mc_store_aq_get(mc_store_aq_h q, const char *key, uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_GET, key, NULL, 0, NULL, 0, tag);
}

MC_API mc_status_t mc_store_aq_get_into(mc_store_aq_h q, const char *key, void *buf,
                                        size_t cap, uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_GET_INTO, key, buf, cap, NULL, 0, tag);
}

MC_API mc_status_t mc_store_aq_put(mc_store_aq_h q, const char *key, const void *data,
                                   size_t len, const mc_replicate_config_t *cfg, uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_PUT, key, data, len, cfg, 0, tag);
}

MC_API mc_status_t mc_store_aq_upsert(mc_store_aq_h q, const char *key, const void *data,
                                      size_t len, const mc_replicate_config_t *cfg,
                                      uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_UPSERT, key, data, len, cfg, 0, tag);
}

MC_API mc_status_t mc_store_aq_put_from(mc_store_aq_h q, const char *key, const void *buf,
                                        size_t len, const mc_replicate_config_t *cfg,
                                        uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_PUT_FROM, key, buf, len, cfg, 0, tag);
}

MC_API mc_status_t mc_store_aq_upsert_from(mc_store_aq_h q, const char *key, const void *buf,
                                           size_t len, const mc_replicate_config_t *cfg,
                                           uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_UPSERT_FROM, key, buf, len, cfg, 0, tag);
}

MC_API mc_status_t mc_store_aq_exist(mc_store_aq_h q, const char *key, uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_EXIST, key, NULL, 0, NULL, 0, tag);
}

MC_API mc_status_t mc_store_aq_remove(mc_store_aq_h q, const char *key, int force,
                                      uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_REMOVE, key, NULL, 0, NULL, force, tag);
}

MC_API mc_status_t mc_store_aq_get_size(mc_store_aq_h q, const char *key, uint64_t tag)
{
    return submit_single(q, MC_STORE_AQ_GET_SIZE, key, NULL, 0, NULL, 0, tag);
}

MC_API mc_status_t mc_store_aq_get_batch(mc_store_aq_h q, const char *const *keys, size_t n,
                                         uint64_t tag)
{
    return submit_batch(q, MC_STORE_AQ_GET_BATCH, keys, NULL, n, NULL, 0, tag);
}

MC_API mc_status_t mc_store_aq_batch_exist(mc_store_aq_h q, const char *const *keys,
                                           size_t n, uint64_t tag)
{
    return submit_batch(q, MC_STORE_AQ_BATCH_EXIST, keys, NULL, n, NULL, 0, tag);
}

MC_API mc_status_t mc_store_aq_batch_get_into(mc_store_aq_h q, const char *const *keys,
                                              const mc_iov_t *bufs, size_t n, uint64_t tag)
{
    return submit_batch(q, MC_STORE_AQ_BATCH_GET_INTO, keys, bufs, n, NULL, 1, tag);
}

MC_API mc_status_t mc_store_aq_batch_get_into_local(mc_store_aq_h q, const char *const *keys,
                                                    const mc_iov_t *bufs, size_t n,
                                                    uint64_t tag)
{
    return submit_batch(q, MC_STORE_AQ_BATCH_GET_INTO_LOCAL, keys, bufs, n, NULL, 1, tag);
}

MC_API mc_status_t mc_store_aq_batch_put_from(mc_store_aq_h q, const char *const *keys,
                                              const mc_iov_t *bufs, size_t n,
                                              const mc_replicate_config_t *cfg, uint64_t tag)
{
    return submit_batch(q, MC_STORE_AQ_BATCH_PUT_FROM, keys, bufs, n, cfg, 1, tag);
}

MC_API mc_status_t mc_store_aq_batch_upsert_from(mc_store_aq_h q, const char *const *keys,
                                                 const mc_iov_t *bufs, size_t n,
                                                 const mc_replicate_config_t *cfg,
                                                 uint64_t tag)
{
    return submit_batch(q, MC_STORE_AQ_BATCH_UPSERT_FROM, keys, bufs, n, cfg, 1, tag);
}

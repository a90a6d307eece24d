/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real client's side of the dummy protocol (docs/protocol.md §8):
 * a listening unix socket, one thread per dummy connection, and per dummy
 * a session: its shared regions (mapped from the memfds it sent, registered
 * with the real store's engine) - the two of HELLO, whose allocators only
 * this side owns, and the host-memory blocks it REGISTERed since (a worker's
 * KV pool, read and written in place).
 *
 * Everything arrives from another process and is treated as hostile: the
 * header, every count and length is checked against the frame, every
 * (region, off, len) against that session's own regions, every FREE
 * handle against that session's allocator.  A frame that fails a check
 * closes the connection.  When the connection closes (the dummy closed or
 * died: kill -9 closes its socket too) the session's allocators, engine
 * registrations and mappings go; the objects it wrote stay in the store.
 *
 * The store calls go through the public API of the real handle only.
 *
 * May call: dummy.h and dummy_client.h (this folder: the socket helpers,
 * the request decoding of dummy_decode.c), the public API of the real
 * handle (every call), ../segments/segments.h (mapping a dummy's memfds),
 * ../threads/threads.h.  Called by: the public API
 * (mc_store_dummy_server_start/stop).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "alloc/offset_alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "store/dummy/dummy.h"
#include "store/dummy/wire.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"
#include "transfer/shm/shm.h"

#define STAGE_ALIGN 64
/* A dummy silent this long (no request, not even a PING) is dropped:
 * upstream's DEFAULT_CLIENT_LIVE_TTL_SEC.  MC_DUMMY_TTL_MS overrides. */
#define DUMMY_TTL_MS 10000u

typedef struct session {
    struct mc_store_dummy_server *srv;
    struct session *next;
    pthread_t thread;
    int fd;
    int done;  /* the thread has finished (joined by the next accept or stop) */
    /* regions: 0 and 1 from HELLO, then REGISTERed host memory; a free
     * slot has base NULL and size 0 */
    uint8_t *base[MC_DUMMY_MAX_REGIONS];
    uint64_t size[MC_DUMMY_MAX_REGIONS];
    int registered[MC_DUMMY_MAX_REGIONS];
    mc_alloc_t *alloc[MC_DUMMY_NREGIONS];
    unsigned next_region; /* where the search for a free slot starts */
    /* guards alloc[] and base[]: the session's thread allocates, frees and
     * maps, and a STATS request of any other session reads them (taken
     * after srv->lock) */
    pthread_mutex_t mu;
    uint8_t *buf;  /* request body */
    size_t cap;
    int rx_fd;     /* a descriptor that came with the current frame, or -1 */
    /* segments mounted for this dummy (MOUNT, ALLOC_MOUNT): only it may
     * unmount them, and they are unmounted when its session ends; the
     * session's thread alone touches them */
    struct dummy_seg {
        char id[40];
        int allocated;
    } *segs;
    size_t nsegs;
} session_t;

struct mc_store_dummy_server {
    mc_store_h store;
    int lfd;
    pthread_t accept_thread;
    pthread_mutex_t lock;  /* sessions, stop */
    session_t *sessions;
    int stop;
    char path[108];
    /* The ranged sessions the dummies opened (the store keeps one table for
     * them all, keyed by object key): which dummy holds which key, so that
     * a dummy reads, writes and ends only its own, one dummy's end does not
     * drop a get session another still holds, and a dummy that goes away
     * leaves none behind.  sess_mu guards them and is held across the
     * store's get start and end, so a start and an end never interleave. */
    pthread_mutex_t sess_mu;
    struct sess_hold {
        char *key;
        session_t *owner;
        int put;
    } *holds;
    size_t nholds;
};

/* ---- sessions ---------------------------------------------------------------- */

static void segs_release(session_t *ss);
static void holds_release(session_t *ss);

/* Unregister region @p r from the engine and unmap it; the slot is free
 * afterwards.  The session's thread (no request of the dummy in flight). */
static void region_drop(session_t *ss, unsigned r)
{
    uint8_t *base = ss->base[r];
    if (ss->registered[r])
        (void)mc_store_unregister_buffer(ss->srv->store, base);
    ss->registered[r] = 0;
    pthread_mutex_lock(&ss->mu);
    if (r < MC_DUMMY_NREGIONS) {
        mc_alloc_destroy(ss->alloc[r]);
        ss->alloc[r] = NULL;
    }
    ss->base[r] = NULL;
    pthread_mutex_unlock(&ss->mu);
    if (base != NULL)
        munmap(base, ss->size[r]);
    ss->size[r] = 0;
}

static void session_release(session_t *ss)
{
    if (ss->rx_fd >= 0)
        close(ss->rx_fd);
    ss->rx_fd = -1;
    for (unsigned r = 0; r < MC_DUMMY_MAX_REGIONS; r++)
        region_drop(ss, r);
    free(ss->buf);
    ss->buf = NULL;
}

static int send_resp(session_t *ss, unsigned op, mc_status_t st, const mc_dummy_result_t *res,
                     size_t n)
{
    mc_dummy_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = MC_DUMMY_MAGIC;
    h.op = (uint16_t)op;
    h.count = (uint32_t)n;
    h.len = (uint32_t)(n * sizeof(*res));
    h.status = st;
    return mc_dummy_send2(ss->fd, &h, sizeof(h), res, n * sizeof(*res));
}

/*
 * recvmsg of @p iov (@p flags besides MSG_CMSG_CLOEXEC): the descriptors
 * that came with the bytes go to fds[0..*nfds_p) (at most @p maxfds; any
 * more are closed), *ctrunc_p says whether some were cut off.  Returns
 * recvmsg's result.
 */
static ssize_t recvmsg_fds(int fd, struct iovec *iov, size_t niov, int flags, int *fds,
                           int maxfds, int *nfds_p, int *ctrunc_p)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } cbuf;
    struct msghdr msg;
    ssize_t r;

    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = niov;
    msg.msg_control = cbuf.buf;
    msg.msg_controllen = sizeof(cbuf.buf);
    r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | flags);
    *nfds_p = 0;
    *ctrunc_p = (r >= 0) && (msg.msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *cm = (r >= 0) ? CMSG_FIRSTHDR(&msg) : NULL; cm != NULL;
         cm = CMSG_NXTHDR(&msg, cm)) {
        if ((cm->cmsg_level != SOL_SOCKET) || (cm->cmsg_type != SCM_RIGHTS))
            continue;
        for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int one;
            memcpy(&one, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*nfds_p < maxfds)
                fds[(*nfds_p)++] = one;
            else
                close(one);
        }
    }
    return r;
}

/* HELLO: receive the two fds with the header, check and map them. */
static mc_status_t do_hello(session_t *ss)
{
    mc_dummy_hdr_t h;
    mc_dummy_hello_t hello;
    struct iovec iov[2] = {{&h, sizeof(h)}, {&hello, sizeof(hello)}};
    int fds[MC_DUMMY_NREGIONS] = {-1, -1}, nfds = 0, ctrunc = 0;
    ssize_t got;
    mc_status_t st = MC_INVALID_PARAMS;

    got = recvmsg_fds(ss->fd, iov, 2, MSG_WAITALL, fds, MC_DUMMY_NREGIONS, &nfds, &ctrunc);
    if ((got != (ssize_t)(sizeof(h) + sizeof(hello))) || ctrunc ||
        (h.magic != MC_DUMMY_MAGIC) || (h.op != MC_DUMMY_OP_HELLO) ||
        (h.len != sizeof(hello)) || (hello.version != MC_DUMMY_VERSION) ||
        (nfds != (int)MC_DUMMY_NREGIONS)) {
        mc_warn("dummy server: a bad HELLO (%zd bytes, %d fds)", got, nfds);
        goto out;
    }
    for (unsigned r = 0; r < MC_DUMMY_NREGIONS; r++) {
        uint64_t size = hello.size[r];
        /* a memfd shorter than claimed, or one the dummy could shrink
         * later, would fault (SIGBUS) on access: only one sealed against
         * shrinking, of at least that size */
        if (!mc_te_shm_fd_shareable(fds[r], size) || (size > MC_DUMMY_MAX_REGION_SIZE)) {
            mc_warn("dummy server: region %u of a HELLO is not %llu bytes of sealed shared "
                    "memory", r, (unsigned long long)size);
            goto out;
        }
        ss->size[r] = size;
        if (size == 0)
            continue;
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[r], 0);
        if (p == MAP_FAILED) {
            mc_warn("dummy server: mmap of %llu bytes: %m", (unsigned long long)size);
            st = MC_INTERNAL_ERROR;
            goto out;
        }
        pthread_mutex_lock(&ss->mu);
        ss->base[r] = p;
        pthread_mutex_unlock(&ss->mu);
        st = mc_store_register_buffer(ss->srv->store, p, size);
        if (st != MC_OK) {
            mc_warn("dummy server: registering a dummy's memory: %s", mc_last_error_detail());
            goto out;
        }
        ss->registered[r] = 1;
        if (size >= STAGE_ALIGN) {
            mc_alloc_t *a = NULL;
            st = mc_alloc_create(size, STAGE_ALIGN, &a);
            if (st != MC_OK)
                goto out;
            pthread_mutex_lock(&ss->mu);
            ss->alloc[r] = a;
            pthread_mutex_unlock(&ss->mu);
        }
    }
    st = MC_OK;
out:
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (got == (ssize_t)(sizeof(h) + sizeof(hello))) {
        mc_dummy_result_t res;
        memset(&res, 0, sizeof(res));
        res.result = (int64_t)(uintptr_t)ss;
        if (send_resp(ss, MC_DUMMY_OP_HELLO, st, &res, 1) != 0)
            st = MC_RPC_FAIL;
    }
    return (got == (ssize_t)(sizeof(h) + sizeof(hello))) ? st : MC_RPC_FAIL;
}

/* ---- requests ---------------------------------------------------------------- */

typedef mc_dummy_req_t req_t; /* decoded by dummy_decode.c */

/* The session's own memory for an item's range, NULL if it is not. */
static void *range_of(session_t *ss, const mc_dummy_item_t *it)
{
    if ((mc_dummy_range_check(ss->size, MC_DUMMY_MAX_REGIONS, it) != 0) ||
        (ss->base[it->region] == NULL))
        return NULL;
    return ss->base[it->region] + it->off;
}

/* The session's allocators, under ss->mu (see session_t). */
static mc_status_t block_get(session_t *ss, unsigned region, uint64_t len, mc_alloc_block_t *b)
{
    mc_status_t st = MC_NO_AVAILABLE_HANDLE;
    pthread_mutex_lock(&ss->mu);
    if (ss->alloc[region] != NULL)
        st = mc_alloc_get(ss->alloc[region], len, b);
    pthread_mutex_unlock(&ss->mu);
    return st;
}

static void block_put(session_t *ss, unsigned region, const mc_alloc_block_t *b)
{
    pthread_mutex_lock(&ss->mu);
    if (ss->alloc[region] != NULL)
        (void)mc_alloc_put(ss->alloc[region], b);
    pthread_mutex_unlock(&ss->mu);
}

static mc_status_t block_free(session_t *ss, unsigned region, uint32_t handle)
{
    mc_alloc_block_t b;
    mc_status_t st = MC_INVALID_PARAMS;
    if (region >= MC_DUMMY_NREGIONS)
        return st;
    pthread_mutex_lock(&ss->mu);
    if ((ss->alloc[region] != NULL) &&
        (mc_alloc_lookup(ss->alloc[region], handle, &b) == MC_OK))
        st = mc_alloc_put(ss->alloc[region], &b);
    pthread_mutex_unlock(&ss->mu);
    return st;
}

static void cfg_from_wire(const mc_dummy_cfg_t *w, mc_replicate_config_t *c)
{
    mc_replicate_config_init(c);
    /* the protocol carries no preferred NoF segments (the dummy client
     * refuses them): never let a peer's bit point at fields not set here */
    c->field_mask = w->field_mask & ~(uint64_t)MC_RC_FIELD_PREFERRED_NOF;
    c->replica_num = w->replica_num;
    c->nof_replica_num = w->nof_replica_num;
    c->dfs_replica_num = w->dfs_replica_num;
    c->soft_pin_action = (mc_soft_pin_action_t)w->soft_pin_action;
    c->soft_pin_ttl_ms = w->soft_pin_ttl_ms;
    c->with_hard_pin = w->with_hard_pin;
    c->prefer_alloc_in_same_node = w->prefer_alloc_in_same_node;
}

/* The arrays a batch call on keys with several buffers each is built in,
 * for a request of n items: keys[k] (item first[k]) with counts[k] buffers
 * from bufs[k] (into iovs) and, for sessions, offsets from offs[k] (into
 * ofs); sts, rs its answers. */
typedef struct io_arrays {
    const char **keys;
    const mc_iov_t **bufs;
    const uint64_t **offs;
    size_t *counts, *first;
    mc_iov_t *iovs;
    uint64_t *ofs;
    mc_status_t *sts;
    int64_t *rs;
} io_arrays_t;

static void io_arrays_free(io_arrays_t *a)
{
    free(a->keys); free(a->bufs); free(a->offs); free(a->counts); free(a->first);
    free(a->iovs); free(a->ofs); free(a->sts); free(a->rs);
}

/* 0, or -1 (nothing left allocated) with every result MC_INTERNAL_ERROR. */
static int io_arrays_alloc(io_arrays_t *a, size_t n, mc_dummy_result_t *res)
{
    a->keys = calloc(n + 1, sizeof(*a->keys));
    a->bufs = calloc(n + 1, sizeof(*a->bufs));
    a->offs = calloc(n + 1, sizeof(*a->offs));
    a->counts = calloc(n + 1, sizeof(*a->counts));
    a->first = calloc(n + 1, sizeof(*a->first));
    a->iovs = calloc(n + 1, sizeof(*a->iovs));
    a->ofs = calloc(n + 1, sizeof(*a->ofs));
    a->sts = calloc(n + 1, sizeof(*a->sts));
    a->rs = calloc(n + 1, sizeof(*a->rs));
    if (a->keys && a->bufs && a->offs && a->counts && a->first && a->iovs && a->ofs && a->sts &&
        a->rs)
        return 0;
    io_arrays_free(a);
    for (size_t i = 0; i < n; i++)
        res[i].result = MC_INTERNAL_ERROR;
    return -1;
}

/* PUT and GET: items grouped by key (IF_MORE chains), one batch call. */
static int do_io(session_t *ss, unsigned op, req_t *rq, mc_dummy_result_t *res)
{
    mc_store_h store = ss->srv->store;
    size_t n = rq->n, nk = 0;
    io_arrays_t a;
    int upsert = 0, bad = 0;
    mc_replicate_config_t cfg;

    if (io_arrays_alloc(&a, n, res) != 0)
        return 0;
    const char **keys = a.keys;
    const mc_iov_t **bufs = a.bufs;
    size_t *counts = a.counts, *first = a.first;
    mc_iov_t *iovs = a.iovs;
    mc_status_t *sts = a.sts;
    int64_t *rs = a.rs;
    for (size_t i = 0; i < n; i++) {
        const mc_dummy_item_t *it = &rq->items[i];
        void *p = range_of(ss, it);
        if (p == NULL)
            bad = 1;
        iovs[i] = (mc_iov_t){p, (size_t)it->len};
        if ((i == 0) || !(rq->items[i - 1].flags & MC_DUMMY_IF_MORE)) {
            if (rq->keys[i] == NULL)
                bad = 1;
            keys[nk] = rq->keys[i];
            bufs[nk] = &iovs[i];
            first[nk] = i;
            nk++;
        } else if (rq->keys[i] != NULL) {
            bad = 1;
        }
        counts[nk - 1]++;
        if (it->flags & MC_DUMMY_IF_UPSERT)
            upsert = 1;
    }
    if (bad || ((n > 0) && (rq->items[n - 1].flags & MC_DUMMY_IF_MORE))) {
        io_arrays_free(&a);
        return -1; /* a range outside the dummy's memory: hostile, hang up */
    }
    if (op == MC_DUMMY_OP_PUT) {
        const char **gids = NULL;
        if (rq->has_cfg && rq->cfg.present) {
            cfg_from_wire(&rq->cfg, &cfg);
            cfg.preferred_segment = rq->preferred;
            if (cfg.field_mask & MC_RC_FIELD_GROUP_IDS) {
                /* one per key, carried by the key's first item */
                gids = calloc(nk + 1, sizeof(*gids));
                if (gids == NULL) {
                    for (size_t i = 0; i < n; i++)
                        res[i].result = MC_INTERNAL_ERROR;
                    goto out;
                }
                for (size_t k = 0; k < nk; k++)
                    gids[k] = (rq->groups[first[k]] != NULL) ? rq->groups[first[k]] : "";
                cfg.group_ids = gids;
                cfg.group_ids_count = nk;
            }
        }
        const mc_replicate_config_t *c = (rq->has_cfg && rq->cfg.present) ? &cfg : NULL;
        if (upsert)
            (void)mc_store_batch_upsert_from_multi(store, keys, bufs, counts, nk, c, sts);
        else
            (void)mc_store_batch_put_from_multi(store, keys, bufs, counts, nk, c, sts);
        free(gids);
        for (size_t k = 0; k < nk; k++)
            res[first[k]].result = sts[k];
        for (size_t i = 0; i < n; i++)
            if (rq->items[i].flags & MC_DUMMY_IF_RELEASE)
                (void)block_free(ss, rq->items[i].region, rq->items[i].handle);
    } else {
        (void)mc_store_batch_get_into_multi(store, keys, bufs, counts, nk, rs);
        for (size_t k = 0; k < nk; k++)
            res[first[k]].result = rs[k];
    }
out:
    io_arrays_free(&a);
    return 0;
}

/* EXIST: one key, or a batch in one master round trip (batch_is_exist). */
static void do_exist(session_t *ss, req_t *rq, mc_dummy_result_t *res)
{
    const char **keys = calloc(rq->n + 1, sizeof(*keys));
    int *rs = calloc(rq->n + 1, sizeof(*rs));
    size_t m = 0;

    if ((keys == NULL) || (rs == NULL)) {
        for (size_t i = 0; i < rq->n; i++)
            res[i].result = MC_INTERNAL_ERROR;
        goto out;
    }
    if (rq->n == 1) {
        res[0].result = (rq->keys[0] == NULL) ? MC_INVALID_PARAMS
                                              : mc_store_exist(ss->srv->store, rq->keys[0]);
        goto out;
    }
    for (size_t i = 0; i < rq->n; i++)
        if (rq->keys[i] != NULL)
            keys[m++] = rq->keys[i];
    (void)mc_store_batch_exist(ss->srv->store, keys, m, rs);
    m = 0;
    for (size_t i = 0; i < rq->n; i++)
        res[i].result = (rq->keys[i] == NULL) ? MC_INVALID_PARAMS : rs[m++];
out:
    free(keys);
    free(rs);
}

static void do_get_staged(session_t *ss, req_t *rq, mc_dummy_result_t *res)
{
    mc_store_h store = ss->srv->store;
    for (size_t i = 0; i < rq->n; i++) {
        mc_store_query_h q = NULL;
        mc_alloc_block_t b;
        mc_status_t st;
        uint64_t size;

        if (rq->keys[i] == NULL) {
            res[i].result = MC_INVALID_PARAMS;
            continue;
        }
        st = mc_store_query(store, rq->keys[i], &q);
        if (st != MC_OK) {
            res[i].result = st;
            continue;
        }
        size = mc_store_query_size(q);
        if (size == 0) {
            res[i].result = 0;
            mc_store_query_release(q);
            continue;
        }
        st = block_get(ss, MC_DUMMY_REGION_LBUF, size, &b);
        if (st == MC_OK) {
            st = mc_store_query_read(store, q, 0, ss->base[MC_DUMMY_REGION_LBUF] + b.offset,
                                     (size_t)size);
            if (st != MC_OK)
                block_put(ss, MC_DUMMY_REGION_LBUF, &b);
        }
        mc_store_query_release(q);
        if (st != MC_OK) {
            res[i].result = st;
            continue;
        }
        res[i].result = (int64_t)size;
        res[i].off = b.offset;
        res[i].handle = b.node;
    }
}

/* @p len bytes of @p data into a fresh staging block of the session, which
 * the dummy copies out and FREEs: res->off, res->handle.  MC_OK or why not
 * (MC_NO_AVAILABLE_HANDLE: no room in the dummy's local buffer). */
static mc_status_t stage_out(session_t *ss, const void *data, size_t len, mc_dummy_result_t *res)
{
    mc_alloc_block_t b;
    mc_status_t st = block_get(ss, MC_DUMMY_REGION_LBUF, (len > 0) ? len : 1, &b);
    if (st != MC_OK)
        return st;
    memcpy(ss->base[MC_DUMMY_REGION_LBUF] + b.offset, data, len);
    res->off = b.offset;
    res->handle = b.node;
    return MC_OK;
}

/* The object keys of a request (items without IF_ARG) and its names (with
 * it; klen 0 is ""), in order.  -1 on a keyless key item. */
static int split_args(const req_t *rq, const char **keys, size_t *nkeys, const char **args,
                      size_t *nargs)
{
    *nkeys = *nargs = 0;
    for (size_t i = 0; i < rq->n; i++) {
        if (rq->items[i].flags & MC_DUMMY_IF_ARG)
            args[(*nargs)++] = (rq->keys[i] != NULL) ? rq->keys[i] : "";
        else if (rq->keys[i] == NULL)
            return -1;
        else
            keys[(*nkeys)++] = rq->keys[i];
    }
    return 0;
}

/* REPLICAS: per key, its replica descriptors (mc_replica_desc_t) staged. */
static void do_replicas(session_t *ss, req_t *rq, mc_dummy_result_t *res)
{
    for (size_t i = 0; i < rq->n; i++) {
        mc_store_query_h q = NULL;
        mc_replica_desc_t *v = NULL;
        size_t m = 0;
        mc_status_t st = (rq->keys[i] == NULL) ? MC_INVALID_PARAMS
                                              : mc_store_query(ss->srv->store, rq->keys[i], &q);
        if (st == MC_OK) {
            m = mc_store_query_replica_count(q);
            v = calloc(m + 1, sizeof(*v));
            if (v == NULL)
                st = MC_INTERNAL_ERROR;
            for (size_t j = 0; (st == MC_OK) && (j < m); j++)
                st = mc_store_query_replica(q, j, &v[j]);
            mc_store_query_release(q);
        }
        if (st == MC_OK)
            st = stage_out(ss, v, m * sizeof(*v), &res[i]);
        free(v);
        res[i].result = (st == MC_OK) ? (int64_t)m : st;
    }
}

/* A request's object keys and names (split_args), and room for one
 * status per item: what the ops on keys and names work from. */
typedef struct named {
    const char **keys, **args;
    mc_status_t *sts;
    size_t nk, na;
} named_t;

/*
 * The calls that take object keys and names (IF_ARG items) and answer one
 * number per item (the call's status or count at item 0), or a staged
 * record.  -1 for a request of the wrong shape (the connection closes).
 */
static int do_named(session_t *ss, unsigned op, req_t *rq, mc_dummy_result_t *res,
                    named_t *nm)
{
    mc_store_h store = ss->srv->store;
    const char **keys = nm->keys, **args = nm->args;
    mc_status_t *sts = nm->sts;
    size_t nk = nm->nk, na = nm->na;
    int force = (rq->n > 0) && (rq->items[0].flags & MC_DUMMY_IF_FORCE);
    int64_t count = 0;
    mc_status_t st;
    int rc = 0;

    switch (op) {
    case MC_DUMMY_OP_BATCH_REMOVE:
        if (na != 0) {
            rc = -1;
            break;
        }
        (void)mc_store_batch_remove(store, keys, nk, force, sts);
        for (size_t i = 0; i < nk; i++)
            res[i].result = sts[i];
        break;
    case MC_DUMMY_OP_REMOVE_REGEX:
    case MC_DUMMY_OP_REMOVE_ALL:
        if ((rq->n != 1) || ((op == MC_DUMMY_OP_REMOVE_REGEX) && (na != 1))) {
            rc = -1;
            break;
        }
        if (op == MC_DUMMY_OP_REMOVE_ALL)
            st = mc_store_remove_all(store, force, &count);
        else
            st = mc_store_remove_by_regex(store, args[0], force, &count);
        res[0].result = (st == MC_OK) ? count : st;
        break;
    case MC_DUMMY_OP_REPLICA_CLEAR:
        /* the keys, then at most one name: the segment, last */
        if ((na > 1) || ((na == 1) && !(rq->items[rq->n - 1].flags & MC_DUMMY_IF_ARG))) {
            rc = -1;
            break;
        }
        st = mc_store_batch_replica_clear(store, keys, nk, (na == 1) ? args[0] : NULL, sts);
        for (size_t i = 0; i < nk; i++)
            res[i].result = sts[i];
        if (na == 1)
            res[nk].result = st;
        break;
    case MC_DUMMY_OP_COPY_TASK:
    case MC_DUMMY_OP_MOVE_TASK: {
        mc_task_id_t id;
        if ((nk != 1) || (rq->items[0].flags & MC_DUMMY_IF_ARG) ||
            ((op == MC_DUMMY_OP_MOVE_TASK) && (na != 2))) {
            rc = -1;
            break;
        }
        memset(&id, 0, sizeof(id));
        st = (op == MC_DUMMY_OP_COPY_TASK)
                 ? mc_store_create_copy_task(store, keys[0], args, na, &id)
                 : mc_store_create_move_task(store, keys[0], args[0], args[1], &id);
        if (st == MC_OK)
            st = stage_out(ss, &id, sizeof(id), &res[0]);
        res[0].result = st;
        break;
    }
    case MC_DUMMY_OP_QUERY_TASK: {
        mc_store_task_info_t *info = calloc(1, sizeof(*info));
        if ((nk != 0) || (na != 1)) {
            free(info);
            rc = -1;
            break;
        }
        st = (info == NULL) ? MC_INTERNAL_ERROR : mc_store_query_task(store, args[0], info);
        if (st == MC_OK)
            st = stage_out(ss, info, sizeof(*info), &res[0]);
        res[0].result = st;
        free(info);
        break;
    }
    default:
        rc = -1;
        break;
    }
    return rc;
}

/* Index of segment @p id among the session's, or -1. */
static ssize_t seg_find(const session_t *ss, const char *id)
{
    for (size_t i = 0; i < ss->nsegs; i++)
        if (strcmp(ss->segs[i].id, id) == 0)
            return (ssize_t)i;
    return -1;
}

/* Unmount segment i of the session now and forget it. */
static mc_status_t seg_unmount(session_t *ss, size_t i, uint64_t grace_s)
{
    const char *id = ss->segs[i].id;
    mc_status_t st = ss->segs[i].allocated
                         ? mc_store_unmount_and_free_segments(ss->srv->store, &id, 1, grace_s)
                         : mc_store_unmount_segments(ss->srv->store, &id, 1, grace_s);
    /* a graceful one stays the session's until the heartbeat took it */
    if ((st == MC_OK) && (grace_s == 0))
        ss->segs[i] = ss->segs[--ss->nsegs];
    return st;
}

/* The session ended: what it mounted goes (errors of segments already
 * gone, such as a drained one, do not matter here). */
static void segs_release(session_t *ss)
{
    while (ss->nsegs > 0) {
        size_t before = ss->nsegs;
        if ((seg_unmount(ss, ss->nsegs - 1, 0) != MC_OK) && (ss->nsegs == before))
            ss->nsegs--;
    }
    free(ss->segs);
    ss->segs = NULL;
}

/*
 * MOUNT (the file is the descriptor the dummy sent: it opened it read-write
 * itself), ALLOC_MOUNT, UNMOUNT (only the session's own segments, in order;
 * with RELEASE, unmount_and_free, which checks every id first).  -1 for a
 * request of the wrong shape.
 */
static int do_segments(session_t *ss, unsigned op, req_t *rq, mc_dummy_result_t *res,
                       named_t *nm)
{
    mc_store_h store = ss->srv->store;
    const char **args = nm->args;
    size_t na = nm->na;
    mc_status_t st = MC_OK;

    if ((nm->nk != 0) || (na == 0))
        return -1;
    if (op == MC_DUMMY_OP_UNMOUNT) {
        int and_free = (rq->items[0].flags & MC_DUMMY_IF_RELEASE) != 0;
        uint64_t grace = rq->items[0].off;
        for (size_t i = 0; (st == MC_OK) && (i < na); i++) {
            mc_uuid_t u;
            ssize_t k = seg_find(ss, args[i]);
            if (k < 0)
                st = (mc_uuid_parse(args[i], &u) != 0) ? MC_INVALID_PARAMS : MC_SEGMENT_NOT_FOUND;
            else if (and_free && !ss->segs[k].allocated)
                st = MC_INVALID_PARAMS;
        }
        for (size_t i = 0; (st == MC_OK) && (i < na); i++) {
            ssize_t k = seg_find(ss, args[i]);
            if (k < 0) /* named twice, and gone since */
                st = MC_SEGMENT_NOT_FOUND;
            else
                st = seg_unmount(ss, (size_t)k, grace);
        }
        res[0].result = st;
        return 0;
    }
    if (na != 2)
        return -1;
    {
        struct dummy_seg *grown = realloc(ss->segs, (ss->nsegs + 1) * sizeof(*ss->segs));
        mc_dummy_mounted_t m;
        mc_segment_id_t id;
        char path[64];

        memset(&m, 0, sizeof(m));
        if (grown == NULL) {
            st = MC_INTERNAL_ERROR;
        } else if (op == MC_DUMMY_OP_ALLOC_MOUNT) {
            ss->segs = grown;
            st = mc_store_allocate_and_mount_segment(store, rq->items[0].len, args[0], args[1],
                                                     &id, &m.allocated);
        } else if (ss->rx_fd < 0) {
            ss->segs = grown;
            mc_set_error_detail("MOUNT without the file's descriptor");
            st = MC_INVALID_PARAMS;
        } else {
            ss->segs = grown;
            /* the store opens the file again through the descriptor */
            snprintf(path, sizeof(path), "/proc/self/fd/%d", ss->rx_fd);
            st = mc_store_mount_segment(store, path, rq->items[0].len, rq->items[0].off,
                                        args[0], args[1], &id);
        }
        if (st == MC_OK) {
            memcpy(m.id, id.id, sizeof(id.id));
            memcpy(ss->segs[ss->nsegs].id, id.id, sizeof(id.id));
            ss->segs[ss->nsegs].id[sizeof(id.id)] = '\0';
            ss->segs[ss->nsegs].allocated = (op == MC_DUMMY_OP_ALLOC_MOUNT);
            ss->nsegs++;
            st = stage_out(ss, &m, sizeof(m), &res[0]);
            if (st != MC_OK) /* the dummy cannot learn its id: take it back */
                (void)seg_unmount(ss, ss->nsegs - 1, 0);
        }
        res[0].result = st;
    }
    return 0;
}

/* ---- ranged sessions ----------------------------------------------------------- */

/* The hold of (@p key, @p owner or any owner when NULL, @p put), or -1.
 * sess_mu held. */
static ssize_t hold_find(struct mc_store_dummy_server *srv, const char *key,
                         const session_t *owner, int put)
{
    for (size_t i = 0; i < srv->nholds; i++) {
        const struct sess_hold *h = &srv->holds[i];
        if ((h->put == put) && ((owner == NULL) || (h->owner == owner)) &&
            (strcmp(h->key, key) == 0))
            return (ssize_t)i;
    }
    return -1;
}

/* sess_mu held. */
static mc_status_t hold_add(session_t *ss, const char *key, int put)
{
    struct mc_store_dummy_server *srv = ss->srv;
    struct sess_hold *v;
    if (hold_find(srv, key, ss, put) >= 0)
        return MC_OK;
    v = realloc(srv->holds, (srv->nholds + 1) * sizeof(*v));
    if (v == NULL)
        return MC_INTERNAL_ERROR;
    srv->holds = v;
    v[srv->nholds].key = strdup(key);
    if (v[srv->nholds].key == NULL)
        return MC_INTERNAL_ERROR;
    v[srv->nholds].owner = ss;
    v[srv->nholds].put = put;
    srv->nholds++;
    return MC_OK;
}

/* sess_mu held. */
static void hold_del(struct mc_store_dummy_server *srv, size_t i)
{
    free(srv->holds[i].key);
    srv->holds[i] = srv->holds[--srv->nholds];
}

/*
 * Drop the session's holds of @p keys (every one when @p keys is NULL) of
 * kind @p put.  Get keys no other dummy holds are ended in the store now
 * (sess_mu held); put keys go to *out (the caller revokes or ends them,
 * without the lock: an RPC).  res[i] (when not NULL) gets MC_INVALID_PARAMS
 * for a key this dummy does not hold, as the store answers for a key with
 * no open session.
 */
static void holds_drop(session_t *ss, const char *const *keys, size_t n, int put,
                       mc_dummy_result_t *res, const char **out, size_t *nout)
{
    struct mc_store_dummy_server *srv = ss->srv;
    size_t nend = 0;
    const char **end = NULL;
    char **owned = NULL;
    size_t nowned = 0;

    pthread_mutex_lock(&srv->sess_mu);
    if (keys == NULL)
        n = srv->nholds;
    end = calloc(n + 1, sizeof(*end));
    owned = calloc(n + 1, sizeof(*owned));
    for (size_t i = 0, j = 0; (end != NULL) && (owned != NULL) && (i < n); i++) {
        ssize_t k;
        if (keys == NULL) { /* every hold of the session, whatever its key */
            while ((j < srv->nholds) && ((srv->holds[j].owner != ss) || (srv->holds[j].put != put)))
                j++;
            if (j == srv->nholds)
                break;
            k = (ssize_t)j;
        } else {
            k = hold_find(srv, keys[i], ss, put);
        }
        if (k < 0) {
            if (res != NULL)
                res[i].result = MC_INVALID_PARAMS;
            continue;
        }
        owned[nowned] = srv->holds[k].key;
        srv->holds[k].key = NULL;
        hold_del(srv, (size_t)k);
        if (put || (hold_find(srv, owned[nowned], NULL, 0) < 0))
            end[nend++] = owned[nowned];
        nowned++;
    }
    if (!put && (nend > 0))
        (void)mc_store_get_session_end(srv->store, end, nend);
    pthread_mutex_unlock(&srv->sess_mu);
    for (size_t i = 0; put && (i < nend); i++)
        out[(*nout)++] = end[i]; /* owned by the caller now */
    for (size_t i = 0; i < nowned; i++)
        if (!put)
            free(owned[i]);
    free(end);
    free(owned);
}

/* The session ended: its get sessions end, its put sessions are revoked. */
static void holds_release(session_t *ss)
{
    const char **puts;
    size_t nput = 0;

    pthread_mutex_lock(&ss->srv->sess_mu);
    puts = calloc(ss->srv->nholds + 1, sizeof(*puts));
    pthread_mutex_unlock(&ss->srv->sess_mu);
    if (puts == NULL)
        return;
    holds_drop(ss, NULL, 0, 0, NULL, NULL, NULL);
    holds_drop(ss, NULL, 0, 1, NULL, puts, &nput);
    if (nput > 0) {
        mc_status_t *sts = calloc(nput, sizeof(*sts));
        if (sts != NULL)
            (void)mc_store_put_session_revoke(ss->srv->store, puts, nput, sts);
        free(sts);
    }
    for (size_t i = 0; i < nput; i++)
        free((char *)puts[i]);
    free(puts);
}

/* Ranged I/O: per key, the key's item (MORE when ranges follow), then per
 * range a buffer item (region, off, len; MORE) and an offset item (off;
 * MORE unless the key's last).  -1 for a malformed frame or a buffer
 * outside the dummy's memory. */
static int do_session_io(session_t *ss, unsigned op, req_t *rq, mc_dummy_result_t *res)
{
    size_t n = rq->n, nk = 0, nr = 0;
    io_arrays_t a;
    int rc = -1;

    if (io_arrays_alloc(&a, n, res) != 0)
        return 0;
    for (size_t i = 0; i < n;) {
        const mc_dummy_item_t *it = &rq->items[i];
        size_t k = i++;
        if ((rq->keys[k] == NULL) || (it->flags & MC_DUMMY_IF_ARG))
            goto out;
        a.keys[nk] = rq->keys[k];
        a.bufs[nk] = &a.iovs[nr];
        a.offs[nk] = &a.ofs[nr];
        a.first[nk] = k;
        while (rq->items[i - 1].flags & MC_DUMMY_IF_MORE) { /* a (buffer, offset) pair */
            void *p;
            if ((i + 1 >= n) || (rq->keys[i] != NULL) || (rq->keys[i + 1] != NULL) ||
                !(rq->items[i].flags & MC_DUMMY_IF_MORE))
                goto out;
            p = range_of(ss, &rq->items[i]);
            if (p == NULL)
                goto out;
            a.iovs[nr] = (mc_iov_t){p, (size_t)rq->items[i].len};
            a.ofs[nr++] = rq->items[i + 1].off;
            a.counts[nk]++;
            i += 2;
        }
        nk++;
    }
    rc = 0;
    /* only the session's own keys reach the store */
    {
        size_t m = 0;
        pthread_mutex_lock(&ss->srv->sess_mu);
        for (size_t k = 0; k < nk; k++) {
            if (hold_find(ss->srv, a.keys[k], ss, op == MC_DUMMY_OP_PUT_SESSION_WRITE) < 0) {
                res[a.first[k]].result = MC_INVALID_PARAMS;
                continue;
            }
            a.keys[m] = a.keys[k];
            a.bufs[m] = a.bufs[k];
            a.offs[m] = a.offs[k];
            a.counts[m] = a.counts[k];
            a.first[m++] = a.first[k];
        }
        pthread_mutex_unlock(&ss->srv->sess_mu);
        if (op == MC_DUMMY_OP_PUT_SESSION_WRITE)
            (void)mc_store_put_session_write(ss->srv->store, a.keys, a.bufs, a.offs, a.counts, m,
                                             a.rs);
        else
            (void)mc_store_get_session_read(ss->srv->store, a.keys, a.bufs, a.offs, a.counts, m,
                                            a.rs);
        for (size_t k = 0; k < m; k++)
            res[a.first[k]].result = a.rs[k];
    }
out:
    io_arrays_free(&a);
    return rc;
}

/* The ranged-session ops on keys (starts, ends); -1 for a frame of the
 * wrong shape. */
static int do_sessions(session_t *ss, unsigned op, req_t *rq, mc_dummy_result_t *res,
                       named_t *nm)
{
    struct mc_store_dummy_server *srv = ss->srv;
    const char **keys = nm->keys;
    mc_status_t *sts = nm->sts;
    size_t nk = nm->nk;

    if (nm->na != 0)
        return -1;
    switch (op) {
    case MC_DUMMY_OP_GET_SESSION_START:
    case MC_DUMMY_OP_PUT_SESSION_START: {
        int put = (op == MC_DUMMY_OP_PUT_SESSION_START);
        uint64_t *sizes = calloc(nk + 1, sizeof(*sizes));
        size_t *at = calloc(nk + 1, sizeof(*at));
        const char **gids = NULL;
        mc_replicate_config_t cfg, *c = NULL;
        if ((sizes == NULL) || (at == NULL)) {
            free(sizes);
            free(at);
            for (size_t i = 0; i < nk; i++)
                res[i].result = MC_INTERNAL_ERROR;
            break;
        }
        if (put && rq->has_cfg && rq->cfg.present) {
            cfg_from_wire(&rq->cfg, &cfg);
            cfg.preferred_segment = rq->preferred;
            if (cfg.field_mask & MC_RC_FIELD_GROUP_IDS) {
                gids = calloc(nk + 1, sizeof(*gids));
                for (size_t i = 0; (gids != NULL) && (i < nk); i++)
                    gids[i] = (rq->groups[i] != NULL) ? rq->groups[i] : "";
                cfg.group_ids = gids;
                cfg.group_ids_count = (gids != NULL) ? nk : 0;
            }
            c = &cfg;
        }
        for (size_t i = 0; i < nk; i++)
            sizes[i] = rq->items[i].len;
        pthread_mutex_lock(&srv->sess_mu);
        /* a key another dummy reserved is, for this one, another client's
         * object being written: what the master answers an ordinary client.
         * The others go to the store, packed in front (at[]: their items) */
        size_t m = 0;
        for (size_t i = 0; i < nk; i++) {
            ssize_t h = put ? hold_find(srv, keys[i], NULL, 1) : -1;
            if ((h >= 0) && (srv->holds[h].owner != ss)) {
                res[i].result = MC_OBJECT_ALREADY_EXISTS;
                continue;
            }
            keys[m] = keys[i];
            sizes[m] = sizes[i];
            if (gids != NULL)
                gids[m] = gids[i];
            at[m++] = i;
        }
        if ((c != NULL) && (gids != NULL))
            cfg.group_ids_count = m;
        if (put)
            (void)mc_store_put_session_start(srv->store, keys, sizes, m, c, sts);
        else
            (void)mc_store_get_session_start(srv->store, keys, m, sts);
        for (size_t j = 0; j < m; j++) {
            if (sts[j] == MC_OK)
                sts[j] = hold_add(ss, keys[j], put);
            res[at[j]].result = sts[j];
        }
        pthread_mutex_unlock(&srv->sess_mu);
        free(sizes);
        free(at);
        free(gids);
        break;
    }
    case MC_DUMMY_OP_GET_SESSION_END:
        holds_drop(ss, keys, nk, 0, res, NULL, NULL);
        break;
    default: { /* PUT_SESSION_END, PUT_SESSION_REVOKE: the session's own keys */
        const char **mine = calloc(nk + 1, sizeof(*mine));
        size_t nmine = 0, j = 0;
        if (mine == NULL) {
            for (size_t i = 0; i < nk; i++)
                res[i].result = MC_INTERNAL_ERROR;
            break;
        }
        holds_drop(ss, keys, nk, 1, res, mine, &nmine);
        if (op == MC_DUMMY_OP_PUT_SESSION_END)
            (void)mc_store_put_session_end(srv->store, mine, nmine, sts);
        else
            (void)mc_store_put_session_revoke(srv->store, mine, nmine, sts);
        /* holds_drop kept the order of the keys it took */
        for (size_t i = 0; i < nk; i++)
            if ((res[i].result == 0) && (j < nmine))
                res[i].result = sts[j++];
        for (size_t i = 0; i < nmine; i++)
            free((char *)mine[i]);
        free(mine);
        break;
    }
    }
    return 0;
}

/* The ops on object keys and names: split the request, then run it. */
static int do_named_ops(session_t *ss, unsigned op, req_t *rq, mc_dummy_result_t *res)
{
    named_t nm = {calloc(rq->n + 1, sizeof(char *)), calloc(rq->n + 1, sizeof(char *)),
                  calloc(rq->n + 1, sizeof(mc_status_t)), 0, 0};
    int rc = 0;

    if ((op == MC_DUMMY_OP_GET_SESSION_READ) || (op == MC_DUMMY_OP_PUT_SESSION_WRITE)) {
        rc = do_session_io(ss, op, rq, res); /* keys and ranges, no names */
    } else if ((nm.keys == NULL) || (nm.args == NULL) || (nm.sts == NULL)) {
        for (size_t i = 0; i < rq->n; i++)
            res[i].result = MC_INTERNAL_ERROR;
    } else if ((op != MC_DUMMY_OP_REMOVE_ALL) &&
               (split_args(rq, nm.keys, &nm.nk, nm.args, &nm.na) != 0)) {
        rc = -1;
    } else if (op >= MC_DUMMY_OP_GET_SESSION_START) {
        rc = do_sessions(ss, op, rq, res, &nm);
    } else if (op >= MC_DUMMY_OP_MOUNT) {
        rc = do_segments(ss, op, rq, res, &nm);
    } else {
        rc = do_named(ss, op, rq, res, &nm);
    }
    free(nm.keys);
    free(nm.args);
    free(nm.sts);
    return rc;
}

/* ---- host memory a dummy registers ------------------------------------------ */

/*
 * REGISTER: one item, no key, len = the block's size; its memfd came with
 * the frame (ss->rx_fd, closed by serve_one: the mapping holds the pages).
 * The block is mapped, registered with the engine as HELLO's regions are,
 * and answered with its region id.  A refusal is a status (the dummy's
 * register_buffer says why); only a frame of the wrong shape is -1.
 */
static int do_register(session_t *ss, const req_t *rq, mc_dummy_result_t *res)
{
    uint64_t len;
    unsigned r = MC_DUMMY_MAX_REGIONS;
    mc_status_t st;
    void *p;

    if ((rq->n != 1) || (rq->keys[0] != NULL))
        return -1;
    len = rq->items[0].len;
    /* like HELLO's memfds: at least that long and sealed against shrinking,
     * or the mapping could fault (SIGBUS) here later */
    if ((ss->rx_fd < 0) || (len == 0) || (len > MC_DUMMY_MAX_REGION_SIZE) ||
        !mc_te_shm_fd_shareable(ss->rx_fd, len)) {
        mc_log_ratelimited(MC_LOG_WARN, "dummy server: a REGISTER of %llu bytes without %s; "
                           "refused", (unsigned long long)len,
                           (ss->rx_fd < 0) ? "a descriptor" : "sealed shared memory that long");
        res[0].result = MC_INVALID_PARAMS;
        return 0;
    }
    for (unsigned i = 0; i < MC_DUMMY_MAX_BUFS; i++) {
        unsigned k = MC_DUMMY_NREGIONS + (ss->next_region + i) % MC_DUMMY_MAX_BUFS;
        if (ss->base[k] == NULL) {
            r = k;
            break;
        }
    }
    if (r == MC_DUMMY_MAX_REGIONS) {
        mc_log_ratelimited(MC_LOG_WARN, "dummy server: a dummy has %u host-memory regions "
                           "registered already; refused another", MC_DUMMY_MAX_BUFS);
        res[0].result = MC_NO_AVAILABLE_HANDLE;
        return 0;
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ss->rx_fd, 0);
    if (p == MAP_FAILED) {
        mc_warn("dummy server: mmap of a dummy's %llu bytes of host memory: %m",
                (unsigned long long)len);
        res[0].result = MC_INTERNAL_ERROR;
        return 0;
    }
    /* the worker populated its pages; this maps them here too, so the first
     * transfer does not pay a fault per page */
    mc_store_populate(p, len);
    st = mc_store_register_buffer(ss->srv->store, p, len);
    if (st != MC_OK) {
        mc_warn("dummy server: registering a dummy's host memory: %s", mc_last_error_detail());
        munmap(p, len);
        res[0].result = st;
        return 0;
    }
    pthread_mutex_lock(&ss->mu);
    ss->base[r] = p;
    ss->size[r] = len;
    pthread_mutex_unlock(&ss->mu);
    ss->registered[r] = 1;
    ss->next_region = (r - MC_DUMMY_NREGIONS + 1) % MC_DUMMY_MAX_BUFS;
    mc_info("dummy server: a dummy registered %llu bytes of host memory (region %u)",
            (unsigned long long)len, r);
    res[0].result = r;
    return 0;
}

/*
 * UNREGISTER: one item naming a REGISTERed region.  Requests of one dummy
 * run one at a time on this thread, so none of its transfers on the region
 * is in flight any more: it leaves the engine and is unmapped now.
 */
static int do_unregister(session_t *ss, const req_t *rq, mc_dummy_result_t *res)
{
    unsigned r;

    if ((rq->n != 1) || (rq->keys[0] != NULL))
        return -1;
    r = rq->items[0].region;
    if ((r < MC_DUMMY_NREGIONS) || (r >= MC_DUMMY_MAX_REGIONS) || (ss->base[r] == NULL)) {
        res[0].result = MC_INVALID_PARAMS;
        return 0;
    }
    region_drop(ss, r);
    mc_info("dummy server: a dummy unregistered host memory (region %u)", r);
    res[0].result = MC_OK;
    return 0;
}

static void do_stats(struct mc_store_dummy_server *srv, mc_dummy_result_t *res)
{
    uint64_t sessions = 0, mapped = 0, allocated = 0;
    pthread_mutex_lock(&srv->lock);
    for (session_t *ss = srv->sessions; ss != NULL; ss = ss->next) {
        if (ss->done)
            continue;
        sessions++;
        for (unsigned r = 0; r < MC_DUMMY_MAX_REGIONS; r++) {
            pthread_mutex_lock(&ss->mu);
            if (ss->base[r] != NULL)
                mapped += ss->size[r];
            if ((r < MC_DUMMY_NREGIONS) && (ss->alloc[r] != NULL)) {
                mc_alloc_stats_t st;
                mc_alloc_get_stats(ss->alloc[r], &st);
                allocated += st.allocated;
            }
            pthread_mutex_unlock(&ss->mu);
        }
    }
    pthread_mutex_unlock(&srv->lock);
    res[0].result = (int64_t)sessions;
    res[1].result = (int64_t)mapped;
    res[2].result = (int64_t)allocated;
}

/* The next frame's header, and a descriptor sent with it (ss->rx_fd; only
 * MOUNT uses one, any other is closed).  0, or -1 when the connection
 * failed or closed. */
static int recv_hdr(session_t *ss, mc_dummy_hdr_t *h)
{
    size_t got = 0;
    while (got < sizeof(*h)) {
        struct iovec iov = {(uint8_t *)h + got, sizeof(*h) - got};
        int fd, nfds, ctrunc;
        ssize_t r = recvmsg_fds(ss->fd, &iov, 1, 0, &fd, 1, &nfds, &ctrunc);
        if ((r < 0) && (errno == EINTR))
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = ECONNRESET;
            return -1;
        }
        if ((nfds == 1) && (ss->rx_fd < 0))
            ss->rx_fd = fd;
        else if (nfds == 1)
            close(fd);
        got += (size_t)r;
    }
    return 0;
}

/* One request; -1 closes the connection. */
static int serve_one(session_t *ss)
{
    mc_dummy_hdr_t h;
    req_t rq;
    mc_dummy_result_t *res = NULL;
    size_t nres;
    int rc = -1;

    (void)mc_spin_readable(ss->fd, mc_dummy_spin_us());
    if (recv_hdr(ss, &h) != 0)
        return -1;
    if (mc_dummy_hdr_check(&h) != 0) {
        mc_warn("dummy server: a malformed frame (op %u, %u bytes); closing", h.op, h.len);
        return -1;
    }
    if (h.len > ss->cap) {
        uint8_t *p = realloc(ss->buf, h.len);
        if (p == NULL)
            return -1;
        ss->buf = p;
        ss->cap = h.len;
    }
    if ((h.len > 0) && (mc_dummy_recv_all(ss->fd, ss->buf, h.len) != 0))
        return -1;
    if (mc_dummy_req_parse(&h, ss->buf, h.len, &rq) != 0) {
        mc_warn("dummy server: a malformed %s request; closing", mc_dummy_op_name(h.op));
        return -1;
    }
    nres = (h.op == MC_DUMMY_OP_STATS) ? 3 : (h.op == MC_DUMMY_OP_PING) ? 0 : rq.n;
    res = calloc(nres + 1, sizeof(*res));
    if (res == NULL)
        goto out;
    switch (h.op) {
    case MC_DUMMY_OP_PING:
        break;
    case MC_DUMMY_OP_STATS:
        do_stats(ss->srv, res);
        break;
    case MC_DUMMY_OP_ALLOC:
        for (size_t i = 0; i < rq.n; i++) {
            mc_alloc_block_t b;
            unsigned r = rq.items[i].region;
            mc_status_t st;
            if ((r >= MC_DUMMY_NREGIONS) || (rq.items[i].len == 0))
                st = MC_INVALID_PARAMS;
            else
                st = block_get(ss, r, rq.items[i].len, &b);
            if (st != MC_OK) {
                res[i].result = st;
                continue;
            }
            res[i].off = b.offset;
            res[i].handle = b.node;
        }
        break;
    case MC_DUMMY_OP_FREE:
        for (size_t i = 0; i < rq.n; i++)
            res[i].result = block_free(ss, rq.items[i].region, rq.items[i].handle);
        break;
    case MC_DUMMY_OP_PUT:
    case MC_DUMMY_OP_GET:
        if (do_io(ss, h.op, &rq, res) != 0) {
            mc_warn("dummy server: a %s names memory outside the dummy's; closing",
                    mc_dummy_op_name(h.op));
            goto out;
        }
        break;
    case MC_DUMMY_OP_GET_STAGED:
        do_get_staged(ss, &rq, res);
        break;
    case MC_DUMMY_OP_REPLICAS:
        do_replicas(ss, &rq, res);
        break;
    case MC_DUMMY_OP_BATCH_REMOVE:
    case MC_DUMMY_OP_REMOVE_REGEX:
    case MC_DUMMY_OP_REMOVE_ALL:
    case MC_DUMMY_OP_REPLICA_CLEAR:
    case MC_DUMMY_OP_COPY_TASK:
    case MC_DUMMY_OP_MOVE_TASK:
    case MC_DUMMY_OP_QUERY_TASK:
    case MC_DUMMY_OP_MOUNT:
    case MC_DUMMY_OP_ALLOC_MOUNT:
    case MC_DUMMY_OP_UNMOUNT:
    case MC_DUMMY_OP_GET_SESSION_START:
    case MC_DUMMY_OP_GET_SESSION_READ:
    case MC_DUMMY_OP_GET_SESSION_END:
    case MC_DUMMY_OP_PUT_SESSION_START:
    case MC_DUMMY_OP_PUT_SESSION_WRITE:
    case MC_DUMMY_OP_PUT_SESSION_END:
    case MC_DUMMY_OP_PUT_SESSION_REVOKE:
        if (do_named_ops(ss, h.op, &rq, res) != 0) {
            mc_warn("dummy server: a malformed %s request; closing", mc_dummy_op_name(h.op));
            goto out;
        }
        break;
    case MC_DUMMY_OP_EXIST:
        do_exist(ss, &rq, res);
        break;
    case MC_DUMMY_OP_REGISTER:
    case MC_DUMMY_OP_UNREGISTER:
        if (((h.op == MC_DUMMY_OP_REGISTER) ? do_register(ss, &rq, res)
                                            : do_unregister(ss, &rq, res)) != 0) {
            mc_warn("dummy server: a malformed %s request; closing", mc_dummy_op_name(h.op));
            goto out;
        }
        break;
    default: /* SIZE, REMOVE: one key each */
        for (size_t i = 0; i < rq.n; i++) {
            const char *key = rq.keys[i];
            if (key == NULL) {
                res[i].result = MC_INVALID_PARAMS;
            } else if (h.op == MC_DUMMY_OP_SIZE) {
                uint64_t size = 0;
                mc_status_t st = mc_store_get_size(ss->srv->store, key, &size);
                res[i].result = (st != MC_OK) ? st : (int64_t)size;
            } else {
                res[i].result = mc_store_remove(ss->srv->store, key,
                                                (rq.items[i].flags & MC_DUMMY_IF_FORCE) != 0);
            }
        }
        break;
    }
    rc = 0;
    if (!(h.flags & MC_DUMMY_F_NOREPLY))
        rc = send_resp(ss, h.op, MC_OK, res, nres);
out:
    if (ss->rx_fd >= 0) /* a descriptor no op took */
        close(ss->rx_fd);
    ss->rx_fd = -1;
    free(res);
    mc_dummy_req_cleanup(&rq);
    return rc;
}

static void *session_main(void *arg)
{
    session_t *ss = arg;
    unsigned ttl = mc_store_env_interval_ms("MC_DUMMY_TTL_MS", DUMMY_TTL_MS, 100, 3600000);
    struct timeval tv = {ttl / 1000, (ttl % 1000) * 1000};

    /* liveness: every wait for the dummy's next frame ends after the TTL
     * (the dummy pings when idle), and a silent dummy is dropped */
    (void)setsockopt(ss->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (do_hello(ss) == MC_OK) {
        mc_info("dummy server: a dummy client connected");
        while (serve_one(ss) == 0)
            ;
        if ((errno == EAGAIN) || (errno == EWOULDBLOCK))
            mc_warn("dummy server: a dummy client was silent for more than %u ms; dropped", ttl);
        mc_info("dummy server: a dummy client went away; its memory is released");
    }
    /* the descriptor is closed by reap(); the dummy must see the end now
     * (a dropped one's next call fails at once instead of waiting) */
    shutdown(ss->fd, SHUT_RDWR);
    /* what the dummy opened and mounted goes first (master round trips:
     * not under srv->lock) */
    holds_release(ss);
    segs_release(ss);
    pthread_mutex_lock(&ss->srv->lock);
    session_release(ss);
    ss->done = 1;
    pthread_mutex_unlock(&ss->srv->lock);
    return NULL;
}

/* Join and free the sessions whose thread has ended.  srv->lock held. */
static void reap(struct mc_store_dummy_server *srv, int all)
{
    session_t **pp = &srv->sessions;
    while (*pp != NULL) {
        session_t *ss = *pp;
        if (ss->done || all) {
            *pp = ss->next;
            pthread_mutex_unlock(&srv->lock);
            pthread_join(ss->thread, NULL);
            pthread_mutex_lock(&srv->lock);
            close(ss->fd);
            pthread_mutex_destroy(&ss->mu);
            free(ss);
        } else {
            pp = &ss->next;
        }
    }
}

/* The peer of a unix socket runs as our effective uid (SO_PEERCRED). */
static int dummy_peer_is_us(int fd)
{
    struct ucred cr;
    socklen_t l = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) != 0)
        return 0;
    return cr.uid == geteuid();
}

static void *accept_main(void *arg)
{
    struct mc_store_dummy_server *srv = arg;
    for (;;) {
        int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&srv->lock);
        if (srv->stop) {
            pthread_mutex_unlock(&srv->lock);
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        reap(srv, 0);
        if (fd < 0) {
            pthread_mutex_unlock(&srv->lock);
            if ((errno != EINTR) && (errno != ECONNABORTED))
                usleep(10000);
            continue;
        }
        /* With cluster authentication on, a dummy does not prove the secret
         * (it never talks to the cluster itself): it must be a process of
         * this user, as the kernel vouches (docs/security.md, "Dummy
         * clients").  An abstract socket is open to every local user. */
        if ((srv->store->auth != NULL) && !dummy_peer_is_us(fd)) {
            pthread_mutex_unlock(&srv->lock);
            mc_log_ratelimited(MC_LOG_WARN, "dummy server %s: refused a dummy of another "
                               "user (cluster authentication is on)", srv->path);
            close(fd);
            continue;
        }
        session_t *ss = calloc(1, sizeof(*ss));
        if (ss == NULL) {
            close(fd);
            pthread_mutex_unlock(&srv->lock);
            continue;
        }
        ss->srv = srv;
        ss->fd = fd;
        ss->rx_fd = -1;
        pthread_mutex_init(&ss->mu, NULL);
        if (pthread_create(&ss->thread, NULL, session_main, ss) != 0) {
            close(fd);
            pthread_mutex_destroy(&ss->mu);
            free(ss);
        } else {
            ss->next = srv->sessions;
            srv->sessions = ss;
        }
        pthread_mutex_unlock(&srv->lock);
    }
}

MC_API mc_status_t mc_store_dummy_server_start(mc_store_h store, const char *ipc_path,
                                               mc_store_dummy_server_h *server_p)
{
    struct mc_store_dummy_server *srv;
    struct sockaddr_un sa;
    socklen_t salen;

    if ((store == NULL) || (ipc_path == NULL) || (server_p == NULL)) {
        mc_set_error_detail("store, ipc_path and server_p are required");
        return MC_INVALID_PARAMS;
    }
    if (mc_dummy_ipc_addr(ipc_path, &sa, &salen) != 0) {
        mc_set_error_detail("ipc socket path \"%s\" is empty or too long", ipc_path);
        return MC_INVALID_PARAMS;
    }
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return MC_INTERNAL_ERROR;
    srv->store = store;
    snprintf(srv->path, sizeof(srv->path), "%s", ipc_path);
    pthread_mutex_init(&srv->lock, NULL);
    pthread_mutex_init(&srv->sess_mu, NULL);
    srv->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if ((srv->lfd < 0) || (bind(srv->lfd, (struct sockaddr *)&sa, salen) != 0) ||
        (listen(srv->lfd, 128) != 0)) {
        mc_set_error_detail("cannot listen on %s: %s", ipc_path, strerror(errno));
        if (srv->lfd >= 0)
            close(srv->lfd);
        pthread_mutex_destroy(&srv->lock);
        pthread_mutex_destroy(&srv->sess_mu);
        free(srv);
        return (errno == EADDRINUSE) ? MC_INVALID_PARAMS : MC_INTERNAL_ERROR;
    }
    if (pthread_create(&srv->accept_thread, NULL, accept_main, srv) != 0) {
        mc_set_error_detail("cannot start the dummy server thread");
        close(srv->lfd);
        pthread_mutex_destroy(&srv->lock);
        pthread_mutex_destroy(&srv->sess_mu);
        free(srv);
        return MC_INTERNAL_ERROR;
    }
    *server_p = srv;
    return MC_OK;
}

MC_API void mc_store_dummy_server_stop(mc_store_dummy_server_h srv)
{
    if (srv == NULL)
        return;
    pthread_mutex_lock(&srv->lock);
    srv->stop = 1;
    for (session_t *ss = srv->sessions; ss != NULL; ss = ss->next)
        shutdown(ss->fd, SHUT_RDWR);
    pthread_mutex_unlock(&srv->lock);
    shutdown(srv->lfd, SHUT_RDWR); /* wakes accept() */
    pthread_join(srv->accept_thread, NULL);
    close(srv->lfd);
    if (srv->path[0] != '@')
        unlink(srv->path);
    pthread_mutex_lock(&srv->lock);
    reap(srv, 1);
    pthread_mutex_unlock(&srv->lock);
    pthread_mutex_destroy(&srv->lock);
    pthread_mutex_destroy(&srv->sess_mu);
    free(srv->holds);
    free(srv);
}

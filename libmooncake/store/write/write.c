/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The single-key write: put, put_parts, upsert, upsert_parts, put_from,
 * upsert_from (the embedded backend's write op, ../ops.h).
 *
 * A put is two-phase (docs/protocol.md, PUT_*): PUT_START allocates one
 * buffer per replica on distinct segments, the bytes go straight from the
 * caller's memory into the owners' memory in ONE mc_te_transfer() call
 * (every replica and every part concurrently), then PUT_END publishes the
 * object or PUT_REVOKE frees the buffers.  The master connection is given
 * back to the pool while the bytes move, so a slow transfer does not hold
 * one of the pool's slots.  OBJECT_ALREADY_EXISTS from the start means
 * another writer won; put reports MC_OK and the old value stays.  A put
 * of a steady shape goes in one round trip through a reservation
 * (reserve.c, PUT_COMMIT).  A write whose transfer failed is tried once
 * more on a fresh placement.
 *
 * Replica descriptors come from the network: a replica smaller than the
 * object, an address range that wraps, or a segment name we cannot open is
 * refused before any byte moves.
 *
 * The pipeline, top to bottom (mc_write_do): check the config (and the
 * tiers' checks), START, the memory replicas' transfer requests, the
 * master connection back, the tiers' file replicas (a DFS record), one
 * transfer, END or REVOKE, then the tiers' sealed hook (the SSD offload
 * queue).  The tiers come in through ../tiers/tiers.h's hooks only.
 *
 * The writes are parameterised by the operation (put or upsert: the same
 * messages under other opcodes) and by flags saying whether the sources
 * must be registered memory (the zero-copy *_from calls) and whether
 * prefer_alloc_in_same_node is allowed (the multi-buffer calls only, as
 * upstream).  A source of many parts is written as their concatenation.
 *
 * May call: write.h (this folder), ../calls.c, ../read/read.h
 * (registered memory, the staging buffer, the location cache),
 * ../tiers/tiers.h (hooks), metrics, the master pool, the engine.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda.h"
#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/tiers/tiers.h"
#include "store/write/write.h"
#include "transfer/engine.h"

/* Requests kept on the stack on the single-key path. */
#define MC_PUT_STACK_REQS 16

/* ---- requests to replicas ---------------------------------------------------------- */

/* Open a segment named by the master (not NUL-terminated on the wire). */
static mc_status_t open_replica_segment(mc_store_h s, mc_str_t name, mc_te_segment_id_t *seg_p)
{
    char buf[MC_STORE_NAME_MAX];
    mc_status_t st;

    if ((name.len == 0) || (name.len >= sizeof(buf)) || memchr(name.ptr, '\0', name.len)) {
        mc_set_error_detail("master named an invalid segment for a replica");
        return MC_INVALID_REPLICA;
    }
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = '\0';
    st            = mc_te_segment_open(s->te, buf, seg_p);
    if (st != MC_OK)
        mc_warn("cannot open segment %s: %s (%s)", buf, mc_status_name(st),
                mc_last_error_detail());
    return st;
}

/*
 * Append the WRITE requests that copy parts[0..n) (total bytes) into one
 * replica, and beside each in @p gens the registration generation of the
 * replica's segment: the holder refuses the write if that memory was
 * registered again since the master placed the replica (a segment
 * unmounted and another mounted at the same addresses).  The replica is
 * validated first: a memory replica in PROCESSING state, big enough, not
 * wrapping the address space.
 */
mc_status_t mc_write_replica_reqs(mc_store_h s, const mc_wire_replica_t *r, const mc_iov_t *parts,
                                  size_t nparts, uint64_t total, mc_te_request_t *reqs,
                                  uint64_t *gens, size_t *nreq_p)
{
    uint64_t gen = mc_store_replica_gen(r);
    mc_status_t st;
    mc_te_segment_id_t seg;
    uint64_t off = 0;

    /* a NoF replica (type 3) is written like memory: its storage node's
     * engine serves the range from its file segment */
    if (((r->type != MC_WIRE_REPLICA_MEMORY) && (r->type != MC_WIRE_REPLICA_NOF)) ||
        (r->size < total) || (r->addr > UINT64_MAX - total)) {
        mc_set_error_detail("master returned an unusable replica (type %u, %llu bytes for "
                            "a %llu-byte object)", (unsigned)r->type,
                            (unsigned long long)r->size, (unsigned long long)total);
        mc_warn("%s", mc_last_error_detail());
        return MC_INVALID_REPLICA;
    }
    st = open_replica_segment(s, r->segment, &seg);
    if (st != MC_OK)
        return st;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len == 0)
            continue;
        gens[*nreq_p]      = gen;
        mc_te_request_t *q = &reqs[(*nreq_p)++];
        q->op              = MC_TE_WRITE;
        q->local           = (void *)(uintptr_t)parts[i].base;
        q->remote          = r->addr + off;
        q->length          = parts[i].len;
        q->segment         = seg;
        off += parts[i].len;
    }
    return MC_OK;
}

/* Without a staging buffer, upstream cannot write from unregistered memory. */
static mc_status_t check_staging(mc_store_h s, const mc_iov_t *parts, size_t n)
{
    if (s->lbuf_size > 0)
        return MC_OK;
    for (size_t i = 0; i < n; i++) {
        if ((parts[i].len > 0) && !mc_te_mem_is_registered(s->te, parts[i].base, parts[i].len)) {
            mc_set_error_detail("local_buffer_size is 0: writing from unregistered memory "
                                "needs a staging buffer (register the memory or set "
                                "local_buffer_size)");
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

mc_status_t mc_write_check_parts(const mc_iov_t *parts, size_t n, uint64_t *total_p)
{
    uint64_t total = 0;
    if ((n > 0) && (parts == NULL)) {
        mc_set_error_detail("parts is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        if ((parts[i].len > 0) && (parts[i].base == NULL)) {
            mc_set_error_detail("part %zu has a NULL base and %zu bytes", i, parts[i].len);
            return MC_INVALID_PARAMS;
        }
        if (parts[i].len > UINT64_MAX - total) {
            mc_set_error_detail("parts add up to more than 2^64 bytes");
            return MC_INVALID_PARAMS;
        }
        total += parts[i].len;
    }
    *total_p = total;
    return MC_OK;
}

/* ---- the two-phase write, shared by put and upsert ---------------------------------- */

const char *mc_write_op_name(write_op_t op)
{
    return (op == WRITE_UPSERT) ? "upsert" : "put";
}

/* START for one key; on MC_OK *reps borrows from *conn_p. */
static mc_status_t write_start(mc_store_h s, write_op_t op, mc_mconn_t **conn_p, mc_str_t key,
                               uint64_t length, const mc_wire_config_t *config,
                               mc_wire_replica_list_t *reps)
{
    mc_status_t st;
#define WRITE_START_(low)                                                        \
    do {                                                                         \
        mc_wire_##low##_req_t rq_;                                               \
        mc_wire_##low##_resp_t rs_;                                              \
        memset(&rq_, 0, sizeof(rq_));                                            \
        rq_.client_id = s->client_id;                                            \
        rq_.key       = key;                                                     \
        rq_.length    = length;                                                  \
        rq_.config    = *config;                                                 \
        st            = mc_master_pool_call_##low(&s->pool, conn_p, &rq_, &rs_); \
        if (st == MC_OK)                                                         \
            *reps = rs_.replicas;                                                \
    } while (0)
    if (op == WRITE_UPSERT)
        WRITE_START_(upsert_start);
    else
        WRITE_START_(put_start);
#undef WRITE_START_
    return st;
}

/* END (publish) or, with @p revoke, REVOKE (free) one key. */
static mc_status_t write_seal(mc_store_h s, write_op_t op, int revoke, mc_str_t key)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
#define WRITE_SEAL_(low)                                                          \
    do {                                                                          \
        mc_wire_##low##_req_t rq_;                                                \
        mc_wire_##low##_resp_t rs_;                                               \
        memset(&rq_, 0, sizeof(rq_));                                             \
        rq_.client_id = s->client_id;                                             \
        rq_.key       = key;                                                      \
        st            = mc_master_pool_call_##low(&s->pool, &conn, &rq_, &rs_);  \
    } while (0)
    if (op == WRITE_UPSERT) {
        if (revoke)
            WRITE_SEAL_(upsert_revoke);
        else
            WRITE_SEAL_(upsert_end);
    } else {
        if (revoke)
            WRITE_SEAL_(put_revoke);
        else
            WRITE_SEAL_(put_end);
    }
#undef WRITE_SEAL_
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if ((st == MC_OK) && !revoke)
        mc_store_tiers_sealed(s, key); /* docs/tiers.md */
    return st;
}

mc_status_t mc_store_put_seal(mc_store_h s, int revoke, mc_str_t key)
{
    return write_seal(s, WRITE_PUT, revoke, key);
}

/* Free the buffers of a write that cannot finish; keeps the caller's detail. */
static void write_revoke(mc_store_h s, write_op_t op, mc_str_t key)
{
    char detail[512];
    mc_status_t st;

    snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
    st = write_seal(s, op, 1, key);
    if (st != MC_OK)
        mc_warn("%s revoke of %.*s failed: %s", mc_write_op_name(op),
                (int)MC_MIN(key.len, 128u), key.ptr, mc_status_name(st));
    mc_set_error_detail("%s", detail);
}

/*
 * Where the bytes may come from.  A zero-copy write (put_from and friends)
 * promises the caller's memory is registered: anything else is refused
 * before a byte moves.  A copying write needs a staging buffer only when
 * the memory is not registered with the engine (check_staging).
 */
mc_status_t mc_write_check_sources(mc_store_h s, const mc_iov_t *parts, size_t n, unsigned flags)
{
    if (!(flags & MC_WF_ZERO_COPY))
        return check_staging(s, parts, n);
    for (size_t i = 0; i < n; i++) {
        if ((parts[i].len > 0) && !mc_store_mem_is_usable(s, parts[i].base, parts[i].len)) {
            mc_set_error_detail("source buffer %zu (%p, %zu bytes) is not registered memory: "
                                "register it with register_buffer or allocate it from the "
                                "store's pool", i, parts[i].base, parts[i].len);
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

/*
 * A put's sources through the staging buffer when some part is
 * unregistered and some memory replica is on another host
 * (mc_store_rdma_stage_wanted), so it goes by RDMA WRITE.  1 with
 * *@p ptr_p / *@p block_p to free after the transfer; 0 (nothing staged:
 * another protocol, all registered or all replicas on this host, no
 * staging buffer or no room now) and the write goes from the caller's
 * memory as before.
 */
static int stage_for_rdma(mc_store_h s, const mc_wire_replica_list_t *reps,
                          const mc_iov_t *parts, size_t nparts, uint64_t total, void **ptr_p,
                          mc_alloc_block_t *block_p)
{
    int need = 0;
    uint8_t *p;

    if ((strcmp(s->protocol, "rdma") != 0) || (total == 0) || (total > s->lbuf_size))
        return 0;
    for (uint32_t r = 0; (r < reps->n) && !need; r++) {
        mc_te_segment_id_t seg;
        if ((reps->v[r].type != MC_WIRE_REPLICA_MEMORY) && (reps->v[r].type != MC_WIRE_REPLICA_NOF))
            continue;
        if (open_replica_segment(s, reps->v[r].segment, &seg) != MC_OK)
            continue; /* the write itself says so */
        for (size_t i = 0; (i < nparts) && !need; i++)
            need = mc_store_rdma_stage_wanted(s, parts[i].base, parts[i].len, seg);
    }
    if (!need || (mc_store_lbuf_alloc(s, total, ptr_p, block_p) != MC_OK))
        return 0;
    p = *ptr_p;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len > 0)
            memcpy(p, parts[i].base, parts[i].len);
        p += parts[i].len;
    }
    return 1;
}

/*
 * The bytes of one write into the replicas @p reps (one transfer; the
 * requests on the stack when they fit).  When @p reps live in the answer
 * on *@p conn_p, that master connection is given back (and cleared) once
 * the requests are built: the bytes move without holding it.
 */
static mc_status_t write_bytes(mc_store_h s, const mc_wire_replica_list_t *reps, mc_str_t key,
                               const mc_iov_t *parts, size_t nparts, uint64_t total,
                               mc_mconn_t **conn_p, uint64_t retry_since_ns)
{
    mc_te_request_t stack_reqs[MC_PUT_STACK_REQS];
    uint64_t stack_gens[MC_PUT_STACK_REQS];
    mc_te_request_t *reqs = stack_reqs;
    uint64_t *gens        = stack_gens;
    size_t nreq = 0, cap;
    mc_status_t st                = MC_OK;
    const mc_wire_replica_t *file = NULL; /* a tier's, written from the file side */
    const mc_store_tier_hooks_t *ftier = NULL;
    mc_wire_replica_t d;
    char dname[64];
    mc_alloc_block_t sblock;
    void *staged = NULL;
    mc_iov_t one;

    if (nparts > SIZE_MAX / sizeof(*reqs) / reps->n) {
        mc_set_error_detail("too many parts");
        return MC_INVALID_PARAMS;
    }
    cap = (size_t)reps->n * nparts;
    if (cap > MC_PUT_STACK_REQS) {
        reqs = malloc(cap * sizeof(*reqs));
        gens = malloc(cap * sizeof(*gens));
        if ((reqs == NULL) || (gens == NULL)) {
            free(reqs);
            free(gens);
            mc_set_error_detail("out of memory for %zu transfer requests", cap);
            return MC_INTERNAL_ERROR;
        }
    }
    if (stage_for_rdma(s, reps, parts, nparts, total, &staged, &sblock)) {
        one    = (mc_iov_t){staged, (size_t)total};
        parts  = &one;
        nparts = 1;
    }
    for (uint32_t i = 0; (i < reps->n) && (st == MC_OK); i++) {
        const mc_store_tier_hooks_t *t = mc_store_tiers_file_writer(reps->v[i].type);
        if ((t != NULL) && (file == NULL)) {
            file  = &reps->v[i]; /* written below, from the file side */
            ftier = t;
            continue;
        }
        st = mc_write_replica_reqs(s, &reps->v[i], parts, nparts, total, reqs, gens, &nreq);
    }
    /* the replica list stays in the connection's arena until it is
     * reused: the file write takes what it needs first */
    if (file != NULL) {
        d               = *file;
        d.file_path.len = (d.file_path.len < sizeof(dname)) ? d.file_path.len : 0;
        memcpy(dname, file->file_path.ptr, d.file_path.len);
        d.file_path.ptr = dname;
    }
    if ((conn_p != NULL) && (*conn_p != NULL)) {
        mc_master_pool_put(&s->pool, *conn_p);
        *conn_p = NULL;
    }
    if ((st == MC_OK) && (file != NULL))
        st = ftier->write_file(s, &d, key, parts, nparts, total); /* a DFS record */
    for (size_t i = 0; (st == MC_OK) && (retry_since_ns != 0) && (i < nreq); i++) {
        if ((i == 0) || (reqs[i].segment != reqs[i - 1].segment))
            mc_te_segment_revive(s->te, reqs[i].segment, retry_since_ns);
    }
    if (st == MC_OK)
        st = mc_te_transfer_gen(s->te, reqs, gens, nreq, NULL);
    if (staged != NULL)
        mc_store_lbuf_free(s, &sblock);
    if (reqs != stack_reqs) {
        free(reqs);
        free(gens);
    }
    return st;
}

/* A reservation for a put of @p total bytes placed for @p wcfg: a kept
 * one, else a fresh PUT_RESERVE when this shape came lately.  0 when there
 * is none to be had (the caller takes the two-trip path). */
static int resv_get(mc_store_h s, uint64_t total, const mc_wire_config_t *wcfg, mc_resv_t *r)
{
    mc_wire_put_reserve_req_t rq;
    mc_wire_put_reserve_resp_t rs;
    mc_mconn_t *conn = NULL;
    uint64_t sent;
    mc_status_t st;

    if (mc_store_resv_take(s, total, wcfg, r))
        return 1;
    if (!mc_store_resv_seen(s, total, wcfg))
        return 0; /* a shape not seen lately: PUT_START wastes no space */
    memset(&rq, 0, sizeof(rq));
    rq.client_id = s->client_id;
    rq.length    = total;
    rq.config    = *wcfg;
    sent         = mc_now_us();
    st           = mc_master_pool_call_put_reserve(&s->pool, &conn, &rq, &rs);
    if (st == MC_OK)
        st = mc_store_resv_make(r, rs.reservation_id, rs.ttl_ms, sent, conn->view_version,
                                total, wcfg, &rs.replicas);
    else if (st == MC_NOT_SUPPORTED)
        mc_store_resv_disable(s);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return st == MC_OK;
}

/*
 * A put in one master round trip (docs/protocol.md §5.18): the bytes go
 * into a reservation, then PUT_COMMIT publishes them under @p key and
 * brings the reservation for the next put.  Sets *done_p to 0 when the
 * put must take the two-trip path instead (no reservation, or the master
 * no longer knows it); the caller then writes the bytes again from
 * scratch, which is harmless: nothing was published.
 */
static mc_status_t write_one_trip(mc_store_h s, mc_str_t key, const mc_iov_t *parts,
                                  size_t nparts, uint64_t total, const mc_wire_config_t *wcfg,
                                  int *done_p, struct mc_store_query **spec_p,
                                  uint64_t retry_since_ns)
{
    mc_wire_put_commit_req_t rq;
    mc_wire_put_commit_resp_t rs;
    mc_mconn_t *conn = NULL;
    mc_resv_t r, next;
    uint64_t sent;
    mc_status_t st;

    *done_p = 0;
    if (!resv_get(s, total, wcfg, &r))
        return MC_OK;
    st = write_bytes(s, &r.reps, key, parts, nparts, total, NULL, retry_since_ns);
    if (st != MC_OK) {
        /* the holder or the segment may be gone (the master frees the
         * buffers itself): PUT_START places the put afresh */
        mc_debug("a reserved write of %.*s failed (%s); putting it anew", (int)key.len, key.ptr,
                 mc_status_name(st));
        mc_store_resv_free(&r);
        return MC_OK;
    }
    memset(&rq, 0, sizeof(rq));
    rq.client_id      = s->client_id;
    rq.key            = key;
    rq.reservation_id = r.id;
    rq.config         = *wcfg;
    rq.renew          = 1;
    sent              = mc_now_us();
    st                = mc_master_pool_call_put_commit(&s->pool, &conn, &rq, &rs);
    if ((conn != NULL) && (conn->view_version != r.view))
        st = MC_OBJECT_NOT_FOUND; /* another master: it knows no reservation of ours */
    switch (st) {
    case MC_OK:
        *done_p = 1;
        if (spec_p != NULL)
            *spec_p = mc_store_spec_build(s, key.ptr, total, &r.reps);
        mc_store_resv_free(&r);
        if ((rs.next_id != 0) &&
            (mc_store_resv_make(&next, rs.next_id, rs.ttl_ms, sent, conn->view_version, total,
                                wcfg, &rs.next) == MC_OK))
            mc_store_resv_give(s, &next);
        mc_store_tiers_sealed(s, key); /* docs/tiers.md */
        break;
    case MC_OBJECT_ALREADY_EXISTS:
        *done_p = 1; /* first writer wins; the reservation is still ours */
        st      = MC_OK;
        mc_store_resv_give(s, &r);
        break;
    case MC_OBJECT_NOT_FOUND: /* expired, segment gone, master restarted */
    case MC_RPC_FAIL:         /* maybe committed: PUT_START then says -705 */
    case MC_RPC_TIMEOUT:
        mc_store_resv_free(&r);
        break;
    default:
        *done_p = 1;
        mc_store_resv_give(s, &r);
        break;
    }
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return *done_p ? st : MC_OK;
}

/* @p spec_p (optional, puts only): where the value went, for the location
 * cache (mc_store_spec_build), when the put stored it. */
mc_status_t mc_write_do(mc_store_h s, write_op_t op, const char *key, const mc_iov_t *parts,
                        size_t nparts, const mc_replicate_config_t *cfg, unsigned flags,
                        struct mc_store_query **spec_p, uint64_t retry_since_ns)
{
    struct mc_store_query *spec = NULL;
    mc_status_t st;
    size_t klen;
    uint64_t total;
    mc_mconn_t *conn = NULL;
    mc_str_t gid, wkey;
    mc_wire_config_t wcfg;
    mc_wire_replica_list_t reps;

    st = mc_store_check_key(key, &klen);
    if (st != MC_OK)
        return st;
    st = mc_write_check_parts(parts, nparts, &total);
    if (st != MC_OK)
        return st;
    st = mc_store_config_check(cfg, 1, flags);
    if (st == MC_OK)
        st = mc_store_tiers_config_check(s, cfg);
    if (st != MC_OK)
        return st;
    st = mc_write_check_sources(s, parts, nparts, flags);
    if (st != MC_OK)
        return st;
    if (total == 0)
        return MC_OK; /* upstream stores nothing for an empty value */

    wkey = (mc_str_t){key, (uint32_t)klen};
    mc_store_config_to_wire(cfg, NULL, 1, &gid, &wcfg);
    /* reservations hold memory replicas only: puts that also ask for NoF
     * or DFS replicas take PUT_START (docs/protocol.md §5.18) */
    if ((op == WRITE_PUT) && (wcfg.dfs_replica_num == 0) && (wcfg.nof_replica_num == 0) &&
        mc_store_resv_wanted(s, total)) {
        int done;
        st = write_one_trip(s, wkey, parts, nparts, total, &wcfg, &done, spec_p, retry_since_ns);
        if (done)
            return st;
    }
    st = write_start(s, op, &conn, wkey, total, &wcfg, &reps);
    if ((op == WRITE_PUT) && (st == MC_OBJECT_ALREADY_EXISTS)) {
        st = MC_OK; /* first writer wins; the old value stays */
        goto done;
    }
    if ((op == WRITE_UPSERT) && (st == MC_INVALID_PARAMS))
        mc_store_tiers_upsert_refused(s, key);
    if (st != MC_OK)
        goto done;

    if (reps.n == 0) {
        mc_set_error_detail("master allocated no replica for %s", key);
        st = MC_INVALID_REPLICA;
        goto revoke;
    }

    /* every replica gets every non-empty part; the bytes move without
     * holding the master connection */
    st = write_bytes(s, &reps, wkey, parts, nparts, total, &conn, retry_since_ns);
    if (st == MC_INVALID_REPLICA)
        goto revoke;
    if (st != MC_OK) {
        char detail[512];
        snprintf(detail, sizeof(detail), "transfer of %s failed: %s", key,
                 mc_last_error_detail());
        mc_warn("%s of %s (%llu bytes) failed: %s (%s); revoking", mc_write_op_name(op), key,
                (unsigned long long)total, mc_status_name(st), detail);
        mc_set_error_detail("%s", detail);
        goto revoke;
    }
    if ((op == WRITE_PUT) && (spec_p != NULL))
        spec = mc_store_spec_build(s, key, total, &reps);
    st = write_seal(s, op, 0, wkey);
    if ((st == MC_OK) && (spec_p != NULL)) {
        *spec_p = spec;
        spec    = NULL;
    }
    mc_store_query_release(spec);
    goto done;

revoke:
    if (conn != NULL) {
        mc_master_pool_put(&s->pool, conn);
        conn = NULL;
    }
    write_revoke(s, op, wkey);
done:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return st;
}

/* Bytes of a checked value (metrics). */
uint64_t mc_write_iov_total(const mc_iov_t *parts, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += parts[i].len;
    return total;
}

/*
 * A write whose bytes could not reach a holder (dead, or its link cut:
 * the engine gives up within its connect and I/O timeouts) has been
 * revoked; it is tried once more, with a fresh PutStart, unless the
 * configuration pins it to a preferred segment (it would land on the same
 * holder).  The master no longer places on a holder that missed its
 * heartbeats (--client_suspect_heartbeats), so the second placement
 * usually avoids it; where it does not, the holder heartbeats, and the
 * engine's verdict that it is down, when reached before the write began,
 * does not fail the second try at once (mc_te_segment_revive).
 */
int mc_write_retryable(mc_status_t st, const mc_replicate_config_t *cfg)
{
    if (st != MC_TRANSFER_FAIL)
        return 0;
    return (cfg == NULL) || (cfg->preferred_segment == NULL) ||
           (cfg->preferred_segment[0] == '\0');
}

/* The embedded backend's single-key write. */
mc_status_t mc_emb_write(mc_store_h s, int upsert, const char *key, const mc_iov_t *parts, size_t n,
                         const mc_replicate_config_t *cfg, unsigned flags)
{
    write_op_t op  = upsert ? WRITE_UPSERT : WRITE_PUT;
    uint64_t t0    = mc_store_metrics_now_us();
    uint64_t began = mc_now_ns();
    mc_status_t st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    struct mc_store_query *spec = NULL;
    st = mc_write_do(s, op, key, parts, n, cfg, flags, (op == WRITE_PUT) ? &spec : NULL, 0);
    if (mc_write_retryable(st, cfg)) {
        mc_info("%s of %s: the transfer failed (%s); once more on a fresh placement",
                mc_write_op_name(op), key, mc_last_error_detail());
        st = mc_write_do(s, op, key, parts, n, cfg, flags, (op == WRITE_PUT) ? &spec : NULL,
                         began);
    }
    mc_store_cache_drop(s, key); /* what this client had cached may be the old value */
    mc_store_spec_note(s, spec); /* where this put went: a speculative entry */
    mc_store_metrics_record(&s->metrics, MC_MOP_PUT, t0, 1, st != MC_OK,
                            (st == MC_OK) ? mc_write_iov_total(parts, n) : 0);
    mc_store_leave(s);
    return st;
}

/* Public entry of every single-key write. */
static mc_status_t write_one(mc_store_h s, write_op_t op, const char *key, const mc_iov_t *parts,
                             size_t n, const mc_replicate_config_t *cfg, unsigned flags)
{
    return MC_STORE_DISPATCH(s, write, op == WRITE_UPSERT, key, parts, n, cfg, flags);
}

MC_API mc_status_t mc_store_put(mc_store_h s, const char *key, const void *data, size_t len,
                                const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {data, len};
    return write_one(s, WRITE_PUT, key, &part, 1, cfg, 0);
}

MC_API mc_status_t mc_store_put_parts(mc_store_h s, const char *key, const mc_iov_t *parts,
                                      size_t n, const mc_replicate_config_t *cfg)
{
    return write_one(s, WRITE_PUT, key, parts, n, cfg, 0);
}

MC_API mc_status_t mc_store_upsert(mc_store_h s, const char *key, const void *data, size_t len,
                                   const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {data, len};
    return write_one(s, WRITE_UPSERT, key, &part, 1, cfg, 0);
}

MC_API mc_status_t mc_store_upsert_parts(mc_store_h s, const char *key, const mc_iov_t *parts,
                                         size_t n, const mc_replicate_config_t *cfg)
{
    return write_one(s, WRITE_UPSERT, key, parts, n, cfg, 0);
}

/* put_from / upsert_from of CUDA device memory: copied to host memory
 * first, then written as put / upsert do (docs/cuda.md). */
static mc_status_t staged_write(mc_store_h s, write_op_t kind, const char *key, const void *dev,
                                size_t len, const mc_replicate_config_t *cfg)
{
    mc_iov_t part;
    mc_status_t st;
    void *host = malloc((len > 0) ? len : 1);
    if (host == NULL) {
        mc_set_error_detail("cannot allocate %zu bytes to stage a device write", len);
        return MC_INTERNAL_ERROR;
    }
    st = mc_cuda_copy(host, dev, len);
    if (st == MC_OK) {
        part = (mc_iov_t){host, len};
        st   = write_one(s, kind, key, &part, 1, cfg, 0);
    }
    free(host);
    return st;
}

MC_API mc_status_t mc_store_put_from(mc_store_h s, const char *key, const void *buf, size_t len,
                                     const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {buf, len};
    if (mc_cuda_is_device_ptr(buf))
        return staged_write(s, WRITE_PUT, key, buf, len, cfg);
    return write_one(s, WRITE_PUT, key, &part, 1, cfg, MC_WF_ZERO_COPY);
}

MC_API mc_status_t mc_store_upsert_from(mc_store_h s, const char *key, const void *buf,
                                        size_t len, const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {buf, len};
    if (mc_cuda_is_device_ptr(buf))
        return staged_write(s, WRITE_UPSERT, key, buf, len, cfg);
    return write_one(s, WRITE_UPSERT, key, &part, 1, cfg, MC_WF_ZERO_COPY);
}

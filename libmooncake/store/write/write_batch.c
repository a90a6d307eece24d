/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch write: put_batch, upsert_batch, batch_put_parts,
 * batch_upsert_parts, batch_put_from_multi, batch_upsert_from_multi (the
 * embedded backend's write_batch op, ../ops.h).
 *
 * One BATCH_*_START for every key, one transfer for every replica of every
 * key, then END and REVOKE pipelined on one connection (do_write_batch).
 * Keys whose transfer failed are tried once more, one by one, on a fresh
 * placement (batch_retry); a batch with DFS replicas is written key by key
 * (write_each), since each DFS record is written from the file side.
 *
 * May call: write.h (the single-key write and its checks),
 * ../store_internal.h, ../read/read.h (the location cache),
 * ../tiers/tiers.h (the sealed hook), the master pool, the engine.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/tiers/tiers.h"
#include "store/write/write.h"
#include "transfer/engine.h"

/* ---- batch writes ---------------------------------------------------------------------- */

/* The values of a batch: one part per key (values), or counts[i] parts per key (bufs). */
typedef mc_store_write_src_t write_src_t;

static const mc_iov_t *src_parts(const write_src_t *w, size_t i, size_t *n_p)
{
    if (w->values != NULL) {
        *n_p = 1;
        return &w->values[i];
    }
    *n_p = w->counts[i];
    return w->bufs[i];
}

typedef struct batch_put {
    size_t *sel;        /* call index of each key sent to the master */
    mc_str_t *keys;     /* nsel */
    uint64_t *lengths;  /* nsel */
    mc_str_t *gids;     /* nsel */
    int *state;         /* nsel: 0 skipped, 1 allocated, 2 transfer failed */
    mc_te_request_t *reqs;
    uint64_t *gens;     /* per request: its segment's generation */
    size_t *owner;      /* per request: index into sel */
    mc_status_t *tst;   /* per request status */
    size_t nsel, nreq;
    mc_store_commit_t *commit; /* a commit batch: its commit key is held */
} batch_put_t;

static void batch_put_free(batch_put_t *b)
{
    free(b->sel);
    free(b->keys);
    free(b->lengths);
    free(b->gids);
    free(b->state);
    free(b->reqs);
    free(b->gens);
    free(b->owner);
    free(b->tst);
}

/* BATCH_*_START; on MC_OK *results borrows from *conn_p. */
static mc_status_t write_batch_start(mc_store_h s, write_op_t op, mc_mconn_t **conn_p,
                                     const batch_put_t *b, const mc_wire_config_t *config,
                                     mc_wire_result_list_t *results)
{
    mc_status_t st;
#define WRITE_BATCH_START_(low)                                                  \
    do {                                                                         \
        mc_wire_##low##_req_t rq_;                                               \
        mc_wire_##low##_resp_t rs_;                                              \
        memset(&rq_, 0, sizeof(rq_));                                            \
        rq_.client_id = s->client_id;                                            \
        rq_.keys.n    = (uint32_t)b->nsel;                                       \
        rq_.keys.v    = b->keys;                                                 \
        rq_.lengths.n = (uint32_t)b->nsel;                                       \
        rq_.lengths.v = b->lengths;                                              \
        rq_.config    = *config;                                                 \
        st            = mc_master_pool_call_##low(&s->pool, conn_p, &rq_, &rs_); \
        if (st == MC_OK)                                                         \
            *results = rs_.results;                                              \
    } while (0)
    if (op == WRITE_UPSERT)
        WRITE_BATCH_START_(batch_upsert_start);
    else
        WRITE_BATCH_START_(batch_put_start);
#undef WRITE_BATCH_START_
    return st;
}

/* Queue BATCH_*_END (or _REVOKE) of @p keys on @p conn; returns its request id. */
static uint32_t write_batch_seal_encode(mc_store_h s, mc_mconn_t *conn, write_op_t op,
                                        int revoke, mc_str_t *keys, size_t n)
{
    uint32_t id = mc_mconn_take_id(conn);
#define WRITE_BATCH_SEAL_ENC_(low)                               \
    do {                                                         \
        mc_wire_##low##_req_t rq_;                               \
        memset(&rq_, 0, sizeof(rq_));                            \
        rq_.client_id = s->client_id;                            \
        rq_.keys.n    = (uint32_t)n;                             \
        rq_.keys.v    = keys;                                    \
        mc_wire_encode_##low##_req(&conn->wbuf, id, &rq_);       \
    } while (0)
    if (op == WRITE_UPSERT) {
        if (revoke)
            WRITE_BATCH_SEAL_ENC_(batch_upsert_revoke);
        else
            WRITE_BATCH_SEAL_ENC_(batch_upsert_end);
    } else {
        if (revoke)
            WRITE_BATCH_SEAL_ENC_(batch_put_revoke);
        else
            WRITE_BATCH_SEAL_ENC_(batch_put_end);
    }
#undef WRITE_BATCH_SEAL_ENC_
    return id;
}

/* The answer to write_batch_seal_encode(); *statuses borrows from @p conn. */
static mc_status_t write_batch_seal_recv(mc_mconn_t *conn, write_op_t op, int revoke,
                                         uint32_t id, mc_wire_i32_list_t *statuses)
{
    mc_status_t st;
#define WRITE_BATCH_SEAL_RECV_(low)                      \
    do {                                                 \
        mc_wire_##low##_resp_t rs_;                      \
        st = mc_master_recv_##low(conn, id, &rs_);       \
        if (st == MC_OK)                                 \
            *statuses = rs_.statuses;                    \
    } while (0)
    if (op == WRITE_UPSERT) {
        if (revoke)
            WRITE_BATCH_SEAL_RECV_(batch_upsert_revoke);
        else
            WRITE_BATCH_SEAL_RECV_(batch_upsert_end);
    } else {
        if (revoke)
            WRITE_BATCH_SEAL_RECV_(batch_put_revoke);
        else
            WRITE_BATCH_SEAL_RECV_(batch_put_end);
    }
#undef WRITE_BATCH_SEAL_RECV_
    return st;
}

/* Pipelined END (for state 1) and REVOKE (state 2) on one connection. */
static void write_batch_finish(mc_store_h s, write_op_t op, batch_put_t *b,
                               mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *end_keys = NULL, *rev_keys = NULL;
    size_t *end_idx = NULL;
    size_t nend = 0, nrev = 0;
    uint32_t end_id = 0, rev_id = 0;
    mc_wire_i32_list_t rs = {0, NULL};

    end_keys = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*end_keys));
    rev_keys = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*rev_keys));
    end_idx  = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*end_idx));
    if ((end_keys == NULL) || (rev_keys == NULL) || (end_idx == NULL)) {
        mc_set_error_detail("out of memory finishing a batch %s", mc_write_op_name(op));
        st = MC_INTERNAL_ERROR;
        goto fail_all;
    }
    for (size_t j = 0; j < b->nsel; j++) {
        if ((b->state[j] == 1) && (b->commit != NULL) && (b->sel[j] == b->commit->last)) {
            b->commit->held = 1; /* mc_store_commit_seal() ends or revokes it */
        } else if (b->state[j] == 1) {
            end_idx[nend]    = j;
            end_keys[nend++] = b->keys[j];
        } else if (b->state[j] == 2) {
            rev_keys[nrev++] = b->keys[j];
        }
    }
    if ((nend == 0) && (nrev == 0))
        goto out;

    st = mc_master_pool_get(&s->pool, &conn);
    if (st != MC_OK)
        goto fail_all;
    mc_mconn_begin(conn);
    if (nend > 0)
        end_id = write_batch_seal_encode(s, conn, op, 0, end_keys, nend);
    if (nrev > 0)
        rev_id = write_batch_seal_encode(s, conn, op, 1, rev_keys, nrev);
    st = mc_mconn_send(conn);
    if (st != MC_OK)
        goto fail_all;
    if (nend > 0) {
        st = write_batch_seal_recv(conn, op, 0, end_id, &rs);
        if ((st == MC_OK) && (rs.n != nend)) {
            mc_set_error_detail("batch %s end answered %u statuses for %zu keys",
                                mc_write_op_name(op), (unsigned)rs.n, nend);
            conn->broken = 1;
            st           = MC_RPC_FAIL;
        }
        for (size_t k = 0; k < nend; k++) {
            mc_status_t ks = (st == MC_OK) ? (mc_status_t)rs.v[k] : st;
            if (ks > 0)
                ks = MC_RPC_FAIL;
            statuses[b->sel[end_idx[k]]] = ks;
            if (ks == MC_OK)
                mc_store_tiers_sealed(s, end_keys[k]);
        }
        if (conn->broken)
            goto out;
    }
    if (nrev > 0) {
        st = write_batch_seal_recv(conn, op, 1, rev_id, &rs);
        if (st != MC_OK)
            mc_warn("batch %s revoke of %zu keys failed: %s", mc_write_op_name(op), nrev,
                    mc_status_name(st));
    }
    goto out;

fail_all:
    for (size_t j = 0; j < b->nsel; j++)
        if (b->state[j] == 1)
            statuses[b->sel[j]] = st;
out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    free(end_keys);
    free(rev_keys);
    free(end_idx);
}

/* Per-key validation: bad keys and bad sources fail alone, empty values store nothing. */
static void write_batch_select(mc_store_h s, const char *const *keys, const write_src_t *src,
                               size_t n, unsigned flags, batch_put_t *b, mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        size_t klen, np;
        uint64_t total = 0;
        const mc_iov_t *parts = src_parts(src, i, &np);

        statuses[i] = mc_store_check_key(keys[i], &klen);
        if (statuses[i] == MC_OK)
            statuses[i] = mc_write_check_parts(parts, np, &total);
        if (statuses[i] == MC_OK)
            statuses[i] = mc_write_check_sources(s, parts, np, flags);
        if ((statuses[i] != MC_OK) || (total == 0))
            continue; /* an empty value: MC_OK, nothing stored */
        b->sel[b->nsel]     = i;
        b->keys[b->nsel]    = (mc_str_t){keys[i], (uint32_t)klen};
        b->lengths[b->nsel] = total;
        b->nsel++;
    }
}

/* Transfer requests for every allocated replica of every key, upper bound. */
static mc_status_t write_batch_reserve(const write_src_t *src, const mc_wire_result_list_t *res,
                                       batch_put_t *b)
{
    size_t cap = 0;
    const size_t max = SIZE_MAX / sizeof(*b->reqs);

    for (size_t j = 0; j < b->nsel; j++) {
        size_t np;
        const mc_wire_result_t *r = &res->v[j];
        if (r->status != MC_OK)
            continue;
        (void)src_parts(src, b->sel[j], &np);
        if ((r->replicas.n > 0) && (np > (max - cap) / r->replicas.n)) {
            mc_set_error_detail("too many transfer requests for one batch");
            return MC_INVALID_PARAMS;
        }
        cap += (size_t)r->replicas.n * np;
    }
    cap      = MC_MAX(cap, (size_t)1);
    b->reqs  = malloc(cap * sizeof(*b->reqs));
    b->gens  = malloc(cap * sizeof(*b->gens));
    b->owner = malloc(cap * sizeof(*b->owner));
    b->tst   = malloc(cap * sizeof(*b->tst));
    if (!b->reqs || !b->gens || !b->owner || !b->tst) {
        mc_set_error_detail("out of memory for %zu transfer requests", cap);
        return MC_INTERNAL_ERROR;
    }
    return MC_OK;
}

/* The @p nsmall requests of at most MC_TE_RUN_MAX_ITEM_LEN bytes by
 * mc_te_write_direct_gen (or the engine, when it declines), the others by
 * the engine; 0 (nothing moved) when out of memory. */
static int write_batch_split(mc_store_h s, batch_put_t *b, size_t nsmall, mc_status_t *st_p)
{
    const size_t n = b->nreq;
    mc_te_request_t *reqs = malloc(n * sizeof(*reqs));
    uint64_t *gens        = malloc(n * sizeof(*gens));
    mc_status_t *tst      = malloc(n * sizeof(*tst));
    size_t *from          = malloc(n * sizeof(*from)); /* index in b->reqs */
    mc_status_t st, lst;
    size_t i = 0, j = nsmall;

    if (!reqs || !gens || !tst || !from) {
        free(reqs);
        free(gens);
        free(tst);
        free(from);
        return 0;
    }
    for (size_t q = 0; q < n; q++) {
        size_t k   = (b->reqs[q].length <= MC_TE_RUN_MAX_ITEM_LEN) ? i++ : j++;
        reqs[k]    = b->reqs[q];
        gens[k]    = b->gens[q];
        from[k]    = q;
    }
    lst = mc_te_transfer_gen(s->te, reqs + nsmall, gens + nsmall, n - nsmall, tst + nsmall);
    if (mc_te_write_direct_gen(s->te, reqs, gens, nsmall, &st)) {
        for (size_t k = 0; k < nsmall; k++)
            tst[k] = st;
    } else {
        st = mc_te_transfer_gen(s->te, reqs, gens, nsmall, tst);
    }
    for (size_t k = 0; k < n; k++)
        b->tst[from[k]] = tst[k];
    *st_p = (lst != MC_OK) ? lst : st;
    free(reqs);
    free(gens);
    free(tst);
    free(from);
    return 1;
}

/*
 * Move every request of a batch.  When they are all small (<= 64 KiB) and
 * go to one same-host holder whose region is mapped already, they are
 * copied on this thread under one lookup (mc_te_write_direct_gen): a
 * DataProto's ragged column is thousands of row-sized parts, and the
 * engine's per-request work (a lookup, a lock and a full fence each,
 * items handed to workers) then costs about as much CPU as the copies.
 * When a few large ones come with many small ones (a DataProto's string
 * payload beside its rows), the large go to the engine's workers and the
 * small are copied so (write_batch_split).  Anything else -- large
 * values, replicas on several segments, a region not mapped yet, another
 * host -- goes through mc_te_transfer_gen as before.  Fills b->tst; the
 * first failure.
 */
static mc_status_t write_batch_transfer(mc_store_h s, batch_put_t *b)
{
    mc_status_t st;
    size_t nsmall = 0;

    if (mc_te_write_direct_gen(s->te, b->reqs, b->gens, b->nreq, &st)) {
        for (size_t q = 0; q < b->nreq; q++)
            b->tst[q] = st;
        return st;
    }
    for (size_t q = 0; q < b->nreq; q++)
        nsmall += b->reqs[q].length <= MC_TE_RUN_MAX_ITEM_LEN;
    if ((nsmall >= 64) && (nsmall < b->nreq) && ((b->nreq - nsmall) * 8 <= nsmall) &&
        write_batch_split(s, b, nsmall, &st))
        return st;
    return mc_te_transfer_gen(s->te, b->reqs, b->gens, b->nreq, b->tst);
}

/* @p specs (optional, n entries, NULL-filled; puts only): where each value
 * stored went, for the location cache (mc_store_spec_build). */
static mc_status_t do_write_batch(mc_store_h s, write_op_t op, const char *const *keys,
                                  const write_src_t *src, size_t n,
                                  const mc_replicate_config_t *cfg, unsigned flags,
                                  mc_status_t *statuses, struct mc_store_query **specs,
                                  mc_store_commit_t *commit)
{
    mc_status_t st;
    batch_put_t b;
    mc_mconn_t *conn = NULL;
    mc_wire_config_t wcfg;
    mc_wire_result_list_t res;
    int revoke_all = 0;

    memset(&b, 0, sizeof(b));
    b.commit = commit;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail_all;
    }
    st = mc_store_config_check(cfg, n, flags);
    if (st != MC_OK)
        goto fail_all;

    b.sel     = malloc(n * sizeof(*b.sel));
    b.keys    = malloc(n * sizeof(*b.keys));
    b.lengths = malloc(n * sizeof(*b.lengths));
    b.gids    = malloc(n * sizeof(*b.gids));
    b.state   = calloc(n, sizeof(*b.state));
    if (!b.sel || !b.keys || !b.lengths || !b.gids || !b.state) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail_all;
    }
    write_batch_select(s, keys, src, n, flags, &b, statuses);
    if (b.nsel == 0)
        goto out;

    mc_store_config_to_wire(cfg, b.sel, b.nsel, b.gids, &wcfg);
    st = write_batch_start(s, op, &conn, &b, &wcfg, &res);
    if (st != MC_OK) {
        /* after a transport failure the master may hold allocations */
        revoke_all = (conn != NULL) && conn->broken;
        goto fail_sel;
    }
    if (res.n != b.nsel) {
        mc_set_error_detail("batch %s start answered %u results for %zu keys",
                            mc_write_op_name(op), (unsigned)res.n, b.nsel);
        conn->broken = 1;
        revoke_all   = 1;
        st           = MC_RPC_FAIL;
        goto fail_sel;
    }
    st = write_batch_reserve(src, &res, &b);
    if (st != MC_OK) {
        revoke_all = 1;
        goto fail_sel;
    }

    for (size_t j = 0; j < b.nsel; j++) {
        const mc_wire_result_t *r = &res.v[j];
        size_t i                  = b.sel[j];
        size_t first              = b.nreq;
        size_t np;
        const mc_iov_t *parts     = src_parts(src, i, &np);

        if ((op == WRITE_PUT) && (r->status == MC_OBJECT_ALREADY_EXISTS) && (commit == NULL)) {
            statuses[i] = MC_OK; /* first writer wins */
            continue;
        }
        if (r->status != MC_OK) {
            statuses[i] = (r->status < 0) ? (mc_status_t)r->status : MC_RPC_FAIL;
            continue;
        }
        b.state[j] = 1;
        if (r->replicas.n == 0) {
            mc_set_error_detail("master allocated no replica for %s", keys[i]);
            statuses[i] = MC_INVALID_REPLICA;
            b.state[j]  = 2;
            continue;
        }
        for (uint32_t k = 0; k < r->replicas.n; k++) {
            mc_status_t rs = mc_write_replica_reqs(s, &r->replicas.v[k], parts, np, b.lengths[j],
                                            b.reqs, b.gens, &b.nreq);
            if (rs != MC_OK) {
                statuses[i] = rs;
                b.state[j]  = 2;
                b.nreq      = first; /* drop this key's requests */
                break;
            }
        }
        for (size_t q = first; q < b.nreq; q++) {
            b.owner[q] = j;
            b.tst[q]   = MC_TRANSFER_FAIL; /* until the engine says otherwise */
        }
        if ((op == WRITE_PUT) && (specs != NULL) && (b.state[j] == 1))
            specs[i] = mc_store_spec_build(s, keys[i], b.lengths[j], &r->replicas);
    }

    /* one transfer for every replica of every key, no connection held */
    mc_master_pool_put(&s->pool, conn);
    conn = NULL;
    if (b.nreq > 0) {
        st = write_batch_transfer(s, &b);
        if (st != MC_OK) {
            mc_warn("batch %s: some of %zu transfers failed: %s (%s)", mc_write_op_name(op),
                    b.nreq, mc_status_name(st), mc_last_error_detail());
            for (size_t q = 0; q < b.nreq; q++) {
                size_t j = b.owner[q];
                if ((b.tst[q] != MC_OK) && (b.state[j] == 1)) {
                    b.state[j]         = 2;
                    statuses[b.sel[j]] = (b.tst[q] < 0) ? b.tst[q] : st;
                }
            }
        }
    }
    write_batch_finish(s, op, &b, statuses);
    for (size_t j = 0; (specs != NULL) && (j < b.nsel); j++) {
        size_t i = b.sel[j];
        if ((statuses[i] != MC_OK) || (b.state[j] != 1)) {
            mc_store_query_release(specs[i]);
            specs[i] = NULL;
        }
    }
    goto out;

fail_sel:
    for (size_t j = 0; j < b.nsel; j++) {
        statuses[b.sel[j]] = st;
        b.state[j]         = revoke_all ? 2 : 0;
    }
    if (conn != NULL) {
        mc_master_pool_put(&s->pool, conn);
        conn = NULL;
    }
    if (revoke_all) {
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        write_batch_finish(s, op, &b, statuses);
        mc_set_error_detail("%s", detail);
    }
    goto out;

fail_all:
    for (size_t i = 0; i < n; i++)
        statuses[i] = st;
out:
    batch_put_free(&b);
    return mc_store_first_error(statuses, n);
}

/* The config of key @p i of a batch of @p n: @p cfg with only that key's
 * group id, in @p kcfg when it has group ids. */
static const mc_replicate_config_t *key_config(const mc_replicate_config_t *cfg, size_t n,
                                               size_t i, mc_replicate_config_t *kcfg)
{
    if ((cfg != NULL) && (cfg->group_ids != NULL) && (cfg->group_ids_count == n)) {
        *kcfg                 = *cfg;
        kcfg->group_ids       = &cfg->group_ids[i];
        kcfg->group_ids_count = 1;
        return kcfg;
    }
    return cfg;
}

/* A batch write with DFS replicas, key by key: each record is written by
 * the single-key path (docs/tiers.md §6). */
static mc_status_t write_each(mc_store_h s, write_op_t op, const char *const *keys,
                              const write_src_t *src, size_t n,
                              const mc_replicate_config_t *cfg, unsigned flags,
                              mc_status_t *statuses)
{
    mc_status_t st = mc_store_config_check(cfg, n, flags);

    for (size_t i = 0; i < n; i++) {
        mc_replicate_config_t kcfg;
        size_t np;
        const mc_iov_t *parts = src_parts(src, i, &np);
        statuses[i] = (st != MC_OK) ? st
                                    : mc_write_do(s, op, keys[i], parts, np,
                                                  key_config(cfg, n, i, &kcfg), flags, NULL, 0);
    }
    return mc_store_first_error(statuses, n);
}

/*
 * The keys of a batch whose transfer failed get the single-key second
 * chance of write_one() (mc_write_retryable()), each with its own group id.
 * What the transport learnt about a holder before the batch began
 * (@p began_ns) does not fail a second try at once; what the batch's own
 * transfer learnt does, so a batch against a dead holder pays its
 * timeout once.  Returns the batch's status afresh when any was retried,
 * else @p st.
 */
static mc_status_t batch_retry(mc_store_h s, write_op_t op, const char *const *keys,
                               const write_src_t *src, size_t n,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses, mc_status_t st,
                               const mc_store_commit_t *commit, uint64_t began_ns)
{
    size_t retried = 0, recovered = 0;

    for (size_t i = 0; i < n; i++) {
        mc_replicate_config_t kcfg;
        const mc_iov_t *parts;
        size_t np;

        if (!mc_write_retryable(statuses[i], cfg) || ((commit != NULL) && (i == commit->last)))
            continue;
        parts       = src_parts(src, i, &np);
        statuses[i] = mc_write_do(s, op, keys[i], parts, np, key_config(cfg, n, i, &kcfg), flags,
                                  NULL, began_ns);
        retried++;
        recovered += statuses[i] == MC_OK;
    }
    if (retried == 0)
        return st;
    mc_info("batch %s: %zu keys whose transfer failed tried once more, %zu stored",
            mc_write_op_name(op), retried, recovered);
    return mc_store_first_error(statuses, n);
}

/* The embedded batch write, with a commit key held back (commit.c) or
 * none; @p statuses may be NULL. */
static mc_status_t write_batch_commit(mc_store_h s, write_op_t op, const char *const *keys,
                                      const write_src_t *src, size_t n,
                                      const mc_replicate_config_t *cfg, unsigned flags,
                                      mc_status_t *statuses, mc_store_commit_t *commit)
{
    mc_status_t st;
    mc_status_t *own = NULL;
    struct mc_store_query **specs = NULL;
    uint64_t t0      = mc_store_metrics_now_us();
    uint64_t began   = mc_now_ns();
    uint64_t bytes   = 0;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (n == 0)
        goto out;
    if ((keys == NULL) || ((src->values == NULL) && ((src->bufs == NULL) ||
                                                     (src->counts == NULL)))) {
        mc_set_error_detail("keys and values are required");
        st = MC_INVALID_PARAMS;
        mc_store_fill_statuses(statuses, n, st);
        goto out;
    }
    if ((st = mc_store_own_statuses(&statuses, n, &own)) != MC_OK)
        goto out;
    if ((cfg != NULL) && (cfg->dfs_replica_num > 0)) {
        st = write_each(s, op, keys, src, n, cfg, flags, statuses);
    } else {
        if (op == WRITE_PUT)
            specs = calloc(n, sizeof(*specs)); /* none when out of memory */
        st = do_write_batch(s, op, keys, src, n, cfg, flags, statuses, specs, commit);
        st = batch_retry(s, op, keys, src, n, cfg, flags, statuses, st, commit, began);
        if (commit != NULL) {
            mc_store_commit_seal(s, keys, statuses, specs, commit);
            st = mc_store_first_error(statuses, n);
        }
    }
    for (size_t i = 0; i < n; i++)
        mc_store_cache_drop(s, keys[i]);
    /* do_write_batch left an entry only for keys it stored */
    for (size_t i = 0; (specs != NULL) && (i < n); i++)
        mc_store_spec_note(s, specs[i]);
    free(specs);
    for (size_t i = 0; i < n; i++) {
        size_t np;
        const mc_iov_t *parts = src_parts(src, i, &np);
        if (statuses[i] == MC_OK)
            bytes += mc_write_iov_total(parts, np);
    }
out:
    if (n > 0)
        mc_store_metrics_record(&s->metrics, MC_MOP_BATCH_PUT, t0, n, st != MC_OK, bytes);
    free(own);
    mc_store_leave(s);
    return st;
}

/* The embedded backend's batch write; @p statuses may be NULL. */
mc_status_t mc_emb_write_batch(mc_store_h s, int upsert, const char *const *keys,
                               const mc_store_write_src_t *src, size_t n,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses)
{
    return write_batch_commit(s, upsert ? WRITE_UPSERT : WRITE_PUT, keys, src, n, cfg, flags,
                              statuses, NULL);
}

/* Public entry of every batch write. */
static mc_status_t write_many(mc_store_h s, write_op_t op, const char *const *keys,
                              const write_src_t *src, size_t n,
                              const mc_replicate_config_t *cfg, unsigned flags,
                              mc_status_t *statuses)
{
    return MC_STORE_DISPATCH(s, write_batch, op == WRITE_UPSERT, keys, src, n, cfg, flags,
                             statuses);
}

MC_API mc_status_t mc_store_put_batch(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *values, size_t n,
                                      const mc_replicate_config_t *cfg, mc_status_t *statuses)
{
    write_src_t src = {values, NULL, NULL, 1};
    return write_many(s, WRITE_PUT, keys, &src, n, cfg, 0, statuses);
}

MC_API mc_status_t mc_store_upsert_batch(mc_store_h s, const char *const *keys,
                                         const mc_iov_t *values, size_t n,
                                         const mc_replicate_config_t *cfg,
                                         mc_status_t *statuses)
{
    write_src_t src = {values, NULL, NULL, 1};
    return write_many(s, WRITE_UPSERT, keys, &src, n, cfg, 0, statuses);
}

MC_API mc_status_t mc_store_batch_put_from_multi(mc_store_h s, const char *const *keys,
                                                 const mc_iov_t *const *bufs,
                                                 const size_t *counts, size_t n,
                                                 const mc_replicate_config_t *cfg,
                                                 mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_PUT, keys, &src, n, cfg, MC_WF_ZERO_COPY | MC_WF_SAME_NODE,
                      statuses);
}

MC_API mc_status_t mc_store_batch_upsert_from_multi(mc_store_h s, const char *const *keys,
                                                    const mc_iov_t *const *bufs,
                                                    const size_t *counts, size_t n,
                                                    const mc_replicate_config_t *cfg,
                                                    mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_UPSERT, keys, &src, n, cfg, MC_WF_ZERO_COPY | MC_WF_SAME_NODE,
                      statuses);
}

MC_API mc_status_t mc_store_batch_put_parts(mc_store_h s, const char *const *keys,
                                            const mc_iov_t *const *bufs, const size_t *counts,
                                            size_t n, const mc_replicate_config_t *cfg,
                                            mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_PUT, keys, &src, n, cfg, MC_WF_SAME_NODE, statuses);
}

MC_API mc_status_t mc_store_batch_upsert_parts(mc_store_h s, const char *const *keys,
                                               const mc_iov_t *const *bufs,
                                               const size_t *counts, size_t n,
                                               const mc_replicate_config_t *cfg,
                                               mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_UPSERT, keys, &src, n, cfg, MC_WF_SAME_NODE, statuses);
}
mc_status_t mc_store_put_parts_commit(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *const *bufs, const size_t *counts,
                                      size_t n, const mc_replicate_config_t *cfg,
                                      mc_status_t *statuses, mc_store_commit_t *commit)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_batch_commit(s, WRITE_PUT, keys, &src, n, cfg, MC_WF_SAME_NODE, statuses,
                              commit);
}


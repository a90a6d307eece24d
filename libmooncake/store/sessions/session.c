/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ranged sessions, for layer-wise KV-cache loads and saves.
 *
 * A get session looks its keys up once (one BATCH_GET_REPLICA_LIST) and
 * caches each object's readable replicas, size and lease deadline in a
 * hash table keyed by the key string (the tenant is fixed per handle).
 * Ranged reads then cost no master round trip: they check ranges against
 * the cached size and the lease against the clock, and transfer.  An
 * expired lease fails that key with MC_LEASE_EXPIRED: the object may have
 * been evicted and its memory reused, so its caller must start again.
 * Entries are reference counted so that get_session_end() running
 * concurrently with a read never frees a query the read is using.
 *
 * A put session reserves objects with BATCH_PUT_START and caches their
 * replicas; ranged writes copy each range into every replica with no
 * master round trip.  end/revoke first seal an entry (later writes fail),
 * then wait on sess_cond until its in-flight writes have finished, and
 * only then send BATCH_PUT_END / BATCH_PUT_REVOKE: the master must never
 * publish, or hand out again, memory a write is still filling.  Writers
 * count themselves in under sess_lock after checking the seal, so an
 * entry is freed only when nobody can reach it.
 *
 * Close (mc_store_sessions_release) revokes every open put session and
 * drops the get sessions.
 *
 * May call: ../read/read.h (lookups, reads of many pieces), ../calls.c, the
 * master pool, the engine.  Called by: the public API, store.c (close
 * releases every session).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/sessions/sessions.h"
#include "store/store_internal.h"
#include "transfer/engine.h"

#define MC_SESS_STACK 64

/* ---- entries -------------------------------------------------------------------- */

typedef struct key_ref {
    const char *key;
    size_t len;
} key_ref_t;

typedef struct gsess {
    mc_hnode_t node;
    mc_store_query_h q;
    unsigned refs; /* the table's one + readers' (under sess_lock) */
    size_t klen;
    char key[];
} gsess_t;

typedef struct psess_replica {
    uint64_t addr;
    uint64_t gen; /* its segment's registration (mc_store_segment_gen): the
                   * holder refuses writes into memory registered again */
    char segment[MC_STORE_NAME_MAX];
} psess_replica_t;

typedef struct psess {
    mc_hnode_t node;
    uint64_t size;
    int sealed;        /* end/revoke started: no new writes */
    unsigned inflight; /* writes running now */
    uint32_t nrep;
    psess_replica_t *reps;
    size_t klen;
    char key[];
} psess_t;

static int gsess_eq(const mc_hnode_t *n, const void *key)
{
    const gsess_t *e    = mc_container_of(n, gsess_t, node);
    const key_ref_t *k  = key;
    return (e->klen == k->len) && (memcmp(e->key, k->key, k->len) == 0);
}

static int psess_eq(const mc_hnode_t *n, const void *key)
{
    const psess_t *e   = mc_container_of(n, psess_t, node);
    const key_ref_t *k = key;
    return (e->klen == k->len) && (memcmp(e->key, k->key, k->len) == 0);
}

static uint64_t key_hash(const key_ref_t *k)
{
    return mc_hash_bytes(k->key, k->len, 0);
}

/* Caller holds sess_lock. */
static gsess_t *gsess_find(struct mc_store_rd *rd, const key_ref_t *k)
{
    mc_hnode_t *n = mc_hmap_find(&rd->gsess, key_hash(k), k, gsess_eq);
    return (n != NULL) ? mc_container_of(n, gsess_t, node) : NULL;
}

static psess_t *psess_find(struct mc_store_rd *rd, const key_ref_t *k)
{
    mc_hnode_t *n = mc_hmap_find(&rd->psess, key_hash(k), k, psess_eq);
    return (n != NULL) ? mc_container_of(n, psess_t, node) : NULL;
}

/* Drop one reference; caller holds sess_lock. */
static void gsess_unref(gsess_t *e)
{
    if (--e->refs == 0) {
        mc_store_query_release(e->q);
        free(e);
    }
}

static void psess_free(psess_t *e)
{
    if (e != NULL) {
        free(e->reps);
        free(e);
    }
}

/* Validate every key; 0-length or NULL keys get MC_INVALID_PARAMS. */
static void keys_check(const char *const *keys, size_t n, key_ref_t *refs, mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        refs[i].key = keys[i];
        refs[i].len = 0;
        statuses[i] = mc_store_check_key(keys[i], &refs[i].len);
    }
}

/*
 * Check the @p count ranges (bufs[j] at object offset offs[j]) of @p key
 * against its @p size, and that every non-empty buffer is registered
 * memory.  MC_INVALID_PARAMS, with the detail set, for the first bad one.
 */
static mc_status_t ranges_check(mc_store_h s, const char *key, uint64_t size,
                                const mc_iov_t *bufs, const uint64_t *offs, size_t count)
{
    for (size_t j = 0; j < count; j++) {
        const mc_iov_t *b = &bufs[j];
        uint64_t off      = offs[j];
        if ((off > size) || (b->len > size - off)) {
            mc_set_error_detail("range [%llu, +%zu) of %s is outside its %llu bytes",
                                (unsigned long long)off, b->len, key,
                                (unsigned long long)size);
            return MC_INVALID_PARAMS;
        }
        if ((b->len > 0) && ((b->base == NULL) || !mc_store_mem_is_usable(s, b->base, b->len))) {
            mc_set_error_detail("range %zu of %s is not registered memory", j, key);
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

/* Bytes a successful ranged call moved for one key: the sum of its lengths. */
static int64_t ranges_total(const mc_iov_t *bufs, size_t count)
{
    int64_t total = 0;
    for (size_t j = 0; j < count; j++)
        total += (int64_t)bufs[j].len;
    return total;
}

/* ---- get sessions ---------------------------------------------------------------- */

mc_status_t mc_emb_get_session_start(mc_store_h s, const char *const *keys, size_t n,
                                     mc_status_t *statuses)
{
    mc_status_t st;
    mc_store_query_h q_stack[MC_SESS_STACK];
    mc_store_query_h *qs = q_stack;
    struct mc_store_rd *rd;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    if (n > MC_SESS_STACK) {
        qs = malloc(n * sizeof(*qs));
        if (qs == NULL) {
            mc_set_error_detail("out of memory for a batch of %zu keys", n);
            for (size_t i = 0; i < n; i++)
                statuses[i] = MC_INTERNAL_ERROR;
            goto out;
        }
    }
    mc_store_do_batch_query(s, keys, n, qs, statuses);
    for (size_t i = 0; i < n; i++) {
        key_ref_t k;
        gsess_t *e, *old;
        if (statuses[i] != MC_OK)
            continue;
        k.key = keys[i];
        k.len = strlen(keys[i]);
        e     = malloc(sizeof(*e) + k.len + 1);
        if (e == NULL) {
            mc_set_error_detail("out of memory for a get session");
            statuses[i] = MC_INTERNAL_ERROR;
            continue;
        }
        e->q    = qs[i];
        qs[i]   = NULL;
        e->refs = 1;
        e->klen = k.len;
        memcpy(e->key, k.key, k.len + 1);
        pthread_mutex_lock(&rd->sess_lock);
        /* a second start refreshes the lookup and the lease */
        old = gsess_find(rd, &k);
        if (old != NULL) {
            mc_hmap_remove(&rd->gsess, &old->node);
            gsess_unref(old);
        }
        mc_hmap_insert(&rd->gsess, &e->node, key_hash(&k));
        pthread_mutex_unlock(&rd->sess_lock);
    }
    for (size_t i = 0; i < n; i++)
        mc_store_query_release(qs[i]);
    if (qs != q_stack)
        free(qs);
out:
    mc_store_leave(s);
    return mc_store_first_error(statuses, n);
}

MC_API mc_status_t mc_store_get_session_start(mc_store_h s, const char *const *keys, size_t n,
                                              mc_status_t *statuses)
{
    if ((n > 0) && ((keys == NULL) || (statuses == NULL))) {
        mc_set_error_detail("keys and statuses are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, get_session_start, keys, n, statuses);
}

mc_status_t mc_emb_get_session_read(mc_store_h s, const char *const *keys,
                                    const mc_iov_t *const *bufs, const uint64_t *const *src_offsets,
                                    const size_t *counts, size_t n, int64_t *results)
{
    mc_status_t st;
    gsess_t *e_stack[MC_SESS_STACK];
    mc_store_query_h q_stack[MC_SESS_STACK];
    mc_status_t ks_stack[MC_SESS_STACK];
    mc_read_piece_t p_stack[MC_SESS_STACK];
    gsess_t **es         = e_stack;
    mc_store_query_h *qs = q_stack;
    mc_status_t *ks      = ks_stack;
    mc_read_piece_t *ps  = p_stack;
    size_t np = 0, maxp = 0;
    struct mc_store_rd *rd;

    st = mc_store_enter_results(s, results, n);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    if (n == 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] > SIZE_MAX / sizeof(*ps) - maxp) {
            mc_set_error_detail("too many ranges");
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        maxp += counts[i];
    }
    if (n > MC_SESS_STACK) {
        es = calloc(n, sizeof(*es));
        qs = calloc(n, sizeof(*qs));
        ks = malloc(n * sizeof(*ks));
    }
    if (maxp > MC_SESS_STACK)
        ps = malloc(maxp * sizeof(*ps));
    if ((es == NULL) || (qs == NULL) || (ks == NULL) || (ps == NULL)) {
        mc_set_error_detail("out of memory for %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }

    /* take a reference on every key's session: end() may run meanwhile */
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        key_ref_t k;
        es[i] = NULL;
        qs[i] = NULL;
        ks[i] = (keys[i] != NULL) ? MC_OK : MC_INVALID_PARAMS;
        if (ks[i] != MC_OK)
            continue;
        k.key = keys[i];
        k.len = strlen(keys[i]);
        es[i] = gsess_find(rd, &k);
        if (es[i] == NULL) {
            ks[i] = MC_INVALID_PARAMS;
            continue;
        }
        es[i]->refs++;
        qs[i] = es[i]->q;
    }
    pthread_mutex_unlock(&rd->sess_lock);

    for (size_t i = 0; i < n; i++) {
        uint64_t size;
        if (ks[i] != MC_OK) {
            mc_set_error_detail("key %zu has no open get session", i);
            continue;
        }
        size = qs[i]->size;
        if ((counts[i] > 0) && ((bufs[i] == NULL) || (src_offsets[i] == NULL))) {
            ks[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (mc_store_query_lease_check(qs[i]) != MC_OK) {
            ks[i] = MC_LEASE_EXPIRED;
            continue;
        }
        ks[i] = ranges_check(s, keys[i], size, bufs[i], src_offsets[i], counts[i]);
        if (ks[i] != MC_OK)
            continue;
        for (size_t j = 0; j < counts[i]; j++)
            if (bufs[i][j].len > 0)
                ps[np++] = (mc_read_piece_t){(void *)(uintptr_t)bufs[i][j].base,
                                             src_offsets[i][j], bufs[i][j].len, i};
    }
    mc_store_read_pieces(s, qs, ps, np, ks);

    st = MC_OK;
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        results[i] = (ks[i] == MC_OK) ? ranges_total(bufs[i], counts[i]) : ks[i];
        if ((st == MC_OK) && (ks[i] != MC_OK))
            st = ks[i];
        if (es[i] != NULL)
            gsess_unref(es[i]);
    }
    pthread_mutex_unlock(&rd->sess_lock);
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        results[i] = st;
out:
    if (es != e_stack)
        free(es);
    if (qs != q_stack)
        free(qs);
    if (ks != ks_stack)
        free(ks);
    if (ps != p_stack)
        free(ps);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_get_session_read(mc_store_h s, const char *const *keys,
                                             const mc_iov_t *const *bufs,
                                             const uint64_t *const *src_offsets,
                                             const size_t *counts, size_t n, int64_t *results)
{
    if ((n > 0) && ((keys == NULL) || (bufs == NULL) || (src_offsets == NULL) ||
                    (counts == NULL) || (results == NULL))) {
        mc_set_error_detail("keys, bufs, src_offsets, counts and results are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, get_session_read, keys, bufs, src_offsets, counts, n, results);
}

mc_status_t mc_emb_get_session_end(mc_store_h s, const char *const *keys, size_t n)
{
    mc_status_t st;
    struct mc_store_rd *rd;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        key_ref_t k;
        gsess_t *e;
        if (keys[i] == NULL)
            continue;
        k.key = keys[i];
        k.len = strlen(keys[i]);
        e     = gsess_find(rd, &k);
        if (e != NULL) { /* unknown keys are ignored */
            mc_hmap_remove(&rd->gsess, &e->node);
            gsess_unref(e);
        }
    }
    pthread_mutex_unlock(&rd->sess_lock);
    mc_store_leave(s);
    return MC_OK;
}

MC_API mc_status_t mc_store_get_session_end(mc_store_h s, const char *const *keys, size_t n)
{
    if ((n > 0) && (keys == NULL)) {
        mc_set_error_detail("keys is NULL");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, get_session_end, keys, n);
}

/* ---- put sessions ------------------------------------------------------------------ */

/* Client-side checks on the configuration of a put session. */
static mc_status_t psess_config_check(const mc_replicate_config_t *cfg, size_t n)
{
    if (cfg == NULL)
        return MC_OK;
    if (cfg->replica_num == 0) {
        mc_set_error_detail("put sessions need replica_num >= 1 (memory replicas)");
        return MC_INVALID_PARAMS;
    }
    /* memory replicas only; the flexible dual config keeps its memory half */
    if ((cfg->nof_replica_num > 0) && !((cfg->replica_num == 1) && (cfg->nof_replica_num == 1))) {
        mc_set_error_detail("put sessions write memory replicas only: NVMe-oF replicas are "
                            "accepted only as replica_num 1 + nof_replica_num 1");
        return MC_INVALID_PARAMS;
    }
    if (cfg->dfs_replica_num > 0) {
        mc_set_error_detail("put sessions write memory replicas only (dfs_replica_num 0)");
        return MC_INVALID_PARAMS;
    }
    /* the rules every write shares (same-node placement is not offered) */
    return mc_store_config_check(cfg, n, 0);
}

/* A session entry from BATCH_PUT_START's answer for one key. */
static mc_status_t psess_build(const key_ref_t *k, uint64_t size,
                               const mc_wire_replica_list_t *reps, psess_t **e_p)
{
    psess_t *e;

    if (reps->n == 0) {
        mc_set_error_detail("master reserved no replica for %s", k->key);
        return MC_INVALID_REPLICA;
    }
    for (uint32_t r = 0; r < reps->n; r++) {
        const mc_wire_replica_t *w = &reps->v[r];
        if ((w->type != 0) || (w->size < size) || (w->addr > UINT64_MAX - size) ||
            (w->segment.len == 0) || (w->segment.len >= MC_STORE_NAME_MAX) ||
            (memchr(w->segment.ptr, '\0', w->segment.len) != NULL)) {
            mc_set_error_detail("master returned an unusable replica for %s", k->key);
            return MC_INVALID_REPLICA;
        }
    }
    e = calloc(1, sizeof(*e) + k->len + 1);
    if (e != NULL)
        e->reps = calloc(reps->n, sizeof(*e->reps));
    if ((e == NULL) || (e->reps == NULL)) {
        free(e);
        mc_set_error_detail("out of memory for a put session");
        return MC_INTERNAL_ERROR;
    }
    e->size = size;
    e->nrep = reps->n;
    e->klen = k->len;
    memcpy(e->key, k->key, k->len + 1);
    for (uint32_t r = 0; r < reps->n; r++) {
        e->reps[r].addr = reps->v[r].addr;
        e->reps[r].gen  = mc_store_replica_gen(&reps->v[r]);
        memcpy(e->reps[r].segment, reps->v[r].segment.ptr, reps->v[r].segment.len);
        e->reps[r].segment[reps->v[r].segment.len] = '\0';
    }
    *e_p = e;
    return MC_OK;
}

/* BATCH_PUT_END (end != 0) or BATCH_PUT_REVOKE for wkeys[0..n). */
static mc_status_t put_finish_rpc(mc_store_h s, int end, mc_str_t *wkeys, size_t n,
                                  mc_status_t *out)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    const mc_wire_i32_list_t *sts;
    mc_wire_batch_put_end_req_t ereq;
    mc_wire_batch_put_end_resp_t eresp;
    mc_wire_batch_put_revoke_req_t rreq;
    mc_wire_batch_put_revoke_resp_t rresp;

    if (end) {
        memset(&ereq, 0, sizeof(ereq));
        ereq.client_id = s->client_id;
        ereq.keys.n    = (uint32_t)n;
        ereq.keys.v    = wkeys;
        st  = mc_master_pool_call_batch_put_end(&s->pool, &conn, &ereq, &eresp);
        sts = &eresp.statuses;
    } else {
        memset(&rreq, 0, sizeof(rreq));
        rreq.client_id = s->client_id;
        rreq.keys.n    = (uint32_t)n;
        rreq.keys.v    = wkeys;
        st  = mc_master_pool_call_batch_put_revoke(&s->pool, &conn, &rreq, &rresp);
        sts = &rresp.statuses;
    }
    if ((st == MC_OK) && (sts->n != n)) {
        mc_set_error_detail("master answered %u statuses for %zu keys", (unsigned)sts->n, n);
        conn->broken = 1;
        st           = MC_RPC_FAIL;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (st != MC_OK) ? st : (sts->v[i] <= 0) ? (mc_status_t)sts->v[i] : MC_RPC_FAIL;
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return st;
}

mc_status_t mc_emb_put_session_start(mc_store_h s, const char *const *keys, const uint64_t *sizes,
                                     size_t n, const mc_replicate_config_t *cfg,
                                     mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    key_ref_t *refs  = NULL;
    size_t *sel      = NULL;
    mc_str_t *wkeys  = NULL, *gids = NULL;
    uint64_t *lens   = NULL;
    size_t nsel      = 0, nbad = 0;
    struct mc_store_rd *rd;
    mc_wire_batch_put_start_req_t req;
    mc_wire_batch_put_start_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        goto fail_unlocked;
    rd = s->rd;
    if (n == 0)
        goto out;
    st = psess_config_check(cfg, n);
    if ((st == MC_OK) && (n > MC_WIRE_MAX_LIST)) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
    }
    if (st != MC_OK)
        goto fail;
    refs  = malloc(n * sizeof(*refs));
    sel   = malloc(n * sizeof(*sel));
    wkeys = malloc(n * sizeof(*wkeys));
    gids  = malloc(n * sizeof(*gids));
    lens  = malloc(n * sizeof(*lens));
    if ((refs == NULL) || (sel == NULL) || (wkeys == NULL) || (gids == NULL) || (lens == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    keys_check(keys, n, refs, statuses);
    /* keys that already have a put session are skipped (it stays open) */
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        if (statuses[i] != MC_OK)
            continue;
        if (sizes[i] == 0) {
            mc_set_error_detail("put session for %s needs a size > 0", keys[i]);
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (psess_find(rd, &refs[i]) != NULL)
            continue;
        wkeys[nsel] = (mc_str_t){keys[i], (uint32_t)refs[i].len};
        lens[nsel]  = sizes[i];
        sel[nsel++] = i;
    }
    pthread_mutex_unlock(&rd->sess_lock);
    if (nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.keys.n    = (uint32_t)nsel;
    req.keys.v    = wkeys;
    req.lengths.n = (uint32_t)nsel;
    req.lengths.v = lens;
    mc_store_config_to_wire(cfg, sel, nsel, gids, &req.config);
    /* memory replicas only: the flexible dual config keeps its memory half
     * (psess_config_check refuses dfs replicas and same-node placement) */
    req.config.nof_replica_num          = 0;
    req.config.preferred_nof_segments.n = 0; /* (nothing of NoF is reserved) */
    st = mc_master_pool_call_batch_put_start(&s->pool, &conn, &req, &resp);
    if ((st == MC_OK) && (resp.results.n != nsel)) {
        mc_set_error_detail("BATCH_PUT_START answered %u results for %zu keys",
                            (unsigned)resp.results.n, nsel);
        conn->broken = 1;
        st           = MC_RPC_FAIL;
    }
    if (st != MC_OK) {
        for (size_t j = 0; j < nsel; j++)
            statuses[sel[j]] = st;
        goto out;
    }
    for (size_t j = 0; j < nsel; j++) {
        const mc_wire_result_t *r = &resp.results.v[j];
        size_t i                  = sel[j];
        psess_t *e                = NULL;
        if (r->status != MC_OK) {
            statuses[i] = (r->status < 0) ? (mc_status_t)r->status : MC_RPC_FAIL;
            continue;
        }
        statuses[i] = psess_build(&refs[i], sizes[i], &r->replicas, &e);
        if (statuses[i] != MC_OK) {
            wkeys[nbad++] = wkeys[j]; /* reserved but unusable: revoked below */
            continue;
        }
        pthread_mutex_lock(&rd->sess_lock);
        mc_hmap_insert(&rd->psess, &e->node, key_hash(&refs[i]));
        pthread_mutex_unlock(&rd->sess_lock);
    }
    /* the response borrowed the connection's buffer until here */
    mc_master_pool_put(&s->pool, conn);
    conn = NULL;
    if (nbad > 0) {
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        mc_status_t *rst = malloc(nbad * sizeof(*rst));
        if (rst != NULL)
            put_finish_rpc(s, 0, wkeys, nbad, rst);
        free(rst);
        mc_set_error_detail("%s", detail);
    }
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        statuses[i] = st;
out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    free(refs);
    free(sel);
    free(wkeys);
    free(gids);
    free(lens);
    mc_store_leave(s);
    return mc_store_first_error(statuses, n);

fail_unlocked:
    for (size_t i = 0; i < n; i++)
        statuses[i] = st;
    return st;
}

MC_API mc_status_t mc_store_put_session_start(mc_store_h s, const char *const *keys,
                                              const uint64_t *sizes, size_t n,
                                              const mc_replicate_config_t *cfg,
                                              mc_status_t *statuses)
{
    if ((n > 0) && ((keys == NULL) || (sizes == NULL) || (statuses == NULL))) {
        mc_set_error_detail("keys, sizes and statuses are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, put_session_start, keys, sizes, n, cfg, statuses);
}

mc_status_t mc_emb_put_session_write(mc_store_h s, const char *const *keys,
                                     const mc_iov_t *const *bufs,
                                     const uint64_t *const *dst_offsets, const size_t *counts,
                                     size_t n, int64_t *results)
{
    mc_status_t st;
    psess_t **es       = NULL;
    mc_status_t *ks    = NULL;
    mc_te_request_t *reqs = NULL;
    mc_status_t *rst   = NULL;
    size_t *rowner     = NULL;
    uint64_t *rgen     = NULL;
    size_t nreq = 0, maxreq = 0;
    struct mc_store_rd *rd;

    st = mc_store_enter_results(s, results, n);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    if (n == 0)
        goto out;
    es = calloc(n, sizeof(*es));
    ks = malloc(n * sizeof(*ks));
    if ((es == NULL) || (ks == NULL)) {
        mc_set_error_detail("out of memory for %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }

    /* validate, then count ourselves in on every entry we will write */
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        key_ref_t k;
        psess_t *e;
        ks[i] = MC_OK;
        if (keys[i] == NULL) {
            ks[i] = MC_INVALID_PARAMS;
            continue;
        }
        k.key = keys[i];
        k.len = strlen(keys[i]);
        e     = psess_find(rd, &k);
        if ((e == NULL) || e->sealed) {
            mc_set_error_detail("%s has no open put session", keys[i]);
            ks[i] = MC_INVALID_PARAMS;
            continue;
        }
        if ((counts[i] > 0) && ((bufs[i] == NULL) || (dst_offsets[i] == NULL))) {
            ks[i] = MC_INVALID_PARAMS;
            continue;
        }
        ks[i] = ranges_check(s, keys[i], e->size, bufs[i], dst_offsets[i], counts[i]);
        if ((ks[i] == MC_OK) && (counts[i] > (SIZE_MAX / sizeof(*reqs) - maxreq) / e->nrep)) {
            ks[i] = MC_INVALID_PARAMS;
        }
        if (ks[i] != MC_OK)
            continue;
        maxreq += counts[i] * e->nrep;
        e->inflight++;
        es[i] = e;
    }
    pthread_mutex_unlock(&rd->sess_lock);

    if (maxreq > 0) {
        reqs   = malloc(maxreq * sizeof(*reqs));
        rst    = malloc(maxreq * sizeof(*rst));
        rowner = malloc(maxreq * sizeof(*rowner));
        rgen   = malloc(maxreq * sizeof(*rgen));
        if ((reqs == NULL) || (rst == NULL) || (rowner == NULL) || (rgen == NULL)) {
            mc_set_error_detail("out of memory for %zu writes", maxreq);
            for (size_t i = 0; i < n; i++)
                if (es[i] != NULL)
                    ks[i] = MC_INTERNAL_ERROR;
            maxreq = 0;
        }
    }
    /* every range into every replica, all in one transfer */
    for (size_t i = 0; (i < n) && (maxreq > 0); i++) {
        psess_t *e = es[i];
        if ((e == NULL) || (ks[i] != MC_OK))
            continue;
        for (uint32_t r = 0; (r < e->nrep) && (ks[i] == MC_OK); r++) {
            mc_te_segment_id_t seg;
            ks[i] = mc_te_segment_open(s->te, e->reps[r].segment, &seg);
            if (ks[i] != MC_OK)
                break;
            for (size_t j = 0; j < counts[i]; j++) {
                if (bufs[i][j].len == 0)
                    continue;
                reqs[nreq].op      = MC_TE_WRITE;
                reqs[nreq].local   = (void *)(uintptr_t)bufs[i][j].base;
                reqs[nreq].remote  = e->reps[r].addr + dst_offsets[i][j];
                reqs[nreq].length  = bufs[i][j].len;
                reqs[nreq].segment = seg;
                rst[nreq]          = MC_TRANSFER_FAIL;
                rgen[nreq]         = e->reps[r].gen;
                rowner[nreq++]     = i;
            }
        }
    }
    if (nreq > 0) {
        /* drop requests of keys whose later replica failed to open */
        size_t w = 0;
        for (size_t r = 0; r < nreq; r++) {
            if (ks[rowner[r]] != MC_OK)
                continue;
            reqs[w]   = reqs[r];
            rgen[w]   = rgen[r];
            rowner[w] = rowner[r];
            w++;
        }
        nreq = w;
    }
    if (nreq > 0) {
        for (size_t r = 0; r < nreq; r++)
            rst[r] = MC_TRANSFER_FAIL;
        st = mc_te_transfer_gen(s->te, reqs, rgen, nreq, rst);
        if (st != MC_OK)
            for (size_t r = 0; r < nreq; r++)
                if ((rst[r] != MC_OK) && (ks[rowner[r]] == MC_OK))
                    ks[rowner[r]] = (rst[r] < 0) ? rst[r] : MC_TRANSFER_FAIL;
    }

    st = MC_OK;
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        if (es[i] != NULL) {
            es[i]->inflight--;
            if (es[i]->sealed && (es[i]->inflight == 0))
                pthread_cond_broadcast(&rd->sess_cond);
        }
        results[i] = (ks[i] == MC_OK) ? ranges_total(bufs[i], counts[i]) : ks[i];
        if ((st == MC_OK) && (ks[i] != MC_OK))
            st = ks[i];
    }
    pthread_mutex_unlock(&rd->sess_lock);
    goto out;

fail:
    for (size_t i = 0; i < n; i++)
        results[i] = st;
out:
    free(es);
    free(ks);
    free(reqs);
    free(rst);
    free(rowner);
    free(rgen);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_put_session_write(mc_store_h s, const char *const *keys,
                                              const mc_iov_t *const *bufs,
                                              const uint64_t *const *dst_offsets,
                                              const size_t *counts, size_t n, int64_t *results)
{
    if ((n > 0) && ((keys == NULL) || (bufs == NULL) || (dst_offsets == NULL) ||
                    (counts == NULL) || (results == NULL))) {
        mc_set_error_detail("keys, bufs, dst_offsets, counts and results are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, put_session_write, keys, bufs, dst_offsets, counts, n, results);
}

/*
 * Seal the sessions of keys[0..n), wait for their writes, remove them and
 * tell the master (END or REVOKE).  Keys without an open session get
 * MC_INVALID_PARAMS.
 */
mc_status_t mc_emb_put_session_finish(mc_store_h s, int end, const char *const *keys, size_t n,
                                      mc_status_t *statuses)
{
    mc_status_t st;
    psess_t **es       = NULL;
    mc_str_t *wkeys    = NULL;
    mc_status_t *wst   = NULL;
    size_t *sel        = NULL;
    size_t nsel        = 0;
    struct mc_store_rd *rd;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    rd = s->rd;
    if (n == 0)
        goto out;
    es    = calloc(n, sizeof(*es));
    wkeys = malloc(n * sizeof(*wkeys));
    wst   = malloc(n * sizeof(*wst));
    sel   = malloc(n * sizeof(*sel));
    if ((es == NULL) || (wkeys == NULL) || (wst == NULL) || (sel == NULL)) {
        mc_set_error_detail("out of memory for %zu keys", n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        goto out;
    }
    pthread_mutex_lock(&rd->sess_lock);
    for (size_t i = 0; i < n; i++) {
        key_ref_t k;
        psess_t *e;
        statuses[i] = MC_OK;
        if (keys[i] == NULL) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        k.key = keys[i];
        k.len = strlen(keys[i]);
        e     = psess_find(rd, &k);
        if ((e == NULL) || e->sealed) { /* sealed: another end/revoke has it */
            mc_set_error_detail("%s has no open put session", keys[i]);
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        e->sealed = 1;
        es[i]     = e;
    }
    /* no write can start on a sealed entry: wait for the running ones */
    for (size_t i = 0; i < n; i++) {
        if (es[i] == NULL)
            continue;
        while (es[i]->inflight > 0)
            pthread_cond_wait(&rd->sess_cond, &rd->sess_lock);
        mc_hmap_remove(&rd->psess, &es[i]->node);
        wkeys[nsel] = (mc_str_t){es[i]->key, (uint32_t)es[i]->klen};
        sel[nsel++] = i;
    }
    pthread_mutex_unlock(&rd->sess_lock);

    if (nsel > 0) {
        put_finish_rpc(s, end, wkeys, nsel, wst);
        for (size_t j = 0; j < nsel; j++) {
            statuses[sel[j]] = wst[j];
            mc_store_cache_drop(s, keys[sel[j]]); /* a put session may upsert */
        }
    }
    for (size_t i = 0; i < n; i++)
        psess_free(es[i]);
out:
    free(es);
    free(wkeys);
    free(wst);
    free(sel);
    mc_store_leave(s);
    return mc_store_first_error(statuses, n);
}

static mc_status_t put_session_finish(mc_store_h s, int end, const char *const *keys, size_t n,
                                      mc_status_t *statuses)
{
    if ((n > 0) && ((keys == NULL) || (statuses == NULL))) {
        mc_set_error_detail("keys and statuses are required");
        return MC_INVALID_PARAMS;
    }
    return MC_STORE_DISPATCH(s, put_session_finish, end, keys, n, statuses);
}

MC_API mc_status_t mc_store_put_session_end(mc_store_h s, const char *const *keys, size_t n,
                                            mc_status_t *statuses)
{
    return put_session_finish(s, 1, keys, n, statuses);
}

MC_API mc_status_t mc_store_put_session_revoke(mc_store_h s, const char *const *keys, size_t n,
                                               mc_status_t *statuses)
{
    return put_session_finish(s, 0, keys, n, statuses);
}

/* Close: revoke the put sessions still open, drop the get sessions. */
void mc_store_sessions_release(mc_store_h s)
{
    struct mc_store_rd *rd = s->rd;
    mc_hmap_iter_t it;
    mc_str_t *wkeys = NULL;
    mc_status_t *wst = NULL;
    psess_t **es     = NULL;
    size_t np, k = 0;

    if (rd == NULL) /* setup failed before the read-side state was made */
        return;
    np = rd->psess.count;

    for (mc_hnode_t *n = mc_hmap_first(&rd->gsess, &it); n != NULL;
         n = mc_hmap_next(&rd->gsess, &it)) {
        mc_hmap_remove(&rd->gsess, n);
        gsess_unref(mc_container_of(n, gsess_t, node));
    }
    if (np == 0)
        return;
    wkeys = malloc(np * sizeof(*wkeys));
    wst   = malloc(np * sizeof(*wst));
    es    = malloc(np * sizeof(*es));
    for (mc_hnode_t *n = mc_hmap_first(&rd->psess, &it); n != NULL;
         n = mc_hmap_next(&rd->psess, &it)) {
        psess_t *e = mc_container_of(n, psess_t, node);
        mc_hmap_remove(&rd->psess, n);
        if ((wkeys != NULL) && (wst != NULL) && (es != NULL)) {
            wkeys[k] = (mc_str_t){e->key, (uint32_t)e->klen};
            es[k++]  = e;
        } else {
            psess_free(e); /* the master discards it after its put timeout */
        }
    }
    if ((k > 0) && s->pool_ready) {
        for (size_t off = 0; off < k; off += MC_WIRE_MAX_LIST) {
            size_t m = (k - off < MC_WIRE_MAX_LIST) ? k - off : MC_WIRE_MAX_LIST;
            if (put_finish_rpc(s, 0, &wkeys[off], m, wst) != MC_OK)
                mc_warn("could not revoke %zu open put session(s) at close: %s", m,
                        mc_last_error_detail());
        }
    }
    for (size_t i = 0; i < k; i++)
        psess_free(es[i]);
    free(wkeys);
    free(wst);
    free(es);
}

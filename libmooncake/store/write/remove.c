/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Removal: remove, batch_remove, remove_by_regex (POSIX extended, checked
 * here with regcomp before the master sees it), remove_all and
 * batch_replica_clear (the caller's own objects), all one round trip each
 * (the embedded backend's ops, ../ops.h).  Every removal forgets what the
 * location cache knew of the keys.
 *
 * May call: write.h, ../store_internal.h, ../read/read.h (the location
 * cache), the master pool.
 */
#include "config.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regex_limit.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/write/write.h"

/* ---- removal ------------------------------------------------------------------------- */

/*
 * The per-key answer of a batch call on the selected keys sel[0..nsel):
 * the master's statuses when the call succeeded with one per key, else the
 * call's status for every key (an answer of the wrong length breaks the
 * connection: it is out of step).  A positive status is not ours: RPC_FAIL.
 */
static void scatter_statuses(mc_mconn_t *conn, mc_status_t st, const char *op,
                             const mc_wire_i32_list_t *got, const size_t *sel, size_t nsel,
                             mc_status_t *statuses)
{
    if ((st == MC_OK) && (got->n != nsel)) {
        mc_set_error_detail("%s answered %u statuses for %zu keys", op, (unsigned)got->n,
                            nsel);
        conn->broken = 1;
        st           = MC_RPC_FAIL;
    }
    for (size_t j = 0; j < nsel; j++) {
        mc_status_t ks   = (st == MC_OK) ? (mc_status_t)got->v[j] : st;
        statuses[sel[j]] = (ks > 0) ? MC_RPC_FAIL : ks;
    }
}

mc_status_t mc_emb_remove(mc_store_h s, const char *key, int force)
{
    mc_status_t st;
    size_t klen;
    mc_mconn_t *conn;
    mc_wire_remove_req_t req;
    mc_wire_remove_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_check_key(key, &klen);
    if (st != MC_OK)
        goto out;
    memset(&req, 0, sizeof(req));
    req.key.ptr = key;
    req.key.len = (uint32_t)klen;
    req.force   = force ? 1 : 0;
    st          = mc_master_pool_call_remove(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_cache_drop(s, key);
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_remove(mc_store_h s, const char *key, int force)
{
    return MC_STORE_DISPATCH(s, remove, key, force);
}

/* One BATCH_REMOVE for the valid keys; invalid ones fail alone. */
mc_status_t mc_store_do_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                     mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *wkeys  = NULL;
    size_t *sel      = NULL;
    size_t nsel      = 0;
    mc_wire_batch_remove_req_t req;
    mc_wire_batch_remove_resp_t resp;

    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        mc_store_fill_statuses(statuses, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    wkeys = malloc(n * sizeof(*wkeys));
    sel   = malloc(n * sizeof(*sel));
    if ((wkeys == NULL) || (sel == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        mc_store_fill_statuses(statuses, n, MC_INTERNAL_ERROR);
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    nsel = mc_store_select_keys(keys, n, statuses, wkeys, sel);
    if (nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.keys.n = (uint32_t)nsel;
    req.keys.v = wkeys;
    req.force  = force ? 1 : 0;
    st         = mc_master_pool_call_batch_remove(&s->pool, &conn, &req, &resp);
    scatter_statuses(conn, st, "BATCH_REMOVE", &resp.statuses, sel, nsel, statuses);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
out:
    free(wkeys);
    free(sel);
    return mc_store_first_error(statuses, n);
}

mc_status_t mc_emb_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                mc_status_t *statuses)
{
    mc_status_t st;
    mc_status_t *own = NULL;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (n == 0)
        goto out;
    if (keys == NULL) {
        mc_set_error_detail("keys is NULL");
        st = MC_INVALID_PARAMS;
        mc_store_fill_statuses(statuses, n, st);
        goto out;
    }
    if ((st = mc_store_own_statuses(&statuses, n, &own)) != MC_OK)
        goto out;
    st = mc_store_do_batch_remove(s, keys, n, force, statuses);
    for (size_t i = 0; i < n; i++)
        mc_store_cache_drop(s, keys[i]);
out:
    free(own);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_batch_remove(mc_store_h s, const char *const *keys, size_t n,
                                         int force, mc_status_t *statuses)
{
    return MC_STORE_DISPATCH(s, batch_remove, keys, n, force, statuses);
}

/*
 * The master matches POSIX extended regular expressions (docs/protocol.md,
 * REMOVE_BY_REGEX) and answers MC_INVALID_PARAMS for one that does not
 * compile or passes the bounds of common/regex_limit.h; checking here
 * first gives the caller the reason instead of a bare code, saves the
 * round trip, and keeps regcomp() from unrolling a huge pattern here too.
 */
mc_status_t mc_store_regex_check(const char *regex)
{
    regex_t re;
    int rc;
    char why[256];

    if (regex == NULL) {
        mc_set_error_detail("regex is NULL");
        return MC_INVALID_PARAMS;
    }
    if (strnlen(regex, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR) {
        mc_set_error_detail("regex is longer than %u bytes", (unsigned)MC_WIRE_MAX_STR);
        return MC_INVALID_PARAMS;
    }
    if (mc_regex_check(regex, strlen(regex), why, sizeof(why)) != 0) {
        mc_set_error_detail("%s", why);
        return MC_INVALID_PARAMS;
    }
    rc = regcomp(&re, regex, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        regerror(rc, &re, why, sizeof(why));
        mc_set_error_detail("regex \"%.64s\" is not a POSIX extended regular expression: %s",
                            regex, why);
        return MC_INVALID_PARAMS;
    }
    regfree(&re);
    return MC_OK;
}

mc_status_t mc_emb_remove_by_regex(mc_store_h s, const char *regex, int force, int64_t *count_p)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_remove_by_regex_req_t req;
    mc_wire_remove_by_regex_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_regex_check(regex);
    if (st != MC_OK)
        goto out;
    memset(&req, 0, sizeof(req));
    req.regex = mc_str_from_cstr(regex);
    req.force = force ? 1 : 0;
    st        = mc_master_pool_call_remove_by_regex(&s->pool, &conn, &req, &resp);
    if ((st == MC_OK) && (count_p != NULL))
        *count_p = resp.count;
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_cache_clear(s);
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_remove_by_regex(mc_store_h s, const char *regex, int force,
                                            int64_t *count_p)
{
    return MC_STORE_DISPATCH(s, remove_by_regex, regex, force, count_p);
}

mc_status_t mc_emb_remove_all(mc_store_h s, int force, int64_t *count_p)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_remove_all_req_t req;
    mc_wire_remove_all_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    memset(&req, 0, sizeof(req));
    req.force = force ? 1 : 0;
    st        = mc_master_pool_call_remove_all(&s->pool, &conn, &req, &resp);
    if ((st == MC_OK) && (count_p != NULL))
        *count_p = resp.count;
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_cache_clear(s);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_remove_all(mc_store_h s, int force, int64_t *count_p)
{
    return MC_STORE_DISPATCH(s, remove_all, force, count_p);
}

/*
 * One BATCH_REPLICA_CLEAR for the valid keys (docs/protocol.md §5.14).
 * The caller's own client id goes with it: the master clears only objects
 * that id wrote.  Skipped keys are the normal outcome here, so the call
 * succeeds whenever the master answered.
 */
mc_status_t mc_emb_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                       const char *segment_name, mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_status_t *own = NULL;
    mc_str_t *wkeys  = NULL;
    size_t *sel      = NULL;
    size_t nsel;
    mc_wire_batch_replica_clear_req_t req;
    mc_wire_batch_replica_clear_resp_t resp;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (segment_name == NULL)
        segment_name = "";
    if ((n > 0) && (keys == NULL)) {
        mc_set_error_detail("keys is NULL");
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    if (strnlen(segment_name, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR) {
        mc_set_error_detail("segment_name is longer than %u bytes", (unsigned)MC_WIRE_MAX_STR);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    if (n == 0)
        goto out;
    if ((st = mc_store_own_statuses(&statuses, n, &own)) != MC_OK)
        goto out;
    wkeys = malloc(n * sizeof(*wkeys));
    sel   = malloc(n * sizeof(*sel));
    if ((wkeys == NULL) || (sel == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    nsel = mc_store_select_keys(keys, n, statuses, wkeys, sel);
    if (nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.client_id    = s->client_id;
    req.keys.n       = (uint32_t)nsel;
    req.keys.v       = wkeys;
    req.segment_name = mc_str_from_cstr(segment_name);
    st = mc_master_pool_call_batch_replica_clear(&s->pool, &conn, &req, &resp);
    scatter_statuses(conn, st, "BATCH_REPLICA_CLEAR", &resp.statuses, sel, nsel, statuses);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    goto out;
fail:
    mc_store_fill_statuses(statuses, n, st);
out:
    free(own);
    free(wkeys);
    free(sel);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                                const char *segment_name, mc_status_t *statuses)
{
    return MC_STORE_DISPATCH(s, batch_replica_clear, keys, n, segment_name, statuses);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batch puts with a commit key (mc_store_batch_put_parts_commit).
 *
 * A structured object is many payload keys and one manifest that names
 * them; the manifest is the commit point, so it must become visible only
 * after every payload has.  Written as a batch put followed by a put of
 * the manifest that takes four master round trips.  Here the manifest is
 * started, allocated and written with the payloads (one BATCH_PUT_START,
 * one transfer), the payloads are ended (BATCH_PUT_END), and only then
 * is the manifest ended -- or revoked when a payload failed: three.
 *
 * The batch itself is write_batch.c's write_batch_commit with an
 * mc_store_commit_t: it holds the commit key back (allocated, written,
 * neither ended nor revoked) and refuses keys that exist already, so that
 * every key the call reports stored is its own and may be removed again.  This file
 * does the rest once the payloads' statuses are final:
 *
 *   every payload MC_OK and the commit key held  -> PUT_END it;
 *   a payload failed and the commit key held     -> PUT_REVOKE it;
 *   the commit key not published, for any reason -> BATCH_REMOVE (force)
 *                                                   of the payloads stored.
 *
 * What may come between the payloads' END and the commit key's END: a
 * forced remove or eviction of a payload (the commit goes on; the object
 * is then incomplete exactly as if the remove came after the commit, and
 * a reader of the missing payload gets OBJECT_NOT_FOUND, never other
 * bytes), a forced remove of the commit key itself or a master restart
 * (its END fails: not published, the payloads are removed where the
 * master still has them).  The commit key is never published with a
 * payload that failed.
 *
 * A dummy client has no commit batch: its backend refuses the call
 * (../dummy/dummy_ops.c) after the argument checks every backend shares.
 *
 * May call: write.h (the batch put with a commit key of write_batch.c,
 * the seal of write.c, the batch remove of remove.c), ../calls.c.  Called
 * by: the public API, write_batch.c (mc_store_commit_seal).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/write/write.h"

void (*mc_store_commit_test_hook)(mc_store_h s, const char *commit_key);

/* The first payload status that is not MC_OK, else MC_OK. */
static mc_status_t payloads_status(const mc_status_t *statuses, size_t last, size_t *bad_p)
{
    for (size_t i = 0; i < last; i++) {
        if (statuses[i] != MC_OK) {
            *bad_p = i;
            return statuses[i];
        }
    }
    return MC_OK;
}

/* The commit key is not published: force-remove the payloads that were
 * (a key reported MC_OK stored nothing only when its value was empty, and
 * then its remove reports OBJECT_NOT_FOUND, which is fine). */
static void remove_payloads(mc_store_h s, const char *const *keys, size_t last,
                            const mc_status_t *statuses, struct mc_store_query **specs)
{
    const char **stored = malloc(MC_MAX(last, (size_t)1) * sizeof(*stored));
    mc_status_t *rst    = malloc(MC_MAX(last, (size_t)1) * sizeof(*rst));
    size_t m            = 0;

    for (size_t i = 0; i < last; i++) {
        if ((specs != NULL) && (specs[i] != NULL)) {
            mc_store_query_release(specs[i]); /* nothing to cache for it */
            specs[i] = NULL;
        }
        if ((statuses[i] == MC_OK) && (stored != NULL))
            stored[m++] = keys[i];
    }
    if ((stored == NULL) || (rst == NULL)) {
        mc_warn("commit of %s failed and its %zu payloads stay stored: out of memory",
                keys[last], last);
    } else if (m > 0) {
        (void)mc_store_do_batch_remove(s, stored, m, 1, rst);
        for (size_t k = 0; k < m; k++)
            if ((rst[k] != MC_OK) && (rst[k] != MC_OBJECT_NOT_FOUND))
                mc_warn("commit of %s failed and its payload %s could not be removed: %s",
                        keys[last], stored[k], mc_status_name(rst[k]));
    }
    free(stored);
    free(rst);
}

void mc_store_commit_seal(mc_store_h s, const char *const *keys, mc_status_t *statuses,
                          struct mc_store_query **specs, mc_store_commit_t *commit)
{
    const size_t last = commit->last;
    size_t bad        = 0;
    mc_status_t pst   = payloads_status(statuses, last, &bad);
    mc_str_t key      = {keys[last], (uint32_t)strlen(keys[last])};
    char detail[512];

    if (commit->held && (pst == MC_OK)) {
        if (mc_store_commit_test_hook != NULL)
            mc_store_commit_test_hook(s, keys[last]);
        statuses[last] = mc_store_put_seal(s, 0, key);
        if (statuses[last] != MC_OK)
            mc_warn("commit of %s: its END failed: %s (%s)", keys[last],
                    mc_status_name(statuses[last]), mc_last_error_detail());
    } else if (commit->held) {
        snprintf(detail, sizeof(detail), "not committed: payload %s failed: %s", keys[bad],
                 mc_status_name(pst));
        if (mc_store_put_seal(s, 1, key) != MC_OK)
            mc_warn("commit of %s: its revoke failed: %s", keys[last], mc_last_error_detail());
        statuses[last] = pst;
        mc_set_error_detail("%s", detail);
    }
    if (statuses[last] == MC_OK)
        return;
    snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
    if ((specs != NULL) && (specs[last] != NULL)) {
        mc_store_query_release(specs[last]);
        specs[last] = NULL;
    }
    remove_payloads(s, keys, last, statuses, specs);
    mc_set_error_detail("%s", detail);
}

/* What the batch cannot take before anything is written. */
/* What every backend checks first (a dummy then refuses the call:
 * ../dummy/dummy_ops.c). */
static mc_status_t commit_args_check(const char *const *keys, const mc_iov_t *const *bufs,
                                     const size_t *counts, size_t n)
{
    if ((n == 0) || (keys == NULL) || (bufs == NULL) || (counts == NULL)) {
        mc_set_error_detail("a commit batch needs at least its commit key, with keys, "
                            "buffers and counts");
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* The embedded client's checks. */
static mc_status_t commit_check(const char *const *keys, const mc_iov_t *const *bufs,
                                const size_t *counts, size_t n, const mc_replicate_config_t *cfg)
{
    size_t klen;
    uint64_t total = 0;

    if ((cfg != NULL) && (cfg->dfs_replica_num > 0)) {
        mc_set_error_detail("a commit batch writes no DFS replicas: put the payloads, then "
                            "the commit key");
        return MC_NOT_SUPPORTED;
    }
    if (mc_store_check_key(keys[n - 1], &klen) != MC_OK)
        return MC_INVALID_PARAMS;
    for (size_t p = 0; (bufs[n - 1] != NULL) && (p < counts[n - 1]); p++)
        total += bufs[n - 1][p].len;
    if (total == 0) {
        mc_set_error_detail("the commit key %s has an empty value", keys[n - 1]);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* The embedded backend's batch put with a commit key (../ops.h). */
mc_status_t mc_emb_batch_put_parts_commit(mc_store_h s, const char *const *keys,
                                          const mc_iov_t *const *bufs, const size_t *counts,
                                          size_t n, const mc_replicate_config_t *cfg,
                                          mc_status_t *statuses)
{
    mc_store_commit_t commit = {.last = n - 1, .held = 0};
    mc_status_t st           = commit_check(keys, bufs, counts, n, cfg);

    if (st != MC_OK) {
        mc_store_fill_statuses(statuses, n, st);
        return st;
    }
    return mc_store_put_parts_commit(s, keys, bufs, counts, n, cfg, statuses, &commit);
}

MC_API mc_status_t mc_store_batch_put_parts_commit(mc_store_h s, const char *const *keys,
                                                   const mc_iov_t *const *bufs,
                                                   const size_t *counts, size_t n,
                                                   const mc_replicate_config_t *cfg,
                                                   mc_status_t *statuses)
{
    mc_status_t st = commit_args_check(keys, bufs, counts, n);

    if (st != MC_OK) {
        mc_store_fill_statuses(statuses, n, st);
        return st;
    }
    return MC_STORE_DISPATCH(s, batch_put_parts_commit, keys, bufs, counts, n, cfg, statuses);
}

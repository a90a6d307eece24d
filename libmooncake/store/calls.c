/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every store call shares, and nothing else: entering the handle
 * (`life` and `ready`, store_internal.h), the checks of keys and of a
 * replication config that upstream makes on the client before any RPC,
 * the wire form of a config, the generation a replica's read or write
 * names, and whether a transfer goes through the staging buffer over rdma.
 *
 * May call: nothing of the store (a leaf), so every folder may call it
 * without joining a ring of mutual calls; the transfer engine (whether
 * memory is registered, whether a peer is on this host).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gen.h"
#include "common/log.h"
#include "store/store_internal.h"
#include "transfer/engine.h"

MC_API void mc_replicate_config_init(mc_replicate_config_t *cfg)
{
    if (cfg == NULL)
        return;
    /* only the fields of the first release: a caller built against that
     * header has no room for the later ones (they come with a mask bit) */
    memset(cfg, 0, offsetof(mc_replicate_config_t, preferred_nof_segments));
    cfg->replica_num     = 1;
    cfg->soft_pin_action = MC_SOFT_PIN_PRESERVE;
}

/* ---- shared helpers --------------------------------------------------------- */

mc_status_t mc_store_enter(mc_store_h s)
{
    if (s == NULL) {
        mc_set_error_detail("store handle is NULL");
        return MC_INVALID_PARAMS;
    }
    pthread_rwlock_rdlock(&s->life);
    if (!s->ready && (s->ops->unsupported != NULL)) { /* a call its backend has not */
        pthread_rwlock_unlock(&s->life);
        mc_set_error_detail("%s", s->ops->unsupported);
        return MC_NOT_SUPPORTED;
    }
    if (!s->ready) {
        pthread_rwlock_unlock(&s->life);
        mc_set_error_detail("store is not set up (call setup first, or it was closed)");
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    return MC_OK;
}

void mc_store_leave(mc_store_h s)
{
    pthread_rwlock_unlock(&s->life);
}

void mc_store_fill_statuses(mc_status_t *statuses, size_t n, mc_status_t st)
{
    if (statuses != NULL)
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
}

mc_status_t mc_store_enter_statuses(mc_store_h s, mc_status_t *statuses, size_t n)
{
    mc_status_t st = mc_store_enter(s);
    if (st != MC_OK)
        mc_store_fill_statuses(statuses, n, st);
    return st;
}

mc_status_t mc_store_own_statuses(mc_status_t **statuses, size_t n, mc_status_t **own)
{
    *own = NULL;
    if (*statuses != NULL)
        return MC_OK;
    *own = malloc(n * sizeof(**own));
    if (*own == NULL) {
        mc_set_error_detail("out of memory for %zu statuses", n);
        return MC_INTERNAL_ERROR;
    }
    *statuses = *own;
    return MC_OK;
}

mc_status_t mc_store_first_error(const mc_status_t *statuses, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (statuses[i] != MC_OK)
            return statuses[i];
    return MC_OK;
}

mc_status_t mc_store_enter_results(mc_store_h s, int64_t *results, size_t n)
{
    mc_status_t st = mc_store_enter(s);
    if ((st != MC_OK) && (results != NULL))
        for (size_t i = 0; i < n; i++)
            results[i] = st;
    return st;
}

mc_status_t mc_store_check_key(const char *key, size_t *len_p)
{
    size_t len;
    if (key == NULL) {
        mc_set_error_detail("key is NULL");
        return MC_INVALID_PARAMS;
    }
    len = strnlen(key, MC_WIRE_MAX_KEY + 1);
    if ((len == 0) || (len > MC_WIRE_MAX_KEY)) {
        mc_set_error_detail("key must be 1 to %u bytes", (unsigned)MC_WIRE_MAX_KEY);
        return MC_INVALID_PARAMS;
    }
    if (len_p != NULL)
        *len_p = len;
    return MC_OK;
}

size_t mc_store_select_keys(const char *const *keys, size_t n, mc_status_t *statuses,
                            mc_str_t *wkeys, size_t *sel)
{
    size_t nsel = 0;
    for (size_t i = 0; i < n; i++) {
        size_t klen;
        statuses[i] = mc_store_check_key(keys[i], &klen);
        if (statuses[i] != MC_OK)
            continue;
        wkeys[nsel] = (mc_str_t){keys[i], (uint32_t)klen};
        sel[nsel++] = i;
    }
    return nsel;
}

/* ---- replication config --------------------------------------------------------- */

/*
 * What upstream checks on the client before any RPC.  @p nkeys is the
 * number of keys written by the call (group_ids needs one per key).
 * prefer_alloc_in_same_node is refused by put, put_from and batch_put_from
 * upstream but documented for the multi-buffer writes, which are the only
 * calls that pass MC_WF_SAME_NODE; it always needs replica_num == 1.
 */
mc_status_t mc_store_config_check(const mc_replicate_config_t *cfg, size_t nkeys,
                                  unsigned flags)
{
    if (cfg == NULL)
        return MC_OK;
    if ((uint64_t)cfg->replica_num + cfg->nof_replica_num + cfg->dfs_replica_num == 0) {
        mc_set_error_detail("replica_num must be at least 1");
        return MC_INVALID_PARAMS;
    }
    if (cfg->dfs_replica_num > 1) {
        mc_set_error_detail("dfs_replica_num must be 0 or 1");
        return MC_INVALID_PARAMS;
    }
    if ((cfg->soft_pin_action != MC_SOFT_PIN_PRESERVE) &&
        (cfg->soft_pin_action != MC_SOFT_PIN_ENABLE) &&
        (cfg->soft_pin_action != MC_SOFT_PIN_DISABLE)) {
        mc_set_error_detail("soft_pin_action %d is not PRESERVE, ENABLE or DISABLE",
                            (int)cfg->soft_pin_action);
        return MC_INVALID_PARAMS;
    }
    if ((cfg->field_mask & MC_RC_FIELD_SOFT_PIN_TTL) &&
        (cfg->soft_pin_action != MC_SOFT_PIN_ENABLE)) {
        mc_set_error_detail("soft_pin_ttl_ms needs soft_pin_action ENABLE");
        return MC_INVALID_PARAMS;
    }
    if (cfg->prefer_alloc_in_same_node) {
        if (!(flags & MC_WF_SAME_NODE)) {
            mc_set_error_detail("prefer_alloc_in_same_node is only supported by the "
                                "multi-buffer writes (batch_put_from_multi_buffers)");
            return MC_INVALID_PARAMS;
        }
        if (cfg->replica_num != 1 || cfg->nof_replica_num != 0 || cfg->dfs_replica_num != 0) {
            mc_set_error_detail("prefer_alloc_in_same_node needs replica_num 1 "
                                "(and no disk replicas)");
            return MC_INVALID_PARAMS;
        }
    }
    if ((cfg->preferred_segment != NULL) &&
        (strnlen(cfg->preferred_segment, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR)) {
        mc_set_error_detail("preferred_segment is too long");
        return MC_INVALID_PARAMS;
    }
    if (cfg->field_mask & MC_RC_FIELD_PREFERRED_NOF) {
        if (cfg->preferred_nof_segments_count > MC_WIRE_MAX_PREF_NOF) {
            mc_set_error_detail("preferred_nof_segments has %zu entries (at most %u)",
                                cfg->preferred_nof_segments_count, MC_WIRE_MAX_PREF_NOF);
            return MC_INVALID_PARAMS;
        }
        if ((cfg->preferred_nof_segments_count > 0) && (cfg->nof_replica_num == 0)) {
            mc_set_error_detail("preferred_nof_segments needs nof_replica_num > 0");
            return MC_INVALID_PARAMS;
        }
        for (size_t i = 0; i < cfg->preferred_nof_segments_count; i++) {
            if ((cfg->preferred_nof_segments == NULL) ||
                (cfg->preferred_nof_segments[i] == NULL) ||
                (strnlen(cfg->preferred_nof_segments[i], MC_WIRE_MAX_KEY + 1) >
                 MC_WIRE_MAX_KEY)) {
                mc_set_error_detail("preferred_nof_segments[%zu] is NULL or too long", i);
                return MC_INVALID_PARAMS;
            }
        }
    }
    if (cfg->field_mask & MC_RC_FIELD_GROUP_IDS) {
        if (cfg->group_ids_count != nkeys) {
            mc_set_error_detail("group_ids has %zu entries for %zu key(s)",
                                cfg->group_ids_count, nkeys);
            return MC_INVALID_PARAMS;
        }
        if ((nkeys > 0) && (cfg->group_ids == NULL)) {
            mc_set_error_detail("group_ids is NULL");
            return MC_INVALID_PARAMS;
        }
        for (size_t i = 0; i < nkeys; i++) {
            if ((cfg->group_ids[i] == NULL) ||
                (strnlen(cfg->group_ids[i], MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR)) {
                mc_set_error_detail("group_ids[%zu] is NULL or too long", i);
                return MC_INVALID_PARAMS;
            }
        }
    }
    return MC_OK;
}

/*
 * Wire form of @p cfg for the keys sel[0..nsel) of the call (sel NULL: the
 * identity).  @p gids holds nsel strings.
 */
void mc_store_config_to_wire(const mc_replicate_config_t *cfg, const size_t *sel, size_t nsel,
                             mc_str_t *gids, mc_wire_config_t *w)
{
    mc_replicate_config_t def;

    if (cfg == NULL) {
        mc_replicate_config_init(&def);
        cfg = &def;
    }
    memset(w, 0, sizeof(*w));
    w->replica_num               = cfg->replica_num;
    w->nof_replica_num           = cfg->nof_replica_num;
    w->dfs_replica_num           = cfg->dfs_replica_num;
    w->soft_pin_action           = (uint8_t)cfg->soft_pin_action;
    w->has_soft_pin_ttl          = (cfg->field_mask & MC_RC_FIELD_SOFT_PIN_TTL) ? 1 : 0;
    w->soft_pin_ttl_ms           = w->has_soft_pin_ttl ? cfg->soft_pin_ttl_ms : 0;
    w->with_hard_pin             = cfg->with_hard_pin ? 1 : 0;
    w->preferred_segment         = mc_str_from_cstr(cfg->preferred_segment);
    w->prefer_alloc_in_same_node = cfg->prefer_alloc_in_same_node ? 1 : 0;
    if (cfg->field_mask & MC_RC_FIELD_PREFERRED_NOF) {
        size_t n = MC_MIN(cfg->preferred_nof_segments_count, (size_t)MC_WIRE_MAX_PREF_NOF);
        for (size_t i = 0; i < n; i++)
            w->pref_nof_buf[i] = mc_str_from_cstr(cfg->preferred_nof_segments[i]);
        w->preferred_nof_segments.n = (uint32_t)n;
        w->preferred_nof_segments.v = w->pref_nof_buf;
    }
    if (cfg->field_mask & MC_RC_FIELD_GROUP_IDS) {
        w->has_group_ids = 1;
        for (size_t i = 0; i < nsel; i++)
            gids[i] = mc_str_from_cstr(cfg->group_ids[sel ? sel[i] : i]);
        w->group_ids.n = (uint32_t)nsel;
        w->group_ids.v = gids;
    }
}

/* ---- replicas ----------------------------------------------------------------------- */

uint64_t mc_store_segment_gen(mc_uuid_t id)
{
    /* a nil id (no master hands one out: mount refuses it) names no
     * generation, so such a replica is read without the check */
    return mc_gen_of_segment(id.hi, id.lo);
}

uint64_t mc_store_replica_gen(const mc_wire_replica_t *r)
{
    if ((r->gen != 0) && (mc_gen_base(r->gen) == mc_store_segment_gen(r->segment_id)))
        return r->gen;
    return mc_store_segment_gen(r->segment_id);
}

int mc_store_rdma_stage_wanted(mc_store_h s, const void *base, size_t len,
                               mc_te_segment_id_t seg)
{
    return (strcmp(s->protocol, "rdma") == 0) && (s->lbuf_size != 0) && (len > 0) &&
           (len <= s->lbuf_size) && !mc_te_mem_is_registered(s->te, base, len) &&
           !mc_te_segment_same_host(s->te, seg);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DFS replicas in the master (dfs.h, docs/tiers.md §6): the tier's
 * layout, placement of records in the shard files, and their wire form.
 * The object index (index/) decides when a DFS replica is made and
 * when it goes; this file keeps the space and the counters.
 *
 * Owns: the DFS tier in the master: the layout, placement of records in
 *   the shard files, their wire form.
 * May call: tiers/ (dfs_alloc), ../master.h, libmooncake's common/.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "dfs.h"
#include "master.h"

int32_t mc_master_dfs_init(mc_master_t *m)
{
    mc_master_dfs_t *d;

    m->dfs = NULL;
    if (m->cfg->root_fs_dir[0] == '\0')
        return MC_OK;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return MC_INTERNAL_ERROR;
    if (mc_dfs_layout_init(&d->layout, m->cfg->root_fs_dir, "--root_fs_dir") != MC_OK) {
        mc_error("%s", mc_last_error_detail());
        free(d);
        return MC_INVALID_PARAMS;
    }
    if (mc_dfs_alloc_init(&d->alloc, d->layout.shard_count, d->layout.shard_capacity,
                          d->layout.alignment) != 0) {
        free(d);
        return MC_INTERNAL_ERROR;
    }
    m->dfs = d;
    mc_info("DFS tier at %s: %" PRIu32 " shards of %" PRIu64 " bytes, alignment %" PRIu32,
            d->layout.root, d->layout.shard_count, d->layout.shard_capacity,
            d->layout.alignment);
    return MC_OK;
}

void mc_master_dfs_cleanup(mc_master_t *m)
{
    if (m->dfs == NULL)
        return;
    while (m->dfs->deferred != NULL) {
        mc_dfs_replica_t *d = m->dfs->deferred;
        m->dfs->deferred    = d->next;
        free(d);
    }
    mc_dfs_alloc_cleanup(&m->dfs->alloc);
    free(m->dfs);
    m->dfs = NULL;
}

int32_t mc_master_dfs_config_check(const mc_master_t *m, mc_str_t tenant,
                                   const mc_wire_config_t *c)
{
    if (c->dfs_replica_num == 0)
        return MC_OK;
    /* upstream's rules: one DFS copy beside at least one memory replica,
     * default tenant only */
    if ((c->dfs_replica_num > 1) || (c->replica_num == 0) ||
        !mc_str_eq(tenant, mc_str_from_cstr("default")))
        return MC_INVALID_PARAMS;
    if (m->dfs == NULL)
        return MC_NOT_SUPPORTED;
    return MC_OK;
}

mc_dfs_replica_t *mc_master_dfs_new(mc_master_t *m, uint32_t klen, uint64_t size,
                                    uint32_t replica_num, int32_t *st_p)
{
    mc_master_dfs_t *t = m->dfs;
    uint64_t span;
    mc_dfs_replica_t *d;

    *st_p = MC_INTERNAL_ERROR;
    if (t == NULL) {
        *st_p = MC_NOT_SUPPORTED;
        return NULL;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    span = mc_dfs_record_span(klen, size, t->layout.alignment);
    if ((span == 0) || (mc_dfs_alloc_take(&t->alloc, span, &d->shard, &d->offset) != 0)) {
        t->alloc_failures++;
        free(d);
        *st_p = MC_NO_AVAILABLE_HANDLE;
        return NULL;
    }
    d->id          = ++m->next_replica_id;
    d->span        = span;
    d->replica_num = replica_num;
    d->status      = MC_REPLICA_PROCESSING;
    t->replicas++;
    t->bytes += size;
    t->writes++;
    *st_p = MC_OK;
    return d;
}

mc_dfs_replica_t *mc_master_dfs_restore(mc_master_t *m, uint32_t shard, uint64_t offset,
                                        uint64_t span, uint32_t replica_num, uint64_t size)
{
    mc_master_dfs_t *t = m->dfs;
    mc_dfs_replica_t *d;

    if ((t == NULL) || (span == 0))
        return NULL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    if (mc_dfs_alloc_reserve(&t->alloc, shard, offset, span) != 0) {
        mc_warn("restore: DFS extent %" PRIu32 "+%" PRIu64 " (%" PRIu64 " bytes) does not fit "
                "the layout or is taken: dropped", shard, offset, span);
        free(d);
        return NULL;
    }
    d->id          = ++m->next_replica_id;
    d->shard       = shard;
    d->offset      = offset;
    d->span        = span;
    d->replica_num = replica_num;
    d->status      = MC_REPLICA_COMPLETE;
    t->replicas++;
    t->bytes += size;
    return d;
}

void mc_master_dfs_free(mc_master_t *m, mc_dfs_replica_t *d, uint64_t size)
{
    mc_master_dfs_t *t = m->dfs;

    if (d == NULL)
        return;
    if (t != NULL) {
        mc_dfs_alloc_give(&t->alloc, d->shard, d->offset, d->span);
        t->replicas--;
        t->bytes -= (size <= t->bytes) ? size : t->bytes;
    }
    free(d);
}

void mc_master_dfs_defer(mc_master_t *m, mc_dfs_replica_t *d, uint64_t size,
                         uint64_t release_ms)
{
    if ((d == NULL) || (m->dfs == NULL)) {
        mc_master_dfs_free(m, d, size);
        return;
    }
    d->release_ms    = release_ms;
    d->size          = size;
    d->next          = m->dfs->deferred;
    m->dfs->deferred = d;
}

void mc_master_dfs_tick(mc_master_t *m, uint64_t now_ms)
{
    mc_dfs_replica_t **pp;

    if (m->dfs == NULL)
        return;
    pp = &m->dfs->deferred;
    while (*pp != NULL) {
        mc_dfs_replica_t *d = *pp;
        if (d->release_ms > now_ms) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        mc_master_dfs_free(m, d, d->size);
    }
}

void mc_master_dfs_to_wire(mc_req_ctx_t *x, mc_wire_replica_t *w, const mc_dfs_replica_t *d,
                           uint64_t size)
{
    char name[64];
    char *p;

    mc_dfs_shard_name(d->shard, name, sizeof(name));
    p = mc_arena_alloc(x->arena, strlen(name) + 1);
    memset(w, 0, sizeof(*w));
    if (p != NULL)
        memcpy(p, name, strlen(name) + 1);
    w->id           = d->id;
    w->status       = d->status;
    w->type         = MC_WIRE_REPLICA_DFS;
    w->addr         = d->offset;
    w->size         = size;
    w->file_path    = mc_str_from_cstr(p != NULL ? p : "");
    w->shard_idx    = d->shard;
    w->aligned_size = d->span;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replica descriptors (get_replica_desc): what a query found, described
 * one replica at a time.
 *
 * A query (query.c) keeps only the replicas it could read from, i.e. the
 * COMPLETE memory replicas, ordered best first, then the disk replica if
 * there is one (docs/tiers.md); these functions describe exactly those,
 * so a descriptor never names a replica the client would refuse to read.
 * The disk replica's kind tells the tiers apart as upstream's ReplicaType
 * does: a record of a client's SSD-offload tier is LOCAL_DISK, one of the
 * shared DFS tier DISK.  The query owns every string: a descriptor copies what
 * it reports, so it outlives mc_store_query_release().
 *
 * May call: read.h only (a copy query's descriptors through its describe
 * function).  Called by: the public API.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/read/read.h"

/*
 * Every segment a query names is reached through this process's transfer
 * engine, and the engine speaks one transport: today that is always TCP
 * (protocol_select() in transfer/engine.c refuses the others).
 */
#define MC_REPLICA_PROTOCOL "tcp"

/* A copy query's replica descriptors, fetched once. */
struct mc_copy_descs {
    size_t n;
    mc_replica_desc_t v[];
};

/* The descriptors of a copy query (NULL if its backend cannot say:
 * the call's detail is set).  Two threads asking at once both fetch; one
 * result is kept. */
static struct mc_copy_descs *copy_descs(mc_store_query_h q)
{
    struct mc_copy_descs *dd = __atomic_load_n(&q->descs, __ATOMIC_ACQUIRE), *expect = NULL;
    mc_replica_desc_t *v = NULL;
    size_t n = 0;

    if (dd != NULL)
        return dd;
    if (q->describe(q->owner, q->key, &v, &n) != MC_OK)
        return NULL;
    dd = malloc(sizeof(*dd) + (n + 1) * sizeof(dd->v[0]));
    if (dd != NULL) {
        dd->n = n;
        if (n > 0)
            memcpy(dd->v, v, n * sizeof(*v));
        if (!__atomic_compare_exchange_n(&q->descs, &expect, dd, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            free(dd);
            dd = expect;
        }
    }
    free(v);
    return dd;
}

MC_API size_t mc_store_query_replica_count(mc_store_query_h q)
{
    struct mc_copy_descs *dd;
    if (q == NULL)
        return 0;
    if (q->owner == NULL) /* not a copy query */
        return q->n + (q->disk_path != NULL);
    dd = copy_descs(q);
    return (dd != NULL) ? dd->n : 0;
}

/* Fill @p desc for replica @p i (a COMPLETE one of @p size bytes). */
static mc_status_t describe(size_t i, int is_memory, uint64_t addr, uint64_t size,
                            const char *segment, const char *protocol, mc_replica_desc_t *desc)
{
    size_t len = strlen(segment);

    if (len >= sizeof(desc->segment)) {
        /* query.c bounds names by MC_STORE_NAME_MAX; refuse rather than truncate */
        mc_set_error_detail("segment name of replica %zu is too long to describe", i);
        return MC_INVALID_PARAMS;
    }
    memset(desc, 0, sizeof(*desc));
    desc->status    = MC_REPLICA_COMPLETE;
    desc->is_memory = is_memory;
    desc->addr      = addr;
    desc->size      = size;
    memcpy(desc->segment, segment, len + 1);
    snprintf(desc->protocol, sizeof(desc->protocol), "%s", protocol);
    return MC_OK;
}

MC_API mc_status_t mc_store_query_replica(mc_store_query_h q, size_t i, mc_replica_desc_t *desc)
{
    if ((q == NULL) || (desc == NULL)) {
        mc_set_error_detail("query and desc are required");
        return MC_INVALID_PARAMS;
    }
    if (q->owner != NULL) { /* a copy query: what its backend reports */
        struct mc_copy_descs *dd = copy_descs(q);
        if (dd == NULL)
            return MC_RPC_FAIL;
        if (i >= dd->n) {
            mc_set_error_detail("replica %zu requested of a query with %zu", i, dd->n);
            return MC_INVALID_PARAMS;
        }
        *desc = dd->v[i];
        return MC_OK;
    }
    if ((i == q->n) && (q->disk_path != NULL)) /* the disk replica, last (docs/tiers.md) */
        return describe(i, q->disk_dfs ? MC_REPLICA_KIND_DISK : MC_REPLICA_KIND_LOCAL_DISK,
                        q->disk_offset, q->size, q->disk_segment, q->disk_dfs ? "dfs" : "file",
                        desc);
    if (i >= q->n) {
        mc_set_error_detail("replica %zu requested of a query with %u", i,
                            (unsigned)mc_store_query_replica_count(q));
        return MC_INVALID_PARAMS;
    }
    return describe(i, q->r[i].nof ? MC_REPLICA_KIND_NOF : MC_REPLICA_KIND_MEMORY, q->r[i].addr,
                    q->size, q->r[i].segment, MC_REPLICA_PROTOCOL, desc);
}

MC_API mc_status_t mc_store_query_dfs_replica(mc_store_query_h q, uint32_t *shard_idx_p,
                                              uint64_t *aligned_size_p)
{
    if (q == NULL) {
        mc_set_error_detail("query is required");
        return MC_INVALID_PARAMS;
    }
    if ((q->disk_path == NULL) || !q->disk_dfs) {
        mc_set_error_detail("the object has no DFS replica");
        return MC_REPLICA_NOT_FOUND;
    }
    if (shard_idx_p != NULL)
        *shard_idx_p = q->disk_shard;
    if (aligned_size_p != NULL)
        *aligned_size_p = q->disk_span;
    return MC_OK;
}

MC_API mc_status_t mc_store_query_disk_replica(mc_store_query_h q, char *path, size_t cap,
                                               uint64_t *offset_p)
{
    size_t len;

    if ((q == NULL) || (path == NULL)) {
        mc_set_error_detail("query and path are required");
        return MC_INVALID_PARAMS;
    }
    if (q->disk_path == NULL) {
        mc_set_error_detail("the object has no disk replica");
        return MC_REPLICA_NOT_FOUND;
    }
    len = strlen(q->disk_path);
    if (len >= cap) {
        mc_set_error_detail("the disk replica's path needs %zu bytes", len + 1);
        return MC_BUFFER_OVERFLOW;
    }
    memcpy(path, q->disk_path, len + 1);
    if (offset_p != NULL)
        *offset_p = q->disk_offset;
    return MC_OK;
}

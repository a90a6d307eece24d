/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NoF segments served by this client (docs/tiers.md §8): a storage node's
 * side of the NoF pool.
 *
 * Mounting registers the file with the transfer engine as a file segment
 * (transfer/file/) and sends MOUNT_NOF_SEGMENT with the range the engine
 * reserved for it; from then on writers and readers reach it through our
 * engine like any memory segment, and the engine moves the bytes with
 * pread/pwrite.  The record here (path, id, range) serves unmount, the
 * heartbeat's remount after a master restart, and teardown.
 *
 * Order: the engine serves the file before the master hands it out, and
 * the master forgets it (UNMOUNT_NOF_SEGMENT, or CLIENT_CLOSE at
 * teardown) before the engine stops serving it, so no writer is ever
 * given a range nobody serves.
 *
 * May call: ../calls.c, the master pool, the engine.  Called by: the public
 * API, store.c (teardown), ../threads/heartbeat.c (remount).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/tiers/tiers.h"
#include "transfer/engine.h"

typedef struct nof_seg {
    mc_uuid_t id;
    uint64_t addr;             /* start of its range in our engine */
    uint64_t size;
    char *path;
} nof_seg_t;

struct mc_store_nof {
    pthread_mutex_t mu;        /* the array below */
    size_t n;
    nof_seg_t *v;
};

static void seg_to_wire(mc_store_h s, const nof_seg_t *g, mc_wire_segment_t *w)
{
    w->id       = g->id;
    w->name     = mc_str_from_cstr(s->hostname);
    w->base     = g->addr;
    w->size     = g->size;
    w->protocol = mc_str_from_cstr(s->protocol);
    w->gen      = mc_te_gen_at(s->te, g->addr);
}

/* The record, made on first use (public calls hold `life` for reading;
 * two first mounts at once race on the pointer only). */
static struct mc_store_nof *nof_get(mc_store_h s)
{
    struct mc_store_nof *nf = __atomic_load_n(&s->nof, __ATOMIC_ACQUIRE), *expect = NULL;

    if (nf != NULL)
        return nf;
    nf = calloc(1, sizeof(*nf));
    if (nf == NULL)
        return NULL;
    pthread_mutex_init(&nf->mu, NULL);
    if (!__atomic_compare_exchange_n(&s->nof, &expect, nf, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        pthread_mutex_destroy(&nf->mu);
        free(nf);
        nf = expect;
    }
    return nf;
}

/* Index of @p path in @p nf, or -1.  nf->mu held. */
static ssize_t nof_index(const struct mc_store_nof *nf, const char *path)
{
    for (size_t i = 0; i < nf->n; i++) {
        if (strcmp(nf->v[i].path, path) == 0)
            return (ssize_t)i;
    }
    return -1;
}

MC_API mc_status_t mc_store_nof_mount(mc_store_h s, const char *path, uint64_t size)
{
    struct mc_store_nof *nf;
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_mount_nof_segment_req_t req;
    mc_wire_mount_nof_segment_resp_t resp;
    nof_seg_t g, *grown;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    memset(&g, 0, sizeof(g));
    if ((path == NULL) || (path[0] != '/') || (size == 0)) {
        mc_set_error_detail("nof_mount needs an absolute path and a size > 0");
        st = MC_INVALID_PARAMS;
        goto out;
    }
    nf = nof_get(s);
    g.path = strdup(path);
    if ((nf == NULL) || (g.path == NULL)) {
        mc_set_error_detail("out of memory");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    /* hold the record across the mount, so one path is mounted once */
    pthread_mutex_lock(&nf->mu);
    if (nof_index(nf, path) >= 0) {
        pthread_mutex_unlock(&nf->mu);
        mc_set_error_detail("%s is already mounted as a NoF segment", path);
        st = MC_INVALID_PARAMS;
        goto out;
    }
    grown = realloc(nf->v, (nf->n + 1) * sizeof(*nf->v));
    if (grown == NULL) {
        pthread_mutex_unlock(&nf->mu);
        mc_set_error_detail("out of memory");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    nf->v = grown;
    /* the segment id names the region's generation, as for memory
     * segments: a cached location of a remounted file fails its READ */
    mc_uuid_generate(&g.id);
    st = mc_te_file_reg_gen(s->te, path, size, "file", mc_store_segment_gen(g.id), &g.addr);
    if (st != MC_OK) {
        pthread_mutex_unlock(&nf->mu);
        goto out;
    }
    g.size = size;
    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    seg_to_wire(s, &g, &req.segment);
    st = mc_master_pool_call_mount_nof_segment(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (st != MC_OK) {
        pthread_mutex_unlock(&nf->mu);
        mc_set_error_detail("master refused NoF segment %s (%llu bytes): %s", path,
                            (unsigned long long)size, mc_status_name(st));
        (void)mc_te_file_dereg(s->te, g.addr);
        goto out;
    }
    nf->v[nf->n++] = g;
    g.path         = NULL; /* the record owns it */
    pthread_mutex_unlock(&nf->mu);
    mc_info("serving NoF segment %s (%llu bytes) as %s", path, (unsigned long long)size,
            s->hostname);
out:
    free(g.path);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_nof_unmount(mc_store_h s, const char *path)
{
    struct mc_store_nof *nf;
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_unmount_nof_segment_req_t req;
    mc_wire_unmount_nof_segment_resp_t resp;
    nof_seg_t g;
    ssize_t i;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    nf = __atomic_load_n(&s->nof, __ATOMIC_ACQUIRE);
    if ((path == NULL) || (nf == NULL)) {
        mc_set_error_detail("%s is not mounted as a NoF segment", path ? path : "(null)");
        mc_store_leave(s);
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&nf->mu);
    i = nof_index(nf, path);
    if (i < 0) {
        pthread_mutex_unlock(&nf->mu);
        mc_set_error_detail("%s is not mounted as a NoF segment", path);
        mc_store_leave(s);
        return MC_INVALID_PARAMS;
    }
    g               = nf->v[i];
    nf->v[i]        = nf->v[nf->n - 1];
    nf->n--;
    pthread_mutex_unlock(&nf->mu);

    memset(&req, 0, sizeof(req));
    req.client_id  = s->client_id;
    req.segment_id = g.id;
    st = mc_master_pool_call_unmount_nof_segment(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (st == MC_SEGMENT_NOT_FOUND)
        st = MC_OK; /* the master had already forgotten it (a restart) */
    if (st != MC_OK)
        mc_warn("UNMOUNT_NOF_SEGMENT of %s failed: %s; it is no longer served", path,
                mc_status_name(st));
    (void)mc_te_file_dereg(s->te, g.addr);
    free(g.path);
    mc_store_leave(s);
    return st;
}

void mc_store_nof_remount(mc_store_h s, mc_mconn_t *conn, int fence)
{
    struct mc_store_nof *nf = __atomic_load_n(&s->nof, __ATOMIC_ACQUIRE);
    mc_wire_remount_nof_segments_req_t req;
    mc_wire_remount_nof_segments_resp_t resp;
    mc_wire_segment_t *w;
    mc_status_t st;

    if (nf == NULL)
        return;
    pthread_mutex_lock(&nf->mu);
    if (nf->n == 0) {
        pthread_mutex_unlock(&nf->mu);
        return;
    }
    w = calloc(nf->n, sizeof(*w));
    if (w == NULL) {
        pthread_mutex_unlock(&nf->mu);
        mc_warn("out of memory remounting NoF segments");
        return;
    }
    for (size_t i = 0; i < nf->n; i++) {
        uint64_t g;
        if (fence) /* as for memory segments (heartbeat.c) */
            (void)mc_te_gen_fence(s->te, nf->v[i].addr, &g);
        seg_to_wire(s, &nf->v[i], &w[i]);
    }
    memset(&req, 0, sizeof(req));
    req.client_id  = s->client_id;
    req.segments.n = (uint32_t)nf->n;
    req.segments.v = w;
    st             = mc_master_call_remount_nof_segments(conn, &req, &resp);
    pthread_mutex_unlock(&nf->mu);
    free(w);
    if (st != MC_OK)
        mc_warn("remounting the NoF segments of %s failed: %s", s->hostname,
                mc_status_name(st));
}

void mc_store_nof_release(mc_store_h s)
{
    struct mc_store_nof *nf = __atomic_exchange_n(&s->nof, NULL, __ATOMIC_ACQ_REL);

    if (nf == NULL)
        return;
    for (size_t i = 0; i < nf->n; i++) {
        if (s->te != NULL)
            (void)mc_te_file_dereg(s->te, nf->v[i].addr);
        free(nf->v[i].path);
    }
    free(nf->v);
    pthread_mutex_destroy(&nf->mu);
    free(nf);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The memory a client owns: its global segment(s) and its staging buffer.
 *
 * A global segment is this process's contribution to the pool.  Peers
 * write objects into it and read them out through our transfer engine, so
 * it is registered with MC_TE_MEM_REMOTE_ACCESS and mounted on the master,
 * which allocates object replicas inside [base, base+size).  The memory is
 * a memfd mapped MAP_SHARED when the kernel allows it: a same-host
 * shared-memory transport can then map the very pages instead of copying
 * through a socket.  Pages are not touched here, so a large segment costs
 * nothing until objects land in it.
 *
 * The staging buffer (local_buffer_size) is registered for local use only
 * and carved up by an offset allocator behind a mutex; buffer leases for
 * later APIs come from it.  With local_buffer_size 0 there is none, and
 * operations that need staging fail with MC_INVALID_PARAMS, as upstream.
 *
 * Called from setup/close with the handle's lifetime lock held for
 * writing, except mc_store_segments_to_wire() (heartbeat thread, takes
 * seg_lock) and the lbuf_alloc/free pair (any thread, takes lbuf_lock).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "store/store_internal.h"

#define MC_LBUF_ALIGN 64

static int round_to_pages(uint64_t size, size_t *len_p)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t p = (page > 0) ? (uint64_t)page : 4096;
    if ((size > SIZE_MAX - (p - 1)) || (size > UINT64_MAX - (p - 1)))
        return -1;
    *len_p = (size_t)((size + p - 1) & ~(p - 1));
    return 0;
}

/* memfd + MAP_SHARED when possible, anonymous memory otherwise. */
static mc_status_t map_segment_memory(mc_store_segment_t *seg)
{
    void *base;

    seg->fd = memfd_create("mooncake-segment", MFD_CLOEXEC);
    if (seg->fd >= 0) {
        if (ftruncate(seg->fd, (off_t)seg->map_len) != 0) {
            mc_set_error_detail("cannot size a %zu-byte segment: %s", seg->map_len,
                                strerror(errno));
            mc_error("cannot size a %zu-byte segment: %m", seg->map_len);
            close(seg->fd);
            seg->fd = -1;
            return MC_INTERNAL_ERROR;
        }
        base = mmap(NULL, seg->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    } else {
        mc_debug("memfd_create failed (%m); using anonymous memory for the segment");
        base = mmap(NULL, seg->map_len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (base == MAP_FAILED) {
        mc_set_error_detail("cannot map a %zu-byte global segment: %s", seg->map_len,
                            strerror(errno));
        mc_error("cannot map a %zu-byte global segment: %m", seg->map_len);
        if (seg->fd >= 0)
            close(seg->fd);
        seg->fd = -1;
        return MC_INTERNAL_ERROR;
    }
    seg->base = base;
    return MC_OK;
}

static void unmap_segment(mc_store_h s, mc_store_segment_t *seg)
{
    if (seg->registered) {
        mc_status_t st = mc_te_mem_dereg(s->te, seg->base);
        if (st != MC_OK)
            mc_warn("cannot unregister segment at %p: %s", seg->base, mc_status_name(st));
        seg->registered = 0;
    }
    if (seg->base != NULL)
        munmap(seg->base, seg->map_len);
    if (seg->fd >= 0)
        close(seg->fd);
    seg->base = NULL;
    seg->fd   = -1;
}

static void segment_to_wire(const mc_store_h s, const mc_store_segment_t *seg,
                            mc_wire_segment_t *w)
{
    w->id       = seg->id;
    w->name     = mc_str_from_cstr(s->hostname);
    w->base     = (uint64_t)(uintptr_t)seg->base;
    w->size     = seg->size;
    w->protocol = mc_str_from_cstr(s->protocol);
}

mc_status_t mc_store_segment_add(mc_store_h s, uint64_t size)
{
    mc_status_t st;
    mc_store_segment_t seg, *grown;
    mc_mconn_t *conn = NULL;
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;

    memset(&seg, 0, sizeof(seg));
    seg.fd   = -1;
    seg.size = size;
    mc_uuid_generate(&seg.id);
    if ((size == 0) || (round_to_pages(size, &seg.map_len) != 0)) {
        mc_set_error_detail("global_segment_size %llu is not mappable",
                            (unsigned long long)size);
        return MC_INVALID_PARAMS;
    }

    st = map_segment_memory(&seg);
    if (st != MC_OK)
        return st;

    st = mc_te_mem_reg(s->te, seg.base, (size_t)size, "", MC_TE_MEM_REMOTE_ACCESS);
    if (st != MC_OK) {
        mc_error("cannot register the global segment with the transfer engine: %s (%s)",
                 mc_status_name(st), mc_last_error_detail());
        goto fail;
    }
    seg.registered = 1;

    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    segment_to_wire(s, &seg, &req.segment);
    st = mc_master_pool_call_mount_segment(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    /* MOUNT_SEGMENT is idempotent upstream; an existing one is ours. */
    if (st == MC_SEGMENT_ALREADY_EXISTS)
        st = MC_OK;
    if (st != MC_OK) {
        mc_error("master refused to mount segment %s (%llu bytes): %s", s->hostname,
                 (unsigned long long)size, mc_status_name(st));
        goto fail;
    }
    seg.mounted = 1;

    pthread_mutex_lock(&s->seg_lock);
    grown = realloc(s->segs, (s->nsegs + 1) * sizeof(*s->segs));
    if (grown == NULL) {
        pthread_mutex_unlock(&s->seg_lock);
        mc_set_error_detail("out of memory recording a segment");
        st = MC_INTERNAL_ERROR;
        goto fail; /* the master forgets it with CLIENT_CLOSE on unwind */
    }
    s->segs            = grown;
    s->segs[s->nsegs++] = seg;
    pthread_mutex_unlock(&s->seg_lock);
    mc_debug("mounted segment %s at %p, %llu bytes", s->hostname, seg.base,
             (unsigned long long)size);
    return MC_OK;

fail:
    unmap_segment(s, &seg);
    return st;
}

void mc_store_segments_release(mc_store_h s)
{
    mc_store_segment_t *segs;
    size_t n;

    pthread_mutex_lock(&s->seg_lock);
    segs    = s->segs;
    n       = s->nsegs;
    s->segs = NULL;
    s->nsegs = 0;
    pthread_mutex_unlock(&s->seg_lock);

    for (size_t i = 0; i < n; i++)
        unmap_segment(s, &segs[i]);
    free(segs);
}

mc_status_t mc_store_segments_to_wire(mc_store_h s, mc_arena_t *arena,
                                      mc_wire_segment_list_t *list)
{
    mc_status_t st = MC_OK;

    pthread_mutex_lock(&s->seg_lock);
    list->n = (uint32_t)s->nsegs;
    list->v = NULL;
    if (s->nsegs > 0) {
        list->v = mc_arena_calloc(arena, s->nsegs, sizeof(*list->v));
        if (list->v == NULL) {
            list->n = 0;
            st      = MC_INTERNAL_ERROR;
        } else {
            for (size_t i = 0; i < s->nsegs; i++)
                segment_to_wire(s, &s->segs[i], &list->v[i]);
        }
    }
    pthread_mutex_unlock(&s->seg_lock);
    return st;
}

/* ---- staging buffer ------------------------------------------------------- */

mc_status_t mc_store_lbuf_init(mc_store_h s, uint64_t size)
{
    mc_status_t st;
    void *base;
    size_t len;

    if (size == 0)
        return MC_OK;
    if (round_to_pages(size, &len) != 0) {
        mc_set_error_detail("local_buffer_size %llu is not mappable", (unsigned long long)size);
        return MC_INVALID_PARAMS;
    }
    base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        mc_set_error_detail("cannot map a %zu-byte local buffer: %s", len, strerror(errno));
        mc_error("cannot map a %zu-byte local buffer: %m", len);
        return MC_INTERNAL_ERROR;
    }
    s->lbuf         = base;
    s->lbuf_map_len = len;
    s->lbuf_size    = size;

    st = mc_te_mem_reg(s->te, base, (size_t)size, "", 0);
    if (st != MC_OK) {
        mc_error("cannot register the local buffer with the transfer engine: %s (%s)",
                 mc_status_name(st), mc_last_error_detail());
        goto fail;
    }
    s->lbuf_registered = 1;

    st = mc_alloc_create(size, MC_LBUF_ALIGN, &s->lbuf_alloc);
    if (st != MC_OK) {
        mc_set_error_detail("cannot create the local buffer allocator: %s",
                            mc_status_name(st));
        goto fail;
    }
    return MC_OK;

fail:
    mc_store_lbuf_cleanup(s);
    return st;
}

void mc_store_lbuf_cleanup(mc_store_h s)
{
    if (s->lbuf_alloc != NULL) {
        mc_alloc_destroy(s->lbuf_alloc);
        s->lbuf_alloc = NULL;
    }
    if (s->lbuf_registered) {
        mc_status_t st = mc_te_mem_dereg(s->te, s->lbuf);
        if (st != MC_OK)
            mc_warn("cannot unregister the local buffer: %s", mc_status_name(st));
        s->lbuf_registered = 0;
    }
    if (s->lbuf != NULL)
        munmap(s->lbuf, s->lbuf_map_len);
    s->lbuf         = NULL;
    s->lbuf_map_len = 0;
    s->lbuf_size    = 0;
}

mc_status_t mc_store_lbuf_alloc(mc_store_h s, uint64_t size, void **ptr_p,
                                mc_alloc_block_t *block_p)
{
    mc_status_t st;
    mc_alloc_block_t b;

    if (s->lbuf_alloc == NULL) {
        mc_set_error_detail("no local buffer: the store was set up with local_buffer_size 0");
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&s->lbuf_lock);
    st = mc_alloc_get(s->lbuf_alloc, size, &b);
    pthread_mutex_unlock(&s->lbuf_lock);
    if (st != MC_OK) {
        mc_set_error_detail("local buffer cannot hold %llu more bytes",
                            (unsigned long long)size);
        return st;
    }
    *ptr_p   = (uint8_t *)s->lbuf + b.offset;
    *block_p = b;
    return MC_OK;
}

void mc_store_lbuf_free(mc_store_h s, const mc_alloc_block_t *block)
{
    if ((s->lbuf_alloc == NULL) || (block == NULL))
        return;
    pthread_mutex_lock(&s->lbuf_lock);
    mc_alloc_put(s->lbuf_alloc, block);
    pthread_mutex_unlock(&s->lbuf_lock);
}

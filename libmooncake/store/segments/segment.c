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
 * and carved up by an offset allocator behind a mutex; staging for puts,
 * mem_pool_alloc() and get_buffer() handles come from it.  Its mapping is
 * reference counted (read/read.h) so that a buffer handle outlives
 * close: after close the memory is no longer registered with the engine
 * but stays mapped until the last handle is released.  lbuf_init/cleanup
 * also create and destroy the read-side state (s->rd).  With local_buffer_size 0 there is none, and
 * operations that need staging fail with MC_INVALID_PARAMS, as upstream.
 *
 * Called from setup/close with the handle's lifetime lock held for
 * writing, except mc_store_segments_to_wire() (heartbeat thread, takes
 * seg_lock) and the lbuf_alloc/free pair (any thread, takes the mapping's
 * lock).
 *
 * May call: segments.h (this folder), ../read/read.h (the staging buffer's
 * mapping), ../calls.c, the master pool, the engine.  Called by: store.c
 * (setup, close), mount.c, ../threads/heartbeat.c (remount), the dummy (its
 * server's mappings).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "common/cuda.h"
#include "common/log.h"
#include "store/read/read.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "transfer/engine.h"

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

/*
 * A segment larger than the host's RAM and swap together can never be
 * backed: refuse it as a bad parameter, with the sizes, before trying
 * (the map would fail with a bare ENOMEM, or succeed lazily and have the
 * OOM killer settle it later).
 */
mc_status_t mc_store_segment_size_check(uint64_t size, const char *what)
{
    struct sysinfo si;
    uint64_t total;

    if (sysinfo(&si) != 0)
        return MC_OK; /* cannot tell: let the map decide */
    total = ((uint64_t)si.totalram + (uint64_t)si.totalswap) * (uint64_t)si.mem_unit;
    if (size > total) {
        mc_set_error_detail("%s %llu bytes is larger than this host's memory "
                            "(%llu bytes of RAM and swap)",
                            what, (unsigned long long)size, (unsigned long long)total);
        mc_error("%s", mc_last_error_detail());
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

mc_status_t mc_store_populate_config(unsigned *threads_p)
{
    const char *on = getenv("MC_STORE_POPULATE");
    uint64_t threads = mc_cpus_available();

    if (threads > 8)
        threads = 8;
    if ((on != NULL) && (*on != '\0') && (strcmp(on, "0") != 0) && (strcmp(on, "1") != 0)) {
        mc_set_error_detail("MC_STORE_POPULATE=\"%s\": expected 0 (fault pages in on first "
                            "touch) or 1 (all at once when mapped)", on);
        mc_error("setup: %s", mc_last_error_detail());
        return MC_INVALID_PARAMS;
    }
    if (mc_env_u64("MC_STORE_POPULATE_THREADS", 1, 64, &threads) != 0) {
        mc_error("setup: %s", mc_last_error_detail());
        return MC_INVALID_PARAMS;
    }
    if (threads_p != NULL)
        *threads_p = ((on != NULL) && (strcmp(on, "0") == 0)) ? 0 : (unsigned)threads;
    return MC_OK;
}

void mc_store_populate(void *base, size_t len)
{
    unsigned threads = 0;
    int err;

    if ((mc_store_populate_config(&threads) != MC_OK) || (threads == 0))
        return;
    err = mc_populate(base, len, threads);
    if (err == EINVAL) /* a kernel before 5.14 */
        mc_debug("this kernel cannot populate shared memory; its pages fault in on first touch");
    else if (err != 0)
        mc_warn("populating %zu bytes of shared memory: %s; those pages fault in on first "
                "touch", len, strerror(err));
}

mc_status_t mc_store_segment_map(mc_store_segment_t *seg, mc_status_t fail_status)
{
    void *base;

    /* A memfd sealed against resizing: the engine can then hand it to a
     * same-host reader, who can rely on the pages never vanishing under
     * a copy.  Anonymous memory when the kernel has no memfd. */
    seg->fd = memfd_create("mooncake-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (seg->fd >= 0) {
        if ((ftruncate(seg->fd, (off_t)seg->map_len) != 0) ||
            (fcntl(seg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)) {
            mc_set_error_detail("cannot size a %zu-byte segment: %s", seg->map_len,
                                strerror(errno));
            mc_error("cannot size a %zu-byte segment: %m", seg->map_len);
            close(seg->fd);
            seg->fd = -1;
            return fail_status;
        }
        base = mmap(NULL, seg->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    } else {
        mc_debug("memfd_create failed (%m); using anonymous memory for the segment");
        base = mmap(NULL, seg->map_len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (base == MAP_FAILED) {
        mc_set_error_detail("cannot map a %zu-byte segment: %s", seg->map_len,
                            strerror(errno));
        mc_error("cannot map a %zu-byte segment: %m", seg->map_len);
        if (seg->fd >= 0)
            close(seg->fd);
        seg->fd = -1;
        return fail_status;
    }
    seg->base = base;
    mc_store_populate(base, seg->map_len);
    /* setup and allocate_and_mount_segment segments only: both map here */
    seg->pinned = mc_cuda_pin_segment(base, seg->map_len);
    return MC_OK;
}

void mc_store_segment_unmap(mc_store_h s, mc_store_segment_t *seg)
{
    if (seg->registered) {
        mc_status_t st = mc_te_mem_dereg(s->te, seg->base);
        if (st != MC_OK)
            mc_warn("cannot unregister segment at %p: %s", seg->base, mc_status_name(st));
        seg->registered = 0;
    }
    if (seg->pinned)
        mc_cuda_unpin_segment(seg->base, seg->map_len);
    seg->pinned = 0;
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
    /* where its counter stands now (common/gen.h) */
    w->gen      = mc_te_gen_at(s->te, (uint64_t)(uintptr_t)seg->base);
}

mc_status_t mc_store_segment_add(mc_store_h s, uint64_t size)
{
    mc_status_t st;
    mc_store_segment_t seg;

    memset(&seg, 0, sizeof(seg));
    seg.fd   = -1;
    seg.size = size;
    seg.kind = MC_STORE_SEG_SETUP;
    mc_uuid_generate(&seg.id);
    if ((size == 0) || (round_to_pages(size, &seg.map_len) != 0)) {
        mc_set_error_detail("global_segment_size %llu is not mappable",
                            (unsigned long long)size);
        return MC_INVALID_PARAMS;
    }
    st = mc_store_segment_size_check(size, "global_segment_size");
    if (st != MC_OK)
        return st;

    st = mc_store_segment_map(&seg, MC_INTERNAL_ERROR);
    if (st != MC_OK)
        return st;
    return mc_store_segment_attach(s, &seg, "");
}

mc_status_t mc_store_segment_attach(mc_store_h s, mc_store_segment_t *segp,
                                    const char *location)
{
    mc_status_t st;
    mc_store_segment_t seg = *segp, *grown;
    mc_mconn_t *conn = NULL;
    mc_wire_mount_segment_req_t req;
    mc_wire_mount_segment_resp_t resp;
    uint64_t size = seg.size;

    /* Room in the record first: once the master has the segment, nothing
     * may fail before it is recorded (or it would outlive the mapping). */
    pthread_mutex_lock(&s->seg_lock);
    grown = realloc(s->segs, (s->nsegs + 1) * sizeof(*s->segs));
    if (grown != NULL)
        s->segs = grown;
    pthread_mutex_unlock(&s->seg_lock);
    if (grown == NULL) {
        mc_set_error_detail("out of memory recording a segment");
        st = MC_INTERNAL_ERROR;
        goto fail;
    }

    /* seg.fd is our own memfd, or -1 (anonymous memory, a user's file).
     * The registration's generation comes from the segment id, which the
     * master hands out with every replica here: a reader's request names
     * it, so after a restart or a remount (a new id) old locations are
     * refused rather than served from whatever now lives there. */
    st = mc_te_mem_reg_gen(s->te, seg.base, (size_t)size, location ? location : "",
                           MC_TE_MEM_REMOTE_ACCESS, seg.fd, mc_store_segment_gen(seg.id));
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

    /* Room for nsegs + 1 was made above.  Only public calls holding `life`
     * add segments and they serialise on nothing else, so grow again if a
     * concurrent mount took the slot. */
    pthread_mutex_lock(&s->seg_lock);
    grown = realloc(s->segs, (s->nsegs + 1) * sizeof(*s->segs));
    if (grown == NULL) {
        pthread_mutex_unlock(&s->seg_lock);
        mc_set_error_detail("out of memory recording a segment");
        st = MC_INTERNAL_ERROR;
        goto fail_mounted;
    }
    s->segs            = grown;
    s->segs[s->nsegs++] = seg;
    pthread_mutex_unlock(&s->seg_lock);
    mc_debug("mounted segment %s at %p, %llu bytes", s->hostname, seg.base,
             (unsigned long long)size);
    return MC_OK;

fail_mounted: {
        mc_wire_unmount_segment_req_t ureq;
        mc_wire_unmount_segment_resp_t uresp;
        ureq.client_id  = s->client_id;
        ureq.segment_id = seg.id;
        conn            = NULL;
        if (mc_master_pool_call_unmount_segment(&s->pool, &conn, &ureq, &uresp) != MC_OK)
            mc_warn("cannot take back a segment the master mounted");
        if (conn != NULL)
            mc_master_pool_put(&s->pool, conn);
    }
fail:
    mc_store_segment_unmap(s, &seg);
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
        mc_store_segment_unmap(s, &segs[i]);
    free(segs);
}

mc_status_t mc_store_segments_to_wire(mc_store_h s, mc_arena_t *arena,
                                      mc_wire_segment_list_t *list, int fence)
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
            /* Draining segments are on their way out: a restarted master
             * must not hand out allocations in them again. */
            uint32_t k = 0;
            for (size_t i = 0; i < s->nsegs; i++) {
                uint64_t g;
                if (s->segs[i].drain_deadline_ms != 0)
                    continue;
                if (fence &&
                    (mc_te_gen_fence(s->te, (uint64_t)(uintptr_t)s->segs[i].base, &g) != 0))
                    mc_warn("segment %s: requests under its old generation still run; "
                            "mounting it anyway", s->hostname);
                segment_to_wire(s, &s->segs[i], &list->v[k++]);
            }
            list->n = k;
        }
    }
    pthread_mutex_unlock(&s->seg_lock);
    return st;
}

/* ---- staging buffer ------------------------------------------------------- */

static mc_status_t lbuf_map_create(uint64_t size, mc_store_lbuf_map_t **map_p)
{
    mc_status_t st;
    mc_store_lbuf_map_t *m;
    size_t len;

    if (round_to_pages(size, &len) != 0) {
        mc_set_error_detail("local_buffer_size %llu is not mappable", (unsigned long long)size);
        return MC_INVALID_PARAMS;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        mc_set_error_detail("out of memory for the local buffer");
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->refs = 1;
    m->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->base == MAP_FAILED) {
        mc_set_error_detail("cannot map a %zu-byte local buffer: %s", len, strerror(errno));
        mc_error("cannot map a %zu-byte local buffer: %m", len);
        m->base = NULL;
        st      = MC_INTERNAL_ERROR;
        goto fail;
    }
    m->map_len = len;
    m->size    = size;
    st         = mc_alloc_create(size, MC_LBUF_ALIGN, &m->alloc);
    if (st != MC_OK) {
        mc_set_error_detail("cannot create the local buffer allocator: %s",
                            mc_status_name(st));
        goto fail;
    }
    *map_p = m;
    return MC_OK;

fail:
    mc_store_lbuf_map_unref(m);
    return st;
}

/* Called by setup after the read-side state is created (also for
 * local_buffer_size 0). */
mc_status_t mc_store_lbuf_init(mc_store_h s, uint64_t size)
{
    mc_status_t st;
    mc_store_lbuf_map_t *m = NULL;

    if (size == 0)
        return MC_OK;
    st = lbuf_map_create(size, &m);
    if (st != MC_OK)
        goto fail;
    s->rd->lbuf  = m;
    s->lbuf      = m->base;
    s->lbuf_size = size;

    /* local use only: peers never reach the staging buffer */
    st = mc_te_mem_reg(s->te, m->base, (size_t)size, "", 0);
    if (st != MC_OK) {
        mc_error("cannot register the local buffer with the transfer engine: %s (%s)",
                 mc_status_name(st), mc_last_error_detail());
        goto fail;
    }
    s->lbuf_registered = 1;
    return MC_OK;

fail:
    mc_store_lbuf_cleanup(s);
    return st;
}

void mc_store_lbuf_cleanup(mc_store_h s)
{
    mc_store_lbuf_map_t *m = (s->rd != NULL) ? s->rd->lbuf : NULL;

    /* sessions and pool allocations first: they use the engine and the map */
    mc_store_rd_destroy(s);
    if (s->lbuf_registered) {
        mc_status_t st = mc_te_mem_dereg(s->te, s->lbuf);
        if (st != MC_OK)
            mc_warn("cannot unregister the local buffer: %s", mc_status_name(st));
        s->lbuf_registered = 0;
    }
    /* live buffer handles keep the memory mapped */
    mc_store_lbuf_map_unref(m);
    s->lbuf      = NULL;
    s->lbuf_size = 0;
}

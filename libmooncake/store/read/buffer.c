/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory handed out from the store's local buffer: get_buffer() handles
 * and the raw mem_pool_alloc()/mem_pool_free() pair.
 *
 * A buffer handle owns one block of the local buffer and one reference on
 * its mapping (read.h), so its bytes stay valid after the store
 * is closed or destroyed; releasing the handle gives the block back to the
 * allocator and drops the reference, the last of which unmaps.
 *
 * The pool keeps a pointer -> block map (a hash table behind a mutex) so
 * that free() needs only the pointer, as the Python BufferPool and
 * alloc_from_mem_pool() use it.  Pool blocks belong to one setup: close
 * returns them all, and the pointers must not be used afterwards.
 *
 * May call: read.h (this folder), ../calls.c, metrics, the offset
 * allocator.  Called by: the public API, store.c (the read-side state at
 * setup and close), ../segments/segment.c (the staging buffer's mapping),
 * ../write/ (staging blocks), the dummy backend (its copies).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"

#define MC_BUF_STACK 64

MC_API void mc_store_prepare_buffer(void *buf, size_t len)
{
    mc_huge_advise(buf, len);
}

struct mc_store_buffer {
    mc_store_lbuf_map_t *map; /* NULL for an empty object */
    mc_alloc_block_t block;
    void *data;
    uint64_t size;
};

/* ---- get_buffer ------------------------------------------------------------------ */

static mc_status_t buffer_new(mc_store_h s, uint64_t size, mc_store_buffer_h *buf_p)
{
    mc_status_t st;
    struct mc_store_buffer *b = calloc(1, sizeof(*b));

    if (b == NULL) {
        mc_set_error_detail("out of memory for a buffer handle");
        return MC_INTERNAL_ERROR;
    }
    b->size = size;
    if (size > 0) {
        if (s->rd->lbuf == NULL) {
            free(b);
            mc_set_error_detail("get_buffer needs a local buffer (local_buffer_size is 0)");
            return MC_INVALID_PARAMS;
        }
        st = mc_store_lbuf_map_alloc(s->rd->lbuf, size, &b->data, &b->block);
        if (st != MC_OK) {
            free(b);
            return st;
        }
        b->map = s->rd->lbuf;
        mc_store_lbuf_map_ref(b->map);
    }
    *buf_p = b;
    return MC_OK;
}

MC_API void mc_store_buffer_release(mc_store_buffer_h b)
{
    if (b == NULL)
        return;
    if (b->map != NULL) {
        mc_store_lbuf_map_free(b->map, &b->block);
        mc_store_lbuf_map_unref(b->map);
    }
    free(b);
}

MC_API void *mc_store_buffer_data(mc_store_buffer_h b)
{
    return (b != NULL) ? b->data : NULL;
}

MC_API uint64_t mc_store_buffer_size(mc_store_buffer_h b)
{
    return (b != NULL) ? b->size : 0;
}

/* Buffers of whole copies (a backend with no replicas of its own, the
 * dummy: read.h): the handle in front of each heap block (map NULL:
 * release frees the block). */
#define COPY_BUFFER_HDR ((sizeof(struct mc_store_buffer) + 63) & ~(size_t)63)

size_t mc_store_buffer_copy_hdr(void)
{
    return COPY_BUFFER_HDR;
}

void mc_store_buffers_from_copies(size_t n, void **mems, uint64_t *sizes,
                                  mc_store_buffer_h *buffers, const mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        struct mc_store_buffer *b = (mems != NULL) ? mems[i] : NULL;
        buffers[i]                = NULL;
        if ((statuses[i] != MC_OK) || (b == NULL)) {
            free(b);
            continue;
        }
        memset(b, 0, sizeof(*b));
        b->data    = (uint8_t *)b + COPY_BUFFER_HDR;
        b->size    = sizes[i];
        buffers[i] = b;
    }
    free(mems);
    free(sizes);
}

/* Lookup, allocation and one transfer for keys[0..n); caller holds life. */
static void do_batch_get_buffer(mc_store_h s, const char *const *keys, size_t n,
                                mc_store_buffer_h *buffers, mc_status_t *statuses)
{
    mc_store_query_h q_stack[MC_BUF_STACK];
    mc_read_piece_t p_stack[MC_BUF_STACK];
    mc_store_query_h *qs = q_stack;
    mc_read_piece_t *ps  = p_stack;
    size_t np            = 0;

    if (n > MC_BUF_STACK) {
        qs = malloc(n * sizeof(*qs));
        ps = malloc(n * sizeof(*ps));
        if ((qs == NULL) || (ps == NULL)) {
            free(qs == q_stack ? NULL : qs);
            free(ps == p_stack ? NULL : ps);
            mc_set_error_detail("out of memory for a batch of %zu keys", n);
            for (size_t i = 0; i < n; i++)
                statuses[i] = MC_INTERNAL_ERROR;
            return;
        }
    }
    mc_store_do_batch_query(s, keys, n, qs, statuses);
    for (size_t i = 0; i < n; i++) {
        if (statuses[i] != MC_OK)
            continue;
        statuses[i] = buffer_new(s, qs[i]->size, &buffers[i]);
        if ((statuses[i] == MC_OK) && (qs[i]->size > 0))
            ps[np++] = (mc_read_piece_t){buffers[i]->data, 0, qs[i]->size, i};
    }
    mc_store_read_pieces(s, qs, ps, np, statuses);
    for (size_t i = 0; i < n; i++) {
        if ((statuses[i] != MC_OK) && (buffers[i] != NULL)) {
            mc_store_buffer_release(buffers[i]);
            buffers[i] = NULL;
        }
        mc_store_query_release(qs[i]);
    }
    if (qs != q_stack)
        free(qs);
    if (ps != p_stack)
        free(ps);
}

mc_status_t mc_emb_get_buffer(mc_store_h s, const char *key, mc_store_buffer_h *buffer_p)
{
    mc_status_t st;
    uint64_t t0;
    mc_store_buffer_h b = NULL;

    t0        = mc_store_metrics_now_us();
    st        = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    do_batch_get_buffer(s, &key, 1, &b, &st);
    mc_store_metrics_record(&s->metrics, MC_MOP_GET, t0, 1, st != MC_OK,
                            (st == MC_OK) ? mc_store_buffer_size(b) : 0);
    mc_store_leave(s);
    if (st == MC_OK)
        *buffer_p = b;
    return st;
}

MC_API mc_status_t mc_store_get_buffer(mc_store_h s, const char *key, mc_store_buffer_h *buffer_p)
{
    if (buffer_p == NULL) {
        mc_set_error_detail("buffer_p is NULL");
        return MC_INVALID_PARAMS;
    }
    *buffer_p = NULL;
    return MC_STORE_DISPATCH(s, get_buffer, key, buffer_p);
}

mc_status_t mc_emb_batch_get_buffer(mc_store_h s, const char *const *keys, size_t n,
                                    mc_store_buffer_h *buffers, mc_status_t *statuses)
{
    mc_status_t st;
    uint64_t t0 = mc_store_metrics_now_us();

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INVALID_PARAMS;
    } else if (n > 0) {
        do_batch_get_buffer(s, keys, n, buffers, statuses);
    }
    if (n > 0) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++)
            if (statuses[i] == MC_OK)
                bytes += mc_store_buffer_size(buffers[i]);
        mc_store_metrics_record(&s->metrics, MC_MOP_BATCH_GET, t0, n,
                                mc_store_first_error(statuses, n) != MC_OK, bytes);
    }
    mc_store_leave(s);
    return mc_store_first_error(statuses, n);
}

MC_API mc_status_t mc_store_batch_get_buffer(mc_store_h s, const char *const *keys, size_t n,
                                             mc_store_buffer_h *buffers, mc_status_t *statuses)
{
    if ((n > 0) && ((keys == NULL) || (buffers == NULL) || (statuses == NULL))) {
        mc_set_error_detail("keys, buffers and statuses are required");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++)
        buffers[i] = NULL;
    return MC_STORE_DISPATCH(s, batch_get_buffer, keys, n, buffers, statuses);
}

/* ---- mem pool ---------------------------------------------------------------------- */

typedef struct pool_entry {
    mc_hnode_t node;
    void *ptr;
    mc_alloc_block_t block;
} pool_entry_t;

static int pool_eq(const mc_hnode_t *n, const void *key)
{
    return mc_container_of(n, pool_entry_t, node)->ptr == *(void *const *)key;
}

static uint64_t ptr_hash(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    return mc_hash_bytes(&v, sizeof(v), 0);
}

mc_status_t mc_emb_mem_pool_alloc(mc_store_h s, size_t size, void **ptr_p)
{
    mc_status_t st;
    pool_entry_t *e;

    if ((ptr_p == NULL) || (size == 0)) {
        mc_set_error_detail("mem_pool_alloc needs a size > 0 and ptr_p");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if (size > s->lbuf_size) {
        mc_set_error_detail("mem_pool_alloc of %zu bytes: larger than the whole local buffer "
                            "(local_buffer_size %llu bytes)",
                            size, (unsigned long long)s->lbuf_size);
        st = MC_INVALID_PARAMS;
        goto out;
    }
    e = malloc(sizeof(*e));
    if (e == NULL) {
        mc_set_error_detail("out of memory for a pool entry");
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    st = mc_store_lbuf_alloc(s, size, &e->ptr, &e->block);
    if (st != MC_OK) {
        free(e);
        goto out;
    }
    pthread_mutex_lock(&s->rd->pool_lock);
    mc_hmap_insert(&s->rd->pool, &e->node, ptr_hash(e->ptr));
    pthread_mutex_unlock(&s->rd->pool_lock);
    *ptr_p = e->ptr;
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_mem_pool_alloc(mc_store_h s, size_t size, void **ptr_p)
{
    return MC_STORE_DISPATCH(s, mem_pool_alloc, size, ptr_p);
}

mc_status_t mc_emb_mem_pool_free(mc_store_h s, void *ptr)
{
    mc_status_t st;
    mc_hnode_t *n;
    pool_entry_t *e = NULL;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    pthread_mutex_lock(&s->rd->pool_lock);
    n = mc_hmap_find(&s->rd->pool, ptr_hash(ptr), &ptr, pool_eq);
    if (n != NULL) {
        e = mc_container_of(n, pool_entry_t, node);
        mc_hmap_remove(&s->rd->pool, n);
    }
    pthread_mutex_unlock(&s->rd->pool_lock);
    if (e == NULL) {
        mc_set_error_detail("%p was not allocated by mem_pool_alloc", ptr);
        st = MC_INVALID_PARAMS;
    } else {
        mc_store_lbuf_free(s, &e->block);
        free(e);
    }
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_mem_pool_free(mc_store_h s, void *ptr)
{
    return MC_STORE_DISPATCH(s, mem_pool_free, ptr);
}

void mc_store_pool_release(mc_store_h s)
{
    mc_hmap_iter_t it;

    for (mc_hnode_t *n = mc_hmap_first(&s->rd->pool, &it); n != NULL;
         n = mc_hmap_next(&s->rd->pool, &it)) {
        pool_entry_t *e = mc_container_of(n, pool_entry_t, node);
        mc_hmap_remove(&s->rd->pool, n);
        mc_store_lbuf_free(s, &e->block);
        free(e);
    }
}

/* ---- the staging buffer's mapping (created by ../segments/segment.c) ---------- */

/*
 * The mapping is shared by the store (one reference while set up) and by
 * every live buffer handle (one each), so its allocator carries its own
 * lock: a handle released after mc_store_destroy() must still be able to
 * give its block back.
 */
void mc_store_lbuf_map_ref(mc_store_lbuf_map_t *m)
{
    pthread_mutex_lock(&m->lock);
    m->refs++;
    pthread_mutex_unlock(&m->lock);
}

void mc_store_lbuf_map_unref(mc_store_lbuf_map_t *m)
{
    unsigned left;

    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    left = --m->refs;
    pthread_mutex_unlock(&m->lock);
    if (left > 0)
        return;
    if (m->alloc != NULL)
        mc_alloc_destroy(m->alloc);
    if (m->base != NULL)
        munmap(m->base, m->map_len);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

mc_status_t mc_store_lbuf_map_alloc(mc_store_lbuf_map_t *m, uint64_t size, void **ptr_p,
                                    mc_alloc_block_t *block_p)
{
    mc_status_t st;
    mc_alloc_block_t b;

    pthread_mutex_lock(&m->lock);
    st = mc_alloc_get(m->alloc, size, &b);
    pthread_mutex_unlock(&m->lock);
    if (st != MC_OK) {
        mc_set_error_detail("local buffer cannot hold %llu more bytes",
                            (unsigned long long)size);
        return st;
    }
    *ptr_p   = (uint8_t *)m->base + b.offset;
    *block_p = b;
    return MC_OK;
}

void mc_store_lbuf_map_free(mc_store_lbuf_map_t *m, const mc_alloc_block_t *block)
{
    mc_status_t st;

    pthread_mutex_lock(&m->lock);
    st = mc_alloc_put(m->alloc, block);
    pthread_mutex_unlock(&m->lock);
    if (st != MC_OK)
        mc_warn("local buffer block at offset %llu was not allocated",
                (unsigned long long)block->offset);
}

mc_status_t mc_store_lbuf_alloc(mc_store_h s, uint64_t size, void **ptr_p,
                                mc_alloc_block_t *block_p)
{
    if ((s->rd == NULL) || (s->rd->lbuf == NULL)) {
        mc_set_error_detail("no local buffer: the store was set up with local_buffer_size 0");
        return MC_INVALID_PARAMS;
    }
    return mc_store_lbuf_map_alloc(s->rd->lbuf, size, ptr_p, block_p);
}

void mc_store_lbuf_free(mc_store_h s, const mc_alloc_block_t *block)
{
    if ((s->rd == NULL) || (s->rd->lbuf == NULL) || (block == NULL))
        return;
    mc_store_lbuf_map_free(s->rd->lbuf, block);
}

/* ---- read-side state ------------------------------------------------------- */

mc_status_t mc_store_rd_create(mc_store_h s)
{
    struct mc_store_rd *rd;

    if (s->rd != NULL)
        return MC_OK;
    rd = calloc(1, sizeof(*rd));
    if (rd == NULL) {
        mc_set_error_detail("out of memory for the store state");
        return MC_INTERNAL_ERROR;
    }
    if ((mc_hmap_init(&rd->pool, 16) != 0) || (mc_hmap_init(&rd->gsess, 16) != 0) ||
        (mc_hmap_init(&rd->psess, 16) != 0)) {
        mc_hmap_cleanup(&rd->pool);
        mc_hmap_cleanup(&rd->gsess);
        mc_hmap_cleanup(&rd->psess);
        free(rd);
        mc_set_error_detail("out of memory for the store state");
        return MC_INTERNAL_ERROR;
    }
    {
        size_t entries;
        mc_status_t st = mc_loc_cache_config(&entries);
        if ((st == MC_OK) && (entries > 0))
            st = mc_loc_cache_create(entries, &rd->loc);
        if (st != MC_OK) {
            mc_error("%s", mc_last_error_detail());
            mc_loc_cache_destroy(rd->loc);
            mc_hmap_cleanup(&rd->pool);
            mc_hmap_cleanup(&rd->gsess);
            mc_hmap_cleanup(&rd->psess);
            free(rd);
            return st;
        }
    }
    pthread_mutex_init(&rd->reg_lock, NULL);
    pthread_mutex_init(&rd->pool_lock, NULL);
    pthread_mutex_init(&rd->sess_lock, NULL);
    pthread_cond_init(&rd->sess_cond, NULL);
    s->rd = rd;
    return MC_OK;
}

void mc_store_rd_destroy(mc_store_h s)
{
    struct mc_store_rd *rd = s->rd;

    if (rd == NULL)
        return;
    mc_store_pool_release(s);
    mc_store_regions_release(s);
    mc_hmap_cleanup(&rd->pool);
    mc_hmap_cleanup(&rd->gsess);
    mc_hmap_cleanup(&rd->psess);
    mc_loc_cache_destroy(rd->loc);
    pthread_mutex_destroy(&rd->reg_lock);
    pthread_mutex_destroy(&rd->pool_lock);
    pthread_mutex_destroy(&rd->sess_lock);
    pthread_cond_destroy(&rd->sess_cond);
    free(rd);
    s->rd = NULL;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dummy backend's ops table (../ops.h): what mc_store_setup_dummy()
 * puts on a handle, and close takes off again.
 *
 * Each op forwards through its mc_dummy_ call (dummy_client.c,
 * dummy_calls.c), which holds `life` for reading and finds the handle
 * still a dummy.  A call that raced close finds it is not any more: the
 * op then hands the call to the embedded backend, which reports the
 * closed handle as any call on it (mc_store_enter).  The queries and
 * buffers of a dummy are whole copies fetched through the staging buffer;
 * read/ wraps them (mc_store_queries_from_copies).
 *
 * May call: dummy.h (this folder), ../read/read.h (the copies), the
 * embedded backend's table (../ops.h).
 */
#include <stdlib.h>

#include "common/log.h"
#include "store/dummy/dummy.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/write/write.h"

static const mc_store_ops_t *const emb = &mc_store_embedded_ops;

static void op_close(mc_store_h s, mc_status_t *st_p)
{
    (void)st_p; /* a dummy's close always succeeds */
    mc_dummy_close(s);
}

/* ---- writes ------------------------------------------------------------------- */

static mc_status_t op_write(mc_store_h s, int upsert, const char *key, const mc_iov_t *parts,
                            size_t n, const mc_replicate_config_t *cfg, unsigned flags)
{
    mc_status_t st;
    if (mc_dummy_write(s, key, parts, n, cfg, upsert, (flags & MC_WF_ZERO_COPY) != 0, &st))
        return st;
    return emb->write(s, upsert, key, parts, n, cfg, flags);
}

static mc_status_t op_write_batch(mc_store_h s, int upsert, const char *const *keys,
                                  const mc_store_write_src_t *src, size_t n,
                                  const mc_replicate_config_t *cfg, unsigned flags,
                                  mc_status_t *statuses)
{
    mc_status_t st;
    int done;

    if (src->one_per_key)
        done = mc_dummy_values_write(s, keys, src->values, n, cfg, upsert, statuses, &st);
    else
        done = mc_dummy_batch_write(s, keys, src->bufs, src->counts, n, cfg, upsert,
                                    (flags & MC_WF_ZERO_COPY) != 0, statuses, &st);
    if (done)
        return st;
    return emb->write_batch(s, upsert, keys, src, n, cfg, flags, statuses);
}

/* A dummy client has no commit batch (../write/commit.c): refused with the
 * reason, as before the ops table. */
static mc_status_t op_batch_put_parts_commit(mc_store_h s, const char *const *keys,
                                             const mc_iov_t *const *bufs, const size_t *counts,
                                             size_t n, const mc_replicate_config_t *cfg,
                                             mc_status_t *statuses)
{
    if (mc_store_is_dummy(s)) {
        mc_set_error_detail("a dummy client has no commit batch: put the payloads, then "
                            "the commit key");
        mc_store_fill_statuses(statuses, n, MC_NOT_SUPPORTED);
        return MC_NOT_SUPPORTED;
    }
    return emb->batch_put_parts_commit(s, keys, bufs, counts, n, cfg, statuses);
}

/* ---- removal ------------------------------------------------------------------ */

static mc_status_t op_remove(mc_store_h s, const char *key, int force)
{
    mc_status_t st;
    if (mc_dummy_remove(s, key, force, &st))
        return st;
    return emb->remove(s, key, force);
}

static mc_status_t op_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                   mc_status_t *statuses)
{
    mc_status_t st;
    if (mc_dummy_batch_remove(s, keys, n, force, statuses, &st))
        return st;
    return emb->batch_remove(s, keys, n, force, statuses);
}

static mc_status_t op_remove_by_regex(mc_store_h s, const char *regex, int force,
                                      int64_t *count_p)
{
    mc_status_t st;

    /* the real client runs it, after the same check of the pattern */
    if (mc_store_is_dummy(s) && ((st = mc_store_regex_check(regex)) != MC_OK))
        return st;
    if ((regex != NULL) && mc_dummy_remove_many(s, regex, force, count_p, &st))
        return st;
    return emb->remove_by_regex(s, regex, force, count_p);
}

static mc_status_t op_remove_all(mc_store_h s, int force, int64_t *count_p)
{
    mc_status_t st;
    if (mc_dummy_remove_many(s, NULL, force, count_p, &st))
        return st;
    return emb->remove_all(s, force, count_p);
}

static mc_status_t op_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                          const char *segment, mc_status_t *statuses)
{
    mc_status_t st;
    if (mc_dummy_batch_replica_clear(s, keys, n, segment, statuses, &st))
        return st;
    return emb->batch_replica_clear(s, keys, n, segment, statuses);
}

/* ---- reads -------------------------------------------------------------------- */

static mc_status_t op_get(mc_store_h s, const char *key, void *buf, size_t cap,
                          uint64_t *size_p)
{
    mc_status_t st;
    if (mc_dummy_get(s, key, buf, cap, size_p, &st))
        return st;
    return emb->get(s, key, buf, cap, size_p);
}

static mc_status_t op_get_size(mc_store_h s, const char *key, uint64_t *size_p)
{
    mc_status_t st;
    if (mc_dummy_get_size(s, key, size_p, &st))
        return st;
    return emb->get_size(s, key, size_p);
}

static int op_exist(mc_store_h s, const char *key)
{
    int r;
    if (mc_dummy_exist(s, key, &r))
        return r;
    return emb->exist(s, key);
}

static mc_status_t op_batch_exist(mc_store_h s, const char *const *keys, size_t n,
                                  int *results)
{
    mc_status_t st;
    if (mc_dummy_batch_exist(s, keys, n, results, &st))
        return st;
    return emb->batch_exist(s, keys, n, results);
}

/* Each object fetched whole through the staging buffer (GET_STAGED) and
 * kept behind its query; 0 when the handle left dummy mode meanwhile. */
static int fetch_queries(mc_store_h s, const char *const *keys, size_t n,
                         mc_store_query_h *queries, mc_status_t *statuses)
{
    void **mems;
    uint64_t *sizes;

    if (!mc_store_is_dummy(s) ||
        !mc_dummy_batch_fetch(s, keys, n, MC_STORE_QUERY_COPY_HDR, &mems, &sizes, statuses))
        return 0;
    mc_store_queries_from_copies(s, keys, n, mems, sizes, mc_dummy_replicas, queries, statuses);
    return 1;
}

static mc_status_t op_query(mc_store_h s, const char *key, mc_store_query_h *query_p,
                            int use_cache)
{
    mc_status_t st;
    if (fetch_queries(s, &key, 1, query_p, &st))
        return st;
    return emb->query(s, key, query_p, use_cache);
}

static mc_status_t op_batch_query(mc_store_h s, const char *const *keys, size_t n,
                                  mc_store_query_h *queries, mc_status_t *statuses,
                                  int use_cache)
{
    if (fetch_queries(s, keys, n, queries, statuses))
        return mc_store_first_error(statuses, n);
    return emb->batch_query(s, keys, n, queries, statuses, use_cache);
}

/* The same for buffer handles (the handle in front of each copy). */
static int fetch_buffers(mc_store_h s, const char *const *keys, size_t n,
                         mc_store_buffer_h *buffers, mc_status_t *statuses)
{
    void **mems;
    uint64_t *sizes;

    if (!mc_store_is_dummy(s) ||
        !mc_dummy_batch_fetch(s, keys, n, mc_store_buffer_copy_hdr(), &mems, &sizes, statuses))
        return 0;
    mc_store_buffers_from_copies(n, mems, sizes, buffers, statuses);
    return 1;
}

static mc_status_t op_get_buffer(mc_store_h s, const char *key, mc_store_buffer_h *buffer_p)
{
    mc_status_t st;
    if (fetch_buffers(s, &key, 1, buffer_p, &st))
        return st;
    return emb->get_buffer(s, key, buffer_p);
}

static mc_status_t op_batch_get_buffer(mc_store_h s, const char *const *keys, size_t n,
                                       mc_store_buffer_h *buffers, mc_status_t *statuses)
{
    if (fetch_buffers(s, keys, n, buffers, statuses))
        return mc_store_first_error(statuses, n);
    return emb->batch_get_buffer(s, keys, n, buffers, statuses);
}

static int64_t op_get_into(mc_store_h s, const char *key, void *buf, size_t cap)
{
    int64_t r;
    if (mc_dummy_get_into(s, key, buf, cap, &r))
        return r;
    return emb->get_into(s, key, buf, cap);
}

static mc_status_t op_batch_get_into(mc_store_h s, const char *const *keys,
                                     const mc_iov_t *const *bufs, const size_t *counts, size_t n,
                                     int64_t *results)
{
    mc_status_t st;
    if (mc_dummy_batch_get_into(s, keys, bufs, counts, n, results, &st))
        return st;
    return emb->batch_get_into(s, keys, bufs, counts, n, results);
}

static mc_status_t op_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n)
{
    mc_status_t st;
    if (mc_dummy_read_ranges(s, ranges, n, &st))
        return st;
    return emb->read_ranges(s, ranges, n);
}

/* ---- memory ------------------------------------------------------------------- */

static int op_mem_is_registered(mc_store_h s, const void *p, size_t len)
{
    int r;
    if (mc_dummy_mem_is_registered(s, p, len, &r))
        return r;
    return emb->mem_is_registered(s, p, len);
}

static mc_status_t op_register_buffer(mc_store_h s, void *addr, size_t len)
{
    mc_status_t st;
    if (mc_dummy_register_buffer(s, addr, len, &st))
        return st;
    return emb->register_buffer(s, addr, len);
}

static mc_status_t op_unregister_buffer(mc_store_h s, void *addr)
{
    mc_status_t st;
    if (mc_dummy_unregister_buffer(s, addr, &st))
        return st;
    return emb->unregister_buffer(s, addr);
}

static mc_status_t op_mem_pool_alloc(mc_store_h s, size_t size, void **ptr_p)
{
    mc_status_t st;
    if (mc_dummy_mem_pool_alloc(s, size, ptr_p, &st))
        return st;
    return emb->mem_pool_alloc(s, size, ptr_p);
}

static mc_status_t op_mem_pool_free(mc_store_h s, void *ptr)
{
    mc_status_t st;
    if (mc_dummy_mem_pool_free(s, ptr, &st))
        return st;
    return emb->mem_pool_free(s, ptr);
}

/* ---- segments: mounted by the real client for this dummy ----------------------- */

static mc_status_t op_mount_segment(mc_store_h s, const char *path, uint64_t size,
                                    uint64_t offset, const char *protocol, const char *location,
                                    mc_segment_id_t *id_out)
{
    mc_status_t st;
    if (mc_dummy_mount(s, path, size, offset, protocol, location, id_out, NULL, &st))
        return st;
    return emb->mount_segment(s, path, size, offset, protocol, location, id_out);
}

static mc_status_t op_allocate_and_mount(mc_store_h s, uint64_t size, const char *protocol,
                                         const char *location, mc_segment_id_t *id_out,
                                         uint64_t *allocated_p)
{
    mc_status_t st;
    if (mc_dummy_mount(s, NULL, size, 0, protocol, location, id_out, allocated_p, &st))
        return st;
    return emb->allocate_and_mount(s, size, protocol, location, id_out, allocated_p);
}

static mc_status_t op_unmount(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                              int want_allocated)
{
    mc_status_t st;
    if (mc_dummy_unmount(s, ids, n, grace_s, want_allocated, &st))
        return st;
    return emb->unmount(s, ids, n, grace_s, want_allocated);
}

/* ---- copy and move tasks ------------------------------------------------------- */

static mc_status_t op_copy_task(mc_store_h s, const char *key, const char *const *targets,
                                size_t n, mc_task_id_t *id_out)
{
    mc_status_t st;
    if (mc_dummy_create_task(s, MC_DUMMY_OP_COPY_TASK, key, targets, n, id_out, &st))
        return st;
    return emb->copy_task(s, key, targets, n, id_out);
}

static mc_status_t op_move_task(mc_store_h s, const char *key, const char *source,
                                const char *target, mc_task_id_t *id_out)
{
    const char *pair[2] = {source, target};
    mc_status_t st;

    if (mc_dummy_create_task(s, MC_DUMMY_OP_MOVE_TASK, key, pair, 2, id_out, &st))
        return st;
    return emb->move_task(s, key, source, target, id_out);
}

static mc_status_t op_query_task(mc_store_h s, const char *task_id, mc_store_task_info_t *out)
{
    mc_status_t st;
    if (mc_dummy_query_task(s, task_id, out, &st))
        return st;
    return emb->query_task(s, task_id, out);
}

/* ---- ranged sessions: held in the real client, per dummy ----------------------- */

static mc_status_t op_get_session_start(mc_store_h s, const char *const *keys, size_t n,
                                        mc_status_t *statuses)
{
    mc_status_t st;
    if (mc_dummy_session_keys(s, MC_DUMMY_OP_GET_SESSION_START, keys, n, statuses, &st))
        return st;
    return emb->get_session_start(s, keys, n, statuses);
}

static mc_status_t op_get_session_read(mc_store_h s, const char *const *keys,
                                       const mc_iov_t *const *bufs,
                                       const uint64_t *const *offsets, const size_t *counts,
                                       size_t n, int64_t *results)
{
    mc_status_t st;
    if (mc_dummy_session_io(s, MC_DUMMY_OP_GET_SESSION_READ, keys, bufs, offsets, counts, n,
                            results, &st))
        return st;
    return emb->get_session_read(s, keys, bufs, offsets, counts, n, results);
}

static mc_status_t op_get_session_end(mc_store_h s, const char *const *keys, size_t n)
{
    mc_status_t st;
    if (mc_dummy_session_keys(s, MC_DUMMY_OP_GET_SESSION_END, keys, n, NULL, &st))
        return st;
    return emb->get_session_end(s, keys, n);
}

static mc_status_t op_put_session_start(mc_store_h s, const char *const *keys,
                                        const uint64_t *sizes, size_t n,
                                        const mc_replicate_config_t *cfg, mc_status_t *statuses)
{
    mc_status_t st;
    if (mc_dummy_put_session_start(s, keys, sizes, n, cfg, statuses, &st))
        return st;
    return emb->put_session_start(s, keys, sizes, n, cfg, statuses);
}

static mc_status_t op_put_session_write(mc_store_h s, const char *const *keys,
                                        const mc_iov_t *const *bufs,
                                        const uint64_t *const *offsets, const size_t *counts,
                                        size_t n, int64_t *results)
{
    mc_status_t st;
    if (mc_dummy_session_io(s, MC_DUMMY_OP_PUT_SESSION_WRITE, keys, bufs, offsets, counts, n,
                            results, &st))
        return st;
    return emb->put_session_write(s, keys, bufs, offsets, counts, n, results);
}

static mc_status_t op_put_session_finish(mc_store_h s, int end, const char *const *keys,
                                         size_t n, mc_status_t *statuses)
{
    mc_status_t st;
    if (mc_dummy_session_keys(s, end ? MC_DUMMY_OP_PUT_SESSION_END : MC_DUMMY_OP_PUT_SESSION_REVOKE,
                              keys, n, statuses, &st))
        return st;
    return emb->put_session_finish(s, end, keys, n, statuses);
}

const mc_store_ops_t mc_store_dummy_ops = {
    .name                   = "dummy",
    .unsupported            = "not supported by a dummy client (mc_store_setup_dummy)",
    .close                  = op_close,
    .write                  = op_write,
    .write_batch            = op_write_batch,
    .batch_put_parts_commit = op_batch_put_parts_commit,
    .remove                 = op_remove,
    .batch_remove           = op_batch_remove,
    .remove_by_regex        = op_remove_by_regex,
    .remove_all             = op_remove_all,
    .batch_replica_clear    = op_batch_replica_clear,
    .get                    = op_get,
    .get_size               = op_get_size,
    .exist                  = op_exist,
    .batch_exist            = op_batch_exist,
    .query                  = op_query,
    .batch_query            = op_batch_query,
    .get_buffer             = op_get_buffer,
    .batch_get_buffer       = op_batch_get_buffer,
    .get_into               = op_get_into,
    .batch_get_into         = op_batch_get_into,
    .read_ranges            = op_read_ranges,
    .read_blocks            = mc_store_read_blocks_as_ranges,
    .mem_is_registered      = op_mem_is_registered,
    .register_buffer        = op_register_buffer,
    .unregister_buffer      = op_unregister_buffer,
    .mem_pool_alloc         = op_mem_pool_alloc,
    .mem_pool_free          = op_mem_pool_free,
    .mount_segment          = op_mount_segment,
    .allocate_and_mount     = op_allocate_and_mount,
    .unmount                = op_unmount,
    .copy_task              = op_copy_task,
    .move_task              = op_move_task,
    .query_task             = op_query_task,
    .get_session_start      = op_get_session_start,
    .get_session_read       = op_get_session_read,
    .get_session_end        = op_get_session_end,
    .put_session_start      = op_put_session_start,
    .put_session_write      = op_put_session_write,
    .put_session_finish     = op_put_session_finish,
};

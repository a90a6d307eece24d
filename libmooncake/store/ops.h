/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle's backend: one table of function pointers chosen at
 * setup, as SQLite picks a sqlite3_vfs at open and libcurl a Curl_handler
 * per URL scheme.
 *
 * Two backends: the embedded client (mc_store_embedded_ops, store.c: this
 * process owns its segments, engine and master connections; the mc_emb_
 * functions below, each in the file of its public call) and the dummy
 * client (mc_store_dummy_ops, dummy/: every call forwarded to a real
 * client over a unix socket).  A public call checks its arguments where
 * both backends share the check, then dispatches once:
 *
 *     return MC_STORE_DISPATCH(s, get, key, buf, cap, size_p);
 *
 * s->ops is written with `life` held for writing (setup_dummy sets the
 * dummy's table, close puts the embedded one back) and read without it, so
 * a call racing close may reach the dummy backend after the handle left
 * dummy mode: each dummy op then hands the call to the embedded one, which
 * reports the closed handle as it always did (mc_store_enter).
 *
 * Each op takes the public call's arguments, already checked as the
 * public call says; the embedded ops take `life` themselves.
 *
 * Owns: the backend ops table (mc_store_ops_t) and its dispatch macro.
 * May call: nothing (declarations; each backend's ops are in its files).
 */
#ifndef MC_STORE_OPS_H
#define MC_STORE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/store.h>

/* The sources of a batch write: one value per key (@p values: put_batch,
 * upsert_batch; one_per_key set), or a list of parts per key (@p bufs,
 * @p counts: the _parts and _from_multi calls). */
typedef struct mc_store_write_src {
    const mc_iov_t *values;
    const mc_iov_t *const *bufs;
    const size_t *counts;
    int one_per_key;
} mc_store_write_src_t;

typedef struct mc_store_ops {
    const char *name; /* "embedded", "dummy" */
    /* The detail of MC_NOT_SUPPORTED for a public call this backend does
     * not take (mc_store_enter on a handle that is not ready); NULL: every
     * call is the embedded client's. */
    const char *unsupported;

    /* close with `life` held for writing (no call in flight) */
    void (*close)(mc_store_h s, mc_status_t *st_p);

    /* ---- writes: @p flags are MC_WF_* (store_internal.h) ---- */
    mc_status_t (*write)(mc_store_h s, int upsert, const char *key, const mc_iov_t *parts,
                         size_t n, const mc_replicate_config_t *cfg, unsigned flags);
    mc_status_t (*write_batch)(mc_store_h s, int upsert, const char *const *keys,
                               const mc_store_write_src_t *src, size_t n,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses);
    /* mc_store_batch_put_parts_commit, its arguments checked (write/commit.c) */
    mc_status_t (*batch_put_parts_commit)(mc_store_h s, const char *const *keys,
                                          const mc_iov_t *const *bufs, const size_t *counts,
                                          size_t n, const mc_replicate_config_t *cfg,
                                          mc_status_t *statuses);

    /* ---- removal ---- */
    mc_status_t (*remove)(mc_store_h s, const char *key, int force);
    mc_status_t (*batch_remove)(mc_store_h s, const char *const *keys, size_t n, int force,
                                mc_status_t *statuses);
    mc_status_t (*remove_by_regex)(mc_store_h s, const char *regex, int force, int64_t *count_p);
    mc_status_t (*remove_all)(mc_store_h s, int force, int64_t *count_p);
    mc_status_t (*batch_replica_clear)(mc_store_h s, const char *const *keys, size_t n,
                                       const char *segment, mc_status_t *statuses);

    /* ---- reads ---- */
    mc_status_t (*get)(mc_store_h s, const char *key, void *buf, size_t cap, uint64_t *size_p);
    mc_status_t (*get_size)(mc_store_h s, const char *key, uint64_t *size_p);
    int (*exist)(mc_store_h s, const char *key);
    mc_status_t (*batch_exist)(mc_store_h s, const char *const *keys, size_t n, int *results);
    mc_status_t (*query)(mc_store_h s, const char *key, mc_store_query_h *query_p,
                         int use_cache);
    mc_status_t (*batch_query)(mc_store_h s, const char *const *keys, size_t n,
                               mc_store_query_h *queries, mc_status_t *statuses, int use_cache);
    mc_status_t (*get_buffer)(mc_store_h s, const char *key, mc_store_buffer_h *buffer_p);
    mc_status_t (*batch_get_buffer)(mc_store_h s, const char *const *keys, size_t n,
                                    mc_store_buffer_h *buffers, mc_status_t *statuses);
    int64_t (*get_into)(mc_store_h s, const char *key, void *buf, size_t cap);
    mc_status_t (*batch_get_into)(mc_store_h s, const char *const *keys,
                                  const mc_iov_t *const *bufs, const size_t *counts, size_t n,
                                  int64_t *results);
    mc_status_t (*read_ranges)(mc_store_h s, mc_store_range_t *ranges, size_t n);
    mc_status_t (*read_blocks)(mc_store_h s, mc_store_block_t *blocks, size_t n);

    /* ---- memory ---- */
    int (*mem_is_registered)(mc_store_h s, const void *p, size_t len);
    mc_status_t (*register_buffer)(mc_store_h s, void *addr, size_t len);
    mc_status_t (*unregister_buffer)(mc_store_h s, void *addr);
    mc_status_t (*mem_pool_alloc)(mc_store_h s, size_t size, void **ptr_p);
    mc_status_t (*mem_pool_free)(mc_store_h s, void *ptr);

    /* ---- segments ---- */
    mc_status_t (*mount_segment)(mc_store_h s, const char *path, uint64_t size, uint64_t offset,
                                 const char *protocol, const char *location,
                                 mc_segment_id_t *id_out);
    mc_status_t (*allocate_and_mount)(mc_store_h s, uint64_t size, const char *protocol,
                                      const char *location, mc_segment_id_t *id_out,
                                      uint64_t *allocated_p);
    mc_status_t (*unmount)(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                           int want_allocated);

    /* ---- copy and move tasks ---- */
    mc_status_t (*copy_task)(mc_store_h s, const char *key, const char *const *targets,
                             size_t n, mc_task_id_t *id_out);
    mc_status_t (*move_task)(mc_store_h s, const char *key, const char *source,
                             const char *target, mc_task_id_t *id_out);
    mc_status_t (*query_task)(mc_store_h s, const char *task_id, mc_store_task_info_t *out);

    /* ---- ranged sessions ---- */
    mc_status_t (*get_session_start)(mc_store_h s, const char *const *keys, size_t n,
                                     mc_status_t *statuses);
    mc_status_t (*get_session_read)(mc_store_h s, const char *const *keys,
                                    const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                                    const size_t *counts, size_t n, int64_t *results);
    mc_status_t (*get_session_end)(mc_store_h s, const char *const *keys, size_t n);
    mc_status_t (*put_session_start)(mc_store_h s, const char *const *keys,
                                     const uint64_t *sizes, size_t n,
                                     const mc_replicate_config_t *cfg, mc_status_t *statuses);
    mc_status_t (*put_session_write)(mc_store_h s, const char *const *keys,
                                     const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                                     const size_t *counts, size_t n, int64_t *results);
    /* end (@p end 1) or revoke (0) */
    mc_status_t (*put_session_finish)(mc_store_h s, int end, const char *const *keys, size_t n,
                                      mc_status_t *statuses);
} mc_store_ops_t;

extern const mc_store_ops_t mc_store_embedded_ops;
extern const mc_store_ops_t mc_store_dummy_ops;

/* The embedded backend's ops, each in the file of its public call
 * (store.c, write/, read/, segments/, sessions/, threads/tasks.c). */
void mc_emb_close(mc_store_h s, mc_status_t *st_p);
mc_status_t mc_emb_write(mc_store_h s, int upsert, const char *key, const mc_iov_t *parts, size_t n,
                         const mc_replicate_config_t *cfg, unsigned flags);
mc_status_t mc_emb_write_batch(mc_store_h s, int upsert, const char *const *keys,
                               const mc_store_write_src_t *src, size_t n,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses);
mc_status_t mc_emb_batch_put_parts_commit(mc_store_h s, const char *const *keys,
                                          const mc_iov_t *const *bufs, const size_t *counts,
                                          size_t n, const mc_replicate_config_t *cfg,
                                          mc_status_t *statuses);
mc_status_t mc_emb_remove(mc_store_h s, const char *key, int force);
mc_status_t mc_emb_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                mc_status_t *statuses);
mc_status_t mc_emb_remove_by_regex(mc_store_h s, const char *regex, int force, int64_t *count_p);
mc_status_t mc_emb_remove_all(mc_store_h s, int force, int64_t *count_p);
mc_status_t mc_emb_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                       const char *segment, mc_status_t *statuses);
mc_status_t mc_emb_get(mc_store_h s, const char *key, void *buf, size_t cap, uint64_t *size_p);
mc_status_t mc_emb_get_size(mc_store_h s, const char *key, uint64_t *size_p);
int mc_emb_exist(mc_store_h s, const char *key);
mc_status_t mc_emb_batch_exist(mc_store_h s, const char *const *keys, size_t n, int *results);
mc_status_t mc_emb_query(mc_store_h s, const char *key, mc_store_query_h *query_p, int use_cache);
mc_status_t mc_emb_batch_query(mc_store_h s, const char *const *keys, size_t n,
                               mc_store_query_h *queries, mc_status_t *statuses, int use_cache);
mc_status_t mc_emb_get_buffer(mc_store_h s, const char *key, mc_store_buffer_h *buffer_p);
mc_status_t mc_emb_batch_get_buffer(mc_store_h s, const char *const *keys, size_t n,
                                    mc_store_buffer_h *buffers, mc_status_t *statuses);
int64_t mc_emb_get_into(mc_store_h s, const char *key, void *buf, size_t cap);
mc_status_t mc_emb_batch_get_into(mc_store_h s, const char *const *keys,
                                  const mc_iov_t *const *bufs, const size_t *counts, size_t n,
                                  int64_t *results);
mc_status_t mc_emb_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n);
mc_status_t mc_emb_read_blocks(mc_store_h s, mc_store_block_t *blocks, size_t n);
/* mc_store_read_blocks as the blocks' rows through mc_store_read_ranges
 * (a store whose read_ranges is its own) */
mc_status_t mc_store_read_blocks_as_ranges(mc_store_h s, mc_store_block_t *blocks, size_t n);
int mc_emb_mem_is_registered(mc_store_h s, const void *p, size_t len);
mc_status_t mc_emb_register_buffer(mc_store_h s, void *addr, size_t len);
mc_status_t mc_emb_unregister_buffer(mc_store_h s, void *addr);
mc_status_t mc_emb_mem_pool_alloc(mc_store_h s, size_t size, void **ptr_p);
mc_status_t mc_emb_mem_pool_free(mc_store_h s, void *ptr);
mc_status_t mc_emb_mount_segment(mc_store_h s, const char *path, uint64_t size, uint64_t offset,
                                 const char *protocol, const char *location,
                                 mc_segment_id_t *id_out);
mc_status_t mc_emb_allocate_and_mount(mc_store_h s, uint64_t size, const char *protocol,
                                      const char *location, mc_segment_id_t *id_out,
                                      uint64_t *allocated_p);
mc_status_t mc_emb_unmount(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                           int want_allocated);
mc_status_t mc_emb_copy_task(mc_store_h s, const char *key, const char *const *targets, size_t n,
                             mc_task_id_t *id_out);
mc_status_t mc_emb_move_task(mc_store_h s, const char *key, const char *source, const char *target,
                             mc_task_id_t *id_out);
mc_status_t mc_emb_query_task(mc_store_h s, const char *task_id, mc_store_task_info_t *out);
mc_status_t mc_emb_get_session_start(mc_store_h s, const char *const *keys, size_t n,
                                     mc_status_t *statuses);
mc_status_t mc_emb_get_session_read(mc_store_h s, const char *const *keys,
                                    const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                                    const size_t *counts, size_t n, int64_t *results);
mc_status_t mc_emb_get_session_end(mc_store_h s, const char *const *keys, size_t n);
mc_status_t mc_emb_put_session_start(mc_store_h s, const char *const *keys, const uint64_t *sizes,
                                     size_t n, const mc_replicate_config_t *cfg,
                                     mc_status_t *statuses);
mc_status_t mc_emb_put_session_write(mc_store_h s, const char *const *keys,
                                     const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                                     const size_t *counts, size_t n, int64_t *results);
mc_status_t mc_emb_put_session_finish(mc_store_h s, int end, const char *const *keys, size_t n,
                                      mc_status_t *statuses);

#endif /* MC_STORE_OPS_H */

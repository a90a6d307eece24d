/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dummy/: the door of the dummy client, a backend of the store handle
 * (../ops.h), and of its server in the real client.  Other folders include
 * this header and no other file of dummy/ (the real client's
 * mooncake_client uses the public API: mc_store_dummy_server_start).
 *
 * Owns: the dummy side (dummy_client.c: the connection, setup and close,
 * staging, registered memory; dummy_io.c: writes, reads, copies;
 * dummy_calls.c: removal, tasks, mounts, sessions; dummy_ops.c: the ops
 * table), the real client's side (dummy_server.c, and the pure request
 * decoding of dummy_decode.c), the wire (wire.h, docs/protocol.md §8) and
 * the host-memory allocator whose blocks a dummy shares (hostmem.c).
 *
 * May call: ../store_internal.h (calls.c, the embedded ops table),
 * ../read/read.h (a dummy's copies), ../segments/segments.h,
 * ../threads/threads.h (workers), and in dummy_server.c the public API of
 * the real handle.  Called by: nothing but through the public API and the
 * ops table.
 *
 * Each mc_dummy_ forwarder below returns 0 and touches nothing when @p s
 * is not a dummy handle (the ops table then hands the call to the embedded
 * backend); otherwise it does the call through the real client, writes
 * the result, and returns 1.
 */
#ifndef MC_STORE_DUMMY_H
#define MC_STORE_DUMMY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <mooncake/store.h>

#include "store/dummy/wire.h"

typedef struct mc_dummy mc_dummy_t;

/* mc_store_close with `life` held for writing. */
void mc_dummy_close(mc_store_h s);

int mc_dummy_write(mc_store_h s, const char *key, const mc_iov_t *parts, size_t n,
                   const mc_replicate_config_t *cfg, int upsert, int zero_copy,
                   mc_status_t *st_p);
/* @p zero_copy: every buffer must lie in the shared memory (put_from);
 * else a key with a buffer outside it is staged (put_parts, put_batch). */
int mc_dummy_batch_write(mc_store_h s, const char *const *keys, const mc_iov_t *const *bufs,
                         const size_t *counts, size_t n, const mc_replicate_config_t *cfg,
                         int upsert, int zero_copy, mc_status_t *statuses, mc_status_t *st_p);
/* mc_store_put_batch / upsert_batch: one value per key, staged. */
int mc_dummy_values_write(mc_store_h s, const char *const *keys, const mc_iov_t *values,
                          size_t n, const mc_replicate_config_t *cfg, int upsert,
                          mc_status_t *statuses, mc_status_t *st_p);
int mc_dummy_get(mc_store_h s, const char *key, void *buf, size_t cap, uint64_t *size_p,
                 mc_status_t *st_p);
int mc_dummy_get_into(mc_store_h s, const char *key, void *buf, size_t cap, int64_t *result_p);
int mc_dummy_batch_get_into(mc_store_h s, const char *const *keys, const mc_iov_t *const *bufs,
                            const size_t *counts, size_t n, int64_t *results, mc_status_t *st_p);
int mc_dummy_exist(mc_store_h s, const char *key, int *result_p);
int mc_dummy_get_size(mc_store_h s, const char *key, uint64_t *size_p, mc_status_t *st_p);
int mc_dummy_remove(mc_store_h s, const char *key, int force, mc_status_t *st_p);
/*
 * register_buffer of a dummy (docs/protocol.md §8, "Host memory"): the
 * exact range of one alloc_from_mem_pool block (nothing to send), or of one
 * mc_host_mem_alloc() block (REGISTER: its memfd goes to the real client);
 * anything else is MC_INVALID_PARAMS with a WARN line saying why.  @p len 0
 * is unregister_buffer (mc_store_unregister_buffer calls it so).
 */
int mc_dummy_register_buffer(mc_store_h s, const void *addr, size_t len, mc_status_t *st_p);
/* unregister_buffer of a dummy: @p addr must be the base of a registered
 * host-memory block (UNREGISTER) or of a pool block (nothing to send). */
int mc_dummy_unregister_buffer(mc_store_h s, const void *addr, mc_status_t *st_p);
int mc_dummy_mem_pool_alloc(mc_store_h s, size_t size, void **ptr_p, mc_status_t *st_p);
int mc_dummy_mem_pool_free(mc_store_h s, void *ptr, mc_status_t *st_p);
int mc_dummy_mem_is_registered(mc_store_h s, const void *p, size_t len, int *result_p);
/*
 * Copies of whole objects (queries, get_buffer): (*mems_p)[i] =
 * malloc(header + size) with the object's bytes at + header, (*sizes_p)[i],
 * statuses[i]; through staging blocks, GET_STAGED and FREE.  The caller
 * frees both arrays and every block not NULL.  Out of memory for the
 * arrays: both NULL and every status MC_INTERNAL_ERROR.  0 (nothing
 * allocated) when @p s is not a dummy, or was closed meanwhile.
 */
int mc_dummy_batch_fetch(mc_store_h s, const char *const *keys, size_t n, size_t header,
                         void ***mems_p, uint64_t **sizes_p, mc_status_t *statuses);
/* mc_store_read_ranges: each distinct key fetched once, then sliced into
 * destinations that must lie in the shared memory. */
int mc_dummy_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n, mc_status_t *st_p);

int mc_dummy_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                          mc_status_t *statuses, mc_status_t *st_p);
int mc_dummy_batch_exist(mc_store_h s, const char *const *keys, size_t n, int *results,
                         mc_status_t *st_p);
int mc_dummy_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                 const char *segment, mc_status_t *statuses, mc_status_t *st_p);
/* remove_by_regex (@p regex), or remove_all (@p regex NULL). */
int mc_dummy_remove_many(mc_store_h s, const char *regex, int force, int64_t *count_p,
                         mc_status_t *st_p);
/* @p op MC_DUMMY_OP_COPY_TASK (targets[0..n)) or MC_DUMMY_OP_MOVE_TASK
 * (n == 2: source, target). */
int mc_dummy_create_task(mc_store_h s, unsigned op, const char *key, const char *const *targets,
                         size_t n, mc_task_id_t *id_out, mc_status_t *st_p);
int mc_dummy_query_task(mc_store_h s, const char *task_id, mc_store_task_info_t *out,
                        mc_status_t *st_p);
/* The replica descriptors of @p key from the real client (the caller frees
 * *descs_p); a status.  Only for a dummy handle. */
mc_status_t mc_dummy_replicas(mc_store_h s, const char *key, mc_replica_desc_t **descs_p,
                              size_t *n_p);

/* @p path NULL: allocate_and_mount_segment (*allocated_p); else
 * mount_segment of that file, opened here and passed to the real client. */
int mc_dummy_mount(mc_store_h s, const char *path, uint64_t size, uint64_t offset,
                   const char *protocol, const char *location, mc_segment_id_t *id_out,
                   uint64_t *allocated_p, mc_status_t *st_p);
int mc_dummy_unmount(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                     int and_free, mc_status_t *st_p);

/* The ranged sessions.  mc_dummy_session_keys: @p op GET_SESSION_START,
 * GET_SESSION_END, PUT_SESSION_END or PUT_SESSION_REVOKE (statuses may be
 * NULL); mc_dummy_session_io: GET_SESSION_READ or PUT_SESSION_WRITE. */
int mc_dummy_session_keys(mc_store_h s, unsigned op, const char *const *keys, size_t n,
                          mc_status_t *statuses, mc_status_t *st_p);
/* One frame of per-key @p op (flags0 on item 0): statuses[i] (may be NULL)
 * the keys' answers, *st_p the call's failure or the first key's error
 * (get_session_end: the call's status only). */
int mc_dummy_keys_call(mc_store_h s, unsigned op, unsigned flags0, const char *const *keys,
                       size_t n, mc_status_t *statuses, mc_status_t *st_p);
int mc_dummy_put_session_start(mc_store_h s, const char *const *keys, const uint64_t *sizes,
                               size_t n, const mc_replicate_config_t *cfg, mc_status_t *statuses,
                               mc_status_t *st_p);
int mc_dummy_session_io(mc_store_h s, unsigned op, const char *const *keys,
                        const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                        const size_t *counts, size_t n, int64_t *results, mc_status_t *st_p);

/* "@name" is in the abstract namespace; 0, or -1 when the path does not fit. */
int mc_dummy_ipc_addr(const char *path, struct sockaddr_un *sa, socklen_t *len_p);
int mc_dummy_send_all(int fd, const void *buf, size_t len);
int mc_dummy_recv_all(int fd, void *buf, size_t len);
/* Both buffers, in one system call when the socket takes them at once. */
int mc_dummy_send2(int fd, const void *a, size_t alen, const void *b, size_t blen);
/* The busy-poll window (mc_spin_readable) before a blocking read of a
 * dummy answer or request: MC_DUMMY_SPIN_US or the default. */
unsigned mc_dummy_spin_us(void);

/* ---- request decoding (dummy_decode.c; fuzzed by tests/fuzz/fuzz_dummy.c) ---- */

/* Longest key a request may carry. */
#define MC_DUMMY_MAX_KEY 4096u

/* A request body split into its parts (docs/protocol.md §8). */
typedef struct mc_dummy_req {
    mc_dummy_item_t *items; /* n items (+1 zeroed spare) */
    char **keys;            /* NUL-terminated copies of the keys, NULL for klen 0 */
    char **groups;          /* PUT: copies of the group ids, NULL for glen 0 */
    size_t n;               /* = hdr.count */
    mc_dummy_cfg_t cfg;     /* PUT only */
    char *preferred;        /* PUT: cfg's preferred segment, NULL for plen 0 */
    int has_cfg;
} mc_dummy_req_t;

/* 1 for the ops whose request carries a config (PUT, PUT_SESSION_START). */
static inline int mc_dummy_op_has_cfg(unsigned op)
{
    return (op == MC_DUMMY_OP_PUT) || (op == MC_DUMMY_OP_PUT_SESSION_START);
}

/* 0 if a request header may be followed by its body: magic, op (not
 * HELLO), len and count within the limits, NOREPLY only on FREE; else -1. */
int mc_dummy_hdr_check(const mc_dummy_hdr_t *h);
/*
 * Split @p body (exactly @p len bytes, the header's len) into h->count
 * items with their keys and, for PUT, their group ids, the config and its
 * preferred segment (each string at most MC_DUMMY_MAX_KEY bytes, no NUL).  0 with @p rq filled
 * (release it with mc_dummy_req_cleanup); -1 for a malformed body (an item
 * or key that overruns it, a key over MC_DUMMY_MAX_KEY or with a NUL,
 * trailing bytes) or no memory, with @p rq zeroed and nothing allocated.
 */
int mc_dummy_req_parse(const mc_dummy_hdr_t *h, const void *body, size_t len, mc_dummy_req_t *rq);
/* Frees what parse allocated and zeroes @p rq; accepts NULL and a zeroed one. */
void mc_dummy_req_cleanup(mc_dummy_req_t *rq);
/* 0 if the item's (region, off, len) lies inside one of a session's
 * @p nregions regions, region r being size[r] bytes (region < nregions,
 * off + len <= size[region], no wrap); else -1.  A slot with no region has
 * size 0 (only an empty range at 0 passes: the server also needs a base). */
int mc_dummy_range_check(const uint64_t *size, unsigned nregions, const mc_dummy_item_t *it);

/* ---- host memory (hostmem.c): what a dummy registers with its real client ---- */

/* One live mc_host_mem_alloc() block: one sealed memfd mapped MAP_SHARED. */
typedef struct mc_host_mem_info {
    void *base;      /* what mc_host_mem_alloc() returned */
    size_t size;     /* the size it registers as: the size asked for, rounded
                      * up to the huge page size for huge-page memory */
    size_t map_len;  /* bytes of the memfd and of the mapping (>= size) */
    size_t hugepage; /* 0, or the huge page size it was allocated with */
    uint64_t serial; /* unique per allocation in this process, never 0 */
    int fd;          /* with want_fd: a CLOEXEC duplicate of its memfd, the
                      * caller's to close; else -1 */
} mc_host_mem_info_t;

/*
 * The allocation holding byte @p addr, the first of [addr, addr + len): the
 * caller compares the rest, so that it can tell memory that is not host
 * memory at all from a range that is not exactly one allocation.  1 with
 * *info filled; 0 when no live allocation holds @p addr; -1 (detail set)
 * when @p want_fd and the descriptor could not be duplicated.  Any thread.
 */
int mc_host_mem_find(const void *addr, size_t len, int want_fd, mc_host_mem_info_t *info);

/* @p size rounded up to @p hugepage (0: no rounding; a power of two), as
 * register_buffer rounds a size of huge-page memory; @p size when the
 * rounding would wrap. */
size_t mc_host_mem_round(size_t size, size_t hugepage);

/*
 * dummy_client.c: called by mc_host_mem_free() once the block left the
 * registry and before it is unmapped.  Every live dummy that registered it
 * unregisters it with its real client, so that a later allocation at the
 * same address is never taken for it.
 */
void mc_dummy_host_mem_freed(const void *base, uint64_t serial);

#endif /* MC_STORE_DUMMY_H */

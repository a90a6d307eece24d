/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file store.h
 * @brief The store client: put/get/exist/remove against a mooncake_master.
 *
 * A store handle owns a transfer engine, a global segment of
 * global_segment_size bytes mounted on the master (this process's
 * contribution to the pool) and a registered local buffer.  Every function
 * is thread-safe: many threads may call one handle at once.  Calls made
 * before mc_store_setup() or after mc_store_close() return
 * MC_UNAVAILABLE_IN_CURRENT_STATUS and touch nothing, except
 * mc_store_close() itself, which then reports MC_OK (as upstream).
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/status.h>
#include <mooncake/config.h>
#include <mooncake/transfer.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque store client. @since 0.1 */
typedef struct mc_store *mc_store_h;

/** Opaque result of a lookup: object size and the replica chosen to read. @since 0.1 */
typedef struct mc_store_query *mc_store_query_h;

/** Which fields of mc_store_params_t are set. @since 0.1 */
enum mc_store_params_field {
    MC_STORE_PARAM_LOCAL_HOSTNAME      = 1u << 0,
    MC_STORE_PARAM_METADATA_SERVER     = 1u << 1,
    MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE = 1u << 2,
    MC_STORE_PARAM_LOCAL_BUFFER_SIZE   = 1u << 3,
    MC_STORE_PARAM_PROTOCOL            = 1u << 4,
    MC_STORE_PARAM_RDMA_DEVICES        = 1u << 5,
    MC_STORE_PARAM_MASTER_SERVER_ADDR  = 1u << 6,
    MC_STORE_PARAM_TENANT_ID           = 1u << 7,
    /** engine is set: borrow that transfer engine. @since 0.2 */
    MC_STORE_PARAM_ENGINE              = 1u << 8,
    /** rpc_timeout_ms is set. @since 0.2 */
    MC_STORE_PARAM_RPC_TIMEOUT_MS      = 1u << 9,
    /** client_http_port is set: run the client HTTP server. @since 0.2 */
    MC_STORE_PARAM_CLIENT_HTTP_PORT    = 1u << 10,
    /** auth_token_file is set. @since 0.2 */
    MC_STORE_PARAM_AUTH_TOKEN_FILE     = 1u << 11
};

/** Setup parameters; unset fields take the upstream defaults. @since 0.1 */
typedef struct mc_store_params {
    uint64_t field_mask;          /**< bits of enum mc_store_params_field */
    const char *local_hostname;   /**< "host" or "host:port" (required) */
    const char *metadata_server;  /**< "P2PHANDSHAKE" or "http://h:p/metadata" (required) */
    uint64_t global_segment_size; /**< bytes contributed to the pool (default 16 MiB) */
    uint64_t local_buffer_size;   /**< registered staging buffer (default 16 MiB) */
    const char *protocol;         /**< "tcp" (default) */
    const char *rdma_devices;     /**< "" for tcp */
    const char *master_server_addr; /**< "host:port" (default "127.0.0.1:50051") */
    const char *tenant_id;        /**< key namespace (default "default") */
    /**
     * An engine the store borrows instead of creating its own (with
     * MC_STORE_PARAM_ENGINE; @since 0.2).  The store registers its segment
     * and local buffer on it and serves on its port, so the engine's
     * segment name is the store's hostname; local_hostname, metadata_server,
     * protocol and rdma_devices are then not used for the engine (only
     * checked as usual).  Closing the store unregisters what it registered
     * and leaves the engine running; the caller keeps the engine alive
     * until the store is closed, and destroys it afterwards.
     */
    mc_te_h engine;
    /**
     * Longest wait, in milliseconds, for any one send or receive of a master
     * RPC of this store, setup's HELLO included (with
     * MC_STORE_PARAM_RPC_TIMEOUT_MS; @since 0.2): a master that accepts the
     * connection but never answers fails setup with MC_RPC_FAIL (later calls
     * with MC_RPC_TIMEOUT) after about this long instead of hanging.  0 waits
     * forever; above 3600000 is MC_INVALID_PARAMS.  Unset: the environment
     * variable MC_STORE_RPC_TIMEOUT_MS, else 5000.  The heartbeat and the
     * task executor cap it at their own shorter limits.
     */
    uint32_t rpc_timeout_ms;
    /**
     * Port of the client HTTP server (with MC_STORE_PARAM_CLIENT_HTTP_PORT;
     * @since 0.2; upstream's enable_client_http_server / client_http_port,
     * default 9300).  Setup then listens on 0.0.0.0:client_http_port on a
     * library thread of its own (it never calls back into the caller, so a
     * Python GIL is never taken) and serves GET /health, /metrics
     * (Prometheus text: this client's requests, failures, bytes and latency
     * histograms), /metrics/summary and /version, and POST /api/mount_shm,
     * /api/unmount_shm, /api/mount and /api/unmount (JSON bodies, as
     * upstream's REST service; docs/architecture.md "Client HTTP server").
     * A port that cannot be bound (in use, or privileged) fails setup with
     * MC_INVALID_PARAMS and a detail naming the port; 0 binds a port the
     * kernel picks.  Close stops the server before anything else.
     * Unset: no server.
     */
    uint16_t client_http_port;
    /**
     * Cluster authentication (with MC_STORE_PARAM_AUTH_TOKEN_FILE; @since
     * 0.2; docs/security.md): a secrets file ("SECRET" lines for the
     * cluster, "tenant NAME SECRET" for a tenant with its own).  Set, every
     * master connection proves the secret of tenant_id (its own when the
     * file has one, else the cluster's) in an HMAC challenge-response, and
     * the store's own transfer engine authenticates its data connections
     * and signs its metadata writes with the cluster secret.  Unset: the
     * environment variable MC_AUTH_TOKEN_FILE; empty or absent: off.  A file
     * that cannot be read or is malformed fails setup with
     * MC_INVALID_PARAMS; a master without authentication, or one with
     * another secret, fails it with MC_RPC_FAIL and a detail saying so.
     */
    const char *auth_token_file;
} mc_store_params_t;

/** One piece of a value written from several buffers. @since 0.1 */
typedef struct mc_iov {
    const void *base;
    size_t len;
} mc_iov_t;

/**
 * @brief Allocate an unconfigured store handle.
 * @see mc_store_destroy
 * @since 0.1
 */
MC_API mc_status_t mc_store_create(mc_store_h *store_p);

/**
 * @brief Close (if open) and free a handle.  Accepts NULL.
 * @since 0.1
 */
MC_API void mc_store_destroy(mc_store_h store);

/**
 * @brief Connect to the master, start the transfer engine and mount the
 *        global segment.
 * @return Error code as defined by @ref mc_status_t; INVALID_PARAMS for a
 *         bad argument or a handle that is already set up (close it
 *         first), RPC_FAIL when the master cannot be reached.
 * @see mc_store_close
 * @since 0.1
 */
MC_API mc_status_t mc_store_setup(mc_store_h store, const mc_store_params_t *params);

/**
 * @brief Unmount this client's segments (its objects disappear from the
 *        store), stop the engine and the heartbeat.  The handle can be set
 *        up again.
 * @return MC_OK, also for a handle that is not set up (never set up, or
 *         already closed: closing is idempotent, as upstream's close());
 *         otherwise the error of telling the master, after everything was
 *         released anyway; MC_INVALID_PARAMS for a NULL handle.
 * @since 0.1
 */
MC_API mc_status_t mc_store_close(mc_store_h store);

/**
 * @brief "host:port" of this client's transfer engine, "" before setup.
 * @since 0.1
 */
MC_API const char *mc_store_hostname(mc_store_h store);

/**
 * @brief Store @p len bytes under @p key.
 *
 * An existing key keeps its value and the call reports MC_OK (first writer
 * wins).  A zero-length value stores nothing and reports MC_OK.  As
 * upstream, MC_INVALID_PARAMS when cfg->prefer_alloc_in_same_node is set,
 * and, for a store set up with local_buffer_size 0, when @p data is not
 * memory registered with the engine (such writes need a staging buffer).
 * The same holds for mc_store_put_parts() and mc_store_put_batch().
 * @param [in] cfg  Replication configuration, NULL for the defaults.
 * @since 0.1
 */
MC_API mc_status_t mc_store_put(mc_store_h store, const char *key,
                                const void *data, size_t len,
                                const mc_replicate_config_t *cfg);

/**
 * @brief Store the concatenation of @p n parts under @p key.
 * @since 0.1
 */
MC_API mc_status_t mc_store_put_parts(mc_store_h store, const char *key,
                                      const mc_iov_t *parts, size_t n,
                                      const mc_replicate_config_t *cfg);

/**
 * @brief Store several objects; per-key results go to @p statuses.
 * @return MC_OK when every key succeeded, else the first error.
 * @since 0.1
 */
MC_API mc_status_t mc_store_put_batch(mc_store_h store, const char *const *keys,
                                      const mc_iov_t *values, size_t n,
                                      const mc_replicate_config_t *cfg,
                                      mc_status_t *statuses);

/**
 * @brief Look an object up (grants a read lease) and choose a replica.
 * @param [out] query_p  Result; release with mc_store_query_release().
 * @return MC_OK, MC_OBJECT_NOT_FOUND, ...
 * @since 0.1
 */
MC_API mc_status_t mc_store_query(mc_store_h store, const char *key,
                                  mc_store_query_h *query_p);

/**
 * @brief Look several objects up in one master round trip.
 * @param [out] queries   n entries; NULL where the lookup failed.
 * @param [out] statuses  n per-key statuses.
 * @since 0.1
 */
MC_API mc_status_t mc_store_batch_query(mc_store_h store, const char *const *keys,
                                        size_t n, mc_store_query_h *queries,
                                        mc_status_t *statuses);

/**
 * @brief mc_store_query for a read: answered without the master while this
 *        client holds a read lease on @p key from an earlier lookup.
 *
 * The location cache (docs/architecture.md, "Location cache") keeps each
 * lookup's answer until shortly before the lease it granted runs out; the
 * master keeps the object's buffers allocated that long whatever happens
 * to it.  So the query may describe the value as it was when the lease was
 * granted: another client's upsert or remove of @p key is seen at the
 * latest when that lease ends (this client's own writes and removals are
 * seen at once).  A read of such a query (mc_store_query_read,
 * mc_store_batch_query_read) that fails asks the master again, once; it
 * fails with MC_LEASE_EXPIRED if the object changed size meanwhile.  Use
 * mc_store_query for the current replica list.  With the cache off
 * (MC_STORE_LOCATION_CACHE=0) this is mc_store_query.
 * @since 0.2
 */
MC_API mc_status_t mc_store_query_cached(mc_store_h store, const char *key,
                                         mc_store_query_h *query_p);

/**
 * @brief mc_store_batch_query for reads, from the location cache where it
 *        can (see mc_store_query_cached); the other keys are looked up in
 *        one master round trip.
 * @since 0.2
 */
MC_API mc_status_t mc_store_batch_query_cached(mc_store_h store, const char *const *keys,
                                               size_t n, mc_store_query_h *queries,
                                               mc_status_t *statuses);

/** @brief Size in bytes of the object found by @p query. @since 0.1 */
MC_API uint64_t mc_store_query_size(mc_store_query_h query);

/**
 * @brief Read [offset, offset+len) of the object into @p buf.
 *
 * Bytes move straight from the owner's memory into @p buf.  Reports
 * MC_LEASE_EXPIRED (and the data must be discarded) when the read outlived
 * the lease granted by the lookup.
 * @since 0.1
 */
MC_API mc_status_t mc_store_query_read(mc_store_h store, mc_store_query_h query,
                                       uint64_t offset, void *buf, size_t len);

/**
 * @brief Read the whole objects of several queries concurrently.
 * @param [in]  bufs      n destinations, each at least the object's size.
 * @param [out] statuses  n per-query statuses.
 * @since 0.1
 */
MC_API mc_status_t mc_store_batch_query_read(mc_store_h store,
                                             mc_store_query_h const *queries,
                                             size_t n, void *const *bufs,
                                             mc_status_t *statuses);

/** @brief Free a query.  Accepts NULL. @since 0.1 */
MC_API void mc_store_query_release(mc_store_query_h query);

/**
 * @brief Copy the object into @p buf.
 *
 * The lookup comes from the location cache while this client holds a
 * lease on @p key (see mc_store_query_cached): another client's write of
 * @p key is seen at the latest when that lease ends.
 * @param [out] size_p  Object size (also written with MC_BUFFER_OVERFLOW
 *                      when @p cap is too small, in which case @p buf is
 *                      untouched -- unless this handle knew a size of
 *                      the object that fitted (mc_store_get_size_hint):
 *                      what it knew of was read into @p buf while the
 *                      master answered, and zeroed when the answer
 *                      refuted it).  On any failure the contents of
 *                      @p buf are unspecified.
 * @since 0.1
 */
MC_API mc_status_t mc_store_get(mc_store_h store, const char *key, void *buf,
                                size_t cap, uint64_t *size_p);

/**
 * @brief The size of @p key's object as this handle last saw it, without
 *        asking the master: on disk only (docs/tiers.md §4), put by this
 *        handle, or read under a lease it still holds.
 *
 * A hint, not an answer: the object may have changed or gone since, and
 * no lease is granted.  A caller that sizes the buffer of mc_store_get (or
 * mc_store_get_into) with it lets the read of the object's disk record,
 * or of the value this handle put (a speculative read,
 * docs/architecture.md), overlap the master's answer to the lookup and
 * land in that buffer; the bytes are kept only when that answer names the
 * record or replica read.  Hints are kept while the location cache is on
 * (MC_STORE_LOCATION_CACHE): disk hints at most ten minutes each, the
 * others as long as their cache entries.
 * @return MC_OK with *size_p written, MC_OBJECT_NOT_FOUND when no size is
 *         remembered, MC_INVALID_PARAMS for a bad key or a NULL @p size_p.
 * @since 0.2
 */
MC_API mc_status_t mc_store_get_size_hint(mc_store_h store, const char *key,
                                          uint64_t *size_p);

/**
 * @brief Advice for a buffer just allocated for a get to fill.
 *
 * A read into memory never touched before pays a page fault per 4 KiB
 * page; on a virtual machine that is several microseconds each, so filling
 * a fresh 16 MiB buffer can cost more than moving its bytes.  This asks the
 * kernel to back the 2 MiB-aligned part of [@p buf, @p buf + @p len) with
 * transparent huge pages (madvise(MADV_HUGEPAGE); where THP is off it does
 * nothing), so that part faults in 2 MiB at a time.  No byte changes.  For
 * memory the caller allocated for the value (the Python binding's bytes
 * objects of 2 MiB and more); not for long-lived or shared memory, whose
 * pages a huge page could outlive.  Accepts NULL.
 * @since 0.2
 */
MC_API void mc_store_prepare_buffer(void *buf, size_t len);

/**
 * @brief Existence check (grants a read lease when present).
 * @return 1 present, 0 absent, or a negative mc_status_t.
 * @since 0.1
 */
MC_API int mc_store_exist(mc_store_h store, const char *key);

/**
 * @brief Existence of several keys: @p results gets 1, 0 or a negative code.
 * @since 0.1
 */
MC_API mc_status_t mc_store_batch_exist(mc_store_h store, const char *const *keys,
                                        size_t n, int *results);

/**
 * @brief Size of an object (grants a read lease).
 * @since 0.1
 */
MC_API mc_status_t mc_store_get_size(mc_store_h store, const char *key,
                                     uint64_t *size_p);

/**
 * @brief Remove an object.
 * @param [in] force  Ignore read leases.
 * @return MC_OK, MC_OBJECT_NOT_FOUND, MC_OBJECT_HAS_LEASE, ...
 * @since 0.1
 */
MC_API mc_status_t mc_store_remove(mc_store_h store, const char *key, int force);

/**
 * @brief The transfer engine of a set-up store (NULL before setup).
 * @since 0.1
 */
MC_API mc_te_h mc_store_engine(mc_store_h store);

/* ======================================================================
 * The whole object API (zero copy, upsert, removal families, sessions).
 * "Registered" memory below means memory inside a region registered with
 * mc_store_register_buffer() or inside the store's own local buffer
 * (mc_store_mem_pool_alloc()); any other pointer is refused with
 * MC_INVALID_PARAMS before a byte moves.
 * ====================================================================== */

/** @brief Register [addr, addr+len) for zero-copy calls. @since 0.1 */
MC_API mc_status_t mc_store_register_buffer(mc_store_h store, void *addr, size_t len);

/** @brief Unregister the region starting at @p addr. @since 0.1 */
MC_API mc_status_t mc_store_unregister_buffer(mc_store_h store, void *addr);

/**
 * @brief Allocate @p size bytes from the store's registered local buffer.
 * @param [out] ptr_p  Address, written on success.
 * @return MC_NO_AVAILABLE_HANDLE when the local buffer is exhausted.
 * @see mc_store_mem_pool_free
 * @since 0.1
 */
MC_API mc_status_t mc_store_mem_pool_alloc(mc_store_h store, size_t size, void **ptr_p);

/** @brief Return an allocation of mc_store_mem_pool_alloc(). @since 0.1 */
MC_API mc_status_t mc_store_mem_pool_free(mc_store_h store, void *ptr);

/* ---- upsert family: insert, or replace the value of an existing key ---- */

/** @brief Upsert @p len bytes (same-size: in place; else reallocated). @since 0.1 */
MC_API mc_status_t mc_store_upsert(mc_store_h store, const char *key, const void *data,
                                   size_t len, const mc_replicate_config_t *cfg);

/** @brief Upsert the concatenation of @p n parts. @since 0.1 */
MC_API mc_status_t mc_store_upsert_parts(mc_store_h store, const char *key,
                                         const mc_iov_t *parts, size_t n,
                                         const mc_replicate_config_t *cfg);

/** @brief Upsert several objects; per-key statuses. @since 0.1 */
MC_API mc_status_t mc_store_upsert_batch(mc_store_h store, const char *const *keys,
                                         const mc_iov_t *values, size_t n,
                                         const mc_replicate_config_t *cfg,
                                         mc_status_t *statuses);

/* ---- zero-copy writes: the source memory must be registered ---------- */

/** @brief put() from registered memory. @since 0.1 */
MC_API mc_status_t mc_store_put_from(mc_store_h store, const char *key, const void *buf,
                                     size_t len, const mc_replicate_config_t *cfg);

/** @brief upsert() from registered memory. @since 0.1 */
MC_API mc_status_t mc_store_upsert_from(mc_store_h store, const char *key, const void *buf,
                                        size_t len, const mc_replicate_config_t *cfg);

/**
 * @brief Batch put from registered memory; object i is the concatenation of
 *        bufs[i][0..counts[i]).
 * @since 0.1
 */
MC_API mc_status_t mc_store_batch_put_from_multi(mc_store_h store, const char *const *keys,
                                                 const mc_iov_t *const *bufs,
                                                 const size_t *counts, size_t n,
                                                 const mc_replicate_config_t *cfg,
                                                 mc_status_t *statuses);

/** @brief Batch upsert from registered memory (layout as above). @since 0.1 */
MC_API mc_status_t mc_store_batch_upsert_from_multi(mc_store_h store, const char *const *keys,
                                                    const mc_iov_t *const *bufs,
                                                    const size_t *counts, size_t n,
                                                    const mc_replicate_config_t *cfg,
                                                    mc_status_t *statuses);

/**
 * @brief Batch put where object i is the concatenation of
 *        bufs[i][0..counts[i]) in any memory (as mc_store_put_parts(), one
 *        master round trip for the batch).
 *
 * Unlike mc_store_put() and the single-buffer batches, and like the
 * multi-buffer zero-copy calls, prefer_alloc_in_same_node is honoured.
 * @since 0.2
 */
MC_API mc_status_t mc_store_batch_put_parts(mc_store_h store, const char *const *keys,
                                            const mc_iov_t *const *bufs, const size_t *counts,
                                            size_t n, const mc_replicate_config_t *cfg,
                                            mc_status_t *statuses);

/** @brief Batch upsert, laid out as mc_store_batch_put_parts(). @since 0.2 */
MC_API mc_status_t mc_store_batch_upsert_parts(mc_store_h store, const char *const *keys,
                                               const mc_iov_t *const *bufs,
                                               const size_t *counts, size_t n,
                                               const mc_replicate_config_t *cfg,
                                               mc_status_t *statuses);

/**
 * @brief Batch put whose last key is the commit point: the payloads
 *        keys[0..n-1) and the commit key keys[n-1] are laid out and
 *        written as mc_store_batch_put_parts() writes them, and the commit
 *        key is published only once every payload is.
 *
 * Three master round trips where a batch put of the payloads followed by a
 * put of the commit key takes four (docs/protocol.md §5.6, §5.9): one
 * BATCH_PUT_START for all @p n keys, one transfer of every byte,
 * BATCH_PUT_END for the payloads, then PUT_END for the commit key -- or
 * PUT_REVOKE for it when a payload failed.  A reader that finds the commit
 * key therefore finds every payload complete (until something removes or
 * evicts them), which is what a manifest naming its payloads needs.  When
 * the commit key is not published, the payloads the call stored are
 * removed again (force): nothing of the call stays visible.
 *
 * Unlike mc_store_batch_put_parts(), a key that exists already is
 * MC_OBJECT_ALREADY_EXISTS, not MC_OK: every key of a commit must be new,
 * so what the commit key names is the call's own.  A payload whose
 * transfer fails gets the single-key second chance the batch puts give;
 * the commit key does not (its status is its own error then).  An empty
 * payload stores nothing and is MC_OK.
 *
 * @param statuses n entries, or NULL: per key.  statuses[n-1] is MC_OK
 *        exactly when the commit key was published; otherwise it is the
 *        first payload error (the commit was not attempted) or the commit
 *        key's own error, and payloads reported MC_OK were removed again.
 * @return MC_OK when committed; else the first error of @p statuses.
 *         MC_INVALID_PARAMS (nothing written): @p n is 0, keys or counts
 *         NULL, or a commit key that is not a valid key or whose value is
 *         empty.  MC_NOT_SUPPORTED (nothing written): a dummy client
 *         (mc_store_setup_dummy()) or @p cfg with DFS replicas; write the
 *         payloads with mc_store_batch_put_parts() and then the commit key
 *         with mc_store_put_parts() instead.
 * @since 0.2
 */
MC_API mc_status_t mc_store_batch_put_parts_commit(mc_store_h store, const char *const *keys,
                                                   const mc_iov_t *const *bufs,
                                                   const size_t *counts, size_t n,
                                                   const mc_replicate_config_t *cfg,
                                                   mc_status_t *statuses);

/**
 * @brief 1 when [p, p+len) lies inside one region the zero-copy calls
 *        accept (mc_store_register_buffer() or the local buffer), else 0
 *        (also before setup and after close).
 * @since 0.2
 */
MC_API int mc_store_mem_is_registered(mc_store_h store, const void *p, size_t len);

/* ---- zero-copy reads: the destination memory must be registered ------ */

/**
 * @brief Read object @p key into registered memory.
 * @return Bytes read (> 0 or 0 for an empty object) or a negative status:
 *         MC_OBJECT_NOT_FOUND, MC_INVALID_PARAMS (buffer too small or not
 *         registered), ...  The lookup may come from the location cache,
 *         as for mc_store_get.
 * @since 0.1
 */
MC_API int64_t mc_store_get_into(mc_store_h store, const char *key, void *buf, size_t cap);

/**
 * @brief Batch read into registered memory; object i is scattered over
 *        bufs[i][0..counts[i]) in order (one buffer per key is the plain
 *        batch_get_into).  results[i] = object size, or a negative status
 *        (MC_INVALID_PARAMS when the buffers hold less than the object).
 *        Keys this client holds a lease on are looked up in the location
 *        cache, the others in one master round trip (mc_store_get).
 * @since 0.1
 */
MC_API mc_status_t mc_store_batch_get_into_multi(mc_store_h store, const char *const *keys,
                                                 const mc_iov_t *const *bufs,
                                                 const size_t *counts, size_t n,
                                                 int64_t *results);

/** One fragment of a ranged read (get_into_ranges). @since 0.1 */
typedef struct mc_store_range {
    const char *key;     /**< source object */
    void *buffer;        /**< destination buffer start (registered) */
    uint64_t dst_offset; /**< where the fragment lands in @p buffer */
    uint64_t src_offset; /**< where it starts in the object */
    uint64_t length;     /**< bytes */
    int64_t result;      /**< out: bytes read, or a negative status */
} mc_store_range_t;

/**
 * @brief Read every fragment; each gets its own result.  Destination
 *        overflow is checked against the registered region that contains
 *        @p buffer, source overflow against the object size.  One master
 *        round trip for all distinct keys.  Counted in the client metrics
 *        as one batch get of @p n items (read bytes: the sum of the
 *        fragments read).
 *
 * A fragment's checks run in upstream's order, each failure its result:
 * the key's text (MC_INVALID_PARAMS), a NULL or unregistered @p buffer
 * (MC_INVALID_PARAMS, even when the key is missing; since 0.2), the
 * key's lookup (MC_OBJECT_NOT_FOUND, ...), the destination's room and
 * the source's end (MC_INVALID_PARAMS), then the read (MC_TRANSFER_FAIL,
 * MC_LEASE_EXPIRED, ...).
 * @since 0.1
 */
MC_API mc_status_t mc_store_read_ranges(mc_store_h store, mc_store_range_t *ranges, size_t n);

/**
 * One strided block of a ranged read: @p rows rows of @p row_len bytes,
 * row i read from [src_offset + i * src_stride, +row_len) of the object
 * into buffer + dst_offset + i * dst_stride (a block of rows of one stored
 * fragment landing in a block of rows of one destination).  One row is a
 * plain range (mc_store_range_t); with rows > 1 both strides are at least
 * row_len.  @since 0.2 (MOONCAKE_1.21)
 */
typedef struct mc_store_block {
    const char *key;     /**< source object */
    void *buffer;        /**< destination buffer start (registered) */
    uint64_t dst_offset; /**< where row 0 lands in @p buffer */
    uint64_t dst_stride; /**< from one row's destination to the next */
    uint64_t src_offset; /**< where row 0 starts in the object */
    uint64_t src_stride; /**< from one row's start in the object to the next */
    uint64_t row_len;    /**< bytes per row */
    uint64_t rows;       /**< rows in the block */
    int64_t result;      /**< out: bytes read (rows * row_len), or a negative status */
} mc_store_block_t;

/**
 * @brief mc_store_read_ranges of strided blocks: each block is read as its
 *        rows would be as ranges, with one result per block.  The checks
 *        and their order are mc_store_read_ranges', on the block's span:
 *        its first row's start to its last row's end inside the
 *        registered region that holds @p buffer and inside the object
 *        (MC_INVALID_PARAMS; so are strides shorter than a row and spans
 *        that overflow).  A key's blocks are read from one version of it
 *        or all fail.  Towards a holder that serves strided gathered
 *        reads (docs/transfer.md §3.3) a block costs one entry on the wire
 *        whatever its rows, and the blocks that fill one destination row
 *        side by side are read interleaved; otherwise its rows are read
 *        as ranges.  Through a dummy client (mc_store_setup_dummy) the
 *        blocks go as their rows to mc_store_read_ranges: a block fails
 *        when one of its rows does, and its rows inside the object may
 *        have been written.  Counted in the client metrics as one batch
 *        get of @p n items.
 * @since 0.2 (MOONCAKE_1.21)
 */
MC_API mc_status_t mc_store_read_blocks(mc_store_h store, mc_store_block_t *blocks, size_t n);

/* ---- ranged sessions (layer-wise KV load/save) ------------------------ */

/** @brief Look keys up once and cache one complete replica + lease each. @since 0.1 */
MC_API mc_status_t mc_store_get_session_start(mc_store_h store, const char *const *keys,
                                              size_t n, mc_status_t *statuses);

/**
 * @brief Ranged reads for keys with an open get session (no master round
 *        trip): key i reads counts[i] ranges [src_offsets[i][j], +bufs[i][j].len)
 *        into bufs[i][j].base.  results[i] = bytes moved or negative.
 * @since 0.1
 */
MC_API mc_status_t mc_store_get_session_read(mc_store_h store, const char *const *keys,
                                             const mc_iov_t *const *bufs,
                                             const uint64_t *const *src_offsets,
                                             const size_t *counts, size_t n, int64_t *results);

/** @brief Drop the cached lookups of @p keys. @since 0.1 */
MC_API mc_status_t mc_store_get_session_end(mc_store_h store, const char *const *keys, size_t n);

/** @brief Reserve objects of the given sizes (BATCH_PUT_START) without writing. @since 0.1 */
MC_API mc_status_t mc_store_put_session_start(mc_store_h store, const char *const *keys,
                                              const uint64_t *sizes, size_t n,
                                              const mc_replicate_config_t *cfg,
                                              mc_status_t *statuses);

/** @brief Ranged writes into open put sessions (no master round trip). @since 0.1 */
MC_API mc_status_t mc_store_put_session_write(mc_store_h store, const char *const *keys,
                                              const mc_iov_t *const *bufs,
                                              const uint64_t *const *dst_offsets,
                                              const size_t *counts, size_t n, int64_t *results);

/** @brief Seal, wait for in-flight writes, then PUT_END. @since 0.1 */
MC_API mc_status_t mc_store_put_session_end(mc_store_h store, const char *const *keys, size_t n,
                                            mc_status_t *statuses);

/** @brief Seal, wait for in-flight writes, then PUT_REVOKE. @since 0.1 */
MC_API mc_status_t mc_store_put_session_revoke(mc_store_h store, const char *const *keys,
                                               size_t n, mc_status_t *statuses);

/* ---- buffers owned by the store -------------------------------------- */

/** Opaque handle of an object copied into the store's local buffer. @since 0.1 */
typedef struct mc_store_buffer *mc_store_buffer_h;

/**
 * @brief Read @p key into a fresh allocation of the local buffer.  The
 *        memory stays valid until mc_store_buffer_release(), even if the
 *        store is closed meanwhile.
 * @return MC_OBJECT_NOT_FOUND for a miss.
 * @since 0.1
 */
MC_API mc_status_t mc_store_get_buffer(mc_store_h store, const char *key,
                                       mc_store_buffer_h *buffer_p);

/** @brief Batch form; buffers[i] is NULL where statuses[i] != MC_OK. @since 0.1 */
MC_API mc_status_t mc_store_batch_get_buffer(mc_store_h store, const char *const *keys,
                                             size_t n, mc_store_buffer_h *buffers,
                                             mc_status_t *statuses);

MC_API void *mc_store_buffer_data(mc_store_buffer_h buffer);     /**< @since 0.1 */
MC_API uint64_t mc_store_buffer_size(mc_store_buffer_h buffer);  /**< @since 0.1 */
MC_API void mc_store_buffer_release(mc_store_buffer_h buffer);   /**< NULL ok. @since 0.1 */

/* ---- removal family -------------------------------------------------- */

/** @brief Remove several keys; per-key statuses (-704, -706, ...). @since 0.1 */
MC_API mc_status_t mc_store_batch_remove(mc_store_h store, const char *const *keys,
                                         size_t n, int force, mc_status_t *statuses);

/**
 * @brief Remove every key of this tenant matching a POSIX extended regular
 *        expression.  @p count_p gets the number removed.
 * @return MC_INVALID_PARAMS for a pattern that does not compile.
 * @since 0.1
 */
MC_API mc_status_t mc_store_remove_by_regex(mc_store_h store, const char *regex, int force,
                                            int64_t *count_p);

/** @brief Remove every (unleased, unless @p force) key of this tenant. @since 0.1 */
MC_API mc_status_t mc_store_remove_all(mc_store_h store, int force, int64_t *count_p);

/**
 * @brief Clear objects this client wrote (upstream batch_replica_clear).
 *
 * A key of this tenant is cleared only when this client owns it (did its
 * PutStart, or the upsert that last replaced its value), no reader holds
 * a lease on it, it is complete, and no upsert or copy/move task is
 * working on it.  Then:
 *  - @p segment_name NULL or "": the whole object is erased;
 *  - otherwise its complete replicas on segments named @p segment_name
 *    are dropped, and the object is erased with its last replica; a key
 *    with no complete replica there is not cleared.
 * The space is free at once.  Pins do not protect an object from it (nor
 * from a remove).  Other keys are left as they are.
 *
 * @param keys          @p n keys; duplicates are handled in order (the
 *                      second finds the object gone).
 * @param segment_name  a transfer-engine segment name ("host:port"), or
 *                      NULL / "" for every segment.
 * @param statuses      @p n entries, or NULL: MC_OK where keys[i] was
 *                      cleared, else why not: MC_OBJECT_NOT_FOUND,
 *                      MC_ILLEGAL_CLIENT (another client's object),
 *                      MC_OBJECT_HAS_LEASE, MC_REPLICA_IS_NOT_READY
 *                      (incomplete, or being upserted),
 *                      MC_OBJECT_HAS_REPLICATION_TASK,
 *                      MC_REPLICA_NOT_FOUND (nothing complete on
 *                      @p segment_name), MC_INVALID_PARAMS (a NULL, empty
 *                      or over-long key).
 * @return MC_OK when the master answered, however many keys it cleared
 *         (unlike mc_store_batch_remove(), a key left alone is not an
 *         error of the call); otherwise the call's error (not set up,
 *         master unreachable, NULL @p keys, @p segment_name over 64 KiB),
 *         which every status gets as well.
 * @since 0.2
 */
MC_API mc_status_t mc_store_batch_replica_clear(mc_store_h store, const char *const *keys,
                                                size_t n, const char *segment_name,
                                                mc_status_t *statuses);

/* ---- replica descriptors ---------------------------------------------- */

/**
 * What kind of replica an mc_replica_desc_t describes (its @c is_memory
 * field), upstream's ReplicaType.  Values are only ever added.
 * @since 0.2
 */
typedef enum mc_replica_kind {
    /** A record in the shared-file-system (DFS) tier (docs/tiers.md §6;
     *  protocol "dfs"): upstream's DISK.  Before 0.2 SSD-tier records were
     *  reported with this value too. */
    MC_REPLICA_KIND_DISK       = 0,
    /** A buffer in a client's memory segment. */
    MC_REPLICA_KIND_MEMORY     = 1,
    /** A buffer in a NoF segment (mc_store_nof_mount()), described like
     *  memory and listed after memory. */
    MC_REPLICA_KIND_NOF        = 2,
    /** A record in a client's SSD-offload tier (mc_store_offload_start();
     *  protocol "file"): upstream's LOCAL_DISK. */
    MC_REPLICA_KIND_LOCAL_DISK = 3
} mc_replica_kind_t;

/** One replica as reported by the master. @since 0.1 */
typedef struct mc_replica_desc {
    mc_replica_status_t status; /**< COMPLETE for readable replicas */
    int is_memory;              /**< the kind, an mc_replica_kind_t (the
                                 *   name is historical): 1 memory, 2 NoF,
                                 *   3 SSD-offload record, 0 DFS record;
                                 *   for both disk kinds
                                 *   mc_store_query_disk_replica() gives
                                 *   the file */
    uint64_t addr;              /**< buffer address in the owner's segment;
                                 *   a disk replica's record offset */
    uint64_t size;              /**< bytes */
    char segment[256];          /**< transport endpoint "host:port" */
    char protocol[16];          /**< "tcp" */
} mc_replica_desc_t;

/** @brief Number of replicas a query found. @since 0.1 */
MC_API size_t mc_store_query_replica_count(mc_store_query_h query);

/** @brief Describe replica @p i of a query. @since 0.1 */
MC_API mc_status_t mc_store_query_replica(mc_store_query_h query, size_t i,
                                          mc_replica_desc_t *desc);

/**
 * @brief Where the disk replica of a query is (docs/tiers.md).
 *
 * A query lists memory replicas first (mc_store_query_replica() with
 * is_memory MC_REPLICA_KIND_MEMORY) and then at most one disk replica:
 * is_memory MC_REPLICA_KIND_LOCAL_DISK (0 before 0.2), addr the record's
 * offset in its bucket file, size the object's size, segment the holder's
 * segment name, protocol "file".  This call gives its file.  When the
 * object has no such replica but a DFS one this client can read
 * (docs/tiers.md §6), that is the disk replica: is_memory
 * MC_REPLICA_KIND_DISK, protocol "dfs", segment "", the path of its shard
 * file under MOONCAKE_DFS_ROOT_DIR (mc_store_query_dfs_replica() gives
 * the rest).
 *
 * @param query   a query of mc_store_query()/mc_store_batch_query().
 * @param path    receives the bucket file's absolute path, NUL-terminated.
 * @param cap     bytes at @p path.
 * @param offset_p receives the record's offset in the file (may be NULL).
 * @return MC_OK; MC_REPLICA_NOT_FOUND when the object has no disk replica;
 *         MC_BUFFER_OVERFLOW when the path needs more than @p cap bytes;
 *         MC_INVALID_PARAMS for NULL arguments.
 * @since 0.2
 */
MC_API mc_status_t mc_store_query_disk_replica(mc_store_query_h query, char *path, size_t cap,
                                               uint64_t *offset_p);

/**
 * @brief The DFS part of a query's disk replica (docs/tiers.md §6).
 *
 * When the object's disk replica is its record in the DFS tier
 * (protocol "dfs" in mc_store_query_replica(), segment ""), this gives
 * the shard it is in and the bytes reserved for it there (upstream's
 * DistributedFSDescriptor shard_idx and aligned_size);
 * mc_store_query_disk_replica() gives the shard file's path and the
 * record's offset.
 *
 * @param query          a query of mc_store_query()/mc_store_batch_query().
 * @param shard_idx_p    receives the shard index (may be NULL).
 * @param aligned_size_p receives the reserved bytes (may be NULL).
 * @return MC_OK; MC_REPLICA_NOT_FOUND when the query has no DFS replica
 *         (none, or an SSD-tier disk replica); MC_INVALID_PARAMS for a
 *         NULL query.
 * @since 0.2
 */
MC_API mc_status_t mc_store_query_dfs_replica(mc_store_query_h query, uint32_t *shard_idx_p,
                                              uint64_t *aligned_size_p);

/* ---- NoF segments (storage nodes) -------------------------------------- */

/**
 * @brief Serve @p size bytes of a file or block device as a NoF segment
 *        (upstream MountNoFSegment).
 *
 * The store's transfer engine registers the file as a file segment
 * (mc_te_file_reg(): peers reach bytes [0, size) of it and nothing else,
 * moved with pread/pwrite) and the master adds it to its NoF pool, apart
 * from memory: writes with nof_replica_num > 0 place that many replicas
 * in NoF segments, the writer writes them through its engine, readers
 * read them when no memory replica is left.  The segment's name is this
 * store's (mc_store_hostname()); it goes, with its replicas, when this
 * client closes or stops pinging, and is remounted after a master
 * restart.  A regular file shorter than @p size is extended (created
 * when missing).
 *
 * @param store a set-up store (a global segment is not needed).
 * @param path  absolute path of the file or block device, not mounted yet
 *              by this store.
 * @param size  bytes to serve (> 0).
 * @return MC_OK; MC_INVALID_PARAMS (relative path, zero size, a path that
 *         cannot be opened, a device too small, a path already mounted);
 *         the master's refusal; MC_UNAVAILABLE_IN_CURRENT_STATUS before
 *         setup; MC_NOT_SUPPORTED through a dummy client.
 * @since 0.2
 */
MC_API mc_status_t mc_store_nof_mount(mc_store_h store, const char *path, uint64_t size);

/**
 * @brief Stop serving the NoF segment mounted from @p path (upstream
 *        UnmountNoFSegment): the master drops its replicas (objects left
 *        without one are gone), then the file is closed.
 * @return MC_OK; MC_INVALID_PARAMS when @p path is not mounted by this
 *         store.
 * @since 0.2
 */
MC_API mc_status_t mc_store_nof_unmount(mc_store_h store, const char *path);

/* ---- SSD tier ---------------------------------------------------------- */

/**
 * @brief Turn on this client's SSD tier (upstream enable_ssd_offload).
 *
 * From now on every put or upsert this client seals is copied, in the
 * background, into bucket files under @p dir and reported to the master
 * as a disk replica (the master needs --enable_offload).  Eviction then
 * frees the memory of copied objects and keeps them readable from disk;
 * a get of a disk-only object reads the record straight from the file
 * when the reader can open it (same host or shared file system) and
 * checks its CRC32C.  The tier is bounded by the environment:
 * MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES (256 MiB per bucket),
 * MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT (500 records per bucket),
 * MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES (2 TiB in all; the oldest
 * buckets go first, and their disk replicas with them).  Stopped by
 * mc_store_close().
 *
 * @param store a set-up store with a global segment.
 * @param dir   an existing directory, absolute, without "..", used by no
 *              other client (a lock file there says so); bucket files a
 *              previous client left there are deleted.
 * @return MC_OK; MC_INVALID_PARAMS (bad or busy directory, no segment,
 *         already on); MC_UNAVAILABLE_IN_CURRENT_STATUS before setup.
 * @since 0.2
 */
MC_API mc_status_t mc_store_offload_start(mc_store_h store, const char *dir);

/**
 * @brief Turn the SSD tier off for good before the process goes away
 *        (upstream unmount_local_disk_segment; meant for a shutdown hook).
 *
 * The tier takes no more keys (those queued are counted as failed), the
 * offloader finishes the record in hand, and the master is told that every
 * record of the tier is gone (DISK_REPLICA_DROP, bucket by bucket): it
 * stops naming this client as a holder, so a reader gets a clean miss
 * instead of a peer that is about to disappear, and an object whose last
 * replica was here is erased.  Then the call holds @p grace_seconds while
 * the tier keeps serving the reads handed out before (a disk replica is
 * read by its holder's process, unlike a memory one); the hold ends early
 * when the store is closed.  The bucket files and the counters stay until
 * mc_store_close().  Calling it again holds again and sends nothing more;
 * a store without an SSD tier returns MC_OK at once.
 *
 * @param store         a set-up store.
 * @param grace_seconds how long to hold after the master dropped the
 *                      records (0: return at once).
 * @return MC_OK; the status of a DISK_REPLICA_DROP that failed (the master
 *         unreachable: MC_RPC_FAIL; a later call tries the drops again,
 *         and nothing is held); MC_UNAVAILABLE_IN_CURRENT_STATUS before
 *         setup; MC_NOT_SUPPORTED for a dummy client.
 * @since 0.2
 */
MC_API mc_status_t mc_store_offload_stop(mc_store_h store, uint64_t grace_seconds);

/** Counters of a client's SSD tier. @since 0.2 */
typedef struct mc_store_disk_stats {
    uint64_t offloaded_keys;   /**< records written and accepted by the master */
    uint64_t offloaded_bytes;  /**< their value bytes */
    uint64_t failed_keys;      /**< queued keys not offloaded (gone, changed, I/O error) */
    uint64_t dropped_keys;     /**< keys not queued: the queue was full */
    uint64_t evicted_buckets;  /**< bucket files deleted to stay in bounds */
    uint64_t evicted_keys;     /**< records in them */
    uint64_t evicted_bytes;    /**< bytes of them */
    uint64_t used_bytes;       /**< bytes in bucket files now */
    uint64_t queued;           /**< keys waiting for the offloader */
} mc_store_disk_stats_t;

/**
 * @brief The counters of the SSD tier.
 * @return MC_OK; MC_INVALID_PARAMS when the tier is off or @p stats NULL.
 * @since 0.2
 */
MC_API mc_status_t mc_store_offload_stats(mc_store_h store, mc_store_disk_stats_t *stats);

/* ---- host memory helpers ---------------------------------------------- */

/**
 * @brief Page-aligned host memory that a dummy client can share.
 *
 * Each call creates one memfd named "mooncake_shm" (close-on-exec), sizes it
 * to @p size rounded up to the page, seals it against shrinking and growing
 * and maps it MAP_SHARED | MAP_POPULATE.  A dummy client's
 * mc_store_register_buffer() of exactly (*ptr_p, @p size) hands the memfd
 * to its real client, which then reads and writes the pages in place.
 *
 * With MC_STORE_USE_HUGEPAGE set (any value) the pages are hugetlbfs pages
 * of MC_STORE_HUGEPAGE_SIZE ("2MB", the default, or "1GB"; another value is
 * warned about and taken as 2MB) and the block's size is @p size rounded up
 * to that page size.
 *
 * @return MC_OK with *ptr_p set; MC_INVALID_PARAMS for @p size 0 (detail
 *         "Failed to map shared memory: Invalid argument"), a size beyond the
 *         address space or @p ptr_p NULL; MC_NO_AVAILABLE_HANDLE when the
 *         kernel refuses, the detail starting "Failed to create anonymous
 *         shared memory", "Failed to set shared memory size" or "Failed to
 *         map shared memory" and, for huge pages, ending " (Check
 *         /proc/sys/vm/nr_hugepages?)".
 * @since 0.1 (a shareable memfd since 0.2)
 */
MC_API mc_status_t mc_host_mem_alloc(size_t size, void **ptr_p);

/**
 * @brief mc_host_mem_alloc() without committing the pages up front: each
 * page is allocated (zeroed) when first touched, here or through a
 * mapping of the block's memfd, as with malloc.
 *
 * For a large block used a little at a time (the transfer engine's
 * managed-buffer chunks: 2 GiB each, where committing every page took
 * seconds and the whole 2 GiB of memory).  The block is otherwise the same
 * as mc_host_mem_alloc()'s: a sealed, shareable memfd, in the same
 * registry, freed with mc_host_mem_free(); the same return codes.
 * @since 0.2 (MOONCAKE_1.25)
 */
MC_API mc_status_t mc_host_mem_alloc_lazy(size_t size, void **ptr_p);

/**
 * @brief Free memory of mc_host_mem_alloc() or mc_host_mem_alloc_lazy().
 *
 * Dummy clients that registered the block unregister it first.
 * @return MC_OK; MC_INVALID_PARAMS for any address that is not the start of
 *         a live block.
 * @since 0.1
 */
MC_API mc_status_t mc_host_mem_free(void *ptr);

/**
 * @brief mc_host_mem_alloc() in the shape of torch's pluggable allocator.
 *
 * `torch.cuda.memory.CUDAPluggableAllocator`-style callers pass (size,
 * device, stream); @p device and @p stream are ignored, so a caller may
 * pass @p size alone.  Memory from here is registrable by a dummy client
 * like any mc_host_mem_alloc() block (mooncake.store.get_alloc_func_addr()
 * is this function's address).
 * @return The block, or NULL (the failure is logged).
 * @since 0.2
 */
MC_API void *mc_host_mem_pluggable_alloc(size_t size, int device, void *stream);

/**
 * @brief mc_host_mem_free() in the shape of torch's pluggable allocator:
 *        (ptr, size, device, stream); only @p ptr is used.
 *
 * NULL is ignored; an address that is not a live block is logged and left
 * alone (mooncake.store.get_free_func_addr() is this function's address).
 * @since 0.2
 */
MC_API void mc_host_mem_pluggable_free(void *ptr, size_t size, int device, void *stream);

/**
 * @brief Bind the calling thread's CPUs and memory policy to NUMA @p node.
 * @return MC_NOT_SUPPORTED without libnuma or NUMA, MC_INVALID_PARAMS for a
 *         node that does not exist.
 * @since 0.1
 */
MC_API mc_status_t mc_numa_bind(int node);

/* ---- segment mounting ------------------------------------------------- */

/** A segment id: UUID text, NUL-terminated. @since 0.1 */
typedef struct mc_segment_id {
    char id[37];
} mc_segment_id_t;

/**
 * @brief Contribute @p size bytes of the file @p path (a /dev/shm/NAME
 *        shared-memory file or any regular file), from byte @p offset, to
 *        the pool: mapped MAP_SHARED, registered with the transfer engine
 *        for remote access at @p location ("" for none) and mounted on the
 *        master under this client's segment name.
 *
 * The file must already hold offset + size bytes and must not shrink while
 * mounted.  @p protocol must be NULL, "" or the store's protocol.
 * @return MC_INVALID_PARAMS for an unaligned offset (not a multiple of the
 *         page size), a zero size, a path that cannot be opened read-write
 *         or is not a regular file, or a file too short;
 *         MC_UNAVAILABLE_IN_CURRENT_STATUS before setup.
 * @since 0.1
 */
MC_API mc_status_t mc_store_mount_segment(mc_store_h store, const char *path, uint64_t size,
                                          uint64_t offset, const char *protocol,
                                          const char *location, mc_segment_id_t *id_out);

/**
 * @brief Allocate @p size bytes (rounded up to the page size, reported in
 *        @p allocated_size_p) of fresh shared memory and mount it.
 * @since 0.1
 */
MC_API mc_status_t mc_store_allocate_and_mount_segment(mc_store_h store, uint64_t size,
                                                       const char *protocol,
                                                       const char *location,
                                                       mc_segment_id_t *id_out,
                                                       uint64_t *allocated_size_p);

/**
 * @brief Unmount segments of this client and unmap their memory.
 *
 * With @p grace_period_seconds 0 the master drops the segments (and every
 * replica in them) now.  Otherwise they are marked DRAINING at once (no new
 * allocation lands there, existing objects stay readable) and the
 * heartbeat thread unmounts and unmaps them when the grace period is over
 * (or close does, earlier).  Segments are handled in order; the first
 * failure stops the call and is returned.
 * @return MC_SEGMENT_NOT_FOUND for an id this client has not mounted (or
 *         whose grace period is over: it counts as unmounted even before
 *         the heartbeat thread has dropped it), MC_ILLEGAL_CLIENT when the
 *         master says it is another client's, MC_INVALID_PARAMS for text
 *         that is not a UUID.
 * @since 0.1
 */
MC_API mc_status_t mc_store_unmount_segments(mc_store_h store, const char *const *ids,
                                             size_t n, uint64_t grace_period_seconds);

/**
 * @brief mc_store_unmount_segments() for segments of
 *        mc_store_allocate_and_mount_segment(); MC_INVALID_PARAMS for any
 *        other (nothing is unmounted then).
 * @since 0.1
 */
MC_API mc_status_t mc_store_unmount_and_free_segments(mc_store_h store,
                                                      const char *const *ids, size_t n,
                                                      uint64_t grace_period_seconds);

/* ---- copy and move tasks ---------------------------------------------- */

/** A task id: UUID text, NUL-terminated (as mc_segment_id_t). @since 0.1 */
typedef struct mc_task_id {
    char id[37];
} mc_task_id_t;

/** What a task does (upstream TaskType). @since 0.1 */
typedef enum mc_task_type {
    MC_TASK_REPLICA_COPY = 0, /**< add replicas on the target segments */
    MC_TASK_REPLICA_MOVE = 1  /**< add one on the target, drop the source's */
} mc_task_type_t;

/** Where a task is (upstream TaskStatus): PENDING -> PROCESSING -> FAILED
 *  or SUCCESS. @since 0.1 */
typedef enum mc_task_status {
    MC_TASK_PENDING    = 0, /**< queued on the master */
    MC_TASK_PROCESSING = 1, /**< fetched by the client that executes it */
    MC_TASK_FAILED     = 2, /**< ended; the message says why */
    MC_TASK_SUCCESS    = 3  /**< ended; the new replicas are COMPLETE */
} mc_task_status_t;

/** Room for a task's message, NUL included; longer ones are cut at a
 *  UTF-8 character boundary. @since 0.1 */
#define MC_TASK_MESSAGE_MAX 1024

/** What mc_store_query_task() reports (upstream QueryTaskResponse). @since 0.1 */
typedef struct mc_store_task_info {
    mc_task_id_t id;                   /**< the id that was asked for */
    mc_task_type_t type;
    mc_task_status_t status;
    uint64_t created_at_ms_epoch;      /**< wall clock, ms since the epoch */
    uint64_t last_updated_at_ms_epoch; /**< last state change, ms since the epoch */
    char assigned_client[37];          /**< UUID text of the executing client */
    char message[MC_TASK_MESSAGE_MAX]; /**< completion or failure message ("" if none) */
} mc_store_task_info_t;

/**
 * @brief Ask the master to copy @p key to the segments @p targets[0..n)
 *        (segment names, "host:port" as replica descriptors report them).
 *
 * The task is executed in the background by the client owning a complete
 * replica of the object; targets that already hold a replica are skipped.
 * Follow it with mc_store_query_task().
 * @param [out] id_out  The task id, written on success.
 * @return MC_INVALID_PARAMS (nothing sent) for a NULL, empty or too long
 *         key, a NULL or too long target, n == 0 or a NULL @p id_out;
 *         then the master's verdict, checked in upstream's order (since
 *         0.2): MC_OBJECT_NOT_FOUND (missing or incomplete key, whatever
 *         the targets), MC_INVALID_PARAMS (a target no client has
 *         mounted, an empty one included; before 0.2 this was
 *         MC_SEGMENT_NOT_FOUND), MC_UNAVAILABLE_IN_CURRENT_STATUS (a
 *         target mounted but taking no allocations: draining,
 *         unmounting), MC_INTERNAL_ERROR (no memory replica to copy
 *         from), MC_TASK_PENDING_LIMIT_EXCEEDED.  Duplicate targets and
 *         targets that already hold a replica are accepted.
 * @since 0.1
 */
MC_API mc_status_t mc_store_create_copy_task(mc_store_h store, const char *key,
                                             const char *const *targets, size_t n,
                                             mc_task_id_t *id_out);

/**
 * @brief Ask the master to move the replica of @p key on segment @p source
 *        to segment @p target (a copy, then the source replica is dropped).
 * @return MC_INVALID_PARAMS (nothing sent) for a bad key, a NULL or too
 *         long source or target, a NULL @p id_out; then the master's
 *         verdict in upstream's order (since 0.2): MC_OBJECT_NOT_FOUND
 *         (missing or incomplete key), MC_INVALID_PARAMS (target ==
 *         source), MC_INVALID_PARAMS / MC_UNAVAILABLE_IN_CURRENT_STATUS
 *         for the target as mc_store_create_copy_task(), MC_INVALID_PARAMS
 *         (the source holds no replica of the key, an unknown or empty
 *         source included), MC_TASK_PENDING_LIMIT_EXCEEDED.
 * @since 0.1
 */
MC_API mc_status_t mc_store_create_move_task(mc_store_h store, const char *key,
                                             const char *source, const char *target,
                                             mc_task_id_t *id_out);

/**
 * @brief Status of a task of this tenant.
 * @param [in]  task_id  UUID text (mc_task_id_t.id).
 * @param [out] out      Filled on success.
 * @return MC_INVALID_PARAMS (nothing sent) when @p task_id is not a UUID
 *         or @p out is NULL; MC_TASK_NOT_FOUND for an unknown id, another
 *         tenant's, or a finished task the master no longer keeps.
 * @since 0.1
 */
MC_API mc_status_t mc_store_query_task(mc_store_h store, const char *task_id,
                                       mc_store_task_info_t *out);

/* ======================================================================
 * Dummy clients (upstream setup_dummy) and the real client that serves
 * them (the mooncake_client daemon).  docs/protocol.md §8.
 * ====================================================================== */

/**
 * @brief Make @p store a dummy client of the real client at
 *        @p server_address instead of a client of its own.
 *
 * A dummy owns no segment, no transfer engine and no master connection.
 * It creates two blocks of shared memory (memfd): @p mem_pool_size bytes
 * for zero-copy data (mc_store_mem_pool_alloc() hands them out) and
 * @p local_buffer_size bytes for staging the bytes API, and passes them to
 * the real client, which maps them, registers them with its engine and
 * owns their allocators.  Every call is then one request to the real
 * client (a unix socket, "@mooncake_client_<port>.sock" in the abstract
 * namespace, for server_address "host:port"; "unix:PATH" names a socket
 * directly); the object bytes move through the shared memory only.
 *
 * Forwarded: put, put_parts, upsert, upsert_parts, put_from, upsert_from,
 * batch_put_from_multi, batch_upsert_from_multi, get, get_into,
 * batch_get_into_multi, exist, get_size, remove, register_buffer,
 * unregister_buffer, mem_pool_alloc, mem_pool_free.  register_buffer takes
 * exactly one whole block, as upstream: a mc_store_mem_pool_alloc() block
 * (MC_OK, nothing to send) or a mc_host_mem_alloc() block (its memfd goes to
 * the real client, which maps it and reads and writes it in place: a
 * worker's host KV pool, zero-copy); anything else is MC_INVALID_PARAMS
 * with a detail and a WARN line.  unregister_buffer needs the block's start.
 * Zero-copy buffers must lie in the shared memory (the pool, or a
 * registered block); get_into also accepts
 * other memory (through a staging block, one more copy).  Every other
 * store call on a dummy returns MC_NOT_SUPPORTED.
 *
 * @return MC_OK; MC_INVALID_PARAMS for a bad address or a handle already
 *         set up; MC_RPC_FAIL (within about 5 s) when no real client
 *         answers there.  A real client that dies later makes every call
 *         fail with MC_RPC_FAIL instead of hanging (a call waits at most
 *         MC_DUMMY_TIMEOUT_MS, default 60000, for an answer).
 *         mc_store_close() disconnects; the real client then frees the
 *         dummy's memory (it does the same when the dummy process dies).
 * @since 0.2
 */
MC_API mc_status_t mc_store_setup_dummy(mc_store_h store, uint64_t mem_pool_size,
                                        uint64_t local_buffer_size,
                                        const char *server_address);

/** @brief 1 when @p store is set up as a dummy client, else 0. @since 0.2 */
MC_API int mc_store_is_dummy(mc_store_h store);

/**
 * @brief Counters of the real client serving this dummy: dummies
 *        connected, bytes of their shared memory it maps, and bytes its
 *        allocators have handed out in that memory (staging blocks and
 *        pool allocations).  Any out-pointer may be NULL.
 * @return MC_INVALID_PARAMS for a handle that is not a dummy.
 * @since 0.2
 */
MC_API mc_status_t mc_store_dummy_stats(mc_store_h store, uint64_t *sessions_p,
                                        uint64_t *mapped_p, uint64_t *allocated_p);

/** Opaque server of dummy clients. @since 0.2 */
typedef struct mc_store_dummy_server *mc_store_dummy_server_h;

/**
 * @brief Serve dummy clients on the unix socket @p ipc_path ("@name" for
 *        the abstract namespace) with the set-up real store @p store.
 *
 * One thread per dummy.  The store must stay set up until
 * mc_store_dummy_server_stop() returns.
 * @return MC_INVALID_PARAMS (path empty, too long, or in use),
 *         MC_INTERNAL_ERROR.
 * @since 0.2
 */
MC_API mc_status_t mc_store_dummy_server_start(mc_store_h store, const char *ipc_path,
                                               mc_store_dummy_server_h *server_p);

/**
 * @brief Disconnect every dummy, free their memory and stop.  Accepts NULL.
 * @since 0.2
 */
MC_API void mc_store_dummy_server_stop(mc_store_dummy_server_h server);

/* ======================================================================
 * Asynchronous completion queue: submit now, reap the completions when an
 * eventfd says they are there.  docs: the comment at the top of
 * libmooncake/store/threads/async.c.
 * ====================================================================== */

/** Opaque completion queue of a store handle. @since 0.2 */
typedef struct mc_store_aq *mc_store_aq_h;

/**
 * What a request does; each is the public call named in its comment, and
 * its completion carries that call's result.  @since 0.2
 */
typedef enum mc_store_aq_op {
    MC_STORE_AQ_GET = 0,            /**< the object's bytes, looked up through the
                                     *   location cache as mc_store_get(): result
                                     *   MC_OK with data/size, or the error */
    MC_STORE_AQ_GET_INTO = 1,       /**< mc_store_get_into(): bytes read or the error */
    MC_STORE_AQ_PUT = 2,            /**< mc_store_put(): the status */
    MC_STORE_AQ_UPSERT = 3,         /**< mc_store_upsert(): the status */
    MC_STORE_AQ_PUT_FROM = 4,       /**< mc_store_put_from(): the status */
    MC_STORE_AQ_UPSERT_FROM = 5,    /**< mc_store_upsert_from(): the status */
    MC_STORE_AQ_EXIST = 6,          /**< mc_store_exist(): 1, 0 or the error */
    MC_STORE_AQ_REMOVE = 7,         /**< mc_store_remove(): the status */
    MC_STORE_AQ_GET_SIZE = 8,       /**< mc_store_get_size(): the size or the error */
    MC_STORE_AQ_GET_BATCH = 9,      /**< several gets in one call: result the call's
                                     *   status, results[i] object i's size or its
                                     *   error, data the objects read, back to back */
    MC_STORE_AQ_BATCH_EXIST = 10,   /**< mc_store_batch_exist(): results[i] 1, 0 or the
                                     *   error; result the call's status */
    MC_STORE_AQ_BATCH_GET_INTO = 11, /**< mc_store_batch_get_into_multi(), one buffer
                                      *   a key: results[i] bytes read or the error */
    MC_STORE_AQ_BATCH_PUT_FROM = 12, /**< mc_store_batch_put_from_multi(), one buffer
                                      *   a key: results[i] the key's status */
    MC_STORE_AQ_BATCH_UPSERT_FROM = 13, /**< mc_store_batch_upsert_from_multi(), the
                                         *   same */
    MC_STORE_AQ_BATCH_GET_INTO_LOCAL = 14 /**< as MC_STORE_AQ_BATCH_GET_INTO, a replica
                                           *   on this host copied by the queue's worker
                                           *   alone (mc_store_aq_batch_get_into_local());
                                           *   @since 0.2 (MOONCAKE_1.19) */
} mc_store_aq_op_t;

/**
 * One completion, filled by mc_store_aq_reap().  The memory it points to
 * is the caller's from then on: mc_store_aq_done_release() frees it.
 * @since 0.2
 */
typedef struct mc_store_aq_done {
    uint64_t tag;           /**< the submitter's tag */
    mc_store_aq_op_t op;    /**< what was asked */
    int64_t result;         /**< single requests: the call's result (see
                             *   mc_store_aq_op_t); batches: the call's status */
    size_t n;               /**< batches: entries in @p results; else 0 */
    int64_t *results;       /**< batches: one result per key; else NULL */
    void *data;             /**< MC_STORE_AQ_GET(_BATCH): the bytes read (NULL when
                             *   none); else NULL */
    uint64_t size;          /**< bytes at @p data */
} mc_store_aq_done_t;

/**
 * @brief Open a completion queue on @p store, served by @p workers
 *        library threads.
 *
 * A request submitted here is run by one of the workers with the store's
 * public calls; its completion then waits in the queue until
 * mc_store_aq_reap() takes it.  The queue's eventfd (mc_store_aq_fd()) is
 * readable exactly while completions wait, so an event loop can watch it
 * instead of keeping a thread per request.  A worker takes everything
 * queued at once (up to 512 requests, waking another worker for the
 * rest) and runs the single-key requests of one kind as one batch call
 * (many gets: one lookup, one transfer), so a burst of small requests
 * costs a few round trips, not one each.  Each request still gets its own
 * result, the one its single-key call would give: a missing key fails
 * that request only.  Requests in flight together are not ordered with
 * each other: wait for one before submitting one that depends on it.
 *
 * The store handle must outlive the queue: close every queue before
 * mc_store_destroy().  mc_store_close() with queues open is safe: the
 * calls in flight finish first, requests run afterwards fail as the
 * store's calls do on a closed handle (MC_UNAVAILABLE_IN_CURRENT_STATUS),
 * and after a new setup the queue serves the store again.
 *
 * @param store    a store handle (set up or not: the calls report it).
 * @param workers  threads, 1 to 64; 0 for the default (2).
 * @param [out] q_p  the queue, written on success.
 * @return MC_OK; MC_INVALID_PARAMS for a NULL argument or too many
 *         workers; MC_INTERNAL_ERROR when an eventfd or a thread cannot be
 *         made (the detail says which).
 * @see mc_store_aq_close
 * @since 0.2
 */
MC_API mc_status_t mc_store_aq_open(mc_store_h store, unsigned workers, mc_store_aq_h *q_p);

/**
 * @brief Stop the workers and free the queue.  Accepts NULL.
 *
 * Requests no worker has started are dropped without running; the ones
 * running finish first (so this waits for the requests each worker has
 * in hand); completions not reaped are freed.  A caller that needs every
 * completion stops submitting and reaps until it has them all before
 * closing.  The eventfd is closed: take it out of any poll set first.
 * Never touches the store after it returns.
 * @since 0.2
 */
MC_API void mc_store_aq_close(mc_store_aq_h q);

/**
 * @brief Hold back the requests no worker has taken yet, and those
 *        submitted from now on, until the matching mc_store_aq_unplug():
 *        a burst submitted in between reaches the workers in one go (and
 *        so in as few batch calls as it can).
 *
 * Plugs nest: the workers take from the queue again when every plug is
 * unplugged.  Requests already taken keep running.  Accepts NULL.
 * @since 0.2
 */
MC_API void mc_store_aq_plug(mc_store_aq_h q);

/** @brief Undo one mc_store_aq_plug(); the last one wakes a worker for
 *         what was held.  Accepts NULL and an unplugged queue. @since 0.2 */
MC_API void mc_store_aq_unplug(mc_store_aq_h q);

/**
 * @brief The queue's eventfd (EFD_NONBLOCK | EFD_CLOEXEC): readable while
 *        completions wait to be reaped, not readable once they are all
 *        reaped.  Owned by the queue: poll it, never read or close it.
 * @return the descriptor, or -1 for a NULL queue.
 * @since 0.2
 */
MC_API int mc_store_aq_fd(mc_store_aq_h q);

/**
 * @brief Take up to @p max completions, oldest first.
 *
 * Never blocks.  The eventfd stops being readable when the last waiting
 * completion is taken.
 * @param [out] done  @p max entries; the first (return value) are filled.
 *                    Release each with mc_store_aq_done_release().
 * @return the number of completions taken (0 when none wait, or for a
 *         NULL queue or @p done).
 * @since 0.2
 */
MC_API size_t mc_store_aq_reap(mc_store_aq_h q, mc_store_aq_done_t *done, size_t max);

/**
 * @brief Free what @p n reaped completions point to (data, results) and
 *        clear those fields.  Accepts NULL.
 * @since 0.2
 */
MC_API void mc_store_aq_done_release(mc_store_aq_done_t *done, size_t n);

/*
 * Submission.  Every function below copies the keys (and the arrays of
 * the batch forms), so they may be freed when it returns.  The memory
 * the request moves bytes from or into (@p data, @p buf, the buffers of
 * @p bufs) and @p cfg are the caller's and must stay valid and unchanged
 * until the request's completion is reaped or the queue is closed.  Each
 * returns MC_OK once the request is queued -- its outcome comes with its
 * completion -- or, with nothing queued, MC_INVALID_PARAMS for a NULL
 * queue, key or array, MC_INTERNAL_ERROR when memory runs out.  @p tag is
 * the caller's: it comes back in the completion.
 */

/** @brief Queue an MC_STORE_AQ_GET of @p key. @since 0.2 */
MC_API mc_status_t mc_store_aq_get(mc_store_aq_h q, const char *key, uint64_t tag);

/** @brief Queue mc_store_get_into(@p key, @p buf, @p cap). @since 0.2 */
MC_API mc_status_t mc_store_aq_get_into(mc_store_aq_h q, const char *key, void *buf,
                                        size_t cap, uint64_t tag);

/** @brief Queue mc_store_put(@p key, @p data, @p len, @p cfg). @since 0.2 */
MC_API mc_status_t mc_store_aq_put(mc_store_aq_h q, const char *key, const void *data,
                                   size_t len, const mc_replicate_config_t *cfg, uint64_t tag);

/** @brief Queue mc_store_upsert(). @since 0.2 */
MC_API mc_status_t mc_store_aq_upsert(mc_store_aq_h q, const char *key, const void *data,
                                      size_t len, const mc_replicate_config_t *cfg,
                                      uint64_t tag);

/** @brief Queue mc_store_put_from() (registered memory). @since 0.2 */
MC_API mc_status_t mc_store_aq_put_from(mc_store_aq_h q, const char *key, const void *buf,
                                        size_t len, const mc_replicate_config_t *cfg,
                                        uint64_t tag);

/** @brief Queue mc_store_upsert_from() (registered memory). @since 0.2 */
MC_API mc_status_t mc_store_aq_upsert_from(mc_store_aq_h q, const char *key, const void *buf,
                                           size_t len, const mc_replicate_config_t *cfg,
                                           uint64_t tag);

/** @brief Queue mc_store_exist(@p key). @since 0.2 */
MC_API mc_status_t mc_store_aq_exist(mc_store_aq_h q, const char *key, uint64_t tag);

/** @brief Queue mc_store_remove(@p key, @p force). @since 0.2 */
MC_API mc_status_t mc_store_aq_remove(mc_store_aq_h q, const char *key, int force,
                                      uint64_t tag);

/** @brief Queue mc_store_get_size(@p key). @since 0.2 */
MC_API mc_status_t mc_store_aq_get_size(mc_store_aq_h q, const char *key, uint64_t tag);

/**
 * @brief Queue a get of @p n keys as one request (MC_STORE_AQ_GET_BATCH:
 *        one lookup, the reads in one transfer).
 * @since 0.2
 */
MC_API mc_status_t mc_store_aq_get_batch(mc_store_aq_h q, const char *const *keys, size_t n,
                                         uint64_t tag);

/** @brief Queue mc_store_batch_exist() of @p n keys. @since 0.2 */
MC_API mc_status_t mc_store_aq_batch_exist(mc_store_aq_h q, const char *const *keys,
                                           size_t n, uint64_t tag);

/**
 * @brief Queue a read of key i into the registered memory bufs[i]
 *        (base, capacity), one request (mc_store_batch_get_into_multi()).
 * @since 0.2
 */
MC_API mc_status_t mc_store_aq_batch_get_into(mc_store_aq_h q, const char *const *keys,
                                              const mc_iov_t *bufs, size_t n, uint64_t tag);

/**
 * @brief Queue a read of key i into the registered memory bufs[i], as
 *        mc_store_aq_batch_get_into(), where a replica that lies in a
 *        segment mapped on this host is copied by the queue's worker
 *        alone, with streaming stores, once the master has answered the
 *        lookup: neither read speculatively from the location cache nor
 *        spread over the transfer engine's workers.
 *
 * For a caller with work of its own to do while the bytes arrive (a
 * DataProto read building its row views): the copy then takes one core
 * and leaves the others to the caller, where a batch read spread over
 * every worker would compete with it.  A replica reached over the network
 * is read as by mc_store_aq_batch_get_into().  The results, the
 * completion (op MC_STORE_AQ_BATCH_GET_INTO_LOCAL) and what a read
 * guarantees are those of mc_store_aq_batch_get_into(): each key's bytes
 * are its replica's under a valid lease, or its result is an error.
 * The worker runs the read as background work: under SCHED_BATCH, when
 * it is a SCHED_OTHER thread (back to SCHED_OTHER after the read; another
 * policy is left as it is), so that its wake-ups do not preempt the
 * thread that woke it -- the master answering the caller's own lookups.
 *
 * @return MC_OK when queued; MC_INVALID_PARAMS for a NULL queue, keys,
 *         key or @p bufs (with n > 0); MC_INTERNAL_ERROR out of memory.
 * @since 0.2 (MOONCAKE_1.19)
 */
MC_API mc_status_t mc_store_aq_batch_get_into_local(mc_store_aq_h q, const char *const *keys,
                                                    const mc_iov_t *bufs, size_t n,
                                                    uint64_t tag);

/**
 * @brief Copy, on the calling thread, what is left of this queue's
 *        mc_store_aq_batch_get_into_local() reads in progress, and return
 *        once nothing is left to take.
 *
 * A local read of 4 MiB or more is copied in pieces of 1 MiB: the queue's
 * worker takes them in order, and a thread in this call takes those the
 * worker has not reached, so a caller whose own work is done and which
 * would now wait for the completion finishes the copy on two cores
 * instead.  Each piece is checked as the whole read is: a key's result is
 * its bytes, from the one version the lookup named, or an error.  Returns
 * at once when no such read is in progress (it may not have begun yet:
 * the completion still has to be waited for as ever).  Reads of other
 * queues of the same store may be helped too.  Accepts NULL.
 * @return the number of pieces this call copied.
 * @since 0.2 (MOONCAKE_1.20)
 */
MC_API size_t mc_store_aq_help(mc_store_aq_h q);

/** @brief Queue a put of key i from the registered memory bufs[i], one
 *         request (mc_store_batch_put_from_multi()). @since 0.2 */
MC_API mc_status_t mc_store_aq_batch_put_from(mc_store_aq_h q, const char *const *keys,
                                              const mc_iov_t *bufs, size_t n,
                                              const mc_replicate_config_t *cfg, uint64_t tag);

/** @brief Queue mc_store_batch_upsert_from_multi(), one buffer a key. @since 0.2 */
MC_API mc_status_t mc_store_aq_batch_upsert_from(mc_store_aq_h q, const char *const *keys,
                                                 const mc_iov_t *bufs, size_t n,
                                                 const mc_replicate_config_t *cfg,
                                                 uint64_t tag);

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_STORE_H */

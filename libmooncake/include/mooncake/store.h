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
 * MC_UNAVAILABLE_IN_CURRENT_STATUS and touch nothing.
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
    MC_STORE_PARAM_TENANT_ID           = 1u << 7
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
 * @param [out] size_p  Object size (also written with MC_BUFFER_OVERFLOW
 *                      when @p cap is too small, in which case @p buf is
 *                      untouched).
 * @since 0.1
 */
MC_API mc_status_t mc_store_get(mc_store_h store, const char *key, void *buf,
                                size_t cap, uint64_t *size_p);

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

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_STORE_H */

/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file transfer.h
 * @brief The transfer engine: registered memory and one-sided reads/writes
 *        between processes.
 *
 * Each engine serves the memory registered on it for remote access on one
 * TCP port (picked from 12300-14300 unless the local hostname names one);
 * its segment name is "host:port".  A peer reads or writes an address range
 * of a segment; the owner serves the request only when the whole range lies
 * inside one region registered with MC_TE_MEM_REMOTE_ACCESS, and otherwise
 * answers an error without touching memory.
 *
 * Segment descriptors are exchanged peer-to-peer ("P2PHANDSHAKE") or through
 * an HTTP metadata service ("http://host:port/metadata").
 */
#ifndef MOONCAKE_TRANSFER_H
#define MOONCAKE_TRANSFER_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque transfer engine. @since 0.1 */
typedef struct mc_te *mc_te_h;

/** Which fields of mc_te_params_t are set. @since 0.1 */
enum mc_te_params_field {
    MC_TE_PARAM_LOCAL_HOSTNAME  = 1u << 0,
    MC_TE_PARAM_METADATA_SERVER = 1u << 1,
    MC_TE_PARAM_PROTOCOL        = 1u << 2,
    MC_TE_PARAM_DEVICES         = 1u << 3,
    MC_TE_PARAM_PORT_RANGE      = 1u << 4,
    MC_TE_PARAM_LANES           = 1u << 5,
    /** auth_token_file is set. @since 0.2 */
    MC_TE_PARAM_AUTH_TOKEN_FILE = 1u << 6
};

/** Engine creation parameters. @since 0.1 */
typedef struct mc_te_params {
    uint64_t field_mask;         /**< bits of enum mc_te_params_field */
    const char *local_hostname;  /**< "host" or "host:port" (default "localhost") */
    const char *metadata_server; /**< "P2PHANDSHAKE" (default) or "http://h:p/metadata" */
    const char *protocol;        /**< "tcp" (default); others are refused in this build */
    const char *devices;         /**< RDMA device list; ignored for tcp */
    uint16_t port_min;           /**< first port tried (default 12300, env MC_STORE_CLIENT_MIN_PORT) */
    uint16_t port_max;           /**< last port tried (default 14300, env MC_STORE_CLIENT_MAX_PORT) */
    unsigned lanes_per_peer;     /**< pooled connections per peer (default 4, env MC_TCP_LANES_PER_PEER) */
    /**
     * Cluster authentication (with MC_TE_PARAM_AUTH_TOKEN_FILE; @since 0.2;
     * docs/security.md): a secrets file ("SECRET" lines, optionally
     * "tenant NAME SECRET" lines).  Set, every data connection this engine
     * accepts or dials must pass an HMAC challenge-response first, and its
     * metadata PUT/DELETE carry a signature.  Unset: the environment
     * variable MC_AUTH_TOKEN_FILE; empty or absent: off.  A file that cannot
     * be read, is malformed or has no cluster secret fails creation with
     * MC_INVALID_PARAMS.
     */
    const char *auth_token_file;
} mc_te_params_t;

/** Registration flags. @since 0.1 */
enum mc_te_mem_flag {
    MC_TE_MEM_REMOTE_ACCESS = 1u << 0 /**< peers may read and write this region */
};

/** Identifier of an opened remote (or local) segment. @since 0.1 */
typedef uint64_t mc_te_segment_id_t;

/** Direction of a request, seen from the initiator. @since 0.1 */
typedef enum mc_te_op {
    MC_TE_READ  = 0, /**< remote -> local */
    MC_TE_WRITE = 1  /**< local -> remote */
} mc_te_op_t;

/** One transfer. @since 0.1 */
typedef struct mc_te_request {
    mc_te_op_t op;              /**< direction */
    void *local;                /**< local address */
    uint64_t remote;            /**< absolute address inside the target segment */
    uint64_t length;            /**< bytes */
    mc_te_segment_id_t segment; /**< from mc_te_segment_open() */
} mc_te_request_t;

/**
 * @brief Create an engine and start serving on its port.
 * @param [in]  params  Parameters; NULL for all defaults.
 * @param [out] te_p    New engine, written on success.
 * @return Error code as defined by @ref mc_status_t.
 * @see mc_te_destroy
 * @since 0.1
 */
MC_API mc_status_t mc_te_create(const mc_te_params_t *params, mc_te_h *te_p);

/**
 * @brief Whether this library has the transport for @p protocol.
 *
 * 1 for "tcp" always, for "rdma" when built with libibverbs' headers, for
 * "efa" and "cxi" when built with libfabric's (case-insensitive); 0 for any
 * other name or NULL.  A built transport still needs its library at run
 * time (libibverbs.so.1, libfabric.so.1: loaded by mc_te_create()) and a
 * device: mc_te_create() says NOT_SUPPORTED, naming what is missing.
 * @since 0.2
 */
MC_API int mc_te_protocol_built(const char *protocol);

/**
 * @brief Stop serving, close every connection and free the engine.
 * @param [in] te  Engine, or NULL.
 * @since 0.1
 */
MC_API void mc_te_destroy(mc_te_h te);

/**
 * @brief The engine's segment name, "host:port".
 * @since 0.1
 */
MC_API const char *mc_te_local_name(mc_te_h te);

/**
 * @brief Register [addr, addr+len) with the engine.
 *
 * Regions must not overlap.  With MC_TE_MEM_REMOTE_ACCESS the region is
 * published in the segment descriptor and served to peers.
 * @param [in] te        Engine.
 * @param [in] addr      Start of the region.
 * @param [in] len       Length in bytes (> 0).
 * @param [in] location  Locality hint ("cpu:0", "" for any).
 * @param [in] flags     Bits of enum mc_te_mem_flag.
 * @return Error code as defined by @ref mc_status_t (INVALID_PARAMS on
 *         overlap or a zero length).
 * @see mc_te_mem_dereg
 * @since 0.1
 */
MC_API mc_status_t mc_te_mem_reg(mc_te_h te, void *addr, size_t len,
                                 const char *location, unsigned flags);

/**
 * @brief Unregister the region that starts at @p addr.
 *
 * Waits until no served request uses the region.
 * @return Error code as defined by @ref mc_status_t (INVALID_PARAMS when no
 *         region starts at @p addr).
 * @since 0.1
 */
MC_API mc_status_t mc_te_mem_dereg(mc_te_h te, void *addr);

/**
 * @brief Register a file segment: @p size bytes of a file or block device,
 *        served to peers like memory.
 *
 * The engine reserves an address range of @p size bytes for it (nothing is
 * mapped there) and writes its start to @p addr_p.  Peers read and write
 * addresses in [*addr_p, *addr_p + size) exactly as they do memory; the
 * engine moves the bytes with the backend at offset (address - *addr_p),
 * and refuses any request not wholly inside the range.  A regular file
 * shorter than @p size is extended (created when missing); a block device
 * must hold at least @p size bytes.
 * @param [in]  te       Engine.
 * @param [in]  path     Absolute path of the file or block device.
 * @param [in]  size     Bytes served (> 0).
 * @param [in]  backend  "file" (pread/pwrite) or NULL for it; any other
 *                       name (an NVMe-oF initiator) is NOT_SUPPORTED.
 * @param [out] addr_p   Start of the segment's address range.
 * @return Error code as defined by @ref mc_status_t (INVALID_PARAMS for a
 *         relative path, a zero size, a path that cannot be opened or a
 *         device too small).
 * @see mc_te_file_dereg
 * @since 0.2
 */
MC_API mc_status_t mc_te_file_reg(mc_te_h te, const char *path, uint64_t size,
                                  const char *backend, uint64_t *addr_p);

/**
 * @brief Unregister the file segment that starts at @p addr and close its
 *        file (waits until no served request uses it).
 * @return Error code as defined by @ref mc_status_t (INVALID_PARAMS when no
 *         file segment starts at @p addr).
 * @since 0.2
 */
MC_API mc_status_t mc_te_file_dereg(mc_te_h te, uint64_t addr);

/**
 * @brief True (1) when [addr, addr+len) lies inside one registered region.
 * @since 0.1
 */
MC_API int mc_te_mem_is_registered(mc_te_h te, const void *addr, size_t len);

/**
 * @brief Resolve a segment name to an id usable in requests.
 *
 * Fetches the peer's descriptor (from the peer itself or from the metadata
 * service) the first time; later calls return the cached id.
 * @param [in]  te     Engine.
 * @param [in]  name   Segment name "host:port".
 * @param [out] seg_p  Segment id, written on success.
 * @return Error code as defined by @ref mc_status_t.
 * @since 0.1
 */
MC_API mc_status_t mc_te_segment_open(mc_te_h te, const char *name,
                                      mc_te_segment_id_t *seg_p);

/**
 * @brief Run @p n requests to completion, concurrently across pooled
 *        connections.
 *
 * A request whose target is this engine itself is served with memcpy after
 * the same range check a peer would apply.
 * @param [in]  te        Engine.
 * @param [in]  reqs      Requests.
 * @param [in]  n         Number of requests.
 * @param [out] statuses  Per-request status (may be NULL).
 * @return MC_OK when every request succeeded, else the first error.
 * @since 0.1
 */
MC_API mc_status_t mc_te_transfer(mc_te_h te, const mc_te_request_t *reqs,
                                  size_t n, mc_status_t *statuses);

/* ---- asynchronous transfers and segment queries (MOONCAKE_1.1) ---------- */

/**
 * Opaque handle of a transfer running in the background.
 *
 * A job is a set of requests handed to the engine's worker threads by
 * mc_te_transfer_submit(); the submitting thread does not take part and
 * returns at once.  The caller's local buffers must stay valid until the
 * job has finished (mc_te_job_wait() reports done), even after
 * mc_te_job_release() of a job still running.
 * @since 0.2
 */
typedef struct mc_te_job *mc_te_job_h;

/**
 * @brief Start @p n requests in the background and return at once.
 *
 * The requests are validated and split exactly as mc_te_transfer() does
 * (the array is copied: it may be reused after the call); a request
 * refused up front (unknown segment, bad op) does not fail the submission,
 * it becomes that request's status in the finished job.  The engine's
 * worker threads (MC_TE_WORKERS, default lanes-1) move the bytes; an
 * engine configured with no worker threads runs the job on the calling
 * thread before returning, which is then not asynchronous.
 * Every job must be released with mc_te_job_release(), and before the
 * engine is destroyed (mc_te_destroy() first lets queued jobs finish).
 * @param [in]  te     Engine.
 * @param [in]  reqs   Requests (n > 0).
 * @param [in]  n      Number of requests.
 * @param [out] job_p  New job, written on success.
 * @return MC_OK, MC_INVALID_PARAMS (no engine, no requests, no job_p) or
 *         MC_INTERNAL_ERROR (out of memory).
 * @see mc_te_job_wait, mc_te_job_release
 * @since 0.2
 */
MC_API mc_status_t mc_te_transfer_submit(mc_te_h te, const mc_te_request_t *reqs, size_t n,
                                         mc_te_job_h *job_p);

/**
 * @brief Wait up to @p timeout_ms for a job to finish.
 *
 * @param [in]  job         Job from mc_te_transfer_submit().
 * @param [in]  timeout_ms  0 polls, a negative value waits without limit.
 * @param [out] done_p      1 when the job has finished, 0 when it is still
 *                          running at the deadline (may be NULL).
 * @param [out] statuses    Per-request statuses, written only once the job
 *                          has finished (may be NULL).
 * @return When finished: MC_OK if every request succeeded, else the status
 *         of the lowest failing request (its reason is this thread's
 *         mc_last_error_detail()).  While running: MC_OK with *done_p 0.
 *         MC_INVALID_PARAMS for a NULL job.
 * @since 0.2
 */
MC_API mc_status_t mc_te_job_wait(mc_te_job_h job, int timeout_ms, int *done_p,
                                  mc_status_t *statuses);

/**
 * @brief Give a job back.
 *
 * A finished job is freed at once; one still running is detached and freed
 * by the engine when its last request completes (its buffers stay in use
 * until then).  Accepts NULL.
 * @since 0.2
 */
MC_API void mc_te_job_release(mc_te_job_h job);

/**
 * @brief Fetch a segment's descriptor again from its owner (or the
 *        metadata service), so its buffer list is current.
 *
 * Also a reachability probe: it fails when the peer does not answer.  The
 * engine's own segment always succeeds.
 * @param [in] te   Engine.
 * @param [in] seg  Segment id from mc_te_segment_open().
 * @return MC_OK, MC_INVALID_PARAMS for an unknown id, or the fetch error
 *         (MC_TRANSFER_FAIL, MC_RPC_FAIL, ...).
 * @since 0.2
 */
MC_API mc_status_t mc_te_segment_refresh(mc_te_h te, mc_te_segment_id_t seg);

/**
 * @brief The @p index-th buffer a segment serves, in address order.
 *
 * For a peer this reads the descriptor cached by mc_te_segment_open() or
 * the last mc_te_segment_refresh(); for the engine's own segment, its
 * regions registered with MC_TE_MEM_REMOTE_ACCESS.
 * @param [in]  te      Engine.
 * @param [in]  seg     Segment id.
 * @param [in]  index   0 for the lowest buffer.
 * @param [out] addr_p  Start address, written on success.
 * @param [out] len_p   Length in bytes, written on success (may be NULL).
 * @return MC_OK, or MC_INVALID_PARAMS for an unknown id or an index past
 *         the last buffer.
 * @since 0.2
 */
MC_API mc_status_t mc_te_segment_buffer_query(mc_te_h te, mc_te_segment_id_t seg, size_t index,
                                              uint64_t *addr_p, uint64_t *len_p);

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_TRANSFER_H */

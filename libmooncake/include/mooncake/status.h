/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file status.h
 * @brief The one status type of libmooncake.
 *
 * mc_status_t carries the numbers of the upstream Mooncake ErrorCode table,
 * grouped in ranges by area, so Python callers can compare against the codes
 * they already know.  The table is append-only: never renumber an entry.
 */
#ifndef MOONCAKE_STATUS_H
#define MOONCAKE_STATUS_H

#include <mooncake/visibility.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * X-macro list of every status: (name, value, description).
 * mc_status_string() and the Python constants are generated from it.
 */
#define MC_STATUS_TABLE(X)                                                        \
    X(OK, 0, "success")                                                           \
    X(INTERNAL_ERROR, -1, "internal error")                                       \
    X(BUFFER_OVERFLOW, -10, "buffer overflow")                                    \
    X(SHARD_INDEX_OUT_OF_RANGE, -100, "shard index out of range")                 \
    X(SEGMENT_NOT_FOUND, -101, "segment not found")                               \
    X(SEGMENT_ALREADY_EXISTS, -102, "segment already exists")                     \
    X(CLIENT_NOT_FOUND, -103, "client not found")                                 \
    X(NO_AVAILABLE_HANDLE, -200, "no space available for the allocation")         \
    X(INVALID_VERSION, -300, "invalid version")                                   \
    X(INVALID_KEY, -400, "invalid key")                                           \
    X(WRITE_FAIL, -500, "write failed")                                           \
    X(INVALID_PARAMS, -600, "invalid parameters")                                 \
    X(ILLEGAL_CLIENT, -601, "illegal client")                                     \
    X(INVALID_WRITE, -700, "invalid write")                                       \
    X(INVALID_READ, -701, "invalid read")                                         \
    X(INVALID_REPLICA, -702, "invalid replica")                                   \
    X(REPLICA_IS_NOT_READY, -703, "replica is not ready")                         \
    X(OBJECT_NOT_FOUND, -704, "object not found")                                 \
    X(OBJECT_ALREADY_EXISTS, -705, "object already exists")                       \
    X(OBJECT_HAS_LEASE, -706, "object has a lease")                               \
    X(LEASE_EXPIRED, -707, "lease expired before the transfer finished")          \
    X(OBJECT_HAS_REPLICATION_TASK, -708, "object has a replication task")         \
    X(OBJECT_NO_REPLICATION_TASK, -709, "object has no replication task")         \
    X(REPLICA_NOT_FOUND, -710, "replica not found")                               \
    X(REPLICA_ALREADY_EXISTS, -711, "replica already exists")                     \
    X(REPLICA_IS_GONE, -712, "replica is gone")                                   \
    X(REPLICA_NOT_IN_LOCAL_MEMORY, -713, "replica is not in local memory")        \
    X(OBJECT_REPLICA_BUSY, -714, "object replica is busy")                        \
    X(TRANSFER_FAIL, -800, "transfer failed")                                     \
    X(CHECKSUM_MISMATCH, -801, "checksum mismatch")                               \
    X(RPC_FAIL, -900, "rpc failed")                                               \
    X(RPC_TIMEOUT, -901, "rpc timed out")                                         \
    X(ETCD_OPERATION_ERROR, -1000, "etcd operation error")                        \
    X(ETCD_KEY_NOT_EXIST, -1001, "etcd key does not exist")                       \
    X(ETCD_TRANSACTION_FAIL, -1002, "etcd transaction failed")                    \
    X(ETCD_CTX_CANCELLED, -1003, "etcd context cancelled")                        \
    X(OPLOG_ENTRY_NOT_FOUND, -1004, "oplog entry not found")                      \
    X(K8S_LEASE_OPERATION_ERROR, -1005, "k8s lease operation error")              \
    X(K8S_LEASE_NOT_FOUND, -1006, "k8s lease not found")                          \
    X(INCOMPLETE_OPLOG_CATCH_UP, -1007, "incomplete oplog catch-up")              \
    X(UNAVAILABLE_IN_CURRENT_STATUS, -1010, "unavailable in current status")      \
    X(UNAVAILABLE_IN_CURRENT_MODE, -1011, "unavailable in current mode")          \
    X(NOT_SUPPORTED, -1012, "not supported")                                      \
    X(FILE_NOT_FOUND, -1100, "file not found")                                    \
    X(FILE_OPEN_FAIL, -1101, "file open failed")                                  \
    X(FILE_READ_FAIL, -1102, "file read failed")                                  \
    X(FILE_WRITE_FAIL, -1103, "file write failed")                                \
    X(FILE_INVALID_BUFFER, -1104, "invalid file buffer")                          \
    X(FILE_LOCK_FAIL, -1105, "file lock failed")                                  \
    X(FILE_INVALID_HANDLE, -1106, "invalid file handle")                          \
    X(BUCKET_NOT_FOUND, -1200, "bucket not found")                                \
    X(BUCKET_ALREADY_EXISTS, -1201, "bucket already exists")                      \
    X(KEYS_EXCEED_BUCKET_LIMIT, -1202, "keys exceed bucket limit")                \
    X(KEYS_ULTRA_LIMIT, -1203, "keys ultra limit")                                \
    X(UNABLE_OFFLOAD, -1300, "unable to offload")                                 \
    X(UNABLE_OFFLOADING, -1301, "unable to offload now")                          \
    X(TASK_NOT_FOUND, -1400, "task not found")                                    \
    X(TASK_PENDING_LIMIT_EXCEEDED, -1401, "task pending limit exceeded")          \
    X(JOB_NOT_FOUND, -1402, "job not found")                                      \
    X(SERIALIZE_UNSUPPORTED, -1500, "serialization unsupported")                  \
    X(SERIALIZE_FAIL, -1501, "serialization failed")                              \
    X(DESERIALIZE_FAIL, -1502, "deserialization failed")                          \
    X(PERSISTENT_FAIL, -1503, "persistence failed")                               \
    X(DFS_NETWORK_TIMEOUT, -1600, "dfs network timeout")                          \
    X(DFS_SERVICE_UNAVAILABLE, -1601, "dfs service unavailable")                  \
    X(DFS_QUOTA_EXCEEDED, -1602, "dfs quota exceeded")                            \
    X(DFS_PERMISSION_DENIED, -1603, "dfs permission denied")                      \
    X(DFS_STALE_HANDLE, -1604, "dfs stale handle")                                \
    X(DFS_PARTIAL_WRITE, -1605, "dfs partial write")                              \
    X(TENANT_QUOTA_EXCEEDED, -1700, "tenant quota exceeded")                      \
    X(TENANT_NOT_REGISTERED, -1701, "tenant not registered")                      \
    X(TENANT_NOT_EMPTY, -1702, "tenant not empty")

/**
 * Status of every fallible libmooncake call.  0 is success; errors are the
 * negative upstream ErrorCode numbers.
 * @since 0.1
 */
typedef enum mc_status {
#define MC_STATUS_ENUM_(name, value, desc) MC_##name = (value),
    MC_STATUS_TABLE(MC_STATUS_ENUM_)
#undef MC_STATUS_ENUM_
} mc_status_t;

/**
 * @brief Name of a status, e.g. "OBJECT_NOT_FOUND".
 * @param [in] status  Any value; unknown values give "UNKNOWN".
 * @return A static string.
 * @since 0.1
 */
MC_API const char *mc_status_name(int status);

/**
 * @brief Human description of a status, e.g. "object not found".
 * @param [in] status  Any value; unknown values give "unknown status".
 * @return A static string.
 * @since 0.1
 */
MC_API const char *mc_status_string(int status);

/**
 * @brief Detail of the last error on the calling thread.
 *
 * Set by a failing call before it returns; "" when nothing was recorded.
 * @return A thread-local string valid until the next libmooncake call on
 *         the same thread.
 * @since 0.1
 */
MC_API const char *mc_last_error_detail(void);

/** @brief True when @p s is an error (negative). @since 0.1 */
static inline int mc_status_is_err(int s) { return s < 0; }

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_STATUS_H */

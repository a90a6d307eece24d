/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master RPC, specified once (docs/protocol.md explains it byte by byte).
 *
 * A frame is a 16-byte header (mc_wire_header_t, section 2 of the protocol
 * document) then a body.  Requests carry the fields of their message; a
 * response carries an i32 status and, only when the status is MC_OK, the
 * response fields.  Every message is declared in MC_WIRE_MESSAGES below;
 * the C structs, the encoders and the decoders are all generated from that
 * table, so client and master cannot disagree about a layout.
 *
 * Decoders assume hostile input: lengths are bounded before use, lists are
 * bounded by MC_WIRE_MAX_LIST and by the bytes actually present, trailing
 * bytes are an error, and nothing is read outside the frame.
 */
#ifndef MC_WIRE_WIRE_H
#define MC_WIRE_WIRE_H

#include <stdint.h>

#include <mooncake/status.h>

#include "common/buf.h"
#include "common/util.h"

/* ---- §2 frame header --------------------------------------------------- */

#define MC_WIRE_MAGIC        0x5052434Du /* "MCRP" little-endian */
#define MC_WIRE_VERSION      1
#define MC_WIRE_HEADER_SIZE  16
#define MC_WIRE_FLAG_RESPONSE 0x01
#define MC_WIRE_MAX_BODY     (64u << 20) /* 64 MiB */
#define MC_WIRE_MAX_KEY      4096        /* bytes in one key */
#define MC_WIRE_MAX_STR      65536       /* bytes in any other string */
#define MC_WIRE_MAX_LIST     (1u << 20)  /* entries in one list */

typedef struct mc_wire_header {
    uint32_t magic;
    uint8_t version;
    uint8_t flags;
    uint16_t opcode;
    uint32_t request_id;
    uint32_t body_len;
} mc_wire_header_t;

void mc_wire_header_pack(const mc_wire_header_t *h, uint8_t out[MC_WIRE_HEADER_SIZE]);
/* Checks magic, version, known flags and body_len <= MC_WIRE_MAX_BODY;
 * MC_DESERIALIZE_FAIL otherwise.  The opcode is checked by the caller. */
mc_status_t mc_wire_header_unpack(const uint8_t in[MC_WIRE_HEADER_SIZE],
                                  mc_wire_header_t *h);

/* ---- §3 field kinds ---------------------------------------------------- */


/* Segment as mounted on the master. */
typedef struct mc_wire_segment {
    mc_uuid_t id;
    mc_str_t name;      /* transfer engine segment name, "host:port" */
    uint64_t base;      /* address of the region in the owner's process */
    uint64_t size;
    mc_str_t protocol;  /* "tcp" */
    /* the generation its owner's engine holds the memory under now
     * (docs/transfer.md §3.6: base and reuse counter); 0 from a mount
     * means counter 0 (mc_gen_of_segment) */
    uint64_t gen;
} mc_wire_segment_t;

/* One replica of an object. */
typedef struct mc_wire_replica {
    uint64_t id;
    uint8_t status;     /* mc_replica_status_t */
    uint8_t type;       /* 0 memory */
    uint64_t addr;      /* absolute address in the owner's segment */
    uint64_t size;
    mc_str_t segment;   /* transfer engine segment name */
    mc_uuid_t segment_id;
    /* types 0 and 3 (memory, NoF), on the wire after segment_id: the
     * generation a read or write of it names (the segment's now) */
    uint64_t gen;
    /* type 2 (disk) only, on the wire after segment_id: the holder's bucket
     * file, addr is the value's offset in it, size its length, crc its
     * CRC32C (docs/protocol.md §3, docs/tiers.md) */
    mc_str_t file_path;
    uint32_t crc;
    /* type 100 (DFS) only, on the wire after segment_id: file_path is the
     * shard file relative to the DFS root, addr the record's offset in it,
     * size the value's length, then u32 shard_idx and u64 aligned_size
     * (the bytes reserved at addr; docs/tiers.md §6).  segment is empty. */
    uint32_t shard_idx;
    uint64_t aligned_size;
} mc_wire_replica_t;

/* mc_wire_replica_t.type */
#define MC_WIRE_REPLICA_MEMORY 0
#define MC_WIRE_REPLICA_DISK   2
#define MC_WIRE_REPLICA_DFS    100 /* upstream's ReplicaType::DFS */
/* a buffer in a NoF segment (docs/tiers.md §8): read and written through
 * the transfer engine exactly like memory, listed after memory */
#define MC_WIRE_REPLICA_NOF    3

typedef struct mc_wire_replica_list {
    uint32_t n;
    mc_wire_replica_t *v;
} mc_wire_replica_list_t;

/* Per-key result of a batch lookup or allocation. */
typedef struct mc_wire_result {
    int32_t status;
    uint64_t size;
    mc_wire_replica_list_t replicas;
} mc_wire_result_t;

typedef struct mc_wire_result_list {
    uint32_t n;
    mc_wire_result_t *v;
} mc_wire_result_list_t;

typedef struct mc_wire_str_list {
    uint32_t n;
    mc_str_t *v;
} mc_wire_str_list_t;

typedef struct mc_wire_u64_list {
    uint32_t n;
    uint64_t *v;
} mc_wire_u64_list_t;

typedef struct mc_wire_i32_list {
    uint32_t n;
    int32_t *v;
} mc_wire_i32_list_t;

typedef struct mc_wire_segment_list {
    uint32_t n;
    mc_wire_segment_t *v;
} mc_wire_segment_list_t;

/* Entries of CONFIG.preferred_nof_segments. */
#define MC_WIRE_MAX_PREF_NOF 16

/* ReplicateConfig on the wire. */
typedef struct mc_wire_config {
    uint32_t replica_num;
    uint32_t nof_replica_num;
    uint32_t dfs_replica_num;
    uint8_t soft_pin_action;
    uint8_t has_soft_pin_ttl;
    uint64_t soft_pin_ttl_ms;
    uint8_t with_hard_pin;
    mc_str_t preferred_segment;
    uint8_t prefer_alloc_in_same_node;
    uint8_t has_group_ids;
    mc_wire_str_list_t group_ids;
    /* NoF segments to place nof replicas on first, in order (at most
     * MC_WIRE_MAX_PREF_NOF names; empty: none) */
    mc_wire_str_list_t preferred_nof_segments;
    /* storage the encoding side may point preferred_nof_segments.v at */
    mc_str_t pref_nof_buf[MC_WIRE_MAX_PREF_NOF];
} mc_wire_config_t;

/* A copy or move task handed to the client that executes it (FETCH_TASKS).
 * type: 0 REPLICA_COPY, 1 REPLICA_MOVE.  A copy has one or more targets
 * and source is the segment of the replica it reads; a move has exactly one
 * target. */
typedef struct mc_wire_task {
    mc_uuid_t id;
    uint8_t type;
    mc_str_t tenant;
    mc_str_t key;
    mc_str_t source;              /* segment name */
    mc_wire_str_list_t targets;   /* segment names */
    uint64_t created_at_ms;       /* wall clock, ms since the epoch */
    uint32_t max_retry_attempts;  /* NO_AVAILABLE_HANDLE retries allowed */
} mc_wire_task_t;

typedef struct mc_wire_task_list {
    uint32_t n;
    mc_wire_task_t *v;
} mc_wire_task_list_t;

typedef uint8_t mc_wire_U8_t;
typedef uint32_t mc_wire_U32_t;
typedef uint64_t mc_wire_U64_t;
typedef int32_t mc_wire_I32_t;
typedef int64_t mc_wire_I64_t;
typedef mc_str_t mc_wire_STR_t;  /* bounded by MC_WIRE_MAX_STR */
typedef mc_str_t mc_wire_KEY_t;  /* bounded by MC_WIRE_MAX_KEY, non-empty */
typedef mc_uuid_t mc_wire_UUID_t;
typedef mc_wire_segment_t mc_wire_SEGMENT_t;
typedef mc_wire_segment_list_t mc_wire_SEGMENTS_t;
typedef mc_wire_replica_list_t mc_wire_REPLICAS_t;
typedef mc_wire_result_list_t mc_wire_RESULTS_t;
typedef mc_wire_str_list_t mc_wire_KEYS_t;
typedef mc_wire_u64_list_t mc_wire_U64S_t;
typedef mc_wire_i32_list_t mc_wire_I32S_t;
typedef mc_wire_config_t mc_wire_CONFIG_t;
typedef mc_wire_task_list_t mc_wire_TASKS_t;

/* ---- §4 the message table ----------------------------------------------
 * X(UPPER, lower, opcode).  For each message there is a request field list
 * MC_WIRE_REQ_<lower>(F) and a response field list MC_WIRE_RESP_<lower>(F);
 * F(KIND, field).  Append new messages with new opcodes; never reuse one.
 */
#define MC_WIRE_MESSAGES(X)                                  \
    X(HELLO, hello, 1)                                       \
    X(PING, ping, 2)                                         \
    X(MOUNT_SEGMENT, mount_segment, 3)                       \
    X(REMOUNT_SEGMENTS, remount_segments, 4)                 \
    X(UNMOUNT_SEGMENT, unmount_segment, 5)                   \
    X(CLIENT_CLOSE, client_close, 6)                         \
    X(PUT_START, put_start, 10)                              \
    X(PUT_END, put_end, 11)                                  \
    X(PUT_REVOKE, put_revoke, 12)                            \
    X(GET_REPLICA_LIST, get_replica_list, 13)                \
    X(EXIST_KEY, exist_key, 14)                              \
    X(REMOVE, remove, 15)                                    \
    X(REMOVE_ALL, remove_all, 16)                            \
    X(BATCH_PUT_START, batch_put_start, 20)                  \
    X(BATCH_PUT_END, batch_put_end, 21)                      \
    X(BATCH_PUT_REVOKE, batch_put_revoke, 22)                \
    X(BATCH_GET_REPLICA_LIST, batch_get_replica_list, 23)    \
    X(BATCH_EXIST_KEY, batch_exist_key, 24)                  \
    X(BATCH_REMOVE, batch_remove, 25)                        \
    X(UPSERT_START, upsert_start, 30)                        \
    X(UPSERT_END, upsert_end, 31)                            \
    X(UPSERT_REVOKE, upsert_revoke, 32)                      \
    X(BATCH_UPSERT_START, batch_upsert_start, 33)            \
    X(BATCH_UPSERT_END, batch_upsert_end, 34)                \
    X(BATCH_UPSERT_REVOKE, batch_upsert_revoke, 35)          \
    X(REMOVE_BY_REGEX, remove_by_regex, 36)                  \
    X(SET_SEGMENT_DRAINING, set_segment_draining, 40)        \
    X(CREATE_COPY_TASK, create_copy_task, 50)                \
    X(CREATE_MOVE_TASK, create_move_task, 51)                \
    X(QUERY_TASK, query_task, 52)                            \
    X(FETCH_TASKS, fetch_tasks, 53)                          \
    X(MARK_TASK_COMPLETE, mark_task_complete, 54)            \
    X(TASK_REPLICA_START, task_replica_start, 55)            \
    X(TASK_REPLICA_END, task_replica_end, 56)                \
    X(TASK_REPLICA_REVOKE, task_replica_revoke, 57)          \
    X(BATCH_REPLICA_CLEAR, batch_replica_clear, 58)         \
    X(OFFLOAD_REPORT, offload_report, 60)                    \
    X(DISK_REPLICA_DROP, disk_replica_drop, 61)              \
    X(MOUNT_NOF_SEGMENT, mount_nof_segment, 70)              \
    X(REMOUNT_NOF_SEGMENTS, remount_nof_segments, 71)        \
    X(UNMOUNT_NOF_SEGMENT, unmount_nof_segment, 72)          \
    X(GET_ALL_NOF_SEGMENTS, get_all_nof_segments, 73)        \
    X(GET_NOF_SEGMENTS_BY_NAME, get_nof_segments_by_name, 74)\
    X(PUT_RESERVE, put_reserve, 75)                          \
    X(PUT_COMMIT, put_commit, 76)

/* Opens a connection: who the client is and which tenant its keys live in. */
#define MC_WIRE_REQ_hello(F) F(U32, proto_version) F(UUID, client_id) F(STR, tenant_id)
/* metadata_token: what the client's transfer engine sends with its
 * metadata writes to the master's HTTP store (§6.1). */
/* dfs_*: the master's DFS tier (--root_fs_dir and its shard layout;
 * dfs_root "" when it has none).  A client with MOONCAKE_DFS_ROOT_DIR
 * refuses to start unless they match its own (docs/tiers.md §6). */
#define MC_WIRE_RESP_hello(F)                                                    \
    F(STR, server_version) F(U64, view_version) F(UUID, metadata_token)          \
    F(STR, dfs_root) F(U32, dfs_shard_count) F(U64, dfs_shard_capacity)          \
    F(U32, dfs_alignment)

/* Liveness; client_status 1 OK, 2 NEED_REMOUNT (master does not know it). */
#define MC_WIRE_REQ_ping(F) F(UUID, client_id)
#define MC_WIRE_RESP_ping(F) F(U8, client_status) F(U64, view_version)

#define MC_WIRE_REQ_mount_segment(F) F(UUID, client_id) F(SEGMENT, segment)
#define MC_WIRE_RESP_mount_segment(F)

#define MC_WIRE_REQ_remount_segments(F) F(UUID, client_id) F(SEGMENTS, segments)
#define MC_WIRE_RESP_remount_segments(F)

#define MC_WIRE_REQ_unmount_segment(F) F(UUID, client_id) F(UUID, segment_id)
#define MC_WIRE_RESP_unmount_segment(F)

/* Marks a segment of the caller DRAINING: it takes no new allocations but
 * its objects stay readable until UNMOUNT_SEGMENT (a graceful unmount).
 * SEGMENT_NOT_FOUND for an unknown id, ILLEGAL_CLIENT for another's. */
#define MC_WIRE_REQ_set_segment_draining(F) F(UUID, client_id) F(UUID, segment_id)
#define MC_WIRE_RESP_set_segment_draining(F)

/* Unmounts every segment of the client at once; its objects disappear. */
#define MC_WIRE_REQ_client_close(F) F(UUID, client_id)
#define MC_WIRE_RESP_client_close(F)

#define MC_WIRE_REQ_put_start(F) F(UUID, client_id) F(KEY, key) F(U64, length) F(CONFIG, config)
#define MC_WIRE_RESP_put_start(F) F(REPLICAS, replicas)

#define MC_WIRE_REQ_put_end(F) F(UUID, client_id) F(KEY, key)
#define MC_WIRE_RESP_put_end(F)

#define MC_WIRE_REQ_put_revoke(F) F(UUID, client_id) F(KEY, key)
#define MC_WIRE_RESP_put_revoke(F)

/* Grants a read lease of lease_ttl_ms. */
#define MC_WIRE_REQ_get_replica_list(F) F(KEY, key)
#define MC_WIRE_RESP_get_replica_list(F) F(U64, size) F(U64, lease_ttl_ms) F(REPLICAS, replicas)

/* exists is 1 or 0; grants a read lease when 1. */
#define MC_WIRE_REQ_exist_key(F) F(KEY, key)
#define MC_WIRE_RESP_exist_key(F) F(U8, exists)

#define MC_WIRE_REQ_remove(F) F(KEY, key) F(U8, force)
#define MC_WIRE_RESP_remove(F)

#define MC_WIRE_REQ_remove_all(F) F(U8, force)
#define MC_WIRE_RESP_remove_all(F) F(I64, count)

/* results[i].status per key; replicas allocated for status MC_OK. */
#define MC_WIRE_REQ_batch_put_start(F) F(UUID, client_id) F(KEYS, keys) F(U64S, lengths) F(CONFIG, config)
#define MC_WIRE_RESP_batch_put_start(F) F(RESULTS, results)

#define MC_WIRE_REQ_batch_put_end(F) F(UUID, client_id) F(KEYS, keys)
#define MC_WIRE_RESP_batch_put_end(F) F(I32S, statuses)

#define MC_WIRE_REQ_batch_put_revoke(F) F(UUID, client_id) F(KEYS, keys)
#define MC_WIRE_RESP_batch_put_revoke(F) F(I32S, statuses)

#define MC_WIRE_REQ_batch_get_replica_list(F) F(KEYS, keys)
#define MC_WIRE_RESP_batch_get_replica_list(F) F(U64, lease_ttl_ms) F(RESULTS, results)

/* results[i] is 1, 0 or a negative status. */
#define MC_WIRE_REQ_batch_exist_key(F) F(KEYS, keys)
#define MC_WIRE_RESP_batch_exist_key(F) F(I32S, results)

#define MC_WIRE_REQ_batch_remove(F) F(KEYS, keys) F(U8, force)
#define MC_WIRE_RESP_batch_remove(F) F(I32S, statuses)

/* Upsert: a new key behaves as PUT_START; an existing one is rewritten in
 * place (same size, no reader holds a lease) or gets fresh buffers that
 * replace the old ones at UPSERT_END.  Replicas come back PROCESSING. */
#define MC_WIRE_REQ_upsert_start(F) F(UUID, client_id) F(KEY, key) F(U64, length) F(CONFIG, config)
#define MC_WIRE_RESP_upsert_start(F) F(REPLICAS, replicas)

#define MC_WIRE_REQ_upsert_end(F) F(UUID, client_id) F(KEY, key)
#define MC_WIRE_RESP_upsert_end(F)

#define MC_WIRE_REQ_upsert_revoke(F) F(UUID, client_id) F(KEY, key)
#define MC_WIRE_RESP_upsert_revoke(F)

#define MC_WIRE_REQ_batch_upsert_start(F) F(UUID, client_id) F(KEYS, keys) F(U64S, lengths) F(CONFIG, config)
#define MC_WIRE_RESP_batch_upsert_start(F) F(RESULTS, results)

#define MC_WIRE_REQ_batch_upsert_end(F) F(UUID, client_id) F(KEYS, keys)
#define MC_WIRE_RESP_batch_upsert_end(F) F(I32S, statuses)

#define MC_WIRE_REQ_batch_upsert_revoke(F) F(UUID, client_id) F(KEYS, keys)
#define MC_WIRE_RESP_batch_upsert_revoke(F) F(I32S, statuses)

/* POSIX extended regular expression over the tenant's keys. */
#define MC_WIRE_REQ_remove_by_regex(F) F(STR, regex) F(U8, force)
#define MC_WIRE_RESP_remove_by_regex(F) F(I64, count)

/* ---- copy and move tasks (docs/protocol.md §5.13) ----------------------
 * State machine: PENDING (0) -> PROCESSING (1, once fetched by the
 * assigned client) -> SUCCESS (3) or FAILED (2).  The tenant is the
 * connection's.  CREATE_*: OBJECT_NOT_FOUND when the key is missing or
 * incomplete, SEGMENT_NOT_FOUND for a target no mounted segment has,
 * INVALID_PARAMS for no targets, a move whose source holds no replica or
 * whose target is its source, TASK_PENDING_LIMIT_EXCEEDED when the pending
 * queue is full. */
#define MC_WIRE_REQ_create_copy_task(F) F(KEY, key) F(KEYS, targets)
#define MC_WIRE_RESP_create_copy_task(F) F(UUID, task_id)

#define MC_WIRE_REQ_create_move_task(F) F(KEY, key) F(STR, source) F(STR, target)
#define MC_WIRE_RESP_create_move_task(F) F(UUID, task_id)

/* TASK_NOT_FOUND for an unknown (or pruned) id or another tenant's task. */
#define MC_WIRE_REQ_query_task(F) F(UUID, task_id)
#define MC_WIRE_RESP_query_task(F)                                          \
    F(U8, type) F(U8, status) F(U64, created_at_ms) F(U64, last_updated_at_ms) \
    F(UUID, assigned_client) F(STR, message)

/* Up to batch_size PENDING tasks assigned to the client, now PROCESSING
 * (never more than --max_total_processing_tasks in flight). */
#define MC_WIRE_REQ_fetch_tasks(F) F(UUID, client_id) F(U32, batch_size)
#define MC_WIRE_RESP_fetch_tasks(F) F(TASKS, tasks)

/* Ends a PROCESSING task of the caller: status 3 SUCCESS or 2 FAILED with a
 * message.  Buffers of an uncommitted TASK_REPLICA_START are freed;
 * SUCCESS is refused (INVALID_PARAMS) unless TASK_REPLICA_END committed. */
#define MC_WIRE_REQ_mark_task_complete(F) \
    F(UUID, client_id) F(UUID, task_id) F(U8, status) F(STR, message)
#define MC_WIRE_RESP_mark_task_complete(F)

/* Executing a task: START allocates a buffer of the object's size on each
 * target that holds no replica yet (targets may come back empty) and
 * returns the complete source replica to read; the object cannot be
 * removed without force (OBJECT_HAS_REPLICATION_TASK) nor evicted until
 * END or REVOKE.  NO_AVAILABLE_HANDLE when a target has no room (the
 * client may retry up to max_retry_attempts times).  END makes the new
 * buffers COMPLETE replicas of the object and, for a move, drops the
 * source replica; REVOKE frees them.  TASK_NOT_FOUND unless the task is
 * PROCESSING and assigned to client_id. */
#define MC_WIRE_REQ_task_replica_start(F) F(UUID, client_id) F(UUID, task_id)
#define MC_WIRE_RESP_task_replica_start(F) F(U64, size) F(REPLICAS, source) F(REPLICAS, targets)

#define MC_WIRE_REQ_task_replica_end(F) F(UUID, client_id) F(UUID, task_id)
#define MC_WIRE_RESP_task_replica_end(F)

#define MC_WIRE_REQ_task_replica_revoke(F) F(UUID, client_id) F(UUID, task_id)
#define MC_WIRE_RESP_task_replica_revoke(F)

/* Clears the caller's own objects of the connection's tenant
 * (docs/protocol.md §5.14): segment_name "" erases each whole object,
 * otherwise only its COMPLETE replicas on segments of that name (the
 * object goes with its last one).  statuses[i] is 0 where keys[i] was
 * cleared, else why it was skipped (-704 missing, -601 another client's,
 * -706 leased, -703 incomplete or being upserted, -708 replicating,
 * -710 no complete replica on segment_name). */
#define MC_WIRE_REQ_batch_replica_clear(F) F(UUID, client_id) F(KEYS, keys) F(STR, segment_name)
#define MC_WIRE_RESP_batch_replica_clear(F) F(I32S, statuses)

/* ---- disk tier (docs/protocol.md §5.15, docs/tiers.md) -----------------
 * OFFLOAD_REPORT: the caller wrote the value of key (tenant of the
 * connection), read from the memory replica source_replica, into its disk
 * tier: the record at offset of file_path, length value bytes, CRC32C crc.
 * The master records it as the object's disk replica (replacing an older
 * one).  NOT_SUPPORTED without --enable_offload; OBJECT_NOT_FOUND for a
 * missing key; REPLICA_IS_NOT_READY while it is being written or
 * upserted; REPLICA_NOT_FOUND when source_replica is no longer a complete
 * replica of it (the value changed meanwhile: the copy is stale);
 * INVALID_PARAMS when length is not the object's size or the path is not
 * absolute; ILLEGAL_CLIENT when the caller has no mounted segment (readers
 * reach a disk replica through its holder's segment name). */
#define MC_WIRE_REQ_offload_report(F) \
    F(UUID, client_id) F(KEY, key) F(U64, source_replica) F(STR, file_path) F(U64, offset) \
    F(U64, length) F(U32, crc)
#define MC_WIRE_RESP_offload_report(F)

/* DISK_REPLICA_DROP: the caller's records of keys in file_path are gone
 * (its tier deleted that bucket).  statuses[i]: OK, OBJECT_NOT_FOUND, or
 * REPLICA_NOT_FOUND when the key has no disk replica of the caller's in
 * that file (a newer copy elsewhere stays).  An object left with no
 * replica at all is erased. */
#define MC_WIRE_REQ_disk_replica_drop(F) F(UUID, client_id) F(STR, file_path) F(KEYS, keys)
#define MC_WIRE_RESP_disk_replica_drop(F) F(I32S, statuses)

/* ---- NoF segments (docs/protocol.md §5.17, docs/tiers.md §8) -----------
 * A NoF segment is storage a client's transfer engine serves from a file
 * or device (a file segment): the master places nof replicas there
 * (ReplicateConfig.nof_replica_num), apart from memory, with its own
 * capacity and eviction.  It belongs to the client that mounts it and
 * goes with that client, its replicas with it.  MOUNT: INVALID_PARAMS for
 * a malformed description, SEGMENT_ALREADY_EXISTS for an id mounted with
 * other bounds or by another client (a repeat is a no-op).  REMOUNT
 * mounts each of a list (after a master restart).  UNMOUNT:
 * SEGMENT_NOT_FOUND, ILLEGAL_CLIENT for another's.  GET_ALL lists the
 * mounted NoF segments; GET_..._BY_NAME those of one name
 * (SEGMENT_NOT_FOUND when none). */
#define MC_WIRE_REQ_mount_nof_segment(F) F(UUID, client_id) F(SEGMENT, segment)
#define MC_WIRE_RESP_mount_nof_segment(F)

#define MC_WIRE_REQ_remount_nof_segments(F) F(UUID, client_id) F(SEGMENTS, segments)
#define MC_WIRE_RESP_remount_nof_segments(F)

#define MC_WIRE_REQ_unmount_nof_segment(F) F(UUID, client_id) F(UUID, segment_id)
#define MC_WIRE_RESP_unmount_nof_segment(F)

#define MC_WIRE_REQ_get_all_nof_segments(F) F(U8, reserved)
#define MC_WIRE_RESP_get_all_nof_segments(F) F(SEGMENTS, segments)

#define MC_WIRE_REQ_get_nof_segments_by_name(F) F(STR, name)
#define MC_WIRE_RESP_get_nof_segments_by_name(F) F(SEGMENTS, segments)

/* ---- one-round-trip puts (docs/protocol.md §5.18) ----------------------
 * PUT_RESERVE: buffers for one future put of exactly length bytes, placed
 * as PUT_START places them for config (inline eviction included), owned
 * by the caller and by nobody's key.  reservation_id names them (never 0);
 * ttl_ms is how long the master keeps them unclaimed.  NOT_SUPPORTED when
 * the master grants no reservations (--put_reservation_ttl_sec 0). */
#define MC_WIRE_REQ_put_reserve(F) F(UUID, client_id) F(U64, length) F(CONFIG, config)
#define MC_WIRE_RESP_put_reserve(F) F(U64, reservation_id) F(U64, ttl_ms) F(REPLICAS, replicas)

/* PUT_COMMIT: PUT_START + PUT_END of key in one step, on the buffers of
 * the caller's reservation_id (which the caller has filled).  On OK the
 * reservation is used up and, when renew is 1, a new one of the same
 * length and placement comes back in next_id/ttl_ms/next (next_id 0: none
 * granted; no eviction is done for it).  Any other status leaves the
 * reservation as it was: OBJECT_ALREADY_EXISTS (key exists or is being
 * written; the put's value stays), OBJECT_NOT_FOUND (no such reservation
 * of this client and tenant: expired, its segment gone, master restarted). */
#define MC_WIRE_REQ_put_commit(F) \
    F(UUID, client_id) F(KEY, key) F(U64, reservation_id) F(CONFIG, config) F(U8, renew)
#define MC_WIRE_RESP_put_commit(F) F(U64, next_id) F(U64, ttl_ms) F(REPLICAS, next)

/* ---- generated declarations ------------------------------------------- */

typedef enum mc_wire_op {
#define MC_WIRE_OP_ENUM_(UP, low, code) MC_WIRE_OP_##UP = (code),
    MC_WIRE_MESSAGES(MC_WIRE_OP_ENUM_)
#undef MC_WIRE_OP_ENUM_
} mc_wire_op_t;

#define MC_WIRE_FIELD_DECL_(KIND, name) mc_wire_##KIND##_t name;
#define MC_WIRE_STRUCTS_(UP, low, code)                                            \
    typedef struct mc_wire_##low##_req {                                           \
        MC_WIRE_REQ_##low(MC_WIRE_FIELD_DECL_) uint8_t wire_end_;                  \
    } mc_wire_##low##_req_t;                                                       \
    typedef struct mc_wire_##low##_resp {                                          \
        MC_WIRE_RESP_##low(MC_WIRE_FIELD_DECL_) uint8_t wire_end_;                 \
    } mc_wire_##low##_resp_t;                                                      \
    void mc_wire_encode_##low##_req(mc_buf_t *b, uint32_t request_id,              \
                                    const mc_wire_##low##_req_t *m);               \
    mc_status_t mc_wire_decode_##low##_req(const uint8_t *body, size_t len,        \
                                           mc_arena_t *arena,                      \
                                           mc_wire_##low##_req_t *m);              \
    void mc_wire_encode_##low##_resp(mc_buf_t *b, uint32_t request_id,             \
                                     int32_t status,                               \
                                     const mc_wire_##low##_resp_t *m);             \
    mc_status_t mc_wire_decode_##low##_resp(const uint8_t *body, size_t len,       \
                                            mc_arena_t *arena, int32_t *status_p,  \
                                            mc_wire_##low##_resp_t *m);
MC_WIRE_MESSAGES(MC_WIRE_STRUCTS_)
#undef MC_WIRE_STRUCTS_

/* Name of an opcode ("PUT_START"), NULL if unknown. */
const char *mc_wire_op_name(uint16_t opcode);

/*
 * Largest request body of @p opcode that can decode, from its field list
 * (docs/protocol.md §3): every KEY and STR at its bound, a CONFIG with one
 * group id.  A request with a list field (KEYS, U64S, SEGMENTS, ...) has
 * no bound of its own and gets MC_WIRE_MAX_BODY; so does an unknown
 * opcode.  A server refuses a header announcing more before buffering it.
 */
uint32_t mc_wire_req_max_body(uint16_t opcode);

/*
 * Encode an error response (status != MC_OK) for any opcode: header plus
 * the status, no fields.
 */
void mc_wire_encode_error(mc_buf_t *b, uint16_t opcode, uint32_t request_id,
                          int32_t status);

/* Field-kind codecs (exposed for the unit tests and composite kinds). */
#define MC_WIRE_KIND_DECL_(KIND)                                                   \
    void mc_wire_put_##KIND(mc_buf_t *b, const mc_wire_##KIND##_t *v);             \
    void mc_wire_get_##KIND(mc_rbuf_t *r, mc_arena_t *a, mc_wire_##KIND##_t *v);
MC_WIRE_KIND_DECL_(U8)
MC_WIRE_KIND_DECL_(U32)
MC_WIRE_KIND_DECL_(U64)
MC_WIRE_KIND_DECL_(I32)
MC_WIRE_KIND_DECL_(I64)
MC_WIRE_KIND_DECL_(STR)
MC_WIRE_KIND_DECL_(KEY)
MC_WIRE_KIND_DECL_(UUID)
MC_WIRE_KIND_DECL_(SEGMENT)
MC_WIRE_KIND_DECL_(SEGMENTS)
MC_WIRE_KIND_DECL_(REPLICAS)
MC_WIRE_KIND_DECL_(RESULTS)
MC_WIRE_KIND_DECL_(KEYS)
MC_WIRE_KIND_DECL_(U64S)
MC_WIRE_KIND_DECL_(I32S)
MC_WIRE_KIND_DECL_(CONFIG)
MC_WIRE_KIND_DECL_(TASKS)
#undef MC_WIRE_KIND_DECL_

#endif /* MC_WIRE_WIRE_H */

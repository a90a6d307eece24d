/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command-line flags of mooncake_master, gflags-compatible.
 *
 * Every flag is declared once, in MC_MASTER_FLAGS below: its kind, its
 * name (the upstream name), its default as the string a user would type,
 * a validator, attributes and the help text.  The configuration struct,
 * the parser, the --help output, the refusal of features that are not
 * implemented (MC_FLAG_REFUSE) and the list of tuning flags accepted only
 * for compatibility (MC_FLAG_COMPAT) are all generated from that table, so
 * a flag cannot be documented with one default and parsed with another.
 *
 * Accepted syntax (as gflags): --name=value, --name value, -name=value,
 * -name value; booleans also --name, --noname and --name=true|false (a
 * boolean never consumes the next argument); "--" ends the flags.
 * Positional arguments are rejected.
 *
 * Owns: the one list of flags (MC_MASTER_FLAGS) and mc_master_config_t.
 * May call: nothing; read by scripts/gen_master_conf.py for
 *   mooncake-master.conf.
 */
#ifndef MC_MASTER_FLAGS_H
#define MC_MASTER_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mooncake/status.h>

/* Kinds of flag values and the C type each one is stored as. */
typedef int mc_flag_ctype_BOOL;          /* 0 or 1 */
typedef int64_t mc_flag_ctype_INT;       /* strict base-10 integer */
typedef double mc_flag_ctype_DOUBLE;
typedef char *mc_flag_ctype_STRING;      /* owned by the config, never NULL */
typedef uint64_t mc_flag_ctype_DURATION; /* milliseconds; "500", "500ms", "10s", "2m", "1h" */
typedef uint64_t mc_flag_ctype_SIZE;     /* bytes; "1024", "16MB", "8 GiB" */

typedef enum mc_flag_kind {
    MC_FLAG_KIND_BOOL,
    MC_FLAG_KIND_INT,
    MC_FLAG_KIND_DOUBLE,
    MC_FLAG_KIND_STRING,
    MC_FLAG_KIND_DURATION,
    MC_FLAG_KIND_SIZE
} mc_flag_kind_t;

/* Flag attributes. */
#define MC_FLAG_REFUSE    0x1u /* feature not implemented: only the default value is
                                * accepted, any other refuses to start
                                * (mc_master_config_check) */
#define MC_FLAG_HIDDEN    0x2u /* not listed by --help (process flags) */
#define MC_FLAG_LATER     0x4u /* --help adds "(arrives in a later release)" */
#define MC_FLAG_COMPAT    0x8u /* tuning accepted for compatibility only: no effect
                                * here (its feature is absent or refused); --help
                                * lists it under MC_MASTER_COMPAT_HEADING */

/* The --help heading (and man page section) of the MC_FLAG_COMPAT flags. */
#define MC_MASTER_COMPAT_HEADING \
    "Accepted for compatibility only (tuning of features this build does not have; no effect):"

/* Where a flag's value came from (mc_master_config_t.is_set). */
#define MC_FLAG_SET_ARGV  1
#define MC_FLAG_SET_FILE  2

/*
 * X(KIND, name, default, validator, attributes, help).  validator is a
 * function name from flags.c (v_none accepts anything).  Order is the
 * --help order.  Append new flags where they belong; names are upstream's.
 */
#define MC_MASTER_FLAGS(X)                                                                  \
    /* ---- process ---- */                                                                 \
    X(BOOL, help, "false", v_none, 0, "Print every flag and exit.")            \
    X(BOOL, version, "false", v_none, 0, "Print the version and exit.")        \
    X(STRING, config_path, "", v_none, 0,                                                   \
      "Master configuration file: a JSON object keyed by flag names (client_live_ttl_sec "  \
      "also names client_ttl); flags given on the command line override it. YAML is not "   \
      "supported.")                                                                         \
    X(STRING, log_level, "", v_log_level, 0,                                                \
      "Log threshold: error, warn, info, debug or trace (or 0..4). Empty: $MC_LOG_LEVEL, "  \
      "else info.")                                                                         \
    X(STRING, log_dir, "", v_none, 0,                                                       \
      "Directory of the log file: the master appends its log to "                           \
      "<log_dir>/mooncake_master.log instead of stderr and reopens it on SIGHUP (log "      \
      "rotation).  Empty: stderr.")                                                         \
    /* ---- RPC server ---- */                                                              \
    X(INT, port, "50051", v_port, 0,                                                        \
      "Port of the master RPC server (deprecated alias of --rpc_port).")                    \
    X(INT, rpc_port, "0", v_port, 0, "Port of the master RPC server; 0 uses --port.")       \
    X(STRING, rpc_address, "0.0.0.0", v_nonempty, 0,                                        \
      "Address the RPC server binds to (IPv4, IPv6 or host name).")                         \
    X(STRING, rpc_interface, "", v_none, 0,                                                 \
      "Network interface (e.g. eth0) whose IPv4 address replaces --rpc_address at start "   \
      "(a warning when --rpc_address is not 0.0.0.0); an interface without one is fatal.") \
    X(INT, max_threads, "16", v_positive, MC_FLAG_COMPAT,                                   \
      "Accepted for compatibility (deprecated alias of --rpc_thread_num); the master "      \
      "serves every connection from one event loop.")                                       \
    X(INT, rpc_thread_num, "0", v_nonneg, MC_FLAG_COMPAT,                                   \
      "Accepted for compatibility; the master serves every connection from one event "      \
      "loop.")                                                                              \
    X(INT, rpc_conn_timeout_seconds, "0", v_nonneg, 0,                                      \
      "Close an RPC connection idle for this many seconds (0 = never).")                    \
    X(BOOL, rpc_enable_tcp_no_delay, "true", v_none, 0,                                     \
      "Set TCP_NODELAY on RPC connections.")                                                \
    X(SIZE, rpc_max_batch_frame_size, "64MB", v_batch_frame_size, 0,                        \
      "Largest request body of a message carrying a list (the batch ones, "                 \
      "REMOUNT_SEGMENTS), at most 64 MiB; a message without a list is bounded by its "      \
      "fields (docs/protocol.md).  A larger header closes the connection.")                 \
    X(SIZE, rpc_max_buffered_input, "256MB", v_positive_size, 0,                            \
      "Bytes of unfinished request frames over 256 KiB the master buffers for all "         \
      "connections together; a header that would pass it closes its connection.")          \
    X(STRING, auth_token_file, "", v_none, 0,                                              \
      "Cluster authentication (docs/security.md): a file of shared secrets (\"SECRET\" "     \
      "lines, and \"tenant NAME SECRET\" lines for tenants with their own).  Set, every RPC " \
      "connection must pass an HMAC challenge-response first, the HTTP metadata server "    \
      "refuses unsigned PUT/DELETE, and the admin key listings need a signed request.  "    \
      "Empty: off.")                                                                        \
    X(DURATION, auth_handshake_timeout, "5000", v_positive_duration, 0,                     \
      "With --auth_token_file: close a connection that has not authenticated within this " \
      "long (ms; ms/s/m/h).")                                                               \
    X(INT, log_rate_limit, "10", v_nonneg, 0,                                               \
      "Lines a second each log site may write about what peers send (bad frames, refused " \
      "requests); the next line says how many were suppressed.  0: no limit.")              \
    /* ---- metrics / admin ---- */                                                         \
    X(BOOL, enable_metric_reporting, "true", v_none, 0,                                     \
      "Log a \"master metrics\" line (keys, segments, bytes) every 10 seconds at info.")    \
    X(INT, metrics_port, "9003", v_port, 0,                                                 \
      "Port of the HTTP admin/metrics server (/metrics in Prometheus text, "                \
      "/metrics/summary, /health, /role, /ha_status, /leader, /query_key?key=, "            \
      "/batch_query_keys?keys=, /get_all_keys, /get_all_segments, /get_segments_detail, "   \
      "/query_segment?segment=, /api/v1/tenant_quotas, /kv_events/status); 0 disables it.  When the default port cannot be bound "    \
      "the master runs without it; an explicit port that cannot be bound is fatal.")        \
    X(STRING, metrics_host, "0.0.0.0", v_nonempty, 0,                                       \
      "Address the HTTP admin/metrics server binds to.")                                    \
    /* ---- leases and pins ---- */                                                         \
    X(DURATION, default_kv_lease_ttl, "10000", v_positive_duration, 0,                      \
      "Read lease granted by GetReplicaList/ExistKey (ms; suffixes ms, s, m, h).")          \
    X(DURATION, default_kv_soft_pin_ttl, "1800000", v_none, 0,                              \
      "Soft-pin lifetime when a put asks for ENABLE without a TTL (ms; ms/s/m/h).")         \
    X(DURATION, max_kv_soft_pin_ttl, "86400000", v_none, 0,                                 \
      "Largest soft-pin TTL a put may ask for (ms; ms/s/m/h).")                             \
    X(BOOL, allow_evict_soft_pinned_objects, "true", v_none, 0,                             \
      "Let eviction take soft-pinned objects when not enough others are evictable.")        \
    /* ---- eviction ---- */                                                                \
    X(DOUBLE, eviction_ratio, "0.05", v_ratio, 0,                                           \
      "Share of the store freed by one eviction pass (0..1).")                              \
    X(DOUBLE, eviction_high_watermark_ratio, "0.90", v_ratio, 0,                            \
      "Used/capacity ratio that triggers eviction (0..1).")                                 \
    X(DOUBLE, nof_eviction_ratio, "0.05", v_ratio, 0,                                       \
      "Share of the NoF pool freed by one NoF eviction pass (0..1).")                       \
    X(DOUBLE, nof_eviction_high_watermark_ratio, "0.90", v_ratio, 0,                        \
      "Used/capacity ratio of the NoF pool that triggers NoF eviction (0..1).")             \
    /* ---- clients ---- */                                                                 \
    X(INT, client_ttl, "10", v_positive, 0,                                                 \
      "Seconds a client stays alive after its last ping; then its segments are unmounted "  \
      "and the objects on them dropped.")                                                   \
    X(INT, client_suspect_heartbeats, "2", v_nonneg, 0,                                     \
      "Heartbeats (the client's own ping period) a client may miss before placement stops " \
      "putting new objects on its segments, until it pings again; 0: never.")               \
    /* ---- HTTP metadata server ---- */                                                    \
    X(BOOL, enable_http_metadata_server, "false", v_none, 0,                                \
      "Serve the transfer-engine metadata store (GET/PUT/DELETE /metadata?key=) over "      \
      "HTTP.")                                                                              \
    X(INT, http_metadata_server_port, "8080", v_port, 0, "Port of the HTTP metadata server.") \
    X(STRING, http_metadata_server_host, "0.0.0.0", v_nonempty, 0,                          \
      "Address the HTTP metadata server binds to.")                                         \
    X(SIZE, http_metadata_max_value_size, "16MB", v_positive_size, 0,                       \
      "Largest value one PUT /metadata may store (413 beyond it).")                         \
    X(SIZE, http_metadata_quota, "256MB", v_positive_size, 0,                               \
      "Bytes of keys and values the HTTP metadata store holds; a PUT beyond it is 507 "     \
      "\"metadata store is full\".")                                                        \
    X(BOOL, enable_metadata_cleanup_on_timeout, "false", v_none, 0,                         \
      "When a client expires, delete [mooncake/|mooncake/$MC_METADATA_CLUSTER_ID/]ram/<seg> " \
      "and .../rpc_meta/<seg> of its segments from the embedded HTTP metadata server, else " \
      "from the http(s) server of $MOONCAKE_TE_META_DATA_SERVER or of metadata_server in "  \
      "the JSON at $MOONCAKE_CONFIG_PATH (DELETE <url>?key=, 3 s).")                        \
    /* ---- allocation ---- */                                                              \
    X(STRING, memory_allocator, "offset", v_memory_allocator, 0,                            \
      "Allocator of segment space: offset (cachelib is not available).")                    \
    X(STRING, allocation_strategy, "random", v_none, 0,                                     \
      "Replica placement: random, free_ratio_first, or local_first (single-replica puts "   \
      "go to the writer's host first, then the hosts after it by name, each host's "         \
      "segments from hash(key) onward; random when full).  cxl and ssd_free_ratio_first "    \
      "act as random (no CXL or SSD pools here); any other value: a warning and random.")   \
    X(INT, put_start_discard_timeout_sec, "30", v_nonneg, 0,                                \
      "Seconds after which an unfinished PutStart may be preempted by a new PutStart.")     \
    X(INT, put_start_release_timeout_sec, "600", v_nonneg, 0,                               \
      "Seconds after its PutStart when the space of an unfinished or preempted put is "     \
      "released.")                                                                          \
    X(INT, put_reservation_ttl_sec, "10", v_nonneg, 0,                                     \
      "Seconds a put reservation (one-round-trip puts, PUT_RESERVE/PUT_COMMIT) stays "      \
      "unclaimed before its space is released; 0 grants none (every put takes two round "   \
      "trips).")                                                                            \
    /* ---- high availability ---- */                                                       \
    X(BOOL, enable_ha, "false", v_none, 0,                                                  \
      "High availability: masters elect a leader in --ha_backend_type (an etcd lease or a "  \
      "redis record with a TTL); clients find it with master_server_address="               \
      "etcd://host:port[;host:port] or redis://host:port (docs/ha.md).")                     \
    X(STRING, ha_backend_type, "etcd", v_none, 0,                                           \
      "HA backend, read only with --enable_ha: etcd, redis (needs a build with hiredis) "    \
      "or k8s (refused: needs a Kubernetes API server, and this build has no k8s backend); " \
      "any other value refuses to start.")                                                  \
    X(STRING, ha_backend_connstring, "", v_none, 0,                                         \
      "Connection string of the HA backend: etcd \"h1:2379;h2:2379\", redis "                \
      "\"[redis://]host[:port]\" or \"[v6addr]:port\" (port 6379 by default; "                \
      "MC_REDIS_PASSWORD, MC_REDIS_USERNAME, MC_REDIS_DB_INDEX from the environment). "     \
      "Empty: --etcd_endpoints, for etcd only.")                                             \
    X(STRING, etcd_endpoints, "", v_none, 0,                                                \
      "etcd endpoints host:port separated by ';' (HA mode with --ha_backend_type=etcd, "    \
      "when --ha_backend_connstring is empty).")                                            \
    X(INT, ha_lease_ttl_sec, "5", v_positive, 0,                                            \
      "Seconds of the leader's lease (etcd lease TTL, redis PEXPIRE): a dead leader is "     \
      "replaced within about this "                                                         \
      "long, and a leader that cannot renew it stops serving before it lapses (>= 2).")     \
    X(STRING, cluster_id, "mooncake_cluster", v_cluster_id, 0,                              \
      "Cluster identifier, [0-9A-Za-z_.-]{1,128}.")                                         \
    X(STRING, root_fs_dir, "", v_none, 0,                                                   \
      "Root directory of the DFS tier (dfs_replica_num): an absolute path every client "     \
      "mounts at the same place; shard layout from MOONCAKE_DFS_SHARD_COUNT, "               \
      "MOONCAKE_DFS_SHARD_CAPACITY and MOONCAKE_DFS_ALIGNMENT.")                             \
    X(INT, global_file_segment_size, "9223372036854775807", v_nonneg, MC_FLAG_COMPAT,       \
      "Size of the global file segment in bytes.")                                          \
    /* ---- operation log and snapshots ---- */                                             \
    X(BOOL, enable_oplog, "false", v_none, 0,                                               \
      "Replicate the operation log through etcd (needs --enable_ha=true and "               \
      "--ha_backend_type=etcd): every acknowledged change is in etcd before its answer, "   \
      "and a standby takes over with the full index; no local directory is needed "         \
      "(docs/ha.md).")                                                                      \
    X(INT, oplog_poll_interval_ms, "1000", v_positive, 0,                                   \
      "Standby: read the replicated log at most this often (ms; the log is always read "    \
      "to its end before a takeover), and the base of its back-off after failed reads.")    \
    X(INT, oplog_batch_max_entries, "1024", v_nonneg, 0,                                    \
      "Leader: at most this many records per log entry (etcd key) shipped; 0 means 1.")     \
    X(INT, batch_oplog_retry_timeout_sec, "180", v_nonneg, 0,                               \
      "Standby: after this many seconds of failed log reads in a row, exit (status 1). "    \
      "The leader retries a log write for its lease TTL at most (--ha_lease_ttl_sec).")     \
    X(BOOL, enable_snapshot, "false", v_none, 0,                                            \
      "Durable master: log every acknowledged change to --snapshot_backup_dir before "      \
      "answering, and compact the log with periodic snapshots (docs/ha.md).")               \
    X(BOOL, enable_snapshot_restore, "false", v_none, 0,                                    \
      "At start, restore the index from the newest valid snapshot and the logs after it "   \
      "(needs --enable_snapshot); with --enable_ha, ship the log through etcd so a new "    \
      "leader takes over with the full index.")                                             \
    X(INT, snapshot_interval_seconds, "600", v_positive, 0, "Seconds between snapshots.")  \
    X(INT, snapshot_child_timeout_seconds, "300", v_positive, 0,                            \
      "Seconds a snapshot may take before it is abandoned.")                                \
    X(INT, snapshot_retention_count, "2", v_positive, 0,                                    \
      "Snapshots kept (with the logs since the oldest): a corrupt newest one falls back "   \
      "to an older one.")                                                                   \
    X(STRING, snapshot_backup_dir, "", v_none, 0,                                           \
      "Directory of the operation log and the snapshots (created if missing).")             \
    X(INT, snapshot_restore_grace_seconds, "60", v_positive, 0,                             \
      "After a restore, seconds a segment's owner has to remount it; then the segment "     \
      "and the objects only it held are dropped.")                                          \
    X(STRING, snapshot_object_store_type, "", v_snapshot_store, 0,                          \
      "Snapshot payload store: local (the default; s3 is not available).")                  \
    X(STRING, snapshot_catalog_store_type, "", v_none, MC_FLAG_COMPAT,                      \
      "Snapshot catalog store: embedded or redis.")                                         \
    X(STRING, snapshot_catalog_store_connstring, "", v_none, MC_FLAG_COMPAT,                \
      "Connection string of the snapshot catalog store.")                                   \
    /* ---- copy/move tasks ---- */                                                         \
    X(INT, max_total_finished_tasks, "10000", v_nonneg, 0,                                  \
      "Finished tasks kept in memory.")                                                     \
    X(INT, max_total_pending_tasks, "10000", v_nonneg, 0,                                   \
      "Pending tasks allowed.")                                                             \
    X(INT, max_total_processing_tasks, "10000", v_nonneg, 0,                                \
      "Processing tasks allowed.")                                                          \
    X(INT, pending_task_timeout_sec, "300", v_nonneg, 0,                                    \
      "Seconds a task may stay pending (0 = no limit).")                                    \
    X(INT, processing_task_timeout_sec, "300", v_nonneg, 0,                                 \
      "Seconds a task may stay processing (0 = no limit).")                                 \
    X(INT, max_retry_attempts, "10", v_nonneg, 0,                                           \
      "NO_AVAILABLE_HANDLE retries per task.")                                              \
    /* ---- SSD offload and promotion ---- */                                               \
    X(BOOL, enable_offload, "false", v_none, 0, "Take disk replicas from client SSD tiers (docs/tiers.md).") \
    X(BOOL, offload_on_evict, "false", v_none, 0, "Evict only objects already copied to a disk tier.") \
    X(BOOL, offload_force_evict, "false", v_none, MC_FLAG_COMPAT,                           \
      "Evict even when the offload queue is full.")                                         \
    X(INT, offloading_queue_limit, "50000", v_nonneg, MC_FLAG_COMPAT, "Objects queued for offload.") \
    X(DOUBLE, offload_cap_ratio, "0.5", v_ratio, MC_FLAG_COMPAT, "Share of SSD capacity for offload.") \
    X(BOOL, promotion_on_hit, "false", v_none, 0, "Copy a disk-only object back to memory after enough reads (docs/tiers.md).") \
    X(INT, promotion_admission_threshold, "2", v_positive, 0, "Reads of a disk-only object that promote it.") \
    X(INT, promotion_queue_limit, "50000", v_nonneg, MC_FLAG_COMPAT, "Objects queued for promotion.") \
    X(INT, promotion_max_per_heartbeat, "1", v_nonneg, MC_FLAG_COMPAT, "Promotions per heartbeat.") \
    X(BOOL, enable_disk_eviction, "true", v_none, MC_FLAG_COMPAT, "Evict from the disk tier.") \
    X(INT, quota_bytes, "0", v_nonneg, MC_FLAG_COMPAT, "Disk quota in bytes (0 = 90% of capacity).") \
    /* ---- dynamic replication ---- */                                                     \
    X(STRING, dynamic_replication_mode, "off", v_none, 0,                                   \
      "Dynamic replication of hot objects: off; observe (log keys read at least "           \
      "ceil(qps_threshold x window) times in one heat window); enforce (then queue a copy " \
      "task adding a memory replica on another segment, preferring another host; 30 s "     \
      "cool-down per key).  Any other value: a warning and off.")                           \
    X(INT, dynamic_replication_heat_window_seconds, "10", v_positive, 0,                    \
      "Heat window of dynamic replication (s).")                                            \
    X(DOUBLE, dynamic_replication_admission_qps_threshold, "0.8", v_nonneg_double, 0,       \
      "Reads per second (over a heat window) that make an object hot.")                     \
    X(INT, dynamic_replication_max_memory_replicas, "2", v_positive, 0,                     \
      "Objects with this many memory replicas are not counted (nor copied again).")         \
    /* ---- KV events ---- */                                                               \
    X(BOOL, enable_kv_events, "false", v_none, 0,                                          \
      "Publish KV cache events (stored/removed/cleared) on a ZMQ PUB socket in upstream's " \
      "format (docs/events.md).  Needs --kv_events_bind_endpoint and "                      \
      "--kv_events_backend_id; without them, or when the socket cannot be bound, the "      \
      "error is logged and the master runs without events.  A build without libzmq "        \
      "refuses to start with it.")                                                          \
    X(STRING, kv_events_bind_endpoint, "", v_none, 0,                                       \
      "ZMQ endpoint the KV event PUB socket binds, e.g. tcp://0.0.0.0:5557.")               \
    X(STRING, kv_events_backend_id, "", v_none, 0,                                          \
      "The backend_id every KV event carries (routers key their index by it).")             \
    X(BOOL, kv_events_emit_legacy_compat, "true", v_none, 0,                                \
      "Add the legacy event fields type, block_hashes and parent_block_hash.")             \
    X(BOOL, kv_events_emit_object_key, "true", v_none, 0,                                   \
      "Add object_key to every event; also publishes keys that are no u64 (empty hash "     \
      "lists) instead of skipping them.")                                                   \
    X(INT, kv_events_queue_capacity, "65536", v_nonneg, 0,                                  \
      "KV events waiting to be sent; past it the oldest is dropped and its sequence "       \
      "number skipped.  0 = unbounded.")                                                    \
    X(STRING, kv_events_model_name, "", v_none, MC_FLAG_COMPAT,                             \
      "Deprecated: never emitted (routers take it from their registration).")               \
    X(STRING, kv_events_tenant_id, "default", v_none, MC_FLAG_COMPAT,                       \
      "Deprecated: never emitted (events carry each object's tenant).")                    \
    X(STRING, kv_events_additional_salt, "", v_none, MC_FLAG_COMPAT,                        \
      "Deprecated: never emitted.")                                                         \
    X(STRING, kv_events_lora_name, "", v_none, MC_FLAG_COMPAT, "Deprecated: never emitted.") \
    X(INT, kv_events_block_size, "0", v_nonneg, MC_FLAG_COMPAT,                             \
      "Deprecated: never emitted (routers take it from their registration).")               \
    X(INT, kv_events_dp_rank, "0", v_nonneg, MC_FLAG_COMPAT,                                \
      "Deprecated: never emitted (routers take it from their registration).")               \
    /* ---- NVMe-oF pool ---- */                                                            \
    X(INT, nof_heartbeat_interval_sec, "10", v_positive, MC_FLAG_COMPAT, "NVMe-oF heartbeat period (s).") \
    X(INT, nof_heartbeat_probe_timeout_ms, "1000", v_positive, MC_FLAG_COMPAT,              \
      "Timeout of one NVMe-oF heartbeat probe (ms).")                                       \
    X(INT, nof_heartbeat_failures_threshold, "3", v_positive, MC_FLAG_COMPAT,               \
      "Consecutive failed NVMe-oF heartbeats before the master unmounts that segment.")     \
    /* ---- tenants ---- */                                                                 \
    X(BOOL, enable_multi_tenants, "false", v_none, 0,                                       \
      "Off (upstream's default): a client's tenant_id is ignored and every client shares "  \
      "tenant default.  On: tenants are key namespaces; a tenant writes only when the "     \
      "quota policy names it (else TENANT_NOT_REGISTERED -1701) and within its quota "      \
      "(TENANT_QUOTA_EXCEEDED -1700); admin API /api/v1/tenant_quotas.")                    \
    X(STRING, tenant_quota_connector_type, "file", v_none, 0,                               \
      "Source of the tenant quota policy: file (etcd is not available in this build).")    \
    X(STRING, tenant_quota_connector_uri, "", v_none, 0,                                    \
      "YAML quota policy (version: 1, tenants: [{name, quota}]; quota with B/KB/MB/GB/TB); " \
      "rewritten by the admin API.  Empty: no tenant registered.")                          \
    /* ---- Kubernetes ---- */                                                              \
    X(STRING, pod_name, "", v_none, MC_FLAG_COMPAT, "Pod name for the k8s HA backend.")     \
    X(STRING, pod_namespace, "", v_none, MC_FLAG_COMPAT, "Pod namespace for the k8s HA backend.") \
    /* ---- CXL ---- */                                                                     \
    X(BOOL, enable_cxl, "false", v_none, MC_FLAG_REFUSE, "Mount a CXL memory device as a segment.") \
    X(STRING, cxl_path, "/dev/dax0.0", v_none, MC_FLAG_COMPAT, "DAX device of the CXL memory.") \
    X(SIZE, cxl_size, "8589934592", v_none, MC_FLAG_COMPAT, "CXL memory size (bytes; KB/MB/GB suffixes).")

/* Index of each flag: MC_MASTER_FLAG_port, ... */
typedef enum mc_master_flag_id {
#define MC_MASTER_FLAG_ID_(KIND, name, def, valid, attrs, help) MC_MASTER_FLAG_##name,
    MC_MASTER_FLAGS(MC_MASTER_FLAG_ID_)
#undef MC_MASTER_FLAG_ID_
    MC_MASTER_FLAG_COUNT
} mc_master_flag_id_t;

/* The parsed configuration: one field per flag, named like the flag. */
typedef struct mc_master_config {
#define MC_MASTER_FLAG_FIELD_(KIND, name, def, valid, attrs, help) mc_flag_ctype_##KIND name;
    MC_MASTER_FLAGS(MC_MASTER_FLAG_FIELD_)
#undef MC_MASTER_FLAG_FIELD_
    /* is_set[MC_MASTER_FLAG_x]: 0 default, MC_FLAG_SET_ARGV given on the
     * command line (last one wins), MC_FLAG_SET_FILE read from --config_path. */
    uint8_t is_set[MC_MASTER_FLAG_COUNT];
} mc_master_config_t;

/* Every flag at its default.  MC_INTERNAL_ERROR only when out of memory. */
mc_status_t mc_master_config_init(mc_master_config_t *cfg);
/* Frees the strings; accepts a config that init left half-built. */
void mc_master_config_cleanup(mc_master_config_t *cfg);

/*
 * Parse argv[1..argc-1] into @p cfg (initialised by mc_master_config_init).
 * Never exits and never prints: on MC_INVALID_PARAMS, @p err holds one
 * line naming the flag and the problem ("unknown command line flag
 * 'prot'", "invalid value 'abc' for flag 'port': not an integer").
 * --help and --version only set cfg->help / cfg->version.
 *
 * Then, unless --help or --version was given, the JSON object named by
 * --config_path fills every flag the command line did not set (whatever
 * the order of the arguments).  Keys are flag names, deprecated aliases,
 * or client_live_ttl_sec (upstream's file name of client_ttl); values are
 * JSON strings (parsed like the command line), booleans (bool flags) or
 * numbers (int, double, duration and size flags).  An unreadable file,
 * invalid JSON (with line and column), a non-object, an unknown,
 * duplicate or command-line-only key (config_path, help, version), a value
 * of the wrong type or an invalid value is MC_INVALID_PARAMS with @p err
 * naming the file and key, and leaves the flags untouched.
 */
mc_status_t mc_master_flags_parse(mc_master_config_t *cfg, int argc, char **argv, char *err,
                                  size_t errlen);

/*
 * Checks after parsing; MC_INVALID_PARAMS with a message.  Refuses every
 * MC_FLAG_REFUSE flag (a feature this build does not implement: HA,
 * SSD offload, ...) whose value is not its default, naming the
 * flag, so a command line or file that asks for the feature does not run
 * without it; then the checks across flags.
 */
mc_status_t mc_master_config_check(const mc_master_config_t *cfg, char *err, size_t errlen);

/* The port the RPC server listens on: rpc_port when > 0, else port. */
uint16_t mc_master_config_rpc_port(const mc_master_config_t *cfg);

/* Print every visible flag with its default and help text. */
void mc_master_flags_print_help(FILE *out, const char *argv0);

/*
 * Log a warning for every MC_FLAG_COMPAT flag whose value is not its
 * default (it has no effect), and for deprecated or ignored settings.
 */
void mc_master_flags_warn_unimplemented(const mc_master_config_t *cfg);

/* Look a flag up by name (for tests and diagnostics); -1 if unknown. */
int mc_master_flag_find(const char *name);

#endif /* MC_MASTER_FLAGS_H */

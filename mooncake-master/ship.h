/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log shipped through etcd (docs/ha.md, "Takeover with the
 * full index"): with --enable_ha --enable_snapshot --enable_snapshot_restore
 * the leader's group-commit rounds go to etcd instead of a local file, in
 * transactions fenced by its term, and standbys follow them into a replay
 * state that a new leader installs before it serves.
 *
 * Keys under mooncake-store/<cluster_id>/oplog/:
 *   log/<seq>        u64 term (LE) + record bytes; one or more keys per
 *                    group-commit round (split at MC_SHIP_PIECE bytes)
 *   snap/<seq>/<n>   chunk n of a snapshot of the state after log/<seq>
 *   snapmeta         "<seq> <nchunks>" of the newest complete snapshot
 * <seq> and <n> are 16 hex digits, so key order is numeric order.
 *
 * Threads: the sink (append/sync) runs on the log writer thread, the
 * follower on the election thread (ha.c) while standing by; the state is
 * handed from one to the other at takeover through the event loop
 * (mc_ship_install_pending / mc_durable_ship_install).
 */
#ifndef MC_MASTER_SHIP_H
#define MC_MASTER_SHIP_H

#include <stdatomic.h>
#include <stdint.h>

#include "oplog.h"

struct mc_etcd;

#define MC_SHIP_PIECE (768u << 10) /* bytes of records per etcd key (base64: ~1 MiB) */
#define MC_SHIP_COMPACT_BYTES (64ull << 20) /* log bytes that trigger a snapshot */

typedef struct mc_ship mc_ship_t;

/* A shipper for cluster @p cluster_id over etcd @p endpoints; guard key is
 * the leader key.  @p ttl_s bounds the retries of a failed etcd write;
 * @p compact_ms is the longest time between snapshots while writes come. */
mc_ship_t *mc_ship_create(const char *endpoints, const char *cluster_id, int64_t ttl_s,
                          uint64_t compact_ms);
void mc_ship_destroy(mc_ship_t *s);

/* The writer's sink (owned by the writer; it does not free @p s). */
mc_oplog_sink_t *mc_ship_sink(mc_ship_t *s);

/* Standby, election thread: read what the leader appended since the last
 * call (a snapshot first when the log before it is gone).  0, or -1 when
 * etcd did not answer or the log is refused (corrupt): the caller must not
 * take over on a log it could not read to the end. */
int mc_ship_follow(mc_ship_t *s, struct mc_etcd *e);

/* Elected with @p term: the state is ready to install (the loop does it). */
void mc_ship_elected(mc_ship_t *s, int64_t term);
/* The loop: is a takeover state waiting?  Then install it and call done. */
int mc_ship_install_pending(mc_ship_t *s);
mc_oplog_state_t *mc_ship_state(mc_ship_t *s);
void mc_ship_installed(mc_ship_t *s);

/* For /metrics and tests. */
typedef struct mc_ship_stats {
    uint64_t applied_seq;    /* last log key applied (standby) or written (leader) */
    uint64_t snapshot_seq;   /* of the last snapshot written or loaded */
    uint64_t snapshots;      /* written by this master */
    uint64_t refused;        /* log entries refused (CRC, framing) */
    uint64_t puts;           /* etcd txns of log keys */
} mc_ship_stats_t;
void mc_ship_get_stats(mc_ship_t *s, mc_ship_stats_t *st);

#endif /* MC_MASTER_SHIP_H */

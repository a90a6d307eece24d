/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log shipped through etcd (docs/ha.md, "Takeover with the
 * full index"): with --enable_ha --enable_oplog (or --enable_ha
 * --enable_snapshot --enable_snapshot_restore) the leader's group-commit
 * rounds go to etcd instead of a local file, several transactions in
 * flight, each fenced by its term, and standbys follow them into a replay
 * state that a new leader installs before it serves.
 *
 * Keys under mooncake-store/<cluster_id>/oplog/:
 *   log/<seq>        u64 term (LE) + record bytes; one or more keys per
 *                    group-commit round (split at --oplog_batch_max_entries
 *                    records or MC_SHIP_PIECE bytes)
 *   snap/<seq>/<n>   chunk n of a snapshot of the state after log/<seq>
 *   snapmeta         "<seq> <nchunks>" of the newest complete snapshot
 * <seq> and <n> are 16 hex digits, so key order is numeric order.
 *
 * Threads: the sink (submit) runs on the log writer thread, codes each
 * log key's value and queues it for MC_SHIP_WORKERS threads of its own;
 * a free one sends every key queued (up to MC_SHIP_TXN_KEYS keys and 1 MiB)
 * in one fenced transaction (group commit), and they report rounds durable
 * in order; a fold thread of its own, at a lower priority, folds durable
 * rounds into the replay state for the snapshots; the follower runs on
 * the election thread (ha.c) while
 * standing by; the state is
 * handed from one to the other at takeover through the event loop
 * (mc_ship_install_pending / mc_durable_ship_install).
 *
 * Owns: the interface of the shipped log (durability/).
 * May call: nothing.
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

#define MC_SHIP_WORKERS 4 /* transactions in flight to etcd at once */

typedef struct mc_ship_config {
    const char *endpoints;  /* etcd, host:port[;host:port] */
    const char *cluster_id; /* the guard is this cluster's leader key */
    int64_t ttl_s;          /* the lease: bounds the leader's retries of an etcd write */
    uint64_t compact_ms;    /* longest time between snapshots while writes come */
    uint32_t batch_entries; /* records per log key at most (0 -> 1) */
    uint64_t poll_ms;       /* standby: read the log at most this often (at least 1) */
    uint64_t retry_ms;      /* standby: failed reads in a row this long -> exit 1 */
} mc_ship_config_t;

mc_ship_t *mc_ship_create(const mc_ship_config_t *cfg);
void mc_ship_destroy(mc_ship_t *s);

/* The writer's sink (owned by the writer; it does not free @p s). */
mc_oplog_sink_t *mc_ship_sink(mc_ship_t *s);

/* Standby, election thread: read what the leader appended since the last
 * read (a snapshot first when the log before it is gone), at most every
 * poll_ms; failed reads back off (poll_ms doubled up to max(5 s,
 * poll_ms)) and, failing for retry_ms in a row, end the process (status
 * 1), as upstream's standby does.  0, or -1 when etcd did not answer or
 * the log is refused (corrupt): the caller must not take over on a log it
 * could not read to the end. */
int mc_ship_follow(mc_ship_t *s, struct mc_etcd *e);

/* Elected with @p term: reads the log to its end if a poll was skipped;
 * the state is then ready to install (the loop does it), unless
 * mc_ship_takeover_ok() says that read failed. */
void mc_ship_elected(mc_ship_t *s, int64_t term);
int mc_ship_takeover_ok(mc_ship_t *s);
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
    uint64_t puts;           /* log keys written to etcd */
} mc_ship_stats_t;
void mc_ship_get_stats(mc_ship_t *s, mc_ship_stats_t *st);

#endif /* MC_MASTER_SHIP_H */

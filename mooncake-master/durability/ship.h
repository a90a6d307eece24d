/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log shipped through etcd (docs/ha.md, "Takeover with the
 * full index"): with --enable_ha --enable_oplog (or --enable_ha
 * --enable_snapshot --enable_snapshot_restore) the leader's group-commit
 * rounds go to etcd instead of a local file, in fenced transactions that
 * each carry the rounds queued meanwhile, and standbys follow them into a
 * replay state that a new leader installs before it serves.
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
 * in one fenced transaction (group commit), after waiting at most
 * MC_SHIP_GATHER_US for the records of the clients its last one answered,
 * and they report rounds durable in order; the snapshots are walked from
 * the leader's index by the loop (snapshot.c) and written by a thread of their own; the follower runs
 * on the election thread (ha.c) while standing by and folds the log into
 * a replay state, which the loop installs at takeover
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

/* Transactions in flight to etcd at once.  One: on a 3-member etcd two
 * concurrent transactions each took 5-12 ms against 3.5-5.5 ms for one
 * alone (its WAL synced once per proposal), so the second one bought no
 * throughput, only more commits; gathering the rounds into one
 * transaction instead (MC_SHIP_GATHER_US) halves the commits. */
#define MC_SHIP_WORKERS 1
/* A free writer waits at most this long after its last transaction for
 * as many records as that one carried plus those queued when it ended
 * (ship.c, gather_ready). */
#define MC_SHIP_GATHER_US 4000
/* ... and no longer than this after the last round queued since it, once
 * one has been: the answered clients have sent what they will.  Clients
 * that keep a window and send again when half of it is answered do not
 * answer a transaction that carried only part of that half, so the count
 * is not always reached; without this the writer then sat out the rest
 * of MC_SHIP_GATHER_US (in meta_bench against 3 members, 18 transactions
 * of 34 in the slow runs, 2.3 ms each).  Rounds of a loop turn come
 * 0.1-0.6 ms apart on the loaded development VM. */
#define MC_SHIP_GATHER_QUIET_US 700

typedef struct mc_ship_config {
    const char *endpoints;  /* etcd, host:port[;host:port] */
    const char *cluster_id; /* the guard is this cluster's leader key */
    int64_t ttl_s;          /* the lease: bounds the leader's retries of an etcd write */
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
/* Installed: the state is emptied (the index holds it), the log goes on. */
void mc_ship_installed(mc_ship_t *s);

/* The loop: is this master the leader, its state installed? */
int mc_ship_leading(mc_ship_t *s);
/*
 * A snapshot of the leader's index, walked by the loop.  begin, at the
 * walk's start, takes the writer's sequence number of the last record
 * appended before it (mc_oplog_writer_appended); -1 while the previous
 * snapshot is still being written to etcd (try later).  add appends the
 * walk's records (copied).  publish, at the walk's end, takes the
 * writer's sequence number of the last record appended by then: a thread
 * writes the records to etcd once every record up to it is durable, as
 * the snapshot after the last log key whose round ends at or before
 * begin's sequence number, and deletes the log keys up to that one.
 * abort: the walk gave up (its records are dropped).
 */
int mc_ship_snapshot_begin(mc_ship_t *s, uint64_t rec_seq);
void mc_ship_snapshot_add(mc_ship_t *s, const void *data, size_t len);
void mc_ship_snapshot_publish(mc_ship_t *s, uint64_t rec_seq);
void mc_ship_snapshot_abort(mc_ship_t *s);

/* A log value's delta code (ship_code.c): the
 * @p n bytes of whole records at @p d coded onto the end of @p out, and a
 * coded value back into its records onto the end of @p out (@p scratch:
 * a buffer of the caller's).  -1 when the bytes are not whole records (or
 * out of memory), or when a coded value is malformed or its CRC does not
 * match. */
int mc_ship_encode(mc_buf_t *out, mc_buf_t *scratch, const uint8_t *d, size_t n);
int mc_ship_decode(mc_buf_t *out, mc_buf_t *scratch, const uint8_t *p, size_t n);

/* For /metrics and tests. */
typedef struct mc_ship_stats {
    uint64_t applied_seq;    /* last log key applied (standby) or durable (leader) */
    uint64_t snapshot_seq;   /* of the last snapshot written or loaded */
    uint64_t snapshots;      /* written by this master */
    uint64_t refused;        /* log entries refused (CRC, framing) */
    uint64_t puts;           /* log keys written to etcd */
} mc_ship_stats_t;
void mc_ship_get_stats(mc_ship_t *s, mc_ship_stats_t *st);

#endif /* MC_MASTER_SHIP_H */

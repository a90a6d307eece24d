/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The durable master (--enable_snapshot): the operation log of every
 * acknowledged state change, snapshots that compact it, and the restore
 * at start (docs/ha.md, "Durability").
 *
 * Hooks, installed as the master's journal (master.h) while the log is
 * on, through which index/ reports each durable change:
 *   mc_durable_object()   an object became complete or changed while
 *                         complete (PUT_END, UPSERT_END, a replica added
 *                         or dropped): OBJ_SET with its whole state;
 *   mc_durable_erase()    a complete object left the index, or an in-place
 *                         upsert started overwriting its bytes: OBJ_DEL;
 *   mc_durable_segment()  a segment was mounted or unmounted.
 * rpc.c holds the answers of a loop turn until mc_durable_pending() is
 * false for them (mc_master_rpc_release() runs when records become
 * durable).
 *
 * Owns: the interface of the durable master (durability/).
 * May call: nothing.
 */
#ifndef MC_MASTER_SNAPSHOT_H
#define MC_MASTER_SNAPSHOT_H

#include <stdint.h>

#include "master.h"
#include "oplog.h"

/* Restore (with --enable_snapshot_restore), then open the log.  Called
 * by mc_master_create() once the parts exist, before the listeners. */
mc_status_t mc_durable_start(mc_master_t *m);
/* At shutdown, before the connections close: wait (10 s at most) until
 * what was appended is durable and send the answers held for it. */
void mc_durable_drain(mc_master_t *m);
/* Write out and sync what was appended, stop the writer and abandon a
 * snapshot being written. */
void mc_durable_stop(mc_master_t *m);
/* Snapshot schedule, snapshot child, end of the remount grace period. */
void mc_durable_tick(mc_master_t *m, uint64_t now_ms);

void mc_durable_object(mc_master_t *m, const mc_object_t *o);
void mc_durable_erase(mc_master_t *m, const mc_object_t *o);
void mc_durable_segment(mc_master_t *m, const mc_segment_t *seg, int mounted);
/* A task was created or changed state (@p live), or was forgotten. */
void mc_durable_task(mc_master_t *m, const mc_task_t *t, int live);

/* Sequence number an answer produced now must wait for; 0 when nothing
 * appended is still waiting for its sync. */
uint64_t mc_durable_pending(mc_master_t *m);
/* Release the answers whose records became durable since the loop last
 * looked (rpc.c, between connections' requests): a round that ends while
 * the loop works through a turn is answered then, not after the turn. */
void mc_durable_poll(mc_master_t *m);

/* With --enable_ha and --enable_snapshot_restore: the log shipped through
 * etcd (ship.h), else NULL. */
struct mc_ship;
struct mc_ship *mc_durable_ship(mc_master_t *m);
/* The loop, at takeover: install the followed state, then serve. */
mc_status_t mc_durable_ship_install(mc_master_t *m);

/* Snapshot counters for /metrics. */
typedef struct mc_durable_stats {
    uint64_t snapshots_ok;
    uint64_t snapshots_failed;
    uint64_t last_snapshot_ms;   /* duration of the last snapshot */
    uint64_t last_pause_us;      /* longest loop pause of the last snapshot's walk */
    uint64_t max_pause_us;       /* ... of every snapshot since start */
    uint64_t log_rounds;         /* write + sync rounds */
    uint64_t log_records;
    uint64_t log_bytes;
    uint64_t restored_objects;
    uint64_t restored_segments;
    uint64_t restored_tasks;
} mc_durable_stats_t;
int mc_durable_get_stats(mc_master_t *m, mc_durable_stats_t *st);

/* ---- rpc.c --------------------------------------------------------------- */

/* Send the answers held for records up to @p durable_seq. */
void mc_master_rpc_release(mc_master_t *m, uint64_t durable_seq);

#endif /* MC_MASTER_SNAPSHOT_H */

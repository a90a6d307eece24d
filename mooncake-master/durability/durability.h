/* SPDX-License-Identifier: Apache-2.0 */
/*
 * durability/: the door of the durable master (--enable_snapshot,
 * docs/ha.md "Durability").  Other folders include this header and no
 * other file of durability/.
 *
 * Owns: the operation log's records, framing and replay state (oplog.c,
 * oplog.h: no master types, so the unit tests and the fuzzer build it
 * alone), the log writer, snapshots and the restore at start
 * (snapshot.c, snapshot.h: the mc_durable_* hooks, installed as the
 * master's journal), and the log shipped through etcd to standbys
 * (ship.c, ship.h).
 *
 * May call: ../master.h, index/ (restore rebuilds objects and segments;
 * the LRU), ha/ (the endpoints, whether serving), rpc.c
 * (mc_master_rpc_release, declared in snapshot.h: answers sent once
 * durable), libmooncake's common/ and coord/etcd.  Called by: rpc.c
 * (answers held until durable), master.c (start, stop), ha/ (the shipped
 * log at takeover) and admin/ (metrics); index/ reaches it only through
 * the journal table (master.h) and includes this header for the log
 * record a restore reads.
 */
#ifndef MC_MASTER_DURABILITY_H
#define MC_MASTER_DURABILITY_H

#include "oplog.h"
#include "ship.h"
#include "snapshot.h"

#endif /* MC_MASTER_DURABILITY_H */

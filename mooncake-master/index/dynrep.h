/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --dynamic_replication_mode (upstream C.10): replicas for hot objects.
 *
 * Reads (GET_REPLICA_LIST and its batch) of a complete object with at
 * least one readable memory replica and fewer than
 * --dynamic_replication_max_memory_replicas of them are counted per key in
 * fixed windows of --dynamic_replication_heat_window_seconds; at
 * ceil(--dynamic_replication_admission_qps_threshold x window) reads in one
 * window the key is hot.  observe logs it; enforce queues a copy task
 * (the ordinary copy task of docs/protocol.md, run by a client's task
 * executor) to one more segment: one without the key, taking allocations,
 * with room and under 85 % used after the copy, preferring a host that
 * holds no replica yet, then the less used segment, then a stable hash of
 * key and segment.  A key is not acted on again for 30 s after a proposal
 * (its entry, with that time, is kept 60 s).  off (and any unknown value,
 * with a warning at start) does nothing.
 *
 * Owns: the dynamic replication interface (index/).
 * May call: nothing.
 */
#ifndef MC_MASTER_DYNREP_H
#define MC_MASTER_DYNREP_H

#include "master.h"

/* A read of @p o served to @p x (queries.c: get_one). */
void mc_master_dynrep_hit(mc_req_ctx_t *x, mc_object_t *o);
/* Free the heat table (master teardown). */
void mc_master_dynrep_stop(mc_master_t *m);

#endif /* MC_MASTER_DYNREP_H */

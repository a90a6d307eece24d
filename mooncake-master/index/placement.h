/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placement that depends on the key and on the writer (segments.c), beside
 * mc_master_segments_allocate() of master.h, which knows neither.
 *
 * Owns: key- and writer-dependent placement's interface (index/).
 * May call: nothing.
 */
#ifndef MC_MASTER_PLACEMENT_H
#define MC_MASTER_PLACEMENT_H

#include "master.h"

/*
 * mc_master_segments_allocate() with --allocation_strategy=local_first
 * (upstream C.8) for a single-replica put of @p key by @p writer: after
 * the preferred segment, the segments of the writer's host (the host part
 * of its segments' names; localhost, 127.0.0.1, 0.0.0.0 and ::1 name no
 * host), then of the hosts after it in name order (wrapping), each host's
 * segments tried from hash(key) % n onward; when none has room, or the
 * writer has no host, or another strategy is set, the usual placement.
 * @p writer may be NULL.
 */
uint32_t mc_master_segments_allocate_keyed(mc_master_t *m, uint64_t size, uint32_t want,
                                           mc_str_t preferred, const mc_client_t *local,
                                           const mc_client_t *writer, mc_str_t key,
                                           mc_replica_t **out);

/*
 * Whether some segment of @p v (the memory segments, or the NoF pool's)
 * takes writes now (mounted and serving, its owner not suspect), full or
 * not.  A placement that failed with none such was not short of room:
 * evicting objects would free space no write can use.
 */
int mc_master_any_writable(mc_master_t *m, mc_segment_t *const *v, uint32_t n, uint64_t now_ms);

#endif /* MC_MASTER_PLACEMENT_H */

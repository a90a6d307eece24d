/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segments/: the door of the memory this client contributes.  Other
 * folders include this header and no other file of segments/.
 *
 * Owns: the global segments (segment.c: setup's, mapped from a memfd,
 * registered and mounted; mount.c: mount_segment,
 * allocate_and_mount_segment and their unmounts, graceful with a drain)
 * and the staging buffer's creation (its mapping is read/'s).
 *
 * May call: ../store_internal.h (calls.c), ../read/read.h (the staging
 * buffer's mapping), the master pool, the engine.  Called by: store.c
 * (setup, close), ../threads/heartbeat.c (remount, reaping), ../threads/
 * http.c, the dummy (populate, its server's mappings).
 */
#ifndef MC_STORE_SEGMENTS_H
#define MC_STORE_SEGMENTS_H

#include <stdint.h>

#include "store/store_internal.h"

/* segment.c: global segment and local buffer.  Called with `life` held
 * for writing (setup/close). */
mc_status_t mc_store_segment_add(mc_store_h s, uint64_t size);
/* INVALID_PARAMS (with the detail set) when @p size is more than the
 * host's RAM and swap together; @p what names the setting. */
mc_status_t mc_store_segment_size_check(uint64_t size, const char *what);
/* How shared memory this client maps is faulted in: MC_STORE_POPULATE (1,
 * the default: all at once when mapped; 0: each page on first touch) and
 * MC_STORE_POPULATE_THREADS (1..64; default the CPUs available, at most
 * 8).  *threads_p (unless NULL: a check) is 0 when off.  INVALID_PARAMS, logged and naming the
 * variable, for any other value.  mc_store_populate: mc_populate() of a
 * fresh mapping as those say (best effort: a declined range is logged). */
mc_status_t mc_store_populate_config(unsigned *threads_p);
void mc_store_populate(void *base, size_t len);
/* Map seg->map_len bytes of fresh shared memory (a sealed memfd when the
 * kernel allows, seg->fd; anonymous memory otherwise, seg->fd -1) at
 * seg->base, populated (mc_store_populate).  @p fail_status with a detail
 * on failure. */
mc_status_t mc_store_segment_map(mc_store_segment_t *seg, mc_status_t fail_status);
void mc_store_segments_release(mc_store_h s);
/* Register @p seg (mapped by the caller: base, map_len, fd, size, id,
 * kind) with the engine under @p location, MOUNT_SEGMENT it and record it.
 * On failure the mapping is released.  Any thread holding `life`. */
mc_status_t mc_store_segment_attach(mc_store_h s, mc_store_segment_t *seg,
                                    const char *location);
/* Unregister and unmap a segment no longer recorded in s->segs. */
void mc_store_segment_unmap(mc_store_h s, mc_store_segment_t *seg);
/* mount.c: UNMOUNT_SEGMENT and unmap every draining segment whose grace
 * period is over (heartbeat thread, on its own connection). */
void mc_store_segments_reap(mc_store_h s, mc_mconn_t *conn);
/* Copy the segment list for REMOUNT_SEGMENTS into @p arena; with @p fence,
 * each segment first moves to a fence of its own (mc_te_gen_fence). */
mc_status_t mc_store_segments_to_wire(mc_store_h s, mc_arena_t *arena,
                                      mc_wire_segment_list_t *list, int fence);
mc_status_t mc_store_lbuf_init(mc_store_h s, uint64_t size);
void mc_store_lbuf_cleanup(mc_store_h s);

#endif /* MC_STORE_SEGMENTS_H */

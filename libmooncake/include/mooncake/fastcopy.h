/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file fastcopy.h
 * @brief Gathering many small source buffers into one destination buffer.
 *
 * A structured object member made of ragged rows (a list of arrays of one
 * element type but different lengths) is stored as the rows back to back.
 * Writing it through registered staging memory needs exactly one copy of
 * every row into that memory; mc_fastcopy_gather() is that copy, done
 * without building an intermediate concatenation first and, for large
 * inputs, split across a few threads.
 *
 * Pure memory work: no store, no allocation besides the helper threads'
 * stacks, thread-safe (the caller keeps every buffer alive and unchanged
 * for the duration of the call).
 */
#ifndef MOONCAKE_FASTCOPY_H
#define MOONCAKE_FASTCOPY_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/visibility.h>
#include <mooncake/status.h>
#include <mooncake/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most threads mc_fastcopy_gather() uses for one call. @since 0.2 */
#define MC_FASTCOPY_MAX_THREADS 64

/**
 * Below this many bytes in total mc_fastcopy_gather() copies on the
 * calling thread only: starting threads would cost more than it saves.
 * @since 0.2
 */
#define MC_FASTCOPY_THREAD_MIN_BYTES (4u << 20)

/**
 * @brief Copy @p n source buffers back to back into @p dst.
 *
 * Source i (srcs[i].base, srcs[i].len bytes) lands at @p dst plus the sum
 * of the lengths of sources 0..i-1.  Sources of length 0 may have a NULL
 * base.  The sources must not overlap the destination.
 *
 * @p nthreads (clamped to [1, MC_FASTCOPY_MAX_THREADS]) splits the output
 * into that many equal byte ranges, each copied by its own thread (the
 * calling thread takes the first); totals under
 * MC_FASTCOPY_THREAD_MIN_BYTES are copied by the calling thread alone.  A
 * thread that cannot be started leaves its range to the calling thread,
 * so the result never depends on thread creation.
 *
 * @param dst        destination; may be NULL only when the total is 0
 * @param dst_size   bytes available at @p dst
 * @param srcs       the sources, in output order; may be NULL when @p n is 0
 * @param n          number of sources
 * @param nthreads   threads to use (0 is taken as 1)
 * @param copied_p   on success, the total bytes copied (may be NULL)
 * @return MC_OK; MC_INVALID_PARAMS (nothing copied) when @p srcs is NULL
 *         with @p n > 0, a source of nonzero length has a NULL base, the
 *         lengths overflow, the total exceeds @p dst_size ("destination
 *         buffer too small" in mc_last_error_detail()), or @p dst is NULL
 *         with a nonzero total.
 * @since 0.2
 */
MC_API mc_status_t mc_fastcopy_gather(void *dst, size_t dst_size, const mc_iov_t *srcs,
                                      size_t n, unsigned nthreads, size_t *copied_p);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_FASTCOPY_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mc_copy_stream(): a memcpy for many rows of a larger copy (the rows of
 * a ranged read, scattered over a destination), with non-temporal stores
 * where the CPU has them.  A row-sized memcpy writes through the cache and
 * so first reads every destination line it fills; streaming stores skip
 * that read, which on the development VM made 2 KiB rows of a 512 MiB
 * copy about twice as fast (the speed of one large memcpy, which glibc
 * already streams).  Callers issue mc_copy_stream_fence() after the last
 * row, before anyone else may look at the destination.
 */
#ifndef MC_COMMON_COPY_H
#define MC_COMMON_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>

/* Rows shorter than this are copied with memcpy. */
#define MC_COPY_STREAM_MIN 256

static inline void mc_copy_stream(void *dst, const void *src, size_t len)
{
    uint8_t *d       = dst;
    const uint8_t *s = src;
    size_t head;

    if (len < MC_COPY_STREAM_MIN) {
        memcpy(d, s, len);
        return;
    }
    /* Up to the first cache line: streaming stores then fill whole lines
     * only.  Aligned to 16 bytes alone, a row not starting on a line (rows
     * of 4-12 KiB at 4-byte offsets: a DataProto's token ids) streamed
     * parts of its first and last lines beside the cached stores of its
     * neighbours' ends -- partial write-combining flushes and lines
     * evicted from the cache -- which made such a copy 1.5x slower than
     * one of 8 KiB rows (16 MiB: 1.36-1.48 -> 0.92-1.00 ms, fastest of 60). */
    head = (64 - ((uintptr_t)d & 63)) & 63;
    memcpy(d, s, head);
    d += head;
    s += head;
    len -= head;
    for (; len >= 64; d += 64, s += 64, len -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
    memcpy(d, s, len);
}

/* The streamed rows are visible before what follows. */
static inline void mc_copy_stream_fence(void)
{
    _mm_sfence();
}

#else /* no streaming stores: plain copies */

static inline void mc_copy_stream(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}

static inline void mc_copy_stream_fence(void)
{
}

#endif

#endif /* MC_COMMON_COPY_H */

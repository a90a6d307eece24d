/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mc_fastcopy_gather() (include/mooncake/fastcopy.h): ragged rows straight
 * into staging memory.
 *
 * The output is one contiguous byte range; splitting it into equal byte
 * ranges (not equal numbers of sources) balances threads even when one
 * row is much longer than the others.  Each worker finds the first source
 * that overlaps its range by a binary search over the prefix sums, then
 * copies the overlapping parts in order.  The prefix sums are computed
 * once, on the calling thread, which is also where every check happens:
 * workers cannot fail.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/fastcopy.h>

#include "common/log.h"

typedef struct gather_job {
    uint8_t *dst;
    const mc_iov_t *srcs;
    const size_t *ends; /* ends[i]: output offset just past source i */
    size_t n;
    size_t from, to;    /* this job's output range */
    pthread_t tid;
    int started;
} gather_job_t;

/* First source whose output range ends after @p off. */
static size_t first_source(const size_t *ends, size_t n, size_t off)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ends[mid] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void gather_range(const gather_job_t *j)
{
    size_t off = j->from;

    for (size_t i = first_source(j->ends, j->n, off); (i < j->n) && (off < j->to); i++) {
        size_t begin = (i == 0) ? 0 : j->ends[i - 1];
        size_t a     = (off > begin) ? off : begin;
        size_t b     = (j->ends[i] < j->to) ? j->ends[i] : j->to;
        if (b > a)
            memcpy(j->dst + a, (const uint8_t *)j->srcs[i].base + (a - begin), b - a);
        off = b;
    }
}

static void *gather_thread(void *arg)
{
    gather_range(arg);
    return NULL;
}

MC_API mc_status_t mc_fastcopy_gather(void *dst, size_t dst_size, const mc_iov_t *srcs,
                                      size_t n, unsigned nthreads, size_t *copied_p)
{
    gather_job_t jobs[MC_FASTCOPY_MAX_THREADS];
    size_t *ends  = NULL;
    size_t total  = 0;
    unsigned nt;

    if ((n > 0) && (srcs == NULL)) {
        mc_set_error_detail("srcs is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        if ((srcs[i].len > 0) && (srcs[i].base == NULL)) {
            mc_set_error_detail("source %zu has %zu bytes at NULL", i, srcs[i].len);
            return MC_INVALID_PARAMS;
        }
        if (srcs[i].len > SIZE_MAX - total) {
            mc_set_error_detail("source lengths overflow");
            return MC_INVALID_PARAMS;
        }
        total += srcs[i].len;
    }
    if (total > dst_size) {
        mc_set_error_detail("destination buffer too small: %zu bytes for %zu", dst_size, total);
        return MC_INVALID_PARAMS;
    }
    if ((total > 0) && (dst == NULL)) {
        mc_set_error_detail("dst is NULL");
        return MC_INVALID_PARAMS;
    }
    if (total == 0)
        goto done;

    nt = (nthreads == 0) ? 1 : nthreads;
    if (nt > MC_FASTCOPY_MAX_THREADS)
        nt = MC_FASTCOPY_MAX_THREADS;
    if (total < MC_FASTCOPY_THREAD_MIN_BYTES)
        nt = 1;
    if (nt == 1) {
        /* one pass over the sources, no prefix sums needed */
        uint8_t *p = dst;
        for (size_t i = 0; i < n; i++) {
            if (srcs[i].len > 0)
                memcpy(p, srcs[i].base, srcs[i].len);
            p += srcs[i].len;
        }
        goto done;
    }

    ends = malloc(n * sizeof(*ends));
    if (ends == NULL) {
        /* no room for the split: copy on this thread instead */
        uint8_t *p = dst;
        for (size_t i = 0; i < n; i++) {
            if (srcs[i].len > 0)
                memcpy(p, srcs[i].base, srcs[i].len);
            p += srcs[i].len;
        }
        goto done;
    }
    {
        size_t acc = 0;
        for (size_t i = 0; i < n; i++) {
            acc += srcs[i].len;
            ends[i] = acc;
        }
    }
    for (unsigned t = 0; t < nt; t++) {
        jobs[t] = (gather_job_t){.dst  = dst,
                                 .srcs = srcs,
                                 .ends = ends,
                                 .n    = n,
                                 .from = total / nt * t,
                                 .to   = (t + 1 == nt) ? total : total / nt * (t + 1)};
    }
    for (unsigned t = 1; t < nt; t++)
        jobs[t].started = (pthread_create(&jobs[t].tid, NULL, gather_thread, &jobs[t]) == 0);
    gather_range(&jobs[0]);
    for (unsigned t = 1; t < nt; t++) {
        if (jobs[t].started)
            pthread_join(jobs[t].tid, NULL);
        else
            gather_range(&jobs[t]);
    }
    free(ends);

done:
    if (copied_p != NULL)
        *copied_p = total;
    return MC_OK;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Counting the client's calls (metrics.h): relaxed atomic adds only, so
 * the data path takes no lock for it.
 *
 * May call: nothing of the store (a leaf); the write and read pipelines
 * call it, threads/http.c serves what it counts.
 */
#include "store/metrics.h"

static const uint64_t bucket_le_us[MC_METRIC_NBUCKETS] = {MC_METRIC_LATENCY_BUCKETS_US};

void mc_store_metrics_record(mc_store_metrics_t *m, mc_store_metric_op_t op, uint64_t t0_us,
                             uint64_t items, int failed, uint64_t bytes)
{
    uint64_t now = mc_store_metrics_now_us();
    uint64_t us  = (now > t0_us) ? now - t0_us : 0;
    mc_store_histo_t *h = &m->latency[op];
    unsigned b = 0;

    while ((b < MC_METRIC_NBUCKETS) && (us > bucket_le_us[b]))
        b++;
    atomic_fetch_add_explicit(&m->requests[op], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->items[op], items, memory_order_relaxed);
    if (failed)
        atomic_fetch_add_explicit(&m->failures[op], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    if (bytes > 0) {
        if ((op == MC_MOP_GET) || (op == MC_MOP_BATCH_GET))
            atomic_fetch_add_explicit(&m->read_bytes, bytes, memory_order_relaxed);
        else
            atomic_fetch_add_explicit(&m->write_bytes, bytes, memory_order_relaxed);
    }
}

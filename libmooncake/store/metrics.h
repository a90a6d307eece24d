/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's own counters, read by the client HTTP server (http.c).
 *
 * The data path only adds to relaxed atomics: no lock, no allocation, one
 * clock read before and after a call.  Readers (the /metrics handler) see
 * each counter on its own; a scrape racing a call may see the request
 * counted and its latency not yet, which Prometheus tolerates.
 *
 * What one call counts (docs/architecture.md "Client HTTP server"):
 * requests +1; failures +1 when it returned an error (a batch: when any key
 * failed); one latency observation in microseconds; read/write bytes: the
 * value bytes of the keys that succeeded.
 *
 * Owns: the client's counters and histograms (metrics.c).
 * May call: nothing (atomics and the clock).
 */
#ifndef MC_STORE_METRICS_H
#define MC_STORE_METRICS_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef enum mc_store_metric_op {
    MC_MOP_GET = 0,
    MC_MOP_PUT,
    MC_MOP_BATCH_GET,
    MC_MOP_BATCH_PUT,
    MC_MOP_COUNT
} mc_store_metric_op_t;

/* Upper bounds (microseconds) of the latency buckets; +Inf is implied. */
#define MC_METRIC_LATENCY_BUCKETS_US                                                       \
    125, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000, 7000, 10000,     \
        20000, 50000, 100000, 1000000
#define MC_METRIC_NBUCKETS 19

typedef struct mc_store_histo {
    _Atomic uint64_t bucket[MC_METRIC_NBUCKETS + 1]; /* not cumulative; last is +Inf */
    _Atomic uint64_t sum_us;
    _Atomic uint64_t count;
} mc_store_histo_t;

typedef struct mc_store_metrics {
    _Atomic uint64_t requests[MC_MOP_COUNT];
    _Atomic uint64_t failures[MC_MOP_COUNT];
    _Atomic uint64_t items[MC_MOP_COUNT];    /* keys handled by the calls */
    mc_store_histo_t latency[MC_MOP_COUNT];
    _Atomic uint64_t read_bytes;
    _Atomic uint64_t write_bytes;
    /* speculative reads of this client's own puts (query.c): the bytes
     * kept (the master's answer confirmed the replica) or thrown away */
    _Atomic uint64_t spec_confirmed;
    _Atomic uint64_t spec_refuted;
    _Atomic unsigned master_fails; /* consecutive failed heartbeats (heartbeat.c) */
} mc_store_metrics_t;

static inline uint64_t mc_store_metrics_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One call of @p op that started at @p t0_us (mc_store_metrics_now_us()),
 * handled @p items keys, failed when @p failed, moved @p bytes value bytes. */
void mc_store_metrics_record(mc_store_metrics_t *m, mc_store_metric_op_t op, uint64_t t0_us,
                             uint64_t items, int failed, uint64_t bytes);

#endif /* MC_STORE_METRICS_H */

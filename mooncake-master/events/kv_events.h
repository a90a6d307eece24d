/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KV cache events (--enable_kv_events, docs/events.md): what the master
 * tells cache-aware routers (NVIDIA Dynamo, Mooncake Conductor) about the
 * objects it holds, over a ZMQ PUB socket, in upstream Mooncake's format.
 *
 * Two halves:
 *  - the pure part (kv_event_codec.c, no master, no ZMQ: unit-tested and
 *    fuzzed): the key -> seq_hash rule, the event record, the bounded
 *    queue that drops the oldest, and the encoding of one batch;
 *  - the publisher (kv_events.c): the thread that owns the PUB socket,
 *    the sequence numbers (continued across HA takeovers), and the hooks
 *    the object index calls where objects appear and disappear.
 *
 * Threads: the event loop only builds a record and appends it to the
 * queue (a mutex held for a list append, never a ZMQ call, never a wait);
 * the publisher thread takes up to 64 records at a time, encodes and
 * sends them.  Events leave in the order the loop queued them, which is
 * the order it applied the changes.
 *
 * Owns: the publisher's interface and records (events/).
 * May call: msgpack.h.
 */
#ifndef MC_MASTER_KV_EVENTS_H
#define MC_MASTER_KV_EVENTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

#include "msgpack.h"

/* Events per published batch (upstream's limit). */
#define MC_KV_EVENTS_BATCH_MAX 64

typedef enum mc_kv_event_type {
    MC_KV_EVENT_STORED  = 0,
    MC_KV_EVENT_REMOVED = 1,
    MC_KV_EVENT_CLEARED = 2   /* ours: remove_all left the tenant without objects */
} mc_kv_event_type_t;

typedef enum mc_kv_medium {
    MC_KV_MEDIUM_CPU  = 0,
    MC_KV_MEDIUM_DISK = 1
} mc_kv_medium_t;

/* One pending event: fixed fields, then the key, tenant and group bytes. */
typedef struct mc_kv_event {
    struct mc_kv_event *next;
    uint8_t type;            /* mc_kv_event_type_t */
    uint8_t medium;          /* mc_kv_medium_t */
    uint8_t has_hash;        /* the key parsed as a u64 (mc_kv_event_seq_hash) */
    uint8_t has_group;
    uint64_t hash;
    uint32_t key_len;        /* 0 for CLEARED */
    uint32_t tenant_len;
    uint32_t group_len;
    char strs[];             /* key, tenant, group; no NULs */
} mc_kv_event_t;

/* What the publisher puts in every event besides the object's fields. */
typedef struct mc_kv_event_opts {
    const char *backend_id;
    int emit_legacy_compat;  /* type, block_hashes, parent_block_hash */
    int emit_object_key;     /* object_key */
} mc_kv_event_opts_t;

/*
 * B.3: the u64 a key stands for, when the whole key parses: "0x"/"0X" then
 * hex, else decimal (leading zeros fine), with strtoull's tolerance of
 * leading blanks and a sign.  Empty, partial ("123abc", "0x"), overflowing
 * or NUL-containing keys do not parse: returns 0; 1 with *h_p set.
 */
int mc_kv_event_seq_hash(const char *key, size_t len, uint64_t *h_p);

/* A record for the queue, or NULL when out of memory. */
mc_kv_event_t *mc_kv_event_new(mc_kv_event_type_t type, mc_kv_medium_t medium,
                               const char *key, size_t key_len, const char *tenant,
                               size_t tenant_len, const char *group, size_t group_len);

/*
 * Encode one batch, frame 3 of a message: [timestamp_ms, [event maps], 0].
 * Event ids are *@p next_id, *@p next_id + 1, ... (advanced).  The maps
 * have upstream's keys in upstream's order (docs/events.md §2).  Returns
 * 0, or -1 when the buffer could not grow.
 */
int mc_kv_event_encode_batch(mc_mp_buf_t *b, const mc_kv_event_opts_t *o, int64_t ts_ms,
                             mc_kv_event_t *const *ev, size_t n, uint64_t *next_id);

/*
 * The pending events: a FIFO with a bound (0 = none).  Push never
 * blocks: at the bound it frees the oldest record and counts it in
 * @c dropped and @c gap (the publisher skips a sequence number for each,
 * so subscribers see the loss).  All fields under @c lock.
 */
typedef struct mc_kv_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    mc_kv_event_t *head;
    mc_kv_event_t *tail;
    size_t count;
    size_t capacity;         /* 0 = unbounded */
    uint64_t dropped;        /* records dropped at the bound */
    uint64_t gap;            /* drops not yet folded into the sequence */
    int stop;                /* the consumer should drain and end */
} mc_kv_queue_t;

int mc_kv_queue_init(mc_kv_queue_t *q, size_t capacity);
/* Frees what is still queued.  Accepts a zeroed queue that init never saw. */
void mc_kv_queue_cleanup(mc_kv_queue_t *q);
/* Append @p e (taken), dropping the oldest at the bound. */
void mc_kv_queue_push(mc_kv_queue_t *q, mc_kv_event_t *e);
/*
 * Take up to @p max records in order into @p out and the drop count since
 * the last call into *@p gap_p.  With @p wait, sleep until there is
 * something or stop is set.  Returns how many were taken; 0 with *stop_p
 * set means stopped and drained.
 */
size_t mc_kv_queue_pop(mc_kv_queue_t *q, mc_kv_event_t **out, size_t max, int wait,
                       uint64_t *gap_p, int *stop_p);
/* Ask the consumer to drain and end. */
void mc_kv_queue_stop(mc_kv_queue_t *q);

/* ---- the publisher (kv_events.c) ------------------------------------------- */

struct mc_master;
struct mc_object;
typedef struct mc_kv_events mc_kv_events_t;

/* Counters of GET /kv_events/status, in its key order. */
typedef struct mc_kv_events_stats {
    int enabled;
    uint64_t published_batches;
    uint64_t published_events;
    uint64_t dropped_events;
    uint64_t skipped_unparsed_keys;
} mc_kv_events_stats_t;

/*
 * Start the publisher when --enable_kv_events is on: bind the PUB socket
 * and start its thread.  An empty endpoint or backend id, or a socket
 * that cannot be bound, is logged as an error and leaves the publisher
 * off while the master runs on (upstream).  Always MC_OK: nothing here
 * stops the master.  Call after mc_master_ha_start (the sequence of an
 * HA leader is fenced by its term).
 */
mc_status_t mc_kv_events_start(struct mc_master *m);
/* Send what is queued, stop the thread, close the socket.  Before the HA
 * part stops.  No-op when off. */
void mc_kv_events_stop(struct mc_master *m);
void mc_kv_events_stats(struct mc_master *m, mc_kv_events_stats_t *s);

/* Hooks of the object index (index/objects.c, writes.c), on the event loop.  No-ops when
 * the publisher is off or this master is not serving (a standby). */
/* PutEnd of every form (PUT_END, PUT_COMMIT, UPSERT_END, their batches). */
void mc_kv_events_stored(struct mc_master *m, const struct mc_object *o);
/* @p o is about to be erased, by any path (mc_idx_obj_erase). */
void mc_kv_events_removed(struct mc_master *m, const struct mc_object *o);
/* REMOVE_ALL left tenant @p tenant without any announced object. */
void mc_kv_events_cleared(struct mc_master *m, const char *tenant, size_t tenant_len);

#endif /* MC_MASTER_KV_EVENTS_H */

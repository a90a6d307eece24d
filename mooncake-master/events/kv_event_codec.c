/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pure half of the KV event publisher (kv_events.h): the seq_hash
 * rule, event records, the bounded queue and the batch encoding.  No
 * master state and no ZMQ here, so the unit tests and the fuzzer link it
 * alone.
 *
 * Owns: the pure half of the publisher: seq_hash, records, queue, batch
 *   encoding.
 * May call: kv_events.h and msgpack.h only: no master state.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_events.h"

int mc_kv_event_seq_hash(const char *key, size_t len, uint64_t *h_p)
{
    char buf[1024];
    const char *s;
    char *end;
    unsigned long long v;
    int base = 10;

    /* longer keys cannot be a u64, whatever the blanks (the longest
     * parsable form is blanks + sign + "0x" + zeros + digits, but a
     * router key that long is no hash) */
    if ((len == 0) || (len >= sizeof(buf)) || (memchr(key, '\0', len) != NULL))
        return 0;
    memcpy(buf, key, len);
    buf[len] = '\0';
    s = buf;
    if ((s[0] == '0') && ((s[1] == 'x') || (s[1] == 'X'))) {
        s += 2;
        base = 16; /* what follows goes to strtoull as is (its blanks and sign too) */
    }
    errno = 0;
    v     = strtoull(s, &end, base);
    if ((end == s) || (*end != '\0') || (errno == ERANGE))
        return 0;
    *h_p = (uint64_t)v;
    return 1;
}

mc_kv_event_t *mc_kv_event_new(mc_kv_event_type_t type, mc_kv_medium_t medium,
                               const char *key, size_t key_len, const char *tenant,
                               size_t tenant_len, const char *group, size_t group_len)
{
    mc_kv_event_t *e;

    if ((key_len > UINT32_MAX) || (tenant_len > UINT32_MAX) || (group_len > UINT32_MAX))
        return NULL;
    e = malloc(sizeof(*e) + key_len + tenant_len + group_len);
    if (e == NULL)
        return NULL;
    e->next       = NULL;
    e->type       = (uint8_t)type;
    e->medium     = (uint8_t)medium;
    e->hash       = 0;
    e->has_hash   = (uint8_t)((key_len > 0) && mc_kv_event_seq_hash(key, key_len, &e->hash));
    e->has_group  = (uint8_t)(group != NULL);
    e->key_len    = (uint32_t)key_len;
    e->tenant_len = (uint32_t)tenant_len;
    e->group_len  = (uint32_t)group_len;
    if (key_len > 0)
        memcpy(e->strs, key, key_len);
    if (tenant_len > 0)
        memcpy(e->strs + key_len, tenant, tenant_len);
    if (group_len > 0)
        memcpy(e->strs + key_len + tenant_len, group, group_len);
    return e;
}

/* The map of one event (docs/events.md §2 lists the keys in this order). */
static void encode_event(mc_mp_buf_t *b, const mc_kv_event_opts_t *o, int64_t ts_ms,
                         const mc_kv_event_t *e, uint64_t id)
{
    static const char *const names[]  = {"stored", "removed", "cleared"};
    static const char *const legacy[] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};
    int stored   = e->type == MC_KV_EVENT_STORED;
    uint32_t n   = 14; /* event_id .. base_block_idx without the optional keys */
    const char *key    = e->strs;
    const char *tenant = e->strs + e->key_len;
    const char *group  = tenant + e->tenant_len;

    if (o->emit_legacy_compat)
        n += 2; /* type, block_hashes */
    if (o->emit_object_key)
        n += 1;
    if (stored)
        n += 2 + (o->emit_legacy_compat ? 1 : 0); /* parent_hash, token_ids, parent_block_hash */
    mc_mp_map(b, n);
    mc_mp_cstr(b, "event_id");
    mc_mp_uint(b, id);
    mc_mp_cstr(b, "timestamp");
    mc_mp_int(b, ts_ms);
    mc_mp_cstr(b, "event_type");
    mc_mp_cstr(b, names[e->type]);
    if (o->emit_legacy_compat) {
        mc_mp_cstr(b, "type");
        mc_mp_cstr(b, legacy[e->type]);
    }
    /* deprecated fields: routers take them from their registration */
    mc_mp_cstr(b, "model_name");
    mc_mp_nil(b);
    mc_mp_cstr(b, "block_size");
    mc_mp_nil(b);
    mc_mp_cstr(b, "additional_salt");
    mc_mp_nil(b);
    mc_mp_cstr(b, "lora_name");
    mc_mp_nil(b);
    mc_mp_cstr(b, "tenant_id");
    mc_mp_str(b, tenant, e->tenant_len);
    mc_mp_cstr(b, "backend_id");
    mc_mp_cstr(b, o->backend_id);
    mc_mp_cstr(b, "group_id");
    if (e->has_group && (e->group_len > 0))
        mc_mp_str(b, group, e->group_len);
    else
        mc_mp_nil(b);
    mc_mp_cstr(b, "medium");
    if (e->type == MC_KV_EVENT_CLEARED)
        mc_mp_nil(b);
    else
        mc_mp_cstr(b, (e->medium == MC_KV_MEDIUM_DISK) ? "disk" : "cpu");
    mc_mp_cstr(b, "dp_rank");
    mc_mp_nil(b);
    if (o->emit_object_key) {
        mc_mp_cstr(b, "object_key");
        if (e->type == MC_KV_EVENT_CLEARED)
            mc_mp_nil(b);
        else
            mc_mp_str(b, key, e->key_len);
    }
    mc_mp_cstr(b, "seq_hashes");
    mc_mp_array(b, e->has_hash);
    if (e->has_hash)
        mc_mp_uint(b, e->hash);
    if (o->emit_legacy_compat) {
        /* the same hash as int64: >= 2^63 reads negative */
        mc_mp_cstr(b, "block_hashes");
        mc_mp_array(b, e->has_hash);
        if (e->has_hash)
            mc_mp_int(b, (int64_t)e->hash);
    }
    mc_mp_cstr(b, "base_block_idx");
    if (stored)
        mc_mp_uint(b, 0);
    else
        mc_mp_nil(b);
    if (stored) {
        mc_mp_cstr(b, "parent_hash");
        mc_mp_nil(b);
        mc_mp_cstr(b, "token_ids");
        mc_mp_nil(b);
        if (o->emit_legacy_compat) {
            mc_mp_cstr(b, "parent_block_hash");
            mc_mp_nil(b);
        }
    }
}

int mc_kv_event_encode_batch(mc_mp_buf_t *b, const mc_kv_event_opts_t *o, int64_t ts_ms,
                             mc_kv_event_t *const *ev, size_t n, uint64_t *next_id)
{
    mc_mp_reset(b);
    mc_mp_array(b, 3);
    mc_mp_int(b, ts_ms);
    mc_mp_array(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        encode_event(b, o, ts_ms, ev[i], (*next_id)++);
    mc_mp_uint(b, 0); /* dp_rank */
    return mc_mp_failed(b) ? -1 : 0;
}

/* ---- the queue ------------------------------------------------------------------ */

int mc_kv_queue_init(mc_kv_queue_t *q, size_t capacity)
{
    memset(q, 0, sizeof(*q));
    q->capacity = capacity;
    if (pthread_mutex_init(&q->lock, NULL) != 0)
        return -1;
    if (pthread_cond_init(&q->cond, NULL) != 0) {
        pthread_mutex_destroy(&q->lock);
        return -1;
    }
    return 0;
}

void mc_kv_queue_cleanup(mc_kv_queue_t *q)
{
    while (q->head != NULL) {
        mc_kv_event_t *e = q->head;
        q->head          = e->next;
        free(e);
    }
    q->tail  = NULL;
    q->count = 0;
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
}

void mc_kv_queue_push(mc_kv_queue_t *q, mc_kv_event_t *e)
{
    mc_kv_event_t *old = NULL;

    e->next = NULL;
    pthread_mutex_lock(&q->lock);
    if ((q->capacity > 0) && (q->count >= q->capacity)) {
        old     = q->head;
        q->head = old->next;
        if (q->head == NULL)
            q->tail = NULL;
        q->count--;
        q->dropped++;
        q->gap++;
    }
    if (q->tail != NULL)
        q->tail->next = e;
    else
        q->head = e;
    q->tail = e;
    q->count++;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    free(old); /* outside the lock */
}

size_t mc_kv_queue_pop(mc_kv_queue_t *q, mc_kv_event_t **out, size_t max, int wait,
                       uint64_t *gap_p, int *stop_p)
{
    size_t n = 0;

    pthread_mutex_lock(&q->lock);
    while (wait && (q->head == NULL) && !q->stop)
        pthread_cond_wait(&q->cond, &q->lock);
    while ((n < max) && (q->head != NULL)) {
        out[n++] = q->head;
        q->head  = q->head->next;
        q->count--;
    }
    if (q->head == NULL)
        q->tail = NULL;
    *gap_p  = q->gap;
    q->gap  = 0;
    *stop_p = q->stop;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void mc_kv_queue_stop(mc_kv_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->stop = 1;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

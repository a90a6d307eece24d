/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The location cache: a hash map of entries threaded on an LRU list, under
 * one mutex.  See loc_cache.h for what it holds and when entries go.
 *
 * An entry is one allocation: the entry header, then the key bytes, then
 * the blob at an 16-byte aligned offset (a blob is a struct with 64-bit
 * fields, copied out with memcpy, so the alignment is only for tidiness).
 *
 * May call: common/ only (a leaf).  Called by: query.c and buffer.c,
 * ../threads/http.c (its metrics).
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "store/read/loc_cache.h"

typedef struct loc_entry {
    mc_hnode_t node;
    struct loc_entry *prev, *next; /* LRU: head is the most recently used */
    uint64_t deadline_ns;
    size_t klen;
    size_t blen;
    size_t boff; /* offset of the blob in data[] */
    char data[];
} loc_entry_t;

struct mc_loc_cache {
    pthread_mutex_t mu;
    mc_hmap_t map;
    loc_entry_t *head, *tail;
    size_t count, cap;
    size_t bytes;
    uint64_t epoch;
    mc_loc_cache_stats_t st;
};

typedef struct loc_key {
    const char *key;
    size_t klen;
} loc_key_t;

static int entry_eq(const mc_hnode_t *n, const void *k)
{
    const loc_entry_t *e = mc_container_of(n, loc_entry_t, node);
    const loc_key_t *lk  = k;
    return (e->klen == lk->klen) && (memcmp(e->data, lk->key, lk->klen) == 0);
}

static size_t entry_size(const loc_entry_t *e)
{
    return sizeof(*e) + e->boff + e->blen;
}

mc_status_t mc_loc_cache_config(size_t *entries_p)
{
    uint64_t n = MC_LOC_CACHE_DEFAULT_ENTRIES;

    /* entries, 0 turning the cache off */
    if (mc_env_u64("MC_STORE_LOCATION_CACHE", 0, MC_LOC_CACHE_MAX_ENTRIES, &n) != 0)
        return MC_INVALID_PARAMS;
    *entries_p = (size_t)n;
    return MC_OK;
}

mc_status_t mc_loc_cache_create(size_t entries, mc_loc_cache_t **cache_p)
{
    mc_loc_cache_t *c = calloc(1, sizeof(*c));
    if ((c == NULL) || (mc_hmap_init(&c->map, 64) != 0)) {
        free(c);
        mc_set_error_detail("out of memory for the location cache");
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->cap   = entries;
    *cache_p = c;
    return MC_OK;
}

static void lru_unlink(mc_loc_cache_t *c, loc_entry_t *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(mc_loc_cache_t *c, loc_entry_t *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head != NULL)
        c->head->prev = e;
    c->head = e;
    if (c->tail == NULL)
        c->tail = e;
}

/* Unlink and free @p e; mu held. */
static void entry_drop(mc_loc_cache_t *c, loc_entry_t *e)
{
    mc_hmap_remove(&c->map, &e->node);
    lru_unlink(c, e);
    c->count--;
    c->bytes -= entry_size(e);
    c->st.drops++;
    free(e);
}

static loc_entry_t *entry_find(mc_loc_cache_t *c, const char *key, size_t klen, uint64_t *hash_p)
{
    loc_key_t lk = {key, klen};
    uint64_t h   = mc_hash_bytes(key, klen, 0);
    if (hash_p != NULL)
        *hash_p = h;
    mc_hnode_t *n = mc_hmap_find(&c->map, h, &lk, entry_eq);
    return (n != NULL) ? mc_container_of(n, loc_entry_t, node) : NULL;
}

void mc_loc_cache_destroy(mc_loc_cache_t *c)
{
    if (c == NULL)
        return;
    while (c->head != NULL)
        entry_drop(c, c->head);
    mc_hmap_cleanup(&c->map);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

uint64_t mc_loc_cache_epoch(mc_loc_cache_t *c)
{
    uint64_t e;
    pthread_mutex_lock(&c->mu);
    e = c->epoch;
    pthread_mutex_unlock(&c->mu);
    return e;
}

void *mc_loc_cache_get(mc_loc_cache_t *c, const char *key, size_t klen, uint64_t now_ns,
                       size_t *len_p, uint64_t *deadline_p)
{
    loc_entry_t *e;
    void *out = NULL;

    pthread_mutex_lock(&c->mu);
    e = entry_find(c, key, klen, NULL);
    if ((e != NULL) && (now_ns >= e->deadline_ns)) {
        entry_drop(c, e); /* the lease is over: ask the master */
        e = NULL;
    }
    if (e != NULL) {
        out = malloc(e->blen);
        if (out != NULL) {
            memcpy(out, e->data + e->boff, e->blen);
            *len_p      = e->blen;
            *deadline_p = e->deadline_ns;
            if (c->head != e) {
                lru_unlink(c, e);
                lru_push_front(c, e);
            }
            c->st.hits++;
        }
    }
    if (out == NULL)
        c->st.misses++;
    pthread_mutex_unlock(&c->mu);
    return out;
}

size_t mc_loc_cache_peek(mc_loc_cache_t *c, const char *key, size_t klen, uint64_t now_ns,
                         void *out, size_t n)
{
    loc_entry_t *e;
    size_t got = 0;

    pthread_mutex_lock(&c->mu);
    e = entry_find(c, key, klen, NULL);
    if ((e != NULL) && (now_ns < e->deadline_ns)) {
        got = (e->blen < n) ? e->blen : n;
        memcpy(out, e->data + e->boff, got);
    }
    pthread_mutex_unlock(&c->mu);
    return got;
}

void mc_loc_cache_put(mc_loc_cache_t *c, const char *key, size_t klen, const void *blob,
                      size_t len, uint64_t deadline_ns, uint64_t epoch)
{
    size_t boff = (klen + 15u) & ~(size_t)15u;
    loc_entry_t *e, *old;
    uint64_t h;

    if ((len == 0) || (klen > MC_LOC_CACHE_MAX_BYTES) || (len > MC_LOC_CACHE_MAX_BYTES))
        return;
    e = malloc(sizeof(*e) + boff + len);
    if (e == NULL)
        return;
    e->deadline_ns = deadline_ns;
    e->klen        = klen;
    e->blen        = len;
    e->boff        = boff;
    memcpy(e->data, key, klen);
    memcpy(e->data + boff, blob, len);

    pthread_mutex_lock(&c->mu);
    if (c->epoch != epoch) {
        /* a local write or removal happened since this answer was asked
         * for: it may describe the value from before */
        pthread_mutex_unlock(&c->mu);
        free(e);
        return;
    }
    old = entry_find(c, key, klen, &h);
    if (old != NULL)
        entry_drop(c, old);
    mc_hmap_insert(&c->map, &e->node, h);
    lru_push_front(c, e);
    c->count++;
    c->bytes += entry_size(e);
    c->st.inserts++;
    while (((c->count > c->cap) || (c->bytes > MC_LOC_CACHE_MAX_BYTES)) && (c->tail != e))
        entry_drop(c, c->tail);
    pthread_mutex_unlock(&c->mu);
}

void mc_loc_cache_drop(mc_loc_cache_t *c, const char *key, size_t klen)
{
    loc_entry_t *e;
    pthread_mutex_lock(&c->mu);
    c->epoch++;
    e = entry_find(c, key, klen, NULL);
    if (e != NULL)
        entry_drop(c, e);
    pthread_mutex_unlock(&c->mu);
}

void mc_loc_cache_clear(mc_loc_cache_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->epoch++;
    while (c->head != NULL)
        entry_drop(c, c->head);
    pthread_mutex_unlock(&c->mu);
}

void mc_loc_cache_stats(mc_loc_cache_t *c, mc_loc_cache_stats_t *out)
{
    pthread_mutex_lock(&c->mu);
    *out         = c->st;
    out->entries = c->count;
    pthread_mutex_unlock(&c->mu);
}

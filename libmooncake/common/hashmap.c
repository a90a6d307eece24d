/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intrusive chained hash tables (see hashmap.h).  Buckets are indexed by the
 * low bits of the hash the entries keep, so growing never re-hashes keys.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/hashmap.h"
#include "common/util.h"

/* ---- mc_hmap_t: a chain whose nodes keep their 64-bit hash ------------------ */

static mc_hnode_t *hnode(mc_cnode_t *n)
{
    return n ? mc_container_of(n, mc_hnode_t, link) : NULL;
}

static uint32_t hnode_hash(const mc_cnode_t *n)
{
    return (uint32_t)mc_container_of(n, mc_hnode_t, link)->hash;
}

int mc_hmap_init(mc_hmap_t *m, size_t initial_buckets)
{
    return mc_chmap_init(m, initial_buckets, hnode_hash);
}

void mc_hmap_cleanup(mc_hmap_t *m)
{
    mc_chmap_cleanup(m);
}

/* mc_hmap_find's test: the whole hash, then the caller's equality. */
typedef struct hmap_key {
    uint64_t hash;
    const void *key;
    mc_hmap_eq_func_t eq;
} hmap_key_t;

static int hmap_eq(const mc_cnode_t *n, const void *k)
{
    const hmap_key_t *hk = k;
    const mc_hnode_t *h  = mc_container_of(n, mc_hnode_t, link);
    return (h->hash == hk->hash) && hk->eq(h, hk->key);
}

mc_hnode_t *mc_hmap_find(const mc_hmap_t *m, uint64_t hash, const void *key,
                         mc_hmap_eq_func_t eq)
{
    hmap_key_t hk = {hash, key, eq};
    return hnode(mc_chmap_find(m, (uint32_t)hash, &hk, hmap_eq));
}

int mc_hmap_insert(mc_hmap_t *m, mc_hnode_t *node, uint64_t hash)
{
    node->hash = hash;
    return mc_chmap_insert(m, &node->link, (uint32_t)hash);
}

void mc_hmap_remove(mc_hmap_t *m, mc_hnode_t *node)
{
    mc_chmap_remove(m, &node->link);
}

mc_hnode_t *mc_hmap_next(const mc_hmap_t *m, mc_hmap_iter_t *it)
{
    return hnode(mc_chmap_next(m, it));
}

mc_hnode_t *mc_hmap_first(const mc_hmap_t *m, mc_hmap_iter_t *it)
{
    return hnode(mc_chmap_first(m, it));
}

/* ---- mc_chmap_t ------------------------------------------------------------ */

/* Bucket arrays of a block or more (about 262k buckets) are huge-page
 * blocks (mc_huge_zalloc): a lookup in a table that large is a random
 * read, and its TLB miss would cost as much as its cache miss. */
static mc_cnode_t **buckets_alloc(size_t n)
{
    if (n > SIZE_MAX / sizeof(mc_cnode_t *))
        return NULL;
    if (n * sizeof(mc_cnode_t *) >= MC_HUGE_BLOCK)
        return mc_huge_zalloc(n * sizeof(mc_cnode_t *));
    return calloc(n, sizeof(mc_cnode_t *));
}

static void buckets_free(mc_cnode_t **b, size_t n)
{
    if (n * sizeof(mc_cnode_t *) >= MC_HUGE_BLOCK)
        mc_huge_free(b, n * sizeof(mc_cnode_t *));
    else
        free(b);
}

int mc_chmap_init(mc_chmap_t *m, size_t initial_buckets, mc_chmap_hash_func_t hash_of)
{
    size_t n = 16;
    while (n < initial_buckets)
        n <<= 1;
    memset(m, 0, sizeof(*m));
    m->buckets  = buckets_alloc(n);
    m->nbuckets = m->buckets ? n : 0;
    m->hash_of  = hash_of;
    return m->buckets ? 0 : -1;
}

void mc_chmap_cleanup(mc_chmap_t *m)
{
    mc_chmap_hash_func_t hash_of = m->hash_of; /* kept: an insert starts it again */

    buckets_free(m->buckets, m->nbuckets);
    buckets_free(m->old, m->nold);
    memset(m, 0, sizeof(*m));
    m->hash_of = hash_of;
}

/* The old chain that may still hold entries of @p hash; NULL when its
 * bucket has moved (or no growth is under way). */
static mc_cnode_t **old_slot(const mc_chmap_t *m, uint32_t hash)
{
    size_t ob;
    if (m->old == NULL)
        return NULL;
    ob = hash & (m->nold - 1);
    return (ob >= m->moved) ? &m->old[ob] : NULL;
}

/* The entry of the chain from @p n that matches @p hash and @p key. */
static mc_cnode_t *chain_find(const mc_chmap_t *m, mc_cnode_t *n, uint32_t hash,
                              const void *key, mc_chmap_eq_func_t eq)
{
    while ((n != NULL) && !((m->hash_of(n) == hash) && eq(n, key)))
        n = n->next;
    return n;
}

mc_cnode_t *mc_chmap_find(const mc_chmap_t *m, uint32_t hash, const void *key,
                          mc_chmap_eq_func_t eq)
{
    mc_cnode_t **os;
    mc_cnode_t *n;

    if (m->nbuckets == 0)
        return NULL;
    n = chain_find(m, m->buckets[hash & (m->nbuckets - 1)], hash, key, eq);
    if ((n == NULL) && ((os = old_slot(m, hash)) != NULL))
        n = chain_find(m, *os, hash, key, eq);
    return n;
}

/* How many buckets ahead a move prefetches the chains it will move. */
#define MOVE_AHEAD 8

/* Move up to @p nb old buckets into the new array; the old array goes
 * once the last has moved. */
static void move_some(mc_chmap_t *m, size_t nb)
{
    size_t stop = m->moved + nb;

    if (stop > m->nold)
        stop = m->nold;
    for (size_t i = m->moved; i < stop; i++) {
        mc_cnode_t *n = m->old[i];
        /* each entry is a miss of its own in a large table: start the
         * chain heads 2 * MOVE_AHEAD buckets on, and the second entries
         * of the chains MOVE_AHEAD on, whose heads have arrived by now */
        if (i + 2 * MOVE_AHEAD < m->nold) {
            const mc_cnode_t *far  = m->old[i + 2 * MOVE_AHEAD];
            const mc_cnode_t *near = m->old[i + MOVE_AHEAD];
            if (far != NULL)
                __builtin_prefetch(far);
            if ((near != NULL) && (near->next != NULL))
                __builtin_prefetch(near->next);
        }
        while (n != NULL) {
            mc_cnode_t *next = n->next;
            size_t b         = m->hash_of(n) & (m->nbuckets - 1);
            n->next          = m->buckets[b];
            m->buckets[b]    = n;
            n                = next;
        }
        m->old[i] = NULL;
    }
    m->moved = stop;
    if (m->moved == m->nold) {
        buckets_free(m->old, m->nold);
        m->old   = NULL;
        m->nold  = 0;
        m->moved = 0;
    }
}

/* Start a growth: a new array of twice the size, the current one to move
 * out of; -1 (nothing changed) without memory or past 2^32 buckets. */
static int grow(mc_chmap_t *m)
{
    size_t nn = m->nbuckets ? m->nbuckets * 2 : 16;
    mc_cnode_t **nb;

    if (m->old != NULL) /* not reached: a growth ends long before the next */
        move_some(m, m->nold);
    if (nn > (size_t)UINT32_MAX + 1u) /* the entries keep 32 bits of hash */
        return -1;
    nb = buckets_alloc(nn);
    if (nb == NULL)
        return -1;
    m->old      = m->buckets;
    m->nold     = m->nbuckets;
    m->moved    = 0;
    m->buckets  = nb;
    m->nbuckets = nn;
    return 0;
}

int mc_chmap_insert(mc_chmap_t *m, mc_cnode_t *node, uint32_t hash)
{
    int rc = 0;
    /* a load of up to 2 keeps chains short while the bucket array costs
     * at most 8 bytes per entry (the master holds millions of objects);
     * the growth that follows moves MC_CHMAP_MOVE_STEP old buckets per
     * insert, so it ends after nold / MC_CHMAP_MOVE_STEP inserts, long
     * before the 2 * nold that bring the next one */
    if (m->old != NULL)
        move_some(m, MC_CHMAP_MOVE_STEP);
    else if ((m->count + 1 > 2 * m->nbuckets) && (grow(m) != 0))
        rc = -1;
    if (m->nbuckets == 0)
        return -1;
    size_t b      = hash & (m->nbuckets - 1);
    node->next    = m->buckets[b];
    m->buckets[b] = node;
    m->count++;
    return rc;
}

/* Unlink @p node from the chain at @p pp; 1 when it was there. */
static int unlink_from(mc_cnode_t **pp, const mc_cnode_t *node)
{
    while (*pp != NULL) {
        if (*pp == node) {
            *pp = node->next;
            return 1;
        }
        pp = &(*pp)->next;
    }
    return 0;
}

void mc_chmap_remove(mc_chmap_t *m, mc_cnode_t *node)
{
    uint32_t h;
    mc_cnode_t **os;

    if (m->nbuckets == 0)
        return;
    h = m->hash_of(node);
    if (unlink_from(&m->buckets[h & (m->nbuckets - 1)], node)) {
        m->count--;
        return;
    }
    os = old_slot(m, h);
    if ((os != NULL) && unlink_from(os, node))
        m->count--;
}

/* From @p n on an old chain, the first entry that belongs to bucket @p b
 * of the new numbering (an old bucket splits into two new ones). */
static mc_cnode_t *old_match(const mc_chmap_t *m, mc_cnode_t *n, size_t b)
{
    while ((n != NULL) && ((m->hash_of(n) & (m->nbuckets - 1)) != b))
        n = n->next;
    return n;
}

mc_cnode_t *mc_chmap_next(const mc_chmap_t *m, mc_chmap_iter_t *it)
{
    for (;;) {
        mc_cnode_t *n = it->next;
        if (n != NULL) {
            size_t b = it->bucket - 1; /* n's bucket */
            if (it->in_old) {
                it->next = old_match(m, n->next, b);
            } else if (n->next != NULL) {
                it->next = n->next;
            } else {
                /* the new chain is done: then what of b has not moved */
                mc_cnode_t **os = old_slot(m, (uint32_t)b);
                it->next        = os ? old_match(m, *os, b) : NULL;
                it->in_old      = 1;
            }
            return n;
        }
        if ((it->bucket >= it->end) || (it->bucket >= m->nbuckets))
            return NULL;
        size_t b   = it->bucket++;
        it->in_old = 0;
        it->next   = m->buckets[b];
        if (it->next == NULL) {
            mc_cnode_t **os = old_slot(m, (uint32_t)b);
            it->next        = os ? old_match(m, *os, b) : NULL;
            it->in_old      = 1;
        }
    }
}

mc_cnode_t *mc_chmap_first(const mc_chmap_t *m, mc_chmap_iter_t *it)
{
    it->bucket = 0;
    it->end    = SIZE_MAX;
    it->next   = NULL;
    it->in_old = 0;
    return mc_chmap_next(m, it);
}

mc_cnode_t *mc_chmap_bucket_first(const mc_chmap_t *m, size_t b, mc_chmap_iter_t *it)
{
    it->bucket = b;
    it->end    = b + 1;
    it->next   = NULL;
    it->in_old = 0;
    return mc_chmap_next(m, it);
}

uint64_t mc_hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    /* murmur3 finaliser: spread the low bits used for bucket selection */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

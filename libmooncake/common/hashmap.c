/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intrusive chained hash tables (see hashmap.h).  Buckets are indexed by the
 * low bits of the hash the entries keep, so growing never re-hashes keys.
 */
#include "config.h"

#include <stdlib.h>

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

mc_hnode_t *mc_hmap_find(const mc_hmap_t *m, uint64_t hash, const void *key,
                         mc_hmap_eq_func_t eq)
{
    if (m->nbuckets == 0)
        return NULL;
    for (mc_cnode_t *n = m->buckets[hash & (m->nbuckets - 1)]; n != NULL; n = n->next) {
        mc_hnode_t *h = hnode(n);
        if ((h->hash == hash) && eq(h, key))
            return h;
    }
    return NULL;
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
    m->buckets  = buckets_alloc(n);
    m->nbuckets = m->buckets ? n : 0;
    m->count    = 0;
    m->hash_of  = hash_of;
    return m->buckets ? 0 : -1;
}

void mc_chmap_cleanup(mc_chmap_t *m)
{
    buckets_free(m->buckets, m->nbuckets);
    m->buckets  = NULL;
    m->nbuckets = 0;
    m->count    = 0;
}

mc_cnode_t *mc_chmap_find(const mc_chmap_t *m, uint32_t hash, const void *key,
                          mc_chmap_eq_func_t eq)
{
    if (m->nbuckets == 0)
        return NULL;
    for (mc_cnode_t *n = m->buckets[hash & (m->nbuckets - 1)]; n != NULL; n = n->next) {
        if ((m->hash_of(n) == hash) && eq(n, key))
            return n;
    }
    return NULL;
}

/* How many buckets ahead growth prefetches the chains it will move. */
#define GROW_AHEAD 8

static int grow(mc_chmap_t *m)
{
    size_t nn = m->nbuckets ? m->nbuckets * 2 : 16;
    mc_cnode_t **nb;

    if (nn > (size_t)UINT32_MAX + 1u) /* the entries keep 32 bits of hash */
        return -1;
    nb = buckets_alloc(nn);
    if (nb == NULL)
        return -1;
    for (size_t i = 0; i < m->nbuckets; i++) {
        mc_cnode_t *n = m->buckets[i];
        /* each entry is a miss of its own in a large table: start the
         * chain heads 2 * GROW_AHEAD buckets on, and the second entries
         * of the chains GROW_AHEAD on, whose heads have arrived by now */
        if (i + 2 * GROW_AHEAD < m->nbuckets) {
            const mc_cnode_t *far = m->buckets[i + 2 * GROW_AHEAD];
            const mc_cnode_t *near = m->buckets[i + GROW_AHEAD];
            if (far != NULL)
                __builtin_prefetch(far);
            if ((near != NULL) && (near->next != NULL))
                __builtin_prefetch(near->next);
        }
        while (n != NULL) {
            mc_cnode_t *next = n->next;
            size_t b         = m->hash_of(n) & (nn - 1);
            n->next          = nb[b];
            nb[b]            = n;
            n                = next;
        }
    }
    buckets_free(m->buckets, m->nbuckets);
    m->buckets  = nb;
    m->nbuckets = nn;
    return 0;
}

int mc_chmap_insert(mc_chmap_t *m, mc_cnode_t *node, uint32_t hash)
{
    int rc = 0;
    /* a load of up to 2 keeps chains short while the bucket array costs
     * at most 8 bytes per entry (the master holds millions of objects) */
    if ((m->count + 1 > 2 * m->nbuckets) && (grow(m) != 0))
        rc = -1;
    if (m->nbuckets == 0)
        return -1;
    size_t b      = hash & (m->nbuckets - 1);
    node->next    = m->buckets[b];
    m->buckets[b] = node;
    m->count++;
    return rc;
}

void mc_chmap_remove(mc_chmap_t *m, mc_cnode_t *node)
{
    mc_cnode_t **pp = &m->buckets[m->hash_of(node) & (m->nbuckets - 1)];
    while (*pp != NULL) {
        if (*pp == node) {
            *pp = node->next;
            m->count--;
            return;
        }
        pp = &(*pp)->next;
    }
}

mc_cnode_t *mc_chmap_next(const mc_chmap_t *m, mc_chmap_iter_t *it)
{
    mc_cnode_t *n = it->next;
    while ((n == NULL) && (it->bucket < m->nbuckets))
        n = m->buckets[it->bucket++];
    it->next = n ? n->next : NULL;
    return n;
}

mc_cnode_t *mc_chmap_first(const mc_chmap_t *m, mc_chmap_iter_t *it)
{
    it->bucket = 0;
    it->next   = NULL;
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

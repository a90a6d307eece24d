/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intrusive chained hash table.  Entries embed an mc_hnode_t and are found
 * by a 64-bit hash plus a caller-supplied equality test against a lookup
 * key; the table never allocates entries, only its bucket array, which
 * doubles when the load passes 2 (amortised O(1) insert, O(1) lookup).
 * Not thread-safe.
 */
#ifndef MC_COMMON_HASHMAP_H
#define MC_COMMON_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mc_hnode {
    struct mc_hnode *next;
    uint64_t hash;
} mc_hnode_t;

/* Return non-zero when @p node matches @p key. */
typedef int (*mc_hmap_eq_func_t)(const mc_hnode_t *node, const void *key);

typedef struct mc_hmap {
    mc_hnode_t **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
} mc_hmap_t;

int mc_hmap_init(mc_hmap_t *m, size_t initial_buckets);
void mc_hmap_cleanup(mc_hmap_t *m); /* frees buckets, not entries */

mc_hnode_t *mc_hmap_find(const mc_hmap_t *m, uint64_t hash, const void *key,
                         mc_hmap_eq_func_t eq);
/* Caller guarantees the key is absent; returns -1 only if growing failed
 * (the node is still inserted). */
int mc_hmap_insert(mc_hmap_t *m, mc_hnode_t *node, uint64_t hash);
void mc_hmap_remove(mc_hmap_t *m, mc_hnode_t *node);

/* Iterate: for (n = mc_hmap_first(m, &it); n; n = mc_hmap_next(m, &it)).
 * Removing the current node during iteration is allowed. */
typedef struct mc_hmap_iter {
    size_t bucket;
    mc_hnode_t *next;
} mc_hmap_iter_t;
mc_hnode_t *mc_hmap_first(const mc_hmap_t *m, mc_hmap_iter_t *it);
mc_hnode_t *mc_hmap_next(const mc_hmap_t *m, mc_hmap_iter_t *it);

/* 64-bit hash of bytes (FNV-1a mixed with a finaliser); seed lets callers
 * hash (tenant, key) pairs by chaining. */
uint64_t mc_hash_bytes(const void *p, size_t n, uint64_t seed);

#define mc_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif /* MC_COMMON_HASHMAP_H */

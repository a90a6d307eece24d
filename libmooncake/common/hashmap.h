/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intrusive chained hash tables.  Entries embed an mc_hnode_t (mc_hmap_t)
 * or an mc_cnode_t (mc_chmap_t, whose entries keep 32 bits of their hash
 * themselves) and are found by the hash plus a caller-supplied equality
 * test against a lookup key; a table never allocates entries, only its
 * bucket array, which doubles when the load passes 2, its entries moving
 * over during the inserts that follow (O(1) insert, O(1) lookup).  Not
 * thread-safe.
 */
#ifndef MC_COMMON_HASHMAP_H
#define MC_COMMON_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

/*
 * The chain underneath both tables below: the node is one pointer, and
 * the table asks the entry for the low 32 bits of its hash (@c hash_of),
 * which growth uses to place it (so up to 2^32 buckets).
 */
typedef struct mc_cnode {
    struct mc_cnode *next;
} mc_cnode_t;

typedef uint32_t (*mc_chmap_hash_func_t)(const mc_cnode_t *node);
typedef int (*mc_chmap_eq_func_t)(const mc_cnode_t *node, const void *key);

/*
 * Growth is incremental: when the load passes 2 the table gets an array
 * twice the size at once, and the old array's chains move over a few
 * buckets per later insert (MC_CHMAP_MOVE_STEP), so no insert pauses the
 * caller for a walk of every entry (at 10M entries that walk took most of
 * a second).  Meanwhile an entry not yet moved is still found: lookups
 * read the new chain and, while its old bucket is still to move, the old
 * one.  Buckets are numbered as in the new array from the start of a
 * growth, so bucket b (walks by bucket number, mc_chmap_bucket_first)
 * holds exactly the entries whose hash has b in its low bits, wherever
 * they sit.
 */
/* Old buckets moved per insert while a growth is under way. */
#define MC_CHMAP_MOVE_STEP 8

typedef struct mc_chmap {
    mc_cnode_t **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    mc_chmap_hash_func_t hash_of;
    mc_cnode_t **old; /* the array being moved out of; NULL when none */
    size_t nold;      /* its size: nbuckets / 2 */
    size_t moved;     /* its buckets below this are empty (moved) */
} mc_chmap_t;

typedef struct mc_chmap_iter {
    size_t bucket;    /* the next bucket to start */
    size_t end;       /* the bucket to stop before */
    mc_cnode_t *next; /* the next entry of the current bucket */
    int in_old;       /* @c next is on an old chain (filtered) */
} mc_chmap_iter_t;

/*
 * mc_hmap_t: entries embed an mc_hnode_t, which keeps the whole 64-bit
 * hash (16 bytes a node), so callers need not store it.
 */
typedef struct mc_hnode {
    mc_cnode_t link;
    uint64_t hash;
} mc_hnode_t;

/* Return non-zero when @p node matches @p key. */
typedef int (*mc_hmap_eq_func_t)(const mc_hnode_t *node, const void *key);

typedef mc_chmap_t mc_hmap_t;
typedef mc_chmap_iter_t mc_hmap_iter_t;

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
mc_hnode_t *mc_hmap_first(const mc_hmap_t *m, mc_hmap_iter_t *it);
mc_hnode_t *mc_hmap_next(const mc_hmap_t *m, mc_hmap_iter_t *it);

/*
 * mc_chmap_t itself, for tables of millions of entries (the master's
 * object index): the entry keeps the 32 bits of hash wherever it has room
 * and hands them out through @c hash_of; lookups use them to skip entries
 * before the equality test.  Same load and iteration rules.
 */
int mc_chmap_init(mc_chmap_t *m, size_t initial_buckets, mc_chmap_hash_func_t hash_of);
void mc_chmap_cleanup(mc_chmap_t *m); /* frees buckets, not entries */
mc_cnode_t *mc_chmap_find(const mc_chmap_t *m, uint32_t hash, const void *key,
                          mc_chmap_eq_func_t eq);
/* Caller guarantees the key is absent and that hash_of(node) already
 * answers @p hash; -1 only if growing failed (the node is still in). */
int mc_chmap_insert(mc_chmap_t *m, mc_cnode_t *node, uint32_t hash);
void mc_chmap_remove(mc_chmap_t *m, mc_cnode_t *node);
mc_cnode_t *mc_chmap_first(const mc_chmap_t *m, mc_chmap_iter_t *it);
mc_cnode_t *mc_chmap_next(const mc_chmap_t *m, mc_chmap_iter_t *it);
/* The entries of bucket @p b alone (b < nbuckets), then NULL from
 * mc_chmap_next; for walks that stop between buckets. */
mc_cnode_t *mc_chmap_bucket_first(const mc_chmap_t *m, size_t b, mc_chmap_iter_t *it);

/*
 * Hints for a caller with many lookups in hand (a batch): a table far
 * larger than the caches stalls each find on its bucket slot and then on
 * the chain's first entry.  Start loading the slot of @p hash with
 * mc_chmap_prefetch; once it had time to arrive, mc_chmap_head returns the
 * chain's first entry (NULL when empty) for the caller to prefetch what
 * its equality test reads.  Neither changes the table.
 */
static inline void mc_chmap_prefetch(const mc_chmap_t *m, uint32_t hash)
{
    if (m->nbuckets > 0)
        __builtin_prefetch(&m->buckets[hash & (m->nbuckets - 1)]);
}

static inline const mc_cnode_t *mc_chmap_head(const mc_chmap_t *m, uint32_t hash)
{
    const mc_cnode_t *n = (m->nbuckets > 0) ? m->buckets[hash & (m->nbuckets - 1)] : NULL;
    if ((n == NULL) && (m->old != NULL) && ((hash & (m->nold - 1)) >= m->moved))
        n = m->old[hash & (m->nold - 1)]; /* not moved yet */
    return n;
}

/* 64-bit hash of bytes (FNV-1a mixed with a finaliser); seed lets callers
 * hash (tenant, key) pairs by chaining. */
uint64_t mc_hash_bytes(const void *p, size_t n, uint64_t seed);

#define mc_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif /* MC_COMMON_HASHMAP_H */

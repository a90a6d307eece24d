/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The location cache (docs/architecture.md, "Location cache"): key ->
 * where the object's bytes live, kept while this client holds a read
 * lease on the key, so that a repeated read goes straight to the holder
 * without asking the master again.
 *
 * The cache stores opaque blobs (query.c puts a relocatable copy of a
 * lookup's result there) with a deadline on the monotonic clock, in LRU
 * order, bounded by a count of entries and by bytes.  One cache belongs to
 * one store handle, and a handle talks to the master as one tenant, so
 * the key alone names an object.
 *
 * Invalidation: every local write or removal drops its keys (or the whole
 * cache) after the master answered, and bumps an epoch.  A lookup notes
 * the epoch before it asks the master and inserts its answer only if no
 * invalidation happened meanwhile: an answer from before a local write can
 * never be cached after it.  Thread-safe (one mutex).
 *
 * Owns: the interface of loc_cache.c, part of read/'s door (read/read.h
 *   includes it; tiers/disk_hints.c keeps its hints in one).
 * May call: nothing (a leaf).
 */
#ifndef MC_STORE_LOC_CACHE_H
#define MC_STORE_LOC_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

typedef struct mc_loc_cache mc_loc_cache_t;

/* Default number of entries (MC_STORE_LOCATION_CACHE). */
#define MC_LOC_CACHE_DEFAULT_ENTRIES 65536u
/* Most entries the setting accepts. */
#define MC_LOC_CACHE_MAX_ENTRIES     (16u * 1024u * 1024u)
/* Bytes of keys and blobs kept at most, whatever the entry count. */
#define MC_LOC_CACHE_MAX_BYTES       (64u * 1024u * 1024u)

/*
 * The entry count the environment asks for: MC_STORE_LOCATION_CACHE, a
 * decimal count of entries, 0 turning the cache off; unset: the default.
 * MC_INVALID_PARAMS (detail names the variable) for anything else.
 */
mc_status_t mc_loc_cache_config(size_t *entries_p);

/* A cache of at most @p entries entries (> 0). */
mc_status_t mc_loc_cache_create(size_t entries, mc_loc_cache_t **cache_p);
/* Accepts NULL. */
void mc_loc_cache_destroy(mc_loc_cache_t *c);

/* The invalidation epoch, to pass to mc_loc_cache_put. */
uint64_t mc_loc_cache_epoch(mc_loc_cache_t *c);

/*
 * A malloc'd copy of the blob cached for @p key when its deadline is
 * still ahead of @p now_ns (*len_p and *deadline_p written), else NULL.  A
 * hit moves the entry to the most-recently-used end; an expired entry is
 * dropped.
 */
void *mc_loc_cache_get(mc_loc_cache_t *c, const char *key, size_t klen, uint64_t now_ns,
                       size_t *len_p, uint64_t *deadline_p);

/* The first @p n bytes (at most) of the live blob cached for @p key into
 * @p out, for a look that is not a lookup: no hit or miss is counted and
 * the entry keeps its place.  Bytes copied, 0 when none is live. */
size_t mc_loc_cache_peek(mc_loc_cache_t *c, const char *key, size_t klen, uint64_t now_ns,
                         void *out, size_t n);

/* Cache @p blob for @p key until @p deadline_ns, replacing any entry,
 * unless the epoch moved past @p epoch since the caller read it.  Best
 * effort: out of memory caches nothing. */
void mc_loc_cache_put(mc_loc_cache_t *c, const char *key, size_t klen, const void *blob,
                      size_t len, uint64_t deadline_ns, uint64_t epoch);

/* Forget @p key (a local write or removal of it). */
void mc_loc_cache_drop(mc_loc_cache_t *c, const char *key, size_t klen);
/* Forget everything (remove_all, remove_by_regex, a new master). */
void mc_loc_cache_clear(mc_loc_cache_t *c);

typedef struct mc_loc_cache_stats {
    uint64_t hits;     /* lookups answered from the cache */
    uint64_t misses;   /* lookups that found nothing live */
    uint64_t inserts;  /* answers cached */
    uint64_t drops;    /* entries dropped: invalidation, a failed read, expiry */
    uint64_t entries;  /* entries now */
} mc_loc_cache_stats_t;

void mc_loc_cache_stats(mc_loc_cache_t *c, mc_loc_cache_stats_t *out);

#endif /* MC_STORE_LOC_CACHE_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction (docs/protocol.md §5.12): the master's LRU order of objects and
 * the two ways it frees memory from it.
 *
 * The LRU is m->lru, an intrusive list of mc_object_t.lru_link, least
 * recently used at the head.  PUT_END, UPSERT_END and every lease grant
 * move an object to the tail (mc_master_lru_touch, O(1)).  Objects that
 * can never be evicted in their present state (incomplete, hard-pinned)
 * are dropped from the list lazily when a walk meets them; the events that
 * make them evictable again (PUT_END, UPSERT_END) touch them back in.
 *
 *  - background: every tick, when allocated/capacity exceeds
 *    --eviction_high_watermark_ratio, evict LRU-first until
 *    --eviction_ratio of the capacity (in bytes) has been freed;
 *  - inline: a PUT_START/UPSERT_START whose placement found no room calls
 *    mc_master_evict_until() to evict LRU-first until its allocation
 *    succeeds, so a put fails with NO_AVAILABLE_HANDLE only when no
 *    evictable object is left.
 *
 * An object is evictable when it is complete, not hard-pinned, not being
 * upserted, its lease has run out, and its soft pin is not active; soft-
 * pinned objects are taken in a second pass, only with
 * --allow_evict_soft_pinned_objects and only when the first found too
 * little.  A member of a group (group_ids) goes only together with every
 * other member, when all of them are evictable (docs/protocol.md §5.12).
 *
 * Owns: the eviction interface (index/).
 * May call: nothing.
 */
#ifndef MC_MASTER_EVICT_H
#define MC_MASTER_EVICT_H

#include <stdint.h>

#include "master.h"

/* Move @p o to the most-recently-used end (inserting it when absent). */
void mc_master_lru_touch(mc_master_t *m, mc_object_t *o);

/* Background pass (the tick): see above. */
void mc_master_evict_tick(mc_master_t *m, uint64_t now_ms);

/*
 * Inline eviction for a write of @p o_size bytes: evict evictable objects,
 * least recently used first and never @p keep (may be NULL), calling
 * @p try_place(arg) after enough bytes were freed and after every
 * eviction from then on.  Returns try_place's first nonzero result, or 0
 * when nothing evictable is left and it still failed.
 */
uint32_t mc_master_evict_until(mc_master_t *m, uint64_t now_ms, uint64_t o_size,
                               const mc_object_t *keep, uint32_t (*try_place)(void *arg),
                               void *arg);

#endif /* MC_MASTER_EVICT_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction: the LRU order and the background and inline passes over it
 * (evict.h, docs/protocol.md §5.12).
 *
 * A pass walks m->lru from the head, so the cost of one eviction is the
 * number of objects skipped before an evictable one (leased or soft-pinned
 * objects near the head), never a scan of the index.  Objects that will
 * stay unevictable until an event touches them again (incomplete,
 * hard-pinned) are unlinked as the walk meets them, so they are skipped
 * at most once.  Everything runs on the event loop (docs/threads.md).
 *
 * Groups: a member of a group of two or more is taken only when every
 * member is evictable (and none is the object being written), and then
 * the whole group goes at once, so no group is ever left half evicted.
 * Checking and taking a group walks its member list (O(group size)).
 *
 * Owns: the LRU order and the background and inline eviction passes.
 * May call: index/, tiers/ (an object's NoF or disk copy keeps it).
 */
#include "config.h"

#include <inttypes.h>

#include "common/log.h"
#include "evict.h"
#include "index.h"
#include "tiers/tiers.h"

void mc_master_lru_touch(mc_master_t *m, mc_object_t *o)
{
    /* lru_link is pending_link until the object completes (master.h); an
     * incomplete object could not be evicted anyway (evictable() == -1) */
    if (!o->complete)
        return;
    mc_mlist_remove(&o->lru_link);
    mc_mlist_insert_tail(&m->lru, &o->lru_link);
}

/* 1: evictable now; 0: skip for now; -1: unevictable until touched. */
static int evictable(const mc_object_t *o, uint64_t now_ms, int soft_ok, int offload_wait)
{
    const mc_replica_t *r;

    /* a disk-only object holds no memory (docs/tiers.md) */
    /* ... nor does one left only with NoF replicas (nof.c) */
    if (!o->complete || o->hard_pin || !mc_master_object_has_memory(o))
        return -1;
    if ((o->upsert != MC_UPSERT_NONE) || mc_object_replicating(o))
        return 0;
    if (o->lease_deadline_ms > now_ms)
        return 0;
    /* --offload_on_evict: nothing leaves memory before its disk copy is
     * reported; a put may wait (NO_AVAILABLE_HANDLE) for the offloader */
    if (offload_wait && !mc_master_object_has_disk(o))
        return 0;
    if ((mc_object_soft_pin_deadline(o) > now_ms) && !soft_ok)
        return 0;
    /* restored from the operation log, its segment not remounted yet:
     * freeing it would not make room anywhere a put can go */
    mc_object_for_each_replica(r, o)
    {
        if (r->seg->state == MC_SEG_AWAITING)
            return 0;
    }
    return 1;
}

/* Erase @p o (only its memory replicas when @p keep_disk and it has a disk
 * replica) and account for it; returns the bytes given back. */
static uint64_t evict_one(mc_master_t *m, mc_object_t *o, int keep_disk)
{
    uint64_t before = m->allocated_bytes;
    uint64_t freed;

    mc_debug("evicting key '%.*s' (%" PRIu64 " bytes)", (int)MC_MIN(o->key_len, 200u),
             mc_object_key(o).ptr, o->size);
    /* with a copy on a holder's disk, only the memory goes: the object
     * stays readable from disk (--enable_offload, docs/tiers.md) */
    /* likewise with a NoF replica: only the memory goes (nof.c) */
    if (keep_disk && mc_master_nof_drop_memory(m, o))
        ;
    else if (!keep_disk || !mc_master_object_drop_memory(m, o))
        mc_master_object_erase(m, o);
    freed = before >= m->allocated_bytes ? before - m->allocated_bytes : 0;
    m->evicted_keys++;
    m->evicted_bytes += freed;
    return freed;
}

/* 1 when every member of @p g is evictable and none is @p keep. */
static int group_evictable(const mc_group_t *g, uint64_t now_ms, int soft_ok,
                           const mc_object_t *keep, int offload_wait)
{
    const mc_mlist_t *pos;

    for (pos = g->members.next; pos != &g->members; pos = pos->next) {
        const mc_object_t *o = mc_container_of(pos, mc_object_ext_t, group_link)->obj;
        if ((o == keep) || (evictable(o, now_ms, soft_ok, offload_wait) != 1))
            return 0;
    }
    return 1;
}

/* Erase every member of @p g (freed with its last member). */
static uint64_t evict_group(mc_master_t *m, mc_group_t *g)
{
    uint64_t freed = 0;
    int last;

    mc_debug("evicting group '%.*s' (%" PRIu32 " members)", (int)MC_MIN(g->id_len, 200u),
             g->strs + g->tenant_len, g->count);
    do {
        last = g->count == 1;
        /* a group goes whole, disk copies too: its members stay together */
        freed += evict_one(m, mc_container_of(g->members.next, mc_object_ext_t, group_link)->obj, 0);
    } while (!last);
    return freed;
}

/*
 * One walk of the LRU taking evictable objects (soft-pinned ones too when
 * @p soft_ok), other than @p keep, until @p done says stop.  @p done is
 * asked after every eviction with the running total; returns that total.
 */
typedef int (*evict_done_fn)(uint64_t freed, void *arg);

static uint64_t evict_walk(mc_master_t *m, uint64_t now_ms, int soft_ok, const mc_object_t *keep,
                           uint64_t freed, evict_done_fn done, void *arg, int *stop_p)
{
    mc_mlist_t *pos, *tmp;

    mc_mlist_for_each_safe(pos, tmp, &m->lru)
    {
        mc_object_t *o = mc_container_of(pos, mc_object_t, lru_link);
        int e;

        if (o == keep)
            continue;
        e = evictable(o, now_ms, soft_ok, m->cfg->offload_on_evict);
        if (e < 0) {
            mc_mlist_remove(&o->lru_link);
            continue;
        }
        if (e == 0)
            continue;
        if ((mc_object_group(o) != NULL) && (mc_object_group(o)->count > 1)) {
            mc_group_t *g = mc_object_group(o);
            if (!group_evictable(g, now_ms, soft_ok, keep, m->cfg->offload_on_evict))
                continue;
            /* the next entry may be a member: step past the group's
             * members before erasing them, so tmp stays valid */
            while ((tmp != &m->lru) && (mc_object_group(mc_container_of(tmp, mc_object_t, lru_link)) == g))
                tmp = tmp->next;
            freed += evict_group(m, g);
        } else {
            /* erasing @p o never touches another object: tmp stays valid */
            freed += evict_one(m, o, 1);
        }
        if (done(freed, arg)) {
            *stop_p = 1;
            break;
        }
    }
    return freed;
}

/* Background pass target. */
static int target_done(uint64_t freed, void *arg)
{
    return freed >= *(const uint64_t *)arg;
}

void mc_master_evict_tick(mc_master_t *m, uint64_t now_ms)
{
    double used, target_d;
    uint64_t target, freed = 0;
    int stop = 0;

    if ((m->capacity_bytes == 0) || mc_mlist_empty(&m->lru))
        return;
    used = (double)m->allocated_bytes / (double)m->capacity_bytes;
    if (used <= m->cfg->eviction_high_watermark_ratio)
        return;
    m->eviction_attempts++;
    target_d = m->cfg->eviction_ratio * (double)m->capacity_bytes;
    target   = target_d < 1.0 ? 1 : (uint64_t)target_d;
    freed    = evict_walk(m, now_ms, 0, NULL, 0, target_done, &target, &stop);
    if (!stop && m->cfg->allow_evict_soft_pinned_objects)
        freed = evict_walk(m, now_ms, 1, NULL, freed, target_done, &target, &stop);
    if (freed > 0) {
        m->evictions++;
        mc_debug("background eviction freed %" PRIu64 " bytes (target %" PRIu64 ")", freed,
                 target);
    }
}

/* Inline pass state. */
typedef struct inline_ctx {
    uint64_t want;             /* bytes to free before the first retry */
    uint32_t (*try_place)(void *arg);
    void *arg;
    uint32_t placed;
} inline_ctx_t;

static int inline_done(uint64_t freed, void *arg)
{
    inline_ctx_t *c = arg;
    if (freed < c->want)
        return 0;
    c->placed = c->try_place(c->arg);
    return c->placed != 0;
}

uint32_t mc_master_evict_until(mc_master_t *m, uint64_t now_ms, uint64_t o_size,
                               const mc_object_t *keep, uint32_t (*try_place)(void *arg),
                               void *arg)
{
    uint64_t free_now = m->capacity_bytes > m->allocated_bytes
                            ? m->capacity_bytes - m->allocated_bytes : 0;
    /* free space that did not fit is fragmented or on other segments:
     * retry after every eviction once the shortfall is covered */
    inline_ctx_t c = {o_size > free_now ? o_size - free_now : 1, try_place, arg, 0};
    uint64_t freed;
    int stop = 0;

    m->eviction_attempts++;
    freed = evict_walk(m, now_ms, 0, keep, 0, inline_done, &c, &stop);
    if (!stop && m->cfg->allow_evict_soft_pinned_objects)
        freed = evict_walk(m, now_ms, 1, keep, freed, inline_done, &c, &stop);
    if (freed > 0)
        m->evictions++;
    /* fewer bytes freed than asked: the last chance is what is there now */
    if (!stop && (freed > 0) && (freed < c.want))
        c.placed = try_place(arg);
    return c.placed;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registration generations (docs/transfer.md §3.6), shared by the
 * transfer engine, which checks them, the store, which names them, and
 * the master, which hands them out.
 *
 * A generation is a registration's base (the top 40 bits; the store
 * derives it from the id of the segment the memory holds, the top bit set)
 * and a reuse counter (the low 24 bits).  The master moves a segment's
 * counter on when it hands out memory that a reader may still be reading;
 * a holder adopts a later counter of its own base and refuses requests
 * that name an earlier one.  Counters compare as serial numbers, so they
 * may wrap.  Only generations with the top bit set have a counter.
 */
#ifndef MC_COMMON_GEN_H
#define MC_COMMON_GEN_H

#include <stdint.h>

#define MC_GEN_COUNTER_BITS 24
#define MC_GEN_COUNTER_MASK ((UINT64_C(1) << MC_GEN_COUNTER_BITS) - 1u)

/* @p gen with its counter at 0: its registration. */
static inline uint64_t mc_gen_base(uint64_t gen)
{
    return gen & ~MC_GEN_COUNTER_MASK;
}

/* 1 when @p a is a later counter of @p b's registration. */
static inline int mc_gen_newer(uint64_t a, uint64_t b)
{
    uint64_t d = (a - b) & MC_GEN_COUNTER_MASK;
    return ((a >> 63) != 0) && (mc_gen_base(a) == mc_gen_base(b)) && (d != 0) &&
           (d <= (MC_GEN_COUNTER_MASK >> 1));
}

/*
 * Fences.  A counter that is a multiple of MC_GEN_FENCE_STEP is a *fence*:
 * a holder that adopts it refuses from then on not only reads but also
 * writes that name an earlier counter.  The master moves a segment to the
 * next fence when memory that a writer may still be writing is handed out
 * again (a put in progress removed by force), and a holder jumps to the
 * fence MC_GEN_REMOUNT_STEP ahead before it mounts again after losing its
 * master (a restart, a takeover), so that no placement of an earlier
 * master lands.  Any other later counter only fences reads: memory freed
 * under a reader's lease has no writer left, and the writes of other
 * values in the segment, placed under an earlier counter, stay welcome.
 */
#define MC_GEN_FENCE_STEP   (UINT64_C(1) << 12)
#define MC_GEN_REMOUNT_STEP (UINT64_C(1) << 16)

/* 1 when @p gen's counter is a fence. */
static inline int mc_gen_is_fence(uint64_t gen)
{
    return (gen & (MC_GEN_FENCE_STEP - 1u)) == 0;
}

/* The next counter of @p gen's registration that fences reads only. */
static inline uint64_t mc_gen_next(uint64_t gen)
{
    uint64_t n = mc_gen_base(gen) | ((gen + 1u) & MC_GEN_COUNTER_MASK);
    return mc_gen_is_fence(n) ? mc_gen_base(gen) | ((gen + 2u) & MC_GEN_COUNTER_MASK) : n;
}

/* The first fence after @p gen that is a multiple of @p step (a power of
 * two, at least MC_GEN_FENCE_STEP). */
static inline uint64_t mc_gen_fence_after(uint64_t gen, uint64_t step)
{
    uint64_t c = ((gen & MC_GEN_COUNTER_MASK) + step) & ~(step - 1u);
    return mc_gen_base(gen) | (c & MC_GEN_COUNTER_MASK);
}

/* 1 when a write naming @p want may land in a region at @p cur whose last
 * fence is @p floor: @p want is of its registration and not older than
 * the fence (a later counter than @p cur is adopted first). */
static inline int mc_gen_write_ok(uint64_t want, uint64_t cur, uint64_t floor)
{
    if ((want == cur) || mc_gen_newer(want, cur))
        return 1;
    return (mc_gen_base(want) == mc_gen_base(cur)) && (want >> 63) &&
           ((want == floor) || mc_gen_newer(want, floor));
}

/* Counter 0 of the registration of a segment with id (@p hi, @p lo); 0
 * (none) for the nil id. */
static inline uint64_t mc_gen_of_segment(uint64_t hi, uint64_t lo)
{
    if ((hi == 0) && (lo == 0))
        return 0;
    return mc_gen_base((hi ^ lo) | (UINT64_C(1) << 63));
}

#endif /* MC_COMMON_GEN_H */

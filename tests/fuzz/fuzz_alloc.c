/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the offset allocator: the input is a program.
 * Bytes 0-8 choose the capacity and alignment; then each 9-byte step is
 * an opcode byte and a 64-bit operand: allocate, free a live block, free
 * a forged or stale block.  After every step the allocator must pass
 * mc_alloc_check(), a new block must not overlap a live one, and the
 * counters must match a shadow list; freeing what is left must give back
 * one block of the whole space.  Any violation aborts.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/offset_alloc.h"

#define MAX_LIVE 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_alloc: %s\n", what);
    abort();
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void add_live(mc_alloc_block_t *live, size_t *n, const mc_alloc_block_t *b,
                     uint64_t capacity, uint64_t alignment)
{
    if (b->size == 0 || b->offset % alignment || b->size % alignment ||
        b->size > capacity || b->offset > capacity - b->size)
        fail("granted block is misaligned or outside the space");
    for (size_t i = 0; i < *n; i++)
        if (!(b->offset + b->size <= live[i].offset || live[i].offset + live[i].size <= b->offset))
            fail("granted block overlaps a live block");
    live[(*n)++] = *b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_alloc_block_t live[MAX_LIVE];
    size_t n = 0;
    uint64_t live_bytes = 0;
    mc_alloc_t *a = NULL;
    mc_alloc_stats_t st;

    if (size < 9)
        return 0;
    uint64_t capacity  = load64(data);
    uint64_t alignment = 1ull << (data[8] % 24);
    if (data[8] & 0x80)
        capacity %= 1ull << 32; /* small spaces exhaust and fragment quickly */
    if (mc_alloc_create(capacity, alignment, &a) != MC_OK)
        return 0;
    capacity &= ~(alignment - 1);

    for (size_t pos = 9; pos + 9 <= size; pos += 9) {
        uint8_t op  = data[pos];
        uint64_t v  = load64(data + pos + 1);
        mc_alloc_block_t b;
        mc_status_t s;
        switch (op % 6) {
        case 0:
        case 1:
        case 2: /* allocate; sizes scaled to the space */
            if (n == MAX_LIVE)
                break;
            if (op & 0x40) {
                uint64_t lim = capacity >> (op % 48);
                if (lim != 0)
                    v = v % lim + 1;
            }
            s = mc_alloc_get(a, v, &b);
            if (s == MC_OK) {
                add_live(live, &n, &b, capacity, alignment);
                live_bytes += b.size;
            } else if (!(s == MC_NO_AVAILABLE_HANDLE || (s == MC_INVALID_PARAMS && v == 0))) {
                fail("unexpected status from mc_alloc_get");
            } else if (s == MC_NO_AVAILABLE_HANDLE) {
                mc_alloc_get_stats(a, &st);
                if (st.largest_free >= v)
                    fail("refused a size no larger than the largest free block");
            }
            break;
        case 3:
        case 4: /* free a live block */
            if (n == 0)
                break;
            {
                size_t i = (size_t)(v % n);
                if (mc_alloc_put(a, &live[i]) != MC_OK)
                    fail("freeing a live block failed");
                live_bytes -= live[i].size;
                b        = live[i];
                live[i]  = live[--n];
                /* a second free of the same handle must be refused */
                if ((op & 0x80) && mc_alloc_put(a, &b) != MC_INVALID_PARAMS)
                    fail("double free was accepted");
            }
            break;
        default: { /* forged block: must be refused unless it is exactly live */
            b.node   = (uint32_t)v;
            b.offset = n ? live[v % n].offset + (op >> 7) : v;
            b.size   = n ? live[v % n].size : v >> 3;
            int is_live = 0;
            for (size_t i = 0; i < n; i++)
                if (live[i].node == b.node && live[i].offset == b.offset &&
                    live[i].size == b.size)
                    is_live = 1;
            if (!is_live && mc_alloc_put(a, &b) != MC_INVALID_PARAMS)
                fail("a forged block was accepted");
            break;
        }
        }
        if (mc_alloc_check(a) != 0)
            fail("mc_alloc_check failed");
        mc_alloc_get_stats(a, &st);
        if (st.allocated != live_bytes || st.used_blocks != n)
            fail("counters disagree with the live blocks");
    }
    for (size_t i = 0; i < n; i++)
        if (mc_alloc_put(a, &live[i]) != MC_OK)
            fail("freeing a live block failed");
    mc_alloc_get_stats(a, &st);
    if (mc_alloc_check(a) != 0 || st.free_blocks != 1 || st.largest_free != capacity)
        fail("freeing everything did not leave one block of the whole space");
    mc_alloc_destroy(a);
    return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRC32C (Castagnoli): the checksum of the master's operation log and of
 * the client's disk-tier records.  SSE4.2's crc32 instruction where the
 * CPU has it, a table otherwise; both give the same value.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common/crc32c.h"


static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
        crc_table[i] = c;
    }
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/*
 * The crc32 instruction has a latency of three cycles and a throughput of
 * one, so one chain runs at a third of the speed the unit allows.  Long
 * inputs go in blocks of three lanes of CRC_LANE bytes, one chain each,
 * and the chains are joined with
 *
 *   crc(r, A || B) = shift(crc(r, A), |B|) ^ crc(0, B)
 *
 * where shift(r, n), the register after n zero bytes, is linear in r: for
 * the one length used, it is the XOR of shift_tab[i] over the bits i set
 * in r, computed once from the single chain.
 */
#define CRC_LANE 4096u
static uint32_t shift_tab[32];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint32_t crc_hw1(uint32_t crc, const uint8_t *p,
                                                          size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}

static void shift_init(void)
{
    static const uint8_t zeros[CRC_LANE];
    for (int i = 0; i < 32; i++)
        shift_tab[i] = crc_hw1(1u << i, zeros, CRC_LANE);
}

static uint32_t shift_lane(uint32_t r)
{
    uint32_t out = 0;
    for (int i = 0; r != 0; i++, r >>= 1)
        if (r & 1)
            out ^= shift_tab[i];
    return out;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n >= 3 * CRC_LANE)
        pthread_once(&shift_once, shift_init);
    while (n >= 3 * CRC_LANE) {
        uint64_t a = crc, b = 0, c = 0, va, vb, vc;
        for (size_t i = 0; i < CRC_LANE; i += 8) {
            memcpy(&va, p + i, 8);
            memcpy(&vb, p + CRC_LANE + i, 8);
            memcpy(&vc, p + 2 * CRC_LANE + i, 8);
            a = __builtin_ia32_crc32di(a, va);
            b = __builtin_ia32_crc32di(b, vb);
            c = __builtin_ia32_crc32di(c, vc);
        }
        crc = shift_lane(shift_lane((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * CRC_LANE;
        n -= 3 * CRC_LANE;
    }
    return crc_hw1(crc, p, n);
}
#endif

uint32_t mc_crc32c(uint32_t crc, const void *p, size_t n)
{
    crc = ~crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2"))
        return ~crc_hw(crc, p, n);
#endif
    return ~crc_soft(crc, p, n);
}

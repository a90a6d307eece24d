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
#include <immintrin.h>

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

/*
 * Folding with carry-less multiplication, where the CPU has VPCLMULQDQ
 * (two 64x64-bit products per 128-bit lane of a ymm register): four
 * accumulators of 32 bytes each take 128 bytes per step, about twice the
 * speed of the three crc32 chains on the development VM's EPYC.
 *
 * Read a 16-byte block as a polynomial A = F·x^64 + S (F its first eight
 * bytes, S the last eight; bit 0 of byte 0 is the highest power, as the
 * reflected CRC reads it).  Only A mod P matters to the CRC, so A followed
 * by D more bits B may be replaced by the block F·(x^(D+64) mod P) +
 * S·(x^D mod P) + B: each product is under 96 bits, so the sum is again
 * one 16-byte block.  PCLMULQDQ of two reflected 64-bit values yields
 * their product times x, so the constants are x^(D+63) and x^(D-1) mod P,
 * reflected into the high half of a 64-bit word (fold_const).  The
 * register state enters by XOR into the first four bytes; the last block
 * leaves through two crc32 steps from a zero state, which reduce it mod P.
 * Tested against a bitwise CRC for every length and alignment that
 * reaches each branch (tests/unit/test_store_disk.c).
 */
typedef struct {
    uint64_t lo, hi;
} fold_k_t;
static fold_k_t fold_k128, fold_k256, fold_k512, fold_k768, fold_k1024;
static pthread_once_t fold_once = PTHREAD_ONCE_INIT;
static int fold_ok;

static uint64_t fold_const(unsigned n)
{
    uint64_t r = 1, v = 0;

    for (unsigned i = 0; i < n; i++) { /* x^n mod P, P = x^32 + 0x1EDC6F41 */
        r <<= 1;
        if (r & (UINT64_C(1) << 32))
            r ^= UINT64_C(0x11EDC6F41);
    }
    for (int d = 0; d < 32; d++)
        if ((r >> d) & 1)
            v |= UINT64_C(1) << (63 - d);
    return v;
}

static void fold_init(void)
{
    fold_k_t *k[] = {&fold_k128, &fold_k256, &fold_k512, &fold_k768, &fold_k1024};
    unsigned d[]  = {128, 256, 512, 768, 1024};

    for (size_t i = 0; i < 5; i++) {
        k[i]->lo = fold_const(d[i] + 63);
        k[i]->hi = fold_const(d[i] - 1);
    }
    fold_ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") &&
              __builtin_cpu_supports("vpclmulqdq");
}

#define FOLD_TARGET __attribute__((target("avx2,pclmul,vpclmulqdq,sse4.2")))

FOLD_TARGET static inline __m256i fold_k256x2(const fold_k_t *k)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)k));
}

FOLD_TARGET static inline __m256i fold256(__m256i a, __m256i k)
{
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00),
                            _mm256_clmulepi64_epi128(a, k, 0x11));
}

FOLD_TARGET static inline __m128i fold128(__m128i a, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

FOLD_TARGET static inline __m256i load256(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* The register state after @p n (at least FOLD_MIN) bytes at @p p. */
#define FOLD_MIN 256u
FOLD_TARGET static uint32_t crc_fold(uint32_t crc, const uint8_t *p, size_t n)
{
    __m256i k  = fold_k256x2(&fold_k1024);
    __m256i y0 = _mm256_xor_si256(load256(p), _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)crc)));
    __m256i y1 = load256(p + 32), y2 = load256(p + 64), y3 = load256(p + 96);
    __m128i a, k1;
    uint64_t c;

    for (p += 128, n -= 128; n >= 128; p += 128, n -= 128) {
        y0 = _mm256_xor_si256(fold256(y0, k), load256(p));
        y1 = _mm256_xor_si256(fold256(y1, k), load256(p + 32));
        y2 = _mm256_xor_si256(fold256(y2, k), load256(p + 64));
        y3 = _mm256_xor_si256(fold256(y3, k), load256(p + 96));
    }
    y0 = _mm256_xor_si256(_mm256_xor_si256(fold256(y0, fold_k256x2(&fold_k768)),
                                           fold256(y1, fold_k256x2(&fold_k512))),
                          _mm256_xor_si256(fold256(y2, fold_k256x2(&fold_k256)), y3));
    k1 = _mm_loadu_si128((const __m128i *)(const void *)&fold_k128);
    a  = _mm_xor_si128(fold128(_mm256_castsi256_si128(y0), k1), _mm256_extracti128_si256(y0, 1));
    for (; n >= 16; p += 16, n -= 16)
        a = _mm_xor_si128(fold128(a, k1), _mm_loadu_si128((const __m128i *)(const void *)p));
    c = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(a));
    c = __builtin_ia32_crc32di(c, (uint64_t)_mm_extract_epi64(a, 1));
    return crc_hw1((uint32_t)c, p, n);
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n >= FOLD_MIN) {
        pthread_once(&fold_once, fold_init);
        if (fold_ok)
            return crc_fold(crc, p, n);
    }
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

/*
 * Combining: the CRC of A||B from crc(A), crc(B) and |B| is
 * crc(A)·x^(8|B|) mod P, XOR crc(B) (the initial and final inversions
 * cancel).  Polynomials are reflected as the CRC holds them: bit 31 is
 * x^0, bit 0 is x^31.  x^(8n) comes from a table of x^(2^k), one product
 * per set bit of n.
 */
static uint32_t pow2_tab[67]; /* x^(2^k) mod P */
static pthread_once_t pow2_once = PTHREAD_ONCE_INIT;

/* a·b mod P */
static uint32_t gf_mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;

    for (int i = 0; i < 32; i++) {
        if (a & (UINT32_C(0x80000000) >> i))
            p ^= b;
        b = (b & 1) ? (b >> 1) ^ 0x82F63B78u : (b >> 1);
    }
    return p;
}

static void pow2_init(void)
{
    pow2_tab[0] = UINT32_C(0x40000000); /* x^1 */
    for (size_t k = 1; k < sizeof(pow2_tab) / sizeof(pow2_tab[0]); k++)
        pow2_tab[k] = gf_mul(pow2_tab[k - 1], pow2_tab[k - 1]);
}

uint32_t mc_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    uint32_t x = UINT32_C(0x80000000); /* x^(8 len2), from x^0 */

    pthread_once(&pow2_once, pow2_init);
    for (unsigned k = 3; len2 != 0; len2 >>= 1, k++)
        if (len2 & 1)
            x = gf_mul(pow2_tab[k], x);
    return gf_mul(x, crc1) ^ crc2;
}

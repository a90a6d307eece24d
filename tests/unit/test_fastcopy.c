/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mc_fastcopy_gather(): every source lands at its prefix-sum offset, for
 * one thread and for many (ranges that start and end inside sources,
 * empty sources, more threads than sources), nothing past the total is
 * written, and bad arguments are refused before a byte moves.  And
 * mc_copy_stream(), the row copy of the same-host paths: every
 * destination and source alignment and length around its thresholds
 * copies exactly the row.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/fastcopy.h>

#include "check_suites.h"
#include "common/copy.h"
#include "common/util.h"

#define NSRC 97

/* Sources of uneven lengths (some empty) with a recognisable pattern. */
static size_t make_sources(mc_iov_t *iov, uint8_t **bufs, size_t unit)
{
    size_t total = 0;
    for (size_t i = 0; i < NSRC; i++) {
        size_t len = (i % 7 == 3) ? 0 : unit * (1 + (i * 37) % 23) + i;
        bufs[i]    = malloc(len + 1);
        ck_assert_ptr_nonnull(bufs[i]);
        for (size_t j = 0; j < len; j++)
            bufs[i][j] = (uint8_t)(i * 31 + j);
        iov[i] = (mc_iov_t){(len > 0) ? bufs[i] : NULL, len};
        total += len;
    }
    return total;
}

static void check_gather(size_t unit, unsigned nthreads)
{
    mc_iov_t iov[NSRC];
    uint8_t *bufs[NSRC];
    size_t total = make_sources(iov, bufs, unit), copied = 0, off = 0;
    uint8_t *dst = malloc(total + 64);

    ck_assert_ptr_nonnull(dst);
    memset(dst, 0xAB, total + 64);
    ck_assert_status_ok(mc_fastcopy_gather(dst, total + 64, iov, NSRC, nthreads, &copied));
    ck_assert_msg(copied == total, "%zu threads copied %zu bytes, not %zu", (size_t)nthreads,
                  copied, total);
    for (size_t i = 0; i < NSRC; i++) {
        ck_assert_msg((iov[i].len == 0) || (memcmp(dst + off, bufs[i], iov[i].len) == 0),
                      "source %zu should be at offset %zu (%u threads)", i, off, nthreads);
        off += iov[i].len;
        free(bufs[i]);
    }
    for (size_t j = total; j < total + 64; j++)
        ck_assert_msg(dst[j] == 0xAB, "byte %zu past the total was written", j);
    free(dst);
}

START_TEST(test_gather_single_and_threaded)
{
    check_gather(3, 1);
    check_gather(3, 8); /* under the threading minimum: one thread */
    check_gather(4096, 1);
    check_gather(4096, 2);
    check_gather(4096, 3);
    check_gather(4096, 64);
    check_gather(4096, 1000); /* clamped to MC_FASTCOPY_MAX_THREADS */
}
END_TEST

START_TEST(test_gather_refusals)
{
    uint8_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8];
    mc_iov_t two[2] = {{a, 5}, {a, 4}};
    mc_iov_t null_base[1] = {{NULL, 1}};
    mc_iov_t huge[2] = {{a, SIZE_MAX}, {a, 2}};
    size_t copied = 77;

    memset(dst, 0, sizeof(dst));
    ck_assert_status_eq(mc_fastcopy_gather(dst, 8, two, 2, 1, &copied), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "destination buffer too small") != NULL,
                  "the detail should say the destination is too small: %s",
                  mc_last_error_detail());
    ck_assert_msg((copied == 77) && (dst[0] == 0), "a refused call must not copy anything");
    ck_assert_status_eq(mc_fastcopy_gather(dst, 8, null_base, 1, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_fastcopy_gather(dst, 8, NULL, 1, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_fastcopy_gather(dst, 8, huge, 2, 1, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_fastcopy_gather(NULL, 8, two, 1, 1, NULL), MC_INVALID_PARAMS);
    /* nothing to copy: fine, even with no destination */
    ck_assert_status_ok(mc_fastcopy_gather(NULL, 0, NULL, 0, 4, &copied));
    ck_assert_uint_eq(copied, 0);
    ck_assert_status_ok(mc_fastcopy_gather(dst, 8, two, 1, 0, &copied));
    ck_assert_uint_eq(copied, 5);
    ck_assert_msg(memcmp(dst, a, 5) == 0, "the first source should have been copied");
}
END_TEST

/* Rows at every offset within two cache lines, of lengths on both sides
 * of the streaming threshold and of a line: the row lands whole (its
 * streamed lines included, once fenced) and not a byte before or after. */
START_TEST(test_copy_stream_alignments)
{
    static const size_t lens[] = {0,   1,   63,  64,  65,  255, 256, 257,
                                  319, 320, 321, 383, 1000, 4100, 8195, 12288};
    enum { PAD = 192 };
    const size_t cap = 12288 + 2 * PAD + 128;
    uint8_t *src     = malloc(cap), *dst = aligned_alloc(64, cap), *want = malloc(cap);

    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    ck_assert_ptr_nonnull(want);
    for (size_t i = 0; i < cap; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    for (size_t l = 0; l < MC_ARRAY_SIZE(lens); l++) {
        for (size_t d = 0; d < 128; d++) {
            for (size_t so = 0; so < 64; so += 13) {
                memset(dst, 0xa5, cap);
                memset(want, 0xa5, cap);
                memcpy(want + PAD + d, src + so, lens[l]);
                mc_copy_stream(dst + PAD + d, src + so, lens[l]);
                mc_copy_stream_fence();
                ck_assert_msg(memcmp(dst, want, cap) == 0,
                              "a %zu-byte row to offset %zu from offset %zu differs", lens[l], d,
                              so);
            }
        }
    }
    free(src);
    free(dst);
    free(want);
}
END_TEST

Suite *mc_test_fastcopy_suite(void)
{
    Suite *s  = suite_create("fastcopy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_gather_single_and_threaded);
    tcase_add_test(tc, test_gather_refusals);
    tcase_add_test(tc, test_copy_stream_alignments);
    suite_add_tcase(s, tc);
    return s;
}

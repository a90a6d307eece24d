/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The typed-ragged codec (include/mooncake/codec.h): rows of mixed shapes,
 * null rows, 0-d and empty rows pack into exactly upstream's layout (data
 * back to back, offsets from 0, zero-padded shapes, ndims, nulls), large
 * inputs pack the same with threads, bad rows are refused before anything
 * is written, describe gives pack's arrays without touching the data (and
 * refuses what pack refuses, writing nothing), the checker refuses corrupt
 * layouts row by row, and row selections give merged runs and repacked
 * offsets.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/codec.h>

#include "check_suites.h"

static const int64_t shape_a[1]  = {3};
static const int64_t shape_b[2]  = {2, 2};
static const int64_t shape_e[1]  = {0};
static const int32_t data_a[3]   = {1, 2, 3};
static const int32_t data_b[4]   = {4, 5, 6, 7};
static const int32_t data_s[1]   = {8};

/* rows: [1 2 3], None, [[4 5] [6 7]], 8 (0-d), [] */
static void five_rows(mc_codec_row_t *rows)
{
    memset(rows, 0, 5 * sizeof(*rows));
    rows[0] = (mc_codec_row_t){data_a, sizeof(data_a), 1, 0, shape_a};
    rows[1].is_null = 1;
    rows[2] = (mc_codec_row_t){data_b, sizeof(data_b), 2, 0, shape_b};
    rows[3] = (mc_codec_row_t){data_s, sizeof(data_s), 0, 0, NULL};
    rows[4] = (mc_codec_row_t){NULL, 0, 1, 0, shape_e};
}

START_TEST(test_pack_layout)
{
    mc_codec_row_t rows[5];
    size_t elems = 0;
    uint32_t max_ndim = 0;
    int32_t data[8];
    int64_t offsets[6], shapes[10];
    int16_t ndims[5];
    uint8_t nulls[5];
    const int32_t want_data[8]    = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t want_off[6]     = {0, 3, 3, 7, 8, 8};
    const int64_t want_shapes[10] = {3, 0, 0, 0, 2, 2, 0, 0, 0, 0};
    const int16_t want_ndims[5]   = {1, 0, 2, 0, 1};
    const uint8_t want_nulls[5]   = {0, 1, 0, 0, 0};

    five_rows(rows);
    ck_assert_status_ok(mc_codec_ragged_measure(rows, 5, 4, &elems, &max_ndim));
    ck_assert_msg(elems == 8 && max_ndim == 2, "5 rows should hold 8 elements, ndim <= 2; "
                  "got %zu and %u", elems, max_ndim);
    memset(shapes, 0x5A, sizeof(shapes));
    ck_assert_status_ok(mc_codec_ragged_pack(rows, 5, 4, data, sizeof(data), offsets, shapes, 2,
                                             ndims, nulls, 1));
    ck_assert_msg(memcmp(data, want_data, sizeof(data)) == 0, "the data should be the rows "
                  "back to back");
    ck_assert_msg(memcmp(offsets, want_off, sizeof(offsets)) == 0, "offsets should count "
                  "elements from 0, a null row adding none");
    ck_assert_msg(memcmp(shapes, want_shapes, sizeof(shapes)) == 0, "shapes should be zero "
                  "padded to the width");
    ck_assert_msg(memcmp(ndims, want_ndims, sizeof(ndims)) == 0, "ndims should be per row");
    ck_assert_msg(memcmp(nulls, want_nulls, sizeof(nulls)) == 0, "only row 1 is null");
    ck_assert_status_ok(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 5, 8));
}
END_TEST

START_TEST(test_pack_threaded_matches)
{
    enum { N = 600 };
    mc_codec_row_t *rows = calloc(N, sizeof(*rows));
    int64_t *lens = calloc(N, sizeof(*lens));
    int64_t *off1 = calloc(N + 1, sizeof(*off1)), *off2 = calloc(N + 1, sizeof(*off2));
    int64_t *sh = calloc(N, sizeof(*sh));
    int16_t *nd = calloc(N, sizeof(*nd));
    uint8_t *nu = calloc(N, 1);
    size_t elems = 0, total = 0;
    uint8_t *src, *d1, *d2;

    ck_assert_ptr_nonnull(rows);
    for (size_t i = 0; i < N; i++) {
        lens[i] = (int64_t)((i * 7919) % 40000);
        total += (size_t)lens[i];
    }
    src = malloc(total);
    d1 = malloc(total);
    d2 = malloc(total);
    ck_assert_ptr_nonnull(src);
    for (size_t i = 0; i < total; i++)
        src[i] = (uint8_t)(i * 131 + 7);
    total = 0;
    for (size_t i = 0; i < N; i++) {
        rows[i] = (mc_codec_row_t){src + total, (size_t)lens[i], 1, 0, &lens[i]};
        total += (size_t)lens[i];
    }
    ck_assert_status_ok(mc_codec_ragged_measure(rows, N, 1, &elems, NULL));
    ck_assert_msg(elems == total, "measure should count %zu bytes, got %zu", total, elems);
    ck_assert_status_ok(mc_codec_ragged_pack(rows, N, 1, d1, total, off1, sh, 1, nd, nu, 1));
    ck_assert_status_ok(mc_codec_ragged_pack(rows, N, 1, d2, total, off2, sh, 1, nd, nu, 8));
    ck_assert_msg(memcmp(d1, src, total) == 0 && memcmp(d2, src, total) == 0,
                  "one and eight threads should both copy the %zu bytes in order", total);
    ck_assert_msg(memcmp(off1, off2, (N + 1) * sizeof(*off1)) == 0, "offsets should not "
                  "depend on threads");
    free(rows); free(lens); free(off1); free(off2); free(sh); free(nd); free(nu);
    free(src); free(d1); free(d2);
}
END_TEST

START_TEST(test_pack_refusals)
{
    mc_codec_row_t rows[5];
    int32_t data[8];
    int64_t offsets[6] = {0}, shapes[10] = {0};
    int16_t ndims[5]   = {0};
    uint8_t nulls[5]   = {0};
    const int64_t bad_dim[1] = {-1};

    five_rows(rows);
    ck_assert_status_eq(mc_codec_ragged_measure(rows, 5, 0, NULL, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_ragged_pack(rows, 5, 4, data, sizeof(data) - 4, offsets,
                                             shapes, 2, ndims, nulls, 1), MC_INVALID_PARAMS);
    ck_assert_msg(offsets[1] == 0, "a refused pack should write nothing");
    ck_assert_status_eq(mc_codec_ragged_pack(rows, 5, 4, data, sizeof(data), offsets, shapes,
                                             1, ndims, nulls, 1), MC_INVALID_PARAMS);
    rows[0].nbytes = 8;  /* shape says 3 int32 */
    ck_assert_status_eq(mc_codec_ragged_measure(rows, 5, 4, NULL, NULL), MC_INVALID_PARAMS);
    five_rows(rows);
    rows[1].nbytes = 4;  /* a null row with bytes */
    ck_assert_status_eq(mc_codec_ragged_measure(rows, 5, 4, NULL, NULL), MC_INVALID_PARAMS);
    five_rows(rows);
    rows[0].shape = bad_dim;
    ck_assert_status_eq(mc_codec_ragged_measure(rows, 5, 4, NULL, NULL), MC_INVALID_PARAMS);
    five_rows(rows);
    rows[0].ndim = MC_CODEC_MAX_NDIM + 1;
    ck_assert_status_eq(mc_codec_ragged_measure(rows, 5, 4, NULL, NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_ragged_measure(NULL, 1, 4, NULL, NULL), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_describe_is_pack_without_the_data)
{
    mc_codec_row_t rows[5];
    int32_t data[8];
    int64_t off_p[6], off_d[6], sh_p[10], sh_d[10];
    int16_t nd_p[5], nd_d[5];
    uint8_t nu_p[5], nu_d[5];
    size_t elems = 0;

    five_rows(rows);
    memset(sh_d, 0x5A, sizeof(sh_d));
    ck_assert_status_ok(mc_codec_ragged_pack(rows, 5, 4, data, sizeof(data), off_p, sh_p, 2,
                                             nd_p, nu_p, 1));
    ck_assert_status_ok(mc_codec_ragged_describe(rows, 5, 4, off_d, sh_d, 2, nd_d, nu_d,
                                                 &elems));
    ck_assert_msg(elems == 8, "describe should count 8 elements, got %zu", elems);
    ck_assert_msg(memcmp(off_p, off_d, sizeof(off_p)) == 0 &&
                  memcmp(sh_p, sh_d, sizeof(sh_p)) == 0 &&
                  memcmp(nd_p, nd_d, sizeof(nd_p)) == 0 &&
                  memcmp(nu_p, nu_d, sizeof(nu_p)) == 0,
                  "describe should give exactly the offsets, shapes, ndims and nulls of pack");
    ck_assert_status_ok(mc_codec_ragged_describe(NULL, 0, 4, off_d, NULL, 1, NULL, NULL,
                                                 &elems));
    ck_assert_msg((off_d[0] == 0) && (elems == 0), "no rows: offsets [0] and no elements");

    /* refusals write nothing */
    memset(off_d, 0x5A, sizeof(off_d));
    ck_assert_status_eq(mc_codec_ragged_describe(rows, 5, 4, off_d, sh_d, 1, nd_d, nu_d, NULL),
                        MC_INVALID_PARAMS);  /* width 1 < ndim 2 */
    ck_assert_status_eq(mc_codec_ragged_describe(rows, 5, 4, off_d, NULL, 2, nd_d, nu_d, NULL),
                        MC_INVALID_PARAMS);  /* no shapes */
    ck_assert_status_eq(mc_codec_ragged_describe(rows, 5, 0, off_d, sh_d, 2, nd_d, nu_d, NULL),
                        MC_INVALID_PARAMS);  /* itemsize 0 */
    rows[2].nbytes = 12;  /* shape says 4 int32 */
    ck_assert_status_eq(mc_codec_ragged_describe(rows, 5, 4, off_d, sh_d, 2, nd_d, nu_d, NULL),
                        MC_INVALID_PARAMS);
    ck_assert_msg(off_d[0] == 0x5A5A5A5A5A5A5A5A, "a refused describe should write nothing");
}
END_TEST

START_TEST(test_check_refuses_corrupt_layouts)
{
    int64_t offsets[4] = {0, 3, 3, 7};
    int64_t shapes[6]  = {3, 0, 0, 0, 2, 2};
    int16_t ndims[3]   = {1, 0, 2};
    uint8_t nulls[3]   = {0, 1, 0};

    ck_assert_status_ok(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 7));
    ck_assert_status_eq(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 8),
                        MC_INVALID_PARAMS);  /* the data is longer */
    offsets[1] = 4;
    ck_assert_status_eq(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 7),
                        MC_INVALID_PARAMS);  /* shape 3, 4 elements; row 1 null with one */
    offsets[1] = 3;
    offsets[2] = 2;
    ck_assert_status_eq(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 7),
                        MC_INVALID_PARAMS);  /* offsets go back */
    offsets[2] = 3;
    ndims[2]   = 3;
    ck_assert_status_eq(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 7),
                        MC_INVALID_PARAMS);  /* ndim past the width */
    ndims[2]  = 2;
    shapes[4] = -2;
    shapes[5] = -2;
    ck_assert_status_eq(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 7),
                        MC_INVALID_PARAMS);  /* negative dims */
    shapes[4]  = 2;
    shapes[5]  = 2;
    offsets[0] = 1;
    ck_assert_status_eq(mc_codec_ragged_check(offsets, shapes, 2, ndims, nulls, 3, 7),
                        MC_INVALID_PARAMS);  /* not from 0 */
}
END_TEST

START_TEST(test_blob_check_refuses_corrupt_offsets)
{
    int64_t offsets[4] = {0, 2, 2, 5};

    ck_assert_status_ok(mc_codec_blob_check(offsets, 3, 5));
    ck_assert_status_ok(mc_codec_blob_check(NULL, 0, 0));  /* no rows: nothing to slice */
    ck_assert_status_eq(mc_codec_blob_check(offsets, 3, 6), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "ragged offsets do not match the data") != NULL,
                  "the detail says what is wrong, not: %s", mc_last_error_detail());
    offsets[2] = 1;
    ck_assert_status_eq(mc_codec_blob_check(offsets, 3, 5), MC_INVALID_PARAMS);  /* back */
    offsets[2] = 2;
    offsets[0] = 1;
    ck_assert_status_eq(mc_codec_blob_check(offsets, 3, 5), MC_INVALID_PARAMS);  /* not 0 */
    ck_assert_status_eq(mc_codec_blob_check(NULL, 3, 5), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_select_runs_and_offsets)
{
    const int64_t offsets[6] = {0, 3, 3, 7, 8, 10};
    const int64_t idx[5]     = {2, 3, 4, 0, 0};
    int64_t runs[10], out[6];
    const int64_t want_runs[4] = {3, 7, 0, 3};  /* rows 2..4 merge; row 0 twice merges not */
    const int64_t want_out[6]  = {0, 4, 5, 7, 10, 13};
    size_t nruns = 0;

    ck_assert_status_ok(mc_codec_ragged_select(offsets, 5, idx, 5, runs, &nruns, out));
    ck_assert_msg(nruns == 3, "rows 2,3,4 | 0 | 0 should make 3 runs, got %zu", nruns);
    ck_assert_msg(memcmp(runs, want_runs, sizeof(want_runs)) == 0 && runs[4] == 0 &&
                  runs[5] == 3, "runs should be (3,7) (0,3) (0,3)");
    ck_assert_msg(memcmp(out, want_out, sizeof(out)) == 0, "repacked offsets should add up "
                  "the selected rows' lengths");
    const int64_t bad[1] = {5};
    ck_assert_status_eq(mc_codec_ragged_select(offsets, 5, bad, 1, runs, &nruns, out),
                        MC_INVALID_PARAMS);
}
END_TEST

Suite *mc_test_codec_suite(void)
{
    Suite *s  = suite_create("codec");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_pack_layout);
    tcase_add_test(tc, test_pack_threaded_matches);
    tcase_add_test(tc, test_pack_refusals);
    tcase_add_test(tc, test_describe_is_pack_without_the_data);
    tcase_add_test(tc, test_check_refuses_corrupt_layouts);
    tcase_add_test(tc, test_blob_check_refuses_corrupt_offsets);
    tcase_add_test(tc, test_select_runs_and_offsets);
    suite_add_tcase(s, tc);
    return s;
}

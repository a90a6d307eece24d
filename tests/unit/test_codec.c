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

#include <inttypes.h>
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

/* ---- mc_codec_stage_json() -------------------------------------------------- */

/* What Python's json module writes for the documents of the four members
 * of stage_members() under stage_prefix, object "part/abc", chunks of 100
 * bytes (json.dumps(..., separators=(",", ":")): the metadata with
 * ensure_ascii=False, the manifest with it on), the keys in write order
 * and their (member, offset, size). */
static const char want_meta[] =
    "{\"layout\":\"x\",\"n\":\"\xc3""\xa9""\\n\",\"__mooncake_structured_fields__\":"
    "{\"q\\\"b\\\\\xc3""\xa9""\xf0""\x9f""\x98""\x80""\xe2""\x80""\xa8""\":{\"encodi"
    "ng\":\"torch_tensor\",\"dtype\":\"torch.float32\",\"shape\":[3],\"element_size\""
    ":4},\"a.data\":{\"encoding\":\"ndarray\",\"dtype\":\"<i4\",\"shape\":[2,0,5]},\""
    "big\":{\"encoding\":\"ndarray\",\"dtype\":\"<f8\",\"shape\":[31]},\"raw\":{\"en"
    "coding\":\"bytes\"}}}";
static const char want_manifest[] =
    "{\"version\":1,\"layout\":\"bundle\",\"object_id\":\"part/abc\",\"meta\":{\"key"
    "\":\"p/\\u007f\\u00e9/part/abc/meta\",\"bytes\":304,\"chunks\":[{\"key\":\"p/\\"
    "u007f\\u00e9/part/abc/meta/chunk/0\",\"bytes\":100},{\"key\":\"p/\\u007f\\u00e9"
    "/part/abc/meta/chunk/1\",\"bytes\":100},{\"key\":\"p/\\u007f\\u00e9/part/abc/me"
    "ta/chunk/2\",\"bytes\":100},{\"key\":\"p/\\u007f\\u00e9/part/abc/meta/chunk/3\""
    ",\"bytes\":4}]},\"buffers\":{\"q\\\"b\\\\\\u00e9\\ud83d\\ude00\\u2028\":{\"key\""
    ":\"p/\\u007f\\u00e9/part/abc/buffer/q\\\"b\\\\\\u00e9\\ud83d\\ude00\\u2028\",\""
    "bytes\":316,\"chunks\":[{\"key\":\"p/\\u007f\\u00e9/part/abc/buffer/q\\\"b\\\\\\"
    "u00e9\\ud83d\\ude00\\u2028\",\"bytes\":316}],\"kind\":\"tensor\",\"dtype\":\"to"
    "rch.float32\",\"shape\":[3],\"metadata_bytes\":304},\"a.data\":{\"key\":\"p/\\u"
    "007f\\u00e9/part/abc/buffer/a.data\",\"bytes\":0,\"chunks\":[]},\"big\":{\"key\""
    ":\"p/\\u007f\\u00e9/part/abc/buffer/big\",\"bytes\":248,\"chunks\":[{\"key\":\""
    "p/\\u007f\\u00e9/part/abc/buffer/big/chunk/0\",\"bytes\":100},{\"key\":\"p/\\u0"
    "07f\\u00e9/part/abc/buffer/big/chunk/1\",\"bytes\":100},{\"key\":\"p/\\u007f\\u"
    "00e9/part/abc/buffer/big/chunk/2\",\"bytes\":48}]},\"raw\":{\"key\":\"p/\\u007f"
    "\\u00e9/part/abc/buffer/raw\",\"bytes\":100,\"chunks\":[{\"key\":\"p/\\u007f\\u"
    "00e9/part/abc/buffer/raw\",\"bytes\":100}]}}}";
static const char *const want_keys[] = {
    "p/\x7f""\xc3""\xa9""/part/abc/meta/chunk/0",
    "p/\x7f""\xc3""\xa9""/part/abc/meta/chunk/1",
    "p/\x7f""\xc3""\xa9""/part/abc/meta/chunk/2",
    "p/\x7f""\xc3""\xa9""/part/abc/meta/chunk/3",
    "p/\x7f""\xc3""\xa9""/part/abc/buffer/q\"b\\\xc3""\xa9""\xf0""\x9f""\x98""\x80"""
    "\xe2""\x80""\xa8""",
    "p/\x7f""\xc3""\xa9""/part/abc/buffer/big/chunk/0",
    "p/\x7f""\xc3""\xa9""/part/abc/buffer/big/chunk/1",
    "p/\x7f""\xc3""\xa9""/part/abc/buffer/big/chunk/2",
    "p/\x7f""\xc3""\xa9""/part/abc/buffer/raw"};
static const uint64_t want_chunks[][3] = {
    {4, 0, 100}, {4, 100, 100}, {4, 200, 100}, {4, 300, 4}, {0, 0, 316},
    {2, 0, 100}, {2, 100, 100}, {2, 200, 48}, {3, 0, 100}};
static const char stage_name0[] = "q\"b\\\xc3""\xa9""\xf0""\x9f""\x98""\x80""\xe2""\x80""\xa8""";
static const char stage_prefix[] = "p/\x7f""\xc3""\xa9""";
static const char stage_head[] = "{\"layout\":\"x\",\"n\":\"\xc3""\xa9""\\n\"}";

static const int64_t stage_shape0[1] = {3};
static const int64_t stage_shape1[3] = {2, 0, 5};
static const int64_t stage_shape2[1] = {31};

/* a tensor object whose name needs every kind of escape (it is larger than
 * a chunk: still one key), an empty array (no key), an array of 248 bytes
 * (three chunks) and 100 raw bytes (one key) */
static void stage_members(mc_codec_member_t *m)
{
    memset(m, 0, 4 * sizeof(*m));
    m[0] = (mc_codec_member_t){stage_name0, strlen(stage_name0), 316, MC_CODEC_MEMBER_TENSOR,
                               "torch.float32", 13, 1, stage_shape0, 4, 304};
    m[1] = (mc_codec_member_t){"a.data", 6, 0, MC_CODEC_MEMBER_NDARRAY, "<i4", 3, 3,
                               stage_shape1, 0, 0};
    m[2] = (mc_codec_member_t){"big", 3, 248, MC_CODEC_MEMBER_NDARRAY, "<f8", 3, 1,
                               stage_shape2, 0, 0};
    m[3] = (mc_codec_member_t){"raw", 3, 100, MC_CODEC_MEMBER_BYTES, NULL, 0, 0, NULL, 0, 0};
}

static mc_status_t stage_call(const mc_codec_member_t *m, size_t n, mc_codec_stage_out_t *out)
{
    return mc_codec_stage_json(stage_prefix, strlen(stage_prefix), "part/abc", 8, stage_head,
                               strlen(stage_head), m, n, 100, 1, out);
}

/* Room for the documents of stage_members() (and more). */
typedef struct {
    char meta[1024], man[4096], keys[1024];
    mc_codec_chunk_t chunks[16];
    mc_codec_stage_out_t out;
} stage_room_t;

static void stage_room(stage_room_t *r)
{
    memset(r->meta, 0x5A, sizeof(r->meta));
    memset(r->man, 0x5A, sizeof(r->man));
    r->out = (mc_codec_stage_out_t){r->meta, sizeof(r->meta), 0, r->man, sizeof(r->man), 0,
                                    r->keys, sizeof(r->keys), 0, r->chunks, 16, 0};
}

START_TEST(test_stage_json_is_pythons_json)
{
    mc_codec_member_t m[4];
    stage_room_t r;
    const mc_codec_stage_out_t *out = &r.out;

    stage_members(m);
    stage_room(&r);
    ck_assert_status_ok(stage_call(m, 4, &r.out));
    ck_assert_msg(out->meta_len == strlen(want_meta) &&
                      memcmp(r.meta, want_meta, out->meta_len) == 0,
                  "the metadata should be json.dumps' bytes; got %.*s", (int)out->meta_len,
                  r.meta);
    ck_assert_msg(out->manifest_len == strlen(want_manifest) &&
                      memcmp(r.man, want_manifest, out->manifest_len) == 0,
                  "the manifest should be json.dumps' ASCII bytes; got %.*s",
                  (int)out->manifest_len, r.man);
    ck_assert_msg(out->nchunks == 9, "the members should need 9 keys, not %zu", out->nchunks);
    for (size_t c = 0; c < out->nchunks; c++) {
        const mc_codec_chunk_t *e = &r.chunks[c];

        ck_assert_msg(e->key_len == strlen(want_keys[c]) &&
                          memcmp(r.keys + e->key_offset, want_keys[c], e->key_len) == 0 &&
                          r.keys[e->key_offset + e->key_len] == '\0',
                      "key %zu should be %s", c, want_keys[c]);
        ck_assert_msg(e->member == want_chunks[c][0] && e->offset == want_chunks[c][1] &&
                          e->size == want_chunks[c][2],
                      "key %zu should hold member %" PRIu64 " bytes [%" PRIu64 ", +%" PRIu64 ")",
                      c, want_chunks[c][0], want_chunks[c][1], want_chunks[c][2]);
    }
}
END_TEST

START_TEST(test_stage_json_sizes_then_bytes)
{
    mc_codec_member_t m[4];
    mc_codec_stage_out_t out = {0};
    char *meta, *man, *keys;
    mc_codec_chunk_t *chunks;

    stage_members(m);
    /* no room at all: every size, nothing written */
    ck_assert_status_eq(stage_call(m, 4, &out), MC_BUFFER_OVERFLOW);
    ck_assert_msg(out.meta_len == strlen(want_meta) && out.manifest_len == strlen(want_manifest) &&
                      out.nchunks == 9,
                  "a call without room should still give the sizes (%zu, %zu, %zu keys)",
                  out.meta_len, out.manifest_len, out.nchunks);
    /* one byte short of the manifest: refused, nothing past the room touched */
    meta = malloc(out.meta_len);
    man = malloc(out.manifest_len + 8);
    keys = malloc(out.keys_len);
    chunks = calloc(out.nchunks, sizeof(*chunks));
    ck_assert(meta != NULL && man != NULL && keys != NULL && chunks != NULL);
    memset(man, 0x5A, out.manifest_len + 8);
    out = (mc_codec_stage_out_t){meta, out.meta_len, 0, man, out.manifest_len - 1, 0, keys,
                                 out.keys_len, 0, chunks, out.nchunks, 0};
    ck_assert_status_eq(stage_call(m, 4, &out), MC_BUFFER_OVERFLOW);
    for (size_t i = out.manifest_len - 1; i < out.manifest_len + 8; i++)
        ck_assert_msg((unsigned char)man[i] == 0x5A, "byte %zu past the manifest's room was "
                      "written", i);
    /* exactly the sizes given: the same bytes as with room to spare */
    out.manifest_cap = out.manifest_len;
    ck_assert_status_ok(stage_call(m, 4, &out));
    ck_assert(memcmp(man, want_manifest, out.manifest_len) == 0);
    ck_assert(memcmp(meta, want_meta, out.meta_len) == 0);
    ck_assert_msg((unsigned char)man[out.manifest_len] == 0x5A, "no NUL is added after the "
                  "manifest");
    free(chunks);
    free(keys);
    free(man);
    free(meta);
}
END_TEST

/* A call with member @p bad instead of member 2: refused with nothing written. */
static void stage_refused(const mc_codec_member_t *bad, const char *why)
{
    mc_codec_member_t m[4];
    stage_room_t r;

    stage_members(m);
    m[2] = *bad;
    stage_room(&r);
    ck_assert_msg(stage_call(m, 4, &r.out) == MC_INVALID_PARAMS, "%s should be refused", why);
    ck_assert_msg((unsigned char)r.meta[0] == 0x5A && (unsigned char)r.man[0] == 0x5A,
                  "nothing should be written for %s", why);
}

START_TEST(test_stage_json_refusals)
{
    static const int64_t neg[1] = {-1};
    static const int64_t many[MC_CODEC_MAX_NDIM + 1] = {0};
    mc_codec_member_t good[4], b;
    mc_codec_stage_out_t out = {0};
    const struct {
        const char *name;
        size_t len;
        const char *why;
    } names[] = {
        {"a/b", 3, "a name with '/'"},
        {"a\nb", 3, "a name with a control character"},
        {"a\x7f", 2, "a name with DEL"},
        {"", 0, "an empty name"},
        {"\xc0\x80", 2, "an overlong UTF-8 NUL"},
        {"\xed\xa0\x80", 3, "a UTF-8 surrogate"},
        {"\xf4\x90\x80\x80", 4, "a code point past U+10FFFF"},
        {"\xe2\x82", 2, "a truncated UTF-8 sequence"},
        {"\xff", 1, "a byte that starts no UTF-8 sequence"},
    };

    stage_members(good);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        b = good[2];
        b.name = names[i].name;
        b.name_len = names[i].len;
        stage_refused(&b, names[i].why);
    }
    b = good[2], b.kind = 7;
    stage_refused(&b, "an unknown kind");
    b = good[2], b.dtype = NULL;
    stage_refused(&b, "an array without a dtype");
    b = good[2], b.dtype = "\xc3", b.dtype_len = 1;
    stage_refused(&b, "a dtype that is not UTF-8");
    b = good[2], b.shape = neg;
    stage_refused(&b, "a negative dimension");
    b = good[2], b.shape = NULL;
    stage_refused(&b, "dimensions without a shape");
    b = good[2], b.ndim = MC_CODEC_MAX_NDIM + 1, b.shape = many;
    stage_refused(&b, "more dimensions than MC_CODEC_MAX_NDIM");
    b = good[2], b.nbytes = UINT64_MAX;  /* 1.8e17 chunks of 100 bytes */
    stage_refused(&b, "a payload needing more than MC_CODEC_MAX_KEYS keys");

    /* the object's own arguments */
    ck_assert_status_eq(mc_codec_stage_json("p", 1, "o", 1, "{}", 2, good, 4, 100, 1, &out),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_stage_json("p", 1, "o", 1, "[1,2]", 5, good, 4, 100, 1, &out),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_stage_json("p", 1, "o", 1, stage_head, strlen(stage_head), good,
                                            4, 0, 1, &out),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_stage_json("\xc3", 1, "o", 1, stage_head, strlen(stage_head),
                                            good, 4, 100, 1, &out),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_stage_json("p", 1, "o", 1, stage_head, strlen(stage_head), NULL,
                                            4, 100, 1, &out),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_codec_stage_json("p", 1, "o", 1, stage_head, strlen(stage_head), good,
                                            4, 100, 1, NULL),
                        MC_INVALID_PARAMS);
    /* a huge tensor object is one key: no chunk loop */
    b = good[0], b.nbytes = UINT64_MAX;
    good[0] = b;
    ck_assert_status_eq(mc_codec_stage_json("p", 1, "o", 1, stage_head, strlen(stage_head), good,
                                            1, 1, 1, &out),
                        MC_BUFFER_OVERFLOW);
    ck_assert_msg(out.nchunks == out.meta_len + 1, "a tensor object of any size should be one "
                  "key (the metadata, in chunks of a byte, %zu); got %zu keys", out.meta_len,
                  out.nchunks);
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
    tcase_add_test(tc, test_stage_json_is_pythons_json);
    tcase_add_test(tc, test_stage_json_sizes_then_bytes);
    tcase_add_test(tc, test_stage_json_refusals);
    suite_add_tcase(s, tc);
    return s;
}

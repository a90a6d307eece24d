/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tensor objects (mooncake/tensor.h): the 304-byte header codec, the
 * tensor-parallel shard arithmetic, and tensor writes and reads against a
 * real mooncake_master.
 *
 *  - layout: headers are checked byte by byte with this file's own
 *    little-endian helpers, never with the codec's, and a header built by
 *    hand the way upstream writes it must decode to the expected meta;
 *  - codec: every dtype, scalars, eight dimensions and empty tensors round
 *    trip; every rule of the decoder is broken once and must be refused
 *    without touching the caller's meta, and every prefix of a valid header
 *    is decoded from an exactly-sized heap copy (ASan sees an over-read);
 *  - shards: for 1-, 2- and 3-D tensors, every split dimension and 1..12
 *    shards, the ranges follow [D*r/n, D*(r+1)/n), the headers say so, and
 *    the gathered shards of a tensor whose elements are their own flat
 *    index put the tensor back together;
 *  - store: each test starts its own mooncake_master ($MC_MASTER_BIN) and
 *    one client, writes tensors whole and split, and reads every object
 *    back through the public read calls.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/store.h>
#include <mooncake/tensor.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store_util.h"

/* ck_assert_msg() writes a checkpoint even on success; hot loops use this. */
#define require(cond, ...)             \
    do {                               \
        if (!(cond))                   \
            ck_abort_msg(__VA_ARGS__); \
    } while (0)

#define HDR MC_TENSOR_HEADER_SIZE

/* ---- the byte layout, written out independently of the codec ----------- */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* One axis as upstream lays it out: five i32, a reserved i32, then the
 * i64 that carries the local extent. */
typedef struct hand_axis {
    int32_t kind, axis_index, rank, count, split_dim;
    int64_t extent;
} hand_axis_t;

/* A header as upstream writes it: every byte not named here is zero. */
static void hand_header(uint8_t *p, int32_t dtype, int32_t ndim, const int64_t *global,
                        const int64_t *local, uint32_t layout, uint64_t data_offset,
                        uint64_t data_bytes, uint32_t naxes, const hand_axis_t *axes)
{
    memset(p, 0, HDR);
    put32(p + 0, 0x4d4f4f4eu);
    put16(p + 4, 1);
    put16(p + 6, 304);
    put32(p + 8, (uint32_t)dtype);
    put32(p + 12, (uint32_t)ndim);
    put32(p + 16, layout);
    put64(p + 24, data_offset);
    put64(p + 32, data_bytes);
    for (int i = 0; i < 8; i++) {
        put64(p + 40 + 8 * i, (uint64_t)((i < ndim) ? global[i] : -1));
        put64(p + 104 + 8 * i, (uint64_t)((i < ndim) ? local[i] : -1));
    }
    put32(p + 168, naxes);
    for (uint32_t k = 0; k < naxes; k++) {
        uint8_t *q = p + 176 + 32 * k;
        put32(q + 0, (uint32_t)axes[k].kind);
        put32(q + 4, (uint32_t)axes[k].axis_index);
        put32(q + 8, (uint32_t)axes[k].rank);
        put32(q + 12, (uint32_t)axes[k].count);
        put32(q + 16, (uint32_t)axes[k].split_dim);
        put64(q + 24, (uint64_t)axes[k].extent);
    }
}

/* ---- metas ------------------------------------------------------------------ */

#define SENTINEL 0xA5

static void sentinel(void *m, size_t n)
{
    memset(m, SENTINEL, n);
}

static int is_sentinel(const void *m, size_t n)
{
    const uint8_t *p = m;
    for (size_t i = 0; i < n; i++)
        if (p[i] != SENTINEL)
            return 0;
    return 1;
}

/* Field by field (the struct has padding); NULL when equal, else the field. */
static const char *meta_diff(const mc_tensor_meta_t *a, const mc_tensor_meta_t *b)
{
    if (a->dtype != b->dtype)
        return "dtype";
    if (a->ndim != b->ndim)
        return "ndim";
    if (a->layout != b->layout)
        return "layout";
    if (a->axis_count != b->axis_count)
        return "axis_count";
    if (a->data_offset != b->data_offset)
        return "data_offset";
    if (a->data_bytes != b->data_bytes)
        return "data_bytes";
    for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
        if (a->global_shape[i] != b->global_shape[i])
            return "global_shape";
        if (a->local_shape[i] != b->local_shape[i])
            return "local_shape";
    }
    for (int k = 0; k < MC_TENSOR_MAX_AXES; k++) {
        const mc_tensor_axis_t *x = &a->axes[k], *y = &b->axes[k];
        if ((x->kind != y->kind) || (x->axis_index != y->axis_index) ||
            (x->shard_rank != y->shard_rank) || (x->shard_count != y->shard_count) ||
            (x->split_dim != y->split_dim) || (x->local_extent != y->local_extent))
            return "axes";
    }
    return NULL;
}

#define assert_meta_eq(a, b, what)                                                          \
    do {                                                                                    \
        const char *d_ = meta_diff((a), (b));                                               \
        ck_assert_msg(d_ == NULL, "%s should give the same meta, but %s differs", (what), \
                      d_ ? d_ : "");                                                        \
    } while (0)

/* A heap object of exactly HDR + data_bytes bytes: header, then @p data
 * (or a byte pattern when NULL). */
static uint8_t *object_of(const mc_tensor_meta_t *m, const void *data)
{
    uint8_t *o = malloc(HDR + m->data_bytes + 1);
    ck_assert_ptr_nonnull(o);
    mc_tensor_header_encode(m, o);
    for (uint64_t i = 0; i < m->data_bytes; i++)
        o[HDR + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)(i * 7u + 1);
    return o;
}

/* ---- layout ------------------------------------------------------------------ */

START_TEST(test_dtype_sizes_and_names)
{
    static const size_t want[MC_TENSOR_DTYPE_COUNT] = {4, 8, 1, 1, 2, 2, 4, 4,
                                                       8, 8, 1, 2, 2, 1, 1};
    static const char *const names[MC_TENSOR_DTYPE_COUNT] = {
        "float32", "float64", "int8",    "uint8",    "int16",         "uint16",     "int32",
        "uint32",  "int64",   "uint64",  "bool",     "float16",       "bfloat16",
        "float8_e4m3fn",      "float8_e5m2"};

    for (int32_t d = 0; d < MC_TENSOR_DTYPE_COUNT; d++) {
        ck_assert_msg(mc_tensor_dtype_size(d) == want[d],
                      "dtype %d should be %zu bytes an element, not %zu", d, want[d],
                      mc_tensor_dtype_size(d));
        ck_assert_msg(strcmp(mc_tensor_dtype_name(d), names[d]) == 0,
                      "dtype %d should be named %s, not %s", d, names[d],
                      mc_tensor_dtype_name(d));
    }
    ck_assert_msg(mc_tensor_dtype_size(-1) == 0, "dtype -1 should have no element size");
    ck_assert_msg(mc_tensor_dtype_size(15) == 0, "dtype 15 should have no element size");
    ck_assert_msg(mc_tensor_dtype_size(INT32_MIN) == 0,
                  "dtype INT32_MIN should have no element size");
    ck_assert_msg(strcmp(mc_tensor_dtype_name(15), "unknown") == 0,
                  "dtype 15 should be named unknown");
    ck_assert_msg(strcmp(mc_tensor_dtype_name(-1), "unknown") == 0,
                  "dtype -1 should be named unknown");
}
END_TEST

START_TEST(test_header_byte_layout)
{
    static const int64_t shape[2] = {3, 5};
    mc_tensor_meta_t m;
    uint8_t b[HDR], want[HDR];

    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, shape, 2));
    memset(b, 0xCC, sizeof(b));
    mc_tensor_header_encode(&m, b);

    ck_assert_msg(get32(b + 0) == 0x4d4f4f4eu, "the magic should be 0x4d4f4f4e LE at 0");
    ck_assert_msg(memcmp(b, "NOOM", 4) == 0, "the magic should read NOOM in memory");
    ck_assert_msg(get16(b + 4) == 1, "the version should be u16 1 at 4");
    ck_assert_msg(get16(b + 6) == 304, "the header size should be u16 304 at 6");
    ck_assert_msg(get32(b + 8) == MC_TENSOR_FLOAT32, "the dtype should be i32 0 at 8");
    ck_assert_msg(get32(b + 12) == 2, "ndim should be i32 2 at 12");
    ck_assert_msg(get32(b + 16) == MC_TENSOR_LAYOUT_FULL, "the layout should be u32 0 at 16");
    ck_assert_msg(get32(b + 20) == 0, "reserved_flags at 20 should be 0");
    ck_assert_msg(get64(b + 24) == 304, "data_offset should be u64 304 at 24");
    ck_assert_msg(get64(b + 32) == 60, "data_bytes should be u64 3*5*4 = 60 at 32, not %llu",
                  (unsigned long long)get64(b + 32));
    ck_assert_msg((int64_t)get64(b + 40) == 3 && (int64_t)get64(b + 48) == 5,
                  "the global shape should be i64 3, 5 at 40");
    ck_assert_msg((int64_t)get64(b + 104) == 3 && (int64_t)get64(b + 112) == 5,
                  "the local shape should be i64 3, 5 at 104");
    for (int i = 2; i < 8; i++) {
        ck_assert_msg((int64_t)get64(b + 40 + 8 * i) == -1,
                      "unused global dimension %d should be -1", i);
        ck_assert_msg((int64_t)get64(b + 104 + 8 * i) == -1,
                      "unused local dimension %d should be -1", i);
    }
    ck_assert_msg(get32(b + 168) == 0, "a FULL tensor should have axis_count 0 at 168");
    ck_assert_msg(get32(b + 172) == 0, "the reserved u32 at 172 should be 0");
    for (int i = 176; i < HDR; i++)
        ck_assert_msg(b[i] == 0, "axis byte %d of a FULL tensor should be 0", i);

    hand_header(want, MC_TENSOR_FLOAT32, 2, shape, shape, 0, 304, 60, 0, NULL);
    ck_assert_msg(memcmp(b, want, HDR) == 0,
                  "the encoder should write exactly the upstream bytes of a [3,5] float32");
}
END_TEST

START_TEST(test_shard_header_byte_layout)
{
    static const int64_t shape[2] = {10, 6};
    static const int64_t local[2] = {10, 2};
    hand_axis_t ax = {1, 0, 3, 4, 1, 2};
    mc_tensor_meta_t full, sh;
    mc_tensor_slab_t sl;
    uint8_t b[HDR], want[HDR];

    /* 6 columns in 4 shards: [0,1) [1,3) [3,4) [4,6); rank 3 holds 2 */
    ck_assert_status_ok(mc_tensor_meta_init(&full, MC_TENSOR_INT16, shape, 2));
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 1, 4, 3, &sh, &sl));
    memset(b, 0xCC, sizeof(b));
    mc_tensor_header_encode(&sh, b);

    ck_assert_msg(get32(b + 16) == MC_TENSOR_LAYOUT_SHARD, "a shard should have layout 1");
    ck_assert_msg(get64(b + 32) == 10 * 2 * 2, "the shard should hold 10*2 int16");
    ck_assert_msg((int64_t)get64(b + 40 + 8) == 6, "the global shape should stay [10,6]");
    ck_assert_msg((int64_t)get64(b + 104 + 8) == 2, "the local shape should be [10,2]");
    ck_assert_msg(get32(b + 168) == 1, "a shard should have one axis");
    ck_assert_msg(get32(b + 176 + 0) == MC_TENSOR_AXIS_TP, "the axis kind should be TP");
    ck_assert_msg(get32(b + 176 + 4) == 0, "the axis index should be 0");
    ck_assert_msg(get32(b + 176 + 8) == 3, "the shard rank should be 3 at axis +8");
    ck_assert_msg(get32(b + 176 + 12) == 4, "the shard count should be 4 at axis +12");
    ck_assert_msg(get32(b + 176 + 16) == 1, "the split dimension should be 1 at axis +16");
    ck_assert_msg(get32(b + 176 + 20) == 0, "reserved0 at axis +20 should be 0");
    ck_assert_msg((int64_t)get64(b + 176 + 24) == 2,
                  "reserved1 at axis +24 should be the local extent 2");
    for (int i = 176 + 32; i < HDR; i++)
        ck_assert_msg(b[i] == 0, "byte %d of the unused axes should be 0", i);

    hand_header(want, MC_TENSOR_INT16, 2, shape, local, 1, 304, 40, 1, &ax);
    ck_assert_msg(memcmp(b, want, HDR) == 0,
                  "the encoder should write exactly the upstream bytes of a TP shard");
}
END_TEST

START_TEST(test_hand_built_header_decodes)
{
    static const int64_t global[3] = {8, 6, 2};
    static const int64_t local[3]  = {8, 3, 2};
    hand_axis_t ax[2] = {{1, 0, 1, 2, 1, 3}, {0, 1, 0, 1, -1, 0}};
    uint64_t len = HDR + 8 * 3 * 2 * 2;
    uint8_t *o   = calloc(1, len);
    mc_tensor_meta_t m;

    ck_assert_ptr_nonnull(o);
    hand_header(o, MC_TENSOR_BFLOAT16, 3, global, local, 1, 304, 96, 2, ax);
    ck_assert_status_ok(mc_tensor_header_decode(o, len, &m));
    ck_assert_int_eq(m.dtype, MC_TENSOR_BFLOAT16);
    ck_assert_int_eq(m.ndim, 3);
    ck_assert_uint_eq(m.layout, MC_TENSOR_LAYOUT_SHARD);
    ck_assert_uint_eq(m.axis_count, 2);
    ck_assert_uint_eq(m.data_offset, 304);
    ck_assert_uint_eq(m.data_bytes, 96);
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(m.global_shape[i] == ((i < 3) ? global[i] : -1),
                      "global dimension %d should decode as written", i);
        ck_assert_msg(m.local_shape[i] == ((i < 3) ? local[i] : -1),
                      "local dimension %d should decode as written", i);
    }
    ck_assert_msg((m.axes[0].kind == 1) && (m.axes[0].axis_index == 0) &&
                      (m.axes[0].shard_rank == 1) && (m.axes[0].shard_count == 2) &&
                      (m.axes[0].split_dim == 1) && (m.axes[0].local_extent == 3),
                  "axis 0 should decode as TP rank 1 of 2 on dimension 1, extent 3");
    ck_assert_msg((m.axes[1].kind == 0) && (m.axes[1].axis_index == 1) &&
                      (m.axes[1].shard_rank == 0) && (m.axes[1].shard_count == 1) &&
                      (m.axes[1].split_dim == -1) && (m.axes[1].local_extent == 0),
                  "axis 1 should decode as DP rank 0 of 1 with no split dimension");

    /* a whole tensor with the data further back (upstream may pad) */
    {
        static const int64_t shape[1] = {4};
        uint64_t plen = 320 + 32;
        uint8_t *p    = calloc(1, plen);
        ck_assert_ptr_nonnull(p);
        hand_header(p, MC_TENSOR_UINT64, 1, shape, shape, 0, 320, 32, 0, NULL);
        ck_assert_status_ok(mc_tensor_header_decode(p, plen, &m));
        ck_assert_msg((m.data_offset == 320) && (m.data_bytes == 32) && (m.layout == 0) &&
                          (m.global_shape[0] == 4) && (m.local_shape[0] == 4),
                      "a FULL header with its data at 320 should decode as written");
        free(p);
    }
    free(o);
}
END_TEST

/* ---- round trips ------------------------------------------------------------- */

/* Encode @p m in front of its data, decode the object, compare. */
static void round_trip(const mc_tensor_meta_t *m, const char *what)
{
    uint8_t *o = object_of(m, NULL);
    mc_tensor_meta_t back;

    sentinel(&back, sizeof(back));
    ck_assert_msg(mc_tensor_header_decode(o, HDR + m->data_bytes, &back) == MC_OK,
                  "%s should decode after encoding (%s)", what, mc_last_error_detail());
    assert_meta_eq(&back, m, what);
    free(o);
}

START_TEST(test_round_trip_every_dtype)
{
    static const int64_t shape[3] = {2, 3, 4};
    mc_tensor_meta_t m;
    char what[64];

    for (int32_t d = 0; d < MC_TENSOR_DTYPE_COUNT; d++) {
        ck_assert_status_ok(mc_tensor_meta_init(&m, d, shape, 3));
        ck_assert_msg(m.data_bytes == 24 * mc_tensor_dtype_size(d),
                      "a [2,3,4] %s should be %zu bytes", mc_tensor_dtype_name(d),
                      24 * mc_tensor_dtype_size(d));
        ck_assert_msg((m.dtype == d) && (m.ndim == 3) && (m.layout == MC_TENSOR_LAYOUT_FULL) &&
                          (m.axis_count == 0) && (m.data_offset == HDR),
                      "meta_init should describe a whole %s tensor", mc_tensor_dtype_name(d));
        snprintf(what, sizeof(what), "a [2,3,4] %s", mc_tensor_dtype_name(d));
        round_trip(&m, what);
    }
}
END_TEST

START_TEST(test_round_trip_scalar)
{
    mc_tensor_meta_t m;

    for (int32_t d = 0; d < MC_TENSOR_DTYPE_COUNT; d++) {
        ck_assert_status_ok(mc_tensor_meta_init(&m, d, NULL, 0));
        ck_assert_msg(m.ndim == 0, "a scalar should have ndim 0");
        ck_assert_msg(m.data_bytes == mc_tensor_dtype_size(d),
                      "a %s scalar should be one element of %zu bytes, not %llu",
                      mc_tensor_dtype_name(d), mc_tensor_dtype_size(d),
                      (unsigned long long)m.data_bytes);
        for (int i = 0; i < 8; i++)
            ck_assert_msg((m.global_shape[i] == -1) && (m.local_shape[i] == -1),
                          "every dimension of a scalar should be -1");
        round_trip(&m, "a scalar");
    }
}
END_TEST

START_TEST(test_round_trip_eight_dims)
{
    static const int64_t shape[8] = {2, 1, 3, 1, 2, 2, 1, 3};
    mc_tensor_meta_t m;

    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT64, shape, 8));
    ck_assert_uint_eq(m.data_bytes, 72 * 8);
    for (int i = 0; i < 8; i++)
        ck_assert_msg((m.global_shape[i] == shape[i]) && (m.local_shape[i] == shape[i]),
                      "dimension %d of an 8-D tensor should be kept", i);
    round_trip(&m, "an 8-D float64");
}
END_TEST

START_TEST(test_round_trip_empty)
{
    static const int64_t shapes[][3] = {{0, 5, 7}, {5, 0, 7}, {5, 7, 0}, {0, 0, 0}};
    static const int64_t one[1]      = {0};
    mc_tensor_meta_t m;

    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_INT32, shapes[s], 3));
        ck_assert_msg(m.data_bytes == 0, "shape %zu with a 0 dimension should hold 0 bytes", s);
        round_trip(&m, "a 0-element tensor");
    }
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_UINT8, one, 1));
    ck_assert_msg(m.data_bytes == 0, "a [0] tensor should hold 0 bytes");
    round_trip(&m, "a [0] tensor");
}
END_TEST

/* ---- meta_init refusals ---------------------------------------------------------- */

static void init_refused(int32_t dtype, const int64_t *shape, int32_t ndim, const char *what)
{
    mc_tensor_meta_t m;

    sentinel(&m, sizeof(m));
    ck_assert_msg(mc_tensor_meta_init(&m, dtype, shape, ndim) == MC_INVALID_PARAMS,
                  "meta_init should refuse %s", what);
    ck_assert_msg(is_sentinel(&m, sizeof(m)), "a refused meta_init (%s) should not write", what);
    ck_assert_msg(mc_last_error_detail()[0] != '\0', "a refused meta_init (%s) should say why",
                  what);
}

START_TEST(test_meta_init_refusals)
{
    static const int64_t nine[9]   = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    static const int64_t neg[2]    = {3, -1};
    static const int64_t big[2]    = {INT64_C(1) << 31, INT64_C(1) << 31};
    static const int64_t edge[2]   = {INT64_C(1) << 31, INT64_C(1) << 30};
    static const int64_t zbig[3]   = {INT64_C(1) << 31, 0, INT64_C(1) << 31};
    static const int64_t maxd[1]   = {INT64_MAX};
    static const int64_t half[1]   = {INT64_MAX / 2 + 1};
    static const int64_t halfm[1]  = {INT64_MAX / 2};
    static const int64_t two[2]    = {2, 3};
    mc_tensor_meta_t m;

    init_refused(MC_TENSOR_FLOAT32, nine, 9, "ndim 9");
    init_refused(MC_TENSOR_FLOAT32, nine, -1, "ndim -1");
    init_refused(MC_TENSOR_FLOAT32, neg, 2, "a negative dimension");
    init_refused(-1, two, 2, "dtype -1");
    init_refused(15, two, 2, "dtype 15");
    init_refused(MC_TENSOR_FLOAT32, NULL, 2, "a NULL shape of two dimensions");
    init_refused(MC_TENSOR_FLOAT32, big, 2, "2^62 float32 elements (2^64 bytes)");
    init_refused(MC_TENSOR_FLOAT32, edge, 2, "2^61 float32 elements (exactly 2^63 bytes)");
    init_refused(MC_TENSOR_INT16, half, 1, "2^62 int16 elements (2^63 bytes)");
    init_refused(MC_TENSOR_FLOAT32, zbig, 3,
                 "an overflowing product even with a zero dimension elsewhere");
    ck_assert_msg(mc_tensor_meta_init(NULL, MC_TENSOR_FLOAT32, two, 2) == MC_INVALID_PARAMS,
                  "meta_init should refuse a NULL meta");

    /* the largest byte counts that fit are accepted */
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_UINT8, edge, 2));
    ck_assert_uint_eq(m.data_bytes, UINT64_C(1) << 61);
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_UINT8, maxd, 1));
    ck_assert_uint_eq(m.data_bytes, (uint64_t)INT64_MAX);
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_INT16, halfm, 1));
    ck_assert_uint_eq(m.data_bytes, (uint64_t)INT64_MAX - 1);
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, nine, 8));
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, NULL, 0));
}
END_TEST

/* ---- decoder refusals ------------------------------------------------------------ */

/* Decode @p len bytes of @p src from an exactly-sized heap copy: must be
 * refused and leave the meta alone. */
static void decode_refused(const uint8_t *src, uint64_t len, const char *what)
{
    uint8_t *o = malloc(len ? len : 1);
    mc_tensor_meta_t m;

    ck_assert_ptr_nonnull(o);
    memcpy(o, src, len);
    sentinel(&m, sizeof(m));
    ck_assert_msg(mc_tensor_header_decode(o, len, &m) == MC_INVALID_PARAMS,
                  "the decoder should refuse %s", what);
    ck_assert_msg(is_sentinel(&m, sizeof(m)), "a refused decode (%s) should not write the meta",
                  what);
    free(o);
}

/* The base object: [3,5] float32, 304 + 60 bytes. */
#define BASE_LEN (HDR + 60)

static void base_object(uint8_t *o)
{
    static const int64_t shape[2] = {3, 5};
    mc_tensor_meta_t m;

    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, shape, 2));
    mc_tensor_header_encode(&m, o);
    for (int i = 0; i < 60; i++)
        o[HDR + i] = (uint8_t)i;
}

/* Mutators of the base object: one field at its offset. */
#define REFUSE32(off, val, what)                  \
    do {                                          \
        memcpy(o, base, sizeof(base));            \
        put32(o + (off), (uint32_t)(val));        \
        decode_refused(o, BASE_LEN, what);        \
    } while (0)
#define REFUSE64(off, val, len, what)             \
    do {                                          \
        memcpy(o, base, sizeof(base));            \
        put64(o + (off), (uint64_t)(val));        \
        decode_refused(o, (len), what);           \
    } while (0)

START_TEST(test_decode_refusals)
{
    uint8_t base[BASE_LEN + 64], o[BASE_LEN + 64];
    mc_tensor_meta_t m;

    memset(base, 0, sizeof(base));
    base_object(base);
    /* the base itself decodes, so each refusal is the one change's */
    ck_assert_status_ok(mc_tensor_header_decode(base, BASE_LEN, &m));

    decode_refused(base, 0, "an empty object");
    decode_refused(base, 1, "a 1-byte object");
    decode_refused(base, 303, "a 303-byte object");
    sentinel(&m, sizeof(m));
    ck_assert_msg(mc_tensor_header_decode(NULL, BASE_LEN, &m) == MC_INVALID_PARAMS,
                  "the decoder should refuse a NULL object");
    ck_assert_msg(is_sentinel(&m, sizeof(m)), "a NULL object should leave the meta alone");

    REFUSE32(0, 0x4d4f4f4fu, "a bad magic");
    REFUSE32(0, 0x4e4f4f4du, "the magic in big-endian order");
    memcpy(o, base, sizeof(base));
    put16(o + 4, 2);
    decode_refused(o, BASE_LEN, "version 2");
    memcpy(o, base, sizeof(base));
    put16(o + 4, 0);
    decode_refused(o, BASE_LEN, "version 0");
    memcpy(o, base, sizeof(base));
    put16(o + 6, 303);
    decode_refused(o, BASE_LEN, "header_size 303");
    memcpy(o, base, sizeof(base));
    put16(o + 6, 305);
    decode_refused(o, BASE_LEN, "header_size 305");

    REFUSE32(8, 15, "dtype 15");
    REFUSE32(8, -1, "dtype -1");
    REFUSE32(12, 9, "ndim 9");
    REFUSE32(12, -1, "ndim -1");
    REFUSE32(12, 3, "ndim 3 over a 2-D shape (dimension 2 is -1)");
    REFUSE32(12, 1, "ndim 1 over a 2-D shape (unused dimension 1 is 5)");
    REFUSE32(16, 2, "layout 2");
    REFUSE32(168, 5, "axis_count 5");
    REFUSE32(168, UINT32_MAX, "axis_count 2^32-1");

    REFUSE64(24, 303, BASE_LEN, "data_offset 303 (inside the header)");
    REFUSE64(24, 0, BASE_LEN, "data_offset 0");
    REFUSE64(24, BASE_LEN + 1, BASE_LEN, "data_offset past the end of the object");
    REFUSE64(24, UINT64_MAX, BASE_LEN, "data_offset 2^64-1");
    REFUSE64(24, 305, BASE_LEN, "data_offset 305 (one data byte missing)");
    REFUSE64(32, 64, BASE_LEN, "data_bytes 64 for 60 bytes of shape");
    REFUSE64(32, 64, BASE_LEN + 4, "data_bytes 64 for a [3,5] float32 even when 64 follow");
    REFUSE64(32, 0, HDR, "data_bytes 0 for a [3,5] float32");
    decode_refused(base, BASE_LEN - 1, "an object one byte short");
    decode_refused(base, BASE_LEN + 1, "an object one byte long");

    REFUSE64(40, -3, BASE_LEN, "a negative global dimension");
    REFUSE64(104, -3, BASE_LEN, "a negative local dimension");
    REFUSE64(104, INT64_MIN, BASE_LEN, "local dimension INT64_MIN");
    REFUSE64(40 + 16, 0, BASE_LEN, "unused global dimension 2 = 0");
    REFUSE64(104 + 56, 5, BASE_LEN, "unused local dimension 7 = 5");
    REFUSE64(104 + 16, -2, BASE_LEN, "unused local dimension 2 = -2");
    REFUSE64(104, INT64_C(1) << 62, BASE_LEN, "a local shape of more than 2^63 bytes");
}
END_TEST

START_TEST(test_meta_check)
{
    static const int64_t shape[2] = {3, 5};
    static const int64_t ones[8]  = {1, 1, 1, 1, 1, 1, 1, 1};
    mc_tensor_meta_t m, bad;

    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, shape, 2));
    ck_assert_status_ok(mc_tensor_meta_check(&m));
    ck_assert_status_eq(mc_tensor_meta_check(NULL), MC_INVALID_PARAMS);

    /* nine dimensions are refused for their count, even when all eight
     * stored ones are valid */
    ck_assert_status_ok(mc_tensor_meta_init(&bad, MC_TENSOR_UINT8, ones, 8));
    bad.ndim = 9;
    ck_assert_status_eq(mc_tensor_meta_check(&bad), MC_INVALID_PARAMS);
    bad.data_bytes = 0;
    ck_assert_status_eq(mc_tensor_meta_check(&bad), MC_INVALID_PARAMS);

    /* five axes are refused for their count, even when four are valid */
    bad        = m;
    bad.layout = MC_TENSOR_LAYOUT_SHARD;
    for (int k = 0; k < MC_TENSOR_MAX_AXES; k++)
        bad.axes[k] = (mc_tensor_axis_t){MC_TENSOR_AXIS_DP, k, 0, 1, -1, 0};
    bad.axis_count = 4;
    ck_assert_status_ok(mc_tensor_meta_check(&bad));
    bad.axis_count = 5;
    ck_assert_status_eq(mc_tensor_meta_check(&bad), MC_INVALID_PARAMS);

    bad             = m;
    bad.data_offset = 303;
    ck_assert_status_eq(mc_tensor_meta_check(&bad), MC_INVALID_PARAMS);
    bad                 = m;
    bad.global_shape[5] = 1;
    ck_assert_status_eq(mc_tensor_meta_check(&bad), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_decode_refuses_counts_past_the_arrays)
{
    static const int64_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    hand_axis_t ax[4]            = {{0, 0, 0, 1, -1, 0}, {0, 1, 0, 1, -1, 0},
                                    {0, 2, 0, 1, -1, 0}, {0, 3, 0, 1, -1, 0}};
    uint8_t o[HDR + 8];

    /* ndim 9 over eight valid dimensions, whatever data_bytes says */
    for (uint64_t db = 0; db <= 8; db++) {
        hand_header(o, MC_TENSOR_UINT8, 8, ones, ones, 0, 304, db, 0, NULL);
        put32(o + 12, 9);
        decode_refused(o, HDR + db, "ndim 9 over eight valid dimensions");
    }
    /* axis_count 5 over four valid axes */
    hand_header(o, MC_TENSOR_UINT8, 8, ones, ones, 1, 304, 1, 4, ax);
    {
        mc_tensor_meta_t m;
        ck_assert_status_ok(mc_tensor_header_decode(o, HDR + 1, &m));
    }
    put32(o + 168, 5);
    decode_refused(o, HDR + 1, "axis_count 5 over four valid axes");
}
END_TEST

START_TEST(test_decode_refuses_malformed_axes)
{
    static const int64_t global[2] = {10, 6};
    static const int64_t local[2]  = {10, 3};
    static const struct {
        hand_axis_t ax;
        const char *what;
    } bad[] = {
        {{1, 0, 2, 2, 1, 3}, "shard rank 2 of 2"},
        {{1, 0, 5, 2, 1, 3}, "shard rank 5 of 2"},
        {{1, 0, -1, 2, 1, 3}, "shard rank -1"},
        {{1, 0, 0, 0, 1, 3}, "shard count 0"},
        {{1, 0, 0, -4, 1, 3}, "shard count -4"},
        {{1, 0, 1, 2, 2, 3}, "split_dim 2 of a 2-D tensor"},
        {{1, 0, 1, 2, -2, 3}, "split_dim -2"},
        {{5, 0, 1, 2, 1, 3}, "axis kind 5"},
        {{-1, 0, 1, 2, 1, 3}, "axis kind -1"},
    };
    uint64_t len = HDR + 10 * 3 * 4;
    uint8_t *o   = calloc(1, len);
    mc_tensor_meta_t m;
    hand_axis_t good[2] = {{1, 0, 1, 2, 1, 3}, {4, 1, 0, 1, -1, 0}};

    ck_assert_ptr_nonnull(o);
    hand_header(o, MC_TENSOR_FLOAT32, 2, global, local, 1, 304, 120, 2, good);
    ck_assert_status_ok(mc_tensor_header_decode(o, len, &m));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hand_axis_t two[2] = {good[0], bad[i].ax};
        hand_header(o, MC_TENSOR_FLOAT32, 2, global, local, 1, 304, 120, 1, &bad[i].ax);
        decode_refused(o, len, bad[i].what);
        /* in the second slot too */
        hand_header(o, MC_TENSOR_FLOAT32, 2, global, local, 1, 304, 120, 2, two);
        decode_refused(o, len, bad[i].what);
    }
    free(o);
}
END_TEST

START_TEST(test_decode_exact_buffers)
{
    static const int64_t empty[2]  = {0, 5};
    static const int64_t shape[2]  = {3, 5};
    mc_tensor_meta_t m, e;
    uint8_t *o = malloc(HDR), full[BASE_LEN];

    /* a 0-element tensor is exactly its header: 304 bytes, all read */
    ck_assert_ptr_nonnull(o);
    ck_assert_status_ok(mc_tensor_meta_init(&e, MC_TENSOR_FLOAT32, empty, 2));
    mc_tensor_header_encode(&e, o);
    sentinel(&m, sizeof(m));
    ck_assert_status_ok(mc_tensor_header_decode(o, HDR, &m));
    assert_meta_eq(&m, &e, "a 304-byte empty tensor");

    /* a header that promises data, given only its 304 bytes */
    ck_assert_status_ok(mc_tensor_meta_init(&e, MC_TENSOR_FLOAT32, shape, 2));
    mc_tensor_header_encode(&e, o);
    sentinel(&m, sizeof(m));
    ck_assert_status_eq(mc_tensor_header_decode(o, HDR, &m), MC_INVALID_PARAMS);
    ck_assert_msg(is_sentinel(&m, sizeof(m)), "a refused decode should not write the meta");
    free(o);

    /* every strict prefix of a valid object, each in its own exact buffer */
    base_object(full);
    for (uint64_t n = 0; n < BASE_LEN; n++) {
        uint8_t *p = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(p);
        memcpy(p, full, n);
        sentinel(&m, sizeof(m));
        require(mc_tensor_header_decode(p, n, &m) == MC_INVALID_PARAMS,
                "a %llu-byte prefix of a %d-byte object should be refused",
                (unsigned long long)n, BASE_LEN);
        require(is_sentinel(&m, sizeof(m)), "a refused prefix should leave the meta alone");
        free(p);
    }
}
END_TEST

/* ---- shards --------------------------------------------------------------------- */

static uint64_t elems(const int64_t *shape, int ndim)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (uint64_t)shape[i];
    return n;
}

/* Flat index of multi-index @p idx in @p shape. */
static uint64_t flat(const int64_t *idx, const int64_t *shape, int ndim)
{
    uint64_t f = 0;
    for (int i = 0; i < ndim; i++)
        f = f * (uint64_t)shape[i] + (uint64_t)idx[i];
    return f;
}

/* Multi-index of flat index @p f in @p shape. */
static void unflat(uint64_t f, const int64_t *shape, int ndim, int64_t *idx)
{
    for (int i = ndim - 1; i >= 0; i--) {
        idx[i] = (int64_t)(f % (uint64_t)shape[i]);
        f /= (uint64_t)shape[i];
    }
}

/*
 * Split an int32 tensor of @p shape whose elements are their flat index
 * @p count ways along @p split_dim (as given, maybe negative) and check
 * every shard: header, range, slab and bytes; the shards put back together
 * along the split dimension must be the tensor.
 */
static void check_split(const int64_t *shape, int ndim, int32_t split_dim, int32_t count)
{
    int sd            = (split_dim < 0) ? split_dim + ndim : split_dim;
    uint64_t n        = elems(shape, ndim);
    uint64_t dim      = (uint64_t)shape[sd];
    int32_t *src      = malloc((n + 1) * sizeof(*src));
    int32_t *back     = malloc((n + 1) * sizeof(*back));
    unsigned char *hit = calloc(n + 1, 1);
    int32_t *sh       = malloc((n + 1) * sizeof(*sh));
    mc_tensor_meta_t full, m;
    mc_tensor_slab_t sl;
    uint64_t extent_sum = 0;
    int64_t idx[MC_TENSOR_MAX_DIMS];

    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(back);
    ck_assert_ptr_nonnull(hit);
    ck_assert_ptr_nonnull(sh);
    for (uint64_t i = 0; i < n; i++)
        src[i] = (int32_t)i;
    ck_assert_status_ok(mc_tensor_meta_init(&full, MC_TENSOR_INT32, shape, ndim));

    for (int32_t r = 0; r < count; r++) {
        uint64_t start = dim * (uint64_t)r / (uint64_t)count;
        uint64_t end   = dim * (uint64_t)(r + 1) / (uint64_t)count;
        int64_t lshape[MC_TENSOR_MAX_DIMS];
        uint64_t ln;

        sentinel(&m, sizeof(m));
        require(mc_tensor_meta_shard(&full, split_dim, count, r, &m, &sl) == MC_OK,
                "shard %d of %d on dimension %d should be described (%s)", r, count,
                split_dim, mc_last_error_detail());
        require(mc_tensor_meta_check(&m) == MC_OK, "shard %d of %d should be a valid meta", r,
                count);
        require((m.layout == MC_TENSOR_LAYOUT_SHARD) && (m.axis_count == 1) &&
                    (m.dtype == MC_TENSOR_INT32) && (m.ndim == ndim) &&
                    (m.data_offset == HDR),
                "shard %d of %d should have layout SHARD and one axis", r, count);
        require((m.axes[0].kind == MC_TENSOR_AXIS_TP) && (m.axes[0].axis_index == 0) &&
                    (m.axes[0].shard_rank == r) && (m.axes[0].shard_count == count) &&
                    (m.axes[0].split_dim == sd) &&
                    (m.axes[0].local_extent == (int64_t)(end - start)),
                "the axis of shard %d of %d should be TP {rank, count, split %d, extent %llu}",
                r, count, sd, (unsigned long long)(end - start));
        for (int k = 1; k < MC_TENSOR_MAX_AXES; k++)
            require((m.axes[k].kind == 0) && (m.axes[k].shard_count == 0) &&
                        (m.axes[k].local_extent == 0) && (m.axes[k].split_dim == 0),
                    "unused axis %d of a shard should be zero", k);
        for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
            require(m.global_shape[i] == full.global_shape[i],
                    "a shard should keep the global shape (dimension %d)", i);
            lshape[i] = (i == sd) ? (int64_t)(end - start) : full.local_shape[i];
            require(m.local_shape[i] == lshape[i],
                    "local dimension %d of shard %d of %d should be %lld, not %lld", i, r,
                    count, (long long)lshape[i], (long long)m.local_shape[i]);
        }
        extent_sum += (uint64_t)m.local_shape[sd];
        ln = elems(lshape, ndim);
        require(m.data_bytes == ln * 4, "shard %d of %d should hold %llu bytes", r, count,
                (unsigned long long)(ln * 4));

        /* the slab lies inside the source and covers exactly the shard */
        require(sl.rows * sl.row_bytes == m.data_bytes,
                "the slab of shard %d of %d should cover its %llu bytes", r, count,
                (unsigned long long)m.data_bytes);
        if (sl.rows > 0)
            require(sl.offset + (sl.rows - 1) * sl.stride + sl.row_bytes <= full.data_bytes,
                    "the slab of shard %d of %d should lie inside the tensor", r, count);
        if (sl.rows > 1)
            require(sl.stride >= sl.row_bytes, "the runs of a slab should not overlap");

        /* the gathered bytes are the elements of the range, in order */
        memset(sh, 0xEE, (n + 1) * sizeof(*sh));
        mc_tensor_slab_gather(&sl, src, sh);
        require(sh[ln] == (int32_t)0xEEEEEEEE, "gather should write only the shard's bytes");
        for (uint64_t li = 0; li < ln; li++) {
            uint64_t g;
            unflat(li, lshape, ndim, idx);
            idx[sd] += (int64_t)start;
            g = flat(idx, shape, ndim);
            require(sh[li] == (int32_t)g,
                    "element %llu of shard %d of %d should be source element %llu, not %d",
                    (unsigned long long)li, r, count, (unsigned long long)g, sh[li]);
            require(!hit[g], "source element %llu should be in one shard only",
                    (unsigned long long)g);
            hit[g]  = 1;
            back[g] = sh[li];
        }
    }
    require(extent_sum == dim, "the shards' extents should add up to %llu, not %llu",
            (unsigned long long)dim, (unsigned long long)extent_sum);
    for (uint64_t i = 0; i < n; i++)
        require(hit[i] && (back[i] == src[i]),
                "the shards put back together should give element %llu", (unsigned long long)i);
    free(src);
    free(back);
    free(hit);
    free(sh);
}

START_TEST(test_shard_2d)
{
    static const int64_t shape[2] = {10, 6};

    for (int32_t sd = 0; sd < 2; sd++)
        for (int32_t count = 1; count <= 12; count++)
            check_split(shape, 2, sd, count);
}
END_TEST

START_TEST(test_shard_3d)
{
    static const int64_t shape[3] = {4, 5, 6};

    for (int32_t sd = 0; sd < 3; sd++)
        for (int32_t count = 1; count <= 12; count++)
            check_split(shape, 3, sd, count);
}
END_TEST

START_TEST(test_shard_other_shapes)
{
    static const int64_t s1[1] = {7};
    static const int64_t s2[3] = {1, 1, 9};   /* leading ones: one run */
    static const int64_t s3[3] = {3, 0, 4};   /* empty */
    static const int64_t s4[4] = {2, 3, 1, 5};

    for (int32_t count = 1; count <= 12; count++) {
        check_split(s1, 1, 0, count);
        for (int32_t sd = 0; sd < 3; sd++) {
            check_split(s2, 3, sd, count);
            check_split(s3, 3, sd, count);
        }
        for (int32_t sd = 0; sd < 4; sd++)
            check_split(s4, 4, sd, count);
    }
}
END_TEST

START_TEST(test_shard_slab_shape)
{
    static const int64_t shape[2] = {10, 6};
    static const int64_t lead[3]  = {1, 1, 9};
    mc_tensor_meta_t full, m;
    mc_tensor_slab_t sl;

    ck_assert_status_ok(mc_tensor_meta_init(&full, MC_TENSOR_INT32, shape, 2));
    /* along dimension 0: one run of whole rows */
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 0, 3, 1, &m, &sl));
    ck_assert_msg((sl.rows == 1) && (sl.offset == 3 * 24) && (sl.row_bytes == 3 * 24),
                  "rows [3,6) of a [10,6] int32 should be one run at 72 of 72 bytes");
    /* along dimension 1: one run per row */
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 1, 4, 1, &m, &sl));
    ck_assert_msg((sl.rows == 10) && (sl.offset == 4) && (sl.row_bytes == 8) &&
                      (sl.stride == 24),
                  "columns [1,3) of a [10,6] int32 should be 10 runs of 8 bytes, 24 apart");
    /* a shard of the whole extent of an inner dimension is one run */
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 1, 1, 0, &m, &sl));
    ck_assert_msg((sl.rows == 1) && (sl.offset == 0) && (sl.row_bytes == 240),
                  "one shard of the columns of a [10,6] int32 should be one run of 240 bytes");
    /* an empty shard has no runs */
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 1, 12, 0, &m, &sl));
    ck_assert_msg((sl.rows == 0) && (m.data_bytes == 0) && (m.local_shape[1] == 0),
                  "shard 0 of 12 of 6 columns should be empty");
    /* a NULL slab is allowed */
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 1, 2, 1, &m, NULL));
    /* leading ones: a split of the last dimension is one run */
    ck_assert_status_ok(mc_tensor_meta_init(&full, MC_TENSOR_UINT8, lead, 3));
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 2, 2, 1, &m, &sl));
    ck_assert_msg((sl.rows == 1) && (sl.offset == 4) && (sl.row_bytes == 5),
                  "the second half of a [1,1,9] should be one run of 5 bytes at 4");
}
END_TEST

START_TEST(test_shard_negative_split_dim)
{
    static const int64_t shape[3] = {4, 5, 6};
    mc_tensor_meta_t full, a, b;
    mc_tensor_slab_t sa, sb;

    ck_assert_status_ok(mc_tensor_meta_init(&full, MC_TENSOR_FLOAT32, shape, 3));
    for (int32_t sd = -3; sd < 0; sd++) {
        for (int32_t r = 0; r < 4; r++) {
            ck_assert_status_ok(mc_tensor_meta_shard(&full, sd, 4, r, &a, &sa));
            ck_assert_status_ok(mc_tensor_meta_shard(&full, sd + 3, 4, r, &b, &sb));
            assert_meta_eq(&a, &b, "a negative split_dim and its positive twin");
            ck_assert_msg((sa.offset == sb.offset) && (sa.rows == sb.rows) &&
                              (sa.row_bytes == sb.row_bytes) && (sa.stride == sb.stride),
                          "split_dim %d should give the slab of %d", sd, sd + 3);
            ck_assert_msg(a.axes[0].split_dim == sd + 3,
                          "the header should record split_dim %d as %d", sd, sd + 3);
        }
    }
    check_split(shape, 3, -1, 5);
    check_split(shape, 3, -3, 7);
}
END_TEST

static void shard_refused(const mc_tensor_meta_t *full, int32_t sd, int32_t count, int32_t rank,
                          const char *what)
{
    mc_tensor_meta_t m;
    mc_tensor_slab_t sl;

    sentinel(&m, sizeof(m));
    sentinel(&sl, sizeof(sl));
    ck_assert_msg(mc_tensor_meta_shard(full, sd, count, rank, &m, &sl) == MC_INVALID_PARAMS,
                  "meta_shard should refuse %s", what);
    ck_assert_msg(is_sentinel(&m, sizeof(m)) && is_sentinel(&sl, sizeof(sl)),
                  "a refused meta_shard (%s) should write neither the meta nor the slab", what);
}

START_TEST(test_shard_refusals)
{
    static const int64_t shape[2] = {10, 6};
    mc_tensor_meta_t full, scalar, sh, bad;
    mc_tensor_slab_t sl;

    ck_assert_status_ok(mc_tensor_meta_init(&full, MC_TENSOR_FLOAT32, shape, 2));
    ck_assert_status_ok(mc_tensor_meta_init(&scalar, MC_TENSOR_FLOAT32, NULL, 0));

    shard_refused(&scalar, 0, 2, 0, "a scalar");
    shard_refused(&scalar, -1, 1, 0, "a scalar with split_dim -1");
    shard_refused(&full, 2, 2, 0, "split_dim 2 of a 2-D tensor");
    shard_refused(&full, -3, 2, 0, "split_dim -3 of a 2-D tensor");
    shard_refused(&full, INT32_MIN, 2, 0, "split_dim INT32_MIN");
    shard_refused(&full, 0, 2, 2, "rank 2 of 2");
    shard_refused(&full, 0, 2, -1, "rank -1");
    shard_refused(&full, 0, 0, 0, "count 0");
    shard_refused(&full, 0, -2, 0, "count -2");
    shard_refused(&full, 0, MC_TENSOR_MAX_SHARDS + 1, 0, "more than MC_TENSOR_MAX_SHARDS shards");
    shard_refused(&full, 0, INT32_MAX, 0, "INT32_MAX shards");
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 0, MC_TENSOR_MAX_SHARDS,
                                             MC_TENSOR_MAX_SHARDS - 1, &sh, &sl));
    ck_assert_msg((sh.local_shape[0] == 1) && (sl.rows == 1),
                  "the last of MC_TENSOR_MAX_SHARDS shards of 10 rows should hold one row");

    /* only a whole tensor can be split */
    ck_assert_status_ok(mc_tensor_meta_shard(&full, 1, 2, 0, &sh, &sl));
    shard_refused(&sh, 0, 2, 0, "a SHARD-layout input");
    bad        = full;
    bad.layout = MC_TENSOR_LAYOUT_SHARD;
    shard_refused(&bad, 0, 2, 0, "a SHARD-layout input without axes");
    bad            = full;
    bad.axis_count = 1;
    bad.axes[0]    = (mc_tensor_axis_t){MC_TENSOR_AXIS_DP, 0, 0, 1, -1, 0};
    shard_refused(&bad, 0, 2, 0, "a FULL-layout input with an axis");
    bad                = full;
    bad.local_shape[0] = 5;
    bad.data_bytes     = 5 * 6 * 4;
    shard_refused(&bad, 1, 2, 0, "a FULL input whose local shape is not its global shape");
    bad            = full;
    bad.data_bytes = 1;
    shard_refused(&bad, 0, 2, 0, "an invalid meta");
    bad       = full;
    bad.dtype = 15;
    shard_refused(&bad, 0, 2, 0, "a meta with dtype 15");
    ck_assert_msg(mc_tensor_meta_shard(NULL, 0, 2, 0, &sh, &sl) == MC_INVALID_PARAMS,
                  "meta_shard should refuse a NULL meta");
}
END_TEST

START_TEST(test_shard_key)
{
    char buf[32];
    char big[64];

    memset(buf, 'x', sizeof(buf));
    ck_assert_int_eq(mc_tensor_shard_key(buf, sizeof(buf), "k", 3), 6);
    ck_assert_str_eq(buf, "k_tp_3");
    ck_assert_int_eq(mc_tensor_shard_key(buf, 7, "k", 3), 6);
    ck_assert_str_eq(buf, "k_tp_3");
    ck_assert_int_eq(mc_tensor_shard_key(buf, sizeof(buf), "layer.0.w", 4095), 17);
    ck_assert_str_eq(buf, "layer.0.w_tp_4095");

    memset(buf, 'x', sizeof(buf));
    ck_assert_msg(mc_tensor_shard_key(buf, 6, "k", 3) == -1,
                  "a 6-byte buffer should be too small for k_tp_3 and its NUL");
    ck_assert_msg(buf[0] == '\0', "a too small buffer should be left holding \"\"");
    memset(buf, 'x', sizeof(buf));
    ck_assert_msg(mc_tensor_shard_key(buf, 1, "k", 3) == -1, "one byte should be too small");
    ck_assert_msg(buf[0] == '\0', "a one-byte buffer should be left holding \"\"");
    memset(buf, 'x', sizeof(buf));
    ck_assert_msg(mc_tensor_shard_key(buf, 0, "k", 3) == -1, "no room should be too small");
    ck_assert_msg(buf[0] == 'x', "a zero-capacity buffer should not be written");
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(mc_tensor_shard_key(buf, sizeof(buf), big, 0), -1);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(mc_tensor_shard_key(buf, sizeof(buf), NULL, 0), -1);
    ck_assert_int_eq(mc_tensor_shard_key(NULL, 10, "k", 0), -1);
}
END_TEST

/* ---- the store ------------------------------------------------------------------ */

static mc_test_master_t master;
static mc_store_h store;
/* registered in setup: get_into and the from-writes need it */
static uint8_t regbuf[1u << 20] __attribute__((aligned(4096)));

static void setup_store(void)
{
    static const char *const flags[] = {"--default_kv_lease_ttl=3000", NULL};
    mc_store_params_t p;

    mc_test_master_start(&master, flags);
    st_params(&p, master.addr, 16u << 20, 4u << 20);
    ck_assert_status_ok(mc_store_create(&store));
    ck_assert_status_ok(mc_store_setup(store, &p));
    ck_assert_status_ok(mc_store_register_buffer(store, regbuf, sizeof(regbuf)));
}

static void teardown_store(void)
{
    mc_store_destroy(store);
    store = NULL;
    mc_test_master_stop(&master);
}

/* Where reads land: the second half of regbuf (the first is for sources). */
#define RD (regbuf + (sizeof(regbuf) / 2))
#define RD_CAP (sizeof(regbuf) / 2)

/* Read tensor @p key and check it is @p want with data @p data. */
static void expect_tensor(const char *key, const mc_tensor_meta_t *want, const void *data)
{
    mc_tensor_meta_t m;
    int64_t got;

    memset(RD, 0xDD, RD_CAP);
    sentinel(&m, sizeof(m));
    got = mc_tensor_get_into(store, key, RD, RD_CAP, &m);
    ck_assert_msg(got == (int64_t)(HDR + want->data_bytes),
                  "%s should read back as %llu bytes, got %lld (%s)", key,
                  (unsigned long long)(HDR + want->data_bytes), (long long)got,
                  (got < 0) ? mc_status_name((int)got) : "");
    assert_meta_eq(&m, want, key);
    ck_assert_msg((want->data_bytes == 0) || (memcmp(RD + HDR, data, want->data_bytes) == 0),
                  "the data of %s should read back unchanged", key);
    ck_assert_msg(RD[got] == 0xDD, "a read of %s should not write past the object", key);
}

static void expect_missing(const char *key)
{
    mc_tensor_meta_t m;

    sentinel(&m, sizeof(m));
    ck_assert_msg(mc_tensor_get_into(store, key, RD, RD_CAP, &m) == MC_OBJECT_NOT_FOUND,
                  "%s should not have been stored", key);
    ck_assert_msg(is_sentinel(&m, sizeof(m)), "a miss should leave the meta alone");
}

/* Check that "<key>_tp_<r>" for r < tp hold the shards of @p full, data @p src. */
static void expect_shards(const char *key, const mc_tensor_meta_t *full, const void *src,
                          int32_t tp, int32_t split_dim)
{
    char sk[128];
    mc_tensor_meta_t sh;
    mc_tensor_slab_t sl;
    uint8_t *want = malloc(full->data_bytes + 1);

    ck_assert_ptr_nonnull(want);
    for (int32_t r = 0; r < tp; r++) {
        ck_assert_int_gt(mc_tensor_shard_key(sk, sizeof(sk), key, r), 0);
        ck_assert_status_ok(mc_tensor_meta_shard(full, split_dim, tp, r, &sh, &sl));
        mc_tensor_slab_gather(&sl, src, want);
        expect_tensor(sk, &sh, want);
    }
    ck_assert_int_gt(mc_tensor_shard_key(sk, sizeof(sk), key, tp), 0);
    expect_missing(sk);
    free(want);
}

static void fill_float(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        p[i] = base + (float)i * 0.5f;
}

START_TEST(test_put_get_round_trip)
{
    static const int64_t shape[2] = {3, 5};
    static const int64_t zero[2]  = {0, 5};
    mc_tensor_meta_t m, s, z, got;
    float data[15];
    double sc = 2.5;
    uint8_t hdr[HDR];

    fill_float(data, 15, 1.0f);
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, shape, 2));
    ck_assert_status_ok(mc_tensor_put(store, "t", &m, data, NULL, 0));
    expect_tensor("t", &m, data);
    /* the object is the header, byte for byte, then the data */
    mc_tensor_header_encode(&m, hdr);
    ck_assert_msg(memcmp(RD, hdr, HDR) == 0, "the stored header should be the encoded one");

    ck_assert_status_ok(mc_tensor_meta_init(&s, MC_TENSOR_FLOAT64, NULL, 0));
    ck_assert_status_ok(mc_tensor_put(store, "t-scalar", &s, &sc, NULL, 0));
    expect_tensor("t-scalar", &s, &sc);

    ck_assert_status_ok(mc_tensor_meta_init(&z, MC_TENSOR_INT8, zero, 2));
    ck_assert_status_ok(mc_tensor_put(store, "t-empty", &z, NULL, NULL, 0));
    expect_tensor("t-empty", &z, NULL);

    expect_missing("t-missing");

    /* too small, unregistered: refused, meta untouched */
    sentinel(&got, sizeof(got));
    ck_assert_int_eq(mc_tensor_get_into(store, "t", RD, HDR + 59, &got), MC_INVALID_PARAMS);
    ck_assert_msg(is_sentinel(&got, sizeof(got)), "a too small read should leave the meta");
    {
        uint8_t *plain = malloc(4096);
        ck_assert_ptr_nonnull(plain);
        ck_assert_int_eq(mc_tensor_get_into(store, "t", plain, 4096, &got), MC_INVALID_PARAMS);
        ck_assert_msg(is_sentinel(&got, sizeof(got)),
                      "a read into unregistered memory should leave the meta");
        free(plain);
    }
    ck_assert_int_eq(mc_tensor_get_into(store, "t", RD, RD_CAP, NULL), MC_INVALID_PARAMS);

    /* an invalid meta, or data missing, is refused and nothing is stored */
    m.data_bytes = 64;
    ck_assert_status_eq(mc_tensor_put(store, "t-bad", &m, data, NULL, 0), MC_INVALID_PARAMS);
    expect_missing("t-bad");
    m.data_bytes = 60;
    ck_assert_status_eq(mc_tensor_put(store, "t-null", &m, NULL, NULL, 0), MC_INVALID_PARAMS);
    expect_missing("t-null");
    ck_assert_status_eq(mc_tensor_put(store, "t-nometa", NULL, data, NULL, 0),
                        MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_put_batch_tp3)
{
    static const int64_t shape[2]  = {4, 7};
    static const int64_t shape2[3] = {6, 2, 3};
    const char *keys[3]            = {"w", "v", "bad-scalar"};
    mc_tensor_meta_t metas[3];
    const void *data[3];
    mc_status_t sts[3];
    float a[28], b[36], c = 1.0f;

    fill_float(a, 28, 10.0f);
    fill_float(b, 36, -3.0f);
    ck_assert_status_ok(mc_tensor_meta_init(&metas[0], MC_TENSOR_FLOAT32, shape, 2));
    ck_assert_status_ok(mc_tensor_meta_init(&metas[1], MC_TENSOR_FLOAT32, shape2, 3));
    data[0] = a;
    data[1] = b;
    ck_assert_status_ok(mc_tensor_put_batch(store, keys, metas, data, 2, 3, 1, NULL, 0, sts));
    ck_assert_msg((sts[0] == MC_OK) && (sts[1] == MC_OK), "both tensors should be stored");
    expect_shards("w", &metas[0], a, 3, 1);
    expect_shards("v", &metas[1], b, 3, 1);
    expect_missing("w");
    expect_missing("v");

    /* a scalar cannot be split: its status says so, the others are stored */
    ck_assert_status_ok(mc_tensor_meta_init(&metas[2], MC_TENSOR_FLOAT32, NULL, 0));
    data[2]  = &c;
    keys[0]  = "w2";
    keys[1]  = "v2";
    sts[0]   = sts[1] = sts[2] = MC_INTERNAL_ERROR;
    ck_assert_status_eq(mc_tensor_put_batch(store, keys, metas, data, 3, 2, -1, NULL, 0, sts),
                        MC_INVALID_PARAMS);
    ck_assert_msg((sts[0] == MC_OK) && (sts[1] == MC_OK) && (sts[2] == MC_INVALID_PARAMS),
                  "only the scalar should be refused (%d %d %d)", sts[0], sts[1], sts[2]);
    expect_shards("w2", &metas[0], a, 2, -1);
    expect_shards("v2", &metas[1], b, 2, 2);
    expect_missing("bad-scalar_tp_0");
    expect_missing("bad-scalar");

    /* group ids: one per tensor, else every tensor is refused */
    {
        mc_replicate_config_t cfg;
        const char *gids[1] = {"g"};
        const char *k1[2]   = {"g-a", "g-b"};
        mc_replicate_config_init(&cfg);
        cfg.field_mask |= MC_RC_FIELD_GROUP_IDS;
        cfg.group_ids       = gids;
        cfg.group_ids_count = 1;
        ck_assert_status_eq(mc_tensor_put_batch(store, k1, metas, data, 2, 2, 0, &cfg, 0, sts),
                            MC_INVALID_PARAMS);
        ck_assert_msg((sts[0] == MC_INVALID_PARAMS) && (sts[1] == MC_INVALID_PARAMS),
                      "one group id for two tensors should refuse both");
        expect_missing("g-a_tp_0");
    }
}
END_TEST

START_TEST(test_put_from_batch)
{
    static const int64_t sa[2] = {4, 6};
    static const int64_t sb[2] = {5, 3};
    mc_tensor_meta_t ma, mb, want;
    uint8_t *oa = regbuf, *ob = regbuf + 4096, *oc = regbuf + 8192;
    uint64_t la = HDR + 96, lb = 320 + 30;
    const void *bufs[3];
    uint64_t sizes[3];
    mc_status_t sts[3];
    const char *keys[3];
    int64_t got;
    uint8_t *plain;

    /* A: [4,6] float32 at its usual offset; B: [5,3] int16 with its data at 320 */
    ck_assert_status_ok(mc_tensor_meta_init(&ma, MC_TENSOR_FLOAT32, sa, 2));
    mc_tensor_header_encode(&ma, oa);
    fill_float((float *)(oa + HDR), 24, 7.0f);
    ck_assert_status_ok(mc_tensor_meta_init(&mb, MC_TENSOR_INT16, sb, 2));
    mb.data_offset = 320;
    mc_tensor_header_encode(&mb, ob);
    memset(ob + HDR, 0xEE, 16);
    for (int i = 0; i < 30; i++)
        ob[320 + i] = (uint8_t)(100 + i);

    /* tp 1: stored as they are, padding included */
    keys[0]  = "pf-a";
    keys[1]  = "pf-b";
    bufs[0]  = oa;
    bufs[1]  = ob;
    sizes[0] = la;
    sizes[1] = lb;
    ck_assert_status_ok(mc_tensor_put_from_batch(store, keys, bufs, sizes, 2, 1, 0, NULL, 0,
                                                 sts));
    ck_assert_msg((sts[0] == MC_OK) && (sts[1] == MC_OK), "both objects should be stored");
    got = mc_tensor_get_into(store, "pf-a", RD, RD_CAP, &want);
    ck_assert_msg((got == (int64_t)la) && (memcmp(RD, oa, la) == 0),
                  "pf-a should be stored byte for byte");
    assert_meta_eq(&want, &ma, "pf-a");
    got = mc_tensor_get_into(store, "pf-b", RD, RD_CAP, &want);
    ck_assert_msg((got == (int64_t)lb) && (memcmp(RD, ob, lb) == 0),
                  "pf-b should be stored byte for byte, padding and all");
    assert_meta_eq(&want, &mb, "pf-b");

    /* tp 2: split from the data where the header says it is */
    keys[0] = "pf2-a";
    keys[1] = "pf2-b";
    ck_assert_status_ok(mc_tensor_put_from_batch(store, keys, bufs, sizes, 2, 2, 0, NULL, 0,
                                                 sts));
    mb.data_offset = HDR; /* the shards are written with their data right after */
    expect_shards("pf2-a", &ma, oa + HDR, 2, 0);
    expect_shards("pf2-b", &mb, ob + 320, 2, 0);
    ck_assert_status_ok(mc_tensor_put_from_batch(store, keys, bufs, sizes, 2, 2, -1, NULL,
                                                 MC_TENSOR_WRITE_UPSERT, sts));
    expect_shards("pf2-a", &ma, oa + HDR, 2, 1);
    expect_shards("pf2-b", &mb, ob + 320, 2, 1);

    /* an unregistered buffer is refused alone, for either tp */
    plain = malloc(la);
    ck_assert_ptr_nonnull(plain);
    memcpy(plain, oa, la);
    for (int32_t tp = 1; tp <= 2; tp++) {
        const char *k3[2][3] = {{"u1-ok", "u1-plain", "u1-ok2"}, {"u2-ok", "u2-plain", "u2-ok2"}};
        const void *b3[3]    = {oa, plain, ob};
        uint64_t s3[3]       = {la, la, lb};
        char sk[64];
        sts[0] = sts[1] = sts[2] = MC_INTERNAL_ERROR;
        ck_assert_status_eq(mc_tensor_put_from_batch(store, k3[tp - 1], b3, s3, 3, tp, 0, NULL,
                                                     0, sts),
                            MC_INVALID_PARAMS);
        ck_assert_msg((sts[0] == MC_OK) && (sts[1] == MC_INVALID_PARAMS) && (sts[2] == MC_OK),
                      "only the unregistered buffer should be refused (tp %d: %d %d %d)", tp,
                      sts[0], sts[1], sts[2]);
        if (tp == 1) {
            expect_missing(k3[0][1]);
            ck_assert_int_eq(mc_tensor_get_into(store, k3[0][0], RD, RD_CAP, &want), la);
            ck_assert_int_eq(mc_tensor_get_into(store, k3[0][2], RD, RD_CAP, &want), lb);
        } else {
            mc_tensor_shard_key(sk, sizeof(sk), k3[1][1], 0);
            expect_missing(sk);
            mc_tensor_shard_key(sk, sizeof(sk), k3[1][1], 1);
            expect_missing(sk);
            expect_shards(k3[1][0], &ma, oa + HDR, 2, 0);
            expect_shards(k3[1][2], &mb, ob + 320, 2, 0);
        }
    }
    free(plain);

    /* a corrupted header, a wrong length; a shard object */
    memcpy(oc, oa, la);
    oc[0] ^= 1;
    keys[0]  = "pf-corrupt";
    bufs[0]  = oc;
    sizes[0] = la;
    ck_assert_status_eq(mc_tensor_put_from_batch(store, keys, bufs, sizes, 1, 1, 0, NULL, 0,
                                                 sts),
                        MC_INVALID_PARAMS);
    ck_assert_int_eq(sts[0], MC_INVALID_PARAMS);
    expect_missing("pf-corrupt");
    keys[0]  = "pf-short";
    bufs[0]  = oa;
    sizes[0] = la - 1;
    ck_assert_status_eq(mc_tensor_put_from_batch(store, keys, bufs, sizes, 1, 1, 0, NULL, 0,
                                                 NULL),
                        MC_INVALID_PARAMS);
    expect_missing("pf-short");
    {
        mc_tensor_meta_t sh, whole;
        ck_assert_status_ok(mc_tensor_meta_shard(&ma, 0, 2, 0, &sh, NULL));
        mc_tensor_header_encode(&sh, oc);
        memcpy(oc + HDR, oa + HDR, sh.data_bytes);
        keys[0]  = "pf-shard";
        bufs[0]  = oc;
        sizes[0] = HDR + sh.data_bytes;
        /* split, a shard object is split as the tensor it holds (as upstream) */
        ck_assert_status_ok(mc_tensor_put_from_batch(store, keys, bufs, sizes, 1, 2, 0, NULL,
                                                     0, sts));
        ck_assert_status_ok(mc_tensor_meta_init(&whole, MC_TENSOR_FLOAT32, sh.local_shape, 2));
        expect_shards("pf-shard", &whole, oa + HDR, 2, 0);
        /* unsplit, a shard object is stored as it is */
        ck_assert_status_ok(mc_tensor_put_from_batch(store, keys, bufs, sizes, 1, 1, 0, NULL,
                                                     0, sts));
        expect_tensor("pf-shard", &sh, oa + HDR);
    }
}
END_TEST

START_TEST(test_batch_get_into)
{
    static const int64_t sa[1] = {10};
    static const int64_t sb[2] = {2, 2};
    const char *keys[5]        = {"bg-a", "bg-missing", "bg-b", "bg-raw", "bg-small"};
    mc_tensor_meta_t ma, mb, metas[5], tmp;
    void *bufs[5];
    uint64_t caps[5];
    int64_t res[5];
    uint64_t va[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int8_t vb[4]    = {-1, 2, -3, 4};
    uint8_t raw[400];

    ck_assert_status_ok(mc_tensor_meta_init(&ma, MC_TENSOR_UINT64, sa, 1));
    ck_assert_status_ok(mc_tensor_meta_init(&mb, MC_TENSOR_INT8, sb, 2));
    ck_assert_status_ok(mc_tensor_put(store, "bg-a", &ma, va, NULL, 0));
    ck_assert_status_ok(mc_tensor_put(store, "bg-b", &mb, vb, NULL, 0));
    ck_assert_status_ok(mc_tensor_put(store, "bg-small", &mb, vb, NULL, 0));
    /* not a tensor: 400 bytes with no magic */
    memset(raw, 0x5A, sizeof(raw));
    ck_assert_status_ok(mc_store_put(store, "bg-raw", raw, sizeof(raw), NULL));

    for (int i = 0; i < 5; i++) {
        bufs[i] = RD + 4096 * i;
        caps[i] = 4096;
    }
    caps[4] = HDR + 4 - 1;
    sentinel(metas, sizeof(metas));
    memset(RD, 0xDD, 5 * 4096);
    ck_assert_status_eq(mc_tensor_batch_get_into(store, keys, bufs, caps, 5, metas, res),
                        MC_OBJECT_NOT_FOUND);
    ck_assert_msg(res[0] == (int64_t)(HDR + 80), "bg-a should read as 384 bytes, got %lld",
                  (long long)res[0]);
    assert_meta_eq(&metas[0], &ma, "bg-a");
    ck_assert_msg(memcmp((uint8_t *)bufs[0] + HDR, va, sizeof(va)) == 0,
                  "bg-a's data should follow its header");
    ck_assert_msg(res[1] == MC_OBJECT_NOT_FOUND, "a missing key should be OBJECT_NOT_FOUND");
    ck_assert_msg(is_sentinel(&metas[1], sizeof(metas[1])), "a miss should leave its meta");
    ck_assert_msg(res[2] == (int64_t)(HDR + 4), "bg-b should read as 308 bytes");
    assert_meta_eq(&metas[2], &mb, "bg-b");
    ck_assert_msg(memcmp((uint8_t *)bufs[2] + HDR, vb, sizeof(vb)) == 0,
                  "bg-b's data should follow its header");
    ck_assert_msg(res[3] == MC_INVALID_PARAMS, "a non-tensor object should be INVALID_PARAMS");
    ck_assert_msg(is_sentinel(&metas[3], sizeof(metas[3])),
                  "a non-tensor object should leave its meta");
    ck_assert_msg(res[4] == MC_INVALID_PARAMS, "a too small buffer should be INVALID_PARAMS");
    ck_assert_msg(is_sentinel(&metas[4], sizeof(metas[4])),
                  "a too small buffer should leave its meta");

    /* all present: MC_OK */
    keys[1] = "bg-b";
    keys[3] = "bg-a";
    caps[4] = 4096;
    ck_assert_status_ok(mc_tensor_batch_get_into(store, keys, bufs, caps, 5, metas, res));
    assert_meta_eq(&metas[4], &mb, "bg-small with room");
    /* the single read of a non-tensor */
    sentinel(&tmp, sizeof(tmp));
    ck_assert_int_eq(mc_tensor_get_into(store, "bg-raw", RD, RD_CAP, &tmp), MC_INVALID_PARAMS);
    ck_assert_msg(is_sentinel(&tmp, sizeof(tmp)), "a non-tensor read should leave the meta");
    ck_assert_msg(memcmp(RD, raw, sizeof(raw)) == 0,
                  "a non-tensor read should leave its bytes in the buffer");
    ck_assert_status_ok(mc_tensor_batch_get_into(store, keys, bufs, caps, 0, metas, res));
    ck_assert_status_eq(mc_tensor_batch_get_into(store, keys, bufs, caps, 1, metas, NULL),
                        MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_store_failure_is_the_tensors_status)
{
    /* 24 MiB cannot be placed in the one 16 MiB segment */
    static const int64_t big[2]   = {2, 12 << 20};
    static const int64_t small[1] = {16};
    const char *keys[2]           = {"fail-small", "fail-big"};
    mc_tensor_meta_t metas[2];
    const void *data[2];
    mc_status_t sts[2], st;
    uint8_t *b = calloc(1, 24u << 20);
    uint8_t s[16];

    ck_assert_ptr_nonnull(b);
    memset(s, 0x3C, sizeof(s));
    ck_assert_status_ok(mc_tensor_meta_init(&metas[0], MC_TENSOR_UINT8, small, 1));
    ck_assert_status_ok(mc_tensor_meta_init(&metas[1], MC_TENSOR_UINT8, big, 2));
    data[0] = s;
    data[1] = b;
    for (int32_t tp = 1; tp <= 3; tp += 2) {
        sts[0] = sts[1] = MC_INTERNAL_ERROR;
        st = mc_tensor_put_batch(store, keys, metas, data, 2, tp, -1, NULL, 0, sts);
        ck_assert_msg(sts[0] == MC_OK, "the small tensor should be stored (tp %d)", tp);
        ck_assert_msg((sts[1] != MC_OK) && (sts[1] != MC_INTERNAL_ERROR),
                      "a 24 MiB tensor in a 16 MiB segment should carry the store's "
                      "error (tp %d), not %d", tp, sts[1]);
        ck_assert_msg(st == sts[1], "the batch should return the first error (tp %d)", tp);
        if (tp == 1) {
            expect_tensor("fail-small", &metas[0], s);
            expect_missing("fail-big");
        } else {
            expect_shards("fail-small3", &metas[0], s, 3, -1);
        }
        keys[0] = "fail-small3";
        keys[1] = "fail-big3";
    }
    free(b);
}
END_TEST

START_TEST(test_upsert_replaces_shape)
{
    static const int64_t s1[2] = {2, 3};
    static const int64_t s2[3] = {4, 1, 5};
    mc_tensor_meta_t m1, m2;
    float d1[6];
    int64_t d2[20];
    const char *key = "up";
    const void *dp  = d2;
    mc_status_t st;

    fill_float(d1, 6, 0.25f);
    for (int i = 0; i < 20; i++)
        d2[i] = -i * 1000;
    ck_assert_status_ok(mc_tensor_meta_init(&m1, MC_TENSOR_FLOAT32, s1, 2));
    ck_assert_status_ok(mc_tensor_meta_init(&m2, MC_TENSOR_INT64, s2, 3));
    ck_assert_status_ok(mc_tensor_put(store, "up", &m1, d1, NULL, 0));
    /* a put keeps the first value */
    ck_assert_status_ok(mc_tensor_put(store, "up", &m2, d2, NULL, 0));
    expect_tensor("up", &m1, d1);
    ck_assert_status_ok(mc_tensor_put(store, "up", &m2, d2, NULL, MC_TENSOR_WRITE_UPSERT));
    expect_tensor("up", &m2, d2);
    /* and back, through the batch call */
    dp = d1;
    ck_assert_status_ok(mc_tensor_put_batch(store, &key, &m1, &dp, 1, 1, 0, NULL,
                                            MC_TENSOR_WRITE_UPSERT, &st));
    ck_assert_int_eq(st, MC_OK);
    expect_tensor("up", &m1, d1);
    /* split shards are upserted too: a put keeps them, an upsert replaces them */
    dp = d2;
    ck_assert_status_ok(mc_tensor_put_batch(store, &key, &m2, &dp, 1, 2, 0, NULL, 0, &st));
    expect_shards("up", &m2, d2, 2, 0);
    ck_assert_status_ok(mc_tensor_put_batch(store, &key, &m2, &dp, 1, 2, 2, NULL, 0, &st));
    expect_shards("up", &m2, d2, 2, 0);
    ck_assert_status_ok(mc_tensor_put_batch(store, &key, &m2, &dp, 1, 2, 2, NULL,
                                            MC_TENSOR_WRITE_UPSERT, &st));
    expect_shards("up", &m2, d2, 2, 2);
}
END_TEST

START_TEST(test_split_many_short_rows)
{
    static const int64_t shape[2] = {1000, 4};
    mc_tensor_meta_t m, sh;
    mc_tensor_slab_t sl;
    uint8_t *d = malloc(4000);
    const char *key = "rows";
    const void *dp;
    mc_status_t st;

    ck_assert_ptr_nonnull(d);
    for (int i = 0; i < 4000; i++)
        d[i] = (uint8_t)((i / 4) * 4 + (i % 4) * 61);
    dp = d;
    ck_assert_status_ok(mc_tensor_meta_init(&m, MC_TENSOR_UINT8, shape, 2));
    /* 1000 runs of 2 bytes: gathered, not written run by run */
    ck_assert_status_ok(mc_tensor_meta_shard(&m, 1, 2, 0, &sh, &sl));
    ck_assert_msg((sl.rows == 1000) && (sl.row_bytes == 2), "each shard should be 1000 runs");
    ck_assert_status_ok(mc_tensor_put_batch(store, &key, &m, &dp, 1, 2, 1, NULL, 0, &st));
    ck_assert_int_eq(st, MC_OK);
    expect_shards("rows", &m, d, 2, 1);
    /* by index arithmetic: shard r, row i holds columns 2r, 2r+1 of row i */
    for (int32_t r = 0; r < 2; r++) {
        char sk[32];
        mc_tensor_meta_t got;
        mc_tensor_shard_key(sk, sizeof(sk), "rows", r);
        ck_assert_int_eq(mc_tensor_get_into(store, sk, RD, RD_CAP, &got), HDR + 2000);
        for (int i = 0; i < 1000; i++)
            for (int j = 0; j < 2; j++)
                require(RD[HDR + i * 2 + j] == d[i * 4 + 2 * r + j],
                        "row %d column %d of shard %d should be source column %d", i, j, r,
                        2 * r + j);
    }
    /* three uneven shards along the rows too (one run each) */
    key = "rows3";
    ck_assert_status_ok(mc_tensor_put_batch(store, &key, &m, &dp, 1, 3, 0, NULL, 0, &st));
    expect_shards("rows3", &m, d, 3, 0);
    free(d);
}
END_TEST

Suite *mc_test_tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc;

    tc = tcase_create("layout");
    tcase_add_test(tc, test_dtype_sizes_and_names);
    tcase_add_test(tc, test_header_byte_layout);
    tcase_add_test(tc, test_shard_header_byte_layout);
    tcase_add_test(tc, test_hand_built_header_decodes);
    suite_add_tcase(s, tc);

    tc = tcase_create("codec");
    tcase_add_test(tc, test_round_trip_every_dtype);
    tcase_add_test(tc, test_round_trip_scalar);
    tcase_add_test(tc, test_round_trip_eight_dims);
    tcase_add_test(tc, test_round_trip_empty);
    tcase_add_test(tc, test_meta_init_refusals);
    tcase_add_test(tc, test_decode_refusals);
    tcase_add_test(tc, test_meta_check);
    tcase_add_test(tc, test_decode_refuses_counts_past_the_arrays);
    tcase_add_test(tc, test_decode_refuses_malformed_axes);
    tcase_add_test(tc, test_decode_exact_buffers);
    suite_add_tcase(s, tc);

    tc = tcase_create("shard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_shard_2d);
    tcase_add_test(tc, test_shard_3d);
    tcase_add_test(tc, test_shard_other_shapes);
    tcase_add_test(tc, test_shard_slab_shape);
    tcase_add_test(tc, test_shard_negative_split_dim);
    tcase_add_test(tc, test_shard_refusals);
    tcase_add_test(tc, test_shard_key);
    suite_add_tcase(s, tc);

    tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup_store, teardown_store);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_put_get_round_trip);
    tcase_add_test(tc, test_put_batch_tp3);
    tcase_add_test(tc, test_put_from_batch);
    tcase_add_test(tc, test_batch_get_into);
    tcase_add_test(tc, test_store_failure_is_the_tensors_status);
    tcase_add_test(tc, test_upsert_replaces_shape);
    tcase_add_test(tc, test_split_many_short_rows);
    suite_add_tcase(s, tc);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the tensor object decoder (tensor/tensor.c): a
 * tensor object read from the store may have been written by anyone, so any
 * bytes must either be refused with MC_INVALID_PARAMS or decode into a meta
 * that keeps the decoder's promises:
 *
 *  - the dtype has an element size, ndim, layout and axis_count are in
 *    range, and data_offset + data_bytes is exactly the object's length;
 *  - the meta passes mc_tensor_meta_check(), re-encodes to the input's
 *    header bytes (all but the reserved fields, which the decoder ignores
 *    and the encoder writes as zero) and decodes again to the same meta;
 *  - the tensor it holds (its local shape) can be described again with
 *    mc_tensor_meta_init() and split with mc_tensor_meta_shard() along every
 *    dimension for a few shard counts; every slab lies inside the data,
 *    covers exactly the shard's bytes, and gathering it reads only the
 *    object (ASan checks);
 *  - a FULL meta without axes whose local shape is its global shape splits
 *    to the same shards directly; any other meta is refused by
 *    mc_tensor_meta_shard() with MC_INVALID_PARAMS.
 *
 * Any violation aborts.  Built with -DMC_FUZZ_WRITE_SEEDS it is instead a
 * program that writes a few valid objects into a corpus directory.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/tensor.h>

#ifndef MC_FUZZ_WRITE_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_tensor: %s\n", what);
    abort();
}

static int meta_eq(const mc_tensor_meta_t *a, const mc_tensor_meta_t *b)
{
    if ((a->dtype != b->dtype) || (a->ndim != b->ndim) || (a->layout != b->layout) ||
        (a->axis_count != b->axis_count) || (a->data_offset != b->data_offset) ||
        (a->data_bytes != b->data_bytes))
        return 0;
    for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++)
        if ((a->global_shape[i] != b->global_shape[i]) ||
            (a->local_shape[i] != b->local_shape[i]))
            return 0;
    for (int k = 0; k < MC_TENSOR_MAX_AXES; k++) {
        const mc_tensor_axis_t *x = &a->axes[k], *y = &b->axes[k];
        if ((x->kind != y->kind) || (x->axis_index != y->axis_index) ||
            (x->shard_rank != y->shard_rank) || (x->shard_count != y->shard_count) ||
            (x->split_dim != y->split_dim) || (x->local_extent != y->local_extent))
            return 0;
    }
    return 1;
}

/* Bytes of the header the decoder ignores: reserved_flags, the u32 after
 * axis_count, reserved0 of every axis, and the axes past axis_count
 * (docs/tensor.md §1). */
static int reserved_byte(size_t i, uint32_t axis_count)
{
    if (((i >= 20) && (i < 24)) || ((i >= 172) && (i < 176)))
        return 1;
    if (i >= 176 + 32 * (size_t)axis_count)
        return 1;
    return (i >= 176) && (((i - 176) % 32) >= 20) && (((i - 176) % 32) < 24);
}

/* Split @p whole (valid, FULL, ndim > 0; its data at @p src) and check
 * every shard; when @p direct is a FULL meta that is not a whole tensor,
 * it must be refused, else it must split the same. */
static void check_shards(const mc_tensor_meta_t *whole, const mc_tensor_meta_t *direct,
                         int direct_ok, const uint8_t *src)
{
    static const int32_t counts[] = {1, 2, 3, 7, MC_TENSOR_MAX_SHARDS};

    for (int32_t sd = -whole->ndim; sd < whole->ndim; sd++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            int32_t n = counts[c];
            /* every rank of a small split, else the ends and the middle */
            int32_t nr          = (n <= 3) ? n : 3;
            int32_t ranks[3]    = {0, (n <= 3) ? 1 : n / 2, n - 1};
            uint64_t ext_sum    = 0;

            for (int32_t k = 0; k < nr; k++) {
                int32_t r = ranks[k];
                mc_tensor_meta_t sh, sh2;
                mc_tensor_slab_t sl, sl2;
                uint8_t *dst;

                if (mc_tensor_meta_shard(whole, sd, n, r, &sh, &sl) != MC_OK)
                    fail("a valid whole tensor does not split");
                if (mc_tensor_meta_check(&sh) != MC_OK)
                    fail("a shard meta does not pass meta_check");
                if ((sh.layout != MC_TENSOR_LAYOUT_SHARD) || (sh.axis_count != 1) ||
                    (sh.axes[0].shard_rank != r) || (sh.axes[0].shard_count != n) ||
                    (sh.axes[0].split_dim != ((sd < 0) ? sd + whole->ndim : sd)) ||
                    (sh.axes[0].local_extent != sh.local_shape[sh.axes[0].split_dim]))
                    fail("a shard header does not describe the split");
                if (sl.rows * sl.row_bytes != sh.data_bytes)
                    fail("slab rows * row_bytes is not the shard's data_bytes");
                if ((sl.rows > 0) &&
                    ((sl.offset > whole->data_bytes) ||
                     ((sl.rows - 1) * sl.stride + sl.row_bytes > whole->data_bytes - sl.offset)))
                    fail("a slab reaches past the tensor's data");
                if ((sl.rows > 1) && (sl.stride < sl.row_bytes))
                    fail("the runs of a slab overlap");
                if (sh.data_bytes > 0) {
                    dst = malloc(sh.data_bytes);
                    if (dst == NULL)
                        fail("out of memory");
                    mc_tensor_slab_gather(&sl, src, dst);
                    free(dst);
                }
                ext_sum += (uint64_t)sh.axes[0].local_extent;

                if (direct == NULL)
                    continue;
                if (!direct_ok) {
                    if (mc_tensor_meta_shard(direct, sd, n, r, &sh2, &sl2) != MC_INVALID_PARAMS)
                        fail("a FULL meta that is not a whole tensor was split");
                    continue;
                }
                if (mc_tensor_meta_shard(direct, sd, n, r, &sh2, &sl2) != MC_OK)
                    fail("a decoded whole tensor does not split");
                if (!meta_eq(&sh, &sh2) || (sl.offset != sl2.offset) || (sl.rows != sl2.rows) ||
                    (sl.row_bytes != sl2.row_bytes) || (sl.stride != sl2.stride))
                    fail("a decoded whole tensor splits unlike its meta_init twin");
            }
            if ((n <= 3) &&
                (ext_sum != (uint64_t)whole->local_shape[(sd < 0) ? sd + whole->ndim : sd]))
                fail("the shards' extents do not add up to the dimension");
        }
    }
    {
        mc_tensor_meta_t sh;
        if ((mc_tensor_meta_shard(whole, whole->ndim, 2, 0, &sh, NULL) != MC_INVALID_PARAMS) ||
            (mc_tensor_meta_shard(whole, 0, 2, 2, &sh, NULL) != MC_INVALID_PARAMS) ||
            (mc_tensor_meta_shard(whole, 0, MC_TENSOR_MAX_SHARDS + 1, 0, &sh, NULL) !=
             MC_INVALID_PARAMS))
            fail("an out-of-range split was accepted");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_tensor_meta_t m, again, whole;
    uint8_t hdr[MC_TENSOR_HEADER_SIZE];
    uint8_t *copy;
    size_t es;
    int is_whole;

    if (mc_tensor_header_decode(data, size, &m) != MC_OK)
        return 0;

    es = mc_tensor_dtype_size(m.dtype);
    if (es == 0)
        fail("decoded a dtype without an element size");
    if ((m.ndim < 0) || (m.ndim > MC_TENSOR_MAX_DIMS))
        fail("decoded an ndim out of range");
    if ((m.layout > MC_TENSOR_LAYOUT_SHARD) || (m.axis_count > MC_TENSOR_MAX_AXES))
        fail("decoded a layout or axis count out of range");
    if ((m.data_offset < MC_TENSOR_HEADER_SIZE) || (m.data_offset > size) ||
        (m.data_bytes != size - m.data_offset))
        fail("data_offset + data_bytes is not the object's length");
    if ((m.data_bytes % es) != 0)
        fail("data_bytes is not a whole number of elements");
    if (mc_tensor_meta_check(&m) != MC_OK)
        fail("a decoded meta does not pass meta_check");

    /* re-encode in front of the same data: same header, same meta */
    mc_tensor_header_encode(&m, hdr);
    for (size_t i = 0; i < MC_TENSOR_HEADER_SIZE; i++) {
        if (reserved_byte(i, m.axis_count) ? (hdr[i] != 0) : (hdr[i] != data[i]))
            fail("a decoded header does not re-encode to its bytes");
    }
    copy = malloc(size);
    if (copy == NULL)
        fail("out of memory");
    memcpy(copy, hdr, MC_TENSOR_HEADER_SIZE);
    memcpy(copy + MC_TENSOR_HEADER_SIZE, data + MC_TENSOR_HEADER_SIZE,
           size - MC_TENSOR_HEADER_SIZE);
    if (mc_tensor_header_decode(copy, size, &again) != MC_OK)
        fail("a re-encoded header does not decode");
    if (!meta_eq(&m, &again))
        fail("a re-encoded header decodes to another meta");
    free(copy);

    if (m.ndim == 0) {
        mc_tensor_meta_t sh;
        if (m.data_bytes != es)
            fail("a scalar is not one element");
        if (mc_tensor_meta_shard(&m, 0, 1, 0, &sh, NULL) != MC_INVALID_PARAMS)
            fail("a scalar was split");
        return 0;
    }

    /* the tensor this object holds, as a whole tensor */
    if (mc_tensor_meta_init(&whole, m.dtype, m.local_shape, m.ndim) != MC_OK)
        fail("the local shape of a decoded meta does not describe a tensor");
    if (whole.data_bytes != m.data_bytes)
        fail("meta_init of the local shape disagrees on data_bytes");
    is_whole = (m.layout == MC_TENSOR_LAYOUT_FULL) && (m.axis_count == 0) &&
               (memcmp(m.global_shape, m.local_shape, sizeof(m.local_shape)) == 0);
    check_shards(&whole, (m.layout == MC_TENSOR_LAYOUT_FULL) ? &m : NULL, is_whole,
                 data + m.data_offset);
    if (m.layout == MC_TENSOR_LAYOUT_SHARD) {
        mc_tensor_meta_t sh;
        if (mc_tensor_meta_shard(&m, 0, 1, 0, &sh, NULL) != MC_INVALID_PARAMS)
            fail("a SHARD meta was split");
    }
    return 0;
}

#else /* MC_FUZZ_WRITE_SEEDS */

static int write_object(const char *dir, const char *name, const mc_tensor_meta_t *m)
{
    char path[4096];
    uint8_t *o = calloc(1, m->data_offset + m->data_bytes);
    FILE *f;
    size_t n = m->data_offset + m->data_bytes;
    int rc;

    if (o == NULL)
        return -1;
    mc_tensor_header_encode(m, o);
    for (uint64_t i = 0; i < m->data_bytes; i++)
        o[m->data_offset + i] = (uint8_t)(i * 13u + 5u);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f  = fopen(path, "wb");
    rc = ((f != NULL) && (fwrite(o, 1, n, f) == n)) ? 0 : -1;
    if (rc != 0)
        perror(path);
    if ((f != NULL) && (fclose(f) != 0))
        rc = -1;
    free(o);
    return rc;
}

int main(int argc, char **argv)
{
    static const int64_t s2[2]  = {3, 5};
    static const int64_t s3[3]  = {4, 5, 6};
    static const int64_t s8[8]  = {2, 1, 3, 1, 2, 1, 1, 2};
    static const int64_t s0[2]  = {4, 0};
    mc_tensor_meta_t m, sh;
    int rc = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    rc |= (mc_tensor_meta_init(&m, MC_TENSOR_FLOAT32, s2, 2) != MC_OK);
    rc |= write_object(argv[1], "seed-float32-3x5", &m);
    rc |= (mc_tensor_meta_init(&m, MC_TENSOR_INT16, s3, 3) != MC_OK);
    rc |= write_object(argv[1], "seed-int16-4x5x6", &m);
    rc |= (mc_tensor_meta_shard(&m, 1, 3, 2, &sh, NULL) != MC_OK);
    rc |= write_object(argv[1], "seed-int16-shard-2-of-3", &sh);
    m.data_offset = 320;
    rc |= write_object(argv[1], "seed-int16-offset-320", &m);
    rc |= (mc_tensor_meta_init(&m, MC_TENSOR_BFLOAT16, s8, 8) != MC_OK);
    rc |= write_object(argv[1], "seed-bfloat16-8d", &m);
    rc |= (mc_tensor_meta_init(&m, MC_TENSOR_FLOAT64, NULL, 0) != MC_OK);
    rc |= write_object(argv[1], "seed-float64-scalar", &m);
    rc |= (mc_tensor_meta_init(&m, MC_TENSOR_UINT8, s0, 2) != MC_OK);
    rc |= write_object(argv[1], "seed-uint8-empty", &m);
    return rc == 0 ? 0 : 1;
}

#endif /* MC_FUZZ_WRITE_SEEDS */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tensor object codec: the upstream 304-byte header (docs/tensor.md)
 * and the arithmetic of tensor-parallel shards.
 *
 * Every header field is read and written at its fixed offset in explicit
 * little-endian order, so the layout does not depend on how a compiler
 * packs a struct.  The decoder reads nothing past the 304 header bytes and
 * never trusts a field before checking it: every dimension is bounded
 * before it is multiplied, and the element count is multiplied with
 * overflow checks, so a hostile header cannot make a caller size a buffer
 * from a wrapped product.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <mooncake/tensor.h>

#include "common/buf.h"
#include "common/log.h"

/* Byte offsets of the header fields (docs/tensor.md §1). */
enum {
    OFF_MAGIC        = 0,
    OFF_VERSION      = 4,
    OFF_HEADER_SIZE  = 6,
    OFF_DTYPE        = 8,
    OFF_NDIM         = 12,
    OFF_LAYOUT       = 16,
    OFF_FLAGS        = 20,
    OFF_DATA_OFFSET  = 24,
    OFF_DATA_BYTES   = 32,
    OFF_GLOBAL_SHAPE = 40,
    OFF_LOCAL_SHAPE  = 104,
    OFF_AXIS_COUNT   = 168,
    OFF_AXES         = 176,
    AXIS_SIZE        = 32
};
_Static_assert(OFF_AXES + MC_TENSOR_MAX_AXES * AXIS_SIZE == MC_TENSOR_HEADER_SIZE,
               "the header is 304 bytes");

static const struct {
    const char *name;
    unsigned size;
} dtypes[MC_TENSOR_DTYPE_COUNT] = {
    [MC_TENSOR_FLOAT32] = {"float32", 4},      [MC_TENSOR_FLOAT64] = {"float64", 8},
    [MC_TENSOR_INT8] = {"int8", 1},            [MC_TENSOR_UINT8] = {"uint8", 1},
    [MC_TENSOR_INT16] = {"int16", 2},          [MC_TENSOR_UINT16] = {"uint16", 2},
    [MC_TENSOR_INT32] = {"int32", 4},          [MC_TENSOR_UINT32] = {"uint32", 4},
    [MC_TENSOR_INT64] = {"int64", 8},          [MC_TENSOR_UINT64] = {"uint64", 8},
    [MC_TENSOR_BOOL] = {"bool", 1},            [MC_TENSOR_FLOAT16] = {"float16", 2},
    [MC_TENSOR_BFLOAT16] = {"bfloat16", 2},    [MC_TENSOR_FLOAT8_E4M3] = {"float8_e4m3fn", 1},
    [MC_TENSOR_FLOAT8_E5M2] = {"float8_e5m2", 1},
};

MC_API size_t mc_tensor_dtype_size(int32_t dtype)
{
    return ((dtype >= 0) && (dtype < MC_TENSOR_DTYPE_COUNT)) ? dtypes[dtype].size : 0;
}

MC_API const char *mc_tensor_dtype_name(int32_t dtype)
{
    return ((dtype >= 0) && (dtype < MC_TENSOR_DTYPE_COUNT)) ? dtypes[dtype].name : "unknown";
}

/*
 * bytes = product of shape[0..ndim) * esize, each dim already >= 0.  The
 * product of the non-zero dimensions must stay within INT64_MAX even when
 * another dimension is 0 (*ok = 0 otherwise): that bound is what lets the
 * shard arithmetic multiply any subset of the dimensions safely.
 */
static uint64_t shape_bytes(const int64_t *shape, int32_t ndim, size_t esize, int *ok)
{
    uint64_t n = esize;
    int zero   = 0;

    *ok = 1;
    for (int32_t i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d == 0) {
            zero = 1;
            continue;
        }
        if (n > (uint64_t)INT64_MAX / d) {
            *ok = 0;
            return 0;
        }
        n *= d;
    }
    return zero ? 0 : n;
}

MC_API mc_status_t mc_tensor_meta_init(mc_tensor_meta_t *meta, int32_t dtype,
                                       const int64_t *shape, int32_t ndim)
{
    mc_tensor_meta_t m;
    size_t es = mc_tensor_dtype_size(dtype);
    int ok;

    if ((meta == NULL) || ((shape == NULL) && (ndim > 0))) {
        mc_set_error_detail("meta and shape are required");
        return MC_INVALID_PARAMS;
    }
    if (es == 0) {
        mc_set_error_detail("dtype %" PRId32 " has no tensor code", dtype);
        return MC_INVALID_PARAMS;
    }
    if ((ndim < 0) || (ndim > MC_TENSOR_MAX_DIMS)) {
        mc_set_error_detail("ndim %" PRId32 " is outside [0, %d]", ndim, MC_TENSOR_MAX_DIMS);
        return MC_INVALID_PARAMS;
    }
    memset(&m, 0, sizeof(m));
    for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
        int64_t d = (i < ndim) ? shape[i] : -1;
        if ((i < ndim) && (d < 0)) {
            mc_set_error_detail("dimension %d is negative (%" PRId64 ")", i, d);
            return MC_INVALID_PARAMS;
        }
        m.global_shape[i] = d;
        m.local_shape[i]  = d;
    }
    m.data_bytes = shape_bytes(m.local_shape, ndim, es, &ok);
    if (!ok) {
        mc_set_error_detail("the tensor holds more than 2^63 bytes");
        return MC_INVALID_PARAMS;
    }
    m.dtype       = dtype;
    m.ndim        = ndim;
    m.layout      = MC_TENSOR_LAYOUT_FULL;
    m.data_offset = MC_TENSOR_HEADER_SIZE;
    *meta         = m;
    return MC_OK;
}

MC_API mc_status_t mc_tensor_meta_check(const mc_tensor_meta_t *m)
{
    size_t es;
    uint64_t want;
    int ok;

    if (m == NULL) {
        mc_set_error_detail("meta is NULL");
        return MC_INVALID_PARAMS;
    }
    es = mc_tensor_dtype_size(m->dtype);
    if (es == 0) {
        mc_set_error_detail("dtype %" PRId32 " has no tensor code", m->dtype);
        return MC_INVALID_PARAMS;
    }
    if ((m->ndim < 0) || (m->ndim > MC_TENSOR_MAX_DIMS)) {
        mc_set_error_detail("ndim %" PRId32 " is outside [0, %d]", m->ndim, MC_TENSOR_MAX_DIMS);
        return MC_INVALID_PARAMS;
    }
    if (m->layout > MC_TENSOR_LAYOUT_SHARD) {
        mc_set_error_detail("layout kind %" PRIu32 " is neither FULL nor SHARD", m->layout);
        return MC_INVALID_PARAMS;
    }
    if (m->axis_count > MC_TENSOR_MAX_AXES) {
        mc_set_error_detail("%" PRIu32 " layout axes, at most %d", m->axis_count,
                            MC_TENSOR_MAX_AXES);
        return MC_INVALID_PARAMS;
    }
    if (m->data_offset < MC_TENSOR_HEADER_SIZE) {
        mc_set_error_detail("data offset %" PRIu64 " lies inside the header", m->data_offset);
        return MC_INVALID_PARAMS;
    }
    for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
        int64_t g = m->global_shape[i], l = m->local_shape[i];
        if (i < m->ndim) {
            if ((g < 0) || (l < 0)) {
                mc_set_error_detail("dimension %d is negative (global %" PRId64 ", local %" PRId64
                                    ")", i, g, l);
                return MC_INVALID_PARAMS;
            }
        } else if ((g != -1) || (l != -1)) {
            mc_set_error_detail("unused dimension %d is not -1", i);
            return MC_INVALID_PARAMS;
        }
    }
    for (uint32_t k = 0; k < m->axis_count; k++) {
        const mc_tensor_axis_t *a = &m->axes[k];
        if ((a->kind < 0) || (a->kind > MC_TENSOR_AXIS_RESERVED) || (a->shard_count < 1) ||
            (a->shard_rank < 0) || (a->shard_rank >= a->shard_count) || (a->split_dim < -1) ||
            (a->split_dim >= m->ndim)) {
            mc_set_error_detail("layout axis %" PRIu32 " is malformed (kind %" PRId32
                                ", rank %" PRId32 " of %" PRId32 ", split dim %" PRId32 ")",
                                k, a->kind, a->shard_rank, a->shard_count, a->split_dim);
            return MC_INVALID_PARAMS;
        }
    }
    want = shape_bytes(m->local_shape, m->ndim, es, &ok);
    if (!ok || (want != m->data_bytes)) {
        mc_set_error_detail("data_bytes %" PRIu64 " disagrees with the local shape (%s%" PRIu64
                            " bytes of %s)", m->data_bytes, ok ? "" : "over ",
                            ok ? want : (uint64_t)INT64_MAX, mc_tensor_dtype_name(m->dtype));
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

MC_API mc_status_t mc_tensor_meta_shard(const mc_tensor_meta_t *full, int32_t split_dim,
                                        int32_t count, int32_t rank, mc_tensor_meta_t *shard,
                                        mc_tensor_slab_t *slab)
{
    mc_tensor_meta_t m;
    mc_tensor_slab_t sl;
    uint64_t dim, q, rem, start, end, inner, outer = 1;
    size_t es;
    mc_status_t st;

    st = mc_tensor_meta_check(full);
    if (st != MC_OK)
        return st;
    if ((full->layout != MC_TENSOR_LAYOUT_FULL) || (full->axis_count != 0) ||
        (memcmp(full->global_shape, full->local_shape, sizeof(full->local_shape)) != 0)) {
        mc_set_error_detail("only a whole tensor (FULL layout, no axes) can be split into "
                            "shards");
        return MC_INVALID_PARAMS;
    }
    if (full->ndim == 0) {
        mc_set_error_detail("a scalar has no dimension to split");
        return MC_INVALID_PARAMS;
    }
    if (split_dim < 0)
        split_dim += full->ndim;
    if ((split_dim < 0) || (split_dim >= full->ndim)) {
        mc_set_error_detail("split_dim is outside [-%d, %d)", full->ndim, full->ndim);
        return MC_INVALID_PARAMS;
    }
    if ((count < 1) || (count > MC_TENSOR_MAX_SHARDS) || (rank < 0) || (rank >= count)) {
        mc_set_error_detail("shard %" PRId32 " of %" PRId32 " is out of range (1..%d shards)",
                            rank, count, MC_TENSOR_MAX_SHARDS);
        return MC_INVALID_PARAMS;
    }

    /* [D*r/n, D*(r+1)/n) without the 128-bit product: D = q*n + rem. */
    dim   = (uint64_t)full->global_shape[split_dim];
    q     = dim / (uint64_t)count;
    rem   = dim % (uint64_t)count;
    start = q * (uint64_t)rank + rem * (uint64_t)rank / (uint64_t)count;
    end   = q * (uint64_t)(rank + 1) + rem * (uint64_t)(rank + 1) / (uint64_t)count;

    /* meta_check bounded the product of the non-zero dimensions by INT64_MAX,
     * so every partial product below fits */
    es    = mc_tensor_dtype_size(full->dtype);
    inner = es;
    for (int32_t i = split_dim + 1; i < full->ndim; i++)
        inner *= (uint64_t)full->global_shape[i];
    for (int32_t i = 0; i < split_dim; i++)
        outer *= (uint64_t)full->global_shape[i];

    m                         = *full;
    m.layout                  = MC_TENSOR_LAYOUT_SHARD;
    m.data_offset             = MC_TENSOR_HEADER_SIZE;
    m.local_shape[split_dim]  = (int64_t)(end - start);
    m.data_bytes              = outer * (end - start) * inner;
    m.axis_count              = 1;
    memset(m.axes, 0, sizeof(m.axes));
    m.axes[0].kind            = MC_TENSOR_AXIS_TP;
    m.axes[0].axis_index      = 0;
    m.axes[0].shard_rank      = rank;
    m.axes[0].shard_count     = count;
    m.axes[0].split_dim       = split_dim;
    m.axes[0].local_extent    = (int64_t)(end - start);

    sl.offset    = start * inner;
    sl.row_bytes = (end - start) * inner;
    sl.stride    = dim * inner;
    sl.rows      = (sl.row_bytes == 0) ? 0 : outer;
    if ((sl.rows > 1) && (sl.row_bytes == sl.stride)) {
        /* the whole extent of split_dim: the runs touch */
        sl.row_bytes *= sl.rows;
        sl.rows = 1;
    }
    *shard = m;
    if (slab != NULL)
        *slab = sl;
    return MC_OK;
}

MC_API void mc_tensor_slab_gather(const mc_tensor_slab_t *slab, const void *src, void *dst)
{
    const unsigned char *s = (const unsigned char *)src + slab->offset;
    unsigned char *d       = dst;

    for (uint64_t r = 0; r < slab->rows; r++) {
        memcpy(d, s, slab->row_bytes);
        d += slab->row_bytes;
        s += slab->stride;
    }
}

MC_API void mc_tensor_header_encode(const mc_tensor_meta_t *m, void *out)
{
    uint8_t *p = out;

    memset(p, 0, MC_TENSOR_HEADER_SIZE);
    mc_store_le32(p + OFF_MAGIC, MC_TENSOR_MAGIC);
    mc_store_le16(p + OFF_VERSION, MC_TENSOR_VERSION);
    mc_store_le16(p + OFF_HEADER_SIZE, MC_TENSOR_HEADER_SIZE);
    mc_store_le32(p + OFF_DTYPE, (uint32_t)m->dtype);
    mc_store_le32(p + OFF_NDIM, (uint32_t)m->ndim);
    mc_store_le32(p + OFF_LAYOUT, m->layout);
    mc_store_le64(p + OFF_DATA_OFFSET, m->data_offset);
    mc_store_le64(p + OFF_DATA_BYTES, m->data_bytes);
    for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
        mc_store_le64(p + OFF_GLOBAL_SHAPE + 8 * i, (uint64_t)m->global_shape[i]);
        mc_store_le64(p + OFF_LOCAL_SHAPE + 8 * i, (uint64_t)m->local_shape[i]);
    }
    mc_store_le32(p + OFF_AXIS_COUNT, m->axis_count);
    for (int k = 0; k < MC_TENSOR_MAX_AXES; k++) {
        const mc_tensor_axis_t *a = &m->axes[k];
        uint8_t *q                = p + OFF_AXES + AXIS_SIZE * k;
        mc_store_le32(q + 0, (uint32_t)a->kind);
        mc_store_le32(q + 4, (uint32_t)a->axis_index);
        mc_store_le32(q + 8, (uint32_t)a->shard_rank);
        mc_store_le32(q + 12, (uint32_t)a->shard_count);
        mc_store_le32(q + 16, (uint32_t)a->split_dim);
        mc_store_le64(q + 24, (uint64_t)a->local_extent);
    }
}

MC_API mc_status_t mc_tensor_header_decode(const void *obj, uint64_t len, mc_tensor_meta_t *meta)
{
    const uint8_t *p = obj;
    mc_tensor_meta_t m;
    uint32_t magic;
    mc_status_t st;

    if ((obj == NULL) || (len < MC_TENSOR_HEADER_SIZE)) {
        mc_set_error_detail("%" PRIu64 " bytes cannot hold a %d-byte tensor header", len,
                            MC_TENSOR_HEADER_SIZE);
        return MC_INVALID_PARAMS;
    }
    magic = mc_load_le32(p + OFF_MAGIC);
    if (magic != MC_TENSOR_MAGIC) {
        mc_set_error_detail("bad magic 0x%08" PRIx32 ": not a tensor object", magic);
        return MC_INVALID_PARAMS;
    }
    if (mc_load_le16(p + OFF_VERSION) != MC_TENSOR_VERSION) {
        mc_set_error_detail("tensor header version %u, this library reads %d",
                            (unsigned)mc_load_le16(p + OFF_VERSION), MC_TENSOR_VERSION);
        return MC_INVALID_PARAMS;
    }
    if (mc_load_le16(p + OFF_HEADER_SIZE) != MC_TENSOR_HEADER_SIZE) {
        mc_set_error_detail("tensor header size %u, expected %d",
                            (unsigned)mc_load_le16(p + OFF_HEADER_SIZE), MC_TENSOR_HEADER_SIZE);
        return MC_INVALID_PARAMS;
    }
    memset(&m, 0, sizeof(m));
    m.dtype       = (int32_t)mc_load_le32(p + OFF_DTYPE);
    m.ndim        = (int32_t)mc_load_le32(p + OFF_NDIM);
    m.layout      = mc_load_le32(p + OFF_LAYOUT);
    m.data_offset = mc_load_le64(p + OFF_DATA_OFFSET);
    m.data_bytes  = mc_load_le64(p + OFF_DATA_BYTES);
    for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
        m.global_shape[i] = (int64_t)mc_load_le64(p + OFF_GLOBAL_SHAPE + 8 * i);
        m.local_shape[i]  = (int64_t)mc_load_le64(p + OFF_LOCAL_SHAPE + 8 * i);
    }
    m.axis_count = mc_load_le32(p + OFF_AXIS_COUNT);
    /* only the axes in use; the others stay zero, as the meta promises */
    for (uint32_t k = 0; (k < m.axis_count) && (k < MC_TENSOR_MAX_AXES); k++) {
        const uint8_t *q   = p + OFF_AXES + AXIS_SIZE * k;
        mc_tensor_axis_t *a = &m.axes[k];
        a->kind         = (int32_t)mc_load_le32(q + 0);
        a->axis_index   = (int32_t)mc_load_le32(q + 4);
        a->shard_rank   = (int32_t)mc_load_le32(q + 8);
        a->shard_count  = (int32_t)mc_load_le32(q + 12);
        a->split_dim    = (int32_t)mc_load_le32(q + 16);
        a->local_extent = (int64_t)mc_load_le64(q + 24);
    }
    st = mc_tensor_meta_check(&m);
    if (st != MC_OK)
        return st;
    if ((m.data_offset > len) || (m.data_bytes != len - m.data_offset)) {
        mc_set_error_detail("the header describes %" PRIu64 " data bytes at offset %" PRIu64
                            ", the object is %" PRIu64 " bytes", m.data_bytes, m.data_offset,
                            len);
        return MC_INVALID_PARAMS;
    }
    *meta = m;
    return MC_OK;
}

MC_API int mc_tensor_shard_key(char *out, size_t cap, const char *key, int32_t rank)
{
    int n;

    if ((out == NULL) || (key == NULL) || (cap == 0) || (cap > INT32_MAX)) {
        if ((out != NULL) && (cap > 0))
            out[0] = '\0';
        return -1;
    }
    n = snprintf(out, cap, "%s_tp_%" PRId32, key, rank);
    if ((n < 0) || ((size_t)n >= cap)) {
        out[0] = '\0';
        return -1;
    }
    return n;
}

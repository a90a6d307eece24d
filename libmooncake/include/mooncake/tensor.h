/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file tensor.h
 * @brief Tensor objects: the upstream byte layout, its codec, and tensor
 *        writes and reads on top of the store API.
 *
 * A tensor object is a 304-byte header (a 40-byte object header and a
 * 264-byte layout block, little-endian, docs/tensor.md has every byte)
 * followed by the tensor's bytes, contiguous in row-major order of the
 * local shape.  Objects written here read back in upstream Mooncake and
 * the other way round.
 *
 * The codec (mc_tensor_meta_*, mc_tensor_header_*) is pure: no store, no
 * allocation, thread-safe.  The decoder assumes hostile input: it reads
 * only the bytes it is given and accepts a header only when every field
 * agrees (magic, version, sizes, dtype, dimensions, axes, and data_bytes ==
 * the local shape's element count times the element size == what follows
 * the header).
 *
 * The store calls (mc_tensor_put*, mc_tensor_get_into*) use only the public
 * store API, so they work for any store handle.  Tensor parallelism splits
 * a tensor along one dimension into @c tp_size shards and stores shard r
 * under "<key>_tp_<r>" (see mc_tensor_shard_key()).
 */
#ifndef MOONCAKE_TENSOR_H
#define MOONCAKE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/status.h>
#include <mooncake/config.h>
#include <mooncake/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes of the header in front of every tensor object. @since 0.2 */
#define MC_TENSOR_HEADER_SIZE 304
/** Most dimensions a tensor object describes. @since 0.2 */
#define MC_TENSOR_MAX_DIMS 8
/** Most layout axes (sharding descriptions) one header holds. @since 0.2 */
#define MC_TENSOR_MAX_AXES 4
/** First four bytes of a header, as a little-endian u32 ("NOOM" in memory). @since 0.2 */
#define MC_TENSOR_MAGIC 0x4d4f4f4eu
/** Header version this library writes and reads. @since 0.2 */
#define MC_TENSOR_VERSION 1
/** Most shards mc_tensor_put_batch() splits one tensor into. @since 0.2 */
#define MC_TENSOR_MAX_SHARDS 4096

/** Element types (upstream TensorDtype codes). @since 0.2 */
typedef enum mc_tensor_dtype {
    MC_TENSOR_DTYPE_UNKNOWN = -1, /**< no code: refused everywhere */
    MC_TENSOR_FLOAT32       = 0,
    MC_TENSOR_FLOAT64       = 1,
    MC_TENSOR_INT8          = 2,
    MC_TENSOR_UINT8         = 3,
    MC_TENSOR_INT16         = 4,
    MC_TENSOR_UINT16        = 5,
    MC_TENSOR_INT32         = 6,
    MC_TENSOR_UINT32        = 7,
    MC_TENSOR_INT64         = 8,
    MC_TENSOR_UINT64        = 9,
    MC_TENSOR_BOOL          = 10, /**< one byte per element */
    MC_TENSOR_FLOAT16       = 11,
    MC_TENSOR_BFLOAT16      = 12,
    MC_TENSOR_FLOAT8_E4M3   = 13, /**< float8_e4m3fn */
    MC_TENSOR_FLOAT8_E5M2   = 14,
    MC_TENSOR_DTYPE_COUNT   = 15  /**< number of codes; not a dtype */
} mc_tensor_dtype_t;

/** Whether an object holds a whole tensor or one shard of it. @since 0.2 */
typedef enum mc_tensor_layout {
    MC_TENSOR_LAYOUT_FULL  = 0, /**< local shape == global shape, no axes */
    MC_TENSOR_LAYOUT_SHARD = 1  /**< a part of the global tensor, described by axes */
} mc_tensor_layout_t;

/** Kind of parallelism a layout axis describes (upstream LayoutAxisKind). @since 0.2 */
typedef enum mc_tensor_axis_kind {
    MC_TENSOR_AXIS_DP       = 0, /**< data parallel */
    MC_TENSOR_AXIS_TP       = 1, /**< tensor parallel: what mc_tensor_put_batch() writes */
    MC_TENSOR_AXIS_EP       = 2, /**< expert parallel */
    MC_TENSOR_AXIS_PP       = 3, /**< pipeline parallel */
    MC_TENSOR_AXIS_RESERVED = 4
} mc_tensor_axis_kind_t;

/** One layout axis: how the global tensor was cut to get this object. @since 0.2 */
typedef struct mc_tensor_axis {
    int32_t kind;         /**< mc_tensor_axis_kind_t */
    int32_t axis_index;   /**< position of this axis among the object's axes (0 for TP) */
    int32_t shard_rank;   /**< this shard, 0 <= shard_rank < shard_count */
    int32_t shard_count;  /**< shards along this axis, >= 1 */
    int32_t split_dim;    /**< tensor dimension that was split, -1 for none */
    int64_t local_extent; /**< size of split_dim in this shard (upstream reserved1) */
} mc_tensor_axis_t;

/**
 * Everything a header says.  Unused dimensions (index >= ndim) of both
 * shapes are -1, unused axes are zero.  Fill one for a whole tensor with
 * mc_tensor_meta_init(); a header read from memory with
 * mc_tensor_header_decode().
 * @since 0.2
 */
typedef struct mc_tensor_meta {
    int32_t dtype;        /**< mc_tensor_dtype_t */
    int32_t ndim;         /**< 0 (a scalar) .. MC_TENSOR_MAX_DIMS */
    uint32_t layout;      /**< mc_tensor_layout_t */
    uint32_t axis_count;  /**< valid entries of axes, <= MC_TENSOR_MAX_AXES */
    uint64_t data_offset; /**< where the data starts in the object, >= MC_TENSOR_HEADER_SIZE */
    uint64_t data_bytes;  /**< element count of local_shape times the element size */
    int64_t global_shape[MC_TENSOR_MAX_DIMS]; /**< the whole tensor */
    int64_t local_shape[MC_TENSOR_MAX_DIMS];  /**< what this object holds */
    mc_tensor_axis_t axes[MC_TENSOR_MAX_AXES];
} mc_tensor_meta_t;

/**
 * Where one shard's bytes lie in the contiguous data of the whole tensor:
 * @c rows runs of @c row_bytes bytes, the first at @c offset, each
 * @c stride bytes after the previous one.  A shard along dimension 0 (or
 * of a tensor whose leading dimensions are all 1) is one run.
 * @since 0.2
 */
typedef struct mc_tensor_slab {
    uint64_t offset;    /**< byte offset of the first run */
    uint64_t rows;      /**< number of runs (0 for an empty shard) */
    uint64_t row_bytes; /**< bytes per run */
    uint64_t stride;    /**< bytes from the start of one run to the next */
} mc_tensor_slab_t;

/* ---- the codec -------------------------------------------------------- */

/**
 * @brief Bytes per element of @p dtype.
 * @return 1, 2, 4 or 8; 0 for a value that is not a dtype code.
 * @since 0.2
 */
MC_API size_t mc_tensor_dtype_size(int32_t dtype);

/**
 * @brief Name of @p dtype as torch spells it ("float32", "bfloat16",
 *        "float8_e4m3fn", ...); "unknown" for any other value.
 * @since 0.2
 */
MC_API const char *mc_tensor_dtype_name(int32_t dtype);

/**
 * @brief Describe a whole (FULL layout) tensor of @p dtype and shape
 *        @p shape[0..ndim).
 *
 * Dimensions may be 0 (an empty tensor); @p ndim 0 is a scalar of one
 * element.  data_offset is MC_TENSOR_HEADER_SIZE.
 * @param [out] meta  Written on success only.
 * @return MC_INVALID_PARAMS for an unknown dtype, @p ndim outside
 *         [0, MC_TENSOR_MAX_DIMS], a negative dimension, or a byte count
 *         above 2^63 (mc_last_error_detail() says which).
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_meta_init(mc_tensor_meta_t *meta, int32_t dtype,
                                       const int64_t *shape, int32_t ndim);

/**
 * @brief Check every rule a header must satisfy (see the file comment),
 *        except the object length, which only the decoder knows.
 * @return MC_OK or MC_INVALID_PARAMS with a detail.
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_meta_check(const mc_tensor_meta_t *meta);

/**
 * @brief Describe shard @p rank of @p count of the whole tensor @p full,
 *        split along dimension @p split_dim.
 *
 * Shard r covers indices [D*r/count, D*(r+1)/count) of that dimension (D
 * its size), so shards differ by at most one index and concatenating them
 * in rank order gives the tensor back; when D < count some shards are
 * empty.  The shard's header has layout SHARD, the global shape of @p full,
 * its own local shape, and one TP axis {rank, count, split_dim}.
 * @param [in]  split_dim  0 <= split_dim < full->ndim; negative values
 *                         count from the end (-1 is the last dimension).
 * @param [out] shard      Written on success only.
 * @param [out] slab       Where the shard's bytes are in @p full's data
 *                         (may be NULL).
 * @return MC_INVALID_PARAMS when @p full is not a valid FULL tensor, is a
 *         scalar, or @p split_dim, @p rank or @p count is out of range
 *         (count in [1, MC_TENSOR_MAX_SHARDS]).
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_meta_shard(const mc_tensor_meta_t *full, int32_t split_dim,
                                        int32_t count, int32_t rank,
                                        mc_tensor_meta_t *shard, mc_tensor_slab_t *slab);

/**
 * @brief Copy the runs of @p slab out of the whole tensor's data @p src
 *        into @p dst, contiguous (rows * row_bytes bytes).
 * @since 0.2
 */
MC_API void mc_tensor_slab_gather(const mc_tensor_slab_t *slab, const void *src, void *dst);

/**
 * @brief Write the MC_TENSOR_HEADER_SIZE-byte header of @p meta to @p out.
 *
 * Writes exactly what @p meta says (call mc_tensor_meta_check() first for
 * a meta that did not come from mc_tensor_meta_init() or _shard()).
 * @since 0.2
 */
MC_API void mc_tensor_header_encode(const mc_tensor_meta_t *meta, void *out);

/**
 * @brief Read and check the header of a serialized tensor object of @p len
 *        bytes at @p obj.
 *
 * Reads at most MC_TENSOR_HEADER_SIZE bytes, and none when @p len is
 * smaller.  Beyond mc_tensor_meta_check(), data_offset must lie in the
 * object and data_bytes must be exactly @p len - data_offset.
 * @param [out] meta  Written on success only.
 * @return MC_OK or MC_INVALID_PARAMS (with a detail: "bad magic",
 *         "ndim 9 > 8", ...).
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_header_decode(const void *obj, uint64_t len, mc_tensor_meta_t *meta);

/**
 * @brief The key of shard @p rank of @p key: "<key>_tp_<rank>".
 * @return The length written (without the NUL), or -1 when @p cap is too
 *         small (then @p out holds "" if @p cap > 0).
 * @since 0.2
 */
MC_API int mc_tensor_shard_key(char *out, size_t cap, const char *key, int32_t rank);

/* ---- tensor writes ------------------------------------------------------ */

/** Flags of the tensor writes. @since 0.2 */
enum mc_tensor_write_flag {
    MC_TENSOR_WRITE_UPSERT = 1u << 0 /**< overwrite (upsert) instead of put */
};

/**
 * @brief Store one whole tensor: the header of @p meta then
 *        @p meta->data_bytes bytes at @p data.
 *
 * mc_tensor_put_batch() with one key and tp_size 1.
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_put(mc_store_h store, const char *key, const mc_tensor_meta_t *meta,
                                 const void *data, const mc_replicate_config_t *cfg,
                                 unsigned flags);

/**
 * @brief Store @p n tensors, each whole or split into @p tp_size shards,
 *        in one batch write.
 *
 * Tensor i is described by @p metas[i] (a valid meta; data_offset is
 * ignored, the object is always written with the header right before the
 * data) and its data_bytes bytes lie contiguous at @p data[i], in any
 * memory.  The bytes move straight from there into the owners' memory:
 * shards are written as runs of the source (mc_tensor_meta_shard()), and
 * only a shard made of many short runs is gathered into a temporary copy
 * first.
 *
 * With @p tp_size <= 1 each tensor is stored under its key as given.
 * Otherwise metas[i] must be a FULL tensor of at least one dimension and
 * shard r of it is stored under "<key>_tp_<r>" for every r < @p tp_size.
 * prefer_alloc_in_same_node of @p cfg is honoured; group_ids, when set,
 * has one entry per tensor and applies to all its shards.  As every put,
 * an existing key keeps its value (unless MC_TENSOR_WRITE_UPSERT).
 * @param [out] statuses  n entries (may be NULL): MC_OK, MC_INVALID_PARAMS
 *                        for a bad meta, split or key (nothing of that
 *                        tensor is written), or the first failing
 *                        shard's status in rank order (the other shards
 *                        may be stored).
 * @return MC_OK when every tensor was stored, else the first error.
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_put_batch(mc_store_h store, const char *const *keys,
                                       const mc_tensor_meta_t *metas, const void *const *data,
                                       size_t n, int32_t tp_size, int32_t split_dim,
                                       const mc_replicate_config_t *cfg, unsigned flags,
                                       mc_status_t *statuses);

/**
 * @brief Store @p n serialized tensors (header + data, as
 *        mc_tensor_get_into() leaves them) from registered memory.
 *
 * Buffer i of @p sizes[i] bytes must be a valid tensor object of exactly
 * that length (mc_tensor_header_decode()) lying in memory registered with
 * the store (mc_store_mem_is_registered(), checked before a byte of it
 * is read); otherwise its status is MC_INVALID_PARAMS and nothing of it is
 * written.  With @p tp_size <= 1 each buffer is stored as it is.
 * Otherwise the tensor it holds (its local shape; a shard read back splits
 * like any tensor, as upstream) is split as by mc_tensor_put_batch(),
 * without copying the data.
 * @return As mc_tensor_put_batch().
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_put_from_batch(mc_store_h store, const char *const *keys,
                                            const void *const *bufs, const uint64_t *sizes,
                                            size_t n, int32_t tp_size, int32_t split_dim,
                                            const mc_replicate_config_t *cfg, unsigned flags,
                                            mc_status_t *statuses);

/* ---- tensor reads ------------------------------------------------------- */

/**
 * @brief Read tensor object @p key into registered memory and decode its
 *        header.
 *
 * The tensor's data is then at (char *)@p buf + meta->data_offset.
 * @p buf may be CUDA device memory registered with mc_store_register_buffer()
 * (docs/cuda.md): the object is staged through host memory as
 * mc_store_get_into() does and its header is copied back to decode it.
 * @param [out] meta  Written on success only.
 * @return The object's size, or a negative status: MC_OBJECT_NOT_FOUND,
 *         MC_INVALID_PARAMS (buffer not registered or smaller than the
 *         object, or the object is not a valid tensor object; the buffer
 *         then holds its bytes), ...
 * @since 0.2
 */
/**
 * @brief The CUDA device that holds @p ptr.
 *
 * Asks cudaPointerGetAttributes() of the CUDA runtime the library loads at
 * run time (docs/cuda.md); builds without CUDA, processes without a
 * runtime or a GPU, and host memory all answer -1.
 * @param [out] managed_p  (may be NULL) set to 1 for managed memory, else 0.
 * @return The device ordinal (>= 0) for device or managed memory, else -1.
 * @since 0.2
 */
MC_API int mc_cuda_pointer_device(const void *ptr, int *managed_p);

MC_API int64_t mc_tensor_get_into(mc_store_h store, const char *key, void *buf, size_t cap,
                                  mc_tensor_meta_t *meta);

/**
 * @brief mc_tensor_get_into() for @p n keys with one master round trip and
 *        one concurrent transfer.
 * @param [out] metas    n entries; entry i is written when results[i] >= 0.
 * @param [out] results  n entries: object size or a negative status.
 * @return MC_OK when every read succeeded, else the first error.
 * @since 0.2
 */
MC_API mc_status_t mc_tensor_batch_get_into(mc_store_h store, const char *const *keys,
                                            void *const *bufs, const uint64_t *caps, size_t n,
                                            mc_tensor_meta_t *metas, int64_t *results);

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_TENSOR_H */

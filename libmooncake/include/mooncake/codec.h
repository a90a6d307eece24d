/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file codec.h
 * @brief The typed-ragged layout of structured non-tensor fields.
 *
 * A DataProto's non-tensor field of numeric rows of different lengths
 * (token ids, per-row arrays) is stored by mooncake.structured_object_store
 * in upstream Mooncake's "typed_ragged" layout: five arrays, each its own
 * store payload (docs/structured.md, "Codecs"):
 *
 * | payload | type              | length          | meaning                         |
 * |---------|-------------------|-----------------|---------------------------------|
 * | data    | the element type  | total elements  | every row's elements, in order  |
 * | offsets | int64             | rows + 1        | element offset of row i; [0]=0  |
 * | shapes  | int64             | rows x width    | row i's shape, zero padded      |
 * | ndims   | int16             | rows            | dimensions of row i             |
 * | nulls   | bool (one byte)   | rows            | 1 for a null row                |
 *
 * width = max(1, the largest ndim).  A null row has no elements, ndim 0
 * and a zero shape; a 0-d row has one element and ndim 0.
 *
 * Building this from thousands of rows, or checking and slicing it on the
 * way back, is per-row work that an interpreter does slowly; these
 * functions do it in one pass over plain C descriptors.  Pure memory
 * work: no store, no allocation besides mc_fastcopy_gather()'s helper
 * threads, thread-safe.  Errors set mc_last_error_detail().
 */
#ifndef MOONCAKE_CODEC_H
#define MOONCAKE_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/visibility.h>
#include <mooncake/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions a row may have (numpy's limit). @since 0.2 */
#define MC_CODEC_MAX_NDIM 64

/**
 * One row of a typed-ragged column, as the caller holds it.
 * @since 0.2
 */
typedef struct mc_codec_row {
    /** The row's elements in C order; may be NULL for a null row or a row
     *  of 0 bytes. */
    const void *base;
    /** Bytes at @p base: the product of @p shape times the element size
     *  (0 for a null row). */
    size_t nbytes;
    /** Its dimensions, 0..MC_CODEC_MAX_NDIM (0 for a scalar or a null row). */
    uint32_t ndim;
    /** Nonzero: a null row (None); base, nbytes and ndim must then be 0. */
    uint8_t is_null;
    /** The first @p ndim entries are the row's shape (each >= 0). */
    const int64_t *shape;
} mc_codec_row_t;

/**
 * @brief The sizes mc_codec_ragged_pack() needs.
 *
 * Checks every row (its bytes must equal the product of its shape times
 * @p itemsize; a null row has no bytes and no dimensions).
 *
 * @param rows        the rows; may be NULL when @p n is 0
 * @param n           number of rows
 * @param itemsize    bytes per element (> 0)
 * @param elems_p     total elements of all rows
 * @param max_ndim_p  the largest ndim (0 when every row is null or 0-d)
 * @return MC_OK; MC_INVALID_PARAMS (a detail names the row) for a bad row,
 *         a zero itemsize, or sizes that overflow.
 * @since 0.2
 */
MC_API mc_status_t mc_codec_ragged_measure(const mc_codec_row_t *rows, size_t n,
                                           size_t itemsize, size_t *elems_p,
                                           uint32_t *max_ndim_p);

/**
 * @brief Lay rows out in the typed-ragged layout.
 *
 * Writes data (the rows back to back, by mc_fastcopy_gather() with up to
 * @p nthreads threads), offsets (n + 1), shapes (n x @p width, zero
 * padded), ndims and nulls (n each).  The caller sizes the outputs with
 * mc_codec_ragged_measure(); nothing is written unless every check passes.
 *
 * @param rows       the rows (as for mc_codec_ragged_measure())
 * @param n          number of rows
 * @param itemsize   bytes per element
 * @param data_out   total elements x @p itemsize bytes, or more
 * @param data_size  bytes available at @p data_out
 * @param offsets_out n + 1 int64 entries
 * @param shapes_out  n x @p width int64 entries
 * @param width      entries per row of @p shapes_out: at least the largest
 *                   ndim and at least 1
 * @param ndims_out  n int16 entries
 * @param nulls_out  n bytes (0 or 1)
 * @param nthreads   threads for the data copy (0 is taken as 1)
 * @return MC_OK; MC_INVALID_PARAMS for a bad row, a NULL output, a width
 *         below the largest ndim or @p data_size too small.
 * @since 0.2
 */
MC_API mc_status_t mc_codec_ragged_pack(const mc_codec_row_t *rows, size_t n, size_t itemsize,
                                        void *data_out, size_t data_size,
                                        int64_t *offsets_out, int64_t *shapes_out,
                                        size_t width, int16_t *ndims_out, uint8_t *nulls_out,
                                        unsigned nthreads);

/**
 * @brief The typed-ragged layout of rows without copying their data.
 *
 * Writes what mc_codec_ragged_pack() writes except the data: offsets
 * (n + 1), shapes (n x @p width, zero padded), ndims and nulls (n each).
 * For a writer that sends the rows from their own memory instead of one
 * packed copy (mc_store_batch_put_parts() with the rows as the parts of
 * the data object): the stored bytes are the same as packing would give.
 * Nothing is written unless every check passes.
 *
 * @param rows        the rows (as for mc_codec_ragged_measure())
 * @param n           number of rows
 * @param itemsize    bytes per element
 * @param offsets_out n + 1 int64 entries
 * @param shapes_out  n x @p width int64 entries
 * @param width       entries per row of @p shapes_out: at least the
 *                    largest ndim and at least 1
 * @param ndims_out   n int16 entries
 * @param nulls_out   n bytes (0 or 1)
 * @param elems_p     total elements of all rows (may be NULL)
 * @return MC_OK; MC_INVALID_PARAMS for a bad row, a NULL output or a
 *         width below the largest ndim.
 * @since 0.2
 */
MC_API mc_status_t mc_codec_ragged_describe(const mc_codec_row_t *rows, size_t n,
                                            size_t itemsize, int64_t *offsets_out,
                                            int64_t *shapes_out, size_t width,
                                            int16_t *ndims_out, uint8_t *nulls_out,
                                            size_t *elems_p);

/**
 * @brief Check a stored typed-ragged layout before it is decoded.
 *
 * The layout may come from another process, or be corrupt: offsets must
 * start at 0, never decrease and end at @p data_elems; each ndim must lie
 * in [0, @p width]; a null row must have no elements; every other row's
 * shape must have exactly offsets[i+1] - offsets[i] elements.
 *
 * @return MC_OK; MC_INVALID_PARAMS naming the first bad row otherwise.
 * @since 0.2
 */
MC_API mc_status_t mc_codec_ragged_check(const int64_t *offsets, const int64_t *shapes,
                                         size_t width, const int16_t *ndims,
                                         const uint8_t *nulls, size_t n, size_t data_elems);

/**
 * @brief The data ranges of selected rows, and their offsets once packed.
 *
 * For rows @p idx (in output order, repeats allowed) of a layout with
 * @p n rows, writes the element runs to fetch -- (first element, count)
 * pairs, consecutive rows that are contiguous in the data merged into one
 * run -- and the offsets of the selected rows laid back to back
 * (@p nidx + 1 entries, starting at 0).  A reader fetches each run and
 * concatenates them in order: that is the selected rows' data.
 *
 * @param offsets      the stored offsets (n + 1, checked)
 * @param n            rows stored
 * @param idx          the selected rows (each < @p n)
 * @param nidx         how many
 * @param runs_out     2 x @p nidx int64 entries: (first element, count) pairs
 * @param nruns_p      runs written
 * @param offsets_out  @p nidx + 1 int64 entries
 * @return MC_OK; MC_INVALID_PARAMS for an index out of range or offsets
 *         that decrease.
 * @since 0.2
 */
MC_API mc_status_t mc_codec_ragged_select(const int64_t *offsets, size_t n, const int64_t *idx,
                                          size_t nidx, int64_t *runs_out, size_t *nruns_p,
                                          int64_t *offsets_out);

/**
 * @brief Check the offsets of a stored blob layout before it is decoded.
 *
 * The byte-string codecs (bytes_ragged, utf8_ragged, json_ragged,
 * msgpack_ragged, media_bytes) store a column as three payloads: data
 * (every row's bytes, back to back), offsets (int64, rows + 1: byte
 * offset of row i) and nulls (one byte per row).  Offsets from another
 * process, or corrupt ones, must start at 0, never decrease and end at
 * @p data_bytes before a reader slices the data with them.  A layout of
 * no rows passes whatever its single offset says: nothing is sliced.
 *
 * @param offsets     n + 1 entries (may be NULL when @p n is 0)
 * @param n           rows
 * @param data_bytes  bytes of the data payload
 * @return MC_OK; MC_INVALID_PARAMS naming the first bad offset otherwise
 *         (the detail starts with "ragged offsets do not match the data").
 * @since 0.2
 */
MC_API mc_status_t mc_codec_blob_check(const int64_t *offsets, size_t n, size_t data_bytes);

/* ---- the JSON documents of a structured object ----------------------------- */

/** Most keys mc_codec_stage_json() names for the members of one object. @since 0.2 */
#define MC_CODEC_MAX_KEYS (1 << 20)

/**
 * How a member of a structured object is described (mc_codec_member_t).
 * @since 0.2
 */
typedef enum mc_codec_member_kind {
    /** An array: metadata {"encoding":"ndarray","dtype":D,"shape":S}; its
     *  bytes may be cut into chunks. */
    MC_CODEC_MEMBER_NDARRAY = 0,
    /** Raw bytes: metadata {"encoding":"bytes"}; may be cut into chunks. */
    MC_CODEC_MEMBER_BYTES = 1,
    /** A tensor object (docs/tensor.md: its header, then its data), always
     *  one key: metadata {"encoding":"torch_tensor","dtype":D,"shape":S,
     *  "element_size":E}; the manifest's entry adds "kind":"tensor", the
     *  dtype, the shape and "metadata_bytes" (the header's size). */
    MC_CODEC_MEMBER_TENSOR = 2,
} mc_codec_member_kind_t;

/**
 * One member (payload) of a structured object, for mc_codec_stage_json().
 * Strings are UTF-8 and need no terminating NUL.
 * @since 0.2
 */
typedef struct mc_codec_member {
    /** The member's name (at least one byte; no '/' and no control
     *  character: it ends the member's key). */
    const char *name;
    /** Bytes at @p name. */
    size_t name_len;
    /** Bytes of the payload (a tensor object's header included). */
    uint64_t nbytes;
    /** A mc_codec_member_kind_t. */
    uint32_t kind;
    /** NDARRAY and TENSOR: the element type as the metadata names it
     *  (numpy's dtype.str, "<i4"; a torch dtype, "torch.float32");
     *  ignored for BYTES. */
    const char *dtype;
    /** Bytes at @p dtype. */
    size_t dtype_len;
    /** NDARRAY and TENSOR: dimensions, 0..MC_CODEC_MAX_NDIM. */
    uint32_t ndim;
    /** NDARRAY and TENSOR: the @p ndim dimensions (each >= 0). */
    const int64_t *shape;
    /** TENSOR: bytes per element (the metadata's "element_size"). */
    uint32_t element_size;
    /** TENSOR: bytes of the tensor object's header (the manifest's
     *  "metadata_bytes"). */
    uint32_t header_bytes;
} mc_codec_member_t;

/**
 * One key of a structured object and the payload bytes it holds
 * (mc_codec_stage_json()).
 * @since 0.2
 */
typedef struct mc_codec_chunk {
    /** Index of the member in the caller's list, or the member count for
     *  the metadata payload. */
    size_t member;
    /** First byte of the payload this key holds. */
    uint64_t offset;
    /** Bytes this key holds (> 0). */
    uint64_t size;
    /** Where the key starts in mc_codec_stage_out_t.keys. */
    size_t key_offset;
    /** Bytes of the key (a NUL follows it). */
    size_t key_len;
} mc_codec_chunk_t;

/**
 * The outputs of mc_codec_stage_json(): caller-owned buffers and their
 * capacities in, the sizes needed out.
 * @since 0.2
 */
typedef struct mc_codec_stage_out {
    /** The metadata payload's JSON (may be NULL when @p meta_cap is 0). */
    char *meta;
    /** Bytes available at @p meta. */
    size_t meta_cap;
    /** Out: bytes of the metadata JSON. */
    size_t meta_len;
    /** The manifest's JSON (may be NULL when @p manifest_cap is 0). */
    char *manifest;
    /** Bytes available at @p manifest. */
    size_t manifest_cap;
    /** Out: bytes of the manifest JSON. */
    size_t manifest_len;
    /** Every key, each followed by a NUL (may be NULL when @p keys_cap is 0). */
    char *keys;
    /** Bytes available at @p keys. */
    size_t keys_cap;
    /** Out: bytes of the keys with their NULs. */
    size_t keys_len;
    /** One entry per key, in write order: the metadata's chunks, then each
     *  member's (may be NULL when @p chunks_cap is 0). */
    mc_codec_chunk_t *chunks;
    /** Entries available at @p chunks. */
    size_t chunks_cap;
    /** Out: keys (entries needed). */
    size_t nchunks;
} mc_codec_stage_out_t;

/**
 * @brief The metadata and manifest JSON of a structured object, and its keys.
 *
 * What mooncake.structured_object_store writes for a structured object
 * (docs/structured.md): the metadata payload -- the caller's metadata
 * document @p meta_head with "__mooncake_structured_fields__" appended,
 * each member's description in order -- and the manifest {"version",
 * "layout":"bundle", "object_id", "meta", "buffers"}, each payload's key,
 * size and chunks.  Compact JSON (no spaces), byte for byte what Python's
 * json module writes with separators (",", ":"): the metadata with
 * ensure_ascii off, the manifest with it on (non-ASCII as \\uXXXX).  The
 * keys are @p prefix "/" @p object_id "/meta" and ".../buffer/<name>";
 * a payload of more than @p chunk_bytes goes in chunks ".../chunk/<i>" of
 * at most @p chunk_bytes each (a tensor object always in one key), an
 * empty payload in none.
 *
 * Every size is set in @p out whatever the capacities; the outputs are
 * complete only when the function returns MC_OK.
 *
 * @param prefix         the key prefix (UTF-8)
 * @param prefix_len     bytes at @p prefix
 * @param object_id      the object's id ("<partition>/<hex id>", UTF-8)
 * @param object_id_len  bytes at @p object_id
 * @param meta_head      the caller's metadata document as compact JSON: an
 *                       object of at least one entry ("{...}"), copied as is
 * @param meta_head_len  bytes at @p meta_head
 * @param members        the members, in order (may be NULL when @p n is 0)
 * @param n              number of members
 * @param chunk_bytes    most bytes a key holds (> 0)
 * @param version        the manifest's "version"
 * @param out            the output buffers; the sizes are written back
 * @return MC_OK; MC_BUFFER_OVERFLOW when an output is too small (the sizes
 *         needed are in @p out); MC_INVALID_PARAMS (with a detail) for a
 *         string that is not UTF-8, a name with '/' or a control
 *         character, an unknown kind, a bad shape, a @p meta_head that is
 *         not an object of at least one entry, a zero @p chunk_bytes,
 *         members needing more than MC_CODEC_MAX_KEYS keys, or sizes that
 *         overflow.
 * @since 0.2
 */
MC_API mc_status_t mc_codec_stage_json(const char *prefix, size_t prefix_len,
                                       const char *object_id, size_t object_id_len,
                                       const char *meta_head, size_t meta_head_len,
                                       const mc_codec_member_t *members, size_t n,
                                       uint64_t chunk_bytes, uint32_t version,
                                       mc_codec_stage_out_t *out);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_CODEC_H */

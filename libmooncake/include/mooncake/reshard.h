/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file reshard.h
 * @brief The core of the model-weight resharding planner: box intersection
 *        and coalesced ranged reads.
 *
 * mooncake.reshard.weight's planner (docs/weights.md, "Planning") moves a
 * tensor's fragments from one parallel layout to another.  Every fragment
 * is the C-order bytes of an N-D box of a row-major tensor; moving data is
 * intersecting each target box with the source boxes chosen for it and
 * describing each overlap as byte runs.  For a model of thousands of
 * tensors that is hundreds of thousands of small integer computations, which
 * an interpreter does slowly; these functions do them in one call over
 * columns of plain integers.  The policy (which source boxes a target may
 * read, the identity and catalogue checks) stays in Python; this is the
 * arithmetic.
 *
 * Geometry, as upstream's planner defines it.  A fragment of @c ndim
 * dimensions at @c offset with @c shape and element size @c item has the
 * C-order byte strides stride[d] = item * shape[d+1] * ... * shape[ndim-1].
 * The overlap of a source and a target box becomes one region:
 *
 * - @c source_base / @c target_base: the byte offset of the overlap's first
 *   element from each fragment's start;
 * - @c inner: the bytes of one contiguous run: the overlap's last extent
 *   times @c item, absorbing leading dimensions while both fragments'
 *   stride in that dimension equals the run so far;
 * - @c nloops: the remaining leading dimensions (extents of 1 kept), whose
 *   extents are the loop counts and whose strides are each fragment's.
 *
 * Pure memory work: no store, no threads, thread-safe.  Errors set
 * mc_last_error_detail().
 */
#ifndef MOONCAKE_RESHARD_H
#define MOONCAKE_RESHARD_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/visibility.h>
#include <mooncake/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions a fragment may have. @since 0.2 */
#define MC_RESHARD_MAX_NDIM 64

/**
 * Columns of fragments.  Fragment i has @c ndims[i] dimensions; its offset
 * and shape are the first @c ndims[i] entries of row i of @c offsets and
 * @c shapes (rows of @c width entries; the rest of a row is ignored).
 * Offsets are >= 0, extents >= 1.
 * @since 0.2
 */
typedef struct mc_reshard_frags {
    /** Number of fragments. */
    size_t n;
    /** Entries per row of @p offsets and @p shapes (>= every ndim). */
    size_t width;
    /** n x width global offsets. */
    const int64_t *offsets;
    /** n x width local shapes. */
    const int64_t *shapes;
    /** Dimensions of each fragment (1..MC_RESHARD_MAX_NDIM). */
    const int64_t *ndims;
    /** Sort rank of each fragment's id (operations are ordered by it). */
    const int64_t *order;
} mc_reshard_frags_t;

/**
 * What mc_reshard_plan_create() plans.
 * @since 0.2
 */
typedef struct mc_reshard_plan_params {
    /** Reserved; must be 0. */
    uint64_t field_mask;
    /** The target fragments, in planning order (limits and coverage are
     *  checked in this order, so the first failure is the reference's). */
    mc_reshard_frags_t targets;
    /** Element size of each target fragment's tensor (>= 1). */
    const int64_t *target_itemsizes;
    /** Candidate set of each target fragment (index < @p n_sets). */
    const int64_t *target_sets;
    /** The source fragments; a source has its target's ndim. */
    mc_reshard_frags_t sources;
    /** Number of candidate sets. */
    size_t n_sets;
    /** Set s lists the sources set_members[set_starts[s] .. set_starts[s+1]),
     *  in the order they are tried. */
    const int64_t *set_starts;
    /** Source indices (< sources.n). */
    const int64_t *set_members;
    /** Upstream's PlanningLimits (each >= 1). */
    uint64_t max_transfer_regions;
    uint64_t max_segments_per_region;
    uint64_t max_total_lowered_segments;
} mc_reshard_plan_params_t;

/** Why planning refused (mc_reshard_plan_error_t::kind). @since 0.2 */
typedef enum mc_reshard_refusal {
    MC_RESHARD_OK = 0,
    /** Bad input (a detail says which field); not a planning outcome. */
    MC_RESHARD_BAD_INPUT = 1,
    /** The regions of target @c index do not cover it exactly. */
    MC_RESHARD_NOT_COVERED = 2,
    /** More than @c limit regions. */
    MC_RESHARD_TOO_MANY_REGIONS = 3,
    /** A region of @c value segments, more than @c limit. */
    MC_RESHARD_REGION_SEGMENTS = 4,
    /** The running total of segments reached @c value, more than @c limit. */
    MC_RESHARD_TOTAL_SEGMENTS = 5,
} mc_reshard_refusal_t;

/** The first refusal, as upstream's planner would raise it. @since 0.2 */
typedef struct mc_reshard_plan_error {
    /** An mc_reshard_refusal_t. */
    int64_t kind;
    /** The target fragment concerned (planning order). */
    int64_t index;
    /** The count that exceeded @c limit. */
    uint64_t value;
    /** The limit exceeded. */
    uint64_t limit;
} mc_reshard_plan_error_t;

/** A table of int64 columns owned by the library. @since 0.2 */
typedef struct mc_reshard_table *mc_reshard_table_h;

/**
 * Columns of a plan table (mc_reshard_plan_create()), one row per region,
 * rows in upstream's operation order: by target order, target base,
 * source order, source base.
 * @since 0.2
 */
typedef enum mc_reshard_plan_column {
    MC_RESHARD_COL_TARGET = 0,      /**< target fragment (planning order) */
    MC_RESHARD_COL_SOURCE,          /**< source fragment */
    MC_RESHARD_COL_SOURCE_BASE,     /**< bytes from the source fragment's start */
    MC_RESHARD_COL_TARGET_BASE,     /**< bytes from the target fragment's start */
    MC_RESHARD_COL_INNER,           /**< bytes of one contiguous run */
    MC_RESHARD_COL_NLOOPS,          /**< leading loop dimensions */
    MC_RESHARD_COL_SEGMENTS,        /**< runs: the product of the loop counts */
    MC_RESHARD_COL_OVERLAP_OFFSET,  /**< rows x width: the overlap's offset */
    MC_RESHARD_COL_OVERLAP_SHAPE,   /**< rows x width: the overlap's shape */
    MC_RESHARD_PLAN_COLUMNS
} mc_reshard_plan_column_t;

/**
 * Columns of a reads table (mc_reshard_plan_lower()), one row per ranged
 * read, in plan order.
 * @since 0.2
 */
typedef enum mc_reshard_reads_column {
    MC_RESHARD_READ_KEY = 0,    /**< object (the source's key index) */
    MC_RESHARD_READ_SRC,        /**< byte offset in the object */
    MC_RESHARD_READ_LENGTH,     /**< bytes */
    MC_RESHARD_READ_TARGET,     /**< target fragment (planning order) */
    MC_RESHARD_READ_DST,        /**< byte offset in the target fragment */
    MC_RESHARD_READ_COLUMNS
} mc_reshard_reads_column_t;

/**
 * Columns of a blocks table (mc_reshard_plan_lower_blocks()), one row per
 * strided block, in plan order: the first five as a reads table's (the
 * length is one row's), then the block's rows and its strides (row i
 * copies @c length bytes from @c src + i * src_stride to @c dst + i *
 * dst_stride; both strides 0 for a block of one row, otherwise each at
 * least @c length).
 * @since 0.2 (MOONCAKE_1.23)
 */
typedef enum mc_reshard_blocks_column {
    MC_RESHARD_BLOCK_ROWS = MC_RESHARD_READ_COLUMNS, /**< rows (>= 1) */
    MC_RESHARD_BLOCK_SRC_STRIDE,                     /**< bytes from row to row in the object */
    MC_RESHARD_BLOCK_DST_STRIDE,                     /**< ... in the target fragment */
    MC_RESHARD_BLOCK_COLUMNS
} mc_reshard_blocks_column_t;

/**
 * @brief Intersect every target fragment with its candidate sources.
 *
 * Each overlap of a target with a member of its candidate set becomes one
 * region.  In planning order, per target: a region of more than
 * @c max_segments_per_region segments, a running total of more than
 * @c max_total_lowered_segments, or more than @c max_transfer_regions
 * regions refuses; after its candidates, a target whose overlaps' volume
 * differs from its own refuses (the candidates of one set must not
 * overlap each other; the caller's manifests guarantee it).
 *
 * @param params   the fragments, sets and limits
 * @param table_p  out: the plan table (mc_reshard_table_destroy()); written
 *                 only on MC_OK
 * @param error_p  out (may be NULL): the refusal; kind MC_RESHARD_OK on
 *                 success
 * @return MC_OK; MC_INVALID_PARAMS for bad input or a refusal (the
 *         detail names it); MC_INTERNAL_ERROR when memory runs out.
 * @since 0.2
 */
MC_API mc_status_t mc_reshard_plan_create(const mc_reshard_plan_params_t *params,
                                          mc_reshard_table_h *table_p,
                                          mc_reshard_plan_error_t *error_p);

/**
 * @brief Lower a plan's regions from stored sources to ranged reads.
 *
 * Every selected region's runs (the last loop dimension fastest) become
 * (object, offset, length, target, destination offset) reads: source
 * fragment s lies in object @p source_keys[s] from byte
 * @p source_object_offsets[s].  A read that continues the previous one in
 * the same object and the same target fragment on both sides is merged into
 * it, so contiguous runs cost one read.
 *
 * @param plan                   from mc_reshard_plan_create() with the same
 *                               @p params
 * @param params                 the parameters the plan was made with
 * @param source_keys            per source: its object's index (>= 0)
 * @param source_object_offsets  per source: its first byte in the object
 * @param target_selected        per target (planning order): nonzero to
 *                               lower its regions; NULL for all
 * @param table_p                out: the reads table; written only on MC_OK
 * @return MC_OK; MC_INVALID_PARAMS for a NULL argument or a negative key or
 *         offset; MC_INTERNAL_ERROR when memory runs out.
 * @since 0.2
 */
MC_API mc_status_t mc_reshard_plan_lower(mc_reshard_table_h plan,
                                         const mc_reshard_plan_params_t *params,
                                         const int64_t *source_keys,
                                         const int64_t *source_object_offsets,
                                         const uint8_t *target_selected,
                                         mc_reshard_table_h *table_p);

/**
 * @brief Lower a plan's regions from stored sources to strided blocks.
 *
 * As mc_reshard_plan_lower(), with the reads it would give that follow
 * each other in one object and one target fragment, with one length and
 * at constant source and destination strides no shorter than a row (a
 * region's rows), as one block: the rows of a region are not expanded.
 * The blocks' rows, in order, are the bytes of mc_reshard_plan_lower()'s
 * reads.
 *
 * @return as mc_reshard_plan_lower(); @p table_p gets a blocks table.
 * @since 0.2 (MOONCAKE_1.23)
 */
MC_API mc_status_t mc_reshard_plan_lower_blocks(mc_reshard_table_h plan,
                                                const mc_reshard_plan_params_t *params,
                                                const int64_t *source_keys,
                                                const int64_t *source_object_offsets,
                                                const uint8_t *target_selected,
                                                mc_reshard_table_h *table_p);

/**
 * @brief Prove that groups of boxes tile their tensors.
 *
 * The planner's coverage rule (mooncake/reshard/weight/planner.py:
 * a target's fragments, grouped per tensor, owner and DP rank, must tile
 * the tensor) decided over columns: rows are boxes, sorted by group.
 * Group g is proven (@p ok[g] = 1) when its distinct boxes -- identical
 * boxes count once -- each lie inside their tensor's extent, their
 * volumes add up to the extent's, and along every dimension the distinct
 * intervals (offset, extent) they use chain from 0 to the tensor's extent
 * without a gap or an overlap.  Two distinct boxes then differ in some
 * dimension where their intervals are disjoint, so the boxes tile the
 * tensor exactly.  Anything else is 0, "not proven": an irregular tiling
 * (bricks), a gap, an overlap, a box outside, an overflowing volume, or a
 * group without rows; the caller decides those tensors by the exact,
 * slower rule.  A dimension a box lacks is given as offset 0, extent 1.
 *
 * @param n         rows (boxes)
 * @param width     entries per row of the three box columns (1..MC_RESHARD_MAX_NDIM)
 * @param group     per row its group, ascending, each below @p n_groups
 * @param offsets   n x width offsets
 * @param shapes    n x width extents of the boxes
 * @param extents   n x width extents of each row's tensor (the same for the
 *                  rows of a group; the group's first row's are used)
 * @param n_groups  entries of @p ok
 * @param ok        out: per group 1 (proven) or 0; written only on MC_OK
 * @return MC_OK; MC_INVALID_PARAMS for a NULL column, a width out of range
 *         or a group column not sorted or out of range (the detail names
 *         the row); MC_INTERNAL_ERROR when memory runs out.
 * @since 0.2
 */
MC_API mc_status_t mc_reshard_boxes_tile(size_t n, size_t width, const int64_t *group,
                                         const int64_t *offsets, const int64_t *shapes,
                                         const int64_t *extents, size_t n_groups, uint8_t *ok);

/** @brief Rows of a table (0 for NULL). @since 0.2 */
MC_API size_t mc_reshard_table_rows(mc_reshard_table_h table);

/** @brief Entries per row of the table's wide columns (the plan's width). @since 0.2 */
MC_API size_t mc_reshard_table_width(mc_reshard_table_h table);

/**
 * @brief One column: rows entries (rows x width for the overlap columns),
 *        valid until mc_reshard_table_destroy(); NULL for an unknown column.
 * @since 0.2
 */
MC_API const int64_t *mc_reshard_table_column(mc_reshard_table_h table, int column);

/** @brief Free a table; NULL is ignored. @since 0.2 */
MC_API void mc_reshard_table_destroy(mc_reshard_table_h table);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_RESHARD_H */

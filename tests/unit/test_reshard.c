/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The resharding planner core (include/mooncake/reshard.h): upstream's
 * worked region example gives its documented bases, run and loops; runs
 * that continue each other in one object merge into one read and others do
 * not; regions come out in upstream's operation order whatever the planning
 * order; each refusal (gap, segments per region, total segments, regions)
 * names the first target and the numbers the reference planner reports;
 * bad input (an object offset that would overflow included) is refused with
 * a detail; random tilings of random 1-3-D tensors, executed byte by
 * byte from the lowered reads, rebuild every target exactly, and so do the
 * same plans lowered to strided blocks (a region's rows one block); and the
 * coverage proof (mc_reshard_boxes_tile) proves grids and nothing else.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/reshard.h>

#include "check_suites.h"

#define W 4

/* A column set of up to 64 fragments of width W. */
typedef struct frags {
    int64_t off[64 * W], shape[64 * W], ndim[64], order[64];
    size_t n;
} frags_t;

static void add(frags_t *f, int64_t nd, const int64_t *off, const int64_t *shape)
{
    for (int64_t d = 0; d < nd; d++) {
        f->off[f->n * W + d]   = off[d];
        f->shape[f->n * W + d] = shape[d];
    }
    f->ndim[f->n]  = nd;
    f->order[f->n] = (int64_t)f->n;
    f->n++;
}

static void bind(mc_reshard_frags_t *c, frags_t *f)
{
    *c = (mc_reshard_frags_t){f->n, W, f->off, f->shape, f->ndim, f->order};
}

/* Params for targets that all read every source (one candidate set). */
typedef struct setup {
    frags_t t, s;
    int64_t items[64], sets[64], starts[2], members[64];
    mc_reshard_plan_params_t p;
} setup_t;

static void finish(setup_t *x, int64_t item)
{
    for (size_t i = 0; i < x->t.n; i++) {
        x->items[i] = item;
        x->sets[i]  = 0;
    }
    for (size_t i = 0; i < x->s.n; i++)
        x->members[i] = (int64_t)i;
    x->starts[0] = 0;
    x->starts[1] = (int64_t)x->s.n;
    memset(&x->p, 0, sizeof(x->p));
    bind(&x->p.targets, &x->t);
    bind(&x->p.sources, &x->s);
    x->p.target_itemsizes           = x->items;
    x->p.target_sets                = x->sets;
    x->p.n_sets                     = 1;
    x->p.set_starts                 = x->starts;
    x->p.set_members                = x->members;
    x->p.max_transfer_regions       = 1000000;
    x->p.max_segments_per_region    = 1000000;
    x->p.max_total_lowered_segments = 10000000;
}

static int64_t col(mc_reshard_table_h t, int c, size_t i)
{
    return mc_reshard_table_column(t, c)[i];
}

START_TEST(test_worked_example)
{
    /* fact sheet §11: source (2,6,8)@(1,0,0), target (4,3,8)@(0,2,0), item 2 */
    setup_t *x = calloc(1, sizeof(*x));
    const int64_t so[3] = {1, 0, 0}, ss[3] = {2, 6, 8}, to[3] = {0, 2, 0}, ts[3] = {4, 3, 8};
    mc_reshard_table_h plan = NULL, reads = NULL;
    mc_reshard_plan_error_t err;

    /* rows 0 and 3 of the target come from two more sources */
    const int64_t o0[3] = {0, 0, 0}, o3[3] = {3, 0, 0}, s1[3] = {1, 6, 8};

    add(&x->s, 3, so, ss);
    add(&x->s, 3, o0, s1);
    add(&x->s, 3, o3, s1);
    add(&x->t, 3, to, ts);
    finish(x, 2);
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, &err));
    ck_assert_msg(err.kind == MC_RESHARD_OK, "a plan should report no refusal");
    ck_assert_msg(mc_reshard_table_rows(plan) == 3, "three overlaps should be three regions");
    ck_assert_msg(col(plan, MC_RESHARD_COL_SOURCE, 1) == 0, "by target base, the example's "
                  "region comes second");
    ck_assert_msg(col(plan, MC_RESHARD_COL_SOURCE_BASE, 1) == 32 &&
                  col(plan, MC_RESHARD_COL_TARGET_BASE, 1) == 48,
                  "the bases should be 32 and 48 bytes");
    ck_assert_msg(col(plan, MC_RESHARD_COL_INNER, 1) == 48, "the run should absorb the "
                  "middle dimension: 48 bytes");
    ck_assert_msg(col(plan, MC_RESHARD_COL_NLOOPS, 1) == 1 &&
                  col(plan, MC_RESHARD_COL_SEGMENTS, 1) == 2, "one loop of 2 should remain");
    const int64_t *ov = mc_reshard_table_column(plan, MC_RESHARD_COL_OVERLAP_OFFSET) + W;
    const int64_t *os = mc_reshard_table_column(plan, MC_RESHARD_COL_OVERLAP_SHAPE) + W;
    ck_assert_msg(ov[0] == 1 && ov[1] == 2 && ov[2] == 0 && os[0] == 2 && os[1] == 3 &&
                  os[2] == 8, "the overlap should be (2,3,8)@(1,2,0)");
    ck_assert_msg(col(plan, MC_RESHARD_COL_NLOOPS, 0) == 1 &&
                  col(plan, MC_RESHARD_COL_SEGMENTS, 0) == 1, "extents of 1 stay loops");
    ck_assert_msg(mc_reshard_table_column(plan, 99) == NULL, "an unknown column is NULL");

    const int64_t keys[3] = {7, 8, 9}, offs[3] = {1000, 0, 0};
    ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, keys, offs, NULL, &reads));
    ck_assert_msg(mc_reshard_table_rows(reads) == 4, "the example's two runs are apart in the "
                  "source: 1 + 2 + 1 reads, got %zu", mc_reshard_table_rows(reads));
    ck_assert_msg(col(reads, MC_RESHARD_READ_KEY, 1) == 7 &&
                  col(reads, MC_RESHARD_READ_SRC, 1) == 1032 &&
                  col(reads, MC_RESHARD_READ_SRC, 2) == 1128 &&
                  col(reads, MC_RESHARD_READ_DST, 1) == 48 &&
                  col(reads, MC_RESHARD_READ_DST, 2) == 96 &&
                  col(reads, MC_RESHARD_READ_LENGTH, 2) == 48,
                  "the reads should start at the object offset plus base plus i*stride");
    mc_reshard_table_destroy(reads);
    mc_reshard_table_destroy(plan);
    mc_reshard_table_destroy(NULL);
    free(x);
}
END_TEST

START_TEST(test_coalescing)
{
    /* 1-D tensor of 8 x 4-byte elements: two sources [0,4) and [4,8), one
     * target [0,8).  In one object back to back they are one read; in two
     * objects, two. */
    setup_t *x = calloc(1, sizeof(*x));
    const int64_t o0[1] = {0}, o4[1] = {4}, n4[1] = {4}, n8[1] = {8};
    mc_reshard_table_h plan = NULL, reads = NULL;

    add(&x->s, 1, o0, n4);
    add(&x->s, 1, o4, n4);
    add(&x->t, 1, o0, n8);
    finish(x, 4);
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, NULL));
    ck_assert_msg(mc_reshard_table_rows(plan) == 2, "two sources make two regions");
    const int64_t same[2] = {3, 3}, packed[2] = {64, 80}, apart[2] = {3, 4};
    ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, same, packed, NULL, &reads));
    ck_assert_msg(mc_reshard_table_rows(reads) == 1 &&
                  col(reads, MC_RESHARD_READ_SRC, 0) == 64 &&
                  col(reads, MC_RESHARD_READ_LENGTH, 0) == 32,
                  "adjacent payloads in one object should merge into one 32-byte read");
    mc_reshard_table_destroy(reads);
    ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, apart, packed, NULL, &reads));
    ck_assert_msg(mc_reshard_table_rows(reads) == 2, "two objects are two reads");
    mc_reshard_table_destroy(reads);
    const uint8_t none[1] = {0};
    ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, same, packed, none, &reads));
    ck_assert_msg(mc_reshard_table_rows(reads) == 0, "an unselected target reads nothing");
    mc_reshard_table_destroy(reads);
    const int64_t negative[2] = {-1, 0}, huge[2] = {0, INT64_MAX - 8};
    ck_assert_status_eq(mc_reshard_plan_lower(plan, &x->p, negative, packed, NULL, &reads),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_reshard_plan_lower(plan, &x->p, same, huge, NULL, &reads),
                        MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "overflows") != NULL,
                  "an object offset whose fragment passes INT64_MAX is refused: %s",
                  mc_last_error_detail());
    mc_reshard_table_destroy(plan);
    free(x);
}
END_TEST

START_TEST(test_operation_order)
{
    /* (4,8) split on columns: sources (4,4)@(0,0) and (0,4); targets two
     * row halves, planned in the reverse of their id order. */
    setup_t *x = calloc(1, sizeof(*x));
    const int64_t a[2] = {0, 0}, b[2] = {0, 4}, c[2] = {2, 0}, s44[2] = {4, 4},
                  s28[2] = {2, 8};
    mc_reshard_table_h plan = NULL;

    add(&x->s, 2, b, s44); /* source 0 sorts after source 1 */
    add(&x->s, 2, a, s44);
    x->s.order[0] = 1;
    x->s.order[1] = 0;
    add(&x->t, 2, c, s28);
    add(&x->t, 2, a, s28);
    x->t.order[0] = 1;
    x->t.order[1] = 0;
    finish(x, 1);
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, NULL));
    ck_assert_msg(mc_reshard_table_rows(plan) == 4, "2 targets x 2 sources: 4 regions");
    const int64_t want_t[4] = {1, 1, 0, 0}, want_s[4] = {1, 0, 1, 0};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_msg(col(plan, MC_RESHARD_COL_TARGET, i) == want_t[i] &&
                      col(plan, MC_RESHARD_COL_SOURCE, i) == want_s[i],
                      "region %zu should be target %lld from source %lld", i,
                      (long long)want_t[i], (long long)want_s[i]);
        ck_assert_msg(col(plan, MC_RESHARD_COL_INNER, i) == 4 &&
                      col(plan, MC_RESHARD_COL_SEGMENTS, i) == 2,
                      "a column half of 2 rows is 2 runs of 4 bytes");
    }
    mc_reshard_table_destroy(plan);
    free(x);
}
END_TEST

START_TEST(test_refusals)
{
    setup_t *x = calloc(1, sizeof(*x));
    const int64_t a[2] = {0, 0}, b[2] = {0, 4}, s44[2] = {4, 4}, s48[2] = {4, 8};
    mc_reshard_table_h plan = NULL;
    mc_reshard_plan_error_t err;

    add(&x->s, 2, a, s44);          /* only the left half is there */
    add(&x->t, 2, a, s44);
    add(&x->t, 2, a, s48);
    finish(x, 2);
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(err.kind == MC_RESHARD_NOT_COVERED && err.index == 1 && err.value == 16 &&
                  err.limit == 32, "the second target is half covered: got kind %lld "
                  "index %lld", (long long)err.kind, (long long)err.index);
    ck_assert_msg(plan == NULL, "a refused plan writes no table");

    add(&x->s, 2, b, s44);
    finish(x, 2);
    x->p.max_segments_per_region = 3;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(err.kind == MC_RESHARD_REGION_SEGMENTS && err.index == 1 && err.value == 4 &&
                  err.limit == 3, "a column half of 4 rows is 4 segments, over 3");
    x->p.max_segments_per_region    = 1000;
    x->p.max_total_lowered_segments = 6;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(err.kind == MC_RESHARD_TOTAL_SEGMENTS && err.value == 9 && err.limit == 6,
                  "1 + 4 + 4 segments pass 6 at 9, got %llu", (unsigned long long)err.value);
    x->p.max_total_lowered_segments = 1000;
    x->p.max_transfer_regions       = 2;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(err.kind == MC_RESHARD_TOO_MANY_REGIONS && err.value == 3 && err.limit == 2,
                  "the third region passes a limit of 2");
    x->p.max_transfer_regions = 3;
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, &err));
    mc_reshard_table_destroy(plan);
    free(x);
}
END_TEST

START_TEST(test_bad_input)
{
    setup_t *x = calloc(1, sizeof(*x));
    const int64_t a[2] = {0, 0}, s44[2] = {4, 4};
    mc_reshard_table_h plan = NULL;
    mc_reshard_plan_error_t err;

    add(&x->s, 2, a, s44);
    add(&x->t, 2, a, s44);
    finish(x, 2);
    ck_assert_status_eq(mc_reshard_plan_create(NULL, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(err.kind == MC_RESHARD_BAD_INPUT, "NULL params are bad input");
    x->p.field_mask = 1;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "field_mask") != NULL,
                  "the detail should name field_mask: %s", mc_last_error_detail());
    x->p.field_mask = 0;
    x->t.shape[1] = 0;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(err.kind == MC_RESHARD_BAD_INPUT, "an extent of 0 is bad input");
    x->t.shape[1] = 4;
    x->sets[0] = 5;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "candidate set") != NULL,
                  "the detail should name the candidate set: %s", mc_last_error_detail());
    x->sets[0] = 0;
    x->t.ndim[0] = 5;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    x->t.ndim[0] = 2;
    x->p.max_transfer_regions = 0;
    ck_assert_status_eq(mc_reshard_plan_create(&x->p, &plan, &err), MC_INVALID_PARAMS);
    ck_assert_msg(plan == NULL, "bad input writes no table");
    free(x);
}
END_TEST

/* Cut [0, n) into 1..3 random pieces: starts in cuts[0..k), returns k. */
static int cut(int64_t n, int64_t *cuts, unsigned *seed)
{
    int k = 1;

    cuts[0] = 0;
    for (int64_t i = 1; i < n && k < 3; i++)
        if (rand_r(seed) % 3 == 0)
            cuts[k++] = i;
    return k;
}

/* A grid tiling of a tensor: every combination of per-dimension pieces. */
static void tile(frags_t *f, int64_t nd, const int64_t *gshape, unsigned *seed)
{
    int64_t cuts[3][3];
    int k[3] = {1, 1, 1}, idx[3] = {0, 0, 0};

    for (int64_t d = 0; d < nd; d++)
        k[d] = cut(gshape[d], cuts[d], seed);
    for (;;) {
        int64_t off[3], shape[3];
        for (int64_t d = 0; d < nd; d++) {
            off[d]   = cuts[d][idx[d]];
            shape[d] = (idx[d] + 1 < k[d] ? cuts[d][idx[d] + 1] : gshape[d]) - off[d];
        }
        add(f, nd, off, shape);
        int64_t d = nd - 1;
        while (d >= 0 && ++idx[d] == k[d])
            idx[d--] = 0;
        if (d < 0)
            return;
    }
}

/* Global linear index of the element at row-major position @p i of box f. */
static int64_t global_of(const frags_t *f, size_t b, int64_t i, int64_t nd,
                         const int64_t *gshape)
{
    int64_t g = 0, rem = i, pos[3];

    for (int64_t d = nd - 1; d >= 0; d--) {
        pos[d] = rem % f->shape[b * W + d];
        rem /= f->shape[b * W + d];
    }
    for (int64_t d = 0; d < nd; d++)
        g = g * gshape[d] + f->off[b * W + d] + pos[d];
    return g;
}

/* Execute a reads table (@p blocks 0) or a blocks table (1) from @p obj
 * into every target of @p x and compare element by element; the bytes
 * the table names, in all. */
static size_t rebuild_targets(const setup_t *x, mc_reshard_table_h reads, int blocks,
                              const unsigned char *obj, int64_t nd, const int64_t *gshape,
                              int64_t item, int round)
{
    size_t bytes = 0;

    for (size_t r = 0; r < mc_reshard_table_rows(reads); r++) {
        int64_t n = blocks ? col(reads, MC_RESHARD_BLOCK_ROWS, r) : 1;
        ck_assert_msg(n >= 1, "round %d: a block has %lld rows", round, (long long)n);
        if (blocks && (n > 1))
            ck_assert_msg(col(reads, MC_RESHARD_BLOCK_SRC_STRIDE, r) >=
                                  col(reads, MC_RESHARD_READ_LENGTH, r) &&
                              col(reads, MC_RESHARD_BLOCK_DST_STRIDE, r) >=
                                  col(reads, MC_RESHARD_READ_LENGTH, r),
                          "round %d: a block's rows overlap", round);
        if (blocks && (n == 1))
            ck_assert_msg(col(reads, MC_RESHARD_BLOCK_SRC_STRIDE, r) == 0 &&
                              col(reads, MC_RESHARD_BLOCK_DST_STRIDE, r) == 0,
                          "round %d: a one-row block has strides", round);
        bytes += (size_t)(n * col(reads, MC_RESHARD_READ_LENGTH, r));
    }
    for (size_t t = 0; t < x->t.n; t++) {
        int64_t v = 1;
        for (int64_t d = 0; d < nd; d++)
            v *= x->t.shape[t * W + d];
        unsigned char *buf = calloc((size_t)(v * item), 1);
        for (size_t r = 0; r < mc_reshard_table_rows(reads); r++) {
            if (col(reads, MC_RESHARD_READ_TARGET, r) != (int64_t)t)
                continue;
            int64_t n  = blocks ? col(reads, MC_RESHARD_BLOCK_ROWS, r) : 1;
            int64_t ss = blocks ? col(reads, MC_RESHARD_BLOCK_SRC_STRIDE, r) : 0;
            int64_t ds = blocks ? col(reads, MC_RESHARD_BLOCK_DST_STRIDE, r) : 0;
            for (int64_t k = 0; k < n; k++) {
                int64_t dst = col(reads, MC_RESHARD_READ_DST, r) + k * ds;
                int64_t len = col(reads, MC_RESHARD_READ_LENGTH, r);
                ck_assert_msg(dst >= 0 && dst + len <= v * item,
                              "round %d: a read leaves target %zu", round, t);
                memcpy(buf + dst, obj + col(reads, MC_RESHARD_READ_SRC, r) + k * ss,
                       (size_t)len);
            }
        }
        for (int64_t i = 0; i < v; i++)
            for (int64_t b = 0; b < item; b++)
                ck_assert_msg(buf[i * item + b] ==
                                  (unsigned char)(global_of(&x->t, t, i, nd, gshape) * 7 + b),
                              "round %d: target %zu element %lld differs (%s)", round, t,
                              (long long)i, blocks ? "blocks" : "reads");
        free(buf);
    }
    return bytes;
}

START_TEST(test_random_tilings_rebuild_targets)
{
    unsigned seed = 20260822;

    for (int round = 0; round < 300; round++) {
        setup_t *x = calloc(1, sizeof(*x));
        int64_t nd = 1 + rand_r(&seed) % 3, gshape[3], item = 1 + rand_r(&seed) % 3;
        mc_reshard_table_h plan = NULL, reads = NULL, blocks = NULL;

        for (int64_t d = 0; d < nd; d++)
            gshape[d] = 1 + rand_r(&seed) % 6;
        tile(&x->s, nd, gshape, &seed);
        tile(&x->t, nd, gshape, &seed);
        finish(x, item);
        ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, NULL));

        /* one object holding every source back to back; element = global index */
        int64_t objoff[64], keys[64], total = 0;
        for (size_t s = 0; s < x->s.n; s++) {
            int64_t v = 1;
            for (int64_t d = 0; d < nd; d++)
                v *= x->s.shape[s * W + d];
            keys[s]   = 0;
            objoff[s] = total * item;
            total += v;
        }
        unsigned char *obj = malloc((size_t)(total * item));
        for (size_t s = 0; s < x->s.n; s++) {
            int64_t v = 1;
            for (int64_t d = 0; d < nd; d++)
                v *= x->s.shape[s * W + d];
            for (int64_t i = 0; i < v; i++)
                for (int64_t b = 0; b < item; b++)
                    obj[objoff[s] + i * item + b] =
                        (unsigned char)(global_of(&x->s, s, i, nd, gshape) * 7 + b);
        }
        ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, keys, objoff, NULL, &reads));
        size_t nseg = 0;
        for (size_t i = 0; i < mc_reshard_table_rows(plan); i++)
            nseg += (size_t)col(plan, MC_RESHARD_COL_SEGMENTS, i);
        ck_assert_msg(mc_reshard_table_rows(reads) <= nseg, "merging never adds reads");
        size_t bytes = rebuild_targets(x, reads, 0, obj, nd, gshape, item, round);

        /* the same plan as strided blocks: the same bytes, no more blocks
         * than reads */
        ck_assert_status_ok(
            mc_reshard_plan_lower_blocks(plan, &x->p, keys, objoff, NULL, &blocks));
        ck_assert_msg(mc_reshard_table_rows(blocks) <= mc_reshard_table_rows(reads),
                      "round %d: %zu blocks for %zu reads", round,
                      mc_reshard_table_rows(blocks), mc_reshard_table_rows(reads));
        ck_assert_msg(rebuild_targets(x, blocks, 1, obj, nd, gshape, item, round) == bytes,
                      "round %d: the blocks should move the reads' bytes", round);
        free(obj);
        mc_reshard_table_destroy(blocks);
        mc_reshard_table_destroy(reads);
        mc_reshard_table_destroy(plan);
        free(x);
    }
}
END_TEST

START_TEST(test_lower_blocks)
{
    /* (4,8) x 2 bytes split on columns into two sources (4,4), each in an
     * object of its own; one target (4,8): each source's rows are one
     * block (4 rows of 8 bytes, src stride 8, dst stride 16) where the
     * reads are 8.  Split on rows instead, each source is one contiguous
     * read and one block of one row.  A 3-D target (2,2,4) from one
     * (2,2,2) source half: a block per outer index, irregular. */
    setup_t *x = calloc(1, sizeof(*x));
    const int64_t o00[2] = {0, 0}, o04[2] = {0, 4}, o20[2] = {2, 0};
    const int64_t s44[2] = {4, 4}, s48[2] = {4, 8}, s28[2] = {2, 8};
    const int64_t keys[2] = {0, 1}, offs[2] = {0, 0};
    mc_reshard_table_h plan = NULL, reads = NULL, blocks = NULL;

    add(&x->s, 2, o00, s44);
    add(&x->s, 2, o04, s44);
    add(&x->t, 2, o00, s48);
    finish(x, 2);
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, NULL));
    ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, keys, offs, NULL, &reads));
    ck_assert_status_ok(mc_reshard_plan_lower_blocks(plan, &x->p, keys, offs, NULL, &blocks));
    ck_assert_msg(mc_reshard_table_rows(reads) == 8, "column halves: a read per row");
    ck_assert_msg(mc_reshard_table_rows(blocks) == 2, "column halves: a block per source, "
                  "got %zu", mc_reshard_table_rows(blocks));
    for (size_t b = 0; b < 2; b++)
        ck_assert_msg(col(blocks, MC_RESHARD_READ_KEY, b) == (int64_t)b &&
                          col(blocks, MC_RESHARD_READ_SRC, b) == 0 &&
                          col(blocks, MC_RESHARD_READ_DST, b) == (int64_t)(8 * b) &&
                          col(blocks, MC_RESHARD_READ_LENGTH, b) == 8 &&
                          col(blocks, MC_RESHARD_BLOCK_ROWS, b) == 4 &&
                          col(blocks, MC_RESHARD_BLOCK_SRC_STRIDE, b) == 8 &&
                          col(blocks, MC_RESHARD_BLOCK_DST_STRIDE, b) == 16,
                      "block %zu should be 4 rows of 8 bytes at strides 8 / 16", b);
    ck_assert_msg(mc_reshard_table_column(blocks, MC_RESHARD_BLOCK_COLUMNS) == NULL &&
                      mc_reshard_table_column(reads, MC_RESHARD_BLOCK_ROWS) == NULL,
                  "a table has its own kind's columns only");
    mc_reshard_table_destroy(reads);
    mc_reshard_table_destroy(blocks);
    mc_reshard_table_destroy(plan);

    memset(x, 0, sizeof(*x));
    add(&x->s, 2, o00, s28);
    add(&x->s, 2, o20, s28);
    add(&x->t, 2, o00, s48);
    finish(x, 2);
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, NULL));
    const int64_t one[2] = {0, 0}, packed[2] = {0, 32};
    ck_assert_status_ok(mc_reshard_plan_lower_blocks(plan, &x->p, one, packed, NULL, &blocks));
    ck_assert_msg(mc_reshard_table_rows(blocks) == 1 &&
                      col(blocks, MC_RESHARD_READ_LENGTH, 0) == 64 &&
                      col(blocks, MC_RESHARD_BLOCK_ROWS, 0) == 1 &&
                      col(blocks, MC_RESHARD_BLOCK_SRC_STRIDE, 0) == 0,
                  "row halves back to back in one object: one read of 64 bytes");
    mc_reshard_table_destroy(blocks);
    mc_reshard_table_destroy(plan);

    memset(x, 0, sizeof(*x));
    const int64_t z3[3] = {0, 0, 0}, h3[3] = {0, 0, 2}, s222[3] = {2, 2, 2}, s224[3] = {2, 2, 4};
    add(&x->s, 3, z3, s222);
    add(&x->s, 3, h3, s222);
    add(&x->t, 3, z3, s224);
    finish(x, 1);
    ck_assert_status_ok(mc_reshard_plan_create(&x->p, &plan, NULL));
    ck_assert_status_ok(mc_reshard_plan_lower(plan, &x->p, keys, offs, NULL, &reads));
    ck_assert_status_ok(mc_reshard_plan_lower_blocks(plan, &x->p, keys, offs, NULL, &blocks));
    ck_assert_msg(mc_reshard_table_rows(reads) == 8 && mc_reshard_table_rows(blocks) == 2 &&
                      col(blocks, MC_RESHARD_BLOCK_ROWS, 0) == 4 &&
                      col(blocks, MC_RESHARD_BLOCK_SRC_STRIDE, 0) == 2 &&
                      col(blocks, MC_RESHARD_BLOCK_DST_STRIDE, 0) == 4,
                  "3-D column halves: rows at one stride through both loops (%zu blocks)",
                  mc_reshard_table_rows(blocks));
    ck_assert_status_eq(mc_reshard_plan_lower_blocks(NULL, &x->p, keys, offs, NULL, &blocks),
                        MC_INVALID_PARAMS);
    mc_reshard_table_destroy(reads);
    mc_reshard_table_destroy(blocks);
    mc_reshard_table_destroy(plan);
    free(x);
}
END_TEST

/* mc_reshard_boxes_tile() on groups of 2-D boxes in a 4 x 4 tensor: a
 * grid (its cells in any order, one repeated) is proven; bricks that tile
 * but not as a grid, a gap, an overlap, a box outside and a group without
 * rows are not; bad columns are refused with a detail and leave ok alone. */
START_TEST(test_boxes_tile)
{
    enum { G_GRID, G_HALVES, G_BRICKS, G_GAP, G_OVERLAP, G_OUTSIDE, G_EMPTY, G_ONE, NG };
    static const struct {
        int64_t g, o0, o1, s0, s1;
    } rows[] = {
        {G_GRID, 2, 2, 2, 2},    {G_GRID, 0, 0, 2, 2},    {G_GRID, 0, 2, 2, 2},
        {G_GRID, 2, 0, 2, 2},    {G_GRID, 0, 0, 2, 2},    /* a repeated cell */
        {G_HALVES, 0, 0, 2, 4},  {G_HALVES, 2, 0, 2, 4},
        {G_BRICKS, 0, 0, 2, 4},  {G_BRICKS, 2, 0, 2, 2},  {G_BRICKS, 2, 2, 2, 2},
        {G_GAP, 0, 0, 2, 4},     {G_GAP, 3, 0, 1, 4},
        {G_OVERLAP, 0, 0, 3, 4}, {G_OVERLAP, 2, 0, 2, 4},
        {G_OUTSIDE, 0, 0, 2, 4}, {G_OUTSIDE, 2, 0, 3, 4},
        {G_ONE, 0, 0, 4, 4},
    };
    enum { N = sizeof(rows) / sizeof(rows[0]) };
    int64_t group[N], off[2 * N], shape[2 * N], ext[2 * N];
    uint8_t ok[NG];
    /* bricks tile exactly, but only the caller's exact rule can tell */
    static const uint8_t want[NG] = {1, 1, 0, 0, 0, 0, 0, 1};

    for (int i = 0; i < N; i++) {
        group[i]     = rows[i].g;
        off[2 * i]   = rows[i].o0;
        off[2 * i + 1] = rows[i].o1;
        shape[2 * i] = rows[i].s0;
        shape[2 * i + 1] = rows[i].s1;
        ext[2 * i] = ext[2 * i + 1] = 4;
    }
    memset(ok, 7, sizeof(ok));
    ck_assert_status_ok(mc_reshard_boxes_tile(N, 2, group, off, shape, ext, NG, ok));
    for (int g = 0; g < NG; g++)
        ck_assert_msg(ok[g] == want[g], "group %d should be %s", g,
                      want[g] ? "proven" : "not proven");
    memset(ok, 7, sizeof(ok));
    group[N - 1] = G_GRID;          /* unsorted now */
    ck_assert_status_eq(mc_reshard_boxes_tile(N, 2, group, off, shape, ext, NG, ok),
                        MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "row 16") != NULL,
                  "the detail should name the row: %s", mc_last_error_detail());
    ck_assert_msg(ok[0] == 7, "a refusal writes nothing");
    group[N - 1] = G_ONE;
    ck_assert_status_eq(mc_reshard_boxes_tile(N, 2, group, off, shape, ext, G_ONE, ok),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_reshard_boxes_tile(N, 0, group, off, shape, ext, NG, ok),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_reshard_boxes_tile(N, 2, group, NULL, shape, ext, NG, ok),
                        MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_reshard_boxes_tile(0, 2, NULL, NULL, NULL, NULL, 0, NULL));
}
END_TEST

Suite *mc_test_reshard_suite(void)
{
    Suite *s  = suite_create("reshard");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_worked_example);
    tcase_add_test(tc, test_coalescing);
    tcase_add_test(tc, test_operation_order);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_random_tilings_rebuild_targets);
    tcase_add_test(tc, test_lower_blocks);
    tcase_add_test(tc, test_boxes_tile);
    suite_add_tcase(s, tc);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master's DFS extent allocator (mooncake-master/tiers/dfs_alloc.c) and the
 * shared layout helpers (libmooncake/common/dfs_layout.c).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"
#include "common/dfs_layout.h"
#include "common/log.h"
#include "../../mooncake-master/tiers/dfs_alloc.h"

/* Free bytes of shard @p s, summed over its free list; also checks the
 * list is sorted, aligned and never has two touching extents. */
static uint64_t shard_free(const mc_dfs_alloc_t *a, uint32_t s)
{
    const mc_dfs_shard_t *sh = &a->shards[s];
    uint64_t sum = 0;
    for (uint32_t i = 0; i < sh->nfree; i++) {
        ck_assert_msg(sh->free[i].len > 0, "a free extent is empty");
        ck_assert_msg(sh->free[i].off % a->alignment == 0, "a free extent is unaligned");
        if (i > 0)
            ck_assert_msg(sh->free[i - 1].off + sh->free[i - 1].len < sh->free[i].off,
                          "free extents %u and %u overlap or touch", i - 1, i);
        sum += sh->free[i].len;
    }
    return sum;
}

START_TEST(test_take_rounds_spreads_and_coalesces)
{
    mc_dfs_alloc_t a;
    uint32_t sh[6];
    uint64_t off[6];

    ck_assert_int_eq(mc_dfs_alloc_init(&a, 2, 64 * 1024, 4096), 0);
    ck_assert_uint_eq(mc_dfs_alloc_capacity(&a), 128 * 1024);
    /* rounded up to the alignment, shards taken in turn */
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 1, &sh[0], &off[0]), 0);
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 5000, &sh[1], &off[1]), 0);
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 4096, &sh[2], &off[2]), 0);
    ck_assert_uint_eq(sh[0], 0);
    ck_assert_uint_eq(sh[1], 1);
    ck_assert_uint_eq(sh[2], 0);
    ck_assert_uint_eq(off[0], 0);
    ck_assert_uint_eq(off[1], 0);
    ck_assert_uint_eq(off[2], 4096);
    ck_assert_uint_eq(a.used, 4096 + 8192 + 4096);
    ck_assert_uint_eq(shard_free(&a, 0), 64 * 1024 - 8192);
    ck_assert_uint_eq(shard_free(&a, 1), 64 * 1024 - 8192);
    /* freeing in any order merges back into one extent per shard */
    mc_dfs_alloc_give(&a, 0, off[0], 1);
    ck_assert_uint_eq(a.shards[0].nfree, 2);
    mc_dfs_alloc_give(&a, 0, off[2], 4096);
    ck_assert_uint_eq(a.shards[0].nfree, 1);
    mc_dfs_alloc_give(&a, 1, off[1], 5000);
    ck_assert_uint_eq(a.shards[1].nfree, 1);
    ck_assert_uint_eq(a.used, 0);
    ck_assert_uint_eq(shard_free(&a, 0), 64 * 1024);
    /* too big for any shard, then full */
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 64 * 1024 + 1, &sh[0], &off[0]), -1);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(mc_dfs_alloc_take(&a, 64 * 1024, &sh[i], &off[i]), 0);
    ck_assert_uint_ne(sh[0], sh[1]);
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 1, &sh[2], &off[2]), -1);
    mc_dfs_alloc_give(&a, sh[0], off[0], 64 * 1024);
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 1, &sh[2], &off[2]), 0);
    ck_assert_uint_eq(sh[2], sh[0]);
    mc_dfs_alloc_cleanup(&a);
    /* bad layouts */
    ck_assert_int_eq(mc_dfs_alloc_init(&a, 0, 4096, 4096), -1);
    ck_assert_int_eq(mc_dfs_alloc_init(&a, 1, 4096, 3000), -1);
    ck_assert_int_eq(mc_dfs_alloc_init(&a, 1, 6000, 4096), -1);
}
END_TEST

/* Restore takes extents back exactly; what is taken or outside the
 * layout is refused, and allocation then avoids the restored ranges. */
START_TEST(test_reserve)
{
    mc_dfs_alloc_t a;
    uint32_t s;
    uint64_t off;

    ck_assert_int_eq(mc_dfs_alloc_init(&a, 1, 16 * 4096, 4096), 0);
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 4 * 4096, 2 * 4096), 0);  /* middle */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 0, 4096), 0);             /* head */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 15 * 4096, 4096), 0);     /* tail */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 5 * 4096, 4096), -1);     /* taken */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 3 * 4096, 2 * 4096), -1); /* overlaps */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 100, 4096), -1);          /* unaligned */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 1, 0, 4096), -1);            /* no shard */
    ck_assert_int_eq(mc_dfs_alloc_reserve(&a, 0, 16 * 4096, 4096), -1);    /* outside */
    ck_assert_uint_eq(a.used, 4 * 4096);
    ck_assert_uint_eq(shard_free(&a, 0), 12 * 4096);
    /* first fit: the hole before the middle range */
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 3 * 4096, &s, &off), 0);
    ck_assert_uint_eq(off, 4096);
    ck_assert_int_eq(mc_dfs_alloc_take(&a, 3 * 4096, &s, &off), 0);
    ck_assert_uint_eq(off, 6 * 4096);
    mc_dfs_alloc_cleanup(&a);
}
END_TEST

/* Random takes and gives against a byte map: no two live extents ever
 * overlap, and everything given back is one extent again. */
START_TEST(test_random_against_a_map)
{
    enum { N = 64, BLOCKS = 256 };
    mc_dfs_alloc_t a;
    uint8_t map[2][BLOCKS];
    struct { int live; uint32_t s; uint64_t off, len; } x[N];
    unsigned seed = 12345;

    memset(map, 0, sizeof(map));
    memset(x, 0, sizeof(x));
    ck_assert_int_eq(mc_dfs_alloc_init(&a, 2, BLOCKS * 512, 512), 0);
    for (int round = 0; round < 20000; round++) {
        int i = (int)(rand_r(&seed) % N);
        if (!x[i].live) {
            uint64_t len = 1 + rand_r(&seed) % (8 * 512);
            if (mc_dfs_alloc_take(&a, len, &x[i].s, &x[i].off) != 0)
                continue;
            x[i].len  = (len + 511) / 512 * 512;
            x[i].live = 1;
            for (uint64_t b = x[i].off / 512; b < (x[i].off + x[i].len) / 512; b++) {
                ck_assert_msg(!map[x[i].s][b], "block %llu of shard %u handed out twice",
                              (unsigned long long)b, x[i].s);
                map[x[i].s][b] = 1;
            }
        } else {
            mc_dfs_alloc_give(&a, x[i].s, x[i].off, x[i].len);
            for (uint64_t b = x[i].off / 512; b < (x[i].off + x[i].len) / 512; b++)
                map[x[i].s][b] = 0;
            x[i].live = 0;
        }
    }
    for (int i = 0; i < N; i++)
        if (x[i].live)
            mc_dfs_alloc_give(&a, x[i].s, x[i].off, x[i].len);
    ck_assert_uint_eq(a.used, 0);
    for (uint32_t s = 0; s < 2; s++) {
        ck_assert_uint_eq(a.shards[s].nfree, 1);
        ck_assert_uint_eq(shard_free(&a, s), BLOCKS * 512);
    }
    mc_dfs_alloc_cleanup(&a);
}
END_TEST

START_TEST(test_layout)
{
    mc_dfs_layout_t l;
    char name[64];
    char dir[] = "/tmp/mc-dfs-layout-XXXXXX";

    ck_assert_ptr_nonnull(mkdtemp(dir));
    unsetenv("MOONCAKE_DFS_SHARD_COUNT");
    unsetenv("MOONCAKE_DFS_SHARD_CAPACITY");
    unsetenv("MOONCAKE_DFS_ALIGNMENT");
    ck_assert_status_ok(mc_dfs_layout_init(&l, dir, "root"));
    ck_assert_str_eq(l.root, dir);
    ck_assert_uint_eq(l.shard_count, MC_DFS_DEFAULT_SHARD_COUNT);
    ck_assert_uint_eq(l.alignment, MC_DFS_DEFAULT_ALIGNMENT);
    setenv("MOONCAKE_DFS_SHARD_COUNT", "3", 1);
    setenv("MOONCAKE_DFS_SHARD_CAPACITY", "1MiB", 1);
    setenv("MOONCAKE_DFS_ALIGNMENT", "512", 1);
    ck_assert_status_ok(mc_dfs_layout_init(&l, dir, "root"));
    ck_assert_uint_eq(l.shard_count, 3);
    ck_assert_uint_eq(l.shard_capacity, 1u << 20);
    ck_assert_uint_eq(l.alignment, 512);
    setenv("MOONCAKE_DFS_ALIGNMENT", "1000", 1);
    ck_assert_status_eq(mc_dfs_layout_init(&l, dir, "root"), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "MOONCAKE_DFS_ALIGNMENT") != NULL,
                  "the detail names the variable: %s", mc_last_error_detail());
    unsetenv("MOONCAKE_DFS_SHARD_COUNT");
    unsetenv("MOONCAKE_DFS_SHARD_CAPACITY");
    unsetenv("MOONCAKE_DFS_ALIGNMENT");
    ck_assert_status_eq(mc_dfs_layout_init(&l, "relative", "root"), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_dfs_layout_init(&l, "/tmp/../tmp", "root"), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_dfs_layout_init(&l, "/nonexistent/mc-dfs", "root"),
                        MC_INVALID_PARAMS);
    rmdir(dir);
    mc_dfs_shard_name(3, name, sizeof(name));
    ck_assert_str_eq(name, "mooncake-dfs-00003.shard");
    ck_assert_uint_eq(mc_dfs_record_span(10, 100, 4096), 4096);
    ck_assert_uint_eq(mc_dfs_record_span(10, 4096, 4096), 8192);
    ck_assert_uint_eq(mc_dfs_record_span(0, UINT64_MAX - 10, 4096), 0);
}
END_TEST

Suite *mc_test_dfs_suite(void)
{
    Suite *s  = suite_create("dfs");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_take_rounds_spreads_and_coalesces);
    tcase_add_test(tc, test_reserve);
    tcase_add_test(tc, test_random_against_a_map);
    tcase_add_test(tc, test_layout);
    suite_add_tcase(s, tc);
    return s;
}

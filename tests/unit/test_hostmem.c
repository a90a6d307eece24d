/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host-memory allocator's registry (libmooncake/store/dummy/hostmem.c): every
 * block is a sealed memfd that a dummy client can hand to its real client,
 * and mc_host_mem_find() tells register_buffer which block holds an
 * address, so that only whole blocks are registered.
 */
#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_suites.h"
#include "store/dummy/dummy.h"

START_TEST(test_find_names_the_block_holding_an_address)
{
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *a = NULL, *b = NULL;
    mc_host_mem_info_t info;
    int on_stack;

    ck_assert_status_ok(mc_host_mem_alloc(3 * (size_t)page + 10, (void **)&a));
    ck_assert_status_ok(mc_host_mem_alloc(1, (void **)&b));

    ck_assert_int_eq(mc_host_mem_find(a, 1, 0, &info), 1);
    ck_assert_ptr_eq(info.base, a);
    ck_assert_msg(info.size == 3 * (size_t)page + 10,
                  "a block should register as the size asked for, not %zu", info.size);
    ck_assert_msg(info.map_len == 4 * (size_t)page, "the memfd should be page-rounded");
    ck_assert_int_eq(info.hugepage, 0);
    ck_assert_int_eq(info.fd, -1);
    ck_assert_msg(info.serial != 0, "a serial is never 0");

    /* any byte of the mapping, the rounded tail included, names the block;
     * the caller, not the lookup, compares the range */
    ck_assert_int_eq(mc_host_mem_find(a + info.map_len - 1, 1 << 20, 0, &info), 1);
    ck_assert_ptr_eq(info.base, a);
    ck_assert_int_eq(mc_host_mem_find(b, 1, 0, &info), 1);
    ck_assert_ptr_eq(info.base, b);
    ck_assert_int_eq(info.size, 1);
    ck_assert_int_eq(mc_host_mem_find(&on_stack, 1, 0, &info), 0);
    ck_assert_int_eq(mc_host_mem_find(NULL, 0, 0, &info), 0);

    ck_assert_status_ok(mc_host_mem_free(a));
    ck_assert_msg(mc_host_mem_find(a, 1, 0, &info) == 0, "a freed block should be forgotten");
    ck_assert_status_ok(mc_host_mem_free(b));
}
END_TEST

START_TEST(test_find_gives_a_sealed_memfd_of_the_block)
{
    uint8_t *a = NULL;
    mc_host_mem_info_t info;
    uint64_t serial;
    struct stat sb;
    int seals;
    uint8_t *view;

    ck_assert_status_ok(mc_host_mem_alloc(8192, (void **)&a));
    memset(a, 0x5c, 8192);
    ck_assert_int_eq(mc_host_mem_find(a + 100, 4, 1, &info), 1);
    ck_assert_msg(info.fd >= 0, "want_fd should give a descriptor");
    ck_assert_msg(fcntl(info.fd, F_GETFD) & FD_CLOEXEC, "the duplicate should be close-on-exec");
    seals = fcntl(info.fd, F_GET_SEALS);
    ck_assert_msg((seals >= 0) && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW),
                  "the memfd should be sealed against resizing (seals %d)", seals);
    ck_assert_int_eq(fstat(info.fd, &sb), 0);
    ck_assert_int_eq((size_t)sb.st_size, info.map_len);
    /* what a real client maps from it is the block itself */
    view = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, info.fd, 0);
    ck_assert_ptr_ne(view, MAP_FAILED);
    ck_assert_int_eq(view[8191], 0x5c);
    view[0] = 0x11;
    ck_assert_int_eq(a[0], 0x11);
    munmap(view, 8192);
    close(info.fd);
    serial = info.serial;

    /* a new block has a new serial, even where an old one was */
    ck_assert_status_ok(mc_host_mem_free(a));
    ck_assert_status_ok(mc_host_mem_alloc(8192, (void **)&a));
    ck_assert_int_eq(mc_host_mem_find(a, 1, 0, &info), 1);
    ck_assert_msg(info.serial != serial, "serials should not repeat");
    ck_assert_status_ok(mc_host_mem_free(a));
}
END_TEST

START_TEST(test_many_blocks_stay_sorted)
{
    enum { N = 40 };
    void *p[N];
    mc_host_mem_info_t info;

    for (int i = 0; i < N; i++)
        ck_assert_status_ok(mc_host_mem_alloc(4096 * (size_t)(i % 3 + 1), &p[i]));
    /* free every other one, then every block left is still found */
    for (int i = 0; i < N; i += 2)
        ck_assert_status_ok(mc_host_mem_free(p[i]));
    for (int i = 0; i < N; i++) {
        int want = (i % 2 == 1);
        ck_assert_msg(mc_host_mem_find((uint8_t *)p[i] + 4095, 1, 0, &info) == want,
                      "block %d should %sbe found", i, want ? "" : "not ");
        if (want)
            ck_assert_ptr_eq(info.base, p[i]);
    }
    for (int i = 1; i < N; i += 2)
        ck_assert_status_ok(mc_host_mem_free(p[i]));
}
END_TEST

START_TEST(test_round_to_the_huge_page)
{
    ck_assert_int_eq(mc_host_mem_round(4096, 0), 4096);
    ck_assert_int_eq(mc_host_mem_round(1, 2u << 20), 2u << 20);
    ck_assert_int_eq(mc_host_mem_round(2u << 20, 2u << 20), 2u << 20);
    ck_assert_int_eq(mc_host_mem_round((2u << 20) + 1, 2u << 20), 4u << 20);
    ck_assert_msg(mc_host_mem_round(SIZE_MAX, 2u << 20) == SIZE_MAX,
                  "a rounding that would wrap should leave the size alone");
}
END_TEST

START_TEST(test_pluggable_pair_is_the_same_allocator)
{
    mc_host_mem_info_t info;
    void *p = mc_host_mem_pluggable_alloc(10000, 0, NULL);

    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mc_host_mem_find(p, 10000, 0, &info), 1);
    ck_assert_int_eq(info.size, 10000);
    ck_assert_ptr_null(mc_host_mem_pluggable_alloc(0, 0, NULL));
    mc_host_mem_pluggable_free(p, 10000, 0, NULL);
    ck_assert_int_eq(mc_host_mem_find(p, 1, 0, &info), 0);
    mc_host_mem_pluggable_free(NULL, 0, 0, NULL); /* ignored */
}
END_TEST

/* Pages of [p, p + len) resident in memory (in the memfd's page cache). */
static size_t resident_pages(void *p, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t n = len / (size_t)page, count = 0;
    unsigned char *vec = calloc(n, 1);

    ck_assert_ptr_nonnull(vec);
    ck_assert_int_eq(mincore(p, len, vec), 0);
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count;
}

START_TEST(test_lazy_block_commits_only_the_pages_touched)
{
    const size_t len = 64u << 20;
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *lazy = NULL, *eager = NULL;
    mc_host_mem_info_t info;
    int seals;

    ck_assert_status_ok(mc_host_mem_alloc_lazy(len, (void **)&lazy));
    ck_assert_msg(resident_pages(lazy, len) == 0,
                  "a lazy block should commit no page before one is touched (%zu are)",
                  resident_pages(lazy, len));
    lazy[0] = 1;
    lazy[len / 2] = 2;
    lazy[len - 1] = 3;
    ck_assert_msg(resident_pages(lazy, len) == 3,
                  "three writes should commit three pages, not %zu", resident_pages(lazy, len));
    ck_assert_int_eq(lazy[1], 0);
    ck_assert_int_eq(lazy[(size_t)page], 0); /* an untouched page reads as zeros */
    /* otherwise a block like any other: registered, its sealed memfd shareable */
    ck_assert_int_eq(mc_host_mem_find(lazy + 5, 4, 1, &info), 1);
    ck_assert_ptr_eq(info.base, lazy);
    ck_assert_msg(info.size == len, "the lazy block should register as %zu bytes", len);
    ck_assert_msg(info.fd >= 0, "want_fd should give a descriptor");
    seals = fcntl(info.fd, F_GET_SEALS);
    ck_assert_msg((seals >= 0) && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW),
                  "the memfd should be sealed against resizing (seals %d)", seals);
    close(info.fd);
    ck_assert_status_ok(mc_host_mem_free(lazy));
    ck_assert_int_eq(mc_host_mem_find(lazy, 1, 0, &info), 0);

    /* mc_host_mem_alloc() commits every page when it maps the block */
    ck_assert_status_ok(mc_host_mem_alloc(len, (void **)&eager));
    ck_assert_msg(resident_pages(eager, len) == len / (size_t)page,
                  "mc_host_mem_alloc should commit all %zu pages, not %zu", len / (size_t)page,
                  resident_pages(eager, len));
    ck_assert_status_ok(mc_host_mem_free(eager));
    ck_assert_int_eq(mc_host_mem_alloc_lazy(0, (void **)&lazy), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_host_mem_alloc_lazy(64, NULL), MC_INVALID_PARAMS);
}
END_TEST

Suite *mc_test_hostmem_suite(void)
{
    Suite *s = suite_create("hostmem");
    TCase *tc = tcase_create("registry");
    tcase_add_test(tc, test_find_names_the_block_holding_an_address);
    tcase_add_test(tc, test_find_gives_a_sealed_memfd_of_the_block);
    tcase_add_test(tc, test_many_blocks_stay_sorted);
    tcase_add_test(tc, test_round_to_the_huge_page);
    tcase_add_test(tc, test_pluggable_pair_is_the_same_allocator);
    tcase_add_test(tc, test_lazy_block_commits_only_the_pages_touched);
    suite_add_tcase(s, tc);
    return s;
}

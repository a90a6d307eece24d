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

Suite *mc_test_hostmem_suite(void)
{
    Suite *s = suite_create("hostmem");
    TCase *tc = tcase_create("registry");
    tcase_add_test(tc, test_find_names_the_block_holding_an_address);
    tcase_add_test(tc, test_find_gives_a_sealed_memfd_of_the_block);
    tcase_add_test(tc, test_many_blocks_stay_sorted);
    tcase_add_test(tc, test_round_to_the_huge_page);
    tcase_add_test(tc, test_pluggable_pair_is_the_same_allocator);
    suite_add_tcase(s, tc);
    return s;
}

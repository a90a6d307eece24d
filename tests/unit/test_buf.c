/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte buffers: the writer's byte order, the reader's bounds (it is the
 * first thing hostile frames meet: it must never read past the end, and an
 * error must stick), string length limits, and the arena's alignment,
 * zeroing and reset.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_suites.h"
#include "common/buf.h"
#include "common/slab.h"
#include "common/util.h"

START_TEST(test_writer_is_little_endian)
{
    mc_buf_t b;
    mc_buf_init(&b);
    mc_buf_put_u8(&b, 0xa1);
    mc_buf_put_u16(&b, 0xb2b1);
    mc_buf_put_u32(&b, 0xc4c3c2c1u);
    mc_buf_put_u64(&b, 0xd8d7d6d5d4d3d2d1ull);
    mc_buf_put_str(&b, mc_str_from_cstr("xy"));
    mc_buf_put_bytes(&b, "\x01\x02", 2);
    static const uint8_t want[] = {0xa1, 0xb1, 0xb2, 0xc1, 0xc2, 0xc3, 0xc4, 0xd1, 0xd2, 0xd3,
                                   0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 2,    0,    0,    0,    'x',
                                   'y',  1,    2};
    ck_assert_msg(b.len == sizeof(want), "the writer should hold %zu bytes, not %zu",
                  sizeof(want), b.len);
    ck_assert_msg(memcmp(b.data, want, sizeof(want)) == 0, "the bytes should be little-endian");
    ck_assert_msg(!b.oom, "nothing should have failed");
    mc_buf_reset(&b);
    ck_assert_msg(b.len == 0 && b.cap > 0, "reset should keep the storage");
    mc_buf_cleanup(&b);
    ck_assert_msg(b.data == NULL && b.len == 0, "cleanup should release the storage");
    mc_buf_cleanup(&b);
}
END_TEST

START_TEST(test_round_trip)
{
    mc_buf_t b;
    mc_rbuf_t r;
    mc_buf_init(&b);
    for (uint32_t i = 0; i < 1000; i++) {
        mc_buf_put_u8(&b, (uint8_t)i);
        mc_buf_put_u16(&b, (uint16_t)(i * 7));
        mc_buf_put_u32(&b, i * 2654435761u);
        mc_buf_put_u64(&b, (uint64_t)i * 0x9e3779b97f4a7c15ull);
        char s[32];
        int n = snprintf(s, sizeof(s), "key-%u", i);
        mc_str_t str = {s, (uint32_t)n};
        mc_buf_put_str(&b, str);
    }
    ck_assert_msg(b.cap >= b.len && !b.oom, "the writer should have grown");
    mc_rbuf_init(&r, b.data, b.len);
    for (uint32_t i = 0; i < 1000; i++) {
        char s[32];
        int n = snprintf(s, sizeof(s), "key-%u", i);
        mc_str_t want = {s, (uint32_t)n};
        uint8_t u8    = mc_rbuf_get_u8(&r);
        uint16_t u16  = mc_rbuf_get_u16(&r);
        uint32_t u32  = mc_rbuf_get_u32(&r);
        uint64_t u64  = mc_rbuf_get_u64(&r);
        mc_str_t got  = mc_rbuf_get_str(&r, 64);
        if (u8 != (uint8_t)i || u16 != (uint16_t)(i * 7) || u32 != i * 2654435761u ||
            u64 != (uint64_t)i * 0x9e3779b97f4a7c15ull || !mc_str_eq(got, want))
            ck_abort_msg("record %u should read back as written", i);
    }
    ck_assert_msg(!r.err && r.left == 0, "the reader should end exactly at the end");
    mc_buf_cleanup(&b);
}
END_TEST

START_TEST(test_reader_stops_at_end_and_error_sticks)
{
    const uint8_t data[7] = {1, 2, 3, 4, 5, 6, 7};
    mc_rbuf_t r;
    /* a u64 from 7 bytes: refused, nothing consumed */
    mc_rbuf_init(&r, data, sizeof(data));
    ck_assert_msg(mc_rbuf_get_u64(&r) == 0, "a short u64 should read as 0");
    ck_assert_msg(r.err, "a short read should set err");
    ck_assert_msg(r.left == 7 && r.p == data, "a short read should consume nothing");
    /* the error sticks even where enough bytes remain */
    ck_assert_msg(mc_rbuf_get_u8(&r) == 0 && r.err, "a read after an error should fail");
    ck_assert_msg(mc_rbuf_get_bytes(&r, 0) == NULL, "even an empty read fails after an error");
    ck_assert_msg(r.left == 7, "failed reads should consume nothing");

    /* exact consumption is fine, one byte more is not */
    mc_rbuf_init(&r, data, sizeof(data));
    ck_assert_msg(mc_rbuf_get_u32(&r) == 0x04030201u, "a u32 should read little-endian");
    ck_assert_msg(mc_rbuf_get_u16(&r) == 0x0605, "a u16 should read little-endian");
    ck_assert_msg(mc_rbuf_get_u8(&r) == 7 && !r.err && r.left == 0, "the last byte is readable");
    ck_assert_msg(mc_rbuf_get_u8(&r) == 0 && r.err, "reading past the end should fail");

    /* borrowing bytes */
    mc_rbuf_init(&r, data, sizeof(data));
    ck_assert_msg(mc_rbuf_get_bytes(&r, 7) == data && r.left == 0, "all 7 bytes can be borrowed");
    mc_rbuf_init(&r, data, sizeof(data));
    ck_assert_msg(mc_rbuf_get_bytes(&r, 8) == NULL && r.err, "8 of 7 bytes is refused");
    mc_rbuf_init(&r, data, sizeof(data));
    ck_assert_msg(mc_rbuf_get_bytes(&r, SIZE_MAX) == NULL && r.err, "SIZE_MAX is refused");

    /* an empty reader over NULL */
    mc_rbuf_init(&r, NULL, 0);
    ck_assert_msg(mc_rbuf_get_u8(&r) == 0 && r.err, "an empty reader has nothing to read");
}
END_TEST

static void put_len_and_bytes(mc_buf_t *b, uint32_t len, size_t actual)
{
    mc_buf_put_u32(b, len);
    uint8_t *p = mc_buf_reserve(b, actual);
    if (p != NULL)
        memset(p, 'k', actual);
}

START_TEST(test_strings_are_bounded)
{
    mc_buf_t b;
    mc_rbuf_t r;
    mc_str_t s;
    mc_buf_init(&b);

    put_len_and_bytes(&b, 16, 16);
    mc_rbuf_init(&r, b.data, b.len);
    s = mc_rbuf_get_str(&r, 16);
    ck_assert_msg(!r.err && s.len == 16 && s.ptr == (const char *)b.data + 4,
                  "a string of exactly max_len should be borrowed from the input");

    mc_rbuf_init(&r, b.data, b.len);
    s = mc_rbuf_get_str(&r, 15);
    ck_assert_msg(r.err && s.len == 0, "a string over max_len should be refused");

    mc_buf_reset(&b);
    put_len_and_bytes(&b, 17, 16); /* the length lies */
    mc_rbuf_init(&r, b.data, b.len);
    s = mc_rbuf_get_str(&r, 1000);
    ck_assert_msg(r.err && s.len == 0, "a string longer than the input should be refused");

    mc_buf_reset(&b);
    put_len_and_bytes(&b, UINT32_MAX, 3);
    mc_rbuf_init(&r, b.data, b.len);
    s = mc_rbuf_get_str(&r, UINT32_MAX);
    ck_assert_msg(r.err && s.len == 0 && s.ptr != NULL, "a 4 GiB length should be refused");

    mc_buf_reset(&b);
    put_len_and_bytes(&b, 0, 0);
    mc_rbuf_init(&r, b.data, b.len);
    s = mc_rbuf_get_str(&r, 0);
    ck_assert_msg(!r.err && s.len == 0 && r.left == 0, "an empty string is fine");

    mc_rbuf_init(&r, b.data, 3);
    s = mc_rbuf_get_str(&r, 10);
    ck_assert_msg(r.err && s.len == 0, "a truncated length prefix should be refused");
    mc_buf_cleanup(&b);

    ck_assert_msg(mc_str_eq(mc_str_from_cstr("ab"), mc_str_from_cstr("ab")), "equal strings");
    ck_assert_msg(!mc_str_eq(mc_str_from_cstr("ab"), mc_str_from_cstr("abc")), "lengths differ");
    ck_assert_msg(mc_str_eq(mc_str_from_cstr(NULL), mc_str_from_cstr("")), "NULL is empty");
}
END_TEST

START_TEST(test_writer_overflow_is_sticky)
{
    mc_buf_t b;
    mc_buf_init(&b);
    mc_buf_put_u32(&b, 1);
    ck_assert_msg(mc_buf_reserve(&b, SIZE_MAX) == NULL, "reserving SIZE_MAX should fail");
    ck_assert_msg(b.oom, "the failure should be recorded");
    mc_buf_put_u32(&b, 2);
    ck_assert_msg(b.len == 4, "writes after a failure should be dropped");
    mc_buf_reset(&b);
    ck_assert_msg(!b.oom, "reset should clear the failure");
    mc_buf_put_u32(&b, 3);
    ck_assert_msg(b.len == 4 && mc_load_le32(b.data) == 3, "the buffer should work again");
    mc_buf_cleanup(&b);
}
END_TEST

START_TEST(test_arena)
{
    mc_arena_t a;
    mc_arena_init(&a);
    for (size_t n = 0; n < 300; n++) {
        uint8_t *p = mc_arena_alloc(&a, n);
        if (p == NULL || ((uintptr_t)p & 15) != 0)
            ck_abort_msg("arena allocation of %zu bytes should be 16-byte aligned", n);
        for (size_t i = 0; i < n; i++)
            if (p[i] != 0)
                ck_abort_msg("arena memory should be zeroed");
        memset(p, 0xee, n);
    }
    size_t total = a.total;
    ck_assert_msg(total >= 300 * 299 / 2, "total should count every allocation");
    uint8_t *big = mc_arena_alloc(&a, 100000);
    ck_assert_msg(big != NULL && ((uintptr_t)big & 15) == 0, "a big allocation should work");
    big[99999] = 1;
    ck_assert_msg(mc_arena_calloc(&a, SIZE_MAX / 2, 4) == NULL, "calloc overflow is refused");
    ck_assert_msg(mc_arena_alloc(&a, SIZE_MAX - 8) == NULL, "an impossible size is refused");
    ck_assert_msg(mc_arena_alloc(&a, 5000) != NULL, "a chunk should be partly used");
    ck_assert_msg(mc_arena_alloc(&a, SIZE_MAX - 4096) == NULL,
                  "a size that would wrap the chunk's free space is refused");
    ck_assert_msg(mc_arena_alloc(&a, (size_t)PTRDIFF_MAX + 1) == NULL,
                  "a size over PTRDIFF_MAX is refused");
    uint32_t *v = mc_arena_calloc(&a, 1000, sizeof(uint32_t));
    ck_assert_msg(v != NULL && v[999] == 0, "calloc should give zeroed memory");

    mc_arena_reset(&a);
    ck_assert_msg(a.total == 0, "reset should clear the total");
    uint8_t *p = mc_arena_alloc(&a, 64);
    ck_assert_msg(p != NULL && p[0] == 0 && p[63] == 0, "memory after reset should be zeroed");
    mc_arena_cleanup(&a);
    ck_assert_msg(a.head == NULL, "cleanup should release every chunk");
    mc_arena_cleanup(&a);
}
END_TEST

/* The slab: records of every class are distinct, aligned and writable,
 * freed ones are reused by their own class, and sizes past MC_SLAB_MAX
 * go to malloc.  (With AddressSanitizer every call is malloc/free, so only
 * the contents are checked there.) */
START_TEST(test_slab)
{
    enum { PER = 3000 };
    static const size_t sizes[] = {1, 8, 9, 40, 136, 152, MC_SLAB_MAX, MC_SLAB_MAX + 1, 4000};
    enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
    mc_slab_t s;
    void **p = calloc((size_t)NS * PER, sizeof(*p));
    ck_assert_ptr_nonnull(p);
    mc_slab_init(&s);
    for (int k = 0; k < NS; k++)
        for (int i = 0; i < PER; i++) {
            void *r = mc_slab_alloc(&s, sizes[k]);
            ck_assert_ptr_nonnull(r);
            ck_assert_msg(((uintptr_t)r & 7u) == 0, "record of %zu bytes is not 8-aligned",
                          sizes[k]);
            memset(r, (k * 31 + i) & 0xff, sizes[k]);
            p[k * PER + i] = r;
        }
    /* nothing overwrote anything: the records do not overlap */
    for (int k = 0; k < NS; k++)
        for (int i = 0; i < PER; i++) {
            const unsigned char *r = p[k * PER + i];
            for (size_t b = 0; b < sizes[k]; b++)
                if (r[b] != (unsigned char)((k * 31 + i) & 0xff))
                    ck_abort_msg("record %d of %zu bytes was overwritten", i, sizes[k]);
        }
    /* free every other record of 136 bytes, then take as many again */
    void **freed = calloc(PER, sizeof(*freed));
    ck_assert_ptr_nonnull(freed);
    for (int i = 0; i < PER; i += 2) {
        freed[i] = p[4 * PER + i];
        mc_slab_free(&s, freed[i], 136);
    }
    for (int i = 0; i < PER; i += 2) {
        void *r = mc_slab_alloc(&s, 130); /* the same class: 136 rounded */
        ck_assert_ptr_nonnull(r);
#if !MC_SLAB_PLAIN_MALLOC
        int reused = 0;
        for (int j = 0; (j < PER) && !reused; j += 2)
            reused = (freed[j] == r);
        ck_assert_msg(reused, "a freed record of the class should be reused");
#endif
        p[4 * PER + i] = r;
    }
    free(freed);
    for (int k = 0; k < NS; k++)
        for (int i = 0; i < PER; i++)
            mc_slab_free(&s, p[k * PER + i], (k == 4) ? 136 : sizes[k]);
    mc_slab_free(&s, NULL, 8); /* ignored */
#if !MC_SLAB_PLAIN_MALLOC
    ck_assert_msg(s.chunk_bytes > MC_HUGE_BLOCK,
                  "records up to MC_SLAB_MAX come from chunks, here more than one block of them");
#endif
    mc_slab_cleanup(&s);
    ck_assert_msg(s.chunks == NULL && s.chunk_bytes == 0, "cleanup should free every chunk");
    free(p);
}
END_TEST

#if !MC_SLAB_PLAIN_MALLOC
/* Whether every page of the block at @p b is resident (mincore). */
static int block_resident(const void *b)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = (pg > 0) ? (size_t)pg : 4096u, n = MC_HUGE_BLOCK / page;
    unsigned char *vec = calloc(n, 1);
    int all = (vec != NULL) && (mincore((void *)(uintptr_t)b, MC_HUGE_BLOCK, vec) == 0);

    for (size_t i = 0; all && (i < n); i++)
        all = vec[i] & 1;
    free(vec);
    return all;
}
#endif

/* mc_slab_prefault_start(): the slab's blocks come from its thread,
 * faulted in before the slab takes them, block after block (the next one
 * only once the first is full); cleanup stops the thread with a block
 * still in its hands. */
START_TEST(test_slab_prefault)
{
    enum { REC = 136 };
    mc_slab_t s;
    mc_slab_init(&s);
    ck_assert_int_eq(mc_slab_prefault_start(&s), 0);
    ck_assert_int_eq(mc_slab_prefault_start(&s), 0); /* a second start: the same thread */
#if !MC_SLAB_PLAIN_MALLOC
    char *first, *r = NULL;
    size_t n = 0;

    ck_assert_msg(mc_slab_prefault_wait(&s, 10000), "the thread should have a block ready");
    ck_assert_uint_eq(mc_slab_prefaulted_blocks(&s), 0);
    first = mc_slab_alloc(&s, REC);
    ck_assert_ptr_nonnull(first);
    ck_assert_uint_eq(mc_slab_prefaulted_blocks(&s), 1);
    /* the block was faulted in whole before the slab wrote to it */
    ck_assert_msg(block_resident((const void *)((uintptr_t)first & ~(uintptr_t)(MC_HUGE_BLOCK - 1))),
                  "the block taken from the thread should be resident already");
    /* the next block too, once the thread had it ready: fill this one */
    ck_assert_msg(mc_slab_prefault_wait(&s, 10000), "the thread should make the next block");
    while (mc_slab_prefaulted_blocks(&s) < 2) {
        r = mc_slab_alloc(&s, REC);
        ck_assert_ptr_nonnull(r);
        memset(r, 0x5a, REC);
        ck_assert_msg(++n < 2 * MC_HUGE_BLOCK / REC, "the slab should take a second block");
    }
    ck_assert_msg(((uintptr_t)r & ~(uintptr_t)(MC_HUGE_BLOCK - 1)) !=
                      ((uintptr_t)first & ~(uintptr_t)(MC_HUGE_BLOCK - 1)),
                  "the second block's record should lie in another block");
    ck_assert_msg(n > MC_HUGE_BLOCK / REC / 2, "a block holds %zu records, took %zu",
                  (size_t)(MC_HUGE_BLOCK / REC), n);
    /* the thread makes a third one meanwhile; cleanup stops it and unmaps it */
    (void)mc_slab_prefault_wait(&s, 10000);
#else
    ck_assert_int_eq(mc_slab_prefault_wait(&s, 10), 0); /* no thread: plain malloc */
    ck_assert_uint_eq(mc_slab_prefaulted_blocks(&s), 0);
#endif
    mc_slab_cleanup(&s);
    ck_assert_msg(s.chunks == NULL && s.spare == NULL, "cleanup should stop the thread");
}
END_TEST

START_TEST(test_load_store_helpers)
{
    uint8_t p[8];
    mc_store_le16(p, 0x1234);
    ck_assert_msg(p[0] == 0x34 && p[1] == 0x12 && mc_load_le16(p) == 0x1234, "le16");
    mc_store_le32(p, 0x89abcdefu);
    ck_assert_msg(p[0] == 0xef && p[3] == 0x89 && mc_load_le32(p) == 0x89abcdefu, "le32");
    mc_store_le64(p, 0x0102030405060708ull);
    ck_assert_msg(p[0] == 8 && p[7] == 1 && mc_load_le64(p) == 0x0102030405060708ull, "le64");
}
END_TEST

Suite *mc_test_buf_suite(void)
{
    Suite *s  = suite_create("buf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_writer_is_little_endian);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_reader_stops_at_end_and_error_sticks);
    tcase_add_test(tc, test_strings_are_bounded);
    tcase_add_test(tc, test_writer_overflow_is_sticky);
    tcase_add_test(tc, test_arena);
    tcase_add_test(tc, test_load_store_helpers);
    tcase_add_test(tc, test_slab);
    tcase_add_test(tc, test_slab_prefault);
    suite_add_tcase(s, tc);
    return s;
}

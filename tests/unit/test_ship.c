/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shipped log's value code (mooncake-master/durability/ship.c): a
 * round of records of one length, coded column by column, decodes back to
 * exactly its bytes for every count of records and every record length
 * (the coder works eight records by eight bytes at a time, so the counts
 * and lengths around multiples of eight are the edges), and a fixed round
 * codes to the same bytes as before the coder was rewritten (the standby
 * reads logs written by either).
 */
#include "config.h"

#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "../../mooncake-master/durability/ship.h"

/* @p nrec records of @p len bytes into @p d: valid frames (length, CRC,
 * type 6), the payload either mostly repeated (as a round's records are:
 * a few bytes change from one to the next) or random. */
static void make_round(uint8_t *d, size_t len, size_t nrec, int random_bytes, uint32_t *seed)
{
    for (size_t r = 0; r < nrec; r++) {
        uint8_t *f = d + r * len;
        mc_store_le32(f, (uint32_t)(len - MC_OPLOG_FRAME_HEADER));
        f[8] = MC_OPLOG_OBJ_SET;
        for (size_t i = MC_OPLOG_FRAME_HEADER; i < len; i++) {
            *seed = *seed * 1103515245u + 12345u;
            if (random_bytes)
                f[i] = (uint8_t)(*seed >> 16);
            else
                f[i] = ((i % 7) == 3) ? (uint8_t)(r * 13 + i) : (uint8_t)('k' + i % 5);
        }
        mc_store_le32(f + 4, mc_crc32c(0, f + 8, len - 8));
    }
}

START_TEST(test_columns_round_trip)
{
    static const size_t nrecs[] = {2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1023};
    uint32_t seed = 42;
    mc_buf_t coded, back, scratch;

    mc_buf_init(&coded);
    mc_buf_init(&back);
    mc_buf_init(&scratch);
    for (size_t len = MC_OPLOG_FRAME_HEADER; len <= 130; len += (len < 40) ? 1 : 13) {
        for (size_t k = 0; k < sizeof(nrecs) / sizeof(nrecs[0]); k++) {
            for (int rnd = 0; rnd < 2; rnd++) {
                size_t nrec = nrecs[k], n = len * nrec;
                uint8_t *d = malloc(n);
                ck_assert_ptr_nonnull(d);
                make_round(d, len, nrec, rnd, &seed);
                mc_buf_reset(&coded);
                mc_buf_reset(&back);
                ck_assert_msg(mc_ship_encode(&coded, &scratch, d, n) == 0,
                              "%zu records of %zu bytes should code", nrec, len);
                ck_assert_msg((coded.len > 8) && (((coded.data[8] & 0x7f) == 1) ||
                                                  ((coded.data[8] & 0x7f) == 2)),
                              "%zu records of one length (%zu bytes) should code as columns",
                              nrec, len);
                ck_assert_msg(mc_ship_decode(&back, &scratch, coded.data, coded.len) == 0,
                              "the coded %zu records of %zu bytes (%s) should decode", nrec,
                              len, rnd ? "random" : "repeated");
                ck_assert_msg((back.len == n) && (memcmp(back.data, d, n) == 0),
                              "%zu records of %zu bytes (%s) should decode to their bytes",
                              nrec, len, rnd ? "random" : "repeated");
                free(d);
            }
        }
    }
    mc_buf_cleanup(&coded);
    mc_buf_cleanup(&back);
    mc_buf_cleanup(&scratch);
}
END_TEST

/* 17 records of 27 bytes (eight and eight and one, three bytes past a
 * multiple of eight), as the column-at-a-time coder coded them. */
START_TEST(test_coded_bytes_unchanged)
{
    static const char want[] =
        "cb01000099998763011b000112870101061001651001611001621001631001641001651001611001"
        "621001631001641001651077dcdd266d38e52e65dc2d663de8255ee524e7eb3c672edb642fe23b6c"
        "27de6b24ff2af2e52a5de42d7a25e8255aed247d2ae550fddf642bfe276cdb226f24fb2e67dc2b6a"
        "08257e25e85d26ed3c652ee5582de63d64132b64df266b3ce72a5be42f663bec27521e5d2ae53c65"
        "2add602dfa256c25da6d28";
    uint8_t d[17 * 27];
    char got[2 * sizeof(want)];
    mc_buf_t out, scratch;

    for (int r = 0; r < 17; r++) {
        uint8_t *f = d + r * 27;
        mc_store_le32(f, 18);
        f[8] = MC_OPLOG_OBJ_SET;
        for (int i = 9; i < 27; i++)
            f[i] = (uint8_t)((i < 20) ? 'a' + (i % 5) : (r * 37 + i * 11) ^ (r >> 1));
        mc_store_le32(f + 4, mc_crc32c(0, f + 8, 19));
    }
    mc_buf_init(&out);
    mc_buf_init(&scratch);
    ck_assert_int_eq(mc_ship_encode(&out, &scratch, d, sizeof(d)), 0);
    ck_assert_msg(out.len * 2 == strlen(want), "the round should code to %zu bytes, not %zu",
                  strlen(want) / 2, out.len);
    for (size_t i = 0; i < out.len; i++)
        snprintf(got + 2 * i, 3, "%02x", out.data[i]);
    ck_assert_msg(strcmp(got, want) == 0, "the round should code to the same bytes as before: "
                  "%s, not %s", want, got);
    mc_buf_cleanup(&out);
    mc_buf_cleanup(&scratch);
}
END_TEST

/* @p nrec records as a batched put's are: a key ending in a decimal
 * counter, an offset @p stride bytes past the last, one byte of noise
 * every 97 records. */
static void make_counted(uint8_t *d, size_t nrec, uint64_t stride)
{
    for (size_t r = 0; r < nrec; r++) {
        uint8_t *f = d + r * 48;
        mc_store_le32(f, 48 - MC_OPLOG_FRAME_HEADER);
        f[8] = MC_OPLOG_OBJ_SET;
        memcpy(f + 9, "key-", 4);
        snprintf((char *)f + 13, 11, "%010u", (unsigned)(1000 + r) % 1000000000u);
        f[23] = (uint8_t)((r % 97 == 5) ? r : 0);
        mc_store_le64(f + 24, 4096);
        mc_store_le64(f + 32, 65536 + (uint64_t)r * stride);
        mc_store_le64(f + 40, 0x5151515151515151ull);
        mc_store_le32(f + 4, mc_crc32c(0, f + 8, 40));
    }
}

/* A counter and a fixed-stride offset code as second differences (mode
 * 2): their steps repeat, so a record costs a fraction of a byte, and the
 * value decodes to exactly its bytes. */
START_TEST(test_steps_columns)
{
    static const uint64_t strides[] = {4096, 4160, 1, 100003, 1u << 21};
    enum { NREC = 1024 };
    uint8_t *d = malloc(NREC * 48);
    mc_buf_t coded, back, scratch;

    ck_assert_ptr_nonnull(d);
    mc_buf_init(&coded);
    mc_buf_init(&back);
    mc_buf_init(&scratch);
    for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
        make_counted(d, NREC, strides[k]);
        mc_buf_reset(&coded);
        mc_buf_reset(&back);
        ck_assert_int_eq(mc_ship_encode(&coded, &scratch, d, NREC * 48), 0);
        ck_assert_msg((coded.data[8] & 0x7f) == 2, "stride %" PRIu64 ": counted records "
                      "should code with second differences (mode 2), not mode %u", strides[k],
                      coded.data[8]);
        /* mode 1 costs a byte a record for the counter's last digit and
         * another for the offset's low bytes: over 2 bytes a record; the
         * steps' runs repeat every ten records, and deflated they take a
         * fraction of a byte.  A stride whose bytes carry into each other
         * (4160, 100003) steps unevenly byte by byte: it round-trips,
         * smaller or not. */
        ck_assert_msg(coded.data[8] & 0x80, "stride %" PRIu64 ": the runs should deflate",
                      strides[k]);
        if (strides[k] % 256 == 0 || strides[k] == 1)
            ck_assert_msg(coded.len < NREC / 2, "stride %" PRIu64 ": 1024 counted records "
                          "should code to under 512 bytes, not %zu", strides[k], coded.len);
        ck_assert_int_eq(mc_ship_decode(&back, &scratch, coded.data, coded.len), 0);
        ck_assert_msg((back.len == NREC * 48) && (memcmp(back.data, d, NREC * 48) == 0),
                      "stride %" PRIu64 ": counted records should decode to their bytes",
                      strides[k]);
        /* a flipped bit anywhere past the header is refused (the value's
         * CRC catches what decodes to other bytes), unless it decodes to
         * the very records (a padding bit of the deflate stream) */
        for (size_t i = 9; i < coded.len; i++) {
            coded.data[i] ^= 0x10;
            mc_buf_reset(&back);
            ck_assert_msg((mc_ship_decode(&back, &scratch, coded.data, coded.len) != 0) ||
                              ((back.len == NREC * 48) && !memcmp(back.data, d, NREC * 48)),
                          "a value with byte %zu altered should be refused", i);
            coded.data[i] ^= 0x10;
        }
        /* cut anywhere, the value is refused */
        for (size_t cut = 0; cut < coded.len; cut += 7)
            ck_assert_msg(mc_ship_decode(&back, &scratch, coded.data, cut) != 0,
                          "a value cut to %zu of %zu bytes should be refused", cut, coded.len);
    }
    mc_buf_cleanup(&coded);
    mc_buf_cleanup(&back);
    mc_buf_cleanup(&scratch);
    free(d);
}
END_TEST

/* 40 counted records as mode 2 codes them, and as mode 2 deflated: the
 * standby reads what any leader wrote, so both decode to the records
 * (deflate's own bytes may differ between zlib versions: only the
 * decoding is pinned), and what this build codes decodes to them too. */
START_TEST(test_pinned_values_decode)
{
    static const char *const pinned[] = {
        /* mode 2 */
        "800700005880d8c60230000040000200000127bf02010627016b27016527017927012d27013027013027"
        "0130270130270130270130270131270130270130090101090103090101090230d10802f60a0802f60a08"
        "02f60a0d020505490110c00201102601010f01030f0101cf010151270151270151270151270151270151"
        "2701512701512700",
        /* mode 2 | 0x80: the same body deflated */
        "800700005880d8c6827d33606070606062606054dfcfc4c8a6ce98adce98aace58a9cea8abce6880810c"
        "21229c8c8c9c8ccc2092c9e02207d3372e18e6656265f5641438c0c428a0c6c8c8cfc8cccfc8789e9131"
        "501d2b620000"};
    uint8_t d[40 * 48], v[512];
    mc_buf_t out, scratch, back;

    make_counted(d, 40, 4096);
    mc_buf_init(&out);
    mc_buf_init(&scratch);
    mc_buf_init(&back);
    for (size_t k = 0; k < 2; k++) {
        size_t n = strlen(pinned[k]) / 2;
        for (size_t i = 0; i < n; i++) {
            unsigned byte;
            ck_assert_int_eq(sscanf(pinned[k] + 2 * i, "%2x", &byte), 1);
            v[i] = (uint8_t)byte;
        }
        ck_assert_uint_eq(v[8], k ? 0x82 : 0x02);
        mc_buf_reset(&back);
        ck_assert_msg(mc_ship_decode(&back, &scratch, v, n) == 0,
                      "the pinned value of mode %#x should decode", v[8]);
        ck_assert_msg((back.len == sizeof(d)) && (memcmp(back.data, d, sizeof(d)) == 0),
                      "the pinned value of mode %#x should decode to the records", v[8]);
    }
    ck_assert_int_eq(mc_ship_encode(&out, &scratch, d, sizeof(d)), 0);
    mc_buf_reset(&back);
    ck_assert_int_eq(mc_ship_decode(&back, &scratch, out.data, out.len), 0);
    ck_assert(memcmp(back.data, d, sizeof(d)) == 0);
    mc_buf_cleanup(&out);
    mc_buf_cleanup(&scratch);
    mc_buf_cleanup(&back);
}
END_TEST

Suite *mc_test_ship_suite(void)
{
    Suite *s  = suite_create("ship");
    TCase *tc = tcase_create("code");
    tcase_add_test(tc, test_columns_round_trip);
    tcase_add_test(tc, test_coded_bytes_unchanged);
    tcase_add_test(tc, test_steps_columns);
    tcase_add_test(tc, test_pinned_values_decode);
    suite_add_tcase(s, tc);
    return s;
}

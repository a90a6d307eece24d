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
                ck_assert_msg((coded.len > 8) && (coded.data[8] == 1),
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

Suite *mc_test_ship_suite(void)
{
    Suite *s  = suite_create("ship");
    TCase *tc = tcase_create("code");
    tcase_add_test(tc, test_columns_round_trip);
    tcase_add_test(tc, test_coded_bytes_unchanged);
    suite_add_tcase(s, tc);
    return s;
}

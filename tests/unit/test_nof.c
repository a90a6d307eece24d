/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File segments and the NoF parts of the wire (docs/transfer.md §13,
 * docs/tiers.md §8): the "file" backend on its own, a file segment served
 * by a real engine to a peer engine on loopback (bytes land in the file at
 * their offset, nothing outside the range is reached, the file never
 * grows), the engine's own process reaching it, and CONFIG's preferred NoF
 * segments through the codec with their bound.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_suites.h"
#include "common/buf.h"
#include "te_util.h"
#include "transfer/engine.h"
#include "transfer/file/file.h"
#include "transfer/proto.h"
#include "wire/wire.h"

#define SEG (3u * 1024u * 1024u + 100u) /* not a multiple of the 1 MiB pieces */

static char dir[] = "/tmp/mc-nof-XXXXXX";
static char path[256];

static void setup(void)
{
    ck_assert_msg(mkdtemp(dir) != NULL, "cannot make a temporary directory");
    snprintf(path, sizeof(path), "%s/seg.img", dir);
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
    memcpy(dir + strlen(dir) - 6, "XXXXXX", 6);
}

static void file_read(uint64_t off, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(pread(fd, buf, n, (off_t)off) == (ssize_t)n, "short read of the file");
    close(fd);
}

static uint64_t file_size(void)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

START_TEST(test_posix_backend)
{
    const mc_te_file_ops_t *ops = mc_te_file_ops_find("file");
    void *priv = NULL;
    uint8_t in[5000], out[5000];

    ck_assert_ptr_eq(ops, &mc_te_file_posix_ops);
    ck_assert_ptr_null(mc_te_file_ops_find("nvmeof"));
    ck_assert_status_eq(ops->open("relative", 4096, &priv), MC_INVALID_PARAMS);
    ck_assert_status_eq(ops->open(path, 0, &priv), MC_INVALID_PARAMS);
    ck_assert_status_eq(ops->open(dir, 4096, &priv), MC_INVALID_PARAMS);
    ck_assert_ptr_null(priv);
    ck_assert_status_ok(ops->open(path, 8192, &priv));
    ck_assert_uint_eq(file_size(), 8192);
    te_fill(in, sizeof(in), 3);
    ck_assert_status_ok(ops->write(priv, in, sizeof(in), 1000));
    ck_assert_status_ok(ops->read(priv, out, sizeof(out), 1000));
    ck_assert_msg(memcmp(in, out, sizeof(in)) == 0, "the bytes read back are not those written");
    /* a read past the end of the file is an error, never zeros passed off */
    ck_assert_status_eq(ops->read(priv, out, 100, 8150), MC_INVALID_READ);
    ops->close(priv);
    /* a longer file keeps its length and its bytes */
    ck_assert_status_ok(ops->open(path, 4096, &priv));
    ck_assert_uint_eq(file_size(), 8192);
    ck_assert_status_ok(ops->read(priv, out, 100, 1000));
    ck_assert_msg(memcmp(in, out, 100) == 0, "reopening changed the file");
    ops->close(priv);
}
END_TEST

START_TEST(test_file_segment_served)
{
    mc_te_h a = te_new("127.0.0.1", NULL), b = te_new("127.0.0.1", NULL);
    uint8_t *loc = malloc(SEG + 16), *chk = malloc(SEG);
    uint64_t base = 0, other = 0;
    mc_te_segment_id_t seg;
    struct {
        const char *what;
        uint64_t off; /* from base */
        uint64_t len;
    } bad[] = {
        {"crossing the end", SEG - 8, 16},
        {"one past the end", SEG, 1},
        {"before the start", (uint64_t)-8, 16},
        {"more than the segment", 0, SEG + 1},
    };

    ck_assert_status_eq(mc_te_file_reg(a, "relative.img", SEG, NULL, &base), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_file_reg(a, path, SEG, "nvmeof", &base), MC_NOT_SUPPORTED);
    ck_assert_status_eq(mc_te_file_reg(a, path, 0, NULL, &base), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_file_reg(a, path, SEG, NULL, &base));
    ck_assert_uint_ne(base, 0);
    ck_assert_uint_eq(file_size(), SEG);
    ck_assert_msg(!mc_te_mem_is_registered(a, loc, 16), "local memory is not registered");

    seg = te_open(b, a);
    /* a write straddling the 1 MiB pieces, then the whole segment back */
    te_fill(loc, SEG, 11);
    ck_assert_status_ok(te_xfer1(b, MC_TE_WRITE, loc + 5, base + 5, SEG - 5, seg));
    file_read(5, chk, SEG - 5);
    ck_assert_msg(memcmp(chk, loc + 5, SEG - 5) == 0,
                  "the written bytes are not in the file at their offsets");
    memset(chk, 0, SEG);
    ck_assert_status_ok(te_xfer1(b, MC_TE_READ, chk, base, SEG, seg));
    ck_assert_msg(memcmp(chk + 5, loc + 5, SEG - 5) == 0, "a read returned other bytes");

    /* gathered reads of rows (READV_STRIDED, then as a READV) come from
     * the file: two blocks' rows interleaved, then one block's half rows */
    {
        enum { ROWS = 400, ROW = 1000 };
        mc_te_range_t rg[2 * ROWS];
        struct iovec one = {chk, 2 * ROWS * ROW};
        uint64_t s0      = __atomic_load_n(&b->readvs_ops, __ATOMIC_RELAXED);

        ck_assert_status_ok(mc_te_mem_reg(b, chk, SEG, "", 0));
        for (int round = 0; round < 2; round++) {
            b->readvs_enabled = (round == 0); /* the second round sends a READV */
            for (size_t r = 0; r < ROWS; r++) {
                rg[2 * r]     = (mc_te_range_t){base + 7 + r * ROW, ROW};
                rg[2 * r + 1] = (mc_te_range_t){base + (1u << 20) + r * ROW, ROW};
            }
            memset(chk, 0, SEG);
            ck_assert_status_ok(mc_te_read_gather_gen(b, seg, 0, rg, 2 * ROWS, &one, 1));
            for (size_t r = 0; r < ROWS; r++)
                ck_assert_msg((memcmp(chk + 2 * r * ROW, loc + 7 + r * ROW, ROW) == 0) &&
                                  (memcmp(chk + (2 * r + 1) * ROW, loc + (1u << 20) + r * ROW,
                                          ROW) == 0),
                              "row %zu of a gathered read of the file (round %d)", r, round);
            for (size_t r = 0; r < ROWS; r++)
                rg[r] = (mc_te_range_t){base + 2 * (1u << 20) + r * 2 * ROW, ROW};
            one.iov_len = ROWS * ROW;
            memset(chk, 0, SEG);
            ck_assert_status_ok(mc_te_read_gather_gen(b, seg, 0, rg, ROWS, &one, 1));
            for (size_t r = 0; r < ROWS; r++)
                ck_assert_msg(memcmp(chk + r * ROW, loc + 2 * (1u << 20) + r * 2 * ROW, ROW) == 0,
                              "half row %zu of the file (round %d)", r, round);
            one.iov_len = 2 * ROWS * ROW;
        }
        b->readvs_enabled = 1;
        ck_assert_uint_eq(__atomic_load_n(&b->readvs_ops, __ATOMIC_RELAXED), s0 + 2);
        ck_assert_status_ok(mc_te_mem_dereg(b, chk));
    }

    /* nothing outside the range is read or written, the file does not grow */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(te_xfer1(b, MC_TE_READ, loc, base + bad[i].off, bad[i].len, seg) != MC_OK,
                      "a read %s was served", bad[i].what);
        ck_assert_msg(te_xfer1(b, MC_TE_WRITE, loc, base + bad[i].off, bad[i].len, seg) != MC_OK,
                      "a write %s was served", bad[i].what);
    }
    ck_assert_uint_eq(file_size(), SEG);

    /* the owner's own process reaches it through the backend too */
    mc_te_segment_id_t self = te_open(a, a);
    ck_assert_status_ok(te_xfer1(a, MC_TE_READ, chk, base + SEG - 64, 64, self));
    ck_assert_msg(memcmp(chk, loc + SEG - 64, 64) == 0, "a self read returned other bytes");
    ck_assert_msg(te_xfer1(a, MC_TE_READ, chk, base + SEG - 8, 16, self) != MC_OK,
                  "a self read past the end was served");

    /* a second segment of the same file size lies elsewhere; dereg rules */
    ck_assert_status_eq(mc_te_file_dereg(a, base + 1), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_te_file_dereg(a, base));
    ck_assert_status_eq(mc_te_file_dereg(a, base), MC_INVALID_PARAMS);
    ck_assert_msg(te_xfer1(b, MC_TE_READ, chk, base, 16, seg) != MC_OK,
                  "a read of an unregistered file segment was served");
    ck_assert_status_ok(mc_te_file_reg(a, path, SEG, "file", &other));
    ck_assert_status_ok(mc_te_file_dereg(a, other));
    mc_te_destroy(b);
    mc_te_destroy(a);
    free(loc);
    free(chk);
}
END_TEST

/* The engine frees a file segment still registered when it goes. */
START_TEST(test_file_segment_freed_with_engine)
{
    mc_te_h a     = te_new("127.0.0.1", NULL);
    uint64_t base = 0;
    ck_assert_status_ok(mc_te_file_reg(a, path, 4096, NULL, &base));
    mc_te_destroy(a);
}
END_TEST

START_TEST(test_config_preferred_nof_codec)
{
    mc_wire_put_start_req_t req, got;
    mc_str_t names[MC_WIRE_MAX_PREF_NOF + 1];
    mc_wire_header_t h;
    mc_buf_t b;
    mc_arena_t a;

    memset(&req, 0, sizeof(req));
    req.key                 = mc_str_from_cstr("k");
    req.length              = 10;
    req.config.replica_num  = 1;
    req.config.nof_replica_num = 2;
    for (size_t i = 0; i <= MC_WIRE_MAX_PREF_NOF; i++)
        names[i] = mc_str_from_cstr((i % 2) ? "10.0.0.2:12345" : "node-a:13000");
    req.config.preferred_nof_segments.v = names;
    req.config.preferred_nof_segments.n = MC_WIRE_MAX_PREF_NOF;

    mc_buf_init(&b);
    mc_arena_init(&a);
    mc_wire_encode_put_start_req(&b, 1, &req);
    ck_assert_int_eq(b.oom, 0);
    ck_assert_status_ok(mc_wire_header_unpack(b.data, &h));
    ck_assert_uint_le(h.body_len, mc_wire_req_max_body(MC_WIRE_OP_PUT_START));
    ck_assert_status_ok(mc_wire_decode_put_start_req(b.data + MC_WIRE_HEADER_SIZE, h.body_len,
                                                     &a, &got));
    ck_assert_uint_eq(got.config.nof_replica_num, 2);
    ck_assert_uint_eq(got.config.preferred_nof_segments.n, MC_WIRE_MAX_PREF_NOF);
    ck_assert_msg(mc_str_eq(got.config.preferred_nof_segments.v[1], names[1]),
                  "a preferred NoF segment changed on the way");

    /* one more than the bound does not decode */
    mc_buf_reset(&b);
    req.config.preferred_nof_segments.n = MC_WIRE_MAX_PREF_NOF + 1;
    mc_wire_encode_put_start_req(&b, 2, &req);
    ck_assert_status_ok(mc_wire_header_unpack(b.data, &h));
    ck_assert_status_eq(mc_wire_decode_put_start_req(b.data + MC_WIRE_HEADER_SIZE, h.body_len,
                                                     &a, &got),
                        MC_DESERIALIZE_FAIL);
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

Suite *mc_test_nof_suite(void)
{
    Suite *s = suite_create("nof");
    TCase *tc = tcase_create("file_segments");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_posix_backend);
    tcase_add_test(tc, test_file_segment_served);
    tcase_add_test(tc, test_file_segment_freed_with_engine);
    suite_add_tcase(s, tc);
    tc = tcase_create("wire");
    tcase_add_test(tc, test_config_preferred_nof_codec);
    suite_add_tcase(s, tc);
    return s;
}

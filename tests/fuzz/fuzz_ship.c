/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the shipped log's value code
 * (mooncake-master/durability/ship_code.c), which a standby runs on what
 * etcd hands back.
 *
 * The input is fed as a hostile value to mc_ship_decode (a copy of exactly
 * its length, so ASan sees any read past it); whatever it accepts must be
 * whole frames and must code and decode again to the same bytes.  The
 * input also drives a round trip: its bytes become records (one length
 * for all, or lengths of their own, their bodies cut from the input, each
 * byte repeated from the record before or not as the input says, so
 * columns change in every record, rarely or never); the round must code
 * and decode to exactly its bytes.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durability/ship.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_round_trip(const uint8_t *d, size_t n)
{
    mc_buf_t coded, back, scratch;

    mc_buf_init(&coded);
    mc_buf_init(&back);
    mc_buf_init(&scratch);
    if (mc_ship_encode(&coded, &scratch, d, n) != 0)
        abort(); /* whole frames always code */
    if (mc_ship_decode(&back, &scratch, coded.data, coded.len) != 0)
        abort();
    if ((back.len != n) || (memcmp(back.data, d, n) != 0))
        abort();
    mc_buf_cleanup(&coded);
    mc_buf_cleanup(&back);
    mc_buf_cleanup(&scratch);
}

static void hostile(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    mc_buf_t out, scratch;

    if (copy == NULL)
        abort();
    memcpy(copy, data, size);
    mc_buf_init(&out);
    mc_buf_init(&scratch);
    if (mc_ship_decode(&out, &scratch, copy, size) == 0) {
        /* accepted: whole frames (the decoder wrote each one's length) */
        for (size_t off = 0; off < out.len;) {
            if ((out.len - off < MC_OPLOG_FRAME_HEADER) ||
                (mc_oplog_frame_len(out.data + off) > out.len - off))
                abort();
            off += mc_oplog_frame_len(out.data + off);
        }
        if (out.len > 0)
            check_round_trip(out.data, out.len);
    }
    mc_buf_cleanup(&out);
    mc_buf_cleanup(&scratch);
    free(copy);
}

/* Records built from the input: byte 0 picks one length for all (its low
 * 7 bits + 9) or, with its top bit, a length per record; then per record
 * a byte of change mask, its bytes taken from the input where the mask's
 * bit (of the byte's position mod 8) is set and from the record before
 * elsewhere, or counting up by a step of the input's for the last one. */
static void built(const uint8_t *data, size_t size)
{
    size_t pos = 1, n = 0, cap = 8192, prev = 0, plen = 0;
    uint8_t *d;
    int mixed;
    size_t len0;

    if (size < 2)
        return;
    mixed = data[0] & 0x80;
    len0  = MC_OPLOG_FRAME_HEADER + (data[0] & 0x7f);
    if ((d = calloc(1, cap)) == NULL)
        abort();
    while ((pos + 2 <= size) && (n < cap - 256)) {
        size_t len = mixed ? MC_OPLOG_FRAME_HEADER + (data[pos++] & 0x7f) : len0;
        uint8_t mask = data[pos++], step = (uint8_t)(mask | 1);
        uint8_t *f = d + n;
        for (size_t i = MC_OPLOG_FRAME_HEADER; i < len; i++) {
            uint8_t before = (plen > i) ? d[prev + i] : 0;
            if ((mask >> (i % 8)) & 1)
                f[i] = (pos < size) ? data[pos++] : 0;
            else if (i + 1 == len)
                f[i] = (uint8_t)(before + step);
            else
                f[i] = before;
        }
        mc_store_le32(f, (uint32_t)(len - MC_OPLOG_FRAME_HEADER));
        f[8] = (uint8_t)(1 + mask % 9);
        mc_store_le32(f + 4, mc_crc32c(0, f + 8, len - 8));
        prev = n;
        plen = len;
        n += len;
    }
    if (n > 0)
        check_round_trip(d, n);
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hostile(data, size);
    built(data, size);
    return 0;
}

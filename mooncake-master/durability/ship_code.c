/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shipped log's value code (ship.h: mc_ship_encode, mc_ship_decode;
 * docs/ha.md).  Apart from ship.c so the decoder, which reads what etcd
 * hands back, can be fuzzed on its own (tests/fuzz/fuzz_ship.c).
 *
 * Owns: the coding of the records of a log key or a snapshot chunk.
 * May call: common/ (buffers, CRC), oplog.h's frame layout, zlib; nothing else.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "common/util.h"
#include "ship.h"

/*
 * etcd writes a log key's bytes to every member's disk through raft: its
 * throughput in bytes is what bounds the log's (a transaction of 11 KiB
 * took ~0.4 ms longer to commit than one of 1.5 KiB on three members,
 * bench/README.md).  Consecutive
 * records mostly repeat each other (tenant, owner, segment, sizes, key
 * prefixes), so a key's records go as the difference (XOR) from the
 * record before them, the differences run-length coded:
 *
 *   u32 raw length | u32 CRC32C of the raw bytes | u8 mode | ...
 *   mode 1, records of one length L (the usual case): varint L, then the
 *     differences column by column (byte 0 of every record, then byte 1,
 *     ...), so a field that changes in every record costs a byte a record
 *     and one that never changes costs nothing;
 *   mode 2, as mode 1 with some columns as second differences: varint L,
 *     a bitmap of ceil(L / 8) bytes (bit c & 7 of byte c / 8: column c),
 *     then the columns; a marked column holds, for each record, its
 *     byte's step from the record before minus the step before that
 *     (arithmetic mod 256, the first record's byte and step taken from a
 *     record of zeros).  A field that moves by the same amount in every
 *     record (an offset the allocator hands out a fixed size apart, a
 *     counter's last digit) then costs nothing but its carries, where its
 *     differences cost a byte a record.  The coder marks a column when
 *     that has fewer non-zero bytes, and writes mode 1 when it marks none;
 *   mode 0, records of mixed lengths: per record, varint length, then the
 *     differences in record order;
 *   the differences as runs: varint n_zero, varint n_literal, the literals;
 *   mode | 0x80: the body after the mode byte deflated (raw deflate, RFC
 *     1951): varint its length, then the stream.  The runs of records
 *     that count up repeat every few records (a decimal digit's carries
 *     every ten), which the runs alone cannot fold and deflate does: the
 *     benchmark's values shrink ~4.5x more.  Kept only when an eighth
 *     smaller.
 *
 * Each record's own CRC field is left out (read as 0) and recomputed by
 * the reader; the CRC of the whole raw piece is checked after decoding,
 * so a corrupt value is still refused.  The benchmark's records shrink
 * from 110 bytes to under half a byte (meta_bench: 31.5 MiB as 0.1 MiB). */

enum { CODE_ROWS = 0, CODE_COLUMNS = 1, CODE_COLUMNS_STEPS = 2, CODE_DEFLATED = 0x80 };

/* Deflating a body (maybe_deflate): bodies under DEFLATE_MIN bytes are
 * kept as they are; one over DEFLATE_PROBE is tried on that much first. */
#define DEFLATE_MIN   64u
#define DEFLATE_PROBE 4096u
#define DEFLATE_WBITS 10

static void put_varint(mc_buf_t *b, uint64_t v)
{
    uint8_t t[10];
    int n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    mc_buf_put_bytes(b, t, (size_t)n);
}

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        uint8_t c;
        if (*p >= end)
            return -1;
        c = *(*p)++;
        x |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Byte @p i of a record as coded: past its end, and its CRC field, read 0. */
static inline uint8_t coded_byte(const uint8_t *f, size_t len, size_t i)
{
    return ((f != NULL) && (i < len) && ((i < 4) || (i >= 8))) ? f[i] : 0;
}

/* Run-length code @p n difference bytes: zero runs, literal runs (a
 * literal run ends at three zeros in a row). */
static void put_runs(mc_buf_t *out, const uint8_t *x, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t z = i, l;
        uint64_t w;
        /* zeros are most of it: skip them a word at a time */
        while ((z + 8 <= n) && (memcpy(&w, x + z, 8), w == 0))
            z += 8;
        while ((z < n) && (x[z] == 0))
            z++;
        for (l = z; (l < n) && !((x[l] == 0) && ((l + 1 >= n) || (x[l + 1] == 0)) &&
                                 ((l + 2 >= n) || (x[l + 2] == 0)));
             l++)
            ;
        put_varint(out, z - i);
        put_varint(out, l - z);
        mc_buf_put_bytes(out, x + z, l - z);
        i = l;
    }
}

/* The inverse: exactly @p n bytes into @p x.  0 or -1. */
static int get_runs(const uint8_t **p, const uint8_t *end, uint8_t *x, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint64_t z, l;
        if ((get_varint(p, end, &z) != 0) || (get_varint(p, end, &l) != 0) || (z > n - i) ||
            (l > n - i - z) || (l > (uint64_t)(end - *p)))
            return -1;
        memset(x + i, 0, z);
        memcpy(x + i + z, *p, l);
        *p += l;
        i += z + l;
    }
    return 0;
}

/* Eight bytes as a little-endian word (one load on a little-endian CPU). */
static inline uint64_t load8(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    return mc_load_le64(p);
#endif
}

static inline void store8(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
    memcpy(p, &v, 8);
#else
    mc_store_le64(p, v);
#endif
}

/* The columns of @p nrec records of @p len bytes at @p d, each byte XORed
 * with the same byte of the record before (the first as it is): column c
 * of record r at x[c * nrec + r].  Eight records by eight bytes at a time,
 * transposed in registers (blocks of 4, 2 and 1 bytes swapped across rows
 * 4, 2 and 1 apart), so the records are read in order: a column at a time
 * read every record once per column, a cache line per byte, which was most
 * of the log thread's time. */
static void put_columns(uint8_t *x, const uint8_t *d, size_t len, size_t nrec)
{
    static const uint64_t mask[3] = {0x00000000ffffffffull, 0x0000ffff0000ffffull,
                                     0x00ff00ff00ff00ffull};
    size_t r = 0;
    for (; r + 8 <= nrec; r += 8) {
        size_t c = 0;
        for (; c + 8 <= len; c += 8) {
            const uint8_t *p = d + r * len + c;
            uint64_t a[8], prev = (r > 0) ? load8(p - len) : 0;
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                uint64_t v = load8(p + (size_t)i * len);
                a[i]       = v ^ prev;
                prev       = v;
            }
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++) {
                int dist = 4 >> k, sh = 32 >> k;
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) {
                    if (i & dist)
                        continue;
                    uint64_t t = ((a[i] >> sh) ^ a[i + dist]) & mask[k];
                    a[i] ^= t << sh;
                    a[i + dist] ^= t;
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                store8(x + (c + (size_t)i) * nrec + r, a[i]);
        }
        for (; c < len; c++)
            for (size_t i = r; i < r + 8; i++)
                x[c * nrec + i] = d[i * len + c] ^ (i ? d[(i - 1) * len + c] : 0);
    }
    for (; r < nrec; r++)
        for (size_t c = 0; c < len; c++)
            x[c * nrec + r] = d[r * len + c] ^ (r ? d[(r - 1) * len + c] : 0);
}

/* Column @p x (@p nrec differences) as second differences (mode 2), in
 * place when @p write; their non-zero bytes (and in @p nz_diff_p, when
 * given, the differences' own). */
static size_t column_steps(uint8_t *x, size_t nrec, int write, size_t *nz_diff_p)
{
    uint8_t b = 0, step = 0;
    size_t nz = 0, nzd = 0;
    for (size_t r = 0; r < nrec; r++) {
        uint8_t nb = (uint8_t)(b ^ x[r]), ns = (uint8_t)(nb - b), e = (uint8_t)(ns - step);
        nz += (e != 0);
        nzd += (x[r] != 0);
        if (write)
            x[r] = e;
        b    = nb;
        step = ns;
    }
    if (nz_diff_p != NULL)
        *nz_diff_p = nzd;
    return nz;
}

/* The inverse of column_steps (write): back to differences. */
static void column_unsteps(uint8_t *x, size_t nrec)
{
    uint8_t b = 0, step = 0;
    for (size_t r = 0; r < nrec; r++) {
        uint8_t nb;
        step = (uint8_t)(step + x[r]);
        nb   = (uint8_t)(b + step);
        x[r] = (uint8_t)(nb ^ b);
        b    = nb;
    }
}

/* Mark in @p bm (zeroed, ceil(@p len / 8) bytes) the columns of @p x
 * (put_columns) that code smaller as second differences, and rewrite
 * them; the count marked.  A column is tried only when its first 64
 * records change in 16 or more (most columns are all zeros: one look at
 * eight words each). */
static size_t pick_steps(uint8_t *x, size_t len, size_t nrec, uint8_t *bm)
{
    size_t marked = 0, head = MC_MIN(nrec, (size_t)64);
    for (size_t c = 0; c < len; c++) {
        uint8_t *col = x + c * nrec;
        size_t nz = 0, nz_steps;
        for (size_t r = 0; r < head; r++)
            nz += (col[r] != 0);
        if (nz * 4 < head)
            continue;
        nz_steps = column_steps(col, nrec, 0, &nz);
        if (nz_steps + nrec / 64 >= nz)
            continue;
        column_steps(col, nrec, 1, NULL);
        bm[c / 8] |= (uint8_t)(1u << (c % 8));
        marked++;
    }
    return marked;
}

/* Code @p n bytes of whole records into @p out (@p scratch: a buffer of
 * the caller's).  -1 when they are not whole records (a record split over
 * keys goes raw) or out of memory. */
/* The body of a coded value (its mode byte first) onto @p out. */
static void encode_body(mc_buf_t *out, uint8_t *x, const uint8_t *d, size_t n, size_t len0,
                        size_t nrec, int same)
{
    if (same && (nrec > 1)) {
        uint8_t *bm = x + n;
        size_t nbm  = (len0 + 7) / 8;
        put_columns(x, d, len0, nrec);
        memset(x + 4 * nrec, 0, 4 * nrec); /* the CRC fields (len0 >= 9) */
        memset(bm, 0, nbm);
        if (pick_steps(x, len0, nrec, bm) > 0) {
            mc_buf_put_u8(out, CODE_COLUMNS_STEPS);
            put_varint(out, len0);
            mc_buf_put_bytes(out, bm, nbm);
        } else {
            mc_buf_put_u8(out, CODE_COLUMNS);
            put_varint(out, len0);
        }
        put_runs(out, x, n);
        return;
    }
    mc_buf_put_u8(out, CODE_ROWS);
    const uint8_t *prev = NULL;
    size_t plen         = 0;
    for (size_t off = 0; off < n;) {
        const uint8_t *f = d + off;
        size_t len       = mc_oplog_frame_len(f);
        for (size_t k = 0; k < len; k++)
            x[k] = coded_byte(f, len, k) ^ coded_byte(prev, plen, k);
        put_varint(out, len);
        put_runs(out, x, len);
        prev = f;
        plen = len;
        off += len;
    }
}

/* Raw deflate of @p n bytes at @p in into @p z (reset first, room
 * reserved for all of it); the length, or 0 when it failed or did not fit
 * in @p max bytes. */
static size_t deflate_into(mc_buf_t *z, const uint8_t *in, size_t n, size_t max)
{
    z_stream zs;
    uint8_t *o;
    size_t len = 0;

    memset(&zs, 0, sizeof(zs));
    mc_buf_reset(z);
    if ((o = mc_buf_reserve(z, max)) == NULL)
        return 0;
    /* level 1, a 1 KiB window, small tables: the runs repeat within a few
     * dozen bytes, and the state is set up for every value */
    if (deflateInit2(&zs, 1, Z_DEFLATED, -DEFLATE_WBITS, 2, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    zs.next_in   = (Bytef *)(uintptr_t)in;
    zs.avail_in  = (uInt)n;
    zs.next_out  = o;
    zs.avail_out = (uInt)max;
    if (deflate(&zs, Z_FINISH) == Z_STREAM_END)
        len = zs.total_out;
    deflateEnd(&zs);
    return len;
}

/* Replace the body at @p at in @p out (its mode byte first) with its
 * deflated form when that is at least an eighth smaller.  A body of more
 * than DEFLATE_PROBE bytes is first tried on that much: records that do
 * not repeat (random keys) are not deflated whole. */
static void maybe_deflate(mc_buf_t *out, mc_buf_t *z, size_t at)
{
    const uint8_t *body;
    size_t blen = out->len - at - 1, zlen;

    if ((blen < DEFLATE_MIN) || (blen > MC_SHIP_PIECE * 2u))
        return;
    if ((blen > DEFLATE_PROBE) &&
        (((zlen = deflate_into(z, out->data + at + 1, DEFLATE_PROBE, DEFLATE_PROBE)) == 0) ||
         (zlen > DEFLATE_PROBE / 4 * 3)))
        return;
    body = out->data + at + 1;
    if ((zlen = deflate_into(z, body, blen, blen - blen / 8)) == 0)
        return;
    out->data[at] |= CODE_DEFLATED;
    out->len = at + 1;
    put_varint(out, blen);
    mc_buf_put_bytes(out, z->data, zlen);
}

int mc_ship_encode(mc_buf_t *out, mc_buf_t *scratch, const uint8_t *d, size_t n)
{
    size_t off, len0 = 0, nrec = 0, at;
    int same = 1;
    uint8_t *x;

    for (off = 0; off < n; nrec++) {
        size_t len;
        if ((n - off < MC_OPLOG_FRAME_HEADER) || ((len = mc_oplog_frame_len(d + off)) > n - off))
            return -1;
        if (off == 0)
            len0 = len;
        same &= (len == len0);
        off += len;
    }
    mc_buf_reset(scratch);
    /* the differences, and room for mode 2's bitmap */
    if ((x = mc_buf_reserve(scratch, n + len0 / 8 + 1)) == NULL)
        return -1;
    mc_buf_put_u32(out, (uint32_t)n);
    mc_buf_put_u32(out, mc_crc32c(0, d, n));
    at = out->len;
    encode_body(out, x, d, n, len0, nrec, same);
    if (out->oom)
        return -1;
    maybe_deflate(out, scratch, at);
    return out->oom ? -1 : 0;
}

/* Decode a coded value (@p n bytes at @p p) onto the end of @p out.  -1
 * when it is malformed or its CRC does not match (nothing appended). */
static int decode_body(uint8_t *d, uint8_t *x, uint32_t raw_len, uint8_t mode,
                       const uint8_t *p, const uint8_t *end);

/* Inflate exactly @p n bytes into @p o from the @p zn bytes at @p z, all
 * of them one raw deflate stream: 0, or -1. */
static int inflate_exact(uint8_t *o, size_t n, const uint8_t *z, size_t zn)
{
    z_stream zs;
    int rc;

    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, -15) != Z_OK)
        return -1;
    zs.next_in   = (Bytef *)(uintptr_t)z;
    zs.avail_in  = (uInt)zn;
    zs.next_out  = o;
    zs.avail_out = (uInt)n;
    rc           = inflate(&zs, Z_FINISH);
    rc           = ((rc == Z_STREAM_END) && (zs.avail_in == 0) && (zs.total_out == n)) ? 0 : -1;
    inflateEnd(&zs);
    return rc;
}

int mc_ship_decode(mc_buf_t *out, mc_buf_t *scratch, const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    uint32_t raw_len, crc;
    uint8_t *d, *x, mode;

    if (n < 9)
        return -1;
    raw_len = mc_load_le32(p);
    crc     = mc_load_le32(p + 4);
    mode    = p[8];
    p += 9;
    mc_buf_reset(scratch);
    /* reserve appends: undone below unless the value decodes */
    /* a value carries at least one record */
    if ((raw_len < MC_OPLOG_FRAME_HEADER) || (raw_len > MC_SHIP_PIECE) ||
        ((d = mc_buf_reserve(out, raw_len)) == NULL))
        return -1;
    if (mode & CODE_DEFLATED) {
        /* the body deflated: its length, then the stream */
        uint64_t blen;
        if ((get_varint(&p, end, &blen) != 0) || (blen > 2u * (uint64_t)raw_len + 64) ||
            ((x = mc_buf_reserve(scratch, raw_len + (size_t)blen)) == NULL) ||
            (inflate_exact(x + raw_len, (size_t)blen, p, (size_t)(end - p)) != 0)) {
            out->len -= raw_len;
            return -1;
        }
        p   = x + raw_len;
        end = p + blen;
        mode &= (uint8_t)~CODE_DEFLATED;
    } else if ((x = mc_buf_reserve(scratch, raw_len)) == NULL) {
        out->len -= raw_len;
        return -1;
    }
    if ((decode_body(d, x, raw_len, mode, p, end) != 0) || (mc_crc32c(0, d, raw_len) != crc)) {
        out->len -= raw_len;
        return -1;
    }
    return 0;
}

/* The records of a coded value, after its header, into @p d. */
static int decode_body(uint8_t *d, uint8_t *x, uint32_t raw_len, uint8_t mode,
                       const uint8_t *p, const uint8_t *end)
{
    size_t at = 0;
    uint64_t len;

    if ((mode == CODE_COLUMNS) || (mode == CODE_COLUMNS_STEPS)) {
        const uint8_t *bm = NULL;
        size_t nrec;
        if ((get_varint(&p, end, &len) != 0) || (len < MC_OPLOG_FRAME_HEADER) ||
            (len > raw_len) || (raw_len % len != 0))
            return -1;
        if (mode == CODE_COLUMNS_STEPS) {
            if ((size_t)(end - p) < (len + 7) / 8)
                return -1;
            bm = p;
            p += (len + 7) / 8;
        }
        if ((get_runs(&p, end, x, raw_len) != 0) || (p != end))
            return -1;
        nrec = raw_len / len;
        for (size_t c = 0; (bm != NULL) && (c < len); c++)
            if (bm[c / 8] & (1u << (c % 8)))
                column_unsteps(x + c * nrec, nrec);
        for (size_t r = 0; r < nrec; r++) {
            uint8_t *f = d + r * len, *pf = r ? f - len : NULL;
            for (size_t c = 0; c < len; c++)
                f[c] = x[c * nrec + r] ^ coded_byte(pf, len, c);
            mc_store_le32(f + 4, mc_crc32c(0, f + 8, len - 8));
        }
        at = raw_len;
    } else if (mode == CODE_ROWS) {
        const uint8_t *prev = NULL;
        size_t plen         = 0;
        while (p < end) {
            uint8_t *f;
            if ((get_varint(&p, end, &len) != 0) || (len < MC_OPLOG_FRAME_HEADER) ||
                (len > raw_len - at) || (get_runs(&p, end, x, len) != 0))
                return -1;
            f = d + at;
            for (size_t k = 0; k < len; k++)
                f[k] = x[k] ^ coded_byte(prev, plen, k);
            mc_store_le32(f + 4, mc_crc32c(0, f + 8, len - 8));
            prev = f;
            plen = len;
            at += len;
        }
    } else {
        return -1;
    }
    return (at == raw_len) ? 0 : -1;
}


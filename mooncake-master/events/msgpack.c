/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MessagePack encoder and token reader (msgpack.h).  The format's byte
 * layouts are from the MessagePack specification; all multi-byte numbers
 * are big-endian.
 *
 * Owns: the MessagePack encoder and token reader.
 * May call: msgpack.h only.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "msgpack.h"

void mc_mp_init(mc_mp_buf_t *b)
{
    memset(b, 0, sizeof(*b));
}

void mc_mp_cleanup(mc_mp_buf_t *b)
{
    if (b == NULL)
        return;
    free(b->data);
    mc_mp_init(b);
}

void mc_mp_reset(mc_mp_buf_t *b)
{
    b->len = 0;
    b->oom = 0;
}

/* Room for @p n more bytes; 0, or -1 (and b->oom) when it cannot grow. */
static int mp_reserve(mc_mp_buf_t *b, size_t n)
{
    size_t cap;
    uint8_t *p;

    if (b->oom)
        return -1;
    if (n <= b->cap - b->len)
        return 0;
    cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2) {
            b->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    p = realloc(b->data, cap);
    if (p == NULL) {
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap  = cap;
    return 0;
}

/* Type byte @p tag, then the low @p width bytes of @p v, big-endian. */
static void mp_put(mc_mp_buf_t *b, uint8_t tag, uint64_t v, unsigned width)
{
    if (mp_reserve(b, 1 + width) != 0)
        return;
    b->data[b->len++] = tag;
    for (unsigned i = width; i > 0; i--)
        b->data[b->len++] = (uint8_t)(v >> (8 * (i - 1)));
}

/* A header with a fix form (tag | n below @p fix_max) or 16/32-bit forms. */
static void mp_header(mc_mp_buf_t *b, uint32_t n, uint8_t fix_tag, uint32_t fix_max,
                      uint8_t tag16, uint8_t tag32)
{
    if (n <= fix_max)
        mp_put(b, (uint8_t)(fix_tag | n), 0, 0);
    else if (n <= 0xffff)
        mp_put(b, tag16, n, 2);
    else
        mp_put(b, tag32, n, 4);
}

void mc_mp_array(mc_mp_buf_t *b, uint32_t n)
{
    mp_header(b, n, 0x90, 15, 0xdc, 0xdd);
}

void mc_mp_map(mc_mp_buf_t *b, uint32_t n)
{
    mp_header(b, n, 0x80, 15, 0xde, 0xdf);
}

void mc_mp_nil(mc_mp_buf_t *b)
{
    mp_put(b, 0xc0, 0, 0);
}

void mc_mp_bool(mc_mp_buf_t *b, int v)
{
    mp_put(b, v ? 0xc3 : 0xc2, 0, 0);
}

void mc_mp_uint(mc_mp_buf_t *b, uint64_t v)
{
    if (v <= 0x7f)
        mp_put(b, (uint8_t)v, 0, 0);
    else if (v <= 0xff)
        mp_put(b, 0xcc, v, 1);
    else if (v <= 0xffff)
        mp_put(b, 0xcd, v, 2);
    else if (v <= 0xffffffffu)
        mp_put(b, 0xce, v, 4);
    else
        mp_put(b, 0xcf, v, 8);
}

void mc_mp_int(mc_mp_buf_t *b, int64_t v)
{
    if (v >= 0)
        mc_mp_uint(b, (uint64_t)v);
    else if (v >= -32)
        mp_put(b, (uint8_t)(int8_t)v, 0, 0); /* negative fixint 0xe0..0xff */
    else if (v >= INT8_MIN)
        mp_put(b, 0xd0, (uint64_t)v, 1);
    else if (v >= INT16_MIN)
        mp_put(b, 0xd1, (uint64_t)v, 2);
    else if (v >= INT32_MIN)
        mp_put(b, 0xd2, (uint64_t)v, 4);
    else
        mp_put(b, 0xd3, (uint64_t)v, 8);
}

void mc_mp_str(mc_mp_buf_t *b, const char *s, size_t len)
{
    if (len > UINT32_MAX) {
        b->oom = 1; /* no format holds it; never happens with keys */
        return;
    }
    if (len <= 31)
        mp_put(b, (uint8_t)(0xa0 | len), 0, 0);
    else if (len <= 0xff)
        mp_put(b, 0xd9, len, 1);
    else if (len <= 0xffff)
        mp_put(b, 0xda, len, 2);
    else
        mp_put(b, 0xdb, len, 4);
    if ((len == 0) || (mp_reserve(b, len) != 0))
        return;
    memcpy(b->data + b->len, s, len);
    b->len += len;
}

void mc_mp_cstr(mc_mp_buf_t *b, const char *s)
{
    mc_mp_str(b, s, strlen(s));
}

/* ---- reading ------------------------------------------------------------------ */

/* The @p width-byte big-endian number at p[*pos], if the input has it. */
static int mp_get(const uint8_t *p, size_t len, size_t *pos, unsigned width, uint64_t *v)
{
    uint64_t x = 0;

    if (len - *pos < width)
        return -1;
    for (unsigned i = 0; i < width; i++)
        x = (x << 8) | p[(*pos)++];
    *v = x;
    return 0;
}

int mc_mp_read(const uint8_t *p, size_t len, size_t *off, mc_mp_token_t *t)
{
    size_t pos = *off;
    uint64_t v = 0;
    uint8_t c;
    unsigned width = 0;

    if (pos >= len)
        return -1;
    c = p[pos++];
    memset(t, 0, sizeof(*t));
    if (c <= 0x7f) {
        t->type = MC_MP_UINT;
        t->u    = c;
    } else if (c >= 0xe0) {
        t->type = MC_MP_INT;
        t->i    = (int8_t)c;
    } else if ((c & 0xf0) == 0x80) {
        t->type = MC_MP_MAP;
        t->n    = c & 0x0f;
    } else if ((c & 0xf0) == 0x90) {
        t->type = MC_MP_ARRAY;
        t->n    = c & 0x0f;
    } else if ((c & 0xe0) == 0xa0) {
        t->type = MC_MP_STR;
        t->n    = c & 0x1f;
    } else {
        switch (c) {
        case 0xc0: t->type = MC_MP_NIL; break;
        case 0xc2:
        case 0xc3: t->type = MC_MP_BOOL; t->u = c & 1; break;
        case 0xcc: case 0xcd: case 0xce: case 0xcf:
            width = 1u << (c - 0xcc);
            if (mp_get(p, len, &pos, width, &v) != 0)
                return -1;
            t->type = MC_MP_UINT;
            t->u    = v;
            break;
        case 0xd0: case 0xd1: case 0xd2: case 0xd3:
            width = 1u << (c - 0xd0);
            if (mp_get(p, len, &pos, width, &v) != 0)
                return -1;
            /* sign-extend the width-byte two's complement value */
            if ((width < 8) && (v >> (8 * width - 1)))
                v |= ~(uint64_t)0 << (8 * width);
            if ((int64_t)v >= 0) {
                t->type = MC_MP_UINT;
                t->u    = v;
            } else {
                t->type = MC_MP_INT;
                t->i    = (int64_t)v;
            }
            break;
        case 0xd9: case 0xda: case 0xdb:
            width = 1u << (c - 0xd9);
            if (mp_get(p, len, &pos, width, &v) != 0)
                return -1;
            t->type = MC_MP_STR;
            t->n    = (uint32_t)v;
            break;
        case 0xdc: case 0xdd:
            if (mp_get(p, len, &pos, 2u << (c - 0xdc), &v) != 0)
                return -1;
            t->type = MC_MP_ARRAY;
            t->n    = (uint32_t)v;
            break;
        case 0xde: case 0xdf:
            if (mp_get(p, len, &pos, 2u << (c - 0xde), &v) != 0)
                return -1;
            t->type = MC_MP_MAP;
            t->n    = (uint32_t)v;
            break;
        default:
            return -1; /* float, bin, ext, 0xc1: not written by mc_mp_* */
        }
    }
    if (t->type == MC_MP_STR) {
        if (len - pos < t->n)
            return -1;
        t->str = (const char *)p + pos;
        pos += t->n;
    }
    *off = pos;
    return 0;
}

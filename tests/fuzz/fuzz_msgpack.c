/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the KV events' MessagePack encoder round trip
 * (mooncake-master/events/msgpack.c) and the key -> seq_hash rule.
 *
 * The input is a program: each byte picks a value kind and the following
 * bytes its content.  The values are encoded with mc_mp_*, read back with
 * mc_mp_read, and every token must equal what was written, in order, and
 * end exactly at the end of the encoding.  The raw input is also fed to
 * the reader as hostile bytes (it must stop inside the buffer), and to
 * mc_kv_event_seq_hash, whose answer must agree with a strtoull check.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../mooncake-master/events/kv_events.h"
#include "../../mooncake-master/events/msgpack.h"

#define MAX_VALUES 512

typedef struct {
    mc_mp_type_t type;
    uint64_t u;
    int64_t i;
    size_t off; /* STR: offset into the input */
    uint32_t n;
} want_t;

static uint64_t take(const uint8_t *d, size_t n, size_t *pos, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; (i < bytes) && (*pos < n); i++)
        v = (v << 8) | d[(*pos)++];
    return v;
}

static void check_seq_hash(const uint8_t *d, size_t n)
{
    char buf[64];
    uint64_t h;
    int ok;

    if (n >= sizeof(buf))
        return;
    memcpy(buf, d, n);
    buf[n] = '\0';
    ok     = mc_kv_event_seq_hash((const char *)d, n, &h);
    if (memchr(d, '\0', n) != NULL || n == 0) {
        if (ok)
            abort();
        return;
    }
    {
        const char *s = buf;
        int base      = 10;
        char *end;
        unsigned long long v;
        if ((s[0] == '0') && ((s[1] == 'x') || (s[1] == 'X'))) {
            s += 2;
            base = 16;
        }
        errno = 0;
        v     = strtoull(s, &end, base);
        if (ok != ((end != s) && (*end == '\0') && (errno != ERANGE)))
            abort();
        if (ok && (h != v))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static want_t want[MAX_VALUES];
    mc_mp_buf_t b;
    size_t pos = 0, nw = 0, off = 0;
    mc_mp_token_t t;

    check_seq_hash(d, n);

    /* hostile bytes: the reader stops inside the buffer */
    while (mc_mp_read(d, n, &off, &t) == 0) {
        if (off > n)
            abort();
        if ((t.type == MC_MP_STR) && ((const uint8_t *)t.str + t.n > d + n))
            abort();
    }

    mc_mp_init(&b);
    while ((pos < n) && (nw < MAX_VALUES)) {
        uint8_t op = d[pos++];
        want_t *w  = &want[nw++];
        memset(w, 0, sizeof(*w));
        switch (op % 7) {
        case 0:
            w->type = MC_MP_NIL;
            mc_mp_nil(&b);
            break;
        case 1:
            w->type = MC_MP_BOOL;
            w->u    = op >> 7;
            mc_mp_bool(&b, (int)w->u);
            break;
        case 2: { /* unsigned of 1..8 bytes */
            w->type = MC_MP_UINT;
            w->u    = take(d, n, &pos, 1u + (op >> 3) % 8);
            mc_mp_uint(&b, w->u);
            break;
        }
        case 3: { /* signed of 1..8 bytes */
            int64_t v = (int64_t)take(d, n, &pos, 1u + (op >> 3) % 8);
            if (op & 0x80)
                v = (int64_t)~(uint64_t)v; /* -v - 1 without overflow */
            mc_mp_int(&b, v);
            if (v >= 0) {
                w->type = MC_MP_UINT;
                w->u    = (uint64_t)v;
            } else {
                w->type = MC_MP_INT;
                w->i    = v;
            }
            break;
        }
        case 4: { /* string: a length byte (or two), then that many input bytes */
            size_t len = (size_t)take(d, n, &pos, (op & 0x80) ? 2 : 1);
            if (len > n - pos)
                len = n - pos;
            w->type = MC_MP_STR;
            w->off  = pos;
            w->n    = (uint32_t)len;
            mc_mp_str(&b, (const char *)d + pos, len);
            pos += len;
            break;
        }
        case 5: /* array header; the count need not match what follows */
            w->type = MC_MP_ARRAY;
            w->n    = (uint32_t)take(d, n, &pos, (op & 0x80) ? 4 : 1);
            mc_mp_array(&b, w->n);
            break;
        default:
            w->type = MC_MP_MAP;
            w->n    = (uint32_t)take(d, n, &pos, (op & 0x80) ? 4 : 2);
            mc_mp_map(&b, w->n);
            break;
        }
    }
    if (mc_mp_failed(&b))
        abort();
    off = 0;
    for (size_t i = 0; i < nw; i++) {
        const want_t *w = &want[i];
        if (mc_mp_read(b.data, b.len, &off, &t) != 0)
            abort();
        if (t.type != w->type)
            abort();
        switch (t.type) {
        case MC_MP_BOOL:
        case MC_MP_UINT:
            if (t.u != w->u)
                abort();
            break;
        case MC_MP_INT:
            if (t.i != w->i)
                abort();
            break;
        case MC_MP_STR:
            if ((t.n != w->n) || ((t.n > 0) && (memcmp(t.str, d + w->off, t.n) != 0)))
                abort();
            break;
        case MC_MP_ARRAY:
        case MC_MP_MAP:
            if (t.n != w->n)
                abort();
            break;
        default:
            break;
        }
    }
    if (off != b.len)
        abort();
    mc_mp_cleanup(&b);
    return 0;
}

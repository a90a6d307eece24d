/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte buffers and the per-message arena.  See buf.h for the contracts;
 * the readers are the first line of defence against hostile frames.
 */
#include "config.h"

#include <stdlib.h>

#include "common/buf.h"

void mc_buf_init(mc_buf_t *b)
{
    b->data = NULL;
    b->len  = 0;
    b->cap  = 0;
    b->oom  = 0;
}

void mc_buf_cleanup(mc_buf_t *b)
{
    free(b->data);
    mc_buf_init(b);
}

void mc_buf_reset(mc_buf_t *b)
{
    b->len = 0;
    b->oom = 0;
}

uint8_t *mc_buf_reserve(mc_buf_t *b, size_t n)
{
    if (b->oom)
        return NULL;
    if (n > SIZE_MAX - b->len) {
        b->oom = 1;
        return NULL;
    }
    /* an empty buffer gets its storage on the first reserve, even of 0
     * bytes: the pointer returned is never NULL + 0 */
    if ((b->len + n > b->cap) || (b->data == NULL)) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap < b->len + n) {
            if (ncap > SIZE_MAX / 2) {
                ncap = b->len + n;
                break;
            }
            ncap *= 2;
        }
        uint8_t *nd = realloc(b->data, ncap);
        if (nd == NULL) {
            b->oom = 1;
            return NULL;
        }
        b->data = nd;
        b->cap  = ncap;
    }
    uint8_t *p = b->data + b->len;
    b->len += n;
    return p;
}

void mc_buf_put_bytes(mc_buf_t *b, const void *p, size_t n)
{
    uint8_t *d = mc_buf_reserve(b, n);
    if ((d != NULL) && (n > 0))
        memcpy(d, p, n);
}

void mc_buf_put_u8(mc_buf_t *b, uint8_t v)
{
    uint8_t *d = mc_buf_reserve(b, 1);
    if (d != NULL)
        d[0] = v;
}

void mc_buf_put_u16(mc_buf_t *b, uint16_t v)
{
    uint8_t *d = mc_buf_reserve(b, 2);
    if (d != NULL)
        mc_store_le16(d, v);
}

void mc_buf_put_u32(mc_buf_t *b, uint32_t v)
{
    uint8_t *d = mc_buf_reserve(b, 4);
    if (d != NULL)
        mc_store_le32(d, v);
}

void mc_buf_put_u64(mc_buf_t *b, uint64_t v)
{
    uint8_t *d = mc_buf_reserve(b, 8);
    if (d != NULL)
        mc_store_le64(d, v);
}

void mc_buf_put_str(mc_buf_t *b, mc_str_t s)
{
    mc_buf_put_u32(b, s.len);
    mc_buf_put_bytes(b, s.ptr, s.len);
}

const uint8_t *mc_rbuf_get_bytes(mc_rbuf_t *r, size_t n)
{
    if (r->err || (n > r->left)) {
        r->err = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

uint8_t mc_rbuf_get_u8(mc_rbuf_t *r)
{
    const uint8_t *p = mc_rbuf_get_bytes(r, 1);
    return p ? p[0] : 0;
}

uint16_t mc_rbuf_get_u16(mc_rbuf_t *r)
{
    const uint8_t *p = mc_rbuf_get_bytes(r, 2);
    return p ? mc_load_le16(p) : 0;
}

uint32_t mc_rbuf_get_u32(mc_rbuf_t *r)
{
    const uint8_t *p = mc_rbuf_get_bytes(r, 4);
    return p ? mc_load_le32(p) : 0;
}

uint64_t mc_rbuf_get_u64(mc_rbuf_t *r)
{
    const uint8_t *p = mc_rbuf_get_bytes(r, 8);
    return p ? mc_load_le64(p) : 0;
}

mc_str_t mc_rbuf_get_str(mc_rbuf_t *r, uint32_t max_len)
{
    mc_str_t s = {"", 0};
    uint32_t len = mc_rbuf_get_u32(r);
    if (r->err)
        return s;
    if (len > max_len) {
        r->err = 1;
        return s;
    }
    const uint8_t *p = mc_rbuf_get_bytes(r, len);
    if (p == NULL)
        return s;
    s.ptr = (const char *)p;
    s.len = len;
    return s;
}

/* ---- arena ------------------------------------------------------------- */

struct mc_arena_chunk {
    mc_arena_chunk_t *next;
    size_t size;
    _Alignas(16) uint8_t data[];
};

#define MC_ARENA_CHUNK 8192

void mc_arena_init(mc_arena_t *a)
{
    a->head  = NULL;
    a->used  = 0;
    a->total = 0;
}

void mc_arena_cleanup(mc_arena_t *a)
{
    mc_arena_chunk_t *c = a->head;
    while (c != NULL) {
        mc_arena_chunk_t *n = c->next;
        free(c);
        c = n;
    }
    mc_arena_init(a);
}

void mc_arena_reset(mc_arena_t *a)
{
    /* Keep the newest chunk if it is the standard size; free the rest. */
    mc_arena_chunk_t *keep = a->head;
    if ((keep != NULL) && (keep->size == MC_ARENA_CHUNK)) {
        mc_arena_chunk_t *c = keep->next;
        while (c != NULL) {
            mc_arena_chunk_t *n = c->next;
            free(c);
            c = n;
        }
        keep->next = NULL;
        a->used    = 0;
        a->total   = 0;
        return;
    }
    mc_arena_cleanup(a);
}

void *mc_arena_alloc(mc_arena_t *a, size_t size)
{
    if (size > PTRDIFF_MAX)
        return NULL; /* no object is that big; rounding up could wrap */
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    if ((a->head == NULL) || (size > a->head->size - a->used)) {
        size_t csize = size > MC_ARENA_CHUNK ? size : MC_ARENA_CHUNK;
        if (csize > SIZE_MAX - sizeof(mc_arena_chunk_t))
            return NULL;
        mc_arena_chunk_t *c = malloc(sizeof(*c) + csize);
        if (c == NULL)
            return NULL;
        c->size = csize;
        c->next = a->head;
        a->head = c;
        a->used = 0;
    }
    void *p = a->head->data + a->used;
    a->used += size;
    a->total += size;
    memset(p, 0, size);
    return p;
}

void *mc_arena_calloc(mc_arena_t *a, size_t nmemb, size_t size)
{
    if ((size != 0) && (nmemb > SIZE_MAX / size))
        return NULL;
    return mc_arena_alloc(a, nmemb * size);
}

char *mc_str_dup(mc_str_t s)
{
    char *p = malloc((size_t)s.len + 1);
    if (p != NULL) {
        if (s.len > 0)
            memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
    }
    return p;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte buffers for the wire codecs.
 *
 * mc_buf_t is a growable little-endian writer.  mc_rbuf_t is a bounded
 * reader over untrusted bytes: every getter checks the remaining length
 * first and, on a short read, sets a sticky error and returns zeroes, so a
 * decoder can read a whole message and test rb->err once at the end.  No
 * getter ever reads past the end of the input.  mc_arena_t is a bump
 * allocator whose lifetime is one decoded message.
 */
#ifndef MC_COMMON_BUF_H
#define MC_COMMON_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Borrowed byte string; not NUL-terminated. */
typedef struct mc_str {
    const char *ptr;
    uint32_t len;
} mc_str_t;

static inline mc_str_t mc_str_from_cstr(const char *s)
{
    mc_str_t r = {s ? s : "", s ? (uint32_t)strlen(s) : 0};
    return r;
}

static inline int mc_str_eq(mc_str_t a, mc_str_t b)
{
    return (a.len == b.len) && ((a.len == 0) || (memcmp(a.ptr, b.ptr, a.len) == 0));
}

/* A malloc'd NUL-terminated copy of @p s (NULL on OOM). */
char *mc_str_dup(mc_str_t s);

typedef struct mc_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    int oom; /* sticky: an allocation failed, contents are incomplete */
} mc_buf_t;

void mc_buf_init(mc_buf_t *b);
void mc_buf_cleanup(mc_buf_t *b);
void mc_buf_reset(mc_buf_t *b);
/* Reserve room for @p n more bytes; returns a pointer to them or NULL. */
uint8_t *mc_buf_reserve(mc_buf_t *b, size_t n);
void mc_buf_put_bytes(mc_buf_t *b, const void *p, size_t n);
void mc_buf_put_u8(mc_buf_t *b, uint8_t v);
void mc_buf_put_u16(mc_buf_t *b, uint16_t v);
void mc_buf_put_u32(mc_buf_t *b, uint32_t v);
void mc_buf_put_u64(mc_buf_t *b, uint64_t v);
/* u32 length then the bytes. */
void mc_buf_put_str(mc_buf_t *b, mc_str_t s);

typedef struct mc_rbuf {
    const uint8_t *p;
    size_t left;
    int err;
} mc_rbuf_t;

static inline void mc_rbuf_init(mc_rbuf_t *r, const void *p, size_t n)
{
    r->p    = (const uint8_t *)p;
    r->left = n;
    r->err  = 0;
}

uint8_t mc_rbuf_get_u8(mc_rbuf_t *r);
uint16_t mc_rbuf_get_u16(mc_rbuf_t *r);
uint32_t mc_rbuf_get_u32(mc_rbuf_t *r);
uint64_t mc_rbuf_get_u64(mc_rbuf_t *r);
/* Borrow @p n bytes; NULL (and err set) if fewer remain. */
const uint8_t *mc_rbuf_get_bytes(mc_rbuf_t *r, size_t n);
/* u32 length then bytes, borrowed from the input; err if len > max_len. */
mc_str_t mc_rbuf_get_str(mc_rbuf_t *r, uint32_t max_len);

/* Little-endian load/store helpers for fixed headers. */
static inline void mc_store_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void mc_store_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void mc_store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t mc_load_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t mc_load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline uint64_t mc_load_le64(const uint8_t *p)
{
    return (uint64_t)mc_load_le32(p) | ((uint64_t)mc_load_le32(p + 4) << 32);
}

/* Bump allocator: allocations live until mc_arena_reset/cleanup. */
typedef struct mc_arena_chunk mc_arena_chunk_t;
typedef struct mc_arena {
    mc_arena_chunk_t *head;
    size_t used;  /* bytes used in head */
    size_t total; /* bytes handed out since the last reset */
} mc_arena_t;

void mc_arena_init(mc_arena_t *a);
void mc_arena_reset(mc_arena_t *a);
void mc_arena_cleanup(mc_arena_t *a);
/* 16-byte aligned, zeroed; NULL on overflow or out of memory. */
void *mc_arena_alloc(mc_arena_t *a, size_t size);
/* nmemb * size with overflow check. */
void *mc_arena_calloc(mc_arena_t *a, size_t nmemb, size_t size);

#endif /* MC_COMMON_BUF_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small MessagePack encoder, and a token reader for tests and fuzzing
 * (docs/events.md §2).
 *
 * The KV cache event publisher (kv_events.c) writes maps, arrays, str,
 * nil, bool and integers; nothing else of the format is needed, so this
 * is ~200 lines instead of a library dependency.  Integers take the
 * smallest encoding that holds the value, as every MessagePack encoder
 * does (msgpack-c, Python's msgpack): a u64 of 5 is one byte, a u64 of
 * 2^63 is 0xcf + 8 bytes, a negative int64 is 0xd0..0xd3.  So a reader
 * sees the value, not the C type it came from.
 *
 * The writer grows its own buffer; after an allocation failure every
 * later call does nothing and mc_mp_failed() says so, so a caller checks
 * once at the end.  The reader (mc_mp_read) takes hostile input: it
 * never reads past @c len and reports a truncated or unknown byte.
 *
 * Owns: the MessagePack interface (events/).
 * May call: nothing.
 */
#ifndef MC_MASTER_MSGPACK_H
#define MC_MASTER_MSGPACK_H

#include <stddef.h>
#include <stdint.h>

/* A growable output buffer. */
typedef struct mc_mp_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    int oom;            /* an allocation failed: the content is incomplete */
} mc_mp_buf_t;

/* An empty buffer (no allocation until the first write). */
void mc_mp_init(mc_mp_buf_t *b);
/* Free the bytes; the buffer may be initialised again.  NULL is fine. */
void mc_mp_cleanup(mc_mp_buf_t *b);
/* Forget the content, keep the allocation (and clear a failure). */
void mc_mp_reset(mc_mp_buf_t *b);
/* 1 when an allocation failed since the last init/reset. */
static inline int mc_mp_failed(const mc_mp_buf_t *b)
{
    return b->oom;
}

/* Headers: the next @p n values (array) or 2 * @p n values (map: key,
 * value, ...) follow. */
void mc_mp_array(mc_mp_buf_t *b, uint32_t n);
void mc_mp_map(mc_mp_buf_t *b, uint32_t n);
void mc_mp_nil(mc_mp_buf_t *b);
void mc_mp_bool(mc_mp_buf_t *b, int v);
/* Non-negative integers: positive fixint, uint8, uint16, uint32, uint64. */
void mc_mp_uint(mc_mp_buf_t *b, uint64_t v);
/* Signed: mc_mp_uint for v >= 0, else negative fixint, int8 ... int64. */
void mc_mp_int(mc_mp_buf_t *b, int64_t v);
/* UTF-8 text of @p len bytes (fixstr, str8, str16, str32).  The bytes are
 * copied as given: the caller passes valid UTF-8. */
void mc_mp_str(mc_mp_buf_t *b, const char *s, size_t len);
/* mc_mp_str of a NUL-terminated string. */
void mc_mp_cstr(mc_mp_buf_t *b, const char *s);

/* ---- reading (tests, fuzzing) --------------------------------------------- */

typedef enum mc_mp_type {
    MC_MP_NIL,
    MC_MP_BOOL,
    MC_MP_UINT,   /* u */
    MC_MP_INT,    /* i, always negative (non-negative values read as UINT) */
    MC_MP_STR,    /* str, n bytes (not NUL-terminated) */
    MC_MP_ARRAY,  /* n values follow */
    MC_MP_MAP     /* n pairs follow */
} mc_mp_type_t;

/* One token. */
typedef struct mc_mp_token {
    mc_mp_type_t type;
    uint64_t u;        /* UINT; BOOL (0/1) */
    int64_t i;         /* INT */
    const char *str;   /* STR: points into the input */
    uint32_t n;        /* STR length, ARRAY/MAP count */
} mc_mp_token_t;

/*
 * Read the token at *@p off of @p p[0..len) and advance *@p off past it
 * (a STR's bytes included; an ARRAY's or MAP's elements are the next
 * tokens).  Returns 0, or -1 when the input ends inside the token or its
 * first byte is a type this reader does not know (float, bin, ext); then
 * *@p off is unchanged.
 */
int mc_mp_read(const uint8_t *p, size_t len, size_t *off, mc_mp_token_t *t);

#endif /* MC_MASTER_MSGPACK_H */

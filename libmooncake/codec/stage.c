/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The JSON documents of a structured object (include/mooncake/codec.h,
 * mc_codec_stage_json()).
 *
 * A DataProto put describes every payload twice -- once in the metadata
 * payload (its encoding, dtype and shape), once in the manifest (its key,
 * size and chunks) -- and names every key.  Written by an interpreter that
 * is a few hundred small string operations a put, each a cache miss after
 * the put's large copies; here it is one pass over plain descriptors.
 * The bytes must be the ones Python's json module gives for the same
 * documents (readers of upstream's layout parse them, and
 * tests/python/test_dataproto_put_bytes.py pins them): compact
 * separators, keys in insertion order, strings escaped as
 * json.encoder.encode_basestring (metadata) and encode_basestring_ascii
 * (manifest) escape them.
 *
 * Every output goes through a bounded writer that counts what it would
 * write and stores only what fits, so one pass gives both the sizes and,
 * when the caller's buffers are large enough, the bytes.
 */
#include "config.h"

#include <string.h>

#include <mooncake/codec.h>
#include <mooncake/store.h>

#include "common/log.h"
#include "common/util.h"

/* The member descriptions' entry in the metadata document (the Python
 * package's STRUCTURED_FIELD_SPECS_KEY, docs/structured.md). */
#define FIELD_SPECS_KEY "__mooncake_structured_fields__"

/* An output: bytes are stored while they fit, and always counted. */
typedef struct {
    char *buf;
    size_t cap;
    size_t len;
    int overflow; /* the count passed SIZE_MAX */
} sink_t;

static void put(sink_t *s, const char *p, size_t k)
{
    if (k > SIZE_MAX - s->len) {
        s->overflow = 1;
        return;
    }
    if ((s->buf != NULL) && (s->len + k <= s->cap))
        memcpy(s->buf + s->len, p, k);
    s->len += k;
}

static void puts_(sink_t *s, const char *p)
{
    put(s, p, strlen(p));
}

/* Decimal digits of @p v at the end of tmp[24]; returns where they start
 * (a few hundred numbers a document: no printf machinery). */
static char *u64_digits(char *tmp, uint64_t v)
{
    char *p = tmp + 24;

    do {
        *--p = (char)('0' + (v % 10));
        v /= 10;
    } while (v != 0);
    return p;
}

static void put_u64(sink_t *s, uint64_t v)
{
    char tmp[24], *p = u64_digits(tmp, v);

    put(s, p, (size_t)(tmp + 24 - p));
}

/* (shapes are checked >= 0) */
static void put_i64(sink_t *s, int64_t v)
{
    put_u64(s, (uint64_t)v);
}

/* "/chunk/<i>" into suffix[40]; its length. */
static size_t chunk_suffix(char *suffix, uint64_t i)
{
    char tmp[24], *p = u64_digits(tmp, i);
    size_t k = (size_t)(tmp + 24 - p);

    memcpy(suffix, "/chunk/", 7);
    memcpy(suffix + 7, p, k);
    return 7 + k;
}

/* The code point of the UTF-8 sequence at p[0..n) (strict: no overlong
 * form, no surrogate, nothing past U+10FFFF) and its length in *len_p;
 * -1 for a byte sequence that is not UTF-8. */
static int32_t utf8_next(const unsigned char *p, size_t n, size_t *len_p)
{
    uint32_t c = p[0], min;
    size_t k;

    if (c < 0x80) {
        *len_p = 1;
        return (int32_t)c;
    }
    if ((c & 0xE0) == 0xC0) {
        k = 2, c &= 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        k = 3, c &= 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        k = 4, c &= 0x07, min = 0x10000;
    } else {
        return -1;
    }
    if (k > n)
        return -1;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return -1;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if ((c < min) || (c > 0x10FFFF) || ((c >= 0xD800) && (c <= 0xDFFF)))
        return -1;
    *len_p = k;
    return (int32_t)c;
}

/* Whether p[0..n) is UTF-8; else a detail naming @p what. */
static int utf8_ok(const char *p, size_t n, const char *what)
{
    for (size_t i = 0, k; i < n; i += k) {
        if (utf8_next((const unsigned char *)p + i, n - i, &k) < 0) {
            mc_set_error_detail("%s is not UTF-8 (byte %zu)", what, i);
            return 0;
        }
    }
    return 1;
}

static void put_u_escape(sink_t *s, uint32_t c)
{
    static const char hex[] = "0123456789abcdef";
    char e[6] = {'\\', 'u', hex[(c >> 12) & 15], hex[(c >> 8) & 15], hex[(c >> 4) & 15],
                 hex[c & 15]};

    put(s, e, sizeof(e));
}

/* UTF-8 p[0..n) (checked by the caller) escaped as Python's json
 * escapes a string, without the quotes: ", \ and the control characters
 * always (\n \r \t \b \f by name, the rest as \u00XX); with @p ascii also
 * every character outside ' '..'~', as \uXXXX (a surrogate pair past the
 * BMP). */
static void put_esc(sink_t *s, const char *p, size_t n, int ascii)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0, run = 0;

    while (i < n) {
        unsigned char b = u[i];
        const char *named = NULL;
        size_t k = 1;
        int32_t c;

        if ((b >= 0x20) && (b != '"') && (b != '\\') && ((b < 0x7F) || !ascii)) {
            i++; /* copied as is, with the run it belongs to */
            continue;
        }
        put(s, p + run, i - run);
        switch (b) {
        case '"': named = "\\\""; break;
        case '\\': named = "\\\\"; break;
        case '\n': named = "\\n"; break;
        case '\r': named = "\\r"; break;
        case '\t': named = "\\t"; break;
        case '\b': named = "\\b"; break;
        case '\f': named = "\\f"; break;
        default: break;
        }
        if (named != NULL) {
            put(s, named, 2);
        } else if (b < 0x80) {
            put_u_escape(s, b);
        } else if ((c = utf8_next(u + i, n - i, &k)) < 0x10000) {
            put_u_escape(s, (uint32_t)c);
        } else {
            uint32_t v = (uint32_t)c - 0x10000;

            put_u_escape(s, 0xD800 | (v >> 10));
            put_u_escape(s, 0xDC00 | (v & 0x3FF));
        }
        i += k;
        run = i;
    }
    put(s, p + run, n - run);
}

/* A JSON string: put_esc() quoted. */
static void put_str(sink_t *s, const char *p, size_t n, int ascii)
{
    put(s, "\"", 1);
    put_esc(s, p, n, ascii);
    put(s, "\"", 1);
}

static void put_shape(sink_t *s, const int64_t *shape, uint32_t ndim)
{
    put(s, "[", 1);
    for (uint32_t d = 0; d < ndim; d++) {
        if (d > 0)
            put(s, ",", 1);
        put_i64(s, shape[d]);
    }
    put(s, "]", 1);
}

/* The checks of one member; a detail naming it otherwise. */
static int member_ok(const mc_codec_member_t *m, size_t i)
{
    if ((m->name == NULL) || (m->name_len == 0)) {
        mc_set_error_detail("member %zu has no name", i);
        return 0;
    }
    for (size_t k = 0; k < m->name_len; k++) {
        unsigned char b = (unsigned char)m->name[k];
        if ((b < 0x20) || (b == 0x7F) || (b == '/')) {
            mc_set_error_detail("member %zu's name holds '/' or a control character", i);
            return 0;
        }
    }
    if (!utf8_ok(m->name, m->name_len, "a member name"))
        return 0;
    if (m->kind == MC_CODEC_MEMBER_BYTES)
        return 1;
    if ((m->kind != MC_CODEC_MEMBER_NDARRAY) && (m->kind != MC_CODEC_MEMBER_TENSOR)) {
        mc_set_error_detail("member %zu has an unknown kind %u", i, m->kind);
        return 0;
    }
    if ((m->dtype == NULL) || (m->dtype_len == 0)) {
        mc_set_error_detail("member %zu has no dtype", i);
        return 0;
    }
    if (!utf8_ok(m->dtype, m->dtype_len, "a member's dtype"))
        return 0;
    if ((m->ndim > MC_CODEC_MAX_NDIM) || ((m->ndim > 0) && (m->shape == NULL))) {
        mc_set_error_detail("member %zu has %u dimensions and %s shape", i, m->ndim,
                            (m->shape == NULL) ? "no" : "a");
        return 0;
    }
    for (uint32_t d = 0; d < m->ndim; d++) {
        if (m->shape[d] < 0) {
            mc_set_error_detail("member %zu has a negative dimension", i);
            return 0;
        }
    }
    return 1;
}

/* The keys of one payload, its manifest entry's "chunks" list, and its
 * mc_codec_chunk_t entries.  @p base: "<prefix>/<object id>"; @p tail:
 * "/meta" or "/buffer/<name>". */
typedef struct {
    sink_t *manifest;
    sink_t *keys;
    mc_codec_stage_out_t *out;
    const char *base;
    size_t base_len;
} keyer_t;

/* One key: <base><tail>[/chunk/<i>], to the keys and, escaped, to the
 * manifest. */
static void put_key(keyer_t *k, const char *tail, size_t tail_len, int chunked, uint64_t i,
                    size_t member, uint64_t off, uint64_t size)
{
    char suffix[40];
    size_t slen = 0, start = k->keys->len;

    if (chunked)
        slen = chunk_suffix(suffix, i);
    put(k->keys, k->base, k->base_len);
    put(k->keys, tail, tail_len);
    put(k->keys, suffix, slen);
    put(k->keys, "", 1);
    if ((k->out->chunks != NULL) && (k->out->nchunks < k->out->chunks_cap)) {
        mc_codec_chunk_t *c = &k->out->chunks[k->out->nchunks];

        c->member = member;
        c->offset = off;
        c->size = size;
        c->key_offset = start;
        c->key_len = k->base_len + tail_len + slen;
    }
    k->out->nchunks++;
}

/* A key as a JSON string of the manifest (ASCII-escaped). */
static void put_key_json(keyer_t *k, const char *tail, size_t tail_len, int chunked, uint64_t i)
{
    char suffix[40];
    size_t slen = 0;

    if (chunked)
        slen = chunk_suffix(suffix, i);
    put(k->manifest, "\"", 1);
    put_esc(k->manifest, k->base, k->base_len, 1);
    put_esc(k->manifest, tail, tail_len, 1);
    put(k->manifest, suffix, slen);
    put(k->manifest, "\"", 1);
}

/* {"key":K,"bytes":N,"chunks":[...]} without its closing brace, and the
 * payload's chunks.  @p one_key: a tensor object, never cut. */
static void put_payload(keyer_t *k, const char *tail, size_t tail_len, size_t member,
                        uint64_t nbytes, uint64_t chunk_bytes, int one_key)
{
    sink_t *m = k->manifest;
    int chunked = !one_key && (nbytes > chunk_bytes);

    puts_(m, "{\"key\":");
    put_key_json(k, tail, tail_len, 0, 0);
    puts_(m, ",\"bytes\":");
    put_u64(m, nbytes);
    puts_(m, ",\"chunks\":[");
    if (!chunked && (nbytes > 0)) {
        puts_(m, "{\"key\":");
        put_key_json(k, tail, tail_len, 0, 0);
        puts_(m, ",\"bytes\":");
        put_u64(m, nbytes);
        put(m, "}", 1);
        put_key(k, tail, tail_len, 0, 0, member, 0, nbytes);
    } else if (chunked) {
        uint64_t count = nbytes / chunk_bytes + ((nbytes % chunk_bytes) != 0);

        for (uint64_t i = 0; i < count; i++) {
            uint64_t off = i * chunk_bytes;
            uint64_t size = (nbytes - off < chunk_bytes) ? nbytes - off : chunk_bytes;

            if (i > 0)
                put(m, ",", 1);
            puts_(m, "{\"key\":");
            put_key_json(k, tail, tail_len, 1, i);
            puts_(m, ",\"bytes\":");
            put_u64(m, size);
            put(m, "}", 1);
            put_key(k, tail, tail_len, 1, i, member, off, size);
        }
    }
    put(m, "]", 1);
}

MC_API mc_status_t mc_codec_stage_json(const char *prefix, size_t prefix_len,
                                       const char *object_id, size_t object_id_len,
                                       const char *meta_head, size_t meta_head_len,
                                       const mc_codec_member_t *members, size_t n,
                                       uint64_t chunk_bytes, uint32_t version,
                                       mc_codec_stage_out_t *out)
{
    sink_t meta, man, keys;
    char base[4096], tail[4096];
    keyer_t k;

    if ((out == NULL) || (chunk_bytes == 0) || ((members == NULL) && (n > 0)) ||
        (prefix == NULL) || (object_id == NULL) || (meta_head == NULL)) {
        mc_set_error_detail("mc_codec_stage_json: a NULL argument or a zero chunk size");
        return MC_INVALID_PARAMS;
    }
    if ((meta_head_len < 3) || (meta_head[0] != '{') || (meta_head[meta_head_len - 1] != '}')) {
        mc_set_error_detail("the metadata head is not a JSON object of at least one entry");
        return MC_INVALID_PARAMS;
    }
    if (!utf8_ok(prefix, prefix_len, "the key prefix") ||
        !utf8_ok(object_id, object_id_len, "the object id") ||
        !utf8_ok(meta_head, meta_head_len, "the metadata head"))
        return MC_INVALID_PARAMS;
    if (prefix_len + object_id_len + 1 > sizeof(base)) {
        mc_set_error_detail("the key prefix and object id are too long (%zu bytes)",
                            prefix_len + object_id_len + 1);
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0, nkeys = 0; i < n; i++) {
        if (!member_ok(&members[i], i))
            return MC_INVALID_PARAMS;
        /* a hostile size and chunk must not make the writer loop for ages */
        nkeys += (members[i].kind == MC_CODEC_MEMBER_TENSOR)
                    ? 1
                    : (size_t)MC_MIN(members[i].nbytes / chunk_bytes + 1, MC_CODEC_MAX_KEYS + 1);
        if (nkeys > MC_CODEC_MAX_KEYS) {
            mc_set_error_detail("the members need more than %d keys", MC_CODEC_MAX_KEYS);
            return MC_INVALID_PARAMS;
        }
        if (members[i].name_len + 8 > sizeof(tail)) {
            mc_set_error_detail("member %zu's name is too long (%zu bytes)", i,
                                members[i].name_len);
            return MC_INVALID_PARAMS;
        }
    }
    memcpy(base, prefix, prefix_len);
    base[prefix_len] = '/';
    memcpy(base + prefix_len + 1, object_id, object_id_len);

    /* the metadata: the caller's document, the member descriptions last */
    meta = (sink_t){out->meta, out->meta_cap, 0, 0};
    put(&meta, meta_head, meta_head_len - 1);
    puts_(&meta, ",\"" FIELD_SPECS_KEY "\":{");
    for (size_t i = 0; i < n; i++) {
        const mc_codec_member_t *m = &members[i];

        if (i > 0)
            put(&meta, ",", 1);
        put_str(&meta, m->name, m->name_len, 0);
        if (m->kind == MC_CODEC_MEMBER_BYTES) {
            puts_(&meta, ":{\"encoding\":\"bytes\"}");
            continue;
        }
        puts_(&meta, (m->kind == MC_CODEC_MEMBER_NDARRAY) ? ":{\"encoding\":\"ndarray\",\"dtype\":"
                                                           : ":{\"encoding\":\"torch_tensor\","
                                                             "\"dtype\":");
        put_str(&meta, m->dtype, m->dtype_len, 0);
        puts_(&meta, ",\"shape\":");
        put_shape(&meta, m->shape, m->ndim);
        if (m->kind == MC_CODEC_MEMBER_TENSOR) {
            puts_(&meta, ",\"element_size\":");
            put_u64(&meta, m->element_size);
        }
        put(&meta, "}", 1);
    }
    puts_(&meta, "}}");

    /* the manifest, and the keys in write order: the metadata's, then each
     * member's */
    man = (sink_t){out->manifest, out->manifest_cap, 0, 0};
    keys = (sink_t){out->keys, out->keys_cap, 0, 0};
    out->nchunks = 0;
    k = (keyer_t){&man, &keys, out, base, prefix_len + 1 + object_id_len};
    puts_(&man, "{\"version\":");
    put_u64(&man, version);
    puts_(&man, ",\"layout\":\"bundle\",\"object_id\":");
    put_str(&man, object_id, object_id_len, 1);
    puts_(&man, ",\"meta\":");
    put_payload(&k, "/meta", 5, n, meta.len, chunk_bytes, 0);
    puts_(&man, "},\"buffers\":{");
    for (size_t i = 0; i < n; i++) {
        const mc_codec_member_t *m = &members[i];
        size_t tlen = 8 + m->name_len;

        memcpy(tail, "/buffer/", 8);
        memcpy(tail + 8, m->name, m->name_len);
        if (i > 0)
            put(&man, ",", 1);
        put_str(&man, m->name, m->name_len, 1);
        put(&man, ":", 1);
        put_payload(&k, tail, tlen, i, m->nbytes, chunk_bytes,
                    m->kind == MC_CODEC_MEMBER_TENSOR);
        if (m->kind == MC_CODEC_MEMBER_TENSOR) {
            puts_(&man, ",\"kind\":\"tensor\",\"dtype\":");
            put_str(&man, m->dtype, m->dtype_len, 1);
            puts_(&man, ",\"shape\":");
            put_shape(&man, m->shape, m->ndim);
            puts_(&man, ",\"metadata_bytes\":");
            put_u64(&man, m->header_bytes);
        }
        put(&man, "}", 1);
    }
    puts_(&man, "}}");

    out->meta_len = meta.len;
    out->manifest_len = man.len;
    out->keys_len = keys.len;
    if (meta.overflow || man.overflow || keys.overflow) {
        mc_set_error_detail("the structured object's documents overflow a size_t");
        return MC_INVALID_PARAMS;
    }
    if ((meta.len > out->meta_cap) || (man.len > out->manifest_cap) ||
        (keys.len > out->keys_cap) || (out->nchunks > out->chunks_cap) ||
        ((out->chunks == NULL) && (out->nchunks > 0))) {
        mc_set_error_detail("mc_codec_stage_json: an output is too small (metadata %zu, "
                            "manifest %zu, keys %zu bytes, %zu chunks)", meta.len, man.len,
                            keys.len, out->nchunks);
        return MC_BUFFER_OVERFLOW;
    }
    return MC_OK;
}

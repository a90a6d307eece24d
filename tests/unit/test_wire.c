/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Master RPC codecs.  The tests are generated from MC_WIRE_MESSAGES, so a
 * message added to the table is covered without touching this file:
 *
 *  - every request and OK response is filled with non-trivial values,
 *    encoded, its header checked, decoded and compared field by field;
 *    an error response carries the status and nothing else;
 *  - every strict prefix of every valid body fails with
 *    MC_DESERIALIZE_FAIL, and so does one trailing byte (each attempt gets
 *    an exactly-sized heap copy, so valgrind or ASan sees any over-read);
 *  - list counts that lie, oversized and empty keys, bad headers;
 *  - seeded random and mutated bodies go to every decoder; a body that
 *    decodes must re-encode to the same bytes (the encoding is canonical),
 *    and the arena never grows beyond a small multiple of the input.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "wire/wire.h"

/* ck_assert_msg() writes a checkpoint even on success; hot loops use this. */
#define require(cond, ...)             \
    do {                               \
        if (!(cond))                   \
            ck_abort_msg(__VA_ARGS__); \
    } while (0)

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- filling messages with values ------------------------------------- */

typedef struct fill {
    mc_arena_t *arena;
    uint64_t seed;
} fill_t;

static uint64_t nx(fill_t *f) { return rng_next(&f->seed); }

/* Bytes of every value, NUL and 0xff included. */
static mc_str_t fill_bytes(fill_t *f, uint32_t min, uint32_t max)
{
    uint32_t n = min + (uint32_t)(nx(f) % (max - min + 1));
    char *p    = mc_arena_alloc(f->arena, n);
    ck_assert_ptr_nonnull(p);
    for (uint32_t i = 0; i < n; i++)
        p[i] = (char)nx(f);
    mc_str_t s = {p, n};
    return s;
}

static void fill_U8(fill_t *f, uint8_t *v) { *v = (uint8_t)(nx(f) | 0x81); }
static void fill_U32(fill_t *f, uint32_t *v) { *v = (uint32_t)nx(f) | 0x80000001u; }
static void fill_U64(fill_t *f, uint64_t *v) { *v = nx(f) | 0x8000000000000001ull; }
static void fill_I32(fill_t *f, int32_t *v) { *v = -(int32_t)(nx(f) % 100000) - 1; }
static void fill_I64(fill_t *f, int64_t *v) { *v = (int64_t)(nx(f) | 0x8000000000000000ull); }
static void fill_STR(fill_t *f, mc_str_t *v) { *v = fill_bytes(f, 1, 40); }
static void fill_KEY(fill_t *f, mc_str_t *v) { *v = fill_bytes(f, 1, 64); }

static void fill_UUID(fill_t *f, mc_uuid_t *v)
{
    v->hi = nx(f);
    v->lo = nx(f);
}

static void fill_SEGMENT(fill_t *f, mc_wire_segment_t *v)
{
    fill_UUID(f, &v->id);
    fill_STR(f, &v->name);
    fill_U64(f, &v->base);
    fill_U64(f, &v->size);
    fill_STR(f, &v->protocol);
}

#define FILL_LIST_(l_, n_, fn)                                         \
    do {                                                               \
        (l_)->n = (n_);                                                \
        (l_)->v = mc_arena_calloc(f->arena, (l_)->n, sizeof(*(l_)->v)); \
        ck_assert_ptr_nonnull((l_)->v);                                \
        for (uint32_t i_ = 0; i_ < (l_)->n; i_++)                      \
            fn(f, &(l_)->v[i_]);                                       \
    } while (0)

static void fill_SEGMENTS(fill_t *f, mc_wire_segment_list_t *v)
{
    FILL_LIST_(v, 3, fill_SEGMENT);
}

static void fill_replica(fill_t *f, mc_wire_replica_t *v)
{
    fill_U64(f, &v->id);
    fill_U8(f, &v->status);
    fill_U8(f, &v->type);
    fill_U64(f, &v->addr);
    fill_U64(f, &v->size);
    fill_STR(f, &v->segment);
    fill_UUID(f, &v->segment_id);
}

static void fill_REPLICAS(fill_t *f, mc_wire_replica_list_t *v)
{
    FILL_LIST_(v, 1 + (uint32_t)(nx(f) % 3), fill_replica);
}

static void fill_result(fill_t *f, mc_wire_result_t *v)
{
    fill_I32(f, &v->status);
    fill_U64(f, &v->size);
    fill_REPLICAS(f, &v->replicas);
}

static void fill_RESULTS(fill_t *f, mc_wire_result_list_t *v)
{
    FILL_LIST_(v, 3, fill_result);
    v->v[1].replicas.n = 0; /* an entry without replicas */
    v->v[1].replicas.v = NULL;
    v->v[1].status     = MC_OK;
}

static void fill_KEYS(fill_t *f, mc_wire_str_list_t *v) { FILL_LIST_(v, 4, fill_KEY); }
static void fill_U64S(fill_t *f, mc_wire_u64_list_t *v) { FILL_LIST_(v, 4, fill_U64); }
static void fill_I32S(fill_t *f, mc_wire_i32_list_t *v)
{
    FILL_LIST_(v, 5, fill_I32);
    v->v[0] = 1;
    v->v[1] = 0;
}

static void fill_CONFIG(fill_t *f, mc_wire_config_t *v)
{
    fill_U32(f, &v->replica_num);
    fill_U32(f, &v->nof_replica_num);
    fill_U32(f, &v->dfs_replica_num);
    fill_U8(f, &v->soft_pin_action);
    fill_U8(f, &v->has_soft_pin_ttl);
    fill_U64(f, &v->soft_pin_ttl_ms);
    fill_U8(f, &v->with_hard_pin);
    fill_STR(f, &v->preferred_segment);
    fill_U8(f, &v->prefer_alloc_in_same_node);
    fill_U8(f, &v->has_group_ids);
    FILL_LIST_(&v->group_ids, 3, fill_KEY);
    v->group_ids.v[2] = mc_str_from_cstr(""); /* "" = ungrouped, allowed here */
    FILL_LIST_(&v->preferred_nof_segments, 2, fill_KEY);
}

static void fill_task(fill_t *f, mc_wire_task_t *v)
{
    fill_UUID(f, &v->id);
    fill_U8(f, &v->type);
    fill_STR(f, &v->tenant);
    fill_KEY(f, &v->key);
    fill_STR(f, &v->source);
    FILL_LIST_(&v->targets, 1 + (uint32_t)(nx(f) % 3), fill_KEY);
    fill_U64(f, &v->created_at_ms);
    fill_U32(f, &v->max_retry_attempts);
}

static void fill_TASKS(fill_t *f, mc_wire_task_list_t *v)
{
    FILL_LIST_(v, 3, fill_task);
    v->v[1].tenant = mc_str_from_cstr(""); /* the default tenant */
}

/* ---- comparing --------------------------------------------------------- */

static int eq_U8(const uint8_t *x, const uint8_t *y) { return *x == *y; }
static int eq_U32(const uint32_t *x, const uint32_t *y) { return *x == *y; }
static int eq_U64(const uint64_t *x, const uint64_t *y) { return *x == *y; }
static int eq_I32(const int32_t *x, const int32_t *y) { return *x == *y; }
static int eq_I64(const int64_t *x, const int64_t *y) { return *x == *y; }
static int eq_STR(const mc_str_t *x, const mc_str_t *y) { return mc_str_eq(*x, *y); }
static int eq_KEY(const mc_str_t *x, const mc_str_t *y) { return mc_str_eq(*x, *y); }
static int eq_UUID(const mc_uuid_t *x, const mc_uuid_t *y) { return mc_uuid_eq(*x, *y); }

static int eq_SEGMENT(const mc_wire_segment_t *x, const mc_wire_segment_t *y)
{
    return eq_UUID(&x->id, &y->id) && eq_STR(&x->name, &y->name) && x->base == y->base &&
           x->size == y->size && eq_STR(&x->protocol, &y->protocol);
}

static int eq_replica(const mc_wire_replica_t *x, const mc_wire_replica_t *y)
{
    return x->id == y->id && x->status == y->status && x->type == y->type &&
           x->addr == y->addr && x->size == y->size && eq_STR(&x->segment, &y->segment) &&
           eq_UUID(&x->segment_id, &y->segment_id);
}

#define EQ_LIST_(x, y, fn)                                   \
    do {                                                     \
        if ((x)->n != (y)->n)                                \
            return 0;                                        \
        for (uint32_t i_ = 0; i_ < (x)->n; i_++)             \
            if (!fn(&(x)->v[i_], &(y)->v[i_]))               \
                return 0;                                    \
        return 1;                                            \
    } while (0)

static int eq_SEGMENTS(const mc_wire_segment_list_t *x, const mc_wire_segment_list_t *y)
{
    EQ_LIST_(x, y, eq_SEGMENT);
}
static int eq_REPLICAS(const mc_wire_replica_list_t *x, const mc_wire_replica_list_t *y)
{
    EQ_LIST_(x, y, eq_replica);
}
static int eq_result(const mc_wire_result_t *x, const mc_wire_result_t *y)
{
    return x->status == y->status && x->size == y->size &&
           eq_REPLICAS(&x->replicas, &y->replicas);
}
static int eq_RESULTS(const mc_wire_result_list_t *x, const mc_wire_result_list_t *y)
{
    EQ_LIST_(x, y, eq_result);
}
static int eq_KEYS(const mc_wire_str_list_t *x, const mc_wire_str_list_t *y)
{
    EQ_LIST_(x, y, eq_STR);
}
static int eq_U64S(const mc_wire_u64_list_t *x, const mc_wire_u64_list_t *y)
{
    EQ_LIST_(x, y, eq_U64);
}
static int eq_I32S(const mc_wire_i32_list_t *x, const mc_wire_i32_list_t *y)
{
    EQ_LIST_(x, y, eq_I32);
}

static int eq_CONFIG(const mc_wire_config_t *x, const mc_wire_config_t *y)
{
    return x->replica_num == y->replica_num && x->nof_replica_num == y->nof_replica_num &&
           x->dfs_replica_num == y->dfs_replica_num &&
           x->soft_pin_action == y->soft_pin_action &&
           x->has_soft_pin_ttl == y->has_soft_pin_ttl &&
           x->soft_pin_ttl_ms == y->soft_pin_ttl_ms && x->with_hard_pin == y->with_hard_pin &&
           eq_STR(&x->preferred_segment, &y->preferred_segment) &&
           x->prefer_alloc_in_same_node == y->prefer_alloc_in_same_node &&
           x->has_group_ids == y->has_group_ids && eq_KEYS(&x->group_ids, &y->group_ids) &&
           eq_KEYS(&x->preferred_nof_segments, &y->preferred_nof_segments);
}

static int eq_task(const mc_wire_task_t *x, const mc_wire_task_t *y)
{
    return eq_UUID(&x->id, &y->id) && x->type == y->type && eq_STR(&x->tenant, &y->tenant) &&
           eq_KEY(&x->key, &y->key) && eq_STR(&x->source, &y->source) &&
           eq_KEYS(&x->targets, &y->targets) && x->created_at_ms == y->created_at_ms &&
           x->max_retry_attempts == y->max_retry_attempts;
}
static int eq_TASKS(const mc_wire_task_list_t *x, const mc_wire_task_list_t *y)
{
    EQ_LIST_(x, y, eq_task);
}

/* ---- frames ------------------------------------------------------------ */

/* Check the header of the one frame in @p b and return its body. */
static const uint8_t *frame_body(const mc_buf_t *b, uint16_t opcode, uint8_t flags,
                                 uint32_t request_id, size_t *len_p)
{
    mc_wire_header_t h;
    ck_assert_msg(!b->oom && b->len >= MC_WIRE_HEADER_SIZE, "a frame should have been written");
    ck_assert_status_ok(mc_wire_header_unpack(b->data, &h));
    ck_assert_msg(h.magic == MC_WIRE_MAGIC && h.version == MC_WIRE_VERSION,
                  "the frame should carry the magic and version");
    ck_assert_msg(h.opcode == opcode, "opcode should be %u, not %u", opcode, h.opcode);
    ck_assert_msg(h.flags == flags, "flags should be %u, not %u", flags, h.flags);
    ck_assert_msg(h.request_id == request_id, "the request id should be kept");
    ck_assert_msg(h.body_len == b->len - MC_WIRE_HEADER_SIZE,
                  "body_len %u should match the %zu bytes written", h.body_len,
                  b->len - MC_WIRE_HEADER_SIZE);
    *len_p = h.body_len;
    return b->data + MC_WIRE_HEADER_SIZE;
}

/* An exactly-sized heap copy, so a tool sees any read past its end. */
static uint8_t *exact_copy(const uint8_t *p, size_t n, size_t extra)
{
    uint8_t *c = malloc(n + extra + 1);
    ck_assert_ptr_nonnull(c);
    if (n > 0)
        memcpy(c, p, n);
    for (size_t i = 0; i < extra; i++)
        c[n + i] = (uint8_t)(0xa5 + i);
    return c;
}

typedef mc_status_t (*decode_func_t)(const uint8_t *p, size_t n, mc_arena_t *a);

/* Every strict prefix and one trailing byte must fail. */
static void check_truncations(const char *what, const uint8_t *body, size_t len,
                              decode_func_t dec)
{
    mc_arena_t a;
    mc_arena_init(&a);
    for (size_t l = 0; l < len; l++) {
        uint8_t *c    = exact_copy(body, l, 0);
        mc_status_t s = dec(c, l, &a);
        free(c);
        require(s == MC_DESERIALIZE_FAIL,
                "%s cut to %zu of %zu bytes should fail to decode, got %d", what, l, len, s);
        mc_arena_reset(&a);
    }
    uint8_t *c    = exact_copy(body, len, 1);
    mc_status_t s = dec(c, len + 1, &a);
    free(c);
    require(s == MC_DESERIALIZE_FAIL, "%s with a trailing byte should fail to decode", what);
    mc_arena_cleanup(&a);
}

/* ---- generated per-message round trips --------------------------------- */

#define FILL_FIELD_(KIND, name) fill_##KIND(&f, &in.name);
#define EQ_FIELD_(KIND, name)                                                        \
    require(eq_##KIND(&in.name, &out.name), "%s field %s should round-trip", what, \
            #name);

#define MESSAGE_TESTS_(UP, low, code)                                                         \
    static mc_status_t dec_req_##low(const uint8_t *p, size_t n, mc_arena_t *a)               \
    {                                                                                         \
        mc_wire_##low##_req_t m;                                                              \
        return mc_wire_decode_##low##_req(p, n, a, &m);                                       \
    }                                                                                         \
    static mc_status_t dec_resp_##low(const uint8_t *p, size_t n, mc_arena_t *a)              \
    {                                                                                         \
        mc_wire_##low##_resp_t m;                                                             \
        int32_t st;                                                                           \
        return mc_wire_decode_##low##_resp(p, n, a, &st, &m);                                 \
    }                                                                                         \
    /* Decode; when that succeeds, re-encode and demand the same bytes. */                   \
    static int canon_req_##low(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b)        \
    {                                                                                         \
        mc_wire_##low##_req_t m;                                                              \
        if (mc_wire_decode_##low##_req(p, n, a, &m) != MC_OK)                                 \
            return 0;                                                                         \
        mc_buf_reset(b);                                                                      \
        mc_wire_encode_##low##_req(b, 1, &m);                                                 \
        require(b->len == MC_WIRE_HEADER_SIZE + n &&                                          \
                    memcmp(b->data + MC_WIRE_HEADER_SIZE, p, n) == 0,                         \
                "a decoded %s request should re-encode to the same bytes", #low);             \
        return 1;                                                                             \
    }                                                                                         \
    static int canon_resp_##low(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b)       \
    {                                                                                         \
        mc_wire_##low##_resp_t m;                                                             \
        int32_t st;                                                                           \
        if (mc_wire_decode_##low##_resp(p, n, a, &st, &m) != MC_OK)                           \
            return 0;                                                                         \
        mc_buf_reset(b);                                                                      \
        mc_wire_encode_##low##_resp(b, 1, st, &m);                                            \
        require(b->len == MC_WIRE_HEADER_SIZE + n &&                                          \
                    memcmp(b->data + MC_WIRE_HEADER_SIZE, p, n) == 0,                         \
                "a decoded %s response should re-encode to the same bytes", #low);            \
        return 1;                                                                             \
    }                                                                                         \
    static void round_trip_##low(uint64_t seed)                                               \
    {                                                                                         \
        mc_arena_t fa, da;                                                                    \
        mc_buf_t b;                                                                           \
        size_t len;                                                                           \
        const uint8_t *body;                                                                  \
        const char *what;                                                                     \
        fill_t f = {&fa, seed};                                                               \
        mc_arena_init(&fa);                                                                   \
        mc_arena_init(&da);                                                                   \
        mc_buf_init(&b);                                                                      \
        {                                                                                     \
            mc_wire_##low##_req_t in, out;                                                    \
            what = #low " request";                                                           \
            memset(&in, 0, sizeof(in));                                                       \
            MC_WIRE_REQ_##low(FILL_FIELD_)                                                    \
            mc_wire_encode_##low##_req(&b, 0x10000u + (code), &in);                           \
            body = frame_body(&b, (code), 0, 0x10000u + (code), &len);                        \
            ck_assert_status_ok(mc_wire_decode_##low##_req(body, len, &da, &out));            \
            MC_WIRE_REQ_##low(EQ_FIELD_)                                                      \
            check_truncations(what, body, len, dec_req_##low);                                \
        }                                                                                     \
        {                                                                                     \
            mc_wire_##low##_resp_t in, out;                                                   \
            int32_t st = 12345;                                                               \
            what       = #low " response";                                                    \
            memset(&in, 0, sizeof(in));                                                       \
            MC_WIRE_RESP_##low(FILL_FIELD_)                                                   \
            mc_buf_reset(&b);                                                                 \
            mc_wire_encode_##low##_resp(&b, 0xfffffff0u, MC_OK, &in);                         \
            body = frame_body(&b, (code), MC_WIRE_FLAG_RESPONSE, 0xfffffff0u, &len);          \
            ck_assert_status_ok(mc_wire_decode_##low##_resp(body, len, &da, &st, &out));      \
            ck_assert_msg(st == MC_OK, "the OK status should round-trip");                    \
            MC_WIRE_RESP_##low(EQ_FIELD_)                                                     \
            check_truncations(what, body, len, dec_resp_##low);                               \
            /* an error response carries the status alone */                                  \
            what = #low " error response";                                                    \
            mc_buf_reset(&b);                                                                 \
            mc_wire_encode_##low##_resp(&b, 7, MC_OBJECT_NOT_FOUND, &in);                     \
            body = frame_body(&b, (code), MC_WIRE_FLAG_RESPONSE, 7, &len);                    \
            ck_assert_msg(len == 4, "an error response body should be the status alone");     \
            ck_assert_status_ok(mc_wire_decode_##low##_resp(body, len, &da, &st, &out));      \
            ck_assert_msg(st == MC_OBJECT_NOT_FOUND, "the error status should round-trip");   \
            check_truncations(what, body, len, dec_resp_##low);                               \
            mc_buf_t e;                                                                       \
            mc_buf_init(&e);                                                                  \
            mc_wire_encode_error(&e, (code), 7, MC_OBJECT_NOT_FOUND);                         \
            ck_assert_msg(e.len == b.len && memcmp(e.data, b.data, b.len) == 0,               \
                          "mc_wire_encode_error should match the generated encoder");         \
            mc_buf_cleanup(&e);                                                               \
        }                                                                                     \
        ck_assert_str_eq(mc_wire_op_name(code), #UP);                                         \
        mc_buf_cleanup(&b);                                                                   \
        mc_arena_cleanup(&fa);                                                                \
        mc_arena_cleanup(&da);                                                                \
    }

MC_WIRE_MESSAGES(MESSAGE_TESTS_)

typedef struct message {
    const char *name;
    uint16_t opcode;
    void (*round_trip)(uint64_t seed);
    decode_func_t dec_req, dec_resp;
    int (*canon_req)(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b);
    int (*canon_resp)(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b);
} message_t;

static const message_t messages[] = {
#define MESSAGE_ROW_(UP, low, code)                                                   \
    {#low, (code), round_trip_##low, dec_req_##low, dec_resp_##low, canon_req_##low, \
     canon_resp_##low},
    MC_WIRE_MESSAGES(MESSAGE_ROW_)
#undef MESSAGE_ROW_
};
#define NMESSAGES ((int)(sizeof(messages) / sizeof(messages[0])))

START_TEST(test_round_trip)
{
    /* several seeds: list lengths and string lengths vary */
    for (uint64_t seed = 1; seed <= 4; seed++)
        messages[_i].round_trip(seed * 1000003u + messages[_i].opcode);
}
END_TEST

START_TEST(test_opcodes_are_unique)
{
    for (int i = 0; i < NMESSAGES; i++)
        for (int j = i + 1; j < NMESSAGES; j++)
            ck_assert_msg(messages[i].opcode != messages[j].opcode,
                          "%s and %s share opcode %u", messages[i].name, messages[j].name,
                          messages[i].opcode);
    ck_assert_msg(mc_wire_op_name(0) == NULL, "opcode 0 should have no name");
    ck_assert_msg(mc_wire_op_name(0xffff) == NULL, "opcode 0xffff should have no name");
}
END_TEST

/* ---- header ------------------------------------------------------------ */

START_TEST(test_header)
{
    uint8_t raw[MC_WIRE_HEADER_SIZE];
    mc_wire_header_t h = {MC_WIRE_MAGIC, MC_WIRE_VERSION, MC_WIRE_FLAG_RESPONSE, 0xbeef,
                          0xdeadbeef, MC_WIRE_MAX_BODY};
    mc_wire_header_t g;
    mc_wire_header_pack(&h, raw);
    ck_assert_msg(memcmp(raw, "MCRP", 4) == 0, "the magic should read \"MCRP\" on the wire");
    ck_assert_msg(raw[4] == MC_WIRE_VERSION && raw[5] == MC_WIRE_FLAG_RESPONSE,
                  "version and flags are bytes 4 and 5");
    ck_assert_msg(raw[6] == 0xef && raw[7] == 0xbe, "the opcode is little-endian at 6");
    ck_assert_msg(mc_load_le32(raw + 8) == 0xdeadbeef, "the request id is at 8");
    ck_assert_msg(mc_load_le32(raw + 12) == MC_WIRE_MAX_BODY, "body_len is at 12");
    ck_assert_status_ok(mc_wire_header_unpack(raw, &g));
    ck_assert_msg(memcmp(&g, &h, sizeof(g)) == 0, "the header should round-trip");

    h.flags = 0;
    mc_wire_header_pack(&h, raw);
    ck_assert_status_ok(mc_wire_header_unpack(raw, &g));
    h.body_len = 0;
    mc_wire_header_pack(&h, raw);
    ck_assert_status_ok(mc_wire_header_unpack(raw, &g));

    static const struct {
        const char *why;
        uint32_t magic;
        uint8_t version, flags;
        uint32_t body_len;
    } bad[] = {
        {"a bad magic", 0x5052434Eu, MC_WIRE_VERSION, 0, 0},
        {"a zero magic", 0, MC_WIRE_VERSION, 0, 0},
        {"a byte-swapped magic", 0x4D435250u, MC_WIRE_VERSION, 0, 0},
        {"version 0", MC_WIRE_MAGIC, 0, 0, 0},
        {"a newer version", MC_WIRE_MAGIC, MC_WIRE_VERSION + 1, 0, 0},
        {"an unknown flag", MC_WIRE_MAGIC, MC_WIRE_VERSION, 0x02, 0},
        {"the top flag", MC_WIRE_MAGIC, MC_WIRE_VERSION, 0x81, 0},
        {"a body over the limit", MC_WIRE_MAGIC, MC_WIRE_VERSION, 0, MC_WIRE_MAX_BODY + 1},
        {"a 4 GiB body", MC_WIRE_MAGIC, MC_WIRE_VERSION, 1, UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_wire_header_t x = {bad[i].magic, bad[i].version, bad[i].flags, 1, 1,
                              bad[i].body_len};
        mc_wire_header_pack(&x, raw);
        ck_assert_msg(mc_wire_header_unpack(raw, &g) == MC_DESERIALIZE_FAIL,
                      "a header with %s should be refused", bad[i].why);
    }
}
END_TEST

/* ---- hand-made hostile bodies ------------------------------------------ */

static mc_status_t decode_copy(decode_func_t dec, const mc_buf_t *b, mc_arena_t *a)
{
    uint8_t *c    = exact_copy(b->data, b->len, 0);
    mc_status_t s = dec(c, b->len, a);
    free(c);
    return s;
}

static void put_uuid(mc_buf_t *b)
{
    mc_buf_put_u64(b, 0x1111);
    mc_buf_put_u64(b, 0x2222);
}

static void put_key(mc_buf_t *b, const char *k) { mc_buf_put_str(b, mc_str_from_cstr(k)); }

static void put_config(mc_buf_t *b, uint32_t ngroups)
{
    mc_buf_put_u32(b, 1);
    mc_buf_put_u32(b, 0);
    mc_buf_put_u32(b, 0);
    mc_buf_put_u8(b, 0);
    mc_buf_put_u8(b, 0);
    mc_buf_put_u64(b, 0);
    mc_buf_put_u8(b, 0);
    put_key(b, "");
    mc_buf_put_u8(b, 0);
    mc_buf_put_u8(b, 1);
    mc_buf_put_u32(b, ngroups);
}

/*
 * Each list kind in turn gets a count that lies: 0xFFFFFFFF, MAX_LIST + 1
 * and a count one more than the entries present.  Decoding must fail
 * without allocating for the claimed count.
 */
START_TEST(test_list_counts_that_lie)
{
    static const uint32_t lies[] = {0xffffffffu, MC_WIRE_MAX_LIST + 1, 0x10000u, 3};
    mc_buf_t b;
    mc_arena_t a;
    mc_buf_init(&b);
    mc_arena_init(&a);
    for (size_t l = 0; l < sizeof(lies) / sizeof(lies[0]); l++) {
        uint32_t n = lies[l];
        for (int kind = 0; kind < 8; kind++) {
            decode_func_t dec = NULL;
            const char *what  = NULL;
            mc_buf_reset(&b);
            switch (kind) {
            case 0: /* KEYS: two real keys */
                what = "batch_exist_key keys";
                dec  = dec_req_batch_exist_key;
                mc_buf_put_u32(&b, n);
                put_key(&b, "a");
                put_key(&b, "b");
                break;
            case 1: /* SEGMENTS */
                what = "remount_segments segments";
                dec  = dec_req_remount_segments;
                put_uuid(&b);
                mc_buf_put_u32(&b, n);
                mc_buf_put_bytes(&b, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 50);
                break;
            case 2: /* REPLICAS in an OK response */
                what = "put_start replicas";
                dec  = dec_resp_put_start;
                mc_buf_put_u32(&b, MC_OK);
                mc_buf_put_u32(&b, n);
                mc_buf_put_bytes(&b, "0123456789012345678901234567890123456789012345", 46);
                break;
            case 3: /* RESULTS */
                what = "batch_put_start results";
                dec  = dec_resp_batch_put_start;
                mc_buf_put_u32(&b, MC_OK);
                mc_buf_put_u32(&b, n);
                mc_buf_put_bytes(&b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
                mc_buf_put_bytes(&b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
                break;
            case 4: /* I32S */
                what = "batch_remove statuses";
                dec  = dec_resp_batch_remove;
                mc_buf_put_u32(&b, MC_OK);
                mc_buf_put_u32(&b, n);
                mc_buf_put_u32(&b, 1);
                mc_buf_put_u32(&b, 2);
                break;
            case 5: /* U64S after a real key list */
                what = "batch_put_start lengths";
                dec  = dec_req_batch_put_start;
                put_uuid(&b);
                mc_buf_put_u32(&b, 1);
                put_key(&b, "k");
                mc_buf_put_u32(&b, n);
                mc_buf_put_u64(&b, 10);
                mc_buf_put_u64(&b, 20);
                put_config(&b, 0);
                break;
            case 6: /* config group ids */
                what = "put_start group ids";
                dec  = dec_req_put_start;
                put_uuid(&b);
                put_key(&b, "k");
                mc_buf_put_u64(&b, 100);
                put_config(&b, n);
                put_key(&b, "g1");
                put_key(&b, "g2");
                break;
            default: /* nested: a result whose replica list lies */
                what = "batch_get_replica_list nested replicas";
                dec  = dec_resp_batch_get_replica_list;
                mc_buf_put_u32(&b, MC_OK);
                mc_buf_put_u64(&b, 5000);
                mc_buf_put_u32(&b, 1);
                mc_buf_put_u32(&b, MC_OK);
                mc_buf_put_u64(&b, 10);
                mc_buf_put_u32(&b, n);
                mc_buf_put_bytes(&b, "0123456789012345678901234567890123456789012345", 46);
                break;
            }
            mc_arena_reset(&a);
            ck_assert_msg(decode_copy(dec, &b, &a) == MC_DESERIALIZE_FAIL,
                          "%s with count %u should fail to decode", what, n);
            ck_assert_msg(a.total <= 8 * b.len + 64,
                          "%s with count %u should not allocate %zu bytes for a %zu byte body",
                          what, n, a.total, b.len);
        }
    }
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

/* MAX_LIST entries are accepted, one more is not, even with the bytes. */
START_TEST(test_list_limit)
{
    mc_buf_t b;
    mc_arena_t a;
    mc_wire_batch_remove_resp_t m;
    int32_t st;
    mc_buf_init(&b);
    mc_arena_init(&a);
    for (uint32_t extra = 0; extra < 2; extra++) {
        mc_buf_reset(&b);
        mc_buf_put_u32(&b, MC_OK);
        mc_buf_put_u32(&b, MC_WIRE_MAX_LIST + extra);
        uint8_t *p = mc_buf_reserve(&b, 4 * (size_t)(MC_WIRE_MAX_LIST + extra));
        ck_assert_ptr_nonnull(p);
        memset(p, 0xff, 4 * (size_t)(MC_WIRE_MAX_LIST + extra));
        mc_arena_reset(&a);
        mc_status_t s = mc_wire_decode_batch_remove_resp(b.data, b.len, &a, &st, &m);
        if (extra == 0) {
            ck_assert_status_ok(s);
            ck_assert_msg(m.statuses.n == MC_WIRE_MAX_LIST && m.statuses.v[7] == -1,
                          "a list of MC_WIRE_MAX_LIST entries should decode");
        } else {
            ck_assert_msg(s == MC_DESERIALIZE_FAIL,
                          "a list over MC_WIRE_MAX_LIST should be refused");
        }
    }
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

static mc_status_t decode_exist_key_with(uint32_t claimed, uint32_t present)
{
    mc_buf_t b;
    mc_arena_t a;
    mc_buf_init(&b);
    mc_arena_init(&a);
    mc_buf_put_u32(&b, claimed);
    uint8_t *p = mc_buf_reserve(&b, present);
    if (present > 0) {
        ck_assert_ptr_nonnull(p);
        memset(p, 'k', present);
    }
    mc_status_t s = decode_copy(dec_req_exist_key, &b, &a);
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
    return s;
}

START_TEST(test_key_and_string_limits)
{
    ck_assert_status_ok(decode_exist_key_with(1, 1));
    ck_assert_status_ok(decode_exist_key_with(MC_WIRE_MAX_KEY, MC_WIRE_MAX_KEY));
    ck_assert_msg(decode_exist_key_with(MC_WIRE_MAX_KEY + 1, MC_WIRE_MAX_KEY + 1) ==
                      MC_DESERIALIZE_FAIL,
                  "a key over MC_WIRE_MAX_KEY should be refused");
    ck_assert_msg(decode_exist_key_with(0, 0) == MC_DESERIALIZE_FAIL,
                  "an empty key should be refused");
    ck_assert_msg(decode_exist_key_with(UINT32_MAX, 8) == MC_DESERIALIZE_FAIL,
                  "a key length of 4 GiB should be refused");
    ck_assert_msg(decode_exist_key_with(10, 9) == MC_DESERIALIZE_FAIL,
                  "a key longer than the body should be refused");

    /* an empty key inside a key list */
    mc_buf_t b;
    mc_arena_t a;
    mc_buf_init(&b);
    mc_arena_init(&a);
    mc_buf_put_u32(&b, 3);
    put_key(&b, "a");
    put_key(&b, "");
    put_key(&b, "c");
    ck_assert_msg(decode_copy(dec_req_batch_exist_key, &b, &a) == MC_DESERIALIZE_FAIL,
                  "a key list holding an empty key should be refused");

    /* STR: hello's tenant id is bounded by MC_WIRE_MAX_STR, and may be empty */
    for (uint32_t len = MC_WIRE_MAX_STR - 1; len <= MC_WIRE_MAX_STR + 1; len++) {
        mc_buf_reset(&b);
        mc_buf_put_u32(&b, 1);
        put_uuid(&b);
        mc_buf_put_u32(&b, len);
        uint8_t *p = mc_buf_reserve(&b, len);
        ck_assert_ptr_nonnull(p);
        memset(p, 't', len);
        mc_arena_reset(&a);
        mc_status_t s = decode_copy(dec_req_hello, &b, &a);
        if (len <= MC_WIRE_MAX_STR)
            ck_assert_status_ok(s);
        else
            ck_assert_msg(s == MC_DESERIALIZE_FAIL, "a string over MC_WIRE_MAX_STR is refused");
    }
    mc_buf_reset(&b);
    mc_buf_put_u32(&b, 1);
    put_uuid(&b);
    put_key(&b, "");
    ck_assert_status_ok(decode_copy(dec_req_hello, &b, &a));

    /* group ids are bounded like keys */
    mc_buf_reset(&b);
    put_uuid(&b);
    put_key(&b, "k");
    mc_buf_put_u64(&b, 100);
    put_config(&b, 1);
    mc_buf_put_u32(&b, MC_WIRE_MAX_KEY + 1);
    uint8_t *p = mc_buf_reserve(&b, MC_WIRE_MAX_KEY + 1);
    ck_assert_ptr_nonnull(p);
    memset(p, 'g', MC_WIRE_MAX_KEY + 1);
    ck_assert_msg(decode_copy(dec_req_put_start, &b, &a) == MC_DESERIALIZE_FAIL,
                  "a group id over MC_WIRE_MAX_KEY should be refused");
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

/* A response whose status is not OK must not carry fields. */
START_TEST(test_error_response_with_fields)
{
    mc_buf_t b;
    mc_arena_t a;
    mc_buf_init(&b);
    mc_arena_init(&a);
    mc_buf_put_u32(&b, (uint32_t)MC_OBJECT_NOT_FOUND);
    mc_buf_put_u8(&b, 1);
    ck_assert_msg(decode_copy(dec_resp_exist_key, &b, &a) == MC_DESERIALIZE_FAIL,
                  "an error response followed by fields should be refused");
    mc_buf_reset(&b);
    mc_buf_put_bytes(&b, "\0\0\0", 3);
    ck_assert_msg(decode_copy(dec_resp_mount_segment, &b, &a) == MC_DESERIALIZE_FAIL,
                  "a 3-byte status should be refused");
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

/* docs/protocol.md §5.14: BATCH_REPLICA_CLEAR byte by byte, with the empty
 * segment name that means every segment; an empty key is refused. */
START_TEST(test_batch_replica_clear_layout)
{
    static const uint8_t want[] = {
        0x4D, 0x43, 0x52, 0x50, 0x01, 0x00, 58, 0x00, 9, 0, 0, 0, 35, 0, 0, 0, /* header */
        0x11, 0x11, 0, 0, 0, 0, 0, 0, 0x22, 0x22, 0, 0, 0, 0, 0, 0,           /* client_id */
        2, 0, 0, 0, 1, 0, 0, 0, 'a', 2, 0, 0, 0, 'b', 'b',                   /* keys */
        0, 0, 0, 0                                                           /* "" */
    };
    mc_str_t keys[2] = {{"a", 1}, {"bb", 2}};
    int32_t sts[2]   = {MC_OK, MC_OBJECT_HAS_LEASE};
    mc_wire_batch_replica_clear_req_t rq, drq;
    mc_wire_batch_replica_clear_resp_t rs, drs;
    int32_t st = 1;
    mc_buf_t b;
    mc_arena_t a;

    mc_buf_init(&b);
    mc_arena_init(&a);
    memset(&rq, 0, sizeof(rq));
    rq.client_id.hi = 0x1111;
    rq.client_id.lo = 0x2222;
    rq.keys.n       = 2;
    rq.keys.v       = keys;
    mc_wire_encode_batch_replica_clear_req(&b, 9, &rq);
    ck_assert_msg(b.len == sizeof(want) && memcmp(b.data, want, sizeof(want)) == 0,
                  "BATCH_REPLICA_CLEAR should encode as docs/protocol.md shows");
    ck_assert_status_ok(mc_wire_decode_batch_replica_clear_req(
        b.data + MC_WIRE_HEADER_SIZE, b.len - MC_WIRE_HEADER_SIZE, &a, &drq));
    ck_assert_msg(drq.segment_name.len == 0 && drq.keys.n == 2 &&
                      mc_str_eq(drq.keys.v[1], keys[1]),
                  "an empty segment name and the keys should decode as sent");

    memset(&rs, 0, sizeof(rs));
    rs.statuses.n = 2;
    rs.statuses.v = sts;
    mc_buf_reset(&b);
    mc_wire_encode_batch_replica_clear_resp(&b, 9, MC_OK, &rs);
    ck_assert_msg(b.len == MC_WIRE_HEADER_SIZE + 4 + 4 + 2 * 4,
                  "the response should be the status then two i32 statuses");
    ck_assert_status_ok(mc_wire_decode_batch_replica_clear_resp(
        b.data + MC_WIRE_HEADER_SIZE, b.len - MC_WIRE_HEADER_SIZE, &a, &st, &drs));
    ck_assert_msg(st == MC_OK && drs.statuses.n == 2 &&
                      drs.statuses.v[1] == MC_OBJECT_HAS_LEASE,
                  "per-key statuses should decode as sent");

    mc_buf_reset(&b);
    put_uuid(&b);
    mc_buf_put_u32(&b, 1);
    put_key(&b, "");
    put_key(&b, "");
    ck_assert_msg(decode_copy(dec_req_batch_replica_clear, &b, &a) == MC_DESERIALIZE_FAIL,
                  "an empty key in the list should be refused");
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

/* ---- random and mutated bodies ------------------------------------------ */

static void feed_every_decoder(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b,
                               int *decoded)
{
    uint8_t *c = exact_copy(p, n, 0);
    for (int i = 0; i < NMESSAGES; i++) {
        mc_arena_reset(a);
        *decoded += messages[i].canon_req(c, n, a, b);
        require(a->total <= 8 * n + 64, "%s request decoder used %zu bytes for %zu",
                messages[i].name, a->total, n);
        mc_arena_reset(a);
        *decoded += messages[i].canon_resp(c, n, a, b);
        require(a->total <= 8 * n + 64, "%s response decoder used %zu bytes for %zu",
                messages[i].name, a->total, n);
    }
    free(c);
}

START_TEST(test_random_bytes)
{
    uint64_t seed = 0xfeedfaceu;
    uint8_t buf[512];
    mc_arena_t a;
    mc_buf_t b;
    int decoded = 0;
    mc_arena_init(&a);
    mc_buf_init(&b);
    for (int iter = 0; iter < 5000; iter++) {
        size_t n = (size_t)(rng_next(&seed) % sizeof(buf));
        if (iter % 4 == 0)
            n %= 24; /* short bodies decode often: exercise the success path */
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&seed);
            /* small numbers make plausible counts and lengths */
            buf[i] = (r & 3) == 0 ? (uint8_t)(r >> 8) : (uint8_t)((r >> 8) % 4);
        }
        feed_every_decoder(buf, n, &a, &b, &decoded);
    }
    ck_assert_msg(decoded > 0, "some random bodies should decode (the success path ran)");
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&b);
}
END_TEST

/* Valid frames of every message with bytes flipped, cut or duplicated. */
START_TEST(test_mutated_frames)
{
    uint64_t seed = 0xc0ffee;
    mc_arena_t fa, a;
    mc_buf_t frames, b;
    int decoded = 0;
    mc_arena_init(&fa);
    mc_arena_init(&a);
    mc_buf_init(&frames);
    mc_buf_init(&b);

    /* one valid request and response body per message */
    size_t start[2 * 64 + 1];
    int nbodies = 0;
#define ENCODE_BOTH_(UP, low, code)                                                \
    {                                                                              \
        fill_t f = {&fa, (code)};                                                  \
        mc_wire_##low##_req_t rq;                                                  \
        mc_wire_##low##_resp_t rs;                                                 \
        memset(&rq, 0, sizeof(rq));                                                \
        memset(&rs, 0, sizeof(rs));                                                \
        MC_WIRE_REQ_##low(FILL_RQ_) MC_WIRE_RESP_##low(FILL_RS_)                   \
        start[nbodies++] = frames.len;                                             \
        mc_wire_encode_##low##_req(&frames, 1, &rq);                               \
        start[nbodies++] = frames.len;                                             \
        mc_wire_encode_##low##_resp(&frames, 1, MC_OK, &rs);                       \
    }
#define FILL_RQ_(KIND, name) fill_##KIND(&f, &rq.name);
#define FILL_RS_(KIND, name) fill_##KIND(&f, &rs.name);
    MC_WIRE_MESSAGES(ENCODE_BOTH_)
    start[nbodies] = frames.len;
    ck_assert_msg(!frames.oom, "the frames should be encoded");

    uint8_t buf[4096];
    for (int iter = 0; iter < 4000; iter++) {
        int k         = (int)(rng_next(&seed) % (uint64_t)nbodies);
        const uint8_t *body = frames.data + start[k] + MC_WIRE_HEADER_SIZE;
        size_t n      = start[k + 1] - start[k] - MC_WIRE_HEADER_SIZE;
        ck_assert_msg(n <= sizeof(buf) / 2, "the test bodies should fit the buffer");
        memcpy(buf, body, n);
        int edits = 1 + (int)(rng_next(&seed) % 4);
        for (int e = 0; e < edits; e++) {
            uint64_t r = rng_next(&seed);
            size_t at  = n ? (size_t)((r >> 8) % n) : 0;
            switch (r % 5) {
            case 0: /* flip bits */
                if (n)
                    buf[at] ^= (uint8_t)(1u << ((r >> 40) % 8));
                break;
            case 1: /* set a byte to something count-like or extreme */
                if (n)
                    buf[at] = (uint8_t[]){0, 1, 0x7f, 0x80, 0xff}[(r >> 40) % 5];
                break;
            case 2: /* truncate */
                n = at;
                break;
            case 3: /* duplicate a stretch */
                if (n && n + 16 < sizeof(buf)) {
                    size_t len = MC_MIN(16, n - at);
                    memmove(buf + at + len, buf + at, n - at);
                    n += len;
                }
                break;
            default: /* write a lying u32 */
                if (n >= 4) {
                    at = at > n - 4 ? n - 4 : at;
                    mc_store_le32(buf + at, (uint32_t)(r >> 32));
                }
                break;
            }
        }
        feed_every_decoder(buf, n, &a, &b, &decoded);
    }
    ck_assert_msg(decoded > 0, "some mutated frames should still decode");
    mc_arena_cleanup(&fa);
    mc_arena_cleanup(&a);
    mc_buf_cleanup(&frames);
    mc_buf_cleanup(&b);
}
END_TEST

/* mc_wire_req_max_body(): a request with every field at its bound encodes
 * to exactly the bound; fixed ones are their size; lists have none. */
START_TEST(test_req_max_body)
{
    static char key[MC_WIRE_MAX_KEY], str[MC_WIRE_MAX_STR];
    mc_wire_put_start_req_t req;
    mc_str_t group;
    mc_buf_t b;
    mc_wire_header_t h;

    memset(key, 'k', sizeof(key));
    memset(str, 's', sizeof(str));
    memset(&req, 0, sizeof(req));
    req.key                      = (mc_str_t){key, sizeof(key)};
    req.config.preferred_segment = (mc_str_t){str, sizeof(str)};
    group                        = (mc_str_t){key, sizeof(key)};
    req.config.has_group_ids     = 1;
    req.config.group_ids.n       = 1;
    req.config.group_ids.v       = &group;
    {
        static mc_str_t pref[MC_WIRE_MAX_PREF_NOF];
        for (size_t i = 0; i < MC_WIRE_MAX_PREF_NOF; i++)
            pref[i] = (mc_str_t){key, sizeof(key)};
        req.config.preferred_nof_segments.n = MC_WIRE_MAX_PREF_NOF;
        req.config.preferred_nof_segments.v = pref;
    }
    mc_buf_init(&b);
    mc_wire_encode_put_start_req(&b, 1, &req);
    ck_assert(!b.oom);
    ck_assert_status_ok(mc_wire_header_unpack(b.data, &h));
    ck_assert_uint_eq(h.body_len, mc_wire_req_max_body(MC_WIRE_OP_PUT_START));
    mc_buf_cleanup(&b);

    ck_assert_uint_eq(mc_wire_req_max_body(MC_WIRE_OP_PING), 16);
    ck_assert_uint_eq(mc_wire_req_max_body(MC_WIRE_OP_REMOVE_BY_REGEX), 4 + MC_WIRE_MAX_STR + 1);
    ck_assert_uint_eq(mc_wire_req_max_body(MC_WIRE_OP_BATCH_PUT_START), MC_WIRE_MAX_BODY);
    ck_assert_uint_eq(mc_wire_req_max_body(MC_WIRE_OP_REMOUNT_SEGMENTS), MC_WIRE_MAX_BODY);
    ck_assert_uint_eq(mc_wire_req_max_body(0xfff0), MC_WIRE_MAX_BODY);
}
END_TEST

Suite *mc_test_wire_suite(void)
{
    Suite *s  = suite_create("wire");
    TCase *tc = tcase_create("codec");
    tcase_add_loop_test(tc, test_round_trip, 0, NMESSAGES);
    tcase_add_test(tc, test_opcodes_are_unique);
    tcase_add_test(tc, test_header);
    tcase_add_test(tc, test_batch_replica_clear_layout);
    suite_add_tcase(s, tc);

    TCase *th = tcase_create("hostile");
    tcase_set_timeout(th, 120);
    tcase_add_test(th, test_list_counts_that_lie);
    tcase_add_test(th, test_list_limit);
    tcase_add_test(th, test_key_and_string_limits);
    tcase_add_test(th, test_req_max_body);
    tcase_add_test(th, test_error_response_with_fields);
    tcase_add_test(th, test_random_bytes);
    tcase_add_test(th, test_mutated_frames);
    suite_add_tcase(s, th);
    return s;
}

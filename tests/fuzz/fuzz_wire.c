/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the master RPC decoders (tests/fuzz/build.sh builds
 * and runs it).  The input is a frame: its first 16 bytes go to
 * mc_wire_header_unpack(), and the rest, as a body, to the decoder the
 * header's opcode and response flag select; an unknown opcode still picks
 * a decoder (opcode modulo the table) so bad headers explore decoders too.
 *
 * Beyond "no crash", a body that decodes must re-encode to exactly the
 * same bytes (the encoding is canonical), and the decoder's arena must stay
 * within a small multiple of the body: a lying count must never become a
 * large allocation.  Either failure aborts, which libFuzzer reports.
 *
 * Built with -DMC_FUZZ_WRITE_SEEDS it is instead a program that writes one
 * valid request and response frame per message into a corpus directory.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

#ifndef MC_FUZZ_WRITE_SEEDS

typedef int (*canon_func_t)(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b);

static void fuzz_fail(const char *what, const char *name)
{
    fprintf(stderr, "fuzz_wire: %s (%s)\n", what, name);
    abort();
}

/* Decode; on success re-encode and compare.  1 decoded, 0 refused. */
#define FUZZ_CANON_(UP, low, code)                                                    \
    static int canon_req_##low(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b) \
    {                                                                                 \
        mc_wire_##low##_req_t m;                                                      \
        mc_status_t s = mc_wire_decode_##low##_req(p, n, a, &m);                      \
        if (s != MC_OK) {                                                             \
            if (s != MC_DESERIALIZE_FAIL)                                             \
                fuzz_fail("unexpected status", #low " request");                      \
            return 0;                                                                 \
        }                                                                             \
        mc_buf_reset(b);                                                              \
        mc_wire_encode_##low##_req(b, 1, &m);                                         \
        if (b->oom || b->len != MC_WIRE_HEADER_SIZE + n ||                            \
            (n > 0 && memcmp(b->data + MC_WIRE_HEADER_SIZE, p, n) != 0))              \
            fuzz_fail("decoded body does not re-encode to itself", #low " request");  \
        return 1;                                                                     \
    }                                                                                 \
    static int canon_resp_##low(const uint8_t *p, size_t n, mc_arena_t *a, mc_buf_t *b) \
    {                                                                                 \
        mc_wire_##low##_resp_t m;                                                     \
        int32_t st;                                                                   \
        mc_status_t s = mc_wire_decode_##low##_resp(p, n, a, &st, &m);                \
        if (s != MC_OK) {                                                             \
            if (s != MC_DESERIALIZE_FAIL)                                             \
                fuzz_fail("unexpected status", #low " response");                     \
            return 0;                                                                 \
        }                                                                             \
        mc_buf_reset(b);                                                              \
        mc_wire_encode_##low##_resp(b, 1, st, &m);                                    \
        if (b->oom || b->len != MC_WIRE_HEADER_SIZE + n ||                            \
            memcmp(b->data + MC_WIRE_HEADER_SIZE, p, n) != 0)                         \
            fuzz_fail("decoded body does not re-encode to itself", #low " response"); \
        return 1;                                                                     \
    }
MC_WIRE_MESSAGES(FUZZ_CANON_)

static const struct {
    const char *name;
    uint16_t opcode;
    canon_func_t req, resp;
} messages[] = {
#define FUZZ_ROW_(UP, low, code) {#low, (code), canon_req_##low, canon_resp_##low},
    MC_WIRE_MESSAGES(FUZZ_ROW_)
#undef FUZZ_ROW_
};
#define NMESSAGES (sizeof(messages) / sizeof(messages[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_arena_t arena;
    static mc_buf_t out;
    mc_wire_header_t h;
    size_t idx;

    if (size < MC_WIRE_HEADER_SIZE)
        return 0;
    /* the header checks must not depend on anything but these 16 bytes */
    mc_status_t hs = mc_wire_header_unpack(data, &h);
    if (hs != MC_OK && hs != MC_DESERIALIZE_FAIL)
        fuzz_fail("unexpected header status", "header");
    if (hs == MC_OK && (h.magic != MC_WIRE_MAGIC || h.body_len > MC_WIRE_MAX_BODY))
        fuzz_fail("accepted a bad header", "header");

    for (idx = 0; idx < NMESSAGES; idx++)
        if (messages[idx].opcode == h.opcode)
            break;
    if (idx == NMESSAGES)
        idx = h.opcode % NMESSAGES;

    /* an exactly-sized copy: ASan sees a read one byte past the body */
    size_t n   = size - MC_WIRE_HEADER_SIZE;
    uint8_t *c = malloc(n ? n : 1);
    if (c == NULL)
        return 0;
    memcpy(c, data + MC_WIRE_HEADER_SIZE, n);
    mc_arena_reset(&arena);
    if (h.flags & MC_WIRE_FLAG_RESPONSE)
        messages[idx].resp(c, n, &arena, &out);
    else
        messages[idx].req(c, n, &arena, &out);
    if (arena.total > 8 * n + 64)
        fuzz_fail("decoder allocated far more than the body", messages[idx].name);
    free(c);
    return 0;
}

#else /* MC_FUZZ_WRITE_SEEDS */

/* Deterministic, non-trivial field values for the seed frames. */
static char seed_text[] = "seg-0.example:12345";
static void seed_U8(uint8_t *v) { *v = 1; }
static void seed_U32(uint32_t *v) { *v = 3; }
static void seed_U64(uint64_t *v) { *v = 4096; }
static void seed_I32(int32_t *v) { *v = -704; }
static void seed_I64(int64_t *v) { *v = 7; }
static void seed_STR(mc_str_t *v) { *v = mc_str_from_cstr(seed_text); }
static void seed_KEY(mc_str_t *v) { *v = mc_str_from_cstr("key-1"); }
static void seed_UUID(mc_uuid_t *v) { v->hi = 0x0123456789abcdefull; v->lo = 42; }
static mc_wire_segment_t seed_segment;
static void seed_SEGMENT(mc_wire_segment_t *v)
{
    seed_UUID(&v->id);
    seed_STR(&v->name);
    v->base = 0x7f0000000000ull;
    v->size = 1ull << 30;
    v->protocol = mc_str_from_cstr("tcp");
}
static void seed_SEGMENTS(mc_wire_segment_list_t *v)
{
    seed_SEGMENT(&seed_segment);
    v->n = 1;
    v->v = &seed_segment;
}
static mc_wire_replica_t seed_replica = {9, 1, 0, 0x7f0000001000ull, 4096,
                                         {"127.0.0.1:12300", 15}, {1, 2}};
static void seed_REPLICAS(mc_wire_replica_list_t *v)
{
    v->n = 1;
    v->v = &seed_replica;
}
static mc_wire_result_t seed_result;
static void seed_RESULTS(mc_wire_result_list_t *v)
{
    seed_result.status = 0;
    seed_result.size   = 4096;
    seed_REPLICAS(&seed_result.replicas);
    v->n = 1;
    v->v = &seed_result;
}
static mc_str_t seed_keys[2] = {{"a", 1}, {"bb", 2}};
static void seed_KEYS(mc_wire_str_list_t *v)
{
    v->n = 2;
    v->v = seed_keys;
}
static uint64_t seed_u64s[2] = {100, 200};
static void seed_U64S(mc_wire_u64_list_t *v)
{
    v->n = 2;
    v->v = seed_u64s;
}
static int32_t seed_i32s[2] = {0, -705};
static void seed_I32S(mc_wire_i32_list_t *v)
{
    seed_I32(&seed_i32s[1]);
    v->n = 2;
    v->v = seed_i32s;
}
static void seed_CONFIG(mc_wire_config_t *v)
{
    memset(v, 0, sizeof(*v));
    v->replica_num   = 2;
    v->has_group_ids = 1;
    seed_KEYS(&v->group_ids);
    seed_STR(&v->preferred_segment);
    v->nof_replica_num = 1;
    seed_KEYS(&v->preferred_nof_segments);
}

static mc_wire_task_t seed_task;
static void seed_TASKS(mc_wire_task_list_t *v)
{
    memset(&seed_task, 0, sizeof(seed_task));
    seed_UUID(&seed_task.id);
    seed_task.type = 1;
    seed_STR(&seed_task.tenant);
    seed_KEY(&seed_task.key);
    seed_STR(&seed_task.source);
    seed_KEYS(&seed_task.targets);
    seed_task.created_at_ms      = 1700000000000ull;
    seed_task.max_retry_attempts = 3;
    v->n = 1;
    v->v = &seed_task;
}

static int write_frame(const char *dir, const char *name, const char *kind, const mc_buf_t *b)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s-%s", dir, name, kind);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(b->data, 1, b->len, f) != b->len) {
        perror(path);
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f);
}

int main(int argc, char **argv)
{
    mc_buf_t b;
    int rc = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    mc_buf_init(&b);
#define SEED_FIELD_RQ_(KIND, name) seed_##KIND(&rq.name);
#define SEED_FIELD_RS_(KIND, name) seed_##KIND(&rs.name);
#define SEED_MSG_(UP, low, code)                                                \
    {                                                                           \
        mc_wire_##low##_req_t rq;                                               \
        mc_wire_##low##_resp_t rs;                                              \
        memset(&rq, 0, sizeof(rq));                                             \
        memset(&rs, 0, sizeof(rs));                                             \
        MC_WIRE_REQ_##low(SEED_FIELD_RQ_) MC_WIRE_RESP_##low(SEED_FIELD_RS_)    \
        mc_buf_reset(&b);                                                       \
        mc_wire_encode_##low##_req(&b, 1, &rq);                                 \
        rc |= write_frame(argv[1], #low, "req", &b);                            \
        mc_buf_reset(&b);                                                       \
        mc_wire_encode_##low##_resp(&b, 1, MC_OK, &rs);                         \
        rc |= write_frame(argv[1], #low, "resp", &b);                           \
        mc_buf_reset(&b);                                                       \
        mc_wire_encode_error(&b, (code), 1, MC_OBJECT_NOT_FOUND);               \
        rc |= write_frame(argv[1], #low, "err", &b);                            \
    }
    MC_WIRE_MESSAGES(SEED_MSG_)
    /* BATCH_REPLICA_CLEAR is mostly sent with no segment name (§5.14) */
    {
        mc_wire_batch_replica_clear_req_t rq;
        memset(&rq, 0, sizeof(rq));
        seed_UUID(&rq.client_id);
        seed_KEYS(&rq.keys);
        mc_buf_reset(&b);
        mc_wire_encode_batch_replica_clear_req(&b, 1, &rq);
        rc |= write_frame(argv[1], "batch_replica_clear", "req-all", &b);
    }
    mc_buf_cleanup(&b);
    return rc == 0 ? 0 : 1;
}

#endif /* MC_FUZZ_WRITE_SEEDS */

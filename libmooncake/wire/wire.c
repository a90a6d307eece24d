/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Codecs of the master RPC (docs/protocol.md §2-§4).  Field kinds are
 * written by hand once each; every message codec is generated from the
 * table in wire.h.  A list decoder first checks that the count is within
 * MC_WIRE_MAX_LIST and that the remaining bytes could hold that many
 * minimal entries, so a 4-byte lie cannot make us allocate gigabytes.
 */
#include "config.h"

#include "wire/wire.h"

void mc_wire_header_pack(const mc_wire_header_t *h, uint8_t out[MC_WIRE_HEADER_SIZE])
{
    mc_store_le32(out, h->magic);
    out[4] = h->version;
    out[5] = h->flags;
    mc_store_le16(out + 6, h->opcode);
    mc_store_le32(out + 8, h->request_id);
    mc_store_le32(out + 12, h->body_len);
}

mc_status_t mc_wire_header_unpack(const uint8_t in[MC_WIRE_HEADER_SIZE], mc_wire_header_t *h)
{
    h->magic      = mc_load_le32(in);
    h->version    = in[4];
    h->flags      = in[5];
    h->opcode     = mc_load_le16(in + 6);
    h->request_id = mc_load_le32(in + 8);
    h->body_len   = mc_load_le32(in + 12);
    if ((h->magic != MC_WIRE_MAGIC) || (h->version != MC_WIRE_VERSION) ||
        ((h->flags & ~MC_WIRE_FLAG_RESPONSE) != 0) || (h->body_len > MC_WIRE_MAX_BODY))
        return MC_DESERIALIZE_FAIL;
    return MC_OK;
}

/* ---- scalar kinds ------------------------------------------------------ */

void mc_wire_put_U8(mc_buf_t *b, const uint8_t *v) { mc_buf_put_u8(b, *v); }
void mc_wire_get_U8(mc_rbuf_t *r, mc_arena_t *a, uint8_t *v) { (void)a; *v = mc_rbuf_get_u8(r); }
void mc_wire_put_U32(mc_buf_t *b, const uint32_t *v) { mc_buf_put_u32(b, *v); }
void mc_wire_get_U32(mc_rbuf_t *r, mc_arena_t *a, uint32_t *v) { (void)a; *v = mc_rbuf_get_u32(r); }
void mc_wire_put_U64(mc_buf_t *b, const uint64_t *v) { mc_buf_put_u64(b, *v); }
void mc_wire_get_U64(mc_rbuf_t *r, mc_arena_t *a, uint64_t *v) { (void)a; *v = mc_rbuf_get_u64(r); }
void mc_wire_put_I32(mc_buf_t *b, const int32_t *v) { mc_buf_put_u32(b, (uint32_t)*v); }
void mc_wire_get_I32(mc_rbuf_t *r, mc_arena_t *a, int32_t *v) { (void)a; *v = (int32_t)mc_rbuf_get_u32(r); }
void mc_wire_put_I64(mc_buf_t *b, const int64_t *v) { mc_buf_put_u64(b, (uint64_t)*v); }
void mc_wire_get_I64(mc_rbuf_t *r, mc_arena_t *a, int64_t *v) { (void)a; *v = (int64_t)mc_rbuf_get_u64(r); }

void mc_wire_put_STR(mc_buf_t *b, const mc_str_t *v) { mc_buf_put_str(b, *v); }
void mc_wire_get_STR(mc_rbuf_t *r, mc_arena_t *a, mc_str_t *v)
{
    (void)a;
    *v = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
}

void mc_wire_put_KEY(mc_buf_t *b, const mc_str_t *v) { mc_buf_put_str(b, *v); }
void mc_wire_get_KEY(mc_rbuf_t *r, mc_arena_t *a, mc_str_t *v)
{
    (void)a;
    *v = mc_rbuf_get_str(r, MC_WIRE_MAX_KEY);
    if (v->len == 0)
        r->err = 1; /* keys are never empty */
}

void mc_wire_put_UUID(mc_buf_t *b, const mc_uuid_t *v)
{
    mc_buf_put_u64(b, v->hi);
    mc_buf_put_u64(b, v->lo);
}
void mc_wire_get_UUID(mc_rbuf_t *r, mc_arena_t *a, mc_uuid_t *v)
{
    (void)a;
    v->hi = mc_rbuf_get_u64(r);
    v->lo = mc_rbuf_get_u64(r);
}

/* ---- composite kinds --------------------------------------------------- */

void mc_wire_put_SEGMENT(mc_buf_t *b, const mc_wire_segment_t *v)
{
    mc_wire_put_UUID(b, &v->id);
    mc_buf_put_str(b, v->name);
    mc_buf_put_u64(b, v->base);
    mc_buf_put_u64(b, v->size);
    mc_buf_put_str(b, v->protocol);
    mc_buf_put_u64(b, v->gen);
}
void mc_wire_get_SEGMENT(mc_rbuf_t *r, mc_arena_t *a, mc_wire_segment_t *v)
{
    mc_wire_get_UUID(r, a, &v->id);
    v->name     = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
    v->base     = mc_rbuf_get_u64(r);
    v->size     = mc_rbuf_get_u64(r);
    v->protocol = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
    v->gen      = mc_rbuf_get_u64(r);
}

static void put_replica(mc_buf_t *b, const mc_wire_replica_t *v)
{
    mc_buf_put_u64(b, v->id);
    mc_buf_put_u8(b, v->status);
    mc_buf_put_u8(b, v->type);
    mc_buf_put_u64(b, v->addr);
    mc_buf_put_u64(b, v->size);
    mc_buf_put_str(b, v->segment);
    mc_wire_put_UUID(b, &v->segment_id);
    if ((v->type == MC_WIRE_REPLICA_MEMORY) || (v->type == MC_WIRE_REPLICA_NOF)) {
        mc_buf_put_u64(b, v->gen);
    } else if (v->type == MC_WIRE_REPLICA_DISK) {
        mc_buf_put_str(b, v->file_path);
        mc_buf_put_u32(b, v->crc);
    } else if (v->type == MC_WIRE_REPLICA_DFS) {
        mc_buf_put_str(b, v->file_path);
        mc_buf_put_u32(b, v->shard_idx);
        mc_buf_put_u64(b, v->aligned_size);
    }
}
static void get_replica(mc_rbuf_t *r, mc_arena_t *a, mc_wire_replica_t *v)
{
    v->gen     = 0;
    v->id      = mc_rbuf_get_u64(r);
    v->status  = mc_rbuf_get_u8(r);
    v->type    = mc_rbuf_get_u8(r);
    v->addr    = mc_rbuf_get_u64(r);
    v->size    = mc_rbuf_get_u64(r);
    v->segment = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
    mc_wire_get_UUID(r, a, &v->segment_id);
    if ((v->type == MC_WIRE_REPLICA_MEMORY) || (v->type == MC_WIRE_REPLICA_NOF)) {
        v->gen = mc_rbuf_get_u64(r);
    } else if (v->type == MC_WIRE_REPLICA_DISK) {
        v->file_path = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
        v->crc       = mc_rbuf_get_u32(r);
    } else if (v->type == MC_WIRE_REPLICA_DFS) {
        v->file_path    = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
        v->shard_idx    = mc_rbuf_get_u32(r);
        v->aligned_size = mc_rbuf_get_u64(r);
    }
}

/*
 * Read a list count and allocate its array.  min_entry is the smallest
 * encoding of one entry; the count must fit in what is left of the frame.
 */
static void *get_list(mc_rbuf_t *r, mc_arena_t *a, uint32_t *n_p, size_t min_entry,
                      size_t elem_size)
{
    uint32_t n = mc_rbuf_get_u32(r);
    *n_p = 0;
    if (r->err)
        return NULL;
    if ((n > MC_WIRE_MAX_LIST) || ((uint64_t)n * min_entry > r->left)) {
        r->err = 1;
        return NULL;
    }
    if (n == 0)
        return NULL;
    void *v = mc_arena_calloc(a, n, elem_size);
    if (v == NULL) {
        r->err = 1;
        return NULL;
    }
    *n_p = n;
    return v;
}

#define REPLICA_MIN_ENC (8 + 1 + 1 + 8 + 8 + 4 + 16)
#define SEGMENT_MIN_ENC (16 + 4 + 8 + 8 + 4 + 8)

void mc_wire_put_REPLICAS(mc_buf_t *b, const mc_wire_replica_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++)
        put_replica(b, &v->v[i]);
}
void mc_wire_get_REPLICAS(mc_rbuf_t *r, mc_arena_t *a, mc_wire_replica_list_t *v)
{
    v->v = get_list(r, a, &v->n, REPLICA_MIN_ENC, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++)
        get_replica(r, a, &v->v[i]);
}

void mc_wire_put_RESULTS(mc_buf_t *b, const mc_wire_result_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++) {
        mc_buf_put_u32(b, (uint32_t)v->v[i].status);
        mc_buf_put_u64(b, v->v[i].size);
        mc_wire_put_REPLICAS(b, &v->v[i].replicas);
    }
}
void mc_wire_get_RESULTS(mc_rbuf_t *r, mc_arena_t *a, mc_wire_result_list_t *v)
{
    v->v = get_list(r, a, &v->n, 4 + 8 + 4, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++) {
        v->v[i].status = (int32_t)mc_rbuf_get_u32(r);
        v->v[i].size   = mc_rbuf_get_u64(r);
        mc_wire_get_REPLICAS(r, a, &v->v[i].replicas);
    }
}

void mc_wire_put_SEGMENTS(mc_buf_t *b, const mc_wire_segment_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++)
        mc_wire_put_SEGMENT(b, &v->v[i]);
}
void mc_wire_get_SEGMENTS(mc_rbuf_t *r, mc_arena_t *a, mc_wire_segment_list_t *v)
{
    v->v = get_list(r, a, &v->n, SEGMENT_MIN_ENC, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++)
        mc_wire_get_SEGMENT(r, a, &v->v[i]);
}

void mc_wire_put_KEYS(mc_buf_t *b, const mc_wire_str_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++)
        mc_buf_put_str(b, v->v[i]);
}
void mc_wire_get_KEYS(mc_rbuf_t *r, mc_arena_t *a, mc_wire_str_list_t *v)
{
    v->v = get_list(r, a, &v->n, 4 + 1, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++)
        mc_wire_get_KEY(r, a, &v->v[i]);
}

/* A list of strings that may be empty (group ids: "" = ungrouped). */
static void put_strs(mc_buf_t *b, const mc_wire_str_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++)
        mc_buf_put_str(b, v->v[i]);
}
static void get_strs(mc_rbuf_t *r, mc_arena_t *a, mc_wire_str_list_t *v)
{
    v->v = get_list(r, a, &v->n, 4, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++)
        v->v[i] = mc_rbuf_get_str(r, MC_WIRE_MAX_KEY);
}

void mc_wire_put_U64S(mc_buf_t *b, const mc_wire_u64_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++)
        mc_buf_put_u64(b, v->v[i]);
}
void mc_wire_get_U64S(mc_rbuf_t *r, mc_arena_t *a, mc_wire_u64_list_t *v)
{
    v->v = get_list(r, a, &v->n, 8, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++)
        v->v[i] = mc_rbuf_get_u64(r);
}

void mc_wire_put_I32S(mc_buf_t *b, const mc_wire_i32_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++)
        mc_buf_put_u32(b, (uint32_t)v->v[i]);
}
void mc_wire_get_I32S(mc_rbuf_t *r, mc_arena_t *a, mc_wire_i32_list_t *v)
{
    v->v = get_list(r, a, &v->n, 4, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++)
        v->v[i] = (int32_t)mc_rbuf_get_u32(r);
}

void mc_wire_put_CONFIG(mc_buf_t *b, const mc_wire_config_t *v)
{
    mc_buf_put_u32(b, v->replica_num);
    mc_buf_put_u32(b, v->nof_replica_num);
    mc_buf_put_u32(b, v->dfs_replica_num);
    mc_buf_put_u8(b, v->soft_pin_action);
    mc_buf_put_u8(b, v->has_soft_pin_ttl);
    mc_buf_put_u64(b, v->soft_pin_ttl_ms);
    mc_buf_put_u8(b, v->with_hard_pin);
    mc_buf_put_str(b, v->preferred_segment);
    mc_buf_put_u8(b, v->prefer_alloc_in_same_node);
    mc_buf_put_u8(b, v->has_group_ids);
    put_strs(b, &v->group_ids);
    put_strs(b, &v->preferred_nof_segments);
}
void mc_wire_get_CONFIG(mc_rbuf_t *r, mc_arena_t *a, mc_wire_config_t *v)
{
    v->replica_num               = mc_rbuf_get_u32(r);
    v->nof_replica_num           = mc_rbuf_get_u32(r);
    v->dfs_replica_num           = mc_rbuf_get_u32(r);
    v->soft_pin_action           = mc_rbuf_get_u8(r);
    v->has_soft_pin_ttl          = mc_rbuf_get_u8(r);
    v->soft_pin_ttl_ms           = mc_rbuf_get_u64(r);
    v->with_hard_pin             = mc_rbuf_get_u8(r);
    v->preferred_segment         = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
    v->prefer_alloc_in_same_node = mc_rbuf_get_u8(r);
    v->has_group_ids             = mc_rbuf_get_u8(r);
    get_strs(r, a, &v->group_ids);
    get_strs(r, a, &v->preferred_nof_segments);
    if (v->preferred_nof_segments.n > MC_WIRE_MAX_PREF_NOF)
        r->err = 1;
}

/* Encoded size of the smallest task: id, type, four empty strings/lists,
 * created_at_ms, max_retry_attempts. */
#define TASK_MIN_ENC (16 + 1 + 4 + 4 + 4 + 4 + 8 + 4)

void mc_wire_put_TASKS(mc_buf_t *b, const mc_wire_task_list_t *v)
{
    mc_buf_put_u32(b, v->n);
    for (uint32_t i = 0; i < v->n; i++) {
        const mc_wire_task_t *t = &v->v[i];
        mc_wire_put_UUID(b, &t->id);
        mc_buf_put_u8(b, t->type);
        mc_buf_put_str(b, t->tenant);
        mc_buf_put_str(b, t->key);
        mc_buf_put_str(b, t->source);
        put_strs(b, &t->targets);
        mc_buf_put_u64(b, t->created_at_ms);
        mc_buf_put_u32(b, t->max_retry_attempts);
    }
}
void mc_wire_get_TASKS(mc_rbuf_t *r, mc_arena_t *a, mc_wire_task_list_t *v)
{
    v->v = get_list(r, a, &v->n, TASK_MIN_ENC, sizeof(*v->v));
    for (uint32_t i = 0; (i < v->n) && !r->err; i++) {
        mc_wire_task_t *t = &v->v[i];
        mc_wire_get_UUID(r, a, &t->id);
        t->type   = mc_rbuf_get_u8(r);
        t->tenant = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
        mc_wire_get_KEY(r, a, &t->key);
        t->source = mc_rbuf_get_str(r, MC_WIRE_MAX_STR);
        get_strs(r, a, &t->targets);
        t->created_at_ms      = mc_rbuf_get_u64(r);
        t->max_retry_attempts = mc_rbuf_get_u32(r);
    }
}

/* ---- generated message codecs ------------------------------------------ */

static void put_header(mc_buf_t *b, uint16_t opcode, uint32_t request_id, uint8_t flags)
{
    /* body_len is patched once the body is known */
    uint8_t *h = mc_buf_reserve(b, MC_WIRE_HEADER_SIZE);
    if (h != NULL) {
        mc_wire_header_t hdr = {MC_WIRE_MAGIC, MC_WIRE_VERSION, flags, opcode, request_id, 0};
        mc_wire_header_pack(&hdr, h);
    }
}

static void patch_len(mc_buf_t *b, size_t start)
{
    if (!b->oom)
        mc_store_le32(b->data + start + 12, (uint32_t)(b->len - start - MC_WIRE_HEADER_SIZE));
}

static mc_status_t finish_decode(mc_rbuf_t *r)
{
    return (r->err || (r->left != 0)) ? MC_DESERIALIZE_FAIL : MC_OK;
}

#define MC_WIRE_FIELD_PUT_(KIND, name) mc_wire_put_##KIND(b, &m->name);
#define MC_WIRE_FIELD_GET_(KIND, name) mc_wire_get_##KIND(&r, arena, &m->name);

#define MC_WIRE_CODECS_(UP, low, code)                                                   \
    void mc_wire_encode_##low##_req(mc_buf_t *b, uint32_t request_id,                    \
                                    const mc_wire_##low##_req_t *m)                      \
    {                                                                                    \
        size_t start = b->len;                                                           \
        (void)m;                                                                         \
        put_header(b, (code), request_id, 0);                                            \
        MC_WIRE_REQ_##low(MC_WIRE_FIELD_PUT_) patch_len(b, start);                       \
    }                                                                                    \
    mc_status_t mc_wire_decode_##low##_req(const uint8_t *body, size_t len,              \
                                           mc_arena_t *arena, mc_wire_##low##_req_t *m)  \
    {                                                                                    \
        mc_rbuf_t r;                                                                     \
        (void)arena;                                                                     \
        memset(m, 0, sizeof(*m));                                                        \
        mc_rbuf_init(&r, body, len);                                                     \
        MC_WIRE_REQ_##low(MC_WIRE_FIELD_GET_) return finish_decode(&r);                  \
    }                                                                                    \
    void mc_wire_encode_##low##_resp(mc_buf_t *b, uint32_t request_id, int32_t status,   \
                                     const mc_wire_##low##_resp_t *m)                    \
    {                                                                                    \
        size_t start = b->len;                                                           \
        (void)m;                                                                         \
        put_header(b, (code), request_id, MC_WIRE_FLAG_RESPONSE);                        \
        mc_buf_put_u32(b, (uint32_t)status);                                             \
        if (status == MC_OK) {                                                           \
            MC_WIRE_RESP_##low(MC_WIRE_FIELD_PUT_)                                       \
        }                                                                                \
        patch_len(b, start);                                                             \
    }                                                                                    \
    mc_status_t mc_wire_decode_##low##_resp(const uint8_t *body, size_t len,             \
                                            mc_arena_t *arena, int32_t *status_p,        \
                                            mc_wire_##low##_resp_t *m)                   \
    {                                                                                    \
        mc_rbuf_t r;                                                                     \
        (void)arena;                                                                     \
        memset(m, 0, sizeof(*m));                                                        \
        mc_rbuf_init(&r, body, len);                                                     \
        *status_p = (int32_t)mc_rbuf_get_u32(&r);                                        \
        if (r.err)                                                                       \
            return MC_DESERIALIZE_FAIL;                                                  \
        if (*status_p == MC_OK) {                                                        \
            MC_WIRE_RESP_##low(MC_WIRE_FIELD_GET_)                                       \
        }                                                                                \
        return finish_decode(&r);                                                        \
    }

MC_WIRE_MESSAGES(MC_WIRE_CODECS_)

const char *mc_wire_op_name(uint16_t opcode)
{
    switch (opcode) {
#define MC_WIRE_OP_NAME_(UP, low, code) case code: return #UP;
    MC_WIRE_MESSAGES(MC_WIRE_OP_NAME_)
#undef MC_WIRE_OP_NAME_
    default:
        return NULL;
    }
}

/* Largest encoding of one field of each kind; lists are unbounded here
 * (a value past MC_WIRE_MAX_BODY, so any sum with one stays past it). */
#define MC_WIRE_MAXOF_U8       1u
#define MC_WIRE_MAXOF_U32      4u
#define MC_WIRE_MAXOF_U64      8u
#define MC_WIRE_MAXOF_I32      4u
#define MC_WIRE_MAXOF_I64      8u
#define MC_WIRE_MAXOF_UUID     16u
#define MC_WIRE_MAXOF_KEY      (4u + MC_WIRE_MAX_KEY)
#define MC_WIRE_MAXOF_STR      (4u + MC_WIRE_MAX_STR)
#define MC_WIRE_MAXOF_SEGMENT  (16u + MC_WIRE_MAXOF_STR + 8u + 8u + MC_WIRE_MAXOF_STR)
#define MC_WIRE_MAXOF_CONFIG   (4u + 4u + 4u + 1u + 1u + 8u + 1u + MC_WIRE_MAXOF_STR + 1u + \
                                1u + 4u + (4u + MC_WIRE_MAX_KEY) + 4u + \
                                MC_WIRE_MAX_PREF_NOF * (4u + MC_WIRE_MAX_KEY))
#define MC_WIRE_MAXOF_LIST     ((uint64_t)MC_WIRE_MAX_BODY + 1u)
#define MC_WIRE_MAXOF_KEYS     MC_WIRE_MAXOF_LIST
#define MC_WIRE_MAXOF_U64S     MC_WIRE_MAXOF_LIST
#define MC_WIRE_MAXOF_I32S     MC_WIRE_MAXOF_LIST
#define MC_WIRE_MAXOF_SEGMENTS MC_WIRE_MAXOF_LIST
#define MC_WIRE_MAXOF_REPLICAS MC_WIRE_MAXOF_LIST
#define MC_WIRE_MAXOF_RESULTS  MC_WIRE_MAXOF_LIST
#define MC_WIRE_MAXOF_TASKS    MC_WIRE_MAXOF_LIST

uint32_t mc_wire_req_max_body(uint16_t opcode)
{
    uint64_t max;

    switch (opcode) {
#define MC_WIRE_MAXOF_FIELD_(KIND, fname) +(uint64_t)MC_WIRE_MAXOF_##KIND
#define MC_WIRE_REQ_MAX_(UP, low, code)                                                   \
    case code:                                                                            \
        max = 0 MC_WIRE_REQ_##low(MC_WIRE_MAXOF_FIELD_);                                  \
        break;
        MC_WIRE_MESSAGES(MC_WIRE_REQ_MAX_)
#undef MC_WIRE_REQ_MAX_
#undef MC_WIRE_MAXOF_FIELD_
    default:
        max = MC_WIRE_MAX_BODY;
        break;
    }
    return (uint32_t)MC_MIN(max, (uint64_t)MC_WIRE_MAX_BODY);
}

void mc_wire_encode_error(mc_buf_t *b, uint16_t opcode, uint32_t request_id, int32_t status)
{
    size_t start = b->len;
    put_header(b, opcode, request_id, MC_WIRE_FLAG_RESPONSE);
    mc_buf_put_u32(b, (uint32_t)status);
    patch_len(b, start);
}

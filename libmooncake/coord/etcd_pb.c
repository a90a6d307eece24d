/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd v3 protobuf messages for a guarded KV.Txn, by hand (etcd_pb.h).
 *
 * Field numbers, from etcd's api/etcdserverpb/rpc.proto (unchanged since
 * etcd 3.0; the Debian etcd 3.4 speaks them):
 *   TxnRequest          compare = 1 (Compare), success = 2, failure = 3 (RequestOp)
 *   Compare             result = 1 (EQUAL = 0), target = 2 (CREATE = 1),
 *                       key = 3, create_revision = 5 (of the target_union oneof)
 *   RequestOp           request_range = 1, request_put = 2, request_delete_range = 3
 *   PutRequest          key = 1, value = 2, lease = 3
 *   DeleteRangeRequest  key = 1, range_end = 2
 *   TxnResponse         header = 1 (ResponseHeader), succeeded = 2, responses = 3
 *   ResponseHeader      cluster_id = 1, member_id = 2, revision = 3, raft_term = 4
 *
 * Protobuf's wire format: a field is a varint key (field << 3 | wire type)
 * and its value: wire type 0 a varint, 1 eight bytes, 2 a varint length
 * and that many bytes (bytes, strings, nested messages), 5 four bytes.
 * Nested messages need their length first, so each message's size is
 * computed before it is written (no second buffer, no patching).
 */
#include "config.h"

#include <string.h>

#include "coord/etcd_pb.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* ---- encoding ------------------------------------------------------------------- */

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void put_varint(mc_buf_t *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    mc_buf_put_bytes(b, t, n);
}

/* Every field used here is below 16: its key is one byte. */
static void put_key(mc_buf_t *b, unsigned field, unsigned wt)
{
    mc_buf_put_u8(b, (uint8_t)((field << 3) | wt));
}

/* The size of a length-delimited field of @p n bytes, key included. */
static size_t len_field_size(size_t n)
{
    return 1 + varint_size(n) + n;
}

static void put_len_field(mc_buf_t *b, unsigned field, const void *p, size_t n)
{
    put_key(b, field, WT_LEN);
    put_varint(b, n);
    mc_buf_put_bytes(b, p, n);
}

/* int64 as protobuf sends it: two's complement in a 64-bit varint. */
static size_t i64_field_size(int64_t v)
{
    return 1 + varint_size((uint64_t)v);
}

static void put_i64_field(mc_buf_t *b, unsigned field, int64_t v)
{
    put_key(b, field, WT_VARINT);
    put_varint(b, (uint64_t)v);
}

/* Compare{target = CREATE, key, create_revision}; result EQUAL is the
 * default (0) and left out; create_revision is a oneof member, sent even
 * when 0. */
static size_t compare_size(const char *key, int64_t rev)
{
    return 2 + len_field_size(strlen(key)) + i64_field_size(rev);
}

static void put_compare(mc_buf_t *b, const char *key, int64_t rev)
{
    put_key(b, 2, WT_VARINT);
    mc_buf_put_u8(b, 1); /* CompareTarget CREATE */
    put_len_field(b, 3, key, strlen(key));
    put_i64_field(b, 5, rev);
}

/* The PutRequest or DeleteRangeRequest inside a RequestOp. */
static size_t op_body_size(const mc_etcd_op_t *op)
{
    size_t n = len_field_size(strlen(op->key));
    if (op->del)
        return n + ((op->range_end != NULL) ? len_field_size(strlen(op->range_end)) : 0);
    return n + ((op->len > 0) ? len_field_size(op->len) : 0);
}

static void put_op(mc_buf_t *b, const mc_etcd_op_t *op)
{
    size_t body = op_body_size(op);
    put_key(b, op->del ? 3 : 2, WT_LEN); /* request_delete_range / request_put */
    put_varint(b, body);
    put_len_field(b, 1, op->key, strlen(op->key));
    if (op->del && (op->range_end != NULL))
        put_len_field(b, 2, op->range_end, strlen(op->range_end));
    else if (!op->del && (op->len > 0))
        put_len_field(b, 2, op->val, op->len);
}

void mc_etcd_pb_txn_guarded_encode(mc_buf_t *b, const char *guard_key,
                                   int64_t create_revision, const mc_etcd_op_t *ops,
                                   size_t nops)
{
    size_t cmp = compare_size(guard_key, create_revision);
    size_t msg = len_field_size(cmp);
    uint8_t *hdr;

    for (size_t i = 0; i < nops; i++)
        msg += len_field_size(len_field_size(op_body_size(&ops[i])));
    if (msg > UINT32_MAX) {
        b->oom = 1;
        return;
    }
    hdr = mc_buf_reserve(b, MC_ETCD_GRPC_PREFIX);
    if (hdr == NULL)
        return;
    hdr[0] = 0; /* not compressed */
    hdr[1] = (uint8_t)(msg >> 24);
    hdr[2] = (uint8_t)(msg >> 16);
    hdr[3] = (uint8_t)(msg >> 8);
    hdr[4] = (uint8_t)msg;
    put_key(b, 1, WT_LEN);
    put_varint(b, cmp);
    put_compare(b, guard_key, create_revision);
    for (size_t i = 0; i < nops; i++) {
        put_key(b, 2, WT_LEN); /* success */
        put_varint(b, len_field_size(op_body_size(&ops[i])));
        put_op(b, &ops[i]);
    }
}

/* ---- decoding ------------------------------------------------------------------- */

typedef struct pb_reader {
    const uint8_t *p, *end;
} pb_reader_t;

static int get_varint(pb_reader_t *r, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned sh = 0; sh < 70; sh += 7) {
        uint8_t c;
        if (r->p >= r->end)
            return -1;
        c = *r->p++;
        if ((sh == 63) && (c > 1))
            return -1; /* more than 64 bits */
        x |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type and, for WT_LEN, its bytes (for
 * the others *val_p is the varint or the fixed bytes read little-endian).
 * 0, 1 at the end of the message, -1 when malformed. */
static int next_field(pb_reader_t *r, unsigned *field_p, unsigned *wt_p, uint64_t *val_p,
                      pb_reader_t *sub)
{
    uint64_t key, v = 0;

    if (r->p == r->end)
        return 1;
    if ((get_varint(r, &key) != 0) || ((key >> 3) == 0) || ((key >> 3) > UINT32_MAX >> 3))
        return -1;
    *field_p = (unsigned)(key >> 3);
    *wt_p    = (unsigned)(key & 7);
    switch (*wt_p) {
    case WT_VARINT:
        if (get_varint(r, &v) != 0)
            return -1;
        break;
    case WT_I64:
    case WT_I32: {
        size_t w = (*wt_p == WT_I64) ? 8 : 4;
        if ((size_t)(r->end - r->p) < w)
            return -1;
        for (size_t i = 0; i < w; i++)
            v |= (uint64_t)r->p[i] << (8 * i);
        r->p += w;
        break;
    }
    case WT_LEN:
        if ((get_varint(r, &v) != 0) || (v > (uint64_t)(r->end - r->p)))
            return -1;
        sub->p   = r->p;
        sub->end = r->p + v;
        r->p += v;
        break;
    default:
        return -1; /* groups (3, 4) are not in etcd's messages; 6, 7 do not exist */
    }
    *val_p = v;
    return 0;
}

/* Walk a nested message whose fields are skipped, only to check it is
 * well formed (the responses of a txn). */
static int check_message(pb_reader_t r)
{
    unsigned f, wt;
    uint64_t v;
    pb_reader_t sub;
    int rc;
    while ((rc = next_field(&r, &f, &wt, &v, &sub)) == 0)
        ;
    return (rc == 1) ? 0 : -1;
}

static int header_decode(pb_reader_t r, int64_t *revision)
{
    unsigned f, wt;
    uint64_t v;
    pb_reader_t sub;
    int rc;
    while ((rc = next_field(&r, &f, &wt, &v, &sub)) == 0) {
        if (f == 3) {
            if (wt != WT_VARINT)
                return -1;
            *revision = (int64_t)v;
        }
    }
    return (rc == 1) ? 0 : -1;
}

int mc_etcd_pb_txn_resp_decode(const uint8_t *p, size_t n, mc_etcd_pb_txn_resp_t *out)
{
    pb_reader_t r = {p, p + n}, sub;
    unsigned f, wt;
    uint64_t v;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = next_field(&r, &f, &wt, &v, &sub)) == 0) {
        switch (f) {
        case 1: /* header */
            if ((wt != WT_LEN) || (header_decode(sub, &out->revision) != 0))
                return -1;
            break;
        case 2: /* succeeded */
            if (wt != WT_VARINT)
                return -1;
            out->succeeded = (v != 0);
            break;
        case 3: /* responses: not used, but must be well formed */
            if ((wt != WT_LEN) || (check_message(sub) != 0))
                return -1;
            break;
        default: /* a newer etcd's field: skipped */
            break;
        }
    }
    return (rc == 1) ? 0 : -1;
}

int mc_etcd_grpc_unframe(const uint8_t *p, size_t n, const uint8_t **msg_p, size_t *len_p)
{
    uint32_t len;
    if ((n < MC_ETCD_GRPC_PREFIX) || (p[0] != 0))
        return -1; /* short, or compressed (never asked for) */
    len = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) | p[4];
    if ((size_t)len != n - MC_ETCD_GRPC_PREFIX)
        return -1;
    *msg_p = p + MC_ETCD_GRPC_PREFIX;
    *len_p = len;
    return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the etcd gRPC answers the master decodes
 * (libmooncake/coord/etcd_pb.c), and the requests it encodes.
 *
 * The input is fed as hostile bytes to mc_etcd_grpc_unframe and
 * mc_etcd_pb_txn_resp_decode, each given a copy of exactly the input's
 * length, so ASan sees any read past it.  It also drives an encoding: its
 * bytes become a guard key, a revision and up to 16 ops (puts and range
 * deletes of keys and values cut from the input); the encoded frame must
 * unframe, its length prefix must match, and it must hold every value.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/etcd_pb.h"

#define MAX_OPS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated string of the next bytes (at most 32, no NUL inside). */
static char *take_str(const uint8_t *d, size_t n, size_t *pos)
{
    size_t len = (*pos < n) ? (d[(*pos)++] & 31u) : 0;
    char *s;
    if (len > n - *pos)
        len = n - *pos;
    s = malloc(len + 1);
    if (s == NULL)
        abort();
    for (size_t i = 0; i < len; i++)
        s[i] = (char)(d[*pos + i] ? d[*pos + i] : 'x');
    s[len] = '\0';
    *pos += len;
    return s;
}

static void hostile(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    const uint8_t *msg;
    size_t len;
    mc_etcd_pb_txn_resp_t r;

    if (copy == NULL)
        abort();
    memcpy(copy, data, size);
    (void)mc_etcd_pb_txn_resp_decode(copy, size, &r);
    if (mc_etcd_grpc_unframe(copy, size, &msg, &len) == 0) {
        if ((msg != copy + MC_ETCD_GRPC_PREFIX) || (len != size - MC_ETCD_GRPC_PREFIX))
            abort();
        (void)mc_etcd_pb_txn_resp_decode(msg, len, &r);
    }
    free(copy);
}

static void encode(const uint8_t *d, size_t n)
{
    mc_etcd_op_t ops[MAX_OPS];
    char *strs[3 * MAX_OPS + 1];
    size_t pos = 0, nops = 0, nstr = 0;
    int64_t rev = 0;
    mc_buf_t b;
    const uint8_t *msg;
    size_t len;

    strs[nstr++] = take_str(d, n, &pos);
    for (int i = 0; (i < 8) && (pos < n); i++)
        rev = (int64_t)(((uint64_t)rev << 8) | d[pos++]);
    while ((nops < MAX_OPS) && (pos < n)) {
        mc_etcd_op_t *op = &ops[nops++];
        uint8_t kind     = d[pos++];
        memset(op, 0, sizeof(*op));
        op->del = kind & 1;
        op->key = strs[nstr++] = take_str(d, n, &pos);
        if (op->del) {
            if (kind & 2)
                op->range_end = strs[nstr++] = take_str(d, n, &pos);
        } else {
            strs[nstr] = take_str(d, n, &pos);
            op->val    = strs[nstr];
            op->len    = strlen(strs[nstr++]);
        }
    }
    mc_buf_init(&b);
    mc_etcd_pb_txn_guarded_encode(&b, strs[0], rev, ops, nops);
    if (b.oom || (mc_etcd_grpc_unframe(b.data, b.len, &msg, &len) != 0)) {
        fprintf(stderr, "fuzz_etcd_pb: an encoded txn does not unframe\n");
        abort();
    }
    for (size_t i = 0; i < nops; i++) {
        if (!ops[i].del && (ops[i].len > 0) && (memmem(msg, len, ops[i].val, ops[i].len) == NULL)) {
            fprintf(stderr, "fuzz_etcd_pb: op %zu's value is not in the encoding\n", i);
            abort();
        }
    }
    mc_buf_cleanup(&b);
    for (size_t i = 0; i < nstr; i++)
        free(strs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hostile(data, size);
    encode(data, size);
    return 0;
}

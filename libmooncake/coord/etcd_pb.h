/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The few etcd v3 protobuf messages the native gRPC path needs (a guarded
 * KV.Txn and its answer), coded by hand, and gRPC's message framing
 * (etcd_grpc.c sends them; docs/ha.md, "Log shipping").
 *
 * Pure functions over buffers: no I/O, no allocation beyond the caller's
 * mc_buf_t, so the decoder can be unit-tested and fuzzed on its own.  The
 * decoders never read outside [p, p + n): every length is checked against
 * what is left before it is used, and a malformed message is -1.
 */
#ifndef MC_COORD_ETCD_PB_H
#define MC_COORD_ETCD_PB_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "coord/etcd.h"

/* gRPC's length-prefixed message: u8 compressed flag, u32 big-endian length. */
#define MC_ETCD_GRPC_PREFIX 5

/*
 * Append one gRPC frame holding the TxnRequest "if @p guard_key's create
 * revision is @p create_revision then @p ops" (no failure ops) to @p b.
 * @p b->oom tells whether it fit in memory.
 */
void mc_etcd_pb_txn_guarded_encode(mc_buf_t *b, const char *guard_key,
                                   int64_t create_revision, const mc_etcd_op_t *ops,
                                   size_t nops);

/* What a TxnResponse says that the callers use. */
typedef struct mc_etcd_pb_txn_resp {
    int succeeded;    /* the compare held */
    int64_t revision; /* the store revision of the answer (its header) */
} mc_etcd_pb_txn_resp_t;

/* Decode the TxnResponse message of @p n bytes at @p p (no frame).  0, or
 * -1 when it is not a well-formed protobuf message. */
int mc_etcd_pb_txn_resp_decode(const uint8_t *p, size_t n, mc_etcd_pb_txn_resp_t *out);

/* The one message of a unary gRPC answer body (@p n bytes at @p p): 0
 * with *msg_p / *len_p set, or -1 when the body is not exactly one
 * uncompressed frame. */
int mc_etcd_grpc_unframe(const uint8_t *p, size_t n, const uint8_t **msg_p, size_t *len_p);

#endif /* MC_COORD_ETCD_PB_H */

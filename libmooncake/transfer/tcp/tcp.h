/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tcp transport: one data port served by an acceptor thread and one
 * thread per connection, and per-peer pools of persistent connections on
 * the initiator side.  Frames are in transfer/proto.h and
 * docs/transfer.md; the engine reaches it only through the ops table.
 */
#ifndef MC_TRANSFER_TCP_H
#define MC_TRANSFER_TCP_H

#include "transfer/engine.h"

extern const mc_te_transport_ops_t mc_tcp_transport_ops;

/*
 * The RDMA queue-pair handshake travels on the data port as an
 * RDMA_CONNECT frame (docs/transfer.md, "Opcodes"): the initiator sends
 * its record with a connection id, the target's handler answers with its
 * own.  A target without a handler answers NOT_SUPPORTED.
 */

/* Answer one handshake: @p conn_id names the initiator's connection (a
 * repeated id replaces what the earlier one set up); write at most @p cap
 * bytes of answer and their count.  Runs on a connection thread. */
typedef mc_status_t (*mc_tcp_hs_func_t)(void *arg, uint64_t conn_id, const uint8_t *req,
                                        size_t len, uint8_t *resp, size_t cap,
                                        size_t *resp_len_p);

/* Install (fn non-NULL) or remove the handler of @p tcp (the priv of an
 * installed tcp transport).  Removing waits for a handler call in progress. */
void mc_tcp_hs_handler_set(void *tcp, mc_tcp_hs_func_t fn, void *arg);

/* Send one handshake on a pooled connection of @p peer (a tcp peer) and
 * return the answer (malloc'd, *resp_len_p bytes, at most MC_TE_HS_MAX).
 * The target's status otherwise (NOT_SUPPORTED: no RDMA there), or
 * TRANSFER_FAIL. */
mc_status_t mc_tcp_hs_call(void *peer, uint64_t conn_id, const uint8_t *req, size_t len,
                           uint8_t **resp_p, size_t *resp_len_p);

/* The host and port a tcp peer connects to (for messages). */
const char *mc_tcp_peer_host(const void *peer);
uint16_t mc_tcp_peer_port(const void *peer);

#endif /* MC_TRANSFER_TCP_H */

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

#endif /* MC_TRANSFER_TCP_H */

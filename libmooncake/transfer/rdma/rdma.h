/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rdma transport (docs/transfer.md, "RDMA"): one-sided RDMA READ and
 * WRITE over RC queue pairs on libibverbs, built with --with-rdma only;
 * libibverbs.so.1 itself is loaded at run time, at the first use of
 * protocol "rdma" (ibv.h).
 * It keeps a tcp transport underneath for the data port, which serves
 * descriptors (with the rkeys) and carries the queue-pair handshake; a
 * request whose local memory is not registered, or whose target published
 * no rkey, goes over that tcp transport instead.  Not installed.
 */
#ifndef MC_TRANSFER_RDMA_H
#define MC_TRANSFER_RDMA_H

#include "transfer/engine.h"

#ifdef MC_HAVE_RDMA
extern const mc_te_transport_ops_t mc_rdma_transport_ops;
/* Store @p v in the generation word of region @p r (docs/transfer.md §3.6),
 * which peers READ one-sidedly after the data of a READ naming a
 * generation: the engine calls it when the region adopts another reuse
 * counter, and with 0 first thing when the region is given up (0 is final).
 * Nothing when the engine's transport is not rdma or @p r has no word. */
void mc_rdma_gen_word_set(mc_te_t *te, mc_te_region_t *r, uint64_t v);
#endif

#endif /* MC_TRANSFER_RDMA_H */

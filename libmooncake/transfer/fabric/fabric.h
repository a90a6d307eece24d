/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The libfabric transport (docs/transfer.md §14): protocol "efa" (AWS
 * Elastic Fabric Adapter) and "cxi" (HPE Slingshot), one code on
 * libfabric's reliable-datagram endpoints (FI_EP_RDM) with one-sided
 * fi_read / fi_write into registered memory.  The provider is the
 * protocol's own when libfabric has it, else a software one (tcp;ofi_rxm,
 * then sockets), or the one MC_FABRIC_PROVIDER names.  Built with
 * --with-fabric (auto-detected); libfabric.so.1 itself is loaded at run
 * time (fi.h).  A tcp transport stays underneath for the data port, the
 * descriptors (which carry the endpoint address and the memory keys) and
 * every request that cannot go one-sided.  Not installed.
 */
#ifndef MC_TRANSFER_FABRIC_H
#define MC_TRANSFER_FABRIC_H

#include "transfer/engine.h"

#ifdef MC_HAVE_FABRIC
extern const mc_te_transport_ops_t mc_fabric_efa_transport_ops;
extern const mc_te_transport_ops_t mc_fabric_cxi_transport_ops;
#endif

#endif /* MC_TRANSFER_FABRIC_H */

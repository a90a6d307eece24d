/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA NIC discovery and selection (docs/transfer.md, "RDMA").
 *
 * Discovery reads sysfs only (<root>/class/infiniband/<dev>/...), so it
 * runs, and is tested, on hosts without libibverbs or a NIC.  Selection
 * applies the rules of rdma_devices, MC_MS_AUTO_DISC and MC_MS_FILTERS.
 * Not installed.
 */
#ifndef MC_TRANSFER_RDMA_NIC_H
#define MC_TRANSFER_RDMA_NIC_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

#define MC_RDMA_NIC_NAME_MAX 64 /* with the NUL */
#define MC_RDMA_MAX_NICS     32
#define MC_RDMA_SYSFS_ROOT   "/sys"

typedef struct mc_rdma_nic {
    char name[MC_RDMA_NIC_NAME_MAX];
    int numa_node;      /* -1: unknown */
    int port;           /* first ACTIVE port (1-based), or 0 when none is */
    int ethernet;       /* link layer of that port: 1 RoCE, 0 InfiniBand */
} mc_rdma_nic_t;

/* Every device under <root>/class/infiniband, sorted by name; at most cap
 * (more are logged and left out).  An absent directory is no device
 * (n 0, MC_OK). */
mc_status_t mc_rdma_nic_scan(const char *root, mc_rdma_nic_t *out, size_t cap, size_t *n_p);

/* Split a comma-separated NIC list ("mlx5_0, mlx5_1").  Names are
 * [A-Za-z0-9_.-]{1,63}; empty items, bad names, duplicates and more than
 * cap names are MC_INVALID_PARAMS with a detail naming @p what and the
 * item. */
mc_status_t mc_rdma_nic_list_parse(const char *list, const char *what,
                                   char (*names)[MC_RDMA_NIC_NAME_MAX], size_t cap,
                                   size_t *n_p);

/*
 * The NICs an engine uses.  @p devices is rdma_devices; @p auto_disc and
 * @p filters are the values of MC_MS_AUTO_DISC and MC_MS_FILTERS (NULL or
 * "" when unset).
 *  - auto_disc "1": discovery, devices ignored; "0": devices required;
 *    unset: discovery when devices is empty.  Other values: INVALID_PARAMS.
 *  - discovery keeps NICs with an ACTIVE port, restricted to @p filters.
 *  - a listed NIC that sysfs does not have: INVALID_PARAMS naming it.
 *  - nothing found: NOT_SUPPORTED, "no RDMA device found ...".
 * The result is sorted by name, at most MC_RDMA_MAX_NICS.
 */
mc_status_t mc_rdma_nic_select(const char *root, const char *devices, const char *auto_disc,
                               const char *filters, mc_rdma_nic_t *out, size_t *n_p);

/* Order in which to use the NICs for memory on NUMA node @p numa: those on
 * that node first, then the rest, each group in its given order; numa < 0
 * keeps the given order.  Writes n indexes. */
void mc_rdma_nic_order(const mc_rdma_nic_t *nics, size_t n, int numa, size_t *order);

/* NUMA node of the page holding @p addr, or -1 when the kernel cannot say
 * (unfaulted page, no NUMA). */
int mc_rdma_addr_numa(const void *addr);

#endif /* MC_TRANSFER_RDMA_NIC_H */

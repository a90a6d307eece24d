/* SPDX-License-Identifier: Apache-2.0 */
/* libibverbs checks of the selected NICs (built with --with-rdma only). */
#ifndef MC_TRANSFER_RDMA_VERBS_H
#define MC_TRANSFER_RDMA_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

#include "transfer/rdma/nic.h"

/* Load libibverbs (ibv.h) when this is its first use, then open every NIC
 * of @p nics and query it: its port must be ACTIVE and max_mr_size is
 * written to max_mr[i] when max_mr is not NULL.  MC_NOT_SUPPORTED with a
 * detail naming libibverbs.so.1 and its package when it cannot be loaded,
 * or naming the NIC when libibverbs does not list it or it cannot be
 * opened or queried. */
mc_status_t mc_rdma_verbs_check(const mc_rdma_nic_t *nics, size_t n, uint64_t *max_mr);

/* The status a request reports for a work completion of status
 * @p wc_status (enum ibv_wc_status): MC_OK for success; INVALID_READ /
 * INVALID_WRITE (by @p op) when the target's NIC refused the range or key
 * (remote access or local protection error); TRANSFER_FAIL otherwise
 * (retries exceeded, flushed after an earlier failure, ...). */
mc_status_t mc_rdma_verbs_wc_status(int wc_status, int op);

struct ibv_qp_attr;
struct mc_rdma_qp_attrs;

/* Fill the libibverbs attributes and mask of the transition to @p state
 * (IBV_QPS_INIT, IBV_QPS_RTR or IBV_QPS_RTS) from @p a (plan.h).  Returns
 * -1 for another state. */
int mc_rdma_verbs_attr(const struct mc_rdma_qp_attrs *a, int state, struct ibv_qp_attr *attr,
                       int *mask_p);

#endif /* MC_TRANSFER_RDMA_VERBS_H */

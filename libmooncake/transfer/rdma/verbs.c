/* SPDX-License-Identifier: Apache-2.0 */
/* libibverbs checks of the selected NICs (verbs.h). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "common/log.h"
#include "transfer/rdma/ibv.h"
#include "transfer/rdma/plan.h"
#include "transfer/rdma/verbs.h"

mc_status_t mc_rdma_verbs_check(const mc_rdma_nic_t *nics, size_t n, uint64_t *max_mr)
{
    struct ibv_device **list;
    int nlist = 0;
    mc_status_t st = mc_ibv_load(); /* the first use of protocol "rdma" */

    if (st != MC_OK)
        return st;
    list = mc_ibv()->get_device_list(&nlist);
    if (list == NULL) {
        mc_set_error_detail("no RDMA device found: libibverbs lists none (%s), so %s%s "
                            "cannot be used", strerror(errno), (n > 0) ? nics[0].name : "",
                            (n > 1) ? " and the others" : "");
        return MC_NOT_SUPPORTED;
    }
    for (size_t i = 0; (i < n) && (st == MC_OK); i++) {
        struct ibv_context *ctx = NULL;
        struct ibv_device_attr attr;
        struct ibv_port_attr pattr;
        int j;
        for (j = 0; j < nlist; j++)
            if (strcmp(mc_ibv()->get_device_name(list[j]), nics[i].name) == 0)
                break;
        if (j == nlist) {
            mc_set_error_detail("RDMA device %s is in sysfs but libibverbs does not list it "
                                "(is its provider library, e.g. libmlx5, installed?)",
                                nics[i].name);
            st = MC_NOT_SUPPORTED;
            break;
        }
        ctx = mc_ibv()->open_device(list[j]);
        if (ctx == NULL) {
            mc_set_error_detail("RDMA device %s cannot be opened: %s", nics[i].name,
                                strerror(errno));
            st = MC_NOT_SUPPORTED;
            break;
        }
        if ((mc_ibv()->query_device(ctx, &attr) != 0) ||
            (mc_ibv_query_port(ctx, (uint8_t)nics[i].port, &pattr) != 0)) {
            mc_set_error_detail("RDMA device %s cannot be queried: %s", nics[i].name,
                                strerror(errno));
            st = MC_NOT_SUPPORTED;
        } else if (pattr.state != IBV_PORT_ACTIVE) {
            mc_set_error_detail("RDMA device %s port %d is not ACTIVE", nics[i].name,
                                nics[i].port);
            st = MC_NOT_SUPPORTED;
        } else {
            mc_debug("rdma: %s port %d: max_mr_size %llu, max_qp %d", nics[i].name,
                     nics[i].port, (unsigned long long)attr.max_mr_size, attr.max_qp);
            if (max_mr != NULL)
                max_mr[i] = attr.max_mr_size;
        }
        mc_ibv()->close_device(ctx);
    }
    mc_ibv()->free_device_list(list);
    return st;
}

mc_status_t mc_rdma_verbs_wc_status(int wc_status, int op)
{
    switch (wc_status) {
    case IBV_WC_SUCCESS:
        return MC_OK;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
        return (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
    default:
        return MC_TRANSFER_FAIL;
    }
}

int mc_rdma_verbs_attr(const mc_rdma_qp_attrs_t *a, int state, struct ibv_qp_attr *attr,
                       int *mask_p)
{
    memset(attr, 0, sizeof(*attr));
    switch (state) {
    case IBV_QPS_INIT:
        attr->qp_state        = IBV_QPS_INIT;
        attr->pkey_index      = 0;
        attr->port_num        = a->port;
        attr->qp_access_flags = ((a->access & MC_RDMA_ACCESS_LOCAL_WRITE) ? IBV_ACCESS_LOCAL_WRITE : 0) |
                                ((a->access & MC_RDMA_ACCESS_REMOTE_WRITE) ? IBV_ACCESS_REMOTE_WRITE : 0) |
                                ((a->access & MC_RDMA_ACCESS_REMOTE_READ) ? IBV_ACCESS_REMOTE_READ : 0);
        *mask_p = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    case IBV_QPS_RTR:
        attr->qp_state           = IBV_QPS_RTR;
        attr->path_mtu           = (enum ibv_mtu)a->path_mtu;
        attr->dest_qp_num        = a->dest_qpn;
        attr->rq_psn             = a->rq_psn;
        attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
        attr->min_rnr_timer      = a->min_rnr_timer;
        attr->ah_attr.dlid       = a->dlid;
        attr->ah_attr.sl         = 0;
        attr->ah_attr.src_path_bits = 0;
        attr->ah_attr.port_num   = a->port;
        attr->ah_attr.is_global  = (uint8_t)(a->is_global != 0);
        if (a->is_global) {
            memcpy(attr->ah_attr.grh.dgid.raw, a->dgid, 16);
            attr->ah_attr.grh.sgid_index = a->sgid_index;
            attr->ah_attr.grh.hop_limit  = a->hop_limit;
            attr->ah_attr.grh.flow_label = 0;
            attr->ah_attr.grh.traffic_class = 0;
        }
        *mask_p = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        return 0;
    case IBV_QPS_RTS:
        attr->qp_state      = IBV_QPS_RTS;
        attr->sq_psn        = a->sq_psn;
        attr->timeout       = a->timeout;
        attr->retry_cnt     = a->retry_cnt;
        attr->rnr_retry     = a->rnr_retry;
        attr->max_rd_atomic = a->max_rd_atomic;
        *mask_p = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        return 0;
    default:
        return -1;
    }
}

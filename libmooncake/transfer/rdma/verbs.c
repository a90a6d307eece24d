/* SPDX-License-Identifier: Apache-2.0 */
/* libibverbs checks of the selected NICs (verbs.h). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "common/log.h"
#include "transfer/rdma/verbs.h"

mc_status_t mc_rdma_verbs_check(const mc_rdma_nic_t *nics, size_t n, uint64_t *max_mr)
{
    struct ibv_device **list;
    int nlist = 0;
    mc_status_t st = MC_OK;

    list = ibv_get_device_list(&nlist);
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
            if (strcmp(ibv_get_device_name(list[j]), nics[i].name) == 0)
                break;
        if (j == nlist) {
            mc_set_error_detail("RDMA device %s is in sysfs but libibverbs does not list it "
                                "(is its provider library, e.g. libmlx5, installed?)",
                                nics[i].name);
            st = MC_NOT_SUPPORTED;
            break;
        }
        ctx = ibv_open_device(list[j]);
        if (ctx == NULL) {
            mc_set_error_detail("RDMA device %s cannot be opened: %s", nics[i].name,
                                strerror(errno));
            st = MC_NOT_SUPPORTED;
            break;
        }
        if ((ibv_query_device(ctx, &attr) != 0) ||
            (ibv_query_port(ctx, (uint8_t)nics[i].port, &pattr) != 0)) {
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
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return st;
}

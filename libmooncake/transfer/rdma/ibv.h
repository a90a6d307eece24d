/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libibverbs, loaded with dlopen at the first use of protocol "rdma"
 * (docs/transfer.md §12), so that libmooncake.so does not need
 * libibverbs.so.1 to load: a host without it (a wheel installed in a
 * container, a Debian system without libibverbs1) runs every other
 * transport.  <infiniband/verbs.h> stays a build dependency for the types,
 * the constants and the inline data-path calls (ibv_post_send, ibv_poll_cq,
 * ibv_req_notify_cq dispatch through the context's ops and need no
 * symbol).  Every exported function the transport calls is resolved here
 * once; the callers go through mc_ibv().  Not installed.
 */
#ifndef MC_TRANSFER_RDMA_IBV_H
#define MC_TRANSFER_RDMA_IBV_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include <mooncake/status.h>

/* The soname dlopen'ed (MC_IBVERBS_PATH overrides it) and the Debian /
 * Ubuntu package that provides it, both named in the refusal. */
#define MC_IBV_SONAME  "libibverbs.so.1"
#define MC_IBV_PACKAGE "libibverbs1"

/* The exported libibverbs functions the transport calls, with the
 * prototypes of rdma-core's default symbol versions (what a program linked
 * with -libverbs binds to). */
typedef struct mc_ibv {
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    /* the exported ibv_query_port takes the pre-1.1 attribute struct: call
     * mc_ibv_query_port, which does what the header's macro does */
    int (*query_port)(struct ibv_context *context, uint8_t port_num,
                      struct _compat_ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index,
                     union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                        void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    /* the header's ibv_reg_mr macro calls this symbol for constant access
     * flags without IBV_ACCESS_OPTIONAL_RANGE bits, the only ones we pass */
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    const char *(*wc_status_str)(enum ibv_wc_status status);
} mc_ibv_t;

/* Load libibverbs once per process (thread-safe; later calls return the
 * first outcome): MC_IBVERBS_PATH when set, else MC_IBV_SONAME from the
 * library path.  MC_OK, or MC_NOT_SUPPORTED with a detail naming the
 * library, why it failed and the package to install. */
mc_status_t mc_ibv_load(void);

/* The loaded functions.  Only after mc_ibv_load returned MC_OK. */
const mc_ibv_t *mc_ibv(void);

/* ibv_query_port as <infiniband/verbs.h>'s macro does it: the provider's
 * extended query_port when the context has one, else the exported symbol
 * on the compat struct (zeroed first).  After mc_ibv_load. */
int mc_ibv_query_port(struct ibv_context *context, uint8_t port_num,
                      struct ibv_port_attr *attr);

#endif /* MC_TRANSFER_RDMA_IBV_H */

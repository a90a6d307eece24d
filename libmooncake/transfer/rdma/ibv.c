/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libibverbs through dlopen (ibv.h).
 *
 * The library is opened once, RTLD_NOW | RTLD_LOCAL, at the first use of
 * protocol "rdma", and stays loaded for the process (its providers keep
 * threads and state of their own).  dlsym binds each name to its default
 * symbol version (IBVERBS_1.1 for the calls that have two), the one the
 * linker picks for a program built with -libverbs, so the prototypes in
 * ibv.h are rdma-core's current ones.  A library that lacks any of them is
 * refused as a whole: half a verbs table would fail later, mid-transfer.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "transfer/rdma/ibv.h"

static pthread_once_t ibv_once = PTHREAD_ONCE_INIT;
static mc_ibv_t ibv_fns;
static int ibv_ready;
static char ibv_reason[512];

static void *sym(void *lib, const char *name, const char *path)
{
    void *p = dlsym(lib, name);
    if ((p == NULL) && (ibv_reason[0] == '\0'))
        snprintf(ibv_reason, sizeof(ibv_reason),
                 "%s has no %s: it is not a usable libibverbs (install %s, rdma-core >= 17)",
                 path, name, MC_IBV_PACKAGE);
    return p;
}

static void ibv_load_once(void)
{
    const char *env  = getenv("MC_IBVERBS_PATH");
    const char *path = ((env != NULL) && (*env != '\0')) ? env : MC_IBV_SONAME;
    void *lib        = dlopen(path, RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL) {
        const char *why = dlerror();
        snprintf(ibv_reason, sizeof(ibv_reason),
                 "%s%s cannot be loaded (%s): install %s (apt-get install %s) or use tcp",
                 (path == env) ? "MC_IBVERBS_PATH=" : "", path,
                 (why != NULL) ? why : "unknown error", MC_IBV_PACKAGE, MC_IBV_PACKAGE);
        return;
    }
#define IBV_SYM(field, name) *(void **)&ibv_fns.field = sym(lib, name, path)
    IBV_SYM(get_device_list, "ibv_get_device_list");
    IBV_SYM(free_device_list, "ibv_free_device_list");
    IBV_SYM(get_device_name, "ibv_get_device_name");
    IBV_SYM(open_device, "ibv_open_device");
    IBV_SYM(close_device, "ibv_close_device");
    IBV_SYM(query_device, "ibv_query_device");
    IBV_SYM(query_port, "ibv_query_port");
    IBV_SYM(query_gid, "ibv_query_gid");
    IBV_SYM(alloc_pd, "ibv_alloc_pd");
    IBV_SYM(dealloc_pd, "ibv_dealloc_pd");
    IBV_SYM(create_comp_channel, "ibv_create_comp_channel");
    IBV_SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
    IBV_SYM(create_cq, "ibv_create_cq");
    IBV_SYM(destroy_cq, "ibv_destroy_cq");
    IBV_SYM(get_cq_event, "ibv_get_cq_event");
    IBV_SYM(ack_cq_events, "ibv_ack_cq_events");
    IBV_SYM(create_qp, "ibv_create_qp");
    IBV_SYM(modify_qp, "ibv_modify_qp");
    IBV_SYM(destroy_qp, "ibv_destroy_qp");
    IBV_SYM(reg_mr, "ibv_reg_mr");
    IBV_SYM(dereg_mr, "ibv_dereg_mr");
    IBV_SYM(wc_status_str, "ibv_wc_status_str");
#undef IBV_SYM
    if (ibv_reason[0] != '\0') {
        dlclose(lib);
        memset(&ibv_fns, 0, sizeof(ibv_fns));
        return;
    }
    mc_debug("rdma: %s loaded", path);
    ibv_ready = 1; /* published by pthread_once; the library stays loaded */
}

mc_status_t mc_ibv_load(void)
{
    pthread_once(&ibv_once, ibv_load_once);
    if (ibv_ready)
        return MC_OK;
    mc_set_error_detail("rdma: %s", ibv_reason);
    return MC_NOT_SUPPORTED;
}

const mc_ibv_t *mc_ibv(void)
{
    return &ibv_fns;
}

int mc_ibv_query_port(struct ibv_context *context, uint8_t port_num,
                      struct ibv_port_attr *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);

    if (vctx == NULL) {
        memset(attr, 0, sizeof(*attr));
        return ibv_fns.query_port(context, port_num, (struct _compat_ibv_port_attr *)attr);
    }
    return vctx->query_port(context, port_num, attr, sizeof(*attr));
}

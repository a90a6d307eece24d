/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libfabric, loaded with dlopen when an engine with protocol "efa" or
 * "cxi" starts (docs/transfer.md §14), as libibverbs is for "rdma": the
 * library loads without libfabric.so.1, and Debian's libfabric1 would
 * bring libibverbs and librdmacm in with it.  <rdma/fabric.h> stays a
 * build dependency (libfabric-dev): almost every call (fi_domain,
 * fi_endpoint, fi_mr_reg, fi_read, fi_cq_sread, fi_close, ...) is an
 * inline dispatch through the provider's ops and needs no symbol.  The
 * few exported functions are resolved here; never call them (or
 * fi_allocinfo, an inline over fi_dupinfo) directly.  Not installed.
 */
#ifndef MC_TRANSFER_FABRIC_FI_H
#define MC_TRANSFER_FABRIC_FI_H

#include <stdint.h>

#include <rdma/fabric.h>

#include <mooncake/status.h>

/* The soname dlopen'ed, then the AWS EFA installer's copy; MC_LIBFABRIC_PATH
 * (upstream's name) replaces both.  The package named in the refusal. */
#define MC_FI_SONAME  "libfabric.so.1"
#define MC_FI_AWS_LIB "/opt/amazon/efa/lib/libfabric.so.1"
#define MC_FI_PACKAGE "libfabric1"

/* The exported libfabric functions we call (default symbol versions). */
typedef struct mc_fi {
    int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
    const char *(*strerror)(int errnum);
    uint32_t (*version)(void);
} mc_fi_t;

/* Load libfabric once per process (thread-safe; later calls return the
 * first outcome) and check that it is at least the version of the
 * headers we were built with.  The table, or NULL with MC_NOT_SUPPORTED
 * in *st_p and a detail naming the library, why, and what to install. */
const mc_fi_t *mc_fi_load(mc_status_t *st_p);

#endif /* MC_TRANSFER_FABRIC_FI_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --enable_multi_tenants (upstream C.9): tenant registration and quotas.
 *
 * Off (the default), rpc.c puts every connection in tenant "default" and
 * none of this runs: mc_master_tenant_admit() admits everything.  On,
 * tenants are key namespaces; a tenant may write only when the quota
 * policy (the YAML file of --tenant_quota_connector_uri) names it, and
 * only while the bytes it holds stay within its quota.
 *
 * The charge of an object is its value size, taken when its put is
 * admitted and given back when the object goes away; an upsert moves the
 * charge to the new size.  (Upstream charges size x completed memory
 * replicas; one logical size per key is what a tenant is billed here.)
 *
 * Owns: the tenant interface (index/).
 * May call: nothing.
 */
#ifndef MC_MASTER_TENANTS_H
#define MC_MASTER_TENANTS_H

#include <stdint.h>

#include <jansson.h>

#include "master.h"

/* Load the quota policy when --enable_multi_tenants is on.  An unreadable
 * or invalid file, or a connector other than "file", is MC_INVALID_PARAMS
 * with a logged reason (the master does not start, as upstream). */
mc_status_t mc_master_tenants_start(mc_master_t *m);
void mc_master_tenants_stop(mc_master_t *m);

/* May @p tenant write @p bytes more?  MC_OK when multi-tenancy is off;
 * else TENANT_NOT_REGISTERED (-1701) or TENANT_QUOTA_EXCEEDED (-1700). */
int32_t mc_master_tenant_admit(mc_master_t *m, mc_str_t tenant, uint64_t bytes);
/* Add (@p delta > 0) or give back (< 0) bytes of @p tenant's charge, with no
 * check (objects.c and writes.c call it for every object that comes or goes, restored
 * ones included).  No effect when multi-tenancy is off. */
void mc_master_tenant_charge(mc_master_t *m, mc_str_t tenant, int64_t delta);

/* The admin API (/api/v1/tenant_quotas, admin.c).  Each returns an HTTP
 * status and sets *body_p to the JSON answer (upstream's shapes). */
int mc_master_tenant_quota_get(mc_master_t *m, const char *tenant, json_t **body_p);
int mc_master_tenant_quota_put(mc_master_t *m, const char *tenant, const char *body,
                               json_t **body_p);
int mc_master_tenant_quota_delete(mc_master_t *m, const char *tenant, json_t **body_p);

#endif /* MC_MASTER_TENANTS_H */

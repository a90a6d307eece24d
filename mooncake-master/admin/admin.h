/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin/: the door of the master's HTTP side.  Other folders include this
 * header and no other file of admin/ (master.h alone includes http.h,
 * for the handle it holds).
 *
 * Owns: the admin server and its Prometheus metrics (admin.c,
 * --metrics_port), the embedded HTTP metadata store (http.c, also built
 * alone as mooncake_http_metadata_server with metadata_server.c), and
 * who may write a segment's descriptors in it (meta_owner.c).
 *
 * May call: ../master.h, index/ (objects, segments, clients, tenants),
 * durability/ (snapshot state for /metrics), events/, tiers/ (their
 * metrics), ha/ (role and leader), libmooncake's common/.  http.c and metadata_server.c call
 * only libmooncake's common/ and libevent.  Called by: master.c (start,
 * stop), rpc.c (the metadata token of HELLO), index/ (a gone client's
 * descriptors); tiers/ use the inline metric helper below.
 */
#ifndef MC_MASTER_ADMIN_H
#define MC_MASTER_ADMIN_H

#include <inttypes.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "master.h"

#include "http.h"

/* ---- meta_owner.c: descriptor ownership in the HTTP metadata store -------- */

/* Draw the key of the metadata tokens (at start). */
void mc_master_meta_owner_init(mc_master_t *m);
/* The metadata token of @p client_id, sent in its HELLO answer. */
mc_uuid_t mc_master_metadata_token(const mc_master_t *m, mc_uuid_t client_id);
/* mc_meta_server write check (arg: the master): 1 when @p key is no
 * segment descriptor, its segment is not mounted, or @p token (hex, may
 * be NULL) is its owner's; 0 otherwise (logged, rate limited). */
int mc_master_meta_write_allowed(void *arg, const char *key, const char *token);

/* ---- admin.c: admin HTTP server and metrics (--metrics_port) ------------- */

/* Bind --metrics_host:--metrics_port; MC_INVALID_PARAMS when it cannot. */
mc_status_t mc_master_admin_start(mc_master_t *m);
void mc_master_admin_stop(mc_master_t *m);

/* One unlabelled Prometheus metric: inline, so that a folder writing its
 * own metrics (tiers/) does not call into admin.c, which calls it. */
static inline void mc_master_metric(struct evbuffer *b, const char *name, const char *type,
                                    const char *help, uint64_t v)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name,
                        type, name, v);
}

#endif /* MC_MASTER_ADMIN_H */

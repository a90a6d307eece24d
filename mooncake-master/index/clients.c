/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Clients and their liveness (docs/protocol.md §5.2, §5.4).
 *
 * The master knows a client once it has mounted (or re-mounted) a segment;
 * from then on every PING or mount moves its deadline to now + client_ttl.
 * A timer (master.c) calls mc_master_clients_tick(): a client past its
 * deadline is presumed dead, its segments are unmounted and the objects on
 * them disappear from the index, exactly as upstream's ClientMonitorFunc.
 * A forgotten client that pings again is told NEED_REMOUNT and re-mounts
 * empty segments.
 *
 * The deadline uses the monotonic clock, so a wall-clock step cannot
 * expire every client at once.
 *
 * Owns: the clients the master knows, their liveness, PING, mounts and
 *   CLIENT_CLOSE.
 * May call: index/, admin/ (a gone client's descriptors in the metadata
 *   store).
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>
#include <jansson.h>

#include "admin/admin.h"
#include "common/log.h"
#include "index.h"
#include "master.h"

/* Ping client_status values (upstream ClientStatus). */
#define MC_CLIENT_STATUS_OK           1
#define MC_CLIENT_STATUS_NEED_REMOUNT 2

static int client_eq(const mc_hnode_t *node, const void *key)
{
    const mc_client_t *c = mc_container_of(node, mc_client_t, node);
    return mc_uuid_eq(c->id, *(const mc_uuid_t *)key);
}

mc_status_t mc_master_clients_init(mc_master_t *m)
{
    m->clients_tick_ms = mc_now_ms();
    return mc_hmap_init(&m->clients, 64) == 0 ? MC_OK : MC_INTERNAL_ERROR;
}

/* Segments are already freed (mc_master_segments_cleanup runs first). */
void mc_master_clients_cleanup(mc_master_t *m)
{
    mc_hmap_iter_t it;
    mc_hnode_t *n = mc_hmap_first(&m->clients, &it);
    while (n != NULL) {
        mc_client_t *c = mc_container_of(n, mc_client_t, node);
        n              = mc_hmap_next(&m->clients, &it);
        mc_hmap_remove(&m->clients, &c->node);
        free(c);
    }
    mc_hmap_cleanup(&m->clients);
}

size_t mc_master_clients_count(const mc_master_t *m)
{
    return m->clients.count;
}

mc_client_t *mc_master_client_find(mc_master_t *m, mc_uuid_t id)
{
    mc_hnode_t *n = mc_hmap_find(&m->clients, mc_master_uuid_hash(id), &id, client_eq);
    return n ? mc_container_of(n, mc_client_t, node) : NULL;
}

static uint64_t ttl_ms(const mc_master_t *m)
{
    return (uint64_t)m->cfg->client_ttl * 1000u;
}

mc_client_t *mc_master_client_touch(mc_master_t *m, mc_uuid_t id, uint64_t now_ms)
{
    mc_client_t *c = mc_master_client_find(m, id);
    if (c == NULL) {
        char idbuf[37];
        c = calloc(1, sizeof(*c));
        if (c == NULL)
            return NULL;
        c->id = id;
        mc_mlist_init(&c->segments);
        mc_hmap_insert(&m->clients, &c->node, mc_master_uuid_hash(id));
        mc_uuid_format(id, idbuf);
        mc_info("client %s registered", idbuf);
    }
    c->deadline_ms = now_ms + ttl_ms(m);
    c->seen_ms     = now_ms;
    return c;
}

/* Slack on top of the missed heartbeats: scheduling and network jitter. */
#define MC_CLIENT_SUSPECT_SLACK_MS 500u

int mc_master_client_suspect(const mc_master_t *m, const mc_client_t *c, uint64_t now_ms)
{
    uint64_t beats = (uint64_t)m->cfg->client_suspect_heartbeats;
    uint64_t period = c->ping_period_ms ? c->ping_period_ms : 1000u;

    if (beats == 0)
        return 0;
    return now_ms > c->seen_ms + beats * period + MC_CLIENT_SUSPECT_SLACK_MS;
}

void mc_master_client_forget(mc_master_t *m, mc_client_t *c, const char *why)
{
    mc_mlist_t *pos, *tmp;
    char idbuf[37];
    uint32_t nseg = c->nsegments;

    mc_master_tasks_client_gone(m, c->id);
    /* its disk tier died with it: a record there is not vouched for once
     * the holder is gone (docs/tiers.md) */
    (void)mc_master_objects_drop_holder(m, c->id);
    mc_mlist_for_each_safe(pos, tmp, &c->segments)
        mc_master_segment_unmount(m, mc_container_of(pos, mc_segment_t, client_link));
    mc_hmap_remove(&m->clients, &c->node);
    mc_uuid_format(c->id, idbuf);
    mc_info("client %s %s: %" PRIu32 " segments unmounted", idbuf, why, nseg);
    free(c);
}

/* ---- --enable_metadata_cleanup_on_timeout (upstream C.11) ---------------- */

/* The transfer-engine keys of a segment start with "mooncake/", or with
 * "mooncake/<MC_METADATA_CLUSTER_ID>/" when the cluster id is set, as the
 * clients write them (libmooncake/transfer/metadata.c). */
static void metadata_prefix(char *out, size_t len)
{
    const char *cluster = getenv("MC_METADATA_CLUSTER_ID");
    size_t clen         = cluster ? strlen(cluster) : 0;

    if ((clen == 0) || (clen > 128))
        snprintf(out, len, "mooncake/");
    else
        snprintf(out, len, "mooncake/%s%s", cluster, (cluster[clen - 1] == '/') ? "" : "/");
}

/* Where the metadata lives when no HTTP metadata server runs in this
 * process: $MOONCAKE_TE_META_DATA_SERVER (not P2PHANDSHAKE), else the
 * metadata_server of the JSON at $MOONCAKE_CONFIG_PATH.  Only an http://
 * URL is usable (the master speaks plain HTTP); 0 with it in @p out. */
static int metadata_url(char *out, size_t len)
{
    const char *url = getenv("MOONCAKE_TE_META_DATA_SERVER");
    const char *cfg = getenv("MOONCAKE_CONFIG_PATH");
    json_t *j       = NULL;
    int rc          = -1;

    if (((url == NULL) || (*url == '\0')) && (cfg != NULL) && (*cfg != '\0')) {
        j   = json_load_file(cfg, 0, NULL);
        url = json_string_value(json_object_get(j, "metadata_server"));
    }
    if ((url == NULL) || (*url == '\0') || (strcmp(url, "P2PHANDSHAKE") == 0)) {
        mc_log_ratelimited(MC_LOG_WARN, "--enable_metadata_cleanup_on_timeout: no embedded "
                           "metadata server and no http metadata URL in "
                           "MOONCAKE_TE_META_DATA_SERVER or MOONCAKE_CONFIG_PATH; nothing "
                           "cleaned");
    } else if (strncasecmp(url, "http://", 7) != 0) {
        mc_log_ratelimited(MC_LOG_WARN, "--enable_metadata_cleanup_on_timeout: metadata "
                           "server %s is not an http:// URL (https is not available to the "
                           "master); nothing cleaned", url);
    } else if (snprintf(out, len, "%s", url) < (int)len) {
        rc = 0;
    }
    json_decref(j);
    return rc;
}

static void remote_delete_done(struct evhttp_request *req, void *arg)
{
    char *key = arg;
    int code  = req ? evhttp_request_get_response_code(req) : 0;

    if ((code >= 200) && (code < 300))
        mc_debug("metadata cleanup: deleted %s", key);
    else if (code != 404)
        mc_log_ratelimited(MC_LOG_WARN, "metadata cleanup: DELETE %s failed (%s %d)", key,
                           code ? "HTTP" : "no answer within 3 s, status", code);
    free(key);
}

/* DELETE <url>?key=<key> on the loop, 3 s at most; the answer is only
 * logged (a peer that still reads the record fails its own way). */
static void remote_delete(mc_master_t *m, const char *url, const char *key)
{
    struct evhttp_uri *u = evhttp_uri_parse(url);
    const char *host     = u ? evhttp_uri_get_host(u) : NULL;
    const char *path     = u ? evhttp_uri_get_path(u) : NULL;
    int port             = u ? evhttp_uri_get_port(u) : -1;
    char *enc = NULL, *arg = NULL, target[4096];
    struct evhttp_connection *conn = NULL;
    struct evhttp_request *req;

    if (host == NULL) {
        mc_log_ratelimited(MC_LOG_WARN, "metadata cleanup: cannot parse URL %s", url);
        goto out;
    }
    enc = evhttp_encode_uri(key);
    arg = strdup(key);
    if ((enc == NULL) || (arg == NULL))
        goto out;
    snprintf(target, sizeof(target), "%s%ckey=%s", (path && *path) ? path : "/",
             (path && strchr(path, '?')) ? '&' : '?', enc);
    conn = evhttp_connection_base_new(m->base, NULL, host, (port > 0) ? port : 80);
    req  = conn ? evhttp_request_new(remote_delete_done, arg) : NULL;
    if (req == NULL)
        goto out;
    evhttp_connection_set_timeout(conn, 3);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", host);
    if (evhttp_make_request(conn, req, EVHTTP_REQ_DELETE, target) != 0) {
        /* evhttp_make_request freed req (and calls no callback) */
        mc_log_ratelimited(MC_LOG_WARN, "metadata cleanup: cannot send DELETE %s", key);
        goto out;
    }
    evhttp_connection_free_on_completion(conn);
    conn = NULL;
    arg  = NULL; /* remote_delete_done frees it */
out:
    if (conn != NULL)
        evhttp_connection_free(conn);
    free(arg);
    free(enc);
    if (u != NULL)
        evhttp_uri_free(u);
}

/* The transfer-engine records of a dead client's segments would otherwise
 * point peers at a dead process: delete them from the embedded metadata
 * server, or from the remote one clients publish to. */
static void cleanup_metadata(mc_master_t *m, mc_client_t *c)
{
    static const char *const kinds[] = {"ram/", "rpc_meta/"};
    mc_mlist_t *pos, *tmp;
    char prefix[160], url[2048];
    char key[2048]; /* segment names are at most 1024 bytes */

    if (mc_mlist_empty(&c->segments))
        return;
    if ((m->http == NULL) && (metadata_url(url, sizeof(url)) != 0))
        return;
    metadata_prefix(prefix, sizeof(prefix));
    mc_mlist_for_each_safe(pos, tmp, &c->segments)
    {
        mc_segment_t *seg = mc_container_of(pos, mc_segment_t, client_link);
        for (size_t i = 0; i < MC_ARRAY_SIZE(kinds); i++) {
            snprintf(key, sizeof(key), "%s%s%s", prefix, kinds[i], seg->name);
            if (m->http != NULL)
                mc_meta_server_delete(m->http, key);
            else
                remote_delete(m, url, key);
        }
    }
}

/* A tick this much later than the last one that served means the master
 * did not answer meanwhile (fenced, or its loop held up). */
#define MC_CLIENT_STALL_MS 1000u

/* Time the master itself did not answer does not count against its
 * clients: while it is fenced (a lease renewal that etcd holds up during
 * its own election, a takeover's log install) their PINGs are refused,
 * and while its loop is held up they are not read.  Once it serves again,
 * every client's deadline moves by that time (all of the gap since the
 * last serving tick but one tick period), so a master that is merely slow,
 * ticking late again and again, still expires its dead clients, later.
 * Their last sighting moves as well: suspicion (mc_master_client_suspect)
 * counts missed pings too, and without the credit every holder would be
 * suspect at once, each put failing NO_AVAILABLE_HANDLE until its holders
 * pinged again.  Restored clients keep their remount deadline (they do
 * not ping before remounting).  1 while the master does not serve:
 * nothing expires. */
static int clients_unserved(mc_master_t *m, uint64_t now_ms, int serving)
{
    uint64_t gap;

    if (!serving) {
        m->clients_unserved = 1;
        return 1; /* clients_tick_ms stays the last serving tick */
    }
    gap                = now_ms - m->clients_tick_ms;
    m->clients_tick_ms = now_ms;
    if (gap > MC_CLIENT_STALL_MS) {
        uint64_t credit = gap - MC_MASTER_TICK_MS;
        mc_hmap_iter_t it;
        for (mc_hnode_t *n = mc_hmap_first(&m->clients, &it); n != NULL;
             n = mc_hmap_next(&m->clients, &it)) {
            mc_client_t *c = mc_container_of(n, mc_client_t, node);
            if (!c->restored) {
                c->deadline_ms += credit;
                c->seen_ms = MC_MIN(c->seen_ms + credit, now_ms);
            }
        }
        mc_warn("%s for %" PRIu64 " ms: the clients' deadlines move by %" PRIu64 " ms",
                m->clients_unserved ? "answered no request" : "the event loop was held up", gap,
                credit);
    }
    m->clients_unserved = 0;
    return 0;
}

void mc_master_clients_tick(mc_master_t *m, uint64_t now_ms, int serving)
{
    mc_hmap_iter_t it;
    mc_hnode_t *n;

    if (clients_unserved(m, now_ms, serving))
        return;
    n = mc_hmap_first(&m->clients, &it);
    while (n != NULL) {
        mc_client_t *c = mc_container_of(n, mc_client_t, node);
        n              = mc_hmap_next(&m->clients, &it);
        if (c->deadline_ms > now_ms)
            continue;
        if (m->cfg->enable_metadata_cleanup_on_timeout)
            cleanup_metadata(m, c);
        mc_master_client_forget(m, c,
                                c->restored ? "did not remount its restored segments within "
                                              "--snapshot_restore_grace_seconds"
                                            : "expired (no ping within --client_ttl)");
    }
}

/* ---- RPC handlers ---------------------------------------------------------- */

/* §5.2 PING: known clients are refreshed, unknown ones must re-mount. */
int32_t mc_master_ping(mc_req_ctx_t *x, const mc_wire_ping_req_t *req, mc_wire_ping_resp_t *resp)
{
    mc_client_t *c = mc_master_client_find(x->m, req->client_id);
    /* a client restored from the operation log must remount first; its
     * deadline stays the end of the restore grace period until then */
    if ((c != NULL) && !c->restored) {
        if (c->last_ping_ms != 0) {
            uint64_t gap      = x->now_ms - c->last_ping_ms;
            c->ping_period_ms = (uint32_t)MC_MIN(MC_MAX(gap, 50u), ttl_ms(x->m));
        }
        c->last_ping_ms = x->now_ms;
        mc_master_client_touch(x->m, req->client_id, x->now_ms);
        resp->client_status = MC_CLIENT_STATUS_OK;
    } else {
        resp->client_status = MC_CLIENT_STATUS_NEED_REMOUNT;
    }
    resp->view_version = x->m->view_version;
    return MC_OK;
}

int32_t mc_master_mount_each(mc_req_ctx_t *x, mc_uuid_t client_id, const mc_wire_segment_t *v,
                             uint32_t n, mc_master_seg_fn check, mc_master_seg_fn mount,
                             mc_client_t **c_p)
{
    mc_client_t *c;

    if (mc_uuid_is_nil(client_id))
        return MC_INVALID_PARAMS;
    /* Validate before registering the client, so a rejected mount does not
     * make an unknown client "known". */
    c = mc_master_client_find(x->m, client_id);
    for (uint32_t i = 0; i < n; i++) {
        mc_status_t st = check(x->m, c, &v[i]);
        if (st != MC_OK)
            return st;
    }
    c = mc_master_client_touch(x->m, client_id, x->now_ms);
    if (c == NULL)
        return MC_INTERNAL_ERROR;
    for (uint32_t i = 0; i < n; i++) {
        /* A duplicate id inside the list with other bounds fails here,
         * after the earlier entries were mounted (documented in §5.3). */
        mc_status_t st = mount(x->m, c, &v[i]);
        if (st != MC_OK)
            return st;
    }
    if (c_p != NULL)
        *c_p = c;
    return MC_OK;
}

/* §5.3 MOUNT_SEGMENT */
int32_t mc_master_mount_segment(mc_req_ctx_t *x, const mc_wire_mount_segment_req_t *req)
{
    return mc_master_mount_each(x, req->client_id, &req->segment, 1, mc_master_segment_check,
                                mc_master_segment_mount, NULL);
}

/* §5.3 REMOUNT_SEGMENTS: after a master restart or an expiry. */
int32_t mc_master_remount_segments(mc_req_ctx_t *x, const mc_wire_remount_segments_req_t *req)
{
    mc_client_t *c = NULL;
    int32_t st = mc_master_mount_each(x, req->client_id, req->segments.v, req->segments.n,
                                      mc_master_segment_check, mc_master_segment_mount, &c);
    if (st == MC_OK)
        c->restored = 0;
    return st;
}

/* §5.3 UNMOUNT_SEGMENT: only the owner may unmount. */
int32_t mc_master_unmount_segment(mc_req_ctx_t *x, const mc_wire_unmount_segment_req_t *req)
{
    mc_segment_t *seg = mc_master_segment_find(x->m, req->segment_id);
    if (seg == NULL)
        return MC_SEGMENT_NOT_FOUND;
    if ((seg->owner == NULL) || !mc_uuid_eq(seg->owner->id, req->client_id))
        return MC_ILLEGAL_CLIENT;
    mc_master_client_touch(x->m, req->client_id, x->now_ms);
    mc_master_segment_unmount(x->m, seg);
    return MC_OK;
}

/* §5.4 CLIENT_CLOSE: idempotent. */
int32_t mc_master_client_close(mc_req_ctx_t *x, const mc_wire_client_close_req_t *req)
{
    mc_client_t *c = mc_master_client_find(x->m, req->client_id);
    /* a closing writer fills no reservation any more (§5.16) */
    mc_master_reservations_drop_owner(x->m, req->client_id);
    if (c != NULL)
        mc_master_client_forget(x->m, c, "closed");
    return MC_OK;
}

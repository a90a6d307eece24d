/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where segment descriptors come from (docs/transfer.md, "Metadata").
 *
 * P2PHANDSHAKE: no shared service.  A segment name is "host:port" and the
 * port is the peer's data port, so opening a segment connects there and
 * sends a DESCRIBE frame; the answer is the peer's descriptor JSON.
 *
 * HTTP ("http://host:port/metadata", the master's embedded server or any
 * compatible KV): the engine PUTs its descriptor under
 * "<prefix>ram/<name>" and {"ip_or_host_name", "rpc_port"} under
 * "<prefix>rpc_meta/<name>", where <prefix> is "mooncake/" plus
 * "$MC_METADATA_CLUSTER_ID/" when that is set (upstream keys); peers GET
 * them.  Every request is one libcurl easy handle with the upstream
 * timeouts (connect 1.5 s, total 3 s), CURLOPT_NOSIGNAL for threads, and a
 * bounded response size.
 *
 * etcd ("etcd://h:p[;h:p]", or a bare "h:p" as upstream reads it): the
 * same keys, stored in etcd (coord/etcd.h) under the same names, so
 * engines that share an etcd find each other's descriptors.
 *
 * redis ("redis://host:port", coord/redis.h): the same keys again, as
 * upstream's redis plugin stores them: "SET <key> <json>", GET, DEL, with
 * AUTH/SELECT from MC_REDIS_PASSWORD, MC_REDIS_USERNAME and
 * MC_REDIS_DB_INDEX.  A build without hiredis refuses it
 * (UNAVAILABLE_IN_CURRENT_MODE).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/log.h"
#include "common/util.h"
#include "coord/etcd.h"
#include "coord/redis.h"
#include "transfer/engine.h"
#include "transfer/proto.h"

/* ---- configuration ------------------------------------------------------- */

mc_status_t mc_te_meta_configure(mc_te_t *te, const char *conn)
{
    const char *cluster = getenv("MC_METADATA_CLUSTER_ID");
    size_t clen;

    if ((cluster != NULL) && (*cluster != '\0')) {
        clen = strlen(cluster);
        if (clen > 128) {
            mc_set_error_detail("MC_METADATA_CLUSTER_ID is longer than 128 characters");
            return MC_INVALID_PARAMS;
        }
        te->key_prefix = malloc(sizeof("mooncake/") + clen + 1);
        if (te->key_prefix != NULL)
            sprintf(te->key_prefix, "mooncake/%s%s", cluster,
                    (cluster[clen - 1] == '/') ? "" : "/");
    } else {
        te->key_prefix = mc_strdup("mooncake/");
    }
    if (te->key_prefix == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }

    if ((conn == NULL) || (*conn == '\0') || (strcmp(conn, "P2PHANDSHAKE") == 0)) {
        te->meta_kind = MC_TE_META_P2P;
        return MC_OK;
    }
    if ((strncasecmp(conn, "http://", 7) == 0) || (strncasecmp(conn, "https://", 8) == 0)) {
        te->meta_kind = MC_TE_META_HTTP;
        te->meta_url  = mc_strdup(conn);
        if (te->meta_url == NULL) {
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
        return MC_OK;
    }
    if ((strncasecmp(conn, "etcd://", 7) == 0) || (strstr(conn, "://") == NULL)) {
        /* upstream reads a bare "host:port" as etcd */
        mc_status_t st = mc_etcd_create(conn + ((strncasecmp(conn, "etcd://", 7) == 0) ? 7 : 0),
                                        MC_TE_HTTP_TOTAL_MS, &te->meta_etcd);
        if (st != MC_OK) {
            char why[300];
            snprintf(why, sizeof(why), "%s", mc_last_error_detail());
            mc_set_error_detail("metadata server \"%s\": %s", conn, why);
            return st;
        }
        te->meta_kind = MC_TE_META_ETCD;
        te->meta_url  = mc_strdup(conn);
        if (te->meta_url == NULL) {
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
        return MC_OK;
    }
    if (strncasecmp(conn, "redis://", 8) == 0) {
        mc_status_t st = mc_redis_create(conn, MC_TE_HTTP_TOTAL_MS, &te->meta_redis);
        if (st != MC_OK) {
            char why[300];
            snprintf(why, sizeof(why), "%s", mc_last_error_detail());
            mc_set_error_detail("metadata server \"%s\": %s", conn, why);
            return st;
        }
        te->meta_kind = MC_TE_META_REDIS;
        te->meta_url  = mc_strdup(conn);
        if (te->meta_url == NULL) {
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
        return MC_OK;
    }
    mc_set_error_detail("metadata server \"%s\" has an unknown scheme; use P2PHANDSHAKE, "
                        "etcd://host:port, redis://host:port or http://host:port/metadata",
                        conn);
    return MC_INVALID_PARAMS;
}

/* ---- HTTP client ---------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc    = CURLE_OK;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct http_body {
    mc_textbuf_t t;
    int too_big;
} http_body_t;

static size_t http_write_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    http_body_t *b = ud;
    size_t n = size * nmemb; /* curl guarantees size == 1 */
    if ((n > MC_TE_DESCRIBE_MAX) || (b->t.len + n > MC_TE_DESCRIBE_MAX)) {
        b->too_big = 1;
        return 0; /* aborts the transfer */
    }
    return (mc_textbuf_append(&b->t, ptr, n, MC_TE_DESCRIBE_MAX) == 0) ? n : 0;
}

/* Swallow the body of PUT/DELETE answers. */
static size_t http_discard_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    (void)ptr;
    (void)ud;
    return size * nmemb;
}

/*
 * One request.  Returns MC_OK for 2xx, MC_SEGMENT_NOT_FOUND for 404 and
 * MC_RPC_FAIL for everything else (detail set).  @p body (GET) receives
 * the response, NUL-terminated.
 */
/* The request-target curl sends for @p full ("/path?query"): what an
 * X-Mooncake-Auth signature covers (docs/protocol.md §9.2). */
static const char *request_target(const char *full)
{
    const char *p = strstr(full, "://");
    p             = p ? p + 3 : full;
    p             = strchr(p, '/');
    return p ? p : "/";
}

static mc_status_t http_request(const char *method, const char *url, const char *key,
                                const char *payload, const char *token,
                                const mc_auth_t *auth, http_body_t *body)
{
    mc_status_t st = MC_RPC_FAIL;
    CURL *c        = NULL;
    char *esc      = NULL, *full = NULL;
    char errbuf[CURL_ERROR_SIZE];
    struct curl_slist *hdrs = NULL;
    long code               = 0;
    CURLcode rc;

    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        mc_set_error_detail("libcurl initialisation failed: %s", curl_easy_strerror(curl_init_rc));
        return MC_RPC_FAIL;
    }
    c = curl_easy_init();
    if (c == NULL) {
        mc_set_error_detail("curl_easy_init failed");
        return MC_RPC_FAIL;
    }
    esc = curl_easy_escape(c, key, 0);
    if (esc == NULL)
        goto out;
    full = malloc(strlen(url) + strlen(esc) + 8);
    if (full == NULL)
        goto out;
    sprintf(full, "%s%ckey=%s", url, (strchr(url, '?') != NULL) ? '&' : '?', esc);

    errbuf[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)MC_TE_HTTP_CONNECT_MS);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)MC_TE_HTTP_TOTAL_MS);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL) {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_write_cb);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    } else {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_discard_cb);
    }
    if ((token != NULL) && (token[0] != '\0')) {
        char line[80];
        snprintf(line, sizeof(line), "X-Mooncake-Owner-Token: %.32s", token);
        hdrs = curl_slist_append(hdrs, line);
    }
    if (auth != NULL) {
        char line[sizeof(MC_AUTH_HTTP_HEADER) + MC_AUTH_HTTP_VALUE_MAX + 4];
        int n = snprintf(line, sizeof(line), "%s: ", MC_AUTH_HTTP_HEADER);
        if (mc_auth_http_sign(auth, method, request_target(full), payload ? payload : "",
                              payload ? strlen(payload) : 0, line + n,
                              sizeof(line) - (size_t)n) != 0) {
            mc_set_error_detail("metadata %s %s: cannot sign the request (no cluster secret "
                                "in %s)", method, key, auth->path);
            st = MC_INVALID_PARAMS;
            goto out;
        }
        hdrs = curl_slist_append(hdrs, line);
    }
    if (payload != NULL) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    }
    if (hdrs != NULL)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    rc = curl_easy_perform(c);
    if (rc != CURLE_OK) {
        if ((body != NULL) && body->too_big)
            mc_set_error_detail("metadata %s %s: response larger than %u bytes", method, key,
                                MC_TE_DESCRIBE_MAX);
        else
            mc_set_error_detail("metadata %s %s at %s failed: %s", method, key, url,
                                errbuf[0] ? errbuf : curl_easy_strerror(rc));
        mc_debug("%s", mc_last_error_detail());
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if ((code >= 200) && (code < 300)) {
        st = MC_OK;
    } else if (code == 401) {
        mc_set_error_detail("metadata %s %s at %s: authentication refused (HTTP 401; is "
                            "MC_AUTH_TOKEN_FILE the cluster's secret?)", method, key, url);
        mc_warn("%s", mc_last_error_detail());
    } else if (code == 404) {
        st = MC_SEGMENT_NOT_FOUND;
        mc_set_error_detail("metadata key %s not found at %s", key, url);
    } else {
        mc_set_error_detail("metadata %s %s at %s answered HTTP %ld", method, key, url, code);
        mc_debug("%s", mc_last_error_detail());
    }
out:
    if ((st == MC_RPC_FAIL) && ((esc == NULL) || (full == NULL)))
        mc_set_error_detail("out of memory building a metadata request");
    curl_slist_free_all(hdrs);
    free(full);
    curl_free(esc);
    curl_easy_cleanup(c);
    return st;
}

mc_status_t mc_te_http_put(const char *url, const char *key, const char *body,
                           const char *token, const mc_auth_t *auth)
{
    return http_request("PUT", url, key, body, token, auth, NULL);
}

mc_status_t mc_te_http_get(const char *url, const char *key, char **body_p, size_t *len_p)
{
    http_body_t b = {{NULL, 0, 0}, 0};
    mc_status_t st = http_request("GET", url, key, NULL, NULL, NULL, &b);
    if (st != MC_OK) {
        free(b.t.data);
        return st;
    }
    if (b.t.data == NULL) {
        b.t.data = calloc(1, 1);
        if (b.t.data == NULL) {
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
    }
    *body_p = b.t.data;
    if (len_p != NULL)
        *len_p = b.t.len;
    return MC_OK;
}

mc_status_t mc_te_http_delete(const char *url, const char *key, const char *token,
                              const mc_auth_t *auth)
{
    mc_status_t st = http_request("DELETE", url, key, NULL, token, auth, NULL);
    return (st == MC_SEGMENT_NOT_FOUND) ? MC_OK : st;
}

/* ---- the key-value service: HTTP, etcd or redis ------------------------------ */

/* Put, get and delete one metadata key in whichever service the engine
 * uses; the statuses are those of the HTTP helpers (a missing key is
 * MC_SEGMENT_NOT_FOUND; delete of a missing key is MC_OK).  @p token is
 * the owner token HTTP writes carry (docs/protocol.md §6.1); etcd and
 * redis have no use for it. */
static mc_status_t meta_put(mc_te_t *te, const char *key, const char *value,
                            const char *token)
{
    mc_status_t st;
    if (te->meta_kind == MC_TE_META_HTTP)
        return mc_te_http_put(te->meta_url, key, value, token, te->auth);
    if (te->meta_kind == MC_TE_META_REDIS)
        st = mc_redis_set(te->meta_redis, key, value, strlen(value));
    else
        st = mc_etcd_put(te->meta_etcd, key, value, strlen(value), 0);
    return (st == MC_OK) ? MC_OK : MC_RPC_FAIL;
}

static mc_status_t meta_get(mc_te_t *te, const char *key, char **text_p, size_t *len_p)
{
    mc_etcd_kv_t kv = {0};
    mc_status_t st;
    if (te->meta_kind == MC_TE_META_HTTP)
        return mc_te_http_get(te->meta_url, key, text_p, len_p);
    if (te->meta_kind == MC_TE_META_REDIS) {
        st = mc_redis_get(te->meta_redis, key, text_p, len_p);
        if (st == MC_ETCD_KEY_NOT_EXIST)
            return MC_SEGMENT_NOT_FOUND;
        return (st == MC_OK) ? MC_OK : MC_RPC_FAIL;
    }
    st = mc_etcd_get(te->meta_etcd, key, &kv, NULL);
    if (st == MC_ETCD_KEY_NOT_EXIST)
        return MC_SEGMENT_NOT_FOUND;
    if (st != MC_OK)
        return MC_RPC_FAIL;
    *text_p = kv.value; /* handed over with its length */
    *len_p  = kv.len;
    return MC_OK;
}

static mc_status_t meta_delete(mc_te_t *te, const char *key, const char *token)
{
    if (te->meta_kind == MC_TE_META_HTTP)
        return mc_te_http_delete(te->meta_url, key, token, te->auth);
    if (te->meta_kind == MC_TE_META_REDIS)
        return (mc_redis_del(te->meta_redis, key) == MC_OK) ? MC_OK : MC_RPC_FAIL;
    return (mc_etcd_delete(te->meta_etcd, key) == MC_OK) ? MC_OK : MC_RPC_FAIL;
}

/* ---- publication ---------------------------------------------------------- */

static char *meta_key(const mc_te_t *te, const char *kind, const char *name)
{
    size_t n = strlen(te->key_prefix) + strlen(kind) + strlen(name) + 2;
    char *k  = malloc(n);
    if (k != NULL)
        snprintf(k, n, "%s%s/%s", te->key_prefix, kind, name);
    return k;
}

mc_status_t mc_te_meta_publish(mc_te_t *te, int with_rpc_meta)
{
    mc_status_t st = MC_OK;
    char *json = NULL, *key = NULL, *rpc = NULL;

    if (te->meta_kind == MC_TE_META_P2P)
        return MC_OK;
    /* Build the descriptor inside the lock: whoever PUTs last sends the
     * newest region list. */
    pthread_mutex_lock(&te->publish_mu);
    st = mc_te_describe_local(te, &json, NULL);
    if (st != MC_OK)
        goto out;
    key = meta_key(te, "ram", te->local_name);
    if (key == NULL) {
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("out of memory");
        goto out;
    }
    st = meta_put(te, key, json, te->owner_token);
    if (st != MC_OK)
        goto out;
    te->published = 1;
    if (with_rpc_meta) {
        json_t *o = json_pack("{s:s, s:i}", "ip_or_host_name", te->host, "rpc_port",
                              (int)te->port);
        free(key);
        key = meta_key(te, "rpc_meta", te->local_name);
        rpc = (o != NULL) ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if ((key == NULL) || (rpc == NULL)) {
            st = MC_INTERNAL_ERROR;
            mc_set_error_detail("out of memory");
            goto out;
        }
        st = meta_put(te, key, rpc, te->owner_token);
    }
out:
    pthread_mutex_unlock(&te->publish_mu);
    if (st != MC_OK)
        mc_warn("publishing the descriptor of %s failed: %s", te->local_name,
                mc_last_error_detail());
    free(rpc);
    free(key);
    free(json);
    return (st == MC_SEGMENT_NOT_FOUND) ? MC_RPC_FAIL : st;
}

void mc_te_meta_token_set(mc_te_t *te, const char *token)
{
    pthread_mutex_lock(&te->publish_mu);
    snprintf(te->owner_token, sizeof(te->owner_token), "%s", token ? token : "");
    pthread_mutex_unlock(&te->publish_mu);
}

void mc_te_meta_unpublish(mc_te_t *te)
{
    static const char *const kinds[] = {"ram", "rpc_meta"};
    char token[sizeof(te->owner_token)];
    if ((te->meta_kind == MC_TE_META_P2P) || !te->published)
        return;
    pthread_mutex_lock(&te->publish_mu);
    memcpy(token, te->owner_token, sizeof(token));
    pthread_mutex_unlock(&te->publish_mu);
    for (size_t i = 0; i < MC_ARRAY_SIZE(kinds); i++) {
        char *key = meta_key(te, kinds[i], te->local_name);
        if (key == NULL)
            continue;
        if (meta_delete(te, key, token) != MC_OK)
            mc_warn("deleting metadata key %s failed: %s", key, mc_last_error_detail());
        free(key);
    }
    te->published = 0;
}

/* ---- lookup ---------------------------------------------------------------- */

static mc_status_t fetch_p2p(mc_te_t *te, mc_te_segment_t *seg, mc_te_desc_t *desc_p)
{
    char host[256];
    uint16_t port = 0;
    char *json    = NULL;
    size_t len    = 0;
    mc_status_t st;

    if (seg->peer == NULL) {
        if ((mc_parse_host_port(seg->name, host, sizeof(host), &port) != 0) || (port == 0)) {
            mc_set_error_detail("segment name \"%s\" is not host:port", seg->name);
            return MC_INVALID_PARAMS;
        }
        st = mc_te_tp_peer_open(te, host, port, &seg->peer);
        if (st != MC_OK)
            return st;
    }
    st = mc_te_tp_describe(te, seg->peer, &json, &len);
    if (st != MC_OK)
        return st;
    st = mc_te_desc_decode(json, len, desc_p);
    free(json);
    return st;
}

/* rpc_meta value: {"ip_or_host_name": "...", "rpc_port": N}. */
static mc_status_t parse_rpc_meta(const char *text, size_t len, char *host, size_t host_cap)
{
    json_error_t jerr;
    json_t *o = json_loadb(text, len, 0, &jerr);
    json_t *h = json_is_object(o) ? json_object_get(o, "ip_or_host_name") : NULL;
    mc_status_t st = MC_DESERIALIZE_FAIL;
    if ((h != NULL) && json_is_string(h) && (json_string_length(h) > 0) &&
        (json_string_length(h) < host_cap) &&
        (strlen(json_string_value(h)) == json_string_length(h))) {
        memcpy(host, json_string_value(h), json_string_length(h) + 1);
        st = MC_OK;
    } else {
        mc_set_error_detail("rpc_meta value is malformed");
    }
    json_decref(o);
    return st;
}

static mc_status_t fetch_kv(mc_te_t *te, mc_te_segment_t *seg, mc_te_desc_t *desc_p)
{
    char *key = NULL, *text = NULL;
    size_t len = 0;
    char host[256];
    uint16_t unused_port;
    mc_te_desc_t d;
    mc_status_t st;

    mc_te_desc_init(&d);
    key = meta_key(te, "ram", seg->name);
    if (key == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    st = meta_get(te, key, &text, &len);
    if (st == MC_SEGMENT_NOT_FOUND)
        mc_set_error_detail("segment %s is not registered at %s (no key %s)", seg->name,
                            te->meta_url, key);
    if (st != MC_OK)
        goto out;
    st = mc_te_desc_decode(text, len, &d);
    if (st != MC_OK)
        goto out;
    if (seg->peer == NULL) {
        free(key);
        free(text);
        text = NULL;
        key  = meta_key(te, "rpc_meta", seg->name);
        if (key == NULL) {
            st = MC_INTERNAL_ERROR;
            mc_set_error_detail("out of memory");
            goto out;
        }
        st = meta_get(te, key, &text, &len);
        if (st == MC_OK) {
            st = parse_rpc_meta(text, len, host, sizeof(host));
        } else if (st == MC_SEGMENT_NOT_FOUND) {
            /* no rpc_meta (another writer): the host of the name will do */
            st = (mc_parse_host_port(seg->name, host, sizeof(host), &unused_port) == 0)
                     ? MC_OK
                     : MC_INVALID_PARAMS;
            if (st != MC_OK)
                mc_set_error_detail("segment %s has no rpc_meta and its name has no host",
                                    seg->name);
        }
        if (st != MC_OK)
            goto out;
        st = mc_te_tp_peer_open(te, host, d.tcp_data_port, &seg->peer);
        if (st != MC_OK)
            goto out;
    }
    mc_te_desc_move(desc_p, &d);
out:
    mc_te_desc_cleanup(&d);
    free(text);
    free(key);
    return st;
}

mc_status_t mc_te_meta_fetch(mc_te_t *te, mc_te_segment_t *seg, mc_te_desc_t *desc_p)
{
    if (te->meta_kind != MC_TE_META_P2P)
        return fetch_kv(te, seg, desc_p);
    return fetch_p2p(te, seg, desc_p);
}

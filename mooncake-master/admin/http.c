/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP metadata store (http.h, docs/protocol.md §6), served by
 * mooncake_master --enable_http_metadata_server and by
 * mooncake_http_metadata_server.
 *
 * Transfer engines publish their segment descriptors
 * (mooncake/ram/<segment>) and RPC endpoints (mooncake/rpc_meta/<segment>)
 * here and look up their peers'.  It is a flat key-value store in memory
 * served by libevent's evhttp on the caller's event loop:
 *
 *   GET    /metadata?key=K   200 + body, 404 "metadata not found"
 *   PUT    /metadata?key=K   200 "metadata updated"; an existing rpc_meta
 *                            key is refused or kept (dialect, http.h)
 *   DELETE /metadata?key=K   200 "metadata deleted" or 404
 *   GET    /health           200 "OK"
 *
 * A missing or empty key parameter is 400 (text per dialect).  Keys are
 * URL-decoded and at most MC_META_MAX_KEY bytes (414).  Bodies are capped
 * at max_value by evhttp (413) and the whole store at quota (507):
 * mc_meta_server_set_limits(), from the daemons' flags, so a misbehaving
 * client cannot exhaust the daemon's memory through this port.
 *
 * Owns: the HTTP metadata store of the transfer engines.
 * May call: http.h, libmooncake's common/ and libevent only:
 *   mooncake_http_metadata_server builds it alone.
 */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "common/auth.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "http.h"

#define MC_META_MAX_KEY   4096u                  /* bytes in one key (URL-decoded) */
#define MC_META_RPC_PREFIX "mooncake/rpc_meta/"

struct mc_meta_server {
    struct evhttp *http;
    mc_meta_dialect_t dialect;
    mc_hmap_t meta;
    uint64_t meta_bytes;
    uint64_t quota;            /* all keys and values */
    mc_meta_write_check_func_t check; /* who may PUT/DELETE (NULL: anyone) */
    const mc_auth_t *auth;            /* writes must be signed (NULL: off) */
    mc_auth_replay_t replay;
    void *check_arg;
    char bound[300];
};

typedef struct meta_entry {
    mc_hnode_t node;
    size_t key_len;
    size_t val_len;
    uint8_t *val;
    char key[];                /* NUL-terminated */
} meta_entry_t;

static int meta_eq(const mc_hnode_t *node, const void *key)
{
    const meta_entry_t *e = mc_container_of(node, meta_entry_t, node);
    return strcmp(e->key, key) == 0;
}

static uint64_t meta_hash(const char *key)
{
    return mc_hash_bytes(key, strlen(key), 0x6d657461u);
}

static meta_entry_t *meta_find(mc_meta_server_t *m, const char *key)
{
    mc_hnode_t *n = mc_hmap_find(&m->meta, meta_hash(key), key, meta_eq);
    return n ? mc_container_of(n, meta_entry_t, node) : NULL;
}

static void meta_erase(mc_meta_server_t *m, meta_entry_t *e)
{
    mc_hmap_remove(&m->meta, &e->node);
    m->meta_bytes -= e->key_len + e->val_len;
    free(e->val);
    free(e);
}

int mc_meta_server_delete(mc_meta_server_t *m, const char *key)
{
    meta_entry_t *e;
    if (m == NULL)
        return -1;
    e = meta_find(m, key);
    if (e == NULL)
        return -1;
    mc_info("http metadata: deleted %s", key);
    meta_erase(m, e);
    return 0;
}

static void reply(struct evhttp_request *req, int code, const char *reason, const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    evbuffer_add(b, text, strlen(text));
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

static void do_get(mc_meta_server_t *m, struct evhttp_request *req, const char *key)
{
    meta_entry_t *e = meta_find(m, key);
    struct evbuffer *b;

    if (e == NULL) {
        reply(req, HTTP_NOTFOUND, "Not Found", "metadata not found");
        return;
    }
    b = evbuffer_new();
    if ((b == NULL) || (evbuffer_add(b, e->val, e->val_len) != 0)) {
        if (b != NULL)
            evbuffer_free(b);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

static void do_put(mc_meta_server_t *m, struct evhttp_request *req, const char *key)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len          = evbuffer_get_length(in);
    size_t klen         = strlen(key);
    meta_entry_t *e     = meta_find(m, key);
    uint8_t *val;

    if ((e != NULL) && (m->dialect == MC_META_DIALECT_STANDALONE) &&
        (strstr(key, "rpc_meta") != NULL)) {
        /* the Python server: an rpc_meta key is written once */
        mc_warn("http metadata: refused a second value for %s", key);
        reply(req, HTTP_BADREQUEST, "Bad Request", "Duplicate rpc_meta key not allowed");
        return;
    }
    if ((e != NULL) && (m->dialect == MC_META_DIALECT_MASTER) &&
        (strncmp(key, MC_META_RPC_PREFIX, strlen(MC_META_RPC_PREFIX)) == 0)) {
        /* Same body: a retried registration.  Different body: another
         * process claims the same segment name. */
        uint8_t *body = len ? evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
        if ((len != e->val_len) || ((len > 0) && (memcmp(body, e->val, len) != 0))) {
            mc_warn("http metadata: refused a different value for %s", key);
            reply(req, HTTP_BADREQUEST, "Bad Request", "Duplicate rpc_meta key not allowed");
            return;
        }
        reply(req, HTTP_OK, "OK", "metadata unchanged");
        return;
    }
    if (m->meta_bytes - (e ? e->key_len + e->val_len : 0) + klen + len > m->quota) {
        mc_log_ratelimited(MC_LOG_WARN,
                           "http metadata: refused %zu bytes for %.200s: the store holds %llu "
                           "of its %llu-byte quota",
                           len, key, (unsigned long long)m->meta_bytes,
                           (unsigned long long)m->quota);
        reply(req, 507, "Insufficient Storage", "metadata store is full");
        return;
    }
    val = malloc(len ? len : 1);
    if (val == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evbuffer_remove(in, val, len);
    if (e == NULL) {
        e = malloc(sizeof(*e) + klen + 1);
        if (e == NULL) {
            free(val);
            evhttp_send_error(req, HTTP_INTERNAL, NULL);
            return;
        }
        memcpy(e->key, key, klen + 1);
        e->key_len = klen;
        e->val     = NULL;
        e->val_len = 0;
        mc_hmap_insert(&m->meta, &e->node, meta_hash(key));
        m->meta_bytes += klen;
    }
    m->meta_bytes -= e->val_len;
    free(e->val);
    e->val     = val;
    e->val_len = len;
    m->meta_bytes += len;
    mc_debug("http metadata: stored %s (%zu bytes)", key, len);
    reply(req, HTTP_OK, "OK", "metadata updated");
}

static void do_delete(mc_meta_server_t *m, struct evhttp_request *req, const char *key)
{
    if (mc_meta_server_delete(m, key) != 0) {
        reply(req, HTTP_NOTFOUND, "Not Found", "metadata not found");
        return;
    }
    reply(req, HTTP_OK, "OK", "metadata deleted");
}

/* Surrounding white space, as Python's str.strip(), in place. */
static char *strip(char *s)
{
    size_t n;
    while ((*s == ' ') || (*s == '\t') || (*s == '\n') || (*s == '\r') || (*s == '\v') ||
           (*s == '\f'))
        s++;
    n = strlen(s);
    while ((n > 0) && ((s[n - 1] == ' ') || (s[n - 1] == '\t') || (s[n - 1] == '\n') ||
                       (s[n - 1] == '\r') || (s[n - 1] == '\v') || (s[n - 1] == '\f')))
        s[--n] = '\0';
    return s;
}

static void http_cb(struct evhttp_request *req, void *arg)
{
    mc_meta_server_t *m           = arg;
    const struct evhttp_uri *uri  = evhttp_request_get_evhttp_uri(req);
    const char *path              = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *query             = uri ? evhttp_uri_get_query(uri) : NULL;
    enum evhttp_cmd_type cmd      = evhttp_request_get_command(req);
    int standalone                = m->dialect == MC_META_DIALECT_STANDALONE;
    const char *no_key   = standalone ? "metadata key is required" : "Missing key parameter";
    const char *bad_meth = standalone ? "Method not allowed" : "method not allowed";
    const char *no_path  = standalone ? "404: Not Found" : "not found";
    struct evkeyvalq params;
    const char *found;
    char *key;

    if (path == NULL) {
        reply(req, HTTP_NOTFOUND, "Not Found", no_path);
        return;
    }
    if (strcmp(path, "/health") == 0) {
        if ((cmd != EVHTTP_REQ_GET) && (cmd != EVHTTP_REQ_HEAD))
            reply(req, HTTP_BADMETHOD, "Method Not Allowed", bad_meth);
        else
            reply(req, HTTP_OK, "OK", "OK");
        return;
    }
    if (strcmp(path, "/metadata") != 0) {
        reply(req, HTTP_NOTFOUND, "Not Found", no_path);
        return;
    }

    if (query == NULL) {
        reply(req, HTTP_BADREQUEST, "Bad Request", no_key);
        return;
    }
    /* initialises params; on failure it has already cleared them */
    if (evhttp_parse_query_str(query, &params) != 0) {
        reply(req, HTTP_BADREQUEST, "Bad Request", no_key);
        return;
    }
    found = evhttp_find_header(&params, "key"); /* already URL-decoded */
    key   = found ? mc_strdup(found) : NULL;
    evhttp_clear_headers(&params);
    if ((found != NULL) && (key == NULL)) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    if ((key != NULL) && standalone) {
        char *k = strip(key);
        memmove(key, k, strlen(k) + 1);
    }
    if ((key == NULL) || (*key == '\0')) {
        free(key);
        reply(req, HTTP_BADREQUEST, "Bad Request", no_key);
        return;
    }
    if (strlen(key) > MC_META_MAX_KEY) {
        free(key);
        reply(req, 414, "URI Too Long", "metadata key is too long");
        return;
    }
    if (((cmd == EVHTTP_REQ_PUT) || (cmd == EVHTTP_REQ_DELETE)) && (m->auth != NULL) &&
        (mc_http_auth_check(m->auth, &m->replay, req) != 0)) {
        free(key);
        return;
    }
    if (((cmd == EVHTTP_REQ_PUT) || (cmd == EVHTTP_REQ_DELETE)) && (m->check != NULL) &&
        !m->check(m->check_arg, key,
                  evhttp_find_header(evhttp_request_get_input_headers(req),
                                     MC_META_OWNER_HEADER))) {
        free(key);
        reply(req, 403, "Forbidden", "metadata key is owned by another client");
        return;
    }
    switch (cmd) {
    case EVHTTP_REQ_GET:
    case EVHTTP_REQ_HEAD: /* evhttp drops the body */
        do_get(m, req, key);
        break;
    case EVHTTP_REQ_PUT:
        do_put(m, req, key);
        break;
    case EVHTTP_REQ_DELETE:
        do_delete(m, req, key);
        break;
    default:
        reply(req, HTTP_BADMETHOD, "Method Not Allowed", bad_meth);
        break;
    }
    free(key);
}

/*
 * Bind an evhttp server to host:port and record the address it really
 * listens on ("host:port", numeric) in bound[bound_len], for the startup
 * log.  Shared by the metadata server and the admin server.  Logs and
 * returns -1 when the port cannot be bound.
 */
int mc_master_evhttp_bind(struct evhttp *h, const char *what, const char *host, uint16_t port,
                          char *bound, size_t bound_len)
{
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(h, host, port);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char hb[NI_MAXHOST] = "?", pb[NI_MAXSERV] = "?";

    if (bs == NULL) {
        mc_error("%s: cannot listen on %s:%u: %s", what, host, (unsigned)port,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        return -1;
    }
    if ((getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0) &&
        (getnameinfo((struct sockaddr *)&ss, sl, hb, sizeof(hb), pb, sizeof(pb),
                     NI_NUMERICHOST | NI_NUMERICSERV) == 0))
        snprintf(bound, bound_len, "%.250s:%.32s", hb, pb);
    else
        snprintf(bound, bound_len, "%s:%u", host, (unsigned)port);
    return 0;
}

static const char *cmd_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_POST:
        return "POST";
    default:
        return "OTHER";
    }
}

int mc_http_auth_check(const mc_auth_t *auth, mc_auth_replay_t *replay,
                       struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t blen         = evbuffer_get_length(in);
    const void *body    = blen ? (const void *)evbuffer_pullup(in, -1) : (const void *)"";
    char why[128], msg[200];
    const char *uri = evhttp_request_get_uri(req);

    if (body == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return -1;
    }
    if (mc_auth_http_verify(auth, replay, cmd_name(evhttp_request_get_command(req)),
                            uri ? uri : "", body, blen,
                            evhttp_find_header(evhttp_request_get_input_headers(req),
                                               MC_AUTH_HTTP_HEADER),
                            (int64_t)time(NULL), why, sizeof(why)) == 0)
        return 0;
    mc_log_ratelimited(MC_LOG_WARN, "http: refused an unauthenticated %s %.200s: %s",
                       cmd_name(evhttp_request_get_command(req)), uri ? uri : "", why);
    snprintf(msg, sizeof(msg), "authentication required: %s", why);
    reply(req, 401, "Unauthorized", msg);
    return -1;
}

int mc_meta_server_set_auth(mc_meta_server_t *m, const mc_auth_t *auth)
{
    if ((m->auth == NULL) && (mc_auth_replay_init(&m->replay) != 0))
        return -1;
    m->auth = auth;
    return 0;
}

void mc_meta_server_set_write_check(mc_meta_server_t *m, mc_meta_write_check_func_t check,
                                    void *arg)
{
    m->check     = check;
    m->check_arg = arg;
}

void mc_meta_server_set_limits(mc_meta_server_t *m, uint64_t max_value, uint64_t quota)
{
    m->quota = quota;
    evhttp_set_max_body_size(m->http, (ev_ssize_t)MC_MIN(max_value, (uint64_t)INT64_MAX));
}

const char *mc_meta_server_bound(const mc_meta_server_t *m)
{
    return m->bound;
}

mc_status_t mc_meta_server_create(struct event_base *base, mc_meta_dialect_t dialect,
                                  const char *host, uint16_t port, mc_meta_server_t **srv_p)
{
    mc_meta_server_t *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return MC_INTERNAL_ERROR;
    m->dialect = dialect;
    if (mc_hmap_init(&m->meta, 64) != 0) {
        free(m);
        return MC_INTERNAL_ERROR;
    }
    m->http = evhttp_new(base);
    if (m->http == NULL) {
        mc_meta_server_destroy(m);
        return MC_INTERNAL_ERROR;
    }
    mc_meta_server_set_limits(m, MC_META_DEFAULT_MAX_VALUE, MC_META_DEFAULT_QUOTA);
    evhttp_set_max_headers_size(m->http, 64 * 1024);
    evhttp_set_timeout(m->http, 30);
    /* every method reaches http_cb so the wrong ones get 405, not 501 */
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_gencb(m->http, http_cb, m);
    if (mc_master_evhttp_bind(m->http, "http metadata server", host, port, m->bound,
                              sizeof(m->bound)) != 0) {
        mc_meta_server_destroy(m);
        return MC_INVALID_PARAMS;
    }
    *srv_p = m;
    return MC_OK;
}

void mc_meta_server_destroy(mc_meta_server_t *m)
{
    mc_hmap_iter_t it;
    mc_hnode_t *n;

    if (m == NULL)
        return;
    if (m->http != NULL)
        evhttp_free(m->http);
    n = mc_hmap_first(&m->meta, &it);
    while (n != NULL) {
        meta_entry_t *e = mc_container_of(n, meta_entry_t, node);
        n               = mc_hmap_next(&m->meta, &it);
        meta_erase(m, e);
    }
    mc_hmap_cleanup(&m->meta);
    if (m->auth != NULL)
        mc_auth_replay_cleanup(&m->replay);
    free(m);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client HTTP server (MC_STORE_PARAM_CLIENT_HTTP_PORT): health, the
 * client's metrics, its version, and segment mounting by HTTP.
 *
 * Shape: its own libevent base and evhttp on one library thread, started
 * as the last step of setup and stopped by close *before* close takes
 * `life` for writing — a handler is an ordinary caller of the public API
 * (mc_store_mount_segment() & co. take `life` for reading), so stopping
 * the thread under the write lock could wait forever on a handler that
 * waits for the lock.  Stopping writes an eventfd the loop watches; the
 * loop breaks and the thread is joined.  No Python, no GIL: the thread
 * never leaves libmooncake.
 *
 * Routes and bodies: docs/architecture.md "Client HTTP server".
 *
 * May call: the public API of the handle (health, metrics, mounts),
 * ../calls.c, ../read/read.h (the location cache's counters).  Called by:
 * store.c (start, stop).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include <mooncake/mooncake.h>

#include "common/log.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"

struct mc_store_http {
    mc_store_h s;
    struct event_base *base;
    struct evhttp *http;
    struct event *wake;
    int efd;
    pthread_t thread;
    int started;
};

static const uint64_t bucket_le_us[MC_METRIC_NBUCKETS] = {MC_METRIC_LATENCY_BUCKETS_US};
static const char *const op_names[MC_MOP_COUNT] = {"get", "put", "batch_get", "batch_put"};

/* ---- replies -------------------------------------------------------------------- */

static void reply(struct evhttp_request *req, int code, const char *ctype, const char *body)
{
    struct evbuffer *b = evbuffer_new();
    const char *reason = (code == 200)   ? "OK"
                         : (code == 400) ? "Bad Request"
                         : (code == 404) ? "Not Found"
                         : (code == 405) ? "Method Not Allowed"
                         : (code == 503) ? "Service Unavailable"
                                         : "Internal Server Error";
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    if (b != NULL)
        evbuffer_add(b, body, strlen(body));
    evhttp_send_reply(req, code, reason, b);
    if (b != NULL)
        evbuffer_free(b);
}

/* Sends @p j (stolen) as JSON. */
static void reply_json(struct evhttp_request *req, int code, json_t *j)
{
    char *text = (j != NULL) ? json_dumps(j, JSON_COMPACT) : NULL;
    if (text == NULL)
        reply(req, 500, "text/plain", "out of memory");
    else
        reply(req, code, "application/json", text);
    free(text);
    json_decref(j);
}

static void reply_error(struct evhttp_request *req, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void reply_error(struct evhttp_request *req, int code, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    reply_json(req, code, json_pack("{s:s}", "error", msg));
}

/* ---- GET routes ----------------------------------------------------------------- */

static void route_health(mc_store_http_t *h, struct evhttp_request *req)
{
    const char *status = "healthy";
    int code = 0;

    if (mc_store_enter(h->s) != MC_OK) {
        status = "not_initialized";
        code   = MC_UNAVAILABLE_IN_CURRENT_STATUS;
    } else {
        if (atomic_load_explicit(&h->s->metrics.master_fails, memory_order_relaxed) >=
            MC_STORE_HEARTBEAT_MAX_FAILS) {
            status = "master_unreachable";
            code   = MC_RPC_FAIL;
        }
        mc_store_leave(h->s);
    }
    reply_json(req, code == 0 ? 200 : 503, json_pack("{s:s,s:i}", "status", status, "code", code));
}

static void segments_in_use(mc_store_h s, uint64_t *n_p, uint64_t *bytes_p)
{
    uint64_t n = 0, bytes = 0;
    pthread_mutex_lock(&s->seg_lock);
    for (size_t i = 0; i < s->nsegs; i++) {
        if (s->segs[i].drain_deadline_ms != 0)
            continue;
        n++;
        bytes += s->segs[i].size;
    }
    pthread_mutex_unlock(&s->seg_lock);
    *n_p     = n;
    *bytes_p = bytes;
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void render_metrics(mc_store_h s, struct evbuffer *b)
{
    const mc_store_metrics_t *m = &s->metrics;
    uint64_t nseg, segbytes;

    evbuffer_add_printf(b,
                        "# HELP mooncake_transfer_read_bytes Value bytes read by successful "
                        "gets of this client.\n# TYPE mooncake_transfer_read_bytes counter\n"
                        "mooncake_transfer_read_bytes %" PRIu64 "\n",
                        LOAD(m->read_bytes));
    evbuffer_add_printf(b,
                        "# HELP mooncake_transfer_write_bytes Value bytes of successful puts "
                        "of this client.\n# TYPE mooncake_transfer_write_bytes counter\n"
                        "mooncake_transfer_write_bytes %" PRIu64 "\n",
                        LOAD(m->write_bytes));
    for (int op = 0; op < MC_MOP_COUNT; op++) {
        const mc_store_histo_t *h = &m->latency[op];
        const char *n             = op_names[op];
        uint64_t cum              = 0;

        evbuffer_add_printf(b,
                            "# HELP mooncake_transfer_%s_latency Latency of %s calls in "
                            "microseconds.\n# TYPE mooncake_transfer_%s_latency histogram\n",
                            n, n, n);
        for (int i = 0; i <= MC_METRIC_NBUCKETS; i++) {
            cum += LOAD(h->bucket[i]);
            if (i < MC_METRIC_NBUCKETS)
                evbuffer_add_printf(b, "mooncake_transfer_%s_latency_bucket{le=\"%" PRIu64
                                       "\"} %" PRIu64 "\n",
                                    n, bucket_le_us[i], cum);
            else
                evbuffer_add_printf(b, "mooncake_transfer_%s_latency_bucket{le=\"+Inf\"} %" PRIu64
                                       "\n",
                                    n, cum);
        }
        evbuffer_add_printf(b,
                            "mooncake_transfer_%s_latency_sum %" PRIu64 "\n"
                            "mooncake_transfer_%s_latency_count %" PRIu64 "\n",
                            n, LOAD(h->sum_us), n, LOAD(h->count));
        evbuffer_add_printf(b,
                            "# HELP mooncake_client_%s_requests_total %s calls.\n"
                            "# TYPE mooncake_client_%s_requests_total counter\n"
                            "mooncake_client_%s_requests_total %" PRIu64 "\n"
                            "# HELP mooncake_client_%s_failures_total %s calls that returned "
                            "an error (a batch: any key).\n"
                            "# TYPE mooncake_client_%s_failures_total counter\n"
                            "mooncake_client_%s_failures_total %" PRIu64 "\n",
                            n, n, n, n, LOAD(m->requests[op]), n, n, n, n,
                            LOAD(m->failures[op]));
        if ((op == MC_MOP_BATCH_GET) || (op == MC_MOP_BATCH_PUT))
            evbuffer_add_printf(b,
                                "# HELP mooncake_client_%s_items_total Keys in %s calls.\n"
                                "# TYPE mooncake_client_%s_items_total counter\n"
                                "mooncake_client_%s_items_total %" PRIu64 "\n",
                                n, n, n, n, LOAD(m->items[op]));
    }
    if ((s->rd != NULL) && (s->rd->loc != NULL)) {
        mc_loc_cache_stats_t cs;
        mc_loc_cache_stats(s->rd->loc, &cs);
        evbuffer_add_printf(b,
                            "# HELP mooncake_client_location_cache_hits_total Lookups answered "
                            "from the location cache.\n"
                            "# TYPE mooncake_client_location_cache_hits_total counter\n"
                            "mooncake_client_location_cache_hits_total %" PRIu64 "\n"
                            "# HELP mooncake_client_location_cache_misses_total Lookups the "
                            "location cache could not answer.\n"
                            "# TYPE mooncake_client_location_cache_misses_total counter\n"
                            "mooncake_client_location_cache_misses_total %" PRIu64 "\n",
                            cs.hits, cs.misses);
    }
    evbuffer_add_printf(b,
                        "# HELP mooncake_client_speculative_reads_total Reads of this client's "
                        "own puts made while the master was asked (result: confirmed, the "
                        "bytes kept; refuted, read again).\n"
                        "# TYPE mooncake_client_speculative_reads_total counter\n"
                        "mooncake_client_speculative_reads_total{result=\"confirmed\"} %" PRIu64
                        "\n"
                        "mooncake_client_speculative_reads_total{result=\"refuted\"} %" PRIu64
                        "\n",
                        LOAD(m->spec_confirmed), LOAD(m->spec_refuted));
    segments_in_use(s, &nseg, &segbytes);
    evbuffer_add_printf(b,
                        "# HELP mooncake_client_mounted_segments Segments this client has "
                        "mounted (not draining).\n# TYPE mooncake_client_mounted_segments gauge\n"
                        "mooncake_client_mounted_segments %" PRIu64 "\n"
                        "# HELP mooncake_client_mounted_bytes Bytes of those segments.\n"
                        "# TYPE mooncake_client_mounted_bytes gauge\n"
                        "mooncake_client_mounted_bytes %" PRIu64 "\n",
                        nseg, segbytes);
}

static void render_summary(mc_store_h s, struct evbuffer *b)
{
    const mc_store_metrics_t *m = &s->metrics;
    uint64_t nseg, segbytes;

    evbuffer_add_printf(b, "client=%s\n", s->hostname);
    for (int op = 0; op < MC_MOP_COUNT; op++) {
        uint64_t cnt = LOAD(m->latency[op].count), sum = LOAD(m->latency[op].sum_us);
        evbuffer_add_printf(b,
                            "%s: requests=%" PRIu64 " failures=%" PRIu64 " items=%" PRIu64
                            " avg_latency_us=%" PRIu64 "\n",
                            op_names[op], LOAD(m->requests[op]), LOAD(m->failures[op]),
                            LOAD(m->items[op]), cnt ? sum / cnt : 0);
    }
    segments_in_use(s, &nseg, &segbytes);
    evbuffer_add_printf(b,
                        "read_bytes=%" PRIu64 " write_bytes=%" PRIu64 "\n"
                        "mounted_segments=%" PRIu64 " mounted_bytes=%" PRIu64 "\n",
                        LOAD(m->read_bytes), LOAD(m->write_bytes), nseg, segbytes);
}

static void route_metrics(mc_store_http_t *h, struct evhttp_request *req, int summary)
{
    struct evbuffer *b;

    if (mc_store_enter(h->s) != MC_OK) {
        reply(req, 503, "text/plain", "client not initialized");
        return;
    }
    b = evbuffer_new();
    if (b == NULL) {
        mc_store_leave(h->s);
        reply(req, 503, "text/plain", "metrics not available");
        return;
    }
    if (summary)
        render_summary(h->s, b);
    else
        render_metrics(h->s, b);
    mc_store_leave(h->s);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      summary ? "text/plain" : "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

/* ---- POST /api/ routes ---------------------------------------------------------- */

/* The JSON object in the request body, or NULL after a 400 was sent. */
static json_t *body_object(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len          = evbuffer_get_length(in);
    const char *text    = (const char *)evbuffer_pullup(in, -1);
    json_error_t err;
    json_t *j;

    if (len == 0) {
        reply_error(req, 400, "a JSON object body is required");
        return NULL;
    }
    j = json_loadb(text, len, 0, &err);
    if (j == NULL) {
        reply_error(req, 400, "invalid JSON: %s", err.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        reply_error(req, 400, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* @p name as an optional string (@p def when absent or null); -1 after a 400. */
static int opt_string(struct evhttp_request *req, json_t *o, const char *name, const char *def,
                      const char **v_p)
{
    json_t *v = json_object_get(o, name);
    if ((v == NULL) || json_is_null(v)) {
        *v_p = def;
        return 0;
    }
    if (!json_is_string(v)) {
        reply_error(req, 400, "\"%s\" must be a string", name);
        return -1;
    }
    *v_p = json_string_value(v);
    return 0;
}

/* @p name as an integer >= @p min (@p def when absent; def < 0: required). */
static int get_uint(struct evhttp_request *req, json_t *o, const char *name, json_int_t def,
                    json_int_t min, json_int_t max, uint64_t *v_p)
{
    json_t *v = json_object_get(o, name);
    if ((v == NULL) && (def >= 0)) {
        *v_p = (uint64_t)def;
        return 0;
    }
    if (v == NULL) {
        reply_error(req, 400, "\"%s\" is required", name);
        return -1;
    }
    if (!json_is_integer(v) || (json_integer_value(v) < min) || (json_integer_value(v) > max)) {
        reply_error(req, 400, "\"%s\" must be an integer in [%lld, %lld]", name, (long long)min,
                    (long long)max);
        return -1;
    }
    *v_p = (uint64_t)json_integer_value(v);
    return 0;
}

static void reply_mounted(struct evhttp_request *req, const mc_segment_id_t *id,
                          const uint64_t *allocated)
{
    json_t *j = json_pack("{s:s,s:[s]}", "status", "success", "segment_ids", id->id);
    if ((j != NULL) && (allocated != NULL))
        json_object_set_new(j, "allocated_size", json_integer((json_int_t)*allocated));
    reply_json(req, 200, j);
}

static void route_mount_shm(mc_store_http_t *h, struct evhttp_request *req)
{
    json_t *o = body_object(req);
    json_t *nv;
    const char *name, *protocol, *location;
    uint64_t size, offset;
    char path[300];
    mc_segment_id_t id;
    mc_status_t st;

    if (o == NULL)
        return;
    nv = json_object_get(o, "name");
    if ((nv == NULL) || !json_is_string(nv)) {
        reply_error(req, 400, "\"name\" (a string) is required");
        goto out;
    }
    name = json_string_value(nv);
    if (*name == '/')
        name++;
    if ((*name == '\0') || (strchr(name, '/') != NULL) || (strcmp(name, ".") == 0) ||
        (strcmp(name, "..") == 0) || (strlen(name) > 255)) {
        reply_error(req, 400, "invalid shm name \"%s\": a file name under /dev/shm",
                    json_string_value(nv));
        goto out;
    }
    if ((get_uint(req, o, "size", -1, 1, INT64_MAX, &size) != 0) ||
        (get_uint(req, o, "offset", 0, 0, INT64_MAX, &offset) != 0) ||
        (opt_string(req, o, "protocol", NULL, &protocol) != 0) ||
        (opt_string(req, o, "location", "", &location) != 0))
        goto out;
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    st = mc_store_mount_segment(h->s, path, size, offset, protocol, location, &id);
    if (st != MC_OK) {
        reply_error(req, (st == MC_INVALID_PARAMS) ? 400 : 500, "Mount failed, ret=%d: %s",
                    (int)st, mc_last_error_detail());
        goto out;
    }
    reply_mounted(req, &id, NULL);
out:
    json_decref(o);
}

static void route_mount(mc_store_http_t *h, struct evhttp_request *req)
{
    json_t *o = body_object(req);
    const char *protocol, *location;
    uint64_t size, allocated = 0;
    mc_segment_id_t id;
    mc_status_t st;

    if (o == NULL)
        return;
    if ((get_uint(req, o, "size", -1, 1, INT64_MAX, &size) != 0) ||
        (opt_string(req, o, "protocol", NULL, &protocol) != 0) ||
        (opt_string(req, o, "location", "", &location) != 0))
        goto out;
    st = mc_store_allocate_and_mount_segment(h->s, size, protocol, location, &id, &allocated);
    if (st != MC_OK) {
        reply_error(req, (st == MC_INVALID_PARAMS) ? 400 : 500, "Mount failed, ret=%d: %s",
                    (int)st, mc_last_error_detail());
        goto out;
    }
    reply_mounted(req, &id, &allocated);
out:
    json_decref(o);
}

/* /api/unmount_shm (@p and_free 0) and /api/unmount (1): every id on its own. */
static void route_unmount(mc_store_http_t *h, struct evhttp_request *req, int and_free)
{
    json_t *o = body_object(req);
    json_t *ids, *failed = NULL, *v;
    uint64_t grace;
    size_t i;
    mc_status_t first = MC_OK;
    char detail[400] = "";

    if (o == NULL)
        return;
    ids = json_object_get(o, "segment_ids");
    if ((ids == NULL) || !(json_is_string(ids) || json_is_array(ids)) ||
        (json_is_array(ids) && (json_array_size(ids) == 0))) {
        reply_error(req, 400, "\"segment_ids\" (a string or a non-empty list) is required");
        goto out;
    }
    json_array_foreach(ids, i, v) {
        if (!json_is_string(v)) {
            reply_error(req, 400, "\"segment_ids\" must hold strings");
            goto out;
        }
    }
    if (get_uint(req, o, "grace_period_seconds", 0, 0, INT32_MAX, &grace) != 0)
        goto out;
    failed = json_array();
    for (i = 0; i < (json_is_string(ids) ? 1 : json_array_size(ids)); i++) {
        const char *id = json_string_value(json_is_string(ids) ? ids : json_array_get(ids, i));
        mc_status_t st = and_free ? mc_store_unmount_and_free_segments(h->s, &id, 1, grace)
                                  : mc_store_unmount_segments(h->s, &id, 1, grace);
        if (st != MC_OK) {
            if (first == MC_OK) {
                first = st;
                snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
            }
            json_array_append_new(failed, json_string(id));
        }
    }
    if (first != MC_OK) {
        json_t *j = json_object();
        char msg[500];
        snprintf(msg, sizeof(msg), "Unmount failed, ret=%d: %s", (int)first, detail);
        json_object_set_new(j, "error", json_string(msg));
        json_object_set(j, "failed_segment_ids", failed);
        reply_json(req, 500, j);
        goto out;
    }
    reply_json(req, 200, json_pack("{s:s}", "status", "success"));
out:
    json_decref(failed);
    json_decref(o);
}

/* ---- dispatch ------------------------------------------------------------------- */

static void http_cb(struct evhttp_request *req, void *arg)
{
    mc_store_http_t *h             = arg;
    const struct evhttp_uri *uri   = evhttp_request_get_evhttp_uri(req);
    const char *path               = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type cmd       = evhttp_request_get_command(req);
    int get                        = (cmd == EVHTTP_REQ_GET) || (cmd == EVHTTP_REQ_HEAD);
    int post                       = (cmd == EVHTTP_REQ_POST);

    if (path == NULL) {
        reply_error(req, 400, "bad request URI");
        return;
    }
    if ((strcmp(path, "/health") == 0) || (strcmp(path, "/metrics") == 0) ||
        (strcmp(path, "/metrics/summary") == 0) || (strcmp(path, "/version") == 0)) {
        if (!get) {
            reply_error(req, 405, "%s takes GET", path);
            return;
        }
        if (strcmp(path, "/health") == 0)
            route_health(h, req);
        else if (strcmp(path, "/version") == 0)
            reply_json(req, 200, json_pack("{s:s}", "version", mc_version_string()));
        else
            route_metrics(h, req, strcmp(path, "/metrics/summary") == 0);
        return;
    }
    if ((strcmp(path, "/api/mount_shm") == 0) || (strcmp(path, "/api/unmount_shm") == 0) ||
        (strcmp(path, "/api/mount") == 0) || (strcmp(path, "/api/unmount") == 0)) {
        if (!post) {
            reply_error(req, 405, "%s takes POST", path);
            return;
        }
        if (strcmp(path, "/api/mount_shm") == 0)
            route_mount_shm(h, req);
        else if (strcmp(path, "/api/mount") == 0)
            route_mount(h, req);
        else
            route_unmount(h, req, strcmp(path, "/api/unmount") == 0);
        return;
    }
    reply_error(req, 404, "no route %s", path);
}

/* ---- thread --------------------------------------------------------------------- */

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_store_http_t *h = arg;
    uint64_t v;
    (void)what;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        mc_warn("client http server: eventfd read: %m");
    event_base_loopbreak(h->base);
}

static void *http_main(void *arg)
{
    mc_store_http_t *h = arg;
    event_base_dispatch(h->base);
    return NULL;
}

void mc_store_http_stop(mc_store_http_t *h)
{
    if (h == NULL)
        return;
    if (h->started) {
        uint64_t one = 1;
        if (write(h->efd, &one, sizeof(one)) < 0)
            mc_warn("client http server: eventfd write: %m");
        pthread_join(h->thread, NULL);
    }
    if (h->http != NULL)
        evhttp_free(h->http);
    if (h->wake != NULL)
        event_free(h->wake);
    if (h->base != NULL)
        event_base_free(h->base);
    if (h->efd >= 0)
        close(h->efd);
    free(h);
}

mc_status_t mc_store_http_start(mc_store_h s, uint16_t port, mc_store_http_t **h_p)
{
    mc_store_http_t *h = calloc(1, sizeof(*h));
    struct evhttp_bound_socket *bs;
    int rc;

    if (h == NULL) {
        mc_set_error_detail("out of memory for the client http server");
        return MC_INTERNAL_ERROR;
    }
    h->s    = s;
    h->efd  = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    h->base = event_base_new();
    h->http = (h->base != NULL) ? evhttp_new(h->base) : NULL;
    h->wake = (h->base != NULL && h->efd >= 0)
                  ? event_new(h->base, h->efd, EV_READ | EV_PERSIST, wake_cb, h)
                  : NULL;
    if ((h->efd < 0) || (h->http == NULL) || (h->wake == NULL) || event_add(h->wake, NULL)) {
        mc_set_error_detail("cannot create the client http server");
        mc_store_http_stop(h);
        return MC_INTERNAL_ERROR;
    }
    evhttp_set_max_body_size(h->http, 64 * 1024);
    evhttp_set_max_headers_size(h->http, 64 * 1024);
    evhttp_set_timeout(h->http, 30);
    evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_gencb(h->http, http_cb, h);
    bs = evhttp_bind_socket_with_handle(h->http, "0.0.0.0", port);
    if (bs == NULL) {
        mc_set_error_detail("client http server cannot listen on 0.0.0.0:%u: %s "
                            "(client_http_port)",
                            (unsigned)port,
                            evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        mc_error("%s", mc_last_error_detail());
        mc_store_http_stop(h);
        return MC_INVALID_PARAMS;
    }
    rc = pthread_create(&h->thread, NULL, http_main, h);
    if (rc != 0) {
        mc_set_error_detail("cannot start the client http server thread: %s", strerror(rc));
        mc_store_http_stop(h);
        return MC_INTERNAL_ERROR;
    }
    h->started = 1;
    *h_p       = h;
    mc_info("client http server listening on 0.0.0.0:%u", (unsigned)port);
    return MC_OK;
}

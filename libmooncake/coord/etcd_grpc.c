/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One unary gRPC call over h2c with libcurl (etcd_grpc.h).
 *
 * Why: etcd's JSON gateway turns every request into a gRPC call to the
 * member itself (a second HTTP/2 hop inside etcd, plus reflection-based
 * JSON and base64 both ways); for the log's transactions that work costs
 * more of etcd's CPU than the commit itself (docs/ha.md, "Log shipping").
 * libcurl with nghttp2 speaks HTTP/2 without TLS when told the server
 * does ("prior knowledge"), which etcd's client port does: it routes
 * HTTP/2 connections to its gRPC server.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "coord/etcd_grpc.h"

#define MC_ETCD_GRPC_MAX_RESPONSE (16u << 20)

/* What the headers and trailers said. */
typedef struct grpc_hdrs {
    int status;       /* grpc-status, -1 until seen */
    int is_grpc;      /* content-type application/grpc... */
    char message[200];
} grpc_hdrs_t;

/* "name: value\r\n" lines of the headers and (after the body) trailers. */
static size_t header_cb(char *buf, size_t size, size_t nitems, void *ud)
{
    grpc_hdrs_t *h = ud;
    size_t n = size * nitems, vlen;
    const char *v;

    if ((n > 12) && (strncasecmp(buf, "grpc-status:", 12) == 0)) {
        int st = 0, digits = 0;
        for (v = buf + 12; (v < buf + n) && (*v == ' '); v++)
            ;
        for (; (v < buf + n) && (*v >= '0') && (*v <= '9') && (digits < 4); v++, digits++)
            st = st * 10 + (*v - '0');
        h->status = (digits > 0) ? st : 2; /* unparsable: UNKNOWN */
    } else if ((n > 13) && (strncasecmp(buf, "grpc-message:", 13) == 0)) {
        for (v = buf + 13; (v < buf + n) && (*v == ' '); v++)
            ;
        vlen = (size_t)(buf + n - v);
        while ((vlen > 0) && ((v[vlen - 1] == '\r') || (v[vlen - 1] == '\n')))
            vlen--;
        vlen = (vlen < sizeof(h->message) - 1) ? vlen : sizeof(h->message) - 1;
        memcpy(h->message, v, vlen);
        h->message[vlen] = '\0';
    } else if ((n > 13) && (strncasecmp(buf, "content-type:", 13) == 0)) {
        for (v = buf + 13; (v < buf + n) && (*v == ' '); v++)
            ;
        h->is_grpc = ((size_t)(buf + n - v) >= 16) && (strncasecmp(v, "application/grpc", 16) == 0);
    }
    return n;
}

/* libcurl before 8.0.0 (Debian 12 has 7.88.1) fails every transfer that
 * reuses an HTTP/2 connection opened with prior knowledge when that transfer
 * asks for prior knowledge too ("Error in the HTTP2 framing layer": it
 * stacks a second HTTP/2 layer on the connection; curl issue 10634, fixed
 * by pull request 10643).  Asking for plain HTTP/2 on the reused
 * connection works, but on a new connection plain HTTP/2 over http:// is an
 * HTTP/1.1 Upgrade request, which etcd hands to its gateway.  So such a
 * libcurl reuses a connection with plain HTTP/2 and may not open one
 * then (open_socket_refused); a new connection asks for prior knowledge. */
static int curl_reuse_bug(void)
{
    static _Atomic int bug = -1;
    int b = atomic_load(&bug);
    if (b < 0) {
        const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
        b = (v == NULL) || (v->version_num < 0x080000);
        atomic_store(&bug, b);
    }
    return b;
}

typedef struct reuse_only {
    int refused; /* a new connection was asked for, and refused */
} reuse_only_t;

static curl_socket_t open_socket_refused(void *ud, curlsocktype purpose,
                                         struct curl_sockaddr *addr)
{
    (void)purpose;
    (void)addr;
    ((reuse_only_t *)ud)->refused = 1;
    return CURL_SOCKET_BAD;
}

static size_t body_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    size_t n = size * nmemb;
    return (mc_textbuf_append(ud, ptr, n, MC_ETCD_GRPC_MAX_RESPONSE) == 0) ? n : 0;
}

/* curl errors that mean the peer answered, but not in HTTP/2. */
static int not_h2(CURLcode rc)
{
    return (rc == CURLE_HTTP2) || (rc == CURLE_WEIRD_SERVER_REPLY) ||
           (rc == CURLE_UNSUPPORTED_PROTOCOL) || (rc == CURLE_HTTP_RETURNED_ERROR);
}

/* One transfer; @p reuse: only over the connection already open (see
 * curl_reuse_bug).  *refused_p: it was not open. */
static CURLcode grpc_perform(CURL *curl, const char *url, int reuse, int timeout_ms,
                             int connect_ms, struct curl_slist *hdrs, const uint8_t *req,
                             size_t len, mc_textbuf_t *resp, grpc_hdrs_t *h, char *errbuf,
                             int *refused_p)
{
    reuse_only_t ro = {0};
    CURLcode rc;

    curl_easy_reset(curl);
    errbuf[0] = '\0';
    curl_easy_setopt(curl, CURLOPT_URL, url);
    if (reuse) {
        curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_0);
        curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_socket_refused);
        curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, &ro);
    } else {
        curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
        /* never onto an open connection, which the bug breaks */
        if (curl_reuse_bug())
            curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
    }
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)req);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, h);
    rc         = curl_easy_perform(curl);
    *refused_p = ro.refused;
    return rc;
}

mc_etcd_grpc_rc_t mc_etcd_grpc_unary(CURL *curl, const char *base_url, const char *path,
                                     int timeout_ms, int connect_ms, const uint8_t *req,
                                     size_t len, mc_textbuf_t *resp, int *status_p, int *live_p)
{
    char errbuf[CURL_ERROR_SIZE], url[320];
    grpc_hdrs_t h = {.status = -1};
    struct curl_slist *hdrs = NULL;
    long code = 0, version = 0;
    int refused = 0;
    CURLcode rc;

    hdrs = curl_slist_append(hdrs, "Content-Type: application/grpc");
    if (hdrs != NULL) {
        struct curl_slist *t = curl_slist_append(hdrs, "TE: trailers");
        hdrs                 = (t != NULL) ? curl_slist_append(t, "Expect:") : NULL;
    }
    if (hdrs == NULL) {
        mc_set_error_detail("out of memory building an etcd gRPC request");
        return MC_ETCD_GRPC_TRANSPORT;
    }
    snprintf(url, sizeof(url), "%s%s", base_url, path);
    rc = grpc_perform(curl, url, *live_p && curl_reuse_bug(), timeout_ms, connect_ms, hdrs, req,
                      len, resp, &h, errbuf, &refused);
    if (refused) {
        /* the connection had closed: a new one.  Had the request gone out
         * on the dead one (libcurl retries a request that got no answer),
         * this sends it again: a retry, which the callers' requests allow */
        free(resp->data);
        *resp = (mc_textbuf_t){NULL, 0, 0};
        h     = (grpc_hdrs_t){.status = -1};
        rc = grpc_perform(curl, url, 0, timeout_ms, connect_ms, hdrs, req, len, resp, &h, errbuf,
                          &refused);
    }
    curl_slist_free_all(hdrs);
    *live_p = 0;
    if (rc != CURLE_OK) {
        mc_set_error_detail("etcd gRPC %s at %s: %s", path, base_url,
                            errbuf[0] ? errbuf : curl_easy_strerror(rc));
        return not_h2(rc) ? MC_ETCD_GRPC_NOT_GRPC : MC_ETCD_GRPC_TRANSPORT;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(curl, CURLINFO_HTTP_VERSION, &version);
    if ((version != CURL_HTTP_VERSION_2_0) || (code != 200) || !h.is_grpc || (h.status < 0)) {
        mc_set_error_detail("etcd %s at %s does not answer gRPC (HTTP %ld%s%s)", path, base_url,
                            code, h.is_grpc ? "" : ", not application/grpc",
                            (h.status < 0) ? ", no grpc-status" : "");
        /* a gRPC server's own 5xx-like answers carry a grpc-status; this
         * one did not, whatever its HTTP status */
        return MC_ETCD_GRPC_NOT_GRPC;
    }
    *status_p = h.status;
    *live_p   = 1; /* an HTTP/2 connection to @p base_url stays open */
    if (h.status != 0) {
        mc_set_error_detail("etcd gRPC %s at %s: status %d: %s", path, base_url, h.status,
                            h.message);
        return MC_ETCD_GRPC_STATUS;
    }
    return MC_ETCD_GRPC_DONE;
}

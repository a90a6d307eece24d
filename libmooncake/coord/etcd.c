/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd v3 through its JSON gateway (etcd.h).
 *
 * Every call builds one JSON request, POSTs it to /v3/<service>/<method>
 * and parses the JSON answer.  The gateway's conventions, handled here:
 * bytes are base64, int64 fields are strings ("create_revision": "7"),
 * and fields at their default value are left out (a false "succeeded", a
 * TTL of 0, an empty "kvs").  A gRPC error comes back as a non-2xx status
 * with {"error": "...", "code": N}; code 5 (NOT_FOUND) is an unknown lease.
 *
 * Failover between endpoints: a transport failure, a timeout or a 5xx
 * (a member that lost quorum answers "etcdserver: request timed out")
 * moves on to the next endpoint; each is tried once per request, starting
 * with the one that answered last.  A keep-alive or a campaign that is
 * retried on another member is harmless: both are idempotent, and the
 * create-if-absent transaction tells the caller who holds the key.
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/log.h"
#include "common/util.h"
#include "coord/etcd.h"
#include "coord/etcd_grpc.h"
#include "coord/etcd_pb.h"

#define MC_ETCD_MAX_ENDPOINTS 16
#define MC_ETCD_CONNECT_MS    500
#define MC_ETCD_MAX_RESPONSE  (16u << 20)

struct mc_etcd {
    pthread_mutex_t lock;
    CURL *curl;                 /* reused: keeps the connection alive */
    char *spec;                 /* endpoints as given */
    char *url[MC_ETCD_MAX_ENDPOINTS]; /* "http://h:p" */
    unsigned nurl;
    unsigned cur;               /* the endpoint that answered last */
    int timeout_ms;
    /* guarded transactions over gRPC (mc_etcd_use_grpc): a handle of their
     * own, as an HTTP/2 connection must not carry the gateway's requests */
    CURL *gcurl;
    int grpc;                   /* GRPC_OFF, GRPC_TRYING, GRPC_WORKS */
    int glive;                  /* 1 + the endpoint gcurl has an open connection to, or 0 */
    mc_buf_t greq;              /* the framed request being sent */
};

enum { GRPC_OFF, GRPC_TRYING, GRPC_WORKS };

/* ---- base64 ---------------------------------------------------------------- */

static const char b64_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *mc_etcd_b64_encode(const void *data, size_t len)
{
    const unsigned char *p = data;
    char *out, *o;
    size_t i;

    if (len > (SIZE_MAX / 4) * 3 - 3)
        return NULL;
    out = malloc((len + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    o = out;
    for (i = 0; i + 2 < len; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        *o++ = b64_chars[(v >> 18) & 63];
        *o++ = b64_chars[(v >> 12) & 63];
        *o++ = b64_chars[(v >> 6) & 63];
        *o++ = b64_chars[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        *o++ = b64_chars[(v >> 18) & 63];
        *o++ = b64_chars[(v >> 12) & 63];
        *o++ = (i + 1 < len) ? b64_chars[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

static int b64_val(char c)
{
    const char *p = (c != '\0') ? strchr(b64_chars, c) : NULL;
    return (p != NULL) ? (int)(p - b64_chars) : -1;
}

int mc_etcd_b64_decode(const char *s, size_t slen, char **out_p, size_t *len_p)
{
    unsigned char *out;
    size_t n = 0, pad = 0;

    if (slen % 4 != 0)
        return -1;
    if ((slen > 0) && (s[slen - 1] == '='))
        pad++;
    if ((slen > 1) && (s[slen - 2] == '='))
        pad++;
    out = malloc(slen / 4 * 3 + 1);
    if (out == NULL)
        return -1;
    for (size_t i = 0; i < slen; i += 4) {
        int v[4];
        int last = (i + 4 == slen);
        for (int k = 0; k < 4; k++) {
            if (last && (s[i + k] == '=') && (k >= 4 - (int)pad)) {
                v[k] = 0;
                continue;
            }
            v[k] = b64_val(s[i + k]);
            if (v[k] < 0) {
                free(out);
                return -1;
            }
        }
        uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) |
                     (uint32_t)v[3];
        out[n++] = (unsigned char)(w >> 16);
        if (!last || (pad < 2))
            out[n++] = (unsigned char)(w >> 8);
        if (!last || (pad < 1))
            out[n++] = (unsigned char)w;
    }
    out[n]  = '\0';
    *out_p  = (char *)out;
    *len_p  = n;
    return 0;
}

/* ---- handle ----------------------------------------------------------------- */

static pthread_once_t etcd_curl_once = PTHREAD_ONCE_INIT;
static CURLcode etcd_curl_rc         = CURLE_OK;

static void etcd_curl_init(void)
{
    etcd_curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

mc_status_t mc_etcd_create(const char *endpoints, int timeout_ms, mc_etcd_t **e_p)
{
    mc_etcd_t *e;
    char *copy, *save = NULL, *tok;

    if ((endpoints == NULL) || (*endpoints == '\0')) {
        mc_set_error_detail("no etcd endpoints given");
        return MC_INVALID_PARAMS;
    }
    pthread_once(&etcd_curl_once, etcd_curl_init);
    if (etcd_curl_rc != CURLE_OK) {
        mc_set_error_detail("libcurl initialisation failed: %s", curl_easy_strerror(etcd_curl_rc));
        return MC_INTERNAL_ERROR;
    }
    e = calloc(1, sizeof(*e));
    copy = mc_strdup(endpoints);
    if ((e == NULL) || (copy == NULL))
        goto oom;
    e->spec       = mc_strdup(endpoints);
    e->timeout_ms = (timeout_ms > 0) ? timeout_ms : MC_ETCD_DEFAULT_TIMEOUT_MS;
    if (e->spec == NULL)
        goto oom;
    for (tok = strtok_r(copy, ";,", &save); tok != NULL; tok = strtok_r(NULL, ";,", &save)) {
        char host[256];
        uint16_t port = 0;
        size_t n;
        while (*tok == ' ')
            tok++;
        if (strncmp(tok, "etcd://", 7) == 0)
            tok += 7;
        else if (strncmp(tok, "http://", 7) == 0)
            tok += 7;
        n = strlen(tok);
        while ((n > 0) && ((tok[n - 1] == '/') || (tok[n - 1] == ' ')))
            tok[--n] = '\0';
        if (n == 0)
            continue;
        if ((mc_parse_host_port(tok, host, sizeof(host), &port) != 0) || (port == 0)) {
            mc_set_error_detail("etcd endpoint \"%s\" is not host:port", tok);
            free(copy);
            mc_etcd_destroy(e);
            return MC_INVALID_PARAMS;
        }
        if (e->nurl == MC_ETCD_MAX_ENDPOINTS) {
            mc_set_error_detail("more than %d etcd endpoints", MC_ETCD_MAX_ENDPOINTS);
            free(copy);
            mc_etcd_destroy(e);
            return MC_INVALID_PARAMS;
        }
        e->url[e->nurl] = malloc(strlen(host) + 32);
        if (e->url[e->nurl] == NULL)
            goto oom;
        sprintf(e->url[e->nurl], strchr(host, ':') ? "http://[%s]:%u" : "http://%s:%u", host,
                (unsigned)port);
        e->nurl++;
    }
    free(copy);
    copy = NULL;
    if (e->nurl == 0) {
        mc_set_error_detail("no etcd endpoint in \"%s\"", endpoints);
        mc_etcd_destroy(e);
        return MC_INVALID_PARAMS;
    }
    mc_buf_init(&e->greq);
    e->curl = curl_easy_init();
    if (e->curl == NULL)
        goto oom;
    pthread_mutex_init(&e->lock, NULL);
    *e_p = e;
    return MC_OK;

oom:
    free(copy);
    if (e != NULL) {
        e->curl = NULL;
        mc_etcd_destroy(e);
    }
    mc_set_error_detail("out of memory for an etcd handle");
    return MC_INTERNAL_ERROR;
}

void mc_etcd_destroy(mc_etcd_t *e)
{
    if (e == NULL)
        return;
    if (e->curl != NULL) {
        curl_easy_cleanup(e->curl);
        pthread_mutex_destroy(&e->lock);
    }
    if (e->gcurl != NULL)
        curl_easy_cleanup(e->gcurl);
    mc_buf_cleanup(&e->greq);
    for (unsigned i = 0; i < e->nurl; i++)
        free(e->url[i]);
    free(e->spec);
    free(e);
}

const char *mc_etcd_endpoints(const mc_etcd_t *e)
{
    return e->spec;
}

void mc_etcd_kv_cleanup(mc_etcd_kv_t *kv)
{
    if (kv == NULL)
        return;
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

/* ---- one request -------------------------------------------------------------- */

typedef mc_textbuf_t etcd_body_t;

static size_t etcd_write_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    size_t n = size * nmemb;
    /* one byte stays for the NUL */
    return (mc_textbuf_append(ud, ptr, n, MC_ETCD_MAX_RESPONSE - 1) == 0) ? n : 0;
}

/*
 * POST @p req (consumed) to @p path on the endpoints in turn.  On MC_OK,
 * *resp_p is the parsed 2xx answer.  A 4xx answer is final (the request is
 * wrong or names an unknown lease: MC_ETCD_KEY_NOT_EXIST for gRPC code 5).
 */
static mc_status_t etcd_call(mc_etcd_t *e, const char *path, json_t *req, json_t **resp_p)
{
    char *payload = (req != NULL) ? json_dumps(req, JSON_COMPACT) : NULL;
    mc_status_t st = MC_ETCD_OPERATION_ERROR;
    char errbuf[CURL_ERROR_SIZE];
    char url[320];
    struct curl_slist *hdrs;

    json_decref(req);
    if (payload == NULL) {
        mc_set_error_detail("out of memory building an etcd request");
        return MC_INTERNAL_ERROR;
    }
    hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    pthread_mutex_lock(&e->lock);
    for (unsigned tries = 0; tries < e->nurl; tries++) {
        unsigned idx   = (e->cur + tries) % e->nurl;
        etcd_body_t b  = {NULL, 0, 0};
        long code      = 0;
        CURLcode rc;
        json_error_t jerr;
        json_t *resp;

        snprintf(url, sizeof(url), "%s%s", e->url[idx], path);
        curl_easy_reset(e->curl);
        errbuf[0] = '\0';
        curl_easy_setopt(e->curl, CURLOPT_URL, url);
        curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)MC_MIN(MC_ETCD_CONNECT_MS, e->timeout_ms));
        curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
        curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, etcd_write_cb);
        curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &b);
        rc = curl_easy_perform(e->curl);
        if (rc != CURLE_OK) {
            mc_set_error_detail("etcd %s at %s: %s", path, e->url[idx],
                                errbuf[0] ? errbuf : curl_easy_strerror(rc));
            mc_debug("%s", mc_last_error_detail());
            free(b.data);
            continue;
        }
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &code);
        resp = (b.data != NULL) ? json_loadb(b.data, b.len, 0, &jerr) : NULL;
        free(b.data);
        if (code >= 500) {
            json_t *msg = json_is_object(resp) ? json_object_get(resp, "error") : NULL;
            mc_set_error_detail("etcd %s at %s answered HTTP %ld: %s", path, e->url[idx], code,
                                json_is_string(msg) ? json_string_value(msg) : "");
            mc_debug("%s", mc_last_error_detail());
            json_decref(resp);
            continue;
        }
        e->cur = idx;
        if ((code >= 200) && (code < 300) && json_is_object(resp)) {
            *resp_p = resp;
            st      = MC_OK;
        } else if (json_is_object(resp)) {
            json_t *c   = json_object_get(resp, "code");
            json_t *msg = json_object_get(resp, "error");
            st = (json_is_integer(c) && (json_integer_value(c) == 5)) ? MC_ETCD_KEY_NOT_EXIST
                                                                      : MC_ETCD_OPERATION_ERROR;
            mc_set_error_detail("etcd %s at %s: %s", path, e->url[idx],
                                json_is_string(msg) ? json_string_value(msg) : "error");
            json_decref(resp);
        } else {
            mc_set_error_detail("etcd %s at %s answered HTTP %ld with no JSON", path,
                                e->url[idx], code);
            json_decref(resp);
        }
        break;
    }
    pthread_mutex_unlock(&e->lock);
    curl_slist_free_all(hdrs);
    free(payload);
    return st;
}

/* An int64 field: a JSON string of digits, or a number; absent = 0. */
static int64_t j_i64(json_t *o, const char *name)
{
    json_t *v = json_is_object(o) ? json_object_get(o, name) : NULL;
    int64_t x = 0;
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_string(v) && (mc_parse_i64(json_string_value(v), &x) == 0))
        return x;
    return 0;
}

static void i64_str(int64_t v, char out[24])
{
    snprintf(out, 24, "%" PRId64, v);
}

/* A "kvs" entry into @p kv. */
static mc_status_t kv_from_json(json_t *j, mc_etcd_kv_t *kv)
{
    json_t *val = json_object_get(j, "value");
    memset(kv, 0, sizeof(*kv));
    kv->create_revision = j_i64(j, "create_revision");
    kv->mod_revision    = j_i64(j, "mod_revision");
    kv->lease           = j_i64(j, "lease");
    if (val == NULL) { /* an empty value is left out */
        kv->value = calloc(1, 1);
        return (kv->value != NULL) ? MC_OK : MC_INTERNAL_ERROR;
    }
    if (!json_is_string(val) ||
        (mc_etcd_b64_decode(json_string_value(val), json_string_length(val), &kv->value,
                            &kv->len) != 0)) {
        mc_set_error_detail("etcd answered a value that is not base64");
        return MC_ETCD_OPERATION_ERROR;
    }
    return MC_OK;
}

/* The first of "kvs" of a range answer, or MC_ETCD_KEY_NOT_EXIST. */
static mc_status_t first_kv(json_t *range, const char *key, mc_etcd_kv_t *kv_p)
{
    json_t *kvs = json_object_get(range, "kvs");
    if (!json_is_array(kvs) || (json_array_size(kvs) == 0)) {
        mc_set_error_detail("etcd key %s does not exist", key);
        return MC_ETCD_KEY_NOT_EXIST;
    }
    return kv_from_json(json_array_get(kvs, 0), kv_p);
}

/* {"key": b64(key)} plus @p extra_value when not NULL. */
static json_t *key_obj(const char *key, const void *val, size_t len, int64_t lease)
{
    char *k = mc_etcd_b64_encode(key, strlen(key));
    char *v = (val != NULL) ? mc_etcd_b64_encode(val, len) : NULL;
    json_t *o = json_object();
    char ls[24];

    if ((k == NULL) || (o == NULL) || ((val != NULL) && (v == NULL)))
        goto fail;
    if (json_object_set_new(o, "key", json_string(k)) != 0)
        goto fail;
    if ((v != NULL) && (json_object_set_new(o, "value", json_string(v)) != 0))
        goto fail;
    if (lease != 0) {
        i64_str(lease, ls);
        if (json_object_set_new(o, "lease", json_string(ls)) != 0)
            goto fail;
    }
    free(k);
    free(v);
    return o;
fail:
    free(k);
    free(v);
    json_decref(o);
    return NULL;
}

static mc_status_t oom(void)
{
    mc_set_error_detail("out of memory building an etcd request");
    return MC_INTERNAL_ERROR;
}

/* ---- KV ------------------------------------------------------------------------- */

mc_status_t mc_etcd_get(mc_etcd_t *e, const char *key, mc_etcd_kv_t *kv_p, int64_t *revision_p)
{
    json_t *req = key_obj(key, NULL, 0, 0), *resp = NULL;
    mc_etcd_kv_t kv;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/kv/range", req, &resp);
    if (st != MC_OK)
        return st;
    if (revision_p != NULL)
        *revision_p = j_i64(json_object_get(resp, "header"), "revision");
    st = first_kv(resp, key, &kv);
    json_decref(resp);
    if (st == MC_OK)
        *kv_p = kv;
    return st;
}

mc_status_t mc_etcd_put(mc_etcd_t *e, const char *key, const void *val, size_t len,
                        int64_t lease)
{
    json_t *req = key_obj(key, val, len, lease), *resp = NULL;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/kv/put", req, &resp);
    json_decref(resp);
    return st;
}

mc_status_t mc_etcd_delete(mc_etcd_t *e, const char *key)
{
    json_t *req = key_obj(key, NULL, 0, 0), *resp = NULL;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/kv/deleterange", req, &resp);
    json_decref(resp);
    return st;
}

/* {"compare":[{key, CREATE EQUAL rev}], "success":[@p op], "failure":[range key]} */
static json_t *txn_on_create(const char *key, int64_t create_rev, const char *op_name, json_t *op)
{
    json_t *cmp = key_obj(key, NULL, 0, 0), *rng = key_obj(key, NULL, 0, 0);
    json_t *txn;
    char rs[24];

    if ((cmp == NULL) || (rng == NULL) || (op == NULL))
        goto fail;
    i64_str(create_rev, rs);
    json_object_set_new(cmp, "result", json_string("EQUAL"));
    json_object_set_new(cmp, "target", json_string("CREATE"));
    json_object_set_new(cmp, "create_revision", json_string(rs));
    txn = json_pack("{s:[o], s:[{s:o}], s:[{s:o}]}", "compare", cmp, "success", op_name, op,
                    "failure", "request_range", rng);
    return txn;
fail:
    json_decref(cmp);
    json_decref(rng);
    json_decref(op);
    return NULL;
}

mc_status_t mc_etcd_create_if_absent(mc_etcd_t *e, const char *key, const void *val, size_t len,
                                     int64_t lease, int *created_p, mc_etcd_kv_t *cur_p)
{
    json_t *req = txn_on_create(key, 0, "request_put", key_obj(key, val, len, lease));
    json_t *resp = NULL, *r0;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/kv/txn", req, &resp);
    if (st != MC_OK)
        return st;
    memset(cur_p, 0, sizeof(*cur_p));
    if (json_is_true(json_object_get(resp, "succeeded"))) {
        /* the put's revision is the key's create revision */
        *created_p           = 1;
        cur_p->create_revision = j_i64(json_object_get(resp, "header"), "revision");
        cur_p->mod_revision    = cur_p->create_revision;
        cur_p->lease           = lease;
        cur_p->value           = malloc(len + 1);
        if (cur_p->value == NULL) {
            json_decref(resp);
            return oom();
        }
        memcpy(cur_p->value, val, len);
        cur_p->value[len] = '\0';
        cur_p->len        = len;
        json_decref(resp);
        return MC_OK;
    }
    *created_p = 0;
    r0 = json_array_get(json_object_get(resp, "responses"), 0);
    st = first_kv(json_object_get(r0, "response_range"), key, cur_p);
    json_decref(resp);
    /* deleted between the compare and the range: the caller tries again */
    return (st == MC_ETCD_KEY_NOT_EXIST) ? MC_ETCD_TRANSACTION_FAIL : st;
}

/* Send a transaction guarded by @p key's create revision: MC_OK when the
 * compare held, MC_ETCD_TRANSACTION_FAIL when not. */
static mc_status_t txn_guard_result(mc_etcd_t *e, json_t *req, const char *key,
                                    int64_t create_revision)
{
    json_t *resp = NULL;
    mc_status_t st = etcd_call(e, "/v3/kv/txn", req, &resp);
    if (st != MC_OK)
        return st;
    st = json_is_true(json_object_get(resp, "succeeded")) ? MC_OK : MC_ETCD_TRANSACTION_FAIL;
    if (st != MC_OK)
        mc_set_error_detail("etcd key %s is not the one created at revision %" PRId64, key,
                            create_revision);
    json_decref(resp);
    return st;
}

mc_status_t mc_etcd_delete_if_created(mc_etcd_t *e, const char *key, int64_t create_revision)
{
    json_t *req = txn_on_create(key, create_revision, "request_delete_range",
                                key_obj(key, NULL, 0, 0));

    if (req == NULL)
        return oom();
    return txn_guard_result(e, req, key, create_revision);
}

/* ---- guarded transactions over gRPC ------------------------------------------------ */

void mc_etcd_use_grpc(mc_etcd_t *e)
{
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    static _Atomic int told         = 0;

    if ((v == NULL) || !(v->features & CURL_VERSION_HTTP2)) {
        if (atomic_exchange(&told, 1) == 0)
            mc_warn("etcd: this libcurl has no HTTP/2: the log's transactions go through "
                    "etcd's JSON gateway");
        return;
    }
    pthread_mutex_lock(&e->lock);
    if (e->gcurl == NULL)
        e->gcurl = curl_easy_init();
    if (e->gcurl != NULL)
        e->grpc = GRPC_TRYING;
    else
        mc_warn("etcd: no libcurl handle for gRPC (out of memory): the log's transactions "
                "go through the JSON gateway");
    pthread_mutex_unlock(&e->lock);
}

int mc_etcd_grpc_active(mc_etcd_t *e)
{
    int on;
    pthread_mutex_lock(&e->lock);
    on = (e->grpc != GRPC_OFF);
    pthread_mutex_unlock(&e->lock);
    return on;
}

/* This handle goes back to the gateway: gRPC has never worked on it, and
 * the gateway answered a transaction that gRPC could not send (@p why). */
static void grpc_give_up(mc_etcd_t *e, const char *why)
{
    static _Atomic int warned = 0;
    pthread_mutex_lock(&e->lock);
    if (e->grpc == GRPC_TRYING)
        e->grpc = GRPC_OFF;
    pthread_mutex_unlock(&e->lock);
    if (atomic_exchange(&warned, 1) == 0)
        mc_warn("etcd at %s does not answer gRPC (%s): guarded transactions go through its "
                "JSON gateway", e->spec, why);
}

/* The answer of a Txn that came back with grpc-status 0. */
static mc_status_t grpc_txn_answer(const mc_textbuf_t *b, const char *url, const char *key,
                                   int64_t create_revision)
{
    const uint8_t *msg;
    size_t len;
    mc_etcd_pb_txn_resp_t r;

    if ((b->data == NULL) ||
        (mc_etcd_grpc_unframe((const uint8_t *)b->data, b->len, &msg, &len) != 0) ||
        (mc_etcd_pb_txn_resp_decode(msg, len, &r) != 0)) {
        mc_set_error_detail("etcd at %s answered a Txn with a malformed message (%zu bytes)",
                            url, b->len);
        return MC_ETCD_OPERATION_ERROR;
    }
    if (!r.succeeded) {
        mc_set_error_detail("etcd key %s is not the one created at revision %" PRId64, key,
                            create_revision);
        return MC_ETCD_TRANSACTION_FAIL;
    }
    return MC_OK;
}

/* What txn_grpc leaves to the gateway. */
enum {
    GRPC_ANSWERED, /* its status is the answer */
    GRPC_USE_JSON, /* the handle does not use gRPC (any more) */
    GRPC_UNSURE,   /* gRPC never worked and got no answer: if the gateway
                    * answers, it is an etcd without gRPC */
};

/* The guarded transaction over gRPC.  A retry of it (over gRPC or the
 * gateway) is harmless: the same puts and deletes under the same guard. */
static mc_status_t txn_grpc(mc_etcd_t *e, const char *guard_key, int64_t create_revision,
                            const mc_etcd_op_t *ops, size_t nops, int *fallback_p)
{
    mc_status_t st = MC_ETCD_OPERATION_ERROR;

    *fallback_p = GRPC_ANSWERED;
    pthread_mutex_lock(&e->lock);
    if (e->grpc == GRPC_OFF) {
        pthread_mutex_unlock(&e->lock);
        *fallback_p = GRPC_USE_JSON;
        return MC_OK;
    }
    mc_buf_reset(&e->greq);
    mc_etcd_pb_txn_guarded_encode(&e->greq, guard_key, create_revision, ops, nops);
    if (e->greq.oom) {
        mc_buf_cleanup(&e->greq);
        mc_buf_init(&e->greq);
        pthread_mutex_unlock(&e->lock);
        return oom();
    }
    *fallback_p = (e->grpc == GRPC_TRYING) ? GRPC_UNSURE : GRPC_ANSWERED;
    for (unsigned tries = 0; tries < e->nurl; tries++) {
        unsigned idx     = (e->cur + tries) % e->nurl;
        mc_textbuf_t b   = {NULL, 0, 0};
        int gst          = 0;
        int live         = (e->glive == (int)idx + 1);
        mc_etcd_grpc_rc_t rc = mc_etcd_grpc_unary(
            e->gcurl, e->url[idx], "/etcdserverpb.KV/Txn", e->timeout_ms,
            MC_MIN(MC_ETCD_CONNECT_MS, e->timeout_ms), e->greq.data, e->greq.len, &b, &gst,
            &live);
        e->glive = live ? (int)idx + 1 : 0;
        if ((rc == MC_ETCD_GRPC_TRANSPORT) || (rc == MC_ETCD_GRPC_NOT_GRPC) ||
            ((rc == MC_ETCD_GRPC_STATUS) &&
             ((gst == MC_GRPC_UNAVAILABLE) || (gst == MC_GRPC_DEADLINE_EXCEEDED)))) {
            /* no answer, or a member that cannot commit: the next one */
            mc_debug("%s", mc_last_error_detail());
            free(b.data);
            continue;
        }
        e->cur      = idx;
        *fallback_p = GRPC_ANSWERED;
        if ((rc == MC_ETCD_GRPC_STATUS) && (gst == MC_GRPC_UNIMPLEMENTED) &&
            (e->grpc == GRPC_TRYING)) {
            *fallback_p = GRPC_UNSURE; /* a gRPC server without etcd's KV service */
        } else if (rc == MC_ETCD_GRPC_STATUS) {
            st = (gst == MC_GRPC_NOT_FOUND) ? MC_ETCD_KEY_NOT_EXIST : MC_ETCD_OPERATION_ERROR;
        } else {
            static _Atomic int told = 0;
            if ((e->grpc == GRPC_TRYING) && (atomic_exchange(&told, 1) == 0))
                mc_info("etcd: guarded transactions go over etcd's gRPC API (HTTP/2) at %s",
                        e->url[idx]);
            e->grpc = GRPC_WORKS;
            st      = grpc_txn_answer(&b, e->url[idx], guard_key, create_revision);
        }
        free(b.data);
        break;
    }
    if (e->greq.cap > (4u << 20)) {
        mc_buf_cleanup(&e->greq);
        mc_buf_init(&e->greq);
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

static mc_status_t txn_guarded_json(mc_etcd_t *e, const char *guard_key,
                                    int64_t create_revision, const mc_etcd_op_t *ops,
                                    size_t nops)
{
    json_t *cmp = key_obj(guard_key, NULL, 0, 0), *succ = json_array(), *req = NULL;
    char rs[24];

    if ((cmp == NULL) || (succ == NULL))
        goto fail;
    for (size_t i = 0; i < nops; i++) {
        json_t *o = key_obj(ops[i].key, ops[i].del ? NULL : ops[i].val, ops[i].len, 0);
        json_t *w;
        if (o == NULL)
            goto fail;
        if (ops[i].del && (ops[i].range_end != NULL)) {
            char *re = mc_etcd_b64_encode(ops[i].range_end, strlen(ops[i].range_end));
            if ((re == NULL) || (json_object_set_new(o, "range_end", json_string(re)) != 0)) {
                free(re);
                json_decref(o);
                goto fail;
            }
            free(re);
        }
        w = json_pack("{s:o}", ops[i].del ? "request_delete_range" : "request_put", o);
        if ((w == NULL) || (json_array_append_new(succ, w) != 0))
            goto fail;
    }
    i64_str(create_revision, rs);
    json_object_set_new(cmp, "result", json_string("EQUAL"));
    json_object_set_new(cmp, "target", json_string("CREATE"));
    json_object_set_new(cmp, "create_revision", json_string(rs));
    req = json_pack("{s:[o], s:o}", "compare", cmp, "success", succ);
    if (req == NULL)
        return oom();
    return txn_guard_result(e, req, guard_key, create_revision);
fail:
    json_decref(cmp);
    json_decref(succ);
    return oom();
}

mc_status_t mc_etcd_txn_guarded(mc_etcd_t *e, const char *guard_key, int64_t create_revision,
                                const mc_etcd_op_t *ops, size_t nops)
{
    int fallback;
    char why[256];
    mc_status_t st = txn_grpc(e, guard_key, create_revision, ops, nops, &fallback);

    if (fallback == GRPC_ANSWERED)
        return st;
    if (fallback == GRPC_USE_JSON)
        return txn_guarded_json(e, guard_key, create_revision, ops, nops);
    snprintf(why, sizeof(why), "%s", mc_last_error_detail());
    st = txn_guarded_json(e, guard_key, create_revision, ops, nops);
    if ((st == MC_OK) || (st == MC_ETCD_TRANSACTION_FAIL))
        grpc_give_up(e, why); /* the gateway answered where gRPC did not */
    return st;
}

mc_status_t mc_etcd_range(mc_etcd_t *e, const char *key, const char *range_end, int64_t limit,
                          mc_etcd_range_cb cb, void *arg, int *more_p)
{
    json_t *req = key_obj(key, NULL, 0, 0), *resp = NULL, *kvs;
    char *re = mc_etcd_b64_encode(range_end, strlen(range_end));
    char ls[24];
    mc_status_t st = MC_OK;

    if ((req == NULL) || (re == NULL) ||
        (json_object_set_new(req, "range_end", json_string(re)) != 0)) {
        free(re);
        json_decref(req);
        return oom();
    }
    free(re);
    if (limit > 0) {
        i64_str(limit, ls);
        json_object_set_new(req, "limit", json_string(ls));
    }
    st = etcd_call(e, "/v3/kv/range", req, &resp);
    if (st != MC_OK)
        return st;
    if (more_p != NULL)
        *more_p = json_is_true(json_object_get(resp, "more"));
    kvs = json_object_get(resp, "kvs");
    for (size_t i = 0; json_is_array(kvs) && (i < json_array_size(kvs)); i++) {
        json_t *j  = json_array_get(kvs, i);
        json_t *jk = json_object_get(j, "key");
        char *k    = NULL;
        size_t klen = 0;
        mc_etcd_kv_t kv;
        int stop;
        if (!json_is_string(jk) ||
            (mc_etcd_b64_decode(json_string_value(jk), json_string_length(jk), &k, &klen) != 0)) {
            mc_set_error_detail("etcd answered a key that is not base64");
            st = MC_ETCD_OPERATION_ERROR;
            break;
        }
        st = kv_from_json(j, &kv);
        if (st != MC_OK) {
            free(k);
            break;
        }
        stop = cb(arg, k, klen, kv.value, kv.len);
        free(k);
        mc_etcd_kv_cleanup(&kv);
        if (stop)
            break;
    }
    json_decref(resp);
    return st;
}

/* ---- leases ----------------------------------------------------------------------- */

static json_t *lease_obj(int64_t id)
{
    char s[24];
    i64_str(id, s);
    return json_pack("{s:s}", "ID", s);
}

mc_status_t mc_etcd_lease_grant(mc_etcd_t *e, int64_t ttl_s, int64_t *id_p, int64_t *ttl_p)
{
    json_t *req = json_pack("{s:I}", "TTL", (json_int_t)ttl_s), *resp = NULL;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/lease/grant", req, &resp);
    if (st != MC_OK)
        return st;
    *id_p = j_i64(resp, "ID");
    if (ttl_p != NULL)
        *ttl_p = j_i64(resp, "TTL");
    json_decref(resp);
    if (*id_p == 0) {
        mc_set_error_detail("etcd granted no lease");
        return MC_ETCD_OPERATION_ERROR;
    }
    return MC_OK;
}

mc_status_t mc_etcd_lease_keepalive(mc_etcd_t *e, int64_t id, int64_t *ttl_p)
{
    json_t *req = lease_obj(id), *resp = NULL;
    int64_t ttl;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/lease/keepalive", req, &resp);
    if (st != MC_OK)
        return st;
    /* the stream's one message is {"result": {..., "TTL": "5"}}; an expired
     * lease has no TTL (0) */
    ttl = j_i64(json_object_get(resp, "result"), "TTL");
    json_decref(resp);
    if (ttl <= 0) {
        mc_set_error_detail("etcd lease %" PRId64 " has expired", id);
        return MC_ETCD_KEY_NOT_EXIST;
    }
    *ttl_p = ttl;
    return MC_OK;
}

mc_status_t mc_etcd_lease_revoke(mc_etcd_t *e, int64_t id)
{
    json_t *req = lease_obj(id), *resp = NULL;
    mc_status_t st;

    if (req == NULL)
        return oom();
    st = etcd_call(e, "/v3/lease/revoke", req, &resp);
    json_decref(resp);
    return (st == MC_ETCD_KEY_NOT_EXIST) ? MC_OK : st;
}

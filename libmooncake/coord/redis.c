/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redis client on hiredis's blocking API (redis.h).
 *
 * Every command is sent with redisCommandArgv (binary safe, no format
 * string built from data).  A hiredis context whose I/O failed is
 * unusable, so any failure drops it; the next command connects anew with
 * AUTH and SELECT.  hiredis's own timeouts (connect and SO_RCVTIMEO /
 * SO_SNDTIMEO) bound every call, which is what lets the master's election
 * thread notice a dead redis within its lease.
 *
 * The connection-string parser and the key builder do not need hiredis and
 * are always built (a build without hiredis still says why a string is
 * wrong before it says that redis is missing).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#ifdef MC_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "common/log.h"
#include "common/util.h"
#include "coord/redis.h"

/* ---- parsing (no hiredis) --------------------------------------------------------- */

static mc_status_t parse_port(const char *conn, const char *s, size_t len, uint16_t *port_p)
{
    unsigned long v = 0;

    if ((len == 0) || (len > 5))
        goto bad;
    for (size_t i = 0; i < len; i++) {
        if ((s[i] < '0') || (s[i] > '9'))
            goto bad;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if ((v == 0) || (v > 65535))
        goto bad;
    *port_p = (uint16_t)v;
    return MC_OK;
bad:
    mc_set_error_detail("redis connection string \"%s\": the port must be 1 to 65535", conn);
    return MC_INVALID_PARAMS;
}

mc_status_t mc_redis_parse_connstring(const char *conn, char *host, size_t host_cap,
                                      uint16_t *port_p)
{
    const char *s, *end, *slash, *hend, *colon;
    uint16_t port = MC_REDIS_DEFAULT_PORT;
    size_t hlen;

    if (conn == NULL)
        conn = "";
    s = conn;
    if (strncasecmp(s, "redis://", 8) == 0)
        s += 8;
    end   = s + strlen(s);
    slash = strchr(s, '/');
    if (slash != NULL) {
        /* "host:port/" is accepted; anything after the '/' is a path */
        if (slash + 1 != end) {
            mc_set_error_detail("redis connection string \"%s\": a path (\"%s\") is not "
                                "supported; use [redis://]host[:port]",
                                conn, slash);
            return MC_INVALID_PARAMS;
        }
        end = slash;
    }
    if (s == end) {
        mc_set_error_detail("redis connection string \"%s\" has no host; use "
                            "[redis://]host[:port]",
                            conn);
        return MC_INVALID_PARAMS;
    }
    if (*s == '[') {
        hend = memchr(s, ']', (size_t)(end - s));
        if ((hend == NULL) || (hend == s + 1)) {
            mc_set_error_detail("redis connection string \"%s\": an IPv6 address needs "
                                "\"[addr]:port\"",
                                conn);
            return MC_INVALID_PARAMS;
        }
        if (hend + 1 != end) {
            if (hend[1] != ':')
                goto junk;
            if (parse_port(conn, hend + 2, (size_t)(end - hend - 2), &port) != MC_OK)
                return MC_INVALID_PARAMS;
        }
        s++;
        hlen = (size_t)(hend - s);
    } else {
        colon = memchr(s, ':', (size_t)(end - s));
        if ((colon != NULL) && (memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL)) {
            mc_set_error_detail("redis connection string \"%s\": an IPv6 address must be "
                                "written \"[addr]:port\"",
                                conn);
            return MC_INVALID_PARAMS;
        }
        if (colon != NULL) {
            if (parse_port(conn, colon + 1, (size_t)(end - colon - 1), &port) != MC_OK)
                return MC_INVALID_PARAMS;
            end = colon;
        }
        hlen = (size_t)(end - s);
        if (hlen == 0) {
            mc_set_error_detail("redis connection string \"%s\" has no host", conn);
            return MC_INVALID_PARAMS;
        }
    }
    if (hlen >= host_cap) {
        mc_set_error_detail("redis connection string \"%s\": the host is too long", conn);
        return MC_INVALID_PARAMS;
    }
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    *port_p    = port;
    return MC_OK;
junk:
    mc_set_error_detail("redis connection string \"%s\" is not [redis://]host[:port]", conn);
    return MC_INVALID_PARAMS;
}

int mc_redis_cluster_key(const char *cluster, const char *suffix, char *out, size_t cap)
{
    char c[256];
    size_t n = strlen(cluster);

    while ((n > 0) && (cluster[n - 1] == '/'))
        n--;
    if (n >= sizeof(c))
        return -1;
    for (size_t i = 0; i < n; i++)
        c[i] = ((cluster[i] == '{') || (cluster[i] == '}')) ? '_' : cluster[i];
    c[n] = '\0';
    return (snprintf(out, cap, "mooncake-store/{%s}/%s", c, suffix) < (int)cap) ? 0 : -1;
}

#ifndef MC_HAVE_HIREDIS

/* ---- a build without hiredis ---------------------------------------------------- */

int mc_redis_available(void)
{
    return 0;
}

static mc_status_t no_redis(void)
{
    mc_set_error_detail("redis is not available: this build has no hiredis "
                        "(configure --with-redis, with libhiredis-dev installed)");
    return MC_UNAVAILABLE_IN_CURRENT_MODE;
}

mc_status_t mc_redis_create(const char *conn, int timeout_ms, mc_redis_t **r_p)
{
    char host[256];
    uint16_t port;
    (void)timeout_ms;
    (void)r_p;
    if (mc_redis_parse_connstring(conn, host, sizeof(host), &port) != MC_OK)
        return MC_INVALID_PARAMS;
    return no_redis();
}

void mc_redis_destroy(mc_redis_t *r)
{
    (void)r;
}

const char *mc_redis_endpoint(const mc_redis_t *r)
{
    (void)r;
    return "";
}

mc_status_t mc_redis_get(mc_redis_t *r, const char *key, char **val_p, size_t *len_p)
{
    (void)r, (void)key, (void)val_p, (void)len_p;
    return no_redis();
}

mc_status_t mc_redis_set(mc_redis_t *r, const char *key, const void *val, size_t len)
{
    (void)r, (void)key, (void)val, (void)len;
    return no_redis();
}

mc_status_t mc_redis_del(mc_redis_t *r, const char *key)
{
    (void)r, (void)key;
    return no_redis();
}

mc_status_t mc_redis_view_read(mc_redis_t *r, const char *key, char *addr, size_t addr_cap,
                               int64_t *version_p, char *owner, size_t owner_cap)
{
    (void)r, (void)key, (void)addr, (void)addr_cap, (void)version_p, (void)owner,
        (void)owner_cap;
    return no_redis();
}

mc_status_t mc_redis_eval_int(mc_redis_t *r, const char *script, int nkeys,
                              const char *const *keys, int nargs, const char *const *args,
                              int64_t *result_p)
{
    (void)r, (void)script, (void)nkeys, (void)keys, (void)nargs, (void)args, (void)result_p;
    return no_redis();
}

#else /* MC_HAVE_HIREDIS */

/* ---- the handle --------------------------------------------------------------------- */

struct mc_redis {
    pthread_mutex_t lock;
    redisContext *ctx; /* NULL until connected, and after an I/O error */
    char host[256];
    uint16_t port;
    char endpoint[300];
    struct timeval timeout;
    char *username; /* NULL: AUTH with the password alone */
    char *password; /* NULL: no AUTH */
    unsigned db;
};

int mc_redis_available(void)
{
    return 1;
}

mc_status_t mc_redis_create(const char *conn, int timeout_ms, mc_redis_t **r_p)
{
    const char *pass = getenv("MC_REDIS_PASSWORD");
    const char *user = getenv("MC_REDIS_USERNAME");
    uint64_t db      = 0;
    mc_redis_t *r;

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    if (mc_redis_parse_connstring(conn, r->host, sizeof(r->host), &r->port) != MC_OK) {
        free(r);
        return MC_INVALID_PARAMS;
    }
    if (mc_env_u64("MC_REDIS_DB_INDEX", 0, 255, &db) != 0) {
        free(r);
        return MC_INVALID_PARAMS;
    }
    r->db = (unsigned)db;
    if ((pass != NULL) && (*pass != '\0')) {
        r->password = mc_strdup(pass);
        if ((user != NULL) && (*user != '\0'))
            r->username = mc_strdup(user);
        if ((r->password == NULL) || ((user != NULL) && (*user != '\0') && (r->username == NULL))) {
            mc_redis_destroy(r);
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
    }
    if (timeout_ms <= 0)
        timeout_ms = MC_REDIS_DEFAULT_TIMEOUT_MS;
    r->timeout.tv_sec  = timeout_ms / 1000;
    r->timeout.tv_usec = (timeout_ms % 1000) * 1000;
    snprintf(r->endpoint, sizeof(r->endpoint), strchr(r->host, ':') ? "[%s]:%u" : "%s:%u",
             r->host, (unsigned)r->port);
    pthread_mutex_init(&r->lock, NULL);
    *r_p = r;
    return MC_OK;
}

void mc_redis_destroy(mc_redis_t *r)
{
    if (r == NULL)
        return;
    if (r->ctx != NULL)
        redisFree(r->ctx);
    pthread_mutex_destroy(&r->lock);
    free(r->username);
    free(r->password);
    free(r);
}

const char *mc_redis_endpoint(const mc_redis_t *r)
{
    return r->endpoint;
}

/* Drop the connection after an I/O error; the detail names @p what. */
static mc_status_t do_broken(mc_redis_t *r, const char *what)
{
    mc_set_error_detail("redis %s: %s failed: %s", r->endpoint, what,
                        (r->ctx != NULL && r->ctx->errstr[0]) ? r->ctx->errstr
                                                              : "no answer");
    if (r->ctx != NULL)
        redisFree(r->ctx);
    r->ctx = NULL;
    return MC_ETCD_OPERATION_ERROR;
}

/* One command on a connected context (lock held); the reply or NULL with
 * the connection dropped and the detail set. */
static redisReply *do_argv(mc_redis_t *r, int argc, const char **argv, const size_t *lens,
                           const char *what)
{
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, lens);
    if (rep == NULL) {
        (void)do_broken(r, what);
        return NULL;
    }
    return rep;
}

/* Connect, AUTH and SELECT (lock held). */
static mc_status_t do_connect(mc_redis_t *r)
{
    const char *argv[3];
    size_t lens[3];
    char dbs[16];
    redisReply *rep;
    int argc = 0;

    if (r->ctx != NULL)
        return MC_OK;
    r->ctx = redisConnectWithTimeout(r->host, r->port, r->timeout);
    if ((r->ctx == NULL) || r->ctx->err)
        return do_broken(r, "connect");
    if (redisSetTimeout(r->ctx, r->timeout) != REDIS_OK)
        return do_broken(r, "setting the timeout");
    if (r->password != NULL) {
        argv[argc++] = "AUTH";
        if (r->username != NULL)
            argv[argc++] = r->username;
        argv[argc++] = r->password;
        for (int i = 0; i < argc; i++)
            lens[i] = strlen(argv[i]);
        rep = do_argv(r, argc, argv, lens, "AUTH");
        if (rep == NULL)
            return MC_ETCD_OPERATION_ERROR;
        if (rep->type == REDIS_REPLY_ERROR) {
            mc_set_error_detail("redis %s: AUTH refused (MC_REDIS_PASSWORD/MC_REDIS_USERNAME): %s",
                                r->endpoint, rep->str);
            freeReplyObject(rep);
            redisFree(r->ctx);
            r->ctx = NULL;
            return MC_ETCD_OPERATION_ERROR;
        }
        freeReplyObject(rep);
    }
    if (r->db != 0) {
        snprintf(dbs, sizeof(dbs), "%u", r->db);
        argv[0] = "SELECT";
        argv[1] = dbs;
        lens[0] = 6;
        lens[1] = strlen(dbs);
        rep     = do_argv(r, 2, argv, lens, "SELECT");
        if (rep == NULL)
            return MC_ETCD_OPERATION_ERROR;
        if (rep->type == REDIS_REPLY_ERROR) {
            mc_set_error_detail("redis %s: SELECT %u (MC_REDIS_DB_INDEX) refused: %s",
                                r->endpoint, r->db, rep->str);
            freeReplyObject(rep);
            redisFree(r->ctx);
            r->ctx = NULL;
            return MC_ETCD_OPERATION_ERROR;
        }
        freeReplyObject(rep);
    }
    return MC_OK;
}

/*
 * hiredis writes with write(2): a redis that went away would raise
 * SIGPIPE in a host program that does not ignore it (the library must not
 * kill its caller).  Block it on this thread around the call and swallow
 * one it raised; a SIGPIPE already pending for other reasons is left be.
 */
typedef struct pipe_guard {
    sigset_t old;
    int was_pending;
} pipe_guard_t;

static void pipe_block(pipe_guard_t *g)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void pipe_restore(pipe_guard_t *g)
{
    static const struct timespec zero = {0, 0};
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (!g->was_pending && sigismember(&pending, SIGPIPE))
        while ((sigtimedwait(&set, NULL, &zero) < 0) && (errno == EINTR))
            ;
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/*
 * Run one command, connecting first when needed: *rep_p is a reply that
 * is not an error (to free), or the status says why there is none.
 */
static mc_status_t run(mc_redis_t *r, int argc, const char **argv, const size_t *lens,
                       redisReply **rep_p)
{
    redisReply *rep;
    pipe_guard_t g;
    mc_status_t st;

    pthread_mutex_lock(&r->lock);
    pipe_block(&g);
    st = do_connect(r);
    if (st != MC_OK) {
        pipe_restore(&g);
        pthread_mutex_unlock(&r->lock);
        return st;
    }
    rep = do_argv(r, argc, argv, lens, argv[0]);
    pipe_restore(&g);
    pthread_mutex_unlock(&r->lock);
    if (rep == NULL)
        return MC_ETCD_OPERATION_ERROR;
    if (rep->type == REDIS_REPLY_ERROR) {
        mc_set_error_detail("redis %s: %s refused: %s", r->endpoint, argv[0], rep->str);
        freeReplyObject(rep);
        return MC_ETCD_OPERATION_ERROR;
    }
    *rep_p = rep;
    return MC_OK;
}

mc_status_t mc_redis_get(mc_redis_t *r, const char *key, char **val_p, size_t *len_p)
{
    const char *argv[2] = {"GET", key};
    size_t lens[2]      = {3, strlen(key)};
    redisReply *rep;
    mc_status_t st = run(r, 2, argv, lens, &rep);
    char *v;

    if (st != MC_OK)
        return st;
    if (rep->type == REDIS_REPLY_NIL) {
        freeReplyObject(rep);
        mc_set_error_detail("redis %s: no key %s", r->endpoint, key);
        return MC_ETCD_KEY_NOT_EXIST;
    }
    if (rep->type != REDIS_REPLY_STRING) {
        freeReplyObject(rep);
        mc_set_error_detail("redis %s: key %s is not a string", r->endpoint, key);
        return MC_ETCD_OPERATION_ERROR;
    }
    v = malloc(rep->len + 1);
    if (v == NULL) {
        freeReplyObject(rep);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    memcpy(v, rep->str, rep->len);
    v[rep->len] = '\0';
    if (len_p != NULL)
        *len_p = rep->len;
    *val_p = v;
    freeReplyObject(rep);
    return MC_OK;
}

mc_status_t mc_redis_set(mc_redis_t *r, const char *key, const void *val, size_t len)
{
    const char *argv[3] = {"SET", key, val};
    size_t lens[3]      = {3, strlen(key), len};
    redisReply *rep;
    mc_status_t st = run(r, 3, argv, lens, &rep);
    if (st == MC_OK)
        freeReplyObject(rep);
    return st;
}

mc_status_t mc_redis_del(mc_redis_t *r, const char *key)
{
    const char *argv[2] = {"DEL", key};
    size_t lens[2]      = {3, strlen(key)};
    redisReply *rep;
    mc_status_t st = run(r, 2, argv, lens, &rep);
    if (st == MC_OK)
        freeReplyObject(rep);
    return st;
}

/* Copy a bulk string reply into @p out; -1 when it does not fit. */
static int copy_str(const redisReply *e, char *out, size_t cap)
{
    if (e->len >= cap)
        return -1;
    memcpy(out, e->str, e->len);
    out[e->len] = '\0';
    return 0;
}

mc_status_t mc_redis_view_read(mc_redis_t *r, const char *key, char *addr, size_t addr_cap,
                               int64_t *version_p, char *owner, size_t owner_cap)
{
    const char *argv[5] = {"HMGET", key, "leader_address", "view_version", "owner_token"};
    size_t lens[5];
    redisReply *rep;
    char ver[32];
    int present = 0;
    int64_t v;
    mc_status_t st;

    for (int i = 0; i < 5; i++)
        lens[i] = strlen(argv[i]);
    st = run(r, 5, argv, lens, &rep);
    if (st != MC_OK)
        return st;
    if ((rep->type != REDIS_REPLY_ARRAY) || (rep->elements != 3)) {
        freeReplyObject(rep);
        mc_set_error_detail("redis %s: HMGET %s: unexpected answer", r->endpoint, key);
        return MC_ETCD_OPERATION_ERROR;
    }
    for (size_t i = 0; i < 3; i++)
        present += (rep->element[i]->type == REDIS_REPLY_STRING);
    if (present == 0) {
        freeReplyObject(rep);
        mc_set_error_detail("redis %s has no leader under %s", r->endpoint, key);
        return MC_ETCD_KEY_NOT_EXIST;
    }
    st = MC_ETCD_OPERATION_ERROR;
    if (present != 3) {
        mc_set_error_detail("redis %s: the leader record %s is partial (%d of 3 fields)",
                            r->endpoint, key, present);
    } else if ((copy_str(rep->element[0], addr, addr_cap) != 0) ||
               (copy_str(rep->element[1], ver, sizeof(ver)) != 0) ||
               (mc_parse_i64(ver, &v) != 0) || (v <= 0) ||
               ((owner != NULL) && (copy_str(rep->element[2], owner, owner_cap) != 0))) {
        mc_set_error_detail("redis %s: the leader record %s does not parse", r->endpoint, key);
    } else {
        *version_p = v;
        st         = MC_OK;
    }
    freeReplyObject(rep);
    return st;
}

mc_status_t mc_redis_eval_int(mc_redis_t *r, const char *script, int nkeys,
                              const char *const *keys, int nargs, const char *const *args,
                              int64_t *result_p)
{
    const char *argv[16];
    size_t lens[16];
    char nk[16];
    int argc = 0;
    redisReply *rep;
    mc_status_t st;

    if ((nkeys < 0) || (nargs < 0) || (3 + nkeys + nargs > 16)) {
        mc_set_error_detail("redis EVAL: too many keys or arguments");
        return MC_INVALID_PARAMS;
    }
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[argc++] = "EVAL";
    argv[argc++] = script;
    argv[argc++] = nk;
    for (int i = 0; i < nkeys; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[argc++] = args[i];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    st = run(r, argc, argv, lens, &rep);
    if (st != MC_OK)
        return st;
    if (rep->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(rep);
        mc_set_error_detail("redis %s: a script answered something else than an integer",
                            r->endpoint);
        return MC_ETCD_OPERATION_ERROR;
    }
    *result_p = (int64_t)rep->integer;
    freeReplyObject(rep);
    return MC_OK;
}

#endif /* MC_HAVE_HIREDIS */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connections to mooncake_master and the pool that lends them to threads.
 *
 * The single-key path (one GET_REPLICA_LIST, one PUT_START...) is latency
 * bound, so a call is done on the calling thread with blocking socket I/O:
 * no hand-off to an I/O thread, TCP_NODELAY, one send for the whole request
 * and two reads (header, body) for the response.  The buffers of a
 * connection are reused from call to call; only an unusually large
 * response (a big batch) is released when the connection is returned, so
 * an idle pool does not pin megabytes.
 *
 * Hazards handled here: a master that dies (EOF/ECONNRESET: the connection
 * is broken and its idle siblings are dropped, because a restarted master
 * has forgotten them all), a master that hangs (SO_RCVTIMEO/SO_SNDTIMEO of
 * io_timeout_ms: MC_RPC_TIMEOUT), and a hostile or confused peer (header
 * checked against magic, version, direction, opcode and request id; the
 * body bounded by MC_WIRE_MAX_BODY; decoding bounds-checked by wire.c).
 *
 * May call: libmooncake's wire/, coord/ (etcd, redis) and common/ only:
 * every folder of the store calls it, it calls none of them.
 */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/log.h"
#include "coord/etcd.h"
#include "coord/redis.h"
#include "store/master_client.h"

#define MC_MASTER_DEFAULT_PORT 50051
#define MC_MASTER_CONNECT_TIMEOUT_MS 3000
/* Buffers above this size are released when a connection goes idle. */
#define MC_MCONN_KEEP_BYTES (1u << 20)

static void pause_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while ((nanosleep(&ts, &ts) != 0) && (errno == EINTR))
        ;
}

/* ---- leader discovery (etcd://, redis://) ------------------------------- */

/*
 * The leader's address as last read from etcd or redis (exactly one of
 * the two handles is set).  Shared by every copy of a target (the pool's,
 * the heartbeat's, the task worker's), so one failed dial sends them all
 * back to the HA backend.
 */
typedef struct mc_master_resolver {
    pthread_mutex_t lock;
    mc_etcd_t *etcd;
    mc_redis_t *redis;
    char key[300];
    char host[256];
    uint16_t port;
    int valid;
    int said_none; /* "No master is available" logged since the last leader seen */
} mc_master_resolver_t;

/* @p scheme_addr is "etcd://<endpoints>" or "redis://<connstring>". */
static mc_status_t resolver_create(const char *scheme_addr, mc_master_resolver_t **r_p)
{
    int redis = strncmp(scheme_addr, "redis://", 8) == 0;
    const char *cluster = getenv("MC_STORE_CLUSTER_ID");
    mc_master_resolver_t *r;
    mc_status_t st;

    if ((cluster == NULL) || (*cluster == '\0'))
        cluster = "mooncake_cluster";
    if (strlen(cluster) > 128) {
        mc_set_error_detail("MC_STORE_CLUSTER_ID is longer than 128 characters");
        return MC_INVALID_PARAMS;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    if (redis) {
        /* upstream's HASH: mooncake-store/{<cluster>}/master_view */
        st = mc_redis_create(scheme_addr + 8, 1000, &r->redis);
        if ((st == MC_OK) && (mc_redis_cluster_key(cluster, "master_view", r->key,
                                                   sizeof(r->key)) != 0)) {
            mc_set_error_detail("MC_STORE_CLUSTER_ID is too long");
            st = MC_INVALID_PARAMS;
        }
    } else {
        st = mc_etcd_create(scheme_addr + 7, 1000, &r->etcd);
        snprintf(r->key, sizeof(r->key), "mooncake-store/%s/master_view", cluster);
    }
    if (st != MC_OK) {
        mc_redis_destroy(r->redis);
        mc_etcd_destroy(r->etcd);
        free(r);
        return st;
    }
    pthread_mutex_init(&r->lock, NULL);
    *r_p = r;
    return MC_OK;
}

/* The leader recorded in redis, read as an etcd key would be (value and
 * term), so resolver_get treats both backends alike. */
static mc_status_t redis_view_get(mc_master_resolver_t *r, mc_etcd_kv_t *kv)
{
    char addr[300];
    int64_t version = 0;
    mc_status_t st  = mc_redis_view_read(r->redis, r->key, addr, sizeof(addr), &version, NULL, 0);
    if (st != MC_OK)
        return st;
    kv->value = mc_strdup(addr);
    if (kv->value == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    kv->len             = strlen(addr);
    kv->create_revision = version;
    return MC_OK;
}

/* The leader's host and port: the cached ones, else read from the HA
 * backend.  MC_UNAVAILABLE_IN_CURRENT_STATUS when it names no leader,
 * MC_RPC_FAIL when it does not answer. */
static mc_status_t resolver_get(mc_master_resolver_t *r, char *host, size_t cap,
                                uint16_t *port_p)
{
    mc_etcd_kv_t kv = {0};
    mc_status_t st;
    uint16_t port = 0;

    pthread_mutex_lock(&r->lock);
    if (r->valid) {
        snprintf(host, cap, "%s", r->host);
        *port_p = r->port;
        pthread_mutex_unlock(&r->lock);
        return MC_OK;
    }
    st = (r->redis != NULL) ? redis_view_get(r, &kv) : mc_etcd_get(r->etcd, r->key, &kv, NULL);
    if (st == MC_ETCD_KEY_NOT_EXIST) {
        /* upstream's words, then which backend and record */
        mc_set_error_detail("No master is available in HA backend: %s %s has no leader under %s",
                            (r->redis != NULL) ? "redis" : "etcd",
                            (r->redis != NULL) ? mc_redis_endpoint(r->redis)
                                               : mc_etcd_endpoints(r->etcd),
                            r->key);
        if (!r->said_none) /* once per outage, not once per retry */
            mc_warn("%s", mc_last_error_detail());
        r->said_none = 1;
        st = MC_UNAVAILABLE_IN_CURRENT_STATUS;
    } else if (st == MC_OK) {
        if ((mc_parse_host_port(kv.value, r->host, sizeof(r->host), &port) != 0) || (port == 0)) {
            mc_set_error_detail("%s key %s holds \"%s\", not host:port",
                                (r->redis != NULL) ? "redis" : "etcd", r->key, kv.value);
            st = MC_UNAVAILABLE_IN_CURRENT_STATUS;
        } else {
            r->port      = port;
            r->valid     = 1;
            r->said_none = 0;
            snprintf(host, cap, "%s", r->host);
            *port_p = port;
            mc_debug("leader master is %s:%u (term %lld)", r->host, (unsigned)port,
                     (long long)kv.create_revision);
        }
    } else {
        st = MC_RPC_FAIL;
    }
    pthread_mutex_unlock(&r->lock);
    mc_etcd_kv_cleanup(&kv);
    return st;
}

/* Forget the cached leader if it is still @p host:@p port (another thread
 * may have found the new one already). */
static void resolver_forget(mc_master_resolver_t *r, const char *host, uint16_t port)
{
    pthread_mutex_lock(&r->lock);
    if (r->valid && (r->port == port) && (strcmp(r->host, host) == 0))
        r->valid = 0;
    pthread_mutex_unlock(&r->lock);
}

void mc_master_target_cleanup(mc_master_target_t *t)
{
    mc_master_resolver_t *r = t->resolver;
    if (r == NULL)
        return;
    mc_etcd_destroy(r->etcd);
    mc_redis_destroy(r->redis);
    pthread_mutex_destroy(&r->lock);
    free(r);
    t->resolver = NULL;
}

/* Milliseconds in [0, MC_MASTER_IO_TIMEOUT_MAX_MS] from the environment
 * variable @p name into *ms_p (kept when unset or empty); MC_INVALID_PARAMS,
 * the detail naming it, for any other value. */
static mc_status_t env_ms(const char *name, int *ms_p)
{
    uint64_t v = (uint64_t)*ms_p;
    if (mc_env_u64(name, 0, MC_MASTER_IO_TIMEOUT_MAX_MS, &v) != 0) {
        mc_error("setup: %s", mc_last_error_detail());
        return MC_INVALID_PARAMS;
    }
    *ms_p = (int)v;
    return MC_OK;
}

/* ---- the target ---------------------------------------------------------- */

mc_status_t mc_master_target_init(mc_master_target_t *t, const char *addr,
                                  mc_uuid_t client_id, const char *tenant_id)
{
    uint16_t port = 0;
    int ha;
    mc_status_t st;

    memset(t, 0, sizeof(*t));
    ha = (addr != NULL) &&
         ((strncmp(addr, "etcd://", 7) == 0) || (strncmp(addr, "redis://", 8) == 0));
    if ((addr != NULL) && (strncmp(addr, "k8s://", 6) == 0)) {
        mc_set_error_detail("master_server_addr \"%s\": k8s:// finds the leader through a "
                            "Lease in a Kubernetes API server; this build has no k8s backend "
                            "(use etcd:// or redis://, docs/ha.md)", addr);
        return MC_UNAVAILABLE_IN_CURRENT_MODE;
    }
    if ((addr != NULL) && (strncmp(addr, "redis://", 8) == 0) && !mc_redis_available()) {
        mc_set_error_detail("master_server_addr \"%s\": this build has no redis client "
                            "(configure --with-redis)", addr);
        return MC_UNAVAILABLE_IN_CURRENT_MODE;
    }
    if ((addr != NULL) && (strstr(addr, "://") != NULL) && !ha) {
        mc_set_error_detail("master_server_addr \"%s\": unknown HA scheme (etcd://, redis:// "
                            "or k8s://)", addr);
        return MC_INVALID_PARAMS;
    }
    if (ha) {
        snprintf(t->host, sizeof(t->host), "%s", addr);
        t->failover_wait_ms = MC_MASTER_FAILOVER_WAIT_MS;
        if (env_ms("MC_STORE_FAILOVER_WAIT_MS", &t->failover_wait_ms) != MC_OK)
            return MC_INVALID_PARAMS;
    } else if ((addr == NULL) ||
               (mc_parse_host_port(addr, t->host, sizeof(t->host), &port) != 0)) {
        mc_set_error_detail("master_server_addr \"%s\" is not \"host:port\"",
                            addr ? addr : "(null)");
        return MC_INVALID_PARAMS;
    }
    t->port = port ? port : MC_MASTER_DEFAULT_PORT;
    if ((tenant_id == NULL) || (*tenant_id == '\0') ||
        (strlen(tenant_id) >= sizeof(t->tenant_id))) {
        mc_set_error_detail("tenant_id must be 1 to %zu bytes", sizeof(t->tenant_id) - 1);
        return MC_INVALID_PARAMS;
    }
    t->connect_timeout_ms = MC_MASTER_CONNECT_TIMEOUT_MS;
    t->io_timeout_ms      = MC_MASTER_IO_TIMEOUT_MS;
    /* The documented knob (store.h rpc_timeout_ms); setup's parameter, when
     * given, overrides it after this. */
    if (env_ms("MC_STORE_RPC_TIMEOUT_MS", &t->io_timeout_ms) != MC_OK)
        return MC_INVALID_PARAMS;
    if (ha) {
        st = resolver_create(addr, &t->resolver);
        if (st != MC_OK)
            return st;
    }
    strcpy(t->tenant_id, tenant_id);
    t->client_id = client_id;
    return MC_OK;
}

/* ---- one connection ----------------------------------------------------- */

static void set_io_timeout(int fd, int ms)
{
    struct timeval tv;
    if (ms <= 0)
        return;
    tv.tv_sec  = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Map a failed socket call to a status; the connection is unusable. */
static mc_status_t io_failed(mc_mconn_t *conn, const char *what)
{
    int err = errno;
    conn->broken = 1;
    if ((err == EAGAIN) || (err == EWOULDBLOCK)) {
        mc_set_error_detail("master did not answer in time (%s)", what);
        mc_warn("master rpc timed out while %s", what);
        return MC_RPC_TIMEOUT;
    }
    if ((err == ECONNRESET) || (err == EPIPE))
        conn->peer_gone = 1;
    mc_set_error_detail("connection to master lost while %s: %s", what, strerror(err));
    mc_debug("master connection failed while %s: %s", what, strerror(err));
    return MC_RPC_FAIL;
}

static mc_status_t mconn_open_at(const mc_master_target_t *t, const char *host, uint16_t port,
                                 mc_mconn_t **conn_p);

/* A dial that failed this way is worth trying again on a leader read anew. */
static int failover_status(mc_status_t st)
{
    return (st == MC_RPC_FAIL) || (st == MC_RPC_TIMEOUT) ||
           (st == MC_UNAVAILABLE_IN_CURRENT_STATUS);
}

mc_status_t mc_mconn_open(const mc_master_target_t *t, mc_mconn_t **conn_p)
{
    uint64_t deadline;
    char host[256];
    uint16_t port = 0;
    mc_status_t st;

    if (t->resolver == NULL)
        return mconn_open_at(t, t->host, t->port, conn_p);
    deadline = mc_now_ms() + (uint64_t)t->failover_wait_ms;
    for (;;) {
        st = resolver_get(t->resolver, host, sizeof(host), &port);
        if (st == MC_OK) {
            st = mconn_open_at(t, host, port, conn_p);
            if (st == MC_OK)
                return MC_OK;
            if (failover_status(st))
                resolver_forget(t->resolver, host, port);
        }
        if (!failover_status(st) || (mc_now_ms() >= deadline))
            return st;
        pause_ms(100);
    }
}

static mc_status_t mconn_open_at(const mc_master_target_t *t, const char *host, uint16_t port,
                                 mc_mconn_t **conn_p)
{
    mc_status_t st = MC_OK;
    mc_mconn_t *conn;
    mc_wire_hello_req_t req;
    mc_wire_hello_resp_t resp;

    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        mc_set_error_detail("out of memory for a master connection");
        return MC_INTERNAL_ERROR;
    }
    mc_buf_init(&conn->wbuf);
    mc_arena_init(&conn->arena);
    conn->next_id = 1;

    conn->fd = mc_tcp_connect(host, port, t->connect_timeout_ms);
    if (conn->fd < 0) {
        mc_set_error_detail("cannot connect to master at %s:%u: %s", host, (unsigned)port,
                            strerror(errno));
        st = MC_RPC_FAIL;
        goto fail;
    }
    set_io_timeout(conn->fd, t->io_timeout_ms);
    if ((t->auth != NULL) &&
        (mc_auth_client_fd(t->auth, conn->fd, MC_AUTH_SVC_RPC, t->tenant_id,
                           t->io_timeout_ms > 0 ? t->io_timeout_ms : MC_MASTER_IO_TIMEOUT_MS) != 0)) {
        char why[300];
        snprintf(why, sizeof(why), "%s", mc_last_error_detail());
        mc_set_error_detail("master at %s:%u: %s", host, (unsigned)port, why);
        st = MC_RPC_FAIL;
        goto fail;
    }

    memset(&req, 0, sizeof(req));
    req.proto_version = MC_WIRE_VERSION;
    req.client_id     = t->client_id;
    req.tenant_id     = mc_str_from_cstr(t->tenant_id);
    st                = mc_master_call_hello(conn, &req, &resp);
    if (st != MC_OK) {
        if (!conn->broken)
            mc_set_error_detail("master at %s:%u refused HELLO: %s", host, (unsigned)port,
                                mc_status_name(st));
        goto fail;
    }
    conn->view_version = resp.view_version;
    if ((t->on_hello != NULL) && ((st = t->on_hello(t->on_token_arg, &resp)) != MC_OK))
        goto fail;
    if (t->on_token != NULL)
        t->on_token(t->on_token_arg, resp.metadata_token);
    *conn_p            = conn;
    return MC_OK;

fail:
    mc_mconn_close(conn);
    return st;
}

void mc_mconn_close(mc_mconn_t *conn)
{
    if (conn == NULL)
        return;
    if (conn->fd >= 0)
        close(conn->fd);
    mc_buf_cleanup(&conn->wbuf);
    mc_arena_cleanup(&conn->arena);
    free(conn->rbuf);
    free(conn->ibuf);
    free(conn);
}

void mc_mconn_shutdown(mc_mconn_t *conn)
{
    if ((conn != NULL) && (conn->fd >= 0))
        shutdown(conn->fd, SHUT_RDWR);
}

void mc_mconn_begin(mc_mconn_t *conn)
{
    mc_buf_reset(&conn->wbuf);
    mc_arena_reset(&conn->arena);
}

uint32_t mc_mconn_take_id(mc_mconn_t *conn)
{
    uint32_t id = conn->next_id++;
    if (conn->next_id == 0)
        conn->next_id = 1;
    return id;
}

mc_status_t mc_mconn_send(mc_mconn_t *conn)
{
    if (conn->broken) {
        mc_set_error_detail("master connection is broken");
        return MC_RPC_FAIL;
    }
    if (conn->wbuf.oom) {
        mc_buf_reset(&conn->wbuf);
        mc_set_error_detail("out of memory encoding a master request");
        return MC_INTERNAL_ERROR;
    }
    if (mc_write_full(conn->fd, conn->wbuf.data, conn->wbuf.len) != 0)
        return io_failed(conn, "sending a request");
    return MC_OK;
}

/* Receive into conn->ibuf until it holds @p want bytes (<= MC_MCONN_IBUF),
 * taking whatever else has arrived too.  0, or -1 with errno. */
static int ibuf_fill(mc_mconn_t *conn, size_t want)
{
    ssize_t n;
    if (conn->ilen >= want)
        return 0;
    n = mc_read_atleast(conn->fd, conn->ibuf + conn->ilen, want - conn->ilen,
                        MC_MCONN_IBUF - conn->ilen);
    if (n < 0)
        return -1;
    conn->ilen += (size_t)n;
    return 0;
}

mc_status_t mc_mconn_recv(mc_mconn_t *conn, uint16_t opcode, uint32_t id,
                          const uint8_t **body_p, size_t *len_p)
{
    mc_wire_header_t h;
    size_t total;

    if (conn->broken) {
        mc_set_error_detail("master connection is broken");
        return MC_RPC_FAIL;
    }
    if (conn->ibuf == NULL) {
        conn->ibuf = malloc(MC_MCONN_IBUF);
        if (conn->ibuf == NULL) {
            conn->broken = 1;
            mc_set_error_detail("out of memory for a master connection's receive buffer");
            return MC_INTERNAL_ERROR;
        }
    }
    /* the previous answer (and its body) is done with */
    if (conn->ioff > 0) {
        memmove(conn->ibuf, conn->ibuf + conn->ioff, conn->ilen - conn->ioff);
        conn->ilen -= conn->ioff;
        conn->ioff = 0;
    }
    if (conn->ilen < MC_WIRE_HEADER_SIZE) {
        /* the busy-poll window's receive is the first one */
        ssize_t n = mc_spin_recv(conn->fd, conn->ibuf + conn->ilen, MC_MCONN_IBUF - conn->ilen,
                                 0, mc_busy_poll_us());
        if (n > 0) {
            conn->ilen += (size_t)n;
        } else if (n != MC_SPIN_NONE) {
            if (n == 0)
                errno = ECONNRESET;
            return io_failed(conn, "waiting for a response");
        }
    }
    if (ibuf_fill(conn, MC_WIRE_HEADER_SIZE) != 0)
        return io_failed(conn, "waiting for a response");
    if ((mc_wire_header_unpack(conn->ibuf, &h) != MC_OK) || !(h.flags & MC_WIRE_FLAG_RESPONSE) ||
        (h.opcode != opcode) || (h.request_id != id)) {
        conn->broken = 1;
        if (memcmp(conn->ibuf, "MCAC", 4) == 0) {
            /* §9.1: a challenge where an answer belongs */
            mc_set_error_detail("the master requires cluster authentication: set "
                                "auth_token_file or MC_AUTH_TOKEN_FILE (docs/security.md)");
            mc_warn("%s", mc_last_error_detail());
            return MC_RPC_FAIL;
        }
        mc_set_error_detail("malformed response from master (opcode %u id %u, expected "
                            "%s id %u)", (unsigned)h.opcode, (unsigned)h.request_id,
                            mc_wire_op_name(opcode) ? mc_wire_op_name(opcode) : "?",
                            (unsigned)id);
        mc_warn("malformed response from master: opcode %u id %u flags 0x%x len %u",
                (unsigned)h.opcode, (unsigned)h.request_id, (unsigned)h.flags,
                (unsigned)h.body_len);
        return MC_RPC_FAIL;
    }
    /* body_len <= MC_WIRE_MAX_BODY was checked by the unpack */
    total = MC_WIRE_HEADER_SIZE + (size_t)h.body_len;
    if (total <= MC_MCONN_IBUF) {
        if (ibuf_fill(conn, total) != 0)
            return io_failed(conn, "reading a response");
        conn->ioff = total;
        *body_p    = conn->ibuf + MC_WIRE_HEADER_SIZE;
        *len_p     = h.body_len;
        return MC_OK;
    }
    /* A large body: what came with the header is its start (ibuf holds
     * less than the whole answer), the rest is read in place. */
    size_t have = conn->ilen - MC_WIRE_HEADER_SIZE;
    if (h.body_len > conn->rcap) {
        uint8_t *p = realloc(conn->rbuf, h.body_len);
        if (p == NULL) {
            conn->broken = 1; /* the unread body is still in the stream */
            mc_set_error_detail("out of memory for a %u-byte master response",
                                (unsigned)h.body_len);
            return MC_INTERNAL_ERROR;
        }
        conn->rbuf = p;
        conn->rcap = h.body_len;
    }
    memcpy(conn->rbuf, conn->ibuf + MC_WIRE_HEADER_SIZE, have);
    conn->ilen = 0;
    if (mc_read_full(conn->fd, conn->rbuf + have, h.body_len - have) != 0)
        return io_failed(conn, "reading a response");
    *body_p = conn->rbuf;
    *len_p  = h.body_len;
    return MC_OK;
}

/* A status from the master is 0 or negative; anything else is garbage. */
static mc_status_t decoded(mc_mconn_t *conn, mc_status_t st, int32_t status, uint16_t opcode)
{
    if ((st != MC_OK) || (status > 0)) {
        conn->broken = 1;
        mc_set_error_detail("undecodable %s response from master",
                            mc_wire_op_name(opcode) ? mc_wire_op_name(opcode) : "?");
        mc_warn("undecodable %s response from master",
                mc_wire_op_name(opcode) ? mc_wire_op_name(opcode) : "?");
        return MC_RPC_FAIL;
    }
    if (status == MC_UNAVAILABLE_IN_CURRENT_STATUS) {
        /* a standby, or a leader past its lease: this connection leads
         * nowhere any more; the next one is dialled to the leader anew */
        conn->broken = 1;
        conn->fenced = 1;
    }
    if (status != MC_OK)
        mc_set_error_detail("master answered %s: %s",
                            mc_wire_op_name(opcode) ? mc_wire_op_name(opcode) : "?",
                            mc_status_name(status));
    return (mc_status_t)status;
}

/* Refuse to send a frame the master would reject for its size. */
static mc_status_t check_frame(mc_mconn_t *conn, size_t start)
{
    if (!conn->wbuf.oom && (conn->wbuf.len - start - MC_WIRE_HEADER_SIZE > MC_WIRE_MAX_BODY)) {
        mc_buf_reset(&conn->wbuf);
        mc_set_error_detail("request larger than the %u-byte frame limit; split the batch",
                            (unsigned)MC_WIRE_MAX_BODY);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

void mc_mconn_during_send(void *arg)
{
    mc_mconn_during_t *d = arg;
    if ((d != NULL) && (d->conn != NULL)) {
        d->send_st = mc_mconn_send(d->conn);
        d->conn    = NULL;
    }
}

static void run_during(mc_mconn_during_t *during)
{
    if ((during != NULL) && (during->fn != NULL)) {
        void (*fn)(void *) = during->fn;
        during->fn         = NULL;
        fn(during->arg);
    }
}

#define MC_MASTER_CALL_DEF_(UP, low, code)                                              \
    mc_status_t mc_master_recv_##low(mc_mconn_t *conn, uint32_t id,                     \
                                     mc_wire_##low##_resp_t *resp)                      \
    {                                                                                   \
        const uint8_t *body;                                                            \
        size_t len;                                                                     \
        int32_t status = MC_OK;                                                         \
        mc_status_t st = mc_mconn_recv(conn, (code), id, &body, &len);                  \
        if (st != MC_OK)                                                                \
            return st;                                                                  \
        st = mc_wire_decode_##low##_resp(body, len, &conn->arena, &status, resp);       \
        return decoded(conn, st, status, (code));                                       \
    }                                                                                   \
    mc_status_t mc_master_call_during_##low(mc_mconn_t *conn,                           \
                                            const mc_wire_##low##_req_t *req,           \
                                            mc_wire_##low##_resp_t *resp,               \
                                            mc_mconn_during_t *during)                  \
    {                                                                                   \
        uint32_t id;                                                                    \
        mc_status_t st;                                                                 \
        mc_mconn_begin(conn);                                                           \
        id = mc_mconn_take_id(conn);                                                    \
        mc_wire_encode_##low##_req(&conn->wbuf, id, req);                               \
        st = check_frame(conn, 0);                                                      \
        if ((st == MC_OK) && (during != NULL) && (during->fn != NULL) && during->fn_sends) { \
            during->conn    = conn;                                                     \
            during->send_st = MC_OK;                                                    \
            run_during(during); /* sends our request once its own are out */            \
            mc_mconn_during_send(during); /* unless it sent none */                     \
            st = during->send_st;                                                       \
        } else if (st == MC_OK) {                                                       \
            st = mc_mconn_send(conn);                                                   \
            if (st == MC_OK)                                                            \
                run_during(during);                                                     \
        }                                                                               \
        if (st != MC_OK)                                                                \
            return st;                                                                  \
        return mc_master_recv_##low(conn, id, resp);                                    \
    }                                                                                   \
    mc_status_t mc_master_call_##low(mc_mconn_t *conn,                                  \
                                     const mc_wire_##low##_req_t *req,                  \
                                     mc_wire_##low##_resp_t *resp)                      \
    {                                                                                   \
        return mc_master_call_during_##low(conn, req, resp, NULL);                      \
    }
MC_WIRE_MESSAGES(MC_MASTER_CALL_DEF_)
#undef MC_MASTER_CALL_DEF_

/* ---- the pool ----------------------------------------------------------- */

mc_status_t mc_master_pool_init(mc_master_pool_t *pool, const mc_master_target_t *t,
                                unsigned cap)
{
    memset(pool, 0, sizeof(*pool));
    pool->target = *t;
    pool->cap    = cap ? cap : 1;
    if (pthread_mutex_init(&pool->lock, NULL) != 0) {
        mc_set_error_detail("cannot create the master pool lock");
        return MC_INTERNAL_ERROR;
    }
    if (pthread_cond_init(&pool->cond, NULL) != 0) {
        pthread_mutex_destroy(&pool->lock);
        mc_set_error_detail("cannot create the master pool condition");
        return MC_INTERNAL_ERROR;
    }
    return MC_OK;
}

void mc_master_pool_cleanup(mc_master_pool_t *pool)
{
    mc_mconn_t *c = pool->idle;
    while (c != NULL) {
        mc_mconn_t *next = c->next;
        mc_mconn_close(c);
        c = next;
    }
    pool->idle  = NULL;
    pool->total = 0;
    pthread_cond_destroy(&pool->cond);
    pthread_mutex_destroy(&pool->lock);
}

mc_status_t mc_master_pool_get(mc_master_pool_t *pool, mc_mconn_t **conn_p)
{
    mc_status_t st;
    mc_mconn_t *conn;

    pthread_mutex_lock(&pool->lock);
    for (;;) {
        if (pool->idle != NULL) {
            conn       = pool->idle;
            pool->idle = conn->next;
            pthread_mutex_unlock(&pool->lock);
            conn->next   = NULL;
            conn->reused = 1;
            *conn_p      = conn;
            return MC_OK;
        }
        if (pool->total < pool->cap)
            break;
        pthread_cond_wait(&pool->cond, &pool->lock);
    }
    /* Reserve the slot, then dial without holding the lock. */
    pool->total++;
    pthread_mutex_unlock(&pool->lock);

    st = mc_mconn_open(&pool->target, &conn);
    if (st != MC_OK) {
        pthread_mutex_lock(&pool->lock);
        pool->total--;
        pthread_cond_signal(&pool->cond);
        pthread_mutex_unlock(&pool->lock);
        return st;
    }
    *conn_p = conn;
    return MC_OK;
}

void mc_master_pool_put(mc_master_pool_t *pool, mc_mconn_t *conn)
{
    mc_mconn_t *stale = NULL;

    if (conn == NULL)
        return;
    if (!conn->broken) {
        if (conn->rcap > MC_MCONN_KEEP_BYTES) {
            free(conn->rbuf);
            conn->rbuf = NULL;
            conn->rcap = 0;
        }
        if (conn->wbuf.cap > MC_MCONN_KEEP_BYTES)
            mc_buf_cleanup(&conn->wbuf);
        mc_arena_reset(&conn->arena);
    }

    pthread_mutex_lock(&pool->lock);
    if (conn->broken) {
        /* Whatever broke this one (a master restart, most likely) broke
         * the idle ones too; drop them so nobody inherits a dead socket. */
        stale      = pool->idle;
        pool->idle = NULL;
        for (mc_mconn_t *c = stale; c != NULL; c = c->next)
            pool->total--;
        pool->total--;
        pthread_cond_broadcast(&pool->cond);
    } else {
        conn->next = pool->idle;
        pool->idle = conn;
        pthread_cond_signal(&pool->cond);
    }
    pthread_mutex_unlock(&pool->lock);

    if (conn->broken) {
        mc_mconn_close(conn);
        while (stale != NULL) {
            mc_mconn_t *next = stale->next;
            mc_mconn_close(stale);
            stale = next;
        }
    }
}

int mc_master_op_idempotent(uint16_t opcode)
{
    switch (opcode) {
    case MC_WIRE_OP_HELLO:
    case MC_WIRE_OP_PING:
    case MC_WIRE_OP_GET_REPLICA_LIST:
    case MC_WIRE_OP_EXIST_KEY:
    case MC_WIRE_OP_BATCH_GET_REPLICA_LIST:
    case MC_WIRE_OP_BATCH_EXIST_KEY:
    case MC_WIRE_OP_QUERY_TASK:
        return 1;
    default:
        return 0;
    }
}

/*
 * Whether a pool call that failed with @p st on @p conn is repeated
 * (mc_master_pool_call_* contract): once on a stale idle connection, and
 * with an etcd:// target while the failover wait lasts.
 */
static int pool_call_again(const mc_master_pool_t *pool, const mc_mconn_t *conn,
                           mc_status_t st, uint16_t opcode, int attempt, uint64_t deadline)
{
    if ((attempt == 0) && mc_mconn_stale(conn, st))
        return 1;
    if ((pool->target.resolver == NULL) || (mc_now_ms() >= deadline))
        return 0;
    if (conn->fenced)
        return 1;
    return conn->broken && ((st == MC_RPC_FAIL) || (st == MC_RPC_TIMEOUT)) &&
           mc_master_op_idempotent(opcode);
}

#define MC_MASTER_POOL_CALL_DEF_(UP, low, code)                                         \
    mc_status_t mc_master_pool_call_##low(mc_master_pool_t *pool, mc_mconn_t **conn_p,  \
                                          const mc_wire_##low##_req_t *req,             \
                                          mc_wire_##low##_resp_t *resp)                 \
    {                                                                                   \
        return mc_master_pool_call_during_##low(pool, conn_p, req, resp, NULL);         \
    }                                                                                   \
    mc_status_t mc_master_pool_call_during_##low(mc_master_pool_t *pool,                \
                                                 mc_mconn_t **conn_p,                   \
                                                 const mc_wire_##low##_req_t *req,      \
                                                 mc_wire_##low##_resp_t *resp,          \
                                                 mc_mconn_during_t *during)             \
    {                                                                                   \
        mc_status_t st;                                                                 \
        uint64_t deadline = mc_now_ms() + (uint64_t)pool->target.failover_wait_ms;      \
        *conn_p = NULL;                                                                 \
        for (int attempt = 0;; attempt++) {                                             \
            st = mc_master_pool_get(pool, conn_p);                                      \
            if (st != MC_OK) {                                                          \
                *conn_p = NULL;                                                         \
                return st;                                                              \
            }                                                                           \
            st = mc_master_call_during_##low(*conn_p, req, resp, during);               \
            if ((st == MC_OK) ||                                                        \
                !pool_call_again(pool, *conn_p, st, (code), attempt, deadline))         \
                return st;                                                              \
            mc_debug("%s failed on the master connection (%s); repeating it on a "      \
                     "fresh one", #UP, mc_status_name(st));                            \
            mc_master_pool_put(pool, *conn_p);                                          \
            *conn_p = NULL;                                                             \
            if (attempt > 0)                                                            \
                pause_ms(100);                                                          \
        }                                                                               \
    }
MC_WIRE_MESSAGES(MC_MASTER_POOL_CALL_DEF_)
#undef MC_MASTER_POOL_CALL_DEF_

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle: lifecycle (create/setup/close/destroy), the backend
 * it runs (ops.h), and the checks every call shares.
 *
 * setup() dials the master first (cheap, and the commonest failure), then
 * starts the transfer engine, maps and registers the staging buffer and
 * the global segment, mounts the segment and starts the heartbeat and the
 * task executor (tasks.c); any failure unwinds what was done, in reverse.
 * close() stops the task executor (it copies out of our segments) and the
 * heartbeat before CLIENT_CLOSE (a ping after it would make the master ask
 * for a remount and resurrect the segments), then unregisters memory
 * (which waits for requests peers are being served) before unmapping it.
 *
 * May call: every door (it sets each part up and tears it down:
 * ../segments, ../threads, ../tiers, ../write, ../read, ../sessions),
 * calls.c, master_client.c.  Called by: the public API, dummy/
 * (mc_store_embedded_ops, the table a closed dummy falls back to).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda.h"
#include "common/log.h"
#include "common/regex_limit.h"
#include "store/read/read.h"
#include "store/segments/segments.h"
#include "store/sessions/sessions.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"
#include "store/tiers/tiers.h"
#include "store/write/write.h"
#include "transfer/engine.h"

#define MC_DEFAULT_SEGMENT_SIZE (16ull << 20)
#define MC_DEFAULT_LOCAL_BUFFER_SIZE (16ull << 20)
#define MC_DEFAULT_MASTER_ADDR "127.0.0.1:50051"
#define MC_DEFAULT_TENANT "default"
#define MC_DEFAULT_PROTOCOL "tcp"

/* ---- lifecycle ----------------------------------------------------------------- */

MC_API mc_status_t mc_store_create(mc_store_h *store_p)
{
    mc_store_h s;
    pthread_rwlockattr_t ra;

    if (store_p == NULL) {
        mc_set_error_detail("store_p is NULL");
        return MC_INVALID_PARAMS;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        mc_set_error_detail("out of memory for a store handle");
        return MC_INTERNAL_ERROR;
    }
    /* Writer preference: close() must not starve behind a stream of calls. */
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&s->life, &ra) != 0) {
        pthread_rwlockattr_destroy(&ra);
        free(s);
        mc_set_error_detail("cannot create the store lock");
        return MC_INTERNAL_ERROR;
    }
    pthread_rwlockattr_destroy(&ra);
    s->ops = &mc_store_embedded_ops;
    pthread_mutex_init(&s->seg_lock, NULL);
    pthread_mutex_init(&s->http_lock, NULL);
    pthread_mutex_init(&s->token_mu, NULL);
    mc_store_resv_init(s);
    *store_p = s;
    return MC_OK;
}

/* The master's metadata token, from every HELLO (a restarted master has a
 * new one): kept, and handed to the engine once setup has one. */
static void store_on_token(void *arg, mc_uuid_t token)
{
    mc_store_h s = arg;
    char hex[33];

    snprintf(hex, sizeof(hex), "%016llx%016llx", (unsigned long long)token.hi,
             (unsigned long long)token.lo);
    pthread_mutex_lock(&s->token_mu);
    if (strcmp(hex, s->meta_token) != 0) {
        /* another master process (a restart, a new leader): the leases it
         * knows of are not ours, so cached locations are forgotten */
        if (s->meta_token[0] != '\0')
            mc_store_cache_clear(s);
        memcpy(s->meta_token, hex, sizeof(hex));
        if (s->token_te != NULL)
            mc_te_meta_token_set(s->token_te, hex);
    }
    pthread_mutex_unlock(&s->token_mu);
}

/* Tell the master this client is gone; its segments and objects vanish. */
static mc_status_t master_client_close(mc_store_h s)
{
    mc_status_t st;
    mc_mconn_t *conn;
    mc_wire_client_close_req_t req;
    mc_wire_client_close_resp_t resp;

    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    /* no call is in flight any more (close holds `life`) and the pool goes
     * with this store: the bound is the pool's from here on */
    if (s->pool.target.failover_wait_ms > MC_MASTER_CLOSE_FAILOVER_WAIT_MS)
        s->pool.target.failover_wait_ms = MC_MASTER_CLOSE_FAILOVER_WAIT_MS;
    st = mc_master_pool_call_client_close(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return st;
}

/* Undo setup; every step tolerates not having been done. */
static void teardown(mc_store_h s, int tell_master, mc_status_t *st_p)
{
    mc_status_t st = MC_OK;

    mc_store_disk_stop(s);  /* reads segments and the engine too */
    mc_store_tasks_stop(s); /* before the segments it copies from go */
    mc_store_heartbeat_stop(s);
    mc_store_resv_clear(s); /* CLIENT_CLOSE frees them on the master */
    if (tell_master && s->pool_ready) {
        st = master_client_close(s);
        if (st != MC_OK)
            mc_warn("could not tell the master that client %s closed: %s (%s)", s->hostname,
                    mc_status_name(st), mc_last_error_detail());
    }
    mc_store_nof_release(s);
    mc_store_segments_release(s);
    mc_store_sessions_release(s); /* they use the engine and the staging buffer */
    mc_store_lbuf_cleanup(s);
    mc_store_disk_hints_destroy(s);
    pthread_mutex_lock(&s->token_mu);
    if (s->token_te != NULL)
        mc_te_meta_token_set(s->token_te, ""); /* a borrowed engine outlives us */
    s->token_te      = NULL;
    s->meta_token[0] = '\0';
    pthread_mutex_unlock(&s->token_mu);
    if (s->te != NULL) {
        /* a borrowed engine stays with its owner: the segment and buffer
         * regions were unregistered above, which is all we put on it */
        if (!s->te_borrowed)
            mc_te_destroy(s->te);
        s->te          = NULL;
        s->te_borrowed = 0;
    }
    mc_store_dfs_cleanup(s);
    if (s->pool_ready) {
        mc_master_pool_cleanup(&s->pool);
        s->pool_ready = 0;
    }
    /* the etcd:// resolver, shared with the threads stopped above */
    mc_master_target_cleanup(&s->target);
    mc_auth_destroy(s->auth);
    s->auth = NULL;
    s->hostname[0] = '\0';
    s->protocol[0] = '\0';
    if (st_p != NULL)
        *st_p = st;
}

static const char *param_str(const mc_store_params_t *p, uint64_t bit, const char *v,
                             const char *def)
{
    return ((p->field_mask & bit) && (v != NULL)) ? v : def;
}

static mc_status_t do_setup(mc_store_h s, const mc_store_params_t *p)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_te_params_t tp;
    const char *hostname, *metadata, *protocol, *devices, *master, *tenant, *auth_file;
    uint64_t seg_size, lbuf_size;
    const char *name;
    int master_ok = 0; /* HELLO went through: the master knows this client */

    hostname = param_str(p, MC_STORE_PARAM_LOCAL_HOSTNAME, p->local_hostname, NULL);
    metadata = param_str(p, MC_STORE_PARAM_METADATA_SERVER, p->metadata_server, NULL);
    protocol = param_str(p, MC_STORE_PARAM_PROTOCOL, p->protocol, MC_DEFAULT_PROTOCOL);
    devices  = param_str(p, MC_STORE_PARAM_RDMA_DEVICES, p->rdma_devices, "");
    master   = param_str(p, MC_STORE_PARAM_MASTER_SERVER_ADDR, p->master_server_addr,
                         MC_DEFAULT_MASTER_ADDR);
    tenant   = param_str(p, MC_STORE_PARAM_TENANT_ID, p->tenant_id, MC_DEFAULT_TENANT);
    seg_size = (p->field_mask & MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE) ? p->global_segment_size
                                                                     : MC_DEFAULT_SEGMENT_SIZE;
    lbuf_size = (p->field_mask & MC_STORE_PARAM_LOCAL_BUFFER_SIZE) ? p->local_buffer_size
                                                                    : MC_DEFAULT_LOCAL_BUFFER_SIZE;

    if ((hostname == NULL) || (*hostname == '\0')) {
        mc_set_error_detail("local_hostname is required");
        return MC_INVALID_PARAMS;
    }
    if ((metadata == NULL) || (*metadata == '\0')) {
        mc_set_error_detail("metadata_server is required (\"P2PHANDSHAKE\" or an http URL)");
        return MC_INVALID_PARAMS;
    }
    if ((*protocol == '\0') || (strlen(protocol) >= sizeof(s->protocol))) {
        mc_set_error_detail("protocol \"%s\" is not valid", protocol);
        return MC_INVALID_PARAMS;
    }
    if ((*master == '\0'))
        master = MC_DEFAULT_MASTER_ADDR;
    if (*tenant == '\0')
        tenant = MC_DEFAULT_TENANT;
    if ((p->field_mask & MC_STORE_PARAM_RPC_TIMEOUT_MS) &&
        (p->rpc_timeout_ms > MC_MASTER_IO_TIMEOUT_MAX_MS)) {
        mc_set_error_detail("rpc_timeout_ms %u is above the limit of %d ms",
                            (unsigned)p->rpc_timeout_ms, MC_MASTER_IO_TIMEOUT_MAX_MS);
        return MC_INVALID_PARAMS;
    }

    mc_uuid_generate(&s->client_id);
    strcpy(s->protocol, protocol);
    auth_file = param_str(p, MC_STORE_PARAM_AUTH_TOKEN_FILE, p->auth_token_file,
                          getenv("MC_AUTH_TOKEN_FILE"));
    if ((auth_file != NULL) && (*auth_file != '\0')) {
        st = mc_auth_load(auth_file, &s->auth);
        if (st != MC_OK)
            goto fail;
    }

    /* the DFS tier's layout, checked against the master's at HELLO */
    st = mc_store_dfs_init(s);
    if (st != MC_OK)
        goto fail;
    st = mc_store_resv_config(s);
    if (st != MC_OK)
        goto fail;
    st = mc_store_populate_config(NULL);
    if (st != MC_OK)
        goto fail;

    /* 1. the master: fail fast when it is not there */
    st = mc_master_target_init(&s->target, master, s->client_id, tenant);
    if (st != MC_OK)
        goto fail;
    s->target.on_token     = store_on_token;
    s->target.on_hello     = mc_store_dfs_on_hello;
    s->target.on_token_arg = s;
    s->target.auth         = s->auth;
    if (p->field_mask & MC_STORE_PARAM_RPC_TIMEOUT_MS)
        s->target.io_timeout_ms = (int)p->rpc_timeout_ms;
    st = mc_master_pool_init(&s->pool, &s->target, MC_STORE_POOL_CAP);
    if (st != MC_OK)
        goto fail;
    s->pool_ready = 1;
    st            = mc_master_pool_get(&s->pool, &conn);
    if (st != MC_OK) {
        if (st != MC_RPC_FAIL && st != MC_RPC_TIMEOUT && st != MC_INTERNAL_ERROR)
            goto fail; /* the master refused HELLO: keep its verdict */
        if (st == MC_RPC_TIMEOUT)
            mc_set_error_detail("master %s:%u accepted the connection but did not answer "
                                "within %d ms (rpc_timeout_ms, MC_STORE_RPC_TIMEOUT_MS)",
                                s->target.host, (unsigned)s->target.port,
                                s->target.io_timeout_ms);
        else if (strstr(mc_last_error_detail(), s->target.host) == NULL) {
            char why[400]; /* the detail is rewritten from a copy, not in place */
            snprintf(why, sizeof(why), "%s", mc_last_error_detail());
            mc_set_error_detail("master %s:%u: %s", s->target.host, (unsigned)s->target.port,
                                why);
        }
        mc_error("setup: %s", mc_last_error_detail());
        st = MC_RPC_FAIL;
        goto fail;
    }
    mc_master_pool_put(&s->pool, conn);
    master_ok = 1;

    /* 2. the transfer engine: the caller's, or our own */
    if (p->field_mask & MC_STORE_PARAM_ENGINE) {
        if (p->engine == NULL) {
            mc_set_error_detail("MC_STORE_PARAM_ENGINE is set but engine is NULL");
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        s->te          = p->engine;
        s->te_borrowed = 1;
        goto engine_ready;
    }
    memset(&tp, 0, sizeof(tp));
    tp.field_mask = MC_TE_PARAM_LOCAL_HOSTNAME | MC_TE_PARAM_METADATA_SERVER |
                    MC_TE_PARAM_PROTOCOL | MC_TE_PARAM_DEVICES;
    tp.local_hostname  = hostname;
    tp.metadata_server = metadata;
    tp.protocol        = protocol;
    tp.devices         = devices;
    /* the engine follows the store's choice, even an explicit "" (off)
     * while MC_AUTH_TOKEN_FILE is set */
    tp.field_mask |= MC_TE_PARAM_AUTH_TOKEN_FILE;
    tp.auth_token_file = (s->auth != NULL) ? auth_file : "";
    st                 = mc_te_create(&tp, &s->te);
    if (st != MC_OK) {
        mc_error("cannot start the transfer engine on %s (%s, %s): %s (%s)", hostname,
                 protocol, metadata, mc_status_name(st), mc_last_error_detail());
        s->te = NULL;
        goto fail;
    }
engine_ready:
    pthread_mutex_lock(&s->token_mu);
    s->token_te = s->te;
    mc_te_meta_token_set(s->te, s->meta_token);
    pthread_mutex_unlock(&s->token_mu);
    name = mc_te_local_name(s->te);
    if ((name == NULL) || (*name == '\0') || (strlen(name) >= sizeof(s->hostname))) {
        mc_set_error_detail("transfer engine has no usable segment name");
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    strcpy(s->hostname, name);

    /* 3. memory: the read-side state, the staging buffer, then the global
     * segment (mounted) */
    st = mc_store_rd_create(s);
    if (st == MC_OK)
        st = mc_store_disk_hints_create(s);
    if (st == MC_OK)
        st = mc_store_lbuf_init(s, lbuf_size);
    if (st != MC_OK)
        goto fail;
    if (seg_size > 0) {
        st = mc_store_segment_add(s, seg_size);
        if (st != MC_OK)
            goto fail;
    }

    /* 4. liveness */
    st = mc_store_heartbeat_start(s);
    if (st != MC_OK)
        goto fail;
    /* 5. copy/move tasks assigned to this client (tasks.c) */
    st = mc_store_tasks_start(s);
    if (st != MC_OK)
        goto fail;
    /* 6. the client HTTP server (http.c), last: nothing can fail after it,
     * so the unwinding below (under `life`) never has one to stop */
    if (p->field_mask & MC_STORE_PARAM_CLIENT_HTTP_PORT) {
        mc_store_http_t *http = NULL;
        st = mc_store_http_start(s, p->client_http_port, &http);
        if (st != MC_OK)
            goto fail;
        pthread_mutex_lock(&s->http_lock);
        s->http = http;
        pthread_mutex_unlock(&s->http_lock);
    }

    mc_info("store client %s set up: master %s, segment %llu bytes, local buffer %llu bytes",
            s->hostname, master, (unsigned long long)seg_size, (unsigned long long)lbuf_size);
    return MC_OK;

fail:
    {
        /* keep the detail of the first failure, not of the unwinding */
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        teardown(s, master_ok, NULL);
        mc_set_error_detail("%s", detail);
    }
    return st;
}

MC_API mc_status_t mc_store_setup(mc_store_h s, const mc_store_params_t *params)
{
    mc_status_t st;

    if ((s == NULL) || (params == NULL)) {
        mc_set_error_detail("store handle and params are required");
        return MC_INVALID_PARAMS;
    }
    pthread_rwlock_wrlock(&s->life);
    if (s->ready) {
        /* upstream refuses a second setup; close() first to reconfigure */
        pthread_rwlock_unlock(&s->life);
        mc_set_error_detail("store is already set up; close it before setting it up again");
        return MC_INVALID_PARAMS;
    }
    st = do_setup(s, params);
    if (st == MC_OK)
        s->ready = 1;
    pthread_rwlock_unlock(&s->life);
    return st;
}

MC_API mc_status_t mc_store_close(mc_store_h s)
{
    mc_status_t st = MC_OK;
    mc_store_http_t *http;

    if (s == NULL) {
        mc_set_error_detail("store handle is NULL");
        return MC_INVALID_PARAMS;
    }
    /* the HTTP server's handlers take `life`: stop it before we do */
    pthread_mutex_lock(&s->http_lock);
    http    = s->http;
    s->http = NULL;
    pthread_mutex_unlock(&s->http_lock);
    mc_store_http_stop(http);
    pthread_rwlock_wrlock(&s->life); /* waits for calls in flight */
    MC_STORE_DISPATCH(s, close, &st);
    pthread_rwlock_unlock(&s->life);
    return st;
}

void mc_emb_close(mc_store_h s, mc_status_t *st_p)
{
    if (s->ready) {
        s->ready = 0;
        teardown(s, 1, st_p);
    }
}

/* The embedded backend: this process owns its segments, its engine and
 * its master connections (ops.h). */
const mc_store_ops_t mc_store_embedded_ops = {
    .name                   = "embedded",
    .close                  = mc_emb_close,
    .write                  = mc_emb_write,
    .write_batch            = mc_emb_write_batch,
    .batch_put_parts_commit = mc_emb_batch_put_parts_commit,
    .remove                 = mc_emb_remove,
    .batch_remove           = mc_emb_batch_remove,
    .remove_by_regex        = mc_emb_remove_by_regex,
    .remove_all             = mc_emb_remove_all,
    .batch_replica_clear    = mc_emb_batch_replica_clear,
    .get                    = mc_emb_get,
    .get_size               = mc_emb_get_size,
    .exist                  = mc_emb_exist,
    .batch_exist            = mc_emb_batch_exist,
    .query                  = mc_emb_query,
    .batch_query            = mc_emb_batch_query,
    .get_buffer             = mc_emb_get_buffer,
    .batch_get_buffer       = mc_emb_batch_get_buffer,
    .get_into               = mc_emb_get_into,
    .batch_get_into         = mc_emb_batch_get_into,
    .read_ranges            = mc_emb_read_ranges,
    .read_blocks            = mc_emb_read_blocks,
    .mem_is_registered      = mc_emb_mem_is_registered,
    .register_buffer        = mc_emb_register_buffer,
    .unregister_buffer      = mc_emb_unregister_buffer,
    .mem_pool_alloc         = mc_emb_mem_pool_alloc,
    .mem_pool_free          = mc_emb_mem_pool_free,
    .mount_segment          = mc_emb_mount_segment,
    .allocate_and_mount     = mc_emb_allocate_and_mount,
    .unmount                = mc_emb_unmount,
    .copy_task              = mc_emb_copy_task,
    .move_task              = mc_emb_move_task,
    .query_task             = mc_emb_query_task,
    .get_session_start      = mc_emb_get_session_start,
    .get_session_read       = mc_emb_get_session_read,
    .get_session_end        = mc_emb_get_session_end,
    .put_session_start      = mc_emb_put_session_start,
    .put_session_write      = mc_emb_put_session_write,
    .put_session_finish     = mc_emb_put_session_finish,
};

MC_API void mc_store_destroy(mc_store_h s)
{
    if (s == NULL)
        return;
    mc_store_close(s);
    pthread_mutex_destroy(&s->seg_lock);
    pthread_mutex_destroy(&s->http_lock);
    pthread_mutex_destroy(&s->token_mu);
    mc_store_resv_cleanup(s);
    pthread_rwlock_destroy(&s->life);
    free(s);
}

MC_API const char *mc_store_hostname(mc_store_h s)
{
    /* hostname is a fixed array in the handle: never dangles, "" if closed */
    return (s != NULL) ? s->hostname : "";
}

MC_API mc_te_h mc_store_engine(mc_store_h s)
{
    mc_te_h te;
    if (mc_store_enter(s) != MC_OK)
        return NULL;
    te = s->te;
    mc_store_leave(s);
    return te;
}

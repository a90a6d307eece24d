/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle: lifecycle (create/setup/close/destroy), writes and removal.
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
 * A put is two-phase (docs/protocol.md, PUT_*): PUT_START allocates one
 * buffer per replica on distinct segments, the bytes go straight from the
 * caller's memory into the owners' memory in ONE mc_te_transfer() call
 * (every replica and every part concurrently), then PUT_END publishes the
 * object or PUT_REVOKE frees the buffers.  The master connection is given
 * back to the pool while the bytes move, so a slow transfer does not hold
 * one of the pool's slots.  OBJECT_ALREADY_EXISTS from the start means
 * another writer won; put reports MC_OK and the old value stays.
 *
 * Replica descriptors come from the network: a replica smaller than the
 * object, an address range that wraps, or a segment name we cannot open is
 * refused before any byte moves.
 *
 * Every write runs one of two paths: do_write() for a single key and
 * do_write_batch() for many (one BATCH_*_START, one transfer for every
 * replica of every key, then END and REVOKE pipelined on one connection).
 * Both are parameterised by the operation (put or upsert: the same
 * messages under other opcodes) and by flags saying whether the sources
 * must be registered memory (the zero-copy *_from calls) and whether
 * prefer_alloc_in_same_node is allowed (the multi-buffer calls only, as
 * upstream).  A source of many parts is written as their concatenation.
 *
 * Removal: remove, batch_remove, remove_by_regex (POSIX extended, checked
 * here with regcomp before the master sees it), remove_all and
 * batch_replica_clear (the caller's own objects), all one round trip each.
 */
#include "config.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda.h"
#include "common/log.h"
#include "common/regex_limit.h"
#include "store/read/read.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"
#include "store/tiers/tiers.h"
#include "transfer/engine.h"

#define MC_DEFAULT_SEGMENT_SIZE (16ull << 20)
#define MC_DEFAULT_LOCAL_BUFFER_SIZE (16ull << 20)
#define MC_DEFAULT_MASTER_ADDR "127.0.0.1:50051"
#define MC_DEFAULT_TENANT "default"
#define MC_DEFAULT_PROTOCOL "tcp"
/* Requests kept on the stack on the single-key path. */
#define MC_PUT_STACK_REQS 16

MC_API void mc_replicate_config_init(mc_replicate_config_t *cfg)
{
    if (cfg == NULL)
        return;
    /* only the fields of the first release: a caller built against that
     * header has no room for the later ones (they come with a mask bit) */
    memset(cfg, 0, offsetof(mc_replicate_config_t, preferred_nof_segments));
    cfg->replica_num     = 1;
    cfg->soft_pin_action = MC_SOFT_PIN_PRESERVE;
}

/* ---- shared helpers --------------------------------------------------------- */

mc_status_t mc_store_enter(mc_store_h s)
{
    if (s == NULL) {
        mc_set_error_detail("store handle is NULL");
        return MC_INVALID_PARAMS;
    }
    pthread_rwlock_rdlock(&s->life);
    if (!s->ready && (s->dummy != NULL)) {
        pthread_rwlock_unlock(&s->life);
        mc_set_error_detail("not supported by a dummy client (mc_store_setup_dummy)");
        return MC_NOT_SUPPORTED;
    }
    if (!s->ready) {
        pthread_rwlock_unlock(&s->life);
        mc_set_error_detail("store is not set up (call setup first, or it was closed)");
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    return MC_OK;
}

void mc_store_leave(mc_store_h s)
{
    pthread_rwlock_unlock(&s->life);
}

static void fill_statuses(mc_status_t *statuses, size_t n, mc_status_t st)
{
    if (statuses != NULL)
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
}

mc_status_t mc_store_enter_statuses(mc_store_h s, mc_status_t *statuses, size_t n)
{
    mc_status_t st = mc_store_enter(s);
    if (st != MC_OK)
        fill_statuses(statuses, n, st);
    return st;
}

mc_status_t mc_store_first_error(const mc_status_t *statuses, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (statuses[i] != MC_OK)
            return statuses[i];
    return MC_OK;
}

mc_status_t mc_store_enter_results(mc_store_h s, int64_t *results, size_t n)
{
    mc_status_t st = mc_store_enter(s);
    if ((st != MC_OK) && (results != NULL))
        for (size_t i = 0; i < n; i++)
            results[i] = st;
    return st;
}

mc_status_t mc_store_check_key(const char *key, size_t *len_p)
{
    size_t len;
    if (key == NULL) {
        mc_set_error_detail("key is NULL");
        return MC_INVALID_PARAMS;
    }
    len = strnlen(key, MC_WIRE_MAX_KEY + 1);
    if ((len == 0) || (len > MC_WIRE_MAX_KEY)) {
        mc_set_error_detail("key must be 1 to %u bytes", (unsigned)MC_WIRE_MAX_KEY);
        return MC_INVALID_PARAMS;
    }
    if (len_p != NULL)
        *len_p = len;
    return MC_OK;
}

size_t mc_store_select_keys(const char *const *keys, size_t n, mc_status_t *statuses,
                            mc_str_t *wkeys, size_t *sel)
{
    size_t nsel = 0;
    for (size_t i = 0; i < n; i++) {
        size_t klen;
        statuses[i] = mc_store_check_key(keys[i], &klen);
        if (statuses[i] != MC_OK)
            continue;
        wkeys[nsel] = (mc_str_t){keys[i], (uint32_t)klen};
        sel[nsel++] = i;
    }
    return nsel;
}

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
    st            = mc_master_pool_call_client_close(&s->pool, &conn, &req, &resp);
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
    mc_store_lbuf_cleanup(s);
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

    /* 3. memory: staging buffer, then the global segment (mounted) */
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
    mc_store_ops(s)->close(s, &st);
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
    .name = "embedded",
    .close               = mc_emb_close,
    .write               = mc_emb_write,
    .write_batch         = mc_emb_write_batch,
    .remove              = mc_emb_remove,
    .batch_remove        = mc_emb_batch_remove,
    .remove_by_regex     = mc_emb_remove_by_regex,
    .remove_all          = mc_emb_remove_all,
    .batch_replica_clear = mc_emb_batch_replica_clear,
    .get                 = mc_emb_get,
    .get_size            = mc_emb_get_size,
    .exist               = mc_emb_exist,
    .batch_exist         = mc_emb_batch_exist,
    .query               = mc_emb_query,
    .batch_query         = mc_emb_batch_query,
    .get_buffer          = mc_emb_get_buffer,
    .batch_get_buffer    = mc_emb_batch_get_buffer,
    .get_into            = mc_emb_get_into,
    .batch_get_into      = mc_emb_batch_get_into,
    .read_ranges         = mc_emb_read_ranges,
    .mem_is_registered   = mc_emb_mem_is_registered,
    .register_buffer     = mc_emb_register_buffer,
    .unregister_buffer   = mc_emb_unregister_buffer,
    .mem_pool_alloc      = mc_emb_mem_pool_alloc,
    .mem_pool_free       = mc_emb_mem_pool_free,
    .mount_segment       = mc_emb_mount_segment,
    .allocate_and_mount  = mc_emb_allocate_and_mount,
    .unmount             = mc_emb_unmount,
    .copy_task           = mc_emb_copy_task,
    .move_task           = mc_emb_move_task,
    .query_task          = mc_emb_query_task,
    .get_session_start   = mc_emb_get_session_start,
    .get_session_read    = mc_emb_get_session_read,
    .get_session_end     = mc_emb_get_session_end,
    .put_session_start   = mc_emb_put_session_start,
    .put_session_write   = mc_emb_put_session_write,
    .put_session_finish  = mc_emb_put_session_finish,
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

/* ---- replication config --------------------------------------------------------- */

/*
 * What upstream checks on the client before any RPC.  @p nkeys is the
 * number of keys written by the call (group_ids needs one per key).
 * prefer_alloc_in_same_node is refused by put, put_from and batch_put_from
 * upstream but documented for the multi-buffer writes, which are the only
 * calls that pass MC_WF_SAME_NODE; it always needs replica_num == 1.
 */
mc_status_t mc_store_config_check(const mc_replicate_config_t *cfg, size_t nkeys,
                                  unsigned flags)
{
    if (cfg == NULL)
        return MC_OK;
    if ((uint64_t)cfg->replica_num + cfg->nof_replica_num + cfg->dfs_replica_num == 0) {
        mc_set_error_detail("replica_num must be at least 1");
        return MC_INVALID_PARAMS;
    }
    if (cfg->dfs_replica_num > 1) {
        mc_set_error_detail("dfs_replica_num must be 0 or 1");
        return MC_INVALID_PARAMS;
    }
    if ((cfg->soft_pin_action != MC_SOFT_PIN_PRESERVE) &&
        (cfg->soft_pin_action != MC_SOFT_PIN_ENABLE) &&
        (cfg->soft_pin_action != MC_SOFT_PIN_DISABLE)) {
        mc_set_error_detail("soft_pin_action %d is not PRESERVE, ENABLE or DISABLE",
                            (int)cfg->soft_pin_action);
        return MC_INVALID_PARAMS;
    }
    if ((cfg->field_mask & MC_RC_FIELD_SOFT_PIN_TTL) &&
        (cfg->soft_pin_action != MC_SOFT_PIN_ENABLE)) {
        mc_set_error_detail("soft_pin_ttl_ms needs soft_pin_action ENABLE");
        return MC_INVALID_PARAMS;
    }
    if (cfg->prefer_alloc_in_same_node) {
        if (!(flags & MC_WF_SAME_NODE)) {
            mc_set_error_detail("prefer_alloc_in_same_node is only supported by the "
                                "multi-buffer writes (batch_put_from_multi_buffers)");
            return MC_INVALID_PARAMS;
        }
        if (cfg->replica_num != 1 || cfg->nof_replica_num != 0 || cfg->dfs_replica_num != 0) {
            mc_set_error_detail("prefer_alloc_in_same_node needs replica_num 1 "
                                "(and no disk replicas)");
            return MC_INVALID_PARAMS;
        }
    }
    if ((cfg->preferred_segment != NULL) &&
        (strnlen(cfg->preferred_segment, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR)) {
        mc_set_error_detail("preferred_segment is too long");
        return MC_INVALID_PARAMS;
    }
    if (cfg->field_mask & MC_RC_FIELD_PREFERRED_NOF) {
        if (cfg->preferred_nof_segments_count > MC_WIRE_MAX_PREF_NOF) {
            mc_set_error_detail("preferred_nof_segments has %zu entries (at most %u)",
                                cfg->preferred_nof_segments_count, MC_WIRE_MAX_PREF_NOF);
            return MC_INVALID_PARAMS;
        }
        if ((cfg->preferred_nof_segments_count > 0) && (cfg->nof_replica_num == 0)) {
            mc_set_error_detail("preferred_nof_segments needs nof_replica_num > 0");
            return MC_INVALID_PARAMS;
        }
        for (size_t i = 0; i < cfg->preferred_nof_segments_count; i++) {
            if ((cfg->preferred_nof_segments == NULL) ||
                (cfg->preferred_nof_segments[i] == NULL) ||
                (strnlen(cfg->preferred_nof_segments[i], MC_WIRE_MAX_KEY + 1) >
                 MC_WIRE_MAX_KEY)) {
                mc_set_error_detail("preferred_nof_segments[%zu] is NULL or too long", i);
                return MC_INVALID_PARAMS;
            }
        }
    }
    if (cfg->field_mask & MC_RC_FIELD_GROUP_IDS) {
        if (cfg->group_ids_count != nkeys) {
            mc_set_error_detail("group_ids has %zu entries for %zu key(s)",
                                cfg->group_ids_count, nkeys);
            return MC_INVALID_PARAMS;
        }
        if ((nkeys > 0) && (cfg->group_ids == NULL)) {
            mc_set_error_detail("group_ids is NULL");
            return MC_INVALID_PARAMS;
        }
        for (size_t i = 0; i < nkeys; i++) {
            if ((cfg->group_ids[i] == NULL) ||
                (strnlen(cfg->group_ids[i], MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR)) {
                mc_set_error_detail("group_ids[%zu] is NULL or too long", i);
                return MC_INVALID_PARAMS;
            }
        }
    }
    return MC_OK;
}

/*
 * Wire form of @p cfg for the keys sel[0..nsel) of the call (sel NULL: the
 * identity).  @p gids holds nsel strings.
 */
void mc_store_config_to_wire(const mc_replicate_config_t *cfg, const size_t *sel, size_t nsel,
                             mc_str_t *gids, mc_wire_config_t *w)
{
    mc_replicate_config_t def;

    if (cfg == NULL) {
        mc_replicate_config_init(&def);
        cfg = &def;
    }
    memset(w, 0, sizeof(*w));
    w->replica_num               = cfg->replica_num;
    w->nof_replica_num           = cfg->nof_replica_num;
    w->dfs_replica_num           = cfg->dfs_replica_num;
    w->soft_pin_action           = (uint8_t)cfg->soft_pin_action;
    w->has_soft_pin_ttl          = (cfg->field_mask & MC_RC_FIELD_SOFT_PIN_TTL) ? 1 : 0;
    w->soft_pin_ttl_ms           = w->has_soft_pin_ttl ? cfg->soft_pin_ttl_ms : 0;
    w->with_hard_pin             = cfg->with_hard_pin ? 1 : 0;
    w->preferred_segment         = mc_str_from_cstr(cfg->preferred_segment);
    w->prefer_alloc_in_same_node = cfg->prefer_alloc_in_same_node ? 1 : 0;
    if (cfg->field_mask & MC_RC_FIELD_PREFERRED_NOF) {
        size_t n = MC_MIN(cfg->preferred_nof_segments_count, (size_t)MC_WIRE_MAX_PREF_NOF);
        for (size_t i = 0; i < n; i++)
            w->pref_nof_buf[i] = mc_str_from_cstr(cfg->preferred_nof_segments[i]);
        w->preferred_nof_segments.n = (uint32_t)n;
        w->preferred_nof_segments.v = w->pref_nof_buf;
    }
    if (cfg->field_mask & MC_RC_FIELD_GROUP_IDS) {
        w->has_group_ids = 1;
        for (size_t i = 0; i < nsel; i++)
            gids[i] = mc_str_from_cstr(cfg->group_ids[sel ? sel[i] : i]);
        w->group_ids.n = (uint32_t)nsel;
        w->group_ids.v = gids;
    }
}

/* ---- requests to replicas ---------------------------------------------------------- */

/* Open a segment named by the master (not NUL-terminated on the wire). */
static mc_status_t open_replica_segment(mc_store_h s, mc_str_t name, mc_te_segment_id_t *seg_p)
{
    char buf[MC_STORE_NAME_MAX];
    mc_status_t st;

    if ((name.len == 0) || (name.len >= sizeof(buf)) || memchr(name.ptr, '\0', name.len)) {
        mc_set_error_detail("master named an invalid segment for a replica");
        return MC_INVALID_REPLICA;
    }
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = '\0';
    st            = mc_te_segment_open(s->te, buf, seg_p);
    if (st != MC_OK)
        mc_warn("cannot open segment %s: %s (%s)", buf, mc_status_name(st),
                mc_last_error_detail());
    return st;
}

/*
 * Append the WRITE requests that copy parts[0..n) (total bytes) into one
 * replica, and beside each in @p gens the registration generation of the
 * replica's segment: the holder refuses the write if that memory was
 * registered again since the master placed the replica (a segment
 * unmounted and another mounted at the same addresses).  The replica is
 * validated first: a memory replica in PROCESSING state, big enough, not
 * wrapping the address space.
 */
static mc_status_t replica_writes(mc_store_h s, const mc_wire_replica_t *r,
                                  const mc_iov_t *parts, size_t nparts, uint64_t total,
                                  mc_te_request_t *reqs, uint64_t *gens, size_t *nreq_p)
{
    uint64_t gen = mc_store_replica_gen(r);
    mc_status_t st;
    mc_te_segment_id_t seg;
    uint64_t off = 0;

    /* a NoF replica (type 3) is written like memory: its storage node's
     * engine serves the range from its file segment */
    if (((r->type != MC_WIRE_REPLICA_MEMORY) && (r->type != MC_WIRE_REPLICA_NOF)) ||
        (r->size < total) || (r->addr > UINT64_MAX - total)) {
        mc_set_error_detail("master returned an unusable replica (type %u, %llu bytes for "
                            "a %llu-byte object)", (unsigned)r->type,
                            (unsigned long long)r->size, (unsigned long long)total);
        mc_warn("%s", mc_last_error_detail());
        return MC_INVALID_REPLICA;
    }
    st = open_replica_segment(s, r->segment, &seg);
    if (st != MC_OK)
        return st;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len == 0)
            continue;
        gens[*nreq_p]      = gen;
        mc_te_request_t *q = &reqs[(*nreq_p)++];
        q->op              = MC_TE_WRITE;
        q->local           = (void *)(uintptr_t)parts[i].base;
        q->remote          = r->addr + off;
        q->length          = parts[i].len;
        q->segment         = seg;
        off += parts[i].len;
    }
    return MC_OK;
}

/* Without a staging buffer, upstream cannot write from unregistered memory. */
static mc_status_t check_staging(mc_store_h s, const mc_iov_t *parts, size_t n)
{
    if (s->lbuf_size > 0)
        return MC_OK;
    for (size_t i = 0; i < n; i++) {
        if ((parts[i].len > 0) && !mc_te_mem_is_registered(s->te, parts[i].base, parts[i].len)) {
            mc_set_error_detail("local_buffer_size is 0: writing from unregistered memory "
                                "needs a staging buffer (register the memory or set "
                                "local_buffer_size)");
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

static mc_status_t check_parts(const mc_iov_t *parts, size_t n, uint64_t *total_p)
{
    uint64_t total = 0;
    if ((n > 0) && (parts == NULL)) {
        mc_set_error_detail("parts is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        if ((parts[i].len > 0) && (parts[i].base == NULL)) {
            mc_set_error_detail("part %zu has a NULL base and %zu bytes", i, parts[i].len);
            return MC_INVALID_PARAMS;
        }
        if (parts[i].len > UINT64_MAX - total) {
            mc_set_error_detail("parts add up to more than 2^64 bytes");
            return MC_INVALID_PARAMS;
        }
        total += parts[i].len;
    }
    *total_p = total;
    return MC_OK;
}

/* ---- the two-phase write, shared by put and upsert ---------------------------------- */

/*
 * put and upsert speak the same protocol under different opcodes
 * (docs/protocol.md, PUT_* and UPSERT_*): START allocates (or, for an
 * upsert of an existing key, hands back the buffers to rewrite), the bytes
 * move, END publishes or REVOKE frees.  The messages have identical fields,
 * so every write below runs one code path and only the opcode differs.
 * A put that finds the key taken reports MC_OK (first writer wins); an
 * upsert passes every status of the master through.
 */
typedef enum write_op { WRITE_PUT, WRITE_UPSERT } write_op_t;

static const char *write_op_name(write_op_t op)
{
    return (op == WRITE_UPSERT) ? "upsert" : "put";
}

/* START for one key; on MC_OK *reps borrows from *conn_p. */
static mc_status_t write_start(mc_store_h s, write_op_t op, mc_mconn_t **conn_p, mc_str_t key,
                               uint64_t length, const mc_wire_config_t *config,
                               mc_wire_replica_list_t *reps)
{
    mc_status_t st;
#define WRITE_START_(low)                                                        \
    do {                                                                         \
        mc_wire_##low##_req_t rq_;                                               \
        mc_wire_##low##_resp_t rs_;                                              \
        memset(&rq_, 0, sizeof(rq_));                                            \
        rq_.client_id = s->client_id;                                            \
        rq_.key       = key;                                                     \
        rq_.length    = length;                                                  \
        rq_.config    = *config;                                                 \
        st            = mc_master_pool_call_##low(&s->pool, conn_p, &rq_, &rs_); \
        if (st == MC_OK)                                                         \
            *reps = rs_.replicas;                                                \
    } while (0)
    if (op == WRITE_UPSERT)
        WRITE_START_(upsert_start);
    else
        WRITE_START_(put_start);
#undef WRITE_START_
    return st;
}

/* END (publish) or, with @p revoke, REVOKE (free) one key. */
static mc_status_t write_seal(mc_store_h s, write_op_t op, int revoke, mc_str_t key)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
#define WRITE_SEAL_(low)                                                          \
    do {                                                                          \
        mc_wire_##low##_req_t rq_;                                                \
        mc_wire_##low##_resp_t rs_;                                               \
        memset(&rq_, 0, sizeof(rq_));                                             \
        rq_.client_id = s->client_id;                                             \
        rq_.key       = key;                                                      \
        st            = mc_master_pool_call_##low(&s->pool, &conn, &rq_, &rs_);  \
    } while (0)
    if (op == WRITE_UPSERT) {
        if (revoke)
            WRITE_SEAL_(upsert_revoke);
        else
            WRITE_SEAL_(upsert_end);
    } else {
        if (revoke)
            WRITE_SEAL_(put_revoke);
        else
            WRITE_SEAL_(put_end);
    }
#undef WRITE_SEAL_
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if ((st == MC_OK) && !revoke)
        mc_store_disk_enqueue(s, key); /* docs/tiers.md */
    return st;
}

mc_status_t mc_store_put_seal(mc_store_h s, int revoke, mc_str_t key)
{
    return write_seal(s, WRITE_PUT, revoke, key);
}

/* Free the buffers of a write that cannot finish; keeps the caller's detail. */
static void write_revoke(mc_store_h s, write_op_t op, mc_str_t key)
{
    char detail[512];
    mc_status_t st;

    snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
    st = write_seal(s, op, 1, key);
    if (st != MC_OK)
        mc_warn("%s revoke of %.*s failed: %s", write_op_name(op), (int)MC_MIN(key.len, 128u),
                key.ptr, mc_status_name(st));
    mc_set_error_detail("%s", detail);
}

/*
 * Where the bytes may come from.  A zero-copy write (put_from and friends)
 * promises the caller's memory is registered: anything else is refused
 * before a byte moves.  A copying write needs a staging buffer only when
 * the memory is not registered with the engine (check_staging).
 */
static mc_status_t check_sources(mc_store_h s, const mc_iov_t *parts, size_t n, unsigned flags)
{
    if (!(flags & MC_WF_ZERO_COPY))
        return check_staging(s, parts, n);
    for (size_t i = 0; i < n; i++) {
        if ((parts[i].len > 0) && !mc_store_mem_is_usable(s, parts[i].base, parts[i].len)) {
            mc_set_error_detail("source buffer %zu (%p, %zu bytes) is not registered memory: "
                                "register it with register_buffer or allocate it from the "
                                "store's pool", i, parts[i].base, parts[i].len);
            return MC_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

int mc_store_rdma_stage_wanted(mc_store_h s, const void *base, size_t len,
                               mc_te_segment_id_t seg)
{
    return (strcmp(s->protocol, "rdma") == 0) && (s->lbuf_size != 0) && (len > 0) &&
           (len <= s->lbuf_size) && !mc_te_mem_is_registered(s->te, base, len) &&
           !mc_te_segment_same_host(s->te, seg);
}

/*
 * A put's sources through the staging buffer when some part is
 * unregistered and some memory replica is on another host
 * (mc_store_rdma_stage_wanted), so it goes by RDMA WRITE.  1 with
 * *@p ptr_p / *@p block_p to free after the transfer; 0 (nothing staged:
 * another protocol, all registered or all replicas on this host, no
 * staging buffer or no room now) and the write goes from the caller's
 * memory as before.
 */
static int stage_for_rdma(mc_store_h s, const mc_wire_replica_list_t *reps,
                          const mc_iov_t *parts, size_t nparts, uint64_t total, void **ptr_p,
                          mc_alloc_block_t *block_p)
{
    int need = 0;
    uint8_t *p;

    if ((strcmp(s->protocol, "rdma") != 0) || (total == 0) || (total > s->lbuf_size))
        return 0;
    for (uint32_t r = 0; (r < reps->n) && !need; r++) {
        mc_te_segment_id_t seg;
        if ((reps->v[r].type != MC_WIRE_REPLICA_MEMORY) && (reps->v[r].type != MC_WIRE_REPLICA_NOF))
            continue;
        if (open_replica_segment(s, reps->v[r].segment, &seg) != MC_OK)
            continue; /* the write itself says so */
        for (size_t i = 0; (i < nparts) && !need; i++)
            need = mc_store_rdma_stage_wanted(s, parts[i].base, parts[i].len, seg);
    }
    if (!need || (mc_store_lbuf_alloc(s, total, ptr_p, block_p) != MC_OK))
        return 0;
    p = *ptr_p;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len > 0)
            memcpy(p, parts[i].base, parts[i].len);
        p += parts[i].len;
    }
    return 1;
}

/*
 * The bytes of one write into the replicas @p reps (one transfer; the
 * requests on the stack when they fit).  When @p reps live in the answer
 * on *@p conn_p, that master connection is given back (and cleared) once
 * the requests are built: the bytes move without holding it.
 */
static mc_status_t write_bytes(mc_store_h s, const mc_wire_replica_list_t *reps, mc_str_t key,
                               const mc_iov_t *parts, size_t nparts, uint64_t total,
                               mc_mconn_t **conn_p)
{
    mc_te_request_t stack_reqs[MC_PUT_STACK_REQS];
    uint64_t stack_gens[MC_PUT_STACK_REQS];
    mc_te_request_t *reqs = stack_reqs;
    uint64_t *gens        = stack_gens;
    size_t nreq = 0, cap;
    mc_status_t st                = MC_OK;
    const mc_wire_replica_t *dfs  = NULL;
    mc_wire_replica_t d;
    char dname[64];
    mc_alloc_block_t sblock;
    void *staged = NULL;
    mc_iov_t one;

    if (nparts > SIZE_MAX / sizeof(*reqs) / reps->n) {
        mc_set_error_detail("too many parts");
        return MC_INVALID_PARAMS;
    }
    cap = (size_t)reps->n * nparts;
    if (cap > MC_PUT_STACK_REQS) {
        reqs = malloc(cap * sizeof(*reqs));
        gens = malloc(cap * sizeof(*gens));
        if ((reqs == NULL) || (gens == NULL)) {
            free(reqs);
            free(gens);
            mc_set_error_detail("out of memory for %zu transfer requests", cap);
            return MC_INTERNAL_ERROR;
        }
    }
    if (stage_for_rdma(s, reps, parts, nparts, total, &staged, &sblock)) {
        one    = (mc_iov_t){staged, (size_t)total};
        parts  = &one;
        nparts = 1;
    }
    for (uint32_t i = 0; (i < reps->n) && (st == MC_OK); i++) {
        if ((reps->v[i].type == MC_WIRE_REPLICA_DFS) && (dfs == NULL)) {
            dfs = &reps->v[i]; /* written below, from the file side */
            continue;
        }
        st = replica_writes(s, &reps->v[i], parts, nparts, total, reqs, gens, &nreq);
    }
    /* the replica list stays in the connection's arena until it is
     * reused: the DFS write takes what it needs first */
    if (dfs != NULL) {
        d               = *dfs;
        d.file_path.len = (d.file_path.len < sizeof(dname)) ? d.file_path.len : 0;
        memcpy(dname, dfs->file_path.ptr, d.file_path.len);
        d.file_path.ptr = dname;
    }
    if ((conn_p != NULL) && (*conn_p != NULL)) {
        mc_master_pool_put(&s->pool, *conn_p);
        *conn_p = NULL;
    }
    if ((st == MC_OK) && (dfs != NULL))
        st = mc_store_dfs_write(s, &d, key, parts, nparts, total);
    if (st == MC_OK)
        st = mc_te_transfer_gen(s->te, reqs, gens, nreq, NULL);
    if (staged != NULL)
        mc_store_lbuf_free(s, &sblock);
    if (reqs != stack_reqs) {
        free(reqs);
        free(gens);
    }
    return st;
}

/* A reservation for a put of @p total bytes placed for @p wcfg: a kept
 * one, else a fresh PUT_RESERVE when this shape came lately.  0 when there
 * is none to be had (the caller takes the two-trip path). */
static int resv_get(mc_store_h s, uint64_t total, const mc_wire_config_t *wcfg, mc_resv_t *r)
{
    mc_wire_put_reserve_req_t rq;
    mc_wire_put_reserve_resp_t rs;
    mc_mconn_t *conn = NULL;
    uint64_t sent;
    mc_status_t st;

    if (mc_store_resv_take(s, total, wcfg, r))
        return 1;
    if (!mc_store_resv_seen(s, total, wcfg))
        return 0; /* a shape not seen lately: PUT_START wastes no space */
    memset(&rq, 0, sizeof(rq));
    rq.client_id = s->client_id;
    rq.length    = total;
    rq.config    = *wcfg;
    sent         = mc_now_us();
    st           = mc_master_pool_call_put_reserve(&s->pool, &conn, &rq, &rs);
    if (st == MC_OK)
        st = mc_store_resv_make(r, rs.reservation_id, rs.ttl_ms, sent, conn->view_version,
                                total, wcfg, &rs.replicas);
    else if (st == MC_NOT_SUPPORTED)
        mc_store_resv_disable(s);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return st == MC_OK;
}

/*
 * A put in one master round trip (docs/protocol.md §5.18): the bytes go
 * into a reservation, then PUT_COMMIT publishes them under @p key and
 * brings the reservation for the next put.  Sets *done_p to 0 when the
 * put must take the two-trip path instead (no reservation, or the master
 * no longer knows it); the caller then writes the bytes again from
 * scratch, which is harmless: nothing was published.
 */
static mc_status_t write_one_trip(mc_store_h s, mc_str_t key, const mc_iov_t *parts,
                                  size_t nparts, uint64_t total, const mc_wire_config_t *wcfg,
                                  int *done_p, struct mc_store_query **spec_p)
{
    mc_wire_put_commit_req_t rq;
    mc_wire_put_commit_resp_t rs;
    mc_mconn_t *conn = NULL;
    mc_resv_t r, next;
    uint64_t sent;
    mc_status_t st;

    *done_p = 0;
    if (!resv_get(s, total, wcfg, &r))
        return MC_OK;
    st = write_bytes(s, &r.reps, key, parts, nparts, total, NULL);
    if (st != MC_OK) {
        /* the holder or the segment may be gone (the master frees the
         * buffers itself): PUT_START places the put afresh */
        mc_debug("a reserved write of %.*s failed (%s); putting it anew", (int)key.len, key.ptr,
                 mc_status_name(st));
        mc_store_resv_free(&r);
        return MC_OK;
    }
    memset(&rq, 0, sizeof(rq));
    rq.client_id      = s->client_id;
    rq.key            = key;
    rq.reservation_id = r.id;
    rq.config         = *wcfg;
    rq.renew          = 1;
    sent              = mc_now_us();
    st                = mc_master_pool_call_put_commit(&s->pool, &conn, &rq, &rs);
    if ((conn != NULL) && (conn->view_version != r.view))
        st = MC_OBJECT_NOT_FOUND; /* another master: it knows no reservation of ours */
    switch (st) {
    case MC_OK:
        *done_p = 1;
        if (spec_p != NULL)
            *spec_p = mc_store_spec_build(s, key.ptr, total, &r.reps);
        mc_store_resv_free(&r);
        if ((rs.next_id != 0) &&
            (mc_store_resv_make(&next, rs.next_id, rs.ttl_ms, sent, conn->view_version, total,
                                wcfg, &rs.next) == MC_OK))
            mc_store_resv_give(s, &next);
        mc_store_disk_enqueue(s, key); /* docs/tiers.md */
        break;
    case MC_OBJECT_ALREADY_EXISTS:
        *done_p = 1; /* first writer wins; the reservation is still ours */
        st      = MC_OK;
        mc_store_resv_give(s, &r);
        break;
    case MC_OBJECT_NOT_FOUND: /* expired, segment gone, master restarted */
    case MC_RPC_FAIL:         /* maybe committed: PUT_START then says -705 */
    case MC_RPC_TIMEOUT:
        mc_store_resv_free(&r);
        break;
    default:
        *done_p = 1;
        mc_store_resv_give(s, &r);
        break;
    }
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return *done_p ? st : MC_OK;
}

/* @p spec_p (optional, puts only): where the value went, for the location
 * cache (mc_store_spec_build), when the put stored it. */
static mc_status_t do_write(mc_store_h s, write_op_t op, const char *key, const mc_iov_t *parts,
                            size_t nparts, const mc_replicate_config_t *cfg, unsigned flags,
                            struct mc_store_query **spec_p)
{
    struct mc_store_query *spec = NULL;
    mc_status_t st;
    size_t klen;
    uint64_t total;
    mc_mconn_t *conn = NULL;
    mc_str_t gid, wkey;
    mc_wire_config_t wcfg;
    mc_wire_replica_list_t reps;

    st = mc_store_check_key(key, &klen);
    if (st != MC_OK)
        return st;
    st = check_parts(parts, nparts, &total);
    if (st != MC_OK)
        return st;
    st = mc_store_config_check(cfg, 1, flags);
    if (st == MC_OK)
        st = mc_store_dfs_config_check(s, cfg);
    if (st != MC_OK)
        return st;
    st = check_sources(s, parts, nparts, flags);
    if (st != MC_OK)
        return st;
    if (total == 0)
        return MC_OK; /* upstream stores nothing for an empty value */

    wkey = (mc_str_t){key, (uint32_t)klen};
    mc_store_config_to_wire(cfg, NULL, 1, &gid, &wcfg);
    /* reservations hold memory replicas only: puts that also ask for NoF
     * or DFS replicas take PUT_START (docs/protocol.md §5.18) */
    if ((op == WRITE_PUT) && (wcfg.dfs_replica_num == 0) && (wcfg.nof_replica_num == 0) &&
        mc_store_resv_wanted(s, total)) {
        int done;
        st = write_one_trip(s, wkey, parts, nparts, total, &wcfg, &done, spec_p);
        if (done)
            return st;
    }
    st = write_start(s, op, &conn, wkey, total, &wcfg, &reps);
    if ((op == WRITE_PUT) && (st == MC_OBJECT_ALREADY_EXISTS)) {
        st = MC_OK; /* first writer wins; the old value stays */
        goto done;
    }
    if ((op == WRITE_UPSERT) && (st == MC_INVALID_PARAMS) && (s->dfs != NULL))
        mc_set_error_detail("upsert of %s refused by the master: a same-size upsert of an "
                            "object with a DFS replica, or asking for one, must keep the "
                            "object's replica_num, nof_replica_num and dfs_replica_num "
                            "(docs/tiers.md)", key);
    if (st != MC_OK)
        goto done;

    if (reps.n == 0) {
        mc_set_error_detail("master allocated no replica for %s", key);
        st = MC_INVALID_REPLICA;
        goto revoke;
    }

    /* every replica gets every non-empty part; the bytes move without
     * holding the master connection */
    st = write_bytes(s, &reps, wkey, parts, nparts, total, &conn);
    if (st == MC_INVALID_REPLICA)
        goto revoke;
    if (st != MC_OK) {
        char detail[512];
        snprintf(detail, sizeof(detail), "transfer of %s failed: %s", key,
                 mc_last_error_detail());
        mc_warn("%s of %s (%llu bytes) failed: %s (%s); revoking", write_op_name(op), key,
                (unsigned long long)total, mc_status_name(st), detail);
        mc_set_error_detail("%s", detail);
        goto revoke;
    }
    if ((op == WRITE_PUT) && (spec_p != NULL))
        spec = mc_store_spec_build(s, key, total, &reps);
    st = write_seal(s, op, 0, wkey);
    if ((st == MC_OK) && (spec_p != NULL)) {
        *spec_p = spec;
        spec    = NULL;
    }
    mc_store_query_release(spec);
    goto done;

revoke:
    if (conn != NULL) {
        mc_master_pool_put(&s->pool, conn);
        conn = NULL;
    }
    write_revoke(s, op, wkey);
done:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    return st;
}

/* Bytes of a checked value (metrics). */
static uint64_t iov_total(const mc_iov_t *parts, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += parts[i].len;
    return total;
}

/*
 * A write whose bytes could not reach a holder (dead, or its link cut:
 * the engine gives up within its connect and I/O timeouts) has been
 * revoked; it is tried once more, with a fresh PutStart, unless the
 * configuration pins it to a preferred segment (it would land on the same
 * holder).  The master no longer places on a holder that missed its
 * heartbeats (--client_suspect_heartbeats), so the second placement
 * usually avoids it.
 */
static int write_retryable(mc_status_t st, const mc_replicate_config_t *cfg)
{
    if (st != MC_TRANSFER_FAIL)
        return 0;
    return (cfg == NULL) || (cfg->preferred_segment == NULL) ||
           (cfg->preferred_segment[0] == '\0');
}

/* The embedded backend's single-key write. */
mc_status_t mc_emb_write(mc_store_h s, int upsert, const char *key, const mc_iov_t *parts, size_t n,
                         const mc_replicate_config_t *cfg, unsigned flags)
{
    write_op_t op = upsert ? WRITE_UPSERT : WRITE_PUT;
    uint64_t t0   = mc_store_metrics_now_us();
    mc_status_t st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    struct mc_store_query *spec = NULL;
    st = do_write(s, op, key, parts, n, cfg, flags, (op == WRITE_PUT) ? &spec : NULL);
    if (write_retryable(st, cfg)) {
        mc_info("%s of %s: the transfer failed (%s); once more on a fresh placement",
                write_op_name(op), key, mc_last_error_detail());
        st = do_write(s, op, key, parts, n, cfg, flags, (op == WRITE_PUT) ? &spec : NULL);
    }
    mc_store_cache_drop(s, key); /* what this client had cached may be the old value */
    mc_store_spec_note(s, spec); /* where this put went: a speculative entry */
    mc_store_metrics_record(&s->metrics, MC_MOP_PUT, t0, 1, st != MC_OK,
                            (st == MC_OK) ? iov_total(parts, n) : 0);
    mc_store_leave(s);
    return st;
}

/* Public entry of every single-key write. */
static mc_status_t write_one(mc_store_h s, write_op_t op, const char *key, const mc_iov_t *parts,
                             size_t n, const mc_replicate_config_t *cfg, unsigned flags)
{
    return mc_store_ops(s)->write(s, op == WRITE_UPSERT, key, parts, n, cfg, flags);
}

MC_API mc_status_t mc_store_put(mc_store_h s, const char *key, const void *data, size_t len,
                                const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {data, len};
    return write_one(s, WRITE_PUT, key, &part, 1, cfg, 0);
}

MC_API mc_status_t mc_store_put_parts(mc_store_h s, const char *key, const mc_iov_t *parts,
                                      size_t n, const mc_replicate_config_t *cfg)
{
    return write_one(s, WRITE_PUT, key, parts, n, cfg, 0);
}

MC_API mc_status_t mc_store_upsert(mc_store_h s, const char *key, const void *data, size_t len,
                                   const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {data, len};
    return write_one(s, WRITE_UPSERT, key, &part, 1, cfg, 0);
}

MC_API mc_status_t mc_store_upsert_parts(mc_store_h s, const char *key, const mc_iov_t *parts,
                                         size_t n, const mc_replicate_config_t *cfg)
{
    return write_one(s, WRITE_UPSERT, key, parts, n, cfg, 0);
}

/* put_from / upsert_from of CUDA device memory: copied to host memory
 * first, then written as put / upsert do (docs/cuda.md). */
static mc_status_t staged_write(mc_store_h s, write_op_t kind, const char *key, const void *dev,
                                size_t len, const mc_replicate_config_t *cfg)
{
    mc_iov_t part;
    mc_status_t st;
    void *host = malloc((len > 0) ? len : 1);
    if (host == NULL) {
        mc_set_error_detail("cannot allocate %zu bytes to stage a device write", len);
        return MC_INTERNAL_ERROR;
    }
    st = mc_cuda_copy(host, dev, len);
    if (st == MC_OK) {
        part = (mc_iov_t){host, len};
        st   = write_one(s, kind, key, &part, 1, cfg, 0);
    }
    free(host);
    return st;
}

MC_API mc_status_t mc_store_put_from(mc_store_h s, const char *key, const void *buf, size_t len,
                                     const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {buf, len};
    if (mc_cuda_is_device_ptr(buf))
        return staged_write(s, WRITE_PUT, key, buf, len, cfg);
    return write_one(s, WRITE_PUT, key, &part, 1, cfg, MC_WF_ZERO_COPY);
}

MC_API mc_status_t mc_store_upsert_from(mc_store_h s, const char *key, const void *buf,
                                        size_t len, const mc_replicate_config_t *cfg)
{
    mc_iov_t part = {buf, len};
    if (mc_cuda_is_device_ptr(buf))
        return staged_write(s, WRITE_UPSERT, key, buf, len, cfg);
    return write_one(s, WRITE_UPSERT, key, &part, 1, cfg, MC_WF_ZERO_COPY);
}

/* ---- batch writes ---------------------------------------------------------------------- */

/* The values of a batch: one part per key (values), or counts[i] parts per key (bufs). */
typedef mc_store_write_src_t write_src_t;

static const mc_iov_t *src_parts(const write_src_t *w, size_t i, size_t *n_p)
{
    if (w->values != NULL) {
        *n_p = 1;
        return &w->values[i];
    }
    *n_p = w->counts[i];
    return w->bufs[i];
}

typedef struct batch_put {
    size_t *sel;        /* call index of each key sent to the master */
    mc_str_t *keys;     /* nsel */
    uint64_t *lengths;  /* nsel */
    mc_str_t *gids;     /* nsel */
    int *state;         /* nsel: 0 skipped, 1 allocated, 2 transfer failed */
    mc_te_request_t *reqs;
    uint64_t *gens;     /* per request: its segment's generation */
    size_t *owner;      /* per request: index into sel */
    mc_status_t *tst;   /* per request status */
    size_t nsel, nreq;
    mc_store_commit_t *commit; /* a commit batch: its commit key is held */
} batch_put_t;

static void batch_put_free(batch_put_t *b)
{
    free(b->sel);
    free(b->keys);
    free(b->lengths);
    free(b->gids);
    free(b->state);
    free(b->reqs);
    free(b->gens);
    free(b->owner);
    free(b->tst);
}

/* BATCH_*_START; on MC_OK *results borrows from *conn_p. */
static mc_status_t write_batch_start(mc_store_h s, write_op_t op, mc_mconn_t **conn_p,
                                     const batch_put_t *b, const mc_wire_config_t *config,
                                     mc_wire_result_list_t *results)
{
    mc_status_t st;
#define WRITE_BATCH_START_(low)                                                  \
    do {                                                                         \
        mc_wire_##low##_req_t rq_;                                               \
        mc_wire_##low##_resp_t rs_;                                              \
        memset(&rq_, 0, sizeof(rq_));                                            \
        rq_.client_id = s->client_id;                                            \
        rq_.keys.n    = (uint32_t)b->nsel;                                       \
        rq_.keys.v    = b->keys;                                                 \
        rq_.lengths.n = (uint32_t)b->nsel;                                       \
        rq_.lengths.v = b->lengths;                                              \
        rq_.config    = *config;                                                 \
        st            = mc_master_pool_call_##low(&s->pool, conn_p, &rq_, &rs_); \
        if (st == MC_OK)                                                         \
            *results = rs_.results;                                              \
    } while (0)
    if (op == WRITE_UPSERT)
        WRITE_BATCH_START_(batch_upsert_start);
    else
        WRITE_BATCH_START_(batch_put_start);
#undef WRITE_BATCH_START_
    return st;
}

/* Queue BATCH_*_END (or _REVOKE) of @p keys on @p conn; returns its request id. */
static uint32_t write_batch_seal_encode(mc_store_h s, mc_mconn_t *conn, write_op_t op,
                                        int revoke, mc_str_t *keys, size_t n)
{
    uint32_t id = mc_mconn_take_id(conn);
#define WRITE_BATCH_SEAL_ENC_(low)                               \
    do {                                                         \
        mc_wire_##low##_req_t rq_;                               \
        memset(&rq_, 0, sizeof(rq_));                            \
        rq_.client_id = s->client_id;                            \
        rq_.keys.n    = (uint32_t)n;                             \
        rq_.keys.v    = keys;                                    \
        mc_wire_encode_##low##_req(&conn->wbuf, id, &rq_);       \
    } while (0)
    if (op == WRITE_UPSERT) {
        if (revoke)
            WRITE_BATCH_SEAL_ENC_(batch_upsert_revoke);
        else
            WRITE_BATCH_SEAL_ENC_(batch_upsert_end);
    } else {
        if (revoke)
            WRITE_BATCH_SEAL_ENC_(batch_put_revoke);
        else
            WRITE_BATCH_SEAL_ENC_(batch_put_end);
    }
#undef WRITE_BATCH_SEAL_ENC_
    return id;
}

/* The answer to write_batch_seal_encode(); *statuses borrows from @p conn. */
static mc_status_t write_batch_seal_recv(mc_mconn_t *conn, write_op_t op, int revoke,
                                         uint32_t id, mc_wire_i32_list_t *statuses)
{
    mc_status_t st;
#define WRITE_BATCH_SEAL_RECV_(low)                      \
    do {                                                 \
        mc_wire_##low##_resp_t rs_;                      \
        st = mc_master_recv_##low(conn, id, &rs_);       \
        if (st == MC_OK)                                 \
            *statuses = rs_.statuses;                    \
    } while (0)
    if (op == WRITE_UPSERT) {
        if (revoke)
            WRITE_BATCH_SEAL_RECV_(batch_upsert_revoke);
        else
            WRITE_BATCH_SEAL_RECV_(batch_upsert_end);
    } else {
        if (revoke)
            WRITE_BATCH_SEAL_RECV_(batch_put_revoke);
        else
            WRITE_BATCH_SEAL_RECV_(batch_put_end);
    }
#undef WRITE_BATCH_SEAL_RECV_
    return st;
}

/* Pipelined END (for state 1) and REVOKE (state 2) on one connection. */
static void write_batch_finish(mc_store_h s, write_op_t op, batch_put_t *b,
                               mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *end_keys = NULL, *rev_keys = NULL;
    size_t *end_idx = NULL;
    size_t nend = 0, nrev = 0;
    uint32_t end_id = 0, rev_id = 0;
    mc_wire_i32_list_t rs = {0, NULL};

    end_keys = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*end_keys));
    rev_keys = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*rev_keys));
    end_idx  = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*end_idx));
    if ((end_keys == NULL) || (rev_keys == NULL) || (end_idx == NULL)) {
        mc_set_error_detail("out of memory finishing a batch %s", write_op_name(op));
        st = MC_INTERNAL_ERROR;
        goto fail_all;
    }
    for (size_t j = 0; j < b->nsel; j++) {
        if ((b->state[j] == 1) && (b->commit != NULL) && (b->sel[j] == b->commit->last)) {
            b->commit->held = 1; /* mc_store_commit_seal() ends or revokes it */
        } else if (b->state[j] == 1) {
            end_idx[nend]    = j;
            end_keys[nend++] = b->keys[j];
        } else if (b->state[j] == 2) {
            rev_keys[nrev++] = b->keys[j];
        }
    }
    if ((nend == 0) && (nrev == 0))
        goto out;

    st = mc_master_pool_get(&s->pool, &conn);
    if (st != MC_OK)
        goto fail_all;
    mc_mconn_begin(conn);
    if (nend > 0)
        end_id = write_batch_seal_encode(s, conn, op, 0, end_keys, nend);
    if (nrev > 0)
        rev_id = write_batch_seal_encode(s, conn, op, 1, rev_keys, nrev);
    st = mc_mconn_send(conn);
    if (st != MC_OK)
        goto fail_all;
    if (nend > 0) {
        st = write_batch_seal_recv(conn, op, 0, end_id, &rs);
        if ((st == MC_OK) && (rs.n != nend)) {
            mc_set_error_detail("batch %s end answered %u statuses for %zu keys",
                                write_op_name(op), (unsigned)rs.n, nend);
            conn->broken = 1;
            st           = MC_RPC_FAIL;
        }
        for (size_t k = 0; k < nend; k++) {
            mc_status_t ks = (st == MC_OK) ? (mc_status_t)rs.v[k] : st;
            if (ks > 0)
                ks = MC_RPC_FAIL;
            statuses[b->sel[end_idx[k]]] = ks;
            if (ks == MC_OK)
                mc_store_disk_enqueue(s, end_keys[k]);
        }
        if (conn->broken)
            goto out;
    }
    if (nrev > 0) {
        st = write_batch_seal_recv(conn, op, 1, rev_id, &rs);
        if (st != MC_OK)
            mc_warn("batch %s revoke of %zu keys failed: %s", write_op_name(op), nrev,
                    mc_status_name(st));
    }
    goto out;

fail_all:
    for (size_t j = 0; j < b->nsel; j++)
        if (b->state[j] == 1)
            statuses[b->sel[j]] = st;
out:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    free(end_keys);
    free(rev_keys);
    free(end_idx);
}

/* Per-key validation: bad keys and bad sources fail alone, empty values store nothing. */
static void write_batch_select(mc_store_h s, const char *const *keys, const write_src_t *src,
                               size_t n, unsigned flags, batch_put_t *b, mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        size_t klen, np;
        uint64_t total = 0;
        const mc_iov_t *parts = src_parts(src, i, &np);

        statuses[i] = mc_store_check_key(keys[i], &klen);
        if (statuses[i] == MC_OK)
            statuses[i] = check_parts(parts, np, &total);
        if (statuses[i] == MC_OK)
            statuses[i] = check_sources(s, parts, np, flags);
        if ((statuses[i] != MC_OK) || (total == 0))
            continue; /* an empty value: MC_OK, nothing stored */
        b->sel[b->nsel]     = i;
        b->keys[b->nsel]    = (mc_str_t){keys[i], (uint32_t)klen};
        b->lengths[b->nsel] = total;
        b->nsel++;
    }
}

/* Transfer requests for every allocated replica of every key, upper bound. */
static mc_status_t write_batch_reserve(const write_src_t *src, const mc_wire_result_list_t *res,
                                       batch_put_t *b)
{
    size_t cap = 0;
    const size_t max = SIZE_MAX / sizeof(*b->reqs);

    for (size_t j = 0; j < b->nsel; j++) {
        size_t np;
        const mc_wire_result_t *r = &res->v[j];
        if (r->status != MC_OK)
            continue;
        (void)src_parts(src, b->sel[j], &np);
        if ((r->replicas.n > 0) && (np > (max - cap) / r->replicas.n)) {
            mc_set_error_detail("too many transfer requests for one batch");
            return MC_INVALID_PARAMS;
        }
        cap += (size_t)r->replicas.n * np;
    }
    cap      = MC_MAX(cap, (size_t)1);
    b->reqs  = malloc(cap * sizeof(*b->reqs));
    b->gens  = malloc(cap * sizeof(*b->gens));
    b->owner = malloc(cap * sizeof(*b->owner));
    b->tst   = malloc(cap * sizeof(*b->tst));
    if (!b->reqs || !b->gens || !b->owner || !b->tst) {
        mc_set_error_detail("out of memory for %zu transfer requests", cap);
        return MC_INTERNAL_ERROR;
    }
    return MC_OK;
}

/* The @p nsmall requests of at most MC_TE_RUN_MAX_ITEM_LEN bytes by
 * mc_te_write_direct_gen (or the engine, when it declines), the others by
 * the engine; 0 (nothing moved) when out of memory. */
static int write_batch_split(mc_store_h s, batch_put_t *b, size_t nsmall, mc_status_t *st_p)
{
    const size_t n = b->nreq;
    mc_te_request_t *reqs = malloc(n * sizeof(*reqs));
    uint64_t *gens        = malloc(n * sizeof(*gens));
    mc_status_t *tst      = malloc(n * sizeof(*tst));
    size_t *from          = malloc(n * sizeof(*from)); /* index in b->reqs */
    mc_status_t st, lst;
    size_t i = 0, j = nsmall;

    if (!reqs || !gens || !tst || !from) {
        free(reqs);
        free(gens);
        free(tst);
        free(from);
        return 0;
    }
    for (size_t q = 0; q < n; q++) {
        size_t k   = (b->reqs[q].length <= MC_TE_RUN_MAX_ITEM_LEN) ? i++ : j++;
        reqs[k]    = b->reqs[q];
        gens[k]    = b->gens[q];
        from[k]    = q;
    }
    lst = mc_te_transfer_gen(s->te, reqs + nsmall, gens + nsmall, n - nsmall, tst + nsmall);
    if (mc_te_write_direct_gen(s->te, reqs, gens, nsmall, &st)) {
        for (size_t k = 0; k < nsmall; k++)
            tst[k] = st;
    } else {
        st = mc_te_transfer_gen(s->te, reqs, gens, nsmall, tst);
    }
    for (size_t k = 0; k < n; k++)
        b->tst[from[k]] = tst[k];
    *st_p = (lst != MC_OK) ? lst : st;
    free(reqs);
    free(gens);
    free(tst);
    free(from);
    return 1;
}

/*
 * Move every request of a batch.  When they are all small (<= 64 KiB) and
 * go to one same-host holder whose region is mapped already, they are
 * copied on this thread under one lookup (mc_te_write_direct_gen): a
 * DataProto's ragged column is thousands of row-sized parts, and the
 * engine's per-request work (a lookup, a lock and a full fence each,
 * items handed to workers) then costs about as much CPU as the copies.
 * When a few large ones come with many small ones (a DataProto's string
 * payload beside its rows), the large go to the engine's workers and the
 * small are copied so (write_batch_split).  Anything else -- large
 * values, replicas on several segments, a region not mapped yet, another
 * host -- goes through mc_te_transfer_gen as before.  Fills b->tst; the
 * first failure.
 */
static mc_status_t write_batch_transfer(mc_store_h s, batch_put_t *b)
{
    mc_status_t st;
    size_t nsmall = 0;

    if (mc_te_write_direct_gen(s->te, b->reqs, b->gens, b->nreq, &st)) {
        for (size_t q = 0; q < b->nreq; q++)
            b->tst[q] = st;
        return st;
    }
    for (size_t q = 0; q < b->nreq; q++)
        nsmall += b->reqs[q].length <= MC_TE_RUN_MAX_ITEM_LEN;
    if ((nsmall >= 64) && (nsmall < b->nreq) && ((b->nreq - nsmall) * 8 <= nsmall) &&
        write_batch_split(s, b, nsmall, &st))
        return st;
    return mc_te_transfer_gen(s->te, b->reqs, b->gens, b->nreq, b->tst);
}

/* @p specs (optional, n entries, NULL-filled; puts only): where each value
 * stored went, for the location cache (mc_store_spec_build). */
static mc_status_t do_write_batch(mc_store_h s, write_op_t op, const char *const *keys,
                                  const write_src_t *src, size_t n,
                                  const mc_replicate_config_t *cfg, unsigned flags,
                                  mc_status_t *statuses, struct mc_store_query **specs,
                                  mc_store_commit_t *commit)
{
    mc_status_t st;
    batch_put_t b;
    mc_mconn_t *conn = NULL;
    mc_wire_config_t wcfg;
    mc_wire_result_list_t res;
    int revoke_all = 0;

    memset(&b, 0, sizeof(b));
    b.commit = commit;
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail_all;
    }
    st = mc_store_config_check(cfg, n, flags);
    if (st != MC_OK)
        goto fail_all;

    b.sel     = malloc(n * sizeof(*b.sel));
    b.keys    = malloc(n * sizeof(*b.keys));
    b.lengths = malloc(n * sizeof(*b.lengths));
    b.gids    = malloc(n * sizeof(*b.gids));
    b.state   = calloc(n, sizeof(*b.state));
    if (!b.sel || !b.keys || !b.lengths || !b.gids || !b.state) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail_all;
    }
    write_batch_select(s, keys, src, n, flags, &b, statuses);
    if (b.nsel == 0)
        goto out;

    mc_store_config_to_wire(cfg, b.sel, b.nsel, b.gids, &wcfg);
    st = write_batch_start(s, op, &conn, &b, &wcfg, &res);
    if (st != MC_OK) {
        /* after a transport failure the master may hold allocations */
        revoke_all = (conn != NULL) && conn->broken;
        goto fail_sel;
    }
    if (res.n != b.nsel) {
        mc_set_error_detail("batch %s start answered %u results for %zu keys",
                            write_op_name(op), (unsigned)res.n, b.nsel);
        conn->broken = 1;
        revoke_all   = 1;
        st           = MC_RPC_FAIL;
        goto fail_sel;
    }
    st = write_batch_reserve(src, &res, &b);
    if (st != MC_OK) {
        revoke_all = 1;
        goto fail_sel;
    }

    for (size_t j = 0; j < b.nsel; j++) {
        const mc_wire_result_t *r = &res.v[j];
        size_t i                  = b.sel[j];
        size_t first              = b.nreq;
        size_t np;
        const mc_iov_t *parts     = src_parts(src, i, &np);

        if ((op == WRITE_PUT) && (r->status == MC_OBJECT_ALREADY_EXISTS) && (commit == NULL)) {
            statuses[i] = MC_OK; /* first writer wins */
            continue;
        }
        if (r->status != MC_OK) {
            statuses[i] = (r->status < 0) ? (mc_status_t)r->status : MC_RPC_FAIL;
            continue;
        }
        b.state[j] = 1;
        if (r->replicas.n == 0) {
            mc_set_error_detail("master allocated no replica for %s", keys[i]);
            statuses[i] = MC_INVALID_REPLICA;
            b.state[j]  = 2;
            continue;
        }
        for (uint32_t k = 0; k < r->replicas.n; k++) {
            mc_status_t rs = replica_writes(s, &r->replicas.v[k], parts, np, b.lengths[j],
                                            b.reqs, b.gens, &b.nreq);
            if (rs != MC_OK) {
                statuses[i] = rs;
                b.state[j]  = 2;
                b.nreq      = first; /* drop this key's requests */
                break;
            }
        }
        for (size_t q = first; q < b.nreq; q++) {
            b.owner[q] = j;
            b.tst[q]   = MC_TRANSFER_FAIL; /* until the engine says otherwise */
        }
        if ((op == WRITE_PUT) && (specs != NULL) && (b.state[j] == 1))
            specs[i] = mc_store_spec_build(s, keys[i], b.lengths[j], &r->replicas);
    }

    /* one transfer for every replica of every key, no connection held */
    mc_master_pool_put(&s->pool, conn);
    conn = NULL;
    if (b.nreq > 0) {
        st = write_batch_transfer(s, &b);
        if (st != MC_OK) {
            mc_warn("batch %s: some of %zu transfers failed: %s (%s)", write_op_name(op),
                    b.nreq, mc_status_name(st), mc_last_error_detail());
            for (size_t q = 0; q < b.nreq; q++) {
                size_t j = b.owner[q];
                if ((b.tst[q] != MC_OK) && (b.state[j] == 1)) {
                    b.state[j]         = 2;
                    statuses[b.sel[j]] = (b.tst[q] < 0) ? b.tst[q] : st;
                }
            }
        }
    }
    write_batch_finish(s, op, &b, statuses);
    for (size_t j = 0; (specs != NULL) && (j < b.nsel); j++) {
        size_t i = b.sel[j];
        if ((statuses[i] != MC_OK) || (b.state[j] != 1)) {
            mc_store_query_release(specs[i]);
            specs[i] = NULL;
        }
    }
    goto out;

fail_sel:
    for (size_t j = 0; j < b.nsel; j++) {
        statuses[b.sel[j]] = st;
        b.state[j]         = revoke_all ? 2 : 0;
    }
    if (conn != NULL) {
        mc_master_pool_put(&s->pool, conn);
        conn = NULL;
    }
    if (revoke_all) {
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        write_batch_finish(s, op, &b, statuses);
        mc_set_error_detail("%s", detail);
    }
    goto out;

fail_all:
    for (size_t i = 0; i < n; i++)
        statuses[i] = st;
out:
    batch_put_free(&b);
    return mc_store_first_error(statuses, n);
}

/*
 * The keys of a batch whose transfer failed get the single-key second
 * chance of write_one() (write_retryable()), each with its own group id.
 * Returns the batch's status afresh when any was retried, else @p st.
 */
/* The config of key @p i of a batch of @p n: @p cfg with only that key's
 * group id, in @p kcfg when it has group ids. */
static const mc_replicate_config_t *key_config(const mc_replicate_config_t *cfg, size_t n,
                                               size_t i, mc_replicate_config_t *kcfg)
{
    if ((cfg != NULL) && (cfg->group_ids != NULL) && (cfg->group_ids_count == n)) {
        *kcfg                 = *cfg;
        kcfg->group_ids       = &cfg->group_ids[i];
        kcfg->group_ids_count = 1;
        return kcfg;
    }
    return cfg;
}

/* A batch write with DFS replicas, key by key: each record is written by
 * the single-key path (docs/tiers.md §6). */
static mc_status_t write_each(mc_store_h s, write_op_t op, const char *const *keys,
                              const write_src_t *src, size_t n,
                              const mc_replicate_config_t *cfg, unsigned flags,
                              mc_status_t *statuses)
{
    mc_status_t st = mc_store_config_check(cfg, n, flags);

    for (size_t i = 0; i < n; i++) {
        mc_replicate_config_t kcfg;
        size_t np;
        const mc_iov_t *parts = src_parts(src, i, &np);
        statuses[i] = (st != MC_OK) ? st
                                    : do_write(s, op, keys[i], parts, np,
                                               key_config(cfg, n, i, &kcfg), flags, NULL);
    }
    return mc_store_first_error(statuses, n);
}

static mc_status_t batch_retry(mc_store_h s, write_op_t op, const char *const *keys,
                               const write_src_t *src, size_t n,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses, mc_status_t st,
                               const mc_store_commit_t *commit)
{
    size_t retried = 0, recovered = 0;

    for (size_t i = 0; i < n; i++) {
        mc_replicate_config_t kcfg;
        const mc_iov_t *parts;
        size_t np;

        if (!write_retryable(statuses[i], cfg) || ((commit != NULL) && (i == commit->last)))
            continue;
        parts       = src_parts(src, i, &np);
        statuses[i] = do_write(s, op, keys[i], parts, np, key_config(cfg, n, i, &kcfg), flags,
                               NULL);
        retried++;
        recovered += statuses[i] == MC_OK;
    }
    if (retried == 0)
        return st;
    mc_info("batch %s: %zu keys whose transfer failed tried once more, %zu stored",
            write_op_name(op), retried, recovered);
    return mc_store_first_error(statuses, n);
}

/* The embedded batch write, with a commit key held back (commit.c) or
 * none; @p statuses may be NULL. */
static mc_status_t write_batch_commit(mc_store_h s, write_op_t op, const char *const *keys,
                                      const write_src_t *src, size_t n,
                                      const mc_replicate_config_t *cfg, unsigned flags,
                                      mc_status_t *statuses, mc_store_commit_t *commit)
{
    mc_status_t st;
    mc_status_t *own = NULL;
    struct mc_store_query **specs = NULL;
    uint64_t t0      = mc_store_metrics_now_us();
    uint64_t bytes   = 0;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (n == 0)
        goto out;
    if ((keys == NULL) || ((src->values == NULL) && ((src->bufs == NULL) ||
                                                     (src->counts == NULL)))) {
        mc_set_error_detail("keys and values are required");
        st = MC_INVALID_PARAMS;
        fill_statuses(statuses, n, st);
        goto out;
    }
    if (statuses == NULL) {
        own = malloc(n * sizeof(*own));
        if (own == NULL) {
            mc_set_error_detail("out of memory for %zu statuses", n);
            st = MC_INTERNAL_ERROR;
            goto out;
        }
        statuses = own;
    }
    if ((cfg != NULL) && (cfg->dfs_replica_num > 0)) {
        st = write_each(s, op, keys, src, n, cfg, flags, statuses);
    } else {
        if (op == WRITE_PUT)
            specs = calloc(n, sizeof(*specs)); /* none when out of memory */
        st = do_write_batch(s, op, keys, src, n, cfg, flags, statuses, specs, commit);
        st = batch_retry(s, op, keys, src, n, cfg, flags, statuses, st, commit);
        if (commit != NULL) {
            mc_store_commit_seal(s, keys, statuses, specs, commit);
            st = mc_store_first_error(statuses, n);
        }
    }
    for (size_t i = 0; i < n; i++)
        mc_store_cache_drop(s, keys[i]);
    /* do_write_batch left an entry only for keys it stored */
    for (size_t i = 0; (specs != NULL) && (i < n); i++)
        mc_store_spec_note(s, specs[i]);
    free(specs);
    for (size_t i = 0; i < n; i++) {
        size_t np;
        const mc_iov_t *parts = src_parts(src, i, &np);
        if (statuses[i] == MC_OK)
            bytes += iov_total(parts, np);
    }
out:
    if (n > 0)
        mc_store_metrics_record(&s->metrics, MC_MOP_BATCH_PUT, t0, n, st != MC_OK, bytes);
    free(own);
    mc_store_leave(s);
    return st;
}

/* The embedded backend's batch write; @p statuses may be NULL. */
mc_status_t mc_emb_write_batch(mc_store_h s, int upsert, const char *const *keys,
                               const mc_store_write_src_t *src, size_t n,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses)
{
    return write_batch_commit(s, upsert ? WRITE_UPSERT : WRITE_PUT, keys, src, n, cfg, flags,
                              statuses, NULL);
}

/* Public entry of every batch write. */
static mc_status_t write_many(mc_store_h s, write_op_t op, const char *const *keys,
                              const write_src_t *src, size_t n,
                              const mc_replicate_config_t *cfg, unsigned flags,
                              mc_status_t *statuses)
{
    return mc_store_ops(s)->write_batch(s, op == WRITE_UPSERT, keys, src, n, cfg, flags,
                                        statuses);
}

MC_API mc_status_t mc_store_put_batch(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *values, size_t n,
                                      const mc_replicate_config_t *cfg, mc_status_t *statuses)
{
    write_src_t src = {values, NULL, NULL, 1};
    return write_many(s, WRITE_PUT, keys, &src, n, cfg, 0, statuses);
}

MC_API mc_status_t mc_store_upsert_batch(mc_store_h s, const char *const *keys,
                                         const mc_iov_t *values, size_t n,
                                         const mc_replicate_config_t *cfg,
                                         mc_status_t *statuses)
{
    write_src_t src = {values, NULL, NULL, 1};
    return write_many(s, WRITE_UPSERT, keys, &src, n, cfg, 0, statuses);
}

MC_API mc_status_t mc_store_batch_put_from_multi(mc_store_h s, const char *const *keys,
                                                 const mc_iov_t *const *bufs,
                                                 const size_t *counts, size_t n,
                                                 const mc_replicate_config_t *cfg,
                                                 mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_PUT, keys, &src, n, cfg, MC_WF_ZERO_COPY | MC_WF_SAME_NODE,
                      statuses);
}

MC_API mc_status_t mc_store_batch_upsert_from_multi(mc_store_h s, const char *const *keys,
                                                    const mc_iov_t *const *bufs,
                                                    const size_t *counts, size_t n,
                                                    const mc_replicate_config_t *cfg,
                                                    mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_UPSERT, keys, &src, n, cfg, MC_WF_ZERO_COPY | MC_WF_SAME_NODE,
                      statuses);
}

MC_API mc_status_t mc_store_batch_put_parts(mc_store_h s, const char *const *keys,
                                            const mc_iov_t *const *bufs, const size_t *counts,
                                            size_t n, const mc_replicate_config_t *cfg,
                                            mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_PUT, keys, &src, n, cfg, MC_WF_SAME_NODE, statuses);
}

MC_API mc_status_t mc_store_batch_upsert_parts(mc_store_h s, const char *const *keys,
                                               const mc_iov_t *const *bufs,
                                               const size_t *counts, size_t n,
                                               const mc_replicate_config_t *cfg,
                                               mc_status_t *statuses)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_many(s, WRITE_UPSERT, keys, &src, n, cfg, MC_WF_SAME_NODE, statuses);
}

mc_status_t mc_store_put_parts_commit(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *const *bufs, const size_t *counts,
                                      size_t n, const mc_replicate_config_t *cfg,
                                      mc_status_t *statuses, mc_store_commit_t *commit)
{
    write_src_t src = {NULL, bufs, counts, 0};
    return write_batch_commit(s, WRITE_PUT, keys, &src, n, cfg, MC_WF_SAME_NODE, statuses,
                              commit);
}

/* ---- removal ------------------------------------------------------------------------- */

/*
 * The per-key answer of a batch call on the selected keys sel[0..nsel):
 * the master's statuses when the call succeeded with one per key, else the
 * call's status for every key (an answer of the wrong length breaks the
 * connection: it is out of step).  A positive status is not ours: RPC_FAIL.
 */
static void scatter_statuses(mc_mconn_t *conn, mc_status_t st, const char *op,
                             const mc_wire_i32_list_t *got, const size_t *sel, size_t nsel,
                             mc_status_t *statuses)
{
    if ((st == MC_OK) && (got->n != nsel)) {
        mc_set_error_detail("%s answered %u statuses for %zu keys", op, (unsigned)got->n,
                            nsel);
        conn->broken = 1;
        st           = MC_RPC_FAIL;
    }
    for (size_t j = 0; j < nsel; j++) {
        mc_status_t ks   = (st == MC_OK) ? (mc_status_t)got->v[j] : st;
        statuses[sel[j]] = (ks > 0) ? MC_RPC_FAIL : ks;
    }
}

mc_status_t mc_emb_remove(mc_store_h s, const char *key, int force)
{
    mc_status_t st;
    size_t klen;
    mc_mconn_t *conn;
    mc_wire_remove_req_t req;
    mc_wire_remove_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_check_key(key, &klen);
    if (st != MC_OK)
        goto out;
    memset(&req, 0, sizeof(req));
    req.key.ptr = key;
    req.key.len = (uint32_t)klen;
    req.force   = force ? 1 : 0;
    st          = mc_master_pool_call_remove(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_cache_drop(s, key);
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_remove(mc_store_h s, const char *key, int force)
{
    return mc_store_ops(s)->remove(s, key, force);
}

/* One BATCH_REMOVE for the valid keys; invalid ones fail alone. */
mc_status_t mc_store_do_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                     mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *wkeys  = NULL;
    size_t *sel      = NULL;
    size_t nsel      = 0;
    mc_wire_batch_remove_req_t req;
    mc_wire_batch_remove_resp_t resp;

    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        fill_statuses(statuses, n, MC_INVALID_PARAMS);
        return MC_INVALID_PARAMS;
    }
    wkeys = malloc(n * sizeof(*wkeys));
    sel   = malloc(n * sizeof(*sel));
    if ((wkeys == NULL) || (sel == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        fill_statuses(statuses, n, MC_INTERNAL_ERROR);
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    nsel = mc_store_select_keys(keys, n, statuses, wkeys, sel);
    if (nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.keys.n = (uint32_t)nsel;
    req.keys.v = wkeys;
    req.force  = force ? 1 : 0;
    st         = mc_master_pool_call_batch_remove(&s->pool, &conn, &req, &resp);
    scatter_statuses(conn, st, "BATCH_REMOVE", &resp.statuses, sel, nsel, statuses);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
out:
    free(wkeys);
    free(sel);
    return mc_store_first_error(statuses, n);
}

mc_status_t mc_emb_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                mc_status_t *statuses)
{
    mc_status_t st;
    mc_status_t *own = NULL;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (n == 0)
        goto out;
    if (keys == NULL) {
        mc_set_error_detail("keys is NULL");
        st = MC_INVALID_PARAMS;
        fill_statuses(statuses, n, st);
        goto out;
    }
    if (statuses == NULL) {
        own = malloc(n * sizeof(*own));
        if (own == NULL) {
            mc_set_error_detail("out of memory for %zu statuses", n);
            st = MC_INTERNAL_ERROR;
            goto out;
        }
        statuses = own;
    }
    st = mc_store_do_batch_remove(s, keys, n, force, statuses);
    for (size_t i = 0; i < n; i++)
        mc_store_cache_drop(s, keys[i]);
out:
    free(own);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_batch_remove(mc_store_h s, const char *const *keys, size_t n,
                                         int force, mc_status_t *statuses)
{
    return mc_store_ops(s)->batch_remove(s, keys, n, force, statuses);
}

/*
 * The master matches POSIX extended regular expressions (docs/protocol.md,
 * REMOVE_BY_REGEX) and answers MC_INVALID_PARAMS for one that does not
 * compile or passes the bounds of common/regex_limit.h; checking here
 * first gives the caller the reason instead of a bare code, saves the
 * round trip, and keeps regcomp() from unrolling a huge pattern here too.
 */
mc_status_t mc_store_regex_check(const char *regex)
{
    regex_t re;
    int rc;
    char why[256];

    if (regex == NULL) {
        mc_set_error_detail("regex is NULL");
        return MC_INVALID_PARAMS;
    }
    if (strnlen(regex, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR) {
        mc_set_error_detail("regex is longer than %u bytes", (unsigned)MC_WIRE_MAX_STR);
        return MC_INVALID_PARAMS;
    }
    if (mc_regex_check(regex, strlen(regex), why, sizeof(why)) != 0) {
        mc_set_error_detail("%s", why);
        return MC_INVALID_PARAMS;
    }
    rc = regcomp(&re, regex, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        regerror(rc, &re, why, sizeof(why));
        mc_set_error_detail("regex \"%.64s\" is not a POSIX extended regular expression: %s",
                            regex, why);
        return MC_INVALID_PARAMS;
    }
    regfree(&re);
    return MC_OK;
}

mc_status_t mc_emb_remove_by_regex(mc_store_h s, const char *regex, int force, int64_t *count_p)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_remove_by_regex_req_t req;
    mc_wire_remove_by_regex_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = mc_store_regex_check(regex);
    if (st != MC_OK)
        goto out;
    memset(&req, 0, sizeof(req));
    req.regex = mc_str_from_cstr(regex);
    req.force = force ? 1 : 0;
    st        = mc_master_pool_call_remove_by_regex(&s->pool, &conn, &req, &resp);
    if ((st == MC_OK) && (count_p != NULL))
        *count_p = resp.count;
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_cache_clear(s);
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_remove_by_regex(mc_store_h s, const char *regex, int force,
                                            int64_t *count_p)
{
    return mc_store_ops(s)->remove_by_regex(s, regex, force, count_p);
}

mc_status_t mc_emb_remove_all(mc_store_h s, int force, int64_t *count_p)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_wire_remove_all_req_t req;
    mc_wire_remove_all_resp_t resp;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    memset(&req, 0, sizeof(req));
    req.force = force ? 1 : 0;
    st        = mc_master_pool_call_remove_all(&s->pool, &conn, &req, &resp);
    if ((st == MC_OK) && (count_p != NULL))
        *count_p = resp.count;
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    mc_store_cache_clear(s);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_remove_all(mc_store_h s, int force, int64_t *count_p)
{
    return mc_store_ops(s)->remove_all(s, force, count_p);
}

/*
 * One BATCH_REPLICA_CLEAR for the valid keys (docs/protocol.md §5.14).
 * The caller's own client id goes with it: the master clears only objects
 * that id wrote.  Skipped keys are the normal outcome here, so the call
 * succeeds whenever the master answered.
 */
mc_status_t mc_emb_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                       const char *segment_name, mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_status_t *own = NULL;
    mc_str_t *wkeys  = NULL;
    size_t *sel      = NULL;
    size_t nsel;
    mc_wire_batch_replica_clear_req_t req;
    mc_wire_batch_replica_clear_resp_t resp;

    st = mc_store_enter_statuses(s, statuses, n);
    if (st != MC_OK)
        return st;
    if (segment_name == NULL)
        segment_name = "";
    if ((n > 0) && (keys == NULL)) {
        mc_set_error_detail("keys is NULL");
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    if (strnlen(segment_name, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR) {
        mc_set_error_detail("segment_name is longer than %u bytes", (unsigned)MC_WIRE_MAX_STR);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail;
    }
    if (n == 0)
        goto out;
    own   = (statuses == NULL) ? malloc(n * sizeof(*own)) : NULL;
    wkeys = malloc(n * sizeof(*wkeys));
    sel   = malloc(n * sizeof(*sel));
    if (((statuses == NULL) && (own == NULL)) || (wkeys == NULL) || (sel == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }
    if (statuses == NULL)
        statuses = own;
    nsel = mc_store_select_keys(keys, n, statuses, wkeys, sel);
    if (nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.client_id    = s->client_id;
    req.keys.n       = (uint32_t)nsel;
    req.keys.v       = wkeys;
    req.segment_name = mc_str_from_cstr(segment_name);
    st = mc_master_pool_call_batch_replica_clear(&s->pool, &conn, &req, &resp);
    scatter_statuses(conn, st, "BATCH_REPLICA_CLEAR", &resp.statuses, sel, nsel, statuses);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    goto out;
fail:
    fill_statuses(statuses, n, st);
out:
    free(own);
    free(wkeys);
    free(sel);
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                                const char *segment_name, mc_status_t *statuses)
{
    return mc_store_ops(s)->batch_replica_clear(s, keys, n, segment_name, statuses);
}

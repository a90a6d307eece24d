/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle: lifecycle (create/setup/close/destroy) and writes.
 *
 * setup() dials the master first (cheap, and the commonest failure), then
 * starts the transfer engine, maps and registers the staging buffer and
 * the global segment, mounts the segment and starts the heartbeat; any
 * failure unwinds what was done, in reverse.  close() stops the heartbeat
 * before CLIENT_CLOSE (a ping after it would make the master ask for a
 * remount and resurrect the segments), then unregisters memory (which
 * waits for requests peers are being served) before unmapping it.
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
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/store_internal.h"

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
    memset(cfg, 0, sizeof(*cfg));
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
    pthread_mutex_init(&s->lbuf_lock, NULL);
    *store_p = s;
    return MC_OK;
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

    mc_store_heartbeat_stop(s);
    if (tell_master && s->pool_ready) {
        st = master_client_close(s);
        if (st != MC_OK)
            mc_warn("could not tell the master that client %s closed: %s (%s)", s->hostname,
                    mc_status_name(st), mc_last_error_detail());
    }
    mc_store_segments_release(s);
    mc_store_lbuf_cleanup(s);
    if (s->te != NULL) {
        mc_te_destroy(s->te);
        s->te = NULL;
    }
    if (s->pool_ready) {
        mc_master_pool_cleanup(&s->pool);
        s->pool_ready = 0;
    }
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
    const char *hostname, *metadata, *protocol, *devices, *master, *tenant;
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

    mc_uuid_generate(&s->client_id);
    strcpy(s->protocol, protocol);

    /* 1. the master: fail fast when it is not there */
    st = mc_master_target_init(&s->target, master, s->client_id, tenant);
    if (st != MC_OK)
        goto fail;
    st = mc_master_pool_init(&s->pool, &s->target, MC_STORE_POOL_CAP);
    if (st != MC_OK)
        goto fail;
    s->pool_ready = 1;
    st            = mc_master_pool_get(&s->pool, &conn);
    if (st != MC_OK) {
        if (st != MC_RPC_FAIL && st != MC_RPC_TIMEOUT && st != MC_INTERNAL_ERROR)
            goto fail; /* the master refused HELLO: keep its verdict */
        mc_error("setup: %s", mc_last_error_detail());
        st = MC_RPC_FAIL;
        goto fail;
    }
    mc_master_pool_put(&s->pool, conn);
    master_ok = 1;

    /* 2. the transfer engine */
    memset(&tp, 0, sizeof(tp));
    tp.field_mask = MC_TE_PARAM_LOCAL_HOSTNAME | MC_TE_PARAM_METADATA_SERVER |
                    MC_TE_PARAM_PROTOCOL | MC_TE_PARAM_DEVICES;
    tp.local_hostname  = hostname;
    tp.metadata_server = metadata;
    tp.protocol        = protocol;
    tp.devices         = devices;
    st                 = mc_te_create(&tp, &s->te);
    if (st != MC_OK) {
        mc_error("cannot start the transfer engine on %s (%s, %s): %s (%s)", hostname,
                 protocol, metadata, mc_status_name(st), mc_last_error_detail());
        s->te = NULL;
        goto fail;
    }
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

    if (s == NULL) {
        mc_set_error_detail("store handle is NULL");
        return MC_INVALID_PARAMS;
    }
    pthread_rwlock_wrlock(&s->life); /* waits for calls in flight */
    if (s->ready) {
        s->ready = 0;
        teardown(s, 1, &st);
    }
    pthread_rwlock_unlock(&s->life);
    return st;
}

MC_API void mc_store_destroy(mc_store_h s)
{
    if (s == NULL)
        return;
    mc_store_close(s);
    pthread_mutex_destroy(&s->lbuf_lock);
    pthread_mutex_destroy(&s->seg_lock);
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
 */
static mc_status_t config_check(const mc_replicate_config_t *cfg, size_t nkeys)
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
        mc_set_error_detail("prefer_alloc_in_same_node is not supported by put");
        return MC_INVALID_PARAMS;
    }
    if ((cfg->preferred_segment != NULL) &&
        (strnlen(cfg->preferred_segment, MC_WIRE_MAX_STR + 1) > MC_WIRE_MAX_STR)) {
        mc_set_error_detail("preferred_segment is too long");
        return MC_INVALID_PARAMS;
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
static void config_to_wire(const mc_replicate_config_t *cfg, const size_t *sel, size_t nsel,
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
 * replica.  The replica is validated first: a memory replica in PROCESSING
 * state, big enough, not wrapping the address space.
 */
static mc_status_t replica_writes(mc_store_h s, const mc_wire_replica_t *r,
                                  const mc_iov_t *parts, size_t nparts, uint64_t total,
                                  mc_te_request_t *reqs, size_t *nreq_p)
{
    mc_status_t st;
    mc_te_segment_id_t seg;
    uint64_t off = 0;

    if ((r->type != 0) || (r->size < total) || (r->addr > UINT64_MAX - total)) {
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

/* ---- single put ----------------------------------------------------------------------- */

/* Free the buffers of a put that cannot finish; keeps the caller's detail. */
static void put_revoke(mc_store_h s, const char *key, size_t klen)
{
    mc_wire_put_revoke_req_t req;
    mc_wire_put_revoke_resp_t resp;
    mc_mconn_t *conn;
    mc_status_t st;
    char detail[512];

    snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.key.ptr   = key;
    req.key.len   = (uint32_t)klen;
    st            = mc_master_pool_call_put_revoke(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (st != MC_OK)
        mc_warn("PUT_REVOKE of %.*s failed: %s", (int)MC_MIN(klen, 128), key,
                mc_status_name(st));
    mc_set_error_detail("%s", detail);
}

static mc_status_t do_put(mc_store_h s, const char *key, const mc_iov_t *parts, size_t nparts,
                          const mc_replicate_config_t *cfg)
{
    mc_status_t st;
    size_t klen, nreq = 0, cap = 0;
    uint64_t total;
    mc_mconn_t *conn = NULL;
    mc_str_t gid;
    mc_te_request_t stack_reqs[MC_PUT_STACK_REQS];
    mc_te_request_t *reqs = stack_reqs;
    mc_wire_put_start_req_t sreq;
    mc_wire_put_start_resp_t sresp;
    mc_wire_put_end_req_t ereq;
    mc_wire_put_end_resp_t eresp;

    st = mc_store_check_key(key, &klen);
    if (st != MC_OK)
        return st;
    st = check_parts(parts, nparts, &total);
    if (st != MC_OK)
        return st;
    st = config_check(cfg, 1);
    if (st != MC_OK)
        return st;
    if (total == 0)
        return MC_OK; /* upstream stores nothing for an empty value */
    st = check_staging(s, parts, nparts);
    if (st != MC_OK)
        return st;

    memset(&sreq, 0, sizeof(sreq));
    sreq.client_id = s->client_id;
    sreq.key.ptr   = key;
    sreq.key.len   = (uint32_t)klen;
    sreq.length    = total;
    config_to_wire(cfg, NULL, 1, &gid, &sreq.config);
    st = mc_master_pool_call_put_start(&s->pool, &conn, &sreq, &sresp);
    if (st == MC_OBJECT_ALREADY_EXISTS) {
        st = MC_OK; /* first writer wins; the old value stays */
        goto done;
    }
    if (st != MC_OK)
        goto done;

    if (sresp.replicas.n == 0) {
        mc_set_error_detail("master allocated no replica for %s", key);
        st = MC_INVALID_REPLICA;
        goto revoke;
    }
    /* every replica gets every non-empty part */
    if (nparts > SIZE_MAX / sizeof(*reqs) / sresp.replicas.n) {
        mc_set_error_detail("too many parts");
        st = MC_INVALID_PARAMS;
        goto revoke;
    }
    cap = (size_t)sresp.replicas.n * nparts;
    if (cap > MC_PUT_STACK_REQS) {
        reqs = malloc(cap * sizeof(*reqs));
        if (reqs == NULL) {
            reqs = stack_reqs;
            mc_set_error_detail("out of memory for %zu transfer requests", cap);
            st = MC_INTERNAL_ERROR;
            goto revoke;
        }
    }
    for (uint32_t i = 0; i < sresp.replicas.n; i++) {
        st = replica_writes(s, &sresp.replicas.v[i], parts, nparts, total, reqs, &nreq);
        if (st != MC_OK)
            goto revoke;
    }

    /* the bytes move without holding a master connection */
    mc_master_pool_put(&s->pool, conn);
    conn = NULL;
    st   = mc_te_transfer(s->te, reqs, nreq, NULL);
    if (st != MC_OK) {
        char detail[512];
        snprintf(detail, sizeof(detail), "transfer of %s failed: %s", key,
                 mc_last_error_detail());
        mc_warn("writing %s (%llu bytes) failed: %s (%s); revoking", key,
                (unsigned long long)total, mc_status_name(st), detail);
        mc_set_error_detail("%s", detail);
        goto revoke;
    }

    memset(&ereq, 0, sizeof(ereq));
    ereq.client_id = s->client_id;
    ereq.key       = sreq.key;
    st             = mc_master_pool_call_put_end(&s->pool, &conn, &ereq, &eresp);
    goto done;

revoke:
    if (conn != NULL) {
        mc_master_pool_put(&s->pool, conn);
        conn = NULL;
    }
    put_revoke(s, key, klen);
done:
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (reqs != stack_reqs)
        free(reqs);
    return st;
}

MC_API mc_status_t mc_store_put(mc_store_h s, const char *key, const void *data, size_t len,
                                const mc_replicate_config_t *cfg)
{
    mc_status_t st;
    mc_iov_t part = {data, len};

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if ((data == NULL) && (len > 0)) {
        mc_set_error_detail("data is NULL");
        st = MC_INVALID_PARAMS;
    } else {
        st = do_put(s, key, &part, 1, cfg);
    }
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_put_parts(mc_store_h s, const char *key, const mc_iov_t *parts,
                                      size_t n, const mc_replicate_config_t *cfg)
{
    mc_status_t st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = do_put(s, key, parts, n, cfg);
    mc_store_leave(s);
    return st;
}

/* ---- batch put ------------------------------------------------------------------------- */

typedef struct batch_put {
    size_t *sel;        /* call index of each key sent to the master */
    mc_str_t *keys;     /* nsel */
    uint64_t *lengths;  /* nsel */
    mc_str_t *gids;     /* nsel */
    int *state;         /* nsel: 0 skipped, 1 allocated, 2 transfer failed */
    mc_te_request_t *reqs;
    size_t *owner;      /* per request: index into sel */
    mc_status_t *tst;   /* per request status */
    size_t nsel, nreq;
} batch_put_t;

static void batch_put_free(batch_put_t *b)
{
    free(b->sel);
    free(b->keys);
    free(b->lengths);
    free(b->gids);
    free(b->state);
    free(b->reqs);
    free(b->owner);
    free(b->tst);
}

/* Pipelined BATCH_PUT_END (for state 1) and BATCH_PUT_REVOKE (state 2). */
static void batch_put_finish(mc_store_h s, batch_put_t *b, mc_status_t *statuses)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_str_t *end_keys = NULL, *rev_keys = NULL;
    size_t *end_idx = NULL;
    size_t nend = 0, nrev = 0;
    uint32_t end_id = 0, rev_id = 0;

    end_keys = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*end_keys));
    rev_keys = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*rev_keys));
    end_idx  = malloc(MC_MAX(b->nsel, (size_t)1) * sizeof(*end_idx));
    if ((end_keys == NULL) || (rev_keys == NULL) || (end_idx == NULL)) {
        mc_set_error_detail("out of memory finishing a batch put");
        st = MC_INTERNAL_ERROR;
        goto fail_all;
    }
    for (size_t j = 0; j < b->nsel; j++) {
        if (b->state[j] == 1) {
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
    if (nend > 0) {
        mc_wire_batch_put_end_req_t req = {0};
        req.client_id = s->client_id;
        req.keys.n    = (uint32_t)nend;
        req.keys.v    = end_keys;
        end_id        = mc_mconn_take_id(conn);
        mc_wire_encode_batch_put_end_req(&conn->wbuf, end_id, &req);
    }
    if (nrev > 0) {
        mc_wire_batch_put_revoke_req_t req = {0};
        req.client_id = s->client_id;
        req.keys.n    = (uint32_t)nrev;
        req.keys.v    = rev_keys;
        rev_id        = mc_mconn_take_id(conn);
        mc_wire_encode_batch_put_revoke_req(&conn->wbuf, rev_id, &req);
    }
    st = mc_mconn_send(conn);
    if (st != MC_OK)
        goto fail_all;
    if (nend > 0) {
        mc_wire_batch_put_end_resp_t resp;
        st = mc_master_recv_batch_put_end(conn, end_id, &resp);
        if ((st == MC_OK) && (resp.statuses.n != nend)) {
            mc_set_error_detail("BATCH_PUT_END answered %u statuses for %zu keys",
                                (unsigned)resp.statuses.n, nend);
            conn->broken = 1;
            st           = MC_RPC_FAIL;
        }
        for (size_t k = 0; k < nend; k++) {
            mc_status_t ks = (st == MC_OK) ? (mc_status_t)resp.statuses.v[k] : st;
            if (ks > 0)
                ks = MC_RPC_FAIL;
            statuses[b->sel[end_idx[k]]] = ks;
        }
        if (conn->broken)
            goto out;
    }
    if (nrev > 0) {
        mc_wire_batch_put_revoke_resp_t resp;
        st = mc_master_recv_batch_put_revoke(conn, rev_id, &resp);
        if (st != MC_OK)
            mc_warn("BATCH_PUT_REVOKE of %zu keys failed: %s", nrev, mc_status_name(st));
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

static mc_status_t do_put_batch(mc_store_h s, const char *const *keys, const mc_iov_t *values,
                                size_t n, const mc_replicate_config_t *cfg,
                                mc_status_t *statuses)
{
    mc_status_t st;
    batch_put_t b;
    mc_mconn_t *conn = NULL;
    mc_wire_batch_put_start_req_t req;
    mc_wire_batch_put_start_resp_t resp;
    size_t total_reps = 0;
    int revoke_all    = 0;

    memset(&b, 0, sizeof(b));
    if (n > MC_WIRE_MAX_LIST) {
        mc_set_error_detail("a batch holds at most %u keys", (unsigned)MC_WIRE_MAX_LIST);
        st = MC_INVALID_PARAMS;
        goto fail_all;
    }
    st = config_check(cfg, n);
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

    /* per-key validation: bad keys fail alone, empty values store nothing */
    for (size_t i = 0; i < n; i++) {
        size_t klen;
        statuses[i] = mc_store_check_key(keys[i], &klen);
        if (statuses[i] != MC_OK)
            continue;
        if ((values[i].len > 0) && (values[i].base == NULL)) {
            mc_set_error_detail("value %zu has a NULL base", i);
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        if (values[i].len == 0)
            continue; /* MC_OK, nothing stored */
        statuses[i] = check_staging(s, &values[i], 1);
        if (statuses[i] != MC_OK)
            continue;
        b.sel[b.nsel]     = i;
        b.keys[b.nsel]    = (mc_str_t){keys[i], (uint32_t)klen};
        b.lengths[b.nsel] = values[i].len;
        b.nsel++;
    }
    if (b.nsel == 0)
        goto out;

    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.keys.n    = (uint32_t)b.nsel;
    req.keys.v    = b.keys;
    req.lengths.n = (uint32_t)b.nsel;
    req.lengths.v = b.lengths;
    config_to_wire(cfg, b.sel, b.nsel, b.gids, &req.config);
    st = mc_master_pool_call_batch_put_start(&s->pool, &conn, &req, &resp);
    if (st != MC_OK) {
        /* after a transport failure the master may hold allocations */
        revoke_all = (conn != NULL) && conn->broken;
        goto fail_sel;
    }
    if (resp.results.n != b.nsel) {
        mc_set_error_detail("BATCH_PUT_START answered %u results for %zu keys",
                            (unsigned)resp.results.n, b.nsel);
        conn->broken = 1;
        revoke_all   = 1;
        st           = MC_RPC_FAIL;
        goto fail_sel;
    }

    for (size_t j = 0; j < b.nsel; j++) {
        const mc_wire_result_t *r = &resp.results.v[j];
        if (r->status == MC_OK)
            total_reps += r->replicas.n;
    }
    b.reqs  = malloc(MC_MAX(total_reps, (size_t)1) * sizeof(*b.reqs));
    b.owner = malloc(MC_MAX(total_reps, (size_t)1) * sizeof(*b.owner));
    b.tst   = malloc(MC_MAX(total_reps, (size_t)1) * sizeof(*b.tst));
    if (!b.reqs || !b.owner || !b.tst) {
        mc_set_error_detail("out of memory for %zu transfer requests", total_reps);
        st         = MC_INTERNAL_ERROR;
        revoke_all = 1;
        goto fail_sel;
    }

    for (size_t j = 0; j < b.nsel; j++) {
        const mc_wire_result_t *r = &resp.results.v[j];
        size_t i                  = b.sel[j];
        size_t first              = b.nreq;

        if (r->status == MC_OBJECT_ALREADY_EXISTS) {
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
            mc_status_t rs = replica_writes(s, &r->replicas.v[k], &values[i], 1, values[i].len,
                                            b.reqs, &b.nreq);
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
    }

    /* one transfer for every replica of every key, no connection held */
    mc_master_pool_put(&s->pool, conn);
    conn = NULL;
    if (b.nreq > 0) {
        st = mc_te_transfer(s->te, b.reqs, b.nreq, b.tst);
        if (st != MC_OK) {
            mc_warn("batch put: some of %zu transfers failed: %s (%s)", b.nreq,
                    mc_status_name(st), mc_last_error_detail());
            for (size_t q = 0; q < b.nreq; q++) {
                size_t j = b.owner[q];
                if ((b.tst[q] != MC_OK) && (b.state[j] == 1)) {
                    b.state[j]         = 2;
                    statuses[b.sel[j]] = (b.tst[q] < 0) ? b.tst[q] : st;
                }
            }
        }
    }
    batch_put_finish(s, &b, statuses);
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
        batch_put_finish(s, &b, statuses);
        mc_set_error_detail("%s", detail);
    }
    goto out;

fail_all:
    for (size_t i = 0; i < n; i++)
        statuses[i] = st;
out:
    batch_put_free(&b);
    for (size_t i = 0; i < n; i++)
        if (statuses[i] != MC_OK)
            return statuses[i];
    return MC_OK;
}

MC_API mc_status_t mc_store_put_batch(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *values, size_t n,
                                      const mc_replicate_config_t *cfg, mc_status_t *statuses)
{
    mc_status_t st;
    mc_status_t *own = NULL;

    st = mc_store_enter(s);
    if (st != MC_OK) {
        if (statuses != NULL)
            for (size_t i = 0; i < n; i++)
                statuses[i] = st;
        return st;
    }
    if (n == 0) {
        mc_store_leave(s);
        return MC_OK;
    }
    if ((keys == NULL) || (values == NULL)) {
        mc_set_error_detail("keys and values are required");
        st = MC_INVALID_PARAMS;
        if (statuses != NULL)
            for (size_t i = 0; i < n; i++)
                statuses[i] = st;
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
    st = do_put_batch(s, keys, values, n, cfg, statuses);
out:
    free(own);
    mc_store_leave(s);
    return st;
}

/* ---- remove -------------------------------------------------------------------------- */

MC_API mc_status_t mc_store_remove(mc_store_h s, const char *key, int force)
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
out:
    mc_store_leave(s);
    return st;
}

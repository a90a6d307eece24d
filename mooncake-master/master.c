/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lifecycle of the master context: create every part, bind the listeners,
 * run the event loop, tear everything down in reverse order.
 *
 * Timers on the loop (docs/threads.md):
 *  - the tick (MC_MASTER_TICK_MS): client expiry, abandoned puts,
 *    discarded ranges, background eviction (evict.h);
 *  - the metrics line every MC_MASTER_METRICS_S (--enable_metric_reporting).
 * SIGTERM and SIGINT are libevent signal events: they break the loop, and
 * mc_master_destroy() frees everything, so the daemon exits 0 with nothing
 * leaked.  SIGHUP (a terminal hang-up, or logrotate) must not kill a
 * daemon that holds the only copy of the index: it reopens the log file
 * when --log_dir is set and is otherwise logged and ignored.  SIGPIPE is
 * ignored; a peer that vanishes is an EPIPE on its own connection.
 *
 * Owns: the life of mc_master_t: every part created in order, the
 *   listeners bound, the tick, the signals, teardown in reverse order.
 * May call: every folder through its door: index/, durability/, ha/,
 *   tiers/, events/, admin/.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <event2/event.h>

#include "admin/admin.h"
#include "common/auth.h"
#include "common/log.h"
#include "durability/durability.h"
#include "events/events.h"
#include "ha/ha.h"
#include "index/index.h"
#include "master.h"
#include "tiers/tiers.h"

#define MC_MASTER_METRICS_S  10

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_master_t *m = arg;
    uint64_t now   = mc_now_ms();
    (void)fd;
    (void)what;
    mc_master_clients_tick(m, now, mc_master_ha_serving(m));
    mc_master_objects_tick(m, now);
    mc_master_tasks_tick(m, now);
    mc_master_evict_tick(m, now);
    mc_master_nof_evict_tick(m, now);
    mc_master_ha_tick(m);
    mc_durable_tick(m, now);
}

static void metrics_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_master_t *m = arg;
    (void)fd;
    (void)what;
    mc_info("master metrics: keys=%zu segments=%" PRIu32 " clients=%zu connections=%" PRIu32
            " capacity=%" PRIu64 " allocated=%" PRIu64 " (%.1f%%)",
            mc_master_objects_count(m), m->nseg, mc_master_clients_count(m), m->nconns,
            m->capacity_bytes, m->allocated_bytes,
            m->capacity_bytes ? 100.0 * (double)m->allocated_bytes / (double)m->capacity_bytes
                              : 0.0);
}

int mc_master_log_open(const char *dir)
{
    char path[PATH_MAX];
    int fd;

    if (snprintf(path, sizeof(path), "%s/mooncake_master.log", dir) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    /* stdio buffers nothing for stderr; dup2 swaps the file under it */
    if (dup2(fd, STDERR_FILENO) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    close(fd);
    return 0;
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    mc_master_t *m = arg;
    (void)what;
    if (sig == SIGHUP) {
        if (m->cfg->log_dir[0] == '\0') {
            mc_info("received SIGHUP: nothing to reload, carrying on");
        } else if (mc_master_log_open(m->cfg->log_dir) != 0) {
            mc_error("received SIGHUP: cannot reopen the log file in %s: %m; logging to the "
                     "old file", m->cfg->log_dir);
        } else {
            mc_info("received SIGHUP: reopened the log file %s/mooncake_master.log",
                    m->cfg->log_dir);
        }
        return;
    }
    mc_info("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    event_base_loopbreak(m->base);
}

/*
 * --rpc_interface=<nic> (upstream C.1): the NIC's first IPv4 address
 * replaces --rpc_address, so the RPC server binds, and an HA leader
 * advertises, that address.  A NIC without one is fatal, in upstream's
 * words.
 */
static mc_status_t rpc_interface_resolve(mc_master_config_t *cfg)
{
    struct ifaddrs *ifs, *i;
    char addr[INET_ADDRSTRLEN] = "";
    char *dup;

    if (cfg->rpc_interface[0] == '\0')
        return MC_OK;
    if (getifaddrs(&ifs) != 0) {
        mc_error("Failed to resolve rpc_interface=%s: getifaddrs: %m", cfg->rpc_interface);
        return MC_INVALID_PARAMS;
    }
    for (i = ifs; (i != NULL) && (addr[0] == '\0'); i = i->ifa_next) {
        if ((i->ifa_addr != NULL) && (i->ifa_addr->sa_family == AF_INET) &&
            (strcmp(i->ifa_name, cfg->rpc_interface) == 0))
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr,
                      addr, sizeof(addr));
    }
    freeifaddrs(ifs);
    if (addr[0] == '\0') {
        mc_error("Failed to resolve rpc_interface=%s: no such interface or no IPv4 address "
                 "on it", cfg->rpc_interface);
        return MC_INVALID_PARAMS;
    }
    if (strcmp(cfg->rpc_address, "0.0.0.0") != 0)
        mc_warn("--rpc_interface=%s overrides --rpc_address=%s with %s", cfg->rpc_interface,
                cfg->rpc_address, addr);
    dup = strdup(addr);
    if (dup == NULL)
        return MC_INTERNAL_ERROR;
    free(cfg->rpc_address);
    cfg->rpc_address = dup;
    mc_info("--rpc_interface=%s: rpc address %s", cfg->rpc_interface, addr);
    return MC_OK;
}

/*
 * Upstream's start-up rules for --enable_oplog (its FATAL texts): the log
 * is replicated through the HA backend's etcd, so it needs HA, and etcd.
 * Here it selects the log shipped through etcd (ship.c, docs/ha.md).
 */
/* flags.c has warned about names it does not know; those place as
 * random and leave dynamic replication off, as upstream does */
static mc_alloc_strategy_t alloc_strategy_of(const char *name)
{
    if (strcmp(name, "free_ratio_first") == 0)
        return MC_ALLOC_FREE_RATIO_FIRST;
    if (strcmp(name, "local_first") == 0)
        return MC_ALLOC_LOCAL_FIRST;
    return MC_ALLOC_RANDOM;
}

static mc_dynrep_mode_t dynrep_mode_of(const char *name)
{
    if (strcmp(name, "observe") == 0)
        return MC_DYNREP_OBSERVE;
    if (strcmp(name, "enforce") == 0)
        return MC_DYNREP_ENFORCE;
    return MC_DYNREP_OFF;
}

static mc_status_t check_oplog(const mc_master_config_t *cfg)
{
    if (!cfg->enable_oplog)
        return MC_OK;
    if (!cfg->enable_ha) {
        mc_error("enable_oplog requires enable_ha=true");
        return MC_INVALID_PARAMS;
    }
    if (strcmp(cfg->ha_backend_type, "etcd") != 0) {
        mc_error("enable_oplog currently requires ha_backend_type=etcd");
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

mc_status_t mc_master_create(mc_master_config_t *cfg, mc_master_t **m_p)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    mc_master_t *m = calloc(1, sizeof(*m));
    mc_status_t st = MC_INTERNAL_ERROR;
    struct timeval tv;

    if (m == NULL)
        return MC_INTERNAL_ERROR;
    st = check_oplog(cfg);
    if (st != MC_OK) {
        free(m);
        return st;
    }
    st = rpc_interface_resolve(cfg);
    if (st != MC_OK) {
        free(m);
        return st;
    }
    st              = MC_INTERNAL_ERROR;
    m->cfg          = cfg;
    m->alloc_strategy = alloc_strategy_of(cfg->allocation_strategy);
    m->dynrep_mode    = dynrep_mode_of(cfg->dynamic_replication_mode);
    m->view_version = mc_wall_ms();
    mc_master_meta_owner_init(m);
    m->start_ms     = mc_now_ms();

    m->base = event_base_new();
    if (m->base == NULL) {
        mc_error("cannot create the event loop");
        goto fail;
    }
    /* before any event exists: libevent gives each the middle priority */
    _Static_assert(MC_MASTER_PRIO_DEFAULT == MC_MASTER_PRIORITIES / 2,
                   "events left at libevent's default priority run at MC_MASTER_PRIO_DEFAULT");
    if (event_base_priority_init(m->base, MC_MASTER_PRIORITIES) != 0) {
        mc_error("cannot set up the event loop's priorities");
        goto fail;
    }
    if (mc_master_index_init(m) != MC_OK)
        goto fail;
    /* the quota policy first: restored objects are charged to their tenants */
    st = mc_master_tenants_start(m);
    if (st != MC_OK)
        goto fail;
    /* the restored index is in place before anyone can connect */
    st = mc_durable_start(m);
    if (st != MC_OK)
        goto fail;

    if (cfg->auth_token_file[0] != '\0') {
        st = mc_auth_load(cfg->auth_token_file, &m->auth);
        if (st != MC_OK) {
            mc_error("--auth_token_file: %s", mc_last_error_detail());
            goto fail;
        }
        m->auth_replay = calloc(1, sizeof(*m->auth_replay));
        if ((m->auth_replay == NULL) || (mc_auth_replay_init(m->auth_replay) != 0)) {
            free(m->auth_replay);
            m->auth_replay = NULL;
            st             = MC_INTERNAL_ERROR;
            goto fail;
        }
        mc_info("cluster authentication on (%u secrets from %s)", m->auth->nkeys,
                cfg->auth_token_file);
    }
    st = mc_master_rpc_start(m);
    if (st != MC_OK)
        goto fail;
    if (cfg->enable_http_metadata_server) {
        st = mc_meta_server_create(m->base, MC_META_DIALECT_MASTER,
                                   cfg->http_metadata_server_host,
                                   (uint16_t)cfg->http_metadata_server_port, &m->http);
        if (st != MC_OK)
            goto fail;
        mc_meta_server_set_limits(m->http, cfg->http_metadata_max_value_size,
                                  cfg->http_metadata_quota);
        mc_meta_server_set_write_check(m->http, mc_master_meta_write_allowed, m);
        if ((m->auth != NULL) && (mc_meta_server_set_auth(m->http, m->auth) != 0)) {
            st = MC_INTERNAL_ERROR;
            goto fail;
        }
    }

    if (cfg->metrics_port != 0) {
        /* an explicit --metrics_port that cannot be bound is fatal; the
         * default one (9003) may be taken by another master on the host,
         * which must not stop this one */
        st = mc_master_admin_start(m);
        if ((st != MC_OK) && cfg->is_set[MC_MASTER_FLAG_metrics_port])
            goto fail;
        if (st != MC_OK)
            mc_warn("running without the admin/metrics server (--metrics_port=0 disables it)");
    }

    if (cfg->enable_ha) {
        st = mc_master_ha_start(m);
        if (st != MC_OK)
            goto fail;
    }
    /* after HA: an HA leader's event sequence is fenced by its term; a
     * publisher that cannot start leaves the master running (upstream) */
    (void)mc_kv_events_start(m);

    st      = MC_INTERNAL_ERROR;
    m->tick_ev = event_new(m->base, -1, EV_PERSIST, tick_cb, m);
    if (m->tick_ev == NULL)
        goto fail;
    tv.tv_sec  = 0;
    tv.tv_usec = MC_MASTER_TICK_MS * 1000;
    event_add(m->tick_ev, &tv);
    if (cfg->enable_metric_reporting) {
        m->metrics_ev = event_new(m->base, -1, EV_PERSIST, metrics_cb, m);
        if (m->metrics_ev == NULL)
            goto fail;
        tv.tv_sec  = MC_MASTER_METRICS_S;
        tv.tv_usec = 0;
        event_add(m->metrics_ev, &tv);
    }
    _Static_assert(MC_ARRAY_SIZE(sigs) == MC_ARRAY_SIZE(m->sig_ev), "one event per signal");
    for (size_t i = 0; i < MC_ARRAY_SIZE(sigs); i++) {
        m->sig_ev[i] = evsignal_new(m->base, sigs[i], signal_cb, m);
        if ((m->sig_ev[i] == NULL) || (event_add(m->sig_ev[i], NULL) != 0))
            goto fail;
    }
    signal(SIGPIPE, SIG_IGN);
    *m_p = m;
    return MC_OK;

fail:
    mc_master_destroy(m);
    return st;
}

int mc_master_run(mc_master_t *m)
{
    mc_info("mooncake_master %s listening: rpc %s%s%s%s%s (cluster %s, lease %" PRIu64
            " ms, client ttl %" PRId64 " s)",
            mc_version_string(), m->rpc_bound, m->http ? ", http metadata " : "",
            m->http ? mc_meta_server_bound(m->http) : "", m->admin ? ", admin/metrics " : "",
            m->admin ? m->admin_bound : "", m->cfg->cluster_id, m->cfg->default_kv_lease_ttl,
            m->cfg->client_ttl);
    if (event_base_dispatch(m->base) < 0) {
        mc_error("event loop failed");
        return 1;
    }
    return m->fatal ? 1 : 0; /* a signal ended the loop, or a fatal error */
}

void mc_master_destroy(mc_master_t *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < MC_ARRAY_SIZE(m->sig_ev); i++) {
        if (m->sig_ev[i] != NULL)
            event_free(m->sig_ev[i]);
    }
    if (m->metrics_ev != NULL)
        event_free(m->metrics_ev);
    if (m->tick_ev != NULL)
        event_free(m->tick_ev);
    /* a log shipped through etcd is appended under the leader's term: what
     * was appended goes out before the key does */
    if (mc_durable_ship(m) != NULL)
        mc_durable_drain(m);
    /* the events queued so far go out while the leader key still fences
     * their sequence numbers */
    mc_kv_events_stop(m);
    /* first: a leader hands over (deletes its key) before it stops serving */
    mc_master_ha_stop(m);
    mc_master_admin_stop(m);
    mc_meta_server_destroy(m->http);
    mc_auth_replay_cleanup(m->auth_replay);
    free(m->auth_replay);
    mc_auth_destroy(m->auth);
    /* answers held for the operation log go out before the connections
     * close: their changes are durable */
    mc_durable_drain(m);
    mc_master_rpc_stop(m);
    /* what was appended is written and synced before the index goes */
    mc_durable_stop(m);
    mc_master_index_cleanup(m);
    mc_master_tenants_stop(m);
    mc_master_dynrep_stop(m);
    if (m->base != NULL)
        event_base_free(m->base);
    free(m);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Leader election and fencing (ha.h, docs/ha.md), written once against
 * the backend ops table; the etcd backend is at the end of this file, the
 * redis one in ha_redis.c.
 *
 * The election thread is a two-state loop:
 *
 *   STANDBY --key absent, our create-if-absent txn won--> LEADER
 *      ^                                                    |
 *      +-- renewal refused / deadline passed / key not ours-+
 *          (index emptied by the event loop before the next campaign)
 *
 * Every backend request is bounded (the handle's timeout), so stopping the
 * master waits at most one request.  Times are monotonic: a process that
 * was stopped and resumed finds its deadline in the past and refuses
 * requests before the thread has even run again.
 *
 * Owns: the election loop and fencing, written once against the backend
 *   ops table, and the etcd backend.
 * May call: ha/, durability/ (the shipped log at takeover), index/ (the
 *   index emptied on stepping down), ../master.h, libmooncake's coord/etcd.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "common/log.h"
#include "coord/etcd.h"
#include "durability/durability.h"
#include "ha.h"
#include "index/index.h"
#include "master.h"

#define MC_HA_POLL_MS        200 /* standby: how often the leader key is read */
#define MC_HA_RETRY_MS       200 /* leader: retry of a failed renewal */
#define MC_HA_MIN_MARGIN_MS  500

void mc_master_ha_tick(mc_master_t *m)
{
    mc_master_ha_t *h = m->ha;
    if (h == NULL)
        return;
    if (mc_ship_install_pending(h->ship) && (atomic_load(&h->role) == MC_HA_LEADER)) {
        if (mc_durable_ship_install(m) != MC_OK) {
            mc_error("ha: cannot install the index followed from the operation log: stopping");
            m->fatal = 1;
            event_base_loopbreak(m->base);
        }
        return;
    }
    if (!atomic_load(&h->reset_pending))
        return;
    if (h->ship != NULL) {
        /* The writer may hold records etcd refused: this process's log
         * cannot go on.  A restart follows the new leader from etcd. */
        mc_error("ha: stepped down while the operation log is shipped through etcd: exiting "
                 "(status 1); restart this master to stand by and follow the new leader");
        m->fatal = 1;
        event_base_loopbreak(m->base);
        return;
    }
    mc_master_index_reset(m);
    mc_info("ha: index emptied after stepping down; standing by");
    atomic_store(&h->reset_pending, 0);
}

void mc_master_ha_metrics(mc_master_t *m, struct evbuffer *b)
{
    mc_master_ha_t *h = m->ha;
    int leader        = (h == NULL) || (atomic_load(&h->role) == MC_HA_LEADER);
    int64_t term      = (h == NULL) ? 0 : atomic_load(&h->term);

    evbuffer_add_printf(b,
                        "# HELP master_ha_enabled 1 when --enable_ha is on.\n"
                        "# TYPE master_ha_enabled gauge\nmaster_ha_enabled %d\n"
                        "# HELP master_ha_role 1 while this master is the leader, 0 standby.\n"
                        "# TYPE master_ha_role gauge\nmaster_ha_role %d\n"
                        "# HELP master_ha_serving 1 while this master answers requests (a "
                        "leader within its lease).\n"
                        "# TYPE master_ha_serving gauge\nmaster_ha_serving %d\n"
                        "# HELP master_ha_term Create revision of the leader key held as "
                        "leader (0 when standby).\n"
                        "# TYPE master_ha_term gauge\nmaster_ha_term %" PRId64 "\n",
                        h != NULL, leader,
                        (h == NULL) || (leader && (mc_now_ms() < atomic_load(&h->deadline_ms))),
                        leader ? term : 0);
    if (h == NULL)
        return;
    evbuffer_add_printf(b,
                        "# HELP ha_standby_state 1 while standing by, 0 as leader.\n"
                        "# TYPE ha_standby_state gauge\nha_standby_state %d\n"
                        "# HELP ha_state_transitions_total Role changes since start.\n"
                        "# TYPE ha_state_transitions_total counter\n"
                        "ha_state_transitions_total %" PRIu64 "\n"
                        "# HELP master_ha_elections_won_total Elections this master won.\n"
                        "# TYPE master_ha_elections_won_total counter\n"
                        "master_ha_elections_won_total %" PRIu64 "\n"
                        "# HELP master_ha_fenced_requests_total RPC requests refused because "
                        "this master was not a leader within its lease.\n"
                        "# TYPE master_ha_fenced_requests_total counter\n"
                        "master_ha_fenced_requests_total %" PRIu64 "\n"
                        "# HELP master_ha_etcd_up 1 when the last request to the HA "
                        "backend (etcd or redis) succeeded.\n"
                        "# TYPE master_ha_etcd_up gauge\nmaster_ha_etcd_up %d\n",
                        !leader, atomic_load(&h->transitions), atomic_load(&h->elections_won),
                        atomic_load(&h->fenced), atomic_load(&h->etcd_ok));
    if (h->ship != NULL) {
        mc_ship_stats_t ss;
        mc_ship_get_stats(h->ship, &ss);
        evbuffer_add_printf(b,
                            "# HELP master_ha_oplog_seq Last operation-log key in etcd applied "
                            "(standby) or written (leader).\n"
                            "# TYPE master_ha_oplog_seq gauge\nmaster_ha_oplog_seq %" PRIu64 "\n"
                            "# HELP master_ha_oplog_snapshot_seq Log key of the last snapshot "
                            "in etcd written or loaded.\n"
                            "# TYPE master_ha_oplog_snapshot_seq gauge\n"
                            "master_ha_oplog_snapshot_seq %" PRIu64 "\n"
                            "# HELP master_ha_oplog_snapshots_total Snapshots this master "
                            "wrote to etcd.\n"
                            "# TYPE master_ha_oplog_snapshots_total counter\n"
                            "master_ha_oplog_snapshots_total %" PRIu64 "\n"
                            "# HELP master_ha_oplog_refused_total Log entries or snapshots in "
                            "etcd refused (CRC or framing).\n"
                            "# TYPE master_ha_oplog_refused_total counter\n"
                            "master_ha_oplog_refused_total %" PRIu64 "\n"
                            "# HELP master_ha_oplog_puts_total Log keys written to etcd.\n"
                            "# TYPE master_ha_oplog_puts_total counter\n"
                            "master_ha_oplog_puts_total %" PRIu64 "\n",
                            ss.applied_seq, ss.snapshot_seq, ss.snapshots, ss.refused, ss.puts);
    }
}

/* ---- the election thread ---------------------------------------------------------- */

/* Sleep @p ms unless stopped; returns 1 when stopping. */
static int ha_wait(mc_master_ha_t *h, uint64_t ms)
{
    struct timespec ts;
    int stop;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->lock);
    while (!h->stop && (pthread_cond_timedwait(&h->cond, &h->lock, &ts) != ETIMEDOUT))
        ;
    stop = h->stop;
    pthread_mutex_unlock(&h->lock);
    return stop;
}

static void set_leader_view(mc_master_ha_t *h, const char *addr, size_t len, int64_t term)
{
    pthread_mutex_lock(&h->lock);
    len = MC_MIN(len, sizeof(h->leader_addr) - 1);
    memcpy(h->leader_addr, addr, len);
    h->leader_addr[len] = '\0';
    h->leader_term      = term;
    pthread_mutex_unlock(&h->lock);
}

static void note_backend(mc_master_ha_t *h, mc_status_t st)
{
    int ok = (st == MC_OK) || (st == MC_ETCD_KEY_NOT_EXIST) || (st == MC_ETCD_TRANSACTION_FAIL);
    if (atomic_exchange(&h->etcd_ok, ok) != ok) {
        if (ok)
            mc_info("ha: %s at %s answers again", h->ops->name, h->ops->endpoint(h));
        else
            mc_warn("ha: %s at %s does not answer: %s", h->ops->name, h->ops->endpoint(h),
                    mc_last_error_detail());
    }
}

/* Give up leadership: refuse at once, then clean up in the backend (best
 * effort: the backend may be what failed). */
static void step_down(mc_master_ha_t *h, const char *why)
{
    int64_t term = atomic_load(&h->term);
    atomic_store(&h->deadline_ms, 0);
    atomic_store(&h->reset_pending, 1);
    atomic_store(&h->role, MC_HA_STANDBY);
    atomic_store(&h->term, 0);
    atomic_fetch_add(&h->transitions, 1);
    mc_warn("ha: stepping down as leader (term %" PRId64 "): %s", term, why);
    h->ops->release(h, term);
    set_leader_view(h, "", 0, 0);
}

static uint64_t lease_deadline(const mc_master_ha_t *h, uint64_t t0, uint64_t ttl_ms)
{
    return (ttl_ms > h->margin_ms) ? t0 + ttl_ms - h->margin_ms : t0;
}

/* Renew every third of the lease, and never more often than the poll. */
static uint64_t renew_period_ms(uint64_t ttl_ms)
{
    return MC_MAX((uint64_t)MC_HA_POLL_MS, ttl_ms / 3);
}

static void standby_step(mc_master_ha_t *h)
{
    char addr[300];
    int64_t version = 0;
    uint64_t t0, ttl_ms = 0;
    int won = 0;
    mc_status_t st;

    if (atomic_load(&h->reset_pending)) { /* the loop has not emptied the index yet */
        ha_wait(h, 50);
        return;
    }
    if ((h->ship != NULL) && (mc_ship_follow(h->ship, h->etcd) != 0)) {
        /* never take over on a log not read to its end */
        ha_wait(h, MC_HA_POLL_MS);
        return;
    }
    st = h->ops->read_view(h, addr, sizeof(addr), &version);
    note_backend(h, st);
    if (st == MC_OK) {
        set_leader_view(h, addr, strlen(addr), version);
        ha_wait(h, MC_HA_POLL_MS);
        return;
    }
    if (st != MC_ETCD_KEY_NOT_EXIST) {
        ha_wait(h, MC_HA_POLL_MS);
        return;
    }

    /* campaign: the lease's clock starts no earlier than t0 */
    t0      = mc_now_ms();
    addr[0] = '\0';
    version = 0;
    st      = h->ops->acquire(h, &won, &version, &ttl_ms, addr, sizeof(addr));
    note_backend(h, st);
    if ((st == MC_OK) && won && (h->ship != NULL) && (mc_ship_follow(h->ship, h->etcd) != 0)) {
        /* the old leader can no longer append; what it did append must be
         * read before serving */
        mc_warn("ha: elected, but the operation log cannot be read to its end: giving the "
                "term up");
        h->ops->release(h, version);
        ha_wait(h, MC_HA_POLL_MS);
        return;
    }
    if ((st == MC_OK) && won) {
        if (h->ship != NULL)
            mc_ship_elected(h->ship, version);
        atomic_store(&h->term, version);
        atomic_store(&h->deadline_ms, lease_deadline(h, t0, ttl_ms));
        atomic_store(&h->role, MC_HA_LEADER);
        atomic_fetch_add(&h->transitions, 1);
        atomic_fetch_add(&h->elections_won, 1);
        set_leader_view(h, h->self, strlen(h->self), version);
        mc_info("ha: elected leader of %s in %s (term %" PRId64 ", lease %" PRIu64 " ms), "
                "serving at %s",
                h->key, h->ops->name, version, ttl_ms, h->self);
        return;
    }
    if ((st == MC_OK) && (version != 0))
        set_leader_view(h, addr, strlen(addr), version);
    ha_wait(h, MC_HA_POLL_MS);
}

static void leader_step(mc_master_ha_t *h, uint64_t *next_renew_ms)
{
    uint64_t now = mc_now_ms(), t0, ttl_ms = 0;
    const char *why = "leadership lost";
    mc_status_t st;

    if (now < *next_renew_ms) {
        ha_wait(h, *next_renew_ms - now);
        return;
    }
    if (now >= atomic_load(&h->deadline_ms)) {
        step_down(h, "the lease could not be renewed in time");
        return;
    }
    t0 = now;
    st = h->ops->renew(h, &ttl_ms, &why);
    note_backend(h, st);
    if (st == MC_ETCD_KEY_NOT_EXIST) {
        step_down(h, why);
        return;
    }
    if (st != MC_OK) {
        *next_renew_ms = mc_now_ms() + MC_HA_RETRY_MS;
        return;
    }
    atomic_store(&h->deadline_ms, lease_deadline(h, t0, ttl_ms));
    *next_renew_ms = t0 + renew_period_ms(ttl_ms);
}

static void *ha_main(void *arg)
{
    mc_master_ha_t *h     = arg;
    uint64_t next_renew_ms = 0;

    for (;;) {
        pthread_mutex_lock(&h->lock);
        int stop = h->stop;
        pthread_mutex_unlock(&h->lock);
        if (stop)
            break;
        if (atomic_load(&h->role) == MC_HA_LEADER) {
            leader_step(h, &next_renew_ms);
        } else {
            standby_step(h);
            if (atomic_load(&h->role) == MC_HA_LEADER)
                next_renew_ms = mc_now_ms() + renew_period_ms((uint64_t)h->ttl_s * 1000);
        }
    }
    if (atomic_load(&h->role) == MC_HA_LEADER)
        step_down(h, "shutting down; handing over to a standby");
    return NULL;
}

/* ---- the etcd backend ------------------------------------------------------------- */

static mc_status_t etcd_open(mc_master_ha_t *h, const char *eps, const char *cluster_id)
{
    uint64_t ttl_ms = (uint64_t)h->ttl_s * 1000;
    snprintf(h->key, sizeof(h->key), "mooncake-store/%s/master_view", cluster_id);
    /* a request may take a third of the TTL, so a renewal fits twice */
    return mc_etcd_create(eps, (int)MC_MAX(300, ttl_ms / 3), &h->etcd);
}

static void etcd_close(mc_master_ha_t *h)
{
    mc_etcd_destroy(h->etcd);
    h->etcd = NULL;
}

static const char *etcd_endpoint(mc_master_ha_t *h)
{
    return mc_etcd_endpoints(h->etcd);
}

static mc_status_t etcd_read_view(mc_master_ha_t *h, char *addr, size_t cap, int64_t *version_p)
{
    mc_etcd_kv_t kv = {0};
    mc_status_t st  = mc_etcd_get(h->etcd, h->key, &kv, NULL);
    if (st == MC_OK) {
        snprintf(addr, cap, "%.*s", (int)kv.len, kv.value);
        *version_p = kv.create_revision;
    }
    mc_etcd_kv_cleanup(&kv);
    return st;
}

static mc_status_t etcd_acquire(mc_master_ha_t *h, int *won_p, int64_t *version_p,
                                uint64_t *ttl_ms_p, char *addr, size_t cap)
{
    mc_etcd_kv_t kv = {0};
    int64_t lease = 0, ttl = 0;
    int created   = 0;
    mc_status_t st;

    *won_p = 0;
    st     = mc_etcd_lease_grant(h->etcd, h->ttl_s, &lease, &ttl);
    if (st != MC_OK)
        return st;
    st = mc_etcd_create_if_absent(h->etcd, h->key, h->self, strlen(h->self), lease, &created,
                                  &kv);
    if ((st == MC_OK) && created) {
        h->lease_id = lease;
        *won_p      = 1;
        *version_p  = kv.create_revision;
        *ttl_ms_p   = (uint64_t)ttl * 1000;
        mc_etcd_kv_cleanup(&kv);
        return MC_OK;
    }
    /* lost (or could not tell): the lease must not outlive the attempt */
    (void)mc_etcd_lease_revoke(h->etcd, lease);
    if (st == MC_OK) {
        snprintf(addr, cap, "%.*s", (int)kv.len, kv.value);
        *version_p = kv.create_revision;
    }
    mc_etcd_kv_cleanup(&kv);
    return st;
}

static mc_status_t etcd_renew(mc_master_ha_t *h, uint64_t *ttl_ms_p, const char **why_p)
{
    mc_etcd_kv_t kv = {0};
    int64_t ttl     = 0;
    mc_status_t st  = mc_etcd_lease_keepalive(h->etcd, h->lease_id, &ttl);

    if (st == MC_ETCD_KEY_NOT_EXIST) {
        *why_p = "etcd says the lease has expired";
        return st;
    }
    if (st != MC_OK)
        return st;
    *ttl_ms_p = (uint64_t)ttl * 1000;
    /* the key is bound to the lease, but someone may have deleted it */
    st = mc_etcd_get(h->etcd, h->key, &kv, NULL);
    if ((st == MC_ETCD_KEY_NOT_EXIST) ||
        ((st == MC_OK) && (kv.create_revision != atomic_load(&h->term)))) {
        mc_etcd_kv_cleanup(&kv);
        *why_p = "the leader key is gone or belongs to another term";
        return MC_ETCD_KEY_NOT_EXIST;
    }
    mc_etcd_kv_cleanup(&kv);
    return MC_OK;
}

static void etcd_release(mc_master_ha_t *h, int64_t version)
{
    if (version != 0)
        (void)mc_etcd_delete_if_created(h->etcd, h->key, version);
    if (h->lease_id != 0)
        (void)mc_etcd_lease_revoke(h->etcd, h->lease_id);
    h->lease_id = 0;
}

const mc_ha_backend_ops_t mc_ha_etcd_ops = {
    .name      = "etcd",
    .open      = etcd_open,
    .close     = etcd_close,
    .endpoint  = etcd_endpoint,
    .read_view = etcd_read_view,
    .acquire   = etcd_acquire,
    .renew     = etcd_renew,
    .release   = etcd_release,
};

/* ---- start and stop ------------------------------------------------------------------ */

/* The address clients dial: --rpc_address with the bound port, or this
 * host's name when the listener is on a wildcard address. */
static int advertised(mc_master_t *m, char *out, size_t cap)
{
    const char *colon = strrchr(m->rpc_bound, ':');
    const char *host  = m->cfg->rpc_address;
    char name[256];

    if (colon == NULL)
        return -1;
    if ((strcmp(host, "0.0.0.0") == 0) || (strcmp(host, "::") == 0) || (*host == '\0')) {
        if (gethostname(name, sizeof(name)) != 0)
            return -1;
        name[sizeof(name) - 1] = '\0';
        host = name;
        mc_warn("ha: --rpc_address=%s is a wildcard; advertising %s to clients (set "
                "--rpc_address to an address they can reach)",
                m->cfg->rpc_address, host);
    }
    return (snprintf(out, cap, "%s%s", host, colon) < (int)cap) ? 0 : -1;
}

mc_status_t mc_master_ha_start(mc_master_t *m)
{
    const mc_master_config_t *cfg = m->cfg;
    const char *eps = mc_master_ha_endpoints(cfg);
    mc_master_ha_t *h;
    uint64_t ttl_ms;
    mc_status_t st;

    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return MC_INTERNAL_ERROR;
    pthread_condattr_t ca;

    pthread_mutex_init(&h->lock, NULL);
    /* ha_wait's deadlines are monotonic: a clock step must not stretch them */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    m->ha    = h;
    h->ship  = mc_durable_ship(m);
    atomic_store(&h->etcd_ok, 1); /* log the first failure, not the first success */
    h->ttl_s = cfg->ha_lease_ttl_sec;
    ttl_ms   = (uint64_t)h->ttl_s * 1000;
    h->margin_ms = MC_MAX((uint64_t)MC_HA_MIN_MARGIN_MS, ttl_ms / 5);
    if (advertised(m, h->self, sizeof(h->self)) != 0) {
        mc_error("ha: cannot tell which address to advertise for %s", m->rpc_bound);
        return MC_INVALID_PARAMS;
    }
    /* the flags were checked (flags.c): only a compiled-in backend gets here */
    h->ops = (strcmp(cfg->ha_backend_type, "redis") == 0) ? &mc_ha_redis_ops : &mc_ha_etcd_ops;
    st     = h->ops->open(h, eps, cfg->cluster_id);
    if (st != MC_OK) {
        mc_error("ha: %s backend %s: %s", h->ops->name, eps, mc_last_error_detail());
        h->ops = NULL;
        return st;
    }
    if (pthread_create(&h->thread, NULL, ha_main, h) != 0) {
        mc_error("ha: cannot start the election thread: %m");
        return MC_INTERNAL_ERROR;
    }
    h->started = 1;
    mc_info("ha: campaigning for %s in %s %s as %s (lease %" PRId64 " s)", h->key,
            h->ops->name, eps, h->self, h->ttl_s);
    return MC_OK;
}

void mc_master_ha_stop(mc_master_t *m)
{
    mc_master_ha_t *h = m->ha;
    if (h == NULL)
        return;
    if (h->started) {
        pthread_mutex_lock(&h->lock);
        h->stop = 1;
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
    }
    if (h->ops != NULL)
        h->ops->close(h);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    free(h);
    m->ha = NULL;
}

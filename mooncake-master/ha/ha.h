/* SPDX-License-Identifier: Apache-2.0 */
/*
 * High availability: leader election in etcd and fencing (docs/ha.md).
 *
 * With --enable_ha every master campaigns for the key
 * "mooncake-store/<cluster_id>/master_view", whose value is the RPC
 * address clients should dial.  The key is created in a transaction
 * ("if it does not exist") bound to a lease of --ha_lease_ttl_sec; its
 * create revision is the leader's term (the view version clients see).
 * Standbys poll the key and campaign as soon as it is gone.
 *
 * Fencing: the leader renews its lease every third of the TTL.  It counts
 * as leader only until a monotonic deadline, the start of the last
 * confirmed renewal + TTL - a margin, which is before etcd can let the
 * lease lapse.  The RPC dispatcher asks mc_master_ha_serving() before
 * every request: past the deadline (a failed renewal, a partition, a
 * process stopped with SIGSTOP and woken later) every request is refused
 * with UNAVAILABLE_IN_CURRENT_STATUS, which clients read as "find the
 * leader again".  The master then steps down: the event loop empties the
 * index (a standby holds no state; a new leader starts empty and clients
 * refill it by remounting) and only then may it campaign again.
 *
 * Threads: the election runs on its own thread (etcd requests block); it
 * shares only the atomics and the mutex-protected view below with the
 * event loop.
 *
 * Backends: the loop above is written once against mc_ha_backend_ops_t
 * (read the view, acquire, renew, release).  etcd (ha.c) is the lease
 * and create-if-absent transaction described above; redis (ha_redis.c,
 * --ha_backend_type=redis) keeps upstream's HASH
 * "mooncake-store/{<cluster_id>}/master_view" with a PEXPIRE of the
 * lease TTL, changed only by atomic Lua scripts.  The operation log
 * shipped through etcd (ship.c) needs the etcd backend.
 *
 * ha/: this header is the folder's door; other folders include it and no
 * other file of ha/ (master.h includes it for mc_master_ha_t).
 *
 * Owns: leader election and fencing (ha.c, with the etcd backend), the
 *   Redis backend (ha_redis.c), and the read side of the election's state
 *   (view.c: serving or not, role, leader, endpoints), which calls nothing
 *   that calls back into ha/.
 * May call: durability/ (ha.c: the shipped log at takeover; view.c: a
 *   pending install), index/ (ha.c: the index emptied on stepping down),
 *   ../master.h, libmooncake's coord/.  Called by: master.c (start, stop,
 *   tick), and for view.c's reads rpc.c, admin/, durability/ and events/.
 */
#ifndef MC_MASTER_HA_H
#define MC_MASTER_HA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <mooncake/status.h>

struct mc_master;
struct evbuffer;
struct mc_etcd;

typedef enum mc_ha_role {
    MC_HA_STANDBY = 0,
    MC_HA_LEADER  = 1
} mc_ha_role_t;

struct mc_master_ha;

/*
 * One leadership backend.  Every call may block (bounded by the backend's
 * request timeout) and runs on the election thread only.  Statuses:
 * MC_OK; MC_ETCD_KEY_NOT_EXIST for "no leader" (read_view) or "leadership
 * lost" (renew, *why_p saying why); anything else is a backend that did
 * not answer, retried by the loop.
 */
typedef struct mc_ha_backend_ops {
    const char *name; /* --ha_backend_type */
    /* Connect (lazily) to @p connstring; the election key is built here. */
    mc_status_t (*open)(struct mc_master_ha *h, const char *connstring, const char *cluster_id);
    void (*close)(struct mc_master_ha *h);
    /* "host:port" of the backend, for messages. */
    const char *(*endpoint)(struct mc_master_ha *h);
    /* The leader recorded now: its address and view version. */
    mc_status_t (*read_view)(struct mc_master_ha *h, char *addr, size_t cap, int64_t *version_p);
    /* One campaign.  Won: *won_p = 1, *version_p = our view version (the
     * term), *ttl_ms_p = the lease the backend granted.  Lost: *won_p = 0
     * and, when known, the leader seen in @p addr / *version_p (else 0). */
    mc_status_t (*acquire)(struct mc_master_ha *h, int *won_p, int64_t *version_p,
                           uint64_t *ttl_ms_p, char *addr, size_t cap);
    /* Extend our lease once: *ttl_ms_p = its new length. */
    mc_status_t (*renew)(struct mc_master_ha *h, uint64_t *ttl_ms_p, const char **why_p);
    /* Give the term @p version up (best effort: the backend may be what
     * failed); never touches a successor's record. */
    void (*release)(struct mc_master_ha *h, int64_t version);
} mc_ha_backend_ops_t;

extern const mc_ha_backend_ops_t mc_ha_etcd_ops;
extern const mc_ha_backend_ops_t mc_ha_redis_ops;

typedef struct mc_master_ha {
    const mc_ha_backend_ops_t *ops;
    void *backend;             /* the backend's own state (redis) */
    struct mc_etcd *etcd;      /* etcd backend (and the shipped log) */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;      /* stop, cond, leader_addr, leader_term */
    pthread_cond_t cond;
    int stop;

    char key[300];             /* the leader record: etcd key or redis HASH */
    char self[300];            /* our advertised RPC address */
    int64_t ttl_s;
    uint64_t margin_ms;

    _Atomic int role;                  /* mc_ha_role_t */
    _Atomic uint64_t deadline_ms;      /* monotonic: leader until then; 0 = not */
    _Atomic int64_t term;              /* create revision of our key, as leader */
    _Atomic int reset_pending;         /* stepped down: the loop must empty the index */
    _Atomic uint64_t transitions;      /* role changes */
    _Atomic uint64_t elections_won;
    _Atomic uint64_t fenced;           /* requests refused while not serving */
    _Atomic int etcd_ok;               /* the last backend request succeeded */

    /* the leader as last seen (protected by lock) */
    char leader_addr[300];
    int64_t leader_term;               /* 0 = no leader known */
    int64_t lease_id;                  /* HA thread only (etcd) */
    struct mc_ship *ship;              /* the log shipped through etcd, or NULL */
} mc_master_ha_t;

struct mc_master_config;
/* The backend's connection string (upstream's rule): --ha_backend_connstring,
 * else --etcd_endpoints for the etcd backend only; "" when none. */
const char *mc_master_ha_endpoints(const struct mc_master_config *cfg);

/* Connect to the backend and start campaigning (after the RPC listener is bound:
 * its address is what the leader key advertises). */
mc_status_t mc_master_ha_start(struct mc_master *m);
/* Stop the thread; a leader deletes its key and revokes its lease so a
 * standby takes over at once. */
void mc_master_ha_stop(struct mc_master *m);
/* On the event loop's tick: empty the index after a step-down. */
void mc_master_ha_tick(struct mc_master *m);

/* May this master answer requests now?  Always when HA is off.  The RPC
 * dispatcher counts what it refuses in @c fenced. */
int mc_master_ha_serving(struct mc_master *m);
/* "leader" or "standby" (upstream's role strings; always "leader" without HA). */
const char *mc_master_ha_role_name(struct mc_master *m);
/* Runtime state: "serving", "standby" or "stepping_down". */
const char *mc_master_ha_state_name(struct mc_master *m);
/* The leader as this master last saw it: address into @p addr, term; 0 when
 * none is known. */
int64_t mc_master_ha_leader(struct mc_master *m, char *addr, size_t cap);
/* Prometheus lines of the HA section. */
void mc_master_ha_metrics(struct mc_master *m, struct evbuffer *b);

#endif /* MC_MASTER_HA_H */

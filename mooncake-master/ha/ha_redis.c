/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Redis leadership backend (--ha_backend_type=redis; ha.h, docs/ha.md).
 *
 * Upstream's record, so upstream clients and tools read it unchanged:
 *
 *   HASH  mooncake-store/{<cluster_id>}/master_view
 *         leader_address  the advertised RPC address
 *         view_version    decimal string, the term
 *         owner_token     a UUID this process drew at start
 *         PEXPIRE         the lease (--ha_lease_ttl_sec, 5000 ms by default)
 *   counter mooncake-store/{<cluster_id>}/master_view_version (INCR, no TTL)
 *
 * The braces make both keys one Redis Cluster hash slot, which a script
 * touching both needs.  Every change is one Lua script, atomic in Redis:
 * acquire writes the record only when the HASH does not exist; renew and
 * release act only while owner_token is ours, so a leader that was stopped
 * and woke up after a successor took over can neither extend nor delete
 * the successor's record.  The view version comes from a counter that
 * never expires, so terms only grow even after the HASH lapsed.
 *
 * Redis has no watch on a key here: standbys poll the HASH every 200 ms
 * (ha.c's loop), as upstream does.
 *
 * Owns: the Redis leadership backend.
 * May call: ha.h, libmooncake's coord/redis and common/.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "coord/redis.h"
#include "ha.h"

typedef struct ha_redis {
    mc_redis_t *r;
    char counter[300]; /* mooncake-store/{<cluster>}/master_view_version */
    char owner[40];    /* our owner_token (UUID) */
    char ttl_ms[24];   /* the PEXPIRE argument */
} ha_redis_t;

/* KEYS[1] record, KEYS[2] counter; ARGV address, owner, ttl ms.
 * 0: someone holds it; else the new view version. */
static const char acquire_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "local v = redis.call('INCR', KEYS[2])\n"
    "redis.call('HSET', KEYS[1], 'leader_address', ARGV[1], 'view_version', tostring(v),\n"
    "           'owner_token', ARGV[2])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return v\n";

/* KEYS[1] record; ARGV owner, ttl ms.  1 renewed, 0 not ours (or gone). */
static const char renew_lua[] =
    "if redis.call('HGET', KEYS[1], 'owner_token') == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* KEYS[1] record; ARGV owner.  1 deleted, 0 absent, -1 someone else's. */
static const char release_lua[] =
    "local o = redis.call('HGET', KEYS[1], 'owner_token')\n"
    "if not o then return 0 end\n"
    "if o ~= ARGV[1] then return -1 end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n";

static mc_status_t redis_open(mc_master_ha_t *h, const char *conn, const char *cluster_id)
{
    ha_redis_t *b = calloc(1, sizeof(*b));
    mc_uuid_t u;
    mc_status_t st;

    if (b == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    if ((mc_redis_cluster_key(cluster_id, "master_view", h->key, sizeof(h->key)) != 0) ||
        (mc_redis_cluster_key(cluster_id, "master_view_version", b->counter,
                              sizeof(b->counter)) != 0)) {
        free(b);
        mc_set_error_detail("--cluster_id is too long for a redis key");
        return MC_INVALID_PARAMS;
    }
    mc_uuid_generate(&u);
    mc_uuid_format(u, b->owner);
    snprintf(b->ttl_ms, sizeof(b->ttl_ms), "%" PRId64, h->ttl_s * 1000);
    st = mc_redis_create(conn, MC_REDIS_DEFAULT_TIMEOUT_MS, &b->r);
    if (st != MC_OK) {
        free(b);
        return st;
    }
    h->backend = b;
    return MC_OK;
}

static void redis_close(mc_master_ha_t *h)
{
    ha_redis_t *b = h->backend;
    if (b == NULL)
        return;
    mc_redis_destroy(b->r);
    free(b);
    h->backend = NULL;
}

static const char *redis_endpoint(mc_master_ha_t *h)
{
    return mc_redis_endpoint(((ha_redis_t *)h->backend)->r);
}

static mc_status_t redis_read_view(mc_master_ha_t *h, char *addr, size_t cap, int64_t *version_p)
{
    ha_redis_t *b = h->backend;
    return mc_redis_view_read(b->r, h->key, addr, cap, version_p, NULL, 0);
}

static mc_status_t redis_acquire(mc_master_ha_t *h, int *won_p, int64_t *version_p,
                                 uint64_t *ttl_ms_p, char *addr, size_t cap)
{
    ha_redis_t *b           = h->backend;
    const char *keys[2]     = {h->key, b->counter};
    const char *args[3]     = {h->self, b->owner, b->ttl_ms};
    int64_t v               = 0;
    mc_status_t st;

    *won_p = 0;
    st     = mc_redis_eval_int(b->r, acquire_lua, 2, keys, 3, args, &v);
    if (st != MC_OK)
        return st;
    if (v > 0) {
        *won_p     = 1;
        *version_p = v;
        *ttl_ms_p  = (uint64_t)h->ttl_s * 1000;
        return MC_OK;
    }
    /* contended: report whom we lost to, when the record reads whole */
    if (mc_redis_view_read(b->r, h->key, addr, cap, version_p, NULL, 0) != MC_OK)
        *version_p = 0;
    return MC_OK;
}

static mc_status_t redis_renew(mc_master_ha_t *h, uint64_t *ttl_ms_p, const char **why_p)
{
    ha_redis_t *b       = h->backend;
    const char *keys[1] = {h->key};
    const char *args[2] = {b->owner, b->ttl_ms};
    int64_t v           = 0;
    mc_status_t st      = mc_redis_eval_int(b->r, renew_lua, 1, keys, 2, args, &v);

    if (st != MC_OK)
        return st;
    if (v != 1) {
        *why_p = "the redis leader record expired or belongs to another master";
        return MC_ETCD_KEY_NOT_EXIST;
    }
    *ttl_ms_p = (uint64_t)h->ttl_s * 1000;
    return MC_OK;
}

static void redis_release(mc_master_ha_t *h, int64_t version)
{
    ha_redis_t *b       = h->backend;
    const char *keys[1] = {h->key};
    const char *args[1] = {b->owner};
    int64_t v           = 0;

    (void)version; /* the owner token, not the version, says whose record it is */
    if (mc_redis_eval_int(b->r, release_lua, 1, keys, 1, args, &v) != MC_OK)
        mc_warn("ha: cannot release the leader record in redis (it lapses with its TTL): %s",
                mc_last_error_detail());
    else if (v < 0)
        mc_info("ha: the redis leader record already belongs to another master");
}

const mc_ha_backend_ops_t mc_ha_redis_ops = {
    .name      = "redis",
    .open      = redis_open,
    .close     = redis_close,
    .endpoint  = redis_endpoint,
    .read_view = redis_read_view,
    .acquire   = redis_acquire,
    .renew     = redis_renew,
    .release   = redis_release,
};

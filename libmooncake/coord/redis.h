/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small Redis client on hiredis, used by the master for leader election
 * (mooncake-master/ha/ha_redis.c, --ha_backend_type=redis), by store clients
 * to find the leader (master_server_address "redis://host:port") and by
 * the transfer engine for "redis://host:port" metadata (docs/ha.md).
 *
 * Connection string (upstream's rules): "[redis://]host[:port][/]" or
 * "[redis://][v6addr][:port][/]"; the port defaults to 6379 and must be
 * 1-65535; a path after '/' or a bare IPv6 address without brackets (more
 * than one ':') is MC_INVALID_PARAMS.
 *
 * Environment (read at create): MC_REDIS_PASSWORD (AUTH; with
 * MC_REDIS_USERNAME, "AUTH user pass"), MC_REDIS_DB_INDEX 0-255 (SELECT).
 * Connect and every command are bounded by the handle's timeout (3 s by
 * default, as upstream).  The connection is made on first use and made
 * again after any I/O error, so a restarted redis is picked up.
 *
 * Threads: a handle may be shared; commands on it are serialised by a
 * mutex.
 *
 * Status mapping (shared with coord/etcd.h so callers treat both alike):
 * MC_OK; MC_ETCD_KEY_NOT_EXIST (no such key, or no leader recorded);
 * MC_ETCD_OPERATION_ERROR (redis cannot be reached, answered an error, or
 * an answer of an unexpected shape); MC_UNAVAILABLE_IN_CURRENT_MODE (this
 * build has no hiredis).  The thread's error detail says which.
 */
#ifndef MC_COORD_REDIS_H
#define MC_COORD_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

typedef struct mc_redis mc_redis_t;

#define MC_REDIS_DEFAULT_PORT       6379
#define MC_REDIS_DEFAULT_TIMEOUT_MS 3000

/* 1 when this build has a redis client (hiredis), else 0. */
int mc_redis_available(void);

/*
 * Split a connection string into @p host (at least 256 bytes; brackets of
 * an IPv6 address removed) and *port_p.  MC_INVALID_PARAMS, the detail
 * saying why, for an empty host, a bad port, a path or an unbracketed IPv6
 * address.  Needs no hiredis (unit tested).
 */
mc_status_t mc_redis_parse_connstring(const char *conn, char *host, size_t host_cap,
                                      uint16_t *port_p);

/*
 * The HASH of the leader record for @p cluster: "mooncake-store/{<c>}/
 * master_view", <c> being @p cluster with a trailing '/' dropped and every
 * '{' or '}' replaced by '_' (the braces make it a Redis Cluster hash tag).
 * With @p suffix "master_view_version" it names the view-version counter.
 * Returns -1 when it does not fit in @p cap.
 */
int mc_redis_cluster_key(const char *cluster, const char *suffix, char *out, size_t cap);

/* Parse @p conn, read the MC_REDIS_* environment and make a handle;
 * nothing is contacted yet.  @p timeout_ms 0 takes the default. */
mc_status_t mc_redis_create(const char *conn, int timeout_ms, mc_redis_t **r_p);
void mc_redis_destroy(mc_redis_t *r);
/* "host:port" as parsed (for messages). */
const char *mc_redis_endpoint(const mc_redis_t *r);

/* GET @p key into a malloc'd NUL-terminated *val_p (length *len_p, may be
 * NULL).  MC_ETCD_KEY_NOT_EXIST when absent. */
mc_status_t mc_redis_get(mc_redis_t *r, const char *key, char **val_p, size_t *len_p);
/* SET @p key = @p val (@p len bytes). */
mc_status_t mc_redis_set(mc_redis_t *r, const char *key, const void *val, size_t len);
/* DEL @p key; an absent key is not an error. */
mc_status_t mc_redis_del(mc_redis_t *r, const char *key);

/*
 * Read the leader record HASH @p key (HMGET leader_address view_version
 * owner_token).  MC_OK with the address, the view version and (when
 * @p owner is not NULL) the owner token; MC_ETCD_KEY_NOT_EXIST when all
 * three fields are absent; MC_ETCD_OPERATION_ERROR when only some are
 * (a record nobody wrote whole) or the version is not a number.
 */
mc_status_t mc_redis_view_read(mc_redis_t *r, const char *key, char *addr, size_t addr_cap,
                               int64_t *version_p, char *owner, size_t owner_cap);

/*
 * EVAL @p script with @p nkeys keys and @p nargs arguments; the script
 * must return an integer, stored in *result_p.  Scripts run atomically in
 * Redis: the election's acquire / renew / release are such scripts.
 */
mc_status_t mc_redis_eval_int(mc_redis_t *r, const char *script, int nkeys,
                              const char *const *keys, int nargs, const char *const *args,
                              int64_t *result_p);

#endif /* MC_COORD_REDIS_H */

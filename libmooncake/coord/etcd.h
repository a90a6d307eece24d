/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small etcd v3 client over etcd's JSON gateway (POST /v3/...; guarded
 * transactions optionally over its gRPC API: mc_etcd_use_grpc), used by
 * the master for leader election (mooncake-master/ha/ha.c), by store clients
 * to find the leader (master_server_address "etcd://h:p;h2:p") and by the
 * transfer engine for "etcd://h:p" metadata (docs/ha.md).
 *
 * Keys and values are byte strings; the gateway carries them base64
 * encoded and 64-bit numbers as JSON strings, which this file hides.
 *
 * Endpoints: "h:p;h2:p" (';' or ',' separated, an optional "http://" or
 * "etcd://" in front).  A request goes to the endpoint that answered last;
 * when it cannot be reached (connect error, timeout, a member without
 * quorum that answers 5xx) the next one is tried, each endpoint once per
 * request.  Every request is bounded by the handle's timeout.
 *
 * Threads: a handle may be shared; requests on it are serialised by a
 * mutex (they reuse one libcurl handle and its kept-alive connection).
 *
 * Status mapping: MC_OK; MC_ETCD_KEY_NOT_EXIST (no such key, or a lease
 * etcd no longer knows: expired or revoked); MC_ETCD_TRANSACTION_FAIL (a
 * compare did not hold); MC_ETCD_OPERATION_ERROR (no endpoint answered, or
 * an answer that does not parse).  The thread's error detail says which.
 */
#ifndef MC_COORD_ETCD_H
#define MC_COORD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

typedef struct mc_etcd mc_etcd_t;

/* One key as read: its value (NUL-terminated, malloc'd) and revisions. */
typedef struct mc_etcd_kv {
    char *value;
    size_t len;
    int64_t create_revision; /* 0 when the key is absent */
    int64_t mod_revision;
    int64_t lease;           /* 0 = none */
} mc_etcd_kv_t;

/* The default per-request limit. */
#define MC_ETCD_DEFAULT_TIMEOUT_MS 2000

/*
 * Parse @p endpoints and make a handle; nothing is contacted yet.
 * @p timeout_ms bounds each request (all endpoints together get at most
 * that many milliseconds each); 0 takes MC_ETCD_DEFAULT_TIMEOUT_MS.
 * MC_INVALID_PARAMS for an empty or malformed list.
 */
mc_status_t mc_etcd_create(const char *endpoints, int timeout_ms, mc_etcd_t **e_p);
void mc_etcd_destroy(mc_etcd_t *e);
/* The endpoint list as given to create (for messages). */
const char *mc_etcd_endpoints(const mc_etcd_t *e);

/* Free what a read put into @p kv (accepts a zeroed or NULL kv). */
void mc_etcd_kv_cleanup(mc_etcd_kv_t *kv);

/* Read @p key.  MC_ETCD_KEY_NOT_EXIST when absent.  @p revision_p, when
 * not NULL, receives the store revision of the answer. */
mc_status_t mc_etcd_get(mc_etcd_t *e, const char *key, mc_etcd_kv_t *kv_p, int64_t *revision_p);
/* Write @p key = @p val (@p len bytes), bound to @p lease (0 = none). */
mc_status_t mc_etcd_put(mc_etcd_t *e, const char *key, const void *val, size_t len,
                        int64_t lease);
/* Delete @p key; an absent key is not an error. */
mc_status_t mc_etcd_delete(mc_etcd_t *e, const char *key);

/*
 * Transaction "create @p key = @p val with @p lease if it does not exist".
 * MC_OK with *created_p = 1 and cur_p->create_revision set when this call
 * created it; MC_OK with *created_p = 0 and *cur_p = the key that exists
 * otherwise.  @p cur_p receives a value to free with mc_etcd_kv_cleanup.
 */
mc_status_t mc_etcd_create_if_absent(mc_etcd_t *e, const char *key, const void *val, size_t len,
                                     int64_t lease, int *created_p, mc_etcd_kv_t *cur_p);
/* Transaction "delete @p key if its create revision is @p create_revision"
 * (a leader removing its own key, never a successor's).
 * MC_ETCD_TRANSACTION_FAIL when the key is someone else's or absent. */
mc_status_t mc_etcd_delete_if_created(mc_etcd_t *e, const char *key, int64_t create_revision);

/*
 * A guarded transaction: "if @p guard_key's create revision is
 * @p create_revision, do @p ops", in one etcd request.  A leader fences its
 * own writes with it (the guard is its leader key, the revision its term).
 * MC_ETCD_TRANSACTION_FAIL when the compare did not hold (nothing done).
 * Requests are bounded by etcd's request size (1.5 MiB by default, with
 * the base64 of values): callers keep values well under it.
 */
typedef struct mc_etcd_op {
    int del;               /* 0: put key = val; 1: delete [key, range_end) */
    const char *key;
    const void *val;
    size_t len;
    const char *range_end; /* del only; NULL: the key alone */
} mc_etcd_op_t;
mc_status_t mc_etcd_txn_guarded(mc_etcd_t *e, const char *guard_key, int64_t create_revision,
                                const mc_etcd_op_t *ops, size_t nops);

/*
 * Send this handle's guarded transactions (mc_etcd_txn_guarded) through
 * etcd's native gRPC API (KV.Txn over cleartext HTTP/2) instead of the
 * JSON gateway: the log's hot path, sparing etcd the gateway's JSON,
 * base64 and internal hop on every commit.  Everything else on the handle
 * stays on the gateway.  A transaction that gRPC could not send anywhere,
 * before gRPC has ever worked on the handle, goes through the gateway, and
 * if the gateway answers, the handle stays there (an etcd without gRPC;
 * one warning per process); so does every handle when libcurl has no
 * HTTP/2.  The same status mapping; a gRPC UNAVAILABLE or
 * DEADLINE_EXCEEDED (a member without quorum) moves on to the next
 * endpoint, as a 5xx does on the gateway.
 */
void mc_etcd_use_grpc(mc_etcd_t *e);
/* 1 while guarded transactions go over gRPC (for tests and logs). */
int mc_etcd_grpc_active(mc_etcd_t *e);

/*
 * Read the keys in [@p key, @p range_end) in key order, at most @p limit
 * (0: no limit), calling @p cb for each (key, value) until it returns
 * non-zero.  *more_p (may be NULL) is 1 when etcd has more keys than
 * returned.  MC_OK also when the range is empty.
 */
typedef int (*mc_etcd_range_cb)(void *arg, const char *key, size_t keylen, const char *val,
                                size_t len);
mc_status_t mc_etcd_range(mc_etcd_t *e, const char *key, const char *range_end, int64_t limit,
                          mc_etcd_range_cb cb, void *arg, int *more_p);

/* Leases.  grant: a new lease of @p ttl_s seconds (*ttl_p = what etcd
 * granted).  keepalive: renew once; *ttl_p = the TTL it now has;
 * MC_ETCD_KEY_NOT_EXIST when the lease has already expired.  revoke:
 * delete it and every key bound to it (an unknown lease is not an error). */
mc_status_t mc_etcd_lease_grant(mc_etcd_t *e, int64_t ttl_s, int64_t *id_p, int64_t *ttl_p);
mc_status_t mc_etcd_lease_keepalive(mc_etcd_t *e, int64_t id, int64_t *ttl_p);
mc_status_t mc_etcd_lease_revoke(mc_etcd_t *e, int64_t id);

/* Base64 (RFC 4648, with padding), exposed for the unit tests.  encode
 * returns a malloc'd NUL-terminated string or NULL; decode returns 0 and
 * a malloc'd NUL-terminated buffer, or -1 for malformed input. */
char *mc_etcd_b64_encode(const void *data, size_t len);
int mc_etcd_b64_decode(const char *s, size_t slen, char **out_p, size_t *len_p);

#endif /* MC_COORD_ETCD_H */

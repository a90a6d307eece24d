/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP metadata store of the transfer engines (docs/protocol.md §6):
 * one piece of code served by two daemons.
 *
 *  - mooncake_master --enable_http_metadata_server runs it on the master's
 *    event loop (MC_META_DIALECT_MASTER: the texts of upstream's
 *    master-embedded C++ server);
 *  - mooncake_http_metadata_server runs it alone (MC_META_DIALECT_STANDALONE:
 *    the texts of upstream's Python mooncake_http_metadata_server).
 *
 * It depends on libevent and libmooncake's common/ only, never on the
 * master context.  Everything runs on the event loop it is given; nothing
 * here locks.
 *
 * Owns: the metadata store's interface and mc_meta_server_t (admin/).
 * May call: nothing.
 */
#ifndef MC_MASTER_HTTP_H
#define MC_MASTER_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

struct event_base;
struct evhttp;

/* Which upstream server's answers to give where the two differ. */
typedef enum mc_meta_dialect {
    /* Master-embedded: a missing key is 400 "Missing key parameter"; a PUT
     * on an existing key that starts with mooncake/rpc_meta/ is 200
     * "metadata unchanged" with the same body and 400 "Duplicate rpc_meta
     * key not allowed" with another; wrong methods 405 "method not
     * allowed"; unknown paths 404 "not found". */
    MC_META_DIALECT_MASTER,
    /* Standalone (the Python server): the key is stripped of surrounding
     * white space; a missing one is 400 "metadata key is required"; a PUT on
     * any existing key that contains rpc_meta is 400 "Duplicate rpc_meta key
     * not allowed", whatever its body; wrong methods 405 "Method not
     * allowed"; unknown paths 404 "404: Not Found". */
    MC_META_DIALECT_STANDALONE
} mc_meta_dialect_t;

/* A metadata store served over HTTP (opaque). */
typedef struct mc_meta_server mc_meta_server_t;

/*
 * Serve an empty store on @p host:@p port (port 0: any free port) from the
 * event loop @p base.  MC_INVALID_PARAMS (logged) when the address cannot
 * be bound, MC_INTERNAL_ERROR when out of memory.
 */
mc_status_t mc_meta_server_create(struct event_base *base, mc_meta_dialect_t dialect,
                                  const char *host, uint16_t port, mc_meta_server_t **srv_p);

/* Defaults of mc_meta_server_set_limits() (and of the daemons' flags). */
#define MC_META_DEFAULT_MAX_VALUE (16ull << 20)
#define MC_META_DEFAULT_QUOTA     (256ull << 20)

/*
 * Largest body one PUT may carry (413 beyond it) and the most bytes of
 * keys and values the store holds (507 "metadata store is full" beyond
 * it, logged with a rate limit).  A new server has the defaults above.
 */
void mc_meta_server_set_limits(mc_meta_server_t *srv, uint64_t max_value, uint64_t quota);

/*
 * Who may PUT or DELETE a key: @p check is called with the URL-decoded key
 * and the request's X-Mooncake-Owner-Token header (NULL when absent) and
 * returns 1 to allow, 0 to refuse with 403 "metadata key is owned by
 * another client".  None by default (everything is allowed).
 */
typedef int (*mc_meta_write_check_func_t)(void *arg, const char *key, const char *token);
void mc_meta_server_set_write_check(mc_meta_server_t *srv, mc_meta_write_check_func_t check,
                                    void *arg);

struct mc_auth;
struct mc_auth_replay;
struct evhttp_request;
/*
 * Cluster authentication (docs/security.md): with a keyring set, PUT and
 * DELETE must carry a valid, fresh X-Mooncake-Auth signature (401
 * otherwise, before the owner check); GET and HEAD stay open.  @p auth
 * must outlive the server.  -1 when out of memory.
 */
int mc_meta_server_set_auth(mc_meta_server_t *srv, const struct mc_auth *auth);

/*
 * Check a request's X-Mooncake-Auth signature (method, URI as sent, body)
 * against @p auth: 0 when valid; otherwise a 401 has been sent and -1 is
 * returned.  Shared by the metadata server and the admin routes.
 */
int mc_http_auth_check(const struct mc_auth *auth, struct mc_auth_replay *replay,
                       struct evhttp_request *req);

/* The request header that carries a metadata token. */
#define MC_META_OWNER_HEADER "X-Mooncake-Owner-Token"

/* Close the listener and every connection and free the store; accepts NULL. */
void mc_meta_server_destroy(mc_meta_server_t *srv);

/* The address really bound, "host:port" (numeric), for the startup log. */
const char *mc_meta_server_bound(const mc_meta_server_t *srv);

/* Delete one key; 0 if it existed, -1 if not (or @p srv is NULL). */
int mc_meta_server_delete(mc_meta_server_t *srv, const char *key);

/*
 * Bind an evhttp server to host:port and write the address it really
 * listens on ("host:port", numeric) to bound[bound_len].  Shared by the
 * metadata server and the master's admin server.  Logs and returns -1
 * when the address cannot be bound.
 */
int mc_master_evhttp_bind(struct evhttp *h, const char *what, const char *host, uint16_t port,
                          char *bound, size_t bound_len);

#endif /* MC_MASTER_HTTP_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cluster authentication (docs/security.md, docs/protocol.md §9).
 *
 * A keyring loaded from a secrets file proves knowledge of a shared
 * secret with HMAC-SHA256; no secret ever travels.  Two schemes:
 *
 *  - a connection handshake (master RPC, transfer-engine data port):
 *    the server sends CHALLENGE(server nonce), the client answers
 *    PROOF(client nonce, tenant, MAC), the server answers ACCEPT(MAC) or
 *    closes.  Both MACs cover both nonces, the service name and the
 *    tenant, so a proof is bound to one connection and one service and
 *    a recorded one is worthless on the next connection;
 *  - a signed HTTP request (metadata-server writes, admin key listings):
 *    the X-Mooncake-Auth header carries a timestamp, a random nonce and
 *    a MAC over method, path, timestamp, nonce and the body's SHA-256;
 *    the server refuses stale timestamps and nonces it has seen
 *    (mc_auth_replay_t).
 *
 * The secrets file: one entry a line, '#' comments and blank lines
 * ignored.  "SECRET" is a cluster secret; "tenant NAME SECRET" a secret
 * of tenant NAME.  Several secrets of one kind are accepted (rotation);
 * the first one of a kind is the one this process signs with.
 */
#ifndef MC_COMMON_AUTH_H
#define MC_COMMON_AUTH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

#define MC_SHA256_SIZE        32
#define MC_AUTH_NONCE_SIZE    32
#define MC_AUTH_SECRET_MIN    16   /* bytes of a secret, at least */
#define MC_AUTH_SECRET_MAX    1024
#define MC_AUTH_TENANT_MAX    255
#define MC_AUTH_KEYS_MAX      64   /* secrets in one file */

/* §9.1 frames */
#define MC_AUTH_CHALLENGE_SIZE 40  /* "MCAC" u8 version, 3 zero, nonce[32] */
#define MC_AUTH_PROOF_FIXED    72  /* "MCAP" u8 version, u8 0, u16 BE tenant_len,
                                    * nonce[32], mac[32], then tenant bytes */
#define MC_AUTH_ACCEPT_SIZE    40  /* "MCAA" u8 version, 3 zero, mac[32] */
#define MC_AUTH_VERSION        1

/* Services a handshake may be bound to (part of every MAC). */
#define MC_AUTH_SVC_RPC "rpc"
#define MC_AUTH_SVC_TE  "te"

/* HTTP: header name, allowed clock skew, and the header value's size. */
#define MC_AUTH_HTTP_HEADER   "X-Mooncake-Auth"
#define MC_AUTH_HTTP_SKEW_S   60
#define MC_AUTH_HTTP_VALUE_MAX 160

typedef struct mc_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t used;
} mc_sha256_t;

void mc_sha256_init(mc_sha256_t *s);
void mc_sha256_update(mc_sha256_t *s, const void *data, size_t len);
void mc_sha256_final(mc_sha256_t *s, uint8_t out[MC_SHA256_SIZE]);
void mc_sha256(const void *data, size_t len, uint8_t out[MC_SHA256_SIZE]);

typedef struct mc_hmac {
    mc_sha256_t inner;
    uint8_t okey[64];
} mc_hmac_t;

void mc_hmac_init(mc_hmac_t *h, const void *key, size_t klen);
void mc_hmac_update(mc_hmac_t *h, const void *data, size_t len);
void mc_hmac_final(mc_hmac_t *h, uint8_t out[MC_SHA256_SIZE]);
void mc_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                    uint8_t out[MC_SHA256_SIZE]);

/* Compare in time independent of where they differ: 0 when equal. */
int mc_auth_memeq_ct(const void *a, const void *b, size_t len);

typedef struct mc_auth_key {
    uint8_t *secret;
    size_t len;
    char *tenant; /* NULL: a cluster secret */
} mc_auth_key_t;

typedef struct mc_auth {
    mc_auth_key_t keys[MC_AUTH_KEYS_MAX];
    unsigned nkeys;
    char path[256];
} mc_auth_t;

/* Load a secrets file (format above); INVALID_PARAMS with a detail naming
 * the file and line when it cannot be read or is malformed, or holds no
 * secret. */
mc_status_t mc_auth_load(const char *path, mc_auth_t **a_p);
/* Parse secrets from memory (the same format); @p origin names it in errors. */
mc_status_t mc_auth_parse(const char *text, size_t len, const char *origin, mc_auth_t **a_p);
void mc_auth_destroy(mc_auth_t *a);

/* The key this process signs with: the tenant's first secret when it has
 * one here, else the first cluster secret; NULL when there is none. */
const mc_auth_key_t *mc_auth_signing_key(const mc_auth_t *a, const char *tenant);

/* Fill @p buf with random bytes (getrandom); -1 on failure. */
int mc_auth_random(void *buf, size_t len);

/* ---- handshake (§9.1) --------------------------------------------------- */

typedef struct mc_auth_proof {
    uint8_t nonce[MC_AUTH_NONCE_SIZE];
    uint8_t mac[MC_SHA256_SIZE];
    char tenant[MC_AUTH_TENANT_MAX + 1];
    uint16_t tenant_len;
} mc_auth_proof_t;

void mc_auth_challenge_pack(uint8_t out[MC_AUTH_CHALLENGE_SIZE],
                            const uint8_t nonce[MC_AUTH_NONCE_SIZE]);
/* 0 and the nonce, or -1 on a malformed challenge. */
int mc_auth_challenge_unpack(const uint8_t *in, size_t len, uint8_t nonce[MC_AUTH_NONCE_SIZE]);

/* Decode a PROOF from the first @p len bytes: 1 when complete (and *used_p
 * is its size), 0 when more bytes are needed, -1 when malformed. */
int mc_auth_proof_unpack(const uint8_t *in, size_t len, mc_auth_proof_t *p, size_t *used_p);

/* Build this side's PROOF for server nonce @p sn: draws the client nonce
 * into @p cn; writes at most MC_AUTH_PROOF_FIXED + MC_AUTH_TENANT_MAX
 * bytes.  -1 when there is no key to sign with (detail set). */
int mc_auth_proof_build(const mc_auth_t *a, const char *service, const char *tenant,
                        const uint8_t sn[MC_AUTH_NONCE_SIZE], uint8_t cn[MC_AUTH_NONCE_SIZE],
                        uint8_t *out, size_t *len_p, const mc_auth_key_t **key_p);

/* Check a PROOF against server nonce @p sn: a tenant that has secrets
 * here must prove one of them; any other proves a cluster secret.  The
 * key that matched, or NULL. */
const mc_auth_key_t *mc_auth_proof_verify(const mc_auth_t *a, const char *service,
                                          const uint8_t sn[MC_AUTH_NONCE_SIZE],
                                          const mc_auth_proof_t *p);

void mc_auth_accept_pack(const mc_auth_key_t *k, const char *service,
                         const uint8_t sn[MC_AUTH_NONCE_SIZE],
                         const uint8_t cn[MC_AUTH_NONCE_SIZE], const char *tenant,
                         uint8_t out[MC_AUTH_ACCEPT_SIZE]);
/* 0 when @p in is the ACCEPT the server holding @p k would send. */
int mc_auth_accept_check(const mc_auth_key_t *k, const char *service,
                         const uint8_t sn[MC_AUTH_NONCE_SIZE],
                         const uint8_t cn[MC_AUTH_NONCE_SIZE], const char *tenant,
                         const uint8_t *in, size_t len);

/* Blocking sides of the handshake on a connected socket, each read and
 * write bounded by @p timeout_ms: 0 once authenticated, or -1 with a
 * detail set (mc_last_error_detail) and the socket to be closed. */
int mc_auth_client_fd(const mc_auth_t *a, int fd, const char *service, const char *tenant,
                      int timeout_ms);
int mc_auth_server_fd(const mc_auth_t *a, int fd, const char *service, int timeout_ms);

/* ---- signed HTTP requests (§9.2) --------------------------------------- */

/* Header value for a request: "v1 <unix seconds> <nonce hex32> <mac hex64>"
 * signed with the first cluster secret; -1 when there is none. */
int mc_auth_http_sign(const mc_auth_t *a, const char *method, const char *path,
                      const void *body, size_t body_len, char *out, size_t cap);

/* Nonces seen recently: a ring of fixed size, so memory is bounded. */
#define MC_AUTH_REPLAY_SLOTS 16384
typedef struct mc_auth_replay {
    pthread_mutex_t mu;
    struct mc_auth_seen {
        uint8_t nonce[16];
        int64_t ts;
    } *slots;
    size_t next;
} mc_auth_replay_t;

int mc_auth_replay_init(mc_auth_replay_t *r);
void mc_auth_replay_cleanup(mc_auth_replay_t *r);

/* Verify a request's header value (NULL: absent) at time @p now against
 * the cluster secrets: 0 when it is valid and fresh (its nonce is now
 * remembered), -1 with a reason in @p why otherwise. */
int mc_auth_http_verify(const mc_auth_t *a, mc_auth_replay_t *r, const char *method,
                        const char *path, const void *body, size_t body_len,
                        const char *value, int64_t now, char *why, size_t whylen);

#endif

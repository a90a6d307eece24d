/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cluster authentication: SHA-256 (FIPS 180-4), HMAC (RFC 2104), the
 * secrets file, the connection handshake and signed HTTP requests.
 * Formats: docs/protocol.md §9; what it protects: docs/security.md.
 *
 * The hash is written here rather than taken from a TLS library so the
 * daemons and libmooncake do not grow a dependency for 200 lines; it is
 * checked against the RFC 4231 vectors (tests/unit/test_auth.c).
 * Decoders assume hostile input: the handshake's only variable part is
 * the tenant name, bounded by MC_AUTH_TENANT_MAX.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/log.h"
#include "common/util.h"

/* ---- SHA-256 ------------------------------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR32(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(mc_sha256_t *s, const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) |
               ((uint32_t)p[4 * i + 2] << 8) | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR32(w[i - 15], 7) ^ ROR32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR32(w[i - 2], 17) ^ ROR32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i]        = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR32(e, 6) ^ ROR32(e, 11) ^ ROR32(e, 25)) + ((e & f) ^ (~e & g)) +
                      K256[i] + w[i];
        uint32_t t2 = (ROR32(a, 2) ^ ROR32(a, 13) ^ ROR32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
    s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

void mc_sha256_init(mc_sha256_t *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof(iv));
    s->len  = 0;
    s->used = 0;
}

void mc_sha256_update(mc_sha256_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->len += len;
    while (len > 0) {
        size_t n = 64 - s->used;
        if (n > len)
            n = len;
        memcpy(s->buf + s->used, p, n);
        s->used += n;
        p += n;
        len -= n;
        if (s->used == 64) {
            sha256_block(s, s->buf);
            s->used = 0;
        }
    }
}

void mc_sha256_final(mc_sha256_t *s, uint8_t out[MC_SHA256_SIZE])
{
    uint64_t bits = s->len * 8;
    uint8_t pad   = 0x80, zero = 0, lenb[8];
    mc_sha256_update(s, &pad, 1);
    while (s->used != 56)
        mc_sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    mc_sha256_update(s, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i]     = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void mc_sha256(const void *data, size_t len, uint8_t out[MC_SHA256_SIZE])
{
    mc_sha256_t s;
    mc_sha256_init(&s);
    mc_sha256_update(&s, data, len);
    mc_sha256_final(&s, out);
}

/* ---- HMAC ---------------------------------------------------------------- */

void mc_hmac_init(mc_hmac_t *h, const void *key, size_t klen)
{
    uint8_t k[64] = {0}, ipad[64];
    if (klen > 64)
        mc_sha256(key, klen, k);
    else if (klen > 0)
        memcpy(k, key, klen);
    for (int i = 0; i < 64; i++) {
        ipad[i]    = k[i] ^ 0x36;
        h->okey[i] = k[i] ^ 0x5c;
    }
    mc_sha256_init(&h->inner);
    mc_sha256_update(&h->inner, ipad, 64);
}

void mc_hmac_update(mc_hmac_t *h, const void *data, size_t len)
{
    mc_sha256_update(&h->inner, data, len);
}

void mc_hmac_final(mc_hmac_t *h, uint8_t out[MC_SHA256_SIZE])
{
    uint8_t ih[MC_SHA256_SIZE];
    mc_sha256_t o;
    mc_sha256_final(&h->inner, ih);
    mc_sha256_init(&o);
    mc_sha256_update(&o, h->okey, 64);
    mc_sha256_update(&o, ih, sizeof(ih));
    mc_sha256_final(&o, out);
}

void mc_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                    uint8_t out[MC_SHA256_SIZE])
{
    mc_hmac_t h;
    mc_hmac_init(&h, key, klen);
    mc_hmac_update(&h, msg, mlen);
    mc_hmac_final(&h, out);
}

int mc_auth_memeq_ct(const void *a, const void *b, size_t len)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < len; i++)
        d |= x[i] ^ y[i];
    return d != 0;
}

int mc_auth_random(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- the secrets file ---------------------------------------------------- */

void mc_auth_destroy(mc_auth_t *a)
{
    if (a == NULL)
        return;
    for (unsigned i = 0; i < a->nkeys; i++) {
        if (a->keys[i].secret != NULL)
            memset(a->keys[i].secret, 0, a->keys[i].len);
        free(a->keys[i].secret);
        free(a->keys[i].tenant);
    }
    free(a);
}

static int is_space(char c)
{
    return (c == ' ') || (c == '\t') || (c == '\r');
}

/* Next whitespace-separated word of [*p, end). */
static int next_word(const char **p, const char *end, const char **w, size_t *wlen)
{
    const char *s = *p;
    while ((s < end) && is_space(*s))
        s++;
    if (s == end)
        return 0;
    *w = s;
    while ((s < end) && !is_space(*s))
        s++;
    *wlen = (size_t)(s - *w);
    *p    = s;
    return 1;
}

static int add_key(mc_auth_t *a, const char *tenant, size_t tlen, const char *secret, size_t slen)
{
    mc_auth_key_t *k;
    if (a->nkeys == MC_AUTH_KEYS_MAX)
        return -1;
    k         = &a->keys[a->nkeys];
    k->secret = malloc(slen);
    if (k->secret == NULL)
        return -1;
    memcpy(k->secret, secret, slen);
    k->len = slen;
    if (tenant != NULL) {
        k->tenant = strndup(tenant, tlen);
        if (k->tenant == NULL) {
            free(k->secret);
            return -1;
        }
    }
    a->nkeys++;
    return 0;
}

mc_status_t mc_auth_parse(const char *text, size_t len, const char *origin, mc_auth_t **a_p)
{
    mc_auth_t *a = calloc(1, sizeof(*a));
    const char *p = text, *end = text + len;
    unsigned line = 0;

    if (a == NULL) {
        mc_set_error_detail("out of memory for the secrets of %s", origin);
        return MC_INTERNAL_ERROR;
    }
    snprintf(a->path, sizeof(a->path), "%s", origin);
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *w[4];
        size_t wl[4];
        int n = 0;
        if (eol == NULL)
            eol = end;
        line++;
        {
            const char *q = p;
            /* a word starting with '#' starts a comment */
            while ((n < 4) && next_word(&q, eol, &w[n], &wl[n]) && (w[n][0] != '#'))
                n++;
        }
        p = (eol < end) ? eol + 1 : end;
        if (n == 0)
            continue;
        if ((n == 1) || ((n == 3) && (wl[0] == 6) && (memcmp(w[0], "tenant", 6) == 0))) {
            const char *s = w[n - 1];
            size_t sl     = wl[n - 1];
            if ((sl < MC_AUTH_SECRET_MIN) || (sl > MC_AUTH_SECRET_MAX)) {
                mc_set_error_detail("%s line %u: a secret must be %d to %d bytes", origin, line,
                                    MC_AUTH_SECRET_MIN, MC_AUTH_SECRET_MAX);
                goto bad;
            }
            if ((n == 3) && ((wl[1] == 0) || (wl[1] > MC_AUTH_TENANT_MAX))) {
                mc_set_error_detail("%s line %u: a tenant name must be 1 to %d bytes", origin,
                                    line, MC_AUTH_TENANT_MAX);
                goto bad;
            }
            if (add_key(a, n == 3 ? w[1] : NULL, n == 3 ? wl[1] : 0, s, sl) != 0) {
                mc_set_error_detail("%s line %u: more than %d secrets, or out of memory", origin,
                                    line, MC_AUTH_KEYS_MAX);
                goto bad;
            }
            continue;
        }
        mc_set_error_detail("%s line %u: expected \"SECRET\" or \"tenant NAME SECRET\"", origin,
                            line);
        goto bad;
    }
    if (a->nkeys == 0) {
        mc_set_error_detail("%s holds no secret", origin);
        goto bad;
    }
    *a_p = a;
    return MC_OK;
bad:
    mc_auth_destroy(a);
    return MC_INVALID_PARAMS;
}

mc_status_t mc_auth_load(const char *path, mc_auth_t **a_p)
{
    const size_t cap = MC_AUTH_KEYS_MAX * (MC_AUTH_SECRET_MAX + MC_AUTH_TENANT_MAX + 16);
    char *buf;
    size_t len = 0;
    FILE *f    = fopen(path, "r");
    mc_status_t st;

    if (f == NULL) {
        mc_set_error_detail("auth token file %s: %s", path, strerror(errno));
        return MC_INVALID_PARAMS;
    }
    buf = malloc(cap + 1);
    if (buf == NULL) {
        fclose(f);
        mc_set_error_detail("out of memory reading %s", path);
        return MC_INTERNAL_ERROR;
    }
    /* one byte more than the largest valid file tells "too large" */
    len = fread(buf, 1, cap + 1, f);
    if (ferror(f) || (len > cap)) {
        mc_set_error_detail("auth token file %s: %s", path,
                            ferror(f) ? strerror(errno) : "too large");
        fclose(f);
        free(buf);
        return MC_INVALID_PARAMS;
    }
    fclose(f);
    st = mc_auth_parse(buf, len, path, a_p);
    memset(buf, 0, len);
    free(buf);
    return st;
}

const mc_auth_key_t *mc_auth_signing_key(const mc_auth_t *a, const char *tenant)
{
    if (a == NULL)
        return NULL;
    if ((tenant != NULL) && (*tenant != '\0')) {
        for (unsigned i = 0; i < a->nkeys; i++)
            if ((a->keys[i].tenant != NULL) && (strcmp(a->keys[i].tenant, tenant) == 0))
                return &a->keys[i];
    }
    for (unsigned i = 0; i < a->nkeys; i++)
        if (a->keys[i].tenant == NULL)
            return &a->keys[i];
    return NULL;
}

/* ---- handshake ------------------------------------------------------------ */

static const uint8_t MAGIC_C[4] = {'M', 'C', 'A', 'C'};
static const uint8_t MAGIC_P[4] = {'M', 'C', 'A', 'P'};
static const uint8_t MAGIC_A[4] = {'M', 'C', 'A', 'A'};
#define MAC_LABEL "mooncake-auth-v1"

/* MAC of one side: label, role, service, both nonces, tenant. */
static void handshake_mac(const mc_auth_key_t *k, char role, const char *service,
                          const uint8_t sn[MC_AUTH_NONCE_SIZE],
                          const uint8_t cn[MC_AUTH_NONCE_SIZE], const char *tenant,
                          size_t tlen, uint8_t out[MC_SHA256_SIZE])
{
    mc_hmac_t h;
    uint8_t b[2];
    size_t sl = strlen(service);
    mc_hmac_init(&h, k->secret, k->len);
    mc_hmac_update(&h, MAC_LABEL, sizeof(MAC_LABEL));
    mc_hmac_update(&h, &role, 1);
    b[0] = (uint8_t)sl;
    mc_hmac_update(&h, b, 1);
    mc_hmac_update(&h, service, sl);
    mc_hmac_update(&h, sn, MC_AUTH_NONCE_SIZE);
    mc_hmac_update(&h, cn, MC_AUTH_NONCE_SIZE);
    b[0] = (uint8_t)(tlen >> 8);
    b[1] = (uint8_t)tlen;
    mc_hmac_update(&h, b, 2);
    mc_hmac_update(&h, tenant, tlen);
    mc_hmac_final(&h, out);
}

void mc_auth_challenge_pack(uint8_t out[MC_AUTH_CHALLENGE_SIZE],
                            const uint8_t nonce[MC_AUTH_NONCE_SIZE])
{
    memcpy(out, MAGIC_C, 4);
    out[4] = MC_AUTH_VERSION;
    out[5] = out[6] = out[7] = 0;
    memcpy(out + 8, nonce, MC_AUTH_NONCE_SIZE);
}

int mc_auth_challenge_unpack(const uint8_t *in, size_t len, uint8_t nonce[MC_AUTH_NONCE_SIZE])
{
    if ((len < MC_AUTH_CHALLENGE_SIZE) || (memcmp(in, MAGIC_C, 4) != 0) ||
        (in[4] != MC_AUTH_VERSION) || in[5] || in[6] || in[7])
        return -1;
    memcpy(nonce, in + 8, MC_AUTH_NONCE_SIZE);
    return 0;
}

int mc_auth_proof_unpack(const uint8_t *in, size_t len, mc_auth_proof_t *p, size_t *used_p)
{
    uint16_t tl;
    if (len >= 6) {
        if ((memcmp(in, MAGIC_P, 4) != 0) || (in[4] != MC_AUTH_VERSION) || (in[5] != 0))
            return -1;
    } else {
        /* what is there must be a prefix of a valid header */
        for (size_t i = 0; i < len && i < 4; i++)
            if (in[i] != MAGIC_P[i])
                return -1;
        if ((len > 4) && (in[4] != MC_AUTH_VERSION))
            return -1;
        return 0;
    }
    if (len < 8)
        return 0;
    tl = (uint16_t)(((unsigned)in[6] << 8) | in[7]);
    if (tl > MC_AUTH_TENANT_MAX)
        return -1;
    if (len < MC_AUTH_PROOF_FIXED + (size_t)tl)
        return 0;
    for (uint16_t i = 0; i < tl; i++) {
        uint8_t c = in[MC_AUTH_PROOF_FIXED + i];
        if ((c < 0x20) || (c == 0x7f))
            return -1;
    }
    memcpy(p->nonce, in + 8, MC_AUTH_NONCE_SIZE);
    memcpy(p->mac, in + 40, MC_SHA256_SIZE);
    memcpy(p->tenant, in + MC_AUTH_PROOF_FIXED, tl);
    p->tenant[tl] = '\0';
    p->tenant_len = tl;
    *used_p       = MC_AUTH_PROOF_FIXED + tl;
    return 1;
}

int mc_auth_proof_build(const mc_auth_t *a, const char *service, const char *tenant,
                        const uint8_t sn[MC_AUTH_NONCE_SIZE], uint8_t cn[MC_AUTH_NONCE_SIZE],
                        uint8_t *out, size_t *len_p, const mc_auth_key_t **key_p)
{
    size_t tl = tenant ? strlen(tenant) : 0;
    const mc_auth_key_t *k = mc_auth_signing_key(a, tenant);
    if (k == NULL) {
        mc_set_error_detail("no secret to authenticate with (tenant \"%s\")",
                            tenant ? tenant : "");
        return -1;
    }
    if (tl > MC_AUTH_TENANT_MAX) {
        mc_set_error_detail("tenant name longer than %d bytes", MC_AUTH_TENANT_MAX);
        return -1;
    }
    if (mc_auth_random(cn, MC_AUTH_NONCE_SIZE) != 0) {
        mc_set_error_detail("cannot draw a nonce: %s", strerror(errno));
        return -1;
    }
    memcpy(out, MAGIC_P, 4);
    out[4] = MC_AUTH_VERSION;
    out[5] = 0;
    out[6] = (uint8_t)(tl >> 8);
    out[7] = (uint8_t)tl;
    memcpy(out + 8, cn, MC_AUTH_NONCE_SIZE);
    handshake_mac(k, 'C', service, sn, cn, tenant ? tenant : "", tl, out + 40);
    memcpy(out + MC_AUTH_PROOF_FIXED, tenant ? tenant : "", tl);
    *len_p = MC_AUTH_PROOF_FIXED + tl;
    if (key_p != NULL)
        *key_p = k;
    return 0;
}

const mc_auth_key_t *mc_auth_proof_verify(const mc_auth_t *a, const char *service,
                                          const uint8_t sn[MC_AUTH_NONCE_SIZE],
                                          const mc_auth_proof_t *p)
{
    int tenant_has_keys = 0;
    uint8_t mac[MC_SHA256_SIZE];
    const mc_auth_key_t *hit = NULL;

    if (p->tenant_len > 0) {
        for (unsigned i = 0; i < a->nkeys; i++)
            if ((a->keys[i].tenant != NULL) && (strcmp(a->keys[i].tenant, p->tenant) == 0))
                tenant_has_keys = 1;
    }
    /* every candidate is tried, so the time does not tell which matched */
    for (unsigned i = 0; i < a->nkeys; i++) {
        const mc_auth_key_t *k = &a->keys[i];
        if (tenant_has_keys ? ((k->tenant == NULL) || (strcmp(k->tenant, p->tenant) != 0))
                            : (k->tenant != NULL))
            continue;
        handshake_mac(k, 'C', service, sn, p->nonce, p->tenant, p->tenant_len, mac);
        if ((mc_auth_memeq_ct(mac, p->mac, sizeof(mac)) == 0) && (hit == NULL))
            hit = k;
    }
    return hit;
}

void mc_auth_accept_pack(const mc_auth_key_t *k, const char *service,
                         const uint8_t sn[MC_AUTH_NONCE_SIZE],
                         const uint8_t cn[MC_AUTH_NONCE_SIZE], const char *tenant,
                         uint8_t out[MC_AUTH_ACCEPT_SIZE])
{
    memcpy(out, MAGIC_A, 4);
    out[4] = MC_AUTH_VERSION;
    out[5] = out[6] = out[7] = 0;
    handshake_mac(k, 'S', service, sn, cn, tenant, strlen(tenant), out + 8);
}

int mc_auth_accept_check(const mc_auth_key_t *k, const char *service,
                         const uint8_t sn[MC_AUTH_NONCE_SIZE],
                         const uint8_t cn[MC_AUTH_NONCE_SIZE], const char *tenant,
                         const uint8_t *in, size_t len)
{
    uint8_t want[MC_AUTH_ACCEPT_SIZE];
    if (len < MC_AUTH_ACCEPT_SIZE)
        return -1;
    mc_auth_accept_pack(k, service, sn, cn, tenant, want);
    return mc_auth_memeq_ct(want, in, MC_AUTH_ACCEPT_SIZE) ? -1 : 0;
}

/* ---- blocking sides --------------------------------------------------------- */

static int wait_fd(int fd, short ev, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = ev};
    int rc;
    do {
        rc = poll(&p, 1, timeout_ms);
    } while ((rc < 0) && (errno == EINTR));
    if (rc == 0)
        errno = ETIMEDOUT;
    return rc > 0 ? 0 : -1;
}

static int send_all(int fd, const uint8_t *p, size_t len, int timeout_ms)
{
    while (len > 0) {
        ssize_t n;
        if (wait_fd(fd, POLLOUT, timeout_ms) != 0)
            return -1;
        n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if ((errno == EINTR) || (errno == EAGAIN))
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_all(int fd, uint8_t *p, size_t len, int timeout_ms)
{
    while (len > 0) {
        ssize_t n;
        if (wait_fd(fd, POLLIN, timeout_ms) != 0)
            return -1;
        n = recv(fd, p, len, MSG_DONTWAIT);
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (n < 0) {
            if ((errno == EINTR) || (errno == EAGAIN))
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int mc_auth_client_fd(const mc_auth_t *a, int fd, const char *service, const char *tenant,
                      int timeout_ms)
{
    uint8_t ch[MC_AUTH_CHALLENGE_SIZE], sn[MC_AUTH_NONCE_SIZE], cn[MC_AUTH_NONCE_SIZE];
    uint8_t proof[MC_AUTH_PROOF_FIXED + MC_AUTH_TENANT_MAX], acc[MC_AUTH_ACCEPT_SIZE];
    size_t plen;
    const mc_auth_key_t *k;

    if (recv_all(fd, ch, sizeof(ch), timeout_ms) != 0) {
        mc_set_error_detail("authentication: no challenge from the server (%s); is "
                            "authentication on there?", strerror(errno));
        return -1;
    }
    if (mc_auth_challenge_unpack(ch, sizeof(ch), sn) != 0) {
        mc_set_error_detail("authentication: the server did not send a challenge; is "
                            "authentication on there?");
        return -1;
    }
    if (mc_auth_proof_build(a, service, tenant, sn, cn, proof, &plen, &k) != 0)
        return -1;
    if (send_all(fd, proof, plen, timeout_ms) != 0) {
        mc_set_error_detail("authentication: cannot send the proof: %s", strerror(errno));
        return -1;
    }
    if (recv_all(fd, acc, sizeof(acc), timeout_ms) != 0) {
        mc_set_error_detail("authentication refused by the server (wrong secret%s?)",
                            (tenant && *tenant) ? " for this tenant" : "");
        return -1;
    }
    if (mc_auth_accept_check(k, service, sn, cn, tenant ? tenant : "", acc, sizeof(acc)) != 0) {
        mc_set_error_detail("authentication: the server did not prove the secret");
        return -1;
    }
    return 0;
}

int mc_auth_server_fd(const mc_auth_t *a, int fd, const char *service, int timeout_ms)
{
    uint8_t ch[MC_AUTH_CHALLENGE_SIZE], sn[MC_AUTH_NONCE_SIZE];
    uint8_t in[MC_AUTH_PROOF_FIXED + MC_AUTH_TENANT_MAX], acc[MC_AUTH_ACCEPT_SIZE];
    size_t have = 0, used = 0;
    mc_auth_proof_t p;
    const mc_auth_key_t *k;
    int rc;

    if (mc_auth_random(sn, sizeof(sn)) != 0) {
        mc_set_error_detail("cannot draw a nonce: %s", strerror(errno));
        return -1;
    }
    mc_auth_challenge_pack(ch, sn);
    if (send_all(fd, ch, sizeof(ch), timeout_ms) != 0) {
        mc_set_error_detail("cannot send the challenge: %s", strerror(errno));
        return -1;
    }
    while ((rc = mc_auth_proof_unpack(in, have, &p, &used)) == 0) {
        size_t want = (have < 8) ? 8 - have : MC_AUTH_PROOF_FIXED + (((size_t)in[6] << 8) | in[7]) - have;
        if (recv_all(fd, in + have, want, timeout_ms) != 0) {
            mc_set_error_detail("no proof: %s", strerror(errno));
            return -1;
        }
        have += want;
    }
    if (rc < 0) {
        mc_set_error_detail("malformed proof");
        return -1;
    }
    k = mc_auth_proof_verify(a, service, sn, &p);
    if (k == NULL) {
        mc_set_error_detail("wrong secret");
        return -1;
    }
    mc_auth_accept_pack(k, service, sn, p.nonce, p.tenant, acc);
    if (send_all(fd, acc, sizeof(acc), timeout_ms) != 0) {
        mc_set_error_detail("cannot send the accept: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- signed HTTP requests ----------------------------------------------------- */

static void hex(const uint8_t *in, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i]     = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int unhex(const char *in, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char c = in[2 * i + j];
            v <<= 4;
            if ((c >= '0') && (c <= '9'))
                v |= c - '0';
            else if ((c >= 'a') && (c <= 'f'))
                v |= c - 'a' + 10;
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

static void http_mac(const mc_auth_key_t *k, const char *method, const char *path, int64_t ts,
                     const uint8_t nonce[16], const void *body, size_t body_len,
                     uint8_t out[MC_SHA256_SIZE])
{
    uint8_t bh[MC_SHA256_SIZE];
    char tsb[24];
    mc_hmac_t h;
    mc_sha256(body, body_len, bh);
    snprintf(tsb, sizeof(tsb), "%" PRId64, ts);
    mc_hmac_init(&h, k->secret, k->len);
    mc_hmac_update(&h, MAC_LABEL, sizeof(MAC_LABEL));
    mc_hmac_update(&h, "H", 1);
    mc_hmac_update(&h, method, strlen(method) + 1);
    mc_hmac_update(&h, path, strlen(path) + 1);
    mc_hmac_update(&h, tsb, strlen(tsb) + 1);
    mc_hmac_update(&h, nonce, 16);
    mc_hmac_update(&h, bh, sizeof(bh));
    mc_hmac_final(&h, out);
}

int mc_auth_http_sign(const mc_auth_t *a, const char *method, const char *path,
                      const void *body, size_t body_len, char *out, size_t cap)
{
    const mc_auth_key_t *k = mc_auth_signing_key(a, NULL);
    uint8_t nonce[16], mac[MC_SHA256_SIZE];
    char nh[33], mh[65];
    int64_t ts = (int64_t)time(NULL);
    if ((k == NULL) || (mc_auth_random(nonce, sizeof(nonce)) != 0))
        return -1;
    http_mac(k, method, path, ts, nonce, body, body_len, mac);
    hex(nonce, sizeof(nonce), nh);
    hex(mac, sizeof(mac), mh);
    return (snprintf(out, cap, "v1 %" PRId64 " %s %s", ts, nh, mh) < (int)cap) ? 0 : -1;
}

int mc_auth_replay_init(mc_auth_replay_t *r)
{
    r->slots = calloc(MC_AUTH_REPLAY_SLOTS, sizeof(*r->slots));
    r->next  = 0;
    if (r->slots == NULL)
        return -1;
    pthread_mutex_init(&r->mu, NULL);
    return 0;
}

void mc_auth_replay_cleanup(mc_auth_replay_t *r)
{
    if ((r == NULL) || (r->slots == NULL))
        return;
    pthread_mutex_destroy(&r->mu);
    free(r->slots);
    r->slots = NULL;
}

/* Remember @p nonce unless it was seen within the window: 0, or -1 for a
 * replay, -2 when the ring is full of live nonces (too many writes in the
 * window to tell). */
static int replay_admit(mc_auth_replay_t *r, const uint8_t nonce[16], int64_t ts, int64_t now)
{
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < MC_AUTH_REPLAY_SLOTS; i++) {
        const struct mc_auth_seen *s = &r->slots[i];
        if ((s->ts != 0) && (now - s->ts <= 2 * MC_AUTH_HTTP_SKEW_S) &&
            (memcmp(s->nonce, nonce, 16) == 0)) {
            rc = -1;
            goto out;
        }
    }
    if ((r->slots[r->next].ts != 0) && (now - r->slots[r->next].ts <= 2 * MC_AUTH_HTTP_SKEW_S)) {
        rc = -2;
        goto out;
    }
    memcpy(r->slots[r->next].nonce, nonce, 16);
    /* kept until the timestamp itself can no longer pass the skew check */
    r->slots[r->next].ts = ts > now ? ts : now;
    r->next              = (r->next + 1) % MC_AUTH_REPLAY_SLOTS;
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int mc_auth_http_verify(const mc_auth_t *a, mc_auth_replay_t *r, const char *method,
                        const char *path, const void *body, size_t body_len,
                        const char *value, int64_t now, char *why, size_t whylen)
{
    char tsb[24], nh[40], mh[80];
    uint8_t nonce[16], mac[MC_SHA256_SIZE], want[MC_SHA256_SIZE];
    int64_t ts;
    uint64_t v;
    int ok = 0, rc;

    if (value == NULL) {
        snprintf(why, whylen, "no %s header", MC_AUTH_HTTP_HEADER);
        return -1;
    }
    if ((strlen(value) > MC_AUTH_HTTP_VALUE_MAX) ||
        (sscanf(value, "v1 %23s %39s %79s", tsb, nh, mh) != 3) || (strlen(nh) != 32) ||
        (strlen(mh) != 64) || (unhex(nh, 16, nonce) != 0) || (unhex(mh, 32, mac) != 0) ||
        (mc_parse_u64(tsb, &v) != 0) || (v > INT64_MAX / 2)) {
        snprintf(why, whylen, "malformed %s header", MC_AUTH_HTTP_HEADER);
        return -1;
    }
    ts = (int64_t)v;
    if ((ts < now - MC_AUTH_HTTP_SKEW_S) || (ts > now + MC_AUTH_HTTP_SKEW_S)) {
        snprintf(why, whylen, "timestamp more than %d s from the server's clock",
                 MC_AUTH_HTTP_SKEW_S);
        return -1;
    }
    for (unsigned i = 0; i < a->nkeys; i++) {
        if (a->keys[i].tenant != NULL)
            continue;
        http_mac(&a->keys[i], method, path, ts, nonce, body, body_len, want);
        if (mc_auth_memeq_ct(want, mac, sizeof(mac)) == 0)
            ok = 1;
    }
    if (!ok) {
        snprintf(why, whylen, "wrong signature");
        return -1;
    }
    rc = replay_admit(r, nonce, ts, now);
    if (rc != 0) {
        snprintf(why, whylen, rc == -1 ? "replayed request" : "too many signed requests");
        return -1;
    }
    return 0;
}

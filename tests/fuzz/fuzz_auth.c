/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the authentication decoders (common/auth.c): the
 * PROOF a connecting peer sends the master or a data port, the CHALLENGE
 * and ACCEPT a client reads, the X-Mooncake-Auth header value of an HTTP
 * write, and the secrets file.  The first byte picks the decoder.  A
 * PROOF must decode the same way whether it arrives whole or in two
 * parts, never claim more bytes than it was given, and never verify
 * without the secret; a header must never verify either.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_auth: %s\n", what);
    abort();
}

static mc_auth_t *keyring(void)
{
    static mc_auth_t *a;
    static const char text[] = "fuzz-cluster-secret-0123456789\ntenant B fuzz-b-secret-0123456789\n";
    if ((a == NULL) && (mc_auth_parse(text, sizeof(text) - 1, "fuzz", &a) != MC_OK))
        fail("cannot parse the fixed secrets");
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t sn[MC_AUTH_NONCE_SIZE] = {1, 2, 3};
    mc_auth_t *a = keyring();
    mc_auth_proof_t p, q;
    size_t used = 0, used2 = 0;
    uint8_t nonce[MC_AUTH_NONCE_SIZE];
    int rc, rc2;

    if (size == 0)
        return 0;
    switch (data[0] % 4) {
    case 0: /* PROOF, whole and split */
        data++, size--;
        rc = mc_auth_proof_unpack(data, size, &p, &used);
        if ((rc == 1) && ((used > size) || (used < MC_AUTH_PROOF_FIXED) ||
                          (p.tenant_len > MC_AUTH_TENANT_MAX) ||
                          (strlen(p.tenant) != p.tenant_len)))
            fail("a decoded proof claims bytes it was not given");
        for (size_t cut = 0; (rc == 1) && (cut < used); cut += 1 + cut / 4) {
            rc2 = mc_auth_proof_unpack(data, cut, &q, &used2);
            if (rc2 != 0)
                fail("a prefix of a valid proof is not 'need more'");
        }
        if ((rc == 1) && (mc_auth_proof_verify(a, MC_AUTH_SVC_RPC, sn, &p) != NULL))
            fail("a proof verified without the secret");
        break;
    case 1: /* CHALLENGE / ACCEPT */
        (void)mc_auth_challenge_unpack(data + 1, size - 1, nonce);
        if (mc_auth_accept_check(&a->keys[0], MC_AUTH_SVC_TE, sn, sn, "", data + 1, size - 1) ==
            0)
            fail("an ACCEPT verified without the secret");
        break;
    case 2: { /* X-Mooncake-Auth header value */
        static mc_auth_replay_t r;
        char *v = malloc(size);
        char why[128];
        if (v == NULL)
            return 0;
        if ((r.slots == NULL) && (mc_auth_replay_init(&r) != 0))
            fail("cannot allocate the replay cache");
        memcpy(v, data + 1, size - 1);
        v[size - 1] = '\0';
        if (mc_auth_http_verify(a, &r, "PUT", "/metadata?key=k", "", 0, v, 1700000000, why,
                                sizeof(why)) == 0)
            fail("a header verified without the secret");
        free(v);
        break;
    }
    default: { /* secrets file */
        mc_auth_t *b = NULL;
        if (mc_auth_parse((const char *)data + 1, size - 1, "fuzz", &b) == MC_OK) {
            if ((b->nkeys == 0) || (b->nkeys > MC_AUTH_KEYS_MAX))
                fail("a parsed secrets file has no or too many keys");
            for (unsigned i = 0; i < b->nkeys; i++)
                if ((b->keys[i].len < MC_AUTH_SECRET_MIN) || (b->keys[i].len > MC_AUTH_SECRET_MAX))
                    fail("a parsed secret is out of bounds");
        }
        mc_auth_destroy(b);
        break;
    }
    }
    return 0;
}

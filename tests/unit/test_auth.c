/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cluster authentication: SHA-256 and HMAC-SHA256 against published
 * vectors (FIPS 180-4 examples, RFC 4231), the secrets file, the
 * handshake frames (a wrong secret, a replayed proof, a tenant's own
 * secret) and signed HTTP requests with their replay cache.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "check_suites.h"
#include "common/auth.h"
#include "common/util.h"
#include "master_proc.h"
#include "store/master_client.h"

static void hexof(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static size_t unhex(const char *h, uint8_t *out)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

START_TEST(test_sha256_vectors)
{
    uint8_t d[32];
    char h[65];
    static char million[1000000];
    mc_sha256("abc", 3, d);
    hexof(d, 32, h);
    ck_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    mc_sha256("", 0, d);
    hexof(d, 32, h);
    ck_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    mc_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, d);
    hexof(d, 32, h);
    ck_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    memset(million, 'a', sizeof(million));
    mc_sha256(million, sizeof(million), d);
    hexof(d, 32, h);
    ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* RFC 4231 test cases 1-4, 6 and 7 (5 truncates the output). */
START_TEST(test_hmac_rfc4231)
{
    static const struct {
        const char *key, *data, *mac;
    } v[] = {
        {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"4a656665", "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
         "dddddddddddddddd",
         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {"0102030405060708090a0b0c0d0e0f10111213141516171819",
         "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
         "cdcdcdcdcdcdcdcd",
         "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaa",
         "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048"
         "617368204b6579204669727374",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaa",
         "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d"
         "73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d73697a652064617461"
         "2e20546865206b6579206e6565647320746f20626520686173686564206265666f7265206265696e6720"
         "757365642062792074686520484d414320616c676f726974686d2e",
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t key[200], data[200], mac[32];
        char h[65];
        size_t kl = unhex(v[i].key, key), dl = unhex(v[i].data, data);
        mc_hmac_sha256(key, kl, data, dl, mac);
        hexof(mac, 32, h);
        ck_assert_msg(strcmp(h, v[i].mac) == 0, "RFC 4231 vector %zu should give %s, not %s", i,
                      v[i].mac, h);
    }
}
END_TEST

static mc_auth_t *parse(const char *text)
{
    mc_auth_t *a = NULL;
    ck_assert_status_ok(mc_auth_parse(text, strlen(text), "test", &a));
    return a;
}

START_TEST(test_secrets_file)
{
    mc_auth_t *a = parse("# comment\n\n  cluster-secret-0123456789  # trailing comment\n"
                         "tenant B b-secret-0123456789abcdef\nnext-cluster-secret-0123\n");
    mc_auth_t *b = NULL;
    ck_assert_uint_eq(a->nkeys, 3);
    ck_assert_msg(mc_auth_signing_key(a, NULL) == &a->keys[0],
                  "the first cluster secret should sign");
    ck_assert_msg(mc_auth_signing_key(a, "B") == &a->keys[1], "tenant B's own secret should sign for B");
    ck_assert_msg(mc_auth_signing_key(a, "C") == &a->keys[0], "a tenant without a secret uses the cluster's");
    mc_auth_destroy(a);
    ck_assert_status_eq(mc_auth_parse("short\n", 6, "t", &b), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_auth_parse("# only\n", 7, "t", &b), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_auth_parse("a b c d\n", 8, "t", &b), MC_INVALID_PARAMS);
    ck_assert_msg(b == NULL, "a refused file should leave no keyring");
    ck_assert_status_eq(mc_auth_load("/nonexistent/secret", &b), MC_INVALID_PARAMS);
}
END_TEST

/* Run a handshake in memory; returns 0 when the server accepts and the
 * client accepts the server's answer. */
static int handshake(const mc_auth_t *client, const mc_auth_t *server, const char *tenant,
                     const char *csvc, const char *ssvc)
{
    uint8_t sn[32], cn[32], ch[MC_AUTH_CHALLENGE_SIZE], sn2[32], proof[400], acc[40];
    size_t len, used;
    mc_auth_proof_t p;
    const mc_auth_key_t *ck, *sk;
    ck_assert_int_eq(mc_auth_random(sn, sizeof(sn)), 0);
    mc_auth_challenge_pack(ch, sn);
    ck_assert_int_eq(mc_auth_challenge_unpack(ch, sizeof(ch), sn2), 0);
    if (mc_auth_proof_build(client, csvc, tenant, sn2, cn, proof, &len, &ck) != 0)
        return -1; /* nothing to sign with */
    ck_assert_int_eq(mc_auth_proof_unpack(proof, len - 1, &p, &used), 0);
    ck_assert_int_eq(mc_auth_proof_unpack(proof, len, &p, &used), 1);
    ck_assert_uint_eq(used, len);
    sk = mc_auth_proof_verify(server, ssvc, sn, &p);
    if (sk == NULL)
        return -1;
    mc_auth_accept_pack(sk, ssvc, sn, p.nonce, p.tenant, acc);
    return mc_auth_accept_check(ck, csvc, sn, cn, tenant ? tenant : "", acc, sizeof(acc));
}

START_TEST(test_handshake)
{
    mc_auth_t *srv   = parse("cluster-secret-0123456789\nnext-cluster-secret-0123\n"
                             "tenant B b-secret-0123456789abcdef\n");
    mc_auth_t *good  = parse("cluster-secret-0123456789\n");
    mc_auth_t *next  = parse("next-cluster-secret-0123\n");
    mc_auth_t *wrong = parse("wrong-secret-0123456789\n");
    mc_auth_t *b     = parse("tenant B b-secret-0123456789abcdef\n");
    ck_assert_msg(handshake(good, srv, NULL, "rpc", "rpc") == 0, "the right secret should pass");
    ck_assert_msg(handshake(next, srv, NULL, "rpc", "rpc") == 0,
                  "the next secret of a rotation should pass too");
    ck_assert_msg(handshake(wrong, srv, NULL, "rpc", "rpc") != 0, "a wrong secret should be refused");
    ck_assert_msg(handshake(good, srv, NULL, "te", "rpc") != 0,
                  "a proof for another service should be refused");
    ck_assert_msg(handshake(good, srv, "A", "rpc", "rpc") == 0,
                  "a tenant without its own secret proves the cluster's");
    ck_assert_msg(handshake(good, srv, "B", "rpc", "rpc") != 0,
                  "tenant B with only the cluster secret should be refused");
    ck_assert_msg(handshake(b, srv, "B", "rpc", "rpc") == 0, "tenant B with B's secret should pass");
    ck_assert_msg(handshake(b, srv, "A", "rpc", "rpc") != 0,
                  "B's secret should not let a client act as tenant A");
    mc_auth_destroy(srv);
    mc_auth_destroy(good);
    mc_auth_destroy(next);
    mc_auth_destroy(wrong);
    mc_auth_destroy(b);
}
END_TEST

START_TEST(test_handshake_replay)
{
    mc_auth_t *a = parse("cluster-secret-0123456789\n");
    uint8_t sn1[32], sn2[32], cn[32], proof[400];
    size_t len, used;
    mc_auth_proof_t p;
    ck_assert_int_eq(mc_auth_random(sn1, 32), 0);
    ck_assert_int_eq(mc_auth_random(sn2, 32), 0);
    ck_assert_int_eq(mc_auth_proof_build(a, "rpc", NULL, sn1, cn, proof, &len, NULL), 0);
    ck_assert_int_eq(mc_auth_proof_unpack(proof, len, &p, &used), 1);
    ck_assert_msg(mc_auth_proof_verify(a, "rpc", sn1, &p) != NULL, "the proof should pass once");
    ck_assert_msg(mc_auth_proof_verify(a, "rpc", sn2, &p) == NULL,
                  "the same proof against a new challenge should be refused");
    proof[0] = 'X';
    ck_assert_int_eq(mc_auth_proof_unpack(proof, len, &p, &used), -1);
    mc_auth_destroy(a);
}
END_TEST

START_TEST(test_http_sign)
{
    mc_auth_t *a     = parse("cluster-secret-0123456789\n");
    mc_auth_t *wrong = parse("wrong-secret-0123456789\n");
    mc_auth_replay_t r;
    char v[MC_AUTH_HTTP_VALUE_MAX], why[128];
    int64_t now = (int64_t)time(NULL);
    ck_assert_int_eq(mc_auth_replay_init(&r), 0);
    ck_assert_int_eq(mc_auth_http_sign(a, "PUT", "/metadata?key=k", "body", 4, v, sizeof(v)), 0);
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/metadata?key=k", "body", 4, v, now, why,
                                      sizeof(why)) == 0,
                  "a signed request should pass");
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/metadata?key=k", "body", 4, v, now, why,
                                      sizeof(why)) != 0,
                  "the same request again should be refused as a replay");
    ck_assert_str_eq(why, "replayed request");
    ck_assert_int_eq(mc_auth_http_sign(a, "PUT", "/metadata?key=k", "body", 4, v, sizeof(v)), 0);
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/metadata?key=k", "bodY", 4, v, now, why,
                                      sizeof(why)) != 0, "another body should be refused");
    ck_assert_msg(mc_auth_http_verify(a, &r, "DELETE", "/metadata?key=k", "body", 4, v, now, why,
                                      sizeof(why)) != 0, "another method should be refused");
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/metadata?key=k", "body", 4, v, now + 3600,
                                      why, sizeof(why)) != 0, "a stale timestamp should be refused");
    ck_assert_int_eq(mc_auth_http_sign(wrong, "PUT", "/metadata?key=k", "", 0, v, sizeof(v)), 0);
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/metadata?key=k", "", 0, v, now, why,
                                      sizeof(why)) != 0, "a wrong secret should be refused");
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/x", "", 0, NULL, now, why, sizeof(why)) != 0,
                  "no header should be refused");
    ck_assert_msg(mc_auth_http_verify(a, &r, "PUT", "/x", "", 0, "v1 1 zz zz", now, why,
                                      sizeof(why)) != 0, "a malformed header should be refused");
    mc_auth_replay_cleanup(&r);
    mc_auth_destroy(a);
    mc_auth_destroy(wrong);
}
END_TEST

/* A real master with --auth_token_file: the library's client side passes
 * with the secret (then PINGs), fails with a wrong one or none, and as a
 * tenant whose own secret it lacks; the master exits cleanly (a sanitizer
 * build fails the exit status on a leak). */
START_TEST(test_master_handshake)
{
    char dir[] = "/tmp/mc-auth-XXXXXX", path[64], flag[96];
    const char *flags[] = {flag, NULL};
    mc_test_master_t m;
    mc_master_target_t t;
    mc_mconn_t *conn = NULL;
    mc_uuid_t id;
    FILE *f;
    mc_auth_t *good  = parse("cluster-secret-0123456789\n");
    mc_auth_t *wrong = parse("wrong-secret-0123456789\n");
    mc_wire_ping_req_t preq;
    mc_wire_ping_resp_t presp;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/secrets", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("cluster-secret-0123456789\ntenant B b-secret-0123456789abcdef\n", f);
    fclose(f);
    snprintf(flag, sizeof(flag), "--auth_token_file=%s", path);
    mc_test_master_start(&m, flags);
    mc_uuid_generate(&id);

    ck_assert_status_ok(mc_master_target_init(&t, m.addr, id, "default"));
    t.io_timeout_ms = 3000;
    ck_assert_status_eq(mc_mconn_open(&t, &conn), MC_RPC_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "requires cluster authentication") != NULL,
                  "a client without a secret should be told the master requires one, not: %s",
                  mc_last_error_detail());
    t.auth = wrong;
    ck_assert_status_eq(mc_mconn_open(&t, &conn), MC_RPC_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "refused") != NULL,
                  "a wrong secret should be reported as refused, not: %s", mc_last_error_detail());
    t.auth = good;
    ck_assert_status_ok(mc_mconn_open(&t, &conn));
    memset(&preq, 0, sizeof(preq));
    preq.client_id = id;
    ck_assert_status_ok(mc_master_call_ping(conn, &preq, &presp));
    mc_mconn_close(conn);
    conn = NULL;
    mc_master_target_cleanup(&t);

    ck_assert_status_ok(mc_master_target_init(&t, m.addr, id, "B"));
    t.io_timeout_ms = 3000;
    t.auth          = good;
    ck_assert_status_eq(mc_mconn_open(&t, &conn), MC_RPC_FAIL);
    mc_master_target_cleanup(&t);

    ck_assert_int_eq(mc_test_master_stop(&m), 0);
    mc_auth_destroy(good);
    mc_auth_destroy(wrong);
    unlink(path);
    rmdir(dir);
}
END_TEST

Suite *mc_test_auth_suite(void)
{
    Suite *s  = suite_create("auth");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sha256_vectors);
    tcase_add_test(tc, test_hmac_rfc4231);
    tcase_add_test(tc, test_secrets_file);
    tcase_add_test(tc, test_handshake);
    tcase_add_test(tc, test_handshake_replay);
    tcase_add_test(tc, test_http_sign);
    suite_add_tcase(s, tc);
    tc = tcase_create("master");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_master_handshake);
    suite_add_tcase(s, tc);
    return s;
}

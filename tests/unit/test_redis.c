/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The redis connection string and key rules (libmooncake/coord/redis.c,
 * upstream's C.2 rules in docs/ha.md): what parses, to which host and
 * port, what is refused with INVALID_PARAMS, and the cluster-scoped key.
 * The client against a real redis-server is covered by
 * tests/python/test_ha_redis.py.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "coord/redis.h"

typedef struct conn_case {
    const char *conn;
    const char *host;
    unsigned port;
} conn_case_t;

START_TEST(test_connstring_accepted)
{
    static const conn_case_t cases[] = {
        {"127.0.0.1", "127.0.0.1", 6379},
        {"redis://127.0.0.1", "127.0.0.1", 6379},
        {"REDIS://h:7000", "h", 7000},
        {"redis://h:6380/", "h", 6380},
        {"h/", "h", 6379},
        {"redis-host.example:1", "redis-host.example", 1},
        {"h:65535", "h", 65535},
        {"[::1]", "::1", 6379},
        {"[::1]:6390", "::1", 6390},
        {"redis://[fe80::1]:7/", "fe80::1", 7},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char host[256] = "";
        uint16_t port  = 0;
        ck_assert_msg(mc_redis_parse_connstring(cases[i].conn, host, sizeof(host), &port) ==
                          MC_OK,
                      "\"%s\" should parse", cases[i].conn);
        ck_assert_msg(strcmp(host, cases[i].host) == 0, "\"%s\" should name host %s, not %s",
                      cases[i].conn, cases[i].host, host);
        ck_assert_msg(port == cases[i].port, "\"%s\" should name port %u, not %u",
                      cases[i].conn, cases[i].port, (unsigned)port);
    }
}
END_TEST

START_TEST(test_connstring_refused)
{
    static const char *const bad[] = {
        "",           "redis://",   "redis:///",  ":6379",        "h:0",
        "h:65536",    "h:x",        "h:",         "h:6379/db0",   "redis://h/0",
        "::1",        "fe80::1:80", "[::1",       "[]:80",        "[::1]x",
        "[::1]:",     "h:12345678", "h:-1",       "h:6379;h2:6379",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char host[256];
        uint16_t port;
        ck_assert_msg(mc_redis_parse_connstring(bad[i], host, sizeof(host), &port) ==
                          MC_INVALID_PARAMS,
                      "\"%s\" should be refused with INVALID_PARAMS", bad[i]);
    }
    ck_assert_msg(mc_redis_parse_connstring(NULL, NULL, 0, NULL) == MC_INVALID_PARAMS,
                  "a missing connection string should be refused");
}
END_TEST

START_TEST(test_cluster_key)
{
    char key[300];
    ck_assert_int_eq(mc_redis_cluster_key("mooncake_cluster", "master_view", key, sizeof(key)), 0);
    ck_assert_str_eq(key, "mooncake-store/{mooncake_cluster}/master_view");
    ck_assert_int_eq(mc_redis_cluster_key("a{b}c/", "master_view_version", key, sizeof(key)), 0);
    ck_assert_msg(strcmp(key, "mooncake-store/{a_b_c}/master_view_version") == 0,
                  "braces should become '_' and a trailing '/' go, not \"%s\"", key);
    ck_assert_msg(mc_redis_cluster_key("c", "master_view", key, 10) == -1,
                  "a key that does not fit should be refused");
}
END_TEST

/* create parses first: a bad string is INVALID_PARAMS in every build, and
 * MC_REDIS_DB_INDEX outside 0-255 is refused. */
START_TEST(test_create_checks)
{
    mc_redis_t *r = NULL;
    ck_assert_int_eq(mc_redis_create("h:6379/x", 0, &r), MC_INVALID_PARAMS);
    if (!mc_redis_available()) {
        ck_assert_int_eq(mc_redis_create("h:6379", 0, &r), MC_UNAVAILABLE_IN_CURRENT_MODE);
        return;
    }
    setenv("MC_REDIS_DB_INDEX", "256", 1);
    ck_assert_msg(mc_redis_create("h:6379", 0, &r) == MC_INVALID_PARAMS,
                  "MC_REDIS_DB_INDEX=256 should be refused");
    setenv("MC_REDIS_DB_INDEX", "255", 1);
    ck_assert_int_eq(mc_redis_create("redis://h:6379", 0, &r), MC_OK);
    ck_assert_str_eq(mc_redis_endpoint(r), "h:6379");
    mc_redis_destroy(r);
    unsetenv("MC_REDIS_DB_INDEX");
    ck_assert_int_eq(mc_redis_create("[::1]:7000", 0, &r), MC_OK);
    ck_assert_str_eq(mc_redis_endpoint(r), "[::1]:7000");
    mc_redis_destroy(r);
}
END_TEST

Suite *mc_test_redis_suite(void)
{
    Suite *s   = suite_create("redis");
    TCase *tc  = tcase_create("connstring");
    tcase_add_test(tc, test_connstring_accepted);
    tcase_add_test(tc, test_connstring_refused);
    tcase_add_test(tc, test_cluster_key);
    tcase_add_test(tc, test_create_checks);
    suite_add_tcase(s, tc);
    return s;
}

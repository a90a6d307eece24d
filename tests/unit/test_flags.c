/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_master command line (mooncake-master/flags.c): upstream
 * defaults, every gflags syntax form, booleans and --noflag, duration
 * suffixes, validators (ports, ratios, cluster id, enumerations), and
 * rejection of unknown flags, bad values and stray arguments with a
 * message that names the flag.  A rejected value must leave the previous
 * value in place.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../mooncake-master/flags.h"
#include "check_suites.h"

static mc_master_config_t cfg;
static char err[512];

static void setup(void)
{
    ck_assert_status_ok(mc_master_config_init(&cfg));
    err[0] = '\0';
}

static void teardown(void)
{
    mc_master_config_cleanup(&cfg);
}

/* Parse a NULL-terminated list of arguments (argv[0] is added). */
static mc_status_t parse(const char *first, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    argv[argc++] = (char *)"mooncake_master";
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
        ck_assert_msg(argc < 31, "the test passes too many arguments");
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc] = NULL;
    return mc_master_flags_parse(&cfg, argc, argv, err, sizeof(err));
}

static void assert_err_mentions(const char *what)
{
    ck_assert_msg(strstr(err, what) != NULL, "the error message \"%s\" should mention \"%s\"", err,
                  what);
}

START_TEST(test_defaults_match_upstream)
{
    ck_assert_int_eq(cfg.port, 50051);
    ck_assert_int_eq(cfg.rpc_port, 0);
    ck_assert_uint_eq(mc_master_config_rpc_port(&cfg), 50051);
    ck_assert_str_eq(cfg.rpc_address, "0.0.0.0");
    ck_assert_int_eq(cfg.enable_http_metadata_server, 0);
    ck_assert_str_eq(cfg.http_metadata_server_host, "0.0.0.0");
    ck_assert_int_eq(cfg.http_metadata_server_port, 8080);
    ck_assert_int_eq(cfg.metrics_port, 9003);
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 10000);
    ck_assert_uint_eq(cfg.default_kv_soft_pin_ttl, 1800000);
    ck_assert_uint_eq(cfg.max_kv_soft_pin_ttl, 86400000);
    ck_assert_int_eq(cfg.allow_evict_soft_pinned_objects, 1);
    ck_assert_int_eq(cfg.client_ttl, 10);
    ck_assert_double_eq_tol(cfg.eviction_high_watermark_ratio, 0.90, 1e-12);
    ck_assert_double_eq_tol(cfg.eviction_ratio, 0.05, 1e-12);
    ck_assert_str_eq(cfg.cluster_id, "mooncake_cluster");
    ck_assert_int_eq(cfg.put_start_discard_timeout_sec, 30);
    ck_assert_int_eq(cfg.put_start_release_timeout_sec, 600);
    ck_assert_str_eq(cfg.memory_allocator, "offset");
    ck_assert_str_eq(cfg.allocation_strategy, "random");
    ck_assert_int_eq(cfg.enable_ha, 0);
    ck_assert_int_eq(cfg.rpc_enable_tcp_no_delay, 1);
    ck_assert_str_eq(cfg.log_level, "");
    ck_assert_uint_eq(cfg.cxl_size, 8ull << 30);
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++)
        ck_assert_msg(cfg.is_set[i] == 0, "no flag should count as set before parsing");
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    ck_assert_status_ok(parse(NULL));
}
END_TEST

START_TEST(test_value_syntax_forms)
{
    ck_assert_status_ok(parse("--port=1234", NULL));
    ck_assert_int_eq(cfg.port, 1234);
    ck_assert_status_ok(parse("--port", "2345", NULL));
    ck_assert_int_eq(cfg.port, 2345);
    ck_assert_status_ok(parse("-port=3456", NULL));
    ck_assert_int_eq(cfg.port, 3456);
    ck_assert_status_ok(parse("-port", "4567", NULL));
    ck_assert_int_eq(cfg.port, 4567);
    ck_assert_msg(cfg.is_set[MC_MASTER_FLAG_port], "--port should be marked as set");
    ck_assert_msg(!cfg.is_set[MC_MASTER_FLAG_rpc_port], "--rpc_port should not be marked as set");
    /* the last occurrence wins */
    ck_assert_status_ok(parse("--rpc_address=127.0.0.1", "--rpc_address", "::1", NULL));
    ck_assert_str_eq(cfg.rpc_address, "::1");
    /* a value may itself start with a dash or contain '=' */
    ck_assert_status_ok(parse("--etcd_endpoints", "a=b;c", "--pod_name=-x", NULL));
    ck_assert_str_eq(cfg.etcd_endpoints, "a=b;c");
    ck_assert_str_eq(cfg.pod_name, "-x");
    /* an empty string value is allowed where the flag allows it */
    ck_assert_status_ok(parse("--root_fs_dir=", NULL));
    ck_assert_str_eq(cfg.root_fs_dir, "");
    /* "--" ends the flags */
    ck_assert_status_ok(parse("--port=1", "--", NULL));
}
END_TEST

START_TEST(test_rpc_port_overrides_port)
{
    ck_assert_status_ok(parse("--port=6000", NULL));
    ck_assert_uint_eq(mc_master_config_rpc_port(&cfg), 6000);
    ck_assert_status_ok(parse("--rpc_port=7000", NULL));
    ck_assert_uint_eq(mc_master_config_rpc_port(&cfg), 7000);
}
END_TEST

START_TEST(test_bool_forms)
{
    ck_assert_status_ok(parse("--enable_http_metadata_server", NULL));
    ck_assert_int_eq(cfg.enable_http_metadata_server, 1);
    ck_assert_status_ok(parse("--noenable_http_metadata_server", NULL));
    ck_assert_int_eq(cfg.enable_http_metadata_server, 0);
    ck_assert_msg(cfg.is_set[MC_MASTER_FLAG_enable_http_metadata_server],
                  "--noflag should mark the flag as set");
    ck_assert_status_ok(parse("--enable_http_metadata_server=true", NULL));
    ck_assert_int_eq(cfg.enable_http_metadata_server, 1);
    ck_assert_status_ok(parse("--enable_http_metadata_server=false", NULL));
    ck_assert_int_eq(cfg.enable_http_metadata_server, 0);
    ck_assert_status_ok(parse("-enable_http_metadata_server=1", NULL));
    ck_assert_int_eq(cfg.enable_http_metadata_server, 1);
    ck_assert_status_ok(parse("--rpc_enable_tcp_no_delay=0", NULL));
    ck_assert_int_eq(cfg.rpc_enable_tcp_no_delay, 0);
    ck_assert_status_ok(parse("--rpc_enable_tcp_no_delay", NULL));
    ck_assert_int_eq(cfg.rpc_enable_tcp_no_delay, 1);
    ck_assert_status_ok(parse("-noenable_ha", NULL));
    ck_assert_int_eq(cfg.enable_ha, 0);
}
END_TEST

START_TEST(test_bool_never_consumes_next_argument)
{
    /* gflags: "--flag false" sets the flag and leaves "false" positional */
    ck_assert_status_eq(parse("--enable_ha", "false", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("false");
    ck_assert_status_ok(parse("--enable_ha", "--port=5", NULL));
    ck_assert_int_eq(cfg.enable_ha, 1);
    ck_assert_int_eq(cfg.port, 5);
}
END_TEST

START_TEST(test_bad_bool_values_rejected)
{
    ck_assert_status_eq(parse("--enable_ha=maybe", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("enable_ha");
    assert_err_mentions("maybe");
    ck_assert_int_eq(cfg.enable_ha, 0);
    ck_assert_status_eq(parse("--noenable_ha=true", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("does not take a value");
    /* --no prefix only applies to booleans */
    ck_assert_status_eq(parse("--noport", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("noport");
}
END_TEST

START_TEST(test_duration_suffixes)
{
    ck_assert_status_ok(parse("--default_kv_lease_ttl=500", NULL));
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 500);
    ck_assert_status_ok(parse("--default_kv_lease_ttl=750ms", NULL));
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 750);
    ck_assert_status_ok(parse("--default_kv_lease_ttl=10s", NULL));
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 10000);
    ck_assert_status_ok(parse("--default_kv_lease_ttl", "2m", NULL));
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 120000);
    ck_assert_status_ok(parse("--max_kv_soft_pin_ttl=48h", NULL));
    ck_assert_uint_eq(cfg.max_kv_soft_pin_ttl, 48ull * 3600 * 1000);
    ck_assert_status_ok(parse("--default_kv_soft_pin_ttl=1m", NULL));
    ck_assert_uint_eq(cfg.default_kv_soft_pin_ttl, 60000);

    ck_assert_status_eq(parse("--default_kv_lease_ttl=10x", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("default_kv_lease_ttl");
    ck_assert_status_eq(parse("--default_kv_lease_ttl=-5", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--default_kv_lease_ttl=", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--default_kv_lease_ttl=0", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("greater than 0");
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 120000);
}
END_TEST

START_TEST(test_integer_values)
{
    ck_assert_status_eq(parse("--port=abc", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("port");
    assert_err_mentions("abc");
    ck_assert_status_eq(parse("--port=80x", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--port=65536", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("65535");
    ck_assert_status_eq(parse("--port=-1", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--http_metadata_server_port=99999999999999999999", NULL),
                        MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--client_ttl=0", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("client_ttl");
    ck_assert_status_eq(parse("--client_ttl=1.5", NULL), MC_INVALID_PARAMS);
    ck_assert_int_eq(cfg.port, 50051);
    ck_assert_int_eq(cfg.client_ttl, 10);
    ck_assert_status_ok(parse("--client_ttl=2", "--port=65535", "--rpc_port=0", NULL));
    ck_assert_int_eq(cfg.client_ttl, 2);
    ck_assert_int_eq(cfg.port, 65535);
}
END_TEST

START_TEST(test_ratio_bounds)
{
    ck_assert_status_ok(parse("--eviction_ratio=0", "--eviction_high_watermark_ratio=1", NULL));
    ck_assert_double_eq(cfg.eviction_ratio, 0.0);
    ck_assert_double_eq(cfg.eviction_high_watermark_ratio, 1.0);
    ck_assert_status_ok(parse("--eviction_ratio=0.25", NULL));
    ck_assert_double_eq_tol(cfg.eviction_ratio, 0.25, 1e-12);

    ck_assert_status_eq(parse("--eviction_ratio=1.5", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("eviction_ratio");
    assert_err_mentions("between 0.0 and 1.0");
    ck_assert_status_eq(parse("--eviction_high_watermark_ratio=-0.1", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--eviction_ratio=nan", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--eviction_ratio=abc", NULL), MC_INVALID_PARAMS);
    ck_assert_double_eq_tol(cfg.eviction_ratio, 0.25, 1e-12);
    ck_assert_double_eq(cfg.eviction_high_watermark_ratio, 1.0);
}
END_TEST

START_TEST(test_cluster_id_validation)
{
    char long_id[140];
    char arg[160];

    ck_assert_status_ok(parse("--cluster_id=prod-A_1.x", NULL));
    ck_assert_str_eq(cfg.cluster_id, "prod-A_1.x");

    ck_assert_status_eq(parse("--cluster_id=", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("cluster_id");
    ck_assert_status_eq(parse("--cluster_id=a/b", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--cluster_id=a b", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--cluster_id=ü", NULL), MC_INVALID_PARAMS);

    memset(long_id, 'a', 128);
    long_id[128] = '\0';
    snprintf(arg, sizeof(arg), "--cluster_id=%s", long_id);
    ck_assert_status_ok(parse(arg, NULL));
    ck_assert_uint_eq(strlen(cfg.cluster_id), 128);
    long_id[128] = 'a';
    long_id[129] = '\0';
    snprintf(arg, sizeof(arg), "--cluster_id=%s", long_id);
    ck_assert_status_eq(parse(arg, NULL), MC_INVALID_PARAMS);
    ck_assert_uint_eq(strlen(cfg.cluster_id), 128);
}
END_TEST

START_TEST(test_enumerations)
{
    ck_assert_status_ok(parse("--allocation_strategy=free_ratio_first", NULL));
    ck_assert_str_eq(cfg.allocation_strategy, "free_ratio_first");
    ck_assert_status_eq(parse("--allocation_strategy=best", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("random");
    ck_assert_status_eq(parse("--memory_allocator=cachelib", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("cachelib");
    ck_assert_status_eq(parse("--ha_backend_type=zookeeper", NULL), MC_INVALID_PARAMS);
    ck_assert_status_ok(parse("--log_level=debug", NULL));
    ck_assert_str_eq(cfg.log_level, "debug");
    ck_assert_status_ok(parse("--log_level=3", NULL));
    ck_assert_status_eq(parse("--log_level=loud", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("log_level");
}
END_TEST

START_TEST(test_unknown_and_stray_arguments)
{
    ck_assert_status_eq(parse("--prot=1", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("unknown command line flag 'prot'");
    ck_assert_status_eq(parse("--", "x", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("x");
    ck_assert_status_eq(parse("positional", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("positional");
    ck_assert_status_eq(parse("-", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--=5", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--port", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("missing its argument");
}
END_TEST

START_TEST(test_help_version_and_aliases)
{
    ck_assert_status_ok(parse("--help", NULL));
    ck_assert_int_eq(cfg.help, 1);
    ck_assert_status_ok(parse("--version", NULL));
    ck_assert_int_eq(cfg.version, 1);
    ck_assert_status_ok(parse("--snapshot_payload_backend_type=s3", NULL));
    ck_assert_str_eq(cfg.snapshot_object_store_type, "s3");
    ck_assert_int_eq(mc_master_flag_find("snapshot_catalog_backend_type"),
                     MC_MASTER_FLAG_snapshot_catalog_store_type);
    ck_assert_int_eq(mc_master_flag_find("no_such_flag"), -1);
    /* unimplemented flags are still accepted */
    ck_assert_status_ok(parse("--enable_offload", "--enable_snapshot=false", NULL));
    ck_assert_int_eq(cfg.enable_offload, 1);
}
END_TEST

START_TEST(test_help_lists_every_flag)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f    = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    mc_master_flags_print_help(f, "mooncake_master");
    fclose(f);
    ck_assert_msg(strstr(text, "--default_kv_lease_ttl (duration) default: 10000 ms") != NULL,
                  "--help should show the lease flag with its default");
    ck_assert_msg(strstr(text, "--port (int) default: 50051") != NULL,
                  "--help should show --port with its default");
    ck_assert_msg(strstr(text, "not implemented yet") != NULL,
                  "--help should mark unimplemented flags");
    ck_assert_msg(strstr(text, "--cxl_size") != NULL, "--help should list the last flag");
    free(text);
}
END_TEST

START_TEST(test_cross_flag_checks)
{
    ck_assert_status_ok(parse("--default_kv_soft_pin_ttl=2h", "--max_kv_soft_pin_ttl=1h", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("max_kv_soft_pin_ttl");
    ck_assert_status_ok(parse("--max_kv_soft_pin_ttl=3h", "--put_start_discard_timeout_sec=600",
                              NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("put_start_release_timeout_sec");
    ck_assert_status_ok(parse("--put_start_release_timeout_sec=601", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
}
END_TEST

Suite *mc_test_flags_suite(void)
{
    Suite *s  = suite_create("flags");
    TCase *tc = tcase_create("parse");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_defaults_match_upstream);
    tcase_add_test(tc, test_value_syntax_forms);
    tcase_add_test(tc, test_rpc_port_overrides_port);
    tcase_add_test(tc, test_bool_forms);
    tcase_add_test(tc, test_bool_never_consumes_next_argument);
    tcase_add_test(tc, test_bad_bool_values_rejected);
    tcase_add_test(tc, test_duration_suffixes);
    tcase_add_test(tc, test_integer_values);
    tcase_add_test(tc, test_ratio_bounds);
    tcase_add_test(tc, test_cluster_id_validation);
    tcase_add_test(tc, test_enumerations);
    tcase_add_test(tc, test_unknown_and_stray_arguments);
    tcase_add_test(tc, test_help_version_and_aliases);
    tcase_add_test(tc, test_help_lists_every_flag);
    tcase_add_test(tc, test_cross_flag_checks);
    suite_add_tcase(s, tc);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_master command line (mooncake-master/flags.c): upstream
 * defaults, every gflags syntax form, booleans and --noflag, duration
 * suffixes, validators (ports, ratios, cluster id, enumerations), and
 * rejection of unknown flags, bad values and stray arguments with a
 * message that names the flag.  A rejected value must leave the previous
 * value in place.
 *
 * --config_path: values of every JSON type reach the flags through the
 * command-line parsers, explicit flags override the file in either
 * order, upstream's client_live_ttl_sec alias, every error kind with a
 * message naming the file and key (or line and column) and no flag
 * changed, and the shipped mooncake-master.json / .conf samples (found
 * through $MC_SRCDIR) load and list every flag.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../mooncake-master/flags.h"
#include "common/util.h"
#include "check_suites.h"
#include "coord/redis.h"

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
    /* upstream: an unknown strategy is a warning and random at start */
    ck_assert_status_ok(parse("--allocation_strategy=best", NULL));
    ck_assert_status_ok(parse("--allocation_strategy=local_first", NULL));
    ck_assert_str_eq(cfg.allocation_strategy, "local_first");
    ck_assert_status_eq(parse("--memory_allocator=cachelib", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("cachelib");
    /* upstream reads --ha_backend_type only with --enable_ha (test_enable_ha_checks) */
    ck_assert_status_ok(parse("--ha_backend_type=zookeeper", NULL));
    ck_assert_status_ok(parse("--ha_backend_type=etcd", NULL));
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
    ck_assert_status_ok(parse("--snapshot_payload_backend_type=local", NULL));
    ck_assert_str_eq(cfg.snapshot_object_store_type, "local");
    ck_assert_int_eq(mc_master_flag_find("snapshot_catalog_backend_type"),
                     MC_MASTER_FLAG_snapshot_catalog_store_type);
    ck_assert_int_eq(mc_master_flag_find("no_such_flag"), -1);
    /* flags of unimplemented features parse (the check refuses them) */
    ck_assert_status_ok(parse("--enable_offload", "--enable_snapshot=false", NULL));
    ck_assert_int_eq(cfg.enable_offload, 1);
}
END_TEST

/* A feature this build does not implement refuses to start with a message
 * naming the flag, from the command line or a file; its default is fine. */
START_TEST(test_unimplemented_features_refused)
{
    static const char *const refused[] = {
        "--enable_cxl",
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(refused); i++) {
        char name[64];
        mc_master_config_cleanup(&cfg);
        ck_assert_status_ok(mc_master_config_init(&cfg));
        ck_assert_status_ok(parse(refused[i], NULL));
        ck_assert_msg(mc_master_config_check(&cfg, err, sizeof(err)) == MC_INVALID_PARAMS,
                      "%s should refuse to start", refused[i]);
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(refused[i], "="), refused[i]);
        assert_err_mentions(name);
        assert_err_mentions("not implemented");
    }
    /* the defaults, spelled out, are accepted */
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse("--enable_ha=false", "--noenable_snapshot", "--enable_oplog=0",
                              "--enable_offload=false", "--dynamic_replication_mode=off",
                              "--root_fs_dir=", "--enable_cxl=false", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    /* the disk tier is built (docs/tiers.md) */
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse("--enable_offload", "--offload_on_evict", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse("--offload_on_evict", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("--offload_on_evict needs --enable_offload");
}
END_TEST

/* --enable_ha needs etcd endpoints, the etcd backend and a usable lease;
 * the endpoints come from --etcd_endpoints or --ha_backend_connstring. */
START_TEST(test_enable_ha_checks)
{
    ck_assert_status_ok(parse("--enable_ha", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("HA backend connection string must be set when enable_ha is true, "
                        "backend_type=etcd");
    assert_err_mentions("--etcd_endpoints");
    ck_assert_status_ok(parse("--enable_ha", "--etcd_endpoints=127.0.0.1:2379", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    ck_assert_int_eq(cfg.ha_lease_ttl_sec, 5);
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse("--enable_ha", "--ha_backend_connstring=h:1;h:2", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    ck_assert_status_ok(parse("--enable_snapshot", "--snapshot_backup_dir=/tmp/x",
                              "--enable_snapshot_restore", NULL));
    /* with HA, restore means the log shipped through etcd */
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse("--enable_ha", "--ha_backend_connstring=h:1;h:2", NULL));
    ck_assert_status_ok(parse("--ha_backend_type=redis", NULL));
    /* an etcd endpoint list is no redis connection string (a build without
     * hiredis says first that it has no redis, as upstream) */
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)),
                        mc_redis_available() ? MC_INVALID_PARAMS
                                             : MC_UNAVAILABLE_IN_CURRENT_MODE);
    assert_err_mentions("--ha_backend_type=redis");
    ck_assert_status_ok(parse("--ha_backend_connstring=redis://h:6379", NULL));
    if (mc_redis_available())
        ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    else
        ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)),
                            MC_UNAVAILABLE_IN_CURRENT_MODE);
    /* --etcd_endpoints is the etcd backend's fallback only: upstream's FATAL */
    ck_assert_status_ok(parse("--ha_backend_connstring=", "--etcd_endpoints=h:2379", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("HA backend connection string must be set when enable_ha is true, "
                        "backend_type=redis");
    ck_assert_status_ok(parse("--ha_backend_type=k8s", "--ha_backend_connstring=ns/lease", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)),
                        MC_UNAVAILABLE_IN_CURRENT_MODE);
    assert_err_mentions("Kubernetes API server");
    ck_assert_status_ok(parse("--ha_backend_type=zookeeper", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("INVALID_PARAMS");
    ck_assert_status_ok(parse("--ha_backend_type=etcd", "--ha_lease_ttl_sec=1", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("--ha_lease_ttl_sec");
}
END_TEST

/* The durable master's flags: each needs the others it depends on, and
 * the snapshot store is local only. */
static void snapshot_reset(void)
{
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
}

START_TEST(test_snapshot_flags)
{
    ck_assert_status_ok(parse("--enable_snapshot", "--snapshot_backup_dir=/tmp/x",
                              "--enable_snapshot_restore", "--snapshot_interval_seconds=5",
                              "--snapshot_restore_grace_seconds=7", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    ck_assert_int_eq(cfg.snapshot_restore_grace_seconds, 7);
    snapshot_reset();
    ck_assert_status_ok(parse("--enable_snapshot", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("snapshot_backup_dir");
    snapshot_reset();
    ck_assert_status_ok(parse("--enable_snapshot_restore", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("--enable_snapshot");
    snapshot_reset();
    ck_assert_status_ok(parse("--snapshot_backup_dir=/tmp/x", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("enable_snapshot");
    ck_assert_status_eq(parse("--snapshot_object_store_type=s3", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("s3");
    ck_assert_status_eq(parse("--snapshot_restore_grace_seconds=0", NULL), MC_INVALID_PARAMS);
}
END_TEST

/* Tuning flags of absent features are accepted (listed under their own
 * --help heading), among them upstream's NVMe-oF heartbeat spellings. */
START_TEST(test_compat_flags_accepted)
{
    ck_assert_status_ok(parse("--nof_heartbeat_probe_timeout_ms=250",
                              "--nof_heartbeat_failures_threshold", "5",
                              "--nof_heartbeat_interval_sec=3", "--ha_backend_type=redis",
                              "--etcd_endpoints=127.0.0.1:2379", "--snapshot_interval_seconds=60",
                              "--offloading_queue_limit=7", "--kv_events_queue_capacity=8", NULL));
    ck_assert_int_eq(cfg.nof_heartbeat_probe_timeout_ms, 250);
    ck_assert_int_eq(cfg.nof_heartbeat_failures_threshold, 5);
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    /* validators still apply */
    ck_assert_status_eq(parse("--nof_heartbeat_probe_timeout_ms=0", NULL), MC_INVALID_PARAMS);
    assert_err_mentions("nof_heartbeat_probe_timeout_ms");
    /* only upstream's spellings */
    ck_assert_status_eq(parse("--nof_probe_timeout_ms=5", NULL), MC_INVALID_PARAMS);
    ck_assert_status_eq(parse("--nof_failures_threshold=5", NULL), MC_INVALID_PARAMS);
}
END_TEST

/* --help: every compatibility-only flag under one heading, nothing else
 * there, and no compatibility-only flag in the main list. */
START_TEST(test_help_compat_heading)
{
    static const char *const compat[] = {
        "max_threads", "rpc_thread_num", "nof_heartbeat_probe_timeout_ms",
        "nof_heartbeat_failures_threshold", "nof_heartbeat_interval_sec",
        "offloading_queue_limit", "cxl_size",
    };
    static const char *const main_list[] = {
        "enable_ha", "enable_snapshot", "enable_offload", "log_dir", "client_ttl", "port",
        "etcd_endpoints", "ha_lease_ttl_sec",
    };
    char *text = NULL;
    size_t len = 0;
    FILE *f    = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    mc_master_flags_print_help(f, "mooncake_master");
    fclose(f);
    char *heading = strstr(text, MC_MASTER_COMPAT_HEADING);
    ck_assert_msg(heading != NULL, "--help should have the compatibility heading");
    ck_assert_msg(strstr(heading + 1, MC_MASTER_COMPAT_HEADING) == NULL,
                  "the compatibility heading should appear once");
    for (size_t i = 0; i < MC_ARRAY_SIZE(compat); i++) {
        char want[128];
        snprintf(want, sizeof(want), "\n  --%s (", compat[i]);
        char *at = strstr(text, want);
        ck_assert_msg(at != NULL, "--help should list --%s", compat[i]);
        ck_assert_msg(at > heading, "--%s should be listed under the compatibility heading",
                      compat[i]);
    }
    for (size_t i = 0; i < MC_ARRAY_SIZE(main_list); i++) {
        char want[128];
        snprintf(want, sizeof(want), "\n  --%s (", main_list[i]);
        char *at = strstr(text, want);
        ck_assert_msg((at != NULL) && (at < heading),
                      "--%s should be in the main list, before the compatibility heading",
                      main_list[i]);
    }
    free(text);
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

/* ---- --config_path ----------------------------------------------------- */

static char conf_dir[64];
static char conf_file[128];
static char conf_arg[160];

static void conf_setup(void)
{
    setup();
    snprintf(conf_dir, sizeof(conf_dir), "/tmp/mc-test-flags.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(conf_dir));
    snprintf(conf_file, sizeof(conf_file), "%s/master.json", conf_dir);
    snprintf(conf_arg, sizeof(conf_arg), "--config_path=%s", conf_file);
}

static void conf_teardown(void)
{
    unlink(conf_file);
    rmdir(conf_dir);
    teardown();
}

/* Replace the test's config file with @p text. */
static void write_conf(const char *text)
{
    FILE *f = fopen(conf_file, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* The source tree: $MC_SRCDIR (make check sets it), else derived from
 * this file's compile-time path (relative ones are relative to the build
 * directory, where the tests run). */
static void srcdir_path(char *out, size_t outlen, const char *rel)
{
    const char *top = getenv("MC_SRCDIR");
    if ((top != NULL) && (*top != '\0')) {
        snprintf(out, outlen, "%s/%s", top, rel);
        return;
    }
    const char *me   = __FILE__;
    const char *tail = strstr(me, "tests/unit/test_flags.c");
    ck_assert_ptr_nonnull(tail);
    snprintf(out, outlen, "%.*s%s", (int)(tail - me), me, rel);
}

START_TEST(test_config_file_values_applied)
{
    write_conf("{\n"
               "  \"port\": 6001,\n"
               "  \"rpc_address\": \"127.0.0.1\",\n"
               "  \"enable_http_metadata_server\": true,\n"
               "  \"rpc_enable_tcp_no_delay\": false,\n"
               "  \"enable_ha\": \"false\",\n"
               "  \"default_kv_lease_ttl\": \"5s\",\n"
               "  \"default_kv_soft_pin_ttl\": 60000,\n"
               "  \"eviction_ratio\": 0.25,\n"
               "  \"eviction_high_watermark_ratio\": 1,\n"
               "  \"cxl_size\": \"2 GiB\",\n"
               "  \"cluster_id\": \"file_cluster\",\n"
               "  \"max_threads\": \"8\"\n"
               "}\n");
    ck_assert_status_ok(parse(conf_arg, NULL));
    ck_assert_str_eq(cfg.config_path, conf_file);
    ck_assert_int_eq(cfg.port, 6001);
    ck_assert_str_eq(cfg.rpc_address, "127.0.0.1");
    ck_assert_int_eq(cfg.enable_http_metadata_server, 1);
    ck_assert_int_eq(cfg.rpc_enable_tcp_no_delay, 0);
    ck_assert_int_eq(cfg.enable_ha, 0);
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 5000);
    ck_assert_uint_eq(cfg.default_kv_soft_pin_ttl, 60000);
    ck_assert_double_eq_tol(cfg.eviction_ratio, 0.25, 1e-12);
    ck_assert_double_eq_tol(cfg.eviction_high_watermark_ratio, 1.0, 1e-12);
    ck_assert_uint_eq(cfg.cxl_size, 2ull << 30);
    ck_assert_str_eq(cfg.cluster_id, "file_cluster");
    ck_assert_int_eq(cfg.max_threads, 8);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_port], MC_FLAG_SET_FILE);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_config_path], MC_FLAG_SET_ARGV);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_client_ttl], 0);
    ck_assert_int_eq(cfg.client_ttl, 10);
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));

    /* an empty object changes nothing */
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    write_conf("{}");
    ck_assert_status_ok(parse(conf_arg, NULL));
    ck_assert_int_eq(cfg.port, 50051);
}
END_TEST

START_TEST(test_config_command_line_overrides_file)
{
    write_conf("{\"port\": 6001, \"client_ttl\": 30, \"enable_ha\": true, "
               "\"rpc_address\": \"10.0.0.1\"}");
    /* flag before --config_path */
    ck_assert_status_ok(parse("--port=1", "--noenable_ha", conf_arg, NULL));
    ck_assert_int_eq(cfg.port, 1);
    ck_assert_int_eq(cfg.enable_ha, 0);
    ck_assert_int_eq(cfg.client_ttl, 30);
    ck_assert_str_eq(cfg.rpc_address, "10.0.0.1");
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_port], MC_FLAG_SET_ARGV);

    /* flag after --config_path */
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse("--config_path", conf_file, "--port", "2", "--client_ttl=5", NULL));
    ck_assert_int_eq(cfg.port, 2);
    ck_assert_int_eq(cfg.client_ttl, 5);
    ck_assert_int_eq(cfg.enable_ha, 1);
    ck_assert_str_eq(cfg.rpc_address, "10.0.0.1");

    /* a deprecated alias on the command line overrides the file's name */
    write_conf("{\"snapshot_object_store_type\": \"\"}");
    ck_assert_status_ok(parse(conf_arg, "--snapshot_payload_store_type=local", NULL));
    ck_assert_str_eq(cfg.snapshot_object_store_type, "local");
}
END_TEST

START_TEST(test_config_client_live_ttl_sec_alias)
{
    write_conf("{\"client_live_ttl_sec\": 60}");
    ck_assert_status_ok(parse(conf_arg, NULL));
    ck_assert_int_eq(cfg.client_ttl, 60);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_client_ttl], MC_FLAG_SET_FILE);
    /* the command line still wins over the alias */
    ck_assert_status_ok(parse(conf_arg, "--client_ttl=7", NULL));
    ck_assert_int_eq(cfg.client_ttl, 7);
    /* the other deprecated aliases work in a file too */
    write_conf("{\"snapshot_catalog_backend_type\": \"redis\"}");
    ck_assert_status_ok(parse(conf_arg, NULL));
    ck_assert_str_eq(cfg.snapshot_catalog_store_type, "redis");
    /* naming one flag twice through an alias is an error */
    write_conf("{\"client_ttl\": 5, \"client_live_ttl_sec\": 6}");
    ck_assert_status_eq(parse(conf_arg, NULL), MC_INVALID_PARAMS);
    assert_err_mentions("client_live_ttl_sec");
    assert_err_mentions("client_ttl");
    /* the file alias is not a command-line flag */
    ck_assert_status_eq(parse("--client_live_ttl_sec=5", NULL), MC_INVALID_PARAMS);
}
END_TEST

/* @p text must be refused with an error naming the file and @p what, and
 * leave every flag as it was. */
static void assert_conf_rejected(const char *text, const char *what)
{
    write_conf(text);
    ck_assert_status_eq(parse(conf_arg, NULL), MC_INVALID_PARAMS);
    assert_err_mentions(conf_file);
    assert_err_mentions(what);
    ck_assert_int_eq(cfg.port, 50051);
    ck_assert_int_eq(cfg.client_ttl, 10);
    ck_assert_str_eq(cfg.rpc_address, "0.0.0.0");
}

START_TEST(test_config_errors)
{
    /* unknown key (after a valid one, which must not be applied) */
    assert_conf_rejected("{\"port\": 6001, \"prot\": 1}", "unknown key 'prot'");
    /* wrong types */
    assert_conf_rejected("{\"port\": true}", "key 'port': wrong type");
    assert_conf_rejected("{\"port\": 1.5}", "key 'port': wrong type");
    assert_conf_rejected("{\"rpc_address\": 1}", "key 'rpc_address': wrong type");
    assert_conf_rejected("{\"enable_ha\": 1}", "key 'enable_ha': wrong type");
    assert_conf_rejected("{\"client_ttl\": null}", "key 'client_ttl': wrong type");
    assert_conf_rejected("{\"client_ttl\": [1]}", "key 'client_ttl': wrong type");
    assert_conf_rejected("{\"client_ttl\": {\"value\": 1}}", "key 'client_ttl': wrong type");
    /* bad values, through the command-line validators */
    assert_conf_rejected("{\"port\": 6001, \"client_ttl\": 0}", "key 'client_ttl'");
    assert_conf_rejected("{\"port\": 70000}", "a port must be between 0 and 65535");
    assert_conf_rejected("{\"port\": \"abc\"}", "not an integer");
    assert_conf_rejected("{\"default_kv_lease_ttl\": \"5 parsecs\"}",
                         "key 'default_kv_lease_ttl'");
    assert_conf_rejected("{\"default_kv_lease_ttl\": -5}", "key 'default_kv_lease_ttl'");
    assert_conf_rejected("{\"eviction_ratio\": 1.5}", "key 'eviction_ratio'");
    assert_conf_rejected("{\"enable_ha\": \"maybe\"}", "expected true or false");
    assert_conf_rejected("{\"cluster_id\": \"a b\"}", "key 'cluster_id'");
    /* a value the command line overrides must still be valid */
    write_conf("{\"port\": 70000}");
    ck_assert_status_eq(parse("--port=1", conf_arg, NULL), MC_INVALID_PARAMS);
    assert_err_mentions("key 'port'");
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    /* keys only the command line may set */
    assert_conf_rejected("{\"config_path\": \"/etc/other.json\"}", "key 'config_path'");
    assert_conf_rejected("{\"help\": true}", "key 'help'");
    /* invalid JSON, with line and column */
    assert_conf_rejected("{\"port\": 6001,\n \"client_ttl\": }", "line 2, column");
    assert_conf_rejected("", "invalid JSON");
    assert_conf_rejected("{\"port\": 1, \"port\": 2}", "duplicate");
    /* the file must hold an object */
    assert_conf_rejected("[1, 2]", "must hold a JSON object");
    /* unreadable: missing file, directory */
    unlink(conf_file);
    ck_assert_status_eq(parse(conf_arg, NULL), MC_INVALID_PARAMS);
    assert_err_mentions(conf_file);
    assert_err_mentions("No such file");
    {
        char arg[160];
        snprintf(arg, sizeof(arg), "--config_path=%s", conf_dir);
        ck_assert_status_eq(parse(arg, NULL), MC_INVALID_PARAMS);
        assert_err_mentions(conf_dir);
        assert_err_mentions("directory");
    }
    /* --help and --version answer even with a broken file */
    ck_assert_status_ok(parse(conf_arg, "--help", NULL));
    ck_assert_int_eq(cfg.help, 1);
}
END_TEST

START_TEST(test_config_yaml_hint)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/master.yaml", conf_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("port: 6001\n", f);
    fclose(f);
    char arg[200];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    ck_assert_status_eq(parse(arg, NULL), MC_INVALID_PARAMS);
    unlink(path);
    assert_err_mentions(path);
    assert_err_mentions("YAML is not supported");
}
END_TEST

START_TEST(test_config_shipped_json_loads)
{
    char path[4096];
    char arg[4200];
    srcdir_path(path, sizeof(path), "mooncake-master/mooncake-master.json");
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    ck_assert_status_ok(parse(arg, NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    /* the sample sets a mix of types; each must have come from the file */
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_rpc_port], MC_FLAG_SET_FILE);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_default_kv_lease_ttl], MC_FLAG_SET_FILE);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_eviction_high_watermark_ratio], MC_FLAG_SET_FILE);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_client_ttl], MC_FLAG_SET_FILE);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_enable_http_metadata_server], MC_FLAG_SET_FILE);
    ck_assert_int_eq(cfg.is_set[MC_MASTER_FLAG_cluster_id], MC_FLAG_SET_FILE);
    ck_assert_uint_eq(cfg.default_kv_lease_ttl, 10000);
    ck_assert_uint_eq(cfg.max_kv_soft_pin_ttl, 86400000);
    ck_assert_int_eq(cfg.client_ttl, 10);
}
END_TEST

/* The commented sample lists every visible flag but --help and --version
 * as "name = default", and nothing else. */
START_TEST(test_config_sample_conf_lists_every_flag)
{
    char path[4096];
    char line[1024];
    char *text = NULL;
    size_t len = 0;
    srcdir_path(path, sizeof(path), "mooncake-master/mooncake-master.conf");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    FILE *all = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(all);
    fputc('\n', all);
    while (fgets(line, sizeof(line), f) != NULL) {
        fputs(line, all);
        if ((line[0] == '#') || (line[0] == '\n'))
            continue;
        char *sp = strstr(line, " = ");
        ck_assert_msg(sp != NULL, "%s: unexpected line: %s", path, line);
        *sp = '\0';
        ck_assert_msg(mc_master_flag_find(line) >= 0, "%s names an unknown flag '%s'", path,
                      line);
    }
    fclose(f);
    fclose(all);
    /* each flag --help lists has its "name = " line */
    {
        char *help = NULL;
        size_t hlen = 0;
        FILE *h = open_memstream(&help, &hlen);
        ck_assert_ptr_nonnull(h);
        mc_master_flags_print_help(h, "x");
        fclose(h);
        for (char *p = strstr(help, "\n  --"); p != NULL; p = strstr(p + 1, "\n  --")) {
            char name[128];
            char want[160];
            size_t n = strcspn(p + 5, " ");
            ck_assert_uint_lt(n, sizeof(name));
            memcpy(name, p + 5, n);
            name[n] = '\0';
            if ((strcmp(name, "help") == 0) || (strcmp(name, "version") == 0))
                continue; /* command-line only */
            snprintf(want, sizeof(want), "\n%s = ", name);
            ck_assert_msg(strstr(text, want) != NULL, "%s does not document --%s", path, name);
        }
        free(help);
    }
    free(text);
}
END_TEST

/* A file that asks for an unimplemented feature is refused like the
 * command line; the command line can switch it back to the default. */
START_TEST(test_config_unimplemented_feature_refused)
{
    write_conf("{\"enable_cxl\": true, \"nof_heartbeat_failures_threshold\": 4}");
    ck_assert_status_ok(parse(conf_arg, NULL));
    ck_assert_int_eq(cfg.nof_heartbeat_failures_threshold, 4);
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("--enable_cxl");
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(parse(conf_arg, "--noenable_cxl", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
}
END_TEST

/* --promotion_on_hit copies disk replicas back: it needs --enable_offload,
 * and its threshold counts at least one read. */
START_TEST(test_promotion_needs_offload)
{
    ck_assert_status_ok(parse("--promotion_on_hit", NULL));
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    assert_err_mentions("--promotion_on_hit needs --enable_offload");
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_ok(
        parse("--enable_offload", "--promotion_on_hit", "--promotion_admission_threshold=5", NULL));
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
    ck_assert_int_eq(cfg.promotion_on_hit, 1);
    ck_assert_int_eq(cfg.promotion_admission_threshold, 5);
    mc_master_config_cleanup(&cfg);
    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_status_eq(parse("--promotion_admission_threshold=0", NULL), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_config_path_is_implemented)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f    = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    mc_master_flags_print_help(f, "mooncake_master");
    fclose(f);
    char *p = strstr(text, "--config_path (string)");
    ck_assert_ptr_nonnull(p);
    char *next = strstr(p + 1, "\n  --");
    ck_assert_ptr_nonnull(next);
    *next = '\0';
    ck_assert_msg(strstr(p, "not implemented") == NULL, "--config_path works: %s", p);
    free(text);
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
    tcase_add_test(tc, test_unimplemented_features_refused);
    tcase_add_test(tc, test_enable_ha_checks);
    tcase_add_test(tc, test_compat_flags_accepted);
    tcase_add_test(tc, test_snapshot_flags);
    tcase_add_test(tc, test_help_compat_heading);
    tcase_add_test(tc, test_cross_flag_checks);
    suite_add_tcase(s, tc);

    TCase *tf = tcase_create("config_file");
    tcase_add_checked_fixture(tf, conf_setup, conf_teardown);
    tcase_add_test(tf, test_config_file_values_applied);
    tcase_add_test(tf, test_config_command_line_overrides_file);
    tcase_add_test(tf, test_config_client_live_ttl_sec_alias);
    tcase_add_test(tf, test_config_errors);
    tcase_add_test(tf, test_config_yaml_hint);
    tcase_add_test(tf, test_config_shipped_json_loads);
    tcase_add_test(tf, test_config_sample_conf_lists_every_flag);
    tcase_add_test(tf, test_config_path_is_implemented);
    tcase_add_test(tf, test_config_unimplemented_feature_refused);
    tcase_add_test(tf, test_promotion_needs_offload);
    suite_add_tcase(s, tf);
    return s;
}

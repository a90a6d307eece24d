/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA pieces that need no device: NIC discovery against a fake sysfs
 * tree, the selection rules (rdma_devices, MC_MS_AUTO_DISC, MC_MS_FILTERS),
 * NUMA ordering, MR splitting and the handshake codec, and the engine's
 * refusals for protocol "rdma".
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include <mooncake/transfer.h>

#include "check_suites.h"
#include "common/log.h"
#include "transfer/rdma/codec.h"
#include "transfer/rdma/nic.h"

static char root[256];

static void mkdirs(const char *path)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    }
    mkdir(tmp, 0755);
}

static void put_file(const char *rel, const char *text)
{
    char path[512], dir[512];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A device with one port in @p state on NUMA node @p numa. */
static void fake_nic(const char *name, int numa, const char *state, const char *link)
{
    char rel[256], v[32];
    snprintf(rel, sizeof(rel), "class/infiniband/%s/device/numa_node", name);
    snprintf(v, sizeof(v), "%d\n", numa);
    put_file(rel, v);
    snprintf(rel, sizeof(rel), "class/infiniband/%s/ports/1/state", name);
    put_file(rel, state);
    snprintf(rel, sizeof(rel), "class/infiniband/%s/ports/1/link_layer", name);
    put_file(rel, link);
}

static void setup_tree(void)
{
    snprintf(root, sizeof(root), "/tmp/mc-sysfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    fake_nic("mlx5_1", 1, "4: ACTIVE\n", "InfiniBand\n");
    fake_nic("mlx5_0", 0, "4: ACTIVE\n", "Ethernet\n");
    fake_nic("mlx5_2", 0, "1: DOWN\n", "InfiniBand\n");
    fake_nic("mlx5_3", 1, "4: ACTIVE\n", "InfiniBand\n");
}

static void teardown_tree(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_scan)
{
    mc_rdma_nic_t nics[8];
    size_t n = 0;
    ck_assert_status_ok(mc_rdma_nic_scan(root, nics, 8, &n));
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(nics[0].name, "mlx5_0"); /* sorted */
    ck_assert_int_eq(nics[0].numa_node, 0);
    ck_assert_int_eq(nics[0].port, 1);
    ck_assert_int_eq(nics[0].ethernet, 1);
    ck_assert_str_eq(nics[1].name, "mlx5_1");
    ck_assert_int_eq(nics[1].numa_node, 1);
    ck_assert_int_eq(nics[1].ethernet, 0);
    ck_assert_int_eq(nics[2].port, 0); /* DOWN */
    /* cap respected */
    ck_assert_status_ok(mc_rdma_nic_scan(root, nics, 2, &n));
    ck_assert_uint_eq(n, 2);
    /* no tree: no device, no error */
    ck_assert_status_ok(mc_rdma_nic_scan("/nonexistent-mc-root", nics, 8, &n));
    ck_assert_uint_eq(n, 0);
}
END_TEST

static void names_of(const mc_rdma_nic_t *nics, size_t n, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strncat(buf, nics[i].name, cap - strlen(buf) - 1);
        if (i + 1 < n)
            strncat(buf, ",", cap - strlen(buf) - 1);
    }
}

#define SELECT_EQ(dev, ad, flt, want)                                               \
    do {                                                                            \
        mc_rdma_nic_t out_[MC_RDMA_MAX_NICS];                                      \
        size_t n_ = 0;                                                              \
        char got_[256];                                                             \
        ck_assert_status_ok(mc_rdma_nic_select(root, dev, ad, flt, out_, &n_));     \
        names_of(out_, n_, got_, sizeof(got_));                                     \
        ck_assert_str_eq(got_, want);                                               \
    } while (0)

#define SELECT_FAILS(dev, ad, flt, want_st, needle)                                 \
    do {                                                                            \
        mc_rdma_nic_t out_[MC_RDMA_MAX_NICS];                                      \
        size_t n_ = 0;                                                              \
        ck_assert_status_eq(mc_rdma_nic_select(root, dev, ad, flt, out_, &n_), want_st); \
        ck_assert_msg(strstr(mc_last_error_detail(), needle) != NULL,               \
                      "detail should contain \"%s\": %s", needle,                   \
                      mc_last_error_detail());                                      \
    } while (0)

START_TEST(test_select_rules)
{
    /* discovery: ACTIVE ports only */
    SELECT_EQ("", NULL, NULL, "mlx5_0,mlx5_1,mlx5_3");
    SELECT_EQ(NULL, "", "", "mlx5_0,mlx5_1,mlx5_3");
    /* filters whitelist the discovery */
    SELECT_EQ("", NULL, "mlx5_3, mlx5_0", "mlx5_0,mlx5_3");
    SELECT_EQ("", NULL, "mlx5_3,mlx5_9", "mlx5_3");
    /* a list, sorted */
    SELECT_EQ("mlx5_3,mlx5_1", NULL, NULL, "mlx5_1,mlx5_3");
    SELECT_EQ(" mlx5_1 ", "0", NULL, "mlx5_1");
    /* AUTO_DISC=1 ignores the list, honours filters */
    SELECT_EQ("mlx5_1", "1", NULL, "mlx5_0,mlx5_1,mlx5_3");
    SELECT_EQ("mlx5_1", "1", "mlx5_0", "mlx5_0");
    /* refusals name what is wrong */
    SELECT_FAILS("mlx5_7", NULL, NULL, MC_INVALID_PARAMS, "mlx5_7");
    SELECT_FAILS("mlx5_7", NULL, NULL, MC_INVALID_PARAMS, "mlx5_0, mlx5_1");
    SELECT_FAILS("mlx5_2", NULL, NULL, MC_INVALID_PARAMS, "ACTIVE");
    SELECT_FAILS("", "0", NULL, MC_INVALID_PARAMS, "MC_MS_AUTO_DISC=0");
    SELECT_FAILS("", "yes", NULL, MC_INVALID_PARAMS, "MC_MS_AUTO_DISC");
    SELECT_FAILS("mlx5_0,,mlx5_1", NULL, NULL, MC_INVALID_PARAMS, "rdma_devices");
    SELECT_FAILS("mlx5_0,mlx5_0", NULL, NULL, MC_INVALID_PARAMS, "twice");
    SELECT_FAILS("mlx5/0", NULL, NULL, MC_INVALID_PARAMS, "mlx5/0");
    SELECT_FAILS("", NULL, "mlx5_2", MC_NOT_SUPPORTED, "no RDMA device found");
    SELECT_FAILS("", NULL, "bad name", MC_INVALID_PARAMS, "MC_MS_FILTERS");
}
END_TEST

START_TEST(test_select_no_device)
{
    mc_rdma_nic_t out[MC_RDMA_MAX_NICS];
    size_t n = 7;
    ck_assert_status_eq(mc_rdma_nic_select("/nonexistent-mc-root", "", NULL, NULL, out, &n),
                        MC_NOT_SUPPORTED);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "no RDMA device found"));
    ck_assert_status_eq(
        mc_rdma_nic_select("/nonexistent-mc-root", "mlx5_0", NULL, NULL, out, &n),
        MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "mlx5_0"));
}
END_TEST

START_TEST(test_list_parse_cap)
{
    char names[MC_RDMA_MAX_NICS][MC_RDMA_NIC_NAME_MAX];
    char list[4096] = "";
    size_t n;
    for (int i = 0; i <= MC_RDMA_MAX_NICS; i++) {
        char item[16];
        snprintf(item, sizeof(item), "%sn%d", (i > 0) ? "," : "", i);
        strcat(list, item);
    }
    ck_assert_status_eq(mc_rdma_nic_list_parse(list, "x", names, MC_RDMA_MAX_NICS, &n),
                        MC_INVALID_PARAMS);
    *strrchr(list, ',') = '\0';
    ck_assert_status_ok(mc_rdma_nic_list_parse(list, "x", names, MC_RDMA_MAX_NICS, &n));
    ck_assert_uint_eq(n, MC_RDMA_MAX_NICS);
    memset(list, 'a', 64);
    list[64] = '\0'; /* 64 characters: one too long */
    ck_assert_status_eq(mc_rdma_nic_list_parse(list, "x", names, MC_RDMA_MAX_NICS, &n),
                        MC_INVALID_PARAMS);
    list[63] = '\0';
    ck_assert_status_ok(mc_rdma_nic_list_parse(list, "x", names, MC_RDMA_MAX_NICS, &n));
    ck_assert_uint_eq(n, 1);
}
END_TEST

START_TEST(test_numa_order)
{
    mc_rdma_nic_t nics[4] = {{.name = "a", .numa_node = 0}, {.name = "b", .numa_node = 1},
                             {.name = "c", .numa_node = -1}, {.name = "d", .numa_node = 1}};
    size_t order[4];
    mc_rdma_nic_order(nics, 4, 1, order);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 3);
    ck_assert_uint_eq(order[2], 0);
    ck_assert_uint_eq(order[3], 2);
    mc_rdma_nic_order(nics, 4, -1, order);
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(order[i], i);
    /* a touched page of our own heap has a node (or -1 without NUMA) */
    {
        char *p = malloc(4096);
        p[0]    = 1;
        ck_assert_int_ge(mc_rdma_addr_numa(p), -1);
        free(p);
    }
}
END_TEST

START_TEST(test_mr_split)
{
    mc_rdma_span_t s[8];
    ck_assert_uint_eq(mc_rdma_mr_split(0x1000, 0, 100, s, 8), 0);
    ck_assert_uint_eq(mc_rdma_mr_split(UINT64_MAX - 10, 20, 100, s, 8), 0); /* wraps */
    ck_assert_uint_eq(mc_rdma_mr_split(0x1000, 250, 0, s, 8), 1);
    ck_assert_uint_eq(s[0].len, 250);
    ck_assert_uint_eq(mc_rdma_mr_split(0x1000, 100, 100, s, 8), 1);
    ck_assert_uint_eq(mc_rdma_mr_split(0x1000, 250, 100, s, 8), 3);
    ck_assert_uint_eq(s[0].addr, 0x1000);
    ck_assert_uint_eq(s[1].addr, 0x1000 + 100);
    ck_assert_uint_eq(s[2].addr, 0x1000 + 200);
    ck_assert_uint_eq(s[2].len, 50);
    /* count beyond cap: only cap written, count exact */
    ck_assert_uint_eq(mc_rdma_mr_split(0, 1ull << 40, 1ull << 30, s, 8), 1024);
    ck_assert_uint_eq(s[7].addr, 7ull << 30);
    /* 1 TiB + 1 byte with the default 1 TiB max: two MRs */
    ck_assert_uint_eq(mc_rdma_mr_split(0, (1ull << 40) + 1, 1ull << 40, s, 8), 2);
    ck_assert_uint_eq(s[1].len, 1);
}
END_TEST

START_TEST(test_pieces)
{
    mc_rdma_span_t s[16];
    uint64_t sum = 0;
    size_t n;
    /* region at 1000 split every 100; request [1150, 1420) sliced at 64 */
    n = mc_rdma_pieces(1000, 100, 1150, 270, 64, s, 16);
    ck_assert_uint_eq(n, 6); /* 50 | 64 36 | 64 36 | 20 */
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_le(s[i].len, 64);
        ck_assert_uint_eq(mc_rdma_mr_index(1000, 100, s[i].addr),
                          mc_rdma_mr_index(1000, 100, s[i].addr + s[i].len - 1));
        if (i > 0)
            ck_assert_uint_eq(s[i].addr, s[i - 1].addr + s[i - 1].len);
        sum += s[i].len;
    }
    ck_assert_uint_eq(sum, 270);
    ck_assert_uint_eq(s[0].len, 50);
    ck_assert_uint_eq(s[5].addr + s[5].len, 1420);
    /* no split, no slice: one piece */
    ck_assert_uint_eq(mc_rdma_pieces(0, 0, 5, 1ull << 33, 0, s, 16), 1);
    ck_assert_uint_eq(mc_rdma_pieces(1000, 100, 999, 10, 0, s, 16), 0); /* below base */
    ck_assert_uint_eq(mc_rdma_pieces(1000, 100, 1000, 0, 0, s, 16), 0);
}
END_TEST

START_TEST(test_handshake_codec)
{
    mc_rdma_ep_t eps[2], back[4];
    uint8_t buf[MC_RDMA_HS_MAX_SIZE];
    size_t len, n;
    memset(eps, 0, sizeof(eps));
    strcpy(eps[0].nic, "mlx5_0");
    eps[0].port = 1;
    eps[0].mtu  = 5;
    eps[0].qpn  = 0xabcdef;
    eps[0].psn  = 0x123456;
    for (int i = 0; i < 16; i++)
        eps[0].gid[i] = (uint8_t)(0xf0 + i);
    strcpy(eps[1].nic, "mlx5_1");
    eps[1].port = 2;
    eps[1].mtu  = 3;
    eps[1].lid  = 0x1234;
    eps[1].qpn  = 7;
    len = mc_rdma_hs_encode(eps, 2, buf, sizeof(buf));
    ck_assert_uint_eq(len, 8 + 2 * MC_RDMA_HS_EP_SIZE);
    ck_assert_status_ok(mc_rdma_hs_decode(buf, len, back, 4, &n));
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(memcmp(&back[0], &eps[0], sizeof(eps[0])), 0);
    ck_assert_int_eq(memcmp(&back[1], &eps[1], sizeof(eps[1])), 0);
    /* refusals */
    ck_assert_status_eq(mc_rdma_hs_decode(buf, len - 1, back, 4, &n), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(mc_rdma_hs_decode(buf, len, back, 1, &n), MC_DESERIALIZE_FAIL);
    ck_assert_status_eq(mc_rdma_hs_decode(buf, 4, back, 4, &n), MC_DESERIALIZE_FAIL);
    buf[5] = 9; /* version */
    ck_assert_status_eq(mc_rdma_hs_decode(buf, len, back, 4, &n), MC_DESERIALIZE_FAIL);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "version"));
    buf[5] = MC_RDMA_HS_VERSION;
    buf[8 + 64 + 1] = 6; /* mtu of endpoint 0 */
    ck_assert_status_eq(mc_rdma_hs_decode(buf, len, back, 4, &n), MC_DESERIALIZE_FAIL);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "mtu"));
    buf[8 + 64 + 1] = 5;
    buf[8 + 1] = '/'; /* name */
    ck_assert_status_eq(mc_rdma_hs_decode(buf, len, back, 4, &n), MC_DESERIALIZE_FAIL);
    /* encoder refuses what the decoder would */
    eps[0].qpn = 1u << 24;
    ck_assert_uint_eq(mc_rdma_hs_encode(eps, 2, buf, sizeof(buf)), 0);
    eps[0].qpn = 1;
    ck_assert_uint_eq(mc_rdma_hs_encode(eps, 2, buf, 10), 0);
    ck_assert_uint_eq(mc_rdma_hs_encode(eps, 0, buf, sizeof(buf)), 0);
}
END_TEST

/* The engine: protocol rdma against the fake tree (MC_RDMA_SYSFS_ROOT). */
START_TEST(test_engine_refusals)
{
    mc_te_params_t p = {.field_mask = MC_TE_PARAM_PROTOCOL | MC_TE_PARAM_DEVICES,
                        .protocol   = "rdma",
                        .devices    = "mlx5_9"};
    mc_te_h te       = NULL;
    ck_assert_int_eq(setenv("MC_RDMA_SYSFS_ROOT", root, 1), 0);
    unsetenv("MC_MS_AUTO_DISC");
    unsetenv("MC_MS_FILTERS");
    ck_assert_status_eq(mc_te_create(&p, &te), MC_INVALID_PARAMS);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "mlx5_9"));
    ck_assert_ptr_null(te);
    /* present in sysfs: the verbs check (or the build) refuses, naming rdma */
    p.devices = "mlx5_0";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "mlx5_0"));
    ck_assert_int_eq(setenv("MC_MS_AUTO_DISC", "0", 1), 0);
    p.devices = "";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_INVALID_PARAMS);
    ck_assert_int_eq(setenv("MC_MS_AUTO_DISC", "1", 1), 0);
    ck_assert_int_eq(setenv("MC_MS_FILTERS", "mlx5_2", 1), 0);
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "no RDMA device found"));
    unsetenv("MC_MS_AUTO_DISC");
    unsetenv("MC_MS_FILTERS");
    ck_assert_int_eq(setenv("MC_RDMA_SYSFS_ROOT", "/nonexistent-mc-root", 1), 0);
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "no RDMA device found"));
    unsetenv("MC_RDMA_SYSFS_ROOT");
    p.protocol = "cxl";
    ck_assert_status_eq(mc_te_create(&p, &te), MC_NOT_SUPPORTED);
    ck_assert_ptr_nonnull(strstr(mc_last_error_detail(), "not built in this version"));
}
END_TEST

Suite *mc_test_rdma_suite(void)
{
    Suite *s  = suite_create("rdma");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup_tree, teardown_tree);
    tcase_add_test(tc, test_scan);
    tcase_add_test(tc, test_select_rules);
    tcase_add_test(tc, test_select_no_device);
    tcase_add_test(tc, test_list_parse_cap);
    tcase_add_test(tc, test_numa_order);
    tcase_add_test(tc, test_mr_split);
    tcase_add_test(tc, test_pieces);
    tcase_add_test(tc, test_handshake_codec);
    tcase_add_test(tc, test_engine_refusals);
    suite_add_tcase(s, tc);
    return s;
}

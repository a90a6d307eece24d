/* SPDX-License-Identifier: Apache-2.0 */
/* Every unit suite; tests/unit/check_all.c runs them all. */
#ifndef MC_TESTS_CHECK_SUITES_H
#define MC_TESTS_CHECK_SUITES_H

#include <check.h>
#include <mooncake/status.h>

/* ck_assert_status_ok(x): fails with the status name and description. */
#define ck_assert_status_ok(expr)                                                     \
    do {                                                                              \
        int st_ = (int)(expr);                                                        \
        ck_assert_msg(st_ == 0, "%s should succeed but returned %d (%s: %s)", #expr, \
                      st_, mc_status_name(st_), mc_status_string(st_));               \
    } while (0)

#define ck_assert_status_eq(expr, want)                                               \
    do {                                                                              \
        int st_ = (int)(expr);                                                        \
        ck_assert_msg(st_ == (int)(want), "%s should return %s but returned %d (%s)", \
                      #expr, mc_status_name(want), st_, mc_status_name(st_));          \
    } while (0)

#define MC_TEST_SUITES(X) \
    X(status)             \
    X(util)               \
    X(buf)                \
    X(hashmap)            \
    X(alloc)              \
    X(wire)               \
    X(flags)              \
    X(oplog)              \
    X(ship)               \
    X(kv_events)          \
    X(dfs)                \
    X(transfer)           \
    X(shm)                \
    X(scatter)            \
    X(store)              \
    X(store_write)        \
    X(store_commit)       \
    X(hostmem)            \
    X(store_read)         \
    X(loc_cache)          \
    X(async)              \
    X(master_tasks)       \
    X(master_clear)       \
    X(master_resv)        \
    X(master_disk)        \
    X(master_dfs)         \
    X(store_disk)         \
    X(master_mem)         \
    X(nof)                \
    X(etcd)               \
    X(etcd_pb)            \
    X(redis)              \
    X(tensor)             \
    X(fastcopy)           \
    X(codec)              \
    X(reshard)            \
    X(rdma)               \
    X(rdma_path)          \
    X(auth)

#define MC_TEST_SUITE_DECL_(name) Suite *mc_test_##name##_suite(void);
MC_TEST_SUITES(MC_TEST_SUITE_DECL_)
#undef MC_TEST_SUITE_DECL_

#endif

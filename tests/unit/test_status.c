/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Status codes: the numbers are the upstream ErrorCode values Python users
 * compare against, so a renumbered entry must fail here; every entry in
 * MC_STATUS_TABLE must round-trip through the name and description tables.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "check_suites.h"
#include "common/log.h"

static const struct {
    int value;
    const char *name;
    const char *desc;
} table[] = {
#define ROW_(name, value, desc) {value, #name, desc},
    MC_STATUS_TABLE(ROW_)
#undef ROW_
};

#define NROWS ((int)(sizeof(table) / sizeof(table[0])))

START_TEST(test_every_status_round_trips)
{
    ck_assert_str_eq(mc_status_name(table[_i].value), table[_i].name);
    ck_assert_str_eq(mc_status_string(table[_i].value), table[_i].desc);
    ck_assert_msg(table[_i].desc[0] != '\0', "%s should have a description", table[_i].name);
    ck_assert_msg(table[_i].value <= 0, "%s should not be positive", table[_i].name);
}
END_TEST

START_TEST(test_values_and_names_are_unique)
{
    for (int i = 0; i < NROWS; i++)
        for (int j = i + 1; j < NROWS; j++) {
            ck_assert_msg(table[i].value != table[j].value, "%s and %s share the value %d",
                          table[i].name, table[j].name, table[i].value);
            ck_assert_msg(strcmp(table[i].name, table[j].name) != 0, "%s appears twice",
                          table[i].name);
        }
}
END_TEST

START_TEST(test_upstream_numbers)
{
    ck_assert_int_eq(MC_OK, 0);
    ck_assert_int_eq(MC_INTERNAL_ERROR, -1);
    ck_assert_int_eq(MC_BUFFER_OVERFLOW, -10);
    ck_assert_int_eq(MC_SEGMENT_NOT_FOUND, -101);
    ck_assert_int_eq(MC_NO_AVAILABLE_HANDLE, -200);
    ck_assert_int_eq(MC_INVALID_KEY, -400);
    ck_assert_int_eq(MC_INVALID_PARAMS, -600);
    ck_assert_int_eq(MC_REPLICA_IS_NOT_READY, -703);
    ck_assert_int_eq(MC_OBJECT_NOT_FOUND, -704);
    ck_assert_int_eq(MC_OBJECT_ALREADY_EXISTS, -705);
    ck_assert_int_eq(MC_OBJECT_HAS_LEASE, -706);
    ck_assert_int_eq(MC_OBJECT_REPLICA_BUSY, -714);
    ck_assert_int_eq(MC_TRANSFER_FAIL, -800);
    ck_assert_int_eq(MC_RPC_FAIL, -900);
    ck_assert_int_eq(MC_ETCD_OPERATION_ERROR, -1000);
    ck_assert_int_eq(MC_FILE_NOT_FOUND, -1100);
    ck_assert_int_eq(MC_TASK_NOT_FOUND, -1400);
    ck_assert_int_eq(MC_DESERIALIZE_FAIL, -1502);
    ck_assert_int_eq(MC_TENANT_NOT_EMPTY, -1702);
    ck_assert_str_eq(mc_status_name(-704), "OBJECT_NOT_FOUND");
    ck_assert_str_eq(mc_status_string(-704), "object not found");
    ck_assert_str_eq(mc_status_name(-200), "NO_AVAILABLE_HANDLE");
    ck_assert_str_eq(mc_status_name(-600), "INVALID_PARAMS");
    ck_assert_str_eq(mc_status_name(-706), "OBJECT_HAS_LEASE");
    ck_assert_str_eq(mc_status_name(-1400), "TASK_NOT_FOUND");
    ck_assert_str_eq(mc_status_name(0), "OK");
    ck_assert_msg(mc_status_is_err(MC_OBJECT_NOT_FOUND), "-704 should be an error");
    ck_assert_msg(!mc_status_is_err(MC_OK), "0 should not be an error");
}
END_TEST

START_TEST(test_unknown_status)
{
    static const int unknown[] = {1, 42, -2, -199, -705 + 100, -99999, 2147483647,
                                  -2147483647 - 1};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        ck_assert_str_eq(mc_status_name(unknown[i]), "UNKNOWN");
        ck_assert_str_eq(mc_status_string(unknown[i]), "unknown status");
    }
}
END_TEST

static void *detail_in_thread(void *arg)
{
    (void)arg;
    return (void *)mc_last_error_detail();
}

START_TEST(test_error_detail_is_thread_local)
{
    void *other = NULL;
    pthread_t t;
    mc_set_error_detail("segment %s is gone (%d)", "host:12300", -101);
    ck_assert_str_eq(mc_last_error_detail(), "segment host:12300 is gone (-101)");
    ck_assert_int_eq(pthread_create(&t, NULL, detail_in_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &other), 0);
    ck_assert_msg(other != NULL && ((const char *)other)[0] == '\0',
                  "another thread should not see this thread's error detail");
    ck_assert_str_eq(mc_last_error_detail(), "segment host:12300 is gone (-101)");
}
END_TEST

Suite *mc_test_status_suite(void)
{
    Suite *s  = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_every_status_round_trips, 0, NROWS);
    tcase_add_test(tc, test_values_and_names_are_unique);
    tcase_add_test(tc, test_upstream_numbers);
    tcase_add_test(tc, test_unknown_status);
    tcase_add_test(tc, test_error_detail_is_thread_local);
    suite_add_tcase(s, tc);
    return s;
}

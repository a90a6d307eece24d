/* SPDX-License-Identifier: Apache-2.0 */
/* The one Check runner: every suite in check_suites.h, CK_NORMAL output. */
#include "config.h"

#include <stdlib.h>

#include "check_suites.h"

int main(void)
{
    SRunner *sr = srunner_create(NULL);
#define MC_TEST_SUITE_ADD_(name) srunner_add_suite(sr, mc_test_##name##_suite());
    MC_TEST_SUITES(MC_TEST_SUITE_ADD_)
#undef MC_TEST_SUITE_ADD_
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

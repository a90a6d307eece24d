/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A real mooncake_master for the unit suites that need one.
 *
 * mc_test_master_start() runs $MC_MASTER_BIN (default ./mooncake_master:
 * `make check` runs in the build tree) on a free loopback port with the
 * given extra flags, waits a bounded time for it to accept connections
 * and dies with the test process (PR_SET_PDEATHSIG), so a crashed test
 * cannot leave it behind.  Its stderr is the test's (so a sanitizer report
 * shows), or $MC_TEST_MASTER_LOG (appended) when that is set.
 * mc_test_master_stop() sends SIGTERM and waits a bounded time, then
 * SIGKILLs; it returns the exit status, -1 when the master had to be
 * killed or died of a signal.  A sanitizer build exits non-zero on a
 * leak, so a suite can assert a clean shutdown.
 */
#ifndef MC_TESTS_MASTER_PROC_H
#define MC_TESTS_MASTER_PROC_H

#include <stdint.h>
#include <sys/types.h>

typedef struct mc_test_master {
    pid_t pid;
    uint16_t port;
    char addr[64]; /* "127.0.0.1:port" */
} mc_test_master_t;

/* @p extra: NULL-terminated list of further flags (may be NULL). */
void mc_test_master_start(mc_test_master_t *m, const char *const *extra);
int mc_test_master_stop(mc_test_master_t *m);
/* Stop the master and start a fresh one (no state) on the same port, with
 * @p extra: what clients see of a master restart. */
void mc_test_master_restart(mc_test_master_t *m, const char *const *extra);

/* A loopback TCP port that was free a moment ago. */
uint16_t mc_test_free_port(void);

/*
 * "--tenant_quota_connector_uri=<file>" of a quota policy (written once per
 * process) that registers the tenants the suites use (default, other,
 * tenant-2, another-tenant) with 1 TiB each: with --enable_multi_tenants
 * next to it, a master isolates those tenants as before the mode existed.
 */
const char *mc_test_tenant_policy_flag(void);

/* Monotonic milliseconds, for bounded waits. */
uint64_t mc_test_now_ms(void);

#endif

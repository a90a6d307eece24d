/* SPDX-License-Identifier: Apache-2.0 */
/* A real mooncake_master for the unit suites (master_proc.h). */
#include "config.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_suites.h"
#include "master_proc.h"

#define MC_TEST_MASTER_MAX_ARGS 32

uint64_t mc_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The lowest port the kernel hands out to connect() and bind(0). */
static unsigned ephemeral_low(void)
{
    unsigned lo = 32768, hi;
    FILE *f     = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f) {
        if (fscanf(f, "%u %u", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    return lo > 65535 ? 32768 : lo;
}

static int bind_loopback(int fd, uint16_t port)
{
    struct sockaddr_in a;

    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port        = htons(port);
    return bind(fd, (struct sockaddr *)&a, sizeof(a));
}

/* Drawn at random from below the ephemeral range, so that no outgoing
 * connection of a suite running beside this one can take the port before
 * the daemon binds it (as one from bind(0) could); never the same port twice
 * in one process.  bind(0) where the range leaves no room below it. */
uint16_t mc_test_free_port(void)
{
    static uint8_t given[65536 / 8];
    static unsigned seed;
    unsigned high = ephemeral_low(), low = high / 2 < 1024 ? 1024 : high / 2;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    int fd;

    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)mc_test_now_ms();
    for (int i = 0; high >= low + 1024 && i < 200; i++) {
        uint16_t port = (uint16_t)(low + (unsigned)rand_r(&seed) % (high - low));

        if (given[port / 8] & (1u << (port % 8)))
            continue;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_msg(fd >= 0, "a socket can be created");
        if (bind_loopback(fd, port) == 0) {
            close(fd);
            given[port / 8] |= (uint8_t)(1u << (port % 8));
            return port;
        }
        close(fd);
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_msg(fd >= 0, "a socket can be created");
    ck_assert_msg(bind_loopback(fd, 0) == 0, "port 0 can be bound");
    ck_assert_msg(getsockname(fd, (struct sockaddr *)&a, &alen) == 0, "getsockname works");
    close(fd);
    return ntohs(a.sin_port);
}

static int port_accepts(uint16_t port)
{
    struct sockaddr_in a;
    int ok, fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return 0;
    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port        = htons(port);
    ok                = (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    close(fd);
    return ok;
}

/* Start the master on m->port (m->addr already set). */
static void master_spawn(mc_test_master_t *m, const char *const *extra);

void mc_test_master_start(mc_test_master_t *m, const char *const *extra)
{
    m->port = mc_test_free_port();
    snprintf(m->addr, sizeof(m->addr), "127.0.0.1:%u", (unsigned)m->port);
    master_spawn(m, extra);
}

void mc_test_master_restart(mc_test_master_t *m, const char *const *extra)
{
    mc_test_master_stop(m);
    master_spawn(m, extra);
}

static void master_spawn(mc_test_master_t *m, const char *const *extra)
{
    const char *bin = getenv("MC_MASTER_BIN");
    const char *argv[MC_TEST_MASTER_MAX_ARGS];
    char port_arg[32];
    uint64_t deadline;
    size_t argc = 0;

    if ((bin == NULL) || (*bin == '\0'))
        bin = "./mooncake_master";
    ck_assert_msg(access(bin, X_OK) == 0,
                  "the master binary %s should be executable (set MC_MASTER_BIN)", bin);
    snprintf(port_arg, sizeof(port_arg), "--port=%u", (unsigned)m->port);
    argv[argc++] = bin;
    argv[argc++] = port_arg;
    argv[argc++] = "--rpc_address=127.0.0.1";
    argv[argc++] = "--enable_metric_reporting=false";
    argv[argc++] = "--metrics_port=0";
    for (size_t i = 0; (extra != NULL) && (extra[i] != NULL); i++) {
        ck_assert_msg(argc + 1 < MC_TEST_MASTER_MAX_ARGS, "too many master flags");
        argv[argc++] = extra[i];
    }
    argv[argc] = NULL;

    m->pid = fork();
    ck_assert_msg(m->pid >= 0, "fork works");
    if (m->pid == 0) {
        const char *log = getenv("MC_TEST_MASTER_LOG");
        int null        = open("/dev/null", O_RDWR);
        int err = (log != NULL) ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
        }
        if (err >= 0)
            dup2(err, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    deadline = mc_test_now_ms() + 10000;
    while (!port_accepts(m->port)) {
        int status;
        ck_assert_msg(waitpid(m->pid, &status, WNOHANG) == 0,
                      "mooncake_master exited before accepting connections");
        ck_assert_msg(mc_test_now_ms() < deadline, "mooncake_master should listen within 10 s");
        poll(NULL, 0, 10);
    }
}

int mc_test_master_stop(mc_test_master_t *m)
{
    uint64_t deadline;
    int status = 0;

    if (m->pid <= 0)
        return -1;
    kill(m->pid, SIGTERM);
    deadline = mc_test_now_ms() + 10000;
    while (waitpid(m->pid, &status, WNOHANG) == 0) {
        if (mc_test_now_ms() >= deadline) {
            kill(m->pid, SIGKILL);
            waitpid(m->pid, &status, 0);
            m->pid = -1;
            return -1;
        }
        poll(NULL, 0, 10);
    }
    m->pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const char *mc_test_tenant_policy_flag(void)
{
    static char flag[128];
    char path[64] = "/tmp/mc-tenants-XXXXXX";
    int fd;
    FILE *f;

    if (flag[0] != '\0')
        return flag;
    fd = mkstemp(path);
    if ((fd < 0) || ((f = fdopen(fd, "w")) == NULL)) {
        perror("mc_test_tenant_policy_flag");
        abort();
    }
    fputs("version: 1\ntenants:\n", f);
    fputs("  - name: default\n    quota: 1TB\n  - name: other\n    quota: 1TB\n", f);
    fputs("  - name: tenant-2\n    quota: 1TB\n  - name: another-tenant\n    quota: 1TB\n", f);
    fclose(f);
    snprintf(flag, sizeof(flag), "--tenant_quota_connector_uri=%s", path);
    return flag;
}

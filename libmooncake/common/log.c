/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging and status strings.  The threshold is read from MC_LOG_LEVEL by a
 * library constructor so that both the daemon and every client process get
 * the same behaviour without calling anything.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

int mc_log_threshold = MC_LOG_WARN;
unsigned mc_log_rate_per_s = 10;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

int mc_log_parse_level(const char *s, int *level_p)
{
    if ((s == NULL) || (*s == '\0'))
        return -1;
    if ((s[0] >= '0') && (s[0] <= '4') && (s[1] == '\0')) {
        *level_p = s[0] - '0';
        return 0;
    }
    for (int i = 0; i < 5; i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            *level_p = i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *level_p = MC_LOG_WARN;
        return 0;
    }
    return -1;
}

void mc_log_init_from_env(void)
{
    int level;
    const char *rate = getenv("MC_LOG_RATE_LIMIT");
    if (mc_log_parse_level(getenv("MC_LOG_LEVEL"), &level) == 0)
        mc_log_threshold = level;
    if ((rate != NULL) && (*rate != '\0')) {
        char *end;
        unsigned long v = strtoul(rate, &end, 10);
        if ((*end == '\0') && (v <= 1000000))
            mc_log_rate_per_s = (unsigned)v;
    }
}

__attribute__((constructor)) static void mc_log_ctor(void)
{
    mc_log_init_from_env();
}

void mc_log_set_level(int level)
{
    if (level < MC_LOG_ERROR)
        level = MC_LOG_ERROR;
    if (level > MC_LOG_TRACE)
        level = MC_LOG_TRACE;
    mc_log_threshold = level;
}

void mc_log_write(int level, const char *file, int line, const char *fmt, ...)
{
    int saved_errno = errno; /* keep %m meaningful */
    char msg[1024];
    char stamp[40];
    struct timeval tv;
    struct tm tm;
    const char *base = strrchr(file, '/');
    va_list ap;

    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);

    errno = saved_errno;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    fprintf(stderr, "%s.%06ld %-5s [%d] %s:%d %s\n", stamp, (long)tv.tv_usec,
            level_names[level < 0 ? 0 : (level > 4 ? 4 : level)], (int)getpid(),
            base ? base + 1 : file, line, msg);
    errno = saved_errno;
}

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

int mc_log_rl_allow(mc_log_rl_t *rl, uint32_t *dropped_p)
{
    struct timespec ts;
    uint64_t now_ms;
    int ok;

    *dropped_p = 0;
    if (mc_log_rate_per_s == 0)
        return 1;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    pthread_mutex_lock(&rl_lock);
    if (now_ms - rl->window_ms >= 1000) {
        rl->window_ms = now_ms;
        rl->printed   = 0;
    }
    ok = rl->printed < mc_log_rate_per_s;
    if (ok) {
        rl->printed++;
        *dropped_p  = rl->dropped;
        rl->dropped = 0;
    } else {
        rl->dropped++;
    }
    pthread_mutex_unlock(&rl_lock);
    return ok;
}

static __thread char error_detail[512];

void mc_set_error_detail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_detail, sizeof(error_detail), fmt, ap);
    va_end(ap);
}

const char *mc_last_error_detail(void)
{
    return error_detail;
}

const char *mc_status_name(int status)
{
    switch (status) {
#define MC_STATUS_NAME_(name, value, desc) case value: return #name;
    MC_STATUS_TABLE(MC_STATUS_NAME_)
#undef MC_STATUS_NAME_
    default:
        return "UNKNOWN";
    }
}

const char *mc_status_string(int status)
{
    switch (status) {
#define MC_STATUS_DESC_(name, value, desc) case value: return desc;
    MC_STATUS_TABLE(MC_STATUS_DESC_)
#undef MC_STATUS_DESC_
    default:
        return "unknown status";
    }
}

const char *mc_version_string(void)
{
    return PACKAGE_VERSION;
}

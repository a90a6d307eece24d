/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One logger for the library and the daemon: timestamped lines on stderr,
 * a process-wide threshold from mc_log_set_level() or MC_LOG_LEVEL
 * (error|warn|info|debug|trace or 0..4).  The library never prints to
 * stdout.  Messages are lower case; append %m after a failed system call.
 */
#ifndef MC_COMMON_LOG_H
#define MC_COMMON_LOG_H

#include <stdint.h>

#include <mooncake/mooncake.h>

typedef enum mc_log_level {
    MC_LOG_ERROR = 0,
    MC_LOG_WARN  = 1,
    MC_LOG_INFO  = 2,
    MC_LOG_DEBUG = 3,
    MC_LOG_TRACE = 4
} mc_log_level_t;

extern int mc_log_threshold;

void mc_log_init_from_env(void);
int mc_log_parse_level(const char *s, int *level_p);
void mc_log_write(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define mc_log_(lvl, ...)                                                    \
    do {                                                                     \
        if ((lvl) <= mc_log_threshold)                                       \
            mc_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);            \
    } while (0)

#define mc_error(...) mc_log_(MC_LOG_ERROR, __VA_ARGS__)
#define mc_warn(...)  mc_log_(MC_LOG_WARN, __VA_ARGS__)
#define mc_info(...)  mc_log_(MC_LOG_INFO, __VA_ARGS__)
#define mc_debug(...) mc_log_(MC_LOG_DEBUG, __VA_ARGS__)
#define mc_trace(...) mc_log_(MC_LOG_TRACE, __VA_ARGS__)

/*
 * Rate-limited lines, for what a peer can make us log at will (bad frames,
 * refused requests): each call site prints at most mc_log_rate_per_s lines
 * a second (0: no limit; $MC_LOG_RATE_LIMIT, or the daemons' --log_rate_limit), and
 * its next printed line after a quiet spell says how many it dropped.
 */
typedef struct mc_log_rl {
    uint64_t window_ms; /* start of the current one-second window */
    uint32_t printed;   /* lines printed in it */
    uint32_t dropped;   /* lines dropped since the last printed one */
} mc_log_rl_t;

extern unsigned mc_log_rate_per_s;

/* Returns 1 when the site may print now; *dropped_p is how many it dropped
 * before this one (and is reset). */
int mc_log_rl_allow(mc_log_rl_t *rl, uint32_t *dropped_p);

#define mc_log_ratelimited(lvl, ...)                                                        \
    do {                                                                                  \
        static mc_log_rl_t rl_;                                                           \
        uint32_t dropped_;                                                                \
        if (((lvl) <= mc_log_threshold) && mc_log_rl_allow(&rl_, &dropped_)) {            \
            if (dropped_ > 0)                                                             \
                mc_log_write((lvl), __FILE__, __LINE__,                                   \
                             "(%u lines like the next one were suppressed)", dropped_);   \
            mc_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);                         \
        }                                                                                 \
    } while (0)

/* Record the thread-local detail returned by mc_last_error_detail(). */
void mc_set_error_detail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* MC_COMMON_LOG_H */

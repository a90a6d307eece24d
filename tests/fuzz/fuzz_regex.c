/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the REMOVE_BY_REGEX pattern bounds
 * (common/regex_limit.c): any bytes from the wire are either refused by
 * mc_regex_check() with a reason, or compile with regcomp() within a
 * small budget of time and memory and match a long key within it too.
 * The time is this thread's CPU time (MC_FUZZ_REGEX_CPU_S), so a
 * machine that stalls the fuzzer (a busy CI host) is no finding, while a
 * pattern that slips past the bounds aborts with the pattern printed;
 * -rss_limit_mb bounds memory, libFuzzer's wall-clock -timeout catches
 * a hang.  A refusal without a reason aborts too.
 */
#include "config.h"

#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/regex_limit.h"

/* CPU seconds one pattern may take to compile and match, sanitizers on;
 * the slowest of the corpus takes under 0.02 s without them. */
#ifndef MC_FUZZ_REGEX_CPU_S
#define MC_FUZZ_REGEX_CPU_S 2.0
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char key[4097];
    char why[160] = "";
    char *pat;
    regex_t re;
    double t0, spent;

    if (key[0] == '\0') {
        for (size_t i = 0; i < sizeof(key) - 1; i++)
            key[i] = "ab-0_"[i % 5];
    }
    if (memchr(data, '\0', size) != NULL)
        return 0; /* the master refuses a NUL before the check */
    if (mc_regex_check((const char *)data, size, why, sizeof(why)) != 0) {
        if (why[0] == '\0') {
            fprintf(stderr, "fuzz_regex: a refusal without a reason\n");
            abort();
        }
        return 0;
    }
    pat = malloc(size + 1);
    if (pat == NULL)
        return 0;
    memcpy(pat, data, size);
    pat[size] = '\0';
    t0 = cpu_now();
    if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0) {
        (void)regexec(&re, key, 0, NULL, 0);
        regfree(&re);
    }
    spent = cpu_now() - t0;
    if (spent > MC_FUZZ_REGEX_CPU_S) {
        fprintf(stderr, "fuzz_regex: %.2f s of CPU for a pattern the check let through: %s\n",
                spent, pat);
        abort();
    }
    free(pat);
    return 0;
}

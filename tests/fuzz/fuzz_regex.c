/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the REMOVE_BY_REGEX pattern bounds
 * (common/regex_limit.c): any bytes from the wire are either refused by
 * mc_regex_check() with a reason, or compile with regcomp() within a
 * small budget of time and memory and match a long key within it too.
 * libFuzzer's -timeout and -rss_limit_mb turn a pattern that slips past
 * the bounds into a failure; a refusal without a reason aborts.
 */
#include "config.h"

#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/regex_limit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char key[4097];
    char why[160] = "";
    char *pat;
    regex_t re;

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
    if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0) {
        (void)regexec(&re, key, 0, NULL, 0);
        regfree(&re);
    }
    free(pat);
    return 0;
}

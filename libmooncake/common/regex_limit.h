/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bounds on what a POSIX extended regular expression may compile to, checked
 * before regcomp() sees it (docs/protocol.md §5.8 REMOVE_BY_REGEX).
 *
 * glibc's regcomp() expands every interval into copies of its operand, so
 * "a{32767}{32767}" asks for about 10^9 nodes: seconds of CPU and gigabytes
 * of memory inside one call that nothing can interrupt.  The master runs it
 * on its only event loop, so the pattern is measured first by a linear scan
 * that computes the expanded size without building anything.
 */
#ifndef MC_COMMON_REGEX_LIMIT_H
#define MC_COMMON_REGEX_LIMIT_H

#include <stddef.h>

/* Largest count in an interval {m,n} (POSIX's minimum RE_DUP_MAX). */
#define MC_REGEX_MAX_REPEAT   255
/* Deepest nesting of parenthesised groups. */
#define MC_REGEX_MAX_DEPTH    32
/* Largest expanded size: atoms after every interval is unrolled. */
#define MC_REGEX_MAX_EXPANDED 1024

/*
 * Check the @p len bytes at @p pat (no NUL inside) against the limits above
 * and refuse back-references (\1-\9, which make matching exponential).
 * Returns 0 when the pattern may be given to regcomp(), -1 otherwise with a
 * sentence saying why in @p why (NUL-terminated, truncated to @p whylen).
 * Syntax errors the scan does not need to understand are left to regcomp().
 */
int mc_regex_check(const char *pat, size_t len, char *why, size_t whylen);

#endif /* MC_COMMON_REGEX_LIMIT_H */

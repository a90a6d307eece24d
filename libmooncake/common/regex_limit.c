/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The expanded-size scan behind mc_regex_check() (regex_limit.h).
 *
 * One pass over the pattern with a stack of open groups.  Each group keeps
 * the size of what it holds so far (every alternative adds up: the
 * compiled automaton holds them all; an empty alternative counts one, as
 * regcomp's closure over empty alternatives grows with their number times
 * the copies: 2.6 s for "(a|aa" + 80 '|' + "){170}z", where non-empty ones
 * cost nothing of the kind) and the size of its last atom, which
 * a following repetition multiplies: "x{m,n}" unrolls into max(m,n) copies
 * of x (m+1 for "{m,}"), "x+" into two.  A closing parenthesis turns the
 * group into one atom of its parent.  Sizes are checked against
 * MC_REGEX_MAX_EXPANDED after every step, so no product can overflow:
 * at most MC_REGEX_MAX_EXPANDED * MC_REGEX_MAX_REPEAT before the check.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/regex_limit.h"

#define MC_MAX_U64(a, b) ((a) > (b) ? (a) : (b))

typedef struct rx_group {
    uint64_t size; /* everything in the group so far */
    uint64_t last; /* the last atom, for a repetition */
    int alt;       /* it has a '|' */
    int empty;     /* its current alternative holds nothing yet */
} rx_group_t;

/* A group's alternative ends (at '|', ')' or the end): an empty one
 * counts one (the file's comment). */
static void alt_end(rx_group_t *g, int last_one)
{
    if (g->empty && (g->alt || !last_one))
        g->size += 1;
}

static int refuse(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    if ((why != NULL) && (whylen > 0)) {
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Skip a bracket expression starting at pat[i] == '['; returns the index
 * after its closing ']', or len when it does not close. */
static size_t skip_bracket(const char *pat, size_t len, size_t i)
{
    i++;
    if ((i < len) && (pat[i] == '^'))
        i++;
    if ((i < len) && (pat[i] == ']'))
        i++; /* a leading ']' is literal */
    while (i < len) {
        if ((pat[i] == '[') && (i + 1 < len) &&
            ((pat[i + 1] == ':') || (pat[i + 1] == '.') || (pat[i + 1] == '='))) {
            char kind = pat[i + 1];
            i += 2;
            while ((i + 1 < len) && !((pat[i] == kind) && (pat[i + 1] == ']')))
                i++;
            if (i + 1 >= len)
                return len;
            i += 2;
            continue;
        }
        if (pat[i] == ']')
            return i + 1;
        i++;
    }
    return len;
}

/* Parse "{m}", "{m,}" or "{m,n}" at pat[i] == '{'.  Returns the index after
 * '}' with the bounds in *m_p and *n_p (*open_p set for "{m,}"), or 0
 * when it is no interval (regcomp then takes the brace literally or
 * refuses the pattern). */
static size_t parse_interval(const char *pat, size_t len, size_t i, uint64_t *m_p,
                             uint64_t *n_p, int *open_p)
{
    uint64_t m = 0, n = 0;
    int digits = 0, ndigits = 0, comma = 0;

    for (i++; (i < len) && (pat[i] >= '0') && (pat[i] <= '9'); i++, digits++)
        m = (m < 100000) ? (m * 10 + (uint64_t)(pat[i] - '0')) : m;
    if ((i < len) && (pat[i] == ',')) {
        comma = 1;
        for (i++; (i < len) && (pat[i] >= '0') && (pat[i] <= '9'); i++, ndigits++)
            n = (n < 100000) ? (n * 10 + (uint64_t)(pat[i] - '0')) : n;
    }
    if ((i >= len) || (pat[i] != '}') || ((digits == 0) && (ndigits == 0)))
        return 0;
    *m_p    = m;
    *n_p    = comma ? (ndigits ? n : m) : m;
    *open_p = comma && (ndigits == 0);
    return i + 1;
}

int mc_regex_check(const char *pat, size_t len, char *why, size_t whylen)
{
    rx_group_t st[MC_REGEX_MAX_DEPTH + 1];
    unsigned depth = 0;
    size_t i       = 0;

    /* Repetition operators in a row: 0 none, 1 after one, 2 after one and
     * a '?' (the lazy form other dialects write, "x*?", which matches the
     * same keys).  Any other stacking ("x+?+", "x**", "x{2}*") is refused:
     * POSIX leaves it undefined and glibc's regcomp takes time exponential
     * in the length of such a run. */
    int run = 0;

    memset(&st[0], 0, sizeof(st[0]));
    st[0].empty = 1;
    while (i < len) {
        char ch       = pat[i];
        rx_group_t *g = &st[depth];
        uint64_t atom = 1;
        int prev_run  = run;

        run = 0;

        switch (ch) {
        case '(':
            if (depth == MC_REGEX_MAX_DEPTH)
                return refuse(why, whylen, "regex nests groups deeper than %d",
                              MC_REGEX_MAX_DEPTH);
            depth++;
            memset(&st[depth], 0, sizeof(st[depth]));
            st[depth].empty = 1;
            i++;
            continue;
        case ')':
            if (depth == 0) {
                i++; /* an unmatched ')' is an ordinary character in ERE */
                break;
            }
            alt_end(&st[depth], 1);
            atom = st[depth].size + 2;
            depth--;
            g = &st[depth];
            i++;
            break;
        case '|':
            alt_end(g, 0);
            g->alt   = 1;
            g->empty = 1;
            g->last  = 0;
            i++;
            goto check;
        case '*':
        case '?':
        case '+': {
            uint64_t grown = (ch == '+') ? g->last : 0;
            if ((prev_run == 2) || ((prev_run == 1) && (ch != '?')))
                return refuse(why, whylen, "regex stacks repetition operators (at offset %zu)",
                              i);
            run = prev_run + 1;
            g->size += grown + 1;
            g->last += grown + 1;
            i++;
            goto check;
        }
        case '{': {
            uint64_t m, n;
            int open;
            size_t next = parse_interval(pat, len, i, &m, &n, &open);
            uint64_t copies;
            if (next == 0) {
                i++; /* not an interval: one literal brace */
                break;
            }
            if (prev_run != 0)
                return refuse(why, whylen, "regex stacks repetition operators (at offset %zu)",
                              i);
            run = 1;
            if ((m > MC_REGEX_MAX_REPEAT) || (n > MC_REGEX_MAX_REPEAT))
                return refuse(why, whylen, "regex repetition count %llu is over %d",
                              (unsigned long long)MC_MAX_U64(m, n), MC_REGEX_MAX_REPEAT);
            copies  = (open ? m + 1 : MC_MAX_U64(m, n));
            copies  = copies ? copies : 1;
            g->size = g->size - g->last + g->last * copies;
            g->last = g->last * copies;
            i       = next;
            goto check;
        }
        case '[':
            i = skip_bracket(pat, len, i);
            break;
        case '\\':
            if (i + 1 >= len)
                return refuse(why, whylen, "regex ends with a lone backslash");
            if ((pat[i + 1] >= '1') && (pat[i + 1] <= '9'))
                return refuse(why, whylen, "regex back-references (\\%c) are not accepted",
                              pat[i + 1]);
            i += 2;
            break;
        default:
            i++;
            break;
        }
        g->size += atom;
        g->last  = atom;
        g->empty = 0;
    check:
        if (st[depth].size > MC_REGEX_MAX_EXPANDED)
            return refuse(why, whylen,
                          "regex would compile to more than %d atoms once its repetitions "
                          "are unrolled",
                          MC_REGEX_MAX_EXPANDED);
    }
    alt_end(&st[depth], 1);
    if (st[depth].size > MC_REGEX_MAX_EXPANDED)
        return refuse(why, whylen, "regex would compile to more than %d atoms",
                      MC_REGEX_MAX_EXPANDED);
    /* unclosed groups (regcomp refuses them) still count */
    for (uint64_t total = 0; depth > 0; depth--) {
        total += st[depth].size;
        if (total + st[depth - 1].size > MC_REGEX_MAX_EXPANDED)
            return refuse(why, whylen, "regex would compile to more than %d atoms",
                          MC_REGEX_MAX_EXPANDED);
    }
    return 0;
}

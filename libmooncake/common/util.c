/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Clocks, identifiers, strict parsers and socket helpers.  Parsers reject
 * anything they do not fully understand: a configuration mistake should be
 * an error message, not a silently different value.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

uint64_t mc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mc_timespec_add_ms(struct timespec *ts, uint64_t ms)
{
    ts->tv_sec += (time_t)(ms / 1000u);
    ts->tv_nsec += (long)(ms % 1000u) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

uint64_t mc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND(v0, v1, v2, v3)                                                          \
    do {                                                                                   \
        v0 += v1;                                                                          \
        v1 = SIP_ROTL(v1, 13);                                                             \
        v1 ^= v0;                                                                          \
        v0 = SIP_ROTL(v0, 32);                                                             \
        v2 += v3;                                                                          \
        v3 = SIP_ROTL(v3, 16);                                                             \
        v3 ^= v2;                                                                          \
        v0 += v3;                                                                          \
        v3 = SIP_ROTL(v3, 21);                                                             \
        v3 ^= v0;                                                                          \
        v2 += v1;                                                                          \
        v1 = SIP_ROTL(v1, 17);                                                             \
        v1 ^= v2;                                                                          \
        v2 = SIP_ROTL(v2, 32);                                                             \
    } while (0)

uint64_t mc_siphash24(const uint64_t k[2], const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    uint64_t b = (uint64_t)len << 56, m;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        m = 0;
        for (int j = 7; j >= 0; j--)
            m = (m << 8) | p[i + (size_t)j];
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    for (size_t j = 0; i + j < len; j++)
        b |= (uint64_t)p[i + j] << (8 * j);
    v3 ^= b;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (int r = 0; r < 4; r++)
        SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

void mc_uuid_generate(mc_uuid_t *u)
{
    uint8_t b[16];
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            /* Fall back to clock + pid mixing; uniqueness, not secrecy. */
            uint64_t t = mc_now_ns() ^ ((uint64_t)getpid() << 32);
            for (size_t i = got; i < sizeof(b); i++) {
                t = t * 6364136223846793005ull + 1442695040888963407ull;
                b[i] = (uint8_t)(t >> 56);
            }
            break;
        }
        got += (size_t)n;
    }
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    u->hi = 0;
    u->lo = 0;
    for (int i = 0; i < 8; i++) {
        u->hi = (u->hi << 8) | b[i];
        u->lo = (u->lo << 8) | b[8 + i];
    }
}

void mc_uuid_format(mc_uuid_t u, char out[37])
{
    snprintf(out, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(u.hi >> 32),
             (unsigned)((u.hi >> 16) & 0xffff), (unsigned)(u.hi & 0xffff),
             (unsigned)(u.lo >> 48), (unsigned long long)(u.lo & 0xffffffffffffull));
}

int mc_uuid_parse(const char *s, mc_uuid_t *u)
{
    uint64_t hi = 0, lo = 0;
    int nibbles = 0;
    if (s == NULL)
        return -1;
    for (const char *p = s; *p != '\0'; p++) {
        int v;
        if (*p == '-')
            continue;
        if (!isxdigit((unsigned char)*p))
            return -1;
        v = isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10);
        if (nibbles < 16)
            hi = (hi << 4) | (uint64_t)v;
        else if (nibbles < 32)
            lo = (lo << 4) | (uint64_t)v;
        else
            return -1;
        nibbles++;
    }
    if (nibbles != 32)
        return -1;
    u->hi = hi;
    u->lo = lo;
    return 0;
}

int mc_parse_u64(const char *s, uint64_t *v_p)
{
    char *end;
    unsigned long long v;
    if ((s == NULL) || (*s == '\0') || (*s == '-') || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if ((errno != 0) || (*end != '\0'))
        return -1;
    *v_p = v;
    return 0;
}

/* mc_env_u64 and mc_env_size: @p parse reads the value, @p what names it */
static int env_number(const char *name, uint64_t lo, uint64_t hi, uint64_t *v_p,
                      int (*parse)(const char *, uint64_t *), const char *what)
{
    const char *s = getenv(name);
    uint64_t v;
    if ((s == NULL) || (*s == '\0'))
        return 0;
    if ((parse(s, &v) != 0) || (v < lo) || (v > hi)) {
        mc_set_error_detail("%s=\"%s\": expected %s in [%llu, %llu]", name, s, what,
                            (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *v_p = v;
    return 0;
}

int mc_env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *v_p)
{
    return env_number(name, lo, hi, v_p, mc_parse_u64, "an integer");
}

int mc_env_size(const char *name, uint64_t lo, uint64_t hi, uint64_t *v_p)
{
    return env_number(name, lo, hi, v_p, mc_parse_size, "a size in bytes");
}

int mc_parse_i64(const char *s, int64_t *v_p)
{
    char *end;
    long long v;
    if ((s == NULL) || (*s == '\0') || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if ((errno != 0) || (*end != '\0'))
        return -1;
    *v_p = v;
    return 0;
}

int mc_parse_double(const char *s, double *v_p)
{
    char *end;
    double v;
    if ((s == NULL) || (*s == '\0') || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if ((errno != 0) || (*end != '\0') || !isfinite(v))
        return -1;
    *v_p = v;
    return 0;
}

int mc_parse_bool(const char *s, int *v_p)
{
    static const char *const yes[] = {"true", "1", "yes", "on", "t", "y"};
    static const char *const no[]  = {"false", "0", "no", "off", "f", "n"};
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < MC_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *v_p = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *v_p = 0;
            return 0;
        }
    }
    return -1;
}

int mc_parse_size(const char *s, uint64_t *bytes_p)
{
    char *end;
    double num;
    uint64_t mult = 1;
    if ((s == NULL) || (*s == '\0'))
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if ((*s == '-') || (*s == '+') || !isdigit((unsigned char)*s))
        return -1;
    /* integers exactly, fractions through double */
    errno = 0;
    unsigned long long iv = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    int is_fraction = (*end == '.');
    num = (double)iv;
    if (is_fraction) {
        num = strtod(s, &end);
        if (errno != 0)
            return -1;
    }
    while (isspace((unsigned char)*end))
        end++;
    char suffix[8] = {0};
    size_t n = 0;
    while ((*end != '\0') && !isspace((unsigned char)*end)) {
        if ((n + 1 >= sizeof(suffix)) || !isalpha((unsigned char)*end))
            return -1;
        suffix[n++] = (char)tolower((unsigned char)*end);
        end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    static const struct {
        const char *name;
        uint64_t mult;
    } units[] = {
        {"", 1ull},          {"b", 1ull},
        {"k", 1ull << 10},   {"kb", 1ull << 10}, {"kib", 1ull << 10},
        {"m", 1ull << 20},   {"mb", 1ull << 20}, {"mib", 1ull << 20},
        {"g", 1ull << 30},   {"gb", 1ull << 30}, {"gib", 1ull << 30},
        {"t", 1ull << 40},   {"tb", 1ull << 40}, {"tib", 1ull << 40},
    };
    size_t i;
    for (i = 0; i < MC_ARRAY_SIZE(units); i++) {
        if (strcmp(suffix, units[i].name) == 0) {
            mult = units[i].mult;
            break;
        }
    }
    if (i == MC_ARRAY_SIZE(units))
        return -1;
    if (is_fraction) {
        double v = num * (double)mult;
        if (!(v >= 0.0) || (v >= 18446744073709551615.0))
            return -1;
        *bytes_p = (uint64_t)v;
        return 0;
    }
    if ((mult != 0) && (iv > UINT64_MAX / mult))
        return -1;
    *bytes_p = (uint64_t)iv * mult;
    return 0;
}

int mc_parse_duration_ms(const char *s, uint64_t *ms_p)
{
    char *end;
    unsigned long long v;
    uint64_t mult;
    if ((s == NULL) || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    if ((*end == '\0') || (strcmp(end, "ms") == 0))
        mult = 1;
    else if (strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "m") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else
        return -1;
    if (v > UINT64_MAX / mult)
        return -1;
    *ms_p = v * mult;
    return 0;
}

int mc_parse_host_port(const char *s, char *host, size_t host_cap, uint16_t *port_p)
{
    const char *colon;
    size_t hlen;
    uint64_t port = 0;
    if ((s == NULL) || (*s == '\0'))
        return -1;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL)
            return -1;
        hlen = (size_t)(close - s - 1);
        if (hlen + 1 > host_cap)
            return -1;
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        if (close[1] == '\0') {
            *port_p = 0;
            return 0;
        }
        if (close[1] != ':')
            return -1;
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if ((colon != NULL) && (strchr(s, ':') != colon))
            colon = NULL; /* bare IPv6 without brackets: no port */
        hlen = colon ? (size_t)(colon - s) : strlen(s);
        if ((hlen == 0) || (hlen + 1 > host_cap))
            return -1;
        memcpy(host, s, hlen);
        host[hlen] = '\0';
        if (colon == NULL) {
            *port_p = 0;
            return 0;
        }
    }
    if ((mc_parse_u64(colon + 1, &port) != 0) || (port == 0) || (port > 65535))
        return -1;
    *port_p = (uint16_t)port;
    return 0;
}

ssize_t mc_read_atleast(int fd, void *buf, size_t want, size_t cap)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < want) {
        ssize_t n = recv(fd, p + got, cap - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0) {
            errno = ECONNRESET;
            return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return (ssize_t)got;
}

int mc_read_full(int fd, void *buf, size_t len)
{
    return (mc_read_atleast(fd, buf, len, len) < 0) ? -1 : 0;
}

static __thread unsigned spin_misses, spin_skip;

ssize_t mc_spin_recvmsg(int fd, struct msghdr *mh, int flags, unsigned spin_us)
{
    uint64_t deadline;

    if (spin_us == 0)
        return MC_SPIN_NONE;
    if (spin_skip > 0) {
        spin_skip--;
        return MC_SPIN_NONE;
    }
    /* No sched_yield() between polls: on a busy machine it hands the CPU
     * to whoever else is runnable for a whole time slice (milliseconds,
     * measured), far beyond the window; each poll is a system call, where
     * the scheduler may preempt us anyway. */
    deadline = mc_now_ns() + (uint64_t)spin_us * 1000u;
    do {
        ssize_t r = recvmsg(fd, mh, flags | MSG_DONTWAIT);
        if ((r >= 0) || ((errno != EAGAIN) && (errno != EWOULDBLOCK) && (errno != EINTR))) {
            spin_misses = 0;
            return r;
        }
    } while (mc_now_ns() < deadline);
    if (++spin_misses >= MC_SPIN_MISSES) {
        spin_misses = 0;
        spin_skip   = MC_SPIN_SKIP;
    }
    return MC_SPIN_NONE;
}

ssize_t mc_spin_recv(int fd, void *buf, size_t cap, int flags, unsigned spin_us)
{
    struct iovec v   = {.iov_base = buf, .iov_len = cap};
    struct msghdr mh = {.msg_iov = &v, .msg_iovlen = 1};
    return mc_spin_recvmsg(fd, &mh, flags, spin_us);
}

int mc_spin_readable(int fd, unsigned spin_us)
{
    char c;
    return mc_spin_recv(fd, &c, 1, MSG_PEEK, spin_us) != MC_SPIN_NONE;
}

/* Read once per process; UINT32_MAX: not read yet; UINT32_MAX - 1: bad. */
static unsigned busy_poll_cached  = UINT32_MAX;
static unsigned serve_poll_cached = UINT32_MAX;

unsigned mc_cpus_available(void)
{
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0)
        return 1;
    return (CPU_COUNT(&cpus) > 0) ? (unsigned)CPU_COUNT(&cpus) : 1u;
}

static int several_cpus(void)
{
    return mc_cpus_available() >= 2;
}

/* @p var's value, or NULL when it is unset or empty. */
static const char *env_set(const char *var)
{
    const char *e = getenv(var);
    return ((e != NULL) && (*e != '\0')) ? e : NULL;
}

/* The window @p var sets (UINT32_MAX - 1 when its value is bad), or
 * @p dflt when it is unset or empty, cached in @p cache. */
static unsigned poll_window_resolve(unsigned *cache, const char *var, unsigned (*dflt)(void))
{
    unsigned v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v == UINT32_MAX) {
        const char *e = env_set(var);
        uint64_t x;
        if (e != NULL)
            v = ((mc_parse_u64(e, &x) == 0) && (x <= MC_BUSY_POLL_MAX_US)) ? (unsigned)x
                                                                           : UINT32_MAX - 1;
        else
            v = dflt();
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}

static unsigned busy_poll_default(void)
{
    return several_cpus() ? MC_BUSY_POLL_DEFAULT_US : 0;
}

static unsigned busy_poll_resolve(void)
{
    return poll_window_resolve(&busy_poll_cached, "MC_TE_BUSY_POLL_US", busy_poll_default);
}

/* Unset MC_TE_SERVE_POLL_US follows a set MC_TE_BUSY_POLL_US (so that 0
 * there still turns every window off), else its own default. */
static unsigned serve_poll_default(void)
{
    if (env_set("MC_TE_BUSY_POLL_US") != NULL)
        return busy_poll_resolve();
    return several_cpus() ? MC_SERVE_POLL_DEFAULT_US : 0;
}

static unsigned serve_poll_resolve(void)
{
    return poll_window_resolve(&serve_poll_cached, "MC_TE_SERVE_POLL_US", serve_poll_default);
}

unsigned mc_busy_poll_us(void)
{
    unsigned v = busy_poll_resolve();
    return (v == UINT32_MAX - 1) ? 0 : v;
}

unsigned mc_serve_poll_us(void)
{
    unsigned v = serve_poll_resolve();
    return (v == UINT32_MAX - 1) ? 0 : v;
}

int mc_busy_poll_check(void)
{
    const char *var = NULL;
    if (busy_poll_resolve() == UINT32_MAX - 1)
        var = "MC_TE_BUSY_POLL_US";
    else if (serve_poll_resolve() == UINT32_MAX - 1)
        var = "MC_TE_SERVE_POLL_US";
    if (var == NULL)
        return 0;
    mc_set_error_detail("%s=\"%s\": expected microseconds in [0, %u]", var, getenv(var),
                        MC_BUSY_POLL_MAX_US);
    return -1;
}

int mc_write_full(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n >= 0) {
            p += n;
            len -= (size_t)n;
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

int mc_writev_full(int fd, struct iovec *iov, int iovcnt)
{
    while (iovcnt > 0) {
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = iov;
        mh.msg_iovlen = (size_t)(iovcnt > 64 ? 64 : iovcnt);
        ssize_t n     = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        size_t left = (size_t)n;
        while ((iovcnt > 0) && (left >= iov->iov_len)) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

void mc_tcp_tune(int fd, int io_timeout_secs)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (io_timeout_secs > 0) {
        struct timeval tv = {io_timeout_secs, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
}

int mc_tcp_connect(const char *host, uint16_t port, int timeout_ms)
{
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[8];
    int fd = -1;
    int last_err = EHOSTUNREACH; /* errno on failure: why the last address failed */

    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%u", (unsigned)port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0) {
        errno = EHOSTUNREACH;
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            last_err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            goto connected;
        last_err = errno;
        if (errno == EINPROGRESS) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            int err = 0;
            socklen_t elen = sizeof(err);
            int pr = poll(&pfd, 1, timeout_ms);
            if ((pr == 1) && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0) &&
                (err == 0))
                goto connected;
            last_err = (pr == 0) ? ETIMEDOUT : (err != 0 ? err : errno);
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    errno = last_err;
    return -1;

connected:
    freeaddrinfo(res);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    mc_tcp_tune(fd, 0);
    return fd;
}

static size_t huge_round(size_t size)
{
    return (size + MC_HUGE_BLOCK - 1) & ~(MC_HUGE_BLOCK - 1);
}

void *mc_huge_zalloc(size_t size)
{
    size_t len = huge_round(size), head, tail;
    char *raw, *p;

    if ((len == 0) || (len < size))
        return NULL;
    /* one block more, to cut an aligned run out of it */
    raw = mmap(NULL, len + MC_HUGE_BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    p    = (char *)(((uintptr_t)raw + MC_HUGE_BLOCK - 1) & ~(uintptr_t)(MC_HUGE_BLOCK - 1));
    head = (size_t)(p - raw);
    tail = MC_HUGE_BLOCK - head;
    if (head > 0)
        (void)munmap(raw, head);
    if (tail > 0)
        (void)munmap(p + len, tail);
    /* a hint: where refused (THP off), the pages are ordinary ones */
    mc_huge_advise(p, len);
    return p;
}

void mc_huge_advise(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    uintptr_t a = ((uintptr_t)p + MC_HUGE_BLOCK - 1) & ~(uintptr_t)(MC_HUGE_BLOCK - 1);
    uintptr_t e = ((uintptr_t)p + len) & ~(uintptr_t)(MC_HUGE_BLOCK - 1);
    if ((p != NULL) && (len <= UINTPTR_MAX - (uintptr_t)p) && (e > a))
        (void)madvise((void *)a, (size_t)(e - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)len;
#endif
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

typedef struct populate_chunk {
    void *base;
    size_t len;
    int err;
} populate_chunk_t;

static void *populate_run(void *arg)
{
    populate_chunk_t *c = arg;
    c->err = (madvise(c->base, c->len, MADV_POPULATE_WRITE) == 0) ? 0 : errno;
    return NULL;
}

int mc_populate(void *base, size_t len, unsigned threads)
{
    enum { MAX_THREADS = 64 };
    populate_chunk_t c[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS];
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = (pg > 0) ? (size_t)pg : 4096u, n, chunk;
    int err = 0;

    if ((base == NULL) || (len == 0))
        return 0;
    n = (threads < 1) ? 1 : ((threads > MAX_THREADS) ? MAX_THREADS : threads);
    if (len / MC_POPULATE_CHUNK_MIN < n)
        n = (len / MC_POPULATE_CHUNK_MIN > 0) ? len / MC_POPULATE_CHUNK_MIN : 1;
    chunk = ((len / n + page - 1) / page) * page;
    for (size_t i = 0; i < n; i++) {
        size_t off = i * chunk;
        c[i].base  = (char *)base + off;
        c[i].len   = (off >= len) ? 0 : ((len - off < chunk) ? len - off : chunk);
        c[i].err   = 0;
        /* chunk 0 runs here; a thread that cannot start leaves its chunk
         * to this thread too */
        started[i] = (i > 0) && (c[i].len > 0) &&
                     (pthread_create(&tid[i], NULL, populate_run, &c[i]) == 0);
    }
    for (size_t i = 0; i < n; i++) {
        if (started[i])
            (void)pthread_join(tid[i], NULL);
        else if (c[i].len > 0)
            (void)populate_run(&c[i]);
        if ((c[i].err != 0) && (err == 0))
            err = c[i].err;
    }
    return err;
}

void mc_huge_free(void *p, size_t size)
{
    if (p != NULL)
        (void)munmap(p, huge_round(size));
}

char *mc_strdup(const char *s)
{
    return strdup(s ? s : "");
}

int mc_textbuf_append(mc_textbuf_t *b, const void *p, size_t n, size_t max)
{
    if ((n > max) || (b->len > max - n))
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        char *d;
        while (cap < b->len + n + 1)
            cap *= 2;
        d = realloc(b->data, cap);
        if (d == NULL)
            return -1;
        b->data = d;
        b->cap  = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

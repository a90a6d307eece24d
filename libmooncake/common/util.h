/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small helpers shared by the library and the daemon: clocks, UUIDs,
 * size/duration/host parsing and blocking socket I/O that survives EINTR.
 */
#ifndef MC_COMMON_UTIL_H
#define MC_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define MC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MC_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Monotonic clock in ns / µs / ms. */
uint64_t mc_now_ns(void);
/* Move @p ts @p ms milliseconds on (nanoseconds kept below a second): a
 * deadline for pthread_cond_timedwait from clock_gettime's now. */
void mc_timespec_add_ms(struct timespec *ts, uint64_t ms);
static inline uint64_t mc_now_us(void) { return mc_now_ns() / 1000; }
static inline uint64_t mc_now_ms(void) { return mc_now_ns() / 1000000; }
/* Wall clock, ms since the epoch. */
uint64_t mc_wall_ms(void);

/* SipHash-2-4 of @p len bytes under the 128-bit key @p k: a keyed hash
 * (a pseudo-random function) for tokens only the key holder can make. */
uint64_t mc_siphash24(const uint64_t k[2], const void *data, size_t len);

/* 128-bit identifiers (clients, segments, tasks). */
typedef struct mc_uuid {
    uint64_t hi;
    uint64_t lo;
} mc_uuid_t;

void mc_uuid_generate(mc_uuid_t *u);
static inline int mc_uuid_eq(mc_uuid_t a, mc_uuid_t b)
{
    return (a.hi == b.hi) && (a.lo == b.lo);
}
static inline int mc_uuid_is_nil(mc_uuid_t a) { return (a.hi == 0) && (a.lo == 0); }
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; out must hold 37 bytes. */
void mc_uuid_format(mc_uuid_t u, char out[37]);
int mc_uuid_parse(const char *s, mc_uuid_t *u);

/*
 * "16777216", "16MB", "16 MB", "1.5GiB", "4gb", "512k" -> bytes.
 * Decimal and binary suffixes both mean powers of 1024, as upstream.
 * Returns 0 or -1 (bad syntax, overflow, negative, "50%").
 */
int mc_parse_size(const char *s, uint64_t *bytes_p);

/* "500", "500ms", "10s", "2m", "1h" -> milliseconds; bare numbers are ms. */
int mc_parse_duration_ms(const char *s, uint64_t *ms_p);

/* Strict base-10 integers; -1 on garbage, trailing bytes or overflow. */
int mc_parse_u64(const char *s, uint64_t *v_p);
/* The integer in [lo, hi] that environment variable @p name holds, into
 * *v_p; *v_p is kept when it is unset or empty.  -1, with the error detail
 * naming the variable and the range, for any other value (a setting is
 * never accepted and ignored). */
int mc_env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *v_p);
/* mc_env_u64 for a size ("4KiB", "1MB", bare bytes: mc_parse_size). */
int mc_env_size(const char *name, uint64_t lo, uint64_t hi, uint64_t *v_p);
int mc_parse_i64(const char *s, int64_t *v_p);
int mc_parse_double(const char *s, double *v_p);
/* true/false/1/0/yes/no/on/off */
int mc_parse_bool(const char *s, int *v_p);

/*
 * Split "host:port", "[v6]:port" or "host" into parts.  port_p gets 0 when
 * absent.  host must hold at least 256 bytes.
 */
int mc_parse_host_port(const char *s, char *host, size_t host_cap, uint16_t *port_p);

/* Blocking I/O on sockets that loops over short transfers and EINTR.
 * Return 0, or -1 with errno set (ECONNRESET for a peer that closed). */
int mc_read_full(int fd, void *buf, size_t len);
/* Receive into buf[0, cap) until at least @p want (<= cap) bytes came,
 * taking whatever else has arrived too: the count, or -1 with errno. */
ssize_t mc_read_atleast(int fd, void *buf, size_t want, size_t cap);
int mc_write_full(int fd, const void *buf, size_t len);
int mc_writev_full(int fd, struct iovec *iov, int iovcnt);

/*
 * Busy polling: wait up to @p spin_us for @p fd to become readable by
 * polling it (a non-blocking peek, again and again) instead
 * of sleeping in the kernel, so an answer that comes back within the
 * window costs no wake-up.  Returns 1 when something (or an error, or the
 * peer's close) is waiting, 0 when the window passed or was skipped; the
 * caller's blocking receive follows either way.  Per thread, a window that
 * expires MC_SPIN_MISSES times in a row is skipped for the next
 * MC_SPIN_SKIP waits: on a machine too busy for the answer to come back
 * while we spin, spinning only takes the CPU from whoever would send it.
 */
#define MC_SPIN_MISSES 8u
#define MC_SPIN_SKIP   256u
int mc_spin_readable(int fd, unsigned spin_us);
/* The same wait, where each poll is the receive the caller makes next
 * (recvmsg with @p flags plus MSG_DONTWAIT: MSG_PEEK to look, 0 to take),
 * so what arrives within the window costs no further call.  Returns that
 * receive's result once it is not EAGAIN (the byte count, 0 at the peer's
 * close, -1 with errno), or MC_SPIN_NONE when the window passed or was
 * skipped (then nothing was received). */
#define MC_SPIN_NONE ((ssize_t)-2)
ssize_t mc_spin_recvmsg(int fd, struct msghdr *mh, int flags, unsigned spin_us);
ssize_t mc_spin_recv(int fd, void *buf, size_t cap, int flags, unsigned spin_us);
/*
 * The busy-poll windows of the data path and the master RPC client, read
 * once per process (0..10000 µs; 0 turns polling off):
 * - mc_busy_poll_us: a wait for an answer (a lane's, the master client's):
 *   MC_TE_BUSY_POLL_US, else 50 µs when this process may run on two CPUs
 *   or more and 0 on one (a poller there only delays the thread it waits
 *   for);
 * - mc_serve_poll_us: a served connection's wait for its next request:
 *   MC_TE_SERVE_POLL_US, else MC_TE_BUSY_POLL_US when that is set, else
 *   200 µs on two CPUs or more and 0 on one.  Longer than an answer's
 *   window: a caller's next request comes after its master round trip
 *   and its own work, and a holder asleep by then pays a wake-up per
 *   request, which on a busy host makes the caller slower still, so its
 *   next request comes later again.
 * A bad value is refused by mc_busy_poll_check().
 */
#define MC_BUSY_POLL_DEFAULT_US  50u
#define MC_SERVE_POLL_DEFAULT_US 200u
#define MC_BUSY_POLL_MAX_US      10000u
unsigned mc_busy_poll_us(void);
unsigned mc_serve_poll_us(void);
/* 0, or -1 with the error detail naming the variable (MC_TE_BUSY_POLL_US
 * or MC_TE_SERVE_POLL_US) and its value. */
int mc_busy_poll_check(void);

/* TCP connect with a timeout (ms); returns fd, or -1 with errno saying why
 * (ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH for an unresolvable host...). */
int mc_tcp_connect(const char *host, uint16_t port, int timeout_ms);
/* Set TCP_NODELAY, CLOEXEC and, when secs > 0, SO_RCVTIMEO/SO_SNDTIMEO. */
void mc_tcp_tune(int fd, int io_timeout_secs);

char *mc_strdup(const char *s);

/*
 * Zeroed memory for a large table read at random (the master's object
 * index and records): whole 2 MiB-aligned blocks, marked for transparent
 * huge pages (madvise(MADV_HUGEPAGE)) where the kernel offers them, so a
 * lookup misses the TLB far less often.  @p size is rounded up to
 * MC_HUGE_BLOCK; give mc_huge_free() the same @p size.  NULL on failure.
 */
#define MC_HUGE_BLOCK ((size_t)2 << 20)
void *mc_huge_zalloc(size_t size);
void mc_huge_free(void *p, size_t size);
/* Mark the whole MC_HUGE_BLOCKs inside [@p p, @p p + @p len) for
 * transparent huge pages (a hint; nothing else changes). */
void mc_huge_advise(void *p, size_t len);

/*
 * Fault the pages of the page-aligned mapping [@p base, @p base + @p len)
 * in now (MADV_POPULATE_WRITE), so that the first byte written to each
 * does not pay a page fault later.  With @p threads > 1 the range is cut
 * into that many chunks (at most; each of at least MC_POPULATE_CHUNK_MIN)
 * populated at once.  Best effort, as MAP_POPULATE: 0, or the errno of a
 * chunk the kernel declined (EINVAL before Linux 5.14, ENOMEM), whose pages
 * then fault in on first touch.
 */
#define MC_POPULATE_CHUNK_MIN ((size_t)64 << 20)
int mc_populate(void *base, size_t len, unsigned threads);
/* CPUs this process may run on (sched_getaffinity); 1 when unknown. */
unsigned mc_cpus_available(void);

/* A growing NUL-terminated text buffer (HTTP response bodies). */
typedef struct mc_textbuf {
    char *data;
    size_t len;
    size_t cap;
} mc_textbuf_t;

/* Append @p n bytes, keeping data NUL-terminated; refuses (returns -1,
 * nothing appended) past @p max bytes in all or without memory. */
int mc_textbuf_append(mc_textbuf_t *b, const void *p, size_t n, size_t max);

#endif /* MC_COMMON_UTIL_H */

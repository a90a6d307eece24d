/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transfer engine's same-host shared-memory path (transfer/shm/shm.h).
 *
 * Two engines in this one process talk to each other exactly as two
 * processes would: the holder serves its abstract unix socket, the reader
 * connects to it when it opens the segment and maps the holder's sealed
 * memfds.  Because both live here, every test can look straight at the
 * holder's memory and at the reader's counters (mc_te_shm_stats), which
 * tell whether bytes went by memcpy or over TCP.
 *
 * Besides round trips, the paths that must stay on TCP and revocation
 * (dereg, a holder that goes away or restarts, a reader copying while the
 * holder revokes and scribbles over the old memory: a read that succeeds
 * must never mix generations), the tests attack both ends: raw hostile
 * frames against a real holder's server, and a fake holder in a thread
 * that hands the reader unsealed or short memfds, bounds that lie, slots
 * out of range, truncated answers or no answer at all.  The reader must
 * then fall back (mc_te_shm_xfer returns 0) without crashing or leaking a
 * descriptor.  Every wait is bounded.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <mooncake/transfer.h>

#include "check_suites.h"
#include "common/util.h"
#include "transfer/descriptor.h"
#include "transfer/engine.h"
#include "transfer/shm/shm.h"
#include "te_util.h"

#define KiB     1024u
#define MiB     (1024u * 1024u)
/* the control memfd: the generation words, then the gate words */
#define CTL_GEN_LEN   ((size_t)MC_TE_SHM_SLOTS * sizeof(uint64_t))
#define CTL_GATES_LEN (2 * CTL_GEN_LEN)
#define CTL_LEN       (CTL_GATES_LEN + 4096) /* then the life page */
#define WRITERS_LEN ((size_t)MC_TE_SHM_SLOTS * sizeof(uint32_t))

/* ---- helpers -------------------------------------------------------------- */

/* An engine on 127.0.0.1; @p shm_on 0 creates it with MC_TE_SHM=0. */
static mc_te_h shm_te_new(const char *meta, int shm_on)
{
    mc_te_h te;
    if (!shm_on)
        setenv("MC_TE_SHM", "0", 1);
    te = te_new("127.0.0.1", meta);
    if (!shm_on)
        unsetenv("MC_TE_SHM");
    return te;
}

static mc_status_t xfer1(mc_te_h te, mc_te_op_t op, void *local, const void *remote, uint64_t len,
                         mc_te_segment_id_t seg)
{
    return te_xfer1(te, op, local, (uint64_t)(uintptr_t)remote, len, seg);
}

/* A memfd of fd_len bytes, mapped shared (at @p at with MAP_FIXED when not
 * NULL); sealed against shrinking and growing when @p seal. */
typedef struct shm_buf {
    uint8_t *p;
    size_t len;
    int fd;
} shm_buf_t;

static int memfd_new(size_t len, int seal)
{
    int fd = memfd_create("mc-test-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_msg(fd >= 0, "memfd_create: %s", strerror(errno));
    ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
    if (seal)
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    return fd;
}

static shm_buf_t shm_buf_new(size_t len, int seal, void *at)
{
    shm_buf_t b;
    b.len = len;
    b.fd  = memfd_new(len, seal);
    b.p   = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | ((at != NULL) ? MAP_FIXED : 0),
                 b.fd, 0);
    ck_assert_msg(b.p != MAP_FAILED, "mmap: %s", strerror(errno));
    if (at != NULL)
        ck_assert_ptr_eq(b.p, at);
    return b;
}

/* Close the memfd; @p unmap also drops the mapping. */
static void shm_buf_free(shm_buf_t *b, int unmap)
{
    if (unmap && (b->p != NULL))
        munmap(b->p, b->len);
    if (b->fd >= 0)
        close(b->fd);
    b->fd = -1;
    if (unmap)
        b->p = NULL;
}

static int all_ee(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xee)
            return 0;
    return 1;
}

static void stats(mc_te_h te, uint64_t *ops, uint64_t *bytes)
{
    mc_te_shm_stats(te, ops, bytes);
}

#define ck_assert_stats(te, ops0, bytes0, dops, dbytes)                                       \
    do {                                                                                      \
        uint64_t o_, b_;                                                                      \
        stats((te), &o_, &b_);                                                                \
        ck_assert_msg(o_ - (ops0) == (dops) && b_ - (bytes0) == (dbytes),                     \
                      "shm stats should grow by %llu ops / %llu bytes, grew by %llu / %llu",  \
                      (unsigned long long)(dops), (unsigned long long)(dbytes),               \
                      (unsigned long long)(o_ - (ops0)), (unsigned long long)(b_ - (bytes0))); \
    } while (0)

static int fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait (bounded) until the process holds @p want fds; server threads close
 * their ends of a connection asynchronously. */
static void fd_count_settles(int want)
{
    long long end = now_ms() + 3000;
    int n;
    while (((n = fd_count()) != want) && (now_ms() < end))
        poll(NULL, 0, 5);
    ck_assert_msg(n == want, "the process should hold %d fds again, holds %d", want, n);
}

/* The engine's published same-host name ("" when none). */
static void shm_name_of(mc_te_h te, char *out, size_t cap)
{
    char *json = NULL;
    size_t len = 0;
    json_error_t err;
    json_t *root, *v;
    ck_assert_status_ok(mc_te_describe_local(te, &json, &len));
    root = json_loadb(json, len, 0, &err);
    ck_assert_ptr_nonnull(root);
    v = json_object_get(root, "shm_name");
    snprintf(out, cap, "%s", (v != NULL) && json_is_string(v) ? json_string_value(v) : "");
    json_decref(root);
    free(json);
}

static int unix_connect(const char *name)
{
    struct sockaddr_un sa;
    size_t n = strlen(name + 1);
    int fd   = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(name[0] == '@' && n + 1 < sizeof(sa.sun_path), "bad name %s", name);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, name + 1, n);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0,
                  "connecting to %s: %s", name, strerror(errno));
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    ck_assert_int_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

static void raw_req(int fd, uint32_t magic, uint16_t version, uint16_t op, uint64_t addr,
                    uint64_t len)
{
    mc_te_shm_req_t q;
    memset(&q, 0, sizeof(q));
    q.magic   = magic;
    q.version = version;
    q.op      = op;
    q.addr    = addr;
    q.len     = len;
    raw_send(fd, &q, sizeof(q));
}

/* One answer within 3 s; the attached fd (or -1) in *fd_p. */
static mc_te_shm_resp_t raw_answer(int fd, int *fd_p)
{
    mc_te_shm_resp_t a;
    struct pollfd pf = {fd, POLLIN, 0};
    struct msghdr mh;
    struct iovec iov = {&a, sizeof(a)};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } cm;
    ssize_t n;

    *fd_p = -1;
    ck_assert_msg(poll(&pf, 1, 3000) == 1, "the holder should answer within 3 s");
    memset(&mh, 0, sizeof(mh));
    memset(&cm, 0, sizeof(cm));
    memset(&a, 0, sizeof(a));
    mh.msg_iov        = &iov;
    mh.msg_iovlen     = 1;
    mh.msg_control    = cm.buf;
    mh.msg_controllen = sizeof(cm.buf);
    n                 = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    ck_assert_int_eq(n, (ssize_t)sizeof(a));
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        ck_assert_int_eq(c->cmsg_type, SCM_RIGHTS);
        ck_assert_msg(c->cmsg_len == CMSG_LEN(sizeof(int)) && *fd_p < 0,
                      "an answer carries at most one fd");
        memcpy(fd_p, CMSG_DATA(c), sizeof(int));
    }
    ck_assert_uint_eq(a.magic, MC_TE_SHM_MAGIC);
    return a;
}

/* The server hung up on us: recv gives 0 within a bounded wait. */
static void raw_expect_closed(int fd)
{
    struct pollfd pf = {fd, POLLIN, 0};
    char b[64];
    ck_assert_msg(poll(&pf, 1, 3000) == 1, "the holder should close the connection within 3 s");
    ck_assert_int_eq(recv(fd, b, sizeof(b), MSG_DONTWAIT), 0);
}

/* ---- engines: A reads, B holds --------------------------------------------- */

/* te_util's pair, with the same-host path on */
static void setup_two(void)
{
    A = shm_te_new(NULL, 1);
    B = shm_te_new("P2PHANDSHAKE", 1);
}

START_TEST(test_shm_roundtrip)
{
    static const size_t sizes[] = {1, 4 * KiB, MiB + 7};
    enum { N = 32 };
    size_t cap       = 4 * MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    shm_buf_t h2     = shm_buf_new(4 * MiB, 1, NULL);
    shm_buf_t h3     = shm_buf_new(2 * MiB, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint8_t *back    = malloc(cap);
    mc_te_request_t reqs[N];
    mc_status_t st[N];
    uint64_t ops, bytes, bops, bbytes;
    char name[MC_TE_SHM_NAME_MAX];

    shm_name_of(B, name, sizeof(name));
    ck_assert_msg(strncmp(name, "@mooncake-te-", 13) == 0,
                  "a holder should publish its same-host name, not \"%s\"", name);
    memset(h.p, 0, cap);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, h.p, cap, "cpu:0", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    /* the engine keeps its own duplicate: ours may go */
    shm_buf_free(&h, 0);
    /* known from the descriptor but not mapped yet: their first large
     * reads are sliced, and the slices go through shm */
    te_fill(h2.p, h2.len, 5);
    te_fill(h3.p, h3.len, 6);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, h2.p, h2.len, "cpu:0", MC_TE_MEM_REMOTE_ACCESS, h2.fd));
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, h3.p, h3.len, "cpu:0", MC_TE_MEM_REMOTE_ACCESS, h3.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    stats(B, &bops, &bbytes);

    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        size_t n      = sizes[i];
        uint8_t *at   = h.p + (i * 13) % 64; /* unaligned too */
        te_fill(src, n, (uint32_t)i + 1);
        memset(back, 0xee, n);
        stats(A, &ops, &bytes);
        ck_assert_status_ok(xfer1(A, MC_TE_WRITE, src, at, n, seg));
        ck_assert_msg(memcmp(at, src, n) == 0, "the holder should hold the %zu written bytes", n);
        ck_assert_stats(A, ops, bytes, 1, n);
        ck_assert_status_ok(xfer1(A, MC_TE_READ, back, at, n, seg));
        ck_assert_msg(memcmp(back, src, n) == 0, "reading back %zu bytes should match", n);
        ck_assert_stats(A, ops, bytes, 2, 2 * n);
    }

    /* a batch of 32 x 4 KiB each way */
    te_fill(src, N * 4 * KiB, 99);
    for (size_t i = 0; i < N; i++) {
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + i * 4 * KiB,
                                    (uint64_t)(uintptr_t)(h.p + 2 * MiB + i * 4 * KiB), 4 * KiB,
                                    seg};
        st[i]   = MC_INTERNAL_ERROR;
    }
    stats(A, &ops, &bytes);
    ck_assert_status_ok(mc_te_transfer(A, reqs, N, st));
    for (size_t i = 0; i < N; i++)
        ck_assert_status_ok(st[i]);
    ck_assert_msg(memcmp(h.p + 2 * MiB, src, N * 4 * KiB) == 0, "the batch should land exactly");
    ck_assert_stats(A, ops, bytes, N, N * 4 * KiB);
    memset(back, 0, N * 4 * KiB);
    for (size_t i = 0; i < N; i++) {
        reqs[i].op    = MC_TE_READ;
        reqs[i].local = back + i * 4 * KiB;
    }
    ck_assert_status_ok(mc_te_transfer(A, reqs, N, st));
    ck_assert_msg(memcmp(back, src, N * 4 * KiB) == 0, "the batch read should match");
    ck_assert_stats(A, ops, bytes, 2 * N, 2 * N * 4 * KiB);

    /* 3 MiB (more slices than lanes: the workers) and 2 MiB (one slice a
     * lane: the caller spreads them) from regions not mapped yet */
    for (int k = 0; k < 2; k++) {
        shm_buf_t *r = (k == 0) ? &h2 : &h3;
        size_t n     = (k == 0) ? 3 * MiB : 2 * MiB;
        uint64_t o2, b2;
        stats(A, &ops, &bytes);
        memset(back, 0, n);
        ck_assert_status_ok(xfer1(A, MC_TE_READ, back, r->p, n, seg));
        ck_assert_msg(memcmp(back, r->p, n) == 0, "the first %zu-byte read should match", n);
        stats(A, &o2, &b2);
        ck_assert_msg(o2 > ops && b2 - bytes == n,
                      "every slice of the first %zu-byte read should go through shm "
                      "(%llu ops, %llu bytes)",
                      n, (unsigned long long)(o2 - ops), (unsigned long long)(b2 - bytes));
        ops   = o2;
        bytes = b2;
    }
    memset(back, 0, 3 * MiB);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, back, h2.p + 1, 3 * MiB, seg));
    ck_assert_msg(memcmp(back, h2.p + 1, 3 * MiB) == 0, "the mapped 3 MiB read should match");
    ck_assert_stats(A, ops, bytes, 1, 3 * MiB); /* mapped: one memcpy, no slicing */
    /* the holder initiated nothing */
    ck_assert_stats(B, bops, bbytes, 0, 0);

    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, h2.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, h3.p));
    shm_buf_free(&h, 1);
    shm_buf_free(&h2, 1);
    shm_buf_free(&h3, 1);
    free(src);
    free(back);
}
END_TEST

/* A write then a read of 64 KiB at @p tgt over whatever path; both exact. */
static void roundtrip_tcp(mc_te_h te, mc_te_segment_id_t seg, uint8_t *tgt, uint32_t seed)
{
    uint8_t *src = malloc(64 * KiB), *back = calloc(1, 64 * KiB);
    uint64_t ops, bytes;
    te_fill(src, 64 * KiB, seed);
    stats(te, &ops, &bytes);
    ck_assert_status_ok(xfer1(te, MC_TE_WRITE, src, tgt, 64 * KiB, seg));
    ck_assert_msg(memcmp(tgt, src, 64 * KiB) == 0, "the write should land");
    ck_assert_status_ok(xfer1(te, MC_TE_READ, back, tgt, 64 * KiB, seg));
    ck_assert_msg(memcmp(back, src, 64 * KiB) == 0, "the read should match");
    ck_assert_stats(te, ops, bytes, 0, 0);
    free(src);
    free(back);
}

/*
 * mc_te_read_direct: many small reads of one mapped region by memcpy, one
 * lookup for the batch.  It applies only once the region is mapped, to
 * READs of one segment, every piece inside the region; otherwise it moves
 * nothing and says so (the caller transfers them).
 */
START_TEST(test_shm_read_direct)
{
    enum { ROWS = 200 };
    static const size_t lens[] = {1, 300, 1024, 4 * KiB + 5};
    size_t cap       = MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *dst     = malloc(2 * cap);
    mc_te_request_t reqs[ROWS];
    mc_status_t st   = MC_INTERNAL_ERROR;
    uint64_t ops, bytes, want = 0;
    size_t at = 0;

    te_fill(h.p, cap, 17);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, h.p, cap, "cpu:0", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    /* rows of several lengths, the first at the region's start, the last
     * ending at its end; destinations at odd offsets, a gap between rows */
    for (size_t i = 0; i < ROWS; i++) {
        size_t len = lens[i % MC_ARRAY_SIZE(lens)];
        if (i == ROWS - 1) {
            len = 333;
            at  = cap - len;
        }
        reqs[i] = (mc_te_request_t){MC_TE_READ, dst + 2 * at + (i % 7),
                                    (uint64_t)(uintptr_t)(h.p + at), len, seg};
        want += len;
        at += len + 3;
    }
    memset(dst, 0xee, 2 * cap);
    /* not mapped yet: nothing moves */
    ck_assert_int_eq(mc_te_read_direct(A, reqs, ROWS, NULL), 0);
    ck_assert_int_eq(mc_te_read_direct(A, reqs, ROWS, &st), 0);
    ck_assert_int_eq(st, MC_INTERNAL_ERROR);
    ck_assert(dst[2 * 0] == 0xee);
    /* one ordinary read maps the region */
    ck_assert_status_ok(xfer1(A, MC_TE_READ, dst, h.p, 16, seg));
    memset(dst, 0xee, 2 * cap);
    ck_assert_int_eq(mc_te_read_direct(A, reqs, ROWS, NULL), 1);
    stats(A, &ops, &bytes);
    ck_assert_int_eq(mc_te_read_direct(A, reqs, ROWS, &st), 1);
    ck_assert_status_ok(st);
    ck_assert_stats(A, ops, bytes, ROWS, want);
    for (size_t i = 0; i < ROWS; i++) {
        const uint8_t *d = reqs[i].local, *from = (const uint8_t *)(uintptr_t)reqs[i].remote;
        ck_assert_msg(memcmp(d, from, reqs[i].length) == 0, "row %zu differs", i);
        ck_assert_msg(d[reqs[i].length] == 0xee, "row %zu wrote past its end", i);
        ck_assert_msg((d == dst) || (d[-1] == 0xee), "row %zu wrote before its start", i);
    }

    /* refused, nothing copied: a piece past the region, a WRITE, another
     * segment, a zero-length piece */
    memset(dst, 0xee, 2 * cap);
    {
        mc_te_request_t bad[2] = {reqs[0], reqs[1]};
        bad[1].remote          = (uint64_t)(uintptr_t)(h.p + cap - 10);
        bad[1].length          = 11;
        ck_assert_int_eq(mc_te_read_direct(A, bad, 2, &st), 0);
        bad[1] = reqs[1];
        bad[1].op = MC_TE_WRITE;
        ck_assert_int_eq(mc_te_read_direct(A, bad, 2, &st), 0);
        bad[1] = reqs[1];
        bad[1].segment = seg + 1000;
        ck_assert_int_eq(mc_te_read_direct(A, bad, 2, &st), 0);
        bad[1] = reqs[1];
        bad[1].length = 0;
        ck_assert_int_eq(mc_te_read_direct(A, bad, 2, &st), 0);
        ck_assert_int_eq(mc_te_read_direct(A, bad, 0, &st), 0);
        ck_assert(all_ee(dst, 2 * cap));
    }
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(dst);
}
END_TEST

/* Many small WRITEs into a same-host peer's segment at once
 * (mc_te_write_direct_gen): nothing moves before the region is mapped,
 * then every piece lands whole, counted once each; batches it does not
 * take (a large piece, a READ, another segment, a generation the region
 * does not have, one piece) move nothing and are left to mc_te_transfer. */
START_TEST(test_shm_write_direct)
{
    enum { ROWS = 200 };
    const uint64_t G = UINT64_C(0x8000000077000000), H = UINT64_C(0x8000000078000000);
    static const size_t lens[] = {1, 300, 1024, 4 * KiB + 5};
    size_t cap       = MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint8_t *keep    = malloc(cap);
    mc_te_request_t reqs[ROWS];
    uint64_t gens[ROWS];
    mc_status_t st   = MC_INTERNAL_ERROR;
    uint64_t ops, bytes, want = 0;
    size_t at = 0;

    te_fill(h.p, cap, 29);
    te_fill(src, cap, 71);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    /* rows of several lengths from odd source offsets, the last ending at
     * the region's end, a gap between rows */
    for (size_t i = 0; i < ROWS; i++) {
        size_t len = lens[i % MC_ARRAY_SIZE(lens)];
        if (i == ROWS - 1) {
            len = 333;
            at  = cap - len;
        }
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + (i * 37) % (cap / 2),
                                    (uint64_t)(uintptr_t)(h.p + at), len, seg};
        gens[i] = G;
        want += len;
        at += len + 3;
    }
    memcpy(keep, h.p, cap);
    /* not mapped yet: nothing moves */
    ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, ROWS, &st), 0);
    ck_assert_int_eq(st, MC_INTERNAL_ERROR);
    ck_assert(memcmp(h.p, keep, cap) == 0);
    /* one ordinary write maps the region (it writes what is there) */
    {
        mc_te_request_t one = {MC_TE_WRITE, keep, (uint64_t)(uintptr_t)h.p, 16, seg};
        ck_assert_status_ok(mc_te_transfer_gen(A, &one, gens, 1, NULL));
    }
    stats(A, &ops, &bytes);
    ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, ROWS, &st), 1);
    ck_assert_status_ok(st);
    ck_assert_stats(A, ops, bytes, ROWS, want);
    for (size_t i = 0; i < ROWS; i++) {
        const uint8_t *to = (const uint8_t *)(uintptr_t)reqs[i].remote;
        size_t off        = (size_t)(to - h.p);
        ck_assert_msg(memcmp(to, reqs[i].local, reqs[i].length) == 0, "row %zu differs", i);
        ck_assert_msg((off + reqs[i].length == cap) ||
                          (to[reqs[i].length] == keep[off + reqs[i].length]),
                      "row %zu wrote past its end", i);
        ck_assert_msg((off == 0) || (to[-1] == keep[off - 1]), "row %zu wrote before its start",
                      i);
    }

    /* not taken, nothing copied */
    memcpy(keep, h.p, cap);
    {
        mc_te_request_t bad[2] = {reqs[0], reqs[1]};
        uint64_t hh[2]         = {H, H}, gh[2] = {G, H};
        bad[1].length          = MC_TE_RUN_MAX_ITEM_LEN + 1;
        ck_assert_int_eq(mc_te_write_direct_gen(A, bad, gens, 2, &st), 0);
        bad[1]    = reqs[1];
        bad[1].op = MC_TE_READ;
        ck_assert_int_eq(mc_te_write_direct_gen(A, bad, gens, 2, &st), 0);
        bad[1]         = reqs[1];
        bad[1].segment = seg + 1000;
        ck_assert_int_eq(mc_te_write_direct_gen(A, bad, gens, 2, &st), 0);
        bad[1]        = reqs[1];
        bad[1].length = 0;
        ck_assert_int_eq(mc_te_write_direct_gen(A, bad, gens, 2, &st), 0);
        ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, hh, 2, &st), 0);
        ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gh, 2, &st), 0);
        ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, 1, &st), 0);
        ck_assert(memcmp(h.p, keep, cap) == 0);
        /* and the transfer refuses the generation the region lacks */
        ck_assert_status_eq(mc_te_transfer_gen(A, reqs, hh, 2, NULL), MC_INVALID_WRITE);
        ck_assert_msg(memcmp(h.p, keep, cap) == 0, "a refused write changed the region");
    }
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(src);
    free(keep);
}
END_TEST

/* The minor faults of this process so far. */
static long minor_faults(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_minflt;
}

/* Whether this kernel maps the pages of a block around a read fault on a
 * shared memfd mapping (fault-around): a fresh mapping of @p fd read once
 * every 64 KiB over @p len bytes, then written whole, faults less than
 * once every 4 pages.  Where it does not, no write can be mapped a block
 * at a time and the test below has nothing to tell. */
static int fault_around_maps_blocks(int fd, size_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    long before;
    ck_assert_msg(p != MAP_FAILED, "mmap: %s", strerror(errno));
    before = minor_faults();
    for (size_t off = 0; off < len; off += 64 * KiB)
        (void)__atomic_load_n(p + off, __ATOMIC_RELAXED);
    for (size_t off = 0; off < len; off += 4 * KiB)
        __atomic_store_n(p + off, (uint8_t)0x5a, __ATOMIC_RELAXED);
    before = minor_faults() - before;
    munmap(p, len);
    return before < (long)(len / (4 * KiB) / 4);
}

/* A write into pages of the holder's memory that this reader has not
 * mapped yet maps them a block at a time (map_warm: a read of a byte per
 * block first) instead of faulting once per page; the bytes land all the
 * same, on a block boundary or not, and a write through a mapping that
 * has seen them faults no more. */
START_TEST(test_shm_write_maps_blocks)
{
    const uint64_t G = UINT64_C(0x800000007e000000);
    const size_t cap = 8 * MiB, len = 4 * MiB, pages = len / (4 * KiB);
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint64_t gens[1] = {G};
    long faults;

    te_fill(h.p, cap, 41); /* the holder's pages exist, as a segment's do */
    te_fill(src, cap, 43);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    {   /* maps the region, and its first block */
        mc_te_request_t one = {MC_TE_WRITE, src, (uint64_t)(uintptr_t)h.p, 16, seg};
        ck_assert_status_ok(mc_te_transfer_gen(A, &one, gens, 1, NULL));
    }
    if (!fault_around_maps_blocks(h.fd, len)) {
        fprintf(stderr, "test_shm_write_maps_blocks: this kernel maps a read fault's page "
                        "alone (fault-around off); nothing to compare\n");
    } else {
        /* 4 MiB from 1 MiB + 100: 1024 pages, 65 blocks */
        mc_te_request_t w = {MC_TE_WRITE, src + 7, (uint64_t)(uintptr_t)(h.p + MiB + 100), len,
                             seg};
        const uint8_t edge[2] = {h.p[MiB + 99], h.p[MiB + 100 + len]};
        faults = minor_faults();
        ck_assert_status_ok(mc_te_transfer_gen(A, &w, gens, 1, NULL));
        faults = minor_faults() - faults;
        ck_assert_msg(faults < (long)(pages / 4),
                      "a %zu-page write into pages not mapped here took %ld faults", pages,
                      faults);
        ck_assert(memcmp(h.p + MiB + 100, src + 7, len) == 0);
        /* mapped now: the same pages again, no fault at all */
        w.local = src + 11;
        faults  = minor_faults();
        ck_assert_status_ok(mc_te_transfer_gen(A, &w, gens, 1, NULL));
        faults = minor_faults() - faults;
        ck_assert_msg(faults < 16, "a write into pages mapped here took %ld faults", faults);
        ck_assert(memcmp(h.p + MiB + 100, src + 11, len) == 0);
        ck_assert_int_eq(h.p[MiB + 99], edge[0]); /* nothing beside the write changed */
        ck_assert_int_eq(h.p[MiB + 100 + len], edge[1]);
    }
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(src);
}
END_TEST

/* Rows of @p row bytes back to back over [at, at + n * row) of @p h's
 * region, from @p src, all naming @p gen. */
static void rows_fill(mc_te_request_t *reqs, uint64_t *gens, size_t n, uint8_t *src,
                      uint8_t *at, size_t row, mc_te_segment_id_t seg, uint64_t gen)
{
    for (size_t i = 0; i < n; i++) {
        reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + i * row, (uint64_t)(uintptr_t)(at + i * row),
                                    row, seg};
        gens[i] = gen;
    }
}

/* A direct write of MC_TE_DIRECT_SPREAD_MIN bytes or more is split over
 * the calling thread and the workers (write_direct_spread): every row
 * lands whole, nothing beside them changes, every row is counted once;
 * a generation the region does not have still moves nothing. */
START_TEST(test_shm_write_direct_spread)
{
    enum { ROWS = 1200 };
    const uint64_t G = UINT64_C(0x8000000079000000), H = UINT64_C(0x800000007d000000);
    const size_t cap = 16 * MiB, row = 4 * KiB + 12, at = 3; /* rows at odd offsets */
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(ROWS * row), *keep = malloc(cap);
    mc_te_request_t *reqs = calloc(ROWS, sizeof(*reqs));
    uint64_t *gens        = calloc(ROWS, sizeof(*gens)), ops, bytes;
    mc_status_t st        = MC_INTERNAL_ERROR;

    ck_assert_uint_ge((uint64_t)ROWS * row, MC_TE_DIRECT_SPREAD_MIN);
    /* two pieces whatever the CPUs of the test host */
    A->direct_pieces = 2;
    te_fill(h.p, cap, 31);
    te_fill(src, ROWS * row, 73);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    rows_fill(reqs, gens, ROWS, src, h.p + at, row, seg, G);
    {
        mc_te_request_t one = {MC_TE_WRITE, h.p + cap - 16, (uint64_t)(uintptr_t)(h.p + cap - 16),
                               16, seg};
        ck_assert_status_ok(mc_te_transfer_gen(A, &one, gens, 1, NULL)); /* maps it */
    }
    memcpy(keep, h.p, cap);
    stats(A, &ops, &bytes);
    ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, ROWS, &st), 1);
    ck_assert_status_ok(st);
    ck_assert_stats(A, ops, bytes, ROWS, (uint64_t)ROWS * row);
    ck_assert_msg(memcmp(h.p + at, src, ROWS * row) == 0, "every row should land whole");
    ck_assert_msg(memcmp(h.p, keep, at) == 0, "nothing before the rows may change");
    ck_assert_msg(memcmp(h.p + at + ROWS * row, keep + at + ROWS * row, cap - at - ROWS * row) == 0,
                  "nothing after the rows may change");
    /* a generation the region does not have: nothing moves */
    for (size_t i = 0; i < ROWS; i++)
        gens[i] = H;
    te_fill(src, ROWS * row, 5);
    memcpy(keep, h.p, cap);
    ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, ROWS, &st), 0);
    ck_assert_msg(memcmp(h.p, keep, cap) == 0, "a declined write must move nothing");
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(reqs);
    free(gens);
    free(src);
    free(keep);
}
END_TEST

/* A READ naming a registration generation through the same-host path:
 * served by memcpy when the mapped region has it, refused otherwise, also
 * for a batch read in place (mc_te_read_direct_gen). */
START_TEST(test_shm_generation_reads)
{
    const uint64_t G = UINT64_C(0x8000000077000000), H = UINT64_C(0x8000000078000000);
    size_t cap       = MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *dst     = malloc(cap);
    uint64_t ops, bytes;
    mc_te_request_t rq[2];
    uint64_t gg[2] = {G, G}, gh[2] = {G, H};
    mc_status_t st;

    te_fill(h.p, cap, 23);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    rq[0] = (mc_te_request_t){MC_TE_READ, dst, (uint64_t)(uintptr_t)h.p, 4 * KiB, seg};
    rq[1] = (mc_te_request_t){MC_TE_READ, dst + 8 * KiB, (uint64_t)(uintptr_t)h.p + 8 * KiB,
                              4 * KiB, seg};
    ck_assert_status_ok(mc_te_transfer_gen(A, rq, gg, 1, NULL)); /* maps the region */
    stats(A, &ops, &bytes);
    ck_assert_status_ok(mc_te_transfer_gen(A, rq, gg, 1, NULL));
    ck_assert_stats(A, ops, bytes, 1, 4 * KiB);
    ck_assert(memcmp(dst, h.p, 4 * KiB) == 0);
    ck_assert_status_eq(mc_te_transfer_gen(A, rq, &gh[1], 1, NULL), MC_INVALID_READ);
    ck_assert_int_eq(mc_te_read_direct_gen(A, rq, gg, 2, &st), 1);
    ck_assert_status_ok(st);
    ck_assert(memcmp(dst + 8 * KiB, h.p + 8 * KiB, 4 * KiB) == 0);
    /* requests that disagree are left to the transfer, which refuses one */
    ck_assert_int_eq(mc_te_read_direct_gen(A, rq, gh, 2, &st), 0);
    ck_assert_status_eq(mc_te_transfer_gen(A, rq, gh, 2, NULL), MC_INVALID_READ);
    ck_assert_int_eq(mc_te_read_direct_gen(A, rq, (uint64_t[]){H, H}, 2, &st), 1);
    ck_assert_status_eq(st, MC_INVALID_READ);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(dst);
}
END_TEST

/* Register @p h under @p G and map it in A (a same-host read of its first
 * 4 KiB); its segment. */
static mc_te_segment_id_t gen_open(shm_buf_t *h, size_t cap, uint64_t G)
{
    static uint8_t scratch[4 * KiB];
    uint64_t g = G;
    mc_te_segment_id_t seg;
    mc_te_request_t rq;

    ck_assert_status_ok(mc_te_mem_reg_gen(B, h->p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h->fd, G));
    seg = te_open(A, B);
    rq  = (mc_te_request_t){MC_TE_READ, scratch, (uint64_t)(uintptr_t)h->p, sizeof(scratch), seg};
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL)); /* maps the region */
    return seg;
}

/* A later counter of the generation (common/gen.h) through the same-host
 * path: a write naming it goes by the network path, where the holder
 * adopts it and then gives the control word the new value; same-host
 * reads naming the earlier one are refused from then on, and those naming
 * the new one are copied again. */
START_TEST(test_shm_generation_counter)
{
    const uint64_t G = UINT64_C(0x8000000079000000), G1 = mc_gen_next(G);
    size_t cap       = MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint8_t *dst     = malloc(cap);
    uint64_t ops, bytes, g;
    mc_te_request_t rd, wr;

    te_fill(h.p, cap, 23);
    te_fill(src, cap, 61);
    mc_te_segment_id_t seg = gen_open(&h, cap, G);
    rd = (mc_te_request_t){MC_TE_READ, dst, (uint64_t)(uintptr_t)h.p, 4 * KiB, seg};
    wr = (mc_te_request_t){MC_TE_WRITE, src, (uint64_t)(uintptr_t)h.p, 4 * KiB, seg};
    stats(A, &ops, &bytes);
    g = G1; /* not the word yet: by the network, where B adopts it */
    ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
    ck_assert_stats(A, ops, bytes, 0, 0);
    ck_assert(memcmp(h.p, src, 4 * KiB) == 0);
    g = G;
    ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
    ck_assert_stats(A, ops, bytes, 0, 0);
    g = G1; /* the word now: copied, from the same mapping */
    ck_assert_status_ok(mc_te_transfer_gen(A, &rd, &g, 1, NULL));
    ck_assert_stats(A, ops, bytes, 1, 4 * KiB);
    ck_assert(memcmp(dst, src, 4 * KiB) == 0);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(src);
    free(dst);
}
END_TEST

/* A large write naming a later counter: only its head goes by the network
 * (where the holder adopts the counter), the rest is copied; every byte
 * lands, and nothing beside the write changes.  A small one still goes by
 * the network whole.  (A fence between the two parts:
 * test_shm_fence_against_adopting_writes.) */
START_TEST(test_shm_generation_counter_large_write)
{
    const uint64_t G = UINT64_C(0x8000000079000000), G1 = mc_gen_next(G),
                   G2 = mc_gen_next(G1);
    size_t cap       = 2 * MiB, len = MiB, off = 64 * KiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint8_t *keep    = malloc(cap);
    uint64_t ops, bytes, g;
    mc_te_request_t wr;

    te_fill(h.p, cap, 23);
    te_fill(src, cap, 61);
    mc_te_segment_id_t seg = gen_open(&h, cap, G);
    memcpy(keep, h.p, cap);
    stats(A, &ops, &bytes);
    wr = (mc_te_request_t){MC_TE_WRITE, src, (uint64_t)(uintptr_t)h.p + off, len, seg};
    g  = G1;
    ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
    ck_assert_stats(A, ops, bytes, 1, len - MC_TE_ADOPT_HEAD);
    ck_assert(memcmp(h.p + off, src, len) == 0);
    ck_assert(memcmp(h.p, keep, off) == 0);
    ck_assert(memcmp(h.p + off + len, keep + off + len, cap - off - len) == 0);
    /* below the split size: the network takes it whole */
    stats(A, &ops, &bytes);
    wr.length = MC_TE_ADOPT_SPLIT_MIN - 1;
    wr.local  = src + MiB;
    g         = G2;
    ck_assert_status_ok(mc_te_transfer_gen(A, &wr, &g, 1, NULL));
    ck_assert_stats(A, ops, bytes, 0, 0);
    ck_assert(memcmp(h.p + off, src + MiB, MC_TE_ADOPT_SPLIT_MIN - 1) == 0);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(src);
    free(keep);
}
END_TEST

/* A batch of small writes naming a later counter (memory the master freed
 * under a lease): the first piece goes by the network, where the holder
 * adopts the counter, and the rest are copied as a batch -- below and above
 * the size the calling thread spreads over the workers -- not each piece
 * by the network; every byte lands and nothing between the pieces moves.
 * A counter of another registration still moves nothing. */
START_TEST(test_shm_generation_counter_write_batch)
{
    enum { ROWS = 96 };
    const uint64_t G = UINT64_C(0x8000000079000000), G1 = mc_gen_next(G),
                   G2 = mc_gen_next(G1), H = UINT64_C(0x8000000078000000);
    static const size_t lens[2] = {8 * KiB + 4, 60 * KiB}; /* 0.8 MiB, then 5.6 MiB */
    size_t cap       = 8 * MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint8_t *keep    = malloc(cap);
    mc_te_request_t reqs[ROWS];
    uint64_t gens[ROWS], ops, bytes;
    mc_status_t st;

    te_fill(h.p, cap, 23);
    te_fill(src, cap, 61);
    mc_te_segment_id_t seg = gen_open(&h, cap, G);
    for (int round = 0; round < 2; round++) {
        uint64_t want = 0, g = (round == 0) ? G1 : G2;
        size_t at     = 100;
        for (size_t i = 0; i < ROWS; i++) {
            reqs[i] = (mc_te_request_t){MC_TE_WRITE, src + (i * 4099 + round) % (cap / 4),
                                        (uint64_t)(uintptr_t)(h.p + at), lens[round], seg};
            gens[i] = g;
            want += lens[round];
            at += lens[round] + 7;
        }
        memcpy(keep, h.p, cap);
        stats(A, &ops, &bytes);
        st = MC_INTERNAL_ERROR;
        ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, ROWS, &st), 1);
        ck_assert_status_ok(st);
        /* all but the first piece copied */
        ck_assert_stats(A, ops, bytes, ROWS - 1, want - lens[round]);
        for (size_t i = 0; i < ROWS; i++) {
            const uint8_t *to = (const uint8_t *)(uintptr_t)reqs[i].remote;
            size_t off        = (size_t)(to - h.p);
            ck_assert_msg(memcmp(to, reqs[i].local, reqs[i].length) == 0, "row %zu differs", i);
            ck_assert_msg(to[reqs[i].length] == keep[off + reqs[i].length],
                          "row %zu wrote past its end", i);
            ck_assert_msg(to[-1] == keep[off - 1], "row %zu wrote before its start", i);
        }
    }
    /* the holder took the counter: a read naming the one before is refused */
    {
        mc_te_request_t rd = {MC_TE_READ, keep, (uint64_t)(uintptr_t)h.p, 4 * KiB, seg};
        uint64_t g = G1;
        ck_assert_status_eq(mc_te_transfer_gen(A, &rd, &g, 1, NULL), MC_INVALID_READ);
    }
    /* another registration's counter: nothing moves, by either path */
    for (size_t i = 0; i < ROWS; i++)
        gens[i] = H;
    memcpy(keep, h.p, cap);
    stats(A, &ops, &bytes);
    ck_assert_int_eq(mc_te_write_direct_gen(A, reqs, gens, ROWS, &st), 0);
    ck_assert_stats(A, ops, bytes, 0, 0);
    ck_assert(memcmp(h.p, keep, cap) == 0);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(src);
    free(keep);
}
END_TEST

/* A WRITE naming a registration generation through the same-host path:
 * copied in when the mapped region has it; refused with no byte changed
 * otherwise, also after the holder registered the memory again. */
START_TEST(test_shm_generation_writes)
{
    const uint64_t G = UINT64_C(0x8000000077000000), H = UINT64_C(0x8000000078000000);
    size_t cap       = MiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *src     = malloc(cap);
    uint8_t *keep    = malloc(cap);
    uint64_t ops, bytes;
    mc_te_request_t rq;
    uint64_t g = G, gh = H;

    te_fill(h.p, cap, 23);
    te_fill(src, cap, 61);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    rq = (mc_te_request_t){MC_TE_WRITE, src, (uint64_t)(uintptr_t)h.p, 4 * KiB, seg};
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL)); /* maps the region */
    ck_assert(memcmp(h.p, src, 4 * KiB) == 0);
    stats(A, &ops, &bytes);
    rq.local = src + 4 * KiB;
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL));
    ck_assert_stats(A, ops, bytes, 1, 4 * KiB);
    ck_assert(memcmp(h.p, src + 4 * KiB, 4 * KiB) == 0);
    memcpy(keep, h.p, cap);
    rq.local = src;
    ck_assert_status_eq(mc_te_transfer_gen(A, &rq, &gh, 1, NULL), MC_INVALID_WRITE);
    ck_assert_msg(memcmp(h.p, keep, cap) == 0, "a refused write changed the region");
    /* registered again under H: G is refused, H lands */
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, H));
    ck_assert_status_eq(mc_te_transfer_gen(A, &rq, &g, 1, NULL), MC_INVALID_WRITE);
    ck_assert(memcmp(h.p, keep, cap) == 0);
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &gh, 1, NULL));
    ck_assert(memcmp(h.p, src, 4 * KiB) == 0);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(src);
    free(keep);
}
END_TEST

START_TEST(test_shm_not_shared_uses_tcp)
{
    uint8_t *plain   = calloc(1, 64 * KiB);
    shm_buf_t loose  = shm_buf_new(64 * KiB, 0, NULL);
    shm_buf_t priv   = shm_buf_new(64 * KiB, 1, NULL);
    shm_buf_t shared = shm_buf_new(64 * KiB, 1, NULL);
    uint8_t buf[64];
    uint64_t ops, bytes;
    char name[MC_TE_SHM_NAME_MAX];

    ck_assert_status_ok(mc_te_mem_reg(B, plain, 64 * KiB, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, loose.p, loose.len, "", MC_TE_MEM_REMOTE_ACCESS, loose.fd));
    ck_assert_status_ok(mc_te_mem_reg_shared(B, priv.p, priv.len, "", 0, priv.fd));
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, shared.p, shared.len, "", MC_TE_MEM_REMOTE_ACCESS, shared.fd));
    mc_te_segment_id_t seg = te_open(A, B);

    /* a plain region and an unsealed memfd go over TCP, correctly */
    roundtrip_tcp(A, seg, plain, 1);
    roundtrip_tcp(A, seg, loose.p, 2);
    /* a region without remote access cannot be reached at all */
    stats(A, &ops, &bytes);
    memset(priv.p, 0x5a, 64);
    memset(buf, 0, sizeof(buf));
    ck_assert_status_eq(xfer1(A, MC_TE_READ, buf, priv.p, sizeof(buf), seg), MC_INVALID_READ);
    ck_assert_status_eq(xfer1(A, MC_TE_WRITE, buf, priv.p, sizeof(buf), seg), MC_INVALID_WRITE);
    ck_assert_msg(priv.p[0] == 0x5a && buf[0] == 0, "nothing should move");
    ck_assert_stats(A, ops, bytes, 0, 0);
    /* control: the shared one does go through shm */
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, shared.p, sizeof(buf), seg));
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));

    /* a reader with MC_TE_SHM=0 uses TCP against a sharing holder */
    mc_te_h C = shm_te_new(NULL, 0);
    shm_name_of(C, name, sizeof(name));
    ck_assert_msg(name[0] == '\0', "MC_TE_SHM=0 should publish no name, not %s", name);
    roundtrip_tcp(C, te_open(C, B), shared.p, 3);
    mc_te_destroy(C);

    /* a holder with MC_TE_SHM=0 publishes no name; its memfd is served by TCP */
    mc_te_h D = shm_te_new("P2PHANDSHAKE", 0);
    shm_buf_t dm = shm_buf_new(64 * KiB, 1, NULL);
    shm_name_of(D, name, sizeof(name));
    ck_assert_msg(name[0] == '\0', "MC_TE_SHM=0 should publish no name, not %s", name);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(D, dm.p, dm.len, "", MC_TE_MEM_REMOTE_ACCESS, dm.fd));
    roundtrip_tcp(A, te_open(A, D), dm.p, 4);
    mc_te_destroy(D);
    shm_buf_free(&dm, 1);

    ck_assert_status_ok(mc_te_mem_dereg(B, plain));
    ck_assert_status_ok(mc_te_mem_dereg(B, loose.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, priv.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, shared.p));
    free(plain);
    shm_buf_free(&loose, 1);
    shm_buf_free(&priv, 1);
    shm_buf_free(&shared, 1);
}
END_TEST

/* A "not shared" answer is believed for a while only: when the holder
 * replaces that region by shared memory at the same address, the reader
 * comes to use it (within PEER_UNSHARED_MS, polled with a bound). */
START_TEST(test_shm_unshared_answer_expires)
{
    shm_buf_t u = shm_buf_new(64 * KiB, 0, NULL); /* unsealed: served over TCP */
    uint8_t *p  = u.p;
    uint8_t buf[4096];
    uint64_t ops, bytes, o2, b2;
    long long end;

    te_fill(p, u.len, 11);
    ck_assert_status_ok(mc_te_mem_reg_shared(B, p, u.len, "", MC_TE_MEM_REMOTE_ACCESS, u.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, p, sizeof(buf), seg));
    ck_assert_msg(memcmp(buf, p, sizeof(buf)) == 0, "the TCP read should match");
    ck_assert_stats(A, ops, bytes, 0, 0);

    /* same address, now a sealed memfd */
    ck_assert_status_ok(mc_te_mem_dereg(B, p));
    shm_buf_free(&u, 0);
    u = shm_buf_new(64 * KiB, 1, p);
    te_fill(p, u.len, 12);
    ck_assert_status_ok(mc_te_mem_reg_shared(B, p, u.len, "", MC_TE_MEM_REMOTE_ACCESS, u.fd));
    end = now_ms() + 5000;
    do {
        ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, p, sizeof(buf), seg));
        ck_assert_msg(memcmp(buf, p, sizeof(buf)) == 0, "every read should see the new bytes");
        stats(A, &o2, &b2);
        if (o2 == ops)
            poll(NULL, 0, 20);
    } while ((o2 == ops) && (now_ms() < end));
    ck_assert_msg(o2 > ops, "the reader should move to shared memory once the answer is old");
    ck_assert_status_ok(mc_te_mem_dereg(B, p));
    shm_buf_free(&u, 1);
}
END_TEST

START_TEST(test_shm_revocation)
{
    shm_buf_t h = shm_buf_new(64 * KiB, 1, NULL);
    uint8_t *p  = h.p;
    uint8_t buf[4096], src[4096];
    uint64_t ops, bytes;

    te_fill(h.p, h.len, 1);
    ck_assert_status_ok(mc_te_mem_reg_shared(B, p, h.len, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, p, sizeof(buf), seg));
    ck_assert_msg(memcmp(buf, p, sizeof(buf)) == 0, "the first read should match");
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));

    /* revoked: refused, never stale, and the holder's memory stays put */
    ck_assert_status_ok(mc_te_mem_dereg(B, p));
    memset(p, 0x11, h.len);
    memset(buf, 0, sizeof(buf));
    memset(src, 0x77, sizeof(src));
    ck_assert_status_eq(xfer1(A, MC_TE_READ, buf, p, sizeof(buf), seg), MC_INVALID_READ);
    ck_assert_status_eq(xfer1(A, MC_TE_WRITE, src, p + 100, 100, seg), MC_INVALID_WRITE);
    for (size_t i = 0; i < h.len; i++)
        ck_assert_msg(p[i] == 0x11, "revoked memory should not be written (byte %zu)", i);
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));

    /* a new memfd at the same address, registered anew, is read afresh */
    shm_buf_free(&h, 0);
    shm_buf_t h2 = shm_buf_new(64 * KiB, 1, p);
    te_fill(h2.p, h2.len, 2);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, p, h2.len, "", MC_TE_MEM_REMOTE_ACCESS, h2.fd));
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, p, sizeof(buf), seg));
    ck_assert_msg(memcmp(buf, p, sizeof(buf)) == 0, "the new region's contents should be read");
    ck_assert_stats(A, ops, bytes, 2, 2 * sizeof(buf));

    /* replaced without any access in between: the stale mapping is noticed */
    ck_assert_status_ok(mc_te_mem_dereg(B, p));
    shm_buf_free(&h2, 0);
    shm_buf_t h3 = shm_buf_new(64 * KiB, 1, p);
    te_fill(h3.p, h3.len, 3);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, p, h3.len, "", MC_TE_MEM_REMOTE_ACCESS, h3.fd));
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, p + 8, sizeof(buf), seg));
    ck_assert_msg(memcmp(buf, p + 8, sizeof(buf)) == 0, "the third region should be read");
    ck_assert_status_ok(xfer1(A, MC_TE_WRITE, src, p + 4096, sizeof(src), seg));
    ck_assert_msg(memcmp(p + 4096, src, sizeof(src)) == 0, "and written");
    ck_assert_stats(A, ops, bytes, 4, 4 * sizeof(buf));
    ck_assert_status_ok(mc_te_mem_dereg(B, p));
    shm_buf_free(&h3, 1);
}
END_TEST

START_TEST(test_shm_out_of_range)
{
    /* 4 KiB of guard, two touching shared regions of 32 KiB (separate
     * memfds), then 64 KiB of unregistered memory */
    size_t total  = 4 * KiB + 128 * KiB;
    uint8_t *resv = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(resv != MAP_FAILED);
    uint8_t *base = resv + 4 * KiB;
    shm_buf_t h1  = shm_buf_new(32 * KiB, 1, base);
    shm_buf_t h2  = shm_buf_new(32 * KiB, 1, base + 32 * KiB);
    uint8_t *end  = base + 64 * KiB;
    uint8_t *buf  = malloc(4 * KiB);
    uint8_t *want = malloc(total);
    uint8_t src[200];
    uint64_t ops, bytes;

    te_fill(resv, total, 8);
    memcpy(want, resv, total);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, h1.p, h1.len, "", MC_TE_MEM_REMOTE_ACCESS, h1.fd));
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, h2.p, h2.len, "", MC_TE_MEM_REMOTE_ACCESS, h2.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    stats(A, &ops, &bytes);
    /* map both first, so the checks below run against live mappings */
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, h1.p, 16, seg));
    ck_assert_msg(memcmp(buf, h1.p, 16) == 0, "the first region should be read");
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, h2.p, 16, seg));
    ck_assert_msg(memcmp(buf, h2.p, 16) == 0, "the second region should be read");
    ck_assert_stats(A, ops, bytes, 2, 32);

    static const struct {
        int64_t off; /* from base */
        uint64_t len;
    } bad[] = {
        {64 * KiB - 100, 200}, /* past the end of the second region */
        {32 * KiB - 100, 200}, /* across both: one request, two regions */
        {-100, 200},           /* before the first */
        {64 * KiB, 16},        /* unregistered memory after them */
        {0, 64 * KiB + 1},     /* everything and one more */
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        const uint8_t *at = (const uint8_t *)((intptr_t)base + (intptr_t)bad[i].off);
        uint8_t *big      = malloc(bad[i].len);
        if (bad[i].len <= 4 * KiB) {
            memset(buf, 0xa5, 4 * KiB);
            ck_assert_status_eq(xfer1(A, MC_TE_READ, buf, at, bad[i].len, seg), MC_INVALID_READ);
            for (size_t k = 0; k < 4 * KiB; k++)
                ck_assert_msg(buf[k] == 0xa5, "case %zu: a refused read wrote byte %zu", i, k);
        } else {
            memset(big, 0xa5, bad[i].len);
            ck_assert_status_eq(xfer1(A, MC_TE_READ, big, at, bad[i].len, seg), MC_INVALID_READ);
        }
        memset(big, 0x3c, bad[i].len);
        ck_assert_status_eq(xfer1(A, MC_TE_WRITE, big, at, bad[i].len, seg), MC_INVALID_WRITE);
        free(big);
        ck_assert_msg(memcmp(want, resv, total) == 0, "case %zu: a refused write landed", i);
    }
    ck_assert_stats(A, ops, bytes, 2, 32);
    /* the very edges are fine */
    memset(src, 0x42, sizeof(src));
    ck_assert_status_ok(xfer1(A, MC_TE_WRITE, src, end - sizeof(src), sizeof(src), seg));
    ck_assert_msg(memcmp(end - sizeof(src), src, sizeof(src)) == 0, "an edge write should land");
    ck_assert_msg(memcmp(end, want + 4 * KiB + 64 * KiB, 64 * KiB) == 0,
                  "nothing past the edge should change");
    ck_assert_stats(A, ops, bytes, 3, 32 + sizeof(src));
    ck_assert_status_ok(mc_te_mem_dereg(B, h1.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, h2.p));
    shm_buf_free(&h1, 0);
    shm_buf_free(&h2, 0);
    munmap(resv, total);
    free(buf);
    free(want);
}
END_TEST

START_TEST(test_shm_hostile_client)
{
    shm_buf_t h     = shm_buf_new(64 * KiB, 1, NULL);
    shm_buf_t priv  = shm_buf_new(64 * KiB, 1, NULL);
    uint8_t *plain  = calloc(1, 4 * KiB);
    uint8_t buf[512];
    char name[MC_TE_SHM_NAME_MAX];
    mc_te_shm_resp_t a;
    uint64_t ops, bytes;
    int fd, rfd, base;

    te_fill(h.p, h.len, 6);
    ck_assert_status_ok(mc_te_mem_reg_shared(B, h.p, h.len, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    ck_assert_status_ok(mc_te_mem_reg_shared(B, priv.p, priv.len, "", 0, priv.fd));
    ck_assert_status_ok(mc_te_mem_reg(B, plain, 4 * KiB, "", MC_TE_MEM_REMOTE_ACCESS));
    mc_te_segment_id_t seg = te_open(A, B);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, h.p, sizeof(buf), seg));
    shm_name_of(B, name, sizeof(name));
    base = fd_count();

    /* wrong sizes, magic, version: hung up on */
    fd = unix_connect(name);
    raw_send(fd, "hello", 5);
    raw_expect_closed(fd);
    close(fd);
    fd = unix_connect(name);
    {
        uint8_t big[sizeof(mc_te_shm_req_t) + 8];
        memset(big, 0, sizeof(big));
        raw_send(fd, big, sizeof(big));
        raw_expect_closed(fd);
    }
    close(fd);
    fd = unix_connect(name);
    raw_req(fd, MC_TE_SHM_MAGIC ^ 1, MC_TE_SHM_VERSION, MC_TE_SHM_HELLO, 0, 0);
    raw_expect_closed(fd);
    close(fd);
    fd = unix_connect(name);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION + 1, MC_TE_SHM_HELLO, 0, 0);
    raw_expect_closed(fd);
    close(fd);

    /* well-formed but unanswerable requests keep the connection */
    fd = unix_connect(name);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)buf, 16);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_NO_REGION);
    ck_assert_msg(rfd < 0, "NO_REGION should carry no fd");
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)h.p, 0);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_BAD);
    ck_assert_int_lt(rfd, 0);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, UINT64_MAX - 10, 100);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_BAD);
    ck_assert_int_lt(rfd, 0);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, 77, (uint64_t)(uintptr_t)h.p, 16);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_BAD);
    ck_assert_int_lt(rfd, 0);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)priv.p,
            16);
    a = raw_answer(fd, &rfd);
    ck_assert_msg(a.answer == MC_TE_SHM_NO_REGION, "a local-only region is not offered (%u)",
                  a.answer);
    ck_assert_int_lt(rfd, 0);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)h.p + 60 * KiB,
            8 * KiB); /* crosses the end */
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_NO_REGION);
    ck_assert_int_lt(rfd, 0);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)plain + 8,
            8);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_NOT_SHARED);
    ck_assert_int_lt(rfd, 0);
    ck_assert_uint_eq(a.region_addr, (uint64_t)(uintptr_t)plain);
    ck_assert_uint_eq(a.region_len, 4 * KiB);
    /* and a proper one still answers, with the region's memfd */
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)h.p + 5, 5);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_OK);
    ck_assert_int_ge(rfd, 0);
    ck_assert_uint_eq(a.region_addr, (uint64_t)(uintptr_t)h.p);
    ck_assert_uint_eq(a.region_len, h.len);
    ck_assert(mc_te_shm_fd_shareable(rfd, h.len));
    close(rfd);
    /* a client that never reads its answers does not stall the server */
    for (int i = 0; i < 2000; i++)
        if (send(fd, &(mc_te_shm_req_t){MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP,
                                        (uint64_t)(uintptr_t)buf, 16},
                 sizeof(mc_te_shm_req_t), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            break;
    /* a fresh connection still greets */
    {
        int fd2 = unix_connect(name);
        raw_req(fd2, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_HELLO, 0, 0);
        a = raw_answer(fd2, &rfd);
        ck_assert_uint_eq(a.answer, MC_TE_SHM_OK);
        ck_assert_uint_eq(a.nslots, MC_TE_SHM_SLOTS);
        ck_assert(mc_te_shm_fd_shareable(rfd, CTL_LEN));
        close(rfd);
        /* writer counts once per connection, sealed; asked again: refused */
        raw_req(fd2, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_WRITERS, 0, 0);
        a = raw_answer(fd2, &rfd);
        ck_assert_uint_eq(a.answer, MC_TE_SHM_OK);
        ck_assert(mc_te_shm_fd_shareable(rfd, WRITERS_LEN));
        ck_assert_int_ne(ftruncate(rfd, 1), 0);
        close(rfd);
        raw_req(fd2, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_WRITERS, 0, 0);
        a = raw_answer(fd2, &rfd);
        ck_assert_uint_eq(a.answer, MC_TE_SHM_BAD);
        ck_assert_int_lt(rfd, 0);
        close(fd2);
    }
    close(fd);
    /* the reader's own path is unharmed */
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, h.p + 100, sizeof(buf), seg));
    ck_assert_msg(memcmp(buf, h.p + 100, sizeof(buf)) == 0, "the reader should still read");
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));
    fd_count_settles(base);

    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, priv.p));
    ck_assert_status_ok(mc_te_mem_dereg(B, plain));
    shm_buf_free(&h, 1);
    shm_buf_free(&priv, 1);
    free(plain);
}
END_TEST

/* How many mappings of @p fd's memfd this process holds. */
static int mappings_of(int fd)
{
    struct stat sb;
    char line[512];
    int n = 0;
    FILE *f;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long ino = 0;
        char path[256] = "";
        if ((sscanf(line, "%*s %*s %*s %*s %llu %255s", &ino, path) == 2) &&
            (ino == (unsigned long long)sb.st_ino) && (strstr(path, "memfd:") != NULL))
            n++;
    }
    fclose(f);
    return n;
}

START_TEST(test_shm_holder_gone)
{
    mc_te_h H   = shm_te_new("P2PHANDSHAKE", 1);
    shm_buf_t h = shm_buf_new(64 * KiB, 1, NULL);
    uint8_t buf[256];
    char name[MC_TE_SHM_NAME_MAX];
    uint64_t ops, bytes;
    mc_status_t st = MC_OK;
    mc_te_shm_peer_t *p;
    long long deadline;

    te_fill(h.p, h.len, 3);
    ck_assert_status_ok(mc_te_mem_reg_shared(H, h.p, h.len, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    shm_name_of(H, name, sizeof(name));
    mc_te_segment_id_t seg = te_open(A, H);
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, h.p, sizeof(buf), seg));
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));
    /* a direct peer holding a mapping too */
    p = mc_te_shm_peer_open(name, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(mc_te_shm_peer_name(p), name);
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, (uint64_t)(uintptr_t)h.p, 16, 0, &st), 1);
    ck_assert_status_ok(st);
    ck_assert(mc_te_shm_mapped(p, (uint64_t)(uintptr_t)h.p, 16));
    ck_assert_int_eq(mc_te_shm_peer_alive(p), 1);

    mc_te_destroy(H);
    deadline = now_ms() + 3000;
    while (mc_te_shm_peer_alive(p) && (now_ms() < deadline))
        poll(NULL, 0, 5);
    ck_assert_msg(!mc_te_shm_peer_alive(p), "a hung-up holder should read as dead");
    ck_assert(!mc_te_shm_mapped(p, (uint64_t)(uintptr_t)h.p, 16));
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, (uint64_t)(uintptr_t)h.p, 16, 0, &st), 0);
    mc_te_shm_peer_close(p);

    /* The engine still maps the dead holder's region (nothing read it
     * since); a sweep lets go of it. */
    ck_assert_int_eq(mappings_of(h.fd), 2); /* ours and engine A's */
    mc_te_shm_sweep(A);
    ck_assert_int_eq(mappings_of(h.fd), 1);

    /* the engine's reader fails cleanly, through the network path */
    st = xfer1(A, MC_TE_READ, buf, h.p, sizeof(buf), seg);
    ck_assert_msg(st != MC_OK, "a read from a destroyed holder should fail");
    st = xfer1(A, MC_TE_WRITE, buf, h.p, sizeof(buf), seg);
    ck_assert_msg(st != MC_OK, "a write to a destroyed holder should fail");
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));
    shm_buf_free(&h, 1);
}
END_TEST

/* The holder restarts on the same segment name with a new server name:
 * the reader's refreshed descriptor brings it a new same-host path. */
START_TEST(test_shm_holder_restart)
{
    shm_buf_t t1 = shm_buf_new(16 * KiB, 1, NULL), t2 = shm_buf_new(16 * KiB, 1, NULL);
    uint8_t src[512], back[512];
    char name[64], sn1[MC_TE_SHM_NAME_MAX], sn2[MC_TE_SHM_NAME_MAX];
    uint64_t ops, bytes;
    mc_te_params_t p;
    mc_te_h B2 = NULL;

    ck_assert_status_ok(mc_te_mem_reg_shared(B, t1.p, t1.len, "", MC_TE_MEM_REMOTE_ACCESS, t1.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    te_fill(src, sizeof(src), 31);
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_WRITE, src, t1.p, sizeof(src), seg));
    ck_assert_stats(A, ops, bytes, 1, sizeof(src));
    shm_name_of(B, sn1, sizeof(sn1));
    snprintf(name, sizeof(name), "%s", mc_te_local_name(B));
    mc_te_destroy(B);
    B = NULL;
    memset(&p, 0, sizeof(p));
    p.field_mask     = MC_TE_PARAM_LOCAL_HOSTNAME;
    p.local_hostname = name;
    ck_assert_status_ok(mc_te_create(&p, &B2));
    B = B2;
    shm_name_of(B, sn2, sizeof(sn2));
    ck_assert_msg(sn2[0] == '@' && strcmp(sn1, sn2) != 0, "a new server, a new name (%s, %s)",
                  sn1, sn2);
    ck_assert_status_ok(mc_te_mem_reg_shared(B, t2.p, t2.len, "", MC_TE_MEM_REMOTE_ACCESS, t2.fd));
    /* the first access misses the old descriptor and refreshes it */
    ck_assert_status_ok(xfer1(A, MC_TE_WRITE, src, t2.p, sizeof(src), seg));
    ck_assert(memcmp(t2.p, src, sizeof(src)) == 0);
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, back, t2.p, sizeof(back), seg));
    ck_assert(memcmp(back, src, sizeof(src)) == 0);
    ck_assert_stats(A, ops, bytes, 1, sizeof(back));
    /* the old memory is gone with the old holder, on every path */
    ck_assert_status_eq(xfer1(A, MC_TE_READ, back, t1.p, 16, seg), MC_INVALID_READ);
    ck_assert_status_eq(xfer1(A, MC_TE_WRITE, back, t1.p, 16, seg), MC_INVALID_WRITE);
    ck_assert(memcmp(t1.p, src, sizeof(src)) == 0);
    ck_assert_stats(A, ops, bytes, 1, sizeof(back));
    ck_assert_status_ok(mc_te_mem_dereg(B, t2.p));
    shm_buf_free(&t1, 1);
    shm_buf_free(&t2, 1);
}
END_TEST

/* A reader copying in a loop while the holder revokes, scribbles over the
 * old memory and registers a new memfd at the same address, over and over:
 * every read that succeeds must be one generation's bytes, whole. */
typedef struct churn {
    mc_te_h te;
    mc_te_segment_id_t seg;
    uint8_t *at;
    size_t len;
    int stop;          /* atomic */
    unsigned ok;       /* atomic: successful reads */
    unsigned refused;  /* atomic: INVALID_READ */
    char failure[160]; /* first problem seen, "" when none */
} churn_t;

static void *churn_reader(void *arg)
{
    churn_t *c   = arg;
    uint8_t *buf = malloc(c->len);
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE) && (c->failure[0] == '\0')) {
        mc_te_request_t r = {MC_TE_READ, buf, (uint64_t)(uintptr_t)c->at, c->len, c->seg};
        mc_status_t st    = MC_INTERNAL_ERROR;
        (void)mc_te_transfer(c->te, &r, 1, &st);
        if (st == MC_INVALID_READ) {
            __atomic_add_fetch(&c->refused, 1, __ATOMIC_RELEASE);
            continue;
        }
        if (st != MC_OK) {
            snprintf(c->failure, sizeof(c->failure), "a read gave %s", mc_status_name(st));
            break;
        }
        for (size_t k = 0; k < c->len; k++)
            if ((buf[k] != buf[0]) || (buf[k] == 0xee)) {
                snprintf(c->failure, sizeof(c->failure),
                         "a successful read mixed generations: byte %zu is 0x%02x, byte 0 0x%02x",
                         k, buf[k], buf[0]);
                break;
            }
        __atomic_add_fetch(&c->ok, 1, __ATOMIC_RELEASE);
    }
    free(buf);
    return NULL;
}

START_TEST(test_shm_revoke_under_copy)
{
    enum { ROUNDS = 40 };
    churn_t c;
    pthread_t th;
    shm_buf_t h = shm_buf_new(256 * KiB, 1, NULL);
    uint64_t ops0, bytes0, ops1, bytes1;

    memset(&c, 0, sizeof(c));
    c.te  = A;
    c.at  = h.p;
    c.len = h.len;
    memset(h.p, 1, h.len);
    ck_assert_status_ok(mc_te_mem_reg_shared(B, h.p, h.len, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    c.seg = te_open(A, B);
    stats(A, &ops0, &bytes0);
    ck_assert_int_eq(pthread_create(&th, NULL, churn_reader, &c), 0);
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t r_ops0, r_ops, r_bytes;
        long long end = now_ms() + 5000;
        /* Let the reader finish at least one read of this generation through
         * shared memory.  (Right after a re-registration a read may still go
         * over TCP: its MAP request can fall into the gap between dereg and
         * the new registration.) */
        stats(A, &r_ops0, &r_bytes);
        do {
            poll(NULL, 0, 1);
            stats(A, &r_ops, &r_bytes);
        } while ((r_ops == r_ops0) && (c.failure[0] == '\0') && (now_ms() < end));
        if (c.failure[0] != '\0')
            break;
        ck_assert_msg(r_ops != r_ops0, "the reader should read through shm (round %d)", round);
        ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
        memset(h.p, 0xee, h.len); /* the holder reuses what it unregistered */
        shm_buf_free(&h, 0);
        h = shm_buf_new(h.len, 1, h.p);
        memset(h.p, 2 + round, h.len);
        ck_assert_status_ok(
            mc_te_mem_reg_shared(B, h.p, h.len, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    }
    __atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    ck_assert_msg(c.failure[0] == '\0', "%s", c.failure);
    stats(A, &ops1, &bytes1);
    ck_assert_msg(ops1 - ops0 >= ROUNDS, "the reads should go through shm (%llu of %u)",
                  (unsigned long long)(ops1 - ops0), c.ok);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
}
END_TEST

/* ---- a direct write held in the middle of its copy -------------------------- */

/* One transfer on its own thread; with @p hold, its hook (run after the
 * same-host path counted the write, just before the copy) waits until the
 * test lets it go. */
typedef struct side_write {
    mc_te_h te;
    mc_te_request_t rq;
    uint64_t gen;
    int hold;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in_copy, release, done;
    mc_status_t st;
} side_write_t;

/* Wait on @p cv (with @p mu held) for at most @p ms milliseconds. */
static void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

static void side_hook(void *arg)
{
    side_write_t *w = arg;
    long long end   = now_ms() + 20000;
    pthread_mutex_lock(&w->mu);
    w->in_copy = 1;
    pthread_cond_broadcast(&w->cv);
    while (!w->release && (now_ms() < end))
        cond_wait_ms(&w->cv, &w->mu, 10);
    pthread_mutex_unlock(&w->mu);
}

static void *side_main(void *arg)
{
    side_write_t *w = arg;
    mc_status_t st  = w->hold ? mc_te_transfer_gen_sent(w->te, &w->rq, &w->gen, 1, NULL, side_hook, w)
                              : mc_te_transfer_gen(w->te, &w->rq, &w->gen, 1, NULL);
    pthread_mutex_lock(&w->mu);
    w->st   = st;
    w->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void side_start(side_write_t *w, mc_te_h te, void *src, void *dst, size_t len,
                       mc_te_segment_id_t seg, uint64_t gen, int hold)
{
    memset(w, 0, sizeof(*w));
    w->te   = te;
    w->rq   = (mc_te_request_t){MC_TE_WRITE, src, (uint64_t)(uintptr_t)dst, len, seg};
    w->gen  = gen;
    w->hold = hold;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    ck_assert_int_eq(pthread_create(&w->th, NULL, side_main, w), 0);
}

/* Wait, at most @p ms, until *@p flag of @p w is set; its value then. */
static int side_wait(side_write_t *w, const int *flag, long long ms)
{
    long long end = now_ms() + ms;
    int v;
    pthread_mutex_lock(&w->mu);
    while (!*flag && (now_ms() < end))
        cond_wait_ms(&w->cv, &w->mu, 5);
    v = *flag;
    pthread_mutex_unlock(&w->mu);
    return v;
}

static mc_status_t side_finish(side_write_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->release = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return w->st;
}

static int all_byte(const uint8_t *p, size_t n, uint8_t b)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != b)
            return 0;
    return 1;
}

/* Memory reused under a fence while a same-host write of the earlier
 * counter is in the middle of its copy (docs/transfer.md, "Same-host
 * writes and fences"): the new owner's write waits until that copy is
 * done, so the old writer's bytes can never land over the new owner's.
 * Then the earlier counter is refused and the fence is copied directly. */
START_TEST(test_shm_fence_waits_out_a_direct_write)
{
    const uint64_t G = UINT64_C(0x800000007a000000), F = mc_gen_fence_after(G, MC_GEN_FENCE_STEP);
    const size_t cap = MiB, at = 64 * KiB, len = 64 * KiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *old_v   = malloc(len), *new_v = malloc(len), *late = malloc(len);
    uint64_t g = G, ops, bytes;
    side_write_t t, u;
    mc_te_request_t rq;

    memset(h.p, 0, cap);
    memset(old_v, 0x11, len);
    memset(new_v, 0x22, len);
    memset(late, 0x33, len);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    rq = (mc_te_request_t){MC_TE_WRITE, late, (uint64_t)(uintptr_t)h.p, 4 * KiB, seg};
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL)); /* maps the region */

    side_start(&t, A, old_v, h.p + at, len, seg, G, 1);
    ck_assert_msg(side_wait(&t, &t.in_copy, 10000), "the held write should reach its copy");
    side_start(&u, A, new_v, h.p + at, len, seg, F, 0); /* the memory's next owner */
    ck_assert_msg(!side_wait(&u, &u.done, 300),
                  "the next owner's write must wait for the direct write in its copy");
    ck_assert_msg(all_byte(h.p + at, len, 0), "nothing may land while the old copy is held");
    ck_assert_status_ok(side_finish(&t)); /* its copy was done before the fence */
    ck_assert_status_ok(side_finish(&u));
    ck_assert_msg(all_byte(h.p + at, len, 0x22), "the next owner's bytes must be the last");
    /* from now on the earlier counter is refused, the fence copied directly */
    g = G;
    rq = (mc_te_request_t){MC_TE_WRITE, late, (uint64_t)(uintptr_t)(h.p + at), len, seg};
    ck_assert_status_eq(mc_te_transfer_gen(A, &rq, &g, 1, NULL), MC_INVALID_WRITE);
    ck_assert(all_byte(h.p + at, len, 0x22));
    stats(A, &ops, &bytes);
    g = F;
    rq.remote = (uint64_t)(uintptr_t)(h.p + 512 * KiB);
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL));
    ck_assert_stats(A, ops, bytes, 1, len);
    ck_assert(all_byte(h.p + 512 * KiB, len, 0x33));
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(old_v);
    free(new_v);
    free(late);
}
END_TEST

/* The same with a direct write that stays stopped past the holder's wait
 * (a peer stopped by SIGSTOP in the middle of a copy): the next owner's
 * write is refused with nothing landed, writes of the earlier counter
 * are refused too, and once the copy is done a write of the fence lands. */
START_TEST(test_shm_fence_refuses_while_a_direct_write_is_stuck)
{
    const uint64_t G = UINT64_C(0x800000007b000000), F = mc_gen_fence_after(G, MC_GEN_FENCE_STEP);
    const size_t cap = MiB, at = 64 * KiB, len = 64 * KiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *old_v   = malloc(len), *new_v = malloc(len), *late = malloc(len);
    uint64_t g = G;
    side_write_t t, u;
    mc_te_request_t rq;

    /* a holder that waits out older requests for 2 s, not 31 */
    mc_te_destroy(B);
    setenv("MC_TCP_STATUS_TIMEOUT_SEC", "1", 1);
    B = shm_te_new("P2PHANDSHAKE", 1);
    unsetenv("MC_TCP_STATUS_TIMEOUT_SEC");
    memset(h.p, 0, cap);
    memset(old_v, 0x11, len);
    memset(new_v, 0x22, len);
    memset(late, 0x33, len);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    rq = (mc_te_request_t){MC_TE_WRITE, late, (uint64_t)(uintptr_t)(h.p + 512 * KiB), 4 * KiB,
                           seg};
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL)); /* maps the region */

    side_start(&t, A, old_v, h.p + at, len, seg, G, 1);
    ck_assert_msg(side_wait(&t, &t.in_copy, 10000), "the held write should reach its copy");
    side_start(&u, A, new_v, h.p + at, len, seg, F, 0);
    ck_assert_msg(side_wait(&u, &u.done, 15000), "the holder's wait should be bounded");
    ck_assert_status_eq(side_finish(&u), MC_INVALID_WRITE);
    ck_assert_msg(all_byte(h.p + at, len, 0), "a refused write must land nothing");
    /* the slot is closed to direct writes; the earlier counter is refused */
    g = G;
    rq = (mc_te_request_t){MC_TE_WRITE, late, (uint64_t)(uintptr_t)(h.p + 256 * KiB), len, seg};
    ck_assert_status_eq(mc_te_transfer_gen(A, &rq, &g, 1, NULL), MC_INVALID_WRITE);
    ck_assert(all_byte(h.p + 256 * KiB, len, 0));
    ck_assert_status_ok(side_finish(&t));
    ck_assert(all_byte(h.p + at, len, 0x11));
    /* the stuck copy is done: the next owner's write gets through */
    g = F;
    rq = (mc_te_request_t){MC_TE_WRITE, new_v, (uint64_t)(uintptr_t)(h.p + at), len, seg};
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL));
    ck_assert(all_byte(h.p + at, len, 0x22));
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(old_v);
    free(new_v);
    free(late);
}
END_TEST

/* A peer that counted a direct write and then hung up (its process ended
 * in the middle of the copy): the holder forgets its counts with its
 * connection, and the next owner's write, waiting meanwhile, gets through. */
START_TEST(test_shm_fence_forgets_a_peer_that_hung_up)
{
    const uint64_t G = UINT64_C(0x800000007c000000), F = mc_gen_fence_after(G, MC_GEN_FENCE_STEP);
    const size_t cap = MiB, len = 64 * KiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *new_v   = malloc(len);
    char name[MC_TE_SHM_NAME_MAX];
    mc_te_shm_resp_t a;
    uint32_t *counts;
    side_write_t u;
    int fd, rfd;

    memset(h.p, 0, cap);
    memset(new_v, 0x22, len);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, h.p, cap, "", MC_TE_MEM_REMOTE_ACCESS, h.fd, G));
    mc_te_segment_id_t seg = te_open(A, B);
    shm_name_of(B, name, sizeof(name));
    fd = unix_connect(name);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_WRITERS, 0, 0);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_OK);
    counts = mmap(NULL, WRITERS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    ck_assert(counts != MAP_FAILED);
    close(rfd);
    raw_req(fd, MC_TE_SHM_MAGIC, MC_TE_SHM_VERSION, MC_TE_SHM_MAP, (uint64_t)(uintptr_t)h.p, 1);
    a = raw_answer(fd, &rfd);
    ck_assert_uint_eq(a.answer, MC_TE_SHM_OK);
    ck_assert_uint_lt(a.slot, MC_TE_SHM_SLOTS);
    close(rfd);
    __atomic_add_fetch(&counts[a.slot], 1, __ATOMIC_SEQ_CST); /* "copying" */

    side_start(&u, A, new_v, h.p + 64 * KiB, len, seg, F, 0);
    ck_assert_msg(!side_wait(&u, &u.done, 300), "the next owner's write must wait");
    ck_assert(all_byte(h.p + 64 * KiB, len, 0));
    close(fd); /* the peer is gone */
    ck_assert_msg(side_wait(&u, &u.done, 10000), "the write should go on once the peer hung up");
    ck_assert_status_ok(side_finish(&u));
    ck_assert(all_byte(h.p + 64 * KiB, len, 0x22));
    munmap(counts, WRITERS_LEN);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(new_v);
}
END_TEST

/* A writer of the earlier counter writing large rows in a loop, each
 * write split over threads (write_direct_spread). */
typedef struct spread_writer {
    mc_te_h te;
    mc_te_request_t *reqs;
    uint64_t *gens;
    size_t n;
    uint8_t *src;
    size_t len;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int writes;      /* written so far */
    int refused;     /* a write was refused (the fence came) */
    int stop;
    int failed_late; /* a write started after the refusal succeeded */
    int bump;        /* each write names the next counter (mc_gen_next: never a fence) */
} spread_writer_t;

static void *spread_writer_main(void *arg)
{
    spread_writer_t *w = arg;
    long long end      = now_ms() + 20000;
    for (uint8_t v = 1; now_ms() < end; v = (uint8_t)((v % 200) + 1)) {
        mc_status_t st = MC_INTERNAL_ERROR;
        int refused;
        pthread_mutex_lock(&w->mu);
        refused = w->refused;
        if (w->stop) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        pthread_mutex_unlock(&w->mu);
        memset(w->src, v, w->len);
        for (size_t j = 0; w->bump && (j < w->n); j++)
            w->gens[j] = mc_gen_next(w->gens[j]);
        /* as the store does: the direct write, else the engine */
        if (!mc_te_write_direct_gen(w->te, w->reqs, w->gens, w->n, &st))
            st = mc_te_transfer_gen(w->te, w->reqs, w->gens, w->n, NULL);
        pthread_mutex_lock(&w->mu);
        w->writes++;
        if (st != MC_OK)
            w->refused = 1;
        else if (refused)
            w->failed_late = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

/* Wait, at most @p ms, until @p w has written @p writes times or was
 * refused; whether it was refused. */
static int spread_wait(spread_writer_t *w, int writes, int refused, long long ms)
{
    long long end = now_ms() + ms;
    int ok;
    pthread_mutex_lock(&w->mu);
    while (!(refused ? w->refused : (w->writes >= writes)) && (now_ms() < end))
        cond_wait_ms(&w->cv, &w->mu, 5);
    ok = refused ? w->refused : (w->writes >= writes);
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* Zero @p h, register it under @p G and map it in A; its segment. */
static mc_te_segment_id_t fence_open(shm_buf_t *h, size_t cap, uint64_t G)
{
    memset(h->p, 0, cap);
    return gen_open(h, cap, G);
}

/* Run writer @p w (its requests set) until it wrote twice; then the
 * memory's next owner writes @p tail bytes of @p new_v (0xee) at @p at
 * under fence @p F: the writer must be refused from then on, and those
 * bytes must be the last.  Frees the writer's buffers. */
static void fence_race(spread_writer_t *w, mc_te_segment_id_t seg, uint8_t *at,
                       uint8_t *new_v, size_t tail, uint64_t F, uint64_t G)
{
    pthread_t th;
    uint64_t g = F;
    mc_te_request_t rq = {MC_TE_WRITE, new_v, (uint64_t)(uintptr_t)at, tail, seg};

    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    ck_assert_int_eq(pthread_create(&th, NULL, spread_writer_main, w), 0);
    ck_assert_msg(spread_wait(w, 2, 0, 10000), "the old writer should write a few times");
    ck_assert_status_ok(mc_te_transfer_gen(A, &rq, &g, 1, NULL));
    ck_assert_msg(spread_wait(w, 0, 1, 10000), "writes of the earlier counter must be refused");
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_mutex_unlock(&w->mu);
    pthread_join(th, NULL);
    ck_assert_msg(!w->failed_late, "a write of an earlier counter succeeded after a refusal");
    ck_assert_msg(all_byte(at, tail, 0xee), "the next owner's bytes must be the last (base %016llx)",
                  (unsigned long long)G);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->src);
    free(w->reqs);
    free(w->gens);
}

/* One round of test_shm_fence_against_spread_writes under base @p G. */
static void fence_spread_round(uint64_t G)
{
    enum { ROWS = 1024 };
    const uint64_t F = mc_gen_fence_after(G, MC_GEN_FENCE_STEP);
    const size_t cap = 16 * MiB, row = 8 * KiB, len = ROWS * row, tail = 64 * KiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *new_v   = malloc(len);
    spread_writer_t w;
    mc_te_segment_id_t seg = fence_open(&h, cap, G);

    memset(&w, 0, sizeof(w));
    memset(new_v, 0xee, len);
    w.te   = A;
    w.n    = ROWS;
    w.len  = len;
    w.src  = malloc(len);
    w.reqs = calloc(ROWS, sizeof(*w.reqs));
    w.gens = calloc(ROWS, sizeof(*w.gens));
    rows_fill(w.reqs, w.gens, ROWS, w.src, h.p, row, seg, G);
    /* the memory's next owner writes the last rows, which the old writer's
     * second piece copies last, while that writer keeps copying */
    fence_race(&w, seg, h.p + len - tail, new_v, tail, F, G);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(new_v);
}

/* Memory reused under a fence while one writer keeps writing 1 MiB, each
 * time naming the next counter, which the holder has not adopted: each
 * write's head goes by the network and its rest is copied (adopt_split,
 * engine.c).  The new owner's bytes are the last, and writes of the
 * earlier counters are refused from then on, wherever the fence fell
 * between a head and its rest.  Several rounds, each a fresh
 * registration. */
static void fence_adopt_round(uint64_t G)
{
    const uint64_t F = mc_gen_fence_after(G, MC_GEN_FENCE_STEP);
    const size_t cap = 4 * MiB, len = MiB, tail = 64 * KiB;
    shm_buf_t h      = shm_buf_new(cap, 1, NULL);
    uint8_t *new_v   = malloc(tail);
    spread_writer_t w;
    mc_te_segment_id_t seg = fence_open(&h, cap, G);

    memset(&w, 0, sizeof(w));
    memset(new_v, 0xee, tail);
    w.te      = A;
    w.n       = 1;
    w.len     = len;
    w.bump    = 1;
    w.src     = malloc(len);
    w.reqs    = calloc(1, sizeof(*w.reqs));
    w.gens    = calloc(1, sizeof(*w.gens));
    w.reqs[0] = (mc_te_request_t){MC_TE_WRITE, w.src, (uint64_t)(uintptr_t)h.p, len, seg};
    w.gens[0] = G;
    /* the memory's next owner writes the write's last 64 KiB */
    fence_race(&w, seg, h.p + len - tail, new_v, tail, F, G);
    ck_assert_status_ok(mc_te_mem_dereg(B, h.p));
    shm_buf_free(&h, 1);
    free(new_v);
}

START_TEST(test_shm_fence_against_adopting_writes)
{
    for (uint64_t r = 0; r < 16; r++)
        fence_adopt_round(UINT64_C(0x8000000050000000) + (r << 24));
}
END_TEST

/* Memory reused under a fence while split direct writes of the earlier
 * counter run back to back (docs/transfer.md, "Same-host writes and
 * fences"): each piece is counted as a direct write of its own, so the
 * holder's fence waits out the pieces being copied on any thread, and the
 * new owner's bytes are the last whichever piece the fence fell into.
 * Writes of the earlier counter are refused from then on.  Several rounds,
 * each a fresh registration: where the fence falls is up to the threads. */
START_TEST(test_shm_fence_against_spread_writes)
{
    A->direct_pieces = 2; /* whatever the CPUs of the test host */
    for (uint64_t r = 0; r < 8; r++)
        fence_spread_round(UINT64_C(0x8000000040000000) + (r << 24));
}
END_TEST

/* Every shared registration takes one of MC_TE_SHM_SLOTS control words:
 * the slots run out cleanly (the region is then served over TCP only), and
 * come back on dereg and on every failed registration. */
START_TEST(test_shm_slots_recycled)
{
    size_t n      = MC_TE_SHM_SLOTS + 1;
    size_t stride = 4 * KiB;
    uint8_t *mem  = mmap(NULL, (n + 1) * stride, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    shm_buf_t h   = shm_buf_new(stride, 1, NULL);
    uint8_t buf[64];
    uint64_t ops, bytes;
    struct rlimit rl;
    int base;

    ck_assert(mem != MAP_FAILED);
    te_fill(h.p, stride, 12);
    /* every failed registration gives its slot and its fd back: were one
     * leaked, the registration after these would get no slot */
    ck_assert_status_ok(mc_te_mem_reg_shared(B, mem, stride, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    base = fd_count();
    for (size_t i = 0; i < n; i++)
        ck_assert_status_eq(
            mc_te_mem_reg_shared(B, mem + 8, stride, "", MC_TE_MEM_REMOTE_ACCESS, h.fd),
            MC_INVALID_PARAMS);
    ck_assert_int_eq(fd_count(), base);
    ck_assert_status_ok(
        mc_te_mem_reg_shared(B, mem + stride, stride, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    mc_te_segment_id_t seg = te_open(A, B);
    stats(A, &ops, &bytes);
    ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, mem + stride, sizeof(buf), seg));
    ck_assert_msg(memcmp(buf, h.p, sizeof(buf)) == 0, "a shared region maps the memfd");
    ck_assert_stats(A, ops, bytes, 1, sizeof(buf));
    ck_assert_status_ok(mc_te_mem_dereg(B, mem + stride));

    /* running out: each shared region holds a duplicate of its memfd, so
     * this part needs room for MC_TE_SHM_SLOTS more descriptors */
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < (rlim_t)n + 256) {
        rl.rlim_cur = (rl.rlim_max >= (rlim_t)n + 256) ? (rlim_t)n + 256 : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= (rlim_t)n + 256) {
        int c1;
        for (size_t i = 1; i < n; i++)
            ck_assert_status_ok(mc_te_mem_reg_shared(B, mem + i * stride, stride, "",
                                                     MC_TE_MEM_REMOTE_ACCESS, h.fd));
        /* n regions, one slot short: the last one is registered unshared */
        stats(A, &ops, &bytes);
        ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, mem + (n - 2) * stride, sizeof(buf), seg));
        ck_assert_stats(A, ops, bytes, 1, sizeof(buf));
        memset(mem + (n - 1) * stride, 0x71, stride);
        ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, mem + (n - 1) * stride, sizeof(buf), seg));
        ck_assert_msg(buf[0] == 0x71 && buf[63] == 0x71, "the slotless region is read over TCP");
        ck_assert_stats(A, ops, bytes, 1, sizeof(buf));
        c1 = fd_count();
        /* a dereg frees a slot for the next registration */
        ck_assert_status_ok(mc_te_mem_dereg(B, mem + (n - 1) * stride));
        ck_assert_status_ok(mc_te_mem_dereg(B, mem));
        ck_assert_status_ok(
            mc_te_mem_reg_shared(B, mem + n * stride, stride, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
        ck_assert_status_ok(xfer1(A, MC_TE_READ, buf, mem + n * stride, sizeof(buf), seg));
        ck_assert_stats(A, ops, bytes, 2, 2 * sizeof(buf));
        for (size_t i = 1; i <= n; i++)
            if (i != n - 1)
                ck_assert_status_ok(mc_te_mem_dereg(B, mem + i * stride));
        /* every duplicate is closed again */
        ck_assert_int_eq(fd_count(), c1 - (int)MC_TE_SHM_SLOTS);
    } else {
        ck_assert_status_ok(mc_te_mem_dereg(B, mem));
    }
    shm_buf_free(&h, 1);
    munmap(mem, (n + 1) * stride);
}
END_TEST

/* ---- a fake holder ------------------------------------------------------------ */

enum fake_mode {
    F_GOOD,          /* a proper greeting and proper grants */
    F_HELLO_UNSEALED,
    F_HELLO_NSLOTS,
    F_HELLO_SHORT,   /* sealed control memfd shorter than the words */
    F_HELLO_NOFD,
    F_HELLO_OLD,     /* the words but no gates: reads direct, writes by network */
    F_WRITERS_NONE,  /* WRITERS refused: the same */
    F_WRITERS_SHORT, /* a writer-count memfd too short: the same */
    F_MAP_UNSEALED,  /* (a) */
    F_MAP_SHORT_FD,  /* (b) */
    F_MAP_BOUNDS,    /* (c) */
    F_MAP_SLOT,      /* (d) */
    F_MAP_DGRAM,     /* (e) */
    F_MAP_SILENT,    /* (f) */
    F_MAP_GEN,       /* a generation the control word does not hold */
    F_MAP_TWO_FDS    /* a good grant with an extra fd attached */
};

#define FAKE_ADDR 0x100000000ull
#define FAKE_LEN  (64u * KiB)

typedef struct fake {
    char name[MC_TE_SHM_NAME_MAX];
    int lfd;
    int stop[2];
    int mode;      /* enum fake_mode; set before a peer connects */
    int ctl_fd;
    uint64_t *ctl; /* mapped read-write here */
    uint32_t *writers; /* the last WRITERS grant, mapped here, or NULL */
    int reg_fd;    /* sealed, FAKE_LEN */
    uint8_t *reg;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    unsigned reqs;  /* requests received, all connections */
    unsigned ended; /* connections seen to close */
    /* HELLO's life fields, set before a peer connects (0: an older holder) */
    uint64_t life_flags, life_pid, life_tid;
    uint32_t life_off;
} fake_t;

static void fake_send(int c, const mc_te_shm_resp_t *a, size_t len, const int *fds, int nfds)
{
    struct msghdr mh;
    struct iovec iov = {(void *)a, len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } cm;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov    = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        struct cmsghdr *h;
        memset(&cm, 0, sizeof(cm));
        mh.msg_control    = cm.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        h                 = CMSG_FIRSTHDR(&mh);
        h->cmsg_level     = SOL_SOCKET;
        h->cmsg_type      = SCM_RIGHTS;
        h->cmsg_len       = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(h), fds, (size_t)nfds * sizeof(int));
    }
    (void)sendmsg(c, &mh, MSG_NOSIGNAL);
}

static void fake_answer(fake_t *f, int c, const mc_te_shm_req_t *q)
{
    mc_te_shm_resp_t a;
    int mode = __atomic_load_n(&f->mode, __ATOMIC_ACQUIRE);
    int fd = -1, fds[2];
    memset(&a, 0, sizeof(a));
    a.magic = MC_TE_SHM_MAGIC;
    if (q->op == MC_TE_SHM_HELLO) {
        a.nslots = (mode == F_HELLO_NSLOTS) ? MC_TE_SHM_SLOTS / 2 : MC_TE_SHM_SLOTS;
        if (mode == F_HELLO_UNSEALED)
            fd = memfd_new(CTL_LEN, 0);
        else if (mode == F_HELLO_SHORT)
            fd = memfd_new(CTL_GEN_LEN / 2, 1);
        else if (mode == F_HELLO_OLD) {
            uint64_t five = 5; /* word 0, as in f->ctl */
            fd = memfd_new(CTL_GEN_LEN, 1);
            ck_assert_int_eq(pwrite(fd, &five, sizeof(five), 0), (ssize_t)sizeof(five));
        } else if (mode != F_HELLO_NOFD)
            fd = dup(f->ctl_fd);
        a.gen         = f->life_flags;
        a.region_addr = f->life_pid;
        a.region_len  = f->life_tid;
        a.slot        = f->life_off;
        fake_send(c, &a, sizeof(a), &fd, fd >= 0);
        if (fd >= 0)
            close(fd);
        return;
    }
    if (q->op == MC_TE_SHM_WRITERS) {
        if (mode == F_WRITERS_NONE) {
            a.answer = MC_TE_SHM_BAD;
            fake_send(c, &a, sizeof(a), NULL, 0);
            return;
        }
        fd = memfd_new((mode == F_WRITERS_SHORT) ? WRITERS_LEN / 2 : WRITERS_LEN, 1);
        if (mode != F_WRITERS_SHORT) {
            if (f->writers != NULL)
                munmap(f->writers, WRITERS_LEN);
            f->writers = mmap(NULL, WRITERS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            ck_assert(f->writers != MAP_FAILED);
        }
        a.answer = MC_TE_SHM_OK;
        fake_send(c, &a, sizeof(a), &fd, 1);
        close(fd);
        return;
    }
    if (mode == F_MAP_SILENT)
        return;
    if (mode == F_MAP_DGRAM) {
        fake_send(c, &a, 8, NULL, 0);
        return;
    }
    a.answer      = MC_TE_SHM_OK;
    a.region_addr = FAKE_ADDR;
    a.region_len  = FAKE_LEN;
    a.slot        = 0;
    a.gen         = 5;
    fd            = dup(f->reg_fd);
    if (mode == F_MAP_UNSEALED) {
        close(fd);
        fd = memfd_new(FAKE_LEN, 0);
    } else if (mode == F_MAP_SHORT_FD) {
        close(fd);
        fd = memfd_new(FAKE_LEN - 4096, 1);
    } else if (mode == F_MAP_BOUNDS) {
        a.region_addr = q->addr + 1;
    } else if (mode == F_MAP_SLOT) {
        a.slot = MC_TE_SHM_SLOTS;
    } else if (mode == F_MAP_GEN) {
        a.gen = 6;
    }
    fds[0] = fd;
    fds[1] = (mode == F_MAP_TWO_FDS) ? memfd_new(4096, 1) : -1;
    fake_send(c, &a, sizeof(a), fds, (fds[1] >= 0) ? 2 : 1);
    close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    int c     = -1;
    for (;;) {
        struct pollfd pf[2] = {{f->stop[0], POLLIN, 0}, {(c >= 0) ? c : f->lfd, POLLIN, 0}};
        if (poll(pf, 2, -1) < 0)
            continue;
        if (pf[0].revents)
            break;
        if (c < 0) {
            c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
            continue;
        }
        mc_te_shm_req_t q;
        ssize_t n = recv(c, &q, sizeof(q), 0);
        pthread_mutex_lock(&f->mu);
        if (n > 0)
            f->reqs++;
        else
            f->ended++;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->mu);
        if (n <= 0) {
            close(c);
            c = -1;
            continue;
        }
        fake_answer(f, c, &q);
    }
    if (c >= 0)
        close(c);
    return NULL;
}

static void fake_start(fake_t *f)
{
    static unsigned seq;
    struct sockaddr_un sa;
    size_t n;

    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "@mc-test-%ld-%u", (long)getpid(), seq++);
    n   = strlen(f->name + 1);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, f->name + 1, n);
    f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f->lfd, 0);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)),
                     0);
    ck_assert_int_eq(listen(f->lfd, 8), 0);
    ck_assert_int_eq(pipe2(f->stop, O_CLOEXEC), 0);
    f->ctl_fd = memfd_new(CTL_LEN, 0);
    f->ctl    = mmap(NULL, CTL_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, f->ctl_fd, 0);
    ck_assert(f->ctl != MAP_FAILED);
    ck_assert_int_eq(fcntl(f->ctl_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    f->ctl[0] = 5;
    f->reg_fd = memfd_new(FAKE_LEN, 1);
    f->reg    = mmap(NULL, FAKE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, f->reg_fd, 0);
    ck_assert(f->reg != MAP_FAILED);
    te_fill(f->reg, FAKE_LEN, 21);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f)
{
    ck_assert_int_eq(write(f->stop[1], "x", 1), 1);
    pthread_join(f->th, NULL);
    close(f->stop[0]);
    close(f->stop[1]);
    close(f->lfd);
    munmap(f->ctl, CTL_LEN);
    close(f->ctl_fd);
    if (f->writers != NULL)
        munmap(f->writers, WRITERS_LEN);
    munmap(f->reg, FAKE_LEN);
    close(f->reg_fd);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cond);
}

/* Wait (bounded) until @p ended connections closed; the requests seen. */
static unsigned fake_wait_ended(fake_t *f, unsigned ended)
{
    struct timespec ts;
    unsigned reqs;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 3;
    pthread_mutex_lock(&f->mu);
    while (f->ended < ended)
        if (pthread_cond_timedwait(&f->cond, &f->mu, &ts) != 0)
            break;
    ck_assert_msg(f->ended >= ended, "the fake holder should see %u closed connections", ended);
    reqs = f->reqs;
    pthread_mutex_unlock(&f->mu);
    return reqs;
}

START_TEST(test_shm_hostile_holder)
{
    static const int bad_hello[] = {F_HELLO_UNSEALED, F_HELLO_NSLOTS, F_HELLO_SHORT,
                                    F_HELLO_NOFD};
    static const int bad_map[] = {F_MAP_UNSEALED, F_MAP_SHORT_FD, F_MAP_BOUNDS, F_MAP_SLOT,
                                  F_MAP_GEN};
    uint8_t buf[1000];
    uint64_t at    = FAKE_ADDR + 100;
    int base       = fd_count();
    unsigned ended = 0, reqs;
    mc_status_t st;
    mc_te_shm_peer_t *p;
    fake_t f;

    fake_start(&f);
    ck_assert_ptr_null(mc_te_shm_peer_open("@mc-test-nobody-listens-here", 200));
    ck_assert_ptr_null(mc_te_shm_peer_open("no-at-sign", 200));
    ck_assert_ptr_null(mc_te_shm_peer_open("@", 200));

    /* the control: a proper holder is used, both ways */
    __atomic_store_n(&f.mode, F_GOOD, __ATOMIC_RELEASE);
    p      = mc_te_shm_peer_open(f.name, 200);
    ck_assert_ptr_nonnull(p);
    st = MC_INTERNAL_ERROR;
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, sizeof(buf), 0, &st), 1);
    ck_assert_status_ok(st);
    ck_assert_msg(memcmp(buf, f.reg + 100, sizeof(buf)) == 0, "the fake's bytes should be read");
    memset(buf, 0x6b, sizeof(buf));
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at + 1000, sizeof(buf), 0, &st), 1);
    ck_assert_msg(memcmp(f.reg + 1100, buf, sizeof(buf)) == 0, "and written");
    ck_assert_ptr_nonnull(f.writers);
    ck_assert_uint_eq(__atomic_load_n(&f.writers[0], __ATOMIC_ACQUIRE), 0); /* uncounted */
    /* the gate closed: writes go by network, reads still copy */
    __atomic_store_n(&f.ctl[MC_TE_SHM_SLOTS + 0], 1, __ATOMIC_RELEASE);
    memset(buf, 0x6c, sizeof(buf));
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at + 1000, sizeof(buf), 0, &st), 0);
    ck_assert_msg(f.reg[1100] == 0x6b, "a write through a closed gate must not land");
    ck_assert_uint_eq(__atomic_load_n(&f.writers[0], __ATOMIC_ACQUIRE), 0);
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at + 1000, sizeof(buf), 0, &st), 1);
    ck_assert_uint_eq(buf[0], 0x6b);
    __atomic_store_n(&f.ctl[MC_TE_SHM_SLOTS + 0], 0, __ATOMIC_RELEASE);
    memset(buf, 0x6c, sizeof(buf));
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at + 1000, sizeof(buf), 0, &st), 1);
    ck_assert_uint_eq(f.reg[1100], 0x6c);
    /* outside the granted region: asks again, gets a grant that does not hold it */
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, FAKE_ADDR + FAKE_LEN - 10, 20, 0, &st), 0);
    /* the holder zeroes the control word: the mapping is no longer used */
    __atomic_store_n(&f.ctl[0], 0, __ATOMIC_RELEASE);
    ck_assert(!mc_te_shm_mapped(p, at, 16));
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, 16, 0, &st), 0);
    __atomic_store_n(&f.ctl[0], 5, __ATOMIC_RELEASE);
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, 16, 0, &st), 1);
    ck_assert_int_eq(mc_te_shm_peer_alive(p), 1);
    mc_te_shm_peer_close(p);
    ended++;

    for (size_t i = 0; i < MC_ARRAY_SIZE(bad_hello); i++) {
        __atomic_store_n(&f.mode, bad_hello[i], __ATOMIC_RELEASE);
        ck_assert_msg(mc_te_shm_peer_open(f.name, 200) == NULL,
                      "greeting %zu should be refused", i);
        ended++;
    }
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad_map); i++) {
        __atomic_store_n(&f.mode, bad_map[i], __ATOMIC_RELEASE);
        p      = mc_te_shm_peer_open(f.name, 200);
        ck_assert_ptr_nonnull(p);
        memset(buf, 0, sizeof(buf));
        ck_assert_msg(mc_te_shm_xfer(p, MC_TE_READ, buf, at, sizeof(buf), 0, &st) == 0,
                      "grant %zu should be refused", i);
        ck_assert_msg(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at, sizeof(buf), 0, &st) == 0,
                      "grant %zu should be refused for writes too", i);
        ck_assert(!mc_te_shm_mapped(p, at, 16));
        for (size_t k = 0; k < sizeof(buf); k++)
            ck_assert_msg(buf[k] == 0, "grant %zu: a refused read wrote byte %zu", i, k);
        mc_te_shm_peer_close(p);
        ended++;
    }
    /* a holder without gates or writer counts: reads copy, writes go by
     * network (it could not wait out a direct write before reusing memory) */
    static const int no_writes[] = {F_HELLO_OLD, F_WRITERS_NONE, F_WRITERS_SHORT};
    for (size_t i = 0; i < MC_ARRAY_SIZE(no_writes); i++) {
        __atomic_store_n(&f.mode, no_writes[i], __ATOMIC_RELEASE);
        p = mc_te_shm_peer_open(f.name, 200);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, sizeof(buf), 0, &st), 1);
        ck_assert_msg(memcmp(buf, f.reg + 100, sizeof(buf)) == 0, "holder %zu: read", i);
        memset(buf, 0x6d, sizeof(buf));
        ck_assert_msg(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at, sizeof(buf), 0, &st) == 0,
                      "holder %zu: a direct write", i);
        ck_assert_msg(f.reg[100] != 0x6d, "holder %zu: a write landed", i);
        mc_te_shm_peer_close(p);
        ended++;
    }
    /* an extra fd is closed, the grant used */
    __atomic_store_n(&f.mode, F_MAP_TWO_FDS, __ATOMIC_RELEASE);
    p      = mc_te_shm_peer_open(f.name, 200);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, sizeof(buf), 0, &st), 1);
    ck_assert_msg(memcmp(buf, f.reg + 100, sizeof(buf)) == 0, "the grant should be used");
    mc_te_shm_peer_close(p);
    ended++;

    /* a truncated answer or none: the peer is dead and silent from then on */
    static const int fatal[] = {F_MAP_DGRAM, F_MAP_SILENT};
    for (size_t i = 0; i < MC_ARRAY_SIZE(fatal); i++) {
        long long t0;
        __atomic_store_n(&f.mode, fatal[i], __ATOMIC_RELEASE);
        p      = mc_te_shm_peer_open(f.name, 200);
        ck_assert_ptr_nonnull(p);
        reqs = fake_wait_ended(&f, ended);
        t0   = now_ms();
        ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, sizeof(buf), 0, &st), 0);
        ck_assert_msg(now_ms() - t0 < 2500, "the exchange should be bounded by the timeout");
        ck_assert_int_eq(mc_te_shm_peer_alive(p), 0);
        ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_READ, buf, at, sizeof(buf), 0, &st), 0);
        ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at, sizeof(buf), 0, &st), 0);
        ck_assert(!mc_te_shm_mapped(p, at, 16));
        mc_te_shm_peer_close(p);
        ended++;
        /* the one MAP that failed, nothing after the peer went dead */
        ck_assert_uint_eq(fake_wait_ended(&f, ended) - reqs, 1);
    }
    fake_stop(&f);
    ck_assert_int_eq(fd_count(), base);
}
END_TEST

/* ---- descriptor codec ------------------------------------------------------ */

START_TEST(test_shm_descriptor_codec)
{
    mc_te_desc_t d, back;
    mc_te_buf_desc_t bufs[1] = {{.addr = 0x7f0000001000ull, .length = 4096, .name = "cpu:0"}};
    char *json = NULL;
    size_t len = 0;
    char longest[MC_TE_SHM_NAME_MAX];

    mc_te_desc_init(&d);
    d.name = "h:1";
    snprintf(d.protocol, sizeof(d.protocol), "tcp");
    d.tcp_data_port = 12345;
    d.nbuffers      = 1;
    d.buffers       = bufs;
    /* absent stays absent */
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_msg(strstr(json, "shm_name") == NULL, "no name, no field: %s", json);
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    ck_assert_str_eq(back.shm_name, "");
    mc_te_desc_cleanup(&back);
    free(json);
    /* the longest valid name round-trips */
    longest[0] = '@';
    for (size_t i = 1; i < sizeof(longest) - 1; i++)
        longest[i] = "aZ09._-"[i % 7];
    longest[sizeof(longest) - 1] = '\0';
    snprintf(d.shm_name, sizeof(d.shm_name), "%s", longest);
    ck_assert_status_ok(mc_te_desc_encode(&d, &json, &len));
    ck_assert_msg(strstr(json, "\"shm_name\"") != NULL, "the name in %s", json);
    ck_assert_status_ok(mc_te_desc_decode(json, len, &back));
    ck_assert_str_eq(back.shm_name, longest);
    ck_assert_uint_eq(back.nbuffers, 1);
    mc_te_desc_cleanup(&back);
    free(json);

    static const char *const bad[] = {
        "\"mooncake-te-1\"", "\"@\"",     "\"@a b\"",  "\"@a/b\"", "\"@a\\u0000b\"",
        "\"@caf\\u00e9\"",   "\"\"",      "12",        "null",     "[\"@a\"]",
        "{\"n\":\"@a\"}",    "\"@@a\"",   "\"@a:1\"",  "true",
        /* 64 characters: one too many */
        "\"@0123456789012345678901234567890123456789012345678901234567890ab\"",
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        char doc[512];
        mc_te_desc_t x;
        snprintf(doc, sizeof(doc),
                 "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":9,\"shm_name\":%s,"
                 "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":4096,\"length\":4096}]}",
                 bad[i]);
        mc_te_desc_init(&x);
        ck_assert_msg(mc_te_desc_decode(doc, strlen(doc), &x) == MC_DESERIALIZE_FAIL,
                      "shm_name %s should be refused", bad[i]);
        ck_assert_msg(x.name == NULL && x.buffers == NULL, "a refused decode writes nothing");
    }
    {
        const char *ok = "{\"name\":\"a:1\",\"protocol\":\"tcp\",\"tcp_data_port\":9,"
                         "\"shm_name\":\"@mc-test.A_9\",\"buffers\":[]}";
        ck_assert_status_ok(mc_te_desc_decode(ok, strlen(ok), &back));
        ck_assert_str_eq(back.shm_name, "@mc-test.A_9");
        mc_te_desc_cleanup(&back);
    }
}
END_TEST

/* ---- a holder that is killed --------------------------------------------- */

/* The holder's life as a peer sees it, through the fake holder: the life
 * lock's word alone (the holder's pid not ours to look up), then its
 * serving thread's /proc stat alone (no life page); a write into memory
 * of a holder whose serving thread is gone is refused either way. */
static void *life_thread_main(void *arg)
{
    int *tid_fd = arg; /* [0]: our tid goes out, [1]: wait for the end */
    pid_t tid   = (pid_t)syscall(SYS_gettid);
    char x;
    ck_assert_int_eq(write(tid_fd[0], &tid, sizeof(tid)), (ssize_t)sizeof(tid));
    ck_assert_int_ge(read(tid_fd[1], &x, 1), 0);
    return NULL;
}

START_TEST(test_shm_holder_life)
{
    uint8_t buf[64];
    uint64_t at = FAKE_ADDR + 64;
    uint32_t *word;
    mc_status_t st;
    mc_te_shm_peer_t *p;
    fake_t f;

    /* (1) the life word: no /proc lookup (another pid), the word watched */
    fake_start(&f);
    word = (uint32_t *)((uint8_t *)f.ctl + CTL_GATES_LEN + 8);
    *word        = 4242;              /* the serving thread's id holds the lock */
    f.life_flags = MC_TE_SHM_HELLO_LIFE;
    f.life_pid   = (uint64_t)getpid() + 1; /* not what SO_PEERCRED says: no /proc */
    f.life_tid   = 1;
    f.life_off   = 8;
    p            = mc_te_shm_peer_open(f.name, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mc_te_shm_holder_confirm(p), 1);
    te_fill(buf, sizeof(buf), 5);
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at, sizeof(buf), 0, &st), 1);
    ck_assert_status_ok(st);
    ck_assert_int_eq(mc_te_shm_holder_confirm(p), 1);
    *word = 0x40000000u; /* FUTEX_OWNER_DIED: the kernel's mark of its end */
    ck_assert_int_eq(mc_te_shm_holder_confirm(p), 0);
    ck_assert_int_eq(mc_te_shm_peer_alive(p), 0); /* given up: TCP from now on */
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at, sizeof(buf), 0, &st), 0);
    mc_te_shm_peer_close(p);
    /* a holder that is already gone when we greet it: no path at all */
    *word = 0;
    ck_assert_ptr_null(mc_te_shm_peer_open(f.name, 1000));
    /* a word offset outside the life page is not looked at */
    f.life_off = 4096;
    p          = mc_te_shm_peer_open(f.name, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mc_te_shm_holder_confirm(p), 1);
    mc_te_shm_peer_close(p);
    fake_stop(&f);

    /* (2) the serving thread's /proc stat: a thread of ours plays it */
    {
        int tp[2], ep[2], io[2];
        pthread_t th;
        pid_t tid = 0;
        ck_assert_int_eq(pipe2(tp, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(ep, O_CLOEXEC), 0);
        io[0] = tp[1];
        io[1] = ep[0];
        ck_assert_int_eq(pthread_create(&th, NULL, life_thread_main, io), 0);
        ck_assert_int_eq(read(tp[0], &tid, sizeof(tid)), (ssize_t)sizeof(tid));
        fake_start(&f);
        f.life_flags = MC_TE_SHM_HELLO_LIFE;
        f.life_pid   = (uint64_t)getpid();
        f.life_tid   = (uint64_t)tid;
        f.life_off   = 8;
        *(uint32_t *)((uint8_t *)f.ctl + CTL_GATES_LEN + 8) = (uint32_t)tid;
        p = mc_te_shm_peer_open(f.name, 1000);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, buf, at, sizeof(buf), 0, &st), 1);
        ck_assert_status_ok(st);
        ck_assert_int_eq(mc_te_shm_holder_confirm(p), 1);
        /* the thread ends (the word is left as it was: only /proc tells) */
        close(ep[1]);
        pthread_join(th, NULL);
        usleep(1000); /* past the 250 us a live read stands for (PEER_STAT_FRESH_NS) */
        ck_assert_int_eq(mc_te_shm_holder_confirm(p), 0);
        ck_assert_int_eq(mc_te_shm_peer_alive(p), 0);
        mc_te_shm_peer_close(p);
        fake_stop(&f);
        close(tp[0]);
        close(tp[1]);
        close(ep[0]);
    }
}
END_TEST

/* A real holder in another process is killed with SIGKILL while a child it
 * forked keeps its sockets open, as a forked worker of an application
 * does: the reader sees no hang-up, yet a same-host write into the killed
 * holder's memory must fail as the network path fails it, not be reported
 * written into a process that is gone. */
typedef struct holder_info {
    char name[128];
    char shm[MC_TE_SHM_NAME_MAX];
    uint64_t addr;
} holder_info_t;

static void holder_child(int info_fd, int cmd_fd, int keep_fd)
{
    mc_te_h H   = shm_te_new("P2PHANDSHAKE", 1);
    shm_buf_t h = shm_buf_new(256 * KiB, 1, NULL);
    holder_info_t hi;
    char c;

    memset(&hi, 0, sizeof(hi));
    ck_assert_status_ok(mc_te_mem_reg_shared(H, h.p, h.len, "", MC_TE_MEM_REMOTE_ACCESS, h.fd));
    snprintf(hi.name, sizeof(hi.name), "%s", mc_te_local_name(H));
    shm_name_of(H, hi.shm, sizeof(hi.shm));
    hi.addr = (uint64_t)(uintptr_t)h.p;
    ck_assert_int_eq(write(info_fd, &hi, sizeof(hi)), (ssize_t)sizeof(hi));
    /* 'f': fork the child that keeps every descriptor open, then say so */
    while (read(cmd_fd, &c, 1) == 1) {
        if (fork() == 0) {
            char x;
            while (read(keep_fd, &x, 1) > 0) /* until the test closes its end */
                ;
            _exit(0);
        }
        ck_assert_int_eq(write(info_fd, &c, 1), 1);
    }
    _exit(0);
}

START_TEST(test_shm_write_into_killed_holder)
{
    int info[2], cmd[2], keep[2];
    holder_info_t hi;
    uint8_t src[4096], back[4096];
    mc_te_segment_id_t seg = 0;
    mc_te_shm_peer_t *p;
    uint64_t ops, bytes;
    mc_te_h R;
    mc_status_t st;
    pid_t pid;
    char c = 'f';
    int wst;

    ck_assert_int_eq(pipe2(info, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(cmd, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(keep, 0), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(keep[1]);
        holder_child(info[1], cmd[0], keep[0]);
    }
    close(keep[0]);
    ck_assert_int_eq(read(info[0], &hi, sizeof(hi)), (ssize_t)sizeof(hi));
    R = shm_te_new("P2PHANDSHAKE", 1);
    ck_assert_status_ok(mc_te_segment_open(R, hi.name, &seg));
    te_fill(src, sizeof(src), 77);
    stats(R, &ops, &bytes);
    ck_assert_status_ok(xfer1(R, MC_TE_WRITE, src, (void *)(uintptr_t)hi.addr, sizeof(src), seg));
    ck_assert_status_ok(xfer1(R, MC_TE_READ, back, (void *)(uintptr_t)hi.addr, sizeof(back), seg));
    ck_assert(memcmp(src, back, sizeof(src)) == 0);
    ck_assert_stats(R, ops, bytes, 2, 2 * sizeof(src)); /* both through shared memory */
    p = mc_te_shm_peer_open(hi.shm, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, src, hi.addr, 64, 0, &st), 1);
    ck_assert_int_eq(mc_te_shm_holder_confirm(p), 1);

    /* the forked child holds the holder's descriptors; then the kill */
    ck_assert_int_eq(write(cmd[1], &c, 1), 1);
    ck_assert_int_eq(read(info[0], &c, 1), 1);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    /* A reader reuses a /proc read that found the holder live for 250 us
     * (shm.c, PEER_STAT_FRESH_NS): from then on, whether the holder is
     * still exiting or not, refused.  (A bound, not a wait for the result.) */
    usleep(1000);
    st = xfer1(R, MC_TE_WRITE, src, (void *)(uintptr_t)hi.addr, sizeof(src), seg);
    ck_assert_msg(st != MC_OK, "a write into a killed holder was reported done");
    ck_assert_int_eq(mc_te_shm_xfer(p, MC_TE_WRITE, src, hi.addr, 64, 0, &st), 1);
    ck_assert_int_eq(mc_te_shm_holder_confirm(p), 0);
    mc_te_shm_peer_close(p);
    ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
    ck_assert(WIFSIGNALED(wst) && (WTERMSIG(wst) == SIGKILL));
    /* and once it is gone, though its sockets still are not closed */
    p = mc_te_shm_peer_open(hi.shm, 1000);
    ck_assert_ptr_null(p);
    st = xfer1(R, MC_TE_WRITE, src, (void *)(uintptr_t)hi.addr, sizeof(src), seg);
    ck_assert_msg(st != MC_OK, "a write into a dead holder was reported done");
    close(keep[1]); /* the forked child ends */
    mc_te_destroy(R);
    close(info[0]);
    close(info[1]);
    close(cmd[0]);
    close(cmd[1]);
}
END_TEST

Suite *mc_test_shm_suite(void)
{
    Suite *s     = suite_create("shm");
    TCase *codec = tcase_create("codec");
    TCase *two   = tcase_create("engines");
    TCase *fake  = tcase_create("fake_holder");
    TCase *killed = tcase_create("killed_holder");

    tcase_add_test(codec, test_shm_descriptor_codec);
    suite_add_tcase(s, codec);

    tcase_add_checked_fixture(two, setup_two, te_teardown_two);
    tcase_set_timeout(two, 60);
    tcase_add_test(two, test_shm_roundtrip);
    tcase_add_test(two, test_shm_read_direct);
    tcase_add_test(two, test_shm_write_direct);
    tcase_add_test(two, test_shm_write_direct_spread);
    tcase_add_test(two, test_shm_write_maps_blocks);
    tcase_add_test(two, test_shm_generation_reads);
    tcase_add_test(two, test_shm_generation_writes);
    tcase_add_test(two, test_shm_generation_counter);
    tcase_add_test(two, test_shm_generation_counter_large_write);
    tcase_add_test(two, test_shm_generation_counter_write_batch);
    tcase_add_test(two, test_shm_not_shared_uses_tcp);
    tcase_add_test(two, test_shm_revocation);
    tcase_add_test(two, test_shm_unshared_answer_expires);
    tcase_add_test(two, test_shm_out_of_range);
    tcase_add_test(two, test_shm_hostile_client);
    tcase_add_test(two, test_shm_holder_gone);
    tcase_add_test(two, test_shm_slots_recycled);
    tcase_add_test(two, test_shm_holder_restart);
    tcase_add_test(two, test_shm_revoke_under_copy);
    tcase_add_test(two, test_shm_fence_waits_out_a_direct_write);
    tcase_add_test(two, test_shm_fence_refuses_while_a_direct_write_is_stuck);
    tcase_add_test(two, test_shm_fence_forgets_a_peer_that_hung_up);
    tcase_add_test(two, test_shm_fence_against_spread_writes);
    tcase_add_test(two, test_shm_fence_against_adopting_writes);
    suite_add_tcase(s, two);

    tcase_set_timeout(fake, 30);
    tcase_add_test(fake, test_shm_hostile_holder);
    tcase_add_test(fake, test_shm_holder_life);
    suite_add_tcase(s, fake);

    tcase_set_timeout(killed, 60);
    tcase_add_test(killed, test_shm_write_into_killed_holder);
    suite_add_tcase(s, killed);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scattered reads (mc_te_read_scatter_gen, docs/transfer.md "Scattered
 * reads"): one contiguous remote range received straight into many
 * destination runs.  Two engines on 127.0.0.1 in one process, so every
 * test looks at the destination memory itself: the runs get exactly the
 * range's bytes in order and nothing between or around them changes;
 * more runs than one recvmsg takes (IOV_MAX); a generation refusal leaves
 * every run untouched; a run outside registered memory is refused before
 * anything is sent; and, against a fake holder on a raw socket, an answer
 * cut short mid-scatter or a connection closed before answering fails the
 * read.  In a job (mc_te_transfer_submit_scatter_gen), scattered reads
 * cut into slice-sized pieces at run boundaries land exactly, a generation
 * refusal fails its read with no run touched, and the holder's region
 * unregistered mid-job fails the reads it meets, whole.  Last, the store's
 * ranged read over TCP (MC_TE_SHM=0), whose groups of adjoining rows of one
 * object become scattered reads.  Every wait is bounded.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <mooncake/store.h>
#include <mooncake/transfer.h>

#include "check_suites.h"
#include "master_proc.h"
#include "store/store_internal.h"
#include "common/util.h"
#include "transfer/engine.h"
#include "transfer/proto.h"
#include "te_util.h"

#define GEN_G UINT64_C(0x8000001234000000)
#define GEN_H UINT64_C(0x8000009999000000)
#define FILL  0xEE


/* The memory of one test: @p cap patterned bytes on B (the holder),
 * registered for remote access under @p gen (0: plain), @p dcap bytes of
 * FILL on A (the reader), registered for local use, and B's segment
 * opened on A.  pair_close unregisters and frees both. */
typedef struct pair {
    uint8_t *src, *dst;
    size_t cap, dcap;
    mc_te_segment_id_t seg;
} pair_t;

static void pair_open(pair_t *p, size_t cap, size_t dcap, uint32_t seed, uint64_t gen)
{
    p->cap  = cap;
    p->dcap = dcap;
    p->src  = malloc(cap);
    p->dst  = malloc(dcap);
    ck_assert(p->src != NULL && p->dst != NULL);
    te_fill(p->src, cap, seed);
    memset(p->dst, FILL, dcap);
    ck_assert_status_ok(mc_te_mem_reg_gen(B, p->src, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, gen));
    ck_assert_status_ok(mc_te_mem_reg(A, p->dst, dcap, "", 0));
    p->seg = te_open(A, B);
}

static void pair_close(pair_t *p)
{
    ck_assert_status_ok(mc_te_mem_dereg(A, p->dst));
    ck_assert_status_ok(mc_te_mem_dereg(B, p->src));
    free(p->src);
    free(p->dst);
}

/* The holder's address of byte @p off of the pair's source. */
#define REM(p, off) ((uint64_t)(uintptr_t)(p)->src + (off))

/* Runs of lengths 1, 2, ... (cycling through @p maxlen) in @p dst, each
 * followed by a gap of @p gap bytes; returns how many fit in @p cap and
 * their total length in *total_p. */
static size_t make_runs(uint8_t *dst, size_t cap, size_t maxlen, size_t gap, struct iovec *runs,
                        size_t max_runs, size_t *total_p)
{
    size_t n = 0, off = 0, total = 0;
    while (n < max_runs) {
        size_t len = 1 + (n * 7) % maxlen; /* odd and even, small and large */
        if (off + len + gap > cap)
            break;
        runs[n].iov_base = dst + off;
        runs[n].iov_len  = len;
        total += len;
        off += len + gap;
        n++;
    }
    *total_p = total;
    return n;
}

static int all_fill(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != FILL)
            return 0;
    return 1;
}

/* The runs hold src[0, total) in order, and every other byte of dst[0,
 * cap) is still FILL (one assertion per gap: Check records each). */
static void check_scattered(const uint8_t *dst, size_t cap, const struct iovec *runs, size_t n,
                            const uint8_t *src)
{
    size_t at = 0, off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t start = (size_t)((const uint8_t *)runs[i].iov_base - dst);
        if (!all_fill(dst + off, start - off))
            ck_abort_msg("a byte between runs %zu and %zu was written", i - 1, i);
        if (memcmp(runs[i].iov_base, src + at, runs[i].iov_len) != 0)
            ck_abort_msg("run %zu (%zu bytes) does not hold bytes %zu.. of the range", i,
                         runs[i].iov_len, at);
        at += runs[i].iov_len;
        off = start + runs[i].iov_len;
    }
    if (!all_fill(dst + off, cap - off))
        ck_abort_msg("a byte after the runs was written");
}

/* Runs of odd sizes (1 byte to 64 KiB + 1), gaps between them, from an
 * offset inside the holder's region; over TCP one request. */
START_TEST(test_scatter_odd_runs)
{
    size_t total = 0, n;
    struct iovec runs[200];
    pair_t p;

    pair_open(&p, 4u << 20, 8u << 20, 7, GEN_G);
    ck_assert_int_eq(mc_te_read_scatter_native(A, p.seg), 1);
    n = make_runs(p.dst, p.dcap, 65537, 13, runs, 200, &total);
    ck_assert_uint_ge(n, 50);
    ck_assert_uint_le(total + 1001, p.cap);
    ck_assert_status_ok(mc_te_read_scatter_gen(A, p.seg, REM(&p, 1001), GEN_G, runs, n));
    check_scattered(p.dst, p.dcap, runs, n, p.src + 1001);
    /* naming no generation reads too; a single run is a plain read */
    memset(p.dst, FILL, p.dcap);
    ck_assert_status_ok(mc_te_read_scatter_gen(A, p.seg, REM(&p, 0), 0, runs, 1));
    check_scattered(p.dst, p.dcap, runs, 1, p.src);
    pair_close(&p);
}
END_TEST

/* Far more runs than one recvmsg takes: the receive goes on window by
 * window, and a window boundary may fall inside a run. */
START_TEST(test_scatter_more_runs_than_iov_max)
{
    size_t max_runs = 3 * IOV_MAX + 17, total = 0, n;
    struct iovec *runs = malloc(max_runs * sizeof(*runs));
    pair_t p;

    pair_open(&p, 1u << 20, 1u << 20, 8, 0);
    n = make_runs(p.dst, p.dcap, 61, 3, runs, max_runs, &total);
    ck_assert_uint_eq(n, max_runs);
    ck_assert_status_ok(mc_te_read_scatter_gen(A, p.seg, REM(&p, 0), 0, runs, n));
    check_scattered(p.dst, p.dcap, runs, n, p.src);
    pair_close(&p);
    free(runs);
}
END_TEST

/* A read naming another generation than the holder's region is refused
 * with MC_INVALID_READ before any byte moves: no run is touched.  After
 * the region is registered again, the old generation is refused and the
 * new one served. */
START_TEST(test_scatter_generation_refused)
{
    size_t cap = 1u << 20, total = 0, n;
    struct iovec runs[300];
    pair_t p;
    uint8_t *src, *dst;
    mc_te_segment_id_t seg;

    pair_open(&p, cap, cap, 9, GEN_G);
    src = p.src;
    dst = p.dst;
    seg = p.seg;
    n = make_runs(dst, cap, 4096, 1024, runs, 300, &total);
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, (uint64_t)(uintptr_t)src, GEN_H, runs, n),
                        MC_INVALID_READ);
    ck_assert_msg(all_fill(dst, cap), "a refused scattered read wrote into its runs");
    /* the connection goes on: the right generation reads */
    ck_assert_status_ok(mc_te_read_scatter_gen(A, seg, (uint64_t)(uintptr_t)src, GEN_G, runs, n));
    check_scattered(dst, cap, runs, n, src);
    ck_assert_status_ok(mc_te_mem_dereg(B, src));
    ck_assert_status_ok(mc_te_mem_reg_gen(B, src, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, GEN_H));
    memset(dst, FILL, cap);
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, (uint64_t)(uintptr_t)src, GEN_G, runs, n),
                        MC_INVALID_READ);
    ck_assert(all_fill(dst, cap));
    ck_assert_status_ok(mc_te_read_scatter_gen(A, seg, (uint64_t)(uintptr_t)src, GEN_H, runs, n));
    check_scattered(dst, cap, runs, n, src);
    /* a range past the holder's region: refused, nothing written */
    memset(dst, FILL, cap);
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, (uint64_t)(uintptr_t)src + cap - 10, 0,
                                               runs, 3),
                        MC_INVALID_READ);
    ck_assert(all_fill(dst, cap));
    pair_close(&p);
}
END_TEST

/* A destination run outside memory registered with the engine -- not
 * registered at all, or crossing the end of a registered region -- is
 * refused with MC_INVALID_PARAMS before the request is sent: the valid
 * run before it stays untouched.  So are empty and NULL runs. */
START_TEST(test_scatter_run_outside_registered_refused)
{
    size_t cap = 64u << 10;
    uint8_t *loose = malloc(cap), *src, *dst;
    struct iovec runs[3];
    mc_te_segment_id_t seg;
    uint64_t rem = 0;
    pair_t p;

    pair_open(&p, cap, cap, 10, 0);
    src = p.src;
    dst = p.dst;
    seg = p.seg;
    memset(loose, FILL, cap);
    rem = REM(&p, 0);
    runs[0] = (struct iovec){dst, 100};
    runs[1] = (struct iovec){loose, 100}; /* never registered */
    runs[2] = (struct iovec){dst + 200, 100};
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, rem, 0, runs, 3), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(mc_last_error_detail(), "run 1") != NULL, "detail: %s",
                  mc_last_error_detail());
    runs[1] = (struct iovec){dst + cap - 50, 100}; /* crosses the region's end */
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, rem, 0, runs, 3), MC_INVALID_PARAMS);
    runs[1] = (struct iovec){dst + 150, 0};
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, rem, 0, runs, 3), MC_INVALID_PARAMS);
    runs[1] = (struct iovec){NULL, 10};
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, rem, 0, runs, 3), MC_INVALID_PARAMS);
    ck_assert_msg(all_fill(dst, cap), "a refused run list was read into");
    ck_assert(all_fill(loose, cap));
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, rem, 0, NULL, 1), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_read_scatter_gen(A, seg, rem, 0, runs, 0), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_read_scatter_gen(A, 987654, rem, 0, runs, 1), MC_INVALID_PARAMS);
    /* the same list with every run in registered memory reads */
    runs[1] = (struct iovec){dst + 150, 10};
    ck_assert_status_ok(mc_te_read_scatter_gen(A, seg, rem, 0, runs, 3));
    check_scattered(dst, 310, runs, 3, src);
    pair_close(&p);
    free(loose);
}
END_TEST

/* This engine's own segment: the runs are read as requests of their own
 * (a copy each), with the same outcome and the same generation check. */
START_TEST(test_scatter_own_segment)
{
    size_t cap = 256u << 10, total = 0, n;
    uint8_t *src = malloc(cap), *dst = malloc(cap);
    struct iovec runs[100];
    mc_te_segment_id_t self;

    te_fill(src, cap, 11);
    memset(dst, FILL, cap);
    ck_assert_status_ok(mc_te_mem_reg_gen(A, src, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1, GEN_G));
    ck_assert_status_ok(mc_te_mem_reg(A, dst, cap, "", 0));
    ck_assert_status_ok(mc_te_segment_open(A, mc_te_local_name(A), &self));
    ck_assert_int_eq(mc_te_read_scatter_native(A, self), 0);
    n = make_runs(dst, cap, 999, 5, runs, 100, &total);
    ck_assert_status_eq(mc_te_read_scatter_gen(A, self, (uint64_t)(uintptr_t)src, GEN_H, runs, n),
                        MC_INVALID_READ);
    ck_assert(all_fill(dst, cap));
    ck_assert_status_ok(mc_te_read_scatter_gen(A, self, (uint64_t)(uintptr_t)src, GEN_G, runs, n));
    check_scattered(dst, cap, runs, n, src);
    ck_assert_status_ok(mc_te_mem_dereg(A, dst));
    ck_assert_status_ok(mc_te_mem_dereg(A, src));
    free(src);
    free(dst);
}
END_TEST

/* ---- scattered reads in a job (mc_te_transfer_submit_scatter_gen) ----- */

/* Wait (bounded) for @p job and release it; its statuses in @p st. */
static mc_status_t job_finish(mc_te_job_h job, mc_status_t *st)
{
    int done = 0;
    mc_status_t rc;

    mc_te_job_help(A, job);
    rc = mc_te_job_wait(job, 30000, &done, st);
    ck_assert_msg(done, "the job did not finish within 30 s");
    mc_te_job_release(job);
    return rc;
}

/*
 * A job's scattered reads are cut into pieces of about the slice size at
 * run boundaries, which run on the workers and on the caller
 * (mc_te_job_help): odd runs (1 byte to 64 KiB + 1) from an odd offset,
 * 64 KiB runs adding up exactly to slice multiples (a cut right at a run's
 * end), one run longer than a slice, and a plain request beside them all
 * land exactly; a read naming another generation fails with
 * MC_INVALID_READ and leaves every one of its runs untouched (every piece
 * is refused before its payload), while the others in the same job read.
 */
START_TEST(test_scatter_job_cut_at_runs)
{
    size_t dcap = 32u << 20, part = dcap / 4, t0 = 0, t1 = 0, t2 = 0, n0, n1, n2;
    size_t n3 = 0;
    struct iovec *runs = malloc(4 * 1000 * sizeof(*runs));
    mc_te_scatter_t sc[4];
    mc_te_request_t req;
    mc_te_job_h job = NULL;
    mc_status_t st[5];
    mc_te_segment_id_t seg;
    uint8_t *src, *dst;
    pair_t p;

    pair_open(&p, 8u << 20, dcap, 21, GEN_G);
    src = p.src;
    dst = p.dst;
    seg = p.seg;
    n0 = make_runs(dst, part - 8192, 65537, 13, runs, 1000, &t0);
    ck_assert_uint_gt(t0, 3 * MC_TE_DEFAULT_SLICE_SIZE);
    for (n1 = 0; n1 < 48; n1++) /* 3 MiB of 64 KiB runs, a gap after each */
        runs[1000 + n1] = (struct iovec){dst + part + n1 * (65536 + 64), 65536};
    t1 = 48 * 65536; /* six slices exactly */
    ck_assert_uint_eq(t1 % MC_TE_DEFAULT_SLICE_SIZE, 0);
    n2 = make_runs(dst + 2 * part, part, 999, 1, &runs[2000], 1000, &t2);
    runs[3000] = (struct iovec){dst + 3 * part, MC_TE_DEFAULT_SLICE_SIZE + 4097};
    runs[3001] = (struct iovec){dst + 3 * part + MC_TE_DEFAULT_SLICE_SIZE + 5000, 3};
    n3 = 2;
    ck_assert_uint_le(t0 + 1001, p.cap);
    sc[0] = (mc_te_scatter_t){seg, (uint64_t)(uintptr_t)src + 1001, GEN_G, runs, n0, NULL, 0, NULL, 0};
    sc[1] = (mc_te_scatter_t){seg, (uint64_t)(uintptr_t)src, 0, &runs[1000], n1, NULL, 0, NULL, 0};
    sc[2] = (mc_te_scatter_t){seg, (uint64_t)(uintptr_t)src + 7, GEN_H, &runs[2000], n2, NULL, 0, NULL, 0};
    sc[3] = (mc_te_scatter_t){seg, (uint64_t)(uintptr_t)src + 3, GEN_G, &runs[3000], n3, NULL, 0, NULL, 0};
    req   = (mc_te_request_t){MC_TE_READ, dst + part - 4096, (uint64_t)(uintptr_t)src + 11,
                              4000, seg};
    {
        uint64_t g = GEN_G;
        ck_assert_status_ok(mc_te_transfer_submit_scatter_gen(A, &req, &g, 1, sc, 4, &job));
    }
    ck_assert_status_eq(job_finish(job, st), MC_INVALID_READ);
    ck_assert_status_ok(st[0]);
    ck_assert_status_ok(st[1]);
    ck_assert_status_ok(st[2]);
    ck_assert_status_eq(st[3], MC_INVALID_READ);
    ck_assert_status_ok(st[4]);
    ck_assert_msg(memcmp(dst + part - 4096, src + 11, 4000) == 0, "the plain request");
    /* each part of dst: its runs hold the range, nothing else changed */
    check_scattered(dst, part - 4096, runs, n0, src + 1001);
    check_scattered(dst + part, part, &runs[1000], n1, src);
    ck_assert_msg(all_fill(dst + 2 * part, part), "a refused read wrote into its runs");
    check_scattered(dst + 3 * part, part, &runs[3000], n3, src + 3);
    pair_close(&p);
    free(runs);
}
END_TEST

typedef struct dereg_arg {
    uint8_t *src;
    int done;
} dereg_arg_t;

static void *dereg_main(void *arg)
{
    dereg_arg_t *d = arg;
    usleep(2000);
    d->done = (mc_te_mem_dereg(B, d->src) == MC_OK);
    return NULL;
}

/* Run the reads sc[0..n) in a job while the holder's region at @p src
 * goes away: unregistered before the job in round 0, 2 ms into it (from
 * another thread) after; their statuses in @p st. */
static void job_race(const mc_te_scatter_t *sc, size_t n, uint8_t *src, int round,
                     mc_status_t *st)
{
    dereg_arg_t d = {src, 0};
    mc_te_job_h job = NULL;
    pthread_t th;

    if (round == 0)
        ck_assert_status_ok(mc_te_mem_dereg(B, src));
    ck_assert_status_ok(mc_te_transfer_submit_scatter_gen(A, NULL, NULL, 0, sc, n, &job));
    if (round > 0)
        ck_assert_int_eq(pthread_create(&th, NULL, dereg_main, &d), 0);
    (void)job_finish(job, st);
    if (round > 0) {
        pthread_join(th, NULL);
        ck_assert_msg(d.done, "unregistering the holder's region failed");
    }
}

/*
 * The holder's region goes away while a job's cut scattered reads run
 * (unregistered from another thread): every read either holds exactly its
 * range or fails with a refusal or a transfer failure -- its status says
 * which, whatever piece the unregistration met -- and the job ends.
 * First gone before the job (every read refused), then unregistered 2 ms
 * into it, repeated, so it lands between and during pieces.
 */
START_TEST(test_scatter_job_region_gone_midway)
{
    enum { NSC = 6, RUNS = 600 };
    size_t cap = 8u << 20, dcap = 16u << 20, part = dcap / NSC;
    uint8_t *src = malloc(cap), *dst = malloc(dcap);
    struct iovec *runs = malloc(NSC * RUNS * sizeof(*runs));
    int failed = 0;

    te_fill(src, cap, 22);
    ck_assert_status_ok(mc_te_mem_reg(A, dst, dcap, "", 0));
    for (int round = 0; round < 8; round++) {
        mc_te_scatter_t sc[NSC];
        size_t n[NSC], t[NSC];
        mc_status_t st[NSC];
        mc_te_segment_id_t seg;

        memset(dst, FILL, dcap);
        ck_assert_status_ok(mc_te_mem_reg_gen(B, src, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1,
                                              GEN_G));
        seg = te_open(A, B);
        for (int k = 0; k < NSC; k++) {
            n[k]  = make_runs(dst + k * part, part, 4097, 1024 + 64 * k, &runs[k * RUNS], RUNS,
                              &t[k]);
            sc[k] = (mc_te_scatter_t){seg, (uint64_t)(uintptr_t)src + k * t[0], GEN_G,
                                      &runs[k * RUNS], n[k], NULL, 0, NULL, 0};
            ck_assert_uint_le((size_t)k * t[0] + t[k], cap);
        }
        job_race(sc, NSC, src, round, st); /* round 0: gone before the job */
        for (int k = 0; k < NSC; k++) {
            if (st[k] == MC_OK) {
                check_scattered(dst + k * part, part, &runs[k * RUNS], n[k],
                                src + k * t[0]);
            } else {
                ck_assert_msg((st[k] == MC_INVALID_READ) || (st[k] == MC_TRANSFER_FAIL),
                              "read %d: %s", k, mc_status_name(st[k]));
                failed++;
            }
        }
        if (round == 0)
            ck_assert_int_eq(failed, NSC);
    }
    ck_assert_status_ok(mc_te_mem_dereg(A, dst));
    free(runs);
    free(src);
    free(dst);
}
END_TEST

/* ---- a fake holder on a raw socket ------------------------------------- */

typedef struct fake_holder {
    int lfd;
    uint16_t port;
    uint64_t send_bytes; /* payload bytes sent before closing */
    int answer;          /* 0: close without answering */
    pthread_t th;
    uint8_t fill;
} fake_holder_t;

static void *fake_main(void *arg)
{
    fake_holder_t *f = arg;
    uint8_t req[MC_TE_REQ_HDR_SIZE], resp[MC_TE_RESP_HDR_SIZE], buf[4096];
    mc_te_req_hdr_t h;
    struct pollfd p = {f->lfd, POLLIN, 0};
    int c;

    if (poll(&p, 1, 10000) != 1)
        return NULL;
    c = accept(f->lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    if ((recv(c, req, sizeof(req), MSG_WAITALL) == (ssize_t)sizeof(req)) &&
        (mc_te_req_decode(req, &h) == 0) && f->answer) {
        uint64_t left = f->send_bytes;
        mc_te_resp_encode(resp, MC_OK, h.length); /* promises the whole range */
        (void)!send(c, resp, sizeof(resp), MSG_NOSIGNAL);
        memset(buf, f->fill, sizeof(buf));
        while (left > 0) {
            size_t k = (size_t)MC_MIN(left, (uint64_t)sizeof(buf));
            if (send(c, buf, k, MSG_NOSIGNAL) != (ssize_t)k)
                break;
            left -= k;
        }
    }
    close(c);
    return NULL;
}

static void fake_start(fake_holder_t *f)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);

    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(f->lfd, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(f->lfd, 4), 0);
    ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&sa, &sl), 0);
    f->port = ntohs(sa.sin_port);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_holder_t *f)
{
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* The transport's read_scatter against @p f: the answer promises every
 * byte, then the holder sends f->send_bytes of them and closes. */
static mc_status_t fake_scatter(fake_holder_t *f, const struct iovec *runs, size_t n,
                                uint64_t total)
{
    void *peer = NULL;
    mc_status_t st;

    fake_start(f);
    ck_assert_status_ok(A->tp_ops->peer_open(A->tp, "127.0.0.1", f->port, &peer));
    st = A->tp_ops->read_scatter(A->tp, peer, 0x10000, total, 0, runs, n);
    A->tp_ops->peer_close(A->tp, peer);
    fake_stop(f);
    return st;
}

/* An answer cut short mid-scatter (the holder closes after part of the
 * payload) fails the read with MC_TRANSFER_FAIL: the bytes that came are
 * in the first runs, nothing lands outside the runs, and the caller must
 * not use any of them.  A connection closed before any answer fails too
 * (a fresh connection: nothing to retry). */
START_TEST(test_scatter_short_answer_fails)
{
    size_t cap = 1u << 20, total = 0, n;
    uint8_t *dst = malloc(cap);
    struct iovec runs[2000];
    fake_holder_t f;

    memset(dst, FILL, cap);
    n = make_runs(dst, cap, 300, 2, runs, 2000, &total);
    ck_assert_uint_gt(total, 100000);
    memset(&f, 0, sizeof(f));
    f.answer     = 1;
    f.send_bytes = 100000;
    f.fill       = 0x5A;
    ck_assert_status_eq(fake_scatter(&f, runs, n, total), MC_TRANSFER_FAIL);
    ck_assert_msg(strstr(mc_last_error_detail(), "after 100000") != NULL, "detail: %s",
                  mc_last_error_detail());
    {
        size_t at = 0, off = 0;
        for (size_t i = 0; i < n; i++) {
            size_t start = (size_t)((uint8_t *)runs[i].iov_base - dst);
            for (; off < start; off++)
                ck_assert_msg(dst[off] == FILL, "byte %zu between runs was written", off);
            for (size_t k = 0; k < runs[i].iov_len; k++, at++)
                ck_assert_int_eq(((uint8_t *)runs[i].iov_base)[k], (at < 100000) ? 0x5A : FILL);
            off = start + runs[i].iov_len;
        }
    }
    memset(&f, 0, sizeof(f));
    f.answer = 0;
    memset(dst, FILL, cap);
    ck_assert_status_eq(fake_scatter(&f, runs, n, total), MC_TRANSFER_FAIL);
    ck_assert(all_fill(dst, cap));
    free(dst);
}
END_TEST

/* ---- gathered reads (mc_te_read_gather_gen, READV) -------------------- */

/*
 * The rows of two "objects" of the holder's region (X at 0, rows of @p rx
 * bytes; Y at @p yoff, rows of @p ry) interleaved, X's row then Y's, for
 * @p rows rows: the ranges of a READV as the store makes them for a TP=2
 * row filled by two TP=4 fragments.  Their bytes in that order go to
 * @p stream; returns the total.
 */
static uint64_t interleave(const pair_t *p, size_t rows, size_t rx, size_t yoff, size_t ry,
                           mc_te_range_t *rg, uint8_t *stream)
{
    uint64_t at = 0;
    for (size_t r = 0; r < rows; r++) {
        rg[2 * r]     = (mc_te_range_t){REM(p, r * rx), rx};
        rg[2 * r + 1] = (mc_te_range_t){REM(p, yoff + r * ry), ry};
        memcpy(stream + at, p->src + r * rx, rx);
        memcpy(stream + at + rx, p->src + yoff + r * ry, ry);
        at += rx + ry;
    }
    return at;
}

/* Runs of odd lengths with gaps in @p dst adding up to exactly @p total
 * (so they cut the stream elsewhere than the ranges do); their number. */
static size_t runs_for(uint8_t *dst, uint64_t total, struct iovec *runs, size_t max)
{
    size_t n = 0, off = 0;
    for (uint64_t left = total; left > 0; n++) {
        size_t len = (size_t)MC_MIN(left, (uint64_t)(1 + (n * 7919) % 6000));
        ck_assert_uint_lt(n, max);
        runs[n] = (struct iovec){dst + off, len};
        off += len + 5;
        left -= len;
    }
    return n;
}

/*
 * The ranges of two objects interleaved row by row land in the runs in
 * the ranges' order: into one contiguous destination (the case READV is
 * for), and into odd runs with gaps that cut the stream elsewhere than
 * the ranges (nothing between them written).  Over TCP each is one READV;
 * in a job beside a plain scattered read they run whole and land too.
 */
START_TEST(test_gather_interleaved_rows)
{
    enum { ROWS = 500, RX = 1024, RY = 1000 };
    mc_te_range_t *rg = malloc(2 * ROWS * sizeof(*rg));
    uint8_t *stream   = malloc(ROWS * (RX + RY));
    struct iovec *runs = malloc(4000 * sizeof(*runs)), one, sruns[2];
    mc_te_scatter_t sc[2];
    mc_status_t st[2];
    mc_te_job_h job = NULL;
    uint64_t total;
    size_t n;
    pair_t p;

    pair_open(&p, 2u << 20, 4u << 20, 31, GEN_G);
    ck_assert_int_eq(mc_te_read_gather_native(A, p.seg), 1);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    one   = (struct iovec){p.dst + 3, (size_t)total};
    ck_assert_status_ok(mc_te_read_gather_gen(A, p.seg, GEN_G, rg, 2 * ROWS, &one, 1));
    check_scattered(p.dst, p.dcap, &one, 1, stream);
    memset(p.dst, FILL, p.dcap);
    n = runs_for(p.dst, total, runs, 4000);
    ck_assert_status_ok(mc_te_read_gather_gen(A, p.seg, 0, rg, 2 * ROWS, runs, n));
    check_scattered(p.dst, p.dcap, runs, n, stream);
    /* in a job, beside a scattered read of two runs */
    memset(p.dst, FILL, p.dcap);
    one      = (struct iovec){p.dst, (size_t)total};
    sruns[0] = (struct iovec){p.dst + total + 100, 5000};
    sruns[1] = (struct iovec){p.dst + total + 6000, 7000};
    sc[0]    = (mc_te_scatter_t){p.seg, 0, GEN_G, &one, 1, rg, 2 * ROWS, NULL, 0};
    sc[1]    = (mc_te_scatter_t){p.seg, REM(&p, 77), GEN_G, sruns, 2, NULL, 0, NULL, 0};
    ck_assert_status_ok(mc_te_transfer_submit_scatter_gen(A, NULL, NULL, 0, sc, 2, &job));
    ck_assert_status_ok(job_finish(job, st));
    ck_assert_status_ok(st[0]);
    ck_assert_status_ok(st[1]);
    ck_assert_msg(memcmp(p.dst, stream, total) == 0, "the gathered read in the job");
    check_scattered(p.dst + total, p.dcap - total, sruns, 2, p.src + 77);
    pair_close(&p);
    free(rg);
    free(stream);
    free(runs);
}
END_TEST

/*
 * Refusals.  A gathered read naming another generation is refused with
 * MC_INVALID_READ and writes nothing; the connection then serves the
 * right one.  Bad arguments (no ranges, too many, an empty range, runs
 * that do not add up to the ranges, more than MC_TE_READV_MAX_LEN) are
 * MC_INVALID_PARAMS before anything is sent.  And the holder's own check,
 * reached through the transport directly (past the initiator's descriptor
 * check): a range past the region, ranges in two regions and a range that
 * wraps are each answered MC_INVALID_READ with no byte written, and the
 * same pooled connection reads after each.
 */
START_TEST(test_gather_refused)
{
    enum { ROWS = 64, ROW = 512 };
    mc_te_range_t rg[2 * ROWS], bad[3];
    uint8_t *stream = malloc(2 * ROWS * ROW), *other = malloc(8192);
    struct iovec one;
    void *peer = NULL;
    uint64_t total;
    pair_t p;

    pair_open(&p, 1u << 20, 1u << 20, 32, GEN_G);
    total = interleave(&p, ROWS, ROW, 512u << 10, ROW, rg, stream);
    one   = (struct iovec){p.dst, (size_t)total};
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, GEN_H, rg, 2 * ROWS, &one, 1),
                        MC_INVALID_READ);
    ck_assert_msg(all_fill(p.dst, p.dcap), "a refused gathered read wrote into its runs");
    ck_assert_status_ok(mc_te_read_gather_gen(A, p.seg, GEN_G, rg, 2 * ROWS, &one, 1));
    ck_assert(memcmp(p.dst, stream, total) == 0);
    /* arguments */
    memset(p.dst, FILL, p.dcap);
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, 0, rg, 0, &one, 1), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, 0, rg, MC_TE_READV_MAX_RANGES + 1, &one,
                                              1),
                        MC_INVALID_PARAMS);
    bad[0] = rg[0];
    bad[1] = (mc_te_range_t){rg[1].addr, 0};
    one    = (struct iovec){p.dst, ROW};
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, 0, bad, 2, &one, 1), MC_INVALID_PARAMS);
    one = (struct iovec){p.dst, ROW + 1}; /* runs longer than the ranges */
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, 0, rg, 1, &one, 1), MC_INVALID_PARAMS);
    one = (struct iovec){p.dst, ROW - 1}; /* shorter */
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, 0, rg, 1, &one, 1), MC_INVALID_PARAMS);
    bad[0] = (mc_te_range_t){REM(&p, 0), MC_TE_READV_MAX_LEN + 1ull};
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, 0, bad, 1, &one, 1), MC_INVALID_PARAMS);
    ck_assert(all_fill(p.dst, p.dcap));
    /* the holder's own check */
    ck_assert_status_ok(mc_te_mem_reg(B, other, 8192, "", MC_TE_MEM_REMOTE_ACCESS));
    ck_assert_status_ok(A->tp_ops->peer_open(A->tp, "127.0.0.1", B->port, &peer));
    one    = (struct iovec){p.dst, 2 * ROW};
    bad[0] = rg[0];
    bad[1] = (mc_te_range_t){REM(&p, p.cap - ROW / 2), ROW}; /* past the region's end */
    ck_assert_status_eq(A->tp_ops->read_gather(A->tp, peer, bad, 2, 2 * ROW, 0, 0, &one, 1),
                        MC_INVALID_READ);
    bad[1] = (mc_te_range_t){(uint64_t)(uintptr_t)other, ROW}; /* in another region */
    ck_assert_status_eq(A->tp_ops->read_gather(A->tp, peer, bad, 2, 2 * ROW, 0, 0, &one, 1),
                        MC_INVALID_READ);
    bad[1] = (mc_te_range_t){UINT64_MAX - 100, ROW}; /* wraps */
    ck_assert_status_eq(A->tp_ops->read_gather(A->tp, peer, bad, 2, 2 * ROW, 0, 0, &one, 1),
                        MC_INVALID_READ);
    ck_assert_msg(all_fill(p.dst, p.dcap), "a range the holder refused was answered with bytes");
    ck_assert_status_ok(A->tp_ops->read_gather(A->tp, peer, rg, 2, 2 * ROW, GEN_G, 0, &one, 1));
    ck_assert(memcmp(p.dst, stream, 2 * ROW) == 0);
    A->tp_ops->peer_close(A->tp, peer);
    ck_assert_status_ok(mc_te_mem_dereg(B, other));
    pair_close(&p);
    free(stream);
    free(other);
}
END_TEST

/*
 * The holder's region goes away while a job's gathered reads run
 * (unregistered from another thread, 2 ms in, eight times): each READV
 * either lands exactly its interleaved rows or fails with a refusal or a
 * transfer failure, and the job ends.  The first round unregisters before
 * the job: every read refused, no byte written.
 */
START_TEST(test_gather_job_region_gone_midway)
{
    enum { NG = 8, ROWS = 256, ROW = 2048 };
    size_t cap = 8u << 20, part = 2 * ROWS * ROW;
    uint8_t *src = malloc(cap), *dst = malloc(NG * part), *stream = malloc(NG * part);
    mc_te_range_t *rg = malloc(NG * 2 * ROWS * sizeof(*rg));
    int failed_first = 0;

    te_fill(src, cap, 35);
    ck_assert_status_ok(mc_te_mem_reg(A, dst, NG * part, "", 0));
    for (int round = 0; round < 8; round++) {
        mc_te_scatter_t sc[NG];
        struct iovec one[NG];
        mc_status_t st[NG];
        pair_t p = {src, dst, cap, NG * part, 0};

        memset(dst, FILL, NG * part);
        ck_assert_status_ok(mc_te_mem_reg_gen(B, src, cap, "", MC_TE_MEM_REMOTE_ACCESS, -1,
                                              GEN_G));
        p.seg = te_open(A, B);
        for (int k = 0; k < NG; k++) {
            /* object pair k: X at k MiB, Y 512 KiB after it */
            uint64_t t = 0;
            for (size_t r = 0; r < ROWS; r++) {
                rg[k * 2 * ROWS + 2 * r] = (mc_te_range_t){REM(&p, (size_t)k * (1u << 20) + r * ROW),
                                                           ROW};
                rg[k * 2 * ROWS + 2 * r + 1] = (mc_te_range_t){
                    REM(&p, (size_t)k * (1u << 20) + (512u << 10) + r * ROW), ROW};
                memcpy(stream + k * part + t, src + k * (1u << 20) + r * ROW, ROW);
                memcpy(stream + k * part + t + ROW, src + k * (1u << 20) + (512u << 10) + r * ROW,
                       ROW);
                t += 2 * ROW;
            }
            one[k] = (struct iovec){dst + k * part, part};
            sc[k]  = (mc_te_scatter_t){p.seg, 0, GEN_G, &one[k], 1, &rg[k * 2 * ROWS], 2 * ROWS, NULL, 0};
        }
        job_race(sc, NG, src, round, st);
        for (int k = 0; k < NG; k++) {
            if (st[k] == MC_OK) {
                ck_assert_msg(memcmp(dst + k * part, stream + k * part, part) == 0,
                              "READV %d reported success with other bytes (round %d)", k,
                              round);
            } else {
                ck_assert_msg((st[k] == MC_INVALID_READ) || (st[k] == MC_TRANSFER_FAIL),
                              "read %d: %s", k, mc_status_name(st[k]));
                if (round == 0) {
                    ck_assert(all_fill(dst + k * part, part));
                    failed_first++;
                }
            }
        }
    }
    ck_assert_int_eq(failed_first, NG);
    ck_assert_status_ok(mc_te_mem_dereg(A, dst));
    free(rg);
    free(stream);
    free(src);
    free(dst);
}
END_TEST

/* An engine on 127.0.0.1 made with environment variable @p var set to 0. */
static mc_te_h te_new_with_off(const char *var)
{
    mc_te_h te;

    ck_assert_int_eq(setenv(var, "0", 1), 0);
    te = te_new("127.0.0.1", NULL);
    unsetenv(var);
    return te;
}

/* A raw connection to @p port. */
static int raw_connect(uint16_t port)
{
    struct sockaddr_in sa;
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_port        = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

/* Send a request header (@p opcode, @p n, @p len, @p gen) and @p bytes of
 * its list. */
static void raw_request(int fd, uint8_t opcode, uint64_t n, uint64_t len, uint64_t gen,
                        const uint8_t *list, size_t bytes)
{
    uint8_t hdr[MC_TE_REQ_HDR_SIZE];

    mc_te_req_encode_gen(hdr, opcode, n, len, gen);
    ck_assert_int_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
    if (bytes > 0)
        ck_assert_int_eq(send(fd, list, bytes, MSG_NOSIGNAL), (ssize_t)bytes);
}

/* Send a READV header (@p n, @p len, @p gen) and @p nl list entries. */
static void raw_readv(int fd, uint64_t n, uint64_t len, uint64_t gen, const mc_te_range_t *rg,
                      size_t nl)
{
    uint8_t list[8 * MC_TE_READV_ENTRY_SIZE];

    ck_assert_uint_le(nl, 8);
    mc_te_readv_encode(list, rg, nl);
    raw_request(fd, MC_TE_OPC_READV, n, len, gen, list, nl * MC_TE_READV_ENTRY_SIZE);
}

/* The holder closes @p fd without answering (within the receive timeout). */
static void raw_expect_closed(int fd, const char *what)
{
    uint8_t b[MC_TE_RESP_HDR_SIZE];
    ssize_t n = recv(fd, b, sizeof(b), MSG_WAITALL);
    ck_assert_msg((n == 0) || ((n < 0) && (errno == ECONNRESET)),
                  "%s: the holder answered or kept the connection (%zd)", what, n);
    close(fd);
}

/* The answer on @p fd: its status, the payload (if any) into @p buf. */
static int32_t raw_answer(int fd, void *buf, uint64_t want)
{
    uint8_t b[MC_TE_RESP_HDR_SIZE];
    mc_te_resp_hdr_t r;

    ck_assert_int_eq(recv(fd, b, sizeof(b), MSG_WAITALL), (ssize_t)sizeof(b));
    ck_assert_int_eq(mc_te_resp_decode(b, &r), 0);
    if (r.status == 0) {
        ck_assert_uint_eq(r.length, want);
        ck_assert_int_eq(recv(fd, buf, (size_t)want, MSG_WAITALL), (ssize_t)want);
    } else {
        ck_assert_uint_eq(r.length, 0);
    }
    return r.status;
}

/*
 * Hostile READV frames at the holder's data port (docs/transfer.md §3.3):
 * a header out of bounds (no ranges, more than MC_TE_READV_MAX_RANGES, a
 * length of 0 or above MC_TE_READV_MAX_LEN) and a list that is malformed
 * (an empty range, lengths not adding up to the header's) close the
 * connection unanswered; ranges outside the region, in another region,
 * wrapping, or of another generation are answered MC_INVALID_READ with no
 * payload and the connection serves the next READV.
 */
START_TEST(test_readv_hostile_frames)
{
    uint8_t buf[4096], *other = malloc(4096);
    mc_te_range_t rg[3];
    pair_t p;
    int fd;

    pair_open(&p, 64u << 10, 4096, 33, GEN_G);
    ck_assert_status_ok(mc_te_mem_reg(B, other, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    rg[0] = (mc_te_range_t){REM(&p, 100), 100};
    rg[1] = (mc_te_range_t){REM(&p, 5000), 200};
    struct {
        uint64_t n, len;
        size_t nl;
        const char *what;
    } closing[] = {
        {0, 100, 0, "no ranges"},
        {MC_TE_READV_MAX_RANGES + 1, 100, 0, "too many ranges"},
        {1, 0, 0, "a zero length"},
        {1, MC_TE_READV_MAX_LEN + 1ull, 0, "too long"},
        {2, 299, 2, "lengths not adding up (short)"},
        {2, 301, 2, "lengths not adding up (long)"},
    };
    for (size_t k = 0; k < sizeof(closing) / sizeof(closing[0]); k++) {
        fd = raw_connect(B->port);
        raw_readv(fd, closing[k].n, closing[k].len, 0, rg, closing[k].nl);
        raw_expect_closed(fd, closing[k].what);
    }
    fd = raw_connect(B->port);
    rg[2] = (mc_te_range_t){REM(&p, 0), 0}; /* an empty range */
    raw_readv(fd, 3, 300, 0, rg, 3);
    raw_expect_closed(fd, "an empty range");
    /* refused, answered, and the connection goes on */
    fd    = raw_connect(B->port);
    rg[2] = (mc_te_range_t){REM(&p, p.cap - 10), 20}; /* past the end */
    raw_readv(fd, 3, 320, 0, rg, 3);
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    rg[2] = (mc_te_range_t){(uint64_t)(uintptr_t)other, 20}; /* another region */
    raw_readv(fd, 3, 320, 0, rg, 3);
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    rg[2] = (mc_te_range_t){UINT64_MAX - 5, 20}; /* wraps */
    raw_readv(fd, 3, 320, 0, rg, 3);
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    raw_readv(fd, 2, 300, GEN_H, rg, 2); /* another generation */
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    raw_readv(fd, 2, 300, GEN_G, rg, 2);
    ck_assert_int_eq(raw_answer(fd, buf, 300), 0);
    ck_assert(memcmp(buf, p.src + 100, 100) == 0);
    ck_assert(memcmp(buf + 100, p.src + 5000, 200) == 0);
    close(fd);
    ck_assert_status_ok(mc_te_mem_dereg(B, other));
    pair_close(&p);
    free(other);
}
END_TEST

/*
 * A holder with MC_TE_READV=0 behaves as an engine without the opcode: its
 * descriptor does not offer it, so a reader's gathered reads go as plain
 * requests (and land the same bytes), and a READV sent to it anyway
 * closes the connection, as any unknown opcode does.
 */
START_TEST(test_gather_holder_without_readv)
{
    enum { ROWS = 300, RX = 1024, RY = 2048 };
    mc_te_range_t *rg = malloc(2 * ROWS * sizeof(*rg));
    uint8_t *stream   = malloc(ROWS * (RX + RY));
    struct iovec runs[2000];
    mc_te_h C;
    mc_te_h saved = B;
    uint64_t total;
    size_t n;
    pair_t p;
    int fd;

    C = te_new_with_off("MC_TE_READV");
    B = C; /* the pair's holder */
    pair_open(&p, 2u << 20, 2u << 20, 34, GEN_G);
    ck_assert_int_eq(mc_te_read_scatter_native(A, p.seg), 1);
    ck_assert_int_eq(mc_te_read_gather_native(A, p.seg), 0);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    n     = runs_for(p.dst, total, runs, 2000);
    ck_assert_status_ok(mc_te_read_gather_gen(A, p.seg, GEN_G, rg, 2 * ROWS, runs, n));
    check_scattered(p.dst, p.dcap, runs, n, stream);
    memset(p.dst, FILL, p.dcap);
    ck_assert_status_eq(mc_te_read_gather_gen(A, p.seg, GEN_H, rg, 2 * ROWS, runs, n),
                        MC_INVALID_READ);
    fd = raw_connect(C->port);
    raw_readv(fd, 2, RX + RY, 0, rg, 2);
    raw_expect_closed(fd, "READV to a holder without it");
    pair_close(&p);
    B = saved;
    mc_te_destroy(C);
    free(rg);
    free(stream);
}
END_TEST

/*
 * A holder that stops offering READV after the reader took its descriptor
 * (it came back as a release without the opcode, under the same name):
 * the READV sent on the old descriptor finds the connection closed, the
 * reader asks for the descriptor again and reads the ranges one by one --
 * the bytes land, no error reaches the caller.
 */
START_TEST(test_gather_holder_drops_readv)
{
    enum { ROWS = 200, RX = 1024, RY = 512 };
    mc_te_range_t *rg = malloc(2 * ROWS * sizeof(*rg));
    uint8_t *stream   = malloc(ROWS * (RX + RY));
    struct iovec one;
    uint64_t total, ops0;
    pair_t p;

    pair_open(&p, 2u << 20, 2u << 20, 35, GEN_G);
    ck_assert_int_eq(mc_te_read_gather_native(A, p.seg), 1);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    one   = (struct iovec){p.dst, (size_t)total};
    B->readv_enabled = 0; /* what a holder without the opcode serves and describes */
    ops0             = __atomic_load_n(&A->readv_ops, __ATOMIC_RELAXED);
    ck_assert_status_ok(mc_te_read_gather_gen(A, p.seg, GEN_G, rg, 2 * ROWS, &one, 1));
    check_scattered(p.dst, p.dcap, &one, 1, stream);
    ck_assert_uint_eq(__atomic_load_n(&A->readv_ops, __ATOMIC_RELAXED), ops0 + 1);
    ck_assert_int_eq(mc_te_read_gather_native(A, p.seg), 0);
    B->readv_enabled = 1;
    pair_close(&p);
    free(rg);
    free(stream);
}
END_TEST

/* Send a READV_STRIDED header (@p n, @p len, @p gen) and @p nl entries. */
static void raw_readvs(int fd, uint64_t n, uint64_t len, uint64_t gen, const mc_te_strided_t *e,
                       size_t nl)
{
    uint8_t list[8 * MC_TE_READVS_ENTRY_SIZE];

    ck_assert_uint_le(nl, 8);
    mc_te_readvs_encode(list, e, nl);
    raw_request(fd, MC_TE_OPC_READV_STRIDED, n, len, gen, list, nl * MC_TE_READVS_ENTRY_SIZE);
}

/*
 * Hostile READV_STRIDED frames at the holder's data port (docs/transfer.md
 * §3.3): a header out of bounds, and entries that are malformed (a row of
 * 0 bytes, no rows, stride below the row, a last row past the address
 * space, groups that do not hold, rows not adding up to the header's
 * length, more than MC_TE_READVS_MAX_ROWS rows) close the connection
 * unanswered; an entry whose last row passes the region's end, one in
 * another region, or a request of another generation is answered
 * MC_INVALID_READ with no payload, and the connection then serves a
 * group of two strided entries: their rows interleaved, exactly.
 */
START_TEST(test_readvs_hostile_frames)
{
    enum { ROWS = 40 };
    uint8_t *buf = malloc(64u << 10), *other = malloc(4096), *want = malloc(64u << 10);
    mc_te_strided_t e[3];
    pair_t p;
    int fd;

    pair_open(&p, 256u << 10, 4096, 36, GEN_G);
    ck_assert_status_ok(mc_te_mem_reg(B, other, 4096, "", MC_TE_MEM_REMOTE_ACCESS));
    /* X: 100-byte rows every 300 bytes; Y: 60-byte rows every 64 bytes */
    e[0] = (mc_te_strided_t){REM(&p, 1000), 300, 100, ROWS, 2};
    e[1] = (mc_te_strided_t){REM(&p, 100000), 64, 60, ROWS, 0};
    for (size_t r = 0; r < ROWS; r++) {
        memcpy(want + r * 160, p.src + 1000 + r * 300, 100);
        memcpy(want + r * 160 + 100, p.src + 100000 + r * 64, 60);
    }
    struct {
        uint64_t n, len;
        mc_te_strided_t e0, e1;
        const char *what;
    } closing[] = {
        {0, 160 * ROWS, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, "no entries"},
        {MC_TE_READVS_MAX_ENTRIES + 1, 160 * ROWS, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0},
         "too many entries"},
        {2, 0, e[0], e[1], "a zero length"},
        {2, MC_TE_READV_MAX_LEN + 1ull, e[0], e[1], "too long"},
        {2, 160 * ROWS - 1, e[0], e[1], "rows not adding up (short)"},
        {2, 160 * ROWS + 1, e[0], e[1], "rows not adding up (long)"},
        {2, 160 * ROWS, e[0], {e[1].addr, 64, 60, ROWS - 1, 0}, "a count other than its group's"},
        {2, 100 * ROWS, e[0], {e[1].addr, 64, 0, ROWS, 0}, "a row of 0 bytes"},
        {2, 100 * ROWS, e[0], {e[1].addr, 64, 60, 0, 0}, "no rows"},
        {2, 160 * ROWS, e[0], {e[1].addr, 59, 60, ROWS, 0}, "stride below the row"},
        {2, 160 * ROWS, {e[0].addr, 300, 100, ROWS, 0}, e[1], "no group started"},
        {2, 160 * ROWS, {e[0].addr, 300, 100, ROWS, 3}, e[1], "a group past the list"},
        {2, 160 * ROWS, e[0], {e[1].addr, 64, 60, ROWS, 1}, "a group inside a group"},
        {2, 160 * ROWS, e[0], {UINT64_MAX - 1000, 64, 60, ROWS, 0}, "past the address space"},
        {2, 100 * ROWS + 2 * (uint64_t)(MC_TE_READVS_MAX_ROWS), {e[0].addr, 300, 100, ROWS, 1},
         {e[1].addr, 2, 2, MC_TE_READVS_MAX_ROWS, 1}, "too many rows"},
    };
    for (size_t k = 0; k < sizeof(closing) / sizeof(closing[0]); k++) {
        mc_te_strided_t two[2] = {closing[k].e0, closing[k].e1};
        fd = raw_connect(B->port);
        raw_readvs(fd, closing[k].n, closing[k].len, 0, two,
                   ((closing[k].n >= 1) && (closing[k].n <= 2)) ? 2 : 0);
        raw_expect_closed(fd, closing[k].what);
    }
    /* refused, answered, and the connection goes on */
    fd   = raw_connect(B->port);
    e[2] = (mc_te_strided_t){REM(&p, p.cap - 3 * 1024 - 50), 1024, 100, 4, 1}; /* past the end */
    raw_readvs(fd, 3, 160 * ROWS + 400, 0, e, 3);
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    e[2] = (mc_te_strided_t){(uint64_t)(uintptr_t)other, 1024, 100, 4, 1}; /* another region */
    raw_readvs(fd, 3, 160 * ROWS + 400, 0, e, 3);
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    raw_readvs(fd, 2, 160 * ROWS, GEN_H, e, 2); /* another generation */
    ck_assert_int_eq(raw_answer(fd, buf, 0), MC_INVALID_READ);
    raw_readvs(fd, 2, 160 * ROWS, GEN_G, e, 2);
    ck_assert_int_eq(raw_answer(fd, buf, 160 * ROWS), 0);
    ck_assert_msg(memcmp(buf, want, 160 * ROWS) == 0, "the strided rows interleaved");
    /* the last row ends exactly at the region's end: served */
    e[2] = (mc_te_strided_t){REM(&p, p.cap - 3 * 1024 - 100), 1024, 100, 4, 1};
    raw_readvs(fd, 3, 160 * ROWS + 400, 0, e, 3);
    ck_assert_int_eq(raw_answer(fd, buf, 160 * ROWS + 400), 0);
    ck_assert(memcmp(buf, want, 160 * ROWS) == 0);
    for (size_t r = 0; r < 4; r++)
        ck_assert(memcmp(buf + 160 * ROWS + r * 100, p.src + p.cap - 3 * 1024 - 100 + r * 1024,
                         100) == 0);
    close(fd);
    ck_assert_status_ok(mc_te_mem_dereg(B, other));
    pair_close(&p);
    free(other);
    free(buf);
    free(want);
}
END_TEST

/*
 * Gathered reads as READV_STRIDED where the rows are regular, READV
 * elsewhere: interleaved rows of two objects (one group of two) and the
 * half rows of one object (stride twice the row), each into a contiguous
 * destination and into odd runs; both count as strided.  A reader with
 * MC_TE_READV_STRIDED=0 sends READVs for the same bytes; a holder with it
 * leaves "tcp_readv_strided" out of its descriptor (so readers send it
 * READVs) and closes a connection that sends one anyway; a holder that
 * stops serving it after the reader took its descriptor is read again as
 * a READV, the bytes landing and no error reaching the caller.
 */
/* One gathered read by @p te of rg[0..n) (under GEN_G) into the start of
 * @p p's destination, checked against @p stream; the READVs it counted
 * (strided or not) in *v_p, the READV_STRIDEDs among them in *s_p. */
static void gather_counted(mc_te_h te, pair_t *p, const mc_te_range_t *rg, size_t n,
                           const uint8_t *stream, uint64_t total, uint64_t *v_p, uint64_t *s_p)
{
    struct iovec one = {p->dst, (size_t)total};
    uint64_t v0      = __atomic_load_n(&te->readv_ops, __ATOMIC_RELAXED);
    uint64_t s0      = __atomic_load_n(&te->readvs_ops, __ATOMIC_RELAXED);

    memset(p->dst, FILL, p->dcap);
    ck_assert_status_ok(mc_te_read_gather_gen(te, p->seg, GEN_G, rg, n, &one, 1));
    check_scattered(p->dst, p->dcap, &one, 1, stream);
    *v_p = __atomic_load_n(&te->readv_ops, __ATOMIC_RELAXED) - v0;
    *s_p = __atomic_load_n(&te->readvs_ops, __ATOMIC_RELAXED) - s0;
}

START_TEST(test_gather_strided)
{
    enum { ROWS = 500, RX = 1024, RY = 512 };
    mc_te_range_t *rg  = malloc(2 * ROWS * sizeof(*rg));
    uint8_t *stream    = malloc(ROWS * (RX + RY));
    struct iovec *runs = malloc(4000 * sizeof(*runs));
    uint64_t total, nv, ns;
    mc_te_h C, saved = B, R, a = A;
    size_t n;
    pair_t p;
    int fd;

    pair_open(&p, 2u << 20, 2u << 20, 37, GEN_G);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    gather_counted(A, &p, rg, 2 * ROWS, stream, total, &nv, &ns);
    ck_assert_uint_eq(ns, 1);
    memset(p.dst, FILL, p.dcap);
    n = runs_for(p.dst, total, runs, 4000);
    ck_assert_status_ok(mc_te_read_gather_gen(A, p.seg, 0, rg, 2 * ROWS, runs, n));
    check_scattered(p.dst, p.dcap, runs, n, stream);
    /* half rows of one object: rows of RY every 2 * RY */
    for (size_t r = 0; r < ROWS; r++) {
        rg[r] = (mc_te_range_t){REM(&p, 4096 + r * 2 * RY), RY};
        memcpy(stream + r * RY, p.src + 4096 + r * 2 * RY, RY);
    }
    gather_counted(A, &p, rg, ROWS, stream, ROWS * RY, &nv, &ns);
    ck_assert_uint_eq(ns, 1);
    pair_close(&p);

    /* a reader with MC_TE_READV_STRIDED=0: READVs, the same bytes */
    R = te_new_with_off("MC_TE_READV_STRIDED");
    A = R;
    pair_open(&p, 2u << 20, 2u << 20, 38, GEN_G);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    gather_counted(R, &p, rg, 2 * ROWS, stream, total, &nv, &ns);
    ck_assert_uint_eq(nv, 1);
    ck_assert_uint_eq(ns, 0);
    pair_close(&p);
    A = a;
    mc_te_destroy(R);

    /* a holder with MC_TE_READV_STRIDED=0 */
    C = te_new_with_off("MC_TE_READV_STRIDED");
    B = C;
    pair_open(&p, 2u << 20, 2u << 20, 39, GEN_G);
    ck_assert_int_eq(mc_te_read_gather_native(A, p.seg), 1);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    gather_counted(A, &p, rg, 2 * ROWS, stream, total, &nv, &ns);
    ck_assert_uint_eq(nv, 1);
    ck_assert_uint_eq(ns, 0);
    {
        mc_te_strided_t e = {rg[0].addr, RX, RX, 2, 1};
        fd                = raw_connect(C->port);
        raw_readvs(fd, 1, 2 * RX, 0, &e, 1);
        raw_expect_closed(fd, "READV_STRIDED to a holder without it");
    }
    pair_close(&p);
    B = saved;
    mc_te_destroy(C);

    /* a holder that stops serving it after the reader took its descriptor */
    pair_open(&p, 2u << 20, 2u << 20, 40, GEN_G);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    gather_counted(A, &p, rg, 2 * ROWS, stream, total, &nv, &ns);
    ck_assert_uint_eq(ns, 1);
    B->readvs_enabled = 0; /* the descriptor the reader holds still offers it */
    gather_counted(A, &p, rg, 2 * ROWS, stream, total, &nv, &ns);
    ck_assert_uint_eq(nv, 1); /* one read: sent strided, closed, sent again as a READV */
    ck_assert_uint_eq(ns, 1);
    gather_counted(A, &p, rg, 2 * ROWS, stream, total, &nv, &ns);
    ck_assert_uint_eq(nv, 1); /* and from then on as READVs */
    ck_assert_uint_eq(ns, 0);
    B->readvs_enabled = 1;
    pair_close(&p);
    free(rg);
    free(stream);
    free(runs);
}
END_TEST

/*
 * Strided gathered reads named by entries (mc_te_read_gather_strided_gen,
 * what mc_store_read_blocks sends): a group of two entries (two objects'
 * rows interleaved) lands in one run exactly as the rows' READV would,
 * sent as one READV_STRIDED; naming another generation it is refused with
 * nothing written; malformed entries (a group past the list, a stride
 * shorter than a row, counts that differ in a group, runs that do not add
 * up) are refused before anything is sent, and so is an entry whose last
 * row passes the region.  A holder that stops serving READV_STRIDED after
 * the reader took its descriptor: the rows go again as requests of their
 * own (1200 rows: past a READV) and then, with fewer rows, as a READV --
 * the same bytes.
 */
START_TEST(test_gather_strided_entries)
{
    enum { ROWS = 600, FEW = 400, RX = 1024, RY = 512 };
    mc_te_range_t *rg = malloc(2 * ROWS * sizeof(*rg));
    uint8_t *stream   = malloc(ROWS * (RX + RY));
    mc_te_strided_t e[2], bad[2];
    struct iovec one, shorter;
    uint64_t total, ns0;
    pair_t p;

    pair_open(&p, 2u << 20, 2u << 20, 41, GEN_G);
    total = interleave(&p, ROWS, RX, 1u << 20, RY, rg, stream);
    e[0]  = (mc_te_strided_t){rg[0].addr, RX, RX, ROWS, 2};
    e[1]  = (mc_te_strided_t){rg[1].addr, RY, RY, ROWS, 0};
    one   = (struct iovec){p.dst, (size_t)total};
    ck_assert_int_eq(mc_te_read_gather_strided_native(A, p.seg), 1);
    ns0 = A->readvs_ops;
    ck_assert_status_ok(mc_te_read_gather_strided_gen(A, p.seg, GEN_G, e, 2, &one, 1));
    ck_assert_msg(memcmp(p.dst, stream, total) == 0, "the strided gathered read's bytes");
    ck_assert_uint_eq(A->readvs_ops - ns0, 1);
    /* another generation */
    memset(p.dst, FILL, p.dcap);
    ck_assert_status_eq(mc_te_read_gather_strided_gen(A, p.seg, GEN_H, e, 2, &one, 1),
                        MC_INVALID_READ);
    ck_assert_msg(all_fill(p.dst, p.dcap), "a refused strided read wrote into its runs");
    /* malformed entries and runs */
    memcpy(bad, e, sizeof(bad));
    bad[0].group = 3;
    ck_assert_status_eq(mc_te_read_gather_strided_gen(A, p.seg, 0, bad, 2, &one, 1),
                        MC_INVALID_PARAMS);
    memcpy(bad, e, sizeof(bad));
    bad[0].stride = RX - 1;
    ck_assert_status_eq(mc_te_read_gather_strided_gen(A, p.seg, 0, bad, 2, &one, 1),
                        MC_INVALID_PARAMS);
    memcpy(bad, e, sizeof(bad));
    bad[1].count = ROWS - 1;
    ck_assert_status_eq(mc_te_read_gather_strided_gen(A, p.seg, 0, bad, 2, &one, 1),
                        MC_INVALID_PARAMS);
    shorter = (struct iovec){p.dst, (size_t)total - 1};
    ck_assert_status_eq(mc_te_read_gather_strided_gen(A, p.seg, 0, e, 2, &shorter, 1),
                        MC_INVALID_PARAMS);
    bad[0] = (mc_te_strided_t){REM(&p, (2u << 20) - RX), RX, RX, 2, 1};
    shorter = (struct iovec){p.dst, 2 * RX};
    ck_assert_int_ne(mc_te_read_gather_strided_gen(A, p.seg, 0, bad, 1, &shorter, 1), MC_OK);
    ck_assert_msg(all_fill(p.dst, p.dcap), "a refused strided read wrote into its runs");
    /* the holder stops serving READV_STRIDED */
    B->readvs_enabled = 0; /* the descriptor the reader holds still offers it */
    ck_assert_status_ok(mc_te_read_gather_strided_gen(A, p.seg, GEN_G, e, 2, &one, 1));
    ck_assert_msg(memcmp(p.dst, stream, total) == 0, "the rows as requests");
    ck_assert_int_eq(mc_te_read_gather_strided_native(A, p.seg), 0);
    memset(p.dst, FILL, p.dcap);
    e[0].count = FEW;
    e[1].count = FEW;
    shorter    = (struct iovec){p.dst, (size_t)FEW * (RX + RY)};
    ck_assert_status_ok(mc_te_read_gather_strided_gen(A, p.seg, GEN_G, e, 2, &shorter, 1));
    ck_assert_msg(memcmp(p.dst, stream, (size_t)FEW * (RX + RY)) == 0, "the rows as a READV");
    ck_assert_msg(all_fill(p.dst + FEW * (RX + RY), p.dcap - FEW * (RX + RY)),
                  "past the rows read");
    B->readvs_enabled = 1;
    pair_close(&p);
    free(rg);
    free(stream);
}
END_TEST

/* ---- the store's ranged read over TCP ---------------------------------- */

static void store_params(mc_store_params_t *p, const char *master_addr, uint64_t seg)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                    MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_LOCAL_BUFFER_SIZE |
                    MC_STORE_PARAM_MASTER_SERVER_ADDR;
    p->local_hostname      = "127.0.0.1";
    p->metadata_server     = "P2PHANDSHAKE";
    p->global_segment_size = seg;
    p->local_buffer_size   = 1u << 20;
    p->master_server_addr  = master_addr;
}

/*
 * The loader's rows: a column block stored as one object (rows back to
 * back) read into every other row-sized slot of a registered buffer by a
 * client whose only way to the holder is TCP, so each stretch of adjoining
 * rows is one scattered read.  Every row lands in place, the slots between
 * stay untouched, and rows that are not back to back (a gap, one read out
 * of order), a zero-length row and a row past the object's end get their
 * own results as before.
 */
START_TEST(test_store_rows_over_tcp)
{
    enum { ROWS = 700, ROW = 1000 };
    mc_test_master_t m;
    mc_store_h holder = NULL, reader = NULL;
    mc_store_params_t p;
    mc_store_range_t *r = calloc(ROWS, sizeof(*r));
    size_t size = (size_t)ROWS * ROW, cap = 2 * size;
    uint8_t *val = malloc(size), *buf = malloc(cap);

    ck_assert_int_eq(setenv("MC_TE_SHM", "0", 1), 0);
    mc_test_master_start(&m, NULL);
    ck_assert_status_ok(mc_store_create(&holder));
    store_params(&p, m.addr, 16u << 20);
    ck_assert_status_ok(mc_store_setup(holder, &p));
    ck_assert_status_ok(mc_store_create(&reader));
    store_params(&p, m.addr, 0); /* no segment: the object lives in the holder's */
    ck_assert_status_ok(mc_store_setup(reader, &p));
    te_fill(val, size, 12);
    ck_assert_status_ok(mc_store_put(holder, "rows", val, size, NULL));
    ck_assert_status_ok(mc_store_register_buffer(reader, buf, cap));
    for (int round = 0; round < 2; round++) {
        memset(buf, FILL, cap);
        for (size_t i = 0; i < ROWS; i++)
            r[i] = (mc_store_range_t){"rows", buf, 2 * i * ROW, i * ROW, ROW, 0};
        r[100].src_offset = 150 * ROW;  /* out of order: a stretch of its own */
        r[200].length     = 0;          /* no piece at all */
        r[300].src_offset = size - 10;  /* past the end: refused */
        r[ROWS - 1].length = ROW - 7;   /* ends short of the object's end */
        ck_assert_status_eq(mc_store_read_ranges(reader, r, ROWS), MC_INVALID_PARAMS);
        for (size_t i = 0; i < ROWS; i++) {
            const uint8_t *slot = buf + 2 * i * ROW;
            if (i == 300) {
                ck_assert_int_eq(r[i].result, MC_INVALID_PARAMS);
                ck_assert(all_fill(slot, 2 * ROW));
                continue;
            }
            ck_assert_int_eq(r[i].result, (int64_t)r[i].length);
            ck_assert_msg(memcmp(slot, val + r[i].src_offset, r[i].length) == 0,
                          "row %zu is wrong (round %d)", i, round);
            ck_assert_msg(all_fill(slot + r[i].length, 2 * ROW - r[i].length),
                          "the slot after row %zu was written", i);
        }
    }
    ck_assert_status_ok(mc_store_unregister_buffer(reader, buf));
    mc_store_destroy(reader);
    mc_store_destroy(holder);
    mc_test_master_stop(&m);
    unsetenv("MC_TE_SHM");
    free(r);
    free(val);
    free(buf);
}
END_TEST

/*
 * The load's TP=4 -> TP=2 rows: two objects (two column blocks, rows of
 * ROW bytes) fill the two halves of every destination row, so the store
 * merges their groups in destination order into gathered reads (READV):
 * every destination row holds the first object's row then the second's,
 * and the gap after each row stays untouched.  The same with
 * MC_TE_READV=0 in both clients (the holder offers no READV: per-object
 * scattered reads), and with one row of the second object out of order
 * (that group is read as scattered reads, the other still gathered).
 */
START_TEST(test_store_interleaved_rows_over_tcp)
{
    enum { ROWS = 600, ROW = 1024, SLOT = 2 * ROW + 64 };
    size_t size = (size_t)ROWS * ROW, cap = (size_t)ROWS * SLOT;
    mc_store_range_t *r = calloc(2 * ROWS, sizeof(*r));
    uint8_t *va = malloc(size), *vb = malloc(size), *buf = malloc(cap);
    mc_test_master_t m;
    mc_store_params_t p;

    ck_assert_int_eq(setenv("MC_TE_SHM", "0", 1), 0);
    mc_test_master_start(&m, NULL);
    te_fill(va, size, 41);
    te_fill(vb, size, 42);
    for (int variant = 0; variant < 3; variant++) {
        mc_store_h holder = NULL, reader = NULL;
        uint64_t readv0;
        ck_assert_int_eq(setenv("MC_TE_READV", (variant == 1) ? "0" : "1", 1), 0);
        ck_assert_status_ok(mc_store_create(&holder));
        store_params(&p, m.addr, 16u << 20);
        ck_assert_status_ok(mc_store_setup(holder, &p));
        ck_assert_status_ok(mc_store_create(&reader));
        store_params(&p, m.addr, 0);
        ck_assert_status_ok(mc_store_setup(reader, &p));
        ck_assert_status_ok(mc_store_put(holder, "cola", va, size, NULL));
        ck_assert_status_ok(mc_store_put(holder, "colb", vb, size, NULL));
        ck_assert_status_ok(mc_store_register_buffer(reader, buf, cap));
        memset(buf, FILL, cap);
        for (size_t i = 0; i < ROWS; i++) {
            r[i]        = (mc_store_range_t){"cola", buf, i * SLOT, i * ROW, ROW, 0};
            r[ROWS + i] = (mc_store_range_t){"colb", buf, i * SLOT + ROW, i * ROW, ROW, 0};
        }
        if (variant == 2) { /* two rows of colb swapped: not ascending */
            r[ROWS + 10].dst_offset = 11 * SLOT + ROW;
            r[ROWS + 11].dst_offset = 10 * SLOT + ROW;
            r[ROWS + 10].src_offset = 11 * ROW;
            r[ROWS + 11].src_offset = 10 * ROW;
        }
        readv0 = __atomic_load_n(&reader->te->readv_ops, __ATOMIC_RELAXED);
        ck_assert_status_ok(mc_store_read_ranges(reader, r, 2 * ROWS));
        readv0 = __atomic_load_n(&reader->te->readv_ops, __ATOMIC_RELAXED) - readv0;
        /* 1.2 MiB of rows: READVs of about a slice each, none without it */
        if (variant == 1)
            ck_assert_uint_eq(readv0, 0);
        else
            ck_assert_uint_ge(readv0, (variant == 0) ? 2 : 1);
        for (size_t i = 0; i < ROWS; i++) {
            const uint8_t *slot = buf + i * SLOT;
            ck_assert_int_eq(r[i].result, ROW);
            ck_assert_int_eq(r[ROWS + i].result, ROW);
            ck_assert_msg(memcmp(slot, va + i * ROW, ROW) == 0, "row %zu of cola (variant %d)",
                          i, variant);
            ck_assert_msg(memcmp(slot + ROW, vb + i * ROW, ROW) == 0,
                          "row %zu of colb (variant %d)", i, variant);
            ck_assert_msg(all_fill(slot + 2 * ROW, SLOT - 2 * ROW),
                          "the gap after row %zu was written (variant %d)", i, variant);
        }
        ck_assert_status_ok(mc_store_unregister_buffer(reader, buf));
        mc_store_destroy(reader);
        mc_store_destroy(holder);
    }
    mc_test_master_stop(&m);
    unsetenv("MC_TE_READV");
    unsetenv("MC_TE_SHM");
    free(r);
    free(va);
    free(vb);
    free(buf);
}
END_TEST

Suite *mc_test_scatter_suite(void)
{
    Suite *s  = suite_create("scatter");
    TCase *tc = tcase_create("two_engines");
    tcase_add_checked_fixture(tc, te_setup_two, te_teardown_two);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_scatter_odd_runs);
    tcase_add_test(tc, test_scatter_more_runs_than_iov_max);
    tcase_add_test(tc, test_scatter_generation_refused);
    tcase_add_test(tc, test_scatter_run_outside_registered_refused);
    tcase_add_test(tc, test_scatter_own_segment);
    tcase_add_test(tc, test_scatter_short_answer_fails);
    tcase_add_test(tc, test_scatter_job_cut_at_runs);
    tcase_add_test(tc, test_scatter_job_region_gone_midway);
    tcase_add_test(tc, test_gather_interleaved_rows);
    tcase_add_test(tc, test_gather_refused);
    tcase_add_test(tc, test_gather_job_region_gone_midway);
    tcase_add_test(tc, test_readv_hostile_frames);
    tcase_add_test(tc, test_gather_holder_without_readv);
    tcase_add_test(tc, test_gather_holder_drops_readv);
    tcase_add_test(tc, test_readvs_hostile_frames);
    tcase_add_test(tc, test_gather_strided);
    tcase_add_test(tc, test_gather_strided_entries);
    suite_add_tcase(s, tc);
    tc = tcase_create("store");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_store_rows_over_tcp);
    tcase_add_test(tc, test_store_interleaved_rows_over_tcp);
    suite_add_tcase(s, tc);
    return s;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tcp transport (docs/transfer.md, "TCP transport").
 *
 * Target side.  An acceptor thread takes connections on the data port and
 * gives each its own thread doing blocking I/O, up to cfg.max_conns at
 * once.  An idle connection thread waits in
 * a blocking MSG_PEEK, so it wakes once per burst of requests and answers
 * a run of READs with one writev (serve_read_run).  The data path is
 * zero-copy: a READ is sent straight out of the registered region (header
 * and bytes in one sendmsg), a WRITE's payload is received straight into
 * it.  Before any
 * byte moves, the whole range must lie inside one REMOTE_ACCESS region,
 * which stays pinned (engine.c reference) until the request is done.  A
 * refused READ is answered and the connection goes on; a refused WRITE is
 * answered and the connection is closed, because the payload that follows
 * must not be read anywhere.  A malformed header closes the connection.
 * A WRITE's header and payload come in one receive.  A new connection
 * whose first request header is not complete within
 * MC_TE_HANDSHAKE_TIMEOUT_MS is closed (serve_first_header), and so is an
 * idle connection after MC_TE_IDLE_TIMEOUT_SEC (serve_next: its peek
 * wakes at each receive timeout to check; the receive timeout also bounds
 * a frame once it has started).  At most MC_TE_MAX_CONNECTIONS_PER_PEER
 * are served from one address and MC_TE_MAX_CONNECTIONS in all; a new
 * connection over either bound takes the place of one that is not serving
 * a request, never-used ones first (accept_admit()), and is refused only
 * when all are busy, so idle or silent peers (all processes of a host
 * share its address) cannot lock readers out.
 *
 * Initiator side.  Each peer has cfg.lanes connections, opened lazily and
 * kept; a request takes a free lane (most recently used first, so a
 * single-threaded caller keeps reusing one warm connection), runs on it
 * with blocking I/O bounded by SO_RCVTIMEO/SO_SNDTIMEO, and gives it back.
 * A pooled connection the peer has closed in the meantime is detected when
 * the request fails before any byte of the answer arrived; the request is
 * then retried once on a fresh connection (READ and WRITE are idempotent).
 * After a failed connect the peer is considered down for a second so a
 * large batch against a dead host fails fast instead of paying the connect
 * timeout per request.  The slices of one long READ go out on several
 * lanes from the calling thread before any answer is read
 * (tcp_xfer_spread), and a READ's answer header and payload are taken in
 * one receive where they arrive together.
 *
 * Authentication (docs/security.md, docs/protocol.md §9.1).  With a
 * cluster secret (te->auth), a served connection first runs the
 * challenge-response, each step bounded by TCP_AUTH_TIMEOUT_MS, counted
 * as never used meanwhile so accept_admit() may close it to make room
 * (the handshake deadline starts when it has passed); a dialled
 * lane runs the client side before its first request.  Nothing of the
 * data protocol is read from or sent to a peer that has not passed.
 *
 * Destruction: shutdown() on the listening socket and on every served
 * connection wakes the threads blocked in accept/recv/send; all are
 * joined.  Finished connection threads are joined by the acceptor as it
 * goes, and the rest at uninstall.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "transfer/proto.h"
#include "transfer/tcp/tcp.h"

#define TCP_CONN_STACK       (256u * 1024u)
#define TCP_PEER_DOWN_MS     1000u
#define TCP_LISTEN_BACKLOG   1024
#define TCP_AUTH_TIMEOUT_MS  5000

typedef struct mc_tcp mc_tcp_t;

/* One served connection. */
typedef struct mc_tcp_conn {
    struct mc_tcp_conn *prev;
    struct mc_tcp_conn *next;
    mc_tcp_t *tp;
    int fd;
    pthread_t thread;
    struct sockaddr_storage peer; /* port zeroed: connections per address */
    uint64_t accepted_ms;         /* set before its thread starts */
    uint64_t idle_since_ms;       /* atomic: waiting for a request since; 0 while serving */
    int used;                     /* atomic: a complete, valid request header arrived */
    int evicted;                  /* under tp->mu: shut down to make room, not counted */
} mc_tcp_conn_t;

struct mc_tcp {
    mc_te_t *te;
    int listen_fd;
    pthread_t acceptor;
    int acceptor_started;
    int stopping;            /* atomic */
    pthread_mutex_t mu;
    pthread_cond_t cond;     /* a connection thread finished */
    mc_tcp_conn_t *active;   /* doubly linked */
    unsigned nactive;
    mc_tcp_conn_t *dead;     /* finished, to be joined (linked by next) */
    int io_timeout_s;
    int connect_timeout_ms;
    unsigned lanes;
    unsigned max_conns;
    unsigned max_conns_peer;
    int idle_timeout_s;
    unsigned handshake_ms;     /* the first request header must be complete by then */
    unsigned busy_poll_us;     /* mc_spin_readable window before waiting for an answer */
    unsigned serve_poll_us;    /* ... before a served connection waits for a request */
    pthread_rwlock_t hs_lock;  /* the RDMA handshake handler */
    mc_tcp_hs_func_t hs_fn;
    void *hs_arg;
};

/* Initiator-side state of one peer: a small pool of connections. */
typedef struct mc_tcp_peer {
    mc_tcp_t *tp;
    char host[256];
    uint16_t port;
    pthread_mutex_t mu;
    pthread_cond_t cond;     /* a lane was given back */
    unsigned nlanes;
    unsigned nfree;
    int *fds;                /* per lane, -1 when not connected */
    unsigned *free_stack;    /* indexes of free lanes, top = most recent */
    uint64_t down_since_ns;  /* marked down then (mc_now_ns), 0 when not: connects
                              * fail fast for TCP_PEER_DOWN_MS after it */
    char down_detail[400];
} mc_tcp_peer_t;

/* ---- socket helpers --------------------------------------------------------- */

/* Account for one receive that returned @p n: 1 to receive on (bytes
 * arrived, added to *got_p, or EINTR), 0 when the connection failed (errno
 * set; ECONNRESET for an orderly close). */
static int recv_went_on(ssize_t n, size_t *got_p)
{
    if (n > 0) {
        *got_p += (size_t)n;
        return 1;
    }
    if (n == 0)
        errno = ECONNRESET;
    return (n < 0) && (errno == EINTR);
}

/* Receive exactly len bytes.  *got_p counts what arrived, so a caller can
 * tell a connection that died before answering from one that died midway.
 * Returns 0, or -1 with errno (ECONNRESET for an orderly close, EAGAIN for
 * the receive timeout). */
static int recv_exact(int fd, void *buf, size_t len, size_t *got_p)
{
    uint8_t *p = buf;
    size_t got = 0;
    int rc     = 0;
    while (got < len) {
        if (!recv_went_on(recv(fd, p + got, len - got, MSG_WAITALL), &got)) {
            rc = -1;
            break;
        }
    }
    if (got_p != NULL)
        *got_p = got;
    return rc;
}

/*
 * Receive @p len bytes into runs[0..nruns) in order (their lengths add up
 * to @p len): recvmsg over up to IOV_MAX runs at a time, MSG_WAITALL so a
 * window is usually one system call.  Nothing is written outside the
 * runs.  Returns 0, or -1 with errno as recv_exact; *got_p counts what
 * arrived.
 */
static int recv_scatter(int fd, const struct iovec *runs, size_t nruns, size_t *got_p)
{
    struct iovec w[IOV_MAX];
    size_t i = 0, off = 0; /* the next byte goes to runs[i] + off */

    *got_p = 0;
    while (i < nruns) {
        struct msghdr mh;
        size_t nw = 0;
        ssize_t n;
        for (size_t j = i; (j < nruns) && (nw < IOV_MAX); j++, nw++) {
            size_t skip    = (j == i) ? off : 0;
            w[nw].iov_base = (uint8_t *)runs[j].iov_base + skip;
            w[nw].iov_len  = runs[j].iov_len - skip;
        }
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = w;
        mh.msg_iovlen = nw;
        n             = recvmsg(fd, &mh, MSG_WAITALL);
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        *got_p += (size_t)n;
        for (size_t left = (size_t)n; left > 0;) {
            size_t k = MC_MIN(left, runs[i].iov_len - off);
            left -= k;
            off += k;
            if (off == runs[i].iov_len) {
                i++;
                off = 0;
            }
        }
    }
    return 0;
}

/* recv_exact over two buffers with one system call per wake-up: used to
 * take a READ payload and the next answer header together. */
static int recv_exact2(int fd, void *a, size_t alen, void *b, size_t blen)
{
    struct iovec iov[2];
    size_t n = 0, got;

    if (alen > 0)
        iov[n++] = (struct iovec){a, alen};
    if (blen > 0)
        iov[n++] = (struct iovec){b, blen};
    return recv_scatter(fd, iov, n, &got);
}

/* Receive an answer header into hdr, letting payload bytes that arrive
 * with it land in payload[0, plen): a small READ then costs one receive.
 * Stops as soon as the header is complete; *got_p counts every byte
 * received (header and payload), also on failure.  Returns 0, or -1 with
 * errno as recv_exact. */
static int recv_head(int fd, uint8_t *hdr, void *payload, size_t plen, size_t *got_p,
                     unsigned spin_us)
{
    struct iovec iov[2];
    struct msghdr mh;
    size_t got = 0;
    int rc = 0, spun = 0;

    while (got < MC_TE_RESP_HDR_SIZE) {
        ssize_t n;
        iov[0].iov_base = hdr + got;
        iov[0].iov_len  = MC_TE_RESP_HDR_SIZE - got;
        iov[1].iov_base = payload;
        iov[1].iov_len  = plen;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = iov;
        mh.msg_iovlen = (plen > 0) ? 2 : 1;
        /* the busy-poll window's receive is the first one */
        n = spun++ ? MC_SPIN_NONE : mc_spin_recvmsg(fd, &mh, 0, spin_us);
        if (n == MC_SPIN_NONE)
            n = recvmsg(fd, &mh, 0);
        if (!recv_went_on(n, &got)) {
            rc = -1;
            break;
        }
    }
    *got_p = got;
    return rc;
}

/* ---- target side -------------------------------------------------------------- */

/* Read the next request header.  Idle connections wait in
 * serve_next's peek, so something has normally arrived already; a
 * receive timeout with nothing read still just loops (checking for
 * shutdown), and once the first byte arrived the header must complete
 * within the timeout.  Returns 0, or -1 when the connection is over. */
static int serve_read_header(mc_tcp_t *tp, int fd, uint8_t *hdr)
{
    size_t got = 0;
    while (got < MC_TE_REQ_HDR_SIZE) {
        ssize_t n = recv(fd, hdr + got, MC_TE_REQ_HDR_SIZE - got, 0);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0)
            return -1;
        if (errno == EINTR)
            continue;
        if (((errno == EAGAIN) || (errno == EWOULDBLOCK)) && (got == 0) &&
            !__atomic_load_n(&tp->stopping, __ATOMIC_ACQUIRE))
            continue;
        return -1;
    }
    return 0;
}

static int serve_send_resp(int fd, int32_t status, uint64_t length)
{
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    mc_te_resp_encode(resp, status, length);
    return mc_write_full(fd, resp, sizeof(resp));
}

/*
 * A file segment (transfer/file/file.h) is moved through a bounce buffer
 * in pieces of MC_TCP_FILE_CHUNK: the backend reads a piece, the socket
 * sends it (READ), or the socket fills a piece and the backend writes it
 * (WRITE).  The first piece of a READ is read before the answer header
 * goes out, so a failing store is answered with a status; a failure after
 * the header has promised the bytes can only close the connection (the
 * initiator sees a short answer and fails the request).
 */
#define MC_TCP_FILE_CHUNK (1u << 20)

static int serve_file_read(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h, mc_te_region_t *r,
                           int ticket)
{
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    size_t cap   = (size_t)MC_MIN(h->length, (uint64_t)MC_TCP_FILE_CHUNK);
    uint8_t *buf = malloc(cap);
    uint64_t done = 0;
    int rc = 0;

    if (buf == NULL) {
        mc_te_region_release_gen(tp->te, r, ticket);
        return serve_send_resp(fd, MC_INTERNAL_ERROR, 0);
    }
    while ((rc == 0) && (done < h->length)) {
        size_t k       = (size_t)MC_MIN(h->length - done, (uint64_t)cap);
        mc_status_t st = mc_te_region_file_io(r, 0, buf, h->addr + done, k);
        if (st != MC_OK) {
            rc = (done == 0) ? serve_send_resp(fd, st, 0) : -1;
            break;
        }
        if (done == 0) {
            struct iovec iov[2];
            mc_te_resp_encode(resp, MC_OK, h->length);
            iov[0].iov_base = resp;
            iov[0].iov_len  = sizeof(resp);
            iov[1].iov_base = buf;
            iov[1].iov_len  = k;
            rc              = mc_writev_full(fd, iov, 2);
        } else {
            rc = mc_write_full(fd, buf, k);
        }
        done += k;
    }
    free(buf);
    mc_te_region_release_gen(tp->te, r, ticket);
    return rc;
}

static int serve_file_write(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h, mc_te_region_t *r,
                            int ticket)
{
    size_t cap   = (size_t)MC_MIN(h->length, (uint64_t)MC_TCP_FILE_CHUNK);
    uint8_t *buf = malloc(cap);
    mc_status_t st = MC_OK;
    uint64_t done  = 0;

    if (buf == NULL) {
        mc_te_region_release_gen(tp->te, r, ticket);
        return -1; /* the payload cannot be consumed anywhere: close */
    }
    while (done < h->length) {
        size_t k = (size_t)MC_MIN(h->length - done, (uint64_t)cap);
        if (recv_exact(fd, buf, k, NULL) != 0) {
            free(buf);
            mc_te_region_release_gen(tp->te, r, ticket);
            return -1;
        }
        /* after a failed write keep draining the payload, then answer */
        if (st == MC_OK)
            st = mc_te_region_file_io(r, 1, buf, h->addr + done, k);
        done += k;
    }
    free(buf);
    mc_te_region_release_gen(tp->te, r, ticket);
    return serve_send_resp(fd, st, 0);
}

/* Serve one READ; returns 0 to keep the connection, -1 to close it. */
static int serve_read(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h)
{
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    struct iovec iov[2];
    mc_te_region_t *r;
    int rc, ticket;

    r = mc_te_region_acquire_gen(tp->te, h->addr, h->length, MC_TE_MEM_REMOTE_ACCESS, h->gen, 0,
                                 &ticket);
    if (r == NULL) {
        mc_debug("refusing read of [0x%llx, +%llu): not in a remote-access region%s",
                 (unsigned long long)h->addr, (unsigned long long)h->length,
                 h->gen ? " of the generation asked for" : "");
        return serve_send_resp(fd, MC_INVALID_READ, 0);
    }
    if (r->fops != NULL)
        return serve_file_read(tp, fd, h, r, ticket);
    mc_te_resp_encode(resp, MC_OK, h->length);
    iov[0].iov_base = resp;
    iov[0].iov_len  = sizeof(resp);
    iov[1].iov_base = (void *)(uintptr_t)h->addr;
    iov[1].iov_len  = (size_t)h->length;
    rc              = mc_writev_full(fd, iov, 2);
    mc_te_region_release_gen(tp->te, r, ticket);
    return rc;
}

/* An OK answer with @p len payload bytes, in one writev. */
static int serve_send_payload(int fd, const void *payload, size_t len)
{
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    struct iovec iov[2];
    mc_te_resp_encode(resp, MC_OK, len);
    iov[0].iov_base = resp;
    iov[0].iov_len  = sizeof(resp);
    iov[1].iov_base = (void *)(uintptr_t)payload;
    iov[1].iov_len  = len;
    return mc_writev_full(fd, iov, 2);
}

/* Send iov[0..n) whole, IOV_MAX entries a call (mc_writev_full takes 64:
 * a READV of 1 KiB rows is 513 entries, which would cost 9 calls).
 * Returns 0, or -1 with errno set. */
static int send_iov_all(int fd, struct iovec *iov, size_t n)
{
    while (n > 0) {
        struct msghdr mh;
        ssize_t k;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = iov;
        mh.msg_iovlen = MC_MIN(n, (size_t)IOV_MAX);
        k             = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (size_t left = (size_t)k; left > 0;) {
            size_t t = MC_MIN(left, iov->iov_len);
            iov->iov_base = (uint8_t *)iov->iov_base + t;
            iov->iov_len -= t;
            left -= t;
            if (iov->iov_len == 0) {
                iov++;
                n--;
            }
        }
        while ((n > 0) && (iov->iov_len == 0)) {
            iov++;
            n--;
        }
    }
    return 0;
}

/* [a, +len) lies inside region @p r (overflow-safe, as the region lookup). */
static int region_holds(const mc_te_region_t *r, uint64_t a, uint64_t len)
{
    return (a >= r->addr) && (a - r->addr < r->len) && (len <= r->len - (a - r->addr));
}

/*
 * The one remote-access region that holds every span sp[0..n) (of the
 * generation @p h names), pinned under *ticket_p; NULL when there is none,
 * after answering INVALID_READ (*rc_p: whether that answer went out, 0,
 * or -1 to close).  @p what names the request in the debug line.
 */
static mc_te_region_t *readv_region(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h,
                                    const mc_te_range_t *sp, size_t n, const char *what,
                                    int *ticket_p, int *rc_p)
{
    mc_te_region_t *r = mc_te_region_acquire_gen(tp->te, sp[0].addr, sp[0].len,
                                                 MC_TE_MEM_REMOTE_ACCESS, h->gen, 0, ticket_p);

    for (size_t i = 1; (r != NULL) && (i < n); i++) {
        if (!region_holds(r, sp[i].addr, sp[i].len)) {
            mc_te_region_release_gen(tp->te, r, *ticket_p);
            r = NULL;
        }
    }
    if (r == NULL) {
        mc_debug("refusing %s of %zu from 0x%llx: not all in one remote-access region%s", what,
                 n, (unsigned long long)sp[0].addr, h->gen ? " of the generation asked for" : "");
        *rc_p = serve_send_resp(fd, MC_INVALID_READ, 0);
    }
    return r;
}

/* The ranges of a READV from a file segment, through one buffer of their
 * total length (at most MC_TE_READV_MAX_LEN), sent after all were read so
 * that a failing store is answered with a status. */
static int serve_readv_file(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h,
                            const mc_te_range_t *rg, size_t n, mc_te_region_t *r, int ticket)
{
    uint8_t *buf   = malloc((size_t)h->length);
    mc_status_t st = (buf != NULL) ? MC_OK : MC_INTERNAL_ERROR;
    size_t off     = 0;
    int rc;

    for (size_t i = 0; (i < n) && (st == MC_OK); i++) {
        st = mc_te_region_file_io(r, 0, buf + off, rg[i].addr, (size_t)rg[i].len);
        off += (size_t)rg[i].len;
    }
    mc_te_region_release_gen(tp->te, r, ticket);
    rc = (st == MC_OK) ? serve_send_payload(fd, buf, (size_t)h->length)
                       : serve_send_resp(fd, st, 0);
    free(buf);
    return rc;
}

/*
 * Serve one READV (proto.h, docs/transfer.md §3.3): the range list follows
 * the header.  Every range is checked against the one region that holds
 * the first -- pinned, of the generation named -- before a byte is sent;
 * a refusal comes after the whole list was taken, so the connection stays
 * usable.  The payload is one writev straight from the region.  A header
 * out of bounds or a malformed list closes the connection: the list's
 * length (or the payload's) cannot be trusted then.  Returns 0 to keep the
 * connection, -1 to close it.
 */
static int serve_readv(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h)
{
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    mc_te_region_t *r = NULL;
    mc_te_range_t *rg;
    struct iovec *iov;
    uint8_t *list;
    size_t n;
    int rc = -1, ticket = 0;

    if (!tp->te->readv_enabled) { /* MC_TE_READV=0: as an engine without it */
        mc_debug("closing data connection: readv is turned off (MC_TE_READV=0)");
        return -1;
    }
    if (mc_te_readv_hdr_check(h) != 0) {
        mc_debug("closing data connection: readv of %llu ranges, %llu bytes (limits %u, %u)",
                 (unsigned long long)h->addr, (unsigned long long)h->length,
                 MC_TE_READV_MAX_RANGES, MC_TE_READV_MAX_LEN);
        return -1;
    }
    n    = (size_t)h->addr;
    list = malloc(n * (MC_TE_READV_ENTRY_SIZE + sizeof(*rg) + sizeof(*iov)) + sizeof(*iov));
    if (list == NULL)
        return -1; /* the list cannot be consumed anywhere: close */
    rg  = (mc_te_range_t *)(void *)(list + n * MC_TE_READV_ENTRY_SIZE);
    iov = (struct iovec *)(void *)(rg + n);
    if ((recv_exact(fd, list, n * MC_TE_READV_ENTRY_SIZE, NULL) != 0) ||
        (mc_te_readv_decode(h, list, rg) != 0)) {
        mc_debug("closing data connection: malformed readv range list");
        goto out;
    }
    r = readv_region(tp, fd, h, rg, n, "readv ranges", &ticket, &rc);
    if (r == NULL)
        goto out;
    if (r->fops != NULL) {
        rc = serve_readv_file(tp, fd, h, rg, n, r, ticket);
        goto out;
    }
    mc_te_resp_encode(resp, MC_OK, h->length);
    iov[0].iov_base = resp;
    iov[0].iov_len  = sizeof(resp);
    for (size_t i = 0; i < n; i++) {
        iov[i + 1].iov_base = (void *)(uintptr_t)rg[i].addr;
        iov[i + 1].iov_len  = (size_t)rg[i].len;
    }
    rc = send_iov_all(fd, iov, n + 1);
    mc_te_region_release_gen(tp->te, r, ticket);
out:
    free(list);
    return rc;
}

/* The rows of entries e[0..n) (@p rows in all) of a file segment's region:
 * as a READV of each row. */
static int serve_readvs_file(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h,
                             const mc_te_strided_t *e, size_t n, size_t rows,
                             mc_te_region_t *r, int ticket)
{
    mc_te_range_t *rg = malloc(rows * sizeof(*rg));
    mc_te_strided_walk_t w;
    int rc;

    if (rg == NULL) {
        mc_te_region_release_gen(tp->te, r, ticket);
        return serve_send_resp(fd, MC_INTERNAL_ERROR, 0);
    }
    mc_te_strided_walk_init(&w, e, n);
    for (size_t i = 0; i < rows; i++)
        (void)mc_te_strided_next(&w, &rg[i]);
    rc = serve_readv_file(tp, fd, h, rg, rows, r, ticket);
    free(rg);
    return rc;
}

/* iovecs a READV_STRIDED's answer is sent through at a time */
#define TCP_READVS_IOV 1024u

/*
 * Serve one READV_STRIDED (proto.h, docs/transfer.md §3.3): as a READV
 * (serve_readv), its entries checked whole -- each entry's first and last
 * row inside the one region that holds the first row, so every row between
 * them is -- and its rows sent straight from the region, walked into
 * iovecs TCP_READVS_IOV at a time (the rows named may be many more than
 * the entries).  Returns 0 to keep the connection, -1 to close it.
 */
static int serve_readvs(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h)
{
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    mc_te_region_t *r = NULL;
    mc_te_strided_t *e;
    mc_te_strided_walk_t w;
    mc_te_range_t row, *sp;
    struct iovec *iov;
    uint8_t *list;
    size_t n, rows = 0, k, k0;
    int rc = -1, ticket = 0;

    if (!tp->te->readv_enabled || !tp->te->readvs_enabled) {
        mc_debug("closing data connection: strided readv is turned off (MC_TE_READV=0 or "
                 "MC_TE_READV_STRIDED=0)");
        return -1;
    }
    if (mc_te_readvs_hdr_check(h) != 0) {
        mc_debug("closing data connection: strided readv of %llu entries, %llu bytes "
                 "(limits %u, %u)", (unsigned long long)h->addr, (unsigned long long)h->length,
                 MC_TE_READVS_MAX_ENTRIES, MC_TE_READV_MAX_LEN);
        return -1;
    }
    n    = (size_t)h->addr;
    list = malloc(n * (MC_TE_READVS_ENTRY_SIZE + sizeof(*e) + sizeof(*sp)) +
                  (TCP_READVS_IOV + 1) * sizeof(*iov));
    if (list == NULL)
        return -1; /* the list cannot be consumed anywhere: close */
    e   = (mc_te_strided_t *)(void *)(list + n * MC_TE_READVS_ENTRY_SIZE);
    sp  = (mc_te_range_t *)(void *)(e + n);
    iov = (struct iovec *)(void *)(sp + n);
    if ((recv_exact(fd, list, n * MC_TE_READVS_ENTRY_SIZE, NULL) != 0) ||
        (mc_te_readvs_decode(h, list, e, &rows) != 0)) {
        mc_debug("closing data connection: malformed strided readv entry list");
        goto out;
    }
    /* each entry's span, from its first row to the end of its last (decode
     * checked that it does not wrap): inside the region, so is every row */
    for (size_t i = 0; i < n; i++)
        sp[i] = (mc_te_range_t){e[i].addr, (uint64_t)(e[i].count - 1) * e[i].stride + e[i].len};
    r = readv_region(tp, fd, h, sp, n, "strided readv entries", &ticket, &rc);
    if (r == NULL)
        goto out;
    if (r->fops != NULL) {
        rc = serve_readvs_file(tp, fd, h, e, n, rows, r, ticket);
        goto out;
    }
    mc_te_resp_encode(resp, MC_OK, h->length);
    iov[0].iov_base = resp;
    iov[0].iov_len  = sizeof(resp);
    k               = 1;
    k0              = 1; /* the first iovec that is a row */
    rc              = 0;
    mc_te_strided_walk_init(&w, e, n);
    while ((rc == 0) && mc_te_strided_next(&w, &row)) {
        if ((k > k0) && ((uintptr_t)iov[k - 1].iov_base + iov[k - 1].iov_len == row.addr)) {
            iov[k - 1].iov_len += (size_t)row.len; /* rows that touch: one iovec */
            continue;
        }
        if (k == TCP_READVS_IOV + 1) {
            rc = send_iov_all(fd, iov, k);
            k  = 0;
            k0 = 0;
        }
        iov[k].iov_base = (void *)(uintptr_t)row.addr;
        iov[k].iov_len  = (size_t)row.len;
        k++;
    }
    if ((rc == 0) && (k > 0))
        rc = send_iov_all(fd, iov, k);
    mc_te_region_release_gen(tp->te, r, ticket);
out:
    free(list);
    return rc;
}

/* Serve one WRITE; returns 0 to keep the connection, -1 to close it.
 * @p queued: its header is still in the socket (only peeked at); a write
 * into memory then takes header and payload in one receive. */
static int serve_write(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h, int queued)
{
    uint8_t hdr[MC_TE_REQ_HDR_SIZE];
    mc_te_region_t *r;
    int rc, ticket;

    r = mc_te_region_acquire_gen(tp->te, h->addr, h->length, MC_TE_MEM_REMOTE_ACCESS, h->gen, 1,
                                 &ticket);
    if ((r == NULL) || (r->fops != NULL)) {
        if (queued && (recv_exact(fd, hdr, sizeof(hdr), NULL) != 0)) {
            if (r != NULL)
                mc_te_region_release_gen(tp->te, r, ticket);
            return -1;
        }
        if (r != NULL)
            return serve_file_write(tp, fd, h, r, ticket);
        mc_debug("refusing write of [0x%llx, +%llu): not in a remote-access region%s",
                 (unsigned long long)h->addr, (unsigned long long)h->length,
                 h->gen ? " of the generation asked for" : "");
        /* Answer, then close: the payload behind this header is never read. */
        (void)serve_send_resp(fd, MC_INVALID_WRITE, 0);
        shutdown(fd, SHUT_WR);
        return -1;
    }
    rc = queued ? recv_exact2(fd, hdr, sizeof(hdr), (void *)(uintptr_t)h->addr,
                              (size_t)h->length)
                : recv_exact(fd, (void *)(uintptr_t)h->addr, (size_t)h->length, NULL);
    mc_te_region_release_gen(tp->te, r, ticket);
    if (rc != 0)
        return -1; /* the initiator sees the failure and reports it */
    return serve_send_resp(fd, MC_OK, 0);
}

static int serve_describe(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h)
{
    char *json = NULL;
    size_t len = 0;
    mc_status_t st;
    int rc;

    if ((h->addr != 0) || (h->length != 0))
        return -1; /* malformed */
    st = mc_te_describe_local(tp->te, &json, &len);
    if (st != MC_OK)
        return serve_send_resp(fd, st, 0);
    rc = serve_send_payload(fd, json, len);
    free(json);
    return rc;
}

/* One RDMA_CONNECT: read the record, let the handler answer.  Returns 0
 * to keep the connection, -1 to close it. */
static int serve_rdma_connect(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h)
{
    uint8_t *req, *resp;
    size_t rlen = 0;
    mc_status_t st;
    int rc;

    if ((h->length == 0) || (h->length > MC_TE_HS_MAX))
        return -1; /* malformed: the payload cannot be skipped safely */
    req  = malloc((size_t)h->length);
    resp = malloc(MC_TE_HS_MAX);
    if ((req == NULL) || (resp == NULL) || (recv_exact(fd, req, (size_t)h->length, NULL) != 0)) {
        free(req);
        free(resp);
        return -1;
    }
    pthread_rwlock_rdlock(&tp->hs_lock);
    if (tp->hs_fn == NULL) {
        st = MC_NOT_SUPPORTED;
    } else {
        st = tp->hs_fn(tp->hs_arg, h->addr, req, (size_t)h->length, resp, MC_TE_HS_MAX, &rlen);
        if (st != MC_OK)
            mc_debug("refusing an RDMA handshake: %s", mc_last_error_detail());
    }
    pthread_rwlock_unlock(&tp->hs_lock);
    if ((st == MC_OK) && (rlen > 0) && (rlen <= MC_TE_HS_MAX))
        rc = serve_send_payload(fd, resp, rlen);
    else
        rc = serve_send_resp(fd, (st == MC_OK) ? MC_INTERNAL_ERROR : st, 0);
    free(req);
    free(resp);
    return rc;
}

void mc_tcp_hs_handler_set(void *tcp, mc_tcp_hs_func_t fn, void *arg)
{
    mc_tcp_t *tp = tcp;
    pthread_rwlock_wrlock(&tp->hs_lock);
    tp->hs_fn  = fn;
    tp->hs_arg = arg;
    pthread_rwlock_unlock(&tp->hs_lock);
}

/*
 * Serve one DISK_READ (docs/tiers.md §4): the prefix and body follow the
 * header; the engine's disk server checks the record against the tier's
 * own and reads it.  A connection serves one request at a time, so it has
 * at most one disk read in flight; the engine caps them all
 * (MC_TE_DISK_SERVE_MAX).  Returns 0 to keep the connection, -1 to close.
 */
static int serve_disk_read(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h)
{
    uint8_t prefix[MC_TE_DISK_PREFIX_SIZE];
    uint8_t body[MC_TE_DISK_KEY_MAX + MC_TE_DISK_PATH_MAX];
    uint8_t resp[MC_TE_RESP_HDR_SIZE];
    struct iovec iov[2];
    mc_te_disk_req_t req;
    size_t blen;
    void *val = NULL;
    mc_status_t st;
    int rc;

    if ((recv_exact(fd, prefix, sizeof(prefix), NULL) != 0) ||
        (mc_te_disk_prefix_decode(prefix, &blen) != 0) ||
        (recv_exact(fd, body, blen, NULL) != 0) ||
        (mc_te_disk_req_decode(h, prefix, body, blen, &req) != 0)) {
        mc_debug("closing data connection: malformed disk read");
        return -1;
    }
    st = mc_te_disk_serve(tp->te, &req, &val);
    if (st != MC_OK) {
        mc_debug("refusing disk read of %.*s+%llu: %s", (int)req.path_len, req.path,
                 (unsigned long long)req.offset, mc_last_error_detail());
        return serve_send_resp(fd, st, 0);
    }
    mc_te_resp_encode(resp, MC_OK, req.length);
    iov[0].iov_base = resp;
    iov[0].iov_len  = sizeof(resp);
    iov[1].iov_base = val;
    iov[1].iov_len  = (size_t)req.length;
    rc              = mc_writev_full(fd, iov, 2);
    free(val);
    return rc;
}

/*
 * A pipelining initiator (docs/transfer.md, "Pipelining") queues many READ
 * headers back to back.  Serving them one recv + one writev at a time
 * costs two system calls and a wake-up of the initiator per request, which
 * dominates small reads.  Instead, the idle connection waits by peeking
 * (serve_next): it wakes once when requests arrive and sees every header
 * queued by then.  The leading run of complete READ headers (never a
 * WRITE: its payload must go straight to its target, so nothing behind a
 * WRITE header is consumed here) is checked and answered with one writev
 * straight from the registered regions, so a batch of small reads costs
 * the target one wake-up and three system calls, and the initiator one
 * wake-up.
 *
 * Waiting in the peek rather than in a plain recv of one header matters:
 * a recv would take the first header of a batch alone (the rest arrive in
 * the same segment but the recv is already satisfied), answer it alone,
 * and wake the initiator twice per batch.
 *
 * @p hdrs holds the @p n bytes serve_next peeked at.  Returns the number
 * of requests served (*moved_p: the bytes they asked for), 0 when the
 * caller must take the one-request path (the queue starts with a partial
 * header, a WRITE, a DESCRIBE or garbage), or -1 to close.
 */
#define MC_TCP_SERVE_RUN 64

static int serve_read_run(mc_tcp_t *tp, int fd, uint8_t *hdrs, size_t n, uint64_t *moved_p)
{
    uint8_t resps[MC_TCP_SERVE_RUN][MC_TE_RESP_HDR_SIZE];
    struct iovec iov[2 * MC_TCP_SERVE_RUN];
    mc_te_region_t *regs[MC_TCP_SERVE_RUN];
    int tickets[MC_TCP_SERVE_RUN];
    mc_te_req_hdr_t h;
    uint64_t moved = 0;
    int k = 0, niov = 0, rc;

    while ((k < MC_TCP_SERVE_RUN) && ((size_t)(k + 1) * MC_TE_REQ_HDR_SIZE <= n) &&
           (mc_te_req_decode(hdrs + (size_t)k * MC_TE_REQ_HDR_SIZE, &h) == 0) &&
           (h.opcode == MC_TE_OPC_READ)) {
        regs[k] = mc_te_region_acquire_gen(tp->te, h.addr, h.length, MC_TE_MEM_REMOTE_ACCESS,
                                           h.gen, 0, &tickets[k]);
        if ((regs[k] != NULL) && (regs[k]->fops != NULL)) {
            /* a file segment is read through a buffer: the one-request
             * path serves it, after the run before it */
            mc_te_region_release_gen(tp->te, regs[k], tickets[k]);
            break;
        }
        if (regs[k] == NULL) {
            mc_debug("refusing read of [0x%llx, +%llu): not in a remote-access region%s",
                     (unsigned long long)h.addr, (unsigned long long)h.length,
                     h.gen ? " of the generation asked for" : "");
            mc_te_resp_encode(resps[k], MC_INVALID_READ, 0);
        } else {
            mc_te_resp_encode(resps[k], MC_OK, h.length);
            moved += h.length;
        }
        iov[niov].iov_base = resps[k];
        iov[niov].iov_len  = MC_TE_RESP_HDR_SIZE;
        niov++;
        if (regs[k] != NULL) {
            iov[niov].iov_base = (void *)(uintptr_t)h.addr;
            iov[niov].iov_len  = (size_t)h.length;
            niov++;
        }
        k++;
    }
    if (k == 0)
        return 0;
    *moved_p = moved;
    /* The k headers are already queued: consume exactly them. */
    rc = (recv_exact(fd, hdrs, (size_t)k * MC_TE_REQ_HDR_SIZE, NULL) == 0)
             ? mc_writev_full(fd, iov, niov)
             : -1;
    for (int i = 0; i < k; i++)
        if (regs[i] != NULL)
            mc_te_region_release_gen(tp->te, regs[i], tickets[i]);
    return (rc == 0) ? k : -1;
}

/*
 * Wait for the next request on a served connection and peek at what is
 * queued, up to @p cap bytes, into @p buf: first in a busy-poll window of
 * @p spin_us (serve_window), then asleep, marked idle meanwhile (the
 * acceptor may then close it to make room, accept_admit()).  The sleep is the peek itself where the
 * socket's receive timeout (MC_TCP_STATUS_TIMEOUT_SEC) lets it re-check
 * the idle limit and shutdown often enough: at most that timeout late,
 * and never past twice the idle limit.  Otherwise (no receive timeout, or
 * one longer than the idle limit) it sleeps in poll() with the limit as
 * its timeout and peeks after.  Returns the bytes peeked at (> 0), or -1
 * when the peer hung up, the connection has been idle for
 * tp->idle_timeout_s, the transport is stopping or the socket failed.
 */
static ssize_t serve_next(mc_tcp_t *tp, mc_tcp_conn_t *c, uint8_t *buf, size_t cap,
                          unsigned spin_us)
{
    uint64_t limit = (uint64_t)tp->idle_timeout_s * 1000u;
    int in_peek    = (tp->io_timeout_s > 0) &&
                  ((limit == 0) || ((uint64_t)tp->io_timeout_s * 1000u <= limit));
    uint64_t start;
    ssize_t n;

    /* A peer that sends its next request right after our answer (a
     * caller reading one key after another) finds us polling, not asleep. */
    n = mc_spin_recv(c->fd, buf, cap, MSG_PEEK, spin_us);
    if (n != MC_SPIN_NONE)
        return (n > 0) ? n : -1;
    start = mc_now_ms();
    __atomic_store_n(&c->idle_since_ms, start, __ATOMIC_RELEASE);
    n = -1;
    while (!__atomic_load_n(&tp->stopping, __ATOMIC_ACQUIRE)) {
        uint64_t waited = mc_now_ms() - start;
        if ((limit > 0) && (waited >= limit)) {
            mc_debug("closing a data connection idle for %d s", tp->idle_timeout_s);
            n = -1;
            break;
        }
        if (!in_peek) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            int tmo = (limit > 0) ? (int)MC_MIN(limit - waited, (uint64_t)INT_MAX) : -1;
            int r   = poll(&pfd, 1, tmo);
            if (r == 0)
                continue;
            if ((r < 0) && (errno == EINTR))
                continue;
            if (r < 0)
                break;
        }
        n = recv(c->fd, buf, cap, MSG_PEEK | (in_peek ? 0 : MSG_DONTWAIT));
        if ((n >= 0) || ((errno != EINTR) && (errno != EAGAIN) && (errno != EWOULDBLOCK)))
            break; /* data, the peer's close, or a failure */
        n = -1;    /* the receive timeout, or a spurious poll wake-up: check and wait on */
    }
    __atomic_store_n(&c->idle_since_ms, 0, __ATOMIC_RELEASE);
    return (n > 0) ? n : -1;
}

/*
 * The busy-poll window before waiting for the next request, after serving
 * requests that asked for @p moved bytes.  After a large transfer it is
 * none: the initiator is still receiving (or has just sent) that many
 * bytes, and on a small host a thread polling here takes the CPU the
 * copies on both sides need, while one wake-up for the next request costs
 * little next to the transfer (docs/transfer.md §8.1).
 */
#define TCP_SERVE_POLL_MAX_MOVED (256u * 1024u)

static unsigned serve_window(const mc_tcp_t *tp, uint64_t moved)
{
    return (moved >= TCP_SERVE_POLL_MAX_MOVED) ? 0 : tp->serve_poll_us;
}

/* Serve one request whose header @p h has been taken from the socket;
 * *moved_p: the bytes it asked for.  Returns 0 to keep the connection, -1
 * to close it. */
static int serve_one(mc_tcp_t *tp, int fd, const mc_te_req_hdr_t *h, uint64_t *moved_p)
{
    *moved_p = ((h->opcode == MC_TE_OPC_READ) || (h->opcode == MC_TE_OPC_WRITE) ||
                (h->opcode == MC_TE_OPC_DISK_READ) || (h->opcode == MC_TE_OPC_READV) ||
                (h->opcode == MC_TE_OPC_READV_STRIDED))
                   ? h->length
                   : 0;
    switch (h->opcode) {
    case MC_TE_OPC_READ:
        return serve_read(tp, fd, h);
    case MC_TE_OPC_WRITE:
        return serve_write(tp, fd, h, 0);
    case MC_TE_OPC_DISK_READ:
        return serve_disk_read(tp, fd, h);
    case MC_TE_OPC_READV:
        return serve_readv(tp, fd, h);
    case MC_TE_OPC_READV_STRIDED:
        return serve_readvs(tp, fd, h);
    case MC_TE_OPC_RDMA_CONNECT:
        return serve_rdma_connect(tp, fd, h);
    default: /* MC_TE_OPC_DESCRIBE; decode refused anything else */
        return serve_describe(tp, fd, h);
    }
}

/*
 * Take the first request header of a served connection, which must be
 * complete within tp->handshake_ms of @p since (its accept, or the end of
 * its authentication), or within the idle limit where that is shorter.
 * The connection stays marked idle and never used meanwhile, so the
 * acceptor may close it to make room (accept_admit()).
 * The header is received rather than peeked at, so bytes that trickle in
 * do not wake a poll that has nothing new to say, and a peer that sent
 * half a header and stalls is closed at the deadline instead of holding a
 * thread and a place in the table until the idle limit.  An initiator
 * sends its first request right after connecting (and authenticating),
 * so the deadline only ever cuts off a peer that does not speak the
 * protocol.  Returns 0, or -1 when the connection is over.
 */
static int serve_first_header(mc_tcp_t *tp, int fd, uint64_t since, uint8_t *hdr)
{
    uint64_t limit   = tp->handshake_ms;
    const char *what = "MC_TE_HANDSHAKE_TIMEOUT_MS";
    uint64_t deadline;
    size_t got = 0;

    if ((tp->idle_timeout_s > 0) && ((uint64_t)tp->idle_timeout_s * 1000u < limit)) {
        limit = (uint64_t)tp->idle_timeout_s * 1000u;
        what  = "MC_TE_IDLE_TIMEOUT_SEC";
    }
    deadline = since + limit;

    while (got < MC_TE_REQ_HDR_SIZE) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t now;
        ssize_t n = recv(fd, hdr + got, MC_TE_REQ_HDR_SIZE - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0)
            return -1;
        if ((errno != EINTR) && (errno != EAGAIN) && (errno != EWOULDBLOCK))
            return -1;
        if (__atomic_load_n(&tp->stopping, __ATOMIC_ACQUIRE))
            return -1;
        now = mc_now_ms();
        if (now >= deadline) {
            mc_log_ratelimited(MC_LOG_INFO,
                               "closing a data connection that sent %zu of a %u-byte request "
                               "header within %llu ms (%s)",
                               got, MC_TE_REQ_HDR_SIZE, (unsigned long long)limit, what);
            return -1;
        }
        if ((poll(&pfd, 1, (int)MC_MIN(deadline - now, (uint64_t)INT_MAX)) < 0) &&
            (errno != EINTR))
            return -1;
    }
    return 0;
}

static void *conn_main(void *arg)
{
    mc_tcp_conn_t *c = arg;
    mc_tcp_t *tp     = c->tp;
    uint8_t hdrs[MC_TCP_SERVE_RUN * MC_TE_REQ_HDR_SIZE];
    mc_te_req_hdr_t h;
    uint64_t moved = 0; /* the bytes the last request (or run) asked for */
    uint64_t since = c->accepted_ms;

    /* idle_since_ms was set at accept: idle, never used, until the first
     * request header is complete */
    if (tp->te->auth != NULL) {
        if (mc_auth_server_fd(tp->te->auth, c->fd, MC_AUTH_SVC_TE, TCP_AUTH_TIMEOUT_MS) != 0) {
            mc_log_ratelimited(MC_LOG_WARN, "closing an unauthenticated data connection: %s",
                               mc_last_error_detail());
            goto done;
        }
        since = mc_now_ms();
    }
    if (serve_first_header(tp, c->fd, since, hdrs) != 0)
        goto done;
    if (mc_te_req_decode(hdrs, &h) != 0) {
        mc_debug("closing data connection: malformed request header");
        goto done;
    }
    __atomic_store_n(&c->used, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&c->idle_since_ms, 0, __ATOMIC_RELEASE);
    if (serve_one(tp, c->fd, &h, &moved) != 0)
        goto done;
    for (;;) {
        ssize_t n = serve_next(tp, c, hdrs, sizeof(hdrs), serve_window(tp, moved));
        int rc;
        if (n < 0)
            break;
        rc = serve_read_run(tp, c->fd, hdrs, (size_t)n, &moved);
        if (rc < 0)
            break;
        if (rc > 0)
            continue;
        if (((size_t)n >= MC_TE_REQ_HDR_SIZE) && (mc_te_req_decode(hdrs, &h) == 0) &&
            (h.opcode == MC_TE_OPC_WRITE)) {
            /* its header is still queued: taken with the payload */
            moved = h.length;
            if (serve_write(tp, c->fd, &h, 1) != 0)
                break;
            continue;
        }
        if (serve_read_header(tp, c->fd, hdrs) != 0)
            break;
        if (mc_te_req_decode(hdrs, &h) != 0) {
            mc_debug("closing data connection: malformed request header");
            break;
        }
        if (serve_one(tp, c->fd, &h, &moved) != 0)
            break;
    }

done:
    pthread_mutex_lock(&tp->mu);
    close(c->fd);
    c->fd = -1;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        tp->active = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    tp->nactive--;
    c->prev  = NULL;
    c->next  = tp->dead;
    tp->dead = c;
    pthread_cond_broadcast(&tp->cond);
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

/* Join finished connection threads.  Called without tp->mu. */
static void reap_dead(mc_tcp_t *tp)
{
    mc_tcp_conn_t *list;
    pthread_mutex_lock(&tp->mu);
    list     = tp->dead;
    tp->dead = NULL;
    pthread_mutex_unlock(&tp->mu);
    while (list != NULL) {
        mc_tcp_conn_t *next = list->next;
        pthread_join(list->thread, NULL);
        free(list);
        list = next;
    }
}

/* The address of @p ss with its port zeroed, for comparing peers. */
static void peer_key(struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)(void *)ss)->sin_port = 0;
    else if (ss->ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)(void *)ss;
        s6->sin6_port     = 0;
        s6->sin6_flowinfo = 0;
    }
}

static int peer_eq(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 1;
}

/*
 * Making room.  When a new connection would exceed a bound (its address's
 * tp->max_conns_peer, or tp->max_conns in all), a served connection that
 * is not serving a request is shut down to make room for it: from the same
 * address for the per-address bound, from any address for the global one.
 * The new connection is refused only when every candidate is serving a
 * request, so connections that do nothing (or never say anything) cannot
 * lock readers out, while the bounds still hold for connections that work.
 * Candidates, the first class that has one wins, and within a class the
 * one never used or idle longest:
 *
 *   1. never used (no complete request header yet), accepted at least
 *      TCP_EVICT_NEW_MS ago: an initiator sends its first request right
 *      after connecting, so such a connection is almost certainly not one
 *      of ours;
 *   2. idle for TCP_EVICT_IDLE_MS at least: a request that has just
 *      arrived on it is rarely cut off, and a pooled connection cut off
 *      before its answer is retried by the initiator on a fresh one;
 *   3. never used, accepted less than TCP_EVICT_NEW_MS ago (a burst of
 *      connections that say nothing, the oldest first);
 *   4. idle for less than TCP_EVICT_IDLE_MS.
 *
 * A never-used connection is closed anyway when its first request header
 * is not complete within tp->handshake_ms (serve_first_header), and an
 * idle one after tp->idle_timeout_s (serve_next).
 */
#define TCP_EVICT_NEW_MS  150u
#define TCP_EVICT_IDLE_MS 1000u

enum { EVICT_NONE, EVICT_STALE_NEW, EVICT_LONG_IDLE, EVICT_NEW, EVICT_IDLE };

/* The candidate class of @p c at @p now (EVICT_NONE: serving a request, or
 * already shut down), and in *age_p how long it has been never used or
 * idle.  Called with tp->mu held; its thread updates the atomics without
 * it, so the answer may be a moment old (see TCP_EVICT_IDLE_MS). */
static int evict_class(const mc_tcp_conn_t *c, uint64_t now, uint64_t *age_p)
{
    uint64_t idle = __atomic_load_n(&c->idle_since_ms, __ATOMIC_ACQUIRE);
    uint64_t from;

    if (c->evicted || (c->fd < 0) || (idle == 0))
        return EVICT_NONE;
    if (!__atomic_load_n(&c->used, __ATOMIC_ACQUIRE)) {
        from   = c->accepted_ms;
        *age_p = (now > from) ? now - from : 0;
        return (*age_p >= TCP_EVICT_NEW_MS) ? EVICT_STALE_NEW : EVICT_NEW;
    }
    *age_p = (now > idle) ? now - idle : 0;
    return (*age_p >= TCP_EVICT_IDLE_MS) ? EVICT_LONG_IDLE : EVICT_IDLE;
}

/* The best candidate so far (*best_p, of class *cls_p and age *age_p)
 * becomes @p c when @p c comes first.  Called in list order, newest
 * accepted first, so of equal ages (a burst within one millisecond) the
 * one accepted earliest wins. */
static void evict_pick(mc_tcp_conn_t *c, int cls, uint64_t age, mc_tcp_conn_t **best_p,
                       int *cls_p, uint64_t *age_p)
{
    if ((cls == EVICT_NONE) ||
        ((*best_p != NULL) && ((cls > *cls_p) || ((cls == *cls_p) && (age < *age_p)))))
        return;
    *best_p = c;
    *cls_p  = cls;
    *age_p  = age;
}

/*
 * May a connection from @p peer be served?  Called with tp->mu held.
 * Makes room as described above when a bound is reached: the connection
 * chosen is shut down (its thread wakes, sees the hang-up and leaves; it
 * is joined later) and no longer counted.  Returns 0, or -1 (logged, rate
 * limited) when the new connection must be closed.
 */
static int accept_admit(mc_tcp_t *tp, struct sockaddr_storage *peer)
{
    mc_tcp_conn_t *mine = NULL, *any = NULL, *victim;
    int mine_cls = EVICT_NONE, any_cls = EVICT_NONE, cls;
    uint64_t mine_age = 0, any_age = 0, age;
    uint64_t now  = mc_now_ms();
    unsigned same = 0, live = 0, limit;
    const char *bound;
    int per_addr;

    peer_key(peer);
    for (mc_tcp_conn_t *c = tp->active; c != NULL; c = c->next) {
        int eq;
        if (c->evicted)
            continue;
        live++;
        eq = peer_eq(&c->peer, peer);
        same += (unsigned)eq;
        age = 0;
        cls = evict_class(c, now, &age);
        evict_pick(c, cls, age, &any, &any_cls, &any_age);
        if (eq)
            evict_pick(c, cls, age, &mine, &mine_cls, &mine_age);
    }
    if (tp->nactive - live >= tp->max_conns) {
        /* shut down ones whose threads have not left yet: do not pile up more */
        mc_log_ratelimited(MC_LOG_WARN,
                           "refusing a data connection: %u closed to make room have not "
                           "finished yet",
                           tp->nactive - live);
        return -1;
    }
    per_addr = same >= tp->max_conns_peer;
    if (per_addr) {
        victim = mine;
        cls    = mine_cls;
        age    = mine_age;
        bound  = "MC_TE_MAX_CONNECTIONS_PER_PEER";
        limit  = tp->max_conns_peer;
    } else if (live >= tp->max_conns) {
        victim = any;
        cls    = any_cls;
        age    = any_age;
        bound  = "MC_TE_MAX_CONNECTIONS";
        limit  = tp->max_conns;
    } else {
        return 0;
    }
    if (victim == NULL) {
        mc_log_ratelimited(MC_LOG_WARN,
                           "refusing a data connection: %u already served%s, every one "
                           "serving a request (%s)",
                           limit, per_addr ? " from its address" : "", bound);
        return -1;
    }
    shutdown(victim->fd, SHUT_RDWR);
    victim->evicted = 1;
    mc_log_ratelimited(MC_LOG_INFO,
                       "closing a data connection %s for %llu ms to make room (%s=%u)",
                       ((cls == EVICT_STALE_NEW) || (cls == EVICT_NEW)) ? "never used"
                                                                          : "idle",
                       (unsigned long long)age, bound, limit);
    return 0;
}

static void *acceptor_main(void *arg)
{
    mc_tcp_t *tp = arg;
    pthread_attr_t attr;

    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, TCP_CONN_STACK);
    for (;;) {
        mc_tcp_conn_t *c;
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd;
        int rc;

        memset(&peer, 0, sizeof(peer));
        fd = accept4(tp->listen_fd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
        if (__atomic_load_n(&tp->stopping, __ATOMIC_ACQUIRE)) {
            if (fd >= 0)
                close(fd);
            break;
        }
        if (fd < 0) {
            if ((errno == EINTR) || (errno == ECONNABORTED) || (errno == EPROTO))
                continue;
            if ((errno == EMFILE) || (errno == ENFILE) || (errno == ENOBUFS) ||
                (errno == ENOMEM)) {
                /* out of descriptors: back off instead of spinning */
                mc_warn("accept on the data port failed: %m");
                (void)poll(NULL, 0, 100);
                continue;
            }
            mc_error("accept on the data port failed: %m; no longer serving");
            break;
        }
        reap_dead(tp);
        pthread_mutex_lock(&tp->mu);
        if (accept_admit(tp, &peer) != 0) {
            pthread_mutex_unlock(&tp->mu);
            close(fd);
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            pthread_mutex_unlock(&tp->mu);
            close(fd);
            continue;
        }
        mc_tcp_tune(fd, tp->io_timeout_s);
        c->tp          = tp;
        c->fd          = fd;
        c->peer        = peer;
        c->accepted_ms = mc_now_ms();
        /* idle and never used until its first request header is complete:
         * a candidate to make room from now on, before its thread runs */
        c->idle_since_ms = c->accepted_ms;
        rc               = pthread_create(&c->thread, &attr, conn_main, c);
        if (rc != 0) {
            pthread_mutex_unlock(&tp->mu);
            errno = rc;
            mc_warn("cannot start a data connection thread: %m");
            close(fd);
            free(c);
            continue;
        }
        c->next = tp->active;
        if (tp->active != NULL)
            tp->active->prev = c;
        tp->active = c;
        tp->nactive++;
        pthread_mutex_unlock(&tp->mu);
    }
    pthread_attr_destroy(&attr);
    return NULL;
}

/* Bind fd to addr with the given port; 0 or -1 (errno). */
static int bind_port(int fd, struct sockaddr_storage *ss, socklen_t sslen, uint16_t port)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
    return bind(fd, (struct sockaddr *)ss, sslen);
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: port spreading, not security */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Open the listening socket: the given port, or a random free one from
 * [min, max] (MC_TE_PORT_RANDOM_TRIES random picks, then a scan). */
static mc_status_t listen_open(mc_tcp_t *tp, const char *bind_addr, uint16_t want,
                               uint16_t *port_p)
{
    const mc_te_config_t *cfg = &tp->te->cfg;
    struct addrinfo hints, *res = NULL;
    struct sockaddr_storage ss;
    socklen_t sslen;
    int fd, one = 1, rc, bound = 0;
    unsigned span = (unsigned)cfg->port_max - cfg->port_min + 1;
    uint64_t seed = mc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)tp;
    uint16_t port = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_NUMERICHOST | AI_PASSIVE;
    rc                = getaddrinfo(bind_addr, NULL, &hints, &res);
    if ((rc != 0) || (res == NULL)) {
        mc_set_error_detail("bind address \"%s\" is invalid: %s", bind_addr, gai_strerror(rc));
        if (res != NULL)
            freeaddrinfo(res);
        return MC_INVALID_PARAMS;
    }
    memcpy(&ss, res->ai_addr, res->ai_addrlen);
    sslen = res->ai_addrlen;
    freeaddrinfo(res);

    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mc_set_error_detail("socket: %s", strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (want != 0) {
        port  = want;
        bound = bind_port(fd, &ss, sslen, port) == 0;
        if (!bound) {
            mc_set_error_detail("cannot bind the data port %s:%u: %s", bind_addr, (unsigned)want,
                                strerror(errno));
            close(fd);
            return MC_INVALID_PARAMS;
        }
    } else {
        for (int i = 0; (i < MC_TE_PORT_RANDOM_TRIES) && !bound; i++) {
            port  = (uint16_t)(cfg->port_min + rng_next(&seed) % span);
            bound = bind_port(fd, &ss, sslen, port) == 0;
            if (!bound && (errno != EADDRINUSE) && (errno != EACCES))
                break;
        }
        for (unsigned i = 0; (i < span) && !bound; i++) {
            port  = (uint16_t)(cfg->port_min + i);
            bound = bind_port(fd, &ss, sslen, port) == 0;
            if (!bound && (errno != EADDRINUSE) && (errno != EACCES))
                break;
        }
        if (!bound) {
            mc_set_error_detail("no free data port in [%u, %u] on %s: %s",
                                (unsigned)cfg->port_min, (unsigned)cfg->port_max, bind_addr,
                                strerror(errno));
            close(fd);
            return MC_INVALID_PARAMS;
        }
    }
    if (listen(fd, TCP_LISTEN_BACKLOG) != 0) {
        mc_set_error_detail("listen on %s:%u: %s", bind_addr, (unsigned)port, strerror(errno));
        close(fd);
        return MC_INTERNAL_ERROR;
    }
    tp->listen_fd = fd;
    *port_p       = port;
    return MC_OK;
}

static void tcp_uninstall(void *priv)
{
    mc_tcp_t *tp = priv;
    if (tp == NULL)
        return;
    __atomic_store_n(&tp->stopping, 1, __ATOMIC_RELEASE);
    if (tp->listen_fd >= 0)
        shutdown(tp->listen_fd, SHUT_RDWR); /* wakes accept() */
    if (tp->acceptor_started)
        pthread_join(tp->acceptor, NULL);
    pthread_mutex_lock(&tp->mu);
    for (mc_tcp_conn_t *c = tp->active; c != NULL; c = c->next)
        shutdown(c->fd, SHUT_RDWR); /* wakes recv()/send() */
    while (tp->nactive > 0)
        pthread_cond_wait(&tp->cond, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
    reap_dead(tp);
    if (tp->listen_fd >= 0)
        close(tp->listen_fd);
    pthread_cond_destroy(&tp->cond);
    pthread_mutex_destroy(&tp->mu);
    pthread_rwlock_destroy(&tp->hs_lock);
    free(tp);
}

static mc_status_t tcp_install(mc_te_t *te, const char *bind_addr, uint16_t port, void **priv_p,
                               uint16_t *port_p)
{
    mc_tcp_t *tp = calloc(1, sizeof(*tp));
    mc_status_t st;
    int rc;

    if (tp == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    tp->te                 = te;
    tp->listen_fd          = -1;
    tp->io_timeout_s       = te->cfg.io_timeout_s;
    tp->connect_timeout_ms = te->cfg.connect_timeout_ms;
    tp->lanes              = te->cfg.lanes;
    tp->busy_poll_us       = te->cfg.busy_poll_us;
    tp->serve_poll_us      = te->cfg.serve_poll_us;
    tp->max_conns          = te->cfg.max_conns;
    tp->max_conns_peer     = te->cfg.max_conns_peer;
    tp->idle_timeout_s     = te->cfg.idle_timeout_s;
    tp->handshake_ms       = te->cfg.handshake_ms;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cond, NULL);
    pthread_rwlock_init(&tp->hs_lock, NULL);
    st = listen_open(tp, bind_addr, port, port_p);
    if (st != MC_OK) {
        tcp_uninstall(tp);
        return st;
    }
    rc = pthread_create(&tp->acceptor, NULL, acceptor_main, tp);
    if (rc != 0) {
        mc_set_error_detail("cannot start the data port acceptor: %s", strerror(rc));
        tcp_uninstall(tp);
        return MC_INTERNAL_ERROR;
    }
    tp->acceptor_started = 1;
    *priv_p              = tp;
    return MC_OK;
}

/* ---- initiator side ----------------------------------------------------------- */

static mc_status_t tcp_peer_open(void *priv, const char *host, uint16_t port, void **peer_p)
{
    mc_tcp_t *tp      = priv;
    mc_tcp_peer_t *pe = calloc(1, sizeof(*pe));
    if (pe == NULL)
        goto oom;
    if (strlen(host) >= sizeof(pe->host)) {
        free(pe);
        mc_set_error_detail("peer host name is too long");
        return MC_INVALID_PARAMS;
    }
    pe->tp = tp;
    /* engines named "localhost" listen on 127.0.0.1 (engine.c); resolving
     * it here could try ::1 first and pay a refused connect every time */
    if (strcasecmp(host, "localhost") == 0)
        host = "127.0.0.1";
    memcpy(pe->host, host, strlen(host) + 1);
    pe->port       = port;
    pe->nlanes     = tp->lanes;
    pe->fds        = malloc(pe->nlanes * sizeof(*pe->fds));
    pe->free_stack = malloc(pe->nlanes * sizeof(*pe->free_stack));
    if ((pe->fds == NULL) || (pe->free_stack == NULL)) {
        free(pe->fds);
        free(pe->free_stack);
        free(pe);
        goto oom;
    }
    for (unsigned i = 0; i < pe->nlanes; i++) {
        pe->fds[i] = -1;
        /* lane 0 on top: the first requests share one connection */
        pe->free_stack[i] = pe->nlanes - 1 - i;
    }
    pe->nfree = pe->nlanes;
    pthread_mutex_init(&pe->mu, NULL);
    pthread_cond_init(&pe->cond, NULL);
    *peer_p = pe;
    return MC_OK;
oom:
    mc_set_error_detail("out of memory");
    return MC_INTERNAL_ERROR;
}

static void tcp_peer_close(void *priv, void *peer)
{
    mc_tcp_peer_t *pe = peer;
    (void)priv;
    for (unsigned i = 0; i < pe->nlanes; i++)
        if (pe->fds[i] >= 0)
            close(pe->fds[i]);
    pthread_cond_destroy(&pe->cond);
    pthread_mutex_destroy(&pe->mu);
    free(pe->fds);
    free(pe->free_stack);
    free(pe);
}

/* Take a free lane, waiting for one; each holder's I/O is bounded by the
 * socket timeouts, so the wait is too. */
static unsigned lane_get(mc_tcp_peer_t *pe)
{
    unsigned lane;
    pthread_mutex_lock(&pe->mu);
    while (pe->nfree == 0)
        pthread_cond_wait(&pe->cond, &pe->mu);
    lane = pe->free_stack[--pe->nfree];
    pthread_mutex_unlock(&pe->mu);
    return lane;
}

static void lane_put(mc_tcp_peer_t *pe, unsigned lane)
{
    pthread_mutex_lock(&pe->mu);
    pe->free_stack[pe->nfree++] = lane;
    pthread_cond_signal(&pe->cond);
    pthread_mutex_unlock(&pe->mu);
}

/*
 * Connect to host:port within timeout_ms, trying each resolved address.
 * Unlike a plain connect this leaves a precise errno behind (ETIMEDOUT,
 * ECONNREFUSED, ...) for the error detail.  Returns a blocking fd or -1.
 */
static int tcp_connect(const char *host, uint16_t port, int timeout_ms)
{
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[8];
    int fd = -1, err = EHOSTUNREACH, rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%u", (unsigned)port);
    rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        errno = (rc == EAI_SYSTEM) ? errno : EHOSTUNREACH;
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        err = errno;
        if (err == EINPROGRESS) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            socklen_t elen    = sizeof(err);
            do {
                rc = poll(&pfd, 1, timeout_ms);
            } while ((rc < 0) && (errno == EINTR));
            if (rc == 0)
                err = ETIMEDOUT;
            else if (rc < 0)
                err = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
                err = errno;
            if (err == 0)
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        errno = err;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Fail new connections to @p pe fast for TCP_PEER_DOWN_MS, saying @p why:
 * after a refused or timed-out connect, and after a request that got no
 * answer within the I/O timeout (dead, or its link cut), so the requests
 * that follow do not each wait for the same timeout. */
static void peer_mark_down(mc_tcp_peer_t *pe, const char *why)
{
    pthread_mutex_lock(&pe->mu);
    snprintf(pe->down_detail, sizeof(pe->down_detail), "%s", why);
    pe->down_since_ns = mc_now_ns();
    pthread_mutex_unlock(&pe->mu);
}

/* The transport's peer_revive: forget a down mark set before @p before_ns
 * (nanoseconds: a verdict reached in the millisecond a write began, by the
 * request just before it, is one from before the write). */
static void tcp_peer_revive(void *priv, void *peer, uint64_t before_ns)
{
    mc_tcp_peer_t *pe = peer;
    (void)priv;
    pthread_mutex_lock(&pe->mu);
    if (pe->down_since_ns < before_ns)
        pe->down_since_ns = 0;
    pthread_mutex_unlock(&pe->mu);
}

/* peer_mark_down after a request timed out. */
static void peer_timed_out(mc_tcp_peer_t *pe)
{
    char why[300];
    snprintf(why, sizeof(why), "%s:%u did not answer within %d s", pe->host,
             (unsigned)pe->port, pe->tp->io_timeout_s);
    peer_mark_down(pe, why);
}

/* Connect the lane; the caller owns the lane. */
static mc_status_t lane_connect(mc_tcp_peer_t *pe, unsigned lane)
{
    mc_tcp_t *tp = pe->tp;
    uint64_t now = mc_now_ns();
    int fd;

    pthread_mutex_lock(&pe->mu);
    if ((pe->down_since_ns != 0) &&
        (now < pe->down_since_ns + (uint64_t)TCP_PEER_DOWN_MS * 1000000u)) {
        mc_set_error_detail("%s (peer marked down for %u ms)", pe->down_detail,
                            TCP_PEER_DOWN_MS);
        pthread_mutex_unlock(&pe->mu);
        return MC_TRANSFER_FAIL;
    }
    pthread_mutex_unlock(&pe->mu);
    fd = tcp_connect(pe->host, pe->port, tp->connect_timeout_ms);
    if (fd < 0) {
        char why[300];
        snprintf(why, sizeof(why), "cannot connect to %s:%u: %s", pe->host,
                 (unsigned)pe->port, strerror(errno));
        peer_mark_down(pe, why);
        mc_set_error_detail("%s", why);
        mc_debug("%s", why);
        return MC_TRANSFER_FAIL;
    }
    mc_tcp_tune(fd, tp->io_timeout_s);
    if ((tp->te->auth != NULL) &&
        (mc_auth_client_fd(tp->te->auth, fd, MC_AUTH_SVC_TE, NULL, TCP_AUTH_TIMEOUT_MS) != 0)) {
        char why[300];
        snprintf(why, sizeof(why), "%s", mc_last_error_detail());
        close(fd);
        mc_set_error_detail("data connection to %s:%u: %s", pe->host, (unsigned)pe->port, why);
        mc_log_ratelimited(MC_LOG_WARN, "%s", mc_last_error_detail());
        return MC_TRANSFER_FAIL;
    }
    pe->fds[lane] = fd;
    return MC_OK;
}

static void lane_drop(mc_tcp_peer_t *pe, unsigned lane)
{
    if (pe->fds[lane] >= 0)
        close(pe->fds[lane]);
    pe->fds[lane] = -1;
}

/* Map a status answered by the target to what we report: the codes a
 * target sends pass through, anything else is a transfer failure. */
static mc_status_t remote_status(int32_t s)
{
    switch (s) {
    case MC_INVALID_READ:
    case MC_INVALID_WRITE:
    case MC_INVALID_PARAMS:
    case MC_NOT_SUPPORTED:
    case MC_INTERNAL_ERROR:
    case MC_OBJECT_NOT_FOUND:    /* DISK_READ */
    case MC_NO_AVAILABLE_HANDLE: /* DISK_READ: the holder is busy */
    case MC_DESERIALIZE_FAIL:
        return (mc_status_t)s;
    default:
        return MC_TRANSFER_FAIL;
    }
}

/* What follows a request header besides a WRITE's payload: DISK_READ's
 * prefix, key and path (docs/protocol.md §5.16); NULL for other requests. */
typedef struct req_tail {
    struct iovec v[3];
} req_tail_t;

/* 1 for the requests answered with exactly their length of bytes. */
static int opcode_reads(uint8_t opcode)
{
    return (opcode == MC_TE_OPC_READ) || (opcode == MC_TE_OPC_DISK_READ) ||
           (opcode == MC_TE_OPC_READV) || (opcode == MC_TE_OPC_READV_STRIDED);
}

/* Send one request (a WRITE with its payload, a DISK_READ with @p tail).
 * Returns 0; or 1 when the
 * send failed but the answer may still be read (*send_errno_p set: the
 * target may have refused a write and closed, its answer still waiting in
 * our receive queue); or -1 when the send timed out (detail set). */
static int lane_send(mc_tcp_peer_t *pe, int fd, uint8_t opcode, void *local, uint64_t remote,
                     uint64_t len, uint64_t gen, const req_tail_t *tail, int *send_errno_p)
{
    uint8_t req[MC_TE_REQ_HDR_SIZE];
    struct iovec iov[5];
    int n = 1;

    mc_te_req_encode_gen(req, opcode, remote, len, gen);
    iov[0].iov_base = req;
    iov[0].iov_len  = sizeof(req);
    if ((opcode == MC_TE_OPC_WRITE) || (opcode == MC_TE_OPC_RDMA_CONNECT)) {
        iov[1].iov_base = local;
        iov[1].iov_len  = (size_t)len;
        n               = (len > 0) ? 2 : 1;
    } else if (tail != NULL) {
        memcpy(&iov[1], tail->v, sizeof(tail->v));
        n = 4;
    }
    if (mc_writev_full(fd, iov, n) == 0)
        return 0;
    *send_errno_p = errno;
    if ((errno == EAGAIN) || (errno == EWOULDBLOCK)) {
        mc_set_error_detail("sending to %s:%u timed out", pe->host, (unsigned)pe->port);
        peer_timed_out(pe);
        return -1;
    }
    return 1;
}

/*
 * Check the answer header @p rb (@p got bytes of answer received so far)
 * to a request of [remote, +len): MC_OK when the payload, if any, follows;
 * otherwise the status to report, with the detail set, and *keep_p says
 * whether the connection may be reused.  A READ must be answered with
 * exactly its length.
 */
static mc_status_t answer_check(mc_tcp_peer_t *pe, const uint8_t *rb, size_t got, uint8_t opcode,
                                uint64_t remote, uint64_t len, int send_failed, int send_errno,
                                mc_te_resp_hdr_t *resp, int *keep_p)
{
    *keep_p = 0;
    if (mc_te_resp_decode(rb, resp) != 0) {
        mc_set_error_detail("malformed answer from %s:%u", pe->host, (unsigned)pe->port);
        return MC_TRANSFER_FAIL;
    }
    if (resp->status != 0) {
        if (resp->length != 0) {
            mc_set_error_detail("malformed error answer from %s:%u", pe->host,
                                (unsigned)pe->port);
            return MC_TRANSFER_FAIL;
        }
        mc_set_error_detail("%s:%u refused the %s of [0x%llx, +%llu): %s", pe->host,
                            (unsigned)pe->port,
                            (opcode == MC_TE_OPC_DISK_READ)      ? "disk read"
                            : (opcode == MC_TE_OPC_READ)         ? "read"
                            : (opcode == MC_TE_OPC_READV)        ? "gathered read (ranges, bytes)"
                            : (opcode == MC_TE_OPC_READV_STRIDED)
                                ? "strided gathered read (entries, bytes)"
                            : (opcode == MC_TE_OPC_WRITE)        ? "write"
                            : (opcode == MC_TE_OPC_RDMA_CONNECT) ? "rdma handshake"
                                                                 : "describe",
                            (unsigned long long)remote, (unsigned long long)len,
                            mc_status_name(resp->status));
        /* a refused write is followed by a close on the target's side; an
         * error answer carries no payload, so bytes after it break framing */
        *keep_p = (opcode != MC_TE_OPC_WRITE) && !send_failed && (got == MC_TE_RESP_HDR_SIZE);
        return remote_status(resp->status);
    }
    if (send_failed) {
        mc_set_error_detail("sending to %s:%u failed: %s", pe->host, (unsigned)pe->port,
                            strerror(send_errno));
        return MC_TRANSFER_FAIL;
    }
    if (opcode_reads(opcode) && (resp->length != len)) {
        mc_set_error_detail("%s:%u answered %llu bytes for a read of %llu", pe->host,
                            (unsigned)pe->port, (unsigned long long)resp->length,
                            (unsigned long long)len);
        return MC_TRANSFER_FAIL;
    }
    return MC_OK;
}

/* Receive and check the answer to a request sent by lane_send (see
 * lane_request for *stale_p and *keep_p). */
static mc_status_t lane_answer(mc_tcp_peer_t *pe, int fd, uint8_t opcode, void *local,
                               uint64_t remote, uint64_t len, int send_failed, int send_errno,
                               char **payload_p, size_t *payload_len_p, int *stale_p,
                               int *keep_p)
{
    uint8_t rb[MC_TE_RESP_HDR_SIZE];
    mc_te_resp_hdr_t resp;
    size_t got = 0;
    mc_status_t st;

    *stale_p = 0;
    *keep_p  = 0;
    /* A READ's payload may arrive with its header: take both in one receive. */
    if (recv_head(fd, rb, opcode_reads(opcode) ? local : NULL,
                  opcode_reads(opcode) ? (size_t)len : 0, &got, pe->tp->busy_poll_us) != 0) {
        int e    = errno;
        *stale_p = (got == 0) && (e != EAGAIN) && (e != EWOULDBLOCK);
        mc_set_error_detail("%s %s:%u failed: %s",
                            send_failed ? "sending to" : "receiving the answer from", pe->host,
                            (unsigned)pe->port, strerror(send_failed ? send_errno : e));
        if ((e == EAGAIN) || (e == EWOULDBLOCK))
            peer_timed_out(pe);
        return MC_TRANSFER_FAIL;
    }
    st = answer_check(pe, rb, got, opcode, remote, len, send_failed, send_errno, &resp, keep_p);
    if (st != MC_OK)
        return st;
    switch (opcode) {
    case MC_TE_OPC_READ:
    case MC_TE_OPC_DISK_READ:
        if (recv_exact(fd, (uint8_t *)local + (got - sizeof(rb)), (size_t)len - (got - sizeof(rb)),
                       NULL) != 0) {
            mc_set_error_detail("reading %llu bytes from %s:%u failed: %s",
                                (unsigned long long)len, pe->host, (unsigned)pe->port,
                                strerror(errno));
            return MC_TRANSFER_FAIL;
        }
        break;
    case MC_TE_OPC_WRITE:
        if (resp.length != 0) {
            mc_set_error_detail("malformed write answer from %s:%u", pe->host,
                                (unsigned)pe->port);
            return MC_TRANSFER_FAIL;
        }
        break;
    default: { /* DESCRIBE, RDMA_CONNECT */
        char *buf;
        uint64_t max = (opcode == MC_TE_OPC_RDMA_CONNECT) ? MC_TE_HS_MAX : MC_TE_DESCRIBE_MAX;
        if (resp.length > max) {
            mc_set_error_detail("%s:%u sent a %llu-byte answer (limit %llu)", pe->host,
                                (unsigned)pe->port, (unsigned long long)resp.length,
                                (unsigned long long)max);
            return MC_TRANSFER_FAIL;
        }
        buf = malloc((size_t)resp.length + 1);
        if (buf == NULL) {
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
        if (recv_exact(fd, buf, (size_t)resp.length, NULL) != 0) {
            free(buf);
            mc_set_error_detail("reading the descriptor from %s:%u failed: %s", pe->host,
                                (unsigned)pe->port, strerror(errno));
            return MC_TRANSFER_FAIL;
        }
        buf[resp.length] = '\0';
        *payload_p       = buf;
        *payload_len_p   = (size_t)resp.length;
        break;
    }
    }
    *keep_p = 1;
    return MC_OK;
}

/*
 * One request on a connected lane.  *stale_p is set when the connection
 * failed before any byte of the answer arrived (a pooled connection the
 * peer had closed): the caller may retry on a fresh one.  *keep_p is
 * cleared when the connection must be dropped.  For DESCRIBE the payload
 * is returned in *payload_p (malloc'd, NUL-terminated).
 */
static mc_status_t lane_request(mc_tcp_peer_t *pe, int fd, uint8_t opcode, void *local,
                                uint64_t remote, uint64_t len, uint64_t gen,
                                const req_tail_t *tail, char **payload_p, size_t *payload_len_p,
                                int *stale_p, int *keep_p)
{
    int send_errno = 0,
        sent       = lane_send(pe, fd, opcode, local, remote, len, gen, tail, &send_errno);

    mc_te_sent_hook_run();
    if (sent < 0) {
        *stale_p = 0;
        *keep_p  = 0;
        return MC_TRANSFER_FAIL;
    }
    return lane_answer(pe, fd, opcode, local, remote, len, sent > 0, send_errno, payload_p,
                       payload_len_p, stale_p, keep_p);
}

/* One try of a request on the connected lane @p fd (lane_request's
 * contract for *stale_p and *keep_p). */
typedef mc_status_t (*lane_try_func_t)(mc_tcp_peer_t *pe, int fd, void *arg, int *stale_p,
                                       int *keep_p);

/* Run one request on a pooled lane, retrying once on a fresh connection
 * when a reused one turns out to be dead before answering (READ, WRITE and
 * the reads below are idempotent). */
static mc_status_t peer_retry(mc_tcp_peer_t *pe, lane_try_func_t fn, void *arg)
{
    unsigned lane  = lane_get(pe);
    mc_status_t st = MC_TRANSFER_FAIL;

    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = pe->fds[lane] >= 0, stale = 0, keep = 0;
        if (!reused) {
            st = lane_connect(pe, lane);
            if (st != MC_OK)
                break;
        }
        st = fn(pe, pe->fds[lane], arg, &stale, &keep);
        if (!keep)
            lane_drop(pe, lane);
        if ((st == MC_OK) || !stale || !reused)
            break;
        mc_debug("pooled connection to %s:%u was closed by the peer; reconnecting", pe->host,
                 (unsigned)pe->port);
    }
    lane_put(pe, lane);
    return st;
}

/* A request of lane_request's, as peer_retry runs it. */
typedef struct plain_req {
    uint8_t opcode;
    void *local;
    uint64_t remote, len, gen;
    const req_tail_t *tail;
    char **payload_p;
    size_t *payload_len_p;
} plain_req_t;

static mc_status_t plain_try(mc_tcp_peer_t *pe, int fd, void *arg, int *stale_p, int *keep_p)
{
    const plain_req_t *q = arg;
    return lane_request(pe, fd, q->opcode, q->local, q->remote, q->len, q->gen, q->tail,
                        q->payload_p, q->payload_len_p, stale_p, keep_p);
}

static mc_status_t peer_request(mc_tcp_peer_t *pe, uint8_t opcode, void *local, uint64_t remote,
                                uint64_t len, uint64_t gen, const req_tail_t *tail,
                                char **payload_p, size_t *payload_len_p)
{
    plain_req_t q = {opcode, local, remote, len, gen, tail, payload_p, payload_len_p};
    return peer_retry(pe, plain_try, &q);
}

/* Take a free lane without waiting; 1 when one was taken. */
static int lane_try_get(mc_tcp_peer_t *pe, unsigned *lane_p)
{
    int ok;
    pthread_mutex_lock(&pe->mu);
    ok = pe->nfree > 0;
    if (ok)
        *lane_p = pe->free_stack[--pe->nfree];
    pthread_mutex_unlock(&pe->mu);
    return ok;
}

/* Finish one answer of spread_drain_reads: record its status, drop the
 * connection unless it may be reused, and mark it done. */
static void spread_done(mc_tcp_peer_t *pe, unsigned lane, mc_status_t *st_p, size_t *got_p,
                        size_t *pending_p, mc_status_t status, int keep)
{
    *st_p = status;
    if (!keep)
        lane_drop(pe, lane);
    *got_p = SIZE_MAX; /* done */
    (*pending_p)--;
}

/*
 * Receive the answers of READs sent on lanes[0..m) (those with sent[j] >= 0)
 * all at once: poll the connections and take whatever arrived on each, so
 * that every connection keeps draining and no target thread stalls on a
 * full window while another connection is being read.  Each answer is its
 * header then its payload, received straight into place (payload bytes
 * that arrive with the header land in v[j].local, as in recv_head).
 * Sets st[j]; drops the lanes that must not be reused; again[j] marks a
 * reused connection that was closed before answering (to run again).  A
 * wait with no progress on any connection for the I/O timeout fails the
 * ones still pending.
 */
static void spread_drain_reads(mc_tcp_peer_t *pe, const unsigned *lanes, const mc_te_xfer_t *v,
                               size_t m, const int *sent, const int *serr, const int *reused,
                               mc_status_t *st, int *again)
{
    uint8_t hdr[MC_TE_SPREAD_MAX][MC_TE_RESP_HDR_SIZE];
    size_t got[MC_TE_SPREAD_MAX];
    int checked[MC_TE_SPREAD_MAX];
    struct pollfd pfd[MC_TE_SPREAD_MAX];
    size_t map[MC_TE_SPREAD_MAX];
    int timeout_ms = (pe->tp->io_timeout_s > 0) ? pe->tp->io_timeout_s * 1000 : -1;
    size_t pending = 0, j;

    for (j = 0; j < m; j++) {
        got[j]     = 0;
        checked[j] = 0;
        again[j]   = 0;
        if (sent[j] >= 0) {
            st[j] = MC_TRANSFER_FAIL;
            pending++;
        }
    }
    while (pending > 0) {
        size_t np = 0;
        int rc;
        for (j = 0; j < m; j++) {
            if ((sent[j] < 0) || (got[j] == SIZE_MAX))
                continue;
            pfd[np].fd      = pe->fds[lanes[j]];
            pfd[np].events  = POLLIN;
            pfd[np].revents = 0;
            map[np++]       = j;
        }
        rc = poll(pfd, (nfds_t)np, timeout_ms);
        if ((rc < 0) && (errno == EINTR))
            continue;
        if (rc <= 0) {
            mc_set_error_detail("receiving answers from %s:%u failed: %s", pe->host,
                                (unsigned)pe->port, (rc == 0) ? "timed out" : strerror(errno));
            for (size_t q = 0; q < np; q++)
                spread_done(pe, lanes[map[q]], &st[map[q]], &got[map[q]], &pending,
                            MC_TRANSFER_FAIL, 0);
            break;
        }
        for (size_t q = 0; q < np; q++) {
            size_t len = (size_t)v[map[q]].len;
            struct iovec iov[2];
            struct msghdr mh;
            mc_te_resp_hdr_t resp;
            ssize_t n;
            j = map[q];
            if (pfd[q].revents == 0)
                continue;
            memset(&mh, 0, sizeof(mh));
            if (got[j] < MC_TE_RESP_HDR_SIZE) {
                iov[0].iov_base = hdr[j] + got[j];
                iov[0].iov_len  = MC_TE_RESP_HDR_SIZE - got[j];
                iov[1].iov_base = v[j].local;
                iov[1].iov_len  = len;
                mh.msg_iovlen   = 2;
            } else {
                iov[0].iov_base = (uint8_t *)v[j].local + (got[j] - MC_TE_RESP_HDR_SIZE);
                iov[0].iov_len  = len - (got[j] - MC_TE_RESP_HDR_SIZE);
                mh.msg_iovlen   = 1;
            }
            mh.msg_iov = iov;
            n          = recvmsg(pfd[q].fd, &mh, MSG_DONTWAIT);
            if (n < 0) {
                if ((errno == EINTR) || (errno == EAGAIN) || (errno == EWOULDBLOCK))
                    continue;
            }
            if (n <= 0) {
                int e    = (n == 0) ? ECONNRESET : errno;
                again[j] = (got[j] == 0) && reused[j];
                mc_set_error_detail("%s %s:%u failed: %s",
                                    (sent[j] > 0) ? "sending to" : "receiving the answer from",
                                    pe->host, (unsigned)pe->port, strerror(e));
                spread_done(pe, lanes[j], &st[j], &got[j], &pending, MC_TRANSFER_FAIL, 0);
                continue;
            }
            got[j] += (size_t)n;
            if (got[j] < MC_TE_RESP_HDR_SIZE)
                continue;
            if (!checked[j]) {
                int keep;
                mc_status_t a;
                checked[j] = 1;
                a = answer_check(pe, hdr[j], got[j], MC_TE_OPC_READ, v[j].remote, v[j].len,
                                 sent[j] > 0, serr[j], &resp, &keep);
                if (a != MC_OK) {
                    spread_done(pe, lanes[j], &st[j], &got[j], &pending, a, keep);
                    continue;
                }
            }
            if (got[j] == MC_TE_RESP_HDR_SIZE + len)
                spread_done(pe, lanes[j], &st[j], &got[j], &pending, MC_OK, 1);
        }
    }
}

/*
 * The slices of one large READ at once, from the calling thread alone
 * (engine.h, mc_te_tp_xfer_spread): every request goes out on its own
 * lane before any answer is read, so the target's connection threads
 * send in parallel while this thread drains every connection as its bytes
 * arrive (spread_drain_reads).
 * Compared with handing slices to worker threads, nothing is woken but
 * the target's threads, and nobody waits for a completion signal.
 *
 * Lanes: the first is waited for like any request; the others are taken
 * only when free, so this never waits while holding a lane.  Requests
 * that found no lane, and those whose pooled connection turned out to be
 * closed by the peer before answering, run afterwards through
 * peer_request (which retries such a connection once, as every request
 * does).
 */
static void tcp_xfer_spread(void *priv, void *peer, mc_te_op_t op, const mc_te_xfer_t *v,
                            size_t n, mc_status_t *st)
{
    mc_tcp_peer_t *pe = peer;
    uint8_t opcode    = (op == MC_TE_READ) ? MC_TE_OPC_READ : MC_TE_OPC_WRITE;
    unsigned lanes[MC_TE_SPREAD_MAX];
    int sent[MC_TE_SPREAD_MAX], serr[MC_TE_SPREAD_MAX], reused[MC_TE_SPREAD_MAX];
    int again[MC_TE_SPREAD_MAX];
    size_t m = 0, j;

    (void)priv;
    if (n == 0)
        return;
    lanes[m++] = lane_get(pe);
    while ((m < n) && (m < MC_TE_SPREAD_MAX) && lane_try_get(pe, &lanes[m]))
        m++;
    for (j = 0; j < m; j++) {
        again[j]  = 0;
        serr[j]   = 0;
        reused[j] = pe->fds[lanes[j]] >= 0;
        if (!reused[j]) {
            st[j] = lane_connect(pe, lanes[j]);
            if (st[j] != MC_OK) {
                sent[j] = -1;
                continue;
            }
        }
        sent[j] = lane_send(pe, pe->fds[lanes[j]], opcode, v[j].local, v[j].remote, v[j].len,
                            v[j].gen, NULL, &serr[j]);
        if (sent[j] < 0) {
            st[j] = MC_TRANSFER_FAIL;
            lane_drop(pe, lanes[j]);
        }
    }
    mc_te_sent_hook_run();
    if (opcode == MC_TE_OPC_READ) {
        spread_drain_reads(pe, lanes, v, m, sent, serr, reused, st, again);
    } else {
        for (j = 0; j < m; j++) {
            int stale = 0, keep = 0;
            if (sent[j] < 0)
                continue;
            st[j] = lane_answer(pe, pe->fds[lanes[j]], opcode, v[j].local, v[j].remote,
                                v[j].len, sent[j] > 0, serr[j], NULL, NULL, &stale, &keep);
            if (!keep)
                lane_drop(pe, lanes[j]);
            again[j] = (st[j] != MC_OK) && stale && reused[j];
        }
    }
    for (j = 0; j < m; j++)
        lane_put(pe, lanes[j]);
    for (j = 0; j < n; j++) {
        if ((j >= m) || again[j]) {
            if (j < m)
                mc_debug("pooled connection to %s:%u was closed by the peer; reconnecting",
                         pe->host, (unsigned)pe->port);
            st[j] = peer_request(pe, opcode, v[j].local, v[j].remote, v[j].len, v[j].gen, NULL,
                                 NULL, NULL);
        }
    }
}

/* Bytes received ahead of the sequential answer parser (see
 * rx_read_run_bulk); consumed before the socket. */
typedef struct rx_pending {
    uint8_t *buf;
    size_t len;
    size_t off;
} rx_pending_t;

/* recv_exact into a then b, taking pending bytes first.  *got_p (optional)
 * counts everything that arrived for this call. */
static int rx_take(int fd, rx_pending_t *pd, void *a, size_t alen, void *b, size_t blen,
                   size_t *got_p)
{
    uint8_t *pa = a, *pb = b;
    size_t got  = 0, more = 0;
    int rc;
    if (pd->off < pd->len) {
        size_t k = MC_MIN(alen, pd->len - pd->off);
        memcpy(pa, pd->buf + pd->off, k);
        pd->off += k;
        pa += k;
        alen -= k;
        got += k;
        k = MC_MIN(blen, pd->len - pd->off);
        if (k > 0) {
            memcpy(pb, pd->buf + pd->off, k);
            pd->off += k;
            pb += k;
            blen -= k;
            got += k;
        }
    }
    if (alen == 0) {
        rc = (blen == 0) ? 0 : recv_exact(fd, pb, blen, &more);
    } else if (blen == 0) {
        rc = recv_exact(fd, pa, alen, &more);
    } else {
        rc = recv_exact2(fd, pa, alen, pb, blen);
    }
    if (got_p != NULL)
        *got_p = got + more;
    return rc;
}

/*
 * Receive the answers of a READ run in as few system calls as possible:
 * one iovec spans every answer header and payload in the order the target
 * sends them when every read succeeds, and recvmsg fills it with whatever
 * has arrived.  Headers are checked as they complete.  A refused read is
 * answered by a header alone, so everything received after it is out of
 * place: those bytes are moved to @p pd and the caller parses the rest of
 * the run one answer at a time.  (The destination of the refused read may
 * have received some of them; its content is undefined anyway.)
 *
 * Returns the number of answers verified OK (st[] set for them); *next_p
 * is then 1 when answer [returned index] has its header in @p hdr_out
 * (divergence), 0 when all were received.  Returns -1 with errno on a
 * receive failure, *done_p giving the answers verified before it and
 * *recvd_p the bytes received.
 */
static ssize_t rx_read_run_bulk(int fd, const mc_te_xfer_t *v, size_t n, mc_status_t *st,
                                uint8_t hdr_out[MC_TE_RESP_HDR_SIZE], int *next_p,
                                rx_pending_t *pd, size_t *done_p, size_t *recvd_p,
                                unsigned spin_us)
{
    uint8_t hdrs[MC_TE_RUN_MAX_ITEMS][MC_TE_RESP_HDR_SIZE];
    struct iovec iov[2 * MC_TE_RUN_MAX_ITEMS];
    size_t cur = 0, niov = 2 * n, recvd = 0, parsed = 0, done = 0;
    mc_te_resp_hdr_t resp;

    *next_p = 0;
    for (size_t j = 0; j < n; j++) {
        iov[2 * j].iov_base     = hdrs[j];
        iov[2 * j].iov_len      = MC_TE_RESP_HDR_SIZE;
        iov[2 * j + 1].iov_base = v[j].local;
        iov[2 * j + 1].iov_len  = (size_t)v[j].len;
    }
    (void)mc_spin_readable(fd, spin_us);
    while (done < n) {
        struct msghdr mh;
        ssize_t got;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = &iov[cur];
        mh.msg_iovlen = MC_MIN(niov - cur, (size_t)IOV_MAX);
        got           = recvmsg(fd, &mh, 0);
        if (got <= 0) {
            if ((got < 0) && (errno == EINTR))
                continue;
            if (got == 0)
                errno = ECONNRESET;
            *done_p  = done;
            *recvd_p = recvd;
            return -1;
        }
        recvd += (size_t)got;
        for (size_t left = (size_t)got; left > 0;) {
            size_t k = MC_MIN(left, iov[cur].iov_len);
            iov[cur].iov_base = (uint8_t *)iov[cur].iov_base + k;
            iov[cur].iov_len -= k;
            left -= k;
            if (iov[cur].iov_len == 0)
                cur++;
        }
        /* verify every answer that completed */
        while ((done < n) && (recvd >= parsed + MC_TE_RESP_HDR_SIZE)) {
            if ((mc_te_resp_decode(hdrs[done], &resp) != 0) || (resp.status != 0) ||
                (resp.length != v[done].len)) {
                /* divergence: move what arrived after this header aside */
                size_t extra = recvd - parsed - MC_TE_RESP_HDR_SIZE, off = 0;
                memcpy(hdr_out, hdrs[done], MC_TE_RESP_HDR_SIZE);
                *next_p = 1;
                if (extra > 0) {
                    pd->buf = malloc(extra);
                    if (pd->buf == NULL) {
                        errno    = ENOMEM;
                        *done_p  = done;
                        *recvd_p = recvd;
                        return -1;
                    }
                    /* the misplaced bytes fill payload[done], hdr[done+1], ... in order */
                    for (size_t q = 2 * done + 1; off < extra; q++) {
                        const uint8_t *base = (q % 2) ? (const uint8_t *)v[q / 2].local
                                                      : hdrs[q / 2];
                        size_t cap = (q % 2) ? (size_t)v[q / 2].len : MC_TE_RESP_HDR_SIZE;
                        size_t k   = MC_MIN(cap, extra - off);
                        memcpy(pd->buf + off, base, k);
                        off += k;
                    }
                    pd->len = extra;
                    pd->off = 0;
                }
                return (ssize_t)done;
            }
            if (recvd < parsed + MC_TE_RESP_HDR_SIZE + v[done].len)
                break;
            parsed += MC_TE_RESP_HDR_SIZE + v[done].len;
            st[done++] = MC_OK;
        }
    }
    return (ssize_t)done;
}

/*
 * A pipelined run on a connected lane: every request goes out first (one
 * sendmsg when it fits), then the answers are read in order.  Only one
 * direction per run, which is what keeps this deadlock-free: a READ run
 * sends at most MC_TE_RUN_MAX_ITEMS headers (2 KiB, always room in the
 * socket buffer) before it starts draining the answers, and a WRITE run's
 * answers are 16 bytes each, so the target never blocks sending them while
 * we are still sending payload.
 *
 * *answered_p counts the leading requests whose status is final.  The rest
 * were not processed by the target (it closed after refusing a write, or
 * the connection died): the caller may run them again on a new connection.
 * *stale_p: nothing at all came back on this connection.
 */
/* Parse answers j0..n-1 one at a time (WRITE runs, and a READ run after a
 * refused read; see rx_read_run_bulk).  @p pre: answer j0's header when it
 * was already received.  Returns 1 when every answer was parsed. */
static int lane_parse_seq(mc_tcp_peer_t *pe, int fd, uint8_t opcode, const mc_te_xfer_t *v,
                          size_t n, size_t j0, const uint8_t *pre, rx_pending_t *pd,
                          int send_failed, int send_errno, mc_status_t *st,
                          size_t *answered_p, int *stale_p)
{
    uint8_t rb[MC_TE_RESP_HDR_SIZE], next_rb[MC_TE_RESP_HDR_SIZE];
    int have_next = 0;
    mc_te_resp_hdr_t resp;
    size_t j;

    if (pre != NULL) {
        memcpy(next_rb, pre, sizeof(next_rb));
        have_next = 1;
    } else if (pd->off >= pd->len) {
        (void)mc_spin_readable(fd, pe->tp->busy_poll_us);
    }
    for (j = j0; j < n; j++) {
        size_t got = 0;
        if (have_next) {
            /* the header of answer j came in with payload j-1 */
            memcpy(rb, next_rb, sizeof(rb));
            have_next = 0;
        } else if (rx_take(fd, pd, rb, sizeof(rb), NULL, 0, &got) != 0) {
            int e    = errno;
            *stale_p = (j == 0) && (got == 0) && (e != EAGAIN) && (e != EWOULDBLOCK);
            mc_set_error_detail("%s %s:%u failed: %s",
                                send_failed ? "sending to" : "receiving an answer from",
                                pe->host, (unsigned)pe->port,
                                strerror(send_failed ? send_errno : e));
            if ((e == EAGAIN) || (e == EWOULDBLOCK)) {
                /* the target may still be working on them: do not resend */
                for (; j < n; j++)
                    st[j] = MC_TRANSFER_FAIL;
                *answered_p = n;
            } else {
                *answered_p = j;
            }
            return 0;
        }
        if ((mc_te_resp_decode(rb, &resp) != 0) ||
            ((resp.status != 0) && (resp.length != 0)) ||
            ((resp.status == 0) &&
             (resp.length != ((opcode == MC_TE_OPC_READ) ? v[j].len : 0)))) {
            mc_set_error_detail("malformed answer from %s:%u", pe->host, (unsigned)pe->port);
            for (; j < n; j++)
                st[j] = MC_TRANSFER_FAIL;
            *answered_p = n;
            return 0;
        }
        if (resp.status != 0) {
            mc_set_error_detail("%s:%u refused the %s of [0x%llx, +%llu): %s", pe->host,
                                (unsigned)pe->port, (opcode == MC_TE_OPC_READ) ? "read" : "write",
                                (unsigned long long)v[j].remote, (unsigned long long)v[j].len,
                                mc_status_name(resp.status));
            st[j] = remote_status(resp.status);
            if (opcode == MC_TE_OPC_WRITE) {
                *answered_p = j + 1; /* the target closed: the rest were not run */
                return 0;
            }
            continue;
        }
        if (opcode == MC_TE_OPC_READ) {
            /* payload j and the header of answer j+1 (if any) in one receive */
            int more = (j + 1 < n);
            if (rx_take(fd, pd, v[j].local, (size_t)v[j].len, more ? next_rb : NULL,
                        more ? sizeof(next_rb) : 0, NULL) != 0) {
                mc_set_error_detail("reading %llu bytes from %s:%u failed: %s",
                                    (unsigned long long)v[j].len, pe->host, (unsigned)pe->port,
                                    strerror(errno));
                for (; j < n; j++)
                    st[j] = MC_TRANSFER_FAIL;
                *answered_p = n;
                return 0;
            }
            have_next = more;
        }
        st[j] = MC_OK;
    }
    *answered_p = n;
    return 1;
}

static void lane_run(mc_tcp_peer_t *pe, int fd, uint8_t opcode, const mc_te_xfer_t *v, size_t n,
                     mc_status_t *st, size_t *answered_p, int *stale_p, int *keep_p)
{
    uint8_t hdrs[MC_TE_RUN_MAX_ITEMS][MC_TE_REQ_HDR_SIZE];
    struct iovec iov[2 * MC_TE_RUN_MAX_ITEMS];
    uint8_t pre[MC_TE_RESP_HDR_SIZE];
    rx_pending_t pd = {NULL, 0, 0};
    size_t j0 = 0;
    int diverged = 0;
    int niov = 0, send_failed = 0, send_errno = 0;
    size_t j;

    *answered_p = 0;
    *stale_p    = 0;
    *keep_p     = 0;
    for (j = 0; j < n; j++) {
        mc_te_req_encode_gen(hdrs[j], opcode, v[j].remote, v[j].len, v[j].gen);
        iov[niov].iov_base = hdrs[j];
        iov[niov].iov_len  = MC_TE_REQ_HDR_SIZE;
        niov++;
        if (opcode == MC_TE_OPC_WRITE) {
            iov[niov].iov_base = v[j].local;
            iov[niov].iov_len  = (size_t)v[j].len;
            niov++;
        }
    }
    if (mc_writev_full(fd, iov, niov) != 0) {
        send_failed = 1;
        send_errno  = errno;
    }
    mc_te_sent_hook_run();
    if (send_failed) {
        if ((send_errno == EAGAIN) || (send_errno == EWOULDBLOCK)) {
            mc_set_error_detail("sending to %s:%u timed out", pe->host, (unsigned)pe->port);
            peer_timed_out(pe);
            for (j = 0; j < n; j++)
                st[j] = MC_TRANSFER_FAIL;
            *answered_p = n;
            return;
        }
    }
    if ((opcode == MC_TE_OPC_READ) && (n >= 2) && !send_failed) {
        size_t done = 0, recvd = 0;
        ssize_t r = rx_read_run_bulk(fd, v, n, st, pre, &diverged, &pd, &done, &recvd,
                                     pe->tp->busy_poll_us);
        if (r < 0) {
            int e = errno;
            mc_set_error_detail("receiving answers from %s:%u failed: %s", pe->host,
                                (unsigned)pe->port, strerror(e));
            if ((e == EAGAIN) || (e == EWOULDBLOCK))
                peer_timed_out(pe);
            if ((e == EAGAIN) || (e == EWOULDBLOCK) || (e == ENOMEM)) {
                for (j = done; j < n; j++)
                    st[j] = MC_TRANSFER_FAIL;
                *answered_p = n;
            } else {
                *answered_p = done;
                *stale_p    = (done == 0) && (recvd == 0);
            }
            free(pd.buf);
            return;
        }
        if (!diverged) {
            *answered_p = n;
            *keep_p     = 1;
            return;
        }
        j0 = (size_t)r;
    }
    *keep_p = lane_parse_seq(pe, fd, opcode, v, n, j0, diverged ? pre : NULL, &pd, send_failed,
                             send_errno, st, answered_p, stale_p) &&
              !send_failed;
    free(pd.buf);
}

static void tcp_xfer_run(void *priv, void *peer, mc_te_op_t op, const mc_te_xfer_t *v, size_t n,
                         mc_status_t *st)
{
    mc_tcp_peer_t *pe = peer;
    uint8_t opcode    = (op == MC_TE_READ) ? MC_TE_OPC_READ : MC_TE_OPC_WRITE;
    size_t done       = 0;
    int retried       = 0;
    unsigned lane;

    (void)priv;
    lane = lane_get(pe);
    while (done < n) {
        int reused = pe->fds[lane] >= 0, stale = 0, keep = 0;
        size_t answered = 0;
        mc_status_t cs;
        if (!reused) {
            cs = lane_connect(pe, lane);
            if (cs != MC_OK) {
                for (; done < n; done++)
                    st[done] = cs;
                break;
            }
        }
        lane_run(pe, pe->fds[lane], opcode, v + done, n - done, st + done, &answered, &stale,
                 &keep);
        if (!keep)
            lane_drop(pe, lane);
        if (answered > 0) {
            done += answered; /* progress: the rest (if any) go on a new connection */
            continue;
        }
        if (stale && reused && !retried) {
            retried = 1;
            mc_debug("pooled connection to %s:%u was closed by the peer; reconnecting",
                     pe->host, (unsigned)pe->port);
            continue;
        }
        for (; done < n; done++)
            st[done] = MC_TRANSFER_FAIL;
    }
    lane_put(pe, lane);
}


/* A scattered read as lane_scatter sends it: a READ of [addr, +len), or a
 * READV of addr ranges (its list in tail) adding up to len. */
typedef struct scatter_req {
    uint8_t opcode;
    uint64_t addr, len, gen;
    const req_tail_t *tail;
    const struct iovec *runs;
    size_t nruns;
} scatter_req_t;

/*
 * One scattered READ or READV on a connected lane (tcp_read_scatter,
 * tcp_read_gather): the request, then the answer header alone -- so a
 * refusal, which has no payload, never touches the runs -- then the
 * payload straight into the runs.  *stale_p and *keep_p as lane_request.
 */
static mc_status_t lane_scatter(mc_tcp_peer_t *pe, int fd, void *arg, int *stale_p,
                                int *keep_p)
{
    const scatter_req_t *q = arg;
    uint8_t rb[MC_TE_RESP_HDR_SIZE];
    mc_te_resp_hdr_t resp;
    int send_errno = 0, sent;
    size_t got = 0;
    mc_status_t st;

    *stale_p = 0;
    *keep_p  = 0;
    sent     = lane_send(pe, fd, q->opcode, NULL, q->addr, q->len, q->gen, q->tail, &send_errno);
    mc_te_sent_hook_run();
    if (sent < 0)
        return MC_TRANSFER_FAIL;
    (void)mc_spin_readable(fd, pe->tp->busy_poll_us);
    if (recv_exact(fd, rb, sizeof(rb), &got) != 0) {
        int e    = errno;
        *stale_p = (got == 0) && (e != EAGAIN) && (e != EWOULDBLOCK);
        mc_set_error_detail("%s %s:%u failed: %s",
                            (sent > 0) ? "sending to" : "receiving the answer from", pe->host,
                            (unsigned)pe->port, strerror((sent > 0) ? send_errno : e));
        if ((e == EAGAIN) || (e == EWOULDBLOCK))
            peer_timed_out(pe);
        return MC_TRANSFER_FAIL;
    }
    st = answer_check(pe, rb, got, q->opcode, q->addr, q->len, sent > 0, send_errno, &resp,
                      keep_p);
    if (st != MC_OK)
        return st;
    if (recv_scatter(fd, q->runs, q->nruns, &got) != 0) {
        int e = errno;
        mc_set_error_detail("reading %llu bytes into %zu runs from %s:%u failed after %zu: %s",
                            (unsigned long long)q->len, q->nruns, pe->host, (unsigned)pe->port,
                            got, strerror(e));
        if ((e == EAGAIN) || (e == EWOULDBLOCK))
            peer_timed_out(pe);
        return MC_TRANSFER_FAIL;
    }
    *keep_p = 1;
    return MC_OK;
}

/* The transport's read_scatter (mc_te_read_scatter_gen): one READ on a
 * pooled lane (peer_retry). */
static mc_status_t tcp_read_scatter(void *priv, void *peer, uint64_t remote, uint64_t len,
                                    uint64_t gen, const struct iovec *runs, size_t nruns)
{
    scatter_req_t q = {MC_TE_OPC_READ, remote, len, gen, NULL, runs, nruns};
    (void)priv;
    return peer_retry(peer, lane_scatter, &q);
}

/* The transport's read_gather (mc_te_read_gather_gen): one READV of the
 * ranges (1..MC_TE_READV_MAX_RANGES, adding up to @p len, at most
 * MC_TE_READV_MAX_LEN; the engine checked) on a pooled lane, its answer
 * received straight into the runs.  With MC_TE_GATHER_STRIDED (the peer
 * serves READV_STRIDED) the ranges go as strided entries
 * (mc_te_readvs_pack) where that makes the list shorter. */
static mc_status_t tcp_read_gather(void *priv, void *peer, const mc_te_range_t *ranges,
                                   size_t nranges, uint64_t len, uint64_t gen, unsigned flags,
                                   const struct iovec *runs, size_t nruns)
{
    uint8_t *list = malloc(nranges * (MC_TE_READV_ENTRY_SIZE + sizeof(mc_te_strided_t)));
    mc_tcp_t *tp  = priv;
    mc_te_strided_t *e;
    req_tail_t tail;
    scatter_req_t q = {MC_TE_OPC_READV, nranges, len, gen, &tail, runs, nruns};
    size_t m        = 0;
    mc_status_t st;

    if (list == NULL) {
        mc_set_error_detail("gathered read: out of memory for %zu ranges", nranges);
        return MC_INTERNAL_ERROR;
    }
    e = (mc_te_strided_t *)(void *)(list + nranges * MC_TE_READV_ENTRY_SIZE);
    memset(&tail, 0, sizeof(tail));
    if (flags & MC_TE_GATHER_STRIDED)
        m = mc_te_readvs_pack(ranges, nranges, e);
    if ((m > 0) && (m * MC_TE_READVS_ENTRY_SIZE < nranges * MC_TE_READV_ENTRY_SIZE)) {
        mc_te_readvs_encode(list, e, m);
        q.opcode           = MC_TE_OPC_READV_STRIDED;
        q.addr             = m;
        tail.v[0].iov_len  = m * MC_TE_READVS_ENTRY_SIZE;
        __atomic_add_fetch(&tp->te->readvs_ops, 1, __ATOMIC_RELAXED);
    } else {
        mc_te_readv_encode(list, ranges, nranges);
        tail.v[0].iov_len  = nranges * MC_TE_READV_ENTRY_SIZE;
    }
    tail.v[0].iov_base = list;
    st                 = peer_retry(peer, lane_scatter, &q);
    free(list);
    return st;
}

/* The transport's read_gather_strided (mc_te_read_gather_strided_gen): one
 * READV_STRIDED of the entries (checked by the engine) on a pooled lane,
 * its answer received straight into the runs. */
static mc_status_t tcp_read_gather_strided(void *priv, void *peer, const mc_te_strided_t *e,
                                           size_t n, uint64_t len, uint64_t gen,
                                           const struct iovec *runs, size_t nruns)
{
    uint8_t *list   = malloc(n * MC_TE_READVS_ENTRY_SIZE);
    req_tail_t tail;
    scatter_req_t q = {MC_TE_OPC_READV_STRIDED, n, len, gen, &tail, runs, nruns};
    mc_status_t st;

    (void)priv;
    if (list == NULL) {
        mc_set_error_detail("strided gathered read: out of memory for %zu entries", n);
        return MC_INTERNAL_ERROR;
    }
    memset(&tail, 0, sizeof(tail));
    mc_te_readvs_encode(list, e, n);
    tail.v[0].iov_base = list;
    tail.v[0].iov_len  = n * MC_TE_READVS_ENTRY_SIZE;
    st                 = peer_retry(peer, lane_scatter, &q);
    free(list);
    return st;
}

/* DISK_READ on a pooled lane (peer_request: retried once on a fresh
 * connection when a reused one turns out dead; the request only reads),
 * answered like a READ: exactly req->length bytes, or an error status. */
static mc_status_t tcp_disk_read(void *priv, void *peer, const mc_te_disk_req_t *req, void *buf)
{
    uint8_t prefix[MC_TE_DISK_PREFIX_SIZE];
    req_tail_t tail;

    (void)priv;
    if ((req->key_len == 0) || (req->key_len > MC_TE_DISK_KEY_MAX) || (req->path_len < 2) ||
        (req->path_len > MC_TE_DISK_PATH_MAX) || (req->length == 0) ||
        (req->length > (uint64_t)SIZE_MAX)) {
        mc_set_error_detail("disk read request out of range");
        return MC_INVALID_PARAMS;
    }
    mc_te_disk_prefix_encode(prefix, req->crc, (uint16_t)req->key_len, (uint16_t)req->path_len);
    tail.v[0].iov_base = prefix;
    tail.v[0].iov_len  = sizeof(prefix);
    tail.v[1].iov_base = (void *)req->key;
    tail.v[1].iov_len  = req->key_len;
    tail.v[2].iov_base = (void *)req->path;
    tail.v[2].iov_len  = req->path_len;
    return peer_request(peer, MC_TE_OPC_DISK_READ, buf, req->offset, req->length, 0, &tail, NULL,
                        NULL);
}

static mc_status_t tcp_describe(void *priv, void *peer, char **json_p, size_t *len_p)
{
    size_t len = 0;
    char *json = NULL;
    mc_status_t st;
    (void)priv;
    st = peer_request(peer, MC_TE_OPC_DESCRIBE, NULL, 0, 0, 0, NULL, &json, &len);
    if (st != MC_OK)
        return st;
    *json_p = json;
    if (len_p != NULL)
        *len_p = len;
    return MC_OK;
}

static mc_status_t tcp_xfer(void *priv, void *peer, mc_te_op_t op, void *local, uint64_t remote,
                            uint64_t len, uint64_t gen)
{
    (void)priv;
    if (len > (uint64_t)SIZE_MAX) {
        mc_set_error_detail("transfer of %llu bytes is too large", (unsigned long long)len);
        return MC_INVALID_PARAMS;
    }
    return peer_request(peer, (op == MC_TE_READ) ? MC_TE_OPC_READ : MC_TE_OPC_WRITE, local,
                        remote, len, gen, NULL, NULL, NULL);
}

const char *mc_tcp_peer_host(const void *peer)
{
    return ((const mc_tcp_peer_t *)peer)->host;
}

uint16_t mc_tcp_peer_port(const void *peer)
{
    return ((const mc_tcp_peer_t *)peer)->port;
}

mc_status_t mc_tcp_hs_call(void *peer, uint64_t conn_id, const uint8_t *req, size_t len,
                           uint8_t **resp_p, size_t *resp_len_p)
{
    char *resp = NULL;
    size_t rlen = 0;
    mc_status_t st;

    if ((len == 0) || (len > MC_TE_HS_MAX)) {
        mc_set_error_detail("rdma handshake record of %zu bytes (1..%u)", len, MC_TE_HS_MAX);
        return MC_INVALID_PARAMS;
    }
    st = peer_request(peer, MC_TE_OPC_RDMA_CONNECT, (void *)(uintptr_t)req, conn_id, len, 0, NULL,
                      &resp, &rlen);
    if (st != MC_OK)
        return st;
    *resp_p     = (uint8_t *)resp;
    *resp_len_p = rlen;
    return MC_OK;
}

const mc_te_transport_ops_t mc_tcp_transport_ops = {
    .size       = sizeof(mc_te_transport_ops_t),
    .name       = "tcp",
    .install    = tcp_install,
    .uninstall  = tcp_uninstall,
    .peer_open  = tcp_peer_open,
    .peer_close = tcp_peer_close,
    .describe   = tcp_describe,
    .xfer       = tcp_xfer,
    .xfer_run   = tcp_xfer_run,
    .xfer_spread = tcp_xfer_spread,
    .read_scatter = tcp_read_scatter,
    .read_gather = tcp_read_gather,
    .read_gather_strided = tcp_read_gather_strided,
    .disk_read  = tcp_disk_read,
    .runs_sent_hook = 1,
    .peer_revive = tcp_peer_revive,
};

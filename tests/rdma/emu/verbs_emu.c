/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in libibverbs.so.1 for tests (tests/rdma/emu/README.md).
 *
 * It implements, in user space and with the ABI of rdma-core 44's
 * <infiniband/verbs.h>, the verbs the rdma transport calls, so that the
 * verbs data path runs on machines without an RDMA NIC.  Never installed.
 *
 * The NIC.  Each device opened by a process gets a "port": a GID table and
 * LID unique to (process, device), a table of the QPs created on it, and a
 * service thread listening on $MC_VERBS_EMU_DIR/p-<id>.sock.  The service
 * thread plays the responder half of the NIC: it looks up the destination
 * QP, checks the rkey against the MRs of that QP's PD (range and access),
 * and copies into or out of the registered memory.  The application's
 * threads never take part, as with a real NIC.  Ports live until the
 * process exits (a NIC does not go away when a context is closed).
 *
 * The requester half is one worker thread per QP: WRs are executed one at
 * a time in post order (RC ordering), each as one request and one answer
 * on a stream socket to the target's port.  A WR whose target cannot be
 * reached (no socket, connection lost, no answer in time) completes with
 * IBV_WC_RETRY_EXC_ERR; a refused key or range with IBV_WC_REM_ACCESS_ERR;
 * then the QP is in ERR and everything behind the failure is flushed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* verbs.h turns these two into inline helpers; here they are the symbols */
#undef ibv_query_port
#undef ibv_reg_mr

#define EXPORT __attribute__((visibility("default")))

#define EMU_MAX_DEVS   16
#define EMU_GID_TBL    4
#define EMU_MAGIC      0x56455255u /* "VERU" */

enum { EMU_OP_WRITE = 1, EMU_OP_READ = 2 };
/* the responder's answer */
enum { EMU_ANS_OK = 0, EMU_ANS_ACCESS = 1, EMU_ANS_NOQP = 2 };

typedef struct emu_req {
    uint32_t magic;
    uint32_t op;
    uint32_t dest_qpn;
    uint32_t rkey;
    uint64_t addr;
    uint64_t len;
} emu_req_t;

typedef struct emu_ans {
    uint32_t magic;
    uint32_t status;
} emu_ans_t;

/* ---- configuration --------------------------------------------------------- */

typedef struct emu_cfg {
    char dir[90];            /* + "/p-xxxxxx.sock" fits sun_path */
    size_t ndev;
    char names[EMU_MAX_DEVS][IBV_SYSFS_NAME_MAX];
    int down[EMU_MAX_DEVS];
    uint64_t max_mr;
    int max_qp_wr;
    int max_qp;
    int max_cqe;
    int ib;                  /* link layer InfiniBand (else Ethernet/RoCE) */
    int mtu;                 /* enum ibv_mtu */
    int timeout_ms;
    int trace;
    int plain_ctx;           /* MC_VERBS_EMU_PLAIN_CONTEXT: no verbs_context */
} emu_cfg_t;

static emu_cfg_t cfg;

/* MC_VERBS_EMU_FAIL="verb:n,...": the n-th call (from 1) of each named verb
 * in this process fails as a NIC or driver out of resources would. */
#define EMU_MAX_FAILS 16
static struct {
    char verb[32];
    unsigned nth;
    unsigned calls;
} fails[EMU_MAX_FAILS];
static size_t nfails;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static struct ibv_device devs[EMU_MAX_DEVS];
static uint32_t node_id;     /* random per process: ports' addresses */
static uint32_t key_next;    /* MR keys */

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    va_list ap;
    if (!cfg.trace)
        return;
    va_start(ap, fmt);
    fprintf(stderr, "verbs-emu[%d]: ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    char *end;
    unsigned long long v;
    if ((s == NULL) || (*s == '\0'))
        return dflt;
    errno = 0;
    v     = strtoull(s, &end, 0);
    if ((errno != 0) || (*end != '\0')) {
        fprintf(stderr, "verbs-emu: %s=\"%s\" is not a number; using %llu\n", name, s,
                (unsigned long long)dflt);
        return dflt;
    }
    return v;
}

static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p != NULL) && (*p != '\0');) {
        const char *c = strchr(p, ',');
        size_t l      = (c != NULL) ? (size_t)(c - p) : strlen(p);
        if ((l == n) && (strncmp(p, name, n) == 0))
            return 1;
        p = (c != NULL) ? c + 1 : NULL;
    }
    return 0;
}

static void cfg_load(void)
{
    const char *s = getenv("MC_VERBS_EMU_DEVICES");
    const char *d = getenv("MC_VERBS_EMU_DIR");
    const char *down = getenv("MC_VERBS_EMU_DOWN");
    const char *link = getenv("MC_VERBS_EMU_LINK");
    struct timespec ts;

    if ((d != NULL) && (*d != '\0') && (strlen(d) >= sizeof(cfg.dir)))
        fprintf(stderr, "verbs-emu: MC_VERBS_EMU_DIR is longer than %zu bytes (a socket "
                "path must fit 108): using the default\n", sizeof(cfg.dir) - 1);
    if ((d != NULL) && (*d != '\0') && (strlen(d) < sizeof(cfg.dir)))
        snprintf(cfg.dir, sizeof(cfg.dir), "%s", d);
    else
        snprintf(cfg.dir, sizeof(cfg.dir), "/tmp/mc-verbs-emu-%u", (unsigned)getuid());
    (void)mkdir(cfg.dir, 0700);
    if (s == NULL)
        s = "mlx5_0";
    for (const char *p = s; (*p != '\0') && (cfg.ndev < EMU_MAX_DEVS);) {
        const char *c = strchr(p, ',');
        size_t l      = (c != NULL) ? (size_t)(c - p) : strlen(p);
        if ((l > 0) && (l < IBV_SYSFS_NAME_MAX)) {
            memcpy(cfg.names[cfg.ndev], p, l);
            cfg.names[cfg.ndev][l] = '\0';
            cfg.down[cfg.ndev]     = (down != NULL) && in_list(down, cfg.names[cfg.ndev]);
            cfg.ndev++;
        }
        if (c == NULL)
            break;
        p = c + 1;
    }
    cfg.max_mr     = env_u64("MC_VERBS_EMU_MAX_MR_SIZE", 1ull << 40);
    cfg.max_qp_wr  = (int)env_u64("MC_VERBS_EMU_MAX_QP_WR", 4096);
    cfg.max_qp     = (int)env_u64("MC_VERBS_EMU_MAX_QP", 1024);
    cfg.max_cqe    = (int)env_u64("MC_VERBS_EMU_MAX_CQE", 65536);
    cfg.mtu        = (int)env_u64("MC_VERBS_EMU_MTU", IBV_MTU_4096);
    cfg.timeout_ms = (int)env_u64("MC_VERBS_EMU_TIMEOUT_MS", 10000);
    cfg.trace      = env_u64("MC_VERBS_EMU_TRACE", 0) != 0;
    cfg.plain_ctx  = env_u64("MC_VERBS_EMU_PLAIN_CONTEXT", 0) != 0;
    cfg.ib         = (link != NULL) && (strcmp(link, "ib") == 0);
    if ((cfg.mtu < IBV_MTU_256) || (cfg.mtu > IBV_MTU_4096))
        cfg.mtu = IBV_MTU_4096;
    for (size_t i = 0; i < cfg.ndev; i++) {
        struct ibv_device *dv = &devs[i];
        dv->node_type      = IBV_NODE_CA;
        dv->transport_type = IBV_TRANSPORT_IB;
        snprintf(dv->name, sizeof(dv->name), "%s", cfg.names[i]);
        snprintf(dv->dev_name, sizeof(dv->dev_name), "uverbs%zu", i);
        snprintf(dv->dev_path, sizeof(dv->dev_path), "/sys/class/infiniband_verbs/uverbs%zu", i);
        snprintf(dv->ibdev_path, sizeof(dv->ibdev_path), "/sys/class/infiniband/%s",
                 cfg.names[i]);
    }
    s = getenv("MC_VERBS_EMU_FAIL");
    for (const char *p = s; (p != NULL) && (*p != '\0') && (nfails < EMU_MAX_FAILS);) {
        const char *c = strchr(p, ','), *colon = strchr(p, ':');
        size_t l      = (c != NULL) ? (size_t)(c - p) : strlen(p);
        if ((colon != NULL) && (colon < p + l) && ((size_t)(colon - p) < sizeof(fails[0].verb))) {
            memcpy(fails[nfails].verb, p, (size_t)(colon - p));
            fails[nfails].verb[colon - p] = '\0';
            fails[nfails].nth             = (unsigned)strtoul(colon + 1, NULL, 10);
            nfails++;
        }
        p = (c != NULL) ? c + 1 : NULL;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    node_id  = (uint32_t)((uint64_t)ts.tv_nsec * 2654435761u) ^ ((uint32_t)getpid() << 8);
    key_next = (node_id * 0x9e3779b9u) | 1u;
    trace("%zu device(s), dir %s, max_mr_size %llu", cfg.ndev, cfg.dir,
          (unsigned long long)cfg.max_mr);
}

/* Whether this call of @p verb is one MC_VERBS_EMU_FAIL names. */
static int emu_fail(const char *verb)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int hit = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nfails; i++)
        if ((strcmp(fails[i].verb, verb) == 0) && (++fails[i].calls == fails[i].nth))
            hit = 1;
    pthread_mutex_unlock(&mu);
    if (hit)
        trace("%s: failing as MC_VERBS_EMU_FAIL asks", verb);
    return hit;
}

static size_t dev_index(const struct ibv_device *d)
{
    return (size_t)(d - devs);
}

/* ---- I/O helpers ------------------------------------------------------------ */

static int io_full(int fd, const struct iovec *iov_in, int iovcnt, int wr)
{
    struct iovec iov[16];
    int n = 0;
    for (int i = 0; (i < iovcnt) && (n < 16); i++)
        if (iov_in[i].iov_len > 0)
            iov[n++] = iov_in[i];
    for (int i = 0; i < n;) {
        struct msghdr mh;
        ssize_t r;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = &iov[i];
        mh.msg_iovlen = (size_t)(n - i);
        r = wr ? sendmsg(fd, &mh, MSG_NOSIGNAL) : recvmsg(fd, &mh, MSG_WAITALL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        while ((i < n) && ((size_t)r >= iov[i].iov_len)) {
            r -= (ssize_t)iov[i].iov_len;
            i++;
        }
        if (i < n) {
            iov[i].iov_base = (char *)iov[i].iov_base + r;
            iov[i].iov_len -= (size_t)r;
        }
    }
    return 0;
}

static int send_full(int fd, const void *p, size_t len)
{
    struct iovec v = {(void *)(uintptr_t)p, len};
    return io_full(fd, &v, 1, 1);
}

static int recv_full(int fd, void *p, size_t len)
{
    struct iovec v = {p, len};
    return io_full(fd, &v, 1, 0);
}

/* Read and drop @p len bytes (a refused WRITE's payload). */
static int recv_drop(int fd, uint64_t len)
{
    char buf[16384];
    while (len > 0) {
        size_t k = (len < sizeof(buf)) ? (size_t)len : sizeof(buf);
        if (recv_full(fd, buf, k) != 0)
            return -1;
        len -= k;
    }
    return 0;
}

/* ---- ports: the per-(process, device) NIC -------------------------------------- */

struct emu_qp;

typedef struct emu_port {
    int used;
    uint32_t id;             /* 24 bits (16 with InfiniBand): socket name, GID, LID */
    union ibv_gid gid[EMU_GID_TBL];
    uint16_t lid;
    int lfd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    pthread_t thr;
    pthread_mutex_t mu;      /* qps, next_qpn */
    struct emu_qp *qps;
    uint32_t next_qpn;
    int nqps;
    int stats_fd;            /* $MC_VERBS_EMU_DIR/stats-<pid>-<device>, -1 */
    uint64_t served[3][2];   /* [WRITE, READ, refused][ops, bytes], under mu */
} emu_port_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static emu_port_t ports[EMU_MAX_DEVS];
static pthread_rwlock_t mr_lock = PTHREAD_RWLOCK_INITIALIZER;

typedef struct emu_mr {
    struct ibv_mr mr;
    int access;
    struct emu_mr *next;
} emu_mr_t;

static emu_mr_t *mrs; /* under mr_lock */

typedef struct emu_swr {
    struct emu_swr *next;
    uint64_t wr_id;
    enum ibv_wr_opcode opcode;
    int signaled;
    uint64_t raddr;
    uint32_t rkey;
    int nsge;
    struct ibv_sge sge[];
} emu_swr_t;

typedef struct emu_qp {
    struct ibv_qp qp;
    emu_port_t *port;
    struct emu_qp *next;     /* in port->qps */
    pthread_mutex_t mu;      /* everything below, and qp.state */
    pthread_cond_t cond;
    emu_swr_t *sq_head, *sq_tail;
    unsigned sq_used;        /* posted, not yet retired by a CQE */
    unsigned sq_unsig;       /* done unsignalled, retired by the next CQE */
    unsigned rq_used;
    struct ibv_qp_cap cap;
    int sig_all;
    int access;              /* qp_access_flags */
    uint8_t port_num;
    enum ibv_mtu mtu;
    uint32_t dest_qpn;
    struct ibv_ah_attr ah;
    uint8_t timeout, retry_cnt, rnr_retry, max_rd_atomic, max_dest_rd_atomic, min_rnr;
    uint32_t rq_psn, sq_psn;
    uint16_t pkey_index;
    int stop;
    int fd;                  /* to the target's port, -1 */
    uint32_t fd_target;      /* the port id fd is connected to */
    int fd_stale;            /* shut down by a move to ERR or RESET */
    pthread_t worker;
} emu_qp_t;

static void *port_main(void *arg);

static void port_sock_path(uint32_t id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/p-%06x.sock", cfg.dir, (unsigned)(id & 0xffffffu));
}

/* Bind the port's socket under a fresh id; a stale file (a dead process)
 * is replaced. */
static int port_bind(emu_port_t *p, size_t di)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        struct sockaddr_un sa;
        uint32_t id = cfg.ib ? (((node_id + (uint32_t)attempt * 7919u) & 0xfffu) << 4)
                             : (((node_id + (uint32_t)attempt * 7919u) & 0xfffffu) << 4);
        id |= (uint32_t)di;
        if (id == 0)
            continue;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        port_sock_path(id, sa.sun_path, sizeof(sa.sun_path));
        p->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (p->lfd < 0)
            return -1;
        if (bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int alive = (probe >= 0) && (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0);
            if (probe >= 0)
                close(probe);
            close(p->lfd);
            p->lfd = -1;
            if ((errno == EADDRINUSE) || alive) {
                if (!alive)
                    (void)unlink(sa.sun_path);
                continue;
            }
            continue;
        }
        if (listen(p->lfd, 128) != 0) {
            close(p->lfd);
            p->lfd = -1;
            return -1;
        }
        p->id = id;
        snprintf(p->path, sizeof(p->path), "%s", sa.sun_path);
        return 0;
    }
    errno = EADDRINUSE;
    return -1;
}

static void ports_unlink(void)
{
    for (size_t i = 0; i < EMU_MAX_DEVS; i++)
        if (ports[i].used)
            (void)unlink(ports[i].path);
}

/* The port of device @p di, started on first use (g_mu held). */
static emu_port_t *port_get(size_t di)
{
    static int atexit_set;
    emu_port_t *p = &ports[di];
    union ibv_gid *g;

    if (p->used)
        return p;
    memset(p, 0, sizeof(*p));
    if (port_bind(p, di) != 0)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    {
        char sp[160];
        snprintf(sp, sizeof(sp), "%s/stats-%d-%s", cfg.dir, (int)getpid(), devs[di].name);
        p->stats_fd = open(sp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    p->next_qpn = 0x100u + ((node_id >> 4) & 0xfffu) * 16u;
    p->lid      = cfg.ib ? (uint16_t)p->id : 0;
    /* 0: link-local (subnet prefix + an EUI-64 from the id) */
    g                  = &p->gid[0];
    g->raw[0]          = 0xfe;
    g->raw[1]          = 0x80;
    g->raw[8]          = 0x02;
    g->raw[11]         = 0xff;
    g->raw[12]         = 0xfe;
    g->raw[13]         = (uint8_t)(p->id >> 16);
    g->raw[14]         = (uint8_t)(p->id >> 8);
    g->raw[15]         = (uint8_t)p->id;
    if (!cfg.ib) {
        /* 1: IPv4-mapped ::ffff:10.x.y.z, the RoCE v2 GID a NIC lists */
        g           = &p->gid[1];
        g->raw[10]  = 0xff;
        g->raw[11]  = 0xff;
        g->raw[12]  = 10;
        g->raw[13]  = (uint8_t)(p->id >> 16);
        g->raw[14]  = (uint8_t)(p->id >> 8);
        g->raw[15]  = (uint8_t)p->id;
    }
    if (pthread_create(&p->thr, NULL, port_main, p) != 0) {
        close(p->lfd);
        (void)unlink(p->path);
        return NULL;
    }
    pthread_detach(p->thr);
    p->used = 1;
    if (!atexit_set) {
        atexit_set = 1;
        atexit(ports_unlink);
    }
    trace("port %s: id %06x, socket %s", devs[di].name, (unsigned)p->id, p->path);
    return p;
}

/* The port id an address vector names, or 0 when it names none. */
static uint32_t ah_target(const struct ibv_ah_attr *ah)
{
    if (ah->is_global) {
        const uint8_t *r = ah->grh.dgid.raw;
        return ((uint32_t)r[13] << 16) | ((uint32_t)r[14] << 8) | r[15];
    }
    return ah->dlid;
}

static emu_qp_t *port_qp_find(emu_port_t *p, uint32_t qpn)
{
    for (emu_qp_t *q = p->qps; q != NULL; q = q->next)
        if (q->qp.qp_num == qpn)
            return q;
    return NULL;
}

/* Count one responder operation and rewrite the port's stats file, which
 * tests read to see that bytes moved one-sided through this NIC. */
static void port_count(emu_port_t *p, int kind, uint64_t len)
{
    char line[256];
    int n;
    pthread_mutex_lock(&p->mu);
    p->served[kind][0]++;
    p->served[kind][1] += len;
    n = snprintf(line, sizeof(line),
                 "write_ops %20llu write_bytes %20llu read_ops %20llu read_bytes %20llu "
                 "refused %20llu\n",
                 (unsigned long long)p->served[0][0], (unsigned long long)p->served[0][1],
                 (unsigned long long)p->served[1][0], (unsigned long long)p->served[1][1],
                 (unsigned long long)p->served[2][0]);
    if (p->stats_fd >= 0)
        (void)!pwrite(p->stats_fd, line, (size_t)n, 0);
    pthread_mutex_unlock(&p->mu);
}

/* An MR of @p pd holding [addr, +len) with @p access, or NULL (mr_lock held). */
static emu_mr_t *mr_find(uint32_t key, int remote, const struct ibv_pd *pd, uint64_t addr,
                         uint64_t len, int access)
{
    for (emu_mr_t *m = mrs; m != NULL; m = m->next) {
        uint64_t a = (uint64_t)(uintptr_t)m->mr.addr;
        if ((remote ? m->mr.rkey : m->mr.lkey) != key)
            continue;
        if ((m->mr.pd != pd) || (addr < a) || (len > m->mr.length) ||
            (addr - a > m->mr.length - len) || ((m->access & access) != access))
            return NULL;
        return m;
    }
    return NULL;
}

/* The responder: one request from @p fd.  -1 when the connection is unusable. */
static int port_serve_one(emu_port_t *p, int fd)
{
    emu_req_t rq;
    emu_ans_t an = {EMU_MAGIC, EMU_ANS_OK};
    struct ibv_pd *pd = NULL;
    int qp_access = 0, need, rc = 0;
    emu_qp_t *q;

    if ((recv_full(fd, &rq, sizeof(rq)) != 0) || (rq.magic != EMU_MAGIC) ||
        ((rq.op != EMU_OP_WRITE) && (rq.op != EMU_OP_READ)))
        return -1;
    need = (rq.op == EMU_OP_WRITE) ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    pthread_mutex_lock(&p->mu);
    q = port_qp_find(p, rq.dest_qpn);
    if (q != NULL) {
        pthread_mutex_lock(&q->mu);
        if ((q->qp.state == IBV_QPS_RTR) || (q->qp.state == IBV_QPS_RTS)) {
            pd        = q->qp.pd;
            qp_access = q->access;
        }
        pthread_mutex_unlock(&q->mu);
    }
    pthread_mutex_unlock(&p->mu);
    if (pd == NULL) {
        /* no QP, or not ready to receive: a NIC drops the packets and the
         * requester's retries run out */
        an.status = EMU_ANS_NOQP;
        if ((rq.op == EMU_OP_WRITE) && (recv_drop(fd, rq.len) != 0))
            return -1;
        return send_full(fd, &an, sizeof(an));
    }
    pthread_rwlock_rdlock(&mr_lock);
    if (((qp_access & need) == 0) || (mr_find(rq.rkey, 1, pd, rq.addr, rq.len, need) == NULL)) {
        pthread_rwlock_unlock(&mr_lock);
        trace("responder qp %u: rkey 0x%x [0x%llx, +%llu) refused", (unsigned)rq.dest_qpn,
              (unsigned)rq.rkey, (unsigned long long)rq.addr, (unsigned long long)rq.len);
        an.status = EMU_ANS_ACCESS;
        port_count(p, 2, 0);
        if ((rq.op == EMU_OP_WRITE) && (recv_drop(fd, rq.len) != 0))
            return -1;
        /* a responder access error moves the responder's QP to ERR too */
        pthread_mutex_lock(&p->mu);
        q = port_qp_find(p, rq.dest_qpn);
        if (q != NULL) {
            pthread_mutex_lock(&q->mu);
            q->qp.state = IBV_QPS_ERR;
            pthread_mutex_unlock(&q->mu);
        }
        pthread_mutex_unlock(&p->mu);
        return send_full(fd, &an, sizeof(an));
    }
    /* the MR stays registered while its bytes move (dereg waits).  The
     * operation is counted before the answer goes: the requester's work
     * completion follows the answer, so a test that reads the stats once
     * its transfer is done finds every operation of it there (a READ
     * whose answer then fails to go is counted all the same). */
    if (rq.op == EMU_OP_WRITE) {
        rc = recv_full(fd, (void *)(uintptr_t)rq.addr, rq.len);
        pthread_rwlock_unlock(&mr_lock);
        if (rc == 0) {
            port_count(p, 0, rq.len);
            rc = send_full(fd, &an, sizeof(an));
        }
    } else {
        struct iovec v[2] = {{&an, sizeof(an)}, {(void *)(uintptr_t)rq.addr, rq.len}};
        port_count(p, 1, rq.len);
        rc = io_full(fd, v, 2, 1);
        pthread_rwlock_unlock(&mr_lock);
    }
    return rc;
}

static void *port_conn_main(void *arg)
{
    int fd        = (int)(intptr_t)((void **)arg)[1];
    emu_port_t *p = ((void **)arg)[0];
    free(arg);
    while (port_serve_one(p, fd) == 0)
        ;
    close(fd);
    return NULL;
}

static void *port_main(void *arg)
{
    emu_port_t *p = arg;
    for (;;) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        pthread_t t;
        void **a;
        if (fd < 0) {
            if ((errno == EINTR) || (errno == ECONNABORTED) || (errno == EMFILE))
                continue;
            return NULL;
        }
        a = malloc(2 * sizeof(void *));
        if (a == NULL) {
            close(fd);
            continue;
        }
        a[0] = p;
        a[1] = (void *)(intptr_t)fd;
        if (pthread_create(&t, NULL, port_conn_main, a) != 0) {
            free(a);
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
}

/* ---- device list, contexts, queries ---------------------------------------------- */

typedef struct emu_ctx {
    size_t di;
    struct verbs_context vc; /* context is its last member */
} emu_ctx_t;

static emu_ctx_t *ctx_of(struct ibv_context *c)
{
    return (emu_ctx_t *)((char *)c - offsetof(emu_ctx_t, vc.context));
}

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct ibv_device **l;
    pthread_once(&cfg_once, cfg_load);
    l = calloc(cfg.ndev + 1, sizeof(*l));
    if (l == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < cfg.ndev; i++)
        l[i] = &devs[i];
    if (num_devices != NULL)
        *num_devices = (int)cfg.ndev;
    return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

static int emu_query_port_ex(struct ibv_context *c, uint8_t port_num,
                             struct ibv_port_attr *attr, size_t len);
static int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int emu_req_notify_cq(struct ibv_cq *cq, int solicited_only);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    emu_ctx_t *e;
    size_t di;

    pthread_once(&cfg_once, cfg_load);
    di = dev_index(device);
    if ((di >= cfg.ndev) || emu_fail("open_device")) {
        errno = ENODEV;
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    if (port_get(di) == NULL) {
        int err = errno;
        pthread_mutex_unlock(&g_mu);
        fprintf(stderr, "verbs-emu: %s: cannot listen in %s: %s\n", device->name, cfg.dir,
                strerror(err));
        errno = err;
        return NULL;
    }
    pthread_mutex_unlock(&g_mu);
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    e->di                            = di;
    e->vc.sz                         = sizeof(struct verbs_context);
    e->vc.query_port                 = emu_query_port_ex;
    e->vc.context.device             = device;
    e->vc.context.cmd_fd             = -1;
    e->vc.context.async_fd           = -1;
    e->vc.context.num_comp_vectors   = 1;
    /* an extended context: verbs.h's inline ibv_query_port calls the op;
     * a plain one (an old provider): it calls the exported compat symbol */
    e->vc.context.abi_compat         = cfg.plain_ctx ? NULL : __VERBS_ABI_IS_EXTENDED;
    e->vc.context.ops.post_send      = emu_post_send;
    e->vc.context.ops.post_recv      = emu_post_recv;
    e->vc.context.ops.poll_cq        = emu_poll_cq;
    e->vc.context.ops.req_notify_cq  = emu_req_notify_cq;
    pthread_mutex_init(&e->vc.context.mutex, NULL);
    trace("open %s", device->name);
    return &e->vc.context;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
    emu_ctx_t *e = ctx_of(context);
    pthread_mutex_destroy(&e->vc.context.mutex);
    free(e);
    return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
    size_t di = ctx_of(context)->di;
    if (emu_fail("query_device")) {
        errno = EIO;
        return EIO;
    }
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "0.0.0-verbs-emu");
    a->node_guid           = ((uint64_t)ports[di].id << 16) | 0x0200000000000000ull;
    a->sys_image_guid      = a->node_guid;
    a->max_mr_size         = cfg.max_mr;
    a->page_size_cap       = 0xfffff000u;
    a->vendor_id           = 0x02c9;
    a->vendor_part_id      = 4119;
    a->max_qp              = cfg.max_qp;
    a->max_qp_wr           = cfg.max_qp_wr;
    a->max_sge             = 16;
    a->max_cq              = 1 << 16;
    a->max_cqe             = cfg.max_cqe;
    a->max_mr              = 1 << 20;
    a->max_pd              = 1 << 16;
    a->max_qp_rd_atom      = 16;
    a->max_qp_init_rd_atom = 16;
    a->max_res_rd_atom     = 1 << 20;
    a->atomic_cap          = IBV_ATOMIC_NONE;
    a->max_pkeys           = 128;
    a->phys_port_cnt       = 1;
    return 0;
}

static void port_attr_fill(size_t di, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->state       = cfg.down[di] ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    a->max_mtu     = (enum ibv_mtu)cfg.mtu;
    a->active_mtu  = (enum ibv_mtu)cfg.mtu;
    a->gid_tbl_len = EMU_GID_TBL;
    a->max_msg_sz  = 1u << 31;
    a->pkey_tbl_len = 128;
    a->lid         = ports[di].lid;
    a->sm_lid      = cfg.ib ? 1 : 0;
    a->lmc         = 0;
    a->max_vl_num  = 4;
    a->active_width = 2;
    a->active_speed = 32;
    a->phys_state  = cfg.down[di] ? 3 : 5; /* Disabled / LinkUp */
    a->link_layer  = cfg.ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
}

/* The extended op (what verbs.h's inline ibv_query_port calls). */
static int emu_query_port_ex(struct ibv_context *c, uint8_t port_num,
                             struct ibv_port_attr *attr, size_t len)
{
    struct ibv_port_attr a;
    if ((port_num != 1) || emu_fail("query_port"))
        return EINVAL;
    port_attr_fill(ctx_of(c)->di, &a);
    memset(attr, 0, len);
    memcpy(attr, &a, (len < sizeof(a)) ? len : sizeof(a));
    return 0;
}

/* The exported symbol: the compat struct, a prefix of ibv_port_attr. */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                          struct _compat_ibv_port_attr *port_attr)
{
    struct ibv_port_attr a;
    if (port_num != 1) {
        errno = EINVAL;
        return EINVAL;
    }
    port_attr_fill(ctx_of(context)->di, &a);
    /* the compat struct ends before flags / port_cap_flags2 */
    memcpy(port_attr, &a, offsetof(struct ibv_port_attr, flags));
    return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                         union ibv_gid *gid)
{
    if ((port_num != 1) || (index < 0) || (index >= EMU_GID_TBL)) {
        errno = EINVAL;
        return -1;
    }
    *gid = ports[ctx_of(context)->di].gid[index];
    return 0;
}

/* ---- PDs and MRs -------------------------------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    static uint32_t handle;
    struct ibv_pd *pd = emu_fail("alloc_pd") ? NULL : calloc(1, sizeof(*pd));
    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->context = context;
    pd->handle  = __atomic_add_fetch(&handle, 1, __ATOMIC_RELAXED);
    return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    pthread_rwlock_rdlock(&mr_lock);
    for (emu_mr_t *m = mrs; m != NULL; m = m->next) {
        if (m->mr.pd == pd) {
            pthread_rwlock_unlock(&mr_lock);
            errno = EBUSY;
            return EBUSY;
        }
    }
    pthread_rwlock_unlock(&mr_lock);
    free(pd);
    return 0;
}

static struct ibv_mr *mr_reg(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                             unsigned int access)
{
    emu_mr_t *m;
    uint32_t key;

    if (emu_fail("reg_mr")) {
        errno = ENOMEM;
        return NULL;
    }
    if ((length == 0) || (length > cfg.max_mr) || (iova != (uint64_t)(uintptr_t)addr) ||
        (((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0) &&
         ((access & IBV_ACCESS_LOCAL_WRITE) == 0))) {
        /* a NIC refuses these; a different iova is not emulated */
        trace("reg_mr [%p, +%zu) access 0x%x refused", addr, length, access);
        errno = EINVAL;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_rwlock_wrlock(&mr_lock);
    do {
        key = key_next;
        key_next += 0x100u;
    } while (key == 0);
    m->mr.context = pd->context;
    m->mr.pd      = pd;
    m->mr.addr    = addr;
    m->mr.length  = length;
    m->mr.handle  = key >> 8;
    m->mr.lkey    = key;
    m->mr.rkey    = key;
    m->access     = (int)access;
    m->next       = mrs;
    mrs           = m;
    pthread_rwlock_unlock(&mr_lock);
    trace("reg_mr [%p, +%zu) key 0x%x", addr, length, (unsigned)key);
    return &m->mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return mr_reg(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned int)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                       uint64_t iova, unsigned int access)
{
    return mr_reg(pd, addr, length, iova, access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    pthread_rwlock_wrlock(&mr_lock);
    for (emu_mr_t **pp = &mrs; *pp != NULL; pp = &(*pp)->next) {
        if (&(*pp)->mr == mr) {
            emu_mr_t *m = *pp;
            *pp         = m->next;
            pthread_rwlock_unlock(&mr_lock);
            free(m);
            return 0;
        }
    }
    pthread_rwlock_unlock(&mr_lock);
    errno = EINVAL;
    return EINVAL;
}

/* ---- completion channels and CQs ------------------------------------------------------ */

typedef struct emu_chan {
    struct ibv_comp_channel ch;
    int wfd;
} emu_chan_t;

typedef struct emu_cq {
    struct ibv_cq cq;
    pthread_mutex_t mu;
    struct ibv_wc *ring;
    int cap, head, count;
    int armed;
    int overrun;
} emu_cq_t;

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    emu_chan_t *c = emu_fail("create_comp_channel") ? NULL : calloc(1, sizeof(*c));
    int fds[2];
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(c);
        return NULL;
    }
    c->ch.context = context;
    c->ch.fd      = fds[0];
    c->ch.refcnt  = 0;
    c->wfd        = fds[1];
    return &c->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    emu_chan_t *c = (emu_chan_t *)channel;
    if (channel->refcnt != 0) {
        errno = EBUSY;
        return EBUSY;
    }
    close(c->ch.fd);
    close(c->wfd);
    free(c);
    return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector)
{
    emu_cq_t *q;
    if ((cqe < 1) || (cqe > cfg.max_cqe) || (comp_vector != 0) || emu_fail("create_cq")) {
        errno = EINVAL;
        return NULL;
    }
    q = calloc(1, sizeof(*q));
    if (q != NULL)
        q->ring = calloc((size_t)cqe, sizeof(*q->ring));
    if ((q == NULL) || (q->ring == NULL)) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->cap           = cqe;
    q->cq.context    = context;
    q->cq.channel    = channel;
    q->cq.cq_context = cq_context;
    q->cq.cqe        = cqe;
    pthread_mutex_init(&q->mu, NULL);
    pthread_mutex_init(&q->cq.mutex, NULL);
    pthread_cond_init(&q->cq.cond, NULL);
    if (channel != NULL)
        __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
    return &q->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    emu_cq_t *q = (emu_cq_t *)cq;
    if (cq->channel != NULL)
        __atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_RELAXED);
    pthread_mutex_destroy(&q->mu);
    pthread_mutex_destroy(&cq->mutex);
    pthread_cond_destroy(&cq->cond);
    free(q->ring);
    free(q);
    return 0;
}

/* Add a completion; the channel hears of it when the CQ is armed. */
static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc)
{
    emu_cq_t *q = (emu_cq_t *)cq;
    int notify;
    pthread_mutex_lock(&q->mu);
    if (q->count == q->cap) {
        /* a NIC raises IBV_EVENT_CQ_ERR; the CQE is lost */
        if (!q->overrun)
            fprintf(stderr, "verbs-emu: CQ overrun (depth %d): a completion was lost\n",
                    q->cap);
        q->overrun = 1;
        pthread_mutex_unlock(&q->mu);
        return;
    }
    q->ring[(q->head + q->count) % q->cap] = *wc;
    q->count++;
    notify   = q->armed;
    q->armed = 0;
    pthread_mutex_unlock(&q->mu);
    if (notify && (cq->channel != NULL)) {
        struct ibv_cq *p = cq;
        (void)!write(((emu_chan_t *)cq->channel)->wfd, &p, sizeof(p));
    }
}

static int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    emu_cq_t *q = (emu_cq_t *)cq;
    int k = 0;
    pthread_mutex_lock(&q->mu);
    while ((k < n) && (q->count > 0)) {
        wc[k++]  = q->ring[q->head];
        q->head  = (q->head + 1) % q->cap;
        q->count--;
    }
    pthread_mutex_unlock(&q->mu);
    return k;
}

static int emu_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    emu_cq_t *q = (emu_cq_t *)cq;
    (void)solicited_only; /* every completion here is a requester one */
    pthread_mutex_lock(&q->mu);
    q->armed = 1;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                            void **cq_context)
{
    struct ibv_cq *p;
    ssize_t r = read(channel->fd, &p, sizeof(p));
    if (r != (ssize_t)sizeof(p)) {
        if (r >= 0)
            errno = EIO;
        return -1;
    }
    *cq         = p;
    *cq_context = p->cq_context;
    return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ---- QPs ------------------------------------------------------------------------------ */

static void *qp_worker(void *arg);

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
    emu_ctx_t *e = ctx_of(pd->context);
    emu_port_t *p = &ports[e->di];
    emu_qp_t *q;
    int err;

    if ((ia->qp_type != IBV_QPT_RC) || (ia->send_cq == NULL) || (ia->recv_cq == NULL) ||
        (ia->srq != NULL) || (ia->cap.max_send_wr > (uint32_t)cfg.max_qp_wr) ||
        (ia->cap.max_recv_wr > (uint32_t)cfg.max_qp_wr) || (ia->cap.max_send_sge > 16) ||
        (ia->cap.max_recv_sge > 16) || (ia->cap.max_inline_data > 0)) {
        errno = EINVAL;
        return NULL;
    }
    if (emu_fail("create_qp")) {
        errno = ENOMEM;
        return NULL;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    q->port           = p;
    q->qp.context     = pd->context;
    q->qp.qp_context  = ia->qp_context;
    q->qp.pd          = pd;
    q->qp.send_cq     = ia->send_cq;
    q->qp.recv_cq     = ia->recv_cq;
    q->qp.state       = IBV_QPS_RESET;
    q->qp.qp_type     = IBV_QPT_RC;
    q->cap            = ia->cap;
    q->sig_all        = ia->sq_sig_all;
    q->fd             = -1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cond, NULL);
    pthread_mutex_lock(&p->mu);
    if (p->nqps >= cfg.max_qp) {
        pthread_mutex_unlock(&p->mu);
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->qp.qp_num = p->next_qpn++ & 0xffffffu;
    q->qp.handle = q->qp.qp_num;
    q->next      = p->qps;
    p->qps       = q;
    p->nqps++;
    pthread_mutex_unlock(&p->mu);
    err = pthread_create(&q->worker, NULL, qp_worker, q);
    if (err != 0) {
        pthread_mutex_lock(&p->mu);
        for (emu_qp_t **pp = &p->qps; *pp != NULL; pp = &(*pp)->next)
            if (*pp == q) {
                *pp = q->next;
                break;
            }
        p->nqps--;
        pthread_mutex_unlock(&p->mu);
        free(q);
        errno = err;
        return NULL;
    }
    trace("create_qp %u on %s", (unsigned)q->qp.qp_num, devs[e->di].name);
    return &q->qp;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
    emu_qp_t *q   = (emu_qp_t *)qp;
    emu_port_t *p = q->port;

    pthread_mutex_lock(&p->mu);
    for (emu_qp_t **pp = &p->qps; *pp != NULL; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    p->nqps--;
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    if (q->fd >= 0)
        (void)shutdown(q->fd, SHUT_RDWR); /* a WR in flight ends now */
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->worker, NULL);
    while (q->sq_head != NULL) {
        emu_swr_t *w = q->sq_head;
        q->sq_head   = w->next;
        free(w);
    }
    if (q->fd >= 0)
        close(q->fd);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mu);
    trace("destroy_qp %u", (unsigned)qp->qp_num);
    free(q);
    return 0;
}

/* The attributes each RC transition requires and allows besides them
 * (the kernel's qp_state_table for IB_QPT_RC). */
static int qp_transition(enum ibv_qp_state cur, enum ibv_qp_state next, int *req, int *opt)
{
    *req = IBV_QP_STATE;
    *opt = 0;
    if (next == IBV_QPS_RESET)
        return 0; /* from any state */
    if (next == IBV_QPS_ERR)
        return 0; /* from any state */
    switch (cur) {
    case IBV_QPS_RESET:
        if (next != IBV_QPS_INIT)
            return -1;
        *req |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    case IBV_QPS_INIT:
        if (next == IBV_QPS_INIT) {
            *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
            return 0;
        }
        if (next != IBV_QPS_RTR)
            return -1;
        *req |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        return 0;
    case IBV_QPS_RTR:
        if (next != IBV_QPS_RTS)
            return -1;
        *req |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                IBV_QP_MAX_QP_RD_ATOMIC;
        *opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
               IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        return 0;
    case IBV_QPS_RTS:
        if (next != IBV_QPS_RTS)
            return -1;
        *opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
               IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER;
        return 0;
    default:
        return -1;
    }
}

static int qp_fail(const char *why, emu_qp_t *q, int err)
{
    trace("modify_qp %u refused: %s", (unsigned)q->qp.qp_num, why);
    errno = err;
    return err;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    emu_qp_t *q = (emu_qp_t *)qp;
    enum ibv_qp_state cur, next;
    int req, opt, rc = 0;

    if (emu_fail("modify_qp"))
        return qp_fail("MC_VERBS_EMU_FAIL", q, EINVAL);
    pthread_mutex_lock(&q->mu);
    cur = q->qp.state;
    if ((attr_mask & IBV_QP_CUR_STATE) && (attr->cur_qp_state != cur)) {
        pthread_mutex_unlock(&q->mu);
        return qp_fail("cur_qp_state is not the QP's state", q, EINVAL);
    }
    next = (attr_mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if (!(attr_mask & IBV_QP_STATE) || (qp_transition(cur, next, &req, &opt) != 0)) {
        pthread_mutex_unlock(&q->mu);
        return qp_fail("transition not allowed", q, EINVAL);
    }
    if (((attr_mask & req) != req) || ((attr_mask & ~(req | opt)) != 0)) {
        pthread_mutex_unlock(&q->mu);
        return qp_fail("attribute mask", q, EINVAL);
    }
    if ((attr_mask & IBV_QP_PORT) && (attr->port_num != 1))
        rc = qp_fail("no such port", q, EINVAL);
    else if ((attr_mask & IBV_QP_ACCESS_FLAGS) &&
             (attr->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE |
                                                  IBV_ACCESS_REMOTE_WRITE |
                                                  IBV_ACCESS_REMOTE_READ |
                                                  IBV_ACCESS_REMOTE_ATOMIC)))
        rc = qp_fail("access flags", q, EINVAL);
    else if ((attr_mask & IBV_QP_PATH_MTU) &&
             ((attr->path_mtu < IBV_MTU_256) || ((int)attr->path_mtu > cfg.mtu)))
        rc = qp_fail("path MTU above the port's", q, EINVAL);
    else if ((attr_mask & IBV_QP_AV) && !cfg.ib && !attr->ah_attr.is_global)
        rc = qp_fail("RoCE needs a GRH (is_global)", q, EINVAL);
    else if ((attr_mask & IBV_QP_AV) && ((attr->ah_attr.port_num != 1) ||
                                         (ah_target(&attr->ah_attr) == 0)))
        rc = qp_fail("address vector", q, EINVAL);
    else if ((attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) && (attr->max_dest_rd_atomic > 16))
        rc = qp_fail("max_dest_rd_atomic above the device's", q, EINVAL);
    else if ((attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) && (attr->max_rd_atomic > 16))
        rc = qp_fail("max_rd_atomic above the device's", q, EINVAL);
    if (rc != 0) {
        pthread_mutex_unlock(&q->mu);
        return rc;
    }
    if (attr_mask & IBV_QP_PKEY_INDEX)
        q->pkey_index = attr->pkey_index;
    if (attr_mask & IBV_QP_PORT)
        q->port_num = attr->port_num;
    if (attr_mask & IBV_QP_ACCESS_FLAGS)
        q->access = (int)attr->qp_access_flags;
    if (attr_mask & IBV_QP_PATH_MTU)
        q->mtu = attr->path_mtu;
    if (attr_mask & IBV_QP_DEST_QPN)
        q->dest_qpn = attr->dest_qp_num;
    if (attr_mask & IBV_QP_AV)
        q->ah = attr->ah_attr;
    if (attr_mask & IBV_QP_RQ_PSN)
        q->rq_psn = attr->rq_psn;
    if (attr_mask & IBV_QP_SQ_PSN)
        q->sq_psn = attr->sq_psn;
    if (attr_mask & IBV_QP_TIMEOUT)
        q->timeout = attr->timeout;
    if (attr_mask & IBV_QP_RETRY_CNT)
        q->retry_cnt = attr->retry_cnt;
    if (attr_mask & IBV_QP_RNR_RETRY)
        q->rnr_retry = attr->rnr_retry;
    if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
        q->max_rd_atomic = attr->max_rd_atomic;
    if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC)
        q->max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (attr_mask & IBV_QP_MIN_RNR_TIMER)
        q->min_rnr = attr->min_rnr_timer;
    q->qp.state = next;
    if (((next == IBV_QPS_ERR) || (next == IBV_QPS_RESET)) && (q->fd >= 0)) {
        (void)shutdown(q->fd, SHUT_RDWR); /* the WR in flight is flushed now */
        q->fd_stale = 1;
    }
    if (next == IBV_QPS_RESET) {
        /* RESET empties both queues without completions */
        while (q->sq_head != NULL) {
            emu_swr_t *w = q->sq_head;
            q->sq_head   = w->next;
            free(w);
        }
        q->sq_tail = NULL;
        q->sq_used = q->sq_unsig = q->rq_used = 0;
    }
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
    trace("modify_qp %u -> state %d", (unsigned)qp->qp_num, (int)next);
    return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                        struct ibv_qp_init_attr *init_attr)
{
    emu_qp_t *q = (emu_qp_t *)qp;
    (void)attr_mask;
    memset(attr, 0, sizeof(*attr));
    pthread_mutex_lock(&q->mu);
    attr->qp_state           = q->qp.state;
    attr->cur_qp_state       = q->qp.state;
    attr->path_mtu           = q->mtu;
    attr->qp_access_flags    = (unsigned)q->access;
    attr->dest_qp_num        = q->dest_qpn;
    attr->ah_attr            = q->ah;
    attr->rq_psn             = q->rq_psn;
    attr->sq_psn             = q->sq_psn;
    attr->timeout            = q->timeout;
    attr->retry_cnt          = q->retry_cnt;
    attr->rnr_retry          = q->rnr_retry;
    attr->max_rd_atomic      = q->max_rd_atomic;
    attr->max_dest_rd_atomic = q->max_dest_rd_atomic;
    attr->min_rnr_timer      = q->min_rnr;
    attr->port_num           = q->port_num;
    attr->pkey_index         = q->pkey_index;
    attr->cap                = q->cap;
    pthread_mutex_unlock(&q->mu);
    if (init_attr != NULL) {
        memset(init_attr, 0, sizeof(*init_attr));
        init_attr->qp_context = qp->qp_context;
        init_attr->send_cq    = qp->send_cq;
        init_attr->recv_cq    = qp->recv_cq;
        init_attr->cap        = q->cap;
        init_attr->qp_type    = IBV_QPT_RC;
        init_attr->sq_sig_all = q->sig_all;
    }
    return 0;
}

/* ---- the data path ---------------------------------------------------------------------- */

static int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    emu_qp_t *q = (emu_qp_t *)qp;
    int rc      = 0;

    pthread_mutex_lock(&q->mu);
    if ((q->qp.state != IBV_QPS_RTS) && (q->qp.state != IBV_QPS_ERR) &&
        (q->qp.state != IBV_QPS_SQD)) {
        rc = EINVAL; /* the send queue accepts WRs from RTS on */
    } else if (emu_fail("post_send")) {
        rc = ENOMEM;
    }
    for (; (wr != NULL) && (rc == 0); wr = wr->next) {
        emu_swr_t *w;
        if (((wr->opcode != IBV_WR_RDMA_WRITE) && (wr->opcode != IBV_WR_RDMA_READ)) ||
            (wr->num_sge < 0) || ((uint32_t)wr->num_sge > q->cap.max_send_sge) ||
            (wr->send_flags & IBV_SEND_INLINE)) {
            rc = EINVAL;
            break;
        }
        if (q->sq_used >= q->cap.max_send_wr) {
            rc = ENOMEM;
            break;
        }
        w = malloc(sizeof(*w) + (size_t)wr->num_sge * sizeof(struct ibv_sge));
        if (w == NULL) {
            rc = ENOMEM;
            break;
        }
        w->next     = NULL;
        w->wr_id    = wr->wr_id;
        w->opcode   = wr->opcode;
        w->signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
        w->raddr    = wr->wr.rdma.remote_addr;
        w->rkey     = wr->wr.rdma.rkey;
        w->nsge     = wr->num_sge;
        if (wr->num_sge > 0)
            memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
        if (q->sq_tail != NULL)
            q->sq_tail->next = w;
        else
            q->sq_head = w;
        q->sq_tail = w;
        q->sq_used++;
    }
    if (rc != 0)
        *bad = wr;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    emu_qp_t *q = (emu_qp_t *)qp;
    int rc      = 0;
    pthread_mutex_lock(&q->mu);
    if (q->qp.state == IBV_QPS_RESET)
        rc = EINVAL;
    for (; (wr != NULL) && (rc == 0); wr = wr->next) {
        if ((wr->num_sge < 0) || ((uint32_t)wr->num_sge > q->cap.max_recv_sge)) {
            rc = EINVAL;
            break;
        }
        if (q->rq_used >= q->cap.max_recv_wr) {
            rc = ENOMEM;
            break;
        }
        q->rq_used++; /* no SENDs here: they wait until the QP is destroyed */
    }
    if (rc != 0)
        *bad = wr;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* Check the local SGEs of @p w: lkey, range and, for a READ, LOCAL_WRITE. */
static int sge_check(emu_qp_t *q, const emu_swr_t *w, uint64_t *len_p)
{
    uint64_t len = 0;
    int need     = (w->opcode == IBV_WR_RDMA_READ) ? IBV_ACCESS_LOCAL_WRITE : 0;
    for (int i = 0; i < w->nsge; i++) {
        if ((w->sge[i].length > 0) &&
            (mr_find(w->sge[i].lkey, 0, q->qp.pd, w->sge[i].addr, w->sge[i].length, need) ==
             NULL))
            return -1;
        len += w->sge[i].length;
    }
    *len_p = len;
    return 0;
}

/* Close the worker's connection (the worker only; q->mu guards the
 * number against modify_qp's shutdown). */
static void qp_fd_close(emu_qp_t *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->fd >= 0)
        close(q->fd);
    q->fd       = -1;
    q->fd_stale = 0;
    pthread_mutex_unlock(&q->mu);
}

static int qp_connect_target(emu_qp_t *q, uint32_t target)
{
    struct sockaddr_un sa;
    struct timeval tv;
    int fd;
    /* a NIC gives up after retry_cnt + 1 timeouts of 4.096 us << timeout */
    uint64_t ms = (q->timeout == 0) ? 0 : ((4096ull << MIN(q->timeout, 31)) / 1000000ull) *
                                              (uint64_t)(q->retry_cnt + 1);
    if (ms < (uint64_t)cfg.timeout_ms)
        ms = (uint64_t)cfg.timeout_ms;
    if ((q->fd >= 0) && (q->fd_target == target) && !q->fd_stale)
        return 0;
    qp_fd_close(q);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    port_sock_path(target, sa.sun_path, sizeof(sa.sun_path));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        trace("qp %u: target %06x unreachable: %s", (unsigned)q->qp.qp_num, (unsigned)target,
              strerror(errno));
        close(fd);
        return -1;
    }
    tv.tv_sec  = (time_t)(ms / 1000u);
    tv.tv_usec = (suseconds_t)((ms % 1000u) * 1000u);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    pthread_mutex_lock(&q->mu);
    q->fd        = fd;
    q->fd_target = target;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

/* Execute one WR against the target; its completion status. */
static enum ibv_wc_status wr_exec(emu_qp_t *q, const emu_swr_t *w, uint32_t target,
                                  uint32_t dest_qpn)
{
    emu_req_t rq;
    emu_ans_t an;
    struct iovec v[17];
    uint64_t len;
    int bad;

    pthread_rwlock_rdlock(&mr_lock);
    bad = sge_check(q, w, &len) != 0;
    pthread_rwlock_unlock(&mr_lock);
    if (bad)
        return IBV_WC_LOC_PROT_ERR;
    if (qp_connect_target(q, target) != 0)
        return IBV_WC_RETRY_EXC_ERR;
    rq.magic    = EMU_MAGIC;
    rq.op       = (w->opcode == IBV_WR_RDMA_WRITE) ? EMU_OP_WRITE : EMU_OP_READ;
    rq.dest_qpn = dest_qpn;
    rq.rkey     = w->rkey;
    rq.addr     = w->raddr;
    rq.len      = len;
    v[0].iov_base = &rq;
    v[0].iov_len  = sizeof(rq);
    for (int i = 0; i < w->nsge; i++) {
        v[i + 1].iov_base = (void *)(uintptr_t)w->sge[i].addr;
        v[i + 1].iov_len  = w->sge[i].length;
    }
    if (io_full(q->fd, v, (rq.op == EMU_OP_WRITE) ? w->nsge + 1 : 1, 1) != 0)
        goto lost;
    if ((recv_full(q->fd, &an, sizeof(an)) != 0) || (an.magic != EMU_MAGIC))
        goto lost;
    if (an.status == EMU_ANS_ACCESS)
        return IBV_WC_REM_ACCESS_ERR;
    if (an.status != EMU_ANS_OK)
        return IBV_WC_RETRY_EXC_ERR;
    if ((rq.op == EMU_OP_READ) && (io_full(q->fd, &v[1], w->nsge, 0) != 0))
        goto lost;
    return IBV_WC_SUCCESS;
lost:
    trace("qp %u: connection to %06x lost: %s", (unsigned)q->qp.qp_num, (unsigned)target,
          strerror(errno));
    qp_fd_close(q);
    return IBV_WC_RETRY_EXC_ERR;
}

/* Complete @p w with @p st (q->mu held): a CQE when signalled or failed;
 * a CQE retires the unsignalled WRs before it from the send queue. */
static void wr_complete(emu_qp_t *q, emu_swr_t *w, enum ibv_wc_status st)
{
    struct ibv_wc wc;
    if ((st == IBV_WC_SUCCESS) && !w->signaled) {
        q->sq_unsig++;
        return;
    }
    memset(&wc, 0, sizeof(wc));
    wc.wr_id    = w->wr_id;
    wc.status   = st;
    wc.opcode   = (w->opcode == IBV_WR_RDMA_READ) ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
    wc.qp_num   = q->qp.qp_num;
    wc.vendor_err = (st == IBV_WC_SUCCESS) ? 0 : 0x80 + (uint32_t)st;
    q->sq_used -= MIN(q->sq_used, q->sq_unsig + 1);
    q->sq_unsig = 0;
    cq_push(q->qp.send_cq, &wc);
}

static void *qp_worker(void *arg)
{
    emu_qp_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        emu_swr_t *w;
        enum ibv_wc_status st;
        uint32_t target, dqpn;
        while (!q->stop && (q->sq_head == NULL))
            pthread_cond_wait(&q->cond, &q->mu);
        if (q->stop)
            break;
        w          = q->sq_head;
        q->sq_head = w->next;
        if (q->sq_head == NULL)
            q->sq_tail = NULL;
        if (q->qp.state == IBV_QPS_ERR) {
            wr_complete(q, w, IBV_WC_WR_FLUSH_ERR);
            free(w);
            continue;
        }
        target  = ah_target(&q->ah);
        dqpn    = q->dest_qpn;
        pthread_mutex_unlock(&q->mu);
        st = wr_exec(q, w, target, dqpn);
        pthread_mutex_lock(&q->mu);
        if (q->stop) {
            free(w);
            break;
        }
        if (q->qp.state == IBV_QPS_RESET) {
            free(w); /* reset while it ran: no completion */
            continue;
        }
        if (q->qp.state == IBV_QPS_ERR)
            st = IBV_WC_WR_FLUSH_ERR; /* moved to ERR while it ran */
        if (st != IBV_WC_SUCCESS) {
            trace("qp %u: wr %llu: %s", (unsigned)q->qp.qp_num, (unsigned long long)w->wr_id,
                  ibv_wc_status_str(st));
            q->qp.state = IBV_QPS_ERR;
        }
        wr_complete(q, w, st);
        free(w);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const s[] = {
        [IBV_WC_SUCCESS]            = "success",
        [IBV_WC_LOC_LEN_ERR]        = "local length error",
        [IBV_WC_LOC_QP_OP_ERR]      = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR]     = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR]       = "local protection error",
        [IBV_WC_WR_FLUSH_ERR]       = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR]        = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR]       = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR]     = "local access error",
        [IBV_WC_REM_INV_REQ_ERR]    = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR]     = "remote access error",
        [IBV_WC_REM_OP_ERR]         = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR]      = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR]  = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR]   = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR]      = "aborted error",
        [IBV_WC_INV_EECN_ERR]       = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR]  = "invalid EE context state",
        [IBV_WC_FATAL_ERR]          = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR]   = "response timeout error",
        [IBV_WC_GENERAL_ERR]        = "general error",
        [IBV_WC_TM_ERR]             = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if (((unsigned)status < sizeof(s) / sizeof(s[0])) && (s[status] != NULL))
        return s[status];
    return "unknown";
}

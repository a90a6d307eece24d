/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Verbs semantics of the stand-in libibverbs (tests/rdma/emu/README.md),
 * checked across two real processes: this program (the requester) and a
 * copy of itself started as "target", which registers memory, creates the
 * responder QPs and otherwise only answers on a pipe; its application code
 * never takes part in a READ or WRITE.
 *
 * Built against the real <infiniband/verbs.h> and linked with -libverbs:
 * run with LD_LIBRARY_PATH at the stand-in, which must then satisfy a
 * binary linked against Debian's library (symbol versions included).
 *
 *   emu_check            every check; "ok <name>" per check, exit 0 when all pass
 *   emu_check target     (internal) the target side, driven on stdin/stdout
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BUF_LEN   (1u << 20)
#define RO_LEN    (64u << 10)
#define CQ_DEPTH  256

static int failures;

static void fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    failures++;
}

#define CHECK(name, cond, ...)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fail(name, __VA_ARGS__);                                                    \
            return;                                                                     \
        }                                                                               \
    } while (0)

/* ---- shared: one device, PD, CQ ----------------------------------------------------- */

typedef struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    union ibv_gid gid;
    int gid_index;
} side_t;

static int side_open(side_t *s, const char *name)
{
    struct ibv_device **l;
    int n = 0;
    l = ibv_get_device_list(&n);
    if (l == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(l[i]), name) == 0)
            s->ctx = ibv_open_device(l[i]);
    ibv_free_device_list(l);
    if (s->ctx == NULL)
        return -1;
    s->pd        = ibv_alloc_pd(s->ctx);
    s->ch        = ibv_create_comp_channel(s->ctx);
    s->cq        = ibv_create_cq(s->ctx, CQ_DEPTH, NULL, s->ch, 0);
    s->gid_index = 1;
    if ((s->pd == NULL) || (s->cq == NULL) ||
        (ibv_query_gid(s->ctx, 1, s->gid_index, &s->gid) != 0))
        return -1;
    return 0;
}

static struct ibv_qp *qp_new(side_t *s, uint32_t max_wr, int sig_all)
{
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq          = s->cq;
    ia.recv_cq          = s->cq;
    ia.qp_type          = IBV_QPT_RC;
    ia.sq_sig_all       = sig_all;
    ia.cap.max_send_wr  = max_wr;
    ia.cap.max_recv_wr  = 1;
    ia.cap.max_send_sge = 2;
    ia.cap.max_recv_sge = 1;
    return ibv_create_qp(s->pd, &ia);
}

static int qp_init(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.port_num        = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static void rtr_attr(struct ibv_qp_attr *a, int *mask, const union ibv_gid *dgid, uint32_t qpn,
                     int gid_index)
{
    memset(a, 0, sizeof(*a));
    a->qp_state              = IBV_QPS_RTR;
    a->path_mtu              = IBV_MTU_1024;
    a->dest_qp_num           = qpn;
    a->rq_psn                = 0;
    a->max_dest_rd_atomic    = 4;
    a->min_rnr_timer         = 12;
    a->ah_attr.is_global     = 1;
    a->ah_attr.grh.dgid      = *dgid;
    a->ah_attr.grh.sgid_index = (uint8_t)gid_index;
    a->ah_attr.grh.hop_limit = 1;
    a->ah_attr.port_num      = 1;
    *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

static void rts_attr(struct ibv_qp_attr *a, int *mask)
{
    memset(a, 0, sizeof(*a));
    a->qp_state      = IBV_QPS_RTS;
    a->timeout       = 10;
    a->retry_cnt     = 3;
    a->rnr_retry     = 3;
    a->max_rd_atomic = 4;
    *mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
}

static int qp_connect(struct ibv_qp *qp, const union ibv_gid *dgid, uint32_t qpn, int gid_index)
{
    struct ibv_qp_attr a;
    int mask;
    if (qp_init(qp) != 0)
        return -1;
    rtr_attr(&a, &mask, dgid, qpn, gid_index);
    if (ibv_modify_qp(qp, &a, mask) != 0)
        return -1;
    rts_attr(&a, &mask);
    return ibv_modify_qp(qp, &a, mask);
}

static void gid_hex(const union ibv_gid *g, char *out)
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static void gid_parse(const char *s, union ibv_gid *g)
{
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        g->raw[i] = (uint8_t)v;
    }
}

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)((i * 131u) ^ (i >> 9));
}

/* ---- the target process ----------------------------------------------------------------- */

static int target_main(void)
{
    side_t s;
    uint8_t *buf = aligned_alloc(4096, BUF_LEN), *ro = aligned_alloc(4096, RO_LEN);
    struct ibv_mr *mr, *mro;
    char line[256];

    memset(&s, 0, sizeof(s));
    if ((buf == NULL) || (ro == NULL) || (side_open(&s, "mlx5_0") != 0))
        return 1;
    for (uint64_t i = 0; i < BUF_LEN; i++)
        buf[i] = pattern(i);
    for (uint64_t i = 0; i < RO_LEN; i++)
        ro[i] = (uint8_t)(pattern(i) ^ 0xffu);
    mr  = ibv_reg_mr(s.pd, buf, BUF_LEN,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    mro = ibv_reg_mr(s.pd, ro, RO_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    if ((mr == NULL) || (mro == NULL))
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char g[64];
        unsigned qpn;
        unsigned long long off, len;
        if (sscanf(line, "qp %32s %u", g, &qpn) == 2) {
            union ibv_gid dg;
            struct ibv_qp *qp = qp_new(&s, 16, 0);
            char mine[40];
            gid_parse(g, &dg);
            if ((qp == NULL) || (qp_connect(qp, &dg, qpn, 1) != 0)) {
                printf("error %s\n", strerror(errno));
                continue;
            }
            gid_hex(&s.gid, mine);
            printf("%s %u %llx %x %llx %x\n", mine, qp->qp_num,
                   (unsigned long long)(uintptr_t)buf, mr->rkey,
                   (unsigned long long)(uintptr_t)ro, mro->rkey);
        } else if (sscanf(line, "sum %llu %llu", &off, &len) == 2) {
            uint64_t h = 1469598103934665603ull;
            for (uint64_t i = off; (i < off + len) && (i < BUF_LEN); i++)
                h = (h ^ buf[i]) * 1099511628211ull;
            printf("%llx\n", (unsigned long long)h);
        } else if (strncmp(line, "exit", 4) == 0) {
            break;
        }
    }
    return 0;
}

/* ---- the requester --------------------------------------------------------------------- */

typedef struct target {
    pid_t pid;
    FILE *to, *from;
} target_t;

typedef struct remote {
    union ibv_gid gid;
    uint32_t qpn;
    uint64_t addr, ro_addr;
    uint32_t rkey, ro_rkey;
} remote_t;

static int target_start(target_t *t)
{
    int in[2], out[2];
    if ((pipe(in) != 0) || (pipe(out) != 0))
        return -1;
    t->pid = fork();
    if (t->pid < 0)
        return -1;
    if (t->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl("/proc/self/exe", "emu_check", "target", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    t->to   = fdopen(in[1], "w");
    t->from = fdopen(out[0], "r");
    setvbuf(t->to, NULL, _IOLBF, 0);
    return 0;
}

static int target_qp(target_t *t, const side_t *s, const struct ibv_qp *qp, remote_t *r)
{
    char g[40], line[256];
    unsigned qpn, rk, rrk;
    unsigned long long a, ra;
    gid_hex(&s->gid, g);
    fprintf(t->to, "qp %s %u\n", g, qp->qp_num);
    if (fgets(line, sizeof(line), t->from) == NULL)
        return -1;
    if (sscanf(line, "%32s %u %llx %x %llx %x", g, &qpn, &a, &rk, &ra, &rrk) != 6)
        return -1;
    gid_parse(g, &r->gid);
    r->qpn     = qpn;
    r->addr    = a;
    r->rkey    = rk;
    r->ro_addr = ra;
    r->ro_rkey = rrk;
    return 0;
}

static uint64_t target_sum(target_t *t, uint64_t off, uint64_t len)
{
    char line[64];
    fprintf(t->to, "sum %llu %llu\n", (unsigned long long)off, (unsigned long long)len);
    if (fgets(line, sizeof(line), t->from) == NULL)
        return 0;
    return strtoull(line, NULL, 16);
}

static uint64_t fnv(const uint8_t *p, uint64_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Poll @p n completions within 5 s; how many came. */
static int cq_wait(side_t *s, struct ibv_wc *wc, int n)
{
    int got = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < n) {
        int k = ibv_poll_cq(s->cq, n - got, wc + got);
        if (k < 0)
            return -1;
        got += k;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 5)
            break;
        if (k == 0)
            usleep(200);
    }
    return got;
}

/* No further completion within @p ms. */
static int cq_quiet(side_t *s, int ms)
{
    struct ibv_wc wc;
    usleep((useconds_t)ms * 1000u);
    return ibv_poll_cq(s->cq, 1, &wc) == 0;
}

static int post(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *local,
                uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, int flags)
{
    struct ibv_sge sge = {(uint64_t)(uintptr_t)local, len, lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id               = id;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.opcode              = op;
    wr.send_flags          = (unsigned)flags;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey        = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

static side_t S;
static uint8_t *lbuf;
static struct ibv_mr *lmr;
static target_t T;

/* A connected QP pair: ours in RTS, the target's in RTS towards it. */
static struct ibv_qp *pair(remote_t *r, uint32_t max_wr, int sig_all)
{
    struct ibv_qp *qp = qp_new(&S, max_wr, sig_all);
    if ((qp == NULL) || (target_qp(&T, &S, qp, r) != 0) ||
        (qp_connect(qp, &r->gid, r->qpn, S.gid_index) != 0))
        return NULL;
    return qp;
}

static void check_device(void)
{
    struct ibv_device **l;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    struct _compat_ibv_port_attr *cpa = (struct _compat_ibv_port_attr *)&pa;
    union ibv_gid g0, g1;
    int n = 0;

    l = ibv_get_device_list(&n);
    CHECK("device_list", (l != NULL) && (n == 2), "expected 2 devices, got %d", n);
    CHECK("device_list", strcmp(ibv_get_device_name(l[1]), "mlx5_1") == 0, "second is %s",
          ibv_get_device_name(l[1]));
    CHECK("device_list", l[2] == NULL, "the list is not NULL-terminated");
    ibv_free_device_list(l);
    CHECK("query_device", ibv_query_device(S.ctx, &da) == 0, "failed");
    CHECK("query_device", da.max_mr_size == (8u << 20), "max_mr_size %llu",
          (unsigned long long)da.max_mr_size);
    CHECK("query_device", da.max_qp_wr == 64, "max_qp_wr %d", da.max_qp_wr);
    /* the header's inline helper: the extended op */
    memset(&pa, 0xab, sizeof(pa));
    CHECK("query_port", ibv_query_port(S.ctx, 1, &pa) == 0, "failed");
    CHECK("query_port", (pa.state == IBV_PORT_ACTIVE) &&
                            (pa.link_layer == IBV_LINK_LAYER_ETHERNET) &&
                            (pa.active_mtu == IBV_MTU_4096) && (pa.port_cap_flags2 == 0),
          "state %d link %d mtu %d", pa.state, pa.link_layer, pa.active_mtu);
    CHECK("query_port", ibv_query_port(S.ctx, 2, &pa) != 0, "port 2 answered");
    /* the exported compat symbol */
    memset(&pa, 0, sizeof(pa));
    CHECK("query_port_compat", (ibv_query_port)(S.ctx, 1, cpa) == 0, "failed");
    CHECK("query_port_compat", (pa.state == IBV_PORT_ACTIVE) && (pa.gid_tbl_len >= 2),
          "state %d gid_tbl_len %d", pa.state, pa.gid_tbl_len);
    CHECK("query_gid", (ibv_query_gid(S.ctx, 1, 0, &g0) == 0) &&
                           (ibv_query_gid(S.ctx, 1, 1, &g1) == 0),
          "failed");
    CHECK("query_gid", (g0.raw[0] == 0xfe) && (g1.raw[10] == 0xff) && (g1.raw[11] == 0xff),
          "index 0 is not link-local or index 1 not IPv4-mapped");
    printf("ok device\n");
}

static void check_mr(void)
{
    void *big = malloc((16u << 20));
    struct ibv_mr *m;
    unsigned int acc = IBV_ACCESS_LOCAL_WRITE;
    volatile unsigned int vacc;

    errno = 0;
    m     = ibv_reg_mr(S.pd, big, (16u << 20), IBV_ACCESS_LOCAL_WRITE);
    CHECK("reg_mr_max", (m == NULL) && (errno == EINVAL),
          "an MR beyond max_mr_size was registered (errno %d)", errno);
    m = ibv_reg_mr(S.pd, big, (8u << 20), IBV_ACCESS_LOCAL_WRITE);
    CHECK("reg_mr_max", m != NULL, "an MR of max_mr_size was refused: %s", strerror(errno));
    ibv_dereg_mr(m);
    errno = 0;
    m     = ibv_reg_mr(S.pd, big, 4096, IBV_ACCESS_REMOTE_WRITE);
    CHECK("reg_mr_access", (m == NULL) && (errno == EINVAL),
          "REMOTE_WRITE without LOCAL_WRITE was accepted");
    /* access not known at compile time: the header calls ibv_reg_mr_iova2 */
    vacc = acc | IBV_ACCESS_RELAXED_ORDERING;
    m    = ibv_reg_mr(S.pd, big, 4096, vacc);
    CHECK("reg_mr_iova2", (m != NULL) && (m->lkey != 0), "failed: %s", strerror(errno));
    ibv_dereg_mr(m);
    free(big);
    printf("ok mr\n");
}

static void check_state_machine(void)
{
    struct ibv_qp *qp = qp_new(&S, 16, 0);
    struct ibv_qp_attr a, qa;
    struct ibv_qp_init_attr qi;
    union ibv_gid g = S.gid;
    int mask;

    CHECK("qp_state", qp != NULL, "create_qp: %s", strerror(errno));
    rtr_attr(&a, &mask, &g, 1234, 1);
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask) == EINVAL, "RESET -> RTR was accepted");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    CHECK("qp_state", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) == EINVAL,
          "INIT without PKEY_INDEX and ACCESS_FLAGS was accepted");
    a.port_num = 3;
    CHECK("qp_state", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                IBV_QP_ACCESS_FLAGS) == EINVAL,
          "port 3 was accepted");
    CHECK("qp_state", qp_init(qp) == 0, "RESET -> INIT: %s", strerror(errno));
    CHECK("qp_state", post(qp, 1, IBV_WR_RDMA_WRITE, lbuf, 8, lmr->lkey, 0, 0,
                           IBV_SEND_SIGNALED) == EINVAL,
          "posting in INIT was accepted");
    rtr_attr(&a, &mask, &g, 1234, 1);
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask & ~IBV_QP_DEST_QPN) == EINVAL,
          "RTR without DEST_QPN was accepted");
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask | IBV_QP_SQ_PSN) == EINVAL,
          "RTR with SQ_PSN (an RTS attribute) was accepted");
    a.ah_attr.is_global = 0;
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask) == EINVAL, "RoCE without a GRH was accepted");
    a.ah_attr.is_global = 1;
    a.path_mtu          = (enum ibv_mtu)7;
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask) == EINVAL, "path MTU 7 was accepted");
    rtr_attr(&a, &mask, &g, 1234, 1);
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask) == 0, "INIT -> RTR: %s", strerror(errno));
    rts_attr(&a, &mask);
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask & ~IBV_QP_TIMEOUT) == EINVAL,
          "RTS without TIMEOUT was accepted");
    CHECK("qp_state", ibv_modify_qp(qp, &a, mask) == 0, "RTR -> RTS: %s", strerror(errno));
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    CHECK("qp_state", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                IBV_QP_ACCESS_FLAGS) == EINVAL,
          "RTS -> INIT was accepted");
    CHECK("qp_state", (ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0) &&
                          (qa.qp_state == IBV_QPS_RTS) && (qi.cap.max_send_wr == 16),
          "query_qp: state %d", qa.qp_state);
    a.qp_state = IBV_QPS_ERR;
    CHECK("qp_state", ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "RTS -> ERR: %s",
          strerror(errno));
    a.qp_state = IBV_QPS_RESET;
    CHECK("qp_state", ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "ERR -> RESET: %s",
          strerror(errno));
    CHECK("qp_state", qp_init(qp) == 0, "RESET -> INIT again: %s", strerror(errno));
    CHECK("qp_state", ibv_destroy_qp(qp) == 0, "destroy");
    printf("ok qp_state\n");
}

static void check_write_read(void)
{
    remote_t r;
    struct ibv_qp *qp = pair(&r, 16, 0);
    struct ibv_wc wc[4];

    CHECK("write_read", qp != NULL, "no connected pair");
    for (uint32_t i = 0; i < 65536; i++)
        lbuf[i] = (uint8_t)(i * 7u + 3u);
    CHECK("write_read", post(qp, 11, IBV_WR_RDMA_WRITE, lbuf, 65536, lmr->lkey,
                             r.addr + 4096, r.rkey, IBV_SEND_SIGNALED) == 0,
          "post WRITE");
    CHECK("write_read", (cq_wait(&S, wc, 1) == 1) && (wc[0].status == IBV_WC_SUCCESS) &&
                            (wc[0].wr_id == 11) && (wc[0].opcode == IBV_WC_RDMA_WRITE),
          "WRITE completion: %s", ibv_wc_status_str(wc[0].status));
    CHECK("write_read", target_sum(&T, 4096, 65536) == fnv(lbuf, 65536),
          "the WRITE did not land in the target's memory");
    memset(lbuf + 65536, 0, 65536);
    CHECK("write_read", post(qp, 12, IBV_WR_RDMA_READ, lbuf + 65536, 65536, lmr->lkey,
                             r.addr + 4096, r.rkey, IBV_SEND_SIGNALED) == 0,
          "post READ");
    CHECK("write_read", (cq_wait(&S, wc, 1) == 1) && (wc[0].status == IBV_WC_SUCCESS) &&
                            (wc[0].opcode == IBV_WC_RDMA_READ),
          "READ completion");
    CHECK("write_read", memcmp(lbuf, lbuf + 65536, 65536) == 0, "READ brought other bytes");
    /* the read-only region: READ works */
    CHECK("write_read", post(qp, 13, IBV_WR_RDMA_READ, lbuf, 4096, lmr->lkey, r.ro_addr,
                             r.ro_rkey, IBV_SEND_SIGNALED) == 0, "post");
    CHECK("write_read", (cq_wait(&S, wc, 1) == 1) && (wc[0].status == IBV_WC_SUCCESS) &&
                            ((unsigned)lbuf[5] + (unsigned)pattern(5) == 255u),
          "READ of the read-only MR");
    ibv_destroy_qp(qp);
    printf("ok write_read\n");
}

static void check_chain_signaled(void)
{
    remote_t r;
    struct ibv_qp *qp = pair(&r, 4, 0);
    struct ibv_sge sge[4];
    struct ibv_send_wr wr[4], *bad = NULL;
    struct ibv_wc wc[4];

    CHECK("chain", qp != NULL, "no connected pair");
    for (int i = 0; i < 3; i++) {
        memset(lbuf + i * 1000, 0x40 + i, 1000);
        sge[i] = (struct ibv_sge){(uint64_t)(uintptr_t)(lbuf + i * 1000), 1000, lmr->lkey};
        memset(&wr[i], 0, sizeof(wr[i]));
        wr[i].wr_id               = 100 + (uint64_t)i;
        wr[i].sg_list             = &sge[i];
        wr[i].num_sge             = 1;
        wr[i].opcode              = IBV_WR_RDMA_WRITE;
        wr[i].send_flags          = (i == 2) ? IBV_SEND_SIGNALED : 0;
        wr[i].wr.rdma.remote_addr = r.addr + 200000 + (uint64_t)i * 1000;
        wr[i].wr.rdma.rkey        = r.rkey;
        wr[i].next                = (i < 2) ? &wr[i + 1] : NULL;
    }
    CHECK("chain", ibv_post_send(qp, wr, &bad) == 0, "post chain");
    CHECK("chain", (cq_wait(&S, wc, 1) == 1) && (wc[0].wr_id == 102) &&
                       (wc[0].status == IBV_WC_SUCCESS),
          "the chain's one signalled WR did not complete alone (wr_id %llu)",
          (unsigned long long)wc[0].wr_id);
    CHECK("chain", cq_quiet(&S, 100), "unsignalled WRs produced completions");
    CHECK("chain", target_sum(&T, 200000, 3000) == fnv(lbuf, 3000),
          "the chain's bytes did not all land");
    /* the send queue: 4 deep; a 5th outstanding is refused with bad_wr */
    wr[0].send_flags = wr[1].send_flags = wr[2].send_flags = IBV_SEND_SIGNALED;
    wr[2].next = &wr[3];
    wr[3]      = wr[2];
    wr[3].wr_id = 103;
    wr[3].next  = NULL;
    {
        struct ibv_send_wr extra = wr[3];
        wr[3].next = &extra;
        extra.wr_id = 104;
        CHECK("sq_depth", (ibv_post_send(qp, wr, &bad) == ENOMEM) && (bad == &extra),
              "a 5th WR on a 4-deep send queue was not refused at that WR");
    }
    CHECK("sq_depth", cq_wait(&S, wc, 4) == 4, "the 4 accepted WRs did not complete");
    for (int i = 0; i < 4; i++)
        CHECK("sq_depth", wc[i].wr_id == 100 + (uint64_t)i, "completion %d out of order (%llu)",
              i, (unsigned long long)wc[i].wr_id);
    ibv_destroy_qp(qp);
    printf("ok chain\nok sq_depth\n");
}

static void check_channel(void)
{
    remote_t r;
    struct ibv_qp *qp = pair(&r, 16, 1); /* sq_sig_all */
    struct pollfd pfd = {.fd = S.ch->fd, .events = POLLIN};
    struct ibv_cq *cq;
    void *cctx;
    struct ibv_wc wc;

    CHECK("channel", qp != NULL, "no connected pair");
    CHECK("channel", poll(&pfd, 1, 0) == 0, "the channel is readable before anything");
    CHECK("channel", ibv_req_notify_cq(S.cq, 0) == 0, "req_notify_cq");
    CHECK("channel", post(qp, 7, IBV_WR_RDMA_READ, lbuf, 512, lmr->lkey, r.addr, r.rkey, 0) ==
                         0,
          "post (unsignalled, sq_sig_all)");
    CHECK("channel", poll(&pfd, 1, 5000) == 1, "the channel did not become readable");
    CHECK("channel", (ibv_get_cq_event(S.ch, &cq, &cctx) == 0) && (cq == S.cq),
          "get_cq_event");
    ibv_ack_cq_events(cq, 1);
    CHECK("channel", (cq_wait(&S, &wc, 1) == 1) && (wc.wr_id == 7),
          "sq_sig_all: an unflagged WR gave no completion");
    /* not armed: the next completion does not signal */
    CHECK("channel", post(qp, 8, IBV_WR_RDMA_READ, lbuf, 512, lmr->lkey, r.addr, r.rkey, 0) ==
                         0, "post");
    CHECK("channel", cq_wait(&S, &wc, 1) == 1, "second completion");
    CHECK("channel", poll(&pfd, 1, 50) == 0, "an unarmed CQ signalled the channel");
    ibv_destroy_qp(qp);
    printf("ok channel\n");
}

/* A failure, then the WRs behind it flushed and the QP in ERR. */
static void expect_error_then_flush(const char *name, struct ibv_qp *qp, int op, uint64_t raddr,
                                    uint32_t rkey, uint32_t lkey, enum ibv_wc_status want)
{
    struct ibv_wc wc[3];
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    int n;

    CHECK(name, post(qp, 1, (enum ibv_wr_opcode)op, lbuf, 4096, lkey, raddr, rkey,
                     IBV_SEND_SIGNALED) == 0, "post");
    CHECK(name, post(qp, 2, IBV_WR_RDMA_READ, lbuf, 64, lmr->lkey, raddr, rkey, 0) == 0,
          "post 2");
    CHECK(name, post(qp, 3, IBV_WR_RDMA_READ, lbuf, 64, lmr->lkey, raddr, rkey,
                     IBV_SEND_SIGNALED) == 0, "post 3");
    n = cq_wait(&S, wc, 3);
    CHECK(name, n == 3, "%d completions, expected the error and two flushes", n);
    CHECK(name, (wc[0].wr_id == 1) && (wc[0].status == want), "first: wr %llu %s (want %s)",
          (unsigned long long)wc[0].wr_id, ibv_wc_status_str(wc[0].status),
          ibv_wc_status_str(want));
    CHECK(name, (wc[1].wr_id == 2) && (wc[1].status == IBV_WC_WR_FLUSH_ERR) &&
                    (wc[2].wr_id == 3) && (wc[2].status == IBV_WC_WR_FLUSH_ERR),
          "the WRs behind the error were not flushed in order (%s, %s)",
          ibv_wc_status_str(wc[1].status), ibv_wc_status_str(wc[2].status));
    CHECK(name, (ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0) && (qa.qp_state == IBV_QPS_ERR),
          "the QP is not in ERR");
    CHECK(name, (post(qp, 4, IBV_WR_RDMA_READ, lbuf, 64, lmr->lkey, raddr, rkey, 0) == 0) &&
                    (cq_wait(&S, wc, 1) == 1) && (wc[0].status == IBV_WC_WR_FLUSH_ERR),
          "a WR posted in ERR was not flushed");
    printf("ok %s\n", name);
}

static void check_errors(void)
{
    remote_t r;
    struct ibv_qp *qp;

    qp = pair(&r, 16, 0);
    if (qp != NULL)
        expect_error_then_flush("bad_rkey", qp, IBV_WR_RDMA_WRITE, r.addr, r.rkey ^ 0x5500,
                                lmr->lkey, IBV_WC_REM_ACCESS_ERR);
    else
        fail("bad_rkey", "no pair");
    qp = pair(&r, 16, 0);
    if (qp != NULL)
        expect_error_then_flush("out_of_range", qp, IBV_WR_RDMA_READ, r.addr + BUF_LEN - 100,
                                r.rkey, lmr->lkey, IBV_WC_REM_ACCESS_ERR);
    else
        fail("out_of_range", "no pair");
    qp = pair(&r, 16, 0);
    if (qp != NULL)
        expect_error_then_flush("no_remote_write", qp, IBV_WR_RDMA_WRITE, r.ro_addr, r.ro_rkey,
                                lmr->lkey, IBV_WC_REM_ACCESS_ERR);
    else
        fail("no_remote_write", "no pair");
    qp = pair(&r, 16, 0);
    if (qp != NULL)
        expect_error_then_flush("bad_lkey", qp, IBV_WR_RDMA_WRITE, r.addr, r.rkey,
                                lmr->lkey + 0x100, IBV_WC_LOC_PROT_ERR);
    else
        fail("bad_lkey", "no pair");
    {
        /* the target's QP went away: nobody answers, retries run out */
        struct ibv_qp *q2 = qp_new(&S, 16, 0);
        if ((q2 != NULL) && (target_qp(&T, &S, q2, &r) == 0) &&
            (qp_connect(q2, &r.gid, r.qpn + 4242, S.gid_index) == 0)) {
            expect_error_then_flush("no_remote_qp", q2, IBV_WR_RDMA_READ, r.addr, r.rkey,
                                    lmr->lkey, IBV_WC_RETRY_EXC_ERR);
        } else {
            fail("no_remote_qp", "no pair");
        }
    }
}

static void check_peer_killed(void)
{
    remote_t r;
    struct ibv_qp *qp = pair(&r, 16, 0);
    struct ibv_wc wc;
    int status;

    CHECK("peer_killed", qp != NULL, "no pair");
    CHECK("peer_killed", (post(qp, 1, IBV_WR_RDMA_READ, lbuf, 64, lmr->lkey, r.addr, r.rkey,
                               IBV_SEND_SIGNALED) == 0) &&
                             (cq_wait(&S, &wc, 1) == 1) && (wc.status == IBV_WC_SUCCESS),
          "a READ before the kill failed");
    kill(T.pid, SIGKILL);
    waitpid(T.pid, &status, 0);
    T.pid = 0;
    expect_error_then_flush("peer_killed", qp, IBV_WR_RDMA_WRITE, r.addr, r.rkey, lmr->lkey,
                            IBV_WC_RETRY_EXC_ERR);
}

int main(int argc, char **argv)
{
    if ((argc > 1) && (strcmp(argv[1], "target") == 0))
        return target_main();
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if ((side_open(&S, "mlx5_0") != 0) || (target_start(&T) != 0)) {
        printf("FAIL setup: %s (is LD_LIBRARY_PATH at the stand-in, MC_VERBS_EMU_DEVICES="
               "mlx5_0,mlx5_1?)\n", strerror(errno));
        return 1;
    }
    lbuf = aligned_alloc(4096, BUF_LEN);
    lmr  = ibv_reg_mr(S.pd, lbuf, BUF_LEN,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (lmr == NULL) {
        printf("FAIL setup: reg_mr: %s\n", strerror(errno));
        return 1;
    }
    check_device();
    check_mr();
    check_state_machine();
    check_write_read();
    check_chain_signaled();
    check_channel();
    check_errors();
    check_peer_killed();
    if (T.pid > 0) {
        fprintf(T.to, "exit\n");
        waitpid(T.pid, NULL, 0);
    }
    printf("%s: %d failure(s)\n", (failures == 0) ? "PASS" : "FAIL", failures);
    return failures == 0 ? 0 : 1;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The libfabric transport (fabric.h, docs/transfer.md §14).
 *
 * Provider.  install asks libfabric for a reliable-datagram endpoint
 * (FI_EP_RDM) with one-sided RMA, trying in order the provider that
 * MC_FABRIC_PROVIDER names (then only it), else the protocol's own ("efa"
 * or "cxi"), "tcp;ofi_rxm" and "sockets".  Completions must mean the
 * bytes reached the target (FI_DELIVERY_COMPLETE): a software provider
 * that cannot promise it is skipped, since its write completions would
 * come before the target checked the key.  EFA and CXI are asked for it
 * and, when they decline, used without: their RMA completions already
 * wait for the target's acknowledgement.  Providers addressed by IP bind
 * to the engine's address (node = bind address, FI_SOURCE), so the
 * endpoint address peers reach is the one the data port has.
 *
 * Objects.  One fabric, domain, address vector (FI_AV_TABLE) and
 * completion queue per engine, and one serving endpoint whose address
 * (fi_getname) the descriptor publishes; one poller thread reads the
 * queue (fi_cq_sread when the queue has a wait object, else fi_cq_read
 * with a short back-off) and so also drives the progress that software
 * providers need on the target side.  Each peer gets its own initiating
 * endpoint on the same queue and address vector, created at its first
 * request: a provider such as tcp;ofi_rxm tears the connection to a peer
 * down for good after one refused access, and a fresh endpoint is the
 * only way back (the reset).  The endpoint a reset replaces stays open,
 * unused, until uninstall (see prog_mu).  With FI_MR_ENDPOINT (cxi)
 * memory is bound to one endpoint, so there every request goes through
 * the serving one.
 *
 * Memory.  Each region the engine registers gets one MR (fi_mr_reg with
 * FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE; the provider's
 * key with FI_MR_PROV_KEY, else ours from a per-engine counter), whose
 * key the descriptor lists per buffer.  Remote addresses are virtual with
 * FI_MR_VIRT_ADDR, else offsets into the MR; the descriptor says which.
 * A region the provider will not register is served over tcp.
 *
 * Requests.  The initiator checks the range against the target's
 * descriptor (fetched once per connection and again when a request
 * misses it): a range outside every buffer is refused here, before
 * anything is sent.  The request is cut into slices of at most
 * MC_FABRIC_SLICE_SIZE (and the provider's max_msg_size), posted with at
 * most a window outstanding, and counted down by the poller; the first
 * error completion is the request's status (a refused key or access is
 * INVALID_READ / INVALID_WRITE, anything else TRANSFER_FAIL) and marks
 * the peer broken.  After a refused key the request runs once more on a
 * reset endpoint with a fresh descriptor (the target may have registered
 * again), as the rdma transport does.
 *
 * Fallback.  Local memory without an MR, a target whose descriptor has
 * no fabric endpoint (a tcp engine) or another provider, a buffer with no
 * key, and READs naming a registration generation go over the tcp
 * transport underneath.
 *
 * What this file owns, and may call.  The part fabric shares with rdma/
 * is transfer/onesided.c: the tcp transport and peers underneath, the
 * target's descriptor, the reset under the peer's use lock, a request's
 * way (one attempt, one more on a reset endpoint after a refused key,
 * then tcp with a notice logged once per peer), and describe and
 * DISK_READ, which only forward to tcp.  This file passes in what is
 * fabric's own (fabric_os_ops): connecting a peer (an endpoint and an
 * address from the descriptor), one attempt (xfer_fabric) and the retry
 * rule; it owns the provider, the fabric objects, the poller, the MRs and
 * the endpoints.  It calls onesided.h, fi.h (libfabric, loaded at run
 * time), tcp.h (peer names for messages) and the engine's regions.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "common/log.h"
#include "common/util.h"
#include "transfer/descriptor.h"
#include "transfer/fabric/fabric.h"
#include "transfer/fabric/fi.h"
#include "transfer/onesided.h"
#include "transfer/tcp/tcp.h"

#define FABRIC_CQ_DEPTH      4096
#define FABRIC_POLL_BATCH    32
#define FABRIC_WAIT_MS       100      /* sread timeout: the poller re-checks for shutdown */
#define FABRIC_SPIN_NS       50000u   /* busy-poll window without a wait object */
#define FABRIC_WINDOW        64u      /* slices of one request outstanding */
#define FABRIC_SLICE_DEFAULT (1u << 20)

typedef struct fabric_wait fabric_wait_t;

/* One posted slice; fctx first (FI_CONTEXT mode: the provider may use it). */
typedef struct fabric_op {
    struct fi_context fctx;
    fabric_wait_t *w;
} fabric_op_t;

/* One request in flight: counted down by the poller. */
struct fabric_wait {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    size_t pending;          /* posted, not completed */
    mc_status_t st;          /* first failure */
    int err;                 /* its fi_cq_err_entry err and prov_errno */
    int prov_err;
    int abandoned;           /* the caller gave up: the last completion frees it */
    mc_te_op_t op;
    fabric_op_t ops[];
};

typedef struct mc_fabric {
    mc_onesided_t os;             /* first: the tcp transport underneath (onesided.h) */
    mc_te_t *te;
    const mc_fi_t *fi;
    const char *proto;            /* "efa" or "cxi" */
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;            /* serving endpoint (its address is published) */
    uint8_t addr[MC_TE_DESC_MAX_FABRIC_ADDR];
    size_t addrlen;
    int virt_addr;                /* FI_MR_VIRT_ADDR */
    int mr_local;                 /* FI_MR_LOCAL: local buffers need an MR */
    int prov_key;                 /* FI_MR_PROV_KEY */
    int mr_endpoint;              /* FI_MR_ENDPOINT: one endpoint for everything */
    uint64_t key_next;            /* atomic: our keys without FI_MR_PROV_KEY */
    uint64_t key_mask;
    uint64_t slice;
    size_t window;
    int cq_wait;                  /* the queue has a wait object (fi_cq_sread) */
    pthread_mutex_t av_mu;        /* address vector inserts and removals */
    /* Endpoints are opened only while the poller is out of the queue, and
     * never closed before it has stopped: with tcp;ofi_rxm (libfabric
     * 1.17) fi_cq_sread crashes on a queue one of whose endpoints was
     * closed.  A peer's endpoint that is reset or closed is retired here
     * and closed at uninstall. */
    pthread_mutex_t prog_mu;
    pthread_cond_t prog_cond;
    unsigned prog_pause;          /* pause requests pending */
    int prog_busy;                /* the poller is in the queue */
    struct fid_ep **retired;      /* under prog_mu */
    size_t nretired;
    pthread_t poller;
    int poller_started;
    int stopping;                 /* atomic */
    unsigned leaked;              /* atomic: requests that never completed */
    struct mc_fabric *live_next;  /* in live_head while the poller runs */
} mc_fabric_t;

/* Engines whose poller runs.  A process that exits with an engine still
 * installed runs libfabric's destructor while the poller is inside
 * fi_cq_sread, which crashes; our atexit handler, registered after
 * libfabric was loaded and so run before its destructor, stops them. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static mc_fabric_t *live_head;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

/* One region's registration. */
typedef struct fabric_mr {
    struct fid_mr *mr;
    uint64_t key;
    void *desc;                   /* fi_mr_desc, for FI_MR_LOCAL */
} fabric_mr_t;

/* os.no_onesided is set when the target has no usable endpoint (none of
 * our provider's); os.use is held for reading by requests, for writing by
 * connect and the reset. */
typedef struct fabric_peer {
    mc_onesided_peer_t os;        /* first (onesided.h); os.tp is the mc_fabric_t */
    struct fid_ep *ep;            /* initiating endpoint (fb->ep with mr_endpoint) */
    fi_addr_t addr;
    int have_addr;
    int key_refused;              /* atomic: the last failure was a refused access */
} fabric_peer_t;

_Static_assert(offsetof(mc_fabric_t, os) == 0, "the engine's priv is the one-sided base");
_Static_assert(offsetof(fabric_peer_t, os) == 0, "the engine's peer is the one-sided base");

static mc_fabric_t *peer_fb(const fabric_peer_t *p)
{
    return (mc_fabric_t *)p->os.tp;
}

static const char *fab_err(const mc_fabric_t *fb, int err)
{
    return fb->fi->strerror(err < 0 ? -err : err);
}

/* ---- completions ---------------------------------------------------------- */

/* A refused key or range at the target, as the providers report it:
 * sockets says EACCES, tcp;ofi_rxm cancels with ENOENT from its MR map. */
static int err_is_access(int err, int prov_err)
{
    switch (err) {
    case FI_EACCES:
    case FI_EPERM:
    case FI_EINVAL:
    case FI_EKEYREJECTED:
    case FI_ENOKEY:
        return 1;
    case FI_ECANCELED:
        return (prov_err == ENOENT) || (prov_err == EINVAL) || (prov_err == EACCES) ||
               (prov_err == -EACCES) || (prov_err == -ENOENT) || (prov_err == -EINVAL);
    default:
        return 0;
    }
}

static void wait_free(fabric_wait_t *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* One slice done (err 0) or failed; the last completion of an abandoned
 * request frees it. */
static void op_done(void *ctx, int err, int prov_err)
{
    fabric_op_t *op  = ctx;
    fabric_wait_t *w = op->w;
    int last_of_abandoned;

    pthread_mutex_lock(&w->mu);
    if ((err != 0) && (w->st == MC_OK)) {
        w->err      = err;
        w->prov_err = prov_err;
        w->st       = err_is_access(err, prov_err)
                          ? ((w->op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE)
                          : MC_TRANSFER_FAIL;
    }
    w->pending--;
    last_of_abandoned = w->abandoned && (w->pending == 0);
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    if (last_of_abandoned)
        wait_free(w);
}

/* Read what the queue has: >0 completions handled, 0 none, <0 an error. */
static int cq_drain(mc_fabric_t *fb, int block)
{
    struct fi_cq_entry ents[FABRIC_POLL_BATCH];
    ssize_t n = block ? fi_cq_sread(fb->cq, ents, FABRIC_POLL_BATCH, NULL, FABRIC_WAIT_MS)
                      : fi_cq_read(fb->cq, ents, FABRIC_POLL_BATCH);

    if (n > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (ents[i].op_context != NULL)
                op_done(ents[i].op_context, 0, 0);
        return (int)n;
    }
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry e;
        memset(&e, 0, sizeof(e));
        if (fi_cq_readerr(fb->cq, &e, 0) > 0) {
            if (e.op_context != NULL)
                op_done(e.op_context, (e.err != 0) ? e.err : FI_EIO, e.prov_errno);
            return 1;
        }
        return 0;
    }
    if ((n == -FI_EAGAIN) || (n == -FI_ETIMEDOUT) || (n == -FI_EINTR))
        return 0;
    return -1;
}

/* Keep the poller out of the queue until progress_resume (see prog_mu). */
static void progress_pause(mc_fabric_t *fb)
{
    pthread_mutex_lock(&fb->prog_mu);
    fb->prog_pause++;
    while (fb->prog_busy) {
        struct timespec ts;
        if (fb->cq_wait)
            (void)fi_cq_signal(fb->cq); /* wake fi_cq_sread */
        clock_gettime(CLOCK_REALTIME, &ts);
        mc_timespec_add_ms(&ts, 5);
        (void)pthread_cond_timedwait(&fb->prog_cond, &fb->prog_mu, &ts);
    }
    pthread_mutex_unlock(&fb->prog_mu);
}

static void progress_resume(mc_fabric_t *fb)
{
    pthread_mutex_lock(&fb->prog_mu);
    fb->prog_pause--;
    pthread_cond_broadcast(&fb->prog_cond);
    pthread_mutex_unlock(&fb->prog_mu);
}

static void *poller_main(void *arg)
{
    mc_fabric_t *fb = arg;
    uint64_t idle_since = mc_now_ns();

    for (;;) {
        int n;
        pthread_mutex_lock(&fb->prog_mu);
        while ((fb->prog_pause > 0) && !__atomic_load_n(&fb->stopping, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&fb->prog_cond, &fb->prog_mu);
        if (__atomic_load_n(&fb->stopping, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&fb->prog_mu);
            break;
        }
        fb->prog_busy = 1;
        pthread_mutex_unlock(&fb->prog_mu);
        n = cq_drain(fb, fb->cq_wait);
        pthread_mutex_lock(&fb->prog_mu);
        fb->prog_busy = 0;
        pthread_cond_broadcast(&fb->prog_cond);
        pthread_mutex_unlock(&fb->prog_mu);
        if (n < 0) {
            mc_log_ratelimited(MC_LOG_ERROR, "fabric: reading the completion queue failed");
            (void)usleep(1000);
            continue;
        }
        if (n > 0) {
            idle_since = mc_now_ns();
            continue;
        }
        /* no wait object: spin a bounded window after the last completion,
         * then back off (the provider progresses in fi_cq_read) */
        if (!fb->cq_wait && (mc_now_ns() - idle_since > FABRIC_SPIN_NS))
            (void)usleep(50);
    }
    return NULL;
}

/* Stop and join @p fb's poller (live_mu held). */
static void poller_stop_locked(mc_fabric_t *fb)
{
    mc_fabric_t **pp;
    if (!fb->poller_started)
        return;
    pthread_mutex_lock(&fb->prog_mu);
    __atomic_store_n(&fb->stopping, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&fb->prog_cond);
    pthread_mutex_unlock(&fb->prog_mu);
    if (fb->cq_wait)
        (void)fi_cq_signal(fb->cq);
    pthread_join(fb->poller, NULL);
    fb->poller_started = 0;
    for (pp = &live_head; *pp != NULL; pp = &(*pp)->live_next) {
        if (*pp == fb) {
            *pp = fb->live_next;
            break;
        }
    }
}

static void pollers_stop_at_exit(void)
{
    pthread_mutex_lock(&live_mu);
    while (live_head != NULL)
        poller_stop_locked(live_head);
    pthread_mutex_unlock(&live_mu);
}

static void live_atexit_register(void)
{
    if (atexit(pollers_stop_at_exit) != 0)
        mc_warn("fabric: cannot register the exit handler; exiting with an engine open may "
                "crash in libfabric's destructor");
}

static mc_status_t poller_start(mc_fabric_t *fb)
{
    pthread_once(&live_once, live_atexit_register);
    pthread_mutex_lock(&live_mu);
    if (pthread_create(&fb->poller, NULL, poller_main, fb) != 0) {
        pthread_mutex_unlock(&live_mu);
        mc_set_error_detail("fabric: cannot start the completion poller");
        return MC_INTERNAL_ERROR;
    }
    fb->poller_started = 1;
    fb->live_next      = live_head;
    live_head          = fb;
    pthread_mutex_unlock(&live_mu);
    return MC_OK;
}

/* ---- objects -------------------------------------------------------------- */

/* An endpoint on the engine's address vector and completion queue. */
static mc_status_t ep_open(mc_fabric_t *fb, struct fid_ep **ep_p)
{
    struct fid_ep *ep = NULL;
    const char *what  = "fi_endpoint";
    int rc            = fi_endpoint(fb->domain, fb->info, &ep, NULL);

    if (rc == 0) {
        what = "fi_ep_bind (address vector)";
        rc   = fi_ep_bind(ep, &fb->av->fid, 0);
    }
    if (rc == 0) {
        what = "fi_ep_bind (completion queue)";
        rc   = fi_ep_bind(ep, &fb->cq->fid, FI_TRANSMIT | FI_RECV);
    }
    if (rc == 0) {
        what = "fi_enable";
        rc   = fi_enable(ep);
    }
    if (rc != 0) {
        mc_set_error_detail("fabric (%s): %s failed: %s", fb->info->fabric_attr->prov_name,
                            what, fab_err(fb, rc));
        if (ep != NULL)
            fi_close(&ep->fid);
        return MC_INTERNAL_ERROR;
    }
    *ep_p = ep;
    return MC_OK;
}

static int is_hw_provider(const char *name)
{
    return (strcmp(name, "efa") == 0) || (strcmp(name, "cxi") == 0);
}

static int addr_is_ip(uint32_t fmt)
{
    return (fmt == FI_SOCKADDR) || (fmt == FI_SOCKADDR_IN) || (fmt == FI_SOCKADDR_IN6);
}

/* fi_getinfo for one provider name: FI_EP_RDM with RMA, our MR modes, a
 * thread-safe domain and delivery-complete RMA (hardware providers may
 * decline the last).  NULL when libfabric offers nothing for it. */
static struct fi_info *info_get(mc_fabric_t *fb, const char *prov, const char *bind_addr)
{
    struct fi_info *hints, *info = NULL;
    int hw = is_hw_provider(prov);

    for (int dc = 1; (dc >= 0) && (info == NULL); dc--) {
        int rc;
        if (!dc && !hw)
            break;
        hints = fb->fi->dupinfo(NULL); /* fi_allocinfo() */
        if (hints == NULL)
            return NULL;
        hints->ep_attr->type = FI_EP_RDM;
        hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        hints->mode = FI_CONTEXT;
        hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
        hints->domain_attr->threading = FI_THREAD_SAFE;
        if (dc)
            hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
        hints->fabric_attr->prov_name = strdup(prov); /* freed with the hints */
        if (hints->fabric_attr->prov_name == NULL) {
            fb->fi->freeinfo(hints);
            return NULL;
        }
        rc = fb->fi->getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0,
                             hints, &info);
        /* a provider addressed by IP (tcp;ofi_rxm, sockets) binds to the data
         * port's address; EFA and CXI name devices, shm names processes */
        if ((rc == 0) && !hw && addr_is_ip(info->addr_format)) {
            fb->fi->freeinfo(info);
            info = NULL;
            rc   = fb->fi->getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), bind_addr,
                                   NULL, FI_SOURCE, hints, &info);
        }
        fb->fi->freeinfo(hints);
        if (rc != 0) {
            mc_debug("fabric: no %s endpoint%s: %s", prov, dc ? " with delivery-complete RMA" : "",
                     fab_err(fb, rc));
            info = NULL;
        }
    }
    return info;
}

/* Choose the provider: MC_FABRIC_PROVIDER alone when set, else the
 * protocol's own, tcp;ofi_rxm, sockets. */
static mc_status_t provider_pick(mc_fabric_t *fb, const char *bind_addr)
{
    const char *env = getenv("MC_FABRIC_PROVIDER");
    const char *order[3];
    size_t n = 0;

    if ((env != NULL) && (*env != '\0')) {
        order[n++] = env;
    } else {
        order[n++] = fb->proto;
        order[n++] = "tcp;ofi_rxm";
        order[n++] = "sockets";
    }
    for (size_t i = 0; (i < n) && (fb->info == NULL); i++)
        fb->info = info_get(fb, order[i], bind_addr);
    if (fb->info == NULL) {
        if (n == 1)
            mc_set_error_detail("fabric: MC_FABRIC_PROVIDER=%s offers no reliable-datagram "
                                "endpoint with RMA for %s (fi_info -l lists the providers)",
                                env, bind_addr);
        else
            mc_set_error_detail("fabric: libfabric offers no reliable-datagram endpoint with "
                                "RMA for %s (%s, tcp;ofi_rxm or sockets); FI_PROVIDER=%s "
                                "narrows the search", bind_addr, fb->proto,
                                getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "(unset)");
        return MC_NOT_SUPPORTED;
    }
    return MC_OK;
}

static mc_status_t fabric_open(mc_fabric_t *fb, const char *bind_addr)
{
    struct fi_av_attr av_attr;
    struct fi_cq_attr cq_attr;
    const char *what = NULL;
    uint64_t mode;
    int rc;
    mc_status_t st = provider_pick(fb, bind_addr);

    if (st != MC_OK)
        return st;
    mode            = fb->info->domain_attr->mr_mode;
    fb->virt_addr   = (mode & FI_MR_VIRT_ADDR) != 0;
    fb->mr_local    = (mode & FI_MR_LOCAL) != 0;
    fb->prov_key    = (mode & FI_MR_PROV_KEY) != 0;
    fb->mr_endpoint = (mode & FI_MR_ENDPOINT) != 0;
    fb->key_mask    = (fb->info->domain_attr->mr_key_size >= 8)
                          ? UINT64_MAX
                          : ((1ull << (8 * MC_MAX(fb->info->domain_attr->mr_key_size, 1))) - 1);
    fb->key_next    = (((uint64_t)getpid() << 20) ^ mc_now_ns()) & fb->key_mask & ~0xffffull;
    if ((fb->info->ep_attr->max_msg_size > 0) && (fb->slice > fb->info->ep_attr->max_msg_size))
        fb->slice = fb->info->ep_attr->max_msg_size;
    fb->window = FABRIC_WINDOW;
    if ((fb->info->tx_attr->size > 0) && (fb->window > fb->info->tx_attr->size))
        fb->window = fb->info->tx_attr->size;

    rc = fb->fi->fabric(fb->info->fabric_attr, &fb->fabric, NULL);
    if (rc != 0) {
        what = "fi_fabric";
        goto fail;
    }
    rc = fi_domain(fb->fabric, fb->info, &fb->domain, NULL);
    if (rc != 0) {
        what = "fi_domain";
        goto fail;
    }
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = FI_AV_TABLE;
    rc           = fi_av_open(fb->domain, &av_attr, &fb->av, NULL);
    if (rc != 0) {
        what = "fi_av_open";
        goto fail;
    }
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.size     = FABRIC_CQ_DEPTH;
    cq_attr.format   = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    rc               = fi_cq_open(fb->domain, &cq_attr, &fb->cq, NULL);
    fb->cq_wait      = (rc == 0);
    if (rc != 0) { /* EFA has no wait objects: poll */
        cq_attr.wait_obj = FI_WAIT_NONE;
        rc               = fi_cq_open(fb->domain, &cq_attr, &fb->cq, NULL);
    }
    if (rc != 0) {
        what = "fi_cq_open";
        goto fail;
    }
    st = ep_open(fb, &fb->ep);
    if (st != MC_OK)
        return st;
    fb->addrlen = sizeof(fb->addr);
    rc          = fi_getname(&fb->ep->fid, fb->addr, &fb->addrlen);
    if ((rc != 0) || (fb->addrlen == 0) || (fb->addrlen > sizeof(fb->addr))) {
        what = "fi_getname";
        rc   = (rc != 0) ? rc : -FI_ETOOSMALL;
        goto fail;
    }
    mc_info("fabric: %s over provider %s (fabric %s, domain %s; %s addresses, %s keys, slices "
            "of %llu bytes)", fb->proto, fb->info->fabric_attr->prov_name,
            fb->info->fabric_attr->name, fb->info->domain_attr->name,
            fb->virt_addr ? "virtual" : "offset", fb->prov_key ? "provider" : "our",
            (unsigned long long)fb->slice);
    return MC_OK;
fail:
    mc_set_error_detail("fabric (%s): %s failed: %s", fb->info->fabric_attr->prov_name, what,
                        fab_err(fb, rc));
    return MC_INTERNAL_ERROR;
}

static void fid_close(const mc_fabric_t *fb, struct fid *fid, const char *what)
{
    int rc = (fid != NULL) ? fi_close(fid) : 0;
    if (rc != 0)
        mc_warn("fabric: closing the %s failed: %s", what, fab_err(fb, rc));
}

static const mc_onesided_ops_t fabric_os_ops; /* with the requests, below */

static void fabric_uninstall(void *priv)
{
    mc_fabric_t *fb = priv;
    if (fb == NULL)
        return;
    mc_onesided_uninstall(&fb->os);
    pthread_mutex_lock(&live_mu);
    poller_stop_locked(fb);
    pthread_mutex_unlock(&live_mu);
    for (size_t i = 0; i < fb->nretired; i++)
        fid_close(fb, &fb->retired[i]->fid, "endpoint of a peer");
    free(fb->retired);
    fid_close(fb, fb->ep ? &fb->ep->fid : NULL, "endpoint");
    fid_close(fb, fb->av ? &fb->av->fid : NULL, "address vector");
    fid_close(fb, fb->cq ? &fb->cq->fid : NULL, "completion queue");
    fid_close(fb, fb->domain ? &fb->domain->fid : NULL, "domain");
    fid_close(fb, fb->fabric ? &fb->fabric->fid : NULL, "fabric");
    if (fb->info != NULL)
        fb->fi->freeinfo(fb->info);
    pthread_mutex_destroy(&fb->av_mu);
    pthread_cond_destroy(&fb->prog_cond);
    pthread_mutex_destroy(&fb->prog_mu);
    free(fb);
}

static mc_status_t fabric_install(const char *proto, mc_te_t *te, const char *bind_addr,
                                  uint16_t port, void **priv_p, uint16_t *port_p)
{
    mc_fabric_t *fb = calloc(1, sizeof(*fb));
    uint64_t slice  = FABRIC_SLICE_DEFAULT;
    mc_status_t st;

    if (fb == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_init(&fb->av_mu, NULL);
    pthread_mutex_init(&fb->prog_mu, NULL);
    pthread_cond_init(&fb->prog_cond, NULL);
    fb->te    = te;
    fb->proto = proto;
    fb->fi    = mc_fi_load(&st);
    if ((fb->fi == NULL) ||
        (mc_env_size("MC_FABRIC_SLICE_SIZE", 4096, 1ull << 30, &slice) != 0)) {
        if (fb->fi != NULL)
            st = MC_INVALID_PARAMS;
        fabric_uninstall(fb);
        return st;
    }
    fb->slice = slice;
    st        = fabric_open(fb, bind_addr);
    if (st == MC_OK)
        st = poller_start(fb);
    if (st == MC_OK) {
        fb->os.why_unkeyed = fb->mr_local
                                 ? "local memory not registered, or no key published for the range"
                                 : "no key published for the range";
        st = mc_onesided_install(&fb->os, &fabric_os_ops, te, bind_addr, port, port_p);
    }
    if (st != MC_OK) {
        fabric_uninstall(fb);
        return st;
    }
    *priv_p = fb;
    return MC_OK;
}

static mc_status_t efa_install(mc_te_t *te, const char *bind_addr, uint16_t port, void **priv_p,
                               uint16_t *port_p)
{
    return fabric_install("efa", te, bind_addr, port, priv_p, port_p);
}

static mc_status_t cxi_install(mc_te_t *te, const char *bind_addr, uint16_t port, void **priv_p,
                               uint16_t *port_p)
{
    return fabric_install("cxi", te, bind_addr, port, priv_p, port_p);
}

/* ---- memory ----------------------------------------------------------------- */

static mc_status_t fabric_mem_reg(void *priv, mc_te_region_t *r)
{
    mc_fabric_t *fb = priv;
    fabric_mr_t *m;
    uint64_t key = 0;
    int rc;

    if (r->fops != NULL)
        return MC_OK; /* a file segment: its bytes are read by the backend */
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    if (!fb->prov_key)
        key = __atomic_fetch_add(&fb->key_next, 1, __ATOMIC_RELAXED) & fb->key_mask;
    rc = fi_mr_reg(fb->domain, (void *)r->addr, r->len,
                   FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, key, 0, &m->mr,
                   NULL);
    if ((rc == 0) && fb->mr_endpoint) {
        rc = fi_mr_bind(m->mr, &fb->ep->fid, 0);
        if (rc == 0)
            rc = fi_mr_enable(m->mr);
    }
    if ((rc != 0) && (m->mr != NULL)) {
        fi_close(&m->mr->fid);
        m->mr = NULL;
    }
    if (rc != 0) {
        /* served over tcp instead: not an error for the engine */
        mc_warn("fabric: %s cannot register [0x%llx, +%zu): %s; requests on it go over tcp",
                fb->info->fabric_attr->prov_name, (unsigned long long)r->addr, r->len,
                fab_err(fb, rc));
        free(m);
        return MC_OK;
    }
    m->key   = fi_mr_key(m->mr);
    m->desc  = fi_mr_desc(m->mr);
    r->tp_mr = m;
    return MC_OK;
}

static void fabric_mem_dereg(void *priv, mc_te_region_t *r)
{
    fabric_mr_t *m = r->tp_mr;
    (void)priv;
    if (m == NULL)
        return;
    fi_close(&m->mr->fid);
    free(m);
    r->tp_mr = NULL;
}

static mc_status_t fabric_desc_fill(void *priv, mc_te_desc_t *d, mc_te_region_t *const *regions)
{
    mc_fabric_t *fb = priv;
    snprintf(d->fabric_provider, sizeof(d->fabric_provider), "%s",
             fb->info->fabric_attr->prov_name);
    memcpy(d->fabric_addr, fb->addr, fb->addrlen);
    d->fabric_addrlen   = fb->addrlen;
    d->fabric_virt_addr = fb->virt_addr;
    for (size_t i = 0; i < d->nbuffers; i++) {
        const fabric_mr_t *m = regions[i]->tp_mr;
        if (m == NULL)
            continue;
        d->buffers[i].fabric_key     = m->key;
        d->buffers[i].has_fabric_key = 1;
    }
    return MC_OK;
}

/* ---- peers -------------------------------------------------------------------- */

/* Keep @p ep open, unused, until uninstall (see prog_mu). */
static void ep_retire(mc_fabric_t *fb, struct fid_ep *ep)
{
    struct fid_ep **r;
    pthread_mutex_lock(&fb->prog_mu);
    r = realloc(fb->retired, (fb->nretired + 1) * sizeof(*r));
    if (r != NULL) {
        fb->retired                 = r;
        fb->retired[fb->nretired++] = ep;
        if (fb->nretired % 64 == 0)
            mc_warn("fabric: %zu endpoints reset or closed so far; they stay open until the "
                    "engine is destroyed", fb->nretired);
    } else {
        mc_warn("fabric: out of memory: one reset endpoint is left open");
    }
    pthread_mutex_unlock(&fb->prog_mu);
}

static mc_status_t fabric_peer_open(void *priv, const char *host, uint16_t port, void **peer_p)
{
    return mc_onesided_peer_create(priv, sizeof(fabric_peer_t), host, port, peer_p);
}

/* Drop the peer's endpoint and address (use held for writing). */
static void peer_reset(fabric_peer_t *p)
{
    mc_fabric_t *fb = peer_fb(p);
    if ((p->ep != NULL) && (p->ep != fb->ep))
        ep_retire(fb, p->ep);
    if (p->have_addr) {
        pthread_mutex_lock(&fb->av_mu);
        (void)fi_av_remove(fb->av, &p->addr, 1, 0);
        pthread_mutex_unlock(&fb->av_mu);
        p->have_addr = 0;
    }
    p->ep           = NULL;
    p->os.connected = 0;
}

static void fabric_peer_close(void *priv, void *peer)
{
    fabric_peer_t *p = peer;
    (void)priv;
    peer_reset(p);
    mc_onesided_peer_destroy(&p->os, 0);
}

/* Endpoint and address for the peer, from a fresh descriptor (use held
 * for writing; ops.connect).  MC_NOT_SUPPORTED (no_onesided set) when the
 * target has no endpoint of our provider. */
static mc_status_t peer_connect(mc_onesided_peer_t *op)
{
    fabric_peer_t *p = (fabric_peer_t *)op;
    mc_fabric_t *fb  = peer_fb(p);
    const char *prov = fb->info->fabric_attr->prov_name;
    uint8_t addr[MC_TE_DESC_MAX_FABRIC_ADDR];
    char theirs[MC_TE_DESC_MAX_FABRIC_PROV];
    size_t alen;
    int rc;
    mc_status_t st;

    peer_reset(p);
    st = mc_onesided_desc_refresh(&p->os);
    if (st != MC_OK)
        return st;
    pthread_mutex_lock(&p->os.desc_mu);
    snprintf(theirs, sizeof(theirs), "%s", p->os.desc.fabric_provider);
    alen = p->os.desc.fabric_addrlen;
    memcpy(addr, p->os.desc.fabric_addr, alen);
    pthread_mutex_unlock(&p->os.desc_mu);
    if (strcmp(theirs, prov) != 0) {
        mc_debug("fabric: %s:%u has %s%s, we have %s; requests to it go over tcp",
                 mc_tcp_peer_host(p->os.tcp_peer), (unsigned)mc_tcp_peer_port(p->os.tcp_peer),
                 theirs[0] ? "provider " : "no fabric endpoint", theirs, prov);
        __atomic_store_n(&p->os.no_onesided, 1, __ATOMIC_RELEASE);
        return MC_NOT_SUPPORTED;
    }
    if (fb->mr_endpoint) {
        p->ep = fb->ep;
    } else {
        progress_pause(fb);
        st = ep_open(fb, &p->ep);
        progress_resume(fb);
        if (st != MC_OK)
            return st;
    }
    pthread_mutex_lock(&fb->av_mu);
    rc = fi_av_insert(fb->av, addr, 1, &p->addr, 0, NULL);
    pthread_mutex_unlock(&fb->av_mu);
    if (rc != 1) {
        mc_set_error_detail("fabric: fi_av_insert of %s:%u's address failed: %s",
                            mc_tcp_peer_host(p->os.tcp_peer),
                            (unsigned)mc_tcp_peer_port(p->os.tcp_peer),
                            fab_err(fb, (rc < 0) ? rc : FI_EADDRNOTAVAIL));
        peer_reset(p);
        return MC_TRANSFER_FAIL;
    }
    p->have_addr = 1;
    p->os.connected = 1;
    __atomic_store_n(&p->os.broken, 0, __ATOMIC_RELEASE);
    mc_info("fabric: %s:%u reached over %s", mc_tcp_peer_host(p->os.tcp_peer),
            (unsigned)mc_tcp_peer_port(p->os.tcp_peer), prov);
    return MC_OK;
}

/* ---- requests ------------------------------------------------------------------ */

/* The target's buffer for [remote, +len): its key and the address to
 * name (virtual or an offset into the MR).  MC_NOT_SUPPORTED when the
 * buffer has no key (tcp serves it), INVALID_READ / INVALID_WRITE when no
 * published buffer holds the range, after one fresh descriptor. */
static mc_status_t remote_side(fabric_peer_t *p, mc_te_op_t op, uint64_t remote, uint64_t len,
                               uint64_t *raddr_p, uint64_t *key_p)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        const mc_te_buf_desc_t *b;
        mc_status_t st = MC_OK;
        if (attempt > 0) {
            st = mc_onesided_desc_refresh(&p->os);
            if (st != MC_OK)
                return st;
        }
        pthread_mutex_lock(&p->os.desc_mu);
        b = mc_te_desc_find(&p->os.desc, remote, len);
        if (b != NULL) {
            if (!b->has_fabric_key) {
                st = MC_NOT_SUPPORTED;
            } else {
                *key_p   = b->fabric_key;
                *raddr_p = p->os.desc.fabric_virt_addr ? remote : remote - b->addr;
            }
        }
        pthread_mutex_unlock(&p->os.desc_mu);
        if (b != NULL)
            return st;
    }
    mc_set_error_detail("fabric: [0x%llx, +%llu) is outside every buffer %s:%u publishes",
                        (unsigned long long)remote, (unsigned long long)len,
                        mc_tcp_peer_host(p->os.tcp_peer),
                        (unsigned)mc_tcp_peer_port(p->os.tcp_peer));
    return (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
}

/* Wait until the request has fewer than @p below slices pending, or the
 * deadline; 0, or -1 on timeout. */
static int wait_below(fabric_wait_t *w, size_t below, uint64_t deadline_ms)
{
    int ok;
    pthread_mutex_lock(&w->mu);
    while (w->pending >= below) {
        uint64_t now = mc_now_ms();
        struct timespec ts;
        uint64_t ms;
        if (now >= deadline_ms)
            break;
        ms = MC_MIN(deadline_ms - now, 100u);
        clock_gettime(CLOCK_REALTIME, &ts);
        mc_timespec_add_ms(&ts, ms);
        (void)pthread_cond_timedwait(&w->cond, &w->mu, &ts);
    }
    ok = w->pending < below;
    pthread_mutex_unlock(&w->mu);
    return ok ? 0 : -1;
}

static ssize_t post_one(fabric_peer_t *p, mc_te_op_t op, void *buf, size_t len, void *desc,
                        uint64_t raddr, uint64_t key, fabric_op_t *ctx)
{
    if (op == MC_TE_READ)
        return fi_read(p->ep, buf, len, desc, p->addr, raddr, key, &ctx->fctx);
    return fi_write(p->ep, buf, len, desc, p->addr, raddr, key, &ctx->fctx);
}

/* One request on the peer's endpoint (use held for reading). */
static mc_status_t xfer_fabric(fabric_peer_t *p, mc_te_op_t op, void *local, uint64_t remote,
                               uint64_t len)
{
    mc_fabric_t *fb = peer_fb(p);
    mc_te_t *te     = fb->te;
    uint64_t deadline = mc_now_ms() + (uint64_t)MC_MAX(te->cfg.io_timeout_s, 1) * 1000u;
    uint64_t raddr = 0, key = 0;
    size_t ns = (size_t)((len + fb->slice - 1) / fb->slice), posted = 0;
    mc_te_region_t *lr;
    void *ldesc;
    fabric_wait_t *w;
    mc_status_t st;
    int timed_out = 0;

    /* local memory without an MR: the provider takes it as it is unless it
     * needs local registrations (FI_MR_LOCAL, as EFA does): then tcp */
    lr = mc_te_region_acquire(te, (uint64_t)(uintptr_t)local, len, 0);
    if ((lr != NULL) && (lr->tp_mr == NULL)) {
        mc_te_region_release(te, lr);
        lr = NULL;
    }
    if ((lr == NULL) && fb->mr_local)
        return MC_NOT_SUPPORTED;
    ldesc = (lr != NULL) ? ((const fabric_mr_t *)lr->tp_mr)->desc : NULL;
    st    = remote_side(p, op, remote, len, &raddr, &key);
    if (st != MC_OK) {
        if (lr != NULL)
            mc_te_region_release(te, lr);
        return st;
    }
    w = calloc(1, sizeof(*w) + ns * sizeof(w->ops[0]));
    if (w == NULL) {
        if (lr != NULL)
            mc_te_region_release(te, lr);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->op = op;
    while ((posted < ns) && (st == MC_OK)) {
        uint64_t off = (uint64_t)posted * fb->slice;
        size_t n     = (size_t)MC_MIN(fb->slice, len - off);
        ssize_t rc;
        if (wait_below(w, fb->window, deadline) != 0) {
            timed_out = 1;
            break;
        }
        pthread_mutex_lock(&w->mu);
        st = w->st; /* a failed slice ends the request */
        if (st == MC_OK)
            w->pending++;
        pthread_mutex_unlock(&w->mu);
        if (st != MC_OK)
            break;
        w->ops[posted].w = w;
        rc = post_one(p, op, (char *)local + off, n, ldesc, raddr + off, key, &w->ops[posted]);
        while ((rc == -FI_EAGAIN) && (mc_now_ms() < deadline)) {
            /* the provider's queue is full: wait for one of ours to
             * complete (the poller makes progress), or a moment */
            size_t mine;
            pthread_mutex_lock(&w->mu);
            mine = w->pending;
            pthread_mutex_unlock(&w->mu);
            if (mine <= 1)
                (void)usleep(20);
            else
                (void)wait_below(w, mine, MC_MIN(deadline, mc_now_ms() + 1));
            rc = post_one(p, op, (char *)local + off, n, ldesc, raddr + off, key,
                          &w->ops[posted]);
        }
        if (rc != 0) {
            pthread_mutex_lock(&w->mu);
            w->pending--;
            pthread_mutex_unlock(&w->mu);
            mc_set_error_detail("fabric: posting %s of %zu bytes to %s:%u failed: %s",
                                (op == MC_TE_READ) ? "a read" : "a write", n,
                                mc_tcp_peer_host(p->os.tcp_peer),
                                (unsigned)mc_tcp_peer_port(p->os.tcp_peer), fab_err(fb, (int)rc));
            st = MC_TRANSFER_FAIL;
            break;
        }
        posted++;
    }
    if (!timed_out && (wait_below(w, 1, deadline) != 0))
        timed_out = 1;
    if (lr != NULL)
        mc_te_region_release(te, lr);
    pthread_mutex_lock(&w->mu);
    if (timed_out) {
        w->abandoned = (w->pending > 0);
        st           = MC_TRANSFER_FAIL;
        mc_set_error_detail("fabric: %s of %llu bytes to %s:%u timed out after %d s",
                            (op == MC_TE_READ) ? "read" : "write", (unsigned long long)len,
                            mc_tcp_peer_host(p->os.tcp_peer),
                            (unsigned)mc_tcp_peer_port(p->os.tcp_peer), te->cfg.io_timeout_s);
    } else if (w->st != MC_OK) {
        st = w->st;
        mc_set_error_detail("fabric: %s:%u %s the %s (%s, provider error %d)",
                            mc_tcp_peer_host(p->os.tcp_peer),
                            (unsigned)mc_tcp_peer_port(p->os.tcp_peer),
                            (st == MC_TRANSFER_FAIL) ? "failed" : "refused",
                            (op == MC_TE_READ) ? "read" : "write", fab_err(fb, w->err),
                            w->prov_err);
        if (st != MC_TRANSFER_FAIL)
            __atomic_store_n(&p->key_refused, 1, __ATOMIC_RELEASE);
    }
    if (w->abandoned) {
        /* its memory stays with the completions still to come */
        pthread_mutex_unlock(&w->mu);
        __atomic_add_fetch(&fb->leaked, 1, __ATOMIC_RELAXED);
    } else {
        pthread_mutex_unlock(&w->mu);
        wait_free(w);
    }
    if ((st == MC_TRANSFER_FAIL) || (st == MC_INVALID_READ) || (st == MC_INVALID_WRITE))
        if (timed_out || (posted > 0))
            __atomic_store_n(&p->os.broken, 1, __ATOMIC_RELEASE); /* reset before the next */
    return st;
}

/* ops.run: one attempt on the peer's endpoint (xfer_fabric). */
static mc_status_t fabric_run(mc_onesided_peer_t *op, mc_onesided_req_t *rq)
{
    return xfer_fabric((fabric_peer_t *)op, rq->op, rq->local, rq->remote, rq->len);
}

/* ops.retry: after a refused key, once more on a reset endpoint with a
 * fresh descriptor (the target may have registered again). */
static int fabric_retry(mc_onesided_peer_t *op, const mc_onesided_req_t *rq, mc_status_t st)
{
    fabric_peer_t *p = (fabric_peer_t *)op;
    (void)rq;
    if (((st != MC_INVALID_READ) && (st != MC_INVALID_WRITE)) ||
        !__atomic_exchange_n(&p->key_refused, 0, __ATOMIC_ACQ_REL))
        return 0;
    mc_info("fabric: %s:%u refused a key; fetching its descriptor again",
            mc_tcp_peer_host(op->tcp_peer), (unsigned)mc_tcp_peer_port(op->tcp_peer));
    return 1;
}

static const mc_onesided_ops_t fabric_os_ops = {
    .name          = "fabric",
    .connect       = peer_connect,
    .run           = fabric_run,
    .retry         = fabric_retry,
    .broken_detail = "fabric: the endpoint to the target keeps breaking",
    .why_none      = "the target has no endpoint of our provider",
    /* A READ naming a registration generation needs the target to check
     * it (docs/transfer.md §3.6): the tcp path does, a one-sided read
     * cannot (fabric publishes no generation words to READ after the data,
     * as rdma does). */
    .gen_reads_tcp = 1,
};

#define FABRIC_OPS(proto_name, install_fn)                                                   \
    {                                                                                        \
        .size = sizeof(mc_te_transport_ops_t), .name = (proto_name), .install = (install_fn), \
        .uninstall = fabric_uninstall, .peer_open = fabric_peer_open,                        \
        .peer_close = fabric_peer_close, .describe = mc_onesided_describe,                   \
        .xfer = mc_onesided_xfer, .mem_reg = fabric_mem_reg,                                 \
        .mem_dereg = fabric_mem_dereg, .desc_fill = fabric_desc_fill,                        \
        .disk_read = mc_onesided_disk_read, .peer_revive = mc_onesided_peer_revive,          \
    }

const mc_te_transport_ops_t mc_fabric_efa_transport_ops = FABRIC_OPS("efa", efa_install);
const mc_te_transport_ops_t mc_fabric_cxi_transport_ops = FABRIC_OPS("cxi", cxi_install);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The base of the one-sided transports (onesided.h): the tcp transport
 * and peers underneath rdma/ and fabric/, the target's descriptor, the
 * reset under the peer's use lock, and a request's way from one-sided to
 * tcp.  Owns no memory access of its own: connecting a peer and moving
 * bytes are the transport's (mc_onesided_ops_t).  May call tcp/ (its ops
 * table and tcp.h), descriptor.h and common/; nothing calls it but those
 * two transports.
 */
#include "config.h"

#include <stdlib.h>

#include "common/log.h"
#include "transfer/descriptor.h"
#include "transfer/onesided.h"
#include "transfer/tcp/tcp.h"

mc_status_t mc_onesided_install(mc_onesided_t *os, const mc_onesided_ops_t *ops, mc_te_t *te,
                                const char *bind_addr, uint16_t port, uint16_t *port_p)
{
    mc_status_t st;

    os->ops = ops;
    st      = mc_tcp_transport_ops.install(te, bind_addr, port, &os->tcp, port_p);
    if (st != MC_OK)
        os->tcp = NULL;
    return st;
}

void mc_onesided_uninstall(mc_onesided_t *os)
{
    if (os->tcp != NULL)
        mc_tcp_transport_ops.uninstall(os->tcp);
}

mc_status_t mc_onesided_peer_create(mc_onesided_t *os, size_t size, const char *host,
                                    uint16_t port, void **peer_p)
{
    mc_onesided_peer_t *p = calloc(1, size);
    mc_status_t st;

    if (p == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    st = mc_tcp_transport_ops.peer_open(os->tcp, host, port, &p->tcp_peer);
    if (st != MC_OK) {
        free(p);
        return st;
    }
    p->tp = os;
    pthread_rwlock_init(&p->use, NULL);
    pthread_mutex_init(&p->desc_mu, NULL);
    mc_te_desc_init(&p->desc);
    *peer_p = p;
    return MC_OK;
}

void mc_onesided_peer_destroy(mc_onesided_peer_t *p, int keep)
{
    mc_tcp_transport_ops.peer_close(p->tp->tcp, p->tcp_peer);
    mc_te_desc_cleanup(&p->desc);
    if (keep)
        return;
    pthread_mutex_destroy(&p->desc_mu);
    pthread_rwlock_destroy(&p->use);
    free(p);
}

mc_status_t mc_onesided_describe(void *priv, void *peer, char **json_p, size_t *len_p)
{
    const mc_onesided_t *os = priv;
    const mc_onesided_peer_t *p = peer;
    return mc_tcp_transport_ops.describe(os->tcp, p->tcp_peer, json_p, len_p);
}

/* The fail-fast verdicts are the tcp peer's, whose connection carries the
 * handshake and the requests that go over tcp. */
void mc_onesided_peer_revive(void *priv, void *peer, uint64_t before_ns)
{
    const mc_onesided_t *os = priv;
    const mc_onesided_peer_t *p = peer;
    mc_tcp_transport_ops.peer_revive(os->tcp, p->tcp_peer, before_ns);
}

/* A disk record (DISK_READ, docs/protocol.md §5.19) is read by the holder
 * from its file and sent back: no registered memory to reach one-sided,
 * so it goes over the peer's tcp connection, as the descriptor does. */
mc_status_t mc_onesided_disk_read(void *priv, void *peer, const mc_te_disk_req_t *req,
                                  void *buf)
{
    const mc_onesided_t *os = priv;
    const mc_onesided_peer_t *p = peer;
    return mc_tcp_transport_ops.disk_read(os->tcp, p->tcp_peer, req, buf);
}

mc_status_t mc_onesided_desc_refresh(mc_onesided_peer_t *p)
{
    char *json = NULL;
    size_t len = 0;
    mc_te_desc_t d;
    mc_status_t st = mc_onesided_describe(p->tp, p, &json, &len);
    if (st != MC_OK)
        return st;
    st = mc_te_desc_decode(json, len, &d);
    free(json);
    if (st != MC_OK)
        return st;
    pthread_mutex_lock(&p->desc_mu);
    mc_te_desc_move(&p->desc, &d);
    p->have_desc = 1;
    pthread_mutex_unlock(&p->desc_mu);
    return MC_OK;
}

/* Take the peer for a request: connected (ops->connect when it is not, or
 * broken), use held for reading; release with peer_leave. */
static mc_status_t peer_enter(mc_onesided_peer_t *p)
{
    mc_status_t st = MC_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_rwlock_rdlock(&p->use);
        if (p->connected && !__atomic_load_n(&p->broken, __ATOMIC_ACQUIRE))
            return MC_OK;
        pthread_rwlock_unlock(&p->use);
        /* a target that answered it has no endpoint of ours is not asked
         * again: its requests go over tcp from then on */
        if (__atomic_load_n(&p->no_onesided, __ATOMIC_ACQUIRE))
            return MC_NOT_SUPPORTED;
        pthread_rwlock_wrlock(&p->use);
        /* reset: every other request has left, nothing is outstanding */
        if (!p->connected || __atomic_load_n(&p->broken, __ATOMIC_ACQUIRE))
            st = p->tp->ops->connect(p);
        pthread_rwlock_unlock(&p->use);
        if (st != MC_OK)
            return st;
    }
    mc_set_error_detail("%s", p->tp->ops->broken_detail);
    return MC_TRANSFER_FAIL;
}

static void peer_leave(mc_onesided_peer_t *p)
{
    pthread_rwlock_unlock(&p->use);
}

static mc_status_t tcp_xfer(mc_onesided_peer_t *p, const mc_onesided_req_t *rq)
{
    return mc_tcp_transport_ops.xfer(p->tp->tcp, p->tcp_peer, rq->op, rq->local, rq->remote,
                                     rq->len, rq->gen);
}

/* One-sided first, then tcp; see onesided.h. */
static mc_status_t xfer(mc_onesided_peer_t *p, mc_onesided_req_t *rq)
{
    const mc_onesided_ops_t *ops = p->tp->ops;
    mc_status_t st               = peer_enter(p);

    if (st == MC_OK) {
        st = ops->run(p, rq);
        peer_leave(p);
        /* only once: a second failure is the request's */
        if ((st != MC_OK) && ops->retry(p, rq, st)) {
            st = peer_enter(p);
            if (st == MC_OK) {
                st = ops->run(p, rq);
                peer_leave(p);
            }
        }
        if (st != MC_NOT_SUPPORTED)
            return st;
    } else if (st != MC_NOT_SUPPORTED) {
        return st; /* connecting failed: the target has our endpoint but it broke */
    }
    /* no local registration or no key there (a tcp peer), or a generation
     * the one-sided path could not confirm: tcp checks it, and such a READ
     * goes there for its generation, not for want of keys (no notice) */
    if (!rq->stale && ((rq->gen == 0) || (rq->op != MC_TE_READ)) &&
        (__atomic_exchange_n(&p->warned_tcp, 1, __ATOMIC_ACQ_REL) == 0))
        mc_info("%s: requests to %s:%u go over tcp (%s); logged once per peer", ops->name,
                mc_tcp_peer_host(p->tcp_peer), (unsigned)mc_tcp_peer_port(p->tcp_peer),
                __atomic_load_n(&p->no_onesided, __ATOMIC_ACQUIRE) ? ops->why_none
                                                                    : p->tp->why_unkeyed);
    return tcp_xfer(p, rq);
}

mc_status_t mc_onesided_xfer(void *priv, void *peer, mc_te_op_t op, void *local,
                             uint64_t remote, uint64_t len, uint64_t gen)
{
    mc_onesided_req_t rq = {.op = op, .local = local, .remote = remote, .len = len, .gen = gen};
    mc_onesided_peer_t *p = peer;
    (void)priv;
    if ((gen != 0) && (op == MC_TE_READ) && p->tp->ops->gen_reads_tcp)
        return tcp_xfer(p, &rq);
    return xfer(p, &rq);
}

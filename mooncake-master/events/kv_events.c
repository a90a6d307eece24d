/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The KV cache event publisher (kv_events.h, docs/events.md).
 *
 * The event loop calls the hooks at the bottom where objects appear
 * (PutEnd of every form) and disappear (mc_idx_obj_erase: every path), and for
 * remove_all; each builds one record and appends it to the queue.  The
 * publisher thread owns the ZMQ PUB socket: it takes up to 64 records,
 * encodes them as upstream's three frames (empty topic, big-endian u64
 * sequence, msgpack [timestamp_ms, [event maps], 0]) and sends them.
 *
 * Sequence numbers: the first batch is 1, each batch takes the next, and
 * each event the queue dropped at its bound takes one too (a visible
 * gap).  With HA on etcd the numbers go on across leaders: a leader
 * reserves them in blocks of MC_KV_SEQ_BLOCK in the key
 * mooncake-store/<cluster_id>/kv_events/sequence, written in a transaction
 * guarded by its leader key (so a deposed leader cannot reserve more),
 * and uses only numbers it has reserved; a new leader starts after the
 * highest reservation.  A deposed leader may still send what it had
 * reserved, never a number the new leader uses (docs/events.md §4).
 *
 * Owns: the KV cache event publisher: its hooks, queue thread and
 *   transports (ZMQ, etcd).
 * May call: events/, ../master.h (is a replica in memory), ha/ (serving;
 *   the etcd endpoints), flags.h (the config check), libmooncake's
 *   coord/etcd.
 */
#include "config.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MC_HAVE_ZMQ
#include <zmq.h>
#endif

#include "common/log.h"
#include "coord/etcd.h"
#include "ha/ha.h"
#include "kv_events.h"
#include "master.h"

/* Sequence numbers an HA leader reserves in one etcd write. */
#define MC_KV_SEQ_BLOCK 65536

struct mc_kv_events {
    mc_master_t *m;
    mc_kv_queue_t q;
    pthread_t thread;
    int started;
    void *zctx;
    void *sock;
    mc_kv_event_opts_t opts;
    char *backend_id;

    /* publisher thread only */
    uint64_t next_seq;         /* of the next batch */
    uint64_t next_id;          /* of the next event */
    mc_mp_buf_t buf;
    /* HA on etcd: the reservation (publisher thread only) */
    mc_etcd_t *etcd;           /* NULL: no reservation (HA off) */
    char guard_key[320];       /* the leader key */
    char seq_key[320];
    int64_t term;              /* of the reservation; 0 = none yet */
    uint64_t reserved;         /* highest number this leader may use */

    /* GET /kv_events/status */
    _Atomic uint64_t published_batches;
    _Atomic uint64_t published_events;
    _Atomic uint64_t send_dropped;   /* events of batches not sent */
    _Atomic uint64_t skipped;        /* skipped_unparsed_keys (event loop) */
};

void mc_kv_events_stats(mc_master_t *m, mc_kv_events_stats_t *s)
{
    mc_kv_events_t *p = m->kv_events;

    memset(s, 0, sizeof(*s));
    if (p == NULL)
        return;
    s->enabled           = 1;
    s->published_batches = atomic_load(&p->published_batches);
    s->published_events  = atomic_load(&p->published_events);
    pthread_mutex_lock(&p->q.lock);
    s->dropped_events = p->q.dropped;
    pthread_mutex_unlock(&p->q.lock);
    s->dropped_events += atomic_load(&p->send_dropped);
    s->skipped_unparsed_keys = atomic_load(&p->skipped);
}

#ifdef MC_HAVE_ZMQ

/*
 * HA on etcd: make sure the next sequence number is one this leader has
 * reserved.  A new term first reads the highest reservation of any
 * earlier leader and starts after it.  Returns 0, or -1 when the
 * reservation failed (etcd unreachable, or no longer the leader): the
 * batch is not sent.
 */
static int seq_reserve(mc_kv_events_t *p)
{
    int64_t term = atomic_load(&p->m->ha->term);
    mc_etcd_kv_t kv = {0};
    mc_etcd_op_t op;
    char val[32];
    uint64_t hi;
    mc_status_t st;

    if ((term == p->term) && (p->next_seq <= p->reserved))
        return 0;
    if (term <= 0)
        return -1; /* never elected: nothing to send under */
    if (term != p->term) {
        st = mc_etcd_get(p->etcd, p->seq_key, &kv, NULL);
        if ((st != MC_OK) && (st != MC_ETCD_KEY_NOT_EXIST)) {
            mc_warn("kv events: cannot read %s: %s", p->seq_key, mc_status_string(st));
            return -1;
        }
        if (st == MC_OK) {
            uint64_t prev = strtoull(kv.value, NULL, 10);
            if (prev >= p->next_seq)
                p->next_seq = prev + 1;
        }
        mc_etcd_kv_cleanup(&kv);
    }
    hi = p->next_seq + MC_KV_SEQ_BLOCK - 1;
    snprintf(val, sizeof(val), "%" PRIu64, hi);
    memset(&op, 0, sizeof(op));
    op.key = p->seq_key;
    op.val = val;
    op.len = strlen(val);
    st     = mc_etcd_txn_guarded(p->etcd, p->guard_key, term, &op, 1);
    if (st != MC_OK) {
        mc_warn("kv events: cannot reserve sequence numbers in term %" PRId64 ": %s", term,
                mc_status_string(st));
        return -1;
    }
    if (term != p->term)
        mc_info("kv events: term %" PRId64 " publishes from sequence %" PRIu64, term,
                p->next_seq);
    p->term     = term;
    p->reserved = hi;
    return 0;
}

/* Send @p n records (freed here) as one batch. */
static void publish(mc_kv_events_t *p, mc_kv_event_t **ev, size_t n)
{
    uint8_t seq_be[8];
    uint64_t seq;
    int64_t ts = (int64_t)mc_wall_ms();
    int ok;

    if ((p->etcd != NULL) && (seq_reserve(p) != 0)) {
        atomic_fetch_add(&p->send_dropped, n);
        goto out;
    }
    seq = p->next_seq++;
    for (int i = 0; i < 8; i++)
        seq_be[i] = (uint8_t)(seq >> (56 - 8 * i));
    if (mc_kv_event_encode_batch(&p->buf, &p->opts, ts, ev, n, &p->next_id) != 0) {
        mc_warn("kv events: out of memory encoding a batch of %zu events", n);
        atomic_fetch_add(&p->send_dropped, n);
        goto out;
    }
    /* ZMQ_DONTWAIT: a PUB socket drops at its high-water mark instead of
     * blocking, so this never waits on a slow subscriber */
    ok = (zmq_send(p->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) == 0) &&
         (zmq_send(p->sock, seq_be, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) == 8) &&
         (zmq_send(p->sock, p->buf.data, p->buf.len, ZMQ_DONTWAIT) == (int)p->buf.len);
    if (ok) {
        atomic_fetch_add(&p->published_batches, 1);
        atomic_fetch_add(&p->published_events, n);
    } else {
        mc_warn("kv events: sending batch %" PRIu64 " failed: %s", seq, zmq_strerror(zmq_errno()));
        atomic_fetch_add(&p->send_dropped, n);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(ev[i]);
}

static void *publisher_main(void *arg)
{
    mc_kv_events_t *p = arg;
    mc_kv_event_t *ev[MC_KV_EVENTS_BATCH_MAX];
    uint64_t gap;
    int stop = 0;

    for (;;) {
        size_t n = mc_kv_queue_pop(&p->q, ev, MC_KV_EVENTS_BATCH_MAX, 1, &gap, &stop);
        /* each event dropped at the bound used a number: subscribers see
         * the hole */
        p->next_seq += gap;
        if (n > 0)
            publish(p, ev, n);
        else if (stop)
            break;
    }
    return NULL;
}

static void publisher_free(mc_kv_events_t *p)
{
    if (p->sock != NULL)
        zmq_close(p->sock);
    if (p->zctx != NULL)
        zmq_ctx_term(p->zctx);
    mc_kv_queue_cleanup(&p->q);
    mc_mp_cleanup(&p->buf);
    mc_etcd_destroy(p->etcd);
    free(p->backend_id);
    free(p);
}

mc_status_t mc_kv_events_start(mc_master_t *m)
{
    const mc_master_config_t *cfg = m->cfg;
    mc_kv_events_t *p;
    int hwm = 10000, linger = 0;

    if (!cfg->enable_kv_events)
        return MC_OK;
    if ((cfg->kv_events_bind_endpoint[0] == '\0') || (cfg->kv_events_backend_id[0] == '\0')) {
        mc_error("--enable_kv_events needs --kv_events_bind_endpoint and "
                 "--kv_events_backend_id; KV events are off");
        return MC_OK;
    }
    p = calloc(1, sizeof(*p));
    if ((p == NULL) || (mc_kv_queue_init(&p->q, (size_t)cfg->kv_events_queue_capacity) != 0)) {
        mc_error("kv events: out of memory; KV events are off");
        free(p);
        return MC_OK;
    }
    p->m          = m;
    p->next_seq   = 1;
    p->next_id    = 1;
    p->backend_id = strdup(cfg->kv_events_backend_id);
    mc_mp_init(&p->buf);
    p->opts.backend_id         = p->backend_id;
    p->opts.emit_legacy_compat = cfg->kv_events_emit_legacy_compat;
    p->opts.emit_object_key    = cfg->kv_events_emit_object_key;
    if (p->backend_id == NULL)
        goto fail;
    if ((m->ha != NULL) && (strcmp(cfg->ha_backend_type, "etcd") == 0)) {
        if (mc_etcd_create(mc_master_ha_endpoints(cfg), 0, &p->etcd) != MC_OK) {
            mc_error("kv events: --etcd_endpoints: %s", mc_last_error_detail());
            goto fail;
        }
        snprintf(p->guard_key, sizeof(p->guard_key), "%s", m->ha->key);
        snprintf(p->seq_key, sizeof(p->seq_key), "mooncake-store/%s/kv_events/sequence",
                 cfg->cluster_id);
    } else if (m->ha != NULL) {
        mc_warn("kv events: sequence numbers continue across leaders only with "
                "--ha_backend_type=etcd; with %s each term starts at 1", cfg->ha_backend_type);
    }
    p->zctx = zmq_ctx_new();
    p->sock = p->zctx ? zmq_socket(p->zctx, ZMQ_PUB) : NULL;
    if (p->sock == NULL) {
        mc_error("kv events: cannot create the ZMQ PUB socket: %s; KV events are off",
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    if ((zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0) ||
        (zmq_setsockopt(p->sock, ZMQ_LINGER, &linger, sizeof(linger)) != 0)) {
        mc_error("kv events: cannot set ZMQ_SNDHWM/ZMQ_LINGER: %s; KV events are off",
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (zmq_bind(p->sock, cfg->kv_events_bind_endpoint) != 0) {
        mc_error("kv events: cannot bind --kv_events_bind_endpoint=%s: %s; KV events are off",
                 cfg->kv_events_bind_endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    /* the socket moves to the thread: pthread_create is the barrier ZMQ
     * asks for when a socket changes threads */
    if (pthread_create(&p->thread, NULL, publisher_main, p) != 0) {
        mc_error("kv events: cannot start the publisher thread; KV events are off");
        goto fail;
    }
    p->started   = 1;
    m->kv_events = p;
    mc_info("kv events: publishing on %s (backend_id %s, queue capacity %" PRId64 "%s)",
            cfg->kv_events_bind_endpoint, p->backend_id, cfg->kv_events_queue_capacity,
            cfg->kv_events_queue_capacity == 0 ? " = unbounded" : "");
    return MC_OK;

fail:
    publisher_free(p);
    return MC_OK;
}

void mc_kv_events_stop(mc_master_t *m)
{
    mc_kv_events_t *p = m->kv_events;

    if (p == NULL)
        return;
    m->kv_events = NULL;
    /* the thread drains the queue, then ends */
    mc_kv_queue_stop(&p->q);
    if (p->started)
        pthread_join(p->thread, NULL);
    publisher_free(p);
}

#else /* !MC_HAVE_ZMQ */

/* configure found no libzmq: --enable_kv_events is refused at start
 * (mc_master_config_check), so there is never a publisher. */
mc_status_t mc_kv_events_start(mc_master_t *m)
{
    (void)m;
    return MC_OK;
}

void mc_kv_events_stop(mc_master_t *m)
{
    (void)m;
}

#endif /* MC_HAVE_ZMQ */

/* ---- hooks of the object index (event loop) ------------------------------------- */

/* The publisher when events should go out now: a serving master only. */
static mc_kv_events_t *active(mc_master_t *m)
{
    if ((m->kv_events == NULL) || !mc_master_ha_serving(m))
        return NULL;
    return m->kv_events;
}

/*
 * Upstream's medium rule: cpu when a memory replica exists, else disk
 * when a NoF, disk (offload) or DFS copy does, else cpu.
 */
static mc_kv_medium_t medium_of(const mc_object_t *o)
{
    if (mc_master_object_has_memory(o))
        return MC_KV_MEDIUM_CPU;
    if (mc_object_has_replicas(o) ||
        ((o->ext != NULL) && ((o->ext->disk != NULL) || (o->ext->dfs != NULL))))
        return MC_KV_MEDIUM_DISK;
    return MC_KV_MEDIUM_CPU;
}

static void object_event(mc_kv_events_t *p, const mc_object_t *o, mc_kv_event_type_t type)
{
    mc_str_t key    = mc_object_key(o);
    mc_str_t tenant = mc_object_tenant(o);
    const char *group = (o->ext != NULL) ? o->ext->group_id : NULL;
    mc_kv_event_t *e;

    e = mc_kv_event_new(type, medium_of(o), key.ptr, key.len, tenant.ptr, tenant.len, group,
                        group ? strlen(group) : 0);
    if (e == NULL) {
        pthread_mutex_lock(&p->q.lock);
        p->q.dropped++;
        p->q.gap++;
        pthread_mutex_unlock(&p->q.lock);
        return;
    }
    if (!e->has_hash) {
        /* B.3: counted always; published with its key only */
        atomic_fetch_add(&p->skipped, 1);
        if (!p->opts.emit_object_key || (key.len == 0)) {
            free(e);
            return;
        }
    }
    mc_kv_queue_push(&p->q, e);
}

void mc_kv_events_stored(mc_master_t *m, const mc_object_t *o)
{
    mc_kv_events_t *p = active(m);
    if (p != NULL)
        object_event(p, o, MC_KV_EVENT_STORED);
}

void mc_kv_events_removed(mc_master_t *m, const mc_object_t *o)
{
    mc_kv_events_t *p = active(m);
    if (p != NULL)
        object_event(p, o, MC_KV_EVENT_REMOVED);
}

void mc_kv_events_cleared(mc_master_t *m, const char *tenant, size_t tenant_len)
{
    mc_kv_events_t *p = active(m);
    mc_kv_event_t *e;

    if (p == NULL)
        return;
    e = mc_kv_event_new(MC_KV_EVENT_CLEARED, MC_KV_MEDIUM_CPU, NULL, 0, tenant, tenant_len,
                        NULL, 0);
    if (e != NULL)
        mc_kv_queue_push(&p->q, e);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Client liveness: a library thread PINGs the master every second on a
 * connection of its own, so a busy pool (or a caller stuck in Python)
 * never delays a heartbeat and the master never declares a live client
 * dead.
 *
 * The master answers NEED_REMOUNT when it does not know this client (first
 * contact, a restart, or after our TTL expired during a stall); the thread
 * then publishes the transfer-engine metadata again (HTTP metadata mode:
 * the master's embedded metadata server forgot it too) and sends
 * REMOUNT_SEGMENTS with every segment we hold, which re-creates them
 * (empty) on the master.  A transport failure drops the connection
 * and the next tick dials again; three failed pings in a row (a master that
 * answers errors or times out) force a fresh connection as upstream does.
 *
 * The thread and its connection are a worker (worker.c): it waits on a
 * condition variable between ticks, and mc_store_heartbeat_stop() shuts
 * the socket down so a ping in flight returns at once.
 *
 * After a successful ping the thread also finishes graceful unmounts whose
 * grace period is over (mc_store_segments_reap, mount.c), on its own
 * connection, so a draining segment goes within a tick of its deadline.
 * Every tick it also lets the transfer engine unmap the segments of
 * same-host holders that died (mc_te_shm_sweep): the master drops their
 * replicas, so no read would ever notice, and their memory would stay
 * mapped here until close.
 *
 * May call: threads.h (this folder), ../segments/segments.h (remount,
 * reaping), ../tiers/tiers.h (NoF remount), ../write/write.h (a new master
 * view empties the reservations), the master pool, the engine.  Called by:
 * store.c (start, stop).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"
#include "store/tiers/tiers.h"
#include "store/write/write.h"
#include "transfer/engine.h"

#define MC_HB_CONNECT_TIMEOUT_MS 1000
#define MC_HB_IO_TIMEOUT_MS 5000
#define MC_PING_OK 1
#define MC_PING_NEED_REMOUNT 2

/* NEED_REMOUNT: publish our transfer-engine metadata again (HTTP mode; a
 * restarted master's embedded metadata server starts empty, and one that
 * expired us may have deleted it), then REMOUNT_SEGMENTS with every
 * segment we hold.  The metadata goes first: once the master has the
 * segments it places objects in them, and the writers need the metadata
 * to reach us.  When publishing fails nothing is remounted; the master
 * still does not know us, so the next tick asks and tries again. */
static void hb_remount(mc_store_h s, mc_mconn_t *conn, int fence)
{
    mc_status_t st;
    mc_arena_t arena;
    mc_wire_remount_segments_req_t req;
    mc_wire_remount_segments_resp_t resp;

    st = mc_te_meta_publish(s->te, 1);
    if (st != MC_OK) {
        mc_warn("master asked for a remount, but publishing the metadata of %s failed: %s "
                "(%s); retrying on the next heartbeat", s->hostname, mc_status_name(st),
                mc_last_error_detail());
        return;
    }
    mc_arena_init(&arena);
    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    /* with @p fence each segment moves to a fence of its own first
     * (common/gen.h): the master that asks is not the one that placed or
     * answered what may still be in flight (a restart, a takeover), or it
     * forgot us and our segments (our TTL ran out), and must not hand out
     * our memory under those.  The first contact after setup needs none:
     * the master that asks is the one we mounted on, and knows our
     * segments. */
    st            = mc_store_segments_to_wire(s, &arena, &req.segments, fence);
    if (st == MC_OK)
        st = mc_master_call_remount_segments(conn, &req, &resp);
    if (st == MC_OK) {
        mc_info("master asked for a remount: %u segment(s) of %s remounted",
                (unsigned)req.segments.n, s->hostname);
    } else {
        mc_warn("remounting segments of %s failed: %s (%s)", s->hostname,
                mc_status_name(st), mc_last_error_detail());
    }
    mc_arena_cleanup(&arena);
    if (st == MC_OK)
        mc_store_nof_remount(s, conn, fence);
}

/* One heartbeat.  Returns 0 when the master answered the ping.
 *
 * A connection kept from an earlier tick that turns out dead (the master
 * closed it: a restart, most likely) is replaced at once and the ping
 * repeated on the fresh one, so a restarted master hears from us, and
 * asks for the remount, on the first tick after it is up rather than one
 * tick later. */
static int hb_beat(mc_store_h s, mc_master_target_t *target)
{
    mc_store_worker_t *hb = &s->hb;
    mc_status_t st;
    mc_mconn_t *conn = hb->conn; /* only this thread writes hb->conn */
    mc_wire_ping_req_t req;
    mc_wire_ping_resp_t resp;
    int fresh = 0, stale;

    for (;;) {
        if (conn == NULL) {
            conn = mc_store_worker_conn(hb, target);
            if (conn == NULL)
                return -1;
            fresh = 1;
        }

        memset(&req, 0, sizeof(req));
        req.client_id = s->client_id;
        st            = mc_master_call_ping(conn, &req, &resp);
        if (st == MC_OK)
            break;
        mc_debug("heartbeat ping failed: %s (%s)", mc_status_name(st), mc_last_error_detail());
        if (!conn->broken)
            return -1;
        /* peer_gone: EOF or a reset, not a timeout (a hung master gets
         * no second ping this tick).  mc_store_heartbeat_stop() shutting
         * the socket down looks the same, hence the stop check. */
        stale = !fresh && conn->peer_gone;
        mc_store_worker_drop_conn(hb); /* closes conn */
        if (!stale || mc_store_worker_stopping(hb))
            return -1;
        mc_debug("heartbeat connection went stale; pinging on a fresh one");
        conn = NULL;
    }
    /* reservations of another master are not ours to fill (reserve.c) */
    mc_store_resv_view(s, resp.view_version);
    if (resp.client_status == MC_PING_NEED_REMOUNT)
        hb_remount(s, conn,
                   s->hb_ok_once || ((s->hb_view != 0) && (s->hb_view != resp.view_version)));
    else
        s->hb_ok_once = 1;
    s->hb_view = resp.view_version;
    /* graceful unmounts whose grace period is over (mount.c) */
    if (!conn->broken)
        mc_store_segments_reap(s, conn);
    if (conn->broken)
        mc_store_worker_drop_conn(hb);
    return 0;
}

static void *hb_main(void *arg)
{
    mc_store_h s              = arg;
    mc_store_worker_t *hb     = &s->hb;
    mc_master_target_t target = s->target;
    unsigned fails            = 0;
    struct timespec next, now;

    target.connect_timeout_ms = MC_HB_CONNECT_TIMEOUT_MS;
    /* one look for the leader per tick (etcd://): stopping stays prompt */
    target.failover_wait_ms = 0;
    if ((target.io_timeout_ms == 0) || (target.io_timeout_ms > MC_HB_IO_TIMEOUT_MS))
        target.io_timeout_ms = MC_HB_IO_TIMEOUT_MS;

    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!mc_store_worker_stopping(hb)) {
        int beat = hb_beat(s, &target);
        if (beat != 0)
            mc_store_resv_clear(s); /* the master may be restarting */
        if (beat == 0) {
            if (fails >= MC_STORE_HEARTBEAT_MAX_FAILS)
                mc_info("master reachable again after %u failed heartbeats", fails);
            fails = 0;
        } else {
            if (++fails == MC_STORE_HEARTBEAT_MAX_FAILS) {
                mc_warn("%u heartbeats in a row failed (%s); reconnecting to the master",
                        fails, mc_last_error_detail());
            }
            if ((fails % MC_STORE_HEARTBEAT_MAX_FAILS) == 0)
                mc_store_worker_drop_conn(hb);
        }
        /* /health says master_unreachable from MC_STORE_HEARTBEAT_MAX_FAILS on */
        atomic_store_explicit(&s->metrics.master_fails, fails, memory_order_relaxed);

        mc_te_shm_sweep(s->te);

        /* Fixed-rate ticks; after a long stall, restart from now. */
        clock_gettime(CLOCK_MONOTONIC, &now);
        mc_timespec_add_ms(&next, hb->interval_ms);
        if ((next.tv_sec < now.tv_sec) ||
            ((next.tv_sec == now.tv_sec) && (next.tv_nsec < now.tv_nsec)))
            next = now;
        if (mc_store_worker_wait_until(hb, &next))
            break;
    }
    mc_store_worker_drop_conn(hb);
    return NULL;
}

mc_status_t mc_store_heartbeat_start(mc_store_h s)
{
    /* Tests shorten the interval to exercise remounts quickly. */
    return mc_store_worker_start(
        &s->hb, "heartbeat",
        mc_store_env_interval_ms("MC_STORE_HEARTBEAT_MS", MC_STORE_HEARTBEAT_MS, 10, 600000),
        hb_main, s);
}

void mc_store_heartbeat_stop(mc_store_h s)
{
    mc_store_worker_stop(&s->hb);
}

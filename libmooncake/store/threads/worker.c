/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A library thread with its own master connection (store_internal.h):
 * what the heartbeat (heartbeat.c) and the task executor (tasks.c) share.
 *
 * The thread waits on a CLOCK_MONOTONIC condition variable between rounds
 * of work, so stopping is prompt: mc_store_worker_stop() sets the flag,
 * signals the condition and shuts the thread's socket down, so a call in
 * flight returns at once, then joins.  w->lock guards w->stop and w->conn;
 * only the thread itself replaces or closes the connection, and only under
 * the lock, so the shutdown never touches a recycled descriptor.
 *
 * May call: the master pool only.  Called by: heartbeat.c, tasks.c,
 * ../tiers/disk.c (the offloader), the dummy's ping.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"

unsigned mc_store_env_interval_ms(const char *name, unsigned def, unsigned lo, unsigned hi)
{
    const char *env = getenv(name);
    uint64_t v;

    if ((env == NULL) || (*env == '\0'))
        return def;
    if ((mc_parse_u64(env, &v) == 0) && (v >= lo) && (v <= hi))
        return (unsigned)v;
    mc_warn("ignoring %s=\"%s\": expected %u to %u", name, env, lo, hi);
    return def;
}

mc_status_t mc_store_worker_start(mc_store_worker_t *w, const char *name, unsigned interval_ms,
                                  void *(*main_fn)(void *), void *arg)
{
    pthread_condattr_t ca;
    int rc;

    w->stop        = 0;
    w->conn        = NULL;
    w->name        = name;
    w->interval_ms = interval_ms;
    if (pthread_condattr_init(&ca) != 0) {
        mc_set_error_detail("cannot create the %s condition", name);
        return MC_INTERNAL_ERROR;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        mc_set_error_detail("cannot create the %s condition", name);
        return MC_INTERNAL_ERROR;
    }
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        pthread_cond_destroy(&w->cond);
        mc_set_error_detail("cannot create the %s lock", name);
        return MC_INTERNAL_ERROR;
    }
    rc = pthread_create(&w->thread, NULL, main_fn, arg);
    if (rc != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        mc_set_error_detail("cannot start the %s thread: %s", name, strerror(rc));
        mc_error("cannot start the %s thread: %s", name, strerror(rc));
        return MC_INTERNAL_ERROR;
    }
    w->started = 1;
    return MC_OK;
}

void mc_store_worker_stop(mc_store_worker_t *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    mc_mconn_shutdown(w->conn); /* a call in flight returns now */
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    w->started = 0;
}

int mc_store_worker_stopping(mc_store_worker_t *w)
{
    int stop;
    pthread_mutex_lock(&w->lock);
    stop = w->stop;
    pthread_mutex_unlock(&w->lock);
    return stop;
}

int mc_store_worker_wait_until(mc_store_worker_t *w, const struct timespec *deadline)
{
    int stop;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        if (pthread_cond_timedwait(&w->cond, &w->lock, deadline) == ETIMEDOUT)
            break;
    }
    stop = w->stop;
    pthread_mutex_unlock(&w->lock);
    return stop;
}

int mc_store_worker_wait_ms(mc_store_worker_t *w, unsigned ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    mc_timespec_add_ms(&dl, ms);
    return mc_store_worker_wait_until(w, &dl);
}

mc_mconn_t *mc_store_worker_conn(mc_store_worker_t *w, const mc_master_target_t *target)
{
    mc_mconn_t *conn = w->conn; /* only this thread writes w->conn */

    if (conn != NULL)
        return conn;
    if (mc_mconn_open(target, &conn) != MC_OK) {
        mc_debug("%s cannot reach the master: %s", w->name, mc_last_error_detail());
        return NULL;
    }
    pthread_mutex_lock(&w->lock);
    if (w->stop) {
        pthread_mutex_unlock(&w->lock);
        mc_mconn_close(conn);
        return NULL;
    }
    w->conn = conn;
    pthread_mutex_unlock(&w->lock);
    return conn;
}

void mc_store_worker_drop_conn(mc_store_worker_t *w)
{
    mc_mconn_t *conn;
    pthread_mutex_lock(&w->lock);
    conn    = w->conn;
    w->conn = NULL;
    pthread_mutex_unlock(&w->lock);
    mc_mconn_close(conn);
}

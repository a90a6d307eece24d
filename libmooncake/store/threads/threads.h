/* SPDX-License-Identifier: Apache-2.0 */
/*
 * threads/: the door of the library threads beside the caller's.  Other
 * folders include this header and no other file of threads/.
 *
 * Owns: the worker shape (worker.c: a thread with its own master
 * connection, a condition to stop it), the heartbeat (heartbeat.c), the
 * copy and move tasks and their executor (tasks.c), the client HTTP
 * server (http.c) and the asynchronous completion queue (async.c: its
 * workers run the public batch calls).
 *
 * May call: ../store_internal.h (calls.c), ../segments/, ../tiers/,
 * ../write/ (the heartbeat's remount and reservations), ../read/, the
 * public API (http.c, async.c).  Called by: store.c (start, stop),
 * ../tiers/disk.c and the dummy (workers).
 */
#ifndef MC_STORE_THREADS_H
#define MC_STORE_THREADS_H

#include <stdint.h>

#include <time.h>

#include "store/store_internal.h"

/* worker.c.  start: runs @p main_fn(@p arg) on a new thread.  stop: sets
 * the flag, shuts the connection down and joins.  wait_*: 1 when stopping.
 * conn: the thread's connection, dialled when there is none; NULL when the
 * master cannot be reached or the worker is stopping.  Only the worker's
 * own thread calls conn and drop_conn. */
mc_status_t mc_store_worker_start(mc_store_worker_t *w, const char *name, unsigned interval_ms,
                                  void *(*main_fn)(void *), void *arg);
void mc_store_worker_stop(mc_store_worker_t *w);
int mc_store_worker_stopping(mc_store_worker_t *w);
int mc_store_worker_wait_until(mc_store_worker_t *w, const struct timespec *deadline);
int mc_store_worker_wait_ms(mc_store_worker_t *w, unsigned ms);
mc_mconn_t *mc_store_worker_conn(mc_store_worker_t *w, const mc_master_target_t *target);
void mc_store_worker_drop_conn(mc_store_worker_t *w);
/* The environment variable @p name as milliseconds in [lo, hi]; @p def
 * when unset, and with a warning when malformed. */
unsigned mc_store_env_interval_ms(const char *name, unsigned def, unsigned lo, unsigned hi);

/* heartbeat.c */
mc_status_t mc_store_heartbeat_start(mc_store_h s);
void mc_store_heartbeat_stop(mc_store_h s);

/* tasks.c: the executor thread; it never takes `life` (close stops it
 * before tearing anything down) and only polls while s->nsegs > 0. */
mc_status_t mc_store_tasks_start(mc_store_h s);
void mc_store_tasks_stop(mc_store_h s);

/* http.c: the client HTTP server on its own thread and libevent base,
 * listening on 0.0.0.0:@p port (MC_INVALID_PARAMS with a detail when it
 * cannot bind).  stop accepts NULL; never call it holding `life`. */
typedef struct mc_store_http mc_store_http_t;
mc_status_t mc_store_http_start(mc_store_h s, uint16_t port, mc_store_http_t **h_p);
void mc_store_http_stop(mc_store_http_t *h);

#endif /* MC_STORE_THREADS_H */

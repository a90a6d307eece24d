/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store client's side of the master RPC (docs/protocol.md).
 *
 * A connection (mc_mconn_t) is one TCP stream to mooncake_master that has
 * been opened with HELLO.  It owns reusable encode/receive buffers and an
 * arena for decoded responses, so a steady-state call allocates nothing.
 * Calls on one connection are synchronous: encode, send, read the response
 * with the same request id.  Decoded responses borrow from the
 * connection's buffers and stay valid until the next call on it.
 *
 * A pool (mc_master_pool_t) hands connections to threads: a caller takes an
 * idle one (or opens a new one, up to a cap), makes its calls and gives it
 * back.  A connection that failed at the transport level is marked broken
 * and closed when returned, together with every idle one (a master restart
 * kills them all), so the next call dials afresh.
 *
 * Every typed call returns the master's status (MC_OK or a negative code);
 * when the failure was the transport (MC_RPC_FAIL, MC_RPC_TIMEOUT,
 * MC_DESERIALIZE_FAIL), conn->broken is set as well.  Failures set the
 * thread's error detail.
 *
 * Owns: the interface of master_client.c (connections, pools, typed calls).
 * May call: libmooncake's common/ and wire/ (the frames).
 */
#ifndef MC_STORE_MASTER_CLIENT_H
#define MC_STORE_MASTER_CLIENT_H

#include <pthread.h>
#include <stdint.h>

#include <mooncake/status.h>

#include "common/buf.h"
#include "common/util.h"
#include "wire/wire.h"

/* The per send/receive limit of master RPCs: MC_STORE_RPC_TIMEOUT_MS, the
 * rpc_timeout_ms setup parameter, else this default (store.h). */
#define MC_MASTER_IO_TIMEOUT_MS 5000
#define MC_MASTER_IO_TIMEOUT_MAX_MS 3600000

/* How long a call waits for a leader during a failover (etcd:// targets):
 * MC_STORE_FAILOVER_WAIT_MS, else this default. */
#define MC_MASTER_FAILOVER_WAIT_MS 15000
/* ... at most, for the CLIENT_CLOSE of a closing store: a courtesy (a
 * master drops a client that stopped pinging after --client_ttl), so a
 * close while no master leads does not hold the caller for the whole
 * failover wait. */
#define MC_MASTER_CLOSE_FAILOVER_WAIT_MS 2000

struct mc_master_resolver;

/* Where to connect and who we are.  With master_server_address
 * "etcd://h:p[;h:p]" the address is the leader's, read from etcd
 * ("mooncake-store/<MC_STORE_CLUSTER_ID or mooncake_cluster>/master_view")
 * by @c resolver each time a connection is dialled after the last one
 * failed; host and port then only name the etcd endpoints in messages. */
typedef struct mc_master_target {
    char host[256];
    uint16_t port;
    struct mc_master_resolver *resolver; /* shared by copies; NULL = fixed address */
    int failover_wait_ms;                /* etcd://: how long to wait for a leader */
    mc_uuid_t client_id;
    char tenant_id[256];
    int connect_timeout_ms;
    int io_timeout_ms; /* per send/receive; 0 = wait forever */
    /* called (from the dialling thread) with each accepted HELLO's
     * metadata token; NULL: not wanted */
    void (*on_token)(void *arg, mc_uuid_t token);
    void *on_token_arg;
    /* called (from the dialling thread, arg on_token_arg) with each
     * accepted HELLO answer: a status other than MC_OK (detail set)
     * refuses that master; NULL: nothing to check */
    mc_status_t (*on_hello)(void *arg, const mc_wire_hello_resp_t *resp);
    /* cluster authentication: every connection proves tenant_id's secret
     * before HELLO (docs/protocol.md §9.1); NULL: off.  Not owned. */
    const struct mc_auth *auth;
} mc_master_target_t;

/* Receive buffer of a master connection (mc_mconn_t.ibuf). */
#define MC_MCONN_IBUF 16384u

typedef struct mc_mconn {
    int fd;
    int broken;          /* transport failed: close instead of reusing */
    int reused;          /* lent from the idle list (not freshly dialled) */
    int peer_gone;       /* broken by EOF/ECONNRESET/EPIPE: the master closed it */
    int fenced;          /* the master answered UNAVAILABLE_IN_CURRENT_STATUS: it is not
                          * (or no longer) the leader; the request was not executed */
    uint32_t next_id;    /* request ids, per connection */
    mc_buf_t wbuf;       /* encoded requests */
    uint8_t *rbuf;       /* body of the last response, when it did not fit ibuf */
    size_t rcap;
    /* Received bytes (MC_MCONN_IBUF, allocated at the first answer): a
     * small answer's header and body come in with one receive, and bytes
     * of a pipelined next answer wait here.  [ioff, ilen) is unread. */
    uint8_t *ibuf;
    size_t ilen;
    size_t ioff;
    mc_arena_t arena;    /* decoded lists of the last response */
    uint64_t view_version;
    struct mc_mconn *next; /* idle list link */
} mc_mconn_t;

typedef struct mc_master_pool {
    mc_master_target_t target;
    pthread_mutex_t lock;
    pthread_cond_t cond;   /* a connection came back or a slot freed up */
    mc_mconn_t *idle;
    unsigned total;        /* open connections, idle + lent + being dialled */
    unsigned cap;
} mc_master_pool_t;

/* Parse "host:port" (port defaults to 50051) or "etcd://h:p[;h:p]";
 * INVALID_PARAMS with a detail.  Nothing is contacted yet. */
mc_status_t mc_master_target_init(mc_master_target_t *t, const char *addr,
                                  mc_uuid_t client_id, const char *tenant_id);
/* Free the resolver of an etcd:// target, once no copy of @p t is in use
 * (accepts a zeroed target). */
void mc_master_target_cleanup(mc_master_target_t *t);

/* Dial and HELLO.  MC_RPC_FAIL (unreachable), or HELLO's error status.
 * An etcd:// target dials the leader it reads from etcd, and while there
 * is none, or it does not answer, or it refuses as a standby, reads again
 * until failover_wait_ms have passed. */
mc_status_t mc_mconn_open(const mc_master_target_t *t, mc_mconn_t **conn_p);
void mc_mconn_close(mc_mconn_t *conn);
/* Unblock a thread inside a call on @p conn from another thread. */
void mc_mconn_shutdown(mc_mconn_t *conn);

/*
 * Low level, for pipelining: mc_mconn_begin() starts a batch of requests
 * (returns the first id; each encode takes conn->next_id++), mc_mconn_send()
 * writes them all, mc_mconn_recv() reads the next response, which must
 * carry @p opcode and @p id; its body stays valid until the next recv.
 */
void mc_mconn_begin(mc_mconn_t *conn);
uint32_t mc_mconn_take_id(mc_mconn_t *conn);
mc_status_t mc_mconn_send(mc_mconn_t *conn);
mc_status_t mc_mconn_recv(mc_mconn_t *conn, uint16_t opcode, uint32_t id,
                          const uint8_t **body_p, size_t *len_p);

/*
 * Work to do while the master answers: a call given one runs @p fn(@p arg)
 * once its request is sent and before it waits for the answer, then
 * clears @p fn (so a repeated call does not run it again).  Still set when
 * the call returns: no request was ever sent.
 *
 * With @p fn_sends, the call runs @p fn before it sends its request, and
 * @p fn sends it by calling mc_mconn_during_send() as soon as its own
 * requests are out (a read of the same value: the holder starts on it
 * while the master wakes up); the call sends it after @p fn when @p fn
 * did not.  The remaining fields are the call's.
 */
typedef struct mc_mconn_during {
    void (*fn)(void *arg);
    void *arg;
    int fn_sends;
    mc_mconn_t *conn; /* the call's connection while its request waits for fn */
    mc_status_t send_st;
} mc_mconn_during_t;

/* For @p fn of an mc_mconn_during_t with fn_sends: send the call's request
 * now, once (later calls, or a call outside fn, do nothing).  Takes the
 * mc_mconn_during_t as void * (a transfer's "sent" hook). */
void mc_mconn_during_send(void *during);

/* Typed synchronous calls, one per message of the wire table; the
 * _during forms take work to overlap with the round trip (NULL: none). */
#define MC_MASTER_CALL_DECL_(UP, low, code)                                         \
    mc_status_t mc_master_call_##low(mc_mconn_t *conn,                              \
                                     const mc_wire_##low##_req_t *req,              \
                                     mc_wire_##low##_resp_t *resp);                 \
    mc_status_t mc_master_call_during_##low(mc_mconn_t *conn,                       \
                                            const mc_wire_##low##_req_t *req,       \
                                            mc_wire_##low##_resp_t *resp,           \
                                            mc_mconn_during_t *during);             \
    mc_status_t mc_master_recv_##low(mc_mconn_t *conn, uint32_t id,                 \
                                     mc_wire_##low##_resp_t *resp);
MC_WIRE_MESSAGES(MC_MASTER_CALL_DECL_)
#undef MC_MASTER_CALL_DECL_

/*
 * Take a connection from @p pool and make one call on it.  When the
 * connection had died while idle (mc_mconn_stale), the call is repeated
 * once on a fresh one: that is what a master restart looks like to a
 * client, and the request never reached a live master.  With an etcd://
 * target the call is also repeated, on a connection to the leader found
 * anew, until failover_wait_ms have passed: always when the master
 * answered UNAVAILABLE_IN_CURRENT_STATUS (a standby or a fenced leader:
 * nothing was done), and for read-only calls (mc_master_op_idempotent)
 * when the connection broke mid-call too.  A call that changes state and
 * lost its connection mid-call returns MC_RPC_FAIL: it may or may not
 * have happened, and the caller decides.  On return
 * *conn_p is the connection the response borrows from (give it back with
 * mc_master_pool_put), or NULL when none could be had.
 */
#define MC_MASTER_POOL_CALL_DECL_(UP, low, code)                                    \
    mc_status_t mc_master_pool_call_##low(struct mc_master_pool *pool,              \
                                          mc_mconn_t **conn_p,                      \
                                          const mc_wire_##low##_req_t *req,         \
                                          mc_wire_##low##_resp_t *resp);            \
    mc_status_t mc_master_pool_call_during_##low(struct mc_master_pool *pool,       \
                                                 mc_mconn_t **conn_p,               \
                                                 const mc_wire_##low##_req_t *req,  \
                                                 mc_wire_##low##_resp_t *resp,      \
                                                 mc_mconn_during_t *during);
MC_WIRE_MESSAGES(MC_MASTER_POOL_CALL_DECL_)
#undef MC_MASTER_POOL_CALL_DECL_

/* Pool: connections are opened on demand, at most @p cap at once. */
mc_status_t mc_master_pool_init(mc_master_pool_t *pool, const mc_master_target_t *t,
                                unsigned cap);
/* Close every idle connection; callers must have returned all lent ones. */
void mc_master_pool_cleanup(mc_master_pool_t *pool);
/* Take a connection (waits while @p cap are lent out). */
mc_status_t mc_master_pool_get(mc_master_pool_t *pool, mc_mconn_t **conn_p);
/* Give it back; a broken one is closed, and so are the idle ones. */
void mc_master_pool_put(mc_master_pool_t *pool, mc_mconn_t *conn);

/*
 * True when a call failed only because the pooled connection it used had
 * died while idle (a restarted master, an idle timeout): the request never
 * reached a live master, so a read-only call may be repeated once on a
 * fresh connection.  Never used for calls that change state.
 */
static inline int mc_mconn_stale(const mc_mconn_t *conn, mc_status_t st)
{
    return (st == MC_RPC_FAIL) && conn->peer_gone && conn->reused;
}

/* Calls that change nothing on the master, safe to send twice. */
int mc_master_op_idempotent(uint16_t opcode);

#endif /* MC_STORE_MASTER_CLIENT_H */

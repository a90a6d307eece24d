/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One unary gRPC call to an etcd member over cleartext HTTP/2 (h2c with
 * prior knowledge), with libcurl (etcd.c uses it for the guarded
 * transactions of handles that asked for it: mc_etcd_use_grpc).
 *
 * A unary gRPC call is a POST of one length-prefixed message to
 * /<package>.<Service>/<Method> with "content-type: application/grpc" and
 * "te: trailers"; the answer is HTTP 200 with one length-prefixed message
 * and the call's status in the "grpc-status" / "grpc-message" trailers
 * (or in the headers alone, for an error without a message).
 */
#ifndef MC_COORD_ETCD_GRPC_H
#define MC_COORD_ETCD_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "common/util.h"

typedef enum mc_etcd_grpc_rc {
    MC_ETCD_GRPC_DONE,      /* an answer with grpc-status 0, its message in @p resp */
    MC_ETCD_GRPC_STATUS,    /* a gRPC error status (*status_p, detail set) */
    MC_ETCD_GRPC_TRANSPORT, /* no answer: connect error, timeout, reset (detail set) */
    MC_ETCD_GRPC_NOT_GRPC,  /* an answer, but not gRPC's: the endpoint does not speak it */
} mc_etcd_grpc_rc_t;

/* gRPC status codes the callers tell apart. */
#define MC_GRPC_NOT_FOUND         5
#define MC_GRPC_DEADLINE_EXCEEDED 4
#define MC_GRPC_UNIMPLEMENTED     12
#define MC_GRPC_UNAVAILABLE       14

/*
 * POST the framed request @p req (@p len bytes) to @p base_url (e.g.
 * "http://127.0.0.1:2379") + @p path on @p curl (reset first; its
 * connection is kept alive for the next call), bounded by @p timeout_ms.
 * On MC_ETCD_GRPC_DONE, @p resp holds the body (still framed: see
 * mc_etcd_grpc_unframe); the caller frees resp->data.  The thread's error
 * detail says what failed otherwise.
 * @p live_p: in, 1 when the last call on @p curl left a connection to
 * @p base_url open; out, whether this one did (an answer came over HTTP/2).
 * The caller keeps it per handle, 0 whenever it changes endpoints.
 * A request that went out on a kept-alive connection found dead may be
 * sent again on a new one: only for requests that may be repeated (a
 * guarded Txn of puts and deletes is).
 */
mc_etcd_grpc_rc_t mc_etcd_grpc_unary(CURL *curl, const char *base_url, const char *path,
                                     int timeout_ms, int connect_ms, const uint8_t *req,
                                     size_t len, mc_textbuf_t *resp, int *status_p, int *live_p);

#endif /* MC_COORD_ETCD_GRPC_H */

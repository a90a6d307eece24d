/* SPDX-License-Identifier: Apache-2.0 */
/*
 * write/: the door of the write pipeline.  Other folders include this
 * header and no other file of write/.
 *
 * Owns: the single-key write (write.c: PUT_START or UPSERT_START, one
 * transfer, END or REVOKE; the one-trip put through a reservation; the
 * retry on a fresh placement), the batch write (write_batch.c), the
 * batch put with a commit key (commit.c), the writer's reservations
 * (reserve.c) and removal (remove.c).  Each is the
 * embedded backend's op of its public call (../ops.h).
 *
 * May call: ../store_internal.h (calls.c), ../read/read.h (registered
 * memory, the staging buffer, the location cache's drop and speculative
 * entries), ../tiers/tiers.h (the tier hooks), the master connection pool
 * and the transfer engine.  Called by: store.c (setup and
 * teardown of the reservations), ../threads/heartbeat.c (a new master
 * view empties them), the dummy backend (mc_store_regex_check).
 */
#ifndef MC_STORE_WRITE_H
#define MC_STORE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_internal.h"

/* reserve.c: the writer's reservations (docs/protocol.md §5.16) */
void mc_store_resv_init(mc_store_h s);
/* MC_PUT_ONE_TRIP (0 off, 1 or unset on), read at setup: MC_INVALID_PARAMS
 * for any other value. */
mc_status_t mc_store_resv_config(mc_store_h s);
void mc_store_resv_cleanup(mc_store_h s);
/* Drop every kept reservation (teardown, a master that may have restarted). */
void mc_store_resv_clear(mc_store_h s);
/* The heartbeat saw master view @p view: a new one empties the cache. */
void mc_store_resv_view(mc_store_h s, uint64_t view);
/* The master grants none (NOT_SUPPORTED): two round trips from now on. */
void mc_store_resv_disable(mc_store_h s);
/* Whether a put of @p length bytes may go through a reservation. */
int mc_store_resv_wanted(mc_store_h s, uint64_t length);
/* Whether a put of this shape came lately (then a reservation is worth
 * asking for); records it either way. */
int mc_store_resv_seen(mc_store_h s, uint64_t length, const mc_wire_config_t *cfg);
/* Move a usable reservation for (@p length, placement of @p cfg) into
 * @p out; 0 when there is none. */
int mc_store_resv_take(mc_store_h s, uint64_t length, const mc_wire_config_t *cfg,
                       mc_resv_t *out);
/* Keep @p r (cleared) for a later put, or free it when unusable. */
void mc_store_resv_give(mc_store_h s, mc_resv_t *r);
/* A reservation from a grant: @p sent_us when the request was sent
 * (mc_now_us), @p view the connection's master view. */
mc_status_t mc_store_resv_make(mc_resv_t *r, uint64_t id, uint64_t ttl_ms, uint64_t sent_us,
                               uint64_t view, uint64_t length, const mc_wire_config_t *cfg,
                               const mc_wire_replica_list_t *reps);
void mc_store_resv_free(mc_resv_t *r);


/* remove.c: 0 when @p regex is a pattern remove_by_regex sends (POSIX
 * extended, within the limits of common/regex_limit.h), else
 * MC_INVALID_PARAMS with the detail set. */
mc_status_t mc_store_regex_check(const char *regex);

/* ---- batch puts with a commit key (commit.c) ------------------------------------ */

/*
 * A batch put with a commit key (commit.c, mc_store_batch_put_parts_commit):
 * do_write_batch starts the key at call index @c last with the others and
 * writes its bytes, but neither ends nor revokes it when its write went
 * well (@c held 1, its status MC_OK for now); an existing key fails as
 * MC_OBJECT_ALREADY_EXISTS (no first-writer-wins: every key of a commit
 * is the call's own) and the commit key is not retried.
 * mc_store_commit_seal() then ends or revokes it.
 */
typedef struct mc_store_commit {
    size_t last; /* call index of the commit key */
    int held;    /* out: allocated and written, waiting for END or REVOKE */
} mc_store_commit_t;

/* write_batch.c: the batch put of mc_store_batch_put_parts() with @p commit
 * (write_many; MC_WF_SAME_NODE flags). */
mc_status_t mc_store_put_parts_commit(mc_store_h s, const char *const *keys,
                                      const mc_iov_t *const *bufs, const size_t *counts,
                                      size_t n, const mc_replicate_config_t *cfg,
                                      mc_status_t *statuses, mc_store_commit_t *commit);
/* write.c: PUT_END (PUT_REVOKE with @p revoke) of one key; an END that
 * succeeds queues the key for the disk tier as every put does. */
mc_status_t mc_store_put_seal(mc_store_h s, int revoke, mc_str_t key);
/* remove.c: one BATCH_REMOVE, `life` held (mc_store_batch_remove's body). */
mc_status_t mc_store_do_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                                     mc_status_t *statuses);
/* commit.c: after the payloads of a commit batch are sealed (statuses[i]
 * of every i != last final): END the held commit key when every payload is
 * MC_OK, else REVOKE it; when the commit key is not published, remove the
 * payloads that were.  Releases specs[last] (and the removed payloads'
 * specs) unless published.  `life` held. */
void mc_store_commit_seal(mc_store_h s, const char *const *keys, mc_status_t *statuses,
                          struct mc_store_query **specs, mc_store_commit_t *commit);
/* commit.c, tests only: called between the payloads' END and the commit
 * key's END (NULL: nothing), to race events against that window. */
extern void (*mc_store_commit_test_hook)(mc_store_h s, const char *commit_key);

/* ---- shared by the files of write/ only ---------------------------------------- */

/*
 * put and upsert speak the same protocol under different opcodes
 * (docs/protocol.md, PUT_* and UPSERT_*): START allocates (or, for an
 * upsert of an existing key, hands back the buffers to rewrite), the bytes
 * move, END publishes or REVOKE frees.  The messages have identical fields,
 * so every write runs one code path and only the opcode differs.
 * A put that finds the key taken reports MC_OK (first writer wins); an
 * upsert passes every status of the master through.
 */
typedef enum write_op { WRITE_PUT, WRITE_UPSERT } write_op_t;

const char *mc_write_op_name(write_op_t op);
/* The transfer requests writing @p parts (@p total bytes) into replica
 * @p r, appended at reqs[*nreq_p] with their generations; a replica the
 * client cannot write (wrong type, too small, a wrapping range, a segment
 * it cannot open) is refused before any byte moves. */
mc_status_t mc_write_replica_reqs(mc_store_h s, const mc_wire_replica_t *r,
                                  const mc_iov_t *parts, size_t nparts, uint64_t total,
                                  mc_te_request_t *reqs, uint64_t *gens, size_t *nreq_p);
/* The parts' total length (MC_INVALID_PARAMS for a NULL part or a sum
 * that wraps). */
mc_status_t mc_write_check_parts(const mc_iov_t *parts, size_t n, uint64_t *total_p);
/* Where the bytes may come from (MC_WF_ZERO_COPY: registered memory only). */
mc_status_t mc_write_check_sources(mc_store_h s, const mc_iov_t *parts, size_t n,
                                   unsigned flags);
/* One single-key write, start to seal (write.c); *@p spec_p (may be NULL)
 * gets where a put went, for the location cache.  @p retry_since_ns: 0 for
 * a first try; for the second try of a write whose transfer failed, when
 * (mc_now_ns()) the write began: what the transport learnt before then
 * about the fresh placement's holders does not fail it at once
 * (mc_te_segment_revive). */
mc_status_t mc_write_do(mc_store_h s, write_op_t op, const char *key, const mc_iov_t *parts,
                        size_t n, const mc_replicate_config_t *cfg, unsigned flags,
                        struct mc_store_query **spec_p, uint64_t retry_since_ns);
uint64_t mc_write_iov_total(const mc_iov_t *parts, size_t n);
/* Whether a write that failed with @p st is tried once more. */
int mc_write_retryable(mc_status_t st, const mc_replicate_config_t *cfg);

#endif /* MC_STORE_WRITE_H */

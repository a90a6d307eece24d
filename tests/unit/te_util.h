/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the transfer-engine suites (test_transfer.c,
 * test_shm.c, test_scatter.c): engines on loopback, opening one from
 * another, patterned bytes and one-request transfers.  Failures are Check
 * assertions. */
#ifndef MC_TESTS_TE_UTIL_H
#define MC_TESTS_TE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/transfer.h>

/* An engine named @p host, with metadata @p meta (NULL: P2PHANDSHAKE). */
mc_te_h te_new(const char *host, const char *meta);
/* Open @p target's segment on @p te; its id. */
mc_te_segment_id_t te_open(mc_te_h te, mc_te_h target);
/* Fill @p p with a pattern determined by @p seed. */
void te_fill(uint8_t *p, size_t n, uint32_t seed);
/* One request through mc_te_transfer; its status (also the call's). */
mc_status_t te_xfer1(mc_te_h te, mc_te_op_t op, void *local, uint64_t remote, uint64_t len,
                     mc_te_segment_id_t seg);

/* Two engines on loopback for a test case: A initiates, B serves (with
 * P2PHANDSHAKE metadata); te_setup_two / te_teardown_two are the case's
 * checked fixture. */
extern mc_te_h A, B;
void te_setup_two(void);
void te_teardown_two(void);

#endif /* MC_TESTS_TE_UTIL_H */

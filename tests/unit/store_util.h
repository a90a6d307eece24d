/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the store suites that write and read through a real
 * master (test_store_write.c, test_store_commit.c; the setup parameters
 * also test_async.c, test_tensor.c): a store set up on it, patterned
 * bytes, and a key's value checked byte for byte or checked missing.
 * Failures are Check assertions. */
#ifndef MC_TESTS_STORE_UTIL_H
#define MC_TESTS_STORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/store.h>

/* Setup parameters of a store on the master at @p master_addr (loopback,
 * P2PHANDSHAKE) contributing a @p segment byte segment (0: none), with a
 * @p lbuf byte local buffer. */
void st_params(mc_store_params_t *p, const char *master_addr, uint64_t segment, uint64_t lbuf);
/* A store set up with st_params() and a 1 MiB local buffer. */
mc_store_h st_open(const char *master_addr, uint64_t segment);
/* Fill @p p with a pattern determined by @p seed. */
void st_pattern(uint8_t *p, size_t n, unsigned seed);
/* The stored value of @p key equals want[0..len), byte for byte. */
void st_value(mc_store_h s, const char *key, const uint8_t *want, size_t len);
/* @p key is not visible: get_size says OBJECT_NOT_FOUND. */
void st_missing(mc_store_h s, const char *key);

#endif

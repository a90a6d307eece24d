/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected), as iSCSI and
 * ext4 use it.  Chain calls by passing the previous result as @p crc
 * (0 to start).  Thread-safe.
 */
#ifndef MC_COMMON_CRC32C_H
#define MC_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t mc_crc32c(uint32_t crc, const void *p, size_t n);

/* The CRC32C of A followed by B, from @p crc1 = mc_crc32c(0, A),
 * @p crc2 = mc_crc32c(0, B) and @p len2 = |B| bytes: checksums of pieces
 * computed apart, joined in order. */
uint32_t mc_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

#endif

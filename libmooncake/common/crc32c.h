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

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pure helpers of the RDMA transport (docs/transfer.md, "RDMA"), free of
 * libibverbs so they are unit-tested and fuzzed on any host:
 *  - memory-region splitting: a registration longer than the device's
 *    max_mr_size becomes several MRs, and a request is cut where it
 *    crosses from one to the next;
 *  - the queue-pair handshake record exchanged over the engine's TCP port.
 * Not installed.
 */
#ifndef MC_TRANSFER_RDMA_CODEC_H
#define MC_TRANSFER_RDMA_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

#include "transfer/rdma/nic.h"

/* ---- memory regions ----------------------------------------------------- */

typedef struct mc_rdma_span {
    uint64_t addr;
    uint64_t len;
} mc_rdma_span_t;

/* Cut [addr, addr+len) into MRs of at most max_mr bytes each (max_mr 0:
 * one MR).  Writes min(count, cap) spans and returns count, the number of
 * MRs needed; 0 for len 0 or a range that wraps. */
size_t mc_rdma_mr_split(uint64_t addr, uint64_t len, uint64_t max_mr, mc_rdma_span_t *out,
                        size_t cap);

/* Index of the MR of a region at @p base split by @p max_mr that holds
 * @p addr (addr >= base). */
static inline size_t mc_rdma_mr_index(uint64_t base, uint64_t max_mr, uint64_t addr)
{
    return (max_mr == 0) ? 0 : (size_t)((addr - base) / max_mr);
}

/* Cut request [addr, addr+len) of a region at @p base (split by max_mr)
 * at every MR boundary and every @p slice bytes of the request (slice 0:
 * no slicing), so each piece lies in one MR and no piece is longer than
 * slice.  Same return convention as mc_rdma_mr_split. */
size_t mc_rdma_pieces(uint64_t base, uint64_t max_mr, uint64_t addr, uint64_t len,
                      uint64_t slice, mc_rdma_span_t *out, size_t cap);

/* ---- handshake ---------------------------------------------------------- */

#define MC_RDMA_HS_MAGIC   0x4d435248u /* "MCRH" */
#define MC_RDMA_HS_VERSION 1
#define MC_RDMA_HS_MAX_EPS (MC_RDMA_MAX_NICS * 4)
/* magic, version, count + per endpoint: name (1 + 63), port, mtu, lid,
 * gid, qpn, psn */
#define MC_RDMA_HS_EP_SIZE (1 + (MC_RDMA_NIC_NAME_MAX - 1) + 1 + 1 + 2 + 16 + 4 + 4)
#define MC_RDMA_HS_MAX_SIZE (8 + MC_RDMA_HS_MAX_EPS * MC_RDMA_HS_EP_SIZE)

/* One queue pair's end, as its peer needs it to connect (RC). */
typedef struct mc_rdma_ep {
    char nic[MC_RDMA_NIC_NAME_MAX];
    uint8_t port;     /* 1-based */
    uint8_t mtu;      /* enum ibv_mtu: 1 (256) .. 5 (4096) */
    uint16_t lid;     /* InfiniBand; 0 on RoCE */
    uint8_t gid[16];
    uint32_t qpn;     /* 24 bits */
    uint32_t psn;     /* 24 bits */
} mc_rdma_ep_t;

/* Encode n (1..MC_RDMA_HS_MAX_EPS) endpoints into buf (big-endian, fixed
 * size per endpoint); returns the length, or 0 when cap is too small or
 * an endpoint is out of range. */
size_t mc_rdma_hs_encode(const mc_rdma_ep_t *eps, size_t n, uint8_t *buf, size_t cap);

/* Decode exactly len bytes: MC_DESERIALIZE_FAIL (with a detail) for a bad
 * magic or version, a count of 0 or above cap, a length that does not
 * match the count, an empty or invalid NIC name, port 0, mtu outside 1..5,
 * or a qpn/psn above 24 bits. */
mc_status_t mc_rdma_hs_decode(const uint8_t *buf, size_t len, mc_rdma_ep_t *eps, size_t cap,
                              size_t *n_p);

#endif /* MC_TRANSFER_RDMA_CODEC_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the RDMA handshake decoder (transfer/rdma/codec.c):
 * a peer sends this record, so any input must either be refused with
 * MC_DESERIALIZE_FAIL or decode into endpoints the encoder accepts and
 * that re-encode to exactly the input bytes (after the padding of each
 * NIC name is cleared).  The MR splitting helpers get the input as
 * numbers too: pieces must tile the request.  Any violation aborts.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/rdma/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_rdma_hs: %s\n", what);
    abort();
}

static uint64_t u64_at(const uint8_t *d, size_t n, size_t off)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8; i++)
        v = (v << 8) | ((off + i < n) ? d[off + i] : 0);
    return v;
}

static void check_pieces(const uint8_t *d, size_t n)
{
    mc_rdma_span_t s[64];
    uint64_t base = u64_at(d, n, 0) >> 16, max_mr = u64_at(d, n, 8) >> 40;
    uint64_t off = u64_at(d, n, 16) >> 44, len = u64_at(d, n, 24) >> 44;
    uint64_t slice = u64_at(d, n, 32) >> 48, at, sum = 0;
    size_t k;
    if ((max_mr == 0) || (slice == 0) || (base > UINT64_MAX - off - len))
        return;
    at = base + off;
    k  = mc_rdma_pieces(base, max_mr, at, len, slice, s, 64);
    if ((len == 0) != (k == 0))
        fail("pieces of an empty request, or none of a real one");
    for (size_t i = 0; (i < k) && (i < 64); i++) {
        if ((s[i].addr != at + sum) || (s[i].len == 0) || (s[i].len > slice))
            fail("pieces do not tile the request");
        if (mc_rdma_mr_index(base, max_mr, s[i].addr) !=
            mc_rdma_mr_index(base, max_mr, s[i].addr + s[i].len - 1))
            fail("a piece crosses an MR boundary");
        sum += s[i].len;
    }
    if ((k <= 64) && (sum != len))
        fail("pieces do not add up to the request");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_rdma_ep_t eps[MC_RDMA_HS_MAX_EPS];
    static uint8_t again[MC_RDMA_HS_MAX_SIZE];
    size_t n = 0, len;
    check_pieces(data, size);
    if (mc_rdma_hs_decode(data, size, eps, MC_RDMA_HS_MAX_EPS, &n) != MC_OK) {
        if (n != 0)
            fail("a refused record reported endpoints");
        return 0;
    }
    if ((n == 0) || (n > MC_RDMA_HS_MAX_EPS))
        fail("decoded an endpoint count out of range");
    len = mc_rdma_hs_encode(eps, n, again, sizeof(again));
    if (len != size)
        fail("decoded endpoints do not re-encode to the same length");
    /* the encoder zeroes the name padding; compare name by name */
    for (size_t i = 0; i < n; i++) {
        size_t at = 8 + i * MC_RDMA_HS_EP_SIZE, nl = data[at];
        if ((memcmp(again + at, data + at, 1 + nl) != 0) ||
            (memcmp(again + at + MC_RDMA_NIC_NAME_MAX, data + at + MC_RDMA_NIC_NAME_MAX,
                    MC_RDMA_HS_EP_SIZE - MC_RDMA_NIC_NAME_MAX) != 0))
            fail("decoded endpoints do not re-encode to the same bytes");
    }
    if (memcmp(again, data, 8) != 0)
        fail("header does not re-encode to the same bytes");
    return 0;
}

#ifdef MC_FUZZ_WRITE_SEEDS
/* write_rdma_seeds DIR: one valid two-endpoint record as DIR/seed-1. */
int main(int argc, char **argv)
{
    mc_rdma_ep_t eps[2];
    uint8_t buf[MC_RDMA_HS_MAX_SIZE];
    char path[4096];
    size_t len;
    FILE *f;
    if (argc != 2)
        return 2;
    memset(eps, 0, sizeof(eps));
    strcpy(eps[0].nic, "mlx5_0");
    eps[0].port = 1;
    eps[0].mtu  = 5;
    eps[0].qpn  = 0x1234;
    eps[0].gid[15] = 1;
    strcpy(eps[1].nic, "mlx5_1");
    eps[1].port = 1;
    eps[1].mtu  = 3;
    eps[1].lid  = 7;
    eps[1].qpn  = 0xffffff;
    eps[1].psn  = 42;
    len = mc_rdma_hs_encode(eps, 2, buf, sizeof(buf));
    snprintf(path, sizeof(path), "%s/seed-1", argv[1]);
    f = fopen(path, "wb");
    if ((f == NULL) || (len == 0) || (fwrite(buf, 1, len, f) != len))
        return 1;
    return (fclose(f) == 0) ? 0 : 1;
}
#endif

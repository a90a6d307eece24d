/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the transfer engine's data-port frame headers
 * (transfer/proto.h): a client's data port takes 32-byte request headers
 * from anyone, and an initiator takes 16-byte response headers from its
 * peer.  Any bytes are refused, or decode to a header that keeps the
 * decoder's promises (known opcode, version 1, no flag but the generation of a READ, a
 * WRITE or a READV; status <= 0) and
 * re-encodes to the same bytes.  A READV header within its bounds takes
 * the bytes after it as its range list: a list that decodes has only
 * non-empty ranges adding up to the header's length, and re-encodes to
 * its bytes.  Any violation aborts.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_te_frame: %s\n", what);
    abort();
}

/* The range list of a READV header @p h (within its bounds) in @p list. */
static void check_readv(const mc_te_req_hdr_t *h, const uint8_t *list, size_t len)
{
    static mc_te_range_t rg[MC_TE_READV_MAX_RANGES];
    static uint8_t again[MC_TE_READV_MAX_RANGES * MC_TE_READV_ENTRY_SIZE];
    size_t n = (size_t)h->addr, bytes = n * MC_TE_READV_ENTRY_SIZE;
    uint64_t sum = 0;

    if ((h->addr < 1) || (h->addr > MC_TE_READV_MAX_RANGES) || (h->length < 1) ||
        (h->length > MC_TE_READV_MAX_LEN))
        fail("a READV header out of its bounds passed the check");
    if ((len < bytes) || (mc_te_readv_decode(h, list, rg) != 0))
        return;
    for (size_t i = 0; i < n; i++) {
        if ((rg[i].len == 0) || (rg[i].len > h->length - sum))
            fail("a READV list with an empty range or too many bytes decoded");
        sum += rg[i].len;
    }
    if (sum != h->length)
        fail("a READV list whose lengths do not add up decoded");
    mc_te_readv_encode(again, rg, n);
    if (memcmp(again, list, bytes) != 0)
        fail("a decoded READV list does not re-encode to its bytes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t again[MC_TE_REQ_HDR_SIZE];
    mc_te_req_hdr_t h;
    mc_te_resp_hdr_t r;

    if ((size >= MC_TE_REQ_HDR_SIZE) && (mc_te_req_decode(data, &h) == 0)) {
        if ((h.version != MC_TE_PROTO_VERSION) || (h.opcode > MC_TE_OPC_MAX_) ||
            ((h.flags != 0) &&
             ((h.flags != MC_TE_REQ_FLAG_GEN) || (h.gen == 0) ||
              ((h.opcode != MC_TE_OPC_READ) && (h.opcode != MC_TE_OPC_WRITE) &&
               (h.opcode != MC_TE_OPC_READV)))) ||
            ((h.flags == 0) && (h.gen != 0)))
            fail("a request header out of range decoded");
        mc_te_req_encode_gen(again, h.opcode, h.addr, h.length, h.gen);
        if (memcmp(again, data, MC_TE_REQ_HDR_SIZE) != 0)
            fail("a decoded request header does not re-encode to its bytes");
        if ((h.opcode == MC_TE_OPC_READV) && (mc_te_readv_hdr_check(&h) == 0))
            check_readv(&h, data + MC_TE_REQ_HDR_SIZE, size - MC_TE_REQ_HDR_SIZE);
    }
    if ((size >= MC_TE_RESP_HDR_SIZE) && (mc_te_resp_decode(data, &r) == 0)) {
        if (r.status > 0)
            fail("a positive status decoded");
        mc_te_resp_encode(again, r.status, r.length);
        if (memcmp(again, data, MC_TE_RESP_HDR_SIZE) != 0)
            fail("a decoded response header does not re-encode to its bytes");
    }
    return 0;
}

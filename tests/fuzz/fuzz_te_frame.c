/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the transfer engine's data-port frame headers
 * (transfer/proto.h): a client's data port takes 32-byte request headers
 * from anyone, and an initiator takes 16-byte response headers from its
 * peer.  Any bytes are refused, or decode to a header that keeps the
 * decoder's promises (known opcode, version 1, no flag but the generation of a READ or a
 * WRITE; status <= 0) and
 * re-encodes to the same bytes.  Any violation aborts.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t again[MC_TE_REQ_HDR_SIZE];
    mc_te_req_hdr_t h;
    mc_te_resp_hdr_t r;

    if ((size >= MC_TE_REQ_HDR_SIZE) && (mc_te_req_decode(data, &h) == 0)) {
        if ((h.version != MC_TE_PROTO_VERSION) || (h.opcode > MC_TE_OPC_MAX_) ||
            ((h.flags != 0) &&
             ((h.flags != MC_TE_REQ_FLAG_GEN) || (h.gen == 0) ||
              ((h.opcode != MC_TE_OPC_READ) && (h.opcode != MC_TE_OPC_WRITE)))) ||
            ((h.flags == 0) && (h.gen != 0)))
            fail("a request header out of range decoded");
        mc_te_req_encode_gen(again, h.opcode, h.addr, h.length, h.gen);
        if (memcmp(again, data, MC_TE_REQ_HDR_SIZE) != 0)
            fail("a decoded request header does not re-encode to its bytes");
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

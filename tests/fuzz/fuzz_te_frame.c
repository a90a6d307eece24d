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
 * its bytes.  A READV_STRIDED header within its bounds takes its entries
 * the same way: a list that decodes holds only well-formed entries and
 * groups whose rows (walked) neither wrap nor overlap within an entry and
 * add up to the header's length; it re-encodes to its bytes, and its rows
 * packed again (mc_te_readvs_pack) walk to the same rows.  Any violation
 * aborts.
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

/* The entries of a READV_STRIDED header @p h (within its bounds) in @p list. */
static void check_readvs(const mc_te_req_hdr_t *h, const uint8_t *list, size_t len)
{
    static mc_te_strided_t e[MC_TE_READVS_MAX_ENTRIES], again_e[MC_TE_READV_MAX_RANGES];
    static mc_te_range_t rows[MC_TE_READV_MAX_RANGES];
    static uint8_t again[MC_TE_READVS_MAX_ENTRIES * MC_TE_READVS_ENTRY_SIZE];
    size_t n = (size_t)h->addr, bytes = n * MC_TE_READVS_ENTRY_SIZE, nrows = 0, k = 0, m;
    mc_te_strided_walk_t w;
    mc_te_range_t r;
    uint64_t sum = 0;

    if ((h->addr < 1) || (h->addr > MC_TE_READVS_MAX_ENTRIES) || (h->length < 1) ||
        (h->length > MC_TE_READV_MAX_LEN))
        fail("a READV_STRIDED header out of its bounds passed the check");
    if ((len < bytes) || (mc_te_readvs_decode(h, list, e, &nrows) != 0))
        return;
    for (size_t i = 0; i < n; i++)
        if ((e[i].len == 0) || (e[i].count == 0) || (e[i].stride < e[i].len) ||
            ((e[i].group == 0) != (k > 0)) || ((k == 0) && (e[i].group > n - i)))
            fail("a READV_STRIDED list with a malformed entry or group decoded");
        else
            k = ((k == 0) ? e[i].group : k) - 1;
    if ((k != 0) || (nrows > MC_TE_READVS_MAX_ROWS))
        fail("a READV_STRIDED list with an open group or too many rows decoded");
    mc_te_strided_walk_init(&w, e, n);
    for (k = 0; mc_te_strided_next(&w, &r); k++) {
        if ((r.len == 0) || (r.len > UINT64_MAX - r.addr) || (r.len > h->length - sum))
            fail("a READV_STRIDED row wraps or passes the header's length");
        sum += r.len;
        if (k < MC_TE_READV_MAX_RANGES)
            rows[k] = r;
    }
    if ((sum != h->length) || (k != nrows))
        fail("a READV_STRIDED list whose rows do not add up decoded");
    mc_te_readvs_encode(again, e, n);
    if (memcmp(again, list, bytes) != 0)
        fail("a decoded READV_STRIDED list does not re-encode to its bytes");
    if (nrows > MC_TE_READV_MAX_RANGES)
        return;
    m = mc_te_readvs_pack(rows, nrows, again_e);
    if ((m == 0) || (m > nrows))
        fail("rows that decoded do not pack");
    mc_te_strided_walk_init(&w, again_e, m);
    for (k = 0; mc_te_strided_next(&w, &r); k++)
        if ((k >= nrows) || (r.addr != rows[k].addr) || (r.len != rows[k].len))
            fail("packed rows do not walk to the same rows");
    if (k != nrows)
        fail("packed rows walk to fewer rows");
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
               (h.opcode != MC_TE_OPC_READV) && (h.opcode != MC_TE_OPC_READV_STRIDED)))) ||
            ((h.flags == 0) && (h.gen != 0)))
            fail("a request header out of range decoded");
        mc_te_req_encode_gen(again, h.opcode, h.addr, h.length, h.gen);
        if (memcmp(again, data, MC_TE_REQ_HDR_SIZE) != 0)
            fail("a decoded request header does not re-encode to its bytes");
        if ((h.opcode == MC_TE_OPC_READV) && (mc_te_readv_hdr_check(&h) == 0))
            check_readv(&h, data + MC_TE_REQ_HDR_SIZE, size - MC_TE_REQ_HDR_SIZE);
        if ((h.opcode == MC_TE_OPC_READV_STRIDED) && (mc_te_readvs_hdr_check(&h) == 0))
            check_readvs(&h, data + MC_TE_REQ_HDR_SIZE, size - MC_TE_REQ_HDR_SIZE);
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

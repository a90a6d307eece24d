/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the DISK_READ frame (transfer/proto.h,
 * docs/protocol.md §5.19): a holder's data port takes a 32-byte header, an
 * 8-byte prefix and a key and path from anyone.  Any bytes are refused, or
 * decode to a request that keeps the decoder's promises (lengths in range,
 * the body exactly as long as the prefix says, a non-zero length whose end
 * stays below 2^63, an absolute path without NUL) and re-encodes to the
 * same bytes.  Any violation aborts.
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
    fprintf(stderr, "fuzz_te_disk: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const size_t fixed = MC_TE_REQ_HDR_SIZE + MC_TE_DISK_PREFIX_SIZE;
    uint8_t again[MC_TE_REQ_HDR_SIZE + MC_TE_DISK_PREFIX_SIZE];
    const uint8_t *prefix = data + MC_TE_REQ_HDR_SIZE;
    mc_te_req_hdr_t h;
    mc_te_disk_req_t r;
    size_t blen;
    uint8_t *body;

    if ((size < fixed) || (mc_te_req_decode(data, &h) != 0))
        return 0;
    if (mc_te_disk_prefix_decode(prefix, &blen) != 0)
        return 0;
    if ((blen < 3) || (blen > MC_TE_DISK_KEY_MAX + MC_TE_DISK_PATH_MAX))
        fail("a prefix with lengths out of range decoded");
    /* the body in its own allocation, so ASan sees any read past it */
    body = malloc(size - fixed + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data + fixed, size - fixed);
    if (mc_te_disk_req_decode(&h, prefix, body, size - fixed, &r) == 0) {
        if (h.opcode != MC_TE_OPC_DISK_READ)
            fail("another opcode decoded as DISK_READ");
        if ((r.key_len == 0) || (r.key_len > MC_TE_DISK_KEY_MAX) || (r.path_len < 2) ||
            (r.path_len > MC_TE_DISK_PATH_MAX) || (r.key_len + r.path_len != size - fixed))
            fail("a request with lengths out of range decoded");
        if ((r.length == 0) || (r.offset > (uint64_t)INT64_MAX) ||
            (r.length > (uint64_t)INT64_MAX - r.offset))
            fail("a request with a bad range decoded");
        if ((r.path[0] != '/') || (memchr(r.path, '\0', r.path_len) != NULL))
            fail("a relative path or one with NUL decoded");
        if ((r.key != (const char *)body) || (r.path != (const char *)body + r.key_len))
            fail("the key or path does not point into the body");
        mc_te_req_encode(again, MC_TE_OPC_DISK_READ, r.offset, r.length);
        mc_te_disk_prefix_encode(again + MC_TE_REQ_HDR_SIZE, r.crc, (uint16_t)r.key_len,
                                 (uint16_t)r.path_len);
        if (memcmp(again, data, fixed) != 0)
            fail("a decoded request does not re-encode to its bytes");
    }
    free(body);
    return 0;
}

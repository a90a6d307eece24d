/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the segment descriptor decoder (transfer/descriptor.c):
 * a peer or the metadata service hands us this JSON, so any input must
 * either be refused with MC_DESERIALIZE_FAIL or decode into a descriptor
 * that keeps the decoder's promises -- buffers sorted, non-overlapping,
 * non-wrapping, shm_name empty or "@"-prefixed, at most 32 RDMA devices and
 * per buffer either no rkey or one per device and memory region -- and that
 * survives an encode/decode round trip unchanged.  Any violation aborts.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/descriptor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_desc: %s\n", what);
    abort();
}

static void check_invariants(const mc_te_desc_t *d)
{
    if ((d->name == NULL) || (d->name[0] == '\0') || (d->tcp_data_port == 0))
        fail("decoded a descriptor without a name or port");
    if ((d->shm_name[0] != '\0') && (d->shm_name[0] != '@'))
        fail("decoded an shm_name without '@'");
    if ((d->ndevices > MC_TE_DESC_MAX_DEVICES) ||
        ((d->rdma_mr_size != 0) && (d->rdma_mr_size < MC_TE_DESC_MIN_MR_SIZE)))
        fail("decoded too many devices or a tiny MR size");
    for (size_t i = 0; i < d->nbuffers; i++) {
        const mc_te_buf_desc_t *b = &d->buffers[i];
        if ((b->length == 0) || (b->addr > UINT64_MAX - b->length))
            fail("decoded an empty or wrapping buffer");
        if ((i > 0) && (d->buffers[i - 1].addr + d->buffers[i - 1].length > b->addr))
            fail("decoded unsorted or overlapping buffers");
        /* a buffer is contained; one byte past it only if the next starts there */
        if ((b->nrkeys != 0) &&
            ((d->ndevices == 0) ||
             (b->nrkeys != d->ndevices * ((d->rdma_mr_size == 0)
                                              ? 1
                                              : (b->length + d->rdma_mr_size - 1) /
                                                    d->rdma_mr_size))))
            fail("decoded an rkey array of the wrong length");
        if (!mc_te_desc_contains(d, b->addr, b->length) ||
            ((b->addr + b->length != 0) && mc_te_desc_contains(d, b->addr + b->length, 1) &&
             ((i + 1 == d->nbuffers) || (d->buffers[i + 1].addr != b->addr + b->length))))
            fail("contains() disagrees with the buffer list");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_te_desc_t d, again;
    char *json = NULL;
    size_t len = 0;

    if (mc_te_desc_decode((const char *)data, size, &d) != MC_OK)
        return 0;
    check_invariants(&d);
    if (mc_te_desc_encode(&d, &json, &len) != MC_OK)
        fail("a decoded descriptor does not encode");
    if (mc_te_desc_decode(json, len, &again) != MC_OK)
        fail("an encoded descriptor does not decode");
    if ((strcmp(d.name, again.name) != 0) || (strcmp(d.protocol, again.protocol) != 0) ||
        (strcmp(d.shm_name, again.shm_name) != 0) || (d.tcp_data_port != again.tcp_data_port) ||
        (d.nbuffers != again.nbuffers) || (d.ndevices != again.ndevices) ||
        (d.rdma_mr_size != again.rdma_mr_size) || (d.tcp_readv != again.tcp_readv) ||
        (d.tcp_readv_strided != again.tcp_readv_strided))
        fail("round trip changed the descriptor");
    for (size_t i = 0; i < d.ndevices; i++)
        if ((strcmp(d.devices[i].name, again.devices[i].name) != 0) ||
            (d.devices[i].lid != again.devices[i].lid) ||
            (memcmp(d.devices[i].gid, again.devices[i].gid, 16) != 0))
            fail("round trip changed a device");
    for (size_t i = 0; i < d.nbuffers; i++)
        if ((d.buffers[i].addr != again.buffers[i].addr) ||
            (d.buffers[i].length != again.buffers[i].length) ||
            (strcmp(d.buffers[i].name, again.buffers[i].name) != 0) ||
            (d.buffers[i].nrkeys != again.buffers[i].nrkeys) ||
            ((d.buffers[i].nrkeys > 0) &&
             (memcmp(d.buffers[i].rkeys, again.buffers[i].rkeys,
                     d.buffers[i].nrkeys * sizeof(uint32_t)) != 0)))
            fail("round trip changed a buffer");
    free(json);
    mc_te_desc_cleanup(&again);
    mc_te_desc_cleanup(&d);
    return 0;
}

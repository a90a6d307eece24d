/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Segment descriptors: what a peer needs to know to address a segment —
 * its name, transport, data port and the list of buffers it serves — and
 * their JSON form (docs/transfer.md, "Segment descriptor"), which is the
 * upstream shape so the same metadata service can hold both.
 *
 * Decoding assumes hostile input: every field is type-checked, counts and
 * sizes are bounded, ranges must not wrap or overlap.
 */
#ifndef MC_TRANSFER_DESCRIPTOR_H
#define MC_TRANSFER_DESCRIPTOR_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

/* Most buffers one descriptor may list (a decoder bound, not a limit on
 * what an engine may register: registering more is refused up front). */
#define MC_TE_DESC_MAX_BUFFERS 65536u
#define MC_TE_LOCATION_MAX     64u
/* RDMA members (docs/transfer.md, "Segment descriptor"): at most this many
 * NICs, this many rkeys per buffer, and MRs of at least this size. */
#define MC_TE_DESC_MAX_DEVICES 32u
#define MC_TE_DESC_MAX_RKEYS   4096u
#define MC_TE_DESC_MIN_MR_SIZE (1u << 20)
/* RDMA generation words ("rdma_gen_words"): at most this many. */
#define MC_TE_DESC_MAX_GEN_WORDS 65536u
/* libfabric members (docs/transfer.md §14): the longest endpoint address
 * (EFA's is 32 bytes, a sockaddr_in6 28) and provider name. */
#define MC_TE_DESC_MAX_FABRIC_ADDR 128u
#define MC_TE_DESC_MAX_FABRIC_PROV 64u

typedef struct mc_te_buf_desc {
    uint64_t addr;
    uint64_t length;
    char name[MC_TE_LOCATION_MAX]; /* locality, e.g. "cpu:0" */
    /* RDMA: the rkey of MR m through NIC k is rkeys[m * ndevices + k],
     * where the buffer is cut into MRs of rdma_mr_size bytes (one MR when
     * 0); NULL/0 when the holder published none (owned). */
    uint32_t *rkeys;
    size_t nrkeys;
    /* libfabric: the key of the buffer's one MR, valid when has_fabric_key
     * (a holder with a "fabric" endpoint that registered it) */
    uint64_t fabric_key;
    int has_fabric_key;
    /* RDMA generation word (docs/transfer.md §3.6): the buffer's word is
     * at gen_words.addr + 8 * gen_slot, valid when has_gen_slot */
    uint32_t gen_slot;
    int has_gen_slot;
} mc_te_buf_desc_t;

/* One RDMA NIC of the holder, as peers address it. */
typedef struct mc_te_dev_desc {
    char name[64];
    uint16_t lid;
    uint8_t gid[16];
} mc_te_dev_desc_t;

typedef struct mc_te_desc {
    char *name;              /* segment name "host:port" (owned) */
    char protocol[16];       /* "tcp" */
    uint16_t tcp_data_port;  /* port of the data server */
    char shm_name[64];       /* same-host server ("@..."), "" when none */
    int tcp_readv;           /* "tcp_readv" (ours): its data port serves READV */
    int tcp_readv_strided;   /* "tcp_readv_strided" (ours): ... and READV_STRIDED */
    size_t nbuffers;
    mc_te_buf_desc_t *buffers; /* sorted by addr, non-overlapping (owned) */
    size_t ndevices;           /* RDMA NICs, 0 for a tcp engine */
    mc_te_dev_desc_t *devices; /* (owned) */
    uint64_t rdma_mr_size;     /* MR size the buffers are cut at, 0: one MR each */
    /* RDMA generation words ("rdma_gen_words", ours): an array of nwords
     * 64-bit words at addr, readable one-sidedly with rkeys[k] through
     * device k; nwords 0 when the holder published none */
    struct {
        uint64_t addr;
        uint32_t nwords;
        uint32_t rkeys[MC_TE_DESC_MAX_DEVICES];
    } gen_words;
    /* libfabric (protocol efa / cxi): the holder's provider ("" when it has
     * no fabric endpoint), its endpoint address (fi_getname) and whether
     * remote addresses are virtual (FI_MR_VIRT_ADDR) or offsets into the MR */
    char fabric_provider[MC_TE_DESC_MAX_FABRIC_PROV];
    uint8_t fabric_addr[MC_TE_DESC_MAX_FABRIC_ADDR];
    size_t fabric_addrlen;
    int fabric_virt_addr;
} mc_te_desc_t;

void mc_te_desc_init(mc_te_desc_t *d);
void mc_te_desc_cleanup(mc_te_desc_t *d);
/* Move src into dst (dst's old contents are freed; src is left empty). */
void mc_te_desc_move(mc_te_desc_t *dst, mc_te_desc_t *src);

/* JSON text of @p d, NUL-terminated, malloc'd into *json_p (length in
 * *len_p when non-NULL).  Buffers are emitted in array order. */
mc_status_t mc_te_desc_encode(const mc_te_desc_t *d, char **json_p, size_t *len_p);

/* Parse @p len bytes of JSON into @p d (initialised by the callee; written
 * only on success).  MC_DESERIALIZE_FAIL with a detail on anything
 * malformed. */
mc_status_t mc_te_desc_decode(const char *json, size_t len, mc_te_desc_t *d);

/* A GID as the descriptor writes it: 16 bytes "xx:xx:...:xx" (47 chars
 * and the NUL); parse accepts exactly that shape (0, else -1). */
void mc_te_gid_format(const uint8_t gid[16], char out[48]);
int mc_te_gid_parse(const char *s, uint8_t gid[16]);

/* 1 when [addr, addr+len) lies inside one listed buffer (len 0: addr inside
 * a buffer), else 0.  Overflow-safe. */
int mc_te_desc_contains(const mc_te_desc_t *d, uint64_t addr, uint64_t len);
/* The buffer that mc_te_desc_contains finds, or NULL. */
const mc_te_buf_desc_t *mc_te_desc_find(const mc_te_desc_t *d, uint64_t addr, uint64_t len);

#endif /* MC_TRANSFER_DESCRIPTOR_H */

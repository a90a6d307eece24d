/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transfer engine's data-port frames (docs/transfer.md, "Frames").
 *
 * Every request on a data connection starts with one fixed 32-byte header
 * and every answer with one fixed 16-byte header; all integers are little
 * endian whatever the host order, and the structs below are only the
 * decoded form: the bytes on the wire are produced and parsed by the
 * mc_te_*_encode/decode helpers, never by casting a buffer.
 *
 * A header that fails mc_te_req_decode() (bad magic, version, opcode, a
 * reserved bit set) is a protocol violation: the server closes the
 * connection without answering, since it cannot know where the next frame
 * starts.
 */
#ifndef MC_TRANSFER_PROTO_H
#define MC_TRANSFER_PROTO_H

#include <stdint.h>
#include <string.h>

#include "common/buf.h"

/* "MCTE" and "MCTR" read as little-endian u32: the first wire bytes spell
 * the ASCII letters, which makes captures easy to read. */
#define MC_TE_REQ_MAGIC  0x4554434Du /* 'M' 'C' 'T' 'E' */
#define MC_TE_RESP_MAGIC 0x5254434Du /* 'M' 'C' 'T' 'R' */
#define MC_TE_PROTO_VERSION 1u

#define MC_TE_REQ_HDR_SIZE  32u
#define MC_TE_RESP_HDR_SIZE 16u

/* Largest descriptor a DESCRIBE answer may carry; a peer announcing more is
 * treated as hostile and the connection is dropped. */
#define MC_TE_DESCRIBE_MAX (16u * 1024u * 1024u)
/* Largest RDMA handshake record either way (a larger one closes the
 * connection); the record itself is at most MC_RDMA_HS_MAX_SIZE. */
#define MC_TE_HS_MAX (64u * 1024u)

/* Request opcodes (docs/transfer.md, "Opcodes"). */
typedef enum mc_te_opcode {
    MC_TE_OPC_READ     = 0, /**< server -> client: send [addr, addr+length) */
    MC_TE_OPC_WRITE    = 1, /**< client -> server: length payload bytes follow */
    MC_TE_OPC_DESCRIBE = 2, /**< server -> client: segment descriptor JSON */
    MC_TE_OPC_RDMA_CONNECT = 3, /**< both ways: RDMA queue-pair handshake records */
    MC_TE_OPC_DISK_READ = 4, /**< server -> client: one record of its disk tier */
    MC_TE_OPC_READV    = 5, /**< server -> client: several ranges as one answer */
    MC_TE_OPC_READV_STRIDED = 6, /**< server -> client: READV of strided rows */
    MC_TE_OPC_MAX_     = 6
} mc_te_opcode_t;

/* Decoded request header. */
typedef struct mc_te_req_hdr {
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;  /* 0, or MC_TE_REQ_FLAG_GEN on a READ, a WRITE or a READV
                      * (either kind) */
    uint64_t addr;   /* absolute address inside the target segment */
    uint64_t length; /* bytes to move */
    uint64_t gen;    /* with MC_TE_REQ_FLAG_GEN: the registration the initiator
                      * expects to find at addr (non-zero); else 0 */
} mc_te_req_hdr_t;

/* A READ, a WRITE or a READV (plain or strided) that names the registration generation of the
 * region it expects (docs/transfer.md, "Generations"): the u64 at offset 24
 * (the two reserved words) carries it, and the target refuses the request
 * (INVALID_READ / INVALID_WRITE) unless the region holding the range(s) was
 * registered with exactly that generation.  No other flag exists; a flag
 * on another opcode is a protocol violation. */
#define MC_TE_REQ_FLAG_GEN 0x0001u

/* Decoded response header. */
typedef struct mc_te_resp_hdr {
    int32_t status;  /* mc_status_t: 0 or a negative code */
    uint64_t length; /* payload bytes that follow (READ, DESCRIBE) */
} mc_te_resp_hdr_t;

/*
 * Request layout, byte offsets:
 *   0  u32 magic "MCTE"      4  u8 version     5  u8 opcode
 *   6  u16 flags (0)         8  u64 addr      16  u64 length
 *  24  u32 reserved (0)     28  u32 reserved (0)
 * Response layout:
 *   0  u32 magic "MCTR"      4  i32 status     8  u64 length
 */
enum {
    MC_TE_REQ_OFF_MAGIC   = 0,
    MC_TE_REQ_OFF_VERSION = 4,
    MC_TE_REQ_OFF_OPCODE  = 5,
    MC_TE_REQ_OFF_FLAGS   = 6,
    MC_TE_REQ_OFF_ADDR    = 8,
    MC_TE_REQ_OFF_LENGTH  = 16,
    MC_TE_REQ_OFF_RSVD0   = 24,
    MC_TE_REQ_OFF_RSVD1   = 28,
    MC_TE_REQ_OFF_END_    = 32,
    MC_TE_RESP_OFF_MAGIC  = 0,
    MC_TE_RESP_OFF_STATUS = 4,
    MC_TE_RESP_OFF_LENGTH = 8,
    MC_TE_RESP_OFF_END_   = 16
};
_Static_assert(MC_TE_REQ_OFF_END_ == MC_TE_REQ_HDR_SIZE, "request header is 32 bytes");
_Static_assert(MC_TE_RESP_OFF_END_ == MC_TE_RESP_HDR_SIZE, "response header is 16 bytes");

/* A request header; @p gen non-zero on a READ or a WRITE sets
 * MC_TE_REQ_FLAG_GEN. */
static inline void mc_te_req_encode_gen(uint8_t out[MC_TE_REQ_HDR_SIZE], uint8_t opcode,
                                        uint64_t addr, uint64_t length, uint64_t gen)
{
    memset(out, 0, MC_TE_REQ_HDR_SIZE);
    mc_store_le32(out + MC_TE_REQ_OFF_MAGIC, MC_TE_REQ_MAGIC);
    out[MC_TE_REQ_OFF_VERSION] = (uint8_t)MC_TE_PROTO_VERSION;
    out[MC_TE_REQ_OFF_OPCODE]  = opcode;
    mc_store_le64(out + MC_TE_REQ_OFF_ADDR, addr);
    mc_store_le64(out + MC_TE_REQ_OFF_LENGTH, length);
    if ((gen != 0) && ((opcode == MC_TE_OPC_READ) || (opcode == MC_TE_OPC_WRITE) ||
                       (opcode == MC_TE_OPC_READV) || (opcode == MC_TE_OPC_READV_STRIDED))) {
        mc_store_le16(out + MC_TE_REQ_OFF_FLAGS, (uint16_t)MC_TE_REQ_FLAG_GEN);
        mc_store_le64(out + MC_TE_REQ_OFF_RSVD0, gen);
    }
}

static inline void mc_te_req_encode(uint8_t out[MC_TE_REQ_HDR_SIZE], uint8_t opcode,
                                    uint64_t addr, uint64_t length)
{
    mc_te_req_encode_gen(out, opcode, addr, length, 0);
}

/* Returns 0 for a well-formed header, -1 for anything else (the caller
 * closes the connection). */
static inline int mc_te_req_decode(const uint8_t in[MC_TE_REQ_HDR_SIZE], mc_te_req_hdr_t *h)
{
    if (mc_load_le32(in + MC_TE_REQ_OFF_MAGIC) != MC_TE_REQ_MAGIC)
        return -1;
    h->version = in[MC_TE_REQ_OFF_VERSION];
    h->opcode  = in[MC_TE_REQ_OFF_OPCODE];
    h->flags   = mc_load_le16(in + MC_TE_REQ_OFF_FLAGS);
    h->addr    = mc_load_le64(in + MC_TE_REQ_OFF_ADDR);
    h->length  = mc_load_le64(in + MC_TE_REQ_OFF_LENGTH);
    h->gen     = mc_load_le64(in + MC_TE_REQ_OFF_RSVD0);
    if ((h->version != MC_TE_PROTO_VERSION) || (h->opcode > MC_TE_OPC_MAX_))
        return -1;
    if (h->flags == 0)
        return (h->gen == 0) ? 0 : -1;
    if ((h->flags != MC_TE_REQ_FLAG_GEN) ||
        ((h->opcode != MC_TE_OPC_READ) && (h->opcode != MC_TE_OPC_WRITE) &&
         (h->opcode != MC_TE_OPC_READV) && (h->opcode != MC_TE_OPC_READV_STRIDED)) ||
        (h->gen == 0))
        return -1;
    return 0;
}

static inline void mc_te_resp_encode(uint8_t out[MC_TE_RESP_HDR_SIZE], int32_t status,
                                     uint64_t length)
{
    mc_store_le32(out + MC_TE_RESP_OFF_MAGIC, MC_TE_RESP_MAGIC);
    mc_store_le32(out + MC_TE_RESP_OFF_STATUS, (uint32_t)status);
    mc_store_le64(out + MC_TE_RESP_OFF_LENGTH, length);
}

/* Returns 0 for a well-formed header, -1 otherwise.  Only 0 and negative
 * statuses are well-formed. */
static inline int mc_te_resp_decode(const uint8_t in[MC_TE_RESP_HDR_SIZE], mc_te_resp_hdr_t *h)
{
    if (mc_load_le32(in + MC_TE_RESP_OFF_MAGIC) != MC_TE_RESP_MAGIC)
        return -1;
    h->status = (int32_t)mc_load_le32(in + MC_TE_RESP_OFF_STATUS);
    h->length = mc_load_le64(in + MC_TE_RESP_OFF_LENGTH);
    return (h->status <= 0) ? 0 : -1;
}

/*
 * DISK_READ (docs/protocol.md §5.19, docs/tiers.md §4): a reader on another
 * host asks the holder of a disk replica for its value.  The request header
 * carries the record's offset in addr and the value's length in length;
 * an 8-byte prefix and then the key and the bucket file's path follow:
 *
 *   0  u32 value CRC32C (as the master handed it out)
 *   4  u16 key length K (1..MC_TE_DISK_KEY_MAX)
 *   6  u16 path length P (2..MC_TE_DISK_PATH_MAX, absolute, no NUL)
 *   8  K key bytes, then P path bytes
 *
 * The answer is the usual response header: status 0 and exactly length
 * value bytes, or a negative status (MC_OBJECT_NOT_FOUND for anything the
 * holder cannot vouch for) and no payload.  A prefix or body that fails
 * to decode closes the connection, like a malformed header.
 */
#define MC_TE_DISK_PREFIX_SIZE 8u
#define MC_TE_DISK_KEY_MAX     4096u
#define MC_TE_DISK_PATH_MAX    4095u

typedef struct mc_te_disk_req {
    uint64_t offset;  /* where the record starts in the bucket file */
    uint64_t length;  /* value bytes */
    uint32_t crc;     /* CRC32C of the value */
    const char *key;  /* key_len bytes, not NUL-terminated */
    size_t key_len;
    const char *path; /* path_len bytes, not NUL-terminated */
    size_t path_len;
} mc_te_disk_req_t;

static inline void mc_te_disk_prefix_encode(uint8_t out[MC_TE_DISK_PREFIX_SIZE], uint32_t crc,
                                            uint16_t key_len, uint16_t path_len)
{
    mc_store_le32(out, crc);
    mc_store_le16(out + 4, key_len);
    mc_store_le16(out + 6, path_len);
}

/* Decode the prefix of a DISK_READ: 0 and the body length (key + path)
 * in *body_len_p when the lengths are in range, -1 otherwise. */
static inline int mc_te_disk_prefix_decode(const uint8_t in[MC_TE_DISK_PREFIX_SIZE],
                                           size_t *body_len_p)
{
    uint16_t klen = mc_load_le16(in + 4), plen = mc_load_le16(in + 6);

    if ((klen == 0) || (klen > MC_TE_DISK_KEY_MAX) || (plen < 2) || (plen > MC_TE_DISK_PATH_MAX))
        return -1;
    *body_len_p = (size_t)klen + plen;
    return 0;
}

/* Decode a whole DISK_READ: its header @p h (already decoded, opcode
 * DISK_READ), its prefix and its body of @p body_len bytes.  0 and *req
 * (pointing into @p body) when well-formed: lengths as the prefix says, a
 * non-zero value length, an absolute path without NUL bytes; -1 otherwise. */
static inline int mc_te_disk_req_decode(const mc_te_req_hdr_t *h,
                                        const uint8_t in[MC_TE_DISK_PREFIX_SIZE],
                                        const uint8_t *body, size_t body_len,
                                        mc_te_disk_req_t *req)
{
    size_t want;

    if ((h->opcode != MC_TE_OPC_DISK_READ) || (h->length == 0) ||
        (h->addr > (uint64_t)INT64_MAX) || (h->length > (uint64_t)INT64_MAX - h->addr) ||
        (mc_te_disk_prefix_decode(in, &want) != 0) || (want != body_len))
        return -1;
    req->offset   = h->addr;
    req->length   = h->length;
    req->crc      = mc_load_le32(in);
    req->key_len  = mc_load_le16(in + 4);
    req->path_len = mc_load_le16(in + 6);
    req->key      = (const char *)body;
    req->path     = (const char *)body + req->key_len;
    if ((req->path[0] != '/') || (memchr(req->path, '\0', req->path_len) != NULL))
        return -1;
    return 0;
}

/*
 * READV (docs/transfer.md §3.3): one answer carrying several ranges of the
 * target's memory back to back, in the order named, so that an initiator
 * whose destination interleaves rows of several stored objects receives
 * them into one contiguous buffer.  The request header carries the number
 * of ranges n in addr (1..MC_TE_READV_MAX_RANGES) and their total length
 * in length (1..MC_TE_READV_MAX_LEN); n range entries follow it:
 *
 *   0  u64 addr   absolute address in the target's address space
 *   8  u64 length bytes (non-zero)
 *
 * A header out of those bounds, a zero-length entry or lengths that do not
 * add up to the header's closes the connection (a protocol violation).
 * Every range must lie inside the one remote-access region that holds the
 * first (of the generation named, with MC_TE_REQ_FLAG_GEN): else the
 * answer is INVALID_READ with no payload and the connection stays usable.
 * Only engines whose descriptor says "tcp_readv" are sent one (§4).
 */
#define MC_TE_READV_ENTRY_SIZE 16u
#define MC_TE_READV_MAX_RANGES 1024u
#define MC_TE_READV_MAX_LEN    (16u * 1024u * 1024u)

/* One remote range of a READV. */
typedef struct mc_te_range {
    uint64_t addr;
    uint64_t len;
} mc_te_range_t;

/* A READV or READV_STRIDED header (@p opcode) with its entry count in
 * 1..@p max and its total length in 1..MC_TE_READV_MAX_LEN: 0, else -1. */
static inline int mc_te_readv_counts_check(const mc_te_req_hdr_t *h, uint8_t opcode,
                                           uint64_t max)
{
    return ((h->opcode == opcode) && (h->addr >= 1) && (h->addr <= max) &&
            (h->length >= 1) && (h->length <= MC_TE_READV_MAX_LEN))
               ? 0
               : -1;
}

/* A READV header's counts in range: 0, else -1 (close). */
static inline int mc_te_readv_hdr_check(const mc_te_req_hdr_t *h)
{
    return mc_te_readv_counts_check(h, MC_TE_OPC_READV, MC_TE_READV_MAX_RANGES);
}

static inline void mc_te_readv_encode(uint8_t *out, const mc_te_range_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mc_store_le64(out + i * MC_TE_READV_ENTRY_SIZE, r[i].addr);
        mc_store_le64(out + i * MC_TE_READV_ENTRY_SIZE + 8, r[i].len);
    }
}

/* Decode the @p h->addr entries of a READV (header checked) from @p in into
 * @p out: 0 when every entry is non-empty and their lengths add up to
 * h->length (overflow-safe), -1 otherwise. */
static inline int mc_te_readv_decode(const mc_te_req_hdr_t *h, const uint8_t *in,
                                     mc_te_range_t *out)
{
    uint64_t left = h->length;

    for (size_t i = 0; i < (size_t)h->addr; i++) {
        out[i].addr = mc_load_le64(in + i * MC_TE_READV_ENTRY_SIZE);
        out[i].len  = mc_load_le64(in + i * MC_TE_READV_ENTRY_SIZE + 8);
        if ((out[i].len == 0) || (out[i].len > left))
            return -1;
        left -= out[i].len;
    }
    return (left == 0) ? 0 : -1;
}

/*
 * READV_STRIDED (docs/transfer.md §3.3, docs/protocol.md §5.21): a READV
 * whose entries name rows at a constant stride instead of one range each,
 * so that the rows of a tensor's column block -- or of several blocks
 * filling one destination row, read interleaved -- cost one entry per
 * block and not one per row.  The header is a READV's (n entries in addr,
 * 1..MC_TE_READVS_MAX_ENTRIES; total bytes in length, 1..MC_TE_READV_MAX_LEN;
 * GEN allowed); n 32-byte entries follow it:
 *
 *   0  u64 addr    first row's absolute address in the target's memory
 *   8  u64 stride  from one row to the next (>= len)
 *  16  u32 len     bytes per row (non-zero)
 *  20  u32 count   rows (non-zero)
 *  24  u32 group   on the first entry of a group, its number of entries
 *                  (1..); 0 on the group's other entries
 *  28  u32 reserved (0)
 *
 * The entries form groups: an entry with group w starts one of w entries,
 * all with the same count c; its answer is, for each row i < c in turn,
 * row i of each of the w entries in order (entry j's row i is
 * [addr_j + i * stride_j, +len_j)).  A group of one is its entry's rows in
 * order; a group of two whose rows are the two halves of each destination
 * row lands them there back to back.  The answer is the groups' bytes in
 * order, as a READV of every row named would be.
 *
 * A header out of bounds, an entry with len or count 0, stride < len, a
 * last row past the address space, a reserved word not 0, a group that
 * does not hold (width past the list, an entry inside a group whose group
 * is not 0 or whose count differs), more than MC_TE_READVS_MAX_ROWS rows
 * in all, or row bytes that do not add up to the header's length closes
 * the connection.  Every row must lie inside the one remote-access region
 * that holds the first (of the generation named): else INVALID_READ, no
 * payload, the connection kept -- exactly as a READV.  Only engines whose
 * descriptor says "tcp_readv_strided" are sent one (§4).
 */
#define MC_TE_READVS_ENTRY_SIZE  32u
#define MC_TE_READVS_MAX_ENTRIES MC_TE_READV_MAX_RANGES
#define MC_TE_READVS_MAX_ROWS    (64u * 1024u)
/* Rows merged into one group at most by mc_te_readvs_pack (the stored
 * objects that fill one destination row side by side). */
#define MC_TE_READVS_PACK_WIDTH 8u

/* One entry of a READV_STRIDED. */
typedef struct mc_te_strided {
    uint64_t addr;
    uint64_t stride;
    uint32_t len;
    uint32_t count;
    uint32_t group;
} mc_te_strided_t;

/* A READV_STRIDED header's counts in range: 0, else -1 (close). */
static inline int mc_te_readvs_hdr_check(const mc_te_req_hdr_t *h)
{
    return mc_te_readv_counts_check(h, MC_TE_OPC_READV_STRIDED, MC_TE_READVS_MAX_ENTRIES);
}

static inline void mc_te_readvs_encode(uint8_t *out, const mc_te_strided_t *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *o = out + i * MC_TE_READVS_ENTRY_SIZE;
        mc_store_le64(o, e[i].addr);
        mc_store_le64(o + 8, e[i].stride);
        mc_store_le32(o + 16, e[i].len);
        mc_store_le32(o + 20, e[i].count);
        mc_store_le32(o + 24, e[i].group);
        mc_store_le32(o + 28, 0);
    }
}

/* Decode the @p h->addr entries of a READV_STRIDED (header checked) from
 * @p in into @p out: 0 when every entry and group holds (see above) and
 * the rows add up to h->length, all checked without overflow; -1
 * otherwise.  *rows_p: the rows named. */
static inline int mc_te_readvs_decode(const mc_te_req_hdr_t *h, const uint8_t *in,
                                      mc_te_strided_t *out, size_t *rows_p)
{
    uint64_t left = h->length, rows = 0;
    size_t n = (size_t)h->addr, in_group = 0;
    uint32_t count = 0;

    for (size_t i = 0; i < n; i++) {
        const uint8_t *e = in + i * MC_TE_READVS_ENTRY_SIZE;
        mc_te_strided_t *o = &out[i];
        uint64_t span;
        o->addr   = mc_load_le64(e);
        o->stride = mc_load_le64(e + 8);
        o->len    = mc_load_le32(e + 16);
        o->count  = mc_load_le32(e + 20);
        o->group  = mc_load_le32(e + 24);
        if ((mc_load_le32(e + 28) != 0) || (o->len == 0) || (o->count == 0) ||
            (o->stride < o->len) || (o->len > UINT64_MAX - o->addr))
            return -1;
        /* the last row ends at addr + stride * (count - 1) + len */
        span = UINT64_MAX - o->addr - o->len;
        if ((o->count > 1) && (o->stride > span / (o->count - 1)))
            return -1;
        if (in_group == 0) {
            if ((o->group == 0) || (o->group > n - i))
                return -1;
            in_group = o->group;
            count    = o->count;
        } else if ((o->group != 0) || (o->count != count)) {
            return -1;
        }
        in_group--;
        if ((o->count > MC_TE_READVS_MAX_ROWS - rows) ||
            ((uint64_t)o->len * o->count > left))
            return -1;
        rows += o->count;
        left -= (uint64_t)o->len * o->count;
    }
    if ((in_group != 0) || (left != 0))
        return -1;
    *rows_p = (size_t)rows;
    return 0;
}

/* Walks the rows of decoded entries in answer order. */
typedef struct mc_te_strided_walk {
    const mc_te_strided_t *e;
    size_t n;
    size_t g;   /* first entry of the group walked */
    size_t j;   /* entry within it */
    uint32_t i; /* row */
} mc_te_strided_walk_t;

static inline void mc_te_strided_walk_init(mc_te_strided_walk_t *w, const mc_te_strided_t *e,
                                           size_t n)
{
    w->e = e;
    w->n = n;
    w->g = 0;
    w->j = 0;
    w->i = 0;
}

/* The next row in *r: 1, or 0 after the last. */
static inline int mc_te_strided_next(mc_te_strided_walk_t *w, mc_te_range_t *r)
{
    const mc_te_strided_t *x;

    if (w->g >= w->n)
        return 0;
    x       = &w->e[w->g + w->j];
    r->addr = x->addr + (uint64_t)w->i * x->stride;
    r->len  = x->len;
    if (++w->j == w->e[w->g].group) {
        w->j = 0;
        if (++w->i == w->e[w->g].count) {
            w->i = 0;
            w->g += w->e[w->g].group;
        }
    }
    return 1;
}

/* Ranges r[0..n) (n >= 2 * w) as rows of a group of width @p w: how many
 * periods of w follow each other with one stride per entry (r[w + j]
 * minus r[j], at least r[j]'s length) and the same lengths; 1 when the
 * second period already breaks it. */
static inline uint32_t mc_te_readvs_periods(const mc_te_range_t *r, size_t n, size_t w)
{
    uint32_t c = 2;

    for (size_t j = 0; j < w; j++)
        if ((r[w + j].len != r[j].len) || (r[w + j].addr < r[j].addr) ||
            (r[w + j].addr - r[j].addr < r[j].len))
            return 1;
    for (size_t b = 2 * w; b + w <= n; b += w, c++)
        for (size_t j = 0; j < w; j++)
            if ((r[b + j].len != r[j].len) || (r[b + j].addr < r[b - w + j].addr) ||
                (r[b + j].addr - r[b - w + j].addr != r[w + j].addr - r[j].addr))
                return c;
    return c;
}

/*
 * Pack ranges r[0..n) (each non-empty, not wrapping, at most UINT32_MAX
 * bytes to be packed into rows) into READV_STRIDED entries @p out (room
 * for n): greedily, at each range, the group of width 1..
 * MC_TE_READVS_PACK_WIDTH that covers most ranges with rows at a constant
 * stride per entry (at least two periods; ties to the narrower), else one
 * entry of one row.  Returns the number of entries, or 0 when a range
 * cannot be an entry (longer than UINT32_MAX): send a READV then.  The
 * rows of the entries, walked, are r[0..n) in order.
 */
static inline size_t mc_te_readvs_pack(const mc_te_range_t *r, size_t n, mc_te_strided_t *out)
{
    size_t k = 0, m = 0;

    for (size_t i = 0; i < n; i++)
        if ((r[i].len == 0) || (r[i].len > UINT32_MAX))
            return 0;
    while (k < n) {
        size_t best_w = 1;
        uint32_t best_c = 1;
        for (size_t w = 1; (w <= MC_TE_READVS_PACK_WIDTH) && (k + 2 * w <= n); w++) {
            uint32_t c = mc_te_readvs_periods(&r[k], n - k, w);
            if ((c >= 2) && ((size_t)c * w > (size_t)best_c * best_w)) {
                best_w = w;
                best_c = c;
            }
        }
        for (size_t j = 0; j < best_w; j++)
            out[m + j] = (mc_te_strided_t){
                r[k + j].addr, (best_c > 1) ? r[k + best_w + j].addr - r[k + j].addr : r[k + j].len,
                (uint32_t)r[k + j].len, best_c, (j == 0) ? (uint32_t)best_w : 0};
        m += best_w;
        k += (size_t)best_c * best_w;
    }
    return m;
}

#endif /* MC_TRANSFER_PROTO_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dummy-client protocol (docs/protocol.md §8): what a dummy store
 * handle (mc_store_setup_dummy) says to the real client that serves it
 * (mc_store_dummy_server_start, the mooncake_client daemon).
 *
 * One table, MC_DUMMY_MESSAGES, declares every request; the op numbers,
 * names and the server's dispatch come from it.  Both ends are on one
 * host (they share memory), so integers are in host byte order.  Frames:
 *
 *   request  = mc_dummy_hdr_t, then `count` items, each an mc_dummy_item_t
 *              followed by its key (klen bytes, no NUL) and, for the ops
 *              with a config (PUT, PUT_SESSION_START), its group id (glen
 *              bytes), then for those one mc_dummy_cfg_t followed by its
 *              preferred segment (plen bytes).  hdr.len counts the bytes
 *              after the header.
 *   response = mc_dummy_hdr_t (status = the call's status), then `count`
 *              mc_dummy_result_t, one per request item.
 *
 * Object bytes never travel on the socket: an item names a range of one of
 * the dummy's shared regions by offset - the two of HELLO (MC_DUMMY_REGION_
 * POOL / _LBUF) and the host-memory blocks it REGISTERed.  The server checks
 * every length, count and range against the frame and against that dummy's
 * own regions before it touches anything.
 *
 * Owns: the frames of the dummy-client protocol, shared by both ends.
 * May call: nothing (types and constants only).
 */
#ifndef MC_STORE_DUMMY_WIRE_H
#define MC_STORE_DUMMY_WIRE_H

#include <stdint.h>

#define MC_DUMMY_MAGIC 0x4d434455u /* "UDCM" */
#define MC_DUMMY_VERSION 1u
#define MC_DUMMY_MAX_FRAME (8u << 20)   /* request bytes after the header */
#define MC_DUMMY_MAX_ITEMS 65536u

/*      name        op  items carry                         reply per item */
#define MC_DUMMY_MESSAGES(X)                                                  \
    X(HELLO,        1, "version; two fds by SCM_RIGHTS",   "session id")      \
    X(PING,         2, "nothing",                          "-")               \
    X(ALLOC,        3, "region, len",                      "off, handle")     \
    X(FREE,         4, "region, handle (off ignored)",     "status")          \
    X(PUT,          5, "key, region, off, len (+MORE)",    "status")          \
    X(GET,          6, "key, region, off, cap (+MORE)",    "size or status")  \
    X(GET_STAGED,   7, "key",                              "size, off, handle") \
    X(EXIST,        8, "key",                              "1, 0 or status")  \
    X(SIZE,         9, "key",                              "size or status")  \
    X(REMOVE,      10, "key, flags FORCE",                 "status")          \
    X(STATS,       11, "nothing",                          "3 counters")      \
    X(BATCH_REMOVE, 12, "key, flags FORCE (item 0)",       "status")          \
    X(REMOVE_REGEX, 13, "ARG pattern, flags FORCE",        "count or status") \
    X(REMOVE_ALL,  14, "one item, flags FORCE",            "count or status") \
    X(REPLICA_CLEAR, 15, "key ... (+ARG segment name)",    "status")          \
    X(REPLICAS,    16, "key",                              "count, off, handle") \
    X(COPY_TASK,   17, "key, ARG target ...",              "status, off, handle") \
    X(MOVE_TASK,   18, "key, ARG source, ARG target",      "status, off, handle") \
    X(QUERY_TASK,  19, "ARG task id",                      "status, off, handle") \
    X(MOUNT,       20, "ARG protocol, ARG location; a file fd", "status, off, handle") \
    X(ALLOC_MOUNT, 21, "ARG protocol, ARG location",       "status, off, handle") \
    X(UNMOUNT,     22, "ARG segment id ... (+RELEASE: and free)", "status") \
    X(GET_SESSION_START, 23, "key",                        "status")          \
    X(GET_SESSION_READ, 24, "key (+MORE), ranges",         "bytes or status") \
    X(GET_SESSION_END, 25, "key",                          "status")          \
    X(PUT_SESSION_START, 26, "key, len = size; config",    "status")          \
    X(PUT_SESSION_WRITE, 27, "key (+MORE), ranges",        "bytes or status") \
    X(PUT_SESSION_END, 28, "key",                          "status")          \
    X(PUT_SESSION_REVOKE, 29, "key",                       "status")          \
    X(REGISTER,    30, "len; a host-memory memfd",          "region or status") \
    X(UNREGISTER,  31, "region",                            "status")

enum mc_dummy_op {
#define MC_DUMMY_X_(name, num, req, resp) MC_DUMMY_OP_##name = num,
    MC_DUMMY_MESSAGES(MC_DUMMY_X_)
#undef MC_DUMMY_X_
    MC_DUMMY_OP_MAX_
};

/* Regions of a dummy's shared memory: the two it brings with HELLO, then
 * up to MC_DUMMY_MAX_BUFS host-memory blocks it REGISTERs (region ids
 * MC_DUMMY_NREGIONS .. MC_DUMMY_MAX_REGIONS - 1, chosen by the server). */
#define MC_DUMMY_REGION_POOL 0u /* mem_pool_size: zero-copy data */
#define MC_DUMMY_REGION_LBUF 1u /* local_buffer_size: staging */
#define MC_DUMMY_NREGIONS 2u
#define MC_DUMMY_MAX_BUFS 64u
#define MC_DUMMY_MAX_REGIONS (MC_DUMMY_NREGIONS + MC_DUMMY_MAX_BUFS)
/* The largest region either end accepts (64 TiB). */
#define MC_DUMMY_MAX_REGION_SIZE ((uint64_t)1 << 46)

/* hdr.flags */
#define MC_DUMMY_F_NOREPLY 0x1u /* FREE only: the server sends no response */

/* item.flags */
#define MC_DUMMY_IF_MORE    0x1u /* PUT/GET: the next item (klen 0) is another piece of this key */
#define MC_DUMMY_IF_UPSERT  0x2u /* PUT: overwrite */
#define MC_DUMMY_IF_FORCE   0x4u /* REMOVE: ignore leases */
#define MC_DUMMY_IF_RELEASE 0x8u /* PUT: free the staging block `handle` once written */
#define MC_DUMMY_IF_ARG     0x10u /* the item's key bytes are a name the call takes
                                   * (pattern, segment, task id), not an object key */

typedef struct mc_dummy_hdr {
    uint32_t magic;
    uint32_t len;    /* bytes after this header */
    uint16_t op;
    uint16_t flags;
    uint32_t count;  /* items (request) or results (response) */
    int32_t status;  /* response: the call's status; request: 0 */
    uint32_t reserved;
} mc_dummy_hdr_t;
_Static_assert(sizeof(mc_dummy_hdr_t) == 24, "dummy header is 24 bytes");

typedef struct mc_dummy_item {
    uint64_t off;     /* offset in the region */
    uint64_t len;     /* bytes (PUT, ALLOC) or capacity (GET) */
    uint32_t handle;  /* staging block (FREE, PUT with IF_RELEASE) */
    uint16_t region;  /* MC_DUMMY_REGION_*, or a REGISTERed region */
    uint8_t flags;    /* MC_DUMMY_IF_* */
    uint8_t pad;
    uint32_t klen;    /* key bytes that follow */
    uint32_t glen;    /* PUT, keyed item: bytes of its group id that follow the
                       * key (used when the config asks for group ids) */
} mc_dummy_item_t;
_Static_assert(sizeof(mc_dummy_item_t) == 32, "dummy item is 32 bytes");

/* The replication config of PUT (after the items). */
typedef struct mc_dummy_cfg {
    uint64_t field_mask;
    uint64_t soft_pin_ttl_ms;
    uint32_t replica_num;
    uint32_t nof_replica_num;
    uint32_t dfs_replica_num;
    int32_t soft_pin_action;
    int32_t with_hard_pin;
    int32_t prefer_alloc_in_same_node;
    uint32_t present;  /* 0: NULL config (the defaults) */
    uint32_t plen;     /* bytes of preferred_segment that follow (0: none) */
} mc_dummy_cfg_t;
_Static_assert(sizeof(mc_dummy_cfg_t) == 48, "dummy config is 48 bytes");

typedef struct mc_dummy_result {
    int64_t result;   /* status, size or 1/0 */
    uint64_t off;     /* ALLOC, GET_STAGED: where the block is */
    uint32_t handle;  /* ALLOC, GET_STAGED: the block to FREE */
    uint32_t pad;
} mc_dummy_result_t;
_Static_assert(sizeof(mc_dummy_result_t) == 24, "dummy result is 24 bytes");

/* MOUNT, ALLOC_MOUNT: the staged answer. */
typedef struct mc_dummy_mounted {
    char id[40];         /* segment id, UUID text, NUL-terminated */
    uint64_t allocated;  /* ALLOC_MOUNT: bytes allocated */
} mc_dummy_mounted_t;
_Static_assert(sizeof(mc_dummy_mounted_t) == 48, "dummy mount answer is 48 bytes");

/* HELLO body (no items): the sizes of the two memfds attached. */
typedef struct mc_dummy_hello {
    uint32_t version;
    uint32_t nfds;
    uint64_t size[MC_DUMMY_NREGIONS];
} mc_dummy_hello_t;
_Static_assert(sizeof(mc_dummy_hello_t) == 24, "dummy hello is 24 bytes");

const char *mc_dummy_op_name(unsigned op);

#endif /* MC_STORE_DUMMY_WIRE_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File segments: storage the transfer engine serves with positioned I/O
 * instead of memory (docs/tiers.md §8, docs/transfer.md §13).
 *
 * A file segment is registered like a memory region: it takes a range of
 * the engine's address space ([addr, addr+len), reserved PROT_NONE so no
 * memory region can ever overlap it) and peers name its bytes by address
 * exactly as they do memory.  A request is served only when the whole
 * range lies inside the region, so a peer reaches bytes [0, len) of the
 * backing store and nothing else.  The target moves the bytes with the
 * backend's read/write at offset (address - addr).
 *
 * A backend is an ops table.  "file" (this directory) does pread/pwrite
 * on a regular file or a block device.  An NVMe-oF initiator plugs in as
 * another table: open connects the namespace, read/write submit I/O to it,
 * close disconnects; nothing above the table changes.
 */
#ifndef MC_TRANSFER_FILE_H
#define MC_TRANSFER_FILE_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

typedef struct mc_te_file_ops {
    size_t size;          /* sizeof(mc_te_file_ops_t): the table may grow */
    const char *name;
    /* Open the backing store for @p size bytes; *priv_p is handed back to
     * every other call.  A regular file shorter than size is extended; a
     * block device shorter than size is refused (INVALID_PARAMS). */
    mc_status_t (*open)(const char *path, uint64_t size, void **priv_p);
    /* Move exactly @p len bytes at byte @p off of the store (the caller
     * has checked off+len against the size).  MC_OK or an I/O status. */
    mc_status_t (*read)(void *priv, void *buf, size_t len, uint64_t off);
    mc_status_t (*write)(void *priv, const void *buf, size_t len, uint64_t off);
    void (*close)(void *priv);
} mc_te_file_ops_t;

/* The pread/pwrite backend. */
extern const mc_te_file_ops_t mc_te_file_posix_ops;

/* The backend named @p name ("file"), or NULL. */
const mc_te_file_ops_t *mc_te_file_ops_find(const char *name);

#endif /* MC_TRANSFER_FILE_H */

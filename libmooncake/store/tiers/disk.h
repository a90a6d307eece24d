/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's SSD tier (disk.c, docs/tiers.md), as the rest of the store
 * sees it.
 *
 * Owns: the interface of disk.c, part of tiers/'s door (tiers/tiers.h
 *   includes it).
 * May call: libmooncake's common/.
 */
#ifndef MC_STORE_DISK_H
#define MC_STORE_DISK_H

#include <stdint.h>

#include <mooncake/store.h>

#include "common/buf.h"
#include "common/util.h"

typedef struct mc_store_disk mc_store_disk_t;

/*
 * Read the value of the record at @p offset of bucket file @p path into
 * @p buf (@p size bytes), checking the record header, that it holds
 * @p key, its length, that the value's CRC32C is @p crc and that the bytes
 * match it.  MC_OBJECT_NOT_FOUND (detail set) when the file cannot be
 * opened here or any check fails: a damaged record is a miss, never bytes.
 * Any thread; no handle needed.
 */
mc_status_t mc_store_disk_read(const char *path, uint64_t offset, mc_str_t key, uint64_t size,
                               uint32_t crc, void *buf);
/* The same with @p crc NULL: the value's CRC32C is the one the record's
 * header carries (itself covered by the header CRC) -- the DFS tier's
 * reads, where the master does not know the checksum (dfs.c). */
mc_status_t mc_store_disk_read_record(const char *path, uint64_t offset, mc_str_t key,
                                      uint64_t size, const uint32_t *crc, void *buf);

/* Bytes of a record header, and the header of a record of @p key and a
 * @p size-byte value whose CRC32C is @p crc (docs/tiers.md §3). */
#define MC_STORE_DISK_HDR 24u
void mc_store_disk_record_header(uint8_t hdr[MC_STORE_DISK_HDR], mc_str_t key, uint64_t size,
                                 uint32_t crc);

/*
 * Read a disk replica (its @p path, holder @p segment, record @p offset,
 * @p key, @p size value bytes, value @p crc as the master handed them out)
 * into @p buf: from the file when this host can open it and the record
 * checks out, else through the holder's engine (DISK_READ, docs/tiers.md
 * §4).  MC_OBJECT_NOT_FOUND (detail set) when neither gives the bytes.
 */
mc_status_t mc_store_disk_fetch(mc_store_h s, const char *path, const char *segment,
                                uint64_t offset, mc_str_t key, uint64_t size, uint32_t crc,
                                void *buf);

/* Queue @p key for the offloader after this client sealed a write of it;
 * nothing when the tier is off.  Never blocks on I/O.  Callers hold `life`. */
void mc_store_disk_enqueue(mc_store_h s, mc_str_t key);

/* The disk hints' hooks (disk_hints.c, called through tiers.c; the
 * contracts are those of mc_store_tier_hooks_t in tiers.h). */
struct mc_store_file_ref;
struct mc_store_tier_spec;
void mc_store_disk_hint_note(mc_store_h s, mc_str_t key, uint64_t size,
                             const struct mc_store_file_ref *f, int had_hint);
int mc_store_disk_hint_size(mc_store_h s, mc_str_t key, uint64_t *size_p);
int mc_store_disk_hint_speculate(mc_store_h s, mc_str_t key, void *buf, size_t cap,
                                 struct mc_store_tier_spec *sp);
int mc_store_disk_hint_speculated(struct mc_store_tier_spec *sp,
                                  const struct mc_store_file_ref *f, uint64_t size);

/* Stop the offloader and free the tier (teardown, `life` held for writing). */
void mc_store_disk_stop(mc_store_h s);

#endif /* MC_STORE_DISK_H */

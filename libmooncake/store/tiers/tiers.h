/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tiers/: the door of the client's storage tiers.  Other folders include
 * this header and no other file of tiers/.
 *
 * Owns: the SSD tier (disk.c: bucket files, the offloader, record reads;
 * disk_hints.c: where this client last found each disk-only object, read
 * while the master answers its lookup), the DFS tier (dfs.c: the shared file system's layout and records), the
 * NoF segments this client serves (nof.c) and the hook table through
 * which the tiers plug into the pipelines (tiers.c).
 *
 * May call: ../store_internal.h (calls.c), ../threads/threads.h (the
 * offloader is a worker), ../read/read.h (the loc_cache the disk hints
 * live in), the master pool, the engine.  Called by: store.c (setup and
 * teardown of each tier), ../write/ and ../read/ (the
 * hooks), ../threads/ (heartbeat remount, tasks' SSD reads), the public
 * API (NoF mounts).
 */
#ifndef MC_STORE_TIERS_H
#define MC_STORE_TIERS_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_internal.h"
#include "store/tiers/dfs.h"
#include "store/tiers/disk.h"
#include "wire/wire.h"

/* ---- the hooks the write and read pipelines call (tiers.c) ---------------- */

/* A replica a tier reads from a file (the SSD record, the DFS record):
 * what a query keeps of it.  @p path and @p segment are not NUL-terminated
 * (they may point into the master's answer). */
typedef struct mc_store_file_ref {
    const struct mc_store_tier_hooks *tier; /* the tier that reads it */
    const char *path;
    size_t path_len;
    const char *segment;     /* the holder's segment name ("" for DFS) */
    size_t segment_len;
    uint64_t offset;
    uint32_t crc;            /* the value's CRC32C the master holds (0 for DFS) */
    uint8_t dfs;             /* the DFS record: shard and span describe it */
    uint32_t shard;
    uint64_t span;
} mc_store_file_ref_t;

/* A read a tier runs into the caller's buffer while the master answers
 * the lookup of @p key (the SSD tier's disk hints, docs/tiers.md §4): set
 * up by the tier's speculate hook, run (run(spec)) by the read pipeline
 * during the lookup, judged by the tier's speculated hook against the
 * answer. */
typedef struct mc_store_tier_spec {
    const struct mc_store_tier_hooks *tier; /* whose read it is */
    void (*run)(void *spec);                /* the read; sets st */
    mc_str_t key;
    void *buf;
    mc_status_t st; /* MC_TRANSFER_FAIL until the read ran */
    void *state;    /* the tier's: what it reads */
} mc_store_tier_spec_t;

/*
 * One tier's hooks into the pipelines; NULL where the tier has nothing
 * to do there.  The tiers are asked in a fixed order, the SSD tier first,
 * then DFS, then NoF (whose replicas are read and written like memory, so
 * it hooks only setup and teardown, called by store.c).
 */
typedef struct mc_store_tier_hooks {
    const char *name;
    /* write: the config of a single-key write, after the generic checks
     * (mc_store_config_check) and before any RPC */
    mc_status_t (*config_check)(mc_store_h s, const mc_replicate_config_t *cfg);
    /* write: an upsert the master refused with MC_INVALID_PARAMS: may set a
     * detail that says why */
    void (*upsert_refused)(mc_store_h s, const char *key);
    /* write: the replicas of type @p file_type (0: none) are this tier's
     * to write, from the caller's parts, once the master connection is
     * back and before the memory transfer */
    uint8_t file_type;
    mc_status_t (*write_file)(mc_store_h s, const mc_wire_replica_t *r, mc_str_t key,
                              const mc_iov_t *parts, size_t n, uint64_t total);
    /* write: a put or upsert this client sealed (END or COMMIT answered OK) */
    void (*sealed)(mc_store_h s, mc_str_t key);
    /* read: the first of @p reps this tier reads for a value of @p size
     * bytes, into @p f (a path it builds goes to @p path, @p cap bytes); 0
     * when there is none */
    int (*find_file)(mc_store_h s, const mc_wire_replica_list_t *reps, uint64_t size,
                     mc_store_file_ref_t *f, char *path, size_t cap);
    /* read: the whole value of a file replica @p find_file found (strings
     * NUL-terminated now) into @p buf */
    mc_status_t (*read_file)(mc_store_h s, const char *path, const char *segment,
                             uint64_t offset, mc_str_t key, uint64_t size, uint32_t crc,
                             void *buf);
    /* read: the master's answer for @p key (a value of @p size bytes):
     * @p f is the file replica of an object with no memory replica, NULL
     * otherwise; @p had_spec: this tier's speculative read ran with the
     * lookup (SSD: remember or forget the disk hint) */
    void (*note)(mc_store_h s, mc_str_t key, uint64_t size, const mc_store_file_ref_t *f,
                 int had_spec);
    /* read: the value size this tier remembers for @p key (SSD: its disk
     * hint's): 1 with *size_p, else 0 */
    int (*size_hint)(mc_store_h s, mc_str_t key, uint64_t *size_p);
    /* read: a read of @p key's whole value into @p buf (@p cap bytes) to
     * run while the master answers its lookup (SSD: the hinted record):
     * 1 with @p sp set up, else 0 */
    int (*speculate)(mc_store_h s, mc_str_t key, void *buf, size_t cap,
                     mc_store_tier_spec_t *sp);
    /* read: the end of that read, which may not have run: 1 when @p buf
     * holds the value of the file replica @p f (@p size bytes) the answer
     * names (NULL: none, or no answer); frees sp's state */
    int (*speculated)(mc_store_tier_spec_t *sp, const mc_store_file_ref_t *f, uint64_t size);
} mc_store_tier_hooks_t;

/* Every tier's config_check, in order: the first failure. */
mc_status_t mc_store_tiers_config_check(mc_store_h s, const mc_replicate_config_t *cfg);
void mc_store_tiers_upsert_refused(mc_store_h s, const char *key);
/* The tier that writes replicas of @p type itself, or NULL (memory, NoF). */
const mc_store_tier_hooks_t *mc_store_tiers_file_writer(uint8_t type);
void mc_store_tiers_sealed(mc_store_h s, mc_str_t key);
/* The file replica a query reads when no memory replica serves: the
 * first tier's find_file that finds one (1), else 0. */
int mc_store_tiers_find_file(mc_store_h s, const mc_wire_replica_list_t *reps, uint64_t size,
                             mc_store_file_ref_t *f, char *path, size_t cap);
/* Every tier's note of the master's answer for @p key; @p spec: the
 * speculative read that ran with the lookup (NULL: none). */
void mc_store_tiers_note(mc_store_h s, mc_str_t key, uint64_t size,
                         const mc_store_file_ref_t *f, const mc_store_tier_spec_t *spec);
/* The first tier's size_hint that knows @p key's size (1), else 0. */
int mc_store_tiers_size_hint(mc_store_h s, mc_str_t key, uint64_t *size_p);
/* The first tier's speculate that has a read for @p key (1, sp->tier
 * set), else 0; every read it sets up ends with
 * mc_store_tiers_speculated, whether it ran or not. */
int mc_store_tiers_speculate(mc_store_h s, mc_str_t key, void *buf, size_t cap,
                             mc_store_tier_spec_t *sp);
int mc_store_tiers_speculated(mc_store_tier_spec_t *sp, const mc_store_file_ref_t *f,
                              uint64_t size);

/* The SSD tier's disk hints (disk_hints.c, docs/tiers.md §4), as large
 * as the location cache and off with it (MC_STORE_LOCATION_CACHE): created
 * at setup beside the read-side state, destroyed by teardown after it
 * (store.c). */
mc_status_t mc_store_disk_hints_create(mc_store_h s);
void mc_store_disk_hints_destroy(mc_store_h s);

/* ---- NoF segments (nof.c, docs/tiers.md §8) ---- */
/* REMOUNT_NOF_SEGMENTS of every NoF segment we serve (heartbeat remount), each
 * first moved to a fence of its own with @p fence (heartbeat.c). */
void mc_store_nof_remount(mc_store_h s, mc_mconn_t *conn, int fence);
/* Unregister every NoF segment and free the record (teardown, after
 * CLIENT_CLOSE told the master they are gone). */
void mc_store_nof_release(mc_store_h s);

#endif /* MC_STORE_TIERS_H */

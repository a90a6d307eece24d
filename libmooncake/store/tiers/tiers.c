/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tiers' hook table: how the SSD tier (disk.c) and the DFS tier
 * (dfs.c) plug into the write and read pipelines (../write/write.c,
 * ../write/write_batch.c, ../read/query.c), so the pipelines name no tier.
 *
 * Write: config_check before any RPC (DFS: its placement rules);
 * upsert_refused explains a refusal (DFS); write_file writes the replicas
 * of the tier's own type from the file side (DFS: one record per value);
 * sealed follows a sealed write (SSD: the offload queue).  Read: find_file
 * picks the file replica a query falls back to (the SSD record first,
 * else the DFS record: docs/tiers.md), read_file reads it; speculate sets
 * up a read to run while the master answers a lookup and speculated
 * judges it against the answer, note hears every answer, size_hint
 * tells the size a tier remembers (SSD: its disk hints, disk_hints.c,
 * docs/tiers.md §4).
 *
 * May call: disk.c, disk_hints.c and dfs.c (this folder),
 * ../store_internal.h.
 */
#include "config.h"

#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/tiers/tiers.h"

/* ---- the SSD tier (docs/tiers.md) ---------------------------------------------- */

/* A disk replica worth trying: complete, the object's size, a file path
 * and a segment name we can carry. */
static int disk_usable(const mc_wire_replica_t *r, uint64_t size)
{
    return (r->status == MC_REPLICA_COMPLETE) && (r->type == MC_WIRE_REPLICA_DISK) &&
           (r->size == size) && (r->file_path.len > 1) && (r->file_path.ptr[0] == '/') &&
           (r->file_path.len < 4096) &&
           (memchr(r->file_path.ptr, '\0', r->file_path.len) == NULL) &&
           (r->segment.len < MC_STORE_NAME_MAX) &&
           (memchr(r->segment.ptr, '\0', r->segment.len) == NULL);
}

static const mc_store_tier_hooks_t disk_hooks;

static int disk_find_file(mc_store_h s, const mc_wire_replica_list_t *reps, uint64_t size,
                          mc_store_file_ref_t *f, char *path, size_t cap)
{
    (void)s;
    (void)path;
    (void)cap;
    for (uint32_t i = 0; i < reps->n; i++) {
        const mc_wire_replica_t *r = &reps->v[i];
        if (!disk_usable(r, size))
            continue;
        memset(f, 0, sizeof(*f));
        f->tier        = &disk_hooks;
        f->path        = r->file_path.ptr;
        f->path_len    = r->file_path.len;
        f->segment     = r->segment.ptr;
        f->segment_len = r->segment.len;
        f->offset      = r->addr;
        f->crc         = r->crc;
        return 1;
    }
    return 0;
}

static const mc_store_tier_hooks_t disk_hooks = {
    .name       = "disk",
    .sealed     = mc_store_disk_enqueue,
    .find_file  = disk_find_file,
    .read_file  = mc_store_disk_fetch, /* the file, else its holder */
    .note       = mc_store_disk_hint_note, /* disk hints: disk_hints.c */
    .size_hint  = mc_store_disk_hint_size,
    .speculate  = mc_store_disk_hint_speculate,
    .speculated = mc_store_disk_hint_speculated,
};

/* ---- the DFS tier (docs/tiers.md §6) -------------------------------------------- */

static const mc_store_tier_hooks_t dfs_hooks;

static void dfs_upsert_refused(mc_store_h s, const char *key)
{
    if (s->dfs != NULL)
        mc_set_error_detail("upsert of %s refused by the master: a same-size upsert of an "
                            "object with a DFS replica, or asking for one, must keep the "
                            "object's replica_num, nof_replica_num and dfs_replica_num "
                            "(docs/tiers.md)", key);
}

static int dfs_find_file(mc_store_h s, const mc_wire_replica_list_t *reps, uint64_t size,
                         mc_store_file_ref_t *f, char *path, size_t cap)
{
    for (uint32_t i = 0; i < reps->n; i++) {
        const mc_wire_replica_t *r = &reps->v[i];
        if (!mc_store_dfs_replica_path(s, r, size, path, cap))
            continue;
        memset(f, 0, sizeof(*f));
        f->tier     = &dfs_hooks;
        f->path     = path;
        f->path_len = strlen(path);
        f->segment  = "";
        f->offset   = r->addr;
        f->dfs      = 1;
        f->shard    = r->shard_idx;
        f->span     = r->aligned_size;
        return 1;
    }
    return 0;
}

/* A DFS record from the shared file, whose CRC the master does not hold. */
static mc_status_t dfs_read_file(mc_store_h s, const char *path, const char *segment,
                                 uint64_t offset, mc_str_t key, uint64_t size, uint32_t crc,
                                 void *buf)
{
    (void)s;
    (void)segment;
    (void)crc;
    return mc_store_disk_read_record(path, offset, key, size, NULL, buf);
}

static const mc_store_tier_hooks_t dfs_hooks = {
    .name           = "dfs",
    .config_check   = mc_store_dfs_config_check,
    .upsert_refused = dfs_upsert_refused,
    .file_type      = MC_WIRE_REPLICA_DFS,
    .write_file     = mc_store_dfs_write,
    .find_file      = dfs_find_file,
    .read_file      = dfs_read_file,
};

/* ---- the table -------------------------------------------------------------------- */

/* In the order the pipelines ask them (the SSD record before the DFS one). */
static const mc_store_tier_hooks_t *const tiers[] = {&disk_hooks, &dfs_hooks};
#define NTIERS (sizeof(tiers) / sizeof(tiers[0]))

mc_status_t mc_store_tiers_config_check(mc_store_h s, const mc_replicate_config_t *cfg)
{
    for (size_t i = 0; i < NTIERS; i++) {
        mc_status_t st = (tiers[i]->config_check != NULL) ? tiers[i]->config_check(s, cfg) : MC_OK;
        if (st != MC_OK)
            return st;
    }
    return MC_OK;
}

void mc_store_tiers_upsert_refused(mc_store_h s, const char *key)
{
    for (size_t i = 0; i < NTIERS; i++)
        if (tiers[i]->upsert_refused != NULL)
            tiers[i]->upsert_refused(s, key);
}

const mc_store_tier_hooks_t *mc_store_tiers_file_writer(uint8_t type)
{
    for (size_t i = 0; i < NTIERS; i++)
        if ((tiers[i]->file_type != 0) && (tiers[i]->file_type == type))
            return tiers[i];
    return NULL;
}

void mc_store_tiers_sealed(mc_store_h s, mc_str_t key)
{
    for (size_t i = 0; i < NTIERS; i++)
        if (tiers[i]->sealed != NULL)
            tiers[i]->sealed(s, key);
}

int mc_store_tiers_find_file(mc_store_h s, const mc_wire_replica_list_t *reps, uint64_t size,
                             mc_store_file_ref_t *f, char *path, size_t cap)
{
    for (size_t i = 0; i < NTIERS; i++)
        if ((tiers[i]->find_file != NULL) && tiers[i]->find_file(s, reps, size, f, path, cap))
            return 1;
    return 0;
}

void mc_store_tiers_note(mc_store_h s, mc_str_t key, uint64_t size,
                         const mc_store_file_ref_t *f, const mc_store_tier_spec_t *spec)
{
    for (size_t i = 0; i < NTIERS; i++)
        if (tiers[i]->note != NULL)
            tiers[i]->note(s, key, size, f, (spec != NULL) && (spec->tier == tiers[i]));
}

int mc_store_tiers_size_hint(mc_store_h s, mc_str_t key, uint64_t *size_p)
{
    for (size_t i = 0; i < NTIERS; i++)
        if ((tiers[i]->size_hint != NULL) && tiers[i]->size_hint(s, key, size_p))
            return 1;
    return 0;
}

int mc_store_tiers_speculate(mc_store_h s, mc_str_t key, void *buf, size_t cap,
                             mc_store_tier_spec_t *sp)
{
    for (size_t i = 0; i < NTIERS; i++) {
        if ((tiers[i]->speculate != NULL) && tiers[i]->speculate(s, key, buf, cap, sp)) {
            sp->tier = tiers[i];
            return 1;
        }
    }
    return 0;
}

int mc_store_tiers_speculated(mc_store_tier_spec_t *sp, const mc_store_file_ref_t *f,
                              uint64_t size)
{
    return sp->tier->speculated(sp, f, size);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SSD tier's disk hints (docs/tiers.md §4, "Overlapped disk reads"):
 * where this handle last found each disk-only object, so that a get of it
 * reads the record while the master answers the lookup.
 *
 * A hint is the record's file, offset, value size and CRC, kept in a
 * loc_cache of its own (s->disk_hints: as many entries as the location
 * cache, off with it) for MC_DISK_HINT_TTL_MS, in LRU order.  A hint is
 * never trusted.  The read pipeline runs the hinted read into the
 * caller's buffer while the master answers the lookup, and keeps those
 * bytes only when the answer names that very disk replica (file, offset,
 * size and CRC): a record is never rewritten and every read of it checks
 * key, length and CRC, so they are then the bytes a read after the answer
 * would have found.  Every get still asks the master, so leases,
 * promotion counts, removals and upserts work as without hints.
 *
 * May call: disk.c (mc_store_disk_read), ../read/read.h (the loc_cache
 * the hints live in).  Called by: tiers.c (the hooks), store.c (setup and
 * teardown of the cache).
 */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/read/read.h"
#include "store/store_internal.h"
#include "store/tiers/disk.h"
#include "store/tiers/tiers.h"

#define MC_DISK_HINT_TTL_MS 600000u

typedef struct disk_hint {
    uint64_t size;
    uint64_t offset;
    uint32_t crc;
    char path[]; /* NUL-terminated */
} disk_hint_t;

/* Bytes of a hint whose path has @p plen bytes (the path may start
 * inside the struct's tail padding). */
#define HINT_SIZE(plen) (offsetof(disk_hint_t, path) + (plen) + 1)

mc_status_t mc_store_disk_hints_create(mc_store_h s)
{
    size_t entries;
    mc_status_t st;

    if (s->disk_hints != NULL)
        return MC_OK;
    st = mc_loc_cache_config(&entries);
    if ((st == MC_OK) && (entries > 0))
        st = mc_loc_cache_create(entries, &s->disk_hints);
    if (st != MC_OK)
        mc_error("%s", mc_last_error_detail());
    return st;
}

void mc_store_disk_hints_destroy(mc_store_h s)
{
    mc_loc_cache_destroy(s->disk_hints);
    s->disk_hints = NULL;
}

void mc_store_disk_hint_note(mc_store_h s, mc_str_t key, uint64_t size,
                             const mc_store_file_ref_t *f, int had_hint)
{
    mc_loc_cache_t *c = s->disk_hints;
    disk_hint_t *h;

    if (c == NULL)
        return;
    if ((f == NULL) || f->dfs || (size == 0)) {
        if (had_hint)
            mc_loc_cache_drop(c, key.ptr, key.len);
        return;
    }
    h = malloc(HINT_SIZE(f->path_len));
    if (h == NULL)
        return;
    h->size   = size;
    h->offset = f->offset;
    h->crc    = f->crc;
    memcpy(h->path, f->path, f->path_len);
    h->path[f->path_len] = '\0';
    mc_loc_cache_put(c, key.ptr, key.len, h, HINT_SIZE(f->path_len),
                     mc_now_ns() + MC_DISK_HINT_TTL_MS * UINT64_C(1000000),
                     mc_loc_cache_epoch(c));
    free(h);
}

/* The hint for @p key (malloc'd), or NULL. */
static disk_hint_t *hint_get(mc_store_h s, mc_str_t key)
{
    mc_loc_cache_t *c = s->disk_hints;
    const char *only_remote;
    disk_hint_t *h;
    size_t len;
    uint64_t deadline;

    if (c == NULL)
        return NULL;
    /* tests make this reader ask the holder: no reads of the file here */
    only_remote = getenv("MC_TEST_DISK_REMOTE_ONLY");
    if ((only_remote != NULL) && (strcmp(only_remote, "1") == 0))
        return NULL;
    h = mc_loc_cache_get(c, key.ptr, key.len, mc_now_ns(), &len, &deadline);
    if ((h != NULL) && ((len <= HINT_SIZE(0)) || (((char *)h)[len - 1] != '\0'))) {
        free(h);
        h = NULL;
    }
    return h;
}

int mc_store_disk_hint_size(mc_store_h s, mc_str_t key, uint64_t *size_p)
{
    disk_hint_t *h = hint_get(s, key);

    if (h == NULL)
        return 0;
    *size_p = h->size;
    free(h);
    return 1;
}

/* The hinted record's read, run while the master answers. */
static void hint_read_run(void *arg)
{
    mc_store_tier_spec_t *sp = arg;
    const disk_hint_t *h     = sp->state;

    sp->st = mc_store_disk_read(h->path, h->offset, sp->key, h->size, h->crc, sp->buf);
}

int mc_store_disk_hint_speculate(mc_store_h s, mc_str_t key, void *buf, size_t cap,
                                 mc_store_tier_spec_t *sp)
{
    disk_hint_t *h = hint_get(s, key);

    if ((h == NULL) || (h->size > cap)) {
        free(h);
        return 0;
    }
    sp->run   = hint_read_run;
    sp->key   = key;
    sp->buf   = buf;
    sp->st    = MC_TRANSFER_FAIL;
    sp->state = h;
    return 1;
}

int mc_store_disk_hint_speculated(mc_store_tier_spec_t *sp, const mc_store_file_ref_t *f,
                                  uint64_t size)
{
    disk_hint_t *h = sp->state;
    int have       = (f != NULL) && (sp->st == MC_OK) && !f->dfs && (size == h->size) &&
               (f->offset == h->offset) && (f->crc == h->crc) &&
               (f->path_len == strlen(h->path)) && (memcmp(f->path, h->path, f->path_len) == 0);

    free(h);
    sp->state = NULL;
    return have;
}

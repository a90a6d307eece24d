/* SPDX-License-Identifier: Apache-2.0 */
/*
 * read/: the door of the read pipeline.  Other folders include this
 * header and no other file of read/.
 *
 * Owns: lookups and queries (query.c: GET_REPLICA_LIST, replica choice,
 * the location cache and speculative reads over loc_cache.c), the reads themselves (zerocopy.c: registered memory, get_into,
 * batch and ranged reads in one transfer; query.c: get and query reads),
 * replica descriptors (replica.c), buffer handles and the mem pool
 * (buffer.c), which also owns the read-side state (s->rd) and the staging
 * buffer's reference-counted mapping.
 *
 * May call: ../store_internal.h (calls.c), ../tiers/tiers.h (the hook
 * table: the file replica a query falls back to, a tier's read while the
 * master answers -- the SSD tier's disk hints), metrics, the master pool, the engine.
 * Called by: store.c (the read-side state), ../write/ (registered memory,
 * staging, the location cache), ../segments/ (the mapping), ../sessions/,
 * ../threads/, ../tiers/ (the disk hints keep a loc_cache of their own),
 * the dummy backend (copies) and its server.
 */
#ifndef MC_STORE_READ_H
#define MC_STORE_READ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hashmap.h"
#include "store/read/loc_cache.h"
#include "store/store_internal.h"

/* ---- queries (query.c) ---------------------------------------------------- */

typedef struct mc_query_replica {
    uint64_t id;         /* the master's replica id: a new one for every value */
    uint64_t addr;
    uint64_t gen;        /* the holder's registration generation of its
                          * segment (mc_store_segment_gen), checked by the
                          * holder on every read */
    const char *segment; /* NUL-terminated, stored after the array */
    uint8_t nof;         /* in a NoF segment (read alike, listed after memory) */
} mc_query_replica_t;

/* The replica descriptors of @p key as @p s's backend reports them (the
 * caller frees *descs_p): the replicas of a copy query. */
typedef mc_status_t (*mc_store_describe_func_t)(mc_store_h s, const char *key,
                                                mc_replica_desc_t **descs_p, size_t *n_p);

/* Readable replicas of one object, best first (see query.c). */
struct mc_store_query {
    uint64_t size;
    uint64_t deadline_ns; /* monotonic; UINT64_MAX for "no lease" */
    uint32_t n;           /* >= 1; 0 for a copy query */
    const uint8_t *copy;  /* a copy query: the object's bytes, read at
                           * lookup time and freed with the query; a disk-only
                           * object's: disk_bytes once read; else NULL */
    /* The disk replica (docs/tiers.md), strings stored after the array;
     * disk_path NULL when there is none.  A query with no memory replica
     * (n == 0) reads it, once, into disk_bytes (mc_store_query_load_disk). */
    const char *disk_path;
    const struct mc_store_tier_hooks *disk_tier; /* reads it (tiers.h) */
    const char *disk_segment;
    const char *disk_key;
    uint64_t disk_offset;
    uint32_t disk_crc;
    uint8_t *disk_bytes;
    /* the disk replica is the object's DFS record (docs/tiers.md §6):
     * its CRC is the record's own; shard and reserved bytes describe it */
    uint8_t disk_dfs;
    uint32_t disk_shard;
    uint64_t disk_span;
    /* a copy query (owner != NULL; copy holds its bytes, fetched whole by
     * a backend with no replicas of its own: the dummy): its key and
     * handle, and the replica descriptors @p describe reports, asked for
     * on first use (replica.c); freed with the query */
    mc_store_h owner;
    char *key;
    mc_store_describe_func_t describe;
    struct mc_copy_descs *descs;
    /* the location cache (loc_cache.h): a query with no disk replica is
     * one relocatable block of blob_len bytes (0: not cacheable), built at
     * blob_base, holding its key at ckey; cached is set on a query that
     * came from the cache rather than from the master */
    size_t blob_len;
    uintptr_t blob_base;
    const char *ckey;
    int cached;
    /* A location this client wrote itself (mc_store_spec_note), cached
     * without a lease: it is read only together with a lookup that
     * confirms it (query.c, "Speculative reads"). */
    int spec;
    /* A confirmed speculative read that went straight into the caller's
     * buffer (query.c, "Speculative reads"): the whole value is already
     * there, so the first read of all of it into that very buffer is
     * done.  That read clears it; NULL otherwise. */
    void *landed;
    mc_query_replica_t r[];
};

/* A disk-only query (n == 0, disk_path set): read its record into
 * disk_bytes (from the file, else through its holder: mc_store_disk_fetch)
 * and point copy at them; MC_OK at once when copy is set.  The
 * caller owns the query (queries are not shared between threads). */
mc_status_t mc_store_query_load_disk(mc_store_h s, mc_store_query_h q);

/* Read the whole value of the disk (or DFS) replica of @p q into @p buf,
 * checked (disk.c); MC_OBJECT_NOT_FOUND on any mismatch. */
mc_status_t mc_store_query_disk_read(mc_store_h s, mc_store_query_h q, void *buf);

/*
 * BATCH_GET_REPLICA_LIST for keys[0..n) (n <= MC_WIRE_MAX_LIST); the
 * caller holds `life` (mc_store_enter).  queries[i] is set (caller frees
 * with mc_store_query_release) where statuses[i] is MC_OK, NULL elsewhere.
 * Returns MC_OK unless the call itself failed (then every key without an
 * error of its own, such as an invalid key, gets that error).
 */
mc_status_t mc_store_do_batch_query(mc_store_h s, const char *const *keys, size_t n,
                                    mc_store_query_h *queries, mc_status_t *statuses);
/* mc_store_do_batch_query answering from the location cache where it can
 * (only the misses go to the master, in one request) and caching what the
 * master answers.  A read of a query with `cached` set that fails must
 * call mc_store_cache_drop and look the key up again with
 * mc_store_do_batch_query (once). */
mc_status_t mc_store_do_batch_query_cached(mc_store_h s, const char *const *keys, size_t n,
                                           mc_store_query_h *queries, mc_status_t *statuses);
/* The same, for a caller that reads each whole value i into @p dsts[i]
 * (@p caps[i] bytes; NULL: no such buffer; @p dsts NULL: none at all):
 * a speculative read goes straight there (q->landed), and a read
 * refuted leaves zeros there. */
mc_status_t mc_store_do_batch_query_cached_to(mc_store_h s, const char *const *keys, size_t n,
                                              mc_store_query_h *queries, mc_status_t *statuses,
                                              void *const *dsts, const size_t *caps);

/* ---- copies: what a backend with no replicas of its own reads ------------ */

/* Room a backend leaves in front of each fetched copy for the query or the
 * buffer handle that will hold it (mc_store_queries_from_copies,
 * mc_store_buffers_from_copies). */
#define MC_STORE_QUERY_COPY_HDR ((sizeof(struct mc_store_query) + 63) & ~(size_t)63)
size_t mc_store_buffer_copy_hdr(void);
/* Wrap the copies mems[i] (sizes[i] bytes at + the header; statuses[i])
 * into queries / buffers; a failed key's block is freed, and so are both
 * arrays. */
void mc_store_queries_from_copies(mc_store_h s, const char *const *keys, size_t n, void **mems,
                                  uint64_t *sizes, mc_store_describe_func_t describe,
                                  mc_store_query_h *queries, mc_status_t *statuses);
void mc_store_buffers_from_copies(size_t n, void **mems, uint64_t *sizes,
                                  mc_store_buffer_h *buffers, const mc_status_t *statuses);

/* ---- the location cache (query.c over loc_cache.c) -------------------------- */

/* Forget what the cache knows of @p key / of every key: after a local
 * write or removal (the master answered).  No-op without a cache. */
void mc_store_cache_drop(mc_store_h s, const char *key);
/* Reads refused as "not here" (MC_INVALID_READ: the holder's generation
 * moved on since the master answered) ask the master again up to this
 * many times, pausing before each with mc_store_read_again_pause(). */
#define MC_READ_AGAIN_TRIES 32
/* Nothing for the first tries, then 50 us doubling to 1.6 ms. */
void mc_store_read_again_pause(int tries);
void mc_store_cache_clear(mc_store_h s);
/* Where this client's put of @p key (@p size bytes) went (@p reps), as a
 * speculative cache entry (query.c, "Speculative reads"), or NULL when it
 * is not worth one; mc_store_spec_note caches it once the put is sealed
 * (and takes it either way). */
struct mc_store_query *mc_store_spec_build(mc_store_h s, const char *key, uint64_t size,
                                           const mc_wire_replica_list_t *reps);
void mc_store_spec_note(mc_store_h s, struct mc_store_query *q);

/* MC_LEASE_EXPIRED (detail set) when the lease of @p q has run out. */
mc_status_t mc_store_query_lease_check(mc_store_query_h q);
/* 1 when a read of [@p offset, +@p len) of @p q into @p buf is already
 * done (the whole value landed there with the lookup: q->landed); clears
 * the mark either way. */
int mc_store_query_landed(mc_store_query_h q, const void *buf, uint64_t offset, uint64_t len);

/* ---- reads of many pieces in one transfer (zerocopy.c) --------------------- */

/* One range of one object, read into local memory. */
typedef struct mc_read_piece {
    void *local;
    uint64_t src_offset; /* within the object */
    uint64_t length;     /* > 0 */
    size_t owner;        /* index into the queries/statuses of the call */
} mc_read_piece_t;

/*
 * Read every piece: one pipelined engine transfer against each object's
 * first replica, then, for an object whose pieces failed, its remaining
 * replicas one after another.  @p ostatus[owner] must be MC_OK on entry for
 * owners to read (others' pieces are skipped); on return it holds the
 * owner's result, lease checked.  Ranges must already be validated.
 */
void mc_store_read_pieces(mc_store_h s, mc_store_query_h const *queries,
                          const mc_read_piece_t *pieces, size_t npieces,
                          mc_status_t *ostatus);

/*
 * The reads of this thread copy a replica that lies in a segment mapped on
 * this host by this thread alone (mc_te_read_direct_gen: streaming stores),
 * whatever the pieces' size, after the lookup -- no speculative read into
 * the caller's buffer and no hand-off to the transfer engine's workers --
 * while @p on is set; MC_TE_DIRECT_SPREAD_MIN bytes or more are copied as
 * one shared read (mc_store_read_assist).  The completion queue sets it
 * around an MC_STORE_AQ_BATCH_GET_INTO_LOCAL: the submitting thread then
 * has the other cores to itself until it helps.  A replica reached over
 * the network reads as ever.  Returns the previous setting.
 */
int mc_store_read_local_set(int on);

/*
 * Copy, on the calling thread, the pieces of this store's local reads in
 * progress (those of MC_TE_DIRECT_SPREAD_MIN bytes or more, read as one
 * shared read: mc_te_read_shared_gen) that their own thread has not
 * reached yet; returns once none is left, with the number copied.
 */
size_t mc_store_read_assist(mc_store_h s);

/* ---- the local buffer mapping (buffer.c; created by segment.c) --------------------------------- */

typedef struct mc_store_lbuf_map {
    pthread_mutex_t lock; /* guards alloc and refs */
    unsigned refs;
    void *base;
    uint64_t size;
    size_t map_len;
    mc_alloc_t *alloc;
} mc_store_lbuf_map_t;

/* buffer.c: lease @p size bytes of the staging buffer (thread-safe). */
mc_status_t mc_store_lbuf_alloc(mc_store_h s, uint64_t size, void **ptr_p,
                                mc_alloc_block_t *block_p);
void mc_store_lbuf_free(mc_store_h s, const mc_alloc_block_t *block);

/* Lease a block of the mapping (thread-safe; works after close). */
mc_status_t mc_store_lbuf_map_alloc(mc_store_lbuf_map_t *m, uint64_t size, void **ptr_p,
                                    mc_alloc_block_t *block_p);
void mc_store_lbuf_map_free(mc_store_lbuf_map_t *m, const mc_alloc_block_t *block);
void mc_store_lbuf_map_ref(mc_store_lbuf_map_t *m);
/* Drop a reference; the last one unmaps the memory. */
void mc_store_lbuf_map_unref(mc_store_lbuf_map_t *m);

/* ---- per-setup state ------------------------------------------------------ */

typedef struct mc_store_region {
    uintptr_t base;
    size_t len;
    int device; /* CUDA device memory: staged, never given to the engine */
} mc_store_region_t;

struct mc_store_rd {
    mc_store_lbuf_map_t *lbuf; /* NULL with local_buffer_size 0 */

    pthread_mutex_t reg_lock; /* user-registered regions, sorted by base */
    mc_store_region_t *regions;
    size_t nregions, cap_regions;

    pthread_mutex_t pool_lock; /* mem_pool_alloc: pointer -> block */
    mc_hmap_t pool;

    struct mc_loc_cache *loc; /* location cache, or NULL (off) */

    pthread_mutex_t sess_lock; /* sessions */
    pthread_cond_t sess_cond;  /* signalled when a put write finishes */
    mc_hmap_t gsess;           /* key -> get session entry */
    mc_hmap_t psess;           /* key -> put session entry */
};

/*
 * A lookup of @p key whose disk read may overlap the master's answer
 * (the tiers' speculate hook, docs/tiers.md §4): when the SSD tier
 * remembers @p key as disk-only with a record of at most @p cap bytes, the lookup is sent, the record is
 * read into @p buf meanwhile, and *have_p is set when the answer names
 * that record (then @p buf holds the object and needs no read).  Returns 0
 * (nothing done, nothing written) without such a hint; else 1 with the
 * lookup's status in *st_p and, on MC_OK, its query in *query_p (from the
 * location cache when it has one).  @p buf may be written even when the
 * lookup fails or *have_p stays 0.  `life` held for reading.
 */
int mc_store_query_spec(mc_store_h s, const char *key, void *buf, size_t cap,
                        mc_store_query_h *query_p, int *have_p, mc_status_t *st_p);

mc_status_t mc_store_rd_create(mc_store_h s);
/* Give the pool blocks back, unregister user regions, free the state
 * (close releases the sessions first: ../sessions/sessions.h). */
void mc_store_rd_destroy(mc_store_h s);

/* zerocopy.c: 1 when [p, p+len) lies inside one buffer registered with
 * mc_store_register_buffer() or inside the local buffer, else 0.  Every
 * zero-copy entry point checks its buffers with this before any I/O. */
int mc_store_mem_is_usable(mc_store_h s, const void *p, size_t len);

/* zerocopy.c: registered regions */
void mc_store_regions_release(mc_store_h s);
/* buffer.c: mem pool */
void mc_store_pool_release(mc_store_h s);

#endif /* MC_STORE_READ_H */

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Size-class pool for millions of small records of a few sizes (the
 * master's objects, whose keys are inline).  A record carries no header:
 * sizes are rounded up to 8 bytes, each class carves its records from
 * 64 KiB chunks and reuses freed ones through a free list linked through
 * their first word, so the caller passes the size again to mc_slab_free().
 * Chunks are cut from 2 MiB huge-page blocks (mc_huge_zalloc: the records
 * are read at random, and so miss the TLB far less), or malloc()ed when
 * no block can be had, and go back only at mc_slab_cleanup(); sizes above
 * MC_SLAB_MAX go to malloc().  Built with AddressSanitizer, every call is plain
 * malloc()/free(), so a use after free stays visible.  Not thread-safe.
 *
 * mc_slab_prefault_start() gives a slab a thread of its own that keeps the
 * next block mapped and its pages faulted in (MADV_POPULATE_WRITE) before
 * the slab needs it, so the thread that allocates records never waits on
 * the page faults of a fresh block.  A 2 MiB block's faults cost the
 * master's event loop 5-7 ms each on a VM whose host takes back the
 * guest's free pages: 35 ms of the 120 ms that 100 000 batched puts took
 * (bench/README.md, the HA section's fifteenth round).  The
 * thread only maps, faults and hands over whole blocks through one atomic
 * slot; the slab itself stays single-threaded.
 */
#ifndef MC_COMMON_SLAB_H
#define MC_COMMON_SLAB_H

#include <stddef.h>

/* 1 when every call is plain malloc()/free() (AddressSanitizer builds). */
#if defined(__SANITIZE_ADDRESS__)
#define MC_SLAB_PLAIN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MC_SLAB_PLAIN_MALLOC 1
#endif
#endif
#ifndef MC_SLAB_PLAIN_MALLOC
#define MC_SLAB_PLAIN_MALLOC 0
#endif

#define MC_SLAB_MAX 512u
#define MC_SLAB_CLASSES (MC_SLAB_MAX / 8u)

typedef struct mc_slab_chunk mc_slab_chunk_t;
typedef struct mc_slab_spare mc_slab_spare_t;

typedef struct mc_slab {
    void *free[MC_SLAB_CLASSES];     /* freed records of each class */
    char *bump[MC_SLAB_CLASSES];     /* the class's next fresh record */
    char *bump_end[MC_SLAB_CLASSES];
    mc_slab_chunk_t *chunks;         /* every chunk, newest first, for cleanup */
    size_t chunk_bytes;              /* held in chunks */
    char *block_next;                /* the current block's next chunk */
    size_t block_left;               /* bytes after it in that block */
    mc_slab_spare_t *spare;          /* mc_slab_prefault_start()'s thread, or NULL */
} mc_slab_t;

void mc_slab_init(mc_slab_t *s);
/* Frees every chunk: records still allocated from them go too. */
void mc_slab_cleanup(mc_slab_t *s);
/* NULL on OOM; the record is not zeroed. */
void *mc_slab_alloc(mc_slab_t *s, size_t size);
/* @p size as given to mc_slab_alloc(); NULL is ignored. */
void mc_slab_free(mc_slab_t *s, void *p, size_t size);

/* The name of that thread (top -H, /proc/<pid>/task/<tid>/comm). */
#define MC_SLAB_THREAD_NAME "mc-slab-fault"

/* Start the thread that keeps one block ready, faulted in (see above).
 * 0, or -1 when it cannot start (the slab then maps its blocks itself, as
 * without it).  A no-op returning 0 in the plain-malloc builds.  The thread
 * stops at mc_slab_cleanup(), which also unmaps the block it held. */
int mc_slab_prefault_start(mc_slab_t *s);
/* Blocks the slab took ready from that thread (for tests and stats). */
size_t mc_slab_prefaulted_blocks(const mc_slab_t *s);
/* Wait at most @p timeout_ms for the thread's block to be ready: 1 when it
 * is, 0 when not (or no thread). */
int mc_slab_prefault_wait(mc_slab_t *s, int timeout_ms);

#endif /* MC_COMMON_SLAB_H */

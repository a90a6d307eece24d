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

typedef struct mc_slab {
    void *free[MC_SLAB_CLASSES];     /* freed records of each class */
    char *bump[MC_SLAB_CLASSES];     /* the class's next fresh record */
    char *bump_end[MC_SLAB_CLASSES];
    mc_slab_chunk_t *chunks;         /* every chunk, newest first, for cleanup */
    size_t chunk_bytes;              /* held in chunks */
    char *block_next;                /* the current block's next chunk */
    size_t block_left;               /* bytes after it in that block */
} mc_slab_t;

void mc_slab_init(mc_slab_t *s);
/* Frees every chunk: records still allocated from them go too. */
void mc_slab_cleanup(mc_slab_t *s);
/* NULL on OOM; the record is not zeroed. */
void *mc_slab_alloc(mc_slab_t *s, size_t size);
/* @p size as given to mc_slab_alloc(); NULL is ignored. */
void mc_slab_free(mc_slab_t *s, void *p, size_t size);

#endif /* MC_COMMON_SLAB_H */

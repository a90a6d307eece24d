/* SPDX-License-Identifier: Apache-2.0 */
/* Size-class pool (see slab.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/slab.h"
#include "common/util.h"

#define CHUNK_BYTES (64u * 1024u) /* a chunk, its header included */

/* Where a chunk came from (mc_slab_chunk_t.kind). */
enum { CHUNK_MALLOC, CHUNK_BLOCK_FIRST, CHUNK_BLOCK };

struct mc_slab_chunk {
    mc_slab_chunk_t *next;
    size_t kind; /* also keeps the records 16-byte aligned */
    char mem[];
};

void mc_slab_init(mc_slab_t *s)
{
    memset(s, 0, sizeof(*s));
}

void mc_slab_cleanup(mc_slab_t *s)
{
    mc_slab_chunk_t *c = s->chunks;
    /* newest first: a block's first chunk comes after every other chunk
     * cut from that block, so the block goes only once they are past */
    while (c != NULL) {
        mc_slab_chunk_t *next = c->next;
        if (c->kind == CHUNK_MALLOC)
            free(c);
        else if (c->kind == CHUNK_BLOCK_FIRST)
            mc_huge_free(c, MC_HUGE_BLOCK);
        c = next;
    }
    memset(s, 0, sizeof(*s));
}

#if !MC_SLAB_PLAIN_MALLOC
/* A fresh chunk of CHUNK_BYTES, on s->chunks; NULL on OOM. */
static mc_slab_chunk_t *chunk_new(mc_slab_t *s)
{
    mc_slab_chunk_t *ch;

    if (s->block_left < CHUNK_BYTES) {
        char *b = mc_huge_zalloc(MC_HUGE_BLOCK);
        if (b != NULL) {
            s->block_next = b;
            s->block_left = MC_HUGE_BLOCK;
        }
    }
    if (s->block_left >= CHUNK_BYTES) {
        ch       = (mc_slab_chunk_t *)(void *)s->block_next;
        ch->kind = (s->block_left == MC_HUGE_BLOCK) ? CHUNK_BLOCK_FIRST : CHUNK_BLOCK;
        s->block_next += CHUNK_BYTES;
        s->block_left -= CHUNK_BYTES;
    } else {
        ch = malloc(CHUNK_BYTES);
        if (ch == NULL)
            return NULL;
        ch->kind = CHUNK_MALLOC;
    }
    ch->next  = s->chunks;
    s->chunks = ch;
    s->chunk_bytes += CHUNK_BYTES;
    return ch;
}
#endif

#if !MC_SLAB_PLAIN_MALLOC
static size_t slab_class(size_t size)
{
    return (size == 0) ? 0 : (size - 1) / 8u;
}
#endif

void *mc_slab_alloc(mc_slab_t *s, size_t size)
{
#if MC_SLAB_PLAIN_MALLOC
    (void)s;
    return malloc(size ? size : 1);
#else
    size_t c, rsize;
    void *p;

    if (size > MC_SLAB_MAX)
        return malloc(size);
    c = slab_class(size);
    p = s->free[c];
    if (p != NULL) {
        memcpy(&s->free[c], p, sizeof(void *));
        return p;
    }
    rsize = (c + 1u) * 8u;
    if ((size_t)(s->bump_end[c] - s->bump[c]) < rsize) {
        mc_slab_chunk_t *ch = chunk_new(s);
        if (ch == NULL)
            return NULL;
        s->bump[c]     = ch->mem;
        s->bump_end[c] = (char *)ch + CHUNK_BYTES;
    }
    p = s->bump[c];
    s->bump[c] += rsize;
    return p;
#endif
}

void mc_slab_free(mc_slab_t *s, void *p, size_t size)
{
#if MC_SLAB_PLAIN_MALLOC
    (void)s;
    (void)size;
    free(p);
#else
    size_t c;

    if (p == NULL)
        return;
    if (size > MC_SLAB_MAX) {
        free(p);
        return;
    }
    c = slab_class(size);
    memcpy(p, &s->free[c], sizeof(void *));
    s->free[c] = p;
#endif
}

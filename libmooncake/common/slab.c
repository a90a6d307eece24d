/* SPDX-License-Identifier: Apache-2.0 */
/* Size-class pool (see slab.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/slab.h"

#define CHUNK_BYTES (64u * 1024u)

struct mc_slab_chunk {
    mc_slab_chunk_t *next;
    size_t pad; /* keeps the records 16-byte aligned */
    char mem[];
};

void mc_slab_init(mc_slab_t *s)
{
    memset(s, 0, sizeof(*s));
}

void mc_slab_cleanup(mc_slab_t *s)
{
    mc_slab_chunk_t *c = s->chunks;
    while (c != NULL) {
        mc_slab_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    memset(s, 0, sizeof(*s));
}

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
        mc_slab_chunk_t *ch = malloc(sizeof(*ch) + CHUNK_BYTES);
        if (ch == NULL)
            return NULL;
        ch->next       = s->chunks;
        s->chunks      = ch;
        s->chunk_bytes += CHUNK_BYTES;
        s->bump[c]     = ch->mem;
        s->bump_end[c] = ch->mem + CHUNK_BYTES;
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

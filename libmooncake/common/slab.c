/* SPDX-License-Identifier: Apache-2.0 */
/* Size-class pool (see slab.h). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* The thread of mc_slab_prefault_start() and the block it hands over. */
struct mc_slab_spare {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* the slot emptied, a stop; the slot filled */
    _Atomic(char *) ready;   /* a block mapped and faulted in, or NULL */
    int stopping;            /* under mu */
    size_t taken;            /* blocks the slab took from the slot (its thread) */
};

void mc_slab_init(mc_slab_t *s)
{
    memset(s, 0, sizeof(*s));
}

#if !MC_SLAB_PLAIN_MALLOC
/* Fault every page of the fresh block @p b in now.  MADV_POPULATE_WRITE
 * does it in one call; before Linux 5.14 (EINVAL) a zero is written to
 * each page, which the block holds already. */
static void block_fault_in(char *b)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = (pg > 0) ? (size_t)pg : 4096u;

    if (mc_populate(b, MC_HUGE_BLOCK, 1) == 0)
        return;
    for (size_t off = 0; off < MC_HUGE_BLOCK; off += page)
        ((volatile char *)b)[off] = 0;
}

static void *spare_main(void *arg)
{
    mc_slab_spare_t *sp = arg;

    pthread_mutex_lock(&sp->mu);
    for (;;) {
        char *b;

        while (!sp->stopping && (atomic_load(&sp->ready) != NULL))
            pthread_cond_wait(&sp->cv, &sp->mu);
        if (sp->stopping)
            break;
        pthread_mutex_unlock(&sp->mu);
        b = mc_huge_zalloc(MC_HUGE_BLOCK);
        if (b != NULL)
            block_fault_in(b);
        pthread_mutex_lock(&sp->mu);
        if (b == NULL) {  /* no memory now: the slab maps its own; try again later */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            mc_timespec_add_ms(&ts, 100);
            if (!sp->stopping)
                (void)pthread_cond_timedwait(&sp->cv, &sp->mu, &ts);
            continue;
        }
        atomic_store(&sp->ready, b);
        pthread_cond_broadcast(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}
#endif

int mc_slab_prefault_start(mc_slab_t *s)
{
#if MC_SLAB_PLAIN_MALLOC
    (void)s;
    return 0;
#else
    mc_slab_spare_t *sp;

    if (s->spare != NULL)
        return 0;
    if ((sp = calloc(1, sizeof(*sp))) == NULL)
        return -1;
    atomic_init(&sp->ready, NULL);
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv, NULL);
    if (pthread_create(&sp->thread, NULL, spare_main, sp) != 0) {
        pthread_cond_destroy(&sp->cv);
        pthread_mutex_destroy(&sp->mu);
        free(sp);
        return -1;
    }
    (void)pthread_setname_np(sp->thread, MC_SLAB_THREAD_NAME);
    s->spare = sp;
    return 0;
#endif
}

size_t mc_slab_prefaulted_blocks(const mc_slab_t *s)
{
    return (s->spare != NULL) ? s->spare->taken : 0;
}

int mc_slab_prefault_wait(mc_slab_t *s, int timeout_ms)
{
    mc_slab_spare_t *sp = s->spare;
    struct timespec ts;
    int ready;

    if (sp == NULL)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    mc_timespec_add_ms(&ts, (timeout_ms > 0) ? (uint64_t)timeout_ms : 0);
    pthread_mutex_lock(&sp->mu);
    while ((atomic_load(&sp->ready) == NULL) &&
           (pthread_cond_timedwait(&sp->cv, &sp->mu, &ts) != ETIMEDOUT)) {
    }
    ready = atomic_load(&sp->ready) != NULL;
    pthread_mutex_unlock(&sp->mu);
    return ready;
}

/* Stop the thread and unmap the block it held. */
static void spare_stop(mc_slab_spare_t *sp)
{
    char *b;

    pthread_mutex_lock(&sp->mu);
    sp->stopping = 1;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    (void)pthread_join(sp->thread, NULL);
    b = atomic_exchange(&sp->ready, NULL);
    if (b != NULL)
        mc_huge_free(b, MC_HUGE_BLOCK);
    pthread_cond_destroy(&sp->cv);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

void mc_slab_cleanup(mc_slab_t *s)
{
    mc_slab_chunk_t *c = s->chunks;

    if (s->spare != NULL)
        spare_stop(s->spare);
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
/* The block the thread has ready, or NULL (not yet: the caller maps its
 * own); the thread is told to make the next.  A lock-free take: the slot
 * is only ever filled by the thread and emptied here. */
static char *spare_take(mc_slab_spare_t *sp)
{
    char *b = atomic_exchange(&sp->ready, NULL);

    if (b != NULL) {
        sp->taken++;
        pthread_mutex_lock(&sp->mu);
        pthread_cond_broadcast(&sp->cv);
        pthread_mutex_unlock(&sp->mu);
    }
    return b;
}

/* A fresh chunk of CHUNK_BYTES, on s->chunks; NULL on OOM. */
static mc_slab_chunk_t *chunk_new(mc_slab_t *s)
{
    mc_slab_chunk_t *ch;

    if (s->block_left < CHUNK_BYTES) {
        char *b = NULL;
        if (s->spare != NULL)
            b = spare_take(s->spare);
        if (b == NULL)
            b = mc_huge_zalloc(MC_HUGE_BLOCK);
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

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pure half of the dummy server's request handling (docs/protocol.md
 * §8): checks of a request header, the split of a request body into items,
 * keys and config, and the check of an item's range against a session's
 * region sizes (the two of HELLO and the host-memory blocks it registered).  No socket, no store, no session here, so that
 * tests/fuzz/fuzz_dummy.c can drive exactly the code dummy_server.c runs
 * on every frame a dummy sends.
 *
 * The input is hostile (another process): every count and length is checked
 * against the frame before it is used, a refused body leaves nothing
 * allocated behind.
 *
 * May call: nothing (pure: tests/fuzz/fuzz_dummy.c builds it alone). 
 * Called by: dummy_server.c.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "store/dummy/dummy.h"

int mc_dummy_hdr_check(const mc_dummy_hdr_t *h)
{
    if ((h->magic != MC_DUMMY_MAGIC) || (h->len > MC_DUMMY_MAX_FRAME) ||
        (h->count > MC_DUMMY_MAX_ITEMS) || (h->op == MC_DUMMY_OP_HELLO) || (h->op == 0) ||
        (h->op >= MC_DUMMY_OP_MAX_) ||
        ((h->flags & MC_DUMMY_F_NOREPLY) && (h->op != MC_DUMMY_OP_FREE)))
        return -1;
    return 0;
}

void mc_dummy_req_cleanup(mc_dummy_req_t *rq)
{
    if (rq == NULL)
        return;
    for (size_t i = 0; i < rq->n; i++) {
        if (rq->keys != NULL)
            free(rq->keys[i]);
        if (rq->groups != NULL)
            free(rq->groups[i]);
    }
    free(rq->keys);
    free(rq->groups);
    free(rq->preferred);
    free(rq->items);
    memset(rq, 0, sizeof(*rq));
}

/* The string of @p n bytes at @p off: bounds, no NUL, copied to *out. */
static int take_str(const uint8_t *b, size_t len, size_t *off, uint32_t n, char **out)
{
    if (n == 0)
        return 0;
    if ((n > MC_DUMMY_MAX_KEY) || (len - *off < n) || (memchr(b + *off, 0, n) != NULL))
        return -1;
    *out = strndup((const char *)b + *off, n);
    if (*out == NULL)
        return -1;
    *off += n;
    return 0;
}

int mc_dummy_req_parse(const mc_dummy_hdr_t *h, const void *body, size_t len, mc_dummy_req_t *rq)
{
    const uint8_t *b = body;
    size_t count = h->count, off = 0;
    int with_cfg = mc_dummy_op_has_cfg(h->op);

    memset(rq, 0, sizeof(*rq));
    if (count > MC_DUMMY_MAX_ITEMS)
        return -1;
    rq->items = calloc(count + 1, sizeof(*rq->items));
    rq->keys = calloc(count + 1, sizeof(*rq->keys));
    rq->groups = calloc(count + 1, sizeof(*rq->groups));
    if ((rq->items == NULL) || (rq->keys == NULL) || (rq->groups == NULL))
        goto bad;
    rq->n = count;
    for (size_t i = 0; i < count; i++) {
        mc_dummy_item_t *it = &rq->items[i];
        if (len - off < sizeof(*it))
            goto bad;
        memcpy(it, b + off, sizeof(*it));
        off += sizeof(*it);
        if ((take_str(b, len, &off, it->klen, &rq->keys[i]) != 0) ||
            ((it->glen > 0) && (!with_cfg || (it->klen == 0))) ||
            (take_str(b, len, &off, it->glen, &rq->groups[i]) != 0))
            goto bad;
    }
    if (with_cfg) {
        if (len - off < sizeof(rq->cfg))
            goto bad;
        memcpy(&rq->cfg, b + off, sizeof(rq->cfg));
        off += sizeof(rq->cfg);
        rq->has_cfg = 1;
        if (take_str(b, len, &off, rq->cfg.plen, &rq->preferred) != 0)
            goto bad;
    }
    if (off == len)
        return 0;
bad:
    mc_dummy_req_cleanup(rq);
    return -1;
}

int mc_dummy_range_check(const uint64_t *size, unsigned nregions, const mc_dummy_item_t *it)
{
    if (it->region >= nregions)
        return -1;
    uint64_t sz = size[it->region];
    if ((it->off > sz) || (it->len > sz - it->off))
        return -1;
    return 0;
}

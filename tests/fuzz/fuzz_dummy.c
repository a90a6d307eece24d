/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the dummy server's request decoding
 * (libmooncake/store/dummy/dummy_decode.c, run by dummy_server.c on every frame a
 * dummy sends; docs/protocol.md §8).  tests/fuzz/build.sh builds and runs it.
 *
 * Input: u64 size[4] (a session's region sizes: the two of HELLO and two
 * REGISTERed host-memory blocks), then a frame: a 24-byte mc_dummy_hdr_t
 * and the body.  The header goes to mc_dummy_hdr_check() as
 * it is; then, as on the socket where the server reads exactly hdr.len
 * bytes, hdr.len is set to the body's length, and an accepted header's body
 * (copied to a buffer of exactly its size, so ASan sees any overrun) goes to
 * mc_dummy_req_parse().  Each item of an accepted body goes to
 * mc_dummy_range_check() against a region table of the server's size
 * (MC_DUMMY_MAX_REGIONS slots, slot r sized like input region r % 4).
 *
 * Checked, besides "no crash, no leak": the header and body verdicts equal
 * an independent walk of the frame; an accepted body has count items within
 * MC_DUMMY_MAX_ITEMS, each copied byte for byte, every key NUL-free, of its
 * klen (at most MC_DUMMY_MAX_KEY) and equal to its bytes in the frame, a
 * group id (glen bytes) only on a keyed item of PUT, the config and its
 * preferred segment (plen bytes) only for PUT, and nothing left over; a refused one leaves the
 * request zeroed.  A range is accepted exactly when off + len <= size
 * (computed without wrap), and then the whole range of a real buffer of that
 * size can be written.  Any violation aborts.
 *
 * Built with -DMC_FUZZ_WRITE_SEEDS it is instead a program that writes one
 * valid frame per op into a corpus directory.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/dummy/dummy.h"
#include "store/dummy/wire.h"

#define FUZZ_NREGIONS 4u /* sizes in the input */
#define SIZES_LEN (sizeof(uint64_t) * FUZZ_NREGIONS)
#define REAL_REGION_MAX 16384u /* regions up to this size are also allocated and written */

#ifndef MC_FUZZ_WRITE_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_dummy: %s\n", what);
    abort();
}

/* The ops whose body ends in a config (§8), written out again. */
static int with_config(unsigned op)
{
    return op == MC_DUMMY_OP_PUT || op == MC_DUMMY_OP_PUT_SESSION_START;
}

/* The header rules of §8, written out again. */
static int expect_hdr_ok(const mc_dummy_hdr_t *h)
{
    if (h->magic != MC_DUMMY_MAGIC || h->len > MC_DUMMY_MAX_FRAME ||
        h->count > MC_DUMMY_MAX_ITEMS)
        return 0;
    if (h->op < MC_DUMMY_OP_PING || h->op > MC_DUMMY_OP_UNREGISTER)
        return 0;
    return !(h->flags & MC_DUMMY_F_NOREPLY) || h->op == MC_DUMMY_OP_FREE;
}

/* A string of n bytes at off: within the key limit and the frame, no NUL. */
static int expect_str_ok(const uint8_t *b, size_t len, size_t *off, uint32_t n)
{
    if (n > MC_DUMMY_MAX_KEY || *off + n > len)
        return 0;
    for (uint32_t k = 0; k < n; k++)
        if (b[*off + k] == 0)
            return 0;
    *off += n;
    return 1;
}

/* n bytes at *off into dst, if the frame holds them. */
static int take(const uint8_t *b, size_t len, size_t *off, void *dst, size_t n)
{
    if (*off + n > len)
        return 0;
    memcpy(dst, b + *off, n);
    *off += n;
    return 1;
}

/* The body rules of §8, written out again. */
static int expect_body_ok(const mc_dummy_hdr_t *h, const uint8_t *b, size_t len)
{
    size_t off = 0;
    int put = with_config(h->op);
    for (uint32_t i = 0; i < h->count; i++) {
        mc_dummy_item_t it;
        if (!take(b, len, &off, &it, sizeof(it)) || !expect_str_ok(b, len, &off, it.klen))
            return 0;
        /* a group id only on a keyed item of PUT */
        if (it.glen > 0 && (!put || it.klen == 0))
            return 0;
        if (!expect_str_ok(b, len, &off, it.glen))
            return 0;
    }
    if (put) {
        mc_dummy_cfg_t cfg;
        if (!take(b, len, &off, &cfg, sizeof(cfg)) || !expect_str_ok(b, len, &off, cfg.plen))
            return 0;
    }
    return off == len;
}

/* rq's copy @p s of the frame's n bytes at *off (NULL when n is 0). */
static void check_str(const char *s, const uint8_t *b, size_t *off, uint32_t n, const char *what)
{
    if (n == 0) {
        if (s != NULL)
            fail(what);
        return;
    }
    if (s == NULL || strlen(s) != n || memcmp(s, b + *off, n) != 0)
        fail(what);
    *off += n;
}

static void check_accepted(const mc_dummy_hdr_t *h, const uint8_t *b, size_t len,
                           const mc_dummy_req_t *rq)
{
    static const mc_dummy_item_t zero;
    size_t off = 0;

    if (rq->n != h->count || rq->n > MC_DUMMY_MAX_ITEMS || rq->items == NULL || rq->keys == NULL ||
        rq->groups == NULL)
        fail("an accepted request has the wrong item count or no arrays");
    for (size_t i = 0; i < rq->n; i++) {
        const mc_dummy_item_t *it = &rq->items[i];
        if (off + sizeof(*it) > len || memcmp(it, b + off, sizeof(*it)) != 0)
            fail("an item is not the frame's bytes");
        off += sizeof(*it);
        if (it->klen > MC_DUMMY_MAX_KEY || off + it->klen > len ||
            it->glen > MC_DUMMY_MAX_KEY || off + it->klen + it->glen > len)
            fail("a key or group id runs past the frame or the key limit");
        check_str(rq->keys[i], b, &off, it->klen,
                  "a key is not its klen bytes of the frame (or holds a NUL)");
        check_str(rq->groups[i], b, &off, it->glen,
                  "a group id is not its glen bytes of the frame (or holds a NUL)");
        if (it->glen > 0 && (!with_config(h->op) || it->klen == 0))
            fail("a group id outside a keyed item of a config op was accepted");
    }
    if (memcmp(&rq->items[rq->n], &zero, sizeof(zero)) != 0 || rq->keys[rq->n] != NULL ||
        rq->groups[rq->n] != NULL)
        fail("the spare item after the last is not zero");
    if (rq->has_cfg != with_config(h->op))
        fail("a config is present exactly for PUT and PUT_SESSION_START");
    if (rq->has_cfg) {
        if (off + sizeof(rq->cfg) > len || memcmp(&rq->cfg, b + off, sizeof(rq->cfg)) != 0)
            fail("the config is not the frame's bytes");
        off += sizeof(rq->cfg);
        if (rq->cfg.plen > MC_DUMMY_MAX_KEY || off + rq->cfg.plen > len)
            fail("the preferred segment runs past the frame or the key limit");
        check_str(rq->preferred, b, &off, rq->cfg.plen,
                  "the preferred segment is not its plen bytes of the frame");
    } else if (rq->preferred != NULL) {
        fail("a preferred segment without a config");
    }
    if (off != len)
        fail("an accepted body has bytes left over");
}

static void check_range(const uint64_t size[MC_DUMMY_MAX_REGIONS], const mc_dummy_item_t *it,
                        uint8_t *const real[FUZZ_NREGIONS], const uint64_t real_size[])
{
    int ok = mc_dummy_range_check(size, MC_DUMMY_MAX_REGIONS, it);
    int expect = it->region < MC_DUMMY_MAX_REGIONS &&
                 (unsigned __int128)it->off + it->len <= size[it->region];
    if ((ok == 0) != expect || (ok != 0 && ok != -1))
        fail("the range check disagrees with off + len <= size");
    /* fewer regions: one past the table is refused whatever its size */
    if (it->region >= FUZZ_NREGIONS && mc_dummy_range_check(size, FUZZ_NREGIONS, it) != -1)
        fail("a region past the table was accepted");
    /* the same item against small real regions: an accepted range is writable */
    if (mc_dummy_range_check(real_size, FUZZ_NREGIONS, it) == 0 && it->len > 0)
        memset(real[it->region] + it->off, 0xa5, (size_t)it->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t in[FUZZ_NREGIONS], sizes[MC_DUMMY_MAX_REGIONS], real_size[FUZZ_NREGIONS];
    uint8_t *real[FUZZ_NREGIONS] = {NULL, NULL, NULL, NULL};
    mc_dummy_hdr_t h;
    mc_dummy_req_t rq;
    uint8_t *body;
    size_t len;
    int ok;

    if (size < SIZES_LEN + sizeof(h))
        return 0;
    memcpy(in, data, SIZES_LEN);
    for (unsigned r = 0; r < MC_DUMMY_MAX_REGIONS; r++)
        sizes[r] = in[r % FUZZ_NREGIONS];
    memcpy(&h, data + SIZES_LEN, sizeof(h));
    len = size - SIZES_LEN - sizeof(h);

    ok = mc_dummy_hdr_check(&h);
    if ((ok == 0) != expect_hdr_ok(&h) || (ok != 0 && ok != -1))
        fail("the header check disagrees with the rules");
    h.len = (uint32_t)len; /* the server reads exactly hdr.len bytes */
    if (mc_dummy_hdr_check(&h) != 0)
        return 0;

    body = malloc(len ? len : 1); /* exactly the body: ASan sees any overrun */
    if (body == NULL)
        return 0;
    memcpy(body, data + SIZES_LEN + sizeof(h), len);
    memset(&rq, 0x5a, sizeof(rq)); /* parse must not rely on a zeroed request */
    ok = mc_dummy_req_parse(&h, body, len, &rq);
    if ((ok == 0) != expect_body_ok(&h, body, len) || (ok != 0 && ok != -1))
        fail("the body verdict disagrees with the rules");
    if (ok != 0) {
        static const mc_dummy_req_t zero;
        if (memcmp(&rq, &zero, sizeof(rq)) != 0)
            fail("a refused request is not left zeroed");
        free(body);
        return 0;
    }
    check_accepted(&h, body, len, &rq);

    for (unsigned r = 0; r < FUZZ_NREGIONS; r++) {
        real_size[r] = in[r] % (REAL_REGION_MAX + 1);
        real[r] = malloc(real_size[r] ? real_size[r] : 1);
        if (real[r] == NULL)
            real_size[r] = 0;
    }
    for (size_t i = 0; i < rq.n; i++)
        check_range(sizes, &rq.items[i], real, real_size);
    for (unsigned r = 0; r < FUZZ_NREGIONS; r++)
        free(real[r]);

    mc_dummy_req_cleanup(&rq);
    mc_dummy_req_cleanup(&rq); /* cleanup of a cleaned request is harmless */
    free(body);
    return 0;
}

#else /* MC_FUZZ_WRITE_SEEDS */

typedef struct seed {
    uint8_t b[4096];
    size_t n;
} seed_t;

static void put(seed_t *s, const void *p, size_t n)
{
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

static void begin(seed_t *s, unsigned op, unsigned flags, uint32_t count)
{
    uint64_t sizes[FUZZ_NREGIONS] = {1u << 20, 8192, 4u << 20, 65536};
    mc_dummy_hdr_t h = {.magic = MC_DUMMY_MAGIC, .op = (uint16_t)op, .flags = (uint16_t)flags,
                        .count = count};
    s->n = 0;
    put(s, sizes, sizeof(sizes));
    put(s, &h, sizeof(h));
}

static void item_g(seed_t *s, const char *key, const char *group, unsigned region, uint64_t off,
                   uint64_t len, uint32_t handle, unsigned flags)
{
    mc_dummy_item_t it = {.off = off, .len = len, .handle = handle, .region = (uint16_t)region,
                          .flags = (uint8_t)flags, .klen = key ? (uint32_t)strlen(key) : 0,
                          .glen = group ? (uint32_t)strlen(group) : 0};
    put(s, &it, sizeof(it));
    if (key != NULL)
        put(s, key, strlen(key));
    if (group != NULL)
        put(s, group, strlen(group));
}

static void item(seed_t *s, const char *key, unsigned region, uint64_t off, uint64_t len,
                 uint32_t handle, unsigned flags)
{
    item_g(s, key, NULL, region, off, len, handle, flags);
}

static void finish(seed_t *s, const char *dir, const char *name)
{
    mc_dummy_hdr_t h;
    char path[4096];
    FILE *f;

    memcpy(&h, s->b + SIZES_LEN, sizeof(h));
    h.len = (uint32_t)(s->n - SIZES_LEN - sizeof(h));
    memcpy(s->b + SIZES_LEN, &h, sizeof(h));
    snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    mc_dummy_cfg_t cfg = {.field_mask = 3, .replica_num = 2, .present = 1};
    seed_t s;

    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    begin(&s, MC_DUMMY_OP_PING, 0, 0);
    finish(&s, argv[1], "ping");
    begin(&s, MC_DUMMY_OP_STATS, 0, 0);
    finish(&s, argv[1], "stats");
    begin(&s, MC_DUMMY_OP_ALLOC, 0, 2);
    item(&s, NULL, MC_DUMMY_REGION_LBUF, 0, 4096, 0, 0);
    item(&s, NULL, MC_DUMMY_REGION_LBUF, 0, 64, 0, 0);
    finish(&s, argv[1], "alloc");
    begin(&s, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, 1);
    item(&s, NULL, MC_DUMMY_REGION_LBUF, 0, 0, 3, 0);
    finish(&s, argv[1], "free");
    begin(&s, MC_DUMMY_OP_PUT, 0, 3);
    item(&s, "key-1", MC_DUMMY_REGION_POOL, 0, 100, 0, MC_DUMMY_IF_MORE);
    item(&s, NULL, MC_DUMMY_REGION_POOL, 4096, 28, 0, 0);
    item(&s, "key-2", MC_DUMMY_REGION_LBUF, 64, 8128, 5, MC_DUMMY_IF_RELEASE | MC_DUMMY_IF_UPSERT);
    put(&s, &cfg, sizeof(cfg));
    finish(&s, argv[1], "put");
    begin(&s, MC_DUMMY_OP_GET, 0, 2);
    item(&s, "key-1", MC_DUMMY_REGION_POOL, 8192, 128, 0, 0);
    item(&s, "key-2", MC_DUMMY_REGION_POOL, (1u << 20) - 64, 64, 0, 0);
    finish(&s, argv[1], "get");
    begin(&s, MC_DUMMY_OP_GET_STAGED, 0, 2);
    item(&s, "key-1", 0, 0, 0, 0, 0);
    item(&s, "key-2", 0, 0, 0, 0, 0);
    finish(&s, argv[1], "get_staged");
    begin(&s, MC_DUMMY_OP_EXIST, 0, 1);
    item(&s, "key-1", 0, 0, 0, 0, 0);
    finish(&s, argv[1], "exist");
    begin(&s, MC_DUMMY_OP_SIZE, 0, 1);
    item(&s, "key-2", 0, 0, 0, 0, 0);
    finish(&s, argv[1], "size");
    for (int k = 0; k < 2; k++) { /* REMOVE, BATCH_REMOVE: the same items */
        begin(&s, k ? MC_DUMMY_OP_BATCH_REMOVE : MC_DUMMY_OP_REMOVE, 0, 2);
        item(&s, "key-1", 0, 0, 0, 0, MC_DUMMY_IF_FORCE);
        item(&s, "key-2", 0, 0, 0, 0, 0);
        finish(&s, argv[1], k ? "batch_remove" : "remove");
    }
    {   /* a PUT with group ids and a preferred segment */
        mc_dummy_cfg_t gcfg = {.field_mask = 2, .replica_num = 1, .present = 1,
                               .plen = (uint32_t)strlen("10.0.0.1:12345")};
        begin(&s, MC_DUMMY_OP_PUT, 0, 2);
        item_g(&s, "key-1", "group-a", MC_DUMMY_REGION_POOL, 0, 100, 0, 0);
        item_g(&s, "key-2", "group-b", MC_DUMMY_REGION_POOL, 128, 100, 0, 0);
        put(&s, &gcfg, sizeof(gcfg));
        put(&s, "10.0.0.1:12345", gcfg.plen);
        finish(&s, argv[1], "put_groups");
    }
    begin(&s, MC_DUMMY_OP_REMOVE_REGEX, 0, 1);
    item(&s, "^key-", 0, 0, 0, 0, MC_DUMMY_IF_ARG | MC_DUMMY_IF_FORCE);
    finish(&s, argv[1], "remove_regex");
    begin(&s, MC_DUMMY_OP_REMOVE_ALL, 0, 1);
    item(&s, NULL, 0, 0, 0, 0, MC_DUMMY_IF_FORCE);
    finish(&s, argv[1], "remove_all");
    begin(&s, MC_DUMMY_OP_REPLICA_CLEAR, 0, 2);
    item(&s, "key-1", 0, 0, 0, 0, 0);
    item(&s, "10.0.0.1:12345", 0, 0, 0, 0, MC_DUMMY_IF_ARG);
    finish(&s, argv[1], "replica_clear");
    begin(&s, MC_DUMMY_OP_REPLICAS, 0, 1);
    item(&s, "key-1", 0, 0, 0, 0, 0);
    finish(&s, argv[1], "replicas");
    for (int k = 0; k < 2; k++) { /* COPY_TASK (two targets), MOVE_TASK (source, target) */
        begin(&s, k ? MC_DUMMY_OP_MOVE_TASK : MC_DUMMY_OP_COPY_TASK, 0, 3);
        item(&s, "key-1", 0, 0, 0, 0, 0);
        item(&s, "10.0.0.1:12345", 0, 0, 0, 0, MC_DUMMY_IF_ARG);
        item(&s, "10.0.0.2:12345", 0, 0, 0, 0, MC_DUMMY_IF_ARG);
        finish(&s, argv[1], k ? "move_task" : "copy_task");
    }
    begin(&s, MC_DUMMY_OP_QUERY_TASK, 0, 1);
    item(&s, "0b9d6f7e-0d6f-4c1e-9d8a-2f1b3c4d5e6f", 0, 0, 0, 0, MC_DUMMY_IF_ARG);
    finish(&s, argv[1], "query_task");
    for (int k = 0; k < 2; k++) { /* MOUNT (with a fd on the socket), ALLOC_MOUNT */
        begin(&s, k ? MC_DUMMY_OP_ALLOC_MOUNT : MC_DUMMY_OP_MOUNT, 0, 2);
        item(&s, "tcp", 0, 0, 16u << 20, 0, MC_DUMMY_IF_ARG);
        item(&s, NULL, 0, 0, 0, 0, MC_DUMMY_IF_ARG);
        finish(&s, argv[1], k ? "alloc_mount" : "mount");
    }
    {   /* sessions: starts (the put one with a config), ranged I/O, ends */
        mc_dummy_cfg_t scfg = {.replica_num = 1, .present = 1};
        begin(&s, MC_DUMMY_OP_PUT_SESSION_START, 0, 1);
        item(&s, "key-1", 0, 0, 8192, 0, 0);
        put(&s, &scfg, sizeof(scfg));
        finish(&s, argv[1], "put_session_start");
    }
    for (int k = 0; k < 2; k++) { /* a key, then (buffer, offset) pairs */
        begin(&s, k ? MC_DUMMY_OP_PUT_SESSION_WRITE : MC_DUMMY_OP_GET_SESSION_READ, 0, 5);
        item(&s, "key-1", 0, 0, 0, 0, MC_DUMMY_IF_MORE);
        item(&s, NULL, MC_DUMMY_REGION_POOL, 0, 4096, 0, MC_DUMMY_IF_MORE);
        item(&s, NULL, 0, 4096, 0, 0, MC_DUMMY_IF_MORE);
        item(&s, NULL, MC_DUMMY_REGION_POOL, 8192, 4096, 0, MC_DUMMY_IF_MORE);
        item(&s, NULL, 0, 0, 0, 0, 0);
        finish(&s, argv[1], k ? "put_session_write" : "get_session_read");
    }
    {
        static const unsigned ops[] = {MC_DUMMY_OP_GET_SESSION_START, MC_DUMMY_OP_GET_SESSION_END,
                                       MC_DUMMY_OP_PUT_SESSION_END,
                                       MC_DUMMY_OP_PUT_SESSION_REVOKE};
        static const char *const names[] = {"get_session_start", "get_session_end",
                                            "put_session_end", "put_session_revoke"};
        for (int k = 0; k < 4; k++) {
            begin(&s, ops[k], 0, 2);
            item(&s, "key-1", 0, 0, 0, 0, 0);
            item(&s, "key-2", 0, 0, 0, 0, 0);
            finish(&s, argv[1], names[k]);
        }
    }
    /* host memory: REGISTER (the memfd rides on the socket), a PUT and a
     * GET on the registered region, UNREGISTER */
    begin(&s, MC_DUMMY_OP_REGISTER, 0, 1);
    item(&s, NULL, 0, 0, 4u << 20, 0, 0);
    finish(&s, argv[1], "register");
    begin(&s, MC_DUMMY_OP_PUT, 0, 2);
    item(&s, "page-1", MC_DUMMY_NREGIONS, 0, 65536, 0, 0);
    item(&s, "page-2", MC_DUMMY_NREGIONS + 1, 0, 65536, 0, 0);
    put(&s, &cfg, sizeof(cfg));
    finish(&s, argv[1], "put_registered");
    begin(&s, MC_DUMMY_OP_GET, 0, 1);
    item(&s, "page-1", MC_DUMMY_NREGIONS, 65536, 65536, 0, 0);
    finish(&s, argv[1], "get_registered");
    begin(&s, MC_DUMMY_OP_UNREGISTER, 0, 1);
    item(&s, NULL, MC_DUMMY_NREGIONS, 0, 0, 0, 0);
    finish(&s, argv[1], "unregister");
    begin(&s, MC_DUMMY_OP_UNMOUNT, 0, 1);
    item(&s, "0b9d6f7e-0d6f-4c1e-9d8a-2f1b3c4d5e6f", 0, 30, 0, 0,
         MC_DUMMY_IF_ARG | MC_DUMMY_IF_RELEASE);
    finish(&s, argv[1], "unmount");
    return 0;
}

#endif /* MC_FUZZ_WRITE_SEEDS */

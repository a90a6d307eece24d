/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A dummy's data calls (docs/protocol.md §8): writes (PUT of staged or
 * shared-memory bytes, one frame per batch), reads (GET into the shared
 * memory, or staged), the key calls (exist, get_size, remove) and the
 * whole copies behind a dummy's queries, get_buffer and ranged reads
 * (GET_STAGED).  Each mc_dummy_ function returns 0 and touches nothing
 * when the handle is not a dummy (dummy_ops.c then hands the call to the
 * embedded backend).
 *
 * May call: dummy_client.h (the connection, this folder), the store's
 * checks (../store_internal.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "store/dummy/dummy.h"
#include "store/dummy/dummy_client.h"
#include "store/dummy/wire.h"
#include "store/store_internal.h"

/* ---- writes ----------------------------------------------------------------- */

static mc_status_t dummy_write(mc_dummy_t *d, const char *key, const mc_iov_t *parts, size_t n,
                               const mc_replicate_config_t *cfg, int upsert, int zero_copy)
{
    mc_dummy_item_t *items = NULL, one;
    const char **keys = NULL;
    mc_dummy_result_t *res = NULL, r1;
    put_cfg_t wcfg;
    const char *group, *groups1[1];
    const char **igroups = NULL;
    uint32_t klen = mc_dummy_key_len(key);
    uint64_t total = 0;
    int in_shm = 1;
    mc_status_t st;

    if (klen == UINT32_MAX)
        return MC_INVALID_PARAMS;
    if ((st = mc_dummy_cfg_check(cfg, 1)) != MC_OK)
        return st;
    group = groups1[0] = mc_dummy_cfg_group(cfg, 0);
    if ((parts == NULL) && (n > 0)) {
        mc_set_error_detail("parts is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t reg;
        uint64_t off;
        if ((parts[i].base == NULL) && (parts[i].len > 0)) {
            mc_set_error_detail("a buffer is NULL");
            return MC_INVALID_PARAMS;
        }
        total += parts[i].len;
        if ((parts[i].len > 0) && !mc_dummy_locate(d, parts[i].base, parts[i].len, &reg, &off))
            in_shm = 0;
    }
    if (total == 0)
        return MC_OK; /* as the real client: an empty value stores nothing */
    mc_dummy_cfg_to_wire(cfg, &wcfg);
    if (in_shm) {
        items = calloc(n, sizeof(*items));
        keys = calloc(n, sizeof(*keys));
        res = calloc(n, sizeof(*res));
        igroups = calloc(n, sizeof(*igroups));
        if ((items == NULL) || (keys == NULL) || (res == NULL) || (igroups == NULL)) {
            st = MC_INTERNAL_ERROR;
            goto out;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (parts[i].len == 0)
                continue;
            mc_dummy_locate(d, parts[i].base, parts[i].len, &items[m].region, &items[m].off);
            items[m].len = parts[i].len;
            items[m].flags = (uint8_t)((upsert ? MC_DUMMY_IF_UPSERT : 0) | MC_DUMMY_IF_MORE);
            if (m == 0) {
                items[m].klen = klen;
                keys[m] = key;
                igroups[m] = group;
            }
            m++;
        }
        items[m - 1].flags &= (uint8_t)~MC_DUMMY_IF_MORE;
        wcfg.igroups = igroups;
        st = mc_dummy_call(d, MC_DUMMY_OP_PUT, 0, items, keys, m, &wcfg, res, m);
        if (st == MC_OK)
            st = (mc_status_t)res[0].result;
        goto out;
    }
    if (zero_copy) {
        mc_set_error_detail("a dummy client's zero-copy buffers must lie in its shared memory "
                            "(alloc_from_mem_pool or the local buffer)");
        return MC_INVALID_PARAMS;
    }
    /* stage: a block of the local buffer from the real client's allocator */
    memset(&one, 0, sizeof(one));
    one.region = MC_DUMMY_REGION_LBUF;
    one.len = total;
    st = mc_dummy_call(d, MC_DUMMY_OP_ALLOC, 0, &one, NULL, 1, NULL, &r1, 1);
    if (st == MC_OK)
        st = (r1.result < 0) ? (mc_status_t)r1.result : MC_OK;
    if (st != MC_OK) {
        if (st == MC_NO_AVAILABLE_HANDLE)
            mc_set_error_detail("the dummy's local buffer (%llu bytes) has no room for %llu",
                                (unsigned long long)d->size[MC_DUMMY_REGION_LBUF],
                                (unsigned long long)total);
        return st;
    }
    {
        uint8_t *dst = d->base[MC_DUMMY_REGION_LBUF] + r1.off;
        for (size_t i = 0; i < n; i++) {
            if (parts[i].len > 0)
                memcpy(dst, parts[i].base, parts[i].len);
            dst += parts[i].len;
        }
    }
    one.off = r1.off;
    one.handle = r1.handle;
    one.klen = klen;
    one.flags = (uint8_t)((upsert ? MC_DUMMY_IF_UPSERT : 0) | MC_DUMMY_IF_RELEASE);
    wcfg.igroups = groups1;
    st = mc_dummy_call(d, MC_DUMMY_OP_PUT, 0, &one, &key, 1, &wcfg, &r1, 1);
    if (st == MC_OK)
        st = (mc_status_t)r1.result;
out:
    free(igroups);
    free(items);
    free(keys);
    free(res);
    return st;
}

int mc_dummy_write(mc_store_h s, const char *key, const mc_iov_t *parts, size_t n,
                   const mc_replicate_config_t *cfg, int upsert, int zero_copy, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    if (d == NULL)
        return 0;
    *st_p = dummy_write(d, key, parts, n, cfg, upsert, zero_copy);
    mc_dummy_leave(s);
    return 1;
}

#define WRITE_BATCH 1024u

/* How each key of a batch write travels. */
enum { BW_DONE = 0, BW_DIRECT, BW_STAGED, BW_SENDING };

/*
 * Keys[0..n) (n <= WRITE_BATCH) in rounds: the staged keys ask for staging
 * blocks in one ALLOC frame, get their bytes copied in, and go with the
 * direct keys (every part inside the shared memory) in one PUT frame whose
 * staged items carry RELEASE.  A key refused a block for room is asked for
 * again in the next round, after that PUT freed the blocks; a round that
 * writes nothing fails the rest with MC_NO_AVAILABLE_HANDLE.
 */
static void batch_write_some(mc_dummy_t *d, const char *const *keys, const mc_iov_t *const *bufs,
                             const size_t *counts, size_t n, const put_cfg_t *wcfg,
                             const char *const *gids,
                             int upsert, int zero_copy, mc_status_t *statuses)
{
    size_t nitems = 0;
    unsigned char *how = calloc(n + 1, 1);
    uint64_t *total = calloc(n + 1, sizeof(*total));
    mc_dummy_result_t *blk = calloc(n + 1, sizeof(*blk));
    size_t *first = calloc(n + 1, sizeof(*first));
    mc_dummy_item_t *items = NULL;
    const char **ikeys = NULL;
    const char **igroups = NULL;
    put_cfg_t pc = *wcfg;
    mc_dummy_result_t *res = NULL;
    const uint8_t base_flags = (uint8_t)(upsert ? MC_DUMMY_IF_UPSERT : 0);

    for (size_t i = 0; i < n; i++)
        nitems += (counts[i] > 0) ? counts[i] : 1;
    items = calloc(nitems + 1, sizeof(*items));
    ikeys = calloc(nitems + 1, sizeof(*ikeys));
    res = calloc(nitems + 1, sizeof(*res));
    igroups = calloc(nitems + 1, sizeof(*igroups));
    if ((how == NULL) || (total == NULL) || (blk == NULL) || (first == NULL) ||
        (items == NULL) || (ikeys == NULL) || (res == NULL) || (igroups == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        int in_shm = 1;
        statuses[i] = MC_OK;
        if (mc_dummy_key_len(keys[i]) == UINT32_MAX) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        for (size_t j = 0; j < counts[i]; j++) {
            const mc_iov_t *v = &bufs[i][j];
            uint16_t reg;
            uint64_t off;
            if ((v->base == NULL) && (v->len > 0)) {
                mc_set_error_detail("a buffer of key %s is NULL", keys[i]);
                statuses[i] = MC_INVALID_PARAMS;
                break;
            }
            total[i] += v->len;
            if ((v->len > 0) && !mc_dummy_locate(d, v->base, v->len, &reg, &off))
                in_shm = 0;
        }
        if (statuses[i] != MC_OK)
            continue;
        if (total[i] == 0) {
            if (zero_copy) {
                mc_set_error_detail("no buffer for key %s", keys[i]);
                statuses[i] = MC_INVALID_PARAMS;
            }
            continue; /* staged: an empty value stores nothing, as put() */
        }
        if (in_shm) {
            how[i] = BW_DIRECT;
        } else if (zero_copy) {
            mc_set_error_detail("a dummy client's zero-copy buffers must lie in its shared memory");
            statuses[i] = MC_INVALID_PARAMS;
        } else if (total[i] > d->size[MC_DUMMY_REGION_LBUF]) {
            mc_set_error_detail("a value of %llu bytes (key %s) is larger than the dummy's local "
                                "buffer (%llu bytes); write it from the memory pool (put_from)",
                                (unsigned long long)total[i], keys[i],
                                (unsigned long long)d->size[MC_DUMMY_REGION_LBUF]);
            statuses[i] = MC_NO_AVAILABLE_HANDLE;
        } else {
            how[i] = BW_STAGED;
        }
    }
    for (;;) {
        size_t na = 0, m = 0, nput = 0;
        mc_status_t st;

        /* staging blocks for the staged keys still waiting */
        for (size_t i = 0; i < n; i++) {
            blk[i].result = -1;
            if (how[i] != BW_STAGED)
                continue;
            memset(&items[na], 0, sizeof(items[na]));
            items[na].region = MC_DUMMY_REGION_LBUF;
            items[na].len = total[i];
            first[na++] = i;
        }
        if (na > 0) {
            st = mc_dummy_call(d, MC_DUMMY_OP_ALLOC, 0, items, NULL, na, NULL, res, na);
            for (size_t k = 0; k < na; k++) {
                size_t i = first[k];
                if (st != MC_OK) {
                    statuses[i] = st;
                    how[i] = BW_DONE;
                } else if (res[k].result == 0) {
                    blk[i] = res[k];
                } else if (res[k].result != MC_NO_AVAILABLE_HANDLE) {
                    statuses[i] = (mc_status_t)res[k].result;
                    how[i] = BW_DONE;
                }
            }
            if (st != MC_OK) {
                for (size_t i = 0; i < n; i++)
                    if (how[i] != BW_DONE) {
                        statuses[i] = st;
                        how[i] = BW_DONE;
                    }
                break;
            }
        }
        /* one PUT: the direct keys, and the staged keys that have a block */
        for (size_t i = 0; i < n; i++) {
            size_t start = m;
            if (how[i] == BW_DIRECT) {
                for (size_t j = 0; j < counts[i]; j++) {
                    const mc_iov_t *v = &bufs[i][j];
                    if (v->len == 0)
                        continue;
                    memset(&items[m], 0, sizeof(items[m]));
                    mc_dummy_locate(d, v->base, v->len, &items[m].region, &items[m].off);
                    items[m].len = v->len;
                    items[m].flags = (uint8_t)(base_flags | MC_DUMMY_IF_MORE);
                    m++;
                }
            } else if ((how[i] == BW_STAGED) && (blk[i].result == 0)) {
                uint8_t *dst = d->base[MC_DUMMY_REGION_LBUF] + blk[i].off;
                if ((total[i] > d->size[MC_DUMMY_REGION_LBUF]) ||
                    (blk[i].off > d->size[MC_DUMMY_REGION_LBUF] - total[i])) {
                    statuses[i] = MC_INTERNAL_ERROR; /* a block outside the buffer */
                    how[i] = BW_DONE;
                    continue;
                }
                for (size_t j = 0; j < counts[i]; j++) {
                    if (bufs[i][j].len > 0)
                        memcpy(dst, bufs[i][j].base, bufs[i][j].len);
                    dst += bufs[i][j].len;
                }
                memset(&items[m], 0, sizeof(items[m]));
                items[m].region = MC_DUMMY_REGION_LBUF;
                items[m].off = blk[i].off;
                items[m].len = total[i];
                items[m].handle = blk[i].handle;
                items[m].flags = (uint8_t)(base_flags | MC_DUMMY_IF_RELEASE);
                m++;
            } else {
                continue;
            }
            items[start].klen = mc_dummy_key_len(keys[i]);
            ikeys[start] = keys[i];
            igroups[start] = (gids != NULL) ? gids[i] : NULL;
            items[m - 1].flags &= (uint8_t)~MC_DUMMY_IF_MORE;
            first[nput++] = start;
            how[i] = BW_SENDING;
        }
        if (m == 0) {
            for (size_t i = 0; i < n; i++)
                if (how[i] == BW_STAGED) {
                    mc_set_error_detail("the dummy's local buffer (%llu bytes) has no room for "
                                        "key %s (%llu bytes)",
                                        (unsigned long long)d->size[MC_DUMMY_REGION_LBUF],
                                        keys[i], (unsigned long long)total[i]);
                    statuses[i] = MC_NO_AVAILABLE_HANDLE;
                }
            break;
        }
        pc.igroups = igroups;
        st = mc_dummy_call(d, MC_DUMMY_OP_PUT, 0, items, ikeys, m, &pc, res, m);
        nput = 0;
        for (size_t i = 0; i < n; i++) {
            if (how[i] != BW_SENDING)
                continue;
            statuses[i] = (st == MC_OK) ? (mc_status_t)res[first[nput]].result : st;
            nput++;
            how[i] = BW_DONE;
        }
        if (st != MC_OK) {
            for (size_t i = 0; i < n; i++)
                if (how[i] != BW_DONE) {
                    statuses[i] = st;
                    how[i] = BW_DONE;
                }
            break;
        }
    }
out:
    free(how);
    free(total);
    free(blk);
    free(first);
    free(items);
    free(ikeys);
    free(res);
    free(igroups);
}

int mc_dummy_batch_write(mc_store_h s, const char *const *keys, const mc_iov_t *const *bufs,
                         const size_t *counts, size_t n, const mc_replicate_config_t *cfg,
                         int upsert, int zero_copy, mc_status_t *statuses, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    put_cfg_t wcfg;
    mc_status_t st;

    if (d == NULL)
        return 0;
    if (((keys == NULL) || (bufs == NULL) || (counts == NULL) || (statuses == NULL)) && (n > 0)) {
        mc_set_error_detail("keys, buffers, counts and statuses are required");
        st = MC_INVALID_PARAMS;
        goto out;
    }
    if ((st = mc_dummy_cfg_check(cfg, n)) != MC_OK) {
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
        goto out;
    }
    mc_dummy_cfg_to_wire(cfg, &wcfg);
    for (size_t at = 0; at < n; at += WRITE_BATCH) {
        size_t m = (n - at < WRITE_BATCH) ? n - at : WRITE_BATCH;
        const char *const *gids = (mc_dummy_cfg_group(cfg, 0) != NULL) ? cfg->group_ids + at : NULL;
        batch_write_some(d, keys + at, bufs + at, counts + at, m, &wcfg, gids, upsert, zero_copy,
                         statuses + at);
    }
    st = mc_store_first_error(statuses, n);
out:
    mc_dummy_leave(s);
    *st_p = st;
    return 1;
}

int mc_dummy_values_write(mc_store_h s, const char *const *keys, const mc_iov_t *values,
                          size_t n, const mc_replicate_config_t *cfg, int upsert,
                          mc_status_t *statuses, mc_status_t *st_p)
{
    const mc_iov_t **bufs;
    size_t *counts;

    if (!mc_store_is_dummy(s))
        return 0;
    if ((n > 0) && (values == NULL)) {
        mc_set_error_detail("values is NULL");
        *st_p = MC_INVALID_PARAMS;
        return 1;
    }
    bufs = calloc(n + 1, sizeof(*bufs));
    counts = calloc(n + 1, sizeof(*counts));
    if ((bufs == NULL) || (counts == NULL)) {
        free(bufs);
        free(counts);
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        *st_p = MC_INTERNAL_ERROR;
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        bufs[i] = &values[i];
        counts[i] = 1;
    }
    if (!mc_dummy_batch_write(s, keys, bufs, counts, n, cfg, upsert, 0, statuses, st_p)) {
        mc_set_error_detail("the store was closed");
        *st_p = MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    free(bufs);
    free(counts);
    return 1;
}

/* ---- reads ------------------------------------------------------------------ */

/* The object through a staging block: size to *size_p; copied to buf when
 * it fits in cap (else MC_BUFFER_OVERFLOW, buf untouched). */
static mc_status_t staged_get(mc_dummy_t *d, const char *key, void *buf, size_t cap,
                              uint64_t *size_p)
{
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    uint32_t klen = mc_dummy_key_len(key);

    if (klen == UINT32_MAX)
        return MC_INVALID_PARAMS;
    memset(&it, 0, sizeof(it));
    it.klen = klen;
    st = mc_dummy_call(d, MC_DUMMY_OP_GET_STAGED, 0, &it, &key, 1, NULL, &r, 1);
    if (st != MC_OK)
        return st;
    if (r.result < 0)
        return (mc_status_t)r.result;
    *size_p = (uint64_t)r.result;
    if (r.result == 0)
        return MC_OK;
    if ((uint64_t)r.result > cap) {
        st = MC_BUFFER_OVERFLOW;
        mc_set_error_detail("the object has %lld bytes, the buffer %zu", (long long)r.result, cap);
    } else {
        memcpy(buf, d->base[MC_DUMMY_REGION_LBUF] + r.off, (size_t)r.result);
    }
    mc_dummy_staged_free(d, r.handle);
    return st;
}

int mc_dummy_get(mc_store_h s, const char *key, void *buf, size_t cap, uint64_t *size_p,
                 mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    uint64_t size = 0;
    if (d == NULL)
        return 0;
    *st_p = staged_get(d, key, buf, cap, &size);
    if (((*st_p == MC_OK) || (*st_p == MC_BUFFER_OVERFLOW)) && (size_p != NULL))
        *size_p = size;
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_get_into(mc_store_h s, const char *key, void *buf, size_t cap, int64_t *result_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    uint32_t klen;

    if (d == NULL)
        return 0;
    klen = mc_dummy_key_len(key);
    if (klen == UINT32_MAX) {
        *result_p = MC_INVALID_PARAMS;
        goto out;
    }
    if (buf == NULL) {
        mc_set_error_detail("buffer is NULL");
        *result_p = MC_INVALID_PARAMS;
        goto out;
    }
    memset(&it, 0, sizeof(it));
    if (mc_dummy_locate(d, buf, cap, &it.region, &it.off)) {
        it.klen = klen;
        it.len = cap;
        st = mc_dummy_call(d, MC_DUMMY_OP_GET, 0, &it, &key, 1, NULL, &r, 1);
        *result_p = (st != MC_OK) ? st : r.result;
    } else {
        uint64_t size = 0;
        st = staged_get(d, key, buf, cap, &size);
        if (st == MC_BUFFER_OVERFLOW)
            st = MC_INVALID_PARAMS; /* get_into's code for a small buffer */
        *result_p = (st != MC_OK) ? st : (int64_t)size;
    }
out:
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_batch_get_into(mc_store_h s, const char *const *keys, const mc_iov_t *const *bufs,
                            const size_t *counts, size_t n, int64_t *results, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_item_t *items = NULL;
    const char **ikeys = NULL;
    mc_dummy_result_t *res = NULL;
    size_t *first = NULL, nitems = 0, m = 0;
    mc_status_t st = MC_OK;

    if (d == NULL)
        return 0;
    if (((keys == NULL) || (bufs == NULL) || (counts == NULL) || (results == NULL)) && (n > 0)) {
        mc_set_error_detail("keys, buffers, counts and results are required");
        st = MC_INVALID_PARAMS;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        nitems += (counts[i] > 0) ? counts[i] : 1;
    items = calloc(nitems + 1, sizeof(*items));
    ikeys = calloc(nitems + 1, sizeof(*ikeys));
    res = calloc(nitems + 1, sizeof(*res));
    first = calloc(n + 1, sizeof(*first));
    if ((items == NULL) || (ikeys == NULL) || (res == NULL) || (first == NULL)) {
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t klen = mc_dummy_key_len(keys[i]);
        size_t start = m;
        first[i] = SIZE_MAX;
        results[i] = 0;
        if (klen == UINT32_MAX) {
            results[i] = MC_INVALID_PARAMS;
            continue;
        }
        for (size_t j = 0; j < counts[i]; j++) {
            const mc_iov_t *v = &bufs[i][j];
            if ((v->base == NULL) ||
                !mc_dummy_locate(d, v->base, v->len, &items[m].region, &items[m].off)) {
                mc_set_error_detail("a dummy client's zero-copy buffers must lie in its "
                                    "shared memory");
                results[i] = MC_INVALID_PARAMS;
                break;
            }
            items[m].len = v->len;
            items[m].flags = MC_DUMMY_IF_MORE;
            m++;
        }
        if ((results[i] != 0) || (m == start)) {
            if (results[i] == 0)
                results[i] = MC_INVALID_PARAMS;
            m = start;
            continue;
        }
        items[start].klen = klen;
        ikeys[start] = keys[i];
        items[m - 1].flags &= (uint8_t)~MC_DUMMY_IF_MORE;
        first[i] = start;
    }
    if (m > 0) {
        st = mc_dummy_call(d, MC_DUMMY_OP_GET, 0, items, ikeys, m, NULL, res, m);
        for (size_t i = 0; i < n; i++)
            if (first[i] != SIZE_MAX)
                results[i] = (st == MC_OK) ? res[first[i]].result : st;
    }
    st = MC_OK;
    for (size_t i = 0; i < n; i++)
        if (results[i] < 0) {
            st = (mc_status_t)results[i];
            break;
        }
out:
    free(items);
    free(ikeys);
    free(res);
    free(first);
    mc_dummy_leave(s);
    *st_p = st;
    return 1;
}

/* ---- keys ------------------------------------------------------------------- */

static int64_t key_call(mc_dummy_t *d, unsigned op, const char *key, unsigned flags)
{
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    uint32_t klen = mc_dummy_key_len(key);
    if (klen == UINT32_MAX)
        return MC_INVALID_PARAMS;
    memset(&it, 0, sizeof(it));
    it.klen = klen;
    it.flags = (uint8_t)flags;
    st = mc_dummy_call(d, op, 0, &it, &key, 1, NULL, &r, 1);
    return (st != MC_OK) ? st : r.result;
}

int mc_dummy_exist(mc_store_h s, const char *key, int *result_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    if (d == NULL)
        return 0;
    *result_p = (int)key_call(d, MC_DUMMY_OP_EXIST, key, 0);
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_get_size(mc_store_h s, const char *key, uint64_t *size_p, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    int64_t r;
    if (d == NULL)
        return 0;
    r = key_call(d, MC_DUMMY_OP_SIZE, key, 0);
    mc_dummy_leave(s);
    if (r < 0) {
        *st_p = (mc_status_t)r;
    } else {
        *st_p = MC_OK;
        if (size_p != NULL)
            *size_p = (uint64_t)r;
    }
    return 1;
}

int mc_dummy_remove(mc_store_h s, const char *key, int force, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    if (d == NULL)
        return 0;
    *st_p = (mc_status_t)key_call(d, MC_DUMMY_OP_REMOVE, key, force ? MC_DUMMY_IF_FORCE : 0);
    mc_dummy_leave(s);
    return 1;
}

/* ---- fetched copies: queries, get_buffer, ranged reads ------------------------ */

#define FETCH_BATCH 1024u

/* The objects of keys[0..m) (m <= FETCH_BATCH) through staging blocks:
 * one GET_STAGED frame, a copy of each into a fresh heap block, one FREE
 * frame.  A key refused for room while other keys of the frame held the
 * staging buffer is fetched again alone (@p retry). */
static void fetch_frame(mc_dummy_t *d, const char *const *keys, size_t m, size_t header,
                        void **mems, uint64_t *sizes, mc_status_t *statuses, int retry)
{
    mc_dummy_item_t *items = calloc(m + 1, sizeof(*items));
    mc_dummy_item_t *frees = calloc(m + 1, sizeof(*frees));
    const char **ikeys = calloc(m + 1, sizeof(*ikeys));
    mc_dummy_result_t *res = calloc(m + 1, sizeof(*res));
    size_t *idx = calloc(m + 1, sizeof(*idx));
    size_t k = 0, nf = 0;
    mc_status_t st;

    if ((items == NULL) || (frees == NULL) || (ikeys == NULL) || (res == NULL) || (idx == NULL)) {
        mc_set_error_detail("out of memory for %zu reads", m);
        for (size_t i = 0; i < m; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < m; i++) {
        uint32_t klen = mc_dummy_key_len(keys[i]);
        if (klen == UINT32_MAX) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        items[k].klen = klen;
        ikeys[k] = keys[i];
        idx[k++] = i;
    }
    if (k == 0)
        goto out;
    st = mc_dummy_call(d, MC_DUMMY_OP_GET_STAGED, 0, items, ikeys, k, NULL, res, k);
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        const mc_dummy_result_t *r = &res[j];
        if (st != MC_OK) {
            statuses[i] = st;
            continue;
        }
        if (r->result < 0) {
            statuses[i] = (mc_status_t)r->result;
            continue;
        }
        if (r->result > 0) {
            frees[nf].region = MC_DUMMY_REGION_LBUF;
            frees[nf++].handle = r->handle;
            /* the server granted [off, off + size) of the staging buffer */
            if (((uint64_t)r->result > d->size[MC_DUMMY_REGION_LBUF]) ||
                (r->off > d->size[MC_DUMMY_REGION_LBUF] - (uint64_t)r->result)) {
                mc_set_error_detail("the real client named a block outside the staging buffer");
                statuses[i] = MC_INTERNAL_ERROR;
                continue;
            }
        }
        mems[i] = malloc(header + (size_t)r->result + 1);
        if (mems[i] == NULL) {
            mc_set_error_detail("out of memory for a copy of %lld bytes", (long long)r->result);
            statuses[i] = MC_INTERNAL_ERROR;
            continue;
        }
        if (r->result > 0)
            memcpy((uint8_t *)mems[i] + header, d->base[MC_DUMMY_REGION_LBUF] + r->off,
                   (size_t)r->result);
        sizes[i] = (uint64_t)r->result;
        statuses[i] = MC_OK;
    }
    if (nf > 0)
        (void)mc_dummy_call(d, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, frees, NULL, nf, NULL, NULL, 0);
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        if (statuses[i] != MC_NO_AVAILABLE_HANDLE)
            continue;
        if (retry && (k > 1))
            fetch_frame(d, &keys[i], 1, header, &mems[i], &sizes[i], &statuses[i], 0);
        else
            mc_set_error_detail("the dummy's local buffer (%llu bytes) has no room for %s; "
                                "read it with get_into into the memory pool instead",
                                (unsigned long long)d->size[MC_DUMMY_REGION_LBUF], keys[i]);
    }
out:
    free(items);
    free(frees);
    free(ikeys);
    free(res);
    free(idx);
}

static void fetch_many(mc_dummy_t *d, const char *const *keys, size_t n, size_t header,
                       void **mems, uint64_t *sizes, mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        mems[i] = NULL;
        sizes[i] = 0;
        statuses[i] = MC_OK;
    }
    for (size_t at = 0; at < n; at += FETCH_BATCH) {
        size_t m = (n - at < FETCH_BATCH) ? n - at : FETCH_BATCH;
        fetch_frame(d, keys + at, m, header, mems + at, sizes + at, statuses + at, 1);
    }
}

int mc_dummy_batch_fetch(mc_store_h s, const char *const *keys, size_t n, size_t header,
                         void ***mems_p, uint64_t **sizes_p, mc_status_t *statuses)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    void **mems;
    uint64_t *sizes;

    *mems_p  = NULL;
    *sizes_p = NULL;
    if (d == NULL)
        return 0;
    mems  = calloc(n + 1, sizeof(*mems));
    sizes = calloc(n + 1, sizeof(*sizes));
    if ((mems == NULL) || (sizes == NULL)) {
        mc_set_error_detail("out of memory for %zu objects", n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        free(mems);
        free(sizes);
    } else {
        fetch_many(d, keys, n, header, mems, sizes, statuses);
        *mems_p  = mems;
        *sizes_p = sizes;
    }
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_mem_is_registered(mc_store_h s, const void *p, size_t len, int *result_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    uint16_t reg;
    uint64_t off;
    if (d == NULL)
        return 0;
    *result_p = (p != NULL) && mc_dummy_locate(d, p, len, &reg, &off);
    mc_dummy_leave(s);
    return 1;
}

/*
 * The bytes from @p p to the end of the one shared allocation holding it -
 * an alloc_from_mem_pool block or a registered host-memory block, as
 * upstream measures in the single shm segment holding a buffer: 1 with
 * *room_p, or 0 when @p p is in no mapped allocation.
 */
static int shm_room(mc_dummy_t *d, const void *p, uint64_t *room_p)
{
    uintptr_t start;
    uint64_t len;
    int found = 0;

    if (p == NULL)
        return 0;
    if (mc_dummy_pool_block_of(d, p, &start, &len)) {
        *room_p = len - ((uintptr_t)p - start);
        return 1;
    }
    pthread_rwlock_rdlock(&d->buf_lock);
    for (unsigned i = 0; !found && (i < d->nbufs); i++) {
        const dummy_buf_t *b = &d->bufs[i];
        if (((uintptr_t)p >= (uintptr_t)b->base) &&
            ((uintptr_t)p - (uintptr_t)b->base < b->size)) {
            *room_p = b->size - ((uintptr_t)p - (uintptr_t)b->base);
            found = 1;
        }
    }
    pthread_rwlock_unlock(&d->buf_lock);
    return found;
}

int mc_dummy_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    const char **dkeys = NULL;
    size_t *owner = NULL, nd = 0;
    void **mems = NULL;
    uint64_t *sizes = NULL;
    mc_status_t *ks = NULL, st = MC_OK;

    if (d == NULL)
        return 0;
    if ((n > 0) && (ranges == NULL)) {
        mc_set_error_detail("ranges is NULL");
        st = MC_INVALID_PARAMS;
        goto done;
    }
    /* upstream's dummy places every buffer before it asks for anything: one
     * outside its mapped memory fails every range of the call */
    for (size_t i = 0; i < n; i++) {
        uint64_t room;
        if (!shm_room(d, ranges[i].buffer, &room)) {
            mc_set_error_detail("buffer %p is in none of the dummy's shared memory (an "
                                "alloc_from_mem_pool block or a registered host-memory block)",
                                ranges[i].buffer);
            st = MC_INVALID_PARAMS;
            for (size_t j = 0; j < n; j++)
                ranges[j].result = st;
            goto done;
        }
    }
    dkeys = calloc(n + 1, sizeof(*dkeys));
    owner = calloc(n + 1, sizeof(*owner));
    mems = calloc(n + 1, sizeof(*mems));
    sizes = calloc(n + 1, sizeof(*sizes));
    ks = calloc(n + 1, sizeof(*ks));
    if ((dkeys == NULL) || (owner == NULL) || (mems == NULL) || (sizes == NULL) || (ks == NULL)) {
        mc_set_error_detail("out of memory for %zu ranges", n);
        st = MC_INTERNAL_ERROR;
        for (size_t i = 0; i < n; i++)
            ranges[i].result = st;
        goto done;
    }
    /* each distinct key is fetched once (the whole object), then sliced */
    for (size_t i = 0; i < n; i++) {
        size_t k;
        ranges[i].result = mc_store_check_key(ranges[i].key, NULL);
        if (ranges[i].result != MC_OK)
            continue;
        for (k = 0; k < nd; k++)
            if (strcmp(dkeys[k], ranges[i].key) == 0)
                break;
        if (k == nd)
            dkeys[nd++] = ranges[i].key;
        owner[i] = k;
    }
    fetch_many(d, dkeys, nd, 0, mems, sizes, ks);
    for (size_t i = 0; i < n; i++) {
        mc_store_range_t *r = &ranges[i];
        size_t o = owner[i];
        uint64_t room = 0;
        if (r->result != MC_OK)
            continue;
        if (ks[o] != MC_OK) {
            r->result = ks[o];
            continue;
        }
        /* the room is that of the allocation holding the buffer, not the
         * whole pool: a neighbour's block is not this buffer's to fill */
        if (!shm_room(d, r->buffer, &room) || (r->dst_offset > room) ||
            (r->length > room - r->dst_offset)) {
            mc_set_error_detail("destination [+%llu, +%llu) of buffer %p overruns the %llu "
                                "bytes left in its shared allocation",
                                (unsigned long long)r->dst_offset,
                                (unsigned long long)r->length, r->buffer,
                                (unsigned long long)room);
            r->result = MC_INVALID_PARAMS;
            continue;
        }
        if ((r->src_offset > sizes[o]) || (r->length > sizes[o] - r->src_offset) ||
            (r->length > (uint64_t)INT64_MAX)) {
            mc_set_error_detail("source [%llu, +%llu) is outside the %llu-byte object",
                                (unsigned long long)r->src_offset, (unsigned long long)r->length,
                                (unsigned long long)sizes[o]);
            r->result = MC_INVALID_PARAMS;
            continue;
        }
        if (r->length > 0)
            memcpy((uint8_t *)r->buffer + r->dst_offset, (uint8_t *)mems[o] + r->src_offset,
                   (size_t)r->length);
        r->result = (int64_t)r->length;
    }
    for (size_t i = 0; i < n; i++)
        if (ranges[i].result < 0) {
            st = (mc_status_t)ranges[i].result;
            break;
        }
done:
    if (mems != NULL)
        for (size_t k = 0; k < nd; k++)
            free(mems[k]);
    free(dkeys);
    free(owner);
    free(mems);
    free(sizes);
    free(ks);
    mc_dummy_leave(s);
    *st_p = st;
    return 1;
}

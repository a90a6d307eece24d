/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tensor writes and reads on the public store API.
 *
 * Nothing here reaches into the store's internals: a write is one
 * mc_store_batch_{put,upsert}_parts() call for every object of the batch
 * (each object a header part followed by data parts pointing into the
 * caller's memory), a read is mc_store_get_into() or
 * mc_store_batch_get_into_multi() followed by the header decoder.  So these
 * calls behave the same for every kind of store handle, and the bytes of a
 * tensor never pass through an intermediate buffer except where a shard is
 * made of many short runs (gathered once, see DIRECT_* below).
 *
 * Tensor parallelism: a tensor written with tp_size > 1 becomes tp_size
 * objects "<key>_tp_<r>", each with a SHARD header (mc_tensor_meta_shard()).
 * A tensor's status is the first failing shard's in rank order.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/tensor.h>

#include "common/cuda.h"
#include "common/log.h"

/*
 * A shard whose runs are few, or long, is written straight from the
 * source, one transfer request per run; a shard of many short runs (a
 * split along an inner dimension of a tall tensor) is first gathered into
 * one temporary copy, since a request per run would cost more than the copy.
 */
#define DIRECT_MAX_RUNS 64
#define DIRECT_MIN_RUN_BYTES (64u * 1024u)

/* Room for "_tp_" and a rank. */
#define SHARD_SUFFIX_MAX 16

/* What one tensor of a write batch is. */
typedef struct tensor_src {
    mc_tensor_meta_t meta; /* valid when ok */
    const void *data;      /* meta.data_bytes contiguous bytes */
    const void *raw;       /* from-writes: the serialized object, stored as is when unsplit */
    uint64_t raw_len;
    int ok;                /* passed the checks; else status already set */
} tensor_src_t;

/* The objects of one batch write, built from the tensors. */
typedef struct shard_batch {
    size_t n;               /* objects */
    size_t nparts;          /* iovs in use */
    const char **keys;
    char *keymem;
    unsigned char *headers; /* n * MC_TENSOR_HEADER_SIZE */
    mc_iov_t *iovs;
    const mc_iov_t **bufs;
    size_t *counts;
    size_t *owner;          /* object -> tensor index */
    void **copies;          /* gathered shards, freed with the batch */
    size_t ncopies;
    mc_status_t *sts;
} shard_batch_t;

/* The first status that is not MC_OK, else MC_OK: what a batch returns. */
static mc_status_t first_error(const mc_status_t *sts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (sts[i] != MC_OK)
            return sts[i];
    }
    return MC_OK;
}

static void shard_batch_free(shard_batch_t *b)
{
    for (size_t i = 0; i < b->ncopies; i++)
        free(b->copies[i]);
    free(b->copies);
    free(b->keys);
    free(b->keymem);
    free(b->headers);
    free(b->iovs);
    free(b->bufs);
    free(b->counts);
    free(b->owner);
    free(b->sts);
}

static int shard_is_direct(const mc_tensor_slab_t *sl)
{
    return (sl->rows <= DIRECT_MAX_RUNS) || (sl->row_bytes >= DIRECT_MIN_RUN_BYTES);
}

/* Objects and iovs tensor @p t adds to a batch split @p tp ways; fails
 * (with a detail) when a shard cannot be described. */
static mc_status_t count_objects(const tensor_src_t *t, int32_t tp, int32_t split_dim,
                                 size_t *objs_p, size_t *parts_p, size_t *copies_p)
{
    mc_tensor_meta_t sh;
    mc_tensor_slab_t sl;
    mc_status_t st;

    if (tp <= 1) {
        *objs_p += 1;
        *parts_p += (t->raw != NULL) ? 1 : 1 + (t->meta.data_bytes > 0);
        return MC_OK;
    }
    for (int32_t r = 0; r < tp; r++) {
        st = mc_tensor_meta_shard(&t->meta, split_dim, tp, r, &sh, &sl);
        if (st != MC_OK)
            return st;
        *objs_p += 1;
        *parts_p += 1;
        if (sl.rows == 0)
            continue;
        if (shard_is_direct(&sl)) {
            *parts_p += sl.rows;
        } else {
            *parts_p += 1;
            *copies_p += 1;
        }
    }
    return MC_OK;
}

/* Append object @p j (tensor @p i, shard @p r or the whole tensor with
 * @p r < 0) with its key, header and parts. */
static mc_status_t add_object(shard_batch_t *b, size_t j, size_t i, const char *key,
                              const tensor_src_t *t, int32_t tp, int32_t split_dim, int32_t r,
                              char **keyp)
{
    mc_tensor_meta_t sh;
    mc_tensor_slab_t sl;
    unsigned char *hdr = b->headers + j * MC_TENSOR_HEADER_SIZE;
    mc_iov_t *iov      = &b->iovs[b->nparts];
    size_t np          = 0;
    size_t klen        = strlen(key);
    int w;

    b->owner[j] = i;
    b->bufs[j]  = iov;
    if (r < 0) {
        b->keys[j] = key;
        if (t->raw != NULL) {
            iov[np++] = (mc_iov_t){t->raw, (size_t)t->raw_len};
        } else {
            sh             = t->meta;
            sh.data_offset = MC_TENSOR_HEADER_SIZE;
            mc_tensor_header_encode(&sh, hdr);
            iov[np++] = (mc_iov_t){hdr, MC_TENSOR_HEADER_SIZE};
            if (sh.data_bytes > 0)
                iov[np++] = (mc_iov_t){t->data, (size_t)sh.data_bytes};
        }
    } else {
        /* counted and checked by count_objects(), so this succeeds */
        (void)mc_tensor_meta_shard(&t->meta, split_dim, tp, r, &sh, &sl);
        w = mc_tensor_shard_key(*keyp, klen + SHARD_SUFFIX_MAX, key, r);
        if (w < 0) {
            mc_set_error_detail("shard key of %s does not fit", key);
            return MC_INVALID_PARAMS;
        }
        b->keys[j] = *keyp;
        *keyp += (size_t)w + 1;
        mc_tensor_header_encode(&sh, hdr);
        iov[np++] = (mc_iov_t){hdr, MC_TENSOR_HEADER_SIZE};
        if ((sl.rows > 0) && shard_is_direct(&sl)) {
            const unsigned char *src = (const unsigned char *)t->data + sl.offset;
            for (uint64_t k = 0; k < sl.rows; k++)
                iov[np++] = (mc_iov_t){src + k * sl.stride, (size_t)sl.row_bytes};
        } else if (sl.rows > 0) {
            void *copy = malloc((size_t)sh.data_bytes);
            if (copy == NULL) {
                mc_set_error_detail("out of memory gathering a %llu-byte shard of %s",
                                    (unsigned long long)sh.data_bytes, key);
                return MC_INTERNAL_ERROR;
            }
            b->copies[b->ncopies++] = copy;
            mc_tensor_slab_gather(&sl, t->data, copy);
            iov[np++] = (mc_iov_t){copy, (size_t)sh.data_bytes};
        }
    }
    b->counts[j] = np;
    b->nparts += np;
    return MC_OK;
}

/*
 * The write every tensor put runs.  statuses[i] is set for the tensors
 * that are not ok; the others get theirs from the store.
 */
static mc_status_t write_tensors(mc_store_h store, const char *const *keys, tensor_src_t *ts,
                                 size_t n, int32_t tp, int32_t split_dim,
                                 const mc_replicate_config_t *cfg, unsigned flags,
                                 mc_status_t *statuses)
{
    shard_batch_t b;
    size_t objs = 0, parts = 0, copies = 0, keybytes = 0, j = 0;
    const char **gids = NULL;
    mc_replicate_config_t ecfg;
    char *keyp;
    mc_status_t st = MC_OK;

    memset(&b, 0, sizeof(b));
    if ((cfg != NULL) && (cfg->field_mask & MC_RC_FIELD_GROUP_IDS) &&
        (cfg->group_ids_count != n)) {
        mc_set_error_detail("%zu group ids for %zu tensors", cfg->group_ids_count, n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INVALID_PARAMS;
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        if (!ts[i].ok)
            continue;
        if (keys[i] == NULL) {
            mc_set_error_detail("key %zu is NULL", i);
            st = MC_INVALID_PARAMS;
        } else {
            st = count_objects(&ts[i], tp, split_dim, &objs, &parts, &copies);
        }
        if (st != MC_OK) {
            statuses[i] = st;
            ts[i].ok    = 0;
            continue;
        }
        if (tp > 1)
            keybytes += (size_t)tp * (strlen(keys[i]) + SHARD_SUFFIX_MAX);
    }
    if (objs == 0)
        return first_error(statuses, n);

    b.keys    = malloc(objs * sizeof(*b.keys));
    b.keymem  = malloc(keybytes + 1);
    b.headers = malloc(objs * MC_TENSOR_HEADER_SIZE);
    b.iovs    = malloc(parts * sizeof(*b.iovs));
    b.bufs    = malloc(objs * sizeof(*b.bufs));
    b.counts  = malloc(objs * sizeof(*b.counts));
    b.owner   = malloc(objs * sizeof(*b.owner));
    b.copies  = calloc(copies + 1, sizeof(*b.copies));
    b.sts     = malloc(objs * sizeof(*b.sts));
    if ((cfg != NULL) && (cfg->field_mask & MC_RC_FIELD_GROUP_IDS))
        gids = malloc(objs * sizeof(*gids));
    if (!b.keys || !b.keymem || !b.headers || !b.iovs || !b.bufs || !b.counts || !b.owner ||
        !b.copies || !b.sts || ((gids == NULL) && (cfg != NULL) &&
                                (cfg->field_mask & MC_RC_FIELD_GROUP_IDS))) {
        mc_set_error_detail("out of memory for a batch of %zu tensor objects", objs);
        st = MC_INTERNAL_ERROR;
        goto fail;
    }

    keyp = b.keymem;
    for (size_t i = 0; i < n; i++) {
        if (!ts[i].ok)
            continue;
        for (int32_t r = (tp > 1) ? 0 : -1; r < ((tp > 1) ? tp : 0); r++) {
            if (gids != NULL)
                gids[j] = cfg->group_ids[i];
            st = add_object(&b, j++, i, keys[i], &ts[i], tp, split_dim, r, &keyp);
            if (st != MC_OK)
                goto fail;
        }
    }
    b.n = j;

    if (gids != NULL) {
        ecfg                 = *cfg;
        ecfg.group_ids       = gids;
        ecfg.group_ids_count = b.n;
        cfg                  = &ecfg;
    }
    if (flags & MC_TENSOR_WRITE_UPSERT)
        (void)mc_store_batch_upsert_parts(store, b.keys, b.bufs, b.counts, b.n, cfg, b.sts);
    else
        (void)mc_store_batch_put_parts(store, b.keys, b.bufs, b.counts, b.n, cfg, b.sts);

    /* a tensor's status: its first failing object's, in rank order */
    for (size_t i = 0; i < n; i++) {
        if (ts[i].ok)
            statuses[i] = MC_OK;
    }
    for (j = 0; j < b.n; j++) {
        size_t i = b.owner[j];
        if ((statuses[i] == MC_OK) && (b.sts[j] != MC_OK))
            statuses[i] = b.sts[j];
    }
    st = first_error(statuses, n);
    goto out;

fail:
    for (size_t i = 0; i < n; i++) {
        if (ts[i].ok)
            statuses[i] = st;
    }
out:
    free(gids);
    shard_batch_free(&b);
    return (st != MC_OK) ? st : first_error(statuses, n);
}

/* What every write checks first: a set-up store (as every store call,
 * UNAVAILABLE_IN_CURRENT_STATUS before setup or after close, whatever the
 * tensors), then the arrays.  On failure every status gets the verdict. */
static mc_status_t batch_args(mc_store_h store, const char *const *keys, int have_arrays,
                              size_t n, mc_status_t *statuses)
{
    mc_status_t st = MC_OK;
    const char *host = (store != NULL) ? mc_store_hostname(store) : NULL;

    if ((host == NULL) || (host[0] == '\0')) {
        mc_set_error_detail("the store is not set up");
        st = MC_UNAVAILABLE_IN_CURRENT_STATUS;
    } else if ((n > 0) && ((keys == NULL) || !have_arrays)) {
        mc_set_error_detail("keys and tensors are required");
        st = MC_INVALID_PARAMS;
    }
    if ((st != MC_OK) && (statuses != NULL)) {
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
    }
    return st;
}

/* Fill @p t for tensor @p i of a write call's arguments @p args. */
typedef mc_status_t (*describe_func_t)(mc_store_h store, const void *args, size_t i,
                                       tensor_src_t *t);

/* The body of both public batch writes: check, describe each tensor,
 * write the ones that pass. */
static mc_status_t put_tensors(mc_store_h store, const char *const *keys, size_t n,
                               int have_arrays, describe_func_t describe, const void *args,
                               int32_t tp_size, int32_t split_dim,
                               const mc_replicate_config_t *cfg, unsigned flags,
                               mc_status_t *statuses)
{
    tensor_src_t *ts;
    mc_status_t *sts, st;

    st = batch_args(store, keys, have_arrays, n, statuses);
    if ((st != MC_OK) || (n == 0))
        return st;
    ts  = calloc(n, sizeof(*ts));
    sts = (statuses != NULL) ? statuses : malloc(n * sizeof(*sts));
    if ((ts == NULL) || (sts == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu tensors", n);
        st = MC_INTERNAL_ERROR;
        for (size_t i = 0; (i < n) && (statuses != NULL); i++)
            statuses[i] = st;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        sts[i]   = describe(store, args, i, &ts[i]);
        ts[i].ok = (sts[i] == MC_OK);
    }
    st = write_tensors(store, keys, ts, n, tp_size, split_dim, cfg, flags, sts);
out:
    free(ts);
    if (sts != statuses)
        free(sts);
    return st;
}

typedef struct put_args {
    const mc_tensor_meta_t *metas;
    const void *const *data;
} put_args_t;

static mc_status_t describe_tensor(mc_store_h store, const void *args, size_t i,
                                   tensor_src_t *t)
{
    const put_args_t *a = args;
    mc_status_t st      = mc_tensor_meta_check(&a->metas[i]);

    (void)store;
    if (st != MC_OK)
        return st;
    if ((a->metas[i].data_bytes > 0) && (a->data[i] == NULL)) {
        mc_set_error_detail("tensor %zu has %llu bytes at NULL", i,
                            (unsigned long long)a->metas[i].data_bytes);
        return MC_INVALID_PARAMS;
    }
    t->meta = a->metas[i];
    t->data = a->data[i];
    return MC_OK;
}

MC_API mc_status_t mc_tensor_put_batch(mc_store_h store, const char *const *keys,
                                       const mc_tensor_meta_t *metas, const void *const *data,
                                       size_t n, int32_t tp_size, int32_t split_dim,
                                       const mc_replicate_config_t *cfg, unsigned flags,
                                       mc_status_t *statuses)
{
    put_args_t a = {metas, data};
    return put_tensors(store, keys, n, (metas != NULL) && (data != NULL), describe_tensor, &a,
                       tp_size, split_dim, cfg, flags, statuses);
}

MC_API mc_status_t mc_tensor_put(mc_store_h store, const char *key, const mc_tensor_meta_t *meta,
                                 const void *data, const mc_replicate_config_t *cfg,
                                 unsigned flags)
{
    mc_status_t st;
    if (meta == NULL) {
        mc_set_error_detail("meta is NULL");
        return MC_INVALID_PARAMS;
    }
    (void)mc_tensor_put_batch(store, &key, meta, &data, 1, 1, 0, cfg, flags, &st);
    return st;
}

typedef struct put_from_args {
    const void *const *bufs;
    const uint64_t *sizes;
    int32_t tp_size;
} put_from_args_t;

static mc_status_t describe_buffer(mc_store_h store, const void *args, size_t i,
                                   tensor_src_t *t)
{
    const put_from_args_t *a = args;
    mc_tensor_meta_t whole;
    mc_status_t st;

    /* registered first: the decoder must not read memory the caller has
     * not handed to the store */
    if ((a->sizes[i] > SIZE_MAX) ||
        !mc_store_mem_is_registered(store, a->bufs[i], (size_t)a->sizes[i])) {
        mc_set_error_detail("tensor buffer %zu (%p, %llu bytes) is not registered memory", i,
                            a->bufs[i], (unsigned long long)a->sizes[i]);
        return MC_INVALID_PARAMS;
    }
    st = mc_tensor_header_decode(a->bufs[i], a->sizes[i], &t->meta);
    if (st != MC_OK)
        return st;
    if (a->tp_size > 1) {
        /* as upstream, the buffer is split as the tensor it holds (its local
         * shape), whatever layout its header describes: a shard read back
         * splits like any tensor */
        st = mc_tensor_meta_init(&whole, t->meta.dtype, t->meta.local_shape, t->meta.ndim);
        if (st != MC_OK)
            return st;
        whole.data_offset = t->meta.data_offset;
        t->meta           = whole;
    }
    t->data    = (const unsigned char *)a->bufs[i] + t->meta.data_offset;
    t->raw     = a->bufs[i];
    t->raw_len = a->sizes[i];
    return MC_OK;
}

MC_API mc_status_t mc_tensor_put_from_batch(mc_store_h store, const char *const *keys,
                                            const void *const *bufs, const uint64_t *sizes,
                                            size_t n, int32_t tp_size, int32_t split_dim,
                                            const mc_replicate_config_t *cfg, unsigned flags,
                                            mc_status_t *statuses)
{
    put_from_args_t a = {bufs, sizes, tp_size};
    return put_tensors(store, keys, n, (bufs != NULL) && (sizes != NULL), describe_buffer, &a,
                       tp_size, split_dim, cfg, flags, statuses);
}

/* Decode what a read of @p got bytes left in @p buf. */
static int64_t decode_read(const void *buf, int64_t got, mc_tensor_meta_t *meta)
{
    if (got < 0)
        return got;
    if (mc_tensor_header_decode(buf, (uint64_t)got, meta) != MC_OK)
        return MC_INVALID_PARAMS;
    return got;
}

MC_API int mc_cuda_pointer_device(const void *ptr, int *managed_p)
{
    int device = -1;
    int type   = mc_cuda_ptr_type(ptr, &device);

    if (managed_p != NULL)
        *managed_p = (type == 3);
    return (type != 0) ? device : -1;
}

MC_API int64_t mc_tensor_get_into(mc_store_h store, const char *key, void *buf, size_t cap,
                                  mc_tensor_meta_t *meta)
{
    mc_tensor_meta_t m;
    int64_t got;

    if (meta == NULL) {
        mc_set_error_detail("meta is NULL");
        return MC_INVALID_PARAMS;
    }
    if (mc_cuda_is_device_ptr(buf)) {
        /* staged through host memory by mc_store_get_into (docs/cuda.md);
         * the header is decoded from a host copy of it */
        unsigned char hdr[MC_TENSOR_HEADER_SIZE];
        mc_status_t st;
        got = mc_store_get_into(store, key, buf, cap);
        if (got < 0)
            return got;
        if ((uint64_t)got < sizeof(hdr)) {
            mc_set_error_detail("object %s (%lld bytes) is not a tensor object", key,
                                (long long)got);
            return MC_INVALID_PARAMS;
        }
        st = mc_cuda_copy(hdr, buf, sizeof(hdr));
        if (st != MC_OK)
            return st;
        if (mc_tensor_header_decode(hdr, (uint64_t)got, &m) != MC_OK)
            return MC_INVALID_PARAMS;
        *meta = m;
        return got;
    }
    got = decode_read(buf, mc_store_get_into(store, key, buf, cap), &m);
    if (got >= 0)
        *meta = m;
    return got;
}

MC_API mc_status_t mc_tensor_batch_get_into(mc_store_h store, const char *const *keys,
                                            void *const *bufs, const uint64_t *caps, size_t n,
                                            mc_tensor_meta_t *metas, int64_t *results)
{
    mc_iov_t *iovs;
    const mc_iov_t **ib;
    size_t *counts;
    mc_status_t st = MC_OK;

    if (results == NULL) {
        mc_set_error_detail("results is NULL");
        return MC_INVALID_PARAMS;
    }
    if ((n > 0) && ((keys == NULL) || (bufs == NULL) || (caps == NULL) || (metas == NULL))) {
        mc_set_error_detail("keys, buffers, sizes and metas are required");
        for (size_t i = 0; i < n; i++)
            results[i] = MC_INVALID_PARAMS;
        return MC_INVALID_PARAMS;
    }
    if (n == 0)
        return MC_OK;
    iovs   = malloc(n * sizeof(*iovs));
    ib     = malloc(n * sizeof(*ib));
    counts = malloc(n * sizeof(*counts));
    if ((iovs == NULL) || (ib == NULL) || (counts == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu tensor reads", n);
        for (size_t i = 0; i < n; i++)
            results[i] = MC_INTERNAL_ERROR;
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        iovs[i]   = (mc_iov_t){bufs[i], (caps[i] > SIZE_MAX) ? SIZE_MAX : (size_t)caps[i]};
        ib[i]     = &iovs[i];
        counts[i] = 1;
    }
    (void)mc_store_batch_get_into_multi(store, keys, ib, counts, n, results);
    for (size_t i = 0; i < n; i++) {
        results[i] = decode_read(bufs[i], results[i], &metas[i]);
        if ((results[i] < 0) && (st == MC_OK))
            st = (mc_status_t)results[i];
    }
out:
    free(iovs);
    free(ib);
    free(counts);
    return st;
}

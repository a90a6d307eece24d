/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bodies of the hand-written Store methods of the Python binding
 * (swig/py_glue.h): mooncake_py_store_<name>() is the Store method <name>
 * of swig/python.i, which documents it and says whether it keeps the
 * interpreter lock; and the records AsyncQueue.reap() returns.  The
 * batches that take keys (and uint64 columns) and answer per-key statuses
 * share one body, mooncake_py_batch(), each giving only its library call
 * in a constant mooncake_py_batch_t; the lists of results are built by
 * mooncake_py_list_of() (py_conv.c) from a function per item.
 *
 * Owns: nothing beyond a call: every array is PyMem scratch freed on the
 * one cleanup path of its function.  May call: libmooncake's public store
 * API, swig/py_conv.c (arguments in, lists out) and swig/py_buffer.c
 * (BufferHandle for get_buffers()).
 *
 * Locking: the methods taking Python objects are %nothread; each converts
 * its arguments with the lock held, releases it (Py_BEGIN_ALLOW_THREADS)
 * around every libmooncake call that can block, and builds its result
 * with the lock held again.  get()/get_batch() are two-phase: the lookup
 * runs without the lock; the bytes object of the exact size is created
 * with the lock held; the read lands straight in that object's storage
 * without the lock; no intermediate copy is ever made.  Nothing else can
 * see the object before it is returned, so filling it without the lock is
 * safe.  The counters (dummy_stat, offload_stat), mem_pool_alloc and the
 * remove calls never touch the interpreter: the -threads wrapper calls
 * them without the lock.
 */
#include "py_glue.h"
#include "pyhelpers.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The columns mooncake_py_batch() converts at most. */
#define MOONCAKE_PY_BATCH_COLS 2

/* py_glue.h says what it converts, calls and returns. */
PyObject *mooncake_py_batch(mc_store_h h, const mooncake_py_batch_t *b, PyObject *keys,
                            PyObject *const *cols, const void *arg)
{
    mooncake_py_strv_t sv;
    uint64_t *v[MOONCAKE_PY_BATCH_COLS] = {NULL, NULL};
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    PyObject *list = NULL;
    size_t c;

    assert(b->ncols <= MOONCAKE_PY_BATCH_COLS);
    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    for (c = 0; c < b->ncols; c++) {
        v[c] = mooncake_py_u64v(cols[c], sv.n);
        if (v[c] == NULL)
            goto cleanup;
    }
    sts = mooncake_py_status_array(sv.n);
    if (sts == NULL)
        goto cleanup;
    if ((sv.n > 0) || b->call_empty) {
        Py_BEGIN_ALLOW_THREADS
        st = b->call(h, sv.v, sv.n, v, arg, sts);
        Py_END_ALLOW_THREADS
    }
    list = mooncake_py_batch_statuses(sts, sv.n, st);

cleanup:
    PyMem_Free(sts);
    for (c = 0; c < MOONCAKE_PY_BATCH_COLS; c++)
        PyMem_Free(v[c]);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

/*
 * put_batch (upsert = 0) / upsert_batch (1): store values[i] under keys[i];
 * 0 when every key succeeded, else the first error.  Different lengths give
 * MC_INVALID_PARAMS.  Raises TypeError when keys is not a list of str or a
 * value is not bytes-like.
 */
PyObject *mooncake_py_write_batch(mc_store_h h, int upsert, PyObject *keys,
                                         PyObject *values,
                                         const mc_replicate_config_t *config)
{
    mooncake_py_strv_t sv;
    PyObject *vt = NULL;
    Py_buffer *views = NULL;
    mc_iov_t *iovs = NULL;
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    size_t n, nviews = 0;
    PyObject *ret = NULL;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    if (PyUnicode_Check(values) || PyObject_CheckBuffer(values)) {
        PyErr_SetString(PyExc_TypeError, "values must be a list of bytes-like objects");
        goto cleanup;
    }
    vt = PySequence_Tuple(values);
    if (vt == NULL)
        goto cleanup;
    if ((size_t)PyTuple_GET_SIZE(vt) != n) {
        ret = PyLong_FromLong(MC_INVALID_PARAMS);
        goto cleanup;
    }
    views = PyMem_Calloc(n + 1, sizeof(*views));
    iovs = PyMem_Calloc(n + 1, sizeof(*iovs));
    sts = PyMem_Calloc(n + 1, sizeof(*sts));
    if ((views == NULL) || (iovs == NULL) || (sts == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (mooncake_py_views_get(vt, n, "values item", views, iovs, &nviews) != 0)
        goto cleanup;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        if (upsert)
            st = mc_store_upsert_batch(h, sv.v, iovs, n, config, sts);
        else
            st = mc_store_put_batch(h, sv.v, iovs, n, config, sts);
        Py_END_ALLOW_THREADS
    }
    ret = PyLong_FromLong((long)st);

cleanup:
    mooncake_py_views_release(views, nviews);
    PyMem_Free(sts);
    PyMem_Free(iovs);
    PyMem_Free(views);
    Py_XDECREF(vt);
    mooncake_py_strv_cleanup(&sv);
    return ret;
}

/* The whole-object batch zero-copy calls (MOONCAKE_ZC_PUT_FROM,
 * _UPSERT_FROM, _GET_INTO): writes fill @p sts, reads @p res.  Called
 * without the GIL. */
static mc_status_t mooncake_py_zc_call(mc_store_h h, int op, const char *const *keys,
                                       const mc_iov_t *const *bufs, const size_t *counts,
                                       size_t n, const mc_replicate_config_t *config,
                                       int64_t *res, mc_status_t *sts)
{
    switch (op) {
    case MOONCAKE_ZC_PUT_FROM:
        return mc_store_batch_put_from_multi(h, keys, bufs, counts, n, config, sts);
    case MOONCAKE_ZC_UPSERT_FROM:
        return mc_store_batch_upsert_from_multi(h, keys, bufs, counts, n, config, sts);
    default:
        return mc_store_batch_get_into_multi(h, keys, bufs, counts, n, res);
    }
}

PyObject *mooncake_py_store_get(mc_store_h h, const char *key, int mutable_)
{
    mc_store_query_h q = NULL;
    mc_status_t st;
    uint64_t size, hint = 0;
    PyObject *out;

    /* an object this handle knows the size of (last seen on disk only,
     * put by it, or leased): a buffer of that size first, so that its
     * disk record or its bytes are read into it while the master
     * answers (get_size_hint; a lookup in memory, quick enough to keep
     * the GIL) */
    st = mc_store_get_size_hint(h, key, &hint);
    if ((st == MC_OK) && (hint > 0) && (hint <= (uint64_t)PY_SSIZE_T_MAX)) {
        out = mooncake_py_bytes_for(hint, mutable_);
        if (out == NULL)
            return mooncake_py_empty_bytes();
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_get(h, key, mooncake_py_bytes_data(out), (size_t)hint, &size);
        Py_END_ALLOW_THREADS
        if ((st == MC_OK) && (size == hint))
            return out;
        if ((st == MC_OK) && (size > 0) && (size < hint)) {
            /* smaller since: the same bytes, shortened in place */
            if (PyByteArray_Check(out)) {
                if (PyByteArray_Resize(out, (Py_ssize_t)size) == 0)
                    return out;
                Py_DECREF(out);
            } else if (_PyBytes_Resize(&out, (Py_ssize_t)size) == 0) {
                return out; /* on failure it released out */
            }
            PyErr_Clear();
            return mooncake_py_empty_bytes();
        }
        Py_DECREF(out);
        if (st != MC_BUFFER_OVERFLOW)
            return mooncake_py_empty_bytes(); /* a miss or a failure, as below */
        /* larger since: the two-phase read below */
    }

    Py_BEGIN_ALLOW_THREADS
    st = mc_store_query_cached(h, key, &q);
    Py_END_ALLOW_THREADS
    if ((st != MC_OK) || (q == NULL))
        return mooncake_py_empty_bytes();
    size = mc_store_query_size(q);
    out = (size > 0) ? mooncake_py_bytes_for(size, mutable_) : NULL;
    if (out == NULL) {
        Py_BEGIN_ALLOW_THREADS
        mc_store_query_release(q);
        Py_END_ALLOW_THREADS
        return mooncake_py_empty_bytes();
    }
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_query_read(h, q, 0, mooncake_py_bytes_data(out), (size_t)size);
    mc_store_query_release(q);
    Py_END_ALLOW_THREADS
    if (st != MC_OK) {
        Py_DECREF(out);
        return mooncake_py_empty_bytes();
    }
    return out;
}

/* get_batch(): the bytes read for key i, which the list takes from
 * outs[i], or b"" for a key that was not read. */
static PyObject *mooncake_py_take_out(size_t i, void *outs)
{
    PyObject *item = ((PyObject **)outs)[i];
    ((PyObject **)outs)[i] = NULL;
    return (item != NULL) ? item : mooncake_py_empty_bytes();
}

PyObject *mooncake_py_store_get_batch(mc_store_h h, PyObject *keys, int mutable_)
{
    mooncake_py_strv_t sv;
    mc_store_query_h *qs = NULL;
    mc_status_t *sts = NULL;
    mc_store_query_h *rq = NULL; /* the queries worth reading, compacted */
    void **rbufs = NULL;
    mc_status_t *rsts = NULL;
    size_t *rpos = NULL;         /* key index of each compacted entry */
    PyObject **outs = NULL;
    PyObject *list = NULL;
    size_t i, n, m = 0;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    qs = PyMem_Calloc(n + 1, sizeof(*qs));
    sts = PyMem_Calloc(n + 1, sizeof(*sts));
    rq = PyMem_Calloc(n + 1, sizeof(*rq));
    rbufs = PyMem_Calloc(n + 1, sizeof(*rbufs));
    rsts = PyMem_Calloc(n + 1, sizeof(*rsts));
    rpos = PyMem_Calloc(n + 1, sizeof(*rpos));
    outs = PyMem_Calloc(n + 1, sizeof(*outs));
    if ((qs == NULL) || (sts == NULL) || (rq == NULL) || (rbufs == NULL) ||
        (rsts == NULL) || (rpos == NULL) || (outs == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++)
        sts[i] = MC_INTERNAL_ERROR;

    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        (void)mc_store_batch_query_cached(h, sv.v, n, qs, sts);
        Py_END_ALLOW_THREADS
    }

    /* Buffers for the hits, with the lock held. */
    for (i = 0; i < n; i++) {
        uint64_t size;
        if ((qs[i] == NULL) || (sts[i] != MC_OK))
            continue;
        size = mc_store_query_size(qs[i]);
        if (size == 0)
            continue;
        outs[i] = mooncake_py_bytes_for(size, mutable_);
        if (outs[i] == NULL)
            continue;
        rq[m] = qs[i];
        rbufs[m] = mooncake_py_bytes_data(outs[i]);
        rsts[m] = MC_INTERNAL_ERROR;
        rpos[m] = i;
        m++;
    }

    Py_BEGIN_ALLOW_THREADS
    if (m > 0)
        (void)mc_store_batch_query_read(h, rq, m, rbufs, rsts);
    for (i = 0; i < n; i++) {
        mc_store_query_release(qs[i]);
        qs[i] = NULL;
    }
    Py_END_ALLOW_THREADS

    for (i = 0; i < m; i++) {
        if (rsts[i] != MC_OK)
            Py_CLEAR(outs[rpos[i]]);
    }
    list = mooncake_py_list_of(n, mooncake_py_take_out, outs);

cleanup:
    if (qs != NULL) {
        for (i = 0; i < n; i++)
            mc_store_query_release(qs[i]);
    }
    if (outs != NULL) {
        for (i = 0; i < n; i++)
            Py_XDECREF(outs[i]);
    }
    PyMem_Free(outs);
    PyMem_Free(rpos);
    PyMem_Free(rsts);
    PyMem_Free(rbufs);
    PyMem_Free(rq);
    PyMem_Free(sts);
    PyMem_Free(qs);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

/* batch_exist answers 1, 0 or a negative status per key: statuses in all
 * but name, so its int results are the batch's status slots (an enum with
 * negative values is an int to the compiler, the same type). */
_Static_assert(sizeof(mc_status_t) == sizeof(int), "mc_status_t is an int");

static mc_status_t mooncake_py_exist_call(mc_store_h h, const char **keys, size_t n,
                                          uint64_t *const *cols, const void *arg,
                                          mc_status_t *sts)
{
    (void)cols;
    (void)arg;
    return mc_store_batch_exist(h, keys, n, (int *)sts);
}

PyObject *mooncake_py_store_batch_exist(mc_store_h h, PyObject *keys)
{
    static const mooncake_py_batch_t b = {mooncake_py_exist_call, 0, 0};
    return mooncake_py_batch(h, &b, keys, NULL, NULL);
}

int64_t mooncake_py_store_dummy_stat(mc_store_h h, int which)
{
    uint64_t v[3] = {0, 0, 0};
    mc_status_t st = mc_store_dummy_stats(h, &v[0], &v[1], &v[2]);
    if (st != MC_OK)
        return st;
    return ((which >= 0) && (which < 3)) ? (int64_t)v[which] : MC_INVALID_PARAMS;
}

int64_t mooncake_py_store_offload_stat(mc_store_h h, int which)
{
    mc_store_disk_stats_t st;
    uint64_t v[9];
    mc_status_t rc = mc_store_offload_stats(h, &st);
    if (rc != MC_OK)
        return rc;
    v[0] = st.offloaded_keys;
    v[1] = st.offloaded_bytes;
    v[2] = st.failed_keys;
    v[3] = st.dropped_keys;
    v[4] = st.evicted_buckets;
    v[5] = st.evicted_keys;
    v[6] = st.evicted_bytes;
    v[7] = st.used_bytes;
    v[8] = st.queued;
    return ((which >= 0) && (which < 9)) ? (int64_t)v[which] : MC_INVALID_PARAMS;
}

uint64_t mooncake_py_store_mem_pool_alloc(mc_store_h h, uint64_t size)
{
    void *p = NULL;
    if ((size == 0) || (size > (uint64_t)SIZE_MAX))
        return 0;
    if (mc_store_mem_pool_alloc(h, (size_t)size, &p) != MC_OK)
        return 0;
    return (uint64_t)(uintptr_t)p;
}

int64_t mooncake_py_store_remove_by_regex(mc_store_h h, const char *regex, int force)
{
    int64_t count = 0;
    mc_status_t st = mc_store_remove_by_regex(h, regex, force, &count);
    return (st != MC_OK) ? (int64_t)st : count;
}

int64_t mooncake_py_store_remove_all(mc_store_h h, int force)
{
    int64_t count = 0;
    mc_status_t st = mc_store_remove_all(h, force, &count);
    return (st != MC_OK) ? (int64_t)st : count;
}

PyObject *mooncake_py_store_mount_segment(mc_store_h h, const char *path, uint64_t size,
                                          uint64_t offset, const char *protocol,
                                          const char *location)
{
    mc_segment_id_t id;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_mount_segment(h, path, size, offset, protocol, location, &id);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(is)", (int)st, (st == MC_OK) ? id.id : "");
}

PyObject *mooncake_py_store_allocate_and_mount_segment(mc_store_h h, uint64_t size,
                                                       const char *protocol, const char *location)
{
    mc_segment_id_t id;
    uint64_t allocated = 0;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_allocate_and_mount_segment(h, size, protocol, location, &id,
                                             &allocated);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(isK)", (int)st, (st == MC_OK) ? id.id : "",
                         (unsigned long long)allocated);
}

PyObject *mooncake_py_store_create_copy_task(mc_store_h h, const char *key, const char *const *strs,
                                             size_t n)
{
    mc_task_id_t id;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_create_copy_task(h, key, strs, n, &id);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(is)", (int)st, (st == MC_OK) ? id.id : "");
}

PyObject *mooncake_py_store_create_move_task(mc_store_h h, const char *key, const char *source,
                                             const char *target)
{
    mc_task_id_t id;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_create_move_task(h, key, source, target, &id);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(is)", (int)st, (st == MC_OK) ? id.id : "");
}

PyObject *mooncake_py_store_query_task(mc_store_h h, const char *task_id)
{
    mc_store_task_info_t *info = malloc(sizeof(*info));
    mc_status_t st;
    PyObject *msg;
    if (info == NULL)
        return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_query_task(h, task_id, info);
    Py_END_ALLOW_THREADS
    if (st != MC_OK) {
        free(info);
        return Py_BuildValue("(iO)", (int)st, Py_None);
    }
    msg = PyUnicode_DecodeUTF8(info->message, (Py_ssize_t)strlen(info->message), "replace");
    if (msg == NULL) {
        free(info);
        return NULL;
    }
    PyObject *r = Py_BuildValue("(i(iiKKsN))", (int)st, (int)info->type, (int)info->status,
                                (unsigned long long)info->created_at_ms_epoch,
                                (unsigned long long)info->last_updated_at_ms_epoch,
                                info->assigned_client, msg);
    free(info);
    return r;
}

PyObject *mooncake_py_store_write_parts(mc_store_h h, int upsert, const char *key, PyObject *parts,
                                        const mc_replicate_config_t *config)
{
    PyObject *t = PySequence_Tuple(parts);
    Py_buffer *views = NULL;
    mc_iov_t *iovs = NULL;
    size_t n = 0, nviews = 0;
    mc_status_t st = MC_OK;
    PyObject *ret = NULL;

    if (t == NULL)
        return NULL;
    n = (size_t)PyTuple_GET_SIZE(t);
    views = PyMem_Calloc(n + 1, sizeof(*views));
    iovs = PyMem_Calloc(n + 1, sizeof(*iovs));
    if ((views == NULL) || (iovs == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (mooncake_py_views_get(t, n, "part", views, iovs, &nviews) != 0)
        goto cleanup;
    Py_BEGIN_ALLOW_THREADS
    if (upsert)
        st = mc_store_upsert_parts(h, key, iovs, n, config);
    else
        st = mc_store_put_parts(h, key, iovs, n, config);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromLong((long)st);

cleanup:
    mooncake_py_views_release(views, nviews);
    PyMem_Free(iovs);
    PyMem_Free(views);
    Py_DECREF(t);
    return ret;
}

PyObject *mooncake_py_store_batch_write_parts(mc_store_h h, int mode, PyObject *keys,
                                              PyObject *parts, const mc_replicate_config_t *config)
{
    mooncake_py_strv_t sv;
    PyObject *pt = NULL, **fast = NULL, *list = NULL, **held = NULL;
    Py_buffer *views = NULL;
    mc_iov_t *iovs = NULL;
    const mc_iov_t **bufs = NULL;
    size_t *counts = NULL;
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    size_t i, n, total = 0, nviews = 0, nheld = 0, k = 0;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    pt = PySequence_Tuple(parts);
    if (pt == NULL)
        goto cleanup;
    if ((size_t)PyTuple_GET_SIZE(pt) != n) {
        PyErr_Format(PyExc_ValueError, "%zu keys but %zd part lists", n,
                     PyTuple_GET_SIZE(pt));
        goto cleanup;
    }
    fast   = PyMem_Calloc(n + 1, sizeof(*fast));
    bufs   = PyMem_Calloc(n + 1, sizeof(*bufs));
    counts = PyMem_Calloc(n + 1, sizeof(*counts));
    sts    = mooncake_py_status_array(n);
    if ((fast == NULL) || (bufs == NULL) || (counts == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (sts == NULL)
        goto cleanup;
    for (i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(pt, (Py_ssize_t)i);
        /* a bytes object is a sequence too: of ints, not of parts */
        if (PyUnicode_Check(item) || PyObject_CheckBuffer(item)) {
            PyErr_Format(PyExc_TypeError, "parts %zu must be a sequence of bytes-like "
                         "objects, not '%s'", i, Py_TYPE(item)->tp_name);
            goto cleanup;
        }
        fast[i] = PySequence_Fast(item, "parts items must be sequences of bytes-like "
                                        "objects");
        if (fast[i] == NULL)
            goto cleanup;
        counts[i] = (size_t)PySequence_Fast_GET_SIZE(fast[i]);
        total += counts[i];
    }
    views = PyMem_Calloc(total + 1, sizeof(*views));
    iovs  = PyMem_Calloc(total + 1, sizeof(*iovs));
    held  = PyMem_Calloc(total + 1, sizeof(*held));
    if ((views == NULL) || (iovs == NULL) || (held == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++) {
        size_t first = k;
        for (size_t j = 0; j < counts[i]; j++, k++) {
            PyObject *o = PySequence_Fast_GET_ITEM(fast[i], (Py_ssize_t)j);
            /* a DataProto column is thousands of rows: their bytes read off
             * the array (a reference held while the lock is released, as a
             * view would hold it) rather than a buffer requested per row */
            if (mooncake_py_array_span(o, &iovs[k].base, &iovs[k].len)) {
                Py_INCREF(o);
                held[nheld++] = o;
                continue;
            }
            if (!PyObject_CheckBuffer(o)) {
                PyErr_Format(PyExc_TypeError, "parts %zu item %zu: a bytes-like object "
                             "is required, not '%s'", i, j, Py_TYPE(o)->tp_name);
                goto cleanup;
            }
            if (PyObject_GetBuffer(o, &views[nviews], PyBUF_SIMPLE) != 0)
                goto cleanup;
            iovs[k].base = views[nviews].buf;
            iovs[k].len  = (size_t)views[nviews].len;
            nviews++;
        }
        bufs[i] = &iovs[first];
    }
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        if (mode == MOONCAKE_PY_PARTS_UPSERT)
            st = mc_store_batch_upsert_parts(h, sv.v, bufs, counts, n, config, sts);
        else if (mode == MOONCAKE_PY_PARTS_COMMIT)
            st = mc_store_batch_put_parts_commit(h, sv.v, bufs, counts, n, config, sts);
        else
            st = mc_store_batch_put_parts(h, sv.v, bufs, counts, n, config, sts);
        Py_END_ALLOW_THREADS
    }
    list = mooncake_py_batch_statuses(sts, n, st);

cleanup:
    mooncake_py_views_release(views, nviews);
    for (i = 0; i < nheld; i++)
        Py_DECREF(held[i]);
    for (i = 0; (fast != NULL) && (i < n); i++)
        Py_XDECREF(fast[i]);
    PyMem_Free(held);
    PyMem_Free(iovs);
    PyMem_Free(views);
    PyMem_Free(sts);
    PyMem_Free(counts);
    PyMem_Free(bufs);
    PyMem_Free(fast);
    Py_XDECREF(pt);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

static mc_status_t mooncake_py_remove_call(mc_store_h h, const char **keys, size_t n,
                                           uint64_t *const *cols, const void *force,
                                           mc_status_t *sts)
{
    (void)cols;
    return mc_store_batch_remove(h, keys, n, *(const int *)force, sts);
}

PyObject *mooncake_py_store_batch_remove(mc_store_h h, PyObject *keys, int force)
{
    static const mooncake_py_batch_t b = {mooncake_py_remove_call, 0, 0};
    return mooncake_py_batch(h, &b, keys, NULL, &force);
}

static mc_status_t mooncake_py_replica_clear_call(mc_store_h h, const char **keys, size_t n,
                                                  uint64_t *const *cols, const void *segment,
                                                  mc_status_t *sts)
{
    (void)cols;
    return mc_store_batch_replica_clear(h, keys, n, segment, sts);
}

/* The library is called with no keys too (it answers for itself). */
PyObject *mooncake_py_store_batch_replica_clear(mc_store_h h, PyObject *keys,
                                                const char *segment_name)
{
    static const mooncake_py_batch_t b = {mooncake_py_replica_clear_call, 0, 1};
    return mooncake_py_batch(h, &b, keys, NULL, segment_name);
}

PyObject *mooncake_py_store_batch_zc(mc_store_h h, int op, PyObject *keys, PyObject *ptrs,
                                     PyObject *sizes, PyObject *offsets,
                                     const mc_replicate_config_t *config)
{
    mooncake_py_strv_t sv;
    mooncake_py_nested_t nd;
    int64_t *res = NULL;
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    PyObject *list = NULL;
    size_t i, n;
    int need_offs = (op == MOONCAKE_ZC_SESSION_READ) || (op == MOONCAKE_ZC_SESSION_WRITE);

    if ((op < MOONCAKE_ZC_PUT_FROM) || (op > MOONCAKE_ZC_SESSION_WRITE)) {
        PyErr_SetString(PyExc_ValueError, "unknown operation");
        return NULL;
    }
    if (need_offs == (offsets == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "offsets must be given for (only) session calls");
        return NULL;
    }
    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    if (mooncake_py_nested_init(&nd, n, ptrs, sizes, offsets) != 0) {
        mooncake_py_strv_cleanup(&sv);
        return NULL;
    }
    res = PyMem_Calloc(n + 1, sizeof(*res));
    sts = PyMem_Calloc(n + 1, sizeof(*sts));
    if ((res == NULL) || (sts == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++) {
        res[i] = MC_INTERNAL_ERROR;
        sts[i] = MC_INTERNAL_ERROR;
    }
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        switch (op) {
        case MOONCAKE_ZC_PUT_FROM:
        case MOONCAKE_ZC_UPSERT_FROM:
        case MOONCAKE_ZC_GET_INTO:
            st = mooncake_py_zc_call(h, op, sv.v, (const mc_iov_t *const *)nd.bufs,
                                     nd.counts, n, config, res, sts);
            break;
        case MOONCAKE_ZC_SESSION_READ:
            st = mc_store_get_session_read(h, sv.v,
                                           (const mc_iov_t *const *)nd.bufs,
                                           (const uint64_t *const *)nd.offs,
                                           nd.counts, n, res);
            break;
        default:
            st = mc_store_put_session_write(h, sv.v,
                                            (const mc_iov_t *const *)nd.bufs,
                                            (const uint64_t *const *)nd.offs,
                                            nd.counts, n, res);
            break;
        }
        Py_END_ALLOW_THREADS
    }
    for (i = 0; i < n; i++) {
        if ((op == MOONCAKE_ZC_PUT_FROM) || (op == MOONCAKE_ZC_UPSERT_FROM))
            res[i] = sts[i];
        /* A call that failed as a whole may leave the results unset. */
        if ((st != MC_OK) && (res[i] == MC_INTERNAL_ERROR))
            res[i] = st;
    }
    list = mooncake_py_list_i64(res, n);

cleanup:
    PyMem_Free(sts);
    PyMem_Free(res);
    mooncake_py_nested_cleanup(&nd);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

PyObject *mooncake_py_store_batch_zc_flat(mc_store_h h, int op, PyObject *keys, PyObject *ptrs,
                                          PyObject *sizes, const mc_replicate_config_t *config)
{
    mooncake_py_strv_t sv;
    PyObject *tp = NULL, *ts = NULL, *list = NULL;
    const char **selk = NULL;
    mc_iov_t *iov = NULL;
    const mc_iov_t **bufs = NULL;
    size_t *counts = NULL, *sel = NULL;
    int64_t *res = NULL, *out = NULL;
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    size_t i, n, m = 0;

    if ((op != MOONCAKE_ZC_PUT_FROM) && (op != MOONCAKE_ZC_UPSERT_FROM) &&
        (op != MOONCAKE_ZC_GET_INTO)) {
        PyErr_SetString(PyExc_ValueError, "unknown operation");
        return NULL;
    }
    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n  = sv.n;
    tp = PySequence_Tuple(ptrs);
    ts = (tp != NULL) ? PySequence_Tuple(sizes) : NULL;
    if ((tp == NULL) || (ts == NULL))
        goto cleanup;
    if (((size_t)PyTuple_GET_SIZE(tp) != n) || ((size_t)PyTuple_GET_SIZE(ts) != n)) {
        PyErr_SetString(PyExc_ValueError, "list lengths differ");
        goto cleanup;
    }
    selk   = PyMem_Calloc(n + 1, sizeof(*selk));
    iov    = PyMem_Calloc(n + 1, sizeof(*iov));
    bufs   = PyMem_Calloc(n + 1, sizeof(*bufs));
    counts = PyMem_Calloc(n + 1, sizeof(*counts));
    sel    = PyMem_Calloc(n + 1, sizeof(*sel));
    res    = PyMem_Calloc(n + 1, sizeof(*res));
    out    = PyMem_Calloc(n + 1, sizeof(*out));
    sts    = PyMem_Calloc(n + 1, sizeof(*sts));
    if ((selk == NULL) || (iov == NULL) || (bufs == NULL) || (counts == NULL) ||
        (sel == NULL) || (res == NULL) || (out == NULL) || (sts == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++) {
        PyObject *p = PyTuple_GET_ITEM(tp, (Py_ssize_t)i);
        PyObject *z = PyTuple_GET_ITEM(ts, (Py_ssize_t)i);
        unsigned long long pv, zv;
        int ok = 1;
        if (!PyLong_Check(p) || PyBool_Check(p) || !PyLong_Check(z) || PyBool_Check(z)) {
            PyObject *bad = (!PyLong_Check(p) || PyBool_Check(p)) ? p : z;
            PyErr_Format(PyExc_TypeError, "%s: expected int items, not %s",
                         (bad == p) ? "buffer_ptrs" : "sizes", Py_TYPE(bad)->tp_name);
            goto cleanup;
        }
        pv = PyLong_AsUnsignedLongLong(p);
        if ((pv == (unsigned long long)-1) && PyErr_Occurred()) {
            PyErr_Clear(); /* negative or above 2**64-1 */
            ok = 0;
        }
        zv = PyLong_AsUnsignedLongLong(z);
        if ((zv == (unsigned long long)-1) && PyErr_Occurred()) {
            PyErr_Clear();
            ok = 0;
        }
        out[i] = MC_INVALID_PARAMS;
        if (!ok)
            continue;
        iov[m].base = (void *)(uintptr_t)pv;
        iov[m].len  = (size_t)zv;
        bufs[m]     = &iov[m];
        counts[m]   = 1;
        selk[m]     = sv.v[i];
        res[m]      = MC_INTERNAL_ERROR;
        sts[m]      = MC_INTERNAL_ERROR;
        sel[m++]    = i;
    }
    if (m > 0) {
        Py_BEGIN_ALLOW_THREADS
        st = mooncake_py_zc_call(h, op, selk, bufs, counts, m, config, res, sts);
        Py_END_ALLOW_THREADS
    }
    for (i = 0; i < m; i++) {
        int64_t r = (op == MOONCAKE_ZC_GET_INTO) ? res[i] : (int64_t)sts[i];
        /* A call that failed as a whole may leave the results unset. */
        if ((st != MC_OK) && (r == MC_INTERNAL_ERROR))
            r = st;
        out[sel[i]] = r;
    }
    list = mooncake_py_list_i64(out, n);

cleanup:
    PyMem_Free(sts);
    PyMem_Free(out);
    PyMem_Free(res);
    PyMem_Free(sel);
    PyMem_Free(counts);
    PyMem_Free(bufs);
    PyMem_Free(iov);
    PyMem_Free(selk);
    Py_XDECREF(ts);
    Py_XDECREF(tp);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

/*
 * read_ranges: one result per range, as a list of int, or with @p packed
 * as bytes of native int64 (numpy.frombuffer): a load of 100 k+ rows then
 * makes no object per row (a list of them, its min and its sum took ~10
 * ms per 164 k rows; bench/README.md, weights).  With @p key_index (not
 * NULL or None) @p keys lists each key once and range i reads
 * keys[key_index[i]]: 164 k rows of 140 objects convert 140 str, not
 * 164 k, and ranges of one key share its pointer (the library groups them
 * by it first).  The int64 columns are read in place.
 */
PyObject *mooncake_py_store_read_ranges(mc_store_h h, PyObject *keys, PyObject *bufs, PyObject *dst,
                                        PyObject *src, PyObject *lens, int packed,
                                        PyObject *key_index)
{
    mooncake_py_strv_t sv;
    mooncake_py_u64col_t col[5];
    const uint64_t *ki;
    mc_store_range_t *r = NULL;
    int64_t *res = NULL;
    mc_status_t st = MC_OK;
    PyObject *out = NULL;
    size_t i, n, c, ncol = 0;
    int indexed = (key_index != NULL) && (key_index != Py_None);

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    if (indexed) {
        Py_ssize_t len = PyObject_Length(key_index);
        if (len < 0)
            goto cleanup;
        n = (size_t)len;
        if (mooncake_py_u64col_init(&col[ncol], key_index, n) != 0)
            goto cleanup;
        ncol++;
    }
    {
        PyObject *cols[4] = {bufs, dst, src, lens};
        for (c = 0; c < 4; c++) {
            if (mooncake_py_u64col_init(&col[ncol], cols[c], n) != 0)
                goto cleanup;
            ncol++;
        }
    }
    ki = indexed ? col[0].v : NULL;
    for (i = 0; (ki != NULL) && (i < n); i++) {
        if (ki[i] >= sv.n) {
            PyErr_Format(PyExc_IndexError, "key_index[%zu] is %llu, past the %zu keys", i,
                         (unsigned long long)ki[i], sv.n);
            goto cleanup;
        }
    }
    r = PyMem_Malloc((n + 1) * sizeof(*r));
    if (packed) /* the results are written into the bytes returned */
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(*res)));
    else
        res = PyMem_Malloc((n + 1) * sizeof(*res));
    if ((r == NULL) || (packed ? (out == NULL) : (res == NULL))) {
        Py_CLEAR(out);
        PyErr_NoMemory();
        goto cleanup;
    }
    if (packed)
        res = (int64_t *)(void *)PyBytes_AS_STRING(out);
    {
        const uint64_t *vb = col[ncol - 4].v, *vd = col[ncol - 3].v, *vs = col[ncol - 2].v,
                       *vl = col[ncol - 1].v;
        for (i = 0; i < n; i++) {
            r[i].key        = sv.v[(ki != NULL) ? ki[i] : i];
            r[i].buffer     = (void *)(uintptr_t)vb[i];
            r[i].dst_offset = vd[i];
            r[i].src_offset = vs[i];
            r[i].length     = vl[i];
            r[i].result     = MC_INTERNAL_ERROR;
        }
    }
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_read_ranges(h, r, n);
        Py_END_ALLOW_THREADS
    }
    for (i = 0; i < n; i++) {
        res[i] = r[i].result;
        if ((st != MC_OK) && (res[i] == MC_INTERNAL_ERROR))
            res[i] = st;
    }
    if (!packed)
        out = mooncake_py_list_i64(res, n);

cleanup:
    if (!packed)
        PyMem_Free(res);
    PyMem_Free(r);
    while (ncol > 0)
        mooncake_py_u64col_cleanup(&col[--ncol]);
    mooncake_py_strv_cleanup(&sv);
    return out;
}

/*
 * read_blocks: mc_store_read_blocks of the columns (each a 1-d 64-bit
 * integer buffer, read in place, or a list of int): block i reads
 * rows[i] rows of row_len[i] bytes of keys[key_index[i]], row j at
 * src[i] + j * src_stride[i], into bufs[i] + dst[i] + j * dst_stride[i].
 * The results as bytes of native int64, one per block.
 */
PyObject *mooncake_py_store_read_blocks(mc_store_h h, PyObject *keys, PyObject *key_index,
                                        PyObject *bufs, PyObject *dst, PyObject *dst_stride,
                                        PyObject *src, PyObject *src_stride, PyObject *row_len,
                                        PyObject *rows)
{
    PyObject *cols[8] = {key_index, bufs, dst, dst_stride, src, src_stride, row_len, rows};
    mooncake_py_strv_t sv;
    mooncake_py_u64col_t col[8];
    mc_store_block_t *b = NULL;
    int64_t *res;
    mc_status_t st = MC_OK;
    PyObject *out  = NULL;
    size_t i, n, ncol = 0;
    Py_ssize_t len;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    len = PyObject_Length(key_index);
    if (len < 0)
        goto cleanup;
    n = (size_t)len;
    for (; ncol < 8; ncol++)
        if (mooncake_py_u64col_init(&col[ncol], cols[ncol], n) != 0)
            goto cleanup;
    for (i = 0; i < n; i++) {
        if (col[0].v[i] >= sv.n) {
            PyErr_Format(PyExc_IndexError, "key_index[%zu] is %llu, past the %zu keys", i,
                         (unsigned long long)col[0].v[i], sv.n);
            goto cleanup;
        }
    }
    b   = PyMem_Malloc((n + 1) * sizeof(*b));
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(*res)));
    if ((b == NULL) || (out == NULL)) {
        Py_CLEAR(out);
        PyErr_NoMemory();
        goto cleanup;
    }
    res = (int64_t *)(void *)PyBytes_AS_STRING(out);
    for (i = 0; i < n; i++)
        b[i] = (mc_store_block_t){sv.v[col[0].v[i]], (void *)(uintptr_t)col[1].v[i],
                                  col[2].v[i], col[3].v[i], col[4].v[i], col[5].v[i],
                                  col[6].v[i], col[7].v[i], MC_INTERNAL_ERROR};
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_read_blocks(h, b, n);
        Py_END_ALLOW_THREADS
    }
    for (i = 0; i < n; i++) {
        res[i] = b[i].result;
        if ((st != MC_OK) && (res[i] == MC_INTERNAL_ERROR))
            res[i] = st;
    }

cleanup:
    PyMem_Free(b);
    while (ncol > 0)
        mooncake_py_u64col_cleanup(&col[--ncol]);
    mooncake_py_strv_cleanup(&sv);
    return out;
}

static mc_status_t mooncake_py_session_keys_call(mc_store_h h, const char **keys, size_t n,
                                                 uint64_t *const *cols, const void *op,
                                                 mc_status_t *sts)
{
    (void)cols;
    if (*(const int *)op == MOONCAKE_SK_GET_START)
        return mc_store_get_session_start(h, keys, n, sts);
    if (*(const int *)op == MOONCAKE_SK_PUT_END)
        return mc_store_put_session_end(h, keys, n, sts);
    return mc_store_put_session_revoke(h, keys, n, sts);
}

PyObject *mooncake_py_store_session_keys(mc_store_h h, int op, PyObject *keys)
{
    static const mooncake_py_batch_t b = {mooncake_py_session_keys_call, 0, 0};

    if ((op < MOONCAKE_SK_GET_START) || (op > MOONCAKE_SK_PUT_REVOKE)) {
        PyErr_SetString(PyExc_ValueError, "unknown operation");
        return NULL;
    }
    return mooncake_py_batch(h, &b, keys, NULL, &op);
}

/* cols[0]: the sizes. */
static mc_status_t mooncake_py_put_session_start_call(mc_store_h h, const char **keys, size_t n,
                                                      uint64_t *const *cols, const void *config,
                                                      mc_status_t *sts)
{
    return mc_store_put_session_start(h, keys, cols[0], n, config, sts);
}

PyObject *mooncake_py_store_put_session_start(mc_store_h h, PyObject *keys, PyObject *sizes,
                                              const mc_replicate_config_t *config)
{
    static const mooncake_py_batch_t b = {mooncake_py_put_session_start_call, 1, 0};
    return mooncake_py_batch(h, &b, keys, &sizes, config);
}

/* replica_descs(): the queries of the keys and their statuses. */
typedef struct mooncake_py_queries {
    mc_store_query_h *qs;
    const mc_status_t *sts;
} mooncake_py_queries_t;

/* replica_descs(): the list of replica descriptor tuples of key i, or its
 * status. */
static PyObject *mooncake_py_replica_list(size_t i, void *arg)
{
    const mooncake_py_queries_t *a = arg;
    mc_store_query_h q = a->qs[i];
    PyObject *item;
    size_t j, m;

    if ((a->sts[i] != MC_OK) || (q == NULL))
        return PyLong_FromLong((long)((a->sts[i] != MC_OK) ? a->sts[i] : MC_INTERNAL_ERROR));
    m = mc_store_query_replica_count(q);
    item = PyList_New(0);
    for (j = 0; (item != NULL) && (j < m); j++) {
        mc_replica_desc_t d;
        char path[4096];
        uint32_t shard = 0;
        uint64_t span = 0;
        PyObject *tup;
        memset(&d, 0, sizeof(d));
        if (mc_store_query_replica(q, j, &d) != MC_OK)
            continue;
        path[0] = '\0';
        /* both disk kinds: the file, when this process knows it
         * (a dummy's real client does not pass it on: "") */
        if ((d.is_memory == MC_REPLICA_KIND_DISK) ||
            (d.is_memory == MC_REPLICA_KIND_LOCAL_DISK)) {
            if (mc_store_query_disk_replica(q, path, sizeof(path), NULL) != MC_OK)
                path[0] = '\0';
            (void)mc_store_query_dfs_replica(q, &shard, &span);
        }
        d.segment[sizeof(d.segment) - 1] = '\0';
        d.protocol[sizeof(d.protocol) - 1] = '\0';
        tup = Py_BuildValue("(iiKKsssIK)", (int)d.status, d.is_memory,
                            (unsigned long long)d.addr,
                            (unsigned long long)d.size, d.segment, d.protocol,
                            path, (unsigned int)shard, (unsigned long long)span);
        if ((tup == NULL) || (PyList_Append(item, tup) != 0)) {
            Py_XDECREF(tup);
            Py_CLEAR(item);
            break;
        }
        Py_DECREF(tup);
    }
    return item;
}

PyObject *mooncake_py_store_replica_descs(mc_store_h h, PyObject *keys)
{
    mooncake_py_strv_t sv;
    mc_store_query_h *qs = NULL;
    mc_status_t *sts = NULL;
    PyObject *list = NULL;
    size_t i, n;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    qs = PyMem_Calloc(n + 1, sizeof(*qs));
    sts = PyMem_Calloc(n + 1, sizeof(*sts));
    if ((qs == NULL) || (sts == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++)
        sts[i] = MC_INTERNAL_ERROR;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        (void)mc_store_batch_query(h, sv.v, n, qs, sts);
        Py_END_ALLOW_THREADS
    }
    {
        const mooncake_py_queries_t a = {qs, sts};
        list = mooncake_py_list_of(n, mooncake_py_replica_list, (void *)&a);
    }

cleanup:
    if (qs != NULL) {
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++)
            mc_store_query_release(qs[i]);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(sts);
    PyMem_Free(qs);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

/* get_buffers(): the buffers of the keys, their statuses, the call's. */
typedef struct mooncake_py_buffers {
    mc_store_buffer_h *bufs;
    const mc_status_t *sts;
    mc_status_t st;
} mooncake_py_buffers_t;

/* get_buffers(): a BufferHandle that takes bufs[i], or key i's status. */
static PyObject *mooncake_py_buffer_item(size_t i, void *arg)
{
    mooncake_py_buffers_t *a = arg;
    PyObject *item;

    if ((a->sts[i] == MC_OK) && (a->bufs[i] != NULL)) {
        item = mooncake_py_bufobj_new(a->bufs[i], mc_store_buffer_data(a->bufs[i]),
                                      mc_store_buffer_size(a->bufs[i]), "b");
        if (item != NULL)
            a->bufs[i] = NULL; /* owned by the object now */
        return item;
    }
    return PyLong_FromLong((long)((a->sts[i] != MC_OK) ? a->sts[i]
                                  : ((a->st != MC_OK) ? a->st : MC_INTERNAL_ERROR)));
}

PyObject *mooncake_py_store_get_buffers(mc_store_h h, PyObject *keys)
{
    mooncake_py_strv_t sv;
    mc_store_buffer_h *bufs = NULL;
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    PyObject *list = NULL;
    size_t i, n;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    bufs = PyMem_Calloc(n + 1, sizeof(*bufs));
    sts = PyMem_Calloc(n + 1, sizeof(*sts));
    if ((bufs == NULL) || (sts == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++)
        sts[i] = MC_INTERNAL_ERROR;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_batch_get_buffer(h, sv.v, n, bufs, sts);
        Py_END_ALLOW_THREADS
    }
    {
        mooncake_py_buffers_t a = {bufs, sts, st};
        list = mooncake_py_list_of(n, mooncake_py_buffer_item, &a);
    }

cleanup:
    if (bufs != NULL) {
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++)
            mc_store_buffer_release(bufs[i]);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(sts);
    PyMem_Free(bufs);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

static PyObject *mooncake_py_aq_payload(const mc_store_aq_done_t *d)
{
    PyObject *list;
    uint64_t off = 0;

    if (d->op == MC_STORE_AQ_GET)
        return PyBytes_FromStringAndSize((d->data != NULL) ? (const char *)d->data : "",
                                         (Py_ssize_t)((d->data != NULL) ? d->size : 0));
    if (d->results == NULL)
        Py_RETURN_NONE;
    list = PyList_New((Py_ssize_t)d->n);
    for (size_t i = 0; (list != NULL) && (i < d->n); i++) {
        int64_t r = d->results[i];
        PyObject *item;
        if (d->op != MC_STORE_AQ_GET_BATCH) {
            item = PyLong_FromLongLong((long long)r);
        } else if ((r > 0) && (d->data != NULL) && ((uint64_t)r <= d->size - off)) {
            item = PyBytes_FromStringAndSize((const char *)d->data + off, (Py_ssize_t)r);
            off += (uint64_t)r;
        } else {
            item = PyBytes_FromStringAndSize("", 0);
        }
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* The list of @p n reaped records; every record is released, also when
 * building the list fails (NULL with the exception set). */
PyObject *mooncake_py_aq_done_list(mc_store_aq_done_t *done, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; (list != NULL) && (i < n); i++) {
        PyObject *payload = mooncake_py_aq_payload(&done[i]);
        PyObject *t = (payload != NULL)
                          ? Py_BuildValue("(KLN)", (unsigned long long)done[i].tag,
                                          (long long)done[i].result, payload)
                          : NULL;
        if (t == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    mc_store_aq_done_release(done, n);
    return list;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Python typemaps and helpers of the libmooncake binding (included from
 * mooncake.i before the declarations it applies to).
 *
 * Buffers in: any object with the buffer protocol (bytes, bytearray,
 * memoryview, numpy arrays, mmap) is read in place: the Py_buffer is held
 * for the whole call, which also stops a bytearray from being resized
 * underneath the library while the interpreter lock is released.
 *
 * Bytes out: get()/get_batch() are two-phase.  The lookup runs without the
 * lock; the bytes object of the exact size is created with the lock held;
 * the read lands straight in that object's storage without the lock; no
 * intermediate copy is ever made.  Nothing else can see the object before
 * it is returned, so filling it without the lock is safe.
 *
 * Locking: the module is generated with -threads, so plain wrapped calls
 * release the lock around the C call.  The hand-written helpers below call
 * the Python C API themselves, are marked %nothread, and release the lock
 * explicitly (Py_BEGIN_ALLOW_THREADS) around every libmooncake call that
 * can block.  Keys are converted to UTF-8 while the lock is held and the
 * str objects are kept alive in a private tuple until the call returns, so
 * the char pointers stay valid while the lock is released.
 */

%begin %{
/* Py_ssize_t lengths for the s#/y# formats. */
#define PY_SSIZE_T_CLEAN
%}

%header %{
/* SWIG defines the module init function without a prototype. */
PyMODINIT_FUNC PyInit__capi(void);
%}

/* ---- (const void *data, size_t len): a bytes-like object in ---------------- */

%typemap(in) (const void *data, size_t len) (Py_buffer view, int have_view = 0)
{
    if (!PyObject_CheckBuffer($input)) {
        PyErr_Format(PyExc_TypeError, "a bytes-like object is required, not '%s'",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) != 0)
        SWIG_fail;
    have_view = 1;
    $1 = view.buf;
    $2 = (size_t)view.len;
}

%typemap(freearg) (const void *data, size_t len)
{
    if (have_view$argnum)
        PyBuffer_Release(&view$argnum);
}

%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) (const void *data, size_t len)
{
    $1 = PyObject_CheckBuffer($input) ? 1 : 0;
}

/* ---- (const char *const *strs, size_t n): a sequence of str in ------------- */

%typemap(in) (const char *const *strs, size_t n) (mooncake_py_strv_t sv = {0})
{
    if (mooncake_py_strv_init(&sv, $input) != 0)
        SWIG_fail;
    $1 = ($1_ltype)sv.v;
    $2 = sv.n;
}

%typemap(freearg) (const char *const *strs, size_t n)
{
    mooncake_py_strv_cleanup(&sv$argnum);
}

%{
/*
 * A sequence of str as a C array of UTF-8 strings.  The tuple keeps every
 * str alive (and so every pointer PyUnicode_AsUTF8AndSize() returned valid)
 * even if the caller's list is mutated by another thread meanwhile.
 */
typedef struct mooncake_py_strv {
    PyObject *tuple;
    const char **v;
    size_t n;
} mooncake_py_strv_t;

static void mooncake_py_strv_cleanup(mooncake_py_strv_t *sv)
{
    PyMem_Free((void *)sv->v);
    Py_XDECREF(sv->tuple);
    sv->v = NULL;
    sv->tuple = NULL;
    sv->n = 0;
}

/* 0 or -1 with a Python exception set (TypeError for a non-str entry,
 * ValueError for an embedded NUL, which C strings cannot carry). */
static int mooncake_py_strv_init(mooncake_py_strv_t *sv, PyObject *seq)
{
    Py_ssize_t i, n;
    sv->tuple = NULL;
    sv->v = NULL;
    sv->n = 0;
    if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "expected a list of str, not a single string");
        return -1;
    }
    sv->tuple = PySequence_Tuple(seq);
    if (sv->tuple == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "expected a list of str, not '%s'",
                         Py_TYPE(seq)->tp_name);
        }
        return -1;
    }
    n = PyTuple_GET_SIZE(sv->tuple);
    sv->v = PyMem_Calloc((n > 0) ? (size_t)n : 1, sizeof(*sv->v));
    if (sv->v == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(sv->tuple, i);
        Py_ssize_t len = 0;
        const char *s;
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "list item %zd: expected str, not '%s'", i,
                         Py_TYPE(item)->tp_name);
            goto fail;
        }
        s = PyUnicode_AsUTF8AndSize(item, &len);
        if (s == NULL)
            goto fail;
        if (strlen(s) != (size_t)len) {
            PyErr_Format(PyExc_ValueError, "list item %zd: embedded null character", i);
            goto fail;
        }
        sv->v[i] = s;
    }
    sv->n = (size_t)n;
    return 0;
fail:
    mooncake_py_strv_cleanup(sv);
    return -1;
}

/* A fresh b"" (the interpreter shares the empty bytes object). */
static PyObject *mooncake_py_empty_bytes(void)
{
    return PyBytes_FromStringAndSize("", 0);
}

/* A bytes object of @p size for a read to fill, or NULL (no exception set)
 * when it cannot be allocated. */
static PyObject *mooncake_py_bytes_for(uint64_t size)
{
    PyObject *out;
    if (size > (uint64_t)PY_SSIZE_T_MAX)
        return NULL;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL)
        PyErr_Clear();
    return out;
}
%}

/* ---- hand-written methods that manage the interpreter lock themselves ---- */

%feature("nothread") mooncake_store::get;
%feature("nothread") mooncake_store::get_batch;
%feature("nothread") mooncake_store::put_batch;
%feature("nothread") mooncake_store::batch_exist;

%extend mooncake_store {
    /*
     * The object as bytes, b"" when it is missing or on any error (the
     * upstream contract).  Raises only for a key that is not a str.
     */
    PyObject *get(const char *key)
    {
        mc_store_query_h q = NULL;
        mc_status_t st;
        uint64_t size;
        PyObject *out;

        Py_BEGIN_ALLOW_THREADS
        st = mc_store_query($self->h, key, &q);
        Py_END_ALLOW_THREADS
        if ((st != MC_OK) || (q == NULL))
            return mooncake_py_empty_bytes();
        size = mc_store_query_size(q);
        out = (size > 0) ? mooncake_py_bytes_for(size) : NULL;
        if (out == NULL) {
            Py_BEGIN_ALLOW_THREADS
            mc_store_query_release(q);
            Py_END_ALLOW_THREADS
            return mooncake_py_empty_bytes();
        }
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_query_read($self->h, q, 0, PyBytes_AS_STRING(out), (size_t)size);
        mc_store_query_release(q);
        Py_END_ALLOW_THREADS
        if (st != MC_OK) {
            Py_DECREF(out);
            return mooncake_py_empty_bytes();
        }
        return out;
    }

    /*
     * A list with one bytes object per key, b"" for a miss or a failed
     * read.  One master round trip for the lookups, then every read runs
     * concurrently.  Raises TypeError when @p keys is not a list of str.
     */
    PyObject *get_batch(PyObject *keys)
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
            (void)mc_store_batch_query($self->h, sv.v, n, qs, sts);
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
            outs[i] = mooncake_py_bytes_for(size);
            if (outs[i] == NULL)
                continue;
            rq[m] = qs[i];
            rbufs[m] = PyBytes_AS_STRING(outs[i]);
            rsts[m] = MC_INTERNAL_ERROR;
            rpos[m] = i;
            m++;
        }

        Py_BEGIN_ALLOW_THREADS
        if (m > 0)
            (void)mc_store_batch_query_read($self->h, rq, m, rbufs, rsts);
        for (i = 0; i < n; i++) {
            mc_store_query_release(qs[i]);
            qs[i] = NULL;
        }
        Py_END_ALLOW_THREADS

        for (i = 0; i < m; i++) {
            if (rsts[i] != MC_OK)
                Py_CLEAR(outs[rpos[i]]);
        }
        list = PyList_New((Py_ssize_t)n);
        if (list == NULL)
            goto cleanup;
        for (i = 0; i < n; i++) {
            PyObject *item = outs[i];
            outs[i] = NULL;
            if (item == NULL) {
                item = mooncake_py_empty_bytes();
                if (item == NULL) {
                    Py_CLEAR(list);
                    goto cleanup;
                }
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }

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

    /*
     * Store values[i] under keys[i]; 0 when every key succeeded, else the
     * first error.  Different lengths give MC_INVALID_PARAMS.  Raises
     * TypeError when keys is not a list of str or a value is not
     * bytes-like.
     */
    PyObject *put_batch(PyObject *keys, PyObject *values,
                        const mc_replicate_config_t *config = NULL)
    {
        mooncake_py_strv_t sv;
        PyObject *vt = NULL;
        Py_buffer *views = NULL;
        mc_iov_t *iovs = NULL;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        size_t i, n, nviews = 0;
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
        for (i = 0; i < n; i++) {
            PyObject *item = PyTuple_GET_ITEM(vt, (Py_ssize_t)i);
            if (!PyObject_CheckBuffer(item)) {
                PyErr_Format(PyExc_TypeError,
                             "values item %zu: a bytes-like object is required, not '%s'",
                             i, Py_TYPE(item)->tp_name);
                goto cleanup;
            }
            if (PyObject_GetBuffer(item, &views[i], PyBUF_SIMPLE) != 0)
                goto cleanup;
            nviews++;
            iovs[i].base = views[i].buf;
            iovs[i].len = (size_t)views[i].len;
        }
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            st = mc_store_put_batch($self->h, sv.v, iovs, n, config, sts);
            Py_END_ALLOW_THREADS
        }
        ret = PyLong_FromLong((long)st);

    cleanup:
        for (i = 0; i < nviews; i++)
            PyBuffer_Release(&views[i]);
        PyMem_Free(sts);
        PyMem_Free(iovs);
        PyMem_Free(views);
        Py_XDECREF(vt);
        mooncake_py_strv_cleanup(&sv);
        return ret;
    }

    /*
     * A list with 1, 0 or a negative status per key.  Raises TypeError when
     * keys is not a list of str.
     */
    PyObject *batch_exist(PyObject *keys)
    {
        mooncake_py_strv_t sv;
        int *res = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t i, n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        res = PyMem_Calloc(n + 1, sizeof(*res));
        if (res == NULL) {
            PyErr_NoMemory();
            goto cleanup;
        }
        for (i = 0; i < n; i++)
            res[i] = MC_INTERNAL_ERROR;
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            st = mc_store_batch_exist($self->h, sv.v, n, res);
            Py_END_ALLOW_THREADS
        }
        list = PyList_New((Py_ssize_t)n);
        if (list == NULL)
            goto cleanup;
        for (i = 0; i < n; i++) {
            /* A call that failed as a whole may leave the results unset. */
            int r = ((st != MC_OK) && (res[i] == MC_INTERNAL_ERROR)) ? (int)st : res[i];
            PyObject *v = PyLong_FromLong(r);
            if (v == NULL) {
                Py_CLEAR(list);
                goto cleanup;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, v);
        }

    cleanup:
        PyMem_Free(res);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Arguments in and results out for the Python binding (swig/py_glue.h):
 * a str as UTF-8, a list of str as a C string array, buffers and nested
 * (address, size[, offset]) lists as mc_iov_t arrays, sequences of ints
 * as uint64 arrays; and the other way, lists of ints and statuses and
 * bytes objects for a read to fill.
 *
 * Owns: the converters' scratch structs (mooncake_py_*_t) and their
 * cleanup.  May call: CPython and the public libmooncake headers
 * (mc_store_prepare_buffer() only); nothing else of the binding.
 *
 * All of it runs with the interpreter lock held and none of it blocks.
 * Keys are converted to UTF-8 while the lock is held and the str objects
 * are kept alive in a private tuple until the call returns, so the char
 * pointers stay valid while a caller releases the lock around the
 * library call.  Integer arguments (addresses, sizes, offsets) reach these
 * converters already checked by mooncake.store, but they still refuse
 * anything else with a Python exception rather than trusting that, so a
 * caller of the private module cannot crash the interpreter with a bad
 * argument (it can still pass a bad *address*, which the library refuses
 * unless it lies inside registered memory).
 */
#include "py_glue.h"

#include <stdint.h>
#include <string.h>

/* A str argument as UTF-8 (valid while the str lives: the caller holds
 * it for the call); 0, or -1 with a Python exception naming @p name. */
int mooncake_py_cstr(const char **out, PyObject *o, const char *name)
{
    Py_ssize_t len = 0;
    const char *s;

    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not '%s'", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    s = PyUnicode_AsUTF8AndSize(o, &len);
    if (s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s is not valid UTF-8 (it holds a lone surrogate such as a "
                         "non-UTF-8 byte decoded with surrogateescape): %R", name, o);
        }
        return -1;
    }
    if (strlen(s) != (size_t)len) {
        PyErr_Format(PyExc_ValueError, "%s contains a NUL character", name);
        return -1;
    }
    *out = s;
    return 0;
}

void mooncake_py_iovs_cleanup(mooncake_py_iovs_t *iv)
{
    for (size_t i = 0; i < iv->n; i++)
        PyBuffer_Release(&iv->views[i]);
    PyMem_Free(iv->views);
    PyMem_Free(iv->iov);
    iv->views = NULL;
    iv->iov   = NULL;
    iv->n     = 0;
}

/* 0, or -1 with TypeError (not a sequence, an item without the buffer
 * protocol) or ValueError (an item that is not C-contiguous) set. */
int mooncake_py_iovs_init(mooncake_py_iovs_t *iv, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "sources must be a sequence of buffers");
    Py_ssize_t n;

    iv->views = NULL;
    iv->iov   = NULL;
    iv->n     = 0;
    if (fast == NULL)
        return -1;
    n         = PySequence_Fast_GET_SIZE(fast);
    iv->views = PyMem_Calloc((size_t)n + 1, sizeof(*iv->views));
    iv->iov   = PyMem_Calloc((size_t)n + 1, sizeof(*iv->iov));
    if ((iv->views == NULL) || (iv->iov == NULL)) {
        Py_DECREF(fast);
        mooncake_py_iovs_cleanup(iv);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyObject_CheckBuffer(o)) {
            PyErr_Format(PyExc_TypeError, "source %zd is not a buffer but '%s'", i,
                         Py_TYPE(o)->tp_name);
            goto fail;
        }
        if (PyObject_GetBuffer(o, &iv->views[i], PyBUF_C_CONTIGUOUS) != 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "source %zd is not C-contiguous", i);
            goto fail;
        }
        iv->n++;
        iv->iov[i].base = iv->views[i].buf;
        iv->iov[i].len  = (size_t)iv->views[i].len;
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    mooncake_py_iovs_cleanup(iv);
    return -1;
}

void mooncake_py_rows_cleanup(mooncake_py_rows_t *rv)
{
    for (size_t i = 0; i < rv->n; i++)
        if (rv->held[i])
            PyBuffer_Release(&rv->views[i]);
    PyMem_Free(rv->views);
    PyMem_Free(rv->held);
    PyMem_Free(rv->rows);
    rv->views = NULL;
    rv->held  = NULL;
    rv->rows  = NULL;
    rv->n     = 0;
}

/* 0, or -1 with TypeError (not a sequence, an item that is neither None
 * nor a buffer) or ValueError (not C-contiguous) set. */
int mooncake_py_rows_init(mooncake_py_rows_t *rv, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "rows must be a sequence of arrays or None");
    Py_ssize_t n;

    if (fast == NULL)
        return -1;
    n         = PySequence_Fast_GET_SIZE(fast);
    rv->views = PyMem_Calloc((size_t)n + 1, sizeof(*rv->views));
    rv->held  = PyMem_Calloc((size_t)n + 1, 1);
    rv->rows  = PyMem_Calloc((size_t)n + 1, sizeof(*rv->rows));
    if ((rv->views == NULL) || (rv->held == NULL) || (rv->rows == NULL)) {
        Py_DECREF(fast);
        mooncake_py_rows_cleanup(rv);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        Py_buffer *v = &rv->views[i];
        rv->n++;
        if (o == Py_None) {
            rv->rows[i].is_null = 1;
            continue;
        }
        if (!PyObject_CheckBuffer(o)) {
            PyErr_Format(PyExc_TypeError, "row %zd is not an array but '%s'", i,
                         Py_TYPE(o)->tp_name);
            goto fail;
        }
        if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS) != 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "row %zd is not C-contiguous", i);
            goto fail;
        }
        rv->held[i] = 1;
        rv->rows[i].base = v->buf;
        rv->rows[i].nbytes = (size_t)v->len;
        rv->rows[i].ndim = (uint32_t)v->ndim;
        /* Py_ssize_t and int64_t are the same size on every supported ABI */
        rv->rows[i].shape = (const int64_t *)v->shape;
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    mooncake_py_rows_cleanup(rv);
    return -1;
}

void mooncake_py_strv_cleanup(mooncake_py_strv_t *sv)
{
    PyMem_Free((void *)sv->v);
    Py_XDECREF(sv->tuple);
    sv->v = NULL;
    sv->tuple = NULL;
    sv->n = 0;
}

/* 0 or -1 with a Python exception set (TypeError for a non-str entry,
 * ValueError for an embedded NUL, which C strings cannot carry). */
int mooncake_py_strv_init(mooncake_py_strv_t *sv, PyObject *seq)
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
        if (s == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "list item %zd is not valid UTF-8 (it holds a "
                             "lone surrogate): %R", i, item);
            }
            goto fail;
        }
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
PyObject *mooncake_py_empty_bytes(void)
{
    return PyBytes_FromStringAndSize("", 0);
}

/* The storage of a bytes or bytearray object. */
char *mooncake_py_bytes_data(PyObject *o)
{
    return PyByteArray_Check(o) ? PyByteArray_AS_STRING(o) : PyBytes_AS_STRING(o);
}

/* A bytes object (a bytearray when @p mutable_) of @p size for a read to
 * fill, or NULL (no exception set) when it cannot be allocated.  Tensor
 * reads ask for a bytearray: a tensor may view it and write to it.  From
 * 2 MiB up its pages are marked for huge pages (mc_store_prepare_buffer):
 * a fresh 16 MiB buffer faulted in 4 KiB pages cost more than its read. */
PyObject *mooncake_py_bytes_for(uint64_t size, int mutable_)
{
    PyObject *out;
    if (size > (uint64_t)PY_SSIZE_T_MAX)
        return NULL;
    if (mutable_)
        out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)size);
    else
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL)
        PyErr_Clear();
    else if (size >= ((uint64_t)2 << 20))
        mc_store_prepare_buffer(mooncake_py_bytes_data(out), (size_t)size);
    return out;
}


/*
 * The buffers of the @p n items of tuple @p t as @p iovs, the views kept in
 * @p views; *nviews counts the views taken (release them with
 * mooncake_py_views_release(), also after a failure).  0, or -1 with an
 * exception set (TypeError naming item i as "<what> i" for a non-buffer).
 */
int mooncake_py_views_get(PyObject *t, size_t n, const char *what, Py_buffer *views,
                                 mc_iov_t *iovs, size_t *nviews)
{
    size_t i;
    for (i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(t, (Py_ssize_t)i);
        if (!PyObject_CheckBuffer(item)) {
            PyErr_Format(PyExc_TypeError, "%s %zu: a bytes-like object is required, not '%s'",
                         what, i, Py_TYPE(item)->tp_name);
            return -1;
        }
        if (PyObject_GetBuffer(item, &views[i], PyBUF_SIMPLE) != 0)
            return -1;
        (*nviews)++;
        iovs[i].base = views[i].buf;
        iovs[i].len = (size_t)views[i].len;
    }
    return 0;
}

void mooncake_py_views_release(Py_buffer *views, size_t nviews)
{
    size_t i;
    for (i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
}

/* Item @p i of a tuple as a uint64: 0, or -1 with an exception set. */
static int mooncake_py_u64(PyObject *item, uint64_t *out)
{
    unsigned long long v;
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "expected an int, not '%s'", Py_TYPE(item)->tp_name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(item);
    if ((v == (unsigned long long)-1) && PyErr_Occurred())
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* A one-dimensional buffer of @p n 64-bit integers (a numpy int64/uint64
 * array), its view held in @p view, none of them negative: 1, 0 not such
 * a buffer (nothing set, nothing held), -1 exception set (nothing held). */
static int mooncake_py_u64view(PyObject *seq, size_t n, Py_buffer *view)
{
    const char *f;
    int is_signed;
    if (!PyObject_CheckBuffer(seq) || PyBytes_Check(seq) || PyByteArray_Check(seq))
        return 0;
    if (PyObject_GetBuffer(seq, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        return 0;
    }
    f = (view->format != NULL) ? view->format : "B";
    if ((*f == '<') || (*f == '=') || (*f == '@'))
        f++;
    is_signed = (strcmp(f, "q") == 0) || (strcmp(f, "l") == 0);
    if ((view->ndim != 1) || (view->itemsize != 8) ||
        (!is_signed && (strcmp(f, "Q") != 0) && (strcmp(f, "L") != 0))) {
        PyBuffer_Release(view);
        return 0;
    }
    if ((size_t)view->shape[0] != n) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "list lengths differ");
        return -1;
    }
    for (size_t i = 0; is_signed && (i < n); i++) {
        if (((const int64_t *)view->buf)[i] < 0) { /* as PyLong_AsUnsignedLongLong */
            PyErr_SetString(PyExc_OverflowError, "can't convert negative value to unsigned int");
            PyBuffer_Release(view);
            return -1;
        }
    }
    return 1;
}

/* A one-dimensional buffer of 64-bit integers (a numpy int64/uint64
 * array) as a PyMem array of @p n uint64, without an object per value:
 * 1 done, 0 not such a buffer (nothing set), -1 exception set. */
static int mooncake_py_u64buf(PyObject *seq, size_t n, uint64_t **v_p)
{
    Py_buffer view;
    int rc = mooncake_py_u64view(seq, n, &view);
    if (rc != 1)
        return rc;
    *v_p = PyMem_Calloc(n + 1, sizeof(**v_p));
    if (*v_p == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*v_p, view.buf, n * sizeof(**v_p));
    PyBuffer_Release(&view);
    return 1;
}

int mooncake_py_u64col_init(mooncake_py_u64col_t *c, PyObject *seq, size_t n)
{
    int rc;
    c->copy     = NULL;
    c->view.obj = NULL;
    rc          = mooncake_py_u64view(seq, n, &c->view);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        c->v = c->view.buf; /* read in place: no copy of a 100 k-row column */
        return 0;
    }
    c->view.obj = NULL;
    c->copy     = mooncake_py_u64v(seq, n);
    c->v        = c->copy;
    return (c->copy != NULL) ? 0 : -1;
}

void mooncake_py_u64col_cleanup(mooncake_py_u64col_t *c)
{
    if (c->view.obj != NULL)
        PyBuffer_Release(&c->view);
    c->view.obj = NULL;
    PyMem_Free(c->copy);
    c->copy = NULL;
    c->v    = NULL;
}

/* A sequence of ints (or a 1-d int64/uint64 buffer) as a PyMem array of
 * @p n uint64 (n must match).  NULL with an exception set on any error. */
uint64_t *mooncake_py_u64v(PyObject *seq, size_t n)
{
    PyObject *t;
    uint64_t *v = NULL;
    size_t i;
    int rc = mooncake_py_u64buf(seq, n, &v);
    if (rc != 0)
        return v;
    t = PySequence_Tuple(seq);
    if (t == NULL)
        return NULL;
    if ((size_t)PyTuple_GET_SIZE(t) != n) {
        PyErr_SetString(PyExc_ValueError, "list lengths differ");
        goto fail;
    }
    v = PyMem_Calloc(n + 1, sizeof(*v));
    if (v == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < n; i++) {
        if (mooncake_py_u64(PyTuple_GET_ITEM(t, (Py_ssize_t)i), &v[i]) != 0)
            goto fail;
    }
    Py_DECREF(t);
    return v;
fail:
    PyMem_Free(v);
    Py_DECREF(t);
    return NULL;
}

PyObject *mooncake_py_list_of(size_t n, mooncake_py_item_func_t item, void *arg)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    size_t i;
    if (list == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *x = item(i, arg);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, x);
    }
    return list;
}

static PyObject *mooncake_py_i64_item(size_t i, void *v)
{
    return PyLong_FromLongLong((long long)((const int64_t *)v)[i]);
}

/* A list of n Python ints from C values. */
PyObject *mooncake_py_list_i64(const int64_t *v, size_t n)
{
    return mooncake_py_list_of(n, mooncake_py_i64_item, (void *)v);
}

/* A PyMem array of @p n statuses preset to MC_INTERNAL_ERROR (what a
 * slot the library never reached reports); NULL with MemoryError. */
mc_status_t *mooncake_py_status_array(size_t n)
{
    mc_status_t *sts = PyMem_Calloc(n + 1, sizeof(*sts));
    size_t i;
    if (sts == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (i = 0; i < n; i++)
        sts[i] = MC_INTERNAL_ERROR;
    return sts;
}

static PyObject *mooncake_py_status_item(size_t i, void *v)
{
    return PyLong_FromLong((long)((const mc_status_t *)v)[i]);
}

/* The per-key statuses of a batch call that returned @p st, as a list: a
 * call that failed as a whole may leave slots unset, which report @p st. */
PyObject *mooncake_py_batch_statuses(mc_status_t *sts, size_t n, mc_status_t st)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if ((st != MC_OK) && (sts[i] == MC_INTERNAL_ERROR))
            sts[i] = st;
    }
    return mooncake_py_list_of(n, mooncake_py_status_item, sts);
}


void mooncake_py_nested_cleanup(mooncake_py_nested_t *nd)
{
    size_t i;
    if (nd->bufs != NULL) {
        for (i = 0; i < nd->n; i++)
            PyMem_Free(nd->bufs[i]);
    }
    if (nd->offs != NULL) {
        for (i = 0; i < nd->n; i++)
            PyMem_Free(nd->offs[i]);
    }
    PyMem_Free(nd->bufs);
    PyMem_Free(nd->offs);
    PyMem_Free(nd->counts);
    memset(nd, 0, sizeof(*nd));
}

/* 0, or -1 with an exception set (TypeError/ValueError for bad shapes). */
int mooncake_py_nested_init(mooncake_py_nested_t *nd, size_t n, PyObject *ptrs,
                                   PyObject *sizes, PyObject *offsets)
{
    PyObject *tp = NULL, *ts = NULL, *to = NULL;
    size_t i, j;
    memset(nd, 0, sizeof(*nd));
    nd->n = n;
    tp = PySequence_Tuple(ptrs);
    ts = (tp != NULL) ? PySequence_Tuple(sizes) : NULL;
    if ((tp == NULL) || (ts == NULL))
        goto fail;
    if (offsets != Py_None) {
        to = PySequence_Tuple(offsets);
        if (to == NULL)
            goto fail;
    }
    if (((size_t)PyTuple_GET_SIZE(tp) != n) || ((size_t)PyTuple_GET_SIZE(ts) != n) ||
        ((to != NULL) && ((size_t)PyTuple_GET_SIZE(to) != n))) {
        PyErr_SetString(PyExc_ValueError, "list lengths differ");
        goto fail;
    }
    nd->counts = PyMem_Calloc(n + 1, sizeof(*nd->counts));
    nd->bufs = PyMem_Calloc(n + 1, sizeof(*nd->bufs));
    if (to != NULL)
        nd->offs = PyMem_Calloc(n + 1, sizeof(*nd->offs));
    if ((nd->counts == NULL) || (nd->bufs == NULL) || ((to != NULL) && (nd->offs == NULL))) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < n; i++) {
        PyObject *sp = PySequence_Tuple(PyTuple_GET_ITEM(tp, (Py_ssize_t)i));
        uint64_t *pv = NULL, *sv = NULL;
        size_t m;
        if (sp == NULL)
            goto fail;
        m = (size_t)PyTuple_GET_SIZE(sp);
        pv = mooncake_py_u64v(sp, m);
        Py_DECREF(sp);
        if (pv == NULL)
            goto fail;
        sv = mooncake_py_u64v(PyTuple_GET_ITEM(ts, (Py_ssize_t)i), m);
        if (sv == NULL) {
            PyMem_Free(pv);
            goto fail;
        }
        nd->bufs[i] = PyMem_Calloc(m + 1, sizeof(mc_iov_t));
        if (nd->bufs[i] == NULL) {
            PyMem_Free(pv);
            PyMem_Free(sv);
            PyErr_NoMemory();
            goto fail;
        }
        for (j = 0; j < m; j++) {
            nd->bufs[i][j].base = (const void *)(uintptr_t)pv[j];
            nd->bufs[i][j].len = (size_t)sv[j];
        }
        PyMem_Free(pv);
        PyMem_Free(sv);
        nd->counts[i] = m;
        if (to != NULL) {
            nd->offs[i] = mooncake_py_u64v(PyTuple_GET_ITEM(to, (Py_ssize_t)i), m);
            if (nd->offs[i] == NULL)
                goto fail;
        }
    }
    Py_DECREF(tp);
    Py_DECREF(ts);
    Py_XDECREF(to);
    return 0;
fail:
    Py_XDECREF(tp);
    Py_XDECREF(ts);
    Py_XDECREF(to);
    mooncake_py_nested_cleanup(nd);
    return -1;
}

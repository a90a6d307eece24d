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
 *
 * Addresses in: the zero-copy calls take memory as ints (upstream's
 * uintptr_t); nested Python lists of them are converted to C arrays with
 * the lock held, then the lock is released for the library call, which
 * refuses any address outside registered memory before touching it.
 *
 * Memory out: BufferHandle is a small C type exporting the buffer
 * protocol.  A get_buffer() handle owns its mc_store_buffer_h (released in
 * tp_dealloc, and a live memoryview keeps the handle alive); a BufferPool
 * lease view only counts its exports so the pool can refuse to free
 * memory that a memoryview still points into.
 */

%begin %{
/* Py_ssize_t lengths for the s#/y# formats. */
#define PY_SSIZE_T_CLEAN
%}

%header %{
/* SWIG defines the module init function without a prototype. */
PyMODINIT_FUNC PyInit__capi(void);
%}

/* ---- const char *: a str in (None is NULL) -------------------------------- *
 * SWIG's own conversion reports a str it cannot encode (a lone surrogate
 * from a non-UTF-8 file name, say) as "argument 2 of type 'char const *'";
 * this one names the argument: TypeError for a non-str, ValueError for
 * a str that is not valid UTF-8 or holds a NUL. */

%typemap(in) const char *
{
    if ($input == Py_None) {
        $1 = NULL;
    } else if (mooncake_py_cstr((const char **)&$1, $input, "$1_name") != 0) {
        SWIG_fail;
    }
}

%typemap(freearg) const char * ""

%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const char *
{
    $1 = ($input == Py_None) || PyUnicode_Check($input);
}

%{
/* A str argument as UTF-8 (valid while the str lives: the caller holds
 * it for the call); 0, or -1 with a Python exception naming @p name. */
static int mooncake_py_cstr(const char **out, PyObject *o, const char *name)
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

/* ---- mc_fastcopy_gather(): destination address, source buffers, count out ---- */

/* The destination is an address (int), as in the zero-copy store calls. */
%typemap(in) void *dst
{
    unsigned long long a = PyLong_Check($input) ? PyLong_AsUnsignedLongLong($input) : 0;
    if (!PyLong_Check($input)) {
        PyErr_Format(PyExc_TypeError, "dst must be an int address, not '%s'",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    if (PyErr_Occurred())
        SWIG_fail;
    $1 = (void *)(uintptr_t)a;
}

/* The sources: a sequence of C-contiguous buffer objects (numpy arrays,
 * bytes, ...), each held for the whole call. */
%typemap(in) (const mc_iov_t *srcs, size_t n) (mooncake_py_iovs_t iv = {0})
{
    if (mooncake_py_iovs_init(&iv, $input) != 0)
        SWIG_fail;
    $1 = iv.iov;
    $2 = iv.n;
}

%typemap(freearg) (const mc_iov_t *srcs, size_t n)
{
    mooncake_py_iovs_cleanup(&iv$argnum);
}

%typemap(in, numinputs=0) size_t *copied_p (size_t copied = 0)
{
    $1 = &copied;
}

%typemap(argout) size_t *copied_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromSize_t(*$1));
}

%{
typedef struct mooncake_py_iovs {
    Py_buffer *views;
    mc_iov_t *iov;
    size_t n;
} mooncake_py_iovs_t;

static void mooncake_py_iovs_cleanup(mooncake_py_iovs_t *iv)
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
static int mooncake_py_iovs_init(mooncake_py_iovs_t *iv, PyObject *seq)
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
%}

/* ---- mc_reshard_*(): parameter blocks and columns by address ---------------- */

/* The parameter block and the per-source columns are addresses (int) that
 * mooncake.reshard.weight.planner keeps alive for the call; 0 is NULL. */
%define MOONCAKE_PY_CADDR(TYPE, NAME)
%typemap(in) TYPE NAME
{
    if (!PyLong_Check($input)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int address, not '%s'", "NAME",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    $1 = ($1_ltype)(uintptr_t)PyLong_AsUnsignedLongLong($input);
    if (PyErr_Occurred())
        SWIG_fail;
}
%enddef
MOONCAKE_PY_CADDR(const mc_reshard_plan_params_t *, params)
MOONCAKE_PY_CADDR(const uint8_t *, target_selected)
MOONCAKE_PY_CADDR(mc_reshard_table_h, plan)
MOONCAKE_PY_CADDR(mc_reshard_table_h, table)

/* The new table comes back as an address for mc_reshard_table_*(). */
%typemap(in, numinputs=0) mc_reshard_table_h *table_p (mc_reshard_table_h table = NULL)
{
    $1 = &table;
}
%typemap(argout) mc_reshard_table_h *table_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromVoidPtr(*$1));
}

/* The refusal comes back as (kind, index, value, limit). */
%typemap(in, numinputs=0) mc_reshard_plan_error_t *error_p (mc_reshard_plan_error_t err)
{
    memset(&err, 0, sizeof(err));
    $1 = &err;
}
%typemap(argout) mc_reshard_plan_error_t *error_p
{
    $result = SWIG_Python_AppendOutput(
        $result, Py_BuildValue("(LLKK)", (long long)$1->kind, (long long)$1->index,
                               (unsigned long long)$1->value, (unsigned long long)$1->limit));
}

/* A column is an address; numpy views it without a copy until the table
 * is destroyed. */
%typemap(out) const int64_t *mc_reshard_table_column
{
    $result = PyLong_FromVoidPtr((void *)$1);
}

/* ---- reshard_attr_ints(): integer columns of many Python objects ---------- */

/* reshard_attr_ints(objects, name, out, ndims, mapping): integer columns of
 * many Python objects' attributes in one pass (swig/pyhelpers.h has the
 * contract; the code lives in swig/pyhelpers.c).  It reads Python
 * objects, so it keeps the interpreter lock. */
%nothread mooncake_py_reshard_attr_ints;
%rename(reshard_attr_ints) mooncake_py_reshard_attr_ints;
PyObject *mooncake_py_reshard_attr_ints(PyObject *objects, PyObject *name, PyObject *out,
                                        PyObject *ndims, PyObject *mapping);

/* ---- mc_codec_ragged_*(): rows in, arrays by address, counts out ------------ */

/* The arrays a codec call reads or fills: addresses (int), as the
 * destination of mc_fastcopy_gather(); numpy arrays give theirs with
 * a.ctypes.data. */
%define MOONCAKE_PY_ADDR(TYPE, NAME)
%typemap(in) TYPE NAME
{
    if (!PyLong_Check($input)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int address, not '%s'", "NAME",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    $1 = ($1_ltype)(uintptr_t)PyLong_AsUnsignedLongLong($input);
    if (PyErr_Occurred())
        SWIG_fail;
}
%enddef
MOONCAKE_PY_ADDR(void *, data_out)
MOONCAKE_PY_ADDR(int64_t *, offsets_out)
MOONCAKE_PY_ADDR(int64_t *, shapes_out)
MOONCAKE_PY_ADDR(int16_t *, ndims_out)
MOONCAKE_PY_ADDR(uint8_t *, nulls_out)

%typemap(in, numinputs=0) size_t *elems_p (size_t elems = 0)
{
    $1 = &elems;
}
%typemap(argout) size_t *elems_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromSize_t(*$1));
}
%typemap(in, numinputs=0) uint32_t *max_ndim_p (uint32_t max_ndim = 0)
{
    $1 = &max_ndim;
}
%typemap(argout) uint32_t *max_ndim_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromUnsignedLong(*$1));
}

/* The rows: a sequence of C-contiguous arrays (their shape and bytes) or
 * None (a null row), each buffer held for the whole call. */
%typemap(in) (const mc_codec_row_t *rows, size_t n) (mooncake_py_rows_t rv = {0})
{
    if (mooncake_py_rows_init(&rv, $input) != 0)
        SWIG_fail;
    $1 = rv.rows;
    $2 = rv.n;
}

%typemap(freearg) (const mc_codec_row_t *rows, size_t n)
{
    mooncake_py_rows_cleanup(&rv$argnum);
}

%{
typedef struct mooncake_py_rows {
    Py_buffer *views;
    char *held;  /* held[i]: views[i] must be released */
    mc_codec_row_t *rows;
    size_t n;
} mooncake_py_rows_t;

static void mooncake_py_rows_cleanup(mooncake_py_rows_t *rv)
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
static int mooncake_py_rows_init(mooncake_py_rows_t *rv, PyObject *seq)
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
%}

/* ---- column builders: per-row objects of a codec payload in one call ------- */

/* codec_blob_rows(data, offsets, nulls, text) and
 * codec_ragged_rows(data, offsets, shapes, ndims, nulls): the rows of a
 * fetched payload as Python objects; codec_utf8_pack(values, offsets_out,
 * nulls_out): a column of str as its payload (swig/pyhelpers.h has the
 * contracts; the code lives in swig/pyhelpers.c).  They build Python
 * objects, so they keep the interpreter lock. */
%{
#include "pyhelpers.h"
%}
%nothread mooncake_py_blob_rows;
%nothread mooncake_py_ragged_rows;
%nothread mooncake_py_utf8_pack;
%rename(codec_blob_rows) mooncake_py_blob_rows;
%rename(codec_ragged_rows) mooncake_py_ragged_rows;
%rename(codec_utf8_pack) mooncake_py_utf8_pack;
PyObject *mooncake_py_blob_rows(PyObject *data, PyObject *offsets, PyObject *nulls, int text);
PyObject *mooncake_py_ragged_rows(PyObject *data, PyObject *offsets, PyObject *shapes,
                                  PyObject *ndims, PyObject *nulls);
PyObject *mooncake_py_utf8_pack(PyObject *values, PyObject *offsets_out, PyObject *nulls_out);

/* codec_ragged_column(values, array_type, offsets_out, shapes_out,
 * ndims_out, nulls_out): the one typing pass of a column of arrays and
 * its typed-ragged layout, or None for a column typed the general way
 * (swig/pyhelpers.h).  It reads Python objects, so it keeps the lock. */
%nothread mooncake_py_ragged_column;
%rename(codec_ragged_column) mooncake_py_ragged_column;
PyObject *mooncake_py_ragged_column(PyObject *values, PyObject *array_type,
                                    PyObject *offsets_out, PyObject *shapes_out,
                                    PyObject *ndims_out, PyObject *nulls_out);

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
static PyObject *mooncake_py_empty_bytes(void)
{
    return PyBytes_FromStringAndSize("", 0);
}

/* The storage of a bytes or bytearray object. */
static char *mooncake_py_bytes_data(PyObject *o)
{
    return PyByteArray_Check(o) ? PyByteArray_AS_STRING(o) : PyBytes_AS_STRING(o);
}

/* A bytes object (a bytearray when @p mutable_) of @p size for a read to
 * fill, or NULL (no exception set) when it cannot be allocated.  Tensor
 * reads ask for a bytearray: a tensor may view it and write to it.  From
 * 2 MiB up its pages are marked for huge pages (mc_store_prepare_buffer):
 * a fresh 16 MiB buffer faulted in 4 KiB pages cost more than its read. */
static PyObject *mooncake_py_bytes_for(uint64_t size, int mutable_)
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

%}

%{
/*
 * The buffers of the @p n items of tuple @p t as @p iovs, the views kept in
 * @p views; *nviews counts the views taken (release them with
 * mooncake_py_views_release(), also after a failure).  0, or -1 with an
 * exception set (TypeError naming item i as "<what> i" for a non-buffer).
 */
static int mooncake_py_views_get(PyObject *t, size_t n, const char *what, Py_buffer *views,
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

static void mooncake_py_views_release(Py_buffer *views, size_t nviews)
{
    size_t i;
    for (i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
}

/*
 * put_batch (upsert = 0) / upsert_batch (1): store values[i] under keys[i];
 * 0 when every key succeeded, else the first error.  Different lengths give
 * MC_INVALID_PARAMS.  Raises TypeError when keys is not a list of str or a
 * value is not bytes-like.
 */
static PyObject *mooncake_py_write_batch(mc_store_h h, int upsert, PyObject *keys,
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
%}

/* ---- hand-written methods that manage the interpreter lock themselves ---- */

%feature("nothread") mooncake_store::get;
%feature("nothread") mooncake_store::get_batch;
%feature("nothread") mooncake_store::put_batch;
%feature("nothread") mooncake_store::batch_exist;

%extend mooncake_store {
    /*
     * The object as bytes (a bytearray with @p mutable_), b"" when it is
     * missing or on any error (the upstream contract).  Raises only for a
     * key that is not a str.
     */
    PyObject *get(const char *key, int mutable_ = 0)
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
        st = mc_store_get_size_hint($self->h, key, &hint);
        if ((st == MC_OK) && (hint > 0) && (hint <= (uint64_t)PY_SSIZE_T_MAX)) {
            out = mooncake_py_bytes_for(hint, mutable_);
            if (out == NULL)
                return mooncake_py_empty_bytes();
            Py_BEGIN_ALLOW_THREADS
            st = mc_store_get($self->h, key, mooncake_py_bytes_data(out), (size_t)hint, &size);
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
        st = mc_store_query_cached($self->h, key, &q);
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
        st = mc_store_query_read($self->h, q, 0, mooncake_py_bytes_data(out), (size_t)size);
        mc_store_query_release(q);
        Py_END_ALLOW_THREADS
        if (st != MC_OK) {
            Py_DECREF(out);
            return mooncake_py_empty_bytes();
        }
        return out;
    }

    /*
     * A list with one bytes object (bytearray with @p mutable_) per key,
     * b"" for a miss or a failed read.  One master round trip for the
     * lookups, then every read runs concurrently.  Raises TypeError when
     * @p keys is not a list of str.
     */
    PyObject *get_batch(PyObject *keys, int mutable_ = 0)
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
            (void)mc_store_batch_query_cached($self->h, sv.v, n, qs, sts);
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
        return mooncake_py_write_batch($self->h, 0, keys, values, config);
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

/* ======================================================================
 * The whole object API (issue 3).
 *
 * Integer arguments (addresses, sizes, offsets) reach these helpers already
 * checked by mooncake.store: every one is an int in [0, 2**64-1] and nested
 * lists have matching shapes.  The helpers still refuse anything else with
 * a Python exception rather than trusting that, so a caller of the private
 * module cannot crash the interpreter with a bad argument (it can still
 * pass a bad *address*, which the library refuses unless it lies inside
 * registered memory).
 * ====================================================================== */

%{
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

/* A one-dimensional buffer of 64-bit integers (a numpy int64/uint64
 * array) as a PyMem array of @p n uint64, without an object per value:
 * 1 done, 0 not such a buffer (nothing set), -1 exception set. */
static int mooncake_py_u64buf(PyObject *seq, size_t n, uint64_t **v_p)
{
    Py_buffer view;
    const char *f;
    int is_signed;
    if (!PyObject_CheckBuffer(seq) || PyBytes_Check(seq) || PyByteArray_Check(seq))
        return 0;
    if (PyObject_GetBuffer(seq, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        return 0;
    }
    f = (view.format != NULL) ? view.format : "B";
    if ((*f == '<') || (*f == '=') || (*f == '@'))
        f++;
    is_signed = (strcmp(f, "q") == 0) || (strcmp(f, "l") == 0);
    if ((view.ndim != 1) || (view.itemsize != 8) ||
        (!is_signed && (strcmp(f, "Q") != 0) && (strcmp(f, "L") != 0))) {
        PyBuffer_Release(&view);
        return 0;
    }
    if ((size_t)view.shape[0] != n) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "list lengths differ");
        return -1;
    }
    *v_p = PyMem_Calloc(n + 1, sizeof(**v_p));
    if (*v_p == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*v_p, view.buf, n * sizeof(**v_p));
    PyBuffer_Release(&view);
    for (size_t i = 0; is_signed && (i < n); i++) {
        if ((int64_t)(*v_p)[i] < 0) { /* as PyLong_AsUnsignedLongLong refuses it */
            PyErr_SetString(PyExc_OverflowError, "can't convert negative value to unsigned int");
            PyMem_Free(*v_p);
            *v_p = NULL;
            return -1;
        }
    }
    return 1;
}

/* A sequence of ints (or a 1-d int64/uint64 buffer) as a PyMem array of
 * @p n uint64 (n must match).  NULL with an exception set on any error. */
static uint64_t *mooncake_py_u64v(PyObject *seq, size_t n)
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

/* A list of n Python ints from C values. */
static PyObject *mooncake_py_list_i64(const int64_t *v, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    size_t i;
    if (list == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong((long long)v[i]);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, x);
    }
    return list;
}

/* A PyMem array of @p n statuses preset to MC_INTERNAL_ERROR (what a
 * slot the library never reached reports); NULL with MemoryError. */
static mc_status_t *mooncake_py_status_array(size_t n)
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

static PyObject *mooncake_py_list_status(const mc_status_t *v, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    size_t i;
    if (list == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong((long)v[i]);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, x);
    }
    return list;
}

/* The per-key statuses of a batch call that returned @p st, as a list: a
 * call that failed as a whole may leave slots unset, which report @p st. */
static PyObject *mooncake_py_batch_statuses(mc_status_t *sts, size_t n, mc_status_t st)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if ((st != MC_OK) && (sts[i] == MC_INTERNAL_ERROR))
            sts[i] = st;
    }
    return mooncake_py_list_status(sts, n);
}

/*
 * Nested per-key lists of (address, size[, offset]) as the mc_iov_t and
 * offset arrays the library takes: key i has counts[i] entries at
 * bufs[i][0..counts[i]).  One PyMem block per array of arrays.
 */
typedef struct mooncake_py_nested {
    size_t n;
    size_t *counts;
    mc_iov_t **bufs;
    uint64_t **offs;   /* NULL when no offsets were given */
} mooncake_py_nested_t;

static void mooncake_py_nested_cleanup(mooncake_py_nested_t *nd)
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
static int mooncake_py_nested_init(mooncake_py_nested_t *nd, size_t n, PyObject *ptrs,
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

/* ---- BufferHandle: memory exported through the buffer protocol ---------- */

/*
 * One object type serves two purposes:
 *   - get_buffer() results: it owns an mc_store_buffer_h and releases it in
 *     tp_dealloc (the library keeps the memory valid after a store close);
 *   - BufferPool lease views: it only describes (ptr, size) memory the pool
 *     owns, and counts the buffers it exported so the pool can refuse to
 *     free memory a live memoryview still points into.
 */
typedef struct mooncake_py_bufobj {
    PyObject_HEAD
    mc_store_buffer_h handle; /* NULL for a plain region view */
    char *data;
    Py_ssize_t size;
    Py_ssize_t exports;
    const char *format; /* struct format of the exported buffer */
} mooncake_py_bufobj_t;

static void mooncake_py_bufobj_dealloc(PyObject *self)
{
    mooncake_py_bufobj_t *b = (mooncake_py_bufobj_t *)self;
    if (b->handle != NULL) {
        mc_store_buffer_h h = b->handle;
        b->handle = NULL;
        Py_BEGIN_ALLOW_THREADS
        mc_store_buffer_release(h);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free(self);
}

static int mooncake_py_bufobj_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    mooncake_py_bufobj_t *b = (mooncake_py_bufobj_t *)self;
    if (PyBuffer_FillInfo(view, self, b->data, b->size, 0, flags) != 0)
        return -1;
    /* get_buffer(): format 'b' (signed char) as upstream's BufferHandle. */
    if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT)
        view->format = (char *)b->format;
    b->exports++;
    return 0;
}

static void mooncake_py_bufobj_releasebuffer(PyObject *self, Py_buffer *view)
{
    (void)view;
    ((mooncake_py_bufobj_t *)self)->exports--;
}

static PyBufferProcs mooncake_py_bufobj_as_buffer = {
    mooncake_py_bufobj_getbuffer,
    mooncake_py_bufobj_releasebuffer,
};

static Py_ssize_t mooncake_py_bufobj_len(PyObject *self)
{
    return ((mooncake_py_bufobj_t *)self)->size;
}

static PySequenceMethods mooncake_py_bufobj_as_sequence = {
    mooncake_py_bufobj_len, /* sq_length */
    0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static PyObject *mooncake_py_bufobj_ptr(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)
                                       ((mooncake_py_bufobj_t *)self)->data);
}

static PyObject *mooncake_py_bufobj_size(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(((mooncake_py_bufobj_t *)self)->size);
}

static PyObject *mooncake_py_bufobj_exports(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(((mooncake_py_bufobj_t *)self)->exports);
}

static PyObject *mooncake_py_bufobj_repr(PyObject *self)
{
    mooncake_py_bufobj_t *b = (mooncake_py_bufobj_t *)self;
    return PyUnicode_FromFormat("<BufferHandle ptr=%p size=%zd>", (void *)b->data, b->size);
}

static PyMethodDef mooncake_py_bufobj_methods[] = {
    {"ptr", mooncake_py_bufobj_ptr, METH_NOARGS, "Address of the first byte."},
    {"size", mooncake_py_bufobj_size, METH_NOARGS, "Size in bytes."},
    {"exports", mooncake_py_bufobj_exports, METH_NOARGS,
     "Number of buffers (memoryviews, arrays) currently exported."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject mooncake_py_bufobj_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake.capi.BufferHandle",
    .tp_basicsize = sizeof(mooncake_py_bufobj_t),
    .tp_dealloc = mooncake_py_bufobj_dealloc,
    .tp_repr = mooncake_py_bufobj_repr,
    .tp_as_sequence = &mooncake_py_bufobj_as_sequence,
    .tp_as_buffer = &mooncake_py_bufobj_as_buffer,
    /* a base type: BufferPool's BufferLeaseView is a Python subclass */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Memory exported through the buffer protocol (1-D, format 'b', writable).",
    .tp_methods = mooncake_py_bufobj_methods,
};

/* A new BufferHandle over @p data; owns @p handle (may be NULL). */
static PyObject *mooncake_py_bufobj_new(mc_store_buffer_h handle, void *data, uint64_t size,
                                        const char *format)
{
    mooncake_py_bufobj_t *b;
    if (size > (uint64_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "buffer too large");
        return NULL;
    }
    b = PyObject_New(mooncake_py_bufobj_t, &mooncake_py_bufobj_type);
    if (b == NULL)
        return NULL;
    b->handle = handle;
    b->data = data;
    b->size = (Py_ssize_t)size;
    b->exports = 0;
    b->format = format;
    return (PyObject *)b;
}
%}

%init %{
    if (PyType_Ready(&mooncake_py_bufobj_type) < 0)
        return NULL;
    Py_INCREF(&mooncake_py_bufobj_type);
    if (PyModule_AddObject(m, "BufferHandle", (PyObject *)&mooncake_py_bufobj_type) < 0) {
        Py_DECREF(&mooncake_py_bufobj_type);
        return NULL;
    }
%}

/* The type lives in the extension module; re-export it from the shadow module. */
%pythoncode %{
BufferHandle = _capi.BufferHandle
%}

%nothread mooncake_region_view;
%nothread mooncake_region_view_as;
%inline %{
/* A BufferHandle over memory the caller owns (BufferPool leases).  The
 * caller must keep the memory valid while exports() > 0. */
static PyObject *mooncake_region_view(uint64_t addr, uint64_t size)
{
    if ((addr == 0) && (size > 0)) {
        PyErr_SetString(PyExc_ValueError, "NULL address");
        return NULL;
    }
    /* Unsigned bytes, so `view[a:b] = b"..."` works on a lease. */
    return mooncake_py_bufobj_new(NULL, (void *)(uintptr_t)addr, size, "B");
}

/* mooncake_region_view() as an instance of @p cls, a Python subclass of
 * BufferHandle (BufferPool's BufferLeaseView), whose own attributes keep
 * the owner of the memory alive. */
static PyObject *mooncake_region_view_as(PyObject *cls, uint64_t addr, uint64_t size)
{
    mooncake_py_bufobj_t *b;
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, &mooncake_py_bufobj_type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a subclass of BufferHandle");
        return NULL;
    }
    if (((addr == 0) && (size > 0)) || (size > (uint64_t)PY_SSIZE_T_MAX)) {
        PyErr_SetString(PyExc_ValueError, "NULL address or size too large");
        return NULL;
    }
    b = (mooncake_py_bufobj_t *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
    if (b == NULL)
        return NULL;
    b->handle = NULL;
    b->data = (char *)(uintptr_t)addr;
    b->size = (Py_ssize_t)size;
    b->exports = 0;
    b->format = "B";
    return (PyObject *)b;
}

/* mc_host_mem_alloc() as an address, 0 on failure. */
static uint64_t mooncake_host_mem_alloc(uint64_t size)
{
    void *p = NULL;
    if (size > (uint64_t)SIZE_MAX)
        return 0;
    /* 0 too: the library refuses it, with upstream's text as the detail */
    if (mc_host_mem_alloc((size_t)size, &p) != MC_OK)
        return 0;
    return (uint64_t)(uintptr_t)p;
}

static int mooncake_host_mem_free(uint64_t addr)
{
    return mc_host_mem_free((void *)(uintptr_t)addr);
}

/* The addresses of the pluggable allocator pair, for torch
 * (mooncake.store.get_alloc_func_addr / get_free_func_addr). */
static uint64_t mooncake_host_mem_alloc_func_addr(void)
{
    return (uint64_t)(uintptr_t)&mc_host_mem_pluggable_alloc;
}

static uint64_t mooncake_host_mem_free_func_addr(void)
{
    return (uint64_t)(uintptr_t)&mc_host_mem_pluggable_free;
}
%}

/* ---- plain calls: -threads releases the lock around each ---------------- */

%extend mooncake_store {
    int setup_dummy(uint64_t mem_pool_size, uint64_t local_buffer_size,
                    const char *server_address)
    {
        return mc_store_setup_dummy($self->h, mem_pool_size, local_buffer_size,
                                    server_address);
    }

    /* Counter @p which (0 dummies, 1 mapped bytes, 2 allocated bytes) of
     * the real client serving this dummy, or a negative status. */
    int64_t dummy_stat(int which)
    {
        uint64_t v[3] = {0, 0, 0};
        mc_status_t st = mc_store_dummy_stats($self->h, &v[0], &v[1], &v[2]);
        if (st != MC_OK)
            return st;
        return ((which >= 0) && (which < 3)) ? (int64_t)v[which] : MC_INVALID_PARAMS;
    }

    int is_dummy()
    {
        return mc_store_is_dummy($self->h);
    }

    /* The SSD tier (docs/tiers.md): start it in @p dir. */
    int offload_start(const char *dir)
    {
        return mc_store_offload_start($self->h, dir);
    }

    /* Turn the SSD tier off for good and hold @p grace_seconds
     * (unmount_local_disk_segment). */
    int offload_stop(uint64_t grace_seconds)
    {
        return mc_store_offload_stop($self->h, grace_seconds);
    }

    /* NoF segments (docs/tiers.md §8): serve @p size bytes of @p path. */
    int nof_mount(const char *path, uint64_t size)
    {
        return mc_store_nof_mount($self->h, path, size);
    }

    int nof_unmount(const char *path)
    {
        return mc_store_nof_unmount($self->h, path);
    }

    /* Counter @p which of mc_store_disk_stats_t (in its field order), or
     * a negative status. */
    int64_t offload_stat(int which)
    {
        mc_store_disk_stats_t st;
        uint64_t v[9];
        mc_status_t rc = mc_store_offload_stats($self->h, &st);
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

    int upsert(const char *key, const void *data, size_t len,
               const mc_replicate_config_t *config = NULL)
    {
        return mc_store_upsert($self->h, key, data, len, config);
    }

    int register_buffer(uint64_t addr, uint64_t len)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_register_buffer($self->h, (void *)(uintptr_t)addr, (size_t)len);
    }

    int unregister_buffer(uint64_t addr)
    {
        return mc_store_unregister_buffer($self->h, (void *)(uintptr_t)addr);
    }

    /* An address in the local buffer, 0 on failure. */
    uint64_t mem_pool_alloc(uint64_t size)
    {
        void *p = NULL;
        if ((size == 0) || (size > (uint64_t)SIZE_MAX))
            return 0;
        if (mc_store_mem_pool_alloc($self->h, (size_t)size, &p) != MC_OK)
            return 0;
        return (uint64_t)(uintptr_t)p;
    }

    int mem_pool_free(uint64_t addr)
    {
        return mc_store_mem_pool_free($self->h, (void *)(uintptr_t)addr);
    }

    int put_from(const char *key, uint64_t addr, uint64_t len,
                 const mc_replicate_config_t *config = NULL)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_put_from($self->h, key, (const void *)(uintptr_t)addr, (size_t)len,
                                 config);
    }

    int upsert_from(const char *key, uint64_t addr, uint64_t len,
                    const mc_replicate_config_t *config = NULL)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_upsert_from($self->h, key, (const void *)(uintptr_t)addr,
                                    (size_t)len, config);
    }

    int64_t get_into(const char *key, uint64_t addr, uint64_t len)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_get_into($self->h, key, (void *)(uintptr_t)addr, (size_t)len);
    }

    /* Number removed, or a negative status. */
    int64_t remove_by_regex(const char *regex, int force = 0)
    {
        int64_t count = 0;
        mc_status_t st = mc_store_remove_by_regex($self->h, regex, force, &count);
        return (st != MC_OK) ? (int64_t)st : count;
    }

    int64_t remove_all(int force = 0)
    {
        int64_t count = 0;
        mc_status_t st = mc_store_remove_all($self->h, force, &count);
        return (st != MC_OK) ? (int64_t)st : count;
    }

    int get_session_end(const char *const *strs, size_t n)
    {
        return mc_store_get_session_end($self->h, strs, n);
    }
}

/* ---- segment mounting ------------------------------------------------------------ */

%feature("nothread") mooncake_store::mount_segment;
%feature("nothread") mooncake_store::allocate_and_mount_segment;

%extend mooncake_store {
    /* (status, id): id is "" unless status is 0 */
    PyObject *mount_segment(const char *path, uint64_t size, uint64_t offset,
                            const char *protocol, const char *location)
    {
        mc_segment_id_t id;
        mc_status_t st;
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_mount_segment($self->h, path, size, offset, protocol, location, &id);
        Py_END_ALLOW_THREADS
        return Py_BuildValue("(is)", (int)st, (st == MC_OK) ? id.id : "");
    }

    /* (status, id, allocated_size) */
    PyObject *allocate_and_mount_segment(uint64_t size, const char *protocol,
                                         const char *location)
    {
        mc_segment_id_t id;
        uint64_t allocated = 0;
        mc_status_t st;
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_allocate_and_mount_segment($self->h, size, protocol, location, &id,
                                                 &allocated);
        Py_END_ALLOW_THREADS
        return Py_BuildValue("(isK)", (int)st, (st == MC_OK) ? id.id : "",
                             (unsigned long long)allocated);
    }

    /* and_free 0: mc_store_unmount_segments, else ..._and_free_segments */
    int unmount_segments(const char *const *strs, size_t n, uint64_t grace_period_seconds,
                         int and_free)
    {
        if (and_free)
            return mc_store_unmount_and_free_segments($self->h, strs, n,
                                                      grace_period_seconds);
        return mc_store_unmount_segments($self->h, strs, n, grace_period_seconds);
    }
}

/* ---- copy and move tasks --------------------------------------------------------- */

%feature("nothread") mooncake_store::create_copy_task;
%feature("nothread") mooncake_store::create_move_task;
%feature("nothread") mooncake_store::query_task;

%extend mooncake_store {
    /* (status, task id text): the id is "" unless status is 0 */
    PyObject *create_copy_task(const char *key, const char *const *strs, size_t n)
    {
        mc_task_id_t id;
        mc_status_t st;
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_create_copy_task($self->h, key, strs, n, &id);
        Py_END_ALLOW_THREADS
        return Py_BuildValue("(is)", (int)st, (st == MC_OK) ? id.id : "");
    }

    PyObject *create_move_task(const char *key, const char *source, const char *target)
    {
        mc_task_id_t id;
        mc_status_t st;
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_create_move_task($self->h, key, source, target, &id);
        Py_END_ALLOW_THREADS
        return Py_BuildValue("(is)", (int)st, (st == MC_OK) ? id.id : "");
    }

    /* (status, None) or (0, (type, status, created_ms, updated_ms, client id
     * text, message)); a message that is not UTF-8 is decoded with
     * replacement characters rather than failing the call. */
    PyObject *query_task(const char *task_id)
    {
        mc_store_task_info_t *info = malloc(sizeof(*info));
        mc_status_t st;
        PyObject *msg;
        if (info == NULL)
            return PyErr_NoMemory();
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_query_task($self->h, task_id, info);
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
}

/* ---- hand-written calls ------------------------------------------------------ */

%feature("nothread") mooncake_store::write_parts;
%feature("nothread") mooncake_store::batch_write_parts;
%feature("nothread") mooncake_store::upsert_batch;
%feature("nothread") mooncake_store::batch_remove;
%feature("nothread") mooncake_store::batch_replica_clear;
%feature("nothread") mooncake_store::batch_zc;
%feature("nothread") mooncake_store::batch_zc_flat;
%feature("nothread") mooncake_store::read_ranges;
%feature("nothread") mooncake_store::session_keys;
%feature("nothread") mooncake_store::put_session_start;
%feature("nothread") mooncake_store::replica_descs;
%feature("nothread") mooncake_store::get_buffers;

%{
/* Operations of batch_zc(). */
enum {
    MOONCAKE_ZC_PUT_FROM = 0,
    MOONCAKE_ZC_UPSERT_FROM = 1,
    MOONCAKE_ZC_GET_INTO = 2,
    MOONCAKE_ZC_SESSION_READ = 3,
    MOONCAKE_ZC_SESSION_WRITE = 4
};
/* Operations of session_keys(). */
enum {
    MOONCAKE_SK_GET_START = 0,
    MOONCAKE_SK_PUT_END = 1,
    MOONCAKE_SK_PUT_REVOKE = 2
};

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
%}

%extend mooncake_store {
    /* put_parts (upsert = 0) or upsert_parts (1): @p parts is a sequence of
     * bytes-like objects, stored as their concatenation. */
    PyObject *write_parts(int upsert, const char *key, PyObject *parts,
                          const mc_replicate_config_t *config = NULL)
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
            st = mc_store_upsert_parts($self->h, key, iovs, n, config);
        else
            st = mc_store_put_parts($self->h, key, iovs, n, config);
        Py_END_ALLOW_THREADS
        ret = PyLong_FromLong((long)st);

    cleanup:
        mooncake_py_views_release(views, nviews);
        PyMem_Free(iovs);
        PyMem_Free(views);
        Py_DECREF(t);
        return ret;
    }

    /*
     * batch_put_parts (upsert = 0) / batch_upsert_parts (1): object i is
     * the concatenation of the bytes-like items of parts[i], read from any
     * memory (mc_store_batch_put_parts(): one master round trip, no staging
     * copy).  One status per key.  TypeError for keys that are not str, a
     * parts[i] that is not a sequence of bytes-like objects; ValueError when
     * the lists differ in length.
     */
    PyObject *batch_write_parts(int upsert, PyObject *keys, PyObject *parts,
                                const mc_replicate_config_t *config = NULL)
    {
        mooncake_py_strv_t sv;
        PyObject *pt = NULL, **fast = NULL, *list = NULL;
        Py_buffer *views = NULL;
        mc_iov_t *iovs = NULL;
        const mc_iov_t **bufs = NULL;
        size_t *counts = NULL;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        size_t i, n, total = 0, nviews = 0;

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
        if ((views == NULL) || (iovs == NULL)) {
            PyErr_NoMemory();
            goto cleanup;
        }
        for (i = 0; i < n; i++) {
            size_t first = nviews;
            for (size_t j = 0; j < counts[i]; j++) {
                PyObject *o = PySequence_Fast_GET_ITEM(fast[i], (Py_ssize_t)j);
                if (!PyObject_CheckBuffer(o)) {
                    PyErr_Format(PyExc_TypeError, "parts %zu item %zu: a bytes-like object "
                                 "is required, not '%s'", i, j, Py_TYPE(o)->tp_name);
                    goto cleanup;
                }
                if (PyObject_GetBuffer(o, &views[nviews], PyBUF_SIMPLE) != 0)
                    goto cleanup;
                iovs[nviews].base = views[nviews].buf;
                iovs[nviews].len  = (size_t)views[nviews].len;
                nviews++;
            }
            bufs[i] = &iovs[first];
        }
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            if (upsert)
                st = mc_store_batch_upsert_parts($self->h, sv.v, bufs, counts, n, config, sts);
            else
                st = mc_store_batch_put_parts($self->h, sv.v, bufs, counts, n, config, sts);
            Py_END_ALLOW_THREADS
        }
        list = mooncake_py_batch_statuses(sts, n, st);

    cleanup:
        mooncake_py_views_release(views, nviews);
        for (i = 0; (fast != NULL) && (i < n); i++)
            Py_XDECREF(fast[i]);
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

    /* upsert_batch: as put_batch, with upsert semantics. */
    PyObject *upsert_batch(PyObject *keys, PyObject *values,
                           const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_write_batch($self->h, 1, keys, values, config);
    }

    /* Per-key statuses of a batch remove. */
    PyObject *batch_remove(PyObject *keys, int force = 0)
    {
        mooncake_py_strv_t sv;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        sts = mooncake_py_status_array(n);
        if (sts == NULL)
            goto cleanup;
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            st = mc_store_batch_remove($self->h, sv.v, n, force, sts);
            Py_END_ALLOW_THREADS
        }
        list = mooncake_py_batch_statuses(sts, n, st);

    cleanup:
        PyMem_Free(sts);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /* Per-key statuses of a batch replica clear (0 = cleared). */
    PyObject *batch_replica_clear(PyObject *keys, const char *segment_name)
    {
        mooncake_py_strv_t sv;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        sts = mooncake_py_status_array(sv.n);
        if (sts == NULL)
            goto cleanup;
        Py_BEGIN_ALLOW_THREADS
        st = mc_store_batch_replica_clear($self->h, sv.v, sv.n, segment_name, sts);
        Py_END_ALLOW_THREADS
        list = mooncake_py_batch_statuses(sts, sv.n, st);

    cleanup:
        PyMem_Free(sts);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /*
     * The batch zero-copy calls over nested per-key (address, size[,
     * offset]) lists; @p op is one of MOONCAKE_ZC_*.  A list of one int per
     * key: a status (writes) or bytes moved / negative status (reads).
     */
    PyObject *batch_zc(int op, PyObject *keys, PyObject *ptrs, PyObject *sizes,
                       PyObject *offsets, const mc_replicate_config_t *config = NULL)
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
                st = mooncake_py_zc_call($self->h, op, sv.v, (const mc_iov_t *const *)nd.bufs,
                                         nd.counts, n, config, res, sts);
                break;
            case MOONCAKE_ZC_SESSION_READ:
                st = mc_store_get_session_read($self->h, sv.v,
                                               (const mc_iov_t *const *)nd.bufs,
                                               (const uint64_t *const *)nd.offs,
                                               nd.counts, n, res);
                break;
            default:
                st = mc_store_put_session_write($self->h, sv.v,
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

    /*
     * batch_put_from / batch_upsert_from / batch_get_into with one buffer
     * per key, checked and converted here in one pass (the hot path of
     * small-value batches).  TypeError for keys that are not str or items
     * that are not ints (bools included), ValueError for a NUL in a key or
     * lists of different lengths; a key whose address or size is outside
     * [0, 2**64-1] gets INVALID_PARAMS and is not sent.  @p op is
     * MOONCAKE_ZC_PUT_FROM, _UPSERT_FROM or _GET_INTO.
     */
    PyObject *batch_zc_flat(int op, PyObject *keys, PyObject *ptrs, PyObject *sizes,
                            const mc_replicate_config_t *config = NULL)
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
            st = mooncake_py_zc_call($self->h, op, selk, bufs, counts, m, config, res, sts);
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
     * get_into_ranges, flattened: fragment i reads lens[i] bytes of object
     * keys[i] at src[i] into bufs[i] + dst[i].  One int per fragment.
     */
    PyObject *read_ranges(PyObject *keys, PyObject *bufs, PyObject *dst, PyObject *src,
                          PyObject *lens)
    {
        mooncake_py_strv_t sv;
        uint64_t *vb = NULL, *vd = NULL, *vs = NULL, *vl = NULL;
        mc_store_range_t *r = NULL;
        int64_t *res = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t i, n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        if (((vb = mooncake_py_u64v(bufs, n)) == NULL) ||
            ((vd = mooncake_py_u64v(dst, n)) == NULL) ||
            ((vs = mooncake_py_u64v(src, n)) == NULL) ||
            ((vl = mooncake_py_u64v(lens, n)) == NULL))
            goto cleanup;
        r = PyMem_Calloc(n + 1, sizeof(*r));
        res = PyMem_Calloc(n + 1, sizeof(*res));
        if ((r == NULL) || (res == NULL)) {
            PyErr_NoMemory();
            goto cleanup;
        }
        for (i = 0; i < n; i++) {
            r[i].key = sv.v[i];
            r[i].buffer = (void *)(uintptr_t)vb[i];
            r[i].dst_offset = vd[i];
            r[i].src_offset = vs[i];
            r[i].length = vl[i];
            r[i].result = MC_INTERNAL_ERROR;
        }
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            st = mc_store_read_ranges($self->h, r, n);
            Py_END_ALLOW_THREADS
        }
        for (i = 0; i < n; i++) {
            res[i] = r[i].result;
            if ((st != MC_OK) && (res[i] == MC_INTERNAL_ERROR))
                res[i] = st;
        }
        list = mooncake_py_list_i64(res, n);

    cleanup:
        PyMem_Free(res);
        PyMem_Free(r);
        PyMem_Free(vl);
        PyMem_Free(vs);
        PyMem_Free(vd);
        PyMem_Free(vb);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /* Per-key statuses of a call over keys only (MOONCAKE_SK_*). */
    PyObject *session_keys(int op, PyObject *keys)
    {
        mooncake_py_strv_t sv;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t n;

        if ((op < MOONCAKE_SK_GET_START) || (op > MOONCAKE_SK_PUT_REVOKE)) {
            PyErr_SetString(PyExc_ValueError, "unknown operation");
            return NULL;
        }
        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        sts = mooncake_py_status_array(n);
        if (sts == NULL)
            goto cleanup;
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            if (op == MOONCAKE_SK_GET_START)
                st = mc_store_get_session_start($self->h, sv.v, n, sts);
            else if (op == MOONCAKE_SK_PUT_END)
                st = mc_store_put_session_end($self->h, sv.v, n, sts);
            else
                st = mc_store_put_session_revoke($self->h, sv.v, n, sts);
            Py_END_ALLOW_THREADS
        }
        list = mooncake_py_batch_statuses(sts, n, st);

    cleanup:
        PyMem_Free(sts);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /* Reserve objects of sizes[i] bytes; per-key statuses. */
    PyObject *put_session_start(PyObject *keys, PyObject *sizes,
                                const mc_replicate_config_t *config = NULL)
    {
        mooncake_py_strv_t sv;
        uint64_t *vz = NULL;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        vz = mooncake_py_u64v(sizes, n);
        if (vz == NULL)
            goto cleanup;
        sts = mooncake_py_status_array(n);
        if (sts == NULL)
            goto cleanup;
        if (n > 0) {
            Py_BEGIN_ALLOW_THREADS
            st = mc_store_put_session_start($self->h, sv.v, vz, n, config, sts);
            Py_END_ALLOW_THREADS
        }
        list = mooncake_py_batch_statuses(sts, n, st);

    cleanup:
        PyMem_Free(sts);
        PyMem_Free(vz);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /*
     * Replicas of each key: per key either a negative status (int) or a
     * list of (status, kind (mc_replica_kind_t), addr, size, segment,
     * protocol, file_path, shard_idx, aligned_size) tuples (file_path ""
     * for a memory replica;
     * the last two set for a DFS replica, protocol "dfs").
     */
    PyObject *replica_descs(PyObject *keys)
    {
        mooncake_py_strv_t sv;
        mc_store_query_h *qs = NULL;
        mc_status_t *sts = NULL;
        PyObject *list = NULL;
        size_t i, j, n;

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
            (void)mc_store_batch_query($self->h, sv.v, n, qs, sts);
            Py_END_ALLOW_THREADS
        }
        list = PyList_New((Py_ssize_t)n);
        if (list == NULL)
            goto cleanup;
        for (i = 0; i < n; i++) {
            PyObject *item;
            if ((sts[i] != MC_OK) || (qs[i] == NULL)) {
                item = PyLong_FromLong((long)((sts[i] != MC_OK) ? sts[i] : MC_INTERNAL_ERROR));
            } else {
                size_t m = mc_store_query_replica_count(qs[i]);
                item = PyList_New(0);
                for (j = 0; (item != NULL) && (j < m); j++) {
                    mc_replica_desc_t d;
                    char path[4096];
                    uint32_t shard = 0;
                    uint64_t span = 0;
                    PyObject *tup;
                    memset(&d, 0, sizeof(d));
                    if (mc_store_query_replica(qs[i], j, &d) != MC_OK)
                        continue;
                    path[0] = '\0';
                    /* both disk kinds: the file, when this process knows it
                     * (a dummy's real client does not pass it on: "") */
                    if ((d.is_memory == MC_REPLICA_KIND_DISK) ||
                        (d.is_memory == MC_REPLICA_KIND_LOCAL_DISK)) {
                        if (mc_store_query_disk_replica(qs[i], path, sizeof(path), NULL) != MC_OK)
                            path[0] = '\0';
                        (void)mc_store_query_dfs_replica(qs[i], &shard, &span);
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
            }
            if (item == NULL) {
                Py_CLEAR(list);
                goto cleanup;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
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

    /* Per key a BufferHandle, or the negative status of the miss/failure. */
    PyObject *get_buffers(PyObject *keys)
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
            st = mc_store_batch_get_buffer($self->h, sv.v, n, bufs, sts);
            Py_END_ALLOW_THREADS
        }
        list = PyList_New((Py_ssize_t)n);
        if (list == NULL)
            goto cleanup;
        for (i = 0; i < n; i++) {
            PyObject *item;
            if ((sts[i] == MC_OK) && (bufs[i] != NULL)) {
                item = mooncake_py_bufobj_new(bufs[i], mc_store_buffer_data(bufs[i]),
                                              mc_store_buffer_size(bufs[i]), "b");
                if (item != NULL)
                    bufs[i] = NULL; /* owned by the object now */
            } else {
                mc_status_t s = (sts[i] != MC_OK) ? sts[i]
                                : ((st != MC_OK) ? st : MC_INTERNAL_ERROR);
                item = PyLong_FromLong((long)s);
            }
            if (item == NULL) {
                Py_CLEAR(list);
                goto cleanup;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
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
}

/* ======================================================================
 * Tensor objects (mooncake/tensor.h).  The torch side lives in
 * mooncake.store; these helpers only move numbers across: a tensor going
 * in is a record of MOONCAKE_TENSOR_IN ints, a decoded header coming out
 * one of MOONCAKE_TENSOR_OUT ints (see mooncake_py_tensor_out()).
 * ====================================================================== */

%feature("nothread") mooncake_store::tensor_put;
%feature("nothread") mooncake_store::tensor_put_from;
%feature("nothread") mooncake_store::tensor_get_into;
%feature("nothread") tensor_decode;
%feature("nothread") tensor_wrap;

%{
/* In: dtype, ndim, shape[8], address of the contiguous data. */
#define MOONCAKE_TENSOR_IN 11
/* Out: result, dtype, ndim, data_offset, data_bytes, local_shape[8]. */
#define MOONCAKE_TENSOR_OUT 13

/* Write the record of a read that returned @p result (bytes, or a
 * negative status: then only that is meaningful). */
static void mooncake_py_tensor_out(int64_t *rec, int64_t result, const mc_tensor_meta_t *m)
{
    int i;
    memset(rec, 0, MOONCAKE_TENSOR_OUT * sizeof(*rec));
    rec[0] = result;
    if (result < 0)
        return;
    rec[1] = m->dtype;
    rec[2] = m->ndim;
    rec[3] = (int64_t)m->data_offset;
    rec[4] = (int64_t)m->data_bytes;
    for (i = 0; i < MC_TENSOR_MAX_DIMS; i++)
        rec[5 + i] = m->local_shape[i];
}

static PyObject *mooncake_py_tensor_rec(int64_t result, const mc_tensor_meta_t *m)
{
    int64_t rec[MOONCAKE_TENSOR_OUT];
    mooncake_py_tensor_out(rec, result, m);
    return mooncake_py_list_i64(rec, MOONCAKE_TENSOR_OUT);
}

/*
 * Decoded tensors leave as DLPack capsules, the C tensor exchange ABI
 * every torch since 1.10 imports without a copy: one import call per
 * tensor instead of a frombuffer and a reshape.  The structs below are
 * DLPack's DLManagedTensor (v0.x layout), spelled out so the module needs
 * no framework header.  A capsule named "dltensor" owns its box until a
 * consumer renames it "used_dltensor" and takes over the deleter.
 */
typedef struct mooncake_dl_tensor {
    void *data;
    int32_t device_type; /* DLDevice: kDLCPU = 1 */
    int32_t device_id;
    int32_t ndim;
    uint8_t code;        /* DLDataType: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4 */
    uint8_t bits;
    uint16_t lanes;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} mooncake_dl_tensor_t;

typedef struct mooncake_dl_managed {
    mooncake_dl_tensor_t t;
    void *manager_ctx;
    void (*deleter)(struct mooncake_dl_managed *self);
} mooncake_dl_managed_t;

/* A managed tensor with its shape and the Python object owning the memory. */
typedef struct mooncake_dl_box {
    mooncake_dl_managed_t m;
    PyObject *owner; /* a reference, or NULL for the caller's memory */
    int64_t shape[MC_TENSOR_MAX_DIMS];
    int64_t strides[MC_TENSOR_MAX_DIMS];
} mooncake_dl_box_t;

/* The consumer may free a tensor on any thread, with or without the GIL. */
static void mooncake_dl_delete(mooncake_dl_managed_t *self)
{
    mooncake_dl_box_t *b = (mooncake_dl_box_t *)self;
    if ((b->owner != NULL) && Py_IsInitialized()) { /* else the interpreter is gone */
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(b->owner);
        PyGILState_Release(g);
    }
    PyMem_RawFree(b);
}

static void mooncake_dl_capsule_free(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) /* never consumed */
        mooncake_dl_delete(PyCapsule_GetPointer(cap, "dltensor"));
}

/*
 * The tensor @p m describes, whose object starts at @p base, as a DLPack
 * capsule; @p owner (may be NULL) gets a new reference kept until the
 * tensor is freed.  NULL without an exception when DLPack cannot carry it
 * (bool, float8, empty tensors: the caller falls back to a record).
 */
static PyObject *mooncake_py_tensor_capsule(PyObject *owner, void *base,
                                            const mc_tensor_meta_t *m)
{
    static const struct { uint8_t code, bits; } dl[MC_TENSOR_DTYPE_COUNT] = {
        [MC_TENSOR_FLOAT32] = {2, 32}, [MC_TENSOR_FLOAT64] = {2, 64},
        [MC_TENSOR_INT8] = {0, 8},     [MC_TENSOR_UINT8] = {1, 8},
        [MC_TENSOR_INT16] = {0, 16},   [MC_TENSOR_INT32] = {0, 32},
        [MC_TENSOR_INT64] = {0, 64},   [MC_TENSOR_FLOAT16] = {2, 16},
        [MC_TENSOR_BFLOAT16] = {4, 16},
    };
    mooncake_dl_box_t *b;
    PyObject *cap;
    int64_t stride = 1;
    int i;

    if ((m->dtype < 0) || (m->dtype >= MC_TENSOR_DTYPE_COUNT) || (dl[m->dtype].bits == 0) ||
        (m->data_bytes == 0))
        return NULL;
    b = PyMem_RawCalloc(1, sizeof(*b));
    if (b == NULL)
        return PyErr_NoMemory();
    for (i = m->ndim - 1; i >= 0; i--) {
        b->shape[i] = m->local_shape[i];
        b->strides[i] = stride;
        stride *= m->local_shape[i];
    }
    b->m.t.data = (char *)base + m->data_offset;
    b->m.t.device_type = 1;
    if (owner == NULL) { /* the caller's memory: a CUDA buffer stays on its device */
        int managed = 0, dev = mc_cuda_pointer_device(base, &managed);
        if (dev >= 0) {
            b->m.t.device_type = managed ? 13 : 2; /* kDLCUDAManaged, kDLCUDA */
            b->m.t.device_id = dev;
        }
    }
    b->m.t.ndim = m->ndim;
    b->m.t.code = dl[m->dtype].code;
    b->m.t.bits = dl[m->dtype].bits;
    b->m.t.lanes = 1;
    b->m.t.shape = b->shape;
    b->m.t.strides = b->strides;
    b->m.manager_ctx = b;
    b->m.deleter = mooncake_dl_delete;
    b->owner = owner;
    Py_XINCREF(owner);
    cap = PyCapsule_New(b, "dltensor", mooncake_dl_capsule_free);
    if (cap == NULL)
        mooncake_dl_delete(&b->m);
    return cap;
}

/* What a tensor read hands to Python: a capsule, else the record. */
static PyObject *mooncake_py_tensor_result(PyObject *owner, void *base, int64_t result,
                                           const mc_tensor_meta_t *m)
{
    if (result >= 0) {
        PyObject *cap = mooncake_py_tensor_capsule(owner, base, m);
        if ((cap != NULL) || PyErr_Occurred())
            return cap;
        /* the record is read from memory by the CPU: never device memory */
        if ((owner == NULL) && (mc_cuda_pointer_device(base, NULL) >= 0))
            result = MC_NOT_SUPPORTED;
    }
    return mooncake_py_tensor_rec(result, m);
}
%}

%inline %{
/* The header of the serialized tensor object @p data: one
 * MOONCAKE_TENSOR_OUT record whose result is the object length, or
 * MC_INVALID_PARAMS for anything the decoder refuses. */
static PyObject *tensor_decode(const void *data, size_t len)
{
    mc_tensor_meta_t m;
    mc_status_t st = mc_tensor_header_decode(data, len, &m);
    return mooncake_py_tensor_rec((st == MC_OK) ? (int64_t)len : (int64_t)st, &m);
}

/* The tensor in the bytearray @p buf (a whole serialized object): a DLPack
 * capsule keeping @p buf alive, else its record (tensor_decode()). */
static PyObject *tensor_wrap(PyObject *buf)
{
    mc_tensor_meta_t m;
    mc_status_t st;
    if (!PyByteArray_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "tensor_wrap takes a bytearray");
        return NULL;
    }
    st = mc_tensor_header_decode(PyByteArray_AS_STRING(buf), (uint64_t)PyByteArray_GET_SIZE(buf),
                                 &m);
    return mooncake_py_tensor_result(buf, PyByteArray_AS_STRING(buf),
                                     (st == MC_OK) ? PyByteArray_GET_SIZE(buf) : st, &m);
}
%}

%extend mooncake_store {
    /*
     * mc_tensor_put_batch(): @p recs holds MOONCAKE_TENSOR_IN ints per key
     * (the data's size follows from dtype and shape).  A record the codec
     * refuses gives that key MC_INVALID_PARAMS.  One status per key.
     */
    PyObject *tensor_put(int upsert, PyObject *keys, PyObject *recs, int tp_size,
                         int split_dim, const mc_replicate_config_t *config = NULL)
    {
        mooncake_py_strv_t sv;
        uint64_t *v = NULL;
        mc_tensor_meta_t *metas = NULL;
        const void **data = NULL;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t i, n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        if ((v = mooncake_py_u64v(recs, n * MOONCAKE_TENSOR_IN)) == NULL)
            goto cleanup;
        metas = PyMem_Calloc(n + 1, sizeof(*metas));
        data = PyMem_Calloc(n + 1, sizeof(*data));
        if ((metas == NULL) || (data == NULL)) {
            PyErr_NoMemory();
            goto cleanup;
        }
        if ((sts = mooncake_py_status_array(n)) == NULL)
            goto cleanup;
        for (i = 0; i < n; i++) {
            const uint64_t *r = v + MOONCAKE_TENSOR_IN * i;
            if ((r[1] > MC_TENSOR_MAX_DIMS) ||
                (mc_tensor_meta_init(&metas[i], (int32_t)r[0], (const int64_t *)(r + 2),
                                     (int32_t)r[1]) != MC_OK)) {
                memset(&metas[i], 0, sizeof(metas[i]));
                metas[i].dtype = MC_TENSOR_DTYPE_UNKNOWN; /* refused by the call */
            }
            data[i] = (const void *)(uintptr_t)r[10];
        }
        Py_BEGIN_ALLOW_THREADS
        st = mc_tensor_put_batch($self->h, sv.v, metas, data, n, tp_size, split_dim, config,
                                 upsert ? MC_TENSOR_WRITE_UPSERT : 0, sts);
        Py_END_ALLOW_THREADS
        list = mooncake_py_batch_statuses(sts, n, st);
    cleanup:
        PyMem_Free(sts);
        PyMem_Free(data);
        PyMem_Free(metas);
        PyMem_Free(v);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /* mc_tensor_put_from_batch(): buffer i is @p ptrs[i], @p sizes[i] bytes
     * of serialized tensor.  One status per key. */
    PyObject *tensor_put_from(int upsert, PyObject *keys, PyObject *ptrs, PyObject *sizes,
                              int tp_size, int split_dim,
                              const mc_replicate_config_t *config = NULL)
    {
        mooncake_py_strv_t sv;
        uint64_t *vp = NULL, *vs = NULL;
        mc_status_t *sts = NULL;
        mc_status_t st = MC_OK;
        PyObject *list = NULL;
        size_t n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        if (((vp = mooncake_py_u64v(ptrs, n)) == NULL) ||
            ((vs = mooncake_py_u64v(sizes, n)) == NULL) ||
            ((sts = mooncake_py_status_array(n)) == NULL))
            goto cleanup;
        Py_BEGIN_ALLOW_THREADS
        st = mc_tensor_put_from_batch($self->h, sv.v, (const void *const *)vp, vs, n, tp_size,
                                      split_dim, config, upsert ? MC_TENSOR_WRITE_UPSERT : 0,
                                      sts);
        Py_END_ALLOW_THREADS
        list = mooncake_py_batch_statuses(sts, n, st);
    cleanup:
        PyMem_Free(sts);
        PyMem_Free(vs);
        PyMem_Free(vp);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }

    /* mc_tensor_batch_get_into() (mc_tensor_get_into() for one key): per
     * key a DLPack capsule viewing the caller's buffer, or the record (a
     * failed read, or a dtype DLPack cannot carry). */
    PyObject *tensor_get_into(PyObject *keys, PyObject *ptrs, PyObject *caps)
    {
        mooncake_py_strv_t sv;
        uint64_t *vp = NULL, *vc = NULL;
        mc_tensor_meta_t *metas = NULL;
        int64_t *res = NULL;
        PyObject *list = NULL;
        size_t i, n;

        if (mooncake_py_strv_init(&sv, keys) != 0)
            return NULL;
        n = sv.n;
        if (((vp = mooncake_py_u64v(ptrs, n)) == NULL) ||
            ((vc = mooncake_py_u64v(caps, n)) == NULL))
            goto cleanup;
        metas = PyMem_Calloc(n + 1, sizeof(*metas));
        res = PyMem_Calloc(n + 1, sizeof(*res));
        if ((metas == NULL) || (res == NULL)) {
            PyErr_NoMemory();
            goto cleanup;
        }
        Py_BEGIN_ALLOW_THREADS
        if (n == 1)
            res[0] = mc_tensor_get_into($self->h, sv.v[0], (void *)(uintptr_t)vp[0],
                                        (vc[0] > SIZE_MAX) ? SIZE_MAX : (size_t)vc[0],
                                        &metas[0]);
        else if (n > 1)
            (void)mc_tensor_batch_get_into($self->h, sv.v, (void *const *)vp, vc, n, metas,
                                           res);
        Py_END_ALLOW_THREADS
        if ((list = PyList_New((Py_ssize_t)n)) == NULL)
            goto cleanup;
        for (i = 0; i < n; i++) {
            PyObject *item = mooncake_py_tensor_result(NULL, (void *)(uintptr_t)vp[i], res[i],
                                                       &metas[i]);
            if (item == NULL) {
                Py_CLEAR(list);
                goto cleanup;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
    cleanup:
        PyMem_Free(res);
        PyMem_Free(metas);
        PyMem_Free(vc);
        PyMem_Free(vp);
        mooncake_py_strv_cleanup(&sv);
        return list;
    }
}

/* ---- completion queue (mooncake.async_store) ------------------------------- *
 * AsyncQueue.reap(max) -> [(tag, result, payload), ...]: the typemaps turn
 * the reaped mc_store_aq_done_t records into tuples and release them.
 * payload is the object's bytes for a get (b"" when none), a list of
 * bytes for a get_batch (b"" where results[i] is not a size > 0), the
 * per-key results for the other batches, None otherwise. */

%{
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
static PyObject *mooncake_py_aq_done_list(mc_store_aq_done_t *done, size_t n)
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
%}

%typemap(in) (mc_store_aq_done_t *done, size_t max) (mc_store_aq_done_t *recs = NULL)
{
    unsigned long long m = PyLong_Check($input) ? PyLong_AsUnsignedLongLong($input) : 0;
    if (PyErr_Occurred())
        SWIG_fail;
    if ((m == 0) || (m > 65536)) {
        PyErr_SetString(PyExc_ValueError, "max must be an int in [1, 65536]");
        SWIG_fail;
    }
    recs = PyMem_Calloc((size_t)m, sizeof(*recs));
    if (recs == NULL) {
        PyErr_NoMemory();
        SWIG_fail;
    }
    $1 = recs;
    $2 = (size_t)m;
}
%typemap(argout) (mc_store_aq_done_t *done, size_t max)
{
    PyObject *list = mooncake_py_aq_done_list($1, (size_t)result);
    Py_XDECREF($result);
    $result = list;
    if (list == NULL)
        SWIG_fail;
}
%typemap(freearg) (mc_store_aq_done_t *done, size_t max)
{
    PyMem_Free(recs$argnum);
}

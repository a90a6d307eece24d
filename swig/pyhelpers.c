/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Python-object builders of the binding (swig/pyhelpers.h).
 *
 * A DataProto read gives back thousands of per-row objects: a numpy view
 * per token row, a str per uid.  Built by a Python loop each costs the
 * interpreter's dispatch on top of the object itself, and on a busy host
 * that loop is what a read spends its time on once the bytes are in.
 * Here the layout is checked by libmooncake (mooncake/codec.h: the
 * offsets may come from another process, or be corrupt) and the objects
 * are made in one C loop with the interpreter lock held.  The write side
 * has the same loop the other way round: a column of str into the
 * utf8_ragged payload (mooncake_py_utf8_pack()), and a column of arrays
 * typed and described in one pass (mooncake_py_ragged_column()).
 * Nothing here blocks; the input buffers are released before returning.
 */
#define PY_SSIZE_T_CLEAN
#include "config.h"

#include "pyhelpers.h"

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <mooncake/codec.h>
#include <mooncake/status.h>

#ifdef HAVE_NUMPY_CAPI
/* numpy's C API, only in this file (the module imports without numpy:
 * the API table is fetched on the first ragged read, np_api()). */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL mooncake_pyhelpers_ARRAY_API
#include <numpy/arrayobject.h>
#endif

/* A C-contiguous view of @p o: 0, or -1 with TypeError naming @p what. */
static int view_of(PyObject *o, Py_buffer *v, const char *what)
{
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS) == 0)
        return 0;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous buffer, not '%s'", what,
                 Py_TYPE(o)->tp_name);
    return -1;
}

/*
 * The @p count native int64 of @p v, at an aligned address: the buffer
 * itself, or a copy in *owned_p (PyMem_Free it) when it is misaligned (a
 * view at an odd offset of a fetched payload).  NULL with MemoryError set.
 */
static const int64_t *i64_of(const Py_buffer *v, size_t count, int64_t **owned_p)
{
    *owned_p = NULL;
    if (((uintptr_t)v->buf % _Alignof(int64_t)) == 0)
        return v->buf;
    *owned_p = PyMem_Malloc((count > 0) ? count * sizeof(int64_t) : 1);
    if (*owned_p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(*owned_p, v->buf, count * sizeof(int64_t));
    return *owned_p;
}

/* The same for int16. */
static const int16_t *i16_of(const Py_buffer *v, size_t count, int16_t **owned_p)
{
    *owned_p = NULL;
    if (((uintptr_t)v->buf % _Alignof(int16_t)) == 0)
        return v->buf;
    *owned_p = PyMem_Malloc((count > 0) ? count * sizeof(int16_t) : 1);
    if (*owned_p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(*owned_p, v->buf, count * sizeof(int16_t));
    return *owned_p;
}

/* Rows of an offsets buffer of @p len bytes, or -1 with ValueError set. */
static Py_ssize_t rows_of_offsets(Py_ssize_t len)
{
    if ((len < (Py_ssize_t)sizeof(int64_t)) || ((len % (Py_ssize_t)sizeof(int64_t)) != 0)) {
        PyErr_Format(PyExc_ValueError, "offsets hold %zd bytes, not a whole number of int64 "
                     "entries (at least one)", len);
        return -1;
    }
    return len / (Py_ssize_t)sizeof(int64_t) - 1;
}

/* The row objects of a checked blob layout. */
/* The str of the UTF-8 @p p[0..len) when every character is below U+0100
 * (ASCII, and two-byte sequences led by 0xC2 or 0xC3): made in the
 * one-byte form directly, as the strict decoder would make it.  NULL
 * without an exception for anything else, which the caller decodes (and
 * which it refuses when it is not UTF-8).  Per-row strings of RL batches
 * are mostly such text, and CPython's decoder leaves its ASCII fast path
 * at the first accented letter. */
static PyObject *latin1_str(const unsigned char *p, Py_ssize_t len)
{
    Py_ssize_t chars = len, i = 0;
    Py_UCS1 *w;
    PyObject *str;

    while (i < len) {
        if (i + 8 <= len) { /* eight ASCII bytes: their high bits at once */
            uint64_t v;
            memcpy(&v, p + i, sizeof(v));
            if ((v & UINT64_C(0x8080808080808080)) == 0) {
                i += 8;
                continue;
            }
        }
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        if (((p[i] != 0xC2) && (p[i] != 0xC3)) || (i + 1 >= len) || ((p[i + 1] & 0xC0) != 0x80))
            return NULL;
        chars--;
        i += 2;
    }
    str = PyUnicode_New(chars, (chars == len) ? 0x7F : 0xFF);
    if (str == NULL)
        return NULL;
    w = PyUnicode_1BYTE_DATA(str);
    if (chars == len) {
        memcpy(w, p, (size_t)len);
        return str;
    }
    for (i = 0; i < len; i++) {
        if (p[i] < 0x80) {
            *w++ = p[i];
        } else {
            *w++ = (Py_UCS1)(((p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F));
            i++;
        }
    }
    return str;
}

static PyObject *blob_list(const char *data, const int64_t *offs, const uint8_t *nulls,
                           Py_ssize_t n, int text)
{
    PyObject *out = PyList_New(n);

    for (Py_ssize_t i = 0; (out != NULL) && (i < n); i++) {
        const char *p = data + offs[i];
        Py_ssize_t len = (Py_ssize_t)(offs[i + 1] - offs[i]);
        PyObject *row;
        if ((nulls != NULL) && nulls[i]) {
            row = Py_None;
            Py_INCREF(row);
        } else {
            if (!text) {
                row = PyBytes_FromStringAndSize(p, len);
            } else {
                row = latin1_str((const unsigned char *)p, len);
                if ((row == NULL) && !PyErr_Occurred())
                    row = PyUnicode_DecodeUTF8(p, len, "strict");
            }
        }
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);
    }
    return out;
}

PyObject *mooncake_py_blob_rows(PyObject *data, PyObject *offsets, PyObject *nulls, int text)
{
    Py_buffer dv = {0}, ov = {0}, nv = {0};
    int have_d = 0, have_o = 0, have_n = 0;
    int64_t *owned = NULL;
    const int64_t *offs;
    PyObject *out = NULL;
    Py_ssize_t n;

    if (view_of(data, &dv, "data") != 0)
        goto done;
    have_d = 1;
    if (view_of(offsets, &ov, "offsets") != 0)
        goto done;
    have_o = 1;
    if ((n = rows_of_offsets(ov.len)) < 0)
        goto done;
    if (nulls != Py_None) {
        if (view_of(nulls, &nv, "nulls") != 0)
            goto done;
        have_n = 1;
        if (nv.len != n) {
            PyErr_Format(PyExc_ValueError, "ragged nulls length %zd does not match rows %zd",
                         nv.len, n);
            goto done;
        }
    }
    if ((offs = i64_of(&ov, (size_t)n + 1, &owned)) == NULL)
        goto done;
    if (mc_codec_blob_check(offs, (size_t)n, (size_t)dv.len) != MC_OK) {
        PyErr_SetString(PyExc_ValueError, mc_last_error_detail());
        goto done;
    }
    out = blob_list(dv.buf, offs, have_n ? nv.buf : NULL, n, text);
done:
    PyMem_Free(owned);
    if (have_n)
        PyBuffer_Release(&nv);
    if (have_o)
        PyBuffer_Release(&ov);
    if (have_d)
        PyBuffer_Release(&dv);
    return out;
}

#ifdef HAVE_NUMPY_CAPI
/* Whether numpy's C API table is loaded (once; a numpy that cannot be
 * imported, or one of another ABI, leaves the rows to slicing). */
static int np_api(void)
{
    static int state; /* 0: not tried, 1: loaded, -1: unavailable */

    if (state == 0) {
        state = (_import_array() < 0) ? -1 : 1;
        if (state < 0)
            PyErr_Clear();
    }
    return state > 0;
}

/* Whether the rows of @p data can be made by np_row(): an exact 1-D
 * C-contiguous ndarray (what slicing it would give a view of). */
static int np_rows_ok(PyObject *data)
{
    return np_api() && PyArray_CheckExact(data) && (PyArray_NDIM((PyArrayObject *)data) == 1) &&
           PyArray_IS_C_CONTIGUOUS((PyArrayObject *)data);
}

/* data[a:b] (np_rows_ok(data), 0 <= a <= b <= len(data), checked by the
 * caller) as a view of @p ndim dimensions @p shape, or of one of b - a
 * elements when @p ndim is 1: the array slicing and reshape give, with
 * the same dtype, base and write flag, made directly (a slice builds
 * index objects and goes through numpy's indexing for each row). */
static PyObject *np_row(PyObject *data, int64_t a, int64_t b, int ndim, const int64_t *shape)
{
    PyArrayObject *d = (PyArrayObject *)data;
    PyArray_Descr *descr = PyArray_DESCR(d);
    npy_intp dims[NPY_MAXDIMS];
    PyObject *row;

    if (ndim == 1) {
        dims[0] = (npy_intp)(b - a);
    } else {
        for (int k = 0; k < ndim; k++)
            dims[k] = (npy_intp)shape[k];
    }
    Py_INCREF(descr); /* the new array takes this reference */
    row = PyArray_NewFromDescr(&PyArray_Type, descr, ndim, dims, NULL,
                               PyArray_BYTES(d) + a * (int64_t)PyArray_ITEMSIZE(d),
                               PyArray_FLAGS(d) & NPY_ARRAY_WRITEABLE, NULL);
    if (row == NULL)
        return NULL;
    Py_INCREF(data);
    if (PyArray_SetBaseObject((PyArrayObject *)row, data) != 0) { /* steals data */
        Py_DECREF(row);
        return NULL;
    }
    return row;
}
#endif

int mooncake_py_array_span(PyObject *o, const void **base_p, size_t *len_p)
{
#ifdef HAVE_NUMPY_CAPI
    if (np_api() && PyArray_CheckExact(o) && PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o)) {
        *base_p = PyArray_DATA((PyArrayObject *)o);
        *len_p = (size_t)PyArray_NBYTES((PyArrayObject *)o);
        return 1;
    }
#else
    (void)o;
    (void)base_p;
    (void)len_p;
#endif
    return 0;
}

/* data[a:b] of a numpy array, reshaped to @p ndim dimensions @p shape
 * unless it is 1-D. */
static PyObject *ragged_row(PyObject *data, int64_t a, int64_t b, int ndim, const int64_t *shape)
{
    static PyObject *reshape_name;
    PyObject *lo, *hi, *slice, *row, *dims, *shaped;

    lo = PyLong_FromLongLong(a);
    hi = PyLong_FromLongLong(b);
    slice = ((lo != NULL) && (hi != NULL)) ? PySlice_New(lo, hi, NULL) : NULL;
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    if (slice == NULL)
        return NULL;
    row = PyObject_GetItem(data, slice);
    Py_DECREF(slice);
    if ((row == NULL) || (ndim == 1))
        return row;
    if ((reshape_name == NULL) && ((reshape_name = PyUnicode_InternFromString("reshape")) == NULL)) {
        Py_DECREF(row);
        return NULL;
    }
    dims = PyTuple_New(ndim);
    for (int d = 0; (dims != NULL) && (d < ndim); d++) {
        PyObject *v = PyLong_FromLongLong(shape[d]);
        if (v == NULL)
            Py_CLEAR(dims);
        else
            PyTuple_SET_ITEM(dims, d, v);
    }
    shaped = (dims != NULL) ? PyObject_CallMethodObjArgs(row, reshape_name, dims, NULL) : NULL;
    Py_XDECREF(dims);
    Py_DECREF(row);
    return shaped;
}

/* The row objects of a checked typed-ragged layout. */
static PyObject *ragged_list(PyObject *data, const int64_t *offs, const int64_t *shapes,
                             size_t width, const int16_t *ndims, const uint8_t *nulls,
                             Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
#ifdef HAVE_NUMPY_CAPI
    const int direct = np_rows_ok(data) && (width <= NPY_MAXDIMS);
#endif

    for (Py_ssize_t i = 0; (out != NULL) && (i < n); i++) {
        PyObject *row;
        if (nulls[i]) {
            row = Py_None;
            Py_INCREF(row);
#ifdef HAVE_NUMPY_CAPI
        } else if (direct) {
            row = np_row(data, offs[i], offs[i + 1], ndims[i], &shapes[(size_t)i * width]);
#endif
        } else {
            row = ragged_row(data, offs[i], offs[i + 1], ndims[i], &shapes[(size_t)i * width]);
        }
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);
    }
    return out;
}

/* The shape width of @p n (> 0) rows in @p len bytes of int64, or 0
 * with ValueError set. */
static size_t shape_width(Py_ssize_t len, Py_ssize_t n)
{
    Py_ssize_t row = n * (Py_ssize_t)sizeof(int64_t);

    if ((len < row) || ((len % row) != 0)) {
        PyErr_Format(PyExc_ValueError, "typed ragged shapes hold %zd bytes, not whole rows of "
                     "int64 for %zd rows", len, n);
        return 0;
    }
    return (size_t)(len / row);
}

PyObject *mooncake_py_ragged_rows(PyObject *data, PyObject *offsets, PyObject *shapes,
                                  PyObject *ndims, PyObject *nulls)
{
    Py_buffer dv = {0}, ov = {0}, sv = {0}, kv = {0}, nv = {0};
    int held = 0;  /* views taken: dv, ov, sv, kv, nv in this order */
    int64_t *owned_o = NULL, *owned_s = NULL;
    int16_t *owned_k = NULL;
    const int64_t *offs, *shp;
    const int16_t *nd;
    PyObject *out = NULL;
    Py_ssize_t n;
    size_t width;

    if (view_of(data, &dv, "data") != 0)
        goto done;
    held++;
    if (view_of(offsets, &ov, "offsets") != 0)
        goto done;
    held++;
    if (view_of(shapes, &sv, "shapes") != 0)
        goto done;
    held++;
    if (view_of(ndims, &kv, "ndims") != 0)
        goto done;
    held++;
    if (view_of(nulls, &nv, "nulls") != 0)
        goto done;
    held++;
    if ((n = rows_of_offsets(ov.len)) < 0)
        goto done;
    if ((kv.len != n * (Py_ssize_t)sizeof(int16_t)) || (nv.len != n)) {
        PyErr_Format(PyExc_ValueError, "typed ragged payload does not describe %zd rows "
                     "(%zd bytes of ndims, %zd of nulls)", n, kv.len, nv.len);
        goto done;
    }
    if (n == 0) {  /* nothing to slice: whatever the lone offset says */
        out = PyList_New(0);
        goto done;
    }
    if ((width = shape_width(sv.len, n)) == 0)
        goto done;
    if (((offs = i64_of(&ov, (size_t)n + 1, &owned_o)) == NULL) ||
        ((shp = i64_of(&sv, (size_t)n * width, &owned_s)) == NULL) ||
        ((nd = i16_of(&kv, (size_t)n, &owned_k)) == NULL))
        goto done;
    if ((dv.itemsize <= 0) ||
        (mc_codec_ragged_check(offs, shp, width, nd, nv.buf, (size_t)n,
                               (size_t)(dv.len / dv.itemsize)) != MC_OK)) {
        PyErr_SetString(PyExc_ValueError, (dv.itemsize <= 0) ? "typed ragged data has no "
                        "element size" : mc_last_error_detail());
        goto done;
    }
    out = ragged_list(data, offs, shp, width, nd, nv.buf, n);
done:
    PyMem_Free(owned_k);
    PyMem_Free(owned_s);
    PyMem_Free(owned_o);
    if (held > 4)
        PyBuffer_Release(&nv);
    if (held > 3)
        PyBuffer_Release(&kv);
    if (held > 2)
        PyBuffer_Release(&sv);
    if (held > 1)
        PyBuffer_Release(&ov);
    if (held > 0)
        PyBuffer_Release(&dv);
    return out;
}

/* Rows a column pass asks the memory for ahead of the one it reads: the
 * objects of a column are spread over the heap, and one a row would be a
 * cache miss after another. */
#define COLUMN_AHEAD 8

/* Ask for the first @p lines cache lines of object @p o. */
static inline void column_prefetch(const PyObject *o, int lines)
{
    for (int k = 0; k < lines; k++)
        __builtin_prefetch((const char *)o + 64 * k);
}

static void column_prefetch_dims(PyObject *o, PyTypeObject *type);

/* The UTF-8 size of a Latin-1 (one byte per character) str: a byte per
 * character, two for those past ASCII. */
static Py_ssize_t latin1_utf8_size(PyObject *o)
{
    const Py_UCS1 *c = PyUnicode_1BYTE_DATA(o);
    Py_ssize_t n = PyUnicode_GET_LENGTH(o), size = n, i = 0;

    /* eight characters a step: their high bits counted at once */
    for (; i + 8 <= n; i += 8) {
        uint64_t w;

        memcpy(&w, c + i, sizeof(w));
        /* the high bits as ones in each byte, summed into the top byte by
         * the multiply (no popcount instruction in the baseline x86-64) */
        size += (Py_ssize_t)((((w >> 7) & UINT64_C(0x0101010101010101)) *
                              UINT64_C(0x0101010101010101)) >> 56);
    }
    for (; i < n; i++)
        size += (c[i] >= 0x80);
    return size;
}

/* The UTF-8 of Latin-1 characters c[0..n) to @p w; returns the end. */
static unsigned char *latin1_chars(const Py_UCS1 *c, Py_ssize_t n, unsigned char *w)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < 0x80) {
            *w++ = c[i];
        } else {
            *w++ = (unsigned char)(0xC0 | (c[i] >> 6));
            *w++ = (unsigned char)(0x80 | (c[i] & 0x3F));
        }
    }
    return w;
}

/* The UTF-8 of a Latin-1 str to @p out (latin1_utf8_size() bytes), eight
 * characters a step: eight ASCII ones copied as they are, eight past
 * ASCII (accented text) as sixteen bytes at once, a mix one by one. */
static void latin1_to_utf8(PyObject *o, char *out)
{
    const Py_UCS1 *c = PyUnicode_1BYTE_DATA(o);
    Py_ssize_t n = PyUnicode_GET_LENGTH(o), i = 0;
    unsigned char *w = (unsigned char *)out;

    for (; i + 8 <= n; i += 8) {
        uint64_t v, high;

        memcpy(&v, c + i, sizeof(v));
        high = v & UINT64_C(0x8080808080808080);
        if (high == 0) {
            memcpy(w, &v, sizeof(v));
            w += 8;
        } else if (high == UINT64_C(0x8080808080808080)) {
#ifdef __SSE2__
            /* per byte: 0xC0 | c >> 6 and 0x80 | (c & 0x3F), interleaved (the
             * 16-bit shift brings the next byte's bits in: masked off) */
            __m128i x = _mm_cvtsi64_si128((long long)v);
            __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(x, 6), _mm_set1_epi8(0x03)),
                                      _mm_set1_epi8((char)0xC0));
            __m128i lo = _mm_or_si128(_mm_and_si128(x, _mm_set1_epi8(0x3F)),
                                      _mm_set1_epi8((char)0x80));

            _mm_storeu_si128((__m128i *)(void *)w, _mm_unpacklo_epi8(hi, lo));
            w += 16;
#else
            w = latin1_chars(c + i, 8, w);
#endif
        } else {
            w = latin1_chars(c + i, 8, w);
        }
    }
    latin1_chars(c + i, n - i, w);
}

/* The UTF-8 of str @p o: its own bytes when it is ASCII; for Latin-1
 * (which has no surrogates) *p NULL and the size, encoded by
 * latin1_to_utf8() when it is copied (no object per row: most non-ASCII
 * text in a batch is Latin-1 -- accents); else a new bytes object in
 * *tmp_p (strict: UnicodeEncodeError for a lone surrogate, as
 * str.encode).  Nothing is cached on @p o.  -1 with an exception set. */
static int utf8_of(PyObject *o, const char **p, Py_ssize_t *len, PyObject **tmp_p)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(o) != 0)
        return -1;
#endif
    if (PyUnicode_IS_ASCII(o)) {
        *p = (const char *)PyUnicode_DATA(o);
        *len = PyUnicode_GET_LENGTH(o);
        return 0;
    }
    if (PyUnicode_KIND(o) == PyUnicode_1BYTE_KIND) {
        *p = NULL;
        *len = latin1_utf8_size(o);
        return 0;
    }
    if ((*tmp_p = PyUnicode_AsUTF8String(o)) == NULL)
        return -1;
    *p = PyBytes_AS_STRING(*tmp_p);
    *len = PyBytes_GET_SIZE(*tmp_p);
    return 0;
}

/* Pass 1 of utf8_pack: every row's bytes (pointer and length; a null row
 * has none), nulls filled in.  -1 with an exception set; with @p exact, 1
 * (no exception) at the first row that is neither exactly a str nor None. */
static int utf8_rows(PyObject *fast, Py_ssize_t n, int exact, const char **ptrs,
                     Py_ssize_t *lens, PyObject **tmps, uint8_t *nulls, Py_ssize_t *total_p)
{
    Py_ssize_t total = 0;

    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);

        if (i + COLUMN_AHEAD < n)  /* the rows of a batch just made are rarely cached */
            column_prefetch(PySequence_Fast_GET_ITEM(fast, i + COLUMN_AHEAD), 2);
        nulls[i] = (o == Py_None);
        lens[i] = 0;
        if (o == Py_None)
            continue;
        if (exact && !PyUnicode_CheckExact(o))
            return 1; /* not exactly str: the caller's other path */
        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "row %zd is not a str but '%s'", i,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        if (utf8_of(o, &ptrs[i], &lens[i], &tmps[i]) != 0)
            return -1;
        if (lens[i] > PY_SSIZE_T_MAX - total) {
            PyErr_SetString(PyExc_OverflowError, "the rows hold too many bytes");
            return -1;
        }
        total += lens[i];
    }
    *total_p = total;
    return 0;
}

PyObject *mooncake_py_utf8_pack(PyObject *values, PyObject *offsets_out, PyObject *nulls_out,
                                int exact)
{
    Py_buffer ov = {0}, nv = {0};
    int held = 0;  /* ov, nv */
    PyObject *fast = NULL, **tmps = NULL, *out = NULL;
    const char **ptrs = NULL;
    Py_ssize_t *lens = NULL, n, total = 0;
    int64_t *offs;

    if ((fast = PySequence_Fast(values, "values must be a sequence of str or None")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    if (PyObject_GetBuffer(offsets_out, &ov, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0)
        goto done;
    held++;
    if (PyObject_GetBuffer(nulls_out, &nv, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0)
        goto done;
    held++;
    if ((ov.len != (n + 1) * (Py_ssize_t)sizeof(int64_t)) || (nv.len != n) ||
        (((uintptr_t)ov.buf % _Alignof(int64_t)) != 0)) {
        PyErr_Format(PyExc_ValueError, "offsets_out must be %zd aligned int64 and nulls_out %zd "
                     "bytes (got %zd and %zd bytes)", n + 1, n, ov.len, nv.len);
        goto done;
    }
    tmps = PyMem_Calloc((size_t)n + 1, sizeof(*tmps));
    ptrs = PyMem_Calloc((size_t)n + 1, sizeof(*ptrs));
    lens = PyMem_Calloc((size_t)n + 1, sizeof(*lens));
    if ((tmps == NULL) || (ptrs == NULL) || (lens == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    switch (utf8_rows(fast, n, exact, ptrs, lens, tmps, nv.buf, &total)) {
    case 0:
        break;
    case 1:
        Py_INCREF(Py_None);
        out = Py_None;
        goto done;
    default:
        goto done;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, total)) == NULL)
        goto done;
    offs = ov.buf;
    offs[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char *dst = PyBytes_AS_STRING(out) + offs[i];
        if ((lens[i] > 0) && (ptrs[i] == NULL))  /* Latin-1: encoded here */
            latin1_to_utf8(PySequence_Fast_GET_ITEM(fast, i), dst);
        else if (lens[i] > 0)
            memcpy(dst, ptrs[i], (size_t)lens[i]);
        offs[i + 1] = offs[i] + lens[i];
    }
done:
    for (Py_ssize_t i = 0; (tmps != NULL) && (i < n); i++)
        Py_XDECREF(tmps[i]);
    PyMem_Free(lens);
    PyMem_Free((void *)ptrs);
    PyMem_Free(tmps);
    if (held > 1)
        PyBuffer_Release(&nv);
    if (held > 0)
        PyBuffer_Release(&ov);
    Py_DECREF(fast);
    return out;
}

/* ---- ragged_column(): the one typing pass of a column of arrays --------------- */

/* Whether two buffer formats are the same string: inline, as they are a
 * character or two ("i", "<f") and a column compares one per row. */
static inline int same_format(const char *a, const char *b)
{
    while ((*a != '\0') && (*a == *b)) {
        a++;
        b++;
    }
    return *a == *b;
}

/* The head of numpy's array object (PyArrayObject_fields in numpy's
 * ndarraytypes.h, the same in numpy 1.7 to 2.x).  A row after the first
 * whose dtype object is the first row's is read from it instead of by a
 * buffer request (which formats the dtype into a new string each time);
 * the first row's request checks that the two agree (column_probe()). */
typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} column_array_t;

#define COLUMN_C_CONTIGUOUS 0x0001  /* NPY_ARRAY_C_CONTIGUOUS */

/* What the first row's buffer says of it, for the rows after it. */
typedef struct {
    PyObject *descr;  /* the first row's dtype object; NULL: request every row's buffer */
} column_fast_t;

/* Whether @p o (an exact @p type object, the first row) reads as its
 * buffer @p v says: then the rows with its dtype object are read from
 * the array head (column_fast_row()). */
static void column_probe(PyObject *o, PyTypeObject *type, const Py_buffer *v,
                         column_fast_t *fast)
{
    const column_array_t *a = (const column_array_t *)o;

    fast->descr = NULL;
    if ((strcmp(type->tp_name, "numpy.ndarray") != 0) ||
        (type->tp_basicsize < (Py_ssize_t)sizeof(column_array_t)) || (a->descr == NULL) ||
        ((void *)a->data != v->buf) || (a->nd != v->ndim) ||
        ((a->flags & COLUMN_C_CONTIGUOUS) == 0))
        return;
    if ((v->ndim == 1) && ((a->dimensions == NULL) || (a->dimensions[0] != v->shape[0])))
        return;
    fast->descr = a->descr;
}

/* Ask for the shape of @p o when it is a @p type array (column_array_t). */
static void column_prefetch_dims(PyObject *o, PyTypeObject *type)
{
    if (Py_TYPE(o) == type)
        __builtin_prefetch(((const column_array_t *)o)->dimensions);
}

/* A row read from its array head: 1 when it has the first row's dtype
 * object, is C-contiguous and has at most one dimension, else 0 (its
 * buffer is requested instead). */
static int column_fast_row(PyObject *o, const column_fast_t *fast, Py_ssize_t itemsize,
                           mc_codec_row_t *row)
{
    const column_array_t *a = (const column_array_t *)o;

    if ((fast->descr == NULL) || (a->descr != fast->descr) ||
        ((a->flags & COLUMN_C_CONTIGUOUS) == 0) || (a->nd > 1) || (a->nd < 0))
        return 0;
    row->base = a->data;
    row->ndim = (uint32_t)a->nd;
    row->nbytes = (size_t)itemsize * (size_t)((a->nd == 1) ? a->dimensions[0] : 1);
    row->shape = (const int64_t *)a->dimensions;
    return 1;
}

/* Row @p i of a ragged column: None (a null row), or a C-contiguous view
 * of an exact @p type object with at most one dimension, of format
 * @p *fmt_p and item size @p *itemsize_p (the first non-null row sets
 * them).  1: taken (release @p v unless it is null); 0: not such a row
 * (no exception: the caller types the column in Python); -1: error. */
static int column_row(PyObject *o, PyTypeObject *type, Py_buffer *v, mc_codec_row_t *row,
                      const char **fmt_p, Py_ssize_t *itemsize_p)
{
    if (o == Py_None) {
        row->is_null = 1;
        return 1;
    }
    if (Py_TYPE(o) != type)
        return 0;
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();  /* not contiguous (or no buffer): the general path copes */
        return 0;
    }
    if ((v->ndim > 1) || (v->format == NULL) || (v->itemsize <= 0) ||
        ((*fmt_p != NULL) && ((v->itemsize != *itemsize_p) || !same_format(v->format, *fmt_p)))) {
        PyBuffer_Release(v);
        return 0;
    }
    if (*fmt_p == NULL) {
        *fmt_p = v->format;
        *itemsize_p = v->itemsize;
    }
    row->base = v->buf;
    row->nbytes = (size_t)v->len;
    row->ndim = (uint32_t)v->ndim;
    /* Py_ssize_t and int64_t are the same size on every supported ABI */
    row->shape = (const int64_t *)v->shape;
    return 1;
}

/* The writable C-contiguous output @p o of exactly @p len bytes aligned
 * to @p align: 0, or -1 with ValueError / TypeError naming @p what. */
static int column_out(PyObject *o, Py_buffer *v, Py_ssize_t len, size_t align, const char *what)
{
    if (PyObject_GetBuffer(o, v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0)
        return -1;
    if ((v->len != len) || (((uintptr_t)v->buf % align) != 0)) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd aligned bytes (got %zd)", what, len,
                     v->len);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* Outputs of mooncake_py_ragged_column(), in argument order. */
static int column_outs(Py_buffer outs[4], PyObject *const objs[4], Py_ssize_t n)
{
    static const char *const what[4] = {"offsets_out", "shapes_out", "ndims_out", "nulls_out"};
    const Py_ssize_t len[4] = {(n + 1) * 8, n * 8, n * 2, n};
    const size_t align[4] = {_Alignof(int64_t), _Alignof(int64_t), _Alignof(int16_t), 1};

    for (int k = 0; k < 4; k++) {
        if (column_out(objs[k], &outs[k], len[k], align[k], what[k]) != 0) {
            while (k-- > 0)
                PyBuffer_Release(&outs[k]);
            return -1;
        }
    }
    return 0;
}

/* Pass over the rows of @p fast: 1 when every one was taken (*held_p views
 * to release either way; the rows that are None in *nulls_p, the largest
 * ndim in *max_ndim_p), 0 / -1 as column_row(). */
static int column_rows(PyObject *fast, Py_ssize_t n, PyTypeObject *type, Py_buffer *views,
                       mc_codec_row_t *rows, Py_ssize_t *held_p, const char **fmt_p,
                       Py_ssize_t *itemsize_p, Py_ssize_t *nulls_p, int *max_ndim_p)
{
    column_fast_t head = {NULL};

    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        int r;

        if (i + COLUMN_AHEAD < n)
            column_prefetch(PySequence_Fast_GET_ITEM(fast, i + COLUMN_AHEAD), 1);
        if ((i + COLUMN_AHEAD / 2 < n) && (head.descr != NULL))  /* its shape, once it is in */
            column_prefetch_dims(PySequence_Fast_GET_ITEM(fast, i + COLUMN_AHEAD / 2), type);

        if ((o != Py_None) && (Py_TYPE(o) == type) &&
            column_fast_row(o, &head, *itemsize_p, &rows[i])) {
            if ((int)rows[i].ndim > *max_ndim_p)
                *max_ndim_p = (int)rows[i].ndim;
            continue;
        }
        r = column_row(o, type, &views[*held_p], &rows[i], fmt_p, itemsize_p);
        if (r <= 0)
            return r;
        if (o == Py_None) {
            (*nulls_p)++;
            continue;
        }
        if (*held_p == 0)
            column_probe(o, type, &views[0], &head);
        (*held_p)++;
        if ((int)rows[i].ndim > *max_ndim_p)
            *max_ndim_p = (int)rows[i].ndim;
    }
    return (*fmt_p != NULL) ? 1 : 0;  /* every row null: no element type */
}

PyObject *mooncake_py_ragged_column(PyObject *values, PyObject *array_type,
                                    PyObject *offsets_out, PyObject *shapes_out,
                                    PyObject *ndims_out, PyObject *nulls_out)
{
    PyObject *const objs[4] = {offsets_out, shapes_out, ndims_out, nulls_out};
    Py_buffer outs[4];
    Py_buffer *views = NULL;
    mc_codec_row_t *rows = NULL;
    PyObject *fast, *out = NULL;
    Py_ssize_t n, held = 0, itemsize = 0, nulls = 0;
    const char *fmt = NULL;
    size_t elems = 0;
    int r, max_ndim = 0;

    if (!PyType_Check(array_type)) {
        PyErr_SetString(PyExc_TypeError, "array_type must be a type");
        return NULL;
    }
    if ((fast = PySequence_Fast(values, "values must be a sequence")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    if (column_outs(outs, objs, n) != 0) {
        Py_DECREF(fast);
        return NULL;
    }
    views = PyMem_Calloc((size_t)n + 1, sizeof(*views));
    rows = PyMem_Calloc((size_t)n + 1, sizeof(*rows));
    if ((views == NULL) || (rows == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    r = column_rows(fast, n, (PyTypeObject *)array_type, views, rows, &held, &fmt, &itemsize,
                    &nulls, &max_ndim);
    if (r < 0)
        goto done;
    if (r == 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    if (mc_codec_ragged_describe(rows, (size_t)n, (size_t)itemsize, outs[0].buf, outs[1].buf, 1,
                                 outs[2].buf, outs[3].buf, &elems) != MC_OK) {
        PyErr_Format(PyExc_ValueError, "ragged column: %s", mc_last_error_detail());
        goto done;
    }
    out = Py_BuildValue("(snnni)", fmt, itemsize, (Py_ssize_t)elems, nulls, max_ndim);
done:
    /* fmt points into views[0]: the result is built before they go */
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    for (int k = 0; k < 4; k++)
        PyBuffer_Release(&outs[k]);
    PyMem_Free(rows);
    PyMem_Free(views);
    Py_DECREF(fast);
    return out;
}

/* ---- reshard_attr_ints() ------------------------------------------------------- */

static int mooncake_py_attr_row(int64_t *row, size_t width, int64_t *ndim, PyObject *v,
                                Py_ssize_t i)
{
    Py_ssize_t k, n;
    if (PyLong_Check(v)) {
        if (width < 1)
            goto wide;
        row[0] = PyLong_AsLongLong(v);
        for (k = 1; k < (Py_ssize_t)width; k++)
            row[k] = 0;
        if (ndim != NULL)
            *ndim = 1;
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyTuple_Check(v)) {
        PyErr_Format(PyExc_TypeError, "object %zd: expected an int or a tuple of int, not '%s'",
                     i, Py_TYPE(v)->tp_name);
        return -1;
    }
    n = PyTuple_GET_SIZE(v);
    if ((size_t)n > width)
        goto wide;
    for (k = 0; k < n; k++) {
        PyObject *x = PyTuple_GET_ITEM(v, k);
        if (!PyLong_Check(x)) {
            PyErr_Format(PyExc_TypeError, "object %zd: tuple item %zd is '%s', not int", i, k,
                         Py_TYPE(x)->tp_name);
            return -1;
        }
        row[k] = PyLong_AsLongLong(x);
        if (row[k] == -1 && PyErr_Occurred())
            return -1;
    }
    for (; k < (Py_ssize_t)width; k++)
        row[k] = 0;
    if (ndim != NULL)
        *ndim = n;
    return 0;
wide:
    PyErr_Format(PyExc_ValueError, "object %zd: more values than the row width %zu", i, width);
    return -1;
}

static int mooncake_py_int64_view(PyObject *o, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(o, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL ||
        (strcmp(view->format, "q") != 0 && strcmp(view->format, "l") != 0 &&
         strcmp(view->format, "<q") != 0 && strcmp(view->format, "<l") != 0 &&
         strcmp(view->format, "=q") != 0 && strcmp(view->format, "=l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s must be a buffer of int64", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* At most this many columns per call (several attributes of one object
 * are read together: the objects are touched once). */
#define MOONCAKE_PY_ATTR_COLUMNS 8

typedef struct mooncake_py_attr_col {
    PyObject *name, *mapping;
    Py_buffer out, nd;
    int have_out, have_nd, intern;
    size_t width;
} mooncake_py_attr_col_t;

static int mooncake_py_attr_col_init(mooncake_py_attr_col_t *c, PyObject *name, PyObject *out,
                                     PyObject *ndims, PyObject *mapping, Py_ssize_t n)
{
    if (!PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "name must be a str");
        return -1;
    }
    if (PyList_Check(mapping) && PyList_GET_SIZE(mapping) == 1 &&
        PyDict_Check(PyList_GET_ITEM(mapping, 0))) {
        c->intern = 1;
        mapping = PyList_GET_ITEM(mapping, 0);
    } else if (mapping != Py_None && !PyDict_Check(mapping)) {
        PyErr_SetString(PyExc_TypeError, "mapping must be a dict, [dict] or None");
        return -1;
    }
    c->name = name;
    c->mapping = mapping;
    if (mooncake_py_int64_view(out, &c->out, "out") != 0)
        return -1;
    c->have_out = 1;
    if (ndims != Py_None) {
        if (mooncake_py_int64_view(ndims, &c->nd, "ndims") != 0)
            return -1;
        c->have_nd = 1;
    }
    c->width = n > 0 ? (size_t)c->out.len / 8 / (size_t)n : 0;
    if ((size_t)c->out.len != c->width * 8 * (size_t)n || (c->have_nd && c->nd.len != n * 8)) {
        PyErr_Format(PyExc_ValueError, "out must hold %zd rows (and ndims %zd values)", n, n);
        return -1;
    }
    return 0;
}

static int mooncake_py_attr_col_fill(mooncake_py_attr_col_t *c, PyObject *obj, Py_ssize_t i)
{
    int rc;
    PyObject *v = PyObject_GetAttr(obj, c->name);
    if (v == NULL)
        return -1;
    if (c->mapping != Py_None) {
        PyObject *m = PyDict_GetItemWithError(c->mapping, v);
        if (m == NULL && !PyErr_Occurred() && c->intern) {
            /* a new value: the next code, in order of first appearance */
            m = PyLong_FromSsize_t(PyDict_GET_SIZE(c->mapping));
            if (m == NULL || PyDict_SetItem(c->mapping, v, m) != 0) {
                Py_XDECREF(m);
                Py_DECREF(v);
                return -1;
            }
            Py_DECREF(m);   /* the dict holds it */
        }
        if (m == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, v);
            Py_DECREF(v);
            return -1;
        }
        Py_INCREF(m);
        Py_DECREF(v);
        v = m;
    }
    rc = mooncake_py_attr_row((int64_t *)c->out.buf + (size_t)i * c->width, c->width,
                              c->have_nd ? (int64_t *)c->nd.buf + i : NULL, v, i);
    Py_DECREF(v);
    return rc;
}

/* name, out, ndims and mapping are one column's, or tuples of as many
 * columns' (at most MOONCAKE_PY_ATTR_COLUMNS). */
PyObject *mooncake_py_reshard_attr_ints(PyObject *objects, PyObject *name, PyObject *out,
                                        PyObject *ndims, PyObject *mapping)
{
    mooncake_py_attr_col_t cols[MOONCAKE_PY_ATTR_COLUMNS];
    PyObject *fast, *result = NULL;
    Py_ssize_t i, k, n, ncols = 1;
    int multi = PyTuple_Check(name);
    memset(cols, 0, sizeof(cols));
    if (multi) {
        ncols = PyTuple_GET_SIZE(name);
        if (ncols < 1 || ncols > MOONCAKE_PY_ATTR_COLUMNS || !PyTuple_Check(out) ||
            !PyTuple_Check(ndims) || !PyTuple_Check(mapping) ||
            PyTuple_GET_SIZE(out) != ncols || PyTuple_GET_SIZE(ndims) != ncols ||
            PyTuple_GET_SIZE(mapping) != ncols) {
            PyErr_Format(PyExc_ValueError, "name, out, ndims and mapping must be tuples of "
                         "1 to %d columns each", MOONCAKE_PY_ATTR_COLUMNS);
            return NULL;
        }
    }
    fast = PySequence_Fast(objects, "objects must be a sequence");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    for (k = 0; k < ncols; k++) {
        if (mooncake_py_attr_col_init(&cols[k], multi ? PyTuple_GET_ITEM(name, k) : name,
                                      multi ? PyTuple_GET_ITEM(out, k) : out,
                                      multi ? PyTuple_GET_ITEM(ndims, k) : ndims,
                                      multi ? PyTuple_GET_ITEM(mapping, k) : mapping, n) != 0)
            goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(fast, i);
        for (k = 0; k < ncols; k++)
            if (mooncake_py_attr_col_fill(&cols[k], obj, i) != 0)
                goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (k = 0; k < ncols; k++) {
        if (cols[k].have_nd)
            PyBuffer_Release(&cols[k].nd);
        if (cols[k].have_out)
            PyBuffer_Release(&cols[k].out);
    }
    Py_DECREF(fast);
    return result;
}

/* ---- stage_json(): a structured object's documents from member tuples --------- */

/* The UTF-8 of str @p o (cached on the object by Python): -1 with an
 * exception set (TypeError naming @p what for a non-str). */
static int stage_str(PyObject *o, const char **p, size_t *len, const char *what)
{
    Py_ssize_t n;

    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not '%s'", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((*p = PyUnicode_AsUTF8AndSize(o, &n)) == NULL)
        return -1;
    *len = (size_t)n;
    return 0;
}

/* An unsigned int of a member tuple: -1 with an exception set. */
static int stage_uint(PyObject *o, unsigned long long max, unsigned long long *v)
{
    *v = PyLong_AsUnsignedLongLong(o);
    if ((*v == (unsigned long long)-1) && PyErr_Occurred())
        return -1;
    if (*v > max) {
        PyErr_SetString(PyExc_OverflowError, "a member's count is out of range");
        return -1;
    }
    return 0;
}

/* The strings and objects of one member besides its descriptor. */
typedef struct {
    PyObject *name;   /* borrowed from the member's tuple */
    PyObject *dtype;  /* new reference; NULL for BYTES */
    char dtbuf[24];   /* an array's dtype.str, when made here */
} stage_names_t;

/* The shape of @p shape (a sequence of ints) into @p dims: its length, or
 * -1 with an exception set. */
static Py_ssize_t stage_dims(PyObject *shape, Py_ssize_t i, int64_t *dims)
{
    PyObject *fast = PySequence_Fast(shape, "a shape must be a sequence of ints");
    Py_ssize_t nd;

    if (fast == NULL)
        return -1;
    nd = PySequence_Fast_GET_SIZE(fast);
    if (nd > MC_CODEC_MAX_NDIM) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "member %zd has %zd dimensions (at most %d)", i, nd,
                     MC_CODEC_MAX_NDIM);
        return -1;
    }
    for (Py_ssize_t d = 0; d < nd; d++) {
        long long x = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, d));

        if ((x == -1) && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        dims[d] = x;
    }
    Py_DECREF(fast);
    return nd;
}

/* Member (name, array): an exact C-contiguous numpy array of a plain
 * numeric dtype (kind b, i, u, f or c), described as NDARRAY with numpy's
 * dtype.str -- byte order, kind, item size -- read off the array's head
 * (numpy's C API, when the module was built with it).  0; 1 for any other
 * array or object (no exception: the caller describes it the general
 * way); -1 with an exception set. */
static int stage_array(PyObject *a, mc_codec_member_t *m, int64_t *dims, stage_names_t *nm)
{
#ifdef HAVE_NUMPY_CAPI
    PyArrayObject *arr = (PyArrayObject *)a;
    PyArray_Descr *d;
    char order;
    int nd, k;

    if (!np_api() || !PyArray_CheckExact(a) || !PyArray_IS_C_CONTIGUOUS(arr))
        return 1;
    d = PyArray_DESCR(arr);
    nd = PyArray_NDIM(arr);
    if ((strchr("biufc", d->kind) == NULL) || (d->kind == '\0') || PyDataType_HASFIELDS(d) ||
        PyDataType_HASSUBARRAY(d) || (nd > MC_CODEC_MAX_NDIM))
        return 1;
    order = d->byteorder;
    if (order == '=')
        order = PY_LITTLE_ENDIAN ? '<' : '>';
    k = snprintf(nm->dtbuf, sizeof(nm->dtbuf), "%c%c%d", order, d->kind,
                 (int)PyArray_ITEMSIZE(arr));
    if ((nm->dtype = PyUnicode_FromStringAndSize(nm->dtbuf, k)) == NULL)
        return -1;
    for (int j = 0; j < nd; j++)
        dims[j] = (int64_t)PyArray_DIM(arr, j);
    m->kind = MC_CODEC_MEMBER_NDARRAY;
    m->nbytes = (uint64_t)PyArray_NBYTES(arr);
    m->dtype = nm->dtbuf;
    m->dtype_len = (size_t)k;
    m->ndim = (uint32_t)nd;
    m->shape = dims;
    return 0;
#else
    (void)a, (void)m, (void)dims, (void)nm;
    return 1;
#endif
}

/* Member @p i from its tuple: (name, nbytes, kind, dtype, shape,
 * element_size, header_bytes), or (name, array) (stage_array()); its
 * shape into @p dims (MC_CODEC_MAX_NDIM entries).  0; 1 for an array
 * stage_array() does not describe; -1 with an exception set. */
static int stage_member(PyObject *t, Py_ssize_t i, mc_codec_member_t *m, int64_t *dims,
                        stage_names_t *nm)
{
    PyObject *dtype, *shape;
    unsigned long long v[4];
    Py_ssize_t nd;

    if (PyTuple_Check(t) && (PyTuple_GET_SIZE(t) == 2)) {
        memset(m, 0, sizeof(*m));
        nm->name = PyTuple_GET_ITEM(t, 0);
        if (stage_str(nm->name, &m->name, &m->name_len, "a member name") != 0)
            return -1;
        return stage_array(PyTuple_GET_ITEM(t, 1), m, dims, nm);
    }
    if (!PyTuple_Check(t) || (PyTuple_GET_SIZE(t) != 7)) {
        PyErr_Format(PyExc_TypeError, "member %zd must be a tuple (name, nbytes, kind, dtype, "
                     "shape, element_size, header_bytes)", i);
        return -1;
    }
    memset(m, 0, sizeof(*m));
    nm->name = PyTuple_GET_ITEM(t, 0);
    if ((stage_str(nm->name, &m->name, &m->name_len, "a member name") != 0) ||
        (stage_uint(PyTuple_GET_ITEM(t, 1), UINT64_MAX, &v[0]) != 0) ||
        (stage_uint(PyTuple_GET_ITEM(t, 2), UINT32_MAX, &v[1]) != 0) ||
        (stage_uint(PyTuple_GET_ITEM(t, 5), UINT32_MAX, &v[2]) != 0) ||
        (stage_uint(PyTuple_GET_ITEM(t, 6), UINT32_MAX, &v[3]) != 0))
        return -1;
    m->nbytes = v[0];
    m->kind = (uint32_t)v[1];
    m->element_size = (uint32_t)v[2];
    m->header_bytes = (uint32_t)v[3];
    dtype = PyTuple_GET_ITEM(t, 3);
    shape = PyTuple_GET_ITEM(t, 4);
    if (dtype != Py_None) {
        if (stage_str(dtype, &m->dtype, &m->dtype_len, "a dtype") != 0)
            return -1;
        Py_INCREF(dtype);
        nm->dtype = dtype;
    }
    if (shape == Py_None)
        return 0;
    if ((nd = stage_dims(shape, i, dims)) < 0)
        return -1;
    m->ndim = (uint32_t)nd;
    m->shape = dims;
    return 0;
}

/* d[k] = v, v's reference taken (also on failure): -1 with an exception set. */
static int stage_set(PyObject *d, const char *k, PyObject *v)
{
    int rc = (v == NULL) ? -1 : PyDict_SetItemString(d, k, v);

    Py_XDECREF(v);
    return rc;
}

/* A shape as a list of ints. */
static PyObject *stage_shape(const mc_codec_member_t *m)
{
    PyObject *l = PyList_New((Py_ssize_t)m->ndim);

    for (uint32_t d = 0; (l != NULL) && (d < m->ndim); d++) {
        PyObject *x = PyLong_FromLongLong(m->shape[d]);

        if (x == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)d, x);
    }
    return l;
}

/* A member's description in the metadata document (what its JSON in
 * the metadata payload parses to). */
static PyObject *stage_field(const mc_codec_member_t *m, PyObject *dtype)
{
    PyObject *d = PyDict_New();

    if (d == NULL)
        return NULL;
    if (m->kind == MC_CODEC_MEMBER_BYTES) {
        if (stage_set(d, "encoding", PyUnicode_FromString("bytes")) != 0)
            goto fail;
        return d;
    }
    Py_INCREF(dtype);
    if ((stage_set(d, "encoding", PyUnicode_FromString((m->kind == MC_CODEC_MEMBER_NDARRAY)
                                                           ? "ndarray" : "torch_tensor")) != 0) ||
        (stage_set(d, "dtype", dtype) != 0) || (stage_set(d, "shape", stage_shape(m)) != 0))
        goto fail;
    if ((m->kind == MC_CODEC_MEMBER_TENSOR) &&
        (stage_set(d, "element_size", PyLong_FromUnsignedLong(m->element_size)) != 0))
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* The manifest entry of one payload -- {"key", "bytes", "chunks"} (and a
 * tensor object's "kind", "dtype", "shape", "metadata_bytes") -- from its
 * chunks c[0..nc) and the keys list; @p key: its key when it is cut into
 * chunks (else the first chunk's). */
static PyObject *stage_spec(const mc_codec_member_t *m, uint64_t nbytes, PyObject *key,
                            PyObject *keys, size_t first, size_t nc,
                            const mc_codec_chunk_t *c, PyObject *dtype)
{
    PyObject *d = PyDict_New(), *chunks = PyList_New((Py_ssize_t)nc);

    if ((d == NULL) || (chunks == NULL))
        goto fail;
    for (size_t j = 0; j < nc; j++) {
        PyObject *e = PyDict_New();
        PyObject *k = PyList_GET_ITEM(keys, (Py_ssize_t)(first + j));

        if (e == NULL)
            goto fail;
        PyList_SET_ITEM(chunks, (Py_ssize_t)j, e);
        Py_INCREF(k);
        if ((stage_set(e, "key", k) != 0) ||
            (stage_set(e, "bytes", PyLong_FromUnsignedLongLong(c[j].size)) != 0))
            goto fail;
    }
    Py_INCREF(key);
    if ((stage_set(d, "key", key) != 0) ||
        (stage_set(d, "bytes", PyLong_FromUnsignedLongLong(nbytes)) != 0))
        goto fail;
    if (stage_set(d, "chunks", chunks) != 0) {
        chunks = NULL;
        goto fail;
    }
    chunks = NULL;
    if ((m != NULL) && (m->kind == MC_CODEC_MEMBER_TENSOR)) {
        Py_INCREF(dtype);
        if ((stage_set(d, "kind", PyUnicode_FromString("tensor")) != 0) ||
            (stage_set(d, "dtype", dtype) != 0) || (stage_set(d, "shape", stage_shape(m)) != 0) ||
            (stage_set(d, "metadata_bytes", PyLong_FromUnsignedLong(m->header_bytes)) != 0))
            goto fail;
    }
    return d;
fail:
    Py_XDECREF(chunks);
    Py_XDECREF(d);
    return NULL;
}

/* The key of a payload cut into chunks (not in the keys list): its first
 * chunk's key less "/chunk/0". */
static PyObject *stage_base_key(const mc_codec_stage_out_t *out, const mc_codec_chunk_t *c)
{
    return PyUnicode_DecodeUTF8(out->keys + c->key_offset, (Py_ssize_t)c->key_len - 8,
                                "strict");
}

/* The Python objects of a written mc_codec_stage_out_t: the keys, the
 * chunk tuples, the manifest document and the member descriptions. */
static PyObject *stage_objects(const mc_codec_stage_out_t *out, const mc_codec_member_t *ms,
                               size_t n, const stage_names_t *nms, PyObject *prefix,
                               PyObject *object_id,
                               unsigned int version, PyObject *meta, PyObject *man)
{
    PyObject *keys = PyList_New((Py_ssize_t)out->nchunks);
    PyObject *chunks = PyList_New((Py_ssize_t)out->nchunks);
    PyObject *manifest = PyDict_New(), *buffers = PyDict_New(), *fields = PyDict_New();
    PyObject *result = NULL;
    size_t c = 0;

    if ((keys == NULL) || (chunks == NULL) || (manifest == NULL) || (buffers == NULL) ||
        (fields == NULL))
        goto done;
    for (size_t j = 0; j < out->nchunks; j++) {
        const mc_codec_chunk_t *e = &out->chunks[j];
        PyObject *k = PyUnicode_DecodeUTF8(out->keys + e->key_offset, (Py_ssize_t)e->key_len,
                                           "strict");
        PyObject *t = Py_BuildValue("(nKK)", (Py_ssize_t)e->member,
                                    (unsigned long long)e->offset, (unsigned long long)e->size);

        if ((k == NULL) || (t == NULL)) {
            Py_XDECREF(k);
            Py_XDECREF(t);
            goto done;
        }
        PyList_SET_ITEM(keys, (Py_ssize_t)j, k);
        PyList_SET_ITEM(chunks, (Py_ssize_t)j, t);
    }
    Py_INCREF(object_id);
    if ((stage_set(manifest, "version", PyLong_FromUnsignedLong(version)) != 0) ||
        (stage_set(manifest, "layout", PyUnicode_FromString("bundle")) != 0) ||
        (stage_set(manifest, "object_id", object_id) != 0))
        goto done;
    /* the payloads' chunks come in member order, the metadata's first */
    for (size_t i = 0; i <= n; i++) {
        const mc_codec_member_t *m = (i == 0) ? NULL : &ms[i - 1];
        size_t member = (i == 0) ? n : i - 1, first = c;
        uint64_t nbytes = (i == 0) ? (uint64_t)PyBytes_GET_SIZE(meta) : m->nbytes;
        PyObject *name = (m == NULL) ? NULL : nms[member].name;
        PyObject *dtype = ((m == NULL) || (nms[member].dtype == NULL)) ? Py_None
                                                                        : nms[member].dtype;
        PyObject *key, *spec;

        while ((c < out->nchunks) && (out->chunks[c].member == member))
            c++;
        if ((c - first == 1) && (out->chunks[first].size == nbytes)) {
            key = PyList_GET_ITEM(keys, (Py_ssize_t)first);
            Py_INCREF(key);
        } else if (c > first) {
            key = stage_base_key(out, &out->chunks[first]);
        } else if (m != NULL) {  /* an empty payload has no chunk: its key made here */
            key = PyUnicode_FromFormat("%U/%U/buffer/%U", prefix, object_id, name);
        } else {  /* (the metadata is never empty) */
            PyErr_SetString(PyExc_SystemError, "the metadata payload has no key");
            key = NULL;
        }
        if (key == NULL)
            goto done;
        spec = stage_spec(m, nbytes, key, keys, first, c - first, &out->chunks[first], dtype);
        Py_DECREF(key);
        if (spec == NULL)
            goto done;
        if (m == NULL) {
            if (stage_set(manifest, "meta", spec) != 0)
                goto done;
        } else {
            PyObject *field = stage_field(m, dtype);
            int rc = (field == NULL) ? -1 : PyDict_SetItem(fields, name, field);

            Py_XDECREF(field);
            rc = (rc == 0) ? PyDict_SetItem(buffers, name, spec) : rc;
            Py_DECREF(spec);
            if (rc != 0)
                goto done;
        }
    }
    if (PyDict_SetItemString(manifest, "buffers", buffers) != 0)
        goto done;
    result = Py_BuildValue("(OOOOOO)", meta, man, keys, chunks, manifest, fields);
done:
    Py_XDECREF(fields);
    Py_XDECREF(buffers);
    Py_XDECREF(manifest);
    Py_XDECREF(chunks);
    Py_XDECREF(keys);
    return result;
}

PyObject *mooncake_py_stage_json(PyObject *prefix, PyObject *object_id, PyObject *meta_head,
                                 PyObject *members, unsigned long long chunk_bytes,
                                 unsigned int version)
{
    enum { GUESS = 16384, GUESS_CHUNKS = 256 };
    const char *pre, *oid, *head;
    size_t pre_len, oid_len, head_len;
    PyObject *fast, *meta = NULL, *man = NULL, *result = NULL;
    mc_codec_member_t *ms = NULL;
    stage_names_t *nms = NULL;
    int64_t *dims = NULL;
    mc_codec_stage_out_t out = {0};
    char *scratch = NULL;
    int rc;
    Py_ssize_t n;
    mc_status_t st;

    if ((stage_str(prefix, &pre, &pre_len, "prefix") != 0) ||
        (stage_str(object_id, &oid, &oid_len, "object_id") != 0) ||
        (stage_str(meta_head, &head, &head_len, "meta_head") != 0))
        return NULL;
    if ((fast = PySequence_Fast(members, "members must be a sequence of tuples")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    ms = PyMem_Calloc((size_t)n + 1, sizeof(*ms));
    nms = PyMem_Calloc((size_t)n + 1, sizeof(*nms));
    dims = PyMem_Malloc(((size_t)n + 1) * MC_CODEC_MAX_NDIM * sizeof(*dims));
    if ((ms == NULL) || (nms == NULL) || (dims == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        rc = stage_member(PySequence_Fast_GET_ITEM(fast, i), i, &ms[i],
                          dims + (size_t)i * MC_CODEC_MAX_NDIM, &nms[i]);
        if (rc > 0) {  /* an array to describe the general way */
            Py_INCREF(Py_None);
            result = Py_None;
        }
        if (rc != 0)
            goto done;
    }
    /* one pass into scratch buffers of a usual stage's size; a second one,
     * sized by the first, only when they were too small */
    for (int pass = 0; pass < 2; pass++) {
        size_t mcap = pass ? out.meta_len : GUESS, fcap = pass ? out.manifest_len : GUESS;
        size_t kcap = pass ? out.keys_len : GUESS, ccap = pass ? out.nchunks : GUESS_CHUNKS;

        PyMem_Free(scratch);
        PyMem_Free(out.chunks);
        scratch = PyMem_Malloc(mcap + fcap + kcap + 1);
        out.chunks = PyMem_Malloc((ccap + 1) * sizeof(*out.chunks));
        if ((scratch == NULL) || (out.chunks == NULL)) {
            PyErr_NoMemory();
            goto done;
        }
        out.meta = scratch;
        out.meta_cap = mcap;
        out.manifest = scratch + mcap;
        out.manifest_cap = fcap;
        out.keys = scratch + mcap + fcap;
        out.keys_cap = kcap;
        out.chunks_cap = ccap;
        st = mc_codec_stage_json(pre, pre_len, oid, oid_len, head, head_len, ms, (size_t)n,
                                 chunk_bytes, version, &out);
        if (st != MC_BUFFER_OVERFLOW)
            break;
    }
    if (st != MC_OK) {
        PyErr_SetString(PyExc_ValueError, mc_last_error_detail());
        goto done;
    }
    meta = PyBytes_FromStringAndSize(out.meta, (Py_ssize_t)out.meta_len);
    man = PyBytes_FromStringAndSize(out.manifest, (Py_ssize_t)out.manifest_len);
    if ((meta != NULL) && (man != NULL))
        result = stage_objects(&out, ms, (size_t)n, nms, prefix, object_id, version, meta,
                               man);
done:
    Py_XDECREF(man);
    Py_XDECREF(meta);
    PyMem_Free(out.chunks);
    PyMem_Free(scratch);
    PyMem_Free(dims);
    for (Py_ssize_t i = 0; (nms != NULL) && (i < n); i++)
        Py_XDECREF(nms[i].dtype);
    PyMem_Free(nms);
    PyMem_Free(ms);
    Py_DECREF(fast);
    return result;
}

/* ---- object_array(): a list as a 1-D object array ----------------------------- */

PyObject *mooncake_py_object_array(PyObject *values)
{
#ifdef HAVE_NUMPY_CAPI
    PyObject *fast, *arr;
    PyObject **items;
    npy_intp n;

    if (!np_api())
        Py_RETURN_NONE;
    if ((fast = PySequence_Fast(values, "values must be a sequence")) == NULL)
        return NULL;
    n = (npy_intp)PySequence_Fast_GET_SIZE(fast);
    /* numpy fills a new object array with None (it needs init): each slot's
     * reference is given back as the row's is put in */
    if ((arr = PyArray_SimpleNew(1, &n, NPY_OBJECT)) == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    items = (PyObject **)PyArray_DATA((PyArrayObject *)arr);
    for (npy_intp i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i), *old = items[i];

        Py_INCREF(o);
        items[i] = o;
        Py_XDECREF(old);
    }
    Py_DECREF(fast);
    return arr;
#else
    (void)values;
    Py_RETURN_NONE;
#endif
}

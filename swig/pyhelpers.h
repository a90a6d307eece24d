/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Python-object builders of the binding (swig/pyhelpers.c), compiled into
 * the _capi module next to the SWIG wrapper; python.i declares them to
 * SWIG.  Each one turns a column of the structured-object codecs
 * (mooncake/codec.h) into the Python objects a caller gets back, in one
 * pass in C instead of a per-row Python loop.  All are called with the
 * interpreter lock held (%nothread) and return a new reference, or NULL
 * with a Python exception set.
 */
#ifndef MOONCAKE_SWIG_PYHELPERS_H
#define MOONCAKE_SWIG_PYHELPERS_H

#include <Python.h>

/*
 * The rows of a blob payload (bytes_ragged, utf8_ragged, ...): a list of
 * @p text ? str (strict UTF-8) : bytes, None for a null row.  @p data is
 * any C-contiguous buffer (its bytes), @p offsets a buffer of native int64
 * (rows + 1 of them), @p nulls a buffer of one byte per row or None.  The
 * offsets are checked (mc_codec_blob_check()) before anything is sliced:
 * ValueError names the bad one; UnicodeDecodeError for a row that is not
 * UTF-8.
 */
PyObject *mooncake_py_blob_rows(PyObject *data, PyObject *offsets, PyObject *nulls, int text);

/*
 * The bytes of @p o when it is an exact, C-contiguous numpy array, read
 * off the array (numpy's C API, when the module was built with it): 1
 * with *@p base_p and *@p len_p set, as a simple buffer request would set
 * them; 0 otherwise (and always without numpy's C API), when the caller
 * requests its buffer.  Nothing is held: the caller keeps a reference to
 * @p o for as long as it uses the bytes.
 */
int mooncake_py_array_span(PyObject *o, const void **base_p, size_t *len_p);

/*
 * The rows of a typed-ragged payload as views of @p data (a 1-D numpy
 * array of the element type): data[offsets[i]:offsets[i + 1]], reshaped to
 * the row's shape unless it is 1-D, None for a null row.  @p offsets and
 * @p shapes are buffers of native int64 (rows + 1, and rows x width),
 * @p ndims of int16, @p nulls of one byte, each per row.  The layout is
 * checked (mc_codec_ragged_check()) before anything is sliced: ValueError
 * names the first bad row.
 */
PyObject *mooncake_py_ragged_rows(PyObject *data, PyObject *offsets, PyObject *shapes,
                                  PyObject *ndims, PyObject *nulls);

/*
 * The utf8_ragged payload of a column of str (or None): every str's
 * UTF-8 (strict, as str.encode) back to back, returned as one bytes
 * object; @p offsets_out (a writable buffer of rows + 1 aligned native
 * int64) gets the byte offset of each row, @p nulls_out (rows bytes) 1 for
 * a None row and 0 otherwise.  Nothing is cached on the str objects.
 * TypeError for a row that is neither str nor None, UnicodeEncodeError
 * for a str that has no UTF-8 (a lone surrogate).  With @p exact non-zero,
 * None (no exception) as soon as a row is neither exactly a str (no
 * subclass) nor None: the caller's one typing pass of such a column.
 */
PyObject *mooncake_py_utf8_pack(PyObject *values, PyObject *offsets_out, PyObject *nulls_out,
                                int exact);

/*
 * The one typing pass of a DataProto column of arrays, and its
 * typed-ragged layout: when every item of @p values is None or an object
 * of exactly @p array_type (numpy.ndarray) exporting a C-contiguous buffer
 * of at most one dimension, all of one buffer format and item size, and
 * at least one is not None, writes what mc_codec_ragged_describe() writes
 * with width 1 into @p offsets_out (rows + 1 aligned native int64),
 * @p shapes_out (rows int64), @p ndims_out (rows int16) and @p nulls_out
 * (rows bytes), and returns (format, itemsize, elements, null rows,
 * largest ndim): what a writer needs besides the layout.  Returns None,
 * with nothing written and no exception, for any other column: the caller
 * types it the general way.  ValueError / TypeError for outputs of the
 * wrong size or kind.
 */
PyObject *mooncake_py_ragged_column(PyObject *values, PyObject *array_type,
                                    PyObject *offsets_out, PyObject *shapes_out,
                                    PyObject *ndims_out, PyObject *nulls_out);

/*
 * reshard_attr_ints(objects, name, out, ndims, mapping): per object i,
 * v = getattr(objects[i], name) (mapping[v] when mapping is not None),
 * an int or a tuple of ints, written left-aligned into row i of `out`
 * (a writable C-contiguous int64 buffer of n rows; its length fixes the
 * row width), zero-padded, and its length into ndims[i] (an int64 buffer
 * of n, or None).  mapping may also be [dict]: a value not in the dict
 * is added with the next code (len(dict)), so that one pass numbers the
 * distinct values in order of appearance.  The reshard planner derives
 * the columns of a manifest of 10^5 fragments with it in milliseconds,
 * where attribute access and numpy.fromiter in Python take tens.  It
 * reads Python objects, so it keeps the interpreter lock. */
PyObject *mooncake_py_reshard_attr_ints(PyObject *objects, PyObject *name, PyObject *out,
                                        PyObject *ndims, PyObject *mapping);

/*
 * stage_json(prefix, object_id, meta_head, members, chunk_bytes, version):
 * mc_codec_stage_json() of a structured object whose members are given as
 * tuples (name, nbytes, kind, dtype, shape, element_size, header_bytes) --
 * kind a mc_codec_member_kind_t, dtype a str (None for BYTES), shape a
 * sequence of ints (None for BYTES) -- or (name, array): an exact
 * C-contiguous numpy array of a plain numeric dtype (bool, int, uint,
 * float, complex), an NDARRAY member of its dtype.str and shape read off
 * the array (numpy's C API).  Returns None, with nothing made, when such
 * an array is not one (or the module was built without numpy's headers):
 * the caller describes the members the general way.  Otherwise returns (metadata JSON bytes,
 * manifest JSON bytes, keys: list of str, chunks: list of (member,
 * offset, size), manifest, fields): a chunk's member is the member count
 * for the metadata payload; manifest is the manifest document and fields
 * the members' descriptions (the metadata's "__mooncake_structured_fields__"),
 * as parsing the two JSON documents gives them.  ValueError (the library's detail) for what it
 * refuses, TypeError for a malformed tuple, UnicodeEncodeError for a str
 * without UTF-8.  It reads Python objects, so it keeps the lock.
 */
PyObject *mooncake_py_stage_json(PyObject *prefix, PyObject *object_id, PyObject *meta_head,
                                 PyObject *members, unsigned long long chunk_bytes,
                                 unsigned int version);

/*
 * object_array(values): a 1-D numpy object array holding each item of the
 * sequence @p values as it is (never broadcast: rows that are arrays of
 * one length stay rows) -- np.fromiter(values, dtype=object) without its
 * per-item conversion, for the thousands of rows a DataProto read hands
 * back.  None when the module was built without numpy's C API (or numpy
 * cannot be loaded): the caller makes it the numpy way.
 */
PyObject *mooncake_py_object_array(PyObject *values);

#endif /* MOONCAKE_SWIG_PYHELPERS_H */

# SPDX-License-Identifier: Apache-2.0
"""Gathering numpy arrays back to back into raw memory.

:func:`concat_arrays_into` copies a list of C-contiguous arrays into the
memory at an address (a BufferPool lease, registered memory) in one pass,
without building ``np.concatenate(arrays)`` first.  The copy runs in
libmooncake (``mc_fastcopy_gather``, ``mooncake/fastcopy.h``) without the
interpreter lock, split across up to ``nthreads`` threads for large inputs.

:func:`ragged_pack` lays rows out in the typed-ragged layout
(``mooncake/codec.h``); :func:`ragged_describe` gives the same layout
without the data copy, for a writer that sends the rows from their own
memory.

:func:`ragged_rows` and :func:`blob_rows` go the other way: the rows of a
fetched payload as the Python objects a reader returns (numpy views, str,
bytes), checked and built in one native call (``swig/pyhelpers.c``);
:func:`utf8_pack` makes the payload of a column of str the same way.

``stage_json`` writes the metadata and manifest JSON of a structured
object, and its keys, from member descriptions (``mc_codec_stage_json``);
``object_array`` makes the object array a reader returns of its rows.

May import: numpy, the native binding, _errors and _util (the low layer);
never store or structured_object_store, which call it.
"""

import operator
from typing import Any, Optional, Sequence, Tuple

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("mooncake._fast_copy needs numpy: install python3-numpy (Debian) "
                      f"or the numpy package ({e})") from e

from mooncake import capi as _capi
from mooncake import _util
from mooncake._errors import last_error_detail

__all__ = ["concat_arrays_into", "ragged_pack", "ragged_describe", "ragged_column",
           "ragged_rows", "blob_rows", "utf8_pack", "stage_json", "object_array",
           "HAVE_ROW_BUILDERS", "HAVE_RAGGED_COLUMN"]

#: Whether this build's extension has ragged_rows(), blob_rows() and utf8_pack().
HAVE_ROW_BUILDERS = all(hasattr(_capi, f) for f in ("codec_ragged_rows", "codec_blob_rows",
                                                    "codec_utf8_pack"))
#: Whether this build's extension has ragged_column().
HAVE_RAGGED_COLUMN = hasattr(_capi, "codec_ragged_column")

#: ``stage_json(prefix, object_id, meta_head, members, chunk_bytes, version)
#: -> (metadata JSON, manifest JSON, keys, chunks)``: ``mc_codec_stage_json``
#: of members given as tuples ``(name, nbytes, kind, dtype, shape,
#: element_size, header_bytes)`` (kind 0 an ndarray, 1 bytes, 2 a tensor
#: object; dtype and shape None for bytes); each chunk is ``(member,
#: offset, size)`` of the key at the same index, the member count standing
#: for the metadata payload (swig/pyhelpers.h).  ValueError for what the
#: library refuses.  The extension's function itself (no wrapper frame: a
#: DataProto put calls it once), or None for a build without it.
stage_json = getattr(getattr(_capi, "_capi", _capi), "codec_stage_json", None)

#: ``object_array(values)``: a 1-D object array holding each item of the
#: sequence as it is (``np.fromiter(values, dtype=object)``, without its
#: per-item conversion), or None when the extension was built without
#: numpy's C API; None for a build without it.  The extension's function
#: itself (swig/pyhelpers.h).
object_array = getattr(getattr(_capi, "_capi", _capi), "codec_object_array", None)


def concat_arrays_into(arrays: Sequence[Any], dest_ptr: int, dest_size: int,
                       start: int = 0, count: int = -1, nthreads: int = 1) -> int:
    """Copy ``arrays[start:start + count]`` back to back to ``dest_ptr``.

    Args:
        arrays: numpy arrays, each C-contiguous (any dtypes and shapes).
        dest_ptr: destination address; ``dest_size`` bytes must be writable
            there.
        start, count: the range of ``arrays`` to copy, clamped to the list
            (``count < 0``: to the end).
        nthreads: most threads to copy with (clamped to [1, 64]; inputs
            under 4 MiB are copied by the calling thread).

    Returns:
        The bytes copied (0 for an empty range).

    Raises:
        TypeError: an item is not an ndarray, or an argument is not an int.
        ValueError: an item is not C-contiguous, or the arrays hold more
            than ``dest_size`` bytes ("destination buffer too small ...").
    """
    for name, v in (("dest_ptr", dest_ptr), ("dest_size", dest_size), ("start", start),
                    ("count", count), ("nthreads", nthreads)):
        if not _util.is_int(v):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if dest_ptr < 0 or dest_size < 0:
        raise ValueError("dest_ptr and dest_size must not be negative")
    n = len(arrays)
    start = min(max(start, 0), n)
    end = n if count < 0 else min(start + count, n)
    items = list(arrays[start:end])
    for i, a in enumerate(items):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"item {start + i} is not an ndarray but {type(a).__name__}")
        if not a.flags.c_contiguous:
            raise ValueError(f"item {start + i} is not C-contiguous")
    if not items:
        return 0
    # 0-d and empty arrays export fine as buffers; uint8 views keep every
    # dtype (bool, float16, complex...) exportable
    views = [a.reshape(-1).view(np.uint8) if a.size else b"" for a in items]
    st, copied = _capi.mc_fastcopy_gather(int(dest_ptr), int(dest_size), views,
                                          max(1, min(int(nthreads), 64)))
    if st != 0:
        raise ValueError(last_error_detail() or f"mc_fastcopy_gather failed ({st})")
    return int(copied)


def ragged_pack(rows: Sequence[Any], dtype: Any, nthreads: int = 1,
                alloc: Any = None) -> dict:
    """Rows (C-contiguous arrays of ``dtype``, or None for a null row) in
    the typed-ragged layout of ``mooncake/codec.h``: ``{"data", "offsets",
    "shapes", "ndims", "nulls"}`` as new arrays.  The shapes, offsets and
    the gather copy of the data are done by libmooncake
    (``mc_codec_ragged_measure`` + ``mc_codec_ragged_pack``) without the
    interpreter lock, in one pass over the rows.

    ``alloc(nbytes, dtype)``, when given, makes the 1-D data array (e.g.
    in registered memory); default ``np.empty``.

    Raises:
        TypeError: a row is neither None nor an array.
        ValueError: a row is not C-contiguous or not of ``dtype``.
    """
    dt = np.dtype(dtype)
    _check_rows(rows, dt)
    st, elems, max_ndim = _capi.mc_codec_ragged_measure(rows, dt.itemsize)
    if st != 0:
        raise ValueError(last_error_detail() or f"mc_codec_ragged_measure failed ({st})")
    n = len(rows)
    width = max(int(max_ndim), 1)
    data = np.empty(int(elems), dt) if alloc is None else alloc(int(elems) * dt.itemsize, dt)
    offsets = np.empty(n + 1, np.int64)
    shapes = np.empty((n, width), np.int64)
    ndims = np.empty(n, np.int16)
    nulls = np.empty(n, np.bool_)
    st = _capi.mc_codec_ragged_pack(rows, dt.itemsize, int(data.ctypes.data), int(data.nbytes),
                                    int(offsets.ctypes.data), int(shapes.ctypes.data), width,
                                    int(ndims.ctypes.data), int(nulls.ctypes.data),
                                    max(1, min(int(nthreads), 64)))
    if st != 0:
        raise ValueError(last_error_detail() or f"mc_codec_ragged_pack failed ({st})")
    return {"data": data, "offsets": offsets, "shapes": shapes, "ndims": ndims, "nulls": nulls}


def _check_rows(rows: Sequence[Any], dt: np.dtype) -> None:
    """Every row is None or an ndarray of ``dt`` (one check per distinct
    type and dtype; the row loop only finds the culprit)."""
    types = set(map(type, rows)) - {type(None)}
    if all(issubclass(t, np.ndarray) for t in types):
        arrays = rows if len(types) == len(set(map(type, rows))) else \
            [r for r in rows if r is not None]
        if set(map(operator.attrgetter("dtype"), arrays)) <= {dt}:
            return
    for i, r in enumerate(rows):
        if r is not None and (not isinstance(r, np.ndarray) or r.dtype != dt):
            raise ValueError(f"row {i} is not an ndarray of {dt}")


def ragged_describe(rows: Sequence[Any], dtype: Any, checked: bool = False
                    ) -> Tuple[dict, int]:
    """The typed-ragged layout of ``rows`` (C-contiguous arrays of
    ``dtype``, or None) without their data: ``({"offsets", "shapes",
    "ndims", "nulls"}, elements)``, the arrays :func:`ragged_pack` makes,
    from ``mc_codec_ragged_measure`` + ``mc_codec_ragged_describe``.  The
    data payload is then the rows that are not None back to back, written
    from their own memory (``batch_put_parts``) -- the very bytes
    :func:`ragged_pack` would have copied.

    ``checked``: the caller knows every row is None or an ndarray of
    ``dtype`` (the type pass is skipped; the native side still checks
    each row's contiguity, shape and bytes).

    Raises:
        TypeError: a row is neither None nor an array.
        ValueError: a row is not C-contiguous or not of ``dtype``.
    """
    dt = np.dtype(dtype)
    if not checked:
        _check_rows(rows, dt)
    n = len(rows)
    offsets = np.empty(n + 1, np.int64)
    ndims = np.empty(n, np.int16)
    nulls = np.empty(n, np.bool_)
    # rows of at most one dimension (token ids): one call, no measuring pass
    shapes = np.empty((n, 1), np.int64)
    st, elems = _describe(rows, dt, offsets, shapes, ndims, nulls)
    if st != 0:  # wider rows, or a bad one: measure (which names it), then describe
        st, _, max_ndim = _capi.mc_codec_ragged_measure(rows, dt.itemsize)
        if st != 0:
            raise ValueError(last_error_detail() or f"mc_codec_ragged_measure failed ({st})")
        shapes = np.empty((n, max(int(max_ndim), 1)), np.int64)
        st, elems = _describe(rows, dt, offsets, shapes, ndims, nulls)
        if st != 0:
            raise ValueError(last_error_detail() or f"mc_codec_ragged_describe failed ({st})")
    return {"offsets": offsets, "shapes": shapes, "ndims": ndims, "nulls": nulls}, int(elems)


def ragged_column(values: Sequence[Any]) -> Optional[Tuple[dict, int, np.dtype, int, int]]:
    """The typed-ragged layout of a column of arrays, typed in the same
    pass: when every row is None or exactly a ``numpy.ndarray`` (no
    subclass), C-contiguous, of at most one dimension, all of one native
    numeric dtype, and at least one row is not None, ``({"offsets",
    "shapes", "ndims", "nulls"}, elements, dtype, null rows, largest
    ndim)`` -- the layout :func:`ragged_describe` gives for such rows,
    and the counts a writer needs besides.  None for any other
    column (nothing is raised for it): the caller types it the general
    way.  One native call (``swig/pyhelpers.c``) instead of a pass per
    question (the rows' types, their dtypes, the layout).
    """
    n = len(values)
    if n == 0:
        return None
    offsets = np.empty(n + 1, np.int64)
    shapes = np.empty((n, 1), np.int64)
    ndims = np.empty(n, np.int16)
    nulls = np.empty(n, np.bool_)
    got = _capi.codec_ragged_column(values, np.ndarray, offsets, shapes, ndims, nulls)
    if got is None:
        return None
    fmt, itemsize, elems, nnull, max_ndim = got
    # the buffer format names the element type: the first array's dtype is
    # every row's (same format and size); refuse anything not plainly numeric
    dt = next(v for v in values if v is not None).dtype
    if dt.kind not in "iufc" or not dt.isnative or dt.itemsize != itemsize or \
            fmt[:1] in "<>!=@" or dt.char != fmt:
        return None
    return ({"offsets": offsets, "shapes": shapes, "ndims": ndims, "nulls": nulls}, elems, dt,
            nnull, max_ndim)


def _describe(rows: Sequence[Any], dt: np.dtype, offsets: Any, shapes: Any, ndims: Any,
              nulls: Any) -> Tuple[int, int]:
    """mc_codec_ragged_describe into the arrays (shapes is rows x width);
    (status, elements).  Nothing is written unless it succeeds."""
    return _capi.mc_codec_ragged_describe(rows, dt.itemsize, int(offsets.ctypes.data),
                                          int(shapes.ctypes.data), shapes.shape[1],
                                          int(ndims.ctypes.data), int(nulls.ctypes.data))


def ragged_rows(data: Any, offsets: Any, shapes: Any, ndims: Any, nulls: Any) -> list:
    """The rows of a typed-ragged payload as views of ``data``.

    Args:
        data: the 1-D data array (any numeric dtype); the rows are its
            slices ``data[offsets[i]:offsets[i + 1]]``, reshaped to the
            row's shape unless it is 1-D.
        offsets: int64 array, rows + 1 entries.
        shapes: int64 array of rows x width entries (width >= 1).
        ndims: int16 array, one per row.
        nulls: bool array, one per row (a null row comes back as None).

    Every array must be C-contiguous and of exactly that dtype (native
    byte order).  The layout is checked first (``mc_codec_ragged_check``):
    it may come from another process.

    Raises:
        ValueError: the layout is inconsistent (the message names the
            first bad row) or the arrays do not describe the same rows.
        TypeError: an argument has no C-contiguous buffer.
    """
    return _capi.codec_ragged_rows(data, offsets, shapes, ndims, nulls)


def blob_rows(data: Any, offsets: Any, nulls: Any, text: bool) -> list:
    """The rows of a byte-string payload as ``str`` (``text``: strict
    UTF-8) or ``bytes``, None for null rows.

    Args:
        data: any C-contiguous buffer (bytes, a uint8 array...).
        offsets: int64 array, rows + 1 entries (native byte order).
        nulls: bool array of one entry per row, or None (no null rows).

    The offsets are checked first (``mc_codec_blob_check``).

    Raises:
        ValueError: "ragged offsets do not match the data ...", or nulls
            of another length.
        UnicodeDecodeError: a ``text`` row is not UTF-8.
    """
    return _capi.codec_blob_rows(data, offsets, nulls, 1 if text else 0)


def utf8_pack(values: Sequence[Any], exact: bool = False) -> Optional[Tuple[bytes, Any, Any]]:
    """A column of str (or None) in the utf8_ragged layout: ``(data,
    offsets, nulls)`` -- every str's UTF-8 back to back, the int64 byte
    offset of each row (rows + 1), a bool per row (True for None) -- the
    very bytes ``b"".join(v.encode("utf-8") for v in values)`` gives, made
    in one native call.  With ``exact``, None as soon as a row is neither
    exactly a ``str`` (no subclass) nor None: the column's typing done in
    the same pass.

    Raises:
        TypeError: a row is neither str nor None (without ``exact``).
        UnicodeEncodeError: a str has no UTF-8 (a lone surrogate).
    """
    n = len(values)
    offsets = np.empty(n + 1, np.int64)
    nulls = np.empty(n, np.bool_)
    data = _capi.codec_utf8_pack(values, offsets, nulls, 1 if exact else 0)
    if data is None:
        return None
    return data, offsets, nulls

# SPDX-License-Identifier: Apache-2.0
"""Structured objects, bundles and DataProtos on top of a Mooncake store
(upstream Mooncake's module, name for name and byte for byte).

A *structured object* is one logical object made of named members --
numpy arrays, byte strings, torch tensors and tensor objects -- plus a
JSON metadata dict.  A *bundle* is the raw form of the
same thing: metadata bytes plus named byte payloads.  Both are written as
several store keys and one manifest, and read back through a reference
(:class:`RemoteBundleRef`) that is all another process needs::

    from mooncake.structured_object_store import (
        MooncakeBundleTransfer, StructuredObjectPayload)

    transfer = MooncakeBundleTransfer(store, key_prefix="demo/structured")
    ref = transfer.put_structured_object(StructuredObjectPayload(
        metadata={"step": 7},
        buffers={"tokens": np.arange(24, dtype=np.int32).reshape(6, 4),
                 "prompt_ids": b"sample-ids"}))
    spec = transfer.read_spec({"manifest_key": ref.manifest_key})
    rows = transfer.materialize(spec.slice_member("tokens", 0, 2, 5)).objects["tokens"]

A *DataProto* (verl's batch type: ``batch`` tensors, ``non_tensor_batch``
per-row values, ``meta_info``) is stored as stages of structured objects
by :meth:`MooncakeBundleTransfer.put` and read back, all or some rows and
fields, by :meth:`MooncakeBundleTransfer.get` from any process holding
its handle (:func:`export_dataproto_ref`)::

    ref = transfer.put(data, partition="step-3")
    got = transfer.get(import_ref(export_ref(ref)), rows=[0, 5], fields=["tokens"])

Per-row non-tensor values are stored by codecs (ragged numeric rows,
strings, bytes, msgpack/JSON values, images, nested structures) chosen by
a :class:`FieldSchema` or inferred from the values exactly as upstream.

Key layout, manifest format, copy modes, the atomicity rule and what a
crash leaves behind are documented in ``docs/structured.md``.  In short:

* keys live under ``{key_prefix}/{partition}/{uuid}``: ``/meta``,
  ``/buffer/{member}`` (``/chunk/{i}`` when a payload is split) and
  ``/manifest``, written last; every write uses a fresh uuid, so a reader
  holding a reference sees a complete object or none;
* a failed write removes what it wrote and raises
  :class:`StructuredObjectWriteError` naming the member;
* manifests are versioned; anything else at the manifest key raises
  :class:`StructuredManifestError`;
* ``materialize_into`` fills the caller's arrays (the result holds the
  very same objects), a slice reads only its byte range
  (``get_into_ranges``).

May import: the low layer (_util, _keys, _fast_copy, buffer_pool; _tensor
lazily) and store (lazily: this module imports without the native
extension); never dataproto_catalog or reshard, which are built on it or
beside it.
"""

import copy
import ctypes
import json
import math
import operator
import os
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping as _AbcMapping
from types import MappingProxyType
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple,
                    Union)

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("mooncake.structured_object_store needs numpy: install python3-numpy "
                      f"(Debian) or the numpy package ({e})") from e

from mooncake import _util
from mooncake import buffer_pool as _buffer_pool
from mooncake._keys import _ere_escape, _normalize_key_prefix

try:  # the native gather copy; the pure-numpy path is used without it
    from mooncake._fast_copy import concat_arrays_into as _concat_arrays_into
except Exception:  # pragma: no cover - depends on the built extension
    _concat_arrays_into = None

try:  # the native typed-ragged packer (mc_codec_ragged_pack); numpy without it
    from mooncake._fast_copy import ragged_pack as _native_ragged_pack
except Exception:  # pragma: no cover - depends on the built extension
    _native_ragged_pack = None

try:  # the layout without the data copy (mc_codec_ragged_describe)
    from mooncake._fast_copy import ragged_describe as _native_ragged_describe
except Exception:  # pragma: no cover - depends on the built extension
    _native_ragged_describe = None

try:  # a payload's per-row objects in one native call (swig/pyhelpers.c)
    from mooncake import _fast_copy as _fc
    _native_ragged_rows = _fc.ragged_rows if _fc.HAVE_ROW_BUILDERS else None
    _native_blob_rows = _fc.blob_rows if _fc.HAVE_ROW_BUILDERS else None
    _native_utf8_pack = _fc.utf8_pack if _fc.HAVE_ROW_BUILDERS else None
    _native_ragged_column = _fc.ragged_column if _fc.HAVE_RAGGED_COLUMN else None
except Exception:  # pragma: no cover - depends on the built extension
    _native_ragged_rows = _native_blob_rows = _native_utf8_pack = None
    _native_ragged_column = None

try:  # a stage's metadata, manifest and keys in one native call (mc_codec_stage_json)
    from mooncake._fast_copy import stage_json as _native_stage_json
except Exception:  # pragma: no cover - depends on the built extension
    _native_stage_json = None

try:  # a column's rows as an object array in one native pass
    from mooncake._fast_copy import object_array as _native_object_array
except Exception:  # pragma: no cover - depends on the built extension
    _native_object_array = None

DEFAULT_BUNDLE_CHUNK_BYTES = 64 * 1024 ** 2
#: Staged writes of at least this many bytes and AUTO_PARALLEL_MIN_CHUNKS
#: chunks go through the thread pool under put_mode="auto".
AUTO_PARALLEL_MIN_BYTES = 64 * 1024 ** 2
AUTO_PARALLEL_MIN_CHUNKS = 8
#: The manifest version this module writes and the only one it reads.
MANIFEST_VERSION = 1
#: OBJECT_NOT_FOUND: removing a key that is already gone counts as removed.
MISSING_OBJECT_ERROR = -704
#: Key of the member descriptions inside a structured object's metadata.
STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"
_INVALID_PARAMS = -600
# a store call this client cannot make (batch_put_parts_commit on a dummy)
_NOT_SUPPORTED = -1012
# In copy_mode="auto", C-contiguous ndarray payloads of at least this many
# bytes are registered in place and written straight from the caller's
# memory; smaller ones are staged (registration costs more than the copy).
_IN_PLACE_MIN_BYTES = 1 << 20
# Metadata mark of an object put_object() made from a single value.
_WRAPPED_KEY = "__mooncake_wrapped_object__"
# Structured metadata of this many objects is kept per transfer.
_META_CACHE_SIZE = 256
# The member encodings of upstream's format, the only ones written and read.
_ENCODINGS = ("bytes", "ndarray", "torch_tensor")
# Bytes of a tensor object's header (docs/tensor.md), before its data.
_TENSOR_HEADER_BYTES = 304
# A DataProto read fetches payloads of at least this many bytes that are
# only viewed (ragged ndarray rows, whole members) while it decodes the rest.
_LATE_MIN_BYTES = 1 << 20
# Below this many CPUs those payloads are copied by the completion queue's
# worker alone (MC_STORE_AQ_BATCH_GET_INTO_LOCAL): spread over the transfer
# engine's workers (the caller of the copy and 3 more by default) the copy
# has no core left for the decoding beside it -- on the 2-core development
# VM the get waited 0.2-1.8 ms longer so (bench/README.md, sixth round).  With more cores the spread copy is
# the faster one and is kept (not measured here: no such host).
_LOCAL_READ_MAX_CPUS = 4
# A DataProto write sends typed-ragged rows as parts of their own (no packed
# copy) when they average at least this many bytes, or when it writes to a
# segment of this host: the same-host path copies a part for about what a
# memcpy costs, a network transport moves every part as a request of its own.
_ROW_PART_MIN_BYTES = 64 << 10


# ---- errors ---------------------------------------------------------------------------------

class StructuredObjectError(RuntimeError):
    """A store operation of a structured object or bundle failed.

    ``rc`` is the store's status (a negative ErrorCode) when one caused it.
    """

    def __init__(self, message: str, rc: Optional[int] = None) -> None:
        super().__init__(message)
        self.rc = rc


class StructuredManifestError(StructuredObjectError, ValueError):
    """What is stored at a manifest key is not a manifest this module reads
    (not JSON, another format, another version, inconsistent sizes or keys)."""


class StructuredObjectWriteError(StructuredObjectError):
    """A write failed; ``member`` names the payload (``"meta"``,
    ``"manifest"`` or a member name).  What was written has been removed."""

    def __init__(self, message: str, member: str, rc: Optional[int] = None) -> None:
        super().__init__(message, rc)
        self.member = member


class StructuredObjectReadError(StructuredObjectError):
    """A read failed (manifest missing, a payload missing or short)."""


class BundleRemoveError(StructuredObjectError):
    """remove_bundle() could not remove some keys.

    ``failed`` maps each affected payload (``"manifest"``, ``"meta"`` or a
    member name) to ``{key: status}``.  Everything else was removed;
    calling remove_bundle() again with the same reference retries (keys
    already gone count as removed).
    """

    def __init__(self, failed: Dict[str, Dict[str, int]]) -> None:
        names = ", ".join(sorted(failed))
        super().__init__(f"remove_bundle: could not remove the keys of {names}: {failed}")
        self.failed = failed


# ---- public value types -----------------------------------------------------------------

@dataclass(frozen=True)
class BundleTransferPolicy:
    """How payloads are written.

    copy_mode:
        ``"auto"`` (default): large C-contiguous arrays are written from
        their own memory (registered for the call); other payloads are
        staged through a BufferPool lease and written with
        ``batch_put_from``; without a BufferPool (no local buffer) or
        ``batch_put_from`` the regular ``store.put`` is used.
        ``"copy"``: every payload goes through ``store.put``.
        ``"zero_copy"``: every member must be a :func:`tensor_object_buffer`
        (written by ``put_tensor_from`` from its registered memory); any
        other member is refused with ValueError.
    put_mode / max_inflight_put:
        ``"batch"`` writes staged chunks one after another; ``"parallel"``
        (or ``"auto"`` with ``max_inflight_put > 1``) writes up to
        ``max_inflight_put`` staged chunks at once from a thread pool.
    """

    max_inflight_put: int = 1
    put_mode: str = "auto"
    copy_mode: str = "auto"



def _check_policy(policy: "BundleTransferPolicy", inflight: Any) -> None:
    """Upstream checks a policy when it is used, not when it is made."""
    if not _util.is_int(inflight) or inflight < 1:
        raise ValueError("max_inflight_put must be positive")
    if policy.put_mode not in ("auto", "batch", "parallel"):
        raise ValueError(f"unsupported put_mode: {policy.put_mode}")
    if policy.copy_mode not in ("auto", "zero_copy", "copy"):
        raise ValueError(f"unsupported copy_mode: {policy.copy_mode}")


@dataclass
class RemoteBundleRef:
    """Reference to a stored bundle or structured object.

    ``manifest_key`` alone identifies it (pass it, or ``{"manifest_key":
    key}``, to another process); ``manifest`` is the decoded manifest when
    this process wrote or already read it (an empty dict is fetched on
    first use).
    """

    manifest_key: str
    manifest: Dict[str, Any] = field(default_factory=dict)


class BundleStore(Protocol):
    """What a transfer needs of a store.  The zero-copy calls
    (``batch_put_from``, ``put_tensor``, ``get_into_ranges``,
    ``register_buffer``, ``batch_remove``, ...) are used when present."""

    def put(self, key: str, value: Any, config: Any = None) -> int: ...

    def get(self, key: str) -> bytes: ...

    def remove(self, key: str, force: bool = False) -> int: ...


@dataclass(frozen=True, init=False)
class StructuredObjectPayload:
    """A structured object to write: JSON-able ``metadata`` and named
    ``buffers`` (numpy arrays, bytes-like objects, lists of numpy arrays of
    one dtype, :func:`tensor_object_buffer`)."""

    metadata: Mapping[str, Any]
    buffers: Mapping[str, Any]

    def __init__(self, metadata: Optional[Mapping[str, Any]] = None,
                 buffers: Optional[Mapping[str, Any]] = None) -> None:
        if buffers is None:
            raise TypeError("StructuredObjectPayload requires buffers")
        object.__setattr__(self, "metadata", {} if metadata is None else metadata)
        object.__setattr__(self, "buffers", buffers)


@dataclass
class StructuredObjectResult:
    """What materialize() returns: the object's metadata and its members."""

    metadata: Dict[str, Any]
    objects: Dict[str, Any]


@dataclass(frozen=True)
class StructuredMemberSlice:
    """Rows ``start:end:step`` of one member along ``axis``."""

    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """What to read of a structured object: every member by default;
    :meth:`select_members` and :meth:`slice_member` return narrowed copies."""

    ref: Any
    member_names: Optional[Tuple[str, ...]] = None
    member_slices: Tuple[Tuple[str, StructuredMemberSlice], ...] = ()

    def select_members(self, names: Optional[Sequence[str]]) -> "StructuredObjectReadSpec":
        """Only these members (None: all of them)."""
        if names is not None and (isinstance(names, (str, bytes)) or
                                  not all(isinstance(n, str) for n in names)):
            raise TypeError("select_members takes a list of member names")
        return StructuredObjectReadSpec(self.ref, None if names is None else tuple(names),
                                        self.member_slices)

    def slice_member(self, name: str, axis: int, start: int, end: int,
                     step: int = 1) -> "StructuredObjectReadSpec":
        """Read only ``start:end:step`` of member ``name`` along ``axis``."""
        for what, v in (("axis", axis), ("start", start), ("end", end), ("step", step)):
            if not _util.is_int(v):
                raise TypeError(f"{what} must be an int, not {type(v).__name__}")
        if step < 1:
            raise ValueError("structured ndarray slicing step must be positive")
        slices = dict(self.member_slices)
        slices[name] = StructuredMemberSlice(int(axis), int(start), int(end), int(step))
        return StructuredObjectReadSpec(self.ref, self.member_names, tuple(slices.items()))

    def member_slice(self, name: str) -> Optional[StructuredMemberSlice]:
        """The slice set for ``name``, if any."""
        return dict(self.member_slices).get(name)


@dataclass(frozen=True)
class _TensorObjectBuffer:
    ptr: int
    size: int
    owner: Any = None
    batch_size: Optional[int] = None

    def __len__(self) -> int:
        if self.batch_size is None:
            raise TypeError("tensor object buffer requires batch_size for DataProto use")
        return self.batch_size


def tensor_object_buffer(ptr: int, size: int, owner: Any = None,
                         batch_size: Optional[int] = None) -> _TensorObjectBuffer:
    """A tensor object (the 304-byte header plus data, docs/tensor.md) of
    ``size`` bytes in registered memory at ``ptr``; ``owner`` is kept alive
    with it.  As a member it is written by ``put_tensor_from``; as a
    materialize_into destination it is filled by ``get_tensor_into``."""
    if not _util.is_int(ptr) or not _util.is_int(size):
        raise TypeError("ptr and size must be ints")
    if ptr <= 0 or size <= 0:
        raise ValueError("ptr and size must be positive")
    if batch_size is not None and (not _util.is_int(batch_size) or batch_size < 0):
        raise ValueError("batch_size must be a non-negative int or None")
    return _TensorObjectBuffer(int(ptr), int(size), owner, batch_size)


@dataclass(frozen=True)
class _RawDestination:
    ptr: int
    size: int
    owner: Any = None
    pre_registered: bool = False


def raw_destination(ptr: int, size: int, owner: Any = None, *,
                    pre_registered: bool = False) -> _RawDestination:
    """``size`` bytes of caller memory at ``ptr`` as a materialize_into
    destination of an ndarray member; the result is an array over that
    memory (which keeps ``owner`` alive).  ``pre_registered=True`` says the
    memory is registered already (a BufferPool lease, ...) and skips
    registering it for the read."""
    if not _util.is_int(ptr) or not _util.is_int(size):
        raise TypeError("ptr and size must be ints")
    if ptr <= 0 or size < 0:
        raise ValueError("ptr must be positive and size not negative")
    return _RawDestination(int(ptr), int(size), owner, bool(pre_registered))


# ---- names and keys -----------------------------------------------------------------------

# what a name (member, partition) must not hold: '/' and control characters
_BAD_NAME_CHARS = re.compile("[\x00-\x1f\x7f/]")


def _valid_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and _BAD_NAME_CHARS.search(name) is None


def _check_name(what: str, name: Any) -> str:
    """A member (buffer) name: non-empty, without '/' or control characters."""
    if not _valid_name(name):
        raise ValueError(f"invalid bundle buffer name: {name!r}")
    return name


def _uuid4_hex() -> str:
    """``uuid.uuid4().hex``: 16 random bytes with the version (4) and the
    RFC 4122 variant set, without building a UUID object."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()


def _check_partition(partition: Any) -> str:
    if not _valid_name(partition):
        raise ValueError(f"invalid bundle partition: {partition!r}")
    return partition


def _chunk_bytes_arg(value: Any) -> int:
    if not _util.is_int(value) or value <= 0:
        raise ValueError(f"chunk_bytes must be an int > 0, got {value!r}")
    return int(value)


# ---- payloads to write --------------------------------------------------------------------

class _Out:
    """One payload to write: a name, its bytes source, and where it goes.
    What a payload does not set keeps the class's value (read-only ones:
    a payload's own list or dict replaces them, none is changed in place)."""

    array: Any = None    # C-contiguous ndarray (kind array)
    rows: Sequence[Any] = ()  # C-contiguous ndarrays (kind rows)
    view: Any = None     # flat uint8 memoryview (kind bytes)
    tob: Optional[_TensorObjectBuffer] = None
    tensor: Any = None   # contiguous CPU torch tensor (kind torch)
    in_place = False     # array written from its own registered memory
    registered = False   # ... which is a BufferPool lease: registered already
    key = ""
    chunks: Sequence[Tuple[str, int, int]] = ()  # (key, offset, size)
    extra: Mapping[str, Any] = MappingProxyType({})  # more payload-spec entries (format,
    #                                                  dtype, ...)

    def __init__(self, name: str, kind: str, nbytes: int) -> None:
        self.name = name
        self.kind = kind      # "array" | "rows" | "bytes" | "tensor_object" | "torch"
        self.nbytes = nbytes

    def spec(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"key": self.key, "bytes": self.nbytes,
                             "chunks": [{"key": k, "bytes": n} for k, _, n in self.chunks]}
        if self.kind in ("tensor_object", "torch"):
            d["kind"] = "tensor"
        if self.extra:
            d.update(self.extra)  # (a staged tensor object carries its "kind" here)
        return d

    def source_view(self) -> memoryview:
        """The payload as flat bytes (kinds array and bytes)."""
        if self.kind == "array":
            return memoryview(self.array.reshape(-1).view(np.uint8))
        return self.view


def _as_uint8(view: memoryview) -> memoryview:
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _is_torch_tensor(value: Any) -> bool:
    t = type(value)
    return t.__module__.split(".")[0] == "torch" and hasattr(value, "element_size")


# The torch dtypes numpy has, by numpy's dtype.str on this (little-endian)
# host: a small CPU tensor of one of them is described from its numpy view.
_TORCH_NAME_OF_NP = {"<f2": "torch.float16", "<f4": "torch.float32", "<f8": "torch.float64",
                     "|i1": "torch.int8", "<i2": "torch.int16", "<i4": "torch.int32",
                     "<i8": "torch.int64", "|u1": "torch.uint8", "|b1": "torch.bool"}
_NP_OF_TORCH_NAME = {v: np.dtype(k) for k, v in _TORCH_NAME_OF_NP.items()}


def _small_torch_out(name: str, value: Any) -> Optional[Tuple[_Out, Dict[str, Any]]]:
    """What _torch_out gives for a small C-contiguous CPU tensor of at
    least one dimension and a numpy dtype, made from its numpy view: one
    torch call (numpy()) instead of a dozen, each of which costs tens of
    microseconds when the caches are cold (after a large transfer).  None
    for any other tensor (numpy() refuses a tensor that requires grad, is
    not on the CPU, has the conjugate or negative bit, is sparse...)."""
    try:
        a = value.numpy()
    except (RuntimeError, TypeError, AttributeError):
        return None
    tname = _TORCH_NAME_OF_NP.get(a.dtype.str)
    if tname is None or not 0 < a.ndim <= 8 or not a.flags.c_contiguous or \
            a.nbytes >= _IN_PLACE_MIN_BYTES:
        return None
    shape = list(a.shape)
    header = _tensor_header_of(tname, shape, a.nbytes)
    if header is None:
        return None
    o = _Out(name, "bytes", _TENSOR_HEADER_BYTES + a.nbytes)
    o.view = memoryview(header + a.tobytes())
    o.extra = {"kind": "tensor", "dtype": tname, "shape": shape,
               "metadata_bytes": _TENSOR_HEADER_BYTES}
    return o, {"encoding": "torch_tensor", "dtype": tname, "shape": list(shape),
               "element_size": a.itemsize}


def _torch_out(name: str, value: Any) -> Tuple[_Out, Dict[str, Any]]:
    """A torch tensor as a tensor object (the 304-byte header plus data,
    written by put_tensor), or torch.save bytes for a 0-dim tensor, as
    upstream writes them."""
    import torch

    if getattr(value, "is_nested", False):
        raise ValueError("structured nested tensor fields require torch.jagged layout")
    small = _small_torch_out(name, value)
    if small is not None:
        return small
    t = value.detach()
    if t.device.type != "cpu" or not t.is_contiguous():
        t = t.cpu().contiguous()
    spec = {"encoding": "torch_tensor", "dtype": str(t.dtype), "shape": list(t.shape),
            "element_size": int(t.element_size())}
    if t.dim() == 0:
        import io

        buf = io.BytesIO()
        torch.save(t, buf)
        o = _Out(name, "bytes", buf.getbuffer().nbytes)
        o.view = _as_uint8(memoryview(buf.getvalue()))
        o.extra = {"format": "torch_save"}
        return o, spec
    nbytes = t.numel() * t.element_size()
    extra = {"dtype": str(t.dtype), "shape": list(t.shape),
             "metadata_bytes": _TENSOR_HEADER_BYTES}
    header = _tensor_header(t) if nbytes < _IN_PLACE_MIN_BYTES else None
    if header is not None:
        # small: the same tensor object put_tensor writes, staged with the
        # other payloads into one batch_put_from instead of a call of its own
        data = t.reshape(-1).view(torch.uint8).numpy() if nbytes else b""
        o = _Out(name, "bytes", _TENSOR_HEADER_BYTES + nbytes)
        o.view = memoryview(header + bytes(data))
        o.extra = {"kind": "tensor", **extra}
        return o, spec
    o = _Out(name, "torch", _TENSOR_HEADER_BYTES + nbytes)
    o.tensor = t
    o.extra = extra
    return o, spec


def _tensor_header(t: Any) -> Optional[bytes]:
    """The 304-byte tensor object header of a contiguous CPU tensor
    (docs/tensor.md section 1: FULL layout, no axes), or None for a dtype
    without a code."""
    return _tensor_header_of(str(t.dtype), list(t.shape), t.numel() * t.element_size())


# (dtype name, shape, bytes) -> its header: a batch's tensors repeat theirs put after put
_HEADERS: Dict[Tuple[str, Tuple[int, ...], int], Optional[bytes]] = {}
_HEADERS_MAX = 256


def _tensor_header_of(dtype_name: str, shape: List[int], nbytes: int) -> Optional[bytes]:
    """The tensor object header of a tensor of dtype ``dtype_name``
    (``torch.float32``), ``shape`` and ``nbytes`` of data; None for a
    dtype without a code or more than 8 dimensions."""
    k = (dtype_name, tuple(shape), nbytes)
    try:
        return _HEADERS[k]
    except KeyError:
        pass
    head = _make_tensor_header(dtype_name, shape, nbytes)
    if len(_HEADERS) >= _HEADERS_MAX:
        _HEADERS.clear()
    _HEADERS[k] = head
    return head


def _make_tensor_header(dtype_name: str, shape: List[int], nbytes: int) -> Optional[bytes]:
    import struct

    # Lazy: mooncake._tensor loads the native extension, which this module
    # imports without (a store-less transfer over a test double).
    from mooncake import _tensor

    code = _tensor._CODE_OF_NAME.get(dtype_name.split(".", 1)[-1])
    if code is None or len(shape) > 8:
        return None
    dims = list(shape) + [-1] * (8 - len(shape))
    head = struct.pack("<IHHiiIIQQ8q8qII", 0x4D4F4F4E, 1, _TENSOR_HEADER_BYTES, code, len(shape),
                       0, 0, _TENSOR_HEADER_BYTES, nbytes, *dims, *dims, 0, 0)
    return head + bytes(_TENSOR_HEADER_BYTES - len(head))


def _out_of_value(name: str, value: Any) -> Tuple[_Out, Dict[str, Any]]:
    """The payload and the field description of a structured member."""
    if type(value) is np.ndarray:  # the common case first: none of the classes below
        return _array_out(name, value)
    if isinstance(value, _RowData):  # written from the rows' memory, described as packed
        o = _Out(name, "rows", value.nbytes)
        o.rows = value.rows
        return o, {"encoding": "ndarray", "dtype": value.dtype.str, "shape": [value.size]}
    if isinstance(value, _TensorObjectBuffer):
        o = _Out(name, "tensor_object", value.size)
        o.tob = value
        return o, {"encoding": "torch_tensor"}
    if isinstance(value, np.generic):  # a numpy scalar: a 0-d array
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        return _array_out(name, value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        v = memoryview(value)
        if not v.c_contiguous:
            v = memoryview(v.tobytes())
        v = _as_uint8(v)
        o = _Out(name, "bytes", v.nbytes)
        o.view = v
        return o, {"encoding": "bytes"}
    if _is_torch_tensor(value):
        return _torch_out(name, value)
    raise TypeError(f"{name} must be bytes-like, got {type(value).__name__}")


# json.dumps with these arguments, its encoder made once (dumps makes one a call)
_META_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False).encode
_MANIFEST_JSON = json.JSONEncoder(separators=(",", ":")).encode
# a str as those encoders write it (quoted and escaped; _ASCII: ensure_ascii)
_JSON_STR = json.encoder.encode_basestring
_JSON_STR_ASCII = json.encoder.encode_basestring_ascii


def _array_out(name: str, value: np.ndarray) -> Tuple[_Out, Dict[str, Any]]:
    """_out_of_value of an ndarray."""
    dt = value.dtype
    if dt.hasobject or dt.fields is not None or dt.kind not in "biufcmM":
        raise TypeError(f"{name}: dtype {dt} is not a plain numeric dtype "
                        f"(object, structured and string arrays are refused)")
    arr = value if value.flags.c_contiguous else np.ascontiguousarray(value)
    nbytes = int(arr.nbytes)
    o = _Out(name, "array", nbytes)
    o.array = arr
    # in place only for the caller's own contiguous memory (not a copy we made)
    if arr is value and nbytes >= _IN_PLACE_MIN_BYTES:
        o.in_place = True
        o.registered = _lease_memory_of(arr) is not None
    return o, {"encoding": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)}


def _structured_meta_bytes(metadata: Any, fields: Dict[str, Any]) -> bytes:
    """The metadata payload of a structured object: the caller's metadata,
    ``layout`` (default "structured") and the member descriptions."""
    return _structured_meta(metadata, fields)[1]


def _structured_meta(metadata: Any, fields: Dict[str, Any],
                     frags: Optional[List[Optional[str]]] = None
                     ) -> Tuple[Dict[str, Any], bytes]:
    """(the metadata document, its JSON) of a structured object (see
    _structured_meta_bytes).  ``frags``: for each field in order, the JSON
    of ``"name":spec`` when the caller wrote it (_META_JSON's bytes), or
    None."""
    if not isinstance(metadata, _AbcMapping):
        raise TypeError("structured metadata must be a mapping")
    if STRUCTURED_FIELD_SPECS_KEY in metadata:
        raise ValueError(f"structured metadata key {STRUCTURED_FIELD_SPECS_KEY!r} is reserved")
    meta = dict(metadata)
    meta.setdefault("layout", "structured")
    if not isinstance(meta["layout"], str):
        raise ValueError("structured metadata layout must be a string")
    try:
        if frags is None:
            meta[STRUCTURED_FIELD_SPECS_KEY] = fields
            return meta, _META_JSON(meta).encode()
        # the field specs go last: their JSON is spliced in ("layout" is
        # always there, so the rest is never "{}")
        head = _META_JSON(meta)
        esc = _JSON_STR
        body = ",".join(f if f is not None else f"{esc(n)}:{_META_JSON(fields[n])}"
                        for n, f in zip(fields, frags))
        meta[STRUCTURED_FIELD_SPECS_KEY] = fields
        return meta, f"{head[:-1]},{esc(STRUCTURED_FIELD_SPECS_KEY)}:{{{body}}}}}".encode()
    except (TypeError, ValueError) as e:
        raise TypeError(f"structured metadata must be JSON-serializable: {e}") from None


def _structured_outs(metadata: Any, buffers: Mapping[str, Any]) -> Tuple[_Out, List[_Out]]:
    meta_out, outs, _ = _structured_outs_doc(metadata, buffers)
    return meta_out, outs


def _structured_outs_doc(metadata: Any, buffers: Mapping[str, Any], checked: bool = False
                         ) -> Tuple[_Out, List[_Out], Dict[str, Any]]:
    """The payloads of a structured object, and its metadata document
    (``checked``: every name in ``buffers`` passed _check_name already)."""
    outs, fields = [], {}
    frags: List[Optional[str]] = []  # the JSON of the plain array and bytes specs
    esc = _JSON_STR
    for name, value in buffers.items():
        o, spec = _out_of_value(name if checked else _check_name("member name", name), value)
        outs.append(o)
        fields[name] = spec
        if o.kind == "array" and type(value) is np.ndarray:  # _array_out's spec
            frags.append(f'{esc(name)}:{{"encoding":"ndarray","dtype":{esc(spec["dtype"])},'
                         f'"shape":[{",".join(map(repr, spec["shape"]))}]}}')
        elif o.kind == "bytes" and len(spec) == 1:  # {"encoding": "bytes"}
            frags.append(f'{esc(name)}:{{"encoding":"bytes"}}')
        else:
            frags.append(None)
    doc, raw = _structured_meta(metadata, fields, frags)
    return _bytes_out("meta", raw), outs, doc


def _bytes_out(name: str, value: Any) -> _Out:
    """A raw bundle payload (any bytes-like object or ndarray)."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"buffer {name!r}: object arrays have no bytes")
        arr = np.ascontiguousarray(value)
        o = _Out(name, "array", int(arr.nbytes))
        o.array = arr
        o.in_place = arr is value and arr.nbytes >= _IN_PLACE_MIN_BYTES
        return o
    try:
        v = memoryview(value)
    except TypeError:
        raise TypeError(f"buffer {name!r} must be bytes-like, not "
                        f"{type(value).__name__}") from None
    if not v.c_contiguous:
        v = memoryview(v.tobytes())
    o = _Out(name, "bytes", v.nbytes)
    o.view = _as_uint8(v)
    return o


def _address(view: Any) -> int:
    """Address of a writable or read-only contiguous buffer's first byte."""
    arr = np.frombuffer(view, dtype=np.uint8)
    return int(arr.ctypes.data) if arr.size else 0


# ==== field schemas and non-tensor codecs ==========================================
#
# A DataProto's non_tensor_batch holds per-row Python values (object
# ndarrays): token lists, strings, images, nested dicts.  Each such field is
# stored as a few plain payloads -- flat data, int64 offsets, bool nulls --
# under member names ``non_tensor_batch.<field>.<payload>``, in upstream's
# layout (docs/structured.md, "Codecs"), so either implementation reads what
# the other wrote.  A codec is chosen by a FieldSchema or inferred from the
# values (_choose_leaf_codec / infer_structure, upstream's rules exactly).

_SCHEMA_CODECS = ("auto", "ragged_tensor", "ragged_tensor_dict", "typed_ragged", "ndarray",
                  "bytes_ragged", "media_bytes", "media_list_ragged", "utf8_ragged",
                  "msgpack_ragged", "json_ragged")
_SECTIONS = ("batch", "meta_info", "non_tensor_batch")
_MAX_INFER_DEPTH = 32
_MAX_DICT_KEYS = 64
_MAX_LIST_LEN = 8


class _Missing:
    """A dict key absent in one row (distinct from an explicit None)."""

    __slots__ = ()
    _instance: Optional["_Missing"] = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<MISSING>"

    def __reduce__(self) -> Any:
        return (_Missing, ())


MISSING = _Missing()


def _is_null(v: Any) -> bool:
    return v is None or isinstance(v, _Missing)


@dataclass(frozen=True)
class FieldSchema:
    """How one DataProto field is stored.

    ``codec``: one of ``auto``, ``ragged_tensor``, ``ragged_tensor_dict``,
    ``typed_ragged``, ``ndarray``, ``bytes_ragged``, ``media_bytes``,
    ``media_list_ragged``, ``utf8_ragged``, ``msgpack_ragged``,
    ``json_ragged``.  ``metadata``: ``section`` (batch, non_tensor_batch or
    meta_info), ``dtype`` (typed_ragged / ndarray element type), ``keys``
    (ragged_tensor_dict).
    """

    codec: str
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _CodecDecision:
    accepted: bool
    codec: str
    reason: str
    normalized_type: str
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class _InferredLeaf:
    path: str
    values: List[Any]
    decision: _CodecDecision


@dataclass
class _InferredNode:
    path: str
    node_type: str
    children: List[Any]
    lengths: Optional[List[int]]
    row_mask: Optional[List[bool]]


@dataclass
class _EncodedLeaf:
    codec: str
    rows: int
    payload: Dict[str, Any]
    metadata: Dict[str, Any]


_torch_mod: Any = None


def _torch_or_none() -> Any:
    global _torch_mod
    if _torch_mod is None:
        try:
            import torch
        except ImportError:  # torch is optional
            return None
        _torch_mod = torch
    return _torch_mod


def _is_tensor(v: Any) -> bool:
    torch = _torch_or_none() if type(v).__module__.split(".")[0] == "torch" else None
    return torch is not None and isinstance(v, torch.Tensor)


def _is_bytes_like(v: Any) -> bool:
    return isinstance(v, (bytes, bytearray, memoryview))


def _is_pil_image(v: Any) -> bool:
    return type(v).__module__.split(".")[0] == "PIL" and callable(getattr(v, "save", None))


def _is_media_item(v: Any) -> bool:
    return _is_bytes_like(v) or _is_pil_image(v)


def _escape_key(key: str) -> str:
    """A dict key as one path component: ``\\``, ``.`` and ``[`` escaped."""
    return key.replace("\\", "\\\\").replace(".", "\\.").replace("[", "\\[")


def _path_tokens(path: str) -> List[Any]:
    """A field path (``a.b\\.c[2]``) as its keys (str) and indexes (int)."""
    tokens: List[Any] = []
    cur: List[str] = []
    pending = True  # a key (maybe "") is being read; False right after "[n]"
    i = 0
    while i < len(path):
        c = path[i]
        if c == "\\" and i + 1 < len(path):
            cur.append(path[i + 1])
            pending = True
            i += 2
            continue
        if c == ".":
            if pending:
                tokens.append("".join(cur))
            cur, pending = [], True
        elif c == "[":
            if cur:
                tokens.append("".join(cur))
                cur = []
            end = path.index("]", i)
            tokens.append(int(path[i + 1:end]))
            pending = False
            i = end
        else:
            cur.append(c)
            pending = True
        i += 1
    if cur or pending and path and path[-1] == ".":
        tokens.append("".join(cur))
    return tokens


def _numeric_scalar_dtype(rows: List[Any]) -> Optional[np.dtype]:
    try:
        dt = np.asarray(rows).dtype
    except (OverflowError, ValueError, TypeError):
        return None
    return dt if dt.kind in "biuf" else None


def _sequence_dtype(rows: List[Any]) -> Optional[np.dtype]:
    """The numeric result type of list/tuple rows, None when not numeric."""
    dtypes = set()
    for r in rows:
        try:
            a = np.asarray(r)
        except (ValueError, TypeError, OverflowError):
            return None
        if a.dtype.hasobject or a.dtype.kind not in "biufc":
            return None
        dtypes.add(a.dtype)
    dt = np.result_type(*dtypes) if dtypes else np.dtype(np.int64)
    return dt if np.issubdtype(dt, np.number) else None


def _non_null(values: Sequence[Any]) -> List[Any]:
    """The rows that are neither None nor MISSING (a column without any is
    returned as is when it is a list: one pass over the types, no copy)."""
    if isinstance(values, list) and not (set(map(type, values)) & {type(None), _Missing}):
        return values
    return [v for v in values if v is not None and v is not MISSING]


def _all_types(types: set, *classes: type) -> bool:
    """Every row type is one of ``classes`` (or a subclass): one check per
    distinct type, not per row."""
    return all(issubclass(t, classes) for t in types)


def _choose_leaf_codec(values: Sequence[Any]) -> _CodecDecision:
    """The codec of one column of values (upstream's rules, first match).
    The checks run over the distinct row types and dtypes, so a column of
    thousands of arrays costs a few set operations."""
    rows = _non_null(values)
    if not rows:
        return _CodecDecision(False, "msgpack_ragged", "all rows are null", "msgpack")
    types = set(map(type, rows))
    torch = _torch_or_none() if any(t.__module__.split(".")[0] == "torch" for t in types) \
        else None
    if torch is not None and _all_types(types, torch.Tensor):
        dtypes = sorted({str(d) for d in map(operator.attrgetter("dtype"), rows)})
        if len(dtypes) > 1:
            return _CodecDecision(False, "ragged_tensor", f"mixed tensor dtype: {dtypes}",
                                  "torch.Tensor")
        return _CodecDecision(True, "ragged_tensor", "all non-null rows are Tensor",
                              "torch.Tensor", {"dtype": dtypes[0]})
    seq = _all_types(types, list, tuple)
    if seq and all(all(_is_media_item(i) for i in v) for v in rows):
        return _CodecDecision(True, "media_list_ragged", "all rows are media lists",
                              "media list")
    if _all_types(types, np.ndarray):
        if all(np.issubdtype(d, np.number) for d in set(map(operator.attrgetter("dtype"), rows))):
            return _CodecDecision(True, "typed_ragged", "all rows are numeric ndarray",
                                  "numeric sequence", {"recursive_source": "ndarray"})
        return _CodecDecision(False, "msgpack_ragged", "object ndarray rows", "python object")
    if seq:
        dt = _sequence_dtype(rows)
        if dt is not None:
            return _CodecDecision(True, "typed_ragged", "all rows are numeric sequences",
                                  "numeric sequence", {"dtype": str(dt)})
    if _all_types(types, bool, int, float, np.number, np.bool_):
        dt = _numeric_scalar_dtype(rows)
        if dt is not None:
            return _CodecDecision(True, "ndarray", "all rows are numeric scalar",
                                  "numeric scalar", {"dtype": str(dt)})
    if _all_types(types, bytes, bytearray, memoryview):
        return _CodecDecision(True, "bytes_ragged", "all rows are bytes-like", "bytes-like")
    if all(t.__module__.split(".")[0] == "PIL" for t in types) and \
            all(_is_pil_image(v) for v in rows):
        return _CodecDecision(True, "media_bytes", "all rows are media", "media")
    if _all_types(types, str):
        return _CodecDecision(True, "utf8_ragged", "all rows are str", "str")
    if _all_types(types, dict, list, tuple):
        return _CodecDecision(True, "msgpack_ragged", "all rows are msgpack-like", "msgpack")
    return _CodecDecision(False, "msgpack_ragged", "no codec matched", "python object")


def infer_structure(path: str, values: Sequence[Any], leaves: List[_InferredLeaf],
                    nodes: List[_InferredNode], *, _depth: int = 0) -> None:
    """Split a column of nested dict/list values into nodes (appended to
    ``nodes``, parents first) and leaf columns with their codec decisions
    (appended to ``leaves``)."""
    if _depth > _MAX_INFER_DEPTH:
        raise ValueError(f"infer_structure exceeded max depth {_MAX_INFER_DEPTH} at {path!r}")
    values = list(values)
    rows = _non_null(values)
    types = set(map(type, rows))
    if rows and _all_types(types, dict) and \
            all(isinstance(k, str) for v in rows for k in v):
        keys = sorted(set().union(*[v.keys() for v in rows]))
        if len(keys) <= _MAX_DICT_KEYS:
            nodes.append(_InferredNode(path, "dict", keys, None,
                                       [isinstance(v, dict) for v in values]))
            for k in keys:
                col = [v.get(k, MISSING) if isinstance(v, dict) else None for v in values]
                infer_structure(f"{path}.{_escape_key(k)}", col, leaves, nodes,
                                _depth=_depth + 1)
            return
    if rows and _all_types(types, list, tuple):
        longest = max(map(len, rows))
        if longest <= _MAX_LIST_LEN and all(i is None or isinstance(i, (dict, list, tuple))
                                            for v in rows for i in v):
            is_list = [isinstance(v, (list, tuple)) for v in values]
            nodes.append(_InferredNode(path, "list", list(range(longest)),
                                       [len(v) if ok else 0 for v, ok in zip(values, is_list)],
                                       is_list))
            for i in range(longest):
                col = [(v[i] if i < len(v) else MISSING) if ok else None
                       for v, ok in zip(values, is_list)]
                infer_structure(f"{path}[{i}]", col, leaves, nodes, _depth=_depth + 1)
            return
    leaves.append(_InferredLeaf(path, values, _choose_leaf_codec(values)))


# ---- msgpack (upstream packs with use_bin_type=True, strict_types=True) ----------------------

try:
    import msgpack as _msgpack_mod
except ImportError:  # the built-in coder below writes and reads the same bytes
    _msgpack_mod = None


def _mp_pack(obj: Any) -> bytes:
    if _msgpack_mod is not None:
        return _msgpack_mod.packb(obj, use_bin_type=True, strict_types=True)
    out = bytearray()
    _mp_pack_into(out, obj, 0)
    return bytes(out)


def _mp_len(out: bytearray, n: int, fix: Optional[Tuple[int, int]], codes: Tuple[int, ...]
            ) -> None:
    import struct

    if fix is not None and n < fix[1]:
        out.append(fix[0] | n)
    elif codes[0] and n < 0x100:
        out += bytes((codes[0], n))
    elif n < 0x10000:
        out.append(codes[1])
        out += struct.pack(">H", n)
    elif n < 0x100000000:
        out.append(codes[2])
        out += struct.pack(">I", n)
    else:
        raise ValueError("msgpack object too large")


def _mp_pack_into(out: bytearray, obj: Any, depth: int) -> None:
    import struct

    if depth > 512:
        raise ValueError("recursion limit exceeded")
    t = type(obj)
    if obj is None:
        out.append(0xC0)
    elif t is bool:
        out.append(0xC3 if obj else 0xC2)
    elif t is int:
        if 0 <= obj < 0x80 or -0x20 <= obj < 0:
            out += struct.pack(">b" if obj < 0 else ">B", obj)
        elif obj >= 0:
            for limit, code, fmt in ((0x100, 0xCC, ">B"), (0x10000, 0xCD, ">H"),
                                     (0x100000000, 0xCE, ">I"), (1 << 64, 0xCF, ">Q")):
                if obj < limit:
                    out.append(code)
                    out += struct.pack(fmt, obj)
                    return
            raise OverflowError("Integer value out of range")
        else:
            for limit, code, fmt in ((-0x80, 0xD0, ">b"), (-0x8000, 0xD1, ">h"),
                                     (-0x80000000, 0xD2, ">i"), (-(1 << 63), 0xD3, ">q")):
                if obj >= limit:
                    out.append(code)
                    out += struct.pack(fmt, obj)
                    return
            raise OverflowError("Integer value out of range")
    elif t is float:
        out.append(0xCB)
        out += struct.pack(">d", obj)
    elif t is str:
        b = obj.encode("utf-8")
        _mp_len(out, len(b), (0xA0, 32), (0xD9, 0xDA, 0xDB))
        out += b
    elif t in (bytes, bytearray, memoryview):
        b = bytes(obj)
        _mp_len(out, len(b), None, (0xC4, 0xC5, 0xC6))
        out += b
    elif t is list:
        _mp_len(out, len(obj), (0x90, 16), (0, 0xDC, 0xDD))
        for v in obj:
            _mp_pack_into(out, v, depth + 1)
    elif t is dict:
        _mp_len(out, len(obj), (0x80, 16), (0, 0xDE, 0xDF))
        for k, v in obj.items():
            _mp_pack_into(out, k, depth + 1)
            _mp_pack_into(out, v, depth + 1)
    else:
        raise TypeError(f"can not serialize {t.__name__!r} object")


def _mp_unpack(data: Any) -> Any:
    if _msgpack_mod is not None:
        return _msgpack_mod.unpackb(bytes(data), raw=False)
    buf = bytes(data)
    value, pos = _mp_read(buf, 0)
    if pos != len(buf):
        raise ValueError("ExtraData: msgpack data has trailing bytes")
    return value


def _mp_read(b: bytes, i: int) -> Tuple[Any, int]:
    import struct

    def take(n: int) -> bytes:
        if i + 1 + n > len(b):
            raise ValueError("Unpack failed: incomplete input")
        return b[i + 1:i + 1 + n]

    if i >= len(b):
        raise ValueError("Unpack failed: incomplete input")
    c = b[i]
    if c < 0x80:
        return c, i + 1
    if c >= 0xE0:
        return c - 0x100, i + 1
    if 0xA0 <= c <= 0xBF or c in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        if 0xA0 <= c <= 0xBF:
            n, hdr = c & 0x1F, 0
        else:
            hdr = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}[c]
            n = int.from_bytes(take(hdr), "big")
        start = i + 1 + hdr
        if start + n > len(b):
            raise ValueError("Unpack failed: incomplete input")
        raw = b[start:start + n]
        return (raw if c in (0xC4, 0xC5, 0xC6) else raw.decode("utf-8")), start + n
    if 0x90 <= c <= 0x9F or c in (0xDC, 0xDD) or 0x80 <= c <= 0x8F or c in (0xDE, 0xDF):
        if c <= 0x9F:
            n, hdr = c & 0x0F, 0
        else:
            hdr = 2 if c in (0xDC, 0xDE) else 4
            n = int.from_bytes(take(hdr), "big")
        pos = i + 1 + hdr
        if 0x90 <= c <= 0x9F or c in (0xDC, 0xDD):
            items = []
            for _ in range(n):
                v, pos = _mp_read(b, pos)
                items.append(v)
            return items, pos
        d = {}
        for _ in range(n):
            k, pos = _mp_read(b, pos)
            if not isinstance(k, (str, bytes)):
                raise ValueError(f"{type(k).__name__} is not allowed for map key")
            v, pos = _mp_read(b, pos)
            d[k] = v
        return d, pos
    fixed = {0xC0: (0, None), 0xC2: (0, False), 0xC3: (0, True)}
    if c in fixed:
        return fixed[c][1], i + 1
    fmts = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
            0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if c in fmts:
        n = struct.calcsize(fmts[c])
        return struct.unpack(fmts[c], take(n))[0], i + 1 + n
    raise ValueError(f"msgpack type 0x{c:02x} is not supported")


# ---- typed ragged rows: flat data, element offsets, shapes, ndims, nulls ------------------

# The BufferPool an encoder running for a transfer's write may place large
# payloads in (set by the transfer around the encoding, per thread): the
# payload is then written straight from registered memory the store has
# touched before, with no staging copy and no registration.
_ENCODE_SCRATCH = threading.local()


def _payload_array(nbytes: int, dtype: np.dtype) -> np.ndarray:
    """A new 1-D array of ``nbytes`` bytes for an encoded payload."""
    pool = getattr(_ENCODE_SCRATCH, "pool", None)
    if pool is not None and nbytes >= _IN_PLACE_MIN_BYTES:
        try:
            lease = pool.acquire(nbytes, block=False)
        except Exception:  # exhausted or closed: plain memory
            lease = None
        if lease is not None:
            return np.asarray(_LeaseMemory(lease))[:nbytes].view(dtype)
    return np.empty(nbytes // dtype.itemsize, dtype)


class _RowData:
    """The data payload of typed-ragged rows, not packed: a write that
    sends every part from its own memory (batch_put_parts) stores the rows
    back to back -- byte for byte the packed 1-D array of ``size``
    elements of ``dtype`` it stands for -- without the packing copy.  Made
    only while _ENCODE_SCRATCH.direct is set (a DataProto stage write on
    such a store); the rows must stay unchanged until the write returns."""

    __slots__ = ("rows", "dtype", "size", "nbytes")

    def __init__(self, rows: Sequence[Any], dtype: np.dtype, size: int,
                 has_null: bool = True, owned: bool = False) -> None:
        # the parts of the payload: every row that is not null, in order
        # (``owned``: a list of the caller's that it gives away, kept as is)
        self.rows = [r for r in rows if r is not None] if has_null else \
            rows if owned and isinstance(rows, list) else list(rows)
        self.dtype = dtype
        self.size = size
        self.nbytes = size * dtype.itemsize

    @property
    def shape(self) -> Tuple[int]:
        return (self.size,)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The packed array (for a reader of the payload before the write)."""
        flat = [r.reshape(-1) for r in self.rows]
        data = np.concatenate(flat) if flat else np.empty(0, self.dtype)
        return data if dtype is None else data.astype(dtype, copy=False)


def _direct() -> bool:
    """Whether the encoders may leave typed-ragged data unpacked (_RowData)."""
    return getattr(_ENCODE_SCRATCH, "direct", False) and _native_ragged_describe is not None


def _rows_as_parts(nbytes: int, nrows: int) -> bool:
    """Whether ``nrows`` rows of ``nbytes`` in all go out as parts of their
    own (see _ROW_PART_MIN_BYTES): large rows, or a write to this host."""
    return getattr(_ENCODE_SCRATCH, "local", False) or \
        nbytes >= _ROW_PART_MIN_BYTES * max(nrows, 1)


def _native_layout(rows: List[Any], dtype: np.dtype, checked: bool = False,
                   described: Optional[Tuple[Dict[str, Any], int]] = None) -> Dict[str, Any]:
    """The native typed-ragged payload of rows that are None or arrays of
    ``dtype``: packed (mc_codec_ragged_pack), or under _direct() described
    (mc_codec_ragged_describe; ``described``: that layout and its element
    count, made already) with the rows themselves as the data when they
    go out as parts (_rows_as_parts)."""
    if _direct():
        layout, elems = described or _native_ragged_describe(rows, dtype, checked)
        nulls = layout["nulls"]
        if _rows_as_parts(elems * dtype.itemsize, len(rows) - int(nulls.sum())):
            return {"data": _RowData(rows, dtype, elems, bool(nulls.any())), **layout}
    # mc_fastcopy_gather copies inputs under 4 MiB on the calling thread
    return _native_ragged_pack(rows, dtype, 2, _payload_array)


def _ragged_pack(arrays: List[Optional[np.ndarray]], dtype: np.dtype
                 ) -> Dict[str, np.ndarray]:
    """Rows (C-contiguous arrays of ``dtype``, or None) in upstream's
    typed-ragged layout.  The per-row work -- shapes, offsets, the gather
    copy of the data -- is one native call (mc_codec_ragged_pack) when the
    extension is built; numpy otherwise."""
    if _native_ragged_pack is not None:
        return _native_layout(arrays, dtype)
    n = len(arrays)
    max_ndim = max((a.ndim for a in arrays if a is not None), default=0)
    shapes = np.zeros((n, max(max_ndim, 1)), np.int64)
    ndims = np.zeros(n, np.int16)
    nulls = np.fromiter((a is None for a in arrays), np.bool_, n)
    sizes = np.fromiter((0 if a is None else a.size for a in arrays), np.int64, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    for i, a in enumerate(arrays):
        if a is not None and a.ndim:
            ndims[i] = a.ndim
            shapes[i, :a.ndim] = a.shape
    parts = [a.reshape(-1) for a in arrays if a is not None and a.size]
    data = np.concatenate(parts) if parts else np.empty(0, dtype)
    return {"data": data.astype(dtype, copy=False), "offsets": offsets, "shapes": shapes,
            "ndims": ndims, "nulls": nulls}


def _ragged_unpack(payload: Mapping[str, Any], rows: int) -> List[Optional[np.ndarray]]:
    """The rows of a typed-ragged payload as views of its data (None for
    null rows); checks that offsets, shapes and the data agree."""
    data = np.asarray(payload["data"]).reshape(-1)
    offsets = np.ascontiguousarray(payload["offsets"], np.int64).reshape(-1)
    ndims = np.asarray(payload["ndims"]).reshape(-1)
    nulls = np.ascontiguousarray(payload["nulls"], np.bool_).reshape(-1)
    if len(offsets) != rows + 1 or len(ndims) != rows or len(nulls) != rows:
        raise ValueError(f"typed ragged payload does not describe {rows} rows")
    if _native_ragged_rows is not None and ndims.dtype == np.int16:
        # checked (mc_codec_ragged_check) and sliced in one call: no
        # Python loop over the rows
        return _native_ragged_rows(data, offsets, np.ascontiguousarray(payload["shapes"],
                                                                       np.int64),
                                   np.ascontiguousarray(ndims), nulls)
    ndims = ndims.astype(np.int64)
    shapes = np.asarray(payload["shapes"], np.int64)
    shapes = shapes.reshape(rows, -1) if rows else shapes.reshape(0, max(shapes.size, 1))
    if rows and (offsets[0] != 0 or offsets[-1] != data.size or np.any(np.diff(offsets) < 0)):
        raise ValueError("typed ragged offsets do not match the data")
    if np.any(ndims < 0) or np.any(ndims > shapes.shape[1] if rows else False):
        raise ValueError("typed ragged ndims exceed the recorded shapes")
    if rows == 0:
        return []
    if not nulls.any() and np.all(ndims == 1):  # the common case: 1-D rows
        bounds = offsets.tolist()
        return [data[a:b] for a, b in zip(bounds, bounds[1:])]
    out: List[Optional[np.ndarray]] = []
    bounds = offsets.tolist()
    for i in range(rows):
        if nulls[i]:
            out.append(None)
            continue
        nd = int(ndims[i])
        shape = tuple(shapes[i, :nd].tolist())
        row = data[bounds[i]:bounds[i + 1]]
        if math.prod(shape) != row.size:
            raise ValueError(f"typed ragged row {i} has shape {list(shape)} but {row.size} "
                             f"elements")
        out.append(row.reshape(shape))
    return out


def _typed_dtype(values: List[Any], dtype_hint: Any, dts: Optional[set] = None) -> np.dtype:
    """The element type of typed-ragged rows: the hint, else the result
    type of the rows (``dts``: their dtypes when every row is an ndarray,
    if the caller has them already)."""
    if dtype_hint is not None:
        dt = np.dtype(dtype_hint)
    else:
        if dts is None:
            rows = _non_null(values)
            if _all_types(set(map(type, rows)), np.ndarray):
                dts = set(map(operator.attrgetter("dtype"), rows))
            else:
                dts = {v.dtype if isinstance(v, np.ndarray) else np.asarray(v).dtype
                       for v in rows}
        dt = np.result_type(*dts) if dts else np.dtype(np.int64)
    if dt.hasobject or dt.kind not in "biufc":
        raise ValueError("typed_ragged codec requires non-object dtype")
    return dt


def _encode_typed_ragged_regular_ndarray_rows(values: Sequence[Any], dtype: Any
                                             ) -> Optional[Dict[str, np.ndarray]]:
    """The payload of >= 2 non-null C-contiguous ndarray rows of one dtype
    and shape (one stacked copy, offsets i * row_elems), else None."""
    values = list(values)
    if len(values) < 2 or not _all_types(set(map(type, values)), np.ndarray):
        return None
    # cheap refusals first: a shape attribute is a new tuple per row
    ndims = set(map(operator.attrgetter("ndim"), values))
    if len(ndims) != 1 or (ndims != {0} and len(set(map(len, values))) != 1):
        return None
    dt = np.dtype(dtype)
    first = values[0]
    if set(map(operator.attrgetter("shape"), values)) != {first.shape} or \
            set(map(operator.attrgetter("dtype"), values)) != {dt} or \
            not all(v.flags.c_contiguous for v in values):
        return None
    n, per = len(values), first.size
    if _direct() and _rows_as_parts(n * per * dt.itemsize, n):
        data: Any = _RowData(values, dt, n * per, False)  # written from the rows' memory
    else:
        data = _payload_array(n * per * dt.itemsize, dt)
        if _concat_arrays_into is not None and data.nbytes:
            _concat_arrays_into(values, int(data.ctypes.data), data.nbytes)
        elif data.nbytes:
            np.concatenate([v.reshape(-1) for v in values], out=data)
    shapes = np.zeros((n, max(first.ndim, 1)), np.int64)
    if first.ndim:
        shapes[:, :first.ndim] = first.shape
    return {"data": data, "offsets": np.arange(n + 1, dtype=np.int64) * per, "shapes": shapes,
            "ndims": np.full(n, first.ndim, np.int16), "nulls": np.zeros(n, np.bool_)}


def _encode_typed_ragged_values(values: Sequence[Any], dtype_hint: Any = None
                                ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Numeric rows (ndarrays, lists or tuples; None for null) as
    data/offsets/shapes/ndims/nulls; list rows decode as lists again."""
    values = list(values)
    all_types = set(map(type, values))
    types = all_types - {type(None)}
    dts = None  # the rows' dtypes when every row is an ndarray or None
    if _all_types(types, np.ndarray):  # the common case: no per-row checks
        is_nd, has_list, has_nd = None, False, bool(types)
        dts = set(map(operator.attrgetter("dtype"),
                      _non_null(values) if type(None) in all_types else values))
    else:
        is_nd = [isinstance(v, np.ndarray) for v in values]
        has_list = any(v is not None and not nd for v, nd in zip(values, is_nd))
        has_nd = any(is_nd)
    dt = _typed_dtype(values, dtype_hint, dts=dts)
    meta: Dict[str, Any] = {"dtype": str(dt), "max_ndim": 0, "shape_policy": "ragged",
                            "row_format": "mixed" if has_list and has_nd else
                            ("list" if has_list else "ndarray"),
                            "ndarray_rows": is_nd if has_list and has_nd else None}
    payload = None
    if not has_list and _native_ragged_pack is not None and \
            (set(map(operator.attrgetter("dtype"), _non_null(values))) if dts is None
             else dts) <= {dt}:
        # rows as they are (the native side refuses a non-contiguous one);
        # rows of one shape give the regular layout this way as well
        try:
            payload = _native_layout(values, dt, checked=True)
        except ValueError:
            payload = None
    if payload is None:
        payload = _encode_typed_ragged_regular_ndarray_rows(values, dt)
    if payload is None:
        arrays = [None if v is None else
                  (v if isinstance(v, np.ndarray) and v.dtype == dt and v.flags.c_contiguous
                   else np.ascontiguousarray(np.asarray(v, dtype=dt)))
                  for v in values]
        payload = _ragged_pack(arrays, dt)
    meta["max_ndim"] = int(payload["ndims"].max()) if len(values) else 0
    if not has_list:
        meta["physical_layout"] = "contiguous_flat"
    return payload, meta


def _decode_typed_ragged_values(payload: Mapping[str, Any], rows: int,
                                metadata: Optional[Mapping[str, Any]] = None,
                                row_ids: Optional[Sequence[int]] = None) -> List[Any]:
    """Rows of a typed-ragged payload: ndarray rows as views of the fetched
    data, list rows as lists (row_format), None for nulls."""
    metadata = metadata or {}
    out = _ragged_unpack(payload, rows)
    fmt = metadata.get("row_format", "list")
    if fmt == "ndarray":
        return out
    if fmt == "mixed":
        flags = metadata.get("ndarray_rows") or []
        ids = range(rows) if row_ids is None else row_ids
        return [r if r is None or (j < len(flags) and flags[j]) else r.tolist()
                for r, j in zip(out, ids)]
    return [None if r is None else r.tolist() for r in out]


def _encode_ragged_tensor_values(values: Sequence[Any]) -> Tuple[Dict[str, Any],
                                                                 Dict[str, Any]]:
    torch = _torch_or_none()
    if torch is None:
        raise RuntimeError("torch is required to encode ragged tensor fields")
    dtype = None
    arrays: List[Optional[np.ndarray]] = []
    for v in values:
        if v is None:
            arrays.append(None)
            continue
        if isinstance(v, np.ndarray):
            if not np.issubdtype(v.dtype, np.number) and v.dtype != np.bool_:
                raise ValueError("ragged tensor codec requires numeric ndarray values")
            v = torch.from_numpy(np.ascontiguousarray(v))
        elif not isinstance(v, torch.Tensor):
            raise ValueError("ragged tensor codec requires numeric ndarray values")
        if v.dtype == torch.bfloat16:
            raise ValueError("ragged tensor codec does not support torch.bfloat16")
        if dtype is not None and v.dtype != dtype:
            raise ValueError(f"mixed tensor dtype: {dtype} vs {v.dtype}")
        dtype = v.dtype
        t = v.detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            t = t.cpu().contiguous()
        arrays.append(t.numpy())
    tdt = dtype if dtype is not None else torch.float32
    npdt = torch.empty(0, dtype=tdt).numpy().dtype
    payload = _ragged_pack(arrays, npdt)
    return payload, {"dtype": str(tdt), "max_ndim": int(payload["ndims"].max())
                     if len(arrays) else 0, "shape_policy": "ragged"}


def _decode_ragged_tensor_values(payload: Mapping[str, Any], rows: int,
                                 metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    torch = _torch_or_none()
    if torch is None:
        raise RuntimeError("torch is required to decode ragged tensor fields")
    out = _ragged_unpack(payload, rows)
    want = (metadata or {}).get("dtype")
    tdt = _torch_dtype(want) if isinstance(want, str) else None
    res = []
    for r in out:
        if r is None:
            res.append(None)
            continue
        t = torch.from_numpy(r if r.flags.writeable else r.copy())
        res.append(t if tdt is None or t.dtype == tdt else t.to(tdt))
    return res


def _ragged_tensor_dict_keys(values: List[Any], schema_keys: Any) -> List[str]:
    for i, v in enumerate(values):
        if v is not None and not isinstance(v, Mapping):
            raise TypeError(f"ragged_tensor_dict rows must be mappings or None; row {i} is "
                            f"{type(v).__name__}")
        if v is not None:
            nones = [k for k, x in v.items() if x is None]
            if nones:
                raise TypeError(f"ragged_tensor_dict rows cannot contain explicit None tensor "
                                f"values; row {i} has explicit None for {nones}")
    if schema_keys is not None:
        keys = list(schema_keys.keys() if isinstance(schema_keys, Mapping) else schema_keys)
    else:
        keys = sorted({k for v in values if v is not None for k in v
                       if isinstance(k, str)} | {k for v in values if v is not None for k in v
                                                 if not isinstance(k, str)},
                      key=lambda k: (not isinstance(k, str), str(k)))
    seen = set()
    for k in keys:
        if not isinstance(k, str):
            raise TypeError("ragged_tensor_dict keys must be strings")
        if not k:
            raise ValueError("ragged_tensor_dict keys must not be empty")
        if any(c in k for c in "./\\"):
            raise ValueError("ragged_tensor_dict keys must not contain '.', '/', or '\\\\'")
        if k in seen:
            raise ValueError(f"ragged_tensor_dict duplicate key {k!r}")
        seen.add(k)
    if schema_keys is not None:
        for i, v in enumerate(values):
            extra = sorted(str(k) for k in (v or {}) if k not in seen)
            if extra:
                raise ValueError(f"ragged_tensor_dict keys not declared in FieldSchema "
                                 f"metadata['keys']; row {i} has keys not declared: {extra}")
    return keys


def _encode_ragged_tensor_dict_values(values: Sequence[Any], schema_keys: Any = None
                                      ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    if _torch_or_none() is None:
        raise RuntimeError("torch is required to encode ragged_tensor_dict fields")
    values = list(values)
    keys = _ragged_tensor_dict_keys(values, schema_keys)
    payload: Dict[str, Any] = {"null_mask": np.fromiter((v is None for v in values), np.bool_,
                                                        len(values))}
    key_codecs = {}
    for k in keys:
        col = [None if v is None else v.get(k) for v in values]
        try:
            sub, meta = _encode_ragged_tensor_values(col)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"failed to encode ragged_tensor_dict key {k!r}: {e}") from e
        for name, arr in sub.items():
            payload[f"{k}.{name}"] = arr
        key_codecs[k] = meta
    return payload, {"keys": keys, "key_codecs": key_codecs}


def _decode_ragged_tensor_dict_values(payload: Mapping[str, Any], rows: int,
                                      metadata: Mapping[str, Any]) -> List[Any]:
    null_mask = np.asarray(payload["null_mask"], np.bool_).reshape(-1)
    cols = {}
    for k in metadata.get("keys", []):
        sub = {n: payload[f"{k}.{n}"] for n in ("data", "offsets", "shapes", "ndims", "nulls")}
        cols[k] = _decode_ragged_tensor_values(sub, rows,
                                               metadata.get("key_codecs", {}).get(k))
    out = []
    for i in range(rows):
        if null_mask[i]:
            out.append(None)
        else:
            out.append({k: col[i] for k, col in cols.items() if col[i] is not None})
    return out


def _encode_numeric_scalar_values(values: Sequence[Any], dtype: Any
                                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    dt = np.dtype(dtype)
    fill = False if dt == np.bool_ else 0
    values = list(values)
    data = np.asarray([fill if v is None else v for v in values], dtype=dt).reshape(-1)
    nulls = np.fromiter((v is None for v in values), np.bool_, len(values))
    return {"data": data, "nulls": nulls}, {"dtype": str(data.dtype), "shape": list(data.shape)}


def _decode_numeric_scalar_values(payload: Mapping[str, Any], rows: int = -1) -> List[Any]:
    data = np.asarray(payload["data"]).reshape(-1)
    nulls = np.asarray(payload["nulls"], np.bool_).reshape(-1)
    if not nulls.any():
        return data.tolist()
    values = data.astype(object)
    values[nulls] = None
    return values.tolist()


def _media_bytes(value: Any) -> Tuple[bytes, Optional[str], Dict[str, Any]]:
    """(bytes, media type, per-row encoding) of a media row."""
    if value is None:
        return b"", None, {"kind": "null"}
    if _is_pil_image(value):
        img = value.convert(value.mode) if getattr(value, "readonly", False) else value
        return (img.tobytes(), "image/raw",
                {"kind": "pil_raw", "mode": img.mode, "size": list(img.size),
                 "format": getattr(value, "format", None)})
    return bytes(value), None, {"kind": "bytes"}


def _pack_blobs(blobs: List[Any]) -> Tuple[bytes, np.ndarray]:
    """Byte strings back to back, and their int64 offsets (rows + 1)."""
    n = len(blobs)
    offsets = np.zeros(n + 1, np.int64)
    if n:
        np.cumsum(np.fromiter(map(len, blobs), np.int64, n), out=offsets[1:])
    return b"".join(blobs), offsets


def _encode_bytes_like_values(values: Sequence[Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    values = list(values)
    if all(v is None or type(v) is bytes for v in values):  # no media: no per-row metadata
        data, offsets = _pack_blobs([b"" if v is None else v for v in values])
        return ({"data": data, "offsets": offsets,
                 "nulls": np.fromiter((v is None for v in values), np.bool_, len(values))}, {})
    triples = [_media_bytes(v) for v in values]
    data, offsets = _pack_blobs([t[0] for t in triples])
    meta: Dict[str, Any] = {}
    if any(t[2]["kind"] == "pil_raw" for t in triples):
        meta["media_encodings"] = [t[2] for t in triples]
    types = sorted({t[1] for t in triples if t[1]})
    if types:
        meta["media_types"] = types
        meta["encode_source"] = "raw_pixels_from_object"
    return ({"data": data, "offsets": offsets,
             "nulls": np.fromiter((v is None for v in values), np.bool_, len(values))}, meta)


def _decode_media(data: Any, encoding: Optional[Mapping[str, Any]]) -> Any:
    if not encoding or encoding.get("kind") != "pil_raw":
        return bytes(data)
    try:
        from PIL import Image
    except ImportError:
        return bytes(data)
    img = Image.frombuffer(encoding["mode"], tuple(encoding["size"]), bytes(data), "raw",
                           encoding["mode"], 0, 1)
    img.format = encoding.get("format")
    return img


def _blob_bounds(payload: Mapping[str, Any], rows: int
                 ) -> Tuple[memoryview, np.ndarray, np.ndarray]:
    """(the data as bytes, the checked int64 offsets, the nulls) of a blob payload."""
    data = payload["data"]
    mv = memoryview(data if not isinstance(data, np.ndarray) else data.reshape(-1))
    mv = mv.cast("B") if mv.format != "B" else mv
    offsets = np.asarray(payload["offsets"], np.int64).reshape(-1)
    nulls = np.asarray(payload["nulls"], np.bool_).reshape(-1)
    _check_blob_lengths(offsets, nulls, rows)
    if rows and (offsets[0] != 0 or offsets[-1] != len(mv) or np.any(np.diff(offsets) < 0)):
        raise ValueError("ragged offsets do not match the data")
    return mv, offsets, nulls


def _check_blob_lengths(offsets: np.ndarray, nulls: np.ndarray, rows: int) -> None:
    if len(offsets) != rows + 1:
        raise ValueError(f"ragged offsets length {len(offsets)} does not match rows {rows}")
    if len(nulls) != rows:
        raise ValueError(f"ragged nulls length {len(nulls)} does not match rows {rows}")


def _blob_views(payload: Mapping[str, Any], rows: int) -> List[Optional[memoryview]]:
    mv, offsets, nulls = _blob_bounds(payload, rows)
    b = offsets.tolist()
    null = nulls.tolist()
    return [None if null[i] else mv[b[i]:b[i + 1]] for i in range(rows)]


def _blob_rows(payload: Mapping[str, Any], rows: int, text: bool) -> List[Any]:
    """The rows of a blob payload as bytes, or str (``text``: UTF-8),
    None for nulls: made in one native call (blob_rows), or without the
    extension sliced from one bytes copy of the data.  Never a
    memoryview per row: those are tracked by the garbage collector
    (thousands of them set off collections of the whole heap), bytes and
    str are not."""
    if _native_blob_rows is not None:
        data = payload["data"]
        if isinstance(data, np.ndarray):
            data = data if data.flags.c_contiguous else np.ascontiguousarray(data)
        elif not isinstance(data, (bytes, bytearray)):
            mv = memoryview(data)
            data = mv if mv.c_contiguous else mv.tobytes()
        offsets = np.ascontiguousarray(payload["offsets"], np.int64).reshape(-1)
        nulls = np.ascontiguousarray(payload["nulls"], np.bool_).reshape(-1)
        _check_blob_lengths(offsets, nulls, rows)
        # checked (mc_codec_blob_check) and made in one call
        return _native_blob_rows(data, offsets, nulls, text)
    mv, offsets, nulls = _blob_bounds(payload, rows)
    b = offsets.tolist()
    raw = mv.tobytes()
    if nulls.any():
        null = nulls.tolist()
        if text:
            return [None if n else raw[x:y].decode("utf-8") for x, y, n in zip(b, b[1:], null)]
        return [None if n else raw[x:y] for x, y, n in zip(b, b[1:], null)]
    if text:
        return [raw[x:y].decode("utf-8") for x, y in zip(b, b[1:])]
    return [raw[x:y] for x, y in zip(b, b[1:])]


def _decode_bytes_like_values(payload: Mapping[str, Any], rows: int,
                              metadata: Optional[Mapping[str, Any]] = None,
                              row_ids: Optional[Sequence[int]] = None) -> List[Any]:
    encodings = (metadata or {}).get("media_encodings") or []
    if not encodings:
        return _blob_rows(payload, rows, False)
    views = _blob_views(payload, rows)
    ids = range(rows) if row_ids is None else row_ids
    return [None if v is None else _decode_media(v, encodings[j] if j < len(encodings) else None)
            for v, j in zip(views, ids)]


def _encode_msgpack_ragged_values(path: str, values: Sequence[Any]
                                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    values = list(values)
    blobs = [b"" if v is None else _mp_pack(v) for v in values]
    data, offsets = _pack_blobs(blobs)
    return ({"data": data, "offsets": offsets,
             "nulls": np.fromiter((v is None for v in values), np.bool_, len(values))}, {})


def _decode_msgpack_ragged_values(payload: Mapping[str, Any], rows: int) -> List[Any]:
    offsets = np.asarray(payload["offsets"]).reshape(-1)
    nulls = np.asarray(payload["nulls"]).reshape(-1)
    if len(offsets) != rows + 1:
        raise ValueError(f"msgpack_ragged offsets length {len(offsets)} does not match rows "
                         f"{rows}")
    if len(nulls) != rows:
        raise ValueError(f"msgpack_ragged nulls length {len(nulls)} does not match rows {rows}")
    out = [None if v is None else _mp_unpack(v) for v in _blob_views(payload, rows)]
    if len(out) != rows:
        raise ValueError(f"msgpack_ragged decoded {len(out)} rows, expected {rows}")
    return out


def _encode_text_values(values: Sequence[Any], to_bytes: Callable[[Any], bytes]
                        ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    values = list(values)
    types = set(map(type, values))
    if to_bytes is _utf8_bytes and _native_utf8_pack is not None and \
            types <= {str, type(None)}:
        # one native pass: the bytes the loops below make (strict UTF-8)
        data, offsets, nulls = _native_utf8_pack(values)
        return {"data": data, "offsets": offsets, "nulls": nulls}, {}
    if type(None) not in types:  # no nulls: no per-row test
        if to_bytes is _utf8_bytes and types <= {str}:
            to_bytes = str.encode  # UTF-8, strict: the same bytes, without a call per row
        data, offsets = _pack_blobs(list(map(to_bytes, values)))
        return {"data": data, "offsets": offsets, "nulls": np.zeros(len(values), np.bool_)}, {}
    data, offsets = _pack_blobs([b"" if v is None else to_bytes(v) for v in values])
    return ({"data": data, "offsets": offsets,
             "nulls": np.fromiter((v is None for v in values), np.bool_, len(values))}, {})


# a str row as UTF-8 (called in C by map(); AttributeError for a non-str, as v.encode)
_utf8_bytes = operator.methodcaller("encode", "utf-8")


def _json_bytes(v: Any) -> bytes:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _encode_media_list_values(values: Sequence[Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    values = list(values)
    items, row_counts = [], []
    for v in values:
        row = [] if v is None else list(v)
        items.extend(_media_bytes(i) for i in row)
        row_counts.append(len(row))
    data, byte_offsets = _pack_blobs([t[0] for t in items])
    row_offsets = np.zeros(len(values) + 1, np.int64)
    if values:
        np.cumsum(np.asarray(row_counts, np.int64), out=row_offsets[1:])
    meta: Dict[str, Any] = {"encode_source": "raw_pixels_from_object",
                            "media_encodings": [t[2] for t in items]}
    types = sorted({t[1] for t in items if t[1]})
    if types:
        meta["media_types"] = types
    return ({"data": data, "row_offsets": row_offsets, "byte_offsets": byte_offsets,
             "nulls": np.fromiter((v is None for v in values), np.bool_, len(values))}, meta)


def _decode_media_list_values(payload: Mapping[str, Any], rows: int,
                              metadata: Optional[Mapping[str, Any]] = None,
                              item_ids: Optional[Sequence[int]] = None) -> List[Any]:
    row_offsets = np.asarray(payload["row_offsets"], np.int64).reshape(-1).tolist()
    nulls = np.asarray(payload["nulls"], np.bool_).reshape(-1).tolist()
    n_items = row_offsets[-1] if row_offsets else 0
    items = _blob_views({"data": payload["data"], "offsets": payload["byte_offsets"],
                         "nulls": np.zeros(n_items, np.bool_)}, n_items)
    encodings = (metadata or {}).get("media_encodings") or []
    ids = range(n_items) if item_ids is None else item_ids
    decoded = [_decode_media(v, encodings[j] if j < len(encodings) else None)
               for v, j in zip(items, ids)]
    return [None if nulls[i] else decoded[row_offsets[i]:row_offsets[i + 1]]
            for i in range(rows)]


def _leaf_meta(decision: _CodecDecision, meta: Dict[str, Any]) -> Dict[str, Any]:
    meta = dict(meta)
    meta.update({"schema_source": "inferred_from_runtime_values",
                 "decision_reason": decision.reason,
                 "normalized_type": decision.normalized_type})
    meta.update(decision.metadata)
    return meta


def _encode_codec(codec: str, path: str, values: List[Any], dtype: Any = None,
                  keys: Any = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(payload, metadata) of ``values`` in ``codec`` (not structured_recursive)."""
    if codec == "typed_ragged":
        return _encode_typed_ragged_values(values, dtype)
    if codec == "ragged_tensor":
        return _encode_ragged_tensor_values(values)
    if codec == "ragged_tensor_dict":
        return _encode_ragged_tensor_dict_values(values, keys)
    if codec == "ndarray":
        return _encode_numeric_scalar_values(values, dtype)
    if codec in ("bytes_ragged", "media_bytes"):
        return _encode_bytes_like_values(values)
    if codec == "utf8_ragged":
        return _encode_text_values(values, _utf8_bytes)
    if codec == "json_ragged":
        return _encode_text_values(values, _json_bytes)
    if codec == "msgpack_ragged":
        return _encode_msgpack_ragged_values(path, values)
    if codec == "media_list_ragged":
        return _encode_media_list_values(values)
    raise ValueError(f"unsupported structured non-tensor codec: {codec}")


def _decode_codec(codec: str, payload: Mapping[str, Any], rows: int,
                  metadata: Optional[Mapping[str, Any]], row_ids: Optional[Sequence[int]] = None,
                  item_ids: Optional[Sequence[int]] = None) -> List[Any]:
    metadata = metadata or {}
    if codec == "typed_ragged":
        return _decode_typed_ragged_values(payload, rows, metadata, row_ids)
    if codec == "ragged_tensor":
        return _decode_ragged_tensor_values(payload, rows, metadata)
    if codec == "ragged_tensor_dict":
        return _decode_ragged_tensor_dict_values(payload, rows, metadata)
    if codec == "ndarray":
        return _decode_numeric_scalar_values(payload, rows)
    if codec in ("bytes_ragged", "media_bytes"):
        return _decode_bytes_like_values(payload, rows, metadata, row_ids)
    if codec == "utf8_ragged":
        return _blob_rows(payload, rows, True)
    if codec == "json_ragged":
        return [None if v is None else json.loads(v) for v in _blob_rows(payload, rows, True)]
    if codec == "msgpack_ragged":
        return _decode_msgpack_ragged_values(payload, rows)
    if codec == "media_list_ragged":
        return _decode_media_list_values(payload, rows, metadata, item_ids)
    if codec == "structured_recursive":
        return _decode_recursive(payload, rows, metadata, row_ids, item_ids)
    raise ValueError(f"unknown structured non-tensor codec: {codec}")


def _encode_leaf(path: str, values: List[Any], decision: _CodecDecision) -> _EncodedLeaf:
    if not decision.accepted:
        raise ValueError(f"unsupported structured non-tensor field: {decision.reason}")
    dtype = decision.metadata.get("dtype") if decision.codec in ("typed_ragged",
                                                                 "ndarray") else None
    payload, meta = _encode_codec(decision.codec, path, values, dtype)
    return _EncodedLeaf(decision.codec, len(values), payload, _leaf_meta(decision, meta))


def _recursive_worthy(leaf: _InferredLeaf) -> bool:
    codec = leaf.decision.codec
    if codec in ("ragged_tensor", "bytes_ragged", "media_bytes", "media_list_ragged"):
        return True
    return codec == "typed_ragged" and any(isinstance(v, np.ndarray) for v in leaf.values)


def _lookup_path(value: Any, tokens: Sequence[Any]) -> Any:
    cur = value
    for t in tokens:
        if cur is None:
            return None
        if isinstance(t, str):
            if not isinstance(cur, dict):
                return MISSING
            cur = cur.get(t, MISSING)
        else:
            if not isinstance(cur, (list, tuple)):
                return MISSING
            cur = cur[t] if t < len(cur) else MISSING
    return cur


def _encode_recursive(path: str, values: List[Any], leaves: List[_InferredLeaf],
                      nodes: List[_InferredNode]) -> _EncodedLeaf:
    payload: Dict[str, Any] = {}
    root = _path_tokens(path)
    node_specs = []
    for i, node in enumerate(nodes):
        toks = _path_tokens(node.path)[len(root):]
        spec: Dict[str, Any] = {"id": i, "path": node.path, "node_type": node.node_type,
                                "children": list(node.children)}
        payload[f"node.{i}.missing"] = np.fromiter(
            (_lookup_path(v, toks) is MISSING for v in values), np.bool_, len(values))
        spec["missing_payload"] = f"node.{i}.missing"
        if node.row_mask is not None:
            payload[f"node.{i}.row_mask"] = np.asarray(node.row_mask, np.bool_)
            spec["row_mask_payload"] = f"node.{i}.row_mask"
        if node.lengths is not None:
            payload[f"node.{i}.lengths"] = np.asarray(node.lengths, np.int64)
            spec["lengths_payload"] = f"node.{i}.lengths"
        node_specs.append(spec)
    leaf_specs = []
    for j, leaf in enumerate(leaves):
        missing = [isinstance(v, _Missing) for v in leaf.values]
        col = [None if m else v for m, v in zip(missing, leaf.values)]
        decision = leaf.decision
        if not decision.accepted and all(_is_null(v) for v in leaf.values):
            decision = _CodecDecision(True, "json_ragged", "all rows are null or missing", "json")
        enc = _encode_leaf(leaf.path, col, decision)
        members = {}
        for name, value in enc.payload.items():
            payload[f"leaf.{j}.{name}"] = value
            members[name] = f"leaf.{j}.{name}"
        payload[f"leaf.{j}.missing"] = np.asarray(missing, np.bool_)
        members["missing"] = f"leaf.{j}.missing"
        leaf_specs.append({"id": j, "path": leaf.path, "codec": enc.codec, "rows": enc.rows,
                           "metadata": enc.metadata, "payload_members": members})
    return _EncodedLeaf("structured_recursive", len(values), payload,
                        {"schema_source": "inferred_from_runtime_values",
                         "structure_version": 1, "root_path": path, "nodes": node_specs,
                         "leaves": leaf_specs})


def _path_depth(path: str) -> int:
    return path.count(".") + path.count("[")


def _child_path(node: Mapping[str, Any], child: Any) -> str:
    if node["node_type"] == "dict":
        return f"{node['path']}.{_escape_key(str(child))}"
    return f"{node['path']}[{int(child)}]"


def _decode_recursive(payload: Mapping[str, Any], rows: int, metadata: Mapping[str, Any],
                      row_ids: Optional[Sequence[int]] = None,
                      item_ids: Any = None) -> List[Any]:
    """Rows of a structured_recursive field: leaves decoded, then nodes
    rebuilt deepest first (missing keys dropped, row_mask false -> None)."""
    by_path: Dict[str, List[Any]] = {}
    for leaf in metadata.get("leaves", []):
        members = leaf["payload_members"]
        sub = {n: payload[m] for n, m in members.items() if n != "missing"}
        lp = members["missing"][:-len("missing")]
        sub_items = item_ids.get(lp) if isinstance(item_ids, Mapping) else None
        vals = _decode_codec(leaf["codec"], sub, rows, leaf.get("metadata"), row_ids, sub_items)
        missing = np.asarray(payload[members["missing"]], np.bool_).reshape(-1).tolist()
        by_path[leaf["path"]] = [MISSING if m else v for m, v in zip(missing, vals)]
    nodes = sorted(metadata.get("nodes", []), key=lambda n: _path_depth(n["path"]),
                   reverse=True)
    for node in nodes:
        missing = np.asarray(payload[node["missing_payload"]], np.bool_).reshape(-1).tolist() \
            if node.get("missing_payload") else [False] * rows
        mask = np.asarray(payload[node["row_mask_payload"]], np.bool_).reshape(-1).tolist() \
            if node.get("row_mask_payload") else [True] * rows
        lengths = np.asarray(payload[node["lengths_payload"]]).reshape(-1).tolist() \
            if node.get("lengths_payload") else None
        cols = [(c, by_path[_child_path(node, c)]) for c in node["children"]]
        out = []
        for r in range(rows):
            if missing[r]:
                out.append(MISSING)
            elif not mask[r]:
                out.append(None)
            elif node["node_type"] == "dict":
                out.append({c: col[r] for c, col in cols if not isinstance(col[r], _Missing)})
            else:
                n = int(lengths[r]) if lengths is not None else len(cols)
                item = [None] * n
                for c, col in cols:
                    if int(c) < n and not isinstance(col[r], _Missing):
                        item[int(c)] = col[r]
                out.append(item)
        by_path[node["path"]] = out
    return [None if isinstance(v, _Missing) else v for v in by_path[metadata["root_path"]]]


def _normalize_plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return _normalize_plain(v.tolist())
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_normalize_plain(i) for i in v]
    if isinstance(v, dict):
        return {k: _normalize_plain(i) for k, i in v.items()}
    return v


# The decisions _choose_leaf_codec makes for the two column kinds an RL
# batch is made of (one pass types them: _encode_common_column).
_NDARRAY_ROWS = _CodecDecision(True, "typed_ragged", "all rows are numeric ndarray",
                               "numeric sequence", {"recursive_source": "ndarray"})
_STR_ROWS = _CodecDecision(True, "utf8_ragged", "all rows are str", "str")
_NDARRAY_ROWS_META = _leaf_meta(_NDARRAY_ROWS, {})
# str() of the native numeric dtypes, by their character code (numpy's str() runs Python)
_DTYPE_NAMES: Dict[str, str] = {}


def _dtype_name(dt: np.dtype) -> str:
    """str(dt) of a native-order numeric dtype."""
    name = _DTYPE_NAMES.get(dt.char)
    if name is None:
        name = _DTYPE_NAMES[dt.char] = str(dt)
    return name
_NONE_TYPE = type(None)


def _encode_ndarray_column(values: List[Any]) -> Optional[_EncodedLeaf]:
    """A column of 1-D (or 0-d) arrays of one native numeric dtype, and
    None: typed, described and (unless its rows go out as they are)
    packed after one native pass over the rows (mc_codec_ragged_describe
    behind codec_ragged_column), with exactly what infer_structure,
    _choose_leaf_codec and _encode_typed_ragged_values decide and write
    for it.  None when the column is anything else."""
    got = _native_ragged_column(values)
    if got is None:
        return None
    layout, elems, dt, nnull, max_ndim = got
    if _direct() and _rows_as_parts(elems * dt.itemsize, len(values) - nnull):
        # sent from the rows' own memory; ``values`` is the caller's to give
        payload = {"data": _RowData(values, dt, elems, nnull > 0, owned=True), **layout}
    else:
        payload = _native_layout(values, dt, checked=True, described=(layout, elems))
    # _leaf_meta(_NDARRAY_ROWS, ...) of what _encode_typed_ragged_values describes
    meta: Dict[str, Any] = {"dtype": _dtype_name(dt), "max_ndim": max_ndim,
                            "shape_policy": "ragged", "row_format": "ndarray",
                            "ndarray_rows": None, "physical_layout": "contiguous_flat",
                            **_NDARRAY_ROWS_META}
    return _EncodedLeaf("typed_ragged", len(values), payload, meta)


def _encode_common_column(path: str, values: List[Any]) -> Optional[_EncodedLeaf]:
    """The one-pass encoder of the columns an RL batch is made of (token
    ids and masks: arrays; uids: str), None for any other column.  Both
    make no nodes in infer_structure (an array or a str is a leaf), so the
    decision is _choose_leaf_codec's of the whole column; the property
    tests hold it to the general path."""
    if not values:
        return None
    first = values[0]
    if type(first) is np.ndarray or first is None:
        if _native_ragged_column is not None and _native_ragged_pack is not None:
            return _encode_ndarray_column(values)
        return None
    if type(first) is str:
        if _native_utf8_pack is None:
            types = set(map(type, values))
            if types == {str} or types == {str, _NONE_TYPE}:
                return _encode_leaf(path, values, _STR_ROWS)
            return None
        # what _encode_text_values does for a column of exactly str and None,
        # typed in the same pass (None: another row type); a str without
        # UTF-8 is left to the general path, which raises for it as before
        try:
            packed = _native_utf8_pack(values, exact=True)
        except UnicodeEncodeError:
            return None
        if packed is None:
            return None
        data, offsets, nulls = packed
        return _EncodedLeaf("utf8_ragged", len(values),
                            {"data": data, "offsets": offsets, "nulls": nulls},
                            _leaf_meta(_STR_ROWS, {}))
    return None


def _encode_inferred(path: str, values: List[Any]) -> _EncodedLeaf:
    """A field without a schema (upstream A.6.4): recursive when nested
    values hold tensors, arrays or bytes, else one codec for whole rows.
    ``values`` is a list the caller gives away (a payload may keep it)."""
    common = _encode_common_column(path, values)
    if common is not None:
        return common
    leaves: List[_InferredLeaf] = []
    nodes: List[_InferredNode] = []
    infer_structure(path, values, leaves, nodes)
    if nodes and any(_recursive_worthy(leaf) for leaf in leaves):
        return _encode_recursive(path, values, leaves, nodes)
    # without nodes the one leaf is the column itself, its decision made already
    decision = leaves[0].decision if not nodes and len(leaves) == 1 else \
        _choose_leaf_codec(values)
    return _encode_leaf(path, values, decision)


def _encode_fallback(path: str, values: List[Any]) -> _EncodedLeaf:
    """The encoder of FieldSchema("auto"): recursive, the chosen codec,
    then msgpack and JSON of the values made plain; the first that works."""
    tried: List[str] = []
    leaves: List[_InferredLeaf] = []
    nodes: List[_InferredNode] = []
    try:
        infer_structure(path, values, leaves, nodes)
    except ValueError:
        nodes = []
    if nodes and any(_recursive_worthy(leaf) for leaf in leaves):
        tried.append("structured_recursive")
        try:
            return _encode_recursive(path, values, leaves, nodes)
        except (TypeError, ValueError, OverflowError, RuntimeError):
            pass
    decision = _choose_leaf_codec(values)
    if decision.accepted:
        tried.append(decision.codec)
        try:
            return _encode_leaf(path, values, decision)
        except (TypeError, ValueError, OverflowError, RuntimeError):
            pass
    plain = [_normalize_plain(v) for v in values]
    for codec, norm in (("msgpack_ragged", "msgpack"), ("json_ragged", "json")):
        tried.append(codec)
        try:
            return _encode_leaf(path, plain, _CodecDecision(True, codec, "fallback", norm))
        except (TypeError, ValueError, OverflowError, RuntimeError):
            pass
    raise ValueError(f"unable to infer a safe codec for structured non-tensor field {path!r}; "
                     f"tried {tried}")


def _schema_dtype(schema: FieldSchema) -> Optional[np.dtype]:
    raw = (schema.metadata or {}).get("dtype")
    if raw is None:
        return None
    try:
        dt = np.dtype(raw)
    except TypeError:
        raise ValueError(f"invalid FieldSchema metadata['dtype']: {raw!r}") from None
    if dt.hasobject or dt.kind not in "biufc":
        raise ValueError(f"FieldSchema metadata['dtype'] must be numeric or bool, got {dt.str}")
    return dt


def _check_schema(name: str, schema: Any) -> FieldSchema:
    if not isinstance(schema, FieldSchema):
        raise TypeError(f"field_schemas[{name!r}] must be a FieldSchema, got "
                        f"{type(schema).__name__}")
    if schema.codec not in _SCHEMA_CODECS:
        raise ValueError(f"unsupported schema codec: {schema.codec!r}")
    section = (schema.metadata or {}).get("section")
    if section is not None and section not in _SECTIONS:
        raise ValueError(f"FieldSchema for {name!r} metadata['section'] must be one of "
                         f"{list(_SECTIONS)}")
    return schema


def _encode_with_schema(path: str, values: Sequence[Any], schema: FieldSchema) -> _EncodedLeaf:
    """``values`` in the codec ``schema`` names (auto, or ndarray without a
    dtype: the fallback encoder)."""
    _check_schema(path, schema)
    values = list(values)
    if not schema.nullable and any(_is_null(v) for v in values):
        raise ValueError(f"FieldSchema for {path!r} is not nullable")
    dtype = _schema_dtype(schema)
    codec = schema.codec
    if codec == "auto" or (codec == "ndarray" and dtype is None):
        return _encode_fallback(path, values)
    if codec == "msgpack_ragged":
        try:
            payload, meta = _encode_msgpack_ragged_values(path, values)
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"{path} msgpack codec cannot encode value: {e}") from e
    else:
        payload, meta = _encode_codec(codec, path, values, dtype,
                                      (schema.metadata or {}).get("keys"))
    return _EncodedLeaf(codec, len(values), payload, meta)


# ==== DataProto transfer ==========================================================
#
# A DataProto (verl's batch type: ``batch`` of tensors with a batch
# dimension, ``non_tensor_batch`` of per-row numpy arrays, ``meta_info``)
# is stored as one structured object per *stage*; a stage groups the fields
# written together.  The reference that reaches other processes is a
# MooncakeDataProtoRef (or its JSON handle): where each field lives, the
# codec of each encoded non-tensor field, and the meta_info.

DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1
STORAGE_GROUP_ID = "storage_group_id"
_DP_STAGE_LAYOUT = "dataproto_stage"
# the payload names of the codecs' arrays (names without '.', '/' or control characters)
_PAYLOAD_NAMES = frozenset(("data", "offsets", "shapes", "ndims", "nulls"))
_CONFIG_FIELDS = ("data_type", "group_ids", "nof_replica_num", "prefer_alloc_in_same_node",
                  "preferred_nof_segments", "preferred_segment", "preferred_segments",
                  "replica_num", "with_hard_pin", "with_soft_pin")


@dataclass(frozen=True)
class StructuredFieldLocation:
    """Where one DataProto field lives: its stage, member and section."""

    stage: str
    member: str
    section: str


@dataclass
class MooncakeDataProtoRef:
    """A stored DataProto: ``stage_refs`` (stage -> RemoteBundleRef),
    ``field_index`` (field -> StructuredFieldLocation), the codec of every
    encoded non-tensor field and the meta_info.  export_dataproto_ref()
    turns it into a JSON-safe handle for another process."""

    batch_size: int
    stage_refs: Dict[str, RemoteBundleRef]
    field_index: Dict[str, StructuredFieldLocation]
    meta_info: Dict[str, Any]
    namespace: str = "default"
    partition: str = "default"
    global_indexes: Optional[List[int]] = None
    encoded_non_tensor: Dict[str, Any] = field(default_factory=dict)
    _storage_group_id: Optional[str] = None


DataProtoRefLike = Union[MooncakeDataProtoRef, Mapping[str, Any]]


def _store_config_type() -> Any:
    """mooncake.store.ReplicateConfig once that module is loaded (a config
    of that type is from it), else None."""
    return getattr(sys.modules.get("mooncake.store"), "ReplicateConfig", None)


def _copy_config(config: Any) -> Any:
    try:
        return copy.copy(config)
    except Exception:  # fall back to a fresh object with the known fields
        pass
    try:
        fresh = type(config)()
    except Exception:
        raise TypeError("structured object store config must be copyable or "
                        "default-constructible") from None
    for name in _CONFIG_FIELDS:
        if hasattr(config, name):
            try:
                setattr(fresh, name, getattr(config, name))
            except Exception:
                raise TypeError(f"structured object store config field {name!r} is not "
                                f"writable") from None
    return fresh


def _config_with_group_ids(config: Any, ids: Optional[List[str]]) -> Any:
    if ids and type(config) is _store_config_type() and type(ids[0]) is str and \
            ids.count(ids[0]) == len(ids):
        # the copy and the setting in one step (no per-attribute __setattr__)
        return config._with_group_ids(ids)
    c = _copy_config(config)
    try:
        c.group_ids = ids
    except Exception:
        raise TypeError("structured object store config field 'group_ids' is not "
                        "writable") from None
    return c


def _config_for_grouped_keys(config: Any, n: int) -> Any:
    """``config`` for a store call writing ``n`` keys: one logical group id
    becomes one id per key (the caller's config is never changed)."""
    if config is None:
        return None
    gids = getattr(config, "group_ids", None)
    if gids is None:
        return config
    if isinstance(gids, str):
        return _config_with_group_ids(config, [gids] * n)
    gids = list(gids)
    if not gids:
        return _config_with_group_ids(config, None)
    if len(gids) > 1:
        raise ValueError("structured object store config.group_ids must contain exactly one "
                         "logical group id; it is expanded across internal Mooncake keys")
    if n == 1:
        return config
    return _config_with_group_ids(config, [gids[0]] * n)


def _new_config() -> Any:
    try:
        # Lazy: mooncake.store loads the native extension, which this module
        # imports without.
        from mooncake.store import ReplicateConfig
        return ReplicateConfig()
    except Exception:  # a store-less test double: any object with the fields
        import types
        return types.SimpleNamespace(group_ids=None)


def _group_of_config(config: Any) -> Optional[str]:
    """The storage group of a first DataProto put: the given id, a fresh
    one when none is given, None for "" (ungrouped)."""
    gids = getattr(config, "group_ids", None) if config is not None else None
    if isinstance(gids, str):
        return gids or None
    if gids is not None:
        gids = list(gids)
        if len(gids) > 1:
            raise ValueError("structured object store config.group_ids must contain exactly "
                             "one logical group id; it is expanded across internal Mooncake "
                             "keys")
        if gids:
            if not isinstance(gids[0], str):
                raise ValueError("structured object store config.group_ids must contain "
                                 "strings")
            return gids[0] or None
    return "structured-" + _uuid4_hex()


def _grouped_config(config: Any, gid: Optional[str]) -> Any:
    if gid is None:
        return config
    return _config_with_group_ids(config if config is not None else _new_config(), [gid])


# ---- handles ------------------------------------------------------------------------

def is_dataproto_ref_handle(value: Any) -> bool:
    """True for a mapping made by export_dataproto_ref()."""
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    raise TypeError(f"DataProto ref handles support only JSON-safe values, got "
                    f"{type(value).__name__}")


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> Dict[str, Any]:
    """A JSON-safe handle of ``ref``: what another process passes to
    import_dataproto_ref() to read the same rows."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError(f"expected MooncakeDataProtoRef, got {type(ref).__name__}")
    handle = {
        "type": DATAPROTO_REF_HANDLE_TYPE,
        "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages",
        "batch_size": int(ref.batch_size),
        "namespace": ref.namespace,
        "partition": ref.partition,
        "global_indexes": _json_safe(ref.global_indexes),
        "stage_refs": {s: {"manifest_key": r.manifest_key} for s, r in ref.stage_refs.items()},
        "field_index": {f: {"stage": loc.stage, "member": loc.member, "section": loc.section}
                        for f, loc in ref.field_index.items()},
        "meta_info": _json_safe(ref.meta_info),
        "encoded_non_tensor": _json_safe(ref.encoded_non_tensor),
    }
    if ref._storage_group_id:
        handle[STORAGE_GROUP_ID] = ref._storage_group_id
    json.dumps(handle, ensure_ascii=False)
    return handle


def _handle_mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"DataProto ref handle {name} must be a mapping")
    return value


def import_dataproto_ref(handle: Mapping[str, Any]) -> MooncakeDataProtoRef:
    """The MooncakeDataProtoRef of a handle (stage manifests are fetched on
    first use)."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    version = handle.get("version")
    if isinstance(version, bool) or version not in (1, 2):
        raise ValueError(f"unsupported DataProto ref handle version: {version!r}")
    if handle.get("kind") != "bundle_stages":
        raise ValueError(f"unsupported DataProto ref handle kind: {handle.get('kind')!r}")
    stage_refs: Dict[str, RemoteBundleRef] = {}
    for stage, sref in _handle_mapping(handle.get("stage_refs"), "stage_refs").items():
        key = _handle_mapping(sref, "stage_refs entries").get("manifest_key")
        if not isinstance(stage, str) or not stage or not isinstance(key, str) or not key:
            raise ValueError("DataProto ref handle stage refs must contain non-empty string "
                             "names and manifest_key values")
        stage_refs[stage] = RemoteBundleRef(key, {})
    field_index: Dict[str, StructuredFieldLocation] = {}
    for name, raw in _handle_mapping(handle.get("field_index"), "field_index").items():
        loc = _handle_mapping(raw, "field_index entries")
        section = loc.get("section")
        if section not in ("batch", "non_tensor_batch"):
            raise ValueError(f"invalid DataProto field section: {section!r}")
        stage, member = loc.get("stage"), loc.get("member")
        if not all(isinstance(v, str) and v for v in (name, stage, member)):
            raise ValueError("DataProto ref handle field locations must be non-empty strings")
        if stage not in stage_refs:
            raise ValueError(f"DataProto ref handle field {name!r} references unknown stage "
                             f"{stage!r}")
        field_index[name] = StructuredFieldLocation(stage, member, section)
    meta_info = _handle_mapping(handle.get("meta_info", {}), "meta_info")
    encoded = _handle_mapping(handle.get("encoded_non_tensor", {}), "encoded_non_tensor")
    gid = handle.get(STORAGE_GROUP_ID)
    if version == 2 or STORAGE_GROUP_ID in handle:
        if not isinstance(gid, str) or not gid:
            raise ValueError("DataProto ref handle has invalid storage_group_id")
    gidx = handle.get("global_indexes")
    if gidx is not None:
        if not isinstance(gidx, list):
            raise ValueError("DataProto ref handle global_indexes must be a list or null")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in gidx):
            raise ValueError("DataProto ref handle global_indexes must contain integers")
    return MooncakeDataProtoRef(
        batch_size=int(handle["batch_size"]), stage_refs=stage_refs, field_index=field_index,
        meta_info=copy.deepcopy(dict(meta_info)),
        namespace=str(handle.get("namespace", "default")),
        partition=str(handle.get("partition", "default")),
        global_indexes=None if gidx is None else list(gidx),
        encoded_non_tensor=copy.deepcopy(dict(encoded)), _storage_group_id=gid)


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref


def _as_dataproto_ref(ref: Any) -> MooncakeDataProtoRef:
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError(f"expected MooncakeDataProtoRef or DataProto handle, got "
                    f"{type(ref).__name__}")


# ---- inputs -----------------------------------------------------------------------

def _mapping_like(value: Any) -> bool:
    return value is None or isinstance(value, _AbcMapping) or \
        callable(getattr(value, "items", None))


def _as_dict(value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, _AbcMapping):
        return dict(value)
    items = getattr(value, "items", None)
    if callable(items):
        return dict(items())
    raise TypeError(f"expected mapping-like value, got {type(value).__name__}")


_ENVELOPE_KEYS = frozenset(("batch", "non_tensor_batch", "meta_info"))


def _split_dataproto(data: Any) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """(batch, non_tensor_batch, meta_info) of a DataProto-like object or
    mapping; a mapping that is not an envelope is batch fields only."""
    if type(data) is dict and data and data.keys() <= _ENVELOPE_KEYS and \
            all(type(v) is dict or v is None for v in data.values()):
        # the envelope of plain dicts, as below without the ABC checks
        get = data.get
        return (dict(get("batch") or ()), dict(get("non_tensor_batch") or ()),
                dict(get("meta_info") or ()))
    if isinstance(data, _AbcMapping):
        if data and set(data) <= _ENVELOPE_KEYS and \
                all(_mapping_like(v) for v in data.values()):
            return (_as_dict(data.get("batch")), _as_dict(data.get("non_tensor_batch")),
                    _as_dict(data.get("meta_info")))
        return dict(data), {}, {}
    return (_as_dict(getattr(data, "batch", None)),
            _as_dict(getattr(data, "non_tensor_batch", None)),
            _as_dict(getattr(data, "meta_info", None)))


def _rows_of(v: Any) -> int:
    """len(v); for a plain torch tensor of a dimension or more its first
    dimension, read in one call (Tensor.__len__ makes four)."""
    torch = sys.modules.get("torch")  # a tensor's module is loaded
    if torch is not None and type(v) is getattr(torch, "Tensor", None):
        shape = v.shape
        if shape:
            return shape[0]
    return len(v)


def _dataproto_batch_size(batch: Mapping[str, Any], non_tensor: Mapping[str, Any]) -> int:
    sizes = {_rows_of(v) for d in (batch, non_tensor) for v in d.values()}
    if not sizes:
        return 0
    if len(sizes) > 1:
        raise ValueError(f"DataProto fields have inconsistent batch sizes: {sorted(sizes)}")
    return sizes.pop()


def _is_sequence(v: Any) -> bool:
    from collections.abc import Sequence as _Seq
    return isinstance(v, _Seq) and not isinstance(v, (str, bytes, bytearray))


def _schema_section(schema: FieldSchema) -> Optional[str]:
    return (schema.metadata or {}).get("section")


def _check_schemas(schemas: Optional[Mapping[str, Any]], batch: Mapping[str, Any],
                   non_tensor: Mapping[str, Any], meta: Mapping[str, Any]
                   ) -> Dict[str, FieldSchema]:
    if schemas is None:
        return {}
    if not isinstance(schemas, Mapping):
        raise TypeError("field_schemas must be a mapping of field name to FieldSchema")
    out = {}
    for name, schema in schemas.items():
        schema = _check_schema(name, schema)
        section = _schema_section(schema)
        if section is not None:
            for where, d in (("batch", batch), ("non_tensor_batch", non_tensor),
                             ("meta_info", meta)):
                if name in d and where != section and not (where == "meta_info"):
                    raise ValueError(f"FieldSchema for {name!r} declares section {section!r}, "
                                     f"but data contains it in {where!r}")
        out[name] = schema
    return out


# ---- row selections ------------------------------------------------------------------

class _RowSel:
    """Rows of a DataProto read: a slice (start, end, step) or a gather."""

    def __init__(self, total: int, start: int = 0, end: int = 0, step: int = 1,
                 idx: Optional[List[int]] = None) -> None:
        self.total = total
        self.start, self.end, self.step = start, end, step
        self.idx = idx
        self.count = len(idx) if idx is not None else len(range(start, end, step))

    @property
    def ids(self) -> List[int]:
        return list(self.idx) if self.idx is not None else \
            list(range(self.start, self.end, self.step))

    def runs(self) -> List[Tuple[int, int]]:
        """The selected rows as (first, count) runs, in output order
        (consecutive gathered rows merge; a strided slice is its cover)."""
        if self.idx is None:
            return [(self.start, self.end - self.start)] if self.end > self.start else []
        starts, counts = self.run_arrays()
        return list(zip(starts.tolist(), counts.tolist()))

    def run_arrays(self) -> Tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(self.idx if self.idx is not None else self.ids, np.int64)
        if not idx.size:
            return idx, idx
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        starts = idx[np.concatenate(([0], breaks))]
        counts = np.diff(np.concatenate(([0], breaks, [idx.size])))
        return starts, counts

    def strided(self) -> bool:
        return self.idx is None and self.step > 1


def _row_selection(rows: Any, total: int) -> Optional[_RowSel]:
    if rows is None:
        return None
    if isinstance(rows, StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("DataProto row slicing currently supports axis=0 only")
        if rows.step <= 0:
            raise ValueError("DataProto row slicing step must be positive")
        start, end, step = slice(rows.start, rows.end, rows.step).indices(total)
        return _RowSel(total, start, max(start, end), step)
    if isinstance(rows, slice):
        start, end, step = rows.indices(total)
        if step <= 0:
            raise ValueError("DataProto row slicing step must be positive")
        return _RowSel(total, start, max(start, end), step)
    if isinstance(rows, np.ndarray) and rows.ndim == 1 or _is_sequence(rows):
        idx = []
        for i in rows:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError("DataProto row indices must be integers")
            j = int(i) + total if int(i) < 0 else int(i)
            if not 0 <= j < total:
                raise IndexError(f"DataProto row index {int(i)} out of range for {total} rows")
            idx.append(j)
        return _RowSel(total, idx=idx)
    raise TypeError("DataProto rows must be a slice, StructuredMemberSlice, or row index "
                    "sequence")


# ---- payload roles: how a codec's payloads follow rows ----------------------------------

def _codec_roles(codec: str, metadata: Mapping[str, Any], prefix: str = ""
                 ) -> List[Tuple[str, ...]]:
    """("row", p): one entry per row; ("ragged", offsets, data): rows + 1
    offsets into data; ("ragged2", row_offsets, byte_offsets, data): rows
    into items into bytes."""
    p = prefix
    if codec in ("typed_ragged", "ragged_tensor"):
        return [("row", p + "nulls"), ("row", p + "ndims"), ("row", p + "shapes"),
                ("ragged", p + "offsets", p + "data")]
    if codec == "ragged_tensor_dict":
        roles: List[Tuple[str, ...]] = [("row", p + "null_mask")]
        for k in metadata.get("keys", []):
            roles += _codec_roles("ragged_tensor", {}, f"{p}{k}.")
        return roles
    if codec == "ndarray":
        return [("row", p + "data"), ("row", p + "nulls")]
    if codec == "media_list_ragged":
        return [("row", p + "nulls"), ("ragged2", p + "row_offsets", p + "byte_offsets",
                                       p + "data")]
    if codec == "structured_recursive":
        roles = []
        for node in metadata.get("nodes", []):
            for key in ("missing_payload", "row_mask_payload", "lengths_payload"):
                if node.get(key):
                    roles.append(("row", p + node[key]))
        for leaf in metadata.get("leaves", []):
            members = leaf["payload_members"]
            roles.append(("row", p + members["missing"]))
            lp = members["missing"][:-len("missing")]
            roles += _codec_roles(leaf["codec"], leaf.get("metadata") or {}, p + lp)
        return roles
    return [("row", p + "nulls"), ("ragged", p + "offsets", p + "data")]


# ---- the fetch engine of DataProto reads ---------------------------------------------

class _Fetch:
    """Bytes of one payload to fetch: all of it, or byte ranges of it laid
    back to back in the result."""

    __slots__ = ("pspec", "ranges", "nbytes", "buf", "addr", "registered", "late")

    def __init__(self, pspec: Mapping[str, Any], ranges: Optional[List[Tuple[int, int]]]
                 ) -> None:
        self.pspec = pspec
        self.ranges = ranges
        self.nbytes = pspec["bytes"] if ranges is None else sum(n for _, n in ranges)
        self.buf: Any = None
        # the address of buf's first byte, known where it was carved from a
        # lease (None: ask the array; numpy's ctypes attribute costs ~5 us)
        self.addr: Optional[int] = None
        self.registered = False
        # its result is made without reading the bytes (views over the
        # buffer): they may still be arriving while it is made
        self.late = False


def _fetch_addr(job: _Fetch) -> int:
    """The address of a job's buffer (kept when it was carved from a lease)."""
    if job.addr is None:
        job.addr = int(job.buf.ctypes.data)
    return job.addr


def _typed(buf: np.ndarray, fspec: Mapping[str, Any], rows: Optional[int] = None) -> Any:
    """A fetched payload as what its field spec says (rows: leading dim)."""
    enc = fspec.get("encoding")
    if enc == "ndarray":
        dt = np.dtype(fspec["dtype"])
        shape = list(fspec["shape"])
        if rows is not None and shape:
            shape[0] = rows
        return buf.view(dt).reshape(shape)
    return buf


class _DataProtoMixin:
    """The DataProto verbs of MooncakeBundleTransfer (upstream's names)."""

    # ---- writes -----------------------------------------------------------------

    def put(self, data: Any, *, type: str = "dataproto", namespace: str = "default",
            partition: str = "default", stage: str = "default",
            chunk_bytes: Optional[int] = None, policy: Optional[BundleTransferPolicy] = None,
            config: Any = None, field_schemas: Optional[Mapping[str, FieldSchema]] = None
            ) -> MooncakeDataProtoRef:
        """Store a DataProto-like object (``type="dataproto"``) or a flat
        dict of fields (``type="dict"``); returns the reference."""
        if type == "dict":
            data = _flat_dict_to_dataproto(data, field_schemas)
        elif type != "dataproto":
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        return self.put_dataproto(data, namespace=namespace, partition=partition, stage=stage,
                                  chunk_bytes=chunk_bytes, policy=policy,
                                  field_schemas=field_schemas, config=config)

    def put_dataproto(self, data: Any, *, namespace: str = "default",
                      partition: str = "default", stage: str = "default",
                      chunk_bytes: Optional[int] = None,
                      policy: Optional[BundleTransferPolicy] = None,
                      field_schemas: Optional[Mapping[str, FieldSchema]] = None,
                      config: Any = None) -> MooncakeDataProtoRef:
        """Store a DataProto as the stage ``stage`` of a new reference."""
        batch, non_tensor, meta = _split_dataproto(data)
        _check_partition(partition)
        _check_stage(stage)
        schemas = _check_schemas(field_schemas, batch, non_tensor, meta)
        size = _dataproto_batch_size(batch, non_tensor)
        gid = _group_of_config(config)
        ref = MooncakeDataProtoRef(batch_size=size, stage_refs={}, field_index={},
                                   meta_info=dict(meta), namespace=namespace,
                                   partition=partition, _storage_group_id=gid)
        if not batch and not non_tensor:
            ref.batch_size = 0
            return ref
        stage_ref, index, encoded = self._write_stage(
            stage, namespace, partition, size, batch, non_tensor, schemas, chunk_bytes, policy,
            _grouped_config(config, gid), grouped=gid is not None)
        ref.stage_refs[stage] = stage_ref
        ref.field_index.update(index)
        ref.encoded_non_tensor.update(encoded)
        return ref

    def _write_stage(self, stage: str, namespace: str, partition: str, size: int,
                     batch: Mapping[str, Any], non_tensor: Mapping[str, Any],
                     schemas: Mapping[str, FieldSchema], chunk_bytes: Optional[int],
                     policy: Optional[BundleTransferPolicy], config: Any,
                     grouped: bool = False
                     ) -> Tuple[RemoteBundleRef, Dict[str, StructuredFieldLocation],
                                Dict[str, Any]]:
        """Write one stage.  ``grouped``: ``config`` is _grouped_config's
        copy with one group id (its expansion per key cannot fail)."""
        overlap = sorted(set(batch) & set(non_tensor))
        if overlap:
            raise ValueError(f"DataProto batch and non_tensor_batch fields overlap: {overlap}")
        buffers: Dict[str, Any] = {}
        index: Dict[str, StructuredFieldLocation] = {}
        encoded: Dict[str, Any] = {}
        # every payload is written from its own memory: ragged rows need no
        # packing where each row may go as a part of its own
        direct = self._writes_direct(policy)
        local = direct and self._writes_to_this_host(config)
        for name, value in batch.items():
            member = _check_name("member", f"batch.{name}")
            if isinstance(value, _TensorObjectBuffer):
                len(value)  # TypeError without a batch_size
            buffers[member] = value
            index[name] = StructuredFieldLocation(stage, member, "batch")
        scratch = _ENCODE_SCRATCH
        if non_tensor:
            scratch.pool = self._buffer_pool()
            scratch.direct = direct
            scratch.local = local
        try:
            for name, value in non_tensor.items():
                member = _check_name("member", f"non_tensor_batch.{name}")
                schema = schemas.get(name)
                if schema is not None and \
                        _schema_section(schema) not in (None, "non_tensor_batch"):
                    schema = None
                leaf = self._encode_non_tensor(name, value, schema)
                if leaf is None:
                    buffers[member] = value
                else:
                    members = {}
                    for pname, pvalue in leaf.payload.items():
                        # a valid member and one of these is a valid name
                        m = f"{member}.{pname}" if pname in _PAYLOAD_NAMES else \
                            _check_name("member", f"{member}.{pname}")
                        buffers[m] = pvalue
                        members[pname] = m
                    encoded[name] = {"codec": leaf.codec, "rows": leaf.rows,
                                     "metadata": leaf.metadata, "payload_members": members}
                index[name] = StructuredFieldLocation(stage, member, "non_tensor_batch")
        finally:
            scratch.pool = None
            scratch.direct = False
            scratch.local = False
        meta = {"layout": _DP_STAGE_LAYOUT,
                "dataproto": {"version": 1, "namespace": namespace, "partition": partition,
                              "stage": stage, "batch_size": size}}
        if direct and policy is None and self._commits and _native_stage_json is not None:
            ref = self._write_described(meta, buffers, partition, chunk_bytes, config, grouped)
            if ref is not None:
                return ref, index, encoded
        meta_out, outs, doc = _structured_outs_doc(meta, buffers, checked=True)
        # the document is plain JSON data built here (str keys, lists, str
        # and int values): it is what reading its JSON back would give
        ref = self._write(meta_out, outs, partition, chunk_bytes, policy, None, config,
                          direct=direct, meta_doc=doc, grouped=grouped)
        return ref, index, encoded

    @staticmethod
    def _encode_non_tensor(name: str, value: Any, schema: Optional[FieldSchema]
                           ) -> Optional[_EncodedLeaf]:
        """The encoded form of a non-tensor field, or None for a plain member."""
        path = f"non_tensor_batch.{name}"
        is_object = isinstance(value, np.ndarray) and value.dtype == object
        if schema is not None and schema.codec != "auto":
            if not isinstance(value, np.ndarray) and not _is_sequence(value):
                raise TypeError(f"non_tensor_batch field {name!r} with FieldSchema must be an "
                                f"ndarray or non-string sequence")
            try:
                return _encode_with_schema(path, list(value), schema)
            except (TypeError, ValueError, RuntimeError, AttributeError) as e:
                raise type(e)(f"failed to encode non_tensor_batch field {name!r} with "
                              f"FieldSchema codec {schema.codec!r}: {e}") from e
        if schema is not None and not schema.nullable and \
                any(_is_null(v) for v in (list(value) if _is_sequence(value) or
                                          isinstance(value, np.ndarray) else [])):
            raise ValueError(f"FieldSchema for {path!r} is not nullable")
        if not is_object:
            return None
        # a 1-D object array's tolist() is its very objects (one C pass; list() makes
        # an iterator step per row)
        return _encode_inferred(path, value.tolist() if type(value) is np.ndarray and
                                value.ndim == 1 else list(value))

    def append_dataproto_fields(self, ref: DataProtoRefLike, data: Any, *, stage: str,
                                overwrite: bool = False, chunk_bytes: Optional[int] = None,
                                policy: Optional[BundleTransferPolicy] = None,
                                field_schemas: Optional[Mapping[str, FieldSchema]] = None,
                                config: Any = None) -> MooncakeDataProtoRef:
        """Add fields (same rows) to a stored DataProto; returns a new ref
        (the old one stays readable)."""
        base = _as_dataproto_ref(ref)
        _check_stage(stage)
        batch, non_tensor, meta = _split_dataproto(data)
        schemas = _check_schemas(field_schemas, batch, non_tensor, meta)
        size = _dataproto_batch_size(batch, non_tensor) if (batch or non_tensor) else 0
        if size != base.batch_size:
            raise ValueError(f"DataProto append batch size {size} does not match ref batch "
                             f"size {base.batch_size}")
        gid = base._storage_group_id
        cfg_gids = getattr(config, "group_ids", None) if config is not None else None
        if gid is not None and cfg_gids:
            given = [cfg_gids] if isinstance(cfg_gids, str) else list(cfg_gids)
            if any(g and g != gid for g in given):
                raise ValueError("config.group_ids conflicts with the DataProto storage group")
        cfg = _grouped_config(config, gid)
        new = MooncakeDataProtoRef(base.batch_size, dict(base.stage_refs),
                                   dict(base.field_index), {**base.meta_info, **meta},
                                   base.namespace, base.partition,
                                   None if base.global_indexes is None
                                   else list(base.global_indexes),
                                   dict(base.encoded_non_tensor), gid)
        names = list(batch) + list(non_tensor)
        if not names:
            return new
        overlap = sorted(set(batch) & set(non_tensor))
        if overlap:
            raise ValueError(f"DataProto batch and non_tensor_batch fields overlap: {overlap}")
        existing = [n for n in names if n in base.field_index]
        if existing and not overwrite:
            raise ValueError(f"DataProto fields already exist: {existing}")
        if overwrite and stage in base.stage_refs:
            old_fields = [f for f, loc in base.field_index.items() if loc.stage == stage]
            missing = [f for f in old_fields if f not in names]
            if missing:
                raise ValueError(f"DataProto overwrite for stage {stage!r} must include "
                                 f"existing fields: {missing}")
        moved = [n for n in existing if base.field_index[n].stage != stage]
        if moved:
            raise ValueError(f"DataProto fields already exist: {moved}")
        stage_ref, index, encoded = self._write_stage(
            stage, base.namespace, base.partition, base.batch_size, batch, non_tensor,
            schemas, chunk_bytes, policy, cfg, grouped=gid is not None)
        for n in names:
            new.encoded_non_tensor.pop(n, None)
        if stage in base.stage_refs and not overwrite:
            try:
                stage_ref = self._merge_stage(base.stage_refs[stage], stage_ref, cfg)
            except BaseException:
                self._remove_quietly_bundle(stage_ref)
                raise
        elif stage in base.stage_refs and overwrite:
            self.remove_bundle(base.stage_refs[stage])
        new.stage_refs[stage] = stage_ref
        new.field_index.update(index)
        new.encoded_non_tensor.update(encoded)
        return new

    def _remove_quietly_bundle(self, ref: RemoteBundleRef) -> None:
        try:
            self.remove_bundle(ref)
        except Exception:  # best effort: the caller reports the first error
            pass

    def _merge_stage(self, old_ref: RemoteBundleRef, mid_ref: RemoteBundleRef, config: Any
                     ) -> RemoteBundleRef:
        """A third object whose manifest lists the old stage's buffers and
        the new ones (their keys stay where they are) and whose metadata is
        both metadata merged; the intermediate manifest and metadata go."""
        old_key, old = self._resolve(old_ref)
        mid_key, mid = self._resolve(mid_ref)
        old_meta, old_fields, _ = self._fields(old_key, old)
        mid_meta, mid_fields, _ = self._fields(mid_key, mid)
        if old_meta.get("dataproto") != mid_meta.get("dataproto"):
            raise ValueError("DataProto stage metadata mismatch during manifest merge")
        clash = sorted(set(old["buffers"]) & set(mid["buffers"]))
        if clash:
            raise ValueError(f"structured members already exist: {clash}")
        meta = {k: v for k, v in old_meta.items() if k != STRUCTURED_FIELD_SPECS_KEY}
        fields = {**old_fields, **mid_fields}
        meta_out = _bytes_out("meta", _structured_meta_bytes(meta, fields))
        partition = old["object_id"].split("/", 1)[0]
        object_id = f"{partition}/{_uuid4_hex()}"
        base = f"{self.key_prefix}/{object_id}"
        meta_out.key = f"{base}/meta"
        meta_out.chunks = self._chunks(meta_out.key, meta_out.nbytes, self.default_chunk_bytes)
        ids = {old["object_id"], mid["object_id"]} | set(old.get("buffer_object_ids", [])) | \
            set(mid.get("buffer_object_ids", []))
        cleanup = list(old.get("cleanup_keys", [])) + [old_key] + \
            [c["key"] for c in old["meta"]["chunks"]] + [mid_key] + \
            [c["key"] for c in mid["meta"]["chunks"]]
        manifest = {"version": MANIFEST_VERSION, "layout": "bundle", "object_id": object_id,
                    "meta": meta_out.spec(), "buffers": {**old["buffers"], **mid["buffers"]},
                    "buffer_object_ids": sorted(ids), "cleanup_keys": cleanup}
        key = f"{base}/manifest"
        written: List[str] = []
        try:
            self._put_copy(meta_out, config, written)
            self._put_manifest(key, manifest, config)
        except BaseException:
            self._remove_quietly(written + [key])
            raise
        # the intermediate object is now reachable only through the merge
        self._remove_quietly([mid_key] + [c["key"] for c in mid["meta"]["chunks"]])
        return RemoteBundleRef(key, manifest)

    # ---- reads ---------------------------------------------------------------------

    def get(self, ref: DataProtoRefLike, *, type: str = "dataproto",
            fields: Optional[Sequence[str]] = None,
            batch_fields: Optional[Sequence[str]] = None,
            non_tensor_fields: Optional[Sequence[str]] = None,
            meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
            destinations: Optional[Mapping[str, Any]] = None, rows: Any = None) -> Any:
        """Read a stored DataProto (``type="dict"``: one flat dict)."""
        if type not in ("dataproto", "dict"):
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        got = self.get_dataproto(ref, fields=fields, batch_fields=batch_fields,
                                 non_tensor_fields=non_tensor_fields,
                                 meta_info_keys=meta_info_keys,
                                 data_cls=None if type == "dict" else data_cls,
                                 destinations=destinations, rows=rows)
        if type == "dataproto":
            return got
        return _flatten_dataproto(got, _as_dataproto_ref(ref))

    def get_dataproto(self, ref: DataProtoRefLike, *, fields: Optional[Sequence[str]] = None,
                      batch_fields: Optional[Sequence[str]] = None,
                      non_tensor_fields: Optional[Sequence[str]] = None,
                      meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
                      destinations: Optional[Mapping[str, Any]] = None,
                      rows: Any = None) -> Any:
        """The fields (all by default) of the rows (all by default) of a
        stored DataProto, as ``{"batch", "non_tensor_batch", "meta_info"}``
        or ``data_cls``."""
        r = _as_dataproto_ref(ref)
        bnames, nnames = _field_selection(r, fields, batch_fields, non_tensor_fields)
        sel = _row_selection(rows, r.batch_size)
        dests = dict(destinations or {})
        values = self._read_fields(r, bnames + nnames, sel, dests)
        batch = {n: values[n] for n in bnames}
        non_tensor = {n: values[n] for n in nnames}
        meta = copy.deepcopy(r.meta_info) if meta_info_keys is None else \
            {k: copy.deepcopy(r.meta_info[k]) for k in meta_info_keys if k in r.meta_info}
        return _build_result(batch, non_tensor, meta, data_cls)

    def _stage(self, r: MooncakeDataProtoRef, stage: str
               ) -> Tuple[str, Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
        key, manifest = self._resolve(r.stage_refs[stage])
        meta, fields, _ = self._fields(key, manifest, shared=True)
        return key, manifest, meta, fields

    def _read_fields(self, r: MooncakeDataProtoRef, names: List[str], sel: Optional[_RowSel],
                     dests: Mapping[str, Any]) -> Dict[str, Any]:
        stages = {}
        for n in names:
            st = r.field_index[n].stage
            if st not in stages:
                if st not in r.stage_refs:
                    raise ValueError(f"DataProto field {n!r} references unknown stage {st!r}")
                stages[st] = self._stage(r, st)
        plain = [n for n in names if n not in r.encoded_non_tensor]
        coded = [n for n in names if n in r.encoded_non_tensor]
        out: Dict[str, Any] = {}
        finish: List[Tuple[str, Any]] = []
        jobs: List[_Fetch] = []
        for n in plain:
            loc = r.field_index[n]
            _, manifest, _, fields = stages[loc.stage]
            if loc.member not in manifest["buffers"]:
                raise ValueError(f"DataProto field {n!r}: member {loc.member!r} is not in stage "
                                 f"{loc.stage!r}")
            job, post = self._plan_plain(n, fields[loc.member], manifest["buffers"][loc.member],
                                         sel, dests.get(n))
            if job is not None:
                jobs.append(job)
            finish.append((n, (job, post)))
        coded_state = {}
        for n in coded:
            loc = r.field_index[n]
            _, manifest, _, fields = stages[loc.stage]
            if sel is not None and sel.strided():
                raise ValueError("DataProto structured non-tensor slicing currently requires "
                                 "step=1")
            st = _CodedRead(n, r.encoded_non_tensor[n], manifest, fields, sel)
            jobs += st.phase1()
            coded_state[n] = st
        # whole reads: the large payloads whose results are views come in
        # while the rest is decoded (nothing is returned before they are in)
        late = [j for j in jobs if j.late and j.nbytes >= _LATE_MIN_BYTES] if sel is None \
            else []
        wait = self._fetch(jobs, late)
        try:
            jobs2: List[_Fetch] = []
            for st in coded_state.values():
                jobs2 += st.phase2()
            if jobs2:
                self._fetch(jobs2)
            for n, (job, post) in finish:
                out[n] = post(job.buf if job is not None else None)
            for n, st in coded_state.items():
                out[n] = st.decode()
        finally:
            if wait is not None:  # also on an error: the memory is being written
                wait()
        return out

    def _plan_plain(self, name: str, fspec: Mapping[str, Any], pspec: Mapping[str, Any],
                    sel: Optional[_RowSel], dest: Any) -> Tuple[Optional[_Fetch], Any]:
        """The fetch and the post-processing of one plain member."""
        enc = fspec.get("encoding")
        if enc == "ndarray":
            return self._plan_rows(name, fspec, pspec, sel, dest, 0,
                                   np.dtype(fspec["dtype"]).itemsize, None)
        if enc == "torch_tensor" and "dtype" in fspec and pspec.get("format") != "torch_save":
            if sel is not None and sel.strided():
                raise ValueError("structured tensor slicing currently requires step=1")
            hdr = int(pspec.get("metadata_bytes", _TENSOR_HEADER_BYTES))
            elem = int(fspec.get("element_size") or 0) or _torch_element_size(fspec["dtype"])
            return self._plan_rows(name, fspec, pspec, sel, dest, hdr, elem, fspec["dtype"])
        if dest is not None:
            raise ValueError(f"structured bytes member {name} does not support "
                             f"materialize_into")
        job = _Fetch(pspec, None)
        if enc == "torch_tensor":
            def post_t(buf: Any) -> Any:
                t = _torch_load(buf) if pspec.get("format") == "torch_save" else \
                    _tensor_from_object(buf)
                return t if sel is None else t[sel.ids]
            return job, post_t
        if sel is not None:
            raise ValueError(f"structured member {name} does not support indexed rows")
        return job, lambda buf: bytes(buf)

    def _plan_rows(self, name: str, fspec: Mapping[str, Any], pspec: Mapping[str, Any],
                   sel: Optional[_RowSel], dest: Any, hdr: int, elem: int,
                   torch_dtype: Optional[str]) -> Tuple[_Fetch, Any]:
        shape = list(fspec["shape"])
        if sel is not None and not shape:
            raise ValueError(f"structured member {name} does not support indexed rows")
        row = elem * math.prod(shape[1:]) if shape else elem
        skip = 0
        if sel is None:  # whole: the object as is (one batched read), header skipped
            job = _Fetch(pspec, None)
            job.late = dest is None  # post() makes a view; a destination is filled from it
            skip = hdr
            out_rows = shape[0] if shape else None
            take = None
        else:
            runs = sel.runs()
            job = _Fetch(pspec, [(hdr + a * row, n * row) for a, n in runs])
            out_rows = sum(n for _, n in runs)
            take = slice(None, None, sel.step) if sel.strided() else None
        out_shape = ([out_rows] + shape[1:]) if shape else []
        final_rows = sel.count if sel is not None else out_rows
        if dest is not None:
            if torch_dtype is not None:
                raise ValueError(f"structured tensor member {name} only supports "
                                 f"tensor_object_buffer or raw_destination destinations")
            want = [final_rows] + shape[1:] if shape else []
            _check_destination(name, dest, np.dtype(fspec["dtype"]), want)

        def post(buf: Any) -> Any:
            if skip:
                buf = buf[skip:]
            if torch_dtype is not None:
                t = _torch_from_bytes(buf, torch_dtype, out_shape)
                return t if take is None else t[take]
            arr = buf.view(np.dtype(fspec["dtype"])).reshape(out_shape)
            if take is not None:
                arr = arr[take]
            if dest is not None:
                dest[...] = arr
                return dest
            return arr if take is None else np.ascontiguousarray(arr)
        return job, post

    def _fetch(self, jobs: List[_Fetch], late: Sequence[_Fetch] = ()
               ) -> Optional[Callable[[], None]]:
        """Fill every job's buffer: whole payloads with one batch_get_into,
        byte ranges with one get_into_ranges (per-chunk get without them).

        The whole payloads in ``late`` are read by the store's completion
        queue while this thread goes on (when the store has one): the
        returned ``wait()`` -- which the caller must call, also when it
        fails meanwhile -- returns once they are in, or raises the read's
        error.  None when everything is in already."""
        pool = self._buffer_pool()
        regs: List[int] = []

        def unregister() -> None:
            for addr in regs:
                self.store.unregister_buffer(addr)

        wait = None
        try:
            whole, ranged = [], []
            arena = self._fetch_arena(jobs, pool)
            for j in jobs:
                j.addr = None  # (set again where the buffer is carved from a lease)
                j.buf = self._fetch_buffer(j, pool) if arena is None else arena(j)
                if j.nbytes == 0:
                    continue
                if not j.registered and callable(getattr(self.store, "register_buffer", None)) \
                        and self.store.register_buffer(_fetch_addr(j), j.nbytes) == 0:
                    regs.append(_fetch_addr(j))
                (whole if j.ranges is None else ranged).append(j)
            ids = {id(j) for j in late}
            later = [j for j in whole if id(j) in ids]
            reader = self._reader() if later else None
            if reader is not None:
                whole = [j for j in whole if id(j) not in ids]
                # the large payloads first: their lookup and copy run on the
                # queue's worker while this thread reads the small ones
                try:
                    wait = reader.start(*self._whole_lists(later))
                except StructuredObjectReadError:  # not queued: read them here
                    whole += later
            try:
                if whole:
                    self._fetch_whole(whole)
                if ranged:
                    self._fetch_ranged(ranged)
            except BaseException:
                if wait is not None:  # the memory is the queued read's until it is done
                    try:
                        wait()
                    except StructuredObjectReadError:
                        pass  # the first error is the one raised
                    wait = None
                raise
        except BaseException:
            unregister()
            raise
        if wait is None:
            unregister()
            return None

        def done() -> None:
            try:
                wait()
            finally:
                unregister()
        return done

    def _reader(self) -> Optional["_Reader"]:
        """This thread's completion queue on the store, None when the store
        is not a MooncakeDistributedStore reading by its own batch_get_into
        (a wrapper or subclass decides how it reads)."""
        r = getattr(self._readers, "reader", False)
        if r is False:
            r = None
            try:
                # Lazy: the native extension, which this module imports without.
                from mooncake.store import MooncakeDistributedStore
                from mooncake import capi

                st = self.store
                if type(st).batch_get_into is MooncakeDistributedStore.batch_get_into and \
                        isinstance(st, MooncakeDistributedStore):
                    r = _Reader(st._store, capi)
            except Exception:  # no queue (no eventfd, thread) or not built: read in place
                r = None
            self._readers.reader = r
        return r

    @staticmethod
    def _whole_lists(jobs: List[_Fetch]) -> Tuple[List[str], List[int], List[int]]:
        """(chunk keys, destination addresses, sizes) of whole-payload jobs."""
        keys, ptrs, sizes = [], [], []
        for j in jobs:
            off = 0
            base = _fetch_addr(j)
            for c in j.pspec["chunks"]:
                keys.append(c["key"])
                ptrs.append(base + off)
                sizes.append(c["bytes"])
                off += c["bytes"]
        return keys, ptrs, sizes

    @staticmethod
    def _fetch_arena(jobs: List[_Fetch], pool: Any) -> Any:
        """One pool lease carved for every job (None when the pool has no
        room): registered, already faulted-in memory, and no per-buffer
        registration for the many small payloads of a DataProto."""
        if pool is None:
            return None
        align = 64
        total = sum(-(-j.nbytes // align) * align for j in jobs)
        if total == 0:
            return None
        try:
            lease = pool.acquire(total, block=False)
        except Exception:  # exhausted or closed: a buffer per job instead
            return None
        if lease is None:
            return None
        whole = np.asarray(_LeaseMemory(lease))
        base = lease.ptr
        pos = [0]

        def carve(job: _Fetch) -> np.ndarray:
            job.registered = True
            job.addr = base + pos[0]
            buf = whole[pos[0]:pos[0] + job.nbytes]
            pos[0] += -(-job.nbytes // align) * align
            return buf
        return carve

    @staticmethod
    def _fetch_buffer(job: _Fetch, pool: Any) -> np.ndarray:
        n = job.nbytes
        if pool is not None and n >= _IN_PLACE_MIN_BYTES:
            try:
                lease = pool.acquire(n, block=False)
            except Exception:  # exhausted or closed: plain memory instead
                lease = None
            if lease is not None:
                job.registered = True
                job.addr = lease.ptr
                return np.asarray(_LeaseMemory(lease))[:n]
        return np.empty(n, np.uint8)

    def _fetch_whole(self, jobs: List[_Fetch]) -> None:
        keys, ptrs, sizes, owner = [], [], [], []
        for j in jobs:
            off = 0
            base = _fetch_addr(j)
            for c in j.pspec["chunks"]:
                keys.append(c["key"])
                ptrs.append(base + off)
                sizes.append(c["bytes"])
                owner.append(j)
                off += c["bytes"]
        batch = getattr(self.store, "batch_get_into", None)
        if not callable(batch):
            for k, z, j, p in zip(keys, sizes, owner, ptrs):
                data = self.store.get(k)
                if len(data) != z:
                    raise StructuredObjectReadError(
                        f"get failed for {k}: expected {z} bytes, got {len(data)}")
                ctypes.memmove(p, bytes(data), z)
            return
        for k, z, rc in zip(keys, sizes, batch(keys, ptrs, sizes)):
            if rc != z:
                raise StructuredObjectReadError(f"get failed for {k}: expected {z} bytes, "
                                                f"got {rc}", rc)

    def _fetch_ranged(self, jobs: List[_Fetch]) -> None:
        bufs, all_keys, dsts, srcs, sizes = [], [], [], [], []
        for j in jobs:
            frags: "OrderedDict[str, List[Tuple[int, int, int]]]" = OrderedDict()
            dst = 0
            for lo, n in j.ranges:
                pos = 0
                for c in j.pspec["chunks"]:
                    a, b = max(lo, pos), min(lo + n, pos + c["bytes"])
                    if b > a:
                        frags.setdefault(c["key"], []).append((dst + a - lo, a - pos, b - a))
                    pos += c["bytes"]
                dst += n
            bufs.append(_fetch_addr(j))
            all_keys.append(list(frags))
            dsts.append([[f[0] for f in fl] for fl in frags.values()])
            srcs.append([[f[1] for f in fl] for fl in frags.values()])
            sizes.append([[f[2] for f in fl] for fl in frags.values()])
        ranges = getattr(self.store, "get_into_ranges", None)
        if not callable(ranges):
            for j, keys, d_i, s_i, z_i in zip(jobs, all_keys, dsts, srcs, sizes):
                for k, ds, ss, zs in zip(keys, d_i, s_i, z_i):
                    data = bytes(self.store.get(k))
                    for d, s, z in zip(ds, ss, zs):
                        if s + z > len(data):
                            raise StructuredObjectReadError(
                                f"get failed for {k}: expected {s + z} bytes, got {len(data)}")
                        j.buf[d:d + z] = np.frombuffer(data, np.uint8, z, s)
            return
        res = ranges(bufs, all_keys, dsts, srcs, sizes)
        for keys, z_i, r_i in zip(all_keys, sizes, res):
            for k, zs, rs in zip(keys, z_i, r_i):
                for z, got in zip(zs, rs):
                    if got != z:
                        raise StructuredObjectReadError(
                            f"get failed for {k}: expected {z} bytes, got {got}", got)

    # ---- introspection and removal ----------------------------------------------------

    def dataproto_manifest_view(self, ref: DataProtoRefLike) -> Dict[str, Any]:
        """Where every field of a stored DataProto lives and how it is
        encoded (fetches each stage's manifest and metadata)."""
        r = _as_dataproto_ref(ref)
        stages = {s: self._stage(r, s) for s in r.stage_refs}
        view: Dict[str, Any] = {"namespace": r.namespace, "partition": r.partition,
                                "batch_size": r.batch_size, "batch_fields": {},
                                "non_tensor_fields": {}, "meta_info_keys": list(r.meta_info),
                                "stages": {}}
        for name, loc in r.field_index.items():
            _, manifest, _, fields = stages[loc.stage]
            enc = r.encoded_non_tensor.get(name)
            if enc is not None:
                members = enc.get("payload_members", {})
                spec = {"encoding": "structured_non_tensor", "codec": enc.get("codec"),
                        "metadata": enc.get("metadata"), "payload_members": members,
                        "payload_specs": {p: fields.get(m) for p, m in members.items()}}
            else:
                spec = fields.get(loc.member)
            section = "batch_fields" if loc.section == "batch" else "non_tensor_fields"
            view[section][name] = {"section": loc.section, "stage": loc.stage,
                                   "member": loc.member, "spec": spec}
        for s, (key, _, meta, _) in stages.items():
            view["stages"][s] = {"manifest_key": key,
                                 "dataproto": copy.deepcopy(meta.get("dataproto", {}))}
        return view

    def cleanup_dataproto(self, ref: DataProtoRefLike) -> None:
        """Remove every stage of a stored DataProto (strict: raises
        BundleRemoveError naming what could not be removed)."""
        r = _as_dataproto_ref(ref)
        seen = set()
        for sref in r.stage_refs.values():
            if sref.manifest_key in seen:
                continue
            seen.add(sref.manifest_key)
            self.remove_bundle(sref)


def _check_stage(stage: Any) -> str:
    if not isinstance(stage, str) or not stage:
        raise ValueError(f"invalid DataProto stage: {stage!r}")
    return stage


def _check_destination(name: str, dest: Any, dt: np.dtype, shape: List[int]) -> None:
    if not isinstance(dest, np.ndarray):
        raise TypeError(f"{name} destination must be a numpy.ndarray or raw_destination")
    if dest.dtype != dt:
        raise ValueError(f"destination dtype mismatch: expected {dt.str}, got {dest.dtype.str}")
    if list(dest.shape) != list(shape):
        raise ValueError("destination shape mismatch")
    if not dest.flags.c_contiguous:
        raise ValueError("destination must be C-contiguous")
    if not dest.flags.writeable:
        raise ValueError("destination must be writeable")


def _tensor_from_object(buf: Any) -> Any:
    """A tensor object's bytes (header + data) as a tensor."""
    # Lazy: the native extension (mooncake._tensor) and torch, only here.
    from mooncake import _tensor

    torch = _tensor.torch_module()
    t = _tensor._wrapped(torch, bytearray(bytes(buf)))
    if t is None:
        raise ValueError("structured tensor payload is not a tensor object")
    return t


def _field_selection(r: MooncakeDataProtoRef, fields: Optional[Sequence[str]],
                     batch_fields: Optional[Sequence[str]],
                     non_tensor_fields: Optional[Sequence[str]]) -> Tuple[List[str], List[str]]:
    if fields is not None and (batch_fields is not None or non_tensor_fields is not None):
        raise ValueError("fields cannot be combined with batch_fields or non_tensor_fields")
    if fields is not None:
        names = list(fields)
    elif batch_fields is None and non_tensor_fields is None:
        names = list(r.field_index)
    else:
        names = list(batch_fields or []) + list(non_tensor_fields or [])
    unknown = [n for n in names if n not in r.field_index]
    if unknown:
        raise KeyError(f"unknown DataProto fields: {unknown}")
    if fields is None and (batch_fields is not None or non_tensor_fields is not None):
        b = [n for n in (batch_fields or [])]
        nt = [n for n in (non_tensor_fields or [])]
    else:
        b = [n for n in names if r.field_index[n].section == "batch"]
        nt = [n for n in names if r.field_index[n].section == "non_tensor_batch"]
    # placement follows the recorded section
    b2 = [n for n in b + nt if r.field_index[n].section == "batch"]
    nt2 = [n for n in b + nt if r.field_index[n].section == "non_tensor_batch"]
    return b2, nt2


def _build_result(batch: Dict[str, Any], non_tensor: Dict[str, Any], meta: Dict[str, Any],
                  data_cls: Any) -> Any:
    if data_cls is None or data_cls is dict:
        return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta}
    from_dict = getattr(data_cls, "from_dict", None)
    try:
        if callable(from_dict):
            return from_dict(batch, non_tensor, meta_info=meta)
        return data_cls(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)
    except TypeError as e:
        raise TypeError(f"{getattr(data_cls, '__name__', data_cls)!r} cannot be constructed "
                        f"from batch, non_tensor_batch, and meta_info") from e


def _flatten_dataproto(got: Mapping[str, Any], r: MooncakeDataProtoRef) -> Dict[str, Any]:
    seen: Dict[str, int] = {}
    for section in ("meta_info", "batch", "non_tensor_batch"):
        for k in got[section]:
            seen[k] = seen.get(k, 0) + 1
    dup = sorted(k for k, n in seen.items() if n > 1)
    if dup:
        raise ValueError(f"Duplicate keys found across DataProto sections: {dup}")
    out = dict(got["meta_info"])
    out.update(got["batch"])
    for k, v in got["non_tensor_batch"].items():
        out[k] = v.tolist() if isinstance(v, np.ndarray) and v.dtype == object else v
    return out


def _object_array(values: List[Any]) -> np.ndarray:
    """A 1-D object array holding each value as is (never broadcast:
    rows that are equal-length lists or arrays stay rows)."""
    if _native_object_array is not None:
        got = _native_object_array(values)
        if got is not None:
            return got
    return np.fromiter(values, dtype=object, count=len(values))


def _flat_dict_to_dataproto(data: Any, schemas: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Split a flat dict into batch / non_tensor_batch / meta_info (upstream's rules)."""
    if not isinstance(data, Mapping):
        raise TypeError("flat dict payload must be a mapping")
    schemas = dict(schemas or {})
    for name, sch in schemas.items():
        _check_schema(name, sch)
    sec = {k: _schema_section(schemas[k]) for k in data if k in schemas}
    row_aligned = {k: v for k, v in data.items() if sec.get(k) in ("batch", "non_tensor_batch")}
    row_count = None
    if row_aligned:
        sizes = set()
        for k, v in row_aligned.items():
            try:
                sizes.add(len(v))
            except TypeError:
                raise ValueError(f"flat dict row-aligned field {k!r} must be sized") from None
        if len(sizes) > 1:
            raise ValueError(f"flat dict fields have inconsistent batch sizes: {sorted(sizes)}")
        row_count = sizes.pop()
    from_schema = row_count is not None

    def dense(v: Any) -> bool:
        if _is_tensor(v):
            return v.dim() > 0
        return isinstance(v, np.ndarray) and v.dtype != object and v.ndim > 0

    if row_count is None:
        firsts = {len(v) for k, v in data.items()
                  if dense(v) and not (k in sec and sec[k] == "meta_info")}
        if len(firsts) > 1:
            raise ValueError(f"flat dict dense fields have ambiguous batch sizes: "
                             f"{sorted(firsts)}")
        if firsts:
            row_count = firsts.pop()
        else:
            lens = {len(v) for k, v in data.items() if k not in sec and
                    ((isinstance(v, np.ndarray) and v.ndim > 0) or
                     (_is_sequence(v) and not isinstance(v, Mapping)))}
            if len(lens) > 1:
                raise ValueError(f"flat dict fields have ambiguous batch sizes: {sorted(lens)}; "
                                 f"pass FieldSchema metadata['section'] for list-valued "
                                 f"metadata fields")
            row_count = lens.pop() if lens else 0
    batch, non_tensor, meta = {}, {}, {}
    for k, v in data.items():
        s = sec.get(k)
        if s == "batch":
            batch[k] = v
        elif s == "non_tensor_batch":
            if isinstance(v, np.ndarray):
                if schemas[k].codec == "ndarray" and not any(x is None for x in v.tolist()):
                    dt = _schema_dtype(schemas[k])
                    v = v.astype(dt) if dt is not None else v
            elif _is_sequence(v) and not isinstance(v, Mapping):
                v = _object_array(list(v))
            else:
                raise TypeError(f"flat dict non_tensor_batch field {k!r} must be an ndarray or "
                                f"non-string sequence")
            if len(v) != row_count:
                raise ValueError(f"flat dict non_tensor_batch field {k!r} has batch size "
                                 f"{len(v)}, expected {row_count}")
            non_tensor[k] = v
        elif s == "meta_info":
            meta[k] = v
        elif dense(v) and row_count > 0 and len(v) == row_count:
            batch[k] = v
        elif not from_schema and isinstance(v, (list, tuple)) and row_count > 0 and \
                len(v) == row_count:
            non_tensor[k] = _object_array(list(v))
        else:
            meta[k] = v
    return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta}


class _CodedRead:
    """The reads of one encoded non-tensor field: its small per-row
    payloads and offsets first, then only the data ranges of the selected
    rows; decoded with the codec's decoder."""

    def __init__(self, name: str, encoded: Mapping[str, Any], manifest: Mapping[str, Any],
                 fields: Mapping[str, Any], sel: Optional[_RowSel]) -> None:
        self.name = name
        self.codec = encoded["codec"]
        self.rows = int(encoded["rows"])
        self.metadata = encoded.get("metadata") or {}
        self.members = dict(encoded["payload_members"])
        self.manifest, self.fields, self.sel = manifest, fields, sel
        for p, m in self.members.items():
            if m not in manifest["buffers"]:
                raise ValueError(f"DataProto field {name!r}: payload member {m!r} is missing "
                                 f"from its stage")
        self.roles = _codec_roles(self.codec, self.metadata)
        self.jobs: Dict[str, _Fetch] = {}
        self.payload: Dict[str, Any] = {}
        self.item_ids: Dict[str, List[int]] = {}
        self.data_jobs: Dict[str, Tuple[_Fetch, Any]] = {}

    def _job(self, payload: str, ranges: Optional[List[Tuple[int, int]]]) -> _Fetch:
        member = self.members[payload]
        j = _Fetch(self.manifest["buffers"][member], ranges)
        self.jobs[payload] = j
        return j

    def _row_bytes(self, payload: str) -> int:
        f = self.fields[self.members[payload]]
        if f.get("encoding") != "ndarray":
            raise ValueError(f"DataProto field {self.name!r}: payload {payload!r} is not an "
                             f"array")
        shape = f["shape"]
        return np.dtype(f["dtype"]).itemsize * math.prod(shape[1:])

    def phase1(self) -> List[_Fetch]:
        jobs = []
        sel = self.sel
        for role in self.roles:
            if role[0] == "row":
                if sel is None:
                    jobs.append(self._job(role[1], None))
                else:
                    rb = self._row_bytes(role[1])
                    jobs.append(self._job(role[1], [(a * rb, n * rb) for a, n in sel.runs()]))
            elif role[0] == "ragged":
                if sel is None:
                    jobs.append(self._job(role[1], None))
                    data = self._job(role[2], None)
                    # ndarray rows are views of the data: made before it is in
                    data.late = self.codec == "typed_ragged" and \
                        self.metadata.get("row_format") == "ndarray"
                    jobs.append(data)
                elif sel.idx is None:
                    jobs.append(self._job(role[1], [(sel.start * 8, (sel.count + 1) * 8)]))
                else:
                    jobs.append(self._job(role[1], None))
            else:  # ragged2
                jobs.append(self._job(role[1], None))
                jobs.append(self._job(role[2], None))
                if sel is None:
                    jobs.append(self._job(role[3], None))
        return jobs

    def _array(self, payload: str, rows: Optional[int] = None) -> Any:
        return _typed(self.jobs[payload].buf, self.fields[self.members[payload]], rows)

    def phase2(self) -> List[_Fetch]:
        sel = self.sel
        if sel is None:
            return []
        jobs = []
        for role in self.roles:
            if role[0] == "ragged":
                offs = np.asarray(self._array(role[1], -1)).reshape(-1)
                unit = self._unit(role[2])
                if sel.idx is None:
                    lo, hi = int(offs[0]), int(offs[-1])
                    bounds = [(lo, hi)] if hi > lo else []
                    new = offs - offs[0]
                else:
                    bounds, new = self._gather_bounds(offs, sel.runs(), sel.idx)
                j = _Fetch(self.manifest["buffers"][self.members[role[2]]],
                           [(a * unit, (b - a) * unit) for a, b in bounds if b > a])
                self.data_jobs[role[2]] = (j, np.asarray(new, np.int64))
                jobs.append(j)
            elif role[0] == "ragged2":
                row_offs = np.asarray(self._array(role[1])).reshape(-1).tolist()
                byte_offs = np.asarray(self._array(role[2])).reshape(-1)
                items: List[int] = []
                new_rows = [0]
                for r in sel.ids:
                    items.extend(range(row_offs[r], row_offs[r + 1]))
                    new_rows.append(len(items))
                item_runs = _RowSel(len(byte_offs), idx=items).runs()
                bounds, new_bytes = self._gather_bounds(byte_offs, item_runs, items)
                j = _Fetch(self.manifest["buffers"][self.members[role[3]]],
                           [(a, b - a) for a, b in bounds if b > a])
                prefix = role[1][:-len("row_offsets")]
                self.item_ids[prefix] = items
                self.data_jobs[role[3]] = (j, None)
                self.payload[role[1]] = np.asarray(new_rows, np.int64)
                self.payload[role[2]] = np.asarray(new_bytes, np.int64)
                jobs.append(j)
        return jobs

    @staticmethod
    def _gather_bounds(offsets: Any, runs: List[Tuple[int, int]], ids: Any = None
                       ) -> Tuple[List[Tuple[int, int]], np.ndarray]:
        """The (lo, hi) data bounds of each run of rows, and the offsets of
        the selected rows laid back to back (vectorised: no per-row loop)."""
        offs = np.asarray(offsets, np.int64)
        if not runs:
            return [], np.zeros(1, np.int64)
        starts = np.fromiter((a for a, _ in runs), np.int64, len(runs))
        counts = np.fromiter((n for _, n in runs), np.int64, len(runs))
        lo, hi = offs[starts], offs[starts + counts]
        if ids is None:
            ids = np.repeat(starts, counts) + (np.arange(counts.sum()) -
                                               np.repeat(np.cumsum(counts) - counts, counts))
        ids = np.asarray(ids, np.int64)
        new = np.zeros(ids.size + 1, np.int64)
        np.cumsum(offs[ids + 1] - offs[ids], out=new[1:])
        return list(zip(lo.tolist(), hi.tolist())), new

    def _unit(self, payload: str) -> int:
        f = self.fields[self.members[payload]]
        return np.dtype(f["dtype"]).itemsize if f.get("encoding") == "ndarray" else 1

    def decode(self) -> np.ndarray:
        sel = self.sel
        rows = self.rows if sel is None else sel.count
        payload: Dict[str, Any] = dict(self.payload)
        for p, j in self.jobs.items():
            if p in payload:
                continue
            f = self.fields[self.members[p]]
            if sel is None or f.get("encoding") != "ndarray":
                payload[p] = _typed(j.buf, f)
            elif any(role[0] == "ragged" and role[1] == p for role in self.roles):
                if sel.idx is None:
                    offs = _typed(j.buf, f, sel.count + 1)
                    payload[p] = offs - offs[0]
                # gathered offsets are replaced below
            else:
                payload[p] = _typed(j.buf, f, rows)
        for p, (j, new_offsets) in self.data_jobs.items():
            f = self.fields[self.members[p]]
            if f.get("encoding") == "ndarray":
                dt = np.dtype(f["dtype"])
                payload[p] = j.buf.view(dt).reshape(-1)
            else:
                payload[p] = j.buf
            if new_offsets is not None:
                off_name = [r[1] for r in self.roles if r[0] == "ragged" and r[2] == p][0]
                payload[off_name] = new_offsets
        row_ids = None if sel is None else sel.ids
        item_ids: Any = self.item_ids if self.codec == "structured_recursive" else \
            self.item_ids.get("")
        values = _decode_codec(self.codec, payload, rows, self.metadata, row_ids, item_ids)
        return _object_array(values)


def _cpus_available() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _queued_read_op(capi: Any, cpus: int) -> int:
    """The completion-queue op of a read that runs beside the caller's
    decoding on a host of ``cpus`` CPUs (see _LOCAL_READ_MAX_CPUS)."""
    return capi.AQ_BATCH_GET_INTO_LOCAL if cpus <= _LOCAL_READ_MAX_CPUS else \
        capi.AQ_BATCH_GET_INTO


class _Reader:
    """A completion queue of a store (mc_store_aq_*, one worker thread):
    batch_get_into that runs while the calling thread goes on, without the
    interpreter lock.  One per thread, so a completion reaped is always
    the caller's own.

    On a host of few CPUs (_LOCAL_READ_MAX_CPUS) the reads are
    MC_STORE_AQ_BATCH_GET_INTO_LOCAL: a replica on this host is copied by
    the queue's one worker alone, so the caller's decoding keeps a core of
    its own; spread over the transfer engine's workers as well (the plain
    batch_get_into), the copy took both cores of the development VM from
    the decoding beside it."""

    __slots__ = ("aq", "handle", "capi", "tag", "op")

    def __init__(self, handle: Any, capi: Any) -> None:
        self.aq = capi.AsyncQueue(handle, 1)  # RuntimeError when it cannot be made
        self.handle = handle  # the store handle must outlive the queue
        self.capi = capi
        self.tag = 0
        self.op = _queued_read_op(capi, _cpus_available())

    def __del__(self) -> None:
        # closing the queue waits for a read in flight; only then may the
        # store handle go (slots are cleared after this)
        self.aq = None

    def start(self, keys: List[str], ptrs: List[int], sizes: List[int]) -> Callable[[], None]:
        """Queue the batch_get_into of ``keys``; the returned ``wait()``
        blocks (without the interpreter lock) until it is done and raises
        StructuredObjectReadError for a key that did not read whole."""
        from array import array

        pairs = array("Q", bytes(16 * len(keys)))
        pairs[0::2] = array("Q", ptrs)
        pairs[1::2] = array("Q", sizes)
        self.tag += 1
        tag = self.tag
        rc = self.aq.batch_zc(self.op, keys, pairs, None, tag)
        if rc != 0:  # nothing queued: this thread reads them itself
            raise StructuredObjectReadError(f"batch_get_into could not be queued: {rc}", rc)

        def wait() -> None:
            import select

            got = None
            interrupted: Optional[BaseException] = None
            # the caller's decoding is done: it copies what the queue's
            # worker has not reached yet (mc_store_aq_help)
            self.aq.help()
            while got is None:
                for t, result, payload in self.aq.reap(8):
                    if t == tag:
                        got = payload if payload is not None else [result] * len(keys)
                if got is None:
                    try:
                        select.select([self.aq.fd()], [], [])
                    except BaseException as e:  # e.g. KeyboardInterrupt: the
                        interrupted = e          # memory is written until it is done
            if interrupted is not None:
                raise interrupted
            for k, z, rc in zip(keys, sizes, got):
                if rc != z:
                    raise StructuredObjectReadError(f"get failed for {k}: expected {z} bytes, "
                                                    f"got {rc}", rc)
        return wait


def _manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return _MANIFEST_JSON(manifest).encode()


# ---- payload chunks as parts (batch_put_parts) ----------------------------------------------

def _row_pieces(rows: List[Any], off: int, size: int) -> List[Any]:
    """Bytes [off, off + size) of the rows laid back to back, as uint8
    views of the rows (whole rows as they are)."""
    if off == 0 and size == sum(r.nbytes for r in rows):
        return [r.reshape(-1).view(np.uint8) for r in rows]
    pieces, pos = [], 0
    for r in rows:
        n = r.nbytes
        a, b = max(off, pos), min(off + size, pos + n)
        if b > a:
            flat = r.reshape(-1).view(np.uint8)
            pieces.append(flat if (a == pos and b == pos + n) else flat[a - pos:b - pos])
        pos += n
        if pos >= off + size:
            break
    return pieces


# the kinds whose one chunk _put_direct sends as the payload itself
_WHOLE_PARTS = frozenset(("array", "bytes", "rows"))


def _direct_parts(o: _Out) -> Optional[Callable[[int, int], Sequence[Any]]]:
    """``(offset, size) -> parts`` of a payload's chunk, read in place by
    batch_put_parts; None for what needs a call of its own (a tensor
    object, a tensor whose dtype has no header code)."""
    if o.kind == "rows":
        rows = o.rows

        def rows_parts(off: int, size: int) -> Sequence[Any]:
            # the whole payload (one chunk): the rows themselves, no view per row
            return rows if off == 0 and size == o.nbytes else _row_pieces(rows, off, size)
        return rows_parts
    if o.kind == "torch":
        header = _tensor_header(o.tensor)
        if header is None:
            return None
        import torch

        data = o.tensor.reshape(-1).view(torch.uint8).numpy()
        # a tensor is one key (docs/tensor.md): header then data, never chunked
        return lambda off, size: [header, data]
    if o.kind in ("array", "bytes"):
        view = o.source_view()
        return lambda off, size: [view[off:off + size]]
    return None


# ---- the facade ---------------------------------------------------------------------------

class MooncakeBundleTransfer(_DataProtoMixin):
    """Structured objects and bundles on one store.

    Args:
        store: a set-up :class:`~mooncake.store.MooncakeDistributedStore`
            (or anything with its ``put``/``get``/``remove`` methods; the
            zero-copy ones are used when present).
        key_prefix: first component(s) of every key (slashes at the ends
            are stripped).
        default_chunk_bytes: payloads larger than this are split into
            chunks of at most this many bytes, one key each.
        buffer_pool: the BufferPool to stage payloads in (default: one
            created on first need when the store has a local buffer).

    Thread-safe: one transfer may be used from several threads.
    """

    def __init__(self, store: Any, key_prefix: str = "bundle",
                 default_chunk_bytes: int = DEFAULT_BUNDLE_CHUNK_BYTES,
                 buffer_pool: Any = None) -> None:
        for needed in ("put", "get", "remove"):
            if not callable(getattr(store, needed, None)):
                raise TypeError(f"store has no {needed}() method")
        self.store = store
        self.key_prefix = _normalize_key_prefix(key_prefix)
        self.default_chunk_bytes = _chunk_bytes_arg(default_chunk_bytes)
        self._pool = buffer_pool
        self._pool_tried = buffer_pool is not None
        self._lock = threading.Lock()
        # manifest key -> (metadata, fields, raw meta) of objects read lately:
        # an object never changes once written (every write has a fresh key)
        self._meta_cache: "OrderedDict[str, Tuple[Dict[str, Any], Dict[str, Any], bytes]]" = \
            OrderedDict()
        # manifest key -> the manifest object last validated for it
        self._validated: "OrderedDict[str, Dict[str, Any]]" = OrderedDict()
        # per thread: the store's completion queue for reads that go on
        # while a DataProto is decoded (_Reader; None: read in place)
        self._readers = threading.local()
        # whether manifests go in their payloads' batch (batch_put_parts_commit)
        self._commits = callable(getattr(store, "batch_put_parts_commit", None))

    # ---- writes ---------------------------------------------------------------------

    def put_bundle(self, meta: Union[bytes, bytearray, memoryview], buffers: Mapping[str, Any],
                   partition: str = "default", chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None
                   ) -> RemoteBundleRef:
        """Store ``meta`` bytes plus the named raw ``buffers`` as a bundle.

        Returns the reference; raises :class:`StructuredObjectWriteError`
        (nothing left behind) when a write fails, TypeError/ValueError for
        bad arguments.
        """
        if not isinstance(buffers, Mapping):
            raise TypeError("buffers must be a mapping of name to bytes-like objects")
        outs = [_bytes_out(_check_name("buffer name", n), v) for n, v in buffers.items()]
        meta_out = _bytes_out("meta", meta)
        return self._write(meta_out, outs, partition, chunk_bytes, policy,
                           max_inflight_put, config)

    def put_structured_object(self, payload: StructuredObjectPayload,
                              partition: str = "default", chunk_bytes: Optional[int] = None,
                              policy: Optional[BundleTransferPolicy] = None,
                              max_inflight_put: Optional[int] = None,
                              config: Any = None) -> RemoteBundleRef:
        """Store a structured object; returns its reference.

        Raises:
            TypeError: not a payload, a member of an unsupported type,
                metadata that is not JSON-serializable.
            ValueError: a bad name, or (copy_mode ``zero_copy``) a member
                that is not a tensor_object_buffer.
            StructuredObjectWriteError: a store write failed (what was
                written is removed again).
        """
        if not isinstance(payload, StructuredObjectPayload):
            raise TypeError(f"payload must be a StructuredObjectPayload, "
                            f"not {type(payload).__name__}")
        if not isinstance(payload.buffers, Mapping):
            raise TypeError("structured buffers must be a mapping")
        meta_out, outs = _structured_outs(payload.metadata, payload.buffers)
        return self._write(meta_out, outs, partition, chunk_bytes, policy, max_inflight_put,
                           config)

    def put_object(self, obj: Any, partition: str = "default",
                   chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None
                   ) -> RemoteBundleRef:
        """Store a mapping of members as a structured object, or any single
        member value (an array, bytes, ...) as the member ``value`` of an
        object whose metadata marks it as wrapped; read back with
        :meth:`get_object`."""
        if isinstance(obj, Mapping):
            payload = StructuredObjectPayload({}, obj)
        else:
            payload = StructuredObjectPayload({_WRAPPED_KEY: True}, {"value": obj})
        return self.put_structured_object(payload, partition, chunk_bytes, policy,
                                          max_inflight_put, config)

    def get_object(self, ref: Any) -> Any:
        """What :meth:`put_object` stored: the single value, or the dict of
        members."""
        result = self.materialize(self.read_spec(ref))
        if result.metadata.get(_WRAPPED_KEY):
            return result.objects["value"]
        return result.objects

    def _write(self, meta: _Out, outs: List[_Out], partition: str, chunk_bytes: Optional[int],
               policy: Optional[BundleTransferPolicy], max_inflight_put: Optional[int],
               config: Any, direct: bool = False,
               meta_doc: Optional[Dict[str, Any]] = None,
               grouped: bool = False) -> RemoteBundleRef:
        """Write the payloads, then the manifest (the commit point).
        ``meta_doc``: the metadata document ``meta`` is the JSON of, when
        the caller built it from plain JSON data (cached as is, without
        reading the JSON back).  ``grouped``: as _write_stage's."""
        _check_partition(partition)
        chunk = self.default_chunk_bytes if chunk_bytes is None else _chunk_bytes_arg(chunk_bytes)
        if policy is None:
            policy = BundleTransferPolicy()
        if not isinstance(policy, BundleTransferPolicy):
            raise TypeError("policy must be a BundleTransferPolicy")
        inflight = policy.max_inflight_put if max_inflight_put is None else max_inflight_put
        _check_policy(policy, inflight)
        if config is not None and not grouped:  # 2+ group ids: refused before anything
            _config_for_grouped_keys(config, 2)  # is written
        if policy.copy_mode == "zero_copy" and any(o.kind != "tensor_object" for o in outs):
            raise RuntimeError("zero-copy put requires tensor-object buffers")
        object_id = f"{partition}/{_uuid4_hex()}"
        base = f"{self.key_prefix}/{object_id}"
        meta.key = f"{base}/meta"
        meta.chunks = self._chunks(meta.key, meta.nbytes, chunk)
        buffers: Dict[str, Any] = {}
        esc = _JSON_STR_ASCII
        frags = []  # the manifest's JSON of each buffer (_manifest_bytes' bytes)
        for o in outs:
            name = o.name
            o.key = key = f"{base}/buffer/{name}"
            n = o.nbytes
            if 0 < n <= chunk:  # one key either way
                o.chunks = [(key, 0, n)]
                if not o.extra and o.kind in _WHOLE_PARTS and type(n) is int:
                    # o.spec() and its JSON, made here
                    buffers[name] = {"key": key, "bytes": n,
                                     "chunks": [{"key": key, "bytes": n}]}
                    k = esc(key)
                    frags.append(f'{esc(name)}:{{"key":{k},"bytes":{n},"chunks":[{{"key":{k},'
                                 f'"bytes":{n}}}]}}')
                    continue
            else:
                one_key = o.kind in ("tensor_object", "torch") or "format" in o.extra or \
                    o.extra.get("kind") == "tensor"
                o.chunks = [(key, 0, n)] if one_key and n else self._chunks(key, n, chunk)
            buffers[name] = spec = o.spec()
            frags.append(f"{esc(name)}:{_MANIFEST_JSON(spec)}")
        meta_spec = meta.spec()
        manifest = {"version": MANIFEST_VERSION, "layout": "bundle", "object_id": object_id,
                    "meta": meta_spec, "buffers": buffers}
        manifest_key = f"{base}/manifest"
        # Everything but the writes is worked out first: moving the payloads
        # leaves the CPU caches cold for whatever Python runs after it.
        # (_manifest_bytes(manifest), its buffers' JSON made above)
        manifest_bytes = (f'{{"version":{MANIFEST_VERSION},"layout":"bundle","object_id":'
                          f'{esc(object_id)},"meta":{_MANIFEST_JSON(meta_spec)},'
                          f'"buffers":{{{",".join(frags)}}}}}').encode()
        decoded = None
        if meta_doc is not None and meta.view is not None:
            # the field specs were made from the payloads just described
            decoded = (meta_doc, meta_doc[STRUCTURED_FIELD_SPECS_KEY], bytes(meta.view))
        elif meta.view is not None and meta.nbytes <= (1 << 20):
            # this process reads back what it wrote without fetching the
            # metadata again (an object never changes once written)
            try:
                decoded = self._decode_meta(manifest_key, manifest, bytes(meta.view))
            except ValueError:  # a raw bundle's bytes: read them when asked
                decoded = None
        written: List[str] = []
        try:
            if direct and self._writes_direct(policy):
                # the manifest goes last in the payloads' batch when it can
                committed = self._put_direct([meta] + outs, config, written,
                                             (manifest_key, manifest_bytes))
            else:
                committed = False
                self._put_copy(meta, config, written)
                self._put_payloads(outs, policy, inflight, config, written)
            if not committed:
                self._put_manifest(manifest_key, manifest_bytes, config)
        except BaseException:
            self._remove_quietly(written + [manifest_key])
            raise
        self._remember_validated(manifest_key, manifest)  # built here: no validation
        if decoded is not None:
            self._cache_meta(manifest_key, decoded)
        return RemoteBundleRef(manifest_key, manifest)

    def _write_described(self, meta: Dict[str, Any], buffers: Mapping[str, Any],
                         partition: str, chunk_bytes: Optional[int], config: Any,
                         grouped: bool) -> Optional[RemoteBundleRef]:
        """What _structured_outs_doc and _write do for a DataProto stage
        written directly with its manifest as the commit key, with the
        metadata JSON, the manifest JSON and the keys made by one native
        call (mc_codec_stage_json: the same bytes) from the members as they
        are: arrays, unpacked rows, bytes and small tensors.  None, with
        nothing written, for anything else (or a store that turns out not
        to commit): the caller takes the general path, which also raises
        the errors of what it refuses."""
        chunk = self.default_chunk_bytes if chunk_bytes is None else \
            _chunk_bytes_arg(chunk_bytes)
        if config is not None and not grouped:  # 2+ group ids: refused before anything
            _config_for_grouped_keys(config, 2)  # is written
        members: List[Tuple[Any, ...]] = []
        parts: List[Sequence[Any]] = []
        for name, value in buffers.items():
            t = type(value)
            if t is np.ndarray:  # described natively (or None: the general path)
                members.append((name, value))
                parts.append([value])
            elif t is _RowData:
                members.append((name, value.nbytes, 0, value.dtype.str, (value.size,), 0, 0))
                parts.append(value.rows)
            elif t is bytes:
                members.append((name, len(value), 1, None, None, 0, 0))
                parts.append([value])
            elif _is_torch_tensor(value) and not getattr(value, "is_nested", False):
                small = _small_torch_out(name, value)
                if small is None:
                    return None
                o, spec = small
                members.append((name, o.nbytes, 2, spec["dtype"], spec["shape"],
                                spec["element_size"], _TENSOR_HEADER_BYTES))
                parts.append([o.view])
            else:
                return None
        object_id = f"{partition}/{_uuid4_hex()}"
        try:
            described = _native_stage_json(self.key_prefix, object_id, _META_JSON(meta),
                                           members, chunk, MANIFEST_VERSION)
        except (TypeError, ValueError):  # (UnicodeError is a ValueError)
            return None
        if described is None:  # an array it does not describe
            return None
        raw, manifest_bytes, keys, chunks, manifest, fields = described
        n = len(members)
        if len(chunks) == n + 1 and chunks[0][0] == n:  # every payload one key
            parts.insert(0, [raw])
            owners = ["meta"] + [m[0] for m in members]
        else:
            whole, parts, owners = parts, [], []
            for mi, off, size in chunks:
                if mi == n:
                    parts.append([memoryview(raw)[off:off + size]])
                    owners.append("meta")
                    continue
                m = members[mi]
                owners.append(m[0])
                if off == 0 and size == (m[1] if len(m) > 2 else m[1].nbytes):
                    parts.append(whole[mi])
                    continue
                value = buffers[m[0]]
                if type(value) is _RowData:
                    parts.append(_row_pieces(value.rows, off, size))
                elif type(value) is np.ndarray:
                    parts.append([memoryview(value.reshape(-1).view(np.uint8))[off:off + size]])
                else:  # bytes (a tensor object is one key)
                    parts.append([memoryview(value)[off:off + size]])
        manifest_key = f"{self.key_prefix}/{object_id}/manifest"
        try:
            if not self._put_committed(keys, parts, owners, (manifest_key, manifest_bytes),
                                       config):
                return None  # nothing written: the general path writes it
        except BaseException:
            self._remove_quietly([manifest_key])
            raise
        self._remember_validated(manifest_key, manifest)
        # the documents as this process reads them back (an object never
        # changes once written): what parsing the JSON gives, made with it
        meta[STRUCTURED_FIELD_SPECS_KEY] = fields
        self._cache_meta(manifest_key, (meta, fields, raw))
        return RemoteBundleRef(manifest_key, manifest)

    def _put_manifest(self, key: str, manifest: Union[Dict[str, Any], bytes],
                      config: Any) -> None:
        data = manifest if isinstance(manifest, bytes) else _manifest_bytes(manifest)
        rc = self.store.put(key, data, _config_for_grouped_keys(config, 1))
        if rc != 0:
            raise StructuredObjectWriteError(f"put failed for {key}: {rc}", "manifest", rc)

    @staticmethod
    def _chunks(key: str, nbytes: int, chunk: int) -> List[Tuple[str, int, int]]:
        if nbytes == 0:
            return []
        if nbytes <= chunk:
            return [(key, 0, nbytes)]
        n = -(-nbytes // chunk)
        return [(f"{key}/chunk/{i}", i * chunk, min(chunk, nbytes - i * chunk))
                for i in range(n)]

    def _buffer_pool(self) -> Any:
        """The BufferPool to stage in, or None when the store cannot have one."""
        with self._lock:
            if not self._pool_tried:
                self._pool_tried = True
                if callable(getattr(self.store, "batch_put_from", None)) and \
                        callable(getattr(self.store, "alloc_from_mem_pool", None)):
                    try:
                        self._pool = _buffer_pool.BufferPool(self.store)
                    except (RuntimeError, TypeError):
                        self._pool = None  # no local buffer: store.put it is
            return self._pool

    def _writes_direct(self, policy: Optional[BundleTransferPolicy]) -> bool:
        """Whether a DataProto stage goes by _put_direct: copy_mode auto,
        no explicit parallel put, and a store with batch_put_parts and a
        local buffer (without one it writes from registered memory only)."""
        if policy is not None and (policy.copy_mode != "auto" or policy.put_mode == "parallel"):
            return False
        return callable(getattr(self.store, "batch_put_parts", None)) and \
            self._buffer_pool() is not None

    def _writes_to_this_host(self, config: Any) -> bool:
        """Whether a write with ``config`` lands in a segment of this host,
        by the same-host path: the preferred segment (every preferred
        segment) names this client's host, and MC_TE_SHM does not turn the
        path off.  A guess from names -- the transfer engine decides per
        peer -- that only chooses how ragged rows are handed over: as they
        are, or packed into one part."""
        if os.environ.get("MC_TE_SHM", "1").strip() == "0" or config is None:
            return False
        segs = [getattr(config, "preferred_segment", "") or ""]
        if not segs[0]:
            segs = list(getattr(config, "preferred_segments", None) or [])
        hostname = getattr(self.store, "get_hostname", None)
        me = hostname() if callable(hostname) else ""
        if not segs or not isinstance(me, str) or ":" not in me:
            return False
        host = me.rsplit(":", 1)[0]
        return all(isinstance(sg, str) and sg.rsplit(":", 1)[0] == host for sg in segs)

    def _put_direct(self, outs: List[_Out], config: Any, written: List[str],
                    manifest: Optional[Tuple[str, bytes]] = None) -> bool:
        """The metadata and every payload chunk in one batch_put_parts, each
        chunk from the memory its bytes are in (arrays, bytes, typed-ragged
        rows, a tensor's header and data): one master round trip and one
        copy, into the segment, as batch_put_from of a packed buffer but
        without packing it.  Tensor objects (and tensors without a header
        code) keep their own calls.

        ``manifest`` (key, bytes): written as the commit key of the same
        batch when the store has batch_put_parts_commit (published only
        after every payload is: three master round trips for the whole
        object instead of four).  Returns whether it was."""
        keys: List[str] = []
        parts: List[Sequence[Any]] = []
        owner: List[_Out] = []
        for o in outs:
            chunks = o.chunks
            if not chunks:
                continue
            kind = o.kind
            if kind in _WHOLE_PARTS and len(chunks) == 1:
                # one chunk: the payload's own memory, no view to make (what
                # _direct_parts gives for the whole payload)
                keys.append(o.key)
                parts.append([o.array] if kind == "array" else
                             [o.view] if kind == "bytes" else o.rows)
                owner.append(o)
                continue
            source = _direct_parts(o)
            if source is None:
                if o.kind == "torch":
                    self._put_torch(o, config, written)
                else:
                    self._put_tensor_object(o, config, written)
                continue
            for key, off, size in o.chunks:
                keys.append(key)
                parts.append(source(off, size))
                owner.append(o)
        if manifest is not None and keys and self._commits:
            if self._put_committed(keys, parts, [o.name for o in owner], manifest, config):
                return True
        if not keys:
            return False
        rcs = self.store.batch_put_parts(keys, parts, _config_for_grouped_keys(config, len(keys)))
        if len(rcs) != len(keys):
            raise StructuredObjectWriteError(f"batch_put_parts returned {len(rcs)} results for "
                                             f"{len(keys)} chunks", owner[0].name)
        for k, rc in zip(keys, rcs):
            if rc == 0:
                written.append(k)
        for k, o, rc in zip(keys, owner, rcs):
            if rc != 0:
                self._fail(o, "batch_put_parts", k, rc)
        return False

    def _put_committed(self, keys: List[str], parts: List[Sequence[Any]], owners: List[str],
                       manifest: Tuple[str, bytes], config: Any) -> bool:
        """The payload chunks (of the members named in ``owners``) and the
        manifest in one batch_put_parts_commit.
        False (nothing written) when the store refuses the call
        (NOT_SUPPORTED: a dummy client, DFS replicas): the caller writes
        the manifest itself after the payloads, and this transfer does not
        try again.  Raises StructuredObjectWriteError when the object was
        not committed (the store removed what it had written)."""
        key, data = manifest
        rcs = self.store.batch_put_parts_commit(
            keys + [key], parts + [[data]], _config_for_grouped_keys(config, len(keys) + 1))
        if len(rcs) != len(keys) + 1:
            raise StructuredObjectWriteError(f"batch_put_parts_commit returned {len(rcs)} "
                                             f"results for {len(keys) + 1} keys", "manifest")
        if rcs[-1] == _NOT_SUPPORTED and all(rc == _NOT_SUPPORTED for rc in rcs):
            self._commits = False
            return False
        for k, name, rc in zip(keys, owners, rcs):
            if rc != 0:
                raise StructuredObjectWriteError(f"batch_put_parts_commit failed for {k}: {rc}",
                                                 name, rc)
        if rcs[-1] != 0:
            raise StructuredObjectWriteError(f"put failed for {key}: {rcs[-1]}", "manifest",
                                             rcs[-1])
        return True

    def _fail(self, o: _Out, op: str, key: str, rc: int) -> None:
        raise StructuredObjectWriteError(f"{op} failed for {key}: {rc}", o.name, rc)

    def _put_copy(self, o: _Out, config: Any, written: List[str]) -> None:
        """Every chunk of ``o`` through store.put."""
        if o.kind == "tensor_object":
            view = memoryview((ctypes.c_ubyte * o.tob.size).from_address(o.tob.ptr))
        elif o.kind == "rows":
            view = memoryview(np.concatenate([r.reshape(-1).view(np.uint8) for r in o.rows]))
        else:
            view = o.source_view()
        for key, off, size in o.chunks:
            rc = self.store.put(key, view[off:off + size], _config_for_grouped_keys(config, 1))
            if rc != 0:
                self._fail(o, "put", key, rc)
            written.append(key)

    def _put_payloads(self, outs: List[_Out], policy: BundleTransferPolicy, inflight: int,
                      config: Any, written: List[str]) -> None:
        copy_all = policy.copy_mode == "copy"
        pool = None if copy_all else self._buffer_pool()
        staged: List[Tuple[_Out, str, int, int]] = []
        in_place: List[_Out] = []
        for o in outs:
            if not o.chunks:
                continue
            if o.kind == "torch":
                self._put_torch(o, config, written)
            elif o.kind == "tensor_object" and not copy_all:
                self._put_tensor_object(o, config, written)
            elif copy_all or pool is None:
                self._put_copy(o, config, written)
            elif o.in_place:
                in_place.append(o)
            else:
                staged.extend((o, k, off, n) for k, off, n in o.chunks)
        total = sum(s[3] for s in staged)
        parallel = inflight > 1 and len(staged) > 1 and (
            policy.put_mode == "parallel" or
            (policy.put_mode == "auto" and len(staged) >= AUTO_PARALLEL_MIN_CHUNKS and
             total >= AUTO_PARALLEL_MIN_BYTES))
        if not parallel and pool is not None and (staged or in_place):
            # one batch_put_from for every chunk: staged ones from their
            # leases, large arrays from their own memory
            self._put_batched(staged, in_place, pool, config, written)
            return
        if in_place:
            self._put_in_place(in_place, pool, config, written)
        if staged:
            if parallel:
                with ThreadPoolExecutor(max_workers=min(inflight, len(staged))) as ex:
                    futures = [ex.submit(self._put_staged, pool, config, *s) for s in staged]
                # every chunk has finished: record all that were written, then
                # report the first failure (the caller removes what was written)
                errors = [f.exception() for f in futures if f.exception() is not None]
                written.extend(f.result() for f in futures if f.exception() is None)
                if errors:
                    raise errors[0]
            else:
                for s in staged:
                    written.append(self._put_staged(pool, config, *s))

    def _put_torch(self, o: _Out, config: Any, written: List[str]) -> None:
        """A torch tensor as one tensor object: pub_tensor when a config is
        given (it carries the replica and group settings), else put_tensor."""
        pub = getattr(self.store, "pub_tensor", None)
        put = getattr(self.store, "put_tensor", None)
        if config is not None and callable(pub):
            op, rc = "pub_tensor", pub(o.key, o.tensor, _config_for_grouped_keys(config, 1))
        elif callable(put):
            op, rc = "put_tensor", put(o.key, o.tensor)
        else:
            raise RuntimeError("mooncake.store tensor serialization helpers are required for "
                               "structured tensor fields")
        if rc != 0:
            self._fail(o, op, o.key, rc)
        written.append(o.key)

    def _put_tensor_object(self, o: _Out, config: Any, written: List[str]) -> None:
        put_tensor_from = getattr(self.store, "put_tensor_from", None)
        if callable(put_tensor_from) and config is None:
            rc = put_tensor_from(o.key, o.tob.ptr, o.tob.size)
        else:
            put_from = getattr(self.store, "put_from", None)
            if not callable(put_from):
                self._put_copy(o, config, written)
                return
            rc = put_from(o.key, o.tob.ptr, o.tob.size, _config_for_grouped_keys(config, 1))
        if rc != 0:
            self._fail(o, "put_from", o.key, rc)
        written.append(o.key)

    def _put_batched(self, staged: List[Tuple[_Out, str, int, int]], in_place: List[_Out],
                     pool: Any, config: Any, written: List[str]) -> None:
        """Staged chunks copied into pool leases (a chunk the pool has no
        room for now goes by store.put) and in-place arrays, in one
        batch_put_from: one master round trip for the whole object."""
        leases, items = [], []
        try:
            for o, key, off, size in staged:
                try:
                    lease = pool.acquire(size, block=False)
                except _buffer_pool.BufferPoolExhausted:
                    lease = None
                if lease is None:
                    written.append(self._put_staged(pool, config, o, key, off, size))
                    continue
                leases.append(lease)
                if o.kind == "rows":
                    self._gather_rows(o.rows, off, size, lease.ptr)
                else:
                    ctypes.memmove(lease.ptr, _address(o.source_view()[off:off + size]), size)
                items.append((o, key, lease.ptr, size))
            self._put_in_place(in_place, pool, config, written, items)
        finally:
            for lease in leases:
                lease.release()

    def _put_in_place(self, outs: List[_Out], pool: Any, config: Any,
                      written: List[str],
                      extra: Sequence[Tuple[_Out, str, int, int]] = ()) -> None:
        """Arrays written straight from their memory, all chunks (and the
        already staged ``extra`` chunks) in one batch_put_from; an array
        whose memory cannot be registered (already registered elsewhere,
        ...) is staged instead."""
        keys, ptrs, sizes, owner, regs = [], [], [], [], []
        for o, k, ptr, n in extra:
            keys.append(k)
            ptrs.append(ptr)
            sizes.append(n)
            owner.append(o)
        try:
            for o in outs:
                addr = int(o.array.ctypes.data)
                if not o.registered:  # a pool lease is registered already
                    if self.store.register_buffer(addr, o.nbytes) != 0:
                        for k, off, n in o.chunks:
                            written.append(self._put_staged(pool, config, o, k, off, n))
                        continue
                    regs.append(addr)
                for k, off, n in o.chunks:
                    keys.append(k)
                    ptrs.append(addr + off)
                    sizes.append(n)
                    owner.append(o)
            if keys:
                rcs = self.store.batch_put_from(keys, ptrs, sizes,
                                                _config_for_grouped_keys(config, len(keys)))
                for k, o, rc in zip(keys, owner, rcs):
                    if rc == 0:
                        written.append(k)
                for k, o, rc in zip(keys, owner, rcs):
                    if rc != 0:
                        self._fail(o, "batch_put_from", k, rc)
        finally:
            for addr in regs:
                self.store.unregister_buffer(addr)

    def _put_staged(self, pool: Any, config: Any, o: _Out, key: str, off: int,
                    size: int) -> str:
        """One chunk copied into a pool lease and written by batch_put_from,
        or by store.put when the pool has no room for it now: waiting could
        wait forever, e.g. for materialize() results the caller holds."""
        try:
            lease = pool.acquire(size, block=False)
        except _buffer_pool.BufferPoolExhausted:
            lease = None
        if lease is None:
            if o.kind == "rows":
                chunk = np.empty(size, np.uint8)
                self._gather_rows(o.rows, off, size, int(chunk.ctypes.data))
                view = memoryview(chunk)
            else:
                view = o.source_view()[off:off + size]
            rc = self.store.put(key, view, _config_for_grouped_keys(config, 1))
        else:
            with lease:
                if o.kind == "rows":
                    self._gather_rows(o.rows, off, size, lease.ptr)
                else:
                    ctypes.memmove(lease.ptr, _address(o.source_view()[off:off + size]), size)
                rc = self.store.batch_put_from([key], [lease.ptr], [size],
                                               _config_for_grouped_keys(config, 1))[0]
        if rc != 0:
            self._fail(o, "batch_put_from" if lease is not None else "put", key, rc)
        return key

    @staticmethod
    def _gather_rows(rows: List[Any], off: int, size: int, dst: int) -> None:
        """Bytes [off, off + size) of the rows laid back to back, to ``dst``."""
        pieces = _row_pieces(rows, off, size)
        if _concat_arrays_into is not None:
            _concat_arrays_into(pieces, dst, size)
            return
        joined = np.concatenate(pieces) if pieces else np.empty(0, np.uint8)
        ctypes.memmove(dst, int(joined.ctypes.data), joined.nbytes)

    # ---- removal ------------------------------------------------------------------------

    def _remove_quietly(self, keys: List[str]) -> None:
        try:
            self._remove_keys(keys)
        except Exception:  # best effort: the write's own error is what matters
            pass

    def _remove_keys(self, keys: List[str]) -> Dict[str, int]:
        """Remove ``keys`` (force); returns {key: status} of those that failed
        (a key already gone counts as removed)."""
        if not keys:
            return {}
        failed: Dict[str, int] = {}
        batch = getattr(self.store, "batch_remove", None)
        rcs = batch(keys, True) if callable(batch) else [self.store.remove(k, True) for k in keys]
        for k, rc in zip(keys, rcs):
            if rc not in (0, MISSING_OBJECT_ERROR):
                rc = self.store.remove(k, True)
                if rc not in (0, MISSING_OBJECT_ERROR):
                    failed[k] = rc
        return failed

    def remove_bundle(self, ref: Any) -> None:
        """Remove a bundle or structured object: the manifest first (readers
        stop seeing it at once), then every payload key.

        Raises:
            BundleRemoveError: some keys could not be removed; ``failed``
                says which payloads and keys (retrying is safe).
            StructuredManifestError / StructuredObjectReadError: the
                reference does not lead to a manifest (and the ref carries
                none).
        """
        manifest_key, manifest = self._resolve(ref)
        with self._lock:
            self._meta_cache.pop(manifest_key, None)
        failed: Dict[str, Dict[str, int]] = {}
        bad = self._remove_keys([manifest_key])
        if bad:
            failed["manifest"] = bad
        owners = {c["key"]: "meta" for c in manifest["meta"]["chunks"]}
        for name, spec in manifest["buffers"].items():
            owners.update({c["key"]: name for c in spec["chunks"]})
        # a merged stage (append_dataproto_fields) also owns the manifests
        # and metadata of the objects it was merged from
        owners.update({k: "cleanup" for k in manifest.get("cleanup_keys", [])})
        for key, rc in self._remove_keys(list(owners)).items():
            failed.setdefault(owners[key], {})[key] = rc
        if failed:
            raise BundleRemoveError(failed)

    def remove_partition(self, partition: str = "default", force: bool = False) -> int:
        """Remove every key of this transfer's ``key_prefix`` in ``partition``:
        all its objects, and what writers that died mid-write left behind
        (payload keys without a manifest, see docs/structured.md).  Only
        for a partition nobody reads or writes any more.

        Returns the number of keys removed, or a negative ErrorCode.
        ``force`` also removes keys a reader holds a lease on.
        """
        _check_partition(partition)
        regex = "^" + _ere_escape(f"{self.key_prefix}/{partition}/")
        with self._lock:
            self._meta_cache.clear()
            self._validated.clear()
        return self.store.remove_by_regex(regex, force)

    # ---- reading ------------------------------------------------------------------------

    def _resolve(self, ref: Any) -> Tuple[str, Dict[str, Any]]:
        """(manifest key, validated manifest) of a reference: a
        RemoteBundleRef (an empty manifest is fetched) or a mapping with
        "manifest" and/or "manifest_key"."""
        if isinstance(ref, RemoteBundleRef):
            key, manifest = ref.manifest_key, ref.manifest
        elif isinstance(ref, Mapping):
            manifest = ref.get("manifest") or {}
            key = ref.get("manifest_key")
            if key is None and manifest:
                key = self._manifest_key_of(manifest)
            if not isinstance(key, str):
                raise ValueError("bundle ref must include manifest_key")
        else:
            raise TypeError(f"bundle ref must be a RemoteBundleRef or a mapping with "
                            f"manifest_key, got {type(ref).__name__}")
        if not isinstance(key, str) or not key:
            raise ValueError("bundle ref must include manifest_key")
        if not manifest:
            manifest = _decode_manifest(self.store.get(key))
        with self._lock:
            known = self._validated.get(key) is manifest
        if not known:
            _validate_manifest(key, manifest, self.key_prefix)
            self._remember_validated(key, manifest)
        return key, manifest

    def _remember_validated(self, key: str, manifest: Dict[str, Any]) -> None:
        """``manifest`` needs no validation when read through ``key`` again
        (the newest _META_CACHE_SIZE kept)."""
        with self._lock:
            self._validated[key] = manifest
            while len(self._validated) > _META_CACHE_SIZE:
                self._validated.popitem(last=False)

    def _manifest_key_of(self, manifest: Any) -> Any:
        oid = manifest.get("object_id") if isinstance(manifest, Mapping) else None
        return f"{self.key_prefix}/{oid}/manifest" if isinstance(oid, str) else None

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        """A read of the whole object (narrow it with select_members /
        slice_member).  No store I/O: a missing or bad manifest, unknown
        members and an empty selection surface in materialize*."""
        if not isinstance(ref, (RemoteBundleRef, Mapping)):
            raise TypeError(f"bundle ref must be a RemoteBundleRef or a mapping with "
                            f"manifest_key, got {type(ref).__name__}")
        return StructuredObjectReadSpec(ref)

    def _meta(self, manifest: Dict[str, Any]) -> bytes:
        spec = manifest["meta"]
        parts = []
        for c in spec["chunks"]:
            data = self.store.get(c["key"])
            if len(data) != c["bytes"]:
                raise StructuredObjectReadError(
                    f"get failed for {c['key']}: expected {c['bytes']} bytes, got {len(data)}")
            parts.append(data)
        return b"".join(parts)

    def _fields(self, key: str, manifest: Dict[str, Any], shared: bool = False
                ) -> Tuple[Dict[str, Any], Dict[str, Any], bytes]:
        """(whole metadata, field specs, raw meta) of a manifest; a raw
        bundle's members all read as bytes and its metadata is {}.  The
        metadata is a copy the caller may keep, or with ``shared`` the
        cached object itself (for readers that never modify or return it:
        a DataProto's has every member spec, too large to copy per read)."""
        with self._lock:
            hit = self._meta_cache.get(key)
            if hit is not None:
                self._meta_cache.move_to_end(key)
                return hit[0] if shared else copy.deepcopy(hit[0]), hit[1], hit[2]
        got = self._decode_meta(key, manifest, self._meta(manifest))
        self._cache_meta(key, got)
        return got[0] if shared else copy.deepcopy(got[0]), got[1], got[2]

    def _cache_meta(self, key: str, got: Tuple[Dict[str, Any], Dict[str, Any], bytes]) -> None:
        with self._lock:
            self._meta_cache[key] = got
            while len(self._meta_cache) > _META_CACHE_SIZE:
                self._meta_cache.popitem(last=False)

    def _decode_meta(self, key: str, manifest: Dict[str, Any], raw: bytes
                     ) -> Tuple[Dict[str, Any], Dict[str, Any], bytes]:
        meta = None
        try:
            meta = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            meta = None
        if not isinstance(meta, dict) or STRUCTURED_FIELD_SPECS_KEY not in meta:
            kinds = {n: {"encoding": "torch_tensor"} if s.get("kind") == "tensor" else
                     {"encoding": "bytes"} for n, s in manifest["buffers"].items()}
            return {}, kinds, raw
        fields = meta[STRUCTURED_FIELD_SPECS_KEY]
        _validate_fields(key, manifest, fields)
        return meta, fields, raw

    def get_bundle(self, ref: Any) -> Tuple[bytes, Dict[str, bytes]]:
        """The raw form of a bundle (or structured object): its metadata
        bytes and every payload as bytes."""
        key, manifest = self._resolve(ref)
        raw = self._meta(manifest)
        plans = [_Plan(n, {"encoding": "bytes"}, s, None) for n, s in manifest["buffers"].items()]
        self._read(plans, {})
        return raw, {p.name: p.result() for p in plans}

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        """Read what ``spec`` selects into new objects: ndarray members as
        arrays, byte members as bytes, torch members as tensors."""
        return self.materialize_into(spec, None)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        """Like :meth:`materialize`, but ndarray members named in
        ``destinations`` are read straight into those arrays, which the
        result then holds (``result.objects[name] is destinations[name]``);
        other members are materialized as new objects.

        Raises:
            KeyError: an unknown member name.
            ValueError: nothing selected; a destination for a member that
                is not selected, for a byte member, or whose dtype/shape
                differs from the member (slice applied), or that is not a
                writable C-contiguous ndarray; a bad slice; a missing or
                malformed manifest.
            StructuredObjectReadError: a payload is missing or short.
        """
        if not isinstance(spec, StructuredObjectReadSpec):
            raise TypeError(f"spec must be a StructuredObjectReadSpec (from read_spec), "
                            f"not {type(spec).__name__}")
        if destinations is not None and not isinstance(destinations, Mapping):
            raise TypeError("destinations must be a mapping of member name to ndarray")
        key, manifest = self._resolve(spec.ref)
        meta, fields, _ = self._fields(key, manifest)
        names = list(manifest["buffers"]) if spec.member_names is None else \
            list(spec.member_names)
        unknown = [n for n in names if n not in manifest["buffers"]]
        if unknown:
            raise KeyError(f"unknown bundle buffers: {unknown}")
        if not names:
            raise ValueError("structured read spec selected no members")
        slices = dict(spec.member_slices)
        for n in slices:
            if n not in names:
                raise ValueError(f"slice of member {n!r}, which is not selected")
        dests = dict(destinations or {})
        for n in dests:
            if n not in names:
                raise ValueError(f"destination for member {n!r}, which is not selected")
        plans = [_Plan(n, fields[n], manifest["buffers"][n], slices.get(n)) for n in names]
        self._read(plans, dests)
        return StructuredObjectResult(meta, {p.name: p.result() for p in plans})

    @staticmethod
    def release_result(result: Any) -> None:
        """Give the BufferPool memory behind the arrays of a materialize()
        result back now instead of when the arrays are garbage collected.
        The arrays (and views of them) must not be used afterwards."""
        seen = set()

        def visit(v: Any) -> None:
            if id(v) in seen:
                return
            seen.add(id(v))
            if isinstance(v, StructuredObjectResult):
                visit(v.objects)
            elif isinstance(v, Mapping):
                for x in v.values():
                    visit(x)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    visit(x)
            elif isinstance(v, np.ndarray):
                mem = _lease_memory_of(v)
                if mem is not None:
                    mem.release()
        visit(result)

    # ---- the read engine --------------------------------------------------------------

    def _read(self, plans: List["_Plan"], dests: Dict[str, Any]) -> None:
        """Fill every plan's buffer: whole payloads with one batch_get_into,
        byte ranges with one get_into_ranges."""
        regs: List[int] = []
        pool = self._buffer_pool()
        try:
            full, ranged = [], []
            for p in plans:
                p.prepare(None if p.internal else dests.get(p.name), pool)
                if p.nbytes_to_read == 0 or p.tensor:
                    continue
                if not p.registered and \
                        self.store.register_buffer(p.addr, p.buffer_bytes) == 0:
                    regs.append(p.addr)
                (ranged if p.partial else full).append(p)
            for p in plans:
                if p.tensor:
                    p.read_tensor(self.store)
            if full:
                self._read_full(full)
            if ranged:
                self._read_ranges(ranged)
        finally:
            for addr in regs:
                self.store.unregister_buffer(addr)

    def _read_full(self, plans: List["_Plan"]) -> None:
        keys, ptrs, sizes, owner = [], [], [], []
        for p in plans:
            off = 0
            for c in p.pspec["chunks"]:
                keys.append(c["key"])
                ptrs.append(p.addr + off)
                sizes.append(c["bytes"])
                owner.append(p)
                off += c["bytes"]
        batch = getattr(self.store, "batch_get_into", None)
        rcs = batch(keys, ptrs, sizes) if callable(batch) else \
            [self.store.get_into(k, a, s) for k, a, s in zip(keys, ptrs, sizes)]
        for k, s, rc, p in zip(keys, sizes, rcs, owner):
            if rc != s:
                raise StructuredObjectReadError(
                    f"reading {k!r} of member {p.name!r} failed "
                    f"({'got ' + str(rc) + ' bytes' if rc >= 0 else rc})", rc)

    def _read_ranges(self, plans: List["_Plan"]) -> None:
        bufs, all_keys, dsts, srcs, sizes = [], [], [], [], []
        for p in plans:
            keys_i, d_i, s_i, z_i = [], [], [], []
            lo, hi = p.byte_offset, p.byte_offset + p.nbytes_to_read
            pos = 0
            for c in p.pspec["chunks"]:
                a, b = max(lo, pos), min(hi, pos + c["bytes"])
                if b > a:
                    keys_i.append(c["key"])
                    d_i.append([a - lo])
                    s_i.append([a - pos])
                    z_i.append([b - a])
                pos += c["bytes"]
            bufs.append(p.addr)
            all_keys.append(keys_i)
            dsts.append(d_i)
            srcs.append(s_i)
            sizes.append(z_i)
        res = self.store.get_into_ranges(bufs, all_keys, dsts, srcs, sizes)
        for p, keys_i, z_i, r_i in zip(plans, all_keys, sizes, res):
            for k, z, r in zip(keys_i, z_i, r_i):
                if r[0] != z[0]:
                    raise StructuredObjectReadError(
                        f"range read of {k!r} (member {p.name!r}) failed ({r[0]})", r[0])


# ---- manifest checks ------------------------------------------------------------------

def _bad(key: str, why: str) -> StructuredManifestError:
    return StructuredManifestError(f"{why} (manifest {key!r})")


def _decode_manifest(data: Any) -> Dict[str, Any]:
    """A manifest's bytes as a dict.  A missing manifest reads as b"",
    which raises json.JSONDecodeError ("Expecting value"), as upstream."""
    manifest = json.loads(bytes(data))
    if not isinstance(manifest, dict):
        raise ValueError("bundle manifest must decode to a dict")
    return manifest


def _is_count(v: Any) -> bool:
    return _util.is_int(v) and v >= 0


def _under(key: Any, bases: Sequence[str]) -> bool:
    return isinstance(key, str) and any(key.startswith(b + "/") for b in bases)


def _validate_payload(key: str, spec: Any, bases: Sequence[str]) -> None:
    if not isinstance(spec, dict):
        raise _bad(key, "bundle payload spec must be a dict")
    pkey, nbytes, chunks = spec.get("key"), spec.get("bytes"), spec.get("chunks")
    if not _under(pkey, bases):
        raise _bad(key, "bundle payload key is outside the bundle namespace")
    if not _util.is_int(nbytes) or nbytes < 0:
        raise _bad(key, "bundle payload bytes must be non-negative")
    if not isinstance(chunks, list):
        raise _bad(key, "bundle payload chunks are invalid")
    seen, total = set(), 0
    for c in chunks:
        if not isinstance(c, dict):
            raise _bad(key, "bundle chunk must be a dict")
        ck = c.get("key")
        if not isinstance(ck, str) or not (ck == pkey or ck.startswith(pkey + "/")):
            raise _bad(key, "bundle chunk key is outside the payload namespace")
        if ck in seen:
            raise _bad(key, "bundle chunk keys must be unique")
        if not _util.is_int(c.get("bytes")) or c["bytes"] < 0:
            raise _bad(key, "bundle chunk bytes must be non-negative")
        seen.add(ck)
        total += c["bytes"]
    if total != nbytes:
        raise _bad(key, f"bundle payload chunks total {total} bytes, expected {nbytes}")
    if spec.get("kind", "tensor") != "tensor":
        raise _bad(key, f"bundle payload kind {spec.get('kind')!r} is unknown")


def _validate_manifest(key: str, m: Any, key_prefix: str = "") -> None:
    """Everything a reader relies on, before a byte of a member is read
    (messages as upstream's, with the manifest key appended)."""
    if not isinstance(m, dict) or m.get("version") != MANIFEST_VERSION or \
            m.get("layout") != "bundle":
        raise _bad(key, "invalid bundle manifest")
    oid = m.get("object_id")
    if not isinstance(oid, str):
        raise _bad(key, "bundle manifest object_id must be a string")
    suffix = f"/{oid}/manifest"
    if not key.endswith(suffix) or len(key) == len(suffix):
        raise _bad(key, "bundle manifest_key does not match manifest object_id")
    prefix = key[:-len(suffix)]
    ids = m.get("buffer_object_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        raise _bad(key, "bundle manifest buffer_object_ids must be a list of strings")
    bases = [f"{prefix}/{oid}"] + [f"{prefix}/{i}" for i in ids]
    cleanup = m.get("cleanup_keys", [])
    if not isinstance(cleanup, list) or not all(_under(k, bases) for k in cleanup):
        raise _bad(key, "bundle manifest cleanup_keys are outside the bundle namespace")
    _validate_payload(key, m.get("meta"), bases)
    bufs = m.get("buffers")
    if not isinstance(bufs, dict):
        raise _bad(key, "bundle manifest buffers must be a dict")
    for name, spec in bufs.items():
        if not _valid_name(name):
            raise _bad(key, f"invalid bundle buffer name: {name!r}")
        _validate_payload(key, spec, bases)


def _validate_fields(key: str, manifest: Dict[str, Any], fields: Any) -> None:
    if not isinstance(fields, dict):
        raise _bad(key, "structured field specs must be a dict")
    for name in manifest["buffers"]:
        if name not in fields:
            raise _bad(key, f"structured member {name!r} has no field spec")
    for name, f in fields.items():
        if name not in manifest["buffers"]:
            raise _bad(key, f"structured field spec {name!r} names no bundle buffer")
        enc = f.get("encoding") if isinstance(f, dict) else None
        if enc not in _ENCODINGS:
            raise _bad(key, f"unsupported structured field encoding: {enc}")
        nbytes = manifest["buffers"][name]["bytes"]
        if enc == "ndarray":
            try:
                dt = np.dtype(f["dtype"])
            except (KeyError, TypeError, ValueError):
                raise _bad(key, f"structured member {name!r} has a bad dtype") from None
            shape = f.get("shape")
            if dt.hasobject or not isinstance(shape, list) or \
                    not all(_is_count(d) for d in shape):
                raise _bad(key, f"structured member {name!r} has a bad dtype or shape")
            want = math.prod(shape) * dt.itemsize
            if want != nbytes:
                raise _bad(key, f"structured member {name!r}: shape and dtype make {want} "
                                f"bytes, the payload has {nbytes}")


# ---- one member's read ----------------------------------------------------------------

class _Plan:
    """Where one member's bytes come from and where they go."""

    def __init__(self, name: str, fspec: Dict[str, Any], pspec: Dict[str, Any],
                 sl: Optional[StructuredMemberSlice]) -> None:
        self.name, self.fspec, self.pspec, self.sl = name, fspec, pspec, sl
        self.enc = fspec["encoding"]
        # a tensor object read by get_tensor (no dtype/shape known up front)
        self.tensor = self.enc == "torch_tensor" and "dtype" not in fspec and \
            pspec.get("format") != "torch_save"
        self.partial = False
        self.byte_offset = 0
        self.nbytes_to_read = pspec["bytes"]
        self.buffer: Any = None
        self.addr = 0
        self.buffer_bytes = 0
        self.out: Any = None
        self.post: Any = None  # applied to the buffer after the read
        self.pool: Any = None
        self.registered = False  # buffer already registered (pool memory, ...)
        self.internal = False  # the object's metadata, not a member
        if sl is not None and self.enc == "bytes":
            raise ValueError(f"structured bytes member {name} does not support slicing")
        if sl is not None and self.enc == "torch_tensor":
            if self.tensor or pspec.get("format") == "torch_save":
                raise ValueError(f"structured tensor field {name} is missing slice metadata")
            if sl.axis != 0:
                raise ValueError("structured tensor slicing currently supports axis=0 only")
            if sl.step != 1:
                raise ValueError("structured tensor slicing currently requires step=1")

    def _rows(self, length: int) -> Tuple[int, int, int]:
        sl = self.sl
        assert sl is not None
        if not (0 <= sl.start <= sl.end <= length):
            raise ValueError(f"slice [{sl.start}:{sl.end}] of member {self.name!r} is out of "
                             f"range (length {length} along axis {sl.axis})")
        return sl.start, sl.end, sl.step

    def prepare(self, dest: Any, pool: Any) -> None:
        self.pool = pool
        if self.tensor:
            self._prepare_tensor(dest)
            return
        if self.enc == "bytes":
            if dest is not None:
                raise ValueError(f"structured bytes member {self.name} does not support "
                                 f"materialize_into")
            self._alloc_flat(self.nbytes_to_read)
            self.post = lambda buf: bytes(buf)
            return
        if self.enc == "torch_tensor":
            self._prepare_torch(dest)
            return
        dt = np.dtype(self.fspec["dtype"])
        shape = tuple(self.fspec["shape"])
        if self.sl is None:
            out_shape, cover = shape, None
        else:
            if not (0 <= self.sl.axis < max(len(shape), 1)) or not shape:
                raise ValueError(f"axis {self.sl.axis} is out of range for member "
                                 f"{self.name!r} of shape {shape}")
            start, end, step = self._rows(shape[self.sl.axis])
            out_shape = shape[:self.sl.axis] + (len(range(start, end, step)),) + \
                shape[self.sl.axis + 1:]
            cover = (start, end, step)
        if isinstance(dest, _RawDestination):
            need = math.prod(out_shape) * dt.itemsize
            if dest.size < need:
                raise ValueError(f"raw destination of member {self.name!r} has {dest.size} "
                                 f"bytes, the member (as selected) needs {need}")
            self.registered = dest.pre_registered
            dest = np.asarray(_RawMemory(dest.ptr, need, dest.owner)).view(dt).reshape(out_shape)
        if dest is not None:
            self._check_dest(dest, dt, out_shape)
        if cover is None:
            self._set_target(dest, dt, out_shape)
            return
        start, end, step = cover
        if self.sl.axis == 0:
            row = dt.itemsize * math.prod(shape[1:])
            self.partial = True
            self.byte_offset = start * row
            self.nbytes_to_read = (end - start) * row
            rows_read = end - start
            if step == 1:
                self._set_target(dest, dt, out_shape)
                return
            self._alloc_flat(self.nbytes_to_read)
            block_shape = (rows_read,) + shape[1:]
            self.post = lambda buf: _deliver(np.frombuffer(buf, dt).reshape(block_shape)[::step],
                                             dest)
            return
        # another axis: the whole member is read, then sliced
        self._alloc_flat(self.nbytes_to_read)
        ax = self.sl.axis
        idx = tuple(slice(None) if i != ax else slice(start, end, step)
                    for i in range(len(shape)))
        self.post = lambda buf: _deliver(np.frombuffer(buf, dt).reshape(shape)[idx], dest)

    def _prepare_torch(self, dest: Any) -> None:
        """A torch member whose dtype and shape are known: its data bytes
        (after the tensor header), or rows of them, become a tensor."""
        if self.pspec.get("format") == "torch_save":
            if dest is not None:
                raise ValueError(f"structured tensor member {self.name} only supports "
                                 f"tensor_object_buffer or raw_destination destinations")
            self._alloc_flat(self.nbytes_to_read)
            self.post = _torch_load
            return
        hdr = int(self.pspec.get("metadata_bytes", _TENSOR_HEADER_BYTES))
        shape = list(self.fspec["shape"])
        elem = int(self.fspec.get("element_size") or 0) or _torch_element_size(self.fspec["dtype"])
        if self.sl is not None:
            if not shape:
                raise ValueError(f"structured tensor field {self.name} is missing slice metadata")
            start, end, _ = self._rows(shape[0])
            row = elem * math.prod(shape[1:])
            shape[0] = end - start
            self.partial = True
            self.byte_offset = hdr + start * row
            self.nbytes_to_read = (end - start) * row
            skip = 0
        else:
            skip = hdr
        if isinstance(dest, _RawDestination):
            if dest.size < self.nbytes_to_read:
                raise ValueError(f"raw destination has {dest.size} bytes, expected at least "
                                 f"{self.nbytes_to_read}")
            self.registered = dest.pre_registered
            self.buffer = np.asarray(_RawMemory(dest.ptr, self.nbytes_to_read, dest.owner))
            self.addr, self.buffer_bytes = dest.ptr, self.nbytes_to_read
        elif dest is not None:
            raise ValueError(f"structured tensor member {self.name} only supports "
                             f"tensor_object_buffer or raw_destination destinations")
        else:
            self._alloc_flat(self.nbytes_to_read)
        dtype_name = self.fspec["dtype"]
        self.post = lambda buf: _torch_from_bytes(buf[skip:], dtype_name, shape)

    def _check_dest(self, dest: Any, dt: np.dtype, shape: Tuple[int, ...]) -> None:
        if not isinstance(dest, np.ndarray):
            raise ValueError(f"destination of member {self.name!r} must be an ndarray, not "
                             f"{type(dest).__name__}")
        if dest.dtype != dt or tuple(dest.shape) != tuple(shape):
            raise ValueError(f"destination of member {self.name!r} is "
                             f"{dest.dtype}{list(dest.shape)}, the member (as selected) is "
                             f"{dt}{list(shape)}")
        if not dest.flags.c_contiguous or not dest.flags.writeable:
            raise ValueError(f"destination of member {self.name!r} must be a writable "
                             f"C-contiguous ndarray")

    def _set_target(self, dest: Any, dt: np.dtype, shape: Tuple[int, ...]) -> None:
        arr = dest if dest is not None else \
            self._empty(math.prod(shape) * dt.itemsize).view(dt).reshape(shape)
        self.out = arr
        self.buffer = arr
        self.addr = int(arr.ctypes.data) if arr.nbytes else 0
        self.buffer_bytes = int(arr.nbytes)

    def _empty(self, n: int) -> Any:
        """n bytes for a new object: a pool lease for a large one (registered
        memory the store has touched before: no page faults, no
        registration), else (or when the pool has no room) np.empty."""
        if self.pool is not None and n >= _IN_PLACE_MIN_BYTES:
            try:
                lease = self.pool.acquire(n, block=False)
            except Exception:  # exhausted, closed: plain memory instead
                lease = None
            if lease is not None:
                self.registered = True
                return np.asarray(_LeaseMemory(lease))
        return np.empty(n, np.uint8)

    def _alloc_flat(self, n: int) -> None:
        buf = self._empty(n)
        self.buffer = buf
        self.addr = int(buf.ctypes.data) if n else 0
        self.buffer_bytes = n

    def _prepare_tensor(self, dest: Any) -> None:
        if dest is not None and not isinstance(dest, _TensorObjectBuffer):
            raise ValueError(f"structured tensor member {self.name} only supports "
                             f"tensor_object_buffer or raw_destination destinations")
        self.out = dest

    def read_tensor(self, store: Any) -> None:
        key = self.pspec["key"]
        if self.out is not None:
            t = store.get_tensor_into(key, self.out.ptr, self.out.size)
        else:
            t = store.get_tensor(key)
        if t is None:
            raise StructuredObjectReadError(f"get_tensor failed for {key}")
        self.out = t if self.out is None else self.out
        self.post = None
        self.buffer = t

    def result(self) -> Any:
        if self.tensor:
            return self.buffer
        if self.post is not None:
            return self.post(self.buffer)
        return self.out


def _torch_dtype(name: str) -> Any:
    """The torch dtype named ``torch.float32`` (or ``float32``)."""
    import torch

    dt = getattr(torch, name.split(".", 1)[-1], None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unsupported torch dtype {name!r}")
    return dt


def _torch_element_size(name: str) -> int:
    import torch

    return torch.empty((), dtype=_torch_dtype(name)).element_size()


def _torch_from_bytes(buf: Any, dtype_name: str, shape: Sequence[int]) -> Any:
    """A tensor over the bytes of ``buf`` (a uint8 ndarray; no copy)."""
    import torch

    flat = np.asarray(buf, dtype=np.uint8).reshape(-1)
    npdt = _NP_OF_TORCH_NAME.get(dtype_name)
    if npdt is not None and flat.size % npdt.itemsize == 0:
        # one torch call: the bytes viewed in numpy first (anything else --
        # a size that does not match, odd memory -- fails or goes as before)
        typed = flat.view(npdt)
        if typed.flags.aligned and typed.size == math.prod(shape):
            return torch.from_numpy(typed.reshape(tuple(shape)))
    u8 = torch.from_numpy(flat)
    dt = _torch_dtype(dtype_name)
    if dt == torch.bool:
        return u8.view(torch.bool).reshape(tuple(shape))
    return u8.view(dt).reshape(tuple(shape))


def _torch_load(buf: Any) -> Any:
    import io

    import torch

    return torch.load(io.BytesIO(bytes(buf)), weights_only=True)


class _RawMemory:
    """Caller memory as the base of an array; keeps its owner alive."""

    def __init__(self, ptr: int, size: int, owner: Any) -> None:
        self.owner = owner
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1",
                                    "data": (ptr, False), "version": 3}


class _LeaseMemory:
    """A BufferPool lease as the base of the arrays made on it: the lease
    goes back to the pool when the last array using it is gone (or at
    MooncakeBundleTransfer.release_result)."""

    def __init__(self, lease: Any) -> None:
        self.lease = lease
        self.__array_interface__ = {"shape": (lease.size,), "typestr": "|u1",
                                    "data": (lease.ptr, False), "version": 3}

    def release(self) -> None:
        self.lease.release()

    def __del__(self) -> None:
        try:
            self.lease.release()
        except Exception:  # pool closed meanwhile: nothing to give back
            pass


def _lease_memory_of(value: Any) -> Optional[_LeaseMemory]:
    base = value
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, _LeaseMemory) else None


def _deliver(view: Any, dest: Any) -> Any:
    if dest is None:
        return np.ascontiguousarray(view)
    dest[...] = view
    return dest

# SPDX-License-Identifier: Apache-2.0
"""Structured objects and bundles on top of a Mooncake store.

A *structured object* is one logical object made of named members --
numpy arrays, byte strings, lists of arrays (ragged rows) and tensor
objects -- plus a JSON metadata dict.  A *bundle* is the raw form of the
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
    spec = transfer.read_spec(ref.manifest_key).slice_member("tokens", 0, 2, 5)
    rows = transfer.materialize(spec).objects["tokens"]

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
"""

import copy
import ctypes
import json
import math
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from mooncake import _util

try:  # the native gather copy; the pure-numpy path is used without it
    from mooncake._fast_copy import concat_arrays_into as _concat_arrays_into
except Exception:  # pragma: no cover - depends on the built extension
    _concat_arrays_into = None

__all__ = [
    "DEFAULT_BUNDLE_CHUNK_BYTES",
    "MANIFEST_VERSION",
    "MISSING_OBJECT_ERROR",
    "STRUCTURED_FIELD_SPECS_KEY",
    "BundleTransferPolicy",
    "MooncakeBundleTransfer",
    "RemoteBundleRef",
    "StructuredMemberSlice",
    "StructuredObjectPayload",
    "StructuredObjectReadSpec",
    "StructuredObjectResult",
    "StructuredObjectError",
    "StructuredManifestError",
    "StructuredObjectWriteError",
    "StructuredObjectReadError",
    "BundleRemoveError",
    "tensor_object_buffer",
    "raw_destination",
]

DEFAULT_BUNDLE_CHUNK_BYTES = 64 * 1024 ** 2
#: The manifest version this module writes and the only one it reads.
MANIFEST_VERSION = 1
#: OBJECT_NOT_FOUND: removing a key that is already gone counts as removed.
MISSING_OBJECT_ERROR = -704
#: Key of the member descriptions inside a structured object's metadata.
STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"
_INVALID_PARAMS = -600
# In copy_mode="auto", C-contiguous ndarray payloads of at least this many
# bytes are registered in place and written straight from the caller's
# memory; smaller ones are staged (registration costs more than the copy).
_IN_PLACE_MIN_BYTES = 1 << 20
# Metadata mark of an object put_object() made from a single value.
_WRAPPED_KEY = "__mooncake_wrapped_object__"
# Structured metadata of this many objects is kept per transfer.
_META_CACHE_SIZE = 256
_ENCODINGS = ("bytes", "ndarray", "ndarray_rows", "tensor_object")


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

    def __post_init__(self) -> None:
        if not _util.is_int(self.max_inflight_put) or self.max_inflight_put < 1:
            raise ValueError(f"max_inflight_put must be an int >= 1, "
                             f"got {self.max_inflight_put!r}")
        if self.put_mode not in ("auto", "batch", "parallel"):
            raise ValueError(f"put_mode must be 'auto', 'batch' or 'parallel', "
                             f"got {self.put_mode!r}")
        if self.copy_mode not in ("auto", "zero_copy", "copy"):
            raise ValueError(f"copy_mode must be 'auto', 'zero_copy' or 'copy', "
                             f"got {self.copy_mode!r}")


@dataclass
class RemoteBundleRef:
    """Reference to a stored bundle or structured object.

    ``manifest_key`` alone identifies it (pass the string to another
    process); ``manifest`` is the decoded manifest when this process wrote
    or already read it (an empty dict is fetched on first use).
    """

    manifest_key: str
    manifest: Dict[str, Any] = field(default_factory=dict)


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
            raise ValueError(f"step must be >= 1, got {step}")
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
            raise TypeError("tensor object buffer has no batch_size")
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

def _check_name(what: str, name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not name or "/" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError(f"{what} {name!r} must be non-empty, without '/' or control "
                         f"characters")
    return name


def _normalize_key_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"key_prefix must be a str, not {type(prefix).__name__}")
    p = prefix.strip("/")
    if not p or any(ord(c) < 32 or ord(c) == 127 for c in p):
        raise ValueError(f"key_prefix {prefix!r} must be non-empty without control characters")
    return p


def _ere_escape(text: str) -> str:
    """``text`` as a POSIX extended regular expression matching itself."""
    return "".join("\\" + c if c in ".[]{}()\\*+?^$|" else c for c in text)


def _chunk_bytes_arg(value: Any) -> int:
    if not _util.is_int(value) or value <= 0:
        raise ValueError(f"chunk_bytes must be an int > 0, got {value!r}")
    return int(value)


# ---- payloads to write --------------------------------------------------------------------

class _Out:
    """One payload to write: a name, its bytes source, and where it goes."""

    __slots__ = ("name", "kind", "nbytes", "array", "rows", "view", "tob", "in_place",
                 "key", "chunks", "field")

    def __init__(self, name: str, kind: str, nbytes: int) -> None:
        self.name = name
        self.kind = kind      # "array" | "rows" | "bytes" | "tensor_object"
        self.nbytes = nbytes
        self.array: Any = None    # C-contiguous ndarray (kind array)
        self.rows: List[Any] = []  # C-contiguous ndarrays (kind rows)
        self.view: Any = None     # flat uint8 memoryview (kind bytes)
        self.tob: Optional[_TensorObjectBuffer] = None
        self.in_place = False     # array written from its own registered memory
        self.key = ""
        self.chunks: List[Tuple[str, int, int]] = []  # (key, offset, size)
        self.field: Optional[Dict[str, Any]] = None  # a structured member's description

    def spec(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"key": self.key, "bytes": self.nbytes,
                             "chunks": [{"key": k, "bytes": n} for k, _, n in self.chunks]}
        if self.kind == "tensor_object":
            d["kind"] = "tensor"
        if self.field is not None:
            d["field"] = self.field
        return d

    def source_view(self) -> memoryview:
        """The payload as flat bytes (kinds array and bytes)."""
        if self.kind == "array":
            return memoryview(self.array.reshape(-1).view(np.uint8))
        return self.view


def _as_uint8(view: memoryview) -> memoryview:
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _out_of_value(name: str, value: Any) -> Tuple[_Out, Dict[str, Any]]:
    """The payload and the field description of a structured member."""
    if isinstance(value, _TensorObjectBuffer):
        o = _Out(name, "tensor_object", value.size)
        o.tob = value
        return o, {"encoding": "tensor_object"}
    if isinstance(value, np.generic):  # a numpy scalar: a 0-d array
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.dtype.fields is not None or \
                value.dtype.kind not in "biufcmM":
            raise TypeError(f"member {name!r}: dtype {value.dtype} is not a plain numeric "
                            f"dtype (object, structured and string arrays are refused)")
        arr = value if value.flags.c_contiguous else np.ascontiguousarray(value)
        o = _Out(name, "array", int(arr.nbytes))
        o.array = arr
        # in place only for the caller's own contiguous memory (not a copy we made)
        o.in_place = arr is value and arr.nbytes >= _IN_PLACE_MIN_BYTES
        return o, {"encoding": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)}
    if isinstance(value, (list, tuple)) and value and \
            all(isinstance(r, np.ndarray) for r in value):
        dt = value[0].dtype
        if any(r.dtype != dt for r in value):
            raise TypeError(f"member {name!r}: rows of different dtypes")
        if dt.hasobject or dt.kind not in "biufcmM":
            raise TypeError(f"member {name!r}: rows of dtype {dt} are not numeric")
        rows = [r if r.flags.c_contiguous else np.ascontiguousarray(r) for r in value]
        o = _Out(name, "rows", int(sum(r.nbytes for r in rows)))
        o.rows = rows
        return o, {"encoding": "ndarray_rows", "dtype": dt.str,
                   "shapes": [list(r.shape) for r in rows]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        v = memoryview(value)
        if not v.c_contiguous:
            v = memoryview(v.tobytes())
        v = _as_uint8(v)
        o = _Out(name, "bytes", v.nbytes)
        o.view = v
        return o, {"encoding": "bytes"}
    if type(value).__module__.split(".")[0] == "torch":
        raise TypeError(f"member {name!r}: torch tensors are written as tensor objects: "
                        f"pass tensor_object_buffer(...) or the tensor's .numpy()")
    raise TypeError(f"member {name!r}: unsupported value type {type(value).__name__} "
                    f"(ndarray, bytes-like, list of ndarrays or tensor_object_buffer)")


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


# ---- the facade ---------------------------------------------------------------------------

class MooncakeBundleTransfer:
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
        if not isinstance(payload.metadata, Mapping) or not isinstance(payload.buffers, Mapping):
            raise TypeError("payload metadata and buffers must be mappings")
        if STRUCTURED_FIELD_SPECS_KEY in payload.metadata:
            raise ValueError(f"metadata key {STRUCTURED_FIELD_SPECS_KEY!r} is reserved")
        outs, fields = [], {}
        for name, value in payload.buffers.items():
            o, spec = _out_of_value(_check_name("member name", name), value)
            o.field = spec
            outs.append(o)
            fields[name] = spec
        meta = dict(payload.metadata)
        meta.setdefault("layout", "structured")
        meta[STRUCTURED_FIELD_SPECS_KEY] = fields
        try:
            meta_bytes = json.dumps(meta, separators=(",", ":"), ensure_ascii=False,
                                    allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise TypeError(f"metadata is not JSON-serializable: {e}") from None
        return self._write(_bytes_out("meta", meta_bytes), outs, partition, chunk_bytes,
                           policy, max_inflight_put, config)

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
               config: Any) -> RemoteBundleRef:
        _check_name("partition", partition)
        chunk = self.default_chunk_bytes if chunk_bytes is None else _chunk_bytes_arg(chunk_bytes)
        if policy is None:
            policy = BundleTransferPolicy()
        if not isinstance(policy, BundleTransferPolicy):
            raise TypeError("policy must be a BundleTransferPolicy")
        inflight = policy.max_inflight_put if max_inflight_put is None else max_inflight_put
        if not _util.is_int(inflight) or inflight < 1:
            raise ValueError(f"max_inflight_put must be an int >= 1, got {inflight!r}")
        if config is not None and getattr(config, "group_ids", None):
            raise ValueError("config.group_ids is not supported for structured objects and "
                             "bundles (their keys are removed together by remove_bundle)")
        if policy.copy_mode == "zero_copy":
            bad = [o.name for o in outs if o.kind != "tensor_object"]
            if bad:
                raise ValueError(f"copy_mode='zero_copy' takes only tensor_object_buffer "
                                 f"members; not: {', '.join(bad)} (use copy_mode='auto')")
        object_id = f"{partition}/{uuid.uuid4().hex}"
        base = f"{self.key_prefix}/{object_id}"
        meta.key = f"{base}/meta"
        meta.chunks = self._chunks(meta.key, meta.nbytes, chunk)
        for o in outs:
            o.key = f"{base}/buffer/{o.name}"
            o.chunks = [(o.key, 0, o.nbytes)] if o.kind == "tensor_object" else \
                self._chunks(o.key, o.nbytes, chunk)
        manifest = {"version": MANIFEST_VERSION, "layout": "bundle", "object_id": object_id,
                    "meta": meta.spec(), "buffers": {o.name: o.spec() for o in outs}}
        manifest_key = f"{base}/manifest"
        written: List[str] = []
        try:
            self._put_copy(meta, config, written)
            self._put_payloads(outs, policy, inflight, config, written)
            data = json.dumps(manifest, separators=(",", ":")).encode()
            rc = self.store.put(manifest_key, data, config)
            if rc != 0:
                raise StructuredObjectWriteError(
                    f"writing the manifest {manifest_key!r} failed ({rc})", "manifest", rc)
        except BaseException:
            self._remove_quietly(written + [manifest_key])
            raise
        return RemoteBundleRef(manifest_key, manifest)

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
                    from mooncake.buffer_pool import BufferPool
                    try:
                        self._pool = BufferPool(self.store)
                    except (RuntimeError, TypeError):
                        self._pool = None  # no local buffer: store.put it is
            return self._pool

    def _fail(self, o: _Out, what: str, rc: int) -> None:
        raise StructuredObjectWriteError(f"writing {what} of {o.name!r} failed ({rc})",
                                         o.name, rc)

    def _put_copy(self, o: _Out, config: Any, written: List[str]) -> None:
        """Every chunk of ``o`` through store.put."""
        if o.kind == "tensor_object":
            view = memoryview((ctypes.c_ubyte * o.tob.size).from_address(o.tob.ptr))
        elif o.kind == "rows":
            view = memoryview(np.concatenate([r.reshape(-1).view(np.uint8) for r in o.rows]))
        else:
            view = o.source_view()
        for key, off, size in o.chunks:
            rc = self.store.put(key, view[off:off + size], config)
            if rc != 0:
                self._fail(o, f"chunk {key!r}", rc)
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
            if o.kind == "tensor_object" and not copy_all:
                self._put_tensor_object(o, config, written)
            elif copy_all or pool is None:
                self._put_copy(o, config, written)
            elif o.in_place:
                in_place.append(o)
            else:
                staged.extend((o, k, off, n) for k, off, n in o.chunks)
        if in_place:
            self._put_in_place(in_place, pool, config, written)
        if staged:
            parallel = inflight > 1 and policy.put_mode != "batch" and len(staged) > 1
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

    def _put_tensor_object(self, o: _Out, config: Any, written: List[str]) -> None:
        put_tensor_from = getattr(self.store, "put_tensor_from", None)
        if callable(put_tensor_from) and config is None:
            rc = put_tensor_from(o.key, o.tob.ptr, o.tob.size)
        else:
            put_from = getattr(self.store, "put_from", None)
            if not callable(put_from):
                self._put_copy(o, config, written)
                return
            rc = put_from(o.key, o.tob.ptr, o.tob.size, config)
        if rc != 0:
            self._fail(o, "the tensor object", rc)
        written.append(o.key)

    def _put_in_place(self, outs: List[_Out], pool: Any, config: Any,
                      written: List[str]) -> None:
        """Arrays written straight from their memory, all chunks in one
        batch_put_from; an array whose memory cannot be registered (already
        registered elsewhere, ...) is staged instead."""
        keys, ptrs, sizes, owner, regs = [], [], [], [], []
        try:
            for o in outs:
                addr = int(o.array.ctypes.data)
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
                rcs = self.store.batch_put_from(keys, ptrs, sizes, config)
                for k, o, rc in zip(keys, owner, rcs):
                    if rc == 0:
                        written.append(k)
                for k, o, rc in zip(keys, owner, rcs):
                    if rc != 0:
                        self._fail(o, f"chunk {k!r}", rc)
        finally:
            for addr in regs:
                self.store.unregister_buffer(addr)

    def _put_staged(self, pool: Any, config: Any, o: _Out, key: str, off: int,
                    size: int) -> str:
        """One chunk copied into a pool lease and written by batch_put_from,
        or by store.put when the pool has no room for it now: waiting could
        wait forever, e.g. for materialize() results the caller holds."""
        from mooncake.buffer_pool import BufferPoolExhausted

        try:
            lease = pool.acquire(size, block=False)
        except BufferPoolExhausted:
            lease = None
        if lease is None:
            if o.kind == "rows":
                chunk = np.empty(size, np.uint8)
                self._gather_rows(o.rows, off, size, int(chunk.ctypes.data))
                view = memoryview(chunk)
            else:
                view = o.source_view()[off:off + size]
            rc = self.store.put(key, view, config)
        else:
            with lease:
                if o.kind == "rows":
                    self._gather_rows(o.rows, off, size, lease.ptr)
                else:
                    ctypes.memmove(lease.ptr, _address(o.source_view()[off:off + size]), size)
                rc = self.store.batch_put_from([key], [lease.ptr], [size], config)[0]
        if rc != 0:
            self._fail(o, f"chunk {key!r}", rc)
        return key

    @staticmethod
    def _gather_rows(rows: List[Any], off: int, size: int, dst: int) -> None:
        """Bytes [off, off + size) of the rows laid back to back, to ``dst``."""
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
        _check_name("partition", partition)
        regex = "^" + _ere_escape(f"{self.key_prefix}/{partition}/")
        with self._lock:
            self._meta_cache.clear()
            self._validated.clear()
        return self.store.remove_by_regex(regex, force)

    # ---- reading ------------------------------------------------------------------------

    def _resolve(self, ref: Any) -> Tuple[str, Dict[str, Any]]:
        """(manifest key, validated manifest) of a reference."""
        if isinstance(ref, RemoteBundleRef):
            key, manifest = ref.manifest_key, ref.manifest
        elif isinstance(ref, Mapping):
            key, manifest = ref.get("manifest_key"), ref.get("manifest") or {}
        elif isinstance(ref, str):
            key, manifest = ref, {}
        else:
            raise TypeError(f"ref must be a RemoteBundleRef, a mapping with 'manifest_key' "
                            f"or a manifest key, not {type(ref).__name__}")
        if not isinstance(key, str) or not key:
            raise TypeError("ref has no manifest_key")
        if not manifest:
            data = self.store.get(key)
            if not data:
                raise StructuredObjectReadError(f"no manifest at {key!r} (removed, evicted, "
                                                f"or never written)")
            try:
                manifest = json.loads(bytes(data).decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise StructuredManifestError(
                    f"{key!r} does not hold a bundle manifest (not UTF-8 JSON)") from None
        with self._lock:
            known = self._validated.get(key) is manifest
        if not known:
            _validate_manifest(key, manifest)
            with self._lock:
                self._validated[key] = manifest
                while len(self._validated) > _META_CACHE_SIZE:
                    self._validated.popitem(last=False)
        return key, manifest

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        """A read of the whole object (narrow it with select_members /
        slice_member).  The manifest is fetched and checked here."""
        key, manifest = self._resolve(ref)
        return StructuredObjectReadSpec(RemoteBundleRef(key, manifest))

    def _meta(self, manifest: Dict[str, Any]) -> bytes:
        spec = manifest["meta"]
        parts = []
        for c in spec["chunks"]:
            data = self.store.get(c["key"])
            if len(data) != c["bytes"]:
                raise StructuredObjectReadError(f"metadata chunk {c['key']!r} is missing or "
                                                f"has {len(data)} bytes, not {c['bytes']}")
            parts.append(data)
        return b"".join(parts)

    def _fields(self, key: str, manifest: Dict[str, Any]) -> Tuple[Dict[str, Any],
                                                                   Dict[str, Any], bytes]:
        """(user metadata, field specs, raw meta) of a manifest; a raw
        bundle's members all read as bytes and its metadata is {}."""
        with self._lock:
            hit = self._meta_cache.get(key)
            if hit is not None:
                self._meta_cache.move_to_end(key)
                return copy.deepcopy(hit[0]), hit[1], hit[2]
        got = self._decode_meta(key, manifest, self._meta(manifest))
        self._cache_meta(key, got)
        return copy.deepcopy(got[0]), got[1], got[2]

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
            kinds = {n: {"encoding": "tensor_object" if s.get("kind") == "tensor" else "bytes"}
                     for n, s in manifest["buffers"].items()}
            return {}, kinds, raw
        fields = meta.pop(STRUCTURED_FIELD_SPECS_KEY)
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
        arrays, byte members as bytes, ragged rows as lists of arrays,
        tensor objects as torch tensors."""
        return self.materialize_into(spec, None)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        """Like :meth:`materialize`, but ndarray members named in
        ``destinations`` are read straight into those arrays, which the
        result then holds (``result.objects[name] is destinations[name]``);
        other members are materialized as new objects.

        Raises:
            ValueError: a destination for a member that is not selected,
                for a byte or row member, or whose dtype/shape differs from
                the member (slice applied), or that is not a writable
                C-contiguous ndarray; a bad slice.
            StructuredObjectReadError: a payload is missing or short.
        """
        if not isinstance(spec, StructuredObjectReadSpec):
            raise TypeError(f"spec must be a StructuredObjectReadSpec (from read_spec), "
                            f"not {type(spec).__name__}")
        if destinations is not None and not isinstance(destinations, Mapping):
            raise TypeError("destinations must be a mapping of member name to ndarray")
        key, manifest = self._resolve(spec.ref)
        with self._lock:
            hit = self._meta_cache.get(key)
        pending = None
        if hit is not None:
            meta, fields = copy.deepcopy(hit[0]), hit[1]
        else:
            fields = _manifest_fields(key, manifest)
            if fields is None:  # a raw bundle, or written without copies in the manifest
                meta, fields, _ = self._fields(key, manifest)
            else:  # the metadata travels with the members, in the same read
                pending = _Plan("meta", {"encoding": "bytes"}, manifest["meta"], None)
                pending.internal = True
        names = list(manifest["buffers"]) if spec.member_names is None else \
            list(spec.member_names)
        for n in names:
            if n not in manifest["buffers"]:
                raise ValueError(f"no member {n!r}; the members are "
                                 f"{sorted(manifest['buffers'])}")
        slices = dict(spec.member_slices)
        for n in slices:
            if n not in names:
                raise ValueError(f"slice of member {n!r}, which is not selected")
        dests = dict(destinations or {})
        for n in dests:
            if n not in names:
                raise ValueError(f"destination for member {n!r}, which is not selected")
        plans = [_Plan(n, fields[n], manifest["buffers"][n], slices.get(n)) for n in names]
        self._read(plans + ([pending] if pending is not None else []), dests)
        if pending is not None:
            raw = pending.result()
            meta, stored, _ = self._decode_meta(key, manifest, raw)
            if stored != fields:
                raise _bad(key, "the member descriptions in the manifest and in the "
                                "metadata differ")
            self._cache_meta(key, (meta, stored, raw))
            meta = copy.deepcopy(meta)
        return StructuredObjectResult(meta, {p.name: p.result() for p in plans[:len(names)]})

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
    return StructuredManifestError(f"manifest {key!r} rejected: {why}")


def _is_count(v: Any) -> bool:
    return _util.is_int(v) and v >= 0


def _validate_payload(key: str, what: str, spec: Any, base: str) -> None:
    if not isinstance(spec, dict):
        raise _bad(key, f"{what} is not an object")
    pkey, nbytes, chunks = spec.get("key"), spec.get("bytes"), spec.get("chunks")
    if not isinstance(pkey, str) or not pkey.startswith(base + "/"):
        raise _bad(key, f"{what} key {pkey!r} is not under {base + '/'!r}")
    if not _is_count(nbytes) or not isinstance(chunks, list):
        raise _bad(key, f"{what} needs 'bytes' (a count) and 'chunks' (a list)")
    if nbytes == 0 and chunks:
        raise _bad(key, f"{what} has 0 bytes but chunks")
    seen, total = set(), 0
    for c in chunks:
        if not isinstance(c, dict) or not isinstance(c.get("key"), str) or \
                not _is_count(c.get("bytes")) or c["bytes"] == 0:
            raise _bad(key, f"{what} has a malformed chunk {c!r}")
        ck = c["key"]
        if ck in seen or not (ck == pkey if len(chunks) == 1 else
                              ck.startswith(pkey + "/chunk/")):
            raise _bad(key, f"{what} chunk key {ck!r} is repeated or not under {pkey!r}")
        seen.add(ck)
        total += c["bytes"]
    if total != nbytes:
        raise _bad(key, f"{what} chunks hold {total} bytes, not {nbytes}")
    if spec.get("kind", "tensor") != "tensor":
        raise _bad(key, f"{what} has unknown kind {spec.get('kind')!r}")


def _validate_manifest(key: str, m: Any) -> None:
    if not isinstance(m, dict):
        raise _bad(key, "not a JSON object")
    v = m.get("version")
    if not _util.is_int(v):
        raise _bad(key, "no integer 'version' (not a bundle manifest)")
    if v != MANIFEST_VERSION:
        raise _bad(key, f"version {v} is not supported (this reader knows version "
                        f"{MANIFEST_VERSION})")
    if m.get("layout") != "bundle":
        raise _bad(key, f"layout {m.get('layout')!r} is not 'bundle'")
    if not key.endswith("/manifest"):
        raise _bad(key, "a manifest key ends with '/manifest'")
    base = key[:-len("/manifest")]
    oid = m.get("object_id")
    if not isinstance(oid, str) or not base.endswith("/" + oid):
        raise _bad(key, f"object_id {oid!r} does not match the manifest key")
    _validate_payload(key, "meta", m.get("meta"), base)
    bufs = m.get("buffers")
    if not isinstance(bufs, dict):
        raise _bad(key, "'buffers' is not an object")
    for name, spec in bufs.items():
        _validate_payload(key, f"buffer {name!r}", spec, base)
    if any("field" in spec for spec in bufs.values()):
        if _manifest_fields(key, m) is None:
            raise _bad(key, "some buffers have member descriptions and some do not")


def _manifest_fields(key: str, manifest: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The member descriptions a manifest carries (validated), or None
    when one of its buffers has none."""
    fields = {}
    for name, spec in manifest["buffers"].items():
        f = spec.get("field")
        if f is None:
            return None
        fields[name] = f
    _validate_fields(key, manifest, fields)
    return fields


def _validate_fields(key: str, manifest: Dict[str, Any], fields: Any) -> None:
    if not isinstance(fields, dict) or set(fields) != set(manifest["buffers"]):
        raise _bad(key, "the member descriptions do not match the manifest's buffers")
    for name, f in fields.items():
        nbytes = manifest["buffers"][name]["bytes"]
        enc = f.get("encoding") if isinstance(f, dict) else None
        if enc not in _ENCODINGS:
            raise _bad(key, f"member {name!r} has unknown encoding {enc!r}")
        if enc in ("ndarray", "ndarray_rows"):
            try:
                dt = np.dtype(f["dtype"])
            except (KeyError, TypeError, ValueError):
                raise _bad(key, f"member {name!r} has a bad dtype") from None
            if dt.hasobject or dt.kind not in "biufcmM":
                raise _bad(key, f"member {name!r} has non-numeric dtype {dt}")
            shapes = [f.get("shape")] if enc == "ndarray" else f.get("shapes")
            if not isinstance(shapes, list) or not all(
                    isinstance(s, list) and all(_is_count(d) for d in s) for s in shapes):
                raise _bad(key, f"member {name!r} has a bad shape")
            want = sum(math.prod(s) for s in shapes) * dt.itemsize
            if want != nbytes:
                raise _bad(key, f"member {name!r}: shape and dtype make {want} bytes, the "
                                f"payload has {nbytes}")


# ---- one member's read ----------------------------------------------------------------

class _Plan:
    """Where one member's bytes come from and where they go."""

    def __init__(self, name: str, fspec: Dict[str, Any], pspec: Dict[str, Any],
                 sl: Optional[StructuredMemberSlice]) -> None:
        self.name, self.fspec, self.pspec, self.sl = name, fspec, pspec, sl
        self.enc = fspec["encoding"]
        self.tensor = self.enc == "tensor_object"
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
        if sl is not None and self.enc not in ("ndarray", "ndarray_rows"):
            raise ValueError(f"member {name!r} is {self.enc}: only ndarray and row members "
                             f"can be sliced (byte members are read whole)")

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
                raise ValueError(f"member {self.name!r} holds bytes: materialize_into takes "
                                 f"destinations for ndarray members only; use materialize()")
            self._alloc_flat(self.nbytes_to_read)
            self.post = lambda buf: bytes(buf)
            return
        dt = np.dtype(self.fspec["dtype"])
        if self.enc == "ndarray_rows":
            if dest is not None:
                raise ValueError(f"member {self.name!r} is a list of rows: materialize_into "
                                 f"takes destinations for ndarray members only")
            self._prepare_rows(dt)
            return
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

    def _prepare_rows(self, dt: np.dtype) -> None:
        shapes = [tuple(s) for s in self.fspec["shapes"]]
        sizes = [math.prod(s) * dt.itemsize for s in shapes]
        first = 0
        if self.sl is not None:
            if self.sl.axis != 0:
                raise ValueError(f"member {self.name!r} is a list of rows: slices are along "
                                 f"axis 0 (the rows)")
            start, end, step = self._rows(len(shapes))
            first = sum(sizes[:start])
            shapes, sizes = shapes[start:end], sizes[start:end]
            self.partial = True
            self.byte_offset = first
            self.nbytes_to_read = sum(sizes)
        else:
            step = 1
        self._alloc_flat(self.nbytes_to_read)

        def split(buf: Any) -> List[Any]:
            flat = np.frombuffer(buf, np.uint8)
            out, pos = [], 0
            for s, n in zip(shapes, sizes):
                out.append(flat[pos:pos + n].view(dt).reshape(s))
                pos += n
            return out[::step]
        self.post = split

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
        if self.sl is not None:
            raise ValueError(f"member {self.name!r} is a tensor object: read whole")
        if dest is not None and not isinstance(dest, _TensorObjectBuffer):
            raise ValueError(f"destination of tensor object member {self.name!r} must be a "
                             f"tensor_object_buffer")
        self.out = dest

    def read_tensor(self, store: Any) -> None:
        key = self.pspec["key"]
        if self.out is not None:
            t = store.get_tensor_into(key, self.out.ptr, self.out.size)
        else:
            t = store.get_tensor(key)
        if t is None:
            raise StructuredObjectReadError(f"reading tensor object {key!r} of member "
                                            f"{self.name!r} failed")
        self.out = t if self.out is None else self.out
        self.post = None
        self.buffer = t

    def result(self) -> Any:
        if self.tensor:
            return self.buffer
        if self.post is not None:
            return self.post(self.buffer)
        return self.out


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

# SPDX-License-Identifier: Apache-2.0
"""The PyTorch tensor methods of :class:`mooncake.store.MooncakeDistributedStore`.

A tensor object is the upstream 304-byte header followed by the tensor's
bytes (``mooncake/tensor.h``, ``docs/tensor.md``); libmooncake encodes,
checks and splits it, and moves the bytes.  This module only turns torch
tensors into (dtype code, shape, address) records and decoded headers back
into tensors, so C, Lua and Python read and write the same objects.

torch is imported on first use: ``import mooncake.store`` works without it,
and a tensor method then raises :class:`ImportError` naming the package.

Conventions, as upstream:

* writes return ``0`` or a negative :class:`~mooncake.store.ErrorCode`
  (``INVALID_PARAMS`` for a dtype with no code, more than 8 dimensions, a
  bad split or a malformed buffer, and nothing of that tensor is stored);
  batch writes return one status per key, in order;
* reads return a tensor or ``None`` (missing key, malformed object, buffer
  too small or not registered); batch reads return one entry per key;
* ``*_with_tp`` with ``tp_size > 1`` stores shard ``r`` of the tensor split
  along ``split_dim`` under ``f"{key}_tp_{r}"`` (shard ``r`` holds indices
  ``[D*r//tp_size, D*(r+1)//tp_size)`` of that dimension), and the reads
  fetch the shard of ``tp_rank``; ``tp_size <= 1`` is the plain call on
  ``key`` itself;
* a tensor returned by a ``get_*`` call owns its memory (a bytearray it
  keeps alive); one returned by a ``*_into`` call views the caller's buffer
  (no copy), which must outlive it.

May import: the native binding, _errors and _util (the low layer), torch on
first use; never store, which builds on it.
"""

import ctypes
import json
import logging
import os
import struct
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # annotations only: torch is imported on first use
    import torch

from mooncake import capi as _capi
from mooncake import _util
from mooncake._errors import ErrorCode

_INVALID = int(ErrorCode.INVALID_PARAMS)
_HEADER = _capi.MC_TENSOR_HEADER_SIZE
_MAX_DIMS = _capi.MC_TENSOR_MAX_DIMS
# A record the native layer refuses (ndim out of range): the key reports
# INVALID_PARAMS in its slot while the others of the batch are written.
_BAD_REC = [0, _MAX_DIMS + 1] + [0] * (_MAX_DIMS + 1)
_PAD = [0] * _MAX_DIMS
_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1

# torch's dtype names and their tensor codes (upstream TensorDtype).
_CODE_OF_NAME = {
    "float32": _capi.MC_TENSOR_FLOAT32,
    "float64": _capi.MC_TENSOR_FLOAT64,
    "int8": _capi.MC_TENSOR_INT8,
    "uint8": _capi.MC_TENSOR_UINT8,
    "int16": _capi.MC_TENSOR_INT16,
    "uint16": _capi.MC_TENSOR_UINT16,
    "int32": _capi.MC_TENSOR_INT32,
    "uint32": _capi.MC_TENSOR_UINT32,
    "int64": _capi.MC_TENSOR_INT64,
    "uint64": _capi.MC_TENSOR_UINT64,
    "bool": _capi.MC_TENSOR_BOOL,
    "float16": _capi.MC_TENSOR_FLOAT16,
    "bfloat16": _capi.MC_TENSOR_BFLOAT16,
    "float8_e4m3fn": _capi.MC_TENSOR_FLOAT8_E4M3,
    "float8_e5m2": _capi.MC_TENSOR_FLOAT8_E5M2,
}

# The store's logger: the safetensors helpers log there, as upstream's.
_log = logging.getLogger("mooncake.store")

# torch's dtype names and their safetensors names (the format's "dtype").
_SAFETENSORS_NAME = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "bool": "BOOL", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}
# A header longer than this is not a safetensors file we would write or
# read (the format's own readers cap it at 100 MB).
_SAFETENSORS_HEADER_MAX = 100 << 20

_torch: Any = None
_from_dlpack: Any = None  # torch's DLPack import (capsule -> tensor, no copy)
_code_of: dict = {}      # torch.dtype -> code
_dtype_of: dict = {}     # code -> torch.dtype (only those this torch has)
_size_of: dict = {}      # code -> bytes per element


def torch_module() -> Any:
    """torch, imported once; ImportError naming the package when missing."""
    global _torch, _from_dlpack
    if _torch is None:
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                "the tensor methods of mooncake.store need PyTorch; install it "
                "(Debian: apt-get install python3-torch)") from e
        for name, code in _CODE_OF_NAME.items():
            dt = getattr(torch, name, None)
            if isinstance(dt, torch.dtype):
                _code_of[dt] = code
                _dtype_of[code] = dt
                _size_of[code] = torch.empty((), dtype=dt).element_size()
        import torch.utils.dlpack
        _from_dlpack = getattr(torch._C, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack
        _torch = torch
    return _torch


def _record(torch: Any, tensor: Any, keep: list) -> list:
    """The native record of ``tensor`` (dtype code, ndim, shape[8], address
    of its contiguous CPU bytes); ``_BAD_REC`` when it cannot be stored.
    The tensor whose memory the record names goes to ``keep``.  This runs
    once per tensor written, so it asks torch as little as it can."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, not {type(tensor).__name__}")
    code = _code_of.get(tensor.dtype)
    shape = tensor.shape
    ndim = len(shape)
    if code is None or ndim > _MAX_DIMS:
        return _BAD_REC
    try:  # sparse, meta or quantized tensors raise here
        if not (tensor.is_cpu and tensor.is_contiguous()) or tensor.is_neg():
            tensor = tensor.cpu().resolve_neg().contiguous()
        ptr = tensor.data_ptr()
    except (RuntimeError, NotImplementedError, ValueError):
        return _BAD_REC
    keep.append(tensor)
    return [code, ndim, *shape, *_PAD[ndim:], ptr]


def _from_record(torch: Any, buf: Any, rec: Sequence[int]) -> Any:
    """The tensor a decoded record describes, viewing ``buf`` (an object
    with the buffer protocol holding the whole serialized object); None
    for a failed read or a dtype this torch does not have."""
    if rec[0] < 0:
        return None
    dt = _dtype_of.get(rec[1])
    if dt is None:
        return None
    ndim, off, nbytes = rec[2], rec[3], rec[4]
    shape = tuple(rec[5:5 + ndim])
    if nbytes == 0:
        return torch.empty(shape, dtype=dt)
    t = torch.frombuffer(buf, dtype=dt, count=nbytes // _size_of[rec[1]], offset=off)
    return t if ndim == 1 else t.view(shape)


def _view_at(torch: Any, ptr: int, item: Any) -> Any:
    """The tensor of a read into the caller's memory at ``ptr``: ``item``
    is a DLPack capsule, or the record of a failed read or of a tensor
    DLPack cannot carry (bool, float8, empty)."""
    if type(item) is not list:
        return _from_dlpack(item)
    if item[0] < 0:
        return None
    return _from_record(torch, (ctypes.c_ubyte * item[0]).from_address(ptr), item)


def _wrapped(torch: Any, raw: bytearray) -> Any:
    """The tensor in a bytearray holding a whole serialized object."""
    item = _capi.tensor_wrap(raw)
    return _from_dlpack(item) if type(item) is not list else _from_record(torch, raw, item)


def _shard_key(key: str, tp_rank: int, tp_size: int) -> str:
    return key if tp_size <= 1 else f"{key}_tp_{tp_rank}"


def _tp_args(tp_rank: Any, tp_size: Any, split_dim: Any) -> bool:
    """TypeError unless ints; False when one does not fit the native call
    (the call then reports INVALID_PARAMS)."""
    for name, v in (("tp_rank", tp_rank), ("tp_size", tp_size), ("split_dim", split_dim)):
        if not _util.is_int(v):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    return all(_I32_MIN <= v <= _I32_MAX for v in (tp_rank, tp_size, split_dim))


def _tensor_list(name: str, value: Any) -> list:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of tensors, not {type(value).__name__}")
    return list(value)


def _addr(name: str, value: Any) -> Optional[int]:
    """An address or size: TypeError unless an int; None outside [0, 2**64-1]."""
    if not _util.is_int(value):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return int(value) if 0 <= value <= _util.U64_MAX else None


def _same_lengths(keys: Any, buffer_ptrs: Any, sizes: Any) -> bool:
    """Type checks of a batch of registered buffers (TypeError); False when
    the lists differ in length."""
    _util.check_key_list("keys", keys)
    for name, v in (("buffer_ptrs", buffer_ptrs), ("sizes", sizes)):
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"{name} must be a list of int, not {type(v).__name__}")
    return len(buffer_ptrs) == len(keys) and len(sizes) == len(keys)


def _addr_lists(buffer_ptrs: Any, sizes: Any) -> Tuple[list, list]:
    """Checked (ptrs, sizes) of a batch whose lists have the same length:
    TypeError for a non-int; an address outside [0, 2**64-1] becomes 0,
    which the native call refuses for its key alone.  The native calls
    take the lists as they are and raise OverflowError for such an
    address, which is when this slower pass runs."""
    ps, ss = [], []
    for p, s in zip(buffer_ptrs, sizes):
        p, s = _addr("buffer_ptrs item", p), _addr("sizes item", s)
        ok = p is not None and s is not None
        ps.append(p if ok else 0)
        ss.append(s if ok else 0)
    return ps, ss


# ---- safetensors files ------------------------------------------------------------------
#
# The format (https://github.com/huggingface/safetensors, "Format"): an
# unsigned 64-bit little-endian header length N, N bytes of UTF-8 JSON
# {name: {"dtype", "shape", "data_offsets": [begin, end]}} (optionally
# "__metadata__", which these helpers never write), padded with spaces to
# a multiple of 8, then the tensors' bytes, row-major and little-endian,
# at [begin, end) of the data that follows the header.
#
# This lives here, in Python, rather than in libmooncake's tensor codec:
# the helpers move torch tensors between files and the store, the C
# library has no file or JSON side to its tensor code, and the store
# object of upstream's 304-byte header is what C and Lua share -- that
# stays the C codec's job.  When Debian's python3-safetensors is present
# its safetensors.torch does the work, so the files and the errors are
# the format's reference implementation's.


def _safetensors_torch() -> Any:
    """safetensors.torch, or None when it is not installed."""
    try:
        import safetensors.torch as st  # noqa: F401
    except ImportError:
        return None
    return st


def _tensor_bytes(torch: Any, t: Any) -> bytes:
    """The row-major little-endian bytes of CPU tensor ``t``."""
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def safetensors_write(path: str, tensors: Dict[str, Any]) -> None:
    """Write ``{name: tensor}`` to ``path`` as a safetensors file (no
    ``__metadata__``).  Raises ValueError for a dtype the format has no
    name for, OSError when the file cannot be written."""
    torch = torch_module()
    if sys.byteorder != "little":
        raise ValueError("safetensors files are little-endian; this host is not")
    header: Dict[str, Any] = {}
    blobs: List[bytes] = []
    offset = 0
    for name, t in tensors.items():
        dt = _SAFETENSORS_NAME.get(str(t.dtype).replace("torch.", ""))
        if dt is None:
            raise ValueError(f"safetensors has no dtype for {t.dtype}")
        t = t.detach().cpu().resolve_neg().resolve_conj().contiguous()
        data = _tensor_bytes(torch, t)
        header[name] = {"dtype": dt, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for b in blobs:
                f.write(b)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def safetensors_read(path: str) -> Dict[str, Any]:
    """The tensors of safetensors file ``path`` as ``{name: CPU tensor}``,
    names in sorted order (as safetensors' own ``load_file``).  Raises
    OSError when it cannot be read, ValueError when it is not a valid
    safetensors file (or holds a dtype this torch lacks)."""
    torch = torch_module()
    dtypes = {v: getattr(torch, k) for k, v in _SAFETENSORS_NAME.items() if hasattr(torch, k)}
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack_from("<Q", raw, 0)
    if n > min(_SAFETENSORS_HEADER_MAX, len(raw) - 8):
        raise ValueError(f"{path}: header length {n} does not fit the file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    data = memoryview(raw)[8 + n:]
    out: Dict[str, Any] = {}
    for name in sorted(k for k in header if k != "__metadata__"):
        e = header[name]
        dt = dtypes.get(e.get("dtype")) if isinstance(e, dict) else None
        shape, offs = (e.get("shape"), e.get("data_offsets")) if dt is not None else (0, 0)
        if dt is None or not isinstance(shape, list) or not isinstance(offs, list) or \
                len(offs) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                          and v >= 0 for v in shape + offs):
            raise ValueError(f"{path}: tensor {name!r} is not described right")
        begin, end = offs
        numel = 1
        for d in shape:
            numel *= d
        size = numel * torch.empty((), dtype=dt).element_size()
        if not begin <= end <= len(data) or end - begin != size:
            raise ValueError(f"{path}: tensor {name!r} has {end - begin} bytes, "
                             f"its shape needs {size}")
        if size == 0:
            out[name] = torch.empty(shape, dtype=dt)
        else:
            out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dt).reshape(shape)
    return out


class _Required:
    """The default of a parameter that must be given (after one that has a
    default, as upstream's signature)."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


class TensorMethods:
    """The tensor family of the store client (mixed into
    :class:`~mooncake.store.MooncakeDistributedStore`, which provides
    ``_store`` and ``_c_config``)."""

    _store: Any

    @staticmethod
    def _c_config(config: Any) -> Any:  # provided by the store class
        raise NotImplementedError

    # ---- writes from torch tensors ------------------------------------------------

    def _write_tensors(self, keys: Any, tensors: Any, config: Any, upsert: bool,
                       tp_size: int = 1, split_dim: int = 0) -> List[int]:
        torch = torch_module()
        _util.check_key_list("keys", keys)
        tensors = _tensor_list("tensors_list", tensors)
        cfg = self._c_config(config)
        if len(tensors) != len(keys):
            return [_INVALID] * len(keys)
        if not keys:
            return []
        keep: list = []  # the tensors whose memory the records name, alive until written
        recs: list = []
        for t in tensors:
            recs += _record(torch, t, keep)
        # the native call checks the keys (TypeError, ValueError for a NUL)
        return self._store.tensor_put(int(upsert), keys, recs, tp_size, split_dim, cfg)

    def _write_tp(self, keys: Any, tensors: Any, config: Any, tp_rank: Any, tp_size: Any,
                  split_dim: Any) -> List[int]:
        if not _tp_args(tp_rank, tp_size, split_dim):
            _util.check_key_list("keys", keys)
            return [_INVALID] * len(keys)
        return self._write_tensors(keys, tensors, config, False, tp_size, split_dim)

    def put_tensor(self, key: str, tensor: "torch.Tensor") -> int:
        """Store a torch tensor under ``key`` (header + its bytes, contiguous,
        from CPU memory).  An existing key keeps its value and reports 0.

        Returns:
            0, or a negative :class:`ErrorCode`: ``INVALID_PARAMS`` for a
            dtype with no tensor code or more than 8 dimensions.
        """
        return self._write_tensors([key], [tensor], None, False)[0]

    def pub_tensor(self, key: str, tensor: "torch.Tensor", config: Any = None) -> int:
        """:meth:`put_tensor` with a :class:`ReplicateConfig` (replicas,
        pins, preferred segment, groups, ``prefer_alloc_in_same_node``)."""
        return self._write_tensors([key], [tensor], config, False)[0]

    def upsert_tensor(self, key: str, tensor: "torch.Tensor") -> int:
        """Insert the tensor, or replace the object under ``key`` (in place
        when the serialized size is unchanged).  0 or a negative ErrorCode."""
        return self._write_tensors([key], [tensor], None, True)[0]

    def upsert_pub_tensor(self, key: str, tensor: "torch.Tensor", config: Any = None) -> int:
        """:meth:`upsert_tensor` with a :class:`ReplicateConfig`."""
        return self._write_tensors([key], [tensor], config, True)[0]

    def batch_put_tensor(self, keys: Sequence[str],
                         tensors_list: Sequence["torch.Tensor"]) -> List[int]:
        """:meth:`put_tensor` of ``tensors_list[i]`` under ``keys[i]`` in one
        batch; one status per key (``len(keys)`` times ``INVALID_PARAMS``
        when the lists differ in length)."""
        return self._write_tensors(keys, tensors_list, None, False)

    def batch_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence["torch.Tensor"],
                         config: Any = None) -> List[int]:
        """:meth:`batch_put_tensor` with a :class:`ReplicateConfig`."""
        return self._write_tensors(keys, tensors_list, config, False)

    def batch_upsert_tensor(self, keys: Sequence[str],
                            tensors_list: Sequence["torch.Tensor"]) -> List[int]:
        """:meth:`upsert_tensor` for several keys; one status per key."""
        return self._write_tensors(keys, tensors_list, None, True)

    def batch_upsert_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence["torch.Tensor"],
                                config: Any = None) -> List[int]:
        """:meth:`batch_upsert_tensor` with a :class:`ReplicateConfig`."""
        return self._write_tensors(keys, tensors_list, config, True)

    def put_tensor_with_tp(self, key: str, tensor: "torch.Tensor", tp_rank: int = 0,
                           tp_size: int = 1, split_dim: int = 0) -> int:
        """Split ``tensor`` along ``split_dim`` into ``tp_size`` shards and
        store shard ``r`` under ``f"{key}_tp_{r}"`` for every ``r``
        (``tp_rank`` does not select one; ``tp_size <= 1`` is
        :meth:`put_tensor`).  Shards may be uneven: shard ``r`` holds
        indices ``[D*r//tp_size, D*(r+1)//tp_size)``.  Each shard's header
        records the global shape and its rank, count and split dimension.

        Returns:
            0, or the first failing shard's ErrorCode in rank order
            (``INVALID_PARAMS`` and nothing stored for a scalar or a
            ``split_dim`` outside ``[-ndim, ndim)``).
        """
        return self._write_tp([key], [tensor], None, tp_rank, tp_size, split_dim)[0]

    def pub_tensor_with_tp(self, key: str, tensor: "torch.Tensor", config: Any = None,
                           tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0) -> int:
        """:meth:`put_tensor_with_tp` with a :class:`ReplicateConfig` for
        every shard."""
        return self._write_tp([key], [tensor], config, tp_rank, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp(self, base_keys: Sequence[str],
                                 tensors_list: Sequence["torch.Tensor"],
                                 tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        """:meth:`put_tensor_with_tp` for several tensors in one batch; one
        status per base key."""
        return self._write_tp(base_keys, tensors_list, None, tp_rank, tp_size, split_dim)

    def batch_pub_tensor_with_tp(self, base_keys: Sequence[str],
                                 tensors_list: Sequence["torch.Tensor"],
                                 config: Any = None, tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        """:meth:`batch_put_tensor_with_tp` with a :class:`ReplicateConfig`."""
        return self._write_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim)

    # ---- writes from serialized tensors in registered memory --------------------------

    def _write_from(self, keys: Any, buffer_ptrs: Any, sizes: Any, upsert: bool,
                    tp_size: Any = 1, split_dim: Any = 0, tp_rank: Any = 0) -> List[int]:
        if not _same_lengths(keys, buffer_ptrs, sizes) or \
                not _tp_args(tp_rank, tp_size, split_dim):
            return [_INVALID] * len(keys)
        if not keys:
            return []
        try:
            return self._store.tensor_put_from(int(upsert), keys, buffer_ptrs, sizes,
                                               tp_size, split_dim)
        except OverflowError:
            ps, ss = _addr_lists(buffer_ptrs, sizes)
            return self._store.tensor_put_from(int(upsert), keys, ps, ss, tp_size, split_dim)

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """Store the serialized tensor (header + data, as
        :meth:`get_tensor_into` leaves it) of exactly ``size`` bytes at
        ``buffer_ptr``, which must be registered memory; the bytes move
        straight from there.

        Returns:
            0, or ``INVALID_PARAMS`` for unregistered memory or a buffer
            that is not a valid tensor object of ``size`` bytes, ...
        """
        return self._write_from([key], [buffer_ptr], [size], False)[0]

    def batch_put_tensor_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int]) -> List[int]:
        """:meth:`put_tensor_from` for several buffers; one status per key
        (a bad buffer fails its key alone)."""
        return self._write_from(keys, buffer_ptrs, sizes, False)

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """:meth:`put_tensor_from` that replaces an existing object."""
        return self._write_from([key], [buffer_ptr], [size], True)[0]

    def batch_upsert_tensor_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                 sizes: Sequence[int]) -> List[int]:
        """:meth:`upsert_tensor_from` for several buffers; one status per key."""
        return self._write_from(keys, buffer_ptrs, sizes, True)

    def put_tensor_with_tp_from(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> int:
        """Split the whole serialized tensor at ``buffer_ptr`` (registered
        memory) into ``tp_size`` shards as :meth:`put_tensor_with_tp` does,
        writing each shard's bytes straight from the buffer.  ``tp_rank``
        is accepted for signature compatibility; ``tp_size <= 1`` is
        :meth:`put_tensor_from`."""
        return self._write_from([key], [buffer_ptr], [size], False, tp_size, split_dim,
                                tp_rank)[0]

    def batch_put_tensor_with_tp_from(self, base_keys: Sequence[str],
                                      buffer_ptrs: Sequence[int], sizes: Sequence[int],
                                      tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0) -> List[int]:
        """:meth:`put_tensor_with_tp_from` for several buffers; one status
        per base key."""
        return self._write_from(base_keys, buffer_ptrs, sizes, False, tp_size, split_dim,
                                tp_rank)

    # ---- reads --------------------------------------------------------------------

    def get_tensor(self, key: str) -> Optional["torch.Tensor"]:
        """The tensor stored under ``key`` (CPU, owning its memory), or None
        when the key is missing or the object is not a valid tensor object.
        Grants a read lease."""
        _util.check_key(key)
        torch = torch_module()
        raw = self._store.get(key, 1)
        return _wrapped(torch, raw) if raw else None

    def batch_get_tensor(self, keys: Sequence[str]) -> List[Optional["torch.Tensor"]]:
        """:meth:`get_tensor` for several keys (one master round trip); None
        in the slots of missing keys."""
        _util.check_key_list("keys", keys)
        torch = torch_module()
        if not keys:
            return []
        return [_wrapped(torch, raw) if raw else None for raw in self._store.get_batch(keys, 1)]

    def get_tensor_with_tp(self, key: str, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> Optional["torch.Tensor"]:
        """The shard of ``tp_rank`` (``f"{key}_tp_{tp_rank}"``) of a tensor
        written with ``tp_size`` shards; :meth:`get_tensor` of ``key`` when
        ``tp_size <= 1``.  ``split_dim`` is accepted for signature
        compatibility (the header records it).  None for a miss."""
        _util.check_key(key)
        _tp_args(tp_rank, tp_size, split_dim)
        return self.get_tensor(_shard_key(key, tp_rank, tp_size))

    def batch_get_tensor_with_tp(self, base_keys: Sequence[str], tp_rank: int = 0,
                                 tp_size: int = 1) -> List[Optional["torch.Tensor"]]:
        """:meth:`get_tensor_with_tp` for several base keys."""
        _util.check_key_list("base_keys", base_keys)
        _tp_args(tp_rank, tp_size, 0)
        return self.batch_get_tensor([_shard_key(_util.check_key(k), tp_rank, tp_size)
                                      for k in base_keys])

    def _read_into(self, keys: Any, buffer_ptrs: Any, sizes: Any) -> List[Any]:
        torch = torch_module()
        if not _same_lengths(keys, buffer_ptrs, sizes):
            return [_INVALID] * len(keys)
        if not keys:
            return []
        try:
            items = self._store.tensor_get_into(keys, buffer_ptrs, sizes)
        except OverflowError:
            buffer_ptrs, sizes = _addr_lists(buffer_ptrs, sizes)
            items = self._store.tensor_get_into(keys, buffer_ptrs, sizes)
        return [_view_at(torch, p, item) for p, item in zip(buffer_ptrs, items)]

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Optional["torch.Tensor"]:
        """Read the tensor object ``key`` into the registered buffer of
        ``size`` bytes at ``buffer_ptr`` and return a tensor viewing its
        data there (no copy: ``t.data_ptr()`` is ``buffer_ptr`` plus the
        header size).  The buffer then holds exactly what
        :meth:`put_tensor_from` takes.  None for a miss, a buffer too small
        or not registered, or an object that is not a tensor."""
        r = self._read_into([key], [buffer_ptr], [size])[0]
        return None if isinstance(r, int) else r

    def batch_get_tensor_into(self, base_keys: Sequence[str], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int]) -> List[Any]:
        """:meth:`get_tensor_into` for several keys, one buffer each (one
        master round trip, one concurrent transfer); None in the slots
        that failed, and as upstream ``len(base_keys)`` times
        ``INVALID_PARAMS`` when the lists differ in length."""
        return self._read_into(base_keys, buffer_ptrs, sizes)

    def get_tensor_with_tp_into(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> Optional["torch.Tensor"]:
        """:meth:`get_tensor_into` of the shard of ``tp_rank``
        (:meth:`get_tensor_with_tp` names the key)."""
        _util.check_key(key)
        _tp_args(tp_rank, tp_size, split_dim)
        return self.get_tensor_into(_shard_key(key, tp_rank, tp_size), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys: Sequence[str],
                                      buffer_ptrs: Sequence[int], sizes: Sequence[int],
                                      tp_rank: int = 0, tp_size: int = 1) -> List[Any]:
        """:meth:`batch_get_tensor_into` of the shards of ``tp_rank``."""
        _util.check_key_list("base_keys", base_keys)
        _tp_args(tp_rank, tp_size, 0)
        return self.batch_get_tensor_into(
            [_shard_key(_util.check_key(k), tp_rank, tp_size) for k in base_keys],
            buffer_ptrs, sizes)

    # ---- safetensors files --------------------------------------------------------

    def save_tensor_to_safetensor(self, key: str, file_name: Optional[str] = None) -> int:
        """Write the tensor stored under ``key`` to a safetensors file, the
        tensor named ``key`` (upstream's helper).

        Args:
            key: the tensor object's key.
            file_name: the file to write; None names it after the key, in
                the current directory.

        Returns:
            0; ``INVALID_PARAMS`` when the store is not set up, or when
            writing fails (logged: an unwritable path, a dtype the format
            has no name for, a failed safetensors import);
            ``FILE_NOT_FOUND`` when ``get_tensor(key)`` finds no tensor.
        """
        if self.get_hostname() == "":
            return _INVALID
        tensor = self.get_tensor(key)
        if tensor is None:
            return int(ErrorCode.FILE_NOT_FOUND)
        path = key if file_name is None else file_name
        try:
            st = _safetensors_torch()
            if st is not None:
                st.save_file({key: tensor.contiguous()}, path)
            else:
                safetensors_write(path, {key: tensor})
        except Exception as e:  # upstream: caught and logged
            _log.error("save_tensor_to_safetensor(%r, %r) failed: %s", key, path, e)
            return _INVALID
        return 0

    def load_tensor_from_safetensor(self, key: Optional[str] = None,
                                    file_name: Any = _REQUIRED) -> Optional["torch.Tensor"]:
        """Store a tensor of a safetensors file and return it (upstream's
        helper; ``key`` is first although it has a default).

        The store key is ``key``, or ``file_name`` when ``key`` is None.
        The tensor is the file's entry of that name when there is one,
        else its first entry (names sorted, as safetensors lists them),
        with a WARNING "Key K not found in safetensor file; using first
        entry".  It is stored with :meth:`put_tensor` (an existing key keeps
        its value, as every put).

        Returns:
            the loaded CPU tensor; None -- never an exception -- when the
            store is not set up, the file is missing, unreadable or no
            safetensors file, it holds no tensor, or the put fails.
        """
        if file_name is _REQUIRED:
            raise TypeError("load_tensor_from_safetensor() missing required argument: "
                            "'file_name'")
        if self.get_hostname() == "":
            return None
        store_key = file_name if key is None else key
        try:
            st = _safetensors_torch()
            tensors = dict(st.load_file(file_name)) if st is not None \
                else safetensors_read(file_name)
        except Exception as e:
            _log.error("load_tensor_from_safetensor(%r, %r): cannot read the file: %s",
                       key, file_name, e)
            return None
        if not tensors:
            return None
        if store_key in tensors:
            tensor = tensors[store_key]
        else:
            _log.warning("Key %s not found in safetensor file; using first entry", store_key)
            tensor = tensors[sorted(tensors)[0]]
        try:
            rc = self.put_tensor(store_key, tensor)
        except Exception as e:  # a key the store refuses, torch trouble: None, as upstream
            _log.error("load_tensor_from_safetensor: put_tensor(%r) failed: %s", store_key, e)
            return None
        return tensor if rc == 0 else None

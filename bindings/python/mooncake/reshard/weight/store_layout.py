# SPDX-License-Identifier: Apache-2.0
"""The WeightStore's own layout types (docs/weights.md, "The store's
layout types").

These predate upstream's contracts (``manifest.py``, ``types.py``) and are
what the store still takes: ``TensorDescriptor(tensor_id, global_shape,
dtype)``, fragments with an int rank.  They clash by name with upstream's,
so ``mooncake.reshard.weight`` exports upstream's and these live here only,
until the store moves onto upstream's types (issue 36, stage 4).

A *tensor* is named by its id and has a global shape and a dtype.  A
*fragment* is a box of one tensor — offsets and lengths per dimension — held
by one rank.  A *placement* lists the tensors and every fragment of every
rank; a replicated tensor is a box that several ranks hold.  A *binding*
says which fragments one rank writes (source side) or fills (target side).
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from math import prod
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

# dtype name -> bytes per element.  Names are torch's (without "torch.").
ITEMSIZE: Dict[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "complex64": 8, "complex128": 16,
}
_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "long": "int64",
            "int": "int32", "short": "int16"}


def dtype_name(dtype: Any) -> str:
    """The canonical name of a torch dtype, a numpy dtype or a name."""
    text = str(dtype)
    if text.startswith("torch."):
        text = text[len("torch."):]
    text = _ALIASES.get(text, text)
    if text not in ITEMSIZE:
        raise ValueError(f"dtype {dtype!r} is not supported (one of {sorted(ITEMSIZE)})")
    return text


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Placements and plans allocate many small objects that never form
    cycles: the cyclic collector's passes over a large heap would cost more
    than the work itself (10 000 tensors)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _dims(what: str, value: Any, nonneg: bool = True) -> Tuple[int, ...]:
    try:
        out = tuple(value)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, not {type(value).__name__}") \
            from None
    for v in out:
        if type(v) is not int or (nonneg and v < 0):
            raise ValueError(f"{what} {value!r} must hold ints >= 0")
    return out


def _name(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise ValueError(f"{what} must be a non-empty string without control characters, "
                         f"got {value!r}")
    return value


@dataclass(frozen=True)
class TensorDescriptor:
    """One tensor of the model: id, global shape, dtype."""

    tensor_id: str
    global_shape: Tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        _name("tensor_id", self.tensor_id)
        object.__setattr__(self, "global_shape", _dims("global_shape", self.global_shape))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return prod(self.global_shape) * self.itemsize


@dataclass(frozen=True)
class PlacementFragment:
    """The box ``global_offset + local_shape`` of ``tensor_id`` held by ``rank``."""

    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    rank: int = 0

    def __post_init__(self) -> None:
        _name("tensor_id", self.tensor_id)
        object.__setattr__(self, "global_offset", _dims("global_offset", self.global_offset))
        object.__setattr__(self, "local_shape", _dims("local_shape", self.local_shape))
        if type(self.rank) is not int or self.rank < 0:
            raise ValueError(f"rank must be an int >= 0, got {self.rank!r}")
        if len(self.global_offset) != len(self.local_shape):
            raise ValueError(f"fragment of {self.tensor_id!r}: offset {self.global_offset} and "
                             f"shape {self.local_shape} have different ranks")
        # ``tensor_id@lo:hi,...#rank``: unique in a placement
        object.__setattr__(self, "_id", f"{self.tensor_id}@"
                           f"{box_text(self.global_offset, self.local_shape)}#{self.rank}")

    @property
    def box(self) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        return self.global_offset, self.local_shape

    @property
    def fragment_id(self) -> str:
        """``tensor_id@lo:hi,...#rank``: unique in a placement."""
        return self._id  # type: ignore[attr-defined]


def box_text(offset: Sequence[int], shape: Sequence[int]) -> str:
    return ",".join(f"{o}:{o + n}" for o, n in zip(offset, shape)) or "scalar"


@dataclass(frozen=True)
class WeightRuntimeBinding:
    """The fragments one rank writes (a source) or fills (a target).

    ``tensors`` optionally maps fragment ids to the live tensors (targets:
    the destinations ``WeightStore.load`` fills)."""

    rank: int
    fragment_ids: Tuple[str, ...]
    tensors: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if type(self.rank) is not int or self.rank < 0:
            raise ValueError(f"rank must be an int >= 0, got {self.rank!r}")
        object.__setattr__(self, "fragment_ids", tuple(self.fragment_ids))


class WeightPlacementManifest:
    """Tensors plus the fragments every rank holds, checked for consistency:
    every fragment lies inside its tensor, and the fragments of each tensor
    cover it (``require_coverage``)."""

    def __init__(self, tensors: Iterable[TensorDescriptor],
                 fragments: Iterable[PlacementFragment], *,
                 require_coverage: bool = True) -> None:
        with no_gc():
            self._build(tensors, fragments, require_coverage)

    def _build(self, tensors: Iterable[TensorDescriptor], fragments: Iterable[PlacementFragment],
               require_coverage: bool) -> None:
        self.tensors: Tuple[TensorDescriptor, ...] = tuple(tensors)
        self.fragments: Tuple[PlacementFragment, ...] = tuple(fragments)
        self._tensor: Dict[str, TensorDescriptor] = {}
        for t in self.tensors:
            if not isinstance(t, TensorDescriptor):
                raise TypeError(f"tensors must be TensorDescriptor, not {type(t).__name__}")
            if t.tensor_id in self._tensor:
                raise ValueError(f"tensor {t.tensor_id!r} is described twice")
            self._tensor[t.tensor_id] = t
        self._fragment: Dict[str, PlacementFragment] = {}
        self._by_tensor: Dict[str, List[PlacementFragment]] = {t: [] for t in self._tensor}
        self._by_rank: Dict[int, List[PlacementFragment]] = {}
        for f in self.fragments:
            if not isinstance(f, PlacementFragment):
                raise TypeError(f"fragments must be PlacementFragment, not {type(f).__name__}")
            t = self._tensor.get(f.tensor_id)
            if t is None:
                raise ValueError(f"fragment {f.fragment_id} names an undescribed tensor")
            check_inside(t, f.global_offset, f.local_shape)
            if f.fragment_id in self._fragment:
                raise ValueError(f"fragment {f.fragment_id} is listed twice")
            self._fragment[f.fragment_id] = f
            self._by_tensor[f.tensor_id].append(f)
            self._by_rank.setdefault(f.rank, []).append(f)
        if require_coverage:
            for tid, frags in self._by_tensor.items():
                missing = uncovered(self._tensor[tid], {f.box for f in frags})
                if missing:
                    raise ValueError(f"tensor {tid!r} is not fully covered by the placement: "
                                     f"{describe_boxes(missing)} missing")

    def tensor(self, tensor_id: str) -> TensorDescriptor:
        try:
            return self._tensor[tensor_id]
        except KeyError:
            raise KeyError(f"tensor {tensor_id!r} is not in the placement") from None

    def fragment(self, fragment_id: str) -> PlacementFragment:
        try:
            return self._fragment[fragment_id]
        except KeyError:
            raise KeyError(f"fragment {fragment_id!r} is not in the placement") from None

    def fragments_of(self, tensor_id: str) -> List[PlacementFragment]:
        return list(self._by_tensor.get(tensor_id, ()))

    def rank_fragments(self, rank: int) -> List[PlacementFragment]:
        return list(self._by_rank.get(rank, ()))

    @property
    def ranks(self) -> List[int]:
        return sorted(self._by_rank)

    def bindings(self) -> List[WeightRuntimeBinding]:
        """Default source bindings: each distinct box is written once, by the
        lowest rank holding it (replicas are not written twice)."""
        writer: Dict[Tuple[str, Any], PlacementFragment] = {}
        for f in self.fragments:
            k = (f.tensor_id, f.box)
            if k not in writer or f.rank < writer[k].rank:
                writer[k] = f
        per: Dict[int, List[str]] = {r: [] for r in self._by_rank}
        for f in writer.values():
            per[f.rank].append(f.fragment_id)
        return [WeightRuntimeBinding(r, tuple(per[r])) for r in sorted(per)]

    def target_bindings(self) -> List[WeightRuntimeBinding]:
        """Every rank fills every fragment it holds."""
        return [WeightRuntimeBinding(r, tuple(f.fragment_id for f in self._by_rank[r]))
                for r in sorted(self._by_rank)]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, WeightPlacementManifest) and self.tensors == other.tensors
                and self.fragments == other.fragments)

    def __repr__(self) -> str:
        return (f"WeightPlacementManifest({len(self.tensors)} tensors, "
                f"{len(self.fragments)} fragments, ranks {self.ranks})")


def check_inside(t: TensorDescriptor, offset: Sequence[int], shape: Sequence[int]) -> None:
    if len(offset) != len(t.global_shape):
        raise ValueError(f"tensor {t.tensor_id!r} has {len(t.global_shape)} dims, a box of it "
                         f"{len(offset)}")
    for d, (o, n, g) in enumerate(zip(offset, shape, t.global_shape)):
        if o + n > g:
            raise ValueError(f"box {box_text(offset, shape)} of tensor {t.tensor_id!r} lies "
                             f"outside its shape {t.global_shape} (dim {d})")


def describe_boxes(boxes: Sequence[Tuple[Tuple[int, ...], Tuple[int, ...]]]) -> str:
    text = ", ".join(f"[{box_text(o, s)}]" for o, s in boxes[:8])
    return text + (f" and {len(boxes) - 8} more" if len(boxes) > 8 else "")


def uncovered(t: TensorDescriptor, boxes: Iterable[Tuple[Sequence[int], Sequence[int]]]
              ) -> List[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """The parts of ``t`` no box covers, as a list of boxes (empty: covered).

    Boxes are subtracted from the remaining region one after another, so the
    cost is (boxes × pieces left), small for parallel layouts."""
    if prod(t.global_shape) == 0:
        return []
    left = [(tuple(0 for _ in t.global_shape), tuple(t.global_shape))]
    for bo, bs in boxes:
        if prod(bs) == 0:
            continue
        nxt = []
        for ro, rs in left:
            nxt.extend(_subtract(ro, rs, bo, bs))
        left = nxt
        if not left:
            break
    return left


def intersect(ao: Sequence[int], as_: Sequence[int], bo: Sequence[int], bs: Sequence[int]
              ) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    lo, ln = [], []
    for a0, an, b0, bn in zip(ao, as_, bo, bs):
        s = a0 if a0 > b0 else b0
        e = min(a0 + an, b0 + bn)
        if e <= s:
            return None
        lo.append(s)
        ln.append(e - s)
    return tuple(lo), tuple(ln)


def _subtract(ro, rs, bo, bs):
    """Region (ro, rs) minus box (bo, bs): up to 2 × ndim boxes."""
    inter = intersect(ro, rs, bo, bs)
    if inter is None:
        return [(ro, rs)]
    io, is_ = inter
    out = []
    cur_o, cur_s = list(ro), list(rs)
    for d in range(len(ro)):
        if io[d] > cur_o[d]:  # the slab below the box along d
            o, s = list(cur_o), list(cur_s)
            s[d] = io[d] - cur_o[d]
            out.append((tuple(o), tuple(s)))
        end = cur_o[d] + cur_s[d]
        if io[d] + is_[d] < end:  # the slab above
            o, s = list(cur_o), list(cur_s)
            o[d] = io[d] + is_[d]
            s[d] = end - o[d]
            out.append((tuple(o), tuple(s)))
        cur_o[d], cur_s[d] = io[d], is_[d]
    return out


# ---- building placements -------------------------------------------------------------------

def split_sizes(length: int, parts: int) -> List[int]:
    """``length`` split into ``parts`` as evenly as possible (the first
    ``length % parts`` parts one longer): uneven TP splits."""
    base, extra = divmod(length, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def tp_placement(tensors: Iterable[TensorDescriptor], tp_size: int,
                 split_dims: Mapping[str, Optional[int]],
                 sizes: Optional[Mapping[str, Sequence[int]]] = None
                 ) -> WeightPlacementManifest:
    """A tensor-parallel placement over ranks ``0..tp_size-1``.

    ``split_dims[tensor_id]`` is the dimension the tensor is split along
    (0: rows, 1: columns, ...) or ``None`` (missing) for a replicated tensor.
    ``sizes[tensor_id]`` gives explicit per-rank lengths (uneven splits);
    otherwise the lengths come from :func:`split_sizes`."""
    if type(tp_size) is not int or tp_size < 1:
        raise ValueError(f"tp_size must be an int >= 1, got {tp_size!r}")
    tensors = list(tensors)
    known = {t.tensor_id for t in tensors}
    for tid in list(split_dims) + list(sizes or {}):
        if tid not in known:
            raise ValueError(f"split of unknown tensor {tid!r}")
    frags = []
    for t in tensors:
        dim = split_dims.get(t.tensor_id)
        if dim is None:
            frags += [PlacementFragment(t.tensor_id, (0,) * len(t.global_shape),
                                        t.global_shape, r) for r in range(tp_size)]
            continue
        if not 0 <= dim < len(t.global_shape):
            raise ValueError(f"split dim {dim} of tensor {t.tensor_id!r} is out of range")
        lens = list(sizes[t.tensor_id]) if sizes and t.tensor_id in sizes else \
            split_sizes(t.global_shape[dim], tp_size)
        if len(lens) != tp_size or sum(lens) != t.global_shape[dim]:
            raise ValueError(f"sizes of tensor {t.tensor_id!r} must be {tp_size} lengths "
                             f"summing to {t.global_shape[dim]}, got {lens}")
        off = 0
        for r, n in enumerate(lens):
            o = [0] * len(t.global_shape)
            s = list(t.global_shape)
            o[dim], s[dim] = off, n
            frags.append(PlacementFragment(t.tensor_id, tuple(o), tuple(s), r))
            off += n
    return WeightPlacementManifest(tensors, frags)


@dataclass(frozen=True)
class WeightSnapshotSource:
    """What an adapter exports: the complete source placement and the bindings."""

    placement: WeightPlacementManifest
    bindings: Sequence[WeightRuntimeBinding]


__all__ = ["ITEMSIZE", "PlacementFragment", "TensorDescriptor", "WeightPlacementManifest",
           "WeightRuntimeBinding", "WeightSnapshotSource", "dtype_name", "split_sizes",
           "tp_placement"]


class _SnapshotWriterEnd:
    """How a snapshot writer ends (store.WeightStoreWriter and
    store_writer.PlacementSnapshotWriter share it): publishing the one
    manifest of the snapshot, abort() once, and a ``with`` block that
    raises aborts an open writer.  The writer has ``_lock``, ``_state``
    ("open", "committed", "aborted"), ``_store``, ``_ws`` (its WeightStore),
    ``manifest_key``, ``_part_key``, ``writer_id``, ``_dir``, ``_live_key``
    and ``_written``, and ``_writer_error(msg, rc=None)`` builds its
    exception."""

    # How long a commit waits for a manifest that another rank is writing
    # at the same moment to become readable.
    PUBLISH_WAIT_S = 10.0

    def _publish(self, raw: bytes) -> None:
        """Put the manifest ``raw`` unless it is there; then it must read
        back as exactly ``raw`` (manifests are never overwritten)."""
        import time
        existing = self._store.get(self.manifest_key)
        if not existing:
            rc = self._store.put(self.manifest_key, raw, self._ws.config)
            if rc != 0:
                raise self._writer_error(f"commit: publishing the manifest "
                                         f"{self.manifest_key!r} failed ({rc}); the writer "
                                         f"keeps its payloads, retry commit()", rc)
            existing = self._store.get(self.manifest_key)
            # Ranks publish the same manifest together: a put that found
            # another rank's put of the key still in progress returns 0
            # (the key exists) before that put completes, so the manifest
            # becomes readable a moment later.
            deadline = time.monotonic() + self.PUBLISH_WAIT_S
            while not existing and time.monotonic() < deadline:
                time.sleep(0.005)
                existing = self._store.get(self.manifest_key)
        if existing != raw:
            if not existing:
                raise self._writer_error(f"commit: the manifest {self.manifest_key!r} cannot "
                                         f"be read back; retry commit()")
            raise self._writer_error(f"commit: another manifest is already published at "
                                     f"{self.manifest_key!r} (manifests are never overwritten)")

    def abort(self) -> int:
        """Remove everything this writer stored; returns the keys removed."""
        import json

        from ...structured_object_store import _ere_escape
        with self._lock:
            if self._state == "committed":
                raise self._writer_error("abort: the snapshot is already committed")
            if self._state == "aborted":
                return 0
            self._state = "aborted"
            n = 0
            raw = self._store.get(self._part_key)
            if raw and json.loads(raw).get("writer") == self.writer_id:
                n += self._store.remove(self._part_key, True) == 0
            n += max(0, self._store.remove_by_regex("^" + _ere_escape(self._dir) + "/", True))
            self._store.remove(self._live_key, True)
            self._written.clear()
            return n

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is not None and self._state == "open":
            self.abort()

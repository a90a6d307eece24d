# SPDX-License-Identifier: Apache-2.0
"""Tensor and parallel-axis contracts of model weights (upstream's
``mooncake.reshard.weight.types``).

A rank is a coordinate on the four parallel axes dp, pp, ep and tp.  Each
tensor declares, per axis that matters to it, how the ranks along that axis
hold it: split along a dimension (`SplitAxis`), a full copy each
(`ReplicatedAxis`), or only the declared owners (`OwnershipAxis`).  The
placement contract proves its fragments against these declarations, so
nothing is ever inferred from tensor names.

May import: reshard._checks only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Literal, Optional, Tuple, Union

from .._checks import (check_int, check_ints, check_optional_int, check_sequence,
                       check_str)
from .._checks import check_keys as _check_keys
from .._checks import json_int as _json_int

ParallelAxisKind = Literal["dp", "pp", "ep", "tp"]
SplitAxisKind = Literal["ep", "tp"]

# Canonical axis order, used to sort a descriptor's axes and ranks.
AXIS_ORDER = ("dp", "pp", "ep", "tp")


def _check_kind(kind: Any) -> str:
    if kind not in AXIS_ORDER or type(kind) is not str:
        raise ValueError(f"unsupported parallel axis kind: {kind}")
    return kind


@dataclass(frozen=True)
class ParallelRank:
    """A participant's coordinate on each parallel axis (no context axis)."""

    dp: int = 0
    tp: int = 0
    pp: int = 0
    ep: int = 0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "ep"):
            check_int(f"rank {name}", getattr(self, name), 0)

    def coordinate(self, kind: str) -> int:
        return getattr(self, kind)

    def sort_key(self) -> Tuple[int, int, int, int]:
        return (self.dp, self.pp, self.ep, self.tp)

    def to_wire(self) -> Dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": self.ep}


@dataclass(frozen=True)
class SplitAxis:
    """Ranks along `kind` each hold one slice of dimension `dim`."""

    kind: SplitAxisKind
    dim: int

    def __post_init__(self) -> None:
        _check_kind(self.kind)
        if self.kind not in ("ep", "tp"):
            raise ValueError(f"{self.kind} cannot use split semantics")
        check_int("split axis dim", self.dim, 0)
        if self.kind == "ep" and self.dim != 0:
            raise ValueError("EP must split the leading logical expert dimension")

    semantics = "split"

    def to_wire(self) -> Dict[str, Any]:
        return {"semantics": "split", "kind": self.kind, "dim": self.dim}


@dataclass(frozen=True)
class ReplicatedAxis:
    """Every selected rank along `kind` holds a complete copy."""

    kind: ParallelAxisKind

    def __post_init__(self) -> None:
        _check_kind(self.kind)

    semantics = "replicated"

    def to_wire(self) -> Dict[str, Any]:
        return {"semantics": "replicated", "kind": self.kind}


@dataclass(frozen=True)
class OwnershipAxis:
    """Only the declared owners along `kind` hold the tensor (a pipeline
    stage's layers, an individually allocated expert)."""

    kind: ParallelAxisKind

    def __post_init__(self) -> None:
        _check_kind(self.kind)

    semantics = "ownership"

    def to_wire(self) -> Dict[str, Any]:
        return {"semantics": "ownership", "kind": self.kind}


ParallelAxis = Union[SplitAxis, ReplicatedAxis, OwnershipAxis]
_AXIS_TYPES = (SplitAxis, ReplicatedAxis, OwnershipAxis)


@dataclass(frozen=True)
class TensorDescriptor:
    """One logical tensor of the model.  `itemsize` is explicit and `dtype`
    free-form, so FP8 and other framework dtypes need no table here."""

    tensor_id: str
    global_shape: Tuple[int, ...]
    dtype: str
    itemsize: int
    shard_dims: Tuple[int, ...]
    layout_fingerprint: str
    parallel_axes: Tuple[ParallelAxis, ...]
    layer_id: Optional[int] = None
    expert_id: Optional[int] = None

    def __post_init__(self) -> None:
        check_str("tensor_id", self.tensor_id)
        shape = check_ints("global_shape", self.global_shape, 1)
        if not shape:
            raise ValueError("global_shape must not be empty")
        check_str("dtype", self.dtype)
        check_int("itemsize", self.itemsize, 1)
        shard = check_ints("shard_dims", self.shard_dims, 0)
        if len(set(shard)) != len(shard):
            raise ValueError("shard_dims must not contain duplicates")
        if list(shard) != sorted(shard):
            raise ValueError("shard_dims must be sorted")
        if any(d >= len(shape) for d in shard):
            raise ValueError("shard_dims contains an out-of-range dimension")
        axes = check_sequence("parallel_axes", self.parallel_axes)
        if not all(isinstance(a, _AXIS_TYPES) for a in axes):
            raise ValueError("parallel_axes must contain explicit axis values")
        axes = tuple(sorted(axes, key=lambda a: AXIS_ORDER.index(a.kind)))
        check_optional_int("layer_id", self.layer_id, 0)
        check_optional_int("expert_id", self.expert_id, 0)
        kinds = [a.kind for a in axes]
        if len(set(kinds)) != len(kinds):
            raise ValueError("parallel_axes must not contain duplicate kinds")
        split_dims = [a.dim for a in axes if isinstance(a, SplitAxis)]
        if len(set(split_dims)) != len(split_dims):
            raise ValueError("split axes must not share a dimension")
        if any(d >= len(shape) for d in split_dims):
            raise ValueError("split axis dimension is out of range")
        if tuple(sorted(split_dims)) != shard:
            raise ValueError("parallel axis split dimensions conflict with shard_dims")
        if self.expert_id is not None and any(
                isinstance(a, SplitAxis) and a.kind == "ep" for a in axes):
            raise ValueError("an individually allocated expert requires explicit EP ownership")
        check_str("layout_fingerprint", self.layout_fingerprint)
        object.__setattr__(self, "global_shape", shape)
        object.__setattr__(self, "shard_dims", shard)
        object.__setattr__(self, "parallel_axes", axes)

    @property
    def ndim(self) -> int:
        return len(self.global_shape)

    def axis(self, kind: str) -> Optional[ParallelAxis]:
        for a in self.parallel_axes:
            if a.kind == kind:
                return a
        return None

    def to_wire(self) -> Dict[str, Any]:
        return {"tensor_id": self.tensor_id, "global_shape": list(self.global_shape),
                "dtype": self.dtype, "itemsize": self.itemsize,
                "shard_dims": list(self.shard_dims),
                "layout_fingerprint": self.layout_fingerprint,
                "parallel_axes": [a.to_wire() for a in self.parallel_axes],
                "layer_id": self.layer_id, "expert_id": self.expert_id}


TENSOR_KEYS = ("tensor_id", "global_shape", "dtype", "itemsize", "shard_dims",
               "layout_fingerprint", "parallel_axes", "layer_id", "expert_id")


def axis_from_wire(obj: Any, label: str) -> ParallelAxis:
    if not isinstance(obj, dict) or "semantics" not in obj:
        raise ValueError(f"{label} schema fields do not match contract")
    sem = obj["semantics"]
    if sem == "split":
        if set(obj) != {"semantics", "kind", "dim"}:
            raise ValueError(f"{label} schema fields do not match contract")
        return SplitAxis(obj["kind"], obj["dim"])
    if sem in ("replicated", "ownership"):
        if set(obj) != {"semantics", "kind"}:
            raise ValueError(f"{label} schema fields do not match contract")
        return (ReplicatedAxis if sem == "replicated" else OwnershipAxis)(obj["kind"])
    raise ValueError(f"unsupported parallel axis semantics: {sem}")


def tensor_from_wire(obj: Any, label: str) -> TensorDescriptor:
    _check_keys(label, obj, TENSOR_KEYS)
    axes = obj["parallel_axes"]
    if not isinstance(axes, list):
        raise ValueError("parallel_axes must be a sequence")
    return TensorDescriptor(obj["tensor_id"], obj["global_shape"], obj["dtype"],
                            obj["itemsize"], obj["shard_dims"], obj["layout_fingerprint"],
                            tuple(axis_from_wire(a, f"{label} axis {i}")
                                  for i, a in enumerate(axes)),
                            obj["layer_id"], obj["expert_id"])


def rank_from_wire(obj: Any, label: str) -> ParallelRank:
    _check_keys(label, obj, ("dp", "tp", "pp", "ep"))
    return ParallelRank(**{k: _json_int(f"rank {k}", obj[k], 0) for k in ("dp", "tp", "pp", "ep")})

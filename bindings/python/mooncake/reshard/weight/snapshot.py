# SPDX-License-Identifier: Apache-2.0
"""What a writer is opened with: the snapshot's identity and the adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .store_layout import (PlacementFragment, TensorDescriptor, WeightPlacementManifest,
                           WeightRuntimeBinding, WeightSnapshotSource)


def _ident(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value or "/" in value \
            or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what} must be a non-empty string without '/' or control "
                         f"characters, got {value!r}")
    return value


@dataclass(frozen=True)
class WeightSnapshotDescriptor:
    """The snapshot's identity: model (``resource_id``), version
    (``revision``), ``weight_generation`` and ``namespace``; optionally
    ``tensors``, the model's tensors (id, global shape, dtype), which must
    then equal the adapter's placement's."""

    resource_id: str
    revision: str
    weight_generation: int = 0
    namespace: str = "default"
    tensors: Optional[Tuple[TensorDescriptor, ...]] = None

    def __post_init__(self) -> None:
        _ident("resource_id", self.resource_id)
        _ident("revision", self.revision)
        _ident("namespace", self.namespace)
        g = self.weight_generation
        if type(g) is not int or g < 0 or g >= 1 << 64:
            raise ValueError(f"weight_generation must be an unsigned 64-bit int, got {g!r}")
        if self.tensors is not None:
            ts = tuple(self.tensors)
            for t in ts:
                if not isinstance(t, TensorDescriptor):
                    raise TypeError("tensors must be TensorDescriptor objects")
            object.__setattr__(self, "tensors", ts)

    @property
    def snapshot_id(self) -> str:
        """``namespace/resource_id/revision/weight_generation``: the key space."""
        return f"{self.namespace}/{self.resource_id}/{self.revision}/{self.weight_generation}"


def tensor_dtype_shape(tensor: Any) -> Tuple[str, Tuple[int, ...]]:
    """(dtype name, shape) of a torch tensor or numpy array."""
    from .store_layout import dtype_name
    shape = getattr(tensor, "shape", None)
    dtype = getattr(tensor, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"a tensor (torch or numpy) is needed, not {type(tensor).__name__}")
    return dtype_name(dtype), tuple(int(n) for n in shape)


class WeightSnapshotAdapter:
    """Maps a framework's parameters of one rank to placement fragments.

    ``placement`` is the complete source placement (every rank's
    fragments); ``rank`` is the rank this process writes as; ``bindings``
    default to ``placement.bindings()`` (each distinct box written by the
    lowest rank holding it).  ``names`` maps framework parameter names to
    tensor ids (identity when absent).

    Subclasses (or any object with the same methods) may map differently:
    ``export_source(descriptor)`` returns the
    :class:`WeightSnapshotSource`; ``resolve_fragment_ids(tensor_id=...,
    tensor=..., source=...)`` returns the ids of the placement fragments
    ``tensor`` is for; ``writer_rank`` is the rank this writer writes as."""

    def __init__(self, placement: WeightPlacementManifest, rank: int = 0,
                 bindings: Optional[Sequence[WeightRuntimeBinding]] = None,
                 names: Optional[Mapping[str, str]] = None) -> None:
        if not isinstance(placement, WeightPlacementManifest):
            raise TypeError("placement must be a WeightPlacementManifest")
        if type(rank) is not int or rank < 0:
            raise ValueError(f"rank must be an int >= 0, got {rank!r}")
        self.placement = placement
        self.writer_rank = rank
        self.bindings = list(bindings) if bindings is not None else placement.bindings()
        self.names: Dict[str, str] = dict(names or {})

    def tensor_id_of(self, name: str) -> str:
        return self.names.get(name, name)

    def export_source(self, snapshot: WeightSnapshotDescriptor) -> WeightSnapshotSource:
        return WeightSnapshotSource(self.placement, tuple(self.bindings))

    def resolve_fragment_ids(self, *, tensor_id: str, tensor: Any,
                             source: WeightSnapshotSource) -> List[str]:
        """The fragments of ``tensor_id`` this rank holds (one for a plain
        TP layout; the writer checks the tensor against it)."""
        tid = self.tensor_id_of(tensor_id)
        source.placement.tensor(tid)  # KeyError for unknown tensors
        return [f.fragment_id for f in source.placement.fragments_of(tid)
                if f.rank == self.writer_rank]

    def named_tensors(self, module: Any) -> Iterable[Tuple[str, Any]]:
        """(tensor id, tensor) for each parameter of a torch module that the
        placement knows (helper for ``write_tensor`` loops)."""
        for name, p in module.state_dict().items():
            tid = self.tensor_id_of(name)
            try:
                self.placement.tensor(tid)
            except KeyError:
                continue
            yield tid, p


__all__ = ["PlacementFragment", "WeightSnapshotAdapter", "WeightSnapshotDescriptor"]

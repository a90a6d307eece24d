# SPDX-License-Identifier: Apache-2.0
"""What a snapshot writer is opened with: the snapshot's identity
(WeightSnapshotDescriptor) and an adapter that exports upstream's complete
source placement plus live runtime bindings (WeightSnapshotAdapter, or any
object with ``participant_id`` and ``export_source(descriptor)``).

May import: weight.manifest (and what it imports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from .manifest import WeightPlacementManifest, WeightRuntimeBindingManifest


def _ident(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value or "/" in value \
            or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what} must be a non-empty string without '/' or control "
                         f"characters, got {value!r}")
    return value


@dataclass(frozen=True)
class WeightSnapshotDescriptor:
    """The snapshot's identity: model (``resource_id``), version
    (``revision``) and ``weight_generation`` -- which must be the source
    placement's -- and the store ``namespace``."""

    resource_id: str
    revision: str
    weight_generation: int = 0
    namespace: str = "default"

    def __post_init__(self) -> None:
        _ident("resource_id", self.resource_id)
        _ident("revision", self.revision)
        _ident("namespace", self.namespace)
        g = self.weight_generation
        if type(g) is not int or g < 0 or g >= 1 << 64:
            raise ValueError(f"weight_generation must be an unsigned 64-bit int, got {g!r}")

    @property
    def snapshot_id(self) -> str:
        """``namespace/resource_id/revision/weight_generation``: the key space."""
        return f"{self.namespace}/{self.resource_id}/{self.revision}/{self.weight_generation}"


@dataclass(frozen=True)
class WeightSnapshotSource:
    """What an adapter exports: upstream's complete source placement and
    the runtime bindings it knows (at least the writer's own, to write
    from its memory)."""

    placement: WeightPlacementManifest
    bindings: Tuple[WeightRuntimeBindingManifest, ...] = ()


class WeightSnapshotAdapter:
    """The simplest adapter: a complete placement, the participant this
    process writes as, optionally its runtime bindings, and ``names``
    mapping framework parameter names to tensor ids (identity when
    absent).  A framework's own adapter needs only ``participant_id`` and
    ``export_source(descriptor)``; ``tensor_id_of(name)`` is optional."""

    def __init__(self, placement: WeightPlacementManifest, participant_id: str,
                 bindings: Sequence[WeightRuntimeBindingManifest] = (),
                 names: Optional[Mapping[str, str]] = None) -> None:
        if not isinstance(placement, WeightPlacementManifest):
            raise ValueError("placement must be a WeightPlacementManifest")
        self.placement = placement
        self.participant_id = participant_id
        self.bindings = tuple(bindings)
        self.names: Dict[str, str] = dict(names or {})

    def tensor_id_of(self, name: str) -> str:
        return self.names.get(name, name)

    def export_source(self, descriptor: Any) -> WeightSnapshotSource:
        return WeightSnapshotSource(self.placement, self.bindings)

    def named_tensors(self, module: Any) -> Iterable[Tuple[str, Any]]:
        """(tensor id, tensor) for each parameter of a torch module that the
        placement knows (for write_tensor loops)."""
        known = {t.tensor_id for t in self.placement.tensors}
        for name, p in module.state_dict().items():
            tid = self.tensor_id_of(name)
            if tid in known:
                yield tid, p


__all__ = ["WeightSnapshotAdapter", "WeightSnapshotDescriptor", "WeightSnapshotSource"]

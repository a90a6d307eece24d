# SPDX-License-Identifier: Apache-2.0
"""Loading a snapshot stored in upstream's `WeightManifest` layout
(docs/weights.md, "Loading an upstream manifest").

The plan is upstream's (`plan_stored_transfer_to_target_placement`); this
module only selects the target executors, lowers their regions to the
store's `RangedRead`s (store_plan.lower_plan) and resolves where each
target fragment's bytes go — a destination tensor keyed by
`placement_fragment_id`, or the memory a runtime binding declares.  The
WeightStore executes the reads with the same ranged-read machinery as its
own snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..contracts import validate_resource_binding_identity
from .manifest import (PlacementFragment, WeightPlacementManifest, WeightRuntimeBindingManifest,
                       validate_runtime_binding)
from .planner import (LogicalTransferPlan, PlanningLimits,
                      plan_stored_transfer_to_target_placement)
from .storage_manifest import WeightManifest
from .store_plan import RangedRead, lower_plan


@dataclass(frozen=True)
class StoredLoadPlan:
    """Upstream's logical plan plus, per selected target participant, the
    store reads that execute it and (optionally) its runtime binding,
    whose generation and lease are kept as fences."""

    plan: LogicalTransferPlan
    reads: Mapping[str, Tuple[RangedRead, ...]]
    bindings: Mapping[str, WeightRuntimeBindingManifest]
    fences: Mapping[str, Tuple[int, str]]

    @property
    def participants(self) -> List[str]:
        return list(self.reads)

    def nbytes(self, participant_id: Optional[str] = None) -> int:
        ids = self.participants if participant_id is None else [participant_id]
        return sum(r.nbytes for p in ids for r in self.reads[p])

    def target_fragments(self, participant_id: str) -> List[PlacementFragment]:
        return list(self.plan.target_placement.part(participant_id).fragments)


def plan_stored_load(manifest: WeightManifest, target: WeightPlacementManifest,
                     bindings: Optional[Sequence[WeightRuntimeBindingManifest]] = None,
                     planning_limits: Optional[PlanningLimits] = None) -> StoredLoadPlan:
    """Plan a committed snapshot into `target`: every non-empty participant,
    or those of `bindings` (each validated against the target)."""
    plan = plan_stored_transfer_to_target_placement(manifest, target,
                                                    planning_limits=planning_limits)
    by_pid: Dict[str, WeightRuntimeBindingManifest] = {}
    if bindings is not None:
        for b in bindings:
            validate_runtime_binding(target, b)
            if b.participant_id in by_pid:
                raise ValueError("duplicate runtime binding participant")
            by_pid[b.participant_id] = b
            for f in b.fragments:
                if not f.device.startswith("cpu"):
                    raise ValueError(f"runtime binding device {f.device!r} is not supported "
                                     f"(the store loads into CPU memory)")
    reads = lower_plan(plan, list(by_pid) if bindings is not None else None)
    return StoredLoadPlan(plan, {p: tuple(r) for p, r in reads.items()}, by_pid,
                          {p: (b.generation, b.lease_id) for p, b in by_pid.items()})


def resolve_destinations(plan: StoredLoadPlan, destinations: Optional[Mapping[str, Any]],
                         participant_ids: Sequence[str],
                         memory_of: Callable[[Any, str], Tuple[int, int]]
                         ) -> Dict[str, Tuple[int, int]]:
    """(address, size) of every target fragment of the participants, after
    re-attesting the source snapshot and the bindings (no I/O before)."""
    plan.plan.validate_source_manifest_snapshot()
    target = plan.plan.target_placement
    items = {t.tensor_id: t.itemsize for t in target.tensors}
    out: Dict[str, Tuple[int, int]] = {}
    for pid in participant_ids:
        if pid not in plan.reads:
            raise ValueError(f"unknown target participant: {pid}")
        binding = plan.bindings.get(pid)
        bound: Dict[str, Any] = {}
        if binding is not None:
            validate_resource_binding_identity(target, binding)
            if (binding.generation, binding.lease_id) != plan.fences[pid]:
                raise ValueError("runtime binding generation or lease changed since planning")
            bound = {f.placement_fragment_id: f for f in binding.fragments}
        for f in plan.target_fragments(pid):
            fid = f.placement_fragment_id
            what = f"{f.tensor_id}{list(f.global_offset)}+{list(f.local_shape)} of {pid}"
            d = None if destinations is None else destinations.get(fid)
            if d is None and fid in bound:
                b = bound[fid]       # canonical contiguous view, proven by validation
                out[fid] = (b.address, b.nbytes)
                continue
            if d is None:
                raise ValueError(f"no destination for {what}")
            shape = tuple(int(n) for n in getattr(d, "shape", ()))
            size = getattr(d, "element_size", None)
            item = size() if callable(size) else getattr(getattr(d, "dtype", None),
                                                         "itemsize", None)
            if shape != f.local_shape or item != items[f.tensor_id]:
                raise ValueError(f"destination of {what} is {shape} with {item}-byte "
                                 f"elements, the fragment {f.local_shape} with "
                                 f"{items[f.tensor_id]}-byte elements")
            ptr, nbytes = memory_of(d, what)
            if nbytes != f.nbytes or prod(shape) * item != f.nbytes:
                raise ValueError(f"destination of {what} holds {nbytes} bytes, the fragment "
                                 f"{f.nbytes}")
            out[fid] = (ptr, nbytes)
    return out

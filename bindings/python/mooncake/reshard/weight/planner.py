# SPDX-License-Identifier: Apache-2.0
"""The address-free, copy-only transfer planner (upstream's
``mooncake.reshard.weight.planner``).

Given a source — a complete placement or a committed `WeightManifest` —
and a target placement, the planner picks one source box per element each
target fragment needs and emits one `TransferRegion` per overlap: byte
offsets relative to the two fragments' starts, a contiguous inner run, and
outer loops (C-order strides of each fragment).  Nothing here knows an
address; executors lower regions onto bindings or store objects.

Source choice is deterministic so that every participant plans alike:
target DP rank d reads source replica sorted(replicas)[d % n], within it
the minimum complete owner, and among equal boxes the lowest
(dp, pp, ep, tp, fragment_id) — (object_key, fragment_id) when stored.

The public functions make their plans with libmooncake's planner core
(`<mooncake/reshard.h>`, "the native core" at the end of this module);
the Python functions in between are the reference it is tested against
(`reference_planner()`).

May import: reshard._checks, geometry, weight.manifest, serde and
storage_manifest, the native binding (optional) and _errors (lazily, on the
native path); never the store modules.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import weakref
from collections import defaultdict
from collections.abc import Sequence as _SequenceABC
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from itertools import chain, product, repeat
from operator import attrgetter
from math import prod
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .._checks import c_strides, check_str
from ..geometry import boxes_exactly_cover, regions_exactly_cover
from . import manifest as _manifest_module
from .manifest import (OwnershipAxis, ParallelRank, PlacementFragment, TensorDescriptor,
                       WeightPlacementManifest, WeightPlacementPart, _thread_flag,
                       no_planner_columns)
from .serde import weight_placement_from_json as _placement_from_json
from .serde import weight_placement_to_json as _placement_to_json
from .storage_manifest import (StoredFragment, StoredManifestIdentity, WeightManifest,
                               validate_weight_manifest_snapshot)

__all__ = ["LogicalTransferPlan", "LogicalTransferOperation", "PipelineRouteGroup",
           "PlacementExecutorPlan", "PlanningLimits", "TransferRegion",
           "plan_placement_transfer", "plan_placement_transfer_to_local_target",
           "plan_stored_transfer_to_target_placement"]

SourceFragment = Union[PlacementFragment, StoredFragment]


@dataclass(frozen=True)
class PlanningLimits:
    """Bounds checked before any region is materialized, so a hostile or
    mistaken pair of layouts cannot exhaust memory."""

    max_transfer_regions: int = 1_000_000
    max_segments_per_region: int = 1_000_000
    max_total_lowered_segments: int = 10_000_000

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if type(v) is not int or v < 1:
                raise ValueError(f"planning limit {f.name} must be a positive integer")


def _itemsize(fragment: Any) -> int:
    return fragment.nbytes // prod(fragment.local_shape)


def region_geometry(source: Any, target: Any, overlap_offset: Tuple[int, ...],
                    overlap_shape: Tuple[int, ...]) -> Tuple[Any, ...]:
    """(source_base, target_base, inner_bytes, counts, source_strides,
    target_strides) of the overlap box, relative to the fragment starts.
    The inner run absorbs leading dimensions while both fragments are
    contiguous across them; the remaining extents (1s kept) are loops."""
    item = _itemsize(target)
    ss = c_strides(source.local_shape, item)
    ts = c_strides(target.local_shape, item)
    sb = sum((o - g) * s for o, g, s in zip(overlap_offset, source.global_offset, ss))
    tb = sum((o - g) * s for o, g, s in zip(overlap_offset, target.global_offset, ts))
    d = len(overlap_shape) - 1
    inner = overlap_shape[d] * item
    while d > 0 and ss[d - 1] == inner and ts[d - 1] == inner:
        d -= 1
        inner *= overlap_shape[d]
    return sb, tb, inner, tuple(overlap_shape[:d]), ss[:d], ts[:d]


def _inside(off: Sequence[int], shape: Sequence[int], frag: Any) -> bool:
    return (len(off) == len(frag.global_offset) and
            all(g <= o and o + n <= g + ln for o, n, g, ln in
                zip(off, shape, frag.global_offset, frag.local_shape)))


@dataclass(frozen=True)
class TransferRegion:
    """Copy the overlap box from the source fragment's bytes to the target
    fragment's.  Every loop value is derived; the constructor re-derives
    them and refuses any other."""

    tensor_id: str
    source: SourceFragment
    target: PlacementFragment
    overlap_offset: Tuple[int, ...]
    overlap_shape: Tuple[int, ...]
    source_base_offset: int
    target_base_offset: int
    inner_bytes: int
    outer_loop_counts: Tuple[int, ...]
    source_strides: Tuple[int, ...]
    target_strides: Tuple[int, ...]

    def __post_init__(self) -> None:
        check_str("tensor_id", self.tensor_id)
        if not isinstance(self.source, (PlacementFragment, StoredFragment)):
            raise ValueError("transfer region source must be a PlacementFragment or "
                             "StoredFragment")
        if not isinstance(self.target, PlacementFragment):
            raise ValueError("transfer region target must be a PlacementFragment")
        if self.source.tensor_id != self.tensor_id or self.target.tensor_id != self.tensor_id:
            raise ValueError("transfer region fragments belong to another tensor")
        off, shape = tuple(self.overlap_offset), tuple(self.overlap_shape)
        if not shape or any(n < 1 for n in shape):
            raise ValueError("transfer region overlap must not be empty")
        if not _inside(off, shape, self.source):
            raise ValueError("transfer region exceeds source fragment")
        if not _inside(off, shape, self.target):
            raise ValueError("transfer region exceeds target fragment")
        want = region_geometry(self.source, self.target, off, shape)
        have = (self.source_base_offset, self.target_base_offset, self.inner_bytes,
                tuple(self.outer_loop_counts), tuple(self.source_strides),
                tuple(self.target_strides))
        if have != want:
            raise ValueError("transfer region loop geometry is not canonical")
        s = object.__setattr__
        s(self, "overlap_offset", off)
        s(self, "overlap_shape", shape)
        s(self, "outer_loop_counts", want[3])
        s(self, "source_strides", want[4])
        s(self, "target_strides", want[5])

    @property
    def segment_count(self) -> int:
        return prod(self.outer_loop_counts)

    @property
    def total_bytes(self) -> int:
        return self.inner_bytes * self.segment_count

    # Compatibility with 1-D-loop consumers.
    @property
    def source_offset(self) -> int:
        return self.source_base_offset

    @property
    def target_offset(self) -> int:
        return self.target_base_offset

    @property
    def nbytes(self) -> int:
        return self.inner_bytes

    @property
    def repeat(self) -> int:
        return self.segment_count

    @property
    def source_stride(self) -> int:
        return self._single_stride(self.source_strides, "source")

    @property
    def target_stride(self) -> int:
        return self._single_stride(self.target_strides, "target")

    @staticmethod
    def _single_stride(strides: Tuple[int, ...], side: str) -> int:
        if not strides:
            return 0
        if len(strides) == 1:
            return strides[0]
        raise ValueError(f"N-D transfer region has multiple {side} strides")

    def iter_segments(self, *, max_segments: int) -> Iterator[Tuple[int, int, int]]:
        """(source offset, target offset, nbytes) per contiguous run, the
        last loop dimension fastest."""
        if self.segment_count > max_segments:
            raise ValueError(f"transfer region exceeds max_segments: {self.segment_count} > "
                             f"{max_segments}")
        for idx in product(*(range(n) for n in self.outer_loop_counts)):
            yield (self.source_base_offset + sum(i * s for i, s in zip(idx, self.source_strides)),
                   self.target_base_offset + sum(i * s for i, s in zip(idx, self.target_strides)),
                   self.inner_bytes)


LogicalTransferOperation = TransferRegion


@dataclass(frozen=True)
class PlacementExecutorPlan:
    """One participant that executes part of a plan: all its fragments."""

    placement_id: str
    participant_id: str
    rank: ParallelRank
    placement_fragment_ids: Tuple[str, ...]

    def __post_init__(self) -> None:
        ids = tuple(self.placement_fragment_ids)
        if (type(self.placement_id) is not str or not self.placement_id
                or type(self.participant_id) is not str or not self.participant_id
                or any(type(i) is not str or not i for i in ids)):
            raise ValueError("placement executor identifiers must not be empty")
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("placement executor rank must be a ParallelRank")
        if len(set(ids)) != len(ids):
            raise ValueError("placement executor plan contains duplicate fragment IDs")
        object.__setattr__(self, "placement_fragment_ids", tuple(sorted(ids)))


@dataclass(frozen=True)
class PipelineRouteGroup:
    """The operations between one source pipeline stage and one target
    stage (source_pp is None for a stored source)."""

    source_pp: Optional[int]
    source_pipeline_stage_id: Optional[int]
    target_pp: int
    target_pipeline_stage_id: Optional[int]
    operation_indices: Tuple[int, ...]


def _executor(placement: WeightPlacementManifest, part: WeightPlacementPart
              ) -> PlacementExecutorPlan:
    return PlacementExecutorPlan(placement.placement_id, part.participant_id, part.rank,
                                 tuple(map(attrgetter("placement_fragment_id"),
                                           part.fragments)))


@dataclass(frozen=True)
class LogicalTransferPlan:
    """The regions that move one revision from its source to a target
    placement, with the executors on each side.  Construction (also by
    dataclasses.replace and unpickling) re-validates everything."""

    resource_id: str
    revision: str
    source_placement: Optional[WeightPlacementManifest]
    target_placement: WeightPlacementManifest
    source_tensors: Tuple[TensorDescriptor, ...]
    target_tensors: Tuple[TensorDescriptor, ...]
    operations: Tuple[TransferRegion, ...]
    source_manifest: Optional[WeightManifest] = None
    planning_limits: PlanningLimits = field(default_factory=PlanningLimits)
    source_executors: Tuple[PlacementExecutorPlan, ...] = ()
    target_executors: Tuple[PlacementExecutorPlan, ...] = ()
    source_manifest_identity: Optional[StoredManifestIdentity] = field(init=False,
                                                                       default=None)

    def __post_init__(self) -> None:
        s = object.__setattr__
        for name in ("source_tensors", "target_tensors", "operations", "source_executors",
                     "target_executors"):
            s(self, name, tuple(getattr(self, name)))
        _validate_plan(self)
        s(self, "source_manifest_identity",
          None if self.source_manifest is None else self.source_manifest.manifest_identity)

    def __reduce__(self):
        return (_rebuild_plan, tuple(tuple(v) if isinstance(v, _RegionTable) else v
                                     for v in (getattr(self, f.name) for f in fields(self)
                                               if f.init)))

    @property
    def total_bytes(self) -> int:
        ops = self.operations
        if isinstance(ops, _RegionTable):   # native plan: from its columns
            n = ops._native
            return int((n.inner * n.segments).sum())
        return sum(op.total_bytes for op in ops)

    @property
    def source_placement_id(self) -> Optional[str]:
        return None if self.source_placement is None else self.source_placement.placement_id

    @property
    def target_placement_id(self) -> str:
        return self.target_placement.placement_id

    @property
    def pipeline_routes(self) -> Tuple[PipelineRouteGroup, ...]:
        groups: Dict[Tuple[Any, ...], List[int]] = defaultdict(list)
        for i, op in enumerate(self.operations):
            src = op.source
            spp = src.rank.pp if isinstance(src, PlacementFragment) else None
            sst = src.pipeline_stage_id if isinstance(src, PlacementFragment) else None
            groups[(spp, sst, op.target.rank.pp, op.target.pipeline_stage_id)].append(i)

        def key(k: Tuple[Any, ...]) -> Tuple[int, ...]:
            return tuple(-1 if v is None else v for v in k)
        return tuple(PipelineRouteGroup(*k, tuple(groups[k])) for k in sorted(groups, key=key))

    def operation_indices_for_executor(self, executor: PlacementExecutorPlan,
                                       side: str) -> Tuple[int, ...]:
        if side not in ("source", "target"):
            raise ValueError("invalid executor side")
        executors = self.source_executors if side == "source" else self.target_executors
        if executor not in executors:
            raise ValueError(f"{side} executor is not part of this logical plan")
        mine = set(executor.placement_fragment_ids)
        ops = self.operations
        if isinstance(ops, _RegionTable):   # native plan: from its columns
            n = ops._native
            frags, col = (n.targets, n.target) if side == "target" else (n.sources, n.source)
            chosen = [i for i, f in enumerate(frags) if f.fragment_id in mine]
            np = _np()
            return tuple(np.flatnonzero(np.isin(col, chosen)).tolist())
        return tuple(i for i, op in enumerate(ops)
                     if getattr(op, side).fragment_id in mine)

    def validate_source_manifest_snapshot(self) -> WeightManifest:
        if self.source_manifest is None:
            raise ValueError("logical plan has no source manifest")
        rebuilt = validate_weight_manifest_snapshot(self.source_manifest)
        if rebuilt.manifest_identity != self.source_manifest_identity:
            raise ValueError("weight manifest snapshot is invalid: identity differs")
        return rebuilt

    def validate_source_placement_snapshot(self) -> WeightPlacementManifest:
        if self.source_placement is None:
            raise ValueError("logical plan has no source placement")
        p = self.source_placement
        try:
            with no_planner_columns():      # compared, never planned
                rebuilt = _placement_from_json(_placement_to_json(p))
        except ValueError as exc:
            raise ValueError(f"source placement snapshot is invalid: {exc}") from None
        if rebuilt != p or rebuilt.placement_id != p.placement_id:
            raise ValueError("source placement snapshot is invalid")
        return rebuilt


def _rebuild_plan(*args: Any) -> LogicalTransferPlan:
    return LogicalTransferPlan(*args)


def _validate_plan(plan: LogicalTransferPlan) -> None:
    check_str("resource_id", plan.resource_id)
    check_str("revision", plan.revision)
    if (plan.source_placement is None) == (plan.source_manifest is None):
        raise ValueError("logical plan requires exactly one source provenance")
    if not isinstance(plan.planning_limits, PlanningLimits):
        raise ValueError("planning_limits must be PlanningLimits")
    PlanningLimits(**{f.name: getattr(plan.planning_limits, f.name)
                      for f in fields(PlanningLimits)})
    if not isinstance(plan.target_placement, WeightPlacementManifest):
        raise ValueError("target_placement must be a WeightPlacementManifest")
    for op in plan.operations:
        if not isinstance(op, TransferRegion):
            raise ValueError("logical plan operations must contain TransferRegion")
    if plan.source_manifest is not None:
        m = validate_weight_manifest_snapshot(plan.source_manifest)
        if plan.source_tensors != tuple(sorted(m.tensors, key=lambda t: t.tensor_id)):
            raise ValueError("logical plan source tensor catalog differs")
        by_id = {f.fragment_id: f for f in m.fragments}
        for op in plan.operations:
            if by_id.get(op.source.fragment_id) != op.source:
                raise ValueError("logical plan and source manifest fragment snapshots differ")
        if plan.source_executors:
            raise ValueError("logical plan from a stored source has no source executors")
    else:
        src = plan.source_placement
        if not isinstance(src, WeightPlacementManifest):
            raise ValueError("source_placement must be a WeightPlacementManifest")
        if plan.source_tensors != src.tensors:
            raise ValueError("logical plan source tensor catalog differs")
        by_id = {f.placement_fragment_id: f for f in src.fragments}
        for op in plan.operations:
            if by_id.get(op.source.fragment_id) != op.source:
                raise ValueError("logical plan and source placement fragment snapshots differ")
        _check_executors(src, plan.source_executors, "source")
    tgt = plan.target_placement
    by_id = {f.placement_fragment_id: f for f in tgt.fragments}
    for op in plan.operations:
        if by_id.get(op.target.fragment_id) != op.target:
            raise ValueError("logical plan and target placement fragment snapshots differ")
    _check_executors(tgt, plan.target_executors, "target")
    regions: Dict[str, List[TransferRegion]] = defaultdict(list)
    for op in plan.operations:
        regions[op.target.fragment_id].append(op)
    for ex in plan.target_executors:
        for fid in ex.placement_fragment_ids:
            if not regions_exactly_cover(by_id[fid], regions.get(fid, ())):
                raise ValueError(f"logical target fragment is not fully covered: {fid}")


def _check_executors(placement: WeightPlacementManifest,
                     executors: Sequence[PlacementExecutorPlan], side: str) -> None:
    for ex in executors:
        if not isinstance(ex, PlacementExecutorPlan):
            raise ValueError(f"logical plan {side} executors must contain "
                             "PlacementExecutorPlan")
        part = None
        for p in placement.parts:
            if p.participant_id == ex.participant_id:
                part = p
        if part is None or ex != _executor(placement, part):
            raise ValueError(f"logical plan {side} executor does not match its placement part")


# --- planning --------------------------------------------------------------

def _check_identity(src: Any, tgt: WeightPlacementManifest) -> None:
    for name in ("resource_id", "revision", "weight_generation"):
        if getattr(src, name) != getattr(tgt, name):
            raise ValueError(f"source and target {name} differ")


_COMPARED = ("global_shape", "dtype", "itemsize", "layer_id", "expert_id")


def _check_catalog(source: Dict[str, TensorDescriptor], target: Sequence[TensorDescriptor],
                   exact: bool) -> None:
    """Same tensors (all of them unless the target is local), same layout
    and data; the axis declarations may differ — that is resharding."""
    tids = {t.tensor_id for t in target}
    if exact:
        missing = sorted(set(source) - tids)
        if missing:
            raise ValueError(f"target manifests are missing tensors: {', '.join(missing)}")
    unknown = sorted(tids - set(source))
    if unknown:
        raise ValueError(f"target manifests contain unknown tensors: {', '.join(unknown)}")
    for t in target:
        s = source[t.tensor_id]
        if s.layout_fingerprint != t.layout_fingerprint:
            raise ValueError(f"layout mismatch for tensor {t.tensor_id}")
        if any(getattr(s, a) != getattr(t, a) for a in _COMPARED):
            raise ValueError(f"tensor descriptor mismatch: {t.tensor_id}")


def _owner_kinds(t: TensorDescriptor) -> Tuple[str, ...]:
    return _owner_kinds_of(t.parallel_axes)


def _owner_kinds_of(axes: Sequence[Any]) -> Tuple[str, ...]:
    return tuple(a.kind for a in axes if isinstance(a, OwnershipAxis))


def _dp_owned(t: TensorDescriptor) -> bool:
    return "dp" in _owner_kinds(t)


def _covers(t: TensorDescriptor, frags: Sequence[Any]) -> bool:
    boxes = {(f.global_offset, f.local_shape) for f in frags}
    return boxes_exactly_cover((0,) * t.ndim, t.global_shape, boxes)


def _check_target_coverage(tensors: Sequence[TensorDescriptor],
                           frags: Sequence[PlacementFragment], dps: Sequence[int]) -> None:
    by_tensor: Dict[str, List[PlacementFragment]] = defaultdict(list)
    for f in frags:
        by_tensor[f.tensor_id].append(f)
    for t in tensors:
        _check_tensor_target_coverage(t, by_tensor[t.tensor_id], dps)


def _check_tensor_target_coverage(t: TensorDescriptor, frags: Sequence[PlacementFragment],
                                  dps: Sequence[int]) -> None:
    """One tensor of `_check_target_coverage`: every owner group (and,
    unless DP owns the tensor, its fragments at each target DP rank) tiles
    the tensor, identical boxes counted once."""
    owners = [k for k in _owner_kinds(t)]
    groups: Dict[Tuple[int, ...], List[PlacementFragment]] = defaultdict(list)
    for f in frags:
        groups[tuple(f.rank.coordinate(k) for k in owners)].append(f)
    if _dp_owned(t):
        for g in groups.values():
            if not _covers(t, g):
                raise ValueError(f"target tensor is not fully covered by its DP owner: "
                                 f"{t.tensor_id}")
        return
    for dp in dps:
        for g in groups.values():
            if not _covers(t, [f for f in g if f.rank.dp == dp]):
                raise ValueError(f"target tensor is not fully covered: {t.tensor_id}: "
                                 f"dp={dp}")


def _placement_key(f: PlacementFragment) -> Tuple[Any, ...]:
    return (*f.rank.sort_key(), f.placement_fragment_id)


def _representatives(frags: Sequence[PlacementFragment]) -> List[PlacementFragment]:
    best: Dict[Tuple[Any, ...], PlacementFragment] = {}
    for f in frags:
        box = (f.global_offset, f.local_shape)
        if box not in best or _placement_key(f) < _placement_key(best[box]):
            best[box] = f
    return list(best.values())


class _PlacementSource:
    """Per tensor and target DP rank, the source fragments that tile the
    tensor once (see the module note for the choice)."""

    def __init__(self, placement: WeightPlacementManifest) -> None:
        self.tensors = {t.tensor_id: t for t in placement.tensors}
        self.frags: Dict[str, List[PlacementFragment]] = defaultdict(list)
        for f in placement.fragments:
            self.frags[f.tensor_id].append(f)
        self.cache: Dict[Tuple[str, int], List[PlacementFragment]] = {}
        self.replicas: Dict[str, List[int]] = {}

    def _complete_owners(self, t: TensorDescriptor, frags: Sequence[PlacementFragment]
                         ) -> Dict[Tuple[int, ...], List[PlacementFragment]]:
        kinds = _owner_kinds(t)
        groups: Dict[Tuple[int, ...], List[PlacementFragment]] = defaultdict(list)
        for f in frags:
            groups[tuple(f.rank.coordinate(k) for k in kinds)].append(f)
        return {o: g for o, g in groups.items() if _covers(t, g)}

    def candidates(self, tensor_id: str, dp: int) -> List[PlacementFragment]:
        t = self.tensors[tensor_id]
        if _dp_owned(t):
            key = (tensor_id, -1)
            if key not in self.cache:
                owners = self._complete_owners(t, self.frags[tensor_id])
                if not owners:
                    raise ValueError("DP-owned source tensor has no complete declared owner")
                if len(owners) > 1:
                    raise ValueError("DP-owned source tensor has ambiguous declared owners")
                self.cache[key] = _representatives(next(iter(owners.values())))
            return self.cache[key]
        order = self.replicas.get(tensor_id)
        if order is None:
            order = self.replicas[tensor_id] = self._replicas(t)
        chosen = order[dp % len(order)]
        return self.cache[(tensor_id, chosen)]

    def _replicas(self, t: TensorDescriptor) -> List[int]:
        """The complete DP replicas of a tensor, each reduced to its minimum
        complete owner's representatives (cached under (tensor, dp))."""
        by_dp: Dict[int, List[PlacementFragment]] = defaultdict(list)
        for f in self.frags[t.tensor_id]:
            by_dp[f.rank.dp].append(f)
        replicas: Dict[int, List[PlacementFragment]] = {}
        for d, g in sorted(by_dp.items()):
            owners = self._complete_owners(t, g)
            if owners:
                replicas[d] = owners[min(owners)]
        if not replicas:
            raise ValueError("source manifests have no complete DP replica; tensors are not "
                             "fully covered")
        tilings = {frozenset((f.global_offset, f.local_shape) for f in g)
                   for g in replicas.values()}
        if len(tilings) > 1:
            raise ValueError(f"source DP replicas are tiled differently: {t.tensor_id}")
        for d, g in replicas.items():
            self.cache[(t.tensor_id, d)] = _representatives(g)
        return sorted(replicas)


def _intersect(a: Any, b: Any) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    off, shape = [], []
    for ao, al, bo, bl in zip(a.global_offset, a.local_shape, b.global_offset, b.local_shape):
        lo, hi = max(ao, bo), min(ao + al, bo + bl)
        if lo >= hi:
            return None
        off.append(lo)
        shape.append(hi - lo)
    return tuple(off), tuple(shape)


def _regions(targets: Sequence[PlacementFragment], source_for: Any,
             limits: PlanningLimits) -> List[TransferRegion]:
    """Every overlap of each target fragment with its candidate source
    boxes, limits enforced on the geometry before any object is built."""
    pending = []
    total = 0
    for tf in targets:
        covered = 0
        for sf in source_for(tf):
            hit = _intersect(sf, tf)
            if hit is None:
                continue
            geo = region_geometry(sf, tf, *hit)
            segments = prod(geo[3])
            if segments > limits.max_segments_per_region:
                raise ValueError(f"logical transfer region exceeds max_segments_per_region: "
                                 f"{segments} > {limits.max_segments_per_region}")
            total += segments
            if total > limits.max_total_lowered_segments:
                raise ValueError(f"logical transfer plan exceeds max_total_lowered_segments: "
                                 f"{total} > {limits.max_total_lowered_segments}")
            pending.append((tf, sf, hit, geo))
            if len(pending) > limits.max_transfer_regions:
                raise ValueError(f"logical transfer plan exceeds max_transfer_regions: "
                                 f"{limits.max_transfer_regions}")
            covered += prod(hit[1])
        if covered != prod(tf.local_shape):
            raise ValueError(f"target fragment is not fully covered: {tf.fragment_id}")
    return [TransferRegion(tf.tensor_id, sf, tf, off, shape, *geo)
            for tf, sf, (off, shape), geo in pending]


def _op_key(op: TransferRegion) -> Tuple[Any, ...]:
    return (op.target.fragment_id, op.target_base_offset, op.source.fragment_id,
            op.source_base_offset)


def _rank_key(ex: PlacementExecutorPlan) -> Tuple[int, ...]:
    return ex.rank.sort_key()


def _limits(planning_limits: Optional[PlanningLimits]) -> PlanningLimits:
    if planning_limits is None:
        return PlanningLimits()
    if not isinstance(planning_limits, PlanningLimits):
        raise ValueError("planning_limits must be PlanningLimits")
    return planning_limits


def _target_parts(target: WeightPlacementManifest) -> List[WeightPlacementPart]:
    return [p for p in target.parts if p.fragments]


def _plan_from_placement(source: WeightPlacementManifest, target: WeightPlacementManifest,
                         parts: Sequence[WeightPlacementPart], exact: bool,
                         limits: PlanningLimits) -> LogicalTransferPlan:
    if native_available():
        try:
            with _no_gc():
                return _native_placement(source, target, parts, exact, limits)
        except _NativeRefused:
            pass
    if not isinstance(source, WeightPlacementManifest):
        raise ValueError("source must be a WeightPlacementManifest")
    _check_identity(source, target)
    tensors = _selected_tensors(target, parts)
    _check_catalog({t.tensor_id: t for t in source.tensors}, tensors, exact)
    targets = [f for p in parts for f in p.fragments]
    if not targets:
        raise ValueError("target manifests have no fragments")
    if exact:
        _check_target_coverage(tensors, targets, sorted({p.rank.dp for p in parts}))
    src = _PlacementSource(source)
    ops = sorted(_regions(targets, lambda tf: src.candidates(tf.tensor_id, tf.rank.dp),
                          limits), key=_op_key)
    read = {op.source.fragment_id for op in ops}
    source_executors = sorted((_executor(source, p) for p in source.parts
                               if any(f.placement_fragment_id in read for f in p.fragments)),
                              key=_rank_key)
    return LogicalTransferPlan(
        source.resource_id, source.revision, source, target, source.tensors, tensors,
        tuple(ops), None, limits, tuple(source_executors),
        tuple(sorted((_executor(target, p) for p in parts), key=_rank_key)))


def _selected_tensors(target: WeightPlacementManifest,
                      parts: Sequence[WeightPlacementPart]) -> Tuple[TensorDescriptor, ...]:
    tids = sorted({t.tensor_id for p in parts for t in p.tensors})
    by_id = {t.tensor_id: t for t in target.tensors}
    return tuple(by_id[t] for t in tids)


def plan_placement_transfer(source_placement: WeightPlacementManifest,
                            target_placement: WeightPlacementManifest, *,
                            planning_limits: Optional[PlanningLimits] = None
                            ) -> LogicalTransferPlan:
    """Plan a complete placement into every non-empty target participant."""
    limits = _limits(planning_limits)
    if not isinstance(target_placement, WeightPlacementManifest):
        raise ValueError("target must be a WeightPlacementManifest")
    parts = _target_parts(target_placement)
    return _plan_from_placement(source_placement, target_placement, parts,
                                exact=True, limits=limits)


def plan_placement_transfer_to_local_target(
        source_placement: WeightPlacementManifest, target_placement: WeightPlacementManifest,
        target_participant_id: Optional[str] = None, *,
        planning_limits: Optional[PlanningLimits] = None) -> LogicalTransferPlan:
    """Plan into one target participant, which may hold a subset of the
    tensors."""
    limits = _limits(planning_limits)
    if not isinstance(target_placement, WeightPlacementManifest):
        raise ValueError("target must be a WeightPlacementManifest")
    if target_participant_id is None:
        if target_placement.topology.world_size != 1:
            raise ValueError("target_participant_id is required for a multi-participant "
                             "target")
        target_participant_id = target_placement.parts[0].participant_id
    part = None
    for p in target_placement.parts:
        if p.participant_id == target_participant_id:
            part = p
    if part is None:
        raise ValueError(f"unknown target participant: {target_participant_id}")
    if not part.fragments:
        raise ValueError("local target manifest has no fragments")
    return _plan_from_placement(source_placement, target_placement, [part], exact=False,
                                limits=limits)


def plan_stored_transfer_to_target_placement(
        source_manifest: WeightManifest, target_placement: WeightPlacementManifest, *,
        planning_limits: Optional[PlanningLimits] = None) -> LogicalTransferPlan:
    """Plan a committed snapshot into every non-empty target participant."""
    limits = _limits(planning_limits)
    if not isinstance(source_manifest, WeightManifest):
        raise ValueError("source must be a WeightManifest")
    if not isinstance(target_placement, WeightPlacementManifest):
        raise ValueError("target must be a WeightPlacementManifest")
    if native_available():
        try:
            with _no_gc():
                return _native_stored(source_manifest, target_placement, limits)
        except _NativeRefused:
            pass
    _check_identity(source_manifest, target_placement)
    parts = _target_parts(target_placement)
    tensors = _selected_tensors(target_placement, parts)
    _check_catalog({t.tensor_id: t for t in source_manifest.tensors}, tensors, True)
    targets = [f for p in parts for f in p.fragments]
    if not targets:
        raise ValueError("target manifests have no fragments")
    _check_target_coverage(tensors, targets, sorted({p.rank.dp for p in parts}))
    stored: Dict[str, List[StoredFragment]] = defaultdict(list)
    for f in sorted(source_manifest.fragments, key=lambda f: (f.object_key, f.fragment_id)):
        stored[f.tensor_id].append(f)
    ops = sorted(_regions(targets, lambda tf: stored[tf.tensor_id], limits), key=_op_key)
    return LogicalTransferPlan(
        source_manifest.resource_id, source_manifest.revision, None, target_placement,
        tuple(sorted(source_manifest.tensors, key=lambda t: t.tensor_id)), tensors,
        tuple(ops), source_manifest, limits, (),
        tuple(sorted((_executor(target_placement, p) for p in parts), key=_rank_key)))


# --- the native core ---------------------------------------------------------
#
# The functions above are the reference.  On the hot path the same plan is
# made by libmooncake (mooncake/reshard.h, through the SWIG module): the
# policy stays here (identity, catalogue, coverage, the source choice), the
# box intersection and region geometry of every target fragment run in C
# over integer columns, and the plan's operations are materialized as
# TransferRegion objects only when someone looks at them.  The columns of a
# manifest are derived once per (immutable) manifest and kept on it, as
# manifest._fragment_index is, each read in one C pass over the fragments
# (reshard_attr_ints); a large manifest derives them when it is constructed
# (derive_columns), so that the first plan of a freshly published one
# reads arrays, not objects.  The target's coverage and the source choice
# are decided on those columns (mc_reshard_boxes_tile, numpy) wherever
# they prove the reference's rule holds -- every group of boxes a grid
# that tiles its tensor; the tensors they do not prove (irregular tilings,
# real gaps) go through the reference's rule, in its order, so a refusal
# is the reference's.  Without the native module, or for input it refuses
# as malformed, the reference planner runs.

try:
    from mooncake import capi as _capi
    _NATIVE_OK = hasattr(_capi, "mc_reshard_plan_create")
except Exception:  # pragma: no cover - depends on the built extension
    _capi = None
    _NATIVE_OK = False

_native_state = threading.local()
_ATTR_INTS = getattr(_capi, "reshard_attr_ints", None) if _NATIVE_OK else None
_BOXES_TILE = getattr(_capi, "mooncake_reshard_boxes_tile", None) if _NATIVE_OK else None

# mc_reshard_refusal_t
_BAD_INPUT, _NOT_COVERED, _TOO_MANY_REGIONS, _REGION_SEGMENTS, _TOTAL_SEGMENTS = 1, 2, 3, 4, 5
# mc_reshard_plan_column_t / mc_reshard_reads_column_t
(_C_TARGET, _C_SOURCE, _C_SBASE, _C_TBASE, _C_INNER, _C_NLOOPS, _C_SEGMENTS, _C_OFF,
 _C_SHAPE) = range(9)
_R_KEY, _R_SRC, _R_LEN, _R_TARGET, _R_DST = range(5)


class _Frags(ctypes.Structure):
    _fields_ = [("n", ctypes.c_size_t), ("width", ctypes.c_size_t),
                ("offsets", ctypes.c_void_p), ("shapes", ctypes.c_void_p),
                ("ndims", ctypes.c_void_p), ("order", ctypes.c_void_p)]


class _Params(ctypes.Structure):
    _fields_ = [("field_mask", ctypes.c_uint64), ("targets", _Frags),
                ("target_itemsizes", ctypes.c_void_p), ("target_sets", ctypes.c_void_p),
                ("sources", _Frags), ("n_sets", ctypes.c_size_t),
                ("set_starts", ctypes.c_void_p), ("set_members", ctypes.c_void_p),
                ("max_transfer_regions", ctypes.c_uint64),
                ("max_segments_per_region", ctypes.c_uint64),
                ("max_total_lowered_segments", ctypes.c_uint64)]


if _NATIVE_OK and ctypes.sizeof(_Params) != _capi.mooncake_reshard_params_size():
    _NATIVE_OK = False  # pragma: no cover - a header/binding mismatch


def native_available() -> bool:
    """Whether plans are made by libmooncake's planner core."""
    return _NATIVE_OK and getattr(_native_state, "enabled", True)


def reference_planner():
    """Plan with the pure-Python reference in this thread (tests compare
    the two)."""
    return _thread_flag(_native_state, "enabled", False, True)


def _np():
    import numpy as np
    return np


def _int64_view(addr: int, n: int) -> Any:
    np = _np()
    if n == 0:
        return np.zeros(0, np.int64)
    return np.ctypeslib.as_array(ctypes.cast(addr, ctypes.POINTER(ctypes.c_int64)), (n,))


def _attr_ints(objs: Sequence[Any], name: str, width: Optional[int] = None,
               mapping: Optional[Dict[Any, int]] = None) -> Any:
    """getattr(o, name) (mapping[...] when given; with [dict], values not
    in it are added with the next code) of every object as int64: a column
    of ints, or n x width rows of int tuples, left-aligned and zero-padded.
    One C call where the binding has reshard_attr_ints."""
    np = _np()
    n = len(objs)
    out = np.empty(n if width is None else (n, width), np.int64)
    if _ATTR_INTS is not None and (width is None or width > 0):
        _ATTR_INTS(objs, name, out, None, mapping)
        return out
    values = map(attrgetter(name), objs)
    if isinstance(mapping, list):       # [dict]: number new values as they come
        codes = mapping[0]
        values = (codes.setdefault(v, len(codes)) for v in values)
    elif mapping is not None:
        values = map(mapping.__getitem__, values)
    if width is None:
        out[:] = np.fromiter(values, np.int64, n)
        return out
    out[:] = 0
    for i, v in enumerate(values):
        out[i, :len(v)] = v
    return out


def _attr_columns(objs: Sequence[Any], specs: Sequence[Tuple[str, Optional[int], Any]]
                  ) -> List[Any]:
    """`_attr_ints` of several attributes (name, width, mapping), read in
    one pass over the objects: touching each object once matters when
    they lie scattered in memory (a placement's fragments, sorted by id)."""
    np = _np()
    n = len(objs)
    outs = [np.empty(n if w is None else (n, w), np.int64) for _, w, _ in specs]
    if _ATTR_INTS is not None and all(w is None or w > 0 for _, w, _ in specs):
        _ATTR_INTS(objs, tuple(name for name, _, _ in specs), tuple(outs),
                   (None,) * len(specs), tuple(m for _, _, m in specs))
        return outs
    return [_attr_ints(objs, name, w, m) for name, w, m in specs]


class _Columns:
    """Offsets and shapes of fragments as n x width int64 rows (left
    aligned) and their dimension counts."""

    __slots__ = ("off", "shape", "ndim", "width", "n")

    @classmethod
    def of(cls, off: Any, shape: Any, ndim: Any) -> "_Columns":
        """Columns already read (n x width, left-aligned, zero-padded)."""
        c = cls.__new__(cls)
        c.n, c.width = len(ndim), off.shape[1]
        c.off, c.shape, c.ndim = off, shape, ndim
        return c

    def __init__(self, frags: Sequence[Any]) -> None:
        np = _np()
        n = self.n = len(frags)
        shapes = list(map(attrgetter("local_shape"), frags))
        offsets = list(map(attrgetter("global_offset"), frags))
        self.ndim = np.fromiter(map(len, shapes), np.int64, n)
        w = self.width = int(self.ndim.max()) if n else 1
        if n and int(self.ndim.min()) == w:
            self.off = np.fromiter(chain.from_iterable(offsets), np.int64, n * w).reshape(n, w)
            self.shape = np.fromiter(chain.from_iterable(shapes), np.int64, n * w).reshape(n, w)
            return
        # mixed ranks: one flat pass, then each value to its (row, column)
        total = int(self.ndim.sum())
        rows = np.repeat(np.arange(n, dtype=np.int64), self.ndim)
        cols = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(self.ndim) - self.ndim,
                                                            self.ndim)
        self.off = np.zeros((n, w), np.int64)
        self.shape = np.zeros((n, w), np.int64)
        self.off[rows, cols] = np.fromiter(chain.from_iterable(offsets), np.int64, total)
        self.shape[rows, cols] = np.fromiter(chain.from_iterable(shapes), np.int64, total)

    def widened(self, w: int) -> Tuple[Any, Any]:
        np = _np()
        if w == self.width:
            return self.off, self.shape
        pad = ((0, 0), (0, w - self.width))
        return np.pad(self.off, pad), np.pad(self.shape, pad)

    def boxes(self) -> Tuple[Any, Any]:
        """(offsets, shapes) at least one column wide, the dimensions a
        fragment lacks as extent 1 at 0 (so that volumes are products)."""
        np = _np()
        off, shape = self.widened(max(1, self.width))
        pad = np.arange(off.shape[1])[None, :] >= self.ndim[:, None]
        return off, np.where(pad, 1, shape)


def _catalog_keys(tensors: Sequence[TensorDescriptor]) -> Dict[str, Tuple[Any, ...]]:
    return {t.tensor_id: (t.layout_fingerprint, t.global_shape, t.dtype, t.itemsize,
                          t.layer_id, t.expert_id) for t in tensors}


def _tensor_columns(tensors: Sequence[TensorDescriptor]) -> Tuple[Any, Any, Any]:
    """(itemsize, extent, ndim) of each tensor: the extents n x width (at
    least 1), a dimension a tensor lacks as 1."""
    np = _np()
    nt = len(tensors)
    itemsize, ndim = np.empty(nt, np.int64), np.zeros(nt, np.int64)
    widths = [4]
    while _ATTR_INTS is not None and nt and widths:
        ext = np.empty((nt, widths.pop()), np.int64)
        try:
            _ATTR_INTS(tensors, ("itemsize", "global_shape"), (itemsize, ext), (None, ndim),
                       (None, None))
            break
        except ValueError:      # a rank above 4: once more, wide enough
            if ext.shape[1] != 4:
                raise
            widths.append(max(len(t.global_shape) for t in tensors))
    else:
        itemsize = np.fromiter((t.itemsize for t in tensors), np.int64, nt)
        ndim = np.fromiter((t.ndim for t in tensors), np.int64, nt)
        ext = np.zeros((nt, max(1, int(ndim.max()) if nt else 1)), np.int64)
        for i, t in enumerate(tensors):
            ext[i, :t.ndim] = t.global_shape
    w = max(1, int(ndim.max()) if nt else 1)
    ext = ext[:, :w] if ext.shape[1] >= w else np.pad(ext, ((0, 0), (0, w - ext.shape[1])))
    return itemsize, np.where(np.arange(w)[None, :] >= ndim[:, None], 1, ext), ndim


class _PlacementCache:
    """What the native planner needs of a placement, derived once: per
    fragment its columns, tensor and part; per part its rank coordinates;
    per tensor its extent and owner axes (the coverage check's groups)."""

    def __init__(self, p: WeightPlacementManifest, hint: Optional[Tuple[Any, ...]] = None
                 ) -> None:
        np = _np()
        frags = self.frags = p.fragments             # sorted by id: index = id rank
        n = len(frags)
        self.parts = p.parts
        self._index: Optional[Dict[str, int]] = None
        self.tensor_index = {t.tensor_id: i for i, t in enumerate(p.tensors)}
        nt = len(p.tensors)
        self.itemsize, ext, self.tensor_ndim = _tensor_columns(p.tensors)
        w = ext.shape[1]
        self.frag_tensor, off, shape = _attr_columns(
            frags, (("tensor_id", None, self.tensor_index), ("global_offset", w, None),
                    ("local_shape", w, None)))
        self.cols = _Columns.of(off, shape, self.tensor_ndim[self.frag_tensor])
        self.box_off, self.box_shape = self.cols.boxes()
        self.tensor_ext = ext
        # capped: a volume past 2**62 sends its tensors to the reference
        big = ext.astype(float).prod(axis=1) >= 2.0 ** 62
        self.tensor_volume = np.where(big, 2 ** 62, np.where(big[:, None], 1, ext).prod(axis=1))
        masks: Dict[Any, List[bool]] = {}
        for axes in map(attrgetter("parallel_axes"), p.tensors):
            if axes not in masks:
                kinds = _owner_kinds_of(axes)
                masks[axes] = [k in kinds for k in _KINDS]
        self.tensor_owners = np.array([masks[a] for a in map(attrgetter("parallel_axes"),
                                                             p.tensors)],
                                      bool).reshape(nt, 4)
        self.part_ids: Optional[List[Tuple[str, ...]]] = None
        if hint is not None:
            # from the constructor: the fragments of its parts one after the
            # other ("flat"), the flat position of each sorted one, and
            # their ids -- a part's positions without reading its objects
            order, ids, spans = hint
            inv = np.empty(n, np.int64)
            inv[np.asarray(order, np.int64)] = np.arange(n, dtype=np.int64)
            where = [spans[part.participant_id] for part in p.parts]
            self.part_frags = [inv[a:b] for a, b in where]
            self.part_ids = [tuple(ids[a:b]) for a, b in where]
        else:
            # a part's fragments are the placement's objects: their
            # positions by identity, without reading them
            at = dict(zip(map(id, frags), range(n))).__getitem__
            self.part_frags = [np.fromiter(map(at, map(id, part.fragments)), np.int64,
                                           len(part.fragments)) for part in p.parts]
        self.frag_part = np.zeros(n, np.int64)
        for i, idx in enumerate(self.part_frags):
            self.frag_part[idx] = i
        # a fragment's rank is its part's
        self.part_coords = np.array([[getattr(part.rank, k) for k in _KINDS]
                                     for part in p.parts], np.int64).reshape(-1, 4)
        self.frag_dp = self.part_coords[self.frag_part, 0] if n else np.zeros(0, np.int64)
        self.catalog = _catalog_keys(p.tensors)
        self.covered: set = set()                    # participant selections checked
        self.executors: Dict[int, PlacementExecutorPlan] = {}
        self.source: Optional[_PlacementSource] = None
        self.source_sets: Dict[Tuple[str, int], Any] = {}
        self._single: Optional[Dict[int, Any]] = None
        self._targets: Dict[Tuple[str, ...], Tuple[Any, List[Any]]] = {}
        self.tensor_ids = list(self.tensor_index)
        self.tensors = p.tensors

    def targets_of(self, parts: Sequence[WeightPlacementPart]) -> Tuple[Any, List[Any]]:
        """(positions, fragments) of the parts' fragments, parts in the
        order given; kept per selection (one list of 10 000s of objects)."""
        key = tuple(p.participant_id for p in parts)
        got = self._targets.get(key)
        if got is None:
            np = _np()
            pos = {p.participant_id: i for i, p in enumerate(self.parts)}
            idx = [self.part_frags[pos[pid]] for pid in key]
            tidx = np.concatenate(idx) if idx else np.zeros(0, np.int64)
            frags = self.frags
            got = self._targets[key] = (tidx, list(map(frags.__getitem__, tidx.tolist())))
        return got

    @property
    def index(self) -> Dict[str, int]:
        """Fragment id -> position (for the reference's source choice)."""
        if self._index is None:
            self._index = dict(zip(map(attrgetter("placement_fragment_id"), self.frags),
                                   range(len(self.frags))))
        return self._index

    def groups(self, rows: Any) -> Tuple[Any, Any, Any]:
        """(group of each row, group keys, tensor of each group) of the
        fragments `rows`: a group is (tensor, DP rank, the coordinates of
        the tensor's owner axes) -- the reference's owner groups at one DP
        rank; a DP-owned tensor's owners include DP anyway.  None where
        the key would not fit in int64."""
        np = _np()
        ft = self.frag_tensor[rows]
        coords = self.part_coords[self.frag_part[rows]]        # (dp, pp, ep, tp)
        masked = np.where(self.tensor_owners[ft], coords, -1)
        masked[:, 0] = coords[:, 0]
        radix = coords.max(axis=0) + 2
        span = int(np.prod(radix))
        if (len(self.tensor_ndim) + 1) * float(span) >= 2.0 ** 62:
            return None
        key = ft.copy()
        for c in range(4):
            key = key * radix[c] + (masked[:, c] + 1)
        ukey, group = np.unique(key, return_inverse=True)
        return group.reshape(-1), ukey, ukey // span

    def proven(self, rows: Any, group: Any) -> Any:
        """Per group, whether `_tiles` proves it covers its tensor (groups
        of 3+ dimensions with many boxes are left unproven)."""
        np = _np()
        order = np.argsort(group, kind="stable")
        g, r = group[order], rows[order]
        ft = self.frag_tensor[r]
        ok = _tiles_of(g, self.box_off[r], self.box_shape[r], self.tensor_ext[ft])
        big = np.bincount(g, minlength=len(ok)) > _FAST_COVER_MAX_BOXES
        if big.any():
            first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
            ok &= ~(big & (self.tensor_ndim[ft[first]] > 2))
        return ok

    def single_owner_sets(self) -> Dict[int, Any]:
        """The source choice of the tensors that have one owner group at
        one DP rank, proven to tile them: per tensor index, its
        representatives (per distinct box the lowest (dp, pp, ep, tp, id)
        fragment) in the order of each box's first fragment by id -- what
        `_PlacementSource.candidates` returns for them at every target DP
        rank.  Other tensors are left to it."""
        if self._single is not None:
            return self._single
        np = _np()
        self._single = {}
        n = len(self.frags)
        rows = np.arange(n, dtype=np.int64)
        gk = self.groups(rows) if n else None
        if gk is None or int(self.tensor_volume.max()) >= 2 ** 62:
            return self._single
        group, _, g_tensor = gk
        ok = self.proven(rows, group)
        single = ok & (np.bincount(g_tensor, minlength=len(self.tensor_ndim))[g_tensor] == 1)
        rows = rows[single[group]]
        if not len(rows):
            return self._single
        g = group[rows]
        off, shape = self.box_off[rows], self.box_shape[rows]
        rank = self.part_coords[self.frag_part[rows]]          # (dp, pp, ep, tp)
        w = off.shape[1]
        # by (group, box, rank, id): each box's first row is its representative
        order = np.lexsort([rows] + [rank[:, c] for c in (3, 2, 1, 0)] +
                           [shape[:, d] for d in reversed(range(w))] +
                           [off[:, d] for d in reversed(range(w))] + [g])
        g, rows, off, shape = g[order], rows[order], off[order], shape[order]
        starts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) |
                                      (off[1:] != off[:-1]).any(axis=1) |
                                      (shape[1:] != shape[:-1]).any(axis=1)])
        rep, box_group = rows[starts], g[starts]
        first = np.minimum.reduceat(rows, starts)
        by = np.lexsort((first, box_group))
        rep, box_group = rep[by], box_group[by]
        cut = np.flatnonzero(np.r_[True, box_group[1:] != box_group[:-1]])
        tensors = g_tensor[box_group[cut]].tolist()
        self._single = dict(zip(tensors, np.split(rep, cut[1:])))
        return self._single


class _StoredCache:
    """What the native planner needs of a stored manifest, derived once."""

    def __init__(self, m: WeightManifest) -> None:
        np = _np()
        frags = self.frags = m.fragments
        n = len(frags)
        tensor_ids = list(map(attrgetter("tensor_id"), m.tensors))
        ndim = _tensor_columns(m.tensors)[2]
        w = max(1, int(ndim.max()) if len(ndim) else 1)
        key_index: Dict[str, int] = {}
        ft, off, shape, self.object_offset, self.key_of = _attr_columns(
            frags, (("tensor_id", None, dict(zip(tensor_ids, range(len(tensor_ids))))),
                    ("global_offset", w, None), ("local_shape", w, None),
                    ("object_offset", None, None), ("object_key", None, [key_index])))
        self.keys: List[str] = list(key_index)     # by code: in order of appearance
        self.cols = _Columns.of(off, shape, ndim[ft])
        # The source rank only breaks ties between regions of one target at
        # one target offset, which boxes that tile a tensor never have:
        # the fragments' order serves (no sort of the ids).
        self.order = np.arange(n, dtype=np.int64)
        self._tensor_ids, self._ft = tensor_ids, ft
        self._sets: Dict[bool, Tuple[Dict[str, int], Any, Any]] = {}
        self.catalog = _catalog_keys(m.tensors)

    def sets(self, exact: bool) -> Tuple[Dict[str, int], Any, Any]:
        """(set of each tensor id, set starts, members): the candidate
        sets, per tensor its fragments.  The plan does not depend on their
        order within a set (the stored boxes of a tensor tile it: no two
        regions of a target share an offset), only the limit refusals do:
        the reference tries them by (object_key, fragment_id), `exact`
        gives that order, else they keep the manifest's (no string sort)."""
        got = self._sets.get(exact)
        if got is not None:
            return got
        np = _np()
        frags, ft = self.frags, self._ft
        n = len(frags)
        if exact:
            sort_keys = list(zip(map(attrgetter("tensor_id"), frags),
                                 map(attrgetter("object_key"), frags),
                                 map(attrgetter("fragment_id"), frags)))
            members = np.fromiter(sorted(range(n), key=sort_keys.__getitem__), np.int64, n)
        else:
            members = np.argsort(ft, kind="stable").astype(np.int64)
        ordered = ft[members]
        first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if n else \
            np.zeros(0, np.int64)
        set_of = dict(zip(map(self._tensor_ids.__getitem__, ordered[first].tolist()),
                          range(len(first))))
        got = self._sets[exact] = (set_of, np.append(first, n).astype(np.int64), members)
        return got


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector held off: deriving columns and planning make
    tens of thousands of small objects that form no cycles, and a full
    collection over the heap of a large manifest's objects (0.3 s on the
    bench's VM), due after constructing them, would otherwise land inside
    the plan (it runs after it instead)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _derived_from(obj: Any) -> Tuple[Any, ...]:
    """The fields a cache is derived from (compared by identity: a field
    replaced through object.__setattr__ is derived again)."""
    return (obj.fragments, obj.tensors, getattr(obj, "parts", None))


def _cache(obj: Any, cls: Any) -> Any:
    c = obj.__dict__.get("_native_cache")
    if c is not None and any(a is not b for a, b in zip(c.derived_from, _derived_from(obj))):
        c = None
    if c is None:
        with _no_gc():
            c = cls(obj)
        c.derived_from = _derived_from(obj)
        object.__setattr__(obj, "_native_cache", c)
    return c


# Manifests of at least this many fragments derive what the native planner
# needs of them (the caches above) when they are constructed -- by the
# writers, from_json, from_fragments -- so that the first plan of a fresh
# manifest reads arrays, not 100 000 objects: the constructor has just
# touched every object (they are warm), and every manifest a store
# publishes is planned.  A small manifest costs little either way and need
# not import numpy; nor does a manifest rebuilt only to be compared
# (validate_weight_manifest_snapshot), which skips it.
EAGER_COLUMNS_MIN_FRAGMENTS = 1024


def derive_columns(obj: Any, hint: Optional[Tuple[Any, ...]] = None) -> None:
    """Called at the end of the constructors of WeightPlacementManifest
    (with `hint`, see _PlacementCache) and WeightManifest.  Anything that
    goes wrong here is left to the first plan, which derives the columns
    again and reports it."""
    if (not _NATIVE_OK or len(obj.fragments) < EAGER_COLUMNS_MIN_FRAGMENTS
            or obj.__dict__.get("_native_cache") is not None):
        return
    try:
        if isinstance(obj, WeightManifest):
            _cache(obj, _StoredCache).sets(False)
        else:
            tc = _cache(obj, lambda p: _PlacementCache(p, hint))
            used = [i for i, p in enumerate(obj.parts) if p.fragments]
            _executors(obj, tc, used)
            tc.targets_of([obj.parts[i] for i in used])     # as a target, all of it
    except Exception:
        obj.__dict__.pop("_native_cache", None)


def _eager_derive_columns(obj: Any, hint: Optional[Tuple[Any, ...]] = None) -> None:
    """manifest.derive_planner_columns's way in: derive_columns, looked up
    at each call (so that replacing ``planner.derive_columns`` takes)."""
    derive_columns(obj, hint)


# The manifests call the planner as they are constructed; the planner is
# built on their types, so it hands itself over rather than being imported.
_manifest_module._derive_columns = _eager_derive_columns


class _NativeRefused(Exception):
    """The native core refused the input as malformed: use the reference."""


class _NativePlan:
    """A plan table of libmooncake (freed with this object), its
    parameters (kept alive for lowering) and the fragments its indices
    name."""

    def __init__(self, params: _Params, keep: List[Any], targets: Sequence[Any],
                 sources: Sequence[Any], table: int) -> None:
        self.params, self.keep = params, keep
        self.targets, self.sources = targets, sources
        # (part of each target in the target placement, the parts' ids)
        self.target_parts: Optional[Tuple[Any, List[str]]] = None
        self.table = table
        self._free = weakref.finalize(self, _capi.mc_reshard_table_destroy, table)
        n = self.rows = _capi.mc_reshard_table_rows(table)
        w = self.width = _capi.mc_reshard_table_width(table)
        col = _capi.mc_reshard_table_column
        (self.target, self.source, self.sbase, self.tbase, self.inner, self.nloops,
         self.segments) = (_int64_view(col(table, c), n) for c in range(_C_OFF))
        self.off = _int64_view(col(table, _C_OFF), n * w).reshape(n, w)
        self.shape = _int64_view(col(table, _C_SHAPE), n * w).reshape(n, w)

    def target_owner(self, participant_ids: Sequence[str]) -> Any:
        """Per target fragment (the plan's target column indexes them), the
        position in `participant_ids` of the participant holding it, or -1:
        from the target placement's columns, without reading the objects
        (store_load's executor of each region)."""
        np = _np()
        if self.target_parts is None:
            raise ValueError("the plan's targets have no placement columns")
        parts, part_ids = self.target_parts
        code = {pid: i for i, pid in enumerate(participant_ids)}
        of_part = np.fromiter((code.get(pid, -1) for pid in part_ids), np.int64,
                              len(part_ids))
        return of_part[parts] if len(parts) else np.zeros(0, np.int64)

    def lower(self, keys: Any, offsets: Any, selected: Optional[Any],
              blocks: bool = False) -> Tuple[Any, ...]:
        """(key, src, length, target, dst) columns of the coalesced reads;
        with ``blocks``, of the strided blocks (mc_reshard_plan_lower_blocks:
        length is a row's), followed by their rows, src stride and dst
        stride columns."""
        np = _np()
        keys = np.ascontiguousarray(keys, np.int64)
        offsets = np.ascontiguousarray(offsets, np.int64)
        sel = 0 if selected is None else np.ascontiguousarray(selected, np.uint8)
        fn = (_capi.mooncake_reshard_plan_lower_blocks if blocks else
              _capi.mooncake_reshard_plan_lower)
        st, reads = fn(
            self.table, ctypes.addressof(self.params), int(keys.ctypes.data),
            int(offsets.ctypes.data), 0 if selected is None else int(sel.ctypes.data))
        if st != 0:
            # Lazy: mooncake._errors loads the native extension, which this
            # module may run without (the reference planner); here it is loaded.
            from ..._errors import last_error_detail
            raise RuntimeError(f"reshard lowering failed ({st}): {last_error_detail()}")
        try:
            n = _capi.mc_reshard_table_rows(reads)
            return tuple(_int64_view(_capi.mc_reshard_table_column(reads, c), n).copy()
                         for c in range(8 if blocks else 5))
        finally:
            _capi.mc_reshard_table_destroy(reads)

    def region(self, i: int) -> TransferRegion:
        t = self.targets[int(self.target[i])]
        s = self.sources[int(self.source[i])]
        nd = len(t.local_shape)
        off = tuple(self.off[i, :nd].tolist())
        shape = tuple(self.shape[i, :nd].tolist())
        nl = int(self.nloops[i])
        item = t.nbytes // prod(t.local_shape)
        return TransferRegion(t.tensor_id, s, t, off, shape, int(self.sbase[i]),
                              int(self.tbase[i]), int(self.inner[i]), shape[:nl],
                              c_strides(s.local_shape, item)[:nl],
                              c_strides(t.local_shape, item)[:nl])


class _RegionTable(_SequenceABC):
    """A plan's operations, made as TransferRegion objects on first look
    (a tuple in every observable way: indexing, iteration, ==, hash)."""

    def __init__(self, native: _NativePlan) -> None:
        self._native = native
        self._items: Optional[Tuple[TransferRegion, ...]] = None

    def __len__(self) -> int:
        return self._native.rows

    def _all(self) -> Tuple[TransferRegion, ...]:
        if self._items is None:
            self._items = tuple(self._native.region(i) for i in range(self._native.rows))
        return self._items

    def __getitem__(self, i: Any) -> Any:
        if self._items is not None or isinstance(i, slice):
            return self._all()[i]
        n = self._native.rows
        if not -n <= i < n:
            raise IndexError("operation index out of range")
        return self._native.region(i % n)

    def __iter__(self) -> Iterator[TransferRegion]:
        return iter(self._all())

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (_RegionTable, tuple)):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())

    def __reduce__(self):
        return (tuple, (self._all(),))


def _native_regions(targets: Sequence[Any], tcols: Any, t_order: Any, t_items: Any,
                    t_sets: Any, sources: Sequence[Any], scols: _Columns, s_order: Any,
                    starts: Any, members: Any, limits: PlanningLimits) -> _NativePlan:
    """Run mc_reshard_plan_create; ValueError with the reference's message
    for a refusal."""
    np = _np()
    t_off, t_shape, t_ndim = tcols
    w = max(t_off.shape[1] if len(targets) else 1, scols.width)
    if t_off.shape[1] != w:
        pad = ((0, 0), (0, w - t_off.shape[1]))
        t_off, t_shape = np.pad(t_off, pad), np.pad(t_shape, pad)
    s_off, s_shape = scols.widened(w)
    keep = [np.ascontiguousarray(a, np.int64) for a in
            (t_off, t_shape, t_ndim, t_order, t_items, t_sets, s_off, s_shape, scols.ndim,
             s_order, starts, members)]
    a = [k.ctypes.data for k in keep]
    p = _Params()
    p.targets = _Frags(len(targets), w, a[0], a[1], a[2], a[3])
    p.target_itemsizes, p.target_sets = a[4], a[5]
    p.sources = _Frags(len(sources), w, a[6], a[7], a[8], a[9])
    p.n_sets = len(keep[10]) - 1
    p.set_starts, p.set_members = a[10], a[11]
    p.max_transfer_regions = limits.max_transfer_regions
    p.max_segments_per_region = limits.max_segments_per_region
    p.max_total_lowered_segments = limits.max_total_lowered_segments
    st, table, (kind, index, value, limit) = _capi.mc_reshard_plan_create(ctypes.addressof(p))
    if st != 0:
        if kind == _NOT_COVERED:
            raise ValueError(f"target fragment is not fully covered: "
                             f"{targets[index].fragment_id}")
        if kind == _TOO_MANY_REGIONS:
            raise ValueError(f"logical transfer plan exceeds max_transfer_regions: {limit}")
        if kind == _REGION_SEGMENTS:
            raise ValueError(f"logical transfer region exceeds max_segments_per_region: "
                             f"{value} > {limit}")
        if kind == _TOTAL_SEGMENTS:
            raise ValueError(f"logical transfer plan exceeds max_total_lowered_segments: "
                             f"{value} > {limit}")
        raise _NativeRefused()
    return _NativePlan(p, keep, targets, sources, table)


def _executors(placement: WeightPlacementManifest, cache: _PlacementCache,
               indices: Sequence[int]) -> Tuple[PlacementExecutorPlan, ...]:
    """The executors of parts (by index), sorted by rank; made once per part."""
    out = []
    for i in indices:
        ex = cache.executors.get(i)
        if ex is None:
            ex = cache.executors[i] = _proven_executor(
                placement, placement.parts[i],
                None if cache.part_ids is None else cache.part_ids[i])
        out.append(ex)
    return tuple(sorted(out, key=_rank_key))


def _proven_executor(placement: WeightPlacementManifest, part: WeightPlacementPart,
                     ids: Optional[Tuple[str, ...]] = None) -> PlacementExecutorPlan:
    """`_executor` without re-proving what the placement's constructor
    proved: non-empty ids, unique in the placement, and a part's
    fragments sorted by id -- so the object equals the checked one
    (tests/python/test_reshard_native.py), without a pass over 10 000s of
    ids for each check."""
    ex = object.__new__(PlacementExecutorPlan)
    s = object.__setattr__
    s(ex, "placement_id", placement.placement_id)
    s(ex, "participant_id", part.participant_id)
    s(ex, "rank", part.rank)
    s(ex, "placement_fragment_ids",
      tuple(map(attrgetter("placement_fragment_id"), part.fragments)) if ids is None else ids)
    return ex


def _make_plan(**values: Any) -> LogicalTransferPlan:
    """A plan the planner just derived, without re-deriving it again
    (dataclasses.replace and unpickling still validate everything)."""
    plan = object.__new__(LogicalTransferPlan)
    for name, value in values.items():
        object.__setattr__(plan, name, value)
    m = values["source_manifest"]
    object.__setattr__(plan, "source_manifest_identity",
                       None if m is None else m.manifest_identity)
    return plan


def _targets_of(tc: _PlacementCache, target: WeightPlacementManifest,
                parts: Sequence[WeightPlacementPart]) -> Tuple[Any, List[Any]]:
    return tc.targets_of(parts)


_KINDS = ("dp", "pp", "ep", "tp")     # the columns of _PlacementCache.part_coords
# Groups of 3+ dimensions with more boxes than this are left to the
# reference, whose pairwise overlap check has a budget it may exceed.
_FAST_COVER_MAX_BOXES = 1000


def _tiles_of(group: Any, off: Any, shape: Any, extent: Any) -> Any:
    """`_tiles` by libmooncake's mc_reshard_boxes_tile (one pass over the
    groups instead of numpy's sorts of every row), the same rule; numpy
    where the library refuses the columns (wider than it allows)."""
    np = _np()
    if _BOXES_TILE is None or not len(group):
        return _tiles(group, off, shape, extent)
    cols = [np.ascontiguousarray(a, np.int64) for a in (group, off, shape, extent)]
    ok = np.zeros(int(group[-1]) + 1, np.uint8)
    st = _BOXES_TILE(len(group), off.shape[1], *(int(c.ctypes.data) for c in cols), len(ok),
                     int(ok.ctypes.data))
    if st != 0:
        return _tiles(group, off, shape, extent)
    return ok.astype(bool)


def _tiles(group: Any, off: Any, shape: Any, extent: Any) -> Any:
    """Per group (ids 0..n-1, rows sorted by group), whether its distinct
    boxes provably tile the extent of its tensor: inside it, volumes
    adding up, and along every dimension the intervals the boxes use
    chaining from 0 to the extent without overlap -- two distinct boxes
    then differ in some dimension, where their intervals are disjoint.
    False means "not proven" (an irregular tiling or a real gap)."""
    np = _np()
    n = int(group[-1]) + 1
    w = off.shape[1]
    # identical boxes once: sort by (group, offset, shape), drop repeats
    order = np.lexsort([shape[:, d] for d in reversed(range(w))] +
                       [off[:, d] for d in reversed(range(w))] + [group])
    group, off, shape, extent = group[order], off[order], shape[order], extent[order]
    keep = np.r_[True, (group[1:] != group[:-1]) | (off[1:] != off[:-1]).any(axis=1) |
                 (shape[1:] != shape[:-1]).any(axis=1)]
    group, off, shape, extent = group[keep], off[keep], shape[keep], extent[keep]
    ok = np.ones(n, bool)
    inside = ((off >= 0) & (off + shape <= extent)).all(axis=1)
    ok[group[~inside]] = False
    vol = shape.prod(axis=1)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    ok &= np.add.reduceat(vol, starts) == extent[starts].prod(axis=1)
    for d in range(off.shape[1]):
        o, ln = off[:, d], shape[:, d]
        order = np.lexsort((ln, o, group))
        g, o, ln = group[order], o[order], ln[order]
        keep = np.r_[True, (g[1:] != g[:-1]) | (o[1:] != o[:-1]) | (ln[1:] != ln[:-1])]
        g, o, ln = g[keep], o[keep], ln[keep]
        first = np.r_[True, g[1:] != g[:-1]]
        last = np.r_[g[1:] != g[:-1], True]
        end = o + ln
        bad = (first & (o != 0)) | (last & (end != extent[starts, d][g]))
        bad[1:] |= ~first[1:] & (o[1:] != end[:-1])
        ok[g[bad]] = False
    return ok


def _fast_target_coverage(tensors: Sequence[TensorDescriptor], tc: "_PlacementCache",
                          tidx: Any, dps: Sequence[int]) -> List[int]:
    """The tensors (positions in `tensors`) whose target coverage the
    columns do not prove; the reference's rule checks those.  A group is
    (tensor, DP rank, the coordinates of the tensor's owner axes): the
    reference's owner groups at each target DP rank (a DP-owned tensor's
    groups include DP anyway).  A tensor that is not DP-owned needs every
    owner at every target DP rank; identical boxes count once."""
    np = _np()
    nt = len(tensors)
    if not len(tidx):
        return []
    if tensors is tc.tensors:       # all of them, in their order
        pos = np.arange(nt, dtype=np.int64)
    else:
        pos = np.fromiter(map(tc.tensor_index.__getitem__,
                              map(attrgetter("tensor_id"), tensors)), np.int64, nt)
    local = np.full(len(tc.tensor_ext), -1, np.int64)
    local[pos] = np.arange(nt, dtype=np.int64)
    ft = tc.frag_tensor[tidx]
    lt = local[ft]
    if (lt < 0).any():
        return list(range(nt))
    gk = tc.groups(tidx)
    if gk is None or int(tc.tensor_volume[pos].max()) >= 2 ** 62:
        return list(range(nt))
    group, ukey, g_tensor = gk
    ok_group = tc.proven(tidx, group)
    g_local = local[g_tensor]
    bad = np.zeros(nt, bool)
    bad[g_local[~ok_group]] = True
    # a tensor not DP-owned needs each owner at each target DP rank: its
    # groups with the DP rank left out are its owners
    radix = tc.part_coords[tc.frag_part[tidx]].max(axis=0) + 2
    owner_key = ukey % int(np.prod(radix[1:])) + g_tensor * int(np.prod(radix[1:]))
    n_owner = np.bincount(g_local[np.unique(owner_key, return_index=True)[1]], minlength=nt)
    n_group = np.bincount(g_local, minlength=nt)
    bad |= ~tc.tensor_owners[pos, 0] & (n_group != n_owner * len(dps))
    return np.flatnonzero(bad).tolist()


def _check_target_coverage_fast(tensors: Sequence[TensorDescriptor], tc: "_PlacementCache",
                                parts: Sequence[WeightPlacementPart],
                                dps: Sequence[int]) -> None:
    """`_check_target_coverage` with the tensors the columns prove skipped:
    the reference runs, in order, on the others, so the first refusal is
    the reference's."""
    np = _np()
    pos = {p.participant_id: i for i, p in enumerate(tc.parts)}
    idx = [tc.part_frags[pos[p.participant_id]] for p in parts]
    tidx = np.concatenate(idx) if idx else np.zeros(0, np.int64)
    todo = _fast_target_coverage(tensors, tc, tidx, dps)
    if not todo:
        return
    want = {tensors[i].tensor_id for i in todo}
    by_tensor: Dict[str, List[PlacementFragment]] = defaultdict(list)
    for f in (f for p in parts for f in p.fragments):
        if f.tensor_id in want:
            by_tensor[f.tensor_id].append(f)
    for i in todo:
        _check_tensor_target_coverage(tensors[i], by_tensor[tensors[i].tensor_id], dps)


def _native_checks(src_catalog: Dict[str, Any], source_tensors: Sequence[TensorDescriptor],
                   target: WeightPlacementManifest, tc: _PlacementCache,
                   parts: Sequence[WeightPlacementPart], exact: bool,
                   full: bool) -> Tuple[TensorDescriptor, ...]:
    """The reference's catalogue and coverage checks, each skipped when a
    cheaper comparison proves it passes (equal catalogues; the coverage of
    a participant selection is checked once per target placement)."""
    tensors = target.tensors if full else _selected_tensors(target, parts)
    if not (exact and full and src_catalog == tc.catalog):
        _check_catalog({t.tensor_id: t for t in source_tensors}, tensors, exact)
    if not any(p.fragments for p in parts):
        raise ValueError("target manifests have no fragments")
    if exact:
        key = tuple(p.participant_id for p in parts)
        if key not in tc.covered:
            _check_target_coverage_fast(tensors, tc, parts, sorted({p.rank.dp for p in parts}))
            tc.covered.add(key)
    return tensors


def _native_stored(source: WeightManifest, target: WeightPlacementManifest,
                   limits: PlanningLimits) -> LogicalTransferPlan:
    np = _np()
    _check_identity(source, target)
    parts = _target_parts(target)
    tc = _cache(target, _PlacementCache)
    sc = _cache(source, _StoredCache)
    tensors = _native_checks(sc.catalog, source.tensors, target, tc, parts, True, True)
    tidx, targets = _targets_of(tc, target, parts)
    ft = tc.frag_tensor[tidx]

    def regions(exact: bool) -> _NativePlan:
        set_of, starts, members = sc.sets(exact)
        if len(set_of) == len(sc._tensor_ids) and sc._tensor_ids == tc.tensor_ids:
            # every tensor stored, in the target's order: set i is tensor i
            set_of_tensor = np.arange(len(tc.tensor_ids), dtype=np.int64)
        else:
            set_of_tensor = np.fromiter(map(set_of.get, tc.tensor_ids,
                                            repeat(len(starts) - 1)),
                                        np.int64, len(tc.tensor_ids))
        # a tensor without stored fragments gets the empty set after the last
        starts = np.append(starts, starts[-1])
        return _native_regions(targets, (tc.cols.off[tidx], tc.cols.shape[tidx],
                                         tc.cols.ndim[tidx]), tidx, tc.itemsize[ft],
                               set_of_tensor[ft], sc.frags, sc.cols, sc.order, starts,
                               members, limits)
    try:
        native = regions(False)
    except ValueError as exc:
        if str(exc).startswith("target fragment is not fully covered"):
            raise   # the same in any candidate order
        # a limit: raised as the reference meets it, in its order
        native = regions(True)
    native.target_parts = (tc.frag_part[tidx], [p.participant_id for p in tc.parts])
    return _make_plan(
        resource_id=source.resource_id, revision=source.revision, source_placement=None,
        target_placement=target, source_tensors=tuple(sorted(source.tensors,
                                                             key=lambda t: t.tensor_id)),
        target_tensors=tensors, operations=_RegionTable(native), source_manifest=source,
        planning_limits=limits, source_executors=(),
        target_executors=_executors(target, tc, _part_indices(target, parts)))


def _native_placement(source: WeightPlacementManifest, target: WeightPlacementManifest,
                      parts: Sequence[WeightPlacementPart], exact: bool,
                      limits: PlanningLimits) -> LogicalTransferPlan:
    np = _np()
    if not isinstance(source, WeightPlacementManifest):
        raise ValueError("source must be a WeightPlacementManifest")
    _check_identity(source, target)
    tc = _cache(target, _PlacementCache)
    sc = _cache(source, _PlacementCache)
    full = exact and len(parts) == sum(1 for p in target.parts if p.fragments)
    tensors = _native_checks(sc.catalog, source.tensors, target, tc, parts, exact, full)
    tidx, targets = _targets_of(tc, target, parts)
    # candidate sets per (tensor, target dp), in the reference's order; a
    # source choice that fails is raised after the targets planned before it
    ft = tc.frag_tensor[tidx]
    pair = ft * (int(tc.frag_dp.max()) + 1 if len(tc.frag_dp) else 1) + tc.frag_dp[tidx]
    uniq, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    sets: List[Any] = []
    failed: Optional[Tuple[int, ValueError]] = None
    for u, k in enumerate(first.tolist()):
        f = targets[k]
        key = (f.tensor_id, f.rank.dp)
        members = sc.source_sets.get(key)
        if members is None:
            members = sc.single_owner_sets().get(sc.tensor_index[f.tensor_id])
        if members is None:
            if sc.source is None:
                sc.source = _PlacementSource(source)
            try:
                cands = sc.source.candidates(f.tensor_id, f.rank.dp)
            except ValueError as exc:
                if failed is None or k < failed[0]:
                    failed = (k, exc)
                sets.append(np.zeros(0, np.int64))
                continue
            members = sc.source_sets[key] = np.fromiter(
                (sc.index[c.placement_fragment_id] for c in cands), np.int64, len(cands))
        sets.append(members)
    lens = np.fromiter(map(len, sets), np.int64, len(sets))
    starts = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    members = np.concatenate(sets) if sets else np.zeros(0, np.int64)
    t_sets = inverse.reshape(-1).astype(np.int64)
    cut = len(targets) if failed is None else failed[0]
    sel = slice(0, cut)
    native = _native_regions(targets[:cut], (tc.cols.off[tidx[sel]], tc.cols.shape[tidx[sel]],
                                             tc.cols.ndim[tidx[sel]]), tidx[sel],
                             tc.itemsize[ft[sel]], t_sets[sel], sc.frags, sc.cols,
                             np.arange(len(sc.frags), dtype=np.int64), starts, members, limits)
    if failed is not None:
        raise failed[1]
    native.target_parts = (tc.frag_part[tidx], [p.participant_id for p in tc.parts])
    read = np.unique(sc.frag_part[np.unique(native.source)]).tolist() if native.rows else []
    return _make_plan(
        resource_id=source.resource_id, revision=source.revision, source_placement=source,
        target_placement=target, source_tensors=source.tensors, target_tensors=tensors,
        operations=_RegionTable(native), source_manifest=None, planning_limits=limits,
        source_executors=_executors(source, sc, read),
        target_executors=_executors(target, tc, _part_indices(target, parts)))


def _part_indices(placement: WeightPlacementManifest,
                  parts: Sequence[WeightPlacementPart]) -> List[int]:
    pos = {p.participant_id: i for i, p in enumerate(placement.parts)}
    return [pos[p.participant_id] for p in parts]

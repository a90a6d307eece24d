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
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields
from itertools import product
from math import prod
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .._checks import c_strides, check_str
from ..geometry import boxes_exactly_cover, regions_exactly_cover
from .manifest import (OwnershipAxis, ParallelRank, PlacementFragment, TensorDescriptor,
                       WeightPlacementManifest, WeightPlacementPart)
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
                                 tuple(f.placement_fragment_id for f in part.fragments))


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
        return (_rebuild_plan, tuple(getattr(self, f.name) for f in fields(self) if f.init))

    @property
    def total_bytes(self) -> int:
        return sum(op.total_bytes for op in self.operations)

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
        return tuple(i for i, op in enumerate(self.operations)
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
        from .serde import weight_placement_from_json, weight_placement_to_json
        p = self.source_placement
        try:
            rebuilt = weight_placement_from_json(weight_placement_to_json(p))
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
    return tuple(a.kind for a in t.parallel_axes if isinstance(a, OwnershipAxis))


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
        owners = [k for k in _owner_kinds(t)]
        groups: Dict[Tuple[int, ...], List[PlacementFragment]] = defaultdict(list)
        for f in by_tensor[t.tensor_id]:
            groups[tuple(f.rank.coordinate(k) for k in owners)].append(f)
        if _dp_owned(t):
            for g in groups.values():
                if not _covers(t, g):
                    raise ValueError(f"target tensor is not fully covered by its DP owner: "
                                     f"{t.tensor_id}")
            continue
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

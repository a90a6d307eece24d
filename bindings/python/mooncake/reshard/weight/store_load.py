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

May import: reshard.contracts, weight.manifest, planner, storage_manifest
and store_plan.
"""

from __future__ import annotations

from collections.abc import Mapping as _MappingABC
import threading
from dataclasses import dataclass, fields, replace
from math import prod
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..contracts import validate_resource_binding_identity
from .manifest import (PlacementFragment, WeightPlacementManifest, WeightRuntimeBindingManifest,
                       validate_runtime_binding)
from . import planner as _planner
from .planner import (LogicalTransferPlan, PlanningLimits,
                      plan_stored_transfer_to_target_placement)
from .storage_manifest import WeightManifest
from .store_plan import RangedRead, lower_plan


@dataclass(frozen=True)
class _LoweredColumns:
    """Columns of a lowered plan: row i reads object ``keys[key[i]]`` at
    ``src[i]`` into byte ``dst[i]`` of target fragment
    ``fragment_ids[target[i]]``, held by participant
    ``participant_ids[participant[i]]``."""

    keys: Sequence[str]
    fragment_ids: Sequence[str]
    participant_ids: Sequence[str]
    key: Any
    src: Any
    length: Any
    target: Any
    dst: Any
    participant: Any

    def select(self, participant_ids: Sequence[str]) -> Any:
        """The rows of the participants ``participant_ids`` (self when
        that is every participant)."""
        import numpy as np
        want = [i for i, p in enumerate(self.participant_ids) if p in set(participant_ids)]
        if len(want) == len(self.participant_ids):
            return self
        m = np.isin(self.participant, want)
        return replace(self, **{f.name: getattr(self, f.name)[m] for f in fields(self)
                                if f.name not in ("keys", "fragment_ids", "participant_ids")})


@dataclass(frozen=True)
class LoweredReads(_LoweredColumns):
    """The plan's regions as flat, coalesced ranged reads (libmooncake's
    mc_reshard_plan_lower): read i copies ``length[i]`` bytes of object
    ``keys[key[i]]`` at ``src[i]`` to byte ``dst[i]`` of target fragment
    ``fragment_ids[target[i]]``, held by participant
    ``participant_ids[participant[i]]``.  Runs that continue each other in
    the object and in the fragment are one read."""


@dataclass(frozen=True)
class LoweredBlocks(_LoweredColumns):
    """The plan's regions as strided blocks (libmooncake's
    mc_reshard_plan_lower_blocks): block i copies ``rows[i]`` rows of
    ``length[i]`` bytes, row r from object ``keys[key[i]]`` at ``src[i] + r
    * src_stride[i]`` to byte ``dst[i] + r * dst_stride[i]`` of target
    fragment ``fragment_ids[target[i]]``.  The same bytes as LoweredReads,
    without a read per row."""

    rows: Any
    src_stride: Any
    dst_stride: Any

    def nbytes(self) -> int:
        return int((self.length * self.rows).sum())


class _LazyReads(_MappingABC):
    """participant id -> its RangedReads, lowered on first look (a plan of
    tens of thousands of regions need not make an object per region to be
    executed: the store executes ``StoredLoadPlan.lowered``)."""

    def __init__(self, plan: LogicalTransferPlan, participant_ids: Sequence[str]) -> None:
        self._plan = plan
        self._ids = list(participant_ids)
        self._done: Dict[str, Tuple[RangedRead, ...]] = {}

    def __getitem__(self, pid: str) -> Tuple[RangedRead, ...]:
        if pid not in self._ids:
            raise KeyError(pid)
        if pid not in self._done:
            self._done[pid] = tuple(lower_plan(self._plan, [pid])[pid])
        return self._done[pid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


class _Lowering:
    """The native lowering of a plan's selected executors, done once, when
    first needed (a plan of column-split tensors expands into a read per
    row: that belongs to executing it, not to planning)."""

    def __init__(self, plan: LogicalTransferPlan, executors: Sequence[Any]) -> None:
        import numpy as np
        self._plan = plan
        self.participant_ids = [ex.participant_id for ex in executors]
        native = plan.operations._native
        try:  # from the target placement's columns, without reading its fragments
            self.part_of = native.target_owner(self.participant_ids)
        except ValueError:  # a target placement without columns
            owner = {fid: i for i, ex in enumerate(executors)
                     for fid in ex.placement_fragment_ids}
            self.part_of = np.fromiter((owner.get(f.placement_fragment_id, -1)
                                        for f in native.targets), np.int64,
                                       len(native.targets))
        self._done: Optional[LoweredReads] = None
        self._blocks: Optional[LoweredBlocks] = None
        self._lock = threading.Lock()

    def nbytes(self, participant_ids: Sequence[str]) -> int:
        """Bytes the participants' regions move (from the plan's columns)."""
        import numpy as np
        native = self._plan.operations._native
        want = [i for i, p in enumerate(self.participant_ids) if p in set(participant_ids)]
        rows = np.isin(self.part_of[native.target], want)
        return int((native.inner[rows] * native.segments[rows]).sum())

    def get(self) -> LoweredReads:
        with self._lock:
            if self._done is None:
                plan = self._plan
                native = plan.operations._native
                sc = _planner._cache(plan.source_manifest, _planner._StoredCache)
                key, src, length, target, dst = native.lower(sc.key_of, sc.object_offset,
                                                             self.part_of >= 0)
                self._done = LoweredReads(
                    sc.keys, [f.placement_fragment_id for f in native.targets],
                    self.participant_ids, key, src, length, target, dst,
                    self.part_of[target])
            return self._done

    def blocks(self) -> LoweredBlocks:
        """The same reads as strided blocks, lowered once: a region's rows
        are one block, not a read each."""
        with self._lock:
            if self._blocks is None:
                plan = self._plan
                native = plan.operations._native
                sc = _planner._cache(plan.source_manifest, _planner._StoredCache)
                key, src, length, target, dst, rows, ss, ds = native.lower(
                    sc.key_of, sc.object_offset, self.part_of >= 0, blocks=True)
                self._blocks = LoweredBlocks(
                    sc.keys, [f.placement_fragment_id for f in native.targets],
                    self.participant_ids, key, src, length, target, dst,
                    self.part_of[target], rows, ss, ds)
            return self._blocks


@dataclass(frozen=True)
class StoredLoadPlan:
    """Upstream's logical plan plus, per selected target participant, the
    store reads that execute it and (optionally) its runtime binding,
    whose generation and lease are kept as fences.  When the native
    planner core made the plan, ``lowering.get()`` gives the same reads
    flat and coalesced (what WeightStore.load executes) and ``reads`` are
    made only when looked at."""

    plan: LogicalTransferPlan
    reads: Mapping[str, Tuple[RangedRead, ...]]
    bindings: Mapping[str, WeightRuntimeBindingManifest]
    fences: Mapping[str, Tuple[int, str]]
    lowering: Optional[_Lowering] = None

    @property
    def participants(self) -> List[str]:
        return list(self.reads)

    @property
    def lowered(self) -> Optional[LoweredReads]:
        """The flat, coalesced reads (native plans only; made on first use)."""
        return None if self.lowering is None else self.lowering.get()

    def nbytes(self, participant_id: Optional[str] = None) -> int:
        ids = self.participants if participant_id is None else [participant_id]
        if self.lowering is not None:
            return self.lowering.nbytes(ids)
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
    fences = {p: (b.generation, b.lease_id) for p, b in by_pid.items()}
    lowering = _lower_native(plan, list(by_pid) if bindings is not None else None)
    if lowering is not None:
        return StoredLoadPlan(plan, _LazyReads(plan, lowering.participant_ids), by_pid,
                              fences, lowering)
    reads = lower_plan(plan, list(by_pid) if bindings is not None else None)
    return StoredLoadPlan(plan, {p: tuple(r) for p, r in reads.items()}, by_pid, fences)


def _lower_native(plan: LogicalTransferPlan, participant_ids: Optional[Sequence[str]]
                  ) -> Optional[_Lowering]:
    """The selected executors' regions as coalesced reads, lowered by
    libmooncake when first needed; None when the plan was not made
    natively (the reference lowering, store_plan.lower_plan, runs then).
    The plan's limits were enforced on every region when it was made, so
    they hold for any selection of them."""
    if not isinstance(plan.operations, _planner._RegionTable):
        return None
    executors = list(plan.target_executors)
    if participant_ids is not None:
        known = {ex.participant_id for ex in executors}
        for pid in sorted(set(participant_ids) - known):
            raise ValueError(f"unknown target participant: {pid}")
        executors = [ex for ex in executors if ex.participant_id in set(participant_ids)]
    return _Lowering(plan, executors)


def lowered_from_reads(plan: StoredLoadPlan) -> LoweredReads:
    """The RangedReads of a plan the reference planner made, as flat reads
    (one per run, not merged)."""
    import numpy as np
    target = plan.plan.target_placement
    fids = [f.placement_fragment_id for f in target.fragments]
    tindex = {fid: i for i, fid in enumerate(fids)}
    keys: List[str] = []
    kindex: Dict[str, int] = {}
    cols: List[List[Any]] = [[], [], [], [], [], []]
    pids = list(plan.reads)
    for pi, pid in enumerate(pids):
        for rd in plan.reads[pid]:
            src, dst = rd.expand()
            n = len(src)
            cols[0].append(np.full(n, kindex.setdefault(rd.key, len(kindex)), np.int64))
            cols[1].append(src)
            cols[2].append(np.full(n, rd.run_bytes, np.int64))
            cols[3].append(np.full(n, tindex[rd.target_fragment_id], np.int64))
            cols[4].append(dst)
            cols[5].append(np.full(n, pi, np.int64))
    keys = list(kindex)
    key, src, length, tgt, dst, part = (np.concatenate(c) if c else np.zeros(0, np.int64)
                                        for c in cols)
    return LoweredReads(keys, fids, pids, key, src, length, tgt, dst, part)


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

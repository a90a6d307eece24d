# SPDX-License-Identifier: Apache-2.0
"""The WeightStore's load planning (on its own layout types,
``store_layout``; upstream's planner is ``planner.py``): intersect stored
boxes with the target's boxes.

Every stored fragment is a C-order payload of its box; every target
fragment is a C-order tensor of its box.  Their intersection, if any, is a
set of equally long byte runs: the trailing dimensions that the
intersection spans fully in both boxes are contiguous in both, the leading
ones are counted.  A :class:`RangedRead` describes those runs compactly
(start, run length, counts and strides); ``expand()`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .store_layout import PlacementFragment, WeightPlacementManifest, WeightRuntimeBinding, \
    intersect


class RangedRead(NamedTuple):
    """Bytes of one stored payload into one target fragment:
    ``prod(counts)`` runs of ``run_bytes``; run ``i`` (a multi-index over
    ``counts``) goes from ``src_start + i·src_strides`` of ``key`` to
    ``dst_start + i·dst_strides`` of the target fragment's tensor."""

    tensor_id: str
    target_fragment_id: str
    key: str
    src_start: int
    dst_start: int
    run_bytes: int
    counts: Tuple[int, ...] = ()
    src_strides: Tuple[int, ...] = ()
    dst_strides: Tuple[int, ...] = ()

    @property
    def runs(self) -> int:
        return prod(self.counts)

    @property
    def nbytes(self) -> int:
        return self.run_bytes * prod(self.counts)

    def expand(self) -> Tuple[Any, Any]:
        """(src offsets, dst offsets) of every run, as numpy int64 arrays."""
        import numpy as np
        src = np.array([self.src_start], dtype=np.int64)
        dst = np.array([self.dst_start], dtype=np.int64)
        for n, ss, ds in zip(self.counts, self.src_strides, self.dst_strides):
            idx = np.arange(n, dtype=np.int64)
            src = (src[:, None] + idx[None, :] * ss).reshape(-1)
            dst = (dst[:, None] + idx[None, :] * ds).reshape(-1)
        return src, dst


def ranged_read(tensor_id: str, target_id: str, key: str, item: int,
                so: Sequence[int], ss: Sequence[int], to: Sequence[int], ts: Sequence[int]
                ) -> Optional[RangedRead]:
    """The runs moving the intersection of source box (so, ss) — stored at
    ``key`` — into target box (to, ts); None when they do not meet."""
    nd = len(so)
    if nd == 0:  # a scalar
        return RangedRead(tensor_id, target_id, key, 0, 0, item)
    inter = intersect(so, ss, to, ts)
    if inter is None:
        return None
    io, is_ = inter
    k = nd - 1  # dims after k are full in the intersection and in both boxes
    while k > 0 and is_[k] == ss[k] == ts[k]:
        k -= 1
    # byte strides of both boxes, innermost first; offsets of the first run
    src = dst = 0
    s_str = t_str = item
    run = item
    counts, s_st, d_st = [], [], []
    for d in range(nd - 1, -1, -1):
        src += (io[d] - so[d]) * s_str
        dst += (io[d] - to[d]) * t_str
        if d >= k:
            run *= is_[d]
        elif is_[d] != 1:
            counts.append(is_[d])
            s_st.append(s_str)
            d_st.append(t_str)
        s_str *= ss[d]
        t_str *= ts[d]
    if counts:
        counts.reverse()
        s_st.reverse()
        d_st.reverse()
    return RangedRead(tensor_id, target_id, key, src, dst, run, tuple(counts), tuple(s_st),
                      tuple(d_st))


@dataclass
class WeightLoadPlan:
    """What each target rank reads: ``reads[rank]`` lists the ranged reads
    that fill exactly the fragments its binding names."""

    manifest_key: str
    target: WeightPlacementManifest
    bindings: Tuple[WeightRuntimeBinding, ...]
    reads: Dict[int, List[RangedRead]]

    @property
    def ranks(self) -> List[int]:
        return sorted(self.reads)

    def nbytes(self, rank: Optional[int] = None) -> int:
        ranks = self.ranks if rank is None else [rank]
        return sum(r.nbytes for k in ranks for r in self.reads.get(k, ()))

    def binding(self, rank: int) -> WeightRuntimeBinding:
        for b in self.bindings:
            if b.rank == rank:
                return b
        raise KeyError(f"rank {rank} has no binding in this plan")

    def target_fragments(self, rank: int) -> List[PlacementFragment]:
        return [self.target.fragment(fid) for fid in self.binding(rank).fragment_ids]


def plan_reads(stored: Mapping[str, List[Tuple[Tuple[int, ...], Tuple[int, ...], str]]],
               itemsize: Mapping[str, int], target: WeightPlacementManifest,
               bindings: Sequence[WeightRuntimeBinding]) -> Dict[int, List[RangedRead]]:
    """``stored[tensor_id]``: (offset, shape, key) of each stored payload."""
    reads: Dict[int, List[RangedRead]] = {}
    for b in bindings:
        out: List[RangedRead] = []
        for fid in b.fragment_ids:
            f = target.fragment(fid)
            if f.rank != b.rank:
                raise ValueError(f"binding of rank {b.rank} names fragment {fid} of rank "
                                 f"{f.rank}")
            item = itemsize[f.tensor_id]
            to, ts = f.global_offset, f.local_shape
            if 0 in ts:
                continue
            te = [o + n for o, n in zip(to, ts)]
            for so, ss, key in stored[f.tensor_id]:
                # quick rejection: boxes that do not overlap in some dimension
                for a0, an, b0, b1 in zip(so, ss, to, te):
                    if a0 >= b1 or a0 + an <= b0:
                        break
                else:
                    r = ranged_read(f.tensor_id, fid, key, item, so, ss, to, ts)
                    if r is not None:
                        out.append(r)
        reads[b.rank] = out
    return reads


# --- lowering upstream's logical plans (docs/weights.md, §14.6 of the fact
# sheet): the bridge the store's executor will take once it runs on
# upstream's contracts.

def lower_region(region: Any) -> RangedRead:
    """One `TransferRegion` of a plan from a stored `WeightManifest` as the
    store's ranged read: the source offset becomes object-relative (the
    fragment's object_offset added); counts keep their 1s."""
    src = region.source
    if not hasattr(src, "object_key"):
        raise ValueError("only regions from a stored source can be lowered to store reads")
    return RangedRead(region.tensor_id, region.target.placement_fragment_id, src.object_key,
                      src.object_offset + region.source_base_offset,
                      region.target_base_offset, region.inner_bytes,
                      tuple(region.outer_loop_counts), tuple(region.source_strides),
                      tuple(region.target_strides))


def lower_plan(plan: Any, participant_ids: Optional[Sequence[str]] = None
               ) -> Dict[str, List[RangedRead]]:
    """The reads of each selected target executor (default: all) of a
    `LogicalTransferPlan` from a stored source, keyed by participant id.
    The plan's limits bound the expansion: each region's runs by
    max_segments_per_region, all of them by max_total_lowered_segments."""
    if plan.source_manifest is None:
        raise ValueError("only plans from a stored source can be lowered to store reads")
    limits = plan.planning_limits
    executors = plan.target_executors
    if participant_ids is not None:
        wanted = set(participant_ids)
        known = {ex.participant_id for ex in executors}
        for pid in sorted(wanted - known):
            raise ValueError(f"unknown target participant: {pid}")
        executors = [ex for ex in executors if ex.participant_id in wanted]
    out: Dict[str, List[RangedRead]] = {}
    total = 0
    for ex in executors:
        reads = []
        for i in plan.operation_indices_for_executor(ex, "target"):
            r = plan.operations[i]
            if r.segment_count > limits.max_segments_per_region:
                raise ValueError(f"logical transfer region exceeds max_segments_per_region: "
                                 f"{r.segment_count} > {limits.max_segments_per_region}")
            total += r.segment_count
            if total > limits.max_total_lowered_segments:
                raise ValueError(f"logical transfer plan exceeds max_total_lowered_segments: "
                                 f"{total} > {limits.max_total_lowered_segments}")
            reads.append(lower_region(r))
        out[ex.participant_id] = reads
    return out


__all__ = ["RangedRead", "WeightLoadPlan", "lower_plan", "lower_region"]

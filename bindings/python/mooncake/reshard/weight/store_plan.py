# SPDX-License-Identifier: Apache-2.0
"""The WeightStore's ranged reads: a region of upstream's plan
(`TransferRegion`, from a stored `WeightManifest` source) lowered onto the
object that holds its source fragment.

A :class:`RangedRead` describes the region's runs compactly (start, run
length, counts and strides); ``expand()`` lists them.  The store executes
the flat, coalesced form (store_load.LoweredReads, made by libmooncake's
planner core); these objects are what a caller inspects, and the lowering
of plans the Python reference planner made.

May import: the standard library only (numpy on first use).
"""

from __future__ import annotations

from math import prod
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple


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


# --- lowering upstream's logical plans (docs/weights.md, §14.6 of the fact
# sheet).

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


__all__ = ["RangedRead", "lower_plan", "lower_region"]

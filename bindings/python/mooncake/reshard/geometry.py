# SPDX-License-Identifier: Apache-2.0
"""Box geometry of logical tensor fragments, as upstream's
``mooncake.reshard.geometry``.

A box is (offset, shape): per dimension the half-open interval
[offset, offset + length).  The placement and stored-manifest contracts
prove "these boxes tile that tensor exactly" with `boxes_exactly_cover`:
every box inside, volumes adding up, and no two boxes overlapping — which
together mean each element is covered once.

May import: the standard library only.
"""

from __future__ import annotations

from math import prod
from typing import Iterable, List, Protocol, Sequence, Tuple

__all__ = ["LogicalBox", "OverlapRegion", "box_contains", "boxes_exactly_cover",
           "boxes_overlap", "regions_exactly_cover"]

Box = Tuple[Sequence[int], Sequence[int]]

# From three dimensions on, overlap is checked pairwise after a sweep on
# dimension 0; a hostile or degenerate input must not take forever.
_HIGH_DIM_BUDGET = 1_000_000


class LogicalBox(Protocol):
    @property
    def global_offset(self) -> Tuple[int, ...]: ...

    @property
    def local_shape(self) -> Tuple[int, ...]: ...


class OverlapRegion(Protocol):
    @property
    def overlap_offset(self) -> Tuple[int, ...]: ...

    @property
    def overlap_shape(self) -> Tuple[int, ...]: ...


def box_contains(outer_offset: Sequence[int], outer_shape: Sequence[int],
                 inner_offset: Sequence[int], inner_shape: Sequence[int]) -> bool:
    """Whether the inner box lies inside the outer one (same rank)."""
    if not (len(outer_offset) == len(outer_shape) == len(inner_offset) == len(inner_shape)):
        return False
    return all(oo <= io and io + il <= oo + ol
               for oo, ol, io, il in zip(outer_offset, outer_shape, inner_offset, inner_shape))


def _intersects(a: Box, b: Box) -> bool:
    return all(ao < bo + bl and bo < ao + al
               for ao, al, bo, bl in zip(a[0], a[1], b[0], b[1]))


def boxes_overlap(boxes: Iterable[Box]) -> bool:
    """Whether any two boxes share an element.  Empty boxes share nothing."""
    items = [(tuple(o), tuple(s)) for o, s in boxes]
    items = [b for b in items if all(n > 0 for n in b[1])]
    if len(items) < 2:
        return False
    ndim = len(items[0][0])
    items.sort(key=lambda b: (b[0][0] if ndim else 0))
    if ndim <= 1:
        end = None
        for off, shape in items:
            if ndim == 0:
                return True          # two scalars are the same element
            if end is not None and off[0] < end:
                return True
            end = max(end or 0, off[0] + shape[0])
        return False
    # Sweep along dimension 0: only boxes still open there can intersect.
    active: List[Box] = []
    compared = 0
    for box in items:
        start = box[0][0]
        active = [a for a in active if a[0][0] + a[1][0] > start]
        for other in active:
            compared += 1
            if ndim > 2 and compared > _HIGH_DIM_BUDGET:
                raise ValueError("high-dimensional overlap budget exceeded before validation")
            if _intersects(box, other):
                return True
        active.append(box)
    return False


def boxes_exactly_cover(offset: Sequence[int], shape: Sequence[int],
                        boxes: Iterable[Box]) -> bool:
    """Whether the boxes tile (offset, shape) exactly: at least one box,
    each inside, the volumes adding up, and no overlap."""
    items = [(tuple(o), tuple(s)) for o, s in boxes]
    if not items:
        return False
    if not all(box_contains(offset, shape, o, s) for o, s in items):
        return False
    if sum(prod(s) for _, s in items) != prod(shape):
        return False
    return not boxes_overlap(items)


def regions_exactly_cover(box: LogicalBox, regions: Iterable[OverlapRegion]) -> bool:
    """`boxes_exactly_cover` of a fragment by the overlap boxes of regions."""
    return boxes_exactly_cover(box.global_offset, box.local_shape,
                               [(r.overlap_offset, r.overlap_shape) for r in regions])

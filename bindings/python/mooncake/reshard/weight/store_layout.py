# SPDX-License-Identifier: Apache-2.0
"""Store-side helpers of the WeightStore (docs/weights.md): a builder of
tensor-parallel placements in upstream's types, and how a snapshot writer
ends (publishing its manifest, abort).

The store's own pre-upstream layout types (a 3-field TensorDescriptor,
fragments with an int rank, a manifest of its own) are gone: the store
writes, plans and loads upstream's contracts only (manifest.py,
storage_manifest.py, planner.py).

May import: _keys, weight.manifest and weight.types.
"""

from __future__ import annotations

import json
from math import prod
from typing import Any, Iterable, List, Optional, Sequence, Tuple

from ..._keys import _ere_escape
from .manifest import (ParallelTopology, PlacementFragment, ReplicatedAxis, SplitAxis,
                       TensorDescriptor, TopologyParticipant, WeightPlacementManifest)
from .types import ParallelRank


def split_sizes(length: int, parts: int) -> List[int]:
    """``length`` split into ``parts`` as evenly as possible (the first
    ``length % parts`` parts one longer): uneven TP splits."""
    base, extra = divmod(length, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def tp_participant(rank: int) -> str:
    """The participant id tp_placement gives TP rank ``rank``: sorted ids
    follow the ranks (the writer's key index is its sorted position)."""
    return f"tp{rank:03d}"


def tp_placement(model: Iterable[Tuple[str, Sequence[int], str, int, Optional[int]]],
                 tp_size: int, *, resource_id: str, revision: str,
                 weight_generation: int = 0, placement_set_id: Optional[str] = None,
                 layout: str = "mooncake:v1") -> WeightPlacementManifest:
    """A convenience: upstream's complete placement of a model over TP
    ranks ``0..tp_size-1`` (participants tp_participant(r)).

    ``model`` lists (tensor_id, global_shape, dtype, itemsize, split dim or
    None).  A tensor with a split dim is cut along it into split_sizes()
    (``SplitAxis("tp", dim)``); one without, or one with fewer elements
    along that dim than ranks, is held whole by every rank
    (``ReplicatedAxis("tp")``).  The layout fingerprint is
    ``f"{layout}:{dtype}"``."""
    if type(tp_size) is not int or tp_size < 1:
        raise ValueError(f"tp_size must be an int >= 1, got {tp_size!r}")
    topo = ParallelTopology(tp_size=tp_size, pp_size=1, ep_size=1, dp_size=1,
                            participants=[TopologyParticipant(tp_participant(r),
                                                              ParallelRank(tp=r))
                                          for r in range(tp_size)])
    tensors, frags = [], []
    for tid, shape, dtype, itemsize, dim in model:
        shape = tuple(shape)
        if dim is not None and shape[dim] < tp_size:
            dim = None
        axes: Tuple[Any, ...] = ()
        if tp_size > 1:
            axes = (SplitAxis("tp", dim),) if dim is not None else (ReplicatedAxis("tp"),)
        tensors.append(TensorDescriptor(tid, shape, dtype, itemsize,
                                        (dim,) if dim is not None and tp_size > 1 else (),
                                        f"{layout}:{dtype}", axes))
        off = 0
        for r, n in enumerate(split_sizes(shape[dim], tp_size) if dim is not None
                              else [None] * tp_size):
            o, s = [0] * len(shape), list(shape)
            if dim is not None:
                o[dim], s[dim] = off, n
                off += n
            frags.append(PlacementFragment(tid, tuple(o), tuple(s), prod(s) * itemsize,
                                           ParallelRank(tp=r)))
    return WeightPlacementManifest.from_fragments(
        resource_id=resource_id, revision=revision, weight_generation=weight_generation,
        placement_set_id=placement_set_id or f"tp{tp_size}", topology=topo,
        tensors=tensors, fragments=frags)


__all__ = ["split_sizes", "tp_participant", "tp_placement"]


class _SnapshotWriterEnd:
    """How a snapshot writer (store_writer.PlacementSnapshotWriter) ends:
    publishing the one manifest of the snapshot, abort() once, and a
    ``with`` block that raises aborts an open writer.  The writer has ``_lock``, ``_state``
    ("open", "committed", "aborted"), ``_store``, ``_ws`` (its WeightStore),
    ``manifest_key``, ``_part_key``, ``writer_id``, ``_dir``, ``_live_key``
    and ``_written``, and ``_writer_error(msg, rc=None)`` builds its
    exception."""

    # How long a commit waits for a manifest that another rank is writing
    # at the same moment to become readable.
    PUBLISH_WAIT_S = 10.0

    def _publish(self, raw: bytes) -> None:
        """Put the manifest ``raw`` unless it is there; then it must read
        back as exactly ``raw`` (manifests are never overwritten)."""
        import time
        existing = self._store.get(self.manifest_key)
        if not existing:
            rc = self._store.put(self.manifest_key, raw, self._ws.config)
            if rc != 0:
                raise self._writer_error(f"commit: publishing the manifest "
                                         f"{self.manifest_key!r} failed ({rc}); the writer "
                                         f"keeps its payloads, retry commit()", rc)
            existing = self._store.get(self.manifest_key)
            # Ranks publish the same manifest together: a put that found
            # another rank's put of the key still in progress returns 0
            # (the key exists) before that put completes, so the manifest
            # becomes readable a moment later.
            deadline = time.monotonic() + self.PUBLISH_WAIT_S
            while not existing and time.monotonic() < deadline:
                time.sleep(0.005)
                existing = self._store.get(self.manifest_key)
        if existing != raw:
            if not existing:
                raise self._writer_error(f"commit: the manifest {self.manifest_key!r} cannot "
                                         f"be read back; retry commit()")
            raise self._writer_error(f"commit: another manifest is already published at "
                                     f"{self.manifest_key!r} (manifests are never overwritten)")

    def abort(self) -> int:
        """Remove everything this writer stored; returns the keys removed."""
        with self._lock:
            if self._state == "committed":
                raise self._writer_error("abort: the snapshot is already committed")
            if self._state == "aborted":
                return 0
            self._state = "aborted"
            n = 0
            raw = self._store.get(self._part_key)
            if raw and json.loads(raw).get("writer") == self.writer_id:
                n += self._store.remove(self._part_key, True) == 0
            n += max(0, self._store.remove_by_regex("^" + _ere_escape(self._dir) + "/", True))
            self._store.remove(self._live_key, True)
            self._written.clear()
            return n

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is not None and self._state == "open":
            self.abort()

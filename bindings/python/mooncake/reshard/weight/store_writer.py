# SPDX-License-Identifier: Apache-2.0
"""Writing a snapshot from upstream's contracts (docs/weights.md, "Writing
from upstream's placement").

The adapter exports upstream's complete `WeightPlacementManifest` (and
runtime bindings); the writer of one participant stores the fragments the
planner's own source rule picks for it — per tensor the lowest complete DP
replica (the only owner when DP-owned), within it the minimum complete
owner, one fragment per box, the lowest by (dp, pp, ep, tp, fragment_id) —
so every tensor is stored exactly once, as upstream's `WeightManifest`
requires.  `commit()` publishes that manifest's `to_json()` bytes
verbatim at `{group_id}/manifest`.

Keys reuse the store's scheme with the participant's index in the sorted
topology (participant ids are free text and may contain "/"):

    {group_id}/payload/r{index}/{writer uuid}/{n}   fragment payloads
    {group_id}/live/r{index}                        the writer's live key
    {group_id}/part/r{index}                        its fragment record
    {group_id}/manifest                             the WeightManifest

May import: _memory, weight.manifest, planner, snapshot, storage_manifest,
store_layout, and mooncake.store (lazily: upstream's contracts in this
package import without the native extension); never weight.store, which
opens the writer.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _memory
from .manifest import (PlacementFragment, WeightPlacementManifest, _check_aliases_consistent,
                       no_planner_columns,
                       _check_placement_fragments, _check_tensor_coverage,
                       validate_runtime_binding)
from .planner import _PlacementSource
from .snapshot import WeightSnapshotSource
from .storage_manifest import StoredFragment, WeightManifest
from .store_layout import _SnapshotWriterEnd

_PART_FORMAT = "mooncake-weight-placement-part"


def writer_set(placement: WeightPlacementManifest) -> Dict[str, PlacementFragment]:
    """The fragments stored, by id: the planner's choice for target DP 0."""
    src = _PlacementSource(placement)
    out: Dict[str, PlacementFragment] = {}
    for t in placement.tensors:
        for f in src.candidates(t.tensor_id, 0):
            out[f.placement_fragment_id] = f
    return out


def check_placement_coverage(placement: WeightPlacementManifest) -> None:
    """Re-prove what the placement's constructor proved -- every tensor
    covered exactly as its axes declare, no overlap beyond replicas --
    on the parts as they are now (an adapter may hand over a manifest
    changed after construction).  Upstream's ValueErrors, e.g. "global
    placement tensor is not fully covered: T"."""
    tensors = {t.tensor_id: t for t in placement.tensors}
    fragments = [f for part in placement.parts for f in part.fragments]
    _check_placement_fragments(tensors, fragments)
    _check_aliases_consistent(tensors, fragments)
    by_tensor: Dict[str, List[PlacementFragment]] = defaultdict(list)
    for f in fragments:
        by_tensor[f.tensor_id].append(f)
    for tid in sorted(tensors):
        _check_tensor_coverage(tensors[tid], by_tensor[tid], placement.topology)


def _element_size(tensor: Any) -> Optional[int]:
    size = getattr(tensor, "element_size", None)
    if callable(size):
        return size()
    return getattr(getattr(tensor, "dtype", None), "itemsize", None)


class PlacementSnapshotWriter(_SnapshotWriterEnd):
    """One participant's writer of one snapshot
    (`WeightStore.begin_weight_snapshot` with an upstream adapter)."""

    def __init__(self, weight_store: Any, descriptor: Any, adapter: Any,
                 source: WeightSnapshotSource, error: type) -> None:
        self._ws = weight_store
        self._store = weight_store.store
        self._error = error
        self.adapter = adapter
        p = getattr(source, "placement", None)
        if not isinstance(p, WeightPlacementManifest):
            raise ValueError("adapter.export_source() must return a WeightPlacementManifest")
        check_placement_coverage(p)
        for name in ("resource_id", "revision", "weight_generation"):
            if getattr(descriptor, name) != getattr(p, name):
                raise ValueError(f"snapshot descriptor and placement {name} differ")
        self.placement = p
        self.descriptor = descriptor
        pid = getattr(adapter, "participant_id", None)
        ids = [x.participant_id for x in p.topology.participants]
        if pid not in ids:
            raise ValueError(f"unknown topology participant: {pid}")
        self.participant_id = pid
        self.index = ids.index(pid)
        bindings = tuple(getattr(source, "bindings", ()))
        self.bindings = {b.participant_id: b for b in bindings}
        for b in bindings:
            validate_runtime_binding(p, b)
        chosen = writer_set(p)
        self._chosen = chosen
        self._indices = sorted({ids.index(x.participant_id) for x in p.parts
                                if any(f.placement_fragment_id in chosen for f in x.fragments)})
        self.part = p.part(pid)
        self.mine = [f for f in self.part.fragments if f.placement_fragment_id in chosen]
        self.group_id = weight_store.snapshot_base(descriptor)
        self.manifest_key = self.group_id + "/manifest"
        self.writer_id = uuid.uuid4().hex
        self._dir = f"{self.group_id}/payload/r{self.index}/{self.writer_id}"
        self._part_key = f"{self.group_id}/part/r{self.index}"
        self._live_key = f"{self.group_id}/live/r{self.index}"
        self._written: Dict[str, StoredFragment] = {}
        self._n = 0
        self._lock = threading.Lock()
        self._state = "open"
        self._pending: Optional[Tuple[WeightManifest, bytes]] = None
        self.manifest: Optional[WeightManifest] = None
        self._created_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if self._store.is_exist(self._part_key) == 1:
            raise error(f"participant {pid} of {self.group_id} has already committed")
        weight_store._reclaim_rank(self.group_id, self.index)
        self._publish_liveness()

    def _publish_liveness(self) -> None:
        """The live key sits on this client's own segment, so it goes when
        this process dies (client TTL): the payloads are then abandoned and
        `WeightStore.reclaim_abandoned(descriptor, [index])` removes them."""
        # Lazy: mooncake.store loads the native extension and the buffer
        # pool; upstream's contracts in this package import without them.
        from ...store import ReplicateConfig
        cfg = None
        host = getattr(self._store, "get_hostname", lambda: "")()
        if host:
            cfg = ReplicateConfig()
            cfg.preferred_segment = host
        rc = self._store.put(self._live_key, self.writer_id.encode(), cfg)
        if rc != 0:
            raise self._error(f"cannot publish the writer's live key {self._live_key!r}", rc)
        if self._store.get(self._live_key) != self.writer_id.encode():
            raise self._error(f"participant {self.participant_id} of {self.group_id} already "
                              f"has a live writer")

    # ---- write -----------------------------------------------------------------------
    def write_tensor(self, tensor_id: str, tensor: Any) -> List[str]:
        """Write this participant's single box of `tensor_id` (a framework
        parameter name is mapped by the adapter's ``tensor_id_of``); []
        when another participant stores that box (a replica)."""
        map_name = getattr(self.adapter, "tensor_id_of", None)
        if callable(map_name):
            tensor_id = map_name(tensor_id)
        frags = [f for f in self.part.fragments if f.tensor_id == tensor_id]
        if not frags:
            raise ValueError(f"participant {self.participant_id} holds no fragment of "
                             f"{tensor_id}")
        if len(frags) > 1:
            raise ValueError(f"participant {self.participant_id} holds {len(frags)} "
                             f"fragments of {tensor_id}; use write_fragment")
        return self.write_fragment(frags[0].placement_fragment_id, tensor)

    def write_fragment(self, placement_fragment_id: str, tensor: Any) -> List[str]:
        with self._lock:
            self._check_open()
            f = next((x for x in self.part.fragments
                      if x.placement_fragment_id == placement_fragment_id), None)
            if f is None:
                raise ValueError(f"unknown placement fragment for participant "
                                 f"{self.participant_id}: {placement_fragment_id}")
            t = self.placement.tensor(f.tensor_id)
            shape = tuple(int(n) for n in getattr(tensor, "shape", ()))
            item = _element_size(tensor)
            if shape != f.local_shape or item != t.itemsize:
                raise ValueError(f"tensor for {f.tensor_id} {list(f.global_offset)} is "
                                 f"{shape} with {item}-byte elements, the fragment "
                                 f"{f.local_shape} with {t.itemsize}-byte elements")
            if placement_fragment_id not in self._chosen:
                return []
            if placement_fragment_id in self._written:
                raise ValueError(f"fragment {placement_fragment_id} was already written")
            ptr, size, owner = _memory.memory_of(tensor, self._error)
            self._written[placement_fragment_id] = self._put(f, ptr, size)
            del owner
            return [placement_fragment_id]

    def write_bound_fragments(self) -> List[str]:
        """Write every chosen fragment from this participant's runtime
        binding (its address and nbytes; canonical strides are proven)."""
        b = self.bindings.get(self.participant_id)
        if b is None:
            raise ValueError(f"missing runtime binding participant: {self.participant_id}")
        out = []
        with self._lock:
            self._check_open()
            by_id = {f.placement_fragment_id: f for f in self.part.fragments}
            for bf in b.fragments:
                fid = bf.placement_fragment_id
                if fid not in self._chosen or fid in self._written:
                    continue
                if not bf.device.startswith("cpu"):
                    raise ValueError(f"runtime binding device {bf.device!r} is not supported "
                                     f"(the store writes from CPU memory)")
                self._written[fid] = self._put(by_id[fid], bf.address, bf.nbytes)
                out.append(fid)
        return out

    def _put(self, f: PlacementFragment, ptr: int, size: int) -> StoredFragment:
        key = f"{self._dir}/{self._n}"
        self._n += 1
        rc = self._ws._put_memory(key, ptr, size)
        if rc != 0:
            raise self._error(f"writing fragment {f.placement_fragment_id} to {key!r} "
                              f"failed ({rc})", rc)
        return StoredFragment(f.placement_fragment_id, f.tensor_id, f.global_offset,
                              f.local_shape, key, 0, size, f.aliases)

    def _check_open(self) -> None:
        if self._state != "open":
            raise self._error(f"the writer is {self._state}")

    # ---- commit ----------------------------------------------------------------------
    def _check_written(self) -> None:
        missing = [f.placement_fragment_id for f in self.mine
                   if f.placement_fragment_id not in self._written]
        if missing:
            raise self._error(f"commit: participant {self.participant_id} has not "
                              f"written {', '.join(missing[:8])}")

    def seal(self) -> None:
        """Publish this participant's fragment record without waiting for
        the others (another writer commits the snapshot)."""
        with self._lock:
            self._check_open()
            self._check_written()
            self._publish_part()

    def commit(self, timeout: float = 0.0) -> WeightManifest:
        """Publish this participant's record, then — once every writing
        participant's record is there — the WeightManifest.  A publication
        failure keeps the decided manifest and the payloads: retry."""
        with self._lock:
            if self._state == "committed" and self.manifest is not None:
                return self.manifest
            self._check_open()
            self._check_written()
            if self._pending is None:
                self._publish_part()
                self._pending = self._build(self._collect(timeout))
            manifest, raw = self._pending
            self._publish(raw)
            self._state = "committed"
            self.manifest = manifest
            self._store.remove(self._live_key, True)
            return manifest

    def _publish_part(self) -> None:
        got = self._store.get(self._part_key)
        if got:
            if json.loads(got).get("writer") != self.writer_id:
                raise self._error(f"participant {self.participant_id} was committed by "
                                  f"another writer")
            return
        raw = json.dumps({"format": _PART_FORMAT, "writer": self.writer_id,
                          "index": self.index, "created_at": self._created_at,
                          "placement_id": self.placement.placement_id,
                          "fragments": [s.to_wire() for s in self._written.values()]},
                         sort_keys=True, separators=(",", ":")).encode()
        rc = self._store.put(self._part_key, raw, self._ws.config)
        if rc != 0:
            raise self._error("commit: publishing the fragment record failed", rc)

    def _collect(self, timeout: float) -> Mapping[int, Any]:
        deadline = time.monotonic() + max(0.0, float(timeout))
        parts: Dict[int, Any] = {}
        while True:
            for i in self._indices:
                if i not in parts:
                    raw = self._store.get(f"{self.group_id}/part/r{i}")
                    if raw:
                        parts[i] = json.loads(raw)
            if len(parts) == len(self._indices) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        absent = [i for i in self._indices if i not in parts]
        if absent:
            names = [self.placement.topology.participants[i].participant_id for i in absent]
            raise self._error(f"commit: participant(s) {names} have not committed")
        return parts

    def _build(self, parts: Mapping[int, Any]) -> Tuple[WeightManifest, bytes]:
        """The WeightManifest of every writer's record.  Its constructor
        re-proves the coverage of what was really written: writers that
        disagreed leave a gap or an overlap, refused with upstream's
        ValueError ("tensor is not fully covered: T", ...)."""
        ids = {p.get("placement_id") for p in parts.values()}
        if ids != {self.placement.placement_id}:
            raise ValueError(f"commit: the participants wrote different placements: "
                             f"{sorted(str(i) for i in ids)}")
        frags = [StoredFragment(w["fragment_id"], w["tensor_id"], w["global_offset"],
                                w["local_shape"], w["object_key"], w["object_offset"],
                                w["nbytes"], w["aliases"])
                 for p in parts.values() for w in p["fragments"]]
        frags.sort(key=lambda s: (s.tensor_id, s.global_offset))
        created = min(p["created_at"] for p in parts.values())   # same on every committer
        d = self.descriptor
        with no_planner_columns():  # published, never planned here
            m = WeightManifest(d.namespace, d.resource_id, d.revision, d.weight_generation,
                               self.group_id, self.manifest_key, self.placement.tensors,
                               tuple(frags), created)
        return m, m.to_json().encode("utf-8")

    def _writer_error(self, msg: str, rc: Optional[int] = None) -> Exception:
        return self._error(msg, rc)

# SPDX-License-Identifier: Apache-2.0
"""Manifest-backed model-weight snapshots in Mooncake Store (docs/weights.md).

    weight_store = WeightStore(store)
    writer = weight_store.begin_weight_snapshot(descriptor, adapter)
    writer.write_tensor(tensor_id, tensor)          # each fragment of this rank
    manifest = writer.commit()                      # one StoredWeightManifest

    manifest = weight_store.load_manifest(key)      # any process
    plan = weight_store.plan_load(manifest, target_placement, target_bindings)
    weight_store.load(plan, destinations)           # ranged reads into tensors
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor
import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from math import prod
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ...structured_object_store import _ere_escape, _normalize_key_prefix
from .store_layout import (ITEMSIZE, PlacementFragment, TensorDescriptor,
                           WeightPlacementManifest, WeightRuntimeBinding, WeightSnapshotSource,
                           box_text, check_inside, describe_boxes, dtype_name, no_gc,
                           uncovered, _SnapshotWriterEnd)
from .store_plan import RangedRead, WeightLoadPlan, plan_reads
from .snapshot import WeightSnapshotAdapter, WeightSnapshotDescriptor, tensor_dtype_shape
from .storage_manifest import StoredManifestIdentity, WeightManifest
from . import store_load

MANIFEST_FORMAT = "mooncake-weight-manifest"
MANIFEST_VERSION = 1
_PART_FORMAT = "mooncake-weight-part"
_INVALID_PARAMS = -600


class WeightStoreError(RuntimeError):
    """A weight snapshot operation failed; ``rc`` is the store status when
    a store call failed."""

    def __init__(self, message: str, rc: Optional[int] = None) -> None:
        super().__init__(message)
        self.rc = rc


@dataclass(frozen=True)
class StoredFragment:
    """One stored payload: the C-order bytes of a box of a tensor."""

    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    key: str
    nbytes: int


@dataclass(frozen=True)
class StoredWeightManifest:
    """The immutable record of one committed snapshot."""

    manifest_key: str
    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[StoredFragment, ...]
    sha256: str
    version: int = MANIFEST_VERSION

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self.fragments)

    def tensor(self, tensor_id: str) -> TensorDescriptor:
        for t in self.tensors:
            if t.tensor_id == tensor_id:
                return t
        raise KeyError(f"tensor {tensor_id!r} is not in the manifest")

    @staticmethod
    def _body(namespace: str, resource_id: str, revision: str, generation: int,
              tensors: Sequence[TensorDescriptor], fragments: Sequence[StoredFragment]
              ) -> Dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "namespace": namespace,
            "resource_id": resource_id, "revision": revision,
            "weight_generation": generation,
            "tensors": [{"tensor_id": t.tensor_id, "shape": list(t.global_shape),
                         "dtype": t.dtype} for t in tensors],
            "fragments": [{"tensor_id": f.tensor_id, "offset": list(f.global_offset),
                           "shape": list(f.local_shape), "key": f.key, "bytes": f.nbytes}
                          for f in fragments],
        }

    def to_json(self) -> bytes:
        body = self._body(self.namespace, self.resource_id, self.revision,
                          self.weight_generation, self.tensors, self.fragments)
        body["sha256"] = self.sha256
        return _canonical(body)


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical({k: v for k, v in body.items() if k != "sha256"})
                          ).hexdigest()


def _manifest_error(key: str, why: str) -> WeightStoreError:
    return WeightStoreError(f"manifest at {key!r} is not valid: {why}")


def parse_manifest(key: str, raw: bytes, base: str) -> StoredWeightManifest:
    """Check a manifest's bytes completely before anything is read through it."""
    try:
        body = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise _manifest_error(key, f"not UTF-8 JSON ({e})") from None
    if not isinstance(body, dict) or body.get("format") != MANIFEST_FORMAT:
        raise _manifest_error(key, f"not a {MANIFEST_FORMAT}")
    if body.get("version") != MANIFEST_VERSION:
        raise _manifest_error(key, f"version {body.get('version')!r} is not supported "
                                   f"(this reader knows version {MANIFEST_VERSION})")
    if body.get("sha256") != _digest(body):
        raise _manifest_error(key, "checksum mismatch (sha256 of the body)")
    try:
        tensors = tuple(TensorDescriptor(t["tensor_id"], tuple(t["shape"]), t["dtype"])
                        for t in body["tensors"])
        frags = tuple(StoredFragment(f["tensor_id"], tuple(f["offset"]), tuple(f["shape"]),
                                     f["key"], f["bytes"]) for f in body["fragments"])
        desc = WeightSnapshotDescriptor(body["resource_id"], body["revision"],
                                        body["weight_generation"], body["namespace"])
    except (KeyError, TypeError, ValueError) as e:
        raise _manifest_error(key, f"bad field ({e!r})") from None
    by_id = {t.tensor_id: t for t in tensors}
    if len(by_id) != len(tensors):
        raise _manifest_error(key, "a tensor is listed twice")
    boxes: Dict[str, List[Any]] = {t: [] for t in by_id}
    for f in frags:
        t = by_id.get(f.tensor_id)
        if t is None:
            raise _manifest_error(key, f"fragment of unknown tensor {f.tensor_id!r}")
        try:
            check_inside(t, f.global_offset, f.local_shape)
        except ValueError as e:
            raise _manifest_error(key, str(e)) from None
        if type(f.nbytes) is not int or f.nbytes != prod(f.local_shape) * t.itemsize:
            raise _manifest_error(key, f"fragment [{box_text(f.global_offset, f.local_shape)}]"
                                       f" of {f.tensor_id!r} has {f.nbytes!r} bytes")
        if f.nbytes and (not isinstance(f.key, str) or not f.key.startswith(base + "/")):
            raise _manifest_error(key, f"payload key {f.key!r} lies outside {base}/")
        boxes[f.tensor_id].append((f.global_offset, f.local_shape))
    for tid, bs in boxes.items():
        if uncovered(by_id[tid], bs):
            raise _manifest_error(key, f"tensor {tid!r} is not fully covered")
    return StoredWeightManifest(key, desc.namespace, desc.resource_id, desc.revision,
                                desc.weight_generation, tensors, frags, body["sha256"])


def _memory_of(tensor: Any) -> Tuple[int, int, Any]:
    """(address, nbytes, owner) of a contiguous CPU copy-free view, or of a
    contiguous copy when ``tensor`` is not contiguous."""
    if hasattr(tensor, "data_ptr"):  # torch
        if tensor.device.type != "cpu":
            raise WeightStoreError(f"tensor on {tensor.device} (only CPU memory is supported)")
        t = tensor.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.data_ptr(), t.numel() * t.element_size(), t
    import numpy as np
    a = np.ascontiguousarray(tensor)
    return a.ctypes.data, a.nbytes, a


def _dest_memory(tensor: Any, what: str) -> Tuple[int, int]:
    if hasattr(tensor, "data_ptr"):
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise WeightStoreError(f"destination of {what} must be a contiguous CPU tensor")
        return tensor.data_ptr(), tensor.numel() * tensor.element_size()
    flags = getattr(tensor, "flags", None)
    if flags is None or not flags["C_CONTIGUOUS"] or not flags["WRITEABLE"]:
        raise WeightStoreError(f"destination of {what} must be a C-contiguous writable array "
                               f"or a CPU tensor")
    return tensor.ctypes.data, tensor.nbytes


class _Registration:
    """Registers caller memory for zero-copy calls unless it already is."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.ptrs: List[int] = []

    def add(self, ptr: int, size: int) -> None:
        if size and hasattr(self.store, "register_buffer") \
                and self.store.register_buffer(ptr, size) == 0:
            self.ptrs.append(ptr)

    def release(self) -> None:
        for p in self.ptrs:
            self.store.unregister_buffer(p)
        self.ptrs = []


class WeightStoreWriter(_SnapshotWriterEnd):
    """One rank's writer of one snapshot (``WeightStore.begin_weight_snapshot``)."""

    def __init__(self, weight_store: "WeightStore", snapshot: WeightSnapshotDescriptor,
                 adapter: Any) -> None:
        if not isinstance(snapshot, WeightSnapshotDescriptor):
            raise TypeError("snapshot must be a WeightSnapshotDescriptor")
        for m in ("export_source", "resolve_fragment_ids"):
            if not callable(getattr(adapter, m, None)):
                raise TypeError(f"adapter has no {m}() (see WeightSnapshotAdapter)")
        self._ws = weight_store
        self._store = weight_store.store
        self.snapshot = snapshot
        self.adapter = adapter
        source = adapter.export_source(snapshot)
        if not isinstance(getattr(source, "placement", None), WeightPlacementManifest):
            raise WeightStoreError("adapter.export_source() must return a source with a "
                                   "WeightPlacementManifest placement")
        self.source: WeightSnapshotSource = source
        placement = source.placement
        if snapshot.tensors is not None and tuple(snapshot.tensors) != placement.tensors:
            raise WeightStoreError("the descriptor's tensors differ from the placement's")
        rank = getattr(adapter, "writer_rank", None)
        if type(rank) is not int or rank < 0:
            raise WeightStoreError("adapter.writer_rank must be the int rank this writer "
                                   "writes as")
        self.rank = rank
        self._bound: Dict[int, Tuple[str, ...]] = {}
        owner: Dict[Tuple[str, Any], int] = {}
        for b in source.bindings:
            if b.rank in self._bound:
                raise WeightStoreError(f"rank {b.rank} has two source bindings")
            self._bound[b.rank] = b.fragment_ids
            for fid in b.fragment_ids:
                f = placement.fragment(fid)
                if f.rank != b.rank:
                    raise WeightStoreError(f"the binding of rank {b.rank} names fragment {fid}"
                                           f" held by rank {f.rank}")
                k = (f.tensor_id, f.box)
                if k in owner:
                    raise WeightStoreError(f"box [{box_text(*f.box)}] of tensor "
                                           f"{f.tensor_id!r} is bound to ranks {owner[k]} and "
                                           f"{b.rank}")
                owner[k] = b.rank
        bound_boxes: Dict[str, List[Any]] = {}
        for tid, box in owner:
            bound_boxes.setdefault(tid, []).append(box)
        for t in placement.tensors:
            missing = uncovered(t, bound_boxes.get(t.tensor_id, []))
            if missing:
                raise WeightStoreError(f"the bindings leave tensor {t.tensor_id!r} uncovered: "
                                       f"{describe_boxes(missing)}")
        self.base = weight_store.snapshot_base(snapshot)
        self.manifest_key = self.base + "/manifest"
        self.writer_id = uuid.uuid4().hex
        self._dir = f"{self.base}/payload/r{rank}/{self.writer_id}"
        self._written: Dict[str, StoredFragment] = {}  # fragment id -> payload
        self._n = 0
        self._lock = threading.Lock()
        self._state = "open"
        self._pending: Optional[Tuple[StoredWeightManifest, bytes]] = None
        self.manifest: Optional[StoredWeightManifest] = None
        self._part_key = f"{self.base}/part/r{rank}"
        self._live_key = f"{self.base}/live/r{rank}"
        if self._store.is_exist(self._part_key) == 1:
            raise WeightStoreError(f"rank {rank} of snapshot {snapshot.snapshot_id} has "
                                   f"already committed its fragments")
        weight_store._reclaim_rank(self.base, rank)
        self._publish_liveness()

    # ---- liveness ------------------------------------------------------------------
    def _publish_liveness(self) -> None:
        """The live key sits on this client's own segment: it disappears
        with the segment when this process dies (client TTL), which marks
        the payloads of this writer as abandoned."""
        from ...store import ReplicateConfig
        cfg = None
        host = getattr(self._store, "get_hostname", lambda: "")()
        if host:
            cfg = ReplicateConfig()
            cfg.preferred_segment = host
        rc = self._store.put(self._live_key, self.writer_id.encode(), cfg)
        if rc != 0:
            raise WeightStoreError(f"cannot publish the writer's live key {self._live_key!r}",
                                   rc)
        if self._store.get(self._live_key) != self.writer_id.encode():
            raise WeightStoreError(f"rank {self.rank} of snapshot {self.snapshot.snapshot_id} "
                                   f"already has a live writer")

    @property
    def plan(self) -> List[PlacementFragment]:
        """The fragments this writer must write."""
        p = self.source.placement
        return [p.fragment(fid) for fid in self._bound.get(self.rank, ())]

    def _check_open(self) -> None:
        if self._state != "open":
            raise WeightStoreError(f"the writer is {self._state}")

    # ---- write -----------------------------------------------------------------------
    def write_tensor(self, tensor_id: str, tensor: Any) -> List[str]:
        """Write this rank's fragment(s) of ``tensor_id`` from ``tensor``.

        Returns the ids of the fragments written (empty for a replica
        another rank writes).  Raises :class:`WeightStoreError` naming the
        tensor and the difference when ``tensor`` does not match the
        fragment (dtype, shape) or this rank holds no fragment of it;
        nothing is written then."""
        with self._lock:
            self._check_open()
            placement = self.source.placement
            map_name = getattr(self.adapter, "tensor_id_of", None)
            if callable(map_name):
                tensor_id = map_name(tensor_id)
            try:
                t = placement.tensor(tensor_id)
            except KeyError:
                raise WeightStoreError(f"tensor {tensor_id!r} is not in the snapshot's "
                                       f"placement") from None
            try:
                dt, shape = tensor_dtype_shape(tensor)
            except (TypeError, ValueError) as e:
                raise WeightStoreError(f"tensor {tensor_id!r}: {e}") from None
            try:
                ids = list(self.adapter.resolve_fragment_ids(tensor_id=tensor_id, tensor=tensor,
                                                             source=self.source))
            except KeyError as e:
                raise WeightStoreError(f"tensor {tensor_id!r}: {e}") from None
            if not ids:
                raise WeightStoreError(f"tensor {tensor_id!r}: rank {self.rank} holds no "
                                       f"fragment of it")
            if dt != t.dtype:
                raise WeightStoreError(f"tensor {tensor_id!r}: dtype {dt} differs from the "
                                       f"snapshot's {t.dtype}")
            frags = []
            for fid in ids:
                try:
                    f = placement.fragment(fid)
                except KeyError as e:
                    raise WeightStoreError(f"tensor {tensor_id!r}: {e}") from None
                if f.tensor_id != tensor_id:
                    raise WeightStoreError(f"tensor {tensor_id!r}: the adapter chose fragment "
                                           f"{fid} of another tensor")
                if f.rank != self.rank:
                    raise WeightStoreError(f"tensor {tensor_id!r}: fragment "
                                           f"[{box_text(*f.box)}] belongs to rank {f.rank}, "
                                           f"this writer is rank {self.rank}")
                if len(ids) == 1 and shape != f.local_shape:
                    raise WeightStoreError(f"tensor {tensor_id!r}: shape {shape} differs from "
                                           f"rank {self.rank}'s fragment "
                                           f"[{box_text(*f.box)}] of shape {f.local_shape}")
                frags.append(f)
            if len(frags) > 1:
                raise WeightStoreError(f"tensor {tensor_id!r}: rank {self.rank} holds "
                                       f"{len(frags)} fragments of it; write each separately "
                                       f"(adapter resolve_fragment_ids must pick one)")
            f = frags[0]
            bound = set(self._bound.get(self.rank, ()))
            if f.fragment_id not in bound:
                return []  # a replica: another rank writes this box
            if f.fragment_id in self._written:
                raise WeightStoreError(f"tensor {tensor_id!r}: fragment [{box_text(*f.box)}] "
                                       f"was already written by this writer")
            self._written[f.fragment_id] = self._put_payload(f, t, tensor)
            return [f.fragment_id]

    def _put_payload(self, f: PlacementFragment, t: TensorDescriptor, tensor: Any
                     ) -> StoredFragment:
        ptr, size, owner = _memory_of(tensor)
        if size == 0:
            return StoredFragment(f.tensor_id, f.global_offset, f.local_shape, "", 0)
        key = f"{self._dir}/{self._n}"
        self._n += 1
        rc = self._ws._put_memory(key, ptr, size)
        del owner
        if rc != 0:
            raise WeightStoreError(f"tensor {f.tensor_id!r}: writing fragment "
                                   f"[{box_text(*f.box)}] to {key!r} failed ({rc})", rc)
        return StoredFragment(f.tensor_id, f.global_offset, f.local_shape, key, size)

    # ---- commit ----------------------------------------------------------------------
    def _own_missing(self) -> List[PlacementFragment]:
        return [f for f in self.plan if f.fragment_id not in self._written]

    def _part_record(self) -> bytes:
        frs = sorted(self._written.values(), key=lambda s: (s.tensor_id, s.global_offset))
        return _canonical({"format": _PART_FORMAT, "writer": self.writer_id, "rank": self.rank,
                           "fragments": [[s.tensor_id, list(s.global_offset),
                                          list(s.local_shape), s.key, s.nbytes] for s in frs]})

    def seal(self) -> None:
        """Publish this rank's fragment record (its part of the coverage)
        without waiting for the others: for ranks whose commit comes later
        from another writer (e.g. several writers in one process)."""
        with self._lock:
            self._check_open()
            self._check_own()
            self._publish_part()

    def _check_own(self) -> None:
        missing = self._own_missing()
        if missing:
            raise WeightStoreError(
                "commit: rank %d has not written %s" % (self.rank, ", ".join(
                    f"{f.tensor_id}[{box_text(*f.box)}]" for f in missing[:8])
                    + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")))

    def commit(self, timeout: float = 0.0) -> StoredWeightManifest:
        """Publish this rank's fragments, then — when every box of every
        tensor is covered by the committed ranks — the snapshot's manifest.

        ``timeout``: seconds to wait for other ranks' commits (multi-process
        snapshots; polled, bounded).  Raises :class:`WeightStoreError`
        naming what is missing when coverage is incomplete (this writer
        stays open and committed; retry), or when publishing the manifest
        fails (the writer keeps its payloads; retry ``commit()``)."""
        with self._lock:
            if self._state == "committed" and self.manifest is not None:
                return self.manifest
            self._check_open()
            self._check_own()
            if self._pending is None:
                self._publish_part()
                parts = self._collect_parts(timeout)
                self._pending = self._build_manifest(parts)
            manifest, raw = self._pending
            self._publish(raw)
            self._state = "committed"
            self.manifest = manifest
            self._store.remove(self._live_key, True)
            return manifest

    def _publish_part(self) -> None:
        raw = self._part_record()
        got = self._store.get(self._part_key)
        if got:
            if json.loads(got).get("writer") != self.writer_id:
                raise WeightStoreError(f"rank {self.rank} was committed by another writer")
            return
        rc = self._store.put(self._part_key, raw, self._ws.config)
        if rc != 0:
            raise WeightStoreError(f"commit: publishing rank {self.rank}'s fragments failed", rc)

    def _collect_parts(self, timeout: float) -> Dict[int, Any]:
        ranks = sorted(r for r, ids in self._bound.items() if ids)
        deadline = time.monotonic() + max(0.0, float(timeout))
        parts: Dict[int, Any] = {}
        while True:
            for r in ranks:
                if r in parts:
                    continue
                raw = self._store.get(f"{self.base}/part/r{r}")
                if raw:
                    try:
                        p = json.loads(raw)
                    except ValueError:
                        raise WeightStoreError(f"commit: the fragment record of rank {r} is "
                                               f"corrupt") from None
                    if p.get("format") != _PART_FORMAT or p.get("rank") != r:
                        raise WeightStoreError(f"commit: the fragment record of rank {r} is "
                                               f"corrupt")
                    parts[r] = p
            if len(parts) == len(ranks) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        absent = [r for r in ranks if r not in parts]
        if absent:
            placement = self.source.placement
            holes = []
            for t in placement.tensors:
                have = [(tuple(f[1]), tuple(f[2])) for p in parts.values()
                        for f in p["fragments"] if f[0] == t.tensor_id]
                for o, s in uncovered(t, have):
                    holes.append(f"{t.tensor_id}[{box_text(o, s)}]")
            raise WeightStoreError(
                f"commit: snapshot {self.snapshot.snapshot_id} is not fully covered: rank(s) "
                f"{absent} have not committed; missing {', '.join(holes[:8])}"
                + (f" and {len(holes) - 8} more" if len(holes) > 8 else ""))
        return parts

    def _build_manifest(self, parts: Mapping[int, Any]) -> Tuple[StoredWeightManifest, bytes]:
        placement = self.source.placement
        frs = []
        for r in sorted(parts):
            for tid, off, shp, key, nb in parts[r]["fragments"]:
                frs.append(StoredFragment(tid, tuple(off), tuple(shp), key, nb))
        frs.sort(key=lambda s: (s.tensor_id, s.global_offset))
        boxes: Dict[str, List[Any]] = {}
        for s in frs:
            boxes.setdefault(s.tensor_id, []).append((s.global_offset, s.local_shape))
        for t in placement.tensors:
            holes = uncovered(t, boxes.get(t.tensor_id, []))
            if holes:
                raise WeightStoreError(f"commit: tensor {t.tensor_id!r} is not fully covered: "
                                       f"{describe_boxes(holes)} missing")
        d = self.snapshot
        body = StoredWeightManifest._body(d.namespace, d.resource_id, d.revision,
                                          d.weight_generation, placement.tensors, frs)
        sha = _digest(body)
        body["sha256"] = sha
        m = StoredWeightManifest(self.manifest_key, d.namespace, d.resource_id, d.revision,
                                 d.weight_generation, placement.tensors, tuple(frs), sha)
        return m, _canonical(body)

    # ---- abort (_SnapshotWriterEnd) -------------------------------------------------
    def _writer_error(self, msg: str, rc: Optional[int] = None) -> Exception:
        return WeightStoreError(msg, rc)


class WeightStore:
    """Model-weight snapshots over a Mooncake store (any object with the
    ``MooncakeDistributedStore`` methods)."""

    def __init__(self, store: Any, key_prefix: str = "weights", config: Any = None) -> None:
        """``config``: the ``ReplicateConfig`` of every payload and record
        write (e.g. ``preferred_segment`` naming the clients that hold the
        snapshot); group ids are refused (a snapshot is removed by
        ``remove_snapshot``, not by group)."""
        if config is not None and getattr(config, "group_ids", None):
            raise ValueError("WeightStore config must not carry group_ids")
        self.store = store
        self.key_prefix = _normalize_key_prefix(key_prefix)
        self.config = config
        self._stage: Any = None
        self._stage_lock = threading.Lock()

    def snapshot_base(self, snapshot: WeightSnapshotDescriptor) -> str:
        return f"{self.key_prefix}/{snapshot.snapshot_id}"

    def manifest_key(self, snapshot: WeightSnapshotDescriptor) -> str:
        return self.snapshot_base(snapshot) + "/manifest"

    # ---- write -----------------------------------------------------------------------
    def begin_weight_snapshot(self, snapshot: WeightSnapshotDescriptor,
                              adapter: Any) -> Any:
        """Open this rank's writer of ``snapshot`` (rank: ``adapter.writer_rank``).

        An adapter on upstream's contracts (it has ``participant_id``, and
        ``export_source`` returns upstream's ``WeightPlacementManifest``
        and runtime bindings) gets a
        ``store_writer.PlacementSnapshotWriter``, whose ``commit()``
        publishes upstream's ``WeightManifest``."""
        if hasattr(adapter, "participant_id"):
            from .store_writer import PlacementSnapshotWriter
            if not isinstance(snapshot, WeightSnapshotDescriptor):
                raise TypeError("snapshot must be a WeightSnapshotDescriptor")
            return PlacementSnapshotWriter(self, snapshot, adapter,
                                           adapter.export_source(snapshot), WeightStoreError)
        return WeightStoreWriter(self, snapshot, adapter)

    def _put_memory(self, key: str, ptr: int, size: int) -> int:
        """Zero-copy from registered memory (the caller's registration, or
        ours for the call); a copy through ``put`` when it cannot be."""
        s, cfg = self.store, self.config
        if hasattr(s, "put_from"):
            rc = s.put_from(key, ptr, size, cfg)
            if rc != _INVALID_PARAMS:
                return rc
            if s.register_buffer(ptr, size) == 0:
                try:
                    return s.put_from(key, ptr, size, cfg)
                finally:
                    s.unregister_buffer(ptr)
        return s.put(key, (ctypes.c_char * size).from_address(ptr), cfg)

    def _reclaim_rank(self, base: str, rank: int) -> int:
        if self.store.is_exist(f"{base}/part/r{rank}") == 1 \
                or self.store.is_exist(f"{base}/live/r{rank}") == 1:
            return 0
        return max(0, self.store.remove_by_regex(
            "^" + _ere_escape(f"{base}/payload/r{rank}/"), True))

    def reclaim_abandoned(self, snapshot: WeightSnapshotDescriptor, ranks: Sequence[int]) -> int:
        """Remove the payloads of ranks of ``snapshot`` whose writer died
        before committing (no live key, no fragment record); returns the
        number of keys removed."""
        base = self.snapshot_base(snapshot)
        return sum(self._reclaim_rank(base, r) for r in ranks)

    def remove_snapshot(self, snapshot: WeightSnapshotDescriptor) -> int:
        """Remove a snapshot: its manifest first (from then on no reader
        finds it), then every payload and record under its key space.
        Returns the number of keys removed."""
        base = self.snapshot_base(snapshot)
        n = int(self.store.remove(base + "/manifest", True) == 0)
        n += max(0, self.store.remove_by_regex("^" + _ere_escape(base + "/"), True))
        return n

    # ---- read ------------------------------------------------------------------------
    def load_manifest(self, ref: Union[str, WeightSnapshotDescriptor, StoredWeightManifest,
                                       WeightManifest, StoredManifestIdentity]
                      ) -> Union[StoredWeightManifest, WeightManifest]:
        """Fetch and check a manifest (by key, descriptor, manifest or
        ``StoredManifestIdentity``).  A manifest in upstream's stored layout
        (``resource_kind`` at the top) is parsed with
        ``WeightManifest.from_json`` (its ValueErrors surface unchanged) and
        returned as upstream's ``WeightManifest``; an identity must match
        its location and ``content_sha256`` the SHA-256 of the bytes."""
        identity = None
        if isinstance(ref, WeightSnapshotDescriptor):
            key = self.manifest_key(ref)
        elif isinstance(ref, (StoredWeightManifest, WeightManifest)):
            key = ref.manifest_key
        elif isinstance(ref, StoredManifestIdentity):
            key, identity = ref.manifest_key, ref
        elif isinstance(ref, str):
            key = ref
        else:
            raise TypeError("load_manifest takes a manifest key, a WeightSnapshotDescriptor, "
                            "a manifest or a StoredManifestIdentity")
        if not key.endswith("/manifest"):
            raise WeightStoreError(f"{key!r} is not a manifest key")
        raw = self.store.get(key)
        if not raw:
            raise WeightStoreError(f"no manifest at {key!r}")
        if identity is not None or _upstream_layout(raw):
            return _parse_upstream(key, bytes(raw), identity)
        return parse_manifest(key, raw, key[:-len("/manifest")])

    def plan_load(self, manifest: Union[StoredWeightManifest, WeightManifest], placement: Any,
                  bindings: Optional[Sequence[Any]] = None, *,
                  planning_limits: Any = None
                  ) -> Union[WeightLoadPlan, "store_load.StoredLoadPlan"]:
        """The ranged reads that fill each target binding's fragments
        (default: every fragment of every rank of ``placement``).

        With upstream's ``WeightManifest``, ``placement`` is upstream's
        ``WeightPlacementManifest`` and ``bindings`` its
        ``WeightRuntimeBindingManifest``s (default: every non-empty
        participant); the plan is upstream's planner's
        (``store_load.StoredLoadPlan``), its refusals ValueErrors."""
        if isinstance(manifest, WeightManifest):
            return store_load.plan_stored_load(manifest, placement, bindings, planning_limits)
        if not isinstance(manifest, StoredWeightManifest):
            raise TypeError("manifest must be a StoredWeightManifest (load_manifest)")
        if not isinstance(placement, WeightPlacementManifest):
            raise TypeError("placement must be a WeightPlacementManifest")
        bindings = tuple(bindings) if bindings is not None else \
            tuple(placement.target_bindings())
        src = {t.tensor_id: t for t in manifest.tensors}
        for t in placement.tensors:
            s = src.get(t.tensor_id)
            if s is None:
                raise WeightStoreError(f"plan_load: tensor {t.tensor_id!r} is not in the "
                                       f"snapshot")
            if s != t:
                raise WeightStoreError(f"plan_load: tensor {t.tensor_id!r} is "
                                       f"{t.global_shape} {t.dtype} in the target, "
                                       f"{s.global_shape} {s.dtype} in the snapshot")
        with no_gc():
            return self._plan(manifest, placement, bindings, src)

    def _plan(self, manifest: StoredWeightManifest, placement: WeightPlacementManifest,
              bindings: Tuple[WeightRuntimeBinding, ...], src: Mapping[str, TensorDescriptor]
              ) -> WeightLoadPlan:
        stored: Dict[str, List[Any]] = {tid: [] for tid in src}
        for f in manifest.fragments:
            if f.nbytes:
                stored[f.tensor_id].append((f.global_offset, f.local_shape, f.key))
        try:
            reads = plan_reads(stored, {t: src[t].itemsize for t in src}, placement, bindings)
        except (KeyError, ValueError) as e:
            raise WeightStoreError(f"plan_load: {e}") from None
        return WeightLoadPlan(manifest.manifest_key, placement, bindings, reads)

    def load(self, plan: Union[WeightLoadPlan, "store_load.StoredLoadPlan"],
             destinations: Optional[Mapping[str, Any]] = None,
             rank: Optional[Union[int, str]] = None) -> int:
        """Execute ``plan`` for ``rank`` (default: every rank of the plan):
        ranged zero-copy reads straight into the destination tensors.

        ``destinations`` maps target fragment ids — or tensor ids, when the
        rank holds one fragment of the tensor — to contiguous CPU tensors
        (torch or numpy) of the fragment's shape and dtype; a binding's
        ``tensors`` serve as defaults.  Returns the bytes read.

        A ``store_load.StoredLoadPlan`` (upstream's manifest) is executed
        for the participant id ``rank`` (default: all of the plan's);
        ``destinations`` are keyed by ``placement_fragment_id``, and a
        runtime binding's fragment addresses serve as defaults."""
        if isinstance(plan, store_load.StoredLoadPlan):
            pids = plan.participants if rank is None else [rank]
            dest = store_load.resolve_destinations(plan, destinations, pids, _dest_memory)
            return self._execute([rd for p in pids for rd in plan.reads[p]], dest)
        ranks = plan.ranks if rank is None else [rank]
        dest: Dict[str, Tuple[int, int]] = {}
        for r in ranks:
            b = plan.binding(r)
            for fid in b.fragment_ids:
                f = plan.target.fragment(fid)
                t = plan.target.tensor(f.tensor_id)
                d = None
                if destinations is not None:
                    d = destinations.get(fid)
                    if d is None and len(ranks) == 1:
                        d = destinations.get(f.tensor_id)
                if d is None:
                    d = b.tensors.get(fid)
                what = f"{f.tensor_id}[{box_text(*f.box)}] of rank {r}"
                if d is None:
                    raise WeightStoreError(f"load: no destination for {what}")
                try:
                    dt, shape = tensor_dtype_shape(d)
                except (TypeError, ValueError) as e:
                    raise WeightStoreError(f"load: destination of {what}: {e}") from None
                if dt != t.dtype or shape != f.local_shape:
                    raise WeightStoreError(f"load: destination of {what} is {shape} {dt}, "
                                           f"the fragment {f.local_shape} {t.dtype}")
                dest[fid] = _dest_memory(d, what)
        return self._execute([rd for r in ranks for rd in plan.reads[r]], dest)

    # A strided read whose runs are shorter than this and back to back in
    # the payload is read as one range into a staging buffer, then copied
    # into place: the same bytes cross the transport, in one piece, at the
    # cost of a second copy.  0 (the default) stages nothing: the store
    # copies many rows of one payload at about the cost of their bytes,
    # which measured faster than staging on the shm and TCP transports.
    STAGE_RUN_BYTES = 0
    STAGE_BATCH_BYTES = 64 << 20

    def _execute(self, reads: Sequence[RangedRead], dest: Mapping[str, Tuple[int, int]]) -> int:
        if not reads:
            return 0
        direct = [rd for rd in reads if not _stageable(rd, self.STAGE_RUN_BYTES)]
        staged = [rd for rd in reads if _stageable(rd, self.STAGE_RUN_BYTES)]
        reg = _Registration(self.store)
        try:
            for fid in {rd.target_fragment_id for rd in reads}:
                reg.add(*dest[fid])
            if direct and staged:
                # the direct reads go on while the staged ones are copied into
                # place (both calls release the GIL)
                with ThreadPoolExecutor(1) as pool:
                    fut = pool.submit(self._read_direct, direct, dest)
                    try:
                        total = self._read_staged(staged, dest)
                    finally:
                        total_direct = fut.result()
                total += total_direct
            else:
                total = self._read_direct(direct, dest) + self._read_staged(staged, dest)
        finally:
            reg.release()
        return total

    def _read_staged(self, reads: Sequence[RangedRead], dest: Mapping[str, Tuple[int, int]]
                     ) -> int:
        """Batches through the two halves of one registered staging buffer:
        while a batch is copied into place (another thread; the copy
        releases the GIL), the next one is read into the other half."""
        if not reads:
            return 0
        half = max(self.STAGE_BATCH_BYTES // 2, max(rd.nbytes for rd in reads))
        half = min(half, sum(rd.nbytes for rd in reads))
        with self._stage_lock:  # one staged load at a time per WeightStore
            return self._read_staged_locked(reads, dest, half)

    def _read_staged_locked(self, reads: Sequence[RangedRead],
                            dest: Mapping[str, Tuple[int, int]], half: int) -> int:
        import numpy as np
        stage = self._staging(2 * half)
        batches: List[List[Tuple[RangedRead, int]]] = []
        batch: List[Tuple[RangedRead, int]] = []
        off = 0
        for rd in reads:
            if batch and off + rd.nbytes > half:
                batches.append(batch)
                batch, off = [], 0
            batch.append((rd, off))
            off += rd.nbytes
        batches.append(batch)

        def scatter(batch: List[Tuple[RangedRead, int]], base: int) -> None:
            for rd, o in batch:
                ptr, size = dest[rd.target_fragment_id]
                whole = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(ptr))
                to = np.lib.stride_tricks.as_strided(
                    whole[rd.dst_start:], shape=rd.counts + (rd.run_bytes,),
                    strides=rd.dst_strides + (1,))
                o += base
                np.copyto(to, stage[o:o + rd.nbytes].reshape(rd.counts + (rd.run_bytes,)))

        total = 0
        copies: List[Any] = [None, None]  # the copy still using each half
        with ThreadPoolExecutor(1) as pool:
            try:
                for i, batch in enumerate(batches):
                    h = i % 2
                    if copies[h] is not None:
                        copies[h].result()
                    base = h * half
                    total += self._read_direct(
                        [RangedRead(rd.tensor_id, "", rd.key, rd.src_start, base + o, rd.nbytes)
                         for rd, o in batch], {"": (stage.ctypes.data, 2 * half)})
                    copies[h] = pool.submit(scatter, batch, base)
            finally:
                for c in copies:
                    if c is not None:
                        c.result()
        return total

    def _staging(self, size: int) -> Any:
        """The staging buffer, kept registered between loads (``close()``)."""
        import numpy as np
        if self._stage is None or self._stage.nbytes < size:
            self.close()
            buf = np.empty(size, np.uint8)
            rc = self.store.register_buffer(buf.ctypes.data, size)
            if rc != 0:
                raise WeightStoreError(f"load: cannot register a staging buffer ({rc})", rc)
            self._stage = buf
        return self._stage

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # the store may be closed already
            pass

    def close(self) -> None:
        """Give back the staging buffer of loads (registered memory)."""
        if self._stage is not None:
            self.store.unregister_buffer(self._stage.ctypes.data)
            self._stage = None

    def _read_direct(self, reads: Sequence[RangedRead], dest: Mapping[str, Tuple[int, int]]
                     ) -> int:
        """All reads in one ranged-read call: one flat list of (key, buffer,
        dst offset, src offset, length) fragments."""
        import numpy as np
        if not reads:
            return 0
        keys: List[str] = []
        parts: List[Tuple[Any, Any, Any, Any]] = []  # buffer, dst, src, size
        total = 0
        for rd in reads:
            buf = dest[rd.target_fragment_id][0]
            if rd.counts:
                s_off, d_off = rd.expand()
                n = len(s_off)
                parts.append((np.full(n, buf, np.int64), d_off, s_off,
                              np.full(n, rd.run_bytes, np.int64)))
                keys.extend([rd.key] * n)
            else:
                parts.append(([buf], [rd.dst_start], [rd.src_start], [rd.run_bytes]))
                keys.append(rd.key)
            total += rd.nbytes
        bufs, dsts, srcs, sizes = (np.concatenate([np.asarray(p[c], np.int64) for p in parts])
                                   for c in range(4))
        native = getattr(getattr(self.store, "_store", None), "read_ranges", None)
        if native is not None:  # the flat form of get_into_ranges, checked natively
            # int64 arrays go to C as they are: no Python int per range
            results = np.asarray(native(keys, bufs, dsts, srcs, sizes), np.int64)
        else:
            got = self.store.get_into_ranges(bufs.tolist(), [[k] for k in keys],
                                             [[[d]] for d in dsts.tolist()],
                                             [[[x]] for x in srcs.tolist()],
                                             [[[z]] for z in sizes.tolist()])
            results = np.asarray([g[0][0] for g in got], np.int64)
        bad = np.flatnonzero(results != sizes)
        if bad.size:
            got = int(results[bad[0]])
            raise WeightStoreError(f"load: reading {keys[bad[0]]!r} failed ({got})",
                                   got if got < 0 else None)
        return total


def _upstream_layout(raw: Any) -> bool:
    """Whether stored manifest bytes are upstream's WeightManifest layout
    (which has resource_kind; ours has format and version)."""
    try:
        doc = json.loads(bytes(raw))
    except ValueError:
        return False
    return isinstance(doc, dict) and "resource_kind" in doc and "format" not in doc


def _parse_upstream(key: str, raw: bytes, identity: Optional[StoredManifestIdentity]
                    ) -> WeightManifest:
    m = WeightManifest.from_json(raw)
    if m.manifest_key != key:
        raise ValueError(f"weight manifest at {key!r} names manifest_key {m.manifest_key!r}")
    if identity is not None:
        if hashlib.sha256(raw).hexdigest() != identity.content_sha256:
            raise ValueError(f"weight manifest at {key!r} differs from the expected "
                             f"content_sha256")
        if m.manifest_identity != identity:
            raise ValueError(f"weight manifest at {key!r} differs from the expected identity")
    return m


def _stageable(rd: RangedRead, max_run: int) -> bool:
    """Short runs that lie back to back in the payload."""
    if not rd.counts or rd.run_bytes >= max_run:
        return False
    expect = rd.run_bytes
    for n, st in zip(reversed(rd.counts), reversed(rd.src_strides)):
        if st != expect:
            return False
        expect *= n
    return True


def begin_weight_snapshot(store: Any, snapshot: WeightSnapshotDescriptor,
                          adapter: Any) -> WeightStoreWriter:
    """``WeightStore(store).begin_weight_snapshot(snapshot, adapter)``."""
    return WeightStore(store).begin_weight_snapshot(snapshot, adapter)


__all__ = ["StoredFragment", "StoredWeightManifest", "WeightLoadPlan", "WeightSnapshotAdapter",
           "WeightSnapshotDescriptor", "WeightStore", "WeightStoreError", "WeightStoreWriter",
           "begin_weight_snapshot", "dtype_name", "ITEMSIZE"]

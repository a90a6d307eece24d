# SPDX-License-Identifier: Apache-2.0
"""Manifest-backed model-weight snapshots in Mooncake Store, on upstream's
contracts (docs/weights.md).

    weight_store = WeightStore(store)
    writer = weight_store.begin_weight_snapshot(descriptor, adapter)
    writer.write_tensor(tensor_id, tensor)          # each box this participant stores
    manifest = writer.commit()                      # upstream's WeightManifest

    manifest = weight_store.load_manifest(key)      # any process
    plan = weight_store.plan_load(manifest, target_placement, target_bindings)
    weight_store.load(plan, destinations)           # ranged reads into tensors

The adapter exports upstream's complete WeightPlacementManifest and
runtime bindings; the plan is upstream's planner's
(plan_stored_transfer_to_target_placement, made by libmooncake's planner
core); contract refusals are upstream's ValueErrors, store failures
WeightStoreError.

May import: _hooks, _keys, _memory and the weight modules below it
(snapshot, storage_manifest, store_load, store_plan, store_writer); not
mooncake.store or structured_object_store (it works on any store object it
is given).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ... import _hooks
from ..._keys import _ere_escape, _normalize_key_prefix
from . import _memory
from .store_plan import RangedRead
from .snapshot import WeightSnapshotAdapter, WeightSnapshotDescriptor
from .storage_manifest import StoredManifestIdentity, WeightManifest
from . import store_load
from .store_writer import PlacementSnapshotWriter as _PlacementSnapshotWriter

_INVALID_PARAMS = -600


class WeightStoreError(RuntimeError):
    """A weight snapshot operation failed; ``rc`` is the store status when
    a store call failed."""

    def __init__(self, message: str, rc: Optional[int] = None) -> None:
        super().__init__(message)
        self.rc = rc


def _memory_of(tensor: Any) -> Tuple[int, int, Any]:
    """(address, nbytes, owner) of a contiguous CPU copy-free view, or of a
    contiguous copy when ``tensor`` is not contiguous (_memory.memory_of)."""
    return _memory.memory_of(tensor, WeightStoreError)


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

    def add(self, ptr: int, size: int) -> bool:
        if size and hasattr(self.store, "register_buffer") \
                and self.store.register_buffer(ptr, size) == 0:
            self.ptrs.append(ptr)
            return True
        return False

    def add_all(self, spans: Sequence[Tuple[int, int]]) -> None:
        """Register the (address, size) spans; spans that lie back to back
        (tensors allocated one after another) as one region each, so a
        load into 122 tensors costs a few registrations instead of 122
        (each is a call into the engine and back, before the first read
        and after the last).  A merged region that cannot be registered
        (part of it already is) falls back to its spans one by one."""
        run: List[Tuple[int, int]] = []
        for ptr, size in sorted(s for s in spans if s[1]) + [(-1, 0)]:
            if run and ptr != run[-1][0] + run[-1][1]:
                start, end = run[0][0], run[-1][0] + run[-1][1]
                if len(run) == 1 or not self.add(start, end - start):
                    for p, z in run:
                        self.add(p, z)
                run = []
            run.append((ptr, size))

    def release(self) -> None:
        for p in self.ptrs:
            self.store.unregister_buffer(p)
        self.ptrs = []


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
        """Open the writer of participant ``adapter.participant_id`` of
        ``snapshot`` (a ``store_writer.PlacementSnapshotWriter``).

        ``adapter.export_source(snapshot)`` returns upstream's complete
        ``WeightPlacementManifest`` and runtime bindings
        (``WeightSnapshotSource``); the placement's identity must be the
        descriptor's, its coverage is re-proved and every binding
        validated; ``commit()`` publishes upstream's ``WeightManifest``."""
        if not isinstance(snapshot, WeightSnapshotDescriptor):
            raise TypeError("snapshot must be a WeightSnapshotDescriptor")
        if not hasattr(adapter, "participant_id") or \
                not callable(getattr(adapter, "export_source", None)):
            raise TypeError("adapter must have participant_id and export_source(descriptor) "
                            "returning upstream's placement (see WeightSnapshotAdapter)")
        return _PlacementSnapshotWriter(self, snapshot, adapter,
                                        adapter.export_source(snapshot), WeightStoreError)

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

    def reclaim_abandoned(self, snapshot: WeightSnapshotDescriptor,
                          indices: Sequence[int]) -> int:
        """Remove the payloads of participants of ``snapshot`` (by their
        index in the sorted topology, as in the keys) whose writer died
        before committing (no live key, no fragment record); returns the
        number of keys removed."""
        base = self.snapshot_base(snapshot)
        return sum(self._reclaim_rank(base, r) for r in indices)

    def remove_snapshot(self, snapshot: WeightSnapshotDescriptor) -> int:
        """Remove a snapshot: its manifest first (from then on no reader
        finds it), then every payload and record under its key space.
        Returns the number of keys removed."""
        base = self.snapshot_base(snapshot)
        n = int(self.store.remove(base + "/manifest", True) == 0)
        n += max(0, self.store.remove_by_regex("^" + _ere_escape(base + "/"), True))
        return n

    # ---- read ------------------------------------------------------------------------
    def load_manifest(self, ref: Union[str, WeightSnapshotDescriptor, WeightManifest,
                                       StoredManifestIdentity]) -> WeightManifest:
        """Fetch and parse a snapshot's manifest (by key, descriptor,
        manifest or ``StoredManifestIdentity``) with upstream's
        ``WeightManifest.from_json`` (its ValueErrors surface unchanged).
        An identity must match the manifest's location and its
        ``content_sha256`` the SHA-256 of the stored bytes."""
        identity = None
        if isinstance(ref, WeightSnapshotDescriptor):
            key = self.manifest_key(ref)
        elif isinstance(ref, WeightManifest):
            key = ref.manifest_key
        elif isinstance(ref, StoredManifestIdentity):
            key, identity = ref.manifest_key, ref
        elif isinstance(ref, str):
            key = ref
        else:
            raise TypeError("load_manifest takes a manifest key, a WeightSnapshotDescriptor, "
                            "a WeightManifest or a StoredManifestIdentity")
        if not key.endswith("/manifest"):
            raise WeightStoreError(f"{key!r} is not a manifest key")
        raw = self.store.get(key)
        if not raw:
            raise WeightStoreError(f"no manifest at {key!r}")
        return _parse_upstream(key, bytes(raw), identity)

    def plan_load(self, manifest: WeightManifest, placement: Any,
                  bindings: Optional[Sequence[Any]] = None, *,
                  planning_limits: Any = None) -> "store_load.StoredLoadPlan":
        """Upstream's plan from the committed ``manifest`` into the target
        ``placement`` (a ``WeightPlacementManifest``), for every non-empty
        participant or those of ``bindings``
        (``WeightRuntimeBindingManifest``s, validated against the target;
        their generation and lease are kept as fences).  Refusals are
        upstream's ValueErrors."""
        if not isinstance(manifest, WeightManifest):
            raise TypeError("manifest must be a WeightManifest (load_manifest)")
        return store_load.plan_stored_load(manifest, placement, bindings, planning_limits)

    def load(self, plan: "store_load.StoredLoadPlan",
             destinations: Optional[Mapping[str, Any]] = None,
             participant_id: Optional[str] = None) -> int:
        """Execute ``plan`` for ``participant_id`` (default: every
        participant of the plan): ranged zero-copy reads straight into the
        destinations.  ``destinations`` maps ``placement_fragment_id`` to
        contiguous CPU tensors (torch or numpy) of the fragment's shape and
        element size; a runtime binding's fragment addresses serve as
        defaults.  Re-attests the source snapshot and the bindings before
        any I/O.  Returns the bytes read."""
        if not isinstance(plan, store_load.StoredLoadPlan):
            raise TypeError("plan must come from WeightStore.plan_load")
        pids = plan.participants if participant_id is None else [participant_id]
        dest = store_load.resolve_destinations(plan, destinations, pids, _dest_memory)
        native = getattr(getattr(self.store, "_store", None), "read_blocks", None)
        if plan.lowering is not None and native is not None:
            # a native plan's regions as strided blocks, not a read per row
            blocks = plan.lowering.blocks().select(pids)
            if not self._stage_run_bytes(blocks):
                return self._execute_blocks(native, blocks, dest)
        lowered = plan.lowered
        if lowered is None:       # a plan of the reference planner
            lowered = store_load.lowered_from_reads(plan)
        return self._execute_lowered(lowered.select(pids), dest)

    # A strided read whose runs are shorter than this and back to back in
    # the payload is read as one range into a staging buffer, then copied
    # into place: the same bytes cross the transport in one request, at the
    # cost of a second copy.  None (the default) decides per load: a
    # same-host replica is copied by the store itself, row by row, at about
    # the cost of its bytes, and over tcp the store reads each run of
    # adjoining rows as one scattered read straight into the rows
    # (docs/transfer.md §6), so neither stages; over another transport
    # (rdma: no scattered read, one request per row) rows are staged below
    # AUTO_STAGE_RUN_BYTES (bench/README.md, weights).
    STAGE_RUN_BYTES: Optional[int] = None
    AUTO_STAGE_RUN_BYTES = 1 << 20
    STAGE_BATCH_BYTES = 64 << 20

    def _stage_run_bytes(self, lw: Any) -> int:
        if self.STAGE_RUN_BYTES is not None:
            return self.STAGE_RUN_BYTES
        if getattr(self.store, "_protocol", None) == "tcp":
            return 0
        if os.environ.get("MC_TE_SHM", "1").strip() == "0":
            return self.AUTO_STAGE_RUN_BYTES
        return 0 if _same_host(self.store, lw) else self.AUTO_STAGE_RUN_BYTES

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
                    self._read_flat([rd.key for rd, _ in batch], None,
                                    np.full(len(batch), stage.ctypes.data, np.int64),
                                    np.asarray([base + o for _, o in batch], np.int64),
                                    np.asarray([rd.src_start for rd, _ in batch], np.int64),
                                    np.asarray([rd.nbytes for rd, _ in batch], np.int64))
                    total += sum(rd.nbytes for rd, _ in batch)
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

    def _execute_lowered(self, lw: "store_load.LoweredReads",
                         dest: Mapping[str, Tuple[int, int]]) -> int:
        """Execute flat, coalesced reads (StoredLoadPlan.lowered) into the
        destinations: one ranged-read call for all of them."""
        import numpy as np
        if not len(lw.key):
            return 0
        staged, direct = _staged_groups(lw, self._stage_run_bytes(lw))
        reg = _Registration(self.store)
        try:
            ptr = _register_targets(reg, lw, dest)
            blocks = getattr(getattr(self.store, "_store", None), "read_blocks", None)
            if not staged and blocks is not None:  # the rows as strided blocks
                self._read_blocks(blocks, list(lw.keys), _lowered_blocks(lw, ptr))
                return int(lw.length.sum())
            if not staged:  # every read direct: the columns as they are
                c = np.ascontiguousarray
                self._read_flat(list(lw.keys), c(lw.key, np.int64), ptr[lw.target], c(lw.dst),
                                c(lw.src), c(lw.length))
                return int(lw.length.sum())
            # the direct reads go on while the staged ones are copied into
            # place (both calls release the GIL)
            with ThreadPoolExecutor(1) as pool:
                fut = pool.submit(self._read_flat, list(lw.keys),
                                  np.asarray(lw.key[direct], np.int64), ptr[lw.target[direct]],
                                  lw.dst[direct], lw.src[direct], lw.length[direct])
                try:
                    self._read_staged(staged, dest)
                finally:
                    fut.result()
        finally:
            reg.release()
        return int(lw.length.sum())

    def _execute_blocks(self, native: Any, bl: "store_load.LoweredBlocks",
                        dest: Mapping[str, Tuple[int, int]]) -> int:
        """Execute strided blocks (StoredLoadPlan.lowering.blocks) into the
        destinations: one mc_store_read_blocks call for all of them."""
        if not len(bl.key):
            return 0
        reg = _Registration(self.store)
        try:
            ptr = _register_targets(reg, bl, dest)
            self._read_blocks(native, list(bl.keys), (bl.key, ptr[bl.target], bl.dst,
                                                      bl.dst_stride, bl.src, bl.src_stride,
                                                      bl.length, bl.rows))
        finally:
            reg.release()
        return bl.nbytes()

    @staticmethod
    def _read_blocks(native: Any, keys: List[str], cols: Tuple[Any, ...]) -> None:
        """Read the strided blocks ``cols`` (_lowered_blocks) in one call;
        raise naming the first block that failed."""
        import numpy as np
        kidx, bufs, dst, dstride, src, sstride, rlen, rows = cols
        results = np.frombuffer(native(keys, kidx, bufs, dst, dstride, src, sstride, rlen, rows),
                                np.int64)
        bad = np.flatnonzero(results != rlen * rows)
        if bad.size:
            got = int(results[bad[0]])
            raise WeightStoreError(f"load: reading {keys[int(kidx[bad[0]])]!r} failed ({got})",
                                   got if got < 0 else None)

    def _read_flat(self, keys: List[str], index: Any, bufs: Any, dsts: Any, srcs: Any,
                   sizes: Any) -> None:
        """Read range i (``sizes[i]`` bytes of ``keys[index[i]]``, or of
        ``keys[i]`` when ``index`` is None, at ``srcs[i]`` to ``bufs[i] +
        dsts[i]``; int64 arrays) in one call; raise naming the first range
        that failed."""
        import numpy as np
        native = getattr(getattr(self.store, "_store", None), "read_ranges", None)
        if native is not None:  # the flat form of get_into_ranges, checked natively
            # int64 arrays go to C as they are (read in place), each key
            # once with the index of every range's, and the results come
            # back as packed int64: no Python object per range either way
            # (a list of 164 k results, its min and sum cost ~10 ms a load;
            # a list of 164 k keys ~1 ms in the bindings, ~5 ms to build)
            results = np.frombuffer(native(keys, bufs, dsts, srcs, sizes, 1, index), np.int64)
        else:
            per = keys if index is None else [keys[k] for k in np.asarray(index).tolist()]
            got = self.store.get_into_ranges(bufs.tolist(), [[k] for k in per],
                                             [[[d]] for d in dsts.tolist()],
                                             [[[x]] for x in srcs.tolist()],
                                             [[[z]] for z in sizes.tolist()])
            results = np.asarray([g[0][0] for g in got], np.int64)
        bad = np.flatnonzero(results != sizes)
        if bad.size:
            got = int(results[bad[0]])
            key = keys[bad[0]] if index is None else keys[int(index[bad[0]])]
            raise WeightStoreError(f"load: reading {key!r} failed ({got})",
                                   got if got < 0 else None)


def _register_targets(reg: _Registration, lw: Any, dest: Mapping[str, Tuple[int, int]]) -> Any:
    """Register the destinations of the target fragments ``lw`` (lowered
    reads or blocks) writes into; each fragment's address (int64, by
    fragment index; 0 for one not written)."""
    import numpy as np
    # the fragments read into (a count, not np.unique's sort: ~1 ms per
    # 164 k reads)
    used = np.flatnonzero(np.bincount(lw.target, minlength=len(lw.fragment_ids))).tolist()
    ptr = np.zeros(len(lw.fragment_ids), np.int64)
    spans = []
    for t in used:
        addr, size = dest[lw.fragment_ids[t]]
        ptr[t] = addr
        spans.append((addr, size))
    reg.add_all(spans)
    return ptr


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


def _same_host(store: Any, lw: "store_load.LoweredReads") -> bool:
    """Whether the first object a load reads has its memory replica on
    this host (by the segment's "host:port"); True when that cannot be
    told (the store's own row copies are never wrong, only slower)."""
    try:
        host = store.get_hostname().rsplit(":", 1)[0]
        descs = store.get_replica_desc(lw.keys[int(lw.key[0])])
        for d in descs:
            if d.is_memory_replica():
                ep = d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                return ep.rsplit(":", 1)[0] == host
    except Exception:  # a store without these calls (a test double)
        return True
    return True


# id(LoweredReads) -> its blocks' (first read, dst stride, src stride,
# rows), dropped when it goes: a plan loaded again (the same LoweredReads)
# finds its blocks here
_BLOCKS: Dict[int, Tuple[Any, ...]] = {}
_BLOCKS_LOCK = threading.Lock()


def _lowered_blocks(lw: "store_load.LoweredReads", ptr: Any) -> Tuple[Any, ...]:
    """The lowered reads as strided blocks (mc_store_read_blocks), their
    shape found once per LoweredReads (_block_shape) and kept while it
    lives; ``ptr``: each target fragment's address."""
    import numpy as np
    with _BLOCKS_LOCK:
        shape = _BLOCKS.get(id(lw))
    if shape is None:
        shape = _block_shape(lw)
        try:
            weakref.finalize(lw, _BLOCKS.pop, id(lw), None)
            with _BLOCKS_LOCK:
                _BLOCKS[id(lw)] = shape
        except TypeError:  # not weakly referable: found every time
            pass
    first, ds, ss, rows = shape
    key, src, ln, tgt, dst = (np.asarray(c, np.int64) for c in
                              (lw.key, lw.src, lw.length, lw.target, lw.dst))
    return (key[first], ptr[tgt[first]], dst[first], ds, src[first], ss, ln[first], rows)


def _block_shape(lw: "store_load.LoweredReads") -> Tuple[Any, ...]:
    """The lowered reads as strided blocks (mc_store_read_blocks): each run
    of consecutive reads of one object into one target fragment with one
    length, whose sources and destinations step by one constant stride
    each (a region's rows), is one block; any other read is a block of one
    row.  Returns each block's first read, dst stride, src stride and rows
    (int64 arrays).  Vectorized: no Python work per read."""
    import numpy as np
    key, src, ln, tgt, dst = (np.asarray(c, np.int64) for c in
                              (lw.key, lw.src, lw.length, lw.target, lw.dst))
    n = len(key)
    first = np.arange(n, dtype=np.int64)
    rows = np.ones(n, np.int64)
    ds = np.zeros(n, np.int64)
    ss = np.zeros(n, np.int64)
    if n >= 2:
        # pair p joins read p to read p + 1
        dd, sd = dst[1:] - dst[:-1], src[1:] - src[:-1]
        join = ((key[1:] == key[:-1]) & (tgt[1:] == tgt[:-1]) & (ln[1:] == ln[:-1]) &
                (dd >= ln[:-1]) & (sd >= ln[:-1]))
        # runs of joined pairs of one stride pair each
        start = join.copy()
        start[1:] &= ~join[:-1] | (dd[1:] != dd[:-1]) | (sd[1:] != sd[:-1])
        p0 = np.flatnonzero(start)
        if p0.size:
            # a run's last pair: joined, and the next pair is not in it
            end = join.copy()
            end[:-1] &= ~join[1:] | start[1:]
            p1 = np.flatnonzero(end)
            # a run's first read may be the last of the run before it
            f = p0 + np.concatenate(([0], join[p0[1:] - 1])).astype(np.int64)
            if p0[0] > 0:
                f[0] = p0[0] + int(join[p0[0] - 1])
            last = p1 + 1
            keep = last > f
            f, last, p0 = f[keep], last[keep], p0[keep]
            covered = np.zeros(n + 1, np.int64)
            np.add.at(covered, f, 1)
            np.add.at(covered, last + 1, -1)
            single = np.cumsum(covered[:n]) == 0
            first = np.concatenate((f, np.flatnonzero(single)))
            rows = np.concatenate((last - f + 1, np.ones(int(single.sum()), np.int64)))
            ds = np.concatenate((dd[p0], np.zeros(int(single.sum()), np.int64)))
            ss = np.concatenate((sd[p0], np.zeros(int(single.sum()), np.int64)))
    return first, ds, ss, rows


def _staged_groups(lw: "store_load.LoweredReads", max_run: int
                   ) -> Tuple[List[RangedRead], Any]:
    """Runs shorter than ``max_run`` that lie back to back in one object,
    go to one target fragment at one stride and have one length (the rows
    of a column block): each such group as one strided RangedRead to stage
    (read whole, then copied into place); and the mask of the other reads,
    read directly."""
    import numpy as np
    n = len(lw.key)
    direct = np.ones(n, bool)
    if max_run <= 0 or n < 2:
        return [], direct
    key, src, ln, tgt, dst = lw.key, lw.src, lw.length, lw.target, lw.dst
    cont = np.zeros(n, bool)
    cont[1:] = ((key[1:] == key[:-1]) & (tgt[1:] == tgt[:-1]) & (src[1:] == src[:-1] + ln[:-1])
                & (ln[1:] == ln[:-1]) & (ln[1:] < max_run))
    starts = np.flatnonzero(~cont)
    ends = np.append(starts[1:], n)
    delta = np.zeros(n, np.int64)
    delta[1:] = dst[1:] - dst[:-1]
    out: List[RangedRead] = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        if e - s < 2 or not (delta[s + 1:e] == delta[s + 1]).all() or delta[s + 1] < ln[s]:
            continue
        out.append(RangedRead("", lw.fragment_ids[int(tgt[s])], lw.keys[int(key[s])],
                              int(src[s]), int(dst[s]), int(ln[s]), (e - s,), (int(ln[s]),),
                              (int(delta[s + 1]),)))
        direct[s:e] = False
    return out, direct


def begin_weight_snapshot(store: Any, snapshot: WeightSnapshotDescriptor, adapter: Any) -> Any:
    """``WeightStore(store).begin_weight_snapshot(snapshot, adapter)``."""
    return WeightStore(store).begin_weight_snapshot(snapshot, adapter)


def _open_weight_snapshot(store: Any, snapshot: Any, adapter: Any) -> Any:
    """MooncakeDistributedStore.begin_weight_snapshot's way in (_hooks):
    begin_weight_snapshot, looked up at each call."""
    return begin_weight_snapshot(store, snapshot, adapter)


# mooncake.store is below this module and does not import it: hand it the opener.
_hooks.weight_snapshot_opener = _open_weight_snapshot


__all__ = ["WeightSnapshotAdapter", "WeightSnapshotDescriptor", "WeightStore",
           "WeightStoreError", "begin_weight_snapshot"]

# SPDX-License-Identifier: Apache-2.0
"""WeightStore on upstream's contracts against a real master and client.

Reading: a snapshot in upstream's documented stored layout (a
WeightManifest written by hand from ../shared/reference/upstream-reshard.md
§9, payload objects packed per source rank) loads here: load_manifest
parses it (bytes and digest as stored), plan_load takes upstream's target
placement and bindings, and load fills destinations — tensors keyed by
placement_fragment_id, or the memory runtime bindings declare — bit-exact,
TP=4 -> TP=2 with row, column, replicated and FP8 tensors.

Writing: writers opened with an adapter exporting upstream's placement
store each box once (the planner's source rule) and commit upstream's
WeightManifest, read back into other layouts bit-exact: TP4 -> TP2/TP1,
PP2xTP2 -> TP2 columns, EP2 -> EP1xTP2, DP2xTP2 -> DP3; refusals, a retried
commit after a failed publication, and writes from runtime bindings."""
import dataclasses
import hashlib
import json
import select
import subprocess
import sys
from unittest.mock import patch

import numpy as np
import pytest

from helpers import Master, stop_procs
from mooncake.reshard.weight import (OwnershipAxis, ParallelRank, ParallelTopology,
                                     PlacementFragment, ReplicatedAxis, RuntimeBindingFragment,
                                     SplitAxis, TensorDescriptor, TopologyParticipant,
                                     WeightManifest, WeightPlacementManifest,
                                     WeightRuntimeBindingManifest)
from mooncake.reshard.weight.storage_manifest import StoredManifestIdentity
from mooncake.reshard.weight.store import (WeightSnapshotDescriptor, WeightStore,
                                           WeightStoreError)
from mooncake.reshard.weight import WeightSnapshotAdapter

GROUP = "weights/default/model/rev/1"
MODEL = [  # tensor id, shape, dtype, itemsize, numpy dtype, split dim or None
    ("qkv", (8, 4), "bfloat16", 2, np.int16, 0),
    ("o", (4, 8), "bfloat16", 2, np.int16, 1),
    ("norm", (4,), "float32", 4, np.int32, None),
    ("scale", (8, 2), "float8_e4m3fn", 1, np.uint8, 0),
]


def descriptors():
    out = []
    for tid, shape, dtype, item, _, dim in MODEL:
        axes = (SplitAxis("tp", dim),) if dim is not None else (ReplicatedAxis("tp"),)
        out.append(TensorDescriptor(tid, shape, dtype, item,
                                    (dim,) if dim is not None else (), f"test:{dtype}:v1",
                                    axes))
    return out


def global_arrays():
    rng = np.random.default_rng(36)
    return {tid: rng.integers(0, 1 << (8 * item - 1), size=shape).astype(npd)
            for tid, shape, _, item, npd, _ in MODEL}


def boxes(tp):
    """(tensor id, rank, offset, shape) of the even TP layout."""
    out = []
    for tid, shape, _, _, _, dim in MODEL:
        for r in range(tp):
            if dim is None:
                out.append((tid, r, (0,) * len(shape), shape))
                continue
            step = shape[dim] // tp
            off = [0] * len(shape)
            loc = list(shape)
            off[dim], loc[dim] = r * step, step
            out.append((tid, r, tuple(off), tuple(loc)))
    return out


def sl(a, off, shape):
    return a[tuple(slice(o, o + n) for o, n in zip(off, shape))]


def stored_snapshot(store):
    """Pack TP=4's boxes into one object per rank (the replicated norm from
    rank 0 only) and publish a manifest written by hand in upstream's
    layout.  Returns the manifest's bytes."""
    arrays = global_arrays()
    objects, frags = {}, []
    for tid, r, off, shape in boxes(4):
        if tid == "norm" and r:
            continue
        data = np.ascontiguousarray(sl(arrays[tid], off, shape)).tobytes()
        key = f"{GROUP}/payload/{r}"
        buf = objects.setdefault(key, bytearray())
        frags.append({"fragment_id": f"{tid}@{r}", "tensor_id": tid,
                      "global_offset": list(off), "local_shape": list(shape),
                      "object_key": key, "object_offset": len(buf), "nbytes": len(data),
                      "aliases": []})
        buf.extend(data)
    tensors = []
    for tid, shape, dtype, item, _, dim in sorted(MODEL):
        axes = ([{"semantics": "split", "kind": "tp", "dim": dim}] if dim is not None
                else [{"semantics": "replicated", "kind": "tp"}])
        tensors.append({"tensor_id": tid, "global_shape": list(shape), "dtype": dtype,
                        "itemsize": item, "shard_dims": [dim] if dim is not None else [],
                        "layout_fingerprint": f"test:{dtype}:v1", "parallel_axes": axes,
                        "layer_id": None, "expert_id": None})
    frags.sort(key=lambda f: (f["tensor_id"], f["global_offset"]))
    doc = {"resource_kind": "model_weight", "namespace": "default", "resource_id": "model",
           "revision": "rev", "weight_generation": 1, "group_id": GROUP,
           "manifest_key": GROUP + "/manifest", "tensors": tensors, "fragments": frags,
           "created_at": "2026-08-19T00:00:00Z"}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    for key, data in objects.items():
        assert store.put(key, bytes(data)) == 0
    assert store.put(GROUP + "/manifest", raw) == 0
    return raw


def target_tp2():
    topo = ParallelTopology(tp_size=2, pp_size=1, ep_size=1, dp_size=1, participants=[
        TopologyParticipant(f"worker/{r}", ParallelRank(tp=r)) for r in range(2)])
    item = {tid: it for tid, _, _, it, _, _ in MODEL}
    frags = [PlacementFragment(tid, off, shape, int(np.prod(shape)) * item[tid],
                               ParallelRank(tp=r)) for tid, r, off, shape in boxes(2)]
    return WeightPlacementManifest.from_fragments(
        resource_id="model", revision="rev", weight_generation=1, placement_set_id="rollout",
        topology=topo, tensors=descriptors(), fragments=frags)


def empty_destinations(target, participant=None):
    npd = {tid: d for tid, _, _, _, d, _ in MODEL}
    return {f.placement_fragment_id: np.zeros(f.local_shape, npd[f.tensor_id])
            for p in target.parts if participant in (None, p.participant_id)
            for f in p.fragments}


def check(target, dest, participant=None):
    arrays = global_arrays()
    by_id = {f.placement_fragment_id: f for f in target.fragments}
    for fid, arr in dest.items():
        f = by_id[fid]
        np.testing.assert_array_equal(arr, sl(arrays[f.tensor_id], f.global_offset,
                                              f.local_shape), err_msg=fid)


def test_upstream_manifest_loads_bit_exact(store):
    raw = stored_snapshot(store)
    ws = WeightStore(store)
    m = ws.load_manifest(GROUP + "/manifest")
    assert isinstance(m, WeightManifest)
    assert m.to_json().encode() == raw                      # byte-compatible
    assert m.manifest_digest == hashlib.sha256(raw).hexdigest()
    ident = StoredManifestIdentity("default", "model", "rev", 1, GROUP, GROUP + "/manifest",
                                   hashlib.sha256(raw).hexdigest())
    assert ws.load_manifest(ident) == m
    with pytest.raises(ValueError, match="content_sha256"):
        ws.load_manifest(StoredManifestIdentity("default", "model", "rev", 1, GROUP,
                                                GROUP + "/manifest", "0" * 64))
    target = target_tp2()
    plan = ws.plan_load(m, target)
    assert plan.participants == ["worker/0", "worker/1"]
    assert plan.nbytes() == plan.plan.total_bytes == sum(f.nbytes for f in target.fragments)
    dest = empty_destinations(target)
    assert ws.load(plan, dest) == plan.nbytes()
    check(target, dest)
    # one participant at a time
    one = empty_destinations(target, "worker/1")
    assert ws.load(plan, one, participant_id="worker/1") == plan.nbytes("worker/1")
    check(target, one)


def binding_for(target, participant, dest):
    part = target.part(participant)
    item = {t.tensor_id: t.itemsize for t in target.tensors}
    frags = []
    for f in part.fragments:
        a = dest[f.placement_fragment_id]
        frags.append(RuntimeBindingFragment(
            f.placement_fragment_id, "rt:" + f.placement_fragment_id, a.ctypes.data, a.nbytes,
            "host-a", "127.0.0.1:1", "cpu", item[f.tensor_id], a.shape, a.strides,
            a.ctypes.data, a.nbytes, 0))
    return WeightRuntimeBindingManifest(
        target.resource_id, target.placement_id, target.digest, "instance-1", 3, "lease-1",
        target.revision, participant, tuple(frags))


def test_upstream_manifest_loads_into_runtime_bindings(store):
    stored_snapshot(store)
    ws = WeightStore(store)
    m = ws.load_manifest(GROUP + "/manifest")
    target = target_tp2()
    dest = empty_destinations(target, "worker/0")
    binding = binding_for(target, "worker/0", dest)
    plan = ws.plan_load(m, target, [binding])
    assert plan.participants == ["worker/0"]
    assert ws.load(plan) == plan.nbytes()                    # into the bound memory
    check(target, dest)
    gpu = binding_for(target, "worker/0", dest)
    gpu = WeightRuntimeBindingManifest(*[getattr(gpu, f) for f in (
        "resource_id", "placement_id", "placement_digest", "instance_id", "generation",
        "lease_id", "revision", "participant_id")], tuple(
        RuntimeBindingFragment(*[getattr(x, n) for n in (
            "placement_fragment_id", "fragment_id", "address", "nbytes", "worker_id",
            "endpoint")], "cuda:0", *[getattr(x, n) for n in (
            "itemsize", "local_shape", "strides_bytes", "storage_address", "storage_nbytes",
            "storage_offset_bytes")]) for x in gpu.fragments))
    with pytest.raises(ValueError, match="device 'cuda:0' is not supported"):
        ws.plan_load(m, target, [gpu])


def test_upstream_load_refusals(store):
    stored_snapshot(store)
    ws = WeightStore(store)
    m = ws.load_manifest(GROUP + "/manifest")
    target = target_tp2()
    plan = ws.plan_load(m, target)
    dest = empty_destinations(target)
    fid, arr = next(iter(dest.items()))
    with pytest.raises(ValueError, match="no destination for"):
        ws.load(plan, {k: v for k, v in dest.items() if k != fid})
    with pytest.raises(ValueError, match="destination of .* is"):
        ws.load(plan, {**dest, fid: np.zeros(arr.shape, np.int64)})
    with pytest.raises(ValueError, match="unknown target participant: worker/9"):
        ws.load(plan, dest, participant_id="worker/9")
    # nothing was read by the refused loads
    assert all(not a.any() for a in dest.values())
    # a target of another revision is refused by upstream's planner
    other = WeightPlacementManifest.from_fragments(
        resource_id="model", revision="other", weight_generation=1,
        placement_set_id="rollout", topology=target.topology, tensors=target.tensors,
        fragments=target.fragments)
    with pytest.raises(ValueError, match="source and target revision differ"):
        ws.plan_load(m, other)


# --- writing from upstream's placement ----------------------------------------
R = ParallelRank


def layout(topo_sizes, tensors, frags, set_id, revision="w1"):
    tp, pp, ep, dp = topo_sizes
    ranks = sorted({f.rank for f in frags}, key=lambda r: (r.dp, r.pp, r.ep, r.tp))
    topo = ParallelTopology(tp_size=tp, pp_size=pp, ep_size=ep, dp_size=dp, participants=[
        TopologyParticipant(f"node/{r.dp}.{r.pp}.{r.ep}.{r.tp}", r) for r in ranks])
    return WeightPlacementManifest.from_fragments(
        resource_id="model", revision=revision, weight_generation=2,
        placement_set_id=set_id, topology=topo, tensors=tensors, fragments=frags)


def T(tid, shape, axes, item=2):
    shard = tuple(sorted(a.dim for a in axes if isinstance(a, SplitAxis)))
    return TensorDescriptor(tid, shape, "bfloat16" if item == 2 else "float8_e4m3fn", item,
                            shard, "fp", axes)


def F(t, off, shape, rank, **kw):
    return PlacementFragment(t.tensor_id, off, shape, int(np.prod(shape)) * t.itemsize, rank,
                             **kw)


def data_of(tensors):
    rng = np.random.default_rng(7)
    return {t.tensor_id: rng.integers(0, 1 << (8 * t.itemsize - 1), size=t.global_shape)
            .astype(np.int16 if t.itemsize == 2 else np.uint8) for t in tensors}


def write_all(ws, placement, arrays, desc):
    """Every participant's writer in this process; the last one commits."""
    writers = [ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(placement,
                                                                       p.participant_id))
               for p in placement.topology.participants]
    written = []
    for w in writers:
        for f in w.part.fragments:
            a = np.ascontiguousarray(sl(arrays[f.tensor_id], f.global_offset, f.local_shape))
            written += w.write_fragment(f.placement_fragment_id, a)
    for w in writers[:-1]:
        w.seal()
    return writers[-1].commit(), written


def read_into(ws, manifest, target, arrays):
    plan = ws.plan_load(manifest, target)
    npd = {t: a.dtype for t, a in arrays.items()}
    dest = {f.placement_fragment_id: np.zeros(f.local_shape, npd[f.tensor_id])
            for f in target.fragments}
    assert ws.load(plan, dest) == sum(f.nbytes for f in target.fragments)
    for f in target.fragments:
        np.testing.assert_array_equal(dest[f.placement_fragment_id],
                                      sl(arrays[f.tensor_id], f.global_offset, f.local_shape))


def tp_layout(tp, set_id):
    rows = T("rows", (8, 4), (SplitAxis("tp", 0),))
    cols = T("cols", (4, 8), (SplitAxis("tp", 1),))
    norm = T("norm", (4,), (ReplicatedAxis("tp"),))
    fp8 = T("fp8", (8,), (SplitAxis("tp", 0),), item=1)
    frags = []
    for r in range(tp):
        frags += [F(rows, (r * 8 // tp, 0), (8 // tp, 4), R(tp=r)),
                  F(cols, (0, r * 8 // tp), (4, 8 // tp), R(tp=r)),
                  F(norm, (0,), (4,), R(tp=r)),
                  F(fp8, (r * 8 // tp,), (8 // tp,), R(tp=r))]
    return layout((tp, 1, 1, 1), [rows, cols, norm, fp8], frags, set_id)


def test_tp4_writers_commit_upstream_manifest_and_tp2_reads(store):
    ws = WeightStore(store)
    src = tp_layout(4, "trainer")
    arrays = data_of(src.tensors)
    desc = WeightSnapshotDescriptor("model", "w1", 2)
    m, written = write_all(ws, src, arrays, desc)
    assert isinstance(m, WeightManifest)
    # each box stored once: the replicated norm by the lowest rank only
    assert len(m.fragments) == 4 * 3 + 1 and len(written) == 13
    norm = [f for f in m.fragments if f.tensor_id == "norm"]
    assert [f.fragment_id for f in norm] == [
        next(f.placement_fragment_id for f in src.fragments
             if f.tensor_id == "norm" and f.rank == R(tp=0))]
    assert m.group_id == ws.snapshot_base(desc) and m.manifest_key == m.group_id + "/manifest"
    raw = store.get(m.manifest_key)
    assert raw == m.to_json().encode()                     # published verbatim
    doc = json.loads(raw)
    assert "sha256" not in doc and "format" not in doc and doc["resource_kind"] == "model_weight"
    assert all(f["object_key"].startswith(m.group_id + "/payload/r") for f in doc["fragments"])
    loaded = ws.load_manifest(m.manifest_identity)
    assert loaded == m
    read_into(ws, loaded, tp_layout(2, "rollout"), arrays)
    read_into(ws, loaded, tp_layout(1, "single"), arrays)


def test_pp_ep_dp_layouts_round_trip(store):
    ws = WeightStore(store)
    # PP2 x TP2 source: layer l on stage l // 2
    layers = [T(f"layers.{i}", (4, 4), (OwnershipAxis("pp"), SplitAxis("tp", 0)))
              for i in range(4)]
    frags = [F(t, (2 * k, 0), (2, 4), R(pp=i // 2, tp=k), pipeline_stage_id=i // 2)
             for i, t in enumerate(layers) for k in range(2)]
    src = layout((2, 2, 1, 1), layers, frags, "pp")
    arrays = data_of(layers)
    m, _ = write_all(ws, src, arrays, WeightSnapshotDescriptor("model", "w1", 2, "pp"))
    flat = [T(t.tensor_id, (4, 4), (SplitAxis("tp", 1),)) for t in layers]
    read_into(ws, m, layout((2, 1, 1, 1), flat, [F(t, (0, 2 * k), (4, 2), R(tp=k))
                                                 for t in flat for k in range(2)], "tp2"),
              arrays)
    # EP2 source (experts split over ep, replicated over tp) -> EP1 TP2 columns
    ex = T("experts", (4, 6), (SplitAxis("ep", 0), ReplicatedAxis("tp")))
    src = layout((2, 1, 2, 1), [ex], [F(ex, (2 * e, 0), (2, 6), R(ep=e, tp=t))
                                      for e in range(2) for t in range(2)], "ep")
    arrays = data_of([ex])
    m, written = write_all(ws, src, arrays, WeightSnapshotDescriptor("model", "w1", 2, "ep"))
    assert len(m.fragments) == 2 and len(written) == 2      # tp replicas stored once
    tex = T("experts", (4, 6), (SplitAxis("tp", 1),))
    read_into(ws, m, layout((2, 1, 1, 1), [tex], [F(tex, (0, 3 * k), (4, 3), R(tp=k))
                                                  for k in range(2)], "ep1"), arrays)
    # DP2 x TP2 replicas: only DP replica 0 is stored; read by DP3 x TP1
    w = T("w", (8, 2), (ReplicatedAxis("dp"), SplitAxis("tp", 0)))
    src = layout((2, 1, 1, 2), [w], [F(w, (4 * k, 0), (4, 2), R(dp=d, tp=k))
                                     for d in range(2) for k in range(2)], "dp")
    arrays = data_of([w])
    m, written = write_all(ws, src, arrays, WeightSnapshotDescriptor("model", "w1", 2, "dp"))
    assert len(written) == 2
    assert {f.fragment_id for f in m.fragments} == {
        f.placement_fragment_id for f in src.fragments if f.rank.dp == 0}
    read_into(ws, m, layout((1, 1, 1, 3), [w], [F(w, (0, 0), (8, 2), R(dp=d))
                                                for d in range(3)], "dp3"), arrays)


def test_writer_refusals_retry_and_bindings(store):
    ws = WeightStore(store)
    src = tp_layout(2, "trainer")
    arrays = data_of(src.tensors)
    with pytest.raises(ValueError, match="snapshot descriptor and placement revision differ"):
        ws.begin_weight_snapshot(WeightSnapshotDescriptor("model", "other", 2),
                                 WeightSnapshotAdapter(src, "node/0.0.0.0"))
    with pytest.raises(ValueError, match="unknown topology participant: nobody"):
        ws.begin_weight_snapshot(WeightSnapshotDescriptor("model", "w1", 2, "r"),
                                 WeightSnapshotAdapter(src, "nobody"))
    desc = WeightSnapshotDescriptor("model", "w1", 2, "retry")
    w0, w1 = (ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(src, p.participant_id))
              for p in src.topology.participants)
    with pytest.raises(ValueError, match="is \\(8,\\) with 2-byte elements"):
        w0.write_tensor("rows", np.zeros(8, np.int16))
    with pytest.raises(ValueError, match="1-byte elements"):
        w0.write_tensor("rows", np.zeros((4, 4), np.uint8))
    for w in (w0, w1):
        for f in w.part.fragments:
            got = w.write_tensor(f.tensor_id, np.ascontiguousarray(
                sl(arrays[f.tensor_id], f.global_offset, f.local_shape)))
            if f.tensor_id == "norm" and w is w1:
                assert got == []                          # the replica rank 0 stores
    w0.seal()
    real_put = type(store).put

    def failing_put(self, key, *a, **k):
        if key.endswith("/manifest"):
            return -1
        return real_put(self, key, *a, **k)
    with patch.object(type(store), "put", failing_put):
        with pytest.raises(WeightStoreError, match="retry commit"):
            w1.commit()
    m = w1.commit()                                       # the same manifest, payloads kept
    assert w1.commit() is m
    read_into(ws, m, tp_layout(1, "single"), arrays)
    # writing from a runtime binding's memory
    desc = WeightSnapshotDescriptor("model", "w1", 2, "bound")
    writers = []
    keep = []
    for p in src.topology.participants:
        part = src.part(p.participant_id)
        frs = []
        for f in part.fragments:
            a = np.ascontiguousarray(sl(arrays[f.tensor_id], f.global_offset, f.local_shape))
            keep.append(a)
            frs.append(RuntimeBindingFragment(
                f.placement_fragment_id, "rt", a.ctypes.data, a.nbytes, "h", "e", "cpu",
                a.itemsize, a.shape, a.strides, a.ctypes.data, a.nbytes, 0))
        frs = [dataclasses.replace(x, fragment_id=f"rt-{i}") for i, x in enumerate(frs)]
        b = WeightRuntimeBindingManifest("model", src.placement_id, src.digest, "inst", 1,
                                         "lease", "w1", p.participant_id, tuple(frs))
        writers.append(ws.begin_weight_snapshot(
            desc, WeightSnapshotAdapter(src, p.participant_id, [b])))
    for w in writers:
        w.write_bound_fragments()
    writers[0].seal()
    read_into(ws, writers[1].commit(), tp_layout(2, "again"), arrays)


def test_writer_abort_removes_payloads_and_duplicate_writer(store):
    ws = WeightStore(store)
    src = tp_layout(2, "trainer")
    arrays = data_of(src.tensors)
    desc = WeightSnapshotDescriptor("model", "w1", 2, "abort")
    pid = src.topology.participants[0].participant_id
    w = ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(src, pid))
    with pytest.raises(WeightStoreError, match="already has a live writer"):
        ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(src, pid))
    f = w.part.fragments[0]
    w.write_fragment(f.placement_fragment_id, np.ascontiguousarray(
        sl(arrays[f.tensor_id], f.global_offset, f.local_shape)))
    key = w._written[f.placement_fragment_id].object_key
    assert store.is_exist(key) == 1
    with pytest.raises(WeightStoreError, match="has not written"):
        w.commit()
    assert w.abort() >= 1
    assert store.is_exist(key) != 1 and store.is_exist(w._live_key) != 1
    with pytest.raises(WeightStoreError, match="the writer is aborted"):
        w.write_fragment(f.placement_fragment_id, np.zeros(f.local_shape, np.int16))


# --- several writer processes ---------------------------------------------------

def mp_layout():
    """PP2 x TP2: layers split by rows on their stage, a norm on stage 1
    replicated over TP."""
    layers = [T(f"layers.{i}", (4, 4), (OwnershipAxis("pp"), SplitAxis("tp", 0)))
              for i in range(4)]
    norm = T("final_norm", (4,), (OwnershipAxis("pp"), ReplicatedAxis("tp")))
    frags = [F(t, (2 * k, 0), (2, 4), R(pp=i // 2, tp=k)) for i, t in enumerate(layers)
             for k in range(2)] + [F(norm, (0,), (4,), R(pp=1, tp=k)) for k in range(2)]
    return layout((2, 2, 1, 1), layers + [norm], frags, "mp")


def _writer_main(master_addr, namespace, index):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master_addr)
    if rc != 0:
        raise SystemExit(f"setup returned {rc}")
    try:
        src = mp_layout()
        arrays = data_of(src.tensors)
        pid = src.topology.participants[index].participant_id
        w = WeightStore(s).begin_weight_snapshot(
            WeightSnapshotDescriptor("model", "w1", 2, namespace),
            WeightSnapshotAdapter(src, pid))
        n = 0
        for f in w.part.fragments:
            n += len(w.write_fragment(f.placement_fragment_id, np.ascontiguousarray(
                sl(arrays[f.tensor_id], f.global_offset, f.local_shape))))
        print(json.dumps({"written": n}), flush=True)
        sys.stdin.readline()                      # commit when the test says so
        m = w.commit(timeout=60)
        print(json.dumps({"digest": m.manifest_digest, "key": m.manifest_key}), flush=True)
        sys.stdin.readline()                      # keep the payloads' segment up
    finally:
        s.close()


def _answer(p, timeout=60):
    r, _, _ = select.select([p.stdout], [], [], timeout)
    if not r:
        raise AssertionError(f"no answer from {p.args}")
    line = p.stdout.readline()
    if not line:
        raise AssertionError(f"{p.args} exited ({p.wait()}): {p.stderr.read()[-3000:]}")
    return json.loads(line)


@pytest.fixture
def patient_master():
    """Its own master with a 30 s client TTL: the writers' segments (and the
    payloads on them) must outlive a loaded machine's slow start."""
    m = Master(extra_args=["--client_ttl=30"])
    try:
        yield m
    finally:
        m.stop()


def test_four_writer_processes_commit_one_manifest(patient_master, make_store):
    procs = [subprocess.Popen([sys.executable, __file__, "write", patient_master.addr, "mp",
                               str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    try:
        written = [_answer(p)["written"] for p in procs]
        # 8 layer boxes + the stage-1 norm once (tp 0 of stage 1)
        assert sum(written) == 9
        for p in procs:                          # all commit at once
            p.stdin.write("commit\n")
            p.stdin.flush()
        done = [_answer(p) for p in procs]
        assert len({d["digest"] for d in done}) == 1 and len({d["key"] for d in done}) == 1
        ws = WeightStore(make_store(m=patient_master))
        m = ws.load_manifest(done[0]["key"])
        assert m.manifest_digest == done[0]["digest"]
        src = mp_layout()
        arrays = data_of(src.tensors)
        flat = [T(t.tensor_id, t.global_shape, (SplitAxis("tp", 0),)) for t in src.tensors]
        read_into(ws, m, layout((1, 1, 1, 1), flat, [F(t, (0,) * len(t.global_shape),
                                                       t.global_shape, R()) for t in flat],
                                "one"), arrays)
    finally:
        stop_procs(procs)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        _writer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))

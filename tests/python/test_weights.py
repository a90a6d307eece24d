# SPDX-License-Identifier: Apache-2.0
"""mooncake.reshard.weight's WeightStore on upstream's contracts against a
real master and real clients: TP round trips 1<->2<->4<->8 (row and column
splits, replicated tensors, uneven splits, bf16/fp16/fp32/int8), write
validation, incomplete coverage, placement coverage re-proved on begin and
on commit, a retried commit after an injected publication failure, abort,
the manifest's digest and immutability, the exact bytes a TP=4 -> TP=2
load moves (client transfer statistics), direct and staged loads, plans of
the reference planner, 4 writer processes loaded by 2 reader processes,
and a writer killed mid-snapshot."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
import torch

from helpers import CLIENT_TTL_S, Master, MiB, stop_procs, wait_until
from test_client_http import http_store, metrics

import weights_proc as wp
from mooncake.store import ErrorCode, MooncakeDistributedStore
from mooncake.reshard.weight import (ParallelRank, ParallelTopology, PlacementFragment,
                                     TensorDescriptor, TopologyParticipant, WeightManifest,
                                     WeightPlacementManifest, WeightSnapshotAdapter,
                                     WeightSnapshotDescriptor, WeightStore, WeightStoreError,
                                     begin_weight_snapshot, tp_placement)
from mooncake.reshard.weight.store_layout import tp_participant
from mooncake.reshard.weight.store_load import StoredLoadPlan
from mooncake.reshard.weight.store_writer import PlacementSnapshotWriter

LEASE_TTL_MS = 5000
PROC = Path(__file__).resolve().parent / "weights_proc.py"


def write_all(store, revision, tp, model=wp.MODEL, ws=None):
    """Every TP participant's writer in this process; the first commits."""
    ws = ws or WeightStore(store)
    desc = wp.descriptor(revision)
    writers = []
    for r in range(tp):
        w = ws.begin_weight_snapshot(desc, wp.adapter(tp, r, revision, model))
        for tid, t in wp.rank_tensors(tp, r, model, revision):
            w.write_tensor(tid, t)
        writers.append(w)
    for w in writers[1:]:
        w.seal()
    return writers[0].commit(), writers


def load_all(ws, manifest, tp, model=wp.MODEL):
    p = wp.placement(tp, model, manifest.revision)
    plan = ws.plan_load(manifest, p)
    for r in range(tp):
        pid = tp_participant(r)
        dest = wp.destinations(plan, pid, model)
        ws.load(plan, dest, participant_id=pid)
        wp.check_loaded(dest, plan, pid, model)
    return plan


def test_public_names_and_store_shortcut(store):
    import mooncake.reshard.weight as weight
    for name in ("WeightStore", "WeightSnapshotDescriptor", "WeightSnapshotAdapter",
                 "WeightStoreError", "begin_weight_snapshot"):
        assert hasattr(sys.modules["mooncake.reshard.weight.store"], name)
    # the pre-upstream writer and layout types are gone (upstream has none of them)
    for gone in ("StoredWeightManifest", "WeightStoreWriter", "WeightLoadPlan",
                 "WeightRuntimeBinding"):
        assert not hasattr(weight, gone)
        assert not hasattr(sys.modules["mooncake.reshard.weight.store"], gone)
    assert weight.TensorDescriptor is weight.manifest.TensorDescriptor
    assert callable(MooncakeDistributedStore.begin_weight_snapshot)
    sentinel = object()
    with patch("mooncake.reshard.weight.store.begin_weight_snapshot",
               return_value=sentinel) as factory:
        assert store.begin_weight_snapshot("d", "a") is sentinel
    assert factory.call_args.args == (store, "d", "a")
    # and the real thing opens a writer
    w = store.begin_weight_snapshot(wp.descriptor("shortcut"), wp.adapter(1, 0, "shortcut"))
    assert isinstance(w, PlacementSnapshotWriter)
    w.abort()
    assert isinstance(begin_weight_snapshot(store, wp.descriptor("shortcut2"),
                                            wp.adapter(1, 0, "shortcut2")),
                      PlacementSnapshotWriter)
    with pytest.raises(TypeError, match="participant_id and export_source"):
        WeightStore(store).begin_weight_snapshot(wp.descriptor("x"), object())


@pytest.mark.parametrize("src,dst", [(1, 2), (2, 1), (2, 4), (4, 2), (4, 8), (8, 4), (1, 8),
                                     (8, 1), (4, 4)])
def test_round_trip_tp(store, src, dst):
    manifest, writers = write_all(store, f"rt-{src}-{dst}", src)
    ws = WeightStore(store)
    loaded = ws.load_manifest(manifest.manifest_key)
    assert loaded == manifest and isinstance(loaded, WeightManifest)
    # one logical copy: replicated tensors are stored once
    assert sum(f.nbytes for f in manifest.fragments) == wp.nbytes()
    plan = load_all(ws, loaded, dst)
    assert isinstance(plan, StoredLoadPlan)
    # every target participant reads exactly its fragments' bytes
    for r in range(dst):
        pid = tp_participant(r)
        assert plan.nbytes(pid) == sum(f.nbytes for f in plan.target_fragments(pid))


def test_descriptor_names_model_and_tensors():
    d = wp.descriptor("v1")
    assert d.snapshot_id == "default/test-model/v1/1"
    for bad in ({"resource_id": ""}, {"revision": "a/b"}, {"weight_generation": -1}):
        kw = dict(resource_id="m", revision="r")
        kw.update(bad)
        with pytest.raises(ValueError):
            WeightSnapshotDescriptor(**kw)
    # placements are upstream's: their constructor refuses gaps and overflows
    embed = TensorDescriptor("embed", (50, 16), "bfloat16", 2, (), "fp", ())
    topo = ParallelTopology(tp_size=1, pp_size=1, ep_size=1, dp_size=1,
                            participants=[TopologyParticipant("w", ParallelRank())])
    kw = dict(resource_id="m", revision="r", weight_generation=0, placement_set_id="s",
              topology=topo, tensors=[embed])
    with pytest.raises(ValueError, match="global placement tensor is not fully covered: embed"):
        WeightPlacementManifest.from_fragments(
            fragments=[PlacementFragment("embed", (0, 0), (25, 16), 800, ParallelRank())], **kw)
    with pytest.raises(ValueError, match="fragment is out of bounds"):
        WeightPlacementManifest.from_fragments(
            fragments=[PlacementFragment("embed", (0, 0), (51, 16), 1632, ParallelRank())],
            **kw)
    # the descriptor must name the placement's identity
    ws = WeightStore(None)
    with pytest.raises(ValueError, match="snapshot descriptor and placement revision differ"):
        ws.begin_weight_snapshot(wp.descriptor("v1"), wp.adapter(1, 0, "v2"))


def test_write_validation(store):
    ws = WeightStore(store)
    w = ws.begin_weight_snapshot(wp.descriptor("bad"), wp.adapter(2, 1, "bad"))
    good = dict(wp.rank_tensors(2, 1, revision="bad"))
    with pytest.raises(ValueError, match=r"qkv .* is \(48, 16\) .*the fragment \(24, 16\)"):
        w.write_tensor("qkv", wp.full("qkv", (48, 16), "float16"))
    with pytest.raises(ValueError, match=r"4-byte elements, the fragment \(24, 16\) with "
                                         r"2-byte"):
        w.write_tensor("qkv", good["qkv"].float())
    with pytest.raises(ValueError, match="holds no fragment of nope"):
        w.write_tensor("nope", good["qkv"])
    with pytest.raises(ValueError, match=r"is \(\) with None-byte elements"):
        w.write_tensor("qkv", [1, 2, 3])
    # another participant's fragment is not this writer's to write
    other = wp.placement(2, revision="bad").part(tp_participant(0))
    up0 = [f for f in other.fragments if f.tensor_id == "up"][0]
    with pytest.raises(ValueError, match="unknown placement fragment for participant tp001"):
        w.write_fragment(up0.placement_fragment_id, good["up"])
    # nothing was written by any failed call
    assert not w._written
    assert store.is_exist(f"{w._dir}/0") == 0
    # a replica that participant 0 writes is skipped on participant 1, not an error
    assert w.write_tensor("norm", good["norm"]) == []
    qkv1 = [f for f in w.part.fragments if f.tensor_id == "qkv"][0]
    assert w.write_tensor("qkv", good["qkv"]) == [qkv1.placement_fragment_id]
    with pytest.raises(ValueError, match="already written"):
        w.write_tensor("qkv", good["qkv"])
    w.abort()


def test_incomplete_coverage(store):
    ws = WeightStore(store)
    # one writer, a tensor left out
    w = ws.begin_weight_snapshot(wp.descriptor("inc1"), wp.adapter(1, 0, "inc1"))
    for tid, t in wp.rank_tensors(1, 0, revision="inc1"):
        if tid != "o":
            w.write_tensor(tid, t)
    o = [f for f in w.part.fragments if f.tensor_id == "o"][0]
    with pytest.raises(WeightStoreError,
                       match=f"participant tp000 has not written {o.placement_fragment_id}"):
        w.commit()
    w.write_tensor("o", dict(wp.rank_tensors(1, 0, revision="inc1"))["o"])
    assert w.commit().fragments
    # two participants, the second never commits: the first's commit names it
    w0 = ws.begin_weight_snapshot(wp.descriptor("inc2"), wp.adapter(2, 0, "inc2"))
    for tid, t in wp.rank_tensors(2, 0, revision="inc2"):
        w0.write_tensor(tid, t)
    with pytest.raises(WeightStoreError, match=r"participant\(s\) \['tp001'\] have not "
                                               r"committed"):
        w0.commit(timeout=0.2)
    assert ws.store.is_exist(ws.manifest_key(wp.descriptor("inc2"))) == 0
    with pytest.raises(WeightStoreError, match="no manifest"):
        ws.load_manifest(wp.descriptor("inc2"))
    # participant 1 arrives later; the retried commit of participant 0 finishes
    w1 = ws.begin_weight_snapshot(wp.descriptor("inc2"), wp.adapter(2, 1, "inc2"))
    for tid, t in wp.rank_tensors(2, 1, revision="inc2"):
        w1.write_tensor(tid, t)
    w1.seal()
    m = w0.commit()
    load_all(ws, ws.load_manifest(m.manifest_key), 4)


def test_placement_coverage_revalidated_on_begin_and_commit(store):
    """A placement source whose parts no longer cover a tensor exactly is
    refused with upstream's message when a writer begins; writers whose
    placements disagree leave a gap that commit refuses the same way."""
    ws = WeightStore(store)
    p = wp.placement(2, revision="cov")
    # a gap: participant 1's qkv box removed after construction
    part = p.part(tp_participant(1))
    holed = tuple(f for f in part.fragments if f.tensor_id != "up")
    object.__setattr__(part, "fragments", holed)
    with pytest.raises(ValueError, match="global placement tensor is not fully covered: up"):
        ws.begin_weight_snapshot(wp.descriptor("cov"),
                                 WeightSnapshotAdapter(p, tp_participant(0)))
    # an overlap beyond replicas: participant 0 also claims participant 1's rows
    p2 = wp.placement(2, revision="cov")
    part0, part1 = p2.part(tp_participant(0)), p2.part(tp_participant(1))
    up1 = [f for f in part1.fragments if f.tensor_id == "qkv"][0]
    stolen = PlacementFragment("qkv", up1.global_offset, up1.local_shape, up1.nbytes,
                               part0.rank)
    object.__setattr__(part0, "fragments", part0.fragments + (stolen,))
    with pytest.raises(ValueError, match="qkv"):
        ws.begin_weight_snapshot(wp.descriptor("cov"),
                                 WeightSnapshotAdapter(p2, tp_participant(0)))
    assert store.is_exist(ws.manifest_key(wp.descriptor("cov"))) == 0
    # on commit: participant 0 writes TP=2's boxes, participant 1 believes in
    # a TP=2 split of "up" at another row: the union leaves a gap
    even = wp.placement(2, revision="cov2")
    model = [(t, s, d, (None if t == "up" else k)) for t, s, d, k in wp.MODEL]
    other = tp_placement(wp.spec(model), 2, resource_id="test-model", revision="cov2",
                         weight_generation=1)
    w0 = ws.begin_weight_snapshot(wp.descriptor("cov2"),
                                  WeightSnapshotAdapter(even, tp_participant(0)))
    w1 = ws.begin_weight_snapshot(wp.descriptor("cov2"),
                                  WeightSnapshotAdapter(other, tp_participant(1)))
    for tid, t in wp.rank_tensors(2, 0, revision="cov2"):
        w0.write_tensor(tid, t)
    for tid, t in wp.rank_tensors(2, 1, model, revision="cov2"):
        w1.write_tensor(tid, t)
    w1.seal()
    with pytest.raises(ValueError, match="wrote different placements"):
        w0.commit()
    # the same records without the placement check: upstream's coverage refusal
    with patch.object(PlacementSnapshotWriter, "_build", _build_unchecked):
        with pytest.raises(ValueError, match="tensor is not fully covered: up"):
            w0.commit()
    assert store.is_exist(ws.manifest_key(wp.descriptor("cov2"))) == 0
    w0.abort()
    w1.abort()


def _build_unchecked(writer, parts):
    """PlacementSnapshotWriter._build without its placement-id check."""
    for p in parts.values():
        p["placement_id"] = writer.placement.placement_id
    return _ORIGINAL_BUILD(writer, parts)


_ORIGINAL_BUILD = PlacementSnapshotWriter._build


class FailingManifestPut:
    """The store, except that the first ``fails`` puts of a manifest fail."""

    def __init__(self, store, fails=1):
        self._s, self.fails = store, fails

    def put(self, key, value, config=None):
        if key.endswith("/manifest") and self.fails > 0:
            self.fails -= 1
            return int(ErrorCode.NO_AVAILABLE_HANDLE)
        return self._s.put(key, value, config)

    def __getattr__(self, name):
        return getattr(self._s, name)


def test_retried_commit_finishes(store):
    failing = FailingManifestPut(store)
    ws = WeightStore(failing)
    desc = wp.descriptor("retry2")
    w = ws.begin_weight_snapshot(desc, wp.adapter(1, 0, "retry2"))
    for tid, t in wp.rank_tensors(1, 0, revision="retry2"):
        w.write_tensor(tid, t)
    keys = [s.object_key for s in w._written.values()]
    with pytest.raises(WeightStoreError, match="retry commit"):
        w.commit()
    assert all(store.is_exist(k) == 1 for k in keys)  # payloads kept
    assert store.is_exist(w.manifest_key) == 0
    m = w.commit()
    assert m == ws.load_manifest(desc)
    assert w.commit() is m  # idempotent once committed
    load_all(ws, m, 2)


def test_abort_removes_payloads(store):
    ws = WeightStore(store)
    w = ws.begin_weight_snapshot(wp.descriptor("abort"), wp.adapter(2, 0, "abort"))
    for tid, t in wp.rank_tensors(2, 0, revision="abort"):
        w.write_tensor(tid, t)
    w.seal()
    keys = [s.object_key for s in w._written.values()]
    assert keys and all(store.is_exist(k) == 1 for k in keys)
    assert w.abort() >= len(keys)
    assert all(store.is_exist(k) == 0 for k in keys)
    assert store.is_exist(w._part_key) == 0 and store.is_exist(w._live_key) == 0
    with pytest.raises(WeightStoreError, match="aborted"):
        w.write_tensor("norm", dict(wp.rank_tensors(2, 0, revision="abort"))["norm"])


def test_manifest_digest_and_immutability(store):
    m, _ = write_all(store, "immut", 2)
    ws = WeightStore(store)
    raw = store.get(m.manifest_key)
    # upstream's stored layout verbatim: no format, version or checksum key
    assert raw == m.to_json().encode("utf-8")
    assert hashlib.sha256(raw).hexdigest() == m.manifest_digest
    body = json.loads(raw)
    assert body["resource_kind"] == "model_weight" and "sha256" not in body
    # never overwritten: a second snapshot of the same identity is refused
    with pytest.raises(WeightStoreError, match="already committed"):
        ws.begin_weight_snapshot(wp.descriptor("immut"), wp.adapter(2, 0, "immut"))
    # an identity pins the bytes: a changed manifest is refused before any read
    ident = m.manifest_identity
    assert ws.load_manifest(ident) == m
    body["created_at"] = "2026-01-01T00:00:00Z"
    assert store.upsert(m.manifest_key, json.dumps(body).encode()) == 0
    with pytest.raises(ValueError, match="differs from the expected content_sha256"):
        ws.load_manifest(ident)
    # a corrupted manifest is refused by upstream's parser
    body["tensors"][0]["shape"] = [51, 16]
    store.upsert(m.manifest_key, json.dumps(body).encode())
    with pytest.raises(ValueError, match="tensor descriptor schema fields do not match"):
        ws.load_manifest(m.manifest_key)
    store.upsert(m.manifest_key, b"\xff")
    with pytest.raises(ValueError, match="not valid JSON"):
        ws.load_manifest(m.manifest_key)


def test_plan_load_refuses_other_model(store):
    m, _ = write_all(store, "other", 1)
    ws = WeightStore(store)
    other = tp_placement([("qkv", (48, 16), "float32", 4, 0)], 2, resource_id="test-model",
                         revision="other", weight_generation=1)
    with pytest.raises(ValueError, match="target manifests are missing tensors"):
        ws.plan_load(m, other)
    model32 = [(t, s, "float32" if t == "qkv" else d, k) for t, s, d, k in wp.MODEL]
    with pytest.raises(ValueError, match="layout mismatch for tensor qkv"):
        ws.plan_load(m, wp.placement(2, model32, "other"))
    plan = ws.plan_load(m, wp.placement(2, revision="other"))
    pid = tp_participant(0)
    dest = wp.destinations(plan, pid)
    dest[plan.target_fragments(pid)[0].placement_fragment_id] = torch.zeros(3)
    with pytest.raises(ValueError, match="destination of embed.* is"):
        ws.load(plan, dest, participant_id=pid)


BIG = [("wq", (1024, 512), "bfloat16", 0),   # column-parallel: whole rows
       ("wo", (512, 1024), "bfloat16", 1),   # row-parallel: a column block of each row
       ("ln", (512,), "float32", None)]


def test_tp4_to_tp2_reads_exactly_the_needed_bytes(master):
    s, port = http_store(master, segment=64 * MiB)
    try:
        m, _ = write_all(s, "exact", 4, BIG)
        ws = WeightStore(s)
        plan = ws.plan_load(ws.load_manifest(m.manifest_key), wp.placement(2, BIG, "exact"))
        for r in range(2):
            pid = tp_participant(r)
            want = sum(f.nbytes for f in plan.target_fragments(pid))
            assert want == 1024 * 512 * 2 + 512 * 4  # half of wq and wo, all of ln
            dest = wp.destinations(plan, pid, BIG)
            before = metrics(port)["mooncake_transfer_read_bytes"]
            assert ws.load(plan, dest, participant_id=pid) == want
            moved = metrics(port)["mooncake_transfer_read_bytes"] - before
            assert moved == want, (moved, want)
            wp.check_loaded(dest, plan, pid, BIG)
        # column split: 2 whole stored fragments per target; row split: per-row runs
        reads = plan.reads[tp_participant(0)]
        wq = [rd for rd in reads if rd.tensor_id == "wq"]
        assert len(wq) == 2 and all(rd.counts == () for rd in wq)
        wo = [rd for rd in reads if rd.tensor_id == "wo"]
        assert len(wo) == 2 and all(rd.counts == (512,) and rd.run_bytes == 256 * 2
                                    for rd in wo)
        # executed as coalesced reads: each wq payload one read, wo one per row
        lw = plan.lowered.select([tp_participant(0)])
        assert len(lw.key) == 2 + 2 * 512 + 1
    finally:
        s.close()


def _proc(*args):
    return subprocess.Popen([sys.executable, str(PROC), *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _line(p, timeout=90):
    import select
    r, _, _ = select.select([p.stdout], [], [], timeout)
    if not r:
        raise AssertionError(f"no answer from {p.args}")
    line = p.stdout.readline()
    if not line:
        raise AssertionError(f"{p.args} exited ({p.wait()}): {p.stderr.read()[-3000:]}")
    return json.loads(line)


@pytest.fixture
def patient_master():
    """Its own master with a 30 s client TTL: six processes importing torch
    on a loaded machine must not be expired (and lose their segments)
    before the readers are done."""
    m = Master(extra_args=["--client_ttl=30"], lease_ttl_ms=LEASE_TTL_MS)
    try:
        yield m
    finally:
        m.stop()


def test_four_writers_two_readers(patient_master):
    master = patient_master
    writers = [_proc("write", master.addr, "mp", 4, r, "--commit-on-line") for r in range(4)]
    readers = []
    try:
        written = [_line(p) for p in writers]
        assert all(w["written"] for w in written)
        for p in writers:  # commit all at once: each waits for the others' records
            p.stdin.write("commit\n")
            p.stdin.flush()
        done = [_line(p) for p in writers]  # every rank's commit returns the manifest
        assert len({d["manifest"] for d in done}) == 1
        assert len({d["digest"] for d in done}) == 1
        readers = [_proc("read", master.addr, "mp", 2, r) for r in range(2)]
        got = [_line(p) for p in readers]
        assert all(g["ok"] for g in got)
        total = wp.nbytes()
        rep = wp.nbytes([t for t in wp.MODEL if t[3] is None])
        assert sum(g["bytes"] for g in got) == total + rep  # replicas loaded by both
        for p in readers:
            assert p.wait(timeout=30) == 0
    finally:
        stop_procs(writers + readers)


def test_killed_writer_leaves_no_manifest_and_is_reclaimed(master, make_store):
    s = make_store()
    ws = WeightStore(s)
    desc = wp.descriptor("killed")
    w0 = _proc("write", master.addr, "killed", 2, 0, "--commit-timeout", "0.5")
    w1 = _proc("write", master.addr, "killed", 2, 1, "--hang")
    try:
        keys0 = _line(w0)["written"]
        keys1 = _line(w1)["written"]
        assert keys1 and all(s.is_exist(k) == 1 for k in keys1)
        base = ws.snapshot_base(desc)
        assert s.is_exist(f"{base}/live/r1") == 1
        w1.kill()
        w1.wait(timeout=10)
        # rank 0's commit gives up naming rank 1; no manifest appears
        assert w0.stdout.readline() == ""
        assert w0.wait(timeout=30) != 0
        assert "participant(s) ['tp001'] have not committed" in w0.stderr.read()
        # the live key lived on the dead client's segment: gone after --client_ttl
        wait_until(lambda: s.is_exist(f"{base}/live/r1") == 0, CLIENT_TTL_S * 5,
                   "the killed writer's live key to expire")
        ws.reclaim_abandoned(desc, [0, 1])
        assert all(s.is_exist(k) == 0 for k in keys1)
        with pytest.raises(WeightStoreError, match="no manifest"):
            ws.load_manifest(desc)
        assert s.is_exist(ws.manifest_key(desc)) == 0
        # rank 0 had sealed its part: the snapshot as a whole is removed explicitly
        ws.remove_snapshot(desc)
        assert all(s.is_exist(k) == 0 for k in keys0)
        assert s.is_exist(f"{base}/part/r0") == 0
    finally:
        stop_procs([w0, w1])


class PublicOnly:
    """The store through its public methods only (no native handle)."""

    def __init__(self, store):
        self._s = store

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._s, name)


@pytest.mark.parametrize("stage_run_bytes", [0, 1 << 20])
def test_load_paths_direct_strided_and_public_api(store, stage_run_bytes):
    """Strided reads straight into the destinations (nothing staged), and
    the rows of column blocks staged, through get_into_ranges of a store
    seen through its public methods: the same bytes arrive."""
    m, _ = write_all(store, f"paths-{stage_run_bytes}", 4, BIG)
    ws = WeightStore(PublicOnly(store))
    ws.STAGE_RUN_BYTES = stage_run_bytes
    try:
        plan = ws.plan_load(ws.load_manifest(m.manifest_key),
                            wp.placement(2, BIG, f"paths-{stage_run_bytes}"))
        for r in range(2):
            pid = tp_participant(r)
            dest = wp.destinations(plan, pid, BIG)
            assert ws.load(plan, dest, participant_id=pid) == plan.nbytes(pid)
            wp.check_loaded(dest, plan, pid, BIG)
        assert (ws._stage is not None) == (stage_run_bytes > 0)
    finally:
        ws.close()
    assert ws._stage is None


def test_reference_plans_load_alike(store):
    """A plan the Python reference planner made (no native lowering) loads
    the same bytes through the same executor."""
    from mooncake.reshard.weight import planner
    m, _ = write_all(store, "refplan", 4, BIG)
    ws = WeightStore(store)
    with planner.reference_planner():
        plan = ws.plan_load(ws.load_manifest(m.manifest_key), wp.placement(2, BIG, "refplan"))
    assert plan.lowered is None
    for r in range(2):
        pid = tp_participant(r)
        dest = wp.destinations(plan, pid, BIG)
        assert ws.load(plan, dest, participant_id=pid) == plan.nbytes(pid)
        wp.check_loaded(dest, plan, pid, BIG)


def test_adapter_names_map_parameters(store):
    names = {"model.layers.0.qkv.weight": "qkv"}
    ws = WeightStore(store)
    w = ws.begin_weight_snapshot(wp.descriptor("names"),
                                 wp.adapter(1, 0, "names", names=names))
    shards = dict(wp.rank_tensors(1, 0, revision="names"))
    qkv = [f for f in w.part.fragments if f.tensor_id == "qkv"][0]
    assert w.write_tensor("model.layers.0.qkv.weight", shards.pop("qkv")) == \
        [qkv.placement_fragment_id]
    for tid, t in shards.items():
        w.write_tensor(tid, t)
    loaded = ws.load_manifest(w.commit().manifest_key)
    assert [t.dtype for t in loaded.tensors if t.tensor_id == "qkv"] == ["float16"]


def test_concurrent_loads_share_one_weight_store(store):
    """Two threads loading through one WeightStore (one staging buffer)."""
    import threading
    m, _ = write_all(store, "threads", 4, BIG)
    ws = WeightStore(store)
    ws.STAGE_RUN_BYTES = 1 << 20   # both threads stage the rows of wo
    plan = ws.plan_load(ws.load_manifest(m.manifest_key), wp.placement(2, BIG, "threads"))
    pids = [tp_participant(r) for r in range(2)]
    dests = [wp.destinations(plan, pid, BIG) for pid in pids]
    errors = []

    def run(r):
        try:
            for _ in range(3):
                ws.load(plan, dests[r], participant_id=pids[r])
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    for r in range(2):
        wp.check_loaded(dests[r], plan, pids[r], BIG)
    ws.close()


def test_weights_example(tmp_path, master):
    """examples/weights_hello.py runs unchanged against a real master (its
    default address rewritten to the fixture's, as test_examples does)."""
    from helpers import EXAMPLES
    src = (EXAMPLES / "weights_hello.py").read_text()
    assert src.count('"localhost:50051"') == 1, "the example names the master once"
    script = tmp_path / "weights_hello.py"
    script.write_text(src.replace('"localhost:50051"', repr(master.addr)))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # 4 qkv rows, 4 o columns, 1 norm; TP=2 rank 1: half of qkv and o, all of norm
    half = 48 * 64 * 2 + 64 * 48 * 2 + 64 * 4
    assert r.stdout == (f"stored fragments: 9\n"
                        f"loaded at TP=2: {half} bytes, bit-exact: True\n"), r.stdout


def test_destinations_back_to_back_are_registered_as_one_region():
    """The load registers destination tensors that lie back to back as one
    region (a call each way instead of one per tensor); a merged region
    that cannot be registered (part of it already is) falls back to its
    tensors one by one, and what was registered is what is released."""
    from mooncake.reshard.weight.store import _Registration

    class Store:
        def __init__(self, taken=()):
            self.regs, self.calls, self.taken = {}, [], set(taken)

        def register_buffer(self, ptr, size):
            self.calls.append((ptr, size))
            if any(ptr <= t < ptr + size for t in self.taken) or ptr in self.regs:
                return -600
            self.regs[ptr] = size
            return 0

        def unregister_buffer(self, ptr):
            del self.regs[ptr]

    spans = [(3000, 500), (1000, 1000), (2000, 1000), (5000, 0), (6000, 8), (6008, 8)]
    s = Store()
    r = _Registration(s)
    r.add_all(spans)
    assert s.regs == {1000: 2500, 6000: 16}
    r.release()
    assert s.regs == {}
    s = Store(taken=[2000])           # the middle tensor registered by the caller
    r = _Registration(s)
    r.add_all(spans)
    assert s.regs == {1000: 1000, 3000: 500, 6000: 16}
    assert s.calls[0] == (1000, 2500)
    r.release()
    assert s.regs == {}

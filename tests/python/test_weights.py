# SPDX-License-Identifier: Apache-2.0
"""mooncake.reshard.weight against a real master and real clients: TP
round trips 1<->2<->4<->8 (row and column splits, replicated tensors,
uneven splits, bf16/fp16/fp32/int8), write validation, incomplete
coverage, a retried commit after an injected publication failure, abort,
the manifest's checksum and immutability, the exact bytes a TP=4 -> TP=2
load moves (client transfer statistics), 4 writer processes loaded by 2
reader processes, and a writer killed mid-snapshot."""
import json
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
import torch

from helpers import CLIENT_TTL_S, Master, MiB, wait_until
from test_client_http import http_store, metrics

import weights_proc as wp
from mooncake.store import ErrorCode, MooncakeDistributedStore
from mooncake.reshard.weight.store_layout import (PlacementFragment, TensorDescriptor,
                                                  WeightPlacementManifest, tp_placement)
from mooncake.reshard.weight.store import (StoredWeightManifest, WeightLoadPlan,
                                           WeightSnapshotAdapter, WeightSnapshotDescriptor,
                                           WeightStore, WeightStoreError, WeightStoreWriter,
                                           begin_weight_snapshot)

LEASE_TTL_MS = 5000
PROC = Path(__file__).resolve().parent / "weights_proc.py"


def write_all(store, revision, tp, model=wp.MODEL, ws=None):
    """Every rank's writer in this process; the last one commits."""
    ws = ws or WeightStore(store)
    desc = wp.descriptor(revision, model)
    writers = []
    for r in range(tp):
        w = ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(wp.placement(tp, model), r))
        for tid, t in wp.rank_tensors(tp, r, model):
            w.write_tensor(tid, t)
        writers.append(w)
    for w in writers[1:]:
        w.seal()
    return writers[0].commit(), writers


def load_all(ws, manifest, tp, model=wp.MODEL):
    p = wp.placement(tp, model)
    plan = ws.plan_load(manifest, p)
    for r in range(tp):
        dest = wp.destinations(plan, r, model)
        ws.load(plan, dest, rank=r)
        wp.check_loaded(dest, plan, r, model)
    return plan


def payload_keys(writers):
    return [s.key for w in writers for s in w._written.values() if s.key]


def test_public_names_and_store_shortcut(store):
    for name in ("WeightStore", "WeightStoreWriter", "WeightSnapshotDescriptor",
                 "WeightSnapshotAdapter", "StoredWeightManifest", "WeightLoadPlan",
                 "WeightStoreError", "begin_weight_snapshot"):
        assert hasattr(sys.modules["mooncake.reshard.weight.store"], name)
    assert callable(MooncakeDistributedStore.begin_weight_snapshot)
    sentinel = object()
    with patch("mooncake.reshard.weight.store.begin_weight_snapshot",
               return_value=sentinel) as factory:
        assert store.begin_weight_snapshot("d", "a") is sentinel
    assert factory.call_args.args == (store, "d", "a")
    # and the real thing opens a writer
    w = store.begin_weight_snapshot(wp.descriptor("shortcut"),
                                    WeightSnapshotAdapter(wp.placement(1), 0))
    assert isinstance(w, WeightStoreWriter)
    w.abort()
    assert isinstance(begin_weight_snapshot(store, wp.descriptor("shortcut2"),
                                            WeightSnapshotAdapter(wp.placement(1), 0)),
                      WeightStoreWriter)


@pytest.mark.parametrize("src,dst", [(1, 2), (2, 1), (2, 4), (4, 2), (4, 8), (8, 4), (1, 8),
                                     (8, 1), (4, 4)])
def test_round_trip_tp(store, src, dst):
    manifest, writers = write_all(store, f"rt-{src}-{dst}", src)
    ws = WeightStore(store)
    loaded = ws.load_manifest(manifest.manifest_key)
    assert loaded == manifest and isinstance(loaded, StoredWeightManifest)
    # one logical copy: replicated tensors are stored once
    assert manifest.nbytes == sum(t.nbytes for t in wp.tensors())
    plan = load_all(ws, loaded, dst)
    assert isinstance(plan, WeightLoadPlan)
    # every target rank reads exactly its fragments' bytes
    for r in range(dst):
        want = sum(TensorDescriptor(f.tensor_id, f.local_shape,
                                    manifest.tensor(f.tensor_id).dtype).nbytes
                   for f in plan.target_fragments(r))
        assert plan.nbytes(r) == want


def test_descriptor_names_model_and_tensors():
    d = wp.descriptor("v1")
    assert d.snapshot_id == "default/test-model/v1/1"
    for bad in ({"resource_id": ""}, {"revision": "a/b"}, {"weight_generation": -1}):
        kw = dict(resource_id="m", revision="r")
        kw.update(bad)
        with pytest.raises(ValueError):
            WeightSnapshotDescriptor(**kw)
    with pytest.raises(ValueError, match="not fully covered"):
        WeightPlacementManifest(wp.tensors()[:1],
                                [PlacementFragment("embed", (0, 0), (25, 16), 0)])
    with pytest.raises(ValueError, match="outside"):
        WeightPlacementManifest(wp.tensors()[:1],
                                [PlacementFragment("embed", (0, 0), (51, 16), 0)])


def test_write_validation(store):
    ws = WeightStore(store)
    p = wp.placement(2)
    w = ws.begin_weight_snapshot(wp.descriptor("bad"), WeightSnapshotAdapter(p, 1))
    good = dict(wp.rank_tensors(2, 1))
    with pytest.raises(WeightStoreError, match=r"'qkv': shape \(48, 16\) differs .*\(24, 16\)"):
        w.write_tensor("qkv", wp.full("qkv", (48, 16), "float16"))
    with pytest.raises(WeightStoreError, match=r"'qkv': dtype float32 differs .* float16"):
        w.write_tensor("qkv", good["qkv"].float())
    with pytest.raises(WeightStoreError, match="'nope' is not in the snapshot"):
        w.write_tensor("nope", good["qkv"])
    with pytest.raises(WeightStoreError, match="tensor .* needed"):
        w.write_tensor("qkv", [1, 2, 3])

    class Stealing(WeightSnapshotAdapter):  # picks rank 0's fragment for rank 1
        def resolve_fragment_ids(self, *, tensor_id, tensor, source):
            return [f.fragment_id for f in source.placement.fragments_of(tensor_id)
                    if f.rank == 0]

    w2 = ws.begin_weight_snapshot(wp.descriptor("bad2"), Stealing(p, 1))
    with pytest.raises(WeightStoreError, match=r"'up'.* belongs to rank 0, .* rank 1"):
        w2.write_tensor("up", good["up"])
    # nothing was written by any failed call
    assert not w._written and not w2._written
    assert store.is_exist(f"{w._dir}/0") == 0 and store.is_exist(f"{w2._dir}/0") == 0
    # a replica that rank 0 writes is skipped on rank 1, not an error
    assert w.write_tensor("norm", good["norm"]) == []
    assert w.write_tensor("qkv", good["qkv"]) == [p.fragments_of("qkv")[1].fragment_id]
    with pytest.raises(WeightStoreError, match="already written"):
        w.write_tensor("qkv", good["qkv"])
    w.abort()
    w2.abort()


def test_incomplete_coverage(store):
    ws = WeightStore(store)
    # one writer, a tensor left out
    w = ws.begin_weight_snapshot(wp.descriptor("inc1"), WeightSnapshotAdapter(wp.placement(1)))
    for tid, t in wp.rank_tensors(1, 0):
        if tid != "o":
            w.write_tensor(tid, t)
    with pytest.raises(WeightStoreError, match=r"rank 0 has not written o\[0:16,0:36\]"):
        w.commit()
    w.write_tensor("o", dict(wp.rank_tensors(1, 0))["o"])
    assert w.commit().fragments
    # two ranks, rank 1 never commits: rank 0's commit names it and its boxes
    w0 = ws.begin_weight_snapshot(wp.descriptor("inc2"), WeightSnapshotAdapter(wp.placement(2)))
    for tid, t in wp.rank_tensors(2, 0):
        w0.write_tensor(tid, t)
    with pytest.raises(WeightStoreError,
                       match=r"rank\(s\) \[1\] have not committed; missing .*qkv\[24:48,0:16\]"):
        w0.commit(timeout=0.2)
    assert ws.store.is_exist(ws.manifest_key(wp.descriptor("inc2"))) == 0
    with pytest.raises(WeightStoreError, match="no manifest"):
        ws.load_manifest(wp.descriptor("inc2"))
    # rank 1 arrives later; the retried commit of rank 0 finishes
    w1 = ws.begin_weight_snapshot(wp.descriptor("inc2"), WeightSnapshotAdapter(wp.placement(2), 1))
    for tid, t in wp.rank_tensors(2, 1):
        w1.write_tensor(tid, t)
    w1.seal()
    m = w0.commit()
    load_all(ws, ws.load_manifest(m.manifest_key), 4)


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
    w = ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(wp.placement(1)))
    for tid, t in wp.rank_tensors(1, 0):
        w.write_tensor(tid, t)
    keys = [s.key for s in w._written.values() if s.key]
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
    w = ws.begin_weight_snapshot(wp.descriptor("abort"), WeightSnapshotAdapter(wp.placement(2)))
    for tid, t in wp.rank_tensors(2, 0):
        w.write_tensor(tid, t)
    w.seal()
    keys = [s.key for s in w._written.values() if s.key]
    assert keys and all(store.is_exist(k) == 1 for k in keys)
    assert w.abort() >= len(keys)
    assert all(store.is_exist(k) == 0 for k in keys)
    assert store.is_exist(f"{w.base}/part/r0") == 0 and store.is_exist(w._live_key) == 0
    with pytest.raises(WeightStoreError, match="aborted"):
        w.write_tensor("norm", dict(wp.rank_tensors(2, 0))["norm"])


def test_manifest_checksum_and_immutability(store):
    m, _ = write_all(store, "immut", 2)
    ws = WeightStore(store)
    raw = store.get(m.manifest_key)
    body = json.loads(raw)
    assert body["version"] == 1 and body["sha256"] == m.sha256
    # never overwritten: a second snapshot of the same identity is refused
    with pytest.raises(WeightStoreError, match="already committed"):
        ws.begin_weight_snapshot(wp.descriptor("immut"), WeightSnapshotAdapter(wp.placement(2)))
    # a corrupted manifest is refused before anything is read through it
    body["fragments"][0]["bytes"] += 0
    body["tensors"][0]["shape"] = [51, 16]
    assert store.upsert(m.manifest_key, json.dumps(body).encode()) == 0
    with pytest.raises(WeightStoreError, match="checksum mismatch"):
        ws.load_manifest(m.manifest_key)
    body["version"] = 2
    store.upsert(m.manifest_key, json.dumps(body).encode())
    with pytest.raises(WeightStoreError, match="version 2 is not supported"):
        ws.load_manifest(m.manifest_key)
    store.upsert(m.manifest_key, b"\xff")
    with pytest.raises(WeightStoreError, match="not UTF-8 JSON"):
        ws.load_manifest(m.manifest_key)


def test_plan_load_refuses_other_model(store):
    m, _ = write_all(store, "other", 1)
    ws = WeightStore(store)
    other = tp_placement([TensorDescriptor("qkv", (48, 16), "float32")], 2, {"qkv": 0})
    with pytest.raises(WeightStoreError, match="'qkv' is .* float32 in the target, .* float16"):
        ws.plan_load(m, other)
    plan = ws.plan_load(m, wp.placement(2))
    dest = wp.destinations(plan, 0)
    dest[plan.target_fragments(0)[0].fragment_id] = torch.zeros(3)
    with pytest.raises(WeightStoreError, match="destination of embed.* is"):
        ws.load(plan, dest, rank=0)


BIG = [("wq", (1024, 512), "bfloat16", 0),   # column-parallel: whole rows
       ("wo", (512, 1024), "bfloat16", 1),   # row-parallel: a column block of each row
       ("ln", (512,), "float32", None)]


def test_tp4_to_tp2_reads_exactly_the_needed_bytes(master):
    s, port = http_store(master, segment=64 * MiB)
    try:
        m, _ = write_all(s, "exact", 4, BIG)
        ws = WeightStore(s)
        plan = ws.plan_load(ws.load_manifest(m.manifest_key), wp.placement(2, BIG))
        for r in range(2):
            want = sum(TensorDescriptor(f.tensor_id, f.local_shape,
                                        m.tensor(f.tensor_id).dtype).nbytes
                       for f in plan.target_fragments(r))
            assert want == 1024 * 512 * 2 + 512 * 4  # half of wq and wo, all of ln
            dest = wp.destinations(plan, r, BIG)
            before = metrics(port)["mooncake_transfer_read_bytes"]
            assert ws.load(plan, dest, rank=r) == want
            moved = metrics(port)["mooncake_transfer_read_bytes"] - before
            assert moved == want, (moved, want)
            wp.check_loaded(dest, plan, r, BIG)
        # column split: 2 whole stored fragments per target; row split: per-row runs
        wq = [rd for rd in plan.reads[0] if rd.tensor_id == "wq"]
        assert len(wq) == 2 and all(rd.counts == () for rd in wq)
        wo = [rd for rd in plan.reads[0] if rd.tensor_id == "wo"]
        assert len(wo) == 2 and all(rd.counts == (512,) and rd.run_bytes == 256 * 2
                                    for rd in wo)
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


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            try:
                p.stdin.write("exit\n")
                p.stdin.flush()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


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
        assert len({d["sha256"] for d in done}) == 1
        readers = [_proc("read", master.addr, "mp", 2, r) for r in range(2)]
        got = [_line(p) for p in readers]
        assert all(g["ok"] for g in got)
        total = sum(t.nbytes for t in wp.tensors())
        rep = sum(t.nbytes for t, (_, _, _, d) in zip(wp.tensors(), wp.MODEL) if d is None)
        assert sum(g["bytes"] for g in got) == total + rep  # replicas loaded by both
        for p in readers:
            assert p.wait(timeout=30) == 0
    finally:
        _stop(writers + readers)


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
        assert "rank(s) [1] have not committed" in w0.stderr.read()
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
        _stop([w0, w1])


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
    everything staged, through get_into_ranges of a store seen through its
    public methods: the same bytes arrive."""
    m, _ = write_all(store, f"paths-{stage_run_bytes}", 4, BIG)
    ws = WeightStore(PublicOnly(store))
    ws.STAGE_RUN_BYTES = stage_run_bytes
    try:
        plan = ws.plan_load(ws.load_manifest(m.manifest_key), wp.placement(2, BIG))
        for r in range(2):
            dest = wp.destinations(plan, r, BIG)
            assert ws.load(plan, dest, rank=r) == plan.nbytes(r)
            wp.check_loaded(dest, plan, r, BIG)
        assert (ws._stage is not None) == (stage_run_bytes > 0)
    finally:
        ws.close()
    assert ws._stage is None


def test_adapter_names_map_parameters(store):
    names = {"model.layers.0.qkv.weight": "qkv"}
    ws = WeightStore(store)
    w = ws.begin_weight_snapshot(wp.descriptor("names"),
                                 WeightSnapshotAdapter(wp.placement(1), names=names))
    shards = dict(wp.rank_tensors(1, 0))
    assert w.write_tensor("model.layers.0.qkv.weight", shards.pop("qkv")) == \
        ["qkv@0:48,0:16#0"]
    for tid, t in shards.items():
        w.write_tensor(tid, t)
    assert ws.load_manifest(w.commit().manifest_key).tensor("qkv").dtype == "float16"


def test_concurrent_loads_share_one_weight_store(store):
    """Two threads loading through one WeightStore (one staging buffer)."""
    import threading
    m, _ = write_all(store, "threads", 4, BIG)
    ws = WeightStore(store)
    plan = ws.plan_load(ws.load_manifest(m.manifest_key), wp.placement(2, BIG))
    dests = [wp.destinations(plan, r, BIG) for r in range(2)]
    errors = []

    def run(r):
        try:
            for _ in range(3):
                ws.load(plan, dests[r], rank=r)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    for r in range(2):
        wp.check_loaded(dests[r], plan, r, BIG)
    ws.close()

# SPDX-License-Identifier: Apache-2.0
"""WeightStore.load over TCP (MC_TE_SHM=0) from a holder in another
process.  The column blocks' rows go as gathered reads (READV,
docs/transfer.md "Gathered reads": the rows of the two TP=4 blocks that
fill one TP=2 row interleaved, received into whole rows), or as scattered
reads from a holder that does not offer READV (MC_TE_READV=0, as an
earlier release), which the engine cuts into pieces of about the slice
size that its workers and the calling thread share.  A TP=4 -> TP=2 load
reads every byte exactly, again and again; and a holder killed (SIGKILL)
while loads run fails the load that meets it with WeightStoreError -- a
load either returns with every byte exact or raises -- and every load
after it fails too, each within a bound."""
import threading
import time

import pytest

from helpers import ClientProc, MiB

import weights_proc as wp
from mooncake.reshard.weight import WeightStore, WeightStoreError
from mooncake.reshard.weight.store_layout import tp_participant

# rows split (whole payloads), columns split (rows of 2 KiB and 1 KiB, 4 MiB
# and 2 MiB payloads: several slices each) and a replicated norm
MODEL = [("wq", (4096, 1024), "bfloat16", 0),
         ("wo", (2048, 4096), "bfloat16", 1),
         ("wd", (1024, 2048), "float16", 1),
         ("ln", (1024,), "float32", None)]


@pytest.fixture
def holder(master, monkeypatch):
    """A client process holding every payload; this process reaches it by
    TCP only."""
    monkeypatch.setenv("MC_TE_SHM", "0")
    h = ClientProc("holder", env={"MC_TE_SHM": "0"})
    try:
        h.setup(master, segment=96 * MiB)
        yield h
    finally:
        h.stop()


def _write(store, revision):
    ws = WeightStore(store)
    desc = wp.descriptor(revision)
    writers = []
    for r in range(4):
        w = ws.begin_weight_snapshot(desc, wp.adapter(4, r, revision, MODEL))
        for tid, t in wp.rank_tensors(4, r, MODEL, revision):
            w.write_tensor(tid, t)
        writers.append(w)
    for w in writers[1:]:
        w.seal()
    return ws, writers[0].commit()


def _plan(ws, manifest, revision):
    plan = ws.plan_load(ws.load_manifest(manifest.manifest_key),
                        wp.placement(2, MODEL, revision))
    dest = {}
    for r in range(2):
        dest.update(wp.destinations(plan, tp_participant(r), MODEL))
    return plan, dest


def _check(plan, dest):
    for r in range(2):
        wp.check_loaded(dest, plan, tp_participant(r), MODEL)


def test_tcp_load_rows_exact_and_repeated(holder, make_store):
    s = make_store(segment=0)  # every payload lands in the holder's segment
    ws, m = _write(s, "tcp-exact")
    plan, dest = _plan(ws, m, "tcp-exact")
    assert ws._stage_run_bytes(plan.lowered) == 0  # rows left to the store
    for _ in range(3):  # the same plan again
        for t in dest.values():
            t.fill_(7)
        assert ws.load(plan, dest) == plan.nbytes()
        _check(plan, dest)
    # one participant at a time (a selection of the reads)
    for r in range(2):
        pid = tp_participant(r)
        one = wp.destinations(plan, pid, MODEL)
        assert ws.load(plan, one, participant_id=pid) == plan.nbytes(pid)
        wp.check_loaded(one, plan, pid, MODEL)
    ws.remove_snapshot(wp.descriptor("tcp-exact"))


def test_tcp_load_from_holder_without_readv_exact(master, make_store, monkeypatch):
    """A holder that does not offer READV (MC_TE_READV=0: its descriptor
    says nothing, and it would close a connection that sent one): the
    same load reads every byte, as scattered reads."""
    monkeypatch.setenv("MC_TE_SHM", "0")
    h = ClientProc("holder-noreadv", env={"MC_TE_SHM": "0", "MC_TE_READV": "0"})
    try:
        h.setup(master, segment=96 * MiB)
        s = make_store(segment=0)
        ws, m = _write(s, "tcp-noreadv")
        plan, dest = _plan(ws, m, "tcp-noreadv")
        for _ in range(2):
            for t in dest.values():
                t.fill_(7)
            assert ws.load(plan, dest) == plan.nbytes()
            _check(plan, dest)
        ws.remove_snapshot(wp.descriptor("tcp-noreadv"))
    finally:
        h.stop()


def test_tcp_load_holder_killed_midway_fails_cleanly(holder, make_store):
    s = make_store(segment=0)
    ws, m = _write(s, "tcp-killed")
    plan, dest = _plan(ws, m, "tcp-killed")
    assert ws.load(plan, dest) == plan.nbytes()
    _check(plan, dest)
    outcomes = []          # ("ok", seconds) or ("error", seconds, exception)
    started = threading.Event()
    stop = threading.Event()

    def loads():
        failures = 0
        while not stop.is_set() and failures < 3:
            for t in dest.values():
                t.fill_(7)
            started.set()
            t0 = time.monotonic()
            try:
                n = ws.load(plan, dest)
            except Exception as e:  # noqa: BLE001 (asserted below)
                outcomes.append(("error", time.monotonic() - t0, e))
                failures += 1
                continue
            # returned: every byte must be there
            assert n == plan.nbytes()
            try:
                _check(plan, dest)
            except AssertionError as e:
                outcomes.append(("wrong", time.monotonic() - t0, e))
                return
            outcomes.append(("ok", time.monotonic() - t0))

    th = threading.Thread(target=loads, daemon=True)
    th.start()
    try:
        assert started.wait(30), "no load started"
        time.sleep(0.005)  # into the load (or between two: both must hold)
        holder.kill()
        th.join(120)
        assert not th.is_alive(), "loads did not end within 120 s of the holder's death"
    finally:
        stop.set()
        th.join(10)
    assert not [o for o in outcomes if o[0] == "wrong"], outcomes
    errors = [o for o in outcomes if o[0] == "error"]
    assert len(errors) == 3, outcomes  # the holder is gone: every later load fails
    for _, took, e in errors:
        assert isinstance(e, WeightStoreError), repr(e)
        assert "failed" in str(e)
        assert took < 60, took

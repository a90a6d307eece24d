# SPDX-License-Identifier: Apache-2.0
"""Dummy clients (setup_dummy) served by a real mooncake_client daemon:
real processes throughout (docs/protocol.md §8)."""

import hashlib
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

from helpers import ClientProc, Master, RealClient, client_bin, free_port, wait_until

MiB = 1024 * 1024


@pytest.fixture
def real(master):
    rc = RealClient(master)
    yield rc
    rc.stop()


@pytest.fixture
def dummies(real):
    procs = []

    def make(name="dummy", pool=16 * MiB, lbuf=16 * MiB, addr=None):
        p = ClientProc(name)
        procs.append(p)
        r = p.call("setup_dummy", pool=pool, lbuf=lbuf, addr=addr or real.addr)
        assert r["rc"] == 0, f"setup_dummy returned {r}\n{real.log_text()}"
        return p
    yield make
    for p in procs:
        p.stop()


def test_bytes_api_through_a_dummy(dummies):
    d = dummies()
    assert d.call("put", key="dk1", hex=b"hello dummy".hex())["rc"] == 0
    assert d.call("exist", key="dk1")["rc"] == 1
    assert d.call("get_size", key="dk1")["rc"] == 11
    assert bytes.fromhex(d.call("get", key="dk1")["hex"]) == b"hello dummy"
    assert d.call("remove", key="dk1", force=True)["rc"] == 0  # a read lease is held
    assert d.call("exist", key="dk1")["rc"] == 0
    assert d.call("get_size", key="dk1")["rc"] == -704


def test_strided_blocks_through_a_dummy(dummies):
    """read_blocks through a dummy: each block's rows read as ranges by the
    real client, exact; a block past the object's end refused alone, the
    others' bytes exact and nothing else written."""
    d = dummies()
    blocks = [(0, 256, 0, 512, 128, 64),        # (dst, dst stride, src, src stride, len, rows)
              (128, 256, 64, 512, 128, 64),
              (20000, 0, 999, 0, 77, 1),
              (30000, 100, 32768 - 50, 100, 100, 2)]  # past the end
    r = d.call("blocks_roundtrip", key="blk1", size=32768, blocks=blocks)
    assert r["rc"] == 0 and r["res"] == [128 * 64, 128 * 64, 77, -600] and r["ok"], r


def test_zero_copy_and_batch_through_a_dummy(dummies):
    d = dummies()
    r = d.call("zc_roundtrip", key="zc1", size=1 * MiB)
    assert r == dict(r, rc=0, n=MiB, ok=True)
    r = d.call("batch_zc", keys=[f"bz{i}" for i in range(32)], size=4096)
    assert r["rcs"] == [0] * 32 and r["ns"] == [4096] * 32 and r["ok"]


def test_tensor_family_through_a_dummy(dummies):
    pytest.importorskip("torch")
    d = dummies(pool=32 * MiB, lbuf=8 * MiB)
    r = d.call("tensor_family", prefix="dt-")
    assert "error" not in r, r
    rcs = {k: v for k, v in r.items() if not k.endswith("_ok")}
    assert rcs == {"put": 0, "batch_put": [0, 0], "upsert": 0, "pub": 0, "tp_put": 0,
                   "from": 0, "batch_from": [0, 0]}, r
    assert all(v is True for k, v in r.items() if k.endswith("_ok")), r


def test_dataproto_through_a_dummy_falls_back_from_the_commit_batch(dummies, real):
    """A dummy refuses batch_put_parts_commit with NOT_SUPPORTED and writes
    nothing; a DataProto put then writes its manifest after its payloads."""
    pytest.importorskip("numpy")
    d = dummies()
    r = d.call("dataproto_roundtrip", prefix="ddp")
    assert r["commit_rcs"] == [-1012, -1012], r
    assert d.call("exist", key="ddp/c0")["rc"] == 0
    assert r["ok"] is True and r["commits"] is False, r
    assert d.call("exist", key=r["manifest"])["rc"] == 1


def test_bytes_batch_and_buffers_through_a_dummy(dummies):
    d = dummies(lbuf=1 * MiB)
    vals = [os.urandom(n).hex() for n in (1, 4096, 300 * 1024, 300 * 1024, 300 * 1024)]
    keys = [f"bb{i}" for i in range(len(vals))]
    # 900 KiB of values through a 1 MiB staging buffer: more than one round
    assert d.call("put_batch", keys=keys, hexes=vals)["rc"] == 0
    assert d.call("get_batch", keys=keys + ["bb-missing"])["hexes"] == vals + [""]
    import hashlib
    sums = [hashlib.sha256(bytes.fromhex(v)).hexdigest() for v in vals]
    r = d.call("get_buffers", keys=keys + ["bb-missing"])
    assert r["sha256"] == sums + [None] and r["one"] == sums[0]
    # a value larger than the staging buffer fails clearly, not silently
    r = d.call("put_random", key="bb-huge", size=2 * MiB)
    assert r["rc"] == -200


def test_put_from_with_metadata_and_ranges_through_a_dummy(dummies):
    d = dummies()
    r = d.call("put_from_meta", key="pm1", meta_size=128, size=64 * 1024)
    assert r["rc"] == 0
    assert d.call("get", key="pm1")["sha256"] == r["sha256"]
    assert d.call("put", key="rg1", hex=bytes(range(256)).hex())["rc"] == 0
    assert d.call("put", key="rg2", hex=b"abcdefgh".hex())["rc"] == 0
    r = d.call("ranges", cap=64, fragments=[["rg1", 0, 10, 4], ["rg1", 8, 250, 6],
                                            ["rg2", 16, 2, 3], ["rg2", 32, 6, 5],
                                            ["rg-missing", 40, 0, 1]])
    assert r["keys"] == ["rg-missing", "rg1", "rg2"]
    assert r["results"] == [[-704], [4, 6], [3, -600]], r
    data = bytes.fromhex(r["hex"])
    assert data[0:4] == bytes(range(10, 14)) and data[8:14] == bytes(range(250, 256))
    assert data[16:19] == b"cde" and data[32:37] == bytes(5)


def test_register_buffer_only_inside_the_pool(dummies):
    # upstream's refusal is -1 (test_hostpool.py has the whole rule: exact
    # pool blocks and host-memory blocks only)
    d = dummies()
    r = d.call("register_outside")
    assert r["outside"] == -1 and r["inside"] == 0


def test_cross_reads_with_an_ordinary_client(master, spawn_client, dummies):
    d = dummies()
    c = spawn_client("ordinary")
    c.setup(master)
    r = d.call("put_random", key="from-dummy", size=300 * 1024)
    g = c.call("get", key="from-dummy")
    assert g["len"] == 300 * 1024 and g["sha256"] == r["sha256"]
    r = c.call("put_random", key="from-ordinary", size=200 * 1024)
    g = d.call("get", key="from-ordinary")
    assert g["len"] == 200 * 1024 and g["sha256"] == r["sha256"]


def test_killed_dummy_frees_its_memory(dummies):
    watcher = dummies("watcher", pool=1 * MiB, lbuf=1 * MiB)
    base = watcher.call("dummy_stats")
    assert base["dummies"] == 1
    victim = dummies("victim", pool=4 * MiB, lbuf=8 * MiB)
    assert watcher.call("dummy_stats")["dummies"] == 2
    victim.call("put_loop", prefix="kv", size=16 * 1024)
    # killed in the middle of its puts, once a few have landed
    wait_until(lambda: watcher.call("exist", key="kv-3")["rc"] == 1, 10.0,
               "the victim's puts to land")
    victim.kill()
    wait_until(lambda: watcher.call("dummy_stats") == base, 10.0,
               "the real client to free the killed dummy's memory")
    # objects it wrote stay
    assert watcher.call("exist", key="kv-0")["rc"] == 1


def test_silent_dummy_is_dropped_after_its_ttl(master, spawn_client, monkeypatch):
    # the daemon drops a dummy that sends nothing (not even a PING) for
    # MC_DUMMY_TTL_MS; idle dummies that ping stay
    monkeypatch.setenv("MC_DUMMY_TTL_MS", "2000")
    monkeypatch.setenv("MC_DUMMY_PING_MS", "200")
    rc = RealClient(master)
    try:
        watcher, victim = spawn_client("watcher"), spawn_client("victim")
        for p in (watcher, victim):
            assert p.call("setup_dummy", pool=MiB, lbuf=MiB, addr=rc.addr)["rc"] == 0
        assert watcher.call("dummy_stats")["dummies"] == 2
        time.sleep(3)  # longer than the TTL: pings keep both alive
        assert watcher.call("dummy_stats")["dummies"] == 2
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: watcher.call("dummy_stats")["dummies"] == 1, 10.0,
                       "the daemon to drop the silent dummy")
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        assert victim.call("put", key="ttl1", hex="00")["rc"] == -900
        assert "silent" in rc.log_text()
    finally:
        rc.stop()


def test_dead_real_client_fails_calls_fast(fresh_master, spawn_client):
    # its own master: the killed daemon's segment stays mounted until the
    # master's client TTL, and other tests must not place objects there
    rc = RealClient(fresh_master)
    try:
        d = spawn_client("orphan")
        assert d.call("setup_dummy", pool=MiB, lbuf=MiB, addr=rc.addr)["rc"] == 0
        assert d.call("put", key="o1", hex="00")["rc"] == 0
        rc.kill()
        t0 = time.monotonic()
        assert d.call("put", key="o2", hex="00")["rc"] == -900
        assert d.call("exist", key="o1")["rc"] == -900
        assert time.monotonic() - t0 < 5
    finally:
        rc.stop()


def test_wrong_address_fails_setup_in_bounded_time(spawn_client):
    p = spawn_client("lost")
    t0 = time.monotonic()
    r = p.call("setup_dummy", pool=MiB, lbuf=MiB, addr="127.0.0.1:1")
    assert r["rc"] == -900 and "no mooncake_client" in r["detail"]
    assert p.call("setup_dummy", pool=MiB, lbuf=MiB, addr="nonsense")["rc"] == -600
    assert time.monotonic() - t0 < 6


def test_eight_concurrent_dummies(dummies, tmp_path):
    import threading
    ds = [dummies(f"d{i}", pool=4 * MiB, lbuf=4 * MiB) for i in range(8)]
    barrier = tmp_path / "go"
    out = [None] * len(ds)

    def run(i):
        out[i] = ds[i].call("rounds", timeout=120, prefix=f"m{i}", rounds=40,
                            max_size=256 * 1024, ready=str(tmp_path / f"ready{i}"),
                            barrier=str(barrier))
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ds))]
    for t in threads:
        t.start()
    # release them together once all eight wait at the barrier
    wait_until(lambda: all((tmp_path / f"ready{i}").exists() for i in range(len(ds))), 30.0,
               "all dummies to reach the barrier")
    barrier.touch()
    for t in threads:
        t.join(150)
    assert all(r is not None and "error" not in r for r in out), out
    assert [r["bad"] for r in out] == [[]] * len(ds)
    # they overlapped: each started before any other finished
    assert max(r["started"] for r in out) < min(r["started"] + r["seconds"] for r in out)
    # and each reads what the others wrote
    for i, d in enumerate(ds):
        other = out[(i + 1) % len(ds)]["sums"]
        for key in list(other)[:3]:
            assert d.call("get", key=key)["sha256"] == other[key]


def test_daemon_flags_and_signals(master):
    out = subprocess.run([client_bin(), "--bogus_flag=1"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2 and "bogus_flag" in out.stderr
    # the offload flags are covered in test_tiers_remote.py; the server of
    # the tier's reads goes with the tier
    out = subprocess.run([client_bin(), "--start_offload_rpc_server=true"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "start_offload_rpc_server" in out.stderr
    out = subprocess.run([client_bin(), "--help"], capture_output=True, text=True, timeout=10)
    assert "--start_offload_rpc_server=" in out.stdout + out.stderr
    out = subprocess.run([client_bin(), "--threads=4"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2 and "threads" in out.stderr
    rc = RealClient(master)
    try:
        rc.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in rc.log_text() or not rc.alive(), 10.0,
                   "the SIGHUP log line")
        assert rc.alive(), rc.log_text()
    finally:
        assert rc.stop() == 0


def test_daemon_log_dir(master, tmp_path):
    log = tmp_path / "mooncake_client.log"
    p = subprocess.Popen([client_bin(), "--host=127.0.0.1", "--metadata_server=P2PHANDSHAKE",
                          f"--master_server_address={master.addr}", f"--port={free_port()}",
                          "--global_segment_size=16MB", f"--log_dir={tmp_path}"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: p.poll() is not None or (log.exists() and "ready" in log.read_text()),
                   20.0, "mooncake_client to log 'ready' into --log_dir")
        assert p.poll() is None, log.read_text() if log.exists() else "no log file"
        p.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in log.read_text(), 10.0, "the SIGHUP line in the log file")
        assert p.poll() is None
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0
    bad = subprocess.run([client_bin(), f"--log_dir={tmp_path}/missing/dir"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 1 and "log_dir" in bad.stderr


def test_daemon_client_http_server(master):
    import urllib.request
    from helpers import free_port
    port = free_port()
    rc = RealClient(master, extra_args=["--enable_http_server=true", f"--http_port={port}"])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
    finally:
        assert rc.stop() == 0


# ---- the calls a dummy forwards besides reads and writes ------------------------
# Each runs the same sequence through a dummy and through an ordinary client
# (setup() of its own, with a segment) and compares what they answer.

OBJECT_NOT_FOUND, OBJECT_HAS_LEASE, INVALID_PARAMS = -704, -706, -600


def _inv(c, method, *args, config=None, **kwargs):
    def arg(a):  # bytes travel as {"hex": ...}
        if isinstance(a, bytes):
            return {"hex": a.hex()}
        return [arg(x) for x in a] if isinstance(a, list) else a
    req = {"method": method, "args": [arg(a) for a in args], "kwargs": kwargs}
    if config is not None:
        req["config"] = config
    return c.call("invoke", **req)["ret"]


def _daemon_segment(real):
    """The segment name of the mooncake_client (from its ready line)."""
    m = re.search(r"mooncake_client: (\S+) ready", real.log_text())
    assert m, real.log_text()
    return m.group(1)


def _endpoints(c, key):
    return sorted(r["endpoint"] for r in c.call("replica_desc", key=key)["replicas"])


def _removal_sequence(c, p):
    """What a client answers to the removal family on keys prefixed @p p."""
    for k in ("a", "b", "c", "rx-1", "rx-2", "keep"):
        assert c.call("put", key=p + k, hex=b"v".hex())["rc"] == 0
    out = {"exist": _inv(c, "batch_is_exist", [p + "a", p + "b", p + "nope"])}
    out["batch_remove"] = _inv(c, "batch_remove", [p + "a", p + "nope"], True)
    out["exist_after"] = _inv(c, "batch_is_exist", [p + "a", p + "b"])
    out["bad_regex"] = _inv(c, "remove_by_regex", "(", True)
    out["regex"] = _inv(c, "remove_by_regex", "^" + re.escape(p) + "rx-", True)
    out["keep"] = c.call("exist", key=p + "keep")["rc"]
    out["remove_all"] = _inv(c, "remove_all", True)
    out["after_all"] = _inv(c, "batch_is_exist", [p + "b", p + "c", p + "keep"])
    return out


def test_removal_family_through_a_dummy(fresh_master, spawn_client):
    rc = RealClient(fresh_master)
    try:
        o = spawn_client("ordinary")
        o.setup(fresh_master)
        d = spawn_client("dummy")
        assert d.call("setup_dummy", pool=4 * MiB, lbuf=4 * MiB, addr=rc.addr)["rc"] == 0
        want = _removal_sequence(o, "o-")
        got = _removal_sequence(d, "d-")
        assert want == got
        # the values themselves, so that equal answers cannot hide a dead call
        assert got["exist"] == [1, 1, 0] and got["batch_remove"] == [0, OBJECT_NOT_FOUND]
        assert got["exist_after"] == [0, 1] and got["bad_regex"] == INVALID_PARAMS
        assert got["regex"] == 2 and got["keep"] == 1 and got["remove_all"] == 3
        assert got["after_all"] == [0, 0, 0]
        # an empty batch and invalid keys answer as the ordinary client's do
        for c in (o, d):
            assert _inv(c, "batch_remove", []) == []
        assert _inv(d, "batch_is_exist", ["", "x" * 5000]) == \
            _inv(o, "batch_is_exist", ["", "x" * 5000])
    finally:
        rc.stop()


def test_replicas_preferred_segment_and_replica_clear_through_a_dummy(real, dummies,
                                                                      spawn_client, master):
    d = dummies()
    o = spawn_client("ordinary")
    mine = o.setup(master)
    theirs = _daemon_segment(real)
    for c, p in ((o, "po-"), (d, "pd-")):
        for seg in (mine, theirs):
            key = p + seg
            assert c.call("put", key=key, hex=(b"x" * 3000).hex(), preferred=seg)["rc"] == 0
            # the replica is where the config asked, and both sides see it so
            assert _endpoints(c, key) == [seg]
            assert _endpoints(o if c is d else d, key) == [seg]
    r = d.call("replica_desc", key="pd-" + mine)["replicas"]
    assert r == o.call("replica_desc", key="pd-" + mine)["replicas"]
    assert r[0]["size"] == 3000 and r[0]["memory"]
    assert _inv(d, "get_replica_desc", "pd-missing") == _inv(o, "get_replica_desc", "pd-missing")
    assert _inv(d, "batch_get_replica_desc", ["pd-" + mine, "pd-missing"]) == \
        _inv(o, "batch_get_replica_desc", ["pd-" + mine, "pd-missing"])
    # replica clear: a client clears what it wrote (through a dummy, its real
    # client wrote it), not the other's
    sides = ((o, "po-", "pd-"), (d, "pd-", "po-"))
    for c, own, other in sides:
        assert c.call("batch_replica_clear", keys=[other + mine])["keys"] == []
        assert c.call("exist", key=other + mine)["rc"] == 1
    for c, own, other in sides:
        # the reads above hold leases for LEASE_TTL_MS: cleared once they lapse
        wait_until(lambda: c.call("batch_replica_clear", keys=[own + mine, own + "missing"],
                                  segment_name=mine)["keys"] == [own + mine], 10.0,
                   "the key's read lease to lapse and the clear to succeed")
        assert c.call("exist", key=own + mine)["rc"] == 0


def test_group_ids_through_a_dummy(spawn_client):
    # leases long enough that a loaded host cannot let one lapse between the
    # read and the remove that it must refuse
    m = Master(lease_ttl_ms=10000)
    rc = None
    try:
        rc = RealClient(m)
        d = spawn_client("dummy")
        assert d.call("setup_dummy", pool=4 * MiB, lbuf=4 * MiB, addr=rc.addr)["rc"] == 0
        o = spawn_client("ordinary")
        o.setup(m, segment=0)
        _group_sequences(d, o)
    finally:
        if rc is not None:
            rc.stop()
        m.stop()


def _group_sequences(d, o):
    got = {}
    for c, p in ((o, "go-"), (d, "gd-")):
        g = uuid.uuid4().hex
        rcs = [_inv(c, "put", p + k, b"v", config={"group_ids": [g]}) for k in ("a", "b")]
        rcs.append(_inv(c, "put_batch", [p + "c", p + "d"], [b"1", b"2"],
                        config={"group_ids": [g + "x", g + "x"]}))
        rcs += [_inv(c, "put", p + k, b"v") for k in ("u1", "u2")]
        assert rcs == [0] * 5
        # a read of one member leases its group: the other member is held
        assert c.call("exist", key=p + "a")["rc"] == 1
        assert c.call("exist", key=p + "c")["rc"] == 1
        assert c.call("exist", key=p + "u1")["rc"] == 1
        got[c] = [c.call("remove", key=p + k)["rc"] for k in ("b", "d", "u2")]
        # a count that does not match the keys is refused before anything is sent
        got[c].append(_inv(c, "put_batch", [p + "e", p + "f"], [b"1", b"2"],
                           config={"group_ids": [g]}))
    assert got[d] == got[o], got
    assert got[d][:3] == [OBJECT_HAS_LEASE, OBJECT_HAS_LEASE, 0], got
    assert got[d][3] == INVALID_PARAMS, got


def test_tasks_through_a_dummy(real, dummies, spawn_client, master):
    d = dummies()
    o = spawn_client("ordinary")
    mine = o.setup(master)
    theirs = _daemon_segment(real)
    for c, p in ((o, "to-"), (d, "td-")):
        key = p + "k"
        assert c.call("put", key=key, hex=(b"t" * 5000).hex(), preferred=theirs)["rc"] == 0
        tid, rc = _inv(c, "create_copy_task", key, [mine])
        # upstream's id, a pair of ints (a list once through JSON)
        assert rc == 0 and len(tid) == 2 and all(isinstance(v, int) for v in tid), tid
        assert tid != [0, 0]

        def done(tid=tid):
            info, qrc = _inv(c, "query_task", tid)
            assert qrc == 0, qrc
            assert info["status"] not in (2, "FAILED"), info
            return info["status"] in (3, "SUCCESS")
        wait_until(done, 20.0, "the copy task to succeed")
        assert _endpoints(c, key) == sorted([mine, theirs])
        assert c.call("get", key=key)["sha256"] == hashlib.sha256(b"t" * 5000).hexdigest()
        # a move: the replica leaves the daemon's segment for the other
        moved = p + "moved"
        assert c.call("put", key=moved, hex=b"m".hex() * 100, preferred=theirs)["rc"] == 0
        mtid, rc = _inv(c, "create_move_task", moved, theirs, mine)
        assert rc == 0, rc
        wait_until(lambda: done(mtid), 20.0, "the move task to succeed")
        assert _endpoints(c, moved) == [mine]
        assert c.call("get", key=moved)["hex"] == b"m".hex() * 100
        # refusals answer the same on both sides
        assert _inv(c, "create_move_task", key, mine, mine)[1] == INVALID_PARAMS
        assert _inv(c, "create_copy_task", p + "missing", [mine])[1] == OBJECT_NOT_FOUND
        assert _inv(c, "query_task", str(uuid.uuid4()))[1] == \
            _inv(o, "query_task", str(uuid.uuid4()))[1]


def test_hostile_frames_of_the_named_ops(real, dummies):
    """Frames of ops 12-29 of the wrong shape close that connection only."""
    import fcntl
    import socket
    import struct

    port = real.addr.rsplit(":", 1)[1]
    hdr = struct.Struct("=IIHHIiI")      # mc_dummy_hdr_t
    item = struct.Struct("=QQIHBBII")    # mc_dummy_item_t
    magic = 0x4d434455

    def connect(seal=True):
        """A connection that sent HELLO: (socket, the answer's status)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(f"\0mooncake_client_{port}.sock")
        fds = [os.memfd_create("pool", os.MFD_ALLOW_SEALING),
               os.memfd_create("lbuf", os.MFD_ALLOW_SEALING)]
        for fd in fds:
            os.ftruncate(fd, 1 << 20)
            if seal:
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        hello = struct.pack("=IIQQ", 1, 2, 1 << 20, 1 << 20)
        socket.send_fds(s, [hdr.pack(magic, len(hello), 1, 0, 0, 0, 0) + hello], fds)
        for fd in fds:
            os.close(fd)
        h = hdr.unpack(s.recv(hdr.size, socket.MSG_WAITALL))
        s.recv(24, socket.MSG_WAITALL)
        if seal:
            assert h[5] == 0, h
            return s
        return s, h[5]

    def frame(op, items):  # items: (key, flags[, region, off, len])
        def one(k, flags, region=0, off=0, ln=0):
            return item.pack(off, ln, 0, region, flags, 0, len(k), 0) + k
        body = b"".join(one(*it) for it in items)
        return hdr.pack(magic, len(body), op, 0, len(items), 0, 0) + body

    # memory the dummy could still shrink (SIGBUS in the daemon) is refused
    s, st = connect(seal=False)
    assert st == INVALID_PARAMS
    s.close()
    ARG = 0x10
    bad = [
        frame(15, [(b"seg", ARG), (b"key", 0)]),        # REPLICA_CLEAR: name before a key
        frame(17, [(b"target", ARG)]),                  # COPY_TASK without a key
        frame(18, [(b"key", 0), (b"only-one", ARG)]),   # MOVE_TASK with one name
        frame(12, [(b"key", 0), (b"name", ARG)]),       # BATCH_REMOVE with a name
        frame(13, [(b"", 0)]),                          # REMOVE_REGEX: no pattern
        frame(19, [(b"", 0), (b"", 0)]),                # QUERY_TASK: two items, no name
        frame(20, [(b"tcp", ARG)]),                     # MOUNT: protocol without location
        frame(22, [(b"key", 0)]),                       # UNMOUNT: a key, not an id
        frame(24, [(b"key", 1)]),                       # SESSION_READ: MORE, no range
        frame(27, [(b"key", 1), (b"", 1, 0, 1 << 20, 1), (b"", 0)]),  # a byte past the pool
    ]
    for f in bad:
        s = connect()
        s.sendall(f)
        assert s.recv(64) == b"", f          # hung up, no answer
        s.close()
    # a well-formed one on a fresh connection is answered (REPLICAS of a
    # missing key), and the daemon still serves dummies
    s = connect()
    s.sendall(frame(16, [(b"no-such-key", 0)]))
    h = hdr.unpack(s.recv(hdr.size, socket.MSG_WAITALL))
    res = struct.unpack("=qQII", s.recv(24, socket.MSG_WAITALL))
    assert h[2] == 16 and h[4] == 1 and res[0] == OBJECT_NOT_FOUND
    # MOUNT without the file's descriptor is refused, not served
    s.sendall(frame(20, [(b"", ARG), (b"", ARG)]))
    h = hdr.unpack(s.recv(hdr.size, socket.MSG_WAITALL))
    res = struct.unpack("=qQII", s.recv(2 * 24, socket.MSG_WAITALL)[:24])  # 2 results
    assert h[2] == 20 and res[0] == INVALID_PARAMS
    s.close()
    d = dummies()
    assert d.call("put", key="after-hostile", hex=b"ok".hex())["rc"] == 0
    assert real.alive()


def _shm_file(tmp_name, size):
    path = f"/dev/shm/mc-test-{tmp_name}-{uuid.uuid4().hex[:8]}"
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_mount_calls_through_a_dummy(spawn_client):
    """mount_segment / allocate_and_mount_segment / unmount_* through a dummy
    mount on its mooncake_client, answer as an ordinary client's do, and a
    killed dummy's segments are unmounted."""
    big = 8 * MiB
    m = Master()
    rc = None
    files = []
    try:
        rc = RealClient(m, segment="4MB")   # too small for a big object
        o = spawn_client("ordinary")
        mine = o.setup(m, segment=0)
        theirs = _daemon_segment(rc)

        def dummy():
            d = spawn_client("dummy")
            assert d.call("setup_dummy", pool=4 * MiB, lbuf=16 * MiB, addr=rc.addr)["rc"] == 0
            return d
        d = dummy()
        got = {}
        for c, seg in ((o, mine), (d, theirs)):
            key = f"big-{seg}"
            path = _shm_file("mount", 16 * MiB)
            files.append(path)
            out = [c.call("put_random", key=key, size=big, preferred=seg)["rc"] != 0]
            r = _inv(c, "mount_segment", path, 16 * MiB)
            assert r["ret"] == 0 and len(r["segment_ids"]) == 1, r
            sid = r["segment_ids"][0]
            w = c.call("put_random", key=key, size=big, preferred=seg)
            out.append(w["rc"])
            assert _endpoints(c, key) == [seg]
            assert c.call("get", key=key)["sha256"] == w["sha256"]
            out.append(_inv(c, "unmount_and_free_segment", [sid]))   # not allocated
            out.append(_inv(c, "unmount_segment", [sid]))
            out.append(c.call("exist", key=key)["rc"])                # went with it
            out.append(_inv(c, "unmount_segment", [sid]))             # not any more
            out.append(_inv(c, "unmount_segment", [str(uuid.uuid4())]))
            out.append(_inv(c, "unmount_segment", ["not-a-uuid"]))
            out.append(_inv(c, "mount_segment", "/nonexistent/mc-file", MiB)["ret"])
            out.append(_inv(c, "mount_segment", path, MiB, 1)["ret"])  # unaligned offset
            a = _inv(c, "allocate_and_mount_segment", 3 * MiB + 1)
            out += [a["ret"], a["allocated_size"] >= 3 * MiB + 1]
            out.append(_inv(c, "unmount_and_free_segment", a["segment_ids"]))
            got[c] = out
        assert got[d] == got[o], got
        assert got[d][:4] == [True, 0, INVALID_PARAMS, 0] and got[d][4] == 0, got
        # kill -9 of a dummy unmounts what it mounted; no other dummy of the
        # same mooncake_client may unmount it meanwhile
        d2 = dummy()
        r = _inv(d2, "mount_segment", files[1], 16 * MiB)
        assert r["ret"] == 0
        assert d2.call("put_random", key="big-killed", size=big, preferred=theirs)["rc"] == 0
        assert _inv(d, "unmount_segment", r["segment_ids"]) == got[d][6]   # not found
        assert _inv(d, "unmount_and_free_segment", r["segment_ids"]) == got[d][6]
        assert d.call("exist", key="big-killed")["rc"] == 1
        d2.kill()
        wait_until(lambda: d.call("exist", key="big-killed")["rc"] == 0, 10.0,
                   "the killed dummy's segment to be unmounted")
        assert d.call("put_random", key="big-after", size=big, preferred=theirs)["rc"] != 0
    finally:
        if rc is not None:
            rc.stop()
        m.stop()
        for p in files:
            os.unlink(p)


def test_ranged_sessions_through_a_dummy(real, dummies, spawn_client, master):
    d = dummies()
    o = spawn_client("ordinary")
    o.setup(master)
    got = {c: c.call("sessions", key=f"sess-{c.name}", size=64 * 1024) for c in (o, d)}
    assert got[d] == got[o], got
    g = got[d]
    assert g["put_start"] == [0] and g["put_write"] == [64 * 1024] and g["put_end"] == [0]
    assert g["got"] and g["read_ok"] and g["get_read"] == [64 * 1024]
    assert g["get_start"] == [0, OBJECT_NOT_FOUND] and g["get_end"] == 0
    assert g["write_unopened"] == [INVALID_PARAMS] and g["read_ended"] == [INVALID_PARAMS]
    assert g["revoke"] == [0] and g["revoked_exists"] == 0


def test_ranged_sessions_belong_to_their_dummy(real, dummies):
    """Two dummies of one mooncake_client: neither reads, writes or ends the
    other's sessions, one's end leaves the other's get session open, and a
    killed dummy's open put session is revoked."""
    a, b = dummies("a"), dummies("b")
    size = 4096
    buf_a = a.call("session_buf", size=size, hex="a5")["addr"]
    buf_b = b.call("session_buf", size=size, hex="5a")["addr"]
    assert _inv(a, "batch_put_session_start", ["own-p"], [size]) == [0]
    # b may neither write into, end nor revoke a's put session
    assert _inv(b, "batch_put_from_multi_buffer_ranges", ["own-p"], [[buf_b]], [[size]],
                [[0]]) == [INVALID_PARAMS]
    assert _inv(b, "batch_put_session_end", ["own-p"]) == [INVALID_PARAMS]
    assert _inv(b, "batch_put_session_revoke", ["own-p"]) == [INVALID_PARAMS]
    assert _inv(a, "batch_put_from_multi_buffer_ranges", ["own-p"], [[buf_a]], [[size]],
                [[0]]) == [size]
    assert _inv(a, "batch_put_session_end", ["own-p"]) == [0]
    assert bytes.fromhex(b.call("get", key="own-p")["hex"]) == b"\xa5" * size
    # a get session both opened: a's end leaves b's open
    for c in (a, b):
        assert _inv(c, "batch_get_session_start", ["own-p"]) == [0]
    assert _inv(a, "batch_get_session_end", ["own-p"]) == 0
    assert _inv(a, "batch_get_into_multi_buffer_ranges", ["own-p"], [[buf_a]], [[16]],
                [[0]]) == [INVALID_PARAMS]
    assert _inv(b, "batch_get_into_multi_buffer_ranges", ["own-p"], [[buf_b]], [[16]],
                [[0]]) == [16]
    # a dies holding a put session: it is revoked, so the key can be written again
    assert _inv(a, "batch_put_session_start", ["own-dead"], [size]) == [0]
    assert _inv(b, "batch_put_session_start", ["own-dead"], [size]) != [0]
    a.kill()
    wait_until(lambda: _inv(b, "batch_put_session_start", ["own-dead"], [size]) == [0], 10.0,
               "the killed dummy's put session to be revoked")
    assert _inv(b, "batch_put_session_revoke", ["own-dead"]) == [0]

# SPDX-License-Identifier: Apache-2.0
"""NoF segments and nof_replica_num (docs/tiers.md §8) with a real master,
a real storage-node process serving a file-backed NoF segment from a
temporary directory, and real client processes.

* a put with nof_replica_num=1 writes the bytes into the storage node's
  file; once the memory holder is killed (SIGKILL) the object is read
  byte-exact from the NoF replica, and get_replica_desc lists it;
* a peer cannot read or write outside the file segment's range;
* upsert rewrites the NoF replica (the file holds the new bytes, a reader
  never sees the old ones); remove frees it;
* the pool evicts NoF replicas above --nof_eviction_high_watermark_ratio
  and frees the memory of objects that keep a NoF copy;
* a storage node that dies takes its NoF replicas with it;
* refusals: no NoF segment (NO_AVAILABLE_HANDLE), a preference without
  nof replicas, a bad path, upstream's NVMe-oF registration (NOT_SUPPORTED),
  put sessions other than replica_num 1 + nof_replica_num 1.
"""

import hashlib
import json
import os
import signal
import struct
import time
import uuid

import pytest

from helpers import CLIENT_TTL_S, MiB, ClientProc, Master, wait_until
from mooncake._errors import ErrorCode

KiB = 1024
NOF_SIZE = 8 * MiB


def key(prefix="n"):
    return f"{prefix}-{uuid.uuid4().hex}"


def metric_line(master, name):
    """The value of a labelled per-segment metric line, by its prefix."""
    import urllib.request
    url = f"http://127.0.0.1:{master.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name):
                return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


class Cluster:
    """A master, a storage node serving a file, a writer and a reader."""

    def __init__(self, tmp_path, master_args=None, writer_segment=16 * MiB,
                 nof_size=NOF_SIZE, reader_segment=16 * MiB):
        self.procs = []
        self.master = None
        self.master = Master(master_args or [])
        self.node = self.proc("node")
        rc = self.node.call("nof", method="setup",
                            args=["localhost", "P2PHANDSHAKE", self.master.addr])["ret"]
        assert rc == 0, f"the storage node's setup returned {rc}"
        self.node_name = self.node.call("nof", method="get_hostname")["ret"]
        self.path = str(tmp_path / "nof0.img")
        r = self.node.call("nof", method="register_file", args=[self.path, nof_size])
        assert r["ret"] == 0, f"register_file returned {r}"
        self.writer = self.proc("writer")
        self.writer_name = self.writer.setup(self.master, segment=writer_segment)
        self.reader = self.proc("reader")
        self.reader.setup(self.master, segment=reader_segment)

    def proc(self, name):
        p = ClientProc(name)
        self.procs.append(p)
        return p

    def put(self, k, data, nof=1, replica_num=1, preferred=None, method="put", **cfg):
        config = {"nof_replica_num": nof, "replica_num": replica_num,
                  "preferred_segment": preferred or self.writer_name}
        config.update(cfg)
        return self.writer.call("invoke", method=method, args=[k, {"hex": data.hex()}],
                                config=config)["ret"]

    def close(self):
        for p in self.procs:
            p.stop()
        if self.master is not None:
            self.master.stop()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_put_survives_the_memory_holder(cluster):
    c = cluster
    assert c.master.metric("master_total_nof_capacity_bytes") == NOF_SIZE
    assert c.master.metric("master_mounted_nof_segments") == 1
    assert c.master.metric("master_mount_nof_segment_requests_total") == 1
    assert metric_line(c.master, "nof_segment_total_capacity_bytes{segment=") == NOF_SIZE
    data = os.urandom(300 * KiB)
    k = key()
    assert c.put(k, data) == 0
    assert c.master.metric("master_nof_allocated_bytes") >= len(data)
    assert metric_line(c.master, "nof_segment_allocated_bytes{segment=") >= len(data)
    # the bytes went through the engine into the storage node's file
    assert data in file_bytes(c.path), "the NoF replica's bytes are not in the file"

    reps = c.reader.call("replica_desc", key=k)["replicas"]
    assert [(r["memory"], r["nof"]) for r in reps] == [(True, False), (False, True)], reps
    assert reps[0]["endpoint"] == c.writer_name
    assert reps[1]["endpoint"] == c.node_name and reps[1]["size"] == len(data)

    c.writer.kill()  # SIGKILL: the memory replica dies with it
    wait_until(lambda: len(c.reader.call("replica_desc", key=k)["replicas"]) == 1,
               4 * CLIENT_TTL_S + 10, "the master to drop the dead writer's replica")
    reps = c.reader.call("replica_desc", key=k)["replicas"]
    assert reps[0]["nof"] and not reps[0]["memory"], reps
    got = c.reader.call("get", key=k)
    assert got["len"] == len(data) and got["sha256"] == hashlib.sha256(data).hexdigest(), \
        "the read from the NoF replica is not byte-exact"
    # batch reads take the same path
    other = c.proc("other")
    other.setup(c.master, segment=16 * MiB)
    assert other.call("get_batch", keys=[k])["hexes"] == [data.hex()]


def test_preferred_nof_segments_and_spread(tmp_path):
    c = Cluster(tmp_path)
    try:
        node2 = c.proc("node2")
        assert node2.call("nof", method="setup",
                          args=["localhost", "P2PHANDSHAKE", c.master.addr])["ret"] == 0
        name2 = node2.call("nof", method="get_hostname")["ret"]
        path2 = str(tmp_path / "nof1.img")
        assert node2.call("nof", method="register_file", args=[path2, NOF_SIZE])["ret"] == 0
        assert c.master.metric("master_mounted_nof_segments") == 2
        for i in range(6):
            data = os.urandom(20 * KiB)
            k = key()
            assert c.put(k, data, preferred_nof_segments=[name2]) == 0
            reps = c.reader.call("replica_desc", key=k)["replicas"]
            assert [r["endpoint"] for r in reps if r["nof"]] == [name2], reps
            assert data in file_bytes(path2) and data not in file_bytes(c.path)
        # two NoF replicas land on two storage nodes
        data = os.urandom(20 * KiB)
        k = key()
        assert c.put(k, data, nof=2) == 0
        reps = c.reader.call("replica_desc", key=k)["replicas"]
        assert sorted(r["endpoint"] for r in reps if r["nof"]) == sorted([c.node_name, name2])
        # a preference without nof replicas would be ignored: refused
        r = c.writer.call("invoke", method="put", args=[key(), {"hex": "00"}],
                          config={"preferred_nof_segments": [name2]})
        assert r["ret"] == int(ErrorCode.INVALID_PARAMS), r
    finally:
        c.close()


def test_confinement(cluster):
    """Raw transfer frames at the storage node: the file segment's range is
    served from the file, nothing outside it is read or written."""
    from test_hostile import MCTR, OP_DESCRIBE, OP_READ, OP_WRITE, connect, recv_exact, \
        te_header, te_request
    c = cluster
    data = os.urandom(64 * KiB)
    k = key()
    assert c.put(k, data) == 0
    port = int(c.node_name.rsplit(":", 1)[1])
    with connect(port) as s:
        r = te_request(s, OP_DESCRIBE, 0, 0)
        assert r is not None and r[0] == 0, r
        desc = json.loads(r[1])
    data_port = desc["tcp_data_port"]
    segs = [b for b in desc["buffers"] if b["length"] == NOF_SIZE]
    assert len(segs) == 1, desc["buffers"]
    base, length = segs[0]["addr"], segs[0]["length"]
    nof = [r for r in c.reader.call("replica_desc", key=k)["replicas"] if r["nof"]]
    assert [r["endpoint"] for r in nof] == [c.node_name], nof

    with connect(data_port) as s:
        # the whole segment in one read (several bounce-buffer pieces)
        status, payload = te_request(s, OP_READ, base, length)
        assert status == 0 and payload == file_bytes(c.path), \
            "a read of the file segment did not return the file's bytes"
        assert data in payload
        for addr, n in [(base + length - 8, 16), (base - 8, 16), (0, 16),
                        (base, length + 1), (base + length, 1)]:
            r = te_request(s, OP_READ, addr, n)
            assert r is not None, f"read of [{addr:#x}, +{n}) closed the connection"
            assert r[0] < 0 and r[1] == b"", (hex(addr), n, r)
    # a write inside lands in the file at its offset
    tail = os.urandom(16)
    with connect(data_port) as s:
        s.sendall(te_header(OP_WRITE, base + length - 16, 16) + tail)
        hdr = recv_exact(s, 16)
        magic, status, _ = struct.unpack("<IiQ", hdr)
        assert magic == MCTR and status == 0
    assert file_bytes(c.path)[-16:] == tail
    # one past the end is refused, and the file does not grow
    with connect(data_port) as s:
        s.sendall(te_header(OP_WRITE, base + length - 8, 16) + b"\xee" * 16)
        hdr = recv_exact(s, 16)
        if hdr is not None:
            magic, status, _ = struct.unpack("<IiQ", hdr)
            assert magic == MCTR and status < 0
    assert os.path.getsize(c.path) == NOF_SIZE
    assert file_bytes(c.path)[-16:] == tail
    # the node still serves
    assert c.reader.call("get", key=k)["sha256"] == hashlib.sha256(data).hexdigest()


def test_upsert_and_remove_reach_nof(cluster):
    c = cluster
    k = key()
    old, new = os.urandom(40 * KiB), os.urandom(40 * KiB)
    assert c.put(k, old) == 0
    assert old in file_bytes(c.path)
    # same size: rewritten in place, NoF replica included
    assert c.put(k, new, method="upsert") == 0
    assert new in file_bytes(c.path) and old not in file_bytes(c.path), \
        "the in-place upsert did not rewrite the NoF replica"
    got = c.reader.call("get", key=k)
    assert got["sha256"] == hashlib.sha256(new).hexdigest()
    # another size: fresh buffers, memory and NoF, the old ones freed
    bigger = os.urandom(90 * KiB)
    assert c.put(k, bigger, method="upsert") == 0
    reps = c.reader.call("replica_desc", key=k)["replicas"]
    assert [r["nof"] for r in reps] == [False, True] and reps[1]["size"] == len(bigger)
    assert bigger in file_bytes(c.path)
    c.writer.kill()
    wait_until(lambda: len(c.reader.call("replica_desc", key=k)["replicas"]) == 1,
               4 * CLIENT_TTL_S + 10, "the master to drop the dead writer's replica")
    got = c.reader.call("get", key=k)
    assert got["sha256"] == hashlib.sha256(bigger).hexdigest(), \
        "a read after the upsert returned other bytes than the new value"
    # remove frees the NoF replica
    before = c.master.metric("master_nof_allocated_bytes")
    assert before >= len(bigger)
    assert c.reader.call("remove", key=k, force=True)["rc"] == 0
    # the reader's get above holds a read lease: a forced remove frees the
    # buffers at its deadline (--default_kv_lease_ttl, 10 s), not at once
    wait_until(lambda: c.master.metric("master_nof_allocated_bytes") <= before - len(bigger),
               15, "remove to free the NoF replica once the reader's lease ended")
    assert c.reader.call("get", key=k)["len"] == 0
    assert c.reader.call("exist", key=k)["rc"] == 0


def test_node_death_takes_its_replicas(cluster):
    c = cluster
    k = key()
    data = os.urandom(32 * KiB)
    assert c.put(k, data) == 0
    assert len(c.reader.call("replica_desc", key=k)["replicas"]) == 2
    c.node.kill()
    wait_until(lambda: c.master.metric("master_mounted_nof_segments") == 0,
               4 * CLIENT_TTL_S + 10, "the master to unmount the dead node's NoF segment")
    assert c.master.metric("master_total_nof_capacity_bytes") == 0
    assert c.master.metric("master_nof_allocated_bytes") == 0
    reps = c.reader.call("replica_desc", key=k)["replicas"]
    assert [r["memory"] for r in reps] == [True], reps
    assert c.reader.call("get", key=k)["sha256"] == hashlib.sha256(data).hexdigest()
    # with no NoF segment left, a write asking for one fails whole
    r = c.put(key(), data)
    assert r == int(ErrorCode.NO_AVAILABLE_HANDLE), r


def test_unregister_drops_replicas(cluster):
    c = cluster
    k = key()
    data = os.urandom(16 * KiB)
    assert c.put(k, data) == 0
    r = c.node.call("nof", method="unregister_file", args=[c.path])
    assert r["ret"] == 0, r
    assert c.master.metric("master_mounted_nof_segments") == 0
    assert [x["nof"] for x in c.reader.call("replica_desc", key=k)["replicas"]] == [False]
    r = c.node.call("nof", method="unregister_file", args=[c.path])
    assert r["ret"] == int(ErrorCode.INVALID_PARAMS), r


def test_nof_eviction(tmp_path):
    # the pool: 1 MiB, evicted above 50 %, a quarter per pass
    c = Cluster(tmp_path, master_args=["--nof_eviction_high_watermark_ratio=0.5",
                                       "--nof_eviction_ratio=0.25"], nof_size=1 * MiB,
                writer_segment=32 * MiB)
    try:
        keys = []
        for i in range(12):
            k = key()
            assert c.put(k, os.urandom(100 * KiB)) == 0, f"put {i} failed"
            keys.append(k)
        # every put found room: the inline pass and the tick freed NoF space
        wait_until(lambda: c.master.metric("master_nof_allocated_bytes") <= 0.5 * MiB,
                   10, "the NoF pool to be evicted below its high watermark")
        assert c.master.metric("master_evicted_key_count_nof") > 0
        assert c.master.metric("master_evicted_size_bytes_nof") > 0
        assert c.master.metric("master_successful_evictions_nof") > 0
        # objects that lost their NoF copy keep their memory replica
        for k in keys:
            reps = c.reader.call("replica_desc", key=k)["replicas"]
            assert reps and reps[0]["memory"], (k, reps)
    finally:
        c.close()


def test_a_put_with_its_nof_node_suspect_evicts_no_nof_copy(tmp_path):
    """A storage node that missed its pings is suspect: no NoF replica is
    placed on it, and a put asking for one fails.  It must not evict the
    pool to make room: room was not what failed, and the NoF copies it
    would drop are the only copies of objects whose memory was evicted."""
    # suspect after 2.5 s, never expired here; leases over long before the put
    c = Cluster(tmp_path, master_args=["--client_ttl=30",
                                       "--nof_eviction_high_watermark_ratio=1.0"])
    try:
        keys = [key() for _ in range(4)]
        for k in keys:
            assert c.put(k, os.urandom(100 * KiB)) == 0
        c.node.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(3.5)  # past 2 heartbeats + 0.5 s of slack: the node is suspect
            rc = c.put(key("late"), os.urandom(100 * KiB))
            nofs = [[r["nof"] for r in c.reader.call("replica_desc", key=k)["replicas"]]
                    for k in keys]
        finally:
            c.node.proc.send_signal(signal.SIGCONT)
        assert rc == ErrorCode.NO_AVAILABLE_HANDLE, rc
        assert c.master.metric("master_evicted_key_count_nof") == 0, c.master.log_text()[-2000:]
        assert nofs == [[False, True]] * len(keys), nofs
    finally:
        c.close()


def test_memory_eviction_keeps_the_nof_copy(tmp_path):
    # memory (writer and reader) holds four objects; ten are written
    c = Cluster(tmp_path, writer_segment=2 * MiB, reader_segment=2 * MiB)
    try:
        datas = {}
        for i in range(10):
            k = key()
            datas[k] = os.urandom(700 * KiB)
            assert c.put(k, datas[k], nof=1) == 0, f"put {i} failed"
        assert c.master.metric("master_evicted_key_count_mem") > 0
        nof_only = 0
        for k, d in datas.items():
            reps = c.reader.call("replica_desc", key=k)["replicas"]
            assert reps, f"{k} was erased instead of keeping its NoF copy"
            nof_only += all(r["nof"] for r in reps)
            got = c.reader.call("get", key=k)
            assert got["sha256"] == hashlib.sha256(d).hexdigest()
        assert nof_only >= 5, "memory eviction freed no memory of NoF-backed objects"
    finally:
        c.close()


def test_refusals(tmp_path):
    m = Master([])
    procs = []
    try:
        w = ClientProc("w")
        procs.append(w)
        name = w.setup(m, segment=16 * MiB)
        # no NoF segment mounted: NO_AVAILABLE_HANDLE, and nothing is left
        r = w.call("invoke", method="put", args=["k1", {"hex": "aa" * 100}],
                   config={"nof_replica_num": 1})
        assert r["ret"] == int(ErrorCode.NO_AVAILABLE_HANDLE), r
        assert w.call("exist", key="k1")["rc"] == 0
        assert m.metric("master_allocated_bytes") == 0
        node = ClientProc("node")
        procs.append(node)
        assert node.call("nof", method="setup",
                         args=["localhost", "P2PHANDSHAKE", m.addr])["ret"] == 0
        for path, size in (("relative.img", MiB), (str(tmp_path / "x.img"), 0),
                           (str(tmp_path / "no" / "dir.img"), MiB), (str(tmp_path), MiB)):
            r = node.call("nof", method="register_file", args=[path, size])
            assert r["ret"] == int(ErrorCode.INVALID_PARAMS), (path, size, r)
        p = str(tmp_path / "ok.img")
        assert node.call("nof", method="register_file", args=[p, MiB])["ret"] == 0
        assert os.path.getsize(p) == MiB
        r = node.call("nof", method="register_file", args=[p, MiB])
        assert r["ret"] == int(ErrorCode.INVALID_PARAMS), "a path mounted twice"
        r = node.call("nof", method="real_register",
                      args=["nqn.2016-06.io.spdk:cnode1", 1, "127.0.0.1", 4420, 0, MiB,
                            m.addr])
        assert r["ret"] == int(ErrorCode.NOT_SUPPORTED), r
        # put sessions: only 1 memory + 1 NoF, whose NoF half is never reserved
        r = w.call("invoke", method="batch_put_session_start", args=[["s1"], [64]],
                   config={"nof_replica_num": 2})
        assert r["ret"][0] == int(ErrorCode.INVALID_PARAMS), r
        before = m.metric("master_nof_allocated_bytes")
        r = w.call("invoke", method="batch_put_session_start", args=[["s2"], [64]],
                   config={"nof_replica_num": 1})
        assert r["ret"][0] == 0, r
        assert m.metric("master_nof_allocated_bytes") == before
        assert name
    finally:
        for p in procs:
            p.stop()
        m.stop()


def test_master_restart_remounts_the_nof_segment(cluster):
    """A restarted master starts empty; the storage node's heartbeat mounts
    its NoF segment again and NoF placement works at once."""
    c = cluster
    ports = (c.master.port, c.master.http_port, c.master.metrics_port)
    c.master.kill()
    c.master.stop()
    c.master = Master([], ports=ports)
    wait_until(lambda: c.master.metric("master_mounted_nof_segments") == 1, 20,
               "the storage node to remount its NoF segment")
    assert c.master.metric("master_remount_nof_segment_requests_total") >= 1
    assert c.master.metric("master_total_nof_capacity_bytes") == NOF_SIZE
    data = os.urandom(48 * KiB)
    k = key()
    wait_until(lambda: c.put(k, data) == 0, 20, "a put with a NoF replica to succeed")
    reps = c.reader.call("replica_desc", key=k)["replicas"]
    assert [r["nof"] for r in reps] == [False, True], reps
    assert data in file_bytes(c.path)

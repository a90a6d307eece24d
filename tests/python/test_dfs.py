# SPDX-License-Identifier: Apache-2.0
"""DFS replicas (dfs_replica_num, docs/tiers.md §6) with a real master
(--root_fs_dir), two real client processes and real shard files in one
temporary directory that both see.

* a put with dfs_replica_num=1 whose only memory holder is killed with
  SIGKILL reads back byte-exact from the other client, before and after
  the master expires the holder;
* upserts (same size, other size) and removes never let old bytes be
  read, even from the file once memory is gone;
* a corrupted or truncated shard file is a miss (b""), never bytes;
* the upsert topology rule and the refusals, with their messages;
* a master restart with --enable_snapshot_restore restores DFS replicas.
"""

import hashlib
import os
import signal
import uuid

import pytest

from helpers import MiB, ClientProc, Master, free_port, wait_until

KiB = 1024
INVALID_PARAMS = -600
NOT_SUPPORTED = -1012
DEADLINE_S = 20.0


def key(prefix="dfs"):
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def root(tmp_path):
    d = tmp_path / "dfs"
    d.mkdir()
    return d


@pytest.fixture
def procs():
    made = []

    def make(name, master, root_dir=None, env=None, setup=True):
        e = dict(env or {})
        if root_dir is not None:
            e["MOONCAKE_DFS_ROOT_DIR"] = str(root_dir)
        c = ClientProc(name, env=e)
        made.append(c)
        if setup:
            c.hostname = c.setup(master)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def dfs_master(root):
    m = Master(extra_args=[f"--root_fs_dir={root}"])
    try:
        yield m
        assert m.alive(), "mooncake_master died:\n" + m.log_text()
    finally:
        m.stop()


def dfs_desc(client, k):
    return [r for r in client.call("replica_desc", key=k)["replicas"] if r.get("dfs")]


def put_on(client, k, size, holder=None, **cfg):
    """put_random with dfs_replica_num=1, the memory replica on @p holder."""
    r = client.call("put_random", key=k, size=size, dfs_replica_num=1,
                    preferred=(holder or client).hostname, **cfg)
    assert r["rc"] == 0, r
    return r["sha256"]


def remove(client, k):
    """remove(), once the read lease of the last get has run out (-706)."""
    wait_until(lambda: client.call("remove", key=k)["rc"] == 0, DEADLINE_S,
               f"removing {k} once its lease ends")


def kill_and_expire(master, holder, reader, k):
    """SIGKILL @p holder, then wait for the master to forget its memory."""
    if holder.alive():
        os.kill(holder.pid, signal.SIGKILL)
        holder.proc.wait(timeout=10)
    wait_until(lambda: all(not r["memory"]
                           for r in reader.call("replica_desc", key=k)["replicas"]),
               DEADLINE_S, "the master to expire the killed holder")


def test_dfs_copy_survives_its_only_memory_holder(dfs_master, procs, root):
    a = procs("a", dfs_master, root)
    b = procs("b", dfs_master, root)
    k = key()
    sha = put_on(a, k, 300 * KiB)
    # described: memory first, then the DFS record (upstream's fields)
    reps = b.call("replica_desc", key=k)["replicas"]
    assert [r["memory"] for r in reps] == [True, False], reps
    d = reps[1]
    assert d["dfs"] and d["size"] == 300 * KiB and d["file_path"].startswith(str(root) + "/")
    assert d["aligned_size"] >= 300 * KiB and d["aligned_size"] % 4096 == 0
    assert d["offset"] % 4096 == 0
    assert os.path.getsize(d["file_path"]) >= d["offset"] + 300 * KiB
    assert dfs_master.metric("master_dfs_replicas") == 1
    assert dfs_master.metric("master_dfs_replica_bytes") == 300 * KiB
    assert dfs_master.metric("master_dfs_allocated_bytes") == d["aligned_size"]
    # the only memory holder dies: the read falls back to the file at once,
    # and still reads once the master has dropped the memory replica
    os.kill(a.pid, signal.SIGKILL)
    a.proc.wait(timeout=10)
    r = b.call("get", key=k)
    assert r["sha256"] == sha, r
    kill_and_expire(dfs_master, a, b, k)
    assert len(dfs_desc(b, k)) == 1
    r = b.call("get", key=k)
    assert r["len"] == 300 * KiB and r["sha256"] == sha, r
    assert b.call("exist", key=k)["rc"] == 1
    # removing it frees its extent
    remove(b, k)
    assert b.call("get", key=k)["len"] == 0
    assert dfs_master.metric("master_dfs_replicas") == 0
    assert dfs_master.metric("master_dfs_allocated_bytes") == 0


def test_no_stale_bytes_after_upsert_or_remove(dfs_master, procs, root):
    a = procs("a", dfs_master, root)
    b = procs("b", dfs_master, root)
    k1, k2 = key(), key()
    put_on(a, k1, 64 * KiB)
    # same size, same topology: rewritten in place
    r = a.call("upsert_random", key=k1, size=64 * KiB, dfs_replica_num=1, preferred=a.hostname)
    assert r["rc"] == 0, r
    same = r["sha256"]
    # another size: a new topology
    put_on(a, k2, 64 * KiB)
    r = a.call("upsert_random", key=k2, size=96 * KiB, dfs_replica_num=1, preferred=a.hostname)
    assert r["rc"] == 0, r
    other = r["sha256"]
    assert dfs_master.metric("master_dfs_replicas") == 2
    # memory gone: only the files answer, with the newest values
    kill_and_expire(dfs_master, a, b, k1)
    assert b.call("get", key=k1)["sha256"] == same
    r = b.call("get", key=k2)
    assert r["len"] == 96 * KiB and r["sha256"] == other
    # an upsert of a DFS-only object writes it anew, a remove ends it
    r = b.call("upsert_random", key=k1, size=64 * KiB, dfs_replica_num=1, preferred=b.hostname)
    assert r["rc"] == 0, r
    assert b.call("get", key=k1)["sha256"] == r["sha256"]
    remove(b, k2)
    assert b.call("get", key=k2)["len"] == 0
    assert dfs_master.metric("master_dfs_replicas") == 1


def test_damaged_shard_is_a_miss(dfs_master, procs, root):
    a = procs("a", dfs_master, root)
    b = procs("b", dfs_master, root)
    k1, k2 = key(), key()
    put_on(a, k1, 32 * KiB)
    put_on(a, k2, 32 * KiB)
    d1, d2 = dfs_desc(b, k1)[0], dfs_desc(b, k2)[0]
    kill_and_expire(dfs_master, a, b, k1)
    # one flipped value byte: a miss, never the changed bytes
    with open(d1["file_path"], "r+b") as f:
        at = d1["offset"] + 24 + len(k1) + 1000
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    r = b.call("get", key=k1)
    assert r["len"] == 0, r
    # the shard cut short before the record ends: a miss too
    os.truncate(d2["file_path"], d2["offset"] + 100)
    r = b.call("get", key=k2)
    assert r["len"] == 0, r


def test_upsert_topology_rule(dfs_master, procs, root):
    a = procs("a", dfs_master, root)
    k = key()
    put_on(a, k, 8 * KiB)
    r = a.call("invoke", method="upsert", args=[k, {"hex": "00" * 8 * KiB}],
               config={"dfs_replica_num": 0})
    assert r["ret"] == INVALID_PARAMS and "dfs_replica_num" in r["detail"], r
    r = a.call("invoke", method="upsert", args=[k, {"hex": "00" * 8 * KiB}],
               config={"dfs_replica_num": 1, "replica_num": 2})
    assert r["ret"] == INVALID_PARAMS, r
    # the value is untouched by the refused upserts
    before = a.call("get", key=k)["sha256"]
    # another size may change the topology: no DFS copy any more
    r = a.call("invoke", method="upsert", args=[k, {"hex": "11" * 4 * KiB}])
    assert r["ret"] == 0, r
    assert dfs_desc(a, k) == []
    assert a.call("get", key=k)["sha256"] != before
    assert dfs_master.metric("master_dfs_replicas") == 0
    # an object without DFS may not gain one at the same size
    r = a.call("invoke", method="upsert", args=[k, {"hex": "22" * 4 * KiB}],
               config={"dfs_replica_num": 1})
    assert r["ret"] == INVALID_PARAMS, r


def test_refusals(dfs_master, procs, root, tmp_path):
    a = procs("a", dfs_master, root)
    k = key()
    r = a.call("invoke", method="put", args=[k, {"hex": "00"}],
               config={"dfs_replica_num": 1, "replica_num": 0})
    assert r["ret"] == INVALID_PARAMS and "replica_num" in r["detail"], r
    r = a.call("invoke", method="put", args=[k, {"hex": "00"}], config={"dfs_replica_num": 2})
    assert r["ret"] == INVALID_PARAMS, r
    # a client without MOONCAKE_DFS_ROOT_DIR
    plain = procs("plain", dfs_master)
    r = plain.call("invoke", method="put", args=[k, {"hex": "00"}],
                   config={"dfs_replica_num": 1})
    assert r["ret"] == NOT_SUPPORTED and "MOONCAKE_DFS_ROOT_DIR" in r["detail"], r
    assert plain.call("exist", key=k)["rc"] == 0
    # a client whose layout differs from the master's refuses to start
    odd = procs("odd", dfs_master, root, env={"MOONCAKE_DFS_SHARD_COUNT": "3"}, setup=False)
    r = odd.call("invoke", method="setup", args=setup_args(dfs_master))
    assert r["ret"] != 0 and "MOONCAKE_DFS_SHARD_COUNT=3" in r["detail"], r
    # a client with a DFS root against a master without one
    m2 = Master()
    try:
        c = procs("c", m2, root, setup=False)
        r = c.call("invoke", method="setup", args=setup_args(m2))
        assert r["ret"] != 0 and "--root_fs_dir" in r["detail"], r
    finally:
        m2.stop()


def setup_args(m):
    return ["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.addr]


def test_bad_root_refuses_to_start(tmp_path):
    import subprocess
    from helpers import master_bin
    for root in ("relative/dir", str(tmp_path / "missing")):
        r = subprocess.run([master_bin(), f"--root_fs_dir={root}", "--port=0",
                            "--metrics_port=0"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "--root_fs_dir" in r.stderr, r.stderr
    r = subprocess.run([master_bin(), f"--root_fs_dir={tmp_path}", "--port=0",
                        "--metrics_port=0"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, MOONCAKE_DFS_ALIGNMENT="1000"))
    assert r.returncode == 2 and "MOONCAKE_DFS_ALIGNMENT" in r.stderr, r.stderr


def test_master_restart_restores_dfs_replicas(root, procs, tmp_path):
    ports = (free_port(), free_port(), free_port())
    args = [f"--root_fs_dir={root}", "--enable_snapshot=true",
            f"--snapshot_backup_dir={tmp_path / 'state'}", "--enable_snapshot_restore=true"]
    m = Master(args, ports=ports)
    try:
        a = procs("a", m, root)
        k = key()
        sha = put_on(a, k, 128 * KiB)
        a.kill()  # the only memory holder goes with the master
        m.stop()
        m = Master(args, ports=ports)
        b = procs("b", m, root)
        wait_until(lambda: b.call("get", key=k)["len"] > 0, DEADLINE_S,
                   "the restored DFS replica to read")
        assert b.call("get", key=k)["sha256"] == sha
        assert len(dfs_desc(b, k)) == 1
        assert m.metric("master_dfs_replicas") == 1
        # its extent is taken: a new record does not overwrite it
        k2 = key()
        put_on(b, k2, 128 * KiB)
        assert dfs_desc(b, k2)[0]["offset"] != dfs_desc(b, k)[0]["offset"] or \
            dfs_desc(b, k2)[0]["shard_idx"] != dfs_desc(b, k)[0]["shard_idx"]
        assert b.call("get", key=k)["sha256"] == sha
    finally:
        m.stop()


def test_upstream_style_setup_with_the_distributed_backend(dfs_master, procs, root, tmp_path):
    """Upstream turns the DFS backend on with enable_ssd_offload and
    MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=distributed_storage_backend:
    that works unchanged (no SSD tier starts in ssd_offload_path), and
    refuses with a clear message without MOONCAKE_DFS_ROOT_DIR."""
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    env = {"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": "distributed_storage_backend"}
    kwargs = {"enable_ssd_offload": True, "ssd_offload_path": str(ssd)}
    a = procs("a", dfs_master, root, env=env, setup=False)
    r = a.call("invoke", method="setup", args=setup_args(dfs_master), kwargs=kwargs)
    assert r["ret"] == 0, r
    a.hostname = a.call("hostname")["hostname"]
    k = key()
    sha = put_on(a, k, 16 * KiB)
    assert len(dfs_desc(a, k)) == 1 and a.call("get", key=k)["sha256"] == sha
    assert list(ssd.iterdir()) == [], "no SSD tier runs with the distributed backend"
    bare = procs("bare", dfs_master, env=env, setup=False)
    r = bare.call("invoke", method="setup", args=setup_args(dfs_master), kwargs=kwargs)
    assert r["ret"] == INVALID_PARAMS and "MOONCAKE_DFS_ROOT_DIR" in r["detail"], r
    other = procs("other", dfs_master, root,
                  env={"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": "nvme_kv_storage_backend"},
                  setup=False)
    r = other.call("invoke", method="setup", args=setup_args(dfs_master), kwargs=kwargs)
    assert r["ret"] == INVALID_PARAMS and "nvme_kv_storage_backend" in r["detail"], r

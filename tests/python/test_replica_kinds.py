# SPDX-License-Identifier: Apache-2.0
"""Replica descriptors in upstream's shape (upstream-parity-2.md §3), with a
real master, real SSD-offload clients (in process, and a mooncake_client
daemon serving a dummy) and real DFS clients sharing a directory.

* a record in a client's SSD-offload tier is upstream's LOCAL_DISK:
  is_local_disk_replica() is True and is_disk_replica() False, in this
  process, through a dummy, in the C library's kind (Lua and Python see
  MC_REPLICA_KIND_LOCAL_DISK) and in the master's /query_key JSON;
* a record in the shared DFS tier is upstream's DISK: is_disk_replica()
  True, is_local_disk_replica() False, get_disk_descriptor() gives its
  shard file;
* asking for the wrong kind raises RuntimeError "Expected
  MemoryDescriptor" / "Expected DiskDescriptor";
* MemoryDescriptor.buffer_descriptor is a mooncake.store.Descriptor
  (constructible, read-write, repr "<Descriptor size=N buffer_address=N
  transport_endpoint=S>") whose transport_endpoint is the segment name;
* get_replica_desc of a miss is [], batch_get_replica_desc a dict.
"""

import json
import os
import re
import urllib.request
import uuid

import pytest

from helpers import MiB, ClientProc, Master, RealClient, wait_until
from test_tiers import offload_master, stores  # noqa: F401  (fixtures)
from mooncake.store import Descriptor, MemoryDescriptor, ReplicaStatus

KiB = 1024


def key(prefix="rk"):
    return f"{prefix}-{uuid.uuid4().hex}"


def query_key(m: Master, k: str) -> dict:
    url = f"http://127.0.0.1:{m.metrics_port}/query_key?key={k}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def local_disk_of(store, k):
    return [d for d in store.get_replica_desc(k) if d.is_local_disk_replica()]


def test_an_ssd_offload_record_is_local_disk(offload_master, stores, tmp_path):
    s = stores(offload_master, tmp_path)
    k = key("ssd")
    v = os.urandom(100 * KiB)
    assert s.put(k, v) == 0
    wait_until(lambda: local_disk_of(s, k), 20.0, f"{k} to reach the SSD tier")
    descs = s.get_replica_desc(k)
    assert [(d.is_memory_replica(), d.is_local_disk_replica(), d.is_disk_replica())
            for d in descs] == [(True, False, False), (False, True, False)]
    mem, disk = descs
    assert mem.status == ReplicaStatus.COMPLETE and disk.status == ReplicaStatus.COMPLETE
    # the memory replica: a Descriptor naming the segment
    md = mem.get_memory_descriptor()
    assert isinstance(md, MemoryDescriptor)
    bd = md.buffer_descriptor
    assert type(bd) is Descriptor
    assert bd.transport_endpoint == s.get_hostname()
    assert re.fullmatch(r".+:\d+", bd.transport_endpoint)
    assert bd.size == len(v) and bd.buffer_address != 0
    assert not hasattr(bd, "protocol")
    assert repr(bd) == (f"<Descriptor size={len(v)} buffer_address={bd.buffer_address} "
                        f"transport_endpoint={s.get_hostname()}>")
    # the wrong kinds, with upstream's messages
    with pytest.raises(RuntimeError, match="^Expected DiskDescriptor$"):
        mem.get_disk_descriptor()
    with pytest.raises(RuntimeError, match="^Expected MemoryDescriptor$"):
        disk.get_memory_descriptor()
    with pytest.raises(RuntimeError, match="^Expected DiskDescriptor$"):
        disk.get_disk_descriptor()
    ld = disk.get_local_disk_descriptor()
    assert ld.object_size == len(v) and ld.transport_endpoint == s.get_hostname()
    assert os.path.dirname(ld.file_path) == str(tmp_path)
    with open(ld.file_path, "rb") as f:                     # the record starts there
        f.seek(ld.offset)
        assert v in f.read(4096 + len(v))
    # the master's JSON types it the same way
    q = query_key(offload_master, k)
    assert [r["type"] for r in q["replicas"]] == ["MEMORY"]
    assert [(r["type"], r["segment"], r["file_path"], r["size"]) for r in q["disk_replicas"]] \
        == [("LOCAL_DISK", s.get_hostname(), ld.file_path, len(v))]
    # disk-only (memory cleared): still LOCAL_DISK, and readable
    wait_until(lambda: s.batch_replica_clear([k], s.get_hostname()) == [k], 10.0,
               f"the memory replica of {k} to be cleared")
    only = s.get_replica_desc(k)
    assert [(d.is_memory_replica(), d.is_local_disk_replica(), d.is_disk_replica())
            for d in only] == [(False, True, False)]
    assert s.get(k) == v


def test_the_c_kind_of_an_ssd_record(offload_master, stores, tmp_path):
    """The native layer hands Python mc_replica_kind_t values: the SSD
    record is MC_REPLICA_KIND_LOCAL_DISK (3), memory MC_REPLICA_KIND_MEMORY."""
    from mooncake import capi
    assert (capi.MC_REPLICA_KIND_DISK, capi.MC_REPLICA_KIND_MEMORY, capi.MC_REPLICA_KIND_NOF,
            capi.MC_REPLICA_KIND_LOCAL_DISK) == (0, 1, 2, 3)
    s = stores(offload_master, tmp_path)
    k = key("kind")
    assert s.put(k, b"k" * 5000) == 0
    wait_until(lambda: local_disk_of(s, k), 20.0, f"{k} to reach the SSD tier")
    kinds = [t[1] for t in s._store.replica_descs([k])[0]]
    assert kinds == [capi.MC_REPLICA_KIND_MEMORY, capi.MC_REPLICA_KIND_LOCAL_DISK]


def test_a_dummy_sees_its_daemons_ssd_records_as_local_disk(offload_master, stores, tmp_path):
    tier = tmp_path / "tier"
    tier.mkdir()
    rc = RealClient(offload_master, segment="16MB",
                    extra_args=["--enable_offload=true", f"--ssd_offload_path={tier}"])
    d = ClientProc("dummy")
    try:
        assert d.call("setup_dummy", pool=16 * MiB, lbuf=16 * MiB, addr=rc.addr)["rc"] == 0
        k = key("dummy")
        assert d.call("put_random", key=k, size=64 * KiB)["rc"] == 0
        reader = stores(offload_master)
        wait_until(lambda: local_disk_of(reader, k), 20.0, f"{k} to reach the daemon's tier")
        reps = d.call("replica_desc", key=k)["replicas"]
        assert [(r["memory"], r["local_disk"]) for r in reps] == [(True, False), (False, True)]
        assert reps[1]["size"] == 64 * KiB and reps[1]["dfs"] is False
        assert reps[1]["holder"] == reps[0]["endpoint"]
        ld = local_disk_of(reader, k)[0]
        assert not ld.is_disk_replica()
        assert os.path.dirname(ld.get_local_disk_descriptor().file_path) == str(tier)
    finally:
        d.stop()
        rc.stop()


def test_a_dfs_record_is_disk(tmp_path, stores, monkeypatch):
    root = tmp_path / "dfs"
    root.mkdir()
    m = Master(extra_args=[f"--root_fs_dir={root}"])
    writer = ClientProc("dfs-writer", env={"MOONCAKE_DFS_ROOT_DIR": str(root)})
    try:
        host = writer.setup(m)
        monkeypatch.setenv("MOONCAKE_DFS_ROOT_DIR", str(root))
        reader = stores(m)
        k = key("dfs")
        r = writer.call("put_random", key=k, size=300 * KiB, dfs_replica_num=1, preferred=host)
        assert r["rc"] == 0, r
        descs = reader.get_replica_desc(k)
        assert [(x.is_memory_replica(), x.is_disk_replica(), x.is_local_disk_replica())
                for x in descs] == [(True, False, False), (False, True, False)]
        disk = descs[1]
        dd = disk.get_disk_descriptor()
        assert dd.object_size == 300 * KiB and dd.file_path.startswith(str(root) + "/")
        assert os.path.getsize(dd.file_path) >= dd.offset + 300 * KiB
        with pytest.raises(RuntimeError, match="^Expected MemoryDescriptor$"):
            disk.get_memory_descriptor()
        with pytest.raises(RuntimeError, match="^Expected LocalDiskDescriptor$"):
            disk.get_local_disk_descriptor()
        # the C kind and the master's JSON agree
        assert [t[1] for t in reader._store.replica_descs([k])[0]] == [1, 0]
        q = query_key(m, k)
        assert [x["type"] for x in q["disk_replicas"]] == ["DISK"]
        assert q["disk_replicas"][0]["offset"] == dd.offset
        # the writer's own view through its process: a DFS record, not LOCAL_DISK
        reps = writer.call("replica_desc", key=k)["replicas"]
        assert [(x["memory"], x["local_disk"], x.get("dfs")) for x in reps] == \
            [(True, False, None), (False, False, True)]
    finally:
        writer.stop()
        m.stop()


def test_descriptor_is_constructible_and_read_write():
    d = Descriptor()
    assert (d.size, d.buffer_address, d.transport_endpoint) == (0, 0, "")
    d.size, d.buffer_address, d.transport_endpoint = 7, 4096, "10.0.0.1:12345"
    assert repr(d) == "<Descriptor size=7 buffer_address=4096 transport_endpoint=10.0.0.1:12345>"
    d2 = Descriptor(size=1, buffer_address=2, transport_endpoint="h:1")
    assert (d2.size, d2.buffer_address, d2.transport_endpoint) == (1, 2, "h:1")
    # this package's earlier names stay as aliases of the same fields
    d2.transport_endpoint_ = "h:2"
    assert d2.transport_endpoint == "h:2" and d2.size_ == 1 and d2.buffer_address_ == 2
    from mooncake.store import BufferDescriptor
    assert BufferDescriptor is Descriptor


def test_a_miss_is_an_empty_list_and_the_batch_a_dict(store):
    k = key("hit")
    assert store.put(k, b"x" * 100) == 0
    assert store.get_replica_desc(key("miss")) == []
    out = store.batch_get_replica_desc([k, "rk-missing"])
    assert type(out) is dict and list(out) == [k, "rk-missing"]
    assert out["rk-missing"] == []
    assert [d.is_memory_replica() for d in out[k]] == [True]
    assert out[k][0].get_memory_descriptor().buffer_descriptor.transport_endpoint == \
        store.get_hostname()

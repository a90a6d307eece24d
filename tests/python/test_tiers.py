# SPDX-License-Identifier: Apache-2.0
"""The SSD tier (docs/tiers.md) with a real master, real client processes
and real bucket files in temporary directories.

* memory filled three times over with --offload_on_evict: every put
  succeeds (retried while the offloader catches up), every object reads
  back byte-exact, and the evicted ones are disk-only;
* a disk-only object is read straight from its bucket file by another
  process on the host, and get_replica_desc describes it;
* a corrupted or truncated record is a miss (b""), never other bytes;
* a full tier deletes its oldest buckets and the master forgets their disk
  replicas;
* an upsert never lets the old disk copy be read, nor does a read that
  overlaps the lookup with the record it remembers;
* a holder killed with SIGKILL takes its disk replicas with it;
* without --enable_offload the master takes no disk replica; the flags
  are refused when inconsistent; a tier directory serves one client;
* --promotion_on_hit: the threshold-th read of a disk-only object queues
  its copy back to memory, done by the holder; an upsert or remove racing
  a promotion never brings old bytes back.
"""

import ctypes
import hashlib
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from helpers import MiB, Master, closing_stores, master_bin, wait_until
from mooncake.store import MooncakeDistributedStore
from mooncake._errors import ErrorCode

KiB = 1024
NO_AVAILABLE_HANDLE = -200


def key(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def offload_master():
    m = Master(extra_args=["--enable_offload", "--offload_on_evict"])
    try:
        yield m
        assert m.alive(), "mooncake_master died:\n" + m.log_text()
    finally:
        m.stop()


def ssd_store(m, ssd_dir=None, segment=4 * MiB):
    """A store on master ``m`` with an SSD tier in ``ssd_dir`` (none: no tier)."""
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", segment, 16 * MiB, "tcp", "", m.addr, None,
                 enable_ssd_offload=ssd_dir is not None,
                 ssd_offload_path=str(ssd_dir) if ssd_dir else "")
    assert rc == 0, f"setup returned {rc}"
    return s


@pytest.fixture
def stores():
    """``stores(master, ssd_dir=None, segment=...)``: ssd_store()s, closed
    at teardown."""
    with closing_stores(ssd_store) as make:
        yield make


def disk_desc(store, k):
    """The descriptor of k's SSD-tier record, or None.  The record is
    upstream's LOCAL_DISK replica: is_local_disk_replica() and not
    is_disk_replica() (that is the DFS tier's, upstream DISK)."""
    for d in store.get_replica_desc(k):
        if d.is_local_disk_replica():
            assert not d.is_disk_replica() and not d.is_memory_replica()
            with pytest.raises(RuntimeError, match="^Expected DiskDescriptor$"):
                d.get_disk_descriptor()
            return d.get_local_disk_descriptor()
    return None


def kinds(store, k):
    return ["disk" if d.is_local_disk_replica() else "memory"
            for d in store.get_replica_desc(k)]


def wait_offloaded(store, k, timeout=20.0):
    return wait_until(lambda: disk_desc(store, k), timeout, f"{k} to reach the disk tier")


def make_disk_only(store, k, timeout=10.0):
    """Drop k's memory replica (its owner clears it; a lease may delay it)."""
    seg = store.get_hostname()
    wait_until(lambda: store.batch_replica_clear([k], seg) == [k], timeout,
               f"the memory replica of {k} to be cleared")
    assert kinds(store, k) == ["disk"]


def put_retrying(store, k, data, timeout=30.0):
    """put, retried while --offload_on_evict waits for disk copies."""
    rcs = []

    def attempt():
        rc = store.put(k, data)
        rcs.append(rc)
        return rc == 0 or rc != NO_AVAILABLE_HANDLE

    wait_until(attempt, timeout, f"put of {k} to find room")
    assert rcs[-1] == 0, f"put of {k} returned {rcs[-1]}"


def test_fill_memory_three_times_reads_everything_back(offload_master, stores, tmp_path):
    s = stores(offload_master, tmp_path)
    size = 256 * KiB
    items = [(key("fill"), os.urandom(size)) for _ in range(48)]  # 12 MiB into 4 MiB
    for k, v in items:
        put_retrying(s, k, v)
    disk_only = 0
    for k, v in items:
        got = s.get(k)
        assert got == v, f"{k}: {len(got)} bytes, not the {len(v)} put"
        disk_only += kinds(s, k) == ["disk"]
    assert disk_only >= 24, f"only {disk_only} of 48 objects left memory"
    st = s.offload_stats()
    assert st["offloaded_keys"] >= disk_only and st["used_bytes"] >= disk_only * size
    assert list(tmp_path.glob("*.bucket")), "no bucket file was written"


def test_disk_only_object_read_by_another_process(offload_master, stores, tmp_path,
                                                  spawn_client):
    s = stores(offload_master, tmp_path)
    k, v = key("far"), os.urandom(300 * KiB)
    assert s.put(k, v) == 0
    wait_offloaded(s, k)
    make_disk_only(s, k)
    d = disk_desc(s, k)
    assert d.object_size == len(v)
    assert Path(d.file_path).parent == tmp_path and d.file_path.endswith(".bucket")
    assert d.transport_endpoint == s.get_hostname()
    reader = spawn_client("reader")
    reader.setup(offload_master, segment=4 * MiB)
    r = reader.call("get", key=k)
    assert r["len"] == len(v) and r["sha256"] == hashlib.sha256(v).hexdigest()
    assert s.get(k) == v
    # ranged and zero-copy reads take the same path
    assert s.get_buffer(k) is not None and bytes(s.get_buffer(k)) == v


def test_corrupted_and_truncated_records_are_misses(offload_master, stores, tmp_path):
    s = stores(offload_master, tmp_path)
    k1, v1 = key("bad"), os.urandom(64 * KiB)
    k2, v2 = key("cut"), os.urandom(64 * KiB)
    for k, v in ((k1, v1), (k2, v2)):
        assert s.put(k, v) == 0
        wait_offloaded(s, k)
        make_disk_only(s, k)
    d1, d2 = disk_desc(s, k1), disk_desc(s, k2)
    # one flipped byte inside k1's value
    with open(d1.file_path, "r+b") as f:
        at = d1.offset + 24 + len(k1) + 1000
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    assert s.get(k1) == b"", "a corrupted record must read as a miss"
    assert s.get_buffer(k1) is None
    # k2's bucket cut in the middle of its value (a torn write)
    os.truncate(d2.file_path, d2.offset + 24 + len(k2) + 100)
    assert s.get(k2) == b"", "a truncated record must read as a miss"


def test_full_tier_drops_oldest_buckets(offload_master, stores, tmp_path, monkeypatch):
    monkeypatch.setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", str(200 * KiB))
    monkeypatch.setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", str(600 * KiB))
    s = stores(offload_master, tmp_path, segment=16 * MiB)
    keys = [key("full") for _ in range(12)]
    for k in keys:
        assert s.put(k, os.urandom(100 * KiB)) == 0
    wait_offloaded(s, keys[-1])
    st = s.offload_stats()
    assert st["evicted_buckets"] >= 2 and st["evicted_keys"] >= 4, st
    assert st["used_bytes"] <= 600 * KiB
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("*.bucket"))
    assert on_disk <= 600 * KiB, f"{on_disk} bytes of buckets for a 600 KiB tier"
    # the oldest copies are gone at the master too; memory still has them
    assert kinds(s, keys[0]) == ["memory"]
    assert kinds(s, keys[-1]) == ["memory", "disk"]


def test_overlapped_disk_reads_follow_the_masters_answer(offload_master, stores, tmp_path):
    """A disk-only object's record is read while the master answers the
    lookup (docs/tiers.md §4, overlapped disk reads), sized by what this
    client last saw; only the answer decides.  A value upserted smaller or
    larger since, or a remove, never returns the hinted record's bytes."""
    s = stores(offload_master, tmp_path)
    k = key("ov")
    v1, v2, v3 = os.urandom(64 * KiB), os.urandom(32 * KiB), os.urandom(128 * KiB)
    buf = ctypes.create_string_buffer(256 * KiB)
    ptr = ctypes.addressof(buf)

    def write_disk_only(v):
        assert s.upsert(k, v) == 0
        wait_offloaded(s, k)
        make_disk_only(s, k)

    assert s.register_buffer(ptr, len(buf)) == 0
    try:
        write_disk_only(v1)
        assert s.get(k) == v1 and s.get(k) == v1
        assert s.get_into(k, ptr, len(buf)) == len(v1) and buf.raw[:len(v1)] == v1
        # smaller in memory: the read lands in a buffer sized for v1, then shortened
        assert s.upsert(k, v2) == 0
        assert s.get(k) == v2
        write_disk_only(v2)
        assert s.get(k) == v2
        # the same through a bytearray, larger then smaller than the hint
        assert s.upsert(k, v1) == 0 and s._store.get(k, 1) == bytearray(v1)
        write_disk_only(v1)
        assert s.upsert(k, v2) == 0 and s._store.get(k, 1) == bytearray(v2)
        write_disk_only(v2)
        # larger: too big for the hinted size, read again at its own
        assert s.upsert(k, v3) == 0
        assert s.get(k) == v3
        write_disk_only(v3)
        assert s.get(k) == v3
        assert s.get_into(k, ptr, len(buf)) == len(v3) and buf.raw[:len(v3)] == v3
        # removed: a miss, though every record is still in the buckets
        assert s.remove(k, True) == 0
        assert s.get(k) == b""
        assert s.get_into(k, ptr, len(buf)) == ErrorCode.OBJECT_NOT_FOUND
    finally:
        assert s.unregister_buffer(ptr) == 0


def test_upsert_never_reads_the_old_disk_copy(offload_master, stores, tmp_path):
    s = stores(offload_master, tmp_path)
    k, old, new = key("up"), os.urandom(50 * KiB), os.urandom(50 * KiB)
    assert s.put(k, old) == 0
    wait_offloaded(s, k)
    make_disk_only(s, k)
    assert s.upsert(k, new) == 0
    assert s.get(k) == new
    # the new value gets its own disk copy, never the old one
    wait_offloaded(s, k)
    make_disk_only(s, k)
    assert s.get(k) == new


def test_killed_holder_takes_its_disk_replicas(offload_master, stores, tmp_path,
                                               spawn_client):
    reader = stores(offload_master, None)
    holder = spawn_client("holder")
    r = holder.call("setup", args=["localhost", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "",
                                   offload_master.addr],
                    kwargs={"enable_ssd_offload": True, "ssd_offload_path": str(tmp_path)})
    assert r["rc"] == 0
    k = key("dead")
    assert holder.call("put", key=k, hex=(b"d" * 5000).hex())["rc"] == 0
    wait_offloaded(reader, k)
    # its memory replica may sit in either client's segment
    seg = [d.get_memory_descriptor().buffer_descriptor.transport_endpoint_
           for d in reader.get_replica_desc(k) if d.is_memory_replica()][0]
    wait_until(lambda: holder.call("batch_replica_clear", keys=[k],
                                   segment_name=seg)["keys"] == [k],
               10.0, "the holder to clear its memory replica")
    assert kinds(reader, k) == ["disk"] and reader.get(k) == b"d" * 5000
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait(timeout=10)
    # the master expires it (--client_ttl) and forgets its disk replicas
    wait_until(lambda: reader.is_exist(k) == 0, 15.0, "the dead holder's object to go")
    assert reader.get(k) == b""


def test_master_without_enable_offload_takes_no_disk_replica(stores, tmp_path):
    m = Master()
    try:
        s = stores(m, tmp_path)
        k = key("off")
        assert s.put(k, b"x" * 4096) == 0
        wait_until(lambda: s.offload_stats().get("failed_keys", 0) >= 1, 10.0,
                   "the offload to be refused")
        assert kinds(s, k) == ["memory"]
    finally:
        m.stop()


def test_flags_refused_and_accepted():
    r = subprocess.run([master_bin(), "--offload_on_evict", "--port=0", "--metrics_port=0"],
                       capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "--offload_on_evict needs --enable_offload" in r.stderr
    r = subprocess.run([master_bin(), "--promotion_on_hit", "--port=0", "--metrics_port=0"],
                       capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "--promotion_on_hit needs --enable_offload" in r.stderr
    r = subprocess.run([master_bin(), "--enable_offload", "--promotion_on_hit",
                        "--promotion_admission_threshold=0", "--port=0", "--metrics_port=0"],
                       capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "promotion_admission_threshold" in r.stderr


@pytest.fixture
def promo_master(monkeypatch):
    # the holder's task executor polls the master this often
    monkeypatch.setenv("MC_TASK_POLL_INTERVAL_MS", "50")
    m = Master(extra_args=["--enable_offload", "--promotion_on_hit",
                           "--promotion_admission_threshold=3"])
    try:
        yield m
        assert m.alive(), "mooncake_master died:\n" + m.log_text()
    finally:
        m.stop()


def promoted(store, k):
    return "memory" in kinds(store, k)


def queue_promotion(store, master, k):
    """Read disk-only k up to the threshold (3; make_disk_only's look at its
    replicas was the first read, since every lookup counts): its promotion
    is queued by the last read and not before."""
    queued = master.metric("master_promotions_queued_total")
    assert store.get(k) != b""
    assert master.metric("master_promotions_queued_total") == queued, "queued below threshold"
    assert store.get(k) != b""
    assert master.metric("master_promotions_queued_total") == queued + 1


def test_disk_only_object_promoted_after_threshold_reads(promo_master, stores, tmp_path):
    s = stores(promo_master, tmp_path)
    k, v = key("promo"), os.urandom(300 * KiB)
    assert s.put(k, v) == 0
    wait_offloaded(s, k)
    make_disk_only(s, k)
    queue_promotion(s, promo_master, k)
    wait_until(lambda: promoted(s, k), 15.0, f"{k} to come back to memory")
    descs = s.get_replica_desc(k)
    assert [d.is_memory_replica() for d in descs] == [True, False], "memory is listed first"
    mem = descs[0].get_memory_descriptor().buffer_descriptor
    assert mem.transport_endpoint_ == s.get_hostname()
    assert s.get(k) == v
    assert promo_master.metric("master_promotions_total") == 1
    # in memory again, it can lose its memory copy again and be promoted again
    make_disk_only(s, k)
    queue_promotion(s, promo_master, k)
    wait_until(lambda: promoted(s, k), 15.0, f"{k} to come back to memory twice")
    assert s.get(k) == v
    assert promo_master.metric("master_promotions_total") == 2


def test_upsert_or_remove_racing_a_promotion_never_reads_stale_bytes(promo_master, stores,
                                                                      tmp_path):
    s = stores(promo_master, tmp_path)
    ka, kb, kc = key("race-up"), key("race-rm"), key("race-mark")
    old, new = os.urandom(64 * KiB), os.urandom(64 * KiB)
    for k in (ka, kb, kc):
        assert s.put(k, old) == 0
        wait_offloaded(s, k)
        make_disk_only(s, k)
    # the promotions of ka and kb are queued, then their objects change,
    # most often before the holder's executor (polling every 50 ms) runs them
    queue_promotion(s, promo_master, ka)
    queue_promotion(s, promo_master, kb)
    rcs = []
    # an upsert waits while a copy is reading the object (as for any copy task)
    wait_until(lambda: rcs.append(s.upsert(ka, new)) or
               rcs[-1] != ErrorCode.OBJECT_HAS_REPLICATION_TASK, 10.0, f"upsert of {ka}")
    assert rcs[-1] == 0, f"upsert returned {rcs[-1]}"
    assert s.remove(kb, force=True) == 0  # the reads leased it
    # the holder runs its tasks in order: once kc is back, ka's and kb's
    # promotions have been tried
    queue_promotion(s, promo_master, kc)
    wait_until(lambda: promoted(s, kc), 15.0, f"{kc} to come back to memory")
    assert s.get(ka) == new, "a promotion copied the old disk bytes over the upsert"
    assert s.is_exist(kb) == 0 and s.get(kb) == b"", "a promotion brought back a removed key"
    assert s.get(kc) == old


def test_tier_directory_serves_one_client(offload_master, stores, tmp_path):
    (tmp_path / "7.bucket").write_bytes(b"left by an earlier run")
    (tmp_path / "notes.txt").write_bytes(b"not ours")
    stores(offload_master, tmp_path)
    assert not (tmp_path / "7.bucket").exists(), "stale buckets are deleted at start"
    assert (tmp_path / "notes.txt").exists(), "other files are left alone"
    s2 = MooncakeDistributedStore()
    rc = s2.setup("localhost", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "",
                  offload_master.addr, None, enable_ssd_offload=True,
                  ssd_offload_path=str(tmp_path))
    assert rc == ErrorCode.INVALID_PARAMS
    assert s2.get_hostname() == ""
    rc = s2.setup("localhost", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "",
                  offload_master.addr, None, enable_ssd_offload=True,
                  ssd_offload_path="relative/dir")
    assert rc == ErrorCode.INVALID_PARAMS


def test_master_restart_restores_disk_replicas_of_holders_that_remount(stores, tmp_path,
                                                                        spawn_client):
    """--enable_snapshot_restore: the disk replicas of a holder that remounts
    within the grace period are restored (a disk-only object reads again
    once it is back); those of a holder that does not come back stay
    unread and go with it when the grace period ends."""
    from helpers import free_port
    ports = (free_port(), free_port(), free_port())
    args = ["--enable_offload", "--enable_snapshot=true",
            f"--snapshot_backup_dir={tmp_path / 'state'}", "--enable_snapshot_restore=true",
            "--snapshot_restore_grace_seconds=4"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    m = Master(args, ports=ports)
    try:
        s = stores(m, tmp_path / "a")
        ka, kb, kboth = key("back"), key("gone"), key("both")
        va, vboth = os.urandom(200 * KiB), os.urandom(100 * KiB)
        assert s.put(ka, va) == 0 and s.put(kboth, vboth) == 0
        wait_offloaded(s, ka)
        wait_offloaded(s, kboth)
        make_disk_only(s, ka)
        # a second holder, in its own process, that will not come back
        holder = spawn_client("holder")
        r = holder.call("setup", args=["localhost", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp",
                                       "", m.addr],
                        kwargs={"enable_ssd_offload": True,
                                "ssd_offload_path": str(tmp_path / "b")})
        assert r["rc"] == 0
        assert holder.call("put", key=kb, hex=(b"g" * 6000).hex(), preferred=r["hostname"])["rc"] == 0
        wait_offloaded(s, kb)
        wait_until(lambda: holder.call("batch_replica_clear", keys=[kb],
                                       segment_name=r["hostname"])["keys"] == [kb],
                   10.0, "the holder to clear its memory replica")
        assert kinds(s, kb) == ["disk"]
        assert m.metric("master_disk_replicas") == 3
        m.stop()
        holder.kill()  # while the master is down: it never remounts
        m = Master(args, ports=ports)
        # the holder that comes back remounts: its disk replicas read again
        wait_until(lambda: s.get(ka) == va, 20.0, "the restored disk-only object to read")
        assert kinds(s, ka) == ["disk"]
        assert kinds(s, kboth) == ["memory", "disk"] and s.get(kboth) == vboth
        # the other one's record is not read while it is away, and goes
        # with it at the end of the grace period
        assert s.get(kb) == b""
        wait_until(lambda: m.metric("master_disk_replicas") == 2, 20.0,
                   "the absent holder's disk replica to go after the grace period")
        assert s.is_exist(kb) == 0
    finally:
        m.stop()

# SPDX-License-Identifier: Apache-2.0
"""Disk-only objects read from another host, through their holder
(docs/tiers.md §4, DISK_READ in docs/protocol.md), with a real master, a
real holder with a tier in a temporary directory and real reader processes.

"Another host" is played two ways: a reader whose own file read is switched
off (MC_TEST_DISK_REMOTE_ONLY=1, a test-only switch), and, where the kernel
lets an unprivileged user do it, a reader in its own mount namespace with an
empty tmpfs over the tier directory, so the bucket files do not exist for it.

* get, get_batch and batch_get_into of disk-only objects return the bytes;
* a damaged record is a miss for the remote reader too;
* the holder answers DISK_READ only for a record it wrote and still holds,
  named exactly (file, offset, length, key, CRC): anything else is
  OBJECT_NOT_FOUND with no byte, never another offset or file, and the
  connection stays usable;
* a malformed DISK_READ closes the connection.
"""

import hashlib
import os
import re
import socket
import struct
import subprocess

import pytest

from helpers import ClientProc, MiB, RealClient, client_bin, wait_until
from test_tiers import (KiB, disk_desc, key, make_disk_only, offload_master,  # noqa: F401
                        stores, wait_offloaded)

OBJECT_NOT_FOUND = -704


def sha(b):
    return hashlib.sha256(b).hexdigest()


def disk_only_objects(s, sizes):
    """Put one object per size, wait for its disk copy, drop its memory."""
    items = [(key("rem"), os.urandom(n)) for n in sizes]
    for k, v in items:
        assert s.put(k, v) == 0
    for k, _ in items:
        wait_offloaded(s, k)
        make_disk_only(s, k)
    return items


def check_reader(reader, items):
    for k, v in items:
        r = reader.call("get", key=k)
        assert r["len"] == len(v) and r["sha256"] == sha(v), \
            f"{k}: the remote reader got {r['len']} bytes ({r.get('detail')})"
    keys = [k for k, _ in items]
    got = reader.call("get_batch", keys=keys)["hexes"]
    assert [sha(bytes.fromhex(h)) for h in got] == [sha(v) for _, v in items]
    r = reader.call("get_into_batch", keys=keys, sizes=[len(v) for _, v in items])
    assert r["ns"] == [len(v) for _, v in items]
    assert r["sha256s"] == [sha(v) for _, v in items]


def test_remote_reader_reads_through_the_holder(offload_master, stores, tmp_path,
                                                spawn_client):
    s = stores(offload_master, tmp_path)
    items = disk_only_objects(s, [1, 64 * KiB + 3, 1 * MiB, 1 * MiB + 17])
    reader = spawn_client("remote", env={"MC_TEST_DISK_REMOTE_ONLY": "1"})
    reader.setup(offload_master, segment=8 * MiB)
    check_reader(reader, items)
    # a damaged record: the holder's checks make it a miss, never bytes
    k, v = items[2]
    d = disk_desc(s, k)
    with open(d.file_path, "r+b") as f:
        at = d.offset + 24 + len(k) + 4321
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))
    r = reader.call("get", key=k)
    assert r["len"] == 0, "a damaged record must be a miss for a remote reader"
    assert "holder" in r["detail"], r["detail"]
    # the others still read
    assert reader.call("get", key=items[3][0])["sha256"] == sha(items[3][1])


def unshare_works():
    try:
        return subprocess.run(["unshare", "-rm", "true"], timeout=10,
                              stderr=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not unshare_works(),
                    reason="unprivileged user and mount namespaces are not available")
def test_reader_in_another_mount_namespace(offload_master, stores, tmp_path):
    s = stores(offload_master, tmp_path)
    items = disk_only_objects(s, [300 * KiB, 1 * MiB])
    # an empty tmpfs over the tier directory: the reader cannot see the files
    # (checked before the reader starts), so only the holder can serve them
    script = (f'mount -t tmpfs none "{tmp_path}" && '
              f'! ls "{tmp_path}"/*.bucket >/dev/null 2>&1 && exec "$@"')
    reader = ClientProc("elsewhere", prefix=["unshare", "-rm", "sh", "-c", script, "sh"])
    try:
        reader.setup(offload_master, segment=8 * MiB)
        check_reader(reader, items)
    finally:
        reader.stop()


# ---- the frame itself, sent by hand -----------------------------------------

def te_port(store):
    host, _, port = store.get_hostname().rpartition(":")
    return int(port)


def disk_read(sock, path, offset, length, k, crc):
    kb, pb = k.encode(), path.encode()
    hdr = struct.pack("<IBBHQQII", 0x4554434D, 1, 4, 0, offset, length, 0, 0)
    sock.sendall(hdr + struct.pack("<IHH", crc, len(kb), len(pb)) + kb + pb)
    resp = recv_exact(sock, 16)
    magic, status, n = struct.unpack("<IiQ", resp)
    assert magic == 0x5254434D
    return status, recv_exact(sock, n)


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        b = sock.recv(n - len(out))
        if not b:
            raise ConnectionError("closed")
        out += b
    return out


def test_holder_serves_only_its_own_records_exactly(offload_master, stores, tmp_path):
    s = stores(offload_master, tmp_path)
    (k, v), (k2, v2) = disk_only_objects(s, [200 * KiB, 100 * KiB])
    d, d2 = disk_desc(s, k), disk_desc(s, k2)
    # the CRC the master hands out is not in the Python descriptor: read it
    # from the record header, which the good request below proves right
    with open(d.file_path, "rb") as f:
        f.seek(d.offset + 16)
        crc = struct.unpack("<I", f.read(4))[0]
    outside = tmp_path / "other.bin"
    outside.write_bytes(os.urandom(len(v) + 4096))
    with socket.create_connection(("127.0.0.1", te_port(s)), timeout=10) as sock:
        bad = [
            (d.file_path, d.offset + 1, len(v), k, crc),         # not a record start
            (d.file_path, d.offset, len(v) - 1, k, crc),         # shorter than the record
            (d.file_path, d.offset, len(v) + 1, k, crc),         # longer than the record
            (d.file_path, d.offset, len(v), k, crc ^ 1),         # another CRC
            (d.file_path, d.offset, len(v), k2, crc),            # another key
            (d2.file_path, d2.offset, len(v), k, crc),           # another record's offset
            (str(outside), 0, 4096, k, crc),                     # not a bucket of the tier
            ("/etc/passwd", 0, 16, k, crc),
            (str(tmp_path / "999.bucket"), d.offset, len(v), k, crc),
            (str(tmp_path / "x" / ".." / os.path.basename(d.file_path)), d.offset, len(v),
             k, crc),
        ]
        for req in bad:
            status, payload = disk_read(sock, *req)
            assert status == OBJECT_NOT_FOUND and payload == b"", f"{req[:3]}: {status}"
        status, payload = disk_read(sock, d.file_path, d.offset, len(v), k, crc)
        assert status == 0 and payload == v
    # a malformed prefix (key length 0) closes the connection
    with socket.create_connection(("127.0.0.1", te_port(s)), timeout=10) as sock:
        hdr = struct.pack("<IBBHQQII", 0x4554434D, 1, 4, 0, 0, 16, 0, 0)
        sock.sendall(hdr + struct.pack("<IHH", 0, 0, 5) + b"/a/bc")
        try:
            got = sock.recv(16)
        except ConnectionResetError:  # closed with the body unread
            got = b""
        assert got == b"", "a malformed DISK_READ must close the connection"


def test_bucket_path_reused_by_a_new_tier_reads_the_new_file(offload_master, tmp_path):
    """Bucket files stay open in a per-process cache; a new client on the
    same directory deletes the old buckets and writes 1.bucket afresh, and
    a read through the stale cached fd must not turn into a miss."""
    from mooncake.store import MooncakeDistributedStore

    def tier_store():
        st = MooncakeDistributedStore()
        assert st.setup("localhost", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "",
                        offload_master.addr, None, enable_ssd_offload=True,
                        ssd_offload_path=str(tmp_path)) == 0
        return st

    s1 = tier_store()
    try:
        ((k1, v1),) = disk_only_objects(s1, [128 * KiB])
        assert s1.get(k1) == v1  # 1.bucket now open in this process's cache
        path1 = disk_desc(s1, k1).file_path
    finally:
        s1.close()
    s2 = tier_store()
    try:
        ((k2, v2),) = disk_only_objects(s2, [96 * KiB])
        assert disk_desc(s2, k2).file_path == path1, "the new tier reuses the path"
        assert s2.get(k2) == v2
    finally:
        s2.close()


# ---- mooncake_client --enable_offload ---------------------------------------

def daemon_disk_only(d, reader, n=2, size=200 * KiB):
    """Objects put through dummy client ``d`` of a mooncake_client with a
    tier: each reaches the daemon's disk, then loses its memory replica
    (which the master may have placed on any client's segment)."""
    items = []
    for i in range(n):
        k = key("daemon")
        r = d.call("put_random", key=k, size=size)
        assert r["rc"] == 0, r
        items.append((k, r["sha256"]))
    for k, _ in items:
        wait_offloaded(reader, k)
        seg = next(x.get_memory_descriptor().buffer_descriptor.transport_endpoint_
                   for x in reader.get_replica_desc(k) if x.is_memory_replica())
        # the reader's lookups lease the object; a clear waits them out
        wait_until(lambda: d.call("batch_replica_clear", keys=[k], segment_name=seg)["keys"]
                   == [k], 30, f"the memory replica of {k} to be cleared", interval=0.2)
        assert [x.is_local_disk_replica() for x in reader.get_replica_desc(k)] == [True]
    return items


def test_mooncake_client_runs_the_tier(offload_master, stores, tmp_path, spawn_client,
                                       monkeypatch):
    tier = tmp_path / "tier"
    tier.mkdir()
    rc = RealClient(offload_master, segment="16MB",
                    extra_args=["--enable_offload=true", f"--ssd_offload_path={tier}"])
    try:
        assert f"SSD tier on in {tier}" in rc.log_text()
        d = spawn_client("dummy")
        assert d.call("setup_dummy", pool=16 * MiB, lbuf=16 * MiB, addr=rc.addr)["rc"] == 0
        reader = stores(offload_master, None)
        segment = re.search(r"mooncake_client: (\S+) ready", rc.log_text()).group(1)
        items = daemon_disk_only(d, reader)
        for k, digest in items:
            desc = disk_desc(reader, k)
            assert os.path.dirname(desc.file_path) == str(tier)
            assert desc.transport_endpoint == segment
            assert sha(reader.get(k)) == digest  # this host: the file
        remote = spawn_client("remote", env={"MC_TEST_DISK_REMOTE_ONLY": "1"})
        remote.setup(offload_master, segment=4 * MiB)
        for k, digest in items:  # another host: the daemon's DISK_READ
            assert remote.call("get", key=k)["sha256"] == digest
        # and the dummy itself reads them back through its daemon
        for k, digest in items:
            assert d.call("get", key=k)["sha256"] == digest
    finally:
        rc.stop()


def test_mooncake_client_tier_directory_from_the_environment(offload_master, stores, tmp_path,
                                                             spawn_client, monkeypatch):
    monkeypatch.setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", str(tmp_path))
    rc = RealClient(offload_master, segment="16MB", extra_args=["--enable_offload=true"])
    try:
        assert f"SSD tier on in {tmp_path}" in rc.log_text()
        d = spawn_client("dummy")
        assert d.call("setup_dummy", pool=16 * MiB, lbuf=16 * MiB, addr=rc.addr)["rc"] == 0
        k = key("env")
        assert d.call("put_random", key=k, size=64 * KiB)["rc"] == 0
        reader = stores(offload_master, None)
        wait_offloaded(reader, k)
        assert os.path.dirname(disk_desc(reader, k).file_path) == str(tmp_path)
    finally:
        rc.stop()


@pytest.mark.parametrize("args, env, message", [
    (["--enable_offload=true", "--ssd_offload_path=/nonexistent/tier"], {},
     "flag '--enable_offload': cannot start the SSD tier in /nonexistent/tier"),
    (["--enable_offload=true", "--ssd_offload_path=relative"], {},
     "flag '--enable_offload': cannot start the SSD tier in relative"),
    (["--ssd_offload_path=/tmp"], {}, "flag '--ssd_offload_path': needs --enable_offload"),
    (["--start_offload_rpc_server=true"], {}, "flag '--start_offload_rpc_server'"),
    (["--enable_offload=true", "--start_offload_rpc_server=false"], {},
     "flag '--start_offload_rpc_server'"),
    (["--enable_offload=true"], {"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/nonexistent/env"},
     "cannot start the SSD tier in /nonexistent/env"),
    (["--enable_offload=true", "--ssd_offload_path=/tmp"], {"MOONCAKE_OFFLOAD_USE_URING": "1"},
     "MOONCAKE_OFFLOAD_USE_URING=\"1\": io_uring is not built"),
])
def test_mooncake_client_offload_refusals(offload_master, args, env, message):
    out = subprocess.run(
        [client_bin(), "--host=127.0.0.1", "--metadata_server=P2PHANDSHAKE",
         f"--master_server_address={offload_master.addr}", "--port=1",
         "--global_segment_size=4MB"] + args,
        capture_output=True, text=True, timeout=30, env=dict(os.environ, **env))
    assert out.returncode in (1, 2), out
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("name, value, ok", [
    ("MOONCAKE_OFFLOAD_USE_URING", "1", False),
    ("MOONCAKE_USE_URING", "true", False),
    ("MOONCAKE_OFFLOAD_USE_URING", "0", True),
    ("MOONCAKE_OFFLOAD_USE_URING", "", True),
])
def test_use_uring_refused_not_ignored(offload_master, tmp_path, monkeypatch, name, value, ok):
    from mooncake.store import MooncakeDistributedStore, last_error_detail

    monkeypatch.delenv("MOONCAKE_OFFLOAD_USE_URING", raising=False)
    monkeypatch.delenv("MOONCAKE_USE_URING", raising=False)
    monkeypatch.setenv(name, value)
    s = MooncakeDistributedStore()
    try:
        rc = s.setup("localhost", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "",
                     offload_master.addr, None, enable_ssd_offload=True,
                     ssd_offload_path=str(tmp_path))
        detail = last_error_detail()
        if ok:
            assert rc == 0, detail
        else:
            assert rc != 0, f"{name}={value} was accepted"
            assert name in detail, detail
    finally:
        s.close()

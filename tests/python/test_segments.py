# SPDX-License-Identifier: Apache-2.0
"""Segment mounting: mount_segment / unmount_segment (a /dev/shm file mapped
shared), allocate_and_mount_segment / unmount_and_free_segment, graceful
unmounts and init_all.

Placement is checked through the memory itself: a mounted file is mapped
MAP_SHARED, so an object the master placed in it shows up in the file's
bytes, and one placed elsewhere does not.  The store under test has no
segment of its own (global_segment_size 0), so a put with its hostname as
preferred_segment can only land in what it mounted; a second store in the
process gives the pool somewhere else to put objects.
"""

import hashlib
import mmap
import os
import socket
import struct
import time
import uuid

import pytest

from helpers import Master, MiB, wait_until

NOT_FOUND = -101
INVALID = -600
UNAVAILABLE = -1010
PAGE = mmap.PAGESIZE


@pytest.fixture
def shm():
    """``shm(nbytes)``: path of a fresh /dev/shm file of that size."""
    paths = []

    def make(nbytes: int) -> str:
        p = f"/dev/shm/mc-test-{uuid.uuid4().hex}"
        with open(p, "wb") as f:
            f.truncate(nbytes)
        paths.append(p)
        return p

    try:
        yield make
    finally:
        for p in paths:
            try:
                os.unlink(p)
            except OSError:
                pass


def _cfg(segment):
    from mooncake.store import ReplicateConfig
    cfg = ReplicateConfig()
    cfg.preferred_segment = segment
    return cfg


def _in_file(path, data):
    with open(path, "rb") as f:
        return data in f.read()


def test_mount_shm_file_places_objects_in_it(make_store, shm, spawn_client, master):
    st = make_store(segment=0)
    make_store(segment=16 * MiB)  # somewhere else for the pool
    path = shm(8 * MiB)
    r = st.mount_segment(path, 8 * MiB, offset=0, protocol="tcp", location="")
    assert r["ret"] == 0, r
    assert len(r["segment_ids"]) == 1
    uuid.UUID(r["segment_ids"][0])  # UUID text

    payload = os.urandom(64 * 1024)
    key = f"seg-{uuid.uuid4().hex}"
    assert st.put(key, payload, _cfg(st.get_hostname())) == 0
    assert _in_file(path, payload), "the object did not land in the mounted file"
    descs = st.get_replica_desc(key)
    assert len(descs) == 1
    assert descs[0].get_memory_descriptor().buffer_descriptor.transport_endpoint_ == \
        st.get_hostname()

    # readable from another process, through our transfer engine
    other = spawn_client("reader")
    other.setup(master, segment=0)
    got = other.call("get", key=key)
    assert got["len"] == len(payload)
    assert got["sha256"] == hashlib.sha256(payload).hexdigest()

    assert st.unmount_segment(r["segment_ids"]) == 0
    assert st.is_exist(key) == 0
    # the preferred segment is gone: the put lands on the other store's
    assert st.put(f"k-{uuid.uuid4().hex}", b"x" * 100, _cfg(st.get_hostname())) == 0
    assert st.unmount_segment(r["segment_ids"]) == NOT_FOUND


def test_mount_at_offset(make_store, shm):
    st = make_store(segment=0)
    path = shm(4 * MiB)
    r = st.mount_segment(path, 2 * MiB, offset=2 * MiB)
    assert r["ret"] == 0, r
    payload = os.urandom(8192)
    key = f"off-{uuid.uuid4().hex}"
    assert st.put(key, payload, _cfg(st.get_hostname())) == 0
    with open(path, "rb") as f:
        data = f.read()
    assert payload not in data[:2 * MiB]
    assert payload in data[2 * MiB:]
    assert st.get(key) == payload
    assert st.unmount_segment(r["segment_ids"]) == 0


def test_graceful_unmount(make_store, shm, spawn_client, master):
    st = make_store(segment=0)
    make_store(segment=16 * MiB)
    path = shm(8 * MiB)
    r = st.mount_segment(path, 8 * MiB)
    assert r["ret"] == 0, r
    old = os.urandom(32 * 1024)
    old_key = f"old-{uuid.uuid4().hex}"
    assert st.put(old_key, old, _cfg(st.get_hostname())) == 0
    assert _in_file(path, old)

    other = spawn_client("reader")
    other.setup(master, segment=0)

    assert st.unmount_segment(r["segment_ids"], grace_period_seconds=3) == 0
    # during the grace period: old objects readable, new ones go elsewhere
    assert st.get(old_key) == old
    assert other.call("get", key=old_key)["sha256"] == hashlib.sha256(old).hexdigest()
    for i in range(8):
        new = os.urandom(16 * 1024)
        k = f"new-{i}-{uuid.uuid4().hex}"
        assert st.put(k, new, _cfg(st.get_hostname())) == 0
        assert not _in_file(path, new), "a new object landed in a draining segment"
        ep = st.get_replica_desc(k)[0].get_memory_descriptor().buffer_descriptor
        assert ep.transport_endpoint_ != st.get_hostname()
    assert st.get(old_key) == old

    # after it: unmounted, its objects are gone
    wait_until(lambda: st.is_exist(old_key) == 0, 15, "the drained segment to go")
    assert other.call("exist", key=old_key)["rc"] == 0
    assert st.unmount_segment(r["segment_ids"]) == NOT_FOUND


def test_unmount_past_the_grace_period_is_not_found(make_store, shm, monkeypatch):
    """Once a graceful unmount's grace period is over the segment is
    unmounted, whether or not the heartbeat has dropped it yet: a second
    unmount says NOT_FOUND (and does not unmount it a second time).  The
    heartbeat runs every 5 s here, so the second unmount comes between the
    deadline and the reaper; a client TTL of 30 s keeps the master from
    expiring the client meanwhile."""
    m = Master(extra_args=["--client_ttl=30"])
    try:
        monkeypatch.setenv("MC_STORE_HEARTBEAT_MS", "5000")
        st = make_store(segment=0, m=m)
        path = shm(4 * MiB)
        r = st.mount_segment(path, 4 * MiB)
        assert r["ret"] == 0, r
        t0 = time.monotonic()
        assert st.unmount_segment(r["segment_ids"], grace_period_seconds=1) == 0
        time.sleep(max(0.0, t0 + 1.2 - time.monotonic()))  # the grace period runs out
        assert st.unmount_segment(r["segment_ids"]) == NOT_FOUND
        assert st.unmount_segment(r["segment_ids"], grace_period_seconds=1) == NOT_FOUND
    finally:
        m.stop()


def test_allocate_and_mount_round_trip(make_store):
    st = make_store(segment=0)
    r = st.allocate_and_mount_segment(5000, protocol="tcp", location="")
    assert r["ret"] == 0, r
    assert r["allocated_size"] == (5000 + PAGE - 1) // PAGE * PAGE
    assert len(r["segment_ids"]) == 1
    payload = os.urandom(3000)
    key = f"alloc-{uuid.uuid4().hex}"
    assert st.put(key, payload, _cfg(st.get_hostname())) == 0
    assert st.get(key) == payload
    ep = st.get_replica_desc(key)[0].get_memory_descriptor().buffer_descriptor
    assert ep.transport_endpoint_ == st.get_hostname()
    assert st.unmount_and_free_segment(r["segment_ids"]) == 0
    assert st.is_exist(key) == 0
    assert st.unmount_and_free_segment(r["segment_ids"]) == NOT_FOUND

    # graceful variant
    r = st.allocate_and_mount_segment(MiB)
    assert r["ret"] == 0 and r["allocated_size"] == MiB
    key = f"alloc2-{uuid.uuid4().hex}"
    assert st.put(key, payload, _cfg(st.get_hostname())) == 0
    assert st.unmount_and_free_segment(r["segment_ids"], grace_period_seconds=1) == 0
    assert st.get(key) == payload
    wait_until(lambda: st.is_exist(key) == 0, 15, "the freed segment to go")


def test_unmount_and_free_refuses_file_segments(make_store, shm):
    st = make_store(segment=0)
    path = shm(MiB)
    r = st.mount_segment(path, MiB)
    assert r["ret"] == 0
    a = st.allocate_and_mount_segment(MiB)
    assert a["ret"] == 0
    # all or nothing: the allocated one is not unmounted either
    assert st.unmount_and_free_segment(a["segment_ids"] + r["segment_ids"]) == INVALID
    key = f"keep-{uuid.uuid4().hex}"
    assert st.put(key, b"v" * 100, _cfg(st.get_hostname())) == 0
    assert st.unmount_segment(r["segment_ids"] + a["segment_ids"]) == 0
    assert st.is_exist(key) == 0


def test_bad_arguments(make_store, shm, tmp_path):
    st = make_store(segment=0)
    path = shm(MiB)
    bad = {"ret": INVALID, "segment_ids": []}
    assert st.mount_segment(path, MiB, offset=100) == bad          # unaligned
    assert st.mount_segment(path, 0) == bad                        # empty
    assert st.mount_segment(path, 2 * MiB) == bad                  # file too short
    assert st.mount_segment(path, MiB, offset=PAGE) == bad         # runs past the end
    assert st.mount_segment(path, -1) == bad
    assert st.mount_segment(path, MiB, offset=-PAGE) == bad
    assert st.mount_segment(path, 1 << 64) == bad
    assert st.mount_segment(f"/dev/shm/missing-{uuid.uuid4().hex}", MiB) == bad
    assert st.mount_segment("", MiB) == bad
    assert st.mount_segment(str(tmp_path), MiB) == bad             # a directory
    assert st.mount_segment("/dev/zero", MiB) == bad               # not a regular file
    assert st.mount_segment(path, MiB, protocol="rdma") == bad
    assert st.mount_segment(path + "\0x", MiB) == bad
    with pytest.raises(TypeError):
        st.mount_segment(path, "1MB")
    assert st.allocate_and_mount_segment(0)["ret"] == INVALID
    assert st.allocate_and_mount_segment(-5)["ret"] == INVALID
    assert st.allocate_and_mount_segment(1 << 63)["ret"] < 0
    assert st.unmount_segment(["not-a-uuid"]) == INVALID
    assert st.unmount_segment([str(uuid.uuid4())]) == NOT_FOUND
    assert st.unmount_segment([]) == 0
    assert st.unmount_segment(["x"], grace_period_seconds=-1) == INVALID
    with pytest.raises(TypeError):
        st.unmount_segment([1])
    # nothing was mounted by any of that
    k = f"none-{uuid.uuid4().hex}"
    if st.put(k, b"x", _cfg(st.get_hostname())) == 0:
        ep = st.get_replica_desc(k)[0].get_memory_descriptor().buffer_descriptor
        assert ep.transport_endpoint_ != st.get_hostname()
    ok = st.mount_segment(path, MiB, offset=0, protocol="", location="cpu:0")
    assert ok["ret"] == 0
    assert st.unmount_segment(ok["segment_ids"][0]) == 0  # one id as a str


def test_before_setup_and_init_all(make_store):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.init_all("tcp", "") == UNAVAILABLE
    assert s.allocate_and_mount_segment(MiB)["ret"] == UNAVAILABLE
    assert s.mount_segment("/dev/shm/x", MiB)["ret"] == UNAVAILABLE
    assert s.unmount_segment([str(uuid.uuid4())]) == UNAVAILABLE

    st = make_store(segment=0)
    assert st.init_all("rdma", "") == INVALID
    assert st.init_all("tcp", "", mount_segment_size=4 * MiB) == 0
    payload = os.urandom(MiB)
    key = f"init-{uuid.uuid4().hex}"
    assert st.put(key, payload, _cfg(st.get_hostname())) == 0
    ep = st.get_replica_desc(key)[0].get_memory_descriptor().buffer_descriptor
    assert ep.transport_endpoint_ == st.get_hostname()
    assert st.get(key) == payload


def test_close_with_draining_segment(make_store, shm):
    st = make_store(segment=0)
    path = shm(MiB)
    r = st.mount_segment(path, MiB)
    assert r["ret"] == 0
    assert st.unmount_segment(r["segment_ids"], grace_period_seconds=600) == 0
    assert st.close() == 0  # unmaps it without waiting
    assert st.unmount_segment(r["segment_ids"]) == UNAVAILABLE


def _rpc(s, opcode, body, request_id=1):
    s.sendall(struct.pack("<IBBHII", 0x5052434D, 1, 0, opcode, request_id, len(body)) + body)
    hdr = b""
    while len(hdr) < 16:
        chunk = s.recv(16 - len(hdr))
        if not chunk:
            return None
        hdr += chunk
    _, _, flags, op, rid, n = struct.unpack("<IBBHII", hdr)
    assert (flags, op, rid) == (1, opcode, request_id)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        assert chunk
        body += chunk
    return struct.unpack("<i", body[:4])[0]


def _uuid(text):
    h = uuid.UUID(text).hex
    return struct.pack("<QQ", int(h[:16], 16), int(h[16:], 16))


def test_set_segment_draining_on_the_wire(make_store, master):
    """SET_SEGMENT_DRAINING (opcode 40) from a client that does not own the
    segment is ILLEGAL_CLIENT and changes nothing; an unknown id is
    SEGMENT_NOT_FOUND; a short body closes the connection."""
    st = make_store(segment=0)
    r = st.allocate_and_mount_segment(MiB)
    assert r["ret"] == 0
    sid = r["segment_ids"][0]
    intruder = _uuid(str(uuid.uuid4()))
    port = master.addr.rsplit(":", 1)[1]
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
        hello = struct.pack("<I", 1) + intruder + struct.pack("<I", 0)
        assert _rpc(s, 1, hello) == 0
        assert _rpc(s, 40, intruder + _uuid(sid), 2) == -601
        assert _rpc(s, 40, intruder + _uuid(str(uuid.uuid4())), 3) == NOT_FOUND
        assert _rpc(s, 40, intruder, 4) is None  # body too short: dropped
    # still taking objects: the intruder did not drain it
    key = f"wire-{uuid.uuid4().hex}"
    assert st.put(key, b"v" * 1000, _cfg(st.get_hostname())) == 0
    ep = st.get_replica_desc(key)[0].get_memory_descriptor().buffer_descriptor
    assert ep.transport_endpoint_ == st.get_hostname()

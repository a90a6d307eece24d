# SPDX-License-Identifier: Apache-2.0
"""Remounting: a restarted master, or one that expired a stalled client,
answers the client's next heartbeat NEED_REMOUNT, and the client publishes
its transfer-engine metadata again and mounts every segment it holds again
(docs/protocol.md §5.2, §5.3).

Everything runs as real processes: mooncake_master, and store clients in
their own processes (client_proc.py, with the two segment mounting calls
added).  Client A contributes three segments: the global segment of
setup(), one from allocate_and_mount_segment and one from mount_segment (a
/dev/shm file, so an object placed in it shows up in the file's bytes).
Client B has no segment of its own (global_segment_size 0), so every object
it puts must land in one of A's segments.  Both metadata modes run: P2P
handshake, and the master's embedded HTTP metadata server, which a restart
empties too.

* A master restart (SIGKILL, and SIGTERM) on the same ports starts empty:
  the old keys are gone.  Within a bounded deadline A's three segments are
  mounted again with the same ids and sizes (/get_all_segments, /metrics),
  each client remounts exactly once, and new puts by B land in every one
  of A's segments and read back from A and B; a client that arrives after
  the restart (C) reaches A's segments too.
* The remount comes on the first heartbeat after the restart: the dead
  connection of the previous tick is replaced at once, not a tick later.
* A client stopped (SIGSTOP) for longer than --client_ttl is expired: its
  segments, their objects and (--enable_metadata_cleanup_on_timeout) its
  metadata disappear; after SIGCONT its next heartbeat is answered
  NEED_REMOUNT, and segments, metadata and puts come back.

How long the remount takes is printed ("remount after ...", run with -s).
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from helpers import (CLIENT_TTL_S, LEASE_TTL_MS, MiB, ClientProc, Master,
                     free_port, wait_until)

#: The heartbeat ticks every second and a remount comes on the first tick
#: that reaches the master (under 1 s here), so this is generous even on a
#: loaded two-core machine.
REMOUNT_DEADLINE_S = 20.0
#: Sizes of A's segments: setup's global segment, allocate_and_mount_segment
#: and mount_segment (a /dev/shm file).
GLOBAL_SEG = 16 * MiB
ALLOC_SEG = 8 * MiB
FILE_SEG = 4 * MiB
OBJ = 64 * 1024

# client_proc.py with the segment mounting calls added: the module's
# dispatcher is wrapped, so every other op behaves exactly as there.
_LAUNCHER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import client_proc

_base = client_proc.handle


def handle(store, req):
    op = req["op"]
    if op == "mount_segment":
        return store.mount_segment(req["path"], req["size"], req.get("offset", 0))
    if op == "allocate_and_mount_segment":
        return store.allocate_and_mount_segment(req["size"])
    return _base(store, req)


client_proc.handle = handle
client_proc.main()
"""


class MountingClient(ClientProc):
    """A :class:`ClientProc` that can also mount segments."""

    def __init__(self, name, env=None):
        super().__init__(name, env, launcher=_LAUNCHER)

    def stop(self) -> None:
        # a stopped process reads no "exit"; let it run to hear it
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        super().stop()


class PortMaster(Master):
    """A :class:`Master` on given ports that can also be stopped with a
    chosen signal."""

    def __init__(self, port: int, http_port: int, metrics_port: int, extra_args=(),
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        super().__init__(list(extra_args), lease_ttl_ms, (port, http_port, metrics_port))

    def end(self, sig: int) -> None:
        """Stop with ``sig`` (SIGKILL: a crash; SIGTERM: an orderly exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if sig == signal.SIGTERM:
            assert self.proc.returncode == 0, self.log_text()
        self.stop()


class Cluster:
    """One master at a time on fixed ports, plus the client processes."""

    def __init__(self) -> None:
        self.ports = (free_port(), free_port(), free_port())
        self.master_args = []
        self.master = None
        self.clients = []
        self.shm_paths = []

    def start_master(self) -> PortMaster:
        self.master = PortMaster(*self.ports, extra_args=self.master_args)
        return self.master

    def client(self, name: str, env=None) -> MountingClient:
        c = MountingClient(name, env)
        self.clients.append(c)
        return c

    def shm(self, nbytes: int) -> str:
        p = f"/dev/shm/mc-test-{uuid.uuid4().hex}"
        self.shm_paths.append(p)
        with open(p, "wb") as f:
            f.truncate(nbytes)
        return p

    def close(self) -> None:
        for c in self.clients:
            c.stop()
        if self.master is not None:
            self.master.stop()
        for p in self.shm_paths:
            try:
                os.unlink(p)
            except OSError:
                pass


@pytest.fixture
def cluster():
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


# ---- the admin server -------------------------------------------------------

def _get(master, path):
    url = f"http://127.0.0.1:{master.metrics_port}{path}"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200, (path, r.status)
        return r.read()


def metrics(master):
    """{name: value} of the unlabelled samples of /metrics."""
    out = {}
    for line in _get(master, "/metrics").decode().splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def segments_of(master, name):
    """{segment id: size} of the segments named ``name`` on the master."""
    return {s["id"]: s["size"] for s in json.loads(_get(master, "/get_all_segments"))
            if s["name"] == name}


def used_of(master, ids):
    """{segment id: bytes allocated} for ``ids``."""
    return {s["id"]: s["used"] for s in json.loads(_get(master, "/get_all_segments"))
            if s["id"] in ids}


# ---- the scenario -----------------------------------------------------------

def meta_published(master, name):
    """Whether the master's metadata server holds the descriptor of ``name``."""
    url = f"http://127.0.0.1:{master.http_port}/metadata?key=mooncake/ram/{name}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status == 200 and json.loads(r.read())["name"] == name
    except urllib.error.HTTPError as e:
        assert e.code == 404, e
        return False


def start_a_and_b(cluster, metadata):
    """A with three segments, B with none; returns (a, b, A's segment name,
    {segment id: size} of A's segments, the mounted file)."""
    m = cluster.master
    a = cluster.client("A")
    a_name = a.setup(m, metadata=metadata, segment=GLOBAL_SEG)
    r = a.call("allocate_and_mount_segment", size=ALLOC_SEG)
    assert r["ret"] == 0, r
    alloc_id = r["segment_ids"][0]
    path = cluster.shm(FILE_SEG)
    r = a.call("mount_segment", path=path, size=FILE_SEG)
    assert r["ret"] == 0, r
    file_id = r["segment_ids"][0]
    b = cluster.client("B")
    b.setup(m, metadata=metadata, segment=0)

    segs = segments_of(m, a_name)
    assert len(segs) == 3, segs
    assert segs[alloc_id] == ALLOC_SEG and segs[file_id] == FILE_SEG, segs
    assert sorted(segs.values()) == sorted([GLOBAL_SEG, ALLOC_SEG, FILE_SEG]), segs
    # B is known once its first heartbeat remounted its (empty) segment list
    wait_until(lambda: remount_count(m) >= 1 and metrics(m)["master_active_clients"] == 2,
               REMOUNT_DEADLINE_S, "B to be known to the master")
    return a, b, a_name, segs, path


def put_by(writer, readers, key):
    """``writer`` puts a fresh object; every reader reads it back.  Returns
    the payload."""
    payload = os.urandom(OBJ)
    r = writer.call("put", key=key, hex=payload.hex())
    assert r["rc"] == 0, (writer.name, r)
    want = hashlib.sha256(payload).hexdigest()
    for c in readers:
        got = c.call("get", key=key)
        assert got["len"] == OBJ and got["sha256"] == want, (c.name, got)
    return payload


def fill_every_segment(master, a, b, segs, path, tag):
    """Put objects from B (no segment: each lands in one of A's) until each
    of A's segments holds one.  Placement starts from a random segment, so
    all three get one within a few puts (60 puts leave one out with
    p ~ 1e-10).  The file segment is the file's bytes: an object placed
    there must show up in the file, which proves the master's idea of the
    remounted segment (its base) is the client's."""
    payloads = []

    def in_file():
        data = Path(path).read_bytes()
        return any(p in data for p in payloads)

    # "used" counts a writer's put reservation too (docs/protocol.md §5.16),
    # so the file's own object is waited for as well
    for i in range(60):
        payloads.append(put_by(b, (a, b), f"{tag}-{i}-{uuid.uuid4().hex}"))
        if all(v > 0 for v in used_of(master, segs).values()) and in_file():
            break
    used = used_of(master, segs)
    assert set(used) == set(segs) and all(v > 0 for v in used.values()), used
    assert in_file(), "no object landed in the mounted file"


def remount_count(master):
    return metrics(master)["master_remount_segments_requests_total"]


def wait_remounted(master, a_name, segs, since):
    """Poll until A's segments are all mounted again; returns the seconds
    from ``since`` (monotonic) until they were."""
    wait_until(lambda: segments_of(master, a_name) == segs, REMOUNT_DEADLINE_S,
               f"{a_name}'s segments {segs} to be remounted")
    return time.monotonic() - since


def check_capacity(master, segs, clients):
    """The master's gauges: exactly A's segments and their full capacity
    (B has none), and every client alive."""
    got = metrics(master)
    assert got["master_mounted_segments"] == len(segs), got
    assert got["master_total_capacity_bytes"] == sum(segs.values()), got
    assert got["master_active_clients"] == clients, got


def old_keys(a, b, n=4):
    """A puts ``n`` keys (they land in its own segments); B reads them."""
    keys = []
    for i in range(n):
        keys.append(f"old-{i}-{uuid.uuid4().hex}")
        put_by(a, (b,), keys[-1])
    return keys


def check_puts_work(cluster, a, b, a_name, segs, path, metadata, tag):
    """After a remount: B's puts land in every one of A's segments, also
    with A as preferred segment; A's own puts are readable by B; and a
    client set up only now (it has never talked to A, so it needs A's
    metadata) writes into A's segments and reads back."""
    m = cluster.master
    fill_every_segment(m, a, b, segs, path, tag)
    payload = os.urandom(OBJ)
    key = f"{tag}-pref-{uuid.uuid4().hex}"
    assert b.call("put", key=key, hex=payload.hex(), preferred=a_name)["rc"] == 0
    assert a.call("get", key=key)["sha256"] == hashlib.sha256(payload).hexdigest()
    put_by(a, (b,), f"{tag}-by-a-{uuid.uuid4().hex}")
    c = cluster.client("C")
    c.setup(m, metadata=metadata, segment=0)
    put_by(c, (a, b, c), f"{tag}-by-c-{uuid.uuid4().hex}")
    put_by(b, (c,), f"{tag}-for-c-{uuid.uuid4().hex}")


METADATA = pytest.mark.parametrize("metadata", ["P2PHANDSHAKE", "http"], ids=["p2p", "http"])


@METADATA
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_master_restart_remounts_every_segment(cluster, sig, metadata):
    m = cluster.start_master()
    a, b, a_name, segs, path = start_a_and_b(cluster, metadata)
    keys = old_keys(a, b)

    m.end(sig)
    m = cluster.start_master()
    up = time.monotonic()

    # A restarted master starts empty: the old objects are gone for good.
    for k in keys:
        for c in (a, b):
            assert c.call("exist", key=k)["rc"] == 0, (c.name, k)
            got = c.call("get", key=k)
            assert got["len"] == 0, (c.name, k, got)

    took = wait_remounted(m, a_name, segs, up)
    print(f"\nremount after {signal.Signals(sig).name} ({metadata}): {took:.3f} s after the "
          "new master accepted connections")
    if metadata == "http":
        assert meta_published(m, a_name)
    # One REMOUNT_SEGMENTS per client (B's lists no segment), not one per tick.
    wait_until(lambda: remount_count(m) == 2, REMOUNT_DEADLINE_S, "B's remount")
    check_capacity(m, segs, clients=2)
    check_puts_work(cluster, a, b, a_name, segs, path, metadata, "new")
    # and C's first heartbeat (C has no segment either); nobody remounts twice
    wait_until(lambda: remount_count(m) == 3, REMOUNT_DEADLINE_S, "C's remount")


def test_remount_on_first_heartbeat_after_restart(cluster):
    """The heartbeat's connection died with the old master; the first tick
    after the restart must not just discover that and wait for the next
    one.  With a 3 s heartbeat, killing the master right after A's ping
    and restarting it at once, the remount is due one tick (3 s) after
    that ping; a client that needed a second tick would take 6 s."""
    tick = 3.0
    m = cluster.start_master()
    a = cluster.client("A", env={"MC_STORE_HEARTBEAT_MS": str(int(tick * 1000))})
    a_name = a.setup(m, segment=GLOBAL_SEG)
    segs = segments_of(m, a_name)
    assert len(segs) == 1, segs

    pings = metrics(m)["master_ping_requests_total"]
    wait_until(lambda: metrics(m)["master_ping_requests_total"] > pings, 2 * tick + 5,
               "A's next heartbeat")
    pinged = time.monotonic()
    m.end(signal.SIGKILL)
    m = cluster.start_master()
    restarted = time.monotonic() - pinged
    assert restarted < tick - 0.5, f"the restart took {restarted:.1f} s; the test needs it quick"
    took = wait_remounted(m, a_name, segs, pinged)
    print(f"\nremount {took:.3f} s after the last ping to the old master (heartbeat {tick} s)")
    assert took < 1.5 * tick, f"remounted {took:.2f} s after the last ping: a tick late"


@METADATA
def test_expired_client_remounts(cluster, metadata):
    cluster.master_args = ["--enable_metadata_cleanup_on_timeout=true"]
    m = cluster.start_master()
    a, b, a_name, segs, path = start_a_and_b(cluster, metadata)
    keys = old_keys(a, b)
    before = remount_count(m)
    if metadata == "http":
        assert meta_published(m, a_name)

    os.kill(a.pid, signal.SIGSTOP)
    try:
        # No heartbeat from A: the master expires it after --client_ttl.
        wait_until(lambda: not segments_of(m, a_name), CLIENT_TTL_S + REMOUNT_DEADLINE_S,
                   f"{a_name}'s segments to expire")
        stopped = metrics(m)
        assert stopped["master_mounted_segments"] == 0, stopped
        assert stopped["master_total_capacity_bytes"] == 0, stopped
        assert stopped["master_active_clients"] == 1, stopped
        for k in keys:
            assert b.call("exist", key=k)["rc"] == 0, k
        if metadata == "http":
            assert not meta_published(m, a_name), "the expired client's metadata stayed"
        # nowhere to put anything now
        assert b.call("put", key=f"none-{uuid.uuid4().hex}", hex="00" * 64)["rc"] != 0
    finally:
        os.kill(a.pid, signal.SIGCONT)
    resumed = time.monotonic()

    took = wait_remounted(m, a_name, segs, resumed)
    print(f"\nremount after expiry ({metadata}): {took:.3f} s after SIGCONT")
    assert remount_count(m) == before + 1
    if metadata == "http":
        assert meta_published(m, a_name)
    check_capacity(m, segs, clients=2)
    for k in keys:  # a remount mounts empty segments
        assert a.call("exist", key=k)["rc"] == 0, k
    check_puts_work(cluster, a, b, a_name, segs, path, metadata, "back")
    # and C's first heartbeat; nobody remounts twice
    wait_until(lambda: remount_count(m) == before + 2, REMOUNT_DEADLINE_S, "C's remount")

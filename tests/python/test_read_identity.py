# SPDX-License-Identifier: Apache-2.0
"""A get returns the bytes of the value it names, as of the moment it is
asked, or nothing: never another value's bytes, never a value that
another client has already replaced or removed, and a removed value's
space is the user's again as soon as the remove returns.

Real processes: a mooncake_master on loopback ports and store clients in
their own processes (client_proc.py).  The *holder* H keeps the segment;
the reader R and the writer W have none, so every byte R reads comes from
H's memory, found through what R knows of the key's location (the
location cache, docs/architecture.md).

* **Restart** (non-durable and durable master): R reads A; the master is
  killed with SIGKILL and started again at once on the same ports; H
  (heartbeat 100 ms) remounts, and writes B, of A's size, into its own
  segment, where A's range is free in the new master's eyes (the durable
  master restores A, so H first removes it with force: the restored
  master knows no lease on it).  R (heartbeat 5 s: it has not heard of
  the restart) reads A again: A's bytes or nothing, never B's.  200
  rounds, each on an emptied segment, so that B lands in A's range.
* **Forced remove**: R reads A, H removes A with force and writes B of
  the same size; R reads A: nothing (the remove has returned), never A's
  old bytes, never B's.
* **Another client's upsert** (same size and another size): R reads k, W
  upserts k, R reads k at once and gets the new value, every time.
* **A forced remove frees the space at once**: the writer fills most of
  H's 64 MiB segment, the reader reads every value (so it holds leases of
  the default length), the writer calls remove_all(force=True) and at
  once writes the same keys again (in reverse order, new bytes): every put
  succeeds and the reader reads every new value back, with the bytes API
  and with batch_put_from / batch_get_into on registered buffers.

Every wait is bounded (helpers.wait_until); nothing sleeps for a lease.
"""

import json
import os
import time
import urllib.request
import uuid

import pytest

from helpers import MiB, ClientProc, Master, free_port, wait_until

#: The master's read lease here: the default of --default_kv_lease_ttl, so
#: a reader's lease (and its cached location) outlives every step below.
LEASE_TTL_MS = 10000

SHA_EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

# client_proc.py plus zero-copy calls on one registered buffer per size.
_LAUNCHER = r"""
import hashlib, os, sys
sys.path.insert(0, sys.argv[1])
import client_proc
import numpy as np

_base = client_proc.handle
_bufs = {}


def regbuf(store, nbytes):
    arr = _bufs.get(nbytes)
    if arr is None:
        arr = np.zeros(nbytes, dtype=np.uint8)
        rc = store.register_buffer(arr.ctypes.data, nbytes)
        if rc != 0:
            raise RuntimeError(f"register_buffer -> {rc}")
        _bufs[nbytes] = arr
    return arr


def handle(store, req):
    op = req["op"]
    if op == "zc_put":
        # batch_put_from of len(keys) fresh random values of `size` bytes
        keys, size = req["keys"], req["size"]
        arr = regbuf(store, size * len(keys))
        arr[:] = np.frombuffer(os.urandom(arr.nbytes), dtype=np.uint8)
        ptrs = [arr.ctypes.data + i * size for i in range(len(keys))]
        rcs = store.batch_put_from(keys, ptrs, [size] * len(keys), client_proc.config_for(req))
        return {"rcs": rcs, "sha256s": [hashlib.sha256(arr[i * size:(i + 1) * size]).hexdigest()
                                        for i in range(len(keys))]}
    if op == "zc_get":
        # batch_get_into of the keys into slots of `size` bytes of a zeroed
        # registered buffer: per key the answer and the digest of the bytes
        # it says were read
        keys, size = req["keys"], req["size"]
        arr = regbuf(store, size * len(keys))
        arr[:] = 0
        ptrs = [arr.ctypes.data + i * size for i in range(len(keys))]
        ns = store.batch_get_into(keys, ptrs, [size] * len(keys))
        return {"ns": ns, "sha256s": [hashlib.sha256(arr[i * size:i * size + max(n, 0)])
                                      .hexdigest() for i, n in enumerate(ns)]}
    return _base(store, req)


client_proc.handle = handle
client_proc.main()
"""


class ZcClient(ClientProc):
    """A :class:`ClientProc` that can also write and read through
    registered buffers (ops zc_put, zc_get)."""

    def __init__(self, name, env=None):
        super().__init__(name, env, launcher=_LAUNCHER)


def segments(master):
    url = f"http://127.0.0.1:{master.metrics_port}/get_all_segments"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def mounted(master, name):
    try:
        return any(s["name"] == name and s["status"] == "OK" for s in segments(master))
    except OSError:
        return False


def remove_all(c):
    r = c.call("invoke", method="remove_all", kwargs={"force": True})
    assert isinstance(r["ret"], int) and r["ret"] >= 0, r
    return r["ret"]


def judge(got, values):
    """Which of ``values`` ({name: sha256}) a get returned: its name,
    "nothing" for an empty answer, or "garbage"."""
    if got["len"] == 0:
        return "nothing"
    for name, sha in values.items():
        if got["sha256"] == sha:
            return name
    return "garbage"


# ---- a: the bytes of a cached location after a restart or a forced remove ----

VALUE = 64 * 1024
ROUNDS = 200


class Restarts:
    """One master at a time on fixed ports (durable or not), a holder and a
    reader, all stopped at the end."""

    def __init__(self, tmp, durable):
        self.ports = (free_port(), free_port(), free_port())
        self.args = []
        if durable:
            self.args = ["--enable_snapshot=true", f"--snapshot_backup_dir={tmp / 'state'}",
                         "--enable_snapshot_restore=true"]
        self.master = None
        self.clients = []

    def start(self):
        self.master = Master(self.args, lease_ttl_ms=LEASE_TTL_MS, ports=self.ports)
        return self.master

    def kill(self):
        self.master.kill()
        self.master.stop()
        self.master = None

    def client(self, name, heartbeat_ms):
        c = ClientProc(name, env={"MC_STORE_HEARTBEAT_MS": str(heartbeat_ms)})
        self.clients.append(c)
        return c

    def close(self):
        for c in self.clients:
            c.stop()
        if self.master is not None:
            self.master.stop()


@pytest.mark.parametrize("how", ["restart", "durable_restart", "forced_remove"])
def test_cached_location_never_reads_another_value(tmp_path, how):
    rs = Restarts(tmp_path, durable=(how == "durable_restart"))
    try:
        m = rs.start()
        h = rs.client("holder", 20)
        hname = h.setup(m, segment=16 * MiB)
        r = rs.client("reader", 5000)
        r.setup(m, segment=0)
        # after a restart A may still be served (restored, or its bytes read
        # within a lease the reader was granted); after a remove that has
        # returned, not even that
        ok = {"nothing"} if how == "forced_remove" else {"nothing", "A's bytes"}
        tally = {}
        first_bad = None
        t0 = time.monotonic()
        for i in range(ROUNDS):
            # An empty segment, so A goes where B will go once A's range is
            # free.  A and B are written with upsert (of a new key: a plain
            # PUT_START): a put may land in the writer's reservation for its
            # next put instead (docs/protocol.md §5.18), and the freed range
            # would then stay empty.
            remove_all(h)
            a_key, b_key = f"a-{i}-{uuid.uuid4().hex[:8]}", f"b-{i}-{uuid.uuid4().hex[:8]}"
            pa = h.call("upsert_random", key=a_key, size=VALUE, preferred=hname)
            assert pa["rc"] == 0, (i, pa)
            # twice: the first read after a restart may find the reader's
            # connection to the old master dead, and a lookup that spans the
            # reconnect is not cached; the second one is
            for _ in range(2):
                got = r.call("get", key=a_key)
                assert got["len"] == VALUE and got["sha256"] == pa["sha256"], (i, got)
            if how == "forced_remove":
                assert h.call("remove", key=a_key, force=True)["rc"] == 0
            else:
                rs.kill()
                m = rs.start()
                wait_until(lambda: mounted(m, hname), 20, f"{hname} to remount", interval=0.01)
                if how == "durable_restart":
                    # A is restored, but no lease on it: a forced remove frees it
                    rc = h.call("remove", key=a_key, force=True)["rc"]
                    assert rc in (0, -704), (i, rc)
            pb = h.call("upsert_random", key=b_key, size=VALUE, preferred=hname)
            assert pb["rc"] == 0, (i, pb, h.log_text())
            got = r.call("get", key=a_key)
            what = judge(got, {"A's bytes": pa["sha256"], "B's bytes": pb["sha256"]})
            tally[what] = tally.get(what, 0) + 1
            if what not in ok and first_bad is None:
                first_bad = (i, what)
        took = time.monotonic() - t0
        print(f"\n{how}: {ROUNDS} rounds in {took:.1f} s: {tally}")
        bad = sum(n for what, n in tally.items() if what not in ok)
        assert not bad, (
            f"{how}: the reader's get of A returned what it must not in {bad} of {ROUNDS} "
            f"rounds (first: round {first_bad[0]}, {first_bad[1]}); all rounds: {tally}")
    finally:
        rs.close()


# ---- b: another client's upsert is seen at once ------------------------------

@pytest.fixture
def clients():
    """``make(*names)``: :class:`ZcClient` processes, stopped at teardown."""
    made = []

    def make(*names):
        for n in names:
            made.append(ZcClient(n))
        return made[-len(names):]

    try:
        yield make
    finally:
        for c in made:
            c.stop()


def trio(master, clients):
    """(holder's name, writer, reader): the holder keeps the segment, the
    writer and the reader have none."""
    h, w, r = clients("holder", "writer", "reader")
    hname = h.setup(master, segment=64 * MiB)
    w.setup(master, segment=0)
    r.setup(master, segment=0)
    return hname, w, r


def read(r, key, mode, cap):
    """``r``'s read of ``key`` (with ``get``, or ``batch_get_into`` into a
    buffer of ``cap`` bytes): {"len", "sha256"} of what it returned."""
    if mode == "get":
        return r.call("get", key=key)
    res = r.call("zc_get", keys=[key], size=cap)
    return {"len": max(res["ns"][0], 0), "sha256": res["sha256s"][0], "n": res["ns"][0]}


@pytest.mark.parametrize("mode", ["get", "batch_get_into"])
@pytest.mark.parametrize("sizes", [(VALUE, VALUE), (VALUE, VALUE + 12345)],
                         ids=["same_size", "other_size"])
def test_other_clients_upsert_is_seen_at_once(master, clients, mode, sizes):
    hname, w, r = trio(master, clients)
    cap = max(sizes)
    stale = []
    for i in range(10):
        key = f"up-{i}-{uuid.uuid4().hex[:8]}"
        p1 = w.call("put_random", key=key, size=sizes[0], preferred=hname)
        assert p1["rc"] == 0, p1
        got = read(r, key, mode, cap)
        assert got["sha256"] == p1["sha256"], (i, got)
        p2 = w.call("upsert_random", key=key, size=sizes[1], preferred=hname)
        assert p2["rc"] == 0, p2
        got = read(r, key, mode, cap)
        what = judge(got, {"the new value": p2["sha256"], "the old value": p1["sha256"]})
        if what != "the new value":
            stale.append((i, what))
    assert not stale, (f"{mode}: the reader did not see another client's upsert "
                       f"({sizes[0]} -> {sizes[1]} bytes) in {len(stale)} of 10 rounds: {stale}")


# ---- c: a forced remove gives the space back at once ---------------------------

FILL = 48      # values of 1 MiB in a 64 MiB segment: 75 %, under the eviction watermark


@pytest.mark.parametrize("api", ["bytes", "zero_copy"])
def test_forced_remove_frees_space_at_once(master, clients, api):
    hname, w, r = trio(master, clients)
    keys = [f"fill-{i}-{uuid.uuid4().hex[:8]}" for i in range(FILL)]

    def write(ks):
        """Fresh random values of 1 MiB: (statuses, digests)."""
        if api == "bytes":
            res = [w.call("put_random", key=k, size=MiB, preferred=hname) for k in ks]
            return [x["rc"] for x in res], [x["sha256"] for x in res]
        res = w.call("zc_put", keys=ks, size=MiB, preferred=hname)
        return res["rcs"], res["sha256s"]

    def read_all(ks):
        """The reader's digest of each key's value (SHA_EMPTY for a miss)."""
        if api == "bytes":
            return [r.call("get", key=k)["sha256"] for k in ks]
        return r.call("zc_get", keys=ks, size=MiB)["sha256s"]

    rcs, old = write(keys)
    assert rcs == [0] * FILL, rcs
    assert read_all(keys) == old                      # the reader now holds leases
    t = time.monotonic()
    assert remove_all(w) == FILL
    # the same keys again, in reverse order: a read of a key's old place
    # would find another key's value there
    again = keys[::-1]
    rcs, new = write(again)
    took = time.monotonic() - t
    failed_puts = {k: rc for k, rc in zip(again, rcs) if rc != 0}
    new = dict(zip(again, new))
    old = dict(zip(keys, old))
    bad = {}
    for k, got in zip(keys, read_all(keys)):
        if k in failed_puts or got == new[k]:
            continue
        bad[k] = ("its old value" if got == old[k] else
                  "another key's new value" if got in new.values() else
                  "another key's old value" if got in old.values() else
                  "nothing" if got == SHA_EMPTY else "garbage")
    assert not failed_puts and not bad, (
        f"{api}: after remove_all(force=True), {len(failed_puts)} of {FILL} puts of 1 MiB "
        f"failed (statuses {sorted(set(failed_puts.values()))}) and {len(bad)} of the "
        f"other {FILL - len(failed_puts)} read back wrong ({sorted(set(bad.values()))}); the "
        f"remove and the puts took {took:.2f} s")

# SPDX-License-Identifier: Apache-2.0
"""The location cache (docs/architecture.md, "Location cache"): a client
that holds a read lease on a key reads it again from the same place while
the master's answer to the same lookup confirms it.

Every test runs a real master, a holder process whose segment keeps the
objects, and a reader process (no segment of its own, so every read
crosses processes) that reads a few keys over and over on a thread while
this process writes.  Every value carries its key, a version and a
checksum (helpers.checked_value): the reader counts a read that returns
anything but a complete value of that key as bad.  The races: removes
(forced and not) with puts of new versions into the freed space, upserts
of the same and of another size, eviction, and a holder killed with
SIGKILL and set up again under the same segment name.  The repeat-read
tests count the master's lookups.
"""

import time
import uuid

import pytest

from helpers import MiB, assert_setup_refused, checked_value, free_port, wait_until
from mooncake.store import ReplicateConfig

LEASE_TTL_MS = 1500

MODES = ["get", "batch_get_into", "get_into", "get_batch"]


def on(segment):
    cfg = ReplicateConfig()
    cfg.preferred_segment = segment
    return cfg


def keys_(n, tag="k"):
    u = uuid.uuid4().hex[:8]
    return [f"{tag}-{u}-{i}" for i in range(n)]


def seed(store, keys, segment, version=0, size=4096):
    """Put a checked value of every key into ``segment``."""
    for k in keys:
        assert store.put(k, checked_value(k, version, size), on(segment)) == 0


def lookups(master):
    return (master.metric("master_get_replica_list_requests_total") +
            master.metric("master_batch_get_replica_list_requests_total"))


@pytest.fixture
def holder(master, spawn_client):
    h = spawn_client("holder")
    name = h.setup(master, segment=64 * MiB)
    return h, name


@pytest.fixture
def reader(master, spawn_client):
    r = spawn_client("reader")
    r.setup(master, segment=0)
    return r


def assert_clean(stats, what):
    assert stats["bad"] == 0, f"{what}: the reader got bytes that were never written: " \
        f"{stats['bad_detail']}"
    assert stats["ok"] > 0, f"{what}: the reader never read a value ({stats})"


@pytest.mark.parametrize("mode", MODES)
def test_repeat_reads_are_confirmed_by_the_master(master, holder, reader, store, mode):
    """A cached location is never trusted alone: every read asks the
    master (one lookup per read, or per batch), whose answer confirms the
    bytes read from the cached place meanwhile."""
    h, hname = holder
    keys = keys_(4)
    seed(store, keys, hname, 1, 4096)
    before = lookups(master)
    r = reader.call("hammer_run", keys=keys, mode=mode, cap=8192, rounds=100)
    spent = lookups(master) - before
    assert r["ok"] == r["reads"] == 400, r
    batches = mode in ("batch_get_into", "get_batch")
    want = 100 if batches else 400
    assert spent >= want, f"{spent} master lookups for {r['reads']} {mode} reads"


def test_cache_off_asks_every_time(master, holder, store, spawn_client):
    h, hname = holder
    r = spawn_client("nocache", env={"MC_STORE_LOCATION_CACHE": "0"})
    r.setup(master, segment=0)
    keys = keys_(2)
    seed(store, keys, hname, 1, 4096)
    before = lookups(master)
    res = r.call("hammer_run", keys=keys, mode="get", cap=8192, rounds=50)
    assert res["ok"] == 100
    assert lookups(master) - before >= 100


def test_cache_setting_refused(master, spawn_client):
    assert_setup_refused(spawn_client, master, "MC_STORE_LOCATION_CACHE", "lots")


def test_local_write_and_remove_seen_at_once(master, holder, make_store):
    """The cache of the writing client never hides its own writes."""
    h, hname = holder
    s = make_store(segment=0)
    k = keys_(1)[0]
    assert s.put(k, checked_value(k, 1, 4096), on(hname)) == 0
    assert s.get(k) == checked_value(k, 1, 4096)
    assert s.upsert(k, checked_value(k, 2, 4096), on(hname)) == 0   # in place or fresh
    assert s.get(k) == checked_value(k, 2, 4096)
    assert s.upsert(k, checked_value(k, 3, 9000), on(hname)) == 0   # another size
    assert s.get(k) == checked_value(k, 3, 9000)
    assert s.remove(k, True) == 0
    assert s.get(k) == b""
    assert s.put(k, checked_value(k, 4, 4096), on(hname)) == 0
    assert s.get(k) == checked_value(k, 4, 4096)
    assert s.remove_all(True) >= 1
    assert s.get(k) == b""


def run_race(reader, keys, mode, step, iterations):
    """Hammer ``keys`` from the reader while ``step(i)`` writes; returns
    the reader's counts."""
    reader.call("hammer_start", keys=keys, mode=mode, cap=16384)
    try:
        for i in range(iterations):
            step(i)
    finally:
        stats = reader.call("hammer_stop")
    return stats


@pytest.mark.parametrize("mode", ["get", "batch_get_into"])
def test_race_remove_and_reput(master, holder, reader, store, mode):
    h, hname = holder
    keys = keys_(4)
    seed(store, keys, hname, 0, 4096)

    def step(i):
        k = keys[i % len(keys)]
        force = (i % 2 == 0)
        rc = store.remove(k, force)
        assert rc in (0, -706, -704), rc   # OK, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND
        # new values of the same size: the allocator would hand out the
        # freed range first if a leased one were freed at once
        assert store.put(k, checked_value(k, i + 1, 4096), on(hname)) == 0
        for j in range(2):
            other = f"{k}-filler-{i}-{j}"
            store.put(other, checked_value(other, 0, 4096), on(hname))

    stats = run_race(reader, keys, mode, step, 300)
    assert_clean(stats, "remove race")


@pytest.mark.parametrize("mode", ["get", "get_batch"])
def test_race_upsert_same_and_other_size(master, holder, reader, store, mode):
    h, hname = holder
    keys = keys_(3)
    seed(store, keys, hname, 0, 4096)
    sizes = [4096, 4096, 6000, 4096, 12000]

    def step(i):
        k = keys[i % len(keys)]
        assert store.upsert(k, checked_value(k, i + 1, sizes[i % len(sizes)]), on(hname)) == 0

    stats = run_race(reader, keys, mode, step, 300)
    assert_clean(stats, "upsert race")
    # and the last value is seen once the reader's lease has run out
    last = {k: max(i + 1 for i in range(300) if keys[i % len(keys)] == k) for k in keys}
    reader.call("hammer_start", keys=keys, mode=mode, cap=16384)
    try:
        wait_until(lambda: all(reader.call("hammer_peek")["versions"][k] == last[k]
                               for k in keys),
                   LEASE_TTL_MS / 1000 + 10, "the reader to see the last upserts")
    finally:
        stats = reader.call("hammer_stop")
    assert_clean(stats, "after the upserts")


def test_race_eviction(master, spawn_client, reader, store):
    h = spawn_client("small")
    hname = h.setup(master, segment=16 * MiB)
    keys = keys_(3)
    seed(store, keys, hname, 0, 64 * 1024)

    def step(i):
        f = f"{keys[0]}-fill-{i}"
        store.put(f, checked_value(f, 0, MiB), on(hname))   # evicts as the segment fills
        k = keys[i % len(keys)]
        store.put(k, checked_value(k, i + 1, 64 * 1024), on(hname))   # back if evicted

    stats = run_race(reader, keys, "get", step, 120)
    assert_clean(stats, "eviction race")


@pytest.mark.parametrize("mode", ["get", "batch_get_into"])
def test_holder_restart_same_name(master, spawn_client, reader, store, mode):
    name = f"localhost:{free_port()}"

    def start_holder(tag):
        h = spawn_client(tag)
        res = h.call("setup", args=[name, "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "",
                                    master.addr])
        assert res["rc"] == 0, h.log_text()
        return h, res["hostname"]

    h, hname = start_holder("holder-a")
    keys = keys_(4)
    seed(store, keys, hname, 1, 4096)
    reader.call("hammer_start", keys=keys, mode=mode, cap=16384)
    try:
        wait_until(lambda: reader.call("hammer_peek")["ok"] >= 50, 10, "cached reads")
        h.kill()                                   # SIGKILL: no goodbye to anyone
        h2, hname2 = start_holder("holder-b")      # the same segment name
        assert hname2 == hname
        # new values on the new holder; the master dropped the old segment
        # when the namesake mounted, so these are new objects
        for k in keys:
            wait_until(lambda: store.put(k, checked_value(k, 2, 4096), on(hname)) == 0, 10,
                       f"a put of {k} on the new holder")
        wait_until(lambda: all(v == 2 for v in reader.call("hammer_peek")["versions"].values()),
                   LEASE_TTL_MS / 1000 + 10, "the reader to see the new holder's values")
    finally:
        stats = reader.call("hammer_stop")
    assert_clean(stats, "holder restart")


def replica_addrs(master, key):
    """Addresses of ``key``'s memory replicas (admin /query_key; no lease)."""
    import json
    import urllib.error
    import urllib.request
    url = f"http://127.0.0.1:{master.metrics_port}/query_key?key={key}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return {rep["addr"] for rep in json.loads(r.read())["replicas"]}
    except urllib.error.HTTPError:
        return set()


@pytest.mark.parametrize("mode", ["get", "batch_get_into"])
def test_segment_remount_same_memory(master, spawn_client, reader, store, mode):
    """A holder unmounts its segment and mounts a new one, which the kernel
    usually maps at the same addresses, and other keys fill it: a cached
    location of the old keys now points at those bytes.  The new segment
    has another id, so the holder refuses reads that name the old one."""
    h = spawn_client("remounter")
    hname = h.setup(master, segment=0)
    seg = h.call("invoke", method="allocate_and_mount_segment", args=[8 * MiB])["ret"]
    assert seg["ret"] == 0, seg
    keys = keys_(4)
    seed(store, keys, hname, 1, 64 * 1024)
    old = set().union(*(replica_addrs(master, k) for k in keys))
    reader.call("hammer_start", keys=keys, mode=mode, cap=128 * 1024)
    try:
        wait_until(lambda: reader.call("hammer_peek")["ok"] >= 40, 10, "cached reads")
        assert h.call("invoke", method="unmount_segment",
                      args=[seg["segment_ids"]])["ret"] == 0
        seg2 = h.call("invoke", method="allocate_and_mount_segment", args=[8 * MiB])["ret"]
        assert seg2["ret"] == 0, seg2
        new = set()
        for i in range(100):
            f = f"{keys[0]}-fill-{i}"
            if store.put(f, checked_value(f, 0, 64 * 1024), on(hname)) == 0:
                new |= replica_addrs(master, f)
        misses = reader.call("hammer_peek")["miss"]
        wait_until(lambda: reader.call("hammer_peek")["miss"] >= misses + 20,
                   LEASE_TTL_MS / 1000 + 10, "the reader to find the old keys gone")
    finally:
        stats = reader.call("hammer_stop")
    assert_clean(stats, f"segment remount ({len(old & new)} of {len(old)} old addresses "
                        "were reused)")

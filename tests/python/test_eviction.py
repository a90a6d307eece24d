# SPDX-License-Identifier: Apache-2.0
"""Eviction that always makes progress (docs/protocol.md §5.12).

Each test starts its own master and client processes with small segments,
so the store is full after a few dozen puts:

* two writers fill the store several times over with mixed sizes: every
  put succeeds, what is left fits in the capacity, the oldest keys went
  and the newest stayed, hard-pinned objects all survive intact;
* an object read (leased) just before the store is overwritten past its
  capacity survives while the lease lasts, and is evictable once the
  lease ran out (a read protects an object for a lease, nothing more);
* with background eviction off (high watermark 1.0), a put larger than
  the free space but smaller than the evictable bytes succeeds at once,
  and a put fails with NO_AVAILABLE_HANDLE only when nothing is evictable.
"""

import random
import threading
import time
import uuid

from helpers import MiB, ClientProc, Master

KiB = 1024
NO_AVAILABLE_HANDLE = -200
SEGMENT = 32 * MiB


class Cluster:
    """A master and writer processes, each mounting one segment."""

    def __init__(self, lease_ttl_ms, writers=2, segment=SEGMENT, extra_args=None):
        # a writer is never expired here (a heartbeat late past the suite's
        # 2 s --client_ttl on a loaded machine would drop its segment's
        # objects, which is not eviction); the last flag wins
        self.master = Master(extra_args=["--client_ttl=60", "--log_level=info"] +
                             list(extra_args or []), lease_ttl_ms=lease_ttl_ms)
        self.clients = []
        self.capacity = writers * segment
        try:
            for i in range(writers):
                c = ClientProc(f"evict{i}")
                self.clients.append(c)
                c.setup(self.master, segment=segment, buffer=16 * MiB)
        except BaseException:
            self.close()
            raise

    def close(self):
        for c in self.clients:
            c.stop()
        alive = self.master.alive()
        log = self.master.log_text()
        rc = self.master.stop()
        assert alive, "mooncake_master died:\n" + log
        # a clean SIGTERM exit is 0 (a sanitizer report makes it nonzero)
        assert rc == 0, f"mooncake_master exited with {rc}:\n" + self.master.log_text()


def put_all(client, items, **kw):
    """put_random every (key, size); returns {key: sha256}; asserts rc 0."""
    shas = {}
    for k, size in items:
        r = client.call("put_random", key=k, size=size, **kw)
        assert r["rc"] == 0, f"put of {k} ({size} bytes) returned {r['rc']}"
        shas[k] = r["sha256"]
    return shas


def parallel(jobs):
    """Run callables in threads; re-raise the first failure."""
    errors = []
    out = [None] * len(jobs)

    def run(i, fn):
        try:
            out[i] = fn()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def mixed_sizes(rng, total):
    """Log-uniform sizes in 4 KiB..4 MiB adding up to at least total."""
    sizes = []
    while sum(sizes) < total:
        sizes.append(int(4 * KiB * 2 ** rng.uniform(0, 10)))
    return sizes


def exists(client, k):
    return client.call("exist", key=k)["rc"] == 1


def test_fill_far_past_capacity_two_writers():
    cl = Cluster(lease_ttl_ms=200)
    try:
        a, b = cl.clients
        tag = uuid.uuid4().hex[:8]
        # hard-pinned objects first: the oldest, yet never evicted
        pinned = [(f"pin-{tag}-{i}", 512 * KiB) for i in range(6)]
        pin_sha = put_all(a, pinned[:3], hard_pin=True)
        pin_sha.update(put_all(b, pinned[3:], hard_pin=True))

        streams = []
        for w in range(2):
            rng = random.Random(1000 + w)
            sizes = mixed_sizes(rng, 3 * cl.capacity)  # 6x the capacity in all
            streams.append([(f"fill-{tag}-{w}-{i:05d}", s) for i, s in enumerate(sizes)])
        parallel([lambda: put_all(a, streams[0]), lambda: put_all(b, streams[1])])
        # one writer may finish well before the other: the newest keys of
        # the store are written once both are done
        rng = random.Random(7)
        recent = [(f"recent-{tag}-{i}", int(4 * KiB * 2 ** rng.uniform(0, 9))) for i in range(12)]
        put_all(a, recent[:6])
        put_all(b, recent[6:])

        # the newest keys (at most 12 MiB in all) stayed.  Checked first, with
        # exist (no lease, no move in the LRU order): the get_size below
        # leases every key it finds and moves it to the most recently used
        # end, so a background pass while it runs (the store is often over
        # the high watermark after the last puts) would find these keys,
        # not yet read, at the least recently used end
        rcs = {k: b.call("exist", key=k)["rc"] for k, _ in recent}
        missing = [k for k, rc in rcs.items() if rc != 1]
        assert missing == [], (f"recent keys not there: {rcs}\n" + "\n".join(
            ln for ln in cl.master.log_text().splitlines()
            if "client" in ln or "evict" in ln or "segment" in ln))
        for w, stream in enumerate(streams):
            # the oldest keys (the first 8 MiB each writer wrote) went
            head, acc = [], 0
            for k, size in stream:
                if acc >= 8 * MiB:
                    break
                head.append(k)
                acc += size
            gone = [k for k in head if exists(a, k)]
            assert gone == [], f"writer {w}: old keys never evicted: {gone[:5]}"

        # what is left fits in the store (get_size: -704 once evicted)
        total = 0
        for k, size in pinned + streams[0] + streams[1] + recent:
            got = a.call("get_size", key=k)["rc"]
            if got >= 0:
                assert got == size
                total += got
        assert total <= cl.capacity, f"{total} bytes resident in a {cl.capacity}-byte store"

        # every hard-pinned object survived, bytes intact
        for k, sha in pin_sha.items():
            r = b.call("get", key=k)
            assert r["len"] == 512 * KiB and r["sha256"] == sha, f"pinned {k} lost: {r}"
    finally:
        cl.close()


def test_leased_object_survives_overwrite_then_expires():
    lease_ms = 6000
    cl = Cluster(lease_ttl_ms=lease_ms, segment=16 * MiB)
    try:
        a, b = cl.clients
        tag = uuid.uuid4().hex[:8]
        k = f"leased-{tag}"
        sha = put_all(a, [(k, 1 * MiB)])[k]
        # it is the least recently used object once the store is full
        put_all(a, [(f"pre-{tag}-{i}", 1 * MiB) for i in range(24)])
        t0 = time.monotonic()
        assert b.call("get", key=k)["sha256"] == sha  # lease of lease_ms
        # overwrite the whole store twice (no reads: no other leases)
        parallel([lambda: put_all(a, [(f"a-{tag}-{i}", 1 * MiB) for i in range(32)]),
                  lambda: put_all(b, [(f"b-{tag}-{i}", 1 * MiB) for i in range(32)])])
        elapsed = time.monotonic() - t0
        assert elapsed < lease_ms / 1000.0 * 0.8, f"overwrite took {elapsed:.1f} s"
        r = b.call("get", key=k)
        assert r["sha256"] == sha and r["len"] == 1 * MiB, "leased object evicted"
        # leases bound the protection: once the last one ran out, it goes
        # like any other least recently used object
        deadline = time.monotonic() + lease_ms / 1000.0 + 0.5
        while time.monotonic() < deadline:
            time.sleep(0.1)
        put_all(a, [(f"c-{tag}-{i}", 1 * MiB) for i in range(40)])
        assert not exists(a, k), "an expired lease kept the object alive"
    finally:
        cl.close()


def test_inline_eviction_is_immediate_and_only_fails_when_nothing_evictable():
    # background eviction never runs: only the put itself can free space
    cl = Cluster(lease_ttl_ms=200, writers=1, segment=16 * MiB,
                 extra_args=["--eviction_high_watermark_ratio=1.0"])
    try:
        (a,) = cl.clients
        tag = uuid.uuid4().hex[:8]
        small = [(f"s-{tag}-{i}", 1 * MiB) for i in range(14)]
        put_all(a, small)
        time.sleep(0.5)  # two ticks: background eviction must not have run
        assert all(exists(a, k) for k, _ in small)
        time.sleep(0.3)  # let the exist leases (200 ms) run out
        # 6 MiB > 2 MiB free, < 14 MiB evictable: succeeds at once
        t0 = time.monotonic()
        big = f"big-{tag}"
        r = a.call("put_random", key=big, size=6 * MiB)
        assert r["rc"] == 0
        assert time.monotonic() - t0 < 2.0
        # least recently used first, bytes-targeted: the oldest went, at
        # least the 4 MiB missing, and no more than the hole needed (the
        # 2 MiB free at the end of the segment is not adjacent to them)
        left = [exists(a, k) for k, _ in small]
        j = left.index(True)
        assert 4 <= j <= 6 and left == [False] * j + [True] * (14 - j), left
        assert exists(a, big)
        time.sleep(0.3)

        # only hard-pinned objects left: no evictable bytes -> -200
        for k, _ in small[j:]:
            assert a.call("remove", key=k, force=True)["rc"] == 0
        assert a.call("remove", key=big, force=True)["rc"] == 0
        put_all(a, [(f"p-{tag}-{i}", 2 * MiB) for i in range(7)], hard_pin=True)
        r = a.call("put_random", key=f"no-room-{tag}", size=4 * MiB)
        assert r["rc"] == NO_AVAILABLE_HANDLE
    finally:
        cl.close()


def test_upsert_never_evicts_its_own_key():
    cl = Cluster(lease_ttl_ms=200, writers=1, segment=16 * MiB,
                 extra_args=["--eviction_high_watermark_ratio=1.0"])
    try:
        (a,) = cl.clients
        tag = uuid.uuid4().hex[:8]
        keys = [(f"u-{tag}-{i}", 1 * MiB) for i in range(15)]
        put_all(a, keys)
        k = keys[0][0]  # the least recently used object
        # a larger value needs fresh buffers; the old value is the first
        # eviction candidate, but it is the key being written
        r = a.call("upsert_random", key=k, size=5 * MiB)
        assert r["rc"] == 0
        got = a.call("get", key=k)
        assert got["len"] == 5 * MiB and got["sha256"] == r["sha256"]
        assert not exists(a, keys[1][0])  # the next oldest went instead
        assert exists(a, keys[-1][0])
    finally:
        cl.close()

# SPDX-License-Identifier: Apache-2.0
"""Threads: blocking calls release the GIL, and one store serves many
threads at once.

The GIL checks run a counter thread while the main thread calls the store
(a 64 MiB get, puts, batches).  The interpreter's switch interval is raised
to 10 s for the measurement, so the counter can only move while the main
thread has released the GIL itself; it must move during every call, and a
control computation that keeps the GIL shows it standing still.
"""

import hashlib
import os
import sys
import threading
import time
import uuid

from helpers import MiB

# 64 MiB reads must finish within their lease even on a loaded machine.
LEASE_TTL_MS = 5000


class ProgressMeter:
    """A thread that counts while it holds the GIL and gives it up after
    every step (time.sleep(0)), with the switch interval raised to 10 s so
    the interpreter never takes the GIL from the measured thread itself.
    ``during(fn)`` returns fn's result and how far the counter moved while
    fn ran: > 0 only if fn released the GIL."""

    def __enter__(self):
        self.count = 0
        self.stop = False
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.started.wait(10)
        self.old = sys.getswitchinterval()
        sys.setswitchinterval(10.0)
        return self

    def _run(self):
        self.started.set()
        while not self.stop:
            self.count += 1
            time.sleep(0)

    def during(self, fn):
        before = self.count
        result = fn()
        return result, self.count - before

    def __exit__(self, *exc):
        sys.setswitchinterval(self.old)
        self.stop = True
        self.thread.join(10)


def test_get_releases_the_gil(make_store):
    store = make_store(segment=160 * MiB)
    k = f"gil-{uuid.uuid4().hex}"
    value = os.urandom(64 * MiB)
    assert store.put(k, value) == 0
    with ProgressMeter() as meter:
        for _ in range(3):
            data, progress = meter.during(lambda: store.get(k))
            assert data == value
            assert progress > 0, "the counter thread did not run during get()"
        # control: a call that keeps the GIL shows no progress
        _, progress = meter.during(lambda: sum(range(200000)))
        assert progress == 0, "the meter cannot tell"


def test_put_and_batch_calls_release_the_gil(make_store):
    store = make_store(segment=160 * MiB)
    value = os.urandom(32 * MiB)
    keys = [f"gilput-{i}-{uuid.uuid4().hex}" for i in range(2)]
    with ProgressMeter() as meter:
        rc, progress = meter.during(lambda: store.put(keys[0], value))
        assert rc == 0 and progress > 0
        rc, progress = meter.during(lambda: store.put_batch([keys[1]], [value]))
        assert rc == 0 and progress > 0
        got, progress = meter.during(lambda: store.get_batch(keys))
        assert got == [value, value] and progress > 0
        # a lookup of two keys is over before another thread can be
        # scheduled: ask about enough absent keys to take milliseconds
        many = keys + [f"gilmiss-{i}" for i in range(100000)]
        rcs, progress = meter.during(lambda: store.batch_is_exist(many))
        assert rcs[:2] == [1, 1] and not any(rcs[2:]) and progress > 0


def test_eight_threads_share_one_store(make_store):
    store = make_store(segment=128 * MiB)
    errors = []
    barrier = threading.Barrier(8)

    def worker(tid):
        try:
            barrier.wait(30)
            for i in range(25):
                k = f"t{tid}-{i}-{uuid.uuid4().hex}"
                v = os.urandom(64 * 1024 + tid * 7 + i)
                rc = store.put(k, v)
                if rc != 0:
                    errors.append(f"put {k}: {rc}")
                    continue
                got = store.get(k)
                if hashlib.sha256(got).digest() != hashlib.sha256(v).digest():
                    errors.append(f"get {k}: {len(got)} bytes, expected {len(v)}")
                if store.is_exist(k) != 1:
                    errors.append(f"exist {k}")
                batch = store.get_batch([k, f"missing-{tid}-{i}"])
                if batch != [v, b""]:
                    errors.append(f"get_batch {k}")
                if store.remove(k, force=True) != 0:
                    errors.append(f"remove {k}")
        except Exception as e:  # collected, reported below
            errors.append(f"thread {tid}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert errors == []

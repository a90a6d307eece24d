# SPDX-License-Identifier: Apache-2.0
"""remove_by_regex can neither stall the master's loop nor blow its memory.

Patterns whose intervals would unroll into a huge automaton
("a{32767}{32767}", "a{8000}{1000}", ...) are refused with INVALID_PARAMS
by the client library and, sent raw past it, by the master, at once and
without the master's RSS growing.  A pattern that is allowed but costly
over a large index runs in slices: a second connection pinging the master
all along never waits more than 50 ms, and the walk still removes exactly
the matching keys.

On a loaded machine a ping can wait longer than that even with the master
idle (the process is not scheduled), so the bound is 50 ms or three times
the slowest ping of an idle second measured just before, whichever is
larger.  During a walk of several seconds a lone ping can still lose the
CPU to other processes for longer than that, so there the bound holds for
nine pings in ten, and the slowest may take at most a quarter of the walk:
a walk that held the loop would stall pings for its whole length (seconds)
and fail both.
"""

import struct
import threading
import time

import pytest

from helpers import MiB, rss_kib
from rawwire import OP_REMOVE_BY_REGEX, RawConn, regex_body

INVALID_PARAMS = -600
LEASE_TTL_MS = 5000
MAX_PING_S = 0.050

HUGE = [b"a{32767}{32767}", b"a{8000}{1000}", b"(a{255}){255}", b"((a{100}){100}){100}",
        b"(((((a{16}){16}){16}){16}){16})", b"[ab]{255}{255}", b"x{256}", b"a{1,99999}",
        b"(" * 40 + b"a" + b")" * 40, b"(a)\\1", b"5?????++?+??++?+}+", b"a**", b"a{2}*",
        b"(a|aa" + b"|" * 80 + b"){170}z"]


def ping_bound(port: int) -> float:
    """The ping latency bound: MAX_PING_S, or 3 x the slowest ping of an
    idle second if the machine is that loaded."""
    p = Pinger(port)
    p.start()
    time.sleep(1.0)
    p.finish()
    return max(MAX_PING_S, 3 * p.worst)


class Pinger(threading.Thread):
    """Pings the master on its own connection until stopped; keeps the
    slowest round trip."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.conn = RawConn(port)
        self.stop_ev = threading.Event()
        self.worst = 0.0
        self.count = 0
        self.waits = []
        self.error = None

    def run(self) -> None:
        try:
            while not self.stop_ev.is_set():
                t0 = time.monotonic()
                assert self.conn.ping() == 0
                wait = time.monotonic() - t0
                self.worst = max(self.worst, wait)
                self.waits.append(wait)
                self.count += 1
                time.sleep(0.002)
        except Exception as e:  # reported by finish()
            self.error = e

    def finish(self) -> None:
        self.stop_ev.set()
        self.join(10)
        self.conn.close()
        assert self.error is None, f"pinging failed: {self.error!r}"


def test_store_refuses_huge_patterns_before_compiling(store):
    for pat in HUGE:
        t0 = time.monotonic()
        assert store.remove_by_regex(pat.decode()) == INVALID_PARAMS, pat
        assert time.monotonic() - t0 < 1.0, f"{pat!r} took {time.monotonic() - t0:.2f}s"


def test_master_refuses_huge_patterns_quickly_and_stays_small(master):
    pid = master.proc.pid
    bound = ping_bound(master.port)
    before = rss_kib(pid)
    pinger = Pinger(master.port)
    pinger.start()
    conn = RawConn(master.port)
    try:
        for pat in HUGE:
            t0 = time.monotonic()
            st, _ = conn.call(OP_REMOVE_BY_REGEX, regex_body(pat))
            took = time.monotonic() - t0
            assert st == INVALID_PARAMS, f"{pat!r} answered {st}"
            assert took < 0.5, f"the master took {took:.2f}s to refuse {pat!r}"
    finally:
        conn.close()
        pinger.finish()
    assert pinger.count > 0
    assert pinger.worst < bound, f"a ping waited {pinger.worst * 1000:.1f} ms"
    grown = rss_kib(pid) - before
    assert grown < 64 * 1024, f"the master grew by {grown} KiB"


def test_costly_pattern_runs_in_slices_between_other_requests(master, make_store):
    s = make_store(segment=64 * MiB)
    # keys of 300 'a's and a number: "(a|aa){170}z" scans each to its end
    n = 4000
    keys = [("a" * 300) + f"-{i}" for i in range(n)]
    for i in range(0, n, 500):
        assert s.put_batch(keys[i:i + 500], [b"v"] * 500) == 0
    keep = "b" * 300 + "-keep"
    assert s.put(keep, b"k") == 0

    bound = ping_bound(master.port)
    pinger = Pinger(master.port)
    pinger.start()
    conn = RawConn(master.port)
    try:
        t0 = time.monotonic()
        st, body = conn.call(OP_REMOVE_BY_REGEX, regex_body(b"(a|aa){170}z"))
        walk = time.monotonic() - t0
        assert st == 0 and struct.unpack("<q", body)[0] == 0
        # the same walk removing every numbered key, in slices too
        st, body = conn.call(OP_REMOVE_BY_REGEX, regex_body(b"(a|aa){170}-[0-9]+$"))
        assert st == 0 and struct.unpack("<q", body)[0] == n
        assert conn.ping() == 0        # frames after a walk are answered in order
    finally:
        conn.close()
        pinger.finish()
    assert walk > 4 * MAX_PING_S, f"the walk took only {walk:.3f}s: the test proves nothing"
    assert pinger.count > 10, f"only {pinger.count} pings during a {walk:.2f}s walk"
    waits = sorted(pinger.waits)
    p90 = waits[int(len(waits) * 0.9)]
    assert p90 < bound, \
        f"one ping in ten waited {p90 * 1000:.1f} ms or more during a {walk:.2f}s walk " \
        f"(bound {bound * 1000:.0f} ms)"
    assert pinger.worst < max(bound, walk / 4), \
        f"a ping waited {pinger.worst * 1000:.1f} ms during a {walk:.2f}s walk"
    assert s.is_exist(keep) == 1
    assert s.batch_is_exist(keys[:50]) == [0] * 50

# SPDX-License-Identifier: Apache-2.0
"""Several hosts in network namespaces: a master on "m", holders on "a"
and "b", a writer and reader on "c" (conftest.py).  Bytes cross veths and
a bridge, so cutting a host's link makes its packets vanish rather than be
refused.

* A cut link: reads of the cut holder's objects fail within the engine's
  timeouts and never return wrong bytes; puts meanwhile stay bounded in
  time and every one that returned 0 reads back; the master expires the
  holder after --client_ttl and its objects disappear; healed, the holder
  re-mounts (rejoin) and takes new objects again.
* A holder killed with SIGKILL under put load, with a --client_ttl long
  enough that it is not expired during the test: no put takes more than a
  few seconds, puts stop going to it once it has missed its heartbeats,
  and every put that returned 0 reads back.
"""

import os
import time

from helpers import MiB, wait_until
from conftest import CLIENT_TTL_S

MAX_OP_S = 12.0              # two tries, each within MC_TCP_STATUS_TIMEOUT_SEC (5 s)
SUSPECT_S = 3.5              # two missed 1 s heartbeats + slack + margin


def where(c, key):
    reps = c.call("replica_desc", key=key)["replicas"]
    return reps[0]["endpoint"] if reps else ""


def put(c, key, data_hex):
    t0 = time.monotonic()
    rc = c.call("put", key=key, hex=data_hex)["rc"]
    return rc, time.monotonic() - t0


def check_get(c, key, want_hex):
    """The value or nothing, never other bytes; returns (got it, seconds)."""
    r = c.call("get", key=key)
    assert r["len"] == 0 or r.get("hex") == want_hex, f"{key}: wrong bytes {r}"
    return r["len"] > 0, r["seconds"]


def test_cut_link_expiry_rejoin_and_no_wrong_bytes(cluster):
    m = cluster.start_master()
    a = cluster.client("a", 32 * MiB)
    cluster.client("b", 32 * MiB)
    c = cluster.client("c", 0)                   # holds nothing: every byte crosses the bridge
    ip_a = cluster.net.ip["a"]

    values = {f"cut-{i}": os.urandom(1024).hex() for i in range(60)}
    for k, v in values.items():
        assert put(c, k, v)[0] == 0
    on_a = [k for k in values if where(c, k).startswith(ip_a + ":")]
    on_b = [k for k in values if k not in on_a]
    assert on_a and on_b, (len(on_a), len(on_b))

    cluster.net.cut("a")
    t_cut = time.monotonic()
    for k in on_b[:5]:
        assert check_get(c, k, values[k])[0], f"{k} on the healthy holder was not read"
    for k in on_a[:2]:
        _, secs = check_get(c, k, values[k])
        assert secs < MAX_OP_S, f"a read of the cut holder took {secs:.1f}s"

    # puts during the cut: bounded, and later ones no longer go to the cut holder
    written = {}
    i = 0
    while time.monotonic() - t_cut < SUSPECT_S + 2:
        k, v = f"during-{i}", os.urandom(1024).hex()
        rc, secs = put(c, k, v)
        assert secs < MAX_OP_S, f"a put during the cut took {secs:.1f}s"
        if time.monotonic() - t_cut > SUSPECT_S + 0.5 and secs < 1.0:
            assert rc == 0, f"{k} failed {time.monotonic() - t_cut:.1f}s into the cut"
        if rc == 0:
            written[k] = v
        i += 1
    assert len(written) > 5

    # expiry: the master drops the silent holder and its objects
    wait_until(lambda: c.call("exist", key=on_a[0])["rc"] == 0, CLIENT_TTL_S + 10,
               "the master to expire the cut holder")
    for k, v in written.items():
        assert check_get(c, k, v)[0], f"{k} returned 0 but does not read back"

    # rejoin: healed, the holder re-mounts and new objects land on it again
    cluster.net.heal("a")
    t_heal = time.monotonic()
    n = [0]

    def lands_on_a():
        k, v = f"rejoin-{n[0]}", os.urandom(1024).hex()
        n[0] += 1
        rc, secs = put(c, k, v)
        assert rc == 0, (f"{k}: {rc} after {secs:.1f}s, {time.monotonic() - t_heal:.1f}s after "
                         f"the heal\n--- c:\n{c.log_text()}\n--- a:\n{a.log_text()}")
        written[k] = v
        return where(c, k).startswith(ip_a + ":")

    wait_until(lands_on_a, 20, "a new object on the healed holder")
    for k, v in list(written.items())[-20:]:
        assert check_get(c, k, v)[0], f"{k} does not read back after the rejoin"
    assert m.alive()


def test_holder_killed_under_put_load(cluster):
    cluster.start_master(client_ttl_s=30)
    a = cluster.client("a", 32 * MiB)
    cluster.client("b", 32 * MiB)
    c = cluster.client("c", 0)
    results = []
    t0 = time.monotonic()
    t_kill = None
    i = 0
    while t_kill is None or time.monotonic() - t_kill < SUSPECT_S + 2:
        if t_kill is None and time.monotonic() - t0 > 1.0:
            a.kill()
            t_kill = time.monotonic()
        k, v = f"kill-{i}", os.urandom(1024).hex()
        rc, secs = put(c, k, v)
        results.append((k, v, rc, secs, None if t_kill is None else time.monotonic() - t_kill))
        i += 1
        time.sleep(0.01)                         # a steady load, and a bounded read-back
    worst = max(r[3] for r in results)
    assert worst < 3.0, f"a put took {worst:.2f}s around the kill"
    late = [r for r in results if r[4] is not None and r[4] > SUSPECT_S]
    assert late and all(r[2] == 0 for r in late), [(round(r[4], 2), r[2]) for r in late]
    after = [r for r in results if r[4] is not None and r[2] == 0]
    for k, v, *_ in after:
        assert check_get(c, k, v)[0], f"{k} returned 0 but does not read back"

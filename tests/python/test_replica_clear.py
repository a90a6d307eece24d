# SPDX-License-Identifier: Apache-2.0
"""batch_replica_clear(keys, segment_name=""): a client frees objects it
wrote (docs/protocol.md §5.14).

Every test runs real client processes against a real master with the
suite's short lease TTL.  A key is cleared only when the caller wrote it, no
reader holds a lease and nothing is still writing it; with a segment name
only the replicas on that segment go, and the object goes with its last
replica.  Nothing sleeps: lease waits poll the clear itself with a deadline.
"""

import time
import urllib.request
import uuid

from helpers import MiB, wait_until


def _key(tag: str) -> str:
    return f"clear-{tag}-{uuid.uuid4().hex}"


def _clear(client, keys, segment_name=""):
    return client.call("batch_replica_clear", keys=keys, segment_name=segment_name)["keys"]


def _metrics(master):
    url = f"http://127.0.0.1:{master.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _pair(master, spawn_client):
    a = spawn_client("a")
    b = spawn_client("b")
    return a, a.setup(master), b, b.setup(master)


def test_own_keys_cleared_and_gone(master, spawn_client):
    a, a_name, b, _ = _pair(master, spawn_client)
    keys = [_key("own") for _ in range(3)]
    for k in keys:
        assert a.call("put_random", key=k, size=MiB, preferred=a_name)["rc"] == 0
    before = _metrics(master)

    assert _clear(a, keys) == keys

    after = _metrics(master)
    for k in keys:
        assert b.call("get", key=k)["len"] == 0, f"{k} should be gone for every client"
        assert a.call("exist", key=k)["rc"] == 0
    assert before["master_allocated_bytes"] - after["master_allocated_bytes"] >= 3 * MiB, \
        "the cleared objects' space should go back to the allocator"
    assert after["master_batch_replica_clear_requests_total"] == \
        before["master_batch_replica_clear_requests_total"] + 1
    assert after["master_batch_replica_clear_items_total"] == \
        before["master_batch_replica_clear_items_total"] + 3
    assert after["master_batch_replica_clear_failed_items_total"] == \
        before["master_batch_replica_clear_failed_items_total"]


def test_missing_keys_skipped(master, spawn_client):
    a, a_name, _, _ = _pair(master, spawn_client)
    k = _key("present")
    assert a.call("put_random", key=k, size=4096, preferred=a_name)["rc"] == 0
    before = _metrics(master)

    # missing, empty and repeated keys are skipped, not errors
    assert _clear(a, [_key("missing"), "", k, k, _key("missing")]) == [k]
    assert _clear(a, [_key("missing")]) == []
    assert _clear(a, []) == []

    after = _metrics(master)
    # the empty key never leaves the client: 4 + 1 keys reach the master
    assert after["master_batch_replica_clear_items_total"] - \
        before["master_batch_replica_clear_items_total"] == 5
    assert after["master_batch_replica_clear_failed_items_total"] - \
        before["master_batch_replica_clear_failed_items_total"] == 4


def test_other_clients_key_not_cleared(master, spawn_client):
    a, a_name, b, b_name = _pair(master, spawn_client)
    k = _key("theirs")
    put = b.call("put_random", key=k, size=4096, preferred=a_name)
    assert put["rc"] == 0

    # not a's, even though it lives in a's segment
    assert _clear(a, [k]) == []
    assert _clear(a, [k], a_name) == []
    assert a.call("get", key=k)["sha256"] == put["sha256"]

    # the writer may; wait out the lease of the read above
    wait_until(lambda: _clear(b, [k]) == [k], 10, "the writer's clear")
    assert a.call("get", key=k)["len"] == 0


def test_leased_key_not_cleared(master, spawn_client):
    a, a_name, b, _ = _pair(master, spawn_client)
    lease_s = master.lease_ttl_ms / 1000
    for _ in range(5):
        k = _key("leased")
        assert a.call("put_random", key=k, size=4096, preferred=a_name)["rc"] == 0
        t0 = time.monotonic()
        assert b.call("get", key=k)["len"] == 4096  # the read grants a lease
        first = _clear(a, [k])
        if time.monotonic() - t0 < lease_s:
            break  # the clear surely ran inside the lease
    else:
        raise AssertionError("no read and clear ran within one lease TTL in 5 tries")
    assert first == [], "a key under a read lease must not be cleared"

    wait_until(lambda: _clear(a, [k]) == [k], 10 * lease_s + 5, "the clear once the lease ended")
    assert time.monotonic() - t0 >= lease_s, "the key was cleared before its lease could end"
    assert b.call("get", key=k)["len"] == 0


def test_segment_clear_keeps_object_readable(master, spawn_client):
    a, a_name, b, b_name = _pair(master, spawn_client)
    k = _key("two")
    put = a.call("put_random", key=k, size=MiB, preferred=a_name, replica_num=2)
    assert put["rc"] == 0
    where = sorted(r["endpoint"] for r in a.call("replica_desc", key=k)["replicas"])
    assert where == sorted([a_name, b_name]), where

    # the owner of the segment is not the owner of the object
    assert _clear(b, [k], b_name) == []
    # reading the replica list above leased the key: poll
    wait_until(lambda: _clear(a, [k], b_name) == [k], 10, "the clear of b's replica")
    where = [r["endpoint"] for r in a.call("replica_desc", key=k)["replicas"]]
    assert where == [a_name], "only the replica on b's segment should go"
    got = b.call("get", key=k)
    assert (got["len"], got["sha256"]) == (MiB, put["sha256"]), \
        "the object should stay readable from its other replica"
    # nothing of it is left on b's segment
    assert _clear(a, [k], b_name) == []

    # the last replica takes the object with it
    wait_until(lambda: _clear(a, [k], a_name) == [k], 10, "the clear of the last replica")
    assert b.call("get", key=k)["len"] == 0
    assert a.call("exist", key=k)["rc"] == 0


def test_segment_clear_erases_single_replica_object(master, spawn_client):
    a, a_name, _, b_name = _pair(master, spawn_client)
    k = _key("one")
    assert a.call("put_random", key=k, size=4096, preferred=a_name)["rc"] == 0
    assert _clear(a, [k], b_name) == [], "no replica of it is on b's segment"
    assert _clear(a, [k], "127.0.0.1:1") == []
    assert _clear(a, [k], a_name) == [k]
    assert a.call("exist", key=k)["rc"] == 0


def test_not_set_up_returns_empty(master, spawn_client):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    assert s.batch_replica_clear(["anything"]) == []
    assert s.batch_replica_clear(["anything"], "localhost:12345") == []

    a = spawn_client("a")
    a_name = a.setup(master)
    k = _key("closed")
    assert a.call("put_random", key=k, size=4096, preferred=a_name)["rc"] == 0
    assert a.call("close")["rc"] == 0
    assert _clear(a, [k]) == [], "a closed store clears nothing"


def test_tenants_isolated(tenant_master, spawn_client):
    # tenants split the key space only with --enable_multi_tenants
    master = tenant_master(["tenant-x", "tenant-y"])

    def tenant_client(tenant):
        c = spawn_client(tenant)
        r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                                  master.addr], kwargs={"tenant_id": tenant})
        assert r["rc"] == 0
        return c, r["hostname"]

    x, x_name = tenant_client("tenant-x")
    y, y_name = tenant_client("tenant-y")
    k = _key("both")
    only_y = _key("only-y")
    px = x.call("put_random", key=k, size=4096, preferred=x_name)
    py = y.call("put_random", key=k, size=4096, preferred=y_name)
    assert px["rc"] == 0 and py["rc"] == 0
    assert y.call("put_random", key=only_y, size=4096, preferred=y_name)["rc"] == 0

    assert _clear(x, [k, only_y]) == [k], "x clears its tenant's key only"
    assert x.call("get", key=k)["len"] == 0
    assert y.call("get", key=k)["sha256"] == py["sha256"]
    assert y.call("get", key=only_y)["len"] == 4096

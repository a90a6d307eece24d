# SPDX-License-Identifier: Apache-2.0
"""High availability with Redis as the leadership backend (docs/ha.md).

Every test starts its own ``redis-server`` (Debian's, on a free loopback
port, nothing persisted), ``mooncake_master --enable_ha
--ha_backend_type=redis`` processes and store clients in their own
processes that know the masters only as ``redis://127.0.0.1:<port>``.

* Election: exactly one leader; the HASH ``mooncake-store/{mooncake_cluster}
  /master_view`` holds upstream's three fields (read here over a raw RESP
  socket) with a PEXPIRE of the lease, and the version counter matches.
* kill -9 of the leader under a put load: a standby takes over within the
  TTL plus a bound, puts resume through ``redis://`` by themselves, and
  every put acknowledged after the takeover reads back.  Without the
  etcd-shipped log a new leader starts empty (as in test_ha.py): the
  records before the kill are not kept, and that is asserted too.
* SIGSTOP of the leader past its lease: the woken master refuses the
  first request and steps down; its renew script cannot touch the
  successor's record (owner token).
* redis killed past the TTL: the leader stops serving; redis restarted
  empty: a leader is elected again and clients follow.
* Start-up rules: upstream's FATAL texts, exit status 2, INVALID_PARAMS
  and UNAVAILABLE_IN_CURRENT_MODE; ``k8s`` refused on both sides.
* ``redis://`` as transfer-engine metadata: two engines find each other's
  descriptors under upstream's keys (mooncake/ram/<segment>).
"""

import hashlib
import json
import os
import re
import subprocess
import threading
import time

import pytest

from ha_helpers import (REDIS_VERSION_KEY, REDIS_VIEW_KEY, RedisHaMaster, RedisServer,
                        have_redis, leader_view, stop_pinned_leader, wait_leader)
from ha_helpers import cleanup, redis  # noqa: F401 (fixtures)
from helpers import MiB, ClientProc, master_bin, wait_until

pytestmark = pytest.mark.skipif(not have_redis(), reason="redis-server is not installed "
                                "(scripts/deps.sh installs it)")

TTL_S = 2
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def redis_client(cleanup, redis, name="client", env=None, metadata="P2PHANDSHAKE",
                 segment=32 * MiB):
    c = ClientProc(name, env=dict({"MC_STORE_HEARTBEAT_MS": "200"}, **(env or {})))
    cleanup.append(c)
    r = c.call("setup", args=["localhost", metadata, segment, 8 * MiB, "tcp", "",
                              f"redis://{redis.addr}"])
    assert r["rc"] == 0, c.log_text()
    return c, r


def view(redis):
    return redis.hgetall(REDIS_VIEW_KEY)


def test_one_leader_and_upstream_hash(redis, cleanup):
    masters = []
    cleanup.append(masters)
    for _ in range(3):
        masters.append(RedisHaMaster(redis, ttl_s=TTL_S))
    leader = wait_leader(masters, 10.0)
    v = view(redis)
    assert set(v) == {"leader_address", "view_version", "owner_token"}, v
    assert v["leader_address"] == leader.addr
    assert int(v["view_version"]) == int(leader.metric("master_ha_term")) >= 1
    assert UUID_RE.match(v["owner_token"]), v
    assert redis.command("GET", REDIS_VERSION_KEY) == v["view_version"]
    # the record lapses with the lease unless renewed (PEXPIRE of ttl ms)
    assert 0 < redis.command("PTTL", REDIS_VIEW_KEY) <= TTL_S * 1000
    assert redis.command("PTTL", REDIS_VERSION_KEY) == -1, "the counter must not expire"
    for m in masters:
        want = "leader" if m is leader else "standby"
        assert m.role() == want
        leader_view(m, leader)
    # renewals keep it: for three TTLs the same owner leads without a break
    t_end = time.monotonic() + 3 * TTL_S
    while time.monotonic() < t_end:
        assert view(redis).get("owner_token") == v["owner_token"], "leadership changed hands"
        time.sleep(0.2)
    # a clean stop releases the record (owner matches -> DEL): a standby
    # takes over well before the TTL would have lapsed
    leader.stop()
    masters.remove(leader)
    t0 = time.monotonic()
    new = wait_leader(masters, 5.0)
    assert view(redis)["leader_address"] == new.addr
    assert int(view(redis)["view_version"]) == int(v["view_version"]) + 1
    print(f"\nhand-over after a clean stop took {time.monotonic() - t0:.2f} s")


def test_kill9_leader_under_put_load(redis, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [RedisHaMaster(redis, ttl_s=TTL_S), RedisHaMaster(redis, ttl_s=TTL_S)]
    leader = wait_leader(masters, 10.0)
    term = int(view(redis)["view_version"])
    c, _ = redis_client(cleanup, redis)
    before = os.urandom(1000)
    assert c.call("put", key="before", hex=before.hex())["rc"] == 0
    assert c.call("get", key="before")["hex"] == before.hex()

    acked = []  # (key, value, monotonic time acknowledged)
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            value = os.urandom(256)
            key = f"load-{i}"
            if c.call("put", key=key, hex=value.hex(), timeout=30)["rc"] == 0:
                acked.append((key, value, time.monotonic()))
            i += 1

    th = threading.Thread(target=load, daemon=True)
    th.start()
    try:
        wait_until(lambda: len(acked) >= 20, 20.0, "20 acknowledged puts before the kill")
        leader.kill()
        t_kill = time.monotonic()
        masters.remove(leader)
        wait_until(lambda: any(t > t_kill for _, _, t in acked), 15.0,
                   "a put acknowledged after the kill")
        resumed = min(t for _, _, t in acked if t > t_kill) - t_kill
        wait_until(lambda: sum(1 for _, _, t in acked if t > t_kill) >= 20, 20.0,
                   "20 puts acknowledged by the new leader")
    finally:
        stop.set()
        th.join(timeout=60)
    print(f"\nputs resumed {resumed:.2f} s after kill -9 of the leader")
    assert resumed < TTL_S + 8.0
    new = wait_leader(masters, 1.0)
    assert new is not leader
    v = view(redis)
    assert v["leader_address"] == new.addr and int(v["view_version"]) > term
    # every put the new leader acknowledged reads back intact
    after = [(k, val) for k, val, t in acked if t > t_kill + 0.001]
    wrong = [k for k, val in after if c.call("get", key=k).get("hex") != val.hex()]
    assert not wrong, f"{len(wrong)} of {len(after)} lost or wrong, e.g. {wrong[:2]}"
    # redis holds leadership only, not the index: the new leader started
    # empty (durability across a takeover needs the etcd-shipped log)
    assert c.call("exist", key="before")["rc"] == 0


def test_sigstopped_leader_refuses_and_cannot_renew(redis, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [RedisHaMaster(redis, ttl_s=TTL_S), RedisHaMaster(redis, ttl_s=TTL_S)]
    wait_leader(masters, 10.0)
    old_token = view(redis)["owner_token"]
    old, other, pinned = stop_pinned_leader(masters, cleanup)
    wait_until(lambda: old.role() == "standby" and old.admin("/ha_status") == "standby",
               5.0, "the old leader to step down")
    # the woken master neither renewed nor deleted its successor's record
    v = view(redis)
    assert v["leader_address"] == other.addr and v["owner_token"] != old_token
    c, _ = redis_client(cleanup, redis, "follower")
    assert c.call("put", key="k2", hex="22" * 64)["rc"] == 0


def test_redis_outage_stops_the_leader_then_recovers(redis, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [RedisHaMaster(redis, ttl_s=TTL_S), RedisHaMaster(redis, ttl_s=TTL_S)]
    leader = wait_leader(masters, 10.0)
    c, _ = redis_client(cleanup, redis, env={"MC_STORE_FAILOVER_WAIT_MS": "300"})
    assert c.call("put", key="a", hex="aa" * 32)["rc"] == 0

    redis.kill()
    t0 = time.monotonic()
    # the leader cannot renew: it stops serving before its lease could lapse
    wait_until(lambda: leader.admin("/ha_status") != "serving", TTL_S + 2.0,
               "the leader to stop serving without redis")
    took = time.monotonic() - t0
    print(f"\nleader stopped serving {took:.2f} s after redis went away")
    assert took <= TTL_S + 0.5
    wait_until(lambda: all(m.role() == "standby" for m in masters), 2.0,
               "every master to stand by while redis is away")
    assert c.call("put", key="b", hex="bb" * 32)["rc"] != 0
    assert leader.metric("master_ha_etcd_up") == 0

    redis.start()  # same port, empty
    new = wait_leader(masters, 10.0)
    assert view(redis)["leader_address"] == new.addr
    wait_until(lambda: c.call("put", key="c", hex="cc" * 32, timeout=30)["rc"] == 0, 15.0,
               "the client to follow the leader elected after the restart")
    assert c.call("get", key="c")["hex"] == "cc" * 32


def run_master(*args, timeout=10.0):
    p = subprocess.run([master_bin(), "--metrics_port=0", *args], capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stderr


@pytest.mark.parametrize("args,text", [
    (["--enable_ha"],
     "HA backend connection string must be set when enable_ha is true, backend_type=etcd"),
    # --etcd_endpoints is the fallback for etcd only
    (["--enable_ha", "--ha_backend_type=redis", "--etcd_endpoints=127.0.0.1:2379"],
     "HA backend connection string must be set when enable_ha is true, backend_type=redis"),
    (["--enable_ha", "--ha_backend_type=zookeeper", "--ha_backend_connstring=h:1"],
     "--ha_backend_type=zookeeper: INVALID_PARAMS (-600)"),
    (["--enable_ha", "--ha_backend_type=k8s", "--ha_backend_connstring=default/lease"],
     "UNAVAILABLE_IN_CURRENT_MODE (-1011)"),
    (["--enable_ha", "--ha_backend_type=redis", "--ha_backend_connstring=redis://h:6379/0"],
     "INVALID_PARAMS (-600)"),
    (["--enable_ha", "--ha_backend_type=redis", "--ha_backend_connstring=::1:6379"],
     "INVALID_PARAMS (-600)"),
])
def test_startup_rules_refuse(args, text):
    rc, err = run_master(*args)
    assert rc == 2, err
    assert text in err, err


def test_k8s_refusal_says_why():
    rc, err = run_master("--enable_ha", "--ha_backend_type=k8s", "--ha_backend_connstring=lease")
    assert rc == 2
    assert "Kubernetes API server" in err and "no backend" in err, err


def test_startup_warnings(redis, cleanup):
    masters = []
    cleanup.append(masters)
    masters.append(RedisHaMaster(redis, ttl_s=TTL_S,
                                 extra_args=["--etcd_endpoints=127.0.0.1:2379"]))
    wait_leader(masters, 10.0)
    assert ("--ha_backend_connstring=redis://%s differs from --etcd_endpoints=127.0.0.1:2379; "
            "using --ha_backend_connstring" % redis.addr) in masters[0].log_text()
    # upstream reads --ha_backend_type only with --enable_ha
    rc, err = run_master("--ha_backend_type=zookeeper", "--version")
    assert rc == 0, err


def test_client_schemes(redis, cleanup):
    c = ClientProc("schemes", env={"MC_STORE_FAILOVER_WAIT_MS": "300"})
    cleanup.append(c)

    def setup(addr):
        return c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                                     addr])["rc"]

    assert setup("k8s://default/mooncake-leader") == -1011
    assert setup("zk://127.0.0.1:2181") == -600
    assert setup("redis://127.0.0.1:6379/3") == -600
    # redis answers but names no leader: UNAVAILABLE_IN_CURRENT_STATUS
    assert setup(f"redis://{redis.addr}") == -1010
    assert "No master is available in HA backend" in c.log_text(), c.log_text()


def test_redis_metadata_for_two_engines(redis, cleanup):
    masters = [RedisHaMaster(redis, ttl_s=TTL_S)]
    cleanup.append(masters)
    wait_leader(masters, 10.0)
    md = f"redis://{redis.addr}"
    clients = []
    for name in ("holder", "reader"):
        c, r = redis_client(cleanup, redis, name, env={"MC_TE_SHM": "0"}, metadata=md,
                            segment=32 * MiB if name == "holder" else 0)
        clients.append((c, r["hostname"]))
    (holder, hname), (reader, _) = clients
    desc = redis.command("GET", f"mooncake/ram/{hname}")
    assert desc is not None, "the holder's descriptor is not in redis"
    assert json.loads(desc)["name"] == hname, desc
    assert json.loads(redis.command("GET", f"mooncake/rpc_meta/{hname}"))["ip_or_host_name"]
    value = os.urandom(100 * 1024)
    # the reader has no segment: the put lands in the holder's, found through redis
    assert reader.call("put", key="x", hex=value.hex())["rc"] == 0
    got = reader.call("get", key="x")
    assert got["sha256"] == hashlib.sha256(value).hexdigest()
    assert holder.call("close")["rc"] == 0
    wait_until(lambda: redis.command("GET", f"mooncake/ram/{hname}") is None, 5.0,
               "the holder's descriptor to leave redis")


def test_redis_restart_keeps_the_counter_growing(cleanup):
    """A view version never repeats while redis keeps its counter: a
    leader elected after the record lapsed gets the next number."""
    r = RedisServer()
    cleanup.append(r)
    masters = [RedisHaMaster(r, ttl_s=TTL_S)]
    cleanup.append(masters)
    m = wait_leader(masters, 10.0)
    v1 = int(view(r)["view_version"])
    m.pause()
    try:
        wait_until(lambda: r.command("EXISTS", REDIS_VIEW_KEY) == 0, TTL_S + 3.0,
                   "the unrenewed record to lapse")
    finally:
        m.resume()
    wait_until(lambda: r.try_command("HGET", REDIS_VIEW_KEY, "view_version"), 10.0,
               "a new leader record")
    assert int(view(r)["view_version"]) == v1 + 1

# SPDX-License-Identifier: Apache-2.0
"""High availability with real etcd (docs/ha.md).

Every test starts its own etcd (one member, or a three-member cluster) on
free loopback ports, several ``mooncake_master --enable_ha`` processes and
store clients in their own processes (client_proc.py), and stops all of
them even when it fails.

* Election: exactly one master leads; /role, /ha_status, /leader and the
  HA metrics of every master agree, and the etcd key holds the leader's
  RPC address.
* kill -9 of the leader: a standby takes over, and a client that knows
  the masters only as ``etcd://...`` puts again within 10 s without doing
  anything (it remounts its segment on the new leader by itself); what it
  writes afterwards reads back intact.
* SIGSTOP of the leader past its lease, then SIGCONT: the woken master
  refuses a write at once (its lease deadline has passed), steps down,
  and counts the refusal; the standby has taken over.
* kill -9 of one etcd member of three: the leader keeps its lease through
  the other members, nothing fails over, and puts and gets go on.
* ``etcd://`` as the transfer engine's metadata service: two clients find
  each other's descriptors in etcd, under mooncake/ram/<segment>.

Lease TTLs are short (2 s) so the suite stays well inside its time on a
2-core CI box; the etcd-member test uses 5 s so a raft election in etcd
never looks like a lost lease.
"""

import hashlib
import json
import os
import time
import urllib.error
import urllib.request

import pytest

from ha_helpers import (LEADER_KEY, EtcdCluster, HaMaster, have_etcd, leader_view,
                        stop_pinned_leader, wait_leader)
from ha_helpers import cleanup, etcd  # noqa: F401 (fixtures)
from helpers import MiB, ClientProc, wait_until

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd is not installed "
                                "(scripts/deps.sh installs etcd-server)")

TTL_S = 2


def etcd_client(cleanup, etcd, name="client", env=None):
    c = ClientProc(name, env=dict({"MC_STORE_HEARTBEAT_MS": "200"}, **(env or {})))
    cleanup.append(c)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 32 * MiB, 8 * MiB, "tcp", "",
                              f"etcd://{etcd.endpoints}"])
    assert r["rc"] == 0, c.log_text()
    return c


def put_until_ok(c, key, value: bytes, timeout: float) -> float:
    """Put until it succeeds; returns the seconds it took."""
    t0 = time.monotonic()
    wait_until(lambda: c.call("put", key=key, hex=value.hex(), timeout=30)["rc"] == 0,
               timeout, f"a put of {key} to succeed", interval=0.05)
    return time.monotonic() - t0


def test_one_leader_and_every_view_agrees(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    for _ in range(3):
        masters.append(HaMaster(etcd, ttl_s=TTL_S))
    leader = wait_leader(masters, 10.0)
    assert etcd.get(LEADER_KEY) == leader.addr
    term = int(leader.metric("master_ha_term"))
    assert term > 0
    for m in masters:
        want = "leader" if m is leader else "standby"
        assert m.role() == want
        assert m.admin("/ha_status") == ("serving" if m is leader else "standby")
        assert m.metric("master_ha_role") == (1 if m is leader else 0)
        view = leader_view(m, leader)
        assert f'"view_version":{term}' in view, view
        assert '"present":true' in view
    # a standby answers no RPC: a client dialling it directly is refused
    standby = next(m for m in masters if m is not leader)
    # ... and its admin index routes say the service plane is elsewhere
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(f"http://127.0.0.1:{standby.metrics_port}/get_all_keys",
                               timeout=2)
    assert ei.value.code == 503 and b"service plane is not active" in ei.value.read()
    assert leader.admin("/get_all_keys") is not None
    c = ClientProc("direct")
    cleanup.append(c)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                              standby.addr])
    assert r["rc"] != 0
    assert standby.metric("master_ha_fenced_requests_total") >= 1
    # a clean stop hands over at once: the key goes with the leader
    leader.stop()
    masters.remove(leader)
    new = wait_leader(masters, 5.0)
    assert etcd.get(LEADER_KEY) == new.addr


def test_kill9_leader_client_follows_within_10s(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [HaMaster(etcd, ttl_s=TTL_S), HaMaster(etcd, ttl_s=TTL_S)]
    leader = wait_leader(masters, 10.0)
    c = etcd_client(cleanup, etcd)
    before = os.urandom(1000)
    assert c.call("put", key="before", hex=before.hex())["rc"] == 0
    assert c.call("get", key="before")["hex"] == before.hex()

    leader.kill()
    t0 = time.monotonic()
    masters.remove(leader)
    after = os.urandom(3000)
    put_until_ok(c, "after", after, 10.0)
    took = time.monotonic() - t0
    print(f"\nwrites resumed {took:.2f} s after kill -9 of the leader")
    assert took < 10.0
    new = wait_leader(masters, 1.0)
    assert new is not leader
    assert c.call("get", key="after")["hex"] == after.hex()
    assert c.call("exist", key="after")["rc"] == 1
    # the new leader started empty (without --enable_snapshot_restore the log is not shipped)
    assert c.call("exist", key="before")["rc"] == 0


def test_close_with_no_leader_waits_briefly(etcd, cleanup):
    """close() tells the master that the client left (CLIENT_CLOSE), a
    courtesy: a master drops a client that stopped pinging.  With no
    master leading, it waits for one at most 2 s, while every other call
    waits MC_STORE_FAILOVER_WAIT_MS (6 s here; 15 s by default), and
    returns the failure of telling it; the client's resources are released
    anyway."""
    masters = []
    cleanup.append(masters)
    masters.append(HaMaster(etcd, ttl_s=TTL_S))
    wait_leader(masters, 10.0)
    c = etcd_client(cleanup, etcd, env={"MC_STORE_FAILOVER_WAIT_MS": "6000"})
    assert c.call("put", key="k", hex="00")["rc"] == 0
    masters.pop().kill()
    t0 = time.monotonic()
    r = c.call("exist", key="k", timeout=60)
    waited = time.monotonic() - t0
    assert r["rc"] < 0 and waited >= 5.5, (r, waited)  # the call's failover wait
    t0 = time.monotonic()
    r = c.call("close", timeout=60)
    took = time.monotonic() - t0
    assert r["rc"] in (-900, -1010), r  # RPC_FAIL / UNAVAILABLE_IN_CURRENT_STATUS
    assert took < 4.0, f"close() took {took:.1f} s with no leader"
    assert "could not tell the master" in c.log_text()


def test_sigstopped_leader_refuses_writes_when_it_wakes(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [HaMaster(etcd, ttl_s=TTL_S), HaMaster(etcd, ttl_s=TTL_S)]
    old, other, pinned = stop_pinned_leader(masters, cleanup)
    assert old.metric("master_ha_fenced_requests_total") >= 1
    wait_until(lambda: old.role() == "standby" and old.admin("/ha_status") == "standby",
               5.0, "the old leader to step down")
    assert old.metric("master_ha_role") == 0
    assert pinned.call("exist", key="k1")["rc"] != 1
    # the new leader serves clients that follow etcd
    c = etcd_client(cleanup, etcd, "follower")
    assert c.call("put", key="k2", hex="22" * 64)["rc"] == 0
    assert etcd.get(LEADER_KEY) == other.addr


def test_etcd_member_loss_keeps_service(cleanup):
    etcd = EtcdCluster(3)
    cleanup.append(etcd)
    masters = []
    cleanup.append(masters)
    masters += [HaMaster(etcd, ttl_s=5), HaMaster(etcd, ttl_s=5)]
    leader = wait_leader(masters, 15.0)
    c = etcd_client(cleanup, etcd)
    value = os.urandom(2000)
    assert c.call("put", key="kept", hex=value.hex())["rc"] == 0
    term = leader.metric("master_ha_term")

    etcd.kill(0)  # the first endpoint: every request must fail over
    # over two lease periods the leader keeps renewing through the others
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        assert leader.role() == "leader", leader.log_text()
        time.sleep(0.2)
    assert leader.metric("master_ha_term") == term
    assert leader.metric("master_ha_etcd_up") == 1
    assert c.call("get", key="kept")["hex"] == value.hex()
    put_until_ok(c, "new", b"n" * 100, 5.0)
    assert c.call("get", key="new")["hex"] == (b"n" * 100).hex()


def test_etcd_metadata_for_two_engines(etcd, cleanup):
    masters = [HaMaster(etcd, ttl_s=TTL_S)]
    cleanup.append(masters)
    wait_leader(masters, 10.0)
    md = f"etcd://{etcd.endpoints}"
    clients = []
    for name in ("holder", "reader"):
        c = ClientProc(name, env={"MC_TE_SHM": "0"})  # the TCP path reads the descriptor
        cleanup.append(c)
        r = c.call("setup", args=["localhost", md, 32 * MiB if name == "holder" else 0,
                                  8 * MiB, "tcp", "", f"etcd://{etcd.endpoints}"])
        assert r["rc"] == 0, c.log_text()
        clients.append((c, r["hostname"]))
    (holder, hname), (reader, rname) = clients
    desc = etcd.get(f"mooncake/ram/{hname}")
    assert desc is not None, "the holder's descriptor is not in etcd"
    assert json.loads(desc)["name"] == hname, desc
    assert json.loads(etcd.get(f"mooncake/rpc_meta/{hname}"))["ip_or_host_name"]
    value = os.urandom(100 * 1024)
    # the reader has no segment: the put lands in the holder's, through etcd's descriptor
    assert reader.call("put", key="x", hex=value.hex())["rc"] == 0
    got = reader.call("get", key="x")
    assert got["sha256"] == hashlib.sha256(value).hexdigest()
    # a clean close removes the descriptor
    assert holder.call("close")["rc"] == 0
    wait_until(lambda: etcd.get(f"mooncake/ram/{hname}") is None, 5.0,
               "the holder's descriptor to leave etcd")


def test_no_etcd_gives_a_clear_error(cleanup):
    c = ClientProc("noetcd", env={"MC_STORE_FAILOVER_WAIT_MS": "300"})
    cleanup.append(c)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                              "etcd://127.0.0.1:1"])
    assert r["rc"] != 0
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                              "redis://127.0.0.1:1"])
    assert r["rc"] != 0

# SPDX-License-Identifier: Apache-2.0
"""Upstream's seed rules and the master flags that were refused before.

Real processes: mooncake_master, in-process stores and client processes
(client_proc.py), and the standalone mooncake_http_metadata_server.

* Soft pin is runtime state (upstream C.7): after a durable restart the
  restored object is ordinary cache (no pin, no pinned-key count) until a
  later write pins again.
* --allocation_strategy=local_first (C.8): a single-replica put goes to
  the writer's host (clients on 127.0.0.2/.3/.4 are three hosts), and to
  the next host by name, wrapping, when the writer's segment is full.
* --allocation_strategy=free_ratio_first: each put goes to the segment
  with the largest free fraction.
* --dynamic_replication_mode (C.10): observe logs a key read often enough
  and adds nothing; enforce adds a memory replica on another segment
  through a copy task that a holder executes.
* --enable_metadata_cleanup_on_timeout (C.11) without an embedded
  metadata server: the records of an expired client are deleted from the
  remote server of MOONCAKE_TE_META_DATA_SERVER, under the
  MC_METADATA_CLUSTER_ID prefix.
* --rpc_interface (C.1): lo's address replaces --rpc_address; an unknown
  interface is fatal with upstream's message.

Tenant rules (C.9) are in test_tenants.py.
"""

import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import List
from pathlib import Path

import pytest

from helpers import (MiB, ClientProc, Master, closing_stores, free_port, master_bin,
                     port_accepts, wait_until)
from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction


def admin(m: Master, path: str):
    """(status, JSON body) of an admin GET."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{m.metrics_port}{path}",
                                    timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def store_on(m: Master, host: str = "localhost", segment: int = 16 * MiB,
             metadata: str = "P2PHANDSHAKE") -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    rc = s.setup(host, metadata, segment, 16 * MiB, "tcp", "", m.addr)
    assert rc == 0, f"setup({host!r}) returned {rc}"
    return s


@pytest.fixture
def stores():
    """``make(master, host=..., segment=...)``: in-process stores, closed
    at teardown."""
    with closing_stores(store_on) as make:
        yield make


def segment_of(m: Master, key: str) -> str:
    st, j = admin(m, f"/query_key?key={key}")
    assert st == 200, f"/query_key?key={key} answered {st}"
    assert len(j["replicas"]) == 1, j
    return j["replicas"][0]["segment"]


# ---- soft pin (C.7) ----------------------------------------------------------

def test_soft_pin_is_not_restored_after_a_durable_restart(tmp_path, stores):
    ports = (free_port(), free_port(), free_port())
    args = ["--enable_snapshot=true", f"--snapshot_backup_dir={tmp_path}",
            "--enable_snapshot_restore=true"]
    m = Master(args, ports=ports)
    try:
        s = stores(m, metadata=m.metadata_url, segment=32 * MiB)
        pin = ReplicateConfig()
        pin.soft_pin_action = SoftPinAction.ENABLE
        pin.soft_pin_ttl_ms = 600000
        assert s.put("pinned", b"p" * 4096, pin) == 0
        st, j = admin(m, "/query_key?key=pinned")
        assert st == 200 and j["soft_pin"], f"the put should have pinned the key: {j}"
        assert m.metric("master_soft_pin_key_count") == 1
        assert m.stop() == 0, m.log_text()[-3000:]

        m = Master(args, ports=ports)
        st, j = admin(m, "/query_key?key=pinned")
        assert st == 200, "the key should be restored from the operation log"
        assert not j["soft_pin"] and j["soft_pin_remaining_ms"] == 0, \
            f"a restored object must be ordinary cache, not soft-pinned: {j}"
        assert m.metric("master_soft_pin_key_count") == 0
        # a later write with ENABLE pins again (once the store has remounted)
        wait_until(lambda: s.put("pinned-again", b"q" * 4096, pin) == 0, 30.0,
                   "a put after the restart")
        st, j = admin(m, "/query_key?key=pinned-again")
        assert st == 200 and j["soft_pin"], j
    finally:
        m.stop()


def test_soft_pin_is_not_carried_across_an_ha_takeover(tmp_path):
    from ha_helpers import EtcdCluster, HaMaster, have_etcd, stop_all, wait_leader
    if not have_etcd():
        pytest.skip("etcd is not installed (scripts/deps.sh installs etcd-server)")
    etcd = EtcdCluster(1)
    masters, s = [], None
    try:
        for name in ("a", "b"):
            masters.append(HaMaster(etcd, ttl_s=2, extra_args=[
                "--enable_snapshot=true", "--enable_snapshot_restore=true",
                f"--snapshot_backup_dir={tmp_path / name}"]))
        leader = wait_leader(masters, 10.0)
        s = MooncakeDistributedStore()
        assert s.setup("localhost", "P2PHANDSHAKE", 32 * MiB, 16 * MiB, "tcp", "",
                       f"etcd://{etcd.endpoints}") == 0
        pin = ReplicateConfig()
        pin.soft_pin_action = SoftPinAction.ENABLE
        assert s.put("pinned", b"p" * 4096, pin) == 0
        assert admin(leader, "/query_key?key=pinned")[1]["soft_pin"]
        masters.remove(leader)
        assert leader.stop() == 0
        new = wait_leader(masters, 30.0)  # lease TTL plus upstream's warm-up
        st, j = admin(new, "/query_key?key=pinned")
        assert st == 200, "the new leader should have the shipped object"
        assert not j["soft_pin"] and j["soft_pin_remaining_ms"] == 0, \
            f"a promoted object must be ordinary cache, not soft-pinned: {j}"
    finally:
        if s is not None:
            s.close()
        stop_all(masters)
        etcd.stop()


# ---- local_first (C.8) ---------------------------------------------------------

def test_local_first_places_on_the_writer_host_then_the_next_host(stores):
    m = Master(["--allocation_strategy=local_first"])
    try:
        writers = {h: stores(m, host=h, segment=16 * MiB)
                   for h in ("127.0.0.2", "127.0.0.3")}
        last = stores(m, host="127.0.0.4", segment=4 * MiB)
        writers["127.0.0.4"] = last
        for host, s in writers.items():
            for i in range(6):
                key = f"lf-{host}-{i}"
                assert s.put(key, os.urandom(64 * 1024)) == 0
                assert segment_of(m, key).startswith(host + ":"), \
                    f"{key} should be on its writer's host {host}, not {segment_of(m, key)}"
        # the writer's segment full: the next host after 127.0.0.4 by name
        # wraps to 127.0.0.2 (deterministic, not random)
        big = 3 * MiB
        n = 0
        while put_and_host(m, last, f"fill-{n}", big) == "127.0.0.4":
            n += 1
            assert n < 4, "a 4 MiB segment cannot hold four 3 MiB objects"
        assert segment_of(m, f"fill-{n}").startswith("127.0.0.2:"), segment_of(m, f"fill-{n}")
        assert "allocation_strategy" not in m.log_text()  # no "not implemented" warning
    finally:
        m.stop()


def test_free_ratio_first_keeps_two_equal_segments_level(stores):
    """Each put goes to the segment with the most free space in proportion:
    after every put the two equal segments differ by at most one object
    (random placement leaves that band within 16 puts all but 0.4 % of
    the time)."""
    m = Master(["--allocation_strategy=free_ratio_first"])
    try:
        writer = stores(m, host="127.0.0.2", segment=16 * MiB)
        stores(m, host="127.0.0.3", segment=16 * MiB)
        count = {"127.0.0.2": 0, "127.0.0.3": 0}
        for i in range(16):
            count[put_and_host(m, writer, f"fr-{i}", 512 * 1024)] += 1
            assert abs(count["127.0.0.2"] - count["127.0.0.3"]) <= 1, (i, count)
        assert "allocation_strategy" not in m.log_text()
    finally:
        m.stop()


def put_and_host(m, s, key, size):
    assert s.put(key, os.urandom(size)) == 0, f"put of {key} failed"
    return segment_of(m, key).rsplit(":", 1)[0]


def test_unknown_allocation_strategy_warns_and_places_randomly(stores):
    m = Master(["--allocation_strategy=Local_First"])
    try:
        s = stores(m)
        assert s.put("k", b"v") == 0
        assert "--allocation_strategy=Local_First: unknown strategy; using random" \
            in m.log_text()
    finally:
        m.stop()


# ---- dynamic replication (C.10) ----------------------------------------------

HOT = ["--dynamic_replication_heat_window_seconds=5",
       "--dynamic_replication_admission_qps_threshold=1"]  # 5 reads in a window


def read_replicas(s: MooncakeDistributedStore, key: str, times: int) -> List[int]:
    """The memory replicas each of ``times`` lookups saw (the lookups heat the key)."""
    return [sum(1 for d in s.get_replica_desc(key) if d.is_memory_replica())
            for _ in range(times)]


def test_dynamic_replication_observe_logs_and_adds_nothing(stores):
    m = Master(["--dynamic_replication_mode=observe"] + HOT)
    try:
        a = stores(m, segment=16 * MiB)
        stores(m, segment=16 * MiB)
        assert a.put("hot", os.urandom(4096)) == 0
        assert read_replicas(a, "hot", 12) == [1] * 12
        wait_until(lambda: "dynamic replication (observe): key 'hot' is hot" in m.log_text(),
                   5.0, "the observe line")
        assert "copy task" not in m.log_text()
        assert read_replicas(a, "hot", 1) == [1]
    finally:
        m.stop()


def test_dynamic_replication_enforce_adds_a_replica_elsewhere():
    m = Master(["--dynamic_replication_mode=enforce"] + HOT)
    procs = []
    ctl = None
    try:
        env = {"MC_TASK_POLL_INTERVAL_MS": "100", "MC_LOG_LEVEL": "warn"}
        for name in ("A", "B"):
            c = ClientProc(name, env=env)
            procs.append(c)
            c.host = c.setup(m, segment=32 * MiB)
        a, b = procs
        assert a.call("put_random", key="hot", size=64 * 1024, preferred=a.host)["rc"] == 0
        ctl = store_on(m, segment=0)
        # the replica may come while the later lookups run: the first saw one
        assert read_replicas(ctl, "hot", 8)[0] == 1

        def two():
            ends = sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                          for d in ctl.get_replica_desc("hot") if d.is_memory_replica())
            return ends if len(ends) == 2 else None
        ends = wait_until(two, 20.0, "a second replica of the hot key")
        assert ends == sorted([a.host, b.host]), ends
        assert "adds a replica on " + b.host in m.log_text()
        # at max_memory_replicas (2) the key is no longer counted
        assert read_replicas(ctl, "hot", 12) == [2] * 12
    finally:
        if ctl is not None:
            ctl.close()
        for c in procs:
            c.stop()
        m.stop()


# ---- metadata cleanup on timeout (C.11) ----------------------------------------

def metadata_server_bin() -> str:
    return str(Path(master_bin()).with_name("mooncake_http_metadata_server"))


def meta_get(port: int, key: str) -> int:
    url = f"http://127.0.0.1:{port}/metadata?key={urllib.parse.quote(key, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_metadata_cleanup_deletes_from_a_remote_server(monkeypatch):
    meta_port = free_port()
    cluster = f"c{uuid.uuid4().hex[:8]}"
    meta = subprocess.Popen([metadata_server_bin(), f"--port={meta_port}", "--host=127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m = c = None
    try:
        wait_until(lambda: port_accepts(meta_port), 10.0, "the metadata server")
        url = f"http://127.0.0.1:{meta_port}/metadata"
        monkeypatch.setenv("MOONCAKE_TE_META_DATA_SERVER", url)
        monkeypatch.setenv("MC_METADATA_CLUSTER_ID", cluster)
        # the master's own metadata server is off: the port is the remote one's
        m = Master(["--enable_http_metadata_server=false",
                    "--enable_metadata_cleanup_on_timeout=true"],
                   ports=(free_port(), meta_port, free_port()))
        c = ClientProc("dead", env={"MC_METADATA_CLUSTER_ID": cluster})
        seg = c.setup(m, metadata=url, segment=16 * MiB)
        keys = [f"mooncake/{cluster}/ram/{seg}", f"mooncake/{cluster}/rpc_meta/{seg}"]
        assert meta_get(meta_port, keys[0]) == 200, "the client should publish its segment"
        c.kill()
        wait_until(lambda: all(meta_get(meta_port, k) == 404 for k in keys), 20.0,
                   "the expired client's records to be deleted")
        assert "expired" in m.log_text()
        assert "metadata cleanup" not in m.log_text(), m.log_text()[-2000:]
    finally:
        if c is not None:
            c.stop()
        if m is not None:
            m.stop()
        meta.terminate()
        meta.wait(timeout=10)


# ---- rpc_interface (C.1) -------------------------------------------------------

def test_rpc_interface_lo_replaces_the_rpc_address(stores):
    m = Master(["--rpc_interface=lo"])
    try:
        s = stores(m)
        assert s.put("k", b"v") == 0
        log = m.log_text()
        assert "--rpc_interface=lo: rpc address 127.0.0.1" in log
        # the helper passes --rpc_address=127.0.0.1, which is not 0.0.0.0
        assert "--rpc_interface=lo overrides --rpc_address=127.0.0.1" in log
    finally:
        m.stop()
    r = subprocess.run([master_bin(), "--rpc_interface=nosuchnic0", "--port=0",
                        "--metrics_port=0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Failed to resolve rpc_interface=nosuchnic0" in r.stderr, r.stderr

# SPDX-License-Identifier: Apache-2.0
"""KV cache events (--enable_kv_events, docs/events.md) seen by a real ZMQ
SUB subscriber of a real master, key by key against the operations:

* every form of put (put, upsert, put_batch, upsert_batch) publishes one
  "stored" event per key, every field as upstream has it: the key order,
  the types, the big-endian sequence frame, legacy fields, seq_hashes of
  decimal, hex and unparsable keys (u64 max reads -1 in block_hashes);
* every way an object disappears publishes "removed" for exactly the keys
  that went (remove, batch_remove, remove_by_regex, remove_all and its
  "cleared", batch_replica_clear, a dead holder, eviction), medium "disk"
  for an object whose only copy left was on a NoF segment;
* the options off drop their keys and the unparsable keys;
* a queue of capacity 1 drops the oldest and leaves a gap in the sequence;
* /kv_events/status counts what was published, dropped and skipped;
* a subscriber that joins late sees later sequences only, no replay;
* a misconfigured publisher is off and the master runs on;
* HA on etcd: a standby emits nothing (its status is 503) and the new
  leader after kill -9 continues the sequence above anything the old one
  sent.
"""

import json
import os
import time
import urllib.error
import urllib.request
import uuid

import pytest

zmq = pytest.importorskip("zmq", reason="python3-zmq is not installed")
msgpack = pytest.importorskip("msgpack", reason="python3-msgpack is not installed")

from helpers import MiB, ClientProc, Master, free_port, wait_until  # noqa: E402

DEADLINE_S = 20.0
BACKEND = "kv-test-backend"

STORED_KEYS = ["event_id", "timestamp", "event_type", "type", "model_name", "block_size",
               "additional_salt", "lora_name", "tenant_id", "backend_id", "group_id",
               "medium", "dp_rank", "object_key", "seq_hashes", "block_hashes",
               "base_block_idx", "parent_hash", "token_ids", "parent_block_hash"]
REMOVED_KEYS = STORED_KEYS[:17]


def uniq(prefix="kv"):
    return f"{prefix}-{uuid.uuid4().hex}"


def status(master):
    """(HTTP status, decoded JSON) of GET /kv_events/status."""
    url = f"http://127.0.0.1:{master.metrics_port}/kv_events/status"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def status_json(master):
    code, body = status(master)
    assert code == 200, (code, body)
    # the keys in upstream's order
    assert list(json.loads(body, object_pairs_hook=lambda p: dict(p)).keys()) == [
        "enabled", "published_batches", "published_events", "dropped_events",
        "skipped_unparsed_keys"], body
    return json.loads(body)


class Sub:
    """A ZMQ SUB socket on every endpoint given, collecting batches."""

    def __init__(self, *endpoints):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.LINGER, 0)
        for e in endpoints:
            self.sock.connect(e)
        self.batches = []  # (seq, ts, [event as list of (key, value)])
        self.events = []   # every event, as dicts, in arrival order
        self.probes = []   # keys prime() put

    def close(self):
        self.sock.close(0)
        self.ctx.term()

    def poll(self, timeout_s):
        """Take every batch that arrives within timeout_s (at least one wait)."""
        got = 0
        if not self.sock.poll(int(timeout_s * 1000)):
            return 0
        while self.sock.poll(0):
            frames = self.sock.recv_multipart()
            assert len(frames) == 3, f"{len(frames)} frames, not 3"
            assert frames[0] == b"", f"topic {frames[0]!r} is not empty"
            assert len(frames[1]) == 8, f"sequence frame of {len(frames[1])} bytes"
            seq = int.from_bytes(frames[1], "big")
            payload = msgpack.unpackb(frames[2], raw=False, object_pairs_hook=list)
            assert isinstance(payload, list) and len(payload) == 3, payload
            ts, events, dp_rank = payload
            assert isinstance(ts, int) and dp_rank == 0, payload
            assert 0 < len(events) <= 64, len(events)
            self.batches.append((seq, ts, events))
            self.events += [dict(e) for e in events]
            got += 1
        return got

    def wait_for(self, cond, what, timeout=DEADLINE_S):
        """Collect until cond(self.events) is true."""
        deadline = time.monotonic() + timeout
        while not cond(self.events):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; got "
                                     f"{[(e['event_type'], e.get('object_key')) for e in self.events][-20:]}")
            self.poll(min(left, 0.2))

    def keys_of(self, kind):
        return [e.get("object_key") for e in self.events if e["event_type"] == kind]

    def prime(self, client):
        """Wait until the subscription reaches the publisher (ZMQ's slow
        joiner): put probe keys until one's event arrives, then forget
        everything seen so far."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            # a u64 key: published whatever the options
            h = int.from_bytes(os.urandom(7), "big") + 2**60
            k = str(h)
            assert client.call("put", key=k, hex="00")["rc"] == 0
            self.probes.append(k)
            if time.monotonic() > deadline:
                raise AssertionError("no event reached the subscriber")
            t_end = time.monotonic() + 0.3
            while time.monotonic() < t_end:
                self.poll(0.05)
                if any(e["seq_hashes"] == [h] for e in self.events):
                    self.batches.clear()
                    self.events.clear()
                    return


def kv_args(endpoint, *extra):
    return ["--enable_kv_events=true", f"--kv_events_bind_endpoint={endpoint}",
            f"--kv_events_backend_id={BACKEND}"] + list(extra)


@pytest.fixture
def made():
    """Things to stop at teardown, in reverse order."""
    items = []
    yield items
    for it in reversed(items):
        it.stop() if not isinstance(it, Sub) else it.close()


def start(made, *extra, segment=32 * MiB, master_args=None):
    """A master publishing on a fresh endpoint, a set-up client, a primed
    subscriber."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    m = Master(kv_args(endpoint, *extra) + list(master_args or []))
    made.append(m)
    c = ClientProc("writer")
    made.append(c)
    c.setup(m, segment=segment)
    s = Sub(endpoint)
    made.append(s)
    s.prime(c)
    return m, c, s, endpoint


def check_sequences(sub):
    """Batches arrive with consecutive sequences, events with consecutive ids."""
    seqs = [b[0] for b in sub.batches]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    ids = [e["event_id"] for e in sub.events]
    assert ids == list(range(ids[0], ids[0] + len(ids))), ids


def test_stored_events_every_field(made):
    m, c, s, _ = start(made)
    t0 = int(time.time() * 1000)
    dec, hexk, big = "000123456789", "0xDEADbeef", str(2**64 - 1)
    bad = [uniq("key"), "123abc", "0x", str(2**64)]  # not a u64
    for k in [dec, hexk, big] + bad:
        assert c.call("put", key=k, hex="ab" * 100)["rc"] == 0, k
    assert c.call("upsert", key=dec, hex="cd" * 100)["rc"] == 0
    assert c.call("upsert", key=hexk, hex="cd" * 300)["rc"] == 0  # other size: fresh buffers
    batch = [str(1000 + i) for i in range(5)]
    assert c.call("put_batch", keys=batch, hexes=["ee" * 64] * 5)["rc"] == 0
    r = c.call("invoke", method="upsert_batch", args=[batch[:2], [{"hex": "ff" * 64}] * 2])
    assert r["ret"] in (0, [0, 0]), r
    want = [dec, hexk, big] + bad + [dec, hexk] + batch + batch[:2]
    s.wait_for(lambda ev: len(ev) >= len(want), f"{len(want)} stored events")
    s.poll(0.3)
    assert [e["object_key"] for e in s.events] == want
    check_sequences(s)
    hashes = {dec: 123456789, hexk: 0xDEADBEEF, big: 2**64 - 1}
    hashes.update({k: int(k) for k in batch})
    for b_seq, b_ts, events in s.batches:
        assert b_ts >= t0 and abs(b_ts - time.time() * 1000) < 60000
        for pairs in events:
            e = dict(pairs)
            assert [k for k, _ in pairs] == STORED_KEYS, [k for k, _ in pairs]
            assert e["event_type"] == "stored" and e["type"] == "BlockStored"
            assert e["timestamp"] == b_ts
            for k in ("model_name", "block_size", "additional_salt", "lora_name", "dp_rank",
                      "group_id", "parent_hash", "token_ids", "parent_block_hash"):
                assert e[k] is None, (k, e[k])
            assert e["tenant_id"] == "default" and e["backend_id"] == BACKEND
            assert e["medium"] == "cpu" and e["base_block_idx"] == 0
            k = e["object_key"]
            if k in hashes:
                h = hashes[k]
                assert e["seq_hashes"] == [h], (k, e["seq_hashes"])
                assert e["block_hashes"] == [h - 2**64 if h >= 2**63 else h], k
            else:
                assert k in bad and e["seq_hashes"] == [] and e["block_hashes"] == [], k
    assert dict(s.events[2])["block_hashes"] == [-1]
    st = status_json(m)
    assert st["enabled"] is True
    assert st["skipped_unparsed_keys"] == len(bad)
    assert st["published_events"] >= len(want) + 1
    assert st["published_batches"] >= len(s.batches) + 1
    assert st["dropped_events"] == 0


def test_removed_for_every_way_an_object_goes(made):
    m, c, s, _ = start(made, segment=16 * MiB)
    keys = {n: [f"{n}-{i}" for i in range(3)] for n in
            ("single", "batch", "regex", "clear", "all")}
    for ks in keys.values():
        for k in ks:
            assert c.call("put", key=k, hex="11" * 512)["rc"] == 0
    s.wait_for(lambda ev: len(ev) >= 15, "15 stored events")

    def removed_now(ks, what):
        s.wait_for(lambda ev: set(ks) <= set(s.keys_of("removed")), what)

    assert c.call("remove", key=keys["single"][0])["rc"] == 0
    removed_now(keys["single"][:1], "the removed event of remove")
    r = c.call("invoke", method="batch_remove", args=[keys["batch"]])
    assert r["ret"] == [0, 0, 0], r
    removed_now(keys["batch"], "removed events of batch_remove")
    r = c.call("invoke", method="remove_by_regex", args=["^regex-"])
    assert r["ret"] == 3, r
    removed_now(keys["regex"], "removed events of remove_by_regex")
    r = c.call("batch_replica_clear", keys=keys["clear"])
    assert sorted(r["keys"]) == sorted(keys["clear"]), r
    removed_now(keys["clear"], "removed events of batch_replica_clear")
    before = len(s.events)
    left = keys["single"][1:] + keys["all"] + s.probes
    r = c.call("invoke", method="remove_all", args=[])
    assert r["ret"] == len(left), (r, left)
    s.wait_for(lambda ev: any(e["event_type"] == "cleared" for e in ev), "the cleared event")
    s.poll(0.3)
    tail = s.events[before:]
    assert [e["event_type"] for e in tail] == ["removed"] * len(left) + ["cleared"], tail
    assert sorted(e["object_key"] for e in tail[:-1]) == sorted(left)
    cleared = s.batches[-1][2][-1]
    assert [k for k, _ in cleared] == REMOVED_KEYS
    cl = dict(cleared)
    assert cl["type"] == "AllBlocksCleared" and cl["tenant_id"] == "default"
    assert cl["object_key"] is None and cl["seq_hashes"] == [] and cl["medium"] is None
    for pairs in (p for b in s.batches for p in b[2]):
        e = dict(pairs)
        if e["event_type"] == "removed":
            assert [k for k, _ in pairs] == REMOVED_KEYS
            assert e["type"] == "BlockRemoved" and e["base_block_idx"] is None
    # every key removed exactly once, nothing else
    removed = s.keys_of("removed")
    assert sorted(removed) == sorted([k for ks in keys.values() for k in ks] + s.probes)
    check_sequences(s)

    # a dead holder: its objects go with it
    holder = ClientProc("holder", env={"MC_STORE_HEARTBEAT_MS": "200"})
    made.append(holder)
    hname = holder.setup(m, segment=16 * MiB)
    dead = [uniq("dead") for _ in range(3)]
    for k in dead:
        assert holder.call("put", key=k, hex="22" * 256, preferred=hname)["rc"] == 0
    s.wait_for(lambda ev: set(dead) <= set(s.keys_of("stored")), "stored events of the holder")
    holder.kill()
    removed_now(dead, "removed events of the dead holder's objects")

    # eviction: a 16 MiB segment filled with 1 MiB objects
    ev_keys = [f"evict-{i}" for i in range(40)]
    for k in ev_keys:
        assert c.call("put_random", key=k, size=MiB)["rc"] == 0
    s.wait_for(lambda ev: set(ev_keys) <= set(s.keys_of("stored")), "stored events of 40 puts")
    gone = [k for k in ev_keys if c.call("exist", key=k)["rc"] == 0]
    assert gone, "nothing was evicted"
    s.wait_for(lambda ev: set(gone) <= set(s.keys_of("removed")), "removed events of evictions")
    s.poll(0.3)
    assert set(k for k in s.keys_of("removed") if k.startswith("evict-")) == set(gone)


def test_options_off(made):
    m, c, s, _ = start(made, "--kv_events_emit_legacy_compat=false",
                       "--kv_events_emit_object_key=false")
    assert c.call("put", key=uniq("unparsable"), hex="00")["rc"] == 0
    assert c.call("put", key="0x10", hex="00")["rc"] == 0
    assert c.call("remove", key="0x10")["rc"] == 0
    s.wait_for(lambda ev: len(ev) >= 2, "stored and removed of 0x10")
    s.poll(0.3)
    assert [(e["event_type"], e["seq_hashes"]) for e in s.events] == [
        ("stored", [16]), ("removed", [16])]
    stored = s.batches[0][2][0]
    want = [k for k in STORED_KEYS if k not in ("type", "object_key", "block_hashes",
                                                  "parent_block_hash")]
    assert [k for k, _ in stored] == want
    removed = [k for k, _ in s.batches[-1][2][-1]]
    assert removed == [k for k in want if k not in ("parent_hash", "token_ids")]
    # the unparsable key was counted and never published
    assert status_json(m)["skipped_unparsed_keys"] == 1


def test_queue_overflow_drops_the_oldest_with_a_gap(made):
    m, c, s, _ = start(made, "--kv_events_queue_capacity=1")
    n, rounds = 200, 5
    keys = []
    for r in range(rounds):
        ks = [str(10**6 * (r + 1) + i) for i in range(n)]
        keys += ks
        assert c.call("put_batch", keys=ks, hexes=["00"] * n)["rc"] == 0

    def settled():
        st = status_json(m)
        return st["published_events"] + st["dropped_events"] >= n * rounds + 1

    wait_until(settled, DEADLINE_S, "every event published or dropped")
    # published is sent, not received: on a loaded host the subscriber may
    # still be reading (the last put is never dropped, and events arrive in
    # order, so its event is the last to come)
    s.wait_for(lambda ev: any(e["object_key"] == keys[-1] for e in ev), "the last put's event")
    st = status_json(m)
    assert st["dropped_events"] > 0, st
    got = [e["object_key"] for e in s.events]
    # what arrived is in order, a subsequence of the puts; the last put is never dropped
    pos = [keys.index(k) for k in got]
    assert pos == sorted(pos) and got[-1] == keys[-1]
    # each dropped event took a sequence number (from 1): the last sequence
    # counts every batch sent and every event dropped
    seqs = [b[0] for b in s.batches]
    assert seqs == sorted(seqs)
    assert len(keys) - len(got) == st["dropped_events"], st
    assert seqs[-1] == st["published_batches"] + st["dropped_events"], (seqs[-1], st)
    assert any(b - a > 1 for a, b in zip(seqs, seqs[1:])), f"no gap in {seqs}"


def test_status_and_a_late_subscriber(made):
    m, c, s, endpoint = start(made)
    for i in range(5):
        assert c.call("put", key=str(i), hex="00")["rc"] == 0
    s.wait_for(lambda ev: len(ev) >= 5, "5 stored events")
    last = s.batches[-1][0]
    st = status_json(m)
    assert st["published_events"] >= 6 and st["published_batches"] >= len(s.batches) + 1
    late = Sub(endpoint)
    made.append(late)
    late.prime(c)  # puts probe keys until the late subscriber hears one
    for i in range(5, 10):
        assert c.call("put", key=str(i), hex="00")["rc"] == 0
    late.wait_for(lambda ev: len(ev) >= 5, "5 events at the late subscriber")
    s.wait_for(lambda ev: str(9) in s.keys_of("stored"), "the early subscriber's events")
    # no replay: the late subscriber's first batch is after the early one's last
    assert late.batches[0][0] > last
    # the same sequence number means the same batch: no reuse
    early = {b[0]: b[2] for b in s.batches}
    for seq, _, events in late.batches:
        assert early[seq] == events
    st2 = status_json(m)
    assert st2["published_events"] > st["published_events"]


def test_misconfigured_publisher_is_off_and_the_master_runs(made):
    m = Master(["--enable_kv_events=true", "--kv_events_backend_id=x"])
    made.append(m)
    # the publisher starts after the admin port accepts: wait for its line
    wait_until(lambda: "KV events are off" in m.log_text(), DEADLINE_S, "the error line")
    assert "--kv_events_bind_endpoint and --kv_events_backend_id" in m.log_text()
    assert status_json(m) == {"enabled": False, "published_batches": 0, "published_events": 0,
                              "dropped_events": 0, "skipped_unparsed_keys": 0}
    # a bind that fails (the port is the master's own RPC port)
    m2 = Master(kv_args(f"tcp://127.0.0.1:{m.port}"))
    made.append(m2)
    wait_until(lambda: "cannot bind --kv_events_bind_endpoint" in m2.log_text(), DEADLINE_S,
               "the bind error line")
    assert status_json(m2)["enabled"] is False
    c = ClientProc("c")
    made.append(c)
    c.setup(m2)
    assert c.call("put", key="k", hex="00")["rc"] == 0


def test_nof_copy_is_removed_as_disk(tmp_path, made):
    test_nof = pytest.importorskip("test_nof")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    cl = test_nof.Cluster(tmp_path, master_args=kv_args(endpoint))
    made.append(cl.master)
    for p in cl.procs:
        made.append(p)
    s = Sub(endpoint)
    made.append(s)
    s.prime(cl.reader)
    k = "77"
    assert cl.put(k, b"x" * 4096) == 0
    s.wait_for(lambda ev: k in s.keys_of("stored"), "the stored event")
    assert [e["medium"] for e in s.events if e["object_key"] == k] == ["cpu"]
    cl.writer.kill()  # the memory replica dies; the NoF copy stays: no event
    wait_until(lambda: len(cl.reader.call("replica_desc", key=k)["replicas"]) == 1,
               DEADLINE_S, "the master to drop the dead writer's replica")
    s.poll(0.3)
    assert k not in s.keys_of("removed")
    assert cl.reader.call("remove", key=k, force=True)["rc"] == 0
    s.wait_for(lambda ev: k in s.keys_of("removed"), "the removed event")
    assert [e["medium"] for e in s.events if e["object_key"] == k] == ["cpu", "disk"]


def test_ha_standby_is_silent_and_a_takeover_continues_the_sequence(made):
    ha = pytest.importorskip("ha_helpers")
    if not ha.have_etcd():
        pytest.skip("etcd is not installed")
    etcd = ha.EtcdCluster(1)
    made.append(etcd)
    eps = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]
    masters = [ha.HaMaster(etcd, ttl_s=2, extra_args=kv_args(e)) for e in eps]
    made.extend(masters)
    leader = ha.wait_leader(masters, 10.0)
    standby = [x for x in masters if x is not leader][0]
    code, body = status(standby)
    assert code == 503 and "service plane is not active" in body, (code, body)
    c = ClientProc("ha-client", env={"MC_STORE_HEARTBEAT_MS": "200"})
    made.append(c)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                              f"etcd://{etcd.endpoints}"])
    assert r["rc"] == 0, c.log_text()
    s = Sub(*eps)
    made.append(s)
    s.prime(c)
    for i in range(5):
        assert c.call("put", key=str(i), hex="00")["rc"] == 0
    s.wait_for(lambda ev: len(ev) >= 5, "5 events of the first leader")
    old_last = s.batches[-1][0]
    n_old = len(s.batches)
    leader.kill()
    new = ha.wait_leader([standby], 20.0)
    assert new is standby
    deadline = time.monotonic() + DEADLINE_S
    k = "4242"
    while c.call("put", key=k, hex="00", timeout=30)["rc"] != 0:
        assert time.monotonic() < deadline, "no put succeeded on the new leader"
        time.sleep(0.1)
    s.wait_for(lambda ev: k in s.keys_of("stored"), "the new leader's stored event")
    new_batches = s.batches[n_old:]
    assert new_batches[0][0] > old_last, (new_batches[0][0], old_last)
    seqs = [b[0] for b in s.batches]
    assert len(set(seqs)) == len(seqs), "a sequence number was used twice"
    assert status_json(new)["enabled"] is True

# SPDX-License-Identifier: Apache-2.0
"""Takeover with the full index: the operation log shipped through etcd
(docs/ha.md, "Takeover with the full index").

Masters run with ``--enable_ha --enable_snapshot --enable_snapshot_restore``:
the leader's acknowledged records go to etcd under
``mooncake-store/<cluster>/oplog/`` in transactions fenced by its term, and
standbys follow them.  Real etcd, real masters, real client processes.

* kill -9 of the leader during a put/get load: every acknowledged put reads
  back with its own bytes through the new leader once the client has
  remounted, no get ever returns wrong bytes, writes resume within 10 s.
* kill -9 of the leader while three clients' batched puts share its
  transactions (the log writer gathers them): every acknowledged put of
  every client reads back through the new leader.
* a SIGSTOPped leader that wakes after a standby took over appends nothing
  to the log in etcd, answers no write, and exits.
* a standby started late catches up from the snapshot in etcd and the log
  after it; the log keys before a snapshot are deleted (etcd stays bounded).
* a log entry corrupted in etcd is refused by its CRC, and the standby that
  read it does not take over on it.
"""

import hashlib
import threading
import time

import pytest

from ha_helpers import HaMaster, have_etcd, wait_leader, wait_remounted
from ha_helpers import cleanup, etcd  # noqa: F401 (fixtures)
from helpers import MiB, ClientProc, wait_until

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd is not installed "
                                "(scripts/deps.sh installs etcd-server)")

TTL_S = 2
LOG_PREFIX = "mooncake-store/mooncake_cluster/oplog/log/"
SNAP_META = "mooncake-store/mooncake_cluster/oplog/snapmeta"


def ship_master(etcd, tmp_path, name, extra=()):
    d = tmp_path / name
    return HaMaster(etcd, ttl_s=TTL_S, extra_args=[
        "--enable_snapshot=true", "--enable_snapshot_restore=true",
        f"--snapshot_backup_dir={d}", "--snapshot_restore_grace_seconds=30"] + list(extra))


def etcd_client(cleanup, etcd, name="client"):
    c = ClientProc(name, env={"MC_STORE_HEARTBEAT_MS": "200"})
    cleanup.append(c)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 48 * MiB, 8 * MiB, "tcp", "",
                              f"etcd://{etcd.endpoints}"])
    assert r["rc"] == 0, c.log_text()
    return c


def value_of(key: str) -> bytes:
    """The bytes a key must hold: derived from the key, 1-4 KiB."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * 128)[: 1024 + seed[0] * 12]


def log_terms(etcd):
    """{log key: term} of the log in etcd (the term is the value's first 8
    bytes; bit 63 marks a delta-coded value)."""
    return {k: int.from_bytes(v[:8], "little") & ~(1 << 63)
            for k, v in etcd.range_prefix(LOG_PREFIX)}


def read_back(c, keys):
    """Keys that do not read back with their bytes, once the client has
    remounted on the new leader (its objects serve from then on)."""
    wait_until(lambda: c.call("get", key=keys[0]).get("hex") == value_of(keys[0]).hex(),
               10.0, "the client to remount its segment on the new leader", interval=0.1)
    wrong = []
    for k in keys:
        r = c.call("get", key=k)
        if r.get("hex") != value_of(k).hex():
            wrong.append((k, r))
    return wrong


def test_kill9_under_load_loses_no_acknowledged_put(etcd, cleanup, tmp_path):
    masters = []
    cleanup.append(masters)
    masters += [ship_master(etcd, tmp_path, "a"), ship_master(etcd, tmp_path, "b")]
    leader = wait_leader(masters, 10.0)
    c = etcd_client(cleanup, etcd)
    acked, bad_gets, first_after = [], [], []
    killed = threading.Event()
    stop = threading.Event()
    t_kill = [0.0]

    def load():
        i = 0
        while not stop.is_set():
            k = f"k{i}"
            i += 1
            if c.call("put", key=k, hex=value_of(k).hex(), timeout=30)["rc"] == 0:
                acked.append(k)
                if killed.is_set() and not first_after:
                    first_after.append(time.monotonic() - t_kill[0])
            if acked and i % 3 == 0:
                g = acked[(i * 7) % len(acked)]
                r = c.call("get", key=g, timeout=30)
                # not found is allowed while the segment awaits its remount;
                # bytes are either the right ones or none
                if r.get("len", 0) > 0 and r.get("hex") != value_of(g).hex():
                    bad_gets.append((g, r))

    th = threading.Thread(target=load)
    th.start()
    try:
        wait_until(lambda: len(acked) >= 60, 30.0, "60 acknowledged puts")
        t_kill[0] = time.monotonic()
        killed.set()
        leader.kill()
        masters.remove(leader)
        n_before = len(acked)
        wait_until(lambda: len(acked) >= n_before + 30, 20.0, "30 puts after the failover")
    finally:
        stop.set()
        th.join(timeout=60)
    assert first_after and first_after[0] < 10.0, first_after
    print(f"\nwrites resumed {first_after[0]:.2f} s after kill -9; {len(acked)} puts acked")
    new = wait_leader(masters, 5.0)
    assert new.metric("master_ha_oplog_seq") > 0
    assert not bad_gets, bad_gets[:3]
    # every acknowledged put, also those before the kill, reads back intact
    wrong = read_back(c, acked)
    assert not wrong, f"{len(wrong)} of {len(acked)} lost or wrong, e.g. {wrong[:2]}"


def test_kill9_with_clients_gathered_into_one_transaction(etcd, cleanup, tmp_path):
    """Several clients' batched puts at once: the leader's log writer gathers
    the rounds of the clients its last transaction answered into its next
    one (ship.c, gather_ready), so one transaction carries records of
    several clients.  kill -9 of the leader mid-load: every acknowledged
    put of every client reads back through the new leader."""
    masters = []
    cleanup.append(masters)
    masters += [ship_master(etcd, tmp_path, "a"), ship_master(etcd, tmp_path, "b")]
    leader = wait_leader(masters, 10.0)
    clients = [etcd_client(cleanup, etcd, f"client{j}") for j in range(3)]
    acked = [[] for _ in clients]
    killed, stop = threading.Event(), threading.Event()
    after = [0]

    def load(j):
        c, i = clients[j], 0
        while not stop.is_set() and len(acked[j]) < 600:
            keys = [f"g{j}-{i + n}" for n in range(8)]
            i += 8
            r = c.call("put_batch", keys=keys, hexes=[value_of(k).hex() for k in keys],
                       timeout=30)
            if r["rc"] == 0:
                acked[j].extend(keys)
                if killed.is_set():
                    after[0] += len(keys)

    threads = [threading.Thread(target=load, args=(j,)) for j in range(len(clients))]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sum(map(len, acked)) >= 240, 30.0, "240 acknowledged puts")
        killed.set()
        leader.kill()
        masters.remove(leader)
        wait_until(lambda: after[0] >= 48, 20.0, "48 puts after the failover")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    wait_remounted(wait_leader(masters, 5.0), len(clients))
    for j, c in enumerate(clients):
        wrong = read_back(c, acked[j])
        assert not wrong, (f"client {j}: {len(wrong)} of {len(acked[j])} lost or wrong, "
                           f"e.g. {wrong[:2]}")


def test_sigstopped_leader_cannot_append_when_it_wakes(etcd, cleanup, tmp_path):
    masters = []
    cleanup.append(masters)
    masters += [ship_master(etcd, tmp_path, "a"), ship_master(etcd, tmp_path, "b")]
    old = wait_leader(masters, 10.0)
    other = next(m for m in masters if m is not old)
    old_term = int(old.metric("master_ha_term"))
    pinned = ClientProc("pinned")
    cleanup.append(pinned)
    r = pinned.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                                   old.addr])
    assert r["rc"] == 0, pinned.log_text()
    assert pinned.call("put", key="k0", hex=value_of("k0").hex())["rc"] == 0
    old_keys = {k for k, t in log_terms(etcd).items() if t == old_term}
    assert old_keys, "the leader wrote no log key to etcd"

    old.pause()
    try:
        wait_until(lambda: other.admin("/ha_status") == "serving", 10.0,
                   "the standby to take over")
    finally:
        old.resume()
    assert pinned.call("put", key="k1", hex=value_of("k1").hex())["rc"] != 0
    # it steps down, and with the log shipped it exits for a restart
    wait_until(lambda: not old.alive(), 10.0, "the woken leader to exit")
    assert old.proc.returncode == 1, old.log_text()
    terms = log_terms(etcd)
    assert {k for k, t in terms.items() if t == old_term} == old_keys, \
        "a deposed leader appended to the log"
    new_term = int(other.metric("master_ha_term"))
    assert set(terms.values()) <= {old_term, new_term}
    # the new leader serves, and its own appends carry its term
    c = etcd_client(cleanup, etcd, "follower")
    assert c.call("put", key="k2", hex=value_of("k2").hex())["rc"] == 0
    assert max(log_terms(etcd).values()) == new_term


def test_late_standby_catches_up_after_compaction(etcd, cleanup, tmp_path):
    masters = []
    cleanup.append(masters)
    masters.append(ship_master(etcd, tmp_path, "a", ["--snapshot_interval_seconds=1"]))
    leader = wait_leader(masters, 10.0)
    c = etcd_client(cleanup, etcd)
    keys = []
    # objects enough that the snapshot's own records (its begin and end, the
    # segment, the client) weigh little beside theirs in the size bound
    # below, however few single puts the loop gets in on a loaded machine
    for _ in range(4):
        batch = [f"c{len(keys) + i}" for i in range(100)]
        assert c.call("put_batch", keys=batch,
                      hexes=[value_of(k).hex() for k in batch])["rc"] == 0
        keys += batch
    deadline = time.monotonic() + 30.0
    # write until the leader has compacted at least twice
    while (leader.metric("master_ha_oplog_snapshots_total") or 0) < 2:
        assert time.monotonic() < deadline, "no snapshot in etcd"
        k = f"c{len(keys)}"
        assert c.call("put", key=k, hex=value_of(k).hex())["rc"] == 0
        keys.append(k)
        time.sleep(0.02)
    meta = etcd.get(SNAP_META)
    assert meta is not None
    snap_seq = int(meta.split()[0], 16)
    seqs = [int(k.rsplit("/", 1)[1], 16) for k in log_terms(etcd)]
    # the log before the snapshot is gone: etcd holds a snapshot and the tail
    assert all(s > snap_seq for s in seqs), (snap_seq, seqs)
    assert len(seqs) < len(keys)
    chunks = etcd.range_prefix("mooncake-store/mooncake_cluster/oplog/snap/")
    snaps = {k.split("/")[4] for k, _ in chunks}
    assert len(snaps) == 1, snaps
    # the chunks are coded as the log's values are (bit 63 of the term):
    # the records of c0, c1, ... shrink from ~110 bytes each to ~18 (474
    # keys took 8505 bytes here, 125 of them the snapshot's own records)
    assert chunks and all(v[7] & 0x80 for _, v in chunks), [v[:9].hex() for _, v in chunks]
    assert sum(len(v) for _, v in chunks) < 40 * len(keys), (len(keys), [len(v) for _, v in chunks])

    late = ship_master(etcd, tmp_path, "late")
    masters.append(late)
    for i in range(20):
        k = f"d{i}"
        assert c.call("put", key=k, hex=value_of(k).hex())["rc"] == 0
        keys.append(k)
    wait_until(lambda: late.metric("master_ha_oplog_seq") ==
               leader.metric("master_ha_oplog_seq"), 10.0, "the late standby to catch up")
    assert "loaded the snapshot" in late.log_text()
    leader.kill()
    masters.remove(leader)
    wait_leader(masters, 10.0)
    wrong = read_back(c, keys)
    assert not wrong, f"{len(wrong)} of {len(keys)} lost or wrong, e.g. {wrong[:2]}"


def test_corrupt_log_entry_is_refused(etcd, cleanup, tmp_path):
    masters = []
    cleanup.append(masters)
    masters.append(ship_master(etcd, tmp_path, "a"))
    leader = wait_leader(masters, 10.0)
    c = etcd_client(cleanup, etcd)
    for i in range(10):
        assert c.call("put", key=f"x{i}", hex=value_of(f"x{i}").hex())["rc"] == 0
    entries = etcd.range_prefix(LOG_PREFIX)
    key, val = entries[-1]
    bad = bytearray(val)
    bad[-1] ^= 0x5A  # a byte of the last record's payload
    assert etcd.put_bytes(key, bytes(bad))

    late = ship_master(etcd, tmp_path, "late")
    masters.append(late)
    wait_until(lambda: (late.metric("master_ha_oplog_refused_total") or 0) >= 1, 10.0,
               "the standby to refuse the corrupt entry")
    assert "REFUSING corrupt log entry" in late.log_text()
    assert late.metric("master_ha_oplog_seq") < leader.metric("master_ha_oplog_seq")
    # (the client closes while there is a leader: with none to come, its
    # close would wait out MC_STORE_FAILOVER_WAIT_MS for one)
    c.stop()
    # it does not take over on a log it could not read to the end
    leader.kill()
    masters.remove(leader)
    end = time.monotonic() + 3 * TTL_S + 1
    while time.monotonic() < end:
        assert late.role() == "standby"
        time.sleep(0.1)
    assert late.alive()


def test_round_larger_than_an_etcd_request_is_split(etcd, cleanup, tmp_path):
    """One BATCH_PUT_END of 3000 objects with 200-byte keys is one group-commit
    round of ~1 MB: more than one etcd request may carry.  It goes as several
    log keys; a standby reassembles the records that straddle them."""
    masters = []
    cleanup.append(masters)
    masters.append(ship_master(etcd, tmp_path, "a"))
    leader = wait_leader(masters, 10.0)
    masters.append(ship_master(etcd, tmp_path, "b"))
    c = etcd_client(cleanup, etcd)
    keys = [f"{i:06d}-" + "k" * 193 for i in range(3000)]
    puts0 = leader.metric("master_ha_oplog_puts_total")
    r = c.call("put_batch", keys=keys, hexes=[value_of(k)[:16].hex() for k in keys],
               timeout=120)
    assert r["rc"] == 0, r
    assert leader.metric("master_ha_oplog_puts_total") - puts0 >= 2
    assert max(len(v) for _, v in etcd.range_prefix(LOG_PREFIX)) <= 768 * 1024 + 8
    standby = masters[1]
    wait_until(lambda: standby.metric("master_ha_oplog_seq") ==
               leader.metric("master_ha_oplog_seq"), 10.0, "the standby to follow")
    leader.kill()
    masters.remove(leader)
    wait_leader(masters, 10.0)
    wait_until(lambda: c.call("get", key=keys[0]).get("len", 0) == 16, 10.0,
               "the client to remount on the new leader", interval=0.1)
    got = c.call("get_batch", keys=keys, timeout=120)["hexes"]
    assert got == [value_of(k)[:16].hex() for k in keys]


def test_clean_stop_hands_over_with_the_full_index(etcd, cleanup, tmp_path):
    masters = []
    cleanup.append(masters)
    masters += [ship_master(etcd, tmp_path, "a"), ship_master(etcd, tmp_path, "b")]
    leader = wait_leader(masters, 10.0)
    c = etcd_client(cleanup, etcd)
    keys = [f"s{i}" for i in range(20)]
    for k in keys:
        assert c.call("put", key=k, hex=value_of(k).hex())["rc"] == 0
    masters.remove(leader)
    assert leader.stop() == 0  # SIGTERM: the log is drained under the term, then handed over
    wait_leader(masters, 5.0)
    wrong = read_back(c, keys)
    assert not wrong, wrong[:2]

# SPDX-License-Identifier: Apache-2.0
"""--enable_oplog, as upstream's production command uses it (docs/ha.md,
"Upstream's production command").

Masters run exactly with ``--enable_ha=true --ha_backend_type=etcd
--ha_backend_connstring="h1;h2;h3" --enable_oplog=true`` (plus their test
ports): the log is shipped through etcd (no snapshot flags, no local
directory), several transactions in flight, acknowledgements in order.
Real etcd (3 members, or 1), real masters, real client processes.

* kill -9 and SIGSTOP of the leader under a put load: every acknowledged
  put reads back with its own bytes through the new leader;
* kill -9 of the leader while transactions that each carry several log
  keys (group commit) are in flight: every acknowledged put reads back, and
  the log the new term leaves in etcd has no gap;
* the log's transactions go over etcd's gRPC API: kill -9 of the leader
  while 3-member etcd has several of them in flight loses no acknowledged
  put; an etcd that answers only its JSON gateway gets the log that way
  (one warning), and a takeover on it loses nothing;
* an etcd member killed while the log ships: writes go on, nothing is lost;
* etcd unreachable past the lease TTL during writes: the leader stops
  acknowledging, and nothing it acknowledged is lost after recovery;
* etcd stopped for a moment under batched puts from four clients: nothing
  is acknowledged before it commits again, nothing acknowledged is lost;
* the tuning flags: --oplog_batch_max_entries bounds the records of a log
  key, --oplog_poll_interval_ms the standby's reads (the log is read to its
  end at a takeover all the same), --batch_oplog_retry_timeout_sec how long
  a standby keeps failing before it exits;
* upstream's start-up rules (FATAL texts) and exit status.
"""

import collections
import hashlib
import subprocess
import threading
import time

import pytest

from ha_helpers import (EtcdCluster, GatewayOnlyEtcd, OplogMaster, have_etcd, pause_etcd,
                        resume_etcd, stop_all, wait_leader, wait_remounted)
from ha_helpers import cleanup, etcd  # noqa: F401 (fixtures)
from helpers import MiB, ClientProc, master_bin, wait_until

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd is not installed "
                                "(scripts/deps.sh installs etcd-server)")

LOG_PREFIX = "mooncake-store/mooncake_cluster/oplog/log/"
TTL = ["--ha_lease_ttl_sec=2"]  # our flag: the tests wait less for a dead leader


@pytest.fixture
def etcd3():
    e = EtcdCluster(3)
    try:
        yield e
    finally:
        e.stop()


def value_of(key: str) -> bytes:
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * 64)[: 512 + seed[0] * 4]


def store_client(cleanup, etcd, name="client"):
    c = ClientProc(name, env={"MC_STORE_HEARTBEAT_MS": "200"})
    cleanup.append(c)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 48 * MiB, 8 * MiB, "tcp", "",
                              f"etcd://{etcd.endpoints}"])
    assert r["rc"] == 0, c.log_text()
    return c


def lost(c, keys):
    """Acknowledged keys that do not read back with their bytes, once the
    client has remounted on the new leader."""
    try:
        wait_until(lambda: c.call("get", key=keys[0]).get("hex") == value_of(keys[0]).hex(),
                   15.0, "the client to remount its segment on the new leader", interval=0.1)
    except AssertionError:
        pass  # reported below, key by key
    r = c.call("get_batch", keys=keys, timeout=120)
    bad = [k for k, h in zip(keys, r["hexes"]) if h != value_of(k).hex()]
    return [(k, c.call("get", key=k)) for k in bad[:3]] + bad[3:]


def loss_report(bad, acked, procs):
    """The assertion message for acknowledged puts lost: how many, the
    first ones, and the end of each process's log (a loss seen once in a
    loaded CI run left nothing else to go on)."""
    logs = "\n".join(f"--- {name} ---\n{p.log_text()[-2500:]}" for name, p in procs)
    return f"{len(bad)} of {len(acked)} acknowledged puts lost, e.g. {bad[:3]}\n{logs}"


class PutLoad:
    """A thread putting k0, k1, ... and recording when each was acknowledged."""

    def __init__(self, c, prefix="k"):
        self.c, self.prefix = c, prefix
        self.acked, self.times = [], []
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run)
        self.th.start()

    def _run(self):
        i = 0
        while not self.stop_ev.is_set():
            k = f"{self.prefix}{i}"
            i += 1
            if self.c.call("put", key=k, hex=value_of(k).hex(), timeout=30)["rc"] == 0:
                self.acked.append(k)
                self.times.append(time.monotonic())

    def wait_more(self, n, timeout, what):
        n0 = len(self.acked)
        wait_until(lambda: len(self.acked) >= n0 + n, timeout, what)

    def stop(self):
        self.stop_ev.set()
        self.th.join(timeout=60)


def test_production_command_kill9_and_sigstop_lose_nothing(etcd3, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [OplogMaster(etcd3, TTL) for _ in range(3)]
    leader = wait_leader(masters, 15.0)
    assert "operation log is shipped through etcd" in leader.log_text()
    # three writers: several rounds in flight to etcd at once
    clients = [store_client(cleanup, etcd3, f"client{i}") for i in range(3)]
    loads = [PutLoad(c, f"w{i}-") for i, c in enumerate(clients)]
    load = loads[0]
    try:
        load.wait_more(50, 30.0, "50 acknowledged puts")
        leader.kill()  # kill -9
        masters.remove(leader)
        load.wait_more(50, 30.0, "50 puts on the second leader")
        second = wait_leader(masters, 10.0)
        second.pause()  # SIGSTOP
        try:
            other = next(m for m in masters if m is not second)
            wait_until(lambda: other.admin("/ha_status") == "serving", 15.0,
                       "the third master to take over")
        finally:
            second.resume()
        load.wait_more(50, 30.0, "50 puts on the third leader")
        # the woken leader is fenced: it steps down and exits for a restart
        wait_until(lambda: not second.alive(), 10.0, "the woken leader to exit")
        assert second.proc.returncode == 1, second.log_text()
    finally:
        for ld in loads:
            ld.stop()
    wait_remounted(wait_leader(masters, 10.0), len(clients))
    for c, ld in zip(clients, loads):
        bad = lost(c, ld.acked)
        assert not bad, f"{len(bad)} of {len(ld.acked)} acknowledged puts lost, e.g. {bad[:3]}"
    assert etcd3.range_prefix(LOG_PREFIX)


class BatchLoad(PutLoad):
    """A thread putting batches of ``n`` keys; a batch's keys count as
    acknowledged when the whole batch was."""

    def __init__(self, c, prefix, n=16):
        self.n = n
        super().__init__(c, prefix)

    def _run(self):
        i = 0
        while not self.stop_ev.is_set():
            keys = [f"{self.prefix}{i + j}" for j in range(self.n)]
            i += self.n
            r = self.c.call("put_batch", keys=keys, hexes=[value_of(k).hex() for k in keys],
                            timeout=30)
            if r["rc"] == 0:
                self.acked += keys
                self.times.append(time.monotonic())


def start_batch_loads(cleanup, etcd, prefix, n=16, first=64):
    """Four store clients putting batches of ``n`` keys, each with ``first``
    puts acknowledged; the loads are stopped if that does not come."""
    clients = [store_client(cleanup, etcd, f"client{i}") for i in range(4)]
    loads = [BatchLoad(c, f"{prefix}{i}-", n=n) for i, c in enumerate(clients)]
    try:
        for ld in loads:
            ld.wait_more(first, 30.0, f"{first} acknowledged puts per client")
    except BaseException:
        for ld in loads:
            ld.stop()
        raise
    return clients, loads


def test_leader_killed_with_grouped_rounds_in_flight(etcd, cleanup):
    """Group commit in a race: with --oplog_batch_max_entries=1 every record
    is a log key of its own, so a batch put's round is many keys, and a free
    etcd writer sends all the keys queued in one transaction (they share a
    mod_revision in etcd) while other transactions are in flight.  Four
    clients keep rounds coming; the leader is killed -9 in the middle.
    Every acknowledged put reads back through the new leader, and the log
    the new term left in etcd has no gap (its first transaction deleted
    whatever the dead leader had written beyond one)."""
    masters = []
    cleanup.append(masters)
    masters += [OplogMaster(etcd, TTL + ["--oplog_batch_max_entries=1"]) for _ in range(2)]
    leader = wait_leader(masters, 15.0)
    clients, loads = start_batch_loads(cleanup, etcd, "g")
    try:
        per_txn = collections.Counter(rev for _, rev in etcd.range_revisions(LOG_PREFIX))
        assert max(per_txn.values()) > 1, "no transaction carried more than one log key"
        leader.kill()  # kill -9, with rounds in flight
        masters.remove(leader)
        new = wait_leader(masters, 15.0)
        for ld in loads:
            ld.wait_more(32, 40.0, "32 acknowledged puts per client on the new leader")
    finally:
        for ld in loads:
            ld.stop()
    wait_remounted(new, len(clients))
    for c, ld in zip(clients, loads):
        bad = lost(c, ld.acked)
        assert not bad, f"{len(bad)} of {len(ld.acked)} acknowledged puts lost, e.g. {bad[:3]}"
    seqs = [int(k.rsplit("/", 1)[1], 16) for k, _ in etcd.range_revisions(LOG_PREFIX)]
    assert seqs and seqs == list(range(seqs[0], seqs[0] + len(seqs))), \
        f"a gap in the log left in etcd: {len(seqs)} keys from {seqs[:1]} to {seqs[-1:]}"


class TrackedBatchLoad(BatchLoad):
    """A BatchLoad of small values (small_value) that also keeps the keys
    of the batches that were not acknowledged (in flight when the leader
    died, or refused)."""

    def __init__(self, c, prefix, n=16):
        self.unacked = []
        super().__init__(c, prefix, n)

    def _run(self):
        i = 0
        while not self.stop_ev.is_set():
            keys = [f"{self.prefix}{i + j}" for j in range(self.n)]
            i += self.n
            r = self.c.call("put_batch", keys=keys,
                            hexes=[small_value(k).hex() for k in keys], timeout=30)
            if r["rc"] == 0:
                self.acked += keys
                self.times.append(time.monotonic())
            else:
                self.unacked += keys


def small_value(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest() * 2


def not_small(c, keys, absent_ok=False):
    """Keys that do not read back with their small_value (or, with
    ``absent_ok``, with nothing: a put never acknowledged is absent or
    whole)."""
    if not keys:
        return []
    r = c.call("get_batch", keys=keys, timeout=300)
    ok = ("", ) if absent_ok else ()
    return [k for k, h in zip(keys, r["hexes"]) if h not in ok + (small_value(k).hex(), )]


def test_takeovers_on_snapshots_walked_from_the_index_under_load(etcd, cleanup):
    """The leader keeps no replay state of its log: its snapshots in etcd
    are walked from its index (a fuzzy walk over many loop turns) while
    batched puts keep coming, and the log keys before each one are
    deleted.  Twice: a standby started after the compaction loads the
    newest snapshot and the log after it, then the leader is killed -9
    with puts in flight and the standby takes over (the second time, on
    the snapshots of a leader that itself took over).  Every acknowledged
    put, and every object of the index the walks went over, reads back
    with its own bytes; a put never acknowledged is absent or whole."""
    flags = TTL + ["--snapshot_interval_seconds=1"]
    masters = []
    cleanup.append(masters)
    masters.append(OplogMaster(etcd, flags))
    leader = wait_leader(masters, 15.0)
    # an index large enough that a walk takes many loop turns (1 ms each)
    seed = store_client(cleanup, etcd, "seed")
    base = [f"s{i}" for i in range(30000)]
    for i in range(0, len(base), 1000):
        keys = base[i:i + 1000]
        assert seed.call("put_batch", keys=keys, hexes=[small_value(k).hex() for k in keys],
                         timeout=60)["rc"] == 0
    clients = [store_client(cleanup, etcd, f"client{i}") for i in range(4)]
    loads = [TrackedBatchLoad(c, f"t{i}-") for i, c in enumerate(clients)]
    lates = []
    try:
        for _ in range(2):
            n0 = leader.metric("master_ha_oplog_snapshots_total") or 0
            wait_until(lambda: (leader.metric("master_ha_oplog_snapshots_total") or 0) >= n0 + 2,
                       40.0, "two snapshots in etcd written under the load")
            assert "the index walked for a snapshot" in leader.log_text()
            late = OplogMaster(etcd, flags)
            masters.append(late)
            lates.append(late)
            wait_until(lambda: "loaded the snapshot" in late.log_text(), 20.0,
                       "the late standby to load the snapshot")
            seq = leader.metric("master_ha_oplog_seq")
            wait_until(lambda: (late.metric("master_ha_oplog_seq") or 0) >= seq, 20.0,
                       "the late standby to follow the log after the snapshot")
            for ld in loads:
                ld.wait_more(16, 20.0, "more acknowledged puts while the standby follows")
            leader.kill()  # kill -9, with batches in flight
            masters.remove(leader)
            leader = wait_leader(masters, 15.0)
            assert leader is late
            for ld in loads:
                ld.wait_more(32, 40.0, "32 acknowledged puts per client on the new leader")
    finally:
        for ld in loads:
            ld.stop()
    procs = [("leader", leader)] + [(f"late{i}", m) for i, m in enumerate(lates)]
    for c, ld in zip(clients, loads):
        # the client serves its objects again once it has remounted
        wait_until(lambda: not not_small(c, ld.acked[:1]), 15.0,
                   "the client to remount its segment on the new leader", interval=0.1)
        bad = not_small(c, ld.acked)
        assert not bad, loss_report(bad, ld.acked, procs)
        assert not not_small(c, ld.unacked, absent_ok=True)
    bad = not_small(seed, base)
    assert not bad, loss_report(bad, base, procs)


GRPC_LINE = "guarded transactions go over etcd's gRPC API"
NO_GRPC_LINE = "does not answer gRPC"


def test_leader_killed_with_grpc_txns_in_flight(etcd3, cleanup):
    """The log's fenced transactions go over etcd's gRPC API (HTTP/2), one
    connection per etcd writer, so with four clients putting batches
    several are in flight at once on a 3-member etcd.  kill -9 of the
    leader in the middle: every acknowledged put reads back through the new
    leader (an acknowledgement waited for its round and every round before
    it), the new leader ships over gRPC too, and the log it left in etcd
    has no gap."""
    masters = []
    cleanup.append(masters)
    masters += [OplogMaster(etcd3, TTL) for _ in range(2)]
    leader = wait_leader(masters, 15.0)
    clients, loads = start_batch_loads(cleanup, etcd3, "r", n=32, first=96)
    try:
        assert GRPC_LINE in leader.log_text(), leader.log_text()[-3000:]
        leader.kill()  # kill -9, with transactions in flight
        masters.remove(leader)
        new = wait_leader(masters, 15.0)
        for ld in loads:
            ld.wait_more(64, 40.0, "64 acknowledged puts per client on the new leader")
        assert GRPC_LINE in new.log_text(), new.log_text()[-3000:]
        assert NO_GRPC_LINE not in new.log_text()
    finally:
        for ld in loads:
            ld.stop()
    wait_remounted(new, len(clients))
    for c, ld in zip(clients, loads):
        bad = lost(c, ld.acked)
        assert not bad, f"{len(bad)} of {len(ld.acked)} acknowledged puts lost, e.g. {bad[:3]}"
    seqs = [int(k.rsplit("/", 1)[1], 16) for k, _ in etcd3.range_revisions(LOG_PREFIX)]
    assert seqs and seqs == list(range(seqs[0], seqs[0] + len(seqs))), \
        f"a gap in the log left in etcd: {len(seqs)} keys from {seqs[:1]} to {seqs[-1:]}"


def test_etcd_without_grpc_gets_the_log_through_its_gateway(etcd, cleanup):
    """Masters pointed at an etcd that speaks only HTTP/1.1 (a proxy to its
    JSON gateway that refuses HTTP/2): the first log transaction's gRPC call
    fails, the gateway takes it, and from then on the log goes through the
    gateway, with one warning.  A takeover on that log loses nothing."""
    proxy = GatewayOnlyEtcd(etcd)
    cleanup.append(proxy)
    masters = []
    cleanup.append(masters)
    masters += [OplogMaster(proxy, TTL) for _ in range(2)]
    leader = wait_leader(masters, 15.0)
    c = store_client(cleanup, etcd)
    keys = [f"j{i}" for i in range(64)]
    for i in range(0, len(keys), 16):
        r = c.call("put_batch", keys=keys[i:i + 16],
                   hexes=[value_of(k).hex() for k in keys[i:i + 16]])
        assert r["rc"] == 0, r
    assert proxy.h2_attempts >= 1, "no gRPC call was tried"
    log = leader.log_text()
    assert log.count(NO_GRPC_LINE) == 1, log[-3000:]
    assert GRPC_LINE not in log
    assert etcd.range_prefix(LOG_PREFIX)
    leader.kill()
    masters.remove(leader)
    wait_leader(masters, 15.0)
    bad = lost(c, keys)
    assert not bad, f"{len(bad)} of {len(keys)} acknowledged puts lost, e.g. {bad[:3]}"


def test_etcd_member_killed_while_the_log_ships(etcd3, cleanup):
    """The default lease (5 s): when the member killed was etcd's raft
    leader, etcd elects another one (about a second here) while the log's
    writes are retried; a 2 s lease could run out meanwhile."""
    masters = []
    cleanup.append(masters)
    # upstream's default client TTL (10 s), not the suite's 2 s: on a loaded
    # host the holder's heartbeats paused past 2 s while etcd elected a new
    # raft leader, and the master expired it, dropping its objects (a client
    # expiry, which this test would have reported as a log loss)
    masters += [OplogMaster(etcd3, ["--client_ttl=10"]) for _ in range(2)]
    leader = wait_leader(masters, 15.0)
    c = store_client(cleanup, etcd3)
    load = PutLoad(c)
    try:
        load.wait_more(50, 30.0, "50 acknowledged puts")
        etcd3.kill(0)  # the first endpoint: the one every client talks to first
        load.wait_more(50, 30.0, "50 puts with a member gone")
        assert leader.alive(), leader.log_text()[-3000:]
        assert leader.admin("/ha_status") == "serving"
        leader.kill()
        masters.remove(leader)
        load.wait_more(30, 40.0, "30 puts on the new leader")
    finally:
        load.stop()
    bad = lost(c, load.acked)
    assert not bad, loss_report(bad, load.acked, [("the killed leader", leader)] +
                                [(f"master {i}", m) for i, m in enumerate(masters)] +
                                [("the client", c)])


def test_etcd_unreachable_past_the_lease_stops_acknowledging(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    masters += [OplogMaster(etcd, TTL + ["--oplog_poll_interval_ms=200"]) for _ in range(2)]
    leader = wait_leader(masters, 15.0)
    c = store_client(cleanup, etcd)
    load = PutLoad(c)
    try:
        load.wait_more(50, 30.0, "50 acknowledged puts")
        pause_etcd(etcd, 0)
        t_stop = time.monotonic()
        try:
            time.sleep(5.0)  # 2.5 lease TTLs
        finally:
            resume_etcd(etcd, 0)
        t_cont = time.monotonic()
        # nothing was acknowledged while etcd could take nothing (a put
        # already in etcd may be answered just after the stop)
        late = [t for t in load.times if t_stop + 0.5 < t < t_cont]
        assert not late, f"{len(late)} puts acknowledged while etcd was unreachable"
        # the leader stepped down past its lease; with the log shipped it exits
        wait_until(lambda: not leader.alive(), 15.0, "the leader past its lease to exit")
        assert leader.proc.returncode == 1
        masters.remove(leader)
        load.wait_more(30, 30.0, "30 puts once etcd is back")
    finally:
        load.stop()
    bad = lost(c, load.acked)
    assert not bad, f"{len(bad)} of {len(load.acked)} acknowledged puts lost, e.g. {bad[:3]}"


def test_batches_answered_only_once_committed_across_an_etcd_stall(etcd, cleanup):
    """The leader answers a put once its round is committed, also when the
    round ends while the event loop is working through other connections'
    requests (it polls between connections, and the log's wake runs before
    the loop reads more).  Four clients put batches, so each loop turn holds
    several connections' requests while rounds complete; etcd is stopped
    for 1.5 s, within the lease: no batch is acknowledged while it cannot
    commit, the same leader goes on once it is back, and every acknowledged
    put reads back."""
    masters = []
    cleanup.append(masters)
    masters += [OplogMaster(etcd, ["--ha_lease_ttl_sec=6"])]
    leader = wait_leader(masters, 15.0)
    clients, loads = start_batch_loads(cleanup, etcd, "s")
    try:
        pause_etcd(etcd, 0)
        t_stop = time.monotonic()
        try:
            time.sleep(1.5)
        finally:
            resume_etcd(etcd, 0)
        t_cont = time.monotonic()
        for ld in loads:
            ld.wait_more(64, 30.0, "64 more acknowledged puts per client once etcd is back")
    finally:
        for ld in loads:
            ld.stop()
    # a round already committed when etcd stopped may still be answered
    late = [t for ld in loads for t in ld.times if t_stop + 0.3 < t < t_cont]
    assert not late, f"{len(late)} batches acknowledged while etcd could commit nothing"
    assert leader.alive(), "the leader gave up within its lease"
    for c, ld in zip(clients, loads):
        bad = lost(c, ld.acked)
        assert not bad, loss_report(bad, ld.acked, [("leader", leader), ("client", c)])


def test_batch_max_entries_bounds_a_log_key(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    masters.append(OplogMaster(etcd, TTL + ["--oplog_batch_max_entries=0"]))  # 0 -> 1
    leader = wait_leader(masters, 15.0)
    c = store_client(cleanup, etcd)
    assert c.call("put", key="warm", hex=value_of("warm").hex())["rc"] == 0
    keys = [f"b{i}" for i in range(40)]
    n0 = len(etcd.range_prefix(LOG_PREFIX))
    r = c.call("put_batch", keys=keys, hexes=[value_of(k).hex() for k in keys])
    assert r["rc"] == 0, r
    # one record (the object's OBJ_SET) per log key
    assert len(etcd.range_prefix(LOG_PREFIX)) - n0 >= 40
    masters.append(OplogMaster(etcd, TTL))
    leader.kill()
    masters.remove(leader)
    wait_leader(masters, 15.0)
    assert not lost(c, keys)


def test_poll_interval_and_the_read_at_takeover(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    masters.append(OplogMaster(etcd, TTL))
    leader = wait_leader(masters, 15.0)
    standby = OplogMaster(etcd, TTL + ["--oplog_poll_interval_ms=600000"])
    masters.append(standby)
    c = store_client(cleanup, etcd)
    wait_until(lambda: standby.metric("master_ha_oplog_seq") is not None, 10.0,
               "the standby's metrics")
    seen = standby.metric("master_ha_oplog_seq")
    keys = [f"p{i}" for i in range(20)]
    for k in keys:
        assert c.call("put", key=k, hex=value_of(k).hex())["rc"] == 0
    assert leader.metric("master_ha_oplog_seq") > seen
    time.sleep(1.5)  # with the default poll (1 s) the standby would have read on
    assert standby.metric("master_ha_oplog_seq") == seen
    leader.kill()
    masters.remove(leader)
    wait_leader(masters, 15.0)
    # elected, it read the log to its end before serving
    assert standby.metric("master_ha_oplog_seq") > seen
    assert not lost(c, keys)


def test_standby_gives_up_after_the_retry_timeout(etcd, cleanup):
    masters = []
    cleanup.append(masters)
    masters.append(OplogMaster(etcd, TTL))
    wait_leader(masters, 15.0)
    standby = OplogMaster(etcd, TTL + ["--oplog_poll_interval_ms=100",
                                       "--batch_oplog_retry_timeout_sec=2"])
    masters.append(standby)
    etcd.kill(0)
    wait_until(lambda: not standby.alive(), 20.0, "the standby to give up")
    assert standby.proc.returncode == 1
    assert "gives up" in standby.log_text()


def run_master(*args):
    return subprocess.run([master_bin(), "--metrics_port=0", *args], capture_output=True,
                          text=True, timeout=20, stdin=subprocess.DEVNULL)


def test_startup_rules():
    r = run_master("--enable_oplog=true")
    assert r.returncode == 1, r.stderr
    assert "enable_oplog requires enable_ha=true" in r.stderr
    # --help: the oplog flags are real flags, not "accepted for compatibility"
    out = run_master("--help").stdout
    head, _, compat = out.partition("Accepted for compatibility only")
    for f in ("--enable_oplog", "--oplog_poll_interval_ms", "--oplog_batch_max_entries",
              "--batch_oplog_retry_timeout_sec"):
        assert f"\n  {f} (" in head and f"\n  {f} (" not in compat, f
    for f, d in (("oplog_batch_max_entries", "1024"), ("oplog_poll_interval_ms", "1000"),
                 ("batch_oplog_retry_timeout_sec", "180")):
        assert f"default: {d}" in head.split(f"--{f} (")[1].split("\n")[0], f
    r = run_master("--enable_oplog=true", "--enable_ha=true", "--ha_backend_type=redis",
                   "--ha_backend_connstring=127.0.0.1:1")
    if r.returncode == 2 and "UNAVAILABLE_IN_CURRENT_MODE" in r.stderr:
        pytest.skip("this build has no redis backend: --ha_backend_type=redis stops first")
    assert r.returncode == 1, r.stderr
    assert "enable_oplog currently requires ha_backend_type=etcd" in r.stderr

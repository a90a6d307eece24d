# SPDX-License-Identifier: Apache-2.0
"""Fault injection for the fault suite (test_faults.py).

``FaultRun(mode, dir, seed)`` builds hosts in network namespaces
(netns.py): masters on "m" (and "n" with HA, etcd on "e"), holders "a",
"b", "c" (workers with a 64 MiB segment each), "d" (a worker with no
segment: every byte it moves crosses the bridge) and "a2" (a worker with
no segment on host "a": what it moves to and from a's segment goes
through shared memory).  Every worker runs a
random history of writes, removes and reads on one small key set on one
thread, reads only on a second, and now and then writes a key of its own
that nothing touches again (fault_worker.py), while ``inject(seconds)``
applies faults one after another:

  master_kill      SIGKILL the master, restart it on the same address
                   (plain: it comes back empty, which loses data by
                   design; durable: it restores its index from its log)
  master_kill_cut  the same while two clients are cut off from the master
                   (nft), not from the holders: they miss the restart and
                   read what they have cached meanwhile
  master_stop      SIGSTOP the master past the read leases, then SIGCONT
  leader_kill      (ha) SIGKILL the leader; it comes back as a standby
  leader_kill_cut  (ha) the same while two clients are cut off from the
                   masters and etcd
  leader_stop      (ha) SIGSTOP the leader past its etcd lease: a standby
                   takes over, the woken one is fenced and exits, and is
                   restarted
  holder_kill      SIGKILL a holder's worker; a new one starts on that host
  client_stop      SIGSTOP a worker past the read leases (a long one, past
                   --client_ttl, gets the holder expired), then SIGCONT
  cut_master       nft drops every packet between a client host and the
                   master hosts (a long one outlasts --client_ttl)
  cut_peers        nft drops every packet between two client hosts
  link_down        a host's veth down (a master host's too), then up

A run starts with FIRST[mode] (so that a short one meets those), then
draws from MENUS[mode].  Each fault is recorded with its CLOCK_MONOTONIC
interval and whether it may legitimately lose objects (checker.py);
evictions the master reports become such records too.

``finish()`` heals everything, stops the workload, waits until every
worker can write again, every live holder's segment serves and the put
reservations and leases have lapsed, reads every key once more from "d"
("final" reads, which take a lease on each), force-removes every key and
measures what the master still has allocated right then (``held_bytes``:
a forced remove frees at once) and after the leases ran out
(``leaked_bytes``), then runs the checker.

Every daemon and namespace is stopped and deleted by ``close()``, also
after a failure; nft tables live in the namespaces and are deleted with
them (and explicitly before).  Nothing is addressed but the namespaces'
own addresses.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional

import checker
from helpers import ClientProc, MiB, master_bin, port_accepts, wait_until
from netns import Net

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fault_worker.py"
ETCD = "/usr/bin/etcd"

RPC_PORT = 50051
METRICS_PORT = 9003
ETCD_PORT = 2379
ETCD_PEER_PORT = 2380
KV_LEASE_MS = 5000                # read leases (and location-cache entries) last this long
CLIENT_TTL_S = 10                 # a silent client is expired after this
HA_TTL_S = 2                      # the leader's etcd lease
RESTORE_GRACE_S = 20
RESERVATION_TTL_S = 3
HANG_S = 60.0                     # longest an operation may take (two tries, each with the
                                  # failover wait of 15 s, 5 s RPCs and transfers)
KEYS = [f"fk{i}" for i in range(12)]
HOLDERS = ["a", "b", "c"]
CLIENTS = HOLDERS + ["d"]
# Workers that share another's host (its network namespace): their traffic
# with that host's holder takes the same-host shared-memory path, reads and
# writes, so its fences are under test too.  Only process faults pick them
# (a network fault on the host they live in reaches them as well).
COLOCATED = {"a2": "a"}
WORKERS = CLIENTS + list(COLOCATED)
SEGMENT = 64 * MiB
MIN_SIZE = 4 * 1024
MAX_SIZE = 1 * MiB
MIX = {"put": 18, "upsert": 22, "remove": 10, "get": 25, "get_into": 17, "get_batch": 8,
       "sentinel": 1}
FORCE_SHARE = 0.4

MENUS = {
    "plain": {"master_kill": 2, "master_kill_cut": 2, "master_stop": 1, "holder_kill": 2,
              "client_stop": 2, "cut_master": 1, "cut_peers": 1, "link_down": 1},
    "durable": {"master_kill": 2, "master_kill_cut": 2, "master_stop": 1, "holder_kill": 2,
                "client_stop": 2, "cut_master": 1, "cut_peers": 1, "link_down": 1},
    "ha": {"leader_kill": 2, "leader_kill_cut": 2, "leader_stop": 2, "holder_kill": 2,
           "client_stop": 2, "cut_master": 1, "cut_peers": 1, "link_down": 1},
}
#: Every run starts with these, the first one first and the others in a
#: random order, so that a short run meets the faults that matter most;
#: then it draws from MENUS.
FIRST = {
    "plain": ["master_kill_cut", "holder_kill", "client_stop", "master_kill"],
    "durable": ["master_kill_cut", "holder_kill", "client_stop", "master_kill"],
    "ha": ["leader_kill_cut", "leader_stop", "holder_kill", "client_stop"],
}
LONG_SHARE = 0.15                 # of client_stop and cut_master: past --client_ttl


def now_ns() -> int:
    return time.monotonic_ns()


def http(url: str, data: Optional[bytes] = None, timeout: float = 2.0) -> Optional[str]:
    try:
        req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode()
    except (OSError, urllib.error.URLError):
        return None


class Proc:
    """A daemon in a namespace, its output in a log file of the run
    directory (kept for the post-mortem)."""

    def __init__(self, argv: List[str], log: Path) -> None:
        self.log_path = log
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            wait_until(lambda: not self.alive() or cond(), timeout, what)
            if not self.alive():
                raise RuntimeError(f"{what}: exited with {self.proc.returncode}:\n"
                                   + self.log_text())
        except BaseException:
            self.stop()
            raise

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except OSError:
                pass
        self.log.close()


class NsMaster(Proc):
    def __init__(self, run: "FaultRun", host: str, incarnation: int) -> None:
        self.host = host
        self.ip = run.net.ip[host]
        argv = run.net.prefix(host) + [
            master_bin(), f"--rpc_address={self.ip}", f"--rpc_port={RPC_PORT}",
            f"--client_ttl={CLIENT_TTL_S}", f"--default_kv_lease_ttl={KV_LEASE_MS}",
            f"--put_reservation_ttl_sec={RESERVATION_TTL_S}",
            f"--metrics_host={self.ip}", f"--metrics_port={METRICS_PORT}",
            "--log_level=info"] + run.master_args(host)
        super().__init__(argv, run.dir / f"master-{host}-{incarnation}.log")
        self.ready(lambda: port_accepts(RPC_PORT, self.ip) and
                   port_accepts(METRICS_PORT, self.ip), 20, f"the master on {host}")

    def admin(self, path: str) -> Optional[str]:
        return http(f"http://{self.ip}:{METRICS_PORT}{path}") if self.alive() else None

    def metric(self, name: str) -> Optional[float]:
        for line in (self.admin("/metrics") or "").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def serving(self) -> bool:
        return self.admin("/role") == "leader" and self.admin("/ha_status") in (None, "serving")


class Etcd(Proc):
    def __init__(self, run: "FaultRun", host: str) -> None:
        self.ip = run.net.ip[host]
        c, p = f"http://{self.ip}:{ETCD_PORT}", f"http://{self.ip}:{ETCD_PEER_PORT}"
        argv = run.net.prefix(host) + [
            ETCD, "--name", "e0", "--data-dir", str(run.dir / "etcd"),
            "--listen-client-urls", c, "--advertise-client-urls", c,
            "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
            "--initial-cluster", f"e0={p}", "--initial-cluster-state", "new"]
        super().__init__(argv, run.dir / "etcd.log")
        body = json.dumps({"key": "bWMtcmVhZHk=", "value": "MQ=="}).encode()
        self.ready(lambda: http(f"{c}/v3/kv/put", body) is not None, 30, "etcd")


def tail_of(path: str, n: int = 3000) -> str:
    """The last ``n`` characters of the file at ``path`` ("" when unreadable):
    what a crashed process said last goes into the report, which outlives
    the run directory (a CI machine keeps only its output)."""
    try:
        w = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return w[-n:]


def backtrace_of(core_dir: Path, n: int = 6000) -> str:
    """Every thread's C backtrace from a crashed worker's core, when the
    kernel wrote one into ``core_dir`` and gdb is installed ("" else)."""
    cores = sorted(core_dir.glob("core*")) if core_dir.is_dir() else []
    if not cores:
        return ""
    try:
        r = subprocess.run(["gdb", "-batch", "-nx", "-ex", "thread apply all bt 30",
                            sys.executable, str(cores[-1])],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("#", "Thread"))]
    return "\n".join(lines)[:n]


class Worker(ClientProc):
    """A fault_worker.py process on ``host``: a ClientProc whose log stays
    in the run directory."""

    def __init__(self, run: "FaultRun", host: str, name: str, wid: int) -> None:
        self.host = host
        self.wid = wid
        self.hostname = ""                 # its segment's name, once set up
        # a crash in C prints every thread's Python stack to the log and
        # leaves a core in core_dir (backtrace_of)
        self.core_dir = run.dir / f"core-{name.replace('#', '-')}"
        super().__init__(name, env={"MC_LOG_LEVEL": "warn", "PYTHONFAULTHANDLER": "1",
                                    "MC_FAULT_CORE_DIR": str(self.core_dir)},
                         prefix=run.net.prefix(COLOCATED.get(host, host)), script=WORKER,
                         log_path=run.dir / f"worker-{name.replace('#', '-')}.log")

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        """As ClientProc.stop, for a process that may be stopped (SIGSTOP)."""
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
        super().stop()


class Nft:
    """Packet drops between hosts: a table ``inet mcfault`` in each
    namespace involved, whose input chain drops what comes from the other
    side (both sides get a rule, so each direction is lost on arrival,
    as on a broken path, and no sender sees an error)."""

    TABLE = "mcfault"

    def __init__(self, net: Net) -> None:
        self.net = net
        self.hosts: set = set()

    def _nft(self, host: str, script: str) -> str:
        r = subprocess.run(self.net.prefix(host) + ["nft", "-f", "-"], input=script, text=True,
                           capture_output=True, timeout=20)
        if r.returncode != 0:
            raise RuntimeError(f"nft on {host}: {r.stderr}")
        return r.stdout

    def block(self, side_a: List[str], side_b: List[str]) -> None:
        for here, there in ((side_a, side_b), (side_b, side_a)):
            for h in here:
                script = (f"table inet {self.TABLE} {{\n chain input {{\n  type filter hook "
                          f"input priority 0; policy accept;\n }}\n}}\n")
                for o in there:
                    script += (f"add rule inet {self.TABLE} input ip saddr {self.net.ip[o]} "
                               f"counter drop\n")
                self._nft(h, script)
                self.hosts.add(h)

    def dropped(self) -> int:
        total = 0
        for h in self.hosts:
            r = subprocess.run(self.net.prefix(h) + ["nft", "list", "table", "inet", self.TABLE],
                               text=True, capture_output=True, timeout=20)
            total += sum(int(x) for x in re.findall(r"packets (\d+)", r.stdout))
        return total

    def clear(self) -> None:
        for h in list(self.hosts):
            subprocess.run(self.net.prefix(h) + ["nft", "delete", "table", "inet", self.TABLE],
                           capture_output=True, timeout=20)
            self.hosts.discard(h)


class FaultRun:
    def __init__(self, mode: str, run_dir: Path, seed: int, log: Callable[[str], None] = print):
        assert mode in MENUS, mode
        self.mode = mode
        self.dir = Path(run_dir)
        (self.dir / "hist").mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.rng = random.Random(seed)
        self.say = log
        self.net: Optional[Net] = None
        self.nft: Optional[Nft] = None
        self.etcd: Optional[Etcd] = None
        self.masters: Dict[str, NsMaster] = {}
        self.master_runs: Counter = Counter()
        self.workers: Dict[str, Worker] = {}
        self.worker_runs: Counter = Counter()
        self.procs: List = []                       # every process started, for close()
        self.wid = 0
        self.faults: List[Dict] = []
        self.crashes: List[str] = []
        self.stopped: Dict[int, Proc] = {}
        self.evicted: Dict[int, int] = {}         # master pid: evictions seen
        self.sampled = now_ns()
        self.allow_long = True
        self.t0 = now_ns()
        self.master_hosts = ["m", "n"] if mode == "ha" else ["m"]

    # -- setup ---------------------------------------------------------------------

    def master_args(self, host: str) -> List[str]:
        snap = ["--enable_snapshot=true", "--enable_snapshot_restore=true",
                f"--snapshot_backup_dir={self.dir / ('snap-' + host)}",
                f"--snapshot_restore_grace_seconds={RESTORE_GRACE_S}",
                "--snapshot_interval_seconds=3"]
        if self.mode == "plain":
            return []
        if self.mode == "durable":
            return snap
        return ["--enable_ha=true", f"--etcd_endpoints={self.net.ip['e']}:{ETCD_PORT}",
                f"--ha_lease_ttl_sec={HA_TTL_S}"] + snap

    @property
    def master_addr(self) -> str:
        if self.mode == "ha":
            return f"etcd://{self.net.ip['e']}:{ETCD_PORT}"
        return f"{self.net.ip['m']}:{RPC_PORT}"

    def open(self) -> None:
        hosts = (["e"] if self.mode == "ha" else []) + self.master_hosts + CLIENTS
        self.net = Net(hosts)
        self.nft = Nft(self.net)
        if self.mode == "ha":
            self.etcd = Etcd(self, "e")
            self.procs.append(self.etcd)
        for h in self.master_hosts:
            self.start_master(h)
        self.leader(20)
        spawned = {h: self.spawn(h) for h in WORKERS}       # interpreters start in parallel
        for h, w in spawned.items():
            self.workers[h] = self.start_worker(h, w, time.monotonic() + 60)

    def start_master(self, host: str) -> NsMaster:
        self.master_runs[host] += 1
        m = NsMaster(self, host, self.master_runs[host])
        self.procs.append(m)
        self.masters[host] = m
        return m

    def leader(self, timeout: float) -> NsMaster:
        """The master that serves (with HA: the one elected)."""
        def one():
            ls = [m for m in self.masters.values() if m.alive() and m.serving()]
            return ls[0] if len(ls) == 1 else None
        return wait_until(one, timeout, "a serving master", interval=0.1)

    def spawn(self, host: str) -> Worker:
        self.wid += 1
        self.worker_runs[host] += 1
        w = Worker(self, host, f"{host}#{self.worker_runs[host]}", self.wid)
        self.procs.append(w)
        return w

    def start_worker(self, host: str, w: Worker, deadline: float) -> Worker:
        """setup() and the workload on ``w``; a setup that fails (the master
        is away) is tried again with a fresh process until ``deadline``."""
        seg = SEGMENT if host in HOLDERS else 0
        while True:
            try:
                r = w.call("setup", args=[self.net.ip[COLOCATED.get(host, host)],
                                          "P2PHANDSHAKE", seg, 16 * MiB,
                                          "tcp", "", self.master_addr], timeout=60)
                if r["rc"] == 0:
                    w.hostname = r["hostname"]
                    break
                why = f"rc {r['rc']}"
            except AssertionError as e:
                why = str(e)[:200]
            w.kill()
            w.stop()
            if time.monotonic() > deadline:
                raise AssertionError(f"worker on {host} could not set up: {why}")
            time.sleep(0.5)
            w = self.spawn(host)
        w.call("wl_start", wid=w.wid, proc=w.name, keys=KEYS, seed=self.rng.random(),
               path=str(self.dir / "hist" / f"{w.name.replace('#', '-')}.jsonl"), mix=MIX,
               min_size=MIN_SIZE, max_size=MAX_SIZE, force_share=FORCE_SHARE, pause_ms=10,
               readers=1)
        return w

    def close(self) -> None:
        """Stop every process this run started (workers first, etcd last),
        delete the nft tables and the namespaces."""
        for p in list(self.stopped.values()):
            try:
                p.signal(signal.SIGCONT)
            except OSError:
                pass
        order = ([p for p in self.procs if isinstance(p, Worker)] +
                 [p for p in self.procs if isinstance(p, NsMaster)] +
                 [p for p in self.procs if isinstance(p, Etcd)])
        for p in order:
            try:
                p.stop()
            except Exception:
                try:
                    p.kill()
                except Exception:
                    pass
        if self.nft is not None:
            self.nft.clear()
        if self.net is not None:
            self.net.close()

    # -- faults --------------------------------------------------------------------

    def record(self, kind: str, start: int, loses: bool = False,
               lose_until: Optional[int] = None, **kw) -> Dict:
        f = dict(kind=kind, start=start, end=now_ns(), loses=loses, **kw)
        if loses:
            f["lose_until"] = lose_until if lose_until is not None else f["end"]
        self.faults.append(f)
        detail = " ".join(f"{k}={v}" for k, v in kw.items())
        self.say(f"  {(start - self.t0) / 1e9:7.2f}s {kind} {(f['end'] - start) / 1e9:.1f}s "
                 f"{detail}{' (may lose data)' if loses else ''}")
        return f

    def note_evictions(self) -> None:
        """Evictions since the last look become a fault that may have
        dropped any object written before now (eviction may drop any
        object: that is not an anomaly)."""
        t = now_ns()
        new = 0
        for m in self.masters.values():
            if m.alive() and m.serving():
                n = int(m.metric("master_evicted_key_count_total") or 0)
                new += max(0, n - self.evicted.get(m.pid, 0))
                self.evicted[m.pid] = n
        if new:
            self.faults.append(dict(kind="eviction", start=self.sampled, end=t, loses=True,
                                    lose_until=t, count=new))
            self.say(f"  {(t - self.t0) / 1e9:7.2f}s {new} objects evicted")
        self.sampled = t

    def pause(self, p, seconds: float) -> None:
        p.signal(signal.SIGSTOP)
        self.stopped[p.pid] = p
        time.sleep(seconds)
        p.signal(signal.SIGCONT)
        self.stopped.pop(p.pid, None)

    def f_master_kill(self) -> None:
        m = self.masters["m"]
        self.note_evictions()
        t = now_ns()
        m.kill()
        time.sleep(self.rng.uniform(0.1, 1.0))
        self.start_master("m")
        self.record("master_kill", t, loses=self.mode == "plain")

    def f_master_kill_cut(self) -> None:
        """The master killed and restarted while two clients are cut off
        from it (not from the holders): they do not learn of the restart,
        and whatever they have cached they read from the holders
        meanwhile."""
        hosts = self.rng.sample(CLIENTS, 2)
        self.note_evictions()
        t = now_ns()
        self.nft.block(hosts, self.master_hosts)
        time.sleep(0.3)
        self.masters["m"].kill()
        time.sleep(self.rng.uniform(0.1, 1.0))
        self.start_master("m")
        time.sleep(self.rng.uniform(2.0, 3.5))
        dropped = self.nft.dropped()
        self.nft.clear()
        self.record("master_kill_cut", t, loses=self.mode == "plain", hosts="+".join(hosts),
                    dropped=dropped)

    def f_master_stop(self) -> None:
        t = now_ns()
        self.pause(self.masters["m"], self.rng.uniform(KV_LEASE_MS / 1000 + 0.5,
                                                       KV_LEASE_MS / 1000 + 1.5))
        self.record("master_stop", t)

    def f_leader_kill(self) -> None:
        ld = self.leader(30)
        self.note_evictions()
        t = now_ns()
        ld.kill()
        time.sleep(self.rng.uniform(1.0, 3.0))
        self.start_master(ld.host)
        self.record("leader_kill", t, host=ld.host)

    def f_leader_kill_cut(self) -> None:
        """f_master_kill_cut with HA: two clients are cut off from the
        masters and etcd while the leader is killed and a standby takes
        over."""
        hosts = self.rng.sample(CLIENTS, 2)
        ld = self.leader(30)
        self.note_evictions()
        t = now_ns()
        self.nft.block(hosts, self.master_hosts + ["e"])
        time.sleep(0.3)
        ld.kill()
        time.sleep(self.rng.uniform(1.0, 3.0))
        self.start_master(ld.host)
        time.sleep(self.rng.uniform(0.5, 2.0))
        dropped = self.nft.dropped()
        self.nft.clear()
        self.record("leader_kill_cut", t, hosts="+".join(hosts), leader=ld.host,
                    dropped=dropped)

    def f_leader_stop(self) -> None:
        ld = self.leader(30)
        self.note_evictions()
        t = now_ns()
        self.pause(ld, self.rng.uniform(HA_TTL_S + 1.0, HA_TTL_S + 2.0))
        self.record("leader_stop", t, host=ld.host)

    def f_holder_kill(self) -> None:
        host = self.rng.choice(HOLDERS)
        w = self.workers[host]
        t = now_ns()
        w.kill()
        # the objects it held may go: those written (begun) before the kill
        time.sleep(self.rng.uniform(0.5, 2.0))
        w.stop()
        self.workers[host] = self.start_worker(host, self.spawn(host), time.monotonic() + 40)
        self.record("holder_kill", t, loses=True, lose_until=t, proc=w.name)

    def f_client_stop(self) -> None:
        host = self.rng.choice(WORKERS)
        w = self.workers[host]
        long = self.allow_long and self.rng.random() < LONG_SHARE
        secs = CLIENT_TTL_S + 2.5 if long else self.rng.uniform(KV_LEASE_MS / 1000 + 0.5,
                                                                KV_LEASE_MS / 1000 + 1.5)
        t = now_ns()
        self.pause(w, secs)
        self.record("client_stop_long" if long else "client_stop", t,
                    loses=long and host in HOLDERS, host=host)

    def f_cut_master(self) -> None:
        host = self.rng.choice(CLIENTS)
        long = self.allow_long and self.rng.random() < LONG_SHARE
        secs = CLIENT_TTL_S + 2.5 if long else self.rng.uniform(1.5, 3.0)
        others = self.master_hosts + (["e"] if self.mode == "ha" else [])
        t = now_ns()
        self.nft.block([host], others)
        time.sleep(secs)
        dropped = self.nft.dropped()
        self.nft.clear()
        self.record("cut_master_long" if long else "cut_master", t,
                    loses=long and host in HOLDERS, host=host, dropped=dropped)

    def f_cut_peers(self) -> None:
        x, y = self.rng.sample(CLIENTS, 2)
        t = now_ns()
        self.nft.block([x], [y])
        time.sleep(self.rng.uniform(1.5, 4.0))
        dropped = self.nft.dropped()
        self.nft.clear()
        self.record("cut_peers", t, hosts=f"{x}-{y}", dropped=dropped)

    def f_link_down(self) -> None:
        host = self.rng.choice(CLIENTS + self.master_hosts)
        t = now_ns()
        self.net.cut(host)
        time.sleep(self.rng.uniform(1.5, 3.0))
        self.net.heal(host)
        self.record("link_down", t, host=host)

    def supervise(self) -> None:
        """Restart what died on its own: a master (with HA a deposed leader
        exits with status 1 by design; anything else is a crash) or a
        worker (always a crash)."""
        for h, m in list(self.masters.items()):
            if not m.alive():
                rc = m.proc.returncode
                if not (self.mode == "ha" and rc == 1):
                    self.crashes.append(f"master on {h} exited with {rc}")
                self.say(f"  master on {h} exited with {rc}; restarting it")
                m.stop()
                self.start_master(h)
        for h, w in list(self.workers.items()):
            if not w.alive():
                bt = backtrace_of(w.core_dir)
                self.crashes.append(f"worker {w.name} exited with {w.proc.returncode}; "
                                    f"its log ends:\n{tail_of(w.log.name)}"
                                    + (f"\nits threads in C:\n{bt}" if bt else ""))
                self.say(f"  worker {w.name} exited with {w.proc.returncode}; restarting it")
                w.stop()
                self.workers[h] = self.start_worker(h, self.spawn(h), time.monotonic() + 40)

    def inject(self, seconds: float) -> None:
        menu = MENUS[self.mode]
        kinds, weights = list(menu), list(menu.values())
        first = FIRST[self.mode][:1] + self.rng.sample(FIRST[self.mode][1:],
                                                       len(FIRST[self.mode]) - 1)
        end = time.monotonic() + seconds
        time.sleep(min(2.0, seconds / 4))
        while time.monotonic() < end:
            if first:
                self.allow_long = False
                kind = first.pop(0)
            else:
                self.allow_long = True
                kind = self.rng.choices(kinds, weights)[0]
            getattr(self, "f_" + kind)()
            self.supervise()
            self.note_evictions()
            time.sleep(self.rng.uniform(0.5, 1.5))

    # -- the end -------------------------------------------------------------------

    def heal(self) -> None:
        self.nft.clear()
        for h in self.net.ns:
            self.net.heal(h)
        for p in list(self.stopped.values()):
            p.signal(signal.SIGCONT)
        self.stopped.clear()
        self.supervise()

    @staticmethod
    def probe(w: Worker, key: str) -> bool:
        r = w.call("wl_probe", key=key, timeout=60)
        return r["got"] and r["rm"] == 0

    @staticmethod
    def serving_segments(m: NsMaster) -> set:
        try:
            segs = json.loads(m.admin("/get_all_segments") or "[]")
        except ValueError:
            return set()
        if isinstance(segs, dict):
            segs = segs.get("segments", [])
        return {s.get("name") for s in segs if s.get("status") == "OK"}

    def finish(self) -> Dict:
        """Heal, stop the workload, read every key back, measure what the
        master holds after removing everything; returns the results."""
        self.heal()
        time.sleep(3.0)                     # the workload goes on, recovering
        stops = {h: w.call("wl_stop", join_s=HANG_S, timeout=HANG_S + 30)
                 for h, w in self.workers.items()}
        # a colocated worker that never took the same-host path tested
        # nothing of it: it maps its writer counts once it has
        no_shm = [w.name for h, w in self.workers.items()
                  if h in COLOCATED and not self.maps_shm_writers(w)]
        for h, w in self.workers.items():
            wait_until(lambda: self.probe(w, f"probe-{h}"), 40,
                       f"worker {w.name} to write, read and remove again", interval=0.5)
        # every live holder's segment serves (a restored one waits for its
        # owner's remount, and its objects read as not found until then)
        ld = self.leader(30)
        live = {self.workers[h].hostname for h in HOLDERS}
        wait_until(lambda: live <= self.serving_segments(ld), 30,
                   "every holder's segment to serve", interval=0.25)
        self.note_evictions()
        # put reservations (one-round-trip puts) lapse; leases of the
        # workload's reads end
        time.sleep(max(RESERVATION_TTL_S, KV_LEASE_MS / 1000) + 1.0)
        ld = self.leader(30)
        before = ld.metric("master_allocated_bytes")
        # the final reads of the shared keys and every sentinel, which also
        # take a lease on every key they find
        ops = checker.load_history(sorted(str(p) for p in (self.dir / "hist").iterdir()))
        keys = KEYS + sorted({o["key"] for o in ops if o["key"].startswith("fs-")})
        final = self.workers["d"].call("wl_final", keys=keys, deadline_s=30, timeout=300)
        # memory: every key removed with force frees its bytes at once,
        # leases or not (held_bytes), and nothing stays allocated once the
        # leases have run out (leaked_bytes)
        removed = self.workers["d"].call("wl_remove_all", keys=keys, timeout=300)
        held = int(ld.metric("master_allocated_bytes") or 0)
        left: List[int] = [-1, -1]

        def empty():
            left[0] = int(ld.metric("master_allocated_bytes") or 0)
            left[1] = int(ld.metric("master_key_count") or 0)
            return left == [0, 0]
        try:
            wait_until(empty, KV_LEASE_MS / 1000 + 5, "the master to free every byte",
                       interval=0.25)
        except AssertionError:
            pass
        ops = checker.load_history(sorted(str(p) for p in (self.dir / "hist").iterdir()))
        rep = checker.check(ops, self.faults, hang_ns=int(HANG_S * 1e9), t0=self.t0)
        extra = {"held_bytes": held, "leaked_bytes": left[0], "crash": len(self.crashes)}
        line = rep.summary(f"faults[{self.mode} seed={self.seed}]", extra=extra)
        # the post-mortem: run.json, beside hist/*.jsonl (checker.load_history)
        # and every process's log
        with open(self.dir / "run.json", "w") as f:
            json.dump({"mode": self.mode, "seed": self.seed, "t0": self.t0,
                       "faults": self.faults, "summary": line, "crashes": self.crashes,
                       "anomalies": dict(rep.anomalies), "examples": rep.examples,
                       "final": final, "stops": stops, "allocated_before_remove": before,
                       "removed": removed, "held_bytes": held, "left": left}, f, indent=1)
        return {"report": rep, "summary": line, "held_bytes": held, "leaked_bytes": left[0],
                "keys_left": left[1], "crashes": self.crashes, "stops": stops,
                "final": final, "no_same_host_path": no_shm}

    @staticmethod
    def maps_shm_writers(w: "Worker") -> bool:
        """Whether worker ``w`` maps a holder's writer-count memfd, which a
        same-host peer asks for when it first connects to the holder's
        shared-memory server (docs/transfer.md, section 10)."""
        try:
            with open(f"/proc/{w.proc.pid}/maps") as f:
                return "mooncake-shm-writers" in f.read()
        except OSError:
            return False

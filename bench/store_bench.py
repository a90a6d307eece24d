#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Store benchmark: one command, one table.

Starts a mooncake_master on free loopback ports and two client processes:
the *holder* contributes a large segment, the *driver* puts values into the
holder's segment (preferred_segment) and gets them back, so every put and
get crosses processes: by default through the same-host shared-memory path
(the holder's segment mapped by the driver), with --transport tcp through
the TCP transport (MC_TE_SHM=0 in both clients).  In the same run it
measures raw single-connection loopback TCP moving the same bytes
(bench/raw_tcp: one request/response per value) and prints get/raw-TCP and
put p50/raw p50 as ratios.

--net veth (or both) runs the same measurement as two hosts: the driver in
one network namespace, the master and the holder in another, joined by a
veth pair that the benchmark creates and removes (root, iproute2); TCP
only (MC_TE_SHM=0), and the raw-TCP baseline runs across the same veth.

    bench/store_bench.py [--build-dir build] [--sizes 4096,65536,...]
                         [--transport auto|tcp] [--net loopback|veth|both]
                         [--repeat N] [--plot DIR]

The store runs and the baseline runs of each row alternate, so that a load
drifting over the run weighs on both sides of a ratio alike.  --repeat N
runs the whole measurement N times and ends with each ratio's median.

--plot DIR also measures memcpy at every size, prints it, and writes the
numbers (DIR/store_bench.json) and their figures (bench/plot.py:
throughput against value size, get latency CDF) as PNG files.

For values of 1 MiB and more a row measures a client's first puts: each of
the runs sets up a store of its own in the driver process (so its own
mapping of the holder's segment), puts 64 MiB of values into pages of the
holder it has never written, each put timed alone, removes them and puts
them again into the space they freed, and the row prints both p50s and
their ratio (a same-host writer maps the holder's pages as it first
touches them, docs/transfer.md section 10).

Nothing waits between runs: each run removes its values with force and the
next writes as much again at once, as a user's program does.  The churn
rows do only that (put, get, remove_all(force=True), put again; the bytes
API and zero copy; the master's default lease, then a 500 ms one) and count
failed operations.  A failed operation in any row (a put that does not
return 0, a get that does not return the bytes put) is printed as FAIL and
the exit status is 1.
"""
import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20]
# bytes moved per size, bounded so the run fits a 2-core CI box
TOTAL_BYTES = 256 << 20
MIN_OPS, MAX_OPS = 24, 20000
#: Rounds of the churn rows (put, get, remove_all with force, put again).
CHURN_ROUNDS = 5
#: The lease of the churn rows' short-lease variant (ms); the other rows
#: run with the master's default (--default_kv_lease_ttl, 10 s).
SHORT_LEASE_MS = 500
# every figure is the median of several runs: loopback on a shared VM is noisy
RAW_RUNS, STORE_RUNS = 5, 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ops_for(size):
    return max(MIN_OPS, min(MAX_OPS, TOTAL_BYTES // size))


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, int(len(sorted_vals) * p / 100))
    return sorted_vals[i]


# --------------------------------------------------------------------------
# worker side: a client process driven by JSON lines on stdin


def serve_worker(handlers):
    """The worker loop of a benchmark client process: one store; requests
    are JSON lines on stdin, answers JSON lines on stdout.  ``setup``
    (segment, local_buffer, master, metadata) and ``quit`` are handled here, any
    other op by ``handlers[op](store, cmd)``, which returns the answer; an
    exception answers {"error": ...} and the loop goes on."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "setup":
                rc = store.setup(cmd.get("host", "localhost"), cmd.get("metadata", "P2PHANDSHAKE"),
                                 cmd["segment"], cmd["local_buffer"], "tcp", "",
                                 cmd["master"])
                reply({"rc": rc, "hostname": store.get_hostname() if rc == 0 else ""})
            elif op == "quit":
                store.close()
                reply({"rc": 0})
                return
            else:
                reply(handlers[op](store, cmd))
        except Exception as e:  # report and keep the driver's protocol
            reply({"error": "%s: %s" % (type(e).__name__, e)})


def add_common_args(ap):
    """--build-dir, --transport and the hidden --role of every benchmark."""
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--transport", choices=["auto", "tcp"], default="auto",
                    help="auto: same-host shared memory where possible; tcp: MC_TE_SHM=0")
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)


def congestion_control():
    """The host's TCP congestion control.  It moves the raw baseline a lot:
    on a 2-vCPU VM, raw 1 MiB request/response over loopback ran at
    3.0-3.3 GB/s with bbr (its pacing) and 6.0-7.2 GB/s with cubic."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def worker_main():
    from mooncake.store import ReplicateConfig

    def run(store, cmd):
        size, n, target = cmd["size"], cmd["count"], cmd["target"]
        cfg = ReplicateConfig()
        cfg.preferred_segment = target
        value = os.urandom(size)
        keys = ["bench_%d_%d" % (size, i) for i in range(n)]
        failed = Failures()
        put_lat = []
        t0 = time.perf_counter()
        for k in keys:
            s = time.perf_counter_ns()
            rc = store.put(k, value, cfg)
            put_lat.append(time.perf_counter_ns() - s)
            if rc != 0:
                failed.add("put %s -> %d" % (k, rc))
        put_s = time.perf_counter() - t0
        put_lat.sort()
        lat = []
        t0 = time.perf_counter()
        for k in keys:
            s = time.perf_counter_ns()
            data = store.get(k)
            lat.append(time.perf_counter_ns() - s)
            if len(data) != size:
                failed.add("get %s returned %d bytes" % (k, len(data)))
        get_s = time.perf_counter() - t0
        if store.get(keys[0]) != value:
            failed.add("get %s: not the bytes put" % keys[0])
        # the next run writes as much again at once: a user's program does
        # not wait for the space of what it removed either
        for k in keys:
            store.remove(k, force=True)
        lat.sort()
        return {"put_s": put_s, "get_s": get_s, "failed": failed.n, "first_failure": failed.first,
                "put_p50_us": pct(put_lat, 50) / 1e3, "put_p99_us": pct(put_lat, 99) / 1e3,
                "p50_us": pct(lat, 50) / 1e3, "p99_us": pct(lat, 99) / 1e3,
                "cdf_us": [pct(lat, q) / 1e3 for q in range(101)]}

    def hot(store, cmd):
        """Repeat gets of one key written once: after the first, the
        location cache answers the lookup (docs/architecture.md)."""
        size, n, target = cmd["size"], cmd["count"], cmd["target"]
        cfg = ReplicateConfig()
        cfg.preferred_segment = target
        k = "bench_hot_%d" % size
        lat = []
        failed = Failures()
        rc = store.put(k, os.urandom(size), cfg)
        if rc != 0:
            failed.add("put %s -> %d" % (k, rc))
        for _ in range(n + 1):
            s = time.perf_counter_ns()
            data = store.get(k)
            lat.append(time.perf_counter_ns() - s)
            if len(data) != size:
                failed.add("get %s returned %d bytes" % (k, len(data)))
        store.remove(k, force=True)
        lat = sorted(lat[1:])
        return {"get_s": sum(lat) / 1e9, "p50_us": pct(lat, 50) / 1e3,
                "p99_us": pct(lat, 99) / 1e3, "failed": failed.n, "first_failure": failed.first}

    def puts(store, cmd):
        """Put-only timing: count values of size into target, each put timed
        alone; the keys are removed afterwards."""
        size, n, target = cmd["size"], cmd["count"], cmd["target"]
        cfg = ReplicateConfig()
        cfg.preferred_segment = target
        value = os.urandom(size)
        keys = ["%s_%d_%d" % (cmd["prefix"], size, i) for i in range(n)]
        lat = []
        failed = Failures()
        for k in keys:
            s = time.perf_counter_ns()
            rc = store.put(k, value, cfg)
            lat.append(time.perf_counter_ns() - s)
            if rc != 0:
                failed.add("put %s -> %d" % (k, rc))
        for k in keys:
            store.remove(k, force=True)
        lat.sort()
        return {"p50_us": pct(lat, 50) / 1e3, "failed": failed.n, "first_failure": failed.first}

    def fresh(store, cmd):
        """A client's first puts: a store set up for this call (an engine of
        its own, so a mapping of the holder's segment of its own) puts
        ``count`` values of ``size`` into target, each timed alone, into
        pages it has never written; then removes them and puts them again
        at once, into the space they freed, pages it has written.  This
        worker's own store is not used."""
        from mooncake.store import MooncakeDistributedStore

        size, n = cmd["size"], cmd["count"]
        cfg = ReplicateConfig()
        cfg.preferred_segment = cmd["target"]
        value = os.urandom(size)
        keys = ["fresh_%d_%d" % (size, i) for i in range(n)]
        failed = Failures()
        lat = {"first": [], "again": []}
        client = MooncakeDistributedStore()
        rc = client.setup(cmd["host"], cmd["metadata"], 0, 16 << 20, "tcp", "", cmd["master"])
        if rc != 0:
            raise RuntimeError("setup of a fresh client -> %d" % rc)
        try:
            for phase in ("first", "again"):
                for k in keys:
                    t = time.perf_counter_ns()
                    rc = client.put(k, value, cfg)
                    lat[phase].append(time.perf_counter_ns() - t)
                    if rc != 0:
                        failed.add("%s put %s -> %d" % (phase, k, rc))
                if client.get(keys[-1]) != value:
                    failed.add("get %s after the %s puts: not the bytes put" % (keys[-1], phase))
                for k in keys:
                    client.remove(k, force=True)
        finally:
            client.close()
        return {"first_p50_us": pct(sorted(lat["first"]), 50) / 1e3,
                "again_p50_us": pct(sorted(lat["again"]), 50) / 1e3,
                "failed": failed.n, "first_failure": failed.first}

    serve_worker({"run": run, "hot": hot, "puts": puts, "fresh": fresh,
                  "churn": lambda store, cmd: churn(store, ReplicateConfig, cmd),
                  "churn_zc": lambda store, cmd: churn_zero_copy(store, ReplicateConfig, cmd),
                  "run_zc": lambda store, cmd: run_zero_copy(store, ReplicateConfig, cmd),
                  "memcpy": lambda store, cmd: memcpy_baseline(cmd["size"], cmd["count"])})


def memcpy_baseline(size, n):
    """One process copying size bytes n times between two buffers spread
    over as much memory as the store run touches (numpy.copyto, so the
    Python call costs about what a store call's binding does)."""
    import numpy as np
    slots = max(1, min(n, (256 << 20) // size))
    src = np.frombuffer(os.urandom(size), dtype=np.uint8)
    dst = np.ones((slots, size), dtype=np.uint8)  # touched: no page faults timed
    srcs = np.tile(src, (slots, 1))
    t0 = time.perf_counter()
    for i in range(n):
        np.copyto(dst[i % slots], srcs[i % slots])
    return {"gbps": size * n / (time.perf_counter() - t0) / 1e9}


class Failures:
    """Failed operations of a run: how many, and what the first one was."""

    def __init__(self):
        self.n, self.first = 0, ""

    def add(self, what, n=1):
        if n > 0 and not self.n:
            self.first = what
        self.n += n

    def batch(self, call, keys, rcs, want):
        """Count the keys of a batch call whose status is not @p want."""
        bad = [(k, rc) for k, rc in zip(keys, rcs) if rc != want]
        if bad:
            self.add("%s %s -> %d" % (call, bad[0][0], bad[0][1]), len(bad))


def registered_pair(store, total):
    """Two buffers of ``total`` bytes registered with ``store``: random
    bytes to put from and zeros to get into.  (src, dst, None), or
    (None, None, {"error": ...}) when registering fails."""
    import ctypes

    src = (ctypes.c_ubyte * total).from_buffer_copy(os.urandom(total))
    dst = (ctypes.c_ubyte * total)()
    for b in (src, dst):
        rc = store.register_buffer(ctypes.addressof(b), total)
        if rc != 0:
            return None, None, {"error": "register_buffer -> %d" % rc}
    return src, dst, None


def run_zero_copy(store, ReplicateConfig, cmd):
    """Zero-copy rows: single get_into, and batch_put_from/batch_get_into."""
    import ctypes

    size, batch, rounds, target = cmd["size"], cmd["batch"], cmd["rounds"], cmd["target"]
    total = size * batch
    src, dst, err = registered_pair(store, total)
    if err:
        return err
    src_p, dst_p = ctypes.addressof(src), ctypes.addressof(dst)
    cfg = ReplicateConfig()
    cfg.preferred_segment = target
    ptrs_src = [src_p + i * size for i in range(batch)]
    ptrs_dst = [dst_p + i * size for i in range(batch)]
    sizes = [size] * batch
    put_s = get_s = single_s = 0.0
    failed = Failures()
    written = []
    try:
        for r in range(rounds):
            keys = ["zc_%d_%d_%d" % (size, r, i) for i in range(batch)]
            t0 = time.perf_counter()
            rcs = store.batch_put_from(keys, ptrs_src, sizes, cfg)
            put_s += time.perf_counter() - t0
            failed.batch("batch_put_from", keys, rcs, 0)
            t0 = time.perf_counter()
            rcs = store.batch_get_into(keys, ptrs_dst, sizes)
            get_s += time.perf_counter() - t0
            failed.batch("batch_get_into", keys, rcs, size)
            t0 = time.perf_counter()
            for k, p in zip(keys, ptrs_dst):
                n = store.get_into(k, p, size)
                if n != size:
                    failed.add("get_into %s -> %d" % (k, n))
            single_s += time.perf_counter() - t0
            written += keys
        # the next run writes as much again at once, as a user's would
        store.batch_remove(written, force=True)
        if bytes(src) != bytes(dst):
            failed.add("zero-copy data mismatch")
    finally:
        store.unregister_buffer(src_p)
        store.unregister_buffer(dst_p)
    n = batch * rounds
    return {"batch_put_s": put_s, "batch_get_s": get_s, "single_get_s": single_s, "n": n,
            "failed": failed.n, "first_failure": failed.first}


def stamp(round_, index):
    """The first 16 bytes of churn value ``index`` of round ``round_``: a
    read of another round's or another key's value shows."""
    return round_.to_bytes(8, "little") + index.to_bytes(8, "little")


def churn(store, ReplicateConfig, cmd):
    """The churn row, bytes API: ``rounds`` times, put ``count`` values of
    ``size`` into the holder, get each back (checking every byte), and
    remove_all(force=True); the next round puts the same keys at once.
    Every put and get is timed alone; a put that does not return 0 and a
    get that does not return the round's bytes are failed operations (the
    run goes on)."""
    size, n, rounds, target = cmd["size"], cmd["count"], cmd["rounds"], cmd["target"]
    cfg = ReplicateConfig()
    cfg.preferred_segment = target
    keys = ["churn_%d_%d" % (size, i) for i in range(n)]
    base = bytearray(os.urandom(size))
    tail = memoryview(base)[16:]
    put_lat, get_lat, rm_lat = [], [], []
    failed = Failures()
    for r in range(rounds):
        for i, k in enumerate(keys):
            base[:16] = stamp(r, i)
            value = bytes(base)
            s = time.perf_counter_ns()
            rc = store.put(k, value, cfg)
            put_lat.append(time.perf_counter_ns() - s)
            if rc != 0:
                failed.add("round %d: put %s -> %d" % (r, k, rc))
        for i, k in enumerate(keys):
            s = time.perf_counter_ns()
            data = store.get(k)
            get_lat.append(time.perf_counter_ns() - s)
            if len(data) != size or data[:16] != stamp(r, i) or memoryview(data)[16:] != tail:
                failed.add("round %d: get %s returned %s" % (r, k, churn_what(data, size, r, i)))
        s = time.perf_counter_ns()
        got = store.remove_all(True)
        rm_lat.append(time.perf_counter_ns() - s)
        if got < 0:
            failed.add("round %d: remove_all -> %d" % (r, got))
    return churn_result(put_lat, get_lat, rm_lat, failed)


def churn_what(data, size, r, i):
    """What a churn get returned instead of value ``i`` of round ``r``."""
    if not data:
        return "nothing"
    if len(data) != size:
        return "%d bytes" % len(data)
    rr, ii = int.from_bytes(data[:8], "little"), int.from_bytes(data[8:16], "little")
    if ii == i and rr < r:
        return "round %d's value" % rr
    if rr <= r and ii != i:
        return "value %d of round %d" % (ii, rr)
    return "other bytes"


def churn_result(put_lat, get_lat, rm_lat, failed, put_ns=None, get_ns=None, ops=None):
    """A churn run's figures: seconds spent in puts and gets (``put_ns``,
    ``get_ns`` when the latencies are per value of a batch), their p50,
    remove_all's p50 and the failed operations."""
    put_ns = sum(put_lat) if put_ns is None else put_ns
    get_ns = sum(get_lat) if get_ns is None else get_ns
    for v in (put_lat, get_lat, rm_lat):
        v.sort()
    return {"put_s": put_ns / 1e9, "get_s": get_ns / 1e9,
            "puts": ops or len(put_lat), "gets": ops or len(get_lat),
            "put_p50_us": pct(put_lat, 50) / 1e3, "p50_us": pct(get_lat, 50) / 1e3,
            "rm_ms": pct(rm_lat, 50) / 1e6, "failed": failed.n, "first_failure": failed.first}


def churn_zero_copy(store, ReplicateConfig, cmd):
    """The churn row with registered buffers: ``batch_put_from`` and
    ``batch_get_into`` of ``batch`` values at a time (each batch timed),
    ``count`` values a round, then remove_all(force=True), ``rounds`` times;
    failed operations as in :func:`churn`."""
    import ctypes

    size, n, batch = cmd["size"], cmd["count"], cmd["batch"]
    rounds, target = cmd["rounds"], cmd["target"]
    total = size * batch
    src, dst, err = registered_pair(store, total)
    if err:
        return err
    src_p, dst_p = ctypes.addressof(src), ctypes.addressof(dst)
    srcv, dstv = memoryview(src).cast("B"), memoryview(dst).cast("B")
    cfg = ReplicateConfig()
    cfg.preferred_segment = target
    keys = ["churn_zc_%d_%d" % (size, i) for i in range(n)]
    put_lat, get_lat, rm_lat = [], [], []
    put_ns = get_ns = 0
    failed = Failures()
    try:
        for r in range(rounds):
            for b0 in range(0, n, batch):
                ks = keys[b0:b0 + batch]
                for j in range(len(ks)):
                    srcv[j * size:j * size + 16] = stamp(r, b0 + j)
                s = time.perf_counter_ns()
                rcs = store.batch_put_from(ks, [src_p + j * size for j in range(len(ks))],
                                           [size] * len(ks), cfg)
                e = time.perf_counter_ns() - s
                put_ns += e
                put_lat.append(e / len(ks))
                failed.batch("round %d: batch_put_from" % r, ks, rcs, 0)
            for b0 in range(0, n, batch):
                ks = keys[b0:b0 + batch]
                ctypes.memset(dst_p, 0, size * len(ks))
                s = time.perf_counter_ns()
                rcs = store.batch_get_into(ks, [dst_p + j * size for j in range(len(ks))],
                                           [size] * len(ks))
                e = time.perf_counter_ns() - s
                get_ns += e
                get_lat.append(e / len(ks))
                for j, rc in enumerate(rcs):
                    got = dstv[j * size:(j + 1) * size]
                    if rc != size or got[:16] != stamp(r, b0 + j) or got[16:] != \
                            srcv[j * size + 16:(j + 1) * size]:
                        failed.add("round %d: batch_get_into %s -> %d, %s" % (
                            r, ks[j], rc, churn_what(bytes(got) if rc > 0 else b"", size, r,
                                                     b0 + j)))
            s = time.perf_counter_ns()
            got = store.remove_all(True)
            rm_lat.append(time.perf_counter_ns() - s)
            if got < 0:
                failed.add("round %d: remove_all -> %d" % (r, got))
    finally:
        store.unregister_buffer(src_p)
        store.unregister_buffer(dst_p)
    # the latencies are each batch's time per value
    return churn_result(put_lat, get_lat, rm_lat, failed, put_ns, get_ns, n * rounds)


# --------------------------------------------------------------------------
# driver side


class Worker:
    """A client process running ``script --role worker`` (this file's
    worker_main, or another benchmark's)."""

    def __init__(self, env, script=__file__, prefix=()):
        self.p = subprocess.Popen(list(prefix) + [sys.executable, script, "--role", "worker"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  env=env, text=True)

    def call(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("worker died during %s" % cmd["op"])
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(out["error"])
        return out

    def stop(self):
        try:
            self.call(op="quit")
            self.p.wait(timeout=10)
        except Exception:
            self.p.kill()
            self.p.wait()


class Veth:
    """Two network namespaces joined by one veth pair: ``a`` (the driver)
    and ``b`` (the master and the holder), addresses in a private /30
    chosen per run.  Created by the constructor, removed by close(), also
    after a failure; nothing is routed anywhere else."""

    def __init__(self):
        tag = "mcb%d" % (os.getpid() % 100000)
        net = "10.215.%d" % (os.getpid() % 250 + 1)
        self.ns = {"a": tag + "a", "b": tag + "b"}
        self.ip = {"a": net + ".1", "b": net + ".2"}
        self._link = tag + "v"
        self._made = []
        try:
            for h in ("a", "b"):
                self._sh("ip", "netns", "add", self.ns[h])
                self._made.append(self.ns[h])
            self._sh("ip", "link", "add", self._link, "type", "veth", "peer", "name",
                     self._link + "p")
            for h, dev in (("a", self._link), ("b", self._link + "p")):
                self._sh("ip", "link", "set", dev, "netns", self.ns[h])
                self._sh("ip", "-n", self.ns[h], "addr", "add", self.ip[h] + "/30", "dev", dev)
                self._sh("ip", "-n", self.ns[h], "link", "set", dev, "up")
                self._sh("ip", "-n", self.ns[h], "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _sh(*argv):
        subprocess.run(argv, check=True, capture_output=True, timeout=20)

    def prefix(self, h):
        return ["ip", "netns", "exec", self.ns[h]]

    def close(self):
        # deleting a namespace deletes the veth end inside it, and its peer
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        self._made = []


def veth_usable():
    """'' when the veth run can be made here, else why not."""
    if os.geteuid() != 0:
        return "--net veth needs root (ip netns, veth)"
    if subprocess.run(["sh", "-c", "command -v ip"], capture_output=True).returncode != 0:
        return "--net veth needs iproute2 (ip)"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--metadata", choices=["p2p", "http"], default="p2p")
    ap.add_argument("--transport", choices=["auto", "tcp"], default="auto",
                    help="auto: same-host shared memory where possible; tcp: MC_TE_SHM=0")
    ap.add_argument("--net", choices=["loopback", "veth", "both"], default="loopback",
                    help="veth: driver and holder in two network namespaces joined by a "
                         "veth pair (root; TCP only); both: the loopback table, then veth")
    ap.add_argument("--no-zero-copy", dest="zero_copy", action="store_false",
                    help="skip the zero-copy rows")
    ap.add_argument("--put-ab", type=int, default=0, metavar="ROUNDS",
                    help="also time puts alone against two-trip puts (a second driver with "
                         "MC_PUT_ONE_TRIP=0), alternating for ROUNDS rounds per size")
    ap.add_argument("--churn-rounds", type=int, default=CHURN_ROUNDS, metavar="N",
                    help="rounds of the churn rows (put, get, remove_all with force, put "
                         "again at once); 0 skips them")
    ap.add_argument("--no-churn-short-lease", dest="churn_short_lease", action="store_false",
                    help="skip the churn rows on a master with a %d ms lease" % SHORT_LEASE_MS)
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run the whole measurement N times (a fresh master and clients "
                         "each time) and end with every ratio's median over the N runs")
    ap.add_argument("--plot", metavar="DIR",
                    help="write store_bench.json and PNG plots into DIR (python3-matplotlib)")
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "worker":
        return worker_main()
    if args.repeat < 1:
        print("store_bench: --repeat must be at least 1", file=sys.stderr)
        return 2
    if args.plot and args.repeat > 1:
        print("store_bench: --plot draws one run; use --repeat 1", file=sys.stderr)
        return 2
    if args.net != "loopback":
        why = veth_usable()
        if why:
            print("store_bench: " + why, file=sys.stderr)
            return 2
        if args.plot:
            print("store_bench: --plot draws the loopback run only; use --net loopback",
                  file=sys.stderr)
            return 2
    failed = 0
    if args.net in ("loopback", "both"):
        failed += measure_repeated(args, None, "loopback")
    if args.net in ("veth", "both"):
        if args.net == "both":
            print()
        veth = Veth()
        try:
            failed += measure_repeated(args, veth, "veth")
        finally:
            veth.close()
    if failed:
        print("store_bench: FAIL: %d operations failed (a put that did not return 0, a get "
              "that did not return the bytes put)" % failed, file=sys.stderr)
        return 1
    return 0


def measure_repeated(args, veth, title):
    """measure() --repeat times; with more than one run, every ratio's
    median over them after the last run's tables.  Returns the number of
    failed operations over all runs."""
    runs = []
    failed = 0
    for i in range(args.repeat):
        if i > 0:
            print()
        summary, failures = measure(args, veth)
        runs.append(summary)
        failed += sum(n for _, n, _ in failures)
    if args.repeat > 1:
        print_summary(title, runs)
    return failed


def measure(args, veth):
    """One run of every row, on loopback (@p veth None) or across @p veth;
    prints its tables and returns its ratios (and batch rates) as a list
    of (label, value), for --repeat's summary, and its failed operations as
    a list of (row, count, the first one), each also printed as FAIL."""
    build = os.path.abspath(args.build_dir)
    sizes = [int(s) for s in args.sizes.split(",")]
    transport = "tcp" if veth is not None else args.transport
    env = bench_env(build, transport)
    pre_a = veth.prefix("a") if veth else []
    pre_b = veth.prefix("b") if veth else []
    host_a = veth.ip["a"] if veth else "localhost"
    host_b = veth.ip["b"] if veth else "127.0.0.1"
    masters = []
    workers = []
    summary = []
    failures = []   # (row, failed operations, the first one)

    def cluster(extra=()):
        """A master (the flags @p extra; otherwise the defaults a user
        gets, its 10 s lease among them) and the holder and driver
        processes: (driver, setup answer of the holder, master address,
        metadata).  stop_cluster() ends the last one started."""
        master, rpc, http = start_master(build, extra, prefix=pre_b, host=host_b)
        masters.append(master)
        del cluster_workers[:]
        metadata = "P2PHANDSHAKE" if args.metadata == "p2p" else \
            "http://%s:%d/metadata" % (host_b, http)
        master_addr = "%s:%d" % (host_b, rpc)
        # twice the largest run (or every round of the zero-copy rows), plus
        # room.  Every run removes its values with force and the next run
        # (the next churn round) writes as much again at once, as a user's
        # program would: a store that held removed values' space until some
        # lease ended would run past its high watermark here, evict or
        # refuse, and the rows count that as failed operations.
        holder_seg = 2 * max([ops_for(s) * s for s in sizes] + [232 << 20]) + (64 << 20)
        holder, driver = Worker(env, prefix=pre_b), Worker(env, prefix=pre_a)
        workers.extend([holder, driver])
        cluster_workers.extend([holder, driver])
        h = holder.call(op="setup", metadata=metadata, master=master_addr,
                        host=veth.ip["b"] if veth else "localhost",
                        segment=holder_seg, local_buffer=16 << 20)
        driver.call(op="setup", metadata=metadata, master=master_addr, host=host_a,
                    segment=0, local_buffer=64 << 20)
        return driver, h, master_addr, metadata

    cluster_workers = []

    def stop_cluster():
        for w in cluster_workers:
            w.stop()
            workers.remove(w)
        stop_master(masters.pop())

    try:
        driver, h, master_addr, metadata = cluster()
        two_trip = None
        if args.put_ab > 0:
            two_trip = Worker(dict(env, MC_PUT_ONE_TRIP="0"), prefix=pre_a)
            workers.append(two_trip)
            two_trip.call(op="setup", metadata=metadata, master=master_addr, host=host_a,
                          segment=0, local_buffer=64 << 20)
        raw_bin = os.path.join(build, "bench", "raw_tcp")

        def raw_once(size, n):
            if veth is None:
                return json.loads(subprocess.check_output([raw_bin, str(size), str(n)],
                                                          text=True))
            srv = subprocess.Popen(pre_b + [raw_bin, "--serve", host_b, str(size)],
                                   stdout=subprocess.PIPE, text=True)
            try:
                port = srv.stdout.readline().strip()
                if not port:
                    raise RuntimeError("raw_tcp --serve did not start")
                return json.loads(subprocess.check_output(
                    pre_a + [raw_bin, str(size), str(n), "%s:%s" % (host_b, port)],
                    text=True, timeout=300))
            finally:
                try:
                    srv.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    srv.kill()
                    srv.wait()

        def raw_median(runs):
            """The median (by throughput) of baseline runs."""
            return sorted(runs, key=lambda r: r["gbps"])[len(runs) // 2]

        def raw_tcp(size, n):
            """Median of RAW_RUNS baseline runs."""
            return raw_median([raw_once(size, n) for _ in range(RAW_RUNS)])

        def paired(raw_n=None, **cmd):
            """STORE_RUNS store runs of @p cmd and RAW_RUNS baseline runs of
            its size, interleaved (raw, store, raw, store, ...), so that a
            load drifting over the minute this takes weighs on both sides of
            the ratio alike: (median store run, median raw run).  @p raw_n:
            the baseline's value count, when not the command's."""
            store, raw = [], []
            for i in range(max(STORE_RUNS, RAW_RUNS)):
                if i < RAW_RUNS:
                    raw.append(raw_once(cmd["size"], raw_n or cmd["count"]))
                if i < STORE_RUNS:
                    store.append(driver.call(**cmd))
            return median_of(store), raw_median(raw)

        def median_of(runs):
            """Median (by get time) of store runs.  The zero-copy rows time
            three operations per run; each figure is the median of its own,
            so that one slow phase does not pick the others.  The put
            figures are the medians of their own too."""
            for r in runs:
                if "error" in r:
                    raise RuntimeError("store run failed: %s" % r["error"])
            failed = sum(r.get("failed", 0) for r in runs)
            first = next((r["first_failure"] for r in runs if r.get("failed")), "")
            if "get_s" in runs[0]:
                out = dict(sorted(runs, key=lambda r: r["get_s"])[len(runs) // 2])
                keys = ("put_s", "put_p50_us", "put_p99_us")
            else:
                out = dict(runs[0])
                keys = ("batch_put_s", "batch_get_s", "single_get_s")
            for key in keys:
                if key in runs[0]:  # the hot-key rows time gets only
                    out[key] = sorted(r[key] for r in runs)[len(runs) // 2]
            out["failed"], out["first_failure"] = failed, first
            return out

        def note(row, r):
            """Record the failed operations of store run(s) @p r."""
            if r.get("failed"):
                failures.append((row, r["failed"], r["first_failure"]))

        rows = []
        for size in sizes:
            n = ops_for(size)
            r, raw = paired(op="run", size=size, count=n, target=h["hostname"])
            note("%s put/get" % human(size), r)
            rows.append((size, n, r, raw))

        hot_rows = []
        for size in (4 << 10, 64 << 10):
            if size in sizes:
                r, raw = paired(op="hot", size=size, count=2000, target=h["hostname"])
                note("%s hot get" % human(size), r)
                hot_rows.append((size, r, raw))

        fresh_rows = []
        for size in [z for z in sizes if z >= 1 << 20]:
            # 64 MiB of values, each run by a client set up for it
            n = max(4, (64 << 20) // size)
            runs = [driver.call(op="fresh", size=size, count=n, target=h["hostname"],
                                master=master_addr, metadata=metadata, host=host_a)
                    for _ in range(STORE_RUNS)]
            for r in runs:
                if "error" in r:
                    raise RuntimeError("fresh-client run failed: %s" % r["error"])
                note("%s fresh client" % human(size), r)
            fresh_rows.append((size, n, statistics.median([r["first_p50_us"] for r in runs]),
                               statistics.median([r["again_p50_us"] for r in runs])))

        ab_rows = []
        for size in sizes if two_trip is not None else []:
            n = max(MIN_OPS, min(2000, TOTAL_BYTES // 4 // size))
            one, two = [], []
            for r in range(args.put_ab):
                # alternate which goes first: a drifting load hits both alike
                pair = [(one, driver, "ab1"), (two, two_trip, "ab2")]
                for out, w, prefix in (pair if r % 2 == 0 else pair[::-1]):
                    res = w.call(op="puts", size=size, count=n, target=h["hostname"],
                                 prefix=prefix)
                    note("%s puts (%s)" % (human(size), prefix), res)
                    out.append(res["p50_us"])
            ab_rows.append((size, n, sorted(one)[len(one) // 2], sorted(two)[len(two) // 2],
                            raw_tcp(size, n)))

        zc_rows = []
        if args.zero_copy:
            zc = [(4 << 10, 32, 300), (1 << 20, 16, 12)]
            if (16 << 20) in sizes:
                # as many values as the 16 MiB get row, which the holder's
                # segment is sized for
                zc.append((16 << 20, 4, ops_for(16 << 20) // 4))
            for size, batch, rounds in zc:
                z, raw = paired(raw_n=batch * rounds, op="run_zc", size=size, batch=batch,
                                rounds=rounds, target=h["hostname"])
                note("%s x %d zero copy" % (human(size), batch), z)
                zc_rows.append((size, batch, z, raw,
                                driver.call(op="memcpy", size=size, count=z["n"])))

        churn_rows = []
        raw_of = {size: raw for size, _, _, raw in rows}

        # every churn row on a master and holder of its own, so that what
        # one row leaves behind does not weigh on the next
        leases = [("10 s", [])]
        if args.churn_short_lease:
            leases.append(("%d ms" % SHORT_LEASE_MS,
                           ["--default_kv_lease_ttl=%d" % SHORT_LEASE_MS]))
        apis = [("bytes", "churn")] + ([("zero copy", "churn_zc")] if args.zero_copy else [])
        for lease, flags in leases if args.churn_rounds > 0 else []:
            for size in sizes:
                for api, op in apis:
                    drv, hs, _, _ = cluster(flags)
                    batch = 32 if size <= (64 << 10) else 16 if size <= (1 << 20) else 4
                    c = drv.call(op=op, size=size, count=ops_for(size), batch=batch,
                                 rounds=args.churn_rounds, target=hs["hostname"])
                    stop_cluster()
                    note("%s churn %s, lease %s" % (human(size), api, lease), c)
                    churn_rows.append((size, api, lease, c, raw_of[size]))

        where = ("1 master + 2 client processes on loopback" if veth is None else
                 "driver | master + holder in two network namespaces joined by a veth pair")
        print("mooncake store benchmark: %s, metadata=%s, transport=%s; medians of %d store "
              "runs and %d raw-TCP runs; TCP congestion control %s"
              % (where, args.metadata,
                 "tcp" if transport == "tcp" else "same-host shared memory",
                 STORE_RUNS, RAW_RUNS, congestion_control()))
        print("%-8s %6s | %9s %9s %8s | %9s %9s %8s %8s | %9s %8s | %6s %6s %6s" % (
            "value", "ops", "put GB/s", "put op/s", "put p50", "get GB/s", "get op/s",
            "p50 us", "p99 us", "raw GB/s", "raw p50", "get/raw", "put/raw", "p50put/raw"))
        for size, n, r, raw in rows:
            get_gbps = size * n / r["get_s"] / 1e9
            put_gbps = size * n / r["put_s"] / 1e9
            print("%-8s %6d | %9.3f %9.0f %8.1f | %9.3f %9.0f %8.1f %8.1f | %9.3f %8.1f | "
                  "%6.2f %6.2f %6.2f" % (
                      human(size), n, put_gbps, n / r["put_s"], r["put_p50_us"], get_gbps,
                      n / r["get_s"], r["p50_us"], r["p99_us"], raw["gbps"], raw["p50_us"],
                      get_gbps / raw["gbps"], put_gbps / raw["gbps"],
                      r["put_p50_us"] / raw["p50_us"]))
            summary += [("%s get p50 / raw p50" % human(size), r["p50_us"] / raw["p50_us"]),
                        ("%s get / raw (GB/s)" % human(size), get_gbps / raw["gbps"]),
                        ("%s put p50 / raw p50" % human(size),
                         r["put_p50_us"] / raw["p50_us"]),
                        ("%s put / raw (GB/s)" % human(size), put_gbps / raw["gbps"])]
        if fresh_rows:
            print()
            print("a fresh client's puts (a store set up for each of %d runs): p50 of its first "
                  "puts, into pages of the holder it has never written, and of the same puts "
                  "again after removing them; medians of the runs" % STORE_RUNS)
            print("%-8s %6s | %11s %11s %7s" % ("value", "ops", "first us", "again us",
                                               "first/again"))
            for size, n, first, again in fresh_rows:
                print("%-8s %6d | %11.1f %11.1f %7.2f" % (human(size), n, first, again,
                                                         first / again))
                summary.append(("%s fresh client first put p50 / again" % human(size),
                                first / again))
        if ab_rows:
            print()
            print("puts alone, one round trip (PUT_COMMIT) against two (MC_PUT_ONE_TRIP=0): "
                  "medians of %d alternating rounds of put p50" % args.put_ab)
            print("%-8s %6s | %9s %9s %7s | %8s | %9s %9s" % (
                "value", "ops", "1-trip us", "2-trip us", "1/2", "raw p50", "1-trip/raw",
                "2-trip/raw"))
            for size, n, one, two, raw in ab_rows:
                print("%-8s %6d | %9.1f %9.1f %7.2f | %8.1f | %9.2f %9.2f" % (
                    human(size), n, one, two, one / two, raw["p50_us"], one / raw["p50_us"],
                    two / raw["p50_us"]))
        if hot_rows:
            print()
            print("repeat gets of one hot key (2000 after the first): p50 against raw TCP p50")
            print("%-8s | %8s %8s | %8s | %6s" % ("value", "p50 us", "p99 us", "raw p50",
                                                  "p50/raw"))
            for size, r, raw in hot_rows:
                print("%-8s | %8.1f %8.1f | %8.1f | %6.2f" % (
                    human(size), r["p50_us"], r["p99_us"], raw["p50_us"],
                    r["p50_us"] / raw["p50_us"]))
                summary.append(("%s hot get p50 / raw p50" % human(size),
                                r["p50_us"] / raw["p50_us"]))
        if args.plot:
            write_plots(args, rows, driver)
        if zc_rows:
            print()
            print("zero copy (registered buffers): batch_put_from / batch_get_into, and get_into one key at a time")
            print("%-8s %5s | %11s %11s %9s | %11s %9s | %9s %6s | %9s" % (
                "value", "batch", "bput keys/s", "bget keys/s", "bget GB/s", "get_into/s",
                "GB/s", "raw GB/s", "gi/raw", "memcpy"))
            for size, batch, z, raw, mc in zc_rows:
                n = z["n"]
                gi_gbps = size * n / z["single_get_s"] / 1e9
                print("%-8s %5d | %11.0f %11.0f %9.3f | %11.0f %9.3f | %9.3f %6.2f | %9.3f" % (
                    human(size), batch, n / z["batch_put_s"], n / z["batch_get_s"],
                    size * n / z["batch_get_s"] / 1e9, n / z["single_get_s"], gi_gbps,
                    raw["gbps"], gi_gbps / raw["gbps"], mc["gbps"]))
                summary += [("%s x %d batch_get_into (keys/s)" % (human(size), batch),
                             n / z["batch_get_s"]),
                            ("%s get_into / raw (GB/s)" % human(size), gi_gbps / raw["gbps"])]
            print("memcpy: GB/s of numpy.copyto in the driver, the same sizes and count "
                  "(the ceiling of a same-host get)")
        if churn_rows:
            print()
            print("churn: put, get back (every byte checked), remove_all(force=True), put the "
                  "same keys again at once; %d rounds; ratios against the raw TCP of the main "
                  "table" % args.churn_rounds)
            print("%-8s %-9s %5s | %9s %8s | %9s %8s %9s | %6s %6s | %8s | %6s" % (
                "value", "api", "lease", "put op/s", "put p50", "get op/s", "get p50",
                "get GB/s", "get/raw", "put/raw", "rm_all ms", "failed"))
            for size, api, lease, c, raw in churn_rows:
                get_gbps = size * c["gets"] / c["get_s"] / 1e9
                put_gbps = size * c["puts"] / c["put_s"] / 1e9
                print("%-8s %-9s %5s | %9.0f %8.1f | %9.0f %8.1f %9.3f | %6.2f %6.2f | %8.2f | "
                      "%6d%s" % (human(size), api, lease.replace(" ", ""), c["puts"] / c["put_s"],
                                c["put_p50_us"], c["gets"] / c["get_s"], c["p50_us"], get_gbps,
                                get_gbps / raw["gbps"], put_gbps / raw["gbps"], c["rm_ms"],
                                c["failed"], "  FAIL" if c["failed"] else ""))
                summary += [("%s churn %s lease %s get / raw (GB/s)" % (human(size), api, lease),
                             get_gbps / raw["gbps"]),
                            ("%s churn %s lease %s failed ops" % (human(size), api, lease),
                             c["failed"])]
        if failures:
            print()
            for row, n, first in failures:
                print("FAIL %s: %d failed operations; the first: %s" % (row, n, first))
    finally:
        for w in workers:
            w.stop()
        for m in masters:
            stop_master(m)
    return summary, failures


def print_summary(title, runs):
    """--repeat: every figure of @p runs (one measure() list per run) with
    its median over the runs."""
    print()
    print("%s: %d runs, each figure with its median over them" % (title, len(runs)))
    width = max(len(label) for label, _ in runs[0])
    for k, (label, _) in enumerate(runs[0]):
        vals = [run[k][1] for run in runs]
        fmt = "%.0f" if max(vals) >= 100 else "%.2f"
        print("%-*s  median %8s  | %s" % (width, label, fmt % statistics.median(vals),
                                          " ".join(fmt % v for v in vals)))


def write_plots(args, rows, driver):
    """memcpy at every size (printed too), then the JSON and the figures."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plot

    out = []
    print()
    print("%-8s | %9s %9s %9s %9s | %9s %9s" % ("value", "put GB/s", "get GB/s", "raw GB/s",
                                                 "memcpy", "get p50", "get p99"))
    for size, n, r, raw in rows:
        mc = driver.call(op="memcpy", size=size, count=n)
        row = {"size": size, "ops": n, "put_gbps": size * n / r["put_s"] / 1e9,
               "get_gbps": size * n / r["get_s"] / 1e9, "raw_gbps": raw["gbps"],
               "memcpy_gbps": mc["gbps"], "get_p50_us": r["p50_us"], "get_p99_us": r["p99_us"],
               "get_cdf_us": r["cdf_us"]}
        out.append(row)
        print("%-8s | %9.3f %9.3f %9.3f %9.3f | %9.1f %9.1f" % (
            human(size), row["put_gbps"], row["get_gbps"], row["raw_gbps"], row["memcpy_gbps"],
            row["get_p50_us"], row["get_p99_us"]))
    results = {"title": "mooncake store, 2 clients on loopback (metadata=%s, transport=%s)"
                        % (args.metadata, args.transport),
               "rows": out}
    os.makedirs(args.plot, exist_ok=True)
    with open(os.path.join(args.plot, "store_bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    for p in plot.draw(results, args.plot):
        print("wrote", p)


def bench_env(build, transport):
    """The environment of the client processes: the build tree's package and
    library, and MC_TE_SHM for --transport (tcp: 0, auto: 1)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["LD_LIBRARY_PATH"] = os.path.join(build, ".libs") + os.pathsep + \
        env.get("LD_LIBRARY_PATH", "")
    env["MC_TE_SHM"] = "0" if transport == "tcp" else "1"
    return env


def start_master(build, extra=(), prefix=(), host="127.0.0.1"):
    """A mooncake_master on free ports of @p host (with the flags @extra,
    run under the argv @p prefix: a network namespace), accepting:
    (process, rpc port, http metadata port)."""
    rpc, http = free_port(), free_port()
    master = subprocess.Popen(
        list(prefix) +
        [os.path.join(build, "mooncake_master"), "--port=%d" % rpc, "--rpc_address=" + host,
         "--enable_http_metadata_server=true", "--http_metadata_server_host=" + host,
         "--http_metadata_server_port=%d" % http] + list(extra),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    probe = (list(prefix) + [sys.executable, "-c",
             "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), "
             "timeout=1).close()", host, str(rpc)]) if prefix else None
    while True:
        try:
            if probe:
                subprocess.run(probe, check=True, capture_output=True, timeout=5)
            else:
                socket.create_connection((host, rpc), timeout=1).close()
            return master, rpc, http
        except (OSError, subprocess.SubprocessError):
            if time.time() > deadline or master.poll() is not None:
                stop_master(master)
                raise RuntimeError("master did not start")
            time.sleep(0.05)


@contextlib.contextmanager
def holder_and_driver(build_dir, transport, script, holder_segment, driver_buffer, veth=None):
    """A master plus two client processes running ``script --role worker``:
    the *holder* mounts ``holder_segment`` bytes, the *driver* none.  With
    @p veth (a Veth) the driver runs in its namespace ``a``, the master
    and the holder in ``b``, over TCP.  Yields (driver, holder's
    hostname); everything is stopped on exit."""
    build = os.path.abspath(build_dir)
    env = bench_env(build, "tcp" if veth is not None else transport)
    pre_a, pre_b = (veth.prefix("a"), veth.prefix("b")) if veth is not None else ((), ())
    host_a, host_b = (veth.ip["a"], veth.ip["b"]) if veth is not None else \
        ("localhost", "127.0.0.1")
    master, rpc, _ = start_master(build, prefix=pre_b, host=host_b)
    workers = []
    try:
        addr = "%s:%d" % (host_b, rpc)
        holder, driver = Worker(env, script, prefix=pre_b), Worker(env, script, prefix=pre_a)
        workers = [holder, driver]
        h = holder.call(op="setup", master=addr, segment=holder_segment, local_buffer=16 << 20,
                        host=host_b if veth is not None else "localhost")
        driver.call(op="setup", master=addr, segment=0, local_buffer=driver_buffer,
                    host=host_a)
        yield driver, h["hostname"]
    finally:
        for w in workers:
            w.stop()
        stop_master(master)


def stop_master(master):
    master.send_signal(signal.SIGTERM)
    try:
        master.wait(timeout=10)
    except subprocess.TimeoutExpired:
        master.kill()
        master.wait()


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return "%d %s" % (n, unit)
        n //= 1024
    return "%d TiB" % n


if __name__ == "__main__":
    sys.exit(main())

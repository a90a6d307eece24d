#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Dummy-client benchmark: a dummy's zero-copy reads against an ordinary
real client's, same run.

Starts a mooncake_master on free loopback ports, a mooncake_client daemon
(the real client that holds the only segment and serves dummy clients on
its unix socket, docs/protocol.md §8) and two client processes on the same
host:

  * the *dummy*: setup_dummy(pool, staging, daemon); its buffers come from
    its shared pool (alloc_from_mem_pool), so the daemon moves the bytes
    straight between its segment and the dummy's memory;
  * the *ordinary* client: setup() with no segment of its own; it reads
    the daemon's segment through the same-host shared-memory path (it maps
    the segment and copies), into buffers it registered.

The ordinary client writes the objects once (they land in the daemon's
segment, the only one); then both sides read the same keys, alternating
which goes first in each round:

  * batch_get_into of 32 x 4 KiB (target: dummy >= 0.8 x ordinary);
  * get_into of one 1 MiB object (target: dummy >= 0.7 x ordinary).

Then SGLang HiCache's page pattern, standalone mode against embedded: each
side allocates a host KV pool with MooncakeHostMemAllocator and registers
it (the dummy's register_buffer hands the memfd to the daemon, which then
reads and writes the pool in place), and per call moves a batch of 32 x 64
KiB fresh pages out (batch_put_from) and back in (batch_get_into), checked
byte for byte; the keys are removed after each call, untimed (target: dummy
>= 0.8 x ordinary, put + get).

Each figure is the median over rounds of the round's mean time per call.

    bench/dummy_bench.py [--build-dir build] [--transport auto|tcp] [--rounds N]
"""
import argparse
import ctypes
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import (Worker, bench_env, free_port, human,  # noqa: E402
                         start_master, stop_master)

BATCH, BATCH_SIZE = 32, 4 << 10
BIG = 1 << 20
ROWS = (  # name, keys, size per key, calls per round
    ("batch_get_into", BATCH, BATCH_SIZE, 200),
    ("get_into", 1, BIG, 200),
)
ROUNDS = 15
# SGLang's page pattern: name, pages per batch, page size, calls per round
PAGES = ("sglang_pages", 32, 64 << 10, 20)
TARGETS = {"batch_get_into": 0.8, "get_into": 0.7, "sglang_pages": 0.8}
MiB = 1 << 20


# --------------------------------------------------------------------------
# worker side: the dummy or the ordinary client, driven by JSON lines


def worker_main():
    import json
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    bufs = {}  # row name -> list of addresses
    regions = []  # (address, release) for quit
    state = {"dummy": False, "pool": 0}

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def buffer(total):
        """total bytes the zero-copy calls may use: from the shared pool for
        a dummy, registered ctypes memory for the ordinary client."""
        if state["dummy"]:
            p = store.alloc_from_mem_pool(total)
            _check(p != 0, "alloc_from_mem_pool(%d) failed" % total)
            regions.append((p, store._mem_pool_free))
            return p
        mem = (ctypes.c_ubyte * total)()
        p = ctypes.addressof(mem)
        _check(store.register_buffer(p, total) == 0, "register_buffer failed")
        regions.append((p, store.unregister_buffer))
        regions.append((mem, None))  # keep it alive
        return p

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "setup":
                rc = store.setup("localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                                 cmd["master"])
                reply({"rc": rc})
            elif op == "setup_dummy":
                rc = store.setup_dummy(cmd["pool"], cmd["staging"], cmd["addr"])
                state["dummy"] = rc == 0
                reply({"rc": rc})
            elif op == "seed":
                # the objects every read row reads: written once, by one side
                sums = {}
                for name, n, size, _ in ROWS:
                    p = buffer(n * size)
                    keys = ["%s_%d" % (name, i) for i in range(n)]
                    data = os.urandom(n * size)
                    ctypes.memmove(p, data, n * size)
                    rcs = store.batch_put_from(keys, [p + i * size for i in range(n)],
                                               [size] * n)
                    _check(rcs == [0] * n, "batch_put_from -> %r" % rcs[:4])
                    sums[name] = hashlib.sha256(data).hexdigest()
                reply(sums)
            elif op == "prepare":
                for name, n, size, _ in ROWS:
                    bufs[name] = buffer(n * size)
                reply({"rc": 0})
            elif op == "hostpool":
                # SGLang's host KV pool: out pages, then in pages
                from mooncake.store import MooncakeHostMemAllocator
                _, n, size, _ = PAGES
                alloc = MooncakeHostMemAllocator()
                p = alloc.alloc(2 * n * size)
                regions.append((p, alloc.free))
                _check(store.register_buffer(p, 2 * n * size) == 0,
                       "register_buffer of the host pool failed")
                regions.append((p, store.unregister_buffer))
                for i in range(n):
                    ctypes.memmove(p + i * size, os.urandom(size), size)
                state["pool"] = p
                reply({"rc": 0})
            elif op == "pages":
                reply(pages_row(store, state["pool"], cmd["tag"], cmd["calls"]))
            elif op == "read":
                reply(read_row(store, bufs, cmd["row"], cmd["calls"]))
            elif op == "exist":
                # no data: the cost of one call's round trips alone
                key, is_exist = "%s_0" % ROWS[0][0], store.is_exist
                t0 = time.perf_counter()
                for _ in range(cmd["calls"]):
                    got = is_exist(key)
                _check(got == 1, "is_exist -> %d" % got)
                reply({"s_per_call": (time.perf_counter() - t0) / cmd["calls"]})
            elif op == "stats":
                # the dummy's hop alone: STATS is answered by mooncake_client
                # itself, without asking the master
                stat = store._store.dummy_stat
                t0 = time.perf_counter()
                for _ in range(cmd["calls"]):
                    got = stat(0)
                _check(got >= 1, "dummy_stat -> %d" % got)
                reply({"s_per_call": (time.perf_counter() - t0) / cmd["calls"]})
            elif op == "quit":
                for p, release in reversed(regions):
                    if release is not None:
                        release(p)
                store.close()
                reply({"rc": 0})
                return
        except Exception as e:  # report and keep the driver's protocol
            reply({"error": "%s: %s" % (type(e).__name__, e)})


def _check(cond, what):
    if not cond:
        raise RuntimeError(what)


def pages_row(store, pool, tag, calls):
    """`calls` rounds of SGLang's page traffic on the host pool at `pool`:
    batch_put_from of fresh keys from its first half, batch_get_into of them
    into its second half (checked), then (untimed) their removal.  Mean
    seconds per call of each half."""
    _, n, size, _ = PAGES
    src = [pool + i * size for i in range(n)]
    dst = [pool + (n + i) * size for i in range(n)]
    sizes = [size] * n
    put_s = get_s = 0.0
    for c in range(calls):
        keys = ["%s_%d_%d" % (tag, c, i) for i in range(n)]
        t0 = time.perf_counter()
        rcs = store.batch_put_from(keys, src, sizes)
        t1 = time.perf_counter()
        got = store.batch_get_into(keys, dst, sizes)
        t2 = time.perf_counter()
        _check(rcs == [0] * n, "batch_put_from -> %r" % rcs[:4])
        _check(got == sizes, "batch_get_into -> %r" % got[:4])
        put_s += t1 - t0
        get_s += t2 - t1
        _check(store.batch_remove(keys, force=True) == [0] * n, "batch_remove failed")
    _check(ctypes.string_at(src[0], n * size) == ctypes.string_at(dst[0], n * size),
           "the pages read back differ from those written")
    return {"put_s": put_s / calls, "get_s": get_s / calls}


def read_row(store, bufs, name, calls):
    """`calls` reads of row `name` into this side's buffer; the mean
    seconds per call, and the sha256 of what the last call read."""
    _, n, size, _ = next(r for r in ROWS if r[0] == name)
    base = bufs[name]
    keys = ["%s_%d" % (name, i) for i in range(n)]
    ptrs = [base + i * size for i in range(n)]
    sizes = [size] * n
    if n == 1:
        key, ptr = keys[0], ptrs[0]
        get_into = store.get_into
        t0 = time.perf_counter()
        for _ in range(calls):
            got = get_into(key, ptr, size)
        dt = time.perf_counter() - t0
        _check(got == size, "get_into -> %d" % got)
    else:
        batch_get_into = store.batch_get_into
        t0 = time.perf_counter()
        for _ in range(calls):
            got = batch_get_into(keys, ptrs, sizes)
        dt = time.perf_counter() - t0
        _check(got == sizes, "batch_get_into -> %r" % got[:4])
    digest = hashlib.sha256(ctypes.string_at(base, n * size)).hexdigest()
    return {"s_per_call": dt / calls, "sha256": digest}


# --------------------------------------------------------------------------
# driver side


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def start_daemon(build, env, master_addr, segment):
    """A mooncake_client on a free port, ready: (process, its address, log)."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="mc-bench-client-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [os.path.join(build, "mooncake_client"), "--host=127.0.0.1",
         "--metadata_server=P2PHANDSHAKE", "--master_server_address=%s" % master_addr,
         "--port=%d" % port, "--global_segment_size=%d" % segment,
         "--local_buffer_size=16MB"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 20
    while True:
        with open(log.name, errors="replace") as f:
            text = f.read()
        if "ready" in text:
            return proc, "127.0.0.1:%d" % port, log.name
        if proc.poll() is not None or time.time() > deadline:
            stop_daemon(proc, log.name)
            raise RuntimeError("mooncake_client did not start:\n" + text)
        time.sleep(0.05)


def stop_daemon(proc, log):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        os.unlink(log)
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--transport", choices=["auto", "tcp"], default="auto",
                    help="the ordinary client's transport: auto: same-host shared memory; "
                    "tcp: MC_TE_SHM=0")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "worker":
        return worker_main()

    build = os.path.abspath(args.build_dir)
    env = bench_env(build, args.transport)
    master, rpc, _ = start_master(build)
    daemon = log = None
    workers = []
    try:
        master_addr = "127.0.0.1:%d" % rpc
        daemon, daemon_addr, log = start_daemon(build, env, master_addr, 256 * MiB)
        dummy, ordinary = Worker(env, __file__), Worker(env, __file__)
        workers = [dummy, ordinary]
        _check(ordinary.call(op="setup", master=master_addr)["rc"] == 0, "setup failed")
        _check(dummy.call(op="setup_dummy", pool=64 * MiB, staging=16 * MiB,
                          addr=daemon_addr)["rc"] == 0, "setup_dummy failed")
        sums = ordinary.call(op="seed")
        for w in workers:
            w.call(op="prepare")

        print("mooncake dummy-client benchmark: 1 master + 1 mooncake_client daemon (the "
              "segment) + a dummy client and an ordinary client on loopback; ordinary "
              "transport=%s; the two sides alternate, medians over %d rounds"
              % ("tcp" if args.transport == "tcp" else "same-host shared memory",
                 args.rounds))
        print()
        print("%-26s %6s | %10s %9s | %10s %9s | %6s %7s" % (
            "read", "calls", "dummy us", "GB/s", "ordinary", "GB/s", "ratio", "target"))
        results = {}
        for name, n, size, calls in ROWS:
            per = {"dummy": [], "ordinary": []}
            for r in range(args.rounds):
                order = (("dummy", dummy), ("ordinary", ordinary))
                for side, w in (order if r % 2 == 0 else order[::-1]):
                    out = w.call(op="read", row=name, calls=calls)
                    _check(out["sha256"] == sums[name], "%s read wrong bytes" % side)
                    per[side].append(out["s_per_call"])
            d, o = median(per["dummy"]), median(per["ordinary"])
            moved = n * size / 1e9
            ratio = o / d  # throughput ratio dummy / ordinary
            results[name] = ratio
            label = "%s %s" % (name, "%d x %s" % (n, human(size)) if n > 1 else human(size))
            print("%-26s %6d | %10.1f %9.3f | %10.1f %9.3f | %6.2f %7s" % (
                label, calls, d * 1e6, moved / d, o * 1e6, moved / o, ratio,
                ">= %.1f" % TARGETS[name]))
            dv, ov = sorted(per["dummy"]), sorted(per["ordinary"])
            print("%-26s %6s | %10s round means: dummy min %.1f max %.1f, ordinary min "
                  "%.1f max %.1f us" % ("", "", "", dv[0] * 1e6, dv[-1] * 1e6,
                                        ov[0] * 1e6, ov[-1] * 1e6))
        # SGLang's page pattern on a registered host pool, both ways
        name, n, size, calls = PAGES
        for w in workers:
            w.call(op="hostpool")
        per = {"dummy": [], "ordinary": []}
        halves = {"dummy": ([], []), "ordinary": ([], [])}
        for r in range(args.rounds):
            order = (("dummy", dummy), ("ordinary", ordinary))
            for side, w in (order if r % 2 == 0 else order[::-1]):
                out = w.call(op="pages", tag="%s%d" % (side, r), calls=calls)
                per[side].append(out["put_s"] + out["get_s"])
                halves[side][0].append(out["put_s"])
                halves[side][1].append(out["get_s"])
        d, o = median(per["dummy"]), median(per["ordinary"])
        moved = 2 * n * size / 1e9  # out and back in
        ratio = o / d
        results[name] = ratio
        print("%-26s %6d | %10.1f %9.3f | %10.1f %9.3f | %6.2f %7s" % (
            "sglang pages %d x %s" % (n, human(size)), calls, d * 1e6, moved / d, o * 1e6,
            moved / o, ratio, ">= %.1f" % TARGETS[name]))
        print("%-26s %6s | %10s put %.1f + get %.1f us (dummy), put %.1f + get %.1f us "
              "(ordinary)" % ("", "", "", median(halves["dummy"][0]) * 1e6,
                              median(halves["dummy"][1]) * 1e6,
                              median(halves["ordinary"][0]) * 1e6,
                              median(halves["ordinary"][1]) * 1e6))
        # where the time goes: is_exist moves no bytes, so the dummy's extra
        # time is its hop to the daemon (unix socket, two wakeups)
        per = {"dummy": [], "ordinary": []}
        for r in range(args.rounds):
            order = (("dummy", dummy), ("ordinary", ordinary))
            for side, w in (order if r % 2 == 0 else order[::-1]):
                per[side].append(w.call(op="exist", calls=200)["s_per_call"])
        d, o = median(per["dummy"]), median(per["ordinary"])
        print("%-26s %6d | %10.1f %9s | %10.1f %9s | %6.2f %7s" % (
            "is_exist (no data)", 200, d * 1e6, "-", o * 1e6, "-", o / d, "-"))
        print("the dummy's hop to mooncake_client (is_exist, dummy - ordinary): %.1f us per call"
              % ((d - o) * 1e6))
        hop = median([dummy.call(op="stats", calls=200)["s_per_call"]
                      for _ in range(args.rounds)])
        print("a round trip to mooncake_client that asks nothing of the master (dummy stats): "
              "%.1f us per call" % (hop * 1e6))
        print("ratio: dummy throughput / ordinary client throughput, same run; "
              "us: microseconds per call")
        missed = [n for n, r in results.items() if r < TARGETS[n]]
        print("targets: %s" % ("met" if not missed else "missed: " + ", ".join(missed)))
    finally:
        for w in workers:
            w.stop()
        if daemon is not None:
            stop_daemon(daemon, log)
        stop_master(master)


if __name__ == "__main__":
    sys.exit(main())

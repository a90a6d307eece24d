#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Async store benchmark: 1 000 concurrent ``await store.async_get(key)``
through the library's completion queue against the same gets through
``loop.run_in_executor(None, store.get, key)`` (upstream's way), same run.

Starts a mooncake_master on free loopback ports and two client processes
on the same host: the *holder* contributes the segment the values live in,
the *driver* (a MooncakeDistributedStoreAsync with no segment of its own)
puts COUNT values of SIZE bytes there once, then runs ROUNDS rounds; in
each, one asyncio.gather of COUNT native ``async_get`` and one of COUNT
executor gets, alternating which goes first.  Every get's bytes are
checked.  Each figure is the median over the rounds of the round's wall
time; the ratio is executor time / native time (target >= 2).  A get that
does not return the bytes put is a failure: it is printed and the exit
status is 1.

    bench/async_bench.py [--build-dir build] [--transport auto|tcp]
                         [--count 1000] [--size 4096] [--rounds 15]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import Worker, bench_env, start_master, stop_master  # noqa: E402

COUNT, SIZE, ROUNDS = 1000, 4096, 15
TARGET = 2.0
MiB = 1 << 20


# --------------------------------------------------------------------------
# worker side


def value_of(i, size):
    """Value i: its index in the first 8 bytes, so a mix-up shows."""
    return i.to_bytes(8, "little") + bytes([i % 251]) * (size - 8)


def worker_main():
    import asyncio
    import json

    from mooncake.async_store import MooncakeDistributedStoreAsync
    from mooncake.store import ReplicateConfig

    store = MooncakeDistributedStoreAsync()
    loop = asyncio.new_event_loop()
    state = {}

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    async def gather_native(keys):
        return await asyncio.gather(*(store.async_get(k) for k in keys))

    async def gather_executor(keys):
        lp = asyncio.get_running_loop()
        return await asyncio.gather(*(lp.run_in_executor(None, store.get, k) for k in keys))

    def timed(fn, keys, values):
        t0 = time.perf_counter()
        got = loop.run_until_complete(fn(keys))
        dt = time.perf_counter() - t0
        bad = [k for k, v, g in zip(keys, values, got) if g != v]
        return dt, bad

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "setup":
                rc = store.setup("localhost", "P2PHANDSHAKE", cmd["segment"], 16 * MiB, "tcp",
                                 "", cmd["master"])
                reply({"rc": rc, "hostname": store.get_hostname() if rc == 0 else ""})
            elif op == "fill":
                size, n = cmd["size"], cmd["count"]
                cfg = None
                if cmd.get("target"):
                    cfg = ReplicateConfig()
                    cfg.preferred_segment = cmd["target"]
                keys = ["async_bench_%d" % i for i in range(n)]
                values = [value_of(i, size) for i in range(n)]
                bad = [k for k, v in zip(keys, values) if store.put(k, v, cfg) != 0]
                state["keys"], state["values"] = keys, values
                reply({"failed": len(bad), "first_failure": bad[0] if bad else ""})
            elif op == "round":
                keys, values = state["keys"], state["values"]
                out = {}
                order = ("native", "executor") if cmd["native_first"] else \
                    ("executor", "native")
                for side in order:
                    fn = gather_native if side == "native" else gather_executor
                    dt, bad = timed(fn, keys, values)
                    out[side] = {"s": dt, "failed": len(bad),
                                 "first_failure": bad[0] if bad else ""}
                reply(out)
            elif op == "quit":
                store.close()
                loop.close()
                reply({"rc": 0})
                return
        except Exception as e:
            reply({"error": "%s: %s" % (type(e).__name__, e)})


# --------------------------------------------------------------------------
# driver side


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--transport", choices=["auto", "tcp"], default="auto",
                    help="auto: same-host shared memory where possible; tcp: MC_TE_SHM=0")
    ap.add_argument("--count", type=int, default=COUNT, help="concurrent gets per gather")
    ap.add_argument("--size", type=int, default=SIZE, help="value size in bytes")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "worker":
        worker_main()
        return 0
    if args.size < 8 or args.count < 1 or args.rounds < 1:
        ap.error("--size must be >= 8, --count and --rounds >= 1")

    build = os.path.abspath(args.build_dir)
    env = bench_env(build, args.transport)
    master, rpc, _ = start_master(build)
    holder = driver = None
    failures = []
    try:
        holder = Worker(env, script=os.path.abspath(__file__))
        driver = Worker(env, script=os.path.abspath(__file__))
        addr = "127.0.0.1:%d" % rpc
        segment = max(64 * MiB, 2 * args.count * args.size)
        h = holder.call(op="setup", segment=segment, master=addr)
        d = driver.call(op="setup", segment=0, master=addr)
        if h["rc"] != 0 or d["rc"] != 0:
            raise RuntimeError("setup failed: holder %d, driver %d" % (h["rc"], d["rc"]))
        fill = driver.call(op="fill", size=args.size, count=args.count, target=h["hostname"])
        if fill["failed"]:
            failures.append("put: %d failed, the first %s" % (fill["failed"],
                                                              fill["first_failure"]))
        driver.call(op="round", native_first=True)  # warm-up: connections, threads, caches
        times = {"native": [], "executor": []}
        for r in range(args.rounds):
            out = driver.call(op="round", native_first=(r % 2 == 0))
            for side in times:
                times[side].append(out[side]["s"])
                if out[side]["failed"]:
                    failures.append("round %d %s: %d gets failed, the first %s" % (
                        r, side, out[side]["failed"], out[side]["first_failure"]))
        driver.stop()
        holder.stop()
        driver = holder = None
    finally:
        for w in (driver, holder):
            if w is not None:
                w.stop()
        stop_master(master)

    nat = statistics.median(times["native"])
    exe = statistics.median(times["executor"])
    ratio = exe / nat
    print("async gets: %d concurrent x %d B, %d rounds (medians), transport %s" %
          (args.count, args.size, args.rounds, args.transport))
    print("%-34s %10s %12s %10s" % ("path", "round ms", "gets/s", "us/get"))
    for name, t in (("async_get (completion queue)", nat),
                    ("run_in_executor(None, get)", exe)):
        print("%-34s %10.2f %12.0f %10.2f" % (name, t * 1e3, args.count / t,
                                               t * 1e6 / args.count))
    print("native / executor throughput: %.2f x (target >= %.1f x: %s)" %
          (ratio, TARGET, "met" if ratio >= TARGET else "MISSED"))
    print("round ms, native:   " + " ".join("%.1f" % (t * 1e3) for t in times["native"]))
    print("round ms, executor: " + " ".join("%.1f" % (t * 1e3) for t in times["executor"]))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Transfer-engine benchmark: mooncake.engine.TransferEngine against raw TCP.

Two processes on loopback: a *peer* engine allocates a managed buffer, the
driver's engine writes 1 MiB values into it with transfer_sync_write (one
call per value, as a PD connector pushes a KV block), and, in the same run,
bench/raw_tcp moves the same bytes over one plain loopback socket (one
request/response per value).  The ratio te/raw is the figure of merit.

    bench/te_bench.py [--build-dir build] [--size 1048576] [--count 256]
                      [--transport auto|tcp]

--transport tcp sets MC_TE_SHM=0 in both processes.  Managed buffers are
anonymous memory (not shared memory), so today both settings go through
the TCP transport; the flag is there to measure the same-host path once it
applies.
"""
import argparse
import json
import os
import subprocess
import sys
import time

RUNS = 5


def peer_main():
    from mooncake.engine import TransferEngine
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    size = int(sys.argv[sys.argv.index("--size") + 1])
    buf = te.allocate_managed_buffer(size)
    print(json.dumps({"name": te.get_local_hostname(), "addr": buf}), flush=True)
    sys.stdin.read()  # until the driver closes the pipe


def driver_run(te, name, src, dst, size, count):
    for _ in range(3):  # warm up (connections, descriptor)
        assert te.transfer_sync_write(name, src, dst, size) == 0
    lat = []
    t0 = time.perf_counter()
    for _ in range(count):
        s = time.perf_counter()
        if te.transfer_sync_write(name, src, dst, size) != 0:
            raise RuntimeError("transfer_sync_write failed")
        lat.append(time.perf_counter() - s)
    secs = time.perf_counter() - t0
    lat.sort()
    return {"gbps": size * count / secs / 1e9, "p50_us": lat[len(lat) // 2] * 1e6,
            "p99_us": lat[(len(lat) * 99) // 100] * 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--count", type=int, default=256)
    ap.add_argument("--transport", choices=["auto", "tcp"], default="auto")
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "peer":
        return peer_main()

    build = os.path.abspath(args.build_dir)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["LD_LIBRARY_PATH"] = os.path.join(build, ".libs") + os.pathsep + \
        env.get("LD_LIBRARY_PATH", "")
    env["MC_TE_SHM"] = "0" if args.transport == "tcp" else "1"
    if os.environ.get("MC_TE_BENCH_CHILD") != "1":
        # re-run under the build tree's package and the chosen MC_TE_SHM
        env["MC_TE_BENCH_CHILD"] = "1"
        return subprocess.call([sys.executable, __file__] + sys.argv[1:], env=env)

    from mooncake.engine import TransferEngine
    peer = subprocess.Popen([sys.executable, __file__, "--role", "peer", "--size",
                             str(args.size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True)
    try:
        info = json.loads(peer.stdout.readline())
        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        src = te.allocate_managed_buffer(args.size)
        te.write_bytes_to_buffer(src, os.urandom(args.size), args.size)
        runs = sorted((driver_run(te, info["name"], src, info["addr"], args.size, args.count)
                       for _ in range(RUNS)), key=lambda r: r["gbps"])
        te_r = runs[len(runs) // 2]
        raws = sorted((json.loads(subprocess.check_output(
            [os.path.join(build, "bench", "raw_tcp"), str(args.size), str(args.count)],
            text=True)) for _ in range(RUNS)), key=lambda r: r["gbps"])
        raw = raws[len(raws) // 2]
    finally:
        peer.stdin.close()
        peer.wait(timeout=10)
    print("transfer engine benchmark: 2 processes on loopback, MC_TE_SHM=%s, medians of %d "
          "runs of %d values" % (env["MC_TE_SHM"], RUNS, args.count))
    print("%-28s %9s %9s %9s | %9s %9s | %6s" % ("op", "value", "GB/s", "p50 us", "raw GB/s",
                                                  "raw p50", "te/raw"))
    print("%-28s %9d %9.3f %9.1f | %9.3f %9.1f | %6.2f" % (
        "transfer_sync_write", args.size, te_r["gbps"], te_r["p50_us"], raw["gbps"],
        raw["p50_us"], te_r["gbps"] / raw["gbps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

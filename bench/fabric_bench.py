#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The libfabric transport (protocol "efa") on a software provider, beside
tcp in the same run (docs/transfer.md §14).

For each protocol a target process serves one registered 64 MiB buffer and
an initiator process times transfer_sync_read of 4 KiB (microseconds per
READ, one at a time) and of 1 MiB (GB/s), and transfer_sync_write of 1 MiB;
both on 127.0.0.1 with the same-host memfd path off (MC_TE_SHM=0), so tcp
moves bytes over its sockets and efa over the provider's endpoint
(tcp;ofi_rxm on Debian's libfabric: TCP underneath too).  The figures are
the transport's overhead per operation on this host, a regression guard
for later changes and never a speed claim (EFA hardware is another world).
Rounds alternate the protocols so a noisy machine hurts both alike; the
ratios are per round.

  bench/fabric_bench.py --build-dir build [--provider tcp;ofi_rxm] [--rounds 3]
                        [--n4k 2000] [--n1m 100]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUF = 64 << 20
MiB = 1 << 20


def engine(proto):
    from mooncake.engine import TransferEngine
    e = TransferEngine()
    if e.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") != 0:
        sys.exit(f"fabric_bench: initialize({proto}) failed")
    buf = ctypes.create_string_buffer(BUF)
    if e.register_memory(ctypes.addressof(buf), BUF, "cpu:0") != 0:
        sys.exit("fabric_bench: register_memory failed")
    return e, buf


def role_target(proto):
    e, buf = engine(proto)
    print(json.dumps({"seg": e.get_local_hostname(), "addr": ctypes.addressof(buf)}),
          flush=True)
    sys.stdin.read()  # serve until the driver closes our stdin


def timed(n, fn):
    t0 = time.perf_counter()
    for i in range(n):
        if fn(i) != 0:
            sys.exit("fabric_bench: a transfer failed")
    return time.perf_counter() - t0


def role_initiator(proto, seg, remote, n4k, n1m):
    e, buf = engine(proto)
    local = ctypes.addressof(buf)
    for _ in range(100):  # reach the peer, warm the paths
        assert e.transfer_sync_read(seg, local, remote, 4096) == 0
    dt = timed(n4k, lambda i: e.transfer_sync_read(seg, local + (i % 64) * 4096,
                                                   remote + (i % 4096) * 4096, 4096))
    us_4k = dt / n4k * 1e6
    dt = timed(n1m, lambda i: e.transfer_sync_read(seg, local + (i % 16) * MiB,
                                                   remote + (i % 48) * MiB, MiB))
    read_gbs = n1m * MiB / dt / 1e9
    dt = timed(n1m, lambda i: e.transfer_sync_write(seg, local + (i % 16) * MiB,
                                                    remote + (i % 48) * MiB, MiB))
    write_gbs = n1m * MiB / dt / 1e9
    print(json.dumps({"us_4k": us_4k, "read_gbs": read_gbs, "write_gbs": write_gbs}),
          flush=True)


def measure(proto, env, n4k, n1m):
    me = os.path.abspath(__file__)
    target = subprocess.Popen([sys.executable, me, "--role", "target", proto], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = target.stdout.readline()
        if not line:
            sys.exit(f"fabric_bench: the {proto} target did not start")
        info = json.loads(line)
        r = subprocess.run([sys.executable, me, "--role", "initiator", proto, info["seg"],
                            str(info["addr"]), str(n4k), str(n1m)], env=env,
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            sys.exit(f"fabric_bench: the {proto} initiator failed:\n{r.stdout}{r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        target.stdin.close()
        try:
            target.wait(timeout=60)
        except subprocess.TimeoutExpired:
            target.kill()


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--role":
        if sys.argv[2] == "target":
            return role_target(sys.argv[3])
        return role_initiator(sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]),
                              int(sys.argv[7]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--provider", default="",
                    help="MC_FABRIC_PROVIDER for efa (default: the transport's choice)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n4k", type=int, default=2000)
    ap.add_argument("--n1m", type=int, default=100)
    a = ap.parse_args()
    b = os.path.abspath(a.build_dir)
    env = dict(os.environ, PYTHONPATH=os.path.join(b, "python"),
               LD_LIBRARY_PATH=os.path.join(b, ".libs"), MC_TE_SHM="0", MC_LOG_LEVEL="error")
    if a.provider:
        env["MC_FABRIC_PROVIDER"] = a.provider
    runs = {"tcp": [], "efa": []}
    for _ in range(a.rounds):
        for proto in ("tcp", "efa"):
            runs[proto].append(measure(proto, env, a.n4k, a.n1m))
    print(f"fabric_bench: loopback, MC_TE_SHM=0, efa provider "
          f"{a.provider or 'chosen by the transport'}; medians of {a.rounds} rounds")
    print(f"{'protocol':<9}{'us/4KiB READ':>14}{'GB/s 1MiB READ':>16}{'GB/s 1MiB WRITE':>17}")
    for proto in ("tcp", "efa"):
        rs = runs[proto]
        print(f"{proto:<9}{statistics.median(r['us_4k'] for r in rs):>14.1f}"
              f"{statistics.median(r['read_gbs'] for r in rs):>16.2f}"
              f"{statistics.median(r['write_gbs'] for r in rs):>17.2f}   runs: " +
              ", ".join(f"{r['us_4k']:.0f}/{r['read_gbs']:.2f}/{r['write_gbs']:.2f}" for r in rs))
    ratios = [(f["us_4k"] / t["us_4k"], f["read_gbs"] / t["read_gbs"],
               f["write_gbs"] / t["write_gbs"]) for t, f in zip(runs["tcp"], runs["efa"])]
    print("efa/tcp per round (time per 4 KiB READ, 1 MiB READ and WRITE throughput): " +
          ", ".join(f"{a4:.2f}x/{r1:.2f}x/{w1:.2f}x" for a4, r1, w1 in ratios))


if __name__ == "__main__":
    main()

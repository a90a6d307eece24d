#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The rdma transport's overhead per operation on the emulated verbs device
(tests/rdma/emu/README.md), beside tcp in the same run.

Two engine processes per protocol on loopback (the same-host memfd path
off): a target serving a registered buffer, an initiator timing
transfer_sync_read of 4 KiB (microseconds per READ) and of 1 MiB (GB/s).
The emulated NIC moves every WR over a Unix socket with a memcpy at each
end, so the rdma figures say what the transport's own work costs on top of
a slow "NIC": a regression guard for later changes, never a speed claim
(real NICs are another world; tests/rdma/run.sh measures them).

  bench/rdma_emu_bench.py --build-dir build [--n4k 2000] [--n1m 200] [--repeat 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
EMU = os.path.join(SRC, "tests", "rdma", "emu")
BUF = 64 << 20


def build_emu(out):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        sys.exit("rdma_emu_bench: no C compiler for the emulated device")
    subprocess.run([cc, "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                    "-Wl,-soname,libibverbs.so.1",
                    "-Wl,--version-script=" + os.path.join(EMU, "libibverbs.map"),
                    "-o", os.path.join(out, "libibverbs.so.1"),
                    os.path.join(EMU, "verbs_emu.c"), "-lpthread"], check=True)


def serve(proto):
    import ctypes
    from mooncake.engine import TransferEngine
    e = TransferEngine()
    if e.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "mlx5_0,mlx5_1" if proto == "rdma"
                    else "") != 0:
        sys.exit(f"serve: initialize({proto}) failed")
    buf = ctypes.create_string_buffer(BUF)
    addr = ctypes.addressof(buf)
    if e.register_memory(addr, BUF, "cpu:0") != 0:
        sys.exit("serve: register_memory failed")
    print(json.dumps({"seg": e.get_local_hostname(), "addr": addr}), flush=True)
    sys.stdin.read()   # until the parent closes it


def run(proto, seg, remote, n4k, n1m):
    import ctypes
    from mooncake.engine import TransferEngine
    e = TransferEngine()
    if e.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "mlx5_0,mlx5_1" if proto == "rdma"
                    else "") != 0:
        sys.exit(f"run: initialize({proto}) failed")
    buf = ctypes.create_string_buffer(8 << 20)
    local = ctypes.addressof(buf)
    if e.register_memory(local, 8 << 20, "cpu:0") != 0:
        sys.exit("run: register_memory failed")
    for _ in range(50):   # connect, warm up
        assert e.transfer_sync_read(seg, local, remote, 4096) == 0
    t0 = time.perf_counter()
    for i in range(n4k):
        if e.transfer_sync_read(seg, local, remote + (i % 1024) * 4096, 4096) != 0:
            sys.exit("run: a 4 KiB READ failed")
    us = (time.perf_counter() - t0) / n4k * 1e6
    t0 = time.perf_counter()
    for i in range(n1m):
        if e.transfer_sync_read(seg, local, remote + (i % 32) * (1 << 20), 1 << 20) != 0:
            sys.exit("run: a 1 MiB READ failed")
    gbs = n1m * (1 << 20) / (time.perf_counter() - t0) / 1e9
    print(json.dumps({"us_4k": us, "gbs_1m": gbs}), flush=True)


def one(proto, env, n4k, n1m):
    me = os.path.abspath(__file__)
    t = subprocess.Popen([sys.executable, me, "serve", proto], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(t.stdout.readline())
        r = subprocess.run([sys.executable, me, "run", proto, info["seg"], str(info["addr"]),
                            str(n4k), str(n1m)], env=env, capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            sys.exit(f"rdma_emu_bench: {proto} run failed:\n{r.stdout}{r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        t.stdin.close()
        t.wait(timeout=30)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        return run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                   int(sys.argv[6]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--n4k", type=int, default=2000)
    ap.add_argument("--n1m", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    b = os.path.abspath(a.build_dir)
    with tempfile.TemporaryDirectory(prefix="mc-vemu-bench-") as tmp:
        build_emu(tmp)
        sysfs = os.path.join(tmp, "sysfs")
        for d in ("mlx5_0", "mlx5_1"):
            p = os.path.join(sysfs, "class", "infiniband", d)
            os.makedirs(os.path.join(p, "ports", "1"))
            os.makedirs(os.path.join(p, "device"))
            with open(os.path.join(p, "ports", "1", "state"), "w") as f:
                f.write("4: ACTIVE\n")
            with open(os.path.join(p, "ports", "1", "link_layer"), "w") as f:
                f.write("Ethernet\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(b, "python"),
                   LD_LIBRARY_PATH=f"{tmp}:{os.path.join(b, '.libs')}",
                   MC_VERBS_EMU_DIR=os.path.join(tmp, "rdv"), MC_VERBS_EMU_DEVICES="mlx5_0,mlx5_1",
                   MC_RDMA_SYSFS_ROOT=sysfs, MC_TE_SHM="0", MC_LOG_LEVEL="error")
        os.makedirs(env["MC_VERBS_EMU_DIR"])
        rows = {"tcp": [], "rdma": []}
        for _ in range(a.repeat):
            for proto in ("tcp", "rdma"):
                rows[proto].append(one(proto, env, a.n4k, a.n1m))
        print(f"{'protocol':<10}{'us / 4 KiB READ':>18}{'GB/s 1 MiB READ':>18}"
              f"   (median of {a.repeat}; emulated NIC, loopback)")
        med = {}
        for proto in ("tcp", "rdma"):
            us = statistics.median(r["us_4k"] for r in rows[proto])
            gb = statistics.median(r["gbs_1m"] for r in rows[proto])
            med[proto] = (us, gb)
            spread = ", ".join(f"{r['us_4k']:.0f}/{r['gbs_1m']:.2f}" for r in rows[proto])
            print(f"{proto:<10}{us:>18.1f}{gb:>18.2f}   runs: {spread}")
        print(f"rdma/tcp: {med['rdma'][0] / med['tcp'][0]:.2f}x the time per 4 KiB READ, "
              f"{med['rdma'][1] / med['tcp'][1]:.2f}x the 1 MiB throughput (medians); "
              "per run (tcp and rdma back to back): " +
              ", ".join(f"{r['us_4k'] / t['us_4k']:.2f}x/{r['gbs_1m'] / t['gbs_1m']:.2f}x"
                        for t, r in zip(rows["tcp"], rows["rdma"])))


if __name__ == "__main__":
    main()

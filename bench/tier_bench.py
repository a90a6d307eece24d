#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""SSD-tier benchmark (docs/tiers.md): ratios against baselines measured
in the same run, on the same file system.

  * disk-only get: --count objects of 1 MiB are put by a client with its
    SSD tier in --dir, copied to disk by its offloader, and their memory
    replicas cleared, so every get reads its record (header, key, value,
    CRC32C check) from a bucket file.  Baseline: a dd-style sequential
    read of the same bucket files in 1 MiB reads.  Target: >= 0.7.
  * for context, the same gets while the objects were still in memory
    against the same dd-style read;
  * put while offloading: puts of 1 MiB objects into memory by a client
    whose offloader copies each one to disk meanwhile, against the same
    puts by a client with no tier.  Target: >= 0.9.

Both sides of a row alternate within every round; each figure is the
median of --rounds rounds.  The files are read warm (page cache) on both
sides; run with a --dir on the file system to measure.

    bench/tier_bench.py [--build-dir build] [--dir /var/tmp] [--count 64] [--rounds 5]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import start_master, stop_master  # noqa: E402

MiB = 1 << 20
TARGETS = {"disk_get": 0.7, "put_offload": 0.9}


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.01)


def parse_args(doc, dir_help):
    """The tier benchmarks' command line (--build-dir, --dir, --count,
    --rounds); the build's Python package goes on sys.path."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--dir", default=None, help=dir_help)
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    a.build_dir = os.path.abspath(a.build_dir)
    sys.path.insert(0, os.path.join(a.build_dir, "python"))
    return a


def main():
    a = parse_args(__doc__, "parent of the tier directory (default: TMPDIR)")
    build = a.build_dir
    from mooncake.store import MooncakeDistributedStore

    tier = tempfile.mkdtemp(prefix="mc-tier-bench-", dir=a.dir)
    master, rpc, _ = start_master(build, ["--enable_offload", "--default_kv_lease_ttl=50"])
    stores = []
    try:
        def store(ssd):
            s = MooncakeDistributedStore()
            rc = s.setup("localhost", "P2PHANDSHAKE", (a.count + 8) * MiB, 64 * MiB, "tcp", "",
                         "127.0.0.1:%d" % rpc, None, enable_ssd_offload=ssd,
                         ssd_offload_path=tier if ssd else "")
            if rc != 0:
                raise RuntimeError("setup returned %d" % rc)
            stores.append(s)
            return s

        s = store(True)
        seg = s.get_hostname()
        vals = [os.urandom(MiB) for _ in range(a.count)]
        keys = ["tb-%d" % i for i in range(a.count)]

        # ---- disk-only get against a sequential read of the bucket files
        for k, v in zip(keys, vals):
            if s.put(k, v) != 0:
                raise RuntimeError("put failed")
        wait(lambda: s.offload_stats()["offloaded_keys"] >= a.count, 60, "the offload")
        # context: the same gets while the objects are still in memory
        mem_t = []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            for k in keys:
                s.get(k)
            mem_t.append(time.perf_counter() - t0)
        left = set(keys)

        def clear():
            left.difference_update(s.batch_replica_clear(sorted(left), seg))
            return not left

        wait(clear, 30, "the memory replicas to be cleared")
        files = sorted(os.path.join(tier, f) for f in os.listdir(tier) if f.endswith(".bucket"))
        get_t, dd_t = [], []
        for _ in range(a.rounds):
            # one get, then the next 1 MiB of the sequential read, in turn:
            # both sides see the same moment of a busy host
            tg = td = 0.0
            n = 0
            fds = [os.open(f, os.O_RDONLY) for f in files]
            fi = 0
            for k in keys:
                t0 = time.perf_counter()
                got = s.get(k)
                t1 = time.perf_counter()
                if len(got) != MiB:
                    raise RuntimeError("disk-only get of %s returned %d bytes" % (k, len(got)))
                b = b""
                while not b and fi < len(fds):
                    t2 = time.perf_counter()
                    b = os.read(fds[fi], MiB)
                    td += time.perf_counter() - t2
                    if not b:
                        fi += 1
                tg += t1 - t0
                n += len(b)
            for fd in fds:
                os.close(fd)
            get_t.append(tg)
            dd_t.append(td)
        if s.get(keys[0]) != vals[0]:
            raise RuntimeError("disk-only get returned other bytes")
        get_bw = a.count * MiB / median(get_t)
        dd_bw = n / median(dd_t)

        # ---- puts while the offloader copies, against puts with no tier
        plain = store(False)
        put_t, plain_t = [], []
        for r in range(a.rounds):
            for st, out in ((s, put_t), (plain, plain_t)):
                ks = ["tp-%d-%d-%d" % (r, id(st), i) for i in range(a.count // 2)]
                t0 = time.perf_counter()
                for k, v in zip(ks, vals):
                    if st.put(k, v) != 0:
                        raise RuntimeError("put failed")
                out.append(time.perf_counter() - t0)
                st.batch_remove(ks, True)
        put_ratio = median(plain_t) / median(put_t)

        print("%-36s %12s %12s %7s %7s" % ("row", "tier", "baseline", "ratio", "target"))
        print("%-36s %10.0f/s %10.0f/s %7.2f %7.2f" % (
            "disk-only get 1 MiB vs dd (MiB/s)", get_bw / MiB, dd_bw / MiB, get_bw / dd_bw,
            TARGETS["disk_get"]))
        print("%-36s %10.0f/s %10.0f/s %7.2f %7s" % (
            "(memory get 1 MiB vs dd, context)", a.count / median(mem_t), dd_bw / MiB,
            a.count * MiB / median(mem_t) / dd_bw, "-"))
        print("%-36s %10.0f/s %10.0f/s %7.2f %7.2f" % (
            "put 1 MiB, offloading vs no tier", (a.count // 2) / median(put_t),
            (a.count // 2) / median(plain_t), put_ratio, TARGETS["put_offload"]))
    finally:
        for st in stores:
            st.close()
        stop_master(master)
        shutil.rmtree(tier, ignore_errors=True)


if __name__ == "__main__":
    main()

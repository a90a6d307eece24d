#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""SSD-tier benchmark (docs/tiers.md): ratios against baselines measured
in the same run, on the same file system.

  * disk-only get: --count objects of 1 MiB are put by a client with its
    SSD tier in --dir, copied to disk by its offloader, and their memory
    replicas cleared, so every get reads its record (header, key, value,
    CRC32C check) from a bucket file.  Baseline: a dd-style sequential
    read of the same bucket files in 1 MiB reads.  Target: >= 0.7.
  * the same objects read with get_into (one at a time) and with one
    batch_get_into of all of them, into registered memory, against the same
    dd-style read (per-call overhead: master round trip, Python bytes);
    a get or get_into of a key this client last saw disk-only reads its
    record while the master answers the lookup (docs/tiers.md §4): the
    first round leaves those hints, so the medians time overlapped reads
    (each still asks the master and checks the CRC);
  * for context, the same gets while the objects were still in memory
    against the same dd-style read;
  * put while offloading: puts of 1 MiB objects into memory by a client
    whose offloader copies each one to disk meanwhile, against the same
    puts by a client with no tier.  Target: >= 0.9.

Both sides of a row alternate within every round (the dd side half the
set away, so that neither reads bytes the other just pulled into the CPU
caches); each figure is the median of --rounds rounds.  The files are read warm (page cache) on both
sides; run with a --dir on the file system to measure.

    bench/tier_bench.py [--build-dir build] [--dir /var/tmp] [--count 64] [--rounds 5]
"""
import argparse
import ctypes
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


class SeqRead:
    """A dd-style sequential read of the bucket files, 1 MiB at a time,
    starting half-way through and wrapping around: while a get reads record
    i, this reads the bytes half the set away, so neither side finds the
    other's bytes hot in the CPU caches (both come from the page cache)."""

    def __init__(self, files):
        self.fds = [os.open(f, os.O_RDONLY) for f in files]
        self.chunks = [(fd, off) for fd in self.fds
                       for off in range(0, os.fstat(fd).st_size, MiB)]
        self.i = len(self.chunks) // 2

    def next(self):
        fd, off = self.chunks[self.i % len(self.chunks)]
        self.i += 1
        return len(os.pread(fd, MiB, off))

    def close(self):
        for fd in self.fds:
            os.close(fd)


def on_disk(s, k):
    # wait out the short window between the queue draining and the report
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        if any(d.is_local_disk_replica() for d in s.get_replica_desc(k)):
            return True
        time.sleep(0.01)
    return False


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
        # on a loaded host the offloader may outlive the short lease of a copy
        # (counted as failed); such keys are written again until all are on disk
        for _ in range(20):
            wait(lambda: s.offload_stats()["queued"] == 0, 60, "the offload queue to drain")
            missing = [(k, v) for k, v in zip(keys, vals) if not on_disk(s, k)]
            if not missing:
                break
            for k, v in missing:
                s.remove(k, True)
                if s.put(k, v) != 0:
                    raise RuntimeError("put failed")
        else:
            raise RuntimeError("the offload did not complete")
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
            if left:
                # eviction may have freed the memory of some already (their
                # disk copy kept): nothing left to clear there.  Every read,
                # this check included, grants a 50 ms lease that refuses the
                # clear, so each step waits it out.
                time.sleep(0.06)
                left.difference_update([k for k in list(left) if not any(
                    r.is_memory_replica() for r in s.get_replica_desc(k))])
                time.sleep(0.06)
            return not left

        wait(clear, 30, "the memory replicas to be cleared")
        files = sorted(os.path.join(tier, f) for f in os.listdir(tier) if f.endswith(".bucket"))
        # registered memory for the zero-copy reads: one 1 MiB slot per key
        arena = ctypes.create_string_buffer(a.count * MiB)
        base = ctypes.addressof(arena)
        if s.register_buffer(base, a.count * MiB) != 0:
            raise RuntimeError("register_buffer failed")
        ptrs = [base + i * MiB for i in range(a.count)]

        def read_one(k, i):
            return len(s.get(k)) if i < 0 else s.get_into(k, ptrs[i % a.count], MiB)

        get_t, into_t, batch_t, dd_t, dd_into_t, dd_batch_t = [], [], [], [], [], []
        for _ in range(a.rounds):
            # one read, then the next 1 MiB of the sequential read, in turn:
            # both sides see the same moment of a busy host
            for mode, out, dd_out in ((-1, get_t, dd_t), (0, into_t, dd_into_t)):
                tg, td, n = 0.0, 0.0, 0
                dd = SeqRead(files)
                for i, k in enumerate(keys):
                    t0 = time.perf_counter()
                    got = read_one(k, i if mode >= 0 else -1)
                    tg += time.perf_counter() - t0
                    if got != MiB:
                        raise RuntimeError("disk-only read of %s returned %d" % (k, got))
                    t0 = time.perf_counter()
                    n += dd.next()
                    td += time.perf_counter() - t0
                dd.close()
                out.append(tg)
                dd_out.append(td * a.count * MiB / n)
            # the whole set in one batch_get_into, against the whole dd pass
            t0 = time.perf_counter()
            ns = s.batch_get_into(keys, ptrs, [MiB] * a.count)
            batch_t.append(time.perf_counter() - t0)
            if ns != [MiB] * a.count:
                raise RuntimeError("batch_get_into returned %r" % ns[:4])
            dd = SeqRead(files)
            t0 = time.perf_counter()
            n = 0
            for _ in keys:
                n += dd.next()
            dd_batch_t.append((time.perf_counter() - t0) * a.count * MiB / n)
            dd.close()
        if s.get(keys[0]) != vals[0] or ctypes.string_at(ptrs[1], MiB) != vals[1]:
            raise RuntimeError("disk-only reads returned other bytes")
        s.unregister_buffer(base)
        get_bw = a.count * MiB / median(get_t)
        dd_bw = a.count * MiB / median(dd_t)
        rows = [("disk-only get 1 MiB vs dd (MiB/s)", get_bw, dd_bw, TARGETS["disk_get"]),
                ("disk-only get_into 1 MiB vs dd", a.count * MiB / median(into_t),
                 a.count * MiB / median(dd_into_t), "-"),
                ("disk-only batch_get_into 64x1 MiB vs dd", a.count * MiB / median(batch_t),
                 a.count * MiB / median(dd_batch_t), "-")]

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

        print("%-40s %12s %12s %7s %7s" % ("row", "tier", "baseline", "ratio", "target"))
        for name, bw, base_bw, target in rows:
            print("%-40s %8.0f MiB/s %8.0f MiB/s %7.2f %7s" % (
                name, bw / MiB, base_bw / MiB, bw / base_bw, target))
        print("%-40s %8.0f MiB/s %8.0f MiB/s %7.2f %7s" % (
            "(memory get 1 MiB vs dd, context)", a.count / median(mem_t), dd_bw / MiB,
            a.count * MiB / median(mem_t) / dd_bw, "-"))
        print("%-40s %10.0f/s %10.0f/s %7.2f %7.2f" % (
            "put 1 MiB, offloading vs no tier", (a.count // 2) / median(put_t),
            (a.count // 2) / median(plain_t), put_ratio, TARGETS["put_offload"]))
    finally:
        for st in stores:
            st.close()
        stop_master(master)
        shutil.rmtree(tier, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""DFS-replica benchmark (docs/tiers.md §6): ratios against baselines
measured in the same run, on the same file system.

  * put with a DFS replica: puts of 1 MiB objects with dfs_replica_num=1
    (memory replica + one pwritev of the record into a shard file) against
    the same puts with memory only, alternating within every round;
  * DFS-only get: the same objects with their memory replicas cleared, so
    every get reads its record (one preadv, header and CRC32C checks) from
    a shard file.  Baseline: a dd-style read of the same records' bytes in
    1 MiB reads, one get and one read in turn.

Each figure is the median of --rounds rounds.  The shard files live in a
temporary root under --dir and are read warm (page cache) on both sides.

    bench/dfs_bench.py [--build-dir build] [--dir /var/tmp] [--count 64] [--rounds 5]
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import start_master, stop_master  # noqa: E402
from tier_bench import median, parse_args, wait  # noqa: E402

MiB = 1 << 20


def main():
    a = parse_args(__doc__, "parent of the DFS root (default: TMPDIR)")
    build = a.build_dir
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    root = tempfile.mkdtemp(prefix="mc-dfs-bench-", dir=a.dir)
    os.environ["MOONCAKE_DFS_ROOT_DIR"] = root
    master, rpc, _ = start_master(build, ["--root_fs_dir=" + root, "--default_kv_lease_ttl=50"])
    s = MooncakeDistributedStore()
    try:
        rc = s.setup("localhost", "P2PHANDSHAKE", (2 * a.count + 8) * MiB, 64 * MiB, "tcp", "",
                     "127.0.0.1:%d" % rpc)
        if rc != 0:
            raise RuntimeError("setup returned %d" % rc)
        seg = s.get_hostname()
        dfs = ReplicateConfig()
        dfs.dfs_replica_num = 1
        mem = ReplicateConfig()
        vals = [os.urandom(MiB) for _ in range(a.count)]

        # ---- puts with and without a DFS replica, in turn
        dfs_t, mem_t = [], []
        for r in range(a.rounds):
            for cfg, out, tag in ((dfs, dfs_t, "d"), (mem, mem_t, "m")):
                ks = ["bp-%s-%d-%d" % (tag, r, i) for i in range(a.count)]
                t0 = time.perf_counter()
                for k, v in zip(ks, vals):
                    if s.put(k, v, cfg) != 0:
                        raise RuntimeError("put failed")
                out.append(time.perf_counter() - t0)
                if r + 1 < a.rounds or tag == "m":
                    s.batch_remove(ks, True)

        # ---- DFS-only gets (the last round's DFS puts) against dd-style reads
        keys = ["bp-d-%d-%d" % (a.rounds - 1, i) for i in range(a.count)]
        left = set(keys)

        def clear():
            left.difference_update(s.batch_replica_clear(sorted(left), seg))
            return not left

        wait(clear, 30, "the memory replicas to be cleared")
        where = []
        for k in keys:
            d = [x for x in s.get_replica_desc(k) if x.is_disk_replica()][0].get_disk_descriptor()
            where.append((d.file_path, d.offset))
        get_t, dd_t = [], []
        for _ in range(a.rounds):
            tg = td = 0.0
            fds = {}
            for k, (path, off) in zip(keys, where):
                t0 = time.perf_counter()
                got = s.get(k)
                tg += time.perf_counter() - t0
                if len(got) != MiB:
                    raise RuntimeError("DFS-only get of %s returned %d bytes" % (k, len(got)))
                t0 = time.perf_counter()
                fd = fds.get(path)
                if fd is None:
                    fd = fds[path] = os.open(path, os.O_RDONLY)
                b = os.pread(fd, MiB, off)
                td += time.perf_counter() - t0
                if len(b) != MiB:
                    raise RuntimeError("short read of %s" % path)
            for fd in fds.values():
                os.close(fd)
            get_t.append(tg)
            dd_t.append(td)
        if s.get(keys[0]) != vals[0]:
            raise RuntimeError("DFS-only get returned other bytes")

        print("%-38s %12s %12s %7s" % ("row", "dfs", "baseline", "ratio"))
        print("%-38s %10.0f/s %10.0f/s %7.2f" % (
            "put 1 MiB, +DFS replica vs memory only", a.count / median(dfs_t),
            a.count / median(mem_t), median(mem_t) / median(dfs_t)))
        get_bw, dd_bw = a.count * MiB / median(get_t), a.count * MiB / median(dd_t)
        print("%-38s %10.0f/s %10.0f/s %7.2f" % (
            "DFS-only get 1 MiB vs pread (MiB/s)", get_bw / MiB, dd_bw / MiB, get_bw / dd_bw))
    finally:
        s.close()
        stop_master(master)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

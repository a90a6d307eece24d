#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Structured-object benchmark: the helper against the bytes API, same run.

Starts a mooncake_master and two client processes as store_bench.py does:
the *holder* contributes the segment, the *driver* writes into it
(preferred_segment) and reads back, by default through the same-host
shared-memory path (--transport tcp: the TCP transport).  Rows:

  * put+materialize: put_structured_object of 3 x 16 MiB float32 members
    plus materialize(read_spec(ref)) (new arrays), against batch_put_from
    plus batch_get_into of the same 3 x 16 MiB from/to registered buffers;
  * materialize_into: materialize_into the caller's 3 arrays against
    batch_get_into of the same 3 keys into the same arrays (registered
    outside the timed call; materialize_into registers them itself);
  * fast copy: 4096 ragged int64 rows (about 32 MiB) into one buffer with
    concat_arrays_into (mc_fastcopy_gather, 1 and 2 threads) against
    numpy's concatenate-then-copy;
  * DataProto (an RL batch): put + get of 1024 rows -- ragged int32 token
    ids (mean 2 K tokens), ragged int32 attention masks, float32 rewards
    and advantages (torch), a per-row string -- against batch_put_from +
    batch_get_into of the same payloads (one key each, registered
    buffers), same client; and the bytes a read of 10 % of the rows moves
    (a gather of 102 random rows, and a slice), counted by the client's
    transfer statistics (its /metrics mooncake_transfer_read_bytes).

The two paths alternate within every round; each figure is the median of
the rounds, and the whole measurement is repeated --runs times (the ratio
printed is the median over runs).

    bench/structured_bench.py [--build-dir build] [--transport auto|tcp]
                              [--rounds N] [--runs N]
"""
import argparse
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import (Worker, add_common_args, bench_env, serve_worker,  # noqa: E402
                         start_master, stop_master)

MEMBER = 16 << 20
MEMBERS = 3
TARGETS = {"put_materialize": 0.85, "materialize_into": 0.95, "dataproto": 0.8}
DP_ROWS = 1024
DP_PARTIAL_MAX = 0.12  # a read of 10 % of the rows moves at most this share of the bytes


def _check(cond, what):
    if not cond:
        raise RuntimeError(what)


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


# --------------------------------------------------------------------------
# worker side


def worker_main():
    from mooncake.store import ReplicateConfig

    def run_objects(store, cmd):
        cfg = ReplicateConfig()
        cfg.preferred_segment = cmd["target"]
        return objects(store, cfg, cmd["rounds"])

    serve_worker({"objects": run_objects, "fastcopy": lambda store, cmd: fastcopy(cmd["rounds"]),
                  "dataproto": lambda store, cmd: dataproto(cmd)})


def objects(store, cfg, rounds):
    import numpy as np
    from mooncake.structured_object_store import (MooncakeBundleTransfer,
                                                  StructuredObjectPayload)

    transfer = MooncakeBundleTransfer(store, key_prefix="bench/structured")
    n_el = MEMBER // 4
    arrays = {"m%d" % i: np.random.default_rng(i).random(n_el, dtype=np.float32)
              for i in range(MEMBERS)}
    payload = StructuredObjectPayload(metadata={"bench": True}, buffers=arrays)
    total = MEMBER * MEMBERS
    # the baseline moves the same bytes from/to registered buffers
    src = np.concatenate(list(arrays.values())).view(np.uint8)
    dst = np.empty(total, np.uint8)
    dst.fill(0)
    for a in (src, dst):
        _check(store.register_buffer(a.ctypes.data, a.nbytes) == 0, "register_buffer")
    sps = [src.ctypes.data + i * MEMBER for i in range(MEMBERS)]
    dps = [dst.ctypes.data + i * MEMBER for i in range(MEMBERS)]
    sizes = [MEMBER] * MEMBERS
    dests = {k: np.ones(n_el, np.float32) for k in arrays}
    # the materialize_into baseline reads into the same arrays, registered once
    dest_ptrs = [a.ctypes.data for a in dests.values()]
    t = {"bytes_put": [], "bytes_get": [], "obj_put": [], "obj_get": [],
         "into": [], "into_bytes": []}
    try:
        for r in range(rounds):
            bkeys = ["bench/b_%d_%d" % (r, i) for i in range(MEMBERS)]
            refs = []

            def bytes_round():
                t0 = time.perf_counter()
                rcs = store.batch_put_from(bkeys, sps, sizes, cfg)
                t1 = time.perf_counter()
                _check(rcs == [0] * MEMBERS, "batch_put_from -> %r" % rcs)
                rcs = store.batch_get_into(bkeys, dps, sizes)
                t2 = time.perf_counter()
                _check(rcs == sizes, "batch_get_into -> %r" % rcs)
                t["bytes_put"].append(t1 - t0)
                t["bytes_get"].append(t2 - t1)

            def object_round():
                t0 = time.perf_counter()
                ref = transfer.put_structured_object(payload, config=cfg)
                t1 = time.perf_counter()
                res = transfer.materialize(transfer.read_spec(ref))
                t2 = time.perf_counter()
                _check(res.objects["m2"][-1] == arrays["m2"][-1], "materialize mismatch")
                t["obj_put"].append(t1 - t0)
                t["obj_get"].append(t2 - t1)
                refs.append(ref)

            for fn in ((bytes_round, object_round) if r % 2 == 0 else
                       (object_round, bytes_round)):
                fn()
            # materialize_into against batch_get_into of the same keys
            spec = transfer.read_spec(refs[0])
            keys = [refs[0].manifest["buffers"]["m%d" % i]["key"] for i in range(MEMBERS)]

            def into_round():
                t0 = time.perf_counter()
                res = transfer.materialize_into(spec, dests)
                t["into"].append(time.perf_counter() - t0)
                _check(res.objects["m0"] is dests["m0"], "materialize_into copied")

            def into_bytes_round():
                for p in dest_ptrs:
                    _check(store.register_buffer(p, MEMBER) == 0, "register_buffer")
                t0 = time.perf_counter()
                rcs = store.batch_get_into(keys, dest_ptrs, sizes)
                t["into_bytes"].append(time.perf_counter() - t0)
                for p in dest_ptrs:
                    store.unregister_buffer(p)
                _check(rcs == sizes, "batch_get_into -> %r" % rcs)

            for fn in ((into_round, into_bytes_round) if r % 2 == 0 else
                       (into_bytes_round, into_round)):
                fn()
            _check(bool((dests["m1"] == arrays["m1"]).all()), "materialize_into mismatch")
            store.batch_remove(bkeys, force=True)
            transfer.remove_bundle(refs[0])
    finally:
        store.unregister_buffer(src.ctypes.data)
        store.unregister_buffer(dst.ctypes.data)
    return t


def fastcopy(rounds):
    import numpy as np
    from mooncake._fast_copy import concat_arrays_into

    rng = np.random.default_rng(7)
    rows = [rng.integers(0, 1 << 40, size=int(n), dtype=np.int64)
            for n in rng.integers(256, 1792, size=4096)]
    total = sum(r.nbytes for r in rows)
    dest = np.zeros(total, np.uint8)
    t = {"numpy": [], "native1": [], "native2": []}
    for r in range(rounds):
        def numpy_path():
            t0 = time.perf_counter()
            joined = np.concatenate(rows)
            ctypes.memmove(dest.ctypes.data, joined.ctypes.data, joined.nbytes)
            t["numpy"].append(time.perf_counter() - t0)

        def native(n):
            def run():
                t0 = time.perf_counter()
                got = concat_arrays_into(rows, dest.ctypes.data, dest.nbytes, nthreads=n)
                t["native%d" % n].append(time.perf_counter() - t0)
                _check(got == total, "concat_arrays_into copied %d of %d" % (got, total))
            return run

        order = [numpy_path, native(1), native(2)]
        for fn in (order if r % 2 == 0 else order[::-1]):
            fn()
    _check(bool((dest[-8:].view(np.int64) == rows[-1][-1:]).all()), "fast copy mismatch")
    return {"times": t, "bytes": total}


def _metrics_read_bytes(port):
    import urllib.request

    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("mooncake_transfer_read_bytes "):
                return int(line.split()[1])
    raise RuntimeError("no mooncake_transfer_read_bytes in the client's metrics")


def rl_batch(seed=0):
    """A rollout batch as an RL trainer ships it (a DataProto envelope)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    lens = rng.integers(1024, 3073, size=DP_ROWS)

    def column(rows):
        a = np.empty(len(rows), dtype=object)
        for i, r in enumerate(rows):
            a[i] = r
        return a

    tokens = column([rng.integers(0, 32000, size=int(n), dtype=np.int32) for n in lens])
    masks = column([np.ones(int(n), np.int32) for n in lens])
    uids = column(["prompt-%d-%s" % (i, "é" * int(rng.integers(8, 64))) for i in range(DP_ROWS)])
    batch = {"rewards": torch.from_numpy(rng.standard_normal(DP_ROWS).astype(np.float32)),
             "advantages": torch.from_numpy(rng.standard_normal(DP_ROWS).astype(np.float32))}
    return {"batch": batch, "non_tensor_batch": {"token_ids": tokens, "attention_mask": masks,
                                                 "uid": uids},
            "meta_info": {"step": 1}}


def dataproto(cmd):
    """put + get of an RL batch against the bytes API on the same payloads,
    and the bytes partial reads move.  Its own client (the worker's store
    has no HTTP server): the transfer statistics are that client's."""
    import socket

    import numpy as np
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    from mooncake.structured_object_store import MooncakeBundleTransfer

    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    store = MooncakeDistributedStore()
    _check(store.setup("localhost", "P2PHANDSHAKE", 0, 128 << 20, "tcp", "", cmd["master"],
                       enable_client_http_server=True, client_http_port=port) == 0,
           "setup of the measuring client")
    try:
        return _dataproto_rounds(store, port, cmd, np, ReplicateConfig, MooncakeBundleTransfer)
    finally:
        store.close()


def _dataproto_rounds(store, port, cmd, np, ReplicateConfig, MooncakeBundleTransfer):
    cfg = ReplicateConfig()
    cfg.preferred_segment = cmd["target"]
    transfer = MooncakeBundleTransfer(store, key_prefix="bench/dataproto")
    data = rl_batch()
    tokens = data["non_tensor_batch"]["token_ids"]
    # the same payloads through the bytes API: one key per payload the put wrote
    probe = transfer.put(data, config=cfg)
    m = probe.stage_refs["default"].manifest
    sizes = [m["meta"]["bytes"]] + [b["bytes"] for b in m["buffers"].values() if b["bytes"]]
    total = sum(sizes)
    src = np.random.default_rng(1).integers(0, 255, size=total, dtype=np.uint8)
    dst = np.zeros(total, np.uint8)
    for a in (src, dst):
        _check(store.register_buffer(a.ctypes.data, a.nbytes) == 0, "register_buffer")
    offs = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
    sps = [src.ctypes.data + o for o in offs]
    dps = [dst.ctypes.data + o for o in offs]
    t = {"bytes_put": [], "bytes_get": [], "dp_put": [], "dp_get": []}
    try:
        for r in range(cmd["rounds"]):
            bkeys = ["bench/dpb_%d_%d" % (r, i) for i in range(len(sizes))]
            refs = []

            def bytes_round():
                t0 = time.perf_counter()
                rcs = store.batch_put_from(bkeys, sps, sizes, cfg)
                t1 = time.perf_counter()
                _check(rcs == [0] * len(sizes), "batch_put_from -> %r" % rcs)
                rcs = store.batch_get_into(bkeys, dps, sizes)
                t2 = time.perf_counter()
                _check(rcs == sizes, "batch_get_into -> %r" % rcs)
                t["bytes_put"].append(t1 - t0)
                t["bytes_get"].append(t2 - t1)

            def dp_round():
                t0 = time.perf_counter()
                ref = transfer.put(data, config=cfg)
                t1 = time.perf_counter()
                got = transfer.get(ref)
                t2 = time.perf_counter()
                _check(np.array_equal(got["non_tensor_batch"]["token_ids"][-1], tokens[-1]),
                       "get mismatch")
                t["dp_put"].append(t1 - t0)
                t["dp_get"].append(t2 - t1)
                refs.append(ref)
                del got

            for fn in ((bytes_round, dp_round) if r % 2 == 0 else (dp_round, bytes_round)):
                fn()
            store.batch_remove(bkeys, force=True)
            transfer.cleanup_dataproto(refs[0])
        # the bytes reads move, on a transfer that has cached nothing
        fresh = MooncakeBundleTransfer(store, key_prefix="bench/dataproto")
        rows = np.sort(np.random.default_rng(3).choice(DP_ROWS, DP_ROWS // 10, replace=False))
        moved = {}
        for name, sel in (("all", None), ("gather10", rows.tolist()),
                          ("slice10", slice(300, 300 + DP_ROWS // 10))):
            fresh = MooncakeBundleTransfer(store, key_prefix="bench/dataproto")
            before = _metrics_read_bytes(port)
            got = fresh.get(probe, rows=sel)
            moved[name] = _metrics_read_bytes(port) - before
            want = tokens if sel is None else tokens[sel]
            _check(all(np.array_equal(a, b) for a, b in
                       zip(got["non_tensor_batch"]["token_ids"], want)), "partial read mismatch")
        transfer.cleanup_dataproto(probe)
    finally:
        store.unregister_buffer(src.ctypes.data)
        store.unregister_buffer(dst.ctypes.data)
    return {"times": t, "bytes": total, "payloads": len(sizes), "moved": moved}


# --------------------------------------------------------------------------
# driver side


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--rounds", type=int, default=15, help="rounds per run (default 15)")
    ap.add_argument("--runs", type=int, default=3, help="runs (default 3)")
    args = ap.parse_args()
    if args.role == "worker":
        return worker_main()

    build = os.path.abspath(args.build_dir)
    env = bench_env(build, args.transport)
    master, rpc, _ = start_master(build)
    workers = []
    try:
        addr = "127.0.0.1:%d" % rpc
        holder, driver = Worker(env, __file__), Worker(env, __file__)
        workers = [holder, driver]
        h = holder.call(op="setup", master=addr, segment=512 << 20, local_buffer=16 << 20)
        driver.call(op="setup", master=addr, segment=0, local_buffer=64 << 20)
        target = h["hostname"]
        total = MEMBER * MEMBERS
        print("mooncake structured-object benchmark: 1 master + 2 client processes on "
              "loopback, transport=%s, %d x %d MiB members, %d rounds x %d runs"
              % (args.transport, MEMBERS, MEMBER >> 20, args.rounds, args.runs))
        ratios = {"put_materialize": [], "materialize_into": []}
        for run in range(args.runs):
            t = driver.call(op="objects", target=target, rounds=args.rounds)
            m = {k: median(v) for k, v in t.items()}
            base = m["bytes_put"] + m["bytes_get"]
            obj = m["obj_put"] + m["obj_get"]
            ratios["put_materialize"].append(base / obj)
            ratios["materialize_into"].append(m["into_bytes"] / m["into"])
            print("run %d: batch_put_from+batch_get_into %.1f ms (%.2f+%.2f GB/s) | "
                  "put_structured_object+materialize %.1f ms (%.2f+%.2f GB/s) -> %.3f | "
                  "batch_get_into %.1f ms, materialize_into %.1f ms -> %.3f"
                  % (run, base * 1e3, gbps(total, m["bytes_put"]), gbps(total, m["bytes_get"]),
                     obj * 1e3, gbps(total, m["obj_put"]), gbps(total, m["obj_get"]),
                     base / obj, m["into_bytes"] * 1e3, m["into"] * 1e3,
                     m["into_bytes"] / m["into"]))
        for k in ratios:
            target_ratio = TARGETS[k]
            r = median(ratios[k])
            ok = r >= target_ratio
            print("%-17s median ratio %.3f (target >= %.2f) %s"
                  % (k, r, target_ratio, "ok" if ok else "BELOW TARGET"))
        dp_ratios, dp = [], None
        for run in range(args.runs):
            dp = driver.call(op="dataproto", master=addr, target=target, rounds=args.rounds)
            m = {k: median(v) for k, v in dp["times"].items()}
            base = m["bytes_put"] + m["bytes_get"]
            obj = m["dp_put"] + m["dp_get"]
            dp_ratios.append(base / obj)
            print("run %d: DataProto %d rows, %.1f MiB in %d payloads: batch_put_from+"
                  "batch_get_into %.1f ms (%.1f+%.1f) | put+get %.1f ms (%.1f+%.1f) -> %.3f"
                  % (run, DP_ROWS, dp["bytes"] / 2 ** 20, dp["payloads"], base * 1e3,
                     m["bytes_put"] * 1e3, m["bytes_get"] * 1e3, obj * 1e3,
                     m["dp_put"] * 1e3, m["dp_get"] * 1e3, base / obj))
        r = median(dp_ratios)
        print("%-17s median ratio %.3f (target >= %.2f) %s"
              % ("dataproto", r, TARGETS["dataproto"],
                 "ok" if r >= TARGETS["dataproto"] else "BELOW TARGET"))
        mv = dp["moved"]
        for name in ("gather10", "slice10"):
            share = mv[name] / mv["all"]
            print("DataProto read of 10%% of the rows (%s): %.2f of %.2f MiB moved = %.3f "
                  "(target <= %.2f) %s" % (name, mv[name] / 2 ** 20, mv["all"] / 2 ** 20,
                                           share, DP_PARTIAL_MAX,
                                           "ok" if share <= DP_PARTIAL_MAX else "ABOVE TARGET"))
        fc = driver.call(op="fastcopy", rounds=max(5, args.rounds))
        ft = {k: median(v) for k, v in fc["times"].items()}
        print("fast copy, 4096 ragged int64 rows (%.1f MiB): numpy concatenate+copy %.2f ms | "
              "concat_arrays_into 1 thread %.2f ms (x%.2f) | 2 threads %.2f ms (x%.2f)"
              % (fc["bytes"] / 2 ** 20, ft["numpy"] * 1e3, ft["native1"] * 1e3,
                 ft["numpy"] / ft["native1"], ft["native2"] * 1e3,
                 ft["numpy"] / ft["native2"]))
    finally:
        for w in workers:
            w.stop()
        stop_master(master)
    return 0


if __name__ == "__main__":
    sys.exit(main())

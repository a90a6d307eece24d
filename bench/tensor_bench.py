#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor benchmark: the tensor methods against the bytes API, same run.

Starts a mooncake_master and two client processes as store_bench.py does:
the *holder* contributes the segment, the *driver* writes into it
(preferred_segment) and reads back, by default through the same-host
shared-memory path (--transport tcp: the TCP transport).  Each row times
the tensor call and the bytes call that moves the same bytes (the
serialized object: 304-byte header + data) in alternating rounds, and
prints the tensor/bytes ratio:

  * zero copy, 16 MiB tensors: put_tensor (from the tensor's memory) and
    get_tensor_into (into a registered buffer) against batch_put_from /
    batch_get_into of one registered buffer of the same size;
  * zero copy, 32 x 256 KiB: batch_put_tensor and batch_get_tensor_into
    against batch_put_from / batch_get_into of 32 buffers;
  * latency, 4 KiB: get_tensor of a 4 KiB tensor against get of a 4 KiB
    value, p50 and p99 over interleaved gets.

    bench/tensor_bench.py [--build-dir build] [--transport auto|tcp] [--rounds N]
"""
import argparse
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import (Worker, bench_env, human, pct, serve_worker,  # noqa: E402
                         start_master, stop_master)

HEADER = 304
ZC_ROWS = ((16 << 20, 1, 30), (256 << 10, 32, 60))  # tensor bytes, batch, rounds
LAT_SIZE, LAT_OPS = 4 << 10, 4000


# --------------------------------------------------------------------------
# worker side


def worker_main():
    import torch
    from mooncake.store import ReplicateConfig

    def target_config(cmd):
        cfg = ReplicateConfig()
        cfg.preferred_segment = cmd["target"]
        return cfg

    serve_worker({
        "zc": lambda store, cmd: zero_copy(torch, store, target_config(cmd), cmd["size"],
                                           cmd["batch"], cmd["rounds"]),
        "latency": lambda store, cmd: latency(torch, store, target_config(cmd), cmd["size"],
                                              cmd["count"]),
    })


def _check(cond, what):
    if not cond:
        raise RuntimeError(what)


def zero_copy(torch, store, cfg, size, batch, rounds):
    """Per round: the bytes API and the tensor calls on the same bytes, in
    alternating order.  Returns the per-round seconds of each phase."""
    obj = HEADER + size
    n_el = size // 4
    tensors = [torch.randn(n_el) for _ in range(batch)]
    src = (ctypes.c_ubyte * (obj * batch))()
    dst = (ctypes.c_ubyte * (obj * batch))()
    sp, dp = ctypes.addressof(src), ctypes.addressof(dst)
    for p in (sp, dp):
        _check(store.register_buffer(p, obj * batch) == 0, "register_buffer")
    sps = [sp + i * obj for i in range(batch)]
    dps = [dp + i * obj for i in range(batch)]
    sizes = [obj] * batch
    # the bytes source holds the serialized tensors, so both sides move the same bytes
    for i, t in enumerate(tensors):
        _check(store.put_tensor("seed_%d" % i, t) == 0, "seed put_tensor")
        _check(store.get_into("seed_%d" % i, sps[i], obj) == obj, "seed get_into")
    store.batch_remove(["seed_%d" % i for i in range(batch)], force=True)
    times = {"bytes_put": [], "bytes_get": [], "tensor_put": [], "tensor_get": []}
    try:
        for r in range(rounds):
            bkeys = ["b_%d_%d_%d" % (size, r, i) for i in range(batch)]
            tkeys = ["t_%d_%d_%d" % (size, r, i) for i in range(batch)]

            def bytes_round():
                t0 = time.perf_counter()
                rcs = store.batch_put_from(bkeys, sps, sizes, cfg)
                times["bytes_put"].append(time.perf_counter() - t0)
                _check(rcs == [0] * batch, "batch_put_from -> %r" % rcs[:4])
                t0 = time.perf_counter()
                rcs = store.batch_get_into(bkeys, dps, sizes)
                times["bytes_get"].append(time.perf_counter() - t0)
                _check(rcs == sizes, "batch_get_into -> %r" % rcs[:4])

            def tensor_round():
                t0 = time.perf_counter()
                if batch == 1:
                    rcs = [store.pub_tensor(tkeys[0], tensors[0], cfg)]
                else:
                    rcs = store.batch_pub_tensor(tkeys, tensors, cfg)
                times["tensor_put"].append(time.perf_counter() - t0)
                _check(rcs == [0] * batch, "tensor put -> %r" % rcs[:4])
                t0 = time.perf_counter()
                if batch == 1:
                    got = [store.get_tensor_into(tkeys[0], dps[0], obj)]
                else:
                    got = store.batch_get_tensor_into(tkeys, dps, sizes)
                times["tensor_get"].append(time.perf_counter() - t0)
                _check(all(g is not None for g in got), "tensor get_into missed")
                _check(got[0].data_ptr() == dps[0] + HEADER, "get_tensor_into copied")
                _check(torch.equal(got[-1], tensors[-1]), "tensor data mismatch")

            for fn in ((bytes_round, tensor_round) if r % 2 == 0 else
                       (tensor_round, bytes_round)):
                fn()
            store.batch_remove(bkeys + tkeys, force=True)
    finally:
        store.unregister_buffer(sp)
        store.unregister_buffer(dp)
    return times


def latency(torch, store, cfg, size, count):
    """Interleaved single gets of a bytes value and a tensor of the same
    data size; nanoseconds of each."""
    value = os.urandom(size)
    tensor = torch.randn(size // 4)
    keys = ["lat_%d" % i for i in range(count)]
    for k in keys:
        _check(store.put("b" + k, value, cfg) == 0, "put")
        _check(store.pub_tensor("t" + k, tensor, cfg) == 0, "pub_tensor")
    b_ns, t_ns = [], []
    for i, k in enumerate(keys):
        order = (("b", b_ns), ("t", t_ns)) if i % 2 == 0 else (("t", t_ns), ("b", b_ns))
        for kind, out in order:
            s = time.perf_counter_ns()
            got = store.get("b" + k) if kind == "b" else store.get_tensor("t" + k)
            out.append(time.perf_counter_ns() - s)
            _check(got is not None and len(got) > 0, "get %s%s missed" % (kind, k))
    _check(torch.equal(store.get_tensor("t" + keys[0]), tensor), "tensor mismatch")
    store.batch_remove(["b" + k for k in keys] + ["t" + k for k in keys], force=True)
    return {"bytes_ns": b_ns, "tensor_ns": t_ns}


# --------------------------------------------------------------------------
# driver side


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--transport", choices=["auto", "tcp"], default="auto",
                    help="auto: same-host shared memory where possible; tcp: MC_TE_SHM=0")
    ap.add_argument("--rounds", type=int, default=0,
                    help="rounds per zero-copy row (default: 30 for 16 MiB, 60 for 256 KiB)")
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
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
        seg = max(2 * (HEADER + s) * b for s, b, _ in ZC_ROWS) + 2 * LAT_OPS * 8192 + (64 << 20)
        h = holder.call(op="setup", master=addr, segment=seg, local_buffer=16 << 20)
        driver.call(op="setup", master=addr, segment=0, local_buffer=16 << 20)
        target = h["hostname"]

        print("mooncake tensor benchmark: 1 master + 2 client processes on loopback, "
              "transport=%s; tensor and bytes calls alternate, medians over rounds"
              % ("tcp" if args.transport == "tcp" else "same-host shared memory"))
        print()
        print("zero copy: tensor calls vs batch_put_from / batch_get_into of the same bytes")
        print("%-9s %5s %6s | %10s %10s %6s | %10s %10s %6s" % (
            "tensor", "batch", "rounds", "put GB/s", "bytes GB/s", "ratio",
            "get GB/s", "bytes GB/s", "ratio"))
        for size, batch, rounds in ZC_ROWS:
            rounds = args.rounds or rounds
            z = driver.call(op="zc", size=size, batch=batch, rounds=rounds, target=target)
            moved = (HEADER + size) * batch / 1e9
            tp, bp = moved / median(z["tensor_put"]), moved / median(z["bytes_put"])
            tg, bg = moved / median(z["tensor_get"]), moved / median(z["bytes_get"])
            print("%-9s %5d %6d | %10.3f %10.3f %6.2f | %10.3f %10.3f %6.2f" % (
                human(size), batch, rounds, tp, bp, tp / bp, tg, bg, tg / bg))
        print("put: put_tensor (batch 1) / batch_put_tensor; get: get_tensor_into (batch 1) "
              "/ batch_get_tensor_into; targets: ratio >= 0.9")
        print()
        lat = driver.call(op="latency", size=LAT_SIZE, count=LAT_OPS, target=target)
        b, t = sorted(lat["bytes_ns"]), sorted(lat["tensor_ns"])
        print("latency, %s: get vs get_tensor, %d interleaved gets each" % (human(LAT_SIZE),
                                                                           LAT_OPS))
        print("%-12s %8s %8s" % ("", "p50 us", "p99 us"))
        print("%-12s %8.1f %8.1f" % ("get", pct(b, 50) / 1e3, pct(b, 99) / 1e3))
        print("%-12s %8.1f %8.1f" % ("get_tensor", pct(t, 50) / 1e3, pct(t, 99) / 1e3))
        print("p50 ratio get_tensor/get: %.2f (target <= 1.2)" % (pct(t, 50) / pct(b, 50)))
    finally:
        for w in workers:
            w.stop()
        stop_master(master)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Model-weight snapshot benchmark: resharded load against the bytes API, same run.

Starts a mooncake_master and two client processes as store_bench.py does:
the *holder* contributes the segment, the *driver* writes a snapshot into
it and reads it back, by default through the same-host shared-memory path
(--transport tcp: the TCP transport).

  * load: a 1 GiB bf16 snapshot of a transformer-like model (embedding,
    per layer qkv/up split along rows, o/down along columns, two
    replicated norms) written at TP=4, loaded at TP=2 (both target ranks:
    every stored byte once, the norms twice) by WeightStore.load into
    freshly registered destination tensors, against batch_get_into of
    every payload key, whole, into one registered buffer of the same
    size.  The two alternate within every round; target ratio >= 0.8.
  * plan: plan_load of a 10 000-tensor manifest (TP=4 -> TP=2, all target
    ranks) and tp_placement of the same model; target < 1 s.

Each figure is the median of the rounds, the whole measurement repeated
--runs times (the ratio printed is the median over runs).

    bench/weights_bench.py [--build-dir build] [--transport auto|tcp]
                           [--rounds N] [--runs N] [--layers N]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import add_common_args, holder_and_driver, serve_worker  # noqa: E402

HIDDEN = 2048
VOCAB = 16384
TARGET_LOAD = 0.8
TARGET_PLAN_S = 1.0


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def _check(cond, what):
    if not cond:
        raise RuntimeError(what)


def model(layers, hidden=HIDDEN, vocab=VOCAB):
    """[(tensor id, shape, dtype, split dim)]: 96 MiB per layer at 2048."""
    out = [("embed", (vocab, hidden), "bfloat16", 0)]
    for i in range(layers):
        out += [(f"l{i}.qkv", (3 * hidden, hidden), "bfloat16", 0),
                (f"l{i}.o", (hidden, hidden), "bfloat16", 1),
                (f"l{i}.up", (4 * hidden, hidden), "bfloat16", 0),
                (f"l{i}.down", (hidden, 4 * hidden), "bfloat16", 1),
                (f"l{i}.ln1", (hidden,), "float32", None),
                (f"l{i}.ln2", (hidden,), "float32", None)]
    return out


def placement(spec, tp):
    from mooncake.reshard.weight.store_layout import TensorDescriptor, tp_placement
    return tp_placement([TensorDescriptor(t, s, d) for t, s, d, _ in spec], tp,
                        {t: d for t, _, _, d in spec if d is not None})


# --------------------------------------------------------------------------
# worker side


def worker_main():
    from mooncake.store import ReplicateConfig

    def run_load(store, cmd):
        cfg = ReplicateConfig()
        cfg.preferred_segment = cmd["target"]
        cfg.with_hard_pin = True  # the segment is nearly full: no eviction
        return load(store, cfg, cmd["rounds"], cmd["layers"])

    serve_worker({"load": run_load, "plan": lambda store, cmd: plan(cmd["tensors"])})


def write_snapshot(store, cfg, spec, revision):
    import torch
    from mooncake.reshard.weight import (WeightSnapshotAdapter, WeightSnapshotDescriptor,
                                         WeightStore)
    ws = WeightStore(store, key_prefix="bench/weights", config=cfg)
    desc = WeightSnapshotDescriptor("bench-model", revision)
    src = placement(spec, 4)
    dts = {t: d for t, _, d, _ in spec}
    writers = []
    for r in range(4):
        w = ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(src, r))
        g = torch.Generator().manual_seed(r)
        for f in src.rank_fragments(r):
            t = torch.randn(f.local_shape, generator=g).to(getattr(torch, dts[f.tensor_id]))
            w.write_tensor(f.tensor_id, t)
            del t
        writers.append(w)
    for w in writers[1:]:
        w.seal()
    return ws, desc, writers[0].commit()


def load(store, cfg, rounds, layers):
    import numpy as np
    import torch
    spec = model(layers)
    ws, desc, manifest = write_snapshot(store, cfg, spec, "r%d" % time.monotonic_ns())
    frags = [f for f in manifest.fragments if f.nbytes]
    total = sum(f.nbytes for f in frags)
    plan = ws.plan_load(ws.load_manifest(desc), placement(spec, 2))
    load_bytes = plan.nbytes()
    # one buffer for both paths (memory: the machine is shared)
    base_buf = np.zeros(max(total, load_bytes), np.uint8)
    # the baseline: every payload, whole, back to back
    offs, off = [], 0
    for f in frags:
        offs.append(base_buf.ctypes.data + off)
        off += f.nbytes
    keys, sizes = [f.key for f in frags], [f.nbytes for f in frags]
    # the resharded load: TP=2, both ranks, into tensors laid out back to back
    dts = {t: d for t, _, d, _ in spec}
    dests, off = {}, 0
    for r in plan.ranks:
        for f in plan.target_fragments(r):
            dt = getattr(torch, dts[f.tensor_id])
            n = torch.Size(f.local_shape).numel() * torch.tensor([], dtype=dt).element_size()
            dests[f.fragment_id] = torch.from_numpy(base_buf[off:off + n]).view(dt) \
                .view(f.local_shape)
            off += n
    t = {"bytes": [], "weights": []}

    def bytes_round():  # registration outside the timed call (load registers its own)
        _check(store.register_buffer(base_buf.ctypes.data, total) == 0, "register_buffer")
        t0 = time.perf_counter()
        rcs = store.batch_get_into(keys, offs, sizes)
        t["bytes"].append(time.perf_counter() - t0)
        store.unregister_buffer(base_buf.ctypes.data)
        _check(rcs == sizes, "batch_get_into -> %r" % sorted(set(rcs) - set(sizes)))

    def weights_round():
        t0 = time.perf_counter()
        n = ws.load(plan, dests)
        t["weights"].append(time.perf_counter() - t0)
        _check(n == load_bytes, "load moved %d of %d bytes" % (n, load_bytes))

    try:
        for r in range(rounds):
            for fn in ((bytes_round, weights_round) if r % 2 == 0 else
                       (weights_round, bytes_round)):
                fn()
        weights_round()  # last: the spot check below reads what it wrote
        # spot check: the first stored fragment of l0.o at its place in rank 0
        fo = [f for f in plan.target_fragments(0) if f.tensor_id == "l0.o"][0]
        so = [f for f in frags if f.tensor_id == "l0.o" and f.global_offset == (0, 0)][0]
        got = store.get(so.key)
        want = dests[fo.fragment_id][:, :so.local_shape[1]].contiguous()
        _check(bytes(want.view(-1).view(torch.uint8).numpy()) == got, "load mismatch")
    finally:
        ws.close()
        ws.remove_snapshot(desc)
    return {"times": t, "bytes": total, "load_bytes": load_bytes, "tensors": len(spec),
            "payloads": len(keys),
            "ranges": sum(rd.runs for r in plan.ranks for rd in plan.reads[r])}


def plan(n_tensors):
    from mooncake.reshard.weight.store import StoredFragment, StoredWeightManifest
    layers = (n_tensors - 1) // 6
    spec = model(layers, hidden=256, vocab=1024)
    t0 = time.perf_counter()
    src = placement(spec, 4)
    t1 = time.perf_counter()
    tgt = placement(spec, 2)
    t2 = time.perf_counter()
    stored = tuple(StoredFragment(f.tensor_id, f.global_offset, f.local_shape,
                                  "bench/p/%d" % i, 1)
                   for i, f in enumerate(src.fragments) if f.rank == 0 or
                   f.tensor_id.endswith(("qkv", ".o", "up", "down", "embed")))
    m = StoredWeightManifest("bench/p/manifest", "default", "m", "r", 0, src.tensors, stored,
                             "")
    from mooncake.reshard.weight import WeightStore
    ws = WeightStore(None)
    t3 = time.perf_counter()
    p = ws.plan_load(m, tgt)
    t4 = time.perf_counter()
    _check(sum(len(v) for v in p.reads.values()) > 0, "empty plan")
    return {"tensors": len(spec), "placement_s": t1 - t0, "target_placement_s": t2 - t1,
            "plan_s": t4 - t3, "reads": sum(len(v) for v in p.reads.values())}


# --------------------------------------------------------------------------
# driver side


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (default 5)")
    ap.add_argument("--runs", type=int, default=3, help="runs (default 3)")
    ap.add_argument("--layers", type=int, default=10,
                    help="layers of 96 MiB (default 10: with the embedding, 1 GiB)")
    args = ap.parse_args()
    if args.role == "worker":
        return worker_main()

    size = sum(2 * s[0] * s[1] if len(s) == 2 else 4 * s[0]
               for _, s, _, _ in model(args.layers))
    with holder_and_driver(args.build_dir, args.transport, __file__, size + size // 8,
                           16 << 20) as (driver, holder_name):
        print("mooncake weight-snapshot benchmark: 1 master + 2 client processes on loopback, "
              "transport=%s, %.2f GiB snapshot, TP=4 -> TP=2, %d rounds x %d runs"
              % (args.transport, size / 2 ** 30, args.rounds, args.runs))
        ratios = []
        for run in range(args.runs):
            out = driver.call(op="load", target=holder_name, rounds=args.rounds,
                              layers=args.layers)
            m = {k: median(v) for k, v in out["times"].items()}
            ratio = m["bytes"] / m["weights"]
            ratios.append(ratio)
            print("run %d: batch_get_into %d payloads %.1f ms (%.2f GB/s) | WeightStore.load "
                  "%d tensors, %d ranges %.1f ms (%.2f GB/s) -> %.3f"
                  % (run, out["payloads"], m["bytes"] * 1e3, out["bytes"] / m["bytes"] / 1e9,
                     out["tensors"], out["ranges"], m["weights"] * 1e3,
                     out["load_bytes"] / m["weights"] / 1e9, ratio))
        r = median(ratios)
        print("load  median ratio %.3f (target >= %.2f) %s"
              % (r, TARGET_LOAD, "ok" if r >= TARGET_LOAD else "BELOW TARGET"))
        plans = [driver.call(op="plan", tensors=10000) for _ in range(args.runs)]
        ps = median([p["plan_s"] for p in plans])
        print("plan  %d tensors, %d ranged reads: plan_load median %.3f s (target < %.1f s) %s;"
              " tp_placement TP=4 %.3f s, TP=2 %.3f s"
              % (plans[0]["tensors"], plans[0]["reads"], ps, TARGET_PLAN_S,
                 "ok" if ps < TARGET_PLAN_S else "ABOVE TARGET",
                 median([p["placement_s"] for p in plans]),
                 median([p["target_placement_s"] for p in plans])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

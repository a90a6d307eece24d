#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Model-weight snapshot benchmark: resharded load against the bytes API, same run.

Starts a mooncake_master and two client processes as store_bench.py does:
the *holder* contributes the segment, the *driver* writes a snapshot into
it and reads it back, by default through the same-host shared-memory path
(--transport tcp: the TCP transport).  Everything is built with upstream's
contracts (mooncake.reshard.weight): ParallelTopology, TensorDescriptor
with SplitAxis / ReplicatedAxis / OwnershipAxis, WeightPlacementManifest,
a WeightSnapshotAdapter per writing participant, WeightManifest.

  * load: a 1 GiB bf16 snapshot of a transformer-like model (embedding,
    per layer qkv/up split along rows, o/down along columns, two
    replicated norms) written at TP=4 by four participants, loaded at TP=2
    (both target participants: every stored byte once, the norms twice) by
    WeightStore.load into freshly registered destination tensors, against
    batch_get_into of every payload key, whole, into one registered buffer
    of the same size.  The two alternate within every round; target ratio
    >= 0.9.
  * plan: a 10 000-tensor model written at TP=8 x PP=2 (its WeightManifest
    as the writers would commit it), planned into TP=2:
    WeightStore.plan_load (upstream's plan_stored_transfer_to_target_placement
    plus the coalesced ranged reads) -- the first plan of fresh manifests
    (which derives their columns once), the following ones, and a new
    manifest of the same model into the target planned before (what each
    new revision costs); plan_placement_transfer of the two placements;
    target <= 50 ms.

Each figure is the median of the rounds, the whole measurement repeated
--runs times (the ratio printed is the median over runs).

--net veth runs the load rows as two hosts: the driver in one network
namespace, the master and the holder in another, joined by a veth pair
(store_bench.py's Veth; root, iproute2, TCP only): the loader's receive
and the holder's send then cross a device, as between hosts, though both
still share this machine's CPUs.

    bench/weights_bench.py [--build-dir build] [--transport auto|tcp]
                           [--rounds N] [--runs N] [--layers N] [--reference]
                           [--net loopback|veth]
"""
import argparse
import os
import sys
import time
from math import prod

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import (Veth, add_common_args, holder_and_driver, serve_worker,  # noqa: E402
                         veth_usable)

HIDDEN = 2048
VOCAB = 16384
TARGET_LOAD = 0.9
TARGET_PLAN_S = 0.05
ITEMSIZE = {"bfloat16": 2, "float32": 4}


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


def placement(spec, tp, pp=1, name="p", resource_id="bench-model", revision="r"):
    """Upstream's complete placement of the model at TP=tp x PP=pp: split
    tensors along their dimension over TP, norms replicated over TP, each
    layer owned by one pipeline stage (OwnershipAxis("pp"))."""
    from mooncake.reshard.weight import (OwnershipAxis, ParallelRank, ParallelTopology,
                                         PlacementFragment, ReplicatedAxis, SplitAxis,
                                         TensorDescriptor, TopologyParticipant,
                                         WeightPlacementManifest)
    ranks = [ParallelRank(pp=p, tp=t) for p in range(pp) for t in range(tp)]
    topo = ParallelTopology(tp_size=tp, pp_size=pp, ep_size=1, dp_size=1, participants=[
        TopologyParticipant(f"{name}-pp{r.pp}-tp{r.tp}", r) for r in ranks])
    layers = max(1, (len(spec) - 1) // 6)
    tensors, frags = [], []
    for tid, shape, dtype, dim in spec:
        item = ITEMSIZE[dtype]
        layer = int(tid[1:].split(".")[0]) if tid != "embed" else 0
        stage = min(pp - 1, layer * pp // layers)
        axes = [OwnershipAxis("pp")] if pp > 1 else []
        if tp > 1:
            axes.append(SplitAxis("tp", dim) if dim is not None else ReplicatedAxis("tp"))
        shard = (dim,) if dim is not None and tp > 1 else ()
        tensors.append(TensorDescriptor(tid, shape, dtype, item, shard, f"bench:{dtype}",
                                        axes))
        for r in range(tp):
            off, shp = [0] * len(shape), list(shape)
            if dim is not None:
                step = shape[dim] // tp
                off[dim], shp[dim] = r * step, step
            frags.append(PlacementFragment(tid, tuple(off), tuple(shp), prod(shp) * item,
                                           ParallelRank(pp=stage, tp=r)))
    return WeightPlacementManifest.from_fragments(
        resource_id=resource_id, revision=revision, weight_generation=0,
        placement_set_id=name, topology=topo, tensors=tensors, fragments=frags)


# --------------------------------------------------------------------------
# worker side


def worker_main():
    from mooncake.store import ReplicateConfig

    def run_load(store, cmd):
        cfg = ReplicateConfig()
        cfg.preferred_segment = cmd["target"]
        cfg.with_hard_pin = True  # the segment is nearly full: no eviction
        return load(store, cfg, cmd["rounds"], cmd["layers"], cmd.get("stage_run_bytes"),
                    cmd.get("stage_batch_bytes"))

    serve_worker({"load": run_load,
                  "plan": lambda store, cmd: plan(cmd["tensors"], cmd["reference"])})


def write_snapshot(store, cfg, spec, revision, stage_run_bytes=None, stage_batch_bytes=None):
    """Four TP participants write their fragments (in this process), the
    first commits the WeightManifest."""
    import torch
    from mooncake.reshard.weight import WeightSnapshotDescriptor, WeightStore
    from mooncake.reshard.weight import WeightSnapshotAdapter
    ws = WeightStore(store, key_prefix="bench/weights", config=cfg)
    if stage_run_bytes is not None:
        ws.STAGE_RUN_BYTES = stage_run_bytes
    if stage_batch_bytes is not None:
        ws.STAGE_BATCH_BYTES = stage_batch_bytes
    src = placement(spec, 4, name="src", revision=revision)
    desc = WeightSnapshotDescriptor("bench-model", revision, 0)
    writers = []
    for part in src.parts:
        w = ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(src, part.participant_id))
        g = torch.Generator().manual_seed(part.rank.tp)
        for f in part.fragments:
            dt = getattr(torch, src.tensor(f.tensor_id).dtype)
            t = torch.randn(f.local_shape, generator=g).to(dt)
            w.write_fragment(f.placement_fragment_id, t)
            del t
        writers.append(w)
    for w in writers[1:]:
        w.seal()
    return ws, desc, writers[0].commit()


def _holder_pid():
    """The holder's pid as seen from the driver: the other worker process
    of the benchmark's main process (None when there is none to be found,
    as under --net veth, where ip netns exec starts them)."""
    me, parent = os.getpid(), os.getppid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % d, "rb") as f:
                worker = b"--role\0worker" in f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and worker:
            return int(d)
    return None


def _cpu_s(pid):
    """CPU seconds (user + system) of process ``pid`` so far, or 0."""
    if pid is None:
        return 0.0
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def load(store, cfg, rounds, layers, stage_run_bytes=None, stage_batch_bytes=None):
    import numpy as np
    import torch
    spec = model(layers)
    revision = "r%d" % time.monotonic_ns()
    ws, desc, manifest = write_snapshot(store, cfg, spec, revision, stage_run_bytes,
                                        stage_batch_bytes)
    frags = list(manifest.fragments)
    total = sum(f.nbytes for f in frags)
    tgt = placement(spec, 2, name="tgt", revision=revision)
    plan = ws.plan_load(ws.load_manifest(desc), tgt)
    load_bytes = plan.nbytes()
    # one buffer for both paths (memory: the machine is shared)
    base_buf = np.zeros(max(total, load_bytes), np.uint8)
    # its pages faulted in before the rounds: otherwise the first round
    # (batch_get_into's) pays for mapping 1 GiB (~1.5 s of CPU in recvmsg's
    # page faults), which its CPU per round and median carry
    base_buf.fill(1)
    # the baseline: every payload, whole, back to back
    offs, off = [], 0
    for f in frags:
        offs.append(base_buf.ctypes.data + off)
        off += f.nbytes
    keys, sizes = [f.object_key for f in frags], [f.nbytes for f in frags]
    # the resharded load: TP=2, both participants, into tensors back to back
    dests, off = {}, 0
    for pid in plan.participants:
        for f in plan.target_fragments(pid):
            dt = getattr(torch, tgt.tensor(f.tensor_id).dtype)
            dests[f.placement_fragment_id] = torch.from_numpy(
                base_buf[off:off + f.nbytes]).view(dt).view(f.local_shape)
            off += f.nbytes
    t = {"bytes": [], "weights": []}
    # CPU seconds of both paths in all: the driver's (this process) and the holder's
    cpu = {"bytes": [0.0, 0.0], "weights": [0.0, 0.0]}
    hpid = _holder_pid()

    # each path's first call (a plan's first load lowers it to blocks, done
    # once per plan), timed with the rounds and also printed on its own
    first = {}

    def timed(what, fn, keep=True):
        c0, h0, t0 = time.process_time(), _cpu_s(hpid), time.perf_counter()
        out = fn()
        if not keep:  # the spot check's load: not a round
            return out
        first.setdefault(what, time.perf_counter() - t0)
        t[what].append(time.perf_counter() - t0)
        cpu[what][0] += time.process_time() - c0
        cpu[what][1] += _cpu_s(hpid) - h0
        return out

    def bytes_round(keep=True):  # registration outside the timed call (load registers its own)
        _check(store.register_buffer(base_buf.ctypes.data, total) == 0, "register_buffer")
        rcs = timed("bytes", lambda: store.batch_get_into(keys, offs, sizes), keep)
        store.unregister_buffer(base_buf.ctypes.data)
        _check(rcs == sizes, "batch_get_into -> %r" % sorted(set(rcs) - set(sizes)))

    def weights_round(keep=True):
        n = timed("weights", lambda: ws.load(plan, dests), keep)
        _check(n == load_bytes, "load moved %d of %d bytes" % (n, load_bytes))

    try:
        # both paths' first call first, each in its path's median (as many
        # calls of each, the first of each among them)
        bytes_round()
        weights_round()
        for r in range(rounds):
            for fn in ((bytes_round, weights_round) if r % 2 == 0 else
                       (weights_round, bytes_round)):
                fn()
        weights_round(False)  # last, untimed: the spot check below reads what it wrote
        # spot check: the first stored fragment of l0.o at its place in TP rank 0
        pid0 = plan.participants[0]
        fo = [f for f in plan.target_fragments(pid0) if f.tensor_id == "l0.o"][0]
        so = [f for f in frags if f.tensor_id == "l0.o" and f.global_offset == (0, 0)][0]
        got = store.get(so.object_key)
        want = dests[fo.placement_fragment_id][:, :so.local_shape[1]].contiguous()
        _check(bytes(want.view(-1).view(torch.uint8).numpy()) == got, "load mismatch")
    finally:
        ws.close()
        ws.remove_snapshot(desc)
    lw = plan.lowered
    staged = ws._stage_run_bytes(lw) if lw is not None else 0
    return {"staged_below": staged, "times": t, "first": first, "cpu": cpu,
            "holder_cpu": hpid is not None,
            "bytes": total, "load_bytes": load_bytes,
            "tensors": len(spec), "payloads": len(keys),
            "regions": len(plan.plan.operations),
            "reads": len(lw.key) if lw is not None else sum(
                r.runs for p in plan.participants for r in plan.reads[p])}


def stored_manifest(src, group):
    """The WeightManifest the writers of ``src`` commit: the planner's
    writer set, one payload object per fragment."""
    from mooncake.reshard.weight import StoredFragment, WeightManifest
    from mooncake.reshard.weight.store_writer import writer_set
    chosen = sorted(writer_set(src).values(), key=lambda f: (f.tensor_id, f.global_offset))
    frags = tuple(StoredFragment(f.placement_fragment_id, f.tensor_id, f.global_offset,
                                 f.local_shape, f"{group}/payload/{i}", 0, f.nbytes)
                  for i, f in enumerate(chosen))
    return WeightManifest("default", src.resource_id, src.revision, src.weight_generation,
                          group, group + "/manifest",
                          tuple(sorted(src.tensors, key=lambda t: t.tensor_id)), frags,
                          "2026-08-19T00:00:00Z")


def plan(n_tensors, reference=False):
    from mooncake.reshard.weight import WeightStore, plan_placement_transfer, planner
    layers = (n_tensors - 1) // 6
    spec = model(layers, hidden=256, vocab=1024)
    t0 = time.perf_counter()
    src = placement(spec, 8, 2, name="src")
    tgt = placement(spec, 2, 1, name="tgt")
    m = stored_manifest(src, "bench/default/bench-model/r/0")
    build_s = time.perf_counter() - t0
    ws = WeightStore(None)
    times = []
    for _ in range(4):  # the first derives the manifests' columns
        t1 = time.perf_counter()
        p = ws.plan_load(m, tgt)
        times.append(time.perf_counter() - t1)
    fresh = []
    for _ in range(3):  # a new revision's manifest into a target planned before
        m2 = stored_manifest(src, "bench/default/bench-model/r/0")
        t1 = time.perf_counter()
        ws.plan_load(m2, tgt)
        fresh.append(time.perf_counter() - t1)
    t1 = time.perf_counter()
    plan_placement_transfer(src, tgt)  # derives the source placement's columns
    t2 = time.perf_counter()
    pp_times = []
    for _ in range(3):
        t3 = time.perf_counter()
        plan_placement_transfer(src, tgt)
        pp_times.append(time.perf_counter() - t3)
    ref_s = None
    if reference:
        with planner.reference_planner():
            t4 = time.perf_counter()
            ws.plan_load(m, tgt)
            ref_s = time.perf_counter() - t4
    _check(len(p.plan.operations) > 0 and p.lowered is not None, "no native plan")
    return {"tensors": len(spec), "source_fragments": len(src.fragments),
            "build_s": build_s, "first_s": times[0], "plan_s": median(times[1:]),
            "fresh_manifest_s": median(fresh),
            "placement_first_s": t2 - t1, "placement_s": median(pp_times),
            "reference_s": ref_s, "regions": len(p.plan.operations),
            "reads": len(p.lowered.key)}


# --------------------------------------------------------------------------
# driver side


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap)
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (default 5)")
    ap.add_argument("--runs", type=int, default=3, help="runs (default 3)")
    ap.add_argument("--plan-runs", type=int, default=None,
                    help="planning runs (default: --runs)")
    ap.add_argument("--layers", type=int, default=10,
                    help="layers of 96 MiB (default 10: with the embedding, 1 GiB)")
    ap.add_argument("--stage-run-bytes", type=int, default=None,
                    help="WeightStore.STAGE_RUN_BYTES for the load (default: the class's)")
    ap.add_argument("--stage-batch-bytes", type=int, default=None,
                    help="WeightStore.STAGE_BATCH_BYTES for the load (default: the class's)")
    ap.add_argument("--reference", action="store_true",
                    help="also time the pure-Python reference planner once per run")
    ap.add_argument("--net", choices=["loopback", "veth"], default="loopback",
                    help="veth: the driver in one network namespace, the master and the "
                         "holder in another, joined by a veth pair (root; TCP only)")
    args = ap.parse_args()
    if args.role == "worker":
        return worker_main()
    veth = None
    if args.net == "veth":
        why = veth_usable()
        if why:
            ap.error(why)
        veth = Veth()
    try:
        return measure(args, veth)
    finally:
        if veth is not None:
            veth.close()


def measure(args, veth):
    size = sum(ITEMSIZE[d] * prod(s) for _, s, d, _ in model(args.layers))
    with holder_and_driver(args.build_dir, args.transport, __file__, size + size // 8,
                           16 << 20, veth) as (driver, holder_name):
        print("mooncake weight-snapshot benchmark: 1 master + 2 client processes %s, "
              "transport=%s, %.2f GiB snapshot, TP=4 -> TP=2, %d rounds x %d runs"
              % ("on loopback" if veth is None else
                 "(driver | master + holder in two network namespaces joined by a veth pair)",
                 "tcp" if veth is not None else args.transport, size / 2 ** 30, args.rounds,
                 args.runs))
        ratios = []
        for run in range(args.runs):
            out = driver.call(op="load", target=holder_name, rounds=args.rounds,
                              layers=args.layers, stage_run_bytes=args.stage_run_bytes,
                              stage_batch_bytes=args.stage_batch_bytes)
            m = {k: median(v) for k, v in out["times"].items()}
            ratio = m["bytes"] / m["weights"]
            ratios.append(ratio)
            print("run %d: batch_get_into %d payloads %.1f ms (%.2f GB/s) | WeightStore.load "
                  "%d tensors, %d regions, %d reads (rows staged below %d B) %.1f ms "
                  "(%.2f GB/s) -> %.3f"
                  % (run, out["payloads"], m["bytes"] * 1e3, out["bytes"] / m["bytes"] / 1e9,
                     out["tensors"], out["regions"], out["reads"], out["staged_below"],
                     m["weights"] * 1e3,
                     out["load_bytes"] / m["weights"] / 1e9, ratio))
            print("       first call (in the medians above): batch_get_into %.1f ms | load %.1f ms"
                  % (out["first"]["bytes"] * 1e3, out["first"]["weights"] * 1e3))
            c, nb, nw = out["cpu"], len(out["times"]["bytes"]), len(out["times"]["weights"])
            print("       CPU per round: batch_get_into driver %.0f ms%s | load driver %.0f ms%s"
                  % (c["bytes"][0] / nb * 1e3,
                     ", holder %.0f ms" % (c["bytes"][1] / nb * 1e3) if out["holder_cpu"] else "",
                     c["weights"][0] / nw * 1e3,
                     ", holder %.0f ms" % (c["weights"][1] / nw * 1e3) if out["holder_cpu"]
                     else ""))
        if ratios:
            r = median(ratios)
            print("load  median ratio %.3f (target >= %.2f) %s"
                  % (r, TARGET_LOAD, "ok" if r >= TARGET_LOAD else "BELOW TARGET"))
        plans = []
        for run in range(args.runs if args.plan_runs is None else args.plan_runs):
            p = driver.call(op="plan", tensors=10000, reference=args.reference)
            plans.append(p)
            print("plan run %d: %d tensors (%d source fragments, TP=8 x PP=2 -> TP=2), "
                  "%d regions, %d reads: plan_load first %.1f ms, then %.1f ms, a fresh "
                  "manifest %.1f ms; plan_placement_transfer first %.1f ms, then %.1f ms%s"
                  % (run, p["tensors"], p["source_fragments"], p["regions"], p["reads"],
                     p["first_s"] * 1e3, p["plan_s"] * 1e3, p["fresh_manifest_s"] * 1e3,
                     p["placement_first_s"] * 1e3,
                     p["placement_s"] * 1e3,
                     "" if p["reference_s"] is None else
                     "; Python reference plan_load %.0f ms" % (p["reference_s"] * 1e3)))
        if not plans:
            return 0
        ps = median([p["plan_s"] for p in plans])
        print("plan  plan_load median %.1f ms (target <= %.0f ms) %s"
              % (ps * 1e3, TARGET_PLAN_S * 1e3, "ok" if ps <= TARGET_PLAN_S else "ABOVE TARGET"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

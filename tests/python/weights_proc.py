# SPDX-License-Identifier: Apache-2.0
"""A writer or reader rank of a model-weight snapshot, in its own process
(tests/python/test_weights.py).  Also the test model shared with the tests.

  weights_proc.py write MASTER REVISION TP RANK [--hang] [--commit-timeout S]
                                                [--commit-on-line]
      writes TP rank RANK's boxes of the test model at TP=TP (upstream's
      placement, participant tp_participant(RANK)); prints
      {"written": [...payload keys...]}; then, unless --hang, commits and
      prints {"manifest": key, "digest": manifest_digest}; then waits for a line on
      stdin (or 120 s) before closing the store, so its segment stays up
      for the readers.
  weights_proc.py read MASTER REVISION TP RANK
      loads rank RANK's fragments at TP=TP, checks every byte against the
      model, prints {"ok": true, "bytes": n}.
"""

import json
import select
import sys
import zlib

import torch

from mooncake.reshard.weight import (WeightSnapshotAdapter, WeightSnapshotDescriptor,
                                     WeightStore, tp_placement)
from mooncake.reshard.weight.store_layout import tp_participant

MiB = 1 << 20
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1}

# (tensor id, global shape, dtype, split dim or None for replicated)
MODEL = [
    ("embed", (50, 16), "bfloat16", None),   # replicated embedding
    ("norm", (16,), "float32", None),        # replicated norm
    ("qkv", (48, 16), "float16", 0),         # column-parallel: rows split
    ("o", (16, 36), "bfloat16", 1),          # row-parallel: columns split, uneven at 8
    ("up", (30, 16), "float32", 0),          # uneven at 4 and 8
    ("q8", (24, 20), "int8", 1),             # int8, columns, uneven at 8
    ("bias", (5,), "float16", 0),            # fewer elements than ranks at 8: replicated
]


def spec(model=MODEL):
    """tp_placement's model: (tensor id, shape, dtype, itemsize, split dim)."""
    return [(tid, shape, dt, ITEMSIZE[dt], d) for tid, shape, dt, d in model]


def nbytes(model=MODEL):
    """Bytes of one logical copy of the model."""
    return sum(ITEMSIZE[dt] * torch.Size(shape).numel() for _, shape, dt, _ in model)


def placement(tp, model=MODEL, revision="r"):
    return tp_placement(spec(model), tp, resource_id="test-model", revision=revision,
                        weight_generation=1)


def full(tid, shape, dtype):
    g = torch.Generator().manual_seed(zlib.crc32(tid.encode()))
    if dtype == "int8":
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(getattr(torch, dtype))


def shard(t, frag):
    return t[tuple(slice(o, o + n) for o, n in zip(frag.global_offset, frag.local_shape))] \
        .contiguous()


def descriptor(revision):
    return WeightSnapshotDescriptor("test-model", revision, 1)


def adapter(tp, rank, revision, model=MODEL, **kw):
    return WeightSnapshotAdapter(placement(tp, model, revision), tp_participant(rank), **kw)


def rank_tensors(tp, rank, model=MODEL, revision="r"):
    """(tensor id, this rank's shard) for every tensor."""
    p = placement(tp, model, revision)
    part = p.part(tp_participant(rank))
    dts = {tid: (shape, dt) for tid, shape, dt, _ in model}
    out = []
    for tid, shape, dt, _ in model:
        f = [x for x in part.fragments if x.tensor_id == tid][0]
        out.append((tid, shard(full(tid, *dts[tid]), f)))
    return out


def check_loaded(dest, plan, participant_id, model=MODEL):
    by_id = {tid: (shape, dt) for tid, shape, dt, _ in model}
    for f in plan.target_fragments(participant_id):
        shape, dt = by_id[f.tensor_id]
        want = shard(full(f.tensor_id, shape, dt), f)
        got = dest[f.placement_fragment_id]
        if not torch.equal(got.view(-1).view(torch.uint8), want.view(-1).view(torch.uint8)):
            raise AssertionError(f"{f.placement_fragment_id} differs")


def destinations(plan, participant_id, model=MODEL):
    dts = {tid: dt for tid, _, dt, _ in model}
    return {f.placement_fragment_id: torch.full(f.local_shape, 7,
                                                dtype=getattr(torch, dts[f.tensor_id]))
            for f in plan.target_fragments(participant_id)}


def _store(master):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master)
    if rc != 0:
        raise SystemExit(f"setup returned {rc}")
    return s


def _say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv):
    mode, master, revision, tp, rank = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5])
    store = _store(master)
    try:
        if mode == "write":
            writer = store.begin_weight_snapshot(descriptor(revision),
                                                 adapter(tp, rank, revision))
            for tid, t in rank_tensors(tp, rank, revision=revision):
                writer.write_tensor(tid, t)
            _say({"written": sorted(s.object_key for s in writer._written.values())})
            if "--hang" in argv:
                select.select([sys.stdin], [], [], 120)
                return
            if "--commit-on-line" in argv:  # the test says when every rank has written
                sys.stdin.readline()
            timeout = 60.0
            if "--commit-timeout" in argv:
                timeout = float(argv[argv.index("--commit-timeout") + 1])
            m = writer.commit(timeout=timeout)
            _say({"manifest": m.manifest_key, "digest": m.manifest_digest})
            select.select([sys.stdin], [], [], 120)
        elif mode == "read":
            ws = WeightStore(store)
            m = ws.load_manifest(descriptor(revision))
            target = placement(tp, revision=revision)
            pid = tp_participant(rank)
            plan = ws.plan_load(m, target)
            dest = destinations(plan, pid)
            n = ws.load(plan, dest, participant_id=pid)
            check_loaded(dest, plan, pid)
            _say({"ok": True, "bytes": n})
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv)

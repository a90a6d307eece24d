"""Model weights in Mooncake Store: written at TP=4, read back at TP=2.

Four writers (one per trainer rank; here in one process) store a snapshot
described with upstream's placement types; a reader at another tensor
parallelism plans and loads its shards with ranged reads.  Needs a running
mooncake_master (the address in setup below) and PyTorch.
"""
import torch

from mooncake.reshard.weight import (WeightSnapshotAdapter, WeightSnapshotDescriptor,
                                     WeightStore, tp_placement)
from mooncake.store import MooncakeDistributedStore

store = MooncakeDistributedStore()
rc = store.setup("localhost", "P2PHANDSHAKE", 256 * 1024 * 1024, 64 * 1024 * 1024,
                 "tcp", "", "localhost:50051")
if rc != 0:
    raise SystemExit(f"setup failed: {rc}")

# The model: (tensor id, shape, dtype, bytes per element, split dim or None).
MODEL = [("qkv", (96, 64), "bfloat16", 2, 0),     # column-parallel: rows split
         ("o", (64, 96), "bfloat16", 2, 1),       # row-parallel: columns split
         ("norm", (64,), "float32", 4, None)]     # replicated
full = {tid: torch.randn(shape).to(getattr(torch, dt)) for tid, shape, dt, _, _ in MODEL}
ident = dict(resource_id="hello-model", revision="step-1", weight_generation=0)
desc = WeightSnapshotDescriptor("hello-model", "step-1", 0)
ws = WeightStore(store)


def box(t, f):
    return t[tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))]


# Writers: each TP=4 rank writes its own shards; a replica is stored once.
source = tp_placement(MODEL, 4, **ident)
writers = []
for part in source.parts:
    w = ws.begin_weight_snapshot(desc, WeightSnapshotAdapter(source, part.participant_id))
    for f in part.fragments:
        w.write_tensor(f.tensor_id, box(full[f.tensor_id], f).contiguous())
    writers.append(w)
for w in writers[1:]:
    w.seal()
manifest = writers[0].commit()
print("stored fragments:", len(manifest.fragments))

# A reader at TP=2: participant "tp001" loads its shards.
target = tp_placement(MODEL, 2, **ident)
plan = ws.plan_load(ws.load_manifest(desc), target)
dest = {f.placement_fragment_id: torch.empty(f.local_shape, dtype=full[f.tensor_id].dtype)
        for f in plan.target_fragments("tp001")}
n = ws.load(plan, dest, participant_id="tp001")
ok = all(torch.equal(dest[f.placement_fragment_id], box(full[f.tensor_id], f))
         for f in plan.target_fragments("tp001"))
print("loaded at TP=2:", n, "bytes, bit-exact:", ok)
ws.remove_snapshot(desc)
store.close()

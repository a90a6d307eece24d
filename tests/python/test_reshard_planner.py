# SPDX-License-Identifier: Apache-2.0
"""mooncake.reshard.weight planner against upstream's fact sheet
(../shared/reference/upstream-reshard.md §11): TransferRegion geometry (the
documented worked example), plans for TP, PP, EP and DP layouts and from a
stored WeightManifest, the source-choice rule, ordering, executors, routes,
limits and every refusal.  Expected boxes are written out or computed here
independently, and every plan is also executed on bytes (numpy arrays of a
known global tensor): each target fragment must come out bit-exact.  No
daemon is involved."""
import dataclasses
import pickle
from math import prod

import numpy as np
import pytest

from mooncake.reshard.weight import (LogicalTransferPlan, OwnershipAxis, ParallelRank,
                                     ParallelTopology, PlacementExecutorPlan,
                                     PlacementFragment, PlanningLimits, ReplicatedAxis,
                                     SplitAxis, StoredFragment, TensorDescriptor,
                                     TopologyParticipant, TransferRegion, WeightManifest,
                                     WeightPlacementManifest, plan_placement_transfer,
                                     plan_placement_transfer_to_local_target,
                                     plan_stored_transfer_to_target_placement)

R = ParallelRank
GROUP = "weights/default/model/rev/1"


def tensor(tid, shape, axes, dtype="int16", itemsize=2, **kw):
    shard = tuple(sorted(a.dim for a in axes if isinstance(a, SplitAxis)))
    return TensorDescriptor(tid, shape, dtype, itemsize, shard, "fp:" + dtype, axes,
                            kw.get("layer_id"), kw.get("expert_id"))


def topology(tp=1, pp=1, ep=1, dp=1, ranks=None):
    if ranks is None:
        ranks = [R(dp=d, pp=p, ep=e, tp=t) for d in range(dp) for p in range(pp)
                 for e in range(ep) for t in range(tp)]
    return ParallelTopology(tp_size=tp, pp_size=pp, ep_size=ep, dp_size=dp,
                            participants=[TopologyParticipant(
                                f"dp{r.dp}-pp{r.pp}-ep{r.ep}-tp{r.tp}", r) for r in ranks])


def frag(t, off, shape, rank, **kw):
    return PlacementFragment(t.tensor_id, off, shape, prod(shape) * t.itemsize, rank, **kw)


def placement(topo, tensors, frags, **kw):
    args = dict(resource_id="model", revision="rev", weight_generation=1,
                placement_set_id=kw.pop("placement_set_id", "set"))
    args.update(kw)
    return WeightPlacementManifest.from_fragments(topology=topo, tensors=tensors,
                                                  fragments=frags, **args)


def split(t, dim, n, **rank):
    """The even split of t along dim over n ranks of axis rank-kind 'kind'."""
    kind = rank.pop("kind", "tp")
    step = t.global_shape[dim] // n
    out = []
    for i in range(n):
        off = [0] * t.ndim
        shape = list(t.global_shape)
        off[dim], shape[dim] = i * step, step
        out.append(frag(t, tuple(off), tuple(shape), R(**{kind: i, **rank})))
    return out


def replicated(t, kind, n, **rank):
    return [frag(t, (0,) * t.ndim, t.global_shape, R(**{kind: i, **rank})) for i in range(n)]


# --- executing a plan on bytes ----------------------------------------------

def global_array(t):
    n = prod(t.global_shape)
    return (np.arange(n, dtype=np.int64) * 7919 + hash(t.tensor_id) % 1000).astype(
        np.int16).reshape(t.global_shape)


def box(a, f):
    return a[tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))]


def execute(plan, tensors, stored=False):
    """Run every region's segments from source bytes into fresh target
    buffers; return target fragment id -> bytes."""
    arrays = {t.tensor_id: global_array(t) for t in tensors}
    if stored:
        objects = {}
        for f in plan.source_manifest.fragments:
            data = box(arrays[f.tensor_id], f).tobytes()
            buf = objects.setdefault(f.object_key, bytearray(f.object_offset + len(data)))
            if len(buf) < f.object_offset + len(data):
                buf.extend(bytes(f.object_offset + len(data) - len(buf)))
            buf[f.object_offset:f.object_offset + len(data)] = data
    out = {}
    for op in plan.operations:
        dst = out.setdefault(op.target.fragment_id, bytearray(op.target.nbytes))
        if stored:
            src, base = objects[op.source.object_key], op.source.object_offset
        else:
            src, base = box(arrays[op.tensor_id], op.source).tobytes(), 0
        for so, do, n in op.iter_segments(max_segments=1 << 20):
            dst[do:do + n] = src[base + so:base + so + n]
    return out, arrays


def assert_bit_exact(plan, tensors, stored=False):
    out, arrays = execute(plan, tensors, stored)
    targets = {fid for ex in plan.target_executors for fid in ex.placement_fragment_ids}
    by_id = {f.fragment_id: f for f in plan.target_placement.fragments}
    assert set(out) == targets
    for fid in targets:
        f = by_id[fid]
        assert bytes(out[fid]) == box(arrays[f.tensor_id], f).tobytes(), fid
    assert plan.total_bytes == sum(by_id[fid].nbytes for fid in targets)


def overlaps(plan):
    """(tensor, source rank or key, source box, target rank, overlap box)."""
    return sorted((op.tensor_id,
                   op.source.object_key if isinstance(op.source, StoredFragment)
                   else op.source.rank.sort_key(),
                   op.source.global_offset, op.target.rank.sort_key(),
                   op.overlap_offset, op.overlap_shape) for op in plan.operations)


# --- TransferRegion ---------------------------------------------------------

def test_transfer_region_documented_example():
    t = tensor("t", (4, 6, 8), ())
    src = PlacementFragment("t", (1, 0, 0), (2, 6, 8), 2 * 6 * 8 * 2, R())
    dst = PlacementFragment("t", (0, 2, 0), (4, 3, 8), 4 * 3 * 8 * 2, R(tp=1))
    r = TransferRegion("t", src, dst, (1, 2, 0), (2, 3, 8), 32, 48, 48, (2,), (96,), (48,))
    assert r.segment_count == 2 and r.total_bytes == 96
    assert (r.source_offset, r.target_offset, r.nbytes, r.repeat) == (32, 48, 48, 2)
    assert (r.source_stride, r.target_stride) == (96, 48)
    assert list(r.iter_segments(max_segments=2)) == [(32, 48, 48), (128, 96, 48)]
    with pytest.raises(ValueError, match="transfer region exceeds max_segments: 2 > 1"):
        list(r.iter_segments(max_segments=1))
    with pytest.raises(ValueError, match="transfer region loop geometry is not canonical"):
        TransferRegion("t", src, dst, (1, 2, 0), (2, 3, 8), 32, 48, 16, (2, 3), (96, 16),
                       (48, 16))
    with pytest.raises(ValueError, match="transfer region exceeds source fragment"):
        TransferRegion("t", src, dst, (0, 2, 0), (2, 3, 8), 0, 0, 48, (2,), (96,), (48,))
    # extents of 1 are kept as loop counts; several loops give no single stride
    s2 = PlacementFragment("t", (0, 0, 0), (4, 6, 8), 4 * 6 * 8 * 2, R())
    d2 = PlacementFragment("t", (0, 0, 0), (4, 6, 4), 4 * 6 * 4 * 2, R(tp=1))
    r2 = TransferRegion("t", s2, d2, (1, 0, 0), (1, 6, 4), 96, 48, 8, (1, 6), (96, 16),
                        (48, 8))
    with pytest.raises(ValueError, match="N-D transfer region has multiple source strides"):
        r2.source_stride
    # a 1-D copy: no loops, stride 0
    s1 = PlacementFragment("t", (0,), (8,), 16, R())
    d1 = PlacementFragment("t", (4,), (4,), 8, R(tp=1))
    r1 = TransferRegion("t", s1, d1, (4,), (4,), 8, 0, 8, (), (), ())
    assert (r1.source_stride, r1.segment_count) == (0, 1)
    assert t  # descriptor shape matches the example


def test_planning_limits():
    assert PlanningLimits() == PlanningLimits(1_000_000, 1_000_000, 10_000_000)
    for kw in ({"max_transfer_regions": 0}, {"max_segments_per_region": True},
               {"max_total_lowered_segments": 1.5}):
        with pytest.raises(ValueError, match="planning limit .* must be a positive integer"):
            PlanningLimits(**kw)


# --- TP ---------------------------------------------------------------------

def tp_model():
    rows = tensor("qkv", (8, 4), (SplitAxis("tp", 0),))
    cols = tensor("o", (4, 8), (SplitAxis("tp", 1),))
    norm = tensor("norm", (4,), (ReplicatedAxis("tp"),))
    return [rows, cols, norm]


def tp_placement(tp, **kw):
    rows, cols, norm = tp_model()
    return placement(topology(tp=tp), [rows, cols, norm],
                     split(rows, 0, tp) + split(cols, 1, tp) + replicated(norm, "tp", tp), **kw)


def test_tp4_to_tp2_boxes_and_bytes():
    src, tgt = tp_placement(4), tp_placement(2, placement_set_id="target")
    plan = plan_placement_transfer(src, tgt)
    assert isinstance(plan, LogicalTransferPlan)
    assert plan.source_placement_id == src.placement_id
    assert plan.target_placement_id == tgt.placement_id
    assert plan.source_manifest is None and plan.source_manifest_identity is None
    want = []
    for t in range(2):                    # target tp t reads source 2t and 2t+1
        for s in (2 * t, 2 * t + 1):
            want.append(("qkv", (0, 0, 0, s), (2 * s, 0), (0, 0, 0, t), (2 * s, 0), (2, 4)))
            want.append(("o", (0, 0, 0, s), (0, 2 * s), (0, 0, 0, t), (0, 2 * s), (4, 2)))
        # the replicated norm: the lowest (dp, pp, ep, tp) holder, tp 0
        want.append(("norm", (0, 0, 0, 0), (0,), (0, 0, 0, t), (0,), (4,)))
    assert overlaps(plan) == sorted(want)
    assert_bit_exact(plan, tp_model())
    # column splits are strided: rows of 2 elements, 4 loops
    o_ops = [op for op in plan.operations if op.tensor_id == "o"]
    assert all(op.inner_bytes == 4 and op.outer_loop_counts == (4,) for op in o_ops)
    assert all(op.source_strides == (4,) and op.target_strides == (8,) for op in o_ops)
    # ordering: by target fragment id, target offset, source id, source offset
    keys = [(op.target.fragment_id, op.target_base_offset, op.source.fragment_id,
             op.source_base_offset) for op in plan.operations]
    assert keys == sorted(keys)
    # executors: by rank; sources only those that are read
    assert [e.rank for e in plan.target_executors] == [R(tp=0), R(tp=1)]
    assert [e.rank for e in plan.source_executors] == [R(tp=i) for i in range(4)]
    ex = plan.target_executors[1]
    idx = plan.operation_indices_for_executor(ex, "target")
    assert {plan.operations[i].target.rank for i in idx} == {R(tp=1)}
    assert len(idx) == 5
    with pytest.raises(ValueError, match="invalid executor side"):
        plan.operation_indices_for_executor(ex, "middle")
    with pytest.raises(ValueError, match="executor is not part of this logical plan"):
        plan.operation_indices_for_executor(ex, "source")
    assert [t.tensor_id for t in plan.target_tensors] == ["norm", "o", "qkv"]


def test_tp2_to_tp4_and_local_target():
    src, tgt = tp_placement(2), tp_placement(4, placement_set_id="t4")
    plan = plan_placement_transfer(src, tgt)
    assert_bit_exact(plan, tp_model())
    local = plan_placement_transfer_to_local_target(src, tgt, "dp0-pp0-ep0-tp3")
    assert [e.participant_id for e in local.target_executors] == ["dp0-pp0-ep0-tp3"]
    assert {op.target.rank for op in local.operations} == {R(tp=3)}
    assert_bit_exact(local, tp_model())
    with pytest.raises(ValueError, match="target_participant_id is required for a "
                                         "multi-participant target"):
        plan_placement_transfer_to_local_target(src, tgt)
    with pytest.raises(ValueError, match="unknown target participant: nobody"):
        plan_placement_transfer_to_local_target(src, tgt, "nobody")
    # a single-participant target needs no id, and may hold a subset of tensors
    rows = tp_model()[0]
    one = placement(topology(), [rows], [frag(rows, (0, 0), (8, 4), R())],
                    placement_set_id="one")
    sub = plan_placement_transfer_to_local_target(src, one)
    assert_bit_exact(sub, tp_model())
    with pytest.raises(ValueError, match="target manifests are missing tensors: norm, o"):
        plan_placement_transfer(src, one)


def test_local_target_without_fragments():
    rows = tp_model()[0]
    src = placement(topology(), [rows], [frag(rows, (0, 0), (8, 4), R())])
    ranks = [R(dp=0), R(dp=1)]
    rep = tensor("qkv", (8, 4), (OwnershipAxis("dp"), SplitAxis("tp", 0)))
    tgt = placement(topology(dp=2, ranks=ranks), [rep], [frag(rep, (0, 0), (8, 4), R())],
                    placement_set_id="partial")
    with pytest.raises(ValueError, match="local target manifest has no fragments"):
        plan_placement_transfer_to_local_target(src, tgt, "dp1-pp0-ep0-tp0")


# --- PP -----------------------------------------------------------------------

def pp_model():
    return [tensor(f"layers.{i}.w", (4, 4), (OwnershipAxis("pp"), SplitAxis("tp", 0)),
                   layer_id=i) for i in range(4)]


def test_pp2_tp2_to_pp1_tp1_and_routes():
    layers = pp_model()
    frags = []
    for i, t in enumerate(layers):        # layers 0,1 on stage 0; 2,3 on stage 1
        frags += [frag(t, (2 * k, 0), (2, 4), R(pp=i // 2, tp=k), pipeline_stage_id=i // 2)
                  for k in range(2)]
    src = placement(topology(tp=2, pp=2), layers, frags)
    tgt = placement(topology(), layers, [frag(t, (0, 0), (4, 4), R()) for t in layers],
                    placement_set_id="single")
    plan = plan_placement_transfer(src, tgt)
    want = sorted((t.tensor_id, (0, i // 2, 0, k), (2 * k, 0), (0, 0, 0, 0), (2 * k, 0), (2, 4))
                  for i, t in enumerate(layers) for k in range(2))
    assert overlaps(plan) == want
    assert_bit_exact(plan, layers)
    routes = plan.pipeline_routes
    assert [(r.source_pp, r.source_pipeline_stage_id, r.target_pp,
             r.target_pipeline_stage_id) for r in routes] == [(0, 0, 0, None), (1, 1, 0, None)]
    assert sorted(i for r in routes for i in r.operation_indices) == list(
        range(len(plan.operations)))
    # and back: PP1 -> PP2 x TP2
    back = plan_placement_transfer(tgt, src)
    assert_bit_exact(back, layers)
    assert {op.source.rank for op in back.operations} == {R()}


# --- EP -----------------------------------------------------------------------

def test_ep2_to_ep1_tp2_and_owned_experts():
    experts = tensor("experts.w1", (4, 6), (SplitAxis("ep", 0), ReplicatedAxis("tp")))
    e3 = tensor("experts.3.w2", (6,), (OwnershipAxis("ep"), ReplicatedAxis("tp")), expert_id=3)
    src_frags = [frag(experts, (2 * e, 0), (2, 6), R(ep=e, tp=t))
                 for e in range(2) for t in range(2)]
    src_frags += [frag(e3, (0,), (6,), R(ep=1, tp=t)) for t in range(2)]
    src = placement(topology(ep=2, tp=2), [experts, e3], src_frags)
    # target: one EP rank, experts split along columns over tp=2 instead
    t_experts = tensor("experts.w1", (4, 6), (SplitAxis("tp", 1),))
    t_e3 = tensor("experts.3.w2", (6,), (ReplicatedAxis("tp"),), expert_id=3)
    tgt = placement(topology(tp=2), [t_experts, t_e3],
                    split(t_experts, 1, 2) + replicated(t_e3, "tp", 2),
                    placement_set_id="ep1")
    plan = plan_placement_transfer(src, tgt)
    want = []
    for t in range(2):
        for e in range(2):                # replica on tp 0 is the representative
            want.append(("experts.w1", (0, 0, e, 0), (2 * e, 0), (0, 0, 0, t),
                         (2 * e, 3 * t), (2, 3)))
        want.append(("experts.3.w2", (0, 0, 1, 0), (0,), (0, 0, 0, t), (0,), (6,)))
    assert overlaps(plan) == sorted(want)
    assert_bit_exact(plan, [experts, e3])


# --- DP -----------------------------------------------------------------------

def dp_placement(dp, tp, **kw):
    w = tensor("w", (8, 2), (ReplicatedAxis("dp"), SplitAxis("tp", 0)))
    frags = [f for d in range(dp) for f in split(w, 0, tp, dp=d)]
    return placement(topology(dp=dp, tp=tp), [w], frags, **kw), [w]


def test_dp_replicas_chosen_by_target_dp():
    src, model = dp_placement(2, 2)
    tgt, _ = dp_placement(3, 1, placement_set_id="dp3")
    plan = plan_placement_transfer(src, tgt)
    # target dp d reads source replica sorted([0, 1])[d % 2]
    for op in plan.operations:
        assert op.source.rank.dp == op.target.rank.dp % 2
    assert len(plan.operations) == 6
    assert_bit_exact(plan, model)
    assert [e.rank.dp for e in plan.target_executors] == [0, 1, 2]


def test_dp_owned_tensor_single_owner_and_ambiguity():
    owned = tensor("dp_local", (4,), (OwnershipAxis("dp"),))
    rep = tensor("w", (4,), (ReplicatedAxis("dp"),))
    src = placement(topology(dp=2), [owned, rep],
                    [frag(owned, (0,), (4,), R(dp=1))] + replicated(rep, "dp", 2))
    tgt = placement(topology(), [tensor("dp_local", (4,), ()), tensor("w", (4,), ())],
                    [frag(owned, (0,), (4,), R()), frag(rep, (0,), (4,), R())],
                    placement_set_id="one")
    plan = plan_placement_transfer(src, tgt)
    assert {op.source.rank.dp for op in plan.operations if op.tensor_id == "dp_local"} == {1}
    assert_bit_exact(plan, [owned, rep])
    two = placement(topology(dp=2), [owned], [frag(owned, (0,), (4,), R(dp=d))
                                              for d in range(2)])
    tgt2 = placement(topology(), [tensor("dp_local", (4,), ())],
                     [frag(owned, (0,), (4,), R())], placement_set_id="one")
    with pytest.raises(ValueError, match="DP-owned source tensor has ambiguous declared "
                                         "owners"):
        plan_placement_transfer(two, tgt2)


# --- stored source ------------------------------------------------------------

def stored_tp4():
    """A WeightManifest of the TP=4 model: every box stored once, packed
    into one object per source rank."""
    src = tp_placement(4)
    frags, offsets = [], {}
    for f in sorted(src.fragments, key=lambda f: (f.tensor_id, f.global_offset)):
        if f.tensor_id == "norm" and f.rank.tp != 0:
            continue                      # the replicated norm is stored once
        key = f"{GROUP}/payload/{f.rank.tp}"
        off = offsets.get(key, 0)
        offsets[key] = off + f.nbytes
        frags.append(StoredFragment(f.placement_fragment_id, f.tensor_id, f.global_offset,
                                    f.local_shape, key, off, f.nbytes))
    tensors = tuple(sorted(src.tensors, key=lambda t: t.tensor_id))
    return WeightManifest("default", "model", "rev", 1, GROUP, GROUP + "/manifest", tensors,
                          tuple(frags), "2026-08-19T00:00:00Z")


def test_stored_tp4_to_tp2():
    m = stored_tp4()
    tgt = tp_placement(2, placement_set_id="target")
    plan = plan_stored_transfer_to_target_placement(m, tgt)
    assert plan.source_placement is None and plan.source_placement_id is None
    assert plan.source_manifest_identity == m.manifest_identity
    assert plan.source_executors == ()
    assert [t.tensor_id for t in plan.source_tensors] == ["norm", "o", "qkv"]
    want = []
    for t in range(2):
        for s in (2 * t, 2 * t + 1):
            key = f"{GROUP}/payload/{s}"
            want.append(("qkv", key, (2 * s, 0), (0, 0, 0, t), (2 * s, 0), (2, 4)))
            want.append(("o", key, (0, 2 * s), (0, 0, 0, t), (0, 2 * s), (4, 2)))
        want.append(("norm", f"{GROUP}/payload/0", (0,), (0, 0, 0, t), (0,), (4,)))
    assert overlaps(plan) == sorted(want)
    assert_bit_exact(plan, tp_model(), stored=True)
    routes = plan.pipeline_routes
    assert [(r.source_pp, r.source_pipeline_stage_id) for r in routes] == [(None, None)]
    assert plan.validate_source_manifest_snapshot() == m
    # replace and pickle re-validate
    assert pickle.loads(pickle.dumps(plan)) == plan
    with pytest.raises(ValueError, match="requires exactly one source provenance"):
        dataclasses.replace(plan, source_placement=tgt)
    with pytest.raises(ValueError, match="logical plan source tensor catalog differs"):
        dataclasses.replace(plan, source_tensors=plan.source_tensors[1:])
    with pytest.raises(ValueError, match="logical target fragment is not fully covered"):
        dataclasses.replace(plan, operations=plan.operations[1:])


def test_placement_plan_snapshot_and_revalidation():
    plan = plan_placement_transfer(tp_placement(4), tp_placement(2, placement_set_id="t"))
    assert plan.validate_source_placement_snapshot() == plan.source_placement
    assert pickle.loads(pickle.dumps(plan)) == plan
    other = tp_placement(2, placement_set_id="other")     # same fragments, another id
    with pytest.raises(ValueError, match="target executor does not match"):
        dataclasses.replace(plan, target_placement=other)
    moved = tp_placement(4, placement_set_id="t")
    with pytest.raises(ValueError, match="target placement fragment snapshots differ"):
        dataclasses.replace(plan, target_placement=moved)
    with pytest.raises(ValueError, match="requires exactly one source provenance"):
        dataclasses.replace(plan, source_placement=None)
    bad = PlacementExecutorPlan(plan.target_placement_id, "dp0-pp0-ep0-tp0", R(), ("x",))
    with pytest.raises(ValueError, match="target executor does not match"):
        dataclasses.replace(plan, target_executors=(bad,))
    with pytest.raises(ValueError, match="placement executor identifiers must not be empty"):
        PlacementExecutorPlan("", "p", R(), ())
    with pytest.raises(ValueError, match="duplicate fragment IDs"):
        PlacementExecutorPlan("sha256:x", "p", R(), ("a", "a"))


# --- refusals -----------------------------------------------------------------

def test_identity_and_catalog_refusals():
    src = tp_placement(2)
    for kw, message in ((dict(revision="other"), "source and target revision differ"),
                        (dict(resource_id="other"), "source and target resource_id differ"),
                        (dict(weight_generation=2), "source and target weight_generation "
                                                    "differ")):
        with pytest.raises(ValueError, match=message):
            plan_placement_transfer(src, tp_placement(2, **kw))
    rows, cols, norm = tp_model()
    extra = tensor("extra", (2,), (ReplicatedAxis("tp"),))
    more = placement(topology(tp=2), [rows, cols, norm, extra],
                     split(rows, 0, 2) + split(cols, 1, 2) + replicated(norm, "tp", 2)
                     + replicated(extra, "tp", 2))
    with pytest.raises(ValueError, match="target manifests contain unknown tensors: extra"):
        plan_placement_transfer(src, more)
    relaid = tensor("norm", (4,), (ReplicatedAxis("tp"),), dtype="int16")
    relaid = dataclasses.replace(relaid, layout_fingerprint="fp:other")
    other = placement(topology(tp=2), [rows, cols, relaid],
                      split(rows, 0, 2) + split(cols, 1, 2) + replicated(relaid, "tp", 2))
    with pytest.raises(ValueError, match="layout mismatch for tensor norm"):
        plan_placement_transfer(src, other)
    wide = dataclasses.replace(norm, layer_id=5)
    other = placement(topology(tp=2), [rows, cols, wide],
                      split(rows, 0, 2) + split(cols, 1, 2) + replicated(wide, "tp", 2))
    with pytest.raises(ValueError, match="tensor descriptor mismatch: norm"):
        plan_placement_transfer(src, other)
    # different axes are fine: that is resharding
    cols_rows = tensor("o", (4, 8), (SplitAxis("tp", 0),))
    other = placement(topology(tp=2), [rows, cols_rows, norm],
                      split(rows, 0, 2) + split(cols_rows, 0, 2) + replicated(norm, "tp", 2))
    assert_bit_exact(plan_placement_transfer(src, other), tp_model())
    with pytest.raises(ValueError, match="planning_limits must be PlanningLimits"):
        plan_placement_transfer(src, src, planning_limits=5)


def test_limits_fail_before_materialization():
    src, tgt = tp_placement(4), tp_placement(2, placement_set_id="t")
    plan = plan_placement_transfer(src, tgt)
    n = len(plan.operations)
    segments = max(op.segment_count for op in plan.operations)
    total = sum(op.segment_count for op in plan.operations)
    plan_placement_transfer(src, tgt, planning_limits=PlanningLimits(n, segments, total))
    with pytest.raises(ValueError, match=f"logical transfer plan exceeds "
                                         f"max_transfer_regions: {n - 1}"):
        plan_placement_transfer(src, tgt, planning_limits=PlanningLimits(
            max_transfer_regions=n - 1))
    with pytest.raises(ValueError, match=f"logical transfer region exceeds "
                                         f"max_segments_per_region: {segments} > "
                                         f"{segments - 1}"):
        plan_placement_transfer(src, tgt, planning_limits=PlanningLimits(
            max_segments_per_region=segments - 1))
    with pytest.raises(ValueError, match="logical transfer plan exceeds "
                                         "max_total_lowered_segments"):
        plan_placement_transfer(src, tgt, planning_limits=PlanningLimits(
            max_total_lowered_segments=total - 1))
    with pytest.raises(ValueError, match="logical transfer plan exceeds "
                                         "max_total_lowered_segments"):
        plan_stored_transfer_to_target_placement(stored_tp4(), tgt, planning_limits=(
            PlanningLimits(max_total_lowered_segments=total - 1)))


def test_dp_replicas_tiled_differently_are_refused():
    w = tensor("w", (8, 2), (ReplicatedAxis("dp"), SplitAxis("tp", 0)))
    frags = split(w, 0, 2, dp=0) + [frag(w, (0, 0), (6, 2), R(dp=1)),
                                    frag(w, (6, 0), (2, 2), R(dp=1, tp=1))]
    src = placement(topology(dp=2, tp=2), [w], frags)
    tgt, _ = dp_placement(2, 1, placement_set_id="t")
    with pytest.raises(ValueError, match="tiled differently"):
        plan_placement_transfer(src, tgt)


# --- lowering to the store's ranged reads -------------------------------------

def test_lowering_stored_plan_to_ranged_reads():
    from mooncake.reshard.weight.store_plan import RangedRead, lower_plan, lower_region
    m = stored_tp4()
    tgt = tp_placement(2, placement_set_id="target")
    plan = plan_stored_transfer_to_target_placement(m, tgt)
    reads = lower_plan(plan)
    assert sorted(reads) == ["dp0-pp0-ep0-tp0", "dp0-pp0-ep0-tp1"]
    # executing the reads on the stored objects gives bit-exact targets
    arrays = {t.tensor_id: global_array(t) for t in tp_model()}
    objects = {}
    for f in m.fragments:
        data = box(arrays[f.tensor_id], f).tobytes()
        buf = objects.setdefault(f.object_key, bytearray())
        buf.extend(bytes(max(0, f.object_offset + len(data) - len(buf))))
        buf[f.object_offset:f.object_offset + len(data)] = data
    by_id = {f.fragment_id: f for f in tgt.fragments}
    out = {}
    for pid, rs in reads.items():
        for r in rs:
            assert isinstance(r, RangedRead)
            dst = out.setdefault(r.target_fragment_id,
                                 bytearray(by_id[r.target_fragment_id].nbytes))
            src_offs, dst_offs = r.expand()
            for so, do in zip(src_offs.tolist(), dst_offs.tolist()):
                dst[do:do + r.run_bytes] = objects[r.key][so:so + r.run_bytes]
    assert set(out) == set(by_id)
    for fid, f in by_id.items():
        assert bytes(out[fid]) == box(arrays[f.tensor_id], f).tobytes()
    # the documented field mapping, on one strided region
    op = next(op for op in plan.operations if op.tensor_id == "o")
    r = lower_region(op)
    assert r == RangedRead("o", op.target.placement_fragment_id, op.source.object_key,
                           op.source.object_offset + op.source_base_offset,
                           op.target_base_offset, op.inner_bytes, op.outer_loop_counts,
                           op.source_strides, op.target_strides)
    one = lower_plan(plan, ["dp0-pp0-ep0-tp1"])
    assert list(one) == ["dp0-pp0-ep0-tp1"]
    with pytest.raises(ValueError, match="unknown target participant: zz"):
        lower_plan(plan, ["zz"])
    small = dataclasses.replace(plan, planning_limits=PlanningLimits(
        max_total_lowered_segments=plan.operations[0].segment_count))
    with pytest.raises(ValueError, match="exceeds max_total_lowered_segments"):
        lower_plan(small)
    with pytest.raises(ValueError, match="only plans from a stored source"):
        lower_plan(plan_placement_transfer(tp_placement(4), tgt))


# --- uneven splits, 3-D tensors, every pair of TP sizes ------------------------

def uneven(length, n):
    """The first length % n ranks one longer (30 over 4: 8, 8, 7, 7)."""
    base, extra = divmod(length, n)
    sizes = [base + (i < extra) for i in range(n)]
    return [sum(sizes[:i]) for i in range(n)], sizes


def uneven_model():
    return [tensor("rows", (30, 6), (SplitAxis("tp", 0),)),
            tensor("cols", (5, 30), (SplitAxis("tp", 1),)),
            tensor("cube", (3, 14, 5), (SplitAxis("tp", 1),))]


def uneven_placement(tp):
    frags = []
    for t in uneven_model():
        dim = t.shard_dims[0]
        offs, sizes = uneven(t.global_shape[dim], tp)
        for r in range(tp):
            off = [0] * t.ndim
            shape = list(t.global_shape)
            off[dim], shape[dim] = offs[r], sizes[r]
            frags.append(frag(t, tuple(off), tuple(shape), R(tp=r)))
    return placement(topology(tp=tp), uneven_model(), frags, placement_set_id=f"tp{tp}")


@pytest.mark.parametrize("src_tp, tgt_tp", [(4, 2), (2, 4), (3, 4), (4, 3), (1, 5), (5, 1)])
def test_uneven_tp_reshards_bit_exact(src_tp, tgt_tp):
    src, tgt = uneven_placement(src_tp), uneven_placement(tgt_tp)
    plan = plan_placement_transfer(src, tgt)
    assert_bit_exact(plan, uneven_model())
    # each target fragment's regions tile it exactly, independently computed:
    # the source boxes met are exactly those whose interval on the split
    # dimension intersects the target's
    for op in plan.operations:
        dim = [t for t in uneven_model() if t.tensor_id == op.tensor_id][0].shard_dims[0]
        s0, sn = op.source.global_offset[dim], op.source.local_shape[dim]
        t0, tn = op.target.global_offset[dim], op.target.local_shape[dim]
        assert op.overlap_offset[dim] == max(s0, t0)
        assert op.overlap_shape[dim] == min(s0 + sn, t0 + tn) - max(s0, t0)
    count = 0
    for t in uneven_model():
        dim = t.shard_dims[0]
        so, ss = uneven(t.global_shape[dim], src_tp)
        to, ts = uneven(t.global_shape[dim], tgt_tp)
        count += sum(1 for a, an in zip(so, ss) for b, bn in zip(to, ts)
                     if max(a, b) < min(a + an, b + bn))
    assert len(plan.operations) == count

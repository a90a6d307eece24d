# SPDX-License-Identifier: Apache-2.0
"""The planner core in libmooncake (mooncake/reshard.h) against the Python
reference planner: on random TP x PP x DP geometries (uneven splits, rank
orders permuted, boxes tiled along free dimensions, replicated tensors, 1-3
dimensions, several element sizes) plan_placement_transfer,
plan_placement_transfer_to_local_target and
plan_stored_transfer_to_target_placement give the same plans, operation by
operation, the same executors and the same refusals under small limits;
their lowered, coalesced reads rebuild every target bit-exact in no more
reads than the reference's runs.  No daemon is involved."""
import dataclasses
import pickle
import random
from math import prod

import numpy as np
import pytest

from mooncake.reshard.weight import (OwnershipAxis, ParallelRank, ParallelTopology,
                                     PlacementFragment, PlanningLimits, ReplicatedAxis,
                                     SplitAxis, StoredFragment, TensorDescriptor,
                                     TopologyParticipant, WeightManifest,
                                     WeightPlacementManifest, plan_placement_transfer,
                                     plan_placement_transfer_to_local_target,
                                     plan_stored_transfer_to_target_placement)
from mooncake.reshard.weight import planner
from mooncake.reshard.weight.store_writer import writer_set

R = ParallelRank
GROUP = "weights/default/model/rev/1"


@pytest.fixture(autouse=True)
def _native():
    assert planner.native_available(), "the build's mooncake.capi has the planner core"


def cuts(rng, extent, n):
    """n non-empty intervals covering [0, extent), uneven."""
    points = sorted(rng.sample(range(1, extent), n - 1)) if n > 1 else []
    edges = [0] + points + [extent]
    return [(edges[i], edges[i + 1] - edges[i]) for i in range(n)]


def random_model(rng, n):
    """(tensor id, shape, itemsize) of n tensors of 1-3 dimensions."""
    out = []
    for i in range(n):
        nd = rng.randint(1, 3)
        shape = tuple(rng.randint(4, 9) for _ in range(nd))
        tid = f"t{i:02d}" if i % 2 == 0 else f"layers/{i}.w\u00e9\x00"  # ids are free text
        out.append((tid, shape, rng.choice((1, 2, 4))))
    return out


def random_placement(rng, model, tp, pp, dp, name):
    """A complete placement: each tensor split along a random dimension
    over tp (or replicated), owned by one pipeline stage when pp > 1,
    replicated over dp; each rank's box maybe cut along another dimension;
    the rank order along the split is permuted."""
    ranks = [R(dp=d, pp=p, tp=t) for d in range(dp) for p in range(pp) for t in range(tp)]
    topo = ParallelTopology(tp_size=tp, pp_size=pp, ep_size=1, dp_size=dp,
                            participants=[TopologyParticipant(
                                f"{name}-dp{r.dp}-pp{r.pp}-tp{r.tp}", r) for r in ranks])
    tensors, frags = [], []
    for tid, shape, item in model:
        nd = len(shape)
        axes = []
        if dp > 1:
            axes.append(ReplicatedAxis("dp"))
        if pp > 1:
            axes.append(OwnershipAxis("pp"))
        split = rng.random() < 0.8 and tp > 1
        dim = rng.randrange(nd) if split else None
        if split:
            axes.append(SplitAxis("tp", dim))
        elif tp > 1:
            axes.append(ReplicatedAxis("tp"))
        t = TensorDescriptor(tid, shape, f"u{8 * item}", item,
                             () if dim is None else (dim,), f"fp:{tid}", axes)
        tensors.append(t)
        stage = rng.randrange(pp)
        pieces = cuts(rng, shape[dim], tp) if split else None
        order = list(range(tp))
        rng.shuffle(order)
        free = [d for d in range(nd) if d != dim]
        sub = rng.choice(free) if free and rng.random() < 0.5 else None
        sub_cuts = cuts(rng, shape[sub], rng.randint(1, 2)) if sub is not None else None
        for d in range(dp):
            for r in range(tp):
                off, shp = [0] * nd, list(shape)
                if split:
                    off[dim], shp[dim] = pieces[order[r]]
                boxes = [(tuple(off), tuple(shp))]
                if sub is not None:
                    boxes = []
                    for o, n in sub_cuts:
                        o2, s2 = list(off), list(shp)
                        o2[sub], s2[sub] = o, n
                        boxes.append((tuple(o2), tuple(s2)))
                for o, s in boxes:
                    frags.append(PlacementFragment(tid, o, s, prod(s) * item,
                                                   R(dp=d, pp=stage, tp=r)))
    return WeightPlacementManifest.from_fragments(
        resource_id="model", revision="rev", weight_generation=1,
        placement_set_id=name, topology=topo, tensors=tensors, fragments=frags)


def stored_from(rng, src):
    """The WeightManifest of a placement: the writer set, packed into a
    few objects at random offsets order."""
    chosen = sorted(writer_set(src).values(), key=lambda f: (f.tensor_id, f.global_offset))
    n_obj = rng.randint(1, 3)
    used, frags = {}, []
    for f in chosen:
        key = f"{GROUP}/payload/{rng.randrange(n_obj)}"
        off = used.get(key, 0)
        used[key] = off + f.nbytes
        frags.append(StoredFragment(f.placement_fragment_id, f.tensor_id, f.global_offset,
                                    f.local_shape, key, off, f.nbytes))
    tensors = tuple(sorted(src.tensors, key=lambda t: t.tensor_id))
    return WeightManifest("default", "model", "rev", 1, GROUP, GROUP + "/manifest", tensors,
                          tuple(frags), "2026-08-19T00:00:00Z")


def both(fn, *args, **kw):
    """(result or exception text) of the native planner and the reference."""
    out = []
    for native in (True, False):
        try:
            if native:
                out.append(fn(*args, **kw))
            else:
                with planner.reference_planner():
                    out.append(fn(*args, **kw))
        except ValueError as exc:
            out.append(f"ValueError: {exc}")
    return out


def assert_same(native, ref):
    if isinstance(ref, str) or isinstance(native, str):
        assert native == ref
        return
    assert isinstance(native.operations, planner._RegionTable)
    assert not isinstance(ref.operations, planner._RegionTable)
    assert len(native.operations) == len(ref.operations)
    for i, (a, b) in enumerate(zip(native.operations, ref.operations)):
        assert a == b, f"operation {i}"
        for f in dataclasses.fields(b):
            assert getattr(a, f.name) == getattr(b, f.name), (i, f.name)
    assert native == ref
    assert native.total_bytes == ref.total_bytes
    assert native.source_executors == ref.source_executors
    assert native.target_executors == ref.target_executors
    for side in ("source", "target"):
        for ex in getattr(ref, f"{side}_executors"):
            assert native.operation_indices_for_executor(ex, side) == \
                ref.operation_indices_for_executor(ex, side)
    assert native.pipeline_routes == ref.pipeline_routes


def geometries(seed):
    rng = random.Random(seed)
    model = random_model(rng, rng.randint(1, 5))
    s = dict(tp=rng.randint(1, 4), pp=rng.randint(1, 2), dp=rng.randint(1, 2))
    t = dict(tp=rng.randint(1, 4), pp=rng.randint(1, 2), dp=rng.randint(1, 3))
    return rng, random_placement(rng, model, name="src", **s), \
        random_placement(rng, model, name="tgt", **t)


@pytest.mark.parametrize("seed", range(40))
def test_random_placement_plans_match_reference(seed):
    rng, src, tgt = geometries(seed)
    native, ref = both(plan_placement_transfer, src, tgt)
    assert_same(native, ref)
    assert not isinstance(native, str), native
    for part in tgt.parts:
        assert_same(*both(plan_placement_transfer_to_local_target, src, tgt,
                          part.participant_id))


@pytest.mark.parametrize("seed", range(40))
def test_random_stored_plans_match_reference(seed):
    rng, src, tgt = geometries(1000 + seed)
    m = stored_from(rng, src)
    native, ref = both(plan_stored_transfer_to_target_placement, m, tgt)
    assert_same(native, ref)
    assert not isinstance(native, str), native
    # the plan survives pickling and replace() as the reference's does
    assert pickle.loads(pickle.dumps(native)) == ref
    assert dataclasses.replace(native) == ref


@pytest.mark.parametrize("seed", range(30))
def test_random_limits_refuse_alike(seed):
    rng, src, tgt = geometries(2000 + seed)
    ref = plan_placement_transfer(src, tgt)
    n = len(ref.operations)
    seg = [op.segment_count for op in ref.operations]
    limits = PlanningLimits(max_transfer_regions=rng.randint(max(1, n - 3), n + 1),
                            max_segments_per_region=rng.randint(1, max(seg) + 1),
                            max_total_lowered_segments=rng.randint(1, sum(seg) + 1))
    assert_same(*both(plan_placement_transfer, src, tgt, planning_limits=limits))
    m = stored_from(rng, src)
    assert_same(*both(plan_stored_transfer_to_target_placement, m, tgt,
                      planning_limits=limits))


def test_source_choice_refusal_alike():
    # DP-owned source tensor with two complete owners: the reference's message
    owned = TensorDescriptor("o", (4,), "u8", 1, (), "fp:o", (OwnershipAxis("dp"),))
    topo = ParallelTopology(tp_size=1, pp_size=1, ep_size=1, dp_size=2, participants=[
        TopologyParticipant(f"d{d}", R(dp=d)) for d in range(2)])
    two = WeightPlacementManifest.from_fragments(
        resource_id="model", revision="rev", weight_generation=1, placement_set_id="s",
        topology=topo, tensors=[owned],
        fragments=[PlacementFragment("o", (0,), (4,), 4, R(dp=d)) for d in range(2)])
    one_topo = ParallelTopology(tp_size=1, pp_size=1, ep_size=1, dp_size=1, participants=[
        TopologyParticipant("w", R())])
    tgt1 = WeightPlacementManifest.from_fragments(
        resource_id="model", revision="rev", weight_generation=1, placement_set_id="t",
        topology=one_topo, tensors=[TensorDescriptor("o", (4,), "u8", 1, (), "fp:o", ())],
        fragments=[PlacementFragment("o", (0,), (4,), 4, R())])
    native, ref = both(plan_placement_transfer, two, tgt1)
    assert native == ref == "ValueError: DP-owned source tensor has ambiguous declared owners"


def run_objects(m, arrays):
    objects = {}
    for f in m.fragments:
        a = arrays[f.tensor_id]
        data = a[tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))] \
            .tobytes()
        buf = objects.setdefault(f.object_key, bytearray())
        buf.extend(bytes(max(0, f.object_offset + len(data) - len(buf))))
        buf[f.object_offset:f.object_offset + len(data)] = data
    return objects


@pytest.mark.parametrize("seed", range(25))
def test_native_lowering_is_coalesced_and_bit_exact(seed):
    from mooncake.reshard.weight.store_plan import lower_plan
    rng, src, tgt = geometries(3000 + seed)
    m = stored_from(rng, src)
    plan = plan_stored_transfer_to_target_placement(m, tgt)
    native = plan.operations._native
    sc = planner._cache(m, planner._StoredCache)
    key, so, ln, tg, do = native.lower(sc.key_of, sc.object_offset, None)
    arrays = {}
    for t in m.tensors:
        n = prod(t.global_shape) * t.itemsize
        arrays[t.tensor_id] = np.frombuffer(rng.randbytes(n), np.uint8).view(
            f"u{t.itemsize}").reshape(t.global_shape)
    objects = run_objects(m, arrays)
    out = {}
    for k, s, n, t, d in zip(key.tolist(), so.tolist(), ln.tolist(), tg.tolist(), do.tolist()):
        f = native.targets[t]
        buf = out.setdefault(f.fragment_id, bytearray(f.nbytes))
        assert d + n <= f.nbytes
        buf[d:d + n] = objects[sc.keys[k]][s:s + n]
    for f in tgt.fragments:
        want = arrays[f.tensor_id][tuple(slice(o, o + n) for o, n in
                                         zip(f.global_offset, f.local_shape))].tobytes()
        assert bytes(out[f.fragment_id]) == want, f.fragment_id
    runs = sum(r.runs for rs in lower_plan(plan).values() for r in rs)
    assert len(key) <= runs
    assert int(ln.sum()) == plan.total_bytes


# --- the target's coverage and the source choice from the columns ----------

def explicit_placement(name, tensors, boxes, tp=1, dp=1, axes=None):
    """A placement of (tensor id, shape) tensors from explicit boxes:
    boxes[tensor id][(dp, tp)] is that rank's list of (offset, shape)."""
    topo = ParallelTopology(tp_size=tp, pp_size=1, ep_size=1, dp_size=dp, participants=[
        TopologyParticipant(f"{name}-dp{d}-tp{t}", R(dp=d, tp=t))
        for d in range(dp) for t in range(tp)])
    descs, frags = [], []
    for tid, shape in tensors:
        ax = (axes or {}).get(tid)
        if ax is None:
            ax = ([ReplicatedAxis("dp")] if dp > 1 else []) + \
                ([ReplicatedAxis("tp")] if tp > 1 else [])
        descs.append(TensorDescriptor(tid, shape, "u8", 1, (), f"fp:{tid}", ax))
        for (d, t), bs in boxes[tid].items():
            for o, s in bs:
                frags.append(PlacementFragment(tid, o, s, prod(s), R(dp=d, tp=t)))
    return WeightPlacementManifest.from_fragments(
        resource_id="model", revision="rev", weight_generation=1, placement_set_id=name,
        topology=topo, tensors=descs, fragments=frags)


def whole(tensors):
    return explicit_placement("src", tensors, {tid: {(0, 0): [((0,) * len(s), s)]}
                                               for tid, s in tensors})


FULL = [((0, 0), (4, 4))]
HALVES = [((0, 0), (2, 4)), ((2, 0), (2, 4))]
BRICKS = [((0, 0), (2, 4)), ((2, 0), (2, 2)), ((2, 2), (2, 2))]   # no grid: the reference decides


def refusals(src, tgt):
    out = [both(plan_placement_transfer, src, tgt)]
    out.append(both(plan_stored_transfer_to_target_placement,
                    stored_from(random.Random(0), src), tgt))
    return out


def unproven(tgt):
    tc = planner._cache(tgt, planner._PlacementCache)
    parts = [p for p in tgt.parts if p.fragments]
    tidx = np.concatenate([tc.part_frags[tgt.parts.index(p)] for p in parts])
    todo = planner._fast_target_coverage(tgt.tensors, tc, tidx,
                                         sorted({p.rank.dp for p in parts}))
    return [tgt.tensors[i].tensor_id for i in todo]


def test_target_coverage_first_refusal_alike():
    """Valid placements the planner refuses: TP replicas tiled differently
    within one DP rank.  The first refusal in tensor order, then DP order,
    is the reference's, whichever tensors the columns prove."""
    tensors = [("a", (4, 4)), ("m", (4, 4)), ("z", (4, 4))]
    boxes = {"a": {(d, t): FULL for d in range(2) for t in range(2)},
             # m: fine at dp 0, refused at dp 1; z: refused at dp 0
             "m": {(0, 0): FULL, (0, 1): FULL, (1, 0): FULL, (1, 1): HALVES},
             "z": {(0, 0): FULL, (0, 1): HALVES, (1, 0): FULL, (1, 1): FULL}}
    tgt = explicit_placement("tgt", tensors, boxes, tp=2, dp=2)
    for native, ref in refusals(whole(tensors), tgt):
        assert native == ref == "ValueError: target tensor is not fully covered: m: dp=1"
    # with m fixed, z's refusal at dp 0 comes first
    boxes["m"] = {(d, t): FULL for d in range(2) for t in range(2)}
    tgt = explicit_placement("tgt", tensors, boxes, tp=2, dp=2)
    assert unproven(tgt) == ["z"]     # the columns prove a and m
    for native, ref in refusals(whole(tensors), tgt):
        assert native == ref == "ValueError: target tensor is not fully covered: z: dp=0"


def test_target_coverage_dp_owner_refusal_alike():
    tensors = [("b", (4, 4)), ("o", (4, 4))]
    owned = [OwnershipAxis("dp"), ReplicatedAxis("tp")]
    boxes = {"b": {(d, t): FULL for d in range(2) for t in range(2)},
             "o": {(0, 0): FULL, (0, 1): BRICKS}}
    tgt = explicit_placement("tgt", tensors, boxes, tp=2, dp=2, axes={"o": owned})
    for native, ref in refusals(whole(tensors), tgt):
        assert native == ref == \
            "ValueError: target tensor is not fully covered by its DP owner: o"


def test_irregular_tilings_plan_alike():
    """Boxes that tile exactly but not as a grid are not proven by the
    columns: the reference's rule accepts them, on either side."""
    tensors = [("a", (4, 4)), ("b", (4, 4))]
    tgt = explicit_placement("tgt", tensors, {"a": {(0, 0): BRICKS}, "b": {(0, 0): FULL}})
    src = explicit_placement("src", tensors, {"a": {(0, 0): HALVES}, "b": {(0, 0): BRICKS}})
    assert unproven(tgt) == ["a"] and unproven(src) == ["b"]
    for native, ref in refusals(src, tgt):
        assert_same(native, ref)
        assert not isinstance(native, str), native
    # and back: an irregular source into the grid
    for native, ref in refusals(tgt, src):
        assert_same(native, ref)


def test_source_replicas_tiled_differently_refuse_alike():
    # one owner group whose TP replicas tile differently: no complete replica
    tensors = [("a", (4, 4))]
    src = explicit_placement("src", tensors, {"a": {(0, 0): FULL, (0, 1): HALVES}}, tp=2)
    tgt = whole(tensors)
    native, ref = both(plan_placement_transfer, src, tgt)
    assert native == ref and native.startswith("ValueError: source manifests have no "
                                                "complete DP replica")


def test_attr_ints_reads_columns_and_refuses_malformed_objects():
    from mooncake import capi

    class O:
        def __init__(self, a, t):
            self.a, self.t = a, t
    objs = [O((1, 2), "x"), O((3,), "y"), O(7, "x")]
    out, nd = np.full((3, 2), -1, np.int64), np.zeros(3, np.int64)
    capi.reshard_attr_ints(objs, "a", out, nd, None)
    assert out.tolist() == [[1, 2], [3, 0], [7, 0]] and nd.tolist() == [2, 1, 1]
    a, t = np.zeros((3, 2), np.int64), np.zeros(3, np.int64)
    capi.reshard_attr_ints(objs, ("a", "t"), (a, t), (None, None), (None, {"x": 5, "y": 6}))
    assert a.tolist() == out.tolist() and t.tolist() == [5, 6, 5]
    codes, seen = np.zeros(3, np.int64), {"y": 0}   # [dict]: new values numbered
    capi.reshard_attr_ints(objs, "t", codes, None, [seen])
    assert codes.tolist() == [1, 0, 1] and seen == {"y": 0, "x": 1}
    with pytest.raises(ValueError, match="object 0: more values than the row width 1"):
        capi.reshard_attr_ints(objs, "a", np.zeros(3, np.int64), None, None)
    with pytest.raises(TypeError, match="object 0: expected an int or a tuple of int"):
        capi.reshard_attr_ints([O("s", "x")], "a", np.zeros(1, np.int64), None, None)
    with pytest.raises(KeyError):
        capi.reshard_attr_ints(objs, "t", np.zeros(3, np.int64), None, {"x": 1})
    with pytest.raises(TypeError, match="out must be a buffer of int64"):
        capi.reshard_attr_ints(objs, "a", np.zeros((3, 2), np.int32), None, None)
    with pytest.raises(ValueError, match="out must hold 3 rows"):
        capi.reshard_attr_ints(objs, "a", np.zeros(4, np.int64), None, None)
    with pytest.raises(AttributeError):
        capi.reshard_attr_ints(objs, "missing", np.zeros(3, np.int64), None, None)


def test_one_element_and_high_rank_tensors_plan_alike():
    """Rank 1 of one element (replicated) and rank 5 (wider than the
    columns' first guess) next to rank 2, split over TP and planned back."""
    shapes = {"s": (1,), "h": (2, 1, 3, 1, 4), "m": (4, 4)}

    def place(name, tp):
        topo = ParallelTopology(tp_size=tp, pp_size=1, ep_size=1, dp_size=1, participants=[
            TopologyParticipant(f"{name}-tp{t}", R(tp=t)) for t in range(tp)])
        descs, frags = [], []
        for tid, shape in shapes.items():
            split = len(shape) - 1 if len(shape) > 1 and tp > 1 else None
            axes = [] if tp == 1 else [SplitAxis("tp", split) if split is not None
                                       else ReplicatedAxis("tp")]
            descs.append(TensorDescriptor(tid, shape, "u16", 2, () if split is None
                                          else (split,), f"fp:{tid}", axes))
            for t in range(tp):
                off, shp = [0] * len(shape), list(shape)
                if split is not None:
                    step = shape[split] // tp
                    off[split], shp[split] = t * step, step
                frags.append(PlacementFragment(tid, tuple(off), tuple(shp), 2 * prod(shp),
                                               R(tp=t)))
        return WeightPlacementManifest.from_fragments(
            resource_id="model", revision="rev", weight_generation=1, placement_set_id=name,
            topology=topo, tensors=descs, fragments=frags)
    src, tgt = place("src", 2), place("tgt", 1)
    for a, b in ((src, tgt), (tgt, src)):
        assert unproven(b) == []
        for native, ref in refusals(a, b):
            assert_same(native, ref)
            assert not isinstance(native, str), native

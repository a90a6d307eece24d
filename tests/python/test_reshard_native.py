# SPDX-License-Identifier: Apache-2.0
"""The planner core in libmooncake (mooncake/reshard.h) against the Python
reference planner: on random TP x PP x DP geometries (uneven splits, rank
orders permuted, boxes tiled along free dimensions, replicated tensors, 1-3
dimensions, several element sizes) plan_placement_transfer,
plan_placement_transfer_to_local_target and
plan_stored_transfer_to_target_placement give the same plans, operation by
operation, the same executors and the same refusals under small limits;
their lowered, coalesced reads rebuild every target bit-exact in no more
reads than the reference's runs, and so do their strided blocks in no
more blocks than reads.  Manifests that derive the planner's
columns when constructed are the same values and plan, and refuse first,
as those that do not; the coverage proof in C proves what numpy's does.
No daemon is involved."""
import dataclasses
import itertools
import pickle
import random
import threading
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


def check_limits_refuse_alike(seed):
    """Random limits around a random geometry's plan: the native planner
    refuses (or not) exactly as the reference does."""
    rng, src, tgt = geometries(seed)
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


@pytest.mark.parametrize("seed", range(30))
def test_random_limits_refuse_alike(seed):
    check_limits_refuse_alike(2000 + seed)


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


def _execute_lowered(seed, blocks):
    """Plan geometry ``seed``, lower it natively (as reads, or with
    ``blocks`` as strided blocks) and execute the result from objects of
    random bytes: every target fragment must come out bit-exact.  Returns
    (plan, the lowered columns)."""
    rng, src, tgt = geometries(3000 + seed)
    m = stored_from(rng, src)
    plan = plan_stored_transfer_to_target_placement(m, tgt)
    native = plan.operations._native
    sc = planner._cache(m, planner._StoredCache)
    cols = native.lower(sc.key_of, sc.object_offset, None, blocks=blocks)
    key, so, ln, tg, do = cols[:5]
    rows, ss, ds = cols[5:] if blocks else (np.ones_like(key), key * 0, key * 0)
    arrays = {}
    for t in m.tensors:
        n = prod(t.global_shape) * t.itemsize
        arrays[t.tensor_id] = np.frombuffer(rng.randbytes(n), np.uint8).view(
            f"u{t.itemsize}").reshape(t.global_shape)
    objects = run_objects(m, arrays)
    out = {}
    for k, s, n, t, d, r, sst, dst in zip(*(c.tolist() for c in (key, so, ln, tg, do, rows,
                                                                   ss, ds))):
        f = native.targets[t]
        buf = out.setdefault(f.fragment_id, bytearray(f.nbytes))
        assert r >= 1 and (r == 1 or (sst >= n and dst >= n))
        for i in range(r):
            assert d + i * dst + n <= f.nbytes
            buf[d + i * dst:d + i * dst + n] = objects[sc.keys[k]][s + i * sst:s + i * sst + n]
    for f in tgt.fragments:
        want = arrays[f.tensor_id][tuple(slice(o, o + n) for o, n in
                                         zip(f.global_offset, f.local_shape))].tobytes()
        assert bytes(out[f.fragment_id]) == want, f.fragment_id
    assert int((ln * rows).sum()) == plan.total_bytes
    return plan, cols


@pytest.mark.parametrize("seed", range(25))
def test_native_lowering_is_coalesced_and_bit_exact(seed):
    from mooncake.reshard.weight.store_plan import lower_plan
    plan, (key, *_) = _execute_lowered(seed, False)
    runs = sum(r.runs for rs in lower_plan(plan).values() for r in rs)
    assert len(key) <= runs


@pytest.mark.parametrize("seed", range(25))
def test_native_blocks_are_bit_exact_and_no_more_than_reads(seed):
    """mc_reshard_plan_lower_blocks over the same random geometries
    (regular and irregular tilings, 1-3-D): the blocks' rows rebuild every
    target bit-exact, and there are no more blocks than reads."""
    plan, (key, *_) = _execute_lowered(seed, True)
    _, (rkey, *_) = _execute_lowered(seed, False)
    assert len(key) <= len(rkey)


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


# --- columns derived when a manifest is constructed ------------------------
#
# A manifest of at least planner.EAGER_COLUMNS_MIN_FRAGMENTS fragments
# derives the planner's columns in its constructor; the tests lower the
# threshold to 0 so that the small random geometries take that path too.

@pytest.fixture
def eager(monkeypatch):
    monkeypatch.setattr(planner, "EAGER_COLUMNS_MIN_FRAGMENTS", 0)


@pytest.fixture
def lazy(monkeypatch):
    monkeypatch.setattr(planner, "EAGER_COLUMNS_MIN_FRAGMENTS", 1 << 62)


def rebuilt(p):
    """The same placement constructed again (another object)."""
    return WeightPlacementManifest(resource_id=p.resource_id, revision=p.revision,
                                   weight_generation=p.weight_generation,
                                   placement_set_id=p.placement_set_id, topology=p.topology,
                                   parts=list(reversed(p.parts)))


def same_columns(a, b):
    """Two caches of the same manifest hold the same columns."""
    for name in ("frag_tensor", "frag_part", "frag_dp", "part_coords", "tensor_owners",
                 "itemsize", "tensor_ext", "box_off", "box_shape"):
        if hasattr(a, name):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in ("off", "shape", "ndim"):
        assert np.array_equal(getattr(a.cols, name), getattr(b.cols, name)), name
    if hasattr(a, "part_frags"):
        assert len(a.part_frags) == len(b.part_frags)
        for x, y in zip(a.part_frags, b.part_frags):
            assert np.array_equal(x, y)
    assert a.catalog == b.catalog


@pytest.mark.parametrize("seed", range(12))
def test_eager_columns_equal_lazy_ones(seed, monkeypatch):
    rng, src, _ = geometries(3000 + seed)
    m = stored_from(rng, src)
    monkeypatch.setattr(planner, "EAGER_COLUMNS_MIN_FRAGMENTS", 0)
    p_eager, m_eager = rebuilt(src), dataclasses.replace(m)
    assert p_eager.__dict__.get("_native_cache") is not None
    assert m_eager.__dict__.get("_native_cache") is not None
    monkeypatch.setattr(planner, "EAGER_COLUMNS_MIN_FRAGMENTS", 1 << 62)
    p_lazy, m_lazy = rebuilt(src), dataclasses.replace(m)
    assert "_native_cache" not in p_lazy.__dict__ and "_native_cache" not in m_lazy.__dict__
    te = planner._cache(p_eager, planner._PlacementCache)
    tl = planner._cache(p_lazy, planner._PlacementCache)
    assert te.part_ids is not None and tl.part_ids is None    # the constructor's positions
    same_columns(te, tl)
    same_columns(planner._cache(m_eager, planner._StoredCache),
                 planner._cache(m_lazy, planner._StoredCache))
    # the executors made without re-checking equal the checked ones
    used = [i for i, p in enumerate(src.parts) if p.fragments]
    for i in used:
        assert te.executors[i] == planner._executor(p_eager, p_eager.parts[i])
        assert te.executors[i].placement_fragment_ids == tuple(
            sorted(f.placement_fragment_id for f in p_eager.parts[i].fragments))


@pytest.mark.parametrize("seed", range(12))
def test_eager_manifests_are_the_same_values(seed, monkeypatch):
    """Fields, equality, ids, digests, JSON text and pickles of a manifest
    that derived its columns are those of one that did not."""
    from mooncake.reshard.weight import weight_placement_from_json, weight_placement_to_json
    rng, src, _ = geometries(4000 + seed)
    m = stored_from(rng, src)
    monkeypatch.setattr(planner, "EAGER_COLUMNS_MIN_FRAGMENTS", 1 << 62)
    p0, m0 = rebuilt(src), dataclasses.replace(m)
    monkeypatch.setattr(planner, "EAGER_COLUMNS_MIN_FRAGMENTS", 0)
    p1, m1 = rebuilt(src), dataclasses.replace(m)
    for a, b in ((p0, p1), (m0, m1)):
        for f in dataclasses.fields(a):
            assert getattr(a, f.name) == getattr(b, f.name), f.name
        assert a == b and repr(a) == repr(b)
        assert pickle.dumps(a) == pickle.dumps(b)    # the columns are never pickled
        back = pickle.loads(pickle.dumps(b))
        assert back == a and "_native_cache" not in back.__dict__
    assert p0.placement_id == p1.placement_id and p0.digest == p1.digest
    assert p0.fragments == src.fragments and p0.parts == src.parts
    text = weight_placement_to_json(p1)
    assert text == weight_placement_to_json(p0)
    p2 = weight_placement_from_json(text)       # from JSON: derived too, same value
    assert p2 == p0 and p2.__dict__.get("_native_cache") is not None
    assert weight_placement_to_json(p2) == text
    assert m0.manifest_digest == m1.manifest_digest and m0.to_json() == m1.to_json()
    m2 = WeightManifest.from_json(m1.to_json())
    assert m2 == m0 and m2.to_json() == m0.to_json()
    assert m2.__dict__.get("_native_cache") is not None


@pytest.mark.parametrize("seed", range(25))
def test_eager_plans_match_reference(seed, eager):
    rng, src, tgt = geometries(5000 + seed)
    src, tgt = rebuilt(src), rebuilt(tgt)
    assert tgt.__dict__.get("_native_cache") is not None
    assert_same(*both(plan_placement_transfer, src, tgt))
    for part in tgt.parts:
        assert_same(*both(plan_placement_transfer_to_local_target, src, tgt,
                          part.participant_id))
    m = stored_from(rng, src)
    assert m.__dict__.get("_native_cache") is not None
    native, ref = both(plan_stored_transfer_to_target_placement, m, tgt)
    assert_same(native, ref)
    assert pickle.loads(pickle.dumps(native)) == ref


@pytest.mark.parametrize("seed", range(15))
def test_eager_limits_refuse_alike(seed, eager):
    check_limits_refuse_alike(6000 + seed)


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_first_refusal_is_the_reference_one(mode, request):
    """Several things wrong at once: whether the columns came with the
    manifests or not, the first refusal is the reference's -- identity,
    then the catalogue, then the target's coverage (in tensor order)."""
    request.getfixturevalue(mode)
    tensors = [("a", (4, 4)), ("m", (4, 4)), ("z", (4, 4))]
    gap = {"a": {(d, t): FULL for d in range(2) for t in range(2)},
           "m": {(0, 0): FULL, (0, 1): FULL, (1, 0): FULL, (1, 1): HALVES},
           "z": {(0, 0): FULL, (0, 1): HALVES, (1, 0): FULL, (1, 1): FULL}}
    tgt = explicit_placement("tgt", tensors, gap, tp=2, dp=2)
    src = whole(tensors)
    assert (tgt.__dict__.get("_native_cache") is not None) == (mode == "eager")
    for native, ref in refusals(src, tgt):
        assert native == ref == "ValueError: target tensor is not fully covered: m: dp=1"
    # a catalogue mismatch (another dtype) is found before the gaps
    other = explicit_placement("src", tensors, {tid: {(0, 0): [((0, 0), s)]}
                                                for tid, s in tensors})
    bad = [TensorDescriptor(t.tensor_id, t.global_shape, "i8" if t.tensor_id == "z" else
                            t.dtype, 1, (), t.layout_fingerprint, ()) for t in other.tensors]
    other = WeightPlacementManifest.from_fragments(
        resource_id="model", revision="rev", weight_generation=1, placement_set_id="src",
        topology=other.topology, tensors=bad, fragments=other.fragments)
    for native, ref in refusals(other, tgt):
        assert native == ref == "ValueError: tensor descriptor mismatch: z"
    # a missing tensor, before the descriptor mismatch
    fewer = explicit_placement("tgt", tensors[:2], {k: gap[k] for k in ("a", "m")},
                               tp=2, dp=2)
    for native, ref in refusals(other, fewer):
        assert native == ref == "ValueError: target manifests are missing tensors: z"
    # another revision, before everything
    later = explicit_placement("tgt", tensors, gap, tp=2, dp=2)
    object.__setattr__(later, "revision", "rev2")
    for native, ref in refusals(src, later):
        assert native == ref == "ValueError: source and target revision differ"


def test_snapshot_rebuilds_derive_no_columns(eager):
    rng, src, tgt = geometries(7000)
    m = stored_from(rng, src)
    plan = plan_stored_transfer_to_target_placement(m, tgt)
    calls = []
    real = planner.derive_columns
    try:
        planner.derive_columns = lambda obj, hint=None: calls.append(obj)
        again = plan.validate_source_manifest_snapshot()
        assert again == m and calls == []
        p = plan_placement_transfer(src, tgt).validate_source_placement_snapshot()
        assert p == src and calls == []
        rebuilt(src)                     # an ordinary construction does
        assert len(calls) == 1
    finally:
        planner.derive_columns = real


def test_failed_derivation_is_left_to_the_plan(eager, monkeypatch):
    """Columns that cannot be derived at construction do not fail it: the
    first plan derives them and plans as the reference."""
    rng, src, tgt = geometries(7100)
    real = planner._PlacementCache

    class Broken(real):
        def __init__(self, p, hint=None):
            if hint is not None:
                raise RuntimeError("derivation failed")
            super().__init__(p, hint)
    monkeypatch.setattr(planner, "_PlacementCache", Broken)
    t2 = rebuilt(tgt)
    assert t2 == tgt and "_native_cache" not in t2.__dict__
    assert_same(*both(plan_placement_transfer, src, t2))
    assert t2.__dict__.get("_native_cache") is not None


def test_replaced_fields_are_derived_again(eager):
    """Columns belong to the fields they were derived from: a manifest
    whose fragments were replaced behind its back plans what it holds now
    (the load's re-attestation then refuses it: its digest is the old one)."""
    rng, src, tgt = geometries(7200)
    m = stored_from(rng, src)
    other = stored_from(random.Random(99), src)       # other objects and offsets
    assert other.fragments != m.fragments
    object.__setattr__(m, "fragments", other.fragments)
    native = plan_stored_transfer_to_target_placement(m, tgt)
    with planner.reference_planner():
        ref = plan_stored_transfer_to_target_placement(other, tgt)
    assert tuple(native.operations) == tuple(ref.operations)
    assert planner._cache(m, planner._StoredCache).frags is other.fragments
    with pytest.raises(ValueError, match="weight manifest snapshot is invalid"):
        native.validate_source_manifest_snapshot()


def test_concurrent_first_plans_of_fresh_manifests(eager):
    """Threads planning the same fresh manifests at once (the caches'
    per-selection tables filled concurrently) all get the reference's plan."""
    rng, src, tgt = geometries(7300)
    m = stored_from(rng, src)
    with planner.reference_planner():
        want_p = plan_placement_transfer(src, tgt)
        want_s = plan_stored_transfer_to_target_placement(m, tgt)
    for _ in range(5):
        s2, t2, m2 = rebuilt(src), rebuilt(tgt), dataclasses.replace(m)
        out, errors = [], []
        go = threading.Barrier(6)

        def run(i):
            try:
                go.wait(timeout=30)
                if i % 2:
                    out.append(plan_placement_transfer(s2, t2) == want_p)
                else:
                    out.append(plan_stored_transfer_to_target_placement(m2, t2) == want_s)
            except Exception as exc:        # reported below
                errors.append(exc)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert errors == [] and out == [True] * 6


@pytest.mark.parametrize("seed", range(20))
def test_boxes_tile_in_c_proves_what_numpy_proves(seed):
    """capi.reshard_boxes_tile against planner._tiles on random groups of
    boxes: grids, irregular tilings, gaps, overlaps, repeats, boxes outside
    the extent, 1-3 dimensions, groups of 1-40 boxes."""
    rng = random.Random(seed)
    off, shape, ext, group = [], [], [], []
    for g in range(60):
        w = rng.randint(1, 3)
        extent = [rng.randint(1, 9) for _ in range(w)]
        grid = [cuts(rng, e, rng.randint(1, min(e, 3))) if e > 1 else [(0, 1)]
                for e in extent]
        boxes = [tuple(zip(*cell)) for cell in itertools.product(*grid)]
        kind = rng.choice(("grid", "repeat", "drop", "grow", "shift", "brick"))
        if kind == "repeat":
            boxes += rng.sample(boxes, rng.randint(1, len(boxes)))
        elif kind == "drop" and len(boxes) > 1:
            boxes.pop(rng.randrange(len(boxes)))
        elif kind in ("grow", "shift"):
            i = rng.randrange(len(boxes))
            o, s = map(list, boxes[i])
            d = rng.randrange(w)
            if kind == "grow":
                s[d] += 1
            else:
                o[d] -= rng.choice((1, -1))
            boxes[i] = (tuple(o), tuple(s))
        elif kind == "brick" and w == 2 and extent[0] > 1 and extent[1] > 1:
            a, b = extent[0] // 2, extent[1] // 2
            boxes = [((0, 0), (a, extent[1])), ((a, 0), (extent[0] - a, b)),
                     ((a, b), (extent[0] - a, extent[1] - b))]
        rng.shuffle(boxes)
        for o, s in boxes:
            off.append(list(o) + [0] * (3 - w))
            shape.append(list(s) + [1] * (3 - w))
            ext.append(extent + [1] * (3 - w))
            group.append(g)
    args = [np.array(a, np.int64) for a in (group, off, shape, ext)]
    want = planner._tiles(*args)
    assert planner._BOXES_TILE is not None, "the build's mooncake.capi has the coverage proof"
    got = np.full(60, 7, np.uint8)
    st = planner._BOXES_TILE(len(group), 3, *(int(a.ctypes.data) for a in args), 60,
                             int(got.ctypes.data))
    assert st == 0
    assert got.astype(bool).tolist() == want.tolist() and set(got.tolist()) <= {0, 1}
    assert 0 < int(got.sum()) < 60          # both kinds of groups were drawn
    assert planner._tiles_of(*args).tolist() == want.tolist()
    # wider than the library allows: numpy decides, alike
    wide = [np.pad(a, ((0, 0), (0, 62)), constant_values=v) for a, v in
            ((args[1], 0), (args[2], 1), (args[3], 1))]
    assert planner._tiles_of(args[0], *wide).tolist() == want.tolist()


def test_target_owner_from_columns(eager):
    """A native plan tells each target fragment's participant from the
    columns, as store_load's executor map from the objects does."""
    rng, src, tgt = geometries(7400)
    m = stored_from(rng, src)
    for plan in (plan_placement_transfer(src, tgt),
                 plan_stored_transfer_to_target_placement(m, tgt)):
        native = plan.operations._native
        pids = [ex.participant_id for ex in plan.target_executors][::-1]
        owner = {fid: i for i, ex in enumerate(plan.target_executors[::-1])
                 for fid in ex.placement_fragment_ids}
        want = [owner.get(f.placement_fragment_id, -1) for f in native.targets]
        assert native.target_owner(pids).tolist() == want
        assert native.target_owner(pids[:1]).tolist() == [0 if w == 0 else -1 for w in want]

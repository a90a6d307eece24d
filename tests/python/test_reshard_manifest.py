# SPDX-License-Identifier: Apache-2.0
"""mooncake.reshard.weight manifest contracts against upstream's fact sheet
(../shared/reference/upstream-reshard.md §3-§9, §12): tensors, axes,
fragments, topology, parts, the complete placement with its axis-semantic
coverage, runtime bindings, the placement JSON and the stored
WeightManifest.  Ids and digests are recomputed here by hand from the
documented rule (hashlib over the documented canonical JSON), and the
worked example's JSON document is written out in full here: it must parse,
and our output must equal it byte for byte.  No daemon is involved."""
import dataclasses
import gc
import hashlib
import json
import pickle
import weakref

import pytest

from mooncake.reshard.contracts import ResourceKind
from mooncake.reshard.weight import (OwnershipAxis, ParallelRank, ParallelTopology,
                                     PlacementFragment, ReplicatedAxis, RuntimeBindingFragment,
                                     SplitAxis, StoredFragment, TensorDescriptor,
                                     TopologyParticipant, WeightManifest,
                                     WeightPlacementManifest, WeightPlacementPart,
                                     WeightRuntimeBindingManifest, validate_runtime_binding,
                                     validate_runtime_bindings, weight_placement_from_json,
                                     weight_placement_to_json)
from mooncake.reshard.weight.storage_manifest import (StoredManifestIdentity,
                                                      validate_weight_manifest_snapshot)


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


RANK0 = {"dp": 0, "tp": 0, "pp": 0, "ep": 0}


def R(**kw):
    return ParallelRank(**kw)


def tensor(tid="w", shape=(8, 4), axes=(SplitAxis("tp", 0),), shard=None, **kw):
    if shard is None:
        shard = tuple(sorted(a.dim for a in axes if isinstance(a, SplitAxis)))
    args = dict(dtype="bfloat16", itemsize=2, layout_fingerprint="fp:v1")
    args.update(kw)
    return TensorDescriptor(tid, shape, args["dtype"], args["itemsize"], shard,
                            args["layout_fingerprint"], axes, kw.get("layer_id"),
                            kw.get("expert_id"))


def topology(tp=1, pp=1, ep=1, dp=1, ranks=None):
    if ranks is None:
        ranks = [R(dp=d, pp=p, ep=e, tp=t) for d in range(dp) for p in range(pp)
                 for e in range(ep) for t in range(tp)]
    return ParallelTopology(tp_size=tp, pp_size=pp, ep_size=ep, dp_size=dp,
                            participants=[TopologyParticipant(f"worker-{i}", r)
                                          for i, r in enumerate(ranks)])


def frag(t, off, shape, rank, **kw):
    from math import prod
    return PlacementFragment(t.tensor_id, off, shape, prod(shape) * t.itemsize, rank, **kw)


def placement(topo, tensors, frags, **kw):
    args = dict(resource_id="model", revision="rev", weight_generation=1,
                placement_set_id="set")
    args.update(kw)
    return WeightPlacementManifest.from_fragments(topology=topo, tensors=tensors,
                                                  fragments=frags, **args)


def tp_rows(t, tp, **rank):
    rows = t.global_shape[0] // tp
    return [frag(t, (i * rows,) + (0,) * (t.ndim - 1), (rows,) + t.global_shape[1:],
                 R(tp=i, **rank)) for i in range(tp)]


# --- tensors and axes -------------------------------------------------------

def test_tensor_descriptor_fields_defaults_and_axis_order():
    t = TensorDescriptor("w", [4, 4], "float8_e4m3fn", 1, [0], "fp",
                         [SplitAxis("tp", 0), ReplicatedAxis("dp"), OwnershipAxis("pp")])
    assert [f.name for f in dataclasses.fields(t)] == [
        "tensor_id", "global_shape", "dtype", "itemsize", "shard_dims", "layout_fingerprint",
        "parallel_axes", "layer_id", "expert_id"]
    assert t.global_shape == (4, 4) and t.shard_dims == (0,)
    assert [a.kind for a in t.parallel_axes] == ["dp", "pp", "tp"]     # re-sorted
    other = TensorDescriptor("w", (4, 4), "float8_e4m3fn", 1, (0,), "fp",
                             (OwnershipAxis("pp"), ReplicatedAxis("dp"), SplitAxis("tp", 0)))
    assert other == t and hash(other) == hash(t)
    assert t.layer_id is None and t.expert_id is None
    with pytest.raises(TypeError):
        TensorDescriptor("w", (4,), "bf16", 2, (), parallel_axes=())  # no fingerprint
    assert ParallelRank() == ParallelRank(0, 0, 0, 0)
    assert [f.name for f in dataclasses.fields(ParallelRank)] == ["dp", "tp", "pp", "ep"]


@pytest.mark.parametrize("make, message", [
    (lambda: SplitAxis("cp", 0), "unsupported parallel axis kind: cp"),
    (lambda: ReplicatedAxis("xx"), "unsupported parallel axis kind: xx"),
    (lambda: SplitAxis("pp", 0), "pp cannot use split semantics"),
    (lambda: SplitAxis("dp", 0), "dp cannot use split semantics"),
    (lambda: SplitAxis("tp", -1), "must be at least 0"),
    (lambda: SplitAxis("ep", 1), "EP must split the leading logical expert dimension"),
    (lambda: ParallelRank(tp=-1), "must be at least 0"),
    (lambda: ParallelRank(tp=True), "must be an integer"),
])
def test_axis_and_rank_refusals(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("kw, message", [
    ({"tensor_id": ""}, "tensor_id must be a non-empty string"),
    ({"global_shape": ()}, "global_shape"),
    ({"global_shape": (4, 0)}, "global_shape must be at least 1"),
    ({"global_shape": {4}}, "global_shape must contain integers"),
    ({"global_shape": (4.0,)}, "global_shape must contain integers"),
    ({"dtype": ""}, "dtype must be a non-empty string"),
    ({"itemsize": 0}, "itemsize must be at least 1"),
    ({"itemsize": True}, "itemsize must be an integer"),
    ({"shard_dims": (0, 0)}, "duplicates"),
    ({"shard_dims": (1, 0)}, "must be sorted"),
    ({"shard_dims": (2,)}, "out-of-range dimension"),
    ({"layout_fingerprint": ""}, "layout_fingerprint must be a non-empty string"),
    ({"parallel_axes": ("tp",)}, "parallel_axes must contain explicit axis values"),
    ({"parallel_axes": (ReplicatedAxis("tp"), SplitAxis("tp", 0))},
     "parallel_axes must not contain duplicate kinds"),
    ({"parallel_axes": (SplitAxis("ep", 0), SplitAxis("tp", 0)), "shard_dims": (0,)},
     "split axes must not share a dimension"),
    ({"parallel_axes": (SplitAxis("tp", 2),), "shard_dims": ()},
     "split axis dimension is out of range"),
    ({"parallel_axes": (SplitAxis("tp", 1),), "shard_dims": (0,)},
     "parallel axis split dimensions conflict with shard_dims"),
    ({"parallel_axes": (SplitAxis("ep", 0),), "shard_dims": (0,), "expert_id": 3},
     "an individually allocated expert requires explicit EP ownership"),
    ({"layer_id": -1}, "layer_id must be at least 0"),
])
def test_tensor_descriptor_refusals(kw, message):
    args = dict(tensor_id="w", global_shape=(4, 4), dtype="bfloat16", itemsize=2,
                shard_dims=(0,), layout_fingerprint="fp", parallel_axes=(SplitAxis("tp", 0),))
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        TensorDescriptor(**args)


# --- fragments --------------------------------------------------------------

def fragment_id_by_hand(tensor_id, off, shape, nbytes, rank, aliases=(), stage=None):
    body = {"schema": "weight-placement-fragment", "tensor_id": tensor_id,
            "global_offset": list(off), "local_shape": list(shape), "nbytes": nbytes,
            "rank": rank, "aliases": sorted(aliases)}
    if stage is not None:
        body["pipeline_stage_id"] = stage
    return "sha256:" + sha(canon(body))


def test_fragment_ids_computed_by_hand():
    rank = {"dp": 0, "tp": 1, "pp": 0, "ep": 0}
    f = PlacementFragment("weight", (0, 0), (4, 4), 32, R(tp=1))
    assert f.placement_fragment_id == fragment_id_by_hand("weight", (0, 0), (4, 4), 32, rank)
    assert f.placement_fragment_id == ("sha256:73b1b25fe8cf11d48697cfd441a400d57ef84d52583d"
                                       "392c09453b5b79a86035")
    f3 = PlacementFragment("weight", (0, 0), (4, 4), 32, R(tp=1), 3)
    assert f3.placement_fragment_id == fragment_id_by_hand("weight", (0, 0), (4, 4), 32,
                                                           rank, stage=3)
    assert f3.placement_fragment_id == ("sha256:b50a91dbc1e87bed99377bffa4359e720fc8258944b"
                                        "c49e84ca309c835ac1586")
    tied = PlacementFragment("b", (0,), (4,), 8, R(), aliases=["b", "a"])
    assert tied.aliases == ("a", "b")
    assert tied.fragment_id == fragment_id_by_hand("b", (0,), (4,), 8, RANK0, ("a", "b"))
    explicit = PlacementFragment("w", (0,), (4,), 8, R(), placement_fragment_id="mine")
    assert explicit.fragment_id == "mine"
    # replace keeps the old (now explicit) id
    moved = dataclasses.replace(f, global_offset=(4, 0))
    assert moved.placement_fragment_id == f.placement_fragment_id
    assert [x.name for x in dataclasses.fields(f)] == [
        "tensor_id", "global_offset", "local_shape", "nbytes", "rank", "pipeline_stage_id",
        "aliases", "placement_fragment_id"]


@pytest.mark.parametrize("args, kw, message", [
    (("", (0,), (1,), 2, R()), {}, "tensor_id must be a non-empty string"),
    (("w", (-1,), (1,), 2, R()), {}, "global_offset must be at least 0"),
    (("w", (0,), (0,), 2, R()), {}, "local_shape must be at least 1"),
    (("w", (0,), (1,), 0, R()), {}, "nbytes must be at least 1"),
    (("w", (0,), (1,), 1 << 64, R()), {}, "nbytes must fit in an unsigned 64-bit integer"),
    (("w", (0,), (1,), 2, 0), {}, "rank must be a ParallelRank"),
    (("w", (0,), (1,), 2, R()), {"pipeline_stage_id": -1}, "pipeline_stage_id must be at "
                                                            "least 0"),
    (("w", (0,), (1,), 2, R()), {"aliases": ("w", "w")}, "aliases must not contain "
                                                          "duplicates"),
    (("w", (0,), (1,), 2, R()), {"aliases": ("w",)}, "alias group must contain at least "
                                                     "two tensor IDs"),
    (("w", (0,), (1,), 2, R()), {"aliases": ("a", "b")}, "alias group must contain the "
                                                         "fragment tensor_id"),
])
def test_fragment_refusals(args, kw, message):
    with pytest.raises(ValueError, match=message):
        PlacementFragment(*args, **kw)


# --- topology ---------------------------------------------------------------

def test_topology_id_by_hand_sorting_and_lookup():
    topo = topology()
    assert topo.topology_id == "sha256:" + sha(canon({
        "schema": "weight-parallel-topology", "tp_size": 1, "pp_size": 1, "ep_size": 1,
        "dp_size": 1, "participants": [{"participant_id": "worker-0", "rank": RANK0}]}))
    assert topo.topology_id == ("sha256:017d6c66843ba96ccd39ed1b118b7635fee56677a41dc3d39c48"
                                "b7bb3ccccdf4")
    two = ParallelTopology(tp_size=2, pp_size=1, ep_size=1, dp_size=1, participants=[
        TopologyParticipant("b/é", R(tp=0)), TopologyParticipant("a", R(tp=1))])
    assert [p.participant_id for p in two.participants] == ["a", "b/é"]
    assert two.world_size == 2
    assert two.participant("b/é").rank == R()
    with pytest.raises(ValueError, match="unknown topology participant: zz"):
        two.participant("zz")
    # world_size counts participants: one DP replica selected of dp_size 2
    assert topology(dp=2, ranks=[R()]).world_size == 1
    with pytest.raises(ValueError, match="topology_id does not match canonical topology"):
        dataclasses.replace(two, tp_size=3)
    with pytest.raises(TypeError):
        ParallelTopology(1, 1, 1, 1, [])                        # keyword-only


@pytest.mark.parametrize("kw, message", [
    ({"tp_size": 0}, "tp_size must be at least 1"),
    ({"participants": []}, "parallel topology participants must not be empty"),
    ({"participants": [TopologyParticipant("a", R()), TopologyParticipant("a", R(tp=1))]},
     "duplicate topology participant_id"),
    ({"participants": [TopologyParticipant("a", R()), TopologyParticipant("b", R())]},
     "duplicate topology parallel rank"),
    ({"participants": [TopologyParticipant("a", R(tp=2))]},
     "tp rank is out of range for participant a"),
    ({"topology_id": "sha256:00"}, "topology_id does not match canonical topology"),
])
def test_topology_refusals(kw, message):
    args = dict(tp_size=2, pp_size=1, ep_size=1, dp_size=1,
                participants=[TopologyParticipant("a", R())])
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        ParallelTopology(**args)
    with pytest.raises(ValueError, match="participant_id must be a non-empty string"):
        TopologyParticipant("", R())


# --- parts ------------------------------------------------------------------

def part(tensors, fragments, rank=None, **kw):
    args = dict(resource_id="model", revision="rev", weight_generation=1,
                placement_set_id="set", topology_id="sha256:t", participant_id="p0",
                rank=R() if rank is None else rank, tensors=tuple(tensors),
                fragments=tuple(fragments))
    args.update(kw)
    return WeightPlacementPart(**args)


def test_part_sorts_and_refusals():
    t = tensor("w", (8, 4))
    u = tensor("a", (8, 4))
    p = part([t, u], [frag(t, (4, 0), (4, 4), R()), frag(t, (0, 0), (4, 4), R()),
                      frag(u, (0, 0), (8, 4), R())])
    assert [x.tensor_id for x in p.tensors] == ["a", "w"]
    ids = [f.placement_fragment_id for f in p.fragments]
    assert ids == sorted(ids)
    assert part([], []).fragments == ()                          # a part may be empty
    f0 = frag(t, (0, 0), (4, 4), R())
    cases = [
        (dict(rank=0), "placement part rank must be a ParallelRank"),
        (dict(tensors=("w",)), "WeightPlacementPart tensors must contain TensorDescriptor"),
        (dict(fragments=(frag(t, (0, 0), (4, 4), R(tp=1)),)),
         "placement part fragment rank differs from part rank"),
        (dict(tensors=(t, t)), "duplicate tensor_id: w"),
        (dict(fragments=(f0, PlacementFragment("w", (4, 0), (4, 4), 32, R(),
                                               placement_fragment_id=f0.fragment_id))),
         f"duplicate fragment_id: {f0.fragment_id}"),
        (dict(fragments=(f0, frag(t, (0, 0), (4, 4), R(), pipeline_stage_id=1))),
         "duplicate logical fragment for tensor and parallel rank"),
        (dict(tensors=()), "unknown tensor_id: w"),
        (dict(fragments=(PlacementFragment("w", (0,), (4,), 8, R()),)),
         "fragment rank mismatch"),
        (dict(fragments=(frag(t, (6, 0), (4, 4), R()),)), "fragment is out of bounds"),
        (dict(fragments=(PlacementFragment("w", (0, 0), (4, 4), 16, R(),
                                           placement_fragment_id="x"),)),
         "fragment byte size mismatch: x: expected 32, got 16"),
        (dict(fragments=(f0, frag(t, (2, 0), (4, 4), R()))),
         "logical fragment boxes overlap for tensor and parallel rank"),
        (dict(tensors=(t, u)), "placement part contains an unreferenced tensor: a"),
        (dict(participant_id=""), "participant_id must be a non-empty string"),
        (dict(weight_generation=-1), "weight_generation must be at least 0"),
    ]
    for change, message in cases:
        args = dict(tensors=(t,), fragments=(f0,))
        args.update(change)
        with pytest.raises(ValueError, match=message):
            part(**args)


# --- the complete placement -------------------------------------------------

def placement_id_by_hand(p):
    """The documented canonical placement content, from the fields."""
    def fragment(f):
        out = {"placement_fragment_id": f.placement_fragment_id, "tensor_id": f.tensor_id,
               "global_offset": list(f.global_offset), "local_shape": list(f.local_shape),
               "nbytes": f.nbytes, "rank": vars(f.rank), "aliases": list(f.aliases)}
        if f.pipeline_stage_id is not None:
            out["pipeline_stage_id"] = f.pipeline_stage_id
        return out

    def axis(a):
        d = {"semantics": {SplitAxis: "split", ReplicatedAxis: "replicated",
                           OwnershipAxis: "ownership"}[type(a)], "kind": a.kind}
        if isinstance(a, SplitAxis):
            d["dim"] = a.dim
        return d
    tp = p.topology
    body = {"schema": "complete-weight-placement", "resource_id": p.resource_id,
            "revision": p.revision, "weight_generation": p.weight_generation,
            "placement_set_id": p.placement_set_id,
            "topology": {"tp_size": tp.tp_size, "pp_size": tp.pp_size, "ep_size": tp.ep_size,
                         "dp_size": tp.dp_size, "topology_id": tp.topology_id,
                         "participants": [{"participant_id": x.participant_id,
                                           "rank": vars(x.rank)} for x in tp.participants]},
            "tensors": [{"tensor_id": t.tensor_id, "global_shape": list(t.global_shape),
                         "dtype": t.dtype, "itemsize": t.itemsize,
                         "shard_dims": list(t.shard_dims),
                         "layout_fingerprint": t.layout_fingerprint,
                         "parallel_axes": [axis(a) for a in t.parallel_axes],
                         "layer_id": t.layer_id, "expert_id": t.expert_id}
                        for t in sorted(p.tensors, key=lambda t: t.tensor_id)],
            "parts": [{"participant_id": q.participant_id, "rank": vars(q.rank),
                       "fragments": [fragment(f) for f in sorted(
                           q.fragments, key=lambda f: f.placement_fragment_id)]}
                      for q in sorted(p.parts, key=lambda q: q.participant_id)]}
    return "sha256:" + sha(canon(body))


def test_tp_placement_id_and_digest_by_hand():
    t = tensor("w", (8, 4))
    n = tensor("norm", (4,), axes=(ReplicatedAxis("tp"),))
    frags = tp_rows(t, 2) + [frag(n, (0,), (4,), R(tp=i)) for i in range(2)]
    p = placement(topology(tp=2), [n, t], frags[::-1])
    assert p.placement_id == placement_id_by_hand(p)
    assert p.resource_kind is ResourceKind.MODEL_WEIGHT
    assert p.digest == sha(weight_placement_to_json(p))
    assert [x.tensor_id for x in p.tensors] == ["norm", "w"]
    assert [q.participant_id for q in p.parts] == ["worker-0", "worker-1"]
    # input order does not matter
    assert placement(topology(tp=2), [t, n], frags).placement_id == p.placement_id
    with pytest.raises(TypeError):
        dataclasses.replace(p, revision="other")
    back = pickle.loads(pickle.dumps(p))
    assert back == p and back.digest == p.digest


def test_pp_ep_dp_layouts_are_accepted():
    # PP: layer 0 on stage 0, layer 1 on stage 1, each TP-split over 2.
    l0 = tensor("l0", (4, 4), axes=(OwnershipAxis("pp"), SplitAxis("tp", 0)), layer_id=0)
    l1 = tensor("l1", (4, 4), axes=(OwnershipAxis("pp"), SplitAxis("tp", 0)), layer_id=1)
    frags = tp_rows(l0, 2, pp=0) + tp_rows(l1, 2, pp=1)
    p = placement(topology(tp=2, pp=2), [l0, l1], frags)
    assert p.placement_id == placement_id_by_hand(p)
    # EP: 4 experts split over ep=2, replicated over tp=2.
    e = tensor("experts", (4, 8), axes=(SplitAxis("ep", 0), ReplicatedAxis("tp")))
    frags = [frag(e, (2 * i, 0), (2, 8), R(ep=i, tp=j)) for i in range(2) for j in range(2)]
    placement(topology(tp=2, ep=2), [e], frags)
    # EP ownership: expert 3 held only by ep rank 1.
    x = tensor("x3", (4,), axes=(OwnershipAxis("ep"),), expert_id=3)
    placement(topology(ep=2), [x], [frag(x, (0,), (4,), R(ep=1))])
    # DP replicas of a TP-split tensor.
    w = tensor("w", (8, 4), axes=(ReplicatedAxis("dp"), SplitAxis("tp", 0)))
    placement(topology(tp=2, dp=2), [w], tp_rows(w, 2, dp=0) + tp_rows(w, 2, dp=1))
    # An undeclared ep that is a function of tp (ep = tp // 2) is accepted.
    ranks = [R(tp=t, ep=t // 2) for t in range(4)]
    s = tensor("s", (8,), axes=(SplitAxis("tp", 0),))
    placement(topology(tp=4, ep=2, ranks=ranks), [s],
              [frag(s, (2 * t,), (2,), R(tp=t, ep=t // 2)) for t in range(4)])
    # Several boxes per rank along a non-split dimension, rank order free.
    c = tensor("c", (4, 4), axes=(SplitAxis("tp", 0),))
    placement(topology(tp=2), [c], [frag(c, (2, 0), (2, 2), R()), frag(c, (2, 2), (2, 2), R()),
                                     frag(c, (0, 0), (2, 4), R(tp=1))])


def test_placement_refusals():
    t = tensor("w", (8, 4))
    topo = topology(tp=2)
    good = tp_rows(t, 2)
    base = placement(topo, [t], good)
    parts = list(base.parts)

    def build(**kw):
        args = dict(resource_id="model", revision="rev", weight_generation=1,
                    placement_set_id="set", topology=topo, parts=parts)
        args.update(kw)
        return WeightPlacementManifest(**args)
    assert build() == base
    other_part = dataclasses.replace(parts[1], participant_id="worker-9")
    cases = [
        (dict(topology=None), "topology must be a ParallelTopology"),
        (dict(parts=[parts[0], parts[0], parts[1]]), "duplicate placement participant"),
        (dict(parts=[parts[0]]), "missing topology participant: worker-1"),
        (dict(parts=parts + [other_part]), "unknown topology participant: worker-9"),
        (dict(revision="x"), "placement part revision differs"),
        (dict(resource_id="x"), "placement part resource_id differs"),
        (dict(weight_generation=2), "placement part weight_generation differs"),
        (dict(placement_set_id="x"), "placement part placement_set_id differs"),
        (dict(parts=[parts[0], dataclasses.replace(parts[1], rank=R(), fragments=(
            frag(t, (4, 0), (4, 4), R()),))]), "placement part rank differs from topology"),
        (dict(placement_id="sha256:0"), "placement_id does not match canonical logical "
                                        "content"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            build(**change)
    t_other = tensor("w", (8, 4), layout_fingerprint="other")
    with pytest.raises(ValueError, match="placement part tensor descriptor mismatch: w"):
        build(parts=[parts[0], dataclasses.replace(parts[1], tensors=(t_other,))])
    fid = good[0].fragment_id
    dup = PlacementFragment("w", (4, 0), (4, 4), 32, R(tp=1), placement_fragment_id=fid)
    with pytest.raises(ValueError, match=f"duplicate fragment_id: {fid}"):
        placement(topo, [t], [good[0], dup])
    empty = [dataclasses.replace(q, tensors=(), fragments=()) for q in parts]
    with pytest.raises(ValueError, match="global weight placement must contain tensors"):
        build(parts=empty)


@pytest.mark.parametrize("name, make, message", [
    ("not covered", lambda t: [frag(t, (0, 0), (4, 4), R())],
     "global placement tensor is not fully covered: w"),
    ("dp undeclared", None, "requires explicit parallel semantics for active undeclared dp "
                            "axis: w"),
    ("split wrong dim", lambda t: [frag(t, (0, 0), (8, 2), R()),
                                   frag(t, (0, 2), (8, 2), R(tp=1))],
     "split-axis rank geometry conflicts with declared dimension: w: tp -> dim 0"),
    ("split missing rank", lambda t: [frag(t, (0, 0), (8, 4), R())],
     "missing or unexpected split-axis participant for w"),
])
def test_coverage_refusals(name, make, message):
    t = tensor("w", (8, 4))
    if make is None:
        topo = topology(tp=2, dp=2)
        frags = tp_rows(t, 2, dp=0) + tp_rows(t, 2, dp=1)
    else:
        topo = topology(tp=2)
        frags = make(t)
    with pytest.raises(ValueError, match=message):
        placement(topo, [t], frags)


def test_coverage_refusals_replicas_ownership_cartesian_undeclared():
    # replicated on tp but missing rank 1
    n = tensor("n", (4,), axes=(ReplicatedAxis("tp"),))
    with pytest.raises(ValueError, match="missing or unexpected replicated-axis participant "
                                         "for n"):
        placement(topology(tp=2), [n], [frag(n, (0,), (4,), R())])
    # an owner that holds only half the tensor (owners are never combined)
    o = tensor("o", (4,), axes=(OwnershipAxis("pp"),))
    with pytest.raises(ValueError, match="global placement tensor is not fully covered: o"):
        placement(topology(pp=2), [o], [frag(o, (0,), (2,), R()), frag(o, (2,), (2,), R(pp=1))])
    # two split axes whose participants are not a Cartesian product
    e = tensor("e", (4, 4), axes=(SplitAxis("ep", 0), SplitAxis("tp", 1)))
    ranks = [R(ep=0, tp=0), R(ep=1, tp=1), R(ep=0, tp=1)]
    with pytest.raises(ValueError, match="non-Cartesian split-axis participant mapping"):
        placement(topology(ep=2, tp=2, ranks=ranks), [e],
                  [frag(e, (0, 0), (2, 2), R()), frag(e, (2, 0), (2, 4), R(ep=1, tp=1)),
                   frag(e, (0, 2), (2, 2), R(tp=1))])
    # undeclared tp used at one coordinate only
    s = tensor("s", (4,), axes=(), shard=())
    with pytest.raises(ValueError, match="requires explicit parallel semantics for active "
                                         "undeclared tp axis: s"):
        placement(topology(tp=2), [s], [frag(s, (0,), (4,), R())])
    # undeclared ep varying with nothing declared varying
    with pytest.raises(ValueError, match="varies across undeclared ep axis: s"):
        placement(topology(ep=2), [s], [frag(s, (0,), (4,), R()), frag(s, (0,), (4,), R(ep=1))])
    # undeclared ep varying independently of the declared tp
    ranks = [R(tp=t, ep=e) for t in range(2) for e in range(2)]
    w = tensor("w", (4,), axes=(SplitAxis("tp", 0),))
    with pytest.raises(ValueError, match="varies independently across undeclared ep axis: w"):
        placement(topology(tp=2, ep=2, ranks=ranks), [w],
                  [frag(w, (2 * r.tp,), (2,), r) for r in ranks])


def test_aliases_and_from_fragments_refusals():
    a = tensor("a", (4,), axes=(), shard=())
    b = tensor("b", (4,), axes=(), shard=())
    topo = topology()
    tied = [frag(a, (0,), (4,), R(), aliases=("a", "b")),
            frag(b, (0,), (4,), R(), aliases=("a", "b"))]
    placement(topo, [a, b], tied)
    with pytest.raises(ValueError, match="alias group is not declared consistently for "
                                         "tensor: b"):
        placement(topo, [a, b], [tied[0], frag(b, (0,), (4,), R())])
    with pytest.raises(ValueError, match="alias group references unknown tensor: c"):
        placement(topo, [a], [frag(a, (0,), (4,), R(), aliases=("a", "c"))])
    with pytest.raises(ValueError, match="placement fragment rank has no topology "
                                         "participant"):
        placement(topo, [a], [frag(a, (0,), (4,), R(tp=1))])
    with pytest.raises(ValueError, match="duplicate tensor_id in placement tensors"):
        placement(topo, [a, a], [frag(a, (0,), (4,), R())])
    with pytest.raises(ValueError, match="unknown tensor_id: b"):
        placement(topo, [a], [frag(a, (0,), (4,), R()), frag(b, (0,), (4,), R())])
    with pytest.raises(ValueError, match="global placement contains an unreferenced tensor: "
                                         "b"):
        placement(topo, [a, b], [frag(a, (0,), (4,), R())])


# --- runtime bindings -------------------------------------------------------

def bind(p, participant, base=1 << 20, **kw):
    part = p.part(participant)
    frags = []
    addr = base
    for f in part.fragments:
        t = p.tensor(f.tensor_id)
        strides = []
        step = t.itemsize
        for n in reversed(f.local_shape):
            strides.insert(0, step)
            step *= n
        frags.append(RuntimeBindingFragment(
            f.placement_fragment_id, "rt-" + f.placement_fragment_id, addr, f.nbytes,
            "host", "127.0.0.1:1", "cpu", t.itemsize, f.local_shape, strides, addr,
            f.nbytes, 0))
        addr += f.nbytes
    args = dict(resource_id=p.resource_id, placement_id=p.placement_id,
                placement_digest=p.digest, instance_id="inst", generation=1,
                lease_id="lease", revision=p.revision, participant_id=participant,
                fragments=tuple(frags))
    args.update(kw)
    return WeightRuntimeBindingManifest(**args)


def test_runtime_bindings_validate_and_refuse():
    t = tensor("w", (8, 4))
    p = placement(topology(tp=2), [t], tp_rows(t, 2))
    b0, b1 = bind(p, "worker-0"), bind(p, "worker-1", base=1 << 30)
    assert b0.resource_kind is ResourceKind.MODEL_WEIGHT
    validate_runtime_binding(p, b0)
    validate_runtime_bindings(p, [b1, b0])
    with pytest.raises(ValueError, match="placement_digest must be a lowercase SHA-256 "
                                         "digest"):
        bind(p, "worker-0", placement_digest="A" * 64)
    with pytest.raises(ValueError, match="duplicate placement fragment in runtime binding"):
        bind(p, "worker-0", fragments=b0.fragments * 2)
    f = b0.fragments[0]
    cases = [
        (dataclasses.replace(b0, placement_digest="0" * 64),
         "placement digest and runtime binding placement digest differ"),
        (dataclasses.replace(b0, placement_id="sha256:x"),
         "placement_id and runtime binding placement_id differ"),
        (dataclasses.replace(b0, revision="x"),
         "placement and runtime binding revision differ"),
        (dataclasses.replace(b0, participant_id="zz"),
         "unknown runtime binding participant: zz"),
        (dataclasses.replace(b0, fragments=()), "missing placement fragment in runtime "
                                                "binding"),
        (dataclasses.replace(b0, fragments=b1.fragments), "unknown placement fragment in "
                                                          "runtime binding"),
        (dataclasses.replace(b0, fragments=(dataclasses.replace(
            f, nbytes=16, local_shape=(2, 4)),)), "runtime binding byte size does not match "
                                                  "placement"),
        (dataclasses.replace(b0, fragments=(dataclasses.replace(
            f, local_shape=(2, 8), strides_bytes=(16, 2)),)),
         "runtime binding local_shape does not match placement"),
        (dataclasses.replace(b0, fragments=(dataclasses.replace(
            f, itemsize=1, strides_bytes=(4, 1)),)),
         "runtime binding itemsize does not match placement"),
        (dataclasses.replace(b0, fragments=(dataclasses.replace(
            f, strides_bytes=(2, 8)),)),
         "runtime binding stride does not describe a canonical contiguous view"),
    ]
    for binding, message in cases:
        with pytest.raises(ValueError, match=message):
            validate_runtime_binding(p, binding)
    with pytest.raises(ValueError, match="placement must be a WeightPlacementManifest"):
        validate_runtime_binding(None, b0)
    with pytest.raises(ValueError, match="binding must be a WeightRuntimeBindingManifest"):
        validate_runtime_binding(p, None)
    with pytest.raises(ValueError, match="duplicate runtime binding participant"):
        validate_runtime_bindings(p, [b0, b0])
    with pytest.raises(ValueError, match="missing runtime binding participant: worker-1"):
        validate_runtime_bindings(p, [b0])
    # same instance, overlapping addresses across two bindings
    with pytest.raises(ValueError, match="runtime binding address ranges overlap"):
        validate_runtime_bindings(p, [b0, bind(p, "worker-1", base=(1 << 20) + 16)])
    # a different worker is a different address space: no overlap
    far = bind(p, "worker-1")
    far = dataclasses.replace(far, fragments=tuple(
        dataclasses.replace(x, worker_id="other") for x in far.fragments))
    validate_runtime_bindings(p, [b0, far])


def test_runtime_binding_exact_alias_and_storage_overlap():
    a = tensor("a", (4,), axes=(), shard=())
    b = tensor("b", (4,), axes=(), shard=())
    p = placement(topology(), [a, b], [frag(a, (0,), (4,), R(), aliases=("a", "b")),
                                       frag(b, (0,), (4,), R(), aliases=("a", "b"))])
    bb = bind(p, "worker-0")
    shared = tuple(dataclasses.replace(x, address=1 << 20, storage_address=1 << 20)
                   for x in bb.fragments)
    validate_runtime_binding(p, dataclasses.replace(bb, fragments=shared))   # tied: allowed
    q = placement(topology(), [a, b], [frag(a, (0,), (4,), R()), frag(b, (0,), (4,), R())])
    qb = bind(q, "worker-0")
    with pytest.raises(ValueError, match="runtime binding address ranges overlap"):
        validate_runtime_binding(q, dataclasses.replace(qb, fragments=tuple(
            dataclasses.replace(x, address=1 << 20, storage_address=1 << 20)
            for x in qb.fragments)))
    # views in distinct but overlapping allocations
    x0, x1 = qb.fragments
    x1 = dataclasses.replace(x1, storage_address=x0.storage_address + 4,
                             storage_offset_bytes=x1.address - x0.storage_address - 4,
                             storage_nbytes=64)
    with pytest.raises(ValueError, match="runtime binding storage allocation ranges overlap"):
        validate_runtime_binding(q, dataclasses.replace(qb, fragments=(x0, x1)))
    # the same allocation holding both views is fine
    big = [dataclasses.replace(x, storage_address=x0.storage_address,
                               storage_offset_bytes=x.address - x0.storage_address,
                               storage_nbytes=16) for x in (x0, qb.fragments[1])]
    validate_runtime_binding(q, dataclasses.replace(qb, fragments=tuple(big)))


# --- placement JSON ---------------------------------------------------------

# §12 of the fact sheet, written out in full (the ids are the documented ones).
WORKED_JSON = (
    '{"parts":[{"fragments":[{"aliases":[],"global_offset":[0,0],"local_shape":[4,4],'
    '"nbytes":32,"placement_fragment_id":"placement-0","rank":{"dp":0,"ep":0,"pp":0,"tp":0},'
    '"tensor_id":"layers.2.experts.3.w1"}],"participant_id":"worker-0",'
    '"rank":{"dp":0,"ep":0,"pp":0,"tp":0}}],'
    '"placement_id":"sha256:618f22d9994d8d327a7afd97f3cfcf1f6680a337d71ea3a8162a7827ed0346db",'
    '"placement_set_id":"placement-set-7","resource_id":"model","resource_kind":"model_weight",'
    '"revision":"revision","tensors":[{"dtype":"bfloat16","expert_id":3,"global_shape":[4,4],'
    '"itemsize":2,"layer_id":2,"layout_fingerprint":"test:qwen:bf16:v1",'
    '"parallel_axes":[{"dim":0,"kind":"tp","semantics":"split"}],"shard_dims":[0],'
    '"tensor_id":"layers.2.experts.3.w1"}],"topology":{"dp_size":1,"ep_size":1,'
    '"participants":[{"participant_id":"worker-0","rank":{"dp":0,"ep":0,"pp":0,"tp":0}}],'
    '"pp_size":1,"topology_id":"sha256:017d6c66843ba96ccd39ed1b118b7635fee56677a41dc3d39c48b7'
    'bb3ccccdf4","tp_size":1},"weight_generation":7}')


def worked_example():
    t = TensorDescriptor("layers.2.experts.3.w1", (4, 4), "bfloat16", 2, (0,),
                         "test:qwen:bf16:v1", (SplitAxis("tp", 0),), 2, 3)
    return placement(topology(), [t], [PlacementFragment(
        t.tensor_id, (0, 0), (4, 4), 32, R(), placement_fragment_id="placement-0")],
        resource_id="model", revision="revision", weight_generation=7,
        placement_set_id="placement-set-7")


def test_worked_example_byte_exact():
    p = worked_example()
    assert p.placement_id == ("sha256:618f22d9994d8d327a7afd97f3cfcf1f6680a337d71ea3a8162a"
                              "7827ed0346db")
    assert p.placement_id == placement_id_by_hand(p)
    assert weight_placement_to_json(p) == WORKED_JSON
    assert p.digest == sha(WORKED_JSON)
    assert p.digest == "a2ade0db5b17691e6a7c16d589d0498a64359eef91589addc870590899512d98"
    parsed = weight_placement_from_json(WORKED_JSON)
    assert parsed == p and parsed.digest == p.digest
    assert weight_placement_from_json(WORKED_JSON.encode()) == p
    assert weight_placement_to_json(parsed) == WORKED_JSON


def test_json_round_trip_with_stage_and_null_stage():
    l0 = tensor("l0", (4, 4), axes=(OwnershipAxis("pp"), SplitAxis("tp", 0)))
    p = placement(topology(tp=2, pp=2), [l0],
                  [frag(l0, (2 * i, 0), (2, 4), R(tp=i, pp=1), pipeline_stage_id=1)
                   for i in range(2)])
    text = weight_placement_to_json(p)
    assert '"pipeline_stage_id":1' in text
    assert weight_placement_from_json(text) == p
    doc = json.loads(WORKED_JSON)
    doc["parts"][0]["fragments"][0]["pipeline_stage_id"] = None
    assert weight_placement_from_json(json.dumps(doc)) == worked_example()


def mutated(edit):
    doc = json.loads(WORKED_JSON)
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("raw, message", [
    ("{", "placement manifest is not valid JSON"),
    ("[]", "placement manifest must be a JSON object"),
    ('{"a":1,"a":2}', "duplicate JSON field: a"),
    ('{"a":NaN}', "non-finite JSON number is unsupported: NaN"),
    (mutated(lambda d: d.update(model_id="m")), "placement manifest schema fields do not "
                                                "match contract"),
    (mutated(lambda d: d["topology"].pop("dp_size")), "parallel topology schema fields do "
                                                      "not match contract"),
    (mutated(lambda d: d["tensors"][0].update(partition_dim=0)),
     "placement tensor 0 schema fields do not match contract"),
    (mutated(lambda d: d["parts"][0].update(split_dim=0)),
     "placement part 0 schema fields do not match contract"),
    (mutated(lambda d: d["parts"][0]["fragments"][0].update(offset=0)),
     "placement fragment 0 has an invalid schema"),
    (mutated(lambda d: d.update(resource_kind="kv_cache")), "resource_kind must be "
                                                            "model_weight"),
    (mutated(lambda d: d.update(weight_generation=-1)), "weight_generation must be an "
                                                        "integer at least 0"),
    (mutated(lambda d: d["topology"].update(tp_size=True)), "tp_size must be an integer at "
                                                            "least 1"),
    (mutated(lambda d: d["tensors"][0]["parallel_axes"][0].update(semantics="sharded")),
     "unsupported parallel axis semantics: sharded"),
    (mutated(lambda d: d["parts"][0]["fragments"][0].update(tensor_id="zz")),
     "unknown tensor_id in placement part: zz"),
    (mutated(lambda d: d["tensors"].append(dict(d["tensors"][0], tensor_id="spare"))),
     "placement JSON contains an unreferenced tensor: spare"),
    (mutated(lambda d: d.update(placement_id="sha256:" + "0" * 64)),
     "placement_id does not match canonical logical content"),
    (mutated(lambda d: d["topology"].update(topology_id="sha256:" + "0" * 64)),
     "topology_id does not match canonical topology"),
])
def test_placement_json_refusals(raw, message):
    with pytest.raises(ValueError, match=message):
        weight_placement_from_json(raw)


# --- the stored WeightManifest ----------------------------------------------

GROUP = "weights/default/model/revision/9"


def stored_example(**kw):
    t = TensorDescriptor("layers.0.weight", (8,), "uint8", 1, (0,), "global-planner:uint8:v1",
                         (SplitAxis("tp", 0),))
    args = dict(namespace="default", resource_id="model", revision="revision",
                weight_generation=9, group_id=GROUP, manifest_key=GROUP + "/manifest",
                tensors=(t,), fragments=(StoredFragment(
                    "store-source-full", "layers.0.weight", (0,), (8,), GROUP + "/payload/0",
                    0, 8),), created_at="2026-08-19T00:00:00Z")
    args.update(kw)
    return WeightManifest(**args)


STORED_JSON = (
    '{"created_at":"2026-08-19T00:00:00Z","fragments":[{"aliases":[],"fragment_id":'
    '"store-source-full","global_offset":[0],"local_shape":[8],"nbytes":8,"object_key":'
    '"weights/default/model/revision/9/payload/0","object_offset":0,"tensor_id":'
    '"layers.0.weight"}],"group_id":"weights/default/model/revision/9","manifest_key":'
    '"weights/default/model/revision/9/manifest","namespace":"default","resource_id":"model",'
    '"resource_kind":"model_weight","revision":"revision","tensors":[{"dtype":"uint8",'
    '"expert_id":null,"global_shape":[8],"itemsize":1,"layer_id":null,"layout_fingerprint":'
    '"global-planner:uint8:v1","parallel_axes":[{"dim":0,"kind":"tp","semantics":"split"}],'
    '"shard_dims":[0],"tensor_id":"layers.0.weight"}],"weight_generation":9}')


def test_stored_manifest_digest_and_json_byte_exact():
    m = stored_example()
    assert m.to_json() == STORED_JSON
    assert m.manifest_digest == sha(STORED_JSON)
    assert m.manifest_digest == ("7bc8630d753c748e9e818846a8fe23aa961c1f4d197adb2d196a3539"
                                 "304ccf9b")
    assert WeightManifest.from_json(STORED_JSON) == m
    assert WeightManifest.from_dict(json.loads(STORED_JSON)) == m
    ident = m.manifest_identity
    assert ident == StoredManifestIdentity("default", "model", "revision", 9, GROUP,
                                           GROUP + "/manifest", m.manifest_digest)
    assert validate_weight_manifest_snapshot(m) == m
    assert [f.name for f in dataclasses.fields(m)][-1] == "manifest_digest"
    # non-ASCII stays UTF-8 in the text and in the digest
    u = stored_example(created_at="2026-08-19 ünïcode")
    assert "ünïcode" in u.to_json() and u.manifest_digest == sha(u.to_json())
    # an empty manifest is accepted
    stored_example(tensors=(), fragments=())


def test_manifest_reattestation_cache_never_keeps_a_stale_digest(monkeypatch):
    """A manifest re-attested before and unchanged since is not rebuilt
    again; any field replaced in place -- on the manifest, a fragment or a
    tensor's axis -- is rebuilt and refused, never passed on the digest it
    was attested with."""
    from mooncake.reshard.weight import storage_manifest
    rebuilds = []
    real = storage_manifest._check_stored
    monkeypatch.setattr(storage_manifest, "_check_stored",
                        lambda m: (rebuilds.append(m), real(m))[1])

    def attest(m):
        before = len(rebuilds)
        try:
            return validate_weight_manifest_snapshot(m)
        finally:
            attest.rebuilt = len(rebuilds) > before

    m = stored_example()
    assert attest(m) == m and attest.rebuilt
    assert attest(m) is m and not attest.rebuilt, "an unchanged manifest is rebuilt again"
    # a pickled copy is another object: proven afresh
    c = pickle.loads(pickle.dumps(m))
    assert attest(c) == m and attest.rebuilt
    # still valid, but no longer the bytes the digest was taken of
    stale = stored_example()
    attest(stale)
    object.__setattr__(stale, "created_at", "2026-08-20T00:00:00Z")
    with pytest.raises(ValueError, match="snapshot is invalid: fields differ"):
        attest(stale)
    assert attest.rebuilt
    with pytest.raises(ValueError, match="fields differ"):  # and again: nothing was kept
        attest(stale)
    # the digest itself replaced
    forged = stored_example()
    attest(forged)
    object.__setattr__(forged, "manifest_digest", "0" * 64)
    with pytest.raises(ValueError, match="fields differ"):
        attest(forged)
    # a fragment's field replaced in place (the tuple holding it is the same)
    moved = stored_example()
    attest(moved)
    object.__setattr__(moved.fragments[0], "object_key", "elsewhere/payload/0")
    with pytest.raises(ValueError, match="payload object_key does not belong"):
        attest(moved)
    # an axis inside a tensor descriptor, two levels down
    axis = stored_example()
    attest(axis)
    object.__setattr__(axis.tensors[0].parallel_axes[0], "kind", "ep")
    with pytest.raises(ValueError, match="fields differ"):
        attest(axis)
    assert attest.rebuilt
    # fields replaced by equal objects: proven again, then kept
    same = stored_example()
    attest(same)
    object.__setattr__(same, "fragments", tuple(dataclasses.replace(f) for f in same.fragments))
    assert attest(same) == same and attest.rebuilt
    assert attest(same) is same and not attest.rebuilt

    def attested_twice():
        x = stored_example()
        validate_weight_manifest_snapshot(x)
        validate_weight_manifest_snapshot(x)
        return weakref.ref(x)
    gone = attested_twice()   # what is remembered does not keep it alive
    rebuilds.clear()          # (the counting hook above saw it built)
    gc.collect()
    assert gone() is None, "a re-attested manifest is kept alive by the cache"


def test_stored_manifest_keeps_input_order():
    a = TensorDescriptor("a", (4,), "uint8", 1, (), "fp", ())
    b = TensorDescriptor("b", (4,), "uint8", 1, (), "fp", ())
    fa = StoredFragment("fa", "a", (0,), (4,), GROUP + "/payload/0", 0, 4)
    fb = StoredFragment("fb", "b", (0,), (4,), GROUP + "/payload/0", 4, 4)
    m1 = stored_example(tensors=(a, b), fragments=(fa, fb))
    m2 = stored_example(tensors=(b, a), fragments=(fb, fa))
    assert m1.manifest_digest != m2.manifest_digest


def test_stored_manifest_refusals():
    t = TensorDescriptor("w", (8,), "uint8", 1, (), "fp", ())
    key = GROUP + "/payload/0"

    def sf(fid, off, n, obj_off=None, tid="w", aliases=(), key=key):
        return StoredFragment(fid, tid, (off,), (n,), key, off if obj_off is None else obj_off,
                              n, aliases)
    cases = [
        (dict(manifest_key=GROUP + "/other"), "manifest_key does not belong to manifest group"),
        (dict(fragments=(sf("f", 0, 8, key="elsewhere/0"),)),
         "payload object_key does not belong to manifest group"),
        (dict(fragments=(sf("f", 0, 4), sf("g", 0, 4, 8))), "duplicate fragment geometry: w"),
        (dict(fragments=(sf("f", 0, 4),)), "tensor is not fully covered: w"),
        (dict(fragments=()), "tensor is not fully covered: w"),
        (dict(fragments=(sf("f", 0, 4), sf("g", 4, 4, 2))),
         "stored fragment object ranges overlap: f and g in " + key),
        (dict(fragments=(sf("f", 0, 4), sf("f", 4, 4))), "duplicate fragment_id: f"),
        (dict(fragments=(sf("f", 0, 8, tid="x"),)), "unknown tensor_id: x"),
        (dict(fragments=(StoredFragment("f", "w", (0,), (8,), key, 0, 7),)),
         "fragment byte size mismatch: f: expected 8, got 7"),
        (dict(fragments=(sf("f", 4, 8),)), "fragment is out of bounds: f"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            stored_example(tensors=(t,), **change)
    # adjacent ranges, and the same offset in different objects, are allowed
    stored_example(tensors=(t,), fragments=(sf("f", 0, 4), sf("g", 4, 4)))
    stored_example(tensors=(t,), fragments=(sf("f", 0, 4, 0), sf("g", 4, 4, 0,
                                                                 key=GROUP + "/payload/1")))
    # aliases
    u = TensorDescriptor("u", (8,), "uint8", 1, (), "fp", ())
    v = TensorDescriptor("v", (8,), "uint16", 2, (), "fp", ())
    tied = (sf("f", 0, 8, tid="w", aliases=("u", "w")),
            sf("g", 0, 8, 8, tid="u", aliases=("u", "w")))
    stored_example(tensors=(t, u), fragments=tied)
    with pytest.raises(ValueError, match="stored alias references unknown tensor: u"):
        stored_example(tensors=(t,), fragments=tied[:1])
    with pytest.raises(ValueError, match="stored alias group is incomplete for fragment "
                                         "geometry"):
        stored_example(tensors=(t, u), fragments=(tied[0], sf("g", 0, 8, 8, tid="u")))
    with pytest.raises(ValueError, match="stored alias tensor descriptors differ"):
        stored_example(tensors=(t, dataclasses.replace(v, tensor_id="u", dtype="int8",
                                                       itemsize=1)), fragments=tied)
    with pytest.raises(ValueError, match="object_offset must be at least 0"):
        StoredFragment("f", "w", (0,), (8,), key, -1, 8)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(checksum="x"), "weight manifest schema fields do not match contract"),
    (lambda d: d["tensors"][0].pop("layer_id"), "tensor descriptor schema fields do not "
                                                "match contract"),
    (lambda d: d["fragments"][0].update(rank=0), "stored fragment schema fields do not match "
                                                 "contract"),
    (lambda d: d.update(resource_kind="kv_cache"), "weight manifest resource_kind must be "
                                                   "model_weight"),
])
def test_stored_manifest_json_refusals(edit, message):
    doc = json.loads(STORED_JSON)
    edit(doc)
    with pytest.raises(ValueError, match=message):
        WeightManifest.from_json(json.dumps(doc))
    with pytest.raises(ValueError, match="weight manifest is not valid JSON"):
        WeightManifest.from_json("{")
    with pytest.raises(ValueError, match="duplicate JSON field: a"):
        WeightManifest.from_json('{"a":1,"a":2}')
    with pytest.raises(ValueError, match="non-finite JSON number is unsupported: Infinity"):
        WeightManifest.from_json('{"a":Infinity}')

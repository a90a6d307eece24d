# SPDX-License-Identifier: Apache-2.0
"""Placement and runtime-binding contracts of model weights (upstream's
``mooncake.reshard.weight.manifest``).

A `ParallelTopology` names the participants (workers) and their
`ParallelRank`.  Each participant contributes a `WeightPlacementPart`: the
tensors it holds and the `PlacementFragment` boxes.  A
`WeightPlacementManifest` is the complete global placement — every
participant's part — proven against each tensor's declared axis semantics
and identified by a content hash (`placement_id`) and a digest of its JSON.
A running instance binds its part to memory with a
`WeightRuntimeBindingManifest`; `validate_runtime_binding(s)` proves the
binding matches the placement byte for byte.

Every refusal is a ValueError whose message is upstream's, so that code
written against upstream's contracts sees the same errors here.

May import: reshard._checks, contracts, geometry and weight.types; never the
planner or serde, which are built on its types (the planner installs
``_derive_columns`` here as it is imported).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import product
from math import prod
from operator import attrgetter
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    Tuple)
from typing import Callable as _Callable

from .._checks import (c_strides, canonical_id, check_instances, check_int,
                       check_ints, check_optional_int, check_sequence, check_str, check_u64,
                       is_sha256_hex, sha256_hex)
from .._checks import canonical_json as _canonical_json
from ..contracts import (ResourceKind, RuntimeBindingFragment,
                         validate_resource_binding_identity)
from ..geometry import box_contains, boxes_exactly_cover, boxes_overlap
from .types import (AXIS_ORDER, OwnershipAxis, ParallelRank, ReplicatedAxis, SplitAxis,
                    TensorDescriptor)

__all__ = ["ParallelRank", "ParallelTopology", "PlacementFragment", "TopologyParticipant",
           "WeightPlacementManifest", "WeightPlacementPart", "RuntimeBindingFragment",
           "WeightRuntimeBindingManifest", "SplitAxis", "ReplicatedAxis", "OwnershipAxis",
           "TensorDescriptor", "validate_runtime_binding", "validate_runtime_bindings"]


# --- fragments -------------------------------------------------------------

def check_aliases(aliases: Any, tensor_id: str) -> Tuple[str, ...]:
    """An alias group (tied weights): sorted, unique tensor ids, at least two,
    including the fragment's own tensor; empty when the tensor is not tied."""
    out = check_sequence("aliases", aliases)
    for a in out:
        check_str("alias", a)
    if len(set(out)) != len(out):
        raise ValueError("aliases must not contain duplicates")
    out = tuple(sorted(out))
    if out:
        if len(out) < 2:
            raise ValueError("alias group must contain at least two tensor IDs")
        if tensor_id not in out:
            raise ValueError("alias group must contain the fragment tensor_id")
    return out


@dataclass(frozen=True, init=False)
class PlacementFragment:
    """The box [global_offset, global_offset + local_shape) of one tensor
    held by the participant at `rank`, as C-order bytes (`nbytes`).  Without
    an explicit id, the id is the hash of the logical content."""

    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    nbytes: int
    rank: ParallelRank
    pipeline_stage_id: Optional[int] = None
    aliases: Tuple[str, ...] = ()
    placement_fragment_id: Optional[str] = None

    def __init__(self, tensor_id: str, global_offset: Sequence[int],
                 local_shape: Sequence[int], nbytes: int, rank: ParallelRank,
                 pipeline_stage_id: Optional[int] = None, aliases: Sequence[str] = (),
                 placement_fragment_id: Optional[str] = None) -> None:
        check_str("tensor_id", tensor_id)
        offset = check_ints("global_offset", global_offset, 0)
        shape = check_ints("local_shape", local_shape, 1)
        check_u64("nbytes", nbytes, 1)
        if not isinstance(rank, ParallelRank):
            raise ValueError("rank must be a ParallelRank")
        check_optional_int("pipeline_stage_id", pipeline_stage_id, 0)
        group = check_aliases(aliases, tensor_id)
        s = object.__setattr__
        s(self, "tensor_id", tensor_id)
        s(self, "global_offset", offset)
        s(self, "local_shape", shape)
        s(self, "nbytes", nbytes)
        s(self, "rank", rank)
        s(self, "pipeline_stage_id", pipeline_stage_id)
        s(self, "aliases", group)
        if placement_fragment_id is None or placement_fragment_id == "":
            placement_fragment_id = canonical_id(self._logical_wire())
        else:
            check_str("placement_fragment_id", placement_fragment_id)
        s(self, "placement_fragment_id", placement_fragment_id)

    def _logical_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"schema": "weight-placement-fragment",
                               "tensor_id": self.tensor_id,
                               "global_offset": list(self.global_offset),
                               "local_shape": list(self.local_shape), "nbytes": self.nbytes,
                               "rank": self.rank.to_wire(), "aliases": list(self.aliases)}
        if self.pipeline_stage_id is not None:
            out["pipeline_stage_id"] = self.pipeline_stage_id
        return out

    @property
    def fragment_id(self) -> str:
        return self.placement_fragment_id

    def to_wire(self) -> Dict[str, Any]:
        out = self._logical_wire()
        del out["schema"]
        out["placement_fragment_id"] = self.placement_fragment_id
        return out


def check_fragment_boxes(tensors: Mapping[str, TensorDescriptor], fragments: Iterable[Any],
                         seen_ids: Optional[set] = None) -> None:
    """The per-fragment checks shared by placements and stored manifests:
    unique ids, a known tensor, the tensor's rank, inside it, and nbytes
    equal to the box's C-order size."""
    seen = set() if seen_ids is None else seen_ids
    for f in fragments:
        fid = f.fragment_id
        if fid in seen:
            raise ValueError(f"duplicate fragment_id: {fid}")
        seen.add(fid)
        t = tensors.get(f.tensor_id)
        if t is None:
            raise ValueError(f"unknown tensor_id: {f.tensor_id}")
        if len(f.global_offset) != t.ndim or len(f.local_shape) != t.ndim:
            raise ValueError(f"fragment rank mismatch: {fid}")
        if not box_contains((0,) * t.ndim, t.global_shape, f.global_offset, f.local_shape):
            raise ValueError(f"fragment is out of bounds: {fid}")
        want = prod(f.local_shape) * t.itemsize
        if f.nbytes != want:
            raise ValueError(f"fragment byte size mismatch: {fid}: expected {want}, "
                             f"got {f.nbytes}")


def _tensor_map(tensors: Iterable[TensorDescriptor]) -> Dict[str, TensorDescriptor]:
    out: Dict[str, TensorDescriptor] = {}
    for t in tensors:
        if t.tensor_id in out:
            raise ValueError(f"duplicate tensor_id: {t.tensor_id}")
        out[t.tensor_id] = t
    return out


def _check_placement_fragments(tensors: Mapping[str, TensorDescriptor],
                               fragments: Sequence[PlacementFragment]) -> None:
    """Fragment checks of a part (or, applied to the union, of a placement):
    no rank holds the same element of a tensor twice."""
    check_fragment_boxes(tensors, fragments)
    by_rank: Dict[Tuple[str, ParallelRank], List[PlacementFragment]] = defaultdict(list)
    boxes = set()
    for f in fragments:
        key = (f.tensor_id, f.rank, f.global_offset, f.local_shape)
        if key in boxes:
            raise ValueError(f"duplicate logical fragment for tensor and parallel rank: "
                             f"{f.fragment_id}")
        boxes.add(key)
        by_rank[(f.tensor_id, f.rank)].append(f)
    for group in by_rank.values():
        if len(group) > 1 and boxes_overlap((f.global_offset, f.local_shape) for f in group):
            raise ValueError("logical fragment boxes overlap for tensor and parallel rank")


# --- topology --------------------------------------------------------------

@dataclass(frozen=True)
class TopologyParticipant:
    """One worker of a topology; `participant_id` is free text (may hold
    "/" or non-ASCII), so store keys must not embed it raw."""

    participant_id: str
    rank: ParallelRank

    def __post_init__(self) -> None:
        check_str("participant_id", self.participant_id)
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("topology participant rank must be a ParallelRank")

    def to_wire(self) -> Dict[str, Any]:
        return {"participant_id": self.participant_id, "rank": self.rank.to_wire()}


@dataclass(frozen=True, init=False)
class ParallelTopology:
    """The axis sizes and the participants.  `world_size` counts the
    participants, not the product of the sizes: axes may share workers, and
    a placement may select one DP replica while keeping dp_size."""

    tp_size: int
    pp_size: int
    ep_size: int
    dp_size: int
    participants: Tuple[TopologyParticipant, ...]
    topology_id: Optional[str] = None

    def __init__(self, *, tp_size: int, pp_size: int, ep_size: int, dp_size: int,
                 participants: Sequence[TopologyParticipant],
                 topology_id: Optional[str] = None) -> None:
        sizes = {"tp": tp_size, "pp": pp_size, "ep": ep_size, "dp": dp_size}
        for k, v in sizes.items():
            check_int(f"{k}_size", v, 1)
        parts = check_instances("participants", participants, TopologyParticipant,
                                "parallel topology participants")
        if not parts:
            raise ValueError("parallel topology participants must not be empty")
        parts = tuple(sorted(parts, key=lambda p: p.participant_id))
        ids, ranks = set(), set()
        for p in parts:
            if p.participant_id in ids:
                raise ValueError("duplicate topology participant_id")
            ids.add(p.participant_id)
            if p.rank in ranks:
                raise ValueError("duplicate topology parallel rank")
            ranks.add(p.rank)
            for k in AXIS_ORDER:
                if p.rank.coordinate(k) >= sizes[k]:
                    raise ValueError(f"{k} rank is out of range for participant "
                                     f"{p.participant_id}")
        s = object.__setattr__
        s(self, "tp_size", tp_size)
        s(self, "pp_size", pp_size)
        s(self, "ep_size", ep_size)
        s(self, "dp_size", dp_size)
        s(self, "participants", parts)
        canon = canonical_id({"schema": "weight-parallel-topology", "tp_size": tp_size,
                              "pp_size": pp_size, "ep_size": ep_size, "dp_size": dp_size,
                              "participants": [p.to_wire() for p in parts]})
        if topology_id is not None and topology_id != canon:
            raise ValueError("topology_id does not match canonical topology")
        s(self, "topology_id", canon)

    @property
    def world_size(self) -> int:
        return len(self.participants)

    def size(self, kind: str) -> int:
        return getattr(self, f"{kind}_size")

    def participant(self, participant_id: str) -> TopologyParticipant:
        for p in self.participants:
            if p.participant_id == participant_id:
                return p
        raise ValueError(f"unknown topology participant: {participant_id}")

    def to_wire(self) -> Dict[str, Any]:
        return {"tp_size": self.tp_size, "pp_size": self.pp_size, "ep_size": self.ep_size,
                "dp_size": self.dp_size, "topology_id": self.topology_id,
                "participants": [p.to_wire() for p in self.participants]}


# --- one participant's part ------------------------------------------------

@dataclass(frozen=True)
class WeightPlacementPart:
    """What one participant holds.  A part may be partial or empty; only
    the complete placement proves coverage."""

    resource_id: str
    revision: str
    weight_generation: int
    placement_set_id: str
    topology_id: str
    participant_id: str
    rank: ParallelRank
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[PlacementFragment, ...]

    def __post_init__(self) -> None:
        check_str("resource_id", self.resource_id)
        check_str("revision", self.revision)
        check_u64("weight_generation", self.weight_generation)
        check_str("placement_set_id", self.placement_set_id)
        check_str("topology_id", self.topology_id)
        check_str("participant_id", self.participant_id)
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("placement part rank must be a ParallelRank")
        tensors = check_instances("tensors", self.tensors, TensorDescriptor,
                                  "WeightPlacementPart tensors")
        fragments = check_instances("fragments", self.fragments, PlacementFragment,
                                    "WeightPlacementPart fragments")
        for f in fragments:
            if f.rank != self.rank:
                raise ValueError("placement part fragment rank differs from part rank")
        by_id = _tensor_map(tensors)
        _check_placement_fragments(by_id, fragments)
        used = {f.tensor_id for f in fragments}
        for tid in sorted(by_id):
            if tid not in used:
                raise ValueError(f"placement part contains an unreferenced tensor: {tid}")
        object.__setattr__(self, "tensors", tuple(sorted(tensors, key=lambda t: t.tensor_id)))
        object.__setattr__(self, "fragments",
                           tuple(sorted(fragments, key=lambda f: f.placement_fragment_id)))

    def to_wire(self) -> Dict[str, Any]:
        return {"participant_id": self.participant_id, "rank": self.rank.to_wire(),
                "fragments": [f.to_wire() for f in self.fragments]}


# --- the complete placement ------------------------------------------------

def _axis_prefix(message: str, tensor_id: str) -> str:
    return f"global placement tensor {message}: {tensor_id}"


def _check_undeclared_axes(t: TensorDescriptor, frags: Sequence[PlacementFragment],
                           topo: ParallelTopology) -> None:
    """An active axis the tensor does not declare must be explainable by
    the declared ones (ep = tp // 2), else the layout is ambiguous."""
    declared = [a.kind for a in t.parallel_axes]
    for k in AXIS_ORDER:
        if k in declared or topo.size(k) <= 1:
            continue
        coords = {f.rank.coordinate(k) for f in frags}
        if k in ("dp", "pp") or len(coords) == 1:
            raise ValueError(_axis_prefix(
                f"requires explicit parallel semantics for active undeclared {k} axis",
                t.tensor_id))
        mapping: Dict[Tuple[int, ...], set] = defaultdict(set)
        for f in frags:
            mapping[tuple(f.rank.coordinate(d) for d in declared)].add(f.rank.coordinate(k))
        if len(mapping) <= 1:
            raise ValueError(_axis_prefix(f"varies across undeclared {k} axis", t.tensor_id))
        if any(len(v) > 1 for v in mapping.values()):
            raise ValueError(_axis_prefix(f"varies independently across undeclared {k} axis",
                                          t.tensor_id))


def _check_split_geometry(t: TensorDescriptor, frags: Sequence[PlacementFragment],
                          members: Sequence[Any], topo: ParallelTopology) -> None:
    """The split ranks of one (owner, replica) group: every coordinate
    0..size-1 present (in the topology and in the fragments), a Cartesian
    product when several axes split, and per axis the ranks' intervals along
    the declared dimension chaining from 0 to the extent."""
    splits = [a for a in t.parallel_axes if isinstance(a, SplitAxis)]
    tid = t.tensor_id
    for a in splits:
        full = set(range(topo.size(a.kind)))
        if ({m.rank.coordinate(a.kind) for m in members} != full
                or {f.rank.coordinate(a.kind) for f in frags} != full):
            raise ValueError(f"global placement has missing or unexpected split-axis "
                             f"participant for {tid}")
    if len(splits) > 1:
        present = {tuple(f.rank.coordinate(a.kind) for a in splits) for f in frags}
        if present != set(product(*(range(topo.size(a.kind)) for a in splits))):
            raise ValueError("non-Cartesian split-axis participant mapping cannot prove "
                             f"rank-to-dimension ownership: {tid}")
    for a in splits:
        spans: Dict[int, List[Tuple[int, int]]] = defaultdict(list)
        for f in frags:
            lo = f.global_offset[a.dim]
            spans[f.rank.coordinate(a.kind)].append((lo, lo + f.local_shape[a.dim]))
        merged = []
        ok = True
        for ivs in spans.values():
            ivs.sort()
            lo, hi = ivs[0]
            for s, e in ivs[1:]:
                if s > hi:
                    ok = False      # a hole inside one rank's slice
                hi = max(hi, e)
            merged.append((lo, hi))
        merged.sort()
        pos = 0
        for lo, hi in merged:
            if lo != pos:
                ok = False
            pos = hi
        if not ok or pos != t.global_shape[a.dim]:
            raise ValueError(f"split-axis rank geometry conflicts with declared dimension: "
                             f"{tid}: {a.kind} -> dim {a.dim}")


def _check_tensor_coverage(t: TensorDescriptor, frags: Sequence[PlacementFragment],
                           topo: ParallelTopology) -> None:
    tid = t.tensor_id
    _check_undeclared_axes(t, frags, topo)
    owners = [a.kind for a in t.parallel_axes if isinstance(a, OwnershipAxis)]
    replicas = [a.kind for a in t.parallel_axes if isinstance(a, ReplicatedAxis)]

    def coords(rank: ParallelRank, kinds: Sequence[str]) -> Tuple[int, ...]:
        return tuple(rank.coordinate(k) for k in kinds)

    by_owner: Dict[Tuple[int, ...], List[PlacementFragment]] = defaultdict(list)
    for f in frags:
        by_owner[coords(f.rank, owners)].append(f)
    # Owners are never combined: each one must hold the whole tensor.
    for owner, ofrags in sorted(by_owner.items()):
        members = [p for p in topo.participants if coords(p.rank, owners) == owner]
        have = {coords(f.rank, replicas) for f in ofrags}
        if have != {coords(p.rank, replicas) for p in members}:
            raise ValueError(f"global placement has missing or unexpected replicated-axis "
                             f"participant for {tid}")
        by_replica: Dict[Tuple[int, ...], List[PlacementFragment]] = defaultdict(list)
        for f in ofrags:
            by_replica[coords(f.rank, replicas)].append(f)
        for replica, group in sorted(by_replica.items()):
            if not boxes_exactly_cover((0,) * t.ndim, t.global_shape,
                                       [(f.global_offset, f.local_shape) for f in group]):
                raise ValueError(_axis_prefix("is not fully covered", tid))
            gmembers = [p for p in members if coords(p.rank, replicas) == replica]
            _check_split_geometry(t, group, gmembers, topo)


def _check_aliases_consistent(tensors: Mapping[str, TensorDescriptor],
                              fragments: Sequence[PlacementFragment]) -> None:
    by_tensor: Dict[str, List[PlacementFragment]] = defaultdict(list)
    for f in fragments:
        by_tensor[f.tensor_id].append(f)
    for f in fragments:
        for member in f.aliases:
            if member not in tensors:
                raise ValueError(f"alias group references unknown tensor: {member}")
            if any(g.aliases != f.aliases for g in by_tensor[member]):
                raise ValueError(f"alias group is not declared consistently for tensor: "
                                 f"{member}")


# Per-instance caches derived from an immutable manifest, never pickled.
_DERIVED = ("_native_cache", "_fragment_index")

_eager = threading.local()


#: planner.derive_columns, installed by the planner as it is imported (the
#: planner is built on this module's types, so this module does not import
#: it).  The package imports the planner right after this module, so every
#: manifest constructed after ``import mooncake.reshard.weight`` finds it;
#: None only while the package itself is being imported.
_derive_columns: Optional[_Callable[[Any, Optional[Tuple[Any, ...]]], None]] = None


def derive_planner_columns(manifest: Any, hint: Optional[Tuple[Any, ...]] = None) -> None:
    """A large manifest derives the planner's columns as it is constructed
    (planner.derive_columns), unless it is rebuilt only to be compared
    (`no_planner_columns`)."""
    if not getattr(_eager, "off", False) and _derive_columns is not None:
        _derive_columns(manifest, hint)


def _placement_json(placement: "WeightPlacementManifest") -> str:
    """The canonical JSON of a placement (serde.weight_placement_to_json,
    which checks its argument first; here so that `digest` needs no import
    of serde, which is built on this module)."""
    return _canonical_json({
        "resource_kind": placement.resource_kind.value,
        "resource_id": placement.resource_id, "revision": placement.revision,
        "weight_generation": placement.weight_generation,
        "placement_set_id": placement.placement_set_id,
        "placement_id": placement.placement_id,
        "topology": placement.topology.to_wire(),
        "tensors": [t.to_wire() for t in placement.tensors],
        "parts": [p.to_wire() for p in placement.parts]})


@contextmanager
def _thread_flag(state: threading.local, name: str, value: bool, default: bool
                 ) -> Iterator[None]:
    """``state.name`` is ``value`` in this block (this thread), then what
    it was (``default`` when unset)."""
    old = getattr(state, name, default)
    setattr(state, name, value)
    try:
        yield
    finally:
        setattr(state, name, old)


def no_planner_columns() -> Any:
    """Manifests constructed in this block (this thread) derive no planner
    columns: a snapshot rebuilt to prove it is unchanged is never planned."""
    return _thread_flag(_eager, "off", True, False)


@dataclass(frozen=True, init=False)
class WeightPlacementManifest:
    """The complete placement of one weight revision over a topology: a
    part for every participant, every tensor covered as its axes declare.
    `placement_id` hashes the logical content; `digest` is the SHA-256 of
    the placement JSON (`weight_placement_to_json`)."""

    resource_id: str
    placement_id: str
    revision: str
    weight_generation: int
    placement_set_id: str
    topology: ParallelTopology
    parts: Tuple[WeightPlacementPart, ...]
    tensors: Tuple[TensorDescriptor, ...] = field(init=False)
    fragments: Tuple[PlacementFragment, ...] = field(init=False)
    # Cached digest; an init field so that dataclasses.replace (which would
    # skip re-deriving it) fails with TypeError, as upstream's does.
    _digest_cache: Optional[str] = field(default=None, compare=False, repr=False)

    def __init__(self, *, resource_id: str, revision: str, weight_generation: int,
                 placement_set_id: str, topology: ParallelTopology,
                 parts: Sequence[WeightPlacementPart],
                 placement_id: Optional[str] = None) -> None:
        check_str("resource_id", resource_id)
        check_str("revision", revision)
        check_u64("weight_generation", weight_generation)
        check_str("placement_set_id", placement_set_id)
        if not isinstance(topology, ParallelTopology):
            raise ValueError("topology must be a ParallelTopology")
        parts = check_instances("parts", parts, WeightPlacementPart,
                                "WeightPlacementManifest parts")
        if placement_id is not None:
            check_str("placement_id", placement_id)
        by_pid: Dict[str, WeightPlacementPart] = {}
        for p in parts:
            if p.participant_id in by_pid:
                raise ValueError("duplicate placement participant")
            by_pid[p.participant_id] = p
        known = {p.participant_id: p for p in topology.participants}
        for pid in known:
            if pid not in by_pid:
                raise ValueError(f"missing topology participant: {pid}")
        for pid in by_pid:
            if pid not in known:
                raise ValueError(f"unknown topology participant: {pid}")
        want = {"resource_id": resource_id, "revision": revision,
                "weight_generation": weight_generation, "placement_set_id": placement_set_id,
                "topology_id": topology.topology_id}
        for p in parts:
            for name, value in want.items():
                if getattr(p, name) != value:
                    raise ValueError(f"placement part {name} differs")
            if p.rank != known[p.participant_id].rank:
                raise ValueError("placement part rank differs from topology")
        tensors: Dict[str, TensorDescriptor] = {}
        for p in parts:
            for t in p.tensors:
                if tensors.setdefault(t.tensor_id, t) != t:
                    raise ValueError(f"placement part tensor descriptor mismatch: "
                                     f"{t.tensor_id}")
        fragments = [f for p in parts for f in p.fragments]
        _check_placement_fragments(tensors, fragments)
        _check_aliases_consistent(tensors, fragments)
        if not tensors:
            raise ValueError("global weight placement must contain tensors")
        if not fragments:
            raise ValueError("global weight placement must contain fragments")
        by_tensor: Dict[str, List[PlacementFragment]] = defaultdict(list)
        for f in fragments:
            by_tensor[f.tensor_id].append(f)
        for tid in sorted(tensors):
            _check_tensor_coverage(tensors[tid], by_tensor[tid], topology)
        s = object.__setattr__
        s(self, "resource_id", resource_id)
        s(self, "revision", revision)
        s(self, "weight_generation", weight_generation)
        s(self, "placement_set_id", placement_set_id)
        s(self, "topology", topology)
        s(self, "parts", tuple(sorted(parts, key=lambda p: p.participant_id)))
        s(self, "tensors", tuple(tensors[k] for k in sorted(tensors)))
        # sorted by id through their positions: the planner's columns keep
        # where each part's fragments went (ids are unique: no ties)
        ids = list(map(attrgetter("placement_fragment_id"), fragments))
        order = sorted(range(len(ids)), key=ids.__getitem__)
        s(self, "fragments", tuple(map(fragments.__getitem__, order)))
        s(self, "_digest_cache", None)
        canon = canonical_id(self._canonical_content())
        if placement_id is not None and placement_id != canon:
            raise ValueError("placement_id does not match canonical logical content")
        s(self, "placement_id", canon)
        spans, at = {}, 0
        for p in parts:
            spans[p.participant_id] = (at, at + len(p.fragments))
            at += len(p.fragments)
        derive_planner_columns(self, (order, ids, spans))

    def _canonical_content(self) -> Dict[str, Any]:
        return {"schema": "complete-weight-placement", "resource_id": self.resource_id,
                "revision": self.revision, "weight_generation": self.weight_generation,
                "placement_set_id": self.placement_set_id,
                "topology": self.topology.to_wire(),
                "tensors": [t.to_wire() for t in self.tensors],
                "parts": [p.to_wire() for p in self.parts]}

    @property
    def resource_kind(self) -> ResourceKind:
        return ResourceKind.MODEL_WEIGHT

    def __getstate__(self) -> Dict[str, Any]:
        # derived indexes (planner columns, fragment index) are rebuilt on use
        return {k: v for k, v in self.__dict__.items() if k not in _DERIVED}

    @property
    def digest(self) -> str:
        if self._digest_cache is None:
            object.__setattr__(self, "_digest_cache", sha256_hex(_placement_json(self)))
        return self._digest_cache

    def part(self, participant_id: str) -> WeightPlacementPart:
        for p in self.parts:
            if p.participant_id == participant_id:
                return p
        raise ValueError(f"unknown topology participant: {participant_id}")

    def tensor(self, tensor_id: str) -> TensorDescriptor:
        for t in self.tensors:
            if t.tensor_id == tensor_id:
                return t
        raise ValueError(f"unknown tensor_id: {tensor_id}")

    @classmethod
    def from_fragments(cls, *, resource_id: str, revision: str, weight_generation: int,
                       placement_set_id: str, topology: ParallelTopology,
                       tensors: Sequence[TensorDescriptor],
                       fragments: Sequence[PlacementFragment],
                       placement_id: Optional[str] = None) -> "WeightPlacementManifest":
        """Build the parts from a flat inventory, grouping fragments by rank;
        a participant without fragments gets an empty part."""
        if not isinstance(topology, ParallelTopology):
            raise ValueError("topology must be a ParallelTopology")
        tensors = check_instances("tensors", tensors, TensorDescriptor,
                                  "WeightPlacementManifest tensors")
        fragments = check_instances("fragments", fragments, PlacementFragment,
                                    "WeightPlacementManifest fragments")
        by_id: Dict[str, TensorDescriptor] = {}
        for t in tensors:
            if t.tensor_id in by_id:
                raise ValueError("duplicate tensor_id in placement tensors")
            by_id[t.tensor_id] = t
        by_rank = {p.rank: p for p in topology.participants}
        grouped: Dict[str, List[PlacementFragment]] = {p.participant_id: []
                                                       for p in topology.participants}
        for f in fragments:
            p = by_rank.get(f.rank)
            if p is None:
                raise ValueError(f"placement fragment rank has no topology participant: "
                                 f"{f.fragment_id}")
            if f.tensor_id not in by_id:
                raise ValueError(f"unknown tensor_id: {f.tensor_id}")
            grouped[p.participant_id].append(f)
        used = {f.tensor_id for f in fragments}
        for tid in sorted(by_id):
            if tid not in used:
                raise ValueError(f"global placement contains an unreferenced tensor: {tid}")
        parts = []
        for p in topology.participants:
            mine = grouped[p.participant_id]
            tids = sorted({f.tensor_id for f in mine})
            parts.append(WeightPlacementPart(resource_id, revision, weight_generation,
                                             placement_set_id, topology.topology_id,
                                             p.participant_id, p.rank,
                                             tuple(by_id[t] for t in tids), tuple(mine)))
        return cls(resource_id=resource_id, revision=revision,
                   weight_generation=weight_generation, placement_set_id=placement_set_id,
                   topology=topology, parts=parts, placement_id=placement_id)


# --- runtime bindings ------------------------------------------------------

@dataclass(frozen=True)
class WeightRuntimeBindingManifest:
    """One participant's live memory for its part of one exact placement
    (attested by `placement_digest`), fenced by instance, generation and
    lease."""

    resource_id: str
    placement_id: str
    placement_digest: str
    instance_id: str
    generation: int
    lease_id: str
    revision: str
    participant_id: str
    fragments: Tuple[RuntimeBindingFragment, ...]

    def __post_init__(self) -> None:
        check_str("resource_id", self.resource_id)
        check_str("placement_id", self.placement_id)
        check_str("placement_digest", self.placement_digest)
        if not is_sha256_hex(self.placement_digest):
            raise ValueError("placement_digest must be a lowercase SHA-256 digest")
        check_str("instance_id", self.instance_id)
        check_u64("generation", self.generation)
        check_str("lease_id", self.lease_id)
        check_str("revision", self.revision)
        check_str("participant_id", self.participant_id)
        frags = check_instances("fragments", self.fragments, RuntimeBindingFragment,
                                "WeightRuntimeBindingManifest fragments")
        pids, fids = set(), set()
        for f in frags:
            if f.placement_fragment_id in pids:
                raise ValueError("duplicate placement fragment in runtime binding")
            pids.add(f.placement_fragment_id)
            if f.fragment_id in fids:
                raise ValueError("duplicate runtime fragment_id in runtime binding")
            fids.add(f.fragment_id)
        object.__setattr__(self, "fragments",
                           tuple(sorted(frags, key=lambda f: f.placement_fragment_id)))

    @property
    def resource_kind(self) -> ResourceKind:
        return ResourceKind.MODEL_WEIGHT


def _exact_alias(placement: WeightPlacementManifest, a: RuntimeBindingFragment,
                 b: RuntimeBindingFragment) -> bool:
    """Tied weights may share memory: same bytes, one declared group holding
    both tensors, same box, descriptors equal apart from the id."""
    if (a.address, a.nbytes) != (b.address, b.nbytes):
        return False
    fa = _fragment(placement, a.placement_fragment_id)
    fb = _fragment(placement, b.placement_fragment_id)
    if not fa.aliases or fa.aliases != fb.aliases or fa.tensor_id == fb.tensor_id:
        return False
    if (fa.global_offset, fa.local_shape) != (fb.global_offset, fb.local_shape):
        return False
    ta, tb = placement.tensor(fa.tensor_id), placement.tensor(fb.tensor_id)
    return ta.to_wire() | {"tensor_id": ""} == tb.to_wire() | {"tensor_id": ""}


def _fragment(placement: WeightPlacementManifest, fid: str) -> PlacementFragment:
    index = placement.__dict__.get("_fragment_index")
    if index is None:
        index = {f.placement_fragment_id: f for f in placement.fragments}
        object.__setattr__(placement, "_fragment_index", index)
    return index[fid]


def _check_overlaps(placement: WeightPlacementManifest,
                    frags: Sequence[Tuple[str, RuntimeBindingFragment]]) -> None:
    spaces: Dict[Tuple[str, str, str], List[RuntimeBindingFragment]] = defaultdict(list)
    for instance, f in frags:
        spaces[(instance, f.worker_id, f.device)].append(f)
    for space, items in spaces.items():
        items = sorted(items, key=lambda f: (f.address, f.placement_fragment_id))
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                if b.address >= a.address + a.nbytes:
                    break
                if not _exact_alias(placement, a, b):
                    raise ValueError(f"runtime binding address ranges overlap: "
                                     f"{a.placement_fragment_id} and "
                                     f"{b.placement_fragment_id} in {space}")
        allocs = sorted({(f.storage_address, f.storage_nbytes) for f in items})
        for (a0, n0), (a1, _) in zip(allocs, allocs[1:]):
            if a1 < a0 + n0:
                raise ValueError(f"runtime binding storage allocation ranges overlap in "
                                 f"{space}")


def _validate_one(placement: Any, binding: Any) -> None:
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    if not isinstance(binding, WeightRuntimeBindingManifest):
        raise ValueError("binding must be a WeightRuntimeBindingManifest")
    validate_resource_binding_identity(placement, binding)
    if placement.revision != binding.revision:
        raise ValueError("placement and runtime binding revision differ")
    part = None
    for p in placement.parts:
        if p.participant_id == binding.participant_id:
            part = p
    if part is None:
        raise ValueError(f"unknown runtime binding participant: {binding.participant_id}")
    mine = {f.placement_fragment_id: f for f in part.fragments}
    bound = {f.placement_fragment_id for f in binding.fragments}
    for f in binding.fragments:
        if f.placement_fragment_id not in mine:
            raise ValueError(f"unknown placement fragment in runtime binding: "
                             f"{f.placement_fragment_id}")
    for fid in sorted(mine):
        if fid not in bound:
            raise ValueError(f"missing placement fragment in runtime binding: {fid}")
    for f in binding.fragments:
        p = mine[f.placement_fragment_id]
        if f.nbytes != p.nbytes:
            raise ValueError("runtime binding byte size does not match placement")
        if f.local_shape != p.local_shape:
            raise ValueError("runtime binding local_shape does not match placement")
        if f.itemsize != placement.tensor(p.tensor_id).itemsize:
            raise ValueError("runtime binding itemsize does not match placement")
        if f.strides_bytes != c_strides(f.local_shape, f.itemsize):
            raise ValueError("runtime binding stride does not describe a canonical "
                             "contiguous view")


def validate_runtime_binding(placement: WeightPlacementManifest,
                             binding: WeightRuntimeBindingManifest) -> None:
    """Prove one participant's binding: same placement (id, digest,
    revision), exactly its fragments, each a canonical contiguous view of
    the right size, and no two views sharing memory unless declared tied."""
    _validate_one(placement, binding)
    _check_overlaps(placement, [(binding.instance_id, f) for f in binding.fragments])


def validate_runtime_bindings(placement: WeightPlacementManifest,
                              bindings: Sequence[WeightRuntimeBindingManifest]) -> None:
    """Every non-empty participant's binding, exactly once, and no overlap
    between bindings that share an instance."""
    bindings = check_sequence("bindings", bindings)
    seen = set()
    for b in bindings:
        pid = getattr(b, "participant_id", None)
        if pid in seen:
            raise ValueError("duplicate runtime binding participant")
        seen.add(pid)
    for b in bindings:
        _validate_one(placement, b)
    _check_overlaps(placement, [(b.instance_id, f) for b in bindings for f in b.fragments])
    need = {p.participant_id for p in placement.parts if p.fragments}
    for pid in sorted(need):
        if pid not in seen:
            raise ValueError(f"missing runtime binding participant: {pid}")
    for pid in sorted(seen):
        if pid not in need:
            raise ValueError(f"unknown runtime binding participant: {pid}")

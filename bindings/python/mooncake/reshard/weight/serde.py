# SPDX-License-Identifier: Apache-2.0
"""Placement JSON (upstream's ``weight_placement_to_json`` /
``weight_placement_from_json``).

The text is compact JSON with sorted keys, so two equal placements give the
same bytes and `WeightPlacementManifest.digest` is the SHA-256 of it.
Parsing is strict — exact key sets, no duplicate keys, no NaN — and
rebuilds through the constructors, so both the topology id and the
placement id in the document must be the canonical ones.

May import: reshard._checks, weight.manifest and weight.types.
"""

from __future__ import annotations

from typing import Any, List, Union

# canonical_json: used by manifest._placement_json now; still importable from here.
from .._checks import canonical_json, check_keys, json_int, load_json  # noqa: F401
from .manifest import (ParallelTopology, PlacementFragment, TopologyParticipant,
                       WeightPlacementManifest, WeightPlacementPart, _placement_json)
from .types import rank_from_wire, tensor_from_wire

_TOP_KEYS = ("resource_kind", "resource_id", "revision", "weight_generation",
             "placement_set_id", "placement_id", "topology", "tensors", "parts")
_TOPOLOGY_KEYS = ("tp_size", "pp_size", "ep_size", "dp_size", "topology_id", "participants")
_PART_KEYS = ("participant_id", "rank", "fragments")
_FRAGMENT_KEYS = ("placement_fragment_id", "tensor_id", "global_offset", "local_shape",
                  "nbytes", "rank", "aliases")


def weight_placement_to_json(placement: WeightPlacementManifest) -> str:
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    return _placement_json(placement)


def _list(name: str, value: Any) -> List[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a sequence")
    return value


def _topology(obj: Any) -> ParallelTopology:
    check_keys("parallel topology", obj, _TOPOLOGY_KEYS)
    participants = []
    for i, p in enumerate(_list("participants", obj["participants"])):
        check_keys(f"topology participant {i}", p, ("participant_id", "rank"))
        participants.append(TopologyParticipant(
            p["participant_id"], rank_from_wire(p["rank"], f"topology participant {i} rank")))
    sizes = {k: json_int(k, obj[k], 1) for k in ("tp_size", "pp_size", "ep_size", "dp_size")}
    return ParallelTopology(**sizes, participants=participants, topology_id=obj["topology_id"])


def _fragment(obj: Any, label: str) -> PlacementFragment:
    if not isinstance(obj, dict):
        raise ValueError(f"{label} has an invalid schema")
    keys = set(obj)
    extra = keys - set(_FRAGMENT_KEYS)
    if not set(_FRAGMENT_KEYS) <= keys or not extra <= {"pipeline_stage_id"}:
        raise ValueError(f"{label} has an invalid schema")
    stage = obj.get("pipeline_stage_id")
    if stage is not None:
        json_int("pipeline_stage_id", stage, 0)
    aliases = obj["aliases"]
    if not isinstance(aliases, list):
        raise ValueError(f"{label} has an invalid schema")
    return PlacementFragment(obj["tensor_id"], obj["global_offset"], obj["local_shape"],
                             json_int("nbytes", obj["nbytes"], 1),
                             rank_from_wire(obj["rank"], f"{label} rank"),
                             stage, aliases, obj["placement_fragment_id"])


def weight_placement_from_json(raw: Union[str, bytes]) -> WeightPlacementManifest:
    doc = load_json(raw, "placement manifest")
    check_keys("placement manifest", doc, _TOP_KEYS)
    if doc["resource_kind"] != "model_weight":
        raise ValueError("placement manifest resource_kind must be model_weight")
    generation = json_int("weight_generation", doc["weight_generation"], 0)
    topology = _topology(doc["topology"])
    tensors = {}
    for i, t in enumerate(_list("tensors", doc["tensors"])):
        td = tensor_from_wire(t, f"placement tensor {i}")
        if td.tensor_id in tensors:
            raise ValueError(f"duplicate tensor_id: {td.tensor_id}")
        tensors[td.tensor_id] = td
    used = set()
    parts = []
    for i, p in enumerate(_list("parts", doc["parts"])):
        check_keys(f"placement part {i}", p, _PART_KEYS)
        frags = [_fragment(f, f"placement fragment {j}")
                 for j, f in enumerate(_list("fragments", p["fragments"]))]
        tids = []
        for f in frags:
            if f.tensor_id not in tensors:
                raise ValueError(f"unknown tensor_id in placement part: {f.tensor_id}")
            if f.tensor_id not in tids:
                tids.append(f.tensor_id)
        used.update(tids)
        parts.append(WeightPlacementPart(
            doc["resource_id"], doc["revision"], generation, doc["placement_set_id"],
            topology.topology_id, p["participant_id"],
            rank_from_wire(p["rank"], f"placement part {i} rank"),
            tuple(tensors[t] for t in tids), tuple(frags)))
    for tid in sorted(tensors):
        if tid not in used:
            raise ValueError(f"placement JSON contains an unreferenced tensor: {tid}")
    return WeightPlacementManifest(resource_id=doc["resource_id"], revision=doc["revision"],
                                   weight_generation=generation,
                                   placement_set_id=doc["placement_set_id"],
                                   topology=topology, parts=parts,
                                   placement_id=doc["placement_id"])

# SPDX-License-Identifier: Apache-2.0
"""The stored (committed) weight manifest, as upstream's
``mooncake.reshard.weight.storage_manifest``.

A `WeightManifest` says where each logical box of each tensor lies in the
store: a `StoredFragment` is a byte range of one payload object.  Each
tensor is covered exactly once (replicas are stored once), payload ranges
never share bytes, and `manifest_digest` is the SHA-256 of `to_json()`.
Tensors and fragments keep their input order — it is hashed — so builders
sort them first.

May import: reshard._checks, contracts, geometry, weight.manifest and
weight.types.
"""

from __future__ import annotations

import hashlib
import json
import operator
import weakref
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from .._checks import (check_instances, check_int, check_ints, check_keys, check_str,
                       check_u64, is_sha256_hex, json_int, load_json)
from ..contracts import ResourceKind
from ..geometry import boxes_exactly_cover
from .manifest import (check_aliases, check_fragment_boxes, derive_planner_columns,
                       no_planner_columns)
from .types import TENSOR_KEYS, TensorDescriptor, tensor_from_wire

_TOP_KEYS = ("resource_kind", "namespace", "resource_id", "revision", "weight_generation",
             "group_id", "manifest_key", "tensors", "fragments", "created_at")
_FRAGMENT_KEYS = ("fragment_id", "tensor_id", "global_offset", "local_shape", "object_key",
                  "object_offset", "nbytes", "aliases")


@dataclass(frozen=True)
class StoredFragment:
    """The box of one tensor stored as C-order bytes at
    [object_offset, object_offset + nbytes) of the object `object_key`."""

    fragment_id: str
    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    object_key: str
    object_offset: int
    nbytes: int
    aliases: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_str("fragment_id", self.fragment_id)
        check_str("tensor_id", self.tensor_id)
        offset = check_ints("global_offset", self.global_offset, 0)
        shape = check_ints("local_shape", self.local_shape, 1)
        check_str("object_key", self.object_key)
        check_int("object_offset", self.object_offset, 0)
        check_int("nbytes", self.nbytes, 1)
        group = check_aliases(self.aliases, self.tensor_id)
        object.__setattr__(self, "global_offset", offset)
        object.__setattr__(self, "local_shape", shape)
        object.__setattr__(self, "aliases", group)

    def to_wire(self) -> Dict[str, Any]:
        return {"fragment_id": self.fragment_id, "tensor_id": self.tensor_id,
                "global_offset": list(self.global_offset),
                "local_shape": list(self.local_shape), "object_key": self.object_key,
                "object_offset": self.object_offset, "nbytes": self.nbytes,
                "aliases": list(self.aliases)}


@dataclass(frozen=True)
class StoredManifestIdentity:
    """Where a manifest is and which bytes it had: a reader compares
    `content_sha256` with the SHA-256 of what it fetched."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    content_sha256: str

    def __post_init__(self) -> None:
        for name in ("namespace", "resource_id", "revision", "group_id", "manifest_key"):
            check_str(name, getattr(self, name))
        check_u64("weight_generation", self.weight_generation)
        if not is_sha256_hex(self.content_sha256):
            raise ValueError("content_sha256 must be a lowercase SHA-256 digest")


def _check_stored(m: "WeightManifest") -> None:
    if m.manifest_key != m.group_id + "/manifest":
        raise ValueError("manifest_key does not belong to manifest group")
    payload = m.group_id + "/payload/"
    for f in m.fragments:
        if not f.object_key.startswith(payload):
            raise ValueError("payload object_key does not belong to manifest group")
    tensors: Dict[str, TensorDescriptor] = {}
    for t in m.tensors:
        if t.tensor_id in tensors:
            raise ValueError(f"duplicate tensor_id: {t.tensor_id}")
        tensors[t.tensor_id] = t
    check_fragment_boxes(tensors, m.fragments)
    # Tied tensors: every member stores its own copy of each aliased box.
    geometry: Dict[Tuple[Any, ...], List[StoredFragment]] = defaultdict(list)
    for f in m.fragments:
        if f.aliases:
            for member in f.aliases:
                if member not in tensors:
                    raise ValueError(f"stored alias references unknown tensor: {member}")
            geometry[(f.aliases, f.global_offset, f.local_shape, f.nbytes)].append(f)
    for (group, *_), frags in geometry.items():
        if sorted(f.tensor_id for f in frags) != list(group):
            raise ValueError("stored alias group is incomplete for fragment geometry")
        first = tensors[group[0]].to_wire() | {"tensor_id": ""}
        if any(tensors[t].to_wire() | {"tensor_id": ""} != first for t in group[1:]):
            raise ValueError("stored alias tensor descriptors differ")
    by_tensor: Dict[str, List[StoredFragment]] = defaultdict(list)
    for f in m.fragments:
        by_tensor[f.tensor_id].append(f)
    for tid, t in tensors.items():
        boxes = [(f.global_offset, f.local_shape) for f in by_tensor[tid]]
        if len(set(boxes)) != len(boxes):
            raise ValueError(f"duplicate fragment geometry: {tid}")
        if not boxes_exactly_cover((0,) * t.ndim, t.global_shape, boxes):
            raise ValueError(f"tensor is not fully covered: {tid}")
    by_object: Dict[str, List[StoredFragment]] = defaultdict(list)
    for f in m.fragments:
        by_object[f.object_key].append(f)
    for key, frags in by_object.items():
        frags = sorted(frags, key=lambda f: (f.object_offset, f.fragment_id))
        for a, b in zip(frags, frags[1:]):
            if b.object_offset < a.object_offset + a.nbytes:
                raise ValueError(f"stored fragment object ranges overlap: {a.fragment_id} "
                                 f"and {b.fragment_id} in {key}")


@dataclass(frozen=True)
class WeightManifest:
    """One committed weight snapshot: its identity and location
    (`group_id`, `manifest_key`), the tensors, and where each box is."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[StoredFragment, ...]
    created_at: str
    manifest_digest: str = field(init=False)

    def __post_init__(self) -> None:
        for name in ("namespace", "resource_id", "revision", "group_id", "manifest_key"):
            check_str(name, getattr(self, name))
        check_u64("weight_generation", self.weight_generation)
        tensors = check_instances("tensors", self.tensors, TensorDescriptor,
                                  "WeightManifest tensors")
        fragments = check_instances("fragments", self.fragments, StoredFragment,
                                    "WeightManifest fragments")
        check_str("created_at", self.created_at)
        object.__setattr__(self, "tensors", tensors)
        object.__setattr__(self, "fragments", fragments)
        _check_stored(self)
        object.__setattr__(self, "manifest_digest",
                           hashlib.sha256(self.to_json().encode("utf-8")).hexdigest())
        derive_planner_columns(self)

    def __getstate__(self) -> Dict[str, Any]:
        # the planner's derived columns are rebuilt on use, never pickled
        return {k: v for k, v in self.__dict__.items() if k != "_native_cache"}

    @property
    def resource_kind(self) -> ResourceKind:
        return ResourceKind.MODEL_WEIGHT

    @property
    def manifest_identity(self) -> StoredManifestIdentity:
        return StoredManifestIdentity(self.namespace, self.resource_id, self.revision,
                                      self.weight_generation, self.group_id,
                                      self.manifest_key, self.manifest_digest)

    def to_dict(self) -> Dict[str, Any]:
        return {"resource_kind": self.resource_kind.value, "namespace": self.namespace,
                "resource_id": self.resource_id, "revision": self.revision,
                "weight_generation": self.weight_generation, "group_id": self.group_id,
                "manifest_key": self.manifest_key,
                "tensors": [t.to_wire() for t in self.tensors],
                "fragments": [f.to_wire() for f in self.fragments],
                "created_at": self.created_at}

    def to_json(self) -> str:
        # The one place that keeps non-ASCII as is: the digest hashes UTF-8.
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, raw: Union[str, bytes]) -> "WeightManifest":
        return cls.from_dict(load_json(raw, "weight manifest", "weight manifest "))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "WeightManifest":
        if not isinstance(doc, Mapping):
            raise ValueError("weight manifest must be a JSON object")
        doc = dict(doc)
        check_keys("weight manifest", doc, _TOP_KEYS)
        if doc["resource_kind"] != "model_weight":
            raise ValueError("weight manifest resource_kind must be model_weight")
        if not isinstance(doc["tensors"], list):
            raise ValueError("tensors must be a sequence")
        if not isinstance(doc["fragments"], list):
            raise ValueError("fragments must be a sequence")
        tensors = []
        for t in doc["tensors"]:
            check_keys("tensor descriptor", t, TENSOR_KEYS)
            tensors.append(tensor_from_wire(t, "tensor descriptor"))
        fragments = []
        for f in doc["fragments"]:
            check_keys("stored fragment", f, _FRAGMENT_KEYS)
            if not isinstance(f["aliases"], list):
                raise ValueError("stored fragment schema fields do not match contract")
            fragments.append(StoredFragment(
                f["fragment_id"], f["tensor_id"], f["global_offset"], f["local_shape"],
                f["object_key"], json_int("object_offset", f["object_offset"], 0),
                json_int("nbytes", f["nbytes"], 1), tuple(f["aliases"])))
        return cls(doc["namespace"], doc["resource_id"], doc["revision"],
                   json_int("weight_generation", doc["weight_generation"], 0),
                   doc["group_id"], doc["manifest_key"], tuple(tensors), tuple(fragments),
                   doc["created_at"])


# Re-attestation without the rebuild.  A manifest re-attested before whose
# fields -- down to every tensor's and fragment's own fields -- still hold
# the very same objects is the manifest that was proven then: its digest
# cannot be stale.  What can change a frozen dataclass in place is
# object.__setattr__, which makes a field hold another object; strings,
# ints and enum members cannot change, tuples only through what they hold
# (walked too).  Anything else (a list, an array: changeable in place) is
# not provable this way and is rebuilt every time.  A load re-attests its
# plan's manifest first: the rebuild (validation and the JSON digest) took
# ~2 ms of each 1 GiB load (bench/README.md, weights).  Keyed by id() with
# a weak reference (an unpickled copy is another object: attested afresh);
# the objects walked are held, so no id is reused while an entry lives.
_ATTESTED_MAX = 16
_attested: "OrderedDict[int, Tuple[Any, List[Any]]]" = OrderedDict()
_LEAF_TYPES = frozenset((str, int, float, bool, type(None)))
# per frozen dataclass type: its fields' values as a tuple, in one call
_field_values: Dict[type, Callable[[Any], Tuple[Any, ...]]] = {}


def _values_getter(names: Tuple[str, ...]) -> Callable[[Any], Tuple[Any, ...]]:
    if len(names) > 1:
        return operator.attrgetter(*names)
    one = operator.attrgetter(*names) if names else None
    return lambda v: (one(v),) if one is not None else ()


def _held(value: Any, out: List[Any]) -> bool:
    """Append ``value`` and every object it holds, depth first; False when
    something in it could change without a field being replaced."""
    out.append(value)
    t = type(value)
    if t in _LEAF_TYPES or isinstance(value, Enum):
        return True
    if t is tuple:
        held = value
    else:
        get = _field_values.get(t)
        if get is None:
            if not (is_dataclass(value) and t.__dataclass_params__.frozen):  # type: ignore
                return False
            get = _field_values.setdefault(
                t, _values_getter(tuple(f.name for f in fields(value))))
        held = get(value)
    for v in held:  # leaves here, without a call each (most of what is held)
        if type(v) in _LEAF_TYPES:
            out.append(v)
        elif not _held(v, out):
            return False
    return True


def _held_by_fields(manifest: WeightManifest) -> Optional[List[Any]]:
    """What the manifest's fields hold (not the manifest itself: an entry
    must not keep it alive), or None when that cannot be proven."""
    held: List[Any] = []
    if type(manifest) is not WeightManifest:
        return None
    for f in fields(manifest):
        if not _held(getattr(manifest, f.name), held):
            return None
    return held


def _attested_before(manifest: WeightManifest) -> Tuple[bool, Optional[List[Any]]]:
    """(proven unchanged since its last re-attestation, what it holds now or
    None when that cannot be proven)."""
    held = _held_by_fields(manifest)
    if held is None:
        return False, None
    entry = _attested.get(id(manifest))
    if entry is None or entry[0]() is not manifest or len(entry[1]) != len(held):
        return False, held
    return all(map(operator.is_, entry[1], held)), held


def _remember_attested(manifest: WeightManifest, held: List[Any]) -> None:
    key = id(manifest)
    ref = weakref.ref(manifest, lambda _r, k=key: _attested.pop(k, None))
    _attested[key] = (ref, held)
    _attested.move_to_end(key)
    while len(_attested) > _ATTESTED_MAX:
        _attested.popitem(last=False)


def validate_weight_manifest_snapshot(manifest: Any) -> WeightManifest:
    """Rebuild a manifest from its fields (a snapshot taken earlier may have
    been tampered with through object.__setattr__ or pickling).  A manifest
    proven unchanged since its last rebuild here is returned as it is."""
    held = None
    try:
        if not isinstance(manifest, WeightManifest):
            raise ValueError("not a WeightManifest")
        same, held = _attested_before(manifest)
        if same:
            return manifest
        with no_planner_columns():
            rebuilt = WeightManifest(manifest.namespace, manifest.resource_id,
                                     manifest.revision, manifest.weight_generation,
                                     manifest.group_id, manifest.manifest_key,
                                     manifest.tensors, manifest.fragments, manifest.created_at)
        if rebuilt != manifest:
            raise ValueError("fields differ")
    except ValueError as exc:
        _attested.pop(id(manifest), None)
        raise ValueError(f"weight manifest snapshot is invalid: {exc}") from None
    # remembered only when nothing was replaced while it was rebuilt (the
    # walk before and after agree): what is remembered is what was proven
    again = _held_by_fields(manifest) if held is not None else None
    if again is not None and len(again) == len(held) and all(map(operator.is_, again, held)):
        _remember_attested(manifest, held)
    return rebuilt

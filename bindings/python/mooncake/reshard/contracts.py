# SPDX-License-Identifier: Apache-2.0
"""Resource-neutral resharding contracts, as upstream's
``mooncake.reshard.contracts``.

A *resource* (today only model weights) has a *placement*: which participant
holds which logical box, identified by a content hash; a running instance
*binds* that placement to memory addresses.  The Protocols here are
structural only (not runtime-checkable), so the weight classes satisfy them
without inheriting.  ``RuntimeBindingFragment`` — one bound fragment's
address, shape and strides — lives here because it is not weight-specific.

May import: reshard._checks only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NewType, Optional, Protocol, Tuple

from ._checks import U64_MAX, c_strides, check_int, check_str, check_u64

__all__ = ["LeaseId", "ParticipantId", "PlacementFragmentId", "PlacementId",
           "PlacementManifest", "PlacementSetId", "ResourceId", "ResourceKind",
           "ResourceManifest", "RevisionId", "RuntimeBindingManifest",
           "RuntimeBindingFragment", "RuntimeFragmentId", "RuntimeInstanceId",
           "StoredFragmentId", "TensorId", "TopologyId", "StoredResourceManifest",
           "validate_resource_binding_identity"]

# Plain str at run time, distinct types for static checkers.
ResourceId = NewType("ResourceId", str)
PlacementId = NewType("PlacementId", str)
ParticipantId = NewType("ParticipantId", str)
PlacementFragmentId = NewType("PlacementFragmentId", str)
RuntimeFragmentId = NewType("RuntimeFragmentId", str)
TensorId = NewType("TensorId", str)
TopologyId = NewType("TopologyId", str)
PlacementSetId = NewType("PlacementSetId", str)
RevisionId = NewType("RevisionId", str)
RuntimeInstanceId = NewType("RuntimeInstanceId", str)
LeaseId = NewType("LeaseId", str)
StoredFragmentId = NewType("StoredFragmentId", str)


class ResourceKind(str, Enum):
    MODEL_WEIGHT = "model_weight"
    KV_CACHE = "kv_cache"        # reserved: no manifest type yet


class ResourceManifest(Protocol):
    @property
    def resource_id(self) -> ResourceId: ...

    @property
    def resource_kind(self) -> ResourceKind: ...


class PlacementManifest(ResourceManifest, Protocol):
    @property
    def placement_id(self) -> PlacementId: ...

    @property
    def digest(self) -> str: ...


class RuntimeBindingManifest(ResourceManifest, Protocol):
    @property
    def placement_id(self) -> PlacementId: ...

    @property
    def placement_digest(self) -> str: ...

    @property
    def instance_id(self) -> RuntimeInstanceId: ...

    @property
    def generation(self) -> int: ...

    @property
    def lease_id(self) -> LeaseId: ...


class StoredResourceManifest(ResourceManifest, Protocol):
    namespace: str
    group_id: str
    manifest_key: str
    created_at: str


def validate_resource_binding_identity(placement: Any, binding: Any) -> None:
    """A binding attests one exact placement: same resource, same id, same
    digest.  Checked in this order so the first difference is named."""
    if placement.resource_kind != binding.resource_kind:
        raise ValueError("placement and runtime binding resource_kind differ")
    if placement.resource_id != binding.resource_id:
        raise ValueError("placement and runtime binding resource_id differ")
    if placement.placement_id != binding.placement_id:
        raise ValueError("placement_id and runtime binding placement_id differ")
    if placement.digest != binding.placement_digest:
        raise ValueError("placement digest and runtime binding placement digest differ")


def _binding_dims(name: str, value: Any, minimum: int) -> Tuple[int, ...]:
    # Only list or tuple: a binding comes from a framework's tensor metadata,
    # where anything else is a bug worth refusing.
    if type(value) not in (tuple, list):
        raise ValueError(f"{name} must be a tuple or list")
    out = tuple(value)
    for v in out:
        check_int(name, v, minimum)
    return out


def _view_span(shape: Tuple[int, ...], strides: Tuple[int, ...], itemsize: int) -> int:
    """Bytes from the first to one past the last element of a strided view."""
    return sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize


@dataclass(frozen=True)
class RuntimeBindingFragment:
    """One placement fragment bound to live memory: `address` is the first
    byte of the view, inside the allocation [storage_address,
    storage_address + storage_nbytes).  `owner` may hold the framework
    object that keeps the memory alive; it is neither compared nor pickled."""

    placement_fragment_id: str
    fragment_id: str
    address: int
    nbytes: int
    worker_id: str
    endpoint: str
    device: str
    itemsize: int
    local_shape: Tuple[int, ...]
    strides_bytes: Tuple[int, ...]
    storage_address: int
    storage_nbytes: int
    storage_offset_bytes: int
    owner: Optional[object] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_str("placement_fragment_id", self.placement_fragment_id)
        check_str("fragment_id", self.fragment_id)
        check_u64("address", self.address, 1)       # 0 is the null sentinel
        check_u64("nbytes", self.nbytes, 1)
        if self.address + self.nbytes > U64_MAX:
            raise ValueError("address range must fit in an unsigned 64-bit integer")
        check_str("worker_id", self.worker_id)
        check_str("endpoint", self.endpoint)
        check_str("device", self.device)
        check_int("itemsize", self.itemsize, 1)
        shape = _binding_dims("local_shape", self.local_shape, 1)
        strides = _binding_dims("strides_bytes", self.strides_bytes, 0)
        if len(strides) != len(shape):
            raise ValueError("runtime stride rank differs from local_shape")
        # A stride over an extent of 1 is never used to address anything;
        # frameworks report arbitrary values there, so store the canonical one.
        canon = c_strides(shape, self.itemsize)
        strides = tuple(c if n == 1 else s for n, s, c in zip(shape, strides, canon))
        if any(s <= 0 for n, s in zip(shape, strides) if n > 1):
            raise ValueError("runtime stride must be positive for non-singleton dimensions")
        check_u64("storage_address", self.storage_address, 1)
        check_u64("storage_nbytes", self.storage_nbytes, 1)
        if self.storage_address + self.storage_nbytes > U64_MAX:
            raise ValueError("storage address range must fit in an unsigned 64-bit integer")
        check_u64("storage_offset_bytes", self.storage_offset_bytes)
        object.__setattr__(self, "local_shape", shape)
        object.__setattr__(self, "strides_bytes", strides)
        if self.address != self.storage_address + self.storage_offset_bytes:
            raise ValueError("runtime address must equal storage_address plus "
                             "storage_offset_bytes")
        span = max(self.nbytes, _view_span(shape, strides, self.itemsize))
        if self.storage_offset_bytes + span > self.storage_nbytes:
            raise ValueError("runtime view exceeds storage allocation bounds")

    def __reduce__(self):
        # The owner is a live framework object: never pickled.
        return (_rebuild_binding_fragment,
                tuple(getattr(self, f) for f in _BINDING_FIELDS))


_BINDING_FIELDS = ("placement_fragment_id", "fragment_id", "address", "nbytes", "worker_id",
                   "endpoint", "device", "itemsize", "local_shape", "strides_bytes",
                   "storage_address", "storage_nbytes", "storage_offset_bytes")


def _rebuild_binding_fragment(*args: Any) -> RuntimeBindingFragment:
    return RuntimeBindingFragment(*args)

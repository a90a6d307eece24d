# SPDX-License-Identifier: Apache-2.0
"""mooncake.reshard.contracts and mooncake.reshard.geometry against
upstream's fact sheet (../shared/reference/upstream-reshard.md §1, §2, §10):
the public names in upstream's order, the id types, ResourceKind, the
structural Protocols, RuntimeBindingFragment's validation (every refusal
with upstream's message) and normalization, binding identity, and box
geometry.  Pure contracts: no daemon is involved."""
import dataclasses
import pickle
from types import SimpleNamespace

import pytest

import mooncake.reshard as reshard
from mooncake.reshard import contracts, geometry
from mooncake.reshard import weight
from mooncake.reshard.weight import manifest as wmanifest
from mooncake.reshard.weight import planner as wplanner
from mooncake.reshard.weight import storage_manifest

U64_MAX = (1 << 64) - 1


# --- public surface ---------------------------------------------------------

def test_public_names_match_upstream_in_order():
    assert reshard.__all__ == ["ResourceKind", "ResourceManifest", "PlacementManifest",
                               "RuntimeBindingManifest"]
    assert contracts.__all__ == [
        "LeaseId", "ParticipantId", "PlacementFragmentId", "PlacementId", "PlacementManifest",
        "PlacementSetId", "ResourceId", "ResourceKind", "ResourceManifest", "RevisionId",
        "RuntimeBindingManifest", "RuntimeBindingFragment", "RuntimeFragmentId",
        "RuntimeInstanceId", "StoredFragmentId", "TensorId", "TopologyId",
        "StoredResourceManifest", "validate_resource_binding_identity"]
    assert weight.__all__ == [
        "ParallelRank", "ParallelTopology", "PlacementFragment", "WeightPlacementManifest",
        "WeightPlacementPart", "RuntimeBindingFragment", "WeightRuntimeBindingManifest",
        "SplitAxis", "ReplicatedAxis", "OwnershipAxis", "TensorDescriptor",
        "TopologyParticipant", "validate_runtime_binding", "validate_runtime_bindings",
        "weight_placement_from_json", "weight_placement_to_json", "StoredFragment",
        "WeightManifest", "LogicalTransferPlan", "LogicalTransferOperation",
        "PipelineRouteGroup", "PlacementExecutorPlan", "PlanningLimits", "TransferRegion",
        "plan_placement_transfer", "plan_placement_transfer_to_local_target",
        "plan_stored_transfer_to_target_placement"]
    assert wmanifest.__all__ == [
        "ParallelRank", "ParallelTopology", "PlacementFragment", "TopologyParticipant",
        "WeightPlacementManifest", "WeightPlacementPart", "RuntimeBindingFragment",
        "WeightRuntimeBindingManifest", "SplitAxis", "ReplicatedAxis", "OwnershipAxis",
        "TensorDescriptor", "validate_runtime_binding", "validate_runtime_bindings"]
    assert wplanner.__all__ == weight.__all__[18:]
    assert geometry.__all__ == ["LogicalBox", "OverlapRegion", "box_contains",
                                "boxes_exactly_cover", "boxes_overlap",
                                "regions_exactly_cover"]
    distinct = set(contracts.__all__) | set(weight.__all__) | set(geometry.__all__)
    assert len(distinct) == 51


def test_names_are_re_exported_by_identity():
    for name in weight.__all__:
        obj = getattr(weight, name)
        home = wplanner if name in wplanner.__all__ else (
            wmanifest if name in wmanifest.__all__ else None)
        if home is not None:
            assert getattr(home, name) is obj, name
    assert weight.RuntimeBindingFragment is contracts.RuntimeBindingFragment
    assert weight.StoredFragment is storage_manifest.StoredFragment
    assert weight.WeightManifest is storage_manifest.WeightManifest
    assert weight.LogicalTransferOperation is weight.TransferRegion
    assert reshard.ResourceKind is contracts.ResourceKind
    # reachable by module path, outside __all__
    assert storage_manifest.StoredManifestIdentity
    assert storage_manifest.validate_weight_manifest_snapshot
    from mooncake.reshard.weight.types import ParallelAxis, ParallelAxisKind, SplitAxisKind
    assert ParallelAxis and ParallelAxisKind and SplitAxisKind


def test_deliberately_absent_names():
    for name in ("WeightRuntimeManifest", "SourcePlacementManifest",
                 "TargetPlacementManifest", "BoundWeightFragment", "TransferPlan",
                 "CopyRange", "from_runtime_inventory"):
        assert not hasattr(weight, name), name
    with pytest.raises(ImportError):
        __import__("mooncake.reshard.kv_cache")
    with pytest.raises(ImportError):
        __import__("mooncake.model_weight")


def test_id_types_are_plain_str_and_resource_kind():
    for name in ("ResourceId", "PlacementId", "ParticipantId", "PlacementFragmentId",
                 "RuntimeFragmentId", "TensorId", "TopologyId", "PlacementSetId",
                 "RevisionId", "RuntimeInstanceId", "LeaseId", "StoredFragmentId"):
        value = getattr(contracts, name)("x")
        assert type(value) is str and value == "x"
    assert contracts.ResourceKind.MODEL_WEIGHT == "model_weight"
    assert contracts.ResourceKind.KV_CACHE.value == "kv_cache"
    assert isinstance(contracts.ResourceKind.MODEL_WEIGHT, str)


def test_protocols_are_structural_not_runtime_checkable():
    for proto in (contracts.ResourceManifest, contracts.PlacementManifest,
                  contracts.RuntimeBindingManifest, contracts.StoredResourceManifest):
        with pytest.raises(TypeError):
            isinstance(object(), proto)
    assert contracts.ResourceManifest not in weight.WeightPlacementManifest.__mro__


# --- RuntimeBindingFragment -------------------------------------------------

def binding_fragment(**kw):
    args = dict(placement_fragment_id="pf", fragment_id="rf", address=4096, nbytes=32,
                worker_id="w0", endpoint="127.0.0.1:1", device="cpu", itemsize=2,
                local_shape=(4, 4), strides_bytes=(8, 2), storage_address=4096,
                storage_nbytes=64, storage_offset_bytes=0)
    args.update(kw)
    return contracts.RuntimeBindingFragment(**args)


def test_binding_fragment_fields_and_normalization():
    f = binding_fragment(local_shape=[1, 4], strides_bytes=[200, 2], nbytes=8)
    assert f.local_shape == (1, 4) and f.strides_bytes == (8, 2)   # canonical on extent 1
    assert [x.name for x in dataclasses.fields(f)] == [
        "placement_fragment_id", "fragment_id", "address", "nbytes", "worker_id",
        "endpoint", "device", "itemsize", "local_shape", "strides_bytes",
        "storage_address", "storage_nbytes", "storage_offset_bytes", "owner"]
    owned = binding_fragment(owner=object())
    assert owned == binding_fragment()                 # owner is not compared
    assert "owner" not in repr(owned)
    back = pickle.loads(pickle.dumps(owned))
    assert back == owned and back.owner is None        # owner is dropped on pickle
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.address = 1


@pytest.mark.parametrize("kw, message", [
    ({"placement_fragment_id": ""}, "placement_fragment_id must be a non-empty string"),
    ({"fragment_id": 7}, "fragment_id must be a non-empty string"),
    ({"address": 0}, "address must be at least 1"),
    ({"address": True}, "address must be an integer"),
    ({"address": 1.0}, "address must be an integer"),
    ({"address": U64_MAX + 1}, "address must fit in an unsigned 64-bit integer"),
    ({"nbytes": 0}, "nbytes must be at least 1"),
    ({"address": U64_MAX - 4, "storage_address": U64_MAX - 4}, "address range must fit"),
    ({"worker_id": ""}, "worker_id must be a non-empty string"),
    ({"endpoint": ""}, "endpoint must be a non-empty string"),
    ({"device": ""}, "device must be a non-empty string"),
    ({"itemsize": 0}, "itemsize must be at least 1"),
    ({"local_shape": (4, 0)}, "local_shape must be at least 1"),
    ({"local_shape": {4, 5}}, "local_shape"),
    ({"strides_bytes": (8, -2)}, "strides_bytes must be at least 0"),
    ({"strides_bytes": (8,)}, "runtime stride rank differs from local_shape"),
    ({"strides_bytes": (0, 2)}, "runtime stride must be positive for non-singleton"),
    ({"storage_address": 0}, "storage_address must be at least 1"),
    ({"storage_nbytes": 0}, "storage_nbytes must be at least 1"),
    ({"storage_offset_bytes": -1}, "storage_offset_bytes must be at least 0"),
    ({"address": 4100}, "runtime address must equal storage_address plus "
                        "storage_offset_bytes"),
    ({"storage_nbytes": 31}, "runtime view exceeds storage allocation bounds"),
])
def test_binding_fragment_refusals(kw, message):
    with pytest.raises(ValueError, match=message):
        binding_fragment(**kw)


def test_binding_fragment_view_inside_a_larger_allocation():
    f = binding_fragment(address=4096 + 32, storage_offset_bytes=32, storage_nbytes=64)
    assert f.address == f.storage_address + f.storage_offset_bytes
    with pytest.raises(ValueError, match="exceeds storage allocation bounds"):
        binding_fragment(address=4096 + 40, storage_offset_bytes=40, storage_nbytes=64)


def test_validate_resource_binding_identity_order():
    p = SimpleNamespace(resource_kind=contracts.ResourceKind.MODEL_WEIGHT, resource_id="m",
                        placement_id="sha256:a", digest="d")
    ok = SimpleNamespace(resource_kind=contracts.ResourceKind.MODEL_WEIGHT,
                         resource_id="m", placement_id="sha256:a", placement_digest="d")
    contracts.validate_resource_binding_identity(p, ok)
    cases = [
        ({"resource_kind": contracts.ResourceKind.KV_CACHE, "resource_id": "x"},
         "placement and runtime binding resource_kind differ"),
        ({"resource_id": "x", "placement_id": "y"},
         "placement and runtime binding resource_id differ"),
        ({"placement_id": "y", "placement_digest": "e"},
         "placement_id and runtime binding placement_id differ"),
        ({"placement_digest": "e"},
         "placement digest and runtime binding placement digest differ"),
    ]
    for change, message in cases:
        b = SimpleNamespace(**{**vars(ok), **change})
        with pytest.raises(ValueError, match=message):
            contracts.validate_resource_binding_identity(p, b)


# --- geometry ---------------------------------------------------------------

def test_box_contains():
    assert geometry.box_contains((0, 0), (4, 4), (1, 1), (3, 3))
    assert not geometry.box_contains((0, 0), (4, 4), (1, 1), (4, 3))
    assert not geometry.box_contains((1,), (4,), (0,), (1,))


def test_boxes_overlap_1d_2d_3d():
    assert not geometry.boxes_overlap([((0,), (4,)), ((4,), (4,))])
    assert geometry.boxes_overlap([((4,), (4,)), ((0,), (5,))])
    # 2-D: same rows, disjoint columns; then a corner overlap.
    assert not geometry.boxes_overlap([((0, 0), (4, 2)), ((0, 2), (4, 2)), ((4, 0), (1, 4))])
    assert geometry.boxes_overlap([((0, 0), (4, 4)), ((3, 3), (2, 2))])
    assert not geometry.boxes_overlap([((0, 0, 0), (2, 2, 2)), ((0, 0, 2), (2, 2, 2))])
    assert geometry.boxes_overlap([((0, 0, 0), (2, 2, 2)), ((1, 1, 1), (2, 2, 2))])


def test_boxes_overlap_high_dimensional_budget():
    # 1500 3-D boxes all open along dim 0 and disjoint along dim 2: every
    # pair is compared, over the 1,000,000 budget.
    boxes = [((0, 0, i), (1, 1, 1)) for i in range(1500)]
    with pytest.raises(ValueError, match="high-dimensional overlap budget exceeded "
                                         "before validation"):
        geometry.boxes_overlap(boxes)
    # The same count in 2-D is a sweep, no budget.
    assert not geometry.boxes_overlap([((0, i), (1, 1)) for i in range(1500)])


def test_boxes_exactly_cover_and_regions():
    tiles = [((0, 0), (2, 4)), ((2, 0), (2, 2)), ((2, 2), (2, 2))]
    assert geometry.boxes_exactly_cover((0, 0), (4, 4), tiles)
    assert not geometry.boxes_exactly_cover((0, 0), (4, 4), tiles[:2])        # volume
    assert not geometry.boxes_exactly_cover((0, 0), (4, 4), [])               # no box
    assert not geometry.boxes_exactly_cover(
        (0, 0), (4, 4), [((0, 0), (2, 4)), ((1, 0), (2, 4)), ((3, 0), (1, 4)),
                         ((3, 0), (0, 4))])                                    # overlap
    assert not geometry.boxes_exactly_cover((0, 0), (4, 4), [((0, 0), (5, 4))])  # outside
    box = SimpleNamespace(global_offset=(2, 0), local_shape=(2, 4))
    regions = [SimpleNamespace(overlap_offset=(2, 0), overlap_shape=(2, 1)),
               SimpleNamespace(overlap_offset=(2, 1), overlap_shape=(2, 3))]
    assert geometry.regions_exactly_cover(box, regions)
    assert not geometry.regions_exactly_cover(box, regions[:1])

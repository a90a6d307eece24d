# SPDX-License-Identifier: Apache-2.0
"""Model weights: upstream's placement, binding and stored-manifest
contracts and planner, and our manifest-backed WeightStore
(docs/weights.md).

The 27 names of ``__all__`` are upstream's, in upstream's order, and are
the same objects as in the submodules (``weight.X is weight.manifest.X``).
The store's own names (``WeightStore``, ``WeightSnapshotDescriptor``,
``WeightSnapshotAdapter``, ...) are importable from here too; none clashes
with upstream's.  The store writes and loads upstream's contracts only
(``store_writer``, ``store_load``).

May import: its submodules, which it re-exports.
"""

from .manifest import (OwnershipAxis, ParallelRank, ParallelTopology, PlacementFragment,
                       ReplicatedAxis, RuntimeBindingFragment, SplitAxis, TensorDescriptor,
                       TopologyParticipant, WeightPlacementManifest, WeightPlacementPart,
                       WeightRuntimeBindingManifest, validate_runtime_binding,
                       validate_runtime_bindings)
from .planner import (LogicalTransferOperation, LogicalTransferPlan, PipelineRouteGroup,
                      PlacementExecutorPlan, PlanningLimits, TransferRegion,
                      plan_placement_transfer, plan_placement_transfer_to_local_target,
                      plan_stored_transfer_to_target_placement)
from .serde import weight_placement_from_json, weight_placement_to_json
from .storage_manifest import StoredFragment, WeightManifest

# Our store (not part of upstream's surface; names that do not clash).
from .snapshot import (WeightSnapshotAdapter, WeightSnapshotDescriptor,  # noqa: F401
                       WeightSnapshotSource)
from .store import WeightStore, WeightStoreError, begin_weight_snapshot  # noqa: F401
from .store_layout import split_sizes, tp_placement  # noqa: F401
from .store_plan import RangedRead  # noqa: F401

__all__ = ["ParallelRank", "ParallelTopology", "PlacementFragment", "WeightPlacementManifest",
           "WeightPlacementPart", "RuntimeBindingFragment", "WeightRuntimeBindingManifest",
           "SplitAxis", "ReplicatedAxis", "OwnershipAxis", "TensorDescriptor",
           "TopologyParticipant", "validate_runtime_binding", "validate_runtime_bindings",
           "weight_placement_from_json", "weight_placement_to_json", "StoredFragment",
           "WeightManifest", "LogicalTransferPlan", "LogicalTransferOperation",
           "PipelineRouteGroup", "PlacementExecutorPlan", "PlanningLimits", "TransferRegion",
           "plan_placement_transfer", "plan_placement_transfer_to_local_target",
           "plan_stored_transfer_to_target_placement"]

# SPDX-License-Identifier: Apache-2.0
"""Manifest-backed model-weight snapshots (docs/weights.md)."""

from .manifest import (PlacementFragment, TensorDescriptor, WeightPlacementManifest,
                       WeightRuntimeBinding, WeightSnapshotSource, split_sizes, tp_placement)
from .planner import RangedRead, WeightLoadPlan
from .snapshot import WeightSnapshotAdapter, WeightSnapshotDescriptor
from .store import (StoredFragment, StoredWeightManifest, WeightStore, WeightStoreError,
                    WeightStoreWriter, begin_weight_snapshot)

__all__ = ["PlacementFragment", "RangedRead", "StoredFragment", "StoredWeightManifest",
           "TensorDescriptor", "WeightLoadPlan", "WeightPlacementManifest",
           "WeightRuntimeBinding", "WeightSnapshotAdapter", "WeightSnapshotDescriptor",
           "WeightSnapshotSource", "WeightStore", "WeightStoreError", "WeightStoreWriter",
           "begin_weight_snapshot", "split_sizes", "tp_placement"]

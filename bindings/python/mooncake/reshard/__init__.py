# SPDX-License-Identifier: Apache-2.0
"""Resharding: moving model weights between different parallel layouts.

The public surface is upstream's: :mod:`mooncake.reshard.contracts` (the
resource-neutral ids and Protocols), :mod:`mooncake.reshard.geometry` (box
arithmetic) and :mod:`mooncake.reshard.weight` (the model-weight placement,
binding and stored-manifest contracts, the planner, and our WeightStore).

May import: its own contracts; reshard.weight is imported by name.
"""

from .contracts import PlacementManifest, ResourceKind, ResourceManifest, RuntimeBindingManifest

__all__ = ["ResourceKind", "ResourceManifest", "PlacementManifest", "RuntimeBindingManifest"]

# SPDX-License-Identifier: Apache-2.0
"""Extension points of the store that higher layers of the package fill
in (private).

Owns: :data:`weight_snapshot_opener`, what
``MooncakeDistributedStore.begin_weight_snapshot`` calls.  The weight
store (:mod:`mooncake.reshard.weight.store`) is built on
:mod:`mooncake.store`, so the store does not import it; the weight store
installs its opener here as it is imported instead.  Every valid call
passes a ``WeightSnapshotDescriptor``, whose package imports the weight
store, so the opener is always there when it can be used.

May import: the standard library only.
"""

from typing import Any, Callable, Optional

#: ``(store, descriptor, adapter) -> writer``: set by mooncake.reshard.weight.store.
weight_snapshot_opener: Optional[Callable[[Any, Any, Any], Any]] = None

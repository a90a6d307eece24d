# SPDX-License-Identifier: Apache-2.0
"""Mooncake Store: a distributed object store for LLM KV-cache blocks.

The public entry point is :mod:`mooncake.store`::

    from mooncake.store import MooncakeDistributedStore

:mod:`mooncake.buffer_pool` leases registered scratch memory for the
zero-copy calls.

The native binding (``mooncake.capi`` / ``mooncake._capi``) is private and
may change without notice; everything people use is re-exported, with
documentation and type hints, by the modules of this package.
"""

__all__ = ["__version__"]

from mooncake import capi as _capi

#: Version of the libmooncake this package runs on ("MAJOR.MINOR.PATCH").
__version__: str = _capi.mc_version_string()

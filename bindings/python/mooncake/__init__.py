# SPDX-License-Identifier: Apache-2.0
"""Mooncake Store: a distributed object store for LLM KV-cache blocks.

The public entry point is :mod:`mooncake.store`::

    from mooncake.store import MooncakeDistributedStore

:mod:`mooncake.buffer_pool` leases registered scratch memory for the
zero-copy calls; as upstream, the package re-exports it
(``from mooncake import BufferPool``; ``RegisteredBufferPool`` is the same
class).  :mod:`mooncake.mooncake_config` reads a client configuration from
a JSON file or the environment.

The package path is extendable (:func:`pkgutil.extend_path`), as upstream's,
so add-on distributions may install modules under ``mooncake.``.

The native binding (``mooncake.capi`` / ``mooncake._capi``) is private and
may change without notice; everything people use is re-exported, with
documentation and type hints, by the modules of this package.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from mooncake import capi as _capi  # noqa: E402
from mooncake.buffer_pool import BufferPool, RegisteredBufferPool  # noqa: E402

__all__ = ["BufferPool", "RegisteredBufferPool"]

#: Version of the libmooncake this package runs on ("MAJOR.MINOR.PATCH").
__version__: str = _capi.mc_version_string()

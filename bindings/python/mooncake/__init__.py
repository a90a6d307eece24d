# SPDX-License-Identifier: Apache-2.0
"""Mooncake Store: a distributed object store for LLM KV-cache blocks.

The public entry point is :mod:`mooncake.store`::

    from mooncake.store import MooncakeDistributedStore

:mod:`mooncake.buffer_pool` leases registered scratch memory for the
zero-copy calls; as upstream, the package re-exports it
(``from mooncake import BufferPool``; ``RegisteredBufferPool`` is the same
class; both are None when the native extension is missing).
:mod:`mooncake.mooncake_config` reads a client configuration from
a JSON file or the environment.

The package path is extendable (:func:`pkgutil.extend_path`), as upstream's,
so add-on distributions may install modules under ``mooncake.``.

The native binding (``mooncake.capi`` / ``mooncake._capi``) is private and
may change without notice; everything people use is re-exported, with
documentation and type hints, by the modules of this package.

May import: buffer_pool only (it imports without the native extension); the
other modules are imported by name.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

# As upstream, the package imports without its native extension; the pool
# names are then None.
from mooncake.buffer_pool import BufferPool, RegisteredBufferPool, _capi  # noqa: E402

__all__ = ["BufferPool", "RegisteredBufferPool"]

#: Version of the libmooncake this package runs on ("MAJOR.MINOR.PATCH";
#: None when the native extension is missing).
__version__ = _capi.mc_version_string() if _capi is not None else None

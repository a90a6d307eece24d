# SPDX-License-Identifier: Apache-2.0
"""``MooncakeDistributedStoreAsync``: the store with a coroutine twin,
``async_<name>``, of every method (upstream's ``mooncake.async_store``)::

    from mooncake.async_store import MooncakeDistributedStoreAsync

    store = MooncakeDistributedStoreAsync()
    store.setup("localhost", "P2PHANDSHAKE", 512 << 20, 128 << 20,
                "tcp", "", "localhost:50051")          # synchronous, inherited
    await store.async_put("k", b"v")
    values = await asyncio.gather(*(store.async_get(k) for k in keys))
    store.close()

Every ``async_<name>(*args, **kwargs)`` returns what ``<name>(*args,
**kwargs)`` returns (status codes, ``b""`` for a failed get, the same
exceptions for arguments of the wrong type, raised when awaited).

How they run.  The hot calls -- ``get``, ``get_into``, ``put``, ``upsert``,
``put_from``, ``upsert_from``, ``is_exist``, ``remove``, ``get_size``,
``get_batch``, ``batch_is_exist``, ``batch_get_into``, ``batch_put_from``,
``batch_upsert_from`` -- are not run on a thread of their own: they are
queued on a completion queue of libmooncake (``mc_store_aq_open``, one per
store and event loop, made on first use), whose threads run what is queued
as batch calls (a thousand concurrent gets cost a few master round trips)
and signal an eventfd that the loop watches; the awaiting futures are
resolved from the loop's reader callback.  Every other method, and these
when called with arguments the native path does not take as they are
(lists of different lengths, non-int addresses, group ids, a subclass that
overrides the sync method, an event loop without ``add_reader``), runs as
upstream does: the sync method on the loop's default executor.

Memory.  As upstream, the caller owns the memory of the zero-copy calls:
a ``get_into``/``put_from`` buffer (and every buffer of the batch forms)
must stay valid and untouched until the call's future is done.  Cancelling
the awaiting task does not stop a call already queued -- the library still
reads or writes the buffer, and the result is dropped when it arrives -- so
keep the buffer until the store is closed or the call would have finished.
``put``/``upsert`` values are kept alive (and a ``bytearray`` cannot be
resized) until the library is done with them.

Closing.  ``close()`` is the inherited, synchronous one.  Calls queued
when it runs fail as the sync calls fail on a closed store
(``UNAVAILABLE_IN_CURRENT_STATUS``, ``b""`` for a get), and the store
can be set up again.  Several threads may each run an event loop on one
store; each loop gets its own queue.

May import: store and the low layer (the native binding, _errors, _util).
"""

import asyncio
import functools
import threading
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mooncake import _util
from mooncake import capi as _capi
from mooncake._errors import ErrorCode
from mooncake.store import (BytesLike, MooncakeDistributedStore, ReplicateConfig, _c_config,
                            _ptr, _same_node)

__all__ = ["MooncakeDistributedStoreAsync"]

# Completions taken per wake-up of the loop (the rest wait for the next).
_REAP_MAX = 1024
_INVALID = int(ErrorCode.INVALID_PARAMS)

# The sync methods with a native twin here.
_NATIVE = frozenset({
    "get", "get_into", "put", "upsert", "put_from", "upsert_from", "is_exist", "remove",
    "get_size", "get_batch", "batch_is_exist", "batch_get_into", "batch_put_from",
    "batch_upsert_from",
})


class _LoopQueue:
    """The completion queue of one store on one event loop.  Used from that
    loop's thread only."""

    __slots__ = ("aq", "_handle", "_loop", "_fd", "_pending", "_tag", "_reading", "_plugged")

    def __init__(self, handle: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.aq = _capi.AsyncQueue(handle, 0)  # RuntimeError when it cannot be made
        # The library's rule: the queue never outlives the store handle.
        self._handle = handle
        self._loop = loop
        self._fd = self.aq.fd()
        # tag -> (future, what must stay alive until the completion arrives)
        self._pending: Dict[int, Tuple[asyncio.Future, Any]] = {}
        self._tag = 0
        self._reading = False
        self._plugged = False
        # NotImplementedError on a loop without add_reader: the caller then
        # keeps to the executor
        loop.add_reader(self._fd, self._on_ready)
        loop.remove_reader(self._fd)

    def __del__(self) -> None:
        # The library queue goes first: closing it waits for the calls in
        # flight, and only then may the store handle and the memory they
        # use (what _pending keeps) go -- slots are cleared in name order.
        self.aq = None

    def submit(self, fn: Any, args: Tuple[Any, ...], keep: Any = None) -> asyncio.Future:
        """Queue ``fn(*args, tag)`` (a submission of ``self.aq``); the future
        gets ``(result, payload)`` of its completion."""
        if not self._plugged:
            # what this iteration of the loop submits goes to the workers
            # in one go when it ends (gather's thousand gets: one batch)
            self.aq.plug()
            self._plugged = True
            self._loop.call_soon(self._unplug)
        self._tag += 1
        tag = self._tag
        rc = fn(*args, tag)
        fut = self._loop.create_future()
        if rc != 0:  # nothing queued (out of memory): the call's own failure
            fut.set_result((rc, None))
            return fut
        self._pending[tag] = (fut, keep)
        if not self._reading:
            self._loop.add_reader(self._fd, self._on_ready)
            self._reading = True
        return fut

    def _unplug(self) -> None:
        self._plugged = False
        self.aq.unplug()

    def _on_ready(self) -> None:
        pending = self._pending
        for tag, result, payload in self.aq.reap(_REAP_MAX):
            entry = pending.pop(tag, None)
            # a cancelled waiter: the completion is dropped
            if entry is not None and not entry[0].done():
                entry[0].set_result((result, payload))
        if not pending:
            # idle: the loop holds no reference to the queue, so a store
            # nobody uses any more can go, and its queue with it
            self._loop.remove_reader(self._fd)
            self._reading = False


def _pairs(ptrs: Sequence[Any], sizes: Sequence[Any]) -> Optional[array]:
    """(address, size) pairs packed as native uint64, or None when an item
    is not a plain int in [0, 2**64-1] (the sync method then decides)."""
    for x in ptrs:
        if type(x) is not int:
            return None
    for x in sizes:
        if type(x) is not int:
            return None
    try:
        p = array("Q", ptrs)
        s = array("Q", sizes)
    except OverflowError:
        return None
    out = array("Q", bytes(16 * len(p)))
    out[0::2] = p
    out[1::2] = s
    return out


def _per_key(done: Tuple[int, Any], n: int) -> List[int]:
    """The per-key results of a batch completion; the submission's status
    for every key when nothing was queued."""
    return done[1] if done[1] is not None else [done[0]] * n


def _native_twin(name: str) -> Any:
    """Give the decorated coroutine function the metadata of the sync method
    ``name`` (as upstream's functools.wraps does)."""
    return functools.wraps(getattr(MooncakeDistributedStore, name))


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """:class:`~mooncake.store.MooncakeDistributedStore` with an awaitable
    ``async_<name>`` twin of every method (see the module documentation).
    The constructor takes no arguments; ``setup``, ``close`` and the other
    sync methods are inherited unchanged."""

    #: Native names whose sync method a subclass overrides: those run the
    #: override on the executor, as upstream would.
    _aq_overridden: frozenset = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._aq_overridden = frozenset(
            n for n in _NATIVE if getattr(cls, n) is not getattr(MooncakeDistributedStore, n))

    def __init__(self) -> None:
        super().__init__()
        self._aq_lock = threading.Lock()
        # event loop -> its queue, or None where the executor is used
        self._aq_loops: Dict[asyncio.AbstractEventLoop, Optional[_LoopQueue]] = {}

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: the executor twin of any
        # sync method without a native one (upstream's wrapper, cached).
        if not name.startswith("async_"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        sync_name = name[6:]
        if not hasattr(self, sync_name):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute "
                                 f"'{name}' (nor '{sync_name}')")
        method = getattr(self, sync_name)
        if not callable(method):
            raise AttributeError(f"'{sync_name}' is not callable")

        @functools.wraps(method)
        async def async_method(*args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(method, *args, **kwargs))

        setattr(self, name, async_method)
        return async_method

    # ---- plumbing ------------------------------------------------------------

    def _aq(self, name: str) -> Optional[_LoopQueue]:
        """The running loop's queue, or None when ``name`` runs on the
        executor."""
        loop = asyncio.get_running_loop()
        q = self._aq_loops.get(loop)
        if q is None and loop not in self._aq_loops:
            q = self._aq_new(loop)
        if q is None or name in self._aq_overridden:
            return None
        return q

    def _aq_new(self, loop: asyncio.AbstractEventLoop) -> Optional[_LoopQueue]:
        with self._aq_lock:
            if loop in self._aq_loops:
                return self._aq_loops[loop]
            for old in [lp for lp in self._aq_loops if lp.is_closed()]:
                del self._aq_loops[old]  # its queue goes with it
            try:
                q: Optional[_LoopQueue] = _LoopQueue(self._store, loop)
            except (RuntimeError, NotImplementedError):
                q = None  # no eventfd, thread or add_reader: the executor
            self._aq_loops[loop] = q
            return q

    async def _sync(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The sync method ``name`` on the executor (upstream's way)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, functools.partial(getattr(self, name), *args, **kwargs))

    # ---- single objects ------------------------------------------------------

    @_native_twin("get")
    async def async_get(self, key: str) -> bytes:
        q = self._aq("get")
        if q is None:
            return await self._sync("get", key)
        _util.check_key(key)
        res, data = await q.submit(q.aq.get, (key,))
        return data if res == 0 else b""

    @_native_twin("is_exist")
    async def async_is_exist(self, key: str) -> int:
        q = self._aq("is_exist")
        if q is None:
            return await self._sync("is_exist", key)
        _util.check_key(key)
        return (await q.submit(q.aq.exist, (key,)))[0]

    @_native_twin("get_size")
    async def async_get_size(self, key: str) -> int:
        q = self._aq("get_size")
        if q is None:
            return await self._sync("get_size", key)
        _util.check_key(key)
        return (await q.submit(q.aq.get_size, (key,)))[0]

    @_native_twin("remove")
    async def async_remove(self, key: str, force: bool = False) -> int:
        q = self._aq("remove")
        if q is None:
            return await self._sync("remove", key, force)
        _util.check_key(key)
        f = int(_util.check_bool("force", force))
        return (await q.submit(q.aq.remove, (key, f)))[0]

    async def _write(self, name: str, upsert: int, key: str, value: BytesLike,
                     config: Optional[ReplicateConfig]) -> int:
        q = self._aq(name)
        if q is None:
            return await self._sync(name, key, value, config)
        _util.check_key(key)
        buf = _util.as_buffer(value)
        cfg = _c_config(config)
        # the view keeps the bytes alive (and a bytearray unresizable) until
        # the library is done with them
        keep = (memoryview(buf), cfg)
        return (await q.submit(q.aq.write, (upsert, key, buf, cfg), keep))[0]

    @_native_twin("put")
    async def async_put(self, key: str, value: BytesLike,
                        config: Optional[ReplicateConfig] = None) -> int:
        return await self._write("put", 0, key, value, config)

    @_native_twin("upsert")
    async def async_upsert(self, key: str, value: BytesLike,
                           config: Optional[ReplicateConfig] = None) -> int:
        return await self._write("upsert", 1, key, value, config)

    # ---- zero copy -----------------------------------------------------------

    async def _write_from(self, name: str, upsert: int, key: str, buffer_ptr: int, size: int,
                          config: Optional[ReplicateConfig]) -> int:
        q = self._aq(name)
        if q is None:
            return await self._sync(name, key, buffer_ptr, size, config)
        _util.check_key(key)
        cfg = _c_config(config)
        p, s = _ptr("buffer_ptr", buffer_ptr), _ptr("size", size)
        if p is None or s is None or (not upsert and _same_node(config)):
            return _INVALID
        return (await q.submit(q.aq.write_from, (upsert, key, p, s, cfg), cfg))[0]

    @_native_twin("put_from")
    async def async_put_from(self, key: str, buffer_ptr: int, size: int,
                             config: Optional[ReplicateConfig] = None) -> int:
        return await self._write_from("put_from", 0, key, buffer_ptr, size, config)

    @_native_twin("upsert_from")
    async def async_upsert_from(self, key: str, buffer_ptr: int, size: int,
                                config: Optional[ReplicateConfig] = None) -> int:
        return await self._write_from("upsert_from", 1, key, buffer_ptr, size, config)

    @_native_twin("get_into")
    async def async_get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        q = self._aq("get_into")
        if q is None:
            return await self._sync("get_into", key, buffer_ptr, size)
        _util.check_key(key)
        p, s = _ptr("buffer_ptr", buffer_ptr), _ptr("size", size)
        if p is None or s is None:
            return _INVALID
        return (await q.submit(q.aq.get_into, (key, p, s)))[0]

    # ---- batches ---------------------------------------------------------------

    @_native_twin("get_batch")
    async def async_get_batch(self, keys: Sequence[str]) -> List[bytes]:
        q = self._aq("get_batch")
        if q is None:
            return await self._sync("get_batch", keys)
        _util.check_key_list("keys", keys)
        if len(keys) == 0:
            return [b""]
        res, values = await q.submit(q.aq.get_batch, (keys,))
        return values if values is not None else [b""] * len(keys)

    @_native_twin("batch_is_exist")
    async def async_batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        q = self._aq("batch_is_exist")
        if q is None:
            return await self._sync("batch_is_exist", keys)
        _util.check_key_list("keys", keys)
        if len(keys) == 0:
            return []
        return _per_key(await q.submit(q.aq.batch_exist, (keys,)), len(keys))

    async def _batch_zc(self, name: str, op: int, keys: Sequence[str],
                        buffer_ptrs: Sequence[int], sizes: Sequence[int],
                        config: Optional[ReplicateConfig], refuse_same_node: bool) -> List[int]:
        """batch_get_into / batch_put_from / batch_upsert_from: native when
        the sync method would take its one-pass path with plain ints."""
        q = self._aq(name)
        packed = None
        if q is not None and isinstance(keys, (list, tuple)) and \
                isinstance(buffer_ptrs, (list, tuple)) and isinstance(sizes, (list, tuple)) and \
                len(buffer_ptrs) == len(keys) and len(sizes) == len(keys) and \
                (config is None or (isinstance(config, ReplicateConfig) and
                                    not config.group_ids and
                                    not (refuse_same_node and _same_node(config)))):
            packed = _pairs(buffer_ptrs, sizes)
        if packed is None:
            args = (keys, buffer_ptrs, sizes) if op == _capi.AQ_BATCH_GET_INTO \
                else (keys, buffer_ptrs, sizes, config)
            return await self._sync(name, *args)
        if len(keys) == 0:
            return []
        cfg = _c_config(config)
        return _per_key(await q.submit(q.aq.batch_zc, (op, keys, packed, cfg), cfg), len(keys))

    @_native_twin("batch_get_into")
    async def async_batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                   sizes: Sequence[int]) -> List[int]:
        return await self._batch_zc("batch_get_into", _capi.AQ_BATCH_GET_INTO, keys,
                                    buffer_ptrs, sizes, None, False)

    @_native_twin("batch_put_from")
    async def async_batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                   sizes: Sequence[int],
                                   config: Optional[ReplicateConfig] = None) -> List[int]:
        return await self._batch_zc("batch_put_from", _capi.AQ_BATCH_PUT_FROM, keys,
                                    buffer_ptrs, sizes, config, True)

    @_native_twin("batch_upsert_from")
    async def async_batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                      sizes: Sequence[int],
                                      config: Optional[ReplicateConfig] = None) -> List[int]:
        return await self._batch_zc("batch_upsert_from", _capi.AQ_BATCH_UPSERT_FROM,
                                    keys, buffer_ptrs, sizes, config, False)

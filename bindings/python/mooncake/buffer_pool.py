# SPDX-License-Identifier: Apache-2.0
"""Scratch buffers for the zero-copy calls: :class:`BufferPool`.

The zero-copy methods of :class:`~mooncake.store.MooncakeDistributedStore`
(``get_into``, ``get_into_ranges``, ``batch_put_from``, ...) only accept
registered memory.  Registering and unregistering memory for every call is
slow, so a pool leases pieces of the store's setup-time local buffer, which
is registered once::

    from mooncake.buffer_pool import BufferPool

    pool = BufferPool(store)
    with pool.buffer(1 << 20) as lease:
        n = store.get_into("my_key", lease.ptr, lease.size)
        view = lease.buffer[:n]
        data = bytes(view)     # copy only if it must outlive the lease
        del view
    pool.close()

Rules (upstream's contract; programs match on the messages, so they are
upstream's word for word):

* ``acquire(size)`` and ``buffer(size)`` are the same call and return a
  :class:`BufferLease`; the lease is the context manager (``__exit__``
  releases it).  ``size`` may be 0 (one byte is allocated, ``lease.size``
  is 0);
* leases come from the local buffer (``alloc_from_mem_pool``); when it is
  exhausted, an *overflow* buffer is allocated (host memory aligned to
  ``alignment``, 8 MiB by default), registered for the lease and
  unregistered and freed at release;
* ``max_bytes`` bounds the active bytes, local and overflow together: 0
  means twice the local buffer, any other value is raised to at least the
  local buffer size;
* ``max_regions`` bounds the number of active leases (None: unbounded; 0
  is accepted and lets no lease through);
* ``acquire(size, block=False)`` raises "buffer pool is exhausted" when
  nothing fits; ``acquire(size, timeout=t)`` waits up to ``t`` seconds for
  other leases to be released (the GIL is released while waiting), then
  raises "timed out waiting for buffer";
* every read of ``lease.buffer`` is a new memoryview (format ``B``,
  writable, ``len == size``) over a new :class:`BufferLeaseView`, which
  keeps the lease alive.  ``lease.release()`` raises "cannot release
  buffer while exported views exist" while any view is alive (and leaves
  the views valid); delete them and release again.  Releasing twice is a
  no-op; ``lease.ptr`` after release raises "buffer lease is closed";
* a lease nobody references any more is released (the pool keeps only
  weak references), so ``del lease; pool.close()`` works;
* ``close()`` raises "cannot close buffer pool with active leases".

Every error above is a :class:`RuntimeError` (the size arguments are
``size_t`` as upstream's: a negative or non-int value is a
:class:`TypeError`).  Capacity errors are :class:`BufferPoolExhausted`
(and :class:`BufferPoolTimeout`), subclasses of RuntimeError.

Upstream's other constructor arguments are accepted with upstream's
meaning: ``min_size_class`` must be > 0 and is otherwise unused -- a
lease is exactly the size asked for, there is no size-class rounding;
``max_size_class`` (default ``max_bytes``) only sets the size above which
a lease counts as *oversize* (:attr:`BufferPool.oversize_leases`);
``default_timeout`` is stored unchecked (a negative one fails the acquire
that uses it); ``prewarm_size``/``prewarm_count`` and
:meth:`BufferPool.prewarm` do nothing.

Where this pool differs from upstream's: a blocking acquire without a
timeout that nothing of this pool can ever satisfy (no lease of it is
active) raises "buffer pool is exhausted" instead of waiting forever.

May import: _util and the native binding (optional: the pool names are None
without it); never store, which re-exports it.
"""

import collections
import ctypes
import itertools
import threading
import time
import weakref
from typing import Any, Dict, Optional

from mooncake import _util

try:
    from mooncake import capi as _capi
except ImportError:  # the native extension is missing: BufferPool is None (below)
    _capi = None

# Upstream's module exports these two only (the lease classes live in
# mooncake.store); the other public names here are importable by name.
__all__ = ["BufferPool", "RegisteredBufferPool"]

# While blocked on an exhausted local buffer, wake up this often to retry:
# memory can also come back from the store's own staging users and from
# leases the garbage collector released, which do not notify the pool.
_RETRY_S = 0.05

# Upstream's messages (callers match on them).
_E_NOT_INIT = "MooncakeDistributedStore is not initialized"
_E_STORE_TYPE = ("BufferPool store parameter must be a PyClient or store wrapper that "
                 "implements _get_pyclient_capsule()")
_E_NO_LOCAL = "BufferPool requires a store configured with a local buffer"
_E_POSITIVE = "min_size_class and alignment must be positive"
_E_ALIGNMENT = "alignment must be a power of two and at least sizeof(void*)"
_E_TIMEOUT = "timeout must be non-negative"
_E_TOO_LARGE = "requested buffer size exceeds pool capacity"
_E_EXHAUSTED = "buffer pool is exhausted"
_E_TIMED_OUT = "timed out waiting for buffer"
_E_CLOSED = "buffer pool is closed"
_E_CLOSING = "buffer pool is closing"
_E_ACTIVE = "cannot close buffer pool with active leases"
_E_VIEWS = "cannot release buffer while exported views exist"
_E_LEASE_CLOSED = "buffer lease is closed"
_E_REG = "overflow buffer registration failed"
_E_UNREG = "overflow buffer unregistration failed"

#: The capsule name upstream's store wrappers hand to BufferPool.
CAPSULE_NAME = b"mooncake.PyClient.shared_ptr"


class BufferPoolExhausted(RuntimeError):
    """No local-buffer or overflow capacity is left for the request."""


class BufferPoolTimeout(BufferPoolExhausted, TimeoutError):
    """``acquire(..., timeout=t)`` waited ``t`` seconds without capacity."""


# ---- the store behind a capsule (upstream's _get_pyclient_capsule) ----------------------

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
_PyCapsule_GetName.restype = ctypes.c_char_p
_PyCapsule_GetName.argtypes = (ctypes.py_object,)
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)

# The stores a capsule was made for, by the number the capsule carries.
_capsule_stores: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_capsule_ids = itertools.count(1)


def store_capsule(store: Any) -> Any:
    """A capsule named ``mooncake.PyClient.shared_ptr`` that names ``store``
    (what ``MooncakeDistributedStore._get_pyclient_capsule()`` returns), so
    that a wrapper which forwards it can be given to :class:`BufferPool`."""
    token = getattr(store, "_capsule_token", None)
    if token is None:
        token = next(_capsule_ids)
        store._capsule_token = token
        _capsule_stores[token] = store
    return _PyCapsule_New(token, CAPSULE_NAME, None)


def _is_store(obj: Any) -> bool:
    return hasattr(obj, "alloc_from_mem_pool") and hasattr(obj, "_mem_pool_free")


def _unwrap_store(obj: Any) -> Any:
    """The store behind ``obj`` (a store, or a wrapper whose
    ``_get_pyclient_capsule()`` returns a store's capsule); None for None."""
    if obj is None or _is_store(obj):
        return obj
    if not hasattr(obj, "_get_pyclient_capsule"):
        raise RuntimeError(_E_STORE_TYPE)
    capsule = obj._get_pyclient_capsule()
    if capsule is None:
        return None
    if type(capsule).__name__ != "PyCapsule":
        raise RuntimeError("store wrapper returned a non-capsule PyClient handle")
    if _PyCapsule_GetName(capsule) != CAPSULE_NAME:
        raise RuntimeError("store wrapper returned an unexpected PyClient capsule type")
    store = _capsule_stores.get(_PyCapsule_GetPointer(capsule, CAPSULE_NAME) or 0)
    if store is None:
        raise RuntimeError("store wrapper returned an empty PyClient capsule")
    return store


# ---- argument checks (pybind's size_t / double conversions) -------------------------------

def _check_size_t(name: str, value: Any) -> int:
    """An int in [0, 2**64-1], as upstream's binding takes its size_t
    arguments: TypeError for anything else (a negative int included)."""
    if not _util.is_int(value) or value < 0 or value > _util.U64_MAX:
        raise TypeError(f"{name} must be a non-negative int, not {value!r}")
    return int(value)


def _check_seconds(name: str, value: Any) -> float:
    """A number of seconds (its sign is checked where it is used)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number or None, not {type(value).__name__}")
    return float(value)


# ---- leases and their views -------------------------------------------------------------------

class BufferLeaseView(_capi.BufferHandle if _capi is not None else object):  # type: ignore
    """The exporter behind one ``lease.buffer`` memoryview: 1-D, format
    ``B``, writable, ``size`` bytes.  It keeps its lease alive; while it
    exists the lease cannot be released."""

    __slots__ = ("_lease", "__weakref__")

    @property
    def buffer(self) -> memoryview:
        """A memoryview over this view's bytes."""
        return memoryview(self)

    def __repr__(self) -> str:
        return f"<BufferLeaseView ptr={self.ptr():#x} size={self.size()}>"


class BufferLease:
    """A registered scratch buffer: ``size`` bytes at ``ptr``.

    Attributes:
        size: the requested size in bytes (0 is possible).
        overflow: True when the lease is a registered overflow buffer
            rather than a piece of the store's local buffer.
    """

    __slots__ = ("_pool", "_ptr", "size", "overflow", "_base", "_alloc", "_views",
                 "_released", "_token", "__weakref__")

    def __init__(self, pool: "BufferPool", ptr: int, size: int, alloc: int, overflow: bool,
                 base: int, token: int) -> None:
        self._pool = pool
        self._ptr = ptr
        self.size = size
        self._alloc = alloc           # bytes taken from the pool (max(size, 1))
        self.overflow = overflow
        self._base = base or ptr      # what to free: an aligned overflow lease starts inside it
        self._views: "weakref.WeakSet[BufferLeaseView]" = weakref.WeakSet()
        self._released = False
        self._token = token

    @property
    def ptr(self) -> int:
        """The address to pass to the zero-copy calls.

        Raises:
            RuntimeError: "buffer lease is closed" after release.
        """
        if self._released:
            raise RuntimeError(_E_LEASE_CLOSED)
        return self._ptr

    @property
    def buffer(self) -> memoryview:
        """A new writable memoryview (format ``B``) over exactly ``size``
        bytes, on a new :class:`BufferLeaseView`.

        Raises:
            BufferError: "Error getting buffer" after release (its cause is
                "buffer lease is closed").
        """
        if self._released:
            raise BufferError("Error getting buffer") from RuntimeError(_E_LEASE_CLOSED)
        view = _capi.mooncake_region_view_as(BufferLeaseView, self._ptr, self.size)
        view._lease = self
        self._views.add(view)
        return memoryview(view)

    @property
    def released(self) -> bool:
        """True once the lease went back to the pool."""
        return self._released

    def release(self) -> None:
        """Return the memory to the pool.  Releasing twice is a no-op.

        Raises:
            RuntimeError: "cannot release buffer while exported views
                exist" -- a :class:`BufferLeaseView` (a memoryview of
                :attr:`buffer`, an array made on one) is alive; the lease
                and its views stay valid.
        """
        self._pool._release(self)

    def __enter__(self) -> "BufferLease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        # Unreachable, so no view is alive: the memory goes back now; the
        # pool's counts follow at its next call (no lock is taken here).
        if not self._released:
            self._released = True
            try:
                self._pool._collected(self)
            except Exception:  # interpreter shutdown, store gone: nothing to give back
                pass

    def __repr__(self) -> str:
        state = "released" if self._released else ("overflow" if self.overflow else "local")
        return f"<BufferLease ptr={self._ptr:#x} size={self.size} {state}>"


class BufferPool:
    """Leases of registered scratch memory from a store's local buffer.

    The keyword names, their order and defaults are upstream's.

    Args:
        store: a set-up :class:`~mooncake.store.MooncakeDistributedStore`
            with a local buffer, or a wrapper whose
            ``_get_pyclient_capsule()`` returns such a store's capsule.
        max_bytes: most bytes leased at once, local and overflow together:
            0 means twice the store's local buffer size; any other value is
            raised to at least the local buffer size.
        min_size_class: must be > 0; otherwise unused (no size classes).
        max_size_class: leases above this many bytes are counted in
            :attr:`oversize_leases` (None: ``max_bytes``).
        alignment: alignment of overflow buffers; a power of two, at least
            8 (default 8 MiB).  Local-buffer leases are aligned as the
            store's allocator places them (at least 64).
        block_on_exhaustion: what ``acquire(block=None)`` does.
        default_timeout: seconds ``acquire(timeout=None)`` waits (None:
            no limit); stored unchecked.
        max_regions: most leases active at once (None: no limit).
        prewarm_size, prewarm_count: accepted, unused (as upstream).

    Raises:
        TypeError: an argument of the wrong type (a negative or non-int
            size included, as upstream's size_t).
        RuntimeError: with upstream's messages -- "MooncakeDistributedStore
            is not initialized" (None, or a store not set up), "BufferPool
            store parameter must be a PyClient or store wrapper that
            implements _get_pyclient_capsule()", "min_size_class and
            alignment must be positive", "alignment must be a power of two
            and at least sizeof(void*)", "BufferPool requires a store
            configured with a local buffer".

    Thread-safe: leases may be acquired and released from any thread.
    """

    def __init__(self, store: Any, max_bytes: int = 0,
                 min_size_class: int = 65536, max_size_class: Optional[int] = None,
                 alignment: int = 8388608, block_on_exhaustion: bool = True,
                 default_timeout: Optional[float] = None, max_regions: Optional[int] = None,
                 prewarm_size: Optional[int] = None, prewarm_count: int = 0) -> None:
        # Argument conversion first, as pybind does before the constructor runs.
        max_bytes = _check_size_t("max_bytes", max_bytes)
        min_size_class = _check_size_t("min_size_class", min_size_class)
        if max_size_class is not None:
            max_size_class = _check_size_t("max_size_class", max_size_class)
        alignment = _check_size_t("alignment", alignment)
        block_on_exhaustion = _util.check_bool("block_on_exhaustion", block_on_exhaustion)
        if default_timeout is not None:
            default_timeout = _check_seconds("default_timeout", default_timeout)
        if max_regions is not None:
            max_regions = _check_size_t("max_regions", max_regions)
        if prewarm_size is not None:
            _check_size_t("prewarm_size", prewarm_size)
        _check_size_t("prewarm_count", prewarm_count)

        store = _unwrap_store(store)
        if store is None or store.get_hostname() == "":
            raise RuntimeError(_E_NOT_INIT)
        if min_size_class == 0 or alignment == 0:
            raise RuntimeError(_E_POSITIVE)
        if alignment < 8 or alignment & (alignment - 1):
            raise RuntimeError(_E_ALIGNMENT)
        local = store._local_buffer_bytes()
        if local == 0:
            raise RuntimeError(_E_NO_LOCAL)
        self._store = store
        self._max_bytes = 2 * local if max_bytes == 0 else max(max_bytes, local)
        self._max_regions = max_regions
        self._min_size_class = min_size_class
        self._max_size_class = self._max_bytes if max_size_class is None else max_size_class
        self._alignment = alignment
        self._block = block_on_exhaustion
        self._default_timeout = default_timeout
        self._oversize = 0
        self._cond = threading.Condition()
        self._tokens = itertools.count(1)
        # token -> weak reference: a lease nobody holds is released (__del__)
        self._active: Dict[int, "weakref.ref[BufferLease]"] = {}
        self._active_bytes = 0
        # (token, bytes) of leases the garbage collector released, counted
        # out at the next call that holds the lock (deque: append is atomic)
        self._gone: "collections.deque[tuple]" = collections.deque()
        self._closed = False
        self._closing = False

    # ---- introspection -------------------------------------------------------

    @property
    def max_regions(self) -> Optional[int]:
        return self._max_regions

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def min_size_class(self) -> int:
        return self._min_size_class

    @property
    def max_size_class(self) -> int:
        """Leases above this many bytes count as oversize."""
        return self._max_size_class

    @property
    def alignment(self) -> int:
        """Alignment of overflow buffers."""
        return self._alignment

    @property
    def block_on_exhaustion(self) -> bool:
        return self._block

    @property
    def default_timeout(self) -> Optional[float]:
        return self._default_timeout

    @property
    def oversize_leases(self) -> int:
        """Leases granted so far that were larger than :attr:`max_size_class`."""
        with self._cond:
            return self._oversize

    @property
    def active_leases(self) -> int:
        """Number of leases not yet released."""
        with self._cond:
            self._count_out_collected()
            return len(self._active)

    @property
    def active_bytes(self) -> int:
        """Bytes held by active leases (a 0-byte lease holds 1)."""
        with self._cond:
            self._count_out_collected()
            return self._active_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- leases ------------------------------------------------------------------

    def acquire(self, size: int, block: Optional[bool] = None,
                timeout: Optional[float] = None) -> BufferLease:
        """Lease ``size`` bytes of registered memory.

        Args:
            size: bytes (0 is allowed: one byte is allocated).
            block: wait for capacity (True) or raise at once (False);
                None: the pool's ``block_on_exhaustion``.
            timeout: with ``block``, the most seconds to wait; None: the
                pool's ``default_timeout``, and when that is None too, wait
                as long as other leases of this pool are active and may
                return memory.

        Raises:
            TypeError: ``size`` is not a size_t, ``block`` not a bool,
                ``timeout`` not a number.
            RuntimeError: "timeout must be non-negative"; "buffer pool is
                closed" / "buffer pool is closing"; "overflow buffer
                registration failed".
            BufferPoolExhausted: "requested buffer size exceeds pool
                capacity" (``size`` above ``max_bytes``), "buffer pool is
                exhausted" (no capacity and ``block`` is False, or nothing
                can free memory any more).
            BufferPoolTimeout: "timed out waiting for buffer".
        """
        size = _check_size_t("size", size)
        block = self._block if block is None else _util.check_bool("block", block)
        timeout = self._default_timeout if timeout is None else \
            _check_seconds("timeout", timeout)
        if timeout is not None and timeout < 0:
            raise RuntimeError(_E_TIMEOUT)
        alloc = max(size, 1)
        if alloc > self._max_bytes:
            raise BufferPoolExhausted(_E_TOO_LARGE)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._raise_if_not_open()
                self._count_out_collected()
                lease = self._try_acquire(size, alloc)
                if lease is not None:
                    return lease
                if not block:
                    raise BufferPoolExhausted(_E_EXHAUSTED)
                if deadline is None:
                    if not self._active:
                        # Nothing of ours can come back: waiting would hang.
                        raise BufferPoolExhausted(_E_EXHAUSTED)
                    self._cond.wait(_RETRY_S)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BufferPoolTimeout(_E_TIMED_OUT)
                self._cond.wait(min(left, _RETRY_S))

    def buffer(self, size: int, block: Optional[bool] = None,
               timeout: Optional[float] = None) -> BufferLease:
        """The same call as :meth:`acquire` (upstream's second name); use
        the lease as the context manager: ``with pool.buffer(n) as lease``."""
        return self.acquire(size, block=block, timeout=timeout)

    def prewarm(self, size: Optional[int] = None, count: int = 0) -> None:
        """Accepted and does nothing, as upstream's (leases come from the
        store's already registered local buffer)."""
        if size is not None:
            _check_size_t("size", size)
        _check_size_t("count", count)

    def close(self) -> None:
        """Close the pool; later :meth:`acquire` calls raise "buffer pool is
        closed".  Idempotent.

        Raises:
            RuntimeError: "cannot close buffer pool with active leases".
        """
        with self._cond:
            if self._closed:
                return
            self._count_out_collected()
            if self._active:
                raise RuntimeError(_E_ACTIVE)
            self._closed = True
            self._cond.notify_all()

    def __enter__(self) -> "BufferPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<BufferPool active={len(self._active)} bytes={self._active_bytes} "
                f"max_regions={self._max_regions} max_bytes={self._max_bytes}"
                f"{' closed' if self._closed else ''}>")

    # ---- internals (called with self._cond held unless noted) ------------------------

    def _raise_if_not_open(self) -> None:
        if self._closed:
            raise RuntimeError(_E_CLOSED)
        if self._closing:
            raise RuntimeError(_E_CLOSING)

    def _count_out_collected(self) -> None:
        while self._gone:
            token, alloc = self._gone.popleft()
            if self._active.pop(token, None) is not None:
                self._active_bytes -= alloc
            self._cond.notify_all()

    def _try_acquire(self, size: int, alloc: int) -> Optional[BufferLease]:
        if self._max_regions is not None and len(self._active) >= self._max_regions:
            return None
        if self._active_bytes + alloc > self._max_bytes:
            return None
        overflow = False
        base = ptr = self._store.alloc_from_mem_pool(alloc)
        if ptr == 0:
            base, ptr = self._alloc_overflow(alloc)
            if ptr == 0:
                return None
            overflow = True
        token = next(self._tokens)
        try:
            lease = BufferLease(self, ptr, size, alloc, overflow, base, token)
            self._active[token] = weakref.ref(lease)
        except BaseException:
            self._free(ptr, overflow, base)
            raise
        self._active_bytes += alloc
        if size > self._max_size_class:
            self._oversize += 1
        return lease

    def _alloc_overflow(self, size: int) -> "tuple[int, int]":
        """(mapping, aligned address) of a registered overflow buffer of
        ``size`` bytes aligned to ``alignment``; (0, 0) when no memory can
        be had.  Host memory is page aligned; for a larger alignment the
        mapping is ``alignment`` - 1 bytes longer (address space only: the
        slack is never touched) and the lease starts at the first aligned
        byte.

        Raises:
            RuntimeError: "overflow buffer registration failed".
        """
        slack = self._alignment - 1 if self._alignment > 4096 else 0
        base = _capi.mooncake_host_mem_alloc(size + slack)
        if base == 0:
            return 0, 0
        ptr = (base + self._alignment - 1) & ~(self._alignment - 1)
        if self._store.register_buffer(ptr, size) != 0:
            _capi.mooncake_host_mem_free(base)
            raise RuntimeError(_E_REG)
        return base, ptr

    def _free(self, ptr: int, overflow: bool, base: int = 0) -> None:
        """Give a lease's memory back (any thread, no lock needed).

        Raises:
            RuntimeError: "overflow buffer unregistration failed"; the
                memory is then kept (it may still be reachable by peers).
        """
        if overflow:
            if self._store.unregister_buffer(ptr) != 0:
                raise RuntimeError(_E_UNREG)
            _capi.mooncake_host_mem_free(base or ptr)
        else:
            self._store._mem_pool_free(ptr)

    def _collected(self, lease: BufferLease) -> None:
        """A lease nobody references (its __del__, without the lock)."""
        self._gone.append((lease._token, lease._alloc))
        self._free(lease._ptr, lease.overflow, lease._base)

    def _release(self, lease: BufferLease) -> None:
        with self._cond:
            if lease._released:
                return
            if len(lease._views) > 0:
                raise RuntimeError(_E_VIEWS)
            lease._released = True
            if self._active.pop(lease._token, None) is not None:
                self._active_bytes -= lease._alloc
            try:
                self._free(lease._ptr, lease.overflow, lease._base)
            finally:
                self._cond.notify_all()


#: Upstream's other names (the same class objects).
RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView

if _capi is None:  # as upstream: the names exist, and are None
    BufferPool = RegisteredBufferPool = None  # type: ignore[assignment,misc]

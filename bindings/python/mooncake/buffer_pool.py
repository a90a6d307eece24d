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
        data = bytes(lease.buffer[:n])   # copy only if it must outlive the lease
    pool.close()

Rules (the upstream contract):

* leases come from the local buffer (``alloc_from_mem_pool``); when it is
  exhausted, an *overflow* buffer is allocated (page-aligned host memory),
  registered for the lease and unregistered and freed at release;
* ``max_regions`` bounds the number of active leases (None: unbounded);
* ``max_bytes`` bounds the active bytes, local and overflow together; the
  default is twice the local buffer size, i.e. one local-buffer-sized
  overflow burst;
* ``acquire(size, block=False)`` raises :class:`BufferPoolExhausted` when
  no capacity is left; ``acquire(size, timeout=t)`` waits up to ``t``
  seconds for other leases to be released (the GIL is released while
  waiting), then raises :class:`BufferPoolTimeout`;
* ``lease.release()`` raises :class:`BufferError` while memoryviews (or
  arrays) derived from ``lease.buffer`` are alive: the memory would be
  handed to somebody else under them.  Delete them and release again;
* ``close()`` raises :class:`RuntimeError` while leases are active.

The pool's memory accounting is exact: an export counter lives in the C
object behind ``lease.buffer``, so "are views still alive" is a fact, not a
reference-count guess.
"""

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from mooncake import capi as _capi
from mooncake import _util

__all__ = [
    "BufferPool",
    "RegisteredBufferPool",
    "BufferLease",
    "BufferPoolExhausted",
    "BufferPoolTimeout",
]

# While blocked on an exhausted local buffer, wake up this often to retry:
# memory can also come back from the store's own staging users, which do
# not notify the pool.
_RETRY_S = 0.05


class BufferPoolExhausted(RuntimeError):
    """No local-buffer or overflow capacity is left for the request."""


class BufferPoolTimeout(BufferPoolExhausted, TimeoutError):
    """``acquire(..., timeout=t)`` waited ``t`` seconds without capacity."""


class BufferLease:
    """A registered scratch buffer of ``size`` bytes at ``ptr``.

    Attributes:
        ptr: address to pass to the zero-copy calls.
        size: the requested size in bytes.
        overflow: True when the lease is a registered overflow buffer
            rather than a piece of the store's local buffer.
    """

    __slots__ = ("_pool", "ptr", "size", "overflow", "_region", "_view", "_released",
                 "__weakref__")

    def __init__(self, pool: "BufferPool", ptr: int, size: int, overflow: bool) -> None:
        self._pool = pool
        self.ptr = ptr
        self.size = size
        self.overflow = overflow
        self._region = _capi.mooncake_region_view(ptr, size)
        self._view: Optional[memoryview] = None
        self._released = False

    @property
    def buffer(self) -> memoryview:
        """A writable memoryview over exactly ``size`` bytes (format 'B')."""
        if self._released:
            raise ValueError("the lease was released")
        if self._view is None:
            self._view = memoryview(self._region)
        return self._view

    @property
    def released(self) -> bool:
        """True once :meth:`release` succeeded."""
        return self._released

    def release(self) -> None:
        """Return the memory to the pool.  Releasing twice is a no-op.

        Raises:
            BufferError: memoryviews or arrays made from :attr:`buffer` are
                still alive; the lease stays active.
        """
        self._pool._release(self)

    def __enter__(self) -> "BufferLease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else ("overflow" if self.overflow else "local")
        return f"<BufferLease ptr={self.ptr:#x} size={self.size} {state}>"


_VIEWS_ALIVE = "release(): views of lease.buffer are still alive; delete them first"


def _check_positive(name: str, value: Any, kind: str) -> None:
    """TypeError unless ``value`` is an int (``kind`` names what is
    accepted), ValueError unless it is positive."""
    if not _util.is_int(value):
        raise TypeError(f"{name} must be {kind}, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


class BufferPool:
    """Leases of registered scratch memory from a store's local buffer.

    Args:
        store: a set-up :class:`~mooncake.store.MooncakeDistributedStore`.
        max_regions: most leases active at once (None: no limit).
        max_bytes: most bytes leased at once, local and overflow together
            (None: twice the store's local buffer size).

    Thread-safe: leases may be acquired and released from any thread.
    """

    def __init__(self, store: Any, max_regions: Optional[int] = None,
                 max_bytes: Optional[int] = None) -> None:
        if not hasattr(store, "alloc_from_mem_pool") or not hasattr(store, "_mem_pool_free"):
            raise TypeError(f"store must be a MooncakeDistributedStore, "
                            f"not {type(store).__name__}")
        if max_regions is not None:
            _check_positive("max_regions", max_regions, "an int or None")
        if max_bytes is not None:
            _check_positive("max_bytes", max_bytes, "an int or None")
        else:
            max_bytes = 2 * store._local_buffer_bytes()
        self._store = store
        self._max_regions = max_regions
        self._max_bytes = int(max_bytes)
        self._cond = threading.Condition()
        self._active: "dict[int, BufferLease]" = {}
        self._active_bytes = 0
        self._closed = False
        self._host = None  # MooncakeHostMemAllocator, created on first overflow

    # ---- introspection -------------------------------------------------------

    @property
    def max_regions(self) -> Optional[int]:
        return self._max_regions

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def active_leases(self) -> int:
        """Number of leases not yet released."""
        with self._cond:
            return len(self._active)

    @property
    def active_bytes(self) -> int:
        """Bytes held by active leases."""
        with self._cond:
            return self._active_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- leases ------------------------------------------------------------------

    def acquire(self, size: int, block: bool = True,
                timeout: Optional[float] = None) -> BufferLease:
        """Lease ``size`` bytes of registered memory.

        Args:
            size: bytes (> 0).
            block: wait for capacity (True) or raise at once (False).
            timeout: with ``block``, the most seconds to wait (None: wait as
                long as other leases of this pool are active and may
                return memory).

        Raises:
            TypeError / ValueError: a bad ``size`` or ``timeout``.
            BufferPoolExhausted: no capacity and ``block`` is False, or
                ``size`` can never fit (above ``max_bytes``), or nothing
                can free memory any more.
            BufferPoolTimeout: ``timeout`` passed without capacity.
            RuntimeError: the pool is closed.
        """
        _check_positive("size", size, "an int")
        block = _util.check_bool("block", block)
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number or None, "
                                f"not {type(timeout).__name__}")
            if timeout < 0:
                raise ValueError(f"timeout must be >= 0, got {timeout}")
        if size > self._max_bytes:
            raise BufferPoolExhausted(f"acquire({size}): larger than max_bytes "
                                      f"({self._max_bytes})")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the BufferPool is closed")
                lease = self._try_acquire(int(size))
                if lease is not None:
                    return lease
                if not block:
                    raise BufferPoolExhausted(
                        f"acquire({size}): no capacity ({len(self._active)} leases, "
                        f"{self._active_bytes} bytes active)")
                if deadline is None:
                    if not self._active:
                        # Nothing of ours can come back: waiting would hang.
                        raise BufferPoolExhausted(
                            f"acquire({size}): the local buffer and overflow memory "
                            "are exhausted and no lease of this pool is active")
                    self._cond.wait(_RETRY_S)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BufferPoolTimeout(f"acquire({size}): no capacity within "
                                            f"{timeout} s")
                self._cond.wait(min(left, _RETRY_S))

    @contextmanager
    def buffer(self, size: int, block: bool = True,
               timeout: Optional[float] = None) -> Iterator[BufferLease]:
        """:meth:`acquire` as a context manager; the lease is released on
        exit (BufferError there if views of it were kept)."""
        lease = self.acquire(size, block=block, timeout=timeout)
        try:
            yield lease
        finally:
            lease.release()

    def close(self) -> None:
        """Close the pool; later :meth:`acquire` calls raise.  Idempotent.

        Raises:
            RuntimeError: leases are still active.
        """
        with self._cond:
            if self._active:
                raise RuntimeError(f"close(): {len(self._active)} lease(s) still active; "
                                   "release them first")
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

    # ---- internals (called with self._cond held) -----------------------------------

    def _try_acquire(self, size: int) -> Optional[BufferLease]:
        if self._max_regions is not None and len(self._active) >= self._max_regions:
            return None
        if self._active_bytes + size > self._max_bytes:
            return None
        overflow = False
        ptr = self._store.alloc_from_mem_pool(size)
        if ptr == 0:
            ptr = self._alloc_overflow(size)
            if ptr == 0:
                return None
            overflow = True
        try:
            lease = BufferLease(self, ptr, size, overflow)
        except BaseException:
            self._free(ptr, overflow)
            raise
        self._active[id(lease)] = lease
        self._active_bytes += size
        return lease

    def _alloc_overflow(self, size: int) -> int:
        from mooncake.store import MooncakeHostMemAllocator

        if self._host is None:
            self._host = MooncakeHostMemAllocator()
        ptr = self._host.alloc(size)
        if ptr == 0:
            return 0
        if self._store.register_buffer(ptr, size) != 0:
            self._host.free(ptr)
            return 0
        return ptr

    def _free(self, ptr: int, overflow: bool) -> None:
        if overflow:
            self._store.unregister_buffer(ptr)
            self._host.free(ptr)
        else:
            self._store._mem_pool_free(ptr)

    def _release(self, lease: BufferLease) -> None:
        with self._cond:
            if lease._released:
                return
            if lease._view is not None:
                try:
                    lease._view.release()
                except BufferError:
                    raise BufferError(_VIEWS_ALIVE) from None
                lease._view = None
            if lease._region.exports() > 0:
                raise BufferError(_VIEWS_ALIVE)
            lease._released = True
            self._active.pop(id(lease), None)
            self._active_bytes -= lease.size
            try:
                self._free(lease.ptr, lease.overflow)
            finally:
                self._cond.notify_all()


#: The former name of :class:`BufferPool`, kept for existing code.
RegisteredBufferPool = BufferPool

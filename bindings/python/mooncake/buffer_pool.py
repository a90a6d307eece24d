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
  exhausted, an *overflow* buffer is allocated (host memory aligned to
  ``alignment``, 8 MiB by default), registered for the lease and
  unregistered and freed at release;
* ``max_regions`` bounds the number of active leases (None: unbounded);
* ``max_bytes`` bounds the active bytes, local and overflow together; the
  default (None or 0) is twice the local buffer size, i.e. one
  local-buffer-sized overflow burst;
* ``acquire(size, block=False)`` raises :class:`BufferPoolExhausted` when
  no capacity is left; ``acquire(size, timeout=t)`` waits up to ``t``
  seconds for other leases to be released (the GIL is released while
  waiting), then raises :class:`BufferPoolTimeout`.  ``block`` and
  ``timeout`` default to the pool's ``block_on_exhaustion`` and
  ``default_timeout``;
* ``lease.release()`` raises :class:`BufferError` while memoryviews (or
  arrays) derived from ``lease.buffer`` are alive: the memory would be
  handed to somebody else under them.  Delete them and release again;
* ``close()`` raises :class:`RuntimeError` while leases are active.

The pool's memory accounting is exact: an export counter lives in the C
object behind ``lease.buffer``, so "are views still alive" is a fact, not a
reference-count guess.

Upstream's other constructor arguments are accepted with upstream's
meaning: ``min_size_class`` is checked (> 0) and otherwise unused -- a
lease is exactly the size asked for, there is no size-class rounding;
``max_size_class`` (default ``max_bytes``) only sets the size above which
a lease counts as *oversize* (:attr:`BufferPool.oversize_leases`);
``prewarm_size``/``prewarm_count`` and :meth:`BufferPool.prewarm` are
accepted and do nothing, as upstream.

Where this pool differs from upstream's: an explicit ``max_bytes`` below
the local buffer size is a real bound (upstream raises it to the local
buffer size; the spec says "max_bytes bounds total active ... leases");
and a blocking acquire without a timeout that nothing of this pool can
ever satisfy raises :class:`BufferPoolExhausted` instead of waiting forever.
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
    "RegisteredBufferLease",
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

    __slots__ = ("_pool", "ptr", "size", "overflow", "_base", "_region", "_view",
                 "_released", "__weakref__")

    def __init__(self, pool: "BufferPool", ptr: int, size: int, overflow: bool,
                 base: int = 0) -> None:
        self._pool = pool
        self.ptr = ptr
        self.size = size
        self.overflow = overflow
        self._base = base or ptr  # what to free: an aligned overflow lease starts inside it
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


def _check_timeout(name: str, value: Any) -> None:
    """A number of seconds >= 0: TypeError / ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number or None, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _check_size_t(name: str, value: Any) -> int:
    """An int >= 0, as upstream's binding takes its size_t arguments:
    TypeError for anything else (a negative int included)."""
    if not _util.is_int(value) or value < 0:
        raise TypeError(f"{name} must be a non-negative int, not {value!r}")
    return int(value)


def _check_positive(name: str, value: Any, kind: str) -> None:
    """TypeError unless ``value`` is an int (``kind`` names what is
    accepted), ValueError unless it is positive."""
    if not _util.is_int(value):
        raise TypeError(f"{name} must be {kind}, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


class BufferPool:
    """Leases of registered scratch memory from a store's local buffer.

    The keyword names and their order are upstream's.

    Args:
        store: a set-up :class:`~mooncake.store.MooncakeDistributedStore`
            with a local buffer.
        max_bytes: most bytes leased at once, local and overflow together
            (None or 0: twice the store's local buffer size).
        min_size_class: must be > 0; otherwise unused (no size classes).
        max_size_class: leases above this many bytes are counted in
            :attr:`oversize_leases` (None: ``max_bytes``).
        alignment: alignment of overflow buffers; a power of two, at least
            8 (default 8 MiB).  Local-buffer leases are aligned as the
            store's allocator places them.
        block_on_exhaustion: what ``acquire(block=None)`` does.
        default_timeout: seconds ``acquire(timeout=None)`` waits (None:
            no limit); not negative.
        max_regions: most leases active at once (None: no limit).
        prewarm_size, prewarm_count: accepted, unused (as upstream).

    Raises:
        TypeError: a store that is no store, or an argument of the wrong
            type (a negative size included, as upstream's size_t).
        ValueError: ``min_size_class`` or ``alignment`` is 0, ``alignment``
            is no power of two or below 8, ``default_timeout`` is negative,
            ``max_regions`` is not positive.
        RuntimeError: the store is not set up ("MooncakeDistributedStore is
            not initialized"), or was set up with ``local_buffer_size`` 0
            ("BufferPool requires a store configured with a local buffer").

    Thread-safe: leases may be acquired and released from any thread.
    """

    def __init__(self, store: Any, max_bytes: Optional[int] = 0,
                 min_size_class: int = 65536, max_size_class: Optional[int] = None,
                 alignment: int = 8388608, block_on_exhaustion: bool = True,
                 default_timeout: Optional[float] = None, max_regions: Optional[int] = None,
                 prewarm_size: Optional[int] = None, prewarm_count: int = 0) -> None:
        if not hasattr(store, "alloc_from_mem_pool") or not hasattr(store, "_mem_pool_free"):
            raise TypeError(f"store must be a MooncakeDistributedStore, "
                            f"not {type(store).__name__}")
        max_bytes = 0 if max_bytes is None else _check_size_t("max_bytes", max_bytes)
        min_size_class = _check_size_t("min_size_class", min_size_class)
        if min_size_class == 0:
            raise ValueError("min_size_class must be > 0")
        if max_size_class is not None:
            max_size_class = _check_size_t("max_size_class", max_size_class)
        alignment = _check_size_t("alignment", alignment)
        if alignment == 0:
            raise ValueError("alignment must be > 0")
        if alignment & (alignment - 1) or alignment < 8:
            raise ValueError(f"alignment must be a power of two and at least 8 "
                             f"(sizeof(void*)), got {alignment}")
        block_on_exhaustion = _util.check_bool("block_on_exhaustion", block_on_exhaustion)
        if default_timeout is not None:
            _check_timeout("default_timeout", default_timeout)
        if max_regions is not None:
            _check_positive("max_regions", max_regions, "an int or None")
        if prewarm_size is not None:
            _check_size_t("prewarm_size", prewarm_size)
        _check_size_t("prewarm_count", prewarm_count)
        if store.get_hostname() == "":
            raise RuntimeError("MooncakeDistributedStore is not initialized")
        local = store._local_buffer_bytes()
        if local == 0:
            raise RuntimeError("BufferPool requires a store configured with a local buffer")
        if max_bytes == 0:
            max_bytes = 2 * local
        self._store = store
        self._max_regions = max_regions
        self._max_bytes = int(max_bytes)
        self._min_size_class = min_size_class
        self._max_size_class = self._max_bytes if max_size_class is None else max_size_class
        self._alignment = alignment
        self._block = block_on_exhaustion
        self._default_timeout = default_timeout
        self._oversize = 0
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

    def acquire(self, size: int, block: Optional[bool] = None,
                timeout: Optional[float] = None) -> BufferLease:
        """Lease ``size`` bytes of registered memory.

        Args:
            size: bytes (> 0).
            block: wait for capacity (True) or raise at once (False);
                None: the pool's ``block_on_exhaustion``.
            timeout: with ``block``, the most seconds to wait; None: the
                pool's ``default_timeout``, and when that is None too, wait
                as long as other leases of this pool are active and may
                return memory.

        Raises:
            TypeError / ValueError: a bad ``size`` or ``timeout``.
            BufferPoolExhausted: no capacity and ``block`` is False, or
                ``size`` can never fit (above ``max_bytes``), or nothing
                can free memory any more.
            BufferPoolTimeout: ``timeout`` passed without capacity.
            RuntimeError: the pool is closed.
        """
        _check_positive("size", size, "an int")
        block = self._block if block is None else _util.check_bool("block", block)
        if timeout is None:
            timeout = self._default_timeout
        else:
            _check_timeout("timeout", timeout)
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
    def buffer(self, size: int, block: Optional[bool] = None,
               timeout: Optional[float] = None) -> Iterator[BufferLease]:
        """:meth:`acquire` as a context manager; the lease is released on
        exit (BufferError there if views of it were kept)."""
        lease = self.acquire(size, block=block, timeout=timeout)
        try:
            yield lease
        finally:
            lease.release()

    def prewarm(self, size: Optional[int] = None, count: int = 0) -> None:
        """Accepted and does nothing, as upstream's (leases come from the
        store's already registered local buffer)."""
        if size is not None:
            _check_size_t("size", size)
        _check_size_t("count", count)

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
        base = ptr = self._store.alloc_from_mem_pool(size)
        if ptr == 0:
            base, ptr = self._alloc_overflow(size)
            if ptr == 0:
                return None
            overflow = True
        try:
            lease = BufferLease(self, ptr, size, overflow, base)
        except BaseException:
            self._free(ptr, overflow, base)
            raise
        self._active[id(lease)] = lease
        self._active_bytes += size
        if size > self._max_size_class:
            self._oversize += 1
        return lease

    def _alloc_overflow(self, size: int) -> "tuple[int, int]":
        """(mapping, aligned address) of a registered overflow buffer of
        ``size`` bytes aligned to ``alignment``; (0, 0) when none can be had.
        Host memory is page aligned; for a larger alignment the mapping is
        ``alignment`` - 1 bytes longer (address space only: the slack is
        never touched) and the lease starts at the first aligned byte."""
        from mooncake.store import MooncakeHostMemAllocator

        if self._host is None:
            self._host = MooncakeHostMemAllocator()
        slack = self._alignment - 1 if self._alignment > 4096 else 0
        base = self._host.alloc(size + slack)
        if base == 0:
            return 0, 0
        ptr = (base + self._alignment - 1) & ~(self._alignment - 1)
        if self._store.register_buffer(ptr, size) != 0:
            self._host.free(base)
            return 0, 0
        return base, ptr

    def _free(self, ptr: int, overflow: bool, base: int = 0) -> None:
        if overflow:
            self._store.unregister_buffer(ptr)
            self._host.free(base or ptr)
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
                self._free(lease.ptr, lease.overflow, lease._base)
            finally:
                self._cond.notify_all()


#: The former name of :class:`BufferPool`, kept for existing code.
RegisteredBufferPool = BufferPool
#: Upstream's other name of :class:`BufferLease`.
RegisteredBufferLease = BufferLease

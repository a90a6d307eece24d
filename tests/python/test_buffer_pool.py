# SPDX-License-Identifier: Apache-2.0
"""mooncake.buffer_pool.BufferPool, rule by rule (spec "BufferPool Helper";
upstream's exact messages and types: upstream-parity-2.md §2).

* leases come from the store's setup-time local buffer: their ptr works
  with the zero-copy calls without register_buffer;
* when the local buffer is exhausted a lease gets an overflow buffer that
  is registered for the lease (usable with get_into) and unregistered at
  release;
* max_regions bounds concurrent leases, max_bytes bounds their total
  bytes (0: twice the local buffer; any other value is raised to at least
  the local buffer size);
* acquire(block=False) raises "buffer pool is exhausted" when nothing
  fits; acquire(timeout=...) waits for another thread's release without
  holding the GIL, and raises "timed out waiting for buffer" when the
  timeout passes;
* every read of lease.buffer is a new memoryview over a new
  BufferLeaseView that keeps the lease alive; release() refuses ("cannot
  release buffer while exported views exist") while one is alive and
  leaves it valid; a lease nobody references is released; close()
  refuses ("cannot close buffer pool with active leases") while leases
  are active;
* acquire(0) is allowed; pool.buffer(size) is acquire (it returns the
  lease, which is the context manager);
* every RuntimeError message of upstream's table, and TypeError for
  sizes that are no size_t;
* RegisteredBufferPool / RegisteredBufferLease / RegisteredBufferLeaseView
  are the same classes; mooncake.store exports BufferLeaseView;
* a wrapper whose _get_pyclient_capsule() returns the store's capsule is
  accepted in place of the store.
"""

import gc
import os
import threading
import time
import uuid

import numpy as np
import pytest

from helpers import MiB

INVALID_PARAMS = -600

LEASE_TTL_MS = 2000


def key(tag: str = "bp") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def pool_cls():
    from mooncake.buffer_pool import BufferPool
    return BufferPool


def refused(fn, *args, message=None, **kwargs):
    """fn must raise a RuntimeError (upstream's type for every refusal),
    whose text contains ``message`` when given."""
    try:
        fn(*args, **kwargs)
    except RuntimeError as e:  # the documented failure
        if message is not None:
            assert message in str(e), f"{str(e)!r} does not say {message!r}"
        return e
    raise AssertionError(f"{fn!r} did not raise")


def test_spec_example_and_local_buffer_leases(store):
    BufferPool = pool_cls()
    k = key()
    data = os.urandom(700000)
    assert store.put(k, data) == 0
    pool = BufferPool(store)
    with pool.buffer(1024 * 1024) as lease:
        assert lease.size == 1024 * 1024
        assert lease.ptr != 0
        assert isinstance(lease.buffer, memoryview)
        assert lease.buffer.nbytes == 1024 * 1024
        # no register_buffer: the lease is registered memory already
        n = store.get_into(k, lease.ptr, lease.size)
        assert n == len(data)
        view = lease.buffer[:n]
        assert bytes(view) == data
        assert np.frombuffer(view, dtype=np.uint8)[:4].tobytes() == data[:4]
        del view
    pool.close()


def test_lease_as_a_write_source(store):
    pool = pool_cls()(store)
    lease = pool.acquire(4096)
    try:
        lease.buffer[:5] = b"hello"
        k = key()
        assert store.put_from(k, lease.ptr, 5) == 0
        assert store.get(k) == b"hello"
    finally:
        lease.release()
    pool.close()


def test_overflow_lease_is_registered_then_unregistered(make_store):
    store = make_store(buffer=4 * MiB)
    k = key()
    data = os.urandom(3 * MiB)
    assert store.put(k, data) == 0
    small = key("small")
    assert store.put(small, b"0123456789abcdef") == 0
    pool = pool_cls()(store)
    local = pool.acquire(3 * MiB)
    over = pool.acquire(3 * MiB)       # the 4 MiB local buffer cannot hold both
    try:
        for lease in (local, over):
            assert store.get_into(k, lease.ptr, lease.size) == len(data)
            assert bytes(lease.buffer[:16]) == data[:16]
        assert abs(over.ptr - local.ptr) >= 3 * MiB     # no overlap
        # default max_bytes: one local-buffer-sized burst (4 + 4 MiB) -- a
        # third 3 MiB lease does not fit
        refused(pool.acquire, 3 * MiB, block=False)
        assert store.get_into(small, over.ptr, 16) == 16
    finally:
        local.release()
        over_ptr = over.ptr
        over.release()
    # released overflow memory is no longer registered: refused untouched
    assert store.get_into(small, over_ptr, 16) == INVALID_PARAMS
    # the local buffer is whole again
    again = pool.acquire(3 * MiB, block=False)
    assert store.get_into(k, again.ptr, again.size) == len(data)
    again.release()
    pool.close()


def test_max_regions(store):
    pool = pool_cls()(store, max_regions=2)
    a = pool.acquire(1024)
    b = pool.acquire(1024)
    refused(pool.acquire, 1024, block=False)
    a.release()
    c = pool.acquire(1024, block=False)
    b.release()
    c.release()
    pool.close()


def test_max_bytes(make_store):
    """max_bytes above the local buffer is a real bound; below it, it is
    raised to the local buffer size (upstream: max(max_bytes, local))."""
    store = make_store(buffer=MiB)
    pool = pool_cls()(store, max_bytes=2 * MiB)
    assert pool.max_bytes == 2 * MiB
    a = pool.acquire(1200 * 1024)
    refused(pool.acquire, 1200 * 1024, block=False, message="buffer pool is exhausted")
    b = pool.acquire(2 * MiB - 1200 * 1024, block=False)  # exactly max_bytes
    refused(pool.acquire, 1, block=False, message="buffer pool is exhausted")
    a.release()
    c = pool.acquire(1200 * 1024, block=False)
    b.release()
    c.release()
    # a single request above max_bytes can never be served
    refused(pool.acquire, 2 * MiB + 1, block=False,
            message="requested buffer size exceeds pool capacity")
    pool.close()
    small = pool_cls()(store, max_bytes=4096)
    assert small.max_bytes == MiB                         # raised to the local buffer
    small.acquire(MiB - 4096).release()
    small.close()


def test_acquire_timeout_expires(store):
    pool = pool_cls()(store, max_regions=1)
    held = pool.acquire(1024)
    t0 = time.monotonic()
    refused(pool.acquire, 1024, timeout=0.3, message="timed out waiting for buffer")
    waited = time.monotonic() - t0
    assert 0.25 <= waited < 10, waited
    held.release()
    pool.close()


def test_acquire_waits_for_a_release_without_holding_the_gil(store):
    pool = pool_cls()(store, max_regions=1)
    held = pool.acquire(1024)
    counter = [0]
    stop = threading.Event()
    waiting = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    def release_later():
        waiting.wait(30)
        # give the main thread time to block inside acquire(); then only a
        # thread that gets the GIL while it waits there can see the counter
        # move and release the lease
        time.sleep(0.3)
        start = counter[0]
        deadline = time.monotonic() + 30
        while counter[0] < start + 10000 and time.monotonic() < deadline:
            time.sleep(0.001)
        held.release()

    counter_t = threading.Thread(target=count, daemon=True)
    releaser = threading.Thread(target=release_later, daemon=True)
    counter_t.start()
    releaser.start()
    try:
        waiting.set()
        t0 = time.monotonic()
        lease = pool.acquire(1024, timeout=20)
        waited = time.monotonic() - t0
        assert lease.ptr != 0
        assert waited >= 0.25, waited      # it did wait for the release
        lease.release()
    finally:
        stop.set()
        counter_t.join(10)
        releaser.join(40)
    assert counter[0] > 10000
    pool.close()


def test_release_refuses_while_views_are_alive(store):
    pool = pool_cls()(store)
    lease = pool.acquire(4096)
    view = lease.buffer[:100]
    refused(lease.release, message="cannot release buffer while exported views exist")
    del view
    arr = np.frombuffer(lease.buffer, dtype=np.uint8)
    refused(lease.release, message="cannot release buffer while exported views exist")
    del arr
    gc.collect()
    lease.release()
    pool.close()


def test_a_held_view_stays_valid_after_a_refused_release(store):
    """Only ``view = lease.buffer`` is held: release refuses and the view
    still reads and writes the lease's memory."""
    pool = pool_cls()(store)
    lease = pool.acquire(64)
    view = lease.buffer
    view[:5] = b"hello"
    refused(lease.release, message="cannot release buffer while exported views exist")
    assert not lease.released
    assert bytes(view[:5]) == b"hello"
    view[5:7] = b"!!"
    assert bytes(lease.buffer[:7]) == b"hello!!"
    k = key()
    assert store.put_from(k, lease.ptr, 7) == 0
    assert store.get(k) == b"hello!!"
    del view
    lease.release()
    pool.close()


def test_each_buffer_read_is_a_new_view_over_a_buffer_lease_view(store):
    from mooncake.buffer_pool import BufferLeaseView
    from mooncake.store import RegisteredBufferLeaseView
    assert RegisteredBufferLeaseView is BufferLeaseView
    pool = pool_cls()(store)
    lease = pool.acquire(100)
    a, b = lease.buffer, lease.buffer
    assert a is not b and a.obj is not b.obj
    for v in (a, b):
        assert isinstance(v.obj, BufferLeaseView)
        assert (v.format, v.ndim, v.readonly, len(v), v.nbytes) == ("B", 1, False, 100, 100)
    # the view object has the buffer protocol and a .buffer property too
    inner = a.obj.buffer
    assert isinstance(inner, memoryview) and len(inner) == 100
    a[0] = 7
    assert b[0] == 7 and inner[0] == 7
    del a, b, v, inner
    lease.release()
    pool.close()


def test_views_keep_the_lease_alive(store):
    """A view outlives the name of its lease: the lease is not released
    under it, and goes back once the view is gone."""
    pool = pool_cls()(store, max_regions=1)
    lease = pool.acquire(32)
    view = lease.buffer
    del lease
    gc.collect()
    assert pool.active_leases == 1
    view[:3] = b"abc"
    assert bytes(view[:3]) == b"abc"
    refused(pool.close, message="cannot close buffer pool with active leases")
    del view
    gc.collect()
    assert pool.active_leases == 0
    pool.acquire(32, block=False).release()
    pool.close()


def test_a_garbage_collected_lease_is_released(store):
    pool = pool_cls()(store, max_regions=1)
    lease = pool.acquire(4096)
    del lease
    gc.collect()
    pool.close()                                   # no active lease is left
    # and the memory went back: a new pool gets the whole local buffer
    again = pool_cls()(store)
    big = again.acquire(16 * MiB, block=False)
    assert not big.overflow
    big.release()
    again.close()


def test_close_refuses_with_active_leases(store):
    pool = pool_cls()(store)
    lease = pool.acquire(4096)
    refused(pool.close, message="cannot close buffer pool with active leases")
    lease.release()
    pool.close()
    refused(pool.acquire, 1, message="buffer pool is closed")
    pool.close()                                    # idempotent


def test_acquire_zero_bytes(store):
    pool = pool_cls()(store)
    lease = pool.acquire(0)
    assert lease.size == 0 and lease.ptr != 0
    assert len(lease.buffer) == 0
    assert pool.active_bytes == 1                   # one byte is allocated
    lease.release()
    pool.close()


def test_buffer_is_acquire_and_returns_the_lease(store):
    from mooncake.buffer_pool import BufferLease
    pool = pool_cls()(store)
    lease = pool.buffer(128)
    assert isinstance(lease, BufferLease)
    assert lease.ptr != 0 and lease.size == 128     # no generator in between
    with lease as entered:
        assert entered is lease
    assert lease.released
    with pool.buffer(64, block=False, timeout=None) as lz:
        lz.buffer[:2] = b"ok"
    pool.close()


def test_a_released_lease_is_closed(store):
    pool = pool_cls()(store)
    lease = pool.acquire(64)
    lease.release()
    lease.release()                                 # double release: a no-op
    refused(lambda: lease.ptr, message="buffer lease is closed")
    with pytest.raises(BufferError, match="Error getting buffer") as info:
        lease.buffer
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "buffer lease is closed" in str(info.value.__cause__)
    assert lease.size == 64
    pool.close()


@pytest.mark.parametrize("size", [-1, 1.0, "1", None, 2 ** 64])
def test_acquire_sizes_are_size_t(store, size):
    pool = pool_cls()(store)
    with pytest.raises(TypeError):
        pool.acquire(size)
    pool.close()


def test_acquire_timeout_must_be_non_negative(store):
    pool = pool_cls()(store)
    refused(pool.acquire, 1, timeout=-1, message="timeout must be non-negative")
    stored = pool_cls()(store, default_timeout=-0.5)      # stored unchecked
    assert stored.default_timeout == -0.5
    refused(stored.acquire, 1, message="timeout must be non-negative")
    stored.acquire(1, timeout=0).release()
    stored.close()
    pool.close()


def test_upstream_maximum_size_is_above_capacity(store):
    pool = pool_cls()(store)
    refused(pool.acquire, 2 ** 64 - 1, message="requested buffer size exceeds pool capacity")
    pool.close()


def test_max_regions_zero_is_accepted(store):
    pool = pool_cls()(store, max_regions=0)
    assert pool.max_regions == 0
    refused(pool.acquire, 1, block=False, message="buffer pool is exhausted")
    pool.close()


def test_context_manager_releases_even_on_error(store):
    pool = pool_cls()(store, max_regions=1)
    with pool.buffer(2048) as lease:
        assert lease.size == 2048
    # released: the single region is free again
    with pytest.raises(ZeroDivisionError):
        with pool.buffer(2048) as lease:
            1 / 0
    second = pool.acquire(2048, block=False)
    second.release()
    pool.close()


def test_many_leases_do_not_leak(store):
    pool = pool_cls()(store)
    for _ in range(200):
        lease = pool.acquire(4 * MiB, block=False)   # a quarter of the local buffer
        lease.release()
    leases = [pool.acquire(MiB, block=False) for _ in range(8)]
    assert len({lz.ptr for lz in leases}) == 8
    for lz in leases:
        lz.release()
    pool.close()


def test_registered_buffer_pool_alias():
    from mooncake import buffer_pool
    from mooncake.buffer_pool import BufferPool, RegisteredBufferPool
    assert RegisteredBufferPool is BufferPool
    assert buffer_pool.__all__ == ["BufferPool", "RegisteredBufferPool"]


# ---- upstream's constructor arguments ---------------------------------------------------


def test_upstream_keyword_names_and_order(store):
    """BufferPool(store, max_bytes=0, min_size_class=65536, max_size_class=None,
    alignment=8 MiB, block_on_exhaustion=True, default_timeout=None,
    max_regions=None, prewarm_size=None, prewarm_count=0), as upstream."""
    import inspect
    BufferPool = pool_cls()
    params = list(inspect.signature(BufferPool).parameters.values())
    assert [(p.name, p.default) for p in params] == [
        ("store", inspect.Parameter.empty), ("max_bytes", 0), ("min_size_class", 65536),
        ("max_size_class", None), ("alignment", 8388608), ("block_on_exhaustion", True),
        ("default_timeout", None), ("max_regions", None), ("prewarm_size", None),
        ("prewarm_count", 0)]
    pool = BufferPool(store, 24 * MiB)                 # positional max_bytes
    assert pool.max_bytes == 24 * MiB
    assert pool.max_size_class == 24 * MiB              # None -> max_bytes
    assert pool.min_size_class == 65536 and pool.alignment == 8 * MiB
    pool.close()
    # 0: the default, twice the local buffer (16 MiB in the fixture)
    pool = BufferPool(store, max_bytes=0)
    assert pool.max_bytes == 32 * MiB
    pool.close()
    with pytest.raises(TypeError):                      # a size_t, as upstream's
        BufferPool(store, max_bytes=None)


POSITIVE = "min_size_class and alignment must be positive"
ALIGNMENT = "alignment must be a power of two and at least sizeof(void*)"


@pytest.mark.parametrize("kwargs,exc,message", [
    ({"min_size_class": 0}, RuntimeError, POSITIVE),
    ({"alignment": 0}, RuntimeError, POSITIVE),
    ({"alignment": 3 * 4096}, RuntimeError, ALIGNMENT),   # not a power of two
    ({"alignment": 4}, RuntimeError, ALIGNMENT),          # below sizeof(void*)
    ({"min_size_class": -1}, TypeError, None),            # upstream: size_t conversion
    ({"alignment": -8}, TypeError, None),
    ({"max_size_class": -1}, TypeError, None),
    ({"max_bytes": -1}, TypeError, None),
    ({"max_regions": -1}, TypeError, None),
    ({"prewarm_count": -1}, TypeError, None),
    ({"alignment": 8.0}, TypeError, None),
    ({"block_on_exhaustion": "yes"}, TypeError, None),
    ({"default_timeout": "1"}, TypeError, None),
])
def test_constructor_validation_as_upstream(store, kwargs, exc, message):
    with pytest.raises(exc) as info:
        pool_cls()(store, **kwargs)
    if message is not None:
        assert type(info.value) is RuntimeError and str(info.value) == message


def test_constructor_needs_a_set_up_store_with_a_local_buffer(master, make_store):
    from mooncake.store import MooncakeDistributedStore
    for nothing in (None, MooncakeDistributedStore()):
        with pytest.raises(RuntimeError, match="^MooncakeDistributedStore is not initialized$"):
            pool_cls()(nothing)
    no_buffer = make_store(buffer=0)
    with pytest.raises(RuntimeError,
                       match="^BufferPool requires a store configured with a local buffer$"):
        pool_cls()(no_buffer)
    with pytest.raises(RuntimeError) as info:
        pool_cls()(object())
    assert str(info.value) == ("BufferPool store parameter must be a PyClient or store "
                               "wrapper that implements _get_pyclient_capsule()")


def test_a_store_wrapper_with_the_capsule_is_accepted(store):
    """Upstream's wrappers hand BufferPool the store's capsule
    (``mooncake.PyClient.shared_ptr``) instead of the store."""
    import ctypes

    class Wrapper:
        def __init__(self, inner):
            self.inner = inner

        def _get_pyclient_capsule(self):
            return self.inner._get_pyclient_capsule()

    capsule = store._get_pyclient_capsule()
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, (ctypes.py_object,)
    assert type(capsule).__name__ == "PyCapsule"
    assert name(capsule) == b"mooncake.PyClient.shared_ptr"
    pool = pool_cls()(Wrapper(store))
    k = key()
    assert store.put(k, b"through a wrapper") == 0
    with pool.acquire(64) as lease:
        assert store.get_into(k, lease.ptr, lease.size) == 17
        assert bytes(lease.buffer[:17]) == b"through a wrapper"
    pool.close()

    class NotACapsule:
        def _get_pyclient_capsule(self):
            return 42
    with pytest.raises(RuntimeError, match="non-capsule"):
        pool_cls()(NotACapsule())

    class NoStore:
        def _get_pyclient_capsule(self):
            return None
    with pytest.raises(RuntimeError, match="^MooncakeDistributedStore is not initialized$"):
        pool_cls()(NoStore())


@pytest.mark.parametrize("alignment", [8 * MiB, MiB, 4096, 8])
def test_overflow_leases_are_aligned(make_store, alignment):
    """alignment is used for overflow allocations: every overflow lease
    starts on an ``alignment`` boundary and works with the zero-copy calls."""
    store = make_store(buffer=MiB)
    k = key()
    data = os.urandom(700 * 1024)
    assert store.put(k, data) == 0
    pool = pool_cls()(store, max_bytes=16 * MiB, alignment=alignment)
    local = pool.acquire(MiB - 4096)                   # fills the 1 MiB local buffer
    leases = [pool.acquire(len(data), block=False) for _ in range(3)]
    try:
        for lz in leases:
            assert lz.overflow, "the local buffer is full: this must be an overflow lease"
            assert lz.ptr % alignment == 0, f"{lz.ptr:#x} is not {alignment}-aligned"
            assert store.get_into(k, lz.ptr, lz.size) == len(data)
            assert bytes(lz.buffer[:64]) == data[:64]
    finally:
        ptrs = [lz.ptr for lz in leases]
        for lz in leases:
            lz.release()
        local.release()
    small = key("small")
    assert store.put(small, b"x" * 16) == 0
    for p in ptrs:                                     # unregistered at release
        assert store.get_into(small, p, 16) == INVALID_PARAMS
    pool.close()


def test_max_size_class_counts_oversize_leases(store):
    pool = pool_cls()(store, max_size_class=64 * 1024)
    assert pool.oversize_leases == 0
    for size in (1024, 64 * 1024, 64 * 1024 + 1, MiB):
        pool.acquire(size).release()
    assert pool.oversize_leases == 2
    pool.close()
    default = pool_cls()(store)                        # max_size_class = max_bytes
    default.acquire(MiB).release()
    assert default.oversize_leases == 0
    default.close()


def test_block_on_exhaustion_false_fails_at_once(store):
    BufferPool = pool_cls()
    from mooncake.buffer_pool import BufferPoolExhausted, BufferPoolTimeout
    pool = BufferPool(store, max_regions=1, block_on_exhaustion=False, default_timeout=5)
    held = pool.acquire(1024)
    t0 = time.monotonic()
    with pytest.raises(BufferPoolExhausted, match="buffer pool is exhausted") as info:
        pool.acquire(1024)                             # block=None: the pool's setting
    assert isinstance(info.value, RuntimeError)
    assert not isinstance(info.value, BufferPoolTimeout)
    assert time.monotonic() - t0 < 2.0
    # an explicit block=True overrides it, bounded by the pool's default_timeout
    t0 = time.monotonic()
    with pytest.raises(BufferPoolTimeout):
        pool.acquire(1024, block=True, timeout=0.3)
    assert time.monotonic() - t0 >= 0.25
    held.release()
    pool.close()


def test_default_timeout_bounds_a_blocking_acquire(store):
    from mooncake.buffer_pool import BufferPoolTimeout
    pool = pool_cls()(store, max_regions=1, default_timeout=0.3)
    assert pool.default_timeout == 0.3 and pool.block_on_exhaustion is True
    held = pool.acquire(1024)
    t0 = time.monotonic()
    with pytest.raises(BufferPoolTimeout):
        pool.acquire(1024)
    waited = time.monotonic() - t0
    assert 0.25 <= waited < 10, waited
    held.release()
    pool.close()


def test_prewarm_is_an_accepted_no_op(store):
    pool = pool_cls()(store, prewarm_size=MiB, prewarm_count=4)
    assert pool.prewarm(MiB, 2) is None
    assert pool.prewarm() is None
    assert pool.active_leases == 0 and pool.active_bytes == 0
    with pytest.raises(TypeError):
        pool.prewarm(-1, 1)
    pool.close()


def test_upstream_aliases_in_store_and_package():
    import mooncake
    from mooncake import store as store_mod
    from mooncake.buffer_pool import BufferLease, BufferLeaseView, BufferPool
    assert mooncake.BufferPool is mooncake.RegisteredBufferPool is BufferPool
    assert store_mod.BufferPool is store_mod.RegisteredBufferPool is BufferPool
    assert store_mod.BufferLease is store_mod.RegisteredBufferLease is BufferLease
    assert store_mod.BufferLeaseView is store_mod.RegisteredBufferLeaseView is BufferLeaseView


def test_without_the_native_extension_the_pool_names_are_none(tmp_path):
    """As upstream: the package imports without its extension, and
    mooncake.BufferPool / mooncake.buffer_pool.BufferPool are None."""
    import subprocess
    import sys
    import mooncake
    src = os.path.dirname(os.path.realpath(mooncake.__file__))
    pkg = tmp_path / "mooncake"
    pkg.mkdir()
    for name in ("__init__.py", "buffer_pool.py", "_util.py"):
        os.symlink(os.path.join(src, name), pkg / name)
    code = ("import mooncake, mooncake.buffer_pool as bp; "
            "assert mooncake.BufferPool is None and mooncake.RegisteredBufferPool is None; "
            "assert bp.BufferPool is None and bp.RegisteredBufferPool is None; "
            "print('ok')")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr

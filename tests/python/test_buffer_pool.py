# SPDX-License-Identifier: Apache-2.0
"""mooncake.buffer_pool.BufferPool, rule by rule (spec "BufferPool Helper").

* leases come from the store's setup-time local buffer: their ptr works
  with the zero-copy calls without register_buffer;
* when the local buffer is exhausted a lease gets an overflow buffer that
  is registered for the lease (usable with get_into) and unregistered at
  release;
* max_regions bounds concurrent leases, max_bytes bounds their total
  bytes, and the default max_bytes allows one local-buffer-sized overflow
  burst;
* acquire(block=False) raises when nothing fits; acquire(timeout=...)
  waits for another thread's release without holding the GIL, and gives
  up (raises) when the timeout passes;
* release() refuses while exported views are alive and succeeds after
  they are gone; close() refuses while leases are active;
* pool.buffer(size) is a context manager that releases on exit;
* RegisteredBufferPool is the legacy alias;
* upstream's other constructor arguments: min_size_class/alignment checked
  as upstream, alignment applied to overflow leases, max_size_class counts
  oversize leases, block_on_exhaustion/default_timeout are the acquire
  defaults, prewarm is an accepted no-op, max_bytes 0 means the default.
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


def refused(fn, *args, **kwargs):
    """fn must raise, and not with an error that means a bug in the call."""
    try:
        fn(*args, **kwargs)
    except (TypeError, AttributeError, NameError) as e:
        raise AssertionError(f"{fn!r} failed with a bug, not a refusal: {e!r}")
    except Exception as e:  # the documented failure
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


def test_max_bytes(store):
    pool = pool_cls()(store, max_bytes=MiB)
    a = pool.acquire(600 * 1024)
    refused(pool.acquire, 600 * 1024, block=False)
    b = pool.acquire(MiB - 600 * 1024, block=False)      # exactly max_bytes
    refused(pool.acquire, 1, block=False)
    a.release()
    c = pool.acquire(600 * 1024, block=False)
    b.release()
    c.release()
    # a single request above max_bytes can never be served
    refused(pool.acquire, 2 * MiB, block=False)
    pool.close()


def test_acquire_timeout_expires(store):
    pool = pool_cls()(store, max_regions=1)
    held = pool.acquire(1024)
    t0 = time.monotonic()
    refused(pool.acquire, 1024, timeout=0.3)
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
    refused(lease.release)
    del view
    arr = np.frombuffer(lease.buffer, dtype=np.uint8)
    refused(lease.release)
    del arr
    gc.collect()
    lease.release()
    pool.close()


def test_close_refuses_with_active_leases(store):
    pool = pool_cls()(store)
    lease = pool.acquire(4096)
    refused(pool.close)
    lease.release()
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
    from mooncake.buffer_pool import BufferPool, RegisteredBufferPool
    assert RegisteredBufferPool is BufferPool


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
    pool = BufferPool(store, MiB)                      # positional max_bytes
    assert pool.max_bytes == MiB
    assert pool.max_size_class == MiB                   # None -> max_bytes
    assert pool.min_size_class == 65536 and pool.alignment == 8 * MiB
    pool.close()
    # 0 and None: the default, twice the local buffer (16 MiB in the fixture)
    for default in (0, None):
        pool = BufferPool(store, max_bytes=default)
        assert pool.max_bytes == 32 * MiB
        pool.close()


@pytest.mark.parametrize("kwargs,exc", [
    ({"min_size_class": 0}, ValueError),
    ({"alignment": 0}, ValueError),
    ({"alignment": 3 * 4096}, ValueError),             # not a power of two
    ({"alignment": 4}, ValueError),                    # below sizeof(void*)
    ({"default_timeout": -1}, ValueError),
    ({"max_regions": 0}, ValueError),
    ({"min_size_class": -1}, TypeError),               # upstream: size_t conversion
    ({"alignment": -8}, TypeError),
    ({"max_size_class": -1}, TypeError),
    ({"max_bytes": -1}, TypeError),
    ({"prewarm_count": -1}, TypeError),
    ({"alignment": 8.0}, TypeError),
    ({"block_on_exhaustion": "yes"}, TypeError),
    ({"default_timeout": "1"}, TypeError),
])
def test_constructor_validation_as_upstream(store, kwargs, exc):
    with pytest.raises(exc):
        pool_cls()(store, **kwargs)


def test_constructor_needs_a_set_up_store_with_a_local_buffer(master, make_store):
    from mooncake.store import MooncakeDistributedStore
    with pytest.raises(RuntimeError, match="not initialized"):
        pool_cls()(MooncakeDistributedStore())
    no_buffer = make_store(buffer=0)
    with pytest.raises(RuntimeError, match="local buffer"):
        pool_cls()(no_buffer)


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
    with pytest.raises(BufferPoolExhausted) as info:
        pool.acquire(1024)                             # block=None: the pool's setting
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
    from mooncake.buffer_pool import BufferLease, BufferPool
    assert mooncake.BufferPool is mooncake.RegisteredBufferPool is BufferPool
    assert store_mod.RegisteredBufferPool is BufferPool
    assert store_mod.RegisteredBufferLease is BufferLease

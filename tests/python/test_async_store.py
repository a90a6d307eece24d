# SPDX-License-Identifier: Apache-2.0
"""mooncake.async_store.MooncakeDistributedStoreAsync against a real
mooncake_master, embedded and as a dummy of a real mooncake_client:
every native async twin gives what its sync method gives (hits, misses,
bad arguments, one call at a time and in a concurrent burst), 1 000
concurrent gets, upstream's __getattr__ (messages, caching), the executor
fallback, cancellation, close() with calls queued, and two event loops in
two threads."""

import asyncio
import ctypes
import inspect
import os
import threading

import pytest

from helpers import RealClient

MiB = 1024 * 1024
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
UNAVAILABLE = -1010


def run(coro):
    """Run ``coro`` on a fresh event loop, bounded in time."""
    async def bounded():
        return await asyncio.wait_for(coro, 60)
    return asyncio.run(bounded())


def outcome(fn, *args, **kwargs):
    """("ok", value) or (exception type, message) of a sync call."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # the comparison is the point
        return (type(e), str(e))


def aoutcome(afn, *args, **kwargs):
    """outcome() of awaiting ``afn(*args, **kwargs)``."""
    async def go():
        try:
            return ("ok", await afn(*args, **kwargs))
        except Exception as e:
            return (type(e), str(e))
    return run(go())


class Mem:
    """Memory the zero-copy calls accept: registered with an embedded
    store, from the shared pool of a dummy."""

    def __init__(self, store, size):
        if store.dummy:
            self.addr = store.alloc_from_mem_pool(size)
            assert self.addr != 0
        else:
            self.buf = ctypes.create_string_buffer(size)
            self.addr = ctypes.addressof(self.buf)
            assert store.register_buffer(self.addr, size) == 0
        store.keep.append(self)  # alive until the store is closed

    def read(self, off, n):
        return ctypes.string_at(self.addr + off, n)

    def write(self, off, data):
        ctypes.memmove(self.addr + off, data, len(data))


def make_async_store(master, real=None):
    from mooncake.async_store import MooncakeDistributedStoreAsync

    s = MooncakeDistributedStoreAsync()
    if real is None:
        rc = s.setup("localhost", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", master.addr)
    else:
        rc = s.setup_dummy(32 * MiB, 16 * MiB, real.addr)
    assert rc == 0, f"setup returned {rc}"
    s.dummy = real is not None
    s.keep = []
    s.master_addr = master.addr
    return s


@pytest.fixture(params=["embedded", "dummy"])
def astore(request, master):
    real = RealClient(master) if request.param == "dummy" else None
    s = None
    try:
        s = make_async_store(master, real)
        yield s
    finally:
        if s is not None:
            s.close()
        if real is not None:
            real.stop()


@pytest.fixture
def embedded(master):
    s = make_async_store(master)
    try:
        yield s
    finally:
        s.close()


def value(i, size=1000):
    return i.to_bytes(8, "little") + bytes([i % 251]) * (size - 8)


# ---- native ops against their sync twins ------------------------------------------------


def test_native_reads_match_sync(astore):
    s = astore
    for i in range(4):
        assert s.put(f"r{i}", value(i)) == 0
    assert s.put("r_empty", b"") == 0
    mem = Mem(s, 64 * 1024)
    unreg = ctypes.create_string_buffer(4096)
    long_key = "k" * 5000
    cases = [
        ("get", ("r0",)), ("get", ("r_missing",)), ("get", ("",)), ("get", (long_key,)),
        ("get", ("r_empty",)), ("get", (7,)), ("get", ("a\0b",)),
        ("is_exist", ("r1",)), ("is_exist", ("r_missing",)), ("is_exist", ("",)),
        ("is_exist", (None,)),
        ("get_size", ("r2",)), ("get_size", ("r_missing",)), ("get_size", ("",)),
        ("get_into", ("r0", mem.addr, 4096)), ("get_into", ("r_missing", mem.addr, 4096)),
        ("get_into", ("r0", mem.addr, 10)), ("get_into", ("r0", -1, 4096)),
        ("get_into", ("r0", mem.addr, 2 ** 64)), ("get_into", ("r0", "x", 4096)),
        ("get_into", ("r0", True, 4096)),
        ("get_into", ("r0", ctypes.addressof(unreg), 4096)),
        ("get_batch", (["r0", "r_missing", "r3", ""],)), ("get_batch", ([],)),
        ("get_batch", ("r0",)), ("get_batch", ([1],)),
        ("batch_is_exist", (["r0", "r_missing", ""],)), ("batch_is_exist", ([],)),
        ("batch_is_exist", ([None],)),
        ("batch_get_into", (["r0", "r_missing", "r1"], [mem.addr, mem.addr + 4096,
                                                         mem.addr + 8192], [4096] * 3)),
        ("batch_get_into", (["r0", "r1"], [mem.addr], [4096, 4096])),
        ("batch_get_into", (["r0", "r1"], [mem.addr, -5], [4096, 4096])),
        ("batch_get_into", (["r0"], [mem.addr], ["4096"])),
        ("batch_get_into", ([], [], [])),
        ("batch_get_into", (["r0", 3], [mem.addr, mem.addr], [1, 1])),
    ]
    for name, args in cases:
        want = outcome(getattr(s, name), *args)
        got = aoutcome(getattr(s, "async_" + name), *args)
        assert got == want, f"async_{name}{args!r:.80} gave {got!r:.200}, sync {want!r:.200}"
    assert mem.read(0, 1000) == value(0) and mem.read(8192, 1000) == value(1)


def test_native_writes_match_sync(astore):
    from mooncake.store import ReplicateConfig

    s = astore
    mem = Mem(s, 64 * 1024)
    mem.write(0, value(5, 4096))
    same_node = ReplicateConfig()
    same_node.prefer_alloc_in_same_node = True
    pinned = ReplicateConfig()
    pinned.with_hard_pin = True
    # each case runs on twin keys: <key>_s for the sync call, <key>_a for the async one
    cases = [
        ("put", ("w1", b"hello")), ("put", ("w1", b"again")),
        ("put", ("w2", bytearray(b"x" * 3000))),
        ("put", ("w3", memoryview(b"abcdef")[::2])), ("put", ("w4", b"")),
        ("put", ("w5", "text")), ("put", ("w6", b"v", same_node)), ("put", ("w7", b"v", pinned)),
        ("put", ("w8", b"v", "cfg")),
        ("upsert", ("w1", b"replaced")), ("upsert", ("w9", b"new")),
        ("put_from", ("z1", mem.addr, 4096)), ("put_from", ("z2", mem.addr, 4096, same_node)),
        ("put_from", ("z3", -1, 10)), ("put_from", ("z4", mem.addr, 0)),
        ("upsert_from", ("z1", mem.addr + 100, 500)), ("upsert_from", ("z5", mem.addr, 2 ** 64)),
        ("remove", ("w1",)), ("remove", ("w_missing",)), ("remove", ("w2", True)),
        ("remove", ("w9", "yes")),
        ("batch_put_from", (["bp1", "bp2"], [mem.addr, mem.addr + 4096], [4096, 100])),
        ("batch_put_from", (["bp3"], [mem.addr], [10], same_node)),
        ("batch_put_from", (["bp4", "bp5"], [mem.addr], [10, 10])),
        ("batch_upsert_from", (["bp1", "bp6"], [mem.addr + 1, mem.addr + 2], [50, 60])),
        ("batch_upsert_from", (["bp7"], [mem.addr], [10], pinned)),
    ]

    def twin(args, side):
        a = list(args)
        if isinstance(a[0], str):
            a[0] = f"{a[0]}_{side}"
        else:
            a[0] = [f"{k}_{side}" for k in a[0]]
        return a

    for name, args in cases:
        want = outcome(getattr(s, name), *twin(args, "s"))
        got = aoutcome(getattr(s, "async_" + name), *twin(args, "a"))
        assert got == want, f"async_{name}{args!r:.80} gave {got!r:.200}, sync {want!r:.200}"
    # and the objects are the same
    for key in ("w1", "w2", "w3", "w9", "z1", "z2", "bp1", "bp2", "bp6", "bp7"):
        assert s.get(key + "_a") == s.get(key + "_s"), key


def test_concurrent_burst_matches_sync(astore):
    """Misses and bad keys inside coalesced batches fail alone."""
    s = astore
    n = 120
    for i in range(n):
        if i % 3:
            assert s.put(f"c{i}", value(i)) == 0
    mem = Mem(s, n * 1024)
    keys = [f"c{i}" if i % 7 else "" for i in range(n)]
    want_get = [s.get(k) for k in keys]
    want_exist = [s.is_exist(k) for k in keys]
    want_size = [s.get_size(k) for k in keys]
    want_into = [s.get_into(k, mem.addr + i * 1024, 1024) for i, k in enumerate(keys)]

    async def burst():
        return await asyncio.gather(
            asyncio.gather(*(s.async_get(k) for k in keys)),
            asyncio.gather(*(s.async_is_exist(k) for k in keys)),
            asyncio.gather(*(s.async_get_size(k) for k in keys)),
            asyncio.gather(*(s.async_get_into(k, mem.addr + i * 1024, 1024)
                             for i, k in enumerate(keys))))

    got_get, got_exist, got_size, got_into = run(burst())
    assert got_get == want_get
    assert got_exist == want_exist
    assert got_size == want_size
    assert got_into == want_into
    assert any(g == b"" for g in got_get) and any(len(g) == 1000 for g in got_get)

    # writes and removes of one burst, a key twice among them
    wkeys = [f"cw{i}" for i in range(n)] + ["cw0", ""]
    vals = [value(i + 1000) for i in range(n)] + [b"second", b"x"]

    async def writes():
        return await asyncio.gather(*(s.async_put(k, v) for k, v in zip(wkeys, vals)))

    rcs = run(writes())
    assert rcs == [0] * n + [0, s.put("", b"x")]
    assert s.get("cw0") in (value(1000), b"second")
    assert all(s.get(f"cw{i}") == value(i + 1000) for i in range(1, n))

    async def removes():
        return await asyncio.gather(*(s.async_remove(k, True) for k in wkeys[:n] + ["cw1"]))

    rcs = run(removes())
    assert sorted(rcs[1:2] + rcs[-1:]) == [OBJECT_NOT_FOUND, 0]
    assert rcs[:1] + rcs[2:n] == [0] * (n - 1)


def test_thousand_concurrent_gets(astore):
    s = astore
    keys = [f"t{i}" for i in range(1000)]
    assert s.put_batch(keys, [value(i, 4096) for i in range(1000)]) == 0
    py_threads = threading.active_count()

    async def gets():
        got = await asyncio.gather(*(s.async_get(k) for k in keys))
        # no thread per call: the loop never made its default executor
        return got, asyncio.get_running_loop()._default_executor

    got, executor = run(gets())
    assert executor is None
    assert threading.active_count() == py_threads
    bad = [k for i, (k, g) in enumerate(zip(keys, got)) if g != value(i, 4096)]
    assert not bad, f"{len(bad)} gets returned other bytes, the first {bad[0]}"


# ---- upstream's surface --------------------------------------------------------------------


def test_getattr_semantics_and_messages(embedded):
    import mooncake.store
    from mooncake.async_store import MooncakeDistributedStoreAsync
    from mooncake.store import MooncakeDistributedStore

    s = embedded
    assert isinstance(s, MooncakeDistributedStore)
    assert not hasattr(mooncake.store, "MooncakeDistributedStoreAsync")
    with pytest.raises(TypeError):
        MooncakeDistributedStoreAsync("localhost")
    assert MooncakeDistributedStoreAsync.setup is MooncakeDistributedStore.setup
    assert MooncakeDistributedStoreAsync.close is MooncakeDistributedStore.close

    with pytest.raises(AttributeError) as e:
        s.no_such_thing
    assert str(e.value) == "'MooncakeDistributedStoreAsync' object has no attribute " \
        "'no_such_thing'"
    with pytest.raises(AttributeError) as e:
        s.async_no_such_thing
    assert str(e.value) == "'MooncakeDistributedStoreAsync' object has no attribute " \
        "'async_no_such_thing' (nor 'no_such_thing')"
    s.plain = 5
    with pytest.raises(AttributeError) as e:
        s.async_plain
    assert str(e.value) == "'plain' is not callable"
    assert not hasattr(s, "async_")

    # the executor twins: coroutine functions wrapping the sync method,
    # cached on the instance
    f = s.async_remove_all
    assert f is s.async_remove_all and vars(s)["async_remove_all"] is f
    assert inspect.iscoroutinefunction(f)
    assert f.__name__ == "remove_all" and f.__doc__ == s.remove_all.__doc__
    # the native twins look the same
    for name in ("get", "put", "get_into", "batch_get_into", "get_batch", "is_exist"):
        g = getattr(s, "async_" + name)
        assert inspect.iscoroutinefunction(g), name
        assert g.__name__ == name and g.__doc__ == getattr(s, name).__doc__
    for name in ("put_batch", "get_buffer", "put_tensor_with_tp", "register_buffer",
                 "batch_get_tensor_with_tp_into", "get_hostname", "query_task"):
        assert inspect.iscoroutinefunction(getattr(s, "async_" + name)), name


def test_executor_fallback_methods(embedded):
    s = embedded
    for i in range(5):
        assert s.put(f"f{i}", value(i)) == 0

    want = s.batch_get_replica_desc(["f0", "f1", "f_missing"])

    async def calls():
        loop = asyncio.get_running_loop()
        desc = await s.async_batch_get_replica_desc(["f0", "f1", "f_missing"])
        host = await s.async_get_hostname()
        rcs = await s.async_put_batch(["f5", "f6"], [b"a", b"b"])
        upserted = await s.async_upsert_batch(["f5"], [b"c"])
        removed = await s.async_remove_all(True)
        return desc, host, rcs, upserted, removed, loop._default_executor

    desc, host, rcs, upserted, removed, executor = run(calls())
    assert executor is not None  # upstream's way: the default thread pool
    assert {k: [repr(d) for d in v] for k, v in desc.items()} == \
        {k: [repr(d) for d in v] for k, v in want.items()}
    assert len(desc["f0"]) == 1
    assert host == s.get_hostname()
    assert rcs == 0 and upserted == 0
    assert removed == 7
    assert s.is_exist("f0") == 0


def test_overridden_sync_method_is_what_async_runs(master):
    from mooncake.async_store import MooncakeDistributedStoreAsync

    class Mine(MooncakeDistributedStoreAsync):
        def get(self, key):
            return b"mine:" + key.encode()

    s = Mine()
    try:
        assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                       master.addr) == 0
        assert run(s.async_get("k")) == b"mine:k"
        assert run(s.async_put("k2", b"v")) == 0  # not overridden: native
        assert run(s.async_get("k2")) == b"mine:k2"
    finally:
        s.close()


# ---- cancellation, close, loops ---------------------------------------------------------------


def test_cancelled_waiters_drop_their_completions(astore):
    s = astore
    keys = [f"x{i}" for i in range(400)]
    assert s.put_batch(keys, [value(i) for i in range(400)]) == 0

    async def go():
        tasks = [asyncio.ensure_future(s.async_get(k)) for k in keys]
        await asyncio.sleep(0)  # every task has queued its get
        for t in tasks[::2]:
            t.cancel()
        res = await asyncio.gather(*tasks, return_exceptions=True)
        # the queue goes on: the dropped completions corrupt nothing
        again = await asyncio.gather(*(s.async_get(k) for k in keys))
        q = s._aq_loops[asyncio.get_running_loop()]
        return res, again, dict(q._pending)

    res, again, pending = run(go())
    for i, r in enumerate(res):
        if i % 2:
            assert r == value(i), keys[i]
        else:
            assert isinstance(r, asyncio.CancelledError), keys[i]
    assert again == [value(i) for i in range(400)]
    assert pending == {}


def test_close_while_calls_are_queued(astore):
    s = astore
    keys = [f"q{i}" for i in range(300)]
    assert s.put_batch(keys, [value(i) for i in range(300)]) == 0

    async def go():
        gets = [asyncio.ensure_future(s.async_get(k)) for k in keys]
        exists = [asyncio.ensure_future(s.async_is_exist(k)) for k in keys]
        await asyncio.sleep(0)  # queued
        rc = s.close()
        return rc, await asyncio.gather(*gets), await asyncio.gather(*exists)

    rc, got, exist = run(go())
    assert rc == 0
    for i, g in enumerate(got):
        assert g in (value(i), b""), keys[i]
    assert set(exist) <= {1, UNAVAILABLE}
    # closed: the async calls answer as the sync ones
    assert run(s.async_is_exist("q0")) == s.is_exist("q0") == UNAVAILABLE
    assert run(s.async_get("q0")) == s.get("q0") == b""
    # and after a new setup the store serves again
    if s.dummy:
        return  # a dummy is set up again with setup_dummy, covered elsewhere
    assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                   s.master_addr) == 0
    assert run(s.async_put("q_again", b"v")) == 0
    assert run(s.async_get("q_again")) == b"v"


def test_two_event_loops_in_two_threads(embedded):
    s = embedded
    out = {}

    def worker(name):
        async def go():
            keys = [f"{name}{i}" for i in range(300)]
            rcs = await asyncio.gather(*(s.async_put(k, value(i)) for i, k in enumerate(keys)))
            got = await asyncio.gather(*(s.async_get(k) for k in keys))
            batch = await s.async_get_batch(keys)
            return rcs, got, batch, s._aq_loops[asyncio.get_running_loop()]
        try:
            out[name] = run(go())
        except BaseException as e:  # reported below
            out[name] = e

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("la", "lb")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a loop thread should finish"
    for name in ("la", "lb"):
        assert not isinstance(out[name], BaseException), out[name]
        rcs, got, batch, _ = out[name]
        assert rcs == [0] * 300
        assert got == [value(i) for i in range(300)] == batch
    # each loop had a completion queue of its own
    assert out["la"][3] is not None and out["lb"][3] is not None
    assert out["la"][3] is not out["lb"][3]


def test_store_dropped_with_calls_in_flight(master):
    """Cancelled calls still in the library when the store is dropped: the
    queue closes (waiting for them) before the handle and the values go."""
    import gc
    import weakref

    s = make_async_store(master)
    values = [os.urandom(64 * 1024) for _ in range(50)]

    async def go():
        tasks = [asyncio.ensure_future(s.async_put(f"d{i}", v)) for i, v in enumerate(values)]
        tasks += [asyncio.ensure_future(s.async_get(f"d{i}")) for i in range(50)]
        await asyncio.sleep(0)  # all queued
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(go())
    ref = weakref.ref(s)
    del s, values
    gc.collect()
    assert ref() is None, "the store should be freed once its loop is gone"
    # the process is fine: a new store works
    s2 = make_async_store(master)
    try:
        assert run(s2.async_put("d_after", b"ok")) == 0
        assert run(s2.async_get("d_after")) == b"ok"
    finally:
        s2.close()

# SPDX-License-Identifier: Apache-2.0
"""Shareable host pools for dummy clients: SGLang HiCache's standalone mode
(docs/protocol.md §8, "Host memory").

The worker allocates its host KV pool with ``MooncakeHostMemAllocator``
(one sealed memfd per block), becomes a dummy of a real ``mooncake_client``
and registers the pool; the daemon maps the same pages and moves KV pages
in and out of them with no staging copy.  Real processes throughout: a
mooncake_master, mooncake_client daemons, dummies in this process and in
child processes.
"""

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import Master, RealClient, client_bin, free_port, wait_until

MiB = 1024 * 1024
PAGE = 64 * 1024
INVALID_PARAMS, RPC_FAIL, NO_AVAILABLE_HANDLE = -600, -900, -200
SHM_NAME = "/memfd:mooncake_shm"


def mapped_blocks(pid: int) -> int:
    """How many mappings of host-memory blocks (memfd "mooncake_shm")
    process ``pid`` holds."""
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for line in f if SHM_NAME in line)


@pytest.fixture
def real(master):
    rc = RealClient(master)
    yield rc
    rc.stop()


@pytest.fixture
def allocator():
    """A MooncakeHostMemAllocator whose blocks are freed at teardown."""
    from mooncake.store import MooncakeHostMemAllocator

    a = MooncakeHostMemAllocator()
    blocks = []
    orig = a.alloc

    def alloc(n):
        p = orig(n)
        blocks.append(p)
        return p
    a.alloc = alloc
    yield a
    for p in blocks:
        a.free(p)


@pytest.fixture
def make_dummy(real):
    """In-process dummy stores of ``real``, closed at teardown."""
    from mooncake.store import MooncakeDistributedStore

    stores = []

    def make(pool=16 * MiB, lbuf=16 * MiB, addr=None):
        s = MooncakeDistributedStore()
        rc = s.setup_dummy(pool, lbuf, addr or real.addr)
        assert rc == 0, f"setup_dummy returned {rc}\n{real.log_text()}"
        stores.append(s)
        return s
    yield make
    for s in stores:
        s.close()


def pattern(seed: int, n: int) -> bytes:
    import hashlib
    return hashlib.shake_128(b"page-%d" % seed).digest(n)


# ---- the user story ---------------------------------------------------------------------


def test_sglang_standalone_host_pool(real, make_dummy):
    """SGLang HiCache standalone: allocator -> setup_dummy -> register ->
    batch_put_from / batch_is_exist / batch_get_into -> byte-exact ->
    unregister -> close -> free."""
    from mooncake.store import MooncakeHostMemAllocator

    npages = 32
    alloc = MooncakeHostMemAllocator()
    n = 2 * npages * PAGE  # the pool: pages written, then pages read back
    ptr = alloc.alloc(n)
    try:
        store = make_dummy()
        assert mapped_blocks(real.proc.pid) == 0
        assert store.register_buffer(ptr, n) == 0
        assert mapped_blocks(real.proc.pid) == 1, "the daemon does not map the host pool"
        keys = [f"sglang-page-{i}" for i in range(npages)]
        data = [pattern(i, PAGE) for i in range(npages)]
        for i, d in enumerate(data):
            ctypes.memmove(ptr + i * PAGE, d, PAGE)
        src = [ptr + i * PAGE for i in range(npages)]
        assert store.batch_put_from(keys, src, [PAGE] * npages) == [0] * npages
        assert store.batch_is_exist(keys + ["sglang-page-missing"]) == [1] * npages + [0]
        dst = [ptr + (npages + i) * PAGE for i in range(npages)]
        ctypes.memset(dst[0], 0, npages * PAGE)
        assert store.batch_get_into(keys, dst, [PAGE] * npages) == [PAGE] * npages
        got = ctypes.string_at(dst[0], npages * PAGE)
        assert got == b"".join(data), "the pages read back differ from those written"
        assert store.unregister_buffer(ptr) == 0
        wait_until(lambda: mapped_blocks(real.proc.pid) == 0, 10.0,
                   "the daemon to unmap the unregistered pool")
        # unregistered: the pool is no longer the dummy's memory
        assert store.batch_put_from(keys[:1], src[:1], [PAGE]) == [INVALID_PARAMS]
        assert store.close() == 0
    finally:
        assert alloc.free(ptr) == 0


def test_pages_move_with_no_staging_copy(real, make_dummy, allocator):
    """With no staging buffer at all (local_buffer_size 0) every page still
    moves, both ways and through every zero-copy call: the daemon reads and
    writes the worker's pages where they are.  A staged call has no room."""
    store = make_dummy(pool=1 * MiB, lbuf=0)
    n = 8 * PAGE
    ptr = allocator.alloc(n)
    stats0 = store._dummy_server_stats()
    assert store.register_buffer(ptr, n) == 0
    # the daemon maps exactly the block, beside the dummy's own pool
    assert store._dummy_server_stats()["mapped"] == stats0["mapped"] + n
    assert mapped_blocks(real.proc.pid) == 1
    ctypes.memmove(ptr, pattern(1, PAGE), PAGE)
    ctypes.memmove(ptr + PAGE, pattern(2, PAGE), PAGE)
    assert store.put_from("nc-a", ptr, PAGE) == 0
    assert store.batch_put_from_multi_buffers(["nc-b"], [[ptr, ptr + PAGE]],
                                              [[PAGE, PAGE]]) == [0]
    ctypes.memset(ptr + 2 * PAGE, 0, 6 * PAGE)
    assert store.get_into("nc-a", ptr + 2 * PAGE, PAGE) == PAGE
    assert ctypes.string_at(ptr + 2 * PAGE, PAGE) == pattern(1, PAGE)
    assert store.batch_get_into(["nc-b"], [ptr + 4 * PAGE], [2 * PAGE]) == [2 * PAGE]
    assert ctypes.string_at(ptr + 4 * PAGE, 2 * PAGE) == pattern(1, PAGE) + pattern(2, PAGE)
    # the bytes API would stage: with no staging buffer it cannot
    assert store.put("nc-staged", b"x" * 100) == NO_AVAILABLE_HANDLE
    # a page rewritten in place after registration is what the daemon reads
    ctypes.memmove(ptr, pattern(3, PAGE), PAGE)
    assert store.put_from("nc-c", ptr, PAGE) == 0
    assert store.get_into("nc-c", ptr + 6 * PAGE, PAGE) == PAGE
    assert ctypes.string_at(ptr + 6 * PAGE, PAGE) == pattern(3, PAGE)
    assert store.unregister_buffer(ptr) == 0
    assert store._dummy_server_stats()["mapped"] == stats0["mapped"]


def test_register_refusals(make_dummy, allocator, capfd):
    store = make_dummy()
    n = 4 * PAGE
    ptr = allocator.alloc(n)
    other = allocator.alloc(PAGE)
    foreign = (ctypes.c_ubyte * PAGE)()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    heap = libc.malloc(PAGE)
    try:
        capfd.readouterr()
        assert store.register_buffer(ctypes.addressof(foreign), PAGE) == -1
        err = capfd.readouterr().err
        assert "Buffer is not in any registered shared memory" in err, err
        assert store.register_buffer(heap, PAGE) == -1
        assert store.register_buffer(0, PAGE) == -1
        assert store.register_buffer(ptr, 0) == -1
        assert store.register_buffer(ptr + PAGE, PAGE) == -1  # a sub-range
        assert store.register_buffer(ptr, n - PAGE) == -1     # shorter
        assert store.register_buffer(ptr, n + 1) == -1        # longer
        assert store.register_buffer(ptr, 2 * n) == -1
        err = capfd.readouterr().err
        assert err.count("Invalid buffer address or size for registration") >= 4, err
        # nothing was registered: zero-copy calls on it are refused
        assert store.put_from("rf-1", ptr, PAGE) == INVALID_PARAMS
        # the exact block is accepted, once or twice
        assert store.register_buffer(ptr, n) == 0
        assert store.register_buffer(ptr, n) == 0
        assert store.unregister_buffer(ptr + PAGE) == -1      # not the base
        assert store.unregister_buffer(other) == -1           # never registered
        assert store.unregister_buffer(ctypes.addressof(foreign)) == -1
        assert store.unregister_buffer(0) == -1
        assert "not the start of a buffer this dummy registered" in capfd.readouterr().err
        assert store.unregister_buffer(ptr) == 0
        assert store.unregister_buffer(ptr) == -1             # twice
        # a block of the dummy's own pool: exactly, and nothing else
        blk = store.alloc_from_mem_pool(3 * PAGE)
        assert blk != 0
        assert store.register_buffer(blk, 3 * PAGE) == 0
        assert store.register_buffer(blk + PAGE, PAGE) == -1
        assert store.register_buffer(blk, 2 * PAGE) == -1
        assert store.unregister_buffer(blk) == 0
        assert store._mem_pool_free(blk) == 0
    finally:
        libc.free(heap)


def test_register_limit_per_dummy(make_dummy, allocator):
    store = make_dummy()
    blocks = [allocator.alloc(4096) for _ in range(65)]
    assert [store.register_buffer(p, 4096) for p in blocks[:64]] == [0] * 64
    assert store.register_buffer(blocks[64], 4096) == -1
    assert store.unregister_buffer(blocks[0]) == 0
    assert store.register_buffer(blocks[64], 4096) == 0
    # every registered block is still the right memory
    for i, p in enumerate(blocks[1:]):
        ctypes.memset(p, i, 4096)
    keys = [f"lim-{i}" for i in range(64)]
    assert store.batch_put_from(keys, blocks[1:], [4096] * 64) == [0] * 64
    ctypes.memset(blocks[1], 0xff, 4096)
    assert store.get_into("lim-63", blocks[1], 4096) == 4096
    assert ctypes.string_at(blocks[1], 4096) == bytes([63]) * 4096


def test_free_while_registered(real, make_dummy):
    """Freeing a block a dummy registered unregisters it first: the daemon
    unmaps it, and a new block at the same address is not taken for it."""
    from mooncake.store import MooncakeHostMemAllocator

    a = MooncakeHostMemAllocator()
    store = make_dummy()
    p = a.alloc(4 * PAGE)
    assert store.register_buffer(p, 4 * PAGE) == 0
    assert mapped_blocks(real.proc.pid) == 1
    assert a.free(p) == 0
    wait_until(lambda: mapped_blocks(real.proc.pid) == 0, 10.0,
               "the daemon to unmap the freed block")
    assert a.free(p) == -1
    q = a.alloc(4 * PAGE)
    try:
        # unregistered until registered again, wherever it landed
        assert store.put_from("fw-1", q, PAGE) == INVALID_PARAMS
        assert store.register_buffer(q, 4 * PAGE) == 0
        ctypes.memmove(q, pattern(7, PAGE), PAGE)
        assert store.put_from("fw-1", q, PAGE) == 0
        assert store.get_into("fw-1", q + PAGE, PAGE) == PAGE
        assert ctypes.string_at(q + PAGE, PAGE) == pattern(7, PAGE)
    finally:
        assert a.free(q) == 0


# ---- the allocator ----------------------------------------------------------------------


def test_allocator_contract():
    from mooncake.store import MooncakeHostMemAllocator

    a = MooncakeHostMemAllocator()
    with pytest.raises(RuntimeError, match="Failed to map shared memory"):
        a.alloc(0)
    with pytest.raises(TypeError):
        a.alloc(-1)
    with pytest.raises(TypeError):
        a.alloc("4096")
    p = a.alloc(1)
    assert p % 4096 == 0
    ctypes.memset(p, 0x5a, 4096)  # the whole page is the block's
    with open("/proc/self/maps") as f:
        line = next(l for l in f if l.startswith("%x-" % p))
    assert SHM_NAME in line and " rw-s " in line, line
    assert a.free(p + 8) == -1
    assert a.free(p) == 0
    assert a.free(p) == -1
    assert a.free(0) == -1


def test_pluggable_allocator_addresses(make_dummy):
    """get_alloc_func_addr / get_free_func_addr: C functions of the same
    allocator, callable as torch's pluggable allocator calls them (size,
    device, stream) or with the size alone."""
    from mooncake.store import (MooncakeHostMemAllocator, get_alloc_func_addr,
                                get_free_func_addr)

    fa, ff = get_alloc_func_addr(), get_free_func_addr()
    assert isinstance(fa, int) and isinstance(ff, int) and fa and ff and fa != ff
    alloc3 = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_void_p)(fa)
    alloc1 = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(fa)
    free4 = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                             ctypes.c_void_p)(ff)
    free1 = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ff)
    p, q = alloc3(2 * PAGE, 0, None), alloc1(PAGE)
    assert p and q and p % 4096 == 0
    assert alloc1(0) is None  # refused, and logged
    store = make_dummy()
    # memory torch would get from them is registrable by a dummy
    assert store.register_buffer(p, 2 * PAGE) == 0
    ctypes.memmove(p, pattern(9, PAGE), PAGE)
    assert store.put_from("plug-1", p, PAGE) == 0
    assert store.get_into("plug-1", p + PAGE, PAGE) == PAGE
    assert ctypes.string_at(p + PAGE, PAGE) == pattern(9, PAGE)
    free4(p, 2 * PAGE, 0, None)
    free1(q)
    # the same allocator: both blocks are gone from it
    a = MooncakeHostMemAllocator()
    assert a.free(p) == -1 and a.free(q) == -1


HUGE_SCRIPT = textwrap.dedent("""
    import sys
    from mooncake.store import MooncakeHostMemAllocator
    a = MooncakeHostMemAllocator()
    try:
        p = a.alloc(4096)
    except RuntimeError as e:
        print("RuntimeError:", e)
        sys.exit(0)
    print("ok", p % (2 << 20) == 0, a.free(p))
""")


def nr_hugepages() -> int:
    with open("/proc/sys/vm/nr_hugepages") as f:
        return int(f.read())


@pytest.mark.parametrize("size_env", ["bogus", None])
def test_hugepage_environment(size_env):
    env = dict(os.environ, MC_STORE_USE_HUGEPAGE="")  # present: on, whatever the value
    env.pop("MC_STORE_HUGEPAGE_SIZE", None)
    if size_env is not None:
        env["MC_STORE_HUGEPAGE_SIZE"] = size_env
    out = subprocess.run([sys.executable, "-c", HUGE_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    warned = 'MC_STORE_HUGEPAGE_SIZE="bogus"' in out.stderr
    assert warned == (size_env == "bogus"), out.stderr
    if nr_hugepages() == 0:
        assert out.stdout.startswith("RuntimeError: Failed to"), out.stdout
        assert "(Check /proc/sys/vm/nr_hugepages?)" in out.stdout, out.stdout
    else:
        assert out.stdout.strip() == "ok True 0", out.stdout


def test_no_hugepages_without_the_variable():
    env = dict(os.environ, MC_STORE_HUGEPAGE_SIZE="1GB")
    env.pop("MC_STORE_USE_HUGEPAGE", None)
    out = subprocess.run([sys.executable, "-c", HUGE_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("ok "), out.stdout + out.stderr


# ---- lifetimes: dummy death, close, daemon restart ---------------------------------------

WORKER = textwrap.dedent("""
    import ctypes, sys
    from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator
    addr, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    page = 64 * 1024
    a = MooncakeHostMemAllocator()
    p = a.alloc(n * page)
    s = MooncakeDistributedStore()
    assert s.setup_dummy(16 << 20, 16 << 20, addr) == 0
    assert s.register_buffer(p, n * page) == 0
    for i in range(n):
        ctypes.memset(p + i * page, i + 1, page)
    keys = ["%s-%d" % (prefix, i) for i in range(n)]
    rcs = s.batch_put_from(keys, [p + i * page for i in range(n)], [page] * n)
    print("ready", rcs, flush=True)
    sys.stdin.read()  # until killed
""")


def start_worker(addr: str, prefix: str, n: int) -> subprocess.Popen:
    w = subprocess.Popen([sys.executable, "-c", WORKER, addr, prefix, str(n)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = w.stdout.readline()  # bounded: the script asserts or prints at once
    if not line.startswith("ready"):
        w.kill()
        raise AssertionError(f"worker failed: {line!r}\n{w.stderr.read()}")
    assert line.split(" ", 1)[1].strip() == str([0] * n), line
    return w


def check_pages(store, allocator, prefix: str, n: int) -> None:
    """``store`` (a dummy) reads the n pages a worker wrote, byte-exact."""
    buf = allocator.alloc(n * PAGE)
    assert store.register_buffer(buf, n * PAGE) == 0
    keys = [f"{prefix}-{i}" for i in range(n)]
    assert store.batch_get_into(keys, [buf + i * PAGE for i in range(n)],
                                [PAGE] * n) == [PAGE] * n
    for i in range(n):
        assert ctypes.string_at(buf + i * PAGE, PAGE) == bytes([i + 1]) * PAGE
    assert store.unregister_buffer(buf) == 0


def test_killed_dummy_leaves_nothing_mapped(real, make_dummy, allocator):
    w = start_worker(real.addr, "kill", 4)
    try:
        assert mapped_blocks(real.proc.pid) == 1
        w.send_signal(signal.SIGKILL)
        w.wait(timeout=10)
        wait_until(lambda: mapped_blocks(real.proc.pid) == 0, 10.0,
                   "the daemon to unmap a killed dummy's host pool")
    finally:
        if w.poll() is None:
            w.kill()
            w.wait(timeout=10)
    # what it wrote stays
    check_pages(make_dummy(), allocator, "kill", 4)


def test_closed_dummy_leaves_nothing_mapped(real, make_dummy, allocator):
    first = make_dummy()
    p = allocator.alloc(2 * PAGE)
    assert first.register_buffer(p, 2 * PAGE) == 0
    ctypes.memset(p, 1, PAGE)
    assert first.put_from("close-0", p, PAGE) == 0
    assert mapped_blocks(real.proc.pid) == 1
    assert first.close() == 0
    wait_until(lambda: mapped_blocks(real.proc.pid) == 0, 10.0,
               "the daemon to unmap a closed dummy's host pool")
    # the same block registers again with the next dummy; the object stayed
    check_pages(make_dummy(), allocator, "close", 1)


def start_daemon(master: Master, port: int, segment: str) -> subprocess.Popen:
    """A mooncake_client on @port, ready (its dummy socket listening)."""
    log = open(os.devnull, "wb")
    p = subprocess.Popen([client_bin(), "--host=127.0.0.1", "--metadata_server=P2PHANDSHAKE",
                          f"--master_server_address={master.addr}", f"--port={port}",
                          f"--global_segment_size={segment}", "--local_buffer_size=16MB"],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    sock = f"@mooncake_client_{port}.sock"

    def listening():
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\0" + sock[1:])
            return True
        except OSError:
            return False
        finally:
            s.close()
    try:
        wait_until(lambda: p.poll() is not None or listening(), 20.0,
                   "mooncake_client to listen for dummies")
    except BaseException:
        p.kill()
        raise
    assert p.poll() is None, f"mooncake_client exited with {p.returncode}"
    return p


def test_daemon_restart(fresh_master, spawn_client, allocator):
    """A daemon restart leaves nothing of the old dummies mapped in the new
    daemon and loses no object that lives in another segment.  A dummy does
    not reconnect (docs/protocol.md §8): its calls fail clearly with
    RPC_FAIL, and a dummy set up again registers its pool again."""
    from mooncake.store import MooncakeDistributedStore

    holder = spawn_client("holder")  # the only segment: objects live there
    holder.setup(fresh_master, segment=64 * MiB)
    port = free_port()
    daemon = start_daemon(fresh_master, port, "0")
    addr = f"127.0.0.1:{port}"
    store = MooncakeDistributedStore()
    try:
        assert store.setup_dummy(16 * MiB, 16 * MiB, addr) == 0
        n = 4
        p = allocator.alloc(n * PAGE)
        assert store.register_buffer(p, n * PAGE) == 0
        assert mapped_blocks(daemon.pid) == 1
        for i in range(n):
            ctypes.memset(p + i * PAGE, i + 1, PAGE)
        keys = [f"rs-{i}" for i in range(n)]
        assert store.batch_put_from(keys, [p + i * PAGE for i in range(n)],
                                    [PAGE] * n) == [0] * n
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=10)
        daemon = start_daemon(fresh_master, port, "0")
        assert mapped_blocks(daemon.pid) == 0
        # the old dummy's calls fail at once, clearly
        t0 = time.monotonic()
        assert store.batch_put_from(keys[:1], [p], [PAGE]) == [RPC_FAIL]
        assert store.batch_get_into(keys[:1], [p], [PAGE]) == [RPC_FAIL]
        assert store.batch_is_exist(keys[:1]) == [RPC_FAIL]
        assert store.register_buffer(p, n * PAGE) == -1
        assert store.unregister_buffer(p) == RPC_FAIL
        assert time.monotonic() - t0 < 5
        assert mapped_blocks(daemon.pid) == 0
        assert store.close() == 0
        # set up again against the new daemon: the objects are all there
        assert store.setup_dummy(16 * MiB, 16 * MiB, addr) == 0
        assert store.batch_is_exist(keys) == [1] * n
        check_pages(store, allocator, "rs", n)
        assert store.close() == 0
        wait_until(lambda: mapped_blocks(daemon.pid) == 0, 10.0,
                   "the new daemon to unmap the closed dummy's block")
    finally:
        store.close()
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)


# ---- get_into_ranges through a dummy: room in one allocation -----------------------------


def test_get_into_ranges_room_is_one_allocation(make_dummy, allocator):
    store = make_dummy()
    assert store.put("room-k", bytes(range(16))) == 0
    blk = store.alloc_from_mem_pool(32)
    assert blk != 0
    # the pool goes on after the 32 bytes, but the block does not
    assert store.get_into_ranges([blk], [["room-k"]], [[[30]]], [[[0]]], [[[4]]]) == [[[-600]]]
    assert store.get_into_ranges([blk], [["room-k"]], [[[28]]], [[[0]]], [[[4]]]) == [[[4]]]
    assert ctypes.string_at(blk + 28, 4) == bytes(range(4))
    # a registered host-memory block: its own end
    hb = allocator.alloc(8192)
    assert store.register_buffer(hb, 8192) == 0
    assert store.get_into_ranges([hb], [["room-k"]], [[[8190]]], [[[0]]], [[[4]]]) == [[[-600]]]
    assert store.get_into_ranges([hb + 8000], [["room-k"]], [[[188]]], [[[2]]],
                                 [[[4]]]) == [[[4]]]
    assert ctypes.string_at(hb + 8188, 4) == bytes(range(2, 6))
    # a buffer in no mapped allocation fails every entry of the call, even
    # a missing key's and the good buffer's
    foreign = (ctypes.c_ubyte * 64)()
    res = store.get_into_ranges([blk, ctypes.addressof(foreign)], [["room-k"], ["room-none"]],
                                [[[0]], [[0]]], [[[0]], [[0]]], [[[4]], [[4]]])
    assert res == [[[-600]], [[-600]]]
    unreg = allocator.alloc(4096)  # host memory, but not registered
    assert store.get_into_ranges([unreg], [["room-k"]], [[[0]]], [[[0]]], [[[4]]]) == [[[-600]]]
    assert store.unregister_buffer(hb) == 0
    assert store._mem_pool_free(blk) == 0

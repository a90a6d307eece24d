# SPDX-License-Identifier: Apache-2.0
"""mooncake.engine.TransferEngine against a TransferEngine in another process.

The in-test engine plays the prefill side of a PD connector: it writes KV
blocks into the decode side's registered memory (tests/python/engine_proc.py,
a separate process) with sync, batch and async calls, and reads them back;
the decode side moves bytes the other way with its own engine.  Remote
addresses outside registered memory fail with -1 and change nothing.  A
store set up with ``engine=`` serves on that engine's port and regions, and
closing it leaves the engine working.
"""

import os
import signal
import time

import pytest

from helpers import MiB, EngineProc, pattern, sigstop

from mooncake import engine as mce
from mooncake.engine import Read, TransferEngine, TransferNotify, TransferOpcode, Write
from mooncake.store import MooncakeDistributedStore, ReplicateConfig


@pytest.fixture(params=["shm", "tcp"])
def decode(request):
    """The decode side: an initialized engine in another process (same-host
    shared memory allowed or not)."""
    env = {"MC_TE_SHM": "0"} if request.param == "tcp" else {}
    p = EngineProc(f"decode-{request.param}", env=env)
    try:
        assert p.te("initialize", "127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        p.hostname = p.te("get_local_hostname")
        yield p
    finally:
        p.stop()


@pytest.fixture
def prefill():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return te


BLOCK = 64 * 1024
NBLOCKS = 16


def test_initialize_and_names(prefill):
    port = prefill.get_rpc_port()
    assert 12300 <= port <= 14300, port
    assert prefill.get_local_hostname() == f"127.0.0.1:{port}"
    assert prefill.get_engine_ptr() != 0
    assert prefill.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1, \
        "a second initialize must fail"
    fresh = TransferEngine()
    assert fresh.get_rpc_port() == -1
    assert fresh.allocate_managed_buffer(4096) == 0, "allocation needs an initialized engine"
    assert fresh.transfer_sync_write(prefill.get_local_hostname(), 1, 1, 1) == -1
    assert TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "carrier-pigeon", "") == -1


def test_pd_sync_write_then_read_back(prefill, decode):
    kv = decode.te("allocate_managed_buffer", NBLOCKS * BLOCK)
    assert kv != 0
    assert decode.call("fill", addr=kv, hex=bytes(NBLOCKS * BLOCK).hex())["rc"] == 0
    assert prefill.get_first_buffer_address(decode.hostname) == kv

    src = prefill.allocate_managed_buffer(NBLOCKS * BLOCK)
    blocks = [pattern(i, BLOCK) for i in range(NBLOCKS)]
    for i, b in enumerate(blocks):
        assert prefill.write_bytes_to_buffer(src + i * BLOCK, b, BLOCK) == 0
    # prefill pushes KV blocks one by one into the decode side's buffer
    for i in range(NBLOCKS):
        assert prefill.transfer_sync_write(decode.hostname, src + i * BLOCK, kv + i * BLOCK,
                                           BLOCK) == 0
    got = bytes.fromhex(decode.te("read_bytes_from_buffer", kv, NBLOCKS * BLOCK))
    assert got == b"".join(blocks), "the decode side must hold exactly the written blocks"

    # the decode side answers by writing into the prefill side's buffer
    reply = pattern(99, BLOCK)
    stage = decode.te("allocate_managed_buffer", BLOCK)
    assert decode.call("fill", addr=stage, hex=reply.hex())["rc"] == 0
    assert decode.te("transfer_sync_write", prefill.get_local_hostname(), stage, src,
                     BLOCK) == 0
    assert prefill.read_bytes_from_buffer(src, BLOCK) == reply

    # and prefill reads a block back (transfer_sync with an opcode)
    dst = prefill.allocate_managed_buffer(BLOCK)
    assert prefill.transfer_sync(decode.hostname, dst, kv + 5 * BLOCK, BLOCK,
                                 TransferOpcode.Read) == 0
    assert prefill.read_bytes_from_buffer(dst, BLOCK) == blocks[5]
    assert prefill.transfer_sync_read(decode.hostname, dst, kv + 7 * BLOCK, BLOCK) == 0
    assert prefill.read_bytes_from_buffer(dst, BLOCK) == blocks[7]


def test_batch_sync_and_async(prefill, decode):
    kv = decode.te("allocate_managed_buffer", 4 * NBLOCKS * BLOCK)
    src = prefill.allocate_managed_buffer(NBLOCKS * BLOCK)
    blocks = [pattern(100 + i, BLOCK) for i in range(NBLOCKS)]
    for i, b in enumerate(blocks):
        prefill.write_bytes_to_buffer(src + i * BLOCK, b, BLOCK)
    srcs = [src + i * BLOCK for i in range(NBLOCKS)]
    lens = [BLOCK] * NBLOCKS

    # batch sync write into region 0, scattered in reverse order
    dsts = [kv + (NBLOCKS - 1 - i) * BLOCK for i in range(NBLOCKS)]
    assert prefill.batch_transfer_sync_write(decode.hostname, srcs, dsts, lens) == 0
    got = bytes.fromhex(decode.te("read_bytes_from_buffer", kv, NBLOCKS * BLOCK))
    assert got == b"".join(reversed(blocks))

    # async write into region 1 + get_batch_transfer_status
    base1 = kv + NBLOCKS * BLOCK
    bid = prefill.batch_transfer_async_write(decode.hostname, srcs,
                                             [base1 + i * BLOCK for i in range(NBLOCKS)], lens)
    assert bid != 0
    assert prefill.get_batch_transfer_status([bid]) == 0
    got = bytes.fromhex(decode.te("read_bytes_from_buffer", base1, NBLOCKS * BLOCK))
    assert got == b"".join(blocks)
    assert prefill.get_batch_transfer_status([bid]) == -1, "a settled id is gone"

    # transfer_submit_write + transfer_check_status, polled against a deadline
    base2 = kv + 2 * NBLOCKS * BLOCK
    ids = [prefill.transfer_submit_write(decode.hostname, srcs[i], base2 + i * BLOCK, BLOCK)
           for i in range(NBLOCKS)]
    assert all(ids) and len(set(ids)) == NBLOCKS
    pending, deadline = set(ids), time.monotonic() + 30
    while pending:
        assert time.monotonic() < deadline, "submitted writes did not complete"
        for i in list(pending):
            rc = prefill.transfer_check_status(i)
            assert rc in (0, 1), rc
            if rc == 1:
                pending.discard(i)
    got = bytes.fromhex(decode.te("read_bytes_from_buffer", base2, NBLOCKS * BLOCK))
    assert got == b"".join(blocks)
    assert prefill.transfer_check_status(ids[0]) == -1, "a completed id is freed"

    # async read back (batch_transfer_async with an opcode) into a fresh buffer
    back = prefill.allocate_managed_buffer(NBLOCKS * BLOCK)
    bid = prefill.batch_transfer_async(decode.hostname,
                                       [back + i * BLOCK for i in range(NBLOCKS)],
                                       [base2 + i * BLOCK for i in range(NBLOCKS)], lens, Read)
    assert bid != 0 and prefill.get_batch_transfer_status([bid]) == 0
    assert prefill.read_bytes_from_buffer(back, NBLOCKS * BLOCK) == b"".join(blocks)
    bid = prefill.batch_transfer_async_read(decode.hostname, [back], [kv], [BLOCK])
    assert prefill.get_batch_transfer_status([bid]) == 0
    assert prefill.read_bytes_from_buffer(back, BLOCK) == blocks[NBLOCKS - 1]
    assert prefill.batch_transfer_sync_read(decode.hostname, [back], [base1], [BLOCK]) == 0
    assert prefill.read_bytes_from_buffer(back, BLOCK) == blocks[0]
    assert prefill.batch_transfer_sync(decode.hostname, [src], [base1 + BLOCK], [BLOCK],
                                       Write) == 0

    # malformed batches fail up front
    assert prefill.batch_transfer_sync_write(decode.hostname, srcs, dsts[:-1], lens) == -1
    assert prefill.batch_transfer_async_write(decode.hostname, srcs, dsts, lens[:-1]) == 0
    assert prefill.batch_transfer_sync_write(decode.hostname, [], [], []) == -1


def test_async_returns_before_the_bytes_arrive(prefill):
    """A submit hands the work to library threads: 128 MiB over loopback TCP
    takes tens of milliseconds, the call returns long before."""
    peer = EngineProc("slow", env={"MC_TE_SHM": "0"})
    try:
        assert peer.te("initialize", "127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        name = peer.te("get_local_hostname")
        size = 128 * MiB
        dst = peer.te("allocate_managed_buffer", size)
        src = prefill.allocate_managed_buffer(size)
        assert prefill.transfer_sync_write(name, src, dst, 4096) == 0  # connect first
        prefill.write_bytes_to_buffer(src + size - 8, b"lastbyte", 8)
        bid = prefill.transfer_submit_write(name, src, dst, size)
        assert bid != 0
        assert prefill.transfer_check_status(bid) == 0, \
            "the submit must return while the transfer is still running"
        assert prefill.get_batch_transfer_status([bid]) == 0
        assert bytes.fromhex(peer.te("read_bytes_from_buffer", dst + size - 8, 8)) == \
            b"lastbyte"
    finally:
        peer.stop()


def test_refused_addresses_fail_and_corrupt_nothing(prefill, decode):
    kv = decode.te("allocate_managed_buffer", 4 * BLOCK)
    guard = pattern(7, 4 * BLOCK)
    assert decode.call("fill", addr=kv, hex=guard.hex())["rc"] == 0
    plain = decode.call("np_alloc", size=BLOCK)["addr"]  # never registered
    src = prefill.allocate_managed_buffer(8 * BLOCK)
    prefill.write_bytes_to_buffer(src, b"\xff" * (8 * BLOCK), 8 * BLOCK)
    size_class = 4 * BLOCK  # 256 KiB: the managed block ends exactly there

    assert prefill.transfer_sync_write(decode.hostname, src, plain, BLOCK) == -1
    assert prefill.transfer_sync_write(decode.hostname, src, 0x1000, BLOCK) == -1
    assert prefill.transfer_sync_read(decode.hostname, src, plain, BLOCK) == -1
    # out of range: starts inside but runs past the registered chunk
    first = prefill.get_first_buffer_address(decode.hostname)
    assert first != 0
    chunk_end = first + mce.MANAGED_CHUNK_SIZE
    assert prefill.transfer_sync_write(decode.hostname, src, chunk_end - BLOCK,
                                       2 * BLOCK) == -1
    # a batch with one bad entry fails as a whole, the good ones still land
    bid = prefill.batch_transfer_async_write(decode.hostname, [src, src], [plain, kv],
                                             [BLOCK, BLOCK])
    assert bid != 0 and prefill.get_batch_transfer_status([bid]) == -1
    bid = prefill.transfer_submit_write(decode.hostname, src, plain, BLOCK)
    deadline = time.monotonic() + 30
    while (rc := prefill.transfer_check_status(bid)) == 0:
        assert time.monotonic() < deadline
    assert rc == -1
    assert prefill.batch_transfer_sync_write(decode.hostname, [src], [0x1000], [BLOCK]) == -1
    # nothing but the one good batch entry changed
    got = bytes.fromhex(decode.te("read_bytes_from_buffer", kv, size_class))
    assert got == b"\xff" * BLOCK + guard[BLOCK:]
    assert bytes.fromhex(decode.te("read_bytes_from_buffer", plain, BLOCK)) == bytes(BLOCK)
    # unknown peer: -1, not an exception
    assert prefill.transfer_sync_write("127.0.0.1:1", src, kv, BLOCK) == -1
    assert prefill.get_first_buffer_address("127.0.0.1:1") == 0
    assert prefill.send_probe("127.0.0.1:1") == -1
    assert prefill.send_probe(decode.hostname) == 0


def test_register_memory(prefill, decode):
    a = decode.call("np_alloc", size=4 * BLOCK)["addr"]
    b = decode.call("np_alloc", size=BLOCK)["addr"]
    src = prefill.allocate_managed_buffer(BLOCK)
    data = pattern(3, BLOCK)
    prefill.write_bytes_to_buffer(src, data, BLOCK)
    assert prefill.transfer_sync_write(decode.hostname, src, a, BLOCK) == -1
    assert decode.te("register_memory", a, 4 * BLOCK) == 0
    assert decode.te("register_memory", a + BLOCK, BLOCK) != 0, "overlap must be refused"
    assert prefill.transfer_sync_write(decode.hostname, src, a + BLOCK, BLOCK) == 0
    assert bytes.fromhex(decode.te("read_bytes_from_buffer", a + BLOCK, BLOCK)) == data
    assert decode.te("unregister_memory", a) == 0
    assert prefill.transfer_sync_write(decode.hostname, src, a, BLOCK) == -1, \
        "an unregistered region must be unreachable"
    assert decode.te("unregister_memory", a) != 0
    assert decode.te("batch_register_memory", [a, b], [4 * BLOCK, BLOCK], "cpu:0") == 0
    assert prefill.transfer_sync_write(decode.hostname, src, b, BLOCK) == 0
    assert decode.te("batch_register_memory", [a], [BLOCK, BLOCK]) == -1
    assert decode.te("batch_unregister_memory", [a, b]) == 0
    assert prefill.transfer_sync_write(decode.hostname, src, b, BLOCK) == -1


def test_managed_buffers(prefill):
    sizes = [1, 8192, 8193, 100000, 1 << 20, 3 << 20]
    addrs = [prefill.allocate_managed_buffer(n) for n in sizes]
    assert all(addrs)
    spans = sorted((a, a + mce._ManagedAllocator.size_class(n)) for a, n in zip(addrs, sizes))
    for (a0, e0), (a1, _) in zip(spans, spans[1:]):
        assert e0 <= a1, "managed buffers must not overlap"
    assert mce._ManagedAllocator.size_class(8193) == 16384
    assert mce.MANAGED_SIZE_CLASSES[0] == 8192 and mce.MANAGED_SIZE_CLASSES[-1] == 256 * MiB
    # a freed block is reused by its class
    assert prefill.free_managed_buffer(addrs[3], sizes[3]) == 0
    assert prefill.allocate_managed_buffer(120000) == addrs[3]
    # wrong length or unknown address: -1, the block stays allocated
    assert prefill.free_managed_buffer(addrs[4], 8192) == -1
    assert prefill.free_managed_buffer(addrs[4] + 1, sizes[4]) == -1
    assert prefill.free_managed_buffer(addrs[4], sizes[4]) == 0
    assert prefill.free_managed_buffer(addrs[4], sizes[4]) == -1, "double free"
    assert prefill.allocate_managed_buffer(0) == 0
    # every managed buffer is registered: the engine writes into it locally
    me = prefill.get_local_hostname()
    prefill.write_bytes_to_buffer(addrs[1], b"managed!", 8)
    assert prefill.transfer_sync_write(me, addrs[1], addrs[2], 8) == 0
    assert prefill.read_bytes_from_buffer(addrs[2], 8) == b"managed!"
    # above the largest class: a dedicated registered mapping, gone when freed
    big = prefill.allocate_managed_buffer(300 * MiB)
    assert big != 0
    assert prefill.transfer_sync_write(me, addrs[1], big + 200 * MiB, 8) == 0
    assert prefill.free_managed_buffer(big, 300 * MiB) == 0
    assert prefill.transfer_sync_write(me, addrs[1], big + 200 * MiB, 8) == -1


def _rss_shmem_kib():
    """Shared-memory pages this process has mapped and touched, in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1])
    pytest.skip("no RssShmem in /proc/self/status")


def test_managed_chunks_commit_only_the_pages_used(prefill, decode):
    """A managed buffer is carved from a 2 GiB chunk (a dedicated mapping
    above 256 MiB) whose pages are committed as they are touched, as
    upstream's: the first small allocation maps 2 GiB without taking 2 GiB
    of memory (or the seconds committing it took).  Peers write into it as
    into any managed buffer."""
    before = _rss_shmem_kib()
    dst = prefill.allocate_managed_buffer(NBLOCKS * BLOCK)
    big = prefill.allocate_managed_buffer(300 * MiB)
    assert dst and big
    grown = _rss_shmem_kib() - before
    assert grown < 32 * 1024, f"two managed buffers committed {grown} KiB up front"
    # a peer's writes land in the untouched pages, which commit then
    kv = decode.te("allocate_managed_buffer", NBLOCKS * BLOCK)
    assert decode.call("fill", addr=kv, hex=pattern(7, BLOCK).hex())["rc"] == 0
    assert decode.te("transfer_sync_write", prefill.get_local_hostname(), kv,
                     dst + 3 * BLOCK, BLOCK) == 0
    assert decode.te("transfer_sync_write", prefill.get_local_hostname(), kv,
                     big + 200 * MiB, BLOCK) == 0
    assert prefill.read_bytes_from_buffer(dst + 3 * BLOCK, BLOCK) == pattern(7, BLOCK)
    assert prefill.read_bytes_from_buffer(big + 200 * MiB, BLOCK) == pattern(7, BLOCK)
    assert prefill.read_bytes_from_buffer(dst, BLOCK) == bytes(BLOCK), "untouched pages are 0"
    assert _rss_shmem_kib() - before < 32 * 1024
    assert prefill.free_managed_buffer(big, 300 * MiB) == 0


def test_unsupported_features_fail_loudly(prefill):
    assert (Read, Write) == (TransferOpcode.Read, TransferOpcode.Write)
    assert int(Read) == 0 and int(Write) == 1
    for flag in ("SUPPORT_CUDA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA",
                 "SUPPORT_INTRA_NVLINK"):
        assert getattr(mce, flag) is False
    # efa: as built (libfabric's headers at configure time)
    assert mce.SUPPORT_EFA is bool(mce._capi.Engine.protocol_built("efa"))
    me = prefill.get_local_hostname()
    with pytest.raises(NotImplementedError, match="CUDA"):
        prefill.transfer_write_on_cuda(me, 0, 0, 0)
    with pytest.raises(NotImplementedError, match="CUDA"):
        prefill.batch_transfer_read_on_cuda(me, [], [], [])
    with pytest.raises(NotImplementedError, match="notif"):
        prefill.get_notifies()
    with pytest.raises(NotImplementedError, match="notif"):
        prefill.transfer_sync(me, 0, 0, 8, Write, TransferNotify("n", "m"))
    with pytest.raises(NotImplementedError, match="topology"):
        prefill.get_local_topology()
    # off efa, upstream's warmup is a no-op returning 0
    assert prefill.warmup_efa_segment(me) == 0
    assert prefill.warmup_efa_segment("127.0.0.1:1") == 0


def test_protocol_built():
    built = mce._capi.Engine.protocol_built
    assert built("tcp") == 1 and built("TCP") == 1
    for name in ("cxl", "ascend", "nvlink", "carrier-pigeon", ""):
        assert built(name) == 0, name
    assert built("efa") == built("cxi") == built("EFA")


def test_sync_transfer_bounded_by_mc_transfer_timeout():
    """A peer that stops answering costs MC_TRANSFER_TIMEOUT (clamped to 5 s),
    not the engine's 30 s socket timeout."""
    env = dict(os.environ, MC_TRANSFER_TIMEOUT="1", MC_TE_SHM="0")
    peer = EngineProc("stopped", env={"MC_TE_SHM": "0"})
    old = os.environ.get("MC_TRANSFER_TIMEOUT")
    try:
        os.environ["MC_TRANSFER_TIMEOUT"] = env["MC_TRANSFER_TIMEOUT"]
        te = TransferEngine()
    finally:
        if old is None:
            del os.environ["MC_TRANSFER_TIMEOUT"]
        else:
            os.environ["MC_TRANSFER_TIMEOUT"] = old
    try:
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        assert peer.te("initialize", "127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        name = peer.te("get_local_hostname")
        dst = peer.te("allocate_managed_buffer", 1 * MiB)
        src = te.allocate_managed_buffer(1 * MiB)
        assert te.transfer_sync_write(name, src, dst, 4096) == 0
        # every thread of the peer stopped before the write, or it may still be answered
        sigstop(peer.pid)
        try:
            t0 = time.monotonic()
            assert te.transfer_sync_write(name, src, dst, 1 * MiB) == -1
            took = time.monotonic() - t0
        finally:
            os.kill(peer.pid, signal.SIGCONT)
        assert 4.5 <= took < 15, f"the sync write gave up after {took:.1f} s, not ~5 s"
        assert te.transfer_sync_write(name, src, dst, 4096) == 0, "the peer is back"
    finally:
        peer.stop()


# ---- a store on a borrowed engine ---------------------------------------------------


@pytest.mark.parametrize("via", ["get_engine", "wrapper"])
def test_store_on_shared_engine(master, spawn_client, via):
    te = TransferEngine()
    assert te.initialize("localhost", "P2PHANDSHAKE", "tcp", "") == 0
    assert te.get_first_buffer_address(te.get_local_hostname()) == 0
    store = MooncakeDistributedStore()
    arg = te.get_engine() if via == "get_engine" else te
    assert store.setup("localhost", "P2PHANDSHAKE", 32 * MiB, 8 * MiB, "tcp", "",
                       master.addr, engine=arg) == 0
    try:
        # one port: the store's segment is the engine's
        host = store.get_hostname()
        assert host == te.get_local_hostname()
        assert int(host.rsplit(":", 1)[1]) == te.get_rpc_port()
        # one set of regions: the store's segment is served by the engine
        seg_base = te.get_first_buffer_address(host)
        assert seg_base != 0

        other = spawn_client("peer")
        other_host = other.setup(master)
        assert other.call("put", key=f"to-te-{via}", hex=b"into the shared engine".hex(),
                          preferred=host)["rc"] == 0
        assert store.get(f"to-te-{via}") == b"into the shared engine"
        cfg = ReplicateConfig()
        cfg.preferred_segment = other_host
        assert store.put(f"from-te-{via}", b"out of the shared engine" * 100, cfg) == 0
        r = other.call("get", key=f"from-te-{via}")
        assert bytes.fromhex(r["hex"]) == b"out of the shared engine" * 100
        assert store.put(f"on-te-{via}", b"x" * 5000) == 0
        assert other.call("get", key=f"on-te-{via}")["len"] == 5000
    finally:
        assert store.close() == 0

    # the store's regions are gone from the engine, the engine still serves
    assert te.get_first_buffer_address(te.get_local_hostname()) == 0
    assert te.transfer_sync_write(te.get_local_hostname(), 0x1000, seg_base, 8) == -1
    peer = EngineProc("after-close")
    try:
        assert peer.te("initialize", "127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        buf = te.allocate_managed_buffer(BLOCK)
        assert buf != 0
        stage = peer.te("allocate_managed_buffer", BLOCK)
        assert peer.call("fill", addr=stage, hex=pattern(5, BLOCK).hex())["rc"] == 0
        assert peer.te("transfer_sync_write", te.get_local_hostname(), stage, buf, BLOCK) == 0
        assert te.read_bytes_from_buffer(buf, BLOCK) == pattern(5, BLOCK)
        assert te.transfer_sync_read(peer.te("get_local_hostname"), buf, stage, BLOCK) == 0
    finally:
        peer.stop()
    # and a store can borrow it again
    again = MooncakeDistributedStore()
    assert again.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "",
                       master.addr, engine=te) == 0
    assert again.get_hostname() == te.get_local_hostname()
    assert again.close() == 0


def test_store_engine_argument_checked(master):
    store = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="engine"):
        store.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "", master.addr,
                    engine=object())
    uninit = TransferEngine()
    assert store.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "", master.addr,
                       engine=uninit) != 0, "an engine that was never initialized is refused"
    # engine=None keeps the store's own engine
    assert store.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "", master.addr,
                       engine=None) == 0
    assert store.close() == 0

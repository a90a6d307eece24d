# SPDX-License-Identifier: Apache-2.0
"""protocol "efa" (and "cxi"): the libfabric transport, for real over
libfabric's software providers (docs/transfer.md §14), and the RDMA-class
libraries loaded at run time.

Every engine here runs with MC_TE_SHM=0, so bytes between processes on this
host cross the fabric endpoint (tcp;ofi_rxm on Debian's libfabric, or the
provider MC_FABRIC_PROVIDER names) and not the same-host memfd path; each
test checks the initiator's log for the endpoint it reached and for the
absence of the tcp fallback.  Also: a peer without fabric is reached over
tcp; a range outside the target's buffers and a stale key are refused with
the target's memory untouched; two network namespaces joined by veths; and
libmooncake.so needs neither libibverbs nor libfabric to load."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

from helpers import HERE, MiB, EngineProc, pattern

sys.path.insert(0, str(HERE.parent / "cluster"))
from netns import Net, netns_usable  # noqa: E402

NOT_SUPPORTED = -1012


def _not_built(protocol: str) -> str:
    """Why this build has no @p protocol transport ('' when it has one), asked
    of a throwaway process (a transport library, once loaded, stays)."""
    code = ("import sys\nfrom mooncake.engine import TransferEngine\n"
            "from mooncake.store import last_error_detail\n"
            "e = TransferEngine()\n"
            "rc = e.initialize('127.0.0.1', 'P2PHANDSHAKE', sys.argv[1], 'mlx5_9')\n"
            "print(last_error_detail() if rc != 0 else '')\n")
    with tempfile.TemporaryDirectory(prefix="mc-fabric-sysfs-") as root:
        port = os.path.join(root, "class", "infiniband", "mlx5_9", "ports", "1")
        os.makedirs(port)
        os.makedirs(os.path.join(root, "class", "infiniband", "mlx5_9", "device"))
        for name, text in (("state", "4: ACTIVE\n"), ("link_layer", "InfiniBand\n")):
            with open(os.path.join(port, name), "w") as f:
                f.write(text)
        r = subprocess.run([sys.executable, "-c", code, protocol], capture_output=True,
                           text=True, timeout=60,
                           env=dict(os.environ, MC_RDMA_SYSFS_ROOT=root, MC_LOG_LEVEL="error"))
    return r.stdout.strip() if "not built" in r.stdout else ""


@pytest.fixture(scope="module")
def fabric_built():
    why = _not_built("efa")
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def rdma_built():
    why = _not_built("rdma")
    if why:
        pytest.skip(why)


def _libmooncake() -> str:
    """The libmooncake.so.1 the SWIG module loads in this test run."""
    import importlib.util
    capi = importlib.util.find_spec("mooncake._capi")  # the SWIG extension
    assert capi is not None and capi.origin, "mooncake._capi is not importable"
    out = subprocess.run(["ldd", capi.origin], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    m = re.search(r"libmooncake\.so\.1 => (\S+)", out)
    assert m, "the SWIG module does not load libmooncake.so.1:\n" + out
    return m.group(1)


def test_libmooncake_links_no_rdma_library():
    out = subprocess.run(["ldd", _libmooncake()], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    for lib in ("libibverbs", "librdmacm", "libfabric", "libcudart"):
        assert lib not in out, f"libmooncake.so.1 links {lib}; it must be dlopen'ed:\n{out}"


@pytest.fixture
def sysfs(tmp_path):
    """One ACTIVE InfiniBand NIC in a fake sysfs tree (MC_RDMA_SYSFS_ROOT)."""
    dev = tmp_path / "class" / "infiniband" / "mlx5_1"
    (dev / "device").mkdir(parents=True)
    (dev / "device" / "numa_node").write_text("0\n")
    (dev / "ports" / "1").mkdir(parents=True)
    (dev / "ports" / "1" / "state").write_text("4: ACTIVE\n")
    (dev / "ports" / "1" / "link_layer").write_text("InfiniBand\n")
    return tmp_path


def test_rdma_without_libibverbs_is_refused_by_name_and_tcp_works(rdma_built, master,
                                                                   spawn_client, sysfs,
                                                                   tmp_path):
    # a separate process: the library is loaded once per process
    env = {"MC_RDMA_SYSFS_ROOT": str(sysfs), "MC_MS_AUTO_DISC": "",
           "MC_IBVERBS_PATH": str(tmp_path / "absent" / "libibverbs.so.1")}
    c = spawn_client("noverbs", env=env)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "rdma",
                              "mlx5_1", master.addr])
    assert r["rc"] == NOT_SUPPORTED, r
    log = c.log_text()
    assert "libibverbs.so.1 cannot be loaded" in log, log
    assert "install libibverbs1" in log, log
    # the same process sets up with tcp and moves bytes
    c.setup(master)
    assert c.call("put", key="noverbs-k", hex="0badcafe")["rc"] == 0
    assert c.call("get", key="noverbs-k")["hex"] == "0badcafe"


def test_rdma_with_a_library_that_is_not_libibverbs_is_refused(rdma_built, master,
                                                               spawn_client, sysfs):
    # a loadable library without the verbs symbols: refused as a whole, named
    env = {"MC_RDMA_SYSFS_ROOT": str(sysfs), "MC_MS_AUTO_DISC": "",
           "MC_IBVERBS_PATH": "libm.so.6"}
    c = spawn_client("notverbs", env=env)
    r = c.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "rdma",
                              "mlx5_1", master.addr])
    assert r["rc"] == NOT_SUPPORTED, r
    assert "libm.so.6 has no ibv_get_device_list" in c.log_text(), c.log_text()


# ---- the libfabric transport ----------------------------------------------------------

#: Every process of this module: no same-host shortcut, and the log lines
#: that show which path a request took.
ENV = {"MC_TE_SHM": "0", "MC_LOG_LEVEL": "info", "MC_FABRIC_SLICE_SIZE": "256KiB"}
FELL_BACK = "go over tcp"
#: What mooncake.engine's sync calls return for any failed transfer.
FAILED = -1


def reached(log: str) -> bool:
    return re.search(r"fabric: \S+ reached over \S+", log) is not None


class FabricEngine(EngineProc):
    """A TransferEngine in its own process (engine_proc.py), optionally in a
    network namespace (``prefix``)."""

    def __init__(self, name, env=None, prefix=None):
        super().__init__(name, env=dict(ENV, **(env or {})), prefix=prefix)

    def fill(self, addr: int, data: bytes) -> None:
        assert self.call("fill", addr=addr, hex=data.hex())["rc"] == 0

    def read(self, addr: int, n: int) -> bytes:
        return bytes.fromhex(self.te("read_bytes_from_buffer", addr, n))

    def buffer(self, size: int) -> int:
        """A registered buffer of @p size bytes (numpy, kept by the process)."""
        addr = self.call("np_alloc", size=size)["addr"]
        assert self.te("register_memory", addr, size) == 0, self.log_text()
        return addr


@pytest.fixture
def engines(fabric_built):
    """``make(name, host=, protocol=, env=, prefix=)``: an initialized engine
    process; every one is stopped at teardown."""
    procs = []

    def make(name, host="127.0.0.1", protocol="efa", env=None, prefix=None):
        p = FabricEngine(name, env=env, prefix=prefix)
        procs.append(p)
        rc = p.te("initialize", host, "P2PHANDSHAKE", protocol, "")
        assert rc == 0, f"{name}: initialize({protocol}) = {rc}\n{p.log_text()}"
        p.hostname = p.te("get_local_hostname")
        return p
    try:
        yield make
    finally:
        for p in procs:
            p.stop()


def exercise(target: FabricEngine, init: FabricEngine) -> None:
    """Write, read and batch both ways between two engines, checking bytes."""
    size = MiB + 4097  # several 256 KiB slices, an odd tail
    kv, src = target.buffer(4 * MiB), init.buffer(4 * MiB)
    data = pattern(1, size)
    init.fill(src, data)
    assert init.te("transfer_sync_write", target.hostname, src, kv, size) == 0
    assert target.read(kv, size) == data, "the write must land byte for byte"
    other = pattern(2, 64 * 1024)
    target.fill(kv + MiB, other)
    assert init.te("transfer_sync_read", target.hostname, src + 8, kv + MiB, len(other)) == 0
    assert init.read(src + 8, len(other)) == other, "the read must return the target's bytes"
    # a batch of small requests each way
    blocks = [pattern(10 + i, 4096) for i in range(8)]
    for i, b in enumerate(blocks):
        init.fill(src + i * 4096, b)
    assert init.te("batch_transfer_sync_write", target.hostname,
                   [src + i * 4096 for i in range(8)],
                   [kv + 2 * MiB + i * 8192 for i in range(8)], [4096] * 8) == 0
    for i, b in enumerate(blocks):
        assert target.read(kv + 2 * MiB + i * 8192, 4096) == b
    assert init.te("batch_transfer_sync_read", target.hostname,
                   [src + 3 * MiB + i * 4096 for i in range(8)],
                   [kv + 2 * MiB + i * 8192 for i in range(8)], [4096] * 8) == 0
    assert init.read(src + 3 * MiB, 8 * 4096) == b"".join(blocks)
    # and memory the initiator never registered (tcp;ofi_rxm and sockets take
    # it as it is; a provider that needs local MRs sends it over tcp)
    loose = init.call("np_alloc", size=8192)["addr"]
    assert init.te("transfer_sync_read", target.hostname, loose, kv + 2 * MiB, 8192) == 0
    assert init.read(loose, 8192) == blocks[0] + target.read(kv + 2 * MiB + 4096, 4096)
    log = init.log_text()
    assert reached(log), "the initiator never reached the target's endpoint:\n" + log
    assert FELL_BACK not in log, "requests fell back to tcp:\n" + log


def test_engines_read_write_batch_over_fabric(engines):
    target, init = engines("target"), engines("init")
    exercise(target, init)
    exercise(init, target)  # and the other way, on the other side's endpoint
    assert "over provider" in target.log_text(), target.log_text()


def test_warmup_efa_segment_resolves_the_peer(engines):
    """warmup_efa_segment: 0 once the peer's descriptor is fetched over
    efa, -1 for a peer that does not answer (off efa it is a no-op:
    test_engine.py)."""
    target, init = engines("target"), engines("init")
    assert init.te("warmup_efa_segment", target.hostname) == 0
    assert init.te("warmup_efa_segment", "127.0.0.1:1") == -1
    exercise(target, init)


def test_provider_named_by_mc_fabric_provider(engines):
    env = {"MC_FABRIC_PROVIDER": "sockets"}
    target, init = engines("target", env=env), engines("init", env=env)
    assert "efa over provider sockets" in init.log_text(), init.log_text()
    kv, src = target.buffer(MiB), init.buffer(MiB)
    data = pattern(3, 256 * 1024)
    init.fill(src, data)
    assert init.te("transfer_sync_write", target.hostname, src, kv, len(data)) == 0
    assert target.read(kv, len(data)) == data
    assert reached(init.log_text()) and FELL_BACK not in init.log_text(), init.log_text()


def test_shm_provider_virtual_addresses(engines):
    # libfabric's same-host provider publishes virtual addresses
    # (FI_MR_VIRT_ADDR), the addressing EFA uses; tcp;ofi_rxm and sockets
    # use offsets into the MR
    env = {"MC_FABRIC_PROVIDER": "shm"}
    target, init = engines("shm-target", env=env), engines("shm-init", env=env)
    assert "over provider shm" in init.log_text() and "virtual addresses" in init.log_text(), \
        init.log_text()
    exercise(target, init)


def test_cxi_is_the_same_transport(engines):
    # upstream's Slingshot protocol: the cxi provider where libfabric has it,
    # else the same software providers
    target, init = engines("cxi-target", protocol="cxi"), engines("cxi-init", protocol="cxi")
    assert "cxi over provider" in init.log_text(), init.log_text()
    kv, src = target.buffer(MiB), init.buffer(MiB)
    data = pattern(4, 300 * 1024)
    init.fill(src, data)
    assert init.te("transfer_sync_write", target.hostname, src, kv, len(data)) == 0
    assert target.read(kv, len(data)) == data
    assert reached(init.log_text()) and FELL_BACK not in init.log_text(), init.log_text()


def test_unknown_provider_is_refused_by_name(fabric_built):
    p = FabricEngine("badprov", env={"MC_FABRIC_PROVIDER": "no-such-provider"})
    try:
        assert p.te("initialize", "127.0.0.1", "P2PHANDSHAKE", "efa", "") == -1
        assert "MC_FABRIC_PROVIDER=no-such-provider offers no reliable-datagram endpoint" \
            in p.log_text(), p.log_text()
    finally:
        p.stop()


def test_range_outside_buffers_and_stale_key_are_refused(engines):
    target, init = engines("target"), engines("init")
    kv = target.buffer(256 * 1024)
    plain = target.call("np_alloc", size=64 * 1024)["addr"]
    guard = pattern(7, 64 * 1024)
    target.fill(plain, guard)
    assert target.te("register_memory", plain, 64 * 1024) == 0
    src = init.buffer(64 * 1024)
    init.fill(src, b"\xff" * 64 * 1024)
    # over the fabric first: the initiator holds the target's keys now
    assert init.te("transfer_sync_read", target.hostname, src, plain, 4096) == 0
    assert init.read(src, 4096) == guard[:4096]
    assert reached(init.log_text()), init.log_text()
    init.fill(src, b"\xff" * 4096)
    # a range running past the registration is refused before anything moves
    assert init.te("transfer_sync_write", target.hostname, src, plain + 60 * 1024,
                   8192) == FAILED
    # a stale key: the target drops the registration, the initiator's
    # descriptor still lists it; the target's provider refuses the key, and
    # a fresh descriptor no longer has the buffer
    assert target.te("unregister_memory", plain) == 0
    assert init.te("transfer_sync_write", target.hostname, src, plain, 4096) == \
        FAILED
    assert "refused a key" in init.log_text(), init.log_text()
    assert target.read(plain, 64 * 1024) == guard, "refused requests must not touch memory"
    # the peer is usable again (a reset endpoint)
    assert init.te("transfer_sync_write", target.hostname, src, kv, 4096) == 0
    assert target.read(kv, 4096) == b"\xff" * 4096
    assert FELL_BACK not in init.log_text(), init.log_text()


@pytest.fixture
def net():
    why = netns_usable()
    if why:
        pytest.skip(f"two network namespaces are needed: {why}")
    n = Net(["a", "b"])
    try:
        yield n
    finally:
        n.close()


def test_two_network_namespaces(engines, net):
    target = engines("ns-target", host=net.ip["a"], prefix=net.prefix("a"))
    init = engines("ns-init", host=net.ip["b"], prefix=net.prefix("b"))
    assert target.hostname.startswith(net.ip["a"] + ":"), target.hostname
    exercise(target, init)
    assert net.ip["a"] in init.log_text(), init.log_text()


# ---- the store on efa: real master, client processes ---------------------------------------

@pytest.fixture
def spawn_fabric_client(fabric_built, spawn_client):
    return spawn_client


def store_client(spawn_client, master, name, protocol="efa", segment=64 * MiB):
    c = spawn_client(name, env=ENV)
    r = c.call("setup", args=["127.0.0.1", "P2PHANDSHAKE", segment, 16 * MiB, protocol, "",
                              master.addr])
    assert r["rc"] == 0, f"{name}: setup({protocol}) = {r}\n{c.log_text()}"
    c.hostname = r["hostname"]
    return c


def test_store_put_get_zero_copy_over_fabric(master, spawn_fabric_client):
    spawn_client = spawn_fabric_client
    holder = store_client(spawn_client, master, "holder")
    user = store_client(spawn_client, master, "user", segment=0)  # its bytes live on holder
    r = user.call("put_random", key="fab-big", size=3 * MiB + 5)
    assert r["rc"] == 0, r
    got = user.call("get", key="fab-big")
    assert got["len"] == 3 * MiB + 5 and got["sha256"] == r["sha256"], got
    got = holder.call("get", key="fab-big")
    assert got["sha256"] == r["sha256"], got
    zc = user.call("zc_roundtrip", key="fab-zc", size=256 * 1024)  # put_from, get_into
    assert zc["rc"] == 0 and zc["n"] == 256 * 1024 and zc["ok"], zc
    keys = [f"fab-batch-{i}" for i in range(6)]
    bz = user.call("batch_zc", keys=keys, size=64 * 1024)  # batch_put_from, batch_get_into
    assert bz["rcs"] == [0] * 6 and bz["ns"] == [64 * 1024] * 6 and bz["ok"], bz
    vals = [pattern(20 + i, 1000 + i).hex() for i in range(4)]
    assert user.call("put_batch", keys=[f"fab-pb-{i}" for i in range(4)], hexes=vals)["rc"] == 0
    assert user.call("get_batch", keys=[f"fab-pb-{i}" for i in range(4)])["hexes"] == vals
    log = user.log_text()
    assert reached(log), "the user never reached the holder's endpoint:\n" + log
    assert FELL_BACK not in log, log


def test_store_peer_without_fabric_falls_back_to_tcp(master, spawn_fabric_client):
    spawn_client = spawn_fabric_client
    holder = store_client(spawn_client, master, "tcp-holder", protocol="tcp")
    user = store_client(spawn_client, master, "efa-user", segment=0)
    r = user.call("put_random", key="fab-fallback", size=MiB)
    assert r["rc"] == 0, r
    assert user.call("get", key="fab-fallback")["sha256"] == r["sha256"]
    assert holder.call("get", key="fab-fallback")["sha256"] == r["sha256"]
    log = user.log_text()
    assert "go over tcp (the target has no endpoint of our provider)" in log, log


def test_efa_without_libfabric_is_refused_by_name(master, spawn_fabric_client, tmp_path):
    spawn_client = spawn_fabric_client
    c = spawn_client("nofabric", env=dict(ENV, MC_LIBFABRIC_PATH=str(tmp_path / "libfabric.so.1")))
    r = c.call("setup", args=["127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "efa", "",
                              master.addr])
    assert r["rc"] == NOT_SUPPORTED, r
    log = c.log_text()
    assert "libfabric.so.1 cannot be loaded" in log and "install libfabric1" in log, log
    c.setup(master)  # tcp still works in the same process
    assert c.call("put", key="nofabric-k", hex="c0ffee")["rc"] == 0
    assert c.call("get", key="nofabric-k")["hex"] == "c0ffee"

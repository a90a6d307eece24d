# SPDX-License-Identifier: Apache-2.0
"""protocol="rdma" on a host without a usable RDMA NIC: setup refuses with a
message that names the missing NIC or says no RDMA device was found, never
crashes, and the store stays usable with tcp.  A fake sysfs tree
(MC_RDMA_SYSFS_ROOT) stands in for /sys/class/infiniband."""
import pytest

from helpers import MiB

INVALID_PARAMS = -600
NOT_SUPPORTED = -1012


def new_store():
    from mooncake.store import MooncakeDistributedStore
    return MooncakeDistributedStore()


def detail():
    from mooncake.store import last_error_detail
    return last_error_detail()


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    for name, numa, state in (("mlx5_0", 0, "4: ACTIVE"), ("mlx5_1", 1, "4: ACTIVE"),
                              ("mlx5_2", 0, "1: DOWN")):
        dev = tmp_path / "class" / "infiniband" / name
        (dev / "device").mkdir(parents=True)
        (dev / "device" / "numa_node").write_text(f"{numa}\n")
        (dev / "ports" / "1").mkdir(parents=True)
        (dev / "ports" / "1" / "state").write_text(state + "\n")
        (dev / "ports" / "1" / "link_layer").write_text("InfiniBand\n")
    monkeypatch.setenv("MC_RDMA_SYSFS_ROOT", str(tmp_path))
    monkeypatch.delenv("MC_MS_AUTO_DISC", raising=False)
    monkeypatch.delenv("MC_MS_FILTERS", raising=False)
    return tmp_path


def rdma_setup(master, devices):
    s = new_store()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "rdma", devices,
                 master.addr)
    return s, rc


def test_named_nic_missing_is_named(master, sysfs):
    s, rc = rdma_setup(master, "mlx5_0,mlx5_7")
    assert rc == INVALID_PARAMS, rc
    assert "mlx5_7" in detail() and "not found" in detail(), detail()
    assert "mlx5_0, mlx5_1, mlx5_2" in detail(), detail()   # what the host has
    assert s.close() == 0


def test_down_port_is_refused(master, sysfs):
    s, rc = rdma_setup(master, "mlx5_2")
    assert rc == INVALID_PARAMS, rc
    assert "mlx5_2" in detail() and "ACTIVE" in detail(), detail()
    s.close()


def test_present_nic_without_verbs_device_is_refused_by_name(master, sysfs):
    # sysfs has it, libibverbs on this host does not: no crash, the NIC is named
    s, rc = rdma_setup(master, "mlx5_1")
    assert rc == NOT_SUPPORTED, rc
    assert "mlx5_1" in detail(), detail()
    s.close()


def test_no_device_found(master, monkeypatch, tmp_path):
    monkeypatch.setenv("MC_RDMA_SYSFS_ROOT", str(tmp_path / "empty"))
    monkeypatch.delenv("MC_MS_AUTO_DISC", raising=False)
    s, rc = rdma_setup(master, "")
    assert rc == NOT_SUPPORTED, rc
    assert "no RDMA device found" in detail(), detail()
    # the same store sets up with tcp afterwards
    assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                   master.addr) == 0
    assert s.put("rdma-fallback", b"v") == 0 and s.get("rdma-fallback") == b"v"
    assert s.close() == 0


def test_auto_disc_rules(master, sysfs, monkeypatch):
    monkeypatch.setenv("MC_MS_AUTO_DISC", "0")
    s, rc = rdma_setup(master, "")
    assert rc == INVALID_PARAMS and "MC_MS_AUTO_DISC=0" in detail(), detail()
    monkeypatch.setenv("MC_MS_AUTO_DISC", "maybe")
    s, rc = rdma_setup(master, "mlx5_0")
    assert rc == INVALID_PARAMS and "MC_MS_AUTO_DISC" in detail(), detail()
    # forced discovery ignores the (bad) list; the filter leaves only a DOWN port
    monkeypatch.setenv("MC_MS_AUTO_DISC", "1")
    monkeypatch.setenv("MC_MS_FILTERS", "mlx5_2")
    s, rc = rdma_setup(master, "mlx5_9")
    assert rc == NOT_SUPPORTED, rc
    assert "no RDMA device found" in detail() and "MC_MS_FILTERS=mlx5_2" in detail(), detail()
    monkeypatch.setenv("MC_MS_FILTERS", "mlx5_1")
    s, rc = rdma_setup(master, "mlx5_9")
    assert rc == NOT_SUPPORTED and "mlx5_1" in detail(), detail()


@pytest.mark.parametrize("proto", ["cxl", "ascend", "nvlink"])
def test_other_transports_not_built(master, proto):
    s = new_store()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, proto, "", master.addr)
    assert rc == NOT_SUPPORTED, rc
    assert proto in detail() and "not built in this version" in detail(), detail()
    s.close()


def test_two_host_script_selftest(tmp_path):
    # tests/rdma/run.sh's serve/peer script, both sides over tcp on loopback:
    # the put/get/batch round trip and its checks must pass here, so what
    # runs on NIC hosts is known to work apart from the transport itself
    import os
    import subprocess
    from helpers import master_bin
    build = os.path.dirname(os.path.abspath(master_bin()))
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, BUILD_DIR=build, TMPDIR=str(tmp_path), MC_LOG_LEVEL="warn")
    r = subprocess.run([os.path.join(src, "tests", "rdma", "run.sh"), "selftest"], env=env,
                       capture_output=True, text=True, timeout=300)
    # each side's engine log, for the message of a failure
    logs = "".join(f"\n--- {p.name}:\n{p.read_text(errors='replace')[-3000:]}"
                   for p in sorted(tmp_path.glob("mc-rdma-*")))
    assert r.returncode == 0, r.stdout + r.stderr + logs
    assert "run.sh: peer PASS" in r.stdout and "run.sh: serve PASS" in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("run.sh: selftest PASS"), r.stdout

# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the cluster suite: ``cluster`` is a bridge with a master
host "m" and client hosts "a", "b", "c", each in its own network
namespace (netns.py), torn down with every process in it even when a test
fails; ``fault_run`` makes the fault suite's runs (faults.py), torn down
the same way.  The suite needs root; elsewhere it is skipped with the
reason.  The fault runs' summary lines are printed at the end of the
session, passed or failed."""

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from helpers import ClientProc, DaemonProc, master_bin, port_accepts  # noqa: E402
from faults import FaultRun  # noqa: E402
from netns import Net, netns_usable  # noqa: E402

MASTER_PORT = 50051
CLIENT_TTL_S = 3


class NsMaster(DaemonProc):
    """mooncake_master on the namespace host "m"."""

    def __init__(self, net: Net, client_ttl_s: int) -> None:
        self.ip = net.ip["m"]
        self.addr = f"{self.ip}:{MASTER_PORT}"
        self._start(net.prefix("m") + [
            master_bin(), f"--rpc_address={self.ip}", f"--port={MASTER_PORT}",
            f"--client_ttl={client_ttl_s}", "--default_kv_lease_ttl=500",
            f"--metrics_host={self.ip}", "--metrics_port=9003", "--log_level=info"], "nsmaster")
        self._ready(lambda: port_accepts(MASTER_PORT, self.ip), 15, "the master in its namespace")


class Cluster:
    def __init__(self) -> None:
        self.net = Net(["m", "a", "b", "c"])
        self.procs = []
        self.master = None

    def start_master(self, client_ttl_s: int = CLIENT_TTL_S) -> NsMaster:
        self.master = NsMaster(self.net, client_ttl_s)
        self.procs.append(self.master)
        return self.master

    def client(self, host: str, segment: int) -> ClientProc:
        """A client process on ``host``, set up against the master; its
        segment name is "<host ip>:<port>".  The same-host shared-memory
        path is off: bytes cross the veths."""
        c = ClientProc(f"ns-{host}", env={"MC_TE_SHM": "0"}, prefix=self.net.prefix(host))
        self.procs.append(c)
        r = c.call("setup", args=[self.net.ip[host], "P2PHANDSHAKE", segment, 16 << 20, "tcp",
                                  "", self.master.addr])
        assert r["rc"] == 0, f"setup on {host}: {r}\n{c.log_text()}"
        c.hostname = r["hostname"]
        return c

    def close(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:  # keep tearing down
                p.kill()
        self.net.close()


@pytest.fixture
def cluster():
    why = netns_usable()
    if why:
        pytest.skip(why)
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


#: Summary lines of the fault runs of this session (test_faults.py).
FAULT_SUMMARIES = []


@pytest.fixture
def fault_run(tmp_path):
    """``fault_run(mode, seed)``: a FaultRun opened in ``tmp_path`` (its
    logs, hist/*.jsonl and run.json stay there), or in a new directory
    under $MC_FAULTS_DIR when that is set (kept: pytest rotates its own);
    closed at teardown."""
    why = netns_usable()
    if why:
        pytest.skip(why)
    if shutil.which("nft") is None:
        pytest.skip("the fault suite needs nftables (nft; scripts/deps.sh installs it)")
    runs = []

    def make(mode: str, seed: int) -> FaultRun:
        keep = os.environ.get("MC_FAULTS_DIR")
        where = (Path(keep) / f"{mode}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
                 if keep else tmp_path / mode)
        r = FaultRun(mode, where, seed)
        runs.append(r)
        r.open()
        return r
    try:
        yield make
    finally:
        for r in runs:
            r.close()


def pytest_terminal_summary(terminalreporter):
    if FAULT_SUMMARIES:
        terminalreporter.section("fault runs")
        for line in FAULT_SUMMARIES:
            terminalreporter.write_line(line)

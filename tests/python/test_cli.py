# SPDX-License-Identifier: Apache-2.0
"""mooncake-cli (python3 -m mooncake.cli) against a real master and a real
client HTTP server: health, stats, keys (--regex), query, segments,
segment, remove (--force), role, client health/stats/version, --json for
each, and clear errors (exit 2) when nothing listens."""

import json
import subprocess
import sys

import pytest

from helpers import MiB, free_port

#: Long enough that a read's lease is still held when the CLI runs.
LEASE_TTL_MS = 60_000


def cli(master, *args, check=None, client_port=None):
    """Run the CLI against ``master``; returns (exit status, stdout, stderr)."""
    argv = [sys.executable, "-m", "mooncake.cli",
            f"--admin=127.0.0.1:{master.metrics_port}" if master else "--admin=127.0.0.1:1",
            f"--master={master.addr}" if master else "--master=127.0.0.1:1"]
    if client_port is not None:
        argv.append(f"--client=127.0.0.1:{client_port}")
    r = subprocess.run(argv + list(args), capture_output=True, text=True, timeout=60)
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout, r.stderr)
    return r.returncode, r.stdout, r.stderr


def test_health_and_role(master):
    assert cli(master, "health", check=0)[1].strip() == "OK"
    assert json.loads(cli(master, "--json", "health", check=0)[1])["healthy"] is True
    out = cli(master, "role", check=0)[1]
    assert "role: leader" in out
    j = json.loads(cli(master, "--json", "role", check=0)[1])
    assert j["role"] == "leader"


def test_keys_query_and_stats(master, make_store):
    s = make_store(segment=16 * MiB, buffer=4 * MiB)
    assert s.put("cli/a", b"x" * 1000) == 0
    assert s.put("cli/b", b"y" * 10) == 0
    assert s.put("other", b"z") == 0

    keys = cli(master, "keys", check=0)[1].split()
    assert {"cli/a", "cli/b", "other"} <= set(keys)
    assert cli(master, "keys", "--regex", "^cli/", check=0)[1].split() == ["cli/a", "cli/b"]
    j = json.loads(cli(master, "--json", "keys", "--regex", "^cli/", check=0)[1])
    assert j == {"keys": ["cli/a", "cli/b"], "count": 2, "truncated": False}
    code, _, err = cli(master, "keys", "--regex", "(")
    assert code == 2 and "--regex" in err

    out = cli(master, "query", "cli/a", check=0)[1]
    assert "key: cli/a" in out and "(1000)" in out and "replica 0:" in out
    q = json.loads(cli(master, "--json", "query", "cli/a", check=0)[1])
    assert q["size"] == 1000 and len(q["replicas"]) == 1
    code, _, err = cli(master, "query", "cli/missing")
    assert code == 1 and "key not found: cli/missing" in err

    stats = cli(master, "stats", check=0)[1]
    assert stats.strip()
    metrics = json.loads(cli(master, "--json", "stats", check=0)[1])
    put_starts = [v for k, v in metrics.items() if k.startswith("master_put_start_requests_total")]
    assert put_starts and put_starts[0] >= 3


def test_segments(master, make_store):
    s = make_store(segment=16 * MiB, buffer=4 * MiB)
    name = s.get_hostname()
    out = cli(master, "segments", check=0)[1]
    assert name in out
    segs = json.loads(cli(master, "--json", "segments", check=0)[1])
    assert any(x["name"] == name for x in segs)
    one = json.loads(cli(master, "--json", "segment", name, check=0)[1])
    assert one["name"] == name and one["capacity"] == 16 * MiB
    assert "capacity: 16.0 MiB" in cli(master, "segment", name, check=0)[1]
    code, _, err = cli(master, "segment", "nowhere:1")
    assert code == 1 and "segment not mounted: nowhere:1" in err


def test_remove(master, make_store):
    s = make_store(segment=16 * MiB, buffer=4 * MiB)
    assert s.put("cli/rm", b"v") == 0
    assert s.get("cli/rm") == b"v"  # holds a read lease for LEASE_TTL_MS
    code, out, _ = cli(master, "remove", "cli/rm")
    assert code == 1 and "OBJECT_HAS_LEASE" in out and "--force" in out
    assert s.is_exist("cli/rm") == 1
    assert cli(master, "remove", "--force", "cli/rm", check=0)[1].strip() == "removed cli/rm"
    assert s.is_exist("cli/rm") == 0
    code, out, _ = cli(master, "--json", "remove", "cli/rm")
    assert code == 1 and json.loads(out) == {"removed": False, "key": "cli/rm", "error": -704}


def test_client_http(master, make_store):
    from mooncake.store import MooncakeDistributedStore

    port = free_port()
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "", master.addr,
                   enable_client_http_server=True, client_http_port=port) == 0
    try:
        assert cli(master, "client", "health", client_port=port, check=0)[1].strip() == "healthy"
        v = json.loads(cli(master, "--json", "client", "version", client_port=port,
                           check=0)[1])
        assert v["version"]
        assert "client=" in cli(master, "client", "stats", client_port=port, check=0)[1]
        m = json.loads(cli(master, "--json", "client", "stats", client_port=port, check=0)[1])
        assert "mooncake_client_mounted_segments" in m
    finally:
        s.close()


@pytest.mark.parametrize("args", [["health"], ["stats"], ["keys"], ["query", "k"],
                                  ["segments"], ["role"], ["client", "health"]])
def test_unreachable(args):
    port = free_port()  # nothing listens there
    argv = [sys.executable, "-m", "mooncake.cli", f"--admin=127.0.0.1:{port}",
            f"--client=127.0.0.1:{port}"] + args
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"cannot reach the" in r.stderr and f"127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr


def test_remove_unreachable():
    port = free_port()
    r = subprocess.run([sys.executable, "-m", "mooncake.cli", f"--master=127.0.0.1:{port}",
                        "remove", "k"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and f"127.0.0.1:{port} (--master)" in r.stderr, r.stderr


def test_usage_errors():
    r = subprocess.run([sys.executable, "-m", "mooncake.cli"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "COMMAND" in r.stderr

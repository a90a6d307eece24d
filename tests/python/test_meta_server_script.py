# SPDX-License-Identifier: Apache-2.0
"""scripts/test_meta_server.py, upstream's master/metadata-server load run:
against a real master and the Python KVBootstrapServer as the metadata server
(upstream's recommended set-up), every thread's 15000 is_exist calls reach
the master and the QPS line adds up; a master that cannot be reached is
exit 1; and pytest collects nothing from the script.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import Master, free_port, port_accepts, wait_until

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "test_meta_server.py"
THREADS = 2
PER_THREAD = 15000


def run_script(args, env, timeout=120):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, str(SCRIPT)] + args, capture_output=True,
                          text=True, env=full, timeout=timeout)


def test_load_run_against_master_and_python_metadata_server():
    pytest.importorskip("aiohttp", reason="the Python metadata server needs aiohttp")
    from mooncake.http_metadata_server import KVBootstrapServer

    class Counting(KVBootstrapServer):
        """Counts the PUTs it serves (a subclass hook upstream's callers use)."""

        puts = 0

        async def _handle_put(self, key, request):
            Counting.puts += 1
            return await super()._handle_put(key, request)

    kv_port = free_port()
    kv = Counting(kv_port, "127.0.0.1")
    kv.run()
    m = Master()
    try:
        wait_until(lambda: port_accepts(kv_port), 10.0, "the metadata server to listen")
        before = m.metric("master_exist_key_requests_total")
        r = run_script(["127.0.0.1", str(THREADS)],
                       {"METADATA_ADDR": f"http://127.0.0.1:{kv_port}/metadata",
                        "MASTER_SERVER": m.addr, "LOCAL_HOSTNAME": "127.0.0.1"})
        assert r.returncode == 0, r.stderr
        line = r.stdout.strip().splitlines()[-1]
        got = re.fullmatch(r"total time: ([0-9.e+-]+) s, QPS: ([0-9]+\.[0-9]{2})", line)
        assert got, line
        total, qps = float(got.group(1)), float(got.group(2))
        assert total > 0 and qps * total == pytest.approx(THREADS * PER_THREAD, rel=0.01)
        # every call reached the master, and the engine published through
        # the Python metadata server
        assert m.metric("master_exist_key_requests_total") - before >= THREADS * PER_THREAD
        assert Counting.puts > 0
    finally:
        m.stop()
        kv.close()


def test_setup_failure_exits_1():
    r = run_script(["127.0.0.1"], {"MASTER_SERVER": f"127.0.0.1:{free_port()}",
                                    "METADATA_ADDR": "P2PHANDSHAKE"})
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "total time" not in r.stdout


def test_pytest_collects_nothing_from_it(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", str(SCRIPT)],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 5, (r.returncode, r.stdout, r.stderr)  # no tests collected
    assert "total time" not in r.stdout and "error" not in r.stdout.lower(), r.stdout

# SPDX-License-Identifier: Apache-2.0
"""The quick-start examples (examples/hello.py, examples/p2p_hello.py,
examples/tensor_hello.py) run unchanged against a real master.  They are literal copies of the spec and
name the default ports (master localhost:50051, metadata localhost:8080);
the test rewrites exactly those two strings to the fixture's free ports and
runs the result in a fresh interpreter.  examples/dummy_hello.py names a
mooncake_client daemon at its default port (localhost:50052) instead; its
test starts one (helpers.RealClient) and rewrites that string.
"""

import subprocess
import sys

import pytest

from helpers import EXAMPLES, RealClient


def run_example(name, tmp_path, master):
    src = (EXAMPLES / name).read_text()
    assert src.count('"localhost:50051"') == 1, "the example names the master once"
    src = src.replace('"localhost:50051"', repr(master.addr))
    if "http://localhost:8080/metadata" in src:
        src = src.replace('"http://localhost:8080/metadata"', repr(master.metadata_url))
    assert "8080" not in src and "50051" not in src
    script = tmp_path / name
    script.write_text(src)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("name", ["hello.py", "p2p_hello.py"])
def test_example_prints_hello(name, tmp_path, master):
    r = run_example(name, tmp_path, master)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Hello, Mooncake Store!\n", (r.stdout, r.stderr)


def test_tensor_example(tmp_path, master):
    pytest.importorskip("torch")
    r = run_example("tensor_hello.py", tmp_path, master)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("get_tensor: True\n"
                        "shard 2 of 4: (128, 16) True\n"
                        "read-modify-write: True\n"), (r.stdout, r.stderr)


def test_dummy_example(tmp_path, master):
    rc = RealClient(master)
    try:
        src = (EXAMPLES / "dummy_hello.py").read_text()
        assert src.count('"localhost:50052"') == 1, "the example names the daemon once"
        src = src.replace('"localhost:50052"', repr(rc.addr))
        assert "50052" not in src.replace("--port=50052", "")
        script = tmp_path / "dummy_hello.py"
        script.write_text(src)
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, (r.stderr, rc.log_text())
        assert r.stdout == "Hello from a dummy client!\n", (r.stdout, r.stderr)
        # the daemon outlives its dummy
        assert rc.alive(), rc.log_text()
    finally:
        assert rc.stop() == 0


def test_dummy_example_fails_without_a_daemon(tmp_path):
    # nothing listens on the socket of port 1: setup_dummy fails, exit != 0
    src = (EXAMPLES / "dummy_hello.py").read_text().replace('"localhost:50052"',
                                                            '"127.0.0.1:1"')
    script = tmp_path / "dummy_hello.py"
    script.write_text(src)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "setup_dummy failed" in r.stderr, (r.returncode, r.stderr)
    assert r.stdout == ""

# SPDX-License-Identifier: Apache-2.0
"""The quick-start examples (examples/hello.py, examples/p2p_hello.py,
examples/tensor_hello.py) run unchanged against a real master.  They are literal copies of the spec and
name the default ports (master localhost:50051, metadata localhost:8080);
the test rewrites exactly those two strings to the fixture's free ports and
runs the result in a fresh interpreter.
"""

import subprocess
import sys

import pytest

from helpers import EXAMPLES


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

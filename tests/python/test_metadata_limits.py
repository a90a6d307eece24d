# SPDX-License-Identifier: Apache-2.0
"""The HTTP metadata store is bounded: a value over the per-PUT limit is
413, a key over 4096 bytes is 414, and once the quota is used a PUT is 507
"metadata store is full" (logged with a rate limit) while GETs, DELETEs and
PUTs that fit after a DELETE still work.  Both daemons: the master's
embedded store (--http_metadata_max_value_size, --http_metadata_quota) and
mooncake_http_metadata_server (--max-value-size, --quota); a bad size on
the daemon's command line is refused at start.  (The Python
KVBootstrapServer is upstream's: aiohttp's 1 MiB body limit and no quota,
tested in test_metadata_server.py.)"""

import subprocess

import pytest

from helpers import Master
from test_metadata_server import Daemon, daemon_bin, req

KiB = 1024


@pytest.fixture(params=["master", "standalone"])
def port(request):
    if request.param == "master":
        d = Master(extra_args=["--http_metadata_max_value_size=64KB",
                               "--http_metadata_quota=256KB", "--log_level=warn"])
        p = d.http_port
    else:
        d = Daemon([daemon_bin(), "--max-value-size", "64KB", "--quota=256KB"])
        p = d.port
    try:
        yield p
    finally:
        d.stop()


def test_value_key_and_quota_limits(port):
    assert req(port, "PUT", "/metadata?key=big", b"v" * (65 * KiB))[0] == 413
    assert req(port, "PUT", "/metadata?key=" + "k" * 4097, b"v")[0] == 414
    assert req(port, "PUT", "/metadata?key=" + "k" * 4096, b"v")[0] == 200
    stored = []
    for i in range(16):
        st, body = req(port, "PUT", f"/metadata?key=fill{i}", b"v" * (60 * KiB))
        if st == 507:
            assert body == b"metadata store is full"
            break
        assert st == 200, (st, body)
        stored.append(i)
    assert 3 <= len(stored) <= 4, stored               # 256 KiB of 60 KiB values
    assert req(port, "GET", "/metadata?key=fill0") == (200, b"v" * (60 * KiB))
    assert req(port, "PUT", "/metadata?key=one-more", b"v" * (60 * KiB))[0] == 507
    assert req(port, "DELETE", "/metadata?key=fill0")[0] == 200
    assert req(port, "PUT", "/metadata?key=one-more", b"v" * (60 * KiB))[0] == 200


@pytest.mark.parametrize("argv", [["--quota", "0"], ["--max-value-size=lots"]])
def test_standalone_refuses_a_bad_size(argv):
    cmd = [daemon_bin()]
    r = subprocess.run(cmd + argv, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "invalid size" in r.stderr, (r.returncode, r.stderr)

# SPDX-License-Identifier: Apache-2.0
"""bench/plot.py draws the store benchmark's numbers as PNG files: from the
results store_bench.py --plot saves, and again from its JSON file."""

import json
import subprocess
import sys

import pytest

from helpers import SRCDIR

pytest.importorskip("matplotlib")
sys.path.insert(0, str(SRCDIR / "bench"))
import plot  # noqa: E402

RESULTS = {
    "title": "test",
    "rows": [
        {"size": s, "ops": 10, "put_gbps": 0.1 * i, "get_gbps": 0.2 * i, "raw_gbps": 0.3 * i,
         "memcpy_gbps": 1.0 * i, "get_p50_us": 10.0 * i, "get_p99_us": 20.0 * i,
         "get_cdf_us": [10.0 * i + q for q in range(101)]}
        for i, s in enumerate((4096, 65536, 1 << 20), start=1)
    ],
}


def _is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_draw(tmp_path):
    paths = plot.draw(RESULTS, str(tmp_path / "out"))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["store_throughput.png",
                                                     "store_latency_cdf.png"]
    for p in paths:
        assert _is_png(p)


def test_redraw_from_json(tmp_path):
    (tmp_path / "store_bench.json").write_text(json.dumps(RESULTS))
    r = subprocess.run([sys.executable, str(SRCDIR / "bench" / "plot.py"),
                        str(tmp_path / "store_bench.json")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert _is_png(tmp_path / "store_throughput.png")
    assert _is_png(tmp_path / "store_latency_cdf.png")
    r = subprocess.run([sys.executable, str(SRCDIR / "bench" / "plot.py")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr

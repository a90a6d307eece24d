# SPDX-License-Identifier: Apache-2.0
"""The first setup of a store sets glibc's mmap and trim thresholds
(mooncake._malloc): a value of up to 32 MiB that ``get`` returns comes
from the heap, and the heap keeps up to 64 MiB free for the next one
instead of handing it back to the kernel to be faulted in again.  Each case
is a fresh interpreter, since the thresholds are process-wide."""

import json
import os
import subprocess
import sys

import pytest

from helpers import MiB

# Probes glibc in a fresh process: where a malloc lands ([heap] or a
# mapping of its own), and whether the heap still spans that block once it
# is freed; 16 MiB before a setup, 24 MiB after.  (glibc raises its own
# thresholds to the size of a mapped block when it frees one: the 16 MiB
# block raises them to 16 MiB, below the second block, so only the
# setup's thresholds put that one on the heap.)
PROBE = r"""
import ctypes, json, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def heap():
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith("[heap]"):
                lo, hi = line.split()[0].split("-")
                return int(lo, 16), int(hi, 16)
    return 0, 0

def probe(size):
    p = libc.malloc(size)
    lo, hi = heap()
    in_heap = lo <= p < hi
    libc.free(p)
    return {"in_heap": in_heap, "kept": in_heap and heap()[1] >= p + size}

out = {"before": probe(16 << 20)}
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
out["rc"] = s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", sys.argv[1])
out["after"] = probe(24 << 20)
s.close()
print(json.dumps(out))
"""

_USER_VARS = ("MC_PY_MALLOC_TUNE", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
              "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")


def run_probe(master, **env):
    base = {k: v for k, v in os.environ.items() if k not in _USER_VARS}
    res = subprocess.run([sys.executable, "-c", PROBE, master.addr], env=dict(base, **env),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


def test_setup_keeps_large_values_on_the_heap(master):
    out, _ = run_probe(master)
    assert out["rc"] == 0
    # glibc's defaults: a block of its own, unmapped on free
    assert out["before"] == {"in_heap": False, "kept": False}
    assert out["after"] == {"in_heap": True, "kept": True}


def test_zero_leaves_the_allocator_alone(master):
    out, _ = run_probe(master, MC_PY_MALLOC_TUNE="0")
    assert out["rc"] == 0
    assert out["after"] == {"in_heap": False, "kept": False}


@pytest.mark.parametrize("value", ["1", ""])
def test_one_or_empty_is_the_default(master, value):
    out, _ = run_probe(master, MC_PY_MALLOC_TUNE=value)
    assert (out["rc"], out["after"]) == (0, {"in_heap": True, "kept": True})


@pytest.mark.parametrize("env", [{"MALLOC_MMAP_THRESHOLD_": str(64 * 1024)},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_thresholds_the_process_chose_are_kept(master, env):
    out, _ = run_probe(master, **env)
    assert out["rc"] == 0
    assert out["after"]["in_heap"] is False


def test_a_bad_value_refuses_setup(master):
    out, err = run_probe(master, MC_PY_MALLOC_TUNE="yes")
    assert out["rc"] == -600  # INVALID_PARAMS
    assert "MC_PY_MALLOC_TUNE" in err
    assert out["after"] == {"in_heap": False, "kept": False}


def test_gets_of_large_values_stay_correct(make_store):
    """Values on either side of the 32 MiB threshold come back whole."""
    st = make_store(segment=128 * MiB)
    for size in (1 * MiB, 31 * MiB, 33 * MiB):
        value = os.urandom(size)
        assert st.put(f"big_{size}", value) == 0
        assert st.get(f"big_{size}") == value

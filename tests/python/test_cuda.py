# SPDX-License-Identifier: Apache-2.0
"""CUDA support without a GPU: the runtime loader's no-GPU path
(MC_STORE_PIN_MEMORY_MAX_BYTES then warns once and the store works with
pageable memory), and -- with a stand-in libcudart whose "device memory"
faults on any CPU access -- segment pinning within the quota and
device-pointer register_buffer / put_from / get_into staged through host
memory.  Each case runs in its own process: the runtime is loaded once
per process."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from helpers import MiB

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def fake_cudart(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcudart")
    out = tmp_path_factory.mktemp("cudart") / "libcudart_fake.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out),
                    os.path.join(HERE, "fake_cudart.c"), "-lpthread"], check=True)
    return str(out)


def run_child(code, env_extra, timeout=60):
    env = dict(os.environ)
    for name in ("MC_STORE_PIN_MEMORY_MAX_BYTES", "MC_CUDART_PATH"):
        env.pop(name, None)
    env.update(env_extra)
    env.setdefault("MC_LOG_LEVEL", "warn")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


PRELUDE = """
    import ctypes, os, sys
    from mooncake.store import MooncakeDistributedStore as S
    MiB = 1 << 20
    s = S()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                 os.environ["T_MASTER"])
    assert rc == 0, rc
"""


def test_pin_quota_without_a_runtime_warns_once(master):
    r = run_child(PRELUDE + """
    a = s.allocate_and_mount_segment(4 * MiB, protocol="tcp", location="")
    assert a["ret"] == 0, a
    assert s.put("cuda-nogpu", b"x" * 1000) == 0 and s.get("cuda-nogpu") == b"x" * 1000
    buf = ctypes.create_string_buffer(4096)
    p = ctypes.addressof(buf)
    assert s.register_buffer(p, 4096) == 0
    assert s.get_into("cuda-nogpu", p, 4096) == 1000 and buf.raw[:1000] == b"x" * 1000
    assert s.put_from("cuda-nogpu-2", p, 1000) == 0 and s.get("cuda-nogpu-2") == b"x" * 1000
    assert s.unregister_buffer(p) == 0
    assert s.close() == 0
    print("OK")
    """, {"T_MASTER": master.addr, "MC_STORE_PIN_MEMORY_MAX_BYTES": "1GB",
          "MC_CUDART_PATH": "/nonexistent/libcudart.so"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    warns = [l for l in r.stderr.splitlines() if "MC_STORE_PIN_MEMORY_MAX_BYTES" in l]
    assert len(warns) == 1, r.stderr                    # two segments, one warning
    assert "MC_CUDART_PATH=/nonexistent/libcudart.so" in warns[0], warns


@pytest.mark.parametrize("value", ["", "0", "lots"])
def test_pin_disabled_values(master, value):
    r = run_child(PRELUDE + """
    assert s.close() == 0
    print("OK")
    """, {"T_MASTER": master.addr, "MC_STORE_PIN_MEMORY_MAX_BYTES": value,
          "MC_CUDART_PATH": "/nonexistent/libcudart.so"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    warns = [l for l in r.stderr.splitlines() if "MC_STORE_PIN_MEMORY_MAX_BYTES" in l]
    # invalid is named once; unset-like values say nothing and load nothing
    assert len(warns) == (1 if value == "lots" else 0), r.stderr


def test_no_gpu_reported_by_the_runtime(master, fake_cudart):
    r = run_child(PRELUDE + """
    assert s.close() == 0
    print("OK")
    """, {"T_MASTER": master.addr, "MC_STORE_PIN_MEMORY_MAX_BYTES": "64MB",
          "MC_CUDART_PATH": fake_cudart, "FAKE_CUDA_DEVICES": "0"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    assert "sees no GPU" in r.stderr, r.stderr


FAKE_GPU = PRELUDE + """
    lib = ctypes.CDLL(os.environ["MC_CUDART_PATH"])
    lib.fake_cuda_malloc.restype = ctypes.c_void_p
    lib.fake_cuda_malloc.argtypes = [ctypes.c_size_t]
    lib.fake_cuda_host_registered.restype = ctypes.c_size_t
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    pinned = lib.fake_cuda_host_registered()
    assert pinned == 16 * MiB, pinned                      # the setup segment
    a = s.allocate_and_mount_segment(16 * MiB, protocol="tcp", location="")
    assert a["ret"] == 0, a
    assert lib.fake_cuda_host_registered() == 16 * MiB     # over the 24 MiB quota
    b = s.allocate_and_mount_segment(8 * MiB, protocol="tcp", location="")
    assert lib.fake_cuda_host_registered() == 24 * MiB     # fits
    assert s.unmount_and_free_segment(b["segment_ids"]) == 0
    assert lib.fake_cuda_host_registered() == 16 * MiB     # unpinned on unmount

    n = 300000
    dev = lib.fake_cuda_malloc(MiB)
    payload = os.urandom(n)
    host = ctypes.create_string_buffer(payload, n)
    assert lib.cudaMemcpy(dev, host, n, 4) == 0
    # not registered yet: refused, nothing touched
    assert s.get_into("cuda-k1", dev, MiB) < 0
    assert s.register_buffer(dev, MiB) == 0
    assert s.put_from("cuda-k1", dev, n) == 0
    assert s.get("cuda-k1") == payload
    other = os.urandom(123457)
    assert s.put("cuda-k2", other) == 0
    assert s.get_into("cuda-k2", dev, MiB) == len(other)
    back = ctypes.create_string_buffer(len(other))
    assert lib.cudaMemcpy(back, dev, len(other), 4) == 0
    assert back.raw == other
    assert s.get_into("cuda-k2", dev, 1000) < 0            # too small
    assert s.get_into("cuda-missing", dev, MiB) < 0
    assert s.upsert_from("cuda-k1", dev, 10) == 0 and s.get("cuda-k1") == other[:10]
    # batch and tensor reads refuse device memory rather than touch it
    assert s.batch_get_into(["cuda-k2"], [dev], [MiB])[0] < 0
    assert s.batch_put_from(["cuda-k3"], [dev], [10])[0] != 0
    assert s.unregister_buffer(dev) == 0
    assert s.close() == 0
    assert lib.fake_cuda_host_registered() == 0, lib.fake_cuda_host_registered()
    print("OK")
"""


def test_fake_gpu_pinning_and_device_pointers(master, fake_cudart):
    r = run_child(FAKE_GPU, {"T_MASTER": master.addr, "MC_STORE_PIN_MEMORY_MAX_BYTES": "24MB",
                             "MC_CUDART_PATH": fake_cudart})
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_fake_gpu_register_failure_falls_back_with_one_warning(master, fake_cudart):
    r = run_child(PRELUDE + """
    a = s.allocate_and_mount_segment(4 * MiB, protocol="tcp", location="")
    assert a["ret"] == 0, a
    assert s.put("cuda-fb", b"y" * 10) == 0 and s.get("cuda-fb") == b"y" * 10
    assert s.close() == 0
    print("OK")
    """, {"T_MASTER": master.addr, "MC_STORE_PIN_MEMORY_MAX_BYTES": "1GB",
          "MC_CUDART_PATH": fake_cudart, "FAKE_CUDA_REGISTER_FAIL": "1"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    warns = [l for l in r.stderr.splitlines() if "cudaHostRegister" in l]
    assert len(warns) == 1, r.stderr


def test_default_runtime_lookup(master):
    """Without MC_CUDART_PATH the loader tries libcudart.so and its versioned
    names: with no library it says so, with a library and no GPU (a real
    libcudart on a machine without a driver) it says the runtime sees no GPU
    -- which also proves every symbol resolved -- and with a GPU it pins."""
    import ctypes.util
    r = run_child(PRELUDE + """
    assert s.put("cuda-default", b"z" * 10) == 0 and s.get("cuda-default") == b"z" * 10
    assert s.close() == 0
    print("OK")
    """, {"T_MASTER": master.addr, "MC_STORE_PIN_MEMORY_MAX_BYTES": "64MB"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    warns = [l for l in r.stderr.splitlines() if "MC_STORE_PIN_MEMORY_MAX_BYTES" in l]
    if ctypes.util.find_library("cudart") is None:
        assert len(warns) == 1 and "libcudart.so is not installed" in warns[0], r.stderr
    else:
        assert len(warns) <= 1, r.stderr
        assert not warns or "sees no GPU" in warns[0], r.stderr


FAKE_TENSOR_INTO = PRELUDE + """
    import torch
    lib = ctypes.CDLL(os.environ["MC_CUDART_PATH"])
    lib.fake_cuda_malloc.restype = ctypes.c_void_p
    lib.fake_cuda_malloc.argtypes = [ctypes.c_size_t]
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype = ctypes.c_void_p
    get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]

    t = torch.arange(3000, dtype=torch.float32).reshape(30, 100)
    assert s.put_tensor("ct", t) == 0
    raw = s.get("ct")                                  # header + data, as stored
    dev = lib.fake_cuda_malloc(MiB)
    # not registered: refused before a byte of the device is touched
    assert s._store.tensor_get_into(["ct"], [dev], [MiB])[0][0] < 0
    assert s.register_buffer(dev, MiB) == 0
    (cap,) = s._store.tensor_get_into(["ct"], [dev], [MiB])
    # a DLPack capsule of the tensor on CUDA device 0, viewing the buffer
    m = get_ptr(cap, b"dltensor")
    assert ctypes.c_void_p.from_address(m).value == dev + len(raw) - t.numel() * 4
    assert tuple((ctypes.c_int32 * 3).from_address(m + 8)) == (2, 0, 2), \\
        tuple((ctypes.c_int32 * 3).from_address(m + 8))   # kDLCUDA, device 0, 2 dims
    back = ctypes.create_string_buffer(len(raw))
    assert lib.cudaMemcpy(back, dev, len(raw), 4) == 0
    assert back.raw == raw                            # staged through host memory
    assert s._store.tensor_get_into(["missing"], [dev], [MiB])[0][0] < 0
    assert s._store.tensor_get_into(["ct"], [dev], [100])[0][0] < 0   # too small
    # a bool tensor has no DLPack form: its record must not be read from the device
    assert s.put_tensor("cb", torch.ones(7, dtype=torch.bool)) == 0
    assert s._store.tensor_get_into(["cb"], [dev], [MiB])[0][0] == -1012
    del cap
    assert s.unregister_buffer(dev) == 0
    assert s.close() == 0
    print("OK")
"""


def test_fake_gpu_tensor_get_into_device_buffer(master, fake_cudart):
    r = run_child(FAKE_TENSOR_INTO, {"T_MASTER": master.addr, "MC_CUDART_PATH": fake_cudart})
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout, r.stderr)

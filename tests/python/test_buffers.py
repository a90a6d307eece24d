# SPDX-License-Identifier: Apache-2.0
"""Store-owned buffers and memory helpers.

* get_buffer / batch_get_buffer return a BufferHandle implementing the
  buffer protocol for real: memoryview(h) and np.array(h, copy=False)
  share the handle's memory (a write through numpy shows in the
  memoryview), len/ptr/size agree, None for a miss, and the memory stays
  valid while the handle (or a view of it) lives, even after close().
* alloc_from_mem_pool: memory of the store's local buffer, usable by the
  zero-copy calls without register_buffer.
* MooncakeHostMemAllocator alloc/free; bind_to_numa_node.
* get_replica_desc / batch_get_replica_desc descriptor fields.
* put_from_with_metadata: the object is the metadata followed by the data.
"""

import ctypes
import ctypes.util
import gc
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from helpers import MiB

INVALID_PARAMS = -600

LEASE_TTL_MS = 2000


def key(tag: str = "buf") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


# ---- get_buffer ---------------------------------------------------------------


def test_get_buffer_shares_memory(store):
    k = key()
    data = os.urandom(MiB + 13)
    assert store.put(k, data) == 0
    h = store.get_buffer(k)
    assert h is not None
    assert len(h) == h.size() == len(data)
    assert h.ptr() != 0
    assert ctypes.string_at(h.ptr(), len(data)) == data
    mv = memoryview(h)
    assert mv.ndim == 1 and mv.nbytes == len(data)
    assert mv.format == "b"
    assert mv.tobytes() == data
    arr = np.array(h, copy=False)
    assert arr.ctypes.data == h.ptr()
    assert arr.nbytes == len(data)
    assert arr.view(np.uint8).tobytes() == data
    # a write through numpy is seen through the memoryview and the pointer
    arr[0] = 42
    arr[-1] = -7
    assert mv[0] == 42 and mv[-1] == -7
    assert ctypes.string_at(h.ptr(), 1) == bytes([42])
    # the handle is a private copy: the stored object is unchanged
    assert store.get(k) == data


def test_get_buffer_miss_is_none(store):
    assert store.get_buffer(key("missing")) is None


def test_batch_get_buffer(store):
    keys = [key("b0"), key("missing"), key("b2")]
    values = [os.urandom(100), os.urandom(70000)]
    assert store.put_batch([keys[0], keys[2]], values) == 0
    hs = store.batch_get_buffer(keys)
    assert len(hs) == 3
    assert hs[1] is None
    assert bytes(memoryview(hs[0])) == values[0]
    assert bytes(memoryview(hs[2])) == values[1]
    assert [hs[0].size(), hs[2].size()] == [100, 70000]
    assert hs[0].ptr() != hs[2].ptr()
    assert store.batch_get_buffer([]) == []


def test_handle_stays_valid_after_close(make_store):
    s = make_store()
    k = key()
    data = os.urandom(200000)
    assert s.put(k, data) == 0
    h = s.get_buffer(k)
    hs = s.batch_get_buffer([k])
    assert s.close() == 0
    assert bytes(memoryview(h)) == data
    assert np.array(h, copy=False).view(np.uint8).tobytes() == data
    assert bytes(memoryview(hs[0])) == data


def test_view_keeps_the_memory_alive_after_the_handle_is_dropped(store):
    k = key()
    data = os.urandom(50000)
    assert store.put(k, data) == 0
    h = store.get_buffer(k)
    mv = memoryview(h)
    arr = np.array(h, copy=False)
    del h
    gc.collect()
    # churn the local buffer: a freed allocation would be reused here
    for _ in range(4):
        other = store.get_buffer(k)
        del other
    assert mv.tobytes() == data
    assert arr.view(np.uint8).tobytes() == data


# ---- alloc_from_mem_pool ---------------------------------------------------------


def test_alloc_from_mem_pool_is_registered_memory(store):
    k = key()
    data = os.urandom(8000)
    assert store.put(k, data) == 0
    p = store.alloc_from_mem_pool(8192)
    assert isinstance(p, int) and p != 0
    assert store.get_into(k, p, 8192) == 8000
    assert ctypes.string_at(p, 8000) == data
    # and as the source of a zero-copy write
    k2 = key()
    ctypes.memmove(p, b"pool bytes", 10)
    assert store.put_from(k2, p, 10) == 0
    assert store.get(k2) == b"pool bytes"


def test_alloc_from_mem_pool_too_large_is_zero(store):
    # the store's local buffer is 16 MiB
    assert store.alloc_from_mem_pool(64 * MiB) == 0


# ---- MooncakeHostMemAllocator, bind_to_numa_node --------------------------------------


def test_host_mem_allocator(store):
    from mooncake.store import MooncakeHostMemAllocator

    a = MooncakeHostMemAllocator()
    size = MiB
    p = a.alloc(size)
    assert isinstance(p, int) and p != 0
    assert p % 4096 == 0
    ctypes.memset(p, 0x3C, size)
    assert ctypes.string_at(p + size - 4, 4) == b"\x3c" * 4
    # usable as registered memory
    assert store.register_buffer(p, size) == 0
    k = key()
    assert store.put_from(k, p, size) == 0
    assert store.get(k) == b"\x3c" * size
    assert store.unregister_buffer(p) == 0
    assert a.free(p) == 0
    # freeing twice, or a pointer it never returned, is an error code
    assert a.free(p) != 0
    q = a.alloc(4096)
    assert q != 0
    assert a.free(q + 8) != 0
    assert a.free(q) == 0


def _numa_present() -> bool:
    if not Path("/sys/devices/system/node/node0").exists():
        return False
    name = ctypes.util.find_library("numa")
    if not name:
        return False
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return False
    return lib.numa_available() >= 0


def _bind_in_child(node: int) -> str:
    """Call bind_to_numa_node(node) in a fresh interpreter (binding changes
    the calling thread's CPU affinity, so not in this process).  Returns
    "ok <cpus>", "rc <value>" or "exc <type>: <message>"."""
    code = (
        "import os, sys\n"
        "from mooncake.store import bind_to_numa_node\n"
        "try:\n"
        f"    r = bind_to_numa_node({node})\n"
        "except Exception as e:\n"
        "    print('exc', type(e).__name__ + ':', e); sys.exit(0)\n"
        "if r in (None, 0):\n"
        "    print('ok', ','.join(map(str, sorted(os.sched_getaffinity(0)))))\n"
        "else:\n"
        "    print('rc', r)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _cpulist(text: str) -> set:
    cpus = set()
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


def _is_clear_failure(result: str) -> bool:
    if result.startswith("rc "):
        return int(result.split()[1]) < 0
    return result.startswith("exc ") and len(result.split(":", 1)[1].strip()) > 0


def test_bind_to_numa_node_is_consistent():
    node0 = _bind_in_child(0)
    if _numa_present():
        assert node0.startswith("ok "), node0
        cpus = set(map(int, node0.split()[1].split(",")))
        allowed = _cpulist(Path("/sys/devices/system/node/node0/cpulist").read_text())
        assert cpus and cpus <= allowed, (cpus, allowed)
    else:
        assert _is_clear_failure(node0), node0
        assert "numa" in node0.lower(), node0
    # a node that does not exist always fails, never crashes
    bogus = _bind_in_child(100000)
    assert _is_clear_failure(bogus), bogus
    bogus = _bind_in_child(-1)
    assert _is_clear_failure(bogus), bogus


# ---- replica descriptors ---------------------------------------------------------------


def test_get_replica_desc_fields(store):
    from mooncake.store import ReplicaStatus

    k = key()
    data = os.urandom(12345)
    assert store.put(k, data) == 0
    descs = store.get_replica_desc(k)
    assert len(descs) == 1
    d = descs[0]
    assert d.status == ReplicaStatus.COMPLETE
    assert d.is_memory_replica() is True
    assert d.is_disk_replica() is False
    bd = d.get_memory_descriptor().buffer_descriptor
    assert bd.size_ == len(data)
    assert bd.transport_endpoint_ == store.get_hostname()
    assert bd.buffer_address_ != 0
    assert bd.protocol_ == "tcp"
    assert store.get_replica_desc(key("missing")) == []


def test_batch_get_replica_desc(store):
    keys = [key("d0"), key("d1")]
    missing = key("missing")
    assert store.put_batch(keys, [b"a" * 10, b"b" * 20]) == 0
    m = store.batch_get_replica_desc(keys + [missing])
    assert isinstance(m, dict)
    for k, size in zip(keys, (10, 20)):
        [d] = m[k]
        assert d.is_memory_replica()
        assert d.get_memory_descriptor().buffer_descriptor.size_ == size
        assert d.get_memory_descriptor().buffer_descriptor.transport_endpoint_ \
            == store.get_hostname()
    assert m.get(missing, []) == []


# ---- put_from_with_metadata ------------------------------------------------------------


def test_put_from_with_metadata_layout(store):
    data = np.random.randn(1000).astype(np.float32)
    metadata = np.array([42, 100], dtype=np.int32)
    assert store.register_buffer(data.ctypes.data, data.nbytes) == 0
    assert store.register_buffer(metadata.ctypes.data, metadata.nbytes) == 0
    try:
        k = key()
        assert store.put_from_with_metadata(k, data.ctypes.data, metadata.ctypes.data,
                                            data.nbytes, metadata.nbytes) == 0
        assert store.get_size(k) == data.nbytes + metadata.nbytes
        assert store.get(k) == metadata.tobytes() + data.tobytes()
        # unregistered metadata is refused, nothing stored
        loose = np.array([1, 2], dtype=np.int32)
        k2 = key()
        assert store.put_from_with_metadata(k2, data.ctypes.data, loose.ctypes.data,
                                            data.nbytes, loose.nbytes) == INVALID_PARAMS
        assert store.is_exist(k2) == 0
    finally:
        store.unregister_buffer(data.ctypes.data)
        store.unregister_buffer(metadata.ctypes.data)


def test_get_buffer_from_another_process(store, master, spawn_client):
    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    k1, k2 = key("remote1"), key("remote2")
    v1, v2 = os.urandom(3000), os.urandom(1)
    assert owner.call("put", key=k1, hex=v1.hex(), preferred=owner_name)["rc"] == 0
    assert owner.call("put", key=k2, hex=v2.hex(), preferred=owner_name)["rc"] == 0
    h = store.get_buffer(k1)
    assert h is not None and bytes(memoryview(h)) == v1
    hs = store.batch_get_buffer([k2, key("missing"), k1])
    assert hs[1] is None
    assert bytes(memoryview(hs[0])) == v2 and bytes(memoryview(hs[2])) == v1


# ---- huge pages for fresh get buffers -------------------------------------------


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return ""
    return text[text.index("[") + 1:text.index("]")] if "[" in text else ""


def _thp_eligible(addr: int) -> bool:
    """Whether the mapping holding @addr is marked for transparent huge
    pages (smaps' THPeligible)."""
    vma = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            vma = lo <= addr < hi
        elif vma and line.startswith("THPeligible:"):
            return line.split()[1] == "1"
    raise AssertionError(f"no mapping holds {addr:#x}")


def _payload_mid(b: bytes) -> int:
    """A 2 MiB-aligned address inside the payload of bytes @b (CPython
    keeps it inline, after the object's header)."""
    addr = id(b) + sys.getsizeof(b"") - 1
    return (addr + len(b) // 2) & ~((2 * MiB) - 1)


@pytest.mark.skipif(_thp_mode() != "madvise",
                    reason="only where huge pages are given on request (THP 'madvise') "
                           "does the request show")
def test_get_marks_a_large_fresh_buffer_for_huge_pages(master):
    """get() of 2 MiB and more asks for huge pages for the bytes it fills
    (mc_store_prepare_buffer): a fresh buffer faulted in 4 KiB pages cost
    more than its read.  The value comes back whole, and the middle of its
    buffer lies in a mapping marked for huge pages, which the same-sized
    bytes that Python made for the value is not.  In a fresh interpreter:
    values this large come from the heap once setup has set glibc's
    thresholds (mooncake._malloc), and a heap range an earlier get marked
    stays marked for whatever is allocated there next."""
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_buffers import _thp_eligible, _payload_mid\n"
        "from mooncake.store import MooncakeDistributedStore\n"
        "s = MooncakeDistributedStore()\n"
        "assert s.setup('localhost', 'P2PHANDSHAKE', 64 << 20, 16 << 20, 'tcp', '',\n"
        "               sys.argv[1]) == 0\n"
        "value = os.urandom(12 << 20)\n"
        "assert s.put('thp', value) == 0\n"
        "got = s.get('thp')\n"
        "print(got == value, _thp_eligible(_payload_mid(value)),\n"
        "      _thp_eligible(_payload_mid(got)))\n"
        "s.close()\n")
    res = subprocess.run([sys.executable, "-c", script, master.addr], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    same, value_marked, got_marked = res.stdout.split()
    assert same == "True"
    assert value_marked == "False"
    assert got_marked == "True"

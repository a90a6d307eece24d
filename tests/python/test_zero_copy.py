# SPDX-License-Identifier: Apache-2.0
"""Zero-copy calls on registered memory, in process, against a real master.

register_buffer/unregister_buffer; put_from, get_into, upsert_from; the
batch forms (batch_put_from, batch_get_into, batch_upsert_from) and the
multi-buffer forms (an object is the concatenation of several buffers, a
read scatters it back).  Every value is random and compared byte-exact.

Error shapes (upstream return conventions, upstream-semantics §5):
* memory that was never registered: an error code (INVALID_PARAMS), no
  object is created and the memory is not touched;
* a destination smaller than the object: -600, destination untouched;
* a missing key: -704;
* lists of different lengths: one -600 per key, nothing raised;
* put_from / batch_put_from of an existing key: 0, the old value stays.
"""

import os
import uuid

import numpy as np
import pytest

from helpers import MiB, read_until

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704

# A few MiB per test; leases must outlive reads on a loaded machine.
LEASE_TTL_MS = 2000


def key(tag: str = "zc") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def rand(n: int) -> bytes:
    return os.urandom(n)


def fill(arr: np.ndarray, data: bytes, offset: int = 0) -> int:
    arr[offset:offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
    return arr.ctypes.data + offset


# ---- registration -------------------------------------------------------------


def test_register_and_unregister(store):
    arr = np.zeros(64 * 1024, dtype=np.uint8)
    ptr = arr.ctypes.data
    assert store.register_buffer(ptr, arr.nbytes) == 0
    k = key()
    data = rand(1000)
    fill(arr, data)
    assert store.put_from(k, ptr, len(data)) == 0
    assert store.unregister_buffer(ptr) == 0
    # unregistering twice is an error code, not an exception or a crash
    assert store.unregister_buffer(ptr) < 0
    # once unregistered the memory is refused again
    assert store.put_from(key(), ptr, 100) == INVALID_PARAMS
    assert store.get(k) == data


def test_put_from_get_into_roundtrip(store, regbuf):
    src = regbuf(store, 3 * MiB)
    dst = regbuf(store, 3 * MiB, fill=0xEE)
    for size in (1, 4096, MiB + 7, 3 * MiB):
        k = key()
        data = rand(size)
        assert store.put_from(k, fill(src, data), size) == 0
        assert store.get_size(k) == size
        assert store.get(k) == data
        dst[:] = 0xEE
        assert store.get_into(k, dst.ctypes.data, dst.nbytes) == size
        assert dst[:size].tobytes() == data
        # bytes past the object are not written
        assert (dst[size:] == 0xEE).all()


def test_put_from_and_get_into_at_an_offset_inside_a_region(store, regbuf):
    region = regbuf(store, 1 * MiB)
    k = key()
    data = rand(5000)
    assert store.put_from(k, fill(region, data, 12345), len(data)) == 0
    assert store.get_into(k, region.ctypes.data + 500000, 5000) == 5000
    assert region[500000:505000].tobytes() == data


def test_get_into_missing_key(store, regbuf):
    dst = regbuf(store, 4096, fill=0x5A)
    assert store.get_into(key("missing"), dst.ctypes.data, dst.nbytes) == OBJECT_NOT_FOUND
    assert (dst == 0x5A).all()


def test_get_into_buffer_too_small(store, regbuf):
    src = regbuf(store, 8192)
    dst = regbuf(store, 8192, fill=0x33)
    k = key()
    assert store.put_from(k, fill(src, rand(8000)), 8000) == 0
    assert store.get_into(k, dst.ctypes.data, 7999) == INVALID_PARAMS
    assert (dst == 0x33).all()
    assert store.get_into(k, dst.ctypes.data, 8000) == 8000


def test_unregistered_source_is_refused_and_nothing_is_stored(store):
    arr = np.frombuffer(bytearray(rand(4096)), dtype=np.uint8)
    before = arr.tobytes()
    k = key()
    assert store.put_from(k, arr.ctypes.data, arr.nbytes) == INVALID_PARAMS
    assert store.is_exist(k) == 0
    assert arr.tobytes() == before
    assert store.upsert_from(k, arr.ctypes.data, arr.nbytes) == INVALID_PARAMS
    assert store.is_exist(k) == 0
    assert store.batch_put_from([k], [arr.ctypes.data], [arr.nbytes]) == [INVALID_PARAMS]
    assert store.is_exist(k) == 0


def test_unregistered_destination_is_refused_and_untouched(store, regbuf):
    src = regbuf(store, 4096)
    k = key()
    assert store.put_from(k, fill(src, rand(4096)), 4096) == 0
    dst = np.full(4096, 0x77, dtype=np.uint8)
    assert store.get_into(k, dst.ctypes.data, dst.nbytes) == INVALID_PARAMS
    assert (dst == 0x77).all()
    assert store.batch_get_into([k], [dst.ctypes.data], [dst.nbytes]) == [INVALID_PARAMS]
    assert (dst == 0x77).all()
    assert store.batch_get_into_multi_buffers([k], [[dst.ctypes.data]], [[4096]]) \
        == [INVALID_PARAMS]
    assert (dst == 0x77).all()


def test_range_running_past_the_registered_region_is_refused(store, regbuf):
    region = regbuf(store, 4096, fill=0x11)
    k = key()
    # the write would read 1 byte past the region
    assert store.put_from(k, region.ctypes.data + 1, 4096) == INVALID_PARAMS
    assert store.is_exist(k) == 0
    assert store.put_from(k, fill(region, rand(4096)), 4096) == 0
    # the read would land 1 byte past the region
    other = regbuf(store, 4096, fill=0x22)
    assert store.get_into(k, other.ctypes.data + 1, 4096) == INVALID_PARAMS
    assert (other == 0x22).all()


def test_put_from_of_an_existing_key_keeps_the_old_value(store, regbuf):
    src = regbuf(store, 8192)
    k = key()
    first, second = rand(100), rand(300)
    assert store.put_from(k, fill(src, first), 100) == 0
    assert store.put_from(k, fill(src, second, 4096), 300) == 0
    assert store.get(k) == first
    assert store.batch_put_from([k], [src.ctypes.data + 4096], [300]) == [0]
    assert store.get(k) == first


def test_zero_size_put_from_stores_nothing(store, regbuf):
    src = regbuf(store, 64)
    k = key()
    assert store.put_from(k, src.ctypes.data, 0) == 0
    assert store.is_exist(k) == 0


def test_upsert_from_replaces_the_value(store, regbuf):
    src = regbuf(store, 64 * 1024)
    dst = regbuf(store, 64 * 1024)
    k = key()
    v1, v2, v3 = rand(4096), rand(4096), rand(10000)
    assert store.upsert_from(k, fill(src, v1), len(v1)) == 0   # insert
    assert store.get(k) == v1
    assert store.upsert_from(k, fill(src, v2), len(v2)) == 0   # same size
    assert store.get_into(k, dst.ctypes.data, dst.nbytes) == len(v2)
    assert dst[:len(v2)].tobytes() == v2
    assert store.upsert_from(k, fill(src, v3), len(v3)) == 0   # new size
    assert store.get_size(k) == len(v3)
    assert store.get_into(k, dst.ctypes.data, dst.nbytes) == len(v3)
    assert dst[:len(v3)].tobytes() == v3


# ---- batch forms ----------------------------------------------------------------


def test_batch_put_from_and_batch_get_into(store, regbuf):
    n = 8
    sizes = [1 + i * 1000 for i in range(n)]
    slot = 16 * 1024
    src = regbuf(store, n * slot)
    dst = regbuf(store, n * slot, fill=0xCD)
    keys = [key(f"b{i}") for i in range(n)]
    values = [rand(s) for s in sizes]
    ptrs = [fill(src, v, i * slot) for i, v in enumerate(values)]
    assert store.batch_put_from(keys, ptrs, sizes) == [0] * n
    dptrs = [dst.ctypes.data + i * slot for i in range(n)]
    # buffers larger than the objects: each result is the object size
    assert store.batch_get_into(keys, dptrs, [slot] * n) == sizes
    for i, v in enumerate(values):
        assert dst[i * slot:i * slot + len(v)].tobytes() == v
        assert (dst[i * slot + len(v):(i + 1) * slot] == 0xCD).all()


def test_batch_get_into_per_key_errors(store, regbuf):
    src = regbuf(store, 8192)
    dst = regbuf(store, 3 * 8192, fill=0x44)
    k_ok, k_small, k_missing = key("ok"), key("small"), key("missing")
    v = rand(4096)
    assert store.batch_put_from([k_ok, k_small], [fill(src, v), src.ctypes.data],
                                [4096, 4096]) == [0, 0]
    base = dst.ctypes.data
    res = store.batch_get_into([k_ok, k_small, k_missing],
                               [base, base + 8192, base + 16384], [8192, 4095, 8192])
    assert res == [4096, INVALID_PARAMS, OBJECT_NOT_FOUND]
    assert dst[:4096].tobytes() == v
    assert (dst[8192:] == 0x44).all()


def test_batch_mismatched_lengths_give_one_invalid_params_per_key(store, regbuf):
    buf = regbuf(store, 8192)
    p = buf.ctypes.data
    keys = [key("m0"), key("m1"), key("m2")]
    assert store.batch_put_from(keys, [p, p], [10, 10, 10]) == [INVALID_PARAMS] * 3
    assert store.batch_put_from(keys, [p, p, p], [10]) == [INVALID_PARAMS] * 3
    assert store.batch_is_exist(keys) == [0, 0, 0]
    assert store.batch_get_into(keys, [p], [10, 10, 10]) == [INVALID_PARAMS] * 3
    assert store.batch_upsert_from(keys, [p, p, p], [10, 10]) == [INVALID_PARAMS] * 3
    assert store.batch_put_from_multi_buffers(keys, [[p], [p]], [[10], [10], [10]]) \
        == [INVALID_PARAMS] * 3
    assert store.batch_get_into_multi_buffers(keys, [[p], [p], [p]], [[10]]) \
        == [INVALID_PARAMS] * 3
    # the inner lists of one key disagree
    assert store.batch_put_from_multi_buffers(keys[:1], [[p, p]], [[10]]) \
        == [INVALID_PARAMS]
    assert store.batch_is_exist(keys) == [0, 0, 0]


def test_batch_flat_argument_errors(store, regbuf):
    """One buffer per key: the native layer checks every item in one pass."""
    buf = regbuf(store, 8192)
    p = buf.ctypes.data
    k_ok, k_neg, k_big = key("fa0"), key("fa1"), key("fa2")
    buf[:4096] = 0x5A
    # an address or size outside [0, 2**64-1] refuses that key only
    assert store.batch_put_from((k_ok, k_neg, k_big), (p, -1, p), (4096, 16, 1 << 64)) == \
        [0, INVALID_PARAMS, INVALID_PARAMS]
    assert store.batch_is_exist([k_ok, k_neg, k_big]) == [1, 0, 0]
    assert store.batch_get_into([k_ok, k_neg], [p + 4096, p], [4096, -5]) == \
        [4096, INVALID_PARAMS]
    assert (buf[4096:8192] == 0x5A).all()
    # wrong types raise, and nothing is written
    for bad in ([True], [1.0], ["1"], [None]):
        with pytest.raises(TypeError):
            store.batch_put_from([key("fa3")], bad, [16])
        with pytest.raises(TypeError):
            store.batch_get_into([k_ok], [p], bad)
    with pytest.raises(TypeError):
        store.batch_get_into([k_ok, 7], [p, p], [16, 16])
    with pytest.raises(TypeError):
        store.batch_get_into(k_ok, [p], [16])
    with pytest.raises(ValueError):
        store.batch_put_from(["a\0b"], [p], [16])
    assert store.batch_is_exist([key("fa3")]) == [0]
    assert store.batch_get_into([], [], []) == []


def test_batch_upsert_from(store, regbuf):
    src = regbuf(store, 64 * 1024)
    keys = [key("u0"), key("u1"), key("u2")]
    first = [rand(1000), rand(2000), rand(3000)]
    assert store.put_batch(keys[:2], first[:2]) == 0
    new = [rand(1000), rand(5000), rand(3000)]   # same size, new size, new key
    ptrs = [fill(src, v, i * 16384) for i, v in enumerate(new)]
    assert store.batch_upsert_from(keys, ptrs, [len(v) for v in new]) == [0, 0, 0]
    assert store.get_batch(keys) == new


def test_multi_buffer_put_and_get(store, regbuf):
    src = regbuf(store, 64 * 1024)
    dst = regbuf(store, 64 * 1024, fill=0x99)
    # object 0 = 3 pieces from scattered places, object 1 = 1 piece
    pieces0 = [rand(100), rand(4096), rand(7)]
    pieces1 = [rand(20000)]
    p0 = [fill(src, pieces0[0], 0), fill(src, pieces0[1], 30000), fill(src, pieces0[2], 200)]
    p1 = [fill(src, pieces1[0], 40000)]
    keys = [key("mb0"), key("mb1")]
    assert store.batch_put_from_multi_buffers(
        keys, [p0, p1], [[len(x) for x in pieces0], [len(pieces1[0])]]) == [0, 0]
    whole0, whole1 = b"".join(pieces0), pieces1[0]
    assert store.get(keys[0]) == whole0
    assert store.get(keys[1]) == whole1
    # scatter object 0 over two buffers, object 1 over three
    d = dst.ctypes.data
    res = store.batch_get_into_multi_buffers(
        keys,
        [[d, d + 10000], [d + 20000, d + 30000, d + 50000]],
        [[200, 5000], [5000, 5000, 10000]])
    # the result is the total object size
    assert res == [len(whole0), len(whole1)]
    assert dst[0:200].tobytes() == whole0[:200]
    assert dst[10000:10000 + len(whole0) - 200].tobytes() == whole0[200:]
    assert dst[20000:25000].tobytes() == whole1[:5000]
    assert dst[30000:35000].tobytes() == whole1[5000:10000]
    assert dst[50000:60000].tobytes() == whole1[10000:20000]
    # the spec's example passes a 4th positional argument
    res = store.batch_get_into_multi_buffers(keys[:1], [[d]], [[len(whole0)]], True)
    assert res == [len(whole0)]


def test_multi_buffer_get_too_small_and_missing(store, regbuf):
    src = regbuf(store, 8192)
    dst = regbuf(store, 8192, fill=0x66)
    k = key()
    assert store.batch_put_from_multi_buffers([k], [[fill(src, rand(5000))]], [[5000]]) == [0]
    d = dst.ctypes.data
    res = store.batch_get_into_multi_buffers([k, key("missing")],
                                             [[d, d + 3000], [d + 6000]],
                                             [[2000, 2999], [100]])
    assert res == [INVALID_PARAMS, OBJECT_NOT_FOUND]
    assert (dst == 0x66).all()


def test_zero_copy_across_processes(store, master, spawn_client, regbuf):
    """Every zero-copy path against replicas in another process's segment
    (reads and writes cross the transfer engine, not a local memcpy)."""
    import hashlib

    from mooncake.store import ReplicateConfig

    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    cfg = ReplicateConfig()
    cfg.preferred_segment = owner_name

    # the owner writes into its own segment; this process reads
    sizes = [1, 4096, MiB + 5]
    keys = [key(f"remote{i}") for i in range(len(sizes))]
    shas = []
    for k, size in zip(keys, sizes):
        r = owner.call("put_random", key=k, size=size, preferred=owner_name)
        assert r["rc"] == 0
        shas.append(r["sha256"])
    [d] = store.get_replica_desc(keys[2])
    assert d.get_memory_descriptor().buffer_descriptor.transport_endpoint_ == owner_name

    slot = 2 * MiB
    dst = regbuf(store, 3 * slot)
    base = dst.ctypes.data

    def sha(lo, n):
        return hashlib.sha256(dst[lo:lo + n].tobytes()).hexdigest()

    assert store.get_into(keys[2], base, slot) == sizes[2]
    assert sha(0, sizes[2]) == shas[2]
    dst[:] = 0
    assert store.batch_get_into(keys, [base + i * slot for i in range(3)], [slot] * 3) == sizes
    assert [sha(i * slot, n) for i, n in enumerate(sizes)] == shas
    dst[:] = 0
    half = sizes[2] // 2
    assert store.batch_get_into_multi_buffers(
        keys[2:], [[base + slot, base]], [[half, sizes[2] - half]]) == [sizes[2]]
    whole = dst[slot:slot + half].tobytes() + dst[:sizes[2] - half].tobytes()
    assert hashlib.sha256(whole).hexdigest() == shas[2]

    # this process writes into the owner's segment; the owner reads
    src = regbuf(store, 2 * MiB)
    src[:] = np.frombuffer(rand(2 * MiB), dtype=np.uint8)
    k1, k2, k3 = key("w1"), key("w2"), key("w3")
    assert store.put_from(k1, src.ctypes.data, MiB, cfg) == 0
    assert store.batch_put_from([k2], [src.ctypes.data + MiB], [MiB], cfg) == [0]
    assert store.batch_put_from_multi_buffers(
        [k3], [[src.ctypes.data + MiB, src.ctypes.data]], [[MiB, 1000]], cfg) == [0]
    for k, expect in ((k1, src[:MiB]), (k2, src[MiB:]),
                      (k3, np.concatenate([src[MiB:], src[:1000]]))):
        [d] = store.get_replica_desc(k)
        assert d.get_memory_descriptor().buffer_descriptor.transport_endpoint_ == owner_name
        got = owner.call("get", key=k)
        assert (got["len"], got["sha256"]) == \
            (expect.nbytes, hashlib.sha256(expect.tobytes()).hexdigest())
    # upsert_from into the owner's segment, then read it back here
    old = hashlib.sha256(src[:MiB].tobytes()).hexdigest()
    src[:MiB] = 0x5C
    assert store.upsert_from(k1, src.ctypes.data, MiB, cfg) == 0
    # the owner read k1 above: it sees the new value when its lease ends
    read_until(owner, k1, hashlib.sha256(b"\x5c" * MiB).hexdigest(), {old}, LEASE_TTL_MS)


def _refused_or_negative(fn, *args):
    """Hostile arguments: a negative code or an argument error, no crash."""
    try:
        r = fn(*args)
    except (TypeError, ValueError, OverflowError):
        return
    flat, todo = [], [r]
    while todo:
        x = todo.pop()
        if isinstance(x, list):
            todo.extend(x)
        else:
            flat.append(x)
    assert flat and all(x < 0 for x in flat), r


def test_hostile_pointers_and_sizes(store, regbuf):
    buf = regbuf(store, 4096, fill=0x31)
    p = buf.ctypes.data
    k = key()
    assert store.put_from(k, p, 4096) == 0
    for ptr, size in ((0, 16), (1, 16), (p, 2 ** 63), (p, 2 ** 64 - 1), (p + 4095, 2),
                      (2 ** 64 - 8, 16), (-p, 16), (p, -1)):
        _refused_or_negative(store.get_into, k, ptr, size)
        _refused_or_negative(store.put_from, key(), ptr, size)
        _refused_or_negative(store.batch_get_into, [k], [ptr], [size])
        _refused_or_negative(store.batch_put_from, [key()], [ptr], [size])
        _refused_or_negative(store.get_into_ranges, [ptr], [[k]], [[[0]]], [[[0]]],
                             [[[size]]])
    _refused_or_negative(store.get_into_ranges, [p], [[k]], [[[2 ** 64 - 1]]], [[[0]]],
                         [[[16]]])
    _refused_or_negative(store.get_into_ranges, [p], [[k]], [[[0]]], [[[2 ** 64 - 1]]],
                         [[[16]]])
    _refused_or_negative(store.get_into_ranges, [p], [[k]], [[[16]]], [[[0]]],
                         [[[2 ** 64 - 1]]])
    assert store.register_buffer(0, 4096) < 0
    assert store.unregister_buffer(0) < 0
    assert (buf == 0x31).all()
    assert store.get(k) == b"\x31" * 4096

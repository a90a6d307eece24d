# SPDX-License-Identifier: Apache-2.0
"""get_into_ranges: buffer-major ranged reads into registered memory.

results[i][j][k] is the number of bytes of fragment k of key j landing in
buffer i, or a negative code for that fragment alone.  Checked here:
the spec's worked example verbatim (its expected results and the bytes
that land), single slices, several fragments of one key stitched into one
buffer, several keys into one buffer, a missing key among valid ones,
destination overflow against the registered buffer, source overflow
against the object size, unregistered destinations, the store's own
local buffer as a destination, and every shape error of the nested lists;
then upstream's exact result shapes row by row (prefill INVALID_PARAMS,
one row per buffer pointer, one code per destination offset of a key
whose lists differ, INVALID_PARAMS rather than OBJECT_NOT_FOUND into a bad
buffer, room left after the buffer's start, TypeError for offsets and
sizes that are no size_t).
"""

import ctypes
import os
import uuid

import numpy as np
import pytest

from helpers import MiB, race_reads_with_reputs

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704

LEASE_TTL_MS = 2000


def key(tag: str = "r") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def leaves(x):
    """Every int inside a nested list."""
    if isinstance(x, int):
        return [x]
    out = []
    for y in x:
        out.extend(leaves(y))
    return out


def put(store, k: str, size: int) -> bytes:
    data = os.urandom(size)
    assert store.put(k, data) == 0
    return data


def test_spec_worked_example(store):
    key1 = bytes(range(40))                       # src[30:33] must exist
    key2 = bytes(range(100, 120))
    # the example uses the literal names; this module's master is private
    assert store.put("key1", key1) == 0
    assert store.put("key2", key2) == 0

    buffer_size = 32
    buffer0 = (ctypes.c_ubyte * buffer_size)()
    buffer1 = (ctypes.c_ubyte * buffer_size)()
    buffer_ptr0 = ctypes.addressof(buffer0)
    buffer_ptr1 = ctypes.addressof(buffer1)

    assert store.register_buffer(buffer_ptr0, buffer_size) == 0
    assert store.register_buffer(buffer_ptr1, buffer_size) == 0
    try:
        results = store.get_into_ranges(
            [buffer_ptr0, buffer_ptr1],
            [["key1", "key2"], ["key2", "key1"]],
            [[[0, 20], [8]], [[4], [16]]],
            [[[1, 30], [2]], [[0], [10]]],
            [[[4, 3], [5]], [[6], [4]]],
        )
        assert results == [
            [[4, 3], [5]],
            [[6], [4]],
        ]
        b0, b1 = bytes(buffer0), bytes(buffer1)
        # Buffer 0: key1 src[1:5] -> dst[0:4], src[30:33] -> dst[20:23];
        #           key2 src[2:7] -> dst[8:13]
        assert b0[0:4] == key1[1:5]
        assert b0[20:23] == key1[30:33]
        assert b0[8:13] == key2[2:7]
        untouched0 = set(range(32)) - set(range(0, 4)) - set(range(20, 23)) - set(range(8, 13))
        assert all(b0[i] == 0 for i in untouched0)
        # Buffer 1: key2 src[0:6] -> dst[4:10]; key1 src[10:14] -> dst[16:20]
        assert b1[4:10] == key2[0:6]
        assert b1[16:20] == key1[10:14]
        untouched1 = set(range(32)) - set(range(4, 10)) - set(range(16, 20))
        assert all(b1[i] == 0 for i in untouched1)
    finally:
        store.unregister_buffer(buffer_ptr0)
        store.unregister_buffer(buffer_ptr1)


def test_single_contiguous_slice(store, regbuf):
    k = key()
    data = put(store, k, 100000)
    buf = regbuf(store, 4096, fill=0xAA)
    results = store.get_into_ranges([buf.ctypes.data], [[k]], [[[0]]], [[[54321]]], [[[1000]]])
    assert results == [[[1000]]]
    assert buf[:1000].tobytes() == data[54321:55321]
    assert (buf[1000:] == 0xAA).all()


def test_fragments_of_one_key_are_stitched(store, regbuf):
    k = key()
    data = put(store, k, 10000)
    buf = regbuf(store, 64, fill=0xAA)
    results = store.get_into_ranges([buf.ctypes.data], [[k]], [[[0, 16, 40]]],
                                    [[[128, 4096, 8192]]], [[[8, 12, 4]]])
    assert results == [[[8, 12, 4]]]
    b = buf.tobytes()
    assert b[0:8] == data[128:136]
    assert b[16:28] == data[4096:4108]
    assert b[40:44] == data[8192:8196]
    assert b[8:16] == b"\xaa" * 8 and b[28:40] == b"\xaa" * 12 and b[44:] == b"\xaa" * 20


def test_several_keys_into_one_buffer_and_several_buffers(store, regbuf):
    meta, payload = key("meta"), key("data")
    m = put(store, meta, 64)
    d = put(store, payload, 1 << 20)
    out0 = regbuf(store, 8192)
    out1 = regbuf(store, 8192)
    results = store.get_into_ranges(
        [out0.ctypes.data, out1.ctypes.data],
        [[meta, payload], [payload]],
        [[[0], [64, 4096]], [[0]]],
        [[[0], [500000, 0]], [[(1 << 20) - 8192]]],
        [[[64], [4000, 4096]], [[8192]]])
    assert results == [[[64], [4000, 4096]], [[8192]]]
    assert out0[:64].tobytes() == m
    assert out0[64:4064].tobytes() == d[500000:504000]
    assert out0[4096:8192].tobytes() == d[:4096]
    assert out1.tobytes() == d[-8192:]


def test_missing_key_among_valid_ones(store, regbuf):
    k = key()
    data = put(store, k, 1000)
    missing = key("missing")
    buf = regbuf(store, 1024, fill=0x55)
    results = store.get_into_ranges([buf.ctypes.data], [[missing, k]],
                                    [[[0, 100], [500]]], [[[0, 0], [10]]],
                                    [[[10, 10], [20]]])
    assert results == [[[OBJECT_NOT_FOUND, OBJECT_NOT_FOUND], [20]]]
    assert buf[500:520].tobytes() == data[10:30]
    assert (buf[:500] == 0x55).all() and (buf[520:] == 0x55).all()


def test_destination_overflow_against_the_registered_buffer(store, regbuf):
    k = key()
    data = put(store, k, 4096)
    buf = regbuf(store, 1024, fill=0x5A)
    p = buf.ctypes.data
    results = store.get_into_ranges(
        [p, p + 1000],
        [[k], [k]],
        [[[1000, 0]], [[0, 20]]],
        [[[0, 100]], [[0, 0]]],
        [[[25, 50]], [[24, 5]]])
    # [1000, 1025) runs past the 1024-byte region; so does p+1000+[20,25)
    assert results == [[[INVALID_PARAMS, 50]], [[24, INVALID_PARAMS]]]
    assert buf[0:50].tobytes() == data[100:150]
    assert buf[1000:1024].tobytes() == data[0:24]
    assert (buf[50:1000] == 0x5A).all()


def test_source_overflow_against_the_object_size(store, regbuf):
    k = key()
    data = put(store, k, 1000)
    buf = regbuf(store, 4096, fill=0x5A)
    results = store.get_into_ranges([buf.ctypes.data], [[k]],
                                    [[[0, 100, 200]]], [[[990, 1000, 0]]],
                                    [[[11, 1, 1000]]])
    assert results == [[[INVALID_PARAMS, INVALID_PARAMS, 1000]]]
    assert buf[200:1200].tobytes() == data
    assert (buf[:200] == 0x5A).all()
    # exactly up to the end is fine
    assert store.get_into_ranges([buf.ctypes.data], [[k]], [[[0]]], [[[990]]],
                                 [[[10]]]) == [[[10]]]
    assert buf[:10].tobytes() == data[990:]


def test_unregistered_destination_is_refused_and_untouched(store):
    k = key()
    put(store, k, 100)
    buf = np.full(128, 0x42, dtype=np.uint8)
    results = store.get_into_ranges([buf.ctypes.data], [[k]], [[[0]]], [[[0]]], [[[100]]])
    assert results == [[[INVALID_PARAMS]]]
    assert (buf == 0x42).all()


def test_the_store_local_buffer_is_a_valid_destination(store):
    k = key()
    data = put(store, k, 3000)
    ptr = store.alloc_from_mem_pool(4096)
    assert ptr != 0
    results = store.get_into_ranges([ptr], [[k]], [[[0, 1000]]], [[[2000, 0]]],
                                    [[[1000, 1000]]])
    assert results == [[[1000, 1000]]]
    assert ctypes.string_at(ptr, 2000) == data[2000:3000] + data[0:1000]


# ---- shape errors ------------------------------------------------------------------


@pytest.fixture
def shaped(store, regbuf):
    k = key()
    data = put(store, k, 256)
    buf = regbuf(store, 1024, fill=0x77)
    return k, data, buf


def _untouched(buf):
    return (buf == 0x77).all()


@pytest.mark.parametrize("which", ["keys", "dst", "src", "sizes"])
def test_top_level_length_mismatch(shaped, store, which):
    k, _, buf = shaped
    p = buf.ctypes.data
    args = {
        "keys": [[k], [k]],
        "dst": [[[0]], [[100]]],
        "src": [[[0]], [[0]]],
        "sizes": [[[10]], [[10]]],
    }
    args[which] = args[which][:1]
    results = store.get_into_ranges([p, p], args["keys"], args["dst"], args["src"],
                                    args["sizes"])
    found = leaves(results)
    assert found and all(r == INVALID_PARAMS for r in found), results
    assert _untouched(buf)


def test_buffer_ptrs_shorter_than_the_lists(shaped, store):
    k, _, buf = shaped
    results = store.get_into_ranges([buf.ctypes.data], [[k], [k]], [[[0]], [[100]]],
                                    [[[0]], [[0]]], [[[10]], [[10]]])
    found = leaves(results)
    assert found and all(r == INVALID_PARAMS for r in found), results
    assert _untouched(buf)


@pytest.mark.parametrize("which", ["dst", "src", "sizes"])
def test_per_buffer_key_count_mismatch(shaped, store, which):
    """Buffer 0 lists two keys but one of its offset/size lists has one entry:
    buffer 0 fails, buffer 1 still reads."""
    k, data, buf = shaped
    p = buf.ctypes.data
    args = {
        "dst": [[[0], [50]], [[500]]],
        "src": [[[0], [0]], [[100]]],
        "sizes": [[[10], [10]], [[20]]],
    }
    args[which] = [args[which][0][:1], args[which][1]]
    results = store.get_into_ranges([p, p], [[k, k], [k]], args["dst"], args["src"],
                                    args["sizes"])
    assert len(results) == 2
    found = leaves(results[0])
    assert found and all(r == INVALID_PARAMS for r in found), results
    assert results[1] == [[20]]
    assert buf[500:520].tobytes() == data[100:120]
    assert (buf[:500] == 0x77).all()


@pytest.mark.parametrize("which", ["dst", "src", "sizes"])
def test_per_key_fragment_count_mismatch(shaped, store, which):
    """Key 0 of buffer 0 has 2 fragments in two lists and 1 in the third:
    that key's entries fail, key 1 of the same buffer still reads."""
    k, data, buf = shaped
    p = buf.ctypes.data
    args = {
        "dst": [[[0, 20], [300]]],
        "src": [[[0, 0], [50]]],
        "sizes": [[[10, 10], [30]]],
    }
    args[which] = [[args[which][0][0][:1], args[which][0][1]]]
    results = store.get_into_ranges([p], [[k, k]], args["dst"], args["src"], args["sizes"])
    assert len(results) == 1 and len(results[0]) == 2
    found = leaves(results[0][0])
    assert found and all(r == INVALID_PARAMS for r in found), results
    assert results[0][1] == [30]
    assert buf[300:330].tobytes() == data[50:80]
    assert (buf[:300] == 0x77).all()


def test_empty_request(store):
    assert store.get_into_ranges([], [], [], [], []) == []


def test_wrong_types_raise_type_error(shaped, store):
    k, _, buf = shaped
    p = buf.ctypes.data
    with pytest.raises(TypeError):
        store.get_into_ranges([p], [k], [[[0]]], [[[0]]], [[[10]]])      # keys 1-D
    with pytest.raises(TypeError):
        store.get_into_ranges([p], [[k]], [[0]], [[[0]]], [[[10]]])      # dst 2-D
    with pytest.raises(TypeError):
        store.get_into_ranges(["p"], [[k]], [[[0]]], [[[0]]], [[[10]]])  # ptr not int
    assert _untouched(buf)


def test_ranges_from_another_process(store, master, spawn_client, regbuf):
    """Fragments of objects held in another process's segment."""
    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    a = os.urandom(4096)
    b = os.urandom(3000)
    ka, kb = key("ra"), key("rb")
    assert owner.call("put", key=ka, hex=a.hex(), preferred=owner_name)["rc"] == 0
    assert owner.call("put", key=kb, hex=b.hex(), preferred=owner_name)["rc"] == 0
    [d] = store.get_replica_desc(ka)
    assert d.get_memory_descriptor().buffer_descriptor.transport_endpoint_ == owner_name
    buf = regbuf(store, 8192, fill=0xAA)
    results = store.get_into_ranges([buf.ctypes.data], [[ka, kb, ka]],
                                    [[[0, 100], [200], [5000]]],
                                    [[[4000, 0], [2990], [1]]],
                                    [[[96, 100], [10], [3000]]])
    assert results == [[[96, 100], [10], [3000]]]
    assert buf[0:96].tobytes() == a[4000:]
    assert buf[100:200].tobytes() == a[:100]
    assert buf[200:210].tobytes() == b[2990:]
    assert buf[5000:8000].tobytes() == a[1:3001]
    assert (buf[210:5000] == 0xAA).all() and (buf[8000:] == 0xAA).all()


def test_adjoining_rows_over_tcp_land_scattered(make_store, master, spawn_client, regbuf,
                                                monkeypatch):
    """Over TCP (MC_TE_SHM=0) the rows of one object that lie back to back
    go as scattered reads (one READ each stretch, its answer received
    straight into the rows' places, docs/transfer.md §6): every row lands
    at its own destination byte for byte, nothing between the rows is
    touched, and a row past the object's end is refused on its own; then
    the holder registers its memory again (a new generation), and a read
    through the stale location never delivers bytes: it is asked again."""
    monkeypatch.setenv("MC_TE_SHM", "0")
    reader = make_store(segment=0)
    owner = spawn_client("owner-tcp")
    owner_name = owner.setup(master)
    size, row = 512 * 1024, 4096
    data = os.urandom(size)
    k = key("scatter")
    assert owner.call("put", key=k, hex=data.hex(), preferred=owner_name)["rc"] == 0
    n = size // row
    src = np.arange(n, dtype=np.int64) * row           # adjoining in the object
    lens = np.full(n, row, np.int64)
    lens[n // 2] = 1                                      # a short row in a stretch
    src[9], lens[9] = size - 10, 11                       # one byte past the end: refused
    order = np.random.default_rng(7).permutation(n)       # destinations shuffled
    dst = order.astype(np.int64) * (row + 64) + 5
    buf = regbuf(reader, int(dst.max()) + row + 64, fill=0xAA)
    bufs = np.full(n, buf.ctypes.data, np.int64)
    for _ in range(2):
        buf[:] = 0xAA
        got = reader._store.read_ranges([k] * n, bufs, dst, src, lens)
        want = lens.copy()
        want[9] = INVALID_PARAMS
        assert got == want.tolist()
        for i in range(n):
            d, sr, ln = int(dst[i]), int(src[i]), int(lens[i])
            if i == 9:
                assert (buf[d:d + row + 64] == 0xAA).all()
                continue
            assert buf[d:d + ln].tobytes() == data[sr:sr + ln], f"row {i}"
            assert (buf[d + ln:d + row + 64] == 0xAA).all(), f"row {i} wrote past its end"
    # the object removed (forced: the reads left a lease) and its key put
    # again with other bytes, likely in the same place: the read must give
    # the new bytes or fail, never the old ones
    assert owner.call("remove", key=k, force=True)["rc"] == 0
    new = os.urandom(size)
    assert owner.call("put", key=k, hex=new.hex(), preferred=owner_name)["rc"] == 0
    buf[:] = 0xAA
    got = reader._store.read_ranges([k] * n, bufs, dst, src, lens)
    assert got == want.tolist()        # a read after the put sees it
    for i in range(n):
        if got[i] < 0:
            continue
        d, sr, ln = int(dst[i]), int(src[i]), int(lens[i])
        assert buf[d:d + ln].tobytes() == new[sr:sr + ln], f"row {i} has bytes of the old value"


def test_many_rows_from_another_process_flat_arrays(store, master, spawn_client, regbuf):
    """The loader's form: thousands of rows of one object held by another
    process, through the flat read_ranges with int64 arrays (no Python int
    per range), twice (the first read maps the holder's region, the second
    copies the rows as one group); edges, zero-length rows and a refused
    row among them; then the array checks."""
    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    size, row = 256 * 1024, 1000
    data = os.urandom(size)
    k = key("rows")
    assert owner.call("put", key=k, hex=data.hex(), preferred=owner_name)["rc"] == 0
    n = size // row
    src = np.arange(n, dtype=np.int64) * row
    lens = np.full(n, row, np.int64)
    lens[5] = 0
    src[-1], lens[-1] = size - 24, 24            # ends at the object's end
    src[7], lens[7] = size - 10, 11              # one byte past it: refused
    dst = np.arange(n, dtype=np.int64) * (2 * row) + 3
    buf = regbuf(store, int(dst[-1]) + 2 * row, fill=0xAA)
    bufs = np.full(n, buf.ctypes.data, np.int64)
    for packed in (0, 1):  # the results as a list, then as packed int64
        buf[:] = 0xAA
        got = store._store.read_ranges([k] * n, bufs, dst, src, lens, packed)
        if packed:
            assert isinstance(got, bytes) and len(got) == 8 * n
            got = np.frombuffer(got, np.int64).tolist()
        want = lens.copy()
        want[7] = INVALID_PARAMS
        assert got == want.tolist()
        for i in range(n):
            d, s, ln = int(dst[i]), int(src[i]), int(lens[i])
            if i in (5, 7):
                assert (buf[d:d + row] == 0xAA).all()
                continue
            assert buf[d:d + ln].tobytes() == data[s:s + ln]
            assert (buf[d + ln:d + 2 * row] == 0xAA).all()
    with pytest.raises(OverflowError):            # a negative offset
        store._store.read_ranges([k], bufs[:1], np.array([-1], np.int64), src[:1], lens[:1])
    with pytest.raises(ValueError):               # lengths differ
        store._store.read_ranges([k, k], bufs[:2], dst[:2], src[:2], lens[:1])
    with pytest.raises(TypeError):                # only 64-bit arrays, or ints
        store._store.read_ranges([k], bufs[:1], dst[:1].astype(np.int32), src[:1], lens[:1])
    assert store._store.read_ranges([k], bufs[:1].tolist(), dst[:1].tolist(),
                                    src[:1].tolist(), lens[:1].tolist()) == [row]
    assert store._store.read_ranges([], [], [], [], []) == []
    assert store._store.read_ranges([], [], [], [], [], 1) == b""
    # a failure in the packed form is the same negative status
    got = store._store.read_ranges([key("absent"), k], bufs[:2], dst[:2], src[:2], lens[:2], 1)
    assert np.frombuffer(got, np.int64).tolist() == [OBJECT_NOT_FOUND, row]


# ---- upstream's result shapes, row by row (upstream-parity-2.md §11) --------------------
#
# The result is prefilled with INVALID_PARAMS: len(buffer_ptrs) rows, row i
# len(all_keys[i]) entries (1 when absent), entry j len(all_dst_offsets[i][j])
# fragments (1 when absent).  What is never read keeps the prefill.

P = INVALID_PARAMS


def test_top_level_mismatch_has_one_row_per_buffer_pointer(shaped, store):
    k, _, buf = shaped
    p = buf.ctypes.data
    # three pointers, two of everything else: rows follow buffer_ptrs, entries
    # and fragments follow all_keys / all_dst_offsets where they exist
    r = store.get_into_ranges([p, p, p], [[k, k], [k]], [[[0, 8, 16], []], [[0]]],
                              [[[0, 0, 0], []], [[0]]], [[[1, 1, 1], []], [[1]]])
    assert r == [[[P, P, P], []], [[P]], [[P]]]
    # one pointer, two of everything else: one row
    r = store.get_into_ranges([p], [[k], [k]], [[[0, 1]], [[0]]], [[[0, 1]], [[0]]],
                              [[[1, 1]], [[1]]])
    assert r == [[[P, P]]]
    # no keys at all for a pointer: one entry of one fragment
    r = store.get_into_ranges([p, p], [], [], [], [])
    assert r == [[[P]], [[P]]]
    assert _untouched(buf)


def test_a_buffer_whose_lists_differ_keeps_the_prefill(shaped, store):
    k, data, buf = shaped
    p = buf.ctypes.data
    r = store.get_into_ranges([p, p], [[k, k], [k]],
                              [[[0, 4], [9]], [[500]]],           # buffer 0: 2 keys
                              [[[0, 0]], [[100]]],                # ... but 1 src list
                              [[[1, 1], [1]], [[20]]])
    assert r == [[[P, P], [P]], [[20]]]
    assert buf[500:520].tobytes() == data[100:120]
    assert (buf[:500] == 0x77).all()


def test_a_key_whose_lists_differ_has_one_code_per_destination_offset(shaped, store):
    k, data, buf = shaped
    p = buf.ctypes.data
    r = store.get_into_ranges([p], [[k, k, k]],
                              [[[0], [], [300]]],
                              [[[0, 1], [0], [10]]],
                              [[[1, 1], [5], [30]]])
    # dst [0] with src [0, 1]: one code; dst [] with src [0]: none; the third reads
    assert r == [[[P], [], [30]]]
    assert buf[300:330].tobytes() == data[10:40]
    assert (buf[:300] == 0x77).all()


def test_a_missing_key_is_not_found_per_fragment(shaped, store):
    k, data, buf = shaped
    p = buf.ctypes.data
    r = store.get_into_ranges([p], [[key("missing"), k]], [[[0, 9], [100]]],
                              [[[0, 0], [0]]], [[[4, 4], [4]]])
    assert r == [[[OBJECT_NOT_FOUND, OBJECT_NOT_FOUND], [4]]]
    assert buf[100:104].tobytes() == data[:4]


def test_a_missing_key_into_an_invalid_buffer_is_invalid_params(shaped, store):
    k, _, buf = shaped
    foreign = np.full(64, 0x42, dtype=np.uint8)               # never registered
    missing = key("missing")
    r = store.get_into_ranges([foreign.ctypes.data, 0, buf.ctypes.data],
                              [[missing, k], [missing], [missing]],
                              [[[0], [8]], [[0]], [[0]]], [[[0], [0]], [[0]], [[0]]],
                              [[[4], [4]], [[4]], [[4]]])
    assert r == [[[P], [P]], [[P]], [[OBJECT_NOT_FOUND]]]
    assert (foreign == 0x42).all() and _untouched(buf)


def test_destination_room_is_what_is_left_after_the_buffer_start(shaped, store):
    """Room is measured from the buffer pointer to the end of the registered
    region holding it, not from the region's start."""
    k, data, buf = shaped                                      # a 1024-byte region
    p = buf.ctypes.data
    r = store.get_into_ranges([p + 1000, p + 1000], [[k], [k]], [[[20, 21]], [[0, 24]]],
                              [[[0, 0]], [[0, 0]]], [[[4, 4]], [[24, 1]]])
    assert r == [[[4, P]], [[24, P]]]
    assert buf[1000:1024].tobytes() == data[:24]


def test_source_overflow_per_fragment(shaped, store):
    k, data, buf = shaped                                      # a 256-byte object
    p = buf.ctypes.data
    r = store.get_into_ranges([p], [[k]], [[[0, 10, 20]]], [[[250, 256, 0]]],
                              [[[7, 1, 256]]])
    assert r == [[[P, P, 256]]]
    assert buf[20:276].tobytes() == data


@pytest.mark.parametrize("bad", [-1, 1.5, "1", None, 2 ** 64])
@pytest.mark.parametrize("where", ["dst", "src", "size"])
def test_offsets_and_sizes_are_size_t(shaped, store, bad, where):
    """Offsets and sizes are upstream's size_t: a negative or non-int value
    raises TypeError (anywhere in the lists), and nothing is read."""
    k, _, buf = shaped
    p = buf.ctypes.data
    args = {"dst": [[[0, 4]]], "src": [[[0, 0]]], "size": [[[4, 4]]]}
    args[where] = [[[args[where][0][0][0], bad]]]
    with pytest.raises(TypeError):
        store.get_into_ranges([p], [[k]], args["dst"], args["src"], args["size"])
    # even in an entry whose shape is wrong (its lists differ in length), with
    # a valid entry beside it: the call raises before anything is read
    wrong = {"dst": [[[0]], [[0]]], "src": [[[0]], [[0]]], "size": [[[4]], [[4]]]}
    wrong[where] = [wrong[where][0], [[0, bad]]]
    with pytest.raises(TypeError):
        store.get_into_ranges([p, p], [[k], [k]], wrong["dst"], wrong["src"], wrong["size"])
    assert _untouched(buf)


def test_ranged_reads_ride_out_a_holder_whose_generation_moves(store, master, spawn_client,
                                                               regbuf):
    """A holder whose leased memory is freed and reused all the time (put,
    get, forced remove by another client) moves its segment's generation on
    between a lookup's answer and the read now and then; a ranged read so
    refused asks the master again, as a whole-object read does, instead of
    failing."""
    import threading

    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    churner = spawn_client("churn")
    churner.setup(master)
    value = os.urandom(64 * 1024)
    k = key("stable")
    assert owner.call("put", key=k, hex=value.hex(), preferred=owner_name)["rc"] == 0
    buf = regbuf(store, len(value))
    half = len(value) // 2
    done = {}

    def churn():
        done["r"] = churner.call("hammer", key=key("churn"), action="churn",
                                 hex=os.urandom(4096).hex(), preferred=owner_name,
                                 seconds=4.0, timeout=60)

    t = threading.Thread(target=churn)
    t.start()
    reads, failed = 0, []
    while t.is_alive():
        buf[:] = 0
        res = store.get_into_ranges([buf.ctypes.data], [[k]], [[[half, 0]]], [[[0, half]]],
                                    [[[half, len(value) - half]]])
        reads += 1
        if res != [[[half, len(value) - half]]]:
            failed.append(res)
        elif buf.tobytes() != value[half:] + value[:half]:
            failed.append("wrong bytes")
    t.join()
    assert done["r"]["bad"] == [] and done["r"]["n"] > 50, done["r"]
    assert reads > 50 and not failed, (
        f"{len(failed)} of {reads} ranged reads failed while the holder's memory was "
        f"reused: {failed[:5]}")


def test_flat_ranges_with_a_key_index(store, regbuf):
    """read_ranges(..., key_index): each key listed once, range i reading
    keys[key_index[i]] -- the same results and bytes as one key per
    range, in both result forms; an index past the keys is IndexError and
    one of another length ValueError, before anything is read."""
    ka, kb = key("ia"), key("ib")
    a, b = put(store, ka, 8192), put(store, kb, 4096)
    n = 12
    kidx = np.array([0, 1] * (n // 2), np.int64)
    src = np.arange(n, dtype=np.int64) * 256
    lens = np.full(n, 200, np.int64)
    lens[3] = 0
    src[5] = 4000                                   # past kb's end: refused alone
    dst = np.arange(n, dtype=np.int64) * 300
    buf = regbuf(store, n * 300, fill=0xAA)
    bufs = np.full(n, buf.ctypes.data, np.int64)
    want = lens.copy()
    want[5] = INVALID_PARAMS
    got = {}
    for form in ("keys", "index", "index-packed", "index-list"):
        buf[:] = 0xAA
        if form == "keys":
            r = store._store.read_ranges([[ka, kb][i] for i in kidx], bufs, dst, src, lens)
        elif form == "index":
            r = store._store.read_ranges([ka, kb], bufs, dst, src, lens, 0, kidx)
        elif form == "index-packed":
            r = np.frombuffer(store._store.read_ranges([ka, kb], bufs, dst, src, lens, 1, kidx),
                              np.int64).tolist()
        else:
            r = store._store.read_ranges([ka, kb], bufs, dst, src, lens, 0, kidx.tolist())
        assert r == want.tolist(), form
        got[form] = buf.tobytes()
        for i in range(n):
            d, s, ln = int(dst[i]), int(src[i]), int(lens[i])
            if i != 5:
                assert buf[d:d + ln].tobytes() == (a if kidx[i] == 0 else b)[s:s + ln], (form, i)
    assert len(set(got.values())) == 1
    buf[:] = 0xAA
    with pytest.raises(IndexError):
        store._store.read_ranges([ka, kb], bufs, dst, src, lens, 1, np.full(n, 2, np.int64))
    with pytest.raises(ValueError):
        store._store.read_ranges([ka, kb], bufs, dst, src, lens, 1, kidx[:-1])
    with pytest.raises(OverflowError):
        store._store.read_ranges([ka, kb], bufs, dst, src, lens, 1, -kidx - 1)
    assert (buf == 0xAA).all()
    assert store._store.read_ranges([], [], [], [], [], 1, np.zeros(0, np.int64)) == b""


def test_tcp_ranged_read_of_whole_values_and_rows_while_keys_are_put_again(
        make_store, regbuf, monkeypatch):
    """Over TCP a ranged read sends the ranges that are whole objects as a
    job of their own before it groups the rows of the others into gathered
    reads (READV) of a second job.  While the holder removes (forced) and
    puts again every key with new bytes, as fast as it can -- the memory
    reused by other keys under new generations -- each key of each read
    either has every one of its ranges read from one version of it, byte
    for byte, or fails as a whole; nothing lands outside the ranges'
    destinations.  (With the whole values' job naming no generation this
    fails within a second here: stale locations are read.)"""
    monkeypatch.setenv("MC_TE_SHM", "0")
    holder = make_store(segment=48 * MiB)  # this process, its own engine: reached by TCP
    reader = make_store(segment=0)
    # many whole values, so that the last of them go out well after the
    # lookup (the window in which a stale location would be read)
    whole, rows, row = [key("w") for _ in range(24)], [key("ra"), key("rb")], 1024
    size, wsize = 128 * 1024, 512 * 1024
    nrow = size // row
    keys = whole + rows
    # whole objects side by side, then the two row objects' rows
    # interleaved: target row r is rows r of ra and of rb (a TP=2 row of
    # two TP=4 column blocks), with a guard gap after every whole value
    kidx, dst, src, lens = [], [], [], []
    for i in range(len(whole)):
        kidx.append(i), dst.append(i * (wsize + 64)), src.append(0), lens.append(wsize)
    base = len(whole) * (wsize + 64)
    for r in range(nrow):
        for j in range(2):
            kidx.append(len(whole) + j), dst.append(base + r * 2 * row + j * row)
            src.append(r * row), lens.append(row)
    kidx, dst, src, lens = (np.array(c, np.int64) for c in (kidx, dst, src, lens))
    buf = regbuf(reader, base + nrow * 2 * row + 64, fill=0xAA)
    bufs = np.full(len(kidx), buf.ctypes.data, np.int64)
    covered = np.zeros(len(buf), bool)
    for d, ln in zip(dst.tolist(), lens.tolist()):
        covered[d:d + ln] = True
    mine = [np.flatnonzero(kidx == j) for j in range(len(keys))]

    def read_once():
        buf[:] = 0xAA
        res = np.frombuffer(reader._store.read_ranges(keys, bufs, dst, src, lens, 1, kidx),
                            np.int64)
        return res, ("bytes outside the ranges' destinations"
                     if (buf[~covered] != 0xAA).any() else None)

    def judge(j, res, known):
        r = res[mine[j]]
        if (r < 0).all():
            return "failed"
        if not (r == lens[mine[j]]).all():
            return f"some ranges read, others not: {sorted(set(r.tolist()))}"
        got = [buf[d:d + ln].tobytes() for d, ln in zip(dst[mine[j]].tolist(),
                                                       lens[mine[j]].tolist())]
        if not any(all(g == v[s:s + len(g)] for g, s in zip(got, src[mine[j]].tolist()))
                   for v in known):
            return "bytes of no single version of it"
        return None

    race_reads_with_reputs(holder, keys, lambda k: wsize if k in whole else size, read_once,
                           judge)

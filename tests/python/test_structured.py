# SPDX-License-Identifier: Apache-2.0
"""mooncake.structured_object_store against a real master and real clients:
the public surface, round trips of every numpy dtype (0-length, 0-d,
non-contiguous, bytes and ragged-row members), member selection and
slices (edges, errors, and the bytes a slice moves, counted by the
client's transfer statistics), materialize_into, the three copy modes
(told apart by the client's request counters), chunked payloads, a reader
in another process, failed writes leaving nothing behind, rejected
manifests, bundles and their removal (partial failure reported by
member), and the native gather copy."""
import copy
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import MiB, wait_until
from test_client_http import http_store, metrics

from mooncake.store import ErrorCode
from mooncake import structured_object_store as sos
from mooncake.structured_object_store import (
    BundleRemoveError, BundleTransferPolicy, MooncakeBundleTransfer, RemoteBundleRef,
    StructuredManifestError, StructuredMemberSlice, StructuredObjectError,
    StructuredObjectPayload, StructuredObjectReadError, StructuredObjectReadSpec,
    StructuredObjectResult, StructuredObjectWriteError, tensor_object_buffer)
from mooncake._fast_copy import concat_arrays_into

# tens of MiB per test on a loaded machine: leases must outlive the reads
LEASE_TTL_MS = 5000

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128]
_FAIL = int(ErrorCode.NO_AVAILABLE_HANDLE)


@pytest.fixture
def served(master):
    """A store with the client HTTP server (its metrics count requests and bytes)."""
    s, port = http_store(master, segment=160 * MiB)
    yield s, port
    s.close()


@pytest.fixture
def transfer(store):
    return MooncakeBundleTransfer(store, key_prefix="t/structured")


def sample(rng, dtype, shape):
    return np.asarray(_sample(rng, dtype, shape))


def _sample(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def roundtrip(transfer, buffers, metadata=None, **kw):
    ref = transfer.put_structured_object(StructuredObjectPayload(metadata, buffers), **kw)
    return ref, transfer.materialize(transfer.read_spec(ref))


def assert_same(got, want):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == bytes(want)


class FlakyStore:
    """A real store whose writes or removals of chosen keys fail."""

    def __init__(self, real, fail_put=lambda k: False, fail_remove=lambda k: False):
        self._real = real
        self._fail_put, self._fail_remove = fail_put, fail_remove
        self.attempted = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def put(self, key, value, config=None):
        self.attempted.append(key)
        return _FAIL if self._fail_put(key) else self._real.put(key, value, config)

    def put_tensor(self, key, tensor):
        self.attempted.append(key)
        return _FAIL if self._fail_put(key) else self._real.put_tensor(key, tensor)

    def pub_tensor(self, key, tensor, config=None):
        self.attempted.append(key)
        return _FAIL if self._fail_put(key) else self._real.pub_tensor(key, tensor, config)

    def batch_put_from(self, keys, ptrs, sizes, config=None):
        self.attempted.extend(keys)
        real = self._real.batch_put_from(
            [k for k in keys if not self._fail_put(k)],
            [p for k, p in zip(keys, ptrs) if not self._fail_put(k)],
            [z for k, z in zip(keys, sizes) if not self._fail_put(k)], config)
        it = iter(real)
        return [_FAIL if self._fail_put(k) else next(it) for k in keys]

    def batch_put_parts(self, keys, all_parts, config=None):
        self.attempted.extend(keys)
        real = self._real.batch_put_parts(
            [k for k in keys if not self._fail_put(k)],
            [p for k, p in zip(keys, all_parts) if not self._fail_put(k)], config)
        it = iter(real)
        return [_FAIL if self._fail_put(k) else next(it) for k in keys]

    def batch_put_parts_commit(self, keys, all_parts, config=None):
        """The real commit batch, with each key to fail really failing: an
        object of another writer sits there during the call (the batch
        then refuses it as OBJECT_ALREADY_EXISTS and commits nothing)."""
        self.attempted.extend(keys)
        blockers = [k for k in keys if self._fail_put(k)]
        for k in blockers:
            assert self._real.put(k, b"another writer's object") == 0
        try:
            rcs = self._real.batch_put_parts_commit(keys, all_parts, config)
        finally:
            for k in blockers:
                self._real.remove(k, True)
        return [_FAIL if self._fail_put(k) else rc for k, rc in zip(keys, rcs)]

    def remove(self, key, force=False):
        return _FAIL if self._fail_remove(key) else self._real.remove(key, force)

    def batch_remove(self, keys, force=False):
        return [self.remove(k, force) for k in keys]


# ---- surface --------------------------------------------------------------------------------

def test_public_surface_and_argument_checks(store):
    assert sos.DEFAULT_BUNDLE_CHUNK_BYTES == 64 * MiB
    assert sos.STRUCTURED_FIELD_SPECS_KEY == "__mooncake_structured_fields__"
    assert BundleTransferPolicy() == BundleTransferPolicy(1, "auto", "auto")
    # as upstream, a policy is checked when a put uses it
    bad_policies = [({"copy_mode": "fast"}, "unsupported copy_mode: fast"),
                    ({"put_mode": "x"}, "unsupported put_mode: x"),
                    ({"max_inflight_put": 0}, "max_inflight_put must be positive")]
    t0 = MooncakeBundleTransfer(store, key_prefix="t/policy")
    for bad, msg in bad_policies:
        policy = BundleTransferPolicy(**bad)
        with pytest.raises(ValueError, match=msg):
            t0.put_structured_object(StructuredObjectPayload(buffers={"x": b"1"}),
                                     policy=policy)
    with pytest.raises(TypeError, match="requires buffers"):
        StructuredObjectPayload({"a": 1})
    assert StructuredObjectPayload(buffers={}).metadata == {}
    for bad in ("", "/", "a\nb"):
        with pytest.raises(ValueError):
            MooncakeBundleTransfer(store, key_prefix=bad)
    with pytest.raises(ValueError):
        MooncakeBundleTransfer(store, default_chunk_bytes=0)
    with pytest.raises(TypeError):
        MooncakeBundleTransfer(object())
    t = MooncakeBundleTransfer(store, key_prefix="/p/q/")
    assert t.key_prefix == "p/q"
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"x": b"1"}), partition="pa")
    assert re.fullmatch(r"p/q/pa/[0-9a-f]{32}/manifest", ref.manifest_key)
    base = ref.manifest_key[:-len("/manifest")]
    m = ref.manifest
    assert m["version"] == 1 and m["layout"] == "bundle"
    assert m["object_id"] == base[len("p/q/"):]
    assert m["meta"]["key"] == base + "/meta"
    assert m["buffers"]["x"]["key"] == base + "/buffer/x"
    assert store.is_exist(ref.manifest_key) == 1
    for bad_name in ("a/b", "", "c\x01"):
        with pytest.raises(ValueError):
            t.put_structured_object(StructuredObjectPayload(buffers={bad_name: b"1"}))
    with pytest.raises(ValueError):
        t.put_structured_object(StructuredObjectPayload(buffers={"x": b"1"}), partition="a/b")
    with pytest.raises(TypeError, match="JSON"):
        t.put_structured_object(StructuredObjectPayload({"f": object()}, {"x": b"1"}))
    with pytest.raises(ValueError, match="reserved"):
        t.put_structured_object(StructuredObjectPayload(
            {sos.STRUCTURED_FIELD_SPECS_KEY: 1}, {"x": b"1"}))
    with pytest.raises(TypeError, match="x must be bytes-like, got int"):
        t.put_structured_object(StructuredObjectPayload(buffers={"x": 3}))
    with pytest.raises(TypeError, match="not a plain numeric"):
        t.put_structured_object(StructuredObjectPayload(buffers={"x": np.array(["a"])}))
    spec = t.read_spec(ref)
    assert isinstance(spec, StructuredObjectReadSpec)
    assert spec.select_members(["x"]).member_names == ("x",)
    assert spec.slice_member("x", 0, 1, 2).member_slice("x") == StructuredMemberSlice(0, 1, 2)
    assert spec.member_slice("x") is None
    with pytest.raises(ValueError):
        spec.slice_member("x", 0, 0, 1, step=0)
    with pytest.raises(TypeError):
        spec.slice_member("x", 0, 1)  # start and end are required


def test_spec_example_round_trip(transfer):
    payload = StructuredObjectPayload(
        metadata={"step": 7, "layout": "rollout"},
        buffers={"tokens": np.array(range(24), dtype=np.int32).reshape(6, 4),
                 "mask": np.ones((6, 4), dtype=np.int8),
                 "prompt_ids": b"sample-ids"})
    ref = transfer.put_structured_object(payload)
    result = transfer.materialize(transfer.read_spec(ref))
    assert isinstance(result, StructuredObjectResult)
    # as upstream, the metadata comes back whole: layout and field specs too
    fields = result.metadata.pop(sos.STRUCTURED_FIELD_SPECS_KEY)
    assert result.metadata == {"step": 7, "layout": "rollout"}
    assert fields["tokens"] == {"encoding": "ndarray", "dtype": "<i4", "shape": [6, 4]}
    assert fields["prompt_ids"] == {"encoding": "bytes"}
    assert_same(result.objects["tokens"], payload.buffers["tokens"])
    assert_same(result.objects["mask"], payload.buffers["mask"])
    assert result.objects["prompt_ids"] == b"sample-ids"
    # the default layout name
    _, r = roundtrip(transfer, {"a": b"x"}, {"k": [1, 2]})
    assert r.metadata == {"k": [1, 2], "layout": "structured",
                          sos.STRUCTURED_FIELD_SPECS_KEY: {"a": {"encoding": "bytes"}}}


def test_put_object_and_get_object(transfer):
    arr = np.arange(12, dtype=np.int16).reshape(3, 4)
    ref = transfer.put_object(arr)
    assert_same(transfer.get_object(ref), arr)
    assert transfer.get_object(transfer.put_object(b"raw")) == b"raw"
    got = transfer.get_object(transfer.put_object({"a": arr, "b": b"x"}, partition="objs"))
    assert set(got) == {"a", "b"} and got["b"] == b"x"
    assert_same(got["a"], arr)
    with pytest.raises(TypeError):
        transfer.put_object(object())


# ---- members --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["auto", "copy"])
def test_every_dtype_and_shape(transfer, mode):
    rng = np.random.default_rng(1)
    buffers = {}
    for dt in DTYPES:
        name = np.dtype(dt).name
        buffers[name] = sample(rng, dt, (5, 3))
        buffers[name + "_0d"] = sample(rng, dt, ())
        buffers[name + "_empty"] = np.empty((0, 3), dtype=dt)
        # in place in auto mode (at least 1 MiB)
        buffers[name + "_big"] = sample(rng, dt, (MiB // np.dtype(dt).itemsize,))
    _, r = roundtrip(transfer, buffers, policy=BundleTransferPolicy(copy_mode=mode))
    assert set(r.objects) == set(buffers)
    for name, want in buffers.items():
        assert_same(r.objects[name], want)
    # the other byte order survives as well
    be = np.arange(10, dtype=">i4")
    _, r = roundtrip(transfer, {"be": be})
    assert r.objects["be"].dtype == np.dtype(">i4") and np.array_equal(r.objects["be"], be)


def test_zero_length_members(transfer, store):
    bufs = {"empty_bytes": b"", "empty_arr": np.empty((0,), np.float32),
            "empty_2d": np.zeros((4, 0), np.int64)}
    ref, r = roundtrip(transfer, bufs)
    for name, spec in ref.manifest["buffers"].items():
        assert spec["bytes"] == 0 and spec["chunks"] == [], name
        assert store.is_exist(spec["key"]) == 0  # nothing stored for 0 bytes
    assert r.objects["empty_bytes"] == b""
    assert r.objects["empty_2d"].shape == (4, 0)
    out = transfer.materialize_into(transfer.read_spec(ref).select_members(["empty_arr"]),
                                    {"empty_arr": np.empty(0, np.float32)})
    assert out.objects["empty_arr"].shape == (0,)


@pytest.mark.parametrize("mode", ["auto", "copy"])
def test_non_contiguous_members(transfer, mode):
    base = np.arange(4 * 6 * 1024, dtype=np.float64).reshape(4, 6, 1024)
    bufs = {"strided": base[:, ::2, :], "fortran": np.asfortranarray(base[0]),
            "transposed": base[1].T, "reversed": base[::-1, :, ::-3],
            "view_bytes": memoryview(b"abcdefgh")[::2]}
    for v in list(bufs.values())[:4]:
        assert not v.flags.c_contiguous
    _, r = roundtrip(transfer, bufs, policy=BundleTransferPolicy(copy_mode=mode))
    for name in ("strided", "fortran", "transposed", "reversed"):
        assert_same(r.objects[name], bufs[name])
    assert r.objects["view_bytes"] == b"aceg"


def test_bytes_members(transfer):
    big = os.urandom(3 * MiB)
    bufs = {"b": b"hello", "ba": bytearray(b"\x00\xff" * 1000), "mv": memoryview(big),
            "arr_as_bytes": memoryview(np.arange(8, dtype=np.int32))}
    _, r = roundtrip(transfer, bufs)
    assert r.objects["b"] == b"hello"
    assert r.objects["ba"] == bytes(bufs["ba"])
    assert r.objects["mv"] == big
    assert r.objects["arr_as_bytes"] == np.arange(8, dtype=np.int32).tobytes()
    assert all(type(v) is bytes for v in r.objects.values())


def test_list_members_are_refused_as_upstream(transfer):
    """A list of arrays is not a member (upstream: "<name> must be
    bytes-like, got list"); ragged rows are a DataProto non-tensor field
    (test_dataproto.py)."""
    rows = [np.arange(3), np.arange(4)]
    with pytest.raises(TypeError, match="rows must be bytes-like, got list"):
        transfer.put_structured_object(StructuredObjectPayload(buffers={"rows": rows}))
    with pytest.raises(TypeError, match="must be bytes-like, got tuple"):
        transfer.put_object({"r": tuple(rows)})


# ---- partial reads --------------------------------------------------------------------------

def test_select_and_slice_edges(transfer):
    tokens = np.arange(60, dtype=np.int32).reshape(10, 6)
    ref = transfer.put_structured_object(StructuredObjectPayload(
        buffers={"tokens": tokens, "ids": b"ids", "mask": np.ones(10, bool)}))
    spec = transfer.read_spec(ref)
    r = transfer.materialize(spec.select_members(["tokens"]))
    assert list(r.objects) == ["tokens"]
    cases = [(0, 10, 1), (0, 3, 1), (7, 10, 1), (4, 4, 1), (0, 0, 1), (10, 10, 1),
             (1, 9, 3), (0, 10, 4)]
    for start, end, step in cases:
        got = transfer.materialize(spec.select_members(["tokens"]).slice_member(
            "tokens", axis=0, start=start, end=end, step=step)).objects["tokens"]
        assert_same(got, tokens[start:end:step])
    got = transfer.materialize(spec.slice_member("tokens", axis=1, start=2, end=5))
    assert_same(got.objects["tokens"], tokens[:, 2:5])
    assert got.objects["ids"] == b"ids"  # unsliced members come whole
    for start, end in ((0, 11), (-1, 3), (5, 4), (11, 11)):
        with pytest.raises(ValueError, match="out of range"):
            transfer.materialize(spec.slice_member("tokens", 0, start, end))
    with pytest.raises(ValueError, match="axis"):
        transfer.materialize(spec.slice_member("tokens", 2, 0, 1))
    with pytest.raises(ValueError, match="bytes member ids does not support slicing"):
        transfer.materialize(spec.slice_member("ids", 0, 0, 1))
    with pytest.raises(ValueError, match="not selected"):
        transfer.materialize(spec.select_members(["mask"]).slice_member("tokens", 0, 0, 1))
    with pytest.raises(KeyError, match=r"unknown bundle buffers: \['nope'\]"):
        transfer.materialize(spec.select_members(["nope"]))
    with pytest.raises(ValueError, match="selected no members"):
        transfer.materialize(spec.select_members([]))


def test_slice_moves_only_its_bytes(served):
    """Reading 1 % of a 64 MiB member moves about 1 % of its bytes: the
    client's read_bytes counter (transfer statistics) says so."""
    s, port = served
    t = MooncakeBundleTransfer(s, key_prefix="t/slice")
    rows, width = 16384, 1024  # float32: 4 KiB rows, 64 MiB
    data = np.random.default_rng(5).random((rows, width), dtype=np.float32)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"x": data}),
                                  chunk_bytes=16 * MiB)
    assert len(ref.manifest["buffers"]["x"]["chunks"]) == 4
    spec = t.read_spec(ref)  # manifest fetched and checked here
    # 1 % of the rows, across the boundary of chunks 0 and 1
    start = 4096 - 80
    end = start + rows // 100
    before = metrics(port)
    got = t.materialize(spec.slice_member("x", 0, start, end)).objects["x"]
    moved = metrics(port)["mooncake_transfer_read_bytes"] - before["mooncake_transfer_read_bytes"]
    assert_same(got, data[start:end])
    want = (end - start) * width * 4
    meta_bytes = ref.manifest["meta"]["bytes"]
    assert want <= moved <= want + meta_bytes, (moved, want)
    assert moved < data.nbytes // 50
    # the whole member, for contrast
    before = metrics(port)
    t.materialize(spec)
    moved = metrics(port)["mooncake_transfer_read_bytes"] - before["mooncake_transfer_read_bytes"]
    assert moved >= data.nbytes


def test_materialize_into(transfer):
    tokens = np.arange(24, dtype=np.int32).reshape(6, 4)
    ref = transfer.put_structured_object(StructuredObjectPayload(
        buffers={"tokens": tokens, "ids": b"x", "f": np.ones(3, np.float64)}))
    spec = transfer.read_spec(ref).select_members(["tokens"]).slice_member(
        "tokens", axis=0, start=2, end=5)
    destination = np.empty((3, 4), dtype=np.int32)
    result = transfer.materialize_into(spec, {"tokens": destination})
    assert result.objects["tokens"] is destination
    assert np.array_equal(destination, tokens[2:5])
    # whole member, step > 1, and members without a destination come as new objects
    whole = np.zeros((6, 4), np.int32)
    r = transfer.materialize_into(transfer.read_spec(ref), {"tokens": whole})
    assert r.objects["tokens"] is whole and np.array_equal(whole, tokens)
    assert r.objects["ids"] == b"x"
    stepped = np.zeros((2, 4), np.int32)
    r = transfer.materialize_into(transfer.read_spec(ref).slice_member("tokens", 0, 0, 4, 2),
                                  {"tokens": stepped})
    assert r.objects["tokens"] is stepped and np.array_equal(stepped, tokens[0:4:2])
    full = transfer.read_spec(ref)
    sentinel = np.full((3, 4), -1, np.int32)
    refusals = [
        ({"tokens": np.empty((3, 4), np.int64)}, spec, "int64"),
        ({"tokens": np.empty((4, 4), np.int32)}, spec, r"\[4, 4\]"),
        ({"tokens": np.empty((6, 4), np.int32)[:, ::2]}, full, "is int32"),
        ({"tokens": np.empty((4, 6), np.int32).T}, full, "C-contiguous"),
        ({"ids": bytearray(1)}, full, "does not support materialize_into"),
        ({"ids": np.empty(1, np.uint8)}, full, "does not support materialize_into"),
        ({"f": sentinel}, spec, "not selected"),
        ({"tokens": [1, 2]}, spec, "must be an ndarray"),
    ]
    for dests, sp, msg in refusals:
        with pytest.raises(ValueError, match=msg):
            transfer.materialize_into(sp, dests)
    assert (sentinel == -1).all()
    ro = np.empty((3, 4), np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        transfer.materialize_into(spec, {"tokens": ro})


def test_raw_destinations(transfer, store):
    from mooncake.buffer_pool import BufferPool
    from mooncake.structured_object_store import raw_destination

    tokens = np.arange(4000, dtype=np.float64).reshape(1000, 4)
    ref = transfer.put_structured_object(StructuredObjectPayload(buffers={"t": tokens}))
    spec = transfer.read_spec(ref).slice_member("t", 0, 100, 300)
    with BufferPool(store) as pool:
        lease = pool.acquire(200 * 4 * 8 + 100)
        got = transfer.materialize_into(
            spec, {"t": raw_destination(lease.ptr, lease.size, lease, pre_registered=True)})
        arr = got.objects["t"]
        assert arr.ctypes.data == lease.ptr and np.array_equal(arr, tokens[100:300])
        assert bytes(lease.buffer[:32]) == tokens[100].tobytes()
        with pytest.raises(ValueError, match="needs 6400"):
            transfer.materialize_into(spec, {"t": raw_destination(lease.ptr, 6399)})
        del arr, got
        lease.release()
    # plain memory, registered for the call
    mem = np.zeros(8 * 4000, np.uint8)
    got = transfer.materialize_into(transfer.read_spec(ref),
                                    {"t": raw_destination(mem.ctypes.data, mem.nbytes, mem)})
    assert np.array_equal(mem.view(np.float64).reshape(1000, 4), tokens)
    assert got.objects["t"].base is not None
    with pytest.raises(ValueError):
        raw_destination(0, 10)


def test_pool_backed_results_are_released(store):
    t = MooncakeBundleTransfer(store, key_prefix="t/pool")
    big = np.arange(2 * MiB, dtype=np.uint8)
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"big": big}))
    r = t.materialize(t.read_spec(ref))
    pool = t._buffer_pool()
    assert pool.active_leases == 1  # the result lives in the store's local buffer
    assert np.array_equal(r.objects["big"], big)
    t.release_result(r)
    assert pool.active_leases == 0
    r = t.materialize(t.read_spec(ref))
    view = r.objects["big"][10:20]
    del r
    assert pool.active_leases == 1 and view[0] == 10  # a view keeps the memory alive
    del view
    assert pool.active_leases == 0


# ---- copy modes -----------------------------------------------------------------------------

def _delta(port, before):
    after = metrics(port)
    return {k: after[k] - before.get(k, 0) for k in after}


def test_copy_modes_take_their_paths(served):
    s, port = served
    t = MooncakeBundleTransfer(s, key_prefix="t/modes")
    payload = StructuredObjectPayload(buffers={"small": np.arange(100, dtype=np.int16),
                                               "big": np.ones(2 * MiB, np.uint8),
                                               "b": b"bytes"})
    # copy: every payload through put (meta, 3 members, manifest)
    before = metrics(port)
    ref = t.put_structured_object(payload, policy=BundleTransferPolicy(copy_mode="copy"))
    d = _delta(port, before)
    assert d["mooncake_client_put_requests_total"] == 5
    assert d["mooncake_client_batch_put_requests_total"] == 0
    assert_same(t.materialize(t.read_spec(ref)).objects["big"], payload.buffers["big"])
    # auto: meta and manifest by put, members by batch_put_from (staged or in place)
    before = metrics(port)
    ref = t.put_structured_object(payload)
    d = _delta(port, before)
    assert d["mooncake_client_put_requests_total"] == 2
    assert d["mooncake_client_batch_put_items_total"] == 3
    assert d["mooncake_transfer_write_bytes"] >= 2 * MiB + 200 + 5
    r = t.materialize(t.read_spec(ref))
    assert_same(r.objects["small"], payload.buffers["small"])
    # zero_copy refuses plain members before writing anything
    before = metrics(port)
    with pytest.raises(RuntimeError, match="zero-copy put requires tensor-object buffers"):
        t.put_structured_object(payload, policy=BundleTransferPolicy(copy_mode="zero_copy"))
    d = _delta(port, before)
    assert d["mooncake_client_put_requests_total"] == 0
    assert d["mooncake_client_batch_put_requests_total"] == 0


class NoBatchStore:
    """A store without batch_put_from (as a minimal BundleStore)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name == "batch_put_from":
            raise AttributeError(name)
        return getattr(self._real, name)


def test_auto_falls_back_to_put_without_batch_put_from(served):
    s, port = served
    t = MooncakeBundleTransfer(NoBatchStore(s), key_prefix="t/nobatch")
    before = metrics(port)
    ref, r = roundtrip(t, {"a": np.arange(3 * MiB, dtype=np.uint8), "b": b"x",
                           "c": np.arange(4)})
    d = _delta(port, before)
    assert d["mooncake_client_put_requests_total"] == 5
    assert d["mooncake_client_batch_put_requests_total"] == 0
    assert t._buffer_pool() is None
    assert r.objects["a"][-1] == (3 * MiB - 1) % 256 and r.objects["b"] == b"x"
    assert_same(r.objects["c"], np.arange(4))


def test_batch_put_parts_writes_each_object_from_its_parts(served):
    """The store's batch form of put_parts (what DataProto stages are
    written with): object i is the concatenation of parts[i], from any
    memory, all keys in one batch put."""
    s, port = served
    rows = [np.arange(n, dtype=np.int32) for n in (3, 0, 5)]
    big = np.arange(3 * MiB, dtype=np.uint8)
    before = metrics(port)
    rcs = s.batch_put_parts(["t/bpp/a", "t/bpp/b", "t/bpp/c"],
                            [[b"ab", rows[0], memoryview(b"cd"), rows[1], rows[2]],
                             (bytearray(b"x"),), [big[:MiB], big[MiB:]]])
    d = _delta(port, before)
    assert rcs == [0, 0, 0]
    assert d["mooncake_client_batch_put_requests_total"] == 1
    assert d["mooncake_client_put_requests_total"] == 0
    assert s.get("t/bpp/a") == b"ab" + rows[0].tobytes() + b"cd" + rows[2].tobytes()
    assert s.get("t/bpp/b") == b"x"
    assert s.get("t/bpp/c") == big.tobytes()
    # first writer wins, as put_parts
    assert s.batch_put_parts(["t/bpp/b"], [[b"other"]]) == [0] and s.get("t/bpp/b") == b"x"
    assert s.batch_put_parts([], []) == []
    with pytest.raises(TypeError, match="parts 0 must be a sequence of bytes-like objects"):
        s.batch_put_parts(["t/bpp/d"], [b"abc"])
    with pytest.raises(TypeError, match="parts 0 item 1: a bytes-like object is required"):
        s.batch_put_parts(["t/bpp/d"], [[b"a", 7]])
    with pytest.raises(ValueError, match="1 keys but 2 part lists"):
        s.batch_put_parts(["t/bpp/d"], [[b"a"], [b"b"]])
    with pytest.raises(TypeError, match="all_parts must be a list"):
        s.batch_put_parts(["t/bpp/d"], b"a")
    assert s.is_exist("t/bpp/d") == 0
    assert s.batch_remove(["t/bpp/a", "t/bpp/b", "t/bpp/c"], True) == [0, 0, 0]
    # arrays of every shape the array's own fields describe (C-contiguous,
    # exact ndarrays: read off the array), and the others through their
    # buffer: a 2-D array, a 0-d one, an empty one, a view at an offset,
    # a read-only one, a subclass, and a strided view (refused as before)
    grid = np.arange(24, dtype=np.float64).reshape(4, 6)
    ro = np.arange(7, dtype=np.int16)
    ro.flags.writeable = False

    class Sub(np.ndarray):
        pass
    sub = np.arange(5, dtype=np.uint16).view(Sub)
    parts = [grid, np.array(3.5), np.empty((0, 3)), grid[1:3], ro, sub, grid[2]]
    assert s.batch_put_parts(["t/bpp/e"], [parts]) == [0]
    assert s.get("t/bpp/e") == b"".join(p.tobytes() for p in parts)
    with pytest.raises((BufferError, ValueError), match="contiguous"):
        s.batch_put_parts(["t/bpp/f"], [[b"a", grid[:, 1]]])
    assert s.is_exist("t/bpp/f") == 0
    assert s.remove("t/bpp/e", True) == 0


def test_zero_copy_tensor_objects(transfer, store, regbuf):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(1000, dtype=torch.float32).reshape(10, 100)
    assert store.put_tensor("t/seed", tensor) == 0
    size = store.get_size("t/seed")
    src = regbuf(store, size)
    assert store.get_into("t/seed", src.ctypes.data, size) == size
    member = tensor_object_buffer(src.ctypes.data, size, owner=src, batch_size=10)
    assert len(member) == 10
    ref = transfer.put_structured_object(
        StructuredObjectPayload({"kind": "tensors"}, {"t": member}),
        policy=BundleTransferPolicy(copy_mode="zero_copy"))
    assert ref.manifest["buffers"]["t"]["kind"] == "tensor"
    got = transfer.materialize(transfer.read_spec(ref)).objects["t"]
    assert torch.equal(got, tensor)
    dst = regbuf(store, size)
    into = transfer.materialize_into(transfer.read_spec(ref),
                                     {"t": tensor_object_buffer(dst.ctypes.data, size, dst)})
    assert torch.equal(into.objects["t"], tensor)
    assert into.objects["t"].data_ptr() == dst.ctypes.data + 304  # read in place
    # the same member through store.put (copy) reads back the same
    ref = transfer.put_structured_object(StructuredObjectPayload(buffers={"t": member}),
                                         policy=BundleTransferPolicy(copy_mode="copy"))
    assert torch.equal(transfer.materialize(transfer.read_spec(ref)).objects["t"], tensor)
    # a plain torch tensor is a member too (upstream's torch_tensor encoding)
    ref = transfer.put_structured_object(StructuredObjectPayload(buffers={"t": tensor}))
    spec = ref.manifest["buffers"]["t"]
    assert spec["kind"] == "tensor" and spec["metadata_bytes"] == 304
    assert spec["bytes"] == 304 + tensor.numel() * 4 and spec["dtype"] == "torch.float32"
    got = transfer.materialize(transfer.read_spec(ref))
    assert got.metadata[sos.STRUCTURED_FIELD_SPECS_KEY]["t"] == {
        "encoding": "torch_tensor", "dtype": "torch.float32", "shape": [10, 100],
        "element_size": 4}
    assert torch.equal(got.objects["t"], tensor)
    rows = transfer.materialize(transfer.read_spec(ref).slice_member("t", 0, 2, 5))
    assert torch.equal(rows.objects["t"], tensor[2:5])
    with pytest.raises(ValueError, match="requires step=1"):
        transfer.materialize(transfer.read_spec(ref).slice_member("t", 0, 2, 5, step=2))
    with pytest.raises(ValueError):
        tensor_object_buffer(0, 10)
    with pytest.raises(TypeError):
        len(tensor_object_buffer(1, 10))


def test_staged_payload_larger_than_the_pool(transfer, master):
    """36 MiB byte and row members, one chunk each, with a 16 MiB local
    buffer (a pool of at most 32 MiB): written by put instead of waiting
    forever.  One at a time: the test segment holds 64 MiB."""
    big = np.random.default_rng(2).integers(0, 255, size=36 * MiB, dtype=np.uint8)
    before = master.metric("master_allocated_bytes")
    ref, r = roundtrip(transfer, {"b": memoryview(big)})
    assert r.objects["b"] == big.tobytes()
    del r
    transfer.remove_bundle(ref)
    # the read leased the chunk: its space comes back when the lease ends
    # (a removed object a reader may still copy from is freed then,
    # docs/protocol.md §5.8)
    wait_until(lambda: master.metric("master_allocated_bytes") <= before + MiB,
               LEASE_TTL_MS / 1000 + 10, "the removed bundle's space to be freed")
    ref, r = roundtrip(transfer, {"a": big[:30 * MiB]})
    assert_same(r.objects["a"], big[:30 * MiB])
    del r
    transfer.remove_bundle(ref)


def test_held_results_do_not_block_writes(transfer):
    """Results held by the caller fill the pool (16 MiB local buffer: 32 MiB
    of leases); a staged write then goes by put instead of waiting for
    them."""
    import threading

    ref = transfer.put_structured_object(StructuredObjectPayload(
        buffers={"x": np.ones(30 * MiB, np.uint8)}))
    held = transfer.materialize(transfer.read_spec(ref))
    assert transfer._buffer_pool().active_bytes == 30 * MiB
    out = {}

    def write():
        r = transfer.put_structured_object(StructuredObjectPayload(buffers={"b": bytes(4 * MiB)}))
        out["b"] = transfer.get_bundle(r)[1]["b"]

    th = threading.Thread(target=write, daemon=True)
    th.start()
    th.join(timeout=60)
    assert not th.is_alive(), "the write waited for pool memory the caller holds"
    assert out["b"] == bytes(4 * MiB)
    assert held.objects["x"].sum() == 30 * MiB


def test_chunked_and_parallel_writes(transfer):
    data = np.random.default_rng(9).integers(0, 255, size=(1000, 37), dtype=np.uint8)
    for policy in (BundleTransferPolicy(), BundleTransferPolicy(max_inflight_put=4),
                   BundleTransferPolicy(put_mode="batch", max_inflight_put=4),
                   BundleTransferPolicy(copy_mode="copy")):
        ref, r = roundtrip(transfer, {"d": data, "b": bytes(5000)},
                           chunk_bytes=1000, policy=policy)
        chunks = ref.manifest["buffers"]["d"]["chunks"]
        assert len(chunks) == 37 and sum(c["bytes"] for c in chunks) == data.nbytes
        assert chunks[5]["key"] == ref.manifest["buffers"]["d"]["key"] + "/chunk/5"
        assert_same(r.objects["d"], data)
        assert r.objects["b"] == bytes(5000)
    spec = transfer.read_spec(ref)
    for start, end in ((0, 1000), (26, 27), (27, 55), (999, 1000)):
        got = transfer.materialize(spec.slice_member("d", 0, start, end)).objects["d"]
        assert_same(got, data[start:end])


# ---- another process ------------------------------------------------------------------------

READER = r"""
import json, sys
import numpy as np
from mooncake.store import MooncakeDistributedStore
from mooncake.structured_object_store import MooncakeBundleTransfer
master, key = sys.argv[1], sys.argv[2]
s = MooncakeDistributedStore()
assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master) == 0
t = MooncakeBundleTransfer(s, key_prefix="other")  # the reference alone is enough
ref = {"manifest_key": key}
r = t.materialize(t.read_spec(ref))
part = t.materialize(t.read_spec(ref).slice_member("tokens", 0, 1, 3)).objects["tokens"]
print(json.dumps({"metadata": r.metadata, "tokens": r.objects["tokens"].tolist(),
                  "dtype": r.objects["tokens"].dtype.str, "ids": r.objects["ids"].decode(),
                  "part": part.tolist()}))
s.close()
"""


def test_reader_in_another_process_needs_only_the_reference(transfer, master):
    tokens = np.arange(12, dtype=np.int64).reshape(4, 3)
    ref = transfer.put_structured_object(StructuredObjectPayload(
        {"step": 3}, {"tokens": tokens, "ids": b"abc"}))
    out = subprocess.run([sys.executable, "-c", READER, master.addr, ref.manifest_key],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["metadata"]["step"] == 3 and got["metadata"]["layout"] == "structured"
    assert got["tokens"] == tokens.tolist() and got["dtype"] == "<i8"
    assert got["ids"] == "abc"
    assert got["part"] == tokens[1:3].tolist()


# ---- failures -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["auto", "copy", "parallel"])
@pytest.mark.parametrize("victim", ["/buffer/b", "/buffer/c/chunk/3", "/manifest", "/meta"])
def test_failed_write_leaves_nothing_visible(store, mode, victim):
    flaky = FlakyStore(store, fail_put=lambda k: k.endswith(victim))
    t = MooncakeBundleTransfer(flaky, key_prefix="t/fail")
    payload = StructuredObjectPayload(buffers={"a": np.arange(2 * MiB, dtype=np.uint8),
                                               "b": b"second", "c": np.arange(1000)})
    policy = BundleTransferPolicy(max_inflight_put=4) if mode == "parallel" else \
        BundleTransferPolicy(copy_mode=mode)
    with pytest.raises(StructuredObjectWriteError) as e:
        t.put_structured_object(payload, policy=policy, chunk_bytes=1000)
    assert e.value.member == victim.split("/")[2 if victim.startswith("/buffer") else 1]
    assert e.value.rc == _FAIL
    assert flaky.attempted
    for key in flaky.attempted:
        assert store.is_exist(key) == 0, f"{key} survived the failed write"
    # the same transfer writes fine once the store does
    flaky._fail_put = lambda k: False
    ref = t.put_structured_object(payload)
    assert t.materialize(t.read_spec(ref)).objects["b"] == b"second"


def test_bad_manifests_are_rejected(transfer, store):
    """Foreign or corrupt manifests are refused with upstream's messages
    (ValueError) when the read happens: read_spec itself does no I/O."""
    ref = transfer.put_structured_object(StructuredObjectPayload(
        buffers={"x": np.arange(10, dtype=np.int32), "y": b"abc"}), chunk_bytes=16)
    key, good = ref.manifest_key, ref.manifest

    def bad(mutate, match):
        m = copy.deepcopy(good)
        mutate(m)
        spec = transfer.read_spec(RemoteBundleRef(key, m))  # lazy: nothing checked yet
        with pytest.raises(ValueError, match=match):
            transfer.materialize(spec)

    bad(lambda m: m.update(version=2), "invalid bundle manifest")
    bad(lambda m: m.pop("version"), "invalid bundle manifest")
    bad(lambda m: m.update(layout="other"), "invalid bundle manifest")
    bad(lambda m: m.update(object_id=5), "object_id must be a string")
    bad(lambda m: m.update(object_id="default/0"), "manifest_key does not match manifest "
                                                   "object_id")
    bad(lambda m: m["buffers"]["x"].update(bytes=41), "chunks total 40 bytes, expected 41")
    bad(lambda m: m["buffers"]["x"].update(bytes=-1), "payload bytes must be non-negative")
    bad(lambda m: m["buffers"]["x"].update(chunks={}), "payload chunks are invalid")
    bad(lambda m: m["buffers"]["x"]["chunks"].append(7), "bundle chunk must be a dict")
    bad(lambda m: m["buffers"]["x"]["chunks"][1].update(key="elsewhere/1"),
        "chunk key is outside the payload namespace")
    bad(lambda m: m["buffers"]["x"]["chunks"].append(m["buffers"]["x"]["chunks"][0]),
        "chunk keys must be unique")
    bad(lambda m: m["buffers"]["x"].update(key="foreign/x"),
        "payload key is outside the bundle namespace")
    bad(lambda m: m["buffers"].update({"a/b": m["buffers"]["x"]}),
        "invalid bundle buffer name: 'a/b'")
    bad(lambda m: m["buffers"].update(x=[]), "payload spec must be a dict")
    bad(lambda m: m.update(buffers=[]), "manifest buffers must be a dict")
    bad(lambda m: m.update(buffer_object_ids=[1]), "buffer_object_ids must be a list of strings")
    bad(lambda m: m.update(cleanup_keys=["elsewhere/manifest"]),
        "cleanup_keys are outside the bundle namespace")
    # what sits at a manifest key is checked the same way
    for raw, match in ((b"[1, 2]", "must decode to a dict"),
                       (json.dumps({"version": 7, "layout": "bundle"}).encode(),
                        "invalid bundle manifest")):
        k = f"t/foreign/{len(raw)}/manifest"
        assert store.put(k, raw) == 0
        with pytest.raises(ValueError, match=match):
            transfer.materialize(transfer.read_spec({"manifest_key": k}))
    # a missing manifest reads as b"": json's "Expecting value", as upstream
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        transfer.materialize(transfer.read_spec({"manifest_key": "t/never/written/manifest"}))
    with pytest.raises(ValueError, match="bundle ref must include manifest_key"):
        transfer.materialize(transfer.read_spec({"other": 1}))
    with pytest.raises(TypeError):
        transfer.read_spec(key)  # upstream takes no bare key strings
    assert issubclass(StructuredManifestError, ValueError)
    assert issubclass(StructuredManifestError, StructuredObjectError)
    # metadata whose field specs do not fit the members is corruption as well
    meta_key = good["meta"]["key"]
    for fields, match in (({"x": {"encoding": "pickle"}, "y": {"encoding": "bytes"}},
                           "unsupported structured field encoding: pickle"),
                          ({"x": {"encoding": "ndarray", "dtype": "<i8", "shape": [10]},
                            "y": {"encoding": "bytes"}}, "make 80 bytes"),
                          ([], "structured field specs must be a dict")):
        bogus = json.dumps({"layout": "structured",
                            sos.STRUCTURED_FIELD_SPECS_KEY: fields}).encode()
        m = copy.deepcopy(good)
        m["meta"] = {"key": meta_key, "bytes": len(bogus),
                     "chunks": [{"key": meta_key, "bytes": len(bogus)}]}
        store.remove(meta_key, True)
        assert store.put(meta_key, bogus) == 0
        fresh = MooncakeBundleTransfer(store, key_prefix="t/structured")  # no cached meta
        with pytest.raises(ValueError, match=match):
            fresh.materialize(fresh.read_spec(RemoteBundleRef(key, m)))
    # a member payload that went missing is a read error naming its key
    ref = transfer.put_structured_object(StructuredObjectPayload(
        buffers={"x": np.arange(10, dtype=np.int32), "y": b"abc"}))
    store.remove(ref.manifest["buffers"]["y"]["key"], True)
    with pytest.raises(StructuredObjectReadError, match="buffer/y"):
        transfer.materialize(transfer.read_spec({"manifest_key": ref.manifest_key}))


# ---- bundles --------------------------------------------------------------------------------

def test_bundles_put_read_remove(transfer, store):
    arr = np.arange(1000, dtype=np.float32)
    ref = transfer.put_bundle(b"\x00raw meta\xff", {"a": b"alpha", "b": arr,
                                                    "c": bytearray(3 * MiB)},
                              partition="p1", chunk_bytes=MiB)
    assert "/p1/" in ref.manifest_key
    meta, bufs = transfer.get_bundle({"manifest_key": ref.manifest_key})
    assert meta == b"\x00raw meta\xff"
    assert bufs == {"a": b"alpha", "b": arr.tobytes(), "c": bytes(3 * MiB)}
    # the structured read path reads bundles as byte members
    r = transfer.materialize(transfer.read_spec({"manifest_key": ref.manifest_key}))
    assert r.metadata == {} and r.objects["a"] == b"alpha"
    with pytest.raises(ValueError, match="does not support materialize_into"):
        transfer.materialize_into(transfer.read_spec(ref), {"b": np.empty(1000, np.float32)})
    keys = [ref.manifest_key] + [c["key"] for s in [ref.manifest["meta"], *ref.manifest[
        "buffers"].values()] for c in s["chunks"]]
    assert len(keys) == 1 + 1 + 1 + 1 + 3
    assert all(store.is_exist(k) == 1 for k in keys)
    transfer.remove_bundle(ref)
    assert all(store.is_exist(k) == 0 for k in keys)
    with pytest.raises(json.JSONDecodeError):  # b"" at the manifest key
        transfer.materialize(transfer.read_spec({"manifest_key": ref.manifest_key}))
    transfer.remove_bundle(ref)  # again: everything is already gone, which is fine
    with pytest.raises(TypeError):
        transfer.put_bundle(b"", {"a": object()})


def test_remove_bundle_reports_the_members_it_could_not_remove(store):
    t = MooncakeBundleTransfer(store, key_prefix="t/rm")
    ref = t.put_structured_object(StructuredObjectPayload(
        buffers={"keep": np.arange(4000, dtype=np.int64), "gone": b"x", "also": b"y"}),
        chunk_bytes=8000)
    flaky = FlakyStore(store, fail_remove=lambda k: "/buffer/keep/" in k)
    with pytest.raises(BundleRemoveError) as e:
        MooncakeBundleTransfer(flaky, key_prefix="t/rm").remove_bundle(ref)
    assert set(e.value.failed) == {"keep"}
    assert len(e.value.failed["keep"]) == 4 and set(e.value.failed["keep"].values()) == {_FAIL}
    assert "keep" in str(e.value)
    assert store.is_exist(ref.manifest_key) == 0  # readers no longer see the object
    assert store.is_exist(ref.manifest["buffers"]["gone"]["key"]) == 0
    assert all(store.is_exist(k) == 1 for k in e.value.failed["keep"])
    t.remove_bundle(ref)  # the retry finishes the job
    assert all(store.is_exist(k) == 0 for k in e.value.failed["keep"])


# ---- the native gather copy -----------------------------------------------------------------

def test_concat_arrays_into():
    rng = np.random.default_rng(11)
    arrays = [rng.integers(0, 255, size=n, dtype=np.uint8) for n in (0, 1, 4093, 70000, 5)]
    arrays += [np.arange(6, dtype=np.float64).reshape(2, 3), np.full((), 1.5, np.float32)]
    want = b"".join(a.tobytes() for a in arrays)
    for threads in (1, 2, 7, 1000):
        dest = np.zeros(len(want) + 16, np.uint8)
        assert concat_arrays_into(arrays, dest.ctypes.data, dest.nbytes,
                                  nthreads=threads) == len(want)
        assert dest[:len(want)].tobytes() == want and not dest[len(want):].any()
    # big enough for several threads, rows of uneven length
    big = [rng.integers(0, 1 << 30, size=int(n), dtype=np.int64)
           for n in rng.integers(1, 40000, size=300)]
    want = np.concatenate(big).view(np.uint8)
    dest = np.zeros(want.nbytes, np.uint8)
    assert concat_arrays_into(big, dest.ctypes.data, dest.nbytes, nthreads=4) == want.nbytes
    assert np.array_equal(dest, want)
    # start/count clamp to the list
    dest = np.zeros(64, np.uint8)
    parts = [np.full(4, i, np.uint8) for i in range(5)]
    assert concat_arrays_into(parts, dest.ctypes.data, 64, start=3) == 8
    assert dest[:8].tolist() == [3] * 4 + [4] * 4
    assert concat_arrays_into(parts, dest.ctypes.data, 64, start=1, count=2) == 8
    assert dest[:8].tolist() == [1] * 4 + [2] * 4
    assert concat_arrays_into(parts, dest.ctypes.data, 64, start=9) == 0
    assert concat_arrays_into(parts, dest.ctypes.data, 64, start=-3, count=100) == 20
    with pytest.raises(ValueError, match="destination buffer too small"):
        concat_arrays_into(parts, dest.ctypes.data, 19)
    with pytest.raises(ValueError, match="C-contiguous"):
        concat_arrays_into([np.zeros((4, 4))[:, ::2]], dest.ctypes.data, 64)
    with pytest.raises(TypeError, match="not an ndarray"):
        concat_arrays_into([b"abc"], dest.ctypes.data, 64)
    with pytest.raises(TypeError):
        concat_arrays_into(parts, "0", 64)
    with pytest.raises(ValueError):
        concat_arrays_into(parts, 0, 64)  # NULL destination


def test_remove_partition_cleans_crash_leftovers(store):
    t = MooncakeBundleTransfer(store, key_prefix="t/crash.prefix")
    refs = [t.put_structured_object(StructuredObjectPayload(buffers={"a": b"x"}),
                                    partition="run+1") for _ in range(2)]
    other = t.put_structured_object(StructuredObjectPayload(buffers={"a": b"y"}),
                                    partition="run+10")
    # what a writer that died before its manifest leaves: payloads, no manifest
    base = "t/crash.prefix/run+1/" + "0" * 32
    for k in (base + "/meta", base + "/buffer/a"):
        assert store.put(k, b"orphan") == 0
    decoy = "t/crashXprefix/run+1/k"  # the '.' must not match any character
    assert store.put(decoy, b"keep") == 0
    assert t.remove_partition("run+1") == 2 * 3 + 2
    assert store.is_exist(base + "/meta") == 0
    for ref in refs:
        with pytest.raises(ValueError, match="Expecting value"):
            t.materialize(t.read_spec({"manifest_key": ref.manifest_key}))
    assert store.is_exist(decoy) == 1
    assert t.materialize(t.read_spec(other)).objects["a"] == b"y"
    with pytest.raises(ValueError):
        t.remove_partition("a/b")

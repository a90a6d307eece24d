# SPDX-License-Identifier: Apache-2.0
"""A DataProto stage's metadata, manifest and keys made by one native call
(mc_codec_stage_json through mooncake._fast_copy.stage_json): the put
takes that path for arrays, unpacked rows, bytes and small tensors, and
stores byte for byte what the general Python path stores -- names that
need every kind of JSON escape, dtypes of every plain kind and byte
order, empty and multi-dimensional arrays, payloads cut into chunks --
with the same reference, cached manifest and cached metadata.  The call
itself refuses hostile member descriptions cleanly."""
import json
import uuid

import numpy as np
import pytest

from mooncake import _fast_copy
from mooncake import structured_object_store as sos
from mooncake.store import ReplicateConfig
from mooncake.structured_object_store import MooncakeBundleTransfer, export_dataproto_ref

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(_fast_copy.stage_json is None,
                                reason="the extension has no codec_stage_json")

_FIXED = uuid.UUID("00112233445566778899aabbccddeeff")
_N = 24
_ODD = ['q"uote', "back\\slash", "é€ü", "line\u2028sep", "emoji😀"]


_objs = sos._object_array  # one row per value, never broadcast


def _batch():
    rng = np.random.default_rng(11)
    batch = {name: torch.from_numpy(rng.standard_normal(_N).astype(np.float32))
             for name in _ODD}
    batch["ints"] = np.arange(_N, dtype=np.int64)
    batch["grid"] = np.ones((_N, 2, 3), np.float16)
    batch["big_endian"] = np.arange(_N, dtype=">i4")
    batch["flags"] = np.arange(_N) % 3 == 0
    batch["cplx"] = np.arange(_N, dtype=np.complex64)
    batch["bytes8"] = np.arange(_N, dtype=np.uint8)
    batch["empty"] = np.zeros((_N, 0), np.int32)
    lens = [int(k) for k in rng.integers(0, 200, size=_N)]
    tokens = [rng.integers(0, 32000, size=k, dtype=np.int32) for k in lens]
    tokens[3] = None
    uids = ["u-%d-%s" % (i, "é😀"[i % 2] * (i % 5)) for i in range(_N)]
    uids[5] = None
    non_tensor = {"token_ids": _objs(tokens), "uid": _objs(uids)}
    non_tensor.update({f"{name}_nt": _objs([f"{name}-{i}" for i in range(_N)])
                       for name in _ODD})
    return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": {"step": 3}}


def _stored(store, ref):
    """Every key of the stage and its bytes: the manifest, the metadata's
    chunks and each payload's."""
    stage = ref.stage_refs["default"]
    m = stage.manifest
    keys = [stage.manifest_key] + [c["key"] for c in m["meta"]["chunks"]] + \
        [c["key"] for b in m["buffers"].values() for c in b["chunks"]]
    return {k: bytes(store.get(k)) for k in keys}


class _Spy:
    """Counts the native calls and what they gave."""

    def __init__(self, fn):
        self.fn, self.calls, self.described = fn, 0, 0

    def __call__(self, *args):
        self.calls += 1
        got = self.fn(*args)
        self.described += got is not None
        return got


@pytest.mark.parametrize("chunk", [None, 64, 1003])
@pytest.mark.parametrize("here", [True, False])
def test_native_stage_write_stores_the_general_paths_bytes(store, monkeypatch, chunk, here):
    monkeypatch.setattr(sos, "_uuid4_hex", lambda: _FIXED.hex)
    data = _batch()
    cfg = ReplicateConfig()
    if here:  # rows as parts of their own (the _RowData members)
        cfg.preferred_segment = store.get_hostname()
    got = {}
    for path in ("native", "general"):
        spy = _Spy(_fast_copy.stage_json)
        monkeypatch.setattr(sos, "_native_stage_json", spy if path == "native" else None)
        t = MooncakeBundleTransfer(store, key_prefix='t/st/"é')
        # a partition of its own: nothing left by another case can collide
        ref = t.put(data, partition=f"p\\{chunk}-{here}", chunk_bytes=chunk, config=cfg)
        mkey = ref.stage_refs["default"].manifest_key
        got[path] = (_stored(store, ref), ref.stage_refs["default"].manifest,
                     t._meta_cache[mkey], export_dataproto_ref(ref))
        if path == "native":
            assert spy.calls == 1 and spy.described == 1, "the put did not take the native path"
        back = MooncakeBundleTransfer(store, key_prefix='t/st/"é').get(export_dataproto_ref(ref))
        assert [None if r is None else r.tolist() for r in back["non_tensor_batch"]["token_ids"]] \
            == [None if r is None else r.tolist() for r in data["non_tensor_batch"]["token_ids"]]
        assert list(back["non_tensor_batch"]["uid"]) == list(data["non_tensor_batch"]["uid"])
        for name, v in data["batch"].items():
            w = back["batch"][name]
            if torch.is_tensor(v):
                assert torch.equal(w, v), name
            else:
                assert w.dtype == v.dtype and np.array_equal(w, v), name
        t.cleanup_dataproto(ref)
        # the same object id again for the other path: everything is gone
        assert all(store.is_exist(k) == 0 for k in got[path][0])
    native, general = got["native"], got["general"]
    assert native[0] == general[0]  # every key, byte for byte
    assert native[1] == general[1] == json.loads(native[0][mkey])  # the cached manifest
    assert native[2] == general[2]  # the cached metadata (document, fields, raw)
    assert native[3] == general[3]  # the exported reference
    if chunk == 64:
        assert any("/chunk/" in k for k in native[0])


def test_native_stage_write_falls_back_for_what_it_does_not_describe(store, monkeypatch):
    """A Fortran-ordered array, a large tensor, a datetime array: the
    general path writes the stage (the native call describes nothing), and
    reads give the values back."""
    spy = _Spy(_fast_copy.stage_json)
    monkeypatch.setattr(sos, "_native_stage_json", spy)
    t = MooncakeBundleTransfer(store, key_prefix="t/st")
    for batch in ({"f": np.asfortranarray(np.ones((4, 3), np.int32))},
                  {"big": torch.arange(1 << 19, dtype=torch.float32)},
                  {"a": np.arange(4), "d": np.arange(4).astype("datetime64[ns]")}):
        before = spy.described
        ref = t.put({"batch": batch})
        assert spy.described == before
        back = MooncakeBundleTransfer(store, key_prefix="t/st").get(export_dataproto_ref(ref))
        for name, v in batch.items():
            w = back["batch"][name]
            assert (torch.equal(w, v) if torch.is_tensor(v) else np.array_equal(w, v)), name
        t.cleanup_dataproto(ref)


def _member(name="m", nbytes=4, kind=0, dtype="<i4", shape=(1,), esize=0, hbytes=0):
    return (name, nbytes, kind, dtype, shape, esize, hbytes)


@pytest.mark.parametrize("members, exc", [
    ([_member(name="a/b")], ValueError),
    ([_member(name="a\nb")], ValueError),
    ([_member(name="")], ValueError),
    ([_member(name="\ud800")], UnicodeEncodeError),
    ([_member(name=7)], TypeError),
    ([_member(kind=9)], ValueError),
    ([_member(dtype=None)], ValueError),
    ([_member(shape=(-1,))], ValueError),
    ([_member(shape=(1,) * 65)], ValueError),
    ([_member(shape=("x",))], TypeError),
    ([_member(nbytes=-1)], OverflowError),
    ([_member(nbytes=1 << 64)], OverflowError),
    ([_member(kind=1 << 32)], OverflowError),
    ([_member(nbytes=(1 << 64) - 1)], ValueError),  # 2^64 / 8 MiB keys
    ([("m", 4, 0)], TypeError),
    (["m"], TypeError),
    (7, TypeError),
])
def test_stage_json_refuses_hostile_members(members, exc):
    with pytest.raises(exc):
        _fast_copy.stage_json("p", "o/1", '{"layout":"x"}', members, 8 << 20, 1)


def test_stage_json_refuses_bad_objects_and_describes_arrays():
    sj = _fast_copy.stage_json
    for head in ("{}", "[1]", "", "{"):
        with pytest.raises(ValueError):
            sj("p", "o", head, [], 64, 1)
    with pytest.raises(ValueError):
        sj("p", "o", '{"a":1}', [], 0, 1)
    with pytest.raises(UnicodeEncodeError):
        sj("p\udcff", "o", '{"a":1}', [], 64, 1)
    # arrays: numpy's own dtype.str and shape; anything else is left to the caller
    a = np.zeros((2, 3), ">f8")
    meta, _, keys, chunks, manifest, fields = sj("p", "o", '{"a":1}', [("x", a)], 128, 1)
    assert fields == {"x": {"encoding": "ndarray", "dtype": ">f8", "shape": [2, 3]}}
    assert json.loads(meta)[sos.STRUCTURED_FIELD_SPECS_KEY] == fields
    assert manifest["buffers"]["x"]["bytes"] == 48 and keys[-1] == "p/o/buffer/x"
    assert chunks == [(1, 0, len(meta)), (0, 0, 48)]
    for odd in (np.zeros((3, 2)).T, np.arange(3).astype("M8[s]"), np.array(["s"]),
                np.zeros(2, dtype=[("f", "<i4")]), np.ma.zeros(2), [1, 2], b"xx"):
        assert sj("p", "o", '{"a":1}', [("x", odd)], 64, 1) is None, odd

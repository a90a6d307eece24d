# SPDX-License-Identifier: Apache-2.0
"""The one-pass typing of DataProto columns (issue 34, "Speed").

A column of arrays or of str is typed, described and encoded after one
native pass (codec_ragged_column in swig/pyhelpers.c, codec_utf8_pack)
instead of infer_structure + _choose_leaf_codec + the encoder's own
checks.  These tests hold it to the general path: the same decision, the
same payloads and metadata on random columns (None and MISSING rows,
empty rows, mixed dtypes and byte orders, subclasses, strided rows,
unicode), the same stored bytes for every codec through a real store,
small tensors described from their numpy view as the torch calls describe
them, the metadata cached by the writer equal to its JSON, and reads that
race removals return the written bytes or fail."""
import json
import struct
import threading

import numpy as np
import pytest

from mooncake import _fast_copy
from mooncake import structured_object_store as sos
from mooncake.structured_object_store import (MISSING, FieldSchema, MooncakeBundleTransfer,
                                              StructuredObjectReadError)

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not _fast_copy.HAVE_RAGGED_COLUMN or
                                sos._native_ragged_column is None,
                                reason="the extension has no codec_ragged_column")


@pytest.fixture
def transfer(store):
    return MooncakeBundleTransfer(store, key_prefix="t/onepass")


def objs(values):
    a = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        a[i] = v
    return a


def _general(monkeypatch):
    """The general path only: no one-pass column encoder, the Python UTF-8 loop."""
    monkeypatch.setattr(sos, "_encode_common_column", lambda path, values: None)
    monkeypatch.setattr(sos, "_native_utf8_pack", None)


def _outcome(fn):
    try:
        return fn()
    except Exception as e:  # compared by type and message
        return e


def _payload_bytes(v):
    """(dtype, shape, bytes) of a payload value as it would be stored."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("bytes", None, bytes(v))
    a = np.asarray(v)  # a _RowData packs its rows here
    return (a.dtype.str, a.shape, a.tobytes())


def _assert_same_leaf(new, old, what):
    if isinstance(old, Exception):
        assert type(new) is type(old) and str(new) == str(old), (what, new, old)
        return
    assert not isinstance(new, Exception), (what, new)
    assert (new.codec, new.rows) == (old.codec, old.rows), what
    assert json.dumps(new.metadata, sort_keys=True) == json.dumps(old.metadata, sort_keys=True), \
        what
    assert list(new.payload) == list(old.payload), what  # member order is stored order
    for k in old.payload:
        assert _payload_bytes(new.payload[k]) == _payload_bytes(old.payload[k]), (what, k)


# ---- random columns ---------------------------------------------------------------------

_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.float16, np.float32,
           np.float64, np.complex64, np.bool_, np.longlong]
_TEXT = ["", "a", "plain ascii", "é", "naïve café", "ÿ\x80", "日本語", "\U0001F600 x", "a\x00b",
         "Ω≈ç√", "x" * 70]


class _Str(str):
    """A str subclass: the one-pass encoder leaves its column to the general path."""


def _array_row(rng, dt, kind):
    n = int(rng.integers(0, 6))
    a = (rng.standard_normal(n) * 50).astype(dt)
    if kind == "2d":
        return np.resize(a, 2 * n).reshape(2, n)
    if kind == "0d":
        return np.array(a[0] if n else 1, dtype=dt)
    if kind == "strided":
        return np.resize(a, 2 * n + 2)[::2]
    if kind == "swapped":
        return a.astype(np.dtype(dt).newbyteorder(">")) if np.dtype(dt).itemsize > 1 else a
    if kind == "sub":
        return a.view(np.memmap) if n else a
    return a


def _random_column(rng):
    n = int(rng.integers(0, 9))
    kind = rng.choice(["arrays", "arrays", "arrays", "text", "text", "mixed", "lists",
                       "scalars"])
    dt = _DTYPES[int(rng.integers(len(_DTYPES)))]
    rows = []
    for _ in range(n):
        r = rng.random()
        if r < 0.1:
            rows.append(None)
            continue
        if r < 0.13:
            rows.append(MISSING)
            continue
        if kind == "arrays":
            odd = rng.random()
            shape = "2d" if odd < 0.05 else "0d" if odd < 0.1 else "strided" if odd < 0.13 else \
                "swapped" if odd < 0.16 else "sub" if odd < 0.19 else "1d"
            row_dt = dt if rng.random() > 0.05 else _DTYPES[int(rng.integers(len(_DTYPES)))]
            rows.append(_array_row(rng, row_dt, shape))
        elif kind == "text":
            odd = rng.random()
            text = _TEXT[int(rng.integers(len(_TEXT)))]
            # a bytes row, a str subclass, a str without UTF-8 (a lone surrogate)
            rows.append(b"by" if odd < 0.03 else _Str(text) if odd < 0.06 else
                        text + "\udc80" if odd < 0.08 else text)
        elif kind == "lists":
            rows.append([int(x) for x in rng.integers(0, 9, int(rng.integers(0, 4)))])
        elif kind == "scalars":
            rows.append(float(rng.random()) if rng.random() > 0.5 else int(rng.integers(9)))
        else:
            rows.append([np.ones(2, dt), "s", 3, None, b"b", {"k": 1}][int(rng.integers(6))])
    return rows


@pytest.mark.parametrize("mode", ["packed", "direct", "direct-local"])
def test_one_pass_encodes_as_the_general_path(monkeypatch, mode):
    """Property test: on 600 random columns the one-pass encoder (where it
    takes the column) gives the decision, metadata and payload bytes of
    infer_structure + _choose_leaf_codec + the codec's encoder, and a
    column it refuses, or the general path refuses, fails the same way."""
    rng = np.random.default_rng(34)
    monkeypatch.setattr(sos._ENCODE_SCRATCH, "direct", mode != "packed", raising=False)
    monkeypatch.setattr(sos._ENCODE_SCRATCH, "local", mode == "direct-local", raising=False)
    taken = 0
    for i in range(600):
        col = _random_column(rng)
        what = (i, col)
        fast = _outcome(lambda: sos._encode_common_column("non_tensor_batch.c", list(col)))
        new = _outcome(lambda: sos._encode_inferred("non_tensor_batch.c", list(col)))
        with monkeypatch.context() as m:
            _general(m)
            old = _outcome(lambda: sos._encode_inferred("non_tensor_batch.c", list(col)))
        _assert_same_leaf(new, old, what)
        if isinstance(fast, sos._EncodedLeaf):
            taken += 1
            # the general path makes no nodes for it and decides the same codec
            leaves, nodes = [], []
            sos.infer_structure("c", list(col), leaves, nodes)
            assert not nodes and len(leaves) == 1, what
            d = sos._choose_leaf_codec(list(col))
            assert d.accepted and d.codec == fast.codec, what
            assert fast.metadata["decision_reason"] == d.reason, what
        else:
            assert fast is None, what  # never an exception of its own
    assert taken > 150  # the property covers the fast path, not only refusals


def test_ragged_column_takes_only_plain_numeric_array_columns():
    a32 = np.arange(5, dtype=np.int32)
    layout, elems, dt, nnull, max_ndim = _fast_copy.ragged_column(
        [a32, None, np.empty(0, np.int32), np.array(7, np.int32)])
    want, welems = _fast_copy.ragged_describe([a32, None, np.empty(0, np.int32),
                                               np.array(7, np.int32)], np.int32)
    assert dt == np.int32 and elems == welems == 6 and nnull == 1 and max_ndim == 1
    assert _fast_copy.ragged_column([None, np.array(1.5)])[3:] == (1, 0)
    for k in want:
        assert layout[k].dtype == want[k].dtype and layout[k].tobytes() == want[k].tobytes(), k
    refused = [
        [], [None, None], [a32, a32.astype(np.int64)], [a32, a32.astype(">i4")],
        [a32.astype(">i4")], [np.arange(6, dtype=np.int32)[::2]], [a32.reshape(1, 5)],
        [a32.view(np.memmap)], [a32, [1, 2]], [a32, MISSING], [np.ones(2, np.bool_)],
        [np.ones(2, np.complex64)], [np.array(["x"])], [a32.astype(np.int64),
                                                        a32.astype(np.longlong)],
        ["text"], [torch.ones(2)],
        # after a first plain row (the rows after it are read from the array head)
        [a32, np.arange(6, dtype=np.int32)[::2]], [a32, a32, a32.reshape(5, 1)],
        [a32, None, a32.astype(np.float32)], [a32, a32[::-1]], [a32, a32.astype(">i4")],
        [a32, a32.view(np.memmap)], [a32, np.array(7, np.int32), "x"],
    ]
    for col in refused:
        assert _fast_copy.ragged_column(col) is None, col
    # rows of one dtype object, views and 0-d among them: the layout of each row
    base = np.arange(40, dtype=np.int32)
    col = [base[3:9], None, base[:0], np.array(5, np.int32), base, base[10:11],
           np.arange(4, dtype=np.dtype("<i4").newbyteorder("="))]
    layout, elems, dt, nnull, max_ndim = _fast_copy.ragged_column(col)
    want, welems = _fast_copy.ragged_describe(col, np.int32)
    assert elems == welems == 6 + 0 + 1 + 40 + 1 + 4 and nnull == 1 and max_ndim == 1
    for k in want:
        assert layout[k].tobytes() == want[k].tobytes(), k


def test_utf8_pack_latin1_is_str_encode():
    """The Latin-1 strings codec_utf8_pack encodes itself (no bytes object
    per row; ASCII eight characters a step) give str.encode's bytes, next
    to ASCII, wider and null rows: a non-ASCII character at any place of
    a word or the tail."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        col = []
        for _ in range(int(rng.integers(0, 8))):
            if rng.random() < 0.1:
                col.append(None)
                continue
            hi = [0x7F, 0xFF, 0xFF, 0x7FF, 0xD7FF, 0x10FFFF][int(rng.integers(6))]
            cps = [int(c) for c in rng.integers(0, hi + 1, int(rng.integers(0, 40)))]
            if hi == 0xFF and cps and rng.random() < 0.5:  # ASCII but one, anywhere
                cps = [c & 0x7F for c in cps]
                cps[int(rng.integers(len(cps)))] = int(rng.integers(0x80, 0x100))
            col.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
        data, offsets, nulls = _fast_copy.utf8_pack(col)
        enc = [b"" if v is None else v.encode("utf-8") for v in col]
        assert data == b"".join(enc)
        assert offsets.tolist() == [0] + np.cumsum([len(e) for e in enc]).tolist()
        assert nulls.tolist() == [v is None for v in col]
    # runs of characters past ASCII (accented text: sixteen bytes for eight
    # at once) at every alignment, between ASCII and mixed ones
    hi = [chr(c) for c in range(0x80, 0x100)]
    col = ["a" * k + "".join(hi[(k * 31 + j * 7) % 128] for j in range(m)) + "b" * (m % 3)
           + "é" * k for k in range(9) for m in range(0, 41, 3)]
    data, offsets, nulls = _fast_copy.utf8_pack(col)
    assert data == b"".join(v.encode("utf-8") for v in col)
    assert offsets.tolist() == [0] + np.cumsum([len(v.encode("utf-8")) for v in col]).tolist()
    with pytest.raises(UnicodeEncodeError):
        _fast_copy.utf8_pack(["é", "\udc80"])


def test_utf8_pack_exact_types_the_column():
    """utf8_pack(exact=True) is the column's typing pass too: None, without
    an exception, at a row that is not exactly a str or None (a subclass,
    bytes, a number), wherever it is; a column of str and None packs as
    without it, and a str without UTF-8 still raises."""
    col = ["a", None, "é", "日本"]
    got = _fast_copy.utf8_pack(col, exact=True)
    want = _fast_copy.utf8_pack(col)
    assert got[0] == want[0] == "aé日本".encode()
    assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()
    for odd in (_Str("s"), b"s", 3, 1.5, ["s"]):
        for at in (0, 2, 4):
            bad = col[:at] + [odd] + col[at:]
            assert _fast_copy.utf8_pack(bad, exact=True) is None, (odd, at)
    assert _fast_copy.utf8_pack([_Str("s")])[0] == b"s"  # without exact a subclass packs
    with pytest.raises(TypeError):
        _fast_copy.utf8_pack(["s", 3])
    with pytest.raises(UnicodeEncodeError):
        _fast_copy.utf8_pack(["é", "\udc80"], exact=True)
    assert _fast_copy.utf8_pack([], exact=True)[0] == b""


# ---- through a real store -----------------------------------------------------------------

def _every_codec():
    """A DataProto with a column of every codec (schemas for the codecs
    inference never picks), and those schemas."""
    from PIL import Image

    rng = np.random.default_rng(8)
    n = 6
    tok = [rng.integers(0, 32000, size=int(k), dtype=np.int32) for k in rng.integers(0, 40, n)]
    tok[2], tok[4] = None, np.empty(0, np.int32)
    nan = struct.unpack("<f", struct.pack("<I", 0x7FC00123))[0]
    img = Image.new("RGB", (3, 2), (1, 2, 3))
    non_tensor = {
        "tok": objs(tok),
        "fl": objs([np.array([nan, -0.0, 1.5], np.float32)] * n),
        "lists": objs([[1, 2], [], None, [3], [4, 5, 6], [7]]),
        "tens": objs([torch.arange(k, dtype=torch.int64) for k in range(n)]),
        "scal": objs([0.5, 1.0, None, 2.5, 3.0, 4.0]),
        "raw": objs([b"ab", b"", None, b"\x00\xff", b"x" * 9, b"z"]),
        "uid": objs(["a", "é" * 3, None, "日本語 \U0001F600", "", "naïve"]),
        "mp": objs([{"a": 1}, {"b": [1, 2]}, None, {"c": "é"}, {}, {"d": None}]),
        "rec": objs([{"x": np.arange(k, dtype=np.float64), "y": "s"} for k in range(n)]),
        "media": objs([[b"m1", b"m2"], [], None, [b"m3"], [b""], [b"m4"]]),
        "img": objs([img, None, img, img, img, img]),
        "tdict": objs([{"a": torch.ones(k), "b": torch.zeros(1)} for k in range(n)]),
        "js": objs([{"j": [1, 2]}, None, "s", 3, [1], {"é": 1.5}]),
    }
    schemas = {"tdict": FieldSchema("ragged_tensor_dict"), "js": FieldSchema("json_ragged")}
    data = {"batch": {"r": torch.arange(n, dtype=torch.float32)},
            "non_tensor_batch": non_tensor, "meta_info": {"step": 3}}
    return data, schemas


def _stored(store, ref):
    """Every payload and the metadata of the stage, as the store holds them."""
    m = ref.stage_refs["default"].manifest
    out = {name: b"".join(bytes(store.get(c["key"])) for c in spec["chunks"])
           for name, spec in m["buffers"].items()}
    out["<meta>"] = b"".join(bytes(store.get(c["key"])) for c in m["meta"]["chunks"])
    return out


def test_one_pass_stores_the_bytes_of_the_general_path(store, transfer, monkeypatch):
    """A DataProto with a column of every codec, written by the one-pass
    encoders and by the general path: every stored payload, the metadata
    and the codec descriptions are byte for byte the same, and each
    implementation reads what the other wrote."""
    data, schemas = _every_codec()
    fast = transfer.put(data, field_schemas=schemas)
    with monkeypatch.context() as m:
        _general(m)
        plain = transfer.put(data, field_schemas=schemas)
    codecs = {v["codec"] for v in fast.encoded_non_tensor.values()}
    assert codecs >= {"typed_ragged", "ragged_tensor", "ragged_tensor_dict", "ndarray",
                      "bytes_ragged", "media_bytes", "utf8_ragged", "msgpack_ragged",
                      "json_ragged", "media_list_ragged", "structured_recursive"}, codecs
    a, b = _stored(store, fast), _stored(store, plain)
    assert set(a) == set(b)
    for name in a:
        assert a[name] == b[name], name
    assert json.dumps(fast.encoded_non_tensor, sort_keys=True) == \
        json.dumps(plain.encoded_non_tensor, sort_keys=True)
    # each read by a transfer that has cached nothing, both ways
    for ref in (fast, plain):
        for general in (False, True):
            with monkeypatch.context() as m:
                if general:
                    _general(m)
                got = MooncakeBundleTransfer(store, key_prefix="t/onepass").get(ref)
            nt = got["non_tensor_batch"]
            assert list(nt["uid"]) == list(data["non_tensor_batch"]["uid"])
            for g, w in zip(nt["tok"], data["non_tensor_batch"]["tok"]):
                assert (g is None and w is None) or \
                    (g.dtype == w.dtype and g.tobytes() == w.tobytes())
            assert nt["fl"][0].tobytes() == data["non_tensor_batch"]["fl"][0].tobytes()
    transfer.cleanup_dataproto(fast)
    transfer.cleanup_dataproto(plain)


def _strict_equal(a, b):
    """Equal values of the same types all the way down (no 1 == 1.0, no
    list == tuple by accident)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
    return a == b


def test_cached_metadata_is_its_stored_json(store, transfer):
    """The writer caches the metadata document it serialized instead of
    reading its JSON back: the cache holds exactly what a reader that
    fetches and parses the stored metadata gets."""
    data, schemas = _every_codec()
    ref = transfer.put(data, field_schemas=schemas)
    key = ref.stage_refs["default"].manifest_key
    doc, fields, raw = transfer._meta_cache[key]
    stored = _stored(store, ref)["<meta>"]
    assert raw == stored
    parsed = json.loads(stored.decode("utf-8"))
    assert _strict_equal(doc, parsed)
    assert fields is doc[sos.STRUCTURED_FIELD_SPECS_KEY]
    fresh = MooncakeBundleTransfer(store, key_prefix="t/onepass")
    fdoc, ffields, fraw = fresh._fields(key, ref.stage_refs["default"].manifest, shared=True)
    assert _strict_equal(fdoc, doc) and _strict_equal(ffields, fields) and fraw == raw
    transfer.cleanup_dataproto(ref)


def test_reads_racing_removal_return_the_bytes_or_fail(store, transfer):
    """A read racing the removal of its object (its large payloads on the
    completion queue while the rows are decoded) returns the written bytes
    or raises StructuredObjectReadError, and a failed read leaves the
    transfer reading correctly."""
    rng = np.random.default_rng(2)
    tok = [rng.integers(0, 32000, size=int(k), dtype=np.int32) for k in rng.integers(800, 1200,
                                                                                       512)]
    uid = ["u-%d-é" % i for i in range(512)]
    data = {"non_tensor_batch": {"tok": objs(tok), "uid": objs(uid)}}
    ok = failed = 0
    for i in range(12):
        ref = transfer.put(data)
        stop = threading.Event()

        def remove():
            stop.wait(0.0005 * (i % 4))
            transfer.cleanup_dataproto(ref)

        t = threading.Thread(target=remove)
        t.start()
        try:
            stop.set()
            got = transfer.get(ref)["non_tensor_batch"]
        except StructuredObjectReadError:
            failed += 1
        else:
            ok += 1
            assert list(got["uid"]) == uid
            assert all(g.tobytes() == w.tobytes() for g, w in zip(got["tok"], tok))
        finally:
            t.join(timeout=30)
        assert not t.is_alive()
    assert ok + failed == 12
    # a read whose small payload is gone fails, and the next read is right
    ref = transfer.put(data)
    m = ref.stage_refs["default"].manifest
    gone = m["buffers"]["non_tensor_batch.uid.offsets"]["chunks"][0]["key"]
    assert store.remove(gone, True) == 0
    with pytest.raises(StructuredObjectReadError):
        transfer.get(ref)
    ref2 = transfer.put(data)
    got = transfer.get(ref2)["non_tensor_batch"]
    assert list(got["uid"]) == uid
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got["tok"], tok))
    transfer.cleanup_dataproto(ref2)


def _tensor_cases():
    t = torch.arange(24, dtype=torch.float32)
    return [t, t.reshape(2, 3, 4), torch.arange(6, dtype=torch.int64).reshape(3, 2),
            torch.tensor([True, False]), torch.ones(3, dtype=torch.float16),
            torch.ones(3, dtype=torch.bfloat16), torch.ones(2, dtype=torch.int8),
            torch.ones(2, dtype=torch.uint8), torch.ones(2, dtype=torch.int16),
            torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.float64),
            torch.ones(3, requires_grad=True), t.reshape(4, 6).t(), torch.empty(0),
            torch.empty(0, 3, dtype=torch.int32), torch.tensor(1.5), torch.ones([1] * 9),
            torch.ones(3, dtype=torch.complex64), torch.ones(2, dtype=torch.uint16)
            if hasattr(torch, "uint16") else torch.ones(2)]


def test_small_tensors_are_described_as_the_torch_path(monkeypatch):
    """A small tensor described from its numpy view (_small_torch_out) is
    the payload, the spec and the header the torch calls give; the bytes
    read back as the same tensor both ways (_torch_from_bytes)."""
    for t in _tensor_cases():
        fast = _outcome(lambda: sos._torch_out("batch.t", t))
        with monkeypatch.context() as m:
            m.setattr(sos, "_small_torch_out", lambda name, value: None)
            slow = _outcome(lambda: sos._torch_out("batch.t", t))
        if isinstance(slow, Exception):
            assert type(fast) is type(slow) and str(fast) == str(slow), t
            continue
        (fo, fspec), (so, sspec) = fast, slow
        assert _strict_equal(fspec, sspec), (t, fspec, sspec)
        assert (fo.kind, fo.nbytes) == (so.kind, so.nbytes), t
        assert _strict_equal(fo.extra, so.extra), (t, fo.extra, so.extra)
        if so.kind == "bytes":
            assert bytes(fo.view) == bytes(so.view), t
            if fspec.get("dtype") and fo.extra.get("kind") == "tensor":
                raw = np.frombuffer(bytearray(fo.view), np.uint8)[sos._TENSOR_HEADER_BYTES:]
                got = sos._torch_from_bytes(raw, fspec["dtype"], fspec["shape"])
                with monkeypatch.context() as m:
                    m.setattr(sos, "_NP_OF_TORCH_NAME", {})
                    want = sos._torch_from_bytes(raw, fspec["dtype"], fspec["shape"])

                def raw_bytes(x):
                    return bytes(x.reshape(-1).view(torch.uint8).numpy()) if x.numel() else b""
                assert got.dtype == want.dtype and got.shape == want.shape, t
                assert got.is_contiguous() and raw_bytes(got) == raw_bytes(want), t
                assert got.data_ptr() == want.data_ptr() or not got.numel(), t  # no copy
                assert got.dtype == t.dtype and raw_bytes(got) == raw_bytes(t.detach()
                                                                             .contiguous()), t


def test_tensor_bytes_that_do_not_fit_read_as_before(monkeypatch):
    """_torch_from_bytes: bytes at an odd address, or of another size than
    the shape, go the torch way (the same tensor, or the same error)."""
    t = torch.arange(6, dtype=torch.int32)
    raw = np.zeros(t.numel() * 4 + 1, np.uint8)
    raw[1:] = t.numpy().view(np.uint8)
    got = sos._torch_from_bytes(raw[1:], "torch.int32", [2, 3])
    assert got.dtype == torch.int32 and torch.equal(got, t.reshape(2, 3))
    for shape in ([7], [2, 2]):
        fast = _outcome(lambda: sos._torch_from_bytes(raw[1:], "torch.int32", shape))
        with monkeypatch.context() as m:
            m.setattr(sos, "_NP_OF_TORCH_NAME", {})
            slow = _outcome(lambda: sos._torch_from_bytes(raw[1:], "torch.int32", shape))
        assert isinstance(slow, Exception) and type(fast) is type(slow) and \
            str(fast) == str(slow), (fast, slow)


def test_object_array_holds_each_row_as_is():
    """codec_object_array: a read's rows as a 1-D object array in one native
    pass -- each item the very object given (arrays of one length are not
    broadcast into a 2-D array), the references counted once each and
    given back with the array, the numpy way's array otherwise."""
    import sys

    f = _fast_copy.object_array
    assert f is not None and sos._native_object_array is f
    x = np.arange(12, dtype=np.int32)
    rows = [x[i:i + 3] for i in range(0, 12, 3)] + [None, "é", 7, b"b"]
    views = rows[:4]  # objects of this test alone: their counts are exact
    before = [sys.getrefcount(r) for r in views]
    a = f(rows)
    assert type(a) is np.ndarray and a.dtype == object and a.shape == (len(rows),)
    assert all(a[i] is r for i, r in enumerate(rows))
    assert [sys.getrefcount(r) for r in views] == [b + 1 for b in before]
    del a
    assert [sys.getrefcount(r) for r in views] == before
    assert sos._object_array(rows[:4]).shape == (4,)  # equal-length rows stay rows
    assert f([]).shape == (0,) and f(()).dtype == object
    with pytest.raises(TypeError):
        f(5)


def test_uuid4_hex_is_uuid4():
    """The object and group ids: what uuid.uuid4().hex gives (version 4,
    the RFC 4122 variant, 32 hex digits), never twice the same."""
    import uuid

    seen = set()
    for _ in range(2000):
        h = sos._uuid4_hex()
        u = uuid.UUID(hex=h)
        assert (u.version, u.variant, u.hex) == (4, uuid.RFC_4122, h)
        seen.add(h)
    assert len(seen) == 2000


def test_split_dataproto_plain_dicts_as_mappings():
    """The envelope of plain dicts is split as any mapping is: copies of
    each part (None and a missing part empty), and anything else -- other
    keys, a part that is not exactly a dict, an empty dict -- the general
    way."""
    from collections import OrderedDict
    from types import MappingProxyType

    b, n, m = {"t": 1}, {"s": 2}, {"k": 3}
    cases = [{"batch": b, "non_tensor_batch": n, "meta_info": m},
             {"batch": b, "non_tensor_batch": None},
             {"non_tensor_batch": n},
             {"batch": b, "extra": n},
             {"batch": OrderedDict(b), "meta_info": m},
             {"batch": MappingProxyType(b)},
             {"batch": [1]},
             {}]
    for data in cases:
        got = _outcome(lambda: sos._split_dataproto(data))
        want = _outcome(lambda: sos._split_dataproto(MappingProxyType(data)))
        assert type(got) is type(want) and repr(got) == repr(want), data
        if isinstance(got, tuple):
            for part, src in zip(got, (data.get("batch"), data.get("non_tensor_batch"),
                                       data.get("meta_info"))):
                assert part is not src  # a copy, never the caller's dict

# SPDX-License-Identifier: Apache-2.0
"""The non-tensor codecs of mooncake.structured_object_store: inference
exactly as upstream's table (_choose_leaf_codec, infer_structure, MISSING,
_escape_key), the stored layout of each codec (payload names, dtypes,
offsets, metadata), msgpack bytes as msgpack-python writes them, and a
bit-exact round trip of every codec through a real store (NaN payloads,
empty rows, None in nullable fields, unicode strings, PIL images, nested
structures with missing keys) -- written by put_dataproto, read back by
get_dataproto, whole and by rows."""
import struct
import sys

import numpy as np
import pytest

from mooncake import structured_object_store as sos
from mooncake.structured_object_store import (MISSING, FieldSchema, MooncakeBundleTransfer,
                                              _choose_leaf_codec, _escape_key, infer_structure)

torch = pytest.importorskip("torch")


@pytest.fixture
def transfer(store):
    return MooncakeBundleTransfer(store, key_prefix="t/codecs")


def objs(values):
    a = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        a[i] = v
    return a


def same(got, want):
    """Bit-exact equality of decoded values (NaN payloads included)."""
    if want is None:
        return got is None
    if isinstance(want, float):
        return isinstance(got, float) and struct.pack("<d", got) == struct.pack("<d", want)
    if isinstance(want, np.ndarray):
        return isinstance(got, np.ndarray) and got.dtype == want.dtype and \
            got.shape == want.shape and got.tobytes() == want.tobytes()
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype and \
            got.shape == want.shape and got.numpy().tobytes() == want.numpy().tobytes()
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and \
            all(same(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return isinstance(got, list) and len(got) == len(want) and \
            all(same(g, w) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def roundtrip(transfer, name, values, schema=None, rows=None):
    data = {"non_tensor_batch": {name: objs(values)}}
    ref = transfer.put(data, field_schemas=None if schema is None else {name: schema})
    got = transfer.get(ref, rows=rows)["non_tensor_batch"][name]
    assert isinstance(got, np.ndarray) and got.dtype == object
    return ref, list(got)


# ---- inference ------------------------------------------------------------------------------

def test_choose_leaf_codec_follows_upstreams_table():
    from PIL import Image

    img = Image.new("RGB", (2, 2))
    cases = [
        ([None, None], (False, "msgpack_ragged", "all rows are null", "msgpack", {})),
        ([], (False, "msgpack_ragged", "all rows are null", "msgpack", {})),
        ([torch.ones(2), None, torch.zeros((1, 2))],
         (True, "ragged_tensor", "all non-null rows are Tensor", "torch.Tensor",
          {"dtype": "torch.float32"})),
        ([torch.ones(2), torch.ones(2, dtype=torch.int64)],
         (False, "ragged_tensor", "mixed tensor dtype: ['torch.float32', 'torch.int64']",
          "torch.Tensor", {})),
        ([[b"a", img], [], None], (True, "media_list_ragged", "all rows are media lists",
                                   "media list", {})),
        ([np.arange(3), np.ones(2, np.float32)],
         (True, "typed_ragged", "all rows are numeric ndarray", "numeric sequence",
          {"recursive_source": "ndarray"})),
        ([np.array(["a"]), np.arange(2)],
         (False, "msgpack_ragged", "object ndarray rows", "python object", {})),
        ([[1, 2], (3,)], (True, "typed_ragged", "all rows are numeric sequences",
                          "numeric sequence", {"dtype": "int64"})),
        ([1, 2.5, None], (True, "ndarray", "all rows are numeric scalar", "numeric scalar",
                          {"dtype": "float64"})),
        ([True, False], (True, "ndarray", "all rows are numeric scalar", "numeric scalar",
                         {"dtype": "bool"})),
        ([b"x", bytearray(b"y"), memoryview(b"z")],
         (True, "bytes_ragged", "all rows are bytes-like", "bytes-like", {})),
        ([img, None], (True, "media_bytes", "all rows are media", "media", {})),
        (["a", "é"], (True, "utf8_ragged", "all rows are str", "str", {})),
        ([{"a": 1}, [1, "x"]], (True, "msgpack_ragged", "all rows are msgpack-like", "msgpack",
                                {})),
        ([[True, False]], (True, "msgpack_ragged", "all rows are msgpack-like", "msgpack", {})),
        ([1, "x"], (False, "msgpack_ragged", "no codec matched", "python object", {})),
    ]
    for values, want in cases:
        d = _choose_leaf_codec(values)
        assert isinstance(d, sos._CodecDecision)
        assert (d.accepted, d.codec, d.reason, d.normalized_type, d.metadata) == want, values


def test_missing_and_escape_key():
    assert repr(MISSING) == "<MISSING>" and sos._Missing() is MISSING
    assert MISSING is not None and type(MISSING).__slots__ == ()
    assert _escape_key("a.b[0]\\c]") == "a\\.b\\[0]\\\\c]"
    assert sos._path_tokens("f." + _escape_key("a.b") + "[2].c") == ["f", "a.b", 2, "c"]


def test_infer_structure_nodes_and_leaves():
    leaves, nodes = [], []
    rows = [{"a": 1, "b": [{"c": np.arange(2)}]}, None, {"a": 2}, {"b": []}]
    infer_structure("non_tensor_batch.f", rows, leaves, nodes)
    assert [n.path for n in nodes] == ["non_tensor_batch.f", "non_tensor_batch.f.b",
                                       "non_tensor_batch.f.b[0]"]
    assert [x.path for x in leaves] == ["non_tensor_batch.f.a", "non_tensor_batch.f.b[0].c"]
    by_path = {n.path: n for n in nodes}
    root = by_path["non_tensor_batch.f"]
    assert (root.node_type, root.children, root.lengths, root.row_mask) == \
        ("dict", ["a", "b"], None, [True, False, True, True])
    lst = by_path["non_tensor_batch.f.b"]
    assert (lst.node_type, lst.children, lst.lengths, lst.row_mask) == \
        ("list", [0], [1, 0, 0, 0], [True, False, False, True])
    leaf = {x.path: x for x in leaves}
    assert leaf["non_tensor_batch.f.a"].values == [1, None, 2, MISSING]
    assert leaf["non_tensor_batch.f.a"].decision.codec == "ndarray"
    c = leaf["non_tensor_batch.f.b[0].c"]
    assert c.values[1:] == [None, None, None] and c.decision.codec == "typed_ragged"
    assert by_path["non_tensor_batch.f.b[0]"].row_mask == [True, False, False, False]
    # a list of arrays is a leaf (list items must be None, dicts or lists)
    leaves, nodes = [], []
    infer_structure("p", [[np.arange(2)], None], leaves, nodes)
    assert nodes == [] and leaves[0].decision.codec == "typed_ragged"
    deep = {"x": None}
    for _ in range(40):
        deep = {"x": deep}
    with pytest.raises(ValueError, match="infer_structure exceeded max depth 32 at"):
        infer_structure("p", [deep], [], [])
    # 65 distinct keys: a leaf, not a node
    leaves, nodes = [], []
    infer_structure("p", [{f"k{i}": i for i in range(65)}], leaves, nodes)
    assert nodes == [] and leaves[0].decision.codec == "msgpack_ragged"


# ---- msgpack bytes --------------------------------------------------------------------------

def test_msgpack_bytes_are_msgpack_pythons():
    cases = [(None, b"\xc0"), (True, b"\xc3"), (5, b"\x05"), (-3, b"\xfd"), (200, b"\xcc\xc8"),
             (-200, b"\xd1\xff\x38"), (1 << 40, b"\xcf" + (1 << 40).to_bytes(8, "big")),
             (1.5, b"\xcb" + struct.pack(">d", 1.5)), ("é", b"\xa2\xc3\xa9"),
             ("x" * 40, b"\xd9\x28" + b"x" * 40), (b"\x00\x01", b"\xc4\x02\x00\x01"),
             ([1, [2]], b"\x92\x01\x91\x02"), ({"a": None}, b"\x81\xa1a\xc0")]
    for value, raw in cases:
        assert sos._mp_pack(value) == raw, value
        assert sos._mp_unpack(raw) == value
    with pytest.raises(TypeError, match="can not serialize 'tuple' object"):
        sos._mp_pack([(1, 2)])
    # msgpack-python 1.0.3 names the type with its module
    with pytest.raises(TypeError, match=r"can not serialize '(numpy\.)?int64' object"):
        sos._mp_pack(np.int64(3))


# ---- every codec through a real store -------------------------------------------------------

def test_typed_ragged_layout_and_round_trip(transfer):
    nan = struct.unpack("<f", struct.pack("<I", 0x7FC01234))[0]
    rows = [np.array([1.5, nan, -0.0], np.float32), np.empty(0, np.float32), None,
            np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, np.float32)]
    ref, got = roundtrip(transfer, "x", rows)
    enc = ref.encoded_non_tensor["x"]
    assert enc["codec"] == "typed_ragged" and enc["rows"] == 5
    meta = enc["metadata"]
    assert meta["dtype"] == "float32" and meta["max_ndim"] == 2
    assert meta["row_format"] == "ndarray" and meta["physical_layout"] == "contiguous_flat"
    assert meta["schema_source"] == "inferred_from_runtime_values"
    assert meta["decision_reason"] == "all rows are numeric ndarray"
    assert set(enc["payload_members"]) == {"data", "offsets", "shapes", "ndims", "nulls"}
    assert enc["payload_members"]["data"] == "non_tensor_batch.x.data"
    for g, w in zip(got, rows):
        assert same(g, w), (g, w)
    # the stored arrays, as upstream lays them out
    view = transfer.dataproto_manifest_view(ref)["non_tensor_fields"]["x"]["spec"]
    assert view["encoding"] == "structured_non_tensor"
    assert view["payload_specs"]["offsets"] == {"encoding": "ndarray", "dtype": "<i8",
                                                "shape": [6]}
    assert view["payload_specs"]["shapes"]["shape"] == [5, 2]
    assert view["payload_specs"]["ndims"]["dtype"] == "<i2"
    assert view["payload_specs"]["nulls"]["dtype"] == "|b1"
    # lists decode as lists, mixed rows as their own kind
    _, got = roundtrip(transfer, "l", [[1, 2], [], None, (3,)])
    assert got == [[1, 2], [], None, [3]]
    ref, got = roundtrip(transfer, "m", [np.arange(2, dtype=np.int64), [5, 6]],
                         FieldSchema("typed_ragged"))
    assert ref.encoded_non_tensor["m"]["metadata"]["row_format"] == "mixed"
    assert ref.encoded_non_tensor["m"]["metadata"]["ndarray_rows"] == [True, False]
    assert same(got[0], np.arange(2, dtype=np.int64)) and got[1] == [5, 6]
    ref, got = roundtrip(transfer, "h", [[1, 2], [3]], FieldSchema("typed_ragged",
                                                                   metadata={"dtype": "int16"}))
    assert ref.encoded_non_tensor["h"]["metadata"]["dtype"] == "int16" and got == [[1, 2], [3]]


def test_regular_rows_are_one_copy(transfer):
    rows = [np.full((2, 3), i, np.int32) for i in range(4)]
    payload = sos._encode_typed_ragged_regular_ndarray_rows(rows, np.int32)
    assert payload["offsets"].tolist() == [0, 6, 12, 18, 24]
    assert payload["data"].tobytes() == np.stack(rows).tobytes()
    assert sos._encode_typed_ragged_regular_ndarray_rows(rows[:1], np.int32) is None
    assert sos._encode_typed_ragged_regular_ndarray_rows(rows + [None], np.int32) is None
    _, got = roundtrip(transfer, "r", rows)
    assert all(same(g, w) for g, w in zip(got, rows))


def test_ragged_tensor(transfer):
    rows = [torch.tensor([1.0, float("nan")]), None, torch.zeros((2, 2)), torch.ones(0)]
    ref, got = roundtrip(transfer, "t", rows)
    meta = ref.encoded_non_tensor["t"]["metadata"]
    assert ref.encoded_non_tensor["t"]["codec"] == "ragged_tensor"
    assert meta["dtype"] == "torch.float32" and meta["shape_policy"] == "ragged"
    assert all(same(g, w) for g, w in zip(got, rows))
    with pytest.raises(ValueError, match="ragged tensor codec does not support torch.bfloat16"):
        transfer.put({"non_tensor_batch": {"b": objs([torch.ones(2, dtype=torch.bfloat16)])}},
                     field_schemas={"b": FieldSchema("ragged_tensor")})
    with pytest.raises(ValueError, match="mixed tensor dtype"):
        sos._encode_ragged_tensor_values([torch.ones(1), torch.ones(1, dtype=torch.int32)])


def test_ragged_tensor_dict(transfer):
    rows = [{"a": torch.arange(3), "b": torch.ones((1, 2))}, None, {}, {"b": torch.zeros(0, 2)}]
    schema = FieldSchema("ragged_tensor_dict")
    ref, got = roundtrip(transfer, "d", rows, schema)
    enc = ref.encoded_non_tensor["d"]
    assert enc["metadata"]["keys"] == ["a", "b"]
    assert set(enc["payload_members"]) == {"null_mask"} | {
        f"{k}.{p}" for k in "ab" for p in ("data", "offsets", "shapes", "ndims", "nulls")}
    assert got[1] is None and got[2] == {} and set(got[3]) == {"b"}
    assert torch.equal(got[0]["a"], rows[0]["a"]) and torch.equal(got[0]["b"], rows[0]["b"])
    refusals = [([{"a": None}], TypeError, "cannot contain explicit None"),
                ([3], TypeError, "rows must be mappings or None; row 0 is int"),
                ([{"a.b": torch.ones(1)}], ValueError, "must not contain"),
                ([{"z": torch.ones(1)}], ValueError, "keys not declared in FieldSchema")]
    for values, exc, msg in refusals:
        sch = FieldSchema("ragged_tensor_dict", metadata={"keys": ["a"]}) \
            if "declared" in msg else schema
        with pytest.raises(exc, match=msg):
            transfer.put({"non_tensor_batch": {"d": objs(values)}}, field_schemas={"d": sch})


def test_scalar_ndarray_codec(transfer):
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000ABC))[0]
    ref, got = roundtrip(transfer, "s", [1.5, None, nan, -0.0])
    enc = ref.encoded_non_tensor["s"]
    assert enc["codec"] == "ndarray" and enc["metadata"]["dtype"] == "float64"
    assert enc["metadata"]["shape"] == [4]
    assert all(same(g, w) for g, w in zip(got, [1.5, None, nan, -0.0]))
    _, got = roundtrip(transfer, "b", [True, None, False])
    assert got == [True, None, False]
    with pytest.raises(ValueError, match="is not nullable"):
        transfer.put({"non_tensor_batch": {"n": objs([1, None])}},
                     field_schemas={"n": FieldSchema("ndarray", nullable=False,
                                                     metadata={"dtype": "int64"})})


def test_bytes_text_json_msgpack(transfer):
    blobs = [b"\x00\xff", b"", None, bytes(range(256))]
    ref, got = roundtrip(transfer, "b", blobs)
    assert ref.encoded_non_tensor["b"]["codec"] == "bytes_ragged" and got == blobs
    texts = ["héllo", "", None, "日本語 \U0001F600", "a\x00b"]
    ref, got = roundtrip(transfer, "u", texts)
    assert ref.encoded_non_tensor["u"]["codec"] == "utf8_ragged" and got == texts
    docs = [{"a": [1, {"b": None}], "é": 1.5}, None, [], {}]
    ref, got = roundtrip(transfer, "j", docs, FieldSchema("json_ragged"))
    assert ref.encoded_non_tensor["j"]["codec"] == "json_ragged" and got == docs
    ref, got = roundtrip(transfer, "m", docs)
    assert ref.encoded_non_tensor["m"]["codec"] == "msgpack_ragged" and got == docs
    with pytest.raises(TypeError, match="can not serialize 'tuple' object"):
        transfer.put({"non_tensor_batch": {"t": objs([{"a": (1, 2)}])}})
    with pytest.raises(ValueError, match="failed to encode non_tensor_batch field 't' with "
                                         "FieldSchema codec 'msgpack_ragged'"):
        transfer.put({"non_tensor_batch": {"t": objs([{"a": (1, 2)}])}},
                     field_schemas={"t": FieldSchema("msgpack_ragged")})


def test_media_codecs(transfer):
    from PIL import Image

    img = Image.frombytes("RGB", (3, 2), bytes(range(18)))
    ref, got = roundtrip(transfer, "img", [img, None])
    meta = ref.encoded_non_tensor["img"]["metadata"]
    assert ref.encoded_non_tensor["img"]["codec"] == "media_bytes"
    assert meta["media_types"] == ["image/raw"]
    assert meta["media_encodings"][0] == {"kind": "pil_raw", "mode": "RGB", "size": [3, 2],
                                          "format": None}
    assert got[1] is None and got[0].tobytes() == img.tobytes() and got[0].size == (3, 2)
    rows = [[b"a", img], [], None, [b"xyz"]]
    ref, got = roundtrip(transfer, "ml", rows)
    enc = ref.encoded_non_tensor["ml"]
    assert enc["codec"] == "media_list_ragged"
    assert set(enc["payload_members"]) == {"data", "row_offsets", "byte_offsets", "nulls"}
    assert got[0][0] == b"a" and got[0][1].tobytes() == img.tobytes()
    assert got[1] == [] and got[2] is None and got[3] == [b"xyz"]
    _, got = roundtrip(transfer, "ml2", rows, rows=[3, 0])
    assert got[0] == [b"xyz"] and got[1][1].tobytes() == img.tobytes()


def test_structured_recursive(transfer):
    rows = [{"tokens": np.arange(3, dtype=np.int32), "meta": {"id": "a", "w": 1.5}},
            None, {"x": None}, {}, {"tokens": np.arange(0, dtype=np.int32)},
            {"meta": {"id": "é"}, "img": b"\x00\x01"}]
    ref, got = roundtrip(transfer, "r", rows)
    enc = ref.encoded_non_tensor["r"]
    assert enc["codec"] == "structured_recursive"
    meta = enc["metadata"]
    assert meta["structure_version"] == 1 and meta["root_path"] == "non_tensor_batch.r"
    assert meta["nodes"][0]["missing_payload"] == "node.0.missing"
    assert all("missing" in leaf["payload_members"] for leaf in meta["leaves"])
    for g, w in zip(got, rows):
        assert same(g, w), (g, w)
    _, got = roundtrip(transfer, "r2", rows, rows=slice(2, 6))
    for g, w in zip(got, rows[2:6]):
        assert same(g, w), (g, w)
    _, got = roundtrip(transfer, "r3", rows, rows=[5, 0, 0])
    for g, w in zip(got, [rows[5], rows[0], rows[0]]):
        assert same(g, w), (g, w)


def test_schema_checks(transfer):
    data = {"non_tensor_batch": {"x": objs([1, 2])}}
    with pytest.raises(ValueError, match="unsupported schema codec: 'zip'"):
        transfer.put(data, field_schemas={"x": FieldSchema("zip")})
    with pytest.raises(ValueError, match=r"metadata\['section'\] must be one of "
                                         r"\['batch', 'meta_info', 'non_tensor_batch'\]"):
        transfer.put(data, field_schemas={"x": FieldSchema("auto", metadata={"section": "q"})})
    with pytest.raises(ValueError, match="declares section 'batch', but data contains it in "
                                         "'non_tensor_batch'"):
        transfer.put(data, field_schemas={"x": FieldSchema("auto",
                                                           metadata={"section": "batch"})})
    with pytest.raises(ValueError, match=r"invalid FieldSchema metadata\['dtype'\]: 'nope'"):
        transfer.put(data, field_schemas={"x": FieldSchema("typed_ragged",
                                                           metadata={"dtype": "nope"})})
    with pytest.raises(ValueError, match="must be numeric or bool, got <U1"):
        transfer.put(data, field_schemas={"x": FieldSchema("typed_ragged",
                                                           metadata={"dtype": "U1"})})
    with pytest.raises(TypeError, match="with FieldSchema must be an ndarray or non-string"):
        transfer.put({"non_tensor_batch": {"x": "ab"}},
                     field_schemas={"x": FieldSchema("utf8_ragged")})
    # auto checks nullability, then infers as without a schema
    with pytest.raises(ValueError, match="FieldSchema for 'non_tensor_batch.x' is not nullable"):
        transfer.put({"non_tensor_batch": {"x": objs([None, 1])}},
                     field_schemas={"x": FieldSchema("auto", nullable=False)})
    # the fallback encoder: a column no codec takes whole becomes msgpack of plain values
    leaf = sos._encode_with_schema("non_tensor_batch.y", [np.int64(3), (1, 2)],
                                   FieldSchema("auto"))
    assert leaf.codec == "msgpack_ragged"
    with pytest.raises(ValueError, match="unable to infer a safe codec for structured "
                                         "non-tensor field 'p'; tried"):
        sos._encode_with_schema("p", [object()], FieldSchema("auto"))
    with pytest.raises(ValueError, match="unsupported structured non-tensor field: no codec"):
        transfer.put({"non_tensor_batch": {"o": objs([1, "x"])}})


# ---- the native column builders against the Python paths -------------------------------------

def _without_natives(monkeypatch):
    """The pure-Python encoders and decoders (as without the extension)."""
    for name in ("_native_utf8_pack", "_native_blob_rows", "_native_ragged_rows",
                 "_native_ragged_describe", "_native_ragged_pack"):
        monkeypatch.setattr(sos, name, None)


def _stored_payloads(store, ref):
    """Every payload of a DataProto's stage, as the bytes the store holds."""
    out = {}
    for name, spec in ref.stage_refs["default"].manifest["buffers"].items():
        out[name] = b"".join(bytes(store.get(c["key"])) for c in spec["chunks"])
    return out


def test_native_writes_store_the_bytes_of_the_python_paths(store, transfer, monkeypatch):
    """A DataProto written through the native paths (the str column packed
    by codec_utf8_pack, ragged rows described in one call and sent from
    their own memory, many parts written under one lookup) stores exactly
    the bytes the pure-Python encoders store."""
    from mooncake import _fast_copy

    assert _fast_copy.HAVE_ROW_BUILDERS and sos._native_utf8_pack is not None
    rng = np.random.default_rng(11)
    tok = [rng.integers(0, 32000, size=int(n), dtype=np.int32) for n in rng.integers(0, 300, 200)]
    tok[3], tok[7] = None, np.empty(0, np.int32)
    grid = [np.arange(i * 6, dtype=np.float64).reshape(i, 6) for i in range(5)]
    text = [f"row-{i}-" + "é" * (i % 7) for i in range(200)]
    text[5], text[9], text[11] = None, "", "日本語 \U0001F600 a\x00b"
    data = {"batch": {"r": torch.arange(200, dtype=torch.float32)},
            "non_tensor_batch": {"tok": objs(tok), "grid": objs(grid + [None] * 195),
                                 "uid": objs(text)}}
    native = transfer.put(data)
    with monkeypatch.context() as m:
        _without_natives(m)
        plain = transfer.put(data)
        # the old readers read what the native writers wrote
        got = transfer.get(native)["non_tensor_batch"]
        assert list(got["uid"]) == text
        assert all(same(g, w) for g, w in zip(got["tok"], tok))
    a, b = _stored_payloads(store, native), _stored_payloads(store, plain)
    assert set(a) == set(b) and "non_tensor_batch.uid.data" in a
    for name in a:
        assert a[name] == b[name], name
    assert native.encoded_non_tensor == plain.encoded_non_tensor
    # and the native readers read what the Python writers wrote
    got = transfer.get(plain)["non_tensor_batch"]
    assert list(got["uid"]) == text
    assert all(same(g, w) for g, w in zip(got["tok"], tok))
    assert all(same(g, w) for g, w in zip(got["grid"], grid + [None] * 195))
    transfer.cleanup_dataproto(native)
    transfer.cleanup_dataproto(plain)


def test_utf8_pack_is_str_encode(monkeypatch):
    from mooncake import _fast_copy

    values = ["héllo", "", None, "日本語 \U0001F600", "a\x00b", "x" * 300, None]
    data, offsets, nulls = _fast_copy.utf8_pack(values)
    want = [b"" if v is None else v.encode("utf-8") for v in values]
    assert data == b"".join(want)
    assert offsets.dtype == np.int64 and offsets.tolist() == \
        [0] + np.cumsum([len(w) for w in want]).tolist()
    assert nulls.dtype == np.bool_ and nulls.tolist() == [v is None for v in values]
    assert _fast_copy.utf8_pack([])[0] == b""
    with pytest.raises(UnicodeEncodeError):
        _fast_copy.utf8_pack(["ok", "\ud800"])
    with pytest.raises(TypeError, match="row 1 is not a str but 'int'"):
        _fast_copy.utf8_pack(["ok", 3])
    # the codec's payload is the same with the Python loop
    native = sos._encode_text_values(values, sos._utf8_bytes)
    monkeypatch.setattr(sos, "_native_utf8_pack", None)
    plain = sos._encode_text_values(values, sos._utf8_bytes)
    assert native[1] == plain[1] and native[0]["data"] == plain[0]["data"]
    for k in ("offsets", "nulls"):
        assert native[0][k].dtype == plain[0][k].dtype
        assert native[0][k].tobytes() == plain[0][k].tobytes()


def _both_ways(monkeypatch, fn):
    """fn() with the native builders, then without: (native, plain), each
    the result or the exception raised."""
    def run():
        try:
            return fn()
        except Exception as e:  # compared below
            return e
    native = run()
    with monkeypatch.context() as m:
        _without_natives(m)
        plain = run()
    return native, plain


def test_native_row_builders_decode_as_the_python_loops(monkeypatch):
    rows = [np.arange(5, dtype=np.int32), None, np.empty(0, np.int32),
            np.arange(6, dtype=np.int32).reshape(2, 3), np.array(9, np.int32),
            np.arange(8, dtype=np.int32).reshape(2, 2, 2)]
    payload = sos._ragged_pack(rows, np.dtype(np.int32))
    native, plain = _both_ways(monkeypatch, lambda: sos._ragged_unpack(payload, len(rows)))
    assert len(native) == len(plain) == len(rows)
    for n, p, w in zip(native, plain, rows):
        assert same(n, w) and same(p, w)
        assert n is None or n.size == 0 or np.shares_memory(n, payload["data"])  # views
    # offsets at an odd address (a view into a fetched payload) read the same
    raw = np.zeros(8 * len(payload["offsets"]) + 1, np.uint8)
    raw[1:] = payload["offsets"].view(np.uint8)
    odd = dict(payload, offsets=np.frombuffer(raw.data, np.int64, offset=1))
    assert all(same(a, w) for a, w in zip(sos._ragged_unpack(odd, len(rows)), rows))
    # corrupt layouts are refused both ways
    bad = [dict(payload, offsets=payload["offsets"] + 1),
           dict(payload, ndims=np.array([1, 0, 1, 5, 0, 3], np.int16)),
           dict(payload, offsets=np.array([0, 6, 5, 5, 11, 12, 20], np.int64))]
    for b in bad:
        native, plain = _both_ways(monkeypatch, lambda: sos._ragged_unpack(b, len(rows)))
        assert isinstance(native, ValueError) and isinstance(plain, ValueError), (native, plain)
    # blobs: text and bytes, nulls, corrupt offsets and bad UTF-8
    texts = ["héllo", "", None, "日本語 \U0001F600", "a\x00b"]
    enc, _ = sos._encode_text_values(texts, sos._utf8_bytes)
    blob = {"data": np.frombuffer(enc["data"], np.uint8), "offsets": enc["offsets"],
            "nulls": enc["nulls"]}
    native, plain = _both_ways(monkeypatch, lambda: sos._blob_rows(blob, 5, True))
    assert native == plain == texts
    native, plain = _both_ways(monkeypatch, lambda: sos._blob_rows(blob, 5, False))
    assert native == plain == [None if t is None else t.encode() for t in texts]
    for b, exc in ((dict(blob, offsets=np.array([0, 6, 6, 6, 30, 40], np.int64)), ValueError),
                   (dict(blob, offsets=np.array([0, 6, 3, 3, 24, 28], np.int64)), ValueError),
                   (dict(blob, data=np.frombuffer(b"\xff" * 23, np.uint8)), UnicodeDecodeError)):
        native, plain = _both_ways(monkeypatch, lambda: sos._blob_rows(b, 5, True))
        assert isinstance(native, exc) and isinstance(plain, exc), (native, plain)
        if exc is ValueError:
            assert "ragged offsets do not match the data" in str(native)


def test_native_text_rows_of_one_byte_characters(monkeypatch):
    """Rows of ASCII and U+0080..U+00FF are made in one-byte form without
    CPython's decoder: the same str, and bad UTF-8 still refused."""
    texts = ["é" * 40, "prompt-7-" + "é" * 9, "ÿ\x80 ascii tail of some length", "a" * 17,
             "Ā" + "é" * 3, "éé\U0001F600", "x" * 7 + "é", "é" + "y" * 15, ""]
    enc, _ = sos._encode_text_values(texts, sos._utf8_bytes)
    blob = {"data": np.frombuffer(enc["data"], np.uint8), "offsets": enc["offsets"],
            "nulls": enc["nulls"]}
    native, plain = _both_ways(monkeypatch, lambda: sos._blob_rows(blob, len(texts), True))
    assert native == plain == texts
    assert [sys.getsizeof(s) for s in native] == [sys.getsizeof(s) for s in texts]  # same kind
    # a lead byte other than 0xC2/0xC3, a missing or bad continuation, an
    # overlong form: refused as the strict decoder refuses them
    for raw in (b"ok \xc3", b"\xc3(" + b"a" * 9, b"\xc0\x80", b"\xc2\xc3\xa9", b"abc\x80"):
        bad = {"data": np.frombuffer(raw, np.uint8),
               "offsets": np.array([0, len(raw)], np.int64), "nulls": np.zeros(1, np.uint8)}
        native, plain = _both_ways(monkeypatch, lambda: sos._blob_rows(bad, 1, True))
        assert isinstance(native, UnicodeDecodeError), (raw, native)
        assert isinstance(plain, UnicodeDecodeError), (raw, plain)


def test_native_ragged_rows_are_views_as_slices_make_them(monkeypatch):
    """The rows made without slicing have what slices have: the data as
    their base, its dtype and write flag, their shape."""
    rows = [np.arange(5, dtype=np.float64), np.arange(6, dtype=np.float64).reshape(3, 2),
            np.array(2.5), np.empty((0, 4))]
    payload = sos._ragged_pack(rows, np.dtype(np.float64))
    for writeable in (True, False):
        data = payload["data"].copy()
        data.flags.writeable = writeable
        p = dict(payload, data=data)
        native, plain = _both_ways(monkeypatch, lambda: sos._ragged_unpack(p, len(rows)))
        for n, q, w in zip(native, plain, rows):
            assert same(n, w) and same(q, w)
            assert n.base is q.base and n.dtype == q.dtype and n.shape == q.shape
            assert n.flags.writeable == q.flags.writeable == writeable
            assert n.flags.c_contiguous
    # a view of a view: the base is the array that owns the bytes, as numpy sets it
    owner = np.concatenate([np.zeros(3), payload["data"]])
    p = dict(payload, data=owner[3:])
    native, plain = _both_ways(monkeypatch, lambda: sos._ragged_unpack(p, len(rows)))
    assert all(n.base is q.base for n, q in zip(native, plain))
    assert all(same(n, w) for n, w in zip(native, rows))

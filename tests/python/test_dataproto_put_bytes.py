# SPDX-License-Identifier: Apache-2.0
"""Every byte a DataProto put stores, pinned: an RL batch (two float32
tensors, ragged int32 token ids and masks with a null and an empty row,
a str column with a null) written with a fixed object id, then the
manifest, the metadata and every payload chunk read back and compared
with a construction of upstream's layout written out here from the
format (docs/structured.md, docs/tensor.md): the member order, the JSON
key order and spacing, the tensor object header, the typed-ragged and
utf8-ragged arrays, the chunk keys -- and the encoded field descriptions
of the reference.  Nothing is taken from the encoder under test."""
import json
import struct
import uuid

import numpy as np
import pytest

from mooncake import structured_object_store as sos
from mooncake.store import ReplicateConfig
from mooncake.structured_object_store import MooncakeBundleTransfer, export_dataproto_ref

torch = pytest.importorskip("torch")

_FIXED = uuid.UUID("0123456789abcdef0123456789abcdef")
_N = 96


def _objs(values):
    a = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        a[i] = v
    return a


def rl_batch():
    rng = np.random.default_rng(5)
    lens = [int(k) for k in rng.integers(1, 300, size=_N)]
    lens[4] = 0  # an empty row
    tokens = [rng.integers(0, 32000, size=k, dtype=np.int32) for k in lens]
    tokens[7] = None  # a null row
    masks = [np.ones(k, np.int32) for k in lens]
    uids = ["prompt-%d-%s" % (i, "é" * (i % 13)) for i in range(_N)]
    uids[9] = None
    return {"batch": {"rewards": torch.from_numpy(rng.standard_normal(_N).astype(np.float32)),
                      "advantages": torch.from_numpy(
                          rng.standard_normal(_N).astype(np.float32))},
            "non_tensor_batch": {"token_ids": _objs(tokens), "attention_mask": _objs(masks),
                                 "uid": _objs(uids)},
            "meta_info": {"step": 1}}, tokens, masks, uids


def _jdump(doc, ascii_only=True):
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=ascii_only).encode()


def _tensor_object(t):
    """docs/tensor.md section 1: a FULL float32 tensor object."""
    a = t.numpy()
    dims = list(a.shape) + [-1] * (8 - a.ndim)
    head = struct.pack("<IHHiiIIQQ8q8qII", 0x4D4F4F4E, 1, 304, 0, a.ndim, 0, 0, 304, a.nbytes,
                       *dims, *dims, 0, 0)
    return head + bytes(304 - len(head)) + a.tobytes()


def _ragged(rows):
    """upstream's typed-ragged arrays of 1-D rows (None: a null row)."""
    n = len(rows)
    sizes = [0 if r is None else r.size for r in rows]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype("<i8")
    return {"data": b"".join(r.astype("<i4").tobytes() for r in rows if r is not None),
            "offsets": offsets.tobytes(),
            "shapes": np.array(sizes, "<i8").reshape(n, 1).tobytes(),
            "ndims": np.array([0 if r is None else 1 for r in rows], "<i2").tobytes(),
            "nulls": bytes(r is None for r in rows)}, sum(sizes)


def _utf8(rows):
    blobs = [b"" if r is None else r.encode("utf-8") for r in rows]
    return {"data": b"".join(blobs),
            "offsets": np.concatenate([[0], np.cumsum([len(b) for b in blobs])])
            .astype("<i8").tobytes(),
            "nulls": bytes(r is None for r in rows)}


def _typed_meta():
    return {"dtype": "int32", "max_ndim": 1, "shape_policy": "ragged", "row_format": "ndarray",
            "ndarray_rows": None, "physical_layout": "contiguous_flat",
            "schema_source": "inferred_from_runtime_values",
            "decision_reason": "all rows are numeric ndarray",
            "normalized_type": "numeric sequence", "recursive_source": "ndarray"}


def expected_stage(data, tokens, masks, uids, partition, chunk):
    """(manifest key, {key: bytes} of every key the stage is made of,
    encoded_non_tensor) as upstream lays the stage out."""
    hexid = _FIXED.hex
    base = f"t/pin/{partition}/{hexid}"
    payloads, fields = {}, {}
    for name in ("rewards", "advantages"):
        t = data["batch"][name]
        payloads[f"batch.{name}"] = _tensor_object(t)
        fields[f"batch.{name}"] = {"encoding": "torch_tensor", "dtype": "torch.float32",
                                   "shape": [_N], "element_size": 4}
    encoded = {}
    for name, rows in (("token_ids", tokens), ("attention_mask", masks)):
        arrays, elems = _ragged(rows)
        shapes = {"data": ("<i4", [elems]), "offsets": ("<i8", [_N + 1]),
                  "shapes": ("<i8", [_N, 1]), "ndims": ("<i2", [_N]), "nulls": ("|b1", [_N])}
        for p, raw in arrays.items():
            payloads[f"non_tensor_batch.{name}.{p}"] = raw
            fields[f"non_tensor_batch.{name}.{p}"] = {"encoding": "ndarray",
                                                      "dtype": shapes[p][0],
                                                      "shape": shapes[p][1]}
        encoded[name] = {"codec": "typed_ragged", "rows": _N, "metadata": _typed_meta(),
                         "payload_members": {p: f"non_tensor_batch.{name}.{p}"
                                             for p in arrays}}
    for p, raw in _utf8(uids).items():
        payloads[f"non_tensor_batch.uid.{p}"] = raw
        fields[f"non_tensor_batch.uid.{p}"] = {"encoding": "bytes"} if p == "data" else \
            {"encoding": "ndarray", "dtype": "<i8" if p == "offsets" else "|b1",
             "shape": [_N + 1 if p == "offsets" else _N]}
    encoded["uid"] = {"codec": "utf8_ragged", "rows": _N,
                      "metadata": {"schema_source": "inferred_from_runtime_values",
                                   "decision_reason": "all rows are str",
                                   "normalized_type": "str"},
                      "payload_members": {p: f"non_tensor_batch.uid.{p}"
                                          for p in ("data", "offsets", "nulls")}}
    meta = {"layout": "dataproto_stage",
            "dataproto": {"version": 1, "namespace": "default", "partition": partition,
                          "stage": "default", "batch_size": _N},
            "__mooncake_structured_fields__": fields}
    meta_raw = _jdump(meta, ascii_only=False)
    stored = {}

    def chunked(key, raw, whole=False):
        if whole or len(raw) <= chunk:
            stored[key] = raw
            return [{"key": key, "bytes": len(raw)}]
        out = []
        for i in range(0, len(raw), chunk):
            stored[f"{key}/chunk/{i // chunk}"] = raw[i:i + chunk]
            out.append({"key": f"{key}/chunk/{i // chunk}", "bytes": len(raw[i:i + chunk])})
        return out

    buffers = {}
    for name, raw in payloads.items():
        key = f"{base}/buffer/{name}"
        tensor = name.startswith("batch.")
        spec = {"key": key, "bytes": len(raw), "chunks": chunked(key, raw, whole=tensor)}
        if tensor:
            spec.update({"kind": "tensor", "dtype": "torch.float32", "shape": [_N],
                         "metadata_bytes": 304})
        buffers[name] = spec
    manifest = {"version": 1, "layout": "bundle", "object_id": f"{partition}/{hexid}",
                "meta": {"key": f"{base}/meta", "bytes": len(meta_raw),
                         "chunks": chunked(f"{base}/meta", meta_raw)},
                "buffers": buffers}
    stored[f"{base}/manifest"] = _jdump(manifest)
    return f"{base}/manifest", stored, encoded


@pytest.mark.parametrize("chunk", [None, 1000 + 3])
@pytest.mark.parametrize("here", [True, False])
def test_put_stores_upstreams_bytes(store, monkeypatch, chunk, here):
    monkeypatch.setattr(sos, "_uuid4_hex", lambda: _FIXED.hex)
    data, tokens, masks, uids = rl_batch()
    cfg = ReplicateConfig()
    if here:  # the rows go as parts of their own
        cfg.preferred_segment = store.get_hostname()
    t = MooncakeBundleTransfer(store, key_prefix="t/pin")
    ref = t.put(data, partition="p1", chunk_bytes=chunk, config=cfg)
    mkey, stored, encoded = expected_stage(data, tokens, masks, uids, "p1",
                                           chunk or sos.DEFAULT_BUNDLE_CHUNK_BYTES)
    assert ref.stage_refs["default"].manifest_key == mkey
    for key, raw in stored.items():
        assert bytes(store.get(key)) == raw, key
    assert json.dumps(export_dataproto_ref(ref)["encoded_non_tensor"]) == json.dumps(encoded)
    assert ref._storage_group_id == "structured-" + _FIXED.hex
    # the cached manifest is the stored one
    assert _jdump(ref.stage_refs["default"].manifest) == stored[mkey]
    got = MooncakeBundleTransfer(store, key_prefix="t/pin").get(export_dataproto_ref(ref))
    assert [None if r is None else r.tolist() for r in got["non_tensor_batch"]["token_ids"]] \
        == [None if r is None else r.tolist() for r in tokens]
    assert list(got["non_tensor_batch"]["uid"]) == uids
    t.cleanup_dataproto(ref)
    assert all(store.is_exist(k) == 0 for k in stored)


@pytest.mark.parametrize("chunk", [None, 64])
def test_manifest_and_metadata_are_their_documents_compact_json(store, chunk):
    """Names with quotes, backslashes, non-ASCII and line separators, and
    members of every kind (tensors, arrays of several dtypes and shapes,
    bytes, encoded columns): the stored manifest is json.dumps of its
    document (compact, ASCII) and the metadata json.dumps of its own
    (compact, UTF-8, no NaN) -- parsed and written again, byte for byte."""
    n = 6
    odd = ['q"uote', "back\\slash", "é€ü", "line\u2028sep", "tab\tless".replace("\t", "_")]
    batch = {name: torch.arange(n * (i + 1), dtype=torch.float32).reshape(n, i + 1)
             for i, name in enumerate(odd)}
    batch["ints"] = np.arange(n, dtype=np.int64)
    batch["grid"] = np.ones((n, 2, 3), np.float16)
    batch["cols"] = np.asfortranarray(np.ones((n, 3), np.int32))  # copied C-contiguous
    batch["zero_d"] = torch.tensor(5.0).expand(n).clone()
    non_tensor = {name + "_nt": _objs([f"{name}-{i}" for i in range(n)]) for name in odd}
    non_tensor["rows"] = _objs([np.arange(i, dtype=np.int16) for i in range(n)])
    non_tensor["nested"] = _objs([{"k": [i, None], "s": "é"} for i in range(n)])
    non_tensor["blobs"] = _objs([bytes([i]) * i for i in range(n)])
    t = MooncakeBundleTransfer(store, key_prefix='t/pin/"é')
    ref = t.put({"batch": batch, "non_tensor_batch": non_tensor, "meta_info": {"m": 1}},
                partition="p\\2", chunk_bytes=chunk)
    m = ref.stage_refs["default"].manifest
    raw = bytes(store.get(ref.stage_refs["default"].manifest_key))
    assert raw == json.dumps(json.loads(raw), separators=(",", ":")).encode()
    assert json.loads(raw) == m
    meta = b"".join(bytes(store.get(c["key"])) for c in m["meta"]["chunks"])
    assert len(m["meta"]["chunks"]) == (1 if chunk is None else -(-len(meta) // chunk))
    assert meta == json.dumps(json.loads(meta), separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False).encode()
    fields = json.loads(meta)[sos.STRUCTURED_FIELD_SPECS_KEY]
    assert list(fields) == list(m["buffers"])
    assert fields['batch.q"uote']["encoding"] == "torch_tensor"
    assert fields["batch.cols"] == {"encoding": "ndarray", "dtype": "<i4", "shape": [n, 3]}
    got = MooncakeBundleTransfer(store, key_prefix='t/pin/"é').get(export_dataproto_ref(ref))
    assert torch.equal(got["batch"]["é€ü"], batch["é€ü"])
    assert list(got["non_tensor_batch"]["line\u2028sep_nt"]) == list(non_tensor[
        "line\u2028sep_nt"])
    t.cleanup_dataproto(ref)


def test_batch_size_of_tensor_fields(store):
    """A tensor's rows are its first dimension (a 0-d tensor has none)."""
    t = MooncakeBundleTransfer(store, key_prefix="t/pin")
    with pytest.raises(ValueError, match=r"inconsistent batch sizes: \[4, 5\]"):
        t.put({"batch": {"a": torch.zeros(5, 2), "b": np.zeros(4)}})
    with pytest.raises(ValueError, match=r"inconsistent batch sizes: \[3, 5\]"):
        t.put({"batch": {"a": torch.zeros(5)}, "non_tensor_batch": {"s": _objs(["x"] * 3)}})
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        t.put({"batch": {"a": torch.tensor(1.0)}})
    ref = t.put({"batch": {"a": torch.zeros(6, 2, dtype=torch.int8)}})
    assert ref.batch_size == 6
    t.cleanup_dataproto(ref)

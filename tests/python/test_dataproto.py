# SPDX-License-Identifier: Apache-2.0
"""The DataProto family of mooncake.structured_object_store against a real
master and real clients: upstream's public names, put/get of DataProto-like
objects and flat dicts, the key layout of a stage, row selection (slices,
gathers) and field selection, destinations, a reference exported in one
process and read in another, appends (new stage, merged stage, overwrite)
and their rules, storage groups, writes that fail leaving nothing visible,
corrupt or foreign manifests and handles refused with upstream's messages,
and an object built byte by byte in upstream's documented layout read
here."""
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from helpers import MiB
from test_structured import FlakyStore

from mooncake import structured_object_store as sos
from mooncake.store import ErrorCode, ReplicateConfig
from mooncake.structured_object_store import (
    MooncakeBundleTransfer, MooncakeDataProtoRef, RemoteBundleRef, StructuredFieldLocation,
    StructuredMemberSlice, StructuredObjectWriteError, export_dataproto_ref,
    import_dataproto_ref)

torch = pytest.importorskip("torch")
_FAIL = int(ErrorCode.NO_AVAILABLE_HANDLE)


class TensorDictLike:
    """The part of tensordict.TensorDict a DataProto's batch shows."""

    def __init__(self, tensors, batch_size):
        self._t = dict(tensors)
        self.batch_size = [batch_size]

    def items(self):
        return self._t.items()


class DataProto:
    """A local stand-in shaped like verl's DataProto."""

    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info or {}

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None):
        n = len(next(iter(tensors.values()))) if tensors else 0
        return cls(TensorDictLike(tensors, n), non_tensors, meta_info)


def objs(values):
    a = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        a[i] = v
    return a


def rollout(n=8, seed=0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 40, size=n)
    tokens = [rng.integers(0, 32000, size=k, dtype=np.int32) for k in lens]
    batch = TensorDictLike({
        "input_ids": torch.from_numpy(rng.integers(0, 32000, size=(n, 16), dtype=np.int64)),
        "attention_mask": torch.from_numpy(rng.integers(0, 2, size=(n, 16)).astype(np.int8)),
        "rewards": torch.from_numpy(rng.standard_normal(n).astype(np.float32)),
    }, n)
    non_tensor = {"responses": objs(tokens),
                  "uid": objs([f"uid-{i}-é" for i in range(n)]),
                  "score": rng.standard_normal(n),
                  "extra": objs([{"turn": i, "tags": ["a"] * (i % 3)} if i % 4 else None
                                 for i in range(n)])}
    return DataProto(batch, non_tensor, {"step": 7, "temperature": 0.5})


@pytest.fixture
def transfer(store):
    return MooncakeBundleTransfer(store, key_prefix="t/dp")


def check_rows(got, data, ids):
    """``got`` (a get_dataproto dict) holds rows ``ids`` of ``data``."""
    for name, t in data.batch.items():
        if name in got["batch"]:
            assert torch.equal(got["batch"][name], t[ids]), name
    nt = got["non_tensor_batch"]
    if "responses" in nt:
        assert len(nt["responses"]) == len(ids)
        for g, i in zip(nt["responses"], ids):
            w = data.non_tensor_batch["responses"][i]
            assert g.dtype == w.dtype and np.array_equal(g, w)
    if "uid" in nt:
        assert list(nt["uid"]) == [data.non_tensor_batch["uid"][i] for i in ids]
    if "score" in nt:
        assert np.array_equal(nt["score"], data.non_tensor_batch["score"][ids])
    if "extra" in nt:
        assert list(nt["extra"]) == [data.non_tensor_batch["extra"][i] for i in ids]


# ---- names ----------------------------------------------------------------------------------

def test_upstream_public_names():
    names = ["DEFAULT_BUNDLE_CHUNK_BYTES", "MISSING_OBJECT_ERROR", "STRUCTURED_FIELD_SPECS_KEY",
             "BundleTransferPolicy", "RemoteBundleRef", "StructuredObjectPayload",
             "StructuredObjectResult", "StructuredMemberSlice", "StructuredObjectReadSpec",
             "MooncakeBundleTransfer", "tensor_object_buffer", "raw_destination",
             "AUTO_PARALLEL_MIN_BYTES", "AUTO_PARALLEL_MIN_CHUNKS", "BundleStore", "FieldSchema",
             "StructuredFieldLocation", "MooncakeDataProtoRef", "DATAPROTO_REF_HANDLE_TYPE",
             "DATAPROTO_REF_HANDLE_VERSION", "STORAGE_GROUP_ID", "DataProtoRefLike",
             "is_dataproto_ref_handle", "export_dataproto_ref", "import_dataproto_ref",
             "export_ref", "import_ref", "MISSING", "infer_structure"]
    for n in names:
        assert hasattr(sos, n), n
    private = ["_choose_leaf_codec", "_escape_key", "_CodecDecision", "_InferredLeaf",
               "_InferredNode", "_Missing", "_encode_with_schema", "_encode_typed_ragged_values",
               "_decode_typed_ragged_values", "_encode_typed_ragged_regular_ndarray_rows",
               "_encode_msgpack_ragged_values", "_decode_msgpack_ragged_values",
               "_decode_manifest", "_config_for_grouped_keys", "_concat_arrays_into"]
    for n in private:
        assert hasattr(sos, n), n
    assert sos.export_ref is sos.export_dataproto_ref
    assert sos.import_ref is sos.import_dataproto_ref
    assert sos.DATAPROTO_REF_HANDLE_TYPE == "mooncake_dataproto_ref"
    assert sos.DATAPROTO_REF_HANDLE_VERSION == 1 and sos.STORAGE_GROUP_ID == "storage_group_id"
    assert sos.AUTO_PARALLEL_MIN_BYTES == 64 * MiB and sos.AUTO_PARALLEL_MIN_CHUNKS == 8
    for verb in ("put", "get", "put_dataproto", "append_dataproto_fields", "get_dataproto",
                 "dataproto_manifest_view", "cleanup_dataproto"):
        assert callable(getattr(MooncakeBundleTransfer, verb)), verb
    loc = StructuredFieldLocation("s", "batch.x", "batch")
    with pytest.raises(Exception):
        loc.stage = "t"  # frozen
    ref = MooncakeDataProtoRef(0, {}, {}, {})
    assert (ref.namespace, ref.partition, ref.global_indexes, ref.encoded_non_tensor) == \
        ("default", "default", None, {})
    assert ref._storage_group_id is None


# ---- put / get --------------------------------------------------------------------------

def test_put_get_round_trip_and_key_layout(transfer, store):
    data = rollout()
    ref = transfer.put(data, namespace="ns", partition="p3", stage="rollout")
    assert isinstance(ref, MooncakeDataProtoRef)
    assert ref.batch_size == 8 and ref.namespace == "ns" and ref.partition == "p3"
    assert ref.meta_info == {"step": 7, "temperature": 0.5}
    assert ref.field_index["input_ids"] == StructuredFieldLocation("rollout", "batch.input_ids",
                                                                   "batch")
    assert ref.field_index["responses"] == StructuredFieldLocation(
        "rollout", "non_tensor_batch.responses", "non_tensor_batch")
    assert set(ref.encoded_non_tensor) == {"responses", "uid", "extra"}  # score is numeric
    mkey = ref.stage_refs["rollout"].manifest_key
    base = mkey[:-len("/manifest")]
    assert base.startswith("t/dp/p3/") and len(base.split("/")[-1]) == 32
    m = ref.stage_refs["rollout"].manifest
    assert m["buffers"]["batch.input_ids"]["key"] == base + "/buffer/batch.input_ids"
    assert m["buffers"]["non_tensor_batch.responses.data"]["key"] == \
        base + "/buffer/non_tensor_batch.responses.data"
    assert "non_tensor_batch.score" in m["buffers"]
    # the meta payload: compact JSON, upstream's key order
    meta = json.loads(store.get(base + "/meta"))
    assert list(meta)[:3] == ["layout", "dataproto", sos.STRUCTURED_FIELD_SPECS_KEY]
    assert meta["layout"] == "dataproto_stage"
    assert meta["dataproto"] == {"version": 1, "namespace": "ns", "partition": "p3",
                                 "stage": "rollout", "batch_size": 8}
    assert store.get(base + "/meta").startswith(b'{"layout":"dataproto_stage","dataproto":'
                                                b'{"version":1,"namespace":"ns"')
    assert meta[sos.STRUCTURED_FIELD_SPECS_KEY]["batch.rewards"]["encoding"] == "torch_tensor"
    got = transfer.get(ref)
    assert set(got) == {"batch", "non_tensor_batch", "meta_info"}
    check_rows(got, data, list(range(8)))
    assert got["meta_info"] == data.meta_info
    assert got["non_tensor_batch"]["uid"].dtype == object
    # data_cls: from_dict, else the constructor
    dp = transfer.get(ref, data_cls=DataProto)
    assert isinstance(dp, DataProto) and torch.equal(dp.batch._t["rewards"],
                                                     data.batch._t["rewards"])
    with pytest.raises(TypeError, match="'int' cannot be constructed from batch, "
                                        "non_tensor_batch, and meta_info"):
        transfer.get(ref, data_cls=int)
    # meta_info only: nothing written
    empty = transfer.put({"meta_info": {"a": 1}})
    assert empty.stage_refs == {} and empty.batch_size == 0
    assert transfer.get(empty) == {"batch": {}, "non_tensor_batch": {}, "meta_info": {"a": 1}}
    # a mapping that is not an envelope is batch fields only
    r2 = transfer.put({"batch": np.arange(3), "meta_info": np.ones(3)})
    assert set(r2.field_index) == {"batch", "meta_info"}
    transfer.cleanup_dataproto(ref)
    assert store.is_exist(mkey) == 0 and store.is_exist(base + "/meta") == 0


def test_input_checks(transfer):
    with pytest.raises(ValueError, match=r"inconsistent batch sizes: \[3, 4\]"):
        transfer.put({"batch": {"a": np.zeros(3), "b": np.zeros(4)}})
    with pytest.raises(ValueError, match=r"fields overlap: \['a'\]"):
        transfer.put({"batch": {"a": np.zeros(3)}, "non_tensor_batch": {"a": np.zeros(3)}})
    with pytest.raises(ValueError, match="invalid bundle buffer name: 'batch.a/b'"):
        transfer.put({"batch": {"a/b": np.zeros(3)}})
    with pytest.raises(TypeError, match="batch.x must be bytes-like, got list"):
        transfer.put({"batch": {"x": [1, 2]}})
    with pytest.raises(TypeError, match="expected mapping-like value, got int"):
        transfer.put(DataProto(batch=3))
    with pytest.raises(TypeError, match="tensor object buffer requires batch_size"):
        transfer.put({"batch": {"t": sos.tensor_object_buffer(1, 8)}})
    with pytest.raises(ValueError, match="unsupported Mooncake payload type: 'x'"):
        transfer.put({}, type="x")
    ref = transfer.put({"batch": {"a": np.arange(3)}})
    with pytest.raises(ValueError, match="unsupported Mooncake payload type: 'x'"):
        transfer.get(ref, type="x")
    with pytest.raises(TypeError, match="expected MooncakeDataProtoRef or DataProto handle, "
                                        "got str"):
        transfer.get("nope")


def test_rows_and_fields(transfer):
    data = rollout(10, seed=3)
    ref = transfer.put(data)
    handle = export_dataproto_ref(ref)
    cases = [(slice(2, 7), list(range(2, 7))), (slice(None, None, 3), [0, 3, 6, 9]),
             (slice(-3, None), [7, 8, 9]), (slice(5, 5), []),
             (StructuredMemberSlice(0, 1, 4), [1, 2, 3]),
             ([9, 0, 0, -1, 4], [9, 0, 0, 9, 4]), (np.array([3, 4, 5]), [3, 4, 5]), ([], [])]
    for rows, ids in cases:
        strided = isinstance(rows, slice) and rows.step not in (None, 1)
        fields = ["score"] if strided else None  # encoded fields and tensors: step 1
        got = transfer.get(handle, rows=rows, fields=fields)
        check_rows(got, data, ids)
    got = transfer.get(ref, rows=slice(0, 10, 2), fields=["score"])
    assert np.array_equal(got["non_tensor_batch"]["score"], data.non_tensor_batch["score"][::2])
    with pytest.raises(ValueError, match="structured tensor slicing currently requires step=1"):
        transfer.get(ref, rows=slice(0, 10, 2), fields=["rewards"])
    with pytest.raises(ValueError, match="structured non-tensor slicing currently requires"):
        transfer.get(ref, rows=slice(0, 10, 2), fields=["uid"])
    with pytest.raises(ValueError, match="DataProto row slicing step must be positive"):
        transfer.get(ref, rows=slice(None, None, -1))
    with pytest.raises(ValueError, match="supports axis=0 only"):
        transfer.get(ref, rows=StructuredMemberSlice(1, 0, 2))
    with pytest.raises(IndexError, match="DataProto row index 10 out of range for 10 rows"):
        transfer.get(ref, rows=[10])
    with pytest.raises(TypeError, match="DataProto row indices must be integers"):
        transfer.get(ref, rows=[1.5])
    with pytest.raises(TypeError, match="DataProto rows must be a slice"):
        transfer.get(ref, rows=3)
    # fields
    got = transfer.get(ref, fields=["uid", "rewards"])
    assert list(got["batch"]) == ["rewards"] and list(got["non_tensor_batch"]) == ["uid"]
    got = transfer.get(ref, batch_fields=["input_ids"], meta_info_keys=["step", "nope"])
    assert list(got["batch"]) == ["input_ids"] and got["non_tensor_batch"] == {}
    assert got["meta_info"] == {"step": 7}
    got = transfer.get(ref, non_tensor_fields=["extra"])
    assert got["batch"] == {} and list(got["non_tensor_batch"]) == ["extra"]
    with pytest.raises(ValueError, match="fields cannot be combined"):
        transfer.get(ref, fields=["uid"], batch_fields=["rewards"])
    with pytest.raises(KeyError, match=r"unknown DataProto fields: \['nope'\]"):
        transfer.get(ref, fields=["nope"])


def test_destinations(transfer):
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    ref = transfer.put({"batch": {"x": x}, "non_tensor_batch": {"s": objs(list("abcdefghij"))}})
    dest = np.empty((3, 4), np.float32)
    got = transfer.get(ref, rows=slice(2, 5), destinations={"x": dest, "s": "ignored"})
    assert got["batch"]["x"] is dest and np.array_equal(dest, x[2:5])
    assert list(got["non_tensor_batch"]["s"]) == ["c", "d", "e"]
    for bad, exc, msg in ((np.empty((3, 4), np.float64), ValueError, "destination dtype "
                           "mismatch: expected <f4, got <f8"),
                          (np.empty((4, 4), np.float32), ValueError, "destination shape "
                           "mismatch"),
                          (np.empty((4, 3), np.float32).T[:3], ValueError, "shape|C-contig"),
                          ([0] * 12, TypeError, "destination must be a numpy.ndarray")):
        with pytest.raises(exc, match=msg):
            transfer.get(ref, rows=slice(2, 5), destinations={"x": bad})


# ---- another process ------------------------------------------------------------------------

READER = r"""
import json, sys
import numpy as np
from mooncake.store import MooncakeDistributedStore
from mooncake.structured_object_store import MooncakeBundleTransfer, import_ref
master, handle, rows = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
s = MooncakeDistributedStore()
assert s.setup("localhost", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master) == 0
t = MooncakeBundleTransfer(s, key_prefix="elsewhere")  # the handle alone is enough
ref = import_ref(handle)
got = t.get(ref, rows=rows)
print(json.dumps({
    "batch": {k: v.tolist() for k, v in got["batch"].items()},
    "responses": [r.tolist() for r in got["non_tensor_batch"]["responses"]],
    "dtype": got["non_tensor_batch"]["responses"][0].dtype.str,
    "uid": list(got["non_tensor_batch"]["uid"]),
    "extra": list(got["non_tensor_batch"]["extra"]),
    "score": got["non_tensor_batch"]["score"].tolist(), "meta": got["meta_info"]}))
s.close()
"""


def test_ref_exported_here_reads_in_another_process(transfer, master):
    data = rollout(12, seed=5)
    ref = transfer.put(data)
    handle = export_dataproto_ref(ref)
    text = json.dumps(handle)  # JSON-safe, as it travels
    assert handle["type"] == "mooncake_dataproto_ref" and handle["version"] == 1
    assert handle["kind"] == "bundle_stages" and handle["storage_group_id"].startswith(
        "structured-")
    rows = [11, 3, 3, 0]
    out = subprocess.run([sys.executable, "-c", READER, master.addr, text, json.dumps(rows)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    for name, t in data.batch.items():
        assert got["batch"][name] == t[rows].tolist(), name
    assert got["responses"] == [data.non_tensor_batch["responses"][i].tolist() for i in rows]
    assert got["dtype"] == "<i4"
    assert got["uid"] == [data.non_tensor_batch["uid"][i] for i in rows]
    assert got["extra"] == [data.non_tensor_batch["extra"][i] for i in rows]
    assert got["score"] == data.non_tensor_batch["score"][rows].tolist()
    assert got["meta"] == data.meta_info


def test_handles_export_import_and_refusals(transfer):
    ref = transfer.put({"batch": {"a": np.arange(4)}, "meta_info": {"k": np.int64(3),
                                                                   "v": np.arange(2)}},
                       config=ReplicateConfig())
    h = export_dataproto_ref(ref)
    assert h["meta_info"] == {"k": 3, "v": [0, 1]} and h["global_indexes"] is None
    back = import_dataproto_ref(h)
    assert back.stage_refs["default"].manifest == {}
    assert back.field_index == ref.field_index and back.batch_size == 4
    assert sos.is_dataproto_ref_handle(h) and not sos.is_dataproto_ref_handle({"type": "x"})
    with pytest.raises(TypeError, match="expected MooncakeDataProtoRef, got dict"):
        export_dataproto_ref(h)
    bad_ref = MooncakeDataProtoRef(1, {}, {}, {"o": object()})
    with pytest.raises(TypeError, match="support only JSON-safe values, got object"):
        export_dataproto_ref(bad_ref)

    def refused(change, match, exc=ValueError):
        bad = json.loads(json.dumps(h))
        change(bad)
        with pytest.raises(exc, match=match):
            import_dataproto_ref(bad)

    refused(lambda d: d.update(type="x"), "not a Mooncake DataProto ref handle")
    refused(lambda d: d.update(version=3), "unsupported DataProto ref handle version: 3")
    refused(lambda d: d.update(kind="x"), "unsupported DataProto ref handle kind: 'x'")
    refused(lambda d: d.update(stage_refs=[]), "handle stage_refs must be a mapping")
    refused(lambda d: d.update(field_index=3), "handle field_index must be a mapping")
    refused(lambda d: d.update(meta_info=[]), "handle meta_info must be a mapping")
    refused(lambda d: d.update(encoded_non_tensor=1), "encoded_non_tensor must be a mapping")
    refused(lambda d: d["stage_refs"]["default"].update(manifest_key=""),
            "stage refs must contain non-empty string names and manifest_key values")
    refused(lambda d: d["field_index"]["a"].update(section="x"),
            "invalid DataProto field section: 'x'")
    refused(lambda d: d["field_index"]["a"].update(member=""),
            "field locations must be non-empty strings")
    refused(lambda d: d["field_index"]["a"].update(stage="s"),
            "field 'a' references unknown stage 's'")
    refused(lambda d: d.update(storage_group_id=""), "has invalid storage_group_id")
    refused(lambda d: (d.update(version=2), d.pop("storage_group_id")),
            "has invalid storage_group_id")
    refused(lambda d: d.update(global_indexes=3), "global_indexes must be a list or null")
    refused(lambda d: d.update(global_indexes=[True]), "global_indexes must contain integers")
    refused(lambda d: d.pop("batch_size"), "batch_size", KeyError)
    v2 = json.loads(json.dumps(h))
    v2["version"] = 2
    assert import_dataproto_ref(v2)._storage_group_id == h["storage_group_id"]


# ---- appends --------------------------------------------------------------------------------

def test_append_new_stage_merge_and_overwrite(transfer, store):
    n = 6
    ref = transfer.put({"batch": {"x": np.arange(n)}, "meta_info": {"a": 1}}, stage="s1")
    # a new stage: a new object
    r2 = transfer.append_dataproto_fields(ref, {"non_tensor_batch": {"y": objs(list("abcdef"))},
                                                "meta_info": {"a": 2, "b": 3}}, stage="s2")
    assert set(r2.stage_refs) == {"s1", "s2"} and r2.meta_info == {"a": 2, "b": 3}
    assert ref.meta_info == {"a": 1} and set(ref.field_index) == {"x"}  # the old ref is unchanged
    # the same stage, no overwrite: a merged manifest over both objects
    old_key = r2.stage_refs["s1"].manifest_key
    r3 = transfer.append_dataproto_fields(r2, {"batch": {"z": np.arange(n) * 2}}, stage="s1")
    m = r3.stage_refs["s1"].manifest
    assert r3.stage_refs["s1"].manifest_key != old_key
    assert list(m)[:7] == ["version", "layout", "object_id", "meta", "buffers",
                           "buffer_object_ids", "cleanup_keys"]
    assert set(m["buffers"]) == {"batch.x", "batch.z"}
    assert len(m["buffer_object_ids"]) == 2 and m["buffer_object_ids"] == sorted(
        m["buffer_object_ids"])
    assert old_key in m["cleanup_keys"]
    got = transfer.get(export_dataproto_ref(r3), rows=[5, 1])
    assert got["batch"]["x"].tolist() == [5, 1] and got["batch"]["z"].tolist() == [10, 2]
    assert list(got["non_tensor_batch"]["y"]) == ["f", "b"]
    assert transfer.get(ref)["batch"]["x"].tolist() == list(range(n))  # old refs still read
    view = transfer.dataproto_manifest_view(r3)
    assert view["batch_fields"]["z"]["stage"] == "s1"
    assert view["non_tensor_fields"]["y"]["spec"]["codec"] == "utf8_ragged"
    assert view["stages"]["s1"]["dataproto"]["stage"] == "s1"
    # rules
    with pytest.raises(ValueError, match=r"DataProto fields already exist: \['x'\]"):
        transfer.append_dataproto_fields(r3, {"batch": {"x": np.arange(n)}}, stage="s1")
    with pytest.raises(ValueError, match="append batch size 5 does not match ref batch size 6"):
        transfer.append_dataproto_fields(r3, {"batch": {"w": np.arange(5)}}, stage="s3")
    with pytest.raises(ValueError, match="append batch size 0 does not match"):
        transfer.append_dataproto_fields(r3, {"meta_info": {"q": 1}}, stage="s3")
    with pytest.raises(ValueError, match=r"overwrite for stage 's1' must include existing "
                                         r"fields: \['z'\]"):
        transfer.append_dataproto_fields(r3, {"batch": {"x": np.arange(n)}}, stage="s1",
                                         overwrite=True)
    # overwrite re-supplies the stage, writes a fresh object, removes the old one
    r4 = transfer.append_dataproto_fields(r3, {"batch": {"x": -np.arange(n),
                                                         "z": np.zeros(n, np.int64)}},
                                          stage="s1", overwrite=True)
    assert transfer.get(r4, fields=["x"])["batch"]["x"].tolist() == [-i for i in range(n)]
    assert store.is_exist(r3.stage_refs["s1"].manifest_key) == 0
    # everything of the merged stage went with it
    for k in m["cleanup_keys"]:
        assert store.is_exist(k) == 0, k
    # a meta-only append to a 0-row ref: no store I/O, meta merged
    empty = transfer.put({"meta_info": {"a": 1}})
    assert transfer.append_dataproto_fields(empty, {"meta_info": {"a": 5}},
                                            stage="x").meta_info == {"a": 5}
    transfer.cleanup_dataproto(r4)
    for sref in r4.stage_refs.values():
        assert store.is_exist(sref.manifest_key) == 0


@pytest.mark.parametrize("victim", ["/buffer/batch.t", "/buffer/non_tensor_batch.r.offsets",
                                    "/buffer/non_tensor_batch.r.data", "/manifest", "/meta"])
def test_failed_writes_leave_nothing_visible(store, victim):
    flaky = FlakyStore(store, lambda k: k.endswith(victim))
    t = MooncakeBundleTransfer(flaky, key_prefix="t/dpfail")
    data = {"batch": {"t": torch.arange(8.0), "a": np.arange(8)},
            "non_tensor_batch": {"r": objs([np.arange(i) for i in range(8)])}}
    with pytest.raises(StructuredObjectWriteError):
        t.put(data)
    assert flaky.attempted
    for key in flaky.attempted:
        assert store.is_exist(key) == 0, f"{key} survived the failed write"
    # a failed merge leaves the old stage as it was and no intermediate object
    good = MooncakeBundleTransfer(store, key_prefix="t/dpfail")
    ref = good.put({"batch": {"a": np.arange(8)}})
    flaky.attempted.clear()
    flaky._fail_put = lambda k: k.endswith("/manifest") and k != ref.stage_refs[
        "default"].manifest_key and len(flaky.attempted) > 3
    with pytest.raises(StructuredObjectWriteError):
        t.append_dataproto_fields(ref, {"batch": {"b": np.arange(8)}}, stage="default")
    for key in flaky.attempted:
        assert store.is_exist(key) == 0, f"{key} survived the failed merge"
    assert good.get(ref)["batch"]["a"].tolist() == list(range(8))


def test_reader_never_sees_the_manifest_of_a_put_failing_half_way(store, monkeypatch):
    """A reader polling the manifest key of a put whose payloads are partly
    written before one fails (the manifest is the commit key of the same
    batch) never finds it; the same poll finds it once a put succeeds."""
    import threading
    import uuid

    fixed = uuid.UUID("0123456789abcdef0123456789abcdef")
    monkeypatch.setattr(sos, "_uuid4_hex", lambda: fixed.hex)
    manifest_key = f"t/dppoll/default/{fixed.hex}/manifest"
    flaky = FlakyStore(store, lambda k: k.endswith("/buffer/non_tensor_batch.r.data"))
    t = MooncakeBundleTransfer(flaky, key_prefix="t/dppoll")
    data = {"batch": {"t": torch.arange(64.0), "a": np.arange(64)},
            "non_tensor_batch": {"r": objs([np.arange(i) for i in range(64)]),
                                 "s": objs([f"row {i}" for i in range(64)])}}
    seen, polls, stop = [], [0], threading.Event()

    def poll():
        while not stop.is_set():
            if store.is_exist(manifest_key) == 1:
                seen.append(manifest_key)
            polls[0] += 1

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for _ in range(30):
            with pytest.raises(StructuredObjectWriteError):
                t.put(data)
    finally:
        stop.set()
        reader.join(timeout=30)
    assert not reader.is_alive()
    assert polls[0] > 0 and seen == [], f"{len(seen)} of {polls[0]} polls saw the manifest"
    # every key the failed puts tried is gone
    for key in set(flaky.attempted):
        assert store.is_exist(key) == 0, key
    ref = MooncakeBundleTransfer(store, key_prefix="t/dppoll").put(data)
    assert ref.stage_refs["default"].manifest_key == manifest_key
    assert store.is_exist(manifest_key) == 1


def test_corrupt_and_foreign_stage_manifests(transfer, store):
    ref = transfer.put({"batch": {"a": np.arange(4)}})
    h = export_dataproto_ref(ref)
    key = h["stage_refs"]["default"]["manifest_key"]
    store.remove(key, True)
    assert store.put(key, b'{"version": 2, "layout": "bundle"}') == 0
    with pytest.raises(ValueError, match="invalid bundle manifest"):
        transfer.get(h)
    store.remove(key, True)
    with pytest.raises(ValueError, match="Expecting value"):
        transfer.get(h)
    assert store.put(key, b"[]") == 0
    with pytest.raises(ValueError, match="must decode to a dict"):
        transfer.get(h)


# ---- upstream's layout, built by hand -------------------------------------------------------

def test_hand_built_upstream_object_reads_here(transfer, store):
    """A stage written byte by byte from upstream's documented layout (not
    with this module's encoder): a <i8 batch field, a typed_ragged int32
    token field with a null row, a utf8_ragged field; then its handle."""
    base = "t/dp/hand/" + "ab" * 16
    payloads = {}
    payloads["batch.ids"] = struct.pack("<3q", 10, 20, 30)
    payloads["non_tensor_batch.tok.data"] = struct.pack("<3i", 7, 8, 9)
    payloads["non_tensor_batch.tok.offsets"] = struct.pack("<4q", 0, 2, 2, 3)
    payloads["non_tensor_batch.tok.shapes"] = struct.pack("<3q", 2, 0, 1)
    payloads["non_tensor_batch.tok.ndims"] = struct.pack("<3h", 1, 0, 1)
    payloads["non_tensor_batch.tok.nulls"] = bytes([0, 1, 0])
    payloads["non_tensor_batch.s.data"] = "héllo!".encode()
    payloads["non_tensor_batch.s.offsets"] = struct.pack("<4q", 0, 6, 6, 7)
    payloads["non_tensor_batch.s.nulls"] = bytes([0, 0, 0])
    nd = {"batch.ids": ("<i8", [3]), "non_tensor_batch.tok.data": ("<i4", [3]),
          "non_tensor_batch.tok.offsets": ("<i8", [4]),
          "non_tensor_batch.tok.shapes": ("<i8", [3, 1]),
          "non_tensor_batch.tok.ndims": ("<i2", [3]), "non_tensor_batch.tok.nulls": ("|b1", [3]),
          "non_tensor_batch.s.offsets": ("<i8", [4]), "non_tensor_batch.s.nulls": ("|b1", [3])}
    fields = {name: ({"encoding": "ndarray", "dtype": nd[name][0], "shape": nd[name][1]}
                     if name in nd else {"encoding": "bytes"}) for name in payloads}
    meta = ('{"layout":"dataproto_stage","dataproto":{"version":1,"namespace":"default",'
            '"partition":"hand","stage":"default","batch_size":3},'
            '"__mooncake_structured_fields__":' +
            json.dumps(fields, separators=(",", ":")) + "}").encode()
    assert store.put(base + "/meta", meta) == 0
    buffers = {}
    for name, raw in payloads.items():
        k = f"{base}/buffer/{name}"
        assert store.put(k, raw) == 0
        buffers[name] = {"key": k, "bytes": len(raw), "chunks": [{"key": k, "bytes": len(raw)}]}
    manifest = {"version": 1, "layout": "bundle", "object_id": "hand/" + "ab" * 16,
                "meta": {"key": base + "/meta", "bytes": len(meta),
                         "chunks": [{"key": base + "/meta", "bytes": len(meta)}]},
                "buffers": buffers}
    assert store.put(base + "/manifest", json.dumps(manifest, separators=(",", ":")).encode()) == 0
    handle = {
        "type": "mooncake_dataproto_ref", "version": 1, "kind": "bundle_stages",
        "batch_size": 3, "namespace": "default", "partition": "hand", "global_indexes": None,
        "stage_refs": {"default": {"manifest_key": base + "/manifest"}},
        "field_index": {"ids": {"stage": "default", "member": "batch.ids", "section": "batch"},
                        "tok": {"stage": "default", "member": "non_tensor_batch.tok",
                                "section": "non_tensor_batch"},
                        "s": {"stage": "default", "member": "non_tensor_batch.s",
                              "section": "non_tensor_batch"}},
        "meta_info": {"m": 1},
        "encoded_non_tensor": {
            "tok": {"codec": "typed_ragged", "rows": 3,
                    "metadata": {"dtype": "int32", "max_ndim": 1, "shape_policy": "ragged",
                                 "row_format": "ndarray", "ndarray_rows": None,
                                 "physical_layout": "contiguous_flat"},
                    "payload_members": {p: f"non_tensor_batch.tok.{p}" for p in
                                        ("data", "offsets", "shapes", "ndims", "nulls")}},
            "s": {"codec": "utf8_ragged", "rows": 3, "metadata": {},
                  "payload_members": {p: f"non_tensor_batch.s.{p}" for p in
                                      ("data", "offsets", "nulls")}}}}
    got = transfer.get(handle)
    assert got["batch"]["ids"].tolist() == [10, 20, 30]
    tok = got["non_tensor_batch"]["tok"]
    assert tok[0].dtype == np.int32 and tok[0].tolist() == [7, 8] and tok[1] is None
    assert tok[2].tolist() == [9]
    assert list(got["non_tensor_batch"]["s"]) == ["héllo", "", "!"]
    assert got["meta_info"] == {"m": 1}
    got = transfer.get(handle, rows=[2, 0], fields=["tok", "s", "ids"])
    assert got["batch"]["ids"].tolist() == [30, 10]
    assert [r.tolist() for r in got["non_tensor_batch"]["tok"]] == [[9], [7, 8]]
    assert list(got["non_tensor_batch"]["s"]) == ["!", "héllo"]


# ---- storage groups, flat dicts -------------------------------------------------------------

def test_storage_groups(transfer):
    cfg = ReplicateConfig()
    cfg.group_ids = ["g1"]
    ref = transfer.put({"batch": {"a": np.arange(3)}}, config=cfg)
    assert ref._storage_group_id == "g1" and cfg.group_ids == ["g1"]  # caller's config kept
    assert export_dataproto_ref(ref)["storage_group_id"] == "g1"
    cfg.group_ids = [""]
    ungrouped = transfer.put({"batch": {"a": np.arange(3)}}, config=cfg)
    assert ungrouped._storage_group_id is None
    assert "storage_group_id" not in export_dataproto_ref(ungrouped)
    cfg.group_ids = ["g1", "g2"]
    with pytest.raises(ValueError, match="must contain exactly one logical group id"):
        transfer.put({"batch": {"a": np.arange(3)}}, config=cfg)
    cfg.group_ids = ["other"]
    with pytest.raises(ValueError, match="config.group_ids conflicts with the DataProto "
                                         "storage group"):
        transfer.append_dataproto_fields(ref, {"batch": {"b": np.arange(3)}}, stage="x",
                                         config=cfg)
    r2 = transfer.append_dataproto_fields(ref, {"batch": {"b": np.arange(3)}}, stage="x")
    assert r2._storage_group_id == "g1"
    # expansion per physical key
    cfg.group_ids = ["g"]
    assert sos._config_for_grouped_keys(cfg, 1) is cfg
    assert sos._config_for_grouped_keys(cfg, 3).group_ids == ["g", "g", "g"]
    assert cfg.group_ids == ["g"]
    cfg.group_ids = []
    assert sos._config_for_grouped_keys(cfg, 2).group_ids is None
    assert sos._config_for_grouped_keys(None, 2) is None


def test_flat_dicts(transfer):
    flat = {"ids": torch.arange(12).reshape(4, 3), "mask": np.ones((4, 3), np.int8),
            "texts": ["a", "b", "c", "d"], "step": 3, "names": ("x", "y"),
            "objs": objs([1, 2, 3, 4])}
    ref = transfer.put(flat, type="dict")
    assert ref.batch_size == 4
    assert ref.field_index["ids"].section == "batch"
    assert ref.field_index["texts"].section == "non_tensor_batch"
    # object arrays and lists of another length land in meta_info
    assert {"step", "objs", "names"} <= set(ref.meta_info)
    got = transfer.get(ref, type="dict")
    assert torch.equal(got["ids"], flat["ids"]) and got["texts"] == ["a", "b", "c", "d"]
    assert got["step"] == 3
    schemas = {"tags": sos.FieldSchema("msgpack_ragged",
                                       metadata={"section": "non_tensor_batch"}),
               "lens": sos.FieldSchema("auto", metadata={"section": "meta_info"})}
    ref = transfer.put({"tags": [["a"], [], ["b", "c"]], "lens": [1, 2]}, type="dict",
                       field_schemas=schemas)
    assert ref.batch_size == 3 and ref.meta_info == {"lens": [1, 2]}
    assert transfer.get(ref, type="dict")["tags"] == [["a"], [], ["b", "c"]]
    with pytest.raises(TypeError, match="flat dict payload must be a mapping"):
        transfer.put([1], type="dict")
    with pytest.raises(ValueError, match="dense fields have ambiguous batch sizes"):
        transfer.put({"a": np.zeros(3), "b": np.zeros(4)}, type="dict")
    with pytest.raises(ValueError, match="fields have ambiguous batch sizes"):
        transfer.put({"a": [1, 2], "b": [1, 2, 3]}, type="dict")
    ref = transfer.put({"batch": {"k": np.arange(2)}, "meta_info": {"k": 1}})
    with pytest.raises(ValueError, match=r"Duplicate keys found across DataProto sections: "
                                         r"\['k'\]"):
        transfer.get(ref, type="dict")


def test_remote_bundle_ref_of_a_stage_reads_as_structured_object(transfer):
    ref = transfer.put({"batch": {"a": np.arange(3)}})
    r = transfer.materialize(transfer.read_spec(RemoteBundleRef(
        ref.stage_refs["default"].manifest_key, {})))
    assert r.metadata["layout"] == "dataproto_stage" and r.objects["batch.a"].tolist() == [0, 1, 2]


def test_small_torch_members_are_the_tensor_objects_put_tensor_writes(transfer, store):
    """Small tensors are staged into the object's one batch_put_from with a
    header built here: byte for byte what put_tensor stores, so get_tensor
    (and upstream) read them."""
    for t in (torch.arange(6, dtype=torch.float32).reshape(2, 3),
              torch.ones(5, dtype=torch.bfloat16), torch.zeros((0, 3), dtype=torch.int64),
              torch.tensor([True, False])):
        assert store.put_tensor("t/dp/seed", t) == 0
        want = store.get("t/dp/seed")
        ref = transfer.put({"batch": {"x": t}})
        spec = ref.stage_refs["default"].manifest["buffers"]["batch.x"]
        assert spec["kind"] == "tensor" and spec["metadata_bytes"] == 304
        assert store.get(spec["key"]) == want, t.dtype
        assert torch.equal(store.get_tensor(spec["key"]), t)
        assert torch.equal(transfer.get(ref)["batch"]["x"], t)
        store.remove("t/dp/seed", True)


def test_a_tenth_of_the_rows_moves_a_tenth_of_the_bytes(master):
    """Counted by the reading client's transfer statistics: the small
    per-row payloads and offsets, then only the selected rows' data."""
    from test_client_http import http_store, metrics

    s, port = http_store(master, segment=96 * MiB)
    try:
        t = MooncakeBundleTransfer(s, key_prefix="t/dp10")
        rng = np.random.default_rng(4)
        n = 500
        data = {"batch": {"r": torch.from_numpy(rng.standard_normal(n).astype(np.float32)),
                          "m": rng.integers(0, 2, size=(n, 256)).astype(np.int32)},
                "non_tensor_batch": {
                    "tok": objs([rng.integers(0, 99, size=int(k), dtype=np.int32)
                                 for k in rng.integers(500, 1500, size=n)]),
                    "s": objs(["x" * int(k) for k in rng.integers(10, 100, size=n)])}}
        ref = t.put(data)
        moved = {}
        for name, rows in (("all", None), ("gather", sorted(rng.choice(n, n // 10, False))),
                           ("slice", slice(100, 100 + n // 10))):
            fresh = MooncakeBundleTransfer(s, key_prefix="t/dp10")  # nothing cached
            before = metrics(port)["mooncake_transfer_read_bytes"]
            got = fresh.get(ref, rows=rows)
            moved[name] = metrics(port)["mooncake_transfer_read_bytes"] - before
            ids = list(range(n)) if rows is None else list(range(n))[rows] \
                if isinstance(rows, slice) else rows
            assert all(np.array_equal(a, data["non_tensor_batch"]["tok"][i])
                       for a, i in zip(got["non_tensor_batch"]["tok"], ids))
            assert np.array_equal(got["batch"]["m"], data["batch"]["m"][ids])
        for name in ("gather", "slice"):
            assert moved[name] <= 0.12 * moved["all"], (name, moved)
            assert moved[name] >= 0.09 * moved["all"], (name, moved)
    finally:
        s.close()


# ---- the direct write: every payload from its own memory -----------------------------------

class NoPartsStore:
    """A real store without batch_put_parts: stages are written the packed
    way (typed-ragged rows gathered into one buffer, staged payloads and
    batch_put_from, tensors by put_tensor, meta and manifest by put)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name == "batch_put_parts":
            raise AttributeError(name)
        return getattr(self._real, name)


class WriteSpy:
    """A real store that counts its write calls."""

    WRITES = ("put", "batch_put_from", "batch_put_parts", "batch_put_parts_commit",
              "put_tensor", "pub_tensor", "put_from", "put_tensor_from")

    def __init__(self, real):
        self._real = real
        self.calls = {}
        self.parts = {}  # key -> number of parts batch_put_parts sent it in

    def __getattr__(self, name):
        f = getattr(self._real, name)
        if name not in self.WRITES:
            return f

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            if name in ("batch_put_parts", "batch_put_parts_commit"):
                self.parts.update((k, len(p)) for k, p in zip(args[0], args[1]))
            return f(*args, **kwargs)
        return counted


def mixed_row(i):
    if i % 7 == 0:
        return None
    if i % 5 == 0:
        return np.array(float(i))
    return np.full((i % 3 + 1, 2), i, np.float64)


def direct_batch(rng):
    tok = [rng.integers(0, 32000, size=int(k), dtype=np.int32)
           for k in rng.integers(0, 2000, size=200)]
    tok[3] = tok[3][:0]  # an empty row
    return {
        "batch": {"big": torch.arange(300_000, dtype=torch.float32).reshape(200, 1500),  # 1.2 MB
                  "t": torch.arange(200, dtype=torch.int64),
                  "a": rng.integers(0, 255, size=(200, 6000), dtype=np.uint8),  # in place
                  "s": np.arange(200, dtype=np.float64)},
        "non_tensor_batch": {
            "tok": objs(tok),
            "mixed": objs([mixed_row(i) for i in range(200)]),  # nulls, 0-d and 2-D rows
            "scalar_rows": objs([np.array(i, np.int16) for i in range(200)]),  # 0-d rows
            "regular": objs([np.full((2, 3), i, np.int64) for i in range(200)]),
            "tensors": objs([torch.full((int(i % 4),), float(i)) for i in range(200)]),
            "uid": objs([f"row-{i}-" + "é" * (i % 9) for i in range(200)]),
            "nested": objs([{"ids": np.arange(i % 11, dtype=np.int32), "name": f"n{i}"}
                            for i in range(200)])}}


def stored_bytes(store, spec):
    return b"".join(bytes(store.get(c["key"])) for c in spec["chunks"])


@pytest.mark.parametrize("chunk", [None, 256 * 1024 + 3])
@pytest.mark.parametrize("here", [True, False])
def test_direct_write_stores_the_bytes_of_the_packed_write(store, chunk, here):
    """A stage written in one batch_put_parts_commit, every payload from its
    own memory -- the ragged rows as they are when the write goes to this
    host's segment, else packed first -- with the manifest its commit key
    (published last), holds byte for
    byte what the staged write stores: the same members in the same
    order, the same specs, chunks and metadata, and every payload's bytes
    -- so a reader of the old layout reads it."""
    data = direct_batch(np.random.default_rng(11))
    spy = WriteSpy(store)
    direct = MooncakeBundleTransfer(spy, key_prefix="t/dpdirect")
    packed = MooncakeBundleTransfer(NoPartsStore(store), key_prefix="t/dpdirect")
    cfg = None
    if here:  # the segment is this very client's
        cfg = ReplicateConfig()
        cfg.preferred_segment = store.get_hostname()
    a = direct.put(data, chunk_bytes=chunk, config=cfg)
    b = packed.put(data, chunk_bytes=chunk, config=cfg)
    # every payload, the metadata and (its commit key) the manifest in one batch
    assert spy.calls == {"batch_put_parts_commit": 1}
    assert spy.parts[a.stage_refs["default"].manifest_key] == 1
    ma = a.stage_refs["default"].manifest
    mb = b.stage_refs["default"].manifest
    tok_keys = [c["key"] for c in ma["buffers"]["non_tensor_batch.tok.data"]["chunks"]]
    if here:  # the rows went as parts of their own (an empty row is one too)
        assert sum(spy.parts[k] for k in tok_keys) >= 200
    else:  # 5 KiB rows are packed first: a network path moves a part per request
        assert all(spy.parts[k] == 1 for k in tok_keys)
    assert list(ma["buffers"]) == list(mb["buffers"])
    assert a.encoded_non_tensor == b.encoded_non_tensor
    assert a.encoded_non_tensor["tok"]["codec"] == "typed_ragged"
    rel = len(ma["object_id"]) + len("t/dpdirect/")
    for name in ma["buffers"]:
        sa, sb = ma["buffers"][name], mb["buffers"][name]
        assert {k: v for k, v in sa.items() if k not in ("key", "chunks")} == \
            {k: v for k, v in sb.items() if k not in ("key", "chunks")}, name
        assert [(c["key"][rel:], c["bytes"]) for c in sa["chunks"]] == \
            [(c["key"][rel:], c["bytes"]) for c in sb["chunks"]], name
        assert stored_bytes(store, sa) == stored_bytes(store, sb), name
    if chunk is not None:  # the rows' payload split mid-row across keys
        assert len(ma["buffers"]["non_tensor_batch.tok.data"]["chunks"]) > 1
    assert stored_bytes(store, ma["meta"]) == stored_bytes(store, mb["meta"])
    # read back by a transfer with nothing cached, as another process would
    fresh = MooncakeBundleTransfer(store, key_prefix="t/dpdirect")
    got = fresh.get(export_dataproto_ref(a))
    for name, v in data["batch"].items():
        g = got["batch"][name]
        assert (torch.equal(g, v) if isinstance(v, torch.Tensor) else np.array_equal(g, v)), name
    for name, col in data["non_tensor_batch"].items():
        for g, w in zip(got["non_tensor_batch"][name], col):
            if isinstance(w, dict):
                assert g.keys() == w.keys() and np.array_equal(g["ids"], w["ids"])
            elif isinstance(w, torch.Tensor):
                assert torch.equal(g, w)
            elif isinstance(w, np.ndarray):
                assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
            else:
                assert g == w
    packed.cleanup_dataproto(b)
    direct.cleanup_dataproto(a)
    for ref in (a, b):
        for spec in ref.stage_refs["default"].manifest["buffers"].values():
            assert all(store.is_exist(c["key"]) == 0 for c in spec["chunks"])


def test_large_rows_go_as_parts_wherever_the_write_goes(store):
    """Rows of 64 KiB and more on average are parts of their own on any
    path (what a part costs there is lost in what it carries)."""
    rows = [np.full(20_000 + i, i, np.int32) for i in range(12)]
    spy = WriteSpy(store)
    t = MooncakeBundleTransfer(spy, key_prefix="t/dpdirect")
    ref = t.put({"non_tensor_batch": {"r": objs(rows)}})
    key = ref.stage_refs["default"].manifest["buffers"]["non_tensor_batch.r.data"]["key"]
    assert spy.parts[key] == 12
    got = MooncakeBundleTransfer(store, key_prefix="t/dpdirect").get(export_dataproto_ref(ref))
    assert all(np.array_equal(g, w) for g, w in zip(got["non_tensor_batch"]["r"], rows))
    t.cleanup_dataproto(ref)


def test_direct_write_is_used_only_where_it_applies(store):
    """Policies that ask for another path keep it, and a store without a
    local buffer (writes from registered memory only) is not sent rows."""
    data = {"non_tensor_batch": {"r": objs([np.arange(i, dtype=np.int32) for i in range(9)])}}
    for policy in (sos.BundleTransferPolicy(copy_mode="copy"),
                   sos.BundleTransferPolicy(put_mode="parallel", max_inflight_put=2)):
        spy = WriteSpy(store)
        t = MooncakeBundleTransfer(spy, key_prefix="t/dpdirect")
        ref = t.put(data, policy=policy)
        assert "batch_put_parts" not in spy.calls, policy
        assert "batch_put_parts_commit" not in spy.calls, policy
        assert [a.tolist() for a in t.get(ref)["non_tensor_batch"]["r"]] == \
            [list(range(i)) for i in range(9)]
        t.cleanup_dataproto(ref)


def test_large_rows_are_read_while_the_rest_is_decoded(store):
    """A whole read fetches large ndarray-row payloads on the store's
    completion queue while it reads the small ones and decodes the other
    fields; a failure of any side surfaces (after the queued read is
    done), and the next read is whole and right."""
    rng = np.random.default_rng(5)
    tok = [rng.integers(0, 32000, size=int(k), dtype=np.int32)
           for k in rng.integers(1000, 3000, size=400)]
    data = {"batch": {"r": torch.arange(400, dtype=torch.float32)},
            "non_tensor_batch": {"tok": objs(tok), "uid": objs([f"u{i}é" for i in range(400)])}}
    writer = MooncakeBundleTransfer(store, key_prefix="t/dplate")
    ref = writer.put(data)
    handle = export_dataproto_ref(ref)

    def read():
        return MooncakeBundleTransfer(store, key_prefix="t/dplate").get(handle)

    t = MooncakeBundleTransfer(store, key_prefix="t/dplate")
    got = t.get(handle)
    assert t._readers.reader is not None  # the queue read the large payload
    assert all(np.array_equal(g, w) for g, w in zip(got["non_tensor_batch"]["tok"], tok))
    assert list(got["non_tensor_batch"]["uid"]) == [f"u{i}é" for i in range(400)]
    assert torch.equal(got["batch"]["r"], data["batch"]["r"])
    del got
    buffers = ref.stage_refs["default"].manifest["buffers"]
    # the decoding side fails (corrupt offsets of another field): the error
    # comes out once the large read is done
    uid_off = buffers["non_tensor_batch.uid.offsets"]["chunks"][0]["key"]
    good = bytes(store.get(uid_off))
    assert store.remove(uid_off, True) == 0
    assert store.put(uid_off, np.full(401, 7, np.int64).tobytes()) == 0
    with pytest.raises(ValueError, match="ragged offsets do not match the data"):
        read()
    assert store.remove(uid_off, True) == 0 and store.put(uid_off, good) == 0
    got = read()
    assert all(np.array_equal(g, w) for g, w in zip(got["non_tensor_batch"]["tok"], tok))
    del got
    # a small payload's read fails while the large one is queued: the error
    # comes out once the queued read is done (its memory is written until
    # then), so nothing of it is left in flight on the reader's queue
    import select

    assert store.remove(uid_off, True) == 0
    with pytest.raises(sos.StructuredObjectReadError, match="get failed for .*uid.offsets"):
        t.get(handle)
    aq = t._readers.reader.aq
    assert not select.select([aq.fd()], [], [], 0.3)[0] and aq.reap(8) == [], \
        "the queued read was still running when the error came out"
    assert store.put(uid_off, good) == 0
    got = t.get(handle)
    assert list(got["non_tensor_batch"]["uid"]) == [f"u{i}é" for i in range(400)]
    del got
    # the queued read fails: nothing is returned
    data_key = buffers["non_tensor_batch.tok.data"]["chunks"][0]["key"]
    assert store.remove(data_key, True) == 0
    with pytest.raises(sos.StructuredObjectReadError, match="get failed for .*tok.data"):
        read()
    writer.cleanup_dataproto(ref)


def test_threads_share_a_transfer_for_large_reads(store):
    """Each reading thread gets its own completion queue: concurrent gets
    of large rows through one transfer all come back whole and right."""
    import threading

    t = MooncakeBundleTransfer(store, key_prefix="t/dpthreads")
    refs, want = [], []
    for k in range(3):
        rows = [np.full(100_000 + i, k * 100 + i, np.int32) for i in range(6)]
        refs.append(t.put({"non_tensor_batch": {"r": objs(rows)}}))
        want.append(rows)
    errors = []

    def reader(k):
        try:
            for _ in range(3):
                got = t.get(refs[k])["non_tensor_batch"]["r"]
                assert all(np.array_equal(g, w) for g, w in zip(got, want[k]))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads), "a reader did not finish"
    assert not errors, errors
    for ref in refs:
        t.cleanup_dataproto(ref)


def _memfd_segments(pid):
    """Inodes of the memfd store segments mapped by process ``pid``."""
    with open(f"/proc/{pid}/maps") as f:
        return {fields[4] for fields in map(str.split, f)
                if len(fields) >= 6 and fields[5].startswith("/memfd:mooncake-segment")}


def test_rows_written_to_a_same_host_holder_land_whole(master, spawn_client, make_store,
                                                       monkeypatch):
    """A holder in another process of this host: the writer maps its
    segment and copies a ragged column's thousand row parts into it (after
    the first write, all of a batch under one lookup); the stored bytes are
    those the pure-Python encoders write, and a reader gets every row."""
    import os

    holder = spawn_client("holder")
    name = holder.setup(master, segment=64 * MiB)
    writer = make_store(segment=16 * MiB)
    cfg = ReplicateConfig()
    cfg.preferred_segment = name
    rng = np.random.default_rng(9)
    tok = [rng.integers(0, 32000, size=int(n), dtype=np.int32)
           for n in rng.integers(0, 600, size=1000)]
    tok[10] = None
    uid = [f"p{i}-" + "é" * (i % 9) for i in range(1000)]
    data = {"batch": {"r": torch.arange(1000, dtype=torch.float32)},
            "non_tensor_batch": {"tok": objs(tok), "uid": objs(uid)}}
    t = MooncakeBundleTransfer(writer, key_prefix="t/dphost")
    refs = [t.put(data, config=cfg) for _ in range(3)]
    assert len(_memfd_segments(os.getpid())) >= 2, "the writer did not map the holder"
    with monkeypatch.context() as m:
        for attr in ("_native_utf8_pack", "_native_ragged_describe", "_native_ragged_pack"):
            m.setattr(sos, attr, None)
        plain = t.put(data, config=cfg)
    want = {n: b"".join(bytes(writer.get(c["key"])) for c in s["chunks"])
            for n, s in plain.stage_refs["default"].manifest["buffers"].items()}
    for ref in refs:
        got = t.get(ref)["non_tensor_batch"]
        assert list(got["uid"]) == uid
        assert all((g is None and w is None) or np.array_equal(g, w)
                   for g, w in zip(got["tok"], tok))
        man = ref.stage_refs["default"].manifest["buffers"]
        for n, s in man.items():
            assert b"".join(bytes(writer.get(c["key"])) for c in s["chunks"]) == want[n], n
        t.cleanup_dataproto(ref)
    t.cleanup_dataproto(plain)


def _versions_of(rows):
    """The distinct values the rows of a whole read hold (each version of
    the data payload below is one value repeated)."""
    return set(np.unique(np.concatenate(rows)).tolist())


def test_reads_beside_decoding_copy_alone_on_hosts_of_few_cpus():
    """The large rows of a whole read are copied by the completion queue's
    worker alone up to _LOCAL_READ_MAX_CPUS CPUs, spread over the transfer
    engine's workers beyond (where they do not take the decoding's core)."""
    from mooncake import capi

    assert capi.AQ_BATCH_GET_INTO_LOCAL != capi.AQ_BATCH_GET_INTO
    for cpus in (1, 2, sos._LOCAL_READ_MAX_CPUS):
        assert sos._queued_read_op(capi, cpus) == capi.AQ_BATCH_GET_INTO_LOCAL, cpus
    assert sos._queued_read_op(capi, sos._LOCAL_READ_MAX_CPUS + 1) == capi.AQ_BATCH_GET_INTO
    assert sos._cpus_available() >= 1


def _local_read_policies(aq, op, key, dst, worker, master_pid=None, watch=0.4):
    """Queue a read of ``key`` (op ``op``) into the registered ``dst``;
    returns the read's result and the worker's scheduling policy after it
    completed, and with ``master_pid`` first the policy the worker had
    while it waited in its lookup with the master stopped (seen as
    SCHED_BATCH, or not within ``watch`` s: less than the lookup's lease,
    which counts from the request)."""
    import os
    import select
    import signal
    import time
    from array import array

    from helpers import sigstop

    dst[:] = 0
    during = None
    if master_pid is not None:
        sigstop(master_pid)
    try:
        rc = aq.batch_zc(op, [key], array("Q", [dst.ctypes.data, dst.nbytes]), None, 7)
        assert rc == 0, f"batch_zc returned {rc}"
        if master_pid is not None:
            end = time.monotonic() + watch
            during = os.sched_getscheduler(worker)
            while during != os.SCHED_BATCH and time.monotonic() < end:
                select.select([], [], [], 0.002)
                during = os.sched_getscheduler(worker)
            # the worker's own policy, not the process's
            assert os.sched_getscheduler(0) == os.SCHED_OTHER
    finally:
        if master_pid is not None:
            os.kill(master_pid, signal.SIGCONT)
    got, end = None, time.monotonic() + 30
    while got is None and time.monotonic() < end:
        for tag, result, payload in aq.reap(8):
            if tag == 7:
                got = payload if payload is not None else [result]
        if got is None:
            select.select([aq.fd()], [], [], 1)
    assert got is not None, "the queued read never completed"
    return during, got[0], os.sched_getscheduler(worker)


def test_local_reads_run_as_background_work(fresh_master, make_store, regbuf):
    """The completion queue's worker runs a read it copies alone
    (MC_STORE_AQ_BATCH_GET_INTO_LOCAL) under SCHED_BATCH, so the master's
    answer that wakes it does not preempt the master while the submitter's
    own lookup waits (the DataProto get's small reads waited out the whole
    large copy in half the gets on two CPUs); back to SCHED_OTHER once done.
    A policy the application gave the worker is left as it is."""
    import os

    from mooncake import capi

    holder, reader = make_store(m=fresh_master), make_store(segment=0, m=fresh_master)
    key, nbytes = "t/bg/local", 2 * MiB
    value = np.random.default_rng(5).integers(0, 255, nbytes, dtype=np.uint8)
    assert holder.put(key, value.tobytes()) == 0
    before = set(os.listdir("/proc/self/task"))
    aq = capi.AsyncQueue(reader._store, 1)
    workers = set(os.listdir("/proc/self/task")) - before
    assert len(workers) == 1, f"the queue started threads {workers}"
    worker = int(workers.pop())
    assert os.sched_getscheduler(worker) == os.SCHED_OTHER
    pid = fresh_master.proc.pid
    dst = regbuf(reader, nbytes)

    during, rc, after = _local_read_policies(aq, capi.AQ_BATCH_GET_INTO_LOCAL, key, dst, worker,
                                             pid)
    assert during == os.SCHED_BATCH, "the local read did not run as background work"
    assert rc == nbytes and np.array_equal(dst, value)
    assert after == os.SCHED_OTHER, "the worker was not given back its policy"

    # a plain queued read is not background work: it stays as it was
    during, rc, after = _local_read_policies(aq, capi.AQ_BATCH_GET_INTO, key, dst, worker, pid,
                                             watch=0.1)
    assert (during, after) == (os.SCHED_OTHER, os.SCHED_OTHER), (during, after)
    assert rc == nbytes and np.array_equal(dst, value)

    os.sched_setscheduler(worker, os.SCHED_IDLE, os.sched_param(0))
    during, rc, after = _local_read_policies(aq, capi.AQ_BATCH_GET_INTO_LOCAL, key, dst, worker)
    assert after == os.SCHED_IDLE, "the policy the application chose was replaced"
    assert rc == nbytes and np.array_equal(dst, value)
    aq = None  # closed before the stores


@pytest.mark.parametrize("rows", [256, 1024], ids=["2MiB", "8MiB-helped"])
def test_rows_read_from_a_same_host_holder_are_of_one_version(master, spawn_client,
                                                              make_store, monkeypatch, rows):
    """The large rows of a whole read, copied from a holder process of this
    host by the completion queue's worker (MC_STORE_AQ_BATCH_GET_INTO_LOCAL;
    8 MiB: in 1 MiB pieces, those the worker has not reached copied by the
    reader once its decoding is done, mc_store_aq_help): while another
    client of this process removes the data payload and puts it again with
    another version, or upserts one in place, every read returns the rows
    of one version or fails -- never a mix; and a read after another client
    replaced the payload returns the new version, not what this process
    put."""
    import threading
    import time

    from mooncake import capi

    monkeypatch.setattr(sos, "_cpus_available", lambda: 2)  # the local read on any host
    helped = []
    plain_help = capi.AsyncQueue.help
    monkeypatch.setattr(capi.AsyncQueue, "help",
                        lambda self: helped.append(plain_help(self)) or helped[-1])
    plain_start = sos._Reader.start

    def start_and_help(self, keys, ptrs, sizes):
        # help also at once, while the worker copies: wait() helps only once
        # the decoding is done, and on a loaded machine the worker has then
        # often copied every piece (0 pieces in 59 reads once in CI)
        wait = plain_start(self, keys, ptrs, sizes)
        end, n = time.monotonic() + 0.005, 0
        while not n and time.monotonic() < end:
            n = plain_help(self.aq)
        helped.append(n)
        return wait

    monkeypatch.setattr(sos._Reader, "start", start_and_help)
    holder = spawn_client("holder")
    name = holder.setup(master, segment=64 * MiB)
    reader, racer = make_store(segment=0), make_store(segment=0)
    cfg = ReplicateConfig()
    cfg.preferred_segment = name
    width = 2048  # rows of int32: 2 or 8 MiB, read by the queue
    data = {"batch": {"r": torch.arange(rows, dtype=torch.float32)},
            "non_tensor_batch": {"tok": objs([np.full(width, 1, np.int32)
                                              for _ in range(rows)])}}
    t = MooncakeBundleTransfer(reader, key_prefix="t/dplocal")
    ref = t.put(data, config=cfg)
    chunks = ref.stage_refs["default"].manifest["buffers"]["non_tensor_batch.tok.data"]["chunks"]
    assert len(chunks) == 1 and chunks[0]["bytes"] == rows * width * 4
    key = chunks[0]["key"]
    version = {v: np.full(rows * width, v, np.int32).tobytes() for v in (1, 2, 3)}

    # replaced by another client: the new bytes, whatever this process put
    assert racer.remove(key, True) == 0 and racer.put(key, version[2], cfg) == 0
    assert _versions_of(t.get(ref)["non_tensor_batch"]["tok"]) == {2}
    assert t._readers.reader is not None, "the rows were not read by the completion queue"
    assert t._readers.reader.op == capi.AQ_BATCH_GET_INTO_LOCAL
    assert racer.upsert(key, version[3], cfg) == 0
    assert _versions_of(t.get(ref)["non_tensor_batch"]["tok"]) == {3}

    stop = threading.Event()
    errors = []

    def race():
        try:
            v = 0
            while not stop.is_set():
                v = v % 3 + 1
                if v == 2:
                    racer.upsert(key, version[v], cfg)
                else:
                    racer.remove(key, True)
                    racer.put(key, version[v], cfg)
        except BaseException as e:  # reported below
            errors.append(e)

    th = threading.Thread(target=race)
    th.start()
    seen, failed = set(), 0
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            try:
                got = t.get(ref)["non_tensor_batch"]["tok"]
            except sos.StructuredObjectReadError:
                failed += 1  # removed at that moment: a failed read is allowed
                continue
            vs = _versions_of(got)
            # rows are views of the read's pool lease: dropped before the
            # next read, so that one's lease fits in the pool as well
            del got
            assert len(vs) == 1, f"a read returned the rows of versions {sorted(vs)}"
            seen |= vs
    finally:
        stop.set()
        th.join(30)
    assert not th.is_alive(), "the racing client did not stop"
    assert not errors, errors
    assert len(seen) >= 2, f"the reads never met a change (saw {seen}, {failed} failed)"
    assert helped, "the reader never offered its help to the queue"
    if rows * width * 4 >= 4 * MiB:  # a shared read: the reader took pieces of it
        assert sum(helped) > 0, f"the reader copied no piece in {len(helped)} reads"
    racer.put(key, version[1], cfg)
    t.cleanup_dataproto(ref)

# SPDX-License-Identifier: Apache-2.0
"""mooncake.dataproto_catalog.DataProtoCatalog: every method and every
error message of upstream's catalog, with handles of DataProtos really
stored (a real master and client), and rows resolved through the catalog
read back with MooncakeBundleTransfer.get."""
import numpy as np
import pytest

from mooncake.dataproto_catalog import DataProtoCatalog
from mooncake.structured_object_store import (MooncakeBundleTransfer, export_dataproto_ref,
                                              import_dataproto_ref)


@pytest.fixture
def transfer(store):
    return MooncakeBundleTransfer(store, key_prefix="t/catalog")


def stored(transfer, n, **fields):
    ref = transfer.put({"batch": {k: v for k, v in fields.items()}})
    assert ref.batch_size == n
    return export_dataproto_ref(ref)


def test_update_resolve_list_remove(transfer):
    cat = DataProtoCatalog()
    h1 = stored(transfer, 3, x=np.arange(3) * 10, y=np.arange(3) + 100)
    h2 = stored(transfer, 2, z=np.array([7, 8]))
    out = cat.update("p", ["a", "b", "c"], tags=[{"t": 1}, {}, {"t": 3}], handle=h1)
    assert out == {"keys": ["a", "b", "c"], "tags": [{"t": 1}, {}, {"t": 3}],
                   "fields": ["x", "y"]}
    out = cat.update("p", ["c", "a"], handle=h2)
    assert out["fields"] == ["x", "y", "z"] and out["tags"] == [{"t": 3}, {"t": 1}]
    out = cat.update("p", ["a"], tags=[{"u": 2}])  # tags merge
    assert out["tags"] == [{"t": 1, "u": 2}]
    res = cat.resolve("p", ["c", "a"])
    fid1 = h1["stage_refs"]["default"]["manifest_key"]
    fid2 = h2["stage_refs"]["default"]["manifest_key"]
    assert res["keys"] == ["c", "a"] and res["fields"] == ["x", "y", "z"]
    assert res["field_groups"] == [{"fields": ["x", "y"], "locations": [(fid1, 2), (fid1, 0)]},
                                   {"fields": ["z"], "locations": [(fid2, 0), (fid2, 1)]}]
    assert set(res["handles"]) == {fid1, fid2}
    assert res["handles"][fid1] == export_dataproto_ref(import_dataproto_ref(h1))
    # the rows really are there
    for group in res["field_groups"]:
        fid = group["locations"][0][0]
        rows = [r for _, r in group["locations"]]
        got = transfer.get(res["handles"][fid], rows=rows, fields=group["fields"])
        if "x" in group["fields"]:
            assert got["batch"]["x"].tolist() == [20, 0]
        else:
            assert got["batch"]["z"].tolist() == [7, 8]
    assert cat.resolve("p", ["a"], fields=["z"])["field_groups"] == [
        {"fields": ["z"], "locations": [(fid2, 1)]}]
    # copies, not the catalog's own objects
    res["tags"][0]["t"] = 99
    res["handles"][fid1]["batch_size"] = 0
    assert cat.resolve("p", ["c"])["tags"] == [{"t": 3}]
    assert cat.resolve("p", ["c"])["handles"][fid1]["batch_size"] == 3
    assert cat.list() == {"p": {"a": {"t": 1, "u": 2}, "b": {}, "c": {"t": 3}}}
    assert cat.list("p") == cat.list() and cat.list("q") == {}
    # a fragment nobody refers to any more is dropped
    cat.update("p", ["a", "b", "c"], handle=stored(transfer, 3, x=np.zeros(3),
                                                   y=np.zeros(3)))
    assert fid1 not in cat._fragments
    cat.remove("p", ["a", "nope"])
    assert set(cat.list("p")["p"]) == {"b", "c"}
    cat.remove("p", ["b", "c"])
    assert cat.list() == {} and cat._fragments == {}
    cat.remove("never", ["a"])  # unknown partitions and keys are ignored


def test_error_messages(transfer):
    cat = DataProtoCatalog()
    h = stored(transfer, 2, x=np.arange(2))
    cases = [
        (lambda: cat.update("", ["a"], tags=[{}]), ValueError,
         "partition must be a non-empty string"),
        (lambda: cat.update("p", "ab", tags=[{}]), ValueError,
         "keys must be a sequence of non-empty strings"),
        (lambda: cat.update("p", ["a", ""], tags=[{}, {}]), ValueError,
         "keys must be non-empty strings"),
        (lambda: cat.update("p", ["a", "a"], tags=[{}, {}]), ValueError, "keys must be unique"),
        (lambda: cat.update("p", ["a"]), ValueError,
         "catalog update requires tags or a DataProto handle"),
        (lambda: cat.update("p", ["a"], tags=[{}, {}]), ValueError,
         "tags must have the same length as keys"),
        (lambda: cat.update("p", ["a"], tags=[3]), TypeError, "tags must be mappings"),
        (lambda: cat.update("p", ["a"], handle=h), ValueError,
         "DataProto batch size 2 does not match 1 logical keys"),
        (lambda: cat.update("p", ["a", "b"], handle={**h, "version": 999}), ValueError,
         "unsupported DataProto ref handle version: 999"),
        (lambda: cat.update("p", ["a", "b"], handle={**h, "kind": "x"}), ValueError,
         "unsupported DataProto ref handle kind"),
        (lambda: cat.resolve("p", ["a"]), ValueError,
         r"keys were not found in partition 'p': \['a'\]"),
        (lambda: cat.resolve("p", ["a"], fields="x"), ValueError,
         "field names must be a sequence of non-empty strings"),
    ]
    for call, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            call()
    assert cat.list() == {}  # nothing was changed by a refused update
    two = transfer.append_dataproto_fields(import_dataproto_ref(h),
                                           {"batch": {"y": np.arange(2)}}, stage="other")
    with pytest.raises(ValueError, match="catalog fragments must contain exactly one "
                                         "DataProto stage"):
        cat.update("p", ["a", "b"], handle=export_dataproto_ref(two))
    empty = export_dataproto_ref(transfer.put({"meta_info": {"m": 1}}))
    with pytest.raises(ValueError, match="DataProto catalog fragments cannot be empty"):
        cat.update("p", [], handle=empty)
    cat.update("p", ["a", "b"], handle=h)
    forged = {**h, "meta_info": {"other": True}}
    with pytest.raises(ValueError, match="DataProto fragment id collision: '"):
        cat.update("p", ["c", "d"], handle=forged)
    cat.update("p", ["e"], tags=[{"k": 1}])
    with pytest.raises(ValueError, match=r"fields are not ready for key 'e': \['x'\]"):
        cat.resolve("p", ["a", "e"], fields=["x"])
    with pytest.raises(ValueError, match="requested keys do not contain any fields"):
        cat.resolve("p", ["e"])

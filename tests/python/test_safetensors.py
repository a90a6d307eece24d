# SPDX-License-Identifier: Apache-2.0
"""The safetensors helpers of MooncakeDistributedStore
(save_tensor_to_safetensor, load_tensor_from_safetensor), against a real
master, with upstream's names, return codes and file format
(upstream-parity-2.md §6).

The files are checked with a reader written here from the format's
specification (https://github.com/huggingface/safetensors, "Format"), not
with the package's own code, and the package loads files written by this
module's own writer.  When Debian's python3-safetensors is installed the
files are also read and written with it.

* every dtype this torch has that safetensors names, and shapes from 0-d
  through empty to 3-d, round-trip exactly (dtype, shape, bytes);
* the file holds exactly {key: {dtype, shape, data_offsets}}, no
  __metadata__, the header padded to 8 bytes, the data little-endian;
* without a file name the file is named after the key, in the cwd;
* codes: not set up -600, no tensor under the key -1100, an unwritable
  path -600 (logged);
* load: the entry named like the store key, else the first entry with
  upstream's WARNING; store key = key, or the file name; None (never an
  exception) for a store not set up, a missing, unreadable or empty file.
"""

import json
import logging
import os
import struct
import uuid

import pytest

torch = pytest.importorskip("torch")

FILE_NOT_FOUND = -1100
INVALID_PARAMS = -600

# The format's dtype names and the torch dtypes they stand for.
FORMAT_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
    "BOOL": "bool", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
AVAILABLE = [(name, getattr(torch, t)) for name, t in FORMAT_DTYPES.items()
             if isinstance(getattr(torch, t, None), torch.dtype)]
SHAPES = [(), (0,), (5,), (2, 0, 3), (3, 4), (2, 3, 4)]


def key(tag="st"):
    return f"{tag}-{uuid.uuid4().hex}"


def sample(dtype, shape):
    """A tensor of ``dtype`` whose bytes are not all alike."""
    n = 1
    for d in shape:
        n *= d
    raw = torch.arange(n, dtype=torch.int64) * 37 + 11
    if dtype == torch.bool:
        return (raw % 3 == 0).reshape(shape)
    if dtype.is_floating_point:
        return ((raw.to(torch.float64) - 40) / 8).to(dtype).reshape(shape)
    return (raw % 100).to(dtype).reshape(shape)


def raw_bytes(t):
    """Row-major little-endian bytes of ``t`` (this host is little-endian)."""
    t = t.contiguous()
    n = t.numel() * t.element_size()
    if n == 0:
        return b""
    import ctypes
    return ctypes.string_at(t.data_ptr(), n)


def spec_read(path):
    """A safetensors file read from the format's specification: (header
    dict, header text length, data bytes)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])          # u64, little-endian
    assert 8 + n <= len(blob)
    text = blob[8:8 + n]
    header = json.loads(text.decode("utf-8"))
    return header, n, blob[8 + n:]


def spec_write(path, entries):
    """A safetensors file from the specification: ``entries`` is a list of
    (name, format dtype, shape, bytes) in the order they are laid out."""
    header, data = {}, b""
    for name, dt, shape, b in entries:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def same(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and \
        raw_bytes(a) == raw_bytes(b)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt,dtype", AVAILABLE, ids=[n for n, _ in AVAILABLE])
def test_save_writes_the_format(store, tmp_path, fmt, dtype, shape):
    k = key()
    t = sample(dtype, shape)
    assert store.put_tensor(k, t) == 0
    path = tmp_path / "out.safetensors"
    assert store.save_tensor_to_safetensor(k, str(path)) == 0
    header, n, data = spec_read(path)
    assert n % 8 == 0                              # padded to 8 bytes
    assert header == {k: {"dtype": fmt, "shape": list(shape),
                          "data_offsets": [0, len(raw_bytes(t))]}}   # no __metadata__
    assert data == raw_bytes(t)
    # and back through the store under another key
    k2 = key("back")
    got = store.load_tensor_from_safetensor(k2, str(path))
    assert got is not None and got.device.type == "cpu"
    # the entry is not named k2: the first (only) entry is used
    assert same(got, t)
    assert same(store.get_tensor(k2), t)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt,dtype", AVAILABLE, ids=[n for n, _ in AVAILABLE])
def test_load_reads_a_file_written_from_the_spec(store, tmp_path, fmt, dtype, shape):
    t = sample(dtype, shape)
    k = key()
    path = tmp_path / "spec.safetensors"
    spec_write(path, [(k, fmt, shape, raw_bytes(t))])
    got = store.load_tensor_from_safetensor(k, str(path))
    assert got is not None and same(got, t)
    stored = store.get_tensor(k)
    assert stored is not None and same(stored, t)


def test_save_without_a_file_name_uses_the_key_in_the_cwd(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    k = key()
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    assert store.put_tensor(k, t) == 0
    assert store.save_tensor_to_safetensor(k) == 0
    header, _, data = spec_read(tmp_path / k)
    assert header == {k: {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, 24]}}
    assert data == raw_bytes(t)


def test_save_codes(store, master, tmp_path, caplog):
    from mooncake.store import MooncakeDistributedStore
    fresh = MooncakeDistributedStore()
    assert fresh.save_tensor_to_safetensor("anything", str(tmp_path / "x")) == INVALID_PARAMS
    assert store.save_tensor_to_safetensor(key("missing"), str(tmp_path / "y")) == \
        FILE_NOT_FOUND
    assert not (tmp_path / "y").exists()
    k = key()
    assert store.put_tensor(k, torch.ones(3)) == 0
    with caplog.at_level(logging.ERROR, logger="mooncake.store"):
        rc = store.save_tensor_to_safetensor(k, str(tmp_path / "no-such-dir" / "f"))
    assert rc == INVALID_PARAMS
    assert any(k in r.getMessage() for r in caplog.records)


def test_load_picks_the_named_entry_else_the_first_with_a_warning(store, tmp_path, caplog):
    a, b = torch.tensor([1.5, 2.5]), torch.arange(4, dtype=torch.int16)
    path = tmp_path / "two.safetensors"
    # laid out b-then-a, named so that "a..." sorts first
    ka, kb = "a-" + uuid.uuid4().hex, "b-" + uuid.uuid4().hex
    spec_write(path, [(kb, "I16", (4,), raw_bytes(b)), (ka, "F32", (2,), raw_bytes(a))])
    with caplog.at_level(logging.WARNING, logger="mooncake.store"):
        caplog.clear()
        got = store.load_tensor_from_safetensor(kb, str(path))
        assert same(got, b) and not caplog.records
        other = key("other")
        got = store.load_tensor_from_safetensor(other, str(path))
    assert same(got, a)                       # the first entry, in name order
    assert [r.getMessage() for r in caplog.records] == \
        [f"Key {other} not found in safetensor file; using first entry"]
    assert same(store.get_tensor(other), a)
    assert same(store.get_tensor(kb), b)


def test_load_without_a_key_stores_under_the_file_name(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = key("file")
    t = torch.arange(3, dtype=torch.float64)
    spec_write(tmp_path / name, [(name, "F64", (3,), raw_bytes(t))])
    got = store.load_tensor_from_safetensor(file_name=name)
    assert same(got, t)
    assert same(store.get_tensor(name), t)
    # the file name is the second parameter: key comes first
    got = store.load_tensor_from_safetensor(None, name)
    assert same(got, t)
    with pytest.raises(TypeError):
        store.load_tensor_from_safetensor(name)


def test_load_failures_are_none(store, master, tmp_path):
    from mooncake.store import MooncakeDistributedStore
    t = torch.ones(2)
    good = tmp_path / "good.safetensors"
    spec_write(good, [("x", "F32", (2,), raw_bytes(t))])
    assert MooncakeDistributedStore().load_tensor_from_safetensor("x", str(good)) is None
    assert store.load_tensor_from_safetensor("x", str(tmp_path / "missing")) is None
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff" * 64)
    assert store.load_tensor_from_safetensor("x", str(garbage)) is None
    empty = tmp_path / "empty.safetensors"
    spec_write(empty, [])
    assert store.load_tensor_from_safetensor("x", str(empty)) is None
    short = tmp_path / "short.safetensors"                 # data shorter than described
    short.write_bytes(good.read_bytes()[:-1])
    assert store.load_tensor_from_safetensor("x", str(short)) is None
    unreadable = tmp_path / "dir.safetensors"
    unreadable.mkdir()
    assert store.load_tensor_from_safetensor("x", str(unreadable)) is None


def test_with_the_reference_implementation_when_installed(store, tmp_path):
    """Debian's python3-safetensors, where present, reads what we write
    and writes what we read."""
    st = pytest.importorskip("safetensors.torch")
    k = key()
    t = sample(torch.float32, (3, 4))
    assert store.put_tensor(k, t) == 0
    path = str(tmp_path / "ref.safetensors")
    assert store.save_tensor_to_safetensor(k, path) == 0
    assert same(st.load_file(path)[k], t)
    st.save_file({"r": t}, path)
    assert same(store.load_tensor_from_safetensor("r-" + k, path), t)

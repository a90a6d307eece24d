# SPDX-License-Identifier: Apache-2.0
"""The PyTorch tensor family of MooncakeDistributedStore, against a real
master and real client processes.

The byte layout is checked independently of libmooncake: headers are
parsed and built here with ``struct`` from the upstream field table
(TensorObjectHeader + TensorLayoutMetadata, 304 bytes, little-endian), so
an object written here reads in upstream Mooncake and an object written
the upstream way reads here.
"""

import json
import struct
import subprocess
import sys
import urllib.request

import pytest

torch = pytest.importorskip("torch")

from mooncake.store import ErrorCode, MooncakeDistributedStore, ReplicateConfig  # noqa: E402

HEADER = 304
INVALID = int(ErrorCode.INVALID_PARAMS)

# dtype name -> upstream code; those this torch has are tested.
CODES = {
    "float32": 0, "float64": 1, "int8": 2, "uint8": 3, "int16": 4, "uint16": 5,
    "int32": 6, "uint32": 7, "int64": 8, "uint64": 9, "bool": 10, "float16": 11,
    "bfloat16": 12, "float8_e4m3fn": 13, "float8_e5m2": 14,
}
DTYPES = [n for n in CODES if isinstance(getattr(torch, n, None), torch.dtype)]


def parse_header(raw: bytes) -> dict:
    """The header of a serialized tensor object, field by field."""
    assert len(raw) >= HEADER, f"an object of {len(raw)} bytes has no tensor header"
    magic, version, hsize, dtype, ndim, layout, flags, off, nbytes = \
        struct.unpack_from("<IHHiiIIQQ", raw, 0)
    gshape = list(struct.unpack_from("<8q", raw, 40))
    lshape = list(struct.unpack_from("<8q", raw, 104))
    axis_count, _ = struct.unpack_from("<II", raw, 168)
    axes = []
    for k in range(4):
        kind, idx, rank, count, split, _r0, extent = struct.unpack_from("<6iq", raw, 176 + 32 * k)
        axes.append(dict(kind=kind, axis_index=idx, shard_rank=rank, shard_count=count,
                         split_dim=split, local_extent=extent))
    return dict(magic=magic, version=version, header_size=hsize, dtype=dtype, ndim=ndim,
                layout=layout, flags=flags, data_offset=off, data_bytes=nbytes,
                global_shape=gshape, local_shape=lshape, axis_count=axis_count, axes=axes)


def build_object(dtype_code: int, shape, data: bytes, layout=0, global_shape=None,
                 axes=(), magic=0x4D4F4F4E, version=1, header_size=HEADER,
                 data_offset=HEADER, data_bytes=None, ndim=None) -> bytes:
    """A tensor object assembled the way upstream's serializer lays it out."""
    nd = len(shape) if ndim is None else ndim
    g = list(global_shape if global_shape is not None else shape)
    dims = lambda s: list(s) + [-1] * (8 - len(s))  # noqa: E731
    hdr = struct.pack("<IHHiiIIQQ", magic, version, header_size, dtype_code, nd, layout, 0,
                      data_offset, len(data) if data_bytes is None else data_bytes)
    hdr += struct.pack("<8q", *dims(g)) + struct.pack("<8q", *dims(shape))
    hdr += struct.pack("<II", len(axes), 0)
    for k in range(4):
        a = axes[k] if k < len(axes) else (0, 0, 0, 0, 0, 0)
        hdr += struct.pack("<6iq", a[0], a[1], a[2], a[3], a[4], 0, a[5])
    assert len(hdr) == HEADER
    return hdr + b"\0" * (data_offset - HEADER) + data


def random_tensor(dtype, shape, seed=0):
    """A tensor of ``shape`` whose bytes are random (every bit pattern of
    the float types, NaNs included; 0/1 for bool)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g, dtype=torch.uint8).bool()
    es = torch.empty((), dtype=dtype).element_size()
    n = 1
    for d in shape:
        n *= d
    raw = torch.randint(0, 256, (n * es,), generator=g, dtype=torch.uint8)
    return raw.view(dtype).view(shape)


def same_bits(a, b) -> bool:
    """Equal dtype, shape and bytes (NaN payloads included)."""
    if a is None or b is None or a.dtype != b.dtype or a.shape != b.shape:
        return False
    return tensor_bytes(a) == tensor_bytes(b)


def tensor_bytes(t) -> bytes:
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def reg(regbuf, store, nbytes):
    """A registered buffer and its address."""
    arr = regbuf(store, nbytes)
    return arr, arr.ctypes.data


# ---- without torch ------------------------------------------------------------------


def test_store_imports_without_torch_and_tensor_methods_name_the_package():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import mooncake.store as m\n"
        "s = m.MooncakeDistributedStore()\n"
        "try:\n"
        "    s.get_tensor('k')\n"
        "except ImportError as e:\n"
        "    print('IMPORT-ERROR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "IMPORT-ERROR" in out.stdout and "python3-torch" in out.stdout, out.stdout


# ---- byte layout and dtypes ------------------------------------------------------------


@pytest.mark.parametrize("name", DTYPES)
def test_every_dtype_round_trips_bit_exact_on_the_upstream_layout(store, name):
    dt = getattr(torch, name)
    t = random_tensor(dt, (3, 5, 7), seed=CODES[name])
    key = f"dtype-{name}"
    assert store.put_tensor(key, t) == 0
    back = store.get_tensor(key)
    assert same_bits(back, t), f"{name} did not round-trip bit-exact"
    raw = store.get(key)
    h = parse_header(raw)
    es = t.element_size()
    assert (h["magic"], h["version"], h["header_size"]) == (0x4D4F4F4E, 1, 304)
    assert h["dtype"] == CODES[name] and h["ndim"] == 3 and h["layout"] == 0
    assert h["flags"] == 0 and h["data_offset"] == 304 and h["data_bytes"] == 105 * es
    assert h["global_shape"] == [3, 5, 7, -1, -1, -1, -1, -1]
    assert h["local_shape"] == h["global_shape"] and h["axis_count"] == 0
    assert raw[:4] == b"NOOM" and len(raw) == 304 + 105 * es
    assert raw[304:] == tensor_bytes(t)


@pytest.mark.parametrize("name", DTYPES)
def test_an_object_serialized_the_upstream_way_reads_back(store, name):
    dt = getattr(torch, name)
    t = random_tensor(dt, (4, 6), seed=100 + CODES[name])
    assert store.put(f"upstream-{name}", build_object(CODES[name], [4, 6], tensor_bytes(t))) == 0
    assert same_bits(store.get_tensor(f"upstream-{name}"), t)


def test_a_larger_data_offset_written_upstream_reads_back(store):
    t = torch.arange(12, dtype=torch.int32).view(3, 4)
    assert store.put("offset", build_object(6, [3, 4], tensor_bytes(t), data_offset=512)) == 0
    assert torch.equal(store.get_tensor("offset"), t)


def test_dtypes_without_a_code_are_refused_and_store_nothing(store):
    quantized = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
    for t in (torch.zeros(3, dtype=torch.complex64), torch.zeros(3, dtype=torch.complex128),
              quantized):
        assert store.put_tensor("nocode", t) == INVALID
        assert store.is_exist("nocode") == 0
    assert store.batch_put_tensor(["ok1", "nocode", "ok2"],
                                  [torch.ones(2), torch.zeros(2, dtype=torch.complex64),
                                   torch.ones(3)]) == [0, INVALID, 0]
    assert store.batch_is_exist(["ok1", "nocode", "ok2"]) == [1, 0, 1]


def test_tensors_without_plain_cpu_storage_are_refused(store):
    for name, t in (("sparse", torch.zeros(4).to_sparse()),
                    ("meta", torch.zeros(4, device="meta"))):
        assert store.put_tensor(name, t) == INVALID, name
        assert store.is_exist(name) == 0


def test_non_tensors_raise_type_error(store):
    with pytest.raises(TypeError):
        store.put_tensor("x", [1, 2, 3])
    with pytest.raises(TypeError):
        store.batch_put_tensor(["x"], torch.ones(2))
    with pytest.raises(TypeError):
        store.put_tensor_with_tp("x", torch.ones(4), tp_size="2")
    with pytest.raises(TypeError):
        store.put_tensor(5, torch.ones(4))
    with pytest.raises(ValueError):
        store.batch_put_tensor(["a\0b"], [torch.ones(4)])
    with pytest.raises(TypeError):
        store.get_tensor_into("x", "0x1000", 10)


# ---- shapes and memory ------------------------------------------------------------------


def test_non_contiguous_inputs_are_stored_contiguous(store):
    x = torch.arange(60, dtype=torch.float32).view(6, 10)
    for key, t in (("transposed", x.t()), ("sliced", x[:, ::3]), ("narrowed", x[2:5, 4:]),
                   ("expanded", torch.arange(3.0).expand(4, 3))):
        assert not t.is_contiguous()
        assert store.put_tensor(key, t) == 0
        back = store.get_tensor(key)
        assert back.is_contiguous() and torch.equal(back, t), key
        assert parse_header(store.get(key))["local_shape"][:2] == list(t.shape)


def test_scalars_empty_and_eight_dim_tensors_round_trip(store):
    cases = {
        "scalar": torch.tensor(3.25, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "empty-inner": torch.empty(4, 0, 2, dtype=torch.int16),
        "eight": random_tensor(torch.float32, (1, 2, 1, 3, 1, 2, 1, 2), seed=8),
    }
    for key, t in cases.items():
        assert store.put_tensor(key, t) == 0, key
        back = store.get_tensor(key)
        assert back is not None and back.shape == t.shape and back.dtype == t.dtype, key
        assert same_bits(back, t), key
    h = parse_header(store.get("scalar"))
    assert h["ndim"] == 0 and h["global_shape"] == [-1] * 8 and h["data_bytes"] == 8
    assert parse_header(store.get("empty"))["data_bytes"] == 0


def test_nine_dimensions_are_refused(store):
    assert store.put_tensor("nine", torch.zeros([1] * 9)) == INVALID
    assert store.is_exist("nine") == 0


def test_a_returned_tensor_owns_its_memory(store):
    t = torch.arange(1000, dtype=torch.int64)
    assert store.put_tensor("owned", t) == 0
    back = store.get_tensor("owned")
    assert store.remove("owned", force=True) == 0
    assert store.put_tensor("other", torch.full((1000,), -1, dtype=torch.int64)) == 0
    back2 = store.batch_get_tensor(["other"])[0]
    del back2
    assert torch.equal(back, t), "the tensor changed after its object was removed"
    back += 1  # writable, and writing it touches nothing in the store
    assert torch.equal(back, t + 1)


# ---- batches, configs, put vs upsert --------------------------------------------------------


def test_batch_put_and_get_keep_input_order_with_misses(store):
    ts = [random_tensor(torch.float16, (i + 1, 3), seed=i) for i in range(5)]
    keys = [f"batch-{i}" for i in range(5)]
    assert store.batch_put_tensor(keys, ts) == [0] * 5
    got = store.batch_get_tensor(["batch-3", "missing", "batch-0", "batch-4"])
    assert got[1] is None
    assert same_bits(got[0], ts[3]) and same_bits(got[2], ts[0]) and same_bits(got[3], ts[4])
    assert store.batch_put_tensor(["a", "b"], [torch.ones(1)]) == [INVALID, INVALID]
    assert store.batch_put_tensor([], []) == [] and store.batch_get_tensor([]) == []


def test_put_keeps_the_first_value_and_upsert_replaces_it(store):
    first = torch.ones(4, 4)
    assert store.put_tensor("pu", first) == 0
    assert store.put_tensor("pu", torch.zeros(4, 4)) == 0
    assert torch.equal(store.get_tensor("pu"), first), "put overwrote an existing tensor"
    other = torch.arange(6, dtype=torch.int8).view(2, 3)
    assert store.upsert_tensor("pu", other) == 0
    assert torch.equal(store.get_tensor("pu"), other), "upsert of another shape did not replace"
    assert store.batch_upsert_tensor(["pu", "pu-new"], [first, other]) == [0, 0]
    assert torch.equal(store.get_tensor("pu"), first)
    assert torch.equal(store.get_tensor("pu-new"), other)


def test_a_same_size_upsert_rewrites_the_allocation_in_place(master, store):
    def replica_addrs(key):
        # the admin route reports replicas without granting a read lease,
        # and an unleased object is what the master rewrites in place
        url = f"http://127.0.0.1:{master.metrics_port}/query_key?key={key}"
        with urllib.request.urlopen(url, timeout=10) as r:
            q = json.load(r)
        assert q["lease_remaining_ms"] == 0
        return [r["addr"] for r in q["replicas"]]

    assert store.put_tensor("inplace", torch.zeros(64, dtype=torch.float32)) == 0
    before = replica_addrs("inplace")
    new = torch.arange(64, dtype=torch.int32)  # same byte count, other dtype
    assert store.upsert_tensor("inplace", new) == 0
    assert replica_addrs("inplace") == before, "a same-size upsert moved the object"
    assert store.upsert_tensor("inplace", torch.arange(65, dtype=torch.int32)) == 0
    assert replica_addrs("inplace") != before, "an upsert of another size stayed in place"
    assert torch.equal(store.get_tensor("inplace"), torch.arange(65, dtype=torch.int32))


def test_pub_tensor_takes_a_replicate_config(master, store, spawn_client):
    other = spawn_client("peer")
    other.setup(master)
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    t = random_tensor(torch.bfloat16, (8, 8), seed=5)
    assert store.pub_tensor("pub", t, cfg) == 0
    assert len(store.get_replica_desc("pub")) == 2
    assert store.batch_pub_tensor(["pub-a", "pub-b"], [t, t], cfg) == [0, 0]
    assert [len(v) for v in store.batch_get_replica_desc(["pub-a", "pub-b"]).values()] == [2, 2]
    assert store.upsert_pub_tensor("pub", t * 2, cfg) == 0
    assert same_bits(store.get_tensor("pub"), t * 2)
    assert store.batch_upsert_pub_tensor(["pub-a"], [t * 3], cfg) == [0]
    assert same_bits(store.get_tensor("pub-a"), t * 3)
    pin = ReplicateConfig()
    pin.with_hard_pin = True
    assert store.pub_tensor_with_tp("pub-tp", t, pin, tp_size=2) == 0
    assert store.batch_pub_tensor_with_tp(["pub-tp2"], [t], pin, tp_size=2, split_dim=1) == [0]
    assert torch.equal(torch.cat([store.get_tensor_with_tp("pub-tp2", r, 2)
                                  for r in range(2)], 1), t)


def test_prefer_alloc_in_same_node_works_on_tensor_writes(store, regbuf):
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    t = torch.arange(100, dtype=torch.float32)
    assert store.pub_tensor("local", t, cfg) == 0
    assert store.upsert_pub_tensor("local", t + 1, cfg) == 0
    assert store.batch_pub_tensor_with_tp(["local-tp"], [t], cfg, tp_size=2) == [0]
    assert torch.equal(store.get_tensor("local"), t + 1)
    endpoints = {d.get_memory_descriptor().buffer_descriptor.transport_endpoint_
                 for d in store.get_replica_desc("local")}
    assert endpoints == {store.get_hostname()}
    arr, p = reg(regbuf, store, 4096)
    assert store.put_from("bytes-local", p, 16, cfg) == INVALID  # the bytes API refuses it


# ---- tensor parallelism ------------------------------------------------------------------------


@pytest.mark.parametrize("shape,split_dim,tp", [
    ((8, 6), 0, 4), ((8, 6), 1, 3), ((10, 7), 0, 4), ((5, 7), 1, 3), ((3, 4), 0, 5),
    ((2, 9, 5), 1, 4), ((2, 9, 5), -1, 2),
])
def test_tp_shards_reassemble_to_the_original(store, shape, split_dim, tp):
    t = random_tensor(torch.float32, shape, seed=tp)
    key = f"tp-{'x'.join(map(str, shape))}-{split_dim}-{tp}"
    assert store.put_tensor_with_tp(key, t, tp_rank=1, tp_size=tp, split_dim=split_dim) == 0
    dim = split_dim % len(shape)
    D = shape[dim]
    shards = [store.get_tensor_with_tp(key, r, tp, split_dim) for r in range(tp)]
    for r, s in enumerate(shards):
        lo, hi = D * r // tp, D * (r + 1) // tp
        assert s is not None and s.shape[dim] == hi - lo, f"shard {r} has the wrong extent"
        assert same_bits(s, t.narrow(dim, lo, hi - lo)), f"shard {r} holds the wrong rows"
        h = parse_header(store.get(f"{key}_tp_{r}"))
        assert h["layout"] == 1 and h["axis_count"] == 1 and h["ndim"] == len(shape)
        assert h["global_shape"][:len(shape)] == list(shape)
        assert h["local_shape"][:len(shape)] == list(s.shape)
        assert h["axes"][0] == dict(kind=1, axis_index=0, shard_rank=r, shard_count=tp,
                                    split_dim=dim, local_extent=hi - lo)
    assert same_bits(torch.cat(shards, dim), t)
    assert store.is_exist(key) == 0, "a split tensor also stored its base key"


def test_tp_size_one_is_the_plain_call(store):
    t = torch.arange(6.0)
    assert store.put_tensor_with_tp("tp1", t, tp_size=1) == 0
    assert store.is_exist("tp1") == 1 and store.is_exist("tp1_tp_0") == 0
    assert torch.equal(store.get_tensor_with_tp("tp1"), t)
    assert parse_header(store.get("tp1"))["layout"] == 0


def test_bad_splits_are_refused_and_store_nothing(store):
    t = torch.ones(4, 4)
    assert store.put_tensor_with_tp("bad", t, tp_size=2, split_dim=2) == INVALID
    assert store.put_tensor_with_tp("bad", t, tp_size=2, split_dim=-3) == INVALID
    assert store.put_tensor_with_tp("bad", torch.tensor(1.0), tp_size=2) == INVALID
    assert store.put_tensor_with_tp("bad", t, tp_size=2 ** 40) == INVALID
    assert store.batch_is_exist(["bad_tp_0", "bad_tp_1", "bad"]) == [0, 0, 0]


def test_batch_tp_writes_and_reads_per_key(store):
    ts = [random_tensor(torch.int32, (6, 4), seed=i) for i in range(3)]
    keys = ["btp-0", "btp-1", "btp-2"]
    assert store.batch_put_tensor_with_tp(keys, ts, tp_size=2, split_dim=1) == [0, 0, 0]
    for r in range(2):
        got = store.batch_get_tensor_with_tp(keys + ["btp-missing"], tp_rank=r, tp_size=2)
        assert got[3] is None
        for i in range(3):
            assert torch.equal(got[i], ts[i][:, 2 * r:2 * r + 2])
    assert store.batch_put_tensor_with_tp(keys, ts[:2], tp_size=2) == [INVALID] * 3


# ---- zero copy ---------------------------------------------------------------------


def test_get_tensor_into_views_the_callers_buffer(store, regbuf):
    t = random_tensor(torch.float32, (16, 16), seed=3)
    assert store.put_tensor("zc", t) == 0
    arr, p = reg(regbuf, store, 1 << 16)
    back = store.get_tensor_into("zc", p, arr.nbytes)
    assert back.data_ptr() == p + HEADER, "get_tensor_into copied instead of viewing the buffer"
    assert same_bits(back, t)
    arr[HEADER:HEADER + 4] = [0, 0, 128, 63]  # 1.0f written through the buffer
    assert back[0, 0].item() == 1.0
    assert parse_header(arr[:HEADER].tobytes())["data_bytes"] == 1024


def test_read_modify_write_through_one_registered_buffer(store, regbuf):
    t = torch.arange(64, dtype=torch.float64).view(8, 8)
    assert store.put_tensor("rmw", t) == 0
    arr, p = reg(regbuf, store, 1 << 16)
    view = store.get_tensor_into("rmw", p, arr.nbytes)
    view.mul_(2)
    size = HEADER + view.numel() * view.element_size()
    assert store.put_tensor_from("rmw-2", p, size) == 0
    assert torch.equal(store.get_tensor("rmw-2"), t * 2)
    assert store.upsert_tensor_from("rmw", p, size) == 0
    assert torch.equal(store.get_tensor("rmw"), t * 2)
    assert store.batch_put_tensor_from(["rmw-3", "rmw-4"], [p, p], [size, size]) == [0, 0]
    view.add_(1)
    assert store.batch_upsert_tensor_from(["rmw-3"], [p], [size]) == [0]
    assert torch.equal(store.get_tensor("rmw-3"), t * 2 + 1)
    assert torch.equal(store.get_tensor("rmw-4"), t * 2)


def test_tp_from_a_registered_buffer_splits_without_staging(store, regbuf):
    t = random_tensor(torch.int16, (6, 10), seed=9)
    arr, p = reg(regbuf, store, 1 << 16)
    obj = build_object(4, [6, 10], tensor_bytes(t))
    arr[:len(obj)] = list(obj)
    assert store.put_tensor_with_tp_from("tpf", p, len(obj), tp_rank=0, tp_size=3,
                                         split_dim=1) == 0
    assert torch.equal(torch.cat([store.get_tensor_with_tp("tpf", r, 3) for r in range(3)], 1), t)
    assert store.put_tensor_with_tp_from("tpf1", p, len(obj), tp_size=1) == 0
    assert store.get("tpf1") == obj, "tp_size 1 did not store the buffer as it is"
    assert store.batch_put_tensor_with_tp_from(["tpf-a", "tpf-b"], [p, p], [len(obj), 10],
                                               tp_size=2) == [0, INVALID]
    assert torch.equal(store.get_tensor_with_tp("tpf-a", 1, 2), t[3:])
    # the shards land in buffers of their own and read back there
    arr2, p2 = reg(regbuf, store, 1 << 16)
    got = store.batch_get_tensor_with_tp_into(["tpf-a", "tpf-b"], [p2, p2 + 4096],
                                              [4096, 4096], tp_rank=0, tp_size=2)
    assert got[1] is None and got[0].data_ptr() == p2 + HEADER
    assert torch.equal(got[0], t[:3])
    one = store.get_tensor_with_tp_into("tpf", p2 + 8192, 4096, tp_rank=2, tp_size=3)
    assert torch.equal(one, t[:, 6:]) and one.data_ptr() == p2 + 8192 + HEADER


def test_batch_get_tensor_into_reports_per_key(store, regbuf):
    a, b = torch.ones(10), torch.arange(20, dtype=torch.int64)
    assert store.batch_put_tensor(["bi-a", "bi-b"], [a, b]) == [0, 0]
    assert store.put("bi-bytes", b"not a tensor at all" * 20) == 0
    arr, p = reg(regbuf, store, 1 << 16)
    got = store.batch_get_tensor_into(["bi-b", "bi-miss", "bi-a", "bi-bytes", "bi-b"],
                                      [p, p + 1024, p + 2048, p + 3072, p + 8192],
                                      [1024, 1024, 1024, 1024, 100])
    assert torch.equal(got[0], b) and got[1] is None and torch.equal(got[2], a)
    assert got[3] is None, "a non-tensor object was returned as a tensor"
    assert got[4] is None, "a read into a too-small buffer succeeded"
    assert store.batch_get_tensor_into(["x", "y"], [p], [10]) == [INVALID, INVALID]


def test_zero_copy_bad_buffers_give_none_and_write_nothing_outside(store, regbuf):
    t = torch.arange(100, dtype=torch.float32)
    assert store.put_tensor("bad-zc", t) == 0
    size = HEADER + 400
    arr, p = reg(regbuf, store, 4096)
    arr[:] = 0xAB
    assert store.get_tensor_into("bad-zc", p, size - 1) is None
    assert (arr == 0xAB).all(), "a refused read wrote into the buffer"
    import numpy as np
    loose = np.full(4096, 0xCD, dtype=np.uint8)
    assert store.get_tensor_into("bad-zc", loose.ctypes.data, 4096) is None
    assert (loose == 0xCD).all(), "a read into unregistered memory wrote to it"
    assert store.get_tensor_into("bad-zc-missing", p, 4096) is None
    assert store.get_tensor_into("bad-zc", 0, 4096) is None
    assert store.get_tensor_into("bad-zc", p, -1) is None
    # a buffer of exactly the object size works, and nothing past it moves
    arr[:] = 0xAB
    back = store.get_tensor_into("bad-zc", p + 8, size)
    assert torch.equal(back, t) and (arr[:8] == 0xAB).all() and (arr[8 + size:] == 0xAB).all()


def test_malformed_objects_read_as_none(store):
    data = tensor_bytes(torch.arange(6, dtype=torch.int32))
    bad = {
        "magic": build_object(6, [6], data, magic=0x12345678),
        "version": build_object(6, [6], data, version=2),
        "hsize": build_object(6, [6], data, header_size=303),
        "ndim9": build_object(6, [1] * 8, data, ndim=9),
        "dtype": build_object(99, [6], data),
        "bytes": build_object(6, [6], data, data_bytes=20),
        "shape": build_object(6, [7], data),
        "negative": build_object(6, [-6], data),
        "truncated": build_object(6, [6], data)[:-1],
        "short": build_object(6, [6], data)[:200],
        "axis": build_object(6, [6], data, layout=1, axes=[(1, 0, 2, 2, 0, 3)]),
    }
    for name, obj in bad.items():
        assert store.put(f"mal-{name}", obj) == 0
    keys = [f"mal-{n}" for n in bad]
    assert store.batch_get_tensor(keys) == [None] * len(keys)
    for k in keys:
        assert store.get_tensor(k) is None, k


def test_put_tensor_from_refuses_bad_buffers_per_key(store, regbuf):
    data = tensor_bytes(torch.arange(6, dtype=torch.int32))
    good = build_object(6, [6], data)
    arr, p = reg(regbuf, store, 1 << 14)
    arr[:len(good)] = list(good)
    bad = build_object(6, [6], data, magic=1)
    arr[4096:4096 + len(bad)] = list(bad)
    import numpy as np
    loose = np.frombuffer(bytearray(good), dtype=np.uint8)
    res = store.batch_put_tensor_from(
        ["pf-good", "pf-magic", "pf-short", "pf-long", "pf-loose", "pf-null"],
        [p, p + 4096, p, p, loose.ctypes.data, 0],
        [len(good), len(bad), len(good) - 1, len(good) + 1, len(good), len(good)])
    assert res == [0] + [INVALID] * 5
    assert store.batch_is_exist(["pf-good", "pf-magic", "pf-short", "pf-long", "pf-loose",
                                 "pf-null"]) == [1, 0, 0, 0, 0, 0]
    assert store.put_tensor_from("pf-x", p, len(good), ) == 0
    assert store.put_tensor_from("pf-y", p + 4096, len(bad)) == INVALID
    assert store.batch_put_tensor_from(["a"], [p, p], [1]) == [INVALID]


# ---- across processes ---------------------------------------------------------------


def test_tensors_cross_processes_both_ways(master, store, spawn_client):
    writer = spawn_client("writer")
    writer.setup(master)
    reader = spawn_client("reader")
    reader.setup(master)
    for i, name in enumerate(DTYPES):
        t = random_tensor(getattr(torch, name), (4, 3), seed=50 + i)
        r = writer.call("tensor_put", method="put_tensor", key=f"xp-{name}", dtype=name,
                        shape=[4, 3], hex=tensor_bytes(t).hex())
        assert r["rc"] == 0
        assert same_bits(store.get_tensor(f"xp-{name}"), t), f"{name} from another process"
    t = random_tensor(torch.float32, (9, 4), seed=77)
    r = writer.call("tensor_put", method="put_tensor_with_tp", key="xp-tp", dtype="float32",
                    shape=[9, 4], hex=tensor_bytes(t).hex(), kwargs={"tp_size": 2})
    assert r["rc"] == 0
    assert torch.equal(torch.cat([store.get_tensor_with_tp("xp-tp", r, 2) for r in range(2)]), t)
    # written here, read by another process (its object lives in this process' segment)
    mine = random_tensor(torch.bfloat16, (5, 2), seed=78)
    assert store.put_tensor("xp-mine", mine) == 0
    got = reader.call("tensor_get", method="get_tensor", key="xp-mine")
    assert got["dtype"] == "bfloat16" and got["shape"] == [5, 2]
    assert bytes.fromhex(got["hex"]) == tensor_bytes(mine)
    got = reader.call("tensor_get", method="get_tensor_with_tp", key="xp-tp",
                      kwargs={"tp_rank": 1, "tp_size": 2})
    assert got["shape"] == [5, 4] and bytes.fromhex(got["hex"]) == tensor_bytes(t[4:])
    assert reader.call("tensor_get", method="get_tensor", key="xp-none")["none"] is True


def test_tensor_calls_before_setup(master):
    s = MooncakeDistributedStore()
    code = int(ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS)
    assert s.put_tensor("k", torch.ones(2)) == code
    assert s.batch_put_tensor(["k"], [torch.ones(2)]) == [code]
    assert s.get_tensor("k") is None
    assert s.batch_get_tensor(["k"]) == [None]
    assert s.get_tensor_into("k", 4096, 10) is None
    assert s.put_tensor_from("k", 4096, 400) == code
    assert s.batch_put_tensor_with_tp_from(["k"], [4096], [400], tp_size=2) == [code]

# SPDX-License-Identifier: Apache-2.0
"""The MooncakeDistributedStore contract, in process, against a real master:
return codes, miss behaviour, leases, batches, argument checking, the
error-code table, setup overloads and the before-setup / after-close state.
"""

import re
import uuid

import numpy as np
import pytest

from helpers import LEASE_TTL_MS, MiB, wait_until
from mooncake import capi
from mooncake.store import (ErrorCode, MooncakeDistributedStore, ReplicateConfig,
                            SoftPinAction)
import mooncake.store as mstore

UNAVAILABLE = -1010


def key(tag: str = "k") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


# ---- error codes -------------------------------------------------------------


def test_error_codes_come_from_the_c_table():
    assert ErrorCode.OBJECT_NOT_FOUND == -704
    assert ErrorCode.OBJECT_HAS_LEASE == -706
    assert ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS == UNAVAILABLE
    assert ErrorCode.NOT_SUPPORTED == -1012
    assert ErrorCode(-600).name == "INVALID_PARAMS"
    assert mstore.describe(-704) == "object not found"
    # every entry of MC_STATUS_TABLE, in order, with the C names and values
    table = [capi.mooncake_status_value(i) for i in range(capi.mooncake_status_count())]
    assert len(table) == len(ErrorCode) >= 70
    for value, member in zip(table, ErrorCode):
        assert member.value == value
        assert member.name == capi.mc_status_name(value)
        assert getattr(capi, "MC_" + member.name) == value
    from mooncake import _errors
    assert _errors.OBJECT_ALREADY_EXISTS == -705


# ---- hostname ------------------------------------------------------------------


def test_hostname_is_localhost_and_a_port_in_range(store):
    name = store.get_hostname()
    m = re.fullmatch(r"localhost:(\d+)", name)
    assert m, name
    assert 12300 <= int(m.group(1)) <= 14300


# ---- single-object semantics ------------------------------------------------------


def test_put_get_exist_size(store):
    k = key()
    value = b"Hello, Mooncake Store!"
    assert store.put(k, value) == 0
    assert store.get(k) == value
    assert store.is_exist(k) == 1
    assert store.get_size(k) == len(value)


def test_put_of_existing_key_keeps_the_old_value(store):
    k = key()
    assert store.put(k, b"first") == 0
    assert store.put(k, b"second, longer value") == 0
    assert store.get(k) == b"first"


def test_misses(store):
    k = key("missing")
    assert store.get(k) == b""
    assert isinstance(store.get(k), bytes)
    assert store.is_exist(k) == 0
    assert store.get_size(k) == ErrorCode.OBJECT_NOT_FOUND
    assert store.remove(k) == -704


def test_zero_length_put_stores_nothing(store):
    k = key("empty")
    assert store.put(k, b"") == 0
    assert store.get(k) == b""
    assert store.is_exist(k) == 0


def test_remove_then_missing(store):
    k = key()
    assert store.put(k, b"x" * 100) == 0
    # a fresh object carries no lease: removable at once
    assert store.remove(k) == 0
    assert store.remove(k) == -704
    assert store.get(k) == b""
    assert store.is_exist(k) == 0


def test_remove_during_read_lease(store):
    k = key()
    assert store.put(k, b"leased") == 0
    assert store.get(k) == b"leased"          # grants a lease of LEASE_TTL_MS
    assert store.remove(k) == -706
    assert store.remove(k, force=True) == 0
    assert store.get(k) == b""


def test_lease_from_is_exist_expires(store):
    k = key()
    assert store.put(k, b"v") == 0
    assert store.is_exist(k) == 1             # grants a lease too
    assert store.remove(k) == -706
    # the lease is a deadline: the remove succeeds once it has passed
    wait_until(lambda: store.remove(k) == 0, 10 * LEASE_TTL_MS / 1000,
               "the read lease to expire")
    assert store.is_exist(k) == 0


def test_buffer_protocol_values(store):
    arr = np.arange(4096, dtype=np.uint32).reshape(64, 64)
    cases = {
        "bytearray": (bytearray(b"abc" * 1000), b"abc" * 1000),
        "memoryview": (memoryview(b"0123456789")[2:7], b"23456"),
        "numpy-c": (arr, arr.tobytes()),
        "numpy-fortran": (np.asfortranarray(arr), np.asfortranarray(arr).tobytes(order="C")),
        "strided": (memoryview(bytes(range(200)))[::2], bytes(range(0, 200, 2))),
    }
    for name, (value, expect) in cases.items():
        k = key(name)
        assert store.put(k, value) == 0, name
        assert store.get(k) == expect, name


def test_large_value_roundtrip_in_process(store):
    k = key("big")
    value = np.random.default_rng(1).integers(0, 256, 8 * MiB + 5, dtype=np.uint8).tobytes()
    assert store.put(k, value) == 0
    assert store.get_size(k) == len(value)
    assert store.get(k) == value


# ---- batches --------------------------------------------------------------------------


def test_put_batch_and_get_batch(store):
    keys = [key("b") for _ in range(5)]
    values = [bytes([i]) * (i * 1000 + 1) for i in range(5)]
    assert store.put_batch(keys, values) == 0
    missing = key("nope")
    got = store.get_batch([keys[0], missing, keys[4], keys[2]])
    assert got == [values[0], b"", values[4], values[2]]
    assert store.batch_is_exist([keys[1], missing, keys[3]]) == [1, 0, 1]
    assert store.get_batch(keys) == values


def test_batch_edge_cases(store):
    assert store.get_batch([]) == [b""]          # upstream quirk
    assert store.batch_is_exist([]) == []
    assert store.put_batch([], []) == 0
    k = key()
    assert store.put_batch([k, key()], [b"only one"]) == ErrorCode.INVALID_PARAMS
    assert store.get(k) == b""
    # existing keys keep their value in a batch too
    assert store.put(k, b"old") == 0
    k2 = key()
    assert store.put_batch([k, k2], [b"new", b"v2"]) == 0
    assert store.get_batch([k, k2]) == [b"old", b"v2"]


def test_batch_accepts_tuples_and_buffers(store):
    keys = (key(), key())
    assert store.put_batch(keys, (bytearray(b"one"), memoryview(b"two"))) == 0
    assert store.get_batch(keys) == [b"one", b"two"]


# ---- replicate config --------------------------------------------------------------------


def test_replicate_config_fields():
    c = ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert c.soft_pin_action is SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False and c.prefer_alloc_in_same_node is False
    assert c.preferred_segment == "" and c.preferred_segments == []
    assert c.group_ids is None
    assert [int(a) for a in SoftPinAction] == [0, 1, 2]
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 60_000
    c.soft_pin_ttl_ms = 2**64 - 1
    for bad in (-1, 2**64, "10", 1.5):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(TypeError):
        c.replica_num = -1
    with pytest.raises(TypeError):
        c.soft_pin_action = 7
    with pytest.raises(TypeError):
        c.group_ids = "abc"
    c.group_ids = ["g1"]
    assert "soft_pin_ttl_ms" in repr(c)


def test_put_with_config(store):
    c = ReplicateConfig()
    c.preferred_segment = store.get_hostname()
    c.with_hard_pin = True
    c.group_ids = ["session-a"]
    k = key()
    assert store.put(k, b"pinned", c) == 0
    assert store.get(k) == b"pinned"
    keys = [key(), key()]
    c.group_ids = ["session-a", ""]
    assert store.put_batch(keys, [b"a", b"b"], c) == 0
    assert store.get_batch(keys) == [b"a", b"b"]


def test_soft_pin_ttl_without_enable_is_invalid(store):
    c = ReplicateConfig()
    c.soft_pin_ttl_ms = 1000
    assert store.put(key(), b"x", c) == ErrorCode.INVALID_PARAMS


# ---- argument checking -----------------------------------------------------------------------


def test_wrong_types_raise_type_error(store):
    k = key()
    bad_calls = [
        lambda: store.put(123, b"x"),
        lambda: store.put(k, "a str is not bytes"),
        lambda: store.put(k, 42),
        lambda: store.put(k, None),
        lambda: store.put(k, b"x", config="not a config"),
        lambda: store.get(None),
        lambda: store.get(b"bytes-key"),
        lambda: store.is_exist(1.5),
        lambda: store.get_size(object()),
        lambda: store.remove(7),
        lambda: store.remove(k, force="yes"),
        lambda: store.get_batch("abc"),
        lambda: store.get_batch([k, 3]),
        lambda: store.get_batch(None),
        lambda: store.batch_is_exist([None]),
        lambda: store.put_batch([k], b"x"),
        lambda: store.put_batch([k], ["str"]),
        lambda: store.put_batch("k", [b"x"]),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"bad call #{i} did not raise")
    # nothing was stored by the failed calls and the store still works
    assert store.get(k) == b""
    assert store.put(k, b"fine") == 0 and store.get(k) == b"fine"


def test_embedded_nul_in_key_is_rejected(store):
    with pytest.raises(ValueError):
        store.put("a\0b", b"x")
    with pytest.raises(ValueError):
        store.get_batch(["ok", "a\0b"])


def test_unusable_keys_are_errors_not_crashes(store):
    for bad in ("", "k" * 5000):
        assert store.put(bad, b"v") < 0
        assert store.get(bad) == b""
        assert store.is_exist(bad) <= 0
        assert store.get_size(bad) < 0
        assert store.remove(bad) < 0
        assert store.get_batch([bad, "other"]) == [b"", b""]
        assert store.put_batch([bad], [b"v"]) < 0
    k = key("unicode-é中")
    assert store.put(k, b"utf-8 keys work") == 0
    assert store.get(k) == b"utf-8 keys work"


def test_setup_wrong_types(master):
    s = MooncakeDistributedStore()
    good = ["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr]
    for i, bad in [(0, 5), (1, None), (2, "16MB"), (2, -1), (2, 2**64), (3, 1.0),
                   (4, b"tcp"), (6, 50051)]:
        args = list(good)
        args[i] = bad
        with pytest.raises(TypeError):
            s.setup(*args)
    with pytest.raises(TypeError):
        s.setup(*good[:6])                       # the 7 positional args are required
    with pytest.raises(TypeError):
        s.setup(*good, object())                 # engine: only None
    with pytest.raises(TypeError):
        s.setup(*good, None, enable_ssd_offload="no")
    with pytest.raises(TypeError):
        s.setup(*good, client_http_port="9300")
    with pytest.raises(TypeError):
        s.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE"}, "x")
    assert s.get_hostname() == ""                 # nothing was set up


def test_setup_unsupported_options(master, monkeypatch):
    s = MooncakeDistributedStore()
    args = ["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr]
    # the SSD tier needs a directory (test_tiers.py has the rest)
    monkeypatch.delenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", raising=False)
    assert s.setup(*args, None, enable_ssd_offload=True) == ErrorCode.INVALID_PARAMS
    # the client HTTP server is supported now (test_client_http.py): only
    # a port outside 0..65535 is refused before anything starts
    assert s.setup(*args, enable_client_http_server=True,
                   client_http_port=70000) == ErrorCode.INVALID_PARAMS
    assert s.setup(*args, client_http_port=70000) == ErrorCode.INVALID_PARAMS
    assert s.get_hostname() == ""
    # SGLang's call: the 8th positional engine=None plus keyword options
    assert s.setup(*args, None, enable_ssd_offload=False, ssd_offload_path="",
                   tenant_id="default", enable_client_http_server=False,
                   client_http_port=9300) == 0
    k = key()
    assert s.put(k, b"v") == 0 and s.get(k) == b"v"
    assert s.close() == 0


def test_setup_with_a_dict(master):
    for seg, buf in [("16MB", "16 MB"), ("32 MiB", 16 * MiB), (16 * MiB, "16mb")]:
        s = MooncakeDistributedStore()
        rc = s.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                      "global_segment_size": seg, "local_buffer_size": buf,
                      "master_server_addr": master.addr, "protocol": "tcp",
                      "rdma_devices": "", "ipc_socket_path": ""})
        assert rc == 0
        k = key()
        assert s.put(k, b"dict") == 0 and s.get(k) == b"dict"
        assert s.close() == 0


def test_setup_dict_rejects_bad_values(master):
    """Upstream's setup(dict) parses stringified values and returns an error
    code for a bad one; it does not raise (tests/python/test_setup.py has
    the whole audit)."""
    s = MooncakeDistributedStore()
    base = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
            "master_server_addr": master.addr}
    for bad in ("50%", "-16MB", "16 XB", "", "MB"):
        assert s.setup(dict(base, global_segment_size=bad)) == ErrorCode.INVALID_PARAMS
    for missing in ("local_hostname", "metadata_server"):
        cfg = dict(base)
        del cfg[missing]
        assert s.setup(cfg) == ErrorCode.INVALID_PARAMS
    assert s.setup(dict(base, protocol=5)) != 0        # "5" is no transport
    assert s.get_hostname() == ""


def test_setup_unreachable_master_returns_an_error():
    from helpers import free_port
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                 f"127.0.0.1:{free_port()}")
    assert rc < 0
    assert s.put(key(), b"x") == UNAVAILABLE


# ---- state: before setup, after close --------------------------------------------------------


def check_unavailable(s):
    k = key()
    assert s.put(k, b"x") == UNAVAILABLE
    assert s.get(k) == b""
    assert s.get_batch([k, key()]) == [b"", b""]
    assert s.put_batch([k], [b"x"]) == UNAVAILABLE
    assert s.is_exist(k) == UNAVAILABLE
    assert s.batch_is_exist([k, key()]) == [UNAVAILABLE, UNAVAILABLE]
    assert s.get_size(k) == UNAVAILABLE
    assert s.remove(k) == UNAVAILABLE
    assert s.remove(k, force=True) == UNAVAILABLE
    assert s.get_hostname() == ""


def test_calls_before_setup_return_an_error():
    s = MooncakeDistributedStore()
    check_unavailable(s)
    assert isinstance(s.close(), int)
    check_unavailable(s)


def test_close_then_calls_then_setup_again(master):
    s = MooncakeDistributedStore()
    args = ["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr]
    assert s.setup(*args) == 0
    k = key()
    assert s.put(k, b"before close") == 0
    assert s.close() == 0
    check_unavailable(s)
    assert s.close() in (0, UNAVAILABLE)     # closing twice is harmless
    assert s.setup(*args) == 0
    assert s.get(k) == b""          # its segment went away with close()
    assert s.put(k, b"after") == 0 and s.get(k) == b"after"
    assert s.close() == 0


def test_context_manager_closes(master):
    with MooncakeDistributedStore() as s:
        assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                       master.addr) == 0
        assert s.get_hostname() != ""
    assert s.get_hostname() == ""

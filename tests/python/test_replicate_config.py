# SPDX-License-Identifier: Apache-2.0
"""ReplicateConfig: every field and default, the SoftPinAction and
ReplicaStatus enums, the validation rules of the spec and upstream
(upstream-semantics a.5 and §5.10-11), and placement as reported by
get_replica_desc:

* soft_pin_ttl_ms without ENABLE -> -600; negative -> TypeError; above
  the master's --max_kv_soft_pin_ttl -> -600;
* nof_replica_num: its tier is not available in this release, nor
  dfs_replica_num on a client without MOONCAKE_DFS_ROOT_DIR ->
  NOT_SUPPORTED (-1012); dfs_replica_num 2 -> -600 (the DFS tier itself:
  test_dfs.py);
* group_ids: one id for a single write, one per key for a batch;
* prefer_alloc_in_same_node: put/put_from/batch_put_from -> -600, the
  multi-buffer write accepts it and places the object on the writer;
* preferred_segment places the replica on that segment;
* replica_num=2 with two clients -> replicas on distinct segments.
"""

import uuid

import numpy as np
import pytest

from mooncake.store import ReplicateConfig, ReplicaStatus, SoftPinAction

INVALID_PARAMS = -600
NOT_SUPPORTED = -1012
NO_AVAILABLE_HANDLE = -200

MAX_SOFT_PIN_TTL_MS = 86_400_000  # the master's default --max_kv_soft_pin_ttl

LEASE_TTL_MS = 2000


def key(tag: str = "cfg") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def endpoints(store, k):
    out = []
    for d in store.get_replica_desc(k):
        assert d.is_memory_replica()
        assert d.status == ReplicaStatus.COMPLETE
        out.append(d.get_memory_descriptor().buffer_descriptor.transport_endpoint_)
    return out


def test_fields_and_defaults():
    c = ReplicateConfig()
    assert c.replica_num == 1
    assert c.nof_replica_num == 0
    assert c.dfs_replica_num == 0
    assert c.soft_pin_action == SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False
    assert c.preferred_segment == ""
    assert c.prefer_alloc_in_same_node is False
    assert c.group_ids is None
    # every field round-trips
    c.replica_num = 3
    c.nof_replica_num = 1
    c.dfs_replica_num = 1
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 60_000
    c.with_hard_pin = True
    c.preferred_segment = "localhost:12345"
    c.prefer_alloc_in_same_node = True
    c.group_ids = ["session-a", "", "session-b"]
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (3, 1, 1)
    assert c.soft_pin_action == SoftPinAction.ENABLE and c.soft_pin_ttl_ms == 60_000
    assert c.with_hard_pin is True and c.prefer_alloc_in_same_node is True
    assert c.preferred_segment == "localhost:12345"
    assert list(c.group_ids) == ["session-a", "", "session-b"]
    c.group_ids = None
    c.soft_pin_ttl_ms = None
    assert c.group_ids is None and c.soft_pin_ttl_ms is None


def test_enums():
    assert [(m.name, int(m)) for m in SoftPinAction] == [
        ("PRESERVE", 0), ("ENABLE", 1), ("DISABLE", 2)]
    assert [(m.name, int(m)) for m in ReplicaStatus] == [
        ("UNDEFINED", 0), ("INITIALIZED", 1), ("PROCESSING", 2), ("COMPLETE", 3),
        ("REMOVED", 4), ("FAILED", 5)]


def test_type_errors_on_assignment():
    c = ReplicateConfig()
    with pytest.raises(TypeError):
        c.soft_pin_ttl_ms = -1
    with pytest.raises(TypeError):
        c.soft_pin_ttl_ms = 2 ** 64
    with pytest.raises(TypeError):
        c.replica_num = "2"
    with pytest.raises(TypeError):
        c.group_ids = [1, 2]
    assert c.soft_pin_ttl_ms is None and c.replica_num == 1


# ---- soft pin --------------------------------------------------------------------------


@pytest.mark.parametrize("action", [SoftPinAction.PRESERVE, SoftPinAction.DISABLE])
def test_soft_pin_ttl_needs_enable(store, action):
    c = ReplicateConfig()
    c.soft_pin_action = action
    c.soft_pin_ttl_ms = 60_000
    k = key()
    assert store.put(k, b"v", c) == INVALID_PARAMS
    assert store.is_exist(k) == 0
    assert store.put_batch([k], [b"v"], c) == INVALID_PARAMS
    assert store.upsert(k, b"v", c) == INVALID_PARAMS
    assert store.is_exist(k) == 0


def test_soft_pin_enable(store):
    for ttl in (None, 0, 60_000, MAX_SOFT_PIN_TTL_MS):
        c = ReplicateConfig()
        c.soft_pin_action = SoftPinAction.ENABLE
        c.soft_pin_ttl_ms = ttl
        k = key()
        assert store.put(k, b"pinned", c) == 0, ttl
        assert store.get(k) == b"pinned"


def test_soft_pin_ttl_above_the_master_maximum(store):
    c = ReplicateConfig()
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = MAX_SOFT_PIN_TTL_MS + 1
    k = key()
    assert store.put(k, b"v", c) == INVALID_PARAMS
    assert store.is_exist(k) == 0


def test_soft_pin_ttl_maximum_is_the_masters_flag(make_store):
    from helpers import Master

    m = Master(extra_args=["--default_kv_soft_pin_ttl=30000",
                           "--max_kv_soft_pin_ttl=60000"])
    try:
        s = make_store(m=m)
        c = ReplicateConfig()
        c.soft_pin_action = SoftPinAction.ENABLE
        c.soft_pin_ttl_ms = 60_001
        k = key()
        assert s.put(k, b"v", c) == INVALID_PARAMS
        assert s.is_exist(k) == 0
        c.soft_pin_ttl_ms = 60_000
        assert s.put(k, b"v", c) == 0
        assert s.get(k) == b"v"
        s.close()
    finally:
        m.stop()


def test_hard_pin(store):
    c = ReplicateConfig()
    c.with_hard_pin = True
    k = key()
    assert store.put(k, b"hard", c) == 0
    assert store.get(k) == b"hard"


# ---- replica counts ---------------------------------------------------------------------


def test_nof_and_dfs_replicas_are_not_supported_yet(store):
    # NoF replicas exist (test_nof.py), but no NoF segment is mounted here
    c = ReplicateConfig()
    c.nof_replica_num = 1
    k = key()
    assert store.put(k, b"v", c) == NO_AVAILABLE_HANDLE
    assert store.is_exist(k) == 0
    c = ReplicateConfig()
    c.dfs_replica_num = 1
    assert store.put(k, b"v", c) == NOT_SUPPORTED
    assert store.is_exist(k) == 0


def test_replica_count_validation(store):
    k = key()
    c = ReplicateConfig()
    c.dfs_replica_num = 2
    assert store.put(k, b"v", c) == INVALID_PARAMS
    c = ReplicateConfig()
    c.replica_num = 0
    assert store.put(k, b"v", c) == INVALID_PARAMS
    # DFS-only placement is not allowed either
    c.dfs_replica_num = 1
    assert store.put(k, b"v", c) == INVALID_PARAMS
    assert store.is_exist(k) == 0


# ---- group ids ---------------------------------------------------------------------------


def test_group_ids_single_write(store):
    c = ReplicateConfig()
    c.group_ids = ["session-a"]
    k = key()
    assert store.put(k, b"value-a", c) == 0
    assert store.get(k) == b"value-a"
    c.group_ids = ["a", "b"]
    k2 = key()
    assert store.put(k2, b"v", c) == INVALID_PARAMS
    c.group_ids = []
    assert store.put(k2, b"v", c) == INVALID_PARAMS
    assert store.is_exist(k2) == 0
    c.group_ids = [""]                       # explicitly ungrouped
    assert store.put(k2, b"v", c) == 0


def test_group_ids_batch_write(store, regbuf):
    keys = [key("ga"), key("gb"), key("gc")]
    c = ReplicateConfig()
    c.group_ids = ["session-a", "", "session-b"]
    assert store.put_batch(keys, [b"value-a", b"value-b", b"value-c"], c) == 0
    assert store.get_batch(keys) == [b"value-a", b"value-b", b"value-c"]
    more = [key("gd"), key("ge"), key("gf")]
    c.group_ids = ["x", "y"]
    assert store.put_batch(more, [b"1", b"2", b"3"], c) == INVALID_PARAMS
    buf = regbuf(store, 64)
    p = buf.ctypes.data
    assert store.batch_put_from(more, [p, p, p], [8, 8, 8], c) == [INVALID_PARAMS] * 3
    assert store.batch_is_exist(more) == [0, 0, 0]
    c.group_ids = ["x", "y", "z"]
    assert store.batch_put_from(more, [p, p, p], [8, 8, 8], c) == [0, 0, 0]


def test_config_reused_after_a_batch_that_refused_keys(store, regbuf):
    """A batch that refuses some keys sends the group ids of the rest only;
    that must not change the config's own (cached) native form, which the
    next call uses whole."""
    c = ReplicateConfig()
    c.group_ids = ["ga", "gb", "gc"]
    p = regbuf(store, 64).ctypes.data
    first = [key("ra"), key("rb"), key("rc")]
    assert store.batch_put_from_multi_buffers(first, [[p], [p, p], [p]], [[8], [8], [8]],
                                              c) == [0, INVALID_PARAMS, 0]
    more = [key("rd"), key("re"), key("rf")]
    assert store.batch_put_from_multi_buffers(more, [[p]] * 3, [[8]] * 3, c) == [0, 0, 0]
    assert store.batch_is_exist(first + more) == [1, 0, 1, 1, 1, 1]
    # the same for put sessions, whose refused keys are those of bad sizes
    opened = [key("sa"), key("sb"), key("sc")]
    assert store.batch_put_session_start(opened, [8, -1, 8], c) == [0, INVALID_PARAMS, 0]
    later = [key("sd"), key("se"), key("sf")]
    assert store.batch_put_session_start(later, [8, 8, 8], c) == [0, 0, 0]
    assert store.batch_put_session_revoke([opened[0], opened[2]] + later) == [0] * 5


# ---- placement ------------------------------------------------------------------------


def test_prefer_alloc_in_same_node_restrictions(store, regbuf):
    c = ReplicateConfig()
    c.prefer_alloc_in_same_node = True
    buf = regbuf(store, 4096)
    p = buf.ctypes.data
    k = key()
    assert store.put(k, b"v", c) == INVALID_PARAMS
    assert store.put_from(k, p, 16, c) == INVALID_PARAMS
    assert store.batch_put_from([k, key()], [p, p], [16, 16], c) == [INVALID_PARAMS] * 2
    assert store.is_exist(k) == 0
    # only one replica with local-first placement
    c.replica_num = 2
    assert store.batch_put_from_multi_buffers([k], [[p]], [[16]], c) == [INVALID_PARAMS]
    assert store.is_exist(k) == 0


def test_prefer_alloc_in_same_node_places_on_the_writers_host(master, make_store, regbuf):
    """Local-first placement is host-aware: segments on the writer's host
    come first.  The other clients advertise themselves as 127.0.0.1 and
    the writer as localhost, so the writer's segment is the only one on its
    host -- and it has the least room, so normal placement would not
    favour it."""
    from mooncake.store import MooncakeDistributedStore

    others = []
    try:
        for _ in range(2):
            s = MooncakeDistributedStore()
            assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "",
                           master.addr) == 0
            others.append(s)
        writer = make_store(segment=16 << 20)
        me = writer.get_hostname()
        assert all(not o.get_hostname().startswith("localhost:") for o in others)
        c = ReplicateConfig()
        c.prefer_alloc_in_same_node = True
        src = regbuf(writer, 8 * 4096)
        src[:] = np.arange(src.nbytes, dtype=np.uint64).astype(np.uint8)
        p = src.ctypes.data
        keys = [key(f"local{i}") for i in range(8)]
        rcs = writer.batch_put_from_multi_buffers(
            keys, [[p + i * 4096, p + i * 4096 + 100] for i in range(8)],
            [[100, 3996] for _ in range(8)], c)
        assert rcs == [0] * 8
        for i, k in enumerate(keys):
            assert endpoints(writer, k) == [me]
            assert others[0].get(k) == src[i * 4096:(i + 1) * 4096].tobytes()
        # without the flag the same writes spread over the segments
        plain = [key(f"plain{i}") for i in range(16)]
        rcs = writer.batch_put_from_multi_buffers(
            plain, [[p] for _ in plain], [[4096] for _ in plain])
        assert rcs == [0] * 16
        assert {endpoints(writer, k)[0] for k in plain} != {me}
    finally:
        for o in others:
            o.close()


def test_preferred_segment(make_store):
    a = make_store()
    b = make_store()
    for target in (a, b):
        c = ReplicateConfig()
        c.preferred_segment = target.get_hostname()
        for i in range(4):
            k = key(f"pref{i}")
            assert a.put(k, b"placed %d" % i, c) == 0
            assert endpoints(a, k) == [target.get_hostname()]
            assert b.get(k) == b"placed %d" % i


def test_two_replicas_on_distinct_segments(make_store):
    a = make_store()
    b = make_store()
    c = ReplicateConfig()
    c.replica_num = 2
    for writer in (a, b):
        k = key()
        assert writer.put(k, b"twice", c) == 0
        eps = endpoints(writer, k)
        assert sorted(eps) == sorted([a.get_hostname(), b.get_hostname()])
        assert a.get(k) == b.get(k) == b"twice"
    # the zero-copy and upsert writes follow the same config
    src = np.frombuffer(b"z" * 4096, dtype=np.uint8).copy()
    assert a.register_buffer(src.ctypes.data, src.nbytes) == 0
    try:
        ks = [key("zc2a"), key("zc2b")]
        assert a.batch_put_from(ks, [src.ctypes.data] * 2, [4096, 100], c) == [0, 0]
        assert a.put_from(key("zc2c"), src.ctypes.data, 10, c) == 0
        for k in ks:
            assert sorted(endpoints(a, k)) == sorted([a.get_hostname(), b.get_hostname()])
        assert a.upsert(ks[0], b"resized", c) == 0
        assert sorted(endpoints(a, ks[0])) == sorted([a.get_hostname(), b.get_hostname()])
        assert b.get(ks[0]) == b"resized"
    finally:
        a.unregister_buffer(src.ctypes.data)
    # more replicas than segments: best effort, as many as there are
    c.replica_num = 3
    k = key()
    assert a.put(k, b"thrice?", c) == 0
    assert len(set(endpoints(a, k))) == 2


def test_with_group_ids_is_a_copy_with_those_ids():
    """ReplicateConfig._with_group_ids(ids): copy.copy and then group_ids
    set -- every setting kept, the original untouched, the native form of
    the copy made from the new ids."""
    import copy

    c = ReplicateConfig()
    c.replica_num = 2
    c.preferred_segment = "h:1"
    c.preferred_segments = ["h:2"]
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 77
    c.with_hard_pin = True
    c.group_ids = ["old"]
    c._to_c()  # cached on the original
    got = c._with_group_ids(["g", "g"])
    want = copy.copy(c)
    want.group_ids = ["g", "g"]
    assert type(got) is ReplicateConfig and repr(got) == repr(want)
    assert got.group_ids == ["g", "g"] and c.group_ids == ["old"]
    assert got._c_cache is None and got._to_c() is not c._to_c()

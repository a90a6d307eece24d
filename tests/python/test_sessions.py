# SPDX-License-Identifier: Apache-2.0
"""Session-based ranged multi-buffer transfers (layer-wise KV load/save).

Put: batch_put_session_start -> batch_put_from_multi_buffer_ranges (per
layer) -> batch_put_session_end / batch_put_session_revoke.  Get:
batch_get_session_start -> batch_get_into_multi_buffer_ranges ->
batch_get_session_end.  Checked: the spec's example verbatim, byte-exact
contents, session misuse (ranges without a session, after end, past the
object size, from unregistered memory), revoke making the key absent,
range reads making no master round trip (they complete while the master
is stopped), and a get session outliving its lease (LEASE_EXPIRED).
"""

import os
import signal
import threading
import uuid

import numpy as np
import pytest

from helpers import Master, wait_until

INVALID_PARAMS = -600
INVALID_WRITE = -700
LEASE_EXPIRED = -707

LEASE_TTL_MS = 5000


def key(tag: str = "s") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def test_spec_session_example(store):
    page = 1024
    layers = 4
    keys = ["block0", "block1"]
    object_sizes = [page * layers] * len(keys)

    # Prepare one registered buffer per layer for each key
    src = [np.full(page, i, dtype=np.uint8) for i in range(layers)]
    dst = [np.zeros(page, dtype=np.uint8) for _ in range(layers)]
    for buf in src + dst:
        assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    try:
        assert all(rc == 0 for rc in store.batch_put_session_start(keys, object_sizes))
        for layer in range(layers):
            ptrs = [[src[layer].ctypes.data] for _ in keys]
            sizes = [[page] for _ in keys]
            offsets = [[layer * page] for _ in keys]
            rcs = store.batch_put_from_multi_buffer_ranges(keys, ptrs, sizes, offsets)
            assert all(rc == page for rc in rcs)
        assert all(rc == 0 for rc in store.batch_put_session_end(keys))

        assert all(rc == 0 for rc in store.batch_get_session_start(keys))
        for layer in range(layers):
            ptrs = [[dst[layer].ctypes.data] for _ in keys]
            sizes = [[page] for _ in keys]
            offsets = [[layer * page] for _ in keys]
            rcs = store.batch_get_into_multi_buffer_ranges(keys, ptrs, sizes, offsets)
            assert all(rc == page for rc in rcs)
        assert store.batch_get_session_end(keys) == 0

        # beyond the example: what landed is exact, and plain reads agree
        for layer in range(layers):
            assert (dst[layer] == layer).all()
        expected = b"".join(bytes([i]) * page for i in range(layers))
        assert store.get_batch(keys) == [expected, expected]
    finally:
        for buf in src + dst:
            store.unregister_buffer(buf.ctypes.data)


def test_several_ranges_per_key_and_distinct_contents(store, regbuf):
    keys = [key("a"), key("b")]
    size = 8192
    values = [os.urandom(size) for _ in keys]
    src = regbuf(store, 2 * size)
    for i, v in enumerate(values):
        src[i * size:(i + 1) * size] = np.frombuffer(v, dtype=np.uint8)
    base = src.ctypes.data
    assert store.batch_put_session_start(keys, [size, size]) == [0, 0]
    # key a in two ranges (second half first), key b in three
    rcs = store.batch_put_from_multi_buffer_ranges(
        keys,
        [[base + 4096, base], [base + size, base + size + 1000, base + size + 5000]],
        [[4096, 4096], [1000, 4000, 3192]],
        [[4096, 0], [0, 1000, 5000]])
    assert rcs == [size, size]
    assert store.batch_put_session_end(keys) == [0, 0]
    assert store.get_batch(keys) == values

    dst = regbuf(store, 3 * size, fill=0xEE)
    d = dst.ctypes.data
    assert store.batch_get_session_start(keys) == [0, 0]
    rcs = store.batch_get_into_multi_buffer_ranges(
        keys, [[d, d + 100], [d + 2 * size]], [[100, 50], [size]], [[8000, 0], [0]])
    assert rcs == [150, size]
    assert store.batch_get_session_end(keys) == 0
    assert dst[:100].tobytes() == values[0][8000:8100]
    assert dst[100:150].tobytes() == values[0][:50]
    assert dst[2 * size:].tobytes() == values[1]
    assert (dst[150:2 * size] == 0xEE).all()


def test_put_session_not_readable_before_end(store, regbuf):
    k = key()
    src = regbuf(store, 1024, fill=7)
    assert store.batch_put_session_start([k], [1024]) == [0]
    assert store.batch_put_from_multi_buffer_ranges([k], [[src.ctypes.data]], [[1024]],
                                                    [[0]]) == [1024]
    assert store.is_exist(k) == 0
    assert store.get(k) == b""
    assert store.batch_get_session_start([k])[0] < 0
    assert store.batch_put_session_end([k]) == [0]
    assert store.get(k) == b"\x07" * 1024


def test_revoke_makes_the_key_absent(store, regbuf):
    k = key()
    src = regbuf(store, 2048, fill=1)
    assert store.batch_put_session_start([k], [2048]) == [0]
    assert store.batch_put_from_multi_buffer_ranges([k], [[src.ctypes.data]], [[2048]],
                                                    [[0]]) == [2048]
    assert store.batch_put_session_revoke([k]) == [0]
    assert store.is_exist(k) == 0
    assert store.get(k) == b""
    # the key is free again: a new session can write it
    src[:] = 2
    assert store.batch_put_session_start([k], [2048]) == [0]
    assert store.batch_put_from_multi_buffer_ranges([k], [[src.ctypes.data]], [[2048]],
                                                    [[0]]) == [2048]
    assert store.batch_put_session_end([k]) == [0]
    assert store.get(k) == b"\x02" * 2048


def test_write_after_end_is_refused(store, regbuf):
    k = key()
    src = regbuf(store, 1024, fill=3)
    assert store.batch_put_session_start([k], [1024]) == [0]
    assert store.batch_put_from_multi_buffer_ranges([k], [[src.ctypes.data]], [[1024]],
                                                    [[0]]) == [1024]
    assert store.batch_put_session_end([k]) == [0]
    src[:] = 9
    rcs = store.batch_put_from_multi_buffer_ranges([k], [[src.ctypes.data]], [[1024]], [[0]])
    assert len(rcs) == 1 and rcs[0] < 0
    assert store.get(k) == b"\x03" * 1024
    # ending or revoking a session that is gone is an error, not a crash
    assert store.batch_put_session_end([k])[0] < 0
    assert store.batch_put_session_revoke([k])[0] < 0
    assert store.is_exist(k) == 1


def test_put_ranges_without_a_session_or_outside_the_object(store, regbuf):
    src = regbuf(store, 4096, fill=5)
    p = src.ctypes.data
    nosession = key("nosession")
    assert store.batch_put_from_multi_buffer_ranges([nosession], [[p]], [[16]], [[0]])[0] < 0
    assert store.is_exist(nosession) == 0

    k = key()
    assert store.batch_put_session_start([k], [1000]) == [0]
    # 1 byte past the end of the object
    assert store.batch_put_from_multi_buffer_ranges([k], [[p]], [[100]], [[901]])[0] < 0
    # unregistered source memory
    loose = np.zeros(100, dtype=np.uint8)
    assert store.batch_put_from_multi_buffer_ranges([k], [[loose.ctypes.data]], [[100]],
                                                    [[0]]) == [INVALID_PARAMS]
    # mismatched inner lists
    assert store.batch_put_from_multi_buffer_ranges([k], [[p, p]], [[100]], [[0]]) \
        == [INVALID_PARAMS]
    assert store.batch_put_from_multi_buffer_ranges([k], [[p]], [[1000]], [[0]]) == [1000]
    assert store.batch_put_session_end([k]) == [0]
    assert store.get(k) == b"\x05" * 1000


def test_get_ranges_without_a_session_or_past_the_object(store, regbuf):
    k = key()
    data = os.urandom(3000)
    assert store.put(k, data) == 0
    dst = regbuf(store, 4096, fill=0xAB)
    d = dst.ctypes.data
    # no session for k yet
    assert store.batch_get_into_multi_buffer_ranges([k], [[d]], [[100]], [[0]])[0] < 0
    assert (dst == 0xAB).all()

    missing = key("missing")
    rcs = store.batch_get_session_start([k, missing])
    assert rcs[0] == 0 and rcs[1] == -704
    assert store.batch_get_into_multi_buffer_ranges([missing], [[d]], [[10]], [[0]])[0] < 0
    # past the object size
    assert store.batch_get_into_multi_buffer_ranges([k], [[d]], [[101]], [[2900]])[0] < 0
    # unregistered destination
    loose = np.full(100, 0x11, dtype=np.uint8)
    assert store.batch_get_into_multi_buffer_ranges([k], [[loose.ctypes.data]], [[100]],
                                                    [[0]]) == [INVALID_PARAMS]
    assert (loose == 0x11).all()
    assert (dst == 0xAB).all()
    # a valid range still works, to the last byte
    assert store.batch_get_into_multi_buffer_ranges([k], [[d]], [[100]], [[2900]]) == [100]
    assert dst[:100].tobytes() == data[2900:]
    assert store.batch_get_session_end([k]) == 0
    # after end the session is gone
    assert store.batch_get_into_multi_buffer_ranges([k], [[d]], [[100]], [[0]])[0] < 0


def test_get_ranges_make_no_master_round_trip(fresh_master, make_store, regbuf):
    store = make_store(m=fresh_master)
    k = key()
    data = os.urandom(65536)
    assert store.put(k, data) == 0
    dst = regbuf(store, 65536)
    assert store.batch_get_session_start([k]) == [0]
    result = []
    t = threading.Thread(target=lambda: result.append(
        store.batch_get_into_multi_buffer_ranges([k], [[dst.ctypes.data]], [[65536]], [[0]])))
    fresh_master.proc.send_signal(signal.SIGSTOP)
    try:
        t.start()
        t.join(5.0)
        finished = not t.is_alive()
    finally:
        fresh_master.proc.send_signal(signal.SIGCONT)
    t.join(30.0)
    assert finished, "a session range read waited for the (stopped) master"
    assert result == [[65536]]
    assert dst.tobytes() == data
    assert store.batch_get_session_end([k]) == 0


def test_get_session_lease_expiry(make_store, regbuf):
    m = Master(lease_ttl_ms=1000)
    try:
        store = make_store(m=m)
        k = key()
        data = os.urandom(4096)
        assert store.put(k, data) == 0
        dst = regbuf(store, 4096)
        d = dst.ctypes.data
        assert store.batch_get_session_start([k]) == [0]
        assert store.batch_get_into_multi_buffer_ranges([k], [[d]], [[4096]], [[0]]) == [4096]
        assert dst.tobytes() == data
        # the cached lease runs out after 1 s: the range is refused then
        wait_until(lambda: store.batch_get_into_multi_buffer_ranges(
            [k], [[d]], [[16]], [[0]]) == [LEASE_EXPIRED], 10.0,
            "a session range read to report LEASE_EXPIRED", 0.1)
        assert store.batch_get_session_end([k]) == 0
        # a new session takes a new lease
        dst[:] = 0
        assert store.batch_get_session_start([k]) == [0]
        assert store.batch_get_into_multi_buffer_ranges([k], [[d]], [[4096]], [[0]]) == [4096]
        assert dst.tobytes() == data
        assert store.batch_get_session_end([k]) == 0
        store.close()
    finally:
        m.stop()


def test_sessions_against_another_process_segment(store, master, spawn_client, regbuf):
    """Put-session ranges written into, and get-session ranges read from,
    another process's segment."""
    import hashlib

    from mooncake.store import ReplicateConfig

    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    cfg = ReplicateConfig()
    cfg.preferred_segment = owner_name
    page, layers = 64 * 1024, 4
    keys = [key("ra"), key("rb")]
    src = regbuf(store, page * layers)
    src[:] = np.frombuffer(os.urandom(page * layers), dtype=np.uint8)
    assert store.batch_put_session_start(keys, [page * layers] * 2, cfg) == [0, 0]
    for layer in reversed(range(layers)):
        ptr = src.ctypes.data + layer * page
        assert store.batch_put_from_multi_buffer_ranges(
            keys, [[ptr], [ptr]], [[page], [page]], [[layer * page], [layer * page]]) \
            == [page, page]
    assert store.batch_put_session_end(keys) == [0, 0]
    want = hashlib.sha256(src.tobytes()).hexdigest()
    for k in keys:
        [d] = store.get_replica_desc(k)
        assert d.get_memory_descriptor().buffer_descriptor.transport_endpoint_ == owner_name
        got = owner.call("get", key=k)
        assert (got["len"], got["sha256"]) == (page * layers, want)

    dst = regbuf(store, page * layers)
    assert store.batch_get_session_start(keys[:1]) == [0]
    for layer in range(layers):
        ptr = dst.ctypes.data + layer * page
        assert store.batch_get_into_multi_buffer_ranges(
            keys[:1], [[ptr]], [[page]], [[layer * page]]) == [page]
    assert store.batch_get_session_end(keys[:1]) == 0
    assert dst.tobytes() == src.tobytes()


def test_put_session_start_config_rules(store, regbuf):
    from mooncake.store import ReplicateConfig

    src = regbuf(store, 1024, fill=4)
    p = src.ctypes.data
    keys = [key("g0"), key("g1")]
    # group_ids: one per key
    cfg = ReplicateConfig()
    cfg.group_ids = ["only-one"]
    rcs = store.batch_put_session_start(keys, [1024, 1024], cfg)
    assert rcs == [INVALID_PARAMS, INVALID_PARAMS]
    cfg.group_ids = ["grp", ""]
    assert store.batch_put_session_start(keys, [1024, 1024], cfg) == [0, 0]
    assert store.batch_put_from_multi_buffer_ranges(keys, [[p], [p]], [[1024], [1024]],
                                                    [[0], [0]]) == [1024, 1024]
    assert store.batch_put_session_end(keys) == [0, 0]
    assert store.get_batch(keys) == [b"\x04" * 1024] * 2

    # NoF only as the flexible dual-replica config (replica_num 1 + nof 1),
    # which writes the memory replica; other NoF configs are refused
    k = key("nof")
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    cfg.nof_replica_num = 1
    assert store.batch_put_session_start([k], [1024], cfg)[0] < 0
    cfg.replica_num = 1
    assert store.batch_put_session_start([k], [1024], cfg) == [0]
    assert store.batch_put_from_multi_buffer_ranges([k], [[p]], [[1024]], [[0]]) == [1024]
    assert store.batch_put_session_end([k]) == [0]
    assert store.get(k) == b"\x04" * 1024
    [d] = store.get_replica_desc(k)
    assert d.is_memory_replica()


def test_session_write_into_memory_mounted_again_is_refused(store, master, spawn_client,
                                                            regbuf):
    """A put session's replica lives in a segment its holder unmounts; the
    holder mounts a new one at the same addresses, where another object
    lands.  A range written into the session afterwards names the old
    segment's registration generation: the holder refuses it, and the
    object there keeps its bytes."""
    import hashlib

    from mooncake.store import ReplicateConfig

    owner = spawn_client("owner")
    oname = owner.setup(master, segment=0)

    def mount():
        r = owner.call("invoke", method="allocate_and_mount_segment", args=[8 << 20])["ret"]
        assert r["ret"] == 0, r
        return r["segment_ids"]

    old = mount()
    cfg = ReplicateConfig()
    cfg.preferred_segment = oname
    probe, k = key("probe"), key("sess")
    assert store.put(probe, b"p" * 4096, cfg) == 0
    was = store.get_replica_desc(probe)[0].get_memory_descriptor().buffer_descriptor
    assert store.batch_put_session_start([k], [4096], cfg) == [0]
    assert owner.call("invoke", method="unmount_segment", args=[old])["ret"] == 0
    mount()
    filler = os.urandom(1 << 20)
    assert owner.call("put", key="filler", hex=filler.hex(), preferred=oname)["rc"] == 0
    f = owner.call("replica_desc", key="filler")["replicas"][0]
    if not f["addr"] <= was.buffer_address_ < f["addr"] + f["size"]:
        pytest.skip("the new segment was mapped elsewhere")
    src = regbuf(store, 4096, fill=0xAB)
    [rc] = store.batch_put_from_multi_buffer_ranges([k], [[src.ctypes.data]], [[4096]], [[0]])
    assert rc == INVALID_WRITE, rc
    got = owner.call("get", key="filler")
    assert got["sha256"] == hashlib.sha256(filler).hexdigest(), "the stale range landed"

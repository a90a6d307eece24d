# SPDX-License-Identifier: Apache-2.0
"""The upsert family: insert a new key, or replace the value of an existing
one (same size: in place; another size: fresh buffers).  Unlike put, which
keeps the first value (upstream-semantics §5.1), upsert always leaves the
new bytes.  The replacement is checked byte-exact from another client
process, including while that process holds a read lease and when the
replica lives in the other process's segment.  A reader that holds a lease
may keep reading the old value from its location cache until that lease
ends (docs/architecture.md, "Location cache"), never a torn one.
"""

import hashlib
import os
import uuid

import numpy as np

import helpers
from helpers import MiB

LEASE_TTL_MS = 2000


def key(tag: str = "u") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def test_upsert_new_same_size_other_size(store):
    k = key()
    v1, v2, v3, v4 = os.urandom(1000), os.urandom(1000), os.urandom(5000), os.urandom(10)
    assert store.upsert(k, v1) == 0        # a new key
    assert store.get(k) == v1
    assert store.upsert(k, v2) == 0        # same size
    assert store.get(k) == v2
    assert store.upsert(k, v3) == 0        # grows
    assert store.get(k) == v3
    assert store.get_size(k) == 5000
    assert store.upsert(k, v4) == 0        # shrinks
    assert store.get(k) == v4
    assert store.get_size(k) == 10


def test_upsert_accepts_buffer_protocol_objects(store):
    k = key()
    assert store.upsert(k, bytearray(b"abc")) == 0
    assert store.get(k) == b"abc"
    assert store.upsert(k, memoryview(b"defg")) == 0
    assert store.get(k) == b"defg"
    arr = np.arange(16, dtype=np.uint8)
    assert store.upsert(k, arr) == 0
    assert store.get(k) == arr.tobytes()


def test_put_after_upsert_keeps_the_upserted_value(store):
    k = key()
    assert store.put(k, b"original") == 0
    assert store.upsert(k, b"replaced") == 0
    assert store.put(k, b"ignored!") == 0
    assert store.get(k) == b"replaced"


def test_upsert_of_a_leased_object_still_replaces_it(store):
    k = key()
    assert store.put(k, b"x" * 4096) == 0
    assert store.get(k) == b"x" * 4096       # takes a read lease
    assert store.upsert(k, b"y" * 4096) == 0
    assert store.get(k) == b"y" * 4096
    assert store.upsert(k, b"z" * 100) == 0
    assert store.get(k) == b"z" * 100


def test_upsert_parts(store):
    k = key()
    assert store.upsert_parts(k, b"Hello, ", b"World!") == 0
    assert store.get(k) == b"Hello, World!"
    assert store.upsert_parts(k, b"Howdy, ", bytearray(b"Moon!!")) == 0   # same size
    assert store.get(k) == b"Howdy, Moon!!"
    parts = [os.urandom(n) for n in (1, 4096, 70000)]
    assert store.upsert_parts(k, *parts) == 0
    assert store.get(k) == b"".join(parts)


def test_put_parts_keeps_the_first_value_and_skips_empty_objects(store):
    k = key()
    assert store.put_parts(k, b"Hello, ", b"World!", b" From Mooncake") == 0
    assert store.get(k) == b"Hello, World! From Mooncake"
    assert store.put_parts(k, b"other") == 0
    assert store.get(k) == b"Hello, World! From Mooncake"
    assert store.upsert_parts(k, b"other") == 0
    assert store.get(k) == b"other"
    # a zero-size put_parts returns 0 and stores nothing (upstream-semantics 5.12)
    empty = key("empty")
    assert store.put_parts(empty, b"", b"") == 0
    assert store.is_exist(empty) == 0


def test_upsert_batch(store):
    keys = [key("b0"), key("b1"), key("b2")]
    assert store.put_batch(keys[:2], [b"old-0", b"old-1"]) == 0
    values = [b"new-0", b"a much longer new value 1", b"brand new 2"]
    assert store.upsert_batch(keys, values) == 0
    assert store.get_batch(keys) == values
    # the spec's example
    keys = [key("key1"), key("key2"), key("key3")]
    values = [b"value1", b"value2", b"value3"]
    assert store.upsert_batch(keys, values) == 0
    assert store.get_batch(keys) == values


def read_until(reader, k, want_sha, old_shas):
    return helpers.read_until(reader, k, want_sha, old_shas, LEASE_TTL_MS)


def test_replacement_seen_from_another_process(store, master, spawn_client):
    reader = spawn_client("reader")
    reader.setup(master)
    k = key()
    v1 = os.urandom(MiB)
    assert store.put(k, v1) == 0
    got = reader.call("get", key=k)
    assert (got["len"], got["sha256"]) == (MiB, hashlib.sha256(v1).hexdigest())

    # same size, while the reader's lease is live
    v2 = os.urandom(MiB)
    assert store.upsert(k, v2) == 0
    got = read_until(reader, k, hashlib.sha256(v2).hexdigest(), {hashlib.sha256(v1).hexdigest()})
    assert got["len"] == MiB

    # another size
    v3 = os.urandom(3000)
    assert store.upsert(k, v3) == 0
    got = read_until(reader, k, hashlib.sha256(v3).hexdigest(),
                     {hashlib.sha256(v).hexdigest() for v in (v1, v2)})
    assert got["hex"] == v3.hex()
    assert reader.call("get_size", key=k)["rc"] == 3000

    # and the other way round: the other process upserts, this one reads
    v4 = os.urandom(2000)
    assert reader.call("upsert", key=k, hex=v4.hex())["rc"] == 0
    assert store.get(k) == v4
    # put from the other process keeps v4
    assert reader.call("put", key=k, hex=b"ignored".hex())["rc"] == 0
    assert store.get(k) == v4


def test_upsert_into_another_process_segment(store, master, spawn_client):
    owner = spawn_client("owner")
    owner_name = owner.setup(master)
    from mooncake.store import ReplicateConfig
    cfg = ReplicateConfig()
    cfg.preferred_segment = owner_name
    k = key()
    v1 = os.urandom(100000)
    assert store.put(k, v1, cfg) == 0
    [desc] = store.get_replica_desc(k)
    assert desc.get_memory_descriptor().buffer_descriptor.transport_endpoint_ == owner_name
    seen = {hashlib.sha256(v1).hexdigest()}
    for v in (os.urandom(100000), os.urandom(250000)):
        assert store.upsert(k, v, cfg) == 0
        got = read_until(owner, k, hashlib.sha256(v).hexdigest(), seen)
        assert got["len"] == len(v)
        seen.add(got["sha256"])
        assert store.get(k) == v

# SPDX-License-Identifier: Apache-2.0
"""Two client processes exchange objects through the store, byte-exact, in
both metadata modes (P2PHANDSHAKE and the master's HTTP metadata server).

The owner contributes a 256 MiB segment; every object is placed on it with
ReplicateConfig.preferred_segment, so the other client's reads and writes
cross process boundaries through the transfer engine.  Values are random
and compared by SHA-256, sizes from 1 byte to 64 MiB.
"""

import hashlib
import uuid

import pytest

from helpers import MiB, read_until

# 64 MiB reads must finish within their lease even on a loaded machine.
LEASE_TTL_MS = 5000

SIZES = [1, 4096, MiB + 3, 16 * MiB, 64 * MiB]


@pytest.mark.parametrize("metadata", ["P2PHANDSHAKE", "http"])
def test_objects_cross_processes(metadata, master, spawn_client):
    owner = spawn_client("owner")
    other = spawn_client("other")
    owner_name = owner.setup(master, metadata, segment=256 * MiB)
    other_name = other.setup(master, metadata, segment=16 * MiB)
    assert owner_name != other_name

    for size in SIZES:
        # owner writes into its own segment, the other process reads it
        k = f"own-{size}-{uuid.uuid4().hex}"
        put = owner.call("put_random", key=k, size=size, preferred=owner_name)
        assert put["rc"] == 0, (size, put)
        got = other.call("get", key=k)
        assert (got["len"], got["sha256"]) == (size, put["sha256"]), (size, got)
        assert other.call("get_size", key=k)["rc"] == size

        # the other process writes into the owner's segment, both read it
        k = f"remote-{size}-{uuid.uuid4().hex}"
        put = other.call("put_random", key=k, size=size, preferred=owner_name)
        assert put["rc"] == 0, (size, put)
        for reader in (owner, other):
            got = reader.call("get", key=k)
            assert (got["len"], got["sha256"]) == (size, put["sha256"]), \
                (size, reader.name, got)


def test_small_values_and_batches_across_processes(master, spawn_client):
    a = spawn_client("a")
    b = spawn_client("b")
    a_name = a.setup(master)
    b.setup(master)
    keys = [f"batch-{i}-{uuid.uuid4().hex}" for i in range(4)]
    values = [bytes([i]) * (i + 1) * 10 for i in range(4)]
    assert a.call("put_batch", keys=keys, hexes=[v.hex() for v in values])["rc"] == 0
    missing = f"missing-{uuid.uuid4().hex}"
    got = b.call("get_batch", keys=[keys[0], missing, keys[3]])["hexes"]
    assert got == [values[0].hex(), "", values[3].hex()]
    assert b.call("batch_exist", keys=[keys[1], missing])["rcs"] == [1, 0]
    # first writer wins across processes too
    k = f"race-{uuid.uuid4().hex}"
    assert a.call("put", key=k, hex=b"from-a".hex(), preferred=a_name)["rc"] == 0
    assert b.call("put", key=k, hex=b"from-b".hex())["rc"] == 0
    assert b.call("get", key=k)["hex"] == b"from-a".hex()
    # the writer's lease rules hold for the other process as well
    assert b.call("get", key=k)["len"] == 6
    assert a.call("remove", key=k)["rc"] == -706
    assert a.call("remove", key=k, force=True)["rc"] == 0
    # b holds a lease: it may read the old value until that lease ends
    read_until(b, k, hashlib.sha256(b"").hexdigest(),
               {hashlib.sha256(b"from-a").hexdigest()}, LEASE_TTL_MS)

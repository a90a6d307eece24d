# SPDX-License-Identifier: Apache-2.0
"""The same-host shared-memory path between client processes.

Store segments are sealed memfds; a reader on the same host maps the
holder's segment and copies with memcpy instead of a TCP round trip
(docs/transfer.md, "Same-host shared memory").  Seen from outside, the
reader process then maps a second ``memfd:mooncake-segment`` besides its
own -- that is what these tests look for in /proc/<pid>/maps, next to
byte-exact data.  ``MC_TE_SHM=0`` turns the path off; the data must be
the same.  A holder that dies must not leave its memory mapped in the
reader.
"""

import os
import uuid

from helpers import MiB, wait_until

SIZES = [1, 4096, MiB + 3, 8 * MiB]


def segment_mappings(pid: int) -> set:
    """Inodes of the memfd store segments mapped by process ``pid``."""
    inodes = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/memfd:mooncake-segment"):
                inodes.add(fields[4])
    return inodes


def pair(master, spawn_client, owner_env=None, other_env=None):
    """An owner with a 16 MiB segment and another client; put one 1 MiB
    value on the owner and read it from the other.  Returns the clients,
    the key and its SHA-256."""
    owner = spawn_client("owner", env=owner_env)
    other = spawn_client("other", env=other_env)
    owner_name = owner.setup(master, segment=16 * MiB)
    other.setup(master, segment=16 * MiB)
    k = f"shm-pair-{uuid.uuid4().hex}"
    put = owner.call("put_random", key=k, size=MiB, preferred=owner_name)
    assert put["rc"] == 0, put
    got = other.call("get", key=k)
    assert (got["len"], got["sha256"]) == (MiB, put["sha256"]), got
    return owner, other, k, put["sha256"]


def exchange(master, spawn_client, env):
    """Owner holds every object; the other process writes and reads them."""
    owner = spawn_client("owner", env=env)
    other = spawn_client("other", env=env)
    owner_name = owner.setup(master, segment=64 * MiB)
    other.setup(master, segment=16 * MiB)
    for size in SIZES:
        k = f"shm-own-{size}-{uuid.uuid4().hex}"
        put = owner.call("put_random", key=k, size=size, preferred=owner_name)
        assert put["rc"] == 0, (size, put)
        got = other.call("get", key=k)
        assert (got["len"], got["sha256"]) == (size, put["sha256"]), (size, got)

        k = f"shm-remote-{size}-{uuid.uuid4().hex}"
        put = other.call("put_random", key=k, size=size, preferred=owner_name)
        assert put["rc"] == 0, (size, put)
        for reader in (owner, other):
            got = reader.call("get", key=k)
            assert (got["len"], got["sha256"]) == (size, put["sha256"]), (size, got)
    # batches of small values, which travel as one run
    keys = [f"shm-batch-{i}-{uuid.uuid4().hex}" for i in range(32)]
    values = [os.urandom(100 + i) for i in range(32)]
    assert owner.call("put_batch", keys=keys, hexes=[v.hex() for v in values])["rc"] == 0
    assert other.call("get_batch", keys=keys)["hexes"] == [v.hex() for v in values]
    return owner, other


def test_reader_maps_the_holders_segment(master, spawn_client):
    owner, other = exchange(master, spawn_client, env=None)
    own = segment_mappings(owner.pid)
    theirs = segment_mappings(other.pid)
    # the reader maps its own segment and the owner's; the owner maps the
    # reader's too when the unplaced batch landed there
    assert len(theirs) == 2, theirs
    assert 1 <= len(own) <= 2, own


def test_disabled_path_moves_the_same_bytes_over_tcp(master, spawn_client):
    owner, other = exchange(master, spawn_client, env={"MC_TE_SHM": "0"})
    assert len(segment_mappings(other.pid)) == 1
    assert len(segment_mappings(owner.pid)) == 1


def test_only_the_disabled_side_keeps_to_tcp(master, spawn_client):
    """A reader with the path on meets a holder with it off: TCP, same bytes."""
    _, other, _, _ = pair(master, spawn_client, owner_env={"MC_TE_SHM": "0"})
    assert len(segment_mappings(other.pid)) == 1


def test_dead_holder_is_unmapped_and_reads_fail_cleanly(master, spawn_client):
    owner, other, k, _ = pair(master, spawn_client)
    assert len(segment_mappings(other.pid)) == 2

    owner.kill()
    # Nobody reads from the owner again, yet the reader lets go of its
    # memory: its heartbeat notices the hang-up.
    wait_until(lambda: len(segment_mappings(other.pid)) == 1, 10,
               "the reader to unmap the dead owner's segment")
    # The master may still list the replica until the owner expires: the
    # read must fail (the holder is gone), not return orphaned memory.
    got = other.call("get", key=k)
    assert got["len"] == 0, got
    assert other.alive()

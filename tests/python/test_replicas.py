# SPDX-License-Identifier: Apache-2.0
"""Replicas survive the death of a holder.

Three client processes; objects written with replica_num=2 land on two
distinct segments.  The client holding one replica of the first object is
killed with SIGKILL; once the master has expired it (--client_ttl, 2 s
here) the dead replica is gone from the descriptors and every object is
still readable, byte-exact, from the surviving replica -- by a client
that holds no replica of the first object, so the read crosses processes.
"""

import uuid

from helpers import CLIENT_TTL_S, MiB, wait_until

# 1 MiB reads on a loaded machine must finish within their lease.
LEASE_TTL_MS = 3000

COMPLETE = 3


def test_object_survives_the_death_of_one_replica_holder(master, spawn_client):
    clients = [spawn_client(f"node{i}") for i in range(3)]
    names = [c.setup(master) for c in clients]
    assert len(set(names)) == 3
    by_name = dict(zip(names, clients))
    writer = clients[0]

    objects = {}
    for i, size in enumerate([MiB, 1, 4096, 300000, MiB + 1]):
        k = f"rep{i}-{uuid.uuid4().hex}"
        r = writer.call("put_random", key=k, size=size, replica_num=2)
        assert r["rc"] == 0, r
        objects[k] = (size, r["sha256"])
        reps = writer.call("replica_desc", key=k)["replicas"]
        assert len(reps) == 2, reps
        assert all(x["status"] == COMPLETE and x["memory"] for x in reps), reps
        assert len({x["endpoint"] for x in reps}) == 2, reps
        assert all(x["size"] == size for x in reps), reps

    first = next(iter(objects))
    holders = [x["endpoint"] for x in writer.call("replica_desc", key=first)["replicas"]]
    victim_name = holders[0]
    survivor_name = holders[1]
    [reader_name] = [n for n in names if n not in holders]
    victim, reader = by_name[victim_name], by_name[reader_name]

    for k, (size, sha) in objects.items():
        got = reader.call("get", key=k)
        assert (got["len"], got["sha256"]) == (size, sha), k

    victim.kill()

    def victim_forgotten():
        for k in objects:
            eps = [x["endpoint"] for x in reader.call("replica_desc", key=k)["replicas"]]
            if victim_name in eps or not eps:
                return False
        return True
    wait_until(victim_forgotten, CLIENT_TTL_S + 15,
               "the master to drop the killed client's replicas", 0.2)

    reps = reader.call("replica_desc", key=first)["replicas"]
    assert [x["endpoint"] for x in reps] == [survivor_name]
    for k, (size, sha) in objects.items():
        for c in (reader, by_name[survivor_name]):
            got = c.call("get", key=k)
            assert (got["len"], got["sha256"]) == (size, sha), (k, c.name, got.get("detail"))
            assert c.call("exist", key=k)["rc"] == 1
    assert master.alive()

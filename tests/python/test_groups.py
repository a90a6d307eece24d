# SPDX-License-Identifier: Apache-2.0
"""group_ids: the members of a group are leased and evicted together
(docs/protocol.md §5.12).

* a read (get, is_exist, batch_is_exist, get_size) of one member leases
  every member of its group in the same tenant: removing another member
  without force answers OBJECT_HAS_LEASE (-706) until the lease ran out;
  ungrouped keys, other groups and the same group id in another tenant
  are not leased by it; an upsert moves a key to the group it names, or
  keeps it in its group when it names none;
* eviction never leaves a group half evicted: groups whose members were
  written interleaved (so evicting the oldest objects one by one would
  cut every group) are overwritten until about half of them must go, then
  groups written one after another fill the store to three times its
  capacity; at each check (the admin server's key list, which grants no
  lease) every group is whole or gone, and a group one of whose members
  was read (leased) before the overwrite survives whole.
"""

import json
import random
import time
import urllib.request
import uuid

from helpers import MiB, Master, wait_until

KiB = 1024
OBJECT_HAS_LEASE = -706
OBJECT_NOT_FOUND = -704

LEASE_TTL_MS = 1500


def _store(master, segment=16 * MiB, tenant="default"):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", segment, 16 * MiB, "tcp", "", master.addr,
                 tenant_id=tenant)
    assert rc == 0, f"setup returned {rc}"
    return s


def _cfg(group):
    from mooncake.store import ReplicateConfig
    c = ReplicateConfig()
    c.group_ids = [group]
    return c


def _put_group(store, group, keys, value=b"v"):
    for k in keys:
        assert store.put(k, value, _cfg(group)) == 0, k


def test_read_of_one_member_leases_the_group(tenant_master):
    # tenants split the key space only with --enable_multi_tenants
    master = tenant_master(["other"])
    a = _store(master)
    other = _store(master, tenant="other")
    try:
        tag = uuid.uuid4().hex
        g = f"g-{tag}"
        members = [f"m-{tag}-{i}" for i in range(4)]
        _put_group(a, g, members)
        # the same group id in another tenant, another group, no group
        _put_group(other, g, members)
        _put_group(a, f"h-{tag}", [f"h-{tag}"])
        assert a.put(f"plain-{tag}", b"v") == 0
        # a batch put with one group id per key joins the group too
        from mooncake.store import ReplicateConfig
        c = ReplicateConfig()
        c.group_ids = [g, ""]
        assert a.put_batch([f"bm-{tag}", f"bp-{tag}"], [b"v", b"v"], c) == 0

        for read in (lambda k: a.get(k) == b"v", lambda k: a.is_exist(k) == 1,
                     lambda k: a.batch_is_exist([k]) == [1], lambda k: a.get_size(k) == 1):
            assert read(members[0])
            t0 = time.monotonic()
            # every other member is leased; check them all within the lease
            rcs = [a.remove(k) for k in members[1:] + [f"bm-{tag}"]]
            if time.monotonic() - t0 < LEASE_TTL_MS / 1000.0 * 0.8:
                assert rcs == [OBJECT_HAS_LEASE] * 4, rcs
            # once the lease ran out, a forceless remove goes through
            wait_until(lambda: a.remove(members[3]) == 0, 10.0, "the group lease to end")
            _put_group(a, g, [members[3]])  # back in the group, unleased
        # nothing outside the group was leased by these reads
        assert a.remove(f"h-{tag}") == 0
        assert a.remove(f"plain-{tag}") == 0
        assert a.remove(f"bp-{tag}") == 0
        assert other.batch_remove(members) == [0, 0, 0, 0]
        assert a.batch_remove(members + [f"bm-{tag}"], force=True) == [0] * 5
    finally:
        other.close()
        a.close()


def test_upsert_moves_or_keeps_the_group(master):
    a = _store(master)
    try:
        tag = uuid.uuid4().hex
        g, h = f"g-{tag}", f"h-{tag}"
        ka, kb, kc = (f"{n}-{tag}" for n in "abc")
        _put_group(a, g, [ka, kb])
        _put_group(a, h, [kc])
        # an upsert naming another group moves the key there (fresh
        # buffers: another size) ...
        assert a.upsert(kb, b"longer value", _cfg(h)) == 0
        # ... and one naming none keeps it where it is (in place)
        assert a.upsert(kc, b"w", None) == 0
        assert a.get(kc) == b"w"                  # leases h = {b, c}
        assert a.remove(kb) == OBJECT_HAS_LEASE
        assert a.remove(ka) == 0                  # g = {a} was not leased
        assert a.get(kb) == b"longer value"
        assert a.batch_remove([kb, kc], force=True) == [0, 0]
    finally:
        a.close()


def _resident_keys(master):
    """Every key of the default tenant, read from the admin server: unlike
    get_size or is_exist, this grants no lease, so it does not change what
    eviction may take."""
    url = f"http://127.0.0.1:{master.metrics_port}/get_all_keys"
    with urllib.request.urlopen(url, timeout=10) as r:
        j = json.loads(r.read())
    assert not j["truncated"]
    return set(j["keys"])


def _check_groups(master, groups):
    """Assert no group is half evicted; returns (whole, gone) counts."""
    keys = _resident_keys(master)
    whole = gone = 0
    for gid, members in groups.items():
        present = [k for k in members if k in keys]
        assert len(present) in (0, len(members)), \
            f"group {gid} half evicted: {len(present)} of {len(members)} left"
        whole += len(present) == len(members)
        gone += not present
    return whole, gone


def test_eviction_never_splits_a_group():
    segment = 32 * MiB
    lease_ms = 30000
    m = Master(lease_ttl_ms=lease_ms)
    s = None
    try:
        s = _store(m, segment=segment)
        tag = uuid.uuid4().hex[:8]
        rng = random.Random(4)

        # a group read before the overwrite: the oldest, yet leased, so
        # it stays whole
        kept = [f"kept-{tag}-{i}" for i in range(4)]
        for k in kept:
            assert s.put(k, bytes(256 * KiB), _cfg(f"kept-{tag}")) == 0
        t0 = time.monotonic()
        assert s.get(kept[2]) == bytes(256 * KiB)

        def put_sized(gid, k):
            size = int(32 * KiB * 2 ** rng.uniform(0, 3))  # 32..256 KiB
            assert s.put(k, bytes([len(k) % 251]) * size, _cfg(gid)) == 0, k
            return size

        # phase 1, about 3/4 of the capacity: 24 groups of 8 written
        # round-robin, so every group's members spread over the whole LRU
        # order (evicting the oldest objects one by one would cut them all)
        interleaved = {f"il-{tag}-{g}": [] for g in range(24)}
        used = 0
        for i in range(8):
            for gid, members in interleaved.items():
                k = f"{gid}-m{i}"
                used += put_sized(gid, k)
                members.append(k)
        assert used < segment - 4 * 256 * KiB, used

        # phase 2: groups written one after the other, until the store
        # overflowed by about half of phase 1: some interleaved groups must
        # have gone, whole, and the others stayed, whole
        groups = dict(interleaved)
        g = 0
        written = used
        while written < segment + used // 2:
            gid = f"seq-{tag}-{g}"
            groups[gid] = [f"{gid}-m{i}" for i in range(8)]
            for k in groups[gid]:
                written += put_sized(gid, k)
            g += 1
        whole, gone = _check_groups(m, interleaved)
        assert whole > 0 and gone > 0, (whole, gone)
        _check_groups(m, groups)

        # phase 3: on to three times the capacity, checking as it goes
        while written < 3 * segment:
            gid = f"seq-{tag}-{g}"
            groups[gid] = [f"{gid}-m{i}" for i in range(8)]
            for k in groups[gid]:
                written += put_sized(gid, k)
            g += 1
            if g % 8 == 0:
                _check_groups(m, groups)
        whole, gone = _check_groups(m, groups)
        assert whole > 0 and gone > 0, (whole, gone)
        elapsed = time.monotonic() - t0

        # the leased group survived whole (the fill ran inside its lease)
        assert elapsed < lease_ms / 1000.0 * 0.9, f"fill took {elapsed:.1f}s"
        assert set(kept) <= _resident_keys(m)
        assert s.get(kept[0]) == bytes(256 * KiB)
        # and what is left fits in the store
        assert sum(s.get_size(k) for k in _resident_keys(m)) <= segment
    finally:
        if s is not None:
            s.close()
        alive = m.alive()
        log = m.log_text()
        rc = m.stop()
        assert alive, "mooncake_master died:\n" + log
        assert rc == 0, f"mooncake_master exited with {rc}"

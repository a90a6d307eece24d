# SPDX-License-Identifier: Apache-2.0
"""The removal family: remove (lease rule and force), batch_remove
(per-key codes), remove_by_regex (POSIX extended regular expressions,
count of removed objects, leased objects skipped unless force, a bad
pattern is a negative code, scoped to the caller's tenant) and remove_all
(count, leased objects skipped, scoped to the tenant).
"""

import uuid

import pytest

from helpers import MiB

INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706

# Reads take a lease that must still hold when the remove follows.
LEASE_TTL_MS = 5000


def key(tag: str = "rm") -> str:
    return f"{tag}-{uuid.uuid4().hex}"


def test_remove_lease_force_and_missing(store):
    k = key()
    assert store.put(k, b"v") == 0
    assert store.get(k) == b"v"                 # lease for 5 s
    assert store.remove(k) == OBJECT_HAS_LEASE
    assert store.is_exist(k) == 1
    assert store.remove(k, force=True) == 0
    assert store.is_exist(k) == 0
    assert store.remove(k) == OBJECT_NOT_FOUND
    assert store.remove(k, True) == OBJECT_NOT_FOUND
    # an object nobody has read since put carries no lease
    k2 = key()
    assert store.put(k2, b"w") == 0
    assert store.remove(k2) == 0
    assert store.get(k2) == b""


def test_batch_remove_per_key_codes(store):
    free, leased, missing = key("free"), key("leased"), key("missing")
    assert store.put_batch([free, leased], [b"a", b"b"]) == 0
    assert store.get(leased) == b"b"
    assert store.batch_remove([free, leased, missing]) == [0, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND]
    assert store.batch_is_exist([free, leased]) == [0, 1]
    assert store.batch_remove([leased, missing], force=True) == [0, OBJECT_NOT_FOUND]
    assert store.is_exist(leased) == 0
    assert store.batch_remove([]) == []


def test_remove_by_regex_count_and_pattern(store):
    tag = uuid.uuid4().hex
    numbered = [f"sess-{tag}-{i}" for i in range(3)]
    others = [f"sess-{tag}-x", f"other-{tag}-1", f"mid-sess-{tag}-7"]
    assert store.put_batch(numbered + others, [b"v"] * 6) == 0
    # POSIX ERE: anchors, character classes, +
    assert store.remove_by_regex(f"^sess-{tag}-[0-9]+$") == 3
    # unanchored: matches anywhere in the key
    assert store.remove_by_regex(f"sess-{tag}-(x|7)") == 2
    # nothing matches
    assert store.remove_by_regex(f"^nomatch-{tag}$") == 0
    # (existence checks take leases, so they come last)
    assert store.batch_is_exist(numbered) == [0, 0, 0]
    assert store.batch_is_exist(others) == [0, 1, 0]


def test_remove_by_regex_skips_leased_objects_unless_forced(store):
    tag = uuid.uuid4().hex
    ks = [f"lease-{tag}-{i}" for i in range(3)]
    assert store.put_batch(ks, [b"v"] * 3) == 0
    assert store.get(ks[1]) == b"v"            # leased
    assert store.remove_by_regex(f"^lease-{tag}-") == 2
    assert store.remove_by_regex(f"^lease-{tag}-", force=True) == 1
    assert store.batch_is_exist(ks) == [0, 0, 0]


@pytest.mark.parametrize("pattern", ["([", "a{2,1}", "*abc", "[[:nosuchclass:]]"])
def test_remove_by_regex_bad_pattern_is_invalid_params(store, pattern):
    k = key()
    assert store.put(k, b"v") == 0
    assert store.remove_by_regex(pattern) == INVALID_PARAMS
    assert store.is_exist(k) == 1


def _tenant_store(master, tenant):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                 tenant_id=tenant)
    assert rc == 0, rc
    return s


def test_remove_by_regex_stays_in_the_callers_tenant(tenant_master):
    # tenants split the key space only with --enable_multi_tenants
    master = tenant_master(["tenant-a", "tenant-b"])
    a = _tenant_store(master, "tenant-a")
    b = _tenant_store(master, "tenant-b")
    try:
        tag = uuid.uuid4().hex
        ks = [f"shared-{tag}-{i}" for i in range(2)]
        assert a.put_batch(ks, [b"from-a", b"from-a"]) == 0
        assert b.put_batch(ks, [b"from-b", b"from-b"]) == 0
        assert a.remove_by_regex(f"^shared-{tag}-") == 2
        # b's objects were not touched (and are not leased: the count is 2)
        assert b.remove_by_regex(f"^shared-{tag}-") == 2
        assert a.batch_is_exist(ks) == [0, 0]
        assert b.batch_is_exist(ks) == [0, 0]
        # the same with a look at the bytes b keeps
        assert a.put_batch(ks, [b"again-a", b"again-a"]) == 0
        assert b.put_batch(ks, [b"again-b", b"again-b"]) == 0
        assert a.remove_by_regex(f"^shared-{tag}-") == 2
        assert b.get_batch(ks) == [b"again-b", b"again-b"]
        assert b.remove_by_regex(f"^shared-{tag}-", force=True) == 2
    finally:
        a.close()
        b.close()


def test_remove_all_counts_and_skips_leased_objects(fresh_master, make_store):
    store = make_store(m=fresh_master)
    keys = [key(f"all{i}") for i in range(5)]
    assert store.put_batch(keys, [b"v%d" % i for i in range(5)]) == 0
    assert store.get(keys[2]) == b"v2"          # leased: skipped
    assert store.remove_all() == 4
    assert store.batch_is_exist(keys) == [0, 0, 1, 0, 0]
    assert store.get(keys[2]) == b"v2"
    assert store.remove(keys[2], force=True) == 0
    assert store.remove_all() == 0


def test_remove_all_stays_in_the_callers_tenant(tenant_master):
    master = tenant_master(["tenant-a", "tenant-b"])
    a = _tenant_store(master, "tenant-a")
    b = _tenant_store(master, "tenant-b")
    try:
        ka, kb = key("a"), key("b")
        assert a.put(ka, b"a") == 0
        assert b.put(kb, b"b") == 0
        assert a.remove_all() == 1
        assert a.is_exist(ka) == 0
        assert b.get(kb) == b"b"
    finally:
        a.close()
        b.close()

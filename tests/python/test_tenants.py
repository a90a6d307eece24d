# SPDX-License-Identifier: Apache-2.0
"""Tenant isolation: setup(..., tenant_id=...) names a key namespace.

Two stores on one master, in tenants "a" and "b", write the same keys with
different values.  Every key operation of one tenant (put, get, is_exist,
batch_is_exist, get_size, remove, batch_remove, remove_all,
remove_by_regex) sees and touches only that tenant's objects: the other
tenant's values, sizes and existence are checked after each step.
"""

import uuid

import pytest

from helpers import MiB, wait_until

OBJECT_NOT_FOUND = -704

# reads grant leases, and removes below run without force: keep them short
LEASE_TTL_MS = 200


def _store(master, tenant):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                 tenant_id=tenant)
    assert rc == 0, f"setup(tenant_id={tenant!r}) returned {rc}"
    return s


@pytest.fixture
def tenants(fresh_master):
    a = _store(fresh_master, "a")
    try:
        b = _store(fresh_master, "b")
        try:
            yield a, b
        finally:
            b.close()
    finally:
        a.close()


def _expire_leases(store):
    """Return once every lease granted so far in `store`'s tenant has run
    out: a probe read now is leased at least as long as any earlier read,
    and a forceless remove of it answers OBJECT_HAS_LEASE until then."""
    probe = f"probe-{uuid.uuid4().hex}"
    assert store.put(probe, b"p") == 0
    assert store.get(probe) == b"p"
    wait_until(lambda: store.remove(probe) == 0, 10.0, "the probe's lease to run out")


def test_same_key_different_values(tenants):
    a, b = tenants
    k = f"t-{uuid.uuid4().hex}"
    assert a.put(k, b"value of a") == 0
    assert b.is_exist(k) == 0
    assert b.get_size(k) == OBJECT_NOT_FOUND
    assert b.get(k) == b""
    assert b.put(k, b"the value of b") == 0
    assert a.get(k) == b"value of a"
    assert b.get(k) == b"the value of b"
    assert a.get_size(k) == len(b"value of a")
    assert b.get_size(k) == len(b"the value of b")
    assert a.is_exist(k) == 1 and b.is_exist(k) == 1
    # batches too
    ks = [f"tb-{uuid.uuid4().hex}-{i}" for i in range(4)]
    assert a.put_batch(ks[:2], [b"a0", b"a1"]) == 0
    assert b.batch_is_exist(ks) == [0, 0, 0, 0]
    assert b.put_batch(ks, [b"b0", b"b1", b"b2", b"b3"]) == 0
    assert a.batch_is_exist(ks) == [1, 1, 0, 0]
    assert a.get_batch(ks[:2]) == [b"a0", b"a1"]
    assert b.get_batch(ks) == [b"b0", b"b1", b"b2", b"b3"]


def test_removes_never_touch_the_other_tenant(tenants):
    a, b = tenants
    tag = uuid.uuid4().hex
    ks = [f"r-{tag}-{i}" for i in range(6)]
    assert a.put_batch(ks, [b"a%d" % i for i in range(6)]) == 0
    assert b.put_batch(ks, [b"bb%d" % i for i in range(6)]) == 0

    # remove (forced: a lease would not stop it from taking b's object)
    assert a.remove(ks[0], force=True) == 0
    assert a.is_exist(ks[0]) == 0
    assert b.get(ks[0]) == b"bb0"
    assert a.remove(ks[0]) == OBJECT_NOT_FOUND

    # batch_remove
    assert a.batch_remove(ks[1:3], force=True) == [0, 0]
    assert a.batch_is_exist(ks[1:3]) == [0, 0]
    assert b.get_batch(ks[1:3]) == [b"bb1", b"bb2"]

    # remove_by_regex, forced: leases would not protect b's objects
    assert a.remove_by_regex(f"^r-{tag}-[34]$", force=True) == 2
    assert a.batch_is_exist(ks[3:5]) == [0, 0]
    assert b.get_batch(ks[3:5]) == [b"bb3", b"bb4"]

    # remove_all of a takes a's last key, none of b's six (unleased, so
    # nothing but the tenant keeps them from a remove_all)
    _expire_leases(a)
    assert a.remove_all() == 1
    assert a.batch_is_exist(ks) == [0] * 6
    assert b.batch_is_exist(ks) == [1] * 6
    assert b.get_batch(ks) == [b"bb%d" % i for i in range(6)]

    # and the other way round: b's removes leave a's new objects alone
    assert a.put(ks[0], b"a-again") == 0
    _expire_leases(b)
    assert b.remove_all() == 6
    assert b.batch_is_exist(ks) == [0] * 6
    assert a.get(ks[0]) == b"a-again"
    assert b.remove_by_regex(f"^r-{tag}-", force=True) == 0
    assert a.get_size(ks[0]) == len(b"a-again")
    assert b.remove(ks[0], force=True) == OBJECT_NOT_FOUND
    assert b.batch_remove([ks[0]], force=True) == [OBJECT_NOT_FOUND]
    assert a.is_exist(ks[0]) == 1


def test_leases_are_per_tenant(tenants):
    """A read in one tenant leases only that tenant's object."""
    a, b = tenants
    k = f"l-{uuid.uuid4().hex}"
    assert a.put(k, b"a") == 0
    assert b.put(k, b"b") == 0
    assert a.get(k) == b"a"            # a's object is leased now
    assert b.remove(k) == 0            # b's is not
    assert b.is_exist(k) == 0
    assert a.get(k) == b"a"

# SPDX-License-Identifier: Apache-2.0
"""Tenants: setup(..., tenant_id=...) and --enable_multi_tenants (upstream C.9).

* Off (the master's default, as upstream): the tenant id a client sends
  is ignored; clients of tenants "a" and "b" share every key.
* On, with a quota policy file naming "a" and "b": two stores in tenants
  "a" and "b" write the same keys with different values, and every key
  operation of one tenant (put, get, is_exist, batch_is_exist, get_size,
  remove, batch_remove, remove_all, remove_by_regex) sees and touches only
  that tenant's objects: the other tenant's values, sizes and existence
  are checked after each step.
* On: a tenant the policy does not name cannot write
  (TENANT_NOT_REGISTERED), a tenant past its quota neither
  (TENANT_QUOTA_EXCEEDED) until it removes objects; the admin API
  /api/v1/tenant_quotas lists, sets (saved to the file) and deletes quotas,
  refusing to delete a tenant that holds objects (409 TENANT_NOT_EMPTY),
  and answers 409 UNAVAILABLE_IN_CURRENT_MODE with the mode off.
"""

import json
import urllib.error
import urllib.request
import uuid

import pytest

from helpers import MiB, Master, closing_stores, wait_until

OBJECT_NOT_FOUND = -704
TENANT_QUOTA_EXCEEDED = -1700
TENANT_NOT_REGISTERED = -1701
TENANT_NOT_EMPTY = -1702
UNAVAILABLE_IN_CURRENT_MODE = -1011

# reads grant leases, and removes below run without force: keep them short
LEASE_TTL_MS = 200

POLICY = """version: 1
# the tenants of the isolation tests, and a small one for quotas
tenants:
  - name: a
    quota: 64MB
  - name: "b"
    quota: 64 MB
  - name: small
    quota: 64KB
"""


def _store(master, tenant):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                 tenant_id=tenant)
    assert rc == 0, f"setup(tenant_id={tenant!r}) returned {rc}"
    return s


@pytest.fixture
def policy(tmp_path):
    p = tmp_path / "tenants.yaml"
    p.write_text(POLICY)
    return p


@pytest.fixture
def mt_master(policy):
    """A master with --enable_multi_tenants and the POLICY file."""
    m = Master(["--enable_multi_tenants=true",
                f"--tenant_quota_connector_uri={policy}"], lease_ttl_ms=LEASE_TTL_MS)
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def open_stores():
    with closing_stores(_store) as make:
        yield make


@pytest.fixture
def tenants(mt_master, open_stores):
    return open_stores(mt_master, "a"), open_stores(mt_master, "b")


def quota_api(master, method, tenant=None, body=None):
    """(HTTP status, JSON) of /api/v1/tenant_quotas."""
    url = f"http://127.0.0.1:{master.metrics_port}/api/v1/tenant_quotas"
    if tenant is not None:
        url += f"?tenant_id={tenant}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


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


# ---- --enable_multi_tenants off (the default) ------------------------------------

def test_mode_off_tenant_ids_share_keys(fresh_master, open_stores):
    a = open_stores(fresh_master, "a")
    b = open_stores(fresh_master, "b")
    k = f"s-{uuid.uuid4().hex}"
    assert a.put(k, b"written by a") == 0
    assert b.get(k) == b"written by a", "tenant ids must not split keys with the mode off"
    # the key exists for b too: its put leaves a's value (already exists)
    b.put(k, b"again")
    assert a.get(k) == b"written by a"
    assert b.remove(k, force=True) == 0
    assert a.is_exist(k) == 0
    # everything is in tenant "default": the admin server finds it there
    assert a.put(k, b"x") == 0
    url = f"http://127.0.0.1:{fresh_master.metrics_port}/query_key?key={k}"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.loads(r.read())["tenant"] == "default"
    st, j = quota_api(fresh_master, "GET")
    assert st == 409 and j["error_code"] == UNAVAILABLE_IN_CURRENT_MODE, (st, j)


# ---- --enable_multi_tenants on: registration and quotas ------------------------------

def test_unregistered_tenant_cannot_write(mt_master, open_stores):
    nobody = open_stores(mt_master, "nobody")
    assert nobody.put("k", b"v") == TENANT_NOT_REGISTERED
    assert nobody.get("k") == b""          # reads are not refused, just empty
    a = open_stores(mt_master, "a")
    assert a.put("k", b"v") == 0


def test_quota_exceeded_until_objects_go(mt_master, open_stores):
    small = open_stores(mt_master, "small")       # 64 KiB
    assert small.put("q1", b"x" * 40 * 1024) == 0
    assert small.put("q2", b"y" * 40 * 1024) == TENANT_QUOTA_EXCEEDED
    assert small.put("q3", b"z" * 20 * 1024) == 0  # 60 KiB in all still fits
    st, j = quota_api(mt_master, "GET", "small")
    assert st == 200 and j["data"]["charged_bytes"] == 60 * 1024, j
    assert j["data"]["requested_quota_bytes"] == 64 * 1024
    assert small.remove("q1", force=True) == 0
    assert small.put("q2", b"y" * 40 * 1024) == 0
    st, j = quota_api(mt_master, "GET", "small")
    assert j["data"]["charged_bytes"] == 60 * 1024, j


def test_quota_admin_api(mt_master, open_stores, policy):
    st, j = quota_api(mt_master, "GET")
    assert st == 200 and j["success"]
    assert sorted(t["tenant_id"] for t in j["data"]) == ["a", "b", "small"], j
    # a new tenant registered through the API can write, and the file keeps it
    c = open_stores(mt_master, "c")
    assert c.put("k", b"v") == TENANT_NOT_REGISTERED
    st, j = quota_api(mt_master, "PUT", "c", {"requested_quota_bytes": 1 << 20})
    assert st == 200 and j["data"]["requested_quota_bytes"] == 1 << 20, (st, j)
    assert c.put("k", b"v") == 0
    assert 'name: "c"' in policy.read_text()
    assert quota_api(mt_master, "PUT", "c", {"requested_quota_bytes": 0})[0] == 400
    assert quota_api(mt_master, "PUT", "_bad", {"requested_quota_bytes": 1})[0] == 400
    # a tenant holding objects is not deleted; an empty one is
    st, j = quota_api(mt_master, "DELETE", "c")
    assert st == 409 and j["error_code"] == TENANT_NOT_EMPTY, (st, j)
    assert c.remove("k", force=True) == 0
    st, j = quota_api(mt_master, "DELETE", "c")
    assert st == 200 and j["success"], (st, j)
    assert c.put("k", b"v") == TENANT_NOT_REGISTERED
    assert 'name: "c"' not in policy.read_text()
    assert quota_api(mt_master, "DELETE", "c")[0] == 404


def test_invalid_policy_file_stops_the_start(tmp_path):
    import subprocess
    from helpers import master_bin
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntenants:\n  - name: a\n    quota: -5\n")
    r = subprocess.run([master_bin(), "--port=0", "--metrics_port=0",
                        "--enable_multi_tenants", f"--tenant_quota_connector_uri={bad}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "quota must be a positive size" in r.stderr, r.stderr

# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python suite.

* ``master``: one real mooncake_master per test module, on free loopback
  ports (RPC, HTTP metadata, metrics), started with a 500 ms lease TTL (or
  the module's LEASE_TTL_MS) and a 2 s client TTL so lease and liveness
  behaviour is observable quickly.  It
  is stopped with SIGTERM (SIGKILL after 10 s) even when a test fails, and
  the module fails if the master died under it.
* ``fresh_master``: the same, private to one test (destructive tests).
* ``spawn_client``: starts client processes (tests/python/client_proc.py);
  every one is stopped, or killed, at teardown.
* ``store`` / ``make_store``: in-process MooncakeDistributedStore objects
  set up against ``master``; closed at teardown.
* ``regbuf``: numpy arrays registered with a store for the zero-copy
  calls, unregistered at teardown.

Run through `make check-python`, which sets PYTHONPATH/LD_LIBRARY_PATH to
the build tree and MC_MASTER_BIN to the freshly built master.
"""

import pytest

from helpers import LEASE_TTL_MS, MiB, ClientProc, Master, multi_tenant_args


def _lease(request):
    return getattr(request.module, "LEASE_TTL_MS", LEASE_TTL_MS)


@pytest.fixture(scope="module")
def master(request):
    m = Master(lease_ttl_ms=_lease(request))
    try:
        yield m
        assert m.alive(), "mooncake_master died during the module:\n" + m.log_text()
    finally:
        m.stop()


@pytest.fixture
def fresh_master(request):
    m = Master(lease_ttl_ms=_lease(request))
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def tenant_master(request, tmp_path):
    """``tenant_master(tenants, extra_args=[])``: a fresh master on which
    ``tenants`` are separate key spaces (--enable_multi_tenants with a
    policy that registers them; helpers.multi_tenant_args); stopped at
    teardown."""
    masters = []

    def make(tenants, extra_args=()):
        m = Master(list(extra_args) + multi_tenant_args(tmp_path, tenants),
                   lease_ttl_ms=_lease(request))
        masters.append(m)
        return m

    try:
        yield make
    finally:
        for m in masters:
            m.stop()


@pytest.fixture
def spawn_client():
    procs = []

    def spawn(name: str = "client", env=None) -> ClientProc:
        c = ClientProc(f"{name}{len(procs)}", env=env)
        procs.append(c)
        return c

    try:
        yield spawn
    finally:
        for c in procs:
            c.stop()


@pytest.fixture
def make_store(master):
    from mooncake.store import MooncakeDistributedStore

    stores = []

    def make(segment: int = 64 * MiB, buffer: int = 16 * MiB,
             metadata: str = "P2PHANDSHAKE", m: Master = None):
        m = m or master
        s = MooncakeDistributedStore()
        md = m.metadata_url if metadata == "http" else metadata
        rc = s.setup("localhost", md, segment, buffer, "tcp", "", m.addr)
        assert rc == 0, f"setup returned {rc}"
        stores.append(s)
        return s

    try:
        yield make
    finally:
        for s in stores:
            s.close()


@pytest.fixture
def store(make_store):
    return make_store()


@pytest.fixture
def regbuf(make_store):
    """``regbuf(store, nbytes, fill=0)``: a numpy uint8 array registered with
    ``store`` (register_buffer must return 0); unregistered at teardown,
    before the stores of ``make_store`` are closed."""
    import numpy as np

    regs = []

    def make(st, nbytes: int, fill: int = 0):
        arr = np.full(nbytes, fill, dtype=np.uint8)
        rc = st.register_buffer(arr.ctypes.data, arr.nbytes)
        assert rc == 0, f"register_buffer returned {rc}"
        regs.append((st, arr))
        return arr

    try:
        yield make
    finally:
        for st, arr in reversed(regs):
            st.unregister_buffer(arr.ctypes.data)

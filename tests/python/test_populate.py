# SPDX-License-Identifier: Apache-2.0
"""Shared memory a client maps for the pool -- setup's segment, one of
allocate_and_mount_segment, a dummy's pool and local buffer -- is faulted in
when it is mapped (MC_STORE_POPULATE=1, the default), so the first write
into each page does not pay its fault on the data path; MC_STORE_POPULATE=0
leaves every page to its first touch (docs/architecture.md, "Segments").
Each case is a client process of its own, whose resident shared memory
(RssShmem in /proc/PID/status) tells which happened."""

import pytest

from helpers import MiB, RealClient, assert_roundtrip

KiB = 1024


def rss_shmem(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1]) * KiB
    raise AssertionError("no RssShmem in /proc/%d/status" % pid)


@pytest.mark.parametrize("threads", [None, "1", "3"])
def test_setup_segment_is_resident_after_setup(master, spawn_client, threads):
    env = {} if threads is None else {"MC_STORE_POPULATE_THREADS": threads}
    c = spawn_client("populated", env=env)
    c.setup(master, segment=96 * MiB)
    assert rss_shmem(c.pid) >= 96 * MiB
    assert_roundtrip(c, f"pop-{threads}", MiB)


def test_zero_leaves_pages_to_their_first_touch(master, spawn_client):
    c = spawn_client("lazy", env={"MC_STORE_POPULATE": "0"})
    c.setup(master, segment=96 * MiB)
    assert rss_shmem(c.pid) < 32 * MiB
    assert_roundtrip(c, "lazy", MiB)


def test_allocated_and_mounted_segment_is_resident(master, spawn_client):
    c = spawn_client("mounted")
    c.setup(master, segment=0)
    before = rss_shmem(c.pid)
    assert c.call("allocate_and_mount", size=80 * MiB) not in (None, 0)
    assert rss_shmem(c.pid) - before >= 80 * MiB


@pytest.mark.parametrize("populate,resident", [("1", True), ("0", False)])
def test_dummy_regions(master, spawn_client, populate, resident):
    real = RealClient(master)
    try:
        d = spawn_client("dummy", env={"MC_STORE_POPULATE": populate})
        r = d.call("setup_dummy", pool=64 * MiB, lbuf=32 * MiB, addr=real.addr)
        assert r["rc"] == 0, r
        if resident:
            assert rss_shmem(d.pid) >= 96 * MiB
        else:
            assert rss_shmem(d.pid) < 32 * MiB
        assert_roundtrip(d, f"dummy-{populate}", MiB)
    finally:
        real.stop()


@pytest.mark.parametrize("var,value", [("MC_STORE_POPULATE", "yes"),
                                       ("MC_STORE_POPULATE_THREADS", "0"),
                                       ("MC_STORE_POPULATE_THREADS", "65")])
def test_a_bad_value_refuses_setup_dummy(spawn_client, var, value):
    """Checked before the dummy maps or looks for its real client."""
    c = spawn_client("refused", env={var: value})
    res = c.call("setup_dummy", pool=16 * MiB, lbuf=0, addr="127.0.0.1:9")
    assert res["rc"] != 0
    assert var in res["detail"]

# SPDX-License-Identifier: Apache-2.0
"""Every environment setting the client library reads at setup takes a
value in its documented range, or setup fails and the client's log names
the variable: no setting is accepted and ignored (docs/transfer.md §7,
docs/protocol.md §5.18, README).  Each case is a client process of its
own, since some settings are read once per process."""

import pytest

from helpers import MiB, assert_roundtrip, assert_setup_refused

BAD = [
    ("MC_STORE_CLIENT_MIN_PORT", "0"),
    ("MC_STORE_CLIENT_MAX_PORT", "70000"),
    ("MC_TCP_LANES_PER_PEER", "65"),
    ("MC_TCP_LANES_PER_PEER", "four"),
    ("MC_TCP_STATUS_TIMEOUT_SEC", "0"),
    ("MC_TE_WORKERS", "-1"),
    ("MC_TE_MAX_CONNECTIONS", "0"),
    ("MC_TE_MAX_CONNECTIONS_PER_PEER", "65537"),
    ("MC_TE_IDLE_TIMEOUT_SEC", "1d"),
    ("MC_TE_HANDSHAKE_TIMEOUT_MS", "99"),
    ("MC_TE_SHM", "2"),
    ("MC_TE_SLICE_SIZE", "4KiB"),
    ("MC_TE_SLICE_SIZE", "big"),
    ("MC_STORE_RPC_TIMEOUT_MS", "soon"),
    ("MC_PUT_ONE_TRIP", "off"),
    ("MC_STORE_POPULATE", "yes"),
    ("MC_STORE_POPULATE_THREADS", "0"),
    ("MC_STORE_POPULATE_THREADS", "65"),
]


@pytest.mark.parametrize("var,value", BAD)
def test_a_bad_setting_refuses_setup(master, spawn_client, var, value):
    assert_setup_refused(spawn_client, master, var, value)


def test_a_bad_failover_wait_refuses_an_etcd_setup(spawn_client):
    """Read only for an etcd:// master: refused before any etcd is asked."""
    c = spawn_client("refused", env={"MC_STORE_FAILOVER_WAIT_MS": "-5"})
    res = c.call("setup", args=["localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                                "etcd://127.0.0.1:9"])
    assert res["rc"] != 0
    assert "MC_STORE_FAILOVER_WAIT_MS" in c.log_text()


def test_a_bad_dummy_timeout_refuses_setup_dummy(spawn_client):
    """Checked before the dummy looks for its real client."""
    c = spawn_client("refused", env={"MC_DUMMY_TIMEOUT_MS": "0"})
    res = c.call("setup_dummy", pool=16 * MiB, lbuf=0, addr="127.0.0.1:9")
    assert res["rc"] != 0
    assert "MC_DUMMY_TIMEOUT_MS" in res["detail"]


def test_good_settings_are_taken(master, spawn_client):
    """Values at the edges of their ranges set up and move bytes."""
    env = {"MC_TCP_LANES_PER_PEER": "1", "MC_TE_WORKERS": "0", "MC_TE_SLICE_SIZE": "64KiB",
           "MC_TE_SHM": "0", "MC_TE_IDLE_TIMEOUT_SEC": "0", "MC_STORE_RPC_TIMEOUT_MS": "3000",
           "MC_PUT_ONE_TRIP": "1", "MC_TCP_STATUS_TIMEOUT_SEC": "3600"}
    c = spawn_client("edges", env=env)
    c.setup(master, segment=16 * MiB)
    assert_roundtrip(c, "edge")

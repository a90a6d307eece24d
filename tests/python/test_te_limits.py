# SPDX-License-Identifier: Apache-2.0
"""A client's transfer port cannot be locked up by idle connections.

* At most MC_TE_MAX_CONNECTIONS_PER_PEER connections are served from one
  address; more are closed on arrival.
* When MC_TE_MAX_CONNECTIONS are served, a new connection takes the place
  of the one idle longest, so a reader still gets every object while many
  idle sockets (from other loopback addresses) sit on the port.
* A served connection idle for MC_TE_IDLE_TIMEOUT_SEC is closed.

The shared-memory path is off (MC_TE_SHM=0) so that reads use the port.
"""

import os
import socket
import time

import pytest

from helpers import wait_until


def te_port(hostname: str) -> int:
    return int(hostname.rsplit(":", 1)[1])


def idle_from(addr: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((addr, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def closed_now(s: socket.socket, wait: float = 0.0) -> bool:
    """True when the peer has closed ``s`` (within ``wait`` seconds)."""
    s.settimeout(wait if wait > 0 else 0.05)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except (socket.timeout, BlockingIOError):
        return False


def test_idle_connections_cannot_lock_readers_out(master, spawn_client):
    holder = spawn_client("holder", env={"MC_TE_SHM": "0", "MC_TE_MAX_CONNECTIONS": "32",
                                         "MC_TE_MAX_CONNECTIONS_PER_PEER": "8"})
    port = te_port(holder.setup(master))
    reader = spawn_client("reader", env={"MC_TE_SHM": "0"})
    reader.setup(master, segment=0)                # every object lands on the holder
    values = {f"te-limits-{i}": os.urandom(64).hex() for i in range(20)}
    for k, v in values.items():
        assert holder.call("put", key=k, hex=v)["rc"] == 0
    idle = []
    try:
        for a in range(2, 12):                     # 10 addresses x 10 connections
            for _ in range(10):
                idle.append(idle_from(f"127.0.0.{a}", port))
        # the 2 over the per-address limit of each address are closed at once
        wait_until(lambda: sum(closed_now(s) for s in idle) >= 20, 10,
                   "the holder to close connections over the per-address limit")
        time.sleep(1.1)                            # idle long enough to be displaced
        for k, v in values.items():
            r = reader.call("get", key=k)
            assert r.get("hex") == v, f"{k}: {r}"
    finally:
        for s in idle:
            s.close()


@pytest.mark.parametrize("idle_s,status_s", [(1, None), (2, 1)],
                         ids=["waits-in-poll", "waits-in-peek"])
def test_an_idle_connection_is_closed_after_the_idle_timeout(master, spawn_client, idle_s,
                                                             status_s):
    """Both ways of waiting: poll() with the idle limit as its timeout (the
    default receive timeout of 5 s is longer than the limit), and the peek
    itself, woken by a receive timeout shorter than the limit."""
    env = {"MC_TE_SHM": "0", "MC_TE_IDLE_TIMEOUT_SEC": str(idle_s)}
    if status_s is not None:
        env["MC_TCP_STATUS_TIMEOUT_SEC"] = str(status_s)
    holder = spawn_client("holder", env=env)
    port = te_port(holder.setup(master))
    s = idle_from("127.0.0.1", port)
    try:
        t0 = time.monotonic()
        assert closed_now(s, idle_s + (status_s or 0) + 4.0), \
            f"an idle connection outlived MC_TE_IDLE_TIMEOUT_SEC={idle_s}"
        assert idle_s - 0.5 < time.monotonic() - t0 < idle_s + (status_s or 0) + 3.0
    finally:
        s.close()


def test_a_waiting_connection_outlives_its_receive_timeouts(master, spawn_client):
    """A served connection waits for its next request in a peek that wakes
    at every receive timeout (1 s here); with the idle limit off it stays
    open through them and then serves as usual."""
    env = {"MC_TE_SHM": "0", "MC_TE_IDLE_TIMEOUT_SEC": "0", "MC_TCP_STATUS_TIMEOUT_SEC": "1"}
    holder = spawn_client("holder", env=env)
    port = te_port(holder.setup(master))
    s = idle_from("127.0.0.1", port)
    try:
        assert not closed_now(s, 2.5), "the connection was closed at a receive timeout"
        s.sendall(b"\0" * 32)  # then a malformed header closes it, as any would
        assert closed_now(s, 5.0)
    finally:
        s.close()

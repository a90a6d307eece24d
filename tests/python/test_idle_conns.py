# SPDX-License-Identifier: Apache-2.0
"""Idle or silent connections cannot lock a reader out of a holder's data port.

Every process of a host shares its address, so the per-address bound
(MC_TE_MAX_CONNECTIONS_PER_PEER) must not let one misbehaving process cut
the whole host off (docs/transfer.md §7):

* A new connection over a bound (its address's, or MC_TE_MAX_CONNECTIONS)
  takes the place of one that is not serving a request, never-used ones
  first; it is refused only when every candidate is busy.
* A connection whose first request header is not complete within
  MC_TE_HANDSHAKE_TIMEOUT_MS (default 3 s) is closed; one that has served a
  request is bound by the idle limit instead.
* The bounds still hold for connections that are serving requests.

The idle connections are plain sockets of this process, from 127.0.0.1,
the reader's own address.  The shared-memory path is off (MC_TE_SHM=0) so
that reads use the port.
"""

import json
import os
import resource
import select
import socket
import struct
import time
from typing import List

import pytest

from helpers import MiB, assert_setup_refused, wait_until

MCTE = 0x4554434D      # transfer request magic
MCTR = 0x5254434D      # transfer response magic
OP_READ, OP_DESCRIBE = 0, 2
HANDSHAKE_DEFAULT_S = 3.0
N_IDLE = 2000


def te_port(hostname: str) -> int:
    return int(hostname.rsplit(":", 1)[1])


def te_header(opcode: int, addr: int = 0, length: int = 0) -> bytes:
    """A request header (docs/transfer.md §3.1): magic, version 1, opcode,
    flags 0, addr, length, gen 0."""
    return struct.pack("<IBBHQQQ", MCTE, 1, opcode, 0, addr, length, 0)


def raise_nofile(need: int) -> None:
    """Let this process (and the processes it starts) hold ``need`` descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below the {need} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def connect_from(addr: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((addr, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
    except BaseException:
        s.close()
        raise
    return s


def open_idle(addr: str, port: int, n: int) -> List[socket.socket]:
    socks: List[socket.socket] = []
    try:
        for _ in range(n):
            socks.append(connect_from(addr, port))
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: List[socket.socket]) -> None:
    for s in socks:
        s.close()


def is_closed(s: socket.socket) -> bool:
    """Nothing is ever sent to these sockets, so readable means closed."""
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def closed_now(s: socket.socket, wait: float) -> bool:
    """True when the peer closes ``s`` within ``wait`` seconds."""
    r, _, _ = select.select([s], [], [], wait)
    return bool(r) and is_closed(s)


def still_open(socks: List[socket.socket], wait: float = 0.0) -> List[socket.socket]:
    """The sockets of ``socks`` the peer has not closed, waiting up to ``wait``
    seconds for all of them to be closed."""
    left = {s.fileno(): s for s in socks}
    p = select.poll()
    for fd in left:
        p.register(fd, select.POLLIN)
    deadline = time.monotonic() + wait
    while True:
        for fd, _ in p.poll(0 if not left else max(0, deadline - time.monotonic()) * 1000):
            if fd in left and is_closed(left[fd]):
                p.unregister(fd)
                del left[fd]
        if not left or time.monotonic() >= deadline:
            return list(left.values())


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if k == 0:
            raise AssertionError(f"the connection was closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def answer_header(s: socket.socket):
    magic, status, length = struct.unpack("<IiQ", recv_exact(s, 16))
    assert magic == MCTR, f"not an answer header: magic {magic:#x}"
    return status, length


def describe(s: socket.socket) -> dict:
    s.sendall(te_header(OP_DESCRIBE))
    status, length = answer_header(s)
    assert status == 0, f"DESCRIBE was refused with {status}"
    return json.loads(recv_exact(s, length))


def holder_with_values(master, spawn_client, env, n: int = 1, both=None):
    """A holder (env added to MC_TE_SHM=0), its data port, a reader with no
    segment (so every object lands on the holder) and ``n`` values put.
    ``both``: more environment for both processes."""
    both = dict({"MC_TE_SHM": "0"}, **(both or {}))
    holder = spawn_client("holder", env=dict(both, **env))
    port = te_port(holder.setup(master))
    reader = spawn_client("reader", env=both)
    reader.setup(master, segment=0)
    values = {f"idle-conns-{os.urandom(4).hex()}": os.urandom(256).hex() for _ in range(n)}
    for k, v in values.items():
        assert holder.call("put", key=k, hex=v)["rc"] == 0
    return holder, port, reader, values


def assert_reads(reader, values) -> None:
    """Every value reads back, each within the reader's I/O timeout (5 s)."""
    for k, v in values.items():
        r = reader.call("get", key=k, timeout=30)
        assert r.get("hex") == v, f"the reader was locked out of {k}: {r}"
        assert r["seconds"] < 5.0, f"reading {k} took {r['seconds']} s"


def test_a_reader_is_served_past_2000_idle_connections_from_its_address(master, spawn_client):
    """The user's report: idle connections from the reader's own address
    filled the per-address table (256) and every later reader from that
    address was refused.  Now the reader's connections take the place of
    never-used ones, and the holder closes every idle one: those over the
    bound as newer ones arrive, the rest at the handshake deadline."""
    raise_nofile(N_IDLE + 1024)
    _, port, reader, values = holder_with_values(master, spawn_client, {}, n=10)
    idle = open_idle("127.0.0.1", port, N_IDLE)
    try:
        assert_reads(reader, values)
        left = still_open(idle, HANDSHAKE_DEFAULT_S + 10.0)
        assert not left, (f"{len(left)} of {N_IDLE} never-used connections are still open "
                          f"{HANDSHAKE_DEFAULT_S + 10.0} s after the reads (the handshake "
                          f"deadline is {HANDSHAKE_DEFAULT_S} s)")
    finally:
        close_all(idle)


def test_never_used_connections_make_room_on_a_full_address(master, spawn_client):
    """With the handshake deadline out of the picture (10 min), the table of
    127.0.0.1 (16) stays full of never-used connections: the newest take the
    place of the older ones, and so does the reader's connection, while the
    table keeps its bound."""
    bound = 16
    _, port, reader, values = holder_with_values(
        master, spawn_client,
        {"MC_TE_MAX_CONNECTIONS_PER_PEER": str(bound), "MC_TE_HANDSHAKE_TIMEOUT_MS": "600000"},
        n=3)
    idle = open_idle("127.0.0.1", port, 200)
    try:
        wait_until(lambda: len(still_open(idle)) == bound, 10,
                   f"the holder to keep exactly {bound} of 200 connections from one address")
        assert all(s in still_open(idle) for s in idle[-bound // 2:]), \
            "older never-used connections were kept while newer ones were closed"
        assert_reads(reader, values)
        left = len(still_open(idle))
        assert bound - 4 <= left < bound, \
            f"{left} idle connections left: the reader's did not take the place of one"
    finally:
        close_all(idle)


def test_never_used_connections_make_room_in_a_full_table(master, spawn_client):
    """The global bound (16) filled by never-used connections from other
    addresses: the reader, read at once (no time to become idle for a
    second), takes the place of one of them."""
    _, port, reader, values = holder_with_values(
        master, spawn_client,
        {"MC_TE_MAX_CONNECTIONS": "16", "MC_TE_HANDSHAKE_TIMEOUT_MS": "600000"}, n=3)
    idle = []
    try:
        for a in range(2, 6):
            idle += open_idle(f"127.0.0.{a}", port, 10)
        wait_until(lambda: len(still_open(idle)) == 16, 10,
                   "the holder to keep 16 of 40 connections")
        assert_reads(reader, values)
        assert len(still_open(idle)) < 16, "the reader was served without making room"
    finally:
        close_all(idle)


@pytest.mark.parametrize("sent", ["nothing", "half", "dribble"])
def test_a_connection_without_a_first_request_is_closed_at_the_deadline(master, spawn_client,
                                                                         sent):
    """Silent (the default deadline), half a header then nothing, or one byte
    every 0.4 s (each receive makes progress, so no receive timeout ends
    it): closed at the handshake deadline, not at the idle limit."""
    env = {"MC_TE_SHM": "0"}
    deadline = HANDSHAKE_DEFAULT_S
    if sent != "nothing":
        env["MC_TE_HANDSHAKE_TIMEOUT_MS"] = "1500"
        deadline = 1.5
    holder = spawn_client("holder", env=env)
    port = te_port(holder.setup(master))
    s = connect_from("127.0.0.1", port)
    try:
        t0 = time.monotonic()
        hdr = te_header(OP_DESCRIBE)
        if sent == "half":
            s.sendall(hdr[:16])
        closed = False
        for i in range(int((deadline + 2.5) / 0.4) + 1):
            if sent == "dribble":
                try:
                    s.sendall(hdr[i:i + 1])
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
            if closed_now(s, 0.4):
                closed = True
                break
        took = time.monotonic() - t0
        assert closed, f"the connection ({sent}) outlived a {deadline} s handshake deadline"
        assert deadline - 0.5 < took < deadline + 2.5, \
            f"closed after {took:.2f} s, the handshake deadline is {deadline} s"
    finally:
        s.close()


def test_the_deadline_does_not_bound_a_connection_that_served_a_request(master,
                                                                         spawn_client):
    """After its first request a connection waits for the next one under the
    idle limit (off here) through receive timeouts (1 s), far past a 0.5 s
    handshake deadline, and is then served again."""
    holder = spawn_client("holder", env={"MC_TE_SHM": "0", "MC_TE_HANDSHAKE_TIMEOUT_MS": "500",
                                         "MC_TE_IDLE_TIMEOUT_SEC": "0",
                                         "MC_TCP_STATUS_TIMEOUT_SEC": "1"})
    port = te_port(holder.setup(master))
    s = connect_from("127.0.0.1", port)
    try:
        first = describe(s)["buffers"]
        assert not closed_now(s, 2.5), "a connection that served a request was closed"
        assert describe(s)["buffers"] == first
    finally:
        s.close()


def test_the_per_address_bound_holds_for_busy_connections(master, spawn_client):
    """Four connections of 127.0.0.1 each in a 32 MiB READ the test does not
    drain (the holder blocks sending): none is idle, so a fifth from that
    address is refused, while another address is served; the four READs
    then complete whole (none was cut to make room)."""
    bound, size = 4, 32 * MiB
    holder = spawn_client("holder", env={"MC_TE_SHM": "0",
                                         "MC_TE_MAX_CONNECTIONS_PER_PEER": str(bound),
                                         "MC_TE_HANDSHAKE_TIMEOUT_MS": "600000",
                                         "MC_TCP_STATUS_TIMEOUT_SEC": "60"})
    port = te_port(holder.setup(master, segment=64 * MiB))
    with connect_from("127.0.0.3", port) as d:
        buf = max(describe(d)["buffers"], key=lambda b: b["length"])
    assert buf["length"] >= size
    busy = []
    try:
        for _ in range(bound):
            s = connect_from("127.0.0.1", port)
            busy.append(s)
            s.sendall(te_header(OP_READ, buf["addr"], size))
            assert answer_header(s) == (0, size)
        extra = connect_from("127.0.0.1", port)
        try:
            assert closed_now(extra, 5.0), \
                "a connection over the per-address bound was served while all were busy"
        finally:
            extra.close()
        with connect_from("127.0.0.2", port) as other:
            assert describe(other)["buffers"], "another address was not served"
        for s in busy:
            s.settimeout(30)
            recv_exact(s, size)
    finally:
        close_all(busy)


def test_with_a_cluster_secret_the_deadline_follows_the_challenge_response(spawn_client,
                                                                           tmp_path):
    """Connections that never answer the challenge count as never used, so
    they make room for a reader; one that passed the challenge-response
    then has the handshake deadline (1 s) for its first request."""
    from helpers import Master
    from test_auth import CLUSTER, _challenge, _proof, _recv_exact

    secret = tmp_path / "cluster.secret"
    secret.write_text(CLUSTER.decode() + "\n")
    m = Master(extra_args=[f"--auth_token_file={secret}"])
    silent: List[socket.socket] = []
    try:
        _, port, reader, values = holder_with_values(
            m, spawn_client,
            {"MC_TE_MAX_CONNECTIONS_PER_PEER": "16", "MC_TE_HANDSHAKE_TIMEOUT_MS": "1000"},
            n=3, both={"MC_AUTH_TOKEN_FILE": str(secret)})
        for _ in range(40):
            silent.append(_challenge(port)[0])
        assert_reads(reader, values)
        s, sn = _challenge(port)
        try:
            s.sendall(_proof(CLUSTER, b"te", sn)[0])
            assert _recv_exact(s, 40)[:4] == b"MCAA", "the proof should pass"
            t0 = time.monotonic()
            assert closed_now(s, 4.0), "a connection that sent no request after the " \
                "challenge-response outlived the handshake deadline"
            took = time.monotonic() - t0
            assert 0.5 < took < 3.5, f"closed {took:.2f} s after the challenge-response"
        finally:
            s.close()
    finally:
        close_all(silent)
        m.stop()


@pytest.mark.parametrize("value", ["0", "99", "600001", "3s"])
def test_an_invalid_handshake_timeout_is_refused(master, spawn_client, value):
    assert_setup_refused(spawn_client, master, "MC_TE_HANDSHAKE_TIMEOUT_MS", value)

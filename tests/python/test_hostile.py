# SPDX-License-Identifier: Apache-2.0
"""Hostile bytes on the wire never take a process down.

Raw sockets send garbage, truncated frames, oversized lengths and
malformed bodies to the master's RPC port (docs/protocol.md: 16-byte "MCRP"
header) and to a client's transfer port (docs/transfer.md: 32-byte "MCTE"
request header).  Afterwards both processes are still running and a normal
put/get between two clients still works.  A well-formed transfer request
for an address range outside the registered segment is refused, while the
same request inside it is served (so the check is really being exercised).
"""

import json
import os
import socket
import struct
import uuid

import pytest

from helpers import MiB, wait_until

# Nothing here depends on leases expiring.
LEASE_TTL_MS = 5000

MCRP = 0x5052434D      # master RPC frame magic
MCTE = 0x4554434D      # transfer request magic
MCTR = 0x5254434D      # transfer response magic
OP_READ, OP_WRITE, OP_DESCRIBE = 0, 1, 2


def rpc_header(opcode, body_len, version=1, flags=0, request_id=7, magic=MCRP):
    return struct.pack("<IBBHII", magic, version, flags, opcode, request_id, body_len)


def te_header(opcode, addr, length, version=1, flags=0, magic=MCTE):
    return struct.pack("<IBBHQQII", magic, version, opcode, flags, addr, length, 0, 0)


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def send_and_close(port, data, read=False):
    """Send ``data``; optionally read until the peer answers or closes."""
    with connect(port) as s:
        try:
            s.sendall(data)
            if read:
                s.recv(65536)
        except OSError:
            pass                    # the peer may drop us mid-way: that is fine


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def te_request(s, opcode, addr, length):
    """One transfer request; returns (status, payload) or None when the peer
    closed the connection instead of answering."""
    s.sendall(te_header(opcode, addr, length))
    hdr = recv_exact(s, 16)
    if hdr is None:
        return None
    magic, status, plen = struct.unpack("<IiQ", hdr)
    assert magic == MCTR
    payload = recv_exact(s, plen) if plen else b""
    return status, payload


@pytest.fixture
def pair(master, spawn_client):
    """Two set-up client processes and the first one's segment name."""
    a = spawn_client("target")
    b = spawn_client("peer")
    a_name = a.setup(master, segment=32 * MiB)
    b.setup(master)
    return a, b, a_name


def assert_still_works(master, a, b, a_name):
    assert master.alive(), master.log_text()
    assert a.alive() and b.alive()
    k = f"after-{uuid.uuid4().hex}"
    put = b.call("put_random", key=k, size=MiB + 1, preferred=a_name)
    assert put["rc"] == 0
    got = b.call("get", key=k)
    assert (got["len"], got["sha256"]) == (MiB + 1, put["sha256"])
    assert a.call("get", key=k)["sha256"] == put["sha256"]


def test_master_survives_garbage(master, pair):
    a, b, a_name = pair
    p = master.port
    rng = os.urandom
    send_and_close(p, rng(4096))
    send_and_close(p, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", read=True)
    send_and_close(p, rpc_header(10, 0, magic=0xDEADBEEF))                 # bad magic
    send_and_close(p, rpc_header(10, 0, version=9))                        # bad version
    send_and_close(p, rpc_header(10, 0, flags=0x80))                       # unknown flag
    send_and_close(p, rpc_header(10, 1000) + rng(10))                      # truncated body
    send_and_close(p, rpc_header(10, 1000)[:9])                            # truncated header
    send_and_close(p, rpc_header(10, (64 << 20) + 1) + rng(64), read=True)  # oversized
    send_and_close(p, rpc_header(10, 0xFFFFFFFF), read=True)               # absurd length
    send_and_close(p, rpc_header(999, 8) + rng(8), read=True)              # unknown opcode
    for op in (1, 3, 10, 11, 13, 14, 15, 20, 23, 24, 25):                 # garbage bodies
        send_and_close(p, rpc_header(op, 64) + rng(64), read=True)
        send_and_close(p, rpc_header(op, 4) + b"\xff\xff\xff\xff", read=True)
    # a body that claims a huge string / list length inside a small frame
    send_and_close(p, rpc_header(13, 8) + struct.pack("<II", 0xFFFFFFF0, 1), read=True)
    send_and_close(p, rpc_header(24, 8) + struct.pack("<II", 0xFFFFFFF0, 0), read=True)
    # an oversized frame is refused: the master drops the connection (it may
    # answer an error first) instead of waiting for 64 MiB
    with connect(p) as s:
        s.sendall(rpc_header(10, (64 << 20) + 1))
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
    # many connections at once, abandoned
    socks = [connect(p) for _ in range(50)]
    for s in socks:
        s.close()
    wait_until(master.alive, 1, "the master to still run")
    assert_still_works(master, a, b, a_name)


def test_client_transfer_port_survives_garbage(master, pair):
    a, b, a_name = pair
    port = int(a_name.rsplit(":", 1)[1])
    rng = os.urandom
    send_and_close(port, rng(4096))
    send_and_close(port, te_header(OP_READ, 0, 16)[:10])                   # truncated header
    send_and_close(port, te_header(OP_READ, 0, 16, magic=0x11223344))      # bad magic
    send_and_close(port, te_header(OP_READ, 0, 16, version=7), read=True)  # bad version
    send_and_close(port, te_header(9, 0, 16), read=True)                   # bad opcode
    send_and_close(port, te_header(OP_READ, 0, 16, flags=1), read=True)    # reserved flags
    send_and_close(port, te_header(OP_WRITE, 0x1000, 1 << 40) + rng(4096), read=True)
    send_and_close(port, te_header(OP_READ, 2**64 - 8, 2**63), read=True)  # wrapping range
    socks = [connect(port) for _ in range(30)]
    for s in socks:
        s.close()
    assert_still_works(master, a, b, a_name)


def test_out_of_range_transfer_is_refused(master, pair):
    a, b, a_name = pair
    port = int(a_name.rsplit(":", 1)[1])
    with connect(port) as s:
        r = te_request(s, OP_DESCRIBE, 0, 0)
        assert r is not None and r[0] == 0, r
        desc = json.loads(r[1])
    assert desc["name"] == a_name
    data_port = desc["tcp_data_port"]
    buf = max(desc["buffers"], key=lambda x: x["length"])
    base, length = buf["addr"], buf["length"]
    assert length >= 32 * MiB

    with connect(data_port) as s:
        # inside the segment: served (proves the frame layout is right)
        status, payload = te_request(s, OP_READ, base + length - 16, 16)
        assert status == 0 and len(payload) == 16
        # straddling the end, just before the start, at 0: refused, no bytes
        for addr, n in [(base + length - 8, 16), (base - 8, 16), (0, 16),
                        (base, length + 1), (base + length, 1)]:
            r = te_request(s, OP_READ, addr, n)
            assert r is not None, f"read of [{addr:#x}, +{n}) closed the connection"
            assert r[0] < 0 and r[1] == b"", (hex(addr), n, r)

    # a write outside the segment is refused too (answered or dropped)
    with connect(data_port) as s:
        s.sendall(te_header(OP_WRITE, base + length, 16) + b"\xee" * 16)
        hdr = recv_exact(s, 16)
        if hdr is not None:
            magic, status, _ = struct.unpack("<IiQ", hdr)
            assert magic == MCTR and status < 0
    assert_still_works(master, a, b, a_name)

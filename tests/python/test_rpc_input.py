# SPDX-License-Identifier: Apache-2.0
"""How the master reads a connection (mooncake-master/rpc.c,
conn_readable_cb), seen from a raw socket (docs/protocol.md §5.10):

* frames cut anywhere, even one byte per segment, are answered whole and
  in order;
* a frame larger than the ordinary read window (256 KiB) is read whole;
* frames the peer sends before half-closing its side are still answered;
* --rpc_conn_timeout_seconds closes a silent connection, and only a
  silent one;
* a peer that sends without reading its answers makes the master stop
  reading it (backpressure), while other clients are answered.
"""

import socket
import struct
import time

from helpers import Master
from rawwire import OP_PING, RawConn, closed_by_peer, header, wire_str

OP_BATCH_EXIST_KEY = 24


def exist_body(keys) -> bytes:
    return struct.pack("<I", len(keys)) + b"".join(wire_str(k) for k in keys)


def test_frames_cut_anywhere_are_answered_whole_and_in_order(master):
    c = RawConn(master.port)
    try:
        stream, rids = b"", []
        for i in range(12):
            c.rid += 1
            rids.append(c.rid)
            stream += header(OP_PING, 16, c.rid) + c.client_id
        # cuts of 1 to 7 bytes, each its own segment (TCP_NODELAY), with a
        # pause now and then so the master sees partial headers and bodies
        pos, step = 0, 1
        while pos < len(stream):
            c.sock.sendall(stream[pos:pos + step])
            pos += step
            step = step % 7 + 1
            if pos % 5 == 0:
                time.sleep(0.001)
        for rid in rids:
            got, st, _ = c.recv()
            assert (got, st) == (rid, 0)
        assert c.ping() == 0
    finally:
        c.close()


def test_a_frame_larger_than_the_read_window_is_read_whole(master):
    keys = [b"big-frame-key-%07d" % i for i in range(20000)]  # about 500 KiB of body
    body = exist_body(keys)
    assert len(body) > 256 << 10
    c = RawConn(master.port)
    try:
        c.rid += 1
        c.sock.sendall(header(OP_BATCH_EXIST_KEY, len(body), c.rid) + body)
        got, st, rest = c.recv()
        assert (got, st) == (c.rid, 0)
        (n,) = struct.unpack_from("<I", rest)
        assert n == len(keys)
        assert set(struct.unpack_from("<%di" % n, rest, 4)) == {0}  # none exists
        assert c.ping() == 0
    finally:
        c.close()


def test_frames_before_a_half_close_are_answered(master):
    c = RawConn(master.port)
    try:
        c.rid += 1
        c.sock.sendall(header(OP_PING, 16, c.rid) + c.client_id)
        c.sock.shutdown(socket.SHUT_WR)
        got, st, _ = c.recv()
        assert (got, st) == (c.rid, 0)
        assert closed_by_peer(c.sock, 10.0)
    finally:
        c.close()


def test_conn_timeout_closes_only_a_silent_connection():
    m = Master(extra_args=["--rpc_conn_timeout_seconds=1"])
    try:
        busy, silent = RawConn(m.port), RawConn(m.port)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:  # a request every 0.2 s: never silent for 1 s
            assert busy.ping() == 0
            time.sleep(0.2)
        assert closed_by_peer(silent.sock, 0.1), "a connection silent for 2.5 s is still open"
        assert busy.ping() == 0
        busy.close()
        silent.close()
    finally:
        m.stop()


def test_a_peer_that_does_not_read_is_paused_not_served_forever(master):
    """A peer pipelining batch lookups of 4096 absent keys (16 KiB of
    answer each) without reading: the master answers until over 8 MiB
    wait, then stops reading it, so the peer's sends stall; another
    client is answered meanwhile, and reading the backlog resumes the
    first."""
    keys = [b"k%05d" % i for i in range(4096)]
    body = exist_body(keys)
    flood = RawConn(master.port)
    flood.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    other = RawConn(master.port)
    try:
        flood.sock.settimeout(0.5)
        sent = 0
        try:
            for _ in range(4096):  # 64 MiB of answers if nothing stopped it
                flood.rid += 1
                flood.sock.sendall(header(OP_BATCH_EXIST_KEY, len(body), flood.rid) + body)
                sent += 1
        except socket.timeout:
            pass
        assert sent < 4096, "the master read 4096 frames whose answers nobody took"
        assert other.ping() == 0
        # reading the answers lets the master go on: every whole frame
        # (all but the one the send timeout cut) is answered, in order
        flood.sock.settimeout(10.0)
        for rid in range(2, flood.rid):
            got, st, _ = flood.recv()
            assert (got, st) == (rid, 0)
        assert other.ping() == 0
    finally:
        flood.close()
        other.close()

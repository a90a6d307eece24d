# SPDX-License-Identifier: Apache-2.0
"""The master bounds what peers can make it buffer and log.

* Each message type has a largest body: a PING header announcing 1 MiB is
  refused (the connection closes) before any body is buffered; a message
  with a list is bounded by --rpc_max_batch_frame_size.
* Unfinished large frames of all connections together are bounded by
  --rpc_max_buffered_input: connections that trickle half of a 16 MiB
  frame each cannot grow the master past the cap; the ones over it are
  closed, and an ordinary client is still answered.
* Log lines about bad frames are rate limited (--log_rate_limit) and the
  next printed one counts what was dropped.
"""

import socket
import struct
import time

from helpers import Master, rss_kib, wait_until
from rawwire import RawConn, closed_by_peer, header

OP_PING, OP_BATCH_PUT_START = 2, 20


def test_a_header_over_its_types_limit_closes_the_connection():
    m = Master(extra_args=["--log_level=warn", "--rpc_max_batch_frame_size=1MB"])
    try:
        c = RawConn(m.port)
        c.sock.sendall(header(OP_PING, 1 << 20))         # PING is 16 bytes at most
        assert closed_by_peer(c.sock), "a 1 MiB PING was waited for"
        c.close()
        c = RawConn(m.port)
        c.sock.sendall(header(OP_BATCH_PUT_START, 2 << 20))
        assert closed_by_peer(c.sock), "a 2 MiB batch passed --rpc_max_batch_frame_size=1MB"
        c.close()
        c = RawConn(m.port)                               # a 512 KiB batch is fine to start
        c.sock.sendall(header(OP_BATCH_PUT_START, 512 << 10))
        assert not closed_by_peer(c.sock, 0.5)
        c.close()
        log = m.log_text()
        assert "PING frame of 1048576 bytes is over its limit of 16 bytes" in log, log
    finally:
        m.stop()


def test_unfinished_frames_of_all_connections_are_capped():
    m = Master(extra_args=["--log_level=warn", "--rpc_max_buffered_input=32MB"])
    conns = []
    try:
        pid = m.proc.pid
        before = rss_kib(pid)
        chunk = b"\0" * (1 << 20)
        refused = 0
        for _ in range(6):
            c = RawConn(m.port)
            conns.append(c)
            c.sock.sendall(header(OP_BATCH_PUT_START, 16 << 20))
            try:
                for _ in range(15):                       # 15 of the 16 MiB, never the rest
                    c.sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                refused += 1
        wait_until(lambda: "past --rpc_max_buffered_input" in m.log_text(), 10,
                   "the master to refuse a frame over the cap")
        time.sleep(0.2)                                   # let the master read what it takes
        grown = rss_kib(pid) - before
        assert grown < 48 * 1024, f"the master grew by {grown} KiB with a 32 MiB cap"
        fresh = RawConn(m.port)
        assert fresh.ping() == 0
        fresh.close()
        assert m.alive()
    finally:
        for c in conns:
            c.close()
        m.stop()


def test_bad_frame_lines_are_rate_limited():
    m = Master(extra_args=["--log_level=warn", "--log_rate_limit=5"])
    try:
        bad = struct.pack("<IBBHII", 0xDEADBEEF, 1, 0, 2, 1, 0)
        for _ in range(60):
            with socket.create_connection(("127.0.0.1", m.port), timeout=5) as s:
                s.sendall(bad)
                closed_by_peer(s)
        time.sleep(1.1)                                   # a new one-second window
        with socket.create_connection(("127.0.0.1", m.port), timeout=5) as s:
            s.sendall(bad)
            closed_by_peer(s)
        wait_until(lambda: "were suppressed" in m.log_text(), 5, "the suppression count")
        lines = [ln for ln in m.log_text().splitlines() if "bad frame header" in ln]
        assert len(lines) <= 5 * 4, f"{len(lines)} lines for 61 bad frames"
    finally:
        m.stop()

# SPDX-License-Identifier: Apache-2.0
"""A raw master RPC connection (docs/protocol.md §2-§5) for tests that must
send what the library would refuse to send, or time single exchanges."""

import socket
import struct
import uuid

MCRP = 0x5052434D      # frame magic
OP_HELLO, OP_PING, OP_REMOVE_BY_REGEX = 1, 2, 36
FLAG_RESPONSE = 1


def header(opcode: int, body_len: int, request_id: int = 7) -> bytes:
    return struct.pack("<IBBHII", MCRP, 1, 0, opcode, request_id, body_len)


def wire_str(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


class RawConn:
    """One HELLO'd connection; call() sends a frame and returns (status, body)."""

    def __init__(self, port: int, tenant: bytes = b"", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = uuid.uuid4().bytes
        self.rid = 0
        st, _ = self.call(OP_HELLO, struct.pack("<I", 1) + self.client_id + wire_str(tenant))
        assert st == 0, f"HELLO answered {st}"

    def send(self, opcode: int, body: bytes) -> int:
        self.rid += 1
        self.sock.sendall(header(opcode, len(body), self.rid) + body)
        return self.rid

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the master closed the connection")
            buf += chunk
        return buf

    def recv(self):
        magic, _ver, flags, _op, rid, blen = struct.unpack("<IBBHII", self._exact(16))
        assert magic == MCRP and flags & FLAG_RESPONSE
        body = self._exact(blen)
        return rid, struct.unpack("<i", body[:4])[0], body[4:]

    def call(self, opcode: int, body: bytes):
        rid = self.send(opcode, body)
        got, st, rest = self.recv()
        assert got == rid
        return st, rest

    def ping(self) -> int:
        st, _ = self.call(OP_PING, self.client_id)
        return st

    def close(self) -> None:
        self.sock.close()


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the master closes ``sock`` within ``timeout`` seconds
    (whatever it sends first is read and dropped)."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def regex_body(pattern: bytes, force: bool = False) -> bytes:
    return wire_str(pattern) + struct.pack("<B", 1 if force else 0)

# SPDX-License-Identifier: Apache-2.0
"""Self-identifying values of the fault suite (tests/cluster/test_faults.py).

A value is a 32-byte header -- magic ``MCFV``, the header's length, the
key's hash, the version and the value's total length -- followed by a body
that is a SHAKE-128 stream of the header.  So a reader that holds some
bytes can tell, without knowing what it expects:

* ``ok``      a complete value of this key, with its version;
* ``foreign`` a value (whole or not) whose header names another key;
* ``torn``    this key's header, but a length or body that does not match
              (a mix of two values, a short or overlong read);
* ``garbage`` no header at all (zeros, a freed range, random bytes).

Versions are unique per write: ``writer id << 32 | counter``, where the
harness gives every worker process (every incarnation) its own writer id.
"""

import hashlib
import struct
from typing import Dict, Optional

MAGIC = b"MCFV"
HEADER = struct.Struct("<4sIQQQ")    # magic, header length, key hash, version, length
assert HEADER.size == 32
MIN_SIZE = 64


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


def version_of(writer: int, counter: int) -> int:
    return (writer << 32) | counter


def writer_of(version: int) -> int:
    return version >> 32


def make(key: str, version: int, size: int) -> bytes:
    """The value ``version`` of ``key``, ``size`` bytes long (>= MIN_SIZE)."""
    assert size >= MIN_SIZE
    head = HEADER.pack(MAGIC, HEADER.size, key_hash(key), version, size)
    return head + hashlib.shake_128(head).digest(size - HEADER.size)


def identify(key: str, data: bytes, names: Optional[Dict[int, str]] = None) -> Dict:
    """What ``data``, read under ``key``, is: {"st": "miss"} for no bytes,
    else {"st": ok|foreign|torn|garbage, "n": length, "v": version (when a
    header was found), "fk": the other key (foreign; its name when
    ``names`` maps its hash, else the hash in hex), "head": the first 48
    bytes in hex (anything but ok)}."""
    n = len(data)
    if n == 0:
        return {"st": "miss"}
    out: Dict = {"n": n}
    if n < HEADER.size:
        return dict(out, st="garbage", head=bytes(data[:48]).hex())
    magic, hlen, kh, version, size = HEADER.unpack_from(data)
    if magic != MAGIC or hlen != HEADER.size:
        return dict(out, st="garbage", head=bytes(data[:48]).hex())
    out["v"] = version
    if kh != key_hash(key):
        out.update(st="foreign", fk=(names or {}).get(kh, f"{kh:016x}"),
                   head=bytes(data[:48]).hex())
        return out
    if size != n or bytes(data[HEADER.size:]) != \
            hashlib.shake_128(bytes(data[:HEADER.size])).digest(n - HEADER.size):
        out.update(st="torn", want=size, head=bytes(data[:48]).hex())
        return out
    out["st"] = "ok"
    return out

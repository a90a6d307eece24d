# SPDX-License-Identifier: Apache-2.0
"""Two-host RDMA check (tests/rdma/README.md), run through tests/rdma/run.sh.

serve HOST [DEVICES]
    An engine with protocol rdma on HOST registers a 64 MiB buffer filled
    with a known pattern and prints its segment name and buffer address.  It
    then waits (at most MC_RDMA_PAIR_WAIT seconds, default 900) for the peer
    to write a pattern of its own and the word DONE into the buffer, checks
    those bytes and prints PASS or FAIL.

peer SEGMENT [DEVICES]
    An engine with protocol rdma on the other host reads the served buffer
    (checking the pattern), writes its own, runs a batch of 64 reads and 64
    writes at scattered offsets, measures READ bandwidth against a tcp engine
    in the same run, writes DONE, and prints PASS or FAIL.  Both engines must
    have logged an RDMA connection and no fallback to tcp.

MC_RDMA_PAIR_MB sets the buffer size (MiB, default 64; both sides must
agree).  MC_RDMA_PAIR_PROTOCOL=tcp runs the same steps over tcp, so the script can
be checked on a host without NICs (run.sh selftest); MC_RDMA_PAIR_MIN_RATIO
(default 1.5) is the bandwidth ratio RDMA must reach over tcp.
"""
import ctypes
import os
import socket
import sys
import time

from mooncake.engine import TransferEngine
from mooncake.store import last_error_detail

BUF = int(os.environ.get("MC_RDMA_PAIR_MB", "64")) << 20
SLICE = 1 << 20
DONE_OFF = BUF - 4096
PROTOCOL = os.environ.get("MC_RDMA_PAIR_PROTOCOL", "rdma")


def pattern(seed, n):
    return bytes((i * 131 + seed) & 0xFF for i in range(256)) * (n // 256)


def batch_offsets():
    """64 scattered 64-byte targets, none in the slice the single WRITE uses."""
    offs = [(i * 977 * 4096) % (BUF - 2 * SLICE) + 8192 for i in range(64)]
    return [o for o in offs if o // SLICE != 1]


def fail(msg):
    print(f"rdma_pair: FAIL: {msg}", flush=True)
    sys.exit(1)


def engine(host, devices, protocol=PROTOCOL):
    e = TransferEngine()
    if e.initialize(host, "P2PHANDSHAKE", protocol, devices) != 0:
        fail(f"initialize({protocol}, {devices!r}): {last_error_detail()}")
    return e


def serve(host, devices):
    e = engine(host, devices)
    buf = ctypes.create_string_buffer(BUF)
    addr = ctypes.addressof(buf)
    ctypes.memmove(addr, pattern(1, BUF), BUF)
    if e.register_memory(addr, BUF, "cpu:0") != 0:
        fail(f"register_memory: {last_error_detail()}")
    print(f"rdma_pair: serving {e.get_local_hostname()} buffer 0x{addr:x} ({BUF} bytes)",
          flush=True)
    deadline = time.monotonic() + float(os.environ.get("MC_RDMA_PAIR_WAIT", "900"))
    while buf.raw[DONE_OFF:DONE_OFF + 4] != b"DONE":
        if time.monotonic() > deadline:
            fail("the peer did not finish in time")
        time.sleep(0.2)
    want = pattern(2, SLICE)
    if buf.raw[SLICE:2 * SLICE] != want:
        fail("the peer's WRITE did not land as sent")
    for i, off in enumerate(batch_offsets()):
        if buf.raw[off:off + 64] != bytes([i]) * 64:
            fail(f"batch write {i} at +{off} did not land")
    e.unregister_memory(addr)
    print("rdma_pair: serve PASS", flush=True)


def timed_reads(e, seg, remote, local, count):
    t0 = time.perf_counter()
    for _ in range(count):
        if e.transfer_sync_read(seg, local, remote, BUF // 2) != 0:
            fail(f"read for the bandwidth check: {last_error_detail()}")
    return count * (BUF // 2) / (time.perf_counter() - t0) / 1e9


def peer(seg, devices):
    host = os.environ.get("MC_RDMA_PAIR_HOST", socket.gethostname())
    e = engine(host, devices)
    remote = e.get_first_buffer_address(seg)
    if remote == 0:
        fail(f"{seg} lists no buffer: {last_error_detail()}")
    local = e.allocate_managed_buffer(BUF)
    if local == 0:
        fail("allocate_managed_buffer")
    # get: the whole buffer, checked
    if e.transfer_sync_read(seg, local, remote, BUF) != 0:
        fail(f"read of {BUF} bytes: {last_error_detail()}")
    if ctypes.string_at(local, BUF) != pattern(1, BUF):
        fail("the READ brought other bytes than the server's pattern")
    # put: one slice
    ctypes.memmove(local, pattern(2, SLICE), SLICE)
    if e.transfer_sync_write(seg, local, remote + SLICE, SLICE) != 0:
        fail(f"write: {last_error_detail()}")
    # batch: small writes at scattered offsets, then read them back
    offs = batch_offsets()
    for i in range(len(offs)):
        ctypes.memmove(local + 2 * SLICE + i * 64, bytes([i]) * 64, 64)
    srcs = [local + 2 * SLICE + i * 64 for i in range(len(offs))]
    if e.batch_transfer_sync_write(seg, srcs, [remote + o for o in offs], [64] * len(offs)) != 0:
        fail(f"batch write: {last_error_detail()}")
    back = [local + 4 * SLICE + i * 64 for i in range(len(offs))]
    if e.batch_transfer_sync_read(seg, back, [remote + o for o in offs], [64] * len(offs)) != 0:
        fail(f"batch read: {last_error_detail()}")
    for i in range(len(offs)):
        if ctypes.string_at(back[i], 64) != ctypes.string_at(srcs[i], 64):
            fail(f"batch read {i} does not match what was written")
    # a range outside the buffer is refused, not moved
    if e.transfer_sync_read(seg, local, remote + BUF - 8, 64) == 0:
        fail("a read past the served buffer succeeded")
    # bandwidth: this engine against a tcp engine, same server, same run
    gbps = timed_reads(e, seg, remote, local, 16)
    t = engine(host, "", "tcp")
    tl = t.allocate_managed_buffer(BUF)
    tcp_gbps = timed_reads(t, seg, remote, tl, 16)
    ratio = gbps / tcp_gbps
    print(f"rdma_pair: READ {BUF // 2 >> 20} MiB x16: {PROTOCOL} {gbps:.2f} GB/s, "
          f"tcp {tcp_gbps:.2f} GB/s, ratio {ratio:.2f}", flush=True)
    # tell the server we are done (it checks what we wrote)
    ctypes.memmove(local, b"DONE", 4)
    if e.transfer_sync_write(seg, local, remote + DONE_OFF, 4) != 0:
        fail(f"final write: {last_error_detail()}")
    min_ratio = float(os.environ.get("MC_RDMA_PAIR_MIN_RATIO", "1.5"))
    if PROTOCOL == "rdma" and ratio < min_ratio:
        fail(f"RDMA reached {ratio:.2f}x tcp, below {min_ratio}")
    print("rdma_pair: peer PASS", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("serve", "peer"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    (serve if sys.argv[1] == "serve" else peer)(sys.argv[2],
                                                sys.argv[3] if len(sys.argv) > 3 else "")

# SPDX-License-Identifier: Apache-2.0
"""``mooncake.engine``: the transfer engine as upstream's Python API.

A :class:`TransferEngine` serves the memory registered on it to peers on one
TCP port (its segment name is ``"host:port"``) and moves bytes one-sidedly
between local memory and a peer's registered memory, which is what a
prefill/decode (PD) KV-cache connector does::

    from mooncake.engine import TransferEngine

    decode = TransferEngine()
    decode.initialize("localhost", "P2PHANDSHAKE", "tcp", "")
    kv = decode.allocate_managed_buffer(64 << 20)     # registered for peers

    prefill = TransferEngine()                         # another process
    prefill.initialize("localhost", "P2PHANDSHAKE", "tcp", "")
    src = prefill.allocate_managed_buffer(1 << 20)
    prefill.write_bytes_to_buffer(src, block, len(block))
    rc = prefill.transfer_sync_write("localhost:12345", src, kv, len(block))

Conventions (upstream's ``transfer_engine_py``): addresses are ints; calls
return ``int`` 0 on success and -1 on failure (the reason is logged on the
``mooncake.engine`` logger and kept in :func:`mooncake.store.last_error_detail`);
async calls return a batch id, 0 on failure.  A peer is reachable only
inside memory it registered: any other remote address fails with -1 and
no byte moves.  Every call that waits releases the GIL.

Sync transfers are bounded by ``MC_TRANSFER_TIMEOUT`` seconds (read at
construction, at least 5, default 30) plus one second per GiB moved.

What this build lacks fails loudly: CUDA-stream transfers, notifies and
``get_local_topology`` raise :class:`NotImplementedError`; the
``SUPPORT_*`` constants say so up front.

May import: the native binding and _errors (the low layer); never store,
which takes an engine at setup().
"""

import array
import enum
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mooncake import capi as _capi
from mooncake._errors import last_error_detail

__all__ = [
    "TransferEngine",
    "InnerTransferEngine",
    "TransferOpcode",
    "TransferNotify",
    "Read",
    "Write",
    "SUPPORT_CUDA",
    "SUPPORT_EFA",
    "SUPPORT_HIP",
    "SUPPORT_MNNVL",
    "SUPPORT_MUSA",
    "SUPPORT_INTRA_NVLINK",
    "MANAGED_SIZE_CLASSES",
    "MANAGED_CHUNK_SIZE",
]

_log = logging.getLogger("mooncake.engine")

#: This build moves host memory (TCP, same-host shared memory, and rdma /
#: efa where built): no device memory, HIP, MNNVL, MUSA or NVLink.
SUPPORT_CUDA = False
#: Built with the libfabric transport (protocol "efa"; libfabric.so.1 is
#: loaded when an engine starts with it).
SUPPORT_EFA = bool(_capi.Engine.protocol_built("efa"))
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False

#: Size classes of :meth:`TransferEngine.allocate_managed_buffer` (upstream's
#: table): powers of two from 8 KiB to 256 MiB.
MANAGED_SIZE_CLASSES: Tuple[int, ...] = tuple(8192 << i for i in range(16))
#: Registered chunks the size-class blocks are carved from.
MANAGED_CHUNK_SIZE = 2 << 30

_DEFAULT_TIMEOUT_S = 30
_MIN_TIMEOUT_S = 5


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer, seen from the caller."""

    # the values of mc_te_op_t (MC_TE_READ, MC_TE_WRITE), which are upstream's

    #: remote -> local
    Read = 0
    #: local -> remote
    Write = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """Upstream's notify message.  This engine has no notify channel, so
    passing one to a transfer raises :class:`NotImplementedError`."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg


class InnerTransferEngine:
    """What :meth:`TransferEngine.get_engine` returns: the engine itself,
    for ``MooncakeDistributedStore.setup(..., engine=...)``."""

    def __init__(self, owner: "TransferEngine") -> None:
        self._owner = owner

    def get_engine_ptr(self) -> int:
        return self._owner.get_engine_ptr()


def _timeout_from_env() -> int:
    raw = os.environ.get("MC_TRANSFER_TIMEOUT", "")
    try:
        value = int(raw) if raw.strip() else _DEFAULT_TIMEOUT_S
    except ValueError:
        _log.warning("MC_TRANSFER_TIMEOUT=%r is not an integer; using %d s", raw,
                     _DEFAULT_TIMEOUT_S)
        value = _DEFAULT_TIMEOUT_S
    return max(value, _MIN_TIMEOUT_S)


def _lists_ok(*lists: Sequence[Any]) -> bool:
    return len({len(v) for v in lists}) == 1


def _pack(buffers: Sequence[int], peers: Sequence[int], lengths: Sequence[int]) -> array.array:
    """(local, remote, length) triples as native uint64, what capi.Engine takes."""
    out = array.array("Q")
    for b, p, n in zip(buffers, peers, lengths):
        out.extend((b, p, n))
    return out


class _ManagedAllocator:
    """Size-class allocator over registered chunks (upstream's scheme).

    A request is rounded up to the smallest class of
    :data:`MANAGED_SIZE_CLASSES`; each class keeps a free list of blocks.  An
    empty class carves its next block from the current chunk (a
    :data:`MANAGED_CHUNK_SIZE` anonymous mapping registered once with the
    engine, whose pages are only committed when touched); when the chunk
    cannot hold the block, its tail is split into the largest blocks that
    fit and pushed on their classes' free lists, and a new chunk is mapped.
    Freed blocks go back to their class (chunks stay registered until the
    engine goes).  Requests above the largest class get a dedicated
    registered mapping, unregistered and unmapped when freed.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._free: Dict[int, List[int]] = {c: [] for c in MANAGED_SIZE_CLASSES}
        self._live: Dict[int, int] = {}       # block address -> class (or dedicated length)
        self._dedicated: Dict[int, int] = {}  # address -> mapping length
        self._chunks: List[int] = []
        self._cursor = 0
        self._chunk_end = 0

    @staticmethod
    def size_class(length: int) -> int:
        for c in MANAGED_SIZE_CLASSES:
            if length <= c:
                return c
        return 0

    def _map(self, length: int) -> int:
        # a shareable memfd (same-host peers map it), its pages committed
        # as they are touched: a chunk is 2 GiB, mostly unused
        addr = _capi.mooncake_host_mem_alloc_lazy(length)
        if addr == 0:
            _log.error("allocate_managed_buffer: cannot map %d bytes", length)
            return 0
        rc = self._engine.mem_reg(addr, length, "")
        if rc != 0:
            _log.error("allocate_managed_buffer: registering %d bytes failed: %d (%s)",
                       length, rc, last_error_detail())
            _capi.mooncake_host_mem_free(addr)
            return 0
        return addr

    def _spill_tail(self) -> None:
        """Give what is left of the current chunk to the free lists."""
        while self._chunk_end - self._cursor >= MANAGED_SIZE_CLASSES[0]:
            rest = self._chunk_end - self._cursor
            c = max(k for k in MANAGED_SIZE_CLASSES if k <= rest)
            self._free[c].append(self._cursor)
            self._cursor += c

    def allocate(self, length: int) -> int:
        if length <= 0:
            _log.error("allocate_managed_buffer: length must be > 0, not %d", length)
            return 0
        c = self.size_class(length)
        with self._lock:
            if c == 0:
                addr = self._map(length)
                if addr:
                    self._dedicated[addr] = length
                    self._live[addr] = length
                return addr
            if self._free[c]:
                addr = self._free[c].pop()
            else:
                if self._chunk_end - self._cursor < c:
                    chunk = self._map(MANAGED_CHUNK_SIZE)
                    if chunk == 0:
                        return 0
                    self._spill_tail()
                    self._chunks.append(chunk)
                    self._cursor, self._chunk_end = chunk, chunk + MANAGED_CHUNK_SIZE
                addr = self._cursor
                self._cursor += c
            self._live[addr] = c
            return addr

    def free(self, addr: int, length: int) -> int:
        with self._lock:
            c = self._live.get(addr)
            if c is None:
                _log.error("free_managed_buffer: 0x%x is not a managed buffer", addr)
                return -1
            if addr in self._dedicated:
                if length != c:
                    _log.error("free_managed_buffer: 0x%x has %d bytes, not %d", addr, c, length)
                    return -1
                del self._live[addr], self._dedicated[addr]
                self._engine.mem_dereg(addr)
                _capi.mooncake_host_mem_free(addr)
                return 0
            if self.size_class(length) != c:
                _log.error("free_managed_buffer: 0x%x is a %d-byte block; length %d does not "
                           "match", addr, c, length)
                return -1
            del self._live[addr]
            self._free[c].append(addr)
            return 0

    def release_all(self) -> None:
        """Unregister and unmap everything (the engine is going)."""
        with self._lock:
            for addr, length in list(self._dedicated.items()) + \
                    [(a, MANAGED_CHUNK_SIZE) for a in self._chunks]:
                self._engine.mem_dereg(addr)
                _capi.mooncake_host_mem_free(addr)
            self._free = {c: [] for c in MANAGED_SIZE_CLASSES}
            self._live.clear()
            self._dedicated.clear()
            self._chunks.clear()
            self._cursor = self._chunk_end = 0


class _Batch:
    __slots__ = ("job", "deadline_ms")

    def __init__(self, job: int, deadline_ms: float) -> None:
        self.job = job
        self.deadline_ms = deadline_ms


class TransferEngine:
    """Upstream's ``mooncake.engine.TransferEngine`` over libmooncake.

    Construct, then :meth:`initialize`; every other call before that fails
    (-1, 0 or an empty result).  The engine lives until the object is
    garbage-collected; a store set up with ``engine=`` keeps it alive.
    """

    def __init__(self) -> None:
        self._te = _capi.Engine()
        self._timeout_s = _timeout_from_env()
        self._alloc = _ManagedAllocator(self._te)
        self._lock = threading.Lock()
        self._batches: Dict[int, _Batch] = {}
        self._next_batch = 1
        self._initialized = False
        self._protocol = ""

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:  # interpreter teardown
            pass

    def _shutdown(self) -> None:
        te = getattr(self, "_te", None)
        if te is None:
            return
        with self._lock:
            jobs = [b.job for b in self._batches.values()]
            self._batches.clear()
        for job in jobs:
            te.job_release(job)
        te.destroy()  # lets queued jobs finish first
        self._alloc.release_all()

    # ---- setup --------------------------------------------------------------

    def initialize(self, local_hostname: str, metadata_server: str, protocol: str,
                   device_name: str) -> int:
        """Start the engine: serve on a port of ``local_hostname`` ("host" picks
        one in 12300-14300, "host:port" asks for that one).

        ``metadata_server`` is ``"P2PHANDSHAKE"`` or ``"http://host:port/metadata"``
        (a bare ``host:port`` is taken as etcd, which this build lacks).
        Returns 0, or -1 with the reason logged."""
        if metadata_server == "P2PHANDSHAKE" or "://" in metadata_server:
            return self.initialize_ext(local_hostname, metadata_server, protocol,
                                       device_name, "")
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name,
                                   "etcd")

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str,
                       device_name: str, metadata_type: str) -> int:
        """:meth:`initialize` with the metadata type given apart: the connection
        string is ``metadata_type://metadata_server`` unless the server already
        has a ``://`` or is ``"P2PHANDSHAKE"``."""
        if self._initialized:
            _log.error("initialize: the engine is already initialized")
            return -1
        conn = metadata_server
        if metadata_server != "P2PHANDSHAKE" and "://" not in metadata_server and metadata_type:
            conn = f"{metadata_type}://{metadata_server}"
        rc = self._te.create(local_hostname, conn, protocol or "tcp", device_name or "")
        if rc != 0:
            _log.error("initialize(%s, %s, %s) failed: %d (%s)", local_hostname, conn,
                       protocol, rc, last_error_detail())
            return -1
        self._initialized = True
        self._protocol = (protocol or "tcp").lower()
        return 0

    def get_rpc_port(self) -> int:
        """The port peers reach this engine on (-1 before initialize)."""
        name = self._te.name()
        return int(name.rsplit(":", 1)[1]) if name else -1

    def get_local_hostname(self) -> str:
        """This engine's segment name, ``"host:port"`` ("" before initialize)."""
        return self._te.name()

    def get_engine(self) -> InnerTransferEngine:
        """The engine, for ``MooncakeDistributedStore.setup(..., engine=...)``."""
        return InnerTransferEngine(self)

    def get_engine_ptr(self) -> int:
        """The C engine handle (``mc_te_h``) as an int, 0 before initialize."""
        return self._te.ptr()

    # ---- memory ----------------------------------------------------------------

    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        """Serve ``[buffer_addr, +capacity)`` to peers.  0, or the negative
        status (overlap with a registered region, zero length, ...)."""
        rc = self._te.mem_reg(buffer_addr, capacity, "" if location == "*" else location)
        if rc != 0:
            _log.error("register_memory(0x%x, %d) failed: %d (%s)", buffer_addr, capacity, rc,
                       last_error_detail())
        return rc

    def unregister_memory(self, buffer_addr: int) -> int:
        """Stop serving the region that starts at ``buffer_addr`` (waits for
        transfers using it)."""
        rc = self._te.mem_dereg(buffer_addr)
        if rc != 0:
            _log.error("unregister_memory(0x%x) failed: %d (%s)", buffer_addr, rc,
                       last_error_detail())
        return rc

    def batch_register_memory(self, buffer_addresses: Sequence[int], capacities: Sequence[int],
                              location: str = "*") -> int:
        """Register each region; stops at (and returns) the first failure."""
        if not _lists_ok(buffer_addresses, capacities):
            _log.error("batch_register_memory: the lists differ in length")
            return -1
        for addr, cap in zip(buffer_addresses, capacities):
            rc = self.register_memory(addr, cap, location)
            if rc != 0:
                return rc
        return 0

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        """Unregister each region; returns the first failure, 0 if none."""
        first = 0
        for addr in buffer_addresses:
            rc = self.unregister_memory(addr)
            if rc != 0 and first == 0:
                first = rc
        return first

    def allocate_managed_buffer(self, length: int) -> int:
        """A buffer of at least ``length`` bytes registered for peers, from the
        size-class allocator (see :data:`MANAGED_SIZE_CLASSES`); 0 on failure."""
        if not self._initialized:
            _log.error("allocate_managed_buffer: the engine is not initialized")
            return 0
        return self._alloc.allocate(int(length))

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        """Give back a buffer of :meth:`allocate_managed_buffer` (``length`` as
        allocated).  0, or -1 for an address or length it did not hand out."""
        return self._alloc.free(int(buffer_addr), int(length))

    @staticmethod
    def write_bytes_to_buffer(dest_address: int, src: bytes, length: int) -> int:
        """Copy ``src[:length]`` to local memory at ``dest_address``."""
        if length < 0 or length > len(src):
            _log.error("write_bytes_to_buffer: length %d outside the %d source bytes", length,
                       len(src))
            return -1
        if length:
            memoryview(_capi.mooncake_region_view(dest_address, length))[:] = \
                memoryview(src).cast("B")[:length]
        return 0

    @staticmethod
    def read_bytes_from_buffer(source_address: int, length: int) -> bytes:
        """A copy of ``length`` bytes of local memory at ``source_address``."""
        if length <= 0:
            return b""
        return bytes(_capi.mooncake_region_view(source_address, length))

    # ---- segments ----------------------------------------------------------------

    def _segment(self, name: str, what: str) -> int:
        seg = self._te.segment_open(name)
        if seg < 0:
            _log.error("%s: cannot open segment %s: %d (%s)", what, name, seg,
                       last_error_detail())
        return seg

    def get_first_buffer_address(self, segment_name: str) -> int:
        """Lowest address the segment serves (its descriptor fetched afresh), 0
        when it serves none or cannot be reached."""
        seg = self._segment(segment_name, "get_first_buffer_address")
        if seg < 0:
            return 0
        if self._te.segment_refresh(seg) != 0:
            _log.error("get_first_buffer_address: %s did not answer (%s)", segment_name,
                       last_error_detail())
            return 0
        return self._te.segment_buffer(seg, 0)

    def send_probe(self, peer_server_name: str) -> int:
        """0 when the peer answers a descriptor request, else -1."""
        seg = self._segment(peer_server_name, "send_probe")
        if seg < 0:
            return -1
        rc = self._te.segment_refresh(seg)
        if rc != 0:
            _log.error("send_probe: %s did not answer: %d (%s)", peer_server_name, rc,
                       last_error_detail())
            return -1
        return 0

    # ---- transfers ---------------------------------------------------------------

    def _deadline_ms(self, total: int) -> int:
        # upstream: timeout plus one nanosecond per byte (about 1 GiB/s)
        return self._timeout_s * 1000 + total // 1_000_000

    def _submit(self, what: str, target: str, opcode: int, buffers: Sequence[int],
                peers: Sequence[int], lengths: Sequence[int]) -> Tuple[int, int]:
        """(job, deadline in ms) or (0, 0) with the reason logged."""
        if not self._initialized:
            _log.error("%s: the engine is not initialized", what)
            return 0, 0
        if not _lists_ok(buffers, peers, lengths) or not buffers:
            _log.error("%s: buffers, peer addresses and lengths must be non-empty lists "
                       "of one length", what)
            return 0, 0
        seg = self._segment(target, what)
        if seg < 0:
            return 0, 0
        try:
            packed = _pack(buffers, peers, lengths)
        except (OverflowError, TypeError) as e:
            _log.error("%s: bad address or length: %s", what, e)
            return 0, 0
        job = self._te.submit(int(opcode), seg, packed)
        if job == 0:
            _log.error("%s to %s could not start (%s)", what, target, last_error_detail())
            return 0, 0
        return job, self._deadline_ms(sum(lengths))

    def _sync(self, what: str, target: str, opcode: int, buffers: Sequence[int],
              peers: Sequence[int], lengths: Sequence[int], notify: Any = None) -> int:
        if notify is not None:
            raise NotImplementedError("transfer notifies: this engine has no notify channel")
        job, deadline = self._submit(what, target, opcode, buffers, peers, lengths)
        if job == 0:
            return -1
        rc = self._te.job_wait(job, deadline)
        self._te.job_release(job)
        if rc == 1:
            return 0
        if rc == 0:
            _log.error("%s to %s timed out after %d ms (MC_TRANSFER_TIMEOUT=%d s)", what,
                       target, deadline, self._timeout_s)
        else:
            _log.error("%s to %s failed: %d (%s)", what, target, rc, last_error_detail())
        return -1

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                            length: int, transport_hint: str = "") -> int:
        """Write ``length`` local bytes at ``buffer`` to ``peer_buffer_address``
        of segment ``target_hostname``.  0 or -1."""
        return self._sync("transfer_sync_write", target_hostname, Write, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                           length: int, transport_hint: str = "") -> int:
        """Read ``length`` bytes at ``peer_buffer_address`` of the peer into
        ``buffer``.  0 or -1."""
        return self._sync("transfer_sync_read", target_hostname, Read, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                      length: int, opcode: TransferOpcode, notify: Optional[TransferNotify] = None,
                      transport_hint: str = "") -> int:
        """One transfer in direction ``opcode``.  0 or -1."""
        return self._sync("transfer_sync", target_hostname, int(opcode), [buffer],
                          [peer_buffer_address], [length], notify)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                  transport_hint: str = "") -> int:
        """Several writes to one peer, run concurrently.  0 when all succeeded."""
        return self._sync("batch_transfer_sync_write", target_hostname, Write, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: Sequence[int],
                                 peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                 transport_hint: str = "") -> int:
        """Several reads from one peer, run concurrently.  0 when all succeeded."""
        return self._sync("batch_transfer_sync_read", target_hostname, Read, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync(self, target_hostname: str, buffers: Sequence[int],
                            peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                            opcode: TransferOpcode, notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        """Several transfers in direction ``opcode``.  0 when all succeeded."""
        return self._sync("batch_transfer_sync", target_hostname, int(opcode), buffers,
                          peer_buffer_addresses, lengths, notify)

    def _async(self, what: str, target: str, opcode: int, buffers: Sequence[int],
               peers: Sequence[int], lengths: Sequence[int]) -> int:
        job, deadline = self._submit(what, target, opcode, buffers, peers, lengths)
        if job == 0:
            return 0
        with self._lock:
            bid = self._next_batch
            self._next_batch += 1
            self._batches[bid] = _Batch(job, time.monotonic() * 1000 + deadline)
        return bid

    def batch_transfer_async_write(self, target_hostname: str, buffers: Sequence[int],
                                   peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                   transport_hint: str = "") -> int:
        """Start writes in the background (library worker threads); a batch id
        for :meth:`get_batch_transfer_status`/:meth:`transfer_check_status`,
        0 on failure.  The local buffers must stay valid until it completes."""
        return self._async("batch_transfer_async_write", target_hostname, Write, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                  transport_hint: str = "") -> int:
        """Start reads in the background; a batch id, 0 on failure."""
        return self._async("batch_transfer_async_read", target_hostname, Read, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname: str, buffers: Sequence[int],
                             peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                             opcode: TransferOpcode, transport_hint: str = "") -> int:
        """Start transfers in direction ``opcode``; a batch id, 0 on failure."""
        return self._async("batch_transfer_async", target_hostname, int(opcode), buffers,
                           peer_buffer_addresses, lengths)

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                              length: int, transport_hint: str = "") -> int:
        """Start one write without waiting; a batch id for
        :meth:`transfer_check_status`, 0 on failure."""
        return self._async("transfer_submit_write", target_hostname, Write, [buffer],
                           [peer_buffer_address], [length])

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, 0 in progress, -1 failed (or unknown id), -2 past its
        deadline (MC_TRANSFER_TIMEOUT; the id stays valid).  1 and -1 free
        the id."""
        with self._lock:
            b = self._batches.get(batch_id)
        if b is None:
            _log.error("transfer_check_status: unknown batch id %d", batch_id)
            return -1
        rc = self._te.job_wait(b.job, 0)
        if rc == 0:
            return -2 if time.monotonic() * 1000 > b.deadline_ms else 0
        with self._lock:
            if self._batches.pop(batch_id, None) is None:
                return -1  # another thread settled it
        self._te.job_release(b.job)
        if rc == 1:
            return 1
        _log.error("batch %d failed: %d (%s)", batch_id, rc, last_error_detail())
        return -1

    def get_batch_transfer_status(self, batch_ids: List[int]) -> int:
        """Wait for every batch: 0 when all completed, -1 when any failed, timed
        out or is unknown.  Frees the ids (a timed-out one finishes in the
        background)."""
        with self._lock:
            found = [(bid, self._batches.pop(bid, None)) for bid in batch_ids]
        rc_all = 0
        for bid, b in found:
            if b is None:
                _log.error("get_batch_transfer_status: unknown batch id %d", bid)
                rc_all = -1
                continue
            left = max(0, int(b.deadline_ms - time.monotonic() * 1000))
            rc = self._te.job_wait(b.job, left)
            self._te.job_release(b.job)
            if rc == 0:
                _log.error("batch %d timed out (MC_TRANSFER_TIMEOUT=%d s)", bid, self._timeout_s)
                rc_all = -1
            elif rc != 1:
                _log.error("batch %d failed: %d (%s)", bid, rc, last_error_detail())
                rc_all = -1
        return rc_all

    # ---- what this build lacks ----------------------------------------------------

    def _no_cuda(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("CUDA-stream transfers: this build has no CUDA "
                                  "(SUPPORT_CUDA is False)")

    transfer_write_on_cuda = _no_cuda
    transfer_read_on_cuda = _no_cuda
    batch_transfer_write_on_cuda = _no_cuda
    batch_transfer_read_on_cuda = _no_cuda

    def get_notifies(self) -> List[TransferNotify]:
        raise NotImplementedError("transfer notifies: this engine has no notify channel")

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        raise NotImplementedError("get_local_topology: this build has no device topology "
                                  "discovery (TCP and shared memory only)")

    def warmup_efa_segment(self, segment_name: str) -> int:
        """On an efa engine, resolve ``segment_name`` and fetch its descriptor
        now (its fabric address and keys) so the first transfer does not
        pay for it: 0, or -1 when the peer cannot be reached.  A no-op
        returning 0 on any other protocol, as upstream."""
        if self._protocol != "efa":
            return 0
        seg = self._segment(segment_name, "warmup_efa_segment")
        if seg < 0:
            return -1
        rc = self._te.segment_refresh(seg)
        if rc != 0:
            _log.error("warmup_efa_segment: %s did not answer: %d (%s)", segment_name, rc,
                       last_error_detail())
            return -1
        return 0

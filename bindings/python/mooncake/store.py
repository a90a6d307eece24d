# SPDX-License-Identifier: Apache-2.0
"""Mooncake Store client: ``MooncakeDistributedStore`` and ``ReplicateConfig``.

A store client contributes ``global_segment_size`` bytes of its own memory
to the distributed pool, connects to a ``mooncake_master`` and then puts and
gets objects (bytes) by key::

    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    store.setup("localhost", "P2PHANDSHAKE", 512 << 20, 128 << 20,
                "tcp", "", "localhost:50051")
    store.put("hello_key", b"Hello, Mooncake Store!")
    print(store.get("hello_key").decode())
    store.close()

Conventions (the upstream contract, which existing clients rely on):

* methods return ``int`` status codes (0 success, negative
  :class:`ErrorCode`), never raise for a failed operation;
* ``get`` returns ``b""`` for a missing key or on any error;
* ``put`` of an existing key returns 0 and keeps the old value;
* reads (``get``, ``get_size``, ``is_exist``, ...) grant a lease: removing
  the object during it returns ``OBJECT_HAS_LEASE`` unless ``force=True``;
* calls before :meth:`~MooncakeDistributedStore.setup` or after
  :meth:`~MooncakeDistributedStore.close` return
  ``UNAVAILABLE_IN_CURRENT_STATUS``;
* arguments of the wrong type raise :class:`TypeError`.

Beyond put/get the client has the whole upstream object API: ``upsert*``
(insert or overwrite), the removal family (``batch_remove``,
``remove_by_regex``, ``remove_all``, ``batch_replica_clear``), zero-copy reads and writes on
registered memory (``register_buffer``, ``put_from``, ``get_into``,
``batch_*_from``/``batch_get_into*``, ``get_into_ranges``), ranged sessions
for layer-wise KV transfer (``batch_{get,put}_session_*``), store-owned
buffers (``get_buffer`` -> :class:`BufferHandle`, ``alloc_from_mem_pool``;
see also :mod:`mooncake.buffer_pool`), replica descriptors and background
copy/move tasks (``create_copy_task``, ``create_move_task``,
``query_task``), and PyTorch tensors on the upstream byte layout
(``put_tensor``/``get_tensor``, batch, pub, upsert, tensor-parallel shards
``*_with_tp``, zero-copy ``*_tensor_into``/``*_tensor_from``; torch is
imported on first use).  Zero-copy
calls take addresses as ints: a list whose lengths disagree, or an int
outside [0, 2**64-1], gives ``INVALID_PARAMS`` results (the batch calls
return one per key) rather than an exception; a non-int is a TypeError.

Every call that waits for the network releases the GIL, so other Python
threads keep running, and one store may be used by many threads at once.

May import: the low layer (the native binding, _errors, _util, _hooks,
_malloc, _tensor, buffer_pool, engine); never structured_object_store,
async_store or reshard, which are built on it (it reaches the weight
store's opener through _hooks).
"""

import enum
import logging
import os
import uuid
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, overload

from mooncake import capi as _capi
from mooncake import _hooks, _malloc, _util
from mooncake import engine as _engine
from mooncake._errors import ErrorCode, describe, last_error_detail
from mooncake._tensor import TensorMethods
# Upstream's mooncake.store exports the pool too (and the Registered* names).
from mooncake.buffer_pool import (BufferLease, BufferLeaseView, BufferPool,
                                  RegisteredBufferLease, RegisteredBufferLeaseView,
                                  RegisteredBufferPool, store_capsule)

__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
    "ReplicaStatus",
    "TaskType",
    "TaskStatus",
    "QueryTaskResponse",
    "UUIDPair",
    "ReplicaDescriptor",
    "NoFDescriptor",
    "MooncakeDistributedNoFRegister",
    "MemoryDescriptor",
    "DiskDescriptor",
    "LocalDiskDescriptor",
    "Descriptor",
    "BufferDescriptor",
    "BufferHandle",
    "MooncakeHostMemAllocator",
    "get_alloc_func_addr",
    "get_free_func_addr",
    "bind_to_numa_node",
    "BufferPool",
    "RegisteredBufferPool",
    "BufferLease",
    "RegisteredBufferLease",
    "BufferLeaseView",
    "RegisteredBufferLeaseView",
    "ErrorCode",
    "describe",
    "last_error_detail",
]

#: Anything with the buffer protocol: bytes, bytearray, memoryview, numpy arrays...
BytesLike = Union[bytes, bytearray, memoryview]

_DEFAULT_SEGMENT_SIZE = 16 * 1024 * 1024
_DEFAULT_BUFFER_SIZE = 16 * 1024 * 1024
_DEFAULT_PROTOCOL = "tcp"
_DEFAULT_MASTER = "127.0.0.1:50051"
_DEFAULT_TENANT = "default"
_DEFAULT_CLIENT_HTTP_PORT = 9300
# Bounds of the dict form's sizes, as upstream's setup(dict).
_MIN_DICT_SIZE = 1024
_MAX_DICT_LOCAL_BUFFER = 1 << 40
# rpc_timeout_ms above this is INVALID_PARAMS (libmooncake's limit).
_MAX_RPC_TIMEOUT_MS = 3600000

_log = logging.getLogger(__name__)


class _Required:
    """Default of the parameters the positional form of setup() requires
    (absent in its dict form); shows as ``<required>`` in help()."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<required>"


_UNSET: Any = _Required()


class SoftPinAction(enum.IntEnum):
    """Soft-pin transition committed when the first replica becomes readable."""

    #: Keep an existing deadline (upsert); a new object gets none.
    PRESERVE = _capi.MC_SOFT_PIN_PRESERVE
    #: Start a soft-pin lifetime (``soft_pin_ttl_ms`` or the master default).
    ENABLE = _capi.MC_SOFT_PIN_ENABLE
    #: Remove any soft pin.
    DISABLE = _capi.MC_SOFT_PIN_DISABLE


class ReplicateConfig:
    """Replication settings of a write (upstream ``ReplicateConfig``).

    Attributes:
        replica_num: memory replicas on distinct segments (default 1).
        nof_replica_num: NVMe-oF SSD replicas (default 0).
        dfs_replica_num: shared-filesystem replicas, 0 or 1 (default 0):
            1 also writes the value into the DFS tier (docs/tiers.md §6;
            needs ``MOONCAKE_DFS_ROOT_DIR`` here and ``--root_fs_dir`` on
            the master, ``replica_num`` >= 1 and the default tenant).
        soft_pin_action: a :class:`SoftPinAction` (default PRESERVE).
        soft_pin_ttl_ms: soft-pin lifetime in ms, or None for the master's
            default; valid only with ``SoftPinAction.ENABLE`` (the call
            returns ``INVALID_PARAMS`` otherwise).  Setting a negative value
            or one above 2**64-1 raises :class:`TypeError`.
        with_hard_pin: never evict the object (default False).
        preferred_segment: segment ("host:port", e.g. another client's
            :meth:`MooncakeDistributedStore.get_hostname`) to place the
            replica on when it has room; "" for none.
        preferred_segments: preferred segments in order.  This release
            honours the first one when ``preferred_segment`` is empty.
        preferred_nof_segments: NoF segments (their storage nodes'
            ``host:port``) to place the ``nof_replica_num`` replicas on
            first, in order (at most 16; needs ``nof_replica_num`` > 0).
        prefer_alloc_in_same_node: local-first placement (default False).
        group_ids: None, or one routing-group id per key written ("" =
            ungrouped).
    """

    __slots__ = (
        "_replica_num",
        "_nof_replica_num",
        "_dfs_replica_num",
        "_soft_pin_action",
        "_soft_pin_ttl_ms",
        "_with_hard_pin",
        "_preferred_segment",
        "_preferred_segments",
        "_preferred_nof_segments",
        "_prefer_alloc_in_same_node",
        "_group_ids",
        "_c_cache",
    )

    def __init__(self) -> None:
        self._c_cache: Any = None
        self._replica_num = 1
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: Optional[int] = None
        self._with_hard_pin = False
        self._preferred_segment = ""
        self._preferred_segments: List[str] = []
        self._preferred_nof_segments: List[str] = []
        self._prefer_alloc_in_same_node = False
        self._group_ids: Optional[List[str]] = None

    def __setattr__(self, name: str, value: Any) -> None:
        # Every change (through a property setter, which lands here again for
        # its slot) forgets the native form built from the old settings.
        object.__setattr__(self, name, value)
        if name != "_c_cache":
            object.__setattr__(self, "_c_cache", None)

    @staticmethod
    def _u32(name: str, value: Any) -> int:
        if not _util.is_int(value) or value < 0 or value > _util.U32_MAX:
            raise TypeError(f"{name} must be an int in [0, 2**32-1], got {value!r}")
        return int(value)

    @property
    def replica_num(self) -> int:
        return self._replica_num

    @replica_num.setter
    def replica_num(self, value: int) -> None:
        self._replica_num = self._u32("replica_num", value)

    @property
    def nof_replica_num(self) -> int:
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, value: int) -> None:
        self._nof_replica_num = self._u32("nof_replica_num", value)

    @property
    def dfs_replica_num(self) -> int:
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, value: int) -> None:
        self._dfs_replica_num = self._u32("dfs_replica_num", value)

    @property
    def soft_pin_action(self) -> SoftPinAction:
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, value: SoftPinAction) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"soft_pin_action must be a SoftPinAction, not {type(value).__name__}")
        try:
            self._soft_pin_action = SoftPinAction(value)
        except ValueError:
            raise TypeError(f"soft_pin_action: {value!r} is not a SoftPinAction") from None

    @property
    def soft_pin_ttl_ms(self) -> Optional[int]:
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value: Optional[int]) -> None:
        if value is None:
            self._soft_pin_ttl_ms = None
            return
        self._soft_pin_ttl_ms = _util.check_size("soft_pin_ttl_ms", value)

    @property
    def with_hard_pin(self) -> bool:
        return self._with_hard_pin

    @with_hard_pin.setter
    def with_hard_pin(self, value: bool) -> None:
        self._with_hard_pin = _util.check_bool("with_hard_pin", value)

    @property
    def preferred_segment(self) -> str:
        return self._preferred_segment

    @preferred_segment.setter
    def preferred_segment(self, value: str) -> None:
        _util.check_str("preferred_segment", value)
        if "\0" in value:
            raise ValueError("preferred_segment contains a NUL character")
        self._preferred_segment = value

    @property
    def preferred_segments(self) -> List[str]:
        return list(self._preferred_segments)

    @preferred_segments.setter
    def preferred_segments(self, value: Sequence[str]) -> None:
        self._preferred_segments = _str_list("preferred_segments", value)

    @property
    def preferred_nof_segments(self) -> List[str]:
        return list(self._preferred_nof_segments)

    @preferred_nof_segments.setter
    def preferred_nof_segments(self, value: Sequence[str]) -> None:
        self._preferred_nof_segments = _str_list("preferred_nof_segments", value)

    @property
    def prefer_alloc_in_same_node(self) -> bool:
        return self._prefer_alloc_in_same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, value: bool) -> None:
        self._prefer_alloc_in_same_node = _util.check_bool("prefer_alloc_in_same_node", value)

    @property
    def group_ids(self) -> Optional[List[str]]:
        return None if self._group_ids is None else list(self._group_ids)

    @group_ids.setter
    def group_ids(self, value: Optional[Sequence[str]]) -> None:
        if value is None:
            self._group_ids = None
            return
        self._group_ids = _str_list("group_ids", value)

    def _with_group_ids(self, ids: List[str]) -> "ReplicateConfig":
        """What ``copy.copy(self)`` and then ``.group_ids = ids`` make, for
        ``ids`` a list of str, without the checks and the per-attribute
        __setattr__ calls."""
        c = object.__new__(type(self))
        for name in ReplicateConfig.__slots__:
            object.__setattr__(c, name, getattr(self, name))
        object.__setattr__(c, "_group_ids", list(ids))
        object.__setattr__(c, "_c_cache", None)
        return c

    def _to_c(self) -> Any:
        """The native configuration (owns copies of the strings).  It is built
        once and kept until a setting changes: the native calls only read it
        (``const``), so one object serves every call, from any thread."""
        c = self._c_cache
        if c is None:
            c = self._build_c()
            object.__setattr__(self, "_c_cache", c)
        return c

    def _build_c(self) -> Any:
        c = _capi.mc_replicate_config_t()
        c.replica_num = self._replica_num
        c.nof_replica_num = self._nof_replica_num
        c.dfs_replica_num = self._dfs_replica_num
        c.soft_pin_action = int(self._soft_pin_action)
        if self._soft_pin_ttl_ms is not None:
            c.soft_pin_ttl_ms = self._soft_pin_ttl_ms
            c.field_mask |= _capi.MC_RC_FIELD_SOFT_PIN_TTL
        c.with_hard_pin = int(self._with_hard_pin)
        c.prefer_alloc_in_same_node = int(self._prefer_alloc_in_same_node)
        segment = self._preferred_segment
        if not segment and self._preferred_segments:
            segment = self._preferred_segments[0]
        if segment and c.set_preferred_segment(segment) != 0:
            raise MemoryError("cannot copy preferred_segment")
        if self._group_ids is not None and c.set_group_ids(self._group_ids) != 0:
            raise MemoryError("cannot copy group_ids")
        if self._preferred_nof_segments and \
                c.set_preferred_nof_segments(self._preferred_nof_segments) != 0:
            raise MemoryError("cannot copy preferred_nof_segments")
        return c

    def __repr__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self._replica_num}, "
            f"nof_replica_num={self._nof_replica_num}, "
            f"dfs_replica_num={self._dfs_replica_num}, "
            f"soft_pin_action={self._soft_pin_action.name}, "
            f"soft_pin_ttl_ms={self._soft_pin_ttl_ms!r}, "
            f"with_hard_pin={self._with_hard_pin}, "
            f"preferred_segment={self._preferred_segment!r}, "
            f"preferred_segments={self._preferred_segments!r}, "
            f"preferred_nof_segments={self._preferred_nof_segments!r}, "
            f"prefer_alloc_in_same_node={self._prefer_alloc_in_same_node}, "
            f"group_ids={self._group_ids!r})"
        )


def _c_config(config: Optional[ReplicateConfig]) -> Any:
    if config is None:
        return None
    if not isinstance(config, ReplicateConfig):
        raise TypeError(f"config must be a ReplicateConfig or None, not {type(config).__name__}")
    return config._to_c()


# Keys the dict overload of setup() understands.
_DICT_KEYS = frozenset({
    "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
    "protocol", "rdma_devices", "master_server_addr", "ipc_socket_path", "tenant_id",
    "enable_ssd_offload", "ssd_offload_path", "enable_client_http_server",
    "client_http_port", "rpc_timeout_ms", "auth_token_file",
})


def _check_part_lists(all_parts: Any) -> None:
    """TypeError unless ``all_parts`` is a list (or tuple) of part lists."""
    if isinstance(all_parts, (str, bytes, bytearray, memoryview)) or \
            not isinstance(all_parts, (list, tuple)):
        raise TypeError(f"all_parts must be a list of part lists, "
                        f"not {type(all_parts).__name__}")


class MooncakeDistributedStore(TensorMethods):
    """A Mooncake Store client.

    Create it, call :meth:`setup`, then use the object methods.  Status codes
    are ints (compare with :class:`ErrorCode`).  The object may be shared by
    threads; it can be used as a context manager, which closes it on exit.
    The PyTorch tensor methods (``put_tensor``, ``get_tensor_into``,
    ``*_with_tp``, ...) come from :mod:`mooncake._tensor`.
    """

    _c_config = staticmethod(_c_config)

    def __init__(self) -> None:
        self._store = _capi.Store()
        self._local_buffer_size = 0
        self._protocol = ""

    # ---- lifecycle ---------------------------------------------------------

    @overload
    def setup(self, config: Mapping[str, Any]) -> int: ...

    @overload
    def setup(
        self,
        local_hostname: str,
        metadata_server: str,
        global_segment_size: int,
        local_buffer_size: int,
        protocol: str,
        rdma_devices: str,
        master_server_addr: str,
        engine: Optional[Any] = None,
        enable_ssd_offload: bool = False,
        ssd_offload_path: str = "",
        tenant_id: str = "default",
        enable_client_http_server: bool = False,
        client_http_port: int = 9300,
        rpc_timeout_ms: Optional[int] = None,
        auth_token_file: Optional[str] = None,
    ) -> int: ...

    def setup(  # type: ignore[misc]
        self,
        local_hostname: Any,
        metadata_server: Any = _UNSET,
        global_segment_size: Any = _UNSET,
        local_buffer_size: Any = _UNSET,
        protocol: Any = _UNSET,
        rdma_devices: Any = _UNSET,
        master_server_addr: Any = _UNSET,
        engine: Any = None,
        enable_ssd_offload: Any = False,
        ssd_offload_path: Any = "",
        tenant_id: Any = _DEFAULT_TENANT,
        enable_client_http_server: Any = False,
        client_http_port: Any = _DEFAULT_CLIENT_HTTP_PORT,
        rpc_timeout_ms: Any = None,
        auth_token_file: Any = None,
    ) -> int:
        """Connect to the master, start the transfer engine and mount this
        client's ``global_segment_size`` bytes into the pool.

        Two forms:

        * ``setup(local_hostname, metadata_server, global_segment_size,
          local_buffer_size, protocol, rdma_devices, master_server_addr,
          engine=None, enable_ssd_offload=False, ssd_offload_path="",
          tenant_id="default", enable_client_http_server=False,
          client_http_port=9300, rpc_timeout_ms=None)`` -- the first seven
          are required, and arguments of the wrong type raise
          :class:`TypeError` (as upstream's binding does);
        * ``setup(config)`` with a dict, alone: as upstream, every value is
          turned into a string and parsed, and a value that does not parse
          -- or a missing ``local_hostname``/``metadata_server`` -- makes
          setup *return* ``INVALID_PARAMS`` (logged on the ``mooncake.store``
          logger) rather than raise.  ``global_segment_size`` and
          ``local_buffer_size`` (ints or size strings such as ``"16MB"``,
          ``"16 MB"``, ``"1.5 GB"``; ``"50%"`` is refused) default to 16 MiB
          and must be 0 or at least 1 KiB, the local buffer at most 1 TiB;
          ``protocol`` defaults to "tcp", ``rdma_devices`` to "",
          ``master_server_addr`` to "127.0.0.1:50051"; booleans are words
          (``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``);
          ``ipc_socket_path`` is accepted (this release hosts no dummy
          clients, so it is unused), and so are the keyword options of the
          first form (``rpc_timeout_ms`` included).  Size strings use the
          grammar of upstream's C++ parser (see :mod:`mooncake._util`), not
          the one of :mod:`mooncake.mooncake_config`.

        Args:
            local_hostname: "host" (a port in 12300-14300 is picked) or
                "host:port".
            metadata_server: "P2PHANDSHAKE" or "http://host:port/metadata".
            global_segment_size: bytes this client contributes to the pool.
            local_buffer_size: bytes of the registered staging buffer.
            protocol: "tcp"; other transports are refused by this build
                unless it was built with them.
            rdma_devices: RDMA device list ("" for tcp or auto-discovery).
            master_server_addr: "host:port" of mooncake_master.
            engine: None (the store starts its own transfer engine), or
                a :class:`mooncake.engine.TransferEngine` -- or what its
                ``get_engine()`` returns -- already initialized: the store
                then serves on that engine's port (``get_hostname()`` is its
                segment name) and registers its segment and local buffer
                there; :meth:`close` unregisters them and leaves the engine
                running.  Anything else is a :class:`TypeError`.
            enable_ssd_offload: True turns on this client's SSD tier
                (docs/tiers.md): what it puts is copied in the background
                into bucket files and reported to the master as disk
                replicas (the master needs ``--enable_offload``).
            ssd_offload_path: the tier's directory: an existing absolute
                path no other client uses; "" takes
                ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``.  Bucket limits come
                from ``MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES``,
                ``MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT`` and
                ``MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES``.  With
                ``MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=distributed_storage_backend``
                no SSD tier starts (the path is only checked): the DFS
                backend, set up from ``MOONCAKE_DFS_ROOT_DIR`` and the
                ``MOONCAKE_DFS_*`` layout variables at every setup, serves
                ``dfs_replica_num=1`` (docs/tiers.md §6).
            tenant_id: key namespace ("default").
            enable_client_http_server: True runs the client HTTP server on a
                library thread (no GIL): GET ``/health``, ``/metrics``
                (Prometheus), ``/metrics/summary``, ``/version`` and POST
                ``/api/mount_shm``, ``/api/unmount_shm``, ``/api/mount``,
                ``/api/unmount``; it stops at :meth:`close`.  A port that
                cannot be bound fails setup with ``INVALID_PARAMS``
                (``last_error_detail()`` names the port).
            client_http_port: port of the client HTTP server (0-65535, 9300).
            rpc_timeout_ms: the longest wait, in ms, for any one send or
                receive of a master RPC of this store (setup's handshake
                included), so a master that accepts connections but never
                answers fails setup with ``RPC_FAIL`` after about this long
                (``last_error_detail()`` and the log name the master).
                None: the environment variable ``MC_STORE_RPC_TIMEOUT_MS``,
                else 5000.  0 waits forever.  Not part of upstream's API.
            auth_token_file: cluster authentication (docs/security.md): a
                file of shared secrets; the master connections, this
                client's data port and its metadata writes then prove the
                secret.  None: the environment variable
                ``MC_AUTH_TOKEN_FILE``; "": off.  A file that cannot be read
                fails setup with ``INVALID_PARAMS``; a master that refuses
                the secret with ``RPC_FAIL``.  Not part of upstream's API.

        Returns:
            0 on success, else a negative :class:`ErrorCode`
            (``INVALID_PARAMS``, ``RPC_FAIL`` when the master is unreachable,
            ``INVALID_PARAMS`` when already set up, ...).

        Raises:
            TypeError: in the positional form, an argument has the wrong
                type or a required one is missing; a dict combined with
                other arguments.
        """
        if isinstance(local_hostname, Mapping):
            given = [metadata_server, global_segment_size, local_buffer_size, protocol,
                     rdma_devices, master_server_addr]
            if any(v is not _UNSET for v in given) or engine is not None or \
                    enable_ssd_offload is not False or ssd_offload_path != "" or \
                    tenant_id != _DEFAULT_TENANT or enable_client_http_server is not False or \
                    client_http_port != _DEFAULT_CLIENT_HTTP_PORT or rpc_timeout_ms is not None or \
                    auth_token_file is not None:
                raise TypeError("setup(config) takes the configuration dict alone")
            return self._setup_from_dict(local_hostname)

        required = {
            "metadata_server": metadata_server,
            "global_segment_size": global_segment_size,
            "local_buffer_size": local_buffer_size,
            "protocol": protocol,
            "rdma_devices": rdma_devices,
            "master_server_addr": master_server_addr,
        }
        missing = [name for name, v in required.items() if v is _UNSET]
        if missing:
            raise TypeError("setup() missing required argument(s): " + ", ".join(missing)
                            + " (or pass a single configuration dict)")
        borrowed = self._engine_arg(engine)
        rc = self._setup_checked(
            _util.check_str("local_hostname", local_hostname),
            _util.check_str("metadata_server", metadata_server),
            _util.check_size("global_segment_size", global_segment_size),
            _util.check_size("local_buffer_size", local_buffer_size),
            _util.check_str("protocol", protocol),
            _util.check_str("rdma_devices", rdma_devices),
            _util.check_str("master_server_addr", master_server_addr),
            _util.check_bool("enable_ssd_offload", enable_ssd_offload),
            _util.check_str("ssd_offload_path", ssd_offload_path),
            _util.check_str("tenant_id", tenant_id),
            _util.check_bool("enable_client_http_server", enable_client_http_server),
            self._port("client_http_port", client_http_port),
            engine=borrowed,
            rpc_timeout_ms=self._timeout_arg(rpc_timeout_ms),
            auth_token_file=None if auth_token_file is None
            else _util.check_str("auth_token_file", auth_token_file),
        )
        if rc == 0 and engine is not None:
            self._engine = engine  # keeps the borrowed engine alive while we use it
        return rc

    @staticmethod
    def _engine_arg(engine: Any) -> Any:
        """The binding engine of setup()'s ``engine``, or None."""
        if engine is None:
            return None
        if isinstance(engine, _engine.InnerTransferEngine):
            engine = engine._owner
        if not isinstance(engine, _engine.TransferEngine):
            raise TypeError("engine must be None, a mooncake.engine.TransferEngine or its "
                            f"get_engine(), not {type(engine).__name__}")
        return engine._te

    @staticmethod
    def _timeout_arg(value: Any) -> Optional[int]:
        """rpc_timeout_ms of the positional form: None or an int."""
        if value is None:
            return None
        if not _util.is_int(value):
            raise TypeError(f"rpc_timeout_ms must be an int or None, not {type(value).__name__}")
        return int(value)

    @staticmethod
    def _port(name: str, value: Any) -> int:
        if not _util.is_int(value):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        return int(value)

    def _setup_from_dict(self, config: Mapping[str, Any]) -> int:
        """The dict form: upstream stringifies every value and parses it,
        and a value that does not parse is a return code, not an exception."""
        unknown = sorted(str(k) for k in config if k not in _DICT_KEYS)
        if unknown:
            warnings.warn("setup(config): ignoring unknown key(s) " + ", ".join(unknown),
                          RuntimeWarning, stacklevel=3)

        def text(name: str, default: str) -> str:
            return str(config[name]) if name in config else default

        def refuse(why: str) -> int:
            _log.error("setup(config): %s", why)
            return int(ErrorCode.INVALID_PARAMS)

        for name in ("local_hostname", "metadata_server"):
            if name not in config:
                return refuse(f"the dict must contain {name!r}")
        sizes = {}
        for name, default in (("global_segment_size", _DEFAULT_SEGMENT_SIZE),
                              ("local_buffer_size", _DEFAULT_BUFFER_SIZE)):
            raw = text(name, str(default))
            try:
                size = _util.parse_size(raw)
            except ValueError as e:
                return refuse(f"{name}: {e}")
            if 0 < size < _MIN_DICT_SIZE:
                return refuse(f"{name}: {size} bytes is below 1 KiB (0 or at least 1024)")
            sizes[name] = size
        if sizes["local_buffer_size"] > _MAX_DICT_LOCAL_BUFFER:
            return refuse(f"local_buffer_size: {sizes['local_buffer_size']} bytes is above 1 TiB")
        flags = {}
        for name in ("enable_ssd_offload", "enable_client_http_server"):
            try:
                flags[name] = _util.bool_arg(name, text(name, "false"))
            except ValueError as e:
                return refuse(str(e))
        numbers = {}
        for name, default in (("client_http_port", _DEFAULT_CLIENT_HTTP_PORT),
                              ("rpc_timeout_ms", None)):
            if name not in config:
                numbers[name] = default
                continue
            raw = str(config[name]).strip()
            try:
                numbers[name] = int(raw, 10)
            except ValueError:
                return refuse(f"{name}: {raw!r} is not a decimal integer")
        return self._setup_checked(
            text("local_hostname", ""),
            text("metadata_server", ""),
            sizes["global_segment_size"],
            sizes["local_buffer_size"],
            text("protocol", _DEFAULT_PROTOCOL),
            text("rdma_devices", ""),
            text("master_server_addr", _DEFAULT_MASTER),
            flags["enable_ssd_offload"],
            text("ssd_offload_path", ""),
            text("tenant_id", _DEFAULT_TENANT),
            flags["enable_client_http_server"],
            numbers["client_http_port"],
            rpc_timeout_ms=numbers["rpc_timeout_ms"],
            auth_token_file=str(config["auth_token_file"]) if "auth_token_file" in config
            else None,
        )

    def _setup_checked(self, local_hostname: str, metadata_server: str,
                       global_segment_size: int, local_buffer_size: int, protocol: str,
                       rdma_devices: str, master_server_addr: str, enable_ssd_offload: bool,
                       ssd_offload_path: str, tenant_id: str, enable_client_http_server: bool,
                       client_http_port: int, engine: Any = None,
                       rpc_timeout_ms: Optional[int] = None,
                       auth_token_file: Optional[str] = None) -> int:
        strings = (local_hostname, metadata_server, protocol, rdma_devices,
                   master_server_addr, ssd_offload_path, tenant_id)
        if any("\0" in s for s in strings + ((auth_token_file,) if auth_token_file else ())):
            return int(ErrorCode.INVALID_PARAMS)
        if not 0 <= client_http_port <= 65535:
            return int(ErrorCode.INVALID_PARAMS)
        if rpc_timeout_ms is not None and not 0 <= rpc_timeout_ms <= _MAX_RPC_TIMEOUT_MS:
            return int(ErrorCode.INVALID_PARAMS)
        if enable_ssd_offload:
            ssd_offload_path = ssd_offload_path or \
                os.environ.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "")
            if not ssd_offload_path or "\0" in ssd_offload_path:
                return int(ErrorCode.INVALID_PARAMS)
        if self._malloc_refused():
            return int(ErrorCode.INVALID_PARAMS)
        rc = self._store.setup(local_hostname, metadata_server, global_segment_size,
                               local_buffer_size, protocol, rdma_devices,
                               master_server_addr, tenant_id, engine,
                               -1 if rpc_timeout_ms is None else rpc_timeout_ms,
                               client_http_port if enable_client_http_server else -1,
                               auth_token_file)
        if rc == 0 and enable_ssd_offload:
            rc = self._store.offload_start(ssd_offload_path)
            if rc != 0:
                self._store.close()  # setup succeeds whole or not at all
        if rc == 0:
            # BufferPool sizes its overflow budget from this.
            self._local_buffer_size = local_buffer_size
            # the weight loader picks its ranged-read strategy by it
            self._protocol = (protocol or "tcp").lower()
            _malloc.tune_once()
        return rc

    @staticmethod
    def _malloc_refused() -> bool:
        """True (logged) when ``MC_PY_MALLOC_TUNE`` has a value setup refuses
        (mooncake._malloc: the thresholds set at the first setup)."""
        why = _malloc.setting_error()
        if why is not None:
            _log.error("setup: %s", why)
        return why is not None

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int,
                    server_address: str) -> int:
        """Become a dummy client of the ``mooncake_client`` at
        ``server_address`` ("host:port"; its unix socket is
        ``@mooncake_client_<port>.sock``).

        The dummy owns no segment: it shares ``mem_pool_size`` bytes (for
        zero-copy buffers: :meth:`alloc_from_mem_pool`) and
        ``local_buffer_size`` bytes (staging for the bytes API) with the real
        client, which does every call on its behalf.  Forwarded: put/upsert,
        put_batch/upsert_batch, get, get_batch, get_buffer/batch_get_buffer,
        is_exist, get_size, remove, put_from/upsert_from,
        put_from_with_metadata, get_into, get_into_ranges,
        batch_put_from/batch_upsert_from/batch_get_into (and the multi-buffer
        forms), the tensor calls (put/get/batch/upsert/pub/TP, ``*_into``,
        ``*_from``), register_buffer (exactly one pool block or one
        MooncakeHostMemAllocator allocation: the latter is mapped by the
        real client, zero-copy),
        alloc_from_mem_pool, batch_is_exist, batch_remove, remove_by_regex,
        remove_all, batch_replica_clear (of what the real client wrote: it
        owns a dummy's objects), get_replica_desc/batch_get_replica_desc,
        create_copy_task/create_move_task/query_task, and ReplicateConfig
        with preferred_segment and group_ids, and the segment calls
        (mount_segment, allocate_and_mount_segment, unmount_segment,
        unmount_and_free_segment: mounted on the real client, unmounted when
        this dummy closes or dies; mount_segment needs a file this process
        can open read-write).  A value written from ordinary memory is
        staged through the local buffer and must fit in it.  The ranged
        sessions (batch_get_session_*, batch_put_session_*) work on buffers
        of the shared pool; a dummy sees only the sessions it opened, and
        its open put sessions are revoked when it closes or dies.

        Returns:
            0; ``RPC_FAIL`` when no real client answers there (within about
            5 s); ``INVALID_PARAMS`` for a bad address or a store already set up.
        """
        for name, v in (("mem_pool_size", mem_pool_size),
                        ("local_buffer_size", local_buffer_size)):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2 ** 63:
                raise TypeError(f"{name} must be a non-negative int")
        if not isinstance(server_address, str):
            raise TypeError("server_address must be a str")
        if "\0" in server_address or self._malloc_refused():
            return int(ErrorCode.INVALID_PARAMS)
        rc = self._store.setup_dummy(mem_pool_size, local_buffer_size, server_address)
        if rc == 0:
            _malloc.tune_once()
            self._local_buffer_size = local_buffer_size
            self._dummy = True
        return rc

    def _dummy_server_stats(self) -> Dict[str, int]:
        """Counters of the real client serving this dummy (tests): dummies
        connected, bytes of their memory it maps, bytes allocated in it."""
        return {"dummies": self._store.dummy_stat(0), "mapped": self._store.dummy_stat(1),
                "allocated": self._store.dummy_stat(2)}

    def close(self) -> int:
        """Unmount this client's memory and disconnect.

        The objects stored in this client's segment disappear from the store
        for everybody.  The object can be set up again afterwards.

        Returns:
            0, also when the store is not set up (never set up, or closed
            already: closing twice is harmless, as upstream); otherwise the
            negative :class:`ErrorCode` of telling the master, after the
            client's resources were released anyway.
        """
        return self._store.close()

    _OFFLOAD_STATS = ("offloaded_keys", "offloaded_bytes", "failed_keys", "dropped_keys",
                      "evicted_buckets", "evicted_keys", "evicted_bytes", "used_bytes", "queued")

    def offload_stats(self) -> Dict[str, int]:
        """Counters of this client's SSD tier (docs/tiers.md): keys and bytes
        offloaded, failed and dropped keys, buckets/keys/bytes evicted to
        stay in bounds, bytes in use and keys queued.  ``{}`` when the tier
        is off (an extension: upstream has no such call)."""
        out = {}
        for i, name in enumerate(self._OFFLOAD_STATS):
            v = self._store.offload_stat(i)
            if v < 0:
                return {}
            out[name] = v
        return out

    # ---- segments ------------------------------------------------------------------

    def mount_segment(self, path: str, size: int, offset: int = 0, protocol: str = "tcp",
                      location: str = "") -> Dict[str, Any]:
        """Contribute ``size`` bytes of the file ``path`` (``/dev/shm/NAME`` or
        any regular file already holding ``offset + size`` bytes), from
        ``offset`` (a multiple of the page size), to the pool.  The file is
        mapped shared, so the bytes objects are stored in are the file's.

        Returns:
            ``{"ret": 0 or a negative ErrorCode, "segment_ids": [id, ...]}``
            (one UUID string on success, [] on failure).  ``INVALID_PARAMS``
            for a bad path, size, offset or protocol (only the store's own).
        """
        _util.check_str("path", path)
        _util.check_str("protocol", protocol)
        _util.check_str("location", location)
        sz, off = _ptr("size", size), _ptr("offset", offset)
        bad = {"ret": int(ErrorCode.INVALID_PARAMS), "segment_ids": []}
        if sz is None or off is None or "\0" in path + protocol + location:
            return bad
        ret, sid = self._store.mount_segment(path, sz, off, protocol, location)
        return {"ret": ret, "segment_ids": [sid] if ret == 0 else []}

    def allocate_and_mount_segment(self, size: int, protocol: str = "tcp",
                                   location: str = "") -> Dict[str, Any]:
        """Allocate ``size`` bytes of shared memory (rounded up to the page
        size) in this process and contribute it to the pool.

        Returns:
            ``{"ret", "segment_ids", "allocated_size"}``; ``allocated_size``
            is 0 on failure.
        """
        _util.check_str("protocol", protocol)
        _util.check_str("location", location)
        sz = _ptr("size", size)
        if sz is None or "\0" in protocol + location:
            return {"ret": int(ErrorCode.INVALID_PARAMS), "segment_ids": [],
                    "allocated_size": 0}
        ret, sid, allocated = self._store.allocate_and_mount_segment(sz, protocol, location)
        return {"ret": ret, "segment_ids": [sid] if ret == 0 else [],
                "allocated_size": allocated}

    def _unmount(self, segment_ids: Any, grace_period_seconds: Any, and_free: int) -> int:
        if isinstance(segment_ids, str):
            segment_ids = [segment_ids]
        _util.check_key_list("segment_ids", segment_ids)
        if not _util.is_int(grace_period_seconds):
            raise TypeError("grace_period_seconds must be an int, not "
                            f"{type(grace_period_seconds).__name__}")
        if grace_period_seconds < 0 or grace_period_seconds > _util.U64_MAX:
            return int(ErrorCode.INVALID_PARAMS)
        if any("\0" in s for s in segment_ids):
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.unmount_segments(list(segment_ids), int(grace_period_seconds),
                                            and_free)

    def unmount_segment(self, segment_ids: Sequence[str], grace_period_seconds: int = 0) -> int:
        """Unmount segments of :meth:`mount_segment` (or
        :meth:`allocate_and_mount_segment`) and unmap them.

        With ``grace_period_seconds`` > 0 the segments stop taking new
        objects at once, their objects stay readable, and they are unmounted
        (their objects dropped) and unmapped when the period is over.
        Returns 0 or the first failure (``SEGMENT_NOT_FOUND`` for an id this
        client did not mount, ``INVALID_PARAMS`` for text that is no id).
        """
        return self._unmount(segment_ids, grace_period_seconds, 0)

    def unmount_and_free_segment(self, segment_ids: Sequence[str],
                                 grace_period_seconds: int = 0) -> int:
        """:meth:`unmount_segment` for segments of
        :meth:`allocate_and_mount_segment`, whose memory is freed;
        ``INVALID_PARAMS`` (and nothing unmounted) when any id is another
        kind of segment."""
        return self._unmount(segment_ids, grace_period_seconds, 1)

    def unmount_local_disk_segment(self, grace_period_seconds: int = 0) -> int:
        """Turn this client's SSD tier off for good before the process goes
        away (a shutdown hook; docs/tiers.md).

        The tier stops offloading, and the master is told that every record
        it holds is gone: it stops naming this client as the holder of the
        keys it offloaded, so a reader gets a clean miss instead of a peer
        that is about to disappear (an object whose last replica was here is
        erased).  The call then holds ``grace_period_seconds`` while the
        tier keeps serving the reads handed out before; the hold ends early
        when the store is closed.  Without an SSD tier it returns 0 at once;
        calling it again is harmless.

        Returns:
            0, or a negative :class:`ErrorCode`: ``RPC_FAIL`` when the master
            could not be told (nothing is held then, and a later call tries
            again); ``INVALID_PARAMS`` for a negative grace period;
            ``UNAVAILABLE_IN_CURRENT_STATUS`` before setup.
        """
        if not _util.is_int(grace_period_seconds):
            raise TypeError("grace_period_seconds must be an int, not "
                            f"{type(grace_period_seconds).__name__}")
        if not 0 <= grace_period_seconds <= _util.U64_MAX:
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.offload_stop(int(grace_period_seconds))

    def init_all(self, protocol: str, device_name: str,
                 mount_segment_size: int = 16777216) -> int:
        """Mount one more segment of ``mount_segment_size`` bytes
        (:meth:`allocate_and_mount_segment` with ``device_name`` as the
        location).  Upstream also creates the store with default settings;
        here the store must be set up first (``UNAVAILABLE_IN_CURRENT_STATUS``
        otherwise), since setup() alone knows the master and the hostname.
        ``protocol`` must be the store's.  Returns 0 or a negative ErrorCode.
        """
        _util.check_str("device_name", device_name)
        return self.allocate_and_mount_segment(mount_segment_size, protocol,
                                               device_name)["ret"]

    def get_hostname(self) -> str:
        """This client's segment name, ``"host:port"`` ("" before setup)."""
        return self._store.hostname()

    def begin_weight_snapshot(self, descriptor: Any, adapter: Any) -> Any:
        """Open a model-weight snapshot writer on this store: the same as
        ``WeightStore(store).begin_weight_snapshot(descriptor, adapter)``
        (``mooncake.reshard.weight``, docs/weights.md)."""
        opener = _hooks.weight_snapshot_opener
        if opener is None:
            # mooncake.reshard.weight (which installs the opener) was never
            # imported, so ``descriptor`` is not its WeightSnapshotDescriptor:
            # WeightStore.begin_weight_snapshot's own refusal.
            raise TypeError("snapshot must be a WeightSnapshotDescriptor")
        return opener(self, descriptor, adapter)

    def __enter__(self) -> "MooncakeDistributedStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- single objects ------------------------------------------------------

    def put(self, key: str, value: BytesLike, config: Optional[ReplicateConfig] = None) -> int:
        """Store ``value`` under ``key``.

        ``value`` may be any object with the buffer protocol; its bytes are
        read in place, without an intermediate copy.  An existing key keeps
        its old value and the call returns 0 (use upsert to overwrite); a
        zero-length value stores nothing and returns 0.

        Returns:
            0, or a negative :class:`ErrorCode` (``NO_AVAILABLE_HANDLE``
            when the pool has no room, ...).
        """
        _util.check_key(key)
        buf = _util.as_buffer(value)
        return self._store.put(key, buf, _c_config(config))

    def get(self, key: str) -> bytes:
        """The object stored under ``key``; ``b""`` if it is missing or on any
        error.  Grants a read lease on the object."""
        _util.check_key(key)
        return self._store.get(key)

    def is_exist(self, key: str) -> int:
        """1 if ``key`` exists, 0 if not, a negative :class:`ErrorCode` on
        error.  Grants a read lease when the object exists."""
        _util.check_key(key)
        return self._store.exist(key)

    def get_size(self, key: str) -> int:
        """Size of the object in bytes, or a negative :class:`ErrorCode`
        (``OBJECT_NOT_FOUND`` for a missing key).  Grants a read lease."""
        _util.check_key(key)
        return self._store.get_size(key)

    def remove(self, key: str, force: bool = False) -> int:
        """Remove the object.

        Returns:
            0; ``OBJECT_NOT_FOUND`` (-704) when it does not exist;
            ``OBJECT_HAS_LEASE`` (-706) while a read lease is held, unless
            ``force`` is True.
        """
        _util.check_key(key)
        return self._store.remove(key, int(_util.check_bool("force", force)))

    # ---- batches ---------------------------------------------------------------

    def put_batch(self, keys: Sequence[str], values: Sequence[BytesLike],
                  config: Optional[ReplicateConfig] = None) -> int:
        """Store ``values[i]`` under ``keys[i]``.

        Returns:
            0 when every object was stored (existing keys count as stored),
            else the first error; ``INVALID_PARAMS`` when the lists differ in
            length.
        """
        cfg = _check_batch_write(keys, values, config)
        if len(keys) != len(values):
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.put_batch(keys, [_util.as_buffer(v) for v in values], cfg)

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        """One ``bytes`` per key, ``b""`` where the key is missing or the read
        failed.  As upstream, ``get_batch([])`` returns ``[b""]``."""
        _util.check_key_list("keys", keys)
        if len(keys) == 0:
            return [b""]
        return self._store.get_batch(keys)

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        """For each key 1 (exists), 0 (does not) or a negative
        :class:`ErrorCode`.  Grants leases on the objects that exist."""
        _util.check_key_list("keys", keys)
        return self._store.batch_exist(keys)

    # ---- writes from several parts, upserts -------------------------------------

    def put_parts(self, key: str, *parts: BytesLike,
                  config: Optional[ReplicateConfig] = None) -> int:
        """Store the concatenation of ``parts`` under ``key`` (no intermediate
        join).  Same rules as :meth:`put`: an existing key keeps its value
        and reports 0; an empty result stores nothing and returns 0."""
        _util.check_key(key)
        bufs = [_util.as_buffer(p) for p in parts]
        return self._store.write_parts(0, key, bufs, _c_config(config))

    def batch_put_parts(self, keys: Sequence[str], all_parts: Sequence[Sequence[BytesLike]],
                        config: Optional[ReplicateConfig] = None) -> List[int]:
        """:meth:`put_parts` for several keys in one batch (one master
        round trip): object ``keys[i]`` is the concatenation of the
        bytes-like objects ``all_parts[i]``, read from any memory (numpy
        arrays, bytes, memoryviews; nothing to register, no staging copy).
        One status per key (0: stored, or already there).  A mooncake
        extension (upstream has the single-key form only).

        Raises:
            TypeError: ``keys`` is not a list of str, or an ``all_parts``
                item is not a sequence of bytes-like objects.
            ValueError: ``keys`` and ``all_parts`` differ in length.
        """
        _util.check_key_list("keys", keys)
        _check_part_lists(all_parts)
        return self._store.batch_write_parts(0, keys, all_parts, _c_config(config))

    def batch_put_parts_commit(self, keys: Sequence[str],
                               all_parts: Sequence[Sequence[BytesLike]],
                               config: Optional[ReplicateConfig] = None) -> List[int]:
        """:meth:`batch_put_parts` whose last key is the commit point
        (``mc_store_batch_put_parts_commit``): it is published only after
        every other key is, in three master round trips instead of the four
        of a batch put followed by a put.  When it is not published, the
        other keys stored by the call are removed again (force).

        Every key must be new: one that exists reports
        ``OBJECT_ALREADY_EXISTS``.  One status per key; the last is 0
        exactly when the commit key was published.  ``NOT_SUPPORTED`` for
        every key (nothing written) on a dummy client or with DFS replicas
        in ``config``: put the others, then the commit key, instead.  A
        mooncake extension.

        Raises:
            TypeError, ValueError: as :meth:`batch_put_parts`; ValueError
                also for an empty ``keys``.
        """
        _util.check_key_list("keys", keys)
        if not keys:
            raise ValueError("keys must hold at least the commit key")
        _check_part_lists(all_parts)
        return self._store.batch_write_parts(2, keys, all_parts, _c_config(config))

    def upsert(self, key: str, value: BytesLike, config: Optional[ReplicateConfig] = None) -> int:
        """Insert ``value`` under ``key``, or replace the value of an existing
        key (in place when the size is unchanged).

        Returns:
            0, or a negative :class:`ErrorCode`.
        """
        _util.check_key(key)
        buf = _util.as_buffer(value)
        return self._store.upsert(key, buf, _c_config(config))

    def upsert_parts(self, key: str, *parts: BytesLike,
                     config: Optional[ReplicateConfig] = None) -> int:
        """:meth:`upsert` of the concatenation of ``parts``."""
        _util.check_key(key)
        bufs = [_util.as_buffer(p) for p in parts]
        return self._store.write_parts(1, key, bufs, _c_config(config))

    def upsert_batch(self, keys: Sequence[str], values: Sequence[BytesLike],
                     config: Optional[ReplicateConfig] = None) -> int:
        """:meth:`upsert` of ``values[i]`` under ``keys[i]``.

        Returns:
            0 when every key succeeded, else the first error;
            ``INVALID_PARAMS`` when the lists differ in length.
        """
        cfg = _check_batch_write(keys, values, config)
        if len(keys) != len(values):
            return int(ErrorCode.INVALID_PARAMS)
        if len(keys) == 0:
            return 0
        return self._store.upsert_batch(keys, [_util.as_buffer(v) for v in values], cfg)

    # ---- removal family ------------------------------------------------------------

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> List[int]:
        """Remove several objects; one status per key (0, ``OBJECT_NOT_FOUND``,
        ``OBJECT_HAS_LEASE`` unless ``force``, ...)."""
        _util.check_key_list("keys", keys)
        return self._store.batch_remove(keys, int(_util.check_bool("force", force)))

    def remove_by_regex(self, regex: str, force: bool = False) -> int:
        """Remove every object of this tenant whose key matches ``regex`` (a
        POSIX extended regular expression, searched anywhere in the key
        unless anchored).

        Returns:
            the number of objects removed, or a negative :class:`ErrorCode`
            (``INVALID_PARAMS`` for a pattern that does not compile).
        """
        _util.check_str("regex", regex)
        f = int(_util.check_bool("force", force))
        if "\0" in regex:
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.remove_by_regex(regex, f)

    def remove_all(self, force: bool = False) -> int:
        """Remove every object of this tenant (leased ones only with
        ``force``).  Returns the number removed, or a negative
        :class:`ErrorCode`."""
        return self._store.remove_all(int(_util.check_bool("force", force)))

    def batch_replica_clear(self, keys: Sequence[str], segment_name: str = "") -> List[str]:
        """Clear objects this client wrote (upstream ``batch_replica_clear``).

        A key of this tenant is cleared only when this client owns it (it
        did the put, or the upsert that last replaced the value), no reader
        holds a lease on it (every read grants one), it is complete, and no
        upsert or copy/move task is working on it; other keys are skipped.

        Args:
            keys: the keys to clear.
            segment_name: ``""`` erases each whole object.  A segment name
                (``"host:port"``, as :meth:`get_hostname` returns for a
                client) drops only the object's complete replicas there; a
                key with none there is skipped, and an object left with no
                replica is erased.

        Returns:
            the keys actually cleared, in request order; an empty list when
            the store is not set up or the master cannot be reached.
        """
        keys = list(_util.check_key_list("keys", keys))
        _util.check_str("segment_name", segment_name)
        if not keys or "\0" in segment_name:
            return []
        statuses = self._store.batch_replica_clear(keys, segment_name)
        return [k for k, st in zip(keys, statuses) if st == 0]

    # ---- buffers owned by the store ----------------------------------------------------

    def get_buffer(self, key: str) -> Optional["BufferHandle"]:
        """The object copied into the store's local buffer, as a
        :class:`BufferHandle` (buffer protocol, no further copy), or None
        when it is missing or the read fails.  The memory is released when
        the handle is garbage collected; it stays valid after :meth:`close`."""
        _util.check_key(key)
        r = self._store.get_buffers([key])[0]
        return r if isinstance(r, BufferHandle) else None

    def batch_get_buffer(self, keys: Sequence[str]) -> List[Optional["BufferHandle"]]:
        """:meth:`get_buffer` for several keys (one master round trip); None
        in the slots of missing keys."""
        _util.check_key_list("keys", keys)
        if len(keys) == 0:
            return []
        return [r if isinstance(r, BufferHandle) else None
                for r in self._store.get_buffers(keys)]

    def alloc_from_mem_pool(self, size: int) -> int:
        """Allocate ``size`` bytes of the store's registered local buffer.

        Returns:
            the address, or 0 when the local buffer is exhausted or ``size``
            is 0 or out of range (larger than the whole local buffer, say);
            a 0 is logged on the ``mooncake.store`` logger with the reason,
            which :func:`mooncake.store.last_error_detail` also gives.
            Return it with :meth:`_mem_pool_free` (what
            :class:`mooncake.buffer_pool.BufferPool` does).
        """
        n = _alloc_size(size)
        addr = self._store.mem_pool_alloc(n) if n else 0
        if addr == 0:
            why = last_error_detail() if n else "size must be in [1, 2**64-1]"
            _log.warning("alloc_from_mem_pool(%r) returns 0: %s", size, why)
        return addr

    def _mem_pool_free(self, ptr: int) -> int:
        """Return an allocation of :meth:`alloc_from_mem_pool` (private:
        BufferPool's release path)."""
        p = _ptr("ptr", ptr)
        if p is None:
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.mem_pool_free(p)

    def _local_buffer_bytes(self) -> int:
        """local_buffer_size of the last successful setup (0 before)."""
        return self._local_buffer_size

    def _get_pyclient_capsule(self) -> Any:
        """A capsule named ``mooncake.PyClient.shared_ptr`` that names this
        store, as upstream's: a wrapper that forwards it can be given to
        :class:`~mooncake.buffer_pool.BufferPool` in place of the store."""
        return store_capsule(self)

    # ---- zero copy -----------------------------------------------------------------------

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Register ``[buffer_ptr, buffer_ptr + size)`` for the zero-copy calls.

        A dummy client (:meth:`setup_dummy`) registers, as upstream, exactly
        one whole block: ``(ptr, n)`` of a :class:`MooncakeHostMemAllocator`
        ``alloc(n)`` (``n`` rounded up to the huge page in huge-page mode),
        whose memory its ``mooncake_client`` then maps and moves pages in
        and out of with no copy, or of an :meth:`alloc_from_mem_pool` block;
        it refuses any other range with -1 and a warning in the log that says
        why.

        Returns:
            0, or a negative :class:`ErrorCode` (``INVALID_PARAMS`` for a
            NULL or overlapping region, ...); -1 for whatever a dummy client
            refuses.
        """
        p, s = _ptr("buffer_ptr", buffer_ptr), _ptr("size", size)
        if p is None or s is None:
            return -1 if self._store.is_dummy() else int(ErrorCode.INVALID_PARAMS)
        if s == 0 and self._store.is_dummy():
            return -1  # upstream: no block is 0 bytes long
        rc = self._store.register_buffer(p, s)
        if rc != 0 and self._store.is_dummy():
            return -1
        return rc

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Unregister the region starting at ``buffer_ptr``.

        A dummy client needs the start of a block it registered (or of an
        :meth:`alloc_from_mem_pool` block): -1 for any other address, as
        upstream; ``RPC_FAIL`` when its ``mooncake_client`` is gone."""
        p = _ptr("buffer_ptr", buffer_ptr)
        if p is None:
            return -1 if self._store.is_dummy() else int(ErrorCode.INVALID_PARAMS)
        rc = self._store.unregister_buffer(p)
        if rc == int(ErrorCode.INVALID_PARAMS) and self._store.is_dummy():
            return -1
        return rc

    def put_from(self, key: str, buffer_ptr: int, size: int,
                 config: Optional[ReplicateConfig] = None) -> int:
        """:meth:`put` of ``size`` bytes at ``buffer_ptr``, which must lie in
        registered memory (:meth:`register_buffer`, the local buffer).

        Returns:
            0, or a negative :class:`ErrorCode` (``INVALID_PARAMS`` for
            unregistered memory or ``prefer_alloc_in_same_node``).
        """
        _util.check_key(key)
        cfg = _c_config(config)
        p, s = _ptr("buffer_ptr", buffer_ptr), _ptr("size", size)
        if p is None or s is None or _same_node(config):
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.put_from(key, p, s, cfg)

    def upsert_from(self, key: str, buffer_ptr: int, size: int,
                    config: Optional[ReplicateConfig] = None) -> int:
        """:meth:`upsert` from registered memory (see :meth:`put_from`)."""
        _util.check_key(key)
        cfg = _c_config(config)
        p, s = _ptr("buffer_ptr", buffer_ptr), _ptr("size", size)
        if p is None or s is None:
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.upsert_from(key, p, s, cfg)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read the object into registered memory of ``size`` bytes.

        Returns:
            bytes read, or a negative :class:`ErrorCode`
            (``OBJECT_NOT_FOUND``, ``INVALID_PARAMS`` when the buffer is too
            small or not registered, ...).
        """
        _util.check_key(key)
        p, s = _ptr("buffer_ptr", buffer_ptr), _ptr("size", size)
        if p is None or s is None:
            return int(ErrorCode.INVALID_PARAMS)
        return self._store.get_into(key, p, s)

    def put_from_with_metadata(self, key: str, buffer_ptr: int, metadata_buffer_ptr: int,
                               size: int, metadata_size: int,
                               config: Optional[ReplicateConfig] = None) -> int:
        """Store ``metadata_size`` bytes at ``metadata_buffer_ptr`` followed by
        ``size`` bytes at ``buffer_ptr`` as one object (the upstream layout:
        metadata first).  Both buffers must be registered."""
        _util.check_key(key)
        r = self._batch_zc(_ZC_PUT_FROM, [key], [[metadata_buffer_ptr, buffer_ptr]],
                           [[metadata_size, size]], None, config)
        return r[0]

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int],
                       config: Optional[ReplicateConfig] = None) -> List[int]:
        """:meth:`put_from` for several keys; one status per key (``len(keys)``
        times ``INVALID_PARAMS`` when the lists differ in length)."""
        return self._batch_flat(_ZC_PUT_FROM, keys, buffer_ptrs, sizes, config,
                                refuse_same_node=True)

    def batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                          sizes: Sequence[int],
                          config: Optional[ReplicateConfig] = None) -> List[int]:
        """:meth:`upsert_from` for several keys; one status per key."""
        return self._batch_flat(_ZC_UPSERT_FROM, keys, buffer_ptrs, sizes, config)

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int]) -> List[int]:
        """:meth:`get_into` for several keys: per key the object size (bytes
        read), ``OBJECT_NOT_FOUND``, or ``INVALID_PARAMS`` when the buffer is
        too small (or the lists differ in length: then every entry)."""
        return self._batch_flat(_ZC_GET_INTO, keys, buffer_ptrs, sizes, None)

    def batch_put_from_multi_buffers(self, keys: Sequence[str],
                                     all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """Object ``keys[i]`` is the concatenation of the registered buffers
        ``all_buffer_ptrs[i][j]`` of ``all_sizes[i][j]`` bytes.  One status
        per key; ``prefer_alloc_in_same_node`` is accepted here."""
        ok = _check_nested(keys, ("all_buffer_ptrs", all_buffer_ptrs), ("all_sizes", all_sizes))
        _c_config(config)
        if not ok:
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        return self._batch_zc(_ZC_PUT_FROM, keys, all_buffer_ptrs, all_sizes, None, config)

    def batch_get_into_multi_buffers(self, keys: Sequence[str],
                                     all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_same_node: bool = False) -> List[int]:
        """Scatter object ``keys[i]`` over the registered buffers
        ``all_buffer_ptrs[i]`` in order.  Per key the total object size, or
        a negative :class:`ErrorCode` (``INVALID_PARAMS`` when the buffers
        hold less than the object).  ``prefer_same_node`` is accepted (the
        replica choice is already local-first)."""
        ok = _check_nested(keys, ("all_buffer_ptrs", all_buffer_ptrs), ("all_sizes", all_sizes))
        _util.check_bool("prefer_same_node", prefer_same_node)
        if not ok:
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        return self._batch_zc(_ZC_GET_INTO, keys, all_buffer_ptrs, all_sizes, None, None)

    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[str]],
                        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                        all_src_offsets: Sequence[Sequence[Sequence[int]]],
                        all_sizes: Sequence[Sequence[Sequence[int]]]) -> List[List[List[int]]]:
        """Read byte ranges of objects into registered buffers (see the
        API guide): fragment ``(i, j, k)`` reads ``all_sizes[i][j][k]`` bytes
        of ``all_keys[i][j]`` at ``all_src_offsets[i][j][k]`` into
        ``buffer_ptrs[i] + all_dst_offsets[i][j][k]``.

        Returns:
            ``results[i][j][k]``: bytes read, or a negative
            :class:`ErrorCode`, in upstream's shape: one row per buffer
            pointer, ``len(all_keys[i])`` entries in row i (1 when absent),
            ``len(all_dst_offsets[i][j])`` fragments in entry j (1 when
            absent), every one ``INVALID_PARAMS`` until read.  So shape
            problems never raise: lists of the wrong top-level length leave
            every entry ``INVALID_PARAMS``; a buffer whose lists differ in
            length leaves its row so; a key whose dst/src/size lists differ
            leaves its entry so, one code per destination offset; a NULL or
            unregistered buffer leaves its row so (a missing key there is
            ``INVALID_PARAMS`` too, not ``OBJECT_NOT_FOUND``).  Otherwise:
            ``OBJECT_NOT_FOUND`` per fragment of a missing key;
            ``INVALID_PARAMS`` for a fragment past the room left in the
            registered region that holds the buffer, or past the object's
            end; ``TRANSFER_FAIL`` / ``LEASE_EXPIRED`` from the read.

        Raises:
            TypeError: an argument is not a list, a key is not a str, or a
                pointer, offset or size is not an int in [0, 2**64-1] (they
                are upstream's ``size_t``).
        """
        for name, v in (("buffer_ptrs", buffer_ptrs), ("all_keys", all_keys),
                        ("all_dst_offsets", all_dst_offsets),
                        ("all_src_offsets", all_src_offsets), ("all_sizes", all_sizes)):
            _seq(name, v)
        _size_t_list("buffer_ptrs", buffer_ptrs)
        for keys_i in all_keys:
            _util.check_key_list("all_keys item", keys_i)
            for k in keys_i:
                _util.check_key(k)
        for name, v in (("all_dst_offsets", all_dst_offsets),
                        ("all_src_offsets", all_src_offsets), ("all_sizes", all_sizes)):
            for per_buf in v:
                _seq(name + " item", per_buf)
                for per_key in per_buf:
                    _size_t_list(name + " item", per_key)

        # upstream's prefilled result: its shape follows buffer_ptrs, all_keys
        # and all_dst_offsets; what is never read stays INVALID_PARAMS
        bad = int(ErrorCode.INVALID_PARAMS)
        results: List[List[List[int]]] = []
        for i in range(len(buffer_ptrs)):
            dst_i = all_dst_offsets[i] if i < len(all_dst_offsets) else ()
            nk = len(all_keys[i]) if i < len(all_keys) else 1
            results.append([[bad] * (len(dst_i[j]) if j < len(dst_i) else 1)
                            for j in range(nk)])
        n = len(buffer_ptrs)
        if any(len(v) != n for v in (all_keys, all_dst_offsets, all_src_offsets, all_sizes)):
            return results

        flat_keys: List[str] = []
        flat: List[List[int]] = [[], [], [], []]  # buffer, dst, src, size
        where: List[tuple] = []
        for i in range(n):
            keys_i = all_keys[i]
            if not len(all_dst_offsets[i]) == len(all_src_offsets[i]) == \
                    len(all_sizes[i]) == len(keys_i):
                continue
            for j, k in enumerate(keys_i):
                d, src, z = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                if not len(d) == len(src) == len(z):
                    continue
                for f in range(len(d)):
                    flat_keys.append(k)
                    flat[0].append(int(buffer_ptrs[i]))
                    flat[1].append(int(d[f]))
                    flat[2].append(int(src[f]))
                    flat[3].append(int(z[f]))
                    where.append((i, j, f))
        if flat_keys:
            # libmooncake checks each range (buffer, key, room, source) and
            # reads them all in one call
            res = self._store.read_ranges(flat_keys, flat[0], flat[1], flat[2], flat[3])
            for (i, j, f), r in zip(where, res):
                results[i][j][f] = r
        return results

    def _batch_flat(self, op: int, keys: Sequence[str], buffer_ptrs: Sequence[int],
                    sizes: Sequence[int], config: Optional[ReplicateConfig],
                    refuse_same_node: bool = False) -> List[int]:
        """A batch zero-copy call with one buffer per key (``batch_put_from``,
        ``batch_upsert_from``, ``batch_get_into``)."""
        _util.check_key_list("keys", keys)
        _seq("buffer_ptrs", buffer_ptrs)
        _seq("sizes", sizes)
        cfg = _c_config(config)
        refused = len(buffer_ptrs) != len(keys) or len(sizes) != len(keys) or \
            (refuse_same_node and _same_node(config))
        if not refused and (cfg is None or cfg.group_ids_count == 0):
            # the native layer checks every key, address and size in one pass
            return self._store.batch_zc_flat(op, keys, buffer_ptrs, sizes, cfg)
        _int_list("buffer_ptrs", buffer_ptrs)
        _int_list("sizes", sizes)
        if refused:
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        # group ids follow the keys: the general path drops those of refused keys
        return self._batch_zc(op, keys, [[p] for p in buffer_ptrs], [[s] for s in sizes],
                              None, config)

    def _batch_ranges(self, op: int, keys: Sequence[str],
                      all_buffer_ptrs: Sequence[Sequence[int]],
                      all_sizes: Sequence[Sequence[int]],
                      offsets: Tuple[str, Sequence[Sequence[int]]]) -> List[int]:
        """A ranged session read or write; ``offsets`` is (argument name, lists)."""
        if not _check_nested(keys, ("all_buffer_ptrs", all_buffer_ptrs),
                             ("all_sizes", all_sizes), offsets):
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        return self._batch_zc(op, keys, all_buffer_ptrs, all_sizes, offsets[1], None)

    def _batch_zc(self, op: int, keys: Sequence[str], ptrs: Sequence[Sequence[int]],
                  sizes: Sequence[Sequence[int]], offsets: Optional[Sequence[Sequence[int]]],
                  config: Optional[ReplicateConfig]) -> List[int]:
        """Run a batch zero-copy call over the keys whose per-key lists are
        well formed; the others get ``INVALID_PARAMS`` without a call."""
        bad = int(ErrorCode.INVALID_PARAMS)
        cfg = _c_config(config)
        out = [bad] * len(keys)
        sel: List[int] = []
        for i, key in enumerate(keys):
            _util.check_key(key)
            p, s = ptrs[i], sizes[i]
            _int_list("buffer pointers", p)
            _int_list("sizes", s)
            o = None
            if offsets is not None:
                o = offsets[i]
                _int_list("offsets", o)
                if len(o) != len(p):
                    continue
            if len(p) != len(s):
                continue
            if any(_ptr("buffer pointer", x) is None for x in p) or \
                    any(_ptr("size", x) is None for x in s) or \
                    (o is not None and any(_ptr("offset", x) is None for x in o)):
                continue
            sel.append(i)
        if not sel:
            return out
        all_ok = len(sel) == len(keys)
        sk = list(keys) if all_ok else [keys[i] for i in sel]
        sp = list(ptrs) if all_ok else [ptrs[i] for i in sel]
        ss = list(sizes) if all_ok else [sizes[i] for i in sel]
        so = None
        if offsets is not None:
            so = list(offsets) if all_ok else [offsets[i] for i in sel]
        if cfg is not None and cfg.group_ids_count > 0 and not all_ok:
            # Group ids follow the keys; drop those of the refused keys.
            gids = config.group_ids or []
            if len(gids) == len(keys):
                cfg = config._build_c()  # a private copy: the cached one is shared
                cfg.set_group_ids([gids[i] for i in sel])
        res = self._store.batch_zc(op, sk, sp, ss, so, cfg)
        for i, r in zip(sel, res):
            out[i] = r
        return out

    # ---- ranged sessions -----------------------------------------------------------------

    def batch_get_session_start(self, keys: Sequence[str]) -> List[int]:
        """Look the keys up once and cache one complete replica (and its
        lease) per key for ranged reads.  Per-key statuses."""
        _util.check_key_list("keys", keys)
        return self._store.session_keys(0, keys)

    def batch_get_into_multi_buffer_ranges(self, keys: Sequence[str],
                                           all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_src_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Ranged reads for keys with an open get session (no master round
        trip): range ``j`` of key ``i`` reads ``all_sizes[i][j]`` bytes at
        object offset ``all_src_offsets[i][j]`` into ``all_buffer_ptrs[i][j]``.
        Per key the bytes moved, or a negative :class:`ErrorCode`."""
        return self._batch_ranges(_ZC_SESSION_READ, keys, all_buffer_ptrs, all_sizes,
                                  ("all_src_offsets", all_src_offsets))

    def batch_get_session_end(self, keys: Sequence[str]) -> int:
        """Drop the cached lookups of ``keys``.  0 or a negative :class:`ErrorCode`."""
        _util.check_key_list("keys", keys)
        return self._store.get_session_end(keys)

    def batch_put_session_start(self, keys: Sequence[str], sizes: Sequence[int],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """Reserve objects of ``sizes[i]`` bytes without writing them; per-key
        statuses.  Keys that already have a put session are skipped."""
        _util.check_key_list("keys", keys)
        _int_list("sizes", sizes)
        cfg = _c_config(config)
        bad = int(ErrorCode.INVALID_PARAMS)
        if len(sizes) != len(keys):
            return [bad] * len(keys)
        if any(_ptr("size", s) is None for s in sizes):
            out = [bad] * len(keys)
            sel = [i for i, s in enumerate(sizes) if _ptr("size", s) is not None]
            if not sel:
                return out
            if config is not None and config.group_ids is not None and \
                    len(config.group_ids) == len(keys):
                cfg = config._build_c()  # a private copy: the cached one is shared
                cfg.set_group_ids([config.group_ids[i] for i in sel])
            res = self._store.put_session_start([keys[i] for i in sel],
                                                [sizes[i] for i in sel], cfg)
            for i, r in zip(sel, res):
                out[i] = r
            return out
        return self._store.put_session_start(keys, sizes, cfg)

    def batch_put_from_multi_buffer_ranges(self, keys: Sequence[str],
                                           all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_dst_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Ranged writes into open put sessions (no master round trip): range
        ``j`` of key ``i`` writes ``all_sizes[i][j]`` bytes from
        ``all_buffer_ptrs[i][j]`` at object offset ``all_dst_offsets[i][j]``.
        Per key the bytes moved, or a negative :class:`ErrorCode`."""
        return self._batch_ranges(_ZC_SESSION_WRITE, keys, all_buffer_ptrs, all_sizes,
                                  ("all_dst_offsets", all_dst_offsets))

    def batch_put_session_end(self, keys: Sequence[str]) -> List[int]:
        """Seal the put sessions, wait for in-flight writes and make the
        objects readable.  Per-key statuses."""
        _util.check_key_list("keys", keys)
        return self._store.session_keys(1, keys)

    def batch_put_session_revoke(self, keys: Sequence[str]) -> List[int]:
        """Abort put sessions and release the reserved space.  Per-key statuses."""
        _util.check_key_list("keys", keys)
        return self._store.session_keys(2, keys)

    # ---- replica descriptors -------------------------------------------------------------

    def get_replica_desc(self, key: str) -> List["ReplicaDescriptor"]:
        """Descriptors of the replicas of ``key`` ([] when it is missing).
        Grants a read lease, like every lookup."""
        _util.check_key(key)
        r = self._store.replica_descs([key])[0]
        return [] if isinstance(r, int) else [ReplicaDescriptor(*t) for t in r]

    def batch_get_replica_desc(self, keys: Sequence[str]) -> Dict[str, List["ReplicaDescriptor"]]:
        """``{key: [ReplicaDescriptor, ...]}`` for every key ([] for a miss)."""
        _util.check_key_list("keys", keys)
        if len(keys) == 0:
            return {}
        out: Dict[str, List[ReplicaDescriptor]] = {}
        for key, r in zip(keys, self._store.replica_descs(keys)):
            out[key] = [] if isinstance(r, int) else [ReplicaDescriptor(*t) for t in r]
        return out

    # ---- copy and move tasks -------------------------------------------------------------

    def create_copy_task(self, key: str, targets: Sequence[str]) -> Tuple["UUIDPair", int]:
        """Copy ``key`` to the segments ``targets`` (segment names,
        ``"host:port"`` as :meth:`get_hostname` and the replica descriptors
        report them) in the background.

        The client owning a complete replica executes the task; targets that
        already hold a replica are skipped (duplicates are accepted).
        Follow it with :meth:`query_task`.

        Returns:
            ``(task_id, 0)`` -- the id is upstream's pair of ints (a
            :class:`UUIDPair`, whose ``str()`` is the UUID text) -- or
            ``((0, 0), code)``, checked in upstream's order:
            ``INVALID_PARAMS`` (no targets), ``OBJECT_NOT_FOUND`` (whatever
            the targets), ``INVALID_PARAMS`` (a target nobody mounted, ""
            included), ``UNAVAILABLE_IN_CURRENT_STATUS`` (a target taking
            no allocations), ``INTERNAL_ERROR`` (no memory replica to copy
            from), ``TASK_PENDING_LIMIT_EXCEEDED``.
        """
        _util.check_key(key)
        names = _str_list("targets", targets)
        if len(names) == 0:
            return UUIDPair.NIL, int(ErrorCode.INVALID_PARAMS)
        # a name with a NUL is never mounted: "" says the same to the master,
        # which checks the key first
        names = ["" if "\0" in t else t for t in names]
        ret, tid = self._store.create_copy_task(key, names)
        return (UUIDPair.from_text(tid), 0) if ret == 0 else (UUIDPair.NIL, ret)

    def create_move_task(self, key: str, source: str, target: str) -> Tuple["UUIDPair", int]:
        """Move the replica of ``key`` on segment ``source`` to segment
        ``target`` in the background (a copy, then the source replica is
        dropped).

        Returns:
            ``(task_id, 0)`` or ``((0, 0), code)``, in upstream's order:
            ``OBJECT_NOT_FOUND``, ``INVALID_PARAMS`` (``target == source``),
            ``INVALID_PARAMS`` / ``UNAVAILABLE_IN_CURRENT_STATUS`` for the
            target as :meth:`create_copy_task`, ``INVALID_PARAMS`` (the
            source holds no replica of the key), ...
        """
        _util.check_key(key)
        _util.check_str("source", source)
        _util.check_str("target", target)
        if "\0" in source + target:  # never mounted, as "" (the master checks the key first)
            source, target = ("" if "\0" in source else source,
                              "" if "\0" in target else target)
            if source == target:
                target = "\x01"  # still not the same segment: the target check answers
        ret, tid = self._store.create_move_task(key, source, target)
        return (UUIDPair.from_text(tid), 0) if ret == 0 else (UUIDPair.NIL, ret)

    def query_task(self, task_id: Any) -> Tuple[Optional["QueryTaskResponse"], int]:
        """Where a task of :meth:`create_copy_task` / :meth:`create_move_task`
        stands.

        ``task_id`` is upstream's form, any sequence of two ints in
        [0, 2**64-1] (what the create calls return, or a plain tuple or
        list), or, as the API guide says, a :class:`uuid.UUID` or its text.

        Returns:
            ``(QueryTaskResponse, 0)``, or ``(None, code)``:
            ``TASK_NOT_FOUND`` for an unknown id, another tenant's task, or
            a finished task the master no longer keeps
            (``--max_total_finished_tasks``); ``INVALID_PARAMS`` for text
            that is not a UUID.

        Raises:
            TypeError: ``task_id`` is none of these.
        """
        if isinstance(task_id, str):
            try:
                tid = UUIDPair.from_uuid(uuid.UUID(task_id))
            except ValueError:
                return None, int(ErrorCode.INVALID_PARAMS)
        else:
            tid = UUIDPair.of(task_id)
        ret, info = self._store.query_task(str(tid))
        if ret != 0:
            return None, ret
        ttype, status, created, updated, client, message = info
        return QueryTaskResponse(tid, _enum_or_int(TaskType, ttype),
                                 _enum_or_int(TaskStatus, status), created, updated,
                                 UUIDPair.from_text(client), message), 0


# ---- module helpers ----------------------------------------------------------------------

_ZC_PUT_FROM = 0
_ZC_UPSERT_FROM = 1
_ZC_GET_INTO = 2
_ZC_SESSION_READ = 3
_ZC_SESSION_WRITE = 4


def _ptr(name: str, value: Any) -> Optional[int]:
    """An address/size/offset: TypeError unless an int; None when outside
    [0, 2**64-1] (the call then reports INVALID_PARAMS, as upstream)."""
    if not _util.is_int(value):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0 or value > _util.U64_MAX:
        return None
    return int(value)


def _size_t_list(name: str, value: Any) -> None:
    """A list of size_t values, as upstream's binding converts them:
    TypeError for anything but ints in [0, 2**64-1]."""
    _seq(name, value)
    for v in value:
        if not _util.is_int(v) or v < 0 or v > _util.U64_MAX:
            raise TypeError(f"{name}: expected ints in [0, 2**64-1], not {v!r}")


def _seq(name: str, value: Any) -> None:
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list, not {type(value).__name__}")


def _int_list(name: str, value: Any) -> None:
    _seq(name, value)
    for v in value:
        if not _util.is_int(v):
            raise TypeError(f"{name}: expected int items, not {type(v).__name__}")


def _nested_list(name: str, value: Any) -> None:
    _seq(name, value)
    for v in value:
        _int_list(name + " item", v)


def _check_nested(keys: Any, *named: Tuple[str, Any]) -> bool:
    """Type-check ``keys`` and the named lists of int lists (TypeError);
    False when a list's length differs from the number of keys."""
    _util.check_key_list("keys", keys)
    for name, v in named:
        _nested_list(name, v)
    return all(len(v) == len(keys) for _, v in named)


def _same_node(config: Optional[ReplicateConfig]) -> bool:
    return config is not None and config.prefer_alloc_in_same_node


def _str_list(name: str, value: Any) -> List[str]:
    """A copy of a list of str (TypeError otherwise)."""
    _util.check_key_list(name, value)
    for item in value:
        _util.check_str(name + " item", item)
    return list(value)


def _check_batch_write(keys: Any, values: Any, config: Optional[ReplicateConfig]) -> Any:
    """Type checks of put_batch/upsert_batch; the native config."""
    _util.check_key_list("keys", keys)
    if isinstance(values, (str, bytes, bytearray, memoryview)) or \
            not isinstance(values, (list, tuple)):
        raise TypeError(f"values must be a list of bytes-like objects, "
                        f"not {type(values).__name__}")
    return _c_config(config)


def _alloc_size(size: Any) -> int:
    """An allocation size: TypeError unless an int; 0 when outside
    [1, 2**64-1] (the allocation then fails with 0, as upstream)."""
    if not _util.is_int(size):
        raise TypeError(f"size must be an int, not {type(size).__name__}")
    if size <= 0 or size > _util.U64_MAX:
        return 0
    return int(size)


#: An object copied into a store's local buffer (:meth:`get_buffer`): a
#: 1-D writable buffer of format ``'b'`` (``memoryview(h)``,
#: ``np.array(h, copy=False)`` share its memory), ``len(h)``, ``h.ptr()``,
#: ``h.size()``.  The memory returns to the store when the handle is
#: garbage collected, and stays valid after the store is closed.
BufferHandle = _capi.BufferHandle


class ReplicaStatus(enum.IntEnum):
    """Status of one replica (upstream ``ReplicaStatus``)."""

    UNDEFINED = _capi.MC_REPLICA_UNDEFINED
    INITIALIZED = _capi.MC_REPLICA_INITIALIZED
    PROCESSING = _capi.MC_REPLICA_PROCESSING
    COMPLETE = _capi.MC_REPLICA_COMPLETE
    REMOVED = _capi.MC_REPLICA_REMOVED
    FAILED = _capi.MC_REPLICA_FAILED


class TaskType(enum.IntEnum):
    """What a copy/move task does (upstream ``TaskType``)."""

    REPLICA_COPY = _capi.MC_TASK_REPLICA_COPY
    REPLICA_MOVE = _capi.MC_TASK_REPLICA_MOVE


class TaskStatus(enum.IntEnum):
    """Where a task is (upstream ``TaskStatus``): PENDING -> PROCESSING ->
    SUCCESS or FAILED."""

    PENDING = _capi.MC_TASK_PENDING
    PROCESSING = _capi.MC_TASK_PROCESSING
    FAILED = _capi.MC_TASK_FAILED
    SUCCESS = _capi.MC_TASK_SUCCESS


# Upstream's pybind enums export their values at module level.
REPLICA_COPY = TaskType.REPLICA_COPY
REPLICA_MOVE = TaskType.REPLICA_MOVE
PENDING = TaskStatus.PENDING
PROCESSING = TaskStatus.PROCESSING
FAILED = TaskStatus.FAILED
SUCCESS = TaskStatus.SUCCESS


class UUIDPair(tuple):
    """A task or client id in upstream's form: a ``(high, low)`` pair of
    64-bit ints (a C++ ``pair<uint64_t, uint64_t>``; this is a 2-tuple and
    compares equal to the plain one).  ``str()`` is the UUID text, so
    printing an id reads as before; :attr:`uuid` is the :class:`uuid.UUID`.
    A failed create call returns ``(0, 0)``."""

    __slots__ = ()
    NIL: "UUIDPair"

    def __new__(cls, high: int = 0, low: int = 0) -> "UUIDPair":
        return tuple.__new__(cls, (high, low))

    @classmethod
    def of(cls, value: Any) -> "UUIDPair":
        """``value`` as an id: a sequence of two ints in [0, 2**64-1], or a
        :class:`uuid.UUID`; TypeError for anything else."""
        if isinstance(value, uuid.UUID):
            return cls.from_uuid(value)
        if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__len__") \
                or len(value) != 2:
            raise TypeError(f"task_id must be a pair of ints (or a uuid.UUID), "
                            f"not {value!r}")
        high, low = value[0], value[1]
        for v in (high, low):
            if not _util.is_int(v) or v < 0 or v > _util.U64_MAX:
                raise TypeError(f"task_id must be a pair of ints in [0, 2**64-1], "
                                f"not {value!r}")
        return cls(int(high), int(low))

    @classmethod
    def from_uuid(cls, u: uuid.UUID) -> "UUIDPair":
        return cls(u.int >> 64, u.int & _util.U64_MAX)

    @classmethod
    def from_text(cls, text: str) -> "UUIDPair":
        return cls.from_uuid(uuid.UUID(text))

    @property
    def uuid(self) -> uuid.UUID:
        """The same id as a :class:`uuid.UUID`."""
        return uuid.UUID(int=(self[0] << 64) | self[1])

    def __str__(self) -> str:
        return str(self.uuid)

    def __repr__(self) -> str:
        return tuple.__repr__(self)


UUIDPair.NIL = UUIDPair(0, 0)


def _enum_or_int(cls: Any, value: int) -> Any:
    """``cls(value)``, or the plain int when a newer master sends a value
    this client does not know."""
    try:
        return cls(value)
    except ValueError:
        return value


class QueryTaskResponse:
    """What :meth:`MooncakeDistributedStore.query_task` reports (upstream
    ``QueryTaskResponse``; the fields are read-only, as upstream's).

    Attributes:
        id: the task, a (high, low) pair of ints (:class:`UUIDPair`).
        type: TaskType.REPLICA_COPY or TaskType.REPLICA_MOVE.
        status: a :class:`TaskStatus`.
        created_at_ms_epoch: creation time, ms since the epoch.
        last_updated_at_ms_epoch: last state change, ms since the epoch.
        assigned_client: the client that executes (or executed) the task,
            a pair of ints.
        message: "Task completed successfully", or on failure upstream's
            "STATUS_NAME (max retries reached: N)" (a task the master
            failed on its own, e.g. a timeout, says what happened).
    """

    __slots__ = ("id", "type", "status", "created_at_ms_epoch", "last_updated_at_ms_epoch",
                 "assigned_client", "message")

    def __init__(self, id: UUIDPair, type: TaskType, status: TaskStatus,
                 created_at_ms_epoch: int, last_updated_at_ms_epoch: int,
                 assigned_client: UUIDPair, message: str) -> None:
        for name, value in (("id", id), ("type", type), ("status", status),
                            ("created_at_ms_epoch", created_at_ms_epoch),
                            ("last_updated_at_ms_epoch", last_updated_at_ms_epoch),
                            ("assigned_client", assigned_client), ("message", message)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"QueryTaskResponse.{name} is read-only")

    def __repr__(self) -> str:
        return (f"QueryTaskResponse(id={self.id}, type={getattr(self.type, 'name', self.type)}, "
                f"status={getattr(self.status, 'name', self.status)}, "
                f"created_at_ms_epoch={self.created_at_ms_epoch}, "
                f"last_updated_at_ms_epoch={self.last_updated_at_ms_epoch}, "
                f"assigned_client={self.assigned_client}, message={self.message!r})")


class Descriptor:
    """Where a memory replica lives (upstream ``AllocatedBuffer::Descriptor``,
    ``mooncake.store.Descriptor``): ``size`` bytes at ``buffer_address`` in
    the segment ``transport_endpoint`` ("host:port").  Constructible and
    read-write, as upstream's.

    ``size_``, ``buffer_address_``, ``transport_endpoint_`` and ``protocol_``
    are this package's earlier names (upstream uses them only in the HTTP
    JSON), kept as aliases.
    """

    __slots__ = ("size", "buffer_address", "transport_endpoint", "protocol_")

    def __init__(self, size: int = 0, buffer_address: int = 0,
                 transport_endpoint: str = "", protocol: str = "tcp") -> None:
        #: bytes
        self.size = size
        #: address in the owner's segment
        self.buffer_address = buffer_address
        #: the owner's segment name, "host:port"
        self.transport_endpoint = transport_endpoint
        #: transport ("tcp"); not upstream's (its Descriptor has none)
        self.protocol_ = protocol

    size_ = property(lambda self: self.size,
                     lambda self, v: setattr(self, "size", v))
    buffer_address_ = property(lambda self: self.buffer_address,
                               lambda self, v: setattr(self, "buffer_address", v))
    transport_endpoint_ = property(lambda self: self.transport_endpoint,
                                   lambda self, v: setattr(self, "transport_endpoint", v))

    def __repr__(self) -> str:
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


#: This package's earlier name of :class:`Descriptor`.
BufferDescriptor = Descriptor


class MemoryDescriptor:
    """The memory part of a replica descriptor: ``buffer_descriptor`` is a
    :class:`Descriptor`."""

    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor: Descriptor) -> None:
        self.buffer_descriptor = buffer_descriptor

    def __repr__(self) -> str:
        return f"MemoryDescriptor(buffer_descriptor={self.buffer_descriptor!r})"


class DiskDescriptor:
    """The disk part of a replica descriptor (upstream ``DiskDescriptor``):
    a record in the shared DFS tier (docs/tiers.md §6).  ``file_path`` is
    the shard file, ``object_size`` the value's bytes; ours also has
    upstream's ``DistributedFSDescriptor`` fields ``offset`` (the record's
    place in the file), ``shard_idx`` and ``aligned_size`` (the bytes
    reserved), and ``is_dfs`` (always True since 0.2: records of the SSD
    tier are :class:`LocalDiskDescriptor`)."""

    __slots__ = ("file_path", "object_size", "offset", "transport_endpoint", "is_dfs",
                 "shard_idx", "aligned_size")

    def __init__(self, file_path: str, object_size: int, offset: int,
                 transport_endpoint: str, is_dfs: bool = True, shard_idx: int = 0,
                 aligned_size: int = 0) -> None:
        self.file_path = file_path
        self.object_size = object_size
        self.offset = offset
        self.transport_endpoint = transport_endpoint
        self.is_dfs = is_dfs
        self.shard_idx = shard_idx
        self.aligned_size = aligned_size

    def __repr__(self) -> str:
        return (f"DiskDescriptor(file_path={self.file_path!r}, object_size={self.object_size}, "
                f"offset={self.offset}, shard_idx={self.shard_idx}, "
                f"aligned_size={self.aligned_size})")


class LocalDiskDescriptor:
    """A record in a client's SSD-offload tier (upstream ``LocalDiskDescriptor``,
    docs/tiers.md): ``object_size`` the value's bytes, ``transport_endpoint``
    the holder's segment name; ours also gives the bucket file
    (``file_path``, "" when this process cannot know it, e.g. a dummy) and
    the record's ``offset`` in it."""

    __slots__ = ("object_size", "transport_endpoint", "file_path", "offset")

    def __init__(self, object_size: int, transport_endpoint: str, file_path: str = "",
                 offset: int = 0) -> None:
        self.object_size = object_size
        self.transport_endpoint = transport_endpoint
        self.file_path = file_path
        self.offset = offset

    def __repr__(self) -> str:
        return (f"LocalDiskDescriptor(object_size={self.object_size}, "
                f"transport_endpoint={self.transport_endpoint!r}, "
                f"file_path={self.file_path!r}, offset={self.offset})")


class NoFDescriptor:
    """A replica in a NoF segment (upstream ``NoFDescriptor``): a buffer of
    a storage node's file segment, described like memory."""

    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor: Descriptor) -> None:
        self.buffer_descriptor = buffer_descriptor

    def __repr__(self) -> str:
        return f"NoFDescriptor({self.buffer_descriptor!r})"


# mc_replica_kind_t: what the native layer's replica tuples carry
_KIND_DISK = _capi.MC_REPLICA_KIND_DISK
_KIND_MEMORY = _capi.MC_REPLICA_KIND_MEMORY
_KIND_NOF = _capi.MC_REPLICA_KIND_NOF
_KIND_LOCAL_DISK = _capi.MC_REPLICA_KIND_LOCAL_DISK


class ReplicaDescriptor:
    """One replica of an object (upstream ``Replica::Descriptor``): memory
    replicas first, then NoF replicas, then at most one disk replica --
    a record in a client's SSD-offload tier (:meth:`is_local_disk_replica`,
    upstream's LOCAL_DISK) or in the shared DFS tier (:meth:`is_disk_replica`,
    upstream's DISK).

    Asking for the wrong kind of descriptor raises :class:`RuntimeError`
    with upstream's message ("Expected MemoryDescriptor", "Expected
    DiskDescriptor", ...)."""

    __slots__ = ("status", "_kind", "_desc")

    def __init__(self, status: int, kind: int, addr: int, size: int,
                 segment: str, protocol: str, file_path: str = "", shard_idx: int = 0,
                 aligned_size: int = 0) -> None:
        try:
            self.status = ReplicaStatus(status)
        except ValueError:
            self.status = ReplicaStatus.UNDEFINED
        self._kind = kind
        if kind in (_KIND_MEMORY, _KIND_NOF):
            buf = Descriptor(size, addr, segment, protocol)
            self._desc: Any = MemoryDescriptor(buf) if kind == _KIND_MEMORY else NoFDescriptor(buf)
        elif kind == _KIND_LOCAL_DISK:
            self._desc = LocalDiskDescriptor(size, segment, file_path, addr)
        else:
            self._desc = DiskDescriptor(file_path, size, addr, segment, True, shard_idx,
                                        aligned_size)

    def _get(self, kind: int, name: str) -> Any:
        if self._kind != kind:
            raise RuntimeError(f"Expected {name}")
        return self._desc

    def is_memory_replica(self) -> bool:
        """True for a replica in a client's memory segment."""
        return self._kind == _KIND_MEMORY

    def is_disk_replica(self) -> bool:
        """True for a record in the shared DFS tier (upstream DISK)."""
        return self._kind == _KIND_DISK

    def is_local_disk_replica(self) -> bool:
        """True for a record in a client's SSD-offload tier (upstream
        LOCAL_DISK, ``enable_ssd_offload``)."""
        return self._kind == _KIND_LOCAL_DISK

    def is_nof_replica(self) -> bool:
        """True for a buffer in a storage node's NoF segment (docs/tiers.md §8)."""
        return self._kind == _KIND_NOF

    def get_memory_descriptor(self) -> MemoryDescriptor:
        """The memory descriptor; RuntimeError "Expected MemoryDescriptor"
        for another kind."""
        return self._get(_KIND_MEMORY, "MemoryDescriptor")

    def get_disk_descriptor(self) -> DiskDescriptor:
        """The DFS record's descriptor; RuntimeError "Expected
        DiskDescriptor" for another kind."""
        return self._get(_KIND_DISK, "DiskDescriptor")

    def get_local_disk_descriptor(self) -> LocalDiskDescriptor:
        """The SSD-tier record's descriptor; RuntimeError "Expected
        LocalDiskDescriptor" for another kind."""
        return self._get(_KIND_LOCAL_DISK, "LocalDiskDescriptor")

    def get_nof_descriptor(self) -> NoFDescriptor:
        """The NoF descriptor; RuntimeError "Expected NoFDescriptor" for
        another kind."""
        return self._get(_KIND_NOF, "NoFDescriptor")

    def __repr__(self) -> str:
        what = {_KIND_MEMORY: "memory", _KIND_NOF: "nof", _KIND_LOCAL_DISK: "local_disk"}
        return (f"ReplicaDescriptor(status={self.status.name}, "
                f"{what.get(self._kind, 'disk')}={self._desc!r})")


class MooncakeDistributedNoFRegister:
    """Serve files or block devices as NoF segments of the store
    (upstream ``MooncakeDistributedNoFRegister``, docs/tiers.md §8).

    This process becomes a storage node: :meth:`setup` connects it to the
    master as a client without memory of its own, and :meth:`register_file`
    hands the master ``size`` bytes of a file that this process's transfer
    engine serves with pread/pwrite.  Writes with ``nof_replica_num`` > 0
    place replicas there; they are read when no memory replica is left.
    The segments go, with their replicas, when this process closes or
    dies.  Keep the process running while the segments should serve.

    Upstream registers an NVMe-oF target that the master reaches directly
    (:meth:`real_register`); this build has no NVMe-oF initiator, so that
    call answers ``NOT_SUPPORTED`` and nothing is registered.
    """

    def __init__(self) -> None:
        self._store = MooncakeDistributedStore()
        self._paths: List[str] = []

    def setup(self, local_hostname: str, metadata_server: str, master_server_addr: str,
              protocol: str = "tcp", local_buffer_size: int = 16 * 1024 * 1024) -> int:
        """Connect to the master (arguments as
        :meth:`MooncakeDistributedStore.setup`, with no global segment).
        Returns 0 or a negative :class:`ErrorCode`."""
        return self._store.setup(local_hostname, metadata_server, 0, local_buffer_size,
                                 protocol, "", master_server_addr)

    def register_file(self, path: str, size: int) -> int:
        """Serve ``size`` bytes of the file or block device at ``path``
        (absolute; a shorter regular file is extended, a missing one
        created) as a NoF segment named :meth:`get_hostname`.  Returns 0 or
        a negative :class:`ErrorCode` (``INVALID_PARAMS`` for a bad path or
        size or a path already registered)."""
        _util.check_str("path", path)
        n = _alloc_size(size)
        if not n or "\0" in path:
            return int(ErrorCode.INVALID_PARAMS)
        rc = self._store._store.nof_mount(path, n)
        if rc == 0:
            self._paths.append(path)
        return rc

    def unregister_file(self, path: str) -> int:
        """Stop serving ``path``: the master drops its replicas first.
        Returns 0 or a negative :class:`ErrorCode` (``INVALID_PARAMS`` when
        it is not registered here)."""
        _util.check_str("path", path)
        if "\0" in path:
            return int(ErrorCode.INVALID_PARAMS)
        rc = self._store._store.nof_unmount(path)
        if path in self._paths:
            self._paths.remove(path)
        return rc

    def real_register(self, nqn: str, nsid: int, target_addr: str, trsvcid: int,
                      offset: int, size: int, master_server_addr: str) -> int:
        """Upstream's registration of an NVMe-oF namespace: not built here
        (no NVMe-oF initiator); returns ``NOT_SUPPORTED`` and registers
        nothing.  Use :meth:`register_file` on the storage node instead."""
        _log.error(
            "MooncakeDistributedNoFRegister.real_register(%r): NVMe-oF is not built; serve "
            "the storage with register_file() on the storage node", nqn)
        return int(ErrorCode.NOT_SUPPORTED)

    def real_unregister_by_endpoint(self, nqn: str, nsid: int, target_addr: str,
                                    trsvcid: int, master_server_addr: str) -> int:
        """Upstream's unregistration of an NVMe-oF namespace: not built
        here; returns ``NOT_SUPPORTED``.  Use :meth:`unregister_file`."""
        return int(ErrorCode.NOT_SUPPORTED)

    def get_hostname(self) -> str:
        """The segment name of this storage node ("host:port")."""
        return self._store.get_hostname()

    def close(self) -> int:
        """Stop serving every registered file and disconnect."""
        self._paths = []
        return self._store.close()


class MooncakeHostMemAllocator:
    """Host memory that a ``mooncake_client`` can map: the host KV pool of
    SGLang's standalone mode.  Register a block with
    :meth:`MooncakeDistributedStore.register_buffer` before use; a dummy
    client then hands it to its ``mooncake_client``, which reads and writes
    the pages in place.

    Each :meth:`alloc` is one sealed memfd (``mooncake_shm``) mapped shared
    and populated.  ``MC_STORE_USE_HUGEPAGE`` (set to anything) asks for
    huge pages of ``MC_STORE_HUGEPAGE_SIZE`` (``2MB``, the default, or
    ``1GB``; another value logs a warning and means 2MB), and rounds each
    size up to that page.
    """

    def alloc(self, size: int) -> int:
        """Allocate ``size`` bytes; the address (page aligned).

        Raises:
            TypeError: ``size`` is not a non-negative int.
            RuntimeError: the allocation failed, ``alloc(0)`` included, with
                upstream's message ("Failed to create anonymous shared
                memory: ...", "Failed to map shared memory: ...", in
                huge-page mode followed by "(Check
                /proc/sys/vm/nr_hugepages?)").
        """
        if not _util.is_int(size) or size < 0:
            raise TypeError(f"size must be a non-negative int, not {size!r}")
        p = _capi.mooncake_host_mem_alloc(int(size)) if size <= _util.U64_MAX else 0
        if p == 0:
            raise RuntimeError(last_error_detail() or
                               f"Failed to map shared memory: cannot allocate {size} bytes")
        return p

    def free(self, ptr: int) -> int:
        """Free memory of :meth:`alloc` (dummy clients that registered it
        unregister it first): 0, or -1 for any address that is not the start
        of a live block."""
        p = _ptr("ptr", ptr)
        if p is None or _capi.mooncake_host_mem_free(p) != 0:
            return -1
        return 0


def get_alloc_func_addr() -> int:
    """The address of ``void *mc_host_mem_pluggable_alloc(size_t size, int
    device, void *stream)``, the :class:`MooncakeHostMemAllocator` allocator
    in the shape a torch pluggable allocator calls (``device`` and
    ``stream`` are ignored): memory from it is registrable by a dummy
    client."""
    return int(_capi.mooncake_host_mem_alloc_func_addr())


def get_free_func_addr() -> int:
    """The address of ``void mc_host_mem_pluggable_free(void *ptr, size_t
    size, int device, void *stream)``, which frees memory of
    :func:`get_alloc_func_addr` (only ``ptr`` is used)."""
    return int(_capi.mooncake_host_mem_free_func_addr())


def bind_to_numa_node(node: int) -> None:
    """Bind the calling thread's CPUs and memory policy to NUMA ``node``.

    Raises:
        TypeError: ``node`` is not an int.
        RuntimeError: the binding failed (no NUMA support in this build or
            on this machine, or a node that does not exist); the message
            carries the status and the library's detail.
    """
    if not _util.is_int(node):
        raise TypeError(f"node must be an int, not {type(node).__name__}")
    if node < 0 or node > 0x7FFFFFFF:
        raise RuntimeError(f"bind_to_numa_node({node}): invalid NUMA node")
    rc = _capi.mc_numa_bind(int(node))
    if rc != 0:
        detail = last_error_detail()
        raise RuntimeError(f"bind_to_numa_node({node}) failed: {describe(rc)}"
                           + (f" ({detail})" if detail else ""))

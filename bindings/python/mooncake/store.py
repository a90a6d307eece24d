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

Every call that waits for the network releases the GIL, so other Python
threads keep running, and one store may be used by many threads at once.
"""

import enum
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union, overload

from mooncake import capi as _capi
from mooncake import _util
from mooncake._errors import ErrorCode, describe, last_error_detail

__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
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

_UNSET: Any = object()


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
        dfs_replica_num: shared-filesystem replicas, 0 or 1 (default 0).
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
        "_prefer_alloc_in_same_node",
        "_group_ids",
    )

    def __init__(self) -> None:
        self._replica_num = 1
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: Optional[int] = None
        self._with_hard_pin = False
        self._preferred_segment = ""
        self._preferred_segments: List[str] = []
        self._prefer_alloc_in_same_node = False
        self._group_ids: Optional[List[str]] = None

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
        _util.check_key_list("preferred_segments", value)
        for seg in value:
            _util.check_str("preferred_segments item", seg)
        self._preferred_segments = list(value)

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
        _util.check_key_list("group_ids", value)
        for gid in value:
            _util.check_str("group_ids item", gid)
        self._group_ids = list(value)

    def _to_c(self) -> Any:
        """The native configuration for one call (owns copies of the strings)."""
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
    "client_http_port",
})


class MooncakeDistributedStore:
    """A Mooncake Store client.

    Create it, call :meth:`setup`, then use the object methods.  Status codes
    are ints (compare with :class:`ErrorCode`).  The object may be shared by
    threads; it can be used as a context manager, which closes it on exit.
    """

    def __init__(self) -> None:
        self._store = _capi.Store()

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
    ) -> int:
        """Connect to the master, start the transfer engine and mount this
        client's ``global_segment_size`` bytes into the pool.

        Two forms:

        * ``setup(local_hostname, metadata_server, global_segment_size,
          local_buffer_size, protocol, rdma_devices, master_server_addr,
          engine=None, enable_ssd_offload=False, ssd_offload_path="",
          tenant_id="default", enable_client_http_server=False,
          client_http_port=9300)`` -- the first seven are required;
        * ``setup(config)`` with a dict: ``local_hostname`` and
          ``metadata_server`` are required; ``global_segment_size`` and
          ``local_buffer_size`` (ints or strings such as ``"16MB"``,
          ``"1 GiB"``) default to 16 MiB, ``protocol`` to "tcp",
          ``rdma_devices`` to "", ``master_server_addr`` to
          "127.0.0.1:50051"; ``ipc_socket_path`` is accepted (this release
          hosts no dummy clients, so it is unused), and so are the keyword
          options of the first form.

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
            engine: must be None: sharing an existing transfer engine is
                not available in this release (anything else is a
                :class:`TypeError`).
            enable_ssd_offload: True returns ``NOT_SUPPORTED`` in this release.
            ssd_offload_path: SSD offload directory (unused while offload
                is not supported).
            tenant_id: key namespace ("default").
            enable_client_http_server: True returns ``NOT_SUPPORTED`` in this
                release.
            client_http_port: port of the client HTTP server (0-65535).

        Returns:
            0 on success, else a negative :class:`ErrorCode`
            (``INVALID_PARAMS``, ``RPC_FAIL`` when the master is unreachable,
            ``UNAVAILABLE_IN_CURRENT_STATUS`` when already set up, ...).

        Raises:
            TypeError: an argument has the wrong type, a required argument
                is missing, or a dict is combined with other arguments.
            ValueError: a size string such as ``"50%"`` cannot be parsed.
        """
        if isinstance(local_hostname, Mapping):
            given = [metadata_server, global_segment_size, local_buffer_size, protocol,
                     rdma_devices, master_server_addr]
            if any(v is not _UNSET for v in given) or engine is not None or \
                    enable_ssd_offload is not False or ssd_offload_path != "" or \
                    tenant_id != _DEFAULT_TENANT or enable_client_http_server is not False or \
                    client_http_port != _DEFAULT_CLIENT_HTTP_PORT:
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
        if engine is not None:
            raise TypeError("engine must be None: reusing an existing TransferEngine is "
                            "not supported by this release")
        return self._setup_checked(
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
        )

    @staticmethod
    def _port(name: str, value: Any) -> int:
        if not _util.is_int(value):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        return int(value)

    def _setup_from_dict(self, config: Mapping[str, Any]) -> int:
        for key in config:
            if not isinstance(key, str):
                raise TypeError(f"setup(config): keys must be str, not {type(key).__name__}")
        for name in ("local_hostname", "metadata_server"):
            if name not in config:
                raise TypeError(f"setup(config): the dict must contain {name!r}")
        unknown = sorted(set(config) - _DICT_KEYS)
        if unknown:
            warnings.warn("setup(config): ignoring unknown key(s) " + ", ".join(unknown),
                          RuntimeWarning, stacklevel=3)

        def get(name: str, default: Any) -> Any:
            return config.get(name, default)

        port = get("client_http_port", _DEFAULT_CLIENT_HTTP_PORT)
        if isinstance(port, str):
            try:
                port = int(port.strip(), 10)
            except ValueError:
                raise ValueError(f"client_http_port: invalid port {port!r}") from None
        _util.check_str("ipc_socket_path", get("ipc_socket_path", ""))
        return self._setup_checked(
            _util.check_str("local_hostname", config["local_hostname"]),
            _util.check_str("metadata_server", config["metadata_server"]),
            _util.size_arg("global_segment_size",
                           get("global_segment_size", _DEFAULT_SEGMENT_SIZE)),
            _util.size_arg("local_buffer_size", get("local_buffer_size", _DEFAULT_BUFFER_SIZE)),
            _util.check_str("protocol", get("protocol", _DEFAULT_PROTOCOL)),
            _util.check_str("rdma_devices", get("rdma_devices", "")),
            _util.check_str("master_server_addr", get("master_server_addr", _DEFAULT_MASTER)),
            _util.bool_arg("enable_ssd_offload", get("enable_ssd_offload", False)),
            _util.check_str("ssd_offload_path", get("ssd_offload_path", "")),
            _util.check_str("tenant_id", get("tenant_id", _DEFAULT_TENANT)),
            _util.bool_arg("enable_client_http_server", get("enable_client_http_server", False)),
            self._port("client_http_port", port),
        )

    def _setup_checked(self, local_hostname: str, metadata_server: str,
                       global_segment_size: int, local_buffer_size: int, protocol: str,
                       rdma_devices: str, master_server_addr: str, enable_ssd_offload: bool,
                       ssd_offload_path: str, tenant_id: str, enable_client_http_server: bool,
                       client_http_port: int) -> int:
        strings = (local_hostname, metadata_server, protocol, rdma_devices,
                   master_server_addr, ssd_offload_path, tenant_id)
        if any("\0" in s for s in strings):
            return int(ErrorCode.INVALID_PARAMS)
        if not 0 <= client_http_port <= 65535:
            return int(ErrorCode.INVALID_PARAMS)
        if enable_ssd_offload or enable_client_http_server:
            return int(ErrorCode.NOT_SUPPORTED)
        return self._store.setup(local_hostname, metadata_server, global_segment_size,
                                 local_buffer_size, protocol, rdma_devices,
                                 master_server_addr, tenant_id)

    def close(self) -> int:
        """Unmount this client's memory and disconnect.

        The objects stored in this client's segment disappear from the store
        for everybody.  The object can be set up again afterwards.

        Returns:
            0, or a negative :class:`ErrorCode` (``UNAVAILABLE_IN_CURRENT_STATUS``
            when it is not set up).
        """
        return self._store.close()

    def get_hostname(self) -> str:
        """This client's segment name, ``"host:port"`` ("" before setup)."""
        return self._store.hostname()

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
        _util.check_key_list("keys", keys)
        if isinstance(values, (str, bytes, bytearray, memoryview)) or \
                not isinstance(values, (list, tuple)):
            raise TypeError(f"values must be a list of bytes-like objects, "
                            f"not {type(values).__name__}")
        cfg = _c_config(config)
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

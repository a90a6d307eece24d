# SPDX-License-Identifier: Apache-2.0
"""Client configuration from a JSON file or the environment: :class:`MooncakeConfig`.

The upstream ``mooncake.mooncake_config`` module, field for field, so code
written for it (vLLM, SGLang and LMCache connectors) runs unchanged::

    from mooncake.mooncake_config import MooncakeConfig
    from mooncake.store import MooncakeDistributedStore

    cfg = MooncakeConfig.load_from_env()     # or MooncakeConfig.from_file(path)
    store = MooncakeDistributedStore()
    rc = store.setup(cfg.local_hostname, cfg.metadata_server,
                     cfg.global_segment_size, cfg.local_buffer_size,
                     cfg.protocol, cfg.device_name or "", cfg.master_server_address,
                     tenant_id=cfg.tenant_id)

Two size grammars, as upstream
------------------------------
Sizes read by *this* module (the JSON file and the ``MOONCAKE_*_SIZE``
variables) follow upstream's Python parser, :func:`_parse_segment_size`: an
int passes through; a string is stripped and lower-cased and may end in
``kb, mb, gb, tb, k, m, g, t`` or ``b`` (powers of 1024), the number before
it may be a float (``"1.5gb"``), and a bare number may be a float too
(``"1e9"``).  ``"16 MiB"`` is *not* accepted here.

Sizes given to :meth:`MooncakeDistributedStore.setup` in its dict form are
parsed by the store's own parser (:func:`mooncake._util.parse_size`, the
grammar of upstream's C++ ``setup(dict)`` and of libmooncake's
``mc_parse_size``): a decimal number, optional spaces, an optional unit
``B, K/KB, M/MB, G/GB, T/TB`` (and ``KiB``... spellings); no exponents.
The two grammars differ upstream, so they differ here; each has one parser.

Booleans (``enable_ssd_offload``, ``enable_client_http_server`` and their
variables) go through :func:`_parse_bool`: bools as they are, numbers by
truth value, ``None``/``""`` as False, and the words ``true 1 yes on enable``
/ ``false 0 no off disable`` in any case; anything else is a ValueError.

May import: the standard library only; no other module of the package.
"""

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Optional

__all__ = [
    "MooncakeConfig",
    "DEFAULT_GLOBAL_SEGMENT_SIZE",
    "DEFAULT_LOCAL_BUFFER_SIZE",
]

logger = logging.getLogger(__name__)

#: ``global_segment_size`` when the file or the environment does not say (3.125 GiB).
DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200
#: ``local_buffer_size`` when the file or the environment does not say (1 GiB).
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824

# Suffixes in the order they are tried: "kb" before "b", "k" after "kb".
_SIZE_SUFFIXES = (
    ("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30), ("tb", 1 << 40),
    ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40),
    ("b", 1),
)

# Protocols upstream knows.  Only a hint: an unknown one is logged and passed
# on, and the store decides (this build refuses what it was not built with).
_KNOWN_PROTOCOLS = frozenset({
    "tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra", "hip", "barex",
    "cxl", "ascend", "ub", "ubshmem", "maca", "sunrise_link", "rpc_only",
})

_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")

_TRUE_WORDS = frozenset({"true", "1", "yes", "on", "enable"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off", "disable"})


def _parse_segment_size(value: Any) -> int:
    """Bytes in a config size (upstream's Python grammar, see the module doc).

    Raises:
        ValueError: an empty string, a unit without a number (``"gb"``), or
            text that is no number (``"50%"``).
    """
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return int(value)
    text = value.strip().lower()
    if not text:
        raise ValueError("Invalid segment size: empty string")
    for suffix, mult in _SIZE_SUFFIXES:
        if text.endswith(suffix):
            number = text[:-len(suffix)].strip()
            if not number:
                raise ValueError(f"Invalid segment size: missing number before {suffix!r}")
            return int(float(number) * mult)
    return int(float(text))


def _parse_bool(value: Any) -> bool:
    """A config boolean given as a bool, a number or a word (see the module doc).

    Raises:
        ValueError: a word that is neither true nor false (``"maybe"``).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    word = str(value).strip().lower()
    if not word:
        return False
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"Invalid boolean value: {value!r}")


@dataclass
class MooncakeConfig:
    """Settings of one store client (upstream's ``MooncakeConfig``).

    The field order is upstream's, so positional construction works the
    same.  Attributes:

        local_hostname: this node's address ("host" or "host:port").
        metadata_server: "P2PHANDSHAKE" or "http://host:port/metadata".
        global_segment_size: bytes this client contributes to the pool.
        local_buffer_size: bytes of the registered staging buffer.
        protocol: transport, stripped and lower-cased ("RDMA" -> "rdma").
        device_name: RDMA device list, "" or None for tcp / auto-discovery.
        master_server_address: "host:port" of mooncake_master.
        enable_ssd_offload: SSD offload (this release's store refuses it).
        ssd_offload_path: SSD offload directory.
        tenant_id: key namespace ("default").
        enable_client_http_server: the client HTTP endpoints (refused by
            this release's store).
        client_http_port: their port (9300).

    Construction checks (``__post_init__``, so every constructor path --
    the dataclass constructor, :meth:`from_file`, :meth:`load_from_env` --
    runs them), with upstream's messages:

    * ``protocol`` must be a non-empty str ("Invalid protocol: <repr>.
      Protocol must be a non-empty string, e.g. 'tcp' or 'rdma'."); it is
      stripped and lower-cased and kept.  One this module does not know
      (see ``_KNOWN_PROTOCOLS``) is passed on with the only WARNING this
      module logs, on the ``mooncake.mooncake_config`` logger
      (:data:`logger`): "Unrecognised protocol '<p>'; passing it through
      to the Mooncake engine unchanged. Known protocols are: <sorted,
      comma-separated>.";
    * sizes must not be negative ("Invalid <field>: <v>. Size must be
      non-negative."; 0 is allowed);
    * ``local_hostname``, ``metadata_server`` and ``master_server_address``
      must be non-empty strings ("Config field '<f>' must be a non-empty
      string, got <repr>.").

    Each failure is a :class:`ValueError`.

    A JSON file for :meth:`from_file`::

        {"local_hostname": "node1", "metadata_server": "P2PHANDSHAKE",
         "master_server_address": "master:50051",
         "global_segment_size": "4gb", "local_buffer_size": "512mb",
         "protocol": "tcp", "device_name": "", "tenant_id": "default"}
    """

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = 9300

    def __post_init__(self) -> None:
        # The messages are upstream's word for word: callers match on them.
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(f"Invalid protocol: {self.protocol!r}. Protocol must be a "
                             "non-empty string, e.g. 'tcp' or 'rdma'.")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in _KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol '%s'; passing it through to the Mooncake "
                           "engine unchanged. Known protocols are: %s.", self.protocol,
                           ", ".join(sorted(_KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            size = getattr(self, name)
            if size < 0:
                raise ValueError(f"Invalid {name}: {size}. Size must be non-negative.")
        for name in _REQUIRED:
            text = getattr(self, name)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"Config field '{name}' must be a non-empty string, "
                                 f"got {text!r}.")

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """Read a JSON object from ``file_path``.

        ``local_hostname``, ``metadata_server`` and ``master_server_address``
        are required; the rest default to :data:`DEFAULT_GLOBAL_SEGMENT_SIZE`,
        :data:`DEFAULT_LOCAL_BUFFER_SIZE`, "tcp", "", False, "", "default",
        False and 9300.  Sizes may be strings (``"4gb"``), booleans words.

        Raises:
            ValueError: a required field is missing ("Missing required config
                field: ..."), or a value is invalid.
            OSError / json.JSONDecodeError: the file cannot be read / parsed.
        """
        with open(file_path) as f:
            config = json.load(f)
        for name in _REQUIRED:
            if name not in config:
                raise ValueError(f"Missing required config field: {name}")
        ssd_offload_path = config.get("ssd_offload_path")
        tenant_id = config.get("tenant_id")
        return MooncakeConfig(
            local_hostname=config.get("local_hostname"),
            metadata_server=config.get("metadata_server"),
            global_segment_size=_parse_segment_size(
                config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=config.get("protocol", "tcp"),
            device_name=config.get("device_name", ""),
            master_server_address=config.get("master_server_address"),
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False)),
            ssd_offload_path="" if ssd_offload_path is None else str(ssd_offload_path),
            tenant_id="default" if tenant_id is None else str(tenant_id),
            enable_client_http_server=_parse_bool(
                config.get("enable_client_http_server", False)),
            client_http_port=int(config.get("client_http_port", 9300)),
        )

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """The configuration the environment names.

        ``MOONCAKE_CONFIG_PATH`` set: :meth:`from_file` of that path.
        Otherwise ``MOONCAKE_MASTER`` is required and every field comes from
        a variable:

        =====================================  ===========================  ==============
        variable                               field                        default
        =====================================  ===========================  ==============
        ``MOONCAKE_LOCAL_HOSTNAME``            local_hostname               "localhost"
        ``MOONCAKE_TE_META_DATA_SERVER``       metadata_server              "P2PHANDSHAKE"
        ``MOONCAKE_GLOBAL_SEGMENT_SIZE``       global_segment_size          3.125 GiB
        ``MOONCAKE_LOCAL_BUFFER_SIZE``         local_buffer_size            1 GiB
        ``MOONCAKE_PROTOCOL``                  protocol                     "tcp"
        ``MOONCAKE_DEVICE``                    device_name                  ""
        ``MOONCAKE_MASTER``                    master_server_address        (required)
        ``MOONCAKE_OFFLOAD_ENABLED``           enable_ssd_offload           false
        ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH`` ssd_offload_path             ""
        ``MOONCAKE_TENANT_ID``                 tenant_id                    "default"
        ``MOONCAKE_ENABLE_CLIENT_HTTP_SERVER`` enable_client_http_server    false
        ``MOONCAKE_CLIENT_HTTP_PORT``          client_http_port             9300
        =====================================  ===========================  ==============

        Raises:
            ValueError: neither ``MOONCAKE_CONFIG_PATH`` nor ``MOONCAKE_MASTER``
                is set, or a value is invalid.
        """
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        master = os.getenv("MOONCAKE_MASTER")
        if not master:
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' "
                             "nor 'MOONCAKE_MASTER' is set.")
        env = os.getenv
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=master,
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=int(env("MOONCAKE_CLIENT_HTTP_PORT", 9300)),
        )

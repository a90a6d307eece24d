# SPDX-License-Identifier: Apache-2.0
"""mooncake.mooncake_config and the package's top-level names, against
upstream (mooncake-wheel/mooncake/mooncake_config.py, mooncake/__init__.py).

* MooncakeConfig has upstream's fields in upstream's order, with its
  defaults, and the two DEFAULT_* constants;
* __post_init__ lower-cases the protocol (an unknown one only warns, with
  upstream's text, on every constructor path) and refuses an empty
  protocol, negative sizes and empty required fields, with upstream's
  messages word for word;
* from_file reads JSON, requires the three address fields, defaults the
  rest and parses sizes and booleans;
* load_from_env prefers MOONCAKE_CONFIG_PATH, otherwise needs
  MOONCAKE_MASTER and reads every per-field variable;
* the config size grammar and the setup(dict) size grammar are upstream's
  two different ones;
* a config from the environment sets a store up against a real master;
* `from mooncake import BufferPool` works and is RegisteredBufferPool.
"""

import dataclasses
import json
import logging
import os
import uuid

import pytest

from helpers import MiB

CFG_ENV = [
    "MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER", "MOONCAKE_LOCAL_HOSTNAME",
    "MOONCAKE_TE_META_DATA_SERVER", "MOONCAKE_GLOBAL_SEGMENT_SIZE",
    "MOONCAKE_LOCAL_BUFFER_SIZE", "MOONCAKE_PROTOCOL", "MOONCAKE_DEVICE",
    "MOONCAKE_OFFLOAD_ENABLED", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "MOONCAKE_TENANT_ID",
    "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "MOONCAKE_CLIENT_HTTP_PORT",
]


@pytest.fixture
def clean_env(monkeypatch):
    for name in CFG_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def cfgmod():
    from mooncake import mooncake_config
    return mooncake_config


def make(**over):
    base = dict(local_hostname="localhost", metadata_server="P2PHANDSHAKE",
                global_segment_size=16 * MiB, local_buffer_size=16 * MiB, protocol="tcp",
                device_name="", master_server_address="127.0.0.1:50051")
    base.update(over)
    return cfgmod().MooncakeConfig(**base)


def write_json(tmp_path, obj):
    path = tmp_path / f"cfg-{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(obj))
    return str(path)


# ---- the dataclass ----------------------------------------------------------------------


def test_fields_order_defaults_and_constants():
    m = cfgmod()
    assert m.DEFAULT_GLOBAL_SEGMENT_SIZE == 3355443200
    assert m.DEFAULT_LOCAL_BUFFER_SIZE == 1073741824
    fields = dataclasses.fields(m.MooncakeConfig)
    assert [f.name for f in fields] == [
        "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
        "protocol", "device_name", "master_server_address", "enable_ssd_offload",
        "ssd_offload_path", "tenant_id", "enable_client_http_server", "client_http_port"]
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    assert defaults == {"enable_ssd_offload": False, "ssd_offload_path": "",
                        "tenant_id": "default", "enable_client_http_server": False,
                        "client_http_port": 9300}
    # positional construction in upstream's order
    c = m.MooncakeConfig("h", "P2PHANDSHAKE", 1, 2, "tcp", None, "m:1", True, "/p", "t",
                         True, 1234)
    assert (c.global_segment_size, c.local_buffer_size, c.device_name, c.tenant_id,
            c.client_http_port, c.enable_ssd_offload) == (1, 2, None, "t", 1234, True)


KNOWN = ("tcp rdma efa nvmeof nvlink musa nvlink_intra hip barex cxl ascend ub ubshmem "
         "maca sunrise_link rpc_only").split()


def unrecognised(p: str) -> str:
    """Upstream's warning, word for word."""
    return (f"Unrecognised protocol '{p}'; passing it through to the Mooncake engine "
            f"unchanged. Known protocols are: {', '.join(sorted(KNOWN))}.")


def warnings_of(caplog):
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]


def test_post_init_normalises_the_protocol_and_warns_on_unknown(caplog):
    assert cfgmod().logger is logging.getLogger("mooncake.mooncake_config")
    assert make(protocol="  RDMA ").protocol == "rdma"
    with caplog.at_level(logging.WARNING, logger="mooncake.mooncake_config"):
        caplog.clear()
        for p in KNOWN:                               # known: no warning
            assert make(protocol=p.upper()).protocol == p
        assert not caplog.records
        c = make(protocol=" Carrier-Pigeon ")
    assert c.protocol == "carrier-pigeon"            # kept, lower-cased: not refused
    assert warnings_of(caplog) == [("mooncake.mooncake_config", logging.WARNING,
                                    unrecognised("carrier-pigeon"))]


def test_every_constructor_path_warns(caplog, tmp_path, clean_env):
    """The warning comes from __post_init__, so from_file and load_from_env
    log it too."""
    m = cfgmod()
    path = write_json(tmp_path, {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                                 "master_server_address": "m:1", "protocol": "Foo"})
    with caplog.at_level(logging.WARNING, logger="mooncake.mooncake_config"):
        caplog.clear()
        assert m.MooncakeConfig.from_file(path).protocol == "foo"
        clean_env.setenv("MOONCAKE_MASTER", "m:1")
        clean_env.setenv("MOONCAKE_PROTOCOL", "BAR")
        assert m.MooncakeConfig.load_from_env().protocol == "bar"
        clean_env.setenv("MOONCAKE_CONFIG_PATH", path)
        assert m.MooncakeConfig.load_from_env().protocol == "foo"
    assert [msg for _, _, msg in warnings_of(caplog)] == \
        [unrecognised("foo"), unrecognised("bar"), unrecognised("foo")]


@pytest.mark.parametrize("over,message", [
    ({"protocol": ""}, "Invalid protocol: ''. Protocol must be a non-empty string, "
                       "e.g. 'tcp' or 'rdma'."),
    ({"protocol": "   "}, "Invalid protocol: '   '. Protocol must be a non-empty string, "
                          "e.g. 'tcp' or 'rdma'."),
    ({"protocol": None}, "Invalid protocol: None. Protocol must be a non-empty string, "
                         "e.g. 'tcp' or 'rdma'."),
    ({"protocol": 5}, "Invalid protocol: 5. Protocol must be a non-empty string, "
                      "e.g. 'tcp' or 'rdma'."),
    ({"global_segment_size": -1}, "Invalid global_segment_size: -1. Size must be non-negative."),
    ({"local_buffer_size": -5}, "Invalid local_buffer_size: -5. Size must be non-negative."),
    ({"local_hostname": ""}, "Config field 'local_hostname' must be a non-empty string, got ''."),
    ({"local_hostname": "  "},
     "Config field 'local_hostname' must be a non-empty string, got '  '."),
    ({"local_hostname": None},
     "Config field 'local_hostname' must be a non-empty string, got None."),
    ({"metadata_server": ""},
     "Config field 'metadata_server' must be a non-empty string, got ''."),
    ({"master_server_address": ""},
     "Config field 'master_server_address' must be a non-empty string, got ''."),
    ({"master_server_address": 50051},
     "Config field 'master_server_address' must be a non-empty string, got 50051."),
])
def test_post_init_refusals(over, message):
    with pytest.raises(ValueError) as info:
        make(**over)
    assert str(info.value) == message


def test_post_init_accepts_zero_sizes():
    c = make(global_segment_size=0, local_buffer_size=0)
    assert (c.global_segment_size, c.local_buffer_size) == (0, 0)


# ---- the two parsers --------------------------------------------------------------------


@pytest.mark.parametrize("text,value", [
    (4096, 4096), ("4096", 4096), (" 4096 ", 4096), ("1e3", 1000), ("12.9", 12),
    ("1kb", 1024), ("1KB", 1024), ("2k", 2048), ("3mb", 3 * MiB), ("3 MB", 3 * MiB),
    ("3m", 3 * MiB), ("1gb", 1 << 30), ("1.5gb", 3 << 29), ("1.5 G", 3 << 29),
    ("2tb", 2 << 40), ("2t", 2 << 40), ("100b", 100), ("100B", 100), (7.9, 7),
])
def test_config_size_grammar(text, value):
    assert cfgmod()._parse_segment_size(text) == value


@pytest.mark.parametrize("text", ["", "   ", "gb", "kb", "b", "50%", "16 MiB", "16mib",
                                  "abc", "16 XB"])
def test_config_size_grammar_refusals(text):
    with pytest.raises(ValueError):
        cfgmod()._parse_segment_size(text)


@pytest.mark.parametrize("text,message", [
    ("", "Invalid segment size: empty string"),
    ("   ", "Invalid segment size: empty string"),
    ("gb", "Invalid segment size: missing number before 'gb'"),
    (" MB ", "Invalid segment size: missing number before 'mb'"),
    ("k", "Invalid segment size: missing number before 'k'"),
])
def test_config_size_messages(text, message):
    with pytest.raises(ValueError) as info:
        cfgmod()._parse_segment_size(text)
    assert str(info.value) == message


def test_the_two_size_grammars_differ_as_upstream():
    """Upstream's Python parser takes exponents and no "MiB"; its C++ parser
    (setup(dict)) refuses exponents.  Each grammar has one parser here."""
    from mooncake import _util
    assert cfgmod()._parse_segment_size("1e3") == 1000
    with pytest.raises(ValueError):
        _util.parse_size("1e3")
    with pytest.raises(ValueError):
        cfgmod()._parse_segment_size("16 MiB")
    assert _util.parse_size("16 MB") == 16 * MiB
    for both in ("16mb", "1.5 GB", "512k", "100b"):
        assert cfgmod()._parse_segment_size(both) == _util.parse_size(both), both


@pytest.mark.parametrize("value,expect", [
    (True, True), (False, False), (1, True), (0, False), (2.5, True), (0.0, False),
    (None, False), ("", False), ("  ", False),
    ("true", True), ("TRUE", True), (" 1 ", True), ("yes", True), ("On", True),
    ("enable", True), ("false", False), ("0", False), ("NO", False), ("off", False),
    ("Disable", False),
])
def test_config_bool_grammar(value, expect):
    assert cfgmod()._parse_bool(value) is expect


@pytest.mark.parametrize("value", ["maybe", "t", "y", "2", "enabled"])
def test_config_bool_grammar_refusals(value):
    with pytest.raises(ValueError) as info:
        cfgmod()._parse_bool(value)
    assert str(info.value) == f"Invalid boolean value: {value!r}"


# ---- from_file ---------------------------------------------------------------------------


def test_from_file_defaults(tmp_path):
    m = cfgmod()
    c = m.MooncakeConfig.from_file(write_json(tmp_path, {
        "local_hostname": "node1", "metadata_server": "P2PHANDSHAKE",
        "master_server_address": "10.0.0.1:50051"}))
    assert c == m.MooncakeConfig(
        "node1", "P2PHANDSHAKE", m.DEFAULT_GLOBAL_SEGMENT_SIZE, m.DEFAULT_LOCAL_BUFFER_SIZE,
        "tcp", "", "10.0.0.1:50051", False, "", "default", False, 9300)


def test_from_file_every_field(tmp_path):
    c = cfgmod().MooncakeConfig.from_file(write_json(tmp_path, {
        "local_hostname": "node1", "metadata_server": "http://m:8080/metadata",
        "master_server_address": "m:50051", "global_segment_size": "1.5gb",
        "local_buffer_size": "512 mb", "protocol": "RDMA", "device_name": "mlx5_0",
        "enable_ssd_offload": "yes", "ssd_offload_path": None, "tenant_id": None,
        "enable_client_http_server": "on", "client_http_port": "9400"}))
    assert c.global_segment_size == 3 << 29
    assert c.local_buffer_size == 512 * MiB
    assert c.protocol == "rdma" and c.device_name == "mlx5_0"
    assert c.enable_ssd_offload is True and c.enable_client_http_server is True
    assert c.ssd_offload_path == "" and c.tenant_id == "default"   # null -> defaults
    assert c.client_http_port == 9400


@pytest.mark.parametrize("missing", ["local_hostname", "metadata_server",
                                     "master_server_address"])
def test_from_file_requires_the_address_fields(tmp_path, missing):
    cfg = {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
           "master_server_address": "m:1"}
    del cfg[missing]
    with pytest.raises(ValueError) as info:
        cfgmod().MooncakeConfig.from_file(write_json(tmp_path, cfg))
    assert str(info.value) == f"Missing required config field: {missing}"


@pytest.mark.parametrize("over", [{"global_segment_size": "50%"},
                                  {"enable_ssd_offload": "perhaps"},
                                  {"protocol": ""}, {"local_hostname": ""}])
def test_from_file_bad_values(tmp_path, over):
    cfg = {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
           "master_server_address": "m:1"}
    cfg.update(over)
    with pytest.raises(ValueError):
        cfgmod().MooncakeConfig.from_file(write_json(tmp_path, cfg))


# ---- load_from_env -----------------------------------------------------------------------


def test_load_from_env_needs_a_master_or_a_file(clean_env):
    with pytest.raises(ValueError) as info:
        cfgmod().MooncakeConfig.load_from_env()
    assert str(info.value) == ("Neither the environment variable 'MOONCAKE_CONFIG_PATH' "
                               "nor 'MOONCAKE_MASTER' is set.")
    clean_env.setenv("MOONCAKE_MASTER", "")
    with pytest.raises(ValueError):
        cfgmod().MooncakeConfig.load_from_env()


def test_load_from_env_defaults(clean_env):
    m = cfgmod()
    clean_env.setenv("MOONCAKE_MASTER", "10.1.2.3:50051")
    c = m.MooncakeConfig.load_from_env()
    assert c == m.MooncakeConfig(
        "localhost", "P2PHANDSHAKE", m.DEFAULT_GLOBAL_SEGMENT_SIZE,
        m.DEFAULT_LOCAL_BUFFER_SIZE, "tcp", "", "10.1.2.3:50051", False, "", "default",
        False, 9300)


def test_load_from_env_every_variable(clean_env):
    env = {
        "MOONCAKE_MASTER": "m:7", "MOONCAKE_LOCAL_HOSTNAME": "node9",
        "MOONCAKE_TE_META_DATA_SERVER": "http://m:8080/metadata",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": "2gb", "MOONCAKE_LOCAL_BUFFER_SIZE": "64m",
        "MOONCAKE_PROTOCOL": "RDMA", "MOONCAKE_DEVICE": "mlx5_1",
        "MOONCAKE_OFFLOAD_ENABLED": "TRUE", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/nvme",
        "MOONCAKE_TENANT_ID": "t1", "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER": "1",
        "MOONCAKE_CLIENT_HTTP_PORT": "9555",
    }
    for k, v in env.items():
        clean_env.setenv(k, v)
    c = cfgmod().MooncakeConfig.load_from_env()
    assert dataclasses.asdict(c) == {
        "local_hostname": "node9", "metadata_server": "http://m:8080/metadata",
        "global_segment_size": 2 << 30, "local_buffer_size": 64 * MiB, "protocol": "rdma",
        "device_name": "mlx5_1", "master_server_address": "m:7",
        "enable_ssd_offload": True, "ssd_offload_path": "/nvme", "tenant_id": "t1",
        "enable_client_http_server": True, "client_http_port": 9555}
    clean_env.setenv("MOONCAKE_OFFLOAD_ENABLED", "sometimes")
    with pytest.raises(ValueError):
        cfgmod().MooncakeConfig.load_from_env()


def test_load_from_env_prefers_the_config_file(clean_env, tmp_path):
    path = write_json(tmp_path, {"local_hostname": "from-file",
                                 "metadata_server": "P2PHANDSHAKE",
                                 "master_server_address": "file:1"})
    clean_env.setenv("MOONCAKE_CONFIG_PATH", path)
    clean_env.setenv("MOONCAKE_MASTER", "env:2")
    clean_env.setenv("MOONCAKE_LOCAL_HOSTNAME", "from-env")
    c = cfgmod().MooncakeConfig.load_from_env()
    assert (c.local_hostname, c.master_server_address) == ("from-file", "file:1")


def test_a_config_from_the_environment_sets_a_store_up(clean_env, master):
    from mooncake.store import MooncakeDistributedStore
    clean_env.setenv("MOONCAKE_MASTER", master.addr)
    clean_env.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "32mb")
    clean_env.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "16mb")
    cfg = cfgmod().MooncakeConfig.load_from_env()
    s = MooncakeDistributedStore()
    rc = s.setup(cfg.local_hostname, cfg.metadata_server, cfg.global_segment_size,
                 cfg.local_buffer_size, cfg.protocol, cfg.device_name or "",
                 cfg.master_server_address, tenant_id=cfg.tenant_id)
    assert rc == 0
    try:
        k = f"cfg-{uuid.uuid4().hex}"
        assert s.put(k, b"configured") == 0
        assert s.get(k) == b"configured"
    finally:
        assert s.close() == 0


# ---- the package's top-level names -----------------------------------------------------


def test_top_level_buffer_pool_aliases():
    import mooncake
    from mooncake import BufferPool, RegisteredBufferPool
    from mooncake import buffer_pool, store
    assert mooncake.__all__ == ["BufferPool", "RegisteredBufferPool"]
    assert BufferPool is RegisteredBufferPool is buffer_pool.BufferPool
    assert store.BufferPool is store.RegisteredBufferPool is BufferPool
    assert store.BufferLease is store.RegisteredBufferLease is buffer_pool.BufferLease
    assert isinstance(mooncake.__version__, str) and mooncake.__version__.count(".") == 2


def test_package_path_is_extendable(tmp_path):
    """pkgutil.extend_path: a second 'mooncake' directory on sys.path adds
    modules to the package, as upstream's add-on wheels rely on."""
    import subprocess
    import sys
    extra = tmp_path / "mooncake"
    extra.mkdir()
    (extra / "addon_probe.py").write_text("VALUE = 42\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = env.get("PYTHONPATH", "") + os.pathsep + str(tmp_path)
    r = subprocess.run([sys.executable, "-c",
                        "import mooncake.addon_probe as m; print(m.VALUE)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "42"

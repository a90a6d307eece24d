# SPDX-License-Identifier: Apache-2.0
"""setup() and close(), every form audited against upstream.

Upstream (mooncake-integration/store/store_py.cpp, real_client.cpp):

* positional/keyword form: the binding converts arguments, so a wrong type
  raises TypeError; a bad value returns a non-zero code;
* dict form: every value is stringified and parsed by the C++ parser
  (try_string_to_byte_size for sizes), and an invalid value makes setup
  *return* non-zero -- "50%" included -- instead of raising; sizes must be
  0 or >= 1 KiB, the local buffer <= 1 TiB;
* close() of a store that is not set up returns 0 (tearDownAll treats it as
  success for idempotence).

Ours on top: ``rpc_timeout_ms`` / ``MC_STORE_RPC_TIMEOUT_MS`` bound how long
setup waits for a master that accepts connections and never answers, and
the error names that master.  Every wait here is bounded by a deadline.
"""

import inspect
import pydoc
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from helpers import EXAMPLES, MiB, free_port, port_accepts

INVALID_PARAMS = -600
RPC_FAIL = -900


def ec():
    from mooncake.store import ErrorCode
    return ErrorCode


def new_store():
    from mooncake.store import MooncakeDistributedStore
    return MooncakeDistributedStore()


def key() -> str:
    return f"setup-{uuid.uuid4().hex}"


def works(s):
    k = key()
    assert s.put(k, b"v") == 0
    assert s.get(k) == b"v"


def base(master):
    return {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
            "master_server_addr": master.addr}


class SilentMaster:
    """A listening socket that accepts connections and never answers: a
    master that hangs after accept."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.accepted = threading.Event()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(c)
            self.accepted.set()

    def close(self) -> None:
        self._stop.set()
        self._t.join(10)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def silent():
    m = SilentMaster()
    try:
        yield m
    finally:
        m.close()


def timed_setup(s, *args, **kwargs):
    t0 = time.monotonic()
    rc = s.setup(*args, **kwargs)
    return rc, time.monotonic() - t0


# ---- the dict form returns codes -----------------------------------------------------


def test_dict_with_a_percentage_returns_an_error_as_upstream(master):
    """The regression: upstream returns non-zero for "50%"; it does not raise."""
    s = new_store()
    for name in ("global_segment_size", "local_buffer_size"):
        rc = s.setup(dict(base(master), **{name: "50%"}))
        assert rc == INVALID_PARAMS, (name, rc)
        assert s.get_hostname() == ""
    # the same object sets up afterwards: nothing was left behind
    assert s.setup(dict(base(master), global_segment_size="16MB")) == 0
    works(s)
    assert s.close() == 0


@pytest.mark.parametrize("bad", ["-16MB", "16 XB", "", "  ", "MB", "1e6", "0x10", "16MBB",
                                 "16 M B", "nan", "infinite", None, True, [16], -1])
def test_dict_bad_sizes_return_invalid_params(master, bad):
    """Values are stringified first (None -> "None", True -> "True", [16] ->
    "[16]"), then parsed; nothing raises."""
    s = new_store()
    assert s.setup(dict(base(master), local_buffer_size=bad)) == INVALID_PARAMS
    assert s.get_hostname() == ""


@pytest.mark.parametrize("size,expect", [(1023, INVALID_PARAMS), ("1023", INVALID_PARAMS),
                                         ("0.5k", INVALID_PARAMS), (1, INVALID_PARAMS),
                                         (1024, 0), ("1 KB", 0), (0, 0)])
def test_dict_sizes_are_zero_or_at_least_one_kib(master, size, expect):
    s = new_store()
    rc = s.setup(dict(base(master), global_segment_size=size))
    assert rc == expect, (size, rc)
    assert s.close() == 0


def test_dict_local_buffer_is_at_most_one_tib(master):
    s = new_store()
    assert s.setup(dict(base(master), local_buffer_size="1025 GB")) == INVALID_PARAMS
    assert s.setup(dict(base(master), local_buffer_size=(1 << 40) + 1)) == INVALID_PARAMS
    assert s.get_hostname() == ""


def test_dict_values_are_stringified_then_parsed(master, monkeypatch):
    """An int, a float, and the spaced/unspaced unit forms all parse; a
    str(bool) is a boolean word."""
    for seg, buf in [(16 * MiB, "16 MB"), (16.0 * MiB, "16mb"), ("16777216", " 16 m "),
                     ("1.5 MB", 2 * MiB)]:
        s = new_store()
        rc = s.setup(dict(base(master), global_segment_size=seg, local_buffer_size=buf,
                          enable_ssd_offload=False, client_http_port="9300",
                          protocol="tcp", rdma_devices=""))
        assert rc == 0, (seg, buf, rc)
        works(s)
        assert s.close() == 0
    s = new_store()
    # True -> "True" -> a true word -> the SSD tier, which needs a directory
    # (docs/tiers.md; test_tiers.py runs it)
    monkeypatch.delenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", raising=False)
    assert s.setup(dict(base(master), enable_ssd_offload=True)) == ec().INVALID_PARAMS
    assert s.get_hostname() == ""
    # "on" is a true word: the client HTTP server starts on the stringified port
    port = free_port()
    assert s.setup(dict(base(master), enable_client_http_server="on",
                        client_http_port=str(port))) == 0
    assert port_accepts(port)
    assert s.close() == 0


@pytest.mark.parametrize("over", [
    {"enable_ssd_offload": "perhaps"}, {"enable_client_http_server": 2},
    {"client_http_port": "http"}, {"client_http_port": 70000}, {"client_http_port": -1},
    {"client_http_port": 9300.5}, {"rpc_timeout_ms": "soon"}, {"rpc_timeout_ms": -5},
    {"rpc_timeout_ms": 3600001}, {"tenant_id": "a\0b"},
])
def test_dict_bad_values_return_invalid_params(master, over):
    s = new_store()
    assert s.setup(dict(base(master), **over)) == INVALID_PARAMS, over
    assert s.get_hostname() == ""


@pytest.mark.parametrize("missing", ["local_hostname", "metadata_server"])
def test_dict_missing_required_key_returns_invalid_params(master, missing):
    cfg = base(master)
    del cfg[missing]
    assert new_store().setup(cfg) == INVALID_PARAMS


def test_dict_defaults_and_unknown_keys(master):
    """Only local_hostname and metadata_server are needed when the master is
    passed; an unknown key is ignored with a warning."""
    s = new_store()
    with pytest.warns(RuntimeWarning, match="no_such_key"):
        assert s.setup(dict(base(master), no_such_key=1, ipc_socket_path="")) == 0
    works(s)
    assert s.close() == 0


def test_dict_goes_alone():
    s = new_store()
    cfg = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE"}
    for kwargs in ({"tenant_id": "t"}, {"rpc_timeout_ms": 100}, {"client_http_port": 1}):
        with pytest.raises(TypeError):
            s.setup(cfg, **kwargs)
    with pytest.raises(TypeError):
        s.setup(cfg, "P2PHANDSHAKE")


# ---- the positional form raises TypeError for types, returns codes for values ----------


def test_positional_types_raise_values_return(master):
    s = new_store()
    good = ["localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr]
    for i, bad in [(0, None), (2, "16MB"), (2, 16.0), (3, True), (3, -1), (5, None)]:
        args = list(good)
        args[i] = bad
        with pytest.raises(TypeError):
            s.setup(*args)
    with pytest.raises(TypeError):
        s.setup(*good, rpc_timeout_ms="100")
    with pytest.raises(TypeError):
        s.setup(*good, rpc_timeout_ms=1.5)
    with pytest.raises(TypeError):
        s.setup(*good[:5])
    # values: codes, not exceptions
    assert s.setup(*good, rpc_timeout_ms=-1) == INVALID_PARAMS
    assert s.setup(*good, rpc_timeout_ms=3600001) == INVALID_PARAMS
    assert s.setup(*good, client_http_port=-1) == INVALID_PARAMS
    assert s.setup(*good[:6], "127.0.0.1:99999") == INVALID_PARAMS     # no such port
    assert s.get_hostname() == ""
    assert s.setup(*good, rpc_timeout_ms=2000) == 0
    works(s)
    # a second setup of a set-up store is refused, and the first stays usable
    assert s.setup(*good) == INVALID_PARAMS
    works(s)
    assert s.close() == 0


def test_keyword_form(master):
    s = new_store()
    rc = s.setup(local_hostname="localhost", metadata_server="P2PHANDSHAKE",
                 global_segment_size=16 * MiB, local_buffer_size=16 * MiB, protocol="tcp",
                 rdma_devices="", master_server_addr=master.addr, rpc_timeout_ms=0)
    assert rc == 0
    works(s)
    assert s.close() == 0


def test_help_shows_readable_defaults():
    from mooncake.store import MooncakeDistributedStore
    sig = inspect.signature(MooncakeDistributedStore.setup)
    text = str(sig)
    assert "object object" not in text
    assert "metadata_server: Any = <required>" in text
    assert "rpc_timeout_ms: Any = None" in text
    doc = pydoc.render_doc(MooncakeDistributedStore.setup, renderer=pydoc.plaintext)
    assert "object at 0x" not in doc
    assert "MC_STORE_RPC_TIMEOUT_MS" in doc


# ---- close() ----------------------------------------------------------------------------


def test_close_before_setup_and_twice_returns_zero_as_upstream(master):
    s = new_store()
    assert s.close() == 0
    assert s.close() == 0
    assert s.setup(dict(base(master), local_buffer_size="50%")) == INVALID_PARAMS
    assert s.close() == 0                      # after a failed setup too
    assert s.setup(dict(base(master))) == 0
    assert s.close() == 0
    assert s.close() == 0


def test_close_documentation_agrees():
    from mooncake.store import MooncakeDistributedStore
    doc = MooncakeDistributedStore.close.__doc__
    assert "also when the store is not set up" in doc
    assert "UNAVAILABLE_IN_CURRENT_STATUS" not in doc


# ---- a master that accepts and never answers ----------------------------------------------


def test_silent_master_fails_setup_within_rpc_timeout_ms(silent):
    s = new_store()
    rc, took = timed_setup(s, "localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                           silent.addr, rpc_timeout_ms=400)
    from mooncake.store import last_error_detail
    detail = last_error_detail()
    assert silent.accepted.is_set(), "the socket never saw the connection"
    assert rc == RPC_FAIL, rc
    assert 0.3 <= took < 4.0, f"setup took {took:.2f} s with rpc_timeout_ms=400"
    assert silent.addr in detail and "400 ms" in detail, detail
    assert s.get_hostname() == ""
    assert s.close() == 0


def test_silent_master_error_is_logged_with_its_address(silent):
    """The message naming the master goes to the library log (stderr) too;
    run in a child so its stderr can be read whole."""
    code = (
        "import sys\n"
        "from mooncake.store import MooncakeDistributedStore\n"
        "s = MooncakeDistributedStore()\n"
        f"rc = s.setup('localhost', 'P2PHANDSHAKE', 16 << 20, 16 << 20, 'tcp', '', "
        f"{silent.addr!r}, rpc_timeout_ms=300)\n"
        "print(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(RPC_FAIL)
    assert silent.addr in r.stderr and "300 ms" in r.stderr, r.stderr


def test_silent_master_bounded_by_the_environment(silent, monkeypatch):
    monkeypatch.setenv("MC_STORE_RPC_TIMEOUT_MS", "500")
    s = new_store()
    rc, took = timed_setup(s, dict(local_hostname="localhost",
                                   metadata_server="P2PHANDSHAKE",
                                   master_server_addr=silent.addr))
    assert rc == RPC_FAIL
    assert 0.4 <= took < 4.0, f"setup took {took:.2f} s with MC_STORE_RPC_TIMEOUT_MS=500"
    # the keyword (here through the dict) wins over the variable
    rc, took = timed_setup(s, dict(local_hostname="localhost",
                                   metadata_server="P2PHANDSHAKE",
                                   master_server_addr=silent.addr, rpc_timeout_ms="1500"))
    assert rc == RPC_FAIL
    assert 1.4 <= took < 6.0, f"setup took {took:.2f} s with rpc_timeout_ms=1500"


def test_silent_master_default_bound_is_five_seconds(silent, monkeypatch):
    """Nothing set: about 5 s (was 30 s), not forever."""
    monkeypatch.delenv("MC_STORE_RPC_TIMEOUT_MS", raising=False)
    s = new_store()
    rc, took = timed_setup(s, "localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                           silent.addr)
    assert rc == RPC_FAIL
    assert 4.5 <= took < 12.0, f"setup took {took:.2f} s by default"


def test_unreachable_master_detail_names_it():
    port = free_port()
    s = new_store()
    rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                 f"127.0.0.1:{port}", rpc_timeout_ms=1000)
    from mooncake.store import last_error_detail
    assert rc == RPC_FAIL
    assert f"127.0.0.1:{port}" in last_error_detail()


# ---- examples/hello.py ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hello.py", "p2p_hello.py"])
def test_example_exits_non_zero_when_setup_fails(name, tmp_path):
    """Rewritten exactly as test_examples.py does, to a master that is not there."""
    src = (EXAMPLES / name).read_text()
    assert src.count('"localhost:50051"') == 1
    dead = f"127.0.0.1:{free_port()}"
    src = src.replace('"localhost:50051"', repr(dead))
    src = src.replace('"http://localhost:8080/metadata"', repr(f"http://{dead}/metadata"))
    script = tmp_path / name
    script.write_text(src)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0, (r.stdout, r.stderr)
    assert "setup" in r.stderr and "failed" in r.stderr, r.stderr
    assert "Hello, Mooncake Store!" not in r.stdout

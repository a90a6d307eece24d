# SPDX-License-Identifier: Apache-2.0
"""The standalone HTTP metadata server, both forms: the installed C daemon
mooncake_http_metadata_server (the master's own metadata store in upstream's
Python-server dialect) and mooncake.http_metadata_server.KVBootstrapServer
(aiohttp, in-process).  Every route, code and text of upstream's Python
server, the rpc_meta write-once rule, /health; KVBootstrapServer's public
attributes and its handlers called directly with a duck-typed request, as
upstream's callers do, HEAD refused, aiohttp's 1 MiB body limit, a port that
is not rewritten; for the daemons (the C one and `python3 -m
mooncake.http_metadata_server`) SIGHUP is logged and survived with the store
intact, SIGTERM and SIGINT exit 0, and a bad command line exits 2.  The
master's embedded store keeps its own texts.
"""

import asyncio
import http.client
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import DaemonProc, free_port, master_bin, port_accepts, wait_until


def daemon_bin() -> str:
    path = os.environ.get("MC_METADATA_SERVER_BIN") or str(
        Path(master_bin()).with_name("mooncake_http_metadata_server"))
    assert os.access(path, os.X_OK), f"{path} is not built"
    return path


class Daemon(DaemonProc):
    """A metadata server process on a free loopback port; always stopped."""

    def __init__(self, argv):
        self.port = free_port()
        self._start(argv + ["--host", "127.0.0.1", "--port", str(self.port)], "meta")
        self._ready(lambda: port_accepts(self.port), 20.0,
                    "the metadata server to accept connections")


def python_argv():
    return [sys.executable, "-m", "mooncake.http_metadata_server", "--log-level", "DEBUG"]


@pytest.fixture(params=["c-daemon", "python-module", "python-class"])
def server(request):
    """(port, kind) of a running standalone server of each form."""
    if request.param == "python-class":
        from mooncake.http_metadata_server import KVBootstrapServer, KVPoll
        port = free_port()
        kv = KVBootstrapServer(port, "127.0.0.1")
        assert kv.poll() is KVPoll.Failed
        kv.run()
        try:
            assert kv.poll() is KVPoll.Success
            wait_until(lambda: port_accepts(port), 10.0, "KVBootstrapServer to listen")
            yield port, request.param
        finally:
            kv.close()
        assert kv.poll() is KVPoll.Failed
        assert not port_accepts(port)
        return
    d = Daemon([daemon_bin()] if request.param == "c-daemon" else python_argv())
    try:
        yield d.port, request.param
        assert d.proc.poll() is None, d.log_text()
    finally:
        d.stop()


def req(port, method, path, body=None):
    """(status, body) of one request on a fresh connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_routes_codes_and_texts(server):
    port, _ = server
    assert req(port, "GET", "/metadata?key=a") == (404, b"metadata not found")
    assert req(port, "PUT", "/metadata?key=a", b'{"x": 1}') == (200, b"metadata updated")
    assert req(port, "GET", "/metadata?key=a") == (200, b'{"x": 1}')
    # replaced (not an rpc_meta key); key URL-decoded and stripped
    assert req(port, "PUT", "/metadata?key=%20a%20", b"second") == (200, b"metadata updated")
    assert req(port, "GET", "/metadata?key=a") == (200, b"second")
    assert req(port, "PUT", "/metadata?key=mooncake%2Fram%2Fh%3A1", b"") == \
        (200, b"metadata updated")
    assert req(port, "GET", "/metadata?key=mooncake/ram/h:1") == (200, b"")
    assert req(port, "DELETE", "/metadata?key=a") == (200, b"metadata deleted")
    assert req(port, "DELETE", "/metadata?key=a") == (404, b"metadata not found")
    assert req(port, "GET", "/metadata?key=a") == (404, b"metadata not found")
    for path in ("/metadata", "/metadata?key=", "/metadata?key=%20%20", "/metadata?other=1"):
        for method in ("GET", "PUT", "DELETE"):
            assert req(port, method, path, b"v" if method == "PUT" else None) == \
                (400, b"metadata key is required"), (method, path)
    assert req(port, "POST", "/metadata?key=a", b"x") == (405, b"Method not allowed")
    assert req(port, "PATCH", "/metadata?key=a", b"x") == (405, b"Method not allowed")
    assert req(port, "GET", "/nope")[0] == 404
    assert req(port, "GET", "/health") == (200, b"OK")


def test_get_content_type_is_json(server):
    port, _ = server
    assert req(port, "PUT", "/metadata?key=ct", b"{}")[0] == 200
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metadata?key=ct")
        r = c.getresponse()
        assert r.status == 200 and r.read() == b"{}"
        assert r.getheader("Content-Type").startswith("application/json")
    finally:
        c.close()


def test_rpc_meta_is_written_once(server):
    port, _ = server
    key = "/metadata?key=mooncake/rpc_meta/host:1234"
    assert req(port, "PUT", key, b"first") == (200, b"metadata updated")
    # the Python server's rule: refused even with the same body
    assert req(port, "PUT", key, b"first") == (400, b"Duplicate rpc_meta key not allowed")
    assert req(port, "PUT", key, b"other") == (400, b"Duplicate rpc_meta key not allowed")
    assert req(port, "GET", key) == (200, b"first")
    # any key containing rpc_meta
    assert req(port, "PUT", "/metadata?key=xrpc_metay", b"1")[0] == 200
    assert req(port, "PUT", "/metadata?key=xrpc_metay", b"2")[0] == 400
    # free again once deleted
    assert req(port, "DELETE", key) == (200, b"metadata deleted")
    assert req(port, "PUT", key, b"again") == (200, b"metadata updated")


@pytest.mark.parametrize("kind", ["c-daemon", "python-module"])
def test_sighup_survives_sigterm_exits_0(kind):
    d = Daemon([daemon_bin()] if kind == "c-daemon" else python_argv())
    try:
        assert req(d.port, "PUT", "/metadata?key=keep", b"kept") == (200, b"metadata updated")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in d.log_text() or d.proc.poll() is not None, 10.0,
                   "the SIGHUP log line")
        assert d.proc.poll() is None, f"SIGHUP killed it:\n{d.log_text()}"
        assert req(d.port, "GET", "/metadata?key=keep") == (200, b"kept")
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0, d.log_text()
        assert "SIGTERM" in d.log_text()
    finally:
        d.stop()


def test_c_daemon_sigint_exits_0():
    d = Daemon([daemon_bin()])
    try:
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(timeout=10) == 0, d.log_text()
    finally:
        d.stop()


def test_c_daemon_command_line():
    out = subprocess.run([daemon_bin(), "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for flag in ("--port", "--host", "--log-level", "8080", "0.0.0.0"):
        assert flag in out.stdout, flag
    for bad in (["--bogus"], ["--port", "x"], ["--port=70000"], ["--log-level", "LOUD"],
                ["--port"], ["positional"]):
        r = subprocess.run([daemon_bin()] + bad, capture_output=True, text=True, timeout=10)
        assert r.returncode == 2, (bad, r.returncode, r.stderr)
        assert "error" in r.stderr, bad
    # a port that is taken: exit 1, named in the log
    taken = Daemon([daemon_bin()])
    try:
        r = subprocess.run([daemon_bin(), "--host", "127.0.0.1", "--port", str(taken.port),
                            "--log-level=ERROR"], capture_output=True, text=True, timeout=10)
        assert r.returncode == 1 and str(taken.port) in r.stderr, r.stderr
    finally:
        taken.stop()


class DuckRequest:
    """What upstream's callers hand _handle_metadata: method, query, read()."""

    def __init__(self, method, query, body=b""):
        self.method = method
        self.query = query
        self._body = body

    async def read(self):
        return self._body


def test_python_handlers_called_directly():
    from aiohttp import web
    from mooncake.http_metadata_server import KVBootstrapServer

    kv = KVBootstrapServer(8080)
    # the constructor binds nothing and sets upstream's attributes
    assert (kv.port, kv.host, kv.store) == (8080, "0.0.0.0", {})
    assert isinstance(kv.app, web.Application) and isinstance(kv.lock, asyncio.Lock)
    assert kv.thread is None and kv._loop is None and kv._runner is None
    assert ("*", "/metadata") in [(r.method, r.resource.canonical)
                                  for r in kv.app.router.routes()]

    async def call(method, query, body=b""):
        r = await kv._handle_metadata(DuckRequest(method, query, body))
        assert r.content_type == "application/json", (method, query, r.content_type)
        return r.status, r.body

    async def scenario():
        for q in ({}, {"key": ""}, {"key": "   "}):
            for method in ("GET", "PUT", "DELETE", "POST", "HEAD"):
                assert await call(method, q, b"v") == (400, b"metadata key is required")
        assert await call("GET", {"key": "valid"}) == (404, b"metadata not found")
        assert await call("PUT", {"key": "  valid  "}, b"\x00bytes") == (200, b"metadata updated")
        assert kv.store == {"valid": b"\x00bytes"}
        assert await call("GET", {"key": "valid"}) == (200, b"\x00bytes")
        for method in ("POST", "HEAD", "PATCH", "OPTIONS"):
            assert await call(method, {"key": "valid"}) == (405, b"Method not allowed")
        assert await call("PUT", {"key": "a/rpc_meta/b"}, b"1") == (200, b"metadata updated")
        assert await call("PUT", {"key": "a/rpc_meta/b"}, b"1") == \
            (400, b"Duplicate rpc_meta key not allowed")
        assert kv.store["a/rpc_meta/b"] == b"1"
        assert await call("DELETE", {"key": "valid"}) == (200, b"metadata deleted")
        assert await call("DELETE", {"key": "valid"}) == (404, b"metadata not found")
        # the handlers behind the dispatch, under the public lock
        assert (await kv._handle_get("a/rpc_meta/b")).body == b"1"
        r = await kv._handle_put("k", DuckRequest("PUT", {}, b"direct"))
        assert (r.status, kv.store["k"]) == (200, b"direct")
        async with kv.lock:
            waiter = asyncio.ensure_future(kv._handle_get("k"))
            await asyncio.sleep(0.05)
            assert not waiter.done(), "a GET went past the held lock"
        assert (await waiter).body == b"direct"
        assert (await kv._handle_delete("k")).status == 200

    asyncio.run(scenario())


def test_python_head_body_limit_and_port():
    """Python only: HEAD is 405 (the C daemon answers it as GET), a body over
    aiohttp's 1 MiB is 413, the port given is never rewritten, close() ends
    the thread, and a port that cannot be bound turns poll() Failed."""
    from mooncake.http_metadata_server import KVBootstrapServer, KVPoll
    port = free_port()
    kv = KVBootstrapServer(port, "127.0.0.1")
    thread = kv.run()
    assert thread is kv.thread and thread.daemon
    try:
        wait_until(lambda: port_accepts(port), 10.0, "KVBootstrapServer to listen")
        assert kv.port == port
        assert req(port, "PUT", "/metadata?key=h", b"x")[0] == 200
        assert req(port, "HEAD", "/metadata?key=h")[0] == 405
        # aiohttp refuses a body of client_max_size (1 MiB) bytes or more
        assert req(port, "PUT", "/metadata?key=big", b"v" * ((1 << 20) - 1)) == \
            (200, b"metadata updated")
        assert req(port, "PUT", "/metadata?key=big2", b"v" * (1 << 20))[0] == 413
        assert req(port, "GET", "/metadata?key=big2") == (404, b"metadata not found")
        assert req(port, "GET", "/other?key=h")[0] == 404
        # a second server on the taken port: its thread ends, poll says so
        taken = KVBootstrapServer(port, "127.0.0.1")
        taken.run()
        wait_until(lambda: taken.poll() is KVPoll.Failed, 10.0, "the bind failure")
        assert kv.poll() is KVPoll.Success
    finally:
        kv.close()
    assert not thread.is_alive() and kv.poll() is KVPoll.Failed
    # port 0: the kernel picks one, and port stays 0 (upstream)
    zero = KVBootstrapServer(0, "127.0.0.1")
    zero.run()
    try:
        assert zero.poll() is KVPoll.Success and zero.port == 0
    finally:
        zero.close()
    assert zero.poll() is KVPoll.Failed


def test_python_module_port_taken_exits_1():
    taken = Daemon(python_argv())
    try:
        r = subprocess.run(python_argv()[:-2] + ["--host", "127.0.0.1", "--port",
                                                 str(taken.port)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert str(taken.port) in r.stderr and "the server thread stopped" in r.stderr
    finally:
        taken.stop()


def test_python_parse_args_defaults():
    from mooncake.http_metadata_server import parse_args
    a = parse_args([])
    assert (a.port, a.host, a.log_level) == (8080, "0.0.0.0", "INFO")
    a = parse_args(["--port", "9000", "--host", "127.0.0.1", "--log-level", "ERROR"])
    assert (a.port, a.host, a.log_level) == (9000, "127.0.0.1", "ERROR")
    for bad in (["--log-level", "LOUD"], ["--max-value-size", "1MB"], ["--quota", "1MB"]):
        with pytest.raises(SystemExit) as e:
            parse_args(bad)
        assert e.value.code == 2, bad


def test_master_embedded_store_keeps_master_texts(master):
    """The same code in the master's dialect: its own texts and rpc_meta rule."""
    port = master.http_port
    assert req(port, "GET", "/metadata") == (400, b"Missing key parameter")
    key = "/metadata?key=mooncake/rpc_meta/m:1"
    assert req(port, "PUT", key, b"v") == (200, b"metadata updated")
    assert req(port, "PUT", key, b"v") == (200, b"metadata unchanged")
    assert req(port, "PUT", key, b"w") == (400, b"Duplicate rpc_meta key not allowed")
    # only the mooncake/rpc_meta/ prefix is write-once in the master
    assert req(port, "PUT", "/metadata?key=xrpc_meta", b"1")[0] == 200
    assert req(port, "PUT", "/metadata?key=xrpc_meta", b"2") == (200, b"metadata updated")
    assert req(port, "POST", "/metadata?key=a", b"x")[0] == 405
    assert req(port, "GET", "/health") == (200, b"OK")
    assert req(port, "DELETE", key) == (200, b"metadata deleted")

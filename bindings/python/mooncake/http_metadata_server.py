# SPDX-License-Identifier: Apache-2.0
"""HTTP metadata server of the transfer engines, in-process.

Upstream's ``mooncake.http_metadata_server`` with its entry points:
:class:`KVPoll`, :class:`KVBootstrapServer` (``run()``, ``close()``,
``poll()``), :func:`parse_args` and :func:`main`.  Upstream serves it with
aiohttp; this one uses the standard library only (``http.server`` in a
daemon thread), with the same routes, status codes and texts:

* ``/metadata?key=K`` (key stripped of surrounding white space; missing or
  empty: 400 ``metadata key is required``)

  - ``GET``: 200 and the stored bytes, or 404 ``metadata not found``
  - ``PUT``: stores the body, 200 ``metadata updated``; a key containing
    ``rpc_meta`` that already exists is 400 ``Duplicate rpc_meta key not
    allowed`` (whatever the body)
  - ``DELETE``: 200 ``metadata deleted`` or 404 ``metadata not found``
  - any other method: 405 ``Method not allowed``

* ``GET /health``: 200 ``OK`` (as the C daemon; upstream's Python server
  has no such route).

Bounded as the C daemon: a key of more than 4096 bytes is 414, a body
over ``max_value_size`` (16 MiB) is 413 and never read, and a PUT that
would take keys and values past ``quota`` (256 MiB) is 507 ``metadata
store is full`` (``--max-value-size``, ``--quota`` on the command line).

The installed command ``mooncake_http_metadata_server`` is the C daemon
built from the master's own metadata store (same routes and texts, see its
man page).  :func:`main` (``python3 -m mooncake.http_metadata_server``)
always runs this Python server in the foreground until SIGINT or SIGTERM;
it never executes the C daemon.
"""

import argparse
import http.server

from mooncake import _util
import logging
import signal
import threading
import urllib.parse
from enum import Enum
from typing import Dict, List, Optional

__all__ = ["KVPoll", "KVBootstrapServer", "parse_args", "main"]

logger = logging.getLogger(__name__)

#: Defaults of the store's limits (those of the C daemon).
MAX_KEY = 4096
DEFAULT_MAX_VALUE_SIZE = 16 << 20
DEFAULT_QUOTA = 256 << 20


class KVPoll(Enum):
    """State of a bootstrap server, as upstream (``poll()`` answers
    ``Success`` while it serves and ``Failed`` otherwise)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class _Handler(http.server.BaseHTTPRequestHandler):
    """One request; ``self.server.kv`` is the owning KVBootstrapServer."""

    protocol_version = "HTTP/1.1"
    server_version = "mooncake-http-metadata-server"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib name)
        logger.debug("%s - %s", self.address_string(), format % args)

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self) -> None:
        kv: "KVBootstrapServer" = self.server.kv  # type: ignore[attr-defined]
        url = urllib.parse.urlsplit(self.path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > kv.max_value_size:
            # not read: the connection cannot be reused
            self.close_connection = True
            self._reply(413, b"metadata value is too large")
            return
        # read the body whatever the answer, so the connection stays usable
        body = self._body() if self.command in ("PUT", "POST", "PATCH") else b""
        if url.path == "/health" and self.command in ("GET", "HEAD"):
            self._reply(200, b"OK", "text/plain; charset=utf-8")
            return
        if url.path != "/metadata":
            self._reply(404, b"404: Not Found", "text/plain; charset=utf-8")
            return
        key = urllib.parse.parse_qs(url.query).get("key", [""])[0].strip()
        if not key:
            self._reply(400, b"metadata key is required")
            return
        if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY:
            self._reply(414, b"metadata key is too long")
            return
        if self.command in ("GET", "HEAD"):
            with kv._lock:
                value = kv._store.get(key)
            if value is None:
                self._reply(404, b"metadata not found")
            else:
                self._reply(200, value)
        elif self.command == "PUT":
            with kv._lock:
                old = kv._store.get(key)
                size = len(key) + len(body)
                if "rpc_meta" in key and old is not None:
                    refused = 400
                elif kv._bytes - (len(key) + len(old) if old is not None else 0) + size \
                        > kv.quota:
                    refused = 507
                else:
                    if old is not None:
                        kv._bytes -= len(key) + len(old)
                    kv._store[key] = body
                    kv._bytes += size
                    refused = 0
            if refused == 400:
                self._reply(400, b"Duplicate rpc_meta key not allowed")
            elif refused == 507:
                logger.warning("refused %d bytes for %s: the store is full", len(body), key)
                self._reply(507, b"metadata store is full")
            else:
                self._reply(200, b"metadata updated")
        elif self.command == "DELETE":
            with kv._lock:
                old = kv._store.pop(key, None)
                if old is not None:
                    kv._bytes -= len(key) + len(old)
                found = old is not None
            if found:
                self._reply(200, b"metadata deleted")
            else:
                self._reply(404, b"metadata not found")
        else:
            self._reply(405, b"Method not allowed")

    do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = do_PATCH = do_OPTIONS = _handle


class KVBootstrapServer:
    """An in-memory metadata store served over HTTP on ``host:port``
    (``port`` 0 picks a free port; :attr:`port` names it once running),
    holding values of at most ``max_value_size`` bytes and at most
    ``quota`` bytes of keys and values."""

    def __init__(self, port: int, host: str = "0.0.0.0",
                 max_value_size: int = DEFAULT_MAX_VALUE_SIZE,
                 quota: int = DEFAULT_QUOTA) -> None:
        self.port = port
        self.host = host
        self.max_value_size = _util.check_size("max_value_size", max_value_size)
        self.quota = _util.check_size("quota", quota)
        self._bytes = 0
        self._store: Dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._httpd: Optional[http.server.ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    def run(self) -> threading.Thread:
        """Bind and serve from a daemon thread; returns that thread.  Raises
        OSError when the address cannot be bound."""
        if self._thread is not None and self._thread.is_alive():
            return self._thread
        httpd = http.server.ThreadingHTTPServer((self.host, self.port), _Handler)
        httpd.daemon_threads = True
        httpd.kv = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, name="kv-bootstrap-server",
                                        daemon=True)
        self._thread.start()
        logger.info("metadata server listening on %s:%d", self.host, self.port)
        return self._thread

    def close(self) -> None:
        """Stop serving and wait (up to 2 s) for the thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=2)
        self._httpd = None

    def poll(self) -> KVPoll:
        """``KVPoll.Success`` while serving, else ``KVPoll.Failed``."""
        if self._thread is not None and self._thread.is_alive():
            return KVPoll.Success
        return KVPoll.Failed


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Upstream's command line: --port (8080), --host (0.0.0.0), --log-level."""
    parser = argparse.ArgumentParser(description="Mooncake HTTP metadata server")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.add_argument("--host", type=str, default="0.0.0.0", help="address to bind")
    parser.add_argument("--log-level", type=str, default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                        help="log level")
    parser.add_argument("--max-value-size", type=_size, default=DEFAULT_MAX_VALUE_SIZE,
                        help="largest value one PUT may store (default: 16MB)")
    parser.add_argument("--quota", type=_size, default=DEFAULT_QUOTA,
                        help="bytes of keys and values the store holds (default: 256MB)")
    return parser.parse_args(argv)


def _size(text: str) -> int:
    try:
        n = _util.parse_size(text)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"invalid size: {text!r} ({e})") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"invalid size: {text!r}")
    return n


def main(argv: Optional[List[str]] = None) -> int:
    """Run :class:`KVBootstrapServer` until SIGINT or SIGTERM; returns 0."""
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = KVBootstrapServer(args.port, args.host, args.max_value_size, args.quota)
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        logger.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    def on_hup(signum, frame):  # noqa: ARG001
        logger.info("received SIGHUP: nothing to reload, carrying on")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_hup)
    server.run()
    try:
        while not stop.wait(0.5):
            if server.poll() is not KVPoll.Success:
                logger.error("the server thread stopped")
                return 1
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

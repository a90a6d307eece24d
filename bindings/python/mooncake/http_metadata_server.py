# SPDX-License-Identifier: Apache-2.0
"""HTTP metadata server of the transfer engines, in-process, on aiohttp.

Upstream's ``mooncake.http_metadata_server`` with its entry points and
attributes: :class:`KVPoll`, :class:`KVBootstrapServer` (``app``, ``store``,
``lock``, ``run()``, ``close()``, ``poll()`` and the request handlers),
:func:`parse_args` and :func:`main`.  It needs aiohttp (Debian:
``python3-aiohttp``); without it, importing this module raises an
ImportError that says so.

* ``/metadata?key=K``, any method (the key is stripped of surrounding white
  space; missing, empty or blank: 400 ``metadata key is required``, whatever
  the method)

  - ``GET``: 200 and the stored bytes, or 404 ``metadata not found``
  - ``PUT``: stores the body under the stripped key, 200 ``metadata
    updated``; a key containing ``rpc_meta`` that already exists is 400
    ``Duplicate rpc_meta key not allowed`` (whatever the body)
  - ``DELETE``: 200 ``metadata deleted`` or 404 ``metadata not found``
  - any other method, HEAD included: 405 ``Method not allowed``

* ``GET /health``: 200 ``OK``, as the C daemon and the master answer it
  (upstream's Python server has no such route; anything else is 404).

Every answer of ``/metadata`` has the content type ``application/json``
with a plain-text body, as upstream.  A body over aiohttp's default limit
(1 MiB) is 413.  The store is not bounded otherwise: the C daemon
``mooncake_http_metadata_server`` (the installed command of that name,
built from the master's own metadata store) has a value limit and a quota.
:func:`main` (``python3 -m mooncake.http_metadata_server``) runs this
Python server in the foreground until SIGINT or SIGTERM; it never executes
the C daemon.

May import: the standard library and aiohttp only; no other module of the
package.
"""

import argparse
import asyncio
import logging
import signal
import threading
from enum import Enum
from typing import List, Optional

try:
    from aiohttp import web
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("mooncake.http_metadata_server needs aiohttp: install python3-aiohttp "
                      f"(Debian) or the aiohttp package ({e})") from e

__all__ = ["KVPoll", "KVBootstrapServer", "parse_args", "main"]

logger = logging.getLogger(__name__)

_JSON = "application/json"


class KVPoll(Enum):
    """State of a bootstrap server, as upstream (``poll()`` answers
    ``Success`` while it serves and ``Failed`` otherwise)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


def _reply(status: int, text: str) -> "web.Response":
    return web.Response(text=text, status=status, content_type=_JSON)


class KVBootstrapServer:
    """An in-memory metadata store served over HTTP on ``host:port``.

    The constructor binds nothing: :meth:`run` serves from a daemon thread
    with its own event loop.  ``port`` stays what was given (pick a free
    one: 0 lets the kernel choose and nobody learns which).  ``store`` maps
    each stripped key to its bytes and ``lock`` (an :class:`asyncio.Lock`)
    guards it; the handlers are coroutines that tests and subclasses may
    call directly with any object that has ``method``, ``query`` (a
    mapping) and an ``async read()``.
    """

    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self.port = port
        self.host = host
        self.app = web.Application()
        self.store: dict = {}
        self.lock = asyncio.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self.thread: Optional[threading.Thread] = None
        self._closing = threading.Event()
        self._setup_routes()
        # the C daemon's and the master's health route, for probes that
        # check any of the three the same way
        self.app.router.add_get("/health", self._handle_health)

    def _setup_routes(self) -> None:
        """Upstream's one route: every method of ``/metadata``."""
        self.app.router.add_route("*", "/metadata", self._handle_metadata)

    async def _handle_health(self, request) -> "web.Response":  # noqa: ARG002
        return web.Response(text="OK")

    async def _handle_metadata(self, request) -> "web.Response":
        """The key first (400 without one, for every method), then the
        method: GET, PUT, DELETE, or 405."""
        key = request.query.get("key", "").strip()
        if not key:
            return _reply(400, "metadata key is required")
        if request.method == "GET":
            return await self._handle_get(key)
        if request.method == "PUT":
            return await self._handle_put(key, request)
        if request.method == "DELETE":
            return await self._handle_delete(key)
        return _reply(405, "Method not allowed")

    async def _handle_get(self, key: str) -> "web.Response":
        async with self.lock:
            value = self.store.get(key)
        if value is None:
            return _reply(404, "metadata not found")
        return web.Response(body=value, status=200, content_type=_JSON)

    async def _handle_put(self, key: str, request) -> "web.Response":
        data = await request.read()
        async with self.lock:
            # an rpc_meta key names a process's RPC endpoint: two processes
            # claiming one segment name must not overwrite each other
            if "rpc_meta" in key and key in self.store:
                return _reply(400, "Duplicate rpc_meta key not allowed")
            self.store[key] = data
        return _reply(200, "metadata updated")

    async def _handle_delete(self, key: str) -> "web.Response":
        async with self.lock:
            if key not in self.store:
                return _reply(404, "metadata not found")
            del self.store[key]
        return _reply(200, "metadata deleted")

    def run(self) -> threading.Thread:
        """Serve from a daemon thread; returns it.  A failure to bind is
        logged by that thread, which then ends (``poll()`` turns Failed)."""
        self._closing.clear()
        self.thread = threading.Thread(target=self._run_server, name="kv-bootstrap-server",
                                       daemon=True)
        self.thread.start()
        logger.info("metadata server starting on %s:%s", self.host, self.port)
        return self.thread

    async def _start_site(self) -> None:
        self._runner = web.AppRunner(self.app)
        await self._runner.setup()
        await web.TCPSite(self._runner, host=self.host, port=self.port).start()

    def _run_server(self) -> None:
        """The thread: its own loop, an AppRunner and a TCPSite, run until
        :meth:`close` stops the loop; then the runner is cleaned up."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            # close() may come at any point: before the loop exists (the
            # flag), or while the site starts (its stop ends that wait)
            if not self._closing.is_set():
                loop.run_until_complete(self._start_site())
            if not self._closing.is_set():
                loop.run_forever()
        except Exception as e:  # noqa: BLE001 - the thread's only report
            if not self._closing.is_set():
                logger.error("metadata server on %s:%s failed: %s", self.host, self.port, e)
        finally:
            try:
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
            finally:
                loop.close()

    def close(self) -> None:
        """Stop the loop and wait (up to 2 s) for the thread."""
        self._closing.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # closed meanwhile: the thread is ending
                pass
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout=2)

    def poll(self) -> KVPoll:
        """``KVPoll.Success`` while the thread lives, else ``KVPoll.Failed``."""
        if self.thread is not None and self.thread.is_alive():
            return KVPoll.Success
        return KVPoll.Failed


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Upstream's command line: --port (8080), --host (0.0.0.0), --log-level."""
    parser = argparse.ArgumentParser(description="HTTP metadata server for Mooncake",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.add_argument("--host", type=str, default="0.0.0.0", help="address to bind")
    parser.add_argument("--log-level", type=str, default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                        help="log level")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Run :class:`KVBootstrapServer` until SIGINT or SIGTERM (0); 1 when
    the server thread ends by itself (the port could not be bound)."""
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = KVBootstrapServer(port=args.port, host=args.host)
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

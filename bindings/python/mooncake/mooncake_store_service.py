# SPDX-License-Identifier: Apache-2.0
"""A store client with a REST API: upstream's ``mooncake_store_service``.

``mc_store_rest_server`` (this module's :func:`sync_main`; ``python3 -m
mooncake.mooncake_store_service`` is the same) sets a
:class:`~mooncake.store.MooncakeDistributedStore` up from a
:class:`~mooncake.mooncake_config.MooncakeConfig` -- ``--config FILE``, else
the environment (``MOONCAKE_CONFIG_PATH`` or ``MOONCAKE_MASTER`` and the
other ``MOONCAKE_*`` variables) -- with ``-D key=value`` overrides, retrying
every second for ``--max-wait-time`` seconds while the master is not there,
and then serves on ``0.0.0.0:--port`` (8080):

=========================  ===============================================
``POST /api/reconfigure``  ``{"mode": "decode", "path", "size", ...}``
                           mounts a file segment (make before break: the
                           previous decode segments are unmounted only once
                           the new one is in); ``{"mode": "prefill"}``
                           unmounts them
``POST /api/mount_shm``    ``{"name", "size", ...}``: mount
                           ``/dev/shm/<name>``
``POST /api/unmount_shm``  ``{"segment_ids", "grace_period_seconds"}``
``POST /api/mount``        ``{"size", ...}``: allocate and mount
``POST /api/unmount``      ``{"segment_ids", ...}``: unmount and free
``POST /api/unmount_local_disk``  ``{"grace_period_seconds"}`` (0-3600):
                           take the SSD tier off the master, then hold
                           (a shutdown hook)
``PUT /api/put``           ``{"key", "value": str}``
``GET /api/get/{key}``     the bytes (``application/octet-stream``)
``GET /api/exist/{key}``   ``{"exists": bool}``
``DELETE /api/remove/{key}``, ``DELETE /api/remove_all``
=========================  ===============================================

Every other answer is JSON: ``{"status": "success", ...}`` or
``{"error": "..."}`` with the status codes and texts of upstream.  SIGINT or
SIGTERM stops the server and closes the store (exit 0); a store that could
not be set up in time is ``RuntimeError: Failed to start store service``
(exit 1).  It needs aiohttp (Debian: ``python3-aiohttp``); without it,
importing this module raises an ImportError that says so.

The handlers call the store on the event loop, as upstream does, except
``unmount_local_disk`` whose grace period runs in a thread.

May import: store and mooncake_config.
"""

import argparse
import asyncio
import functools
import json
import logging
import signal
import time
from typing import Any, Dict, List, Optional

try:
    from aiohttp import web
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("mooncake.mooncake_store_service needs aiohttp: install python3-aiohttp "
                      f"(Debian) or the aiohttp package ({e})") from e

from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore

__all__ = ["MooncakeStoreService", "parse_arguments", "main", "sync_main"]

#: The longest grace period ``/api/unmount_local_disk`` accepts: a value in
#: milliseconds by mistake must not block a shutdown hook for days.
_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600

#: Request bodies up to 100 MiB (values of ``/api/put``).
_MAX_BODY = 100 * 1024 * 1024

_RETRY_INTERVAL_S = 1.0


def _timed_handler(operation_name: str, handler):
    """``handler`` logging "<NAME> operation completed in X.XX ms" (INFO)."""

    async def wrapper(request):
        start = time.perf_counter()
        try:
            return await handler(request)
        finally:
            logging.info("%s operation completed in %.2f ms", operation_name,
                         (time.perf_counter() - start) * 1000)

    return wrapper


def _shm_name_to_path(name: Any) -> Optional[str]:
    """``/dev/shm/<name>`` for a POSIX shared memory name ("x" or "/x");
    None for anything else (not a str, empty, a path, "." or "..")."""
    if not isinstance(name, str) or not name:
        return None
    rest = name[1:] if name.startswith("/") else name
    if not rest or "/" in rest or rest in (".", ".."):
        return None
    return f"/dev/shm/{rest}"


def _unblock_shutdown_signals() -> None:
    """Let SIGINT and SIGTERM reach this thread even when whatever started
    the process (or a library) left them blocked."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    except AttributeError:  # no pthread_sigmask on this platform
        pass


def _install_shutdown_signal_handlers(loop: asyncio.AbstractEventLoop,
                                      shutdown_event: asyncio.Event) -> None:
    """SIGINT and SIGTERM set ``shutdown_event`` on ``loop``: through the
    loop's own signal handling, else a plain handler that hands over to it."""

    def request_shutdown(signum):
        logging.info("Received signal %s, shutting down", signal.Signals(signum).name)
        shutdown_event.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, request_shutdown, sig)
        except (NotImplementedError, RuntimeError):
            signal.signal(sig, lambda signum, _frame:
                          loop.call_soon_threadsafe(request_shutdown, signum))


def _setup_logging() -> None:
    """INFO and above on stderr through the root logger (nothing when the
    application configured logging already)."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")


def _json(status: int, body: Dict[str, Any]) -> "web.Response":
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _error(status: int, message: str, **extra: Any) -> "web.Response":
    return _json(status, dict({"error": message}, **extra))


def _success(**extra: Any) -> "web.Response":
    return _json(200, dict({"status": "success"}, **extra))


def _segment_ids(data: Dict[str, Any]) -> List[Any]:
    """``segment_ids`` of a body: a list, or one id as a str."""
    ids = data.get("segment_ids", [])
    return [ids] if isinstance(ids, str) else ids


def _catching(name: str):
    """A handler whose exceptions become 500 ``{"error": str(e)}``, logged
    as "<NAME> error: ..."."""

    def wrap(method):
        @functools.wraps(method)
        async def handler(self, request):
            try:
                return await method(self, request)
            except Exception as e:  # noqa: BLE001 - the API's error answer
                logging.error("%s error: %s", name, e)
                return _error(500, str(e))

        return handler

    return wrap


class MooncakeStoreService:
    """One store client and the REST API over it.

    Args:
        config_path: a JSON file for :meth:`MooncakeConfig.from_file`; None:
            :meth:`MooncakeConfig.load_from_env`.
        cli_config: overrides, ``{field: value}``; a field the
            configuration does not have is ignored, and values are set as
            given (strings from ``-D``: ``setup(dict)`` parses them).

    State of the reconfigure API: ``current_mode`` ("prefill" or
    "decode"), ``mounted_segment_ids`` (the decode segments),
    ``last_mount_info`` (the last decode mount's parameters), changed under
    ``_state_lock``.
    """

    def __init__(self, config_path: Optional[str] = None,
                 cli_config: Optional[Dict[str, Any]] = None) -> None:
        self.store: Optional[MooncakeDistributedStore] = None
        self.config: Optional[MooncakeConfig] = None
        _setup_logging()
        self.current_mode = "prefill"
        self.mounted_segment_ids: List[str] = []
        self.last_mount_info: Dict[str, Any] = {}
        self._state_lock = asyncio.Lock()
        self._runner: Optional[web.AppRunner] = None
        try:
            if config_path:
                self.config = MooncakeConfig.from_file(config_path)
            else:
                self.config = MooncakeConfig.load_from_env()
            for key, value in (cli_config or {}).items():
                if hasattr(self.config, key):
                    setattr(self.config, key, value)
            logging.info("Mooncake configuration loaded")
        except Exception as e:
            logging.error("Configuration load failed: %s", e)
            raise

    # ---- the store --------------------------------------------------------------

    def _setup_dict(self) -> Dict[str, Any]:
        """setup()'s dict, upstream's keys, from the configuration."""
        c = self.config
        return {
            "local_hostname": c.local_hostname,
            "metadata_server": c.metadata_server,
            "global_segment_size": c.global_segment_size,
            "local_buffer_size": c.local_buffer_size,
            "protocol": c.protocol,
            "rdma_devices": c.device_name,
            "master_server_addr": c.master_server_address,
            "enable_ssd_offload": c.enable_ssd_offload,
            "ssd_offload_path": c.ssd_offload_path,
            "tenant_id": c.tenant_id,
            "enable_client_http_server": c.enable_client_http_server,
            "client_http_port": c.client_http_port,
        }

    async def start_store_service(self, max_wait_time: float = 60,
                                  shutdown_event: Optional[asyncio.Event] = None) -> bool:
        """Set the store up, once a second until it works or
        ``max_wait_time`` seconds have passed.  False when it did not work
        in time, or at once when ``shutdown_event`` is set before or between
        the attempts; set during one, the store it set up is closed."""

        def cancelled() -> bool:
            if shutdown_event is not None and shutdown_event.is_set():
                logging.info("Store startup cancelled by shutdown request")
                return True
            return False

        start = time.perf_counter()
        attempt = 0
        if shutdown_event is not None:
            await asyncio.sleep(0)  # a signal that came just before
        while True:
            if cancelled():
                return False
            elapsed = time.perf_counter() - start
            if elapsed >= max_wait_time:
                logging.error("Store startup failed: exceeded max wait time of %ss after %d "
                              "attempts", max_wait_time, attempt)
                return False
            attempt += 1
            logging.info("Attempting to start store service (attempt %d, elapsed: "
                         "%.1fs/%ss)", attempt, elapsed, max_wait_time)
            try:
                self.store = MooncakeDistributedStore()
                ret = self.store.setup(self._setup_dict())
                if shutdown_event is not None:
                    # setup() blocks the loop: a signal that came meanwhile
                    # is handled now
                    await asyncio.sleep(0)
                    if cancelled():
                        await self.stop()
                        return False
                if ret != 0:
                    raise RuntimeError(f"Store initialization failed (setup returned {ret})")
                logging.info("Store service started successfully on %s",
                             self.config.local_hostname)
                return True
            except Exception as e:  # noqa: BLE001 - every failure is retried
                remaining = max_wait_time - (time.perf_counter() - start)
                pause = min(_RETRY_INTERVAL_S, remaining) if remaining > 0 else 0
                logging.warning("Store startup failed (attempt %d): %s. Retrying in %.1fs... "
                                "(remaining time: %.1fs)", attempt, e, pause, remaining)
                if pause <= 0:
                    continue
                if shutdown_event is None:
                    await asyncio.sleep(pause)
                    continue
                try:
                    await asyncio.wait_for(shutdown_event.wait(), timeout=pause)
                except asyncio.TimeoutError:
                    pass

    async def stop(self) -> None:
        """Stop the HTTP server (if started here) and close the store; a
        second call does nothing."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        if self.store is None:
            return
        store, self.store = self.store, None
        ret = store.close()
        if ret != 0:
            logging.warning("Mooncake service close returned %s", ret)
        else:
            logging.info("Mooncake service stopped")

    # ---- the HTTP server --------------------------------------------------------

    def _routes(self) -> List["web.RouteDef"]:
        t = _timed_handler
        return [
            web.post("/api/reconfigure", t("RECONFIGURE", self.handle_reconfigure)),
            web.post("/api/mount_shm", t("MOUNT_SHM", self.handle_mount_shm)),
            web.post("/api/unmount_shm", t("UNMOUNT_SHM", self.handle_unmount_shm)),
            web.post("/api/mount", t("MOUNT", self.handle_mount)),
            web.post("/api/unmount", t("UNMOUNT", self.handle_unmount)),
            web.post("/api/unmount_local_disk",
                     t("UNMOUNT_LOCAL_DISK", self.handle_unmount_local_disk)),
            web.put("/api/put", t("PUT", self.handle_put)),
            web.get("/api/get/{key}", t("GET", self.handle_get)),
            web.get("/api/exist/{key}", t("EXIST", self.handle_exist)),
            web.delete("/api/remove/{key}", t("REMOVE", self.handle_remove)),
            web.delete("/api/remove_all", t("REMOVE_ALL", self.handle_remove_all)),
        ]

    async def start_http_service(self, port: int = 8080) -> bool:
        """Serve the API on 0.0.0.0:``port``; True once listening (OSError
        when the port cannot be bound)."""
        app = web.Application(client_max_size=_MAX_BODY)
        app.add_routes(self._routes())
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            await web.TCPSite(runner, "0.0.0.0", port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        logging.info("REST API started on port %s", port)
        return True

    # ---- segments ----------------------------------------------------------------

    @_catching("RECONFIGURE")
    async def handle_reconfigure(self, request) -> "web.Response":
        """Switch between prefill (no decode segments) and decode (one
        mounted file segment)."""
        data = await request.json()
        mode = data.get("mode", "").lower()
        if mode == "decode":
            return await self._reconfigure_decode(data)
        if mode == "prefill":
            return await self._reconfigure_prefill()
        return _error(400, "Invalid mode. Use 'decode' or 'prefill'")

    async def _reconfigure_decode(self, data: Dict[str, Any]) -> "web.Response":
        path, size = data.get("path"), data.get("size")
        offset = data.get("offset", 0)
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        if not path or size is None:
            return _error(400, "Missing path or size for decode mode")
        async with self._state_lock:
            # make before break: the old segments serve until the new one is in
            previous = list(self.mounted_segment_ids)
            result = self.store.mount_segment(path, size, offset, protocol, location)
            ret = result["ret"]
            if ret != 0:
                if previous:
                    logging.warning("Reconfigure decode: mount of %s failed (ret=%s); keeping "
                                    "previous decode segments", path, ret)
                    return _error(500, f"Mount failed, ret={ret}; keeping previous decode "
                                  "segments", mode=self.current_mode)
                self.current_mode = "prefill"
                self.mounted_segment_ids.clear()
                self.last_mount_info.clear()
                return _error(500, f"Mount failed, ret={ret}; rolled back to prefill",
                              mode=self.current_mode)
            # one id per call: a batch answers only its first failure, and
            # only the ids that failed stay tracked for a later retry
            failed = [sid for sid in previous if self.store.unmount_segment([sid]) != 0]
            if failed:
                logging.warning("Reconfigure decode: new mount succeeded but unmount of "
                                "previous segments %s failed; keeping them tracked", failed)
            self.mounted_segment_ids = list(result["segment_ids"]) + failed
            self.current_mode = "decode"
            self.last_mount_info = {"path": path, "offset": offset, "size": size,
                                    "protocol": protocol, "location": location}
            return _success(mode=self.current_mode, segment_ids=self.mounted_segment_ids)

    async def _reconfigure_prefill(self) -> "web.Response":
        async with self._state_lock:
            if self.mounted_segment_ids:
                ret = self.store.unmount_segment(self.mounted_segment_ids)
                if ret != 0:
                    return _error(500, f"Unmount failed, ret={ret}")
                self.mounted_segment_ids.clear()
            self.current_mode = "prefill"
            self.last_mount_info.clear()
            return _success(mode=self.current_mode)

    @_catching("MOUNT_SHM")
    async def handle_mount_shm(self, request) -> "web.Response":
        """Mount ``/dev/shm/<name>`` (the mode is not touched)."""
        data = await request.json()
        path = _shm_name_to_path(data.get("name"))
        size = data.get("size")
        if not path or size is None:
            return _error(400, "Missing or invalid name or size")
        result = self.store.mount_segment(path, size, data.get("offset", 0),
                                          data.get("protocol", self.config.protocol),
                                          data.get("location", ""))
        if result["ret"] != 0:
            return _error(500, f"Mount failed, ret={result['ret']}")
        return _success(segment_ids=list(result["segment_ids"]))

    @_catching("UNMOUNT_SHM")
    async def handle_unmount_shm(self, request) -> "web.Response":
        """Unmount segments one by one; prefill once no decode one is left."""
        data = await request.json()
        ids = _segment_ids(data)
        if not ids:
            return _error(400, "Missing segment_ids")
        grace = data.get("grace_period_seconds", 0)
        failed = []
        async with self._state_lock:
            for sid in ids:
                if self.store.unmount_segment([sid], grace) != 0:
                    failed.append(sid)
                elif sid in self.mounted_segment_ids:
                    self.mounted_segment_ids.remove(sid)
            if not self.mounted_segment_ids:
                self.current_mode = "prefill"
        if failed:
            return _error(500, "Unmount failed for one or more segments",
                          failed_segment_ids=failed)
        return _success()

    @_catching("MOUNT")
    async def handle_mount(self, request) -> "web.Response":
        """Allocate ``size`` bytes (an int > 0) and mount them."""
        data = await request.json()
        size = data.get("size")
        if type(size) is not int or size <= 0:
            return _error(400, "Invalid size, must be a positive integer")
        result = self.store.allocate_and_mount_segment(
            size, data.get("protocol", self.config.protocol), data.get("location", ""))
        if result["ret"] != 0:
            return _error(500, f"Allocate and mount failed, ret={result['ret']}")
        return _success(segment_ids=list(result["segment_ids"]),
                        allocated_size=result["allocated_size"])

    @_catching("UNMOUNT")
    async def handle_unmount(self, request) -> "web.Response":
        """Unmount and free segments of /api/mount, in one call."""
        data = await request.json()
        ids = _segment_ids(data)
        if not ids:
            return _error(400, "Missing segment_ids")
        ret = self.store.unmount_and_free_segment(ids, data.get("grace_period_seconds", 0))
        if ret != 0:
            return _error(500, f"Unmount and free failed, ret={ret}")
        return _success()

    @_catching("UNMOUNT_LOCAL_DISK")
    async def handle_unmount_local_disk(self, request) -> "web.Response":
        """Take the SSD tier off the master and hold for the grace period
        (in a thread: the API keeps answering meanwhile).  A malformed body
        or grace is 400 before the store is touched."""
        try:
            data = await request.json()
        except ValueError:  # json.JSONDecodeError, and a body that is not text
            return _error(400, "Malformed JSON body")
        if not isinstance(data, dict):
            return _error(400, "Request body must be a JSON object")
        grace = data.get("grace_period_seconds", 0)
        if type(grace) is not int or not \
                0 <= grace <= _MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS:
            return _error(400, "Invalid grace_period_seconds, must be a non-negative integer "
                          f"no greater than {_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS}")
        ret = await asyncio.to_thread(self.store.unmount_local_disk_segment, grace)
        if ret != 0:
            return _error(500, f"Unmount local disk failed, ret={ret}")
        return _success()

    # ---- objects -------------------------------------------------------------------

    @_catching("PUT")
    async def handle_put(self, request) -> "web.Response":
        """Store ``value`` (a str, UTF-8 encoded) under ``key``."""
        data = await request.json()
        key, value = data.get("key"), data.get("value")
        if not key or value is None:
            return _error(400, "Missing key or value")
        if self.store.put(key, value.encode()) != 0:
            return _error(500, "PUT operation failed")
        return _success()

    @_catching("GET")
    async def handle_get(self, request) -> "web.Response":
        """The value's bytes; an empty answer is checked against existence,
        so an empty value and a failed read are told apart."""
        key = request.match_info["key"]
        missing = self._exist_error(self.store.is_exist(key))
        if missing is not None:
            return missing
        value = self.store.get(key)
        if value is None:
            return _error(500, "GET operation failed")
        if value == b"":
            missing = self._exist_error(self.store.is_exist(key))
            if missing is not None:
                return missing
        return web.Response(status=200, body=value, content_type="application/octet-stream")

    @staticmethod
    def _exist_error(exists: int) -> Optional["web.Response"]:
        if exists == 0:
            return _error(404, "Key not found")
        if exists < 0:
            return _error(500, "Exist check failed")
        return None

    @_catching("EXIST")
    async def handle_exist(self, request) -> "web.Response":
        exists = self.store.is_exist(request.match_info["key"])
        if exists < 0:
            return _error(500, "Exist check failed")
        return _json(200, {"exists": exists > 0})

    @_catching("REMOVE")
    async def handle_remove(self, request) -> "web.Response":
        if self.store.remove(request.match_info["key"]) != 0:
            return _error(500, "Remove operation failed")
        return _success()

    @_catching("REMOVE_ALL")
    async def handle_remove_all(self, request) -> "web.Response":  # noqa: ARG002
        ret = self.store.remove_all()
        if ret < 0:
            return _error(500, "RemoveAll operation failed")
        return _json(200, {"status": f"success removed {ret} keys"})


def parse_arguments(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """``--config``, ``-D/--define k=v`` (repeatable), ``--port`` (8080),
    ``--max-wait-time`` (60 s)."""
    parser = argparse.ArgumentParser(description="Mooncake Store Service with REST API")
    parser.add_argument("--config", type=str, required=False,
                        help="path to a Mooncake config file (JSON); default: the "
                        "environment (MOONCAKE_CONFIG_PATH, MOONCAKE_MASTER, ...)")
    parser.add_argument("-D", "--define", action="append", default=[],
                        help="override a configuration field, key=value "
                        "(e.g. -Dlocal_hostname=example.com)")
    parser.add_argument("--port", type=int, default=8080, required=False,
                        help="HTTP API port (default: 8080)")
    parser.add_argument("--max-wait-time", type=float, default=60, required=False,
                        help="seconds to keep retrying the store setup (default: 60)")
    return parser.parse_args(argv)


def _cli_config(defines: List[str]) -> Dict[str, str]:
    out = {}
    for item in defines:
        if "=" in item:
            key, value = item.split("=", 1)
            out[key] = value
        else:
            logging.warning("Ignoring invalid CLI config: %s", item)
    return out


async def main() -> None:
    """The service until SIGINT or SIGTERM.  Raises RuntimeError when the
    store or the HTTP server cannot be started (and no shutdown was asked
    for); the store is closed on every way out."""
    args = parse_arguments()
    _setup_logging()  # before the first message, which would configure it otherwise
    service = MooncakeStoreService(args.config, _cli_config(args.define))
    shutdown_event = asyncio.Event()
    _install_shutdown_signal_handlers(asyncio.get_running_loop(), shutdown_event)
    _unblock_shutdown_signals()
    try:
        if not await service.start_store_service(max_wait_time=args.max_wait_time,
                                                 shutdown_event=shutdown_event):
            if shutdown_event.is_set():
                return
            raise RuntimeError("Failed to start store service")
        _unblock_shutdown_signals()
        await asyncio.sleep(0)
        if shutdown_event.is_set():
            return
        if not await service.start_http_service(args.port):
            raise RuntimeError("Failed to start HTTP service")
        logging.info("Mooncake Store Service is running")
        await shutdown_event.wait()
    except KeyboardInterrupt:
        logging.info("Received keyboard interrupt, shutting down")
    except Exception as e:
        logging.error("Service error: %s", e)
        raise
    finally:
        await service.stop()


def sync_main() -> None:
    """The ``mc_store_rest_server`` command."""
    return asyncio.run(main())


if __name__ == "__main__":
    sync_main()

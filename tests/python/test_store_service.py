# SPDX-License-Identifier: Apache-2.0
"""mooncake.mooncake_store_service and its command mc_store_rest_server
(upstream's REST store service) against a real master.

* in-process (MooncakeStoreService on a loop thread, configured from a JSON
  file with cli_config overrides): every route with its success and error
  bodies and codes -- put/get/exist/remove/remove_all, mount/unmount,
  mount_shm/unmount_shm on a real /dev/shm file, reconfigure
  decode/prefill/invalid with make-before-break and rollback, and
  unmount_local_disk (bad JSON, non-object, bad grace, and success: the
  master forgets the SSD tier's disk replicas, the call holds for the
  grace while other requests are answered);
* the same routes when the master is gone: 500 with upstream's texts, and
  stop() logs the close's status;
* the real mc_store_rest_server process: configured from the environment
  and -D, SIGTERM exits 0 promptly with the store closed (the master counts
  one client less and its objects are gone), also during the setup
  retries; a master that never answers is exit 1 after --max-wait-time;
  ``python3 -m mooncake.mooncake_store_service`` is the same command;
* _shm_name_to_path, the retry loop and its shutdown event, _timed_handler's
  log line.
"""

import asyncio
import http.client
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from pathlib import Path

import pytest

from helpers import DaemonProc, MiB, Master, free_port, master_bin, port_accepts, wait_until

pytest.importorskip("aiohttp", reason="the REST service needs aiohttp (python3-aiohttp)")

from mooncake import mooncake_store_service as svcmod  # noqa: E402
from mooncake.mooncake_store_service import MooncakeStoreService, _shm_name_to_path  # noqa: E402
from mooncake.store import MooncakeDistributedStore  # noqa: E402

SHM_SIZE = 4 * MiB
GRACE_TEXT = ("Invalid grace_period_seconds, must be a non-negative integer no greater "
              "than 3600")


# ---- machinery -------------------------------------------------------------------------


class InProcess:
    """A MooncakeStoreService served from an event loop on its own thread."""

    def __init__(self, config_path, cli_config=None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.service = None
        try:
            self.service = MooncakeStoreService(str(config_path), cli_config)
            assert self.run(self.service.start_store_service(max_wait_time=20)), \
                "the store did not start"
            self.port = free_port()
            assert self.run(self.service.start_http_service(self.port))
        except BaseException:
            self.close()
            raise

    def run(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        try:
            if self.service is not None:
                self.run(self.service.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def call(port, method, path, body=None, raw=None, timeout=30):
    """(status, content type, decoded JSON or bytes) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        c.request(method, path, body=data,
                  headers={"Content-Type": "application/json"} if data is not None else {})
        r = c.getresponse()
        payload = r.read()
        ctype = r.getheader("Content-Type", "").split(";")[0]
        if ctype == "application/json":
            payload = json.loads(payload)
        return r.status, ctype, payload
    finally:
        c.close()


def api(port, method, path, body=None, raw=None):
    """(status, JSON body) of a request whose answer must be JSON."""
    st, ctype, payload = call(port, method, path, body, raw)
    assert ctype == "application/json", (method, path, st, ctype, payload)
    return st, payload


def write_config(path, master, **extra):
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "master_server_address": master.addr, "global_segment_size": "32mb",
           "local_buffer_size": "16mb", "protocol": "tcp"}
    cfg.update(extra)
    path.write_text(json.dumps(cfg))
    return path


def nowhere():
    """A master address where nothing listens."""
    return types.SimpleNamespace(addr=f"127.0.0.1:{free_port()}")


def never(cond, seconds, what):
    """Fail if ``cond()`` turns true within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not cond(), what
        time.sleep(0.05)


def non_memory(store, key):
    """The replicas of key other than memory ones (the SSD tier's)."""
    return [d for d in store.get_replica_desc(key) if not d.is_memory_replica()]


@pytest.fixture(scope="module")
def omaster():
    """A master that takes disk replicas (--enable_offload)."""
    m = Master(extra_args=["--enable_offload"])
    try:
        yield m
        assert m.alive(), "mooncake_master died:\n" + m.log_text()
    finally:
        m.stop()


@pytest.fixture(scope="module")
def svc(omaster, tmp_path_factory):
    """The service in-process, with an SSD tier, on the module's master."""
    d = tmp_path_factory.mktemp("rest")
    (d / "ssd").mkdir()
    cfg = write_config(d / "config.json", omaster, enable_ssd_offload=True,
                       ssd_offload_path=str(d / "ssd"), global_segment_size="16mb")
    # -D-style overrides: set as given (strings), unknown fields ignored
    s = InProcess(cfg, {"global_segment_size": "32mb", "no_such_field": "1"})
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def reader(omaster):
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", omaster.addr) == 0
    try:
        yield st
    finally:
        st.close()


@pytest.fixture
def shm_file():
    """make(): a fresh SHM_SIZE-byte file in /dev/shm; its POSIX name."""
    names = []

    def make():
        name = f"mc-rest-{uuid.uuid4().hex[:12]}"
        fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, SHM_SIZE)
        finally:
            os.close(fd)
        names.append(name)
        return name

    try:
        yield make
    finally:
        for name in names:
            try:
                os.unlink(f"/dev/shm/{name}")
            except OSError:
                pass


# ---- module helpers ----------------------------------------------------------------------


def test_module_names():
    from aiohttp import web
    assert svcmod.web is web
    assert svcmod.MooncakeDistributedStore is MooncakeDistributedStore
    assert svcmod._MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS == 3600
    for name in ("_timed_handler", "_install_shutdown_signal_handlers",
                 "_unblock_shutdown_signals", "parse_arguments", "main", "sync_main"):
        assert callable(getattr(svcmod, name)), name
    assert asyncio.iscoroutinefunction(svcmod.main)


@pytest.mark.parametrize("name, path", [
    ("seg", "/dev/shm/seg"), ("/seg", "/dev/shm/seg"), ("a.b-c_d", "/dev/shm/a.b-c_d"),
    ("/..x", "/dev/shm/..x"),
    ("", None), ("/", None), ("//seg", None), ("a/b", None), ("/a/b", None),
    (".", None), ("..", None), ("/.", None), ("/..", None),
    (None, None), (5, None), (b"seg", None), (["seg"], None),
])
def test_shm_name_to_path(name, path):
    assert _shm_name_to_path(name) == path


def test_timed_handler_logs_the_duration(caplog):
    async def handler(request):
        assert request == "req"
        return "answer"

    with caplog.at_level(logging.INFO):
        assert asyncio.run(svcmod._timed_handler("SOME_OP", handler)("req")) == "answer"
    assert re.search(r"SOME_OP operation completed in \d+\.\d\d ms", caplog.text), caplog.text


def test_configuration_file_overrides_and_state(svc, omaster):
    s = svc.service
    # cli_config: an existing field is set as given, an unknown one ignored
    assert s.config.global_segment_size == "32mb"
    assert not hasattr(s.config, "no_such_field")
    assert s.config.master_server_address == omaster.addr
    assert s.config.enable_ssd_offload is True
    assert isinstance(s.store, MooncakeDistributedStore) and s.store.get_hostname()
    assert isinstance(s._state_lock, asyncio.Lock)


def test_configuration_from_environment_and_failure(monkeypatch, omaster, caplog):
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.setenv("MOONCAKE_MASTER", omaster.addr)
    monkeypatch.setenv("MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1")
    s = MooncakeStoreService(None, {"tenant_id": "t1"})
    assert (s.config.master_server_address, s.config.tenant_id) == (omaster.addr, "t1")
    assert (s.store, s.current_mode, s.mounted_segment_ids, s.last_mount_info) == \
        (None, "prefill", [], {})
    monkeypatch.delenv("MOONCAKE_MASTER")
    with caplog.at_level(logging.ERROR), pytest.raises(ValueError):
        MooncakeStoreService()
    assert "Configuration load failed" in caplog.text


def test_startup_retries_then_gives_up_or_is_cancelled(tmp_path, caplog):
    s = MooncakeStoreService(str(write_config(tmp_path / "c.json", nowhere())))

    async def scenario():
        t0 = time.monotonic()
        assert await s.start_store_service(max_wait_time=1.5) is False
        took = time.monotonic() - t0
        ev = asyncio.Event()
        ev.set()
        t1 = time.monotonic()
        assert await s.start_store_service(max_wait_time=30, shutdown_event=ev) is False
        cancelled = time.monotonic() - t1
        # set while it waits between attempts: over at once
        ev2 = asyncio.Event()
        asyncio.get_running_loop().call_later(0.3, ev2.set)
        t2 = time.monotonic()
        assert await s.start_store_service(max_wait_time=30, shutdown_event=ev2) is False
        return took, cancelled, time.monotonic() - t2

    with caplog.at_level(logging.INFO):
        took, cancelled, between = asyncio.run(scenario())
    assert 1.0 <= took < 10, took
    assert "Store startup failed (attempt 1)" in caplog.text
    assert "Store startup failed (attempt 2)" in caplog.text
    assert "exceeded max wait time" in caplog.text
    assert cancelled < 0.5 and between < 5, (cancelled, between)
    assert "Store startup cancelled by shutdown request" in caplog.text
    asyncio.run(s.stop())
    assert s.store is None


# ---- objects -------------------------------------------------------------------------------


def test_put_get_exist_remove(svc, reader, caplog):
    p = svc.port
    key = f"obj-{uuid.uuid4().hex}"
    with caplog.at_level(logging.INFO):
        assert api(p, "PUT", "/api/put", {"key": key, "value": "héllo"}) == \
            (200, {"status": "success"})
    assert re.search(r"PUT operation completed in \d+\.\d\d ms", caplog.text)
    assert reader.get(key) == "héllo".encode()
    assert call(p, "GET", f"/api/get/{key}") == (200, "application/octet-stream",
                                                 "héllo".encode())
    assert api(p, "GET", f"/api/exist/{key}") == (200, {"exists": True})
    assert api(p, "GET", "/api/exist/nope-" + key) == (200, {"exists": False})
    assert api(p, "GET", "/api/get/nope-" + key) == (404, {"error": "Key not found"})
    # a key the store refuses (too long): the existence check fails
    long_key = "k" * 5000
    assert api(p, "GET", f"/api/get/{long_key}") == (500, {"error": "Exist check failed"})
    assert api(p, "GET", f"/api/exist/{long_key}") == (500, {"error": "Exist check failed"})
    for bad in ({"value": "v"}, {"key": "", "value": "v"}, {"key": key}, {"key": key,
                                                                             "value": None}):
        assert api(p, "PUT", "/api/put", bad) == (400, {"error": "Missing key or value"}), bad
    st, body = api(p, "PUT", "/api/put", {"key": key, "value": 5})
    assert st == 500 and "encode" in body["error"], body
    st, body = api(p, "PUT", "/api/put", raw="{not json")
    assert st == 500 and body["error"], body
    assert api(p, "PUT", "/api/put", {"key": long_key, "value": "v"}) == \
        (500, {"error": "PUT operation failed"})
    # the reads above leased it for a moment: removed once the lease ends
    wait_until(lambda: api(p, "DELETE", f"/api/remove/{key}") == (200, {"status": "success"}),
               10.0, "the remove to succeed")
    assert reader.is_exist(key) == 0
    assert api(p, "DELETE", f"/api/remove/{key}") == (500, {"error": "Remove operation failed"})
    # bodies up to 100 MiB (aiohttp's default would refuse this one)
    big = f"big-{uuid.uuid4().hex}"
    assert api(p, "PUT", "/api/put", {"key": big, "value": "b" * (3 * MiB)})[0] == 200
    assert call(p, "GET", f"/api/get/{big}")[2] == b"b" * (3 * MiB)
    assert call(p, "GET", "/api/nothing")[0] == 404
    assert call(p, "POST", "/api/put", {"key": "k", "value": "v"})[0] == 405


def test_remove_all_counts(svc, reader, omaster):
    p = svc.port
    keys = [f"all-{uuid.uuid4().hex}" for _ in range(3)]
    # start from an empty store (earlier reads may still lease some keys)
    wait_until(lambda: api(p, "DELETE", "/api/remove_all")[0] == 200 and
               omaster.metric("master_key_count") == 0, 10.0, "the store to be empty",
               interval=0.2)
    for k in keys:
        assert api(p, "PUT", "/api/put", {"key": k, "value": "x" * 100})[0] == 200
    # the offloader leases each key while it copies it, and remove_all
    # skips leased objects: the counts of the calls add up to 3 (an
    # is_exist between them would lease them again)
    removed = []

    def remove_all():
        st, body = api(p, "DELETE", "/api/remove_all")
        m = re.fullmatch(r"success removed (\d+) keys", body.get("status", ""))
        assert st == 200 and m, (st, body)
        removed.append(int(m.group(1)))
        return sum(removed) >= 3

    wait_until(remove_all, 10.0, "remove_all to take every key", interval=0.2)
    assert sum(removed) == 3, removed
    assert api(p, "DELETE", "/api/remove_all") == (200, {"status": "success removed 0 keys"})


class _Wrapped:
    """The service's real store, with get() answering as a store whose read
    failed (None) or whose object went between is_exist and get (b"")."""

    def __init__(self, store, value):
        self._store, self._value = store, value

    def get(self, key):
        if self._value == b"":
            self._store.remove(key, True)  # gone before the second existence check
        return self._value

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.mark.parametrize("value, expected", [
    (None, (500, {"error": "GET operation failed"})),
    (b"", (404, {"error": "Key not found"})),
])
def test_get_failed_or_vanished_read(svc, value, expected):
    key = f"gone-{uuid.uuid4().hex}"
    assert api(svc.port, "PUT", "/api/put", {"key": key, "value": "v"})[0] == 200
    real = svc.service.store
    svc.service.store = _Wrapped(real, value)
    try:
        assert api(svc.port, "GET", f"/api/get/{key}") == expected
    finally:
        svc.service.store = real
    real.remove(key, True)


# ---- segments ------------------------------------------------------------------------------


def test_mount_and_unmount(svc):
    p = svc.port
    for bad in (0, -1, "4194304", 1.5, True, None):
        assert api(p, "POST", "/api/mount", {"size": bad}) == \
            (400, {"error": "Invalid size, must be a positive integer"}), bad
    st, body = api(p, "POST", "/api/mount", {"size": 4 * MiB, "location": ""})
    assert st == 200 and body["status"] == "success", body
    assert body["allocated_size"] >= 4 * MiB and len(body["segment_ids"]) == 1
    sid = body["segment_ids"][0]
    assert api(p, "POST", "/api/unmount", {}) == (400, {"error": "Missing segment_ids"})
    assert api(p, "POST", "/api/unmount", {"segment_ids": []}) == \
        (400, {"error": "Missing segment_ids"})
    assert api(p, "POST", "/api/unmount", {"segment_ids": sid}) == (200, {"status": "success"})
    assert api(p, "POST", "/api/unmount", {"segment_ids": [sid]}) == \
        (500, {"error": "Unmount and free failed, ret=-101"})
    st, body = api(p, "POST", "/api/mount", {"size": 4 * MiB, "protocol": "nosuch"})
    assert st == 500 and body["error"].startswith("Allocate and mount failed, ret=-"), body


def test_mount_shm_and_unmount_shm(svc, shm_file):
    p, s = svc.port, svc.service
    name = shm_file()
    for bad in ({"size": SHM_SIZE}, {"name": "", "size": SHM_SIZE}, {"name": name},
                {"name": "a/b", "size": SHM_SIZE}, {"name": "..", "size": SHM_SIZE},
                {"name": 7, "size": SHM_SIZE}):
        assert api(p, "POST", "/api/mount_shm", bad) == \
            (400, {"error": "Missing or invalid name or size"}), bad
    st, body = api(p, "POST", "/api/mount_shm", {"name": "nosuch-" + name, "size": SHM_SIZE})
    assert st == 500 and re.fullmatch(r"Mount failed, ret=-\d+", body["error"]), body
    st, body = api(p, "POST", "/api/mount_shm", {"name": "/" + name, "size": SHM_SIZE})
    assert st == 200 and body["status"] == "success" and len(body["segment_ids"]) == 1, body
    sid = body["segment_ids"][0]
    assert s.current_mode == "prefill" and s.mounted_segment_ids == []  # mode untouched
    # a shm segment is no /api/mount segment: unmount-and-free refuses it
    assert api(p, "POST", "/api/unmount", {"segment_ids": [sid]}) == \
        (500, {"error": "Unmount and free failed, ret=-600"})
    assert api(p, "POST", "/api/unmount_shm", {"segment_ids": []}) == \
        (400, {"error": "Missing segment_ids"})
    assert api(p, "POST", "/api/unmount_shm", {"segment_ids": sid,
                                               "grace_period_seconds": 0}) == \
        (200, {"status": "success"})
    assert api(p, "POST", "/api/unmount_shm", {"segment_ids": [sid, "not-an-id"]}) == \
        (500, {"error": "Unmount failed for one or more segments",
               "failed_segment_ids": [sid, "not-an-id"]})


def test_reconfigure(svc, shm_file):
    p, s = svc.port, svc.service
    first, second = shm_file(), shm_file()
    for bad in ({"mode": "neither"}, {}, {"mode": ""}):
        assert api(p, "POST", "/api/reconfigure", bad) == \
            (400, {"error": "Invalid mode. Use 'decode' or 'prefill'"}), bad
    for bad in ({"mode": "decode", "size": SHM_SIZE}, {"mode": "decode", "path": "/x"}):
        assert api(p, "POST", "/api/reconfigure", bad) == \
            (400, {"error": "Missing path or size for decode mode"}), bad
    # no decode segment yet: a failed mount rolls back to prefill
    st, body = api(p, "POST", "/api/reconfigure",
                   {"mode": "decode", "path": "/dev/shm/nosuch-" + first, "size": SHM_SIZE})
    assert st == 500 and body["mode"] == "prefill", body
    assert re.fullmatch(r"Mount failed, ret=-\d+; rolled back to prefill", body["error"]), body
    # DECODE (upper case too), then a make-before-break remount
    st, body = api(p, "POST", "/api/reconfigure",
                   {"mode": "DECODE", "path": f"/dev/shm/{first}", "size": SHM_SIZE})
    assert st == 200 and body["status"] == "success" and body["mode"] == "decode", body
    old = body["segment_ids"]
    assert len(old) == 1 and s.mounted_segment_ids == old and s.current_mode == "decode"
    assert s.last_mount_info == {"path": f"/dev/shm/{first}", "offset": 0, "size": SHM_SIZE,
                                 "protocol": "tcp", "location": ""}
    st, body = api(p, "POST", "/api/reconfigure",
                   {"mode": "decode", "path": f"/dev/shm/{second}", "size": SHM_SIZE})
    assert st == 200 and body["segment_ids"] != old and len(body["segment_ids"]) == 1
    new = body["segment_ids"]
    # the old segment was unmounted: a second unmount of it fails
    assert s.store.unmount_segment(old) == -101
    # a failed remount keeps the segments that serve
    st, body = api(p, "POST", "/api/reconfigure",
                   {"mode": "decode", "path": "/dev/shm/nosuch-" + first, "size": SHM_SIZE})
    assert st == 500 and body["mode"] == "decode", body
    assert re.fullmatch(r"Mount failed, ret=-\d+; keeping previous decode segments",
                        body["error"]), body
    assert s.mounted_segment_ids == new and s.current_mode == "decode"
    # an old id that does not unmount stays tracked after a remount
    s.mounted_segment_ids.append("not-an-id")
    st, body = api(p, "POST", "/api/reconfigure",
                   {"mode": "decode", "path": f"/dev/shm/{first}", "size": SHM_SIZE})
    assert st == 200 and body["segment_ids"][1:] == ["not-an-id"], body
    assert s.store.unmount_segment(new) == -101
    # prefill: one unmount of every id; a failure leaves the state alone
    # (the bad id first: the store stops at it, so nothing is unmounted)
    s.mounted_segment_ids.sort(key=lambda sid: sid != "not-an-id")
    st, body = api(p, "POST", "/api/reconfigure", {"mode": "prefill"})
    assert st == 500 and re.fullmatch(r"Unmount failed, ret=-\d+", body["error"]), body
    assert s.current_mode == "decode" and "not-an-id" in s.mounted_segment_ids
    s.mounted_segment_ids.remove("not-an-id")
    current = list(s.mounted_segment_ids)
    assert api(p, "POST", "/api/reconfigure", {"mode": "Prefill"}) == \
        (200, {"status": "success", "mode": "prefill"})
    assert (s.current_mode, s.mounted_segment_ids, s.last_mount_info) == ("prefill", [], {})
    assert s.store.unmount_segment(current) == -101
    # unmount_shm of the last decode segment switches to prefill
    st, body = api(p, "POST", "/api/reconfigure",
                   {"mode": "decode", "path": f"/dev/shm/{second}", "size": SHM_SIZE})
    assert st == 200
    assert api(p, "POST", "/api/unmount_shm", {"segment_ids": body["segment_ids"]}) == \
        (200, {"status": "success"})
    assert (s.current_mode, s.mounted_segment_ids) == ("prefill", [])


# ---- the SSD tier --------------------------------------------------------------------------


def test_unmount_local_disk_validation(svc):
    p = svc.port
    assert api(p, "POST", "/api/unmount_local_disk", raw="{oops") == \
        (400, {"error": "Malformed JSON body"})
    assert api(p, "POST", "/api/unmount_local_disk", raw="") == \
        (400, {"error": "Malformed JSON body"})
    for raw in ("[]", "[1]", '"x"', "3", "null"):
        assert api(p, "POST", "/api/unmount_local_disk", raw=raw) == \
            (400, {"error": "Request body must be a JSON object"}), raw
    for grace in (-1, 3601, "5", 1.5, True, None, [1]):
        assert api(p, "POST", "/api/unmount_local_disk", {"grace_period_seconds": grace}) == \
            (400, {"error": GRACE_TEXT}), grace
    # nothing was touched: the tier still offloads
    assert svc.service.store.offload_stats() != {}


def test_unmount_local_disk_drops_disk_replicas_and_holds(svc, reader):
    """Last test of the module's service: it turns its SSD tier off."""
    p, store = svc.port, svc.service.store
    keys = [f"ssd-{uuid.uuid4().hex}" for _ in range(5)]
    for k in keys:
        assert api(p, "PUT", "/api/put", {"key": k, "value": k * 50})[0] == 200
    wait_until(lambda: all(non_memory(reader, k) for k in keys), 20.0,
               "the keys to reach the SSD tier")
    result = {}

    def unmount():
        t0 = time.monotonic()
        result["answer"] = api(p, "POST", "/api/unmount_local_disk",
                               {"grace_period_seconds": 2})
        result["took"] = time.monotonic() - t0

    t = threading.Thread(target=unmount)
    t.start()
    try:
        # deregistered at once, while the call still holds
        wait_until(lambda: not any(non_memory(reader, k) for k in keys), 1.5,
                   "the master to forget the disk replicas")
        t0 = time.monotonic()
        assert api(p, "GET", f"/api/exist/{keys[0]}") == (200, {"exists": True})
        assert time.monotonic() - t0 < 1.0, "the API did not answer during the grace period"
        assert "answer" not in result, "the grace period was not held"
    finally:
        t.join(30)
    assert result["answer"] == (200, {"status": "success"})
    assert 1.9 <= result["took"] < 10, result["took"]
    # memory replicas stay; nothing is offloaded any more
    assert [reader.get(k) for k in keys] == [(k * 50).encode() for k in keys]
    offloaded = store.offload_stats()["offloaded_keys"]
    late = f"late-{uuid.uuid4().hex}"
    assert api(p, "PUT", "/api/put", {"key": late, "value": "x"})[0] == 200
    # a second call answers at once (the tier is off already)
    assert api(p, "POST", "/api/unmount_local_disk", {}) == (200, {"status": "success"})
    never(lambda: non_memory(reader, late), 1.5, "a key put after the unmount was offloaded")
    assert store.offload_stats()["offloaded_keys"] == offloaded


def test_store_unmount_local_disk_segment(omaster, tmp_path):
    """The store call behind the route: arguments, no tier, and a hold that
    ends when the store is closed."""
    plain = MooncakeDistributedStore()
    assert plain.unmount_local_disk_segment(0) == -1010  # not set up
    assert plain.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "",
                       omaster.addr) == 0
    try:
        t0 = time.monotonic()
        assert plain.unmount_local_disk_segment(30) == 0  # no SSD tier: at once
        assert time.monotonic() - t0 < 1
        assert plain.unmount_local_disk_segment(-1) == -600
        for bad in (1.5, "1", None):
            with pytest.raises(TypeError):
                plain.unmount_local_disk_segment(bad)
    finally:
        plain.close()
    st = MooncakeDistributedStore()
    assert st.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 16 * MiB, "tcp", "", omaster.addr,
                    enable_ssd_offload=True, ssd_offload_path=str(tmp_path)) == 0
    try:
        assert st.put("hold-key", b"h" * 1000) == 0
        wait_until(lambda: st.offload_stats()["offloaded_keys"] == 1, 20.0, "the offload")
        out = {}
        t = threading.Thread(target=lambda: out.update(rc=st.unmount_local_disk_segment(600)))
        t.start()
        wait_until(lambda: not non_memory(st, "hold-key"), 10.0, "the deregistration")
        assert t.is_alive(), "the grace period was not held"
        t0 = time.monotonic()
        assert st.close() == 0
        t.join(10)
        assert not t.is_alive() and out["rc"] == 0
        assert time.monotonic() - t0 < 3, "close did not end the hold"
    finally:
        st.close()


def test_master_gone(tmp_path, caplog):
    """Every store call fails: upstream's 500 texts; stop() logs the close's
    status, and the tier's deregistration reports the failure."""
    m = Master(extra_args=["--enable_offload"])
    s = None
    try:
        (tmp_path / "ssd").mkdir()
        s = InProcess(write_config(tmp_path / "c.json", m, enable_ssd_offload=True,
                                   ssd_offload_path=str(tmp_path / "ssd")))
        p = s.port
        assert api(p, "PUT", "/api/put", {"key": "k1", "value": "v"})[0] == 200
        wait_until(lambda: s.service.store.offload_stats()["offloaded_keys"] == 1, 20.0,
                   "k1 to be offloaded")
        m.kill()
        assert api(p, "GET", "/api/exist/k1") == (500, {"error": "Exist check failed"})
        assert api(p, "GET", "/api/get/k1") == (500, {"error": "Exist check failed"})
        assert api(p, "PUT", "/api/put", {"key": "k2", "value": "v"}) == \
            (500, {"error": "PUT operation failed"})
        assert api(p, "DELETE", "/api/remove/k1") == (500, {"error": "Remove operation failed"})
        assert api(p, "DELETE", "/api/remove_all") == \
            (500, {"error": "RemoveAll operation failed"})
        st, body = api(p, "POST", "/api/unmount_local_disk", {"grace_period_seconds": 0})
        assert st == 500 and re.fullmatch(r"Unmount local disk failed, ret=-\d+",
                                          body["error"]), body
        with caplog.at_level(logging.INFO):
            s.run(s.service.stop())
            s.run(s.service.stop())  # a second stop does nothing
        assert s.service.store is None
        assert not port_accepts(p)
        assert caplog.text.count("Mooncake service close returned") + \
            caplog.text.count("Mooncake service stopped") == 1, caplog.text
    finally:
        if s is not None:
            s.close()
        m.stop()


# ---- the command ----------------------------------------------------------------------------


def server_bin():
    path = Path(master_bin()).with_name("mc_store_rest_server")
    assert os.access(path, os.X_OK), f"{path} is not built"
    return str(path)


class RestServer(DaemonProc):
    """mc_store_rest_server (or another argv) with its own environment."""

    def __init__(self, argv, env, wait_listen=True):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="mc-rest-", suffix=".log", delete=False)
        full = dict(os.environ, **env)
        full.pop("MOONCAKE_CONFIG_PATH", None)  # the environment's fields, not a file
        self.proc = subprocess.Popen(argv + ["--port", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=full)
        if wait_listen:
            self._ready(lambda: port_accepts(self.port), 30.0, "the REST API to listen")

    def wait_log(self, text, timeout=20.0):
        self._ready(lambda: text in self.log_text(), timeout, repr(text))


def env_for(master):
    return {"MOONCAKE_MASTER": master.addr, "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.1",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": "16mb", "MOONCAKE_LOCAL_BUFFER_SIZE": "16mb"}


@pytest.mark.parametrize("how", ["command", "python-m"])
def test_process_serves_and_sigterm_closes_the_store(how):
    m = Master()
    srv = None
    try:
        argv = [server_bin()] if how == "command" else \
            [sys.executable, "-m", "mooncake.mooncake_store_service"]
        srv = RestServer(argv + ["-Dglobal_segment_size=32mb", "-Dnot_a_pair"], env_for(m))
        assert m.metric("master_active_clients") == 1
        assert m.metric("master_total_capacity_bytes") == 32 * MiB  # -D over the environment
        assert api(srv.port, "PUT", "/api/put", {"key": "proc-key", "value": "pv"})[0] == 200
        assert call(srv.port, "GET", "/api/get/proc-key")[2] == b"pv"
        rd = MooncakeDistributedStore()
        assert rd.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", m.addr) == 0
        try:
            assert rd.is_exist("proc-key") == 1
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            assert srv.proc.wait(timeout=10) == 0, srv.log_text()
            assert time.monotonic() - t0 < 5, "SIGTERM took too long"
            log = srv.log_text()
            assert "Ignoring invalid CLI config: not_a_pair" in log
            assert "Received signal SIGTERM" in log and "Mooncake service stopped" in log, log
            # the store closed: its client and the object in its segment are gone
            wait_until(lambda: m.metric("master_active_clients") == 1, 10.0,
                       "the master to count one client (the reader)")
            assert rd.is_exist("proc-key") == 0
        finally:
            rd.close()
    finally:
        if srv is not None:
            srv.stop()
        m.stop()


def test_process_sigterm_during_startup_retries():
    srv = RestServer([server_bin(), "--max-wait-time", "60"], env_for(nowhere()),
                     wait_listen=False)
    try:
        srv.wait_log("Store startup failed (attempt 1)")
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=10) == 0, srv.log_text()
        assert time.monotonic() - t0 < 5
        assert "Store startup cancelled by shutdown request" in srv.log_text()
        assert "Failed to start store service" not in srv.log_text()
    finally:
        srv.stop()


def test_process_gives_up_after_max_wait_time():
    srv = RestServer([server_bin(), "--max-wait-time", "1.5"], env_for(nowhere()),
                     wait_listen=False)
    try:
        assert srv.proc.wait(timeout=30) == 1, srv.log_text()
        log = srv.log_text()
        assert "Store startup failed (attempt 2)" in log
        assert "RuntimeError: Failed to start store service" in log, log
        assert not port_accepts(srv.port)
    finally:
        srv.stop()


def test_command_line():
    out = subprocess.run([server_bin(), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    for flag in ("--config", "-D", "--define", "--port", "--max-wait-time"):
        assert flag in out.stdout, flag
    a = svcmod.parse_arguments([])
    assert (a.config, a.define, a.port, a.max_wait_time) == (None, [], 8080, 60)
    a = svcmod.parse_arguments(["-Da=1", "--define", "b=2=3", "--port", "9", "--config", "f"])
    assert (a.define, a.port, a.config) == (["a=1", "b=2=3"], 9, "f")
    assert svcmod._cli_config(["a=1", "b=2=3", "junk"]) == {"a": "1", "b": "2=3"}
    for bad in (["--port", "x"], ["--bogus"], ["--max-wait-time"]):
        r = subprocess.run([server_bin()] + bad, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (bad, r.returncode, r.stderr)

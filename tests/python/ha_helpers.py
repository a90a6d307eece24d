# SPDX-License-Identifier: Apache-2.0
"""Real etcd processes and HA masters for tests/python/test_ha.py and
bench/failover_bench.py.

``EtcdCluster(n)`` starts n etcd members on free loopback ports, each with
its own temporary data directory, and waits until the cluster answers a
write; ``stop()`` kills every member and removes the directories.  The
masters are ordinary ``Master`` processes with ``--enable_ha``.  Every wait
polls with a deadline.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import List, Optional, Tuple

import pytest

from helpers import ClientProc, MiB, Master, free_port, wait_until

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
LEADER_KEY = "mooncake-store/mooncake_cluster/master_view"


def have_etcd() -> bool:
    return os.access(ETCD, os.X_OK)


def http_text(url: str, timeout: float = 2.0) -> Optional[str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except (OSError, urllib.error.URLError):
        return None


class EtcdCluster:
    """n etcd members on loopback (n = 1 is a single node)."""

    def __init__(self, n: int = 1) -> None:
        self.dir = tempfile.mkdtemp(prefix="mc-etcd-")
        self.client_ports = [free_port() for _ in range(n)]
        self.peer_ports = [free_port() for _ in range(n)]
        self.procs: List[Optional[subprocess.Popen]] = []
        self.logs = []
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(self.peer_ports))
        try:
            for i in range(n):
                log = open(os.path.join(self.dir, f"m{i}.log"), "wb")
                self.logs.append(log)
                self.procs.append(subprocess.Popen(
                    [ETCD, "--name", f"m{i}", "--data-dir", os.path.join(self.dir, f"m{i}"),
                     "--listen-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                     "--advertise-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                     "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                     "--initial-cluster", initial, "--initial-cluster-state", "new",
                     "--initial-cluster-token", os.path.basename(self.dir)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
            wait_until(lambda: self.put("mc-test/ready", "1"), 30.0,
                       "the etcd cluster to accept a write")
        except BaseException:
            self.stop()
            raise

    @property
    def endpoints(self) -> str:
        """host:port;host:port, the --etcd_endpoints form."""
        return ";".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def _post(self, path: str, body: dict) -> Optional[dict]:
        for i, port in enumerate(self.client_ports):
            if self.procs[i] is None:
                continue
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         data=json.dumps(body).encode(), method="POST")
            try:
                with urllib.request.urlopen(req, timeout=2.0) as r:
                    return json.loads(r.read())
            except (OSError, urllib.error.URLError, ValueError):
                continue
        return None

    def put(self, key: str, value: str) -> bool:
        return self._post("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                         "value": base64.b64encode(value.encode()).decode()}) \
            is not None

    def get(self, key: str) -> Optional[str]:
        r = self._post("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
        if not r or not r.get("kvs"):
            return None
        return base64.b64decode(r["kvs"][0].get("value", "")).decode()

    def put_bytes(self, key: str, value: bytes) -> bool:
        return self._post("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                         "value": base64.b64encode(value).decode()}) \
            is not None

    def range_prefix(self, prefix: str) -> List[Tuple[str, bytes]]:
        """Every (key, raw value) whose key starts with ``prefix``, in key order."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self._post("/v3/kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                        "range_end": base64.b64encode(end.encode()).decode()})
        if r is None:
            raise RuntimeError("etcd did not answer a range request")
        return [(base64.b64decode(kv["key"]).decode(), base64.b64decode(kv.get("value", "")))
                for kv in r.get("kvs", [])]

    def range_revisions(self, prefix: str) -> List[Tuple[str, int]]:
        """(key, mod_revision) of every key that starts with ``prefix``, in key
        order: keys written by one transaction share their mod_revision."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self._post("/v3/kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                        "range_end": base64.b64encode(end.encode()).decode(),
                                        "keys_only": True})
        if r is None:
            raise RuntimeError("etcd did not answer a range request")
        return [(base64.b64decode(kv["key"]).decode(), int(kv["mod_revision"]))
                for kv in r.get("kvs", [])]

    def kill(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        self.procs[i] = None

    def log_text(self) -> str:
        out = []
        for i in range(len(self.logs)):
            try:
                with open(os.path.join(self.dir, f"m{i}.log"), errors="replace") as f:
                    out.append(f.read()[-2000:])
            except OSError:
                pass
        return "\n".join(out)

    def stop(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)
        for log in self.logs:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class HaMaster(Master):
    """A mooncake_master campaigning in ``etcd``."""

    def __init__(self, etcd: EtcdCluster, ttl_s: int = 2,
                 extra_args: Optional[List[str]] = None, **kw) -> None:
        super().__init__(extra_args=["--enable_ha=true", f"--etcd_endpoints={etcd.endpoints}",
                                     f"--ha_lease_ttl_sec={ttl_s}"] + list(extra_args or []),
                         **kw)

    def admin(self, path: str) -> Optional[str]:
        return http_text(f"http://127.0.0.1:{self.metrics_port}{path}")

    def role(self) -> Optional[str]:
        return self.admin("/role") if self.alive() else None

    def metric(self, name: str) -> Optional[float]:
        text = self.admin("/metrics") or ""
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)


def wait_leader(masters: List[HaMaster], timeout: float) -> HaMaster:
    """The one master that says "leader" (and is serving), within ``timeout`` s."""
    def one():
        leaders = [m for m in masters if m.role() == "leader" and
                   m.admin("/ha_status") == "serving"]
        return leaders[0] if len(leaders) == 1 else None
    return wait_until(one, timeout, "exactly one serving leader", interval=0.05)


def wait_remounted(master: HaMaster, n: int, timeout: float = 10.0) -> None:
    """Every one of ``n`` clients' segments serves again on ``master``, a
    new leader.  A segment restored from the log serves nothing until its
    owner remounts it (a get of a key held only there is answered
    OBJECT_NOT_FOUND meanwhile), and with several clients a key of one may
    live on another's segment: read back after this, not after one
    client's own key reads."""
    def back():
        segs = json.loads(master.admin("/get_all_segments") or "[]")
        return len(segs) == n and all(s["status"] == "OK" for s in segs)
    wait_until(back, timeout, f"the {n} clients to remount their segments", interval=0.05)


def leader_view(m: Master, leader: Master, timeout: float = 5.0) -> str:
    """``m``'s /leader once it names ``leader``: a standby learns the
    leader from its next read of the record (every 200 ms)."""
    want = f'"leader_address":"{leader.addr}"'

    def named():
        got = m.admin("/leader") or ""
        return got if want in got else None
    return wait_until(named, timeout, f"/leader of {m.addr} to name {leader.addr}")


def stop_pinned_leader(masters: List[HaMaster], cleanup: list):
    """Two HA masters: a client pinned to the leader's address (it does not
    follow) puts k0; the leader is SIGSTOPped until the other takes over,
    then woken, and the pinned client's put of k1 must be refused (the
    lease deadline passed).  Returns (old leader, new leader, pinned)."""
    old = wait_leader(masters, 10.0)
    other = next(m for m in masters if m is not old)
    pinned = ClientProc("pinned")
    cleanup.append(pinned)
    r = pinned.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp", "",
                                   old.addr])
    assert r["rc"] == 0, pinned.log_text()
    assert pinned.call("put", key="k0", hex="00" * 64)["rc"] == 0
    old.pause()
    try:
        wait_until(lambda: other.role() == "leader", 10.0, "the standby to take over")
    finally:
        old.resume()
    # the very first request after waking is refused
    rc = pinned.call("put", key="k1", hex="11" * 64)["rc"]
    assert rc != 0, "a master woken past its lease accepted a write"
    return old, other, pinned


def stop_all(masters: List[Master]) -> None:
    for m in masters:
        try:
            if m.alive():
                os.kill(m.proc.pid, signal.SIGCONT)  # a paused one cannot stop
        except OSError:
            pass
        m.stop()


@pytest.fixture
def etcd():
    """A one-member etcd, stopped at teardown."""
    e = EtcdCluster(1)
    try:
        yield e
    finally:
        e.stop()


@pytest.fixture
def cleanup():
    """Things to stop at teardown, in reverse order (a list: stop_all)."""
    items = []
    yield items
    for it in reversed(items):
        if isinstance(it, list):
            stop_all(it)
        else:
            it.stop()


# ---- Redis (tests/python/test_ha_redis.py) ----------------------------------------

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_VIEW_KEY = "mooncake-store/{mooncake_cluster}/master_view"
REDIS_VERSION_KEY = "mooncake-store/{mooncake_cluster}/master_view_version"


def have_redis() -> bool:
    return os.access(REDIS, os.X_OK)


class RedisServer:
    """One redis-server on a free loopback port, nothing persisted
    (``--save '' --appendonly no``).  ``command()`` speaks RESP on a raw
    socket, so the tests need no Python redis client.  ``stop()`` and
    ``start()`` restart it on the same port (an empty server again)."""

    def __init__(self, port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="mc-redis-")
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(os.path.join(self.dir, "redis.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        try:
            wait_until(lambda: self.try_command("PING") == "PONG", 10.0, "redis-server to answer")
        except BaseException:
            self.kill()
            raise

    def command(self, *args: str, timeout: float = 2.0):
        """One command; the decoded reply (str, int, list, None), or an
        exception for a refused connection; a RESP error raises RuntimeError."""
        import socket
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            out = f"*{len(args)}\r\n".encode()
            for a in args:
                b = a.encode() if isinstance(a, str) else a
                out += f"${len(b)}\r\n".encode() + b + b"\r\n"
            s.sendall(out)
            f = s.makefile("rb")
            return self._reply(f)

    def _reply(self, f):
        line = f.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2].decode()
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest)
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = f.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply(f) for _ in range(n)]
        raise RuntimeError(f"unexpected RESP reply {line!r}")

    def try_command(self, *args: str):
        try:
            return self.command(*args)
        except (OSError, ConnectionError):
            return None

    def hgetall(self, key: str) -> dict:
        flat = self.command("HGETALL", key) or []
        return dict(zip(flat[0::2], flat[1::2]))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisHaMaster(HaMaster):
    """A mooncake_master campaigning in ``redis`` (--ha_backend_type=redis)."""

    def __init__(self, redis: RedisServer, ttl_s: int = 2,
                 extra_args: Optional[List[str]] = None, **kw) -> None:
        Master.__init__(self, extra_args=["--enable_ha=true", "--ha_backend_type=redis",
                                          f"--ha_backend_connstring=redis://{redis.addr}",
                                          f"--ha_lease_ttl_sec={ttl_s}"] +
                        list(extra_args or []), **kw)


@pytest.fixture
def redis():
    """A redis-server on a free port, stopped at teardown."""
    r = RedisServer()
    try:
        yield r
    finally:
        r.stop()


class OplogMaster(HaMaster):
    """A master started as upstream's production command starts it
    (docs/ha.md, "Upstream's production command"): --enable_ha=true
    --ha_backend_type=etcd --ha_backend_connstring=<endpoints>
    --enable_oplog=true, plus this test's ports (and ``extra``)."""

    def __init__(self, etcd: EtcdCluster, extra: Optional[List[str]] = None) -> None:
        Master.__init__(self, extra_args=[
            "--enable_ha=true", "--ha_backend_type=etcd",
            f"--ha_backend_connstring={etcd.endpoints}", "--enable_oplog=true"] +
            list(extra or []))


def pause_etcd(etcd: EtcdCluster, i: int) -> None:
    """SIGSTOP member ``i``: it holds its connections but answers nothing."""
    os.kill(etcd.procs[i].pid, signal.SIGSTOP)


def resume_etcd(etcd: EtcdCluster, i: int) -> None:
    os.kill(etcd.procs[i].pid, signal.SIGCONT)


class GatewayOnlyEtcd:
    """An etcd that speaks only its JSON gateway (HTTP/1.1), as one behind an
    HTTP/1.1 proxy would: a threaded proxy on a free loopback port that
    forwards every POST to ``etcd``'s first member and refuses HTTP/2 (the
    connection preface of a gRPC call gets HTTP 505, as Python's server
    answers any HTTP/2.0 request line).  ``h2_attempts`` counts those."""

    def __init__(self, etcd: EtcdCluster) -> None:
        import http.server
        import threading

        target = f"http://127.0.0.1:{etcd.client_ports[0]}"
        outer = self
        self.h2_attempts = 0
        self.forwarded = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def parse_request(self):
                if self.raw_requestline.startswith(b"PRI * HTTP/2.0"):
                    outer.h2_attempts += 1
                return super().parse_request()

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                req = urllib.request.Request(target + self.path, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=5.0) as r:
                        code, out = r.status, r.read()
                except urllib.error.HTTPError as e:
                    code, out = e.code, e.read()
                except OSError:
                    code, out = 503, b'{"error":"proxy: etcd unreachable","code":14}'
                outer.forwarded += 1
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoints(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

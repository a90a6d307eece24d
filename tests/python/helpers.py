# SPDX-License-Identifier: Apache-2.0
"""Shared machinery of the pytest suite: a real mooncake_master on free
loopback ports, client processes driven over a JSON-lines pipe, and bounded
polling.  Nothing here sleeps "long enough": every wait polls a condition
with a deadline and fails loudly when the deadline passes.
"""

import contextlib
import io
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
SRCDIR = HERE.parent.parent
EXAMPLES = SRCDIR / "examples"
CLIENT_PROC = HERE / "client_proc.py"

#: Lease TTL the test master runs with by default (ms); upstream CI uses the
#: same.  A read that outlives its lease is discarded (LEASE_EXPIRED), so
#: modules that move tens of MiB on a loaded machine ask for a longer one by
#: setting a module-level LEASE_TTL_MS.
LEASE_TTL_MS = 500
#: Client liveness TTL of the test master (s).
CLIENT_TTL_S = 2

MiB = 1024 * 1024


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to connect() and bind(0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORTS_GIVEN: set = set()
_PORT_RNG = random.Random(os.getpid() ^ time.monotonic_ns())


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago, for a daemon under
    test to listen on.

    It is drawn at random from below the kernel's ephemeral range, so no
    outgoing connection of a suite running beside this one (the sanitizer
    suite opens thousands) can take it between this check and the daemon's
    bind, as a port from bind(0) could be.  A port is handed out once per
    process.  Where the ephemeral range leaves no room below it, bind(0)."""
    high = _ephemeral_low()
    low = max(1024, high // 2)
    for _ in range(200 if high - low >= 1024 else 0):
        port = _PORT_RNG.randrange(low, high)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.05) -> Any:
    """Poll ``cond`` until it returns a truthy value; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = cond()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what} "
                                 f"(last value {last!r})")
        time.sleep(interval)


def all_threads_stopped(pid: int) -> bool:
    """Every thread of process ``pid`` is in state T (stopped), from /proc."""
    states = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue  # a thread that just exited
        states.append(stat[stat.rindex(")") + 2])
    return bool(states) and all(st == "T" for st in states)


def sigstop(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP process ``pid`` and return once every thread of it has
    stopped: the signal is delivered to each thread when it next enters the
    kernel, so on a loaded machine a thread can go on running for a while
    after kill() returns (an emulated NIC answered a whole 1 MiB READ so)."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: all_threads_stopped(pid), timeout, f"process {pid} to stop", 0.002)


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (/proc/<pid>/status VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def master_bin() -> str:
    """The mooncake_master to test: $MC_MASTER_BIN (set by make check-python)."""
    path = os.environ.get("MC_MASTER_BIN")
    if not path:
        raise RuntimeError("MC_MASTER_BIN is not set; run the suite with `make check-python`")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"MC_MASTER_BIN={path} is not an executable")
    return path


class DaemonProc:
    """A daemon under test: its output goes to a temporary log file, and
    stop() ends it with SIGTERM (SIGKILL after 10 s) and removes the log.
    Subclasses start it with _start() and wait for it with _ready()."""

    def _start(self, args: List[str], name: str) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix=f"mc-{name}-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def _ready(self, cond: Callable[[], Any], timeout: float, what: str) -> None:
        """Wait until ``cond()`` holds; stop the daemon and raise if it exits
        first or the wait times out."""
        try:
            # a short interval: a master is listening some 10-30 ms after
            # its start, and tests start masters by the thousand
            wait_until(lambda: self.proc.poll() is not None or cond(), timeout, what,
                       interval=0.005)
            if self.proc.poll() is not None:
                raise RuntimeError(f"{Path(self.proc.args[0]).name} exited with "
                                   f"{self.proc.returncode}:\n" + self.log_text())
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> Optional[int]:
        """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
        return self.proc.returncode


class Master(DaemonProc):
    """A mooncake_master process on free loopback ports, or on the given
    ``ports`` (rpc, http metadata, metrics): a new master can then take the
    place of one that was stopped, since clients know it by its address."""

    def __init__(self, extra_args: Optional[List[str]] = None,
                 lease_ttl_ms: int = LEASE_TTL_MS,
                 ports: Optional[Tuple[int, int, int]] = None) -> None:
        self.lease_ttl_ms = lease_ttl_ms
        self.port, self.http_port, self.metrics_port = \
            ports or (free_port(), free_port(), free_port())
        args = [
            master_bin(),
            f"--port={self.port}",
            "--rpc_address=127.0.0.1",
            "--enable_http_metadata_server=true",
            "--http_metadata_server_host=127.0.0.1",
            f"--http_metadata_server_port={self.http_port}",
            "--metrics_host=127.0.0.1",
            f"--metrics_port={self.metrics_port}",
            f"--client_ttl={CLIENT_TTL_S}",
            f"--default_kv_lease_ttl={lease_ttl_ms}",
        ] + list(extra_args or [])
        self._start(args, "master")
        self._ready(lambda: (port_accepts(self.port) and port_accepts(self.http_port) and
                             port_accepts(self.metrics_port)),
                    10.0, "the master to accept connections")

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metadata_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metadata"

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric of /metrics."""
        import urllib.request
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"no metric {name}")


class ClientError(AssertionError):
    pass


class ClientProc:
    """A store client in a separate process (tests/python/client_proc.py).

    ``call(op, **args)`` sends one JSON request line and returns the decoded
    answer; an answer carrying "error" raises :class:`ClientError`.
    """

    def __init__(self, name: str = "client", env: Optional[Dict[str, str]] = None,
                 prefix: Optional[List[str]] = None, launcher: Optional[str] = None,
                 script: Optional[Path] = None, log_path: Optional[Path] = None) -> None:
        """``prefix``: argv run in front of the interpreter (the cluster
        suite's ``ip netns exec <ns>``; it must exec the command).
        ``launcher``: Python source run instead of client_proc.py, with the
        folder of client_proc.py as its argument (a test's own ops wrapped
        around client_proc.handle); ``script``: a file run instead.
        ``log_path``: where its stderr goes, kept after stop (default: a
        temporary file, removed at stop)."""
        self.name = name
        self._keep_log = log_path is not None
        self.log = (open(log_path, "wb") if log_path is not None else
                    tempfile.NamedTemporaryFile(prefix=f"mc-{name}-", suffix=".log",
                                                delete=False))
        if launcher is not None:
            main = [sys.executable, "-c", launcher, str(CLIENT_PROC.parent)]
        else:
            main = [sys.executable, str(script if script is not None else CLIENT_PROC)]
        self.proc = subprocess.Popen(
            list(prefix or []) + main,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env=dict(os.environ, **(env or {})), bufsize=0)
        self._lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        # buffered: lines of the unbuffered pipe (bufsize=0) are read a
        # byte a syscall, seconds for the hex of a MiB
        for line in io.BufferedReader(self.proc.stdout, 1 << 16):
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def call(self, op: str, timeout: float = 60.0, **args: Any) -> Dict[str, Any]:
        assert self.proc.stdin is not None
        req = dict(args, op=op)
        try:
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise ClientError(f"{self.name}: cannot send {op}: {e}\n{self.log_text()}")
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise ClientError(f"{self.name}: no answer to {op} within {timeout}s\n"
                              + self.log_text()) from None
        if line is None:
            raise ClientError(f"{self.name}: exited ({self.proc.poll()}) during {op}\n"
                              + self.log_text())
        resp = json.loads(line)
        if "error" in resp:
            raise ClientError(f"{self.name}: {op} failed: {resp['error']}")
        return resp

    def setup(self, master: Master, metadata: str = "P2PHANDSHAKE",
              segment: int = 64 * MiB, buffer: int = 16 * MiB) -> str:
        """setup() against ``master``; returns the client's hostname."""
        md = master.metadata_url if metadata == "http" else metadata
        r = self.call("setup", args=["localhost", md, segment, buffer, "tcp", "",
                                     master.addr])
        if r["rc"] != 0:
            raise ClientError(f"{self.name}: setup returned {r['rc']}\n{self.log_text()}")
        return r["hostname"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Ask the process to exit, kill it if it does not within 10 s."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        if self._keep_log:
            return
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class EngineProc(ClientProc):
    """A TransferEngine in its own process (engine_proc.py, or the
    ``launcher`` source), driven through :meth:`te`."""

    def __init__(self, name: str = "engine", env: Optional[Dict[str, str]] = None,
                 prefix: Optional[List[str]] = None, launcher: Optional[str] = None) -> None:
        super().__init__(name, env=env, prefix=prefix, launcher=launcher,
                         script=None if launcher is not None else HERE / "engine_proc.py")

    def te(self, method: str, *args: Any, timeout: float = 60.0) -> Any:
        """``TransferEngine.<method>(*args)`` in the process; its result."""
        return self.call("te", timeout=timeout, method=method, args=list(args))["result"]


def stop_procs(procs) -> None:
    """Stop subprocess.Popen line-protocol workers: "exit" on stdin, then
    a bounded wait, then SIGKILL."""
    for p in procs:
        if p.poll() is None:
            try:
                p.stdin.write("exit\n")
                p.stdin.flush()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def pattern(seed: int, n: int) -> bytes:
    """@p n bytes determined by @p seed (SHA-256 blocks): the same on
    every process, different for every seed."""
    import hashlib
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


@contextlib.contextmanager
def closing_stores(build: Callable[..., Any]):
    """A factory around ``build(...)`` (which returns a set-up store) that
    closes every store it made on exit: the body of a fixture that yields
    ``make``."""
    made: List[Any] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        s = build(*args, **kwargs)
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            s.close()


def multi_tenant_args(dirpath: Path, tenants: List[str]) -> List[str]:
    """Master flags that make ``tenants`` (and ``default``) separate key
    spaces: --enable_multi_tenants with a quota policy that registers them
    with room to spare.  Without the flag the master ignores tenant ids, as
    upstream's (every client shares tenant ``default``)."""
    policy = Path(dirpath) / "tenants.yaml"
    policy.write_text("version: 1\ntenants:\n" + "".join(
        f"  - name: {t}\n    quota: 1TB\n" for t in ["default", *tenants]))
    return ["--enable_multi_tenants=true", f"--tenant_quota_connector_uri={policy}"]


def client_bin() -> str:
    """The mooncake_client to test: $MC_CLIENT_BIN (set by make check-python),
    else mooncake_client next to $MC_MASTER_BIN."""
    path = os.environ.get("MC_CLIENT_BIN") or str(Path(master_bin()).parent / "mooncake_client")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"MC_CLIENT_BIN={path} is not an executable")
    return path


class RealClient(DaemonProc):
    """A mooncake_client daemon serving dummy clients on a free port."""

    def __init__(self, master: "Master", segment: str = "64MB",
                 extra_args: Optional[List[str]] = None) -> None:
        self.port = free_port()
        args = [client_bin(), "--host=127.0.0.1", "--metadata_server=P2PHANDSHAKE",
                f"--master_server_address={master.addr}", f"--port={self.port}",
                f"--global_segment_size={segment}", "--local_buffer_size=16MB"] \
            + list(extra_args or [])
        self._start(args, "realclient")
        self._ready(lambda: "ready" in self.log_text(), 20.0, "mooncake_client to be ready")

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def assert_setup_refused(spawn_client, master, var: str, value: str) -> None:
    """A client whose environment sets @var to @value fails setup, and its
    log names @var (no setting is accepted and ignored)."""
    c = spawn_client("refused", env={var: value})
    res = c.call("setup", args=["localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                                master.addr])
    assert res["rc"] != 0, f"{var}={value!r} was accepted"
    assert var in c.log_text()


def assert_roundtrip(c: "ClientProc", key: str, size: int = 256 * 1024) -> None:
    """Client process @c puts @size patterned bytes under @key and gets
    them back whole (its length and SHA-256 as the client reports them)."""
    import hashlib
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    assert c.call("put", key=key, hex=data.hex())["rc"] == 0
    got = c.call("get", key=key)
    assert (got["len"], got["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())


def checked_value(key: str, version: int, size: int) -> bytes:
    """A value that proves itself: a header naming ``key`` (its hash),
    ``version`` and ``size``, bytes derived from them, and a SHA-256 of
    all that at the end.  ``check_value`` tells a complete value that was
    written from torn or foreign bytes.  ``size`` >= 64."""
    import hashlib
    import struct
    assert size >= 64
    kh = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    head = struct.pack("<QQQ", kh, version, size)
    body = hashlib.shake_128(f"{key}/{version}".encode()).digest(size - len(head) - 32)
    return head + body + hashlib.sha256(head + body).digest()


def check_value(key: str, data: bytes) -> Optional[int]:
    """The version of ``data`` when it is a complete ``checked_value`` of
    ``key``; None otherwise."""
    import hashlib
    import struct
    if len(data) < 64:
        return None
    kh, version, size = struct.unpack_from("<QQQ", data)
    if kh != int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"):
        return None
    if size != len(data) or hashlib.sha256(data[:-32]).digest() != data[-32:]:
        return None
    return version


def read_until(reader: "ClientProc", key: str, want_sha: str, old_shas: set,
               lease_ms: int) -> Dict[str, Any]:
    """``reader``'s get of ``key`` until it returns the value hashing to
    ``want_sha`` (the SHA-256 of b"" for a miss).  Until then it may only
    return an older complete value (``old_shas``): a reader that holds a
    lease reads from its location cache until the lease ends
    (docs/architecture.md, "Location cache"), which bounds the wait."""
    deadline = time.monotonic() + lease_ms / 1000 + 3.0
    while True:
        got = reader.call("get", key=key)
        if got["sha256"] == want_sha:
            return got
        assert got["sha256"] in old_shas, "the reader saw bytes that were never written"
        assert time.monotonic() < deadline, "the new value was not seen after the lease ended"
        time.sleep(0.02)


@contextlib.contextmanager
def holder_objects(master, make_store, monkeypatch, name: str, prefix: str,
                   holder_env: Dict[str, str], reader_env: Dict[str, str], size: int,
                   tags: str = "abcd", segment: int = 32 * 1024 * 1024):
    """A holder process ``name`` (``holder_env``) and a reader store in
    this process (``reader_env``), both with MC_TE_SHM=0 (the reader
    reaches the holder by TCP only), and one object of ``size`` random
    bytes per letter of ``tags`` put by the reader into the holder's
    segment; yields (reader, keys, values) and removes the objects."""
    import uuid
    monkeypatch.setenv("MC_TE_SHM", "0")
    for k, v in reader_env.items():
        monkeypatch.setenv(k, v)
    h = ClientProc(name, env=dict(holder_env, MC_TE_SHM="0"))
    try:
        h.setup(master, segment=segment)
        reader = make_store(segment=0)  # every object lands in the holder's segment
        keys = [f"{prefix}-{t}-{uuid.uuid4().hex[:8]}" for t in tags]
        values = [os.urandom(size) for _ in keys]
        for k, v in zip(keys, values):
            assert reader.put(k, v) == 0
        yield reader, keys, values
        for k in keys:
            assert reader.remove(k, True) == 0
    finally:
        h.stop()


def race_reads_with_reputs(holder, keys: List[str], size_of: Callable[[str], int],
                           read_once: Callable[[], Tuple[Any, Optional[str]]],
                           judge: Callable[[int, Any, List[bytes]], Optional[str]],
                           seconds: float = 3.0) -> None:
    """While a thread removes (forced) and puts again every key of
    ``keys`` in ``holder`` with new bytes (``size_of(key)`` of them), as
    fast as it can, call ``read_once()`` -- one read of every key,
    returning (its results, a complaint about bytes outside its
    destinations or None) -- for ``seconds``, and after each read
    ``judge(j, results, versions of keys[j] so far)``: None when key j was
    read from one version of it, "failed" when it failed as a whole, or a
    complaint.  Asserts no complaint, enough versions to race against, at
    least 10 reads and every key read at least once."""
    versions: Dict[str, List[bytes]] = {k: [] for k in keys}
    lock = threading.Lock()

    def put_version(k):
        v = os.urandom(size_of(k))
        with lock:
            versions[k].append(v)
        assert holder.put(k, v) == 0

    for k in keys:
        put_version(k)
    stop = threading.Event()
    errors: List[BaseException] = []

    def reput():
        try:
            while not stop.is_set():
                for k in keys:
                    assert holder.remove(k, True) == 0
                    put_version(k)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    t = threading.Thread(target=reput)
    t.start()
    reads, ok, failed, wrong = 0, [0] * len(keys), 0, []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not errors and len(wrong) < 5:
            res, outside = read_once()
            reads += 1
            if outside is not None:
                wrong.append(outside)
            with lock:
                known = {k: list(v) for k, v in versions.items()}
            for j, k in enumerate(keys):
                verdict = judge(j, res, known[k])
                if verdict == "failed":
                    failed += 1
                elif verdict is not None:
                    wrong.append(f"{k}: {verdict}")
                else:
                    ok[j] += 1
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive(), "the re-puts did not stop"
    assert not errors, errors
    assert not wrong, f"{len(wrong)} bad keys in {reads} reads: {wrong[:5]}"
    assert min(len(v) for v in versions.values()) > 3, "too few versions to race against"
    assert reads >= 10 and min(ok) > 0, (reads, ok, failed)

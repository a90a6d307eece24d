# SPDX-License-Identifier: Apache-2.0
"""The durable master (--enable_snapshot, docs/ha.md "Durability").

Real processes: mooncake_master with its operation log and snapshots in a
temporary directory, store clients in their own processes.  Client A holds
the segment (the bytes); client B has no segment, so everything it puts
lands in A's segment, and reads from B go through the transfer engine to
A, found through the master's HTTP metadata server.

* Restart under put load (SIGKILL and SIGTERM), with a snapshot walk
  every second: B puts in a loop and
  records every put that returned success, and removes every third key
  again, recording the removes that succeeded; after the master restarts
  with --enable_snapshot_restore, every acknowledged key reads back with
  its bytes and no acknowledged remove is undone, once A has remounted (A republishes its descriptor on the
  remount, so the emptied metadata server serves it again).
* A torn log tail (half a record appended, as a crash mid-write leaves)
  and a corrupt last record are cut at restore, not replayed; what came
  before them is restored.
* A corrupt newest snapshot is refused with a clear log line; the master
  falls back to the older snapshot plus the logs since.  With no valid
  snapshot at all it starts empty, and says so.
* A holder that never comes back: its restored segment awaits it for
  --snapshot_restore_grace_seconds, reads of its objects answer not found
  meanwhile (never bytes), and then the segment and the objects go.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from helpers import MiB, ClientProc, Master, free_port, wait_until

OBJ = 4096
DEADLINE_S = 30.0

# client_proc.py plus a put loop that records what was acknowledged.
_LAUNCHER = r"""
import os, sys, threading
sys.path.insert(0, sys.argv[1])
import client_proc

_base = client_proc.handle
_stop = threading.Event()
_threads = []


def payload(key, size):
    return (key.encode() * (size // len(key) + 1))[:size]


def handle(store, req):
    op = req["op"]
    if op == "acked_loop":
        path, size, prefix = req["path"], req["size"], req["prefix"]

        def loop():
            i = 0
            with open(path, "a") as f:
                while not _stop.is_set():
                    key = f"{prefix}-{i}"
                    i += 1
                    if store.put(key, payload(key, size)) != 0:
                        continue
                    f.write(key + "\n")
                    f.flush()
                    # every third key is removed again: "?key" before the
                    # remove (a remove cut off by the kill may or may not
                    # have happened), "-key" once acknowledged
                    if i % 3 == 0:
                        f.write("?" + key + "\n")
                        f.flush()
                        if store.remove(key) == 0:
                            f.write("-" + key + "\n")
                            f.flush()
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        _threads.append(t)
        return {"rc": 0}
    if op == "stop_loop":
        # answers once the loop has ended: every acknowledged key is in the file
        _stop.set()
        for t in _threads:
            t.join(timeout=60)
        return {"rc": 0 if not any(t.is_alive() for t in _threads) else 1}
    return _base(store, req)


client_proc.handle = handle
client_proc.main()
"""


class LoopClient(ClientProc):
    """A :class:`ClientProc` that can also put in a loop, recording every
    acknowledged key in a file."""

    def __init__(self, name):
        super().__init__(name, launcher=_LAUNCHER)


def payload(key, size=OBJ):
    return (key.encode() * (size // len(key) + 1))[:size]


class Durable:
    """One master at a time on fixed ports with its directory, plus clients."""

    def __init__(self, tmp):
        self.dir = str(tmp / "state")
        self.ports = (free_port(), free_port(), free_port())
        self.master = None
        self.clients = []

    def start(self, restore=True, extra=()):
        args = ["--enable_snapshot=true", f"--snapshot_backup_dir={self.dir}"]
        if restore:
            args.append("--enable_snapshot_restore=true")
        self.master = Master(args + list(extra), ports=self.ports)
        return self.master

    def end(self, sig):
        m = self.master
        if m.proc.poll() is None:
            m.proc.send_signal(sig)
            m.proc.wait(timeout=30)
        log = Path(m.log.name).read_text(errors="replace")
        if sig == signal.SIGTERM:
            assert m.proc.returncode == 0, log[-4000:]
        m.stop()
        self.master = None
        return log

    def log(self):
        return Path(self.master.log.name).read_text(errors="replace")

    def client(self, name, loop=False):
        c = LoopClient(name) if loop else ClientProc(name)
        self.clients.append(c)
        return c

    def files(self, kind):
        return sorted(p for p in Path(self.dir).iterdir()
                      if re.fullmatch(kind + r"\.[0-9a-f]{16}", p.name))

    def close(self):
        for c in self.clients:
            c.stop()
        if self.master is not None:
            self.master.stop()


@pytest.fixture
def durable(tmp_path):
    d = Durable(tmp_path)
    try:
        yield d
    finally:
        d.close()


def _get(master, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{master.metrics_port}{path}",
                                timeout=10) as r:
        return r.read()


def segments(master):
    return json.loads(_get(master, "/get_all_segments"))


def metric(master, name):
    for line in _get(master, "/metrics").decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def setup_ab(d, metadata="http"):
    m = d.master
    a = d.client("A")
    a_name = a.setup(m, metadata=metadata, segment=32 * MiB)
    b = d.client("B", loop=True)
    b.setup(m, metadata=metadata, segment=0)
    return a, b, a_name


def put_keys(writer, keys):
    for k in keys:
        r = writer.call("put", key=k, hex=payload(k).hex())
        assert r["rc"] == 0, (k, r)


def readable(reader, key):
    got = reader.call("get", key=key)
    return got["len"] == OBJ and got["sha256"] == hashlib.sha256(payload(key)).hexdigest()


def wait_remounted(d, a_name):
    wait_until(lambda: any(s["name"] == a_name and s["status"] == "OK"
                           for s in segments(d.master)),
               DEADLINE_S, f"{a_name} to remount its segment")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill9", "sigterm"])
def test_restart_under_put_load_keeps_every_acknowledged_put(durable, sig, tmp_path):
    d = durable
    # snapshots every second: the restore starts from one taken under load
    d.start(extra=["--snapshot_interval_seconds=1"])
    a, b, a_name = setup_ab(d)
    acked = tmp_path / "acked.txt"
    assert b.call("acked_loop", path=str(acked), size=OBJ, prefix="load")["rc"] == 0

    def n_acked():
        return len(acked.read_text().splitlines()) if acked.exists() else 0

    wait_until(lambda: n_acked() >= 400, DEADLINE_S, "300 acknowledged puts and removes")
    d.end(sig)  # while B keeps putting
    before = n_acked()
    assert len(d.files("snapshot")) >= 1
    d.start(extra=["--snapshot_interval_seconds=1"])
    wait_remounted(d, a_name)
    # the loop resumes against the restarted master
    wait_until(lambda: n_acked() >= before + 130, DEADLINE_S, "puts after the restart")
    assert b.call("stop_loop")["rc"] == 0
    lines = acked.read_text().splitlines()
    removed = {k[1:] for k in lines if k.startswith("-")}
    tried = {k[1:] for k in lines if k.startswith("?")}
    keys = [k for k in lines if k[0] not in "-?" and k not in tried]
    assert len(keys) >= 200 and len(removed) >= 60, (len(keys), len(removed))
    back = [k for k in removed if b.call("exist", key=k)["rc"] != 0]
    assert not back, f"{len(back)} acknowledged removes undone: {back[:5]}"
    missing = [k for k in keys if not readable(b, k)]
    assert not missing, (f"{len(missing)} of {len(keys)} acknowledged puts lost: {missing[:5]}\n"
                         + d.log()[-5000:])
    assert "restore: done" in d.log()
    # the metadata server was emptied by the restart and A published again
    url = f"{d.master.metadata_url}?key=mooncake/ram/{a_name}"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.loads(r.read())["name"] == a_name


def test_restart_restores_removes_and_segments(durable):
    d = durable
    d.start()
    a, b, a_name = setup_ab(d)
    keys = [f"k{i}" for i in range(20)]
    put_keys(b, keys)
    for k in keys[:5]:
        assert b.call("remove", key=k)["rc"] == 0
    d.end(signal.SIGKILL)
    d.start()
    wait_remounted(d, a_name)
    for k in keys[:5]:
        assert b.call("exist", key=k)["rc"] == 0, k
    for k in keys[5:]:
        assert readable(b, k), k
    # a restarted master without restore starts empty
    d.end(signal.SIGTERM)
    d.start(restore=False)
    assert b.call("exist", key=keys[10])["rc"] == 0


def test_torn_log_tail_is_cut(durable):
    d = durable
    d.start()
    a, b, a_name = setup_ab(d)
    put_keys(b, [f"t{i}" for i in range(10)])
    d.end(signal.SIGKILL)
    log = d.files("oplog")[-1]
    good = log.stat().st_size
    # half a frame: a header promising 200 bytes, then 20 of them
    with open(log, "ab") as f:
        f.write((200).to_bytes(4, "little") + b"\0\0\0\0\x06" + b"x" * 20)
    d.start()
    text = d.log()
    assert "ends in a torn record" in text, text[-3000:]
    assert log.stat().st_size == good
    wait_remounted(d, a_name)
    for i in range(10):
        assert readable(b, f"t{i}")
    # a corrupt last record (a flipped byte) is cut too: its put is lost,
    # the ones before stay
    put_keys(b, ["last"])
    d.end(signal.SIGKILL)
    log = d.files("oplog")[-1]
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF
    log.write_bytes(bytes(data))
    d.start()
    assert "ends in a corrupt record" in d.log()
    wait_remounted(d, a_name)
    assert b.call("exist", key="last")["rc"] == 0
    for i in range(10):
        assert readable(b, f"t{i}")


def test_corrupt_snapshot_falls_back_to_the_previous_one(durable):
    d = durable
    d.start(extra=["--snapshot_interval_seconds=1"])
    a, b, a_name = setup_ab(d)
    put_keys(b, [f"s{i}" for i in range(10)])
    wait_until(lambda: d.log().count("written in") >= 2, DEADLINE_S, "two snapshots")
    assert metric(d.master, "master_snapshot_success") >= 2
    assert metric(d.master, "master_oplog_records_total") >= 11  # the segment and 10 puts
    put_keys(b, [f"s{i}" for i in range(10, 20)])
    d.end(signal.SIGTERM)
    snaps = d.files("snapshot")
    assert len(snaps) == 2, snaps  # --snapshot_retention_count=2
    newest = snaps[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    d.start()
    text = d.log()
    assert f"REFUSING corrupt snapshot {newest}" in text, text[-3000:]
    assert Path(str(newest) + ".corrupt").exists()
    wait_remounted(d, a_name)
    for i in range(20):
        assert readable(b, f"s{i}"), i
    # no valid snapshot at all: start empty, and say so
    d.end(signal.SIGTERM)
    for s in d.files("snapshot"):
        s.write_bytes(b"garbage")
    d.start()
    assert "no valid snapshot" in d.log()
    assert b.call("exist", key="s1")["rc"] == 0


def test_holder_that_never_returns_is_dropped_after_the_grace(durable):
    d = durable
    d.start()
    a, b, a_name = setup_ab(d)
    put_keys(b, ["gone"])
    d.end(signal.SIGKILL)
    a.kill()  # the holder dies with the master and never comes back
    d.start(extra=["--snapshot_restore_grace_seconds=3"])
    seg = [s for s in segments(d.master) if s["name"] == a_name]
    assert seg and seg[0]["status"] == "AWAITING_REMOUNT", seg
    # restored but not vouched for: not served
    assert b.call("exist", key="gone")["rc"] == 0
    got = b.call("get", key="gone")
    assert got["len"] == 0, got
    wait_until(lambda: not any(s["name"] == a_name for s in segments(d.master)),
               DEADLINE_S, "the segment to be dropped after the grace period")
    assert metric(d.master, "master_key_count") == 0
    assert "within --snapshot_restore_grace_seconds" in d.log()
    # and the drop is durable
    d.end(signal.SIGTERM)
    d.start()
    assert not any(s["name"] == a_name for s in segments(d.master))
    assert metric(d.master, "master_key_count") == 0


def test_flags_are_checked(tmp_path):
    def run(*args):
        p = subprocess.run([os.environ["MC_MASTER_BIN"], *args], capture_output=True,
                           text=True, timeout=30)
        return p.returncode, p.stderr

    rc, err = run("--enable_snapshot=true")
    assert rc == 2 and "--snapshot_backup_dir" in err, err
    rc, err = run("--enable_snapshot_restore=true")
    assert rc == 2 and "--enable_snapshot" in err, err
    rc, err = run(f"--snapshot_backup_dir={tmp_path}")
    assert rc == 2 and "--enable_snapshot" in err, err
    rc, err = run("--enable_snapshot=true", f"--snapshot_backup_dir={tmp_path}",
                  "--snapshot_object_store_type=s3")
    assert rc == 2 and "s3" in err, err

# SPDX-License-Identifier: Apache-2.0
"""Copy and move tasks end to end: a real master, holders in separate
processes (client_proc.py) that execute the tasks assigned to them, and an
in-process controller without a segment that submits, queries and reads.

What is checked: a copy adds a replica on another client's segment that
survives the original holder being killed; a move leaves exactly the
target replica, byte-exact, and is reported SUCCESS by the source's owner
with ordered timestamps; ids in upstream's form (2-tuples of ints, the
failure id (0, 0)), query_task taking any pair of ints (and a UUID or its
text); upstream's messages ("Task completed successfully", "STATUS (max
retries reached: N)", the "Move failed for key:" log line); every
submission error code, in upstream's order of checks; a task whose source
vanished before it ran, a task nobody fetches and the pruning of finished
tasks, each with the master flag that governs it.  Every wait polls a
condition with a deadline.
"""

import hashlib
import json
import os
import signal
import time
import urllib.request
import uuid

import pytest

from helpers import MiB, ClientProc, Master, sigstop, wait_until
from mooncake.store import (ErrorCode, MooncakeDistributedStore, QueryTaskResponse,
                            ReplicaStatus, ReplicateConfig, TaskStatus, TaskType, UUIDPair)

#: The id of a failed submission, as upstream's.
NIL = (0, 0)

#: A holder that fetches tasks only when told to (its first poll, at setup,
#: finds nothing): keeps submitted tasks PENDING for as long as a test needs.
NEVER_POLL = {"MC_TASK_POLL_INTERVAL_MS": "86400000"}
#: Holders that pick tasks up quickly.
FAST_POLL = {"MC_TASK_POLL_INTERVAL_MS": "100"}


@pytest.fixture
def holder():
    """``holder(master, name, env=None)``: a client process with a 32 MiB
    segment, set up against ``master`` (``.host`` is its segment name);
    every one is stopped at teardown."""
    procs = []

    def make(m: Master, name: str, env=None) -> ClientProc:
        c = ClientProc(f"{name}{len(procs)}", env=dict(env or {}, MC_LOG_LEVEL="warn"))
        procs.append(c)
        c.host = c.setup(m, segment=32 * MiB)
        return c

    try:
        yield make
    finally:
        for c in procs:
            c.stop()


def controller(m: Master) -> MooncakeDistributedStore:
    """A store that contributes no memory: it never holds a replica and so
    never executes a task; it submits, queries and reads."""
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", m.addr)
    assert rc == 0, f"setup returned {rc}"
    return s


@pytest.fixture
def ctl(master):
    s = controller(master)
    yield s
    s.close()


def put_on(c: ClientProc, key: str, size: int) -> str:
    """Put random bytes on c's own segment; returns their SHA-256."""
    r = c.call("put_random", key=key, size=size, preferred=c.host)
    assert r["rc"] == 0, r
    return r["sha256"]


def endpoints(store: MooncakeDistributedStore, key: str) -> list:
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for d in store.get_replica_desc(key) if d.is_memory_replica())


def wait_done(store: MooncakeDistributedStore, tid,
              timeout: float = 30.0) -> QueryTaskResponse:
    def done():
        resp, rc = store.query_task(tid)
        assert rc == 0, f"query_task({tid}) returned {rc}"
        return resp if resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED) else None
    return wait_until(done, timeout, f"task {tid} to finish")


def client_id_of(m: Master, segment: str) -> tuple:
    """The client id owning ``segment``, from the admin server, in
    upstream's form (a pair of ints)."""
    url = f"http://127.0.0.1:{m.metrics_port}/query_segment?segment={segment}"
    with urllib.request.urlopen(url, timeout=5) as r:
        u = uuid.UUID(json.loads(r.read())["client_id"])
    return (u.int >> 64, u.int & ((1 << 64) - 1))


def is_id(tid) -> bool:
    """Upstream's task id: a 2-tuple of ints in [0, 2**64)."""
    return isinstance(tid, tuple) and len(tid) == 2 and \
        all(type(v) is int and 0 <= v < 1 << 64 for v in tid)


def check_times(resp: QueryTaskResponse, before_ms: int) -> None:
    assert before_ms - 1000 <= resp.created_at_ms_epoch <= resp.last_updated_at_ms_epoch, resp


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- copy and move -------------------------------------------------------------------


def test_copy_then_original_holder_killed(master, holder, ctl):
    a = holder(master, "a", FAST_POLL)
    b = holder(master, "b", FAST_POLL)
    sha = put_on(a, "copy-key", 3 * MiB + 123)
    assert endpoints(ctl, "copy-key") == [a.host]

    t0 = now_ms()
    tid, rc = ctl.create_copy_task("copy-key", [b.host])
    assert rc == 0 and is_id(tid) and tid != NIL
    # printing an id still shows the UUID text
    assert str(tid) == str(uuid.UUID(int=(tid[0] << 64) | tid[1]))
    resp = wait_done(ctl, tid)
    assert resp.status == TaskStatus.SUCCESS, resp
    assert resp.message == "Task completed successfully"
    assert resp.type == TaskType.REPLICA_COPY and isinstance(resp.type, TaskType)
    assert resp.id == tid and is_id(resp.id)
    assert is_id(resp.assigned_client)
    assert resp.assigned_client == client_id_of(master, a.host)
    with pytest.raises(AttributeError):
        resp.status = TaskStatus.FAILED                # read-only, as upstream's
    check_times(resp, t0)
    # query_task takes any pair of ints, and a UUID or its text
    for form in ((tid[0], tid[1]), [tid[0], tid[1]], tid.uuid, str(tid)):
        again, rc = ctl.query_task(form)
        assert rc == 0 and again.id == tid and again.status == TaskStatus.SUCCESS, form
    assert endpoints(ctl, "copy-key") == sorted([a.host, b.host])
    batch = ctl.batch_get_replica_desc(["copy-key", "no-such-key"])
    assert isinstance(batch, dict)
    assert sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for d in batch["copy-key"]) == sorted([a.host, b.host])
    assert all(d.status == ReplicaStatus.COMPLETE for d in batch["copy-key"])
    assert batch["no-such-key"] == []

    # the copy is the object: with its first holder gone, it is still readable
    os.kill(a.pid, signal.SIGKILL)
    a.proc.wait(timeout=10)
    data = wait_until(lambda: ctl.get("copy-key") or None, 30.0,
                      "the object to be read from the copy")
    assert hashlib.sha256(data).hexdigest() == sha
    wait_until(lambda: endpoints(ctl, "copy-key") == [b.host], 30.0,
               "the dead holder's replica to go")
    r = b.call("get", key="copy-key")
    assert r["sha256"] == sha


def test_move_between_clients(master, holder, ctl):
    a = holder(master, "a", FAST_POLL)
    b = holder(master, "b", FAST_POLL)
    sha = put_on(a, "move-key", 2 * MiB + 7)
    small = put_on(a, "move-small", 1)

    t0 = now_ms()
    tid, rc = ctl.create_move_task("move-key", a.host, b.host)
    assert rc == 0
    tid2, rc = ctl.create_move_task("move-small", a.host, b.host)
    assert rc == 0 and tid2 != tid
    resp = wait_done(ctl, tid)
    assert resp.status == TaskStatus.SUCCESS, resp
    assert resp.type == TaskType.REPLICA_MOVE
    assert resp.assigned_client == client_id_of(master, a.host)
    check_times(resp, t0)
    assert wait_done(ctl, tid2).status == TaskStatus.SUCCESS

    # the source replica is gone; the bytes come from the target
    assert endpoints(ctl, "move-key") == [b.host]
    assert endpoints(ctl, "move-small") == [b.host]
    assert hashlib.sha256(ctl.get("move-key")).hexdigest() == sha
    assert hashlib.sha256(ctl.get("move-small")).hexdigest() == small
    a.kill()
    assert hashlib.sha256(ctl.get("move-key")).hexdigest() == sha

    # a copy to a segment that already holds a replica has nothing to do
    tid, rc = ctl.create_copy_task("move-key", [b.host])
    assert rc == 0
    assert wait_done(ctl, tid).status == TaskStatus.SUCCESS
    assert endpoints(ctl, "move-key") == [b.host]
    assert hashlib.sha256(ctl.get("move-key")).hexdigest() == sha


def test_copy_to_two_targets_from_a_copy(master, holder, ctl):
    a = holder(master, "a", FAST_POLL)
    b = holder(master, "b", FAST_POLL)
    c = holder(master, "c", FAST_POLL)
    sha = put_on(a, "fan-key", 512 * 1024)
    tid, rc = ctl.create_copy_task("fan-key", [b.host, c.host])
    assert rc == 0
    assert wait_done(ctl, tid).status == TaskStatus.SUCCESS
    assert endpoints(ctl, "fan-key") == sorted([a.host, b.host, c.host])
    a.kill()
    b.kill()
    data = wait_until(lambda: ctl.get("fan-key") or None, 30.0, "a read from the last copy")
    assert hashlib.sha256(data).hexdigest() == sha


# ---- submission errors -------------------------------------------------------------------


def test_submission_errors(master, holder, ctl):
    """Upstream's codes, checked in upstream's order: copy -- targets
    empty, key, each target (unknown -600, taking no allocations -1010);
    move -- key, source == target, target, source replica."""
    a = holder(master, "a")
    b = holder(master, "b")
    put_on(a, "err-key", 4096)
    P, NF = ErrorCode.INVALID_PARAMS, ErrorCode.OBJECT_NOT_FOUND

    # copy
    assert ctl.create_copy_task("err-key", []) == (NIL, P)
    assert ctl.create_copy_task("no-such-key", []) == (NIL, P)           # targets first
    assert ctl.create_copy_task("no-such-key", [b.host]) == (NIL, NF)
    assert ctl.create_copy_task("no-such-key", ["nosuch:1"]) == (NIL, NF)  # key before targets
    assert ctl.create_copy_task("no-such-key", [""]) == (NIL, NF)
    assert ctl.create_copy_task("err-key", ["nosuch:1"]) == (NIL, P)     # unknown: -600
    assert ctl.create_copy_task("err-key", [b.host, "nosuch:1"]) == (NIL, P)
    assert ctl.create_copy_task("err-key", [""]) == (NIL, P)
    # move
    assert ctl.create_move_task("no-such-key", a.host, b.host) == (NIL, NF)
    assert ctl.create_move_task("no-such-key", a.host, a.host) == (NIL, NF)  # key first
    assert ctl.create_move_task("no-such-key", a.host, "nosuch:1") == (NIL, NF)
    assert ctl.create_move_task("err-key", a.host, a.host) == (NIL, P)
    assert ctl.create_move_task("err-key", a.host, "nosuch:1") == (NIL, P)
    assert ctl.create_move_task("err-key", b.host, a.host) == (NIL, P)   # b holds no replica
    assert ctl.create_move_task("err-key", "nosuch:1", b.host) == (NIL, P)
    assert ctl.create_move_task("err-key", "", b.host) == (NIL, P)
    # failures are (0, 0) in upstream's form
    tid, rc = ctl.create_copy_task("no-such-key", [b.host])
    assert type(tid[0]) is int and tid == (0, 0) and rc == NF
    assert ctl.query_task(uuid.uuid4()) == (None, ErrorCode.TASK_NOT_FOUND)
    assert ctl.query_task((1, 2)) == (None, ErrorCode.TASK_NOT_FOUND)
    assert ctl.query_task("not a uuid") == (None, ErrorCode.INVALID_PARAMS)

    with pytest.raises(TypeError):
        ctl.create_copy_task("err-key", b.host)  # a str, not a list
    with pytest.raises(TypeError):
        ctl.create_copy_task("err-key", [1])
    with pytest.raises(TypeError):
        ctl.create_copy_task(5, [b.host])
    with pytest.raises(TypeError):
        ctl.create_move_task("err-key", None, b.host)
    for bad in (1234, (1,), (1, 2, 3), (1, "2"), (-1, 0), (1 << 64, 0), (1.0, 2)):
        with pytest.raises(TypeError):
            ctl.query_task(bad)

    # nothing was created by any of these, and the object is untouched
    assert endpoints(ctl, "err-key") == [a.host]

    closed = MooncakeDistributedStore()
    assert closed.create_copy_task("err-key", [b.host]) == \
        (NIL, ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS)
    assert closed.query_task(uuid.uuid4()) == (None, ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS)


def test_a_target_taking_no_allocations(master, holder, ctl):
    """A target mounted but draining (unmount with a grace period) is
    upstream's "not allocatable": UNAVAILABLE_IN_CURRENT_STATUS, after the
    key check; duplicate targets and targets that already hold a replica
    are accepted."""
    a = holder(master, "a")
    put_on(a, "drain-key", 4096)
    drained = controller(master)
    try:
        r = drained.allocate_and_mount_segment(16 * MiB)
        assert r["ret"] == 0, r
        name = drained.get_hostname()
        assert drained.unmount_segment(r["segment_ids"], grace_period_seconds=60) == 0
        busy = ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS
        assert ctl.create_copy_task("drain-key", [name]) == (NIL, busy)
        assert ctl.create_move_task("drain-key", a.host, name) == (NIL, busy)
        assert ctl.create_copy_task("no-such-key", [name]) == (NIL, ErrorCode.OBJECT_NOT_FOUND)
        # an unknown target before a draining one: -600 (each target in turn)
        assert ctl.create_copy_task("drain-key", ["nosuch:1", name]) == \
            (NIL, ErrorCode.INVALID_PARAMS)
    finally:
        drained.close()
    b = holder(master, "b")
    tid, rc = ctl.create_copy_task("drain-key", [b.host, b.host, a.host])
    assert rc == 0 and is_id(tid)


def test_pending_limit(holder):
    m = Master(extra_args=["--max_total_pending_tasks=1"])
    try:
        ctl = controller(m)
        a = holder(m, "a", NEVER_POLL)
        b = holder(m, "b")
        put_on(a, "p1", 1000)
        put_on(a, "p2", 1000)
        tid, rc = ctl.create_copy_task("p1", [b.host])
        assert rc == 0
        assert ctl.create_copy_task("p2", [b.host]) == \
            (NIL, ErrorCode.TASK_PENDING_LIMIT_EXCEEDED)
        resp, rc = ctl.query_task(tid)
        assert rc == 0 and resp.status == TaskStatus.PENDING, resp
        assert resp.assigned_client == client_id_of(m, a.host)
        # an executor waiting out a day-long poll interval stops at once
        t0 = time.monotonic()
        assert a.call("close")["rc"] == 0
        assert time.monotonic() - t0 < 3.0
        ctl.close()
    finally:
        m.stop()


def test_pending_timeout_fails_the_task(holder):
    m = Master(extra_args=["--pending_task_timeout_sec=1"])
    try:
        ctl = controller(m)
        a = holder(m, "a", NEVER_POLL)
        b = holder(m, "b")
        put_on(a, "pt", 1000)
        tid, rc = ctl.create_copy_task("pt", [b.host])
        assert rc == 0
        resp = wait_done(ctl, tid, timeout=40.0)
        assert resp.status == TaskStatus.FAILED and resp.message, resp
        # nothing was copied
        assert endpoints(ctl, "pt") == [a.host]
        ctl.close()
    finally:
        m.stop()


def test_finished_tasks_are_pruned(holder):
    m = Master(extra_args=["--max_total_finished_tasks=1"])
    try:
        ctl = controller(m)
        a = holder(m, "a", FAST_POLL)
        b = holder(m, "b", FAST_POLL)
        put_on(a, "f1", 1000)
        put_on(a, "f2", 1000)
        t1, rc = ctl.create_copy_task("f1", [b.host])
        assert rc == 0
        assert wait_done(ctl, t1).status == TaskStatus.SUCCESS
        t2, rc = ctl.create_copy_task("f2", [b.host])
        assert rc == 0
        assert wait_done(ctl, t2).status == TaskStatus.SUCCESS
        assert ctl.query_task(t1) == (None, ErrorCode.TASK_NOT_FOUND)
        ctl.close()
    finally:
        m.stop()


# ---- execution failures -----------------------------------------------------------------


def test_source_vanishes_before_the_task_runs(master, holder, ctl):
    a = holder(master, "a", FAST_POLL)
    b = holder(master, "b", FAST_POLL)
    put_on(a, "gone-key", 64 * 1024)
    put_on(a, "gone-copy", 1000)
    # a is frozen (well within its liveness TTL) so it cannot fetch the tasks
    # before the objects are gone
    sigstop(a.pid)
    try:
        tid, rc = ctl.create_move_task("gone-key", a.host, b.host)
        assert rc == 0
        ctid, rc = ctl.create_copy_task("gone-copy", [b.host])
        assert rc == 0
        assert ctl.remove("gone-key", force=True) == 0
        assert ctl.remove("gone-copy", force=True) == 0
    finally:
        os.kill(a.pid, signal.SIGCONT)
    cresp = wait_done(ctl, ctid)
    assert cresp.status == TaskStatus.FAILED, cresp
    assert cresp.message == "OBJECT_NOT_FOUND (max retries reached: 10)", cresp
    wait_until(lambda: "Copy failed for key: gone-copy" in a.log_text(), 10.0,
               "the holder to log the failed copy")
    resp = wait_done(ctl, tid)
    assert resp.status == TaskStatus.FAILED, resp
    # upstream's message; the master's retry budget is 10 by default
    assert resp.message == "OBJECT_NOT_FOUND (max retries reached: 10)", resp
    # and the executor's log line names the key, as upstream's
    wait_until(lambda: "Move failed for key: gone-key" in a.log_text(), 10.0,
               "the holder to log the failed move")
    assert ctl.get_replica_desc("gone-key") == []
    # the executor is still healthy: the next task succeeds
    put_on(a, "after-key", 4096)
    tid, rc = ctl.create_copy_task("after-key", [b.host])
    assert rc == 0
    assert wait_done(ctl, tid).status == TaskStatus.SUCCESS


def test_executor_follows_mounted_segments(master, holder, ctl):
    """A client set up without memory executes tasks once it mounts a
    segment later (the executor polls while any segment is mounted)."""
    b = holder(master, "b", FAST_POLL)
    late = controller(master)
    try:
        r = late.allocate_and_mount_segment(16 * MiB)
        assert r["ret"] == 0, r
        data = os.urandom(300 * 1024)
        cfg = ReplicateConfig()
        cfg.preferred_segment = late.get_hostname()
        assert late.put("late-key", data, cfg) == 0
        assert endpoints(ctl, "late-key") == [late.get_hostname()]
        tid, rc = ctl.create_move_task("late-key", late.get_hostname(), b.host)
        assert rc == 0
        resp = wait_done(ctl, tid)
        assert resp.status == TaskStatus.SUCCESS, resp
        assert endpoints(ctl, "late-key") == [b.host]
        assert ctl.get("late-key") == data
    finally:
        late.close()

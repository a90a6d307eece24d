# SPDX-License-Identifier: Apache-2.0
"""A workload worker of the fault suite: tests/python/client_proc.py (one
store client per process, JSON lines on stdin/stdout) plus a random
history of put, upsert, remove (some forced) and reads (get, get_into,
get_batch) on a small shared key set, and now and then a put of a key of
its own that nothing touches again (a "sentinel": "fs-<writer>-<n>"), run
on threads and recorded in a JSON-lines file (checker.load_history reads
it back).

Every operation writes an "i" line before the call -- its process,
sequence number, kind, key(s), for writes the version, and the start on
CLOCK_MONOTONIC -- and a "c" line after it: the end, the status, and for
reads what the bytes were (faultvalue.identify).  Lines are written whole
and unbuffered, so a SIGKILL leaves at most a last operation without its
"c" line (the checker treats it as never returned).

Extra ops:

  wl_start   wid, proc, keys, seed, path, mix {op: weight}, min_size,
             max_size, force_share, pause_ms, readers: a thread with that
             mix, and ``readers`` threads more with its reads only, recorded
             as "<proc>/r<i>"                       -> rc (the threads run)
  wl_stop    join_s: stop the threads, wait for them -> stopped, ops, errors
  wl_probe   key: put, get back and remove a value of its own (not part
             of the history)                        -> rc, got, rm
  wl_final   keys, deadline_s: a get_into of every key, recorded as a
             "final" read; a status other than OBJECT_NOT_FOUND is retried
             until the deadline                     -> results {outcome: count}
  wl_remove_all keys (force)                        -> rcs {status: count}
"""

import json
import math
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import client_proc  # noqa: E402
import faultvalue as fv  # noqa: E402

NOT_FOUND = -704
MIN_SENTINEL, MAX_SENTINEL = 4096, 16384


class History:
    """The JSON-lines file of one worker process (its threads share it)."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.n = 0

    def invoke(self, proc: str, **fields) -> int:
        with self.lock:
            n = self.n
            self.n += 1
            fields.update(t="i", p=proc, n=n, s=time.monotonic_ns())
            self.f.write(json.dumps(fields) + "\n")
            return n

    def complete(self, n: int, end: int, **fields) -> None:
        with self.lock:
            fields.update(t="c", n=n, e=end)
            self.f.write(json.dumps(fields) + "\n")


class Workload:
    """One thread of the workload: ``mix`` gives the weight of each kind
    of operation; its operations are recorded under ``proc``."""

    def __init__(self, store, req, hist: History, proc: str, mix: dict, seed) -> None:
        import numpy as np
        self.store = store
        self.req = req
        self.proc = proc
        self.keys = list(req["keys"])
        self.names = {fv.key_hash(k): k for k in self.keys}
        self.rng = random.Random(seed)
        self.hist = hist
        self.wid = req["wid"]
        self.counter = 0
        self.last_size = {}
        self.ops = 0
        self.errors = 0
        self.stop = threading.Event()
        self.cap = req["max_size"]
        self.arr = np.zeros(self.cap, dtype=np.uint8)
        self.ptr = self.arr.ctypes.data
        rc = store.register_buffer(self.ptr, self.cap)
        if rc != 0:
            raise RuntimeError(f"register_buffer: {rc}")
        self.kinds = list(mix)
        self.weights = [mix[k] for k in self.kinds]
        self.thread = threading.Thread(target=self.run, daemon=True)

    # -- one operation of each kind -------------------------------------------------

    def size(self, key: str) -> int:
        if key in self.last_size and self.rng.random() < 0.3:
            return self.last_size[key]         # the same size: an upsert in place
        lo, hi = self.req["min_size"], self.req["max_size"]
        return int(lo * math.exp(self.rng.random() * math.log(hi / lo)))

    def write(self, kind: str, key: str) -> None:
        self.counter += 1
        ver = fv.version_of(self.wid, self.counter)
        size = self.size(key)
        self.last_size[key] = size
        data = fv.make(key, ver, size)
        fn = self.store.put if kind == "put" else self.store.upsert
        n = self.hist.invoke(self.proc, op=kind, k=key, v=ver, sz=size)
        rc = fn(key, data)
        self.hist.complete(n, time.monotonic_ns(), rc=rc)

    def sentinel(self, _key: str) -> None:
        """A put of a key of its own that nothing touches again: the final
        reads find it unless it was lost (the shared keys are rewritten
        too often for a loss to show)."""
        self.counter += 1
        ver = fv.version_of(self.wid, self.counter)
        key = f"fs-{self.wid}-{self.counter}"
        size = self.rng.randint(MIN_SENTINEL, MAX_SENTINEL)
        data = fv.make(key, ver, size)
        n = self.hist.invoke(self.proc, op="put", k=key, v=ver, sz=size)
        rc = self.store.put(key, data)
        self.hist.complete(n, time.monotonic_ns(), rc=rc)

    def remove(self, key: str) -> None:
        force = self.rng.random() < self.req["force_share"]
        n = self.hist.invoke(self.proc, op="remove", k=key, f=force)
        rc = self.store.remove(key, force)
        self.hist.complete(n, time.monotonic_ns(), rc=rc)

    def get(self, key: str) -> None:
        from mooncake.store import last_error_detail
        n = self.hist.invoke(self.proc, op="get", k=key)
        data = self.store.get(key)
        end = time.monotonic_ns()
        res = fv.identify(key, data, self.names)
        if not data:
            res["detail"] = last_error_detail()[:160]
        self.hist.complete(n, end, rc=0 if data else None, r=res)

    def get_into(self, key: str, op: str = "get_into") -> dict:
        n = self.hist.invoke(self.proc, op=op, k=key)
        got = self.store.get_into(key, self.ptr, self.cap)
        end = time.monotonic_ns()
        data = self.arr[:got].tobytes() if got > 0 else b""
        res = fv.identify(key, data, self.names)
        self.hist.complete(n, end, rc=0 if got >= 0 else got, r=res)
        return dict(res, rc=0 if got >= 0 else got)

    def get_batch(self, _key: str) -> None:
        ks = self.rng.sample(self.keys, min(3, len(self.keys)))
        n = self.hist.invoke(self.proc, op="get_batch", ks=ks)
        vals = self.store.get_batch(ks)
        end = time.monotonic_ns()
        self.hist.complete(n, end, rc=0,
                           rs=[fv.identify(k, v, self.names) for k, v in zip(ks, vals)])

    # -- the loop -----------------------------------------------------------------

    def run(self) -> None:
        pause = self.req.get("pause_ms", 0) / 1000
        while not self.stop.is_set():
            kind = self.rng.choices(self.kinds, self.weights)[0]
            key = self.rng.choice(self.keys)
            try:
                if kind == "sentinel":
                    self.sentinel(key)
                elif kind in ("put", "upsert"):
                    self.write(kind, key)
                elif kind == "remove":
                    self.remove(key)
                else:
                    getattr(self, kind)(key)
            except Exception as e:  # keep going; the op stays without its "c" line
                self.errors += 1
                print(f"workload: {kind} {key}: {type(e).__name__}: {e}", file=sys.stderr)
            self.ops += 1
            if pause:
                time.sleep(self.rng.uniform(0, pause))


WL = {}


def handle(store, req):
    op = req["op"]
    if op == "wl_start":
        hist = History(req["path"])
        rng = random.Random(req["seed"])
        lanes = [Workload(store, req, hist, req["proc"], req["mix"], rng.random())]
        reads = {k: v for k, v in req["mix"].items() if k in ("get", "get_into", "get_batch")}
        for i in range(req.get("readers", 0)):
            lanes.append(Workload(store, req, hist, f"{req['proc']}/r{i}", reads, rng.random()))
        WL["lanes"] = lanes
        for w in lanes:
            w.thread.start()
        return {"rc": 0}
    if op == "wl_stop":
        lanes = WL.get("lanes", [])
        for w in lanes:
            w.stop.set()
        deadline = time.monotonic() + req.get("join_s", 30)
        for w in lanes:
            w.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return {"stopped": not any(w.thread.is_alive() for w in lanes),
                "ops": sum(w.ops for w in lanes), "errors": sum(w.errors for w in lanes)}
    if op == "wl_probe":
        key = req["key"]
        data = fv.make(key, 1, 4096)
        rc = store.put(key, data)
        got = store.get(key) == data if rc == 0 else False
        rm = store.remove(key, True)
        return {"rc": rc, "got": got, "rm": rm}
    if op == "wl_final":
        w = WL["lanes"][0]
        deadline = time.monotonic() + req.get("deadline_s", 20)
        out = {}
        for key in req["keys"]:
            while True:
                last = time.monotonic() >= deadline
                res = w.get_into(key, op="final")
                if res["st"] != "miss" or res["rc"] == NOT_FOUND or last:
                    st = res["st"] if res["st"] != "miss" else f"miss:{res['rc']}"
                    out[st] = out.get(st, 0) + 1
                    break
                time.sleep(0.2)
        return {"results": out}
    if op == "wl_remove_all":
        out = {}
        for k in req["keys"]:
            rc = store.remove(k, True)
            out[str(rc)] = out.get(str(rc), 0) + 1
        return {"rcs": out}
    return client_proc._base_handle(store, req)


client_proc._base_handle = client_proc.handle
client_proc.handle = handle



def dump_cores_in(folder: str) -> None:
    """A crash in C leaves a core in ``folder`` (where the kernel writes
    cores by a relative name) for the report's backtrace: core dumps on,
    without the shared segments (memfd mappings of every holder)."""
    import resource
    try:
        os.makedirs(folder, exist_ok=True)
        os.chdir(folder)
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
        with open("/proc/self/coredump_filter", "w") as f:
            f.write("0x11")  # private anonymous memory and ELF headers
    except OSError:
        pass  # no core then: the faulthandler's Python stacks remain


if __name__ == "__main__":
    if os.environ.get("MC_FAULT_CORE_DIR"):
        dump_cores_in(os.environ["MC_FAULT_CORE_DIR"])
    client_proc.main()

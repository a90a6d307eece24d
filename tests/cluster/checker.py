# SPDX-License-Identifier: Apache-2.0
"""The fault suite's checker: a history of operations in, anomalies out.

``check(ops, faults, ...)`` is a pure function (tests/cluster/test_checker.py
feeds it hand-made histories); ``load_history(paths)`` turns the workers'
JSON-lines files into its ``ops``.

An operation (a dict):

    proc    the worker process that ran it ("a#2": host a, second incarnation;
            "a#2/r0": a further thread of it)
    op      put | upsert | remove | get | get_into | get_batch | final
            ("final": a read of the quiesced cluster after the run)
    key     the key
    ver     (put, upsert) the version written; values identify themselves
            (faultvalue.py), so a version names exactly one write
    force   (remove) forced
    start   CLOCK_MONOTONIC ns just before the call (system-wide: every
            namespace of the machine shares it)
    end     ns just after it returned; None if it never did (its process was
            killed, or it hung)
    rc      0 or a negative status (None: a get of bytes that returned b"",
            whose status Python's get does not say)
    res     (reads) faultvalue.identify()'s verdict: {"st": ok|miss|foreign|
            torn|garbage, "v": version, ...}

A fault (a dict): kind, start, end (ns), and
    loses       True when it may legitimately drop objects (a holder killed
                or expired, a master without durability restarted,
                eviction), with
    lose_until  objects whose write began before this may be lost to it
                (a killed holder: the kill, since nothing acknowledged
                later was written to it; a master restarted empty: its
                restart; default: the fault's end)
    proc        for a process killed: its in-flight operations (of any of
                its threads, "proc/...") are not "hung"

Anomalies (each must be 0; ``lost`` only where the mode promises
durability):

    wrong_key   a read returned another key's value (its header names it)
    torn        a read returned this key's header with a body or length
                that does not match (a mix of values, a short read)
    garbage     a read returned bytes without a value header at all (the
                middle of some other value, a freed range, zeros)
    phantom     a read returned a version of this key that no write wrote,
                or one whose write began after the read ended
    stale       a read returned version v although a write or remove X on
                the key was acknowledged before the read began, and v's
                write had ended before X began: X is ordered after v and
                before the read in every linearisation, so v was no longer
                the value.  X is an acknowledged upsert (unconditional), an
                acknowledged remove (rc 0: it removed something), or a put
                whose own version some read returned (it took effect; an
                acknowledged put alone may have found the key taken, which
                the store reports as success).
    lost        a final read found no object (OBJECT_NOT_FOUND) although a
                put or upsert of the key was acknowledged before it began,
                every operation that could have removed the key (a remove
                not refused with -704/-706, an upsert that did not succeed:
                one in place drops the old value first) had ended before
                that write began, and no fault that loses data (above)
                began before the read with a lose_until after the write
                began.  The same miss
                with such a fault is counted as lost_explained, not an
                anomaly.
    hung        an operation that took longer than ``hang_ns``, or never
                returned although its process was not killed
"""

import bisect
import json
from collections import Counter, defaultdict
from typing import Dict, Iterable, List, Optional, Tuple

ANOMALIES = ("wrong_key", "torn", "garbage", "phantom", "stale", "lost", "hung")
READS = ("get", "get_into", "get_batch", "final")
WRITES = ("put", "upsert")
NOT_FOUND = -704
HAS_LEASE = -706
NO_EFFECT_REMOVE = (NOT_FOUND, HAS_LEASE)
MAX_EXAMPLES = 6


class Report:
    """What check() found: ``anomalies`` and ``info`` counters, ``examples``
    per anomaly kind (the first few, for the failure message), and
    ``stats`` (operations by kind and outcome)."""

    def __init__(self) -> None:
        self.anomalies: Counter = Counter({k: 0 for k in ANOMALIES})
        self.info: Counter = Counter()
        self.stats: Counter = Counter()
        self.faults: Counter = Counter()
        self.examples: Dict[str, List[str]] = defaultdict(list)
        self.lost_keys: set = set()

    def flag(self, kind: str, what: str) -> None:
        self.anomalies[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(what)

    def summary(self, label: str, extra: Optional[Dict[str, int]] = None) -> str:
        s = self.stats
        ops = sum(v for k, v in s.items() if k.startswith("op:"))
        parts = [f"{label}: ops={ops}"]
        parts.append("(" + " ".join(f"{k[3:]}={v}" for k, v in sorted(s.items())
                                     if k.startswith("op:")) + ")")
        parts.append(f"acked_writes={s['acked_writes']} reads_ok={s['reads_ok']} "
                     f"reads_miss={s['reads_miss']}")
        parts.append("faults: " + (" ".join(f"{k}={v}" for k, v in sorted(self.faults.items()))
                                   or "none"))
        an = dict(self.anomalies)
        an.update(extra or {})
        parts.append("anomalies: " + " ".join(f"{k}={v}" for k, v in an.items()))
        if self.info:
            parts.append("info: " + " ".join(f"{k}={v}" for k, v in sorted(self.info.items())))
        return " ".join(parts)

    def details(self) -> str:
        out = []
        for kind, ex in self.examples.items():
            out.append(f"{kind} ({self.anomalies[kind]}):")
            out.extend("  " + e for e in ex)
        return "\n".join(out)


def _fmt(op: Dict, t0: int) -> str:
    end = "never" if op.get("end") is None else f"{(op['end'] - t0) / 1e9:.3f}"
    s = f"{op['proc']} {op['op']} {op['key']} [{(op['start'] - t0) / 1e9:.3f}, {end}]"
    if op.get("ver") is not None:
        s += f" v={op['ver']:x}"
    if op.get("rc") is not None:
        s += f" rc={op['rc']}"
    if op.get("res"):
        r = op["res"]
        s += f" -> {r.get('st')}" + (f" v={r['v']:x}" if r.get("v") is not None else "")
        if r.get("fk"):
            s += f" of {r['fk']}"
    return s


def _losing_fault(faults: List[Dict], after: int, before: int) -> Optional[Dict]:
    """A fault that may drop data and may have struck in (after, before)."""
    for f in faults:
        if f.get("loses") and f["start"] < before and \
                (f.get("lose_until") or f.get("end") or f["start"]) > after:
            return f
    return None


def check(ops: List[Dict], faults: List[Dict], *, hang_ns: int,
          t0: Optional[int] = None) -> Report:
    """Check a history.  ``hang_ns``: the longest an operation may take.
    ``t0``: the origin of the times printed in examples."""
    rep = Report()
    if t0 is None:
        t0 = min([o["start"] for o in ops] + [f["start"] for f in faults] + [0])
    for f in faults:
        if f["kind"] == "eviction":       # not injected: the master's own
            rep.info["evicted_objects"] += f.get("count", 1)
        else:
            rep.faults[f["kind"]] += 1
    killed = {f["proc"] for f in faults if f.get("proc")}

    writes: Dict[Tuple[str, int], Dict] = {}
    by_key: Dict[str, List[Dict]] = defaultdict(list)
    observed = set()
    for o in ops:
        rep.stats["op:" + o["op"]] += 1
        by_key[o["key"]].append(o)
        if o["op"] in WRITES:
            writes[(o["key"], o["ver"])] = o
            if o.get("rc") == 0:
                rep.stats["acked_writes"] += 1
        if o["op"] in READS and o.get("res", {}).get("st") == "ok":
            observed.add((o["key"], o["res"]["v"]))

    # hung operations
    longest = max([o["end"] - o["start"] for o in ops if o.get("end") is not None] + [0])
    rep.info["longest_op_ms"] = longest // 1_000_000
    for o in ops:
        if o.get("end") is None:
            if o["proc"].split("/")[0] in killed:
                rep.info["killed_in_flight"] += 1
            else:
                rep.flag("hung", _fmt(o, t0) + " (never returned)")
        elif o["end"] - o["start"] > hang_ns:
            rep.flag("hung", _fmt(o, t0) + f" took {(o['end'] - o['start']) / 1e9:.1f}s")

    # X ops per key ("effective": ordered, known to have taken effect),
    # sorted by start, with the suffix minimum of their ends
    eff: Dict[str, Tuple[List[int], List[int], List[Dict]]] = {}
    for key, kops in by_key.items():
        xs = [o for o in kops if o.get("end") is not None and (
            (o["op"] == "upsert" and o.get("rc") == 0) or
            (o["op"] == "remove" and o.get("rc") == 0) or
            (o["op"] == "put" and (key, o["ver"]) in observed))]
        xs.sort(key=lambda o: o["start"])
        starts = [o["start"] for o in xs]
        sufmin = [0] * len(xs)
        best = None
        for i in range(len(xs) - 1, -1, -1):
            if best is None or xs[i]["end"] < xs[best]["end"]:
                best = i
            sufmin[i] = best
        eff[key] = (starts, sufmin, xs)

    for o in ops:
        if o["op"] not in READS:
            continue
        res = o.get("res") or {}
        st = res.get("st")
        if st is None or o.get("end") is None:
            continue                      # never returned: counted above
        if st == "miss":
            rep.stats["reads_miss"] += 1
            continue
        if st == "foreign":
            rep.flag("wrong_key", _fmt(o, t0))
            continue
        if st in ("torn", "garbage"):
            rep.flag(st, _fmt(o, t0) + f" {res.get('head', '')[:96]}")
            continue
        rep.stats["reads_ok"] += 1
        w = writes.get((o["key"], res["v"]))
        if w is None:
            rep.flag("phantom", _fmt(o, t0) + " (no write wrote it)")
            continue
        if o.get("end") is not None and w["start"] > o["end"]:
            rep.flag("phantom", _fmt(o, t0) + " (written after the read ended: "
                     + _fmt(w, t0) + ")")
            continue
        if w.get("end") is None:
            continue                      # its write never ended: nothing is after it
        starts, sufmin, xs = eff[o["key"]]
        i = bisect.bisect_right(starts, w["end"])
        if i < len(xs):
            x = xs[sufmin[i]]
            if x["end"] < o["start"] and x is not w:
                rep.flag("stale", _fmt(o, t0) + " after " + _fmt(x, t0) +
                         " (the value's write: " + _fmt(w, t0) + ")")

    # lost acknowledged writes: final reads that found nothing
    for o in ops:
        if o["op"] != "final" or (o.get("res") or {}).get("st") != "miss":
            continue
        if o.get("rc") != NOT_FOUND:
            rep.info["final_unavailable"] += 1
            continue
        kops = by_key[o["key"]]
        removers = [d for d in kops if d.get("start", 0) < o["start"] and (
            (d["op"] == "remove" and d.get("rc") not in NO_EFFECT_REMOVE) or
            (d["op"] == "upsert" and d.get("rc") != 0))]
        acked = [a for a in kops if a["op"] in WRITES and a.get("rc") == 0 and
                 a.get("end") is not None and a["end"] < o["start"]]
        survivors = [a for a in acked
                     if all(d.get("end") is not None and d["end"] < a["start"]
                            for d in removers)]
        if not survivors:
            continue
        a = max(survivors, key=lambda a: a["end"])
        f = _losing_fault(faults, a["start"], o["start"])
        if f is not None:
            rep.info["lost_explained"] += 1
            rep.info[f"lost_explained_by_{f['kind']}"] += 1
            continue
        rep.lost_keys.add(o["key"])
        rep.flag("lost", _fmt(o, t0) + " after " + _fmt(a, t0))
    return rep


def load_history(paths: Iterable[str]) -> List[Dict]:
    """The operations of the workers' history files: each file holds an
    "i" (invoked) line per operation, written before the call, and a "c"
    (completed) line after it; an operation without one never returned.
    A get_batch's lines carry one key list and one result per key."""
    ops: List[Dict] = []
    for path in paths:
        pending: Dict[int, Dict] = {}
        order: List[int] = []
        try:
            f = open(path)
        except FileNotFoundError:
            continue
        with f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue              # a line cut by a kill
                if r["t"] == "i":
                    pending[r["n"]] = r
                    order.append(r["n"])
                elif r["t"] == "c" and r["n"] in pending:
                    pending[r["n"]]["c"] = r
        for n in order:
            r = pending[n]
            c = r.get("c", {})
            keys = r["ks"] if "ks" in r else [r["k"]]
            results = c.get("rs") if "rs" in c else [c.get("r")]
            for i, key in enumerate(keys):
                op = {"proc": r["p"], "op": r["op"], "key": key, "start": r["s"],
                      "end": c.get("e"), "rc": c.get("rc")}
                if "v" in r:
                    op["ver"] = r["v"]
                if "f" in r:
                    op["force"] = r["f"]
                if r["op"] in READS and c:
                    op["res"] = results[i] if results and i < len(results) else None
                    if isinstance(c.get("rcs"), list):
                        op["rc"] = c["rcs"][i]
                ops.append(op)
    return ops

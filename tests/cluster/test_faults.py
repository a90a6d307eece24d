# SPDX-License-Identifier: Apache-2.0
"""The store under faults: a random history of put, upsert, remove and
reads by four client processes (two threads each) on twelve shared keys,
while masters are killed and stopped, holders killed, stopped past their
leases, cut off from the masters and from each other (faults.py), then
checked (checker.py).  One run per master mode:

* plain    one master without durability: its restart loses every object
           by design (those losses are counted, not flagged);
* durable  one master with its operation log and snapshots
           (--enable_snapshot --enable_snapshot_restore, docs/ha.md): a
           restart loses nothing that was acknowledged;
* ha       two masters on a real etcd with the log shipped through it
           (docs/ha.md, "Takeover with the full index").

In every mode no read may return another key's bytes, a torn value, a
version nobody wrote, or a version older than one whose write (or a
remove) was acknowledged before the read began; no operation may hang
past 60 s; no process may crash; and a forced remove of every key (while
a reader holds a lease on each) leaves the master holding no bytes at once
(held_bytes), nor any key or byte once the leases have run out
(leaked_bytes).  With durability no acknowledged write may be lost.

MC_FAULTS_SECONDS sets how long faults are injected per mode (default 20;
``make check-faults-long`` runs 300), MC_FAULTS_SEED fixes the fault
schedule and the workload's choices (timing still varies).  Each run
prints a summary line (ops, faults by kind, anomalies by kind) at the end
of the session and leaves its logs, hist/*.jsonl and run.json in its
tmp_path, or under $MC_FAULTS_DIR when that is set.  A worker that
crashes is reported with its log's end (every thread's Python stack) and,
where gdb is installed, every thread's C backtrace from its core.
"""

import os
import random

import pytest

from conftest import FAULT_SUMMARIES
from faults import ETCD

SECONDS = float(os.environ.get("MC_FAULTS_SECONDS", "20"))
SEED = os.environ.get("MC_FAULTS_SEED")
ALWAYS = ("wrong_key", "torn", "garbage", "phantom", "stale", "hung")


@pytest.mark.parametrize("mode", ["plain", "durable", "ha"])
def test_no_wrong_or_old_bytes_under_faults(fault_run, mode):
    if mode == "ha" and not os.access(ETCD, os.X_OK):
        pytest.skip("etcd is not installed (scripts/deps.sh installs etcd-server)")
    seed = int(SEED) if SEED else random.randrange(1 << 30)
    run = fault_run(mode, seed)
    run.inject(SECONDS)
    res = run.finish()
    rep = res["report"]
    FAULT_SUMMARIES.append(res["summary"])
    print(res["summary"])
    must = ALWAYS + (("lost",) if mode != "plain" else ())
    bad = {k: rep.anomalies[k] for k in must if rep.anomalies[k]}
    for k in ("held_bytes", "leaked_bytes", "keys_left"):
        if res[k]:
            bad[k] = res[k]
    if res["crashes"]:
        bad["crash"] = res["crashes"]
    if res["no_same_host_path"]:
        bad["no_same_host_path"] = res["no_same_host_path"]
    assert not bad, (f"{res['summary']}\n{rep.details()}\n"
                     f"(logs and run.json in {run.dir})")

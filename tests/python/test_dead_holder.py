# SPDX-License-Identifier: Apache-2.0
"""Puts fail fast around a dead holder.

A holder is killed with SIGKILL while another client puts in a loop (the
master's --client_ttl is long, so the holder is not expired during the
test).  No put (single or batch) takes more than a few seconds; a put
whose transfer fails is revoked and placed once more (each failed key of a
batch too); once the holder has missed its
heartbeats (--client_suspect_heartbeats, about 2.5 s) the master places
nothing on it, so every later put succeeds; and every put that returned 0
after the kill reads back its bytes.
"""

import os
import time

from helpers import Master, MiB

MAX_PUT_S = 3.0
SUSPECT_S = 3.5          # 2 missed 1 s heartbeats + 0.5 s slack, + margin


def test_puts_fail_fast_and_stop_going_to_a_killed_holder(spawn_client):
    m = Master(extra_args=["--client_ttl=30"])
    try:
        from mooncake.store import MooncakeDistributedStore
        holder = spawn_client("holder")
        holder.setup(m, segment=64 * MiB)
        s = MooncakeDistributedStore()
        assert s.setup("localhost", "P2PHANDSHAKE", 96 * MiB, 16 * MiB, "tcp", "", m.addr) == 0
        try:
            results = []                         # (key, value, rc, seconds, since kill)
            t_kill = None
            t0 = time.monotonic()
            i = 0
            while True:
                now = time.monotonic()
                if t_kill is None and now - t0 > 1.0:
                    holder.kill()
                    t_kill = time.monotonic()
                if t_kill is not None and now - t_kill > SUSPECT_S + 2.5:
                    break
                a = time.monotonic()
                if i % 4 == 3:                   # a batch of 4 now and then
                    ks = [f"dead-holder-{i}-{j}" for j in range(4)]
                    vs = [os.urandom(4096) for _ in ks]
                    rc = s.put_batch(ks, vs)
                else:
                    ks, vs = [f"dead-holder-{i}"], [os.urandom(4096)]
                    rc = s.put(ks[0], vs[0])
                took = time.monotonic() - a
                for k, v in zip(ks, vs):
                    results.append((k, v, rc, took, None if t_kill is None else a - t_kill))
                i += 1
                time.sleep(0.002)
            worst = max(r[3] for r in results)
            assert worst < MAX_PUT_S, f"a put took {worst:.2f}s"
            after = [r for r in results if r[4] is not None]
            late = [r for r in after if r[4] > SUSPECT_S]
            assert len(late) > 50, len(late)
            late_failed = [(round(r[4], 2), r[2]) for r in late if r[2] != 0]
            assert not late_failed, f"puts still failing after the holder went quiet: " \
                                    f"{late_failed[:10]} of {len(late)}"
            wrong = [r[0] for r in after if r[2] == 0 and s.get(r[0]) != r[1]]
            assert not wrong, f"{len(wrong)} puts returned 0 without their bytes: {wrong[:5]}"
        finally:
            s.close()
    finally:
        m.stop()

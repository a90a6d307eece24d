#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Failover time: how long after kill -9 of the leader master a client that
follows ``etcd://`` puts again.

Starts one etcd member and two ``mooncake_master --enable_ha`` on free
loopback ports, and one store client (tests/python/client_proc.py) set up
with ``master_server_address=etcd://...``.  Each round kills the leader
with SIGKILL, times the first successful put after the kill (the client
finds the new leader in etcd and remounts its segment there by itself),
then starts a fresh standby in place of the dead master.  It prints every
round and p50/p99 over the rounds.

The failover time is bounded below by the lease: etcd lets the dead
leader's key go at most --ttl seconds after its last renewal, and the
standby polls for it every 200 ms.

With --ship the masters ship their operation log through etcd
(--enable_snapshot_restore, docs/ha.md): each new leader takes over with
the full index, and after every failover every key put so far must read
back intact.

    bench/failover_bench.py [--build-dir build] [--kills 20] [--ttl 2] [--ship]
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.path.dirname(HERE)


def pct(sorted_vals, p):
    i = min(len(sorted_vals) - 1, int(round((len(sorted_vals) - 1) * p / 100.0)))
    return sorted_vals[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(SRCDIR, "build"))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--ttl", type=int, default=2, help="leader lease TTL, seconds (>= 2)")
    ap.add_argument("--ship", action="store_true",
                    help="ship the operation log through etcd; check every key after each kill")
    o = ap.parse_args()
    build = os.path.abspath(o.build_dir)
    os.environ.setdefault("MC_MASTER_BIN", os.path.join(build, "mooncake_master"))
    os.environ["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + \
        os.environ.get("PYTHONPATH", "")
    os.environ["LD_LIBRARY_PATH"] = os.path.join(build, ".libs") + os.pathsep + \
        os.environ.get("LD_LIBRARY_PATH", "")
    os.environ.setdefault("MC_LOG_LEVEL", "error")
    sys.path.insert(0, os.path.join(SRCDIR, "tests", "python"))
    from ha_helpers import EtcdCluster, HaMaster, have_etcd, stop_all, wait_leader
    from helpers import MiB, ClientProc, wait_until

    if not have_etcd():
        sys.exit("failover_bench: etcd is not installed (apt-get install etcd-server)")
    etcd = EtcdCluster(1)
    masters = []
    client = None
    times = []
    tmp = tempfile.TemporaryDirectory(prefix="failover_bench-")
    seq = [0]

    def master():
        seq[0] += 1
        extra = ["--enable_snapshot=true", "--enable_snapshot_restore=true",
                 f"--snapshot_backup_dir={tmp.name}/{seq[0]}"] if o.ship else []
        return HaMaster(etcd, ttl_s=o.ttl, extra_args=extra)

    try:
        masters += [master(), master()]
        wait_leader(masters, 15.0)
        client = ClientProc("bench", env={"MC_STORE_HEARTBEAT_MS": "200"})
        r = client.call("setup", args=["localhost", "P2PHANDSHAKE", 16 * MiB, 8 * MiB, "tcp",
                                       "", f"etcd://{etcd.endpoints}"])
        if r["rc"] != 0:
            sys.exit("failover_bench: client setup failed\n" + client.log_text())
        value = (b"v" * 256).hex()
        print(f"failover after kill -9 of the leader (lease {o.ttl} s, {o.kills} kills"
              f"{', operation log shipped through etcd' if o.ship else ''})")
        for i in range(o.kills):
            leader = wait_leader(masters, 15.0)
            leader.kill()
            t0 = time.monotonic()
            masters.remove(leader)
            wait_until(lambda: client.call("put", key=f"k{i}", hex=value, timeout=60)["rc"] == 0,
                       60.0, "a put after the failover", interval=0.02)
            took = time.monotonic() - t0
            times.append(took)
            print(f"  kill {i + 1:2d}: writes resumed after {took:6.3f} s", flush=True)
            if o.ship:
                lost = [j for j in range(i + 1)
                        if client.call("get", key=f"k{j}").get("hex") != value]
                if lost:
                    sys.exit(f"failover_bench: keys lost after kill {i + 1}: {lost}")
            leader.stop()
            masters.append(master())
        s = sorted(times)
        print(f"failover time over {len(s)} kills: p50 {pct(s, 50):.3f} s, "
              f"p99 {pct(s, 99):.3f} s, min {s[0]:.3f} s, max {s[-1]:.3f} s "
              f"(lease TTL {o.ttl} s: p50/TTL = {pct(s, 50) / o.ttl:.2f})")
        if o.ship:
            print(f"every key put so far read back intact after each of the {len(s)} kills")
    finally:
        if client is not None:
            client.stop()
        stop_all(masters)
        etcd.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()

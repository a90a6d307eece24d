#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# RDMA checks for hosts with RDMA NICs (tests/rdma/README.md):
#   tests/rdma/run.sh [rdma_devices]                  one host: build, device-free suites,
#                                                      discovery, protocol "rdma" sets up
#   tests/rdma/run.sh serve HOST [rdma_devices]       host A: serve a buffer over RDMA
#   tests/rdma/run.sh peer SEGMENT [rdma_devices]     host B: put/get/batch against A's
#                                                      SEGMENT (printed by serve), bandwidth
#   tests/rdma/run.sh selftest                        both sides over tcp on loopback (checks
#                                                      the script itself on any host)
# Builds the tree when build/ has no library yet (configure must find
# libibverbs: apt-get install libibverbs-dev).  Each mode
# prints PASS or FAIL on its last line and exits 0 only on PASS.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$src/build}
py=${PYTHON:-/usr/bin/python3}
mode=single
case "${1:-}" in
serve|peer|selftest) mode=$1; shift ;;
esac

if [ ! -e "$build/.libs/libmooncake.so" ]; then
    BUILD_DIR=$build CONFIGURE_FLAGS="--with-rdma --enable-python" "$src/scripts/build.sh" \
        >"${TMPDIR:-/tmp}/mc-rdma-build.log" 2>&1 || { tail -40 "${TMPDIR:-/tmp}/mc-rdma-build.log"; echo "run.sh: FAIL (build)"; exit 1; }
fi
export PYTHONPATH=$build/python
export LD_LIBRARY_PATH=$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# serve / peer: the two-host round trip; the engines' log must show the
# RDMA connection and no fallback to tcp
pair() {
    log=${TMPDIR:-/tmp}/mc-rdma-$1-$$.log
    rc=0
    MC_LOG_LEVEL=${MC_LOG_LEVEL:-info} "$py" "$src/tests/rdma/rdma_pair.py" "$@" 2>"$log" || rc=$?
    if [ "$rc" -eq 0 ] && [ "${MC_RDMA_PAIR_PROTOCOL:-rdma}" = rdma ]; then
        if [ "$1" = peer ] && ! grep -q "rdma: connected to" "$log"; then
            echo "run.sh: no RDMA connection was logged ($log)"; rc=1
        fi
        if grep -q "go over tcp" "$log"; then
            grep "go over tcp" "$log" | head -3; rc=1
        fi
    fi
    grep -E "rdma: |error" "$log" | head -20 || true
    if [ "$rc" -eq 0 ]; then echo "run.sh: $1 PASS"; else echo "run.sh: $1 FAIL (log $log)"; fi
    return "$rc"
}

case $mode in
serve) pair serve "$@"; exit $? ;;
peer)  pair peer "$@"; exit $? ;;
selftest)
    out=${TMPDIR:-/tmp}/mc-rdma-selftest-$$.out
    export MC_RDMA_PAIR_MB=${MC_RDMA_PAIR_MB:-8}
    MC_RDMA_PAIR_PROTOCOL=tcp MC_RDMA_PAIR_WAIT=120 pair serve 127.0.0.1 >"$out" &
    spid=$!
    seg=
    for _ in $(seq 1 1200); do   # at most 120 s: a loaded host starts Python slowly
        seg=$(sed -n 's/^rdma_pair: serving \([^ ]*\) .*/\1/p' "$out")
        [ -n "$seg" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$seg" ]; then kill "$spid" 2>/dev/null || true; cat "$out"; echo "run.sh: selftest FAIL"; exit 1; fi
    prc=0
    MC_RDMA_PAIR_PROTOCOL=tcp MC_RDMA_PAIR_HOST=127.0.0.1 pair peer "$seg" || prc=$?
    src_rc=0
    wait "$spid" || src_rc=$?
    cat "$out"
    if [ "$prc" -eq 0 ] && [ "$src_rc" -eq 0 ]; then echo "run.sh: selftest PASS"; exit 0; fi
    echo "run.sh: selftest FAIL"; exit 1 ;;
esac

devices=${1:-}
grep -q 'define MC_HAVE_RDMA 1' "$build/config.h" || { echo "run.sh: $build was configured without RDMA"; echo "run.sh: FAIL"; exit 1; }
make -C "$build" -s tests/unit/check_all >/dev/null
for s in rdma rdma_path; do
    CK_RUN_SUITE=$s MC_LOG_LEVEL=error "$build/tests/unit/check_all" || { echo "run.sh: FAIL (suite $s)"; exit 1; }
done

echo "run.sh: NICs under /sys/class/infiniband:"
for d in /sys/class/infiniband/*; do
    [ -e "$d" ] || { echo "  none"; break; }
    echo "  $(basename "$d"): numa $(cat "$d/device/numa_node" 2>/dev/null || echo ?)," \
        "port 1 $(cat "$d/ports/1/state" 2>/dev/null || echo ?)," \
        "$(cat "$d/ports/1/link_layer" 2>/dev/null || echo ?)"
done
MC_RDMA_DEVICES=$devices MC_LOG_LEVEL=${MC_LOG_LEVEL:-info} "$py" - <<'PY' && echo "run.sh: PASS" || { echo "run.sh: FAIL"; exit 1; }
import os, sys
from mooncake.engine import TransferEngine
from mooncake.store import last_error_detail
e = TransferEngine()
rc = e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", os.environ["MC_RDMA_DEVICES"])
print(f"run.sh: initialize(protocol=rdma, devices={os.environ['MC_RDMA_DEVICES']!r}) = {rc}"
      + ("" if rc == 0 else f": {last_error_detail()}"))
sys.exit(0 if rc == 0 else 1)
PY

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# RDMA checks for a host with RDMA NICs (tests/rdma/README.md):
#   tests/rdma/run.sh [rdma_devices]
# Builds the tree when build/ has no library yet (configure must find
# libibverbs: apt-get install libibverbs-dev librdmacm-dev), runs the
# device-free Check suite, then asks the engine for protocol "rdma" with
# the given NIC list (default: auto-discovery) and reports what it found.
# Exit 0 when the NICs were discovered and opened with libibverbs.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$src/build}
py=${PYTHON:-/usr/bin/python3}
devices=${1:-}

if [ ! -e "$build/.libs/libmooncake.so" ]; then
    BUILD_DIR=$build CONFIGURE_FLAGS="--with-rdma --enable-python" "$src/scripts/build.sh" \
        >"${TMPDIR:-/tmp}/mc-rdma-build.log" 2>&1 || { tail -40 "${TMPDIR:-/tmp}/mc-rdma-build.log"; exit 1; }
fi
grep -q 'define MC_HAVE_RDMA 1' "$build/config.h" || { echo "run.sh: $build was configured without RDMA" >&2; exit 1; }
make -C "$build" -s tests/unit/check_all >/dev/null
CK_RUN_SUITE=rdma MC_LOG_LEVEL=error "$build/tests/unit/check_all"

echo "run.sh: NICs under /sys/class/infiniband:"
for d in /sys/class/infiniband/*; do
    [ -e "$d" ] || { echo "  none"; break; }
    echo "  $(basename "$d"): numa $(cat "$d/device/numa_node" 2>/dev/null || echo ?)," \
        "port 1 $(cat "$d/ports/1/state" 2>/dev/null || echo ?)," \
        "$(cat "$d/ports/1/link_layer" 2>/dev/null || echo ?)"
done
PYTHONPATH=$build/python LD_LIBRARY_PATH=$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
MC_RDMA_DEVICES=$devices "$py" - <<'PY'
import os, sys
from mooncake.engine import TransferEngine
from mooncake.store import last_error_detail
e = TransferEngine()
rc = e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", os.environ["MC_RDMA_DEVICES"])
detail = last_error_detail()
print(f"run.sh: initialize(protocol=rdma, devices={os.environ['MC_RDMA_DEVICES']!r}) = {rc}: {detail}")
# today the data path is refused after discovery and the libibverbs checks
sys.exit(0 if "data path is not implemented" in detail else 1)
PY

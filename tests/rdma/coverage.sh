#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Line coverage of libmooncake/transfer/rdma/ and of the one-sided base it
# runs on (libmooncake/transfer/onesided.c, shared with fabric/) from the
# emulated-device run (tests/rdma/README.md):
#   tests/rdma/coverage.sh [build_dir]      (make rdma-coverage)
# Builds with --coverage into its own build directory (default
# build-rdma-cov/), runs the device-free Check suites rdma and rdma_path,
# tests/python/test_rdma_emu.py (the stand-in's own checks, then the
# transport end to end on it) and test_rdma.py's device-free setup tests,
# then prints gcovr's per-file table for those files and the total.
# Exits non-zero when a suite fails, or when the total is below
# MC_RDMA_COV_MIN percent (default 0: report only).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-${BUILD_DIR:-$src/build-rdma-cov}}
py=${PYTHON:-/usr/bin/python3}
min=${MC_RDMA_COV_MIN:-0}

command -v gcovr >/dev/null ||
    { echo "coverage.sh: gcovr is missing (apt-get install gcovr)"; exit 1; }
CFLAGS="-O0 -g --coverage" LDFLAGS="--coverage" BUILD_DIR=$build \
    CONFIGURE_FLAGS="--disable-lua ${CONFIGURE_FLAGS:-}" "$src/scripts/build.sh" >/dev/null
grep -q 'define MC_HAVE_RDMA 1' "$build/config.h" ||
    { echo "coverage.sh: $build has no RDMA transport (libibverbs-dev missing?)"; exit 1; }
make -C "$build" -s tests/unit/check_all >/dev/null
# counters from an earlier run would add up
find "$build" -name '*.gcda' -delete

rc=0
for s in rdma rdma_path; do
    CK_RUN_SUITE=$s MC_MASTER_BIN=$build/mooncake_master MC_LOG_LEVEL=error MC_SRCDIR=$src \
        "$build/tests/unit/check_all" >"$build/cov-check-$s.log" 2>&1 ||
        { tail -20 "$build/cov-check-$s.log"; rc=1; }
done
if ! PYTHONPATH=$build/python LD_LIBRARY_PATH=$build/.libs MC_MASTER_BIN=$build/mooncake_master \
    MC_CLIENT_BIN=$build/mooncake_client PYTHONDONTWRITEBYTECODE=1 \
    "$py" -m pytest -q -p no:cacheprovider "$src/tests/python/test_rdma_emu.py" \
    "$src/tests/python/test_rdma.py" -k "not selftest and not other_transports" \
    >"$build/cov-pytest.log" 2>&1; then
    # the failures and their assertion lines (the log stays in the build directory)
    grep -E "^(FAILED|ERROR)|^E  |^_{5,} .* _{5,}$" "$build/cov-pytest.log" | head -80 || true
    rc=1
fi
tail -1 "$build/cov-pytest.log"
if [ -z "$(find "$build" -name '*-rdma.gcda' -print -quit)" ]; then
    echo "coverage.sh: no counters were written"; exit 1
fi

out=$build/rdma-coverage.txt
gcovr -r "$src" "$build" -f "$src/libmooncake/transfer/rdma/" \
    -f "$src/libmooncake/transfer/onesided.c" --txt >"$out" \
    2>"$build/cov-gcovr.log"
cat "$out"
pct=$(sed -n 's/^TOTAL.* \([0-9][0-9]*\)%$/\1/p' "$out")
echo "coverage.sh: libmooncake/transfer/rdma/ and onesided.c line coverage ${pct:-?}%" \
     "(report, with the lines never run per file: $out)"
if [ -n "$pct" ] && [ "$pct" -lt "$min" ]; then
    echo "coverage.sh: below MC_RDMA_COV_MIN=$min%"; rc=1
fi
exit $rc

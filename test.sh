#!/bin/bash
# Install what is missing, build, and run every test suite:
#   1. Check unit tests (tests/unit) on the regular build
#   2. pytest end-to-end suite (tests/python): real master + client processes,
#      then the cluster suite (tests/cluster: hosts in network namespaces;
#      needs root, skipped otherwise)
#   3. the Lua bindings' busted specs (tests/lua) and the Debian symbols file
#   4. the unit tests and a C end-to-end run under AddressSanitizer + UBSan
#   5. every libFuzzer target (tests/fuzz) for MC_FUZZ_SECONDS (10) each,
#      and the rdma transport's line coverage on the emulated verbs device
#      (tests/rdma/coverage.sh, at least MC_RDMA_COV_MIN (88) percent)
#   6. the Debian packages (tests/packaging/run.sh) and the pip wheel in a
#      bare venv (tests/packaging/wheel.sh), unless MC_SKIP_PACKAGING=1
# The regular build runs 1 and 2 in parallel with the sanitizer build and
# the fuzzers.
# Prints each runner's summary; exits non-zero if anything failed.
set -u
top=$(cd "$(dirname "$0")" && pwd)
cd "$top"

"$top/scripts/deps.sh" || exit 1

# Generate the build system once, before the two builds below start: each
# would otherwise run autogen.sh (or automake's rebuild rules) in this tree
# at the same time, and one configure can find the other's aux files
# half-written ("cannot find required auxiliary files: install-sh").
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ ! -f Makefile.in ] ||
    [ -n "$(find . -path ./build -prune -o -path './build-*' -prune -o \
            \( -name Makefile.am -o -name local.mk \) -newer Makefile.in -print)" ]; then
    ./autogen.sh >/dev/null 2>&1 || { ./autogen.sh; exit 1; }
fi

logdir=$(mktemp -d /tmp/mooncake-test.XXXXXX)
trap 'rm -rf "$logdir"' EXIT
status=0
# a section's header, with the seconds since test.sh started (what the
# 20-minute budget of a 2-core CI machine is spent on)
section() { echo "== $1 (at ${SECONDS} s)"; }

# Sanitizer build in the background: it only needs the CPU while the main
# build is linking or the Python suite waits on sockets.
(
    BUILD_DIR="$top/build-asan" CONFIGURE_FLAGS="--enable-sanitizers --disable-python --disable-lua" \
        "$top/scripts/build.sh" &&
    make -C "$top/build-asan" -j2 tests/unit/check_all >/dev/null &&
    MC_MASTER_BIN="$top/build-asan/mooncake_master" MC_LOG_LEVEL=error MC_SRCDIR="$top" \
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$top/build-asan/tests/unit/check_all" &&
    "$top/tests/c/e2e_hello.sh" "$top/build-asan"
) >"$logdir/asan.log" 2>&1 &
asan_pid=$!

# The fuzzers, built with clang straight from the sources, also in the
# background (exit status 77: no clang with libFuzzer, skipped).  Corpora
# and any crash input stay in build-fuzz/.
"$top/tests/fuzz/build.sh" "${MC_FUZZ_SECONDS:-10}" "$top/build-fuzz" >"$logdir/fuzz.log" 2>&1 &
fuzz_pid=$!

if ! "$top/scripts/build.sh"; then
    wait "$asan_pid" "$fuzz_pid"
    exit 1
fi
make -C "$top/build" -j2 tests/unit/check_all >"$logdir/check-build.log" 2>&1 ||
    { tail -40 "$logdir/check-build.log"; exit 1; }

section "Check unit tests"
# Expected error paths log warnings; keep the summary readable.
MC_MASTER_BIN="$top/build/mooncake_master" MC_LOG_LEVEL=error MC_SRCDIR="$top" \
    "$top/build/tests/unit/check_all" >"$logdir/unit.log" 2>&1 || status=1
grep -E '^[0-9]+%: Checks|:[EF]:' "$logdir/unit.log" || tail -n 40 "$logdir/unit.log"

# A pytest run's summary; when it failed, its failure reports too (each
# test's assertion message names its logs), at most 600 lines of them.
pytest_report() {
    if [ "$2" -eq 0 ]; then
        tail -n 1 "$1"
    else
        sed -n '/^=* FAILURES =*$/,/^=* short test summary info =*$/p' "$1" | head -n 600
        tail -n 30 "$1"
    fi
}

section "pytest end-to-end suite"
rc=0
make -C "$top/build" --no-print-directory check-python >"$logdir/python.log" 2>&1 || rc=$?
pytest_report "$logdir/python.log" "$rc"
[ "$rc" -eq 0 ] || status=1

# Line coverage of the rdma transport on the emulated verbs device
# (tests/rdma/coverage.sh: its own --coverage build, the rdma suites and
# test_rdma_emu.py), in the background while the cluster and Lua suites
# mostly wait on sockets; below MC_RDMA_COV_MIN percent fails.
MC_RDMA_COV_MIN=${MC_RDMA_COV_MIN:-88} "$top/tests/rdma/coverage.sh" "$top/build-rdma-cov" \
    >"$logdir/rdmacov.log" 2>&1 &
cov_pid=$!

section "cluster suite (network namespaces)"
rc=0
make -C "$top/build" --no-print-directory check-cluster >"$logdir/cluster.log" 2>&1 || rc=$?
# the fault runs' summary lines are the suite's record: keep them
grep -E '^faults\[' "$logdir/cluster.log" || true
pytest_report "$logdir/cluster.log" "$rc"
[ "$rc" -eq 0 ] || status=1

section "Lua bindings (busted)"
make -C "$top/build" --no-print-directory check-lua 2>&1 | tail -n 15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

section "Debian symbols file against the version script and the library"
"$top/tests/packaging/check-symbols.sh" "$top/build/.libs/libmooncake.so" || status=1

section "sanitizer build (ASan + UBSan): unit tests and C end-to-end"
if wait "$asan_pid"; then
    grep -E '^[0-9]+%: Checks|^e2e:' "$logdir/asan.log"
else
    tail -n 60 "$logdir/asan.log"
    status=1
fi

section "fuzzers (libFuzzer, ${MC_FUZZ_SECONDS:-10} s each)"
wait "$fuzz_pid"
fuzz_rc=$?
if [ "$fuzz_rc" -eq 0 ]; then
    grep -E '^build.sh: running|Done [0-9]+ runs' "$logdir/fuzz.log"
elif [ "$fuzz_rc" -eq 77 ]; then
    echo "fuzzers skipped: no clang with -fsanitize=fuzzer"
else
    tail -n 60 "$logdir/fuzz.log"
    status=1
fi

section "rdma transport line coverage (emulated verbs device)"
if wait "$cov_pid"; then
    grep -E '^coverage.sh:|passed' "$logdir/rdmacov.log"
else
    tail -n 40 "$logdir/rdmacov.log"
    status=1
fi

# Last, alone on the machine: the Debian packages built, linted, installed,
# used and purged (about 3-4 minutes on 2 cores; MC_SKIP_PACKAGING=1 skips).
if [ "${MC_SKIP_PACKAGING:-0}" != 1 ]; then
    section "Debian packages (tests/packaging/run.sh)"
    if "$top/tests/packaging/run.sh" >"$logdir/packaging.log" 2>&1; then
        grep '^packaging: all checks' "$logdir/packaging.log"
    else
        tail -n 60 "$logdir/packaging.log"
        status=1
    fi
    # the wheel from the regular build, after the packages are purged
    # (about 10 s; no root needed)
    section "pip wheel in a bare venv (tests/packaging/wheel.sh)"
    if "$top/tests/packaging/wheel.sh" "$top/build" >"$logdir/wheel.log" 2>&1; then
        grep '^wheel: all checks' "$logdir/wheel.log"
    else
        tail -n 60 "$logdir/wheel.log"
        status=1
    fi
fi

if [ "$status" -eq 0 ]; then echo "test.sh: all suites passed in ${SECONDS} s"; else echo "test.sh: FAILED after ${SECONDS} s"; fi
exit "$status"

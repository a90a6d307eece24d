#!/bin/bash
# C end-to-end run: a real mooncake_master and real examples/hello client
# processes from BUILD_DIR (used on the sanitizer build, where any leak or
# undefined behaviour in the daemon or the library aborts the run).
#   tests/c/e2e_hello.sh BUILD_DIR
# One process puts a value and keeps serving it; another reads it back over
# TCP, in both metadata modes; then the owner closes and the key is gone.
set -eu
build=$(cd "${1:?usage: e2e_hello.sh BUILD_DIR}" && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LD_LIBRARY_PATH="$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Two distinct free ports from the pytest helper (drawn below the ephemeral
# range, so the suites running beside this one cannot take them).
read -r rpc http < <(PYTHONPATH="$(dirname "$0")/../python" /usr/bin/python3 -c \
    'from helpers import free_port; print(free_port(), free_port())')
work=$(mktemp -d /tmp/mooncake-e2e.XXXXXX)
master_pid=
owner_pid=
cleanup() {
    [ -n "$owner_pid" ] && kill "$owner_pid" 2>/dev/null
    if [ -n "$master_pid" ]; then
        kill -TERM "$master_pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$master_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$master_pid" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"$build/mooncake_master" --port="$rpc" --rpc_address=127.0.0.1 \
    --enable_http_metadata_server=true --http_metadata_server_host=127.0.0.1 \
    --http_metadata_server_port="$http" --client_ttl=5 >"$work/master.log" 2>&1 &
master_pid=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$rpc") 2>/dev/null && break
    sleep 0.1
done

hello="$build/examples/hello"
for md in P2PHANDSHAKE "http://127.0.0.1:$http/metadata"; do
    opts=(--master "127.0.0.1:$rpc" --metadata "$md")
    key="e2e-$RANDOM"
    value="value-$RANDOM-$md"
    # The owner keeps serving until its stdin closes.
    mkfifo "$work/stdin"
    "$hello" "${opts[@]}" put "$key" "$value" <"$work/stdin" >"$work/owner.out" 2>&1 &
    owner_pid=$!
    exec 4>"$work/stdin"
    for _ in $(seq 100); do
        [ "$("$hello" "${opts[@]}" --segment 0 exist "$key" 2>/dev/null)" = 1 ] && break
        sleep 0.1
    done
    got=$("$hello" "${opts[@]}" --segment 0 get "$key")
    [ "$got" = "$key = $value" ] || { echo "e2e: $md: got '$got', want '$key = $value'"; exit 1; }
    exec 4>&-
    wait "$owner_pid" || { cat "$work/owner.out"; exit 1; }
    owner_pid=
    rm -f "$work/stdin"
    [ "$("$hello" "${opts[@]}" --segment 0 exist "$key")" = 0 ] ||
        { echo "e2e: $md: key survived its owner's close"; exit 1; }
    "$hello" "${opts[@]}" >"$work/hello.out"
    grep -q "Hello, Mooncake Store!" "$work/hello.out" || { cat "$work/hello.out"; exit 1; }
    echo "e2e: $md: put/get across processes, close removes, hello ok"
done

kill -TERM "$master_pid"
wait "$master_pid" || { echo "e2e: master exited with $?"; cat "$work/master.log"; exit 1; }
master_pid=
echo "e2e: master shut down cleanly"

#!/bin/bash
# From a fresh Debian machine to a working store in one command:
# installs the missing packages, builds, starts mooncake_master on loopback
# (RPC 50051, HTTP metadata 8080), runs the Hello World and the P2P Hello
# World from the Python API documentation, prints what they print, and
# stops the master again.  Safe to run more than once.
set -eu
top=$(cd "$(dirname "$0")" && pwd)
cd "$top"

"$top/scripts/deps.sh"
"$top/scripts/build.sh"

build="$top/build"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

for port in 50051 8080; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "quickstart: port $port on 127.0.0.1 is already in use; stop what listens there first" >&2
        exit 1
    fi
done

log=$(mktemp /tmp/mooncake-master.XXXXXX.log)
"$build/mooncake_master" --rpc_address=127.0.0.1 \
    --enable_http_metadata_server=true \
    --http_metadata_server_host=127.0.0.1 \
    --http_metadata_server_port=8080 >"$log" 2>&1 &
master=$!
cleanup() {
    kill -TERM "$master" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$master" 2>/dev/null || true
    wait "$master" 2>/dev/null || true
}
trap cleanup EXIT

# Wait (bounded) until both the RPC port and the metadata server answer.
for _ in $(seq 100); do
    if (exec 3<>/dev/tcp/127.0.0.1/50051) 2>/dev/null &&
       curl -fsS http://127.0.0.1:8080/health >/dev/null 2>&1; then
        break
    fi
    kill -0 "$master" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
done
echo "quickstart: mooncake_master (pid $master) listening on 127.0.0.1:50051, metadata on :8080"

echo "== examples/hello.py (HTTP metadata)"
/usr/bin/python3 "$top/examples/hello.py"
echo "== examples/p2p_hello.py (P2P handshake)"
/usr/bin/python3 "$top/examples/p2p_hello.py"
echo "quickstart: done; the master log was $log"

#!/bin/bash
# From a fresh Debian machine to a working store in one command:
# installs the missing packages, builds, starts mooncake_master on loopback
# (RPC 50051, HTTP metadata 8080), runs the Hello World and the P2P Hello
# World from the Python API documentation, then starts a mooncake_client
# daemon next to it (port 50052: dummy clients dial @mooncake_client_50052.sock)
# and runs the dummy-client Hello World, prints what they print, and stops
# the daemon and the master again.  Safe to run more than once.
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
if grep -q '@mooncake_client_50052\.sock$' /proc/net/unix 2>/dev/null; then
    echo "quickstart: a mooncake_client already serves @mooncake_client_50052.sock; stop it first" >&2
    exit 1
fi

log=$(mktemp /tmp/mooncake-master.XXXXXX.log)
"$build/mooncake_master" --rpc_address=127.0.0.1 \
    --enable_http_metadata_server=true \
    --http_metadata_server_host=127.0.0.1 \
    --http_metadata_server_port=8080 >"$log" 2>&1 &
master=$!
client=
# SIGTERM, then SIGKILL after 5 s
stop() {
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
cleanup() {
    if [ -n "$client" ]; then stop "$client"; fi
    stop "$master"
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

# A mooncake_client daemon holds this host's memory for dummy clients.
clog=$(mktemp /tmp/mooncake-client.XXXXXX.log)
"$build/mooncake_client" --host=127.0.0.1 \
    --master_server_address=127.0.0.1:50051 \
    --metadata_server=http://127.0.0.1:8080/metadata \
    --port=50052 --global_segment_size=256MB >"$clog" 2>&1 &
client=$!
for _ in $(seq 100); do
    grep -q ' ready; ' "$clog" && break
    kill -0 "$client" 2>/dev/null || { cat "$clog"; exit 1; }
    sleep 0.1
done
grep -q ' ready; ' "$clog" || { echo "quickstart: mooncake_client did not start" >&2; cat "$clog"; exit 1; }
echo "quickstart: mooncake_client (pid $client) serving dummy clients on @mooncake_client_50052.sock"
echo "== examples/dummy_hello.py (dummy client of mooncake_client)"
/usr/bin/python3 "$top/examples/dummy_hello.py"
stop "$client"
client=
echo "quickstart: done; the master log was $log, the mooncake_client log $clog"

# SPDX-License-Identifier: Apache-2.0
# Shared by tests/packaging/run.sh and wheel.sh (sourced): loopback ports
# and waiting for a master they started.  The caller defines die().

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
accepts() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_master PID LOG PORT...: until the master PID accepts on every PORT
# (at most 10 s); fails with its log when it exits or never listens.
wait_master() {
    local pid=$1 logf=$2 p ok
    shift 2
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || { cat "$logf"; die "the master exited"; }
        ok=1
        for p in "$@"; do accepts "$p" || { ok=0; break; }; done
        [ "$ok" = 1 ] && return 0
        sleep 0.05
    done
    cat "$logf"
    die "the master does not listen"
}

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# GPU checks of docs/cuda.md on a machine with an NVIDIA GPU, libcudart and
# torch (CUDA build): builds the tree when build/ has no library yet,
# starts a master on a free port, runs tests/gpu/gpu_check.py with
# MC_STORE_PIN_MEMORY_MAX_BYTES=1GB, stops the master.  One command:
#
#   tests/gpu/run.sh            (a few minutes with the build, seconds without)
#
# Exit 0 when every check passed; 77 when there is no GPU.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$src/build}
py=${PYTHON:-/usr/bin/python3}

if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "run.sh: torch sees no GPU; skipping" >&2
    exit 77
fi
if [ ! -e "$build/.libs/libmooncake.so" ] || [ ! -x "$build/mooncake_master" ]; then
    BUILD_DIR=$build CONFIGURE_FLAGS="--enable-python" "$src/scripts/build.sh" >"${TMPDIR:-/tmp}/mc-gpu-build.log" 2>&1 ||
        { tail -40 "${TMPDIR:-/tmp}/mc-gpu-build.log"; exit 1; }
fi
# the runtime: MC_CUDART_PATH, else the system's, else the one torch ships
if [ -z "${MC_CUDART_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so'; then
    MC_CUDART_PATH=$("$py" - <<'PY' 2>/dev/null || true
import glob, os, torch
roots = [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [p for r in roots for p in glob.glob(os.path.join(r, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))]
hits += glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart*.so*"))
print(hits[0] if hits else "")
PY
)
    export MC_CUDART_PATH
    echo "run.sh: MC_CUDART_PATH=$MC_CUDART_PATH"
fi
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mport=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$build/mooncake_master" --rpc_port="$port" --rpc_address=127.0.0.1 --metrics_host=127.0.0.1 --metrics_port="$mport" \
    >"${TMPDIR:-/tmp}/mc-gpu-master.log" 2>&1 &
mpid=$!
trap 'kill $mpid 2>/dev/null; wait $mpid 2>/dev/null || true' EXIT INT TERM
i=0
until "$py" -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "run.sh: master did not start" >&2; exit 1; }
    sleep 0.1
done
T_MASTER=127.0.0.1:$port MC_STORE_PIN_MEMORY_MAX_BYTES=1GB MC_LOG_LEVEL=warn \
PYTHONPATH=$build/python LD_LIBRARY_PATH=$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    timeout 300 "$py" "$src/tests/gpu/gpu_check.py"

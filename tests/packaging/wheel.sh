#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# The pip wheel, installed and used as a pip user would:
#   1. `make wheel` in a configured build directory (packaging/wheel.mk);
#   2. a fresh `python3 -m venv` without the system site packages (numpy,
#      torch and aiohttp must not import there), and `pip install --no-index`
#      of the wheel into it;
#   3. from that venv only (no PYTHONPATH, no LD_LIBRARY_PATH): the package
#      imports from the venv, the optional dependencies stay optional (the
#      calls that need them raise an ImportError naming the package), the
#      console commands run, and a put/get round trip goes through the venv's
#      own mooncake_master on free loopback ports;
#   4. ldd of the installed _capi.so, libmooncake.so.1 and daemons: every
#      library resolves, libmooncake.so.1 to the venv's copy, the rest to
#      system directories, nothing to the build tree or /usr/local; none
#      needs libibverbs, librdmacm, libfabric or the CUDA runtime (loaded at
#      run time by the transports that use them, so a host without them
#      runs tcp);
#   5. `pip uninstall -y` removes the package and its commands.
# The master is stopped and the scratch directory removed, also on failure.
#
# Needs python3-venv, python3-setuptools and python3-wheel (scripts/deps.sh);
# no network.  About 15 s on 2 cores with the build done.
# Usage: tests/packaging/wheel.sh [BUILD_DIR]   (default: build/)
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)

log() { printf 'wheel: %s\n' "$*"; }
die() { printf 'wheel: FAILED: %s\n' "$*" >&2; exit 1; }
# shellcheck source=tests/packaging/common.sh
. "$top/tests/packaging/common.sh"

[ -f "$build/Makefile" ] || die "$build is not a configured build directory"
# the interpreter the extension was built for: the wheel's tag follows it
python=$(sed -n 's/^PYTHON = //p' "$build/Makefile")
[ -x "$python" ] || die "no PYTHON in $build/Makefile"

# resolved, so that the paths Python, ldd and /proc report compare equal
work=$(realpath "$(mktemp -d /tmp/mooncake-wheel.XXXXXX)")
master_pid=""
cleanup() {
    local rc=$?
    if [ -n "$master_pid" ] && kill -0 "$master_pid" 2>/dev/null; then
        kill -TERM "$master_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$master_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$master_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
t0=$(date +%s)

# ---- 1. build ---------------------------------------------------------------------
timeout 300 make -C "$build" --no-print-directory wheel >"$work/make.log" 2>&1 ||
    { tail -n 40 "$work/make.log"; die "make wheel"; }
whl=$(sed -n 's/^wheel: //p' "$work/make.log" | tail -n 1)
[ -f "$whl" ] || { cat "$work/make.log"; die "make wheel named no wheel"; }
tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
case $(basename "$whl") in
mooncake_transfer_engine-*-"$tag-$tag"-linux_*.whl) ;;
*) die "unexpected wheel name $(basename "$whl") (want mooncake_transfer_engine-V-$tag-$tag-linux_ARCH.whl)" ;;
esac
log "built $(basename "$whl")"

# ---- 2. a bare venv -------------------------------------------------------------------
venv=$work/venv
timeout 120 "$python" -m venv "$venv" >"$work/venv.log" 2>&1 ||
    { cat "$work/venv.log"; die "python3 -m venv (is python3-venv installed?)"; }
vpy=$venv/bin/python
run() { # run COMMAND...: in the scratch dir, with nothing pointing at the build
    (cd "$work" && env -u PYTHONPATH -u LD_LIBRARY_PATH -u PYTHONHOME timeout 60 "$@")
}
for mod in numpy torch aiohttp; do
    if run "$vpy" -c "import $mod" 2>/dev/null; then
        die "$mod imports in the fresh venv: it sees the system site packages"
    fi
done
run "$venv/bin/pip" install --no-index --no-cache-dir --disable-pip-version-check "$whl" \
    >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; die "pip install --no-index $(basename "$whl")"; }
pkgdir=$(run "$vpy" -c 'import os, mooncake; print(os.path.dirname(mooncake.__file__))') ||
    die "import mooncake in the venv"
case $pkgdir in
"$venv"/lib/python3*/site-packages/mooncake) ;;
*) die "mooncake imports from $pkgdir, not from the venv's site-packages" ;;
esac
# every module of the source package made it (the wheel takes the lists of
# bindings/python/local.mk, as the Debian package does)
missing=$(cd "$top/bindings/python/mooncake" && find . -name '*.py' | while read -r f; do
    [ -f "$pkgdir/$f" ] || printf ' %s' "${f#./}"; done)
[ -z "$missing" ] || die "modules missing from the wheel (not in bindings/python/local.mk?):$missing"
for f in capi.py _capi.so _commands.py libmooncake.so.1 bin/mooncake_master bin/mooncake_client \
    bin/mooncake_http_metadata_server; do
    [ -f "$pkgdir/$f" ] || die "the wheel has no mooncake/$f"
done
log "installed into a bare venv: $pkgdir"

# ---- 3. the package, the optional dependencies, the console commands -------------------
expect() { # expect WHAT WANTED COMMAND...: COMMAND prints the line WANTED on stdout
    local what=$1 want=$2 out
    shift 2
    out=$(run "$@" 2>"$work/err.log") || { cat "$work/err.log"; die "$what exited with an error"; }
    grep -qxF "$want" <<<"$out" ||
        { printf '%s\n' "$out"; cat "$work/err.log"; die "$what did not print '$want'"; }
    log "$what: ok"
}
expect "import mooncake.store and the modules without numpy/torch" "imported" "$vpy" -c '
import sys
import mooncake, mooncake.store, mooncake.async_store, mooncake.engine, mooncake.buffer_pool
import mooncake.mooncake_config, mooncake.cli
from mooncake.store import MooncakeDistributedStore
assert mooncake.__version__, "no __version__: the native extension did not load"
loaded = [m for m in ("numpy", "torch", "aiohttp") if m in sys.modules]
assert not loaded, "imported with the package: %s" % loaded
print("imported")'
# the modules built on aiohttp say so when it is missing
expect "ImportError naming aiohttp" "aiohttp named" "$vpy" -c '
try:
    import mooncake.mooncake_store_service
except ImportError as e:
    assert "aiohttp" in str(e), str(e)
    print("aiohttp named")'

expect "mooncake_master --help" "Usage: mooncake_master [--flag=value ...]" \
    "$venv/bin/mooncake_master" --help
expect "mooncake_client --help" "usage: mooncake_client [--flag=value ...]" \
    "$venv/bin/mooncake_client" --help
# shellcheck disable=SC2016 # $1 is the inner shell's
expect "mooncake_http_metadata_server --help" "ok" \
    sh -c '"$1" --help | grep -q "^usage: mooncake_http_metadata_server" && echo ok' _ \
    "$venv/bin/mooncake_http_metadata_server"
# shellcheck disable=SC2016
expect "mooncake-cli --help" "ok" \
    sh -c '"$1" --help | grep -q "mooncake-cli" && echo ok' _ "$venv/bin/mooncake-cli"
# mc_store_rest_server needs aiohttp, which this venv lacks: a clear error
if run "$venv/bin/mc_store_rest_server" --help >/dev/null 2>"$work/rest.err"; then
    die "mc_store_rest_server ran without aiohttp"
fi
grep -q "needs aiohttp" "$work/rest.err" ||
    { cat "$work/rest.err"; die "mc_store_rest_server without aiohttp does not name aiohttp"; }
log "mc_store_rest_server without aiohttp: names aiohttp"

# the venv's own master, on free loopback ports
rpc=$(port); meta=$(port); admin=$(port)
(cd "$work" && exec env -u PYTHONPATH -u LD_LIBRARY_PATH "$venv/bin/mooncake_master" \
    --rpc_address=127.0.0.1 --rpc_port="$rpc" \
    --enable_http_metadata_server=true --http_metadata_server_host=127.0.0.1 \
    --http_metadata_server_port="$meta" \
    --metrics_host=127.0.0.1 --metrics_port="$admin" >"$work/master.log" 2>&1) &
master_pid=$!
wait_master "$master_pid" "$work/master.log" "$rpc" "$meta" "$admin"
# the console command exec'd the packaged daemon: same pid, the wheel's binary
exe=$(readlink "/proc/$master_pid/exe")
[ "$exe" = "$pkgdir/bin/mooncake_master" ] ||
    die "the master process runs $exe, not the venv's $pkgdir/bin/mooncake_master"
log "master up from the venv on 127.0.0.1:$rpc"

sed -e "s|localhost:50051|127.0.0.1:$rpc|" \
    -e "s|http://localhost:8080/metadata|http://127.0.0.1:$meta/metadata|" \
    "$top/examples/hello.py" >"$work/hello.py"
expect "Python hello (put/get round trip)" "Hello, Mooncake Store!" "$vpy" "$work/hello.py"
expect "the tensor calls without torch: ImportError naming PyTorch" "PyTorch named" "$vpy" -c '
import sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", sys.argv[2], 16 << 20, 16 << 20, "tcp", "", sys.argv[1])
assert rc == 0, "setup: %d" % rc
try:
    s.put_tensor("tensor_key", object())
    raise SystemExit("put_tensor ran without torch")
except ImportError as e:
    assert "PyTorch" in str(e), str(e)
finally:
    s.close()
print("PyTorch named")' "127.0.0.1:$rpc" "http://127.0.0.1:$meta/metadata"
expect "mooncake-cli health" "OK" "$venv/bin/mooncake-cli" --admin "127.0.0.1:$admin" health

# ---- 4. shared-library dependencies -------------------------------------------------------
checked=0
for f in "$pkgdir/_capi.so" "$pkgdir/libmooncake.so.1" "$pkgdir"/bin/*; do
    links=$(env -u LD_LIBRARY_PATH ldd "$f") || die "ldd $f"
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        # bin/'s RUNPATH $ORIGIN/.. resolves to .../bin/../libmooncake.so.1
        [ "$path" = not ] || path=$(realpath "$path")
        case $path in
        "not") die "$f: $name is not found" ;;
        "$pkgdir/libmooncake.so.1") ;;
        "$top"/* | "$build"/* | /usr/local/*) die "$f: $name resolves to $path" ;;
        /lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*)
            [ "$name" != libmooncake.so.1 ] || die "$f: libmooncake.so.1 resolves to $path, not the venv's copy" ;;
        *) die "$f: $name resolves to $path, outside the system library directories" ;;
        esac
    done <<<"$links"
    case $links in
    *libibverbs* | *librdmacm* | *libfabric* | *libcudart*)
        die "$f links $(grep -oE 'lib(ibverbs|rdmacm|fabric|cudart)[^ ]*' <<<"$links" | head -1): it must be loaded at run time (dlopen)" ;;
    esac
    checked=$((checked + 1))
done
grep -q "libmooncake.so.1 => $pkgdir/libmooncake.so.1 " <<<"$(ldd "$pkgdir/_capi.so")" ||
    die "_capi.so does not load the venv's libmooncake.so.1"
log "ldd: $checked files resolve to the venv and system libraries only, without libibverbs or libfabric"

# ---- 5. uninstall ---------------------------------------------------------------------------
kill -TERM "$master_pid"
for _ in $(seq 100); do kill -0 "$master_pid" 2>/dev/null || break; sleep 0.1; done
run "$venv/bin/pip" uninstall -y --disable-pip-version-check mooncake-transfer-engine \
    >"$work/uninstall.log" 2>&1 || { cat "$work/uninstall.log"; die "pip uninstall"; }
[ ! -e "$pkgdir" ] || die "pip uninstall left $(find "$pkgdir" | head -n 5)"
for c in mooncake_master mooncake_client mooncake_http_metadata_server mooncake-cli mc_store_rest_server; do
    [ ! -e "$venv/bin/$c" ] || die "pip uninstall left $venv/bin/$c"
done
if run "$vpy" -c 'import mooncake' 2>/dev/null; then die "mooncake still imports after pip uninstall"; fi
log "pip uninstall: package and commands removed"

log "all checks passed in $(($(date +%s) - t0))s"

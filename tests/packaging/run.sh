#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# The Debian packages, built and used as a user would:
#   1. copy the source tree (tracked and untracked, not ignored files) to a
#      scratch directory and build every package there with
#      `dpkg-buildpackage -us -uc -b` (dpkg-gensymbols must find no change
#      against debian/libmooncake1.symbols);
#   2. lintian on the result: no error and no warning;
#   3. install them with dpkg -i;
#   4. against a master started from /usr/bin/mooncake_master as the
#      mooncake user with the installed /etc/mooncake/mooncake-master.json,
#      run the hello worlds on the installed files only: C built through
#      pkg-config, /usr/bin/python3 without PYTHONPATH, lua5.4 without
#      LUA_PATH/LUA_CPATH, mooncake-cli and mc_store_rest_server --help;
#   5. purge the packages (and the mooncake user when this script created
#      it), so the machine is left as it was, also on failure.
# The Check unit suite and the debug-symbol packages are left out of this
# build (DEB_BUILD_OPTIONS=nocheck noautodbgsym): CI runs the suites on
# its own build.
#
# Needs root (dpkg -i) and the build dependencies of debian/control.
# Usage: tests/packaging/run.sh [--keep]   (--keep: leave the scratch dir)
# Environment: MC_PKG_JOBS (parallel build jobs, default 2).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
keep=0
[ "${1:-}" = --keep ] && keep=1
pkgs="libmooncake1 libmooncake-dev mooncake-master mooncake-client python3-mooncake
lua-mooncake mooncake-tools"

log() { printf 'packaging: %s\n' "$*"; }
die() { printf 'packaging: FAILED: %s\n' "$*" >&2; exit 1; }
# shellcheck source=tests/packaging/common.sh
. "$top/tests/packaging/common.sh"

[ "$(id -u)" = 0 ] || die "needs root (dpkg -i); run it in CI or as root"
for p in $pkgs; do
    if grep -q "ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)"; then
        die "$p is installed already; this test installs and purges the packages itself"
    fi
done
had_user=0
getent passwd mooncake >/dev/null && had_user=1

work=$(mktemp -d /tmp/mooncake-pkg.XXXXXX)
master_pid=""
installed=0
cleanup() {
    local rc=$? st
    if [ -n "$master_pid" ] && kill -0 "$master_pid" 2>/dev/null; then
        kill -TERM "$master_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$master_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$master_pid" 2>/dev/null || true
    fi
    if [ "$installed" = 1 ]; then
        # shellcheck disable=SC2086
        dpkg --purge $pkgs >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; rc=1; }
        if [ "$had_user" = 0 ] && getent passwd mooncake >/dev/null; then
            deluser --system --quiet mooncake >/dev/null 2>&1 || userdel mooncake || rc=1
            getent group mooncake >/dev/null && { groupdel mooncake || rc=1; }
        fi
        for p in $pkgs; do
            st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
            if [ -n "$st" ] && [[ $st != *not-installed* ]]; then
                echo "packaging: $p is still installed after the purge" >&2
                rc=1
            fi
        done
    fi
    if [ "$keep" = 1 ]; then log "scratch directory kept: $work"; else rm -rf "$work"; fi
    exit "$rc"
}
trap cleanup EXIT

t0=$(date +%s)

# ---- 1. build ---------------------------------------------------------------
log "copying the source tree to $work/src"
mkdir -p "$work/src"
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 -I{} sh -c 'test -e "$1" && printf "%s\0" "$1"' _ {} |
        tar --null -T - -cf -) | tar -C "$work/src" -xf -
else # an unpacked tarball: everything but build trees
    tar -C "$top" --exclude=./build --exclude='./build-*' --exclude=./debian/build \
        -cf - . | tar -C "$work/src" -xf -
fi
log "dpkg-buildpackage -us -uc -b"
(
    cd "$work/src"
    # a symbol added to or missing from the library without the symbols
    # file following is an error, not a warning
    DPKG_GENSYMBOLS_CHECK_LEVEL=4 \
        DEB_BUILD_OPTIONS="nocheck noautodbgsym parallel=${MC_PKG_JOBS:-2}" \
        dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1
) || { tail -n 80 "$work/build.log"; die "dpkg-buildpackage"; }
t_build=$(($(date +%s) - t0))
log "built in ${t_build}s: $(cd "$work" && echo *.deb)"

# ---- 2. lintian ---------------------------------------------------------------
if command -v lintian >/dev/null; then
    lintian --fail-on error,warning "$work"/*.changes >"$work/lintian.log" 2>&1 ||
        { cat "$work/lintian.log"; die "lintian found errors or warnings"; }
    log "lintian: no error and no warning"
else
    log "lintian is not installed: skipped"
fi

# ---- 3. install ------------------------------------------------------------------
installed=1
dpkg -i "$work"/*.deb >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; die "dpkg -i (are the runtime dependencies installed?)"; }
log "installed"
getent passwd mooncake >/dev/null || die "postinst did not create the mooncake user"
[ -f /etc/mooncake/mooncake-master.json ] || die "no /etc/mooncake/mooncake-master.json"
grep -qx /etc/mooncake/mooncake-master.json /var/lib/dpkg/info/mooncake-master.conffiles ||
    die "/etc/mooncake/mooncake-master.json is not a conffile"
for unit in mooncake-master mooncake-client; do
    [ -f "/lib/systemd/system/$unit.service" ] || die "no $unit.service"
    if command -v systemd-analyze >/dev/null; then
        systemd-analyze verify "/lib/systemd/system/$unit.service" >"$work/verify.log" 2>&1 ||
            { cat "$work/verify.log"; die "systemd-analyze verify $unit.service"; }
    fi
done
[ -z "$(find /usr/lib -name 'libmooncake*.la' -o -name 'mooncake_core.la')" ] ||
    die ".la files were installed"

# ---- 4. hello worlds on the installed files -----------------------------------
rpc=$(port); meta=$(port); admin=$(port)
# the packaged configuration, with this test's loopback ports given on the
# command line (flags win over the file)
setpriv --reuid=mooncake --regid=mooncake --init-groups -- /usr/bin/mooncake_master \
    --config_path=/etc/mooncake/mooncake-master.json \
    --rpc_address=127.0.0.1 --rpc_port="$rpc" \
    --enable_http_metadata_server=true --http_metadata_server_host=127.0.0.1 \
    --http_metadata_server_port="$meta" \
    --metrics_host=127.0.0.1 --metrics_port="$admin" >"$work/master.log" 2>&1 &
master_pid=$!
wait_master "$master_pid" "$work/master.log" "$rpc" "$meta" "$admin"
[ "$(ps -o user= -p "$master_pid")" = mooncake ] || die "the master does not run as mooncake"
log "master up as user mooncake on 127.0.0.1:$rpc"

expect() { # expect WHAT WANTED COMMAND...: COMMAND prints WANTED on stdout
    local what=$1 want=$2 out
    shift 2
    out=$(cd "$work" && env -u PYTHONPATH -u LUA_PATH -u LUA_CPATH -u LD_LIBRARY_PATH \
        "$@" 2>"$work/err.log") || { cat "$work/err.log"; die "$what exited with an error"; }
    grep -qxF "$want" <<<"$out" ||
        { printf '%s\n' "$out"; cat "$work/err.log"; die "$what did not print '$want'"; }
    log "$what: ok"
}

# C, through pkg-config, against /usr/include and the installed library
cc -o "$work/hello" "$top/examples/hello.c" $(pkg-config --cflags --libs mooncake) ||
    die "cc examples/hello.c \$(pkg-config --cflags --libs mooncake)"
# grep reads ldd's whole output from a string: "ldd | grep -q" under pipefail
# fails whenever grep exits before ldd has written its last line (SIGPIPE)
links=$(ldd "$work/hello") || die "ldd $work/hello"
grep -q "/libmooncake.so.1 " <<<"$links" || { printf '%s\n' "$links"; die "hello does not link libmooncake.so.1"; }
expect "C hello (pkg-config)" "hello_key = Hello, Mooncake Store!" \
    "$work/hello" --master "127.0.0.1:$rpc"

# Python: Debian's interpreter, the package from dist-packages
sed -e "s|localhost:50051|127.0.0.1:$rpc|" \
    -e "s|http://localhost:8080/metadata|http://127.0.0.1:$meta/metadata|" \
    "$top/examples/hello.py" >"$work/hello.py"
expect "Python location" "/usr/lib/python3/dist-packages/mooncake/__init__.py" \
    /usr/bin/python3 -c 'import mooncake; print(mooncake.__file__)'
expect "Python hello" "Hello, Mooncake Store!" /usr/bin/python3 "$work/hello.py"

# Lua 5.4 with its default search path
expect "Lua location" "/usr/share/lua/5.4/mooncake.lua" \
    lua5.4 -e 'print(package.searchpath("mooncake", package.path))'
expect "Lua hello" "Hello, Mooncake Store!" lua5.4 "$top/examples/hello.lua" "127.0.0.1:$rpc"

# the admin CLI
expect "mooncake-cli health" "OK" mooncake-cli --admin "127.0.0.1:$admin" health
expect "mooncake-cli role" "role: leader" mooncake-cli --admin "127.0.0.1:$admin" role

# the REST store service: installed; it runs where aiohttp (recommended) is
[ -x /usr/bin/mc_store_rest_server ] || die "no /usr/bin/mc_store_rest_server"
if /usr/bin/python3 -c 'import aiohttp' 2>/dev/null; then
    expect "mc_store_rest_server --help" "Mooncake Store Service with REST API" \
        sh -c 'mc_store_rest_server --help | grep -x "Mooncake Store Service with REST API"'
else
    log "python3-aiohttp is not installed: mc_store_rest_server --help skipped"
fi

# the man pages
for page in mooncake_master.1 mooncake_client.1 mooncake-cli.1 mc_store_rest_server.1 mooncake.3; do
    [ -n "$(find /usr/share/man -name "$page.gz")" ] || die "no man page $page"
done

log "all checks passed in $(($(date +%s) - t0))s (build ${t_build}s)"

#!/bin/sh
# Install the Debian packages mooncake needs to build, test and run.
# Idempotent: only missing packages are installed.  Needs root for apt-get.
set -eu

PKGS="build-essential autoconf automake libtool autoconf-archive pkg-config
libevent-dev libjansson-dev libcurl4-openssl-dev libnuma-dev zlib1g-dev
libibverbs-dev libfabric-dev check swig python3 python3-dev python3-numpy
python3-pytest python3-pytest-xdist python3-torch python3-aiohttp curl procps clang libclang-rt-dev
etcd-server etcd-client nftables libzmq3-dev python3-zmq python3-msgpack libhiredis-dev redis-server
lua5.4 liblua5.4-dev lua-busted python3-matplotlib
debhelper dh-python dpkg-dev fakeroot lintian
python3-venv python3-setuptools python3-wheel
gcovr gdb"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "deps: missing packages:$missing (run as root, or install them with apt-get)" >&2
    exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >/dev/null

#!/bin/sh
# Configure (once) and build into $BUILD_DIR (default: build/).
# Extra configure arguments may be passed in $CONFIGURE_FLAGS.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
cd "$top"
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
    ./autogen.sh >/dev/null 2>&1 || { ./autogen.sh; exit 1; }
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ]; then
    # shellcheck disable=SC2086
    "$top/configure" --enable-werror --enable-python ${CONFIGURE_FLAGS:-} >configure.out 2>&1 ||
        { cat configure.out; exit 1; }
    sed -n '/configuration$/,$p' configure.out
fi
make -j"$(nproc)" >make.out 2>&1 || { tail -60 make.out; exit 1; }
echo "build: ok ($build)"

#!/bin/sh
# Regenerate the build system from configure.ac and the Makefile.am tree.
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --force --install --warnings=all,no-portability

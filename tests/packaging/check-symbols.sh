#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# debian/libmooncake1.symbols must list exactly the symbols (and version
# nodes) of libmooncake/libmooncake.map, each under its node: a function
# added to the version script without the symbols file (or the reverse)
# fails here in seconds instead of at the end of dpkg-buildpackage.
# With a built library as $1 (.libs/libmooncake.so), its dynamic symbol
# table is compared too.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "sym@NODE" for every global of the map, and every node
awk '
    /^[A-Z][A-Z0-9_.]* *\{/ { node = $1; sub(/\{.*/, "", node); print node "@" node; next }
    /global:/ { inglobal = 1; next }
    /local:/ || /^}/ { inglobal = 0; next }
    inglobal && /;/ { s = $1; sub(/;.*/, "", s); print s "@" node }
' "$top/libmooncake/libmooncake.map" | sort >"$tmp/map"
awk '/^ / { print $1 }' "$top/debian/libmooncake1.symbols" | sort >"$tmp/symbols"
if ! diff -u "$tmp/map" "$tmp/symbols" >"$tmp/diff"; then
    echo "check-symbols: debian/libmooncake1.symbols does not match libmooncake/libmooncake.map" >&2
    echo "(add new symbols with the first version that exports them):" >&2
    cat "$tmp/diff" >&2
    exit 1
fi
if [ $# -ge 1 ]; then
    objdump -T "$1" | awk '$2 == "g" || $3 == "DF" || $3 == "DO" { print }' |
        awk '{ n = $NF; v = $(NF-1); gsub(/[()]/, "", v); if (v ~ /^MOONCAKE_/) print n "@" v }' |
        sort -u >"$tmp/lib"
    if ! diff -u "$tmp/map" "$tmp/lib" >"$tmp/diff"; then
        echo "check-symbols: $1 exports something else than the version script:" >&2
        cat "$tmp/diff" >&2
        exit 1
    fi
fi
echo "check-symbols: $(wc -l <"$tmp/map") symbols match"

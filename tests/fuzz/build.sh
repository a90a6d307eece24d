#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Build the libFuzzer targets with clang (ASan + UBSan) straight from the
# sources, then run each for a while.  Needs a clang with -fsanitize=fuzzer
# (Debian: apt-get install clang); exits 77 (skipped) without one.
#
#   tests/fuzz/build.sh [SECONDS_PER_TARGET] [WORK_DIR]
#
# Defaults: 60 seconds, $TMPDIR/mooncake-fuzz.  SECONDS_PER_TARGET=0 only
# builds.  Corpora persist in WORK_DIR/corpus-<target> between runs; a
# crash leaves its input in WORK_DIR and makes the script fail.
set -eu

secs=${1:-60}
work=${2:-${TMPDIR:-/tmp}/mooncake-fuzz}
src=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-clang}
san="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"

mkdir -p "$work/include"
probe="$work/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)
{ (void)d; (void)n; return 0; }' > "$probe"
if ! $cc $san "$probe" -o "$work/probe" >/dev/null 2>&1; then
    echo "build.sh: $cc cannot build libFuzzer targets (-fsanitize=fuzzer); skipping" >&2
    exit 77
fi

# The sources include "config.h" first; they need only these from it.
cat > "$work/include/config.h" <<'H'
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#define PACKAGE_VERSION "fuzz"
H

cflags="-std=gnu11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter
        -I$work/include -I$src/libmooncake/include -I$src/libmooncake"
common="$src/libmooncake/common/log.c $src/libmooncake/common/buf.c
        $src/libmooncake/common/util.c $src/libmooncake/common/hashmap.c
        $src/libmooncake/common/crc32c.c"

echo "build.sh: building in $work"
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_wire" "$src/tests/fuzz/fuzz_wire.c" \
    "$src/libmooncake/wire/wire.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_alloc" "$src/tests/fuzz/fuzz_alloc.c" \
    "$src/libmooncake/alloc/offset_alloc.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_desc" "$src/tests/fuzz/fuzz_desc.c" \
    "$src/libmooncake/transfer/descriptor.c" $common -ljansson -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_tensor" "$src/tests/fuzz/fuzz_tensor.c" \
    "$src/libmooncake/tensor/tensor.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_dummy" "$src/tests/fuzz/fuzz_dummy.c" \
    "$src/libmooncake/store/dummy/dummy_decode.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_oplog" "$src/tests/fuzz/fuzz_oplog.c" \
    "$src/mooncake-master/durability/oplog.c" "$src/libmooncake/common/slab.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags -DMC_FUZZ_WRITE_SEEDS -o "$work/write_oplog_seeds" "$src/tests/fuzz/fuzz_oplog.c" \
    "$src/mooncake-master/durability/oplog.c" "$src/libmooncake/common/slab.c" $common -lm -lpthread
$cc $cflags $san -o "$work/fuzz_regex" "$src/tests/fuzz/fuzz_regex.c" \
    "$src/libmooncake/common/regex_limit.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_te_frame" "$src/tests/fuzz/fuzz_te_frame.c" \
    $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_te_disk" "$src/tests/fuzz/fuzz_te_disk.c" \
    $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_http_meta" "$src/tests/fuzz/fuzz_http_meta.c" \
    "$src/mooncake-master/admin/http.c" "$src/libmooncake/common/auth.c" $common -levent -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_rdma_hs" "$src/tests/fuzz/fuzz_rdma_hs.c" \
    "$src/libmooncake/transfer/rdma/codec.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags -DMC_FUZZ_WRITE_SEEDS -o "$work/write_rdma_seeds" "$src/tests/fuzz/fuzz_rdma_hs.c" \
    "$src/libmooncake/transfer/rdma/codec.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_msgpack" "$src/tests/fuzz/fuzz_msgpack.c" \
    "$src/mooncake-master/events/msgpack.c" "$src/mooncake-master/events/kv_event_codec.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_etcd_pb" "$src/tests/fuzz/fuzz_etcd_pb.c" \
    "$src/libmooncake/coord/etcd_pb.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -I$src/mooncake-master -o "$work/fuzz_ship" "$src/tests/fuzz/fuzz_ship.c" \
    "$src/mooncake-master/durability/ship_code.c" $common -lz -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags $san -o "$work/fuzz_auth" "$src/tests/fuzz/fuzz_auth.c" \
    "$src/libmooncake/common/auth.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags -DMC_FUZZ_WRITE_SEEDS -o "$work/write_seeds" "$src/tests/fuzz/fuzz_wire.c" \
    "$src/libmooncake/wire/wire.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags -DMC_FUZZ_WRITE_SEEDS -o "$work/write_tensor_seeds" "$src/tests/fuzz/fuzz_tensor.c" \
    "$src/libmooncake/tensor/tensor.c" $common -lm -lpthread
# shellcheck disable=SC2086
$cc $cflags -DMC_FUZZ_WRITE_SEEDS -o "$work/write_dummy_seeds" "$src/tests/fuzz/fuzz_dummy.c" \
    "$src/libmooncake/store/dummy/dummy_decode.c" $common -lm -lpthread

targets="fuzz_wire fuzz_alloc fuzz_desc fuzz_tensor fuzz_dummy fuzz_oplog fuzz_regex fuzz_te_frame fuzz_te_disk fuzz_http_meta fuzz_rdma_hs fuzz_auth fuzz_msgpack fuzz_etcd_pb fuzz_ship"
for t in $targets; do mkdir -p "$work/corpus-$t"; done
"$work/write_oplog_seeds" "$work/corpus-fuzz_oplog"
"$work/write_rdma_seeds" "$work/corpus-fuzz_rdma_hs"
"$work/write_seeds" "$work/corpus-fuzz_wire"
"$work/write_tensor_seeds" "$work/corpus-fuzz_tensor"
"$work/write_dummy_seeds" "$work/corpus-fuzz_dummy"
printf '%s' '{"name":"localhost:12345","protocol":"tcp","tcp_data_port":12345,"shm_name":"@mooncake-te-0123456789abcdef","tcp_readv":true,"tcp_readv_strided":true,"buffers":[{"name":"cpu:0","addr":4096,"length":8192},{"name":"cpu:1","addr":12288,"length":1}]}' \
    > "$work/corpus-fuzz_desc/seed-1"
printf '%s' '{"name":"h:1","protocol":"rdma","tcp_data_port":1,"rdma_mr_size":1048576,"devices":[{"name":"mlx5_0","lid":3,"gid":"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01"},{"name":"mlx5_1","lid":0,"gid":"fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:02"}],"buffers":[{"name":"cpu:0","addr":4096,"length":2097153,"rkey":[1,2,3,4,5,6]}]}' \
    > "$work/corpus-fuzz_desc/seed-rdma"
for p in '^key_[0-9]+$' 'a{255}{4}' '(a|aa){170}z' '[[:alpha:]]{2,}' 'x{1,}y+z*'; do
    printf '%s' "$p" > "$work/corpus-fuzz_regex/seed-$(printf '%s' "$p" | cksum | cut -d' ' -f1)"
done
printf 'MCTE\001\000\000\000\000\020\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    > "$work/corpus-fuzz_te_frame/seed-read"
printf 'MCTR\000\000\000\000\000\001\000\000\000\000\000\000' > "$work/corpus-fuzz_te_frame/seed-resp"
# READV of two ranges (0x1000 +16, 0x9000 +8; docs/protocol.md §5.20): header and its list
printf 'MCTE\001\005\000\000\002\000\000\000\000\000\000\000\030\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\020\000\000\000\000\000\000\020\000\000\000\000\000\000\000\000\220\000\000\000\000\000\000\010\000\000\000\000\000\000\000' \
    > "$work/corpus-fuzz_te_frame/seed-readv"
# READV_STRIDED of one group of two entries (0x1000: 4 rows of 10 every 100; 0x9000: 4 rows of
# 20 every 20; docs/protocol.md §5.21): header and its entries
printf 'MCTE\001\006\000\000\002\000\000\000\000\000\000\000x\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\020\000\000\000\000\000\000d\000\000\000\000\000\000\000\012\000\000\000\004\000\000\000\002\000\000\000\000\000\000\000\000\220\000\000\000\000\000\000\024\000\000\000\000\000\000\000\024\000\000\000\004\000\000\000\000\000\000\000\000\000\000\000' \
    > "$work/corpus-fuzz_te_frame/seed-readvs"
# DISK_READ of key "k" in /t/1.bucket at 0, 16 bytes (docs/protocol.md §5.16), and one with a
# relative path
printf 'MCTE\001\004\000\000\000\000\000\000\000\000\000\000\020\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000D3"\021\001\000\013\000k/t/1.bucket' \
    > "$work/corpus-fuzz_te_disk/seed-read"
printf 'MCTE\001\004\000\000\000\020\000\000\000\000\000\000\000\000\020\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\002\000\004\000abt/..' \
    > "$work/corpus-fuzz_te_disk/seed-relative"
printf '\001PUT /metadata?key=mooncake%%2Fram%%2Fh%%3A1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}' \
    > "$work/corpus-fuzz_http_meta/seed-put"
printf '\000GET /metadata?key=a HTTP/1.1\r\nHost: x\r\n\r\nDELETE /metadata?key=ab HTTP/1.1\r\nX-Mooncake-Owner-Token: owner\r\n\r\n' \
    > "$work/corpus-fuzz_http_meta/seed-pipelined"
printf '\000MCAP\001\000\000\001%064d%064dB' 0 0 > "$work/corpus-fuzz_auth/seed-proof"
printf '\002v1 1700000000 00112233445566778899aabbccddeeff %064d' 0 > "$work/corpus-fuzz_auth/seed-http"
printf '\003# c\nfuzz-cluster-secret-0123456789\ntenant B fuzz-b-secret-0123456789\n' \
    > "$work/corpus-fuzz_auth/seed-file"
# a map of a string key to a u64, an array of a negative int and a nil; a hex key
printf '\006\000\001\004\010event_id\072\377\377\377\377\377\377\377\377\005\002\203\177\000' \
    > "$work/corpus-fuzz_msgpack/seed-map"
printf '0xDEADbeef' > "$work/corpus-fuzz_msgpack/seed-hex"
# a framed TxnResponse: header {cluster_id, member_id, revision 300, raft_term}, succeeded,
# one response_put
printf '\000\000\000\000\024\012\012\010\201\001\020\002\030\254\002\040\002\020\001\032\004\022\002\012\000' \
    > "$work/corpus-fuzz_etcd_pb/seed-txn-resp"

[ "$secs" -gt 0 ] || exit 0
status=0
for t in $targets; do
    echo "build.sh: running $t for ${secs}s"
    # MC_LOG_LEVEL=error: mc_alloc_check logs what it finds, nothing else should print;
    # -timeout: wall clock, for a hang: one input may take 30 s.  Slowness a target
    # guards against is timed on CPU inside it (fuzz_regex), as a busy CI host can
    # stall a process for seconds (a 5 s wall limit once fired there in regcomp).
    if ! (cd "$work" && MC_LOG_LEVEL=error ASAN_OPTIONS=detect_leaks=1 \
            "./$t" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=30 \
            -print_final_stats=1 "corpus-$t" 2>"$t.log"); then
        echo "build.sh: $t FAILED; see $work/$t.log and the crash-* file in $work" >&2
        tail -40 "$work/$t.log" >&2
        status=1
    else
        grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$work/$t.log" | tail -2
    fi
done
exit $status

# Tests: one Check runner over every unit suite; pytest suites under tests/python.
if HAVE_CHECK
check_PROGRAMS += tests/unit/check_all
TESTS += tests/unit/check_all
# Suites that start the real daemon find it here.
AM_TESTS_ENVIRONMENT = MC_MASTER_BIN=$(abs_builddir)/mooncake_master; export MC_MASTER_BIN; MC_SRCDIR=$(abs_top_srcdir); export MC_SRCDIR;
tests_unit_check_all_SOURCES = \
	tests/unit/check_all.c tests/unit/check_suites.h \
	tests/unit/test_status.c tests/unit/test_util.c \
	tests/unit/test_buf.c tests/unit/test_hashmap.c \
	tests/unit/test_auth.c \
	tests/unit/test_alloc.c tests/unit/test_wire.c \
	tests/unit/test_store.c \
	tests/unit/test_store_read.c \
	tests/unit/test_loc_cache.c \
	tests/unit/test_store_write.c \
	tests/unit/test_store_commit.c tests/unit/store_util.c tests/unit/store_util.h \
	tests/unit/test_async.c \
	tests/unit/test_hostmem.c \
	tests/unit/test_tensor.c \
	tests/unit/test_fastcopy.c \
	tests/unit/test_codec.c \
	tests/unit/test_reshard.c \
	tests/unit/test_rdma.c \
	tests/unit/test_rdma_path.c \
	tests/unit/master_proc.c tests/unit/master_proc.h \
	tests/unit/test_master_tasks.c \
	tests/unit/test_master_clear.c \
	tests/unit/test_master_resv.c \
	tests/unit/test_master_disk.c \
	tests/unit/test_master_dfs.c \
	tests/unit/test_store_disk.c \
	tests/unit/test_master_mem.c \
	tests/unit/test_etcd.c \
	tests/unit/test_etcd_pb.c \
	tests/unit/test_redis.c \
	tests/unit/test_transfer.c tests/unit/te_util.c tests/unit/te_util.h \
	tests/unit/test_shm.c \
	tests/unit/test_scatter.c \
	tests/unit/test_nof.c \
	tests/unit/test_flags.c mooncake-master/flags.c \
	tests/unit/test_oplog.c mooncake-master/durability/oplog.c \
	tests/unit/test_ship.c mooncake-master/durability/ship.c mooncake-master/durability/ship_code.c \
	tests/unit/test_kv_events.c mooncake-master/events/kv_event_codec.c mooncake-master/events/msgpack.c \
	tests/unit/test_dfs.c mooncake-master/tiers/dfs_alloc.c \
	$(NULL)
tests_unit_check_all_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS) $(ZLIB_CFLAGS)
tests_unit_check_all_LDADD = libmooncake-internal.la $(CHECK_LIBS) $(JANSSON_LIBS) $(ZLIB_LIBS)
endif
# libFuzzer targets: built and run by tests/fuzz/build.sh (needs clang).  ./test.sh
# runs each for MC_FUZZ_SECONDS (10); `make fuzz` soaks each for FUZZ_SECONDS (300)
# with the corpora kept in FUZZ_DIR between runs.
EXTRA_DIST += tests/fuzz/build.sh tests/fuzz/fuzz_auth.c tests/fuzz/fuzz_wire.c tests/fuzz/fuzz_alloc.c tests/fuzz/fuzz_desc.c \
	tests/fuzz/fuzz_tensor.c tests/fuzz/fuzz_dummy.c tests/fuzz/fuzz_oplog.c tests/fuzz/fuzz_regex.c \
	tests/fuzz/fuzz_te_frame.c tests/fuzz/fuzz_http_meta.c tests/fuzz/fuzz_rdma_hs.c \
	tests/fuzz/fuzz_msgpack.c tests/fuzz/fuzz_etcd_pb.c tests/fuzz/fuzz_ship.c
# RDMA and CUDA: device-free pytest suites, and scripts for RDMA / GPU hosts.
EXTRA_DIST += tests/python/test_rdma.py tests/python/test_cuda.py tests/python/fake_cudart.c \
	tests/rdma/README.md tests/rdma/run.sh tests/rdma/rdma_pair.py tests/gpu/run.sh tests/gpu/gpu_check.py docs/cuda.md
EXTRA_DIST += tests/cluster/conftest.py tests/cluster/netns.py tests/cluster/test_cluster.py
FUZZ_SECONDS = 300
FUZZ_DIR = $(abs_builddir)/fuzz
fuzz:
	$(top_srcdir)/tests/fuzz/build.sh $(FUZZ_SECONDS) $(FUZZ_DIR)
.PHONY: fuzz

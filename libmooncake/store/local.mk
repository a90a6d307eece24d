# store client (owner: store).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/store/store_internal.h \
	libmooncake/store/master_client.c libmooncake/store/master_client.h \
	libmooncake/store/store.c \
	libmooncake/store/calls.c \
	libmooncake/store/metrics.c libmooncake/store/metrics.h \
	libmooncake/store/ops.h \
	libmooncake/store/write/write.h \
	libmooncake/store/write/write.c \
	libmooncake/store/write/write_batch.c \
	libmooncake/store/write/remove.c \
	libmooncake/store/write/commit.c \
	libmooncake/store/write/reserve.c \
	libmooncake/store/read/read.h \
	libmooncake/store/read/query.c \
	libmooncake/store/read/loc_cache.c libmooncake/store/read/loc_cache.h \
	libmooncake/store/read/replica.c \
	libmooncake/store/read/zerocopy.c \
	libmooncake/store/read/buffer.c \
	libmooncake/store/segments/segment.c \
	libmooncake/store/segments/mount.c \
	libmooncake/store/sessions/session.c \
	libmooncake/store/threads/worker.c \
	libmooncake/store/threads/heartbeat.c \
	libmooncake/store/threads/tasks.c \
	libmooncake/store/threads/http.c \
	libmooncake/store/threads/async.c \
	libmooncake/store/tiers/tiers.h libmooncake/store/tiers/tiers.c \
	libmooncake/store/tiers/disk.c libmooncake/store/tiers/disk.h \
	libmooncake/store/tiers/disk_hints.c \
	libmooncake/store/tiers/dfs.c libmooncake/store/tiers/dfs.h \
	libmooncake/store/tiers/nof.c \
	libmooncake/store/dummy/wire.h libmooncake/store/dummy/dummy.h \
	libmooncake/store/dummy/dummy_client.h libmooncake/store/dummy/dummy_client.c \
	libmooncake/store/dummy/dummy_io.c \
	libmooncake/store/dummy/dummy_calls.c \
	libmooncake/store/dummy/dummy_ops.c \
	libmooncake/store/dummy/dummy_decode.c \
	libmooncake/store/dummy/dummy_server.c \
	libmooncake/store/dummy/hostmem.c \
	$(NULL)

# examples/hello.c: the smallest complete client, built (not installed)
# so it keeps compiling against the public API.
noinst_PROGRAMS += examples/hello
examples_hello_SOURCES = examples/hello.c
examples_hello_LDADD = libmooncake.la

# store client (owner: store).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/store/store_internal.h \
	libmooncake/store/master_client.c libmooncake/store/master_client.h \
	libmooncake/store/segment.c \
	libmooncake/store/worker.c \
	libmooncake/store/heartbeat.c \
	libmooncake/store/query.c \
	libmooncake/store/loc_cache.c libmooncake/store/loc_cache.h \
	libmooncake/store/store.c \
	libmooncake/store/commit.c \
	libmooncake/store/reserve.c \
	libmooncake/store/replica.c \
	libmooncake/store/hostmem.c \
	libmooncake/store/read_internal.h \
	libmooncake/store/zerocopy.c \
	libmooncake/store/buffer.c \
	libmooncake/store/session.c \
	libmooncake/store/mount.c \
	libmooncake/store/nof.c \
	libmooncake/store/tasks.c \
	libmooncake/store/disk.c libmooncake/store/disk.h \
	libmooncake/store/dfs.c libmooncake/store/dfs.h \
	libmooncake/store/dummy_wire.h libmooncake/store/dummy_internal.h \
	libmooncake/store/dummy_client.c \
	libmooncake/store/dummy_decode.c \
	libmooncake/store/dummy_server.c \
	libmooncake/store/metrics.c libmooncake/store/metrics.h \
	libmooncake/store/http.c \
	libmooncake/store/async.c \
	$(NULL)

# examples/hello.c: the smallest complete client, built (not installed)
# so it keeps compiling against the public API.
noinst_PROGRAMS += examples/hello
examples_hello_SOURCES = examples/hello.c
examples_hello_LDADD = libmooncake.la

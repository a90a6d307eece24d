# libmooncake: every source goes into the internal convenience library
# (tested directly by tests/unit); libmooncake.la adds the exported ABI.

mooncakeinclude_HEADERS += \
	libmooncake/include/mooncake/mooncake.h \
	libmooncake/include/mooncake/visibility.h \
	libmooncake/include/mooncake/status.h \
	libmooncake/include/mooncake/config.h \
	libmooncake/include/mooncake/transfer.h \
	libmooncake/include/mooncake/store.h \
	libmooncake/include/mooncake/tensor.h \
	libmooncake/include/mooncake/fastcopy.h \
	libmooncake/include/mooncake/codec.h \
	libmooncake/include/mooncake/reshard.h \
	$(NULL)

noinst_LTLIBRARIES += libmooncake-internal.la
libmooncake_internal_la_CPPFLAGS = $(AM_CPPFLAGS) -DMC_BUILDING_LIBRARY
libmooncake_internal_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden \
	$(JANSSON_CFLAGS) $(LIBCURL_CFLAGS) $(LIBEVENT_CFLAGS)
libmooncake_internal_la_LIBADD = $(JANSSON_LIBS) $(LIBCURL_LIBS) $(LIBEVENT_LIBS) $(PTHREAD_LIBS) $(NUMA_LIBS) -lm
libmooncake_internal_la_SOURCES = \
	libmooncake/common/log.c libmooncake/common/log.h \
	libmooncake/common/buf.c libmooncake/common/buf.h \
	libmooncake/common/util.c libmooncake/common/util.h libmooncake/common/copy.h \
	libmooncake/common/gen.h \
	libmooncake/common/crc32c.c libmooncake/common/crc32c.h \
	libmooncake/common/hashmap.c libmooncake/common/hashmap.h \
	libmooncake/common/slab.c libmooncake/common/slab.h \
	libmooncake/common/regex_limit.c libmooncake/common/regex_limit.h \
	libmooncake/common/auth.c libmooncake/common/auth.h \
	libmooncake/common/fastcopy.c \
	libmooncake/codec/ragged.c \
	libmooncake/codec/stage.c \
	libmooncake/reshard/plan.c \
	libmooncake/common/cuda.c libmooncake/common/cuda.h \
	libmooncake/common/dfs_layout.c libmooncake/common/dfs_layout.h \
	libmooncake/wire/wire.c libmooncake/wire/wire.h \
	libmooncake/alloc/offset_alloc.c libmooncake/alloc/offset_alloc.h \
	$(NULL)
include libmooncake/coord/local.mk
include libmooncake/transfer/local.mk
include libmooncake/store/local.mk
include libmooncake/tensor/local.mk

lib_LTLIBRARIES += libmooncake.la
libmooncake_la_SOURCES =
libmooncake_la_LIBADD = libmooncake-internal.la
libmooncake_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(MC_LT_VERSION) \
	-Wl,--version-script=$(srcdir)/libmooncake/libmooncake.map -no-undefined
EXTRA_libmooncake_la_DEPENDENCIES = $(srcdir)/libmooncake/libmooncake.map
EXTRA_DIST += libmooncake/libmooncake.map

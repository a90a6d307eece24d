# transfer engine (owner: transfer).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/transfer/engine.c libmooncake/transfer/engine.h \
	libmooncake/transfer/proto.h \
	libmooncake/transfer/descriptor.c libmooncake/transfer/descriptor.h \
	libmooncake/transfer/metadata.c \
	libmooncake/transfer/tcp/tcp.c libmooncake/transfer/tcp/tcp.h \
	$(NULL)
EXTRA_DIST += docs/transfer.md

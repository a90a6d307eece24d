# transfer engine (owner: transfer).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/transfer/engine.c libmooncake/transfer/engine.h \
	libmooncake/transfer/proto.h \
	libmooncake/transfer/descriptor.c libmooncake/transfer/descriptor.h \
	libmooncake/transfer/metadata.c \
	libmooncake/transfer/onesided.c libmooncake/transfer/onesided.h \
	libmooncake/transfer/tcp/tcp.c libmooncake/transfer/tcp/tcp.h \
	libmooncake/transfer/shm/shm.c libmooncake/transfer/shm/shm.h \
	libmooncake/transfer/file/file.c libmooncake/transfer/file/file.h \
	libmooncake/transfer/rdma/nic.c libmooncake/transfer/rdma/nic.h \
	libmooncake/transfer/rdma/codec.c libmooncake/transfer/rdma/codec.h \
	libmooncake/transfer/rdma/plan.c libmooncake/transfer/rdma/plan.h \
	libmooncake/transfer/rdma/verbs.h libmooncake/transfer/rdma/rdma.h \
	libmooncake/transfer/fabric/fabric.h \
	$(NULL)
if HAVE_RDMA
libmooncake_internal_la_SOURCES += libmooncake/transfer/rdma/verbs.c \
	libmooncake/transfer/rdma/rdma.c \
	libmooncake/transfer/rdma/ibv.c libmooncake/transfer/rdma/ibv.h
endif
if HAVE_FABRIC
libmooncake_internal_la_SOURCES += libmooncake/transfer/fabric/fabric.c \
	libmooncake/transfer/fabric/fi.c libmooncake/transfer/fabric/fi.h
libmooncake_internal_la_CFLAGS += $(FABRIC_CFLAGS)
endif
EXTRA_DIST += docs/transfer.md

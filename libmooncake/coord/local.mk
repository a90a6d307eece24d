# etcd v3 client and Redis client (owner: ha).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/coord/etcd.c libmooncake/coord/etcd.h \
	libmooncake/coord/etcd_grpc.c libmooncake/coord/etcd_grpc.h \
	libmooncake/coord/etcd_pb.c libmooncake/coord/etcd_pb.h \
	libmooncake/coord/redis.c libmooncake/coord/redis.h \
	$(NULL)
# hiredis (empty when configured without it): redis.c alone includes it
libmooncake_internal_la_CFLAGS += $(HIREDIS_CFLAGS)
libmooncake_internal_la_LIBADD += $(HIREDIS_LIBS)

# etcd v3 client (owner: ha).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/coord/etcd.c libmooncake/coord/etcd.h \
	$(NULL)

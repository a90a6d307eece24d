# mooncake_master (owner: master).
bin_PROGRAMS += mooncake_master
mooncake_master_SOURCES = \
	mooncake-master/main.c \
	mooncake-master/master.c mooncake-master/master.h \
	mooncake-master/flags.c mooncake-master/flags.h \
	mooncake-master/rpc.c \
	mooncake-master/objects.c \
	mooncake-master/dfs.c mooncake-master/dfs.h \
	mooncake-master/dfs_alloc.c mooncake-master/dfs_alloc.h \
	mooncake-master/evict.c mooncake-master/evict.h \
	mooncake-master/segments.c \
	mooncake-master/nof.c \
	mooncake-master/clients.c \
	mooncake-master/meta_owner.c \
	mooncake-master/http.c mooncake-master/http.h \
	mooncake-master/admin.c \
	mooncake-master/tasks.c \
	mooncake-master/ha.c mooncake-master/ha.h \
	mooncake-master/ha_redis.c \
	mooncake-master/oplog.c mooncake-master/oplog.h \
	mooncake-master/snapshot.c mooncake-master/snapshot.h \
	mooncake-master/ship.c mooncake-master/ship.h \
	mooncake-master/kv_events.c mooncake-master/kv_events.h \
	mooncake-master/kv_event_codec.c \
	mooncake-master/msgpack.c mooncake-master/msgpack.h \
	mooncake-master/tenants.c mooncake-master/tenants.h \
	mooncake-master/placement.h \
	mooncake-master/dynrep.c mooncake-master/dynrep.h \
	$(NULL)
mooncake_master_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) $(ZMQ_CFLAGS)
mooncake_master_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(ZMQ_LIBS) \
	$(PTHREAD_LIBS)

# mooncake_http_metadata_server: the metadata store of http.c alone.
bin_PROGRAMS += mooncake_http_metadata_server
mooncake_http_metadata_server_SOURCES = \
	mooncake-master/metadata_server.c \
	mooncake-master/http.c mooncake-master/http.h \
	$(NULL)
mooncake_http_metadata_server_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
mooncake_http_metadata_server_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(PTHREAD_LIBS)

# The configuration file the daemon loads (--config_path, JSON), and the
# commented reference of every flag, which JSON cannot carry, as an example.
mooncakeconfdir = $(sysconfdir)/mooncake
dist_mooncakeconf_DATA = mooncake-master/mooncake-master.json
mooncakeexampledir = $(docdir)/examples
dist_mooncakeexample_DATA = mooncake-master/mooncake-master.conf
# KV cache events (kv_events.c): wire format, triggers, sequence rule.
EXTRA_DIST += docs/events.md
dist_man_MANS = docs/man/mooncake_master.1 docs/man/mooncake_http_metadata_server.1

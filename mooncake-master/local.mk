# mooncake_master (owner: master).
bin_PROGRAMS += mooncake_master
mooncake_master_SOURCES = \
	mooncake-master/main.c \
	mooncake-master/master.c mooncake-master/master.h \
	mooncake-master/flags.c mooncake-master/flags.h \
	mooncake-master/rpc.c \
	mooncake-master/index/index.h \
	mooncake-master/index/objects.c mooncake-master/index/objects_internal.h \
	mooncake-master/index/writes.c \
	mooncake-master/index/queries.c \
	mooncake-master/index/removes.c \
	mooncake-master/index/offload.c \
	mooncake-master/index/segments.c \
	mooncake-master/index/clients.c \
	mooncake-master/index/tenants.c mooncake-master/index/tenants.h \
	mooncake-master/index/evict.c mooncake-master/index/evict.h \
	mooncake-master/index/placement.h \
	mooncake-master/index/dynrep.c mooncake-master/index/dynrep.h \
	mooncake-master/index/tasks.c \
	mooncake-master/durability/durability.h \
	mooncake-master/durability/oplog.c mooncake-master/durability/oplog.h \
	mooncake-master/durability/snapshot.c mooncake-master/durability/snapshot.h \
	mooncake-master/durability/ship.c mooncake-master/durability/ship_code.c mooncake-master/durability/ship.h \
	mooncake-master/ha/ha.c mooncake-master/ha/ha.h \
	mooncake-master/ha/ha_redis.c mooncake-master/ha/view.c \
	mooncake-master/tiers/tiers.h \
	mooncake-master/tiers/dfs.c mooncake-master/tiers/dfs.h \
	mooncake-master/tiers/dfs_alloc.c mooncake-master/tiers/dfs_alloc.h \
	mooncake-master/tiers/nof.c \
	mooncake-master/events/events.h \
	mooncake-master/events/kv_events.c mooncake-master/events/kv_events.h \
	mooncake-master/events/kv_event_codec.c \
	mooncake-master/events/msgpack.c mooncake-master/events/msgpack.h \
	mooncake-master/admin/admin.h \
	mooncake-master/admin/admin.c \
	mooncake-master/admin/http.c mooncake-master/admin/http.h \
	mooncake-master/admin/meta_owner.c \
	$(NULL)
# The folders include each other by path from here (index/index.h, ...);
# docs/architecture.md, "The master's map".
mooncake_master_CPPFLAGS = -I$(top_srcdir)/mooncake-master $(AM_CPPFLAGS)
mooncake_master_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) $(ZMQ_CFLAGS) $(ZLIB_CFLAGS)
mooncake_master_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(ZMQ_LIBS) $(ZLIB_LIBS) \
	$(PTHREAD_LIBS)

# mooncake_http_metadata_server: the metadata store of admin/http.c alone.
bin_PROGRAMS += mooncake_http_metadata_server
mooncake_http_metadata_server_SOURCES = \
	mooncake-master/admin/metadata_server.c \
	mooncake-master/admin/http.c mooncake-master/admin/http.h \
	$(NULL)
mooncake_http_metadata_server_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
mooncake_http_metadata_server_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(PTHREAD_LIBS)

# The configuration file the daemon loads (--config_path, JSON), and the
# commented reference of every flag, which JSON cannot carry, as an example.
mooncakeconfdir = $(sysconfdir)/mooncake
dist_mooncakeconf_DATA = mooncake-master/mooncake-master.json
mooncakeexampledir = $(docdir)/examples
dist_mooncakeexample_DATA = mooncake-master/mooncake-master.conf
# KV cache events (events/kv_events.c): wire format, triggers, sequence rule.
EXTRA_DIST += docs/events.md
dist_man_MANS = docs/man/mooncake_master.1 docs/man/mooncake_http_metadata_server.1

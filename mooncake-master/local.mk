# mooncake_master (owner: master).
bin_PROGRAMS += mooncake_master
mooncake_master_SOURCES = \
	mooncake-master/main.c \
	mooncake-master/master.c mooncake-master/master.h \
	mooncake-master/flags.c mooncake-master/flags.h \
	mooncake-master/rpc.c \
	mooncake-master/objects.c \
	mooncake-master/evict.c mooncake-master/evict.h \
	mooncake-master/segments.c \
	mooncake-master/clients.c \
	mooncake-master/http.c \
	mooncake-master/admin.c \
	mooncake-master/tasks.c \
	$(NULL)
mooncake_master_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
mooncake_master_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS)
# The commented reference of every flag and a loadable --config_path example.
mooncakeconfdir = $(sysconfdir)/mooncake
dist_mooncakeconf_DATA = mooncake-master/mooncake-master.conf mooncake-master/mooncake-master.json
dist_man_MANS = docs/man/mooncake_master.1

# mooncake_master (owner: master).
bin_PROGRAMS += mooncake_master
mooncake_master_SOURCES = \
	mooncake-master/main.c \
	mooncake-master/master.c mooncake-master/master.h \
	mooncake-master/flags.c mooncake-master/flags.h \
	mooncake-master/rpc.c \
	mooncake-master/objects.c \
	mooncake-master/segments.c \
	mooncake-master/clients.c \
	mooncake-master/http.c \
	$(NULL)
mooncake_master_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
mooncake_master_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS)
EXTRA_DIST += mooncake-master/mooncake-master.conf
dist_man_MANS = docs/man/mooncake_master.1

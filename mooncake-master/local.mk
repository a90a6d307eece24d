# mooncake_master (owner: master).
bin_PROGRAMS += mooncake_master
mooncake_master_SOURCES = \
	$(NULL)
mooncake_master_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
mooncake_master_LDADD = libmooncake-internal.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS)

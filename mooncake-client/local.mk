# mooncake_client (owner: dummy clients): the standalone real client that
# serves dummy clients.  Public API only.
bin_PROGRAMS += mooncake_client
mooncake_client_SOURCES = mooncake-client/main.c
mooncake_client_LDADD = libmooncake.la $(PTHREAD_LIBS)
dist_man_MANS += docs/man/mooncake_client.1

# Tests: one Check runner over every unit suite; pytest suites under tests/python.
if HAVE_CHECK
check_PROGRAMS += tests/unit/check_all
TESTS += tests/unit/check_all
tests_unit_check_all_SOURCES = \
	tests/unit/check_all.c tests/unit/check_suites.h \
	$(NULL)
tests_unit_check_all_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_unit_check_all_LDADD = libmooncake-internal.la $(CHECK_LIBS)
endif

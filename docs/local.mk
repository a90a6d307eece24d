# Documentation (owner: packaging): the C API overview page, the release
# notes and the licence.  The programs' pages are listed next to them.
dist_man_MANS += docs/man/mooncake.3
EXTRA_DIST += \
	LICENSE NEWS \
	docs/man/mooncake-cli.1 \
	tests/packaging/run.sh \
	tests/packaging/common.sh \
	tests/packaging/check-symbols.sh \
	$(NULL)

# The Debian packages built, linted, installed, used (C, Python, Lua,
# mooncake-cli against the installed master) and purged: root only, a few
# minutes (tests/packaging/run.sh).
check-packaging:
	$(abs_srcdir)/tests/packaging/run.sh
.PHONY: check-packaging

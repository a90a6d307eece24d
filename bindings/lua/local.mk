# Lua bindings (owner: packaging).
#
# swig/mooncake.i (+ swig/lua.i) -> bindings/lua/core_wrap.c, built as the
# libtool module mooncake_core.la (installed as <luaexecdir>/mooncake_core.so,
# luaopen_mooncake_core); the hand-written module bindings/lua/mooncake.lua
# (`require "mooncake"`) goes to <luadir>.  Lua modules do not link liblua:
# the interpreter provides its symbols.
#
# The build tree holds a runnable copy in $(builddir)/lua/ (links), so
#   LUA_PATH="$(abs_builddir)/lua/?.lua;;" LUA_CPATH="$(abs_builddir)/lua/?.so;;" \
#   LD_LIBRARY_PATH=$(abs_builddir)/.libs lua5.4 -e 'require "mooncake"'
# works without installing.  `make check-lua` runs tests/lua with busted.

lua_swig_sources = swig/mooncake.i swig/lua.i

EXTRA_DIST += \
	swig/lua.i \
	bindings/lua/mooncake.lua \
	examples/hello.lua \
	tests/lua/helpers.lua \
	tests/lua/store_spec.lua \
	$(NULL)

if ENABLE_LUA
dist_lua_DATA = bindings/lua/mooncake.lua
luaexec_LTLIBRARIES = mooncake_core.la
nodist_mooncake_core_la_SOURCES = bindings/lua/core_wrap.c
# The Lua C functions lua.i registers with %native (swig/lua_glue.h).
mooncake_core_la_SOURCES = swig/lua_glue.c swig/lua_glue.h
mooncake_core_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/swig
mooncake_core_la_CFLAGS = $(AM_CFLAGS) $(LUA_CFLAGS) -fno-strict-aliasing
mooncake_core_la_LIBADD = libmooncake.la
mooncake_core_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shrext .so

CLEANFILES += bindings/lua/core_wrap.c

bindings/lua/core_wrap.c: $(lua_swig_sources) $(mooncakeinclude_HEADERS)
	$(AM_V_GEN)$(MKDIR_P) bindings/lua && \
	$(SWIG) -lua -module mooncake_core -I$(srcdir)/libmooncake/include -I$(srcdir)/swig \
		-o $@-t $(srcdir)/swig/mooncake.i && \
	mv -f $@-t $@

all_local_targets += lua-build-tree
lua-build-tree: mooncake_core.la
	$(AM_V_GEN)$(MKDIR_P) lua && \
	ln -sf $(abs_srcdir)/bindings/lua/mooncake.lua lua/mooncake.lua && \
	ln -sf $(abs_builddir)/.libs/mooncake_core.so lua/mooncake_core.so

clean_local_targets += clean-lua-build-tree
clean-lua-build-tree:
	-rm -rf lua

# The busted specs against the build tree (a real master).
check-lua: all
	@test -n "$(BUSTED)" || { echo "check-lua: busted is missing (apt-get install lua-busted)"; exit 1; }
	cd $(srcdir)/tests/lua && \
	LUA_PATH="$(abs_builddir)/lua/?.lua;$(abs_srcdir)/tests/lua/?.lua;;" \
	LUA_CPATH="$(abs_builddir)/lua/?.so;;" \
	LD_LIBRARY_PATH=$(abs_builddir)/.libs$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	MC_MASTER_BIN=$(abs_builddir)/mooncake_master MC_SRCDIR=$(abs_srcdir) MC_LUA=$(LUA_BIN) \
	$(LUA_BIN) $(BUSTED) --output=plainTerminal .
check_local_targets += check-lua
else
check-lua:
	@echo "check-lua: the Lua bindings are not configured (--enable-lua)"; exit 1
endif
.PHONY: lua-build-tree clean-lua-build-tree check-lua

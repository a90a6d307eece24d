# The pip wheel (owner: wheel).
#
# `make wheel` builds mooncake_transfer_engine-$(PACKAGE_VERSION)-cp3X-cp3X-
# linux_<arch>.whl in the build directory, offline: setuptools' bdist_wheel
# (Debian's python3-setuptools and python3-wheel) run on a staged tree,
# wheel-stage/, that holds
#   mooncake/**.py              the package sources and the generated capi.py
#   mooncake/_capi.so           the SWIG module, RUNPATH $ORIGIN
#   mooncake/libmooncake.so.1   the library
#   mooncake/bin/<daemon>       mooncake_master, mooncake_client and
#                               mooncake_http_metadata_server, RUNPATH
#                               $ORIGIN/.. where they link libmooncake
#   mooncake/_commands.py       their console commands (packaging/wheel/)
# and packaging/wheel/setup.py.  The build-tree _capi.so carries a RUNPATH
# into .libs/, so it and mooncake_client are linked again for the wheel,
# into wheel-build/, against the same objects with $ORIGIN-relative
# RUNPATHs; the master and the metadata server link the internal library
# statically and are copied as built.  Before packing, every ELF file in
# the stage is checked: no RPATH or RUNPATH other than $ORIGIN-relative
# ones.  tests/packaging/wheel.sh installs the wheel into a bare venv.

EXTRA_DIST += \
	packaging/wheel/setup.py \
	packaging/wheel/_commands.py \
	tests/packaging/wheel.sh \
	$(NULL)

if ENABLE_PYTHON
wheel_stage = wheel-stage
# Shell, for the link rules: ldadd LIBS... prints LIBS with libmooncake.la
# replaced by the library in .libs/ (found at run time next to the module,
# or one directory up from bin/, never in the build tree); pic LO... prints
# the PIC object libtool compiled for each LO.
wheel_sh_fns = \
	ldadd() { for l in "$$@"; do \
		case $$l in libmooncake.la) printf ' %s' -L.libs -lmooncake;; *) printf ' %s' "$$l";; esac; \
	done; }; \
	pic() { for o in "$$@"; do \
		b=$${o\#\#*/}; d=$${o%"$$b"}; printf ' %s' "$$d.libs/$${b%.lo}.o"; \
	done; }

wheel-build/_capi.so: _capi.la libmooncake.la
	$(AM_V_CCLD)$(MKDIR_P) wheel-build && $(wheel_sh_fns); \
	$(CCLD) -shared $(AM_CFLAGS) $(CFLAGS) $(AM_LDFLAGS) $(LDFLAGS) -o $@ \
		$$(pic $(_capi_la_OBJECTS)) $$(ldadd $(_capi_la_LIBADD)) $(LIBS) -Wl,-rpath,'$$ORIGIN'

wheel-build/mooncake_client: mooncake_client$(EXEEXT) libmooncake.la
	$(AM_V_CCLD)$(MKDIR_P) wheel-build && $(wheel_sh_fns); \
	$(CCLD) $(AM_CFLAGS) $(CFLAGS) $(AM_LDFLAGS) $(LDFLAGS) -o $@ \
		$(mooncake_client_OBJECTS) $$(ldadd $(mooncake_client_LDADD)) $(LIBS) \
		-Wl,-rpath,'$$ORIGIN/..'

# Stage, check the run-time paths, pack.  The stage is rebuilt from scratch
# each time so that a file removed from the package leaves the wheel too.
wheel: all wheel-build/_capi.so wheel-build/mooncake_client
	$(AM_V_GEN)set -e; \
	rm -rf $(wheel_stage) mooncake_transfer_engine-*.whl; \
	pkg=$(wheel_stage)/mooncake; \
	$(MKDIR_P) $$pkg/bin; \
	for f in $(mooncake_py_sources) $(mooncake_reshard_py_sources) \
		$(mooncake_reshard_weight_py_sources); do \
		rel=$${f#bindings/python/}; \
		$(MKDIR_P) $(wheel_stage)/$$(dirname $$rel); \
		cp $(srcdir)/$$f $(wheel_stage)/$$rel; \
	done; \
	cp bindings/python/capi.py $(srcdir)/packaging/wheel/_commands.py $$pkg/; \
	cp $(srcdir)/packaging/wheel/setup.py $(srcdir)/LICENSE $(wheel_stage)/; \
	cp -L .libs/libmooncake.so.1 $$pkg/libmooncake.so.1; \
	cp wheel-build/_capi.so $$pkg/_capi.so; \
	cp wheel-build/mooncake_client $$pkg/bin/; \
	for d in mooncake_master mooncake_http_metadata_server; do \
		$(LIBTOOL) --quiet --mode=install $(INSTALL_PROGRAM) $$d$(EXEEXT) \
			$(abs_builddir)/$$pkg/bin/$$d$(EXEEXT); \
	done; \
	chmod 755 $$pkg/bin/* $$pkg/*.so*; \
	$(STRIP) --strip-debug $$pkg/bin/* $$pkg/*.so*; \
	for f in $$pkg/bin/* $$pkg/*.so*; do \
		paths=$$(readelf -d $$f | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p' | tr ':' '\n'); \
		for p in $$paths; do \
			case $$p in \
			'$$ORIGIN'|'$$ORIGIN'/*) ;; \
			*) echo "wheel: $$f has the run-time path $$p; only \$$ORIGIN-relative ones may ship" >&2; \
				exit 1;; \
			esac; \
		done; \
	done; \
	(cd $(wheel_stage) && MC_WHEEL_VERSION=$(PACKAGE_VERSION) \
		$(PYTHON) setup.py --quiet bdist_wheel --dist-dir $(abs_builddir)) >wheel.log 2>&1 || \
		{ cat wheel.log >&2; echo "wheel: setup.py bdist_wheel failed (python3-setuptools and python3-wheel installed?)" >&2; exit 1; }; \
	echo "wheel: $(abs_builddir)/$$(cd $(abs_builddir) && echo mooncake_transfer_engine-*.whl)"
else
wheel:
	@echo "$@: the Python bindings are not configured (--enable-python)"; exit 1
endif
# tests/packaging/wheel.sh: the wheel in a bare venv (about 10 s; ./test.sh
# runs it after the Debian packages).
check-wheel:
	$(srcdir)/tests/packaging/wheel.sh $(abs_builddir)
.PHONY: wheel clean-wheel check-wheel
clean_local_targets += clean-wheel
clean-wheel:
	-rm -rf wheel-stage wheel-build wheel.log mooncake_transfer_engine-*.whl

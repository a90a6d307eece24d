# Python bindings (owner: python).
#
# swig/mooncake.i (+ swig/python.i) -> bindings/python/capi_wrap.c and
# bindings/python/capi.py; the wrapper is built as the libtool module
# _capi.la (installed as <pythondir>/mooncake/_capi.so) and the hand-written
# package bindings/python/mooncake/ goes next to it.
#
# The package also runs straight from the build tree: all-local assembles
# $(builddir)/python/mooncake/ from links to the sources, the generated
# capi.py and .libs/_capi.so, so that
#   PYTHONPATH=$(abs_builddir)/python LD_LIBRARY_PATH=$(abs_builddir)/.libs \
#     python3 -c "from mooncake.store import MooncakeDistributedStore"
# works without installing.  `make check-python` runs tests/python that way.

# Package sources, relative to $(srcdir); subpackages keep their folders.
mooncake_py_sources = \
	bindings/python/mooncake/__init__.py \
	bindings/python/mooncake/_errors.py \
	bindings/python/mooncake/_hooks.py \
	bindings/python/mooncake/_keys.py \
	bindings/python/mooncake/_malloc.py \
	bindings/python/mooncake/_tensor.py \
	bindings/python/mooncake/_util.py \
	bindings/python/mooncake/async_store.py \
	bindings/python/mooncake/buffer_pool.py \
	bindings/python/mooncake/cli.py \
	bindings/python/mooncake/http_metadata_server.py \
	bindings/python/mooncake/engine.py \
	bindings/python/mooncake/mooncake_config.py \
	bindings/python/mooncake/mooncake_store_service.py \
	bindings/python/mooncake/store.py \
	bindings/python/mooncake/structured_object_store.py \
	bindings/python/mooncake/dataproto_catalog.py \
	bindings/python/mooncake/_fast_copy.py \
	$(NULL)

# Subpackages: one install directory each (automake flattens a _PYTHON list).
mooncake_reshard_py_sources = \
	bindings/python/mooncake/reshard/__init__.py \
	bindings/python/mooncake/reshard/_checks.py \
	bindings/python/mooncake/reshard/contracts.py \
	bindings/python/mooncake/reshard/geometry.py \
	$(NULL)
mooncake_reshard_weight_py_sources = \
	bindings/python/mooncake/reshard/weight/__init__.py \
	bindings/python/mooncake/reshard/weight/_memory.py \
	bindings/python/mooncake/reshard/weight/manifest.py \
	bindings/python/mooncake/reshard/weight/planner.py \
	bindings/python/mooncake/reshard/weight/serde.py \
	bindings/python/mooncake/reshard/weight/snapshot.py \
	bindings/python/mooncake/reshard/weight/storage_manifest.py \
	bindings/python/mooncake/reshard/weight/store.py \
	bindings/python/mooncake/reshard/weight/store_layout.py \
	bindings/python/mooncake/reshard/weight/store_load.py \
	bindings/python/mooncake/reshard/weight/store_plan.py \
	bindings/python/mooncake/reshard/weight/store_writer.py \
	bindings/python/mooncake/reshard/weight/types.py \
	$(NULL)

python_swig_sources = \
	swig/mooncake.i \
	swig/python.i \
	$(NULL)

EXTRA_DIST += \
	$(python_swig_sources) \
	examples/hello.py \
	examples/p2p_hello.py \
	examples/tensor_hello.py \
	examples/dummy_hello.py \
	examples/weights_hello.py \
	tests/python/conftest.py \
	tests/python/client_proc.py \
	tests/python/helpers.py \
	tests/python/test_api.py \
	tests/python/test_admin.py \
	tests/python/test_master_process.py \
	tests/python/test_client_process.py \
	tests/python/test_metadata_server.py \
	tests/python/test_store_service.py \
	tests/python/test_hicache_check.py \
	tests/python/test_meta_server_script.py \
	scripts/check_hicache_hugepage_requirements.py \
	scripts/test_meta_server.py \
	tests/python/test_client_http.py \
	tests/python/test_examples.py \
	tests/python/test_two_clients.py \
	tests/python/test_liveness.py \
	tests/python/test_threads.py \
	tests/python/test_hostile.py \
	tests/python/test_zero_copy.py \
	tests/python/test_ranges.py \
	tests/python/test_replica_kinds.py \
	tests/python/test_safetensors.py \
	tests/python/test_sessions.py \
	tests/python/test_upsert.py \
	tests/python/test_remove.py \
	tests/python/test_replica_clear.py \
	tests/python/test_tiers.py \
	tests/python/test_buffers.py \
	tests/python/test_buffer_pool.py \
	tests/python/test_config.py \
	tests/python/test_setup.py \
	tests/python/test_replicate_config.py \
	tests/python/test_replicas.py \
	tests/python/test_eviction.py \
	tests/python/test_groups.py \
	tests/python/test_tenants.py \
	tests/python/test_kv_events.py \
	tests/python/test_seed_rules.py \
	tests/python/test_segments.py \
	tests/python/test_remount.py \
	tests/python/test_tasks.py \
	tests/python/test_shm.py \
	tests/python/test_tensor.py \
	tests/python/test_structured.py \
	tests/python/test_structured_codecs.py \
	tests/python/test_dataproto.py \
	tests/python/test_dataproto_catalog.py \
	tests/python/test_dataproto_put_bytes.py \
	tests/python/engine_proc.py \
	tests/python/test_engine.py \
	tests/python/test_dummy.py \
	tests/python/test_async_store.py \
	tests/python/test_cli.py \
	tests/python/test_bench_plot.py \
	tests/python/test_weights.py \
	tests/python/weights_proc.py \
	tests/python/test_reshard_contracts.py \
	tests/python/test_reshard_manifest.py \
	tests/python/test_reshard_planner.py \
	tests/python/test_reshard_store.py \
	tests/python/test_reshard_native.py \
	tests/python/test_fabric.py \
	tests/python/rawwire.py \
	tests/python/test_regex_bounds.py \
	tests/python/test_clear_errors.py \
	tests/python/test_package_imports.py \
	tests/python/test_bounded_input.py \
	tests/python/test_metadata_limits.py \
	tests/python/test_metadata_owner.py \
	tests/python/test_te_limits.py \
	tests/python/test_dead_holder.py \
	tests/python/ha_helpers.py \
	tests/python/test_durable.py \
	tests/python/test_ha.py \
	tests/python/test_ha_ship.py \
	tests/python/test_oplog.py \
	tests/python/test_ha_redis.py \
	tests/python/test_auth.py \
	tests/python/test_dfs.py \
	tests/python/test_env_settings.py \
	tests/python/test_hostpool.py \
	tests/python/test_idle_conns.py \
	tests/python/test_loc_cache.py \
	tests/python/test_malloc_tune.py \
	tests/python/test_nof.py \
	tests/python/test_populate.py \
	tests/python/test_put_one_trip.py \
	tests/python/test_read_identity.py \
	tests/python/test_rpc_input.py \
	tests/python/test_spec_reads.py \
	tests/python/test_tiers_remote.py \
	$(NULL)

if ENABLE_PYTHON
mooncakepythondir = $(pythondir)/mooncake
mooncakepython_PYTHON = $(mooncake_py_sources)
mooncakereshardpythondir = $(pythondir)/mooncake/reshard
mooncakereshardpython_PYTHON = $(mooncake_reshard_py_sources)
mooncakereshardweightpythondir = $(pythondir)/mooncake/reshard/weight
mooncakereshardweightpython_PYTHON = $(mooncake_reshard_weight_py_sources)
nodist_mooncakepython_PYTHON = bindings/python/capi.py

mooncakepyexecdir = $(pyexecdir)/mooncake
mooncakepyexec_LTLIBRARIES = _capi.la
nodist__capi_la_SOURCES = bindings/python/capi_wrap.c
# The hand-written C of the module: python.i declares it and calls into it
# (swig/py_glue.h: converters, BufferHandle, the Store and tensor method
# bodies; swig/pyhelpers.h: the per-row object builders).
_capi_la_SOURCES = \
	swig/py_glue.h \
	swig/py_conv.c \
	swig/py_buffer.c \
	swig/py_store.c \
	swig/py_tensor.c \
	swig/pyhelpers.c \
	swig/pyhelpers.h \
	$(NULL)
_capi_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/swig
# The generated wrapper builds with the project warnings and -Werror too.
_capi_la_CFLAGS = $(AM_CFLAGS) $(PYTHON_CFLAGS) $(NUMPY_CFLAGS) -fno-strict-aliasing
_capi_la_LIBADD = libmooncake.la
# Extension modules leave the libpython symbols to the interpreter.
_capi_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shrext .so

CLEANFILES += bindings/python/capi_wrap.c bindings/python/capi.py

# mooncake-cli: the admin CLI (mooncake/cli.py) as a command.
bin_SCRIPTS = mooncake-cli
dist_man_MANS += docs/man/mooncake-cli.1
CLEANFILES += mooncake-cli
mooncake-cli: Makefile
	$(AM_V_GEN)printf '#!%s\n# mooncake-cli: see mooncake-cli(1).\nimport sys\n\nfrom mooncake.cli import main\n\nsys.exit(main())\n' \
		"$(PYTHON)" >$@-t && chmod +x $@-t && mv -f $@-t $@

# mc_store_rest_server: upstream's console script of the REST store service
# (mooncake/mooncake_store_service.py, needs aiohttp).  The tests run the
# build-tree copy, next to mooncake_master.
bin_SCRIPTS += mc_store_rest_server
dist_man_MANS += docs/man/mc_store_rest_server.1
CLEANFILES += mc_store_rest_server
mc_store_rest_server: Makefile
	$(AM_V_GEN)printf '#!%s\n# mc_store_rest_server: see mc_store_rest_server(1).\nimport sys\n\nfrom mooncake.mooncake_store_service import sync_main\n\nsys.exit(sync_main())\n' \
		"$(PYTHON)" >$@-t && chmod +x $@-t && mv -f $@-t $@

bindings/python/capi_wrap.c: $(python_swig_sources) $(mooncakeinclude_HEADERS)
	$(AM_V_GEN)$(MKDIR_P) bindings/python && \
	$(SWIG) -python -threads -I$(srcdir)/libmooncake/include -I$(srcdir)/swig \
		-outdir bindings/python -o $@-t $(srcdir)/swig/mooncake.i && \
	mv -f $@-t $@

# capi.py comes out of the same swig run as capi_wrap.c.
bindings/python/capi.py: bindings/python/capi_wrap.c
	@if test ! -f $@; then rm -f bindings/python/capi_wrap.c; \
		$(MAKE) $(AM_MAKEFLAGS) bindings/python/capi_wrap.c; fi

# The build-tree package: links, so edits in $(srcdir) show up at once.
all_local_targets += python-build-tree
python-build-tree: _capi.la bindings/python/capi.py
	$(AM_V_GEN)set -e; \
	for f in $(mooncake_py_sources) $(mooncake_reshard_py_sources) \
		$(mooncake_reshard_weight_py_sources); do \
		rel=$${f#bindings/python/}; \
		$(MKDIR_P) python/$$(dirname $$rel); \
		ln -sf $(abs_srcdir)/$$f python/$$rel; \
	done; \
	ln -sf $(abs_builddir)/bindings/python/capi.py python/mooncake/capi.py; \
	ln -sf $(abs_builddir)/.libs/_capi.so python/mooncake/_capi.so

clean_local_targets += clean-python-build-tree
clean-python-build-tree:
	-rm -rf python

# The pytest suite against the build tree (real master, real clients).
# Most of its time is spent waiting on sockets, leases and child processes,
# so with pytest-xdist (python3-pytest-xdist) it runs $MC_PYTEST_JOBS
# (default 2) workers, a whole file per worker at a time (module fixtures
# such as `master` stay one per file); MC_PYTEST_JOBS=0 runs it serially.
check-python: all
	jobs=$${MC_PYTEST_JOBS:-2}; par=; \
	if [ "$$jobs" -gt 0 ] && $(PYTHON) -c 'import xdist' 2>/dev/null; then \
		par="-n $$jobs --dist loadfile"; fi; \
	PYTHONPATH=$(abs_builddir)/python \
	LD_LIBRARY_PATH=$(abs_builddir)/.libs$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	MC_MASTER_BIN=$(abs_builddir)/mooncake_master \
	MC_CLIENT_BIN=$(abs_builddir)/mooncake_client \
	PYTHONDONTWRITEBYTECODE=1 \
	$(PYTHON) -m pytest -q -p no:cacheprovider $$par $(srcdir)/tests/python
# The cluster suite (tests/cluster): hosts in network namespaces; needs root
# (skipped otherwise), about 2 minutes on 2 cores, of which the fault suite
# (test_faults.py: 20 s of faults per master mode) takes about 100 s.
# ./test.sh runs it after check-python.
check-cluster: all
	PYTHONPATH=$(abs_builddir)/python \
	LD_LIBRARY_PATH=$(abs_builddir)/.libs$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	MC_MASTER_BIN=$(abs_builddir)/mooncake_master \
	PYTHONDONTWRITEBYTECODE=1 \
	$(PYTHON) -m pytest -q -rs -p no:cacheprovider $(srcdir)/tests/cluster
# The fault suite alone, long: $MC_FAULTS_SECONDS (default 300) of faults per
# master mode (plain, durable, ha), $MC_FAULTS_SEED to repeat a schedule,
# $MC_FAULTS_DIR to keep each run's logs and history there.
check-faults-long: all
	PYTHONPATH=$(abs_builddir)/python \
	LD_LIBRARY_PATH=$(abs_builddir)/.libs$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	MC_MASTER_BIN=$(abs_builddir)/mooncake_master \
	MC_FAULTS_SECONDS=$${MC_FAULTS_SECONDS:-300} \
	PYTHONDONTWRITEBYTECODE=1 \
	$(PYTHON) -m pytest -q -rs -p no:cacheprovider $(srcdir)/tests/cluster/test_checker.py \
		$(srcdir)/tests/cluster/test_faults.py
# `make check` (and distcheck) runs the Python suite too.
check_local_targets += check-python
else
check-python check-cluster check-faults-long:
	@echo "$@: the Python bindings are not configured (--enable-python)"; exit 1
endif
.PHONY: python-build-tree clean-python-build-tree check-python check-cluster check-faults-long
# The fault suite's files (the rest of tests/cluster is in tests/local.mk).
EXTRA_DIST += tests/cluster/faults.py tests/cluster/fault_worker.py tests/cluster/faultvalue.py \
	tests/cluster/checker.py tests/cluster/test_checker.py tests/cluster/test_faults.py

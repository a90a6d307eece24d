# The emulated verbs device (tests/rdma/emu/README.md): a stand-in
# libibverbs.so.1 for tests only.  Never installed, never linked into
# anything we ship; built only by the targets below (and compiled by
# tests/python/test_rdma_emu.py itself under `make check-python`).
#   make rdma-emu          the library and its own checker in tests/rdma/emu/
#   make check-rdma-emu    the stand-in's verbs checks, then test_rdma_emu.py
#   make rdma-coverage     line coverage of libmooncake/transfer/rdma/ and onesided.c (gcov)
EXTRA_DIST += tests/rdma/emu/README.md tests/rdma/emu/verbs_emu.c \
	tests/rdma/emu/emu_check.c tests/rdma/emu/libibverbs.map tests/rdma/coverage.sh \
	tests/python/test_rdma_emu.py bench/rdma_emu_bench.py
rdma_emu_dir = $(abs_builddir)/tests/rdma/emu
rdma_emu_cflags = -std=gnu11 -O2 -g $(WARN_CFLAGS)
if HAVE_RDMA
rdma-emu: $(srcdir)/tests/rdma/emu/verbs_emu.c $(srcdir)/tests/rdma/emu/emu_check.c
	@mkdir -p $(rdma_emu_dir)
	$(CC) $(rdma_emu_cflags) -fPIC -shared -fvisibility=hidden -Wl,-soname,libibverbs.so.1 \
		-Wl,--version-script=$(srcdir)/tests/rdma/emu/libibverbs.map \
		-o $(rdma_emu_dir)/libibverbs.so.1 $(srcdir)/tests/rdma/emu/verbs_emu.c -lpthread
	$(CC) $(rdma_emu_cflags) -o $(rdma_emu_dir)/emu_check $(srcdir)/tests/rdma/emu/emu_check.c \
		-L$(rdma_emu_dir) -l:libibverbs.so.1
check-rdma-emu: all rdma-emu
	rm -rf $(rdma_emu_dir)/rdv && mkdir -p $(rdma_emu_dir)/rdv
	LD_LIBRARY_PATH=$(rdma_emu_dir) MC_VERBS_EMU_DIR=$(rdma_emu_dir)/rdv \
	MC_VERBS_EMU_DEVICES=mlx5_0,mlx5_1 MC_VERBS_EMU_MAX_MR_SIZE=8388608 \
	MC_VERBS_EMU_MAX_QP_WR=64 $(rdma_emu_dir)/emu_check
	PYTHONPATH=$(abs_builddir)/python \
	LD_LIBRARY_PATH=$(abs_builddir)/.libs$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	MC_MASTER_BIN=$(abs_builddir)/mooncake_master \
	MC_CLIENT_BIN=$(abs_builddir)/mooncake_client \
	PYTHONDONTWRITEBYTECODE=1 \
	$(PYTHON) -m pytest -q -p no:cacheprovider $(srcdir)/tests/python/test_rdma_emu.py
else
rdma-emu check-rdma-emu:
	@echo "$@: this build has no RDMA transport (libibverbs-dev was not found): skipped"
endif
rdma-coverage:
	$(srcdir)/tests/rdma/coverage.sh
.PHONY: rdma-emu check-rdma-emu rdma-coverage

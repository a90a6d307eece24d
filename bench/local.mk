# Benchmarks: `make bench` (or bench/store_bench.py) prints the comparison table.
noinst_PROGRAMS += bench/raw_tcp
bench_raw_tcp_SOURCES = bench/raw_tcp.c
# Master metadata rate and memory per object (uses the wire codec directly).
noinst_PROGRAMS += bench/meta_bench
bench_meta_bench_SOURCES = bench/meta_bench.c
bench_meta_bench_LDADD = libmooncake-internal.la $(PTHREAD_LIBS)
EXTRA_DIST += bench/store_bench.py bench/plot.py bench/tensor_bench.py bench/te_bench.py bench/dummy_bench.py \
	bench/failover_bench.py \
	bench/structured_bench.py \
	bench/weights_bench.py \
	bench/tier_bench.py \
	bench/dfs_bench.py \
	bench/async_bench.py \
	bench/fabric_bench.py \
	bench/README.md

bench: all
	$(PYTHON) $(srcdir)/bench/store_bench.py --build-dir $(abs_builddir)
	$(PYTHON) $(srcdir)/bench/tensor_bench.py --build-dir $(abs_builddir)
	$(PYTHON) $(srcdir)/bench/structured_bench.py --build-dir $(abs_builddir)
	$(PYTHON) $(srcdir)/bench/weights_bench.py --build-dir $(abs_builddir)
	$(PYTHON) $(srcdir)/bench/te_bench.py --build-dir $(abs_builddir)
	$(PYTHON) $(srcdir)/bench/dummy_bench.py --build-dir $(abs_builddir)
	$(PYTHON) $(srcdir)/bench/async_bench.py --build-dir $(abs_builddir)
	$(abs_builddir)/bench/meta_bench --master-bin $(abs_builddir)/mooncake_master

# The master's metadata path at 10M objects (bench/README.md): about 2 GB of
# master memory and a few minutes; not part of `make bench` or CI.
meta-bench-10m: all
	$(abs_builddir)/bench/meta_bench --master-bin $(abs_builddir)/mooncake_master --objects 10000000
.PHONY: bench meta-bench-10m

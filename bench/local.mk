# Benchmarks: `make bench` (or bench/store_bench.py) prints the comparison table.
noinst_PROGRAMS += bench/raw_tcp
bench_raw_tcp_SOURCES = bench/raw_tcp.c
EXTRA_DIST += bench/store_bench.py bench/README.md

bench: all
	$(PYTHON) $(srcdir)/bench/store_bench.py --build-dir $(abs_builddir)
.PHONY: bench

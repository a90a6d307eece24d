#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Draw the store benchmark's tables as PNG files (python3-matplotlib).

    bench/store_bench.py --plot DIR      # measures, prints, writes DIR/*.png
    bench/plot.py DIR/store_bench.json   # draws again from the saved numbers

The JSON file holds what the text table shows: per value size the store's
put and get throughput, raw loopback TCP and memcpy moving the same bytes,
and the get latency quantiles (0..100 %) of each size.  Two figures:

  store_throughput.png   GB/s against value size (log axes): store get and
                         put, raw TCP, memcpy
  store_latency_cdf.png  the CDF of get latency, one curve per value size
"""
import json
import os
import sys
from typing import Dict, List

GB = 1e9


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return "%d %s" % (n, unit) if unit == "B" else "%g %s" % (n, unit)
        n /= 1024
    return str(n)


def draw(results: Dict, outdir: str) -> List[str]:
    """Write the figures of ``results`` (the layout store_bench.py saves)
    into ``outdir``; returns their paths."""
    plt = _pyplot()
    os.makedirs(outdir, exist_ok=True)
    rows = sorted(results["rows"], key=lambda r: r["size"])
    sizes = [r["size"] for r in rows]
    title = results.get("title", "mooncake store benchmark")
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, style in (("get_gbps", "store get", "o-"), ("put_gbps", "store put", "s-"),
                              ("raw_gbps", "raw TCP", "^--"), ("memcpy_gbps", "memcpy", "x:")):
        ys = [r.get(key) for r in rows]
        if all(y is not None for y in ys):
            ax.plot(sizes, ys, style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([_human(s) for s in sizes])
    ax.set_xlabel("value size")
    ax.set_ylabel("GB/s")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(os.path.join(outdir, "store_throughput.png"))
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        q = r.get("get_cdf_us") or []
        if q:
            ax.plot(q, [i / (len(q) - 1) for i in range(len(q))], label=_human(r["size"]))
    ax.set_xscale("log")
    ax.set_xlabel("get latency (us)")
    ax.set_ylabel("fraction of gets")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="value size")
    fig.tight_layout()
    paths.append(os.path.join(outdir, "store_latency_cdf.png"))
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def main(argv: List[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: bench/plot.py RESULTS.json   (written by store_bench.py --plot DIR)",
              file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        results = json.load(f)
    for p in draw(results, os.path.dirname(os.path.abspath(argv[0]))):
        print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

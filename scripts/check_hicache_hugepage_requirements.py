#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Size the HugeTLB pool for an SGLang HiCache launch on Mooncake.

Upstream's ``scripts/check_hicache_hugepage_requirements.py``, same flags,
statuses and exit codes.  Every tensor-parallel rank holds its HiCache host
pool and its Mooncake global segment in huge pages, plus, for a launch
whose arena allocations stay off regular pages, an arena pool:

    baseline / rank = hicache + global segment
    clean    / rank = baseline + arena pool          (totals: x tp-size)

The pool available is ``--available-hugetlb``, else
/sys/kernel/mm/hugepages/hugepages-<KiB>kB/nr_hugepages x the page size
(unknown when that cannot be read: planning only).

Exit status: 0 clean arena budget available (or planning only), 1 the
baseline fits but the arena may fall back to regular pages, 2 not even the
baseline fits (and 2 for a bad command line, as argparse does), 64 a size
that does not parse or a tp-size that is not positive (``error: ...`` on
stderr).

    scripts/check_hicache_hugepage_requirements.py --tp-size 8 \\
        --hicache-size 64gb --global-segment-size 16gb --arena-pool-size 4gb
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

_KIB = 1024
#: Binary units parse_size knows, by lower-case name.
_UNITS = {name: _KIB ** power
          for power, letter in enumerate("bkmgt")
          for name in ((letter,) if letter == "b" else (letter, letter + "b", letter + "ib"))}

_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([a-z]*)")

#: What each status means, for the summary.
_STATUS_TEXT = {
    "planning_only": (
        "planning only",
        "the targets are computed, but the host's HugeTLB pool could not be read "
        "(pass --available-hugetlb to check against one)."),
    "insufficient_for_baseline": (
        "insufficient for baseline",
        "the HugeTLB pool is smaller than the baseline floor: expect the launch to fail "
        "to start or to allocate."),
    "baseline_fits_arena_may_fallback": (
        "baseline fits, arena may fall back",
        "the baseline fits, but not the arena pool on top of it: some or all arena "
        "allocations may fall back to regular pages."),
    "clean_arena_budget_available": (
        "clean arena budget available",
        "the HugeTLB pool holds the baseline and the arena pool of every rank."),
}


@dataclass(frozen=True)
class BudgetSummary:
    """The sizes a launch needs, what is available, and the verdict."""

    baseline_per_rank_bytes: int
    baseline_total_bytes: int
    clean_arena_per_rank_bytes: int
    clean_arena_total_bytes: int
    available_bytes: Optional[int]
    status: str
    exit_code: int


def parse_size(value: str) -> int:
    """Bytes in ``value``: a number (fractions allowed) and an optional
    binary unit (b, k/kb/kib, m/mb/mib, g/gb/gib, t/tb/tib), in any case,
    with ``_`` as a digit separator.  ValueError otherwise."""
    text = value.strip().lower().replace("_", "")
    m = _SIZE_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid size: {value!r}")
    unit = m.group(2) or "b"
    if unit not in _UNITS:
        raise ValueError(f"unsupported size unit in {value!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def format_size(num_bytes: int) -> str:
    """``X.XX TiB/GiB/MiB/KiB`` in the largest unit that fits, else ``N B``."""
    for unit, scale in (("TiB", _KIB ** 4), ("GiB", _KIB ** 3), ("MiB", _KIB ** 2),
                        ("KiB", _KIB)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f} {unit}"
    return f"{num_bytes} B"


def read_available_hugetlb(page_size_bytes: int) -> Optional[int]:
    """Bytes in the host's pool of ``page_size_bytes`` huge pages; None when
    the kernel does not say (no such page size, no permission, no sysfs)."""
    if page_size_bytes <= 0 or page_size_bytes % _KIB:
        return None
    path = Path(f"/sys/kernel/mm/hugepages/hugepages-{page_size_bytes // _KIB}kB/nr_hugepages")
    try:
        pages = int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return pages * page_size_bytes


def evaluate_budget(*, tp_size: int, hicache_size_bytes: int, global_segment_size_bytes: int,
                    arena_pool_size_bytes: int, available_bytes: Optional[int]) -> BudgetSummary:
    """The baseline and clean-arena targets of ``tp_size`` ranks against
    ``available_bytes`` (None: unknown).  ValueError when tp_size <= 0."""
    if tp_size <= 0:
        raise ValueError("tp_size must be positive")
    baseline = hicache_size_bytes + global_segment_size_bytes
    clean = baseline + arena_pool_size_bytes
    if available_bytes is None:
        status, code = "planning_only", 0
    elif available_bytes < baseline * tp_size:
        status, code = "insufficient_for_baseline", 2
    elif available_bytes < clean * tp_size:
        status, code = "baseline_fits_arena_may_fallback", 1
    else:
        status, code = "clean_arena_budget_available", 0
    return BudgetSummary(baseline_per_rank_bytes=baseline, baseline_total_bytes=baseline * tp_size,
                         clean_arena_per_rank_bytes=clean, clean_arena_total_bytes=clean * tp_size,
                         available_bytes=available_bytes, status=status, exit_code=code)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Estimate the HugeTLB capacity a Mooncake HiCache launch needs: a "
        "baseline floor (HiCache pool and global segment per rank) and a clean-arena "
        "target (plus the arena pool), checked against the host's pool.")
    parser.add_argument("--tp-size", type=int, required=True,
                        help="tensor-parallel ranks on this host")
    parser.add_argument("--hicache-size", required=True,
                        help="HiCache host pool per rank, e.g. 64gb")
    parser.add_argument("--global-segment-size", required=True,
                        help="Mooncake global segment per rank, e.g. 16gb")
    parser.add_argument("--arena-pool-size", default="0",
                        help="arena pool per rank (default: 0)")
    parser.add_argument("--hugepage-size", default="2mb",
                        help="huge page size whose pool is read (default: 2mb)")
    parser.add_argument("--available-hugetlb",
                        help="the HugeTLB capacity to check against, e.g. 96gb, instead of "
                        "the one read from /sys/kernel/mm/hugepages")
    return parser


def summary_lines(args: argparse.Namespace, summary: BudgetSummary) -> List[str]:
    """The report: the inputs, the targets, the status and what it means."""

    def given(label: str, text: str) -> str:
        return f"{label + ':':<24}{text} ({format_size(parse_size(text))})"

    status, meaning = _STATUS_TEXT[summary.status]
    available = ("unavailable (planning-only mode)" if summary.available_bytes is None
                 else format_size(summary.available_bytes))
    return [
        "Mooncake HiCache HugeTLB sizing summary",
        "",
        f"{'tp-size:':<24}{args.tp_size}",
        given("hicache-size", args.hicache_size),
        given("global-segment-size", args.global_segment_size),
        given("arena-pool-size", args.arena_pool_size),
        given("hugepage-size", args.hugepage_size),
        f"{'available HugeTLB:':<24}{available}",
        "",
        f"{'baseline floor / rank:':<24}{format_size(summary.baseline_per_rank_bytes)}",
        f"{'baseline floor / total:':<24}{format_size(summary.baseline_total_bytes)}",
        f"{'clean arena / rank:':<24}{format_size(summary.clean_arena_per_rank_bytes)}",
        f"{'clean arena / total:':<24}{format_size(summary.clean_arena_total_bytes)}",
        "",
        f"Status: {status}",
        f"Meaning: {meaning}",
    ]


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.available_hugetlb:
            available = parse_size(args.available_hugetlb)
        else:
            available = read_available_hugetlb(parse_size(args.hugepage_size))
        summary = evaluate_budget(
            tp_size=args.tp_size,
            hicache_size_bytes=parse_size(args.hicache_size),
            global_segment_size_bytes=parse_size(args.global_segment_size),
            arena_pool_size_bytes=parse_size(args.arena_pool_size),
            available_bytes=available)
        lines = summary_lines(args, summary)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 64
    print("\n".join(lines))
    return summary.exit_code


if __name__ == "__main__":
    sys.exit(main())

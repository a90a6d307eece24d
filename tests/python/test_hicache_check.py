# SPDX-License-Identifier: Apache-2.0
"""scripts/check_hicache_hugepage_requirements.py, upstream's HugeTLB sizing
check for HiCache launches: parse_size's grammar and errors, evaluate_budget's
sums, statuses and exit codes (and its frozen BudgetSummary), the summary it
prints, --available-hugetlb over the host's pool, and the exit codes of the
command: 0/1/2 by status, 64 for a bad size or tp-size, 2 for argparse.
"""

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / \
    "check_hicache_hugepage_requirements.py"
KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.fixture(scope="module")
def chk():
    spec = importlib.util.spec_from_file_location("check_hicache", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def run(*argv):
    return subprocess.run([sys.executable, str(SCRIPT)] + list(argv), capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("512", 512), ("512b", 512), ("1k", KiB), ("1KB", KiB), ("1kib", KiB),
    ("2m", 2 * MiB), ("2MB", 2 * MiB), ("2MiB", 2 * MiB), ("3g", 3 * GiB), ("3gb", 3 * GiB),
    ("3GiB", 3 * GiB), ("1t", TiB), ("1tb", TiB), ("1TiB", TiB), ("1.5gb", 3 * GiB // 2),
    ("1_024mb", GiB), (" 64gb ", 64 * GiB), ("0.5k", 512),
])
def test_parse_size(chk, text, value):
    assert chk.parse_size(text) == value


@pytest.mark.parametrize("text, message", [
    ("", "invalid size: ''"), ("abc", "invalid size: 'abc'"), ("-1gb", "invalid size: '-1gb'"),
    ("1 gb", "invalid size: '1 gb'"), ("1.gb", "invalid size: '1.gb'"),
    ("1x", "unsupported size unit in '1x'"), ("2pb", "unsupported size unit in '2pb'"),
    ("1gibb", "unsupported size unit in '1gibb'"),
])
def test_parse_size_errors(chk, text, message):
    with pytest.raises(ValueError) as e:
        chk.parse_size(text)
    assert str(e.value) == message


def test_format_size(chk):
    assert [chk.format_size(n) for n in (0, 1023, KiB, 1536, MiB, 5 * GiB // 2, 2 * TiB)] == \
        ["0 B", "1023 B", "1.00 KiB", "1.50 KiB", "1.00 MiB", "2.50 GiB", "2.00 TiB"]


@pytest.mark.parametrize("available, status, code", [
    (None, "planning_only", 0),
    (0, "insufficient_for_baseline", 2),
    (160 * GiB - 1, "insufficient_for_baseline", 2),
    (160 * GiB, "baseline_fits_arena_may_fallback", 1),
    (176 * GiB - 1, "baseline_fits_arena_may_fallback", 1),
    (176 * GiB, "clean_arena_budget_available", 0),
    (1 * TiB, "clean_arena_budget_available", 0),
])
def test_evaluate_budget(chk, available, status, code):
    s = chk.evaluate_budget(tp_size=2, hicache_size_bytes=64 * GiB,
                            global_segment_size_bytes=16 * GiB,
                            arena_pool_size_bytes=8 * GiB, available_bytes=available)
    assert s == chk.BudgetSummary(
        baseline_per_rank_bytes=80 * GiB, baseline_total_bytes=160 * GiB,
        clean_arena_per_rank_bytes=88 * GiB, clean_arena_total_bytes=176 * GiB,
        available_bytes=available, status=status, exit_code=code)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.status = "other"


@pytest.mark.parametrize("tp", [0, -1])
def test_evaluate_budget_refuses_tp(chk, tp):
    with pytest.raises(ValueError, match="^tp_size must be positive$"):
        chk.evaluate_budget(tp_size=tp, hicache_size_bytes=1, global_segment_size_bytes=1,
                            arena_pool_size_bytes=0, available_bytes=None)
    with pytest.raises(TypeError):  # keyword-only
        chk.evaluate_budget(1, 1, 1, 0, None)


def test_read_available_hugetlb(chk, tmp_path, monkeypatch):
    # the host's pool, as the kernel reports it
    path = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
    if path.exists():
        assert chk.read_available_hugetlb(2 * MiB) == int(path.read_text()) * 2 * MiB
    assert chk.read_available_hugetlb(3 * MiB) is None  # no such page size
    assert chk.read_available_hugetlb(1000) is None     # not a whole number of KiB


# Every status through the command, with --available-hugetlb (the host's
# pool is whatever it is: the override makes the check independent of it).
@pytest.mark.parametrize("available, code, status_line", [
    ("160gb", 1, "Status: baseline fits, arena may fall back"),
    ("176GiB", 0, "Status: clean arena budget available"),
    ("100g", 2, "Status: insufficient for baseline"),
])
def test_command_statuses(available, code, status_line):
    r = run("--tp-size", "2", "--hicache-size", "64gb", "--global-segment-size", "16gb",
            "--arena-pool-size", "8gb", "--available-hugetlb", available)
    assert r.returncode == code, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Mooncake HiCache HugeTLB sizing summary"
    assert status_line in lines
    assert any(line.startswith("Meaning: ") for line in lines)
    for want in ("hicache-size:           64gb (64.00 GiB)",
                 "arena-pool-size:        8gb (8.00 GiB)",
                 "hugepage-size:          2mb (2.00 MiB)",
                 "baseline floor / rank:  80.00 GiB",
                 "baseline floor / total: 160.00 GiB",
                 "clean arena / rank:     88.00 GiB",
                 "clean arena / total:    176.00 GiB"):
        assert want in lines, (want, lines)
    assert r.stderr == ""


def test_command_planning_only_without_a_pool():
    # a page size the kernel has no pool of: nothing to read, planning only
    r = run("--tp-size", "1", "--hicache-size", "1gb", "--global-segment-size", "512",
            "--hugepage-size", "3mb")
    assert r.returncode == 0, r.stderr
    assert "Status: planning only" in r.stdout.splitlines()
    assert "available HugeTLB:      unavailable (planning-only mode)" in r.stdout.splitlines()
    assert "global-segment-size:    512 (512 B)" in r.stdout.splitlines()


def test_command_reads_the_host_pool(chk):
    path = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
    if not path.exists():
        pytest.skip("no 2 MiB HugeTLB pool on this host")
    pool = int(path.read_text()) * 2 * MiB
    r = run("--tp-size", "1", "--hicache-size", "0", "--global-segment-size", "0")
    assert r.returncode == 0, r.stderr  # a zero baseline always fits
    assert f"available HugeTLB:      {chk.format_size(pool)}" in r.stdout.splitlines()
    assert "Status: clean arena budget available" in r.stdout.splitlines()


@pytest.mark.parametrize("argv, message", [
    (["--hicache-size", "lots"], "error: invalid size: 'lots'"),
    (["--global-segment-size", "1x"], "error: unsupported size unit in '1x'"),
    (["--arena-pool-size", "-5"], "error: invalid size: '-5'"),
    (["--available-hugetlb", "9zb"], "error: unsupported size unit in '9zb'"),
    (["--hugepage-size", "2 mb"], "error: invalid size: '2 mb'"),
    (["--tp-size", "0"], "error: tp_size must be positive"),
])
def test_command_value_errors_exit_64(argv, message):
    base = {"--tp-size": "2", "--hicache-size": "1gb", "--global-segment-size": "1gb"}
    args = dict(base)
    args.update(dict(zip(argv[::2], argv[1::2])))
    r = run(*[x for kv in args.items() for x in kv])
    assert r.returncode == 64, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip() == message and r.stdout == ""


@pytest.mark.parametrize("argv", [
    [],                                                         # all required
    ["--hicache-size", "1g", "--global-segment-size", "1g"],    # no --tp-size
    ["--tp-size", "x", "--hicache-size", "1g", "--global-segment-size", "1g"],
    ["--tp-size", "1", "--hicache-size", "1g", "--global-segment-size", "1g", "--bogus"],
])
def test_command_usage_errors_exit_2(argv):
    r = run(*argv)
    assert r.returncode == 2 and "usage:" in r.stderr, (r.returncode, r.stderr)


def test_main_in_process(chk, capsys):
    assert chk.main(["--tp-size", "1", "--hicache-size", "1g", "--global-segment-size", "1g",
                     "--available-hugetlb", "1g"]) == 2
    assert "Status: insufficient for baseline" in capsys.readouterr().out

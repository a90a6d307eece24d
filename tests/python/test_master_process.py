# SPDX-License-Identifier: Apache-2.0
"""mooncake_master as a process: SIGHUP is logged and survived with the
index intact (and reopens the --log_dir file, for log rotation), features
this build does not implement refuse to start naming the flag while their
defaults are accepted, tuning flags kept for compatibility (upstream's
NVMe-oF heartbeat spellings among them) are accepted, and the configuration
file `make install` puts in $(sysconfdir)/mooncake loads with --config_path.
"""

import os
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from helpers import SRCDIR, MiB, Master, master_bin, wait_until
from test_admin import get_json, http


def run_master(args, timeout=10):
    return subprocess.run([master_bin()] + args, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_sighup_keeps_the_master_and_its_index(fresh_master, make_store):
    m = fresh_master
    store = make_store(segment=16 * MiB, m=m)
    key = f"hup-{uuid.uuid4().hex}"
    assert store.put(key, b"h" * 1000) == 0
    for _ in range(2):
        m.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in m.log_text() or not m.alive(), 10.0, "the SIGHUP log line")
        assert m.alive(), f"SIGHUP killed the master:\n{m.log_text()}"
    assert "nothing to reload" in m.log_text()
    assert get_json(m, f"/query_key?key={key}")["size"] == 1000
    assert store.get(key) == b"h" * 1000
    assert m.stop() == 0


def test_log_dir_and_reopen_on_sighup():
    with tempfile.TemporaryDirectory(prefix="mc-logdir-") as d:
        logfile = Path(d) / "mooncake_master.log"
        m = Master(extra_args=[f"--log_dir={d}", "--log_level=info"])
        try:
            wait_until(lambda: logfile.exists() and "listening" in logfile.read_text(), 10.0,
                       "the startup line in the log file")
            assert "listening" not in m.log_text(), "the log should go to the file, not stderr"
            rotated = Path(d) / "mooncake_master.log.1"
            logfile.rename(rotated)
            m.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: logfile.exists() and "reopened the log file" in
                       logfile.read_text(), 10.0, "the reopened log file")
            assert m.alive()
            assert "reopened" not in rotated.read_text()
            assert http(m, "/health") == (200, b"OK")
            assert m.stop() == 0
            assert "shutting down" in logfile.read_text()
        finally:
            m.stop()
    r = run_master(["--log_dir=/nonexistent/dir", "--port=0", "--metrics_port=0"])
    assert r.returncode == 1 and "--log_dir" in r.stderr, r.stderr


@pytest.mark.parametrize("flag", ["--enable_cxl"])
def test_unimplemented_feature_refuses_to_start(flag):
    r = run_master([flag, "--port=0", "--metrics_port=0"])
    assert r.returncode == 2, (flag, r.returncode, r.stderr)
    name = flag.split("=")[0]
    assert name in r.stderr and "not implemented" in r.stderr, r.stderr


def test_defaults_and_compat_flags_are_accepted():
    m = Master(extra_args=["--enable_ha=false", "--noenable_snapshot",
                           "--dynamic_replication_mode=off",
                           "--nof_heartbeat_probe_timeout_ms=500",
                           "--nof_heartbeat_failures_threshold=4",
                           "--etcd_endpoints=127.0.0.1:2379", "--max_threads=4"])
    try:
        assert http(m, "/role") == (200, b"leader")
        log = m.log_text()
        assert "--nof_heartbeat_probe_timeout_ms is accepted for compatibility only" in log
        assert "--etcd_endpoints/--ha_backend_connstring are used only with --enable_ha" in log
    finally:
        assert m.stop() == 0
    out = run_master(["--help"]).stdout
    head, _, compat = out.partition("Accepted for compatibility only")
    assert compat, "--help should have the compatibility heading"
    for f in ("--nof_heartbeat_probe_timeout_ms", "--nof_heartbeat_failures_threshold",
              "--max_threads"):
        assert f"\n  {f} (" in compat and f"\n  {f} (" not in head, f
    assert "\n  --enable_ha (" in head


def _build_dir() -> Path:
    d = Path(master_bin()).resolve().parent
    if not (d / "Makefile").exists():
        pytest.skip(f"{d} is not a build tree")
    return d


def test_installed_config_file_loads():
    """`make install` puts the loadable JSON in $(sysconfdir)/mooncake (and
    the commented reference with the documentation); every file installed
    there starts the master through --config_path."""
    build = _build_dir()
    with tempfile.TemporaryDirectory(prefix="mc-destdir-") as dest:
        r = subprocess.run(["make", "-C", str(build), "--no-print-directory",
                            "install-dist_mooncakeconfDATA", "install-dist_mooncakeexampleDATA",
                            f"DESTDIR={dest}"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        installed = sorted(p for p in Path(dest).rglob("*") if p.is_file())
        confs = [p for p in installed if p.parent.name == "mooncake" and
                 p.parent.parent.name == "etc"]
        examples = [p for p in installed if p.parent.name == "examples"]
        assert [p.name for p in confs] == ["mooncake-master.json"], installed
        assert [p.name for p in examples] == ["mooncake-master.conf"], installed
        for conf in confs:
            # the file's rpc_port would win over the helper's --port: 0 defers to it
            m = Master(extra_args=[f"--config_path={conf}", "--rpc_port=0"])
            try:
                assert http(m, "/health") == (200, b"OK")
            finally:
                assert m.stop() == 0
        # the commented reference is documentation, not a config file
        r = run_master([f"--config_path={examples[0]}"])
        assert r.returncode == 2 and "invalid JSON" in r.stderr, r.stderr


def test_man_page_lists_refused_and_compat_flags():
    """docs/man/mooncake_master.1 names every flag --help puts under the
    compatibility heading, and every refused feature."""
    import re
    man = (SRCDIR / "docs/man/mooncake_master.1").read_text().replace("\\-", "-")
    out = run_master(["--help"]).stdout
    head, _, compat = out.partition("Accepted for compatibility only")
    names = re.findall(r"\n  --(\w+) \(", compat)
    # (the nof_eviction_* pair works since NoF segments; the oplog, KV event
    # and dynamic replication tuning since those features)
    assert len(names) >= 25, names
    for n in names:
        assert f"--{n}" in man, n
    refused = re.findall(r"\n  --(\w+) \([^\n]*\n[^\n]*\(not implemented yet", head)
    assert refused == ["enable_cxl"], refused
    section = man.split("Features this build does not implement", 1)[1].split(".SS", 1)[0]
    for n in refused:
        assert f"--{n}" in section, n


def test_sample_conf_is_generated_from_the_flag_table():
    """mooncake-master.conf, the commented reference of every flag, is what
    scripts/gen_master_conf.py makes of mooncake-master/flags.h: a flag's
    help, default or status changed in the table shows there too."""
    r = subprocess.run(["/usr/bin/python3", str(SRCDIR / "scripts/gen_master_conf.py"),
                        "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr

# SPDX-License-Identifier: Apache-2.0
"""The master's admin HTTP server (--metrics_port): /metrics in Prometheus
text format whose request counters move by exactly the RPCs a store makes
and whose gauges match the index (every counter ends in _total, upstream's
names are there too, batch item and partial-success counters, attempted
evictions, mooncake_build_info), /metrics/summary, /health, /query_key,
/get_all_keys, /get_all_segments, /query_segment, upstream's
/batch_query_keys, /get_segments_detail and /role, 404 for unknown paths
and 405 for anything but GET.
"""

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from helpers import MiB, master_bin

# "name value" or "name{label="v",...} value"; value a float, +Inf, -Inf or NaN
_SAMPLE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*'
    r'(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
    r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*,?\})?'
    r' (?:[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf)|NaN)( -?[0-9]+)?$')


def http(master, path, method="GET"):
    """(status, body bytes) of one request to the admin server."""
    url = f"http://127.0.0.1:{master.metrics_port}{path}"
    req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(master, path):
    st, body = http(master, path)
    assert st == 200, (path, st, body)
    return json.loads(body)


def parse_metrics(text: str):
    """Check the exposition format and return {name: value}."""
    values, typed = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            assert parts[1] in ("HELP", "TYPE"), line
            if parts[1] == "TYPE":
                assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), line
                assert parts[2] not in typed, f"two # TYPE lines for {parts[2]}"
                typed[parts[2]] = parts[3]
            continue
        assert _SAMPLE.match(line), f"not a Prometheus sample line: {line!r}"
        name, value = line.rsplit(" ", 1)
        assert name not in values, f"duplicate sample {name}"
        values[name] = float(value)
    for sample in values:
        name = sample.split("{", 1)[0]
        assert name in typed, f"{name} has no # TYPE line"
        if typed[name] == "counter":
            assert name.endswith("_total"), f"counter {name} does not end in _total"
    return values


def scrape(master):
    st, body = http(master, "/metrics")
    assert st == 200
    return parse_metrics(body.decode())


def test_prometheus_parser_rejects_garbage():
    # the format check must be able to fail
    with pytest.raises(AssertionError):
        parse_metrics("# TYPE x gauge\nx 1 2 3\n")
    with pytest.raises(AssertionError):
        parse_metrics("y 1\n")
    with pytest.raises(AssertionError):
        parse_metrics("# TYPE z counter\nz 1\n")
    with pytest.raises(AssertionError):
        parse_metrics("# TYPE z_total counter\n# TYPE z_total counter\nz_total 1\n")
    assert parse_metrics('# TYPE a_total counter\na_total{l="v"} 3\n') == {'a_total{l="v"}': 3}


def test_index_record_blocks_come_faulted_in(fresh_master, make_store):
    """The master's index runs the slab's block thread (slab.h: the object
    records' 2 MiB blocks are faulted in off the event loop), and exports
    how many blocks it took ready.  (When the thread has a block ready is
    the scheduler's business, so the count is only bounded here;
    test_buf.c's test_slab_prefault checks the hand-over itself.)"""
    m = fresh_master
    names = [(Path("/proc") / str(m.proc.pid) / "task" / t / "comm").read_text().strip()
             for t in os.listdir(f"/proc/{m.proc.pid}/task")]
    assert names.count("mc-slab-fault") == 1, names
    store = make_store(segment=64 * MiB, m=m)
    assert scrape(m)["master_index_prefaulted_blocks_total"] == 0  # no record yet
    # ~136-byte records of 48-byte keys: 3 blocks' worth
    tag = uuid.uuid4().hex
    for b in range(24):
        keys = [f"blk-{tag}-{b:03d}-{i:05d}" for i in range(2000)]
        assert store.put_batch(keys, [b"y"] * len(keys)) == 0
    after = scrape(m)
    assert after["master_key_count"] == 48000
    assert 0 <= after["master_index_prefaulted_blocks_total"] <= 4


def test_counters_and_gauges_follow_the_store(fresh_master, make_store):
    m = fresh_master
    store = make_store(segment=64 * MiB, m=m)
    before = scrape(m)
    for name in ("master_allocated_bytes", "master_total_capacity_bytes", "master_key_count",
                 "master_soft_pin_key_count", "master_active_clients",
                 "master_evicted_key_count", "master_evicted_size_bytes",
                 "master_put_start_requests_total", "master_put_start_failures_total",
                 "master_get_replica_list_requests_total", "master_exist_key_requests_total",
                 "master_remove_requests_total", "master_ping_requests_total",
                 "master_mount_segment_requests_total"):
        assert name in before, name
    assert before["master_total_capacity_bytes"] == 64 * MiB
    assert before["master_key_count"] == 0
    assert before["master_active_clients"] == 1
    assert before["master_mount_segment_requests_total"] >= 1

    keys = [f"adm-{i}-{uuid.uuid4().hex}" for i in range(5)]
    sizes = [1000 * (i + 1) for i in range(5)]
    for k, n in zip(keys, sizes):
        assert store.put(k, bytes([65 + len(k) % 26]) * n) == 0
    for k, n in zip(keys[:3], sizes):
        assert len(store.get(k)) == n
    assert store.is_exist(keys[0]) == 1
    assert store.is_exist("adm-missing-" + uuid.uuid4().hex) == 0
    assert store.get("adm-missing-" + uuid.uuid4().hex) == b""
    assert store.remove(keys[4]) == 0

    after = scrape(m)

    def delta(name):
        return after[name] - before[name]

    assert delta("master_put_start_requests_total") == 5
    assert delta("master_put_start_failures_total") == 0
    assert delta("master_put_end_requests_total") == 5
    assert delta("master_get_replica_list_requests_total") == 4
    assert delta("master_get_replica_list_failures_total") == 1   # the missing key
    assert delta("master_exist_key_requests_total") == 2
    assert delta("master_remove_requests_total") == 1
    assert delta("master_remove_failures_total") == 0
    assert after["master_ping_requests_total"] >= before["master_ping_requests_total"]

    segs = get_json(m, "/get_all_segments")
    assert after["master_key_count"] == 4
    assert after["master_value_size_bytes"] == sum(sizes[:4])
    assert after["master_allocated_bytes"] == sum(s["used"] for s in segs)
    assert sum(sizes[:4]) <= after["master_allocated_bytes"] < sum(sizes[:4]) + 4 * 64 * 1024
    assert after["master_total_capacity_bytes"] == 64 * MiB

    st, body = http(m, "/metrics/summary")
    assert st == 200
    assert b"Keys: 4" in body and b"PUT_START" in body


def test_queries(master, store):
    k = f"adm-q-{uuid.uuid4().hex}"
    assert store.put(k, b"z" * 4096) == 0

    q = get_json(master, f"/query_key?key={k}")
    assert q["key"] == k and q["size"] == 4096 and q["complete"] is True
    assert q["hard_pin"] is False and q["soft_pin"] is False
    assert len(q["replicas"]) == 1
    r = q["replicas"][0]
    assert r["status"] == "COMPLETE" and r["size"] == 4096
    assert r["segment"] == store.get_hostname()
    assert q["lease_remaining_ms"] == 0                 # nobody read it yet
    assert store.get(k) == b"z" * 4096
    assert get_json(master, f"/query_key?key={k}")["lease_remaining_ms"] > 0

    assert http(master, f"/query_key?key=missing-{uuid.uuid4().hex}")[0] == 404
    assert http(master, f"/query_key?key={k}&tenant=other-{uuid.uuid4().hex[:6]}")[0] == 404
    assert http(master, "/query_key")[0] == 400

    keys = get_json(master, "/get_all_keys")
    assert k in keys["keys"] and keys["count"] == len(keys["keys"])
    assert keys["truncated"] is False
    assert get_json(master, "/get_all_keys?tenant=nobody")["keys"] == []

    segs = get_json(master, "/get_all_segments")
    names = [s["name"] for s in segs]
    assert store.get_hostname() in names
    mine = next(s for s in segs if s["name"] == store.get_hostname())
    assert mine["size"] == 64 * MiB and mine["used"] >= 4096 and mine["status"] == "OK"

    qs = get_json(master, f"/query_segment?segment={store.get_hostname()}")
    assert qs["capacity"] == 64 * MiB and qs["allocated"] == mine["used"]
    assert qs["client_id"] == mine["client_id"]
    assert http(master, "/query_segment?segment=nosuch:1")[0] == 404
    assert http(master, "/query_segment")[0] == 400


def test_health_404_405(master):
    assert http(master, "/health") == (200, b"OK")
    assert http(master, "/nope")[0] == 404
    assert http(master, "/metrics/nope")[0] == 404
    assert http(master, "/metrics", method="POST")[0] == 405
    assert http(master, "/health", method="DELETE")[0] == 405
    assert http(master, "/query_key?key=x", method="PUT")[0] == 405


def test_upstream_metric_names(fresh_master, make_store):
    """The names upstream's dashboards query, batch item counters that move
    by exactly the keys of one batch, and the build info."""
    m = fresh_master
    store = make_store(segment=64 * MiB, m=m)
    before = scrape(m)
    for name in ("master_evicted_key_count", "master_evicted_size_bytes",
                 "master_evicted_key_count_total", "master_evicted_size_bytes_total",
                 "master_attempted_evictions_total", "master_successful_evictions_total",
                 "master_remount_segment_requests_total",
                 "master_remount_segment_failures_total"):
        assert name in before, name
    for op in ("put_start", "put_end", "put_revoke", "get_replica_list", "exist_key"):
        for kind in ("requests", "failures", "partial_successes", "items", "failed_items"):
            assert f"master_batch_{op}_{kind}_total" in before, (op, kind)
    info = [k for k in before if k.startswith("mooncake_build_info{")]
    assert len(info) == 1 and before[info[0]] == 1, info
    assert 'version="' in info[0] and 'component="mooncake_master"' in info[0]

    keys = [f"adm-b-{i}-{uuid.uuid4().hex}" for i in range(3)]
    assert store.put_batch(keys[:2], [b"a" * 100, b"b" * 100]) == 0
    missing = "adm-b-missing-" + uuid.uuid4().hex
    assert store.batch_is_exist(keys[:2] + [missing]) == [1, 1, 0]
    res = store.batch_remove(keys[:2] + [missing], force=True)   # exist leased them
    assert res[:2] == [0, 0] and res[2] < 0, res
    after = scrape(m)

    def delta(name):
        return after[name] - before[name]

    assert delta("master_batch_put_start_requests_total") == 1
    assert delta("master_batch_put_start_items_total") == 2
    assert delta("master_batch_put_start_failed_items_total") == 0
    assert delta("master_batch_put_start_partial_successes_total") == 0
    assert delta("master_batch_exist_key_items_total") == 3
    assert delta("master_batch_exist_key_failed_items_total") == 0   # "no" is not a failure
    assert delta("master_batch_remove_requests_total") == 1
    assert delta("master_batch_remove_items_total") == 3
    assert delta("master_batch_remove_failed_items_total") == 1
    assert delta("master_batch_remove_partial_successes_total") == 1
    assert delta("master_batch_remove_failures_total") == 0
    assert after["master_evicted_key_count"] == after["master_evicted_key_count_total"]


def test_attempted_evictions_count_passes(fresh_master, make_store):
    """A put that does not fit starts an eviction pass: attempted moves."""
    m = fresh_master
    store = make_store(segment=4 * MiB, m=m)
    before = scrape(m)["master_attempted_evictions_total"]
    blob = b"e" * (1 * MiB)
    for i in range(8):
        assert store.put(f"adm-ev-{i}-{uuid.uuid4().hex}", blob) == 0
    after = scrape(m)
    assert after["master_attempted_evictions_total"] > before
    assert after["master_attempted_evictions_total"] >= after["master_successful_evictions_total"]
    assert after["master_evicted_key_count_total"] >= 1


def test_batch_query_keys(master, store):
    k1, k2 = (f"adm-bq-{i}-{uuid.uuid4().hex}" for i in range(2))
    missing = f"adm-bq-missing-{uuid.uuid4().hex}"
    assert store.put(k1, b"1" * 1000) == 0
    assert store.put(k2, b"2" * 3000) == 0
    j = get_json(master, f"/batch_query_keys?keys={k1},{k2},{missing}")
    assert j["success"] is True
    assert set(j["data"]) == {k1, k2, missing}
    assert j["data"][missing] == {"ok": False, "error": "OBJECT_NOT_FOUND"}
    for k, n in ((k1, 1000), (k2, 3000)):
        d = j["data"][k]
        assert d["ok"] is True and len(d["values"]) == 1, d
        v = d["values"][0]
        assert v["size_"] == n and v["protocol_"] == "tcp"
        assert v["transport_endpoint_"] == store.get_hostname()
        q = get_json(master, f"/query_key?key={k}")
        assert v["buffer_address_"] == q["replicas"][0]["addr"]
    # another tenant sees none of them
    j = get_json(master, f"/batch_query_keys?keys={k1}&tenant=t-{uuid.uuid4().hex[:6]}")
    assert j["data"][k1]["ok"] is False
    for path in ("/batch_query_keys", "/batch_query_keys?keys=", "/batch_query_keys?keys=,"):
        st, body = http(master, path)
        assert st == 400, (path, st)
        assert json.loads(body) == {"success": False,
                                    "error": "No keys provided. Use ?keys=key1,key2,..."}


def test_get_segments_detail_and_role(master, store):
    assert store.put(f"adm-sd-{uuid.uuid4().hex}", b"s" * 8192) == 0
    d = get_json(master, "/get_segments_detail")
    assert d["total_segments"] == len(d["segments"]) >= 1
    mine = next(s for s in d["segments"] if s["segment_name"] == store.get_hostname())
    plain = next(s for s in get_json(master, "/get_all_segments")
                 if s["name"] == store.get_hostname())
    assert mine["size_bytes"] == 64 * MiB and mine["size_human"] == "0.06 GiB"
    assert mine["segment_id"] == plain["id"] and mine["client_id"] == plain["client_id"]
    assert re.fullmatch(r"0x[0-9a-f]+", mine["base_address"]) and int(mine["base_address"], 16)
    assert mine["te_endpoint"] == store.get_hostname() and mine["protocol"] == "tcp"
    assert mine["status"] == "OK"
    assert mine["allocator_used_bytes"] == plain["used"] >= 8192
    assert mine["allocator_capacity_bytes"] == 64 * MiB
    assert mine["allocator_usage_percent"] == pytest.approx(100.0 * plain["used"] / (64 * MiB))
    assert http(master, "/role") == (200, b"leader")
    assert http(master, "/role", method="POST")[0] == 405


def test_help_names_every_route_the_server_answers(master):
    """--help of --metrics_port lists the routes; each one it names answers
    (not 404), and each route the server answers is in the list."""
    out = subprocess.run([master_bin(), "--help"], capture_output=True, text=True,
                         timeout=30).stdout
    block = out[out.index("--metrics_port"):out.index("--metrics_host")]
    named = re.findall(r"(/[a-z0-9_/]+)(?:\?[a-z_]+=)?", block)
    answered = ["/metrics", "/metrics/summary", "/health", "/role", "/ha_status", "/leader",
                "/query_key", "/batch_query_keys", "/get_all_keys", "/get_all_segments",
                "/get_segments_detail", "/query_segment", "/kv_events/status",
                "/api/v1/tenant_quotas"]
    for path in answered:
        assert path in named, f"--help of --metrics_port does not name {path}"
    for path in named:
        assert http(master, path)[0] != 404, f"--help names {path}, which answers 404"

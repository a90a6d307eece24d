# SPDX-License-Identifier: Apache-2.0
"""The master's admin HTTP server (--metrics_port): /metrics in Prometheus
text format whose request counters move by exactly the RPCs a store makes
and whose gauges match the index, /metrics/summary, /health, /query_key,
/get_all_keys, /get_all_segments, /query_segment, 404 for unknown paths and
405 for anything but GET.
"""

import json
import re
import urllib.error
import urllib.request
import uuid

import pytest

from helpers import MiB

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
            assert name.endswith("_total") or name.startswith("master_evicted_"), name
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
    assert parse_metrics('# TYPE a_total counter\na_total{l="v"} 3\n') == {'a_total{l="v"}': 3}


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

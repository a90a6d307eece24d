# SPDX-License-Identifier: Apache-2.0
"""The client HTTP server (setup(..., enable_client_http_server=True,
client_http_port=N)): every route's code and body, metrics that move by
exactly the calls made, mounting by HTTP used by another client process,
bad input, a port in use, and close stopping the server."""
import json
import os
import re
import socket
import urllib.error
import urllib.request

import pytest

from helpers import MiB, free_port

from mooncake import __version__
from mooncake.store import ErrorCode, MooncakeDistributedStore, last_error_detail


def http(port, path, body=None, method=None, raw=None):
    """(code, content-type, text) of one request; a body dict is sent as JSON."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def metrics(port):
    code, _, text = http(port, "/metrics")
    assert code == 200, text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = int(value)
    return out


def http_store(master, segment=16 * MiB, port=None):
    port = port or free_port()
    s = MooncakeDistributedStore()
    rc = s.setup("localhost", "P2PHANDSHAKE", segment, 16 * MiB, "tcp", "", master.addr,
                 enable_client_http_server=True, client_http_port=port)
    assert rc == 0, f"setup returned {rc}: {last_error_detail()}"
    return s, port


@pytest.fixture
def served(master):
    s, port = http_store(master)
    yield s, port
    s.close()


def test_get_routes(served):
    s, port = served
    code, ctype, text = http(port, "/health")
    assert (code, ctype) == (200, "application/json")
    assert json.loads(text) == {"status": "healthy", "code": 0}

    code, ctype, text = http(port, "/version")
    assert code == 200 and json.loads(text) == {"version": __version__}

    code, ctype, text = http(port, "/metrics")
    assert (code, ctype) == (200, "text/plain; version=0.0.4")
    for name in ("mooncake_transfer_read_bytes", "mooncake_transfer_write_bytes",
                 "mooncake_transfer_get_latency", "mooncake_transfer_put_latency",
                 "mooncake_transfer_batch_get_latency", "mooncake_transfer_batch_put_latency"):
        assert f"# TYPE {name} " in text
    assert 'mooncake_transfer_put_latency_bucket{le="+Inf"} 0' in text
    assert "mooncake_client_put_requests_total 0" in text
    assert "mooncake_client_mounted_segments 1" in text
    assert f"mooncake_client_mounted_bytes {16 * MiB}" in text

    code, ctype, text = http(port, "/metrics/summary")
    assert code == 200 and ctype == "text/plain"
    assert f"client={s.get_hostname()}" in text
    assert "put: requests=0 failures=0" in text

    assert http(port, "/nope")[0] == 404
    assert http(port, "/health", method="POST", raw=b"{}")[0] == 405
    code, _, text = http(port, "/api/mount")
    assert code == 405 and "POST" in json.loads(text)["error"]


def test_metrics_move_by_exactly_the_calls(served):
    s, port = served
    before = metrics(port)
    assert s.put("m1", b"a" * 100) == 0
    assert s.put("m2", b"b" * 1000) == 0
    assert s.get("m1") == b"a" * 100
    assert s.get("missing-key") == b""
    assert s.put_batch(["m3", "m4"], [b"c" * 10, b"d" * 20]) == 0
    assert s.get_batch(["m3", "m4"]) == [b"c" * 10, b"d" * 20]
    after = metrics(port)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    assert delta["mooncake_client_put_requests_total"] == 2
    assert delta["mooncake_client_put_failures_total"] == 0
    assert delta["mooncake_client_get_requests_total"] == 2
    assert delta["mooncake_client_get_failures_total"] == 1
    assert delta["mooncake_client_batch_put_requests_total"] == 1
    assert delta["mooncake_client_batch_put_items_total"] == 2
    assert delta["mooncake_client_batch_get_requests_total"] == 1
    assert delta["mooncake_client_batch_get_items_total"] == 2
    assert delta["mooncake_transfer_write_bytes"] == 1130
    assert delta["mooncake_transfer_read_bytes"] == 130
    assert delta["mooncake_transfer_put_latency_count"] == 2
    assert delta['mooncake_transfer_put_latency_bucket{le="+Inf"}'] == 2
    assert delta["mooncake_transfer_get_latency_count"] == 2
    assert delta["mooncake_transfer_batch_put_latency_count"] == 1
    assert delta["mooncake_transfer_batch_get_latency_count"] == 1
    assert delta["mooncake_transfer_put_latency_sum"] > 0
    code, _, text = http(port, "/metrics/summary")
    assert re.search(r"^put: requests=%d failures=0 " % after[
        "mooncake_client_put_requests_total"], text, re.M)


def test_mount_by_http_then_another_client_writes_there(fresh_master, spawn_client):
    s, port = http_store(fresh_master, segment=0)
    try:
        assert metrics(port)["mooncake_client_mounted_segments"] == 0
        other = spawn_client("writer")
        r = other.call("setup", args=["localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                                      fresh_master.addr])
        assert r["rc"] == 0
        # no memory in the pool yet: the write cannot be placed
        assert other.call("put", key="k0", hex="00")["rc"] != 0

        code, _, text = http(port, "/api/mount", {"size": 8 * MiB})
        assert code == 200, text
        body = json.loads(text)
        assert body["status"] == "success" and body["allocated_size"] == 8 * MiB
        assert len(body["segment_ids"]) == 1
        assert metrics(port)["mooncake_client_mounted_bytes"] == 8 * MiB
        assert other.call("put", key="k1", hex="abcdef")["rc"] == 0
        assert other.call("get", key="k1")["hex"] == "abcdef"
        assert s.get("k1") == bytes.fromhex("abcdef")

        code, _, text = http(port, "/api/unmount", {"segment_ids": body["segment_ids"]})
        assert (code, json.loads(text)) == (200, {"status": "success"})
        assert metrics(port)["mooncake_client_mounted_segments"] == 0
        assert other.call("get", key="k1")["len"] == 0  # its segment is gone
        assert other.call("put", key="k2", hex="00")["rc"] != 0
    finally:
        s.close()


def test_mount_shm_by_http(fresh_master, spawn_client):
    name = f"mc-http-test-{os.getpid()}"
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.truncate(4 * MiB)
    s, port = http_store(fresh_master, segment=0)
    try:
        code, _, text = http(port, "/api/mount_shm", {"name": "/" + name, "size": 4 * MiB})
        assert code == 200, text
        ids = json.loads(text)["segment_ids"]
        assert json.loads(text)["status"] == "success" and len(ids) == 1
        other = spawn_client("writer")
        assert other.call("setup", args=["localhost", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                                         fresh_master.addr])["rc"] == 0
        assert other.call("put", key="shm1", hex="c0ffee")["rc"] == 0
        with open(path, "rb") as f:
            assert b"\xc0\xff\xee" in f.read()  # the bytes landed in the file
        code, _, text = http(port, "/api/unmount_shm",
                             {"segment_ids": ids[0], "grace_period_seconds": 0})
        assert (code, json.loads(text)) == (200, {"status": "success"})
        assert metrics(port)["mooncake_client_mounted_segments"] == 0
    finally:
        s.close()
        os.unlink(path)


@pytest.mark.parametrize("path,raw,fragment", [
    ("/api/mount", b"{not json", "invalid JSON"),
    ("/api/mount", b"", "required"),
    ("/api/mount", b"[1]", "JSON object"),
    ("/api/mount", b"{}", '"size" is required'),
    ("/api/mount", b'{"size": -5}', '"size" must be'),
    ("/api/mount", b'{"size": "1"}', '"size" must be'),
    ("/api/mount", b'{"size": 4096, "protocol": 7}', '"protocol" must be a string'),
    ("/api/mount_shm", b'{"size": 4096}', '"name"'),
    ("/api/mount_shm", b'{"name": "a/b", "size": 4096}', "invalid shm name"),
    ("/api/mount_shm", b'{"name": "..", "size": 4096}', "invalid shm name"),
    ("/api/mount_shm", b'{"name": "does-not-exist-x", "size": 4096}', "Mount failed"),
    ("/api/unmount", b"{}", '"segment_ids"'),
    ("/api/unmount_shm", b'{"segment_ids": [3]}', "strings"),
    ("/api/unmount", b'{"segment_ids": "x", "grace_period_seconds": -1}', "grace_period"),
])
def test_bad_input_is_4xx_with_a_message(served, path, raw, fragment):
    _, port = served
    before = metrics(port)["mooncake_client_mounted_segments"]
    code, ctype, text = http(port, path, raw=raw, method="POST")
    assert 400 <= code < 500, (code, text)
    assert ctype == "application/json" and fragment in json.loads(text)["error"]
    assert metrics(port)["mooncake_client_mounted_segments"] == before


def test_unmount_of_unknown_id_names_it(served):
    _, port = served
    bogus = "00000000-0000-0000-0000-000000000001"
    code, _, text = http(port, "/api/unmount_shm", {"segment_ids": [bogus]})
    body = json.loads(text)
    assert code == 500 and body["failed_segment_ids"] == [bogus]
    assert "Unmount failed" in body["error"]


def test_port_in_use_fails_setup(master):
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("0.0.0.0", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        s = MooncakeDistributedStore()
        rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                     enable_client_http_server=True, client_http_port=port)
        assert rc == int(ErrorCode.INVALID_PARAMS)
        assert str(port) in last_error_detail() and "client http" in last_error_detail()
        # nothing half set up: the same object sets up on a free port
        port2 = free_port()
        rc = s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                     enable_client_http_server=True, client_http_port=port2)
        assert rc == 0
        assert http(port2, "/health")[0] == 200
        s.close()


def test_close_stops_the_server(master):
    s, port = http_store(master)
    assert http(port, "/health")[0] == 200
    assert s.close() == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    # set up again: the port is free for the server again
    assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                   enable_client_http_server=True, client_http_port=port) == 0
    assert http(port, "/health")[0] == 200
    s.close()


def test_without_the_flag_no_server(master):
    port = free_port()
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                   client_http_port=port) == 0
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        s.close()

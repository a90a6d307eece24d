# SPDX-License-Identifier: Apache-2.0
"""Cluster authentication (docs/security.md, docs/protocol.md §9).

A master started with --auth_token_file refuses every RPC connection that
does not prove the cluster secret (or its tenant's own secret) in the
challenge-response, drops a connection that never answers the challenge,
refuses a replayed proof, refuses unsigned or replayed metadata writes and
admin key listings.  A store with the secret serves its data port only to
peers that prove it.  The handshakes are computed here independently of
libmooncake, from the wire formats of docs/protocol.md §9.
"""

import hashlib
import hmac
import http.client
import os
import socket
import struct
import time
import uuid

import pytest

from helpers import MiB, Master
from rawwire import FLAG_RESPONSE, OP_HELLO, header, wire_str

CLUSTER = b"cluster-secret-for-tests-0123456789"
NEXT = b"next-cluster-secret-0123456789"
TENANT_B = b"tenant-b-secret-0123456789abcd"
WRONG = b"wrong-secret-0123456789abcdefgh"
RPC_FAIL = -900
INVALID_PARAMS = -600
LABEL = b"mooncake-auth-v1\0"


def _secret_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.fixture
def secrets(tmp_path):
    return {
        "master": _secret_file(tmp_path, "master.secrets",
                               "# cluster, then the next one of a rotation\n"
                               f"{CLUSTER.decode()}\n{NEXT.decode()}\n"
                               f"tenant B {TENANT_B.decode()}\n"),
        "cluster": _secret_file(tmp_path, "cluster.secret", CLUSTER.decode() + "\n"),
        "next": _secret_file(tmp_path, "next.secret", NEXT.decode() + "\n"),
        "wrong": _secret_file(tmp_path, "wrong.secret", WRONG.decode() + "\n"),
        "b": _secret_file(tmp_path, "b.secret",
                          f"{CLUSTER.decode()}\ntenant B {TENANT_B.decode()}\n"),
    }


@pytest.fixture
def auth_master(secrets):
    m = Master(extra_args=[f"--auth_token_file={secrets['master']}",
                           "--auth_handshake_timeout=1000"])
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def open_store(monkeypatch):
    """open_store(master, auth_token_file or None, tenant="default",
    metadata="P2PHANDSHAKE") -> (rc, store); stores closed at teardown."""
    from mooncake.store import MooncakeDistributedStore
    stores = []
    monkeypatch.delenv("MC_AUTH_TOKEN_FILE", raising=False)

    def make(master, token_file, tenant="default", metadata="P2PHANDSHAKE"):
        s = MooncakeDistributedStore()
        stores.append(s)
        md = master.metadata_url if metadata == "http" else metadata
        kw = {} if token_file is None else {"auth_token_file": token_file}
        rc = s.setup("localhost", md, 16 * MiB, 16 * MiB, "tcp", "", master.addr,
                     tenant_id=tenant, rpc_timeout_ms=3000, **kw)
        return rc, s

    try:
        yield make
    finally:
        for s in stores:
            s.close()


# ---- the handshake, computed here (§9.1) ---------------------------------

def _mac(secret, role, service, sn, cn, tenant=b""):
    msg = (LABEL + role + bytes([len(service)]) + service + sn + cn +
           struct.pack(">H", len(tenant)) + tenant)
    return hmac.new(secret, msg, hashlib.sha256).digest()


def _recv_exact(sock, n, timeout=5.0):
    sock.settimeout(timeout)
    out = b""
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except ConnectionResetError:
            break  # closed (with unread input: a reset)
        if not chunk:
            break
        out += chunk
    return out


def _challenge(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    ch = _recv_exact(s, 40)
    assert ch[:5] == b"MCAC\x01", f"the server should open with a challenge, sent {ch!r}"
    return s, ch[8:40]


def _proof(secret, service, sn, tenant=b"", cn=None):
    cn = cn or os.urandom(32)
    return (b"MCAP\x01\x00" + struct.pack(">H", len(tenant)) + cn +
            _mac(secret, b"C", service, sn, cn, tenant) + tenant), cn


def _closed_without_accept(sock, timeout=5.0):
    """True when the peer closes without sending an ACCEPT."""
    data = _recv_exact(sock, 40, timeout)
    return not data.startswith(b"MCAA")


# ---- master RPC ---------------------------------------------------------------

def test_master_refuses_a_client_without_the_secret(auth_master, secrets, open_store):
    rc, _ = open_store(auth_master, None)
    assert rc == RPC_FAIL, f"setup without a secret should fail with RPC_FAIL, not {rc}"
    rc, _ = open_store(auth_master, secrets["wrong"])
    assert rc == RPC_FAIL, f"setup with a wrong secret should fail with RPC_FAIL, not {rc}"
    rc, s = open_store(auth_master, secrets["cluster"])
    assert rc == 0, f"setup with the cluster secret should pass, got {rc}"
    assert s.put("k", b"v" * 1000) == 0
    assert s.get("k") == b"v" * 1000


def test_next_secret_of_a_rotation_is_accepted(auth_master, secrets, open_store):
    rc, s = open_store(auth_master, secrets["next"])
    assert rc == 0, f"the second secret of the master's file should pass, got {rc}"
    assert s.put("rot", b"x") == 0


def test_env_names_the_secret_file(auth_master, secrets, open_store, monkeypatch):
    monkeypatch.setenv("MC_AUTH_TOKEN_FILE", secrets["cluster"])
    rc, _ = open_store(auth_master, None)
    assert rc == 0, f"MC_AUTH_TOKEN_FILE should authenticate setup, got {rc}"


def test_dict_setup_takes_auth_token_file(auth_master, secrets, monkeypatch):
    from mooncake.store import MooncakeDistributedStore
    monkeypatch.delenv("MC_AUTH_TOKEN_FILE", raising=False)
    s = MooncakeDistributedStore()
    try:
        rc = s.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                      "global_segment_size": "16MB", "local_buffer_size": "16MB",
                      "master_server_addr": auth_master.addr,
                      "auth_token_file": secrets["cluster"]})
        assert rc == 0, f"the dict key auth_token_file should authenticate setup, got {rc}"
    finally:
        s.close()


def test_empty_auth_token_file_turns_it_off(fresh_master, secrets, open_store, monkeypatch):
    monkeypatch.setenv("MC_AUTH_TOKEN_FILE", secrets["cluster"])
    rc, s = open_store(fresh_master, "")
    assert rc == 0, f'auth_token_file="" should override MC_AUTH_TOKEN_FILE, got {rc}'
    assert s.put("off", b"o") == 0


def test_unreadable_secret_file_is_invalid_params(auth_master, open_store, tmp_path):
    rc, _ = open_store(auth_master, str(tmp_path / "missing"))
    assert rc == INVALID_PARAMS
    rc, _ = open_store(auth_master, _secret_file(tmp_path, "short", "short\n"))
    assert rc == INVALID_PARAMS


def test_unauthenticated_connection_is_dropped(auth_master):
    s, _ = _challenge(auth_master.port)
    try:
        start = time.monotonic()
        s.settimeout(10)
        assert s.recv(1) == b"", "a silent connection should be closed"
        took = time.monotonic() - start
        assert took < 8, f"closed after {took:.1f} s, --auth_handshake_timeout is 1 s"
    finally:
        s.close()


def test_authenticated_connection_outlives_the_handshake_timeout(auth_master):
    """The handshake deadline (1 s here) ends with the handshake: an
    authenticated connection silent for longer is still served (the
    master runs without --rpc_conn_timeout_seconds)."""
    s, sn = _challenge(auth_master.port)
    try:
        s.sendall(_proof(CLUSTER, b"rpc", sn, b"default")[0])
        assert _recv_exact(s, 40)[:4] == b"MCAA"
        s.settimeout(2.5)
        try:
            assert s.recv(1) != b"", "an authenticated connection was closed"
        except socket.timeout:
            pass  # silence both ways: still open
        body = struct.pack("<I", 1) + uuid.uuid4().bytes + wire_str(b"")  # default tenant
        s.sendall(header(OP_HELLO, len(body), 9) + body)
        _magic, _ver, flags, _op, rid, blen = struct.unpack("<IBBHII", _recv_exact(s, 16))
        assert (flags & FLAG_RESPONSE, rid) == (FLAG_RESPONSE, 9)
        assert struct.unpack("<i", _recv_exact(s, blen)[:4])[0] == 0
    finally:
        s.close()


def test_frames_before_the_proof_are_refused(auth_master):
    s, _ = _challenge(auth_master.port)
    try:
        # a HELLO frame header where the proof belongs
        s.sendall(b"MCK1" + b"\0" * 28)
        assert _closed_without_accept(s), "a frame instead of a proof should close"
    finally:
        s.close()


def test_replayed_proof_is_refused(auth_master):
    s1, sn1 = _challenge(auth_master.port)
    try:
        proof, cn = _proof(CLUSTER, b"rpc", sn1, b"default")
        s1.sendall(proof)
        acc = _recv_exact(s1, 40)
        assert acc[:4] == b"MCAA", "the proof computed from the documented format should pass"
        assert acc[8:] == _mac(CLUSTER, b"S", b"rpc", sn1, cn, b"default"), \
            "the master's ACCEPT should prove the secret too"
    finally:
        s1.close()
    s2, sn2 = _challenge(auth_master.port)
    try:
        assert sn2 != sn1, "each connection should get a fresh challenge"
        s2.sendall(proof)
        assert _closed_without_accept(s2), "a replayed proof should be refused"
    finally:
        s2.close()


def test_proof_for_the_data_port_is_refused_by_the_master(auth_master):
    s, sn = _challenge(auth_master.port)
    try:
        s.sendall(_proof(CLUSTER, b"te", sn, b"default")[0])
        assert _closed_without_accept(s), "a proof bound to another service should be refused"
    finally:
        s.close()


# ---- tenants -------------------------------------------------------------------

def test_tenant_with_its_own_secret(tenant_master, secrets, open_store):
    # tenants split the key space only with --enable_multi_tenants
    auth_master = tenant_master(["A", "B"], [f"--auth_token_file={secrets['master']}",
                                             "--auth_handshake_timeout=1000"])
    rc, b = open_store(auth_master, secrets["b"], tenant="B")
    assert rc == 0, f"tenant B with B's secret should pass, got {rc}"
    key = f"b-{uuid.uuid4().hex}"
    assert b.put(key, b"tenant b data") == 0
    # the cluster secret alone does not make a client tenant B
    rc, _ = open_store(auth_master, secrets["cluster"], tenant="B")
    assert rc == RPC_FAIL, f"tenant B without B's secret should be refused, got {rc}"
    # a client of another tenant neither sees nor removes B's key
    rc, a = open_store(auth_master, secrets["cluster"], tenant="A")
    assert rc == 0
    assert a.is_exist(key) == 0
    assert a.remove(key, True) != 0
    assert b.get(key) == b"tenant b data", "B's key should survive another tenant's remove"


def test_hello_must_name_the_proven_tenant(auth_master):
    """A proof for tenant A followed by HELLO as tenant B is refused."""
    s, sn = _challenge(auth_master.port)
    try:
        s.sendall(_proof(CLUSTER, b"rpc", sn, b"A")[0])
        assert _recv_exact(s, 40)[:4] == b"MCAA"
        from rawwire import OP_HELLO, header, wire_str
        body = struct.pack("<I", 1) + uuid.uuid4().bytes + wire_str(b"B")
        s.sendall(header(OP_HELLO, len(body)) + body)
        resp = _recv_exact(s, 16)
        blen = struct.unpack("<IBBHII", resp)[5]
        status = struct.unpack("<i", _recv_exact(s, blen)[:4])[0]
        assert status == INVALID_PARAMS, \
            f"HELLO as another tenant than the proven one should be INVALID_PARAMS, not {status}"
    finally:
        s.close()


# ---- signed HTTP (metadata writes, admin listings; §9.2) ----------------------------

def _signature(secret, method, target, body=b"", ts=None, nonce=None):
    ts = int(time.time()) if ts is None else ts
    nonce = nonce or os.urandom(16)
    msg = (LABEL + b"H" + method.encode() + b"\0" + target.encode() + b"\0" +
           str(ts).encode() + b"\0" + nonce + hashlib.sha256(body).digest())
    return f"v1 {ts} {nonce.hex()} {hmac.new(secret, msg, hashlib.sha256).hexdigest()}"


def _http(port, method, target, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, target, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_metadata_writes_need_a_signature(auth_master):
    port, target = auth_master.http_port, "/metadata?key=attacker%2Fkey"
    body = b'{"x": 1}'
    st, _ = _http(port, "PUT", target, body)
    assert st == 401, f"an unsigned PUT should be 401, not {st}"
    st, _ = _http(port, "PUT", target, body,
                  {"X-Mooncake-Auth": _signature(WRONG, "PUT", target, body)})
    assert st == 401, f"a PUT signed with a wrong secret should be 401, not {st}"
    sig = _signature(CLUSTER, "PUT", target, body)
    st, _ = _http(port, "PUT", target, body, {"X-Mooncake-Auth": sig})
    assert st == 200, f"a signed PUT should be stored, got {st}"
    st, _ = _http(port, "PUT", target, body, {"X-Mooncake-Auth": sig})
    assert st == 401, f"a replayed signed PUT should be 401, not {st}"
    st, _ = _http(port, "PUT", target, b'{"x": 2}',
                  {"X-Mooncake-Auth": _signature(CLUSTER, "PUT", target, body)})
    assert st == 401, "a signature over another body should be refused"
    st, _ = _http(port, "PUT", target, body,
                  {"X-Mooncake-Auth": _signature(CLUSTER, "PUT", target, body,
                                                 ts=int(time.time()) - 3600)})
    assert st == 401, "a stale timestamp should be refused"
    st, got = _http(port, "GET", target)
    assert (st, got) == (200, body), "reads stay open and see the signed write"
    st, _ = _http(port, "DELETE", target)
    assert st == 401, f"an unsigned DELETE should be 401, not {st}"
    st, _ = _http(port, "DELETE", target, None,
                  {"X-Mooncake-Auth": _signature(CLUSTER, "DELETE", target)})
    assert st == 200


def test_store_publishes_through_the_signed_metadata_server(auth_master, secrets, open_store):
    rc, a = open_store(auth_master, secrets["cluster"], metadata="http")
    assert rc == 0, f"a store with the secret should publish its descriptors, got {rc}"
    rc, b = open_store(auth_master, secrets["cluster"], metadata="http")
    assert rc == 0
    assert a.put("via-http", b"y" * 5000) == 0
    assert b.get("via-http") == b"y" * 5000


def test_admin_key_listings_need_a_signature(auth_master, secrets, open_store):
    rc, s = open_store(auth_master, secrets["cluster"])
    assert rc == 0 and s.put("listed", b"z") == 0
    port = auth_master.metrics_port
    for target in ("/get_all_keys", "/query_key?key=listed", "/get_all_segments"):
        st, _ = _http(port, "GET", target)
        assert st == 401, f"GET {target} without a signature should be 401, not {st}"
        st, body = _http(port, "GET", target,
                         headers={"X-Mooncake-Auth": _signature(CLUSTER, "GET", target)})
        assert st == 200, f"a signed GET {target} should pass, got {st}"
    st, body = _http(port, "GET", "/get_all_keys",
                     headers={"X-Mooncake-Auth": _signature(CLUSTER, "GET", "/get_all_keys")})
    assert b"listed" in body
    st, _ = _http(port, "GET", "/health")
    assert st == 200, "/health stays open"


# ---- transfer-engine data port ---------------------------------------------------------

def _data_port(store):
    return int(store.get_hostname().rsplit(":", 1)[1])


def test_data_port_refuses_a_peer_without_the_secret(auth_master, secrets, open_store):
    rc, a = open_store(auth_master, secrets["cluster"])
    assert rc == 0
    rc, b = open_store(auth_master, secrets["cluster"])
    assert rc == 0
    assert a.put("te-key", b"q" * 100000) == 0
    assert b.get("te-key") == b"q" * 100000, "peers with the secret should transfer"
    port = _data_port(a)
    # a proof with a wrong secret
    s, sn = _challenge(port)
    try:
        s.sendall(_proof(WRONG, b"te", sn)[0])
        assert _closed_without_accept(s), "the data port should refuse a wrong secret"
    finally:
        s.close()
    # a replayed good proof
    s, sn = _challenge(port)
    try:
        proof, _ = _proof(CLUSTER, b"te", sn)
        s.sendall(proof)
        assert _recv_exact(s, 40)[:4] == b"MCAA", "the documented proof should pass"
    finally:
        s.close()
    s, sn2 = _challenge(port)
    try:
        s.sendall(proof)
        assert _closed_without_accept(s), "a replayed proof should be refused by the data port"
    finally:
        s.close()
    # a request header sent straight away is not served
    s, _ = _challenge(port)
    try:
        s.sendall(b"\0" * 64)
        assert _closed_without_accept(s)
    finally:
        s.close()


def test_auth_off_master_refuses_an_authenticating_client(fresh_master, secrets, open_store):
    rc, _ = open_store(fresh_master, secrets["cluster"])
    assert rc == RPC_FAIL, "a client with a secret should not talk to a master without one"
    rc, _ = open_store(fresh_master, None)
    assert rc == 0, "with authentication off everything works as before"


# ---- dummy clients ----------------------------------------------------------------------

_PEEK_AS_NOBODY = r"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0" + sys.argv[1])
s.settimeout(3)
try:
    print("closed" if s.recv(1) == b"" else "data")
except socket.timeout:
    print("open")
except ConnectionResetError:
    print("closed")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_dummy_server_refuses_another_user(auth_master, secrets):
    import subprocess
    import sys
    from helpers import RealClient
    rc = RealClient(auth_master, extra_args=[f"--auth_token_file={secrets['cluster']}"])
    try:
        name = f"mooncake_client_{rc.port}.sock"
        path = "\0" + name
        other = subprocess.run([sys.executable, "-c", _PEEK_AS_NOBODY, name],
                               capture_output=True, text=True, timeout=20)
        assert other.stdout.strip() == "closed", \
            f"a dummy of another user should be refused: {other.stdout}{other.stderr}"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.settimeout(1)
            with pytest.raises(socket.timeout):
                s.recv(1)  # our own user's connection stays open, waiting for HELLO
        finally:
            s.close()
    finally:
        rc.stop()


# ---- mooncake-cli ---------------------------------------------------------------------------

def test_cli_signs_admin_requests(auth_master, secrets, open_store):
    import subprocess
    import sys
    rc, s = open_store(auth_master, secrets["cluster"])
    assert rc == 0 and s.put("cli-key", b"c" * 10) == 0
    env = {k: v for k, v in os.environ.items() if k != "MC_AUTH_TOKEN_FILE"}
    base = [sys.executable, "-m", "mooncake.cli", f"--admin=127.0.0.1:{auth_master.metrics_port}",
            f"--master={auth_master.addr}"]
    r = subprocess.run(base + ["keys"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "--auth-token-file" in r.stderr, (r.stdout, r.stderr)
    r = subprocess.run(base + [f"--auth-token-file={secrets['cluster']}", "keys"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and "cli-key" in r.stdout.split(), (r.stdout, r.stderr)
    r = subprocess.run(base + [f"--auth-token-file={secrets['cluster']}", "remove", "cli-key",
                               "--force"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert s.is_exist("cli-key") == 0


def test_standalone_metadata_server_needs_a_signature(secrets, tmp_path):
    from test_metadata_server import Daemon, daemon_bin
    d = Daemon([daemon_bin(), "--auth-token-file", secrets["cluster"]])
    try:
        target, body = "/metadata?key=mooncake%2Fram%2Fvictim", b'{"a": 1}'
        st, _ = _http(d.port, "PUT", target, body)
        assert st == 401, f"an unsigned PUT should be 401, not {st}"
        st, _ = _http(d.port, "PUT", target, body,
                      {"X-Mooncake-Auth": _signature(CLUSTER, "PUT", target, body)})
        assert st == 200, f"a signed PUT should pass, got {st}"
        st, _ = _http(d.port, "DELETE", target)
        assert st == 401
        st, got = _http(d.port, "GET", target)
        assert (st, got) == (200, body)
    finally:
        d.stop()
    bad = subprocess_run_daemon([daemon_bin(), "--auth-token-file", str(tmp_path / "none")])
    assert bad.returncode != 0 and "auth-token-file" in bad.stderr, bad.stderr


def subprocess_run_daemon(argv):
    import subprocess
    return subprocess.run(argv + ["--host", "127.0.0.1", "--port", "0"], capture_output=True,
                          text=True, timeout=20)

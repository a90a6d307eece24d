# SPDX-License-Identifier: Apache-2.0
"""mooncake-cli: look at a running Mooncake Store from the shell.

Talks to the master's admin HTTP server (``--admin``, the master's
``--metrics_host:--metrics_port``, default 127.0.0.1:9003) and to a client's
HTTP server (``--client``, default 127.0.0.1:9300); ``remove`` connects to
the master's RPC port (``--master``) as a store client that mounts nothing.

    mooncake-cli health
    mooncake-cli stats
    mooncake-cli keys --regex '^layer0/'
    mooncake-cli query KEY
    mooncake-cli segments
    mooncake-cli segment NAME
    mooncake-cli remove KEY [--force]
    mooncake-cli role
    mooncake-cli client health|stats|version

``--json`` prints the answer as JSON for scripts.  Exit status: 0 on
success, 1 when the thing asked for does not exist or the server refused,
2 when the server cannot be reached or the command line is wrong.

May import: store (only for ``remove``, lazily: the other commands speak
HTTP and run without the native extension).
"""

import argparse
import hashlib
import hmac
import json
import os
import time
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

DEFAULT_ADMIN = "127.0.0.1:9003"
DEFAULT_CLIENT = "127.0.0.1:9300"
DEFAULT_MASTER = "127.0.0.1:50051"

EXIT_OK, EXIT_FAIL, EXIT_UNREACHABLE = 0, 1, 2


class CliError(Exception):
    """A failure to report on stderr with exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


def _base_url(addr: str) -> str:
    return addr.rstrip("/") if "://" in addr else f"http://{addr}"


def cluster_secret(path: str) -> bytes:
    """The first cluster secret of a secrets file (docs/security.md)."""
    try:
        with open(path, "rb") as f:
            for line in f:
                words = line.split()
                if len(words) == 1 and not words[0].startswith(b"#"):
                    return words[0]
    except OSError as e:
        raise CliError(f"--auth-token-file {path}: {e.strerror}") from None
    raise CliError(f"--auth-token-file {path}: no cluster secret in it")


def auth_header(secret: bytes, method: str, target: str, body: bytes = b"") -> str:
    """The X-Mooncake-Auth value of a request (docs/protocol.md §9.2)."""
    ts, nonce = int(time.time()), os.urandom(16)
    msg = (b"mooncake-auth-v1\0H" + method.encode() + b"\0" + target.encode() + b"\0" +
           str(ts).encode() + b"\0" + nonce + hashlib.sha256(body).digest())
    return f"v1 {ts} {nonce.hex()} {hmac.new(secret, msg, hashlib.sha256).hexdigest()}"


def http_get(addr: str, path: str, params: Optional[Dict[str, str]] = None,
             timeout: float = 5.0, what: str = "server",
             secret: Optional[bytes] = None) -> Tuple[int, str]:
    """GET ``path`` from ``addr``, signed with ``secret`` when given;
    returns (status, body).  Connection failures raise
    CliError(EXIT_UNREACHABLE) naming the address."""
    target = path
    if params:
        target += "?" + urllib.parse.urlencode(params)
    url = _base_url(addr) + target
    req = urllib.request.Request(url)
    if secret is not None:
        req.add_header("X-Mooncake-Auth", auth_header(secret, "GET", target))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise CliError(f"cannot reach the {what} at {_base_url(addr)}: {reason}",
                       EXIT_UNREACHABLE) from None


def _json_body(status: int, body: str, url: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise CliError(f"{url} answered {status} with something that is not JSON: "
                       f"{body[:200]!r}") from None


def parse_prometheus(text: str) -> Dict[str, float]:
    """The samples of a Prometheus text exposition: {"name{labels}": value}."""
    out: Dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ---- commands -------------------------------------------------------------------

class Cli:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: List[str] = []
        path = getattr(args, "auth_token_file", None)
        self.secret = cluster_secret(path) if path else None

    def admin(self, path: str, params: Optional[Dict[str, str]] = None) -> Tuple[int, str]:
        status, body = http_get(self.args.admin, path, params, self.args.timeout,
                                "master's admin server (--admin)", self.secret)
        if status == 401:
            raise CliError(f"{path}: the master needs a signed request (cluster "
                           "authentication is on): pass --auth-token-file or set "
                           "MC_AUTH_TOKEN_FILE")
        return status, body

    def admin_json(self, path: str, params: Optional[Dict[str, str]] = None,
                   missing: str = "") -> Any:
        status, body = self.admin(path, params)
        if status == 404 and missing:
            raise CliError(missing)
        if status == 503:
            raise CliError(f"the master at {self.args.admin} is not serving "
                           f"(a standby of an HA group?): {body.strip()}")
        if status != 200:
            raise CliError(f"{path}: the master answered {status}: {body.strip()[:300]}")
        return _json_body(status, body, path)

    def emit(self, obj: Any, text: str) -> None:
        print(json.dumps(obj, indent=2, sort_keys=True) if self.args.json else text)

    def cmd_health(self) -> int:
        status, body = self.admin("/health")
        ok = status == 200 and body.strip() == "OK"
        self.emit({"healthy": ok, "status": status, "body": body.strip()},
                  "OK" if ok else f"unhealthy ({status}): {body.strip()}")
        return EXIT_OK if ok else EXIT_FAIL

    def cmd_stats(self) -> int:
        if self.args.json:
            status, body = self.admin("/metrics")
            if status != 200:
                raise CliError(f"/metrics: the master answered {status}")
            print(json.dumps(parse_prometheus(body), indent=2, sort_keys=True))
            return EXIT_OK
        status, body = self.admin("/metrics/summary")
        if status != 200:
            raise CliError(f"/metrics/summary: the master answered {status}")
        print(body.rstrip("\n"))
        return EXIT_OK

    def cmd_keys(self) -> int:
        params = {"tenant": self.args.tenant} if self.args.tenant else None
        j = self.admin_json("/get_all_keys", params)
        keys = sorted(j.get("keys", []))
        if self.args.regex:
            try:
                rx = re.compile(self.args.regex)
            except re.error as e:
                raise CliError(f"--regex {self.args.regex!r}: {e}", EXIT_UNREACHABLE) from None
            keys = [k for k in keys if rx.search(k)]
        truncated = bool(j.get("truncated"))
        self.emit({"keys": keys, "count": len(keys), "truncated": truncated},
                  "\n".join(keys) if keys else "(no keys)")
        if truncated and not self.args.json:
            print(f"mooncake-cli: the master lists at most {j.get('count')} keys; "
                  "the list is truncated", file=sys.stderr)
        return EXIT_OK

    def cmd_query(self) -> int:
        params = {"key": self.args.key}
        if self.args.tenant:
            params["tenant"] = self.args.tenant
        j = self.admin_json("/query_key", params, missing=f"key not found: {self.args.key}")
        lines = [f"key: {self.args.key}"]
        for k in sorted(j):
            if k in ("replicas", "key"):
                continue
            v = j[k]
            lines.append(f"{k}: {human_bytes(v) + f' ({v})' if k == 'size' else v}")
        for i, r in enumerate(j.get("replicas", [])):
            desc = ", ".join(f"{k}={r[k]}" for k in sorted(r))
            lines.append(f"replica {i}: {desc}")
        self.emit(j, "\n".join(lines))
        return EXIT_OK

    def cmd_segments(self) -> int:
        segs = self.admin_json("/get_all_segments")
        lines = []
        for s in segs:
            lines.append(f"{s.get('name')}  id={s.get('id')}  size={human_bytes(s.get('size', 0))}"
                         f"  used={human_bytes(s.get('used', 0))}  status={s.get('status')}"
                         f"  client={s.get('client_id', s.get('client'))}")
        self.emit(segs, "\n".join(lines) if lines else "(no segments)")
        return EXIT_OK

    def cmd_segment(self) -> int:
        j = self.admin_json("/query_segment", {"segment": self.args.name},
                            missing=f"segment not mounted: {self.args.name}")
        text = (f"name: {j.get('name')}\ncapacity: {human_bytes(j.get('capacity', 0))}"
                f" ({j.get('capacity')})\nallocated: {human_bytes(j.get('allocated', 0))}"
                f" ({j.get('allocated')})\nclient: {j.get('client_id')}\n"
                f"segments: {len(j.get('segments', []))}")
        self.emit(j, text)
        return EXIT_OK

    def cmd_role(self) -> int:
        out = {}
        for path in ("/role", "/ha_status"):
            status, body = self.admin(path)
            if status != 200:
                raise CliError(f"{path}: the master answered {status}: {body.strip()}")
            out[path.strip("/")] = body.strip()
        status, body = self.admin("/leader")
        out["leader"] = body.strip() if status == 200 else None
        text = f"role: {out['role']}\nha_status: {out['ha_status']}"
        if out["leader"] is not None:
            text += f"\nleader: {out['leader']}"
        self.emit(out, text)
        return EXIT_OK

    def cmd_remove(self) -> int:
        # Lazy: the store loads the native extension; the other commands
        # speak HTTP to the daemons and run without it.
        from mooncake.store import MooncakeDistributedStore

        store = MooncakeDistributedStore()
        # no segment, no staging buffer: this client only talks to the master
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", self.args.master,
                         auth_token_file=self.args.auth_token_file or "")
        if rc != 0:
            raise CliError(f"cannot connect to the master at {self.args.master} (--master): "
                           f"error {rc}", EXIT_UNREACHABLE)
        try:
            rc = store.remove(self.args.key, force=self.args.force)
        finally:
            store.close()
        names = {-704: "OBJECT_NOT_FOUND", -706: "OBJECT_HAS_LEASE"}
        if rc != 0:
            hint = " (a reader holds a lease; --force removes it anyway)" if rc == -706 else ""
            self.emit({"removed": False, "key": self.args.key, "error": rc},
                      f"cannot remove {self.args.key}: {names.get(rc, 'error')} ({rc}){hint}")
            return EXIT_FAIL
        self.emit({"removed": True, "key": self.args.key}, f"removed {self.args.key}")
        return EXIT_OK

    def cmd_client(self) -> int:
        path = {"health": "/health", "stats": "/metrics/summary",
                "version": "/version"}[self.args.what]
        status, body = http_get(self.args.client, path, None, self.args.timeout,
                                "client HTTP server (--client)")
        if self.args.what == "stats":
            if status != 200:
                raise CliError(f"{path}: the client answered {status}")
            if self.args.json:
                _, metrics = http_get(self.args.client, "/metrics", None, self.args.timeout,
                                      "client HTTP server (--client)")
                print(json.dumps(parse_prometheus(metrics), indent=2, sort_keys=True))
            else:
                print(body.rstrip("\n"))
            return EXIT_OK
        j = _json_body(status, body, path)
        if self.args.what == "health":
            self.emit(j, j.get("status", body.strip()))
            return EXIT_OK if status == 200 else EXIT_FAIL
        self.emit(j, j.get("version", body.strip()))
        return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mooncake-cli",
        description="Look at a running Mooncake Store through the master's admin "
                    "HTTP server and the clients' HTTP servers.")
    p.add_argument("--admin", default=os.environ.get("MOONCAKE_ADMIN", DEFAULT_ADMIN),
                   metavar="HOST:PORT",
                   help="the master's admin server (its --metrics_port; env MOONCAKE_ADMIN; "
                        f"default {DEFAULT_ADMIN})")
    p.add_argument("--client", default=os.environ.get("MOONCAKE_CLIENT", DEFAULT_CLIENT),
                   metavar="HOST:PORT",
                   help="a client's HTTP server (env MOONCAKE_CLIENT; "
                        f"default {DEFAULT_CLIENT})")
    p.add_argument("--master", default=os.environ.get("MOONCAKE_MASTER", DEFAULT_MASTER),
                   metavar="HOST:PORT",
                   help="the master's RPC address, for remove (env MOONCAKE_MASTER; "
                        f"default {DEFAULT_MASTER})")
    p.add_argument("--auth-token-file", default=os.environ.get("MC_AUTH_TOKEN_FILE", ""),
                   metavar="PATH",
                   help="cluster secrets file: sign admin requests and authenticate remove "
                        "(docs/security.md; env MC_AUTH_TOKEN_FILE; default: none)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="HTTP timeout (default 5)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    sub.add_parser("health", help="is the master up?")
    sub.add_parser("stats", help="a summary of the master's metrics")
    k = sub.add_parser("keys", help="list keys")
    k.add_argument("--regex", help="only keys this Python regular expression matches")
    k.add_argument("--tenant", help="tenant (default: default)")
    q = sub.add_parser("query", help="replicas, size, lease and pins of a key")
    q.add_argument("key")
    q.add_argument("--tenant", help="tenant (default: default)")
    sub.add_parser("segments", help="list mounted segments")
    s = sub.add_parser("segment", help="one segment by name")
    s.add_argument("name")
    r = sub.add_parser("remove", help="remove a key (through --master)")
    r.add_argument("key")
    r.add_argument("--force", action="store_true", help="remove even if a lease is held")
    sub.add_parser("role", help="HA role, status and leader of the master")
    c = sub.add_parser("client", help="a client's HTTP server (--client)")
    c.add_argument("what", choices=["health", "stats", "version"])
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cli = Cli(args)
        return getattr(cli, "cmd_" + args.command)()
    except CliError as e:
        if args.json:
            print(json.dumps({"error": str(e)}))
        print(f"mooncake-cli: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""``orch-apiserver token``: create, list and delete bootstrap tokens.

    orch-apiserver token create [TOKEN] [--ttl 24h] [--description TEXT] [--groups G,...]
                                [--usages signing,authentication] [--print-join-command]
    orch-apiserver token list
    orch-apiserver token delete ID|TOKEN [...]
    orch-apiserver token generate

Each talks to the running API server with the administrator's connection config
(``--orchconfig``, default DATA_DIR/admin.orchconfig) over HTTPS with its client
certificate, exactly as any other client: a token is the Secret
``orch-system/bootstrap-token-<id>`` of type ``bootstrap.orch.io/token``. Exit codes:
0 done, 1 the server refused or could not be reached, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import http.client
import json
import os
import ssl
import sys
import tempfile
import urllib.parse
from typing import Any, Sequence

import yaml

from .api import bootstraptoken as bt
from .api import names
from .api.duration import DurationError, parse_duration

SECRETS_PATH = f"/api/v1/namespaces/{names.NS_SYSTEM}/secrets"


class CliError(Exception):
    """A failure to report in one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# --- a small client for the connection config --------------------------------------------------


class ApiClient:
    """HTTPS requests with the credentials of a connection config (kubeconfig shape)."""

    def __init__(self, path: str, timeout: float = 10.0):
        self.path = path
        self.timeout = timeout
        try:
            with open(path, encoding="utf-8") as f:
                cfg = yaml.safe_load(f) or {}
        except OSError as exc:
            raise CliError(f"cannot read the connection config {path}: {exc.strerror or exc}", 1) from None
        except yaml.YAMLError as exc:
            raise CliError(f"the connection config {path} is not valid YAML: {exc}", 1) from None
        try:
            ctx_name = cfg.get("current-context") or (cfg.get("contexts") or [{}])[0].get("name")
            ctx = next((c["context"] for c in cfg.get("contexts") or [] if c.get("name") == ctx_name), None)
            cluster_name = ctx["cluster"] if ctx else (cfg.get("clusters") or [{}])[0].get("name")
            user_name = ctx.get("user") if ctx else (cfg.get("users") or [{}])[0].get("name")
            self.cluster = next(c["cluster"] for c in cfg.get("clusters") or [] if c.get("name") == cluster_name)
            self.user = next((u.get("user") or {} for u in cfg.get("users") or [] if u.get("name") == user_name), {})
            self.server = str(self.cluster["server"]).rstrip("/")
        except (KeyError, TypeError, AttributeError, StopIteration, IndexError):
            raise CliError(f"the connection config {path} names no usable cluster and server", 1) from None
        u = urllib.parse.urlsplit(self.server)
        if u.scheme != "https" or not u.hostname:
            raise CliError(f"the connection config {path}: server {self.server!r} is not an https:// URL", 1)
        self.host, self.port = u.hostname, u.port or 443
        self._ctx: ssl.SSLContext | None = None

    def _data(self, obj: dict, key: str) -> bytes | None:
        """``<key>-data`` (base64) or the file named by ``<key>`` (relative to the config)."""
        if obj.get(f"{key}-data"):
            try:
                return base64.b64decode(obj[f"{key}-data"], validate=True)
            except ValueError:
                raise CliError(f"the connection config {self.path}: {key}-data is not base64", 1) from None
        if obj.get(key):
            p = os.path.join(os.path.dirname(os.path.abspath(self.path)), obj[key])
            try:
                with open(p, "rb") as f:
                    return f.read()
            except OSError as exc:
                raise CliError(f"the connection config {self.path}: cannot read {key} {p}: {exc.strerror}", 1) from None
        return None

    def ca_pem(self) -> bytes | None:
        return self._data(self.cluster, "certificate-authority")

    def ssl_context(self) -> ssl.SSLContext:
        if self._ctx is not None:
            return self._ctx
        ca = self.ca_pem()
        ctx = ssl.create_default_context(cadata=ca.decode() if ca else None)
        if self.cluster.get("insecure-skip-tls-verify"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        cert, key = self._data(self.user, "client-certificate"), self._data(self.user, "client-key")
        if cert and key:
            # ssl loads a key pair only from files: a private temporary directory, removed at once.
            with tempfile.TemporaryDirectory(prefix="orch-token-") as d:
                cp, kp = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
                for p, data in ((cp, cert), (kp, key)):
                    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                try:
                    ctx.load_cert_chain(cp, kp)
                except ssl.SSLError as exc:
                    raise CliError(
                        f"the connection config {self.path}: bad client certificate or key: {exc}", 1
                    ) from None
        self._ctx = ctx
        return ctx

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if self.user.get("token"):
            headers["Authorization"] = f"Bearer {self.user['token']}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ssl_context())
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except ssl.SSLCertVerificationError as exc:
            raise CliError(f"cannot verify the API server at {self.server}: {exc.verify_message}", 1) from None
        except (OSError, http.client.HTTPException) as exc:
            raise CliError(f"cannot reach the API server at {self.server}: {exc}", 1) from None
        finally:
            conn.close()
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = raw.decode(errors="replace")
        return resp.status, doc

    def expect(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        status, doc = self.request(method, path, body)
        if status not in ok:
            msg = doc.get("message") if isinstance(doc, dict) else doc
            raise CliError(f"the API server answered {status} to {method} {path}: {msg}", 1)
        return doc


# --- the commands ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{names.APISERVER_NAME} token",
        description="Manage bootstrap tokens (secrets of type "
        f"{names.BOOTSTRAP_TOKEN_SECRET_TYPE} in {names.NS_SYSTEM}).",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        default=names.APISERVER_DATA_DIR,
        help="The API server's data directory (default %(default)s); its admin"
        f"{names.CONNECTION_CONFIG_SUFFIX} is used unless --orchconfig is given.",
    )
    common.add_argument("--orchconfig", default="", help="Connection config with administrator credentials.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", parents=[common], help="Create a bootstrap token and print it.")
    c.add_argument("token", nargs="?", default="", help="The token to create (default: a random one).")
    c.add_argument("--ttl", default="24h", help="Lifetime, e.g. 1h30m; 0 never expires (default %(default)s).")
    c.add_argument("--description", default="", help="Human-readable description.")
    c.add_argument(
        "--groups",
        action="append",
        default=[],
        help=f"Extra groups (comma list, repeatable), each starting with {names.GROUP_BOOTSTRAPPERS_PREFIX}.",
    )
    c.add_argument(
        "--usages", action="append", default=[], help="signing and/or authentication (comma list; default both)."
    )
    c.add_argument(
        "--print-join-command",
        action="store_true",
        help=f"Print the '{names.AGENT_NAME} join' command instead of the token.",
    )
    sub.add_parser("list", parents=[common], help="List bootstrap tokens.")
    d = sub.add_parser("delete", parents=[common], help="Delete bootstrap tokens by id or full token.")
    d.add_argument("tokens", nargs="+", metavar="ID|TOKEN")
    sub.add_parser("generate", help="Print a random token without creating it.")
    return p


def _client(ns: argparse.Namespace) -> ApiClient:
    return ApiClient(ns.orchconfig or os.path.join(ns.data_dir, "admin" + names.CONNECTION_CONFIG_SUFFIX))


def _ttl(value: str) -> _dt.timedelta:
    try:
        ttl = parse_duration(value)
    except DurationError as exc:
        raise CliError(f"invalid value {value!r} for --ttl: {exc}", 2) from None
    if ttl.total_seconds() < 0:
        raise CliError(f"invalid value {value!r} for --ttl: must not be negative", 2)
    return ttl


def cmd_create(ns: argparse.Namespace, out) -> int:
    ttl = _ttl(ns.ttl)
    try:
        token = bt.parse_token(ns.token) if ns.token else bt.generate_token()
        secret = bt.secret_for_token(
            token, ttl=ttl, usages=ns.usages or bt.DEFAULT_USAGES, groups=ns.groups, description=ns.description
        )
    except bt.TokenError as exc:
        raise CliError(str(exc), 2) from None
    client = _client(ns)
    status, doc = client.request("POST", SECRETS_PATH, secret)
    if status == 409:
        raise CliError(f"a bootstrap token with id {token.id!r} already exists", 1)
    if status not in (200, 201):
        msg = doc.get("message") if isinstance(doc, dict) else doc
        raise CliError(f"the API server answered {status} when creating the token: {msg}", 1)
    if ns.print_join_command:
        ca = client.ca_pem()
        if not ca:
            raise CliError(f"the connection config {client.path} has no certificate-authority data to pin", 1)
        print(bt.join_command(f"https://{_hostport(client)}", token, bt.ca_cert_hash(ca)), file=out)
    else:
        print(token, file=out)
    return 0


def _hostport(client: ApiClient) -> str:
    host = f"[{client.host}]" if ":" in client.host else client.host
    return f"{host}:{client.port}"


def _human(seconds: float) -> str:
    s = int(seconds)
    if s >= 2 * 86400:
        return f"{s // 86400}d"
    if s >= 3600:
        return f"{s // 3600}h"
    if s >= 60:
        return f"{s // 60}m"
    return f"{s}s"


def cmd_list(ns: argparse.Namespace, out) -> int:
    doc = _client(ns).expect("GET", SECRETS_PATH)
    now = _dt.datetime.now(_dt.timezone.utc)
    rows = [("TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS")]
    for item in (doc or {}).get("items") or []:
        if item.get("type") != names.BOOTSTRAP_TOKEN_SECRET_TYPE:
            continue
        try:
            ts = bt.token_from_secret(item)
        except bt.TokenError as exc:
            print(f"warning: {exc}", file=sys.stderr)
            continue
        if ts.expiration is None:
            ttl, expires = "<forever>", "<never>"
        else:
            left = (ts.expiration - now).total_seconds()
            ttl, expires = (_human(left) if left > 0 else "<invalid>"), ts.expiration_text
        rows.append(
            (
                str(ts.token),
                ttl,
                expires,
                ",".join(ts.usages) or "<none>",
                ts.description or "<none>",
                ",".join(ts.groups) or "<none>",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    return 0


def cmd_delete(ns: argparse.Namespace, out) -> int:
    try:
        ids = [bt.parse_token_id(t) for t in ns.tokens]
    except bt.TokenError as exc:
        raise CliError(str(exc), 2) from None
    client = _client(ns)
    for tid in ids:
        status, doc = client.request("DELETE", f"{SECRETS_PATH}/{names.BOOTSTRAP_TOKEN_SECRET_PREFIX}{tid}")
        if status == 404:
            raise CliError(f"bootstrap token {tid!r} not found", 1)
        if status not in (200, 202):
            msg = doc.get("message") if isinstance(doc, dict) else doc
            raise CliError(f"the API server answered {status} when deleting token {tid!r}: {msg}", 1)
        print(f"bootstrap token {tid!r} deleted", file=out)
    return 0


def main(argv: Sequence[str], out=None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    try:
        ns = parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse printed the usage error
        return int(exc.code or 0)
    try:
        if ns.command == "create":
            return cmd_create(ns, out)
        if ns.command == "list":
            return cmd_list(ns, out)
        if ns.command == "delete":
            return cmd_delete(ns, out)
        print(bt.generate_token(), file=out)
        return 0
    except CliError as exc:
        print(f"{names.APISERVER_NAME} token {ns.command}: error: {exc}", file=sys.stderr)
        return exc.code

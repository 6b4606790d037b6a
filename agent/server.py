"""The agent's HTTPS server (``--address``:``--port``): a read-only view of the node.

Paths, as upstream serves them on its port 10250:

* ``/pods`` - the pods the agent runs, with status, as a ``PodList``; manifests
  the agent could not use are listed in an extra top-level ``problems`` field
  (only when there are some; clients ignore unknown fields) and at
  ``/manifestProblems``;
* ``/healthz`` - ``ok``, or 500 with the failing check;
* ``/containerLogs/<namespace>/<pod>/<container>`` - the container's log, with
  upstream's query options (``follow``, ``tailLines``, ``timestamps``,
  ``previous``, ``sinceSeconds``, ``sinceTime``, ``limitBytes``).

Errors are plain text, as upstream's replies are. Every request passes an
``authenticate(request) -> user | None`` and ``authorize(user, verb, resource,
subresource) -> bool`` pair first: the defaults are upstream's standalone
defaults (anonymous allowed, AlwaysAllow); the cluster setup plugs in real ones.

Without ``--tls-cert-file``/``--tls-private-key-file`` the server makes (once)
a self-signed certificate in ``--cert-dir``, as upstream does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import inspect
import ipaddress
import os
import socket
import ssl
import time
from typing import Any, Callable, Sequence

import orjson
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver_min.api import names, timeutil

from agent import logging as agent_logging
from agent import pods as podutil
from agent.logs import LogOptions, parse_bool, read_log

__all__ = [
    "AgentServer", "LogTarget", "UserInfo", "ANONYMOUS", "allow_anonymous", "always_allow",
    "ensure_serving_cert", "ListenError",
]

log = agent_logging.get_logger("server")

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_CERT_VALIDITY = _dt.timedelta(days=365)
_WILDCARDS = ("", "0.0.0.0", "::")


@dataclasses.dataclass(frozen=True)
class LogTarget:
    """Where a container's log is, and whether the container still writes it
    (``follow`` ends once it stops and the file is drained)."""

    path: str
    is_running: Callable[[], bool]


@dataclasses.dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()


ANONYMOUS = UserInfo(names.USER_ANONYMOUS, (names.GROUP_UNAUTHENTICATED,))


def allow_anonymous(request: web.Request) -> UserInfo:
    """``--anonymous-auth=true`` with no other authenticator: everyone is anonymous."""
    return ANONYMOUS


def always_allow(user: Any, verb: str, resource: str, subresource: str) -> bool:
    """``--authorization-mode=AlwaysAllow``."""
    return True


class ListenError(OSError):
    """The server could not listen (address in use, bad address, bad certificate).
    The message is the whole story; ``errno`` is kept when the system gave one."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


# Upstream's verbs and subresources for the node's own API (resource "nodes").
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
          "DELETE": "delete"}
_SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/spec", "spec"))


def _subresource(path: str) -> str:
    for prefix, sub in _SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            return sub
    return "proxy"


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _text(status: int, body: str, **headers: str) -> web.Response:
    if not body.endswith("\n"):
        body += "\n"
    return web.Response(status=status, body=body.encode(), content_type="text/plain",
                        charset="utf-8", headers=headers or None)


def _problem_json(problem: Any) -> dict:
    since = getattr(problem, "since", None)
    out = {
        "source": getattr(problem, "source", ""),
        "location": getattr(problem, "location", ""),
        "message": getattr(problem, "message", str(problem)),
    }
    if since is not None:
        out["since"] = timeutil.format_rfc3339(_dt.datetime.fromtimestamp(since, _dt.timezone.utc))
    return out


class AgentServer:
    """The agent's read-only HTTPS server; see the module docstring."""

    def __init__(self, *, address: str, port: int, cert_dir: str, tls_cert_file: str = "",
                 tls_private_key_file: str = "", node_name: str,
                 pods: Callable[[], list[dict]],
                 locate_log: Callable[[str, str, str, bool], LogTarget | None],
                 healthz: Callable[[], str | None] = lambda: None,
                 problems: Callable[[], list] = lambda: [],
                 authenticate: Callable[[web.Request], Any] | None = None,
                 authorize: Callable[[Any, str, str, str], Any] | None = None,
                 follow_poll_interval: float = 0.2) -> None:
        self.address = address
        self._port = port
        self.cert_dir = cert_dir
        self.tls_cert_file = tls_cert_file
        self.tls_private_key_file = tls_private_key_file
        self.node_name = node_name
        self._pods = pods
        self._locate_log = locate_log
        self._healthz = healthz
        self._problems = problems
        self._authenticate = authenticate or allow_anonymous
        self._authorize = authorize or always_allow
        self._poll = follow_poll_interval
        self._closing = False   # shutting down: follows end as if their container stopped

    @property
    def port(self) -> int:
        """The bound port once listening (the configured one before)."""
        return self._port

    # --- setup ---------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ListenError("--tls-cert-file and --tls-private-key-file must be given together "
                              f"(got --tls-cert-file={self.tls_cert_file!r}, "
                              f"--tls-private-key-file={self.tls_private_key_file!r})")
        if self.tls_cert_file:
            cert, key = self.tls_cert_file, self.tls_private_key_file
        else:
            addresses = [] if self.address in _WILDCARDS else [self.address]
            try:
                cert, key = ensure_serving_cert(self.cert_dir, self.node_name, addresses)
            except (OSError, ValueError) as exc:
                raise ListenError(f"cannot create a self-signed serving certificate in "
                                  f"--cert-dir={self.cert_dir}: {exc}") from exc
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ListenError(f"cannot load the serving certificate {cert} with key {key}: {exc}") from exc
        return ctx

    def _socket(self) -> socket.socket:
        """A listening socket. 0.0.0.0 and :: mean every interface of both
        families (one dual-stack socket), as the option's help promises."""
        where = f"{self.address or '0.0.0.0'}:{self._port} (--address, --port)"
        if self.address in _WILDCARDS:
            candidates = [(socket.AF_INET6, ("::", self._port)), (socket.AF_INET, ("0.0.0.0", self._port))]
        else:
            try:
                infos = socket.getaddrinfo(self.address, self._port, type=socket.SOCK_STREAM,
                                           flags=socket.AI_PASSIVE)
            except socket.gaierror as exc:
                raise ListenError(f"cannot listen on {where}: {exc.strerror}") from exc
            candidates = [(family, addr) for family, _, _, _, addr in infos]
        last: OSError | None = None
        for family, addr in candidates:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and self.address in _WILDCARDS:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind(addr)
                sock.listen(128)
                sock.setblocking(False)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        reason = (last.strerror or str(last)).lower() if last else "no usable address"
        raise ListenError(f"cannot listen on {where}: {reason}", getattr(last, "errno", None))

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/pods", self._handle_pods)
        app.router.add_get("/manifestProblems", self._handle_problems)
        app.router.add_get("/healthz", self._handle_healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._handle_logs)
        return app

    async def serve(self, started: asyncio.Future | None = None) -> None:
        """Listen until cancelled. ``started`` gets the bound port once
        listening, or the ListenError that prevented it (also raised here)."""
        self._closing = False
        try:
            ctx = self._ssl_context()
            sock = self._socket()
        except ListenError as exc:
            log.error("Failed to start the agent server", err=exc)
            if started is not None and not started.done():
                started.set_exception(exc)
            raise
        # handler_cancellation: a follow whose client went away stops at once.
        runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=None,
                               shutdown_timeout=1.0)
        try:
            await runner.setup()
            site = web.SockSite(runner, sock, ssl_context=ctx)
            await site.start()
            self._port = sock.getsockname()[1]
            log.info("Agent server listening", address=self.address, port=self._port)
            if started is not None and not started.done():
                started.set_result(self._port)
            await asyncio.Event().wait()
        finally:
            # A follow never ends by itself while its container runs: make every
            # stream drain and finish, so shutdown does not wait out its timeout.
            self._closing = True
            await runner.cleanup()
            sock.close()

    # --- request handling ----------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler) -> web.StreamResponse:
        """Authentication and authorization for every path (unknown ones too,
        as upstream filters before routing), then plain-text 404/405."""
        user = await _maybe_await(self._authenticate(request))
        if user is None:
            return _text(401, "Unauthorized")
        verb = _VERBS.get(request.method, request.method.lower())
        subresource = _subresource(request.path)
        decision = await _maybe_await(self._authorize(user, verb, "nodes", subresource))
        allowed, reason = decision if isinstance(decision, tuple) else (bool(decision), "")
        if not allowed:
            user_name = getattr(user, "name", str(user))
            log.v(2).info("Forbidden", url=str(request.rel_url), user=user_name, reason=reason)
            return _text(403, f"Forbidden (user={user_name}, verb={verb}, resource=nodes, "
                              f"subresource={subresource})")
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed as exc:
            return _text(405, "405: Method Not Allowed", Allow=",".join(sorted(exc.allowed_methods)))
        except web.HTTPNotFound:
            return _text(404, "404 page not found")

    async def _handle_pods(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                "items": list(self._pods())}
        problems = [_problem_json(p) for p in self._problems()]
        if problems:
            body["problems"] = problems
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _handle_problems(self, request: web.Request) -> web.Response:
        body = {"problems": [_problem_json(p) for p in self._problems()]}
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _handle_healthz(self, request: web.Request) -> web.Response:
        failure = await _maybe_await(self._healthz())
        verbose = "verbose" in request.query
        if failure is None:
            return _text(200, "[+]ping ok\nhealthz check passed" if verbose else "ok")
        failure = str(failure).rstrip("\n")
        log.v(2).info("Health check failed", reason=failure)
        return _text(500, f"{failure}\nhealthz check failed")

    def _explain_missing(self, namespace: str, pod_name: str, container: str,
                         previous: bool) -> web.Response:
        """Why there is no log to serve, in upstream's words: an unknown pod or
        container is 404, a known container without that log is 400."""
        pod = next((p for p in self._pods()
                    if podutil.namespace(p) == namespace and podutil.name(p) == pod_name), None)
        if pod is None:
            return _text(404, f'pod "{pod_name}" does not exist in namespace "{namespace}"')
        spec = podutil.spec(pod)
        declared = {c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
                    for c in spec.get(key) or []}
        if container not in declared:
            return _text(404, f'container "{container}" not found in pod "{pod_name}"')
        if previous:
            return _text(400, f'previous terminated container "{container}" in pod "{pod_name}" not found')
        status = pod.get("status") or {}
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for cs in status.get(key) or []:
                waiting = (cs.get("state") or {}).get("waiting")
                if cs.get("name") == container and waiting is not None:
                    return _text(400, f'container "{container}" in pod "{pod_name}" is waiting to '
                                      f'start: {waiting.get("reason") or "unknown reason"}')
        return _text(400, f'container "{container}" in pod "{pod_name}" is not available')

    async def _handle_logs(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        pod_name = request.match_info["pod"]
        container = request.match_info["container"]
        try:
            opts = LogOptions.from_query(request.query, time.time_ns())
        except ValueError as exc:
            return _text(400, str(exc))
        previous = parse_bool(request.query.get("previous"))

        target = await _maybe_await(self._locate_log(namespace, pod_name, container, previous))
        if target is None:
            return self._explain_missing(namespace, pod_name, container, previous)
        try:
            os.stat(target.path)
        except OSError as exc:
            return _text(400, f'failed to open log file "{target.path}": {exc.strerror or exc}')

        response = web.StreamResponse(headers={"Content-Type": _TEXT})
        await response.prepare(request)
        if request.method == "HEAD":
            return response

        def is_running() -> bool:
            transport = request.transport
            if self._closing or transport is None or transport.is_closing():
                return False  # shutdown, or the client left: drain once and stop
            return bool(target.is_running())

        try:
            await read_log(target.path, opts, response.write, is_running=is_running,
                           poll_interval=self._poll)
        except (ConnectionError, OSError) as exc:
            log.v(2).info("Container log stream ended early", path=target.path, err=exc)
            return response
        await response.write_eof()
        return response


# --- serving certificate -----------------------------------------------------------


def _wanted_names(node_name: str, addresses: Sequence[str]) -> tuple[set[str], set[str]]:
    dns = {node_name, "localhost"}
    ips = {"127.0.0.1"}
    for address in addresses:
        if address in _WILDCARDS:
            continue
        try:
            ips.add(str(ipaddress.ip_address(address)))
        except ValueError:
            dns.add(address)
    return dns, ips


def _reusable(cert_path: str, key_path: str, dns: set[str], ips: set[str]) -> bool:
    """Whether the files are a readable pair, valid now and naming every host we need."""
    try:
        with open(cert_path, "rb") as f:
            chain = x509.load_pem_x509_certificates(f.read())
        with open(key_path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except (OSError, ValueError, TypeError):
        return False
    leaf = chain[0]
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(serialization.Encoding.DER, spki) != \
            key.public_key().public_bytes(serialization.Encoding.DER, spki):
        return False
    now = _dt.datetime.now(_dt.timezone.utc)
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc - _dt.timedelta(days=1):
        return False
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have_dns = set(san.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return dns <= have_dns and ips <= have_ips


def _write_atomic(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise


def ensure_serving_cert(cert_dir: str, node_name: str, addresses: Sequence[str]) -> tuple[str, str]:
    """The agent's self-signed serving certificate and key in ``cert_dir``
    (``orch-agent.crt`` / ``orch-agent.key``), made when missing, unreadable,
    expiring or not naming the node, ``localhost``, ``127.0.0.1`` and
    ``addresses``; reused otherwise.

    As upstream, a one-off CA signs the serving certificate and the ``.crt``
    file holds both, so a client can trust the file itself.
    """
    if not node_name:
        raise ValueError("node name is empty: the serving certificate needs one")
    cert_path = os.path.join(cert_dir, f"{names.AGENT_NAME}.crt")
    key_path = os.path.join(cert_dir, f"{names.AGENT_NAME}.key")
    dns, ips = _wanted_names(node_name, addresses)
    if _reusable(cert_path, key_path, dns, ips):
        if os.stat(key_path).st_mode & 0o077:
            os.chmod(key_path, 0o600)
        return cert_path, key_path

    os.makedirs(cert_dir, mode=0o755, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc)
    not_before = now - _dt.timedelta(minutes=5)   # clock skew between node and clients
    not_after = now + _CERT_VALIDITY
    stamp = int(now.timestamp())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}-ca@{stamp}")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName(d) for d in sorted(dns)] + \
          [x509.IPAddress(ipaddress.ip_address(i)) for i in sorted(ips)]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write_atomic(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()), 0o600)
    _write_atomic(cert_path, cert.public_bytes(pem) + ca_cert.public_bytes(pem), 0o644)
    log.info("Created a self-signed serving certificate", cert=cert_path, key=key_path,
             names=sorted(dns) + sorted(ips))
    return cert_path, key_path

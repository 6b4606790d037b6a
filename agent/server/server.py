"""The agent's HTTPS server (``--address``:``--port``): the node's own API.

Paths, as upstream serves them on its port 10250:

* ``/pods`` - the pods the agent runs, with status, as a ``PodList``; manifests
  the agent could not use are listed in an extra top-level ``problems`` field
  (only when there are some; clients ignore unknown fields) and at
  ``/manifestProblems``;
* ``/healthz`` - ``ok``, or 500 with the failing check;
* ``/stats/summary`` - node and pod CPU, memory and file systems (:mod:`agent.server.stats`);
* ``/metrics`` and ``/metrics/resource`` - Prometheus text (:mod:`agent.metrics`);
* with ``--enable-debugging-handlers`` (else 405 "Debug endpoints are disabled."):
  ``/containerLogs/<namespace>/<pod>/<container>`` (the container's log, with
  upstream's query options ``follow``, ``tailLines``, ``timestamps``, ``previous``,
  ``sinceSeconds``, ``sinceTime``, ``limitBytes``), ``/logs/`` (files under
  ``/var/log``, directory listings as upstream's file server writes them),
  ``/runningpods/`` (the pods in the runtime), ``/debug/flags/v`` (PUT a verbosity level;
  ``enableDebugFlagsHandler``), ``/configz`` (the effective
  configuration), ``/run/...`` (a command through the runtime's ExecSync) and
  ``/exec/...``, ``/attach/...``, ``/portForward/...`` through the runtime's
  streaming URL (WebSocket exec/attach relayed, see :mod:`agent.server.streaming`; other
  requests redirected there).

Errors are plain text, as upstream's replies are. Every request is first
authenticated (``authenticate(request) -> UserInfo | None``; None is a 401) and
authorized (``authorize(RequestAttributes) -> bool | (bool, reason)``; no is a
403, :class:`agent.server.auth.AuthorizationError` a 500), see
:mod:`agent.server.auth`. The defaults are upstream's standalone defaults
(anonymous allowed, AlwaysAllow); the agent plugs in the configured ones.

The read-only port (``--read-only-port``, off by default) is a second instance in
plain HTTP without authentication or authorization and without the debugging
handlers: ``/pods``, ``/healthz``, ``/stats/summary`` and ``/metrics``, as upstream.

Serving certificate: ``--tls-cert-file``/``--tls-private-key-file``; else a
certificate issued by the cluster (``--rotate-server-certificates``, swapped in
with :meth:`AgentServer.reload_certificate` on the live TLS context, so new
handshakes use it at once); else (once) a self-signed certificate in
``--cert-dir``, as upstream does. With a client CA the server asks for client
certificates; one that does not verify against the CA fails the handshake.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import html
import inspect
import ipaddress
import mimetypes
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from typing import Any, Awaitable, Callable, Mapping, Sequence

import orjson
from aiohttp import web

from agent import logging as agent_logging
from agent import pods as podutil
from agent.metrics import resource_metrics
from agent.options import BY_FIELD
from apiserver_min.api import names, timeutil
from apiserver_min.api.duration import format_duration
from cri.client import CriError, NotFoundError

from .auth import ANONYMOUS, AuthorizationError, RequestAttributes, UserInfo, request_attributes
from .certinfo import pair_matches, read_certificate
from .logs import LogOptions, parse_bool, read_log
from .tlsconfig import TLSOptionError, apply_tls_options


def _streaming() -> Any:
    """The exec/attach/port-forward relay, imported with the first such request (its
    WebSocket and SPDY code is about 1.5 MB an agent that is never asked for a shell
    does not need)."""
    from . import streaming

    return streaming


__all__ = [
    "AgentServer",
    "LogTarget",
    "UserInfo",
    "ANONYMOUS",
    "allow_anonymous",
    "always_allow",
    "ensure_serving_cert",
    "ListenError",
    "StreamingError",
    "RuntimeStreaming",
    "configz_document",
    "DEFAULT_LOG_DIR",
]

log = agent_logging.get_logger("server")

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_RENEW_MARGIN = 86400.0  # a self-signed certificate this close to expiry is made anew
_SELFSIGNED_TIMEOUT = 120.0
_SELFSIGNED_MODULE = f"{__package__}.selfsigned"  # run as a helper process, never imported here
_WILDCARDS = ("", "0.0.0.0", "::")
DEFAULT_LOG_DIR = "/var/log"
DEBUG_DISABLED = "Debug endpoints are disabled."
# Upstream's paths that answer 405 when the debugging handlers are off.
_DEBUG_PATHS = ("/run", "/exec", "/attach", "/portForward", "/containerLogs", "/runningpods", "/debug/pprof", "/logs")


@dataclasses.dataclass(frozen=True)
class LogTarget:
    """Where a container's log is, and whether the container still writes it
    (``follow`` ends once it stops and the file is drained)."""

    path: str
    is_running: Callable[[], bool]


def allow_anonymous(request: web.Request) -> UserInfo:
    """``--anonymous-auth=true`` with no other authenticator: everyone is anonymous."""
    return ANONYMOUS


def always_allow(attrs: RequestAttributes) -> bool:
    """``--authorization-mode=AlwaysAllow``."""
    return True


class ListenError(OSError):
    """The server could not listen (address in use, bad address, bad certificate).
    The message is the whole story; ``errno`` is kept when the system gave one."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class StreamingError(Exception):
    """A /run, /exec, /attach or /portForward request cannot be served: ``status`` and text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _text(status: int, body: str, **headers: str) -> web.Response:
    if not body.endswith("\n"):
        body += "\n"
    return web.Response(
        status=status, body=body.encode(), content_type="text/plain", charset="utf-8", headers=headers or None
    )


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

    def __init__(
        self,
        *,
        address: str,
        port: int,
        cert_dir: str,
        tls_cert_file: str = "",
        tls_private_key_file: str = "",
        node_name: str,
        pods: Callable[[], list[dict]],
        locate_log: Callable[[str, str, str, bool], LogTarget | None],
        healthz: Callable[[], str | None] = lambda: None,
        problems: Callable[[], list] = lambda: [],
        authenticate: Callable[[web.Request], Any] | None = None,
        authorize: Callable[[RequestAttributes], Any] | None = None,
        follow_poll_interval: float = 0.2,
        client_ca: bytes | None = None,
        enable_debugging_handlers: bool = True,
        running_pods: Callable[[], Awaitable[list[dict]]] | None = None,
        stats: Callable[[bool], Awaitable[dict]] | None = None,
        metrics: Callable[[], str] | None = None,
        configz: Callable[[], dict] | None = None,
        streaming: "RuntimeStreaming | None" = None,
        log_dir: str = DEFAULT_LOG_DIR,
        tls_cipher_suites: Sequence[str] = (),
        tls_min_version: str = "",
        enable_system_log_handler: bool = True,
        set_verbosity: Callable[[int], None] | None = None,
        plain_http: bool = False,
    ) -> None:
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
        self._closing = False  # shutting down: follows end as if their container stopped
        self.client_ca = client_ca
        self.debugging = enable_debugging_handlers
        self._running_pods = running_pods
        self._stats = stats
        self._metrics = metrics
        self._configz = configz
        self._streaming = streaming
        self.log_dir = log_dir
        self.tls_cipher_suites = tuple(tls_cipher_suites)
        self.tls_min_version = tls_min_version
        self.system_logs = enable_system_log_handler  # /logs/, under the debugging handlers as upstream
        self._set_verbosity = set_verbosity  # PUT /debug/flags/v (enableDebugFlagsHandler)
        self.plain_http = plain_http  # the read-only port (--read-only-port): no TLS
        self._ctx: ssl.SSLContext | None = None
        self._issued: tuple[str, str] | None = None  # a cluster-issued pair (rotation)
        self.serving_cert_expiry: float | None = None  # not-after of the certificate served (epoch s)

    @property
    def port(self) -> int:
        """The bound port once listening (the configured one before)."""
        return self._port

    # --- setup ---------------------------------------------------------------------

    def _certificate_files(self) -> tuple[str, str]:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ListenError(
                "--tls-cert-file and --tls-private-key-file must be given together "
                f"(got --tls-cert-file={self.tls_cert_file!r}, "
                f"--tls-private-key-file={self.tls_private_key_file!r})"
            )
        if self.tls_cert_file:
            return self.tls_cert_file, self.tls_private_key_file
        if self._issued is not None:
            return self._issued
        addresses = [] if self.address in _WILDCARDS else [self.address]
        try:
            return ensure_serving_cert(self.cert_dir, self.node_name, addresses)
        except (OSError, ValueError) as exc:
            raise ListenError(
                f"cannot create a self-signed serving certificate in --cert-dir={self.cert_dir}: {exc}"
            ) from exc

    def _ssl_context(self) -> ssl.SSLContext:
        cert, key = self._certificate_files()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            apply_tls_options(ctx, self.tls_cipher_suites, self.tls_min_version)
        except TLSOptionError as exc:
            raise ListenError(str(exc)) from exc
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ListenError(f"cannot load the serving certificate {cert} with key {key}: {exc}") from exc
        self.serving_cert_expiry = _not_after(cert)
        if self.client_ca:
            # Ask for a client certificate; the x509 authenticator names its user.
            try:
                ctx.load_verify_locations(
                    cadata=self.client_ca.decode() if isinstance(self.client_ca, bytes) else self.client_ca
                )
            except (ssl.SSLError, ValueError) as exc:
                raise ListenError(f"cannot use the client CA bundle (--client-ca-file): {exc}") from exc
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def reload_certificate(self, cert_path: str, key_path: str) -> None:
        """Serve ``cert_path``/``key_path`` from now on (certificate rotation): the
        live context's chain is replaced, so every new handshake presents it while
        open connections keep theirs. Ignored when ``--tls-cert-file`` is given."""
        if self.tls_cert_file:
            log.info("Serving certificate rotation ignored: --tls-cert-file is given", cert=cert_path)
            return
        if self._ctx is not None:
            try:
                self._ctx.load_cert_chain(cert_path, key_path)
            except (OSError, ssl.SSLError) as exc:
                log.error("Cannot load the new serving certificate; keeping the old one", cert=cert_path, err=exc)
                return
        self._issued = (cert_path, key_path)
        self.serving_cert_expiry = _not_after(cert_path)
        log.info("Serving certificate loaded", cert=cert_path, live=self._ctx is not None)

    def _socket(self) -> socket.socket:
        """A listening socket. 0.0.0.0 and :: mean every interface of both
        families (one dual-stack socket), as the option's help promises."""
        where = f"{self.address or '0.0.0.0'}:{self._port} (--address, --port)"
        if self.address in _WILDCARDS:
            candidates = [(socket.AF_INET6, ("::", self._port)), (socket.AF_INET, ("0.0.0.0", self._port))]
        else:
            try:
                infos = socket.getaddrinfo(self.address, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
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
        r = app.router
        r.add_get("/pods", self._handle_pods)
        r.add_get("/manifestProblems", self._handle_problems)
        r.add_get("/healthz", self._handle_healthz)
        if self._stats is not None:
            r.add_get("/stats/summary", self._handle_summary)
        if self._metrics is not None:
            r.add_get("/metrics", self._handle_metrics)
        if self._stats is not None:
            r.add_get("/metrics/resource", self._handle_resource_metrics)
        if not self.debugging:
            for prefix in _DEBUG_PATHS:
                r.add_route("*", prefix, self._handle_debug_disabled)
                r.add_route("*", prefix + "/{rest:.*}", self._handle_debug_disabled)
            return app
        r.add_get("/containerLogs/{namespace}/{pod}/{container}", self._handle_logs)
        if self._set_verbosity is not None:
            r.add_route("*", "/debug/flags/v", self._handle_debug_flags_v)
        if self.system_logs:
            r.add_get("/logs", self._handle_logs_root)
            r.add_get("/logs/{path:.*}", self._handle_node_logs)
        if self._running_pods is not None:
            r.add_get("/runningpods/", self._handle_running_pods)
            r.add_get("/runningpods", self._handle_running_pods)
        if self._configz is not None:
            r.add_get("/configz", self._handle_configz)
        if self._streaming is not None:
            r.add_post("/run/{namespace}/{pod}/{container}", self._handle_run)
            r.add_post("/run/{namespace}/{pod}/{uid}/{container}", self._handle_run)
            for kind in ("exec", "attach"):
                for path in (
                    f"/{kind}/{{namespace}}/{{pod}}/{{container}}",
                    f"/{kind}/{{namespace}}/{{pod}}/{{uid}}/{{container}}",
                ):
                    r.add_get(path, self._handle_stream)
                    r.add_post(path, self._handle_stream)
            for path in ("/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"):
                r.add_get(path, self._handle_stream)
                r.add_post(path, self._handle_stream)
        return app

    async def serve(self, started: asyncio.Future | None = None) -> None:
        """Listen until cancelled. ``started`` gets the bound port once
        listening, or the ListenError that prevented it (also raised here)."""
        self._closing = False
        try:
            ctx = None if self.plain_http else self._ssl_context()
            sock = self._socket()
            self._ctx = ctx
        except ListenError as exc:
            log.error("Failed to start the agent server", err=exc)
            if started is not None and not started.done():
                started.set_exception(exc)
            raise
        # handler_cancellation: a follow whose client went away stops at once.
        runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        try:
            await runner.setup()
            site = web.SockSite(runner, sock, ssl_context=ctx)
            await site.start()
            self._port = sock.getsockname()[1]
            log.info("Agent server listening", address=self.address, port=self._port, tls=ctx is not None)
            if started is not None and not started.done():
                started.set_result(self._port)
            await asyncio.Event().wait()
        finally:
            # A follow never ends by itself while its container runs: make every
            # stream drain and finish, so shutdown does not wait out its timeout.
            self._closing = True
            self._ctx = None
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
        attrs = request_attributes(user, request.method, request.path, self.node_name)
        try:
            decision = await _maybe_await(self._authorize(attrs))
        except AuthorizationError as exc:
            log.error(
                "Authorization error",
                err=exc,
                user=user.name,
                verb=attrs.verb,
                resource=attrs.resource,
                subresource=attrs.subresource,
            )
            return _text(500, f"Authorization error ({attrs.describe()})")
        allowed, reason = decision if isinstance(decision, tuple) else (bool(decision), "")
        if not allowed:
            log.v(2).info(
                "Forbidden",
                url=str(request.rel_url),
                user=user.name,
                verb=attrs.verb,
                subresource=attrs.subresource,
                reason=reason,
            )
            return _text(403, f"Forbidden ({attrs.describe()})")
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed as exc:
            return _text(405, "405: Method Not Allowed", Allow=",".join(sorted(exc.allowed_methods)))
        except web.HTTPNotFound:
            return _text(404, "404 page not found")

    async def _handle_pods(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(self._pods())}
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

    def _explain_missing(self, namespace: str, pod_name: str, container: str, previous: bool) -> web.Response:
        """Why there is no log to serve, in upstream's words: an unknown pod or
        container is 404, a known container without that log is 400."""
        pod = next((p for p in self._pods() if podutil.namespace(p) == namespace and podutil.name(p) == pod_name), None)
        if pod is None:
            return _text(404, f'pod "{pod_name}" does not exist in namespace "{namespace}"')
        spec = podutil.spec(pod)
        declared = {
            c.get("name")
            for key in ("containers", "initContainers", "ephemeralContainers")
            for c in spec.get(key) or []
        }
        if container not in declared:
            return _text(404, f'container "{container}" not found in pod "{pod_name}"')
        if previous:
            return _text(400, f'previous terminated container "{container}" in pod "{pod_name}" not found')
        status = pod.get("status") or {}
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for cs in status.get(key) or []:
                waiting = (cs.get("state") or {}).get("waiting")
                if cs.get("name") == container and waiting is not None:
                    return _text(
                        400,
                        f'container "{container}" in pod "{pod_name}" is waiting to '
                        f"start: {waiting.get('reason') or 'unknown reason'}",
                    )
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
            await read_log(target.path, opts, response.write, is_running=is_running, poll_interval=self._poll)
        except (ConnectionError, OSError) as exc:
            log.v(2).info("Container log stream ended early", path=target.path, err=exc)
            return response
        await response.write_eof()
        return response

    # --- node data ------------------------------------------------------------------

    async def _handle_summary(self, request: web.Request) -> web.Response:
        assert self._stats is not None
        only = request.query.get("only_cpu_and_memory") == "true"
        try:
            summary = await self._stats(only)
        except Exception as exc:  # noqa: BLE001 - a stats failure is the request's 500, not the server's
            log.error("Failed to get the stats summary", err=repr(exc))
            return _text(500, f"Internal Error: failed to get node info: {exc}")
        return web.Response(body=orjson.dumps(summary), content_type=_JSON)

    async def _handle_metrics(self, request: web.Request) -> web.Response:
        assert self._metrics is not None
        return web.Response(body=self._metrics().encode(), headers={"Content-Type": _METRICS_TYPE})

    async def _handle_resource_metrics(self, request: web.Request) -> web.Response:
        assert self._stats is not None
        try:
            summary = await self._stats(True)
        except Exception as exc:  # noqa: BLE001 - a stats failure is logged and served as empty metrics
            log.error("Failed to get the stats for resource metrics", err=repr(exc))
            summary = None
        return web.Response(body=resource_metrics(summary).encode(), headers={"Content-Type": _METRICS_TYPE})

    async def _handle_debug_disabled(self, request: web.Request) -> web.Response:
        return _text(405, DEBUG_DISABLED)

    async def _handle_running_pods(self, request: web.Request) -> web.Response:
        assert self._running_pods is not None
        try:
            items = await self._running_pods()
        except Exception as exc:  # noqa: BLE001 - answered as a 500 naming the error
            log.error("Failed to list the running pods", err=repr(exc))
            return _text(500, f"Internal Error: {exc}")
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _handle_debug_flags_v(self, request: web.Request) -> web.Response:
        """PUT a verbosity level as the body, as upstream's flag handler takes it."""
        assert self._set_verbosity is not None
        if request.method != "PUT":
            return _text(405, "unsupported http method")
        text = (await request.text()).strip()
        try:
            level = int(text)
            if level < 0:
                raise ValueError
        except ValueError:
            return _text(400, f"error: invalid verbosity {text!r}: must be a non-negative integer")
        self._set_verbosity(level)
        log.info("Verbosity changed through /debug/flags/v", v=level)
        return _text(200, f"successfully set orch-agent verbosity to {level}")

    async def _handle_configz(self, request: web.Request) -> web.Response:
        assert self._configz is not None
        return web.Response(body=orjson.dumps(self._configz()), content_type=_JSON)

    # --- node log files (/logs/) --------------------------------------------------------

    async def _handle_logs_root(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPMovedPermanently("/logs/")

    async def _handle_node_logs(self, request: web.Request) -> web.StreamResponse:
        """A file under the log directory, or a directory listing. Nothing outside the
        directory is served, through ``..`` or through a symbolic link."""
        rel = request.match_info.get("path", "")
        root = os.path.realpath(self.log_dir)
        target = os.path.realpath(os.path.join(root, rel.lstrip("/")))
        if target != root and not target.startswith(root + os.sep):
            return _text(404, "404 page not found")
        if os.path.isdir(target):
            if not request.path.endswith("/"):
                raise web.HTTPMovedPermanently(os.path.basename(request.path) + "/")
            try:
                entries = sorted(os.scandir(target), key=lambda e: e.name)
            except OSError as exc:
                return _text(500, f"Error reading directory: {exc.strerror or exc}")
            lines = ["<pre>"]
            for e in entries:
                name = e.name + ("/" if e.is_dir() else "")
                lines.append(f'<a href="{html.escape(urllib.parse.quote(name))}">{html.escape(name)}</a>')
            lines.append("</pre>")
            return web.Response(text="\n".join(lines) + "\n", content_type="text/html", charset="utf-8")
        if not os.path.isfile(target):
            return _text(404, "404 page not found")
        if not os.access(target, os.R_OK):
            return _text(403, "403 Forbidden")
        ctype, encoding = mimetypes.guess_type(target)
        headers = {
            "Content-Type": ctype if ctype and not encoding else _TEXT if not encoding else "application/octet-stream"
        }
        return web.FileResponse(target, headers=headers)

    # --- commands and streams in containers ---------------------------------------------

    async def _handle_run(self, request: web.Request) -> web.Response:
        """``POST /run/<ns>/<pod>[/<uid>]/<container>?cmd=...``: upstream splits ``cmd``
        on spaces and answers the command's stdout then stderr."""
        assert self._streaming is not None
        m = request.match_info
        cmd = request.query.get("cmd", "")
        if not cmd and request.can_read_body:
            form = await request.post()
            cmd = str(form.get("cmd", ""))
        try:
            output = await self._streaming.run(
                m["namespace"], m["pod"], m.get("uid", ""), m["container"], cmd.split(" ")
            )
        except StreamingError as exc:
            return _text(exc.status, str(exc))
        return web.Response(body=output, content_type=_JSON)

    async def _handle_stream(self, request: web.Request) -> web.StreamResponse:
        """``/exec``, ``/attach``, ``/portForward``: ask the runtime for a streaming URL.
        A WebSocket request to ``/exec`` or ``/attach`` (what the API server sends) is
        relayed there (:mod:`agent.server.streaming`), since the runtime's streaming server
        listens on the node's loopback; any other request is redirected to it, for
        clients on the node that speak the runtime's protocols themselves."""
        assert self._streaming is not None
        m = request.match_info
        kind = request.path.split("/", 2)[1]
        q = request.query
        try:
            if kind == "portForward":
                ports = []
                for p in q.getall("port", []):
                    try:
                        ports.append(int(p))
                    except ValueError:
                        return _text(400, f'invalid port "{p}"')
                url = await self._streaming.port_forward(m["namespace"], m["pod"], m.get("uid", ""), ports)
                if _streaming().is_websocket_request(request):
                    return await _streaming().serve_port_forward_tunnel(request, url)
            else:
                tty = q.get("tty") == "1"
                stdin, stdout = q.get("input") == "1", q.get("output") == "1"
                stderr = q.get("error") == "1" and not tty
                if not (stdin or stdout or stderr):
                    return _text(400, "you must specify at least 1 of stdin, stdout, stderr")
                if kind == "exec":
                    command = q.getall("command", [])
                    if not command:
                        return _text(400, "you must specify a command")
                    url = await self._streaming.exec(
                        m["namespace"],
                        m["pod"],
                        m.get("uid", ""),
                        m["container"],
                        command,
                        tty=tty,
                        stdin=stdin,
                        stdout=stdout,
                        stderr=stderr,
                    )
                else:
                    url = await self._streaming.attach(
                        m["namespace"],
                        m["pod"],
                        m.get("uid", ""),
                        m["container"],
                        tty=tty,
                        stdin=stdin,
                        stdout=stdout,
                        stderr=stderr,
                    )
                if _streaming().is_websocket_request(request):
                    return await _streaming().serve_websocket(
                        request, url, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty
                    )
        except StreamingError as exc:
            return _text(exc.status, str(exc))
        return web.Response(status=302, headers={"Location": url})


_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _not_after(cert_path: str) -> float | None:
    try:
        return read_certificate(cert_path).not_after
    except (OSError, ValueError):
        return None


class RuntimeStreaming:
    """``/run``, ``/exec``, ``/attach``, ``/portForward`` through the CRI: the pod is
    found by namespace and name (and uid when the path names one), the container
    by name among its running ones."""

    def __init__(self, cri: Any, find: Callable[[str, str], Any]) -> None:
        self.cri = cri
        self._find = find  # (namespace, name) -> pipeline PodState (pod, rp) or None

    def _pod(self, namespace: str, name: str, uid: str):
        state = self._find(namespace, name)
        if state is None or (uid and podutil.uid(state.pod) != uid):
            raise StreamingError(404, "pod does not exist")
        return state

    def _container_id(self, namespace: str, name: str, uid: str, container: str) -> str:
        state = self._pod(namespace, name, uid)
        rp = state.rp
        info = rp.latest(container) if rp is not None else None
        if info is None:
            raise StreamingError(404, f'container not found ("{container}")')
        if not info.running:
            raise StreamingError(400, f'container "{container}" in pod "{name}" is not running')
        return info.id

    async def _call(self, coro) -> Any:
        try:
            return await coro
        except NotFoundError as exc:
            raise StreamingError(404, str(exc)) from None
        except CriError as exc:
            raise StreamingError(500, f"Internal Error: {exc}") from None

    async def run(self, namespace: str, name: str, uid: str, container: str, cmd: list[str]) -> bytes:
        cid = self._container_id(namespace, name, uid, container)
        resp = await self._call(self.cri.exec_sync(cid, cmd))
        if resp.exit_code != 0:
            raise StreamingError(
                500, f"command '{' '.join(cmd)}' exited with {resp.exit_code}: {resp.stderr.decode(errors='replace')}"
            )
        return bytes(resp.stdout) + bytes(resp.stderr)

    async def exec(
        self,
        namespace: str,
        name: str,
        uid: str,
        container: str,
        cmd: list[str],
        *,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> str:
        cid = self._container_id(namespace, name, uid, container)
        return await self._call(self.cri.exec(cid, cmd, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr))

    async def attach(
        self, namespace: str, name: str, uid: str, container: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str:
        cid = self._container_id(namespace, name, uid, container)
        return await self._call(self.cri.attach(cid, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr))

    async def port_forward(self, namespace: str, name: str, uid: str, ports: list[int]) -> str:
        state = self._pod(namespace, name, uid)
        sandbox = state.rp.ready_sandbox if state.rp is not None else None
        if sandbox is None:
            raise StreamingError(400, f'pod "{name}" has no running sandbox')
        return await self._call(self.cri.port_forward(sandbox.id, ports))


# --- /configz ------------------------------------------------------------------------


def _config_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, _dt.timedelta):
        return format_duration(value)
    if hasattr(value, "explicit") and hasattr(value, "enabled"):  # feature gates
        return {k: bool(v) for k, v in sorted(dict(value.explicit).items())}
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _config_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_config_value(v) for v in value]
    if dataclasses.is_dataclass(value):
        if type(value).__name__ == "Taint":
            out = {"key": value.key, "effect": value.effect}
            if value.value:
                out["value"] = value.value
            return out
        if type(value).__name__ == "ShutdownGracePeriodByPodPriority":
            return {"priority": value.priority, "shutdownGracePeriodSeconds": value.shutdown_grace_period_seconds}
        if type(value).__name__ == "MemoryReservation":
            return {"numaNode": value.numa_node, "limits": {k: str(v) for k, v in value.limits.items()}}
        return {f.name: _config_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return str(value)


def configz_document(cfg: Any) -> dict:
    """The effective configuration as upstream's ``/configz`` shows it: the
    ``AgentConfiguration`` fields (flags included) under one key."""
    doc: dict[str, Any] = {}
    for path, opt in sorted(BY_FIELD.items()):
        node = doc
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = _config_value(getattr(cfg, opt.attr, None))
    doc["kind"] = names.AGENT_CONFIG_KIND
    doc["apiVersion"] = names.AGENT_CONFIG_API_VERSION
    return {names.AGENT_CONFIGZ_KEY: doc}


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
    """Whether the files are a matching pair, valid now and naming every host we need."""
    try:
        info = read_certificate(cert_path)
    except (OSError, ValueError):
        return False
    if not info.valid_at(margin=_RENEW_MARGIN) or not (dns <= info.dns and ips <= info.ips):
        return False
    return pair_matches(cert_path, key_path)


def ensure_serving_cert(cert_dir: str, node_name: str, addresses: Sequence[str]) -> tuple[str, str]:
    """The agent's self-signed serving certificate and key in ``cert_dir``
    (``orch-agent.crt`` / ``orch-agent.key``), made when missing, unreadable,
    expiring or not naming the node, ``localhost``, ``127.0.0.1`` and
    ``addresses``; reused otherwise.

    As upstream, a one-off CA signs the serving certificate and the ``.crt``
    file holds both, so a client can trust the file itself. The pair is made by
    a helper process (:mod:`agent.server.selfsigned`), so that the agent itself
    does not load the cryptography library for it.
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
    argv = [sys.executable, "-m", _SELFSIGNED_MODULE, cert_path, key_path, node_name, *sorted(dns), *sorted(ips)]
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_SELFSIGNED_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise OSError(f"making the certificate took longer than {_SELFSIGNED_TIMEOUT:g} s") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(detail[-1] if detail else f"the certificate helper exited with {done.returncode}")
    log.info("Created a self-signed serving certificate", cert=cert_path, key=key_path, names=sorted(dns) + sorted(ips))
    return cert_path, key_path

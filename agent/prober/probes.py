"""One probe, run once: exec, httpGet, tcpSocket or grpc, as upstream's prober does it.

:func:`run_probe` answers ``(Result, message)``:

* ``SUCCESS`` - the check passed; the message is the command output, the
  response body (first 10 KiB), or a warning (an HTTP redirect to another
  host is not followed and counts as success, the message then starts with
  :data:`REDIRECT_WARNING`).
* ``FAILURE`` - the check ran and failed (non-zero exit, status outside
  200-399, refused connection, timeout, gRPC status other than SERVING).
* ``UNKNOWN`` - the probe could not be run at all (the runtime failed the
  exec call, a named port is unknown, no handler): upstream calls this
  "errored" and throws the result away instead of counting it.

Messages follow upstream's wording, since users grep events for them.

The HTTP request logic (URL, headers, redirect policy, body limit, error text)
is shared with the lifecycle hooks in :mod:`agent.prober.hooks`.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import enum
import json
import math
import os
import ssl
from collections.abc import Iterable

import aiohttp
import grpc
import grpc.aio
import multidict
import yarl

from agent import logging as agent_logging
from agent import pods as podutil
from apiserver_min.api import names
from apiserver_min.api.duration import format_duration
from cri.client import CriClient, CriError, DeadlineExceededError

__all__ = [
    "Result",
    "run_probe",
    "new_http_session",
    "resolve_port",
    "format_pod",
    "probe_user_agent",
    "MAX_BODY_BYTES",
    "REDIRECT_WARNING",
    "HttpOutcome",
    "HttpRequestError",
    "build_url",
    "build_headers",
    "http_target",
    "http_get",
    "is_ssl_to_plain_http",
    "http_error_message",
    "encode_health_check_request",
    "decode_health_check_response",
    "SERVING_STATUS_NAMES",
]

log = agent_logging.get_logger("prober")

# Upstream reads at most 10 KiB of a probe's output or response body.
MAX_BODY_BYTES = 10 * 1024
# Upstream's CheckRedirect stops after this many redirects.
MAX_REDIRECTS = 10
REDIRECT_WARNING = "Probe terminated redirects"
# The user agent of probe requests (upstream's, renamed by the naming rule).
PROBE_USER_AGENT_NAME = names.PROBE_USER_AGENT_NAME
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})

HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"
SERVING = 1
SERVING_STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


class Result(enum.Enum):
    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


def probe_user_agent(version: str = "1.27", name: str = PROBE_USER_AGENT_NAME) -> str:
    """``orch-probe/<major.minor>``: upstream sends only major and minor."""
    parts = version.lstrip("v").split(".")
    return f"{name}/{'.'.join(parts[:2])}"


def format_pod(pod: dict) -> str:
    """``name_namespace(uid)``, how upstream names a pod in messages."""
    return f"{podutil.full_name(pod)}({podutil.uid(pod)})"


def new_http_session() -> aiohttp.ClientSession:
    """The session probes share: no keep-alive (upstream disables it for probes,
    so a probe always measures a fresh connection), no certificate
    verification, no proxies from the environment, no cookies, no
    Accept-Encoding (upstream sets DisableCompression). Create it on the loop
    that uses it; close it when done."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0, ssl=False)
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None),
    )


# -- ports ---------------------------------------------------------------------------


def resolve_port(port: object, container: dict) -> int:
    """A probe/hook port: a number, or the name of one of the container's ports
    (falling back to a number written as a string, as upstream does).
    ValueError with upstream's wording otherwise."""
    if isinstance(port, bool) or port is None:
        raise ValueError(f"intOrString had no kind: {port!r}")
    if isinstance(port, int):
        value = port
    elif isinstance(port, str):
        for entry in container.get("ports") or []:
            if entry.get("name") == port:
                value = int(entry.get("containerPort") or 0)
                break
        else:
            try:
                value = int(port)
            except ValueError:
                raise ValueError(f"port {port} not found") from None
    else:
        raise ValueError(f"intOrString had no kind: {port!r}")
    if 0 < value < 65536:
        return value
    raise ValueError(f"invalid port number: {value}")


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- HTTP -----------------------------------------------------------------------------


class HttpOutcome:
    """What an HTTP GET produced: the final status and (limited) body, and
    whether a redirect to another host was left unfollowed."""

    __slots__ = ("status", "body", "redirect_stopped", "url")

    def __init__(self, status: int, body: bytes, redirect_stopped: bool, url: yarl.URL):
        self.status = status
        self.body = body
        self.redirect_stopped = redirect_stopped
        self.url = url


class HttpRequestError(Exception):
    """The request did not produce a response; str() is upstream-style text."""


def build_url(scheme: str, host: str, port: int, path: str) -> yarl.URL:
    """``scheme://host:port/path`` - path may carry a query, as upstream allows."""
    scheme = (scheme or "HTTP").lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"unsupported scheme {scheme!r}: must be HTTP or HTTPS")
    path = path or "/"
    if not path.startswith("/"):
        path = "/" + path
    return yarl.URL(f"{scheme}://{_host_port(host, port)}{path}")


def build_headers(http_headers: Iterable[dict] | None, user_agent: str) -> tuple[multidict.CIMultiDict, set[str]]:
    """Headers for a probe/hook request, and the automatic headers to leave out.

    httpHeaders come first; User-Agent and Accept (``*/*``) are added unless
    given; an Accept given empty is dropped (upstream's rule); a Host header
    replaces the URL's host in the request line's Host."""
    headers: multidict.CIMultiDict = multidict.CIMultiDict()
    for entry in http_headers or ():
        name = str(entry.get("name") or "")
        if name:
            headers.add(name, str(entry.get("value") or ""))
    skip = {"Accept-Encoding"}
    if "User-Agent" not in headers:
        headers["User-Agent"] = user_agent
    if "Accept" not in headers:
        headers["Accept"] = "*/*"
    elif not any(headers.getall("Accept")):
        del headers["Accept"]
        skip.add("Accept")
    return headers, skip


def _os_error_text(err: OSError) -> str:
    if err.errno:
        return os.strerror(err.errno).lower()
    return str(err) or type(err).__name__


def http_error_message(url: yarl.URL, exc: BaseException, *, headers_received: bool = False) -> str:
    """Upstream-style text for a request that failed: ``Get "URL": reason``."""
    if isinstance(exc, HttpRequestError):
        return str(exc)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        if headers_received:
            reason = "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
        else:
            reason = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    elif isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(exc, aiohttp.ClientSSLError):
        reason = f"dial tcp {_host_port(exc.host, exc.port)}: connect: {_os_error_text(exc.os_error)}"
    elif isinstance(exc, aiohttp.ServerDisconnectedError):
        reason = "EOF"
    else:
        reason = str(exc) or type(exc).__name__
    return f'Get "{url}": {reason}'


async def _read_limited(response: aiohttp.ClientResponse, limit: int = MAX_BODY_BYTES) -> bytes:
    body = bytearray()
    while len(body) < limit:
        chunk = await response.content.read(limit - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


async def http_get(
    session: aiohttp.ClientSession, url: yarl.URL, headers: multidict.CIMultiDict, skip_auto_headers: set[str]
) -> HttpOutcome:
    """GET url following redirects only to the same host (upstream's
    RedirectChecker without non-local redirects): a redirect elsewhere returns
    the redirect response itself. Raises HttpRequestError after 10 redirects,
    aiohttp/OS errors on transport failures. The caller bounds the time."""
    first_host = url.host
    current = url
    request_headers = multidict.CIMultiDict(headers)
    for hop in range(MAX_REDIRECTS + 1):
        async with session.get(
            current, headers=request_headers, allow_redirects=False, skip_auto_headers=skip_auto_headers
        ) as response:
            location = response.headers.get("Location")
            if response.status in _REDIRECT_CODES and location:
                target = current.join(yarl.URL(location))
                if target.host != first_host:
                    return HttpOutcome(response.status, await _read_limited(response), True, current)
                if hop >= MAX_REDIRECTS:
                    raise HttpRequestError(f'Get "{target}": stopped after {MAX_REDIRECTS} redirects')
                if yarl.URL(location).is_absolute() and "Host" in request_headers:
                    # Upstream keeps a custom Host only through relative redirects.
                    request_headers = multidict.CIMultiDict(request_headers)
                    del request_headers["Host"]
                current = target
                continue
            return HttpOutcome(response.status, await _read_limited(response), False, current)
    raise AssertionError("unreachable")  # the loop returns or raises


def http_target(action: dict, container: dict, pod_ip: str) -> yarl.URL:
    """The URL of an httpGet action: host (or the pod IP), a resolved port,
    path and scheme. ValueError naming the problem otherwise."""
    host = action.get("host") or pod_ip
    if not host:
        raise ValueError("no host given and the pod has no IP")
    port = resolve_port(action.get("port"), container)
    return build_url(action.get("scheme") or "HTTP", host, port, action.get("path") or "/")


def _text(data: bytes) -> str:
    return data[:MAX_BODY_BYTES].decode("utf-8", errors="replace")


async def _probe_http(
    session: aiohttp.ClientSession | None, action: dict, container: dict, pod_ip: str, timeout: float, user_agent: str
) -> tuple[Result, str]:
    try:
        url = http_target(action, container, pod_ip)
    except ValueError as exc:
        return Result.UNKNOWN, str(exc)
    headers, skip = build_headers(action.get("httpHeaders"), user_agent)
    own = session is None
    if own:
        session = new_http_session()
    try:
        async with asyncio.timeout(timeout):
            outcome = await http_get(session, url, headers, skip)
    except (aiohttp.ClientError, OSError, TimeoutError, HttpRequestError, ValueError) as exc:
        # ValueError: a header aiohttp refuses to send (a newline in a value);
        # upstream's client fails such a request too.
        return Result.FAILURE, http_error_message(url, exc)
    finally:
        if own:
            await session.close()
    body = _text(outcome.body)
    if 200 <= outcome.status < 400:
        if outcome.status >= 300:
            log.v(4).info("Probe terminated redirects", url=str(outcome.url), status=outcome.status)
            return Result.SUCCESS, f"{REDIRECT_WARNING}, Response body: {body}"
        return Result.SUCCESS, body
    # Upstream keeps the body out of the failure message (it may hold secrets).
    return Result.FAILURE, f"HTTP probe failed with statuscode: {outcome.status}"


# -- TCP ------------------------------------------------------------------------------


async def _probe_tcp(action: dict, container: dict, pod_ip: str, timeout: float) -> tuple[Result, str]:
    host = action.get("host") or pod_ip
    try:
        port = resolve_port(action.get("port"), container)
    except ValueError as exc:
        return Result.UNKNOWN, str(exc)
    if not host:
        return Result.UNKNOWN, "no host given and the pod has no IP"
    where = f"dial tcp {_host_port(host, port)}"
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return Result.FAILURE, f"{where}: i/o timeout"
    except OSError as exc:
        return Result.FAILURE, f"{where}: connect: {_os_error_text(exc)}"
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass  # the peer may reset at once; the connection was made, which is all we test
    return Result.SUCCESS, ""


# -- gRPC health ----------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def encode_health_check_request(service: str) -> bytes:
    """HealthCheckRequest{string service = 1} on the wire (proto3: an empty
    string is not written)."""
    data = service.encode("utf-8")
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_health_check_response(data: bytes) -> int:
    """HealthCheckResponse{ServingStatus status = 1}: the status number
    (0 = UNKNOWN when absent). Unknown fields are skipped; ValueError on
    malformed input."""
    status = 0
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if field == 1:
                value &= 0xFFFFFFFF  # int32 enum, negative values sign-extended
                status = value - (1 << 32) if value >= 1 << 31 else value
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
    return status


def _go_code_name(code: grpc.StatusCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_"))


async def _probe_grpc(action: dict, pod_ip: str, timeout: float, user_agent: str) -> tuple[Result, str]:
    if not pod_ip:
        return Result.UNKNOWN, "the pod has no IP"
    try:
        port = resolve_port(action.get("port"), {})
    except ValueError as exc:
        return Result.UNKNOWN, str(exc)
    service = action.get("service") or ""
    addr = _host_port(pod_ip, port)
    shown_timeout = format_duration(_dt.timedelta(seconds=timeout))
    options = [("grpc.primary_user_agent", user_agent), ("grpc.enable_http_proxy", 0), ("grpc.enable_retries", 0)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with grpc.aio.insecure_channel(addr, options=options) as channel:
        try:
            async with asyncio.timeout(timeout):
                await channel.channel_ready()
        except TimeoutError:
            return Result.FAILURE, (
                f'timeout: failed to connect service "{addr}" within {shown_timeout}: context deadline exceeded'
            )
        check = channel.unary_unary(
            HEALTH_CHECK_METHOD,
            request_serializer=encode_health_check_request,
            response_deserializer=decode_health_check_response,
        )
        try:
            status = await check(service, timeout=max(0.001, deadline - loop.time()))
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return Result.FAILURE, (
                    "error: this server does not implement the grpc health "
                    f"protocol (grpc.health.v1.Health): {exc.details()}"
                )
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Result.FAILURE, f"timeout: health rpc did not complete within {shown_timeout}"
            return Result.FAILURE, (
                f"error: health rpc probe failed: rpc error: code = {_go_code_name(code)} desc = {exc.details()}"
            )
    if status != SERVING:
        name = SERVING_STATUS_NAMES.get(status, str(status))
        return Result.FAILURE, f'service unhealthy (responded with "{name}")'
    return Result.SUCCESS, "service healthy"


# -- exec -----------------------------------------------------------------------------


async def _probe_exec(cri: CriClient, action: dict, container_id: str, timeout: float) -> tuple[Result, str]:
    command = [str(part) for part in action.get("command") or []]
    if not command:
        return Result.UNKNOWN, "exec probe has no command"
    # The runtime enforces whole seconds; a sub-second timeout (time-scaled
    # tests) is enforced by the call's deadline instead. Whole seconds keep
    # the client's default deadline (request timeout + exec timeout), as upstream.
    exec_timeout = max(1, math.ceil(timeout))
    deadline = None if float(timeout).is_integer() else timeout
    try:
        response = await cri.exec_sync(container_id, command, exec_timeout, timeout=deadline)
    except DeadlineExceededError:
        return Result.FAILURE, f"command {json.dumps(' '.join(command))} timed out"
    except CriError as exc:
        return Result.UNKNOWN, str(exc)
    output = _text(bytes(response.stdout) + bytes(response.stderr))
    if response.exit_code == 0:
        return Result.SUCCESS, output
    return Result.FAILURE, output


# -- entry point ------------------------------------------------------------------------


async def run_probe(
    cri: CriClient,
    probe: dict,
    pod: dict,
    container: dict,
    container_id: str,
    pod_ip: str,
    *,
    user_agent: str,
    timeout: float | None = None,
    session: aiohttp.ClientSession | None = None,
) -> tuple[Result, str]:
    """Run `probe` (a Probe object in the API's JSON shape) once against the container.

    timeout: seconds; defaults to the probe's timeoutSeconds (1). session: the
    HTTP session to use (the probe manager shares one); a private one is made
    and closed for this call when omitted."""
    if timeout is None:
        timeout = float(probe.get("timeoutSeconds") or 1)
    if probe.get("exec") is not None:
        return await _probe_exec(cri, probe["exec"], container_id, timeout)
    if probe.get("httpGet") is not None:
        return await _probe_http(session, probe["httpGet"], container, pod_ip, timeout, user_agent)
    if probe.get("tcpSocket") is not None:
        return await _probe_tcp(probe["tcpSocket"], container, pod_ip, timeout)
    if probe.get("grpc") is not None:
        return await _probe_grpc(probe["grpc"], pod_ip, timeout, user_agent)
    return Result.UNKNOWN, f"missing probe handler for {format_pod(pod)}:{container.get('name')}"


def is_ssl_to_plain_http(exc: BaseException) -> bool:
    """True when an HTTPS request reached a server speaking plain HTTP (the
    TLS layer read an HTTP response as a record): upstream retries lifecycle
    hooks over HTTP then."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            reason = (getattr(current, "reason", "") or "").upper()
            if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"):
                return True
        inner = getattr(current, "os_error", None)
        if isinstance(inner, BaseException) and id(inner) not in seen:
            current = inner
            continue
        current = current.__cause__ or current.__context__
    return False

"""Calling a webhook: HTTPS POST of a JSON body, with the webhook's CA bundle (or the
system roots), the credentials the server presents to that host, the service's
endpoint resolved from the cache, and a timeout; one connection pool per webhook.

Failures raise :class:`CallError` whose text follows upstream's client (``Post
"https://host/path?timeout=10s": <cause>``), which the dispatcher wraps into
``failed calling webhook "<name>": failed to call webhook: ...``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import tempfile
import urllib.parse
from typing import Any

import aiohttp
import orjson

from ...api import names
from .credentials import ClientCredentials, CredentialResolver
from .source import ClusterLookup, ResolveError

MAX_RESPONSE_BYTES = 3 * 1024 * 1024
USER_AGENT = f"{names.APISERVER_NAME}/webhook"


class CallError(Exception):
    """The call did not produce an answer (connection, TLS, timeout, HTTP status, body)."""


def ssl_context(ca_pem: bytes, creds: ClientCredentials) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca_pem.decode("latin-1")) if ca_pem else ssl.create_default_context()
    if creds.cert_pem and creds.key_pem:
        # The ssl module loads a client certificate from files only: a private file,
        # removed at once.
        fd, path = tempfile.mkstemp(prefix="orch-webhook-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(creds.cert_pem.rstrip(b"\n") + b"\n" + creds.key_pem)
            ctx.load_cert_chain(path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return ctx


def _go_duration(seconds: float) -> str:
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"


def describe_exception(exc: BaseException, address: str) -> str:
    """The cause in the words of upstream's Go client where there is a counterpart."""
    if isinstance(exc, asyncio.TimeoutError):
        return "context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        if isinstance(cert_error, ssl.SSLCertVerificationError):
            return f"tls: failed to verify certificate: x509: {cert_error.verify_message}"
        return f"tls: {cert_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return f"dial tcp {address}: connect: connection refused"
        return f"dial tcp {address}: {os_error.strerror or os_error}"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, asyncio.IncompleteReadError)):
        return "EOF"
    return str(exc) or type(exc).__name__


class WebhookClients:
    """Connection pools by webhook (its ``client_key``), created on first use."""

    def __init__(self, lookup: ClusterLookup, credentials: CredentialResolver):
        self.lookup = lookup
        self.credentials = credentials
        self._sessions: dict[str, tuple[aiohttp.ClientSession, dict[str, str]]] = {}

    def _session(self, key: str, client_config: dict, server_name: str) -> tuple[aiohttp.ClientSession, dict]:
        found = self._sessions.get(key)
        if found is not None and not found[0].closed:
            return found
        ca = client_config.get("caBundle") or ""
        ca_pem = base64.b64decode(ca) if isinstance(ca, str) and ca else b""
        creds = self.credentials.resolve(server_name)
        connector = aiohttp.TCPConnector(ssl=ssl_context(ca_pem, creds), limit=100, keepalive_timeout=30)
        # No cookies, no tracing: a webhook call is one POST on a kept-alive connection.
        session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("User-Agent",)
        )
        self._sessions[key] = (session, creds.headers())
        return self._sessions[key]

    def forget_except(self, keep: set[str]) -> None:
        """Close the pools of webhooks that are gone (a configuration changed)."""
        for key in list(self._sessions):
            if key not in keep:
                session, _ = self._sessions.pop(key)
                with contextlib.suppress(RuntimeError):
                    asyncio.get_running_loop().create_task(session.close(), name="webhook-session-close")

    async def close(self) -> None:
        for session, _ in self._sessions.values():
            await session.close()
        self._sessions.clear()

    async def post(self, key: str, client_config: dict, body: bytes, timeout: float) -> Any:
        """POST BODY and return the decoded JSON answer; CallError naming the URL."""
        query = f"?timeout={_go_duration(timeout)}"
        service = client_config.get("service")
        server_hostname: str | None = None
        if isinstance(service, dict):
            ns, name = str(service.get("namespace") or ""), str(service.get("name") or "")
            given = service.get("port")
            port = given if isinstance(given, int) else 443
            path = service.get("path") or "/"
            host = f"{name}.{ns}.svc"
            shown = f"https://{host}:{port}{path}{query}"
            server_name = host if port == 443 else f"{host}:{port}"
            try:
                address, target_port = self.lookup.resolve_service(ns, name, port)
            except ResolveError as exc:
                raise CallError(f'Post "{shown}": {exc}') from None
            url = f"https://{_host(address)}:{target_port}{path}{query}"
            server_hostname = host
            dialed = f"{_host(address)}:{target_port}"
            headers_host = f"{host}:{port}"
        else:
            raw = str(client_config.get("url") or "")
            parsed = urllib.parse.urlsplit(raw)
            url = shown = raw + query
            server_name = parsed.netloc
            dialed = parsed.netloc if parsed.port else f"{parsed.hostname}:443"
            headers_host = ""
        session, auth = self._session(key, client_config, server_name)
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            **auth,
        }
        if headers_host:
            headers["Host"] = headers_host
        try:
            async with session.post(
                url,
                data=body,
                headers=headers,
                server_hostname=server_hostname,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                status = resp.status
                data = await _read_body(resp)
        except (aiohttp.ClientError, asyncio.TimeoutError, asyncio.IncompleteReadError, OSError, ssl.SSLError) as exc:
            raise CallError(f'Post "{shown}": {describe_exception(exc, dialed)}') from None
        if data is None:
            raise CallError(f"the response of {shown} is larger than {MAX_RESPONSE_BYTES} bytes")
        if status < 200 or status > 299:
            raise CallError(_status_error(status, data))
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CallError(f"the response is not JSON: {exc}") from None


async def _read_body(resp: aiohttp.ClientResponse) -> bytes | None:
    """The whole body, or None when it is larger than MAX_RESPONSE_BYTES."""
    length = resp.content_length
    if length is not None:
        return None if length > MAX_RESPONSE_BYTES else await resp.content.readexactly(length)
    chunks: list[bytes] = []
    total = 0
    async for chunk in resp.content.iter_any():
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _status_error(status: int, data: bytes) -> str:
    """Upstream's client turns a non-2xx answer into the Status it carries, or a
    generic error naming the code."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status" and isinstance(doc.get("message"), str):
        return doc["message"]
    text = data.decode("utf-8", "replace").strip()
    if text:
        return f'an error on the server ("{text[:1024]}") has prevented the request from succeeding'
    return f"the server responded with the status code {status} but did not return more information"

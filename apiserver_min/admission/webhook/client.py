"""Calling a webhook: HTTPS POST of a JSON body, with the webhook's CA bundle (or the
system roots), the credentials the server presents to that host, the service's
endpoint resolved from the cache, and a timeout; one pool of kept-alive connections
per webhook.

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

import orjson

from ...api import names
from ...webhookclient.errors import describe_exception, go_duration
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


class _Pool:
    """Kept-alive HTTPS connections to one webhook. Calls are plain HTTP/1.1 POSTs on
    asyncio streams: per call this costs a fraction of a general client's work, and
    admission adds a call to every matching write."""

    MAX_IDLE = 64

    def __init__(self, ctx: ssl.SSLContext, auth: dict[str, str]):
        self.ctx = ctx
        self.auth = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

    async def post(
        self, host: str, port: int, server_hostname: str, target: str, host_header: str, body: bytes
    ) -> tuple[int, bytes | None]:
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
            f"Content-Type: application/json\r\nAccept: application/json\r\n{self.auth}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        while self.idle:  # a kept-alive connection the webhook may have closed meanwhile
            conn = self.idle.pop()
            try:
                return await self._exchange(conn, head)
            except _Stale:
                continue
        conn = await asyncio.open_connection(host, port, ssl=self.ctx, server_hostname=server_hostname, limit=1 << 16)
        try:
            return await self._exchange(conn, head)
        except _Stale:
            raise asyncio.IncompleteReadError(b"", None) from None

    async def _exchange(
        self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], head: bytes
    ) -> tuple[int, bytes | None]:
        reader, writer = conn
        keep = False
        try:
            writer.write(head)
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
                if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                    raise
                raise _Stale() from None
            lines = raw.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            status = int(rest[:3])
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            data: bytes | None
            if "content-length" in headers:
                length = int(headers["content-length"])
                data = None if length > MAX_RESPONSE_BYTES else await reader.readexactly(length)
                keep = data is not None
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                data = await _read_chunked(reader)
                keep = data is not None
            else:
                data = await reader.read(MAX_RESPONSE_BYTES + 1)
                while data and len(data) <= MAX_RESPONSE_BYTES:
                    more = await reader.read(MAX_RESPONSE_BYTES + 1 - len(data))
                    if not more:
                        break
                    data += more
                if len(data) > MAX_RESPONSE_BYTES:
                    data = None
            keep = keep and version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            return status, data
        finally:
            if keep and not self.closed and len(self.idle) < self.MAX_IDLE:
                self.idle.append(conn)
            else:
                writer.close()


class _Stale(Exception):
    """A kept-alive connection closed before answering: the call goes on a new one."""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes | None:
    parts: list[bytes] = []
    total = 0
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the end
                pass
            return b"".join(parts)
        chunk = await reader.readexactly(size + 2)
        total += size
        if total > MAX_RESPONSE_BYTES:
            return None
        parts.append(chunk[:-2])


class WebhookClients:
    """Connection pools by webhook (its ``client_key``), created on first use."""

    def __init__(self, lookup: ClusterLookup, credentials: CredentialResolver):
        self.lookup = lookup
        self.credentials = credentials
        self._pools: dict[str, _Pool] = {}

    def _pool(self, key: str, client_config: dict, server_name: str) -> _Pool:
        found = self._pools.get(key)
        if found is not None:
            return found
        ca = client_config.get("caBundle") or ""
        ca_pem = base64.b64decode(ca) if isinstance(ca, str) and ca else b""
        creds = self.credentials.resolve(server_name)
        pool = self._pools[key] = _Pool(ssl_context(ca_pem, creds), creds.headers())
        return pool

    def forget_except(self, keep: set[str]) -> None:
        """Close the pools of webhooks that are gone (a configuration changed)."""
        for key in list(self._pools):
            if key not in keep:
                self._pools.pop(key).close()

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def post(self, key: str, client_config: dict, body: bytes, timeout: float, wait: float | None = None) -> Any:
        """POST BODY and return the decoded JSON answer; CallError naming the URL.
        ``timeout``: what the webhook is told (``?timeout=``); ``wait``: how long the call
        may take (``timeout`` unless given)."""
        query = f"?timeout={go_duration(timeout)}"
        service = client_config.get("service")
        if isinstance(service, dict):
            ns, name = str(service.get("namespace") or ""), str(service.get("name") or "")
            given = service.get("port")
            port = given if isinstance(given, int) else 443
            path = service.get("path") or "/"
            host = f"{name}.{ns}.svc"
            shown = f"https://{host}:{port}{path}{query}"
            server_name = host if port == 443 else f"{host}:{port}"
            try:
                address, dial_port = self.lookup.resolve_service(ns, name, port)
            except ResolveError as exc:
                raise CallError(f'Post "{shown}": {exc}') from None
            target, host_header, tls_name = f"{path}{query}", f"{host}:{port}", host
        else:
            raw = str(client_config.get("url") or "")
            parsed = urllib.parse.urlsplit(raw)
            shown = raw + query
            server_name = parsed.netloc
            address = parsed.hostname or ""
            dial_port = parsed.port or 443
            target = (parsed.path or "/") + query
            host_header, tls_name = parsed.netloc, address
        dialed = f"{_host(address)}:{dial_port}"
        pool = self._pool(key, client_config, server_name)
        try:
            async with asyncio.timeout(timeout if wait is None else wait):
                status, data = await pool.post(address, dial_port, tls_name, target, host_header, body)
        except (
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            OSError,
            ValueError,
        ) as exc:
            raise CallError(f'Post "{shown}": {describe_exception(exc, dialed)}') from None
        if data is None:
            raise CallError(f"the response of {shown} is larger than {MAX_RESPONSE_BYTES} bytes")
        if status < 200 or status > 299:
            raise CallError(_status_error(status, data))
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CallError(f"the response is not JSON: {exc}") from None


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

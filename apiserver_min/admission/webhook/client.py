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
import re
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


# The ``?timeout=`` of the timeouts webhooks have (whole seconds up to the maximum).
_QUERIES = {float(n): f"?timeout={go_duration(n)}" for n in range(1, 31)}


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


class _Incomplete(Exception):
    """The answer is not all there yet."""


def _dechunk(buf: bytearray, start: int) -> bytes | None:
    """A chunked body from BUF[START:]: the body (None when larger than the limit);
    _Incomplete while it is not all there; ValueError when it is not chunked encoding."""
    parts: list[bytes] = []
    total = 0
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            raise _Incomplete()
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            while True:  # trailers, then the empty line
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    raise _Incomplete()
                if eol == pos:
                    return b"".join(parts)
                pos = eol + 2
        if len(buf) < pos + size + 2:
            raise _Incomplete()
        total += size
        if total > MAX_RESPONSE_BYTES:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


class _Connection(asyncio.Protocol):
    """One kept-alive HTTPS connection to a webhook: a request is written whole, and
    the answer gathered from what arrives until it is complete (status line, headers,
    then a body of Content-Length, chunked, or up to the end of the connection). One
    future per call and no stream layer: admission adds a call to every matching
    write, so this is the cheap path."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes | None, bool]] | None = None
        self.lost = False
        self.received = False  # any byte of the current answer
        # The current answer's head, once read: (status, end of head, length or -1 for
        # chunked or -2 for "until the end", keep-alive).
        self.head: tuple[int, int, int, bool] | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.received = True
        if self.waiter is not None:
            self._answer(False)

    def eof_received(self) -> bool | None:
        self._ended(None)
        return None  # the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc)

    # --- calls ------------------------------------------------------------------------------

    def send(self, request: bytes, waiter: "asyncio.Future[tuple[int, bytes | None, bool]]") -> None:
        self.buf.clear()
        self.head = None
        self.received = False
        self.waiter = waiter
        assert self.transport is not None
        self.transport.write(request)

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def _ended(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            if not self.received:
                self.waiter.set_exception(_Stale())
            else:
                self._answer(True)
                if self.waiter is not None and not self.waiter.done():
                    self.waiter.set_exception(exc or asyncio.IncompleteReadError(bytes(self.buf), None))

    def _answer(self, at_end: bool) -> None:
        """Complete the waiter if the answer is all there (AT_END: nothing more comes)."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        buf = self.buf
        try:
            if self.head is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > 1 << 16:
                        raise asyncio.LimitOverrunError("the answer's head is too long", len(buf))
                    return
                self.head = _parse_head(bytes(buf[:end]), end + 4)
            status, body_at, length, keep = self.head
            if length >= 0:
                if length > MAX_RESPONSE_BYTES:
                    data, keep = None, False
                elif len(buf) < body_at + length:
                    return
                else:
                    data = bytes(buf[body_at : body_at + length])
            elif length == -1:
                try:
                    data = _dechunk(buf, body_at)
                except _Incomplete:
                    return
                keep = keep and data is not None
            else:  # no length: the body ends with the connection
                if len(buf) - body_at > MAX_RESPONSE_BYTES:
                    data = None
                elif not at_end:
                    return
                else:
                    data = bytes(buf[body_at:])
        except (ValueError, asyncio.LimitOverrunError) as exc:
            self.waiter = None
            waiter.set_exception(exc)
            return
        self.waiter = None
        waiter.set_result((status, data, keep and not self.lost))


# The response headers the client acts on (in a lowered head): name and value.
_HEADER = re.compile(rb"\r\n(content-length|transfer-encoding|connection)[ \t]*:[ \t]*([^\r]*)")


def _parse_head(head: bytes, body_at: int) -> tuple[int, int, int, bool]:
    """(status, where the body starts, its length (-1: chunked, -2: up to the end of the
    connection), whether the connection is kept alive). Only the headers that decide
    those are read."""
    version, _, rest = head.partition(b" ")
    status = int(rest[:3])
    length, keep = -2, version == b"HTTP/1.1"
    for name, value in _HEADER.findall(head.lower()):
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            if b"chunked" in value:
                length = -1
        elif value.strip() == b"close":
            keep = False
    if length == -2:
        keep = False
    return status, body_at, length, keep


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())


class _Pool:
    """Kept-alive HTTPS connections to one webhook. Calls are plain HTTP/1.1 POSTs on
    connections of our own (:class:`_Connection`): per call this costs a fraction of a
    general client's work, and admission adds a call to every matching write."""

    MAX_IDLE = 64

    def __init__(self, ctx: ssl.SSLContext, auth: dict[str, str]):
        self.ctx = ctx
        self.auth = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
        self.idle: list[_Connection] = []
        self.closed = False
        # The request head up to the body's length, by (target, Host header).
        self._heads: dict[tuple[str, str], bytes] = {}

    def close(self) -> None:
        self.closed = True
        for conn in self.idle:
            conn.close()
        self.idle.clear()

    def _head(self, target: str, host_header: str) -> bytes:
        head = self._heads.get((target, host_header))
        if head is None:
            if len(self._heads) > 64:
                self._heads.clear()
            head = self._heads[(target, host_header)] = (
                f"POST {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json\r\n{self.auth}"
                "Content-Length: "
            ).encode("latin-1")
        return head

    async def post(
        self,
        host: str,
        port: int,
        server_hostname: str,
        target: str,
        host_header: str,
        body: bytes,
        timeout: float,
    ) -> tuple[int, bytes | None]:
        """(status, body; None when larger than the limit), within TIMEOUT seconds
        (asyncio.TimeoutError past it)."""
        loop = asyncio.get_running_loop()
        request = b"%b%d\r\n\r\n%b" % (self._head(target, host_header), len(body), body)
        deadline = loop.time() + timeout
        while self.idle:  # a kept-alive connection the webhook may have closed meanwhile
            conn = self.idle.pop()
            if conn.lost:
                continue
            try:
                return await self._exchange(loop, conn, request, deadline)
            except _Stale:
                continue
        async with asyncio.timeout_at(deadline):
            _, conn = await loop.create_connection(
                _Connection, host, port, ssl=self.ctx, server_hostname=server_hostname
            )
        try:
            return await self._exchange(loop, conn, request, deadline)
        except _Stale:
            raise asyncio.IncompleteReadError(b"", None) from None

    async def _exchange(
        self, loop: asyncio.AbstractEventLoop, conn: _Connection, request: bytes, deadline: float
    ) -> tuple[int, bytes | None]:
        waiter: asyncio.Future[tuple[int, bytes | None, bool]] = loop.create_future()
        timer = loop.call_at(deadline, _expire, waiter)
        keep = False
        try:
            conn.send(request, waiter)
            status, data, keep = await waiter
            return status, data
        finally:
            timer.cancel()
            conn.waiter = None
            if keep and not self.closed and len(self.idle) < self.MAX_IDLE:
                self.idle.append(conn)
            else:
                conn.close()


class _Stale(Exception):
    """A kept-alive connection closed before answering: the call goes on a new one."""


class WebhookClients:
    """Connection pools by webhook (its ``client_key``), created on first use."""

    def __init__(self, lookup: ClusterLookup, credentials: CredentialResolver):
        self.lookup = lookup
        self.credentials = credentials
        self._pools: dict[str, _Pool] = {}
        # A webhook URL's parts: (host:port as given, host, port, path).
        self._urls: dict[str, tuple[str, str, int, str]] = {}

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
        query = _QUERIES.get(timeout) or f"?timeout={go_duration(timeout)}"
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
            parts = self._urls.get(raw)
            if parts is None:
                if len(self._urls) > 256:
                    self._urls.clear()
                parsed = urllib.parse.urlsplit(raw)
                address = parsed.hostname or ""
                parts = self._urls[raw] = (parsed.netloc, address, parsed.port or 443, parsed.path or "/")
            server_name, address, dial_port, path = parts
            shown = raw + query
            target = path + query
            host_header, tls_name = server_name, address
        pool = self._pool(key, client_config, server_name)
        try:
            status, data = await pool.post(
                address, dial_port, tls_name, target, host_header, body, timeout if wait is None else wait
            )
        except (
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            OSError,
            ValueError,
        ) as exc:
            dialed = f"{_host(address)}:{dial_port}"
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

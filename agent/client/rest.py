"""The agent's HTTP client of the API server.

What it guarantees, and why:

* TLS is always verified against the cluster CA of the connection config; a
  certificate that does not verify is reported at once (retrying cannot help).
* ``--orch-api-content-type`` protobuf (the default): objects of kinds with a
  declared schema are sent as protobuf and protobuf is asked for in replies and
  watches (JSON accepted too: replies are decoded by their Content-Type);
  patches are always JSON, as upstream's clients send them, and so are bodies
  the caller sends with an explicit ``content_type``. With
  ``application/json`` everything is JSON.
* ``--orch-api-qps``/``--orch-api-burst`` are one token bucket for the whole
  client. Requests marked ``rate_limited=False`` skip it: events have their own
  limit and node heartbeats (node status, lease) must not queue behind pod
  traffic, or a busy node would be declared dead (the spec excludes both).
* Retries with exponential back-off (jittered): a 429 is retried for every verb
  (the server did not act on it) after its ``Retry-After``; 5xx answers, broken
  connections and timeouts only for idempotent verbs (GET, HEAD, PUT, DELETE)
  unless the caller says otherwise with ``retry=``; a connection that could not
  even be opened is retried for every verb (nothing was sent).
* One connection pool per client, kept alive: on HTTP/1.1 each watch holds a
  connection of its own and each request in flight another, and every new
  connection costs the API server a TLS handshake. So every part of the agent
  uses the one client; idle connections are kept :data:`KEEPALIVE_TIMEOUT`
  seconds (past the 10 s heartbeats, short of the server's 75 s); and requests
  under the token bucket share at most :data:`REQUEST_CONNECTIONS` connections
  (the bucket spaces them anyway; a burst of them queues instead of opening
  new connections). Heartbeats and events, each sent by one task in turn, and
  watches come beside them.
* :meth:`ApiClient.reload` swaps the credentials (certificate rotation) for new
  connections without a restart; connections of the old credentials are closed
  after a short grace period, so watches reconnect with the new certificate.

Failures are :class:`ApiError` (the server answered with an error status) or
:class:`ApiConnectionError` (no usable answer; an ``OSError``, so callers that
already handle socket errors handle it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import shutil
import ssl
import tempfile
import time
from typing import Any, AsyncIterator, Callable, Mapping

import aiohttp
import orjson

from apiserver_min.api import names

from .. import logging as agent_logging
from .config import Connection

__all__ = [
    "ApiError",
    "ApiConnectionError",
    "TokenBucket",
    "ApiClient",
    "PATCH_TYPES",
    "parse_retry_after",
    "iter_watch_lines",
]

log = agent_logging.get_logger("client")


@functools.cache
def _protobuf() -> Any:
    """The protobuf codec, imported with the first protobuf body sent or received: it
    brings every kind's schema, which an agent without an API server (static pods
    only) never uses."""
    from apiserver_min.api import protobuf

    return protobuf


DEFAULT_QPS = 5.0
DEFAULT_BURST = 10
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
PATCH_TYPES = {
    "merge": names.MEDIA_MERGE_PATCH,
    "json": names.MEDIA_JSON_PATCH,
    "strategic": names.MEDIA_STRATEGIC_MERGE_PATCH,
    "apply": names.MEDIA_APPLY_PATCH,
}
RELOAD_GRACE = 5.0  # seconds connections of replaced credentials may finish
KEEPALIVE_TIMEOUT = 60.0  # seconds an idle connection stays open (the API server closes after 75 s)
REQUEST_CONNECTIONS = 1  # rate-limited requests in flight at once (the bucket spaces them anyway)
WATCH_READ_MARGIN = 30.0  # a watch silent this long past its timeoutSeconds is dead


class ApiError(Exception):
    """The API server answered with an error status (``body`` is its Status, if any)."""

    def __init__(
        self, status: int, reason: str, message: str, body: dict | None = None, retry_after: float | None = None
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body if body is not None else {}
        self.retry_after = retry_after
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")

    @classmethod
    def from_status(cls, status: int, body: Any, retry_after: float | None = None) -> "ApiError":
        """From a decoded reply (a Status object, or anything else the server sent)."""
        if isinstance(body, dict) and body.get("kind") == "Status":
            code = body.get("code")
            return cls(
                code if isinstance(code, int) and code else status,
                str(body.get("reason") or ""),
                str(body.get("message") or ""),
                body,
                retry_after,
            )
        text = body if isinstance(body, str) else ""
        return cls(
            status,
            _REASONS.get(status, ""),
            text.strip()[:500] or f"HTTP {status}",
            body if isinstance(body, dict) else {},
            retry_after,
        )


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiConnectionError(OSError):
    """No usable answer from the API server (connection, TLS, timeout, broken stream)."""


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the form the API server sends); None when absent or a date."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return max(0.0, seconds)


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` saved up.

    Reservation style: taking a token may drive the count negative, and the
    caller sleeps until its token is due; waiters are served in arrival order
    without a lock. A cancelled waiter gives its token back.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self.clock = clock
        self.tokens = float(self.burst)
        self.last = clock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it."""
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps

    def refund(self) -> None:
        self.tokens = min(float(self.burst), self.tokens + 1.0)

    async def acquire(self) -> float:
        delay = self.reserve()
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                self.refund()
                raise
        return delay


class ResumingContext(ssl.SSLContext):
    """A client TLS context that offers each new connection the session of an earlier
    one (TLS 1.3 session tickets; TLS 1.2 session ids): the server then skips its
    certificate signature and the check of the client certificate, the dearest part
    of a handshake for an API server that many agents connect to. asyncio asks the
    context for every connection's TLS object (``wrap_bio``), which is where the
    session is handed in. A server that does not take it answers with a full
    handshake. New credentials (:meth:`ApiClient.reload`) come with a new context,
    so a session of the old client certificate is never offered again."""

    _KEPT = 8  # connections whose sessions are looked at, newest first

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        if session is None and not server_side:
            session = self.resumable_session()
        obj = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        # Held past the connection's end (a few KB each): a session outlives the pool's
        # idle connections (a restarted server has new ticket keys and refuses it).
        recent: list[ssl.SSLObject] = self.__dict__.setdefault("_recent", [])
        recent.append(obj)
        del recent[: -self._KEPT]
        return obj

    def resumable_session(self) -> ssl.SSLSession | None:
        now = time.time()
        for obj in reversed(self.__dict__.get("_recent", [])):
            try:
                session = obj.session
            except (ValueError, ssl.SSLError):  # a handshake still in progress has none to copy
                continue
            if session is not None and session.has_ticket and session.time + session.timeout > now:
                return session
        return None


def _ssl_context(conn: Connection) -> ssl.SSLContext:
    """A verifying context: the cluster CA, plus the client certificate if any."""
    where = conn.source or "the connection config"
    try:
        # What ssl.create_default_context() makes for a client, as a ResumingContext.
        ctx = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cadata=conn.ca_data.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(
            f"{where}: the cluster CA (certificate-authority) is not a usable PEM certificate: {exc}"
        ) from None
    if not conn.has_client_certificate:
        return ctx
    try:
        if conn.cert_file and conn.key_file:
            ctx.load_cert_chain(conn.cert_file, conn.key_file)
        else:
            # The ssl module loads key pairs from files only: a private directory
            # that lives for the duration of the call.
            tmp = tempfile.mkdtemp(prefix="orch-client-")
            try:
                cert_path, key_path = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
                for p, data in ((cert_path, conn.cert_data), (key_path, conn.key_data)):
                    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data or b"")
                ctx.load_cert_chain(cert_path, key_path)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"{where}: the client certificate and key cannot be used together: {exc}") from None
    return ctx


def _encode(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return orjson.dumps(body)


def _decode(data: bytes, content_type: str = "") -> Any:
    """A reply by its Content-Type: protobuf, else JSON (text if it is neither)."""
    if not data:
        return {}
    if names.is_protobuf_media(content_type):
        try:
            return _protobuf().decode(data)
        except _protobuf().ProtobufError as exc:
            raise ApiConnectionError(f"malformed protobuf reply: {exc}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")


async def iter_watch_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict]:
    """Decoded watch events from a byte stream of newline-terminated JSON documents.

    Documents may arrive split across chunks or several in one chunk; a line can
    be larger than any read buffer (a big pod), so lines are assembled here.
    """
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line = bytes(buf[:nl]).strip()
            del buf[: nl + 1]
            if line:
                yield _parse_event(line)
    rest = bytes(buf).strip()
    if rest:
        yield _parse_event(rest)


def _parse_event(line: bytes) -> dict:
    try:
        ev = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiConnectionError(f"malformed watch event ({exc}): {line[:200]!r}") from None
    if not isinstance(ev, dict) or not isinstance(ev.get("type"), str) or not isinstance(ev.get("object"), dict):
        raise ApiConnectionError(f"malformed watch event (needs type and object): {line[:200]!r}")
    return ev


async def _json_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, dict]]:
    async for ev in iter_watch_lines(chunks):
        yield ev["type"], ev["object"]


async def _protobuf_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, dict]]:
    """Watch events from length-prefixed protobuf frames; a malformed frame is a
    broken stream (the informer watches again from its last version)."""
    try:
        async for ev_type, obj in _protobuf().iter_frames(chunks):
            yield ev_type, obj
    except _protobuf().ProtobufError as exc:
        raise ApiConnectionError(f"malformed protobuf watch event: {exc}") from None


class ApiClient:
    """One API server connection pool with the agent's rate limit and retry rules."""

    def __init__(
        self,
        conn: Connection,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        user_agent: str = names.AGENT_NAME,
        timeout: float = 30,
        content_type: str = names.MEDIA_JSON,
        max_retries: int = 5,
        backoff_base: float = 0.2,
        backoff_cap: float = 5.0,
        retry_after_cap: float = 60.0,
    ) -> None:
        self.user_agent = user_agent
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.retry_after_cap = retry_after_cap
        if qps is None or qps == 0:
            qps = DEFAULT_QPS
        if not burst:
            burst = DEFAULT_BURST
        # A negative QPS turns the limit off (as upstream's clients).
        self.limiter: TokenBucket | None = TokenBucket(qps, burst) if qps > 0 else None
        if content_type not in (names.MEDIA_JSON, "", *names.PROTOBUF_MEDIA_TYPES):
            raise ValueError(
                f"unsupported content type {content_type!r} (want {names.MEDIA_JSON} or {names.MEDIA_PROTOBUF})"
            )
        self.content_type = content_type or names.MEDIA_JSON
        self.protobuf = self.content_type in names.PROTOBUF_MEDIA_TYPES
        # Protobuf first, JSON accepted (objects without a protobuf encoding come as JSON).
        self.accept = f"{self.content_type}, {names.MEDIA_JSON}" if self.protobuf else names.MEDIA_JSON
        self.conn = conn
        self._ssl = _ssl_context(conn)
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []
        self._closers: set[asyncio.Task] = set()
        self._request_slots = asyncio.Semaphore(REQUEST_CONNECTIONS)
        self.requests = 0  # requests sent, retries included (tests, metrics)

    # --- credentials ------------------------------------------------------------------
    def reload(self, conn: Connection) -> None:
        """Use new credentials for new connections (certificate rotation)."""
        self._ssl = _ssl_context(conn)
        self.conn = conn
        old, self._session = self._session, None
        if old is not None and not old.closed:
            self._retired.append(old)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            loop.call_later(RELOAD_GRACE, self._close_retired, old)
        log.info(
            "Reloaded the API client credentials",
            server=conn.server,
            certificate=conn.cert_file or ("inline" if conn.cert_data else "none"),
        )

    def _close_retired(self, session: aiohttp.ClientSession) -> None:
        if session in self._retired:
            self._retired.remove(session)
            task = asyncio.ensure_future(session.close())
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No connection limit: each watch needs one for as long as it runs.
            connector = aiohttp.TCPConnector(
                ssl=self._ssl, limit=0, keepalive_timeout=KEEPALIVE_TIMEOUT, enable_cleanup_closed=False
            )
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        sessions = [s for s in [self._session, *self._retired] if s is not None]
        self._session, self._retired = None, []
        for s in sessions:
            await s.close()
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)

    # --- plumbing ---------------------------------------------------------------------
    def _slot(self, rate_limited: bool) -> contextlib.AbstractAsyncContextManager[Any]:
        """A share of the pool for one request: those under the token bucket wait for
        one of :data:`REQUEST_CONNECTIONS`; heartbeats and events go at once, and so
        does everything when the limit is off (a negative QPS)."""
        if rate_limited and self.limiter is not None:
            return self._request_slots
        return contextlib.nullcontext()

    def url(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"API path must start with '/', got {path!r}")
        return self.conn.server + path

    def _headers(self, content_type: str | None, accept: str | None = None) -> dict[str, str]:
        h = {"User-Agent": self.user_agent, "Accept": accept or self.accept}
        if content_type:
            h["Content-Type"] = content_type
        if self.conn.token:
            h["Authorization"] = f"Bearer {self.conn.token}"
        return h

    def _backoff(self, attempt: int) -> float:
        delay = min(self.backoff_cap, self.backoff_base * (2**attempt))
        return delay * random.uniform(0.5, 1.0)

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return (
                f"the API server's certificate does not verify with the cluster CA of "
                f"{self.conn.source or 'the connection config'}: {exc.certificate_error}"
            )
        if isinstance(exc, asyncio.TimeoutError):
            return f"timed out after {self.timeout:g}s"
        return str(exc) or type(exc).__name__

    def _body(self, body: Any, content_type: str | None) -> tuple[bytes | None, str]:
        """The bytes and Content-Type of a request body: protobuf for an object of
        a kind with a declared schema when the client speaks protobuf and the
        caller named no type; JSON otherwise."""
        if content_type is None:
            if self.protobuf and isinstance(body, dict):
                schema = _protobuf().schema_of(str(body.get("apiVersion") or ""), str(body.get("kind") or ""))
                if schema is not None:
                    return _protobuf().encode(body, schema), self.content_type
            content_type = names.MEDIA_JSON
        return _encode(body), content_type

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        rate_limited: bool = True,
        retry: bool | None = None,
    ) -> dict:
        """One API call; the decoded reply (JSON shape, whichever the wire format).
        Raises ApiError or ApiConnectionError."""
        method = method.upper()
        payload, content_type = self._body(body, content_type)
        idempotent = method in IDEMPOTENT if retry is None else retry
        url = self.url(path)
        attempt = 0
        while True:
            if rate_limited and self.limiter is not None:
                await self.limiter.acquire()
            self.requests += 1
            try:
                async with self._slot(rate_limited):
                    session = self._session_now()
                    async with session.request(
                        method,
                        url,
                        data=payload,
                        params=dict(params) if params else None,
                        headers=self._headers(content_type if payload is not None else None),
                        timeout=aiohttp.ClientTimeout(total=self.timeout),
                        server_hostname=self.conn.server_name or None,
                    ) as resp:
                        data = await resp.read()
                        status = resp.status
                        reply_type = resp.headers.get("Content-Type", "")
                        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
                # A certificate problem does not go away by asking again.
                raise ApiConnectionError(f"{method} {url}: {self._describe(exc)}") from exc
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                unsent = isinstance(exc, aiohttp.ClientConnectorError)
                if (unsent and retry is not False or idempotent) and attempt < self.max_retries:
                    delay = self._backoff(attempt)
                    log.v(4).info(
                        "Retrying request", method=method, path=path, err=self._describe(exc), delay=round(delay, 3)
                    )
                    attempt += 1
                    await asyncio.sleep(delay)
                    continue
                raise ApiConnectionError(f"{method} {url}: {self._describe(exc)}") from exc
            decoded = _decode(data, reply_type)
            if status < 300:
                return decoded if isinstance(decoded, dict) else {"text": decoded}
            err = ApiError.from_status(status, decoded, retry_after)
            retryable = status == 429 or (status >= 500 and idempotent)
            if retry is False:
                retryable = False
            if retryable and attempt < self.max_retries:
                delay = self._backoff(attempt) if retry_after is None else min(retry_after, self.retry_after_cap)
                log.v(4).info("Retrying request", method=method, path=path, status=status, delay=round(delay, 3))
                attempt += 1
                await asyncio.sleep(delay)
                continue
            raise err

    # --- verbs ------------------------------------------------------------------------
    async def get(self, path: str, *, params: Mapping[str, str] | None = None, rate_limited: bool = True) -> dict:
        return await self.request("GET", path, params=params, rate_limited=rate_limited)

    async def create(
        self, path: str, body: Any, *, params: Mapping[str, str] | None = None, rate_limited: bool = True
    ) -> dict:
        return await self.request("POST", path, body=body, params=params, rate_limited=rate_limited)

    async def update(self, path: str, body: Any, *, rate_limited: bool = True) -> dict:
        return await self.request("PUT", path, body=body, rate_limited=rate_limited)

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: str = "merge",
        rate_limited: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> dict:
        media = PATCH_TYPES.get(patch_type)
        if media is None:
            raise ValueError(f"unknown patch type {patch_type!r} (want one of {', '.join(PATCH_TYPES)})")
        return await self.request(
            "PATCH", path, body=body, params=params, content_type=media, rate_limited=rate_limited
        )

    async def delete(
        self, path: str, *, body: Any = None, params: Mapping[str, str] | None = None, rate_limited: bool = True
    ) -> dict:
        return await self.request("DELETE", path, body=body, params=params, rate_limited=rate_limited)

    async def watch(self, path: str, *, params: Mapping[str, str]) -> AsyncIterator[tuple[str, dict]]:
        """Stream ``(type, object)`` from a watch on the collection ``path``.

        An ERROR event raises :class:`ApiError` with the Status it carries (410
        when the requested resourceVersion is older than the kept history). The
        stream ends when the server closes it (``timeoutSeconds``); broken
        streams raise :class:`ApiConnectionError`.
        """
        q = {k: str(v) for k, v in params.items()}
        q["watch"] = "true"
        read_timeout = None
        if q.get("timeoutSeconds"):
            try:
                read_timeout = float(q["timeoutSeconds"]) + WATCH_READ_MARGIN
            except ValueError:
                raise ValueError(f"timeoutSeconds must be a number, got {q['timeoutSeconds']!r}") from None
        if self.limiter is not None:
            await self.limiter.acquire()
        session = self._session_now()
        url = self.url(path)
        self.requests += 1
        try:
            async with session.get(
                url,
                params=q,
                headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=read_timeout),
                server_hostname=self.conn.server_name or None,
            ) as resp:
                reply_type = resp.headers.get("Content-Type", "")
                if resp.status != 200:
                    data = await resp.read()
                    raise ApiError.from_status(
                        resp.status, _decode(data, reply_type), parse_retry_after(resp.headers.get("Retry-After"))
                    )
                if names.is_protobuf_media(reply_type):
                    events = _protobuf_events(resp.content.iter_any())
                else:
                    events = _json_events(resp.content.iter_any())
                async for ev_type, obj in events:
                    if ev_type == "ERROR":
                        raise ApiError.from_status(500, obj)
                    yield ev_type, obj
        except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
            raise ApiConnectionError(f"GET {url} (watch): {self._describe(exc)}") from exc
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise ApiConnectionError(f"GET {url} (watch): {self._describe(exc)}") from exc

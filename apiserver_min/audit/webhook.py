"""The webhook backend: events POSTed as an ``EventList`` to the server named by an
orchconfig file (``--audit-webhook-config-file``), in batches, retried with
exponential back-off. Requests never wait for it: a full buffer drops events, and a
batch that still fails after its retries is dropped; both are counted."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import os
import ssl
import tempfile
import time
import urllib.parse
from typing import Any

import aiohttp
import orjson

from ..api import codec, names

log = logging.getLogger("orch-apiserver.audit")

# Attempts per batch (the first and its retries), the back-off doubling after each.
ATTEMPTS = 4


class WebhookConfigError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class WebhookTarget:
    url: str
    ca_pem: bytes = b""
    cert_pem: bytes = b""
    key_pem: bytes = b""
    token: str = ""


@dataclasses.dataclass(frozen=True)
class WebhookOptions:
    target: WebhookTarget
    batch_buffer_size: int = 10000
    batch_max_size: int = 400
    batch_max_wait: float = 30.0
    initial_backoff: float = 10.0


def _file_or_data(entry: dict, key: str, base: str, where: str) -> bytes:
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(str(entry[f"{key}-data"]), validate=True)
        except ValueError:
            raise WebhookConfigError(f"{where}.{key}-data: not valid base64") from None
    if entry.get(key):
        path = str(entry[key])
        full = path if os.path.isabs(path) else os.path.join(base, path)
        try:
            with open(full, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise WebhookConfigError(f"{where}.{key}: cannot read {full}: {exc.strerror or exc}") from None
    return b""


def load_webhook_config(path: str) -> WebhookTarget:
    """The webhook's address and credentials from an orchconfig file; errors name the file."""
    try:
        with open(path, "rb") as fh:
            doc = codec.load_yaml(fh.read())
    except OSError as exc:
        raise WebhookConfigError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise WebhookConfigError(f"{path}: neither YAML nor JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WebhookConfigError(f"{path}: must be an orchconfig (apiVersion v1, kind Config)")
    base = os.path.dirname(os.path.abspath(path))

    def named(section: str, inner: str) -> dict[str, dict]:
        return {str(e.get("name")): e.get(inner) or {} for e in doc.get(section) or [] if isinstance(e, dict)}

    contexts, clusters, users = named("contexts", "context"), named("clusters", "cluster"), named("users", "user")
    current = doc.get("current-context")
    if current in contexts:
        context = contexts[current]
    elif len(contexts) == 1:
        context = next(iter(contexts.values()))
    elif not contexts and len(clusters) == 1:
        context = {"cluster": next(iter(clusters))}
    else:
        raise WebhookConfigError(f"{path}: needs a current-context naming one of its contexts")
    cluster = clusters.get(str(context.get("cluster")))
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise WebhookConfigError(f"{path}: the current context's cluster has no server")
    url = str(cluster["server"])
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise WebhookConfigError(f"{path}: the server {url!r} is not an http(s) URL")
    user = users.get(str(context.get("user"))) or {}
    cert = _file_or_data(user, "client-certificate", base, f"{path}: user")
    key = _file_or_data(user, "client-key", base, f"{path}: user")
    if bool(cert) != bool(key):
        raise WebhookConfigError(f"{path}: a client certificate needs its key, and a key its certificate")
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        token = _file_or_data({"t": user["tokenFile"]}, "t", base, f"{path}: user.tokenFile").decode().strip()
    return WebhookTarget(
        url, _file_or_data(cluster, "certificate-authority", base, f"{path}: cluster"), cert, key, token
    )


def _ssl_context(t: WebhookTarget) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=t.ca_pem.decode("latin-1")) if t.ca_pem else ssl.create_default_context()
    if t.cert_pem:
        # The ssl module loads a client certificate from a file only: a private one, removed at once.
        fd, tmp = tempfile.mkstemp(prefix="orch-audit-webhook-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(t.cert_pem.rstrip(b"\n") + b"\n" + t.key_pem)
            ctx.load_cert_chain(tmp)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return ctx


class _Retry(Exception):
    pass


class _Refused(Exception):
    """A 4xx answer: retrying would not change it."""


class WebhookBackend:
    name = "webhook"

    def __init__(self, opts: WebhookOptions):
        self.opts = opts
        self.dropped = 0
        self.sent_batches = 0
        self._buffer: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closing = False

    def process(self, event: dict[str, Any]) -> None:
        if len(self._buffer) >= self.opts.batch_buffer_size:
            self.dropped += 1
            return
        self._buffer.append(event)
        if len(self._buffer) == 1 or len(self._buffer) >= self.opts.batch_max_size:
            self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="audit-webhook-batches")

    async def _next_batch(self) -> list[dict[str, Any]]:
        """Up to max_size events: at once when that many wait, else what came within max_wait."""
        while not self._buffer and not self._closing:
            self._wake.clear()
            await self._wake.wait()
        deadline = time.monotonic() + self.opts.batch_max_wait
        while len(self._buffer) < self.opts.batch_max_size and not self._closing:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)
        batch = self._buffer[: self.opts.batch_max_size]
        del self._buffer[: len(batch)]
        return batch

    async def _run(self) -> None:
        while not (self._closing and not self._buffer):
            batch = await self._next_batch()
            if batch:
                await self._send(batch)

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        body = orjson.dumps(
            {"kind": "EventList", "apiVersion": names.AUDIT_API_VERSION, "metadata": {}, "items": batch}
        )
        headers = {"Content-Type": "application/json"}
        if self.opts.target.token:
            headers["Authorization"] = f"Bearer {self.opts.target.token}"
        backoff = self.opts.initial_backoff
        for attempt in range(1, ATTEMPTS + 1):
            try:
                await self._post(body, headers)
                self.sent_batches += 1
                return
            except _Refused as exc:
                problem = str(exc)
                break
            except _Retry as exc:
                problem = str(exc)
            except (aiohttp.ClientError, TimeoutError, OSError, ssl.SSLError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if attempt == ATTEMPTS or self._closing:
                break
            log.warning("audit webhook: %s; retrying in %.1fs", problem, backoff)
            await asyncio.sleep(backoff)
            backoff *= 2
        self.dropped += len(batch)
        log.error("audit webhook: %d events dropped: %s", len(batch), problem)

    async def _post(self, body: bytes, headers: dict[str, str]) -> None:
        if self._session is None:
            ctx = _ssl_context(self.opts.target) if self.opts.target.url.startswith("https") else None
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx) if ctx is not None else aiohttp.TCPConnector(),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        async with self._session.post(self.opts.target.url, data=body, headers=headers) as resp:
            await resp.read()
            if resp.status >= 500 or resp.status == 429:
                raise _Retry(f"the webhook answered {resp.status}")
            if resp.status >= 300:
                raise _Refused(f"the webhook answered {resp.status}")

    async def shutdown(self) -> None:
        """Send what is buffered (one attempt each), then close."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 30.0)
            except TimeoutError:
                log.error("audit webhook: %d events not sent at shutdown", len(self._buffer))
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

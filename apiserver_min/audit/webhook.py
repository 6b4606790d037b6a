"""The webhook backend: events POSTed as an ``EventList`` to the server named by an
orchconfig file (``--audit-webhook-config-file``), in batches, retried with
exponential back-off. Requests never wait for it: a full buffer drops events, and a
batch that still fails after its retries is dropped; both are counted."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
from typing import Any

import aiohttp
import orjson

from ..api import names
from ..api.orchconfig import Target, load_target, ssl_context

log = logging.getLogger("orch-apiserver.audit")

# Attempts per batch (the first and its retries), the back-off doubling after each.
ATTEMPTS = 4


@dataclasses.dataclass(frozen=True)
class WebhookOptions:
    target: Target
    batch_buffer_size: int = 10000
    batch_max_size: int = 400
    batch_max_wait: float = 30.0
    initial_backoff: float = 10.0


def load_webhook_config(path: str) -> Target:
    """The webhook's address and credentials from an orchconfig file (http or https);
    :class:`~..api.orchconfig.WebhookConfigError` names the file and the problem."""
    return load_target(path, path, require_https=False)


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
                async with asyncio.timeout(left):
                    await self._wake.wait()
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
            ctx = ssl_context(self.opts.target) if self.opts.target.url.startswith("https") else None
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
                async with asyncio.timeout(30.0):
                    await self._task  # the timeout cancels the sender task
            except TimeoutError:
                log.error("audit webhook: %d events not sent at shutdown", len(self._buffer))
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

"""A JSON review POSTed to a webhook backend named by an orchconfig (see ``orchconfig``),
with upstream's retry: a connection error, a timeout, 429 or 5xx is tried again after
0.5 s, growing 1.5 times (with up to 20% jitter), five tries in all. One pool of
kept-alive connections per backend.

Failures raise :class:`CallError` worded as upstream's Go client words them
(``Post "https://host/path": dial tcp ...: connect: connection refused``)."""

from __future__ import annotations

import asyncio
import random
import urllib.parse

import aiohttp
import orjson

from ..api.orchconfig import Target, ssl_context
from .errors import describe_exception

REQUEST_TIMEOUT_SECONDS = 30.0
MAX_RESPONSE_BYTES = 1 << 20
RETRY_STEPS = 5
RETRY_INITIAL_SECONDS = 0.5
RETRY_FACTOR = 1.5
RETRY_JITTER = 0.2


class CallError(Exception):
    """No usable answer came back (connection, TLS, timeout, HTTP status, body)."""


class _Retryable(Exception):
    pass


class JsonWebhook:
    """POSTs JSON documents to one backend and returns the decoded answers."""

    def __init__(
        self,
        target: Target,
        retry_backoff: float = RETRY_INITIAL_SECONDS,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
    ):
        self.target = target
        self.retry_backoff = retry_backoff
        self.timeout = timeout
        self._ssl = ssl_context(target)
        self._session: aiohttp.ClientSession | None = None
        split = urllib.parse.urlsplit(target.url)
        self._address = f"{split.hostname}:{split.port or (443 if split.scheme == 'https' else 80)}"
        self.calls = 0  # HTTP attempts made (tests and metrics read it)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def post(self, doc: dict) -> dict:
        """The backend's answer to DOC, a JSON object; CallError when there is none."""
        body = orjson.dumps(doc)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.target.token:
            headers["Authorization"] = "Bearer " + self.target.token
        raw = await self._post(body, headers)
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise CallError(f"the answer is not JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise CallError("the answer is not a JSON object")
        return answer

    async def _post(self, body: bytes, headers: dict[str, str]) -> bytes:
        delay = self.retry_backoff
        for attempt in range(RETRY_STEPS):
            self.calls += 1
            try:
                return await self._once(body, headers)
            except _Retryable as exc:
                if attempt + 1 >= RETRY_STEPS:
                    raise CallError(str(exc)) from None
            await asyncio.sleep(delay * (1 + RETRY_JITTER * random.random()))
            delay *= RETRY_FACTOR
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _once(self, body: bytes, headers: dict[str, str]) -> bytes:
        where = f'Post "{self.target.url}"'
        try:
            async with self._client().post(self.target.url, data=body, headers=headers) as resp:
                raw = await resp.content.read(MAX_RESPONSE_BYTES + 1)
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as exc:
            raise _Retryable(f"{where}: {describe_exception(exc, self._address)}") from None
        except aiohttp.ClientError as exc:
            raise CallError(f"{where}: {exc}") from None
        if resp.status == 429 or resp.status >= 500:
            raise _Retryable(f"{where}: the server answered HTTP {resp.status}")
        if resp.status < 200 or resp.status >= 300:
            raise CallError(f"{where}: the server answered HTTP {resp.status}")
        if len(raw) > MAX_RESPONSE_BYTES:
            raise CallError(f"{where}: the answer is larger than {MAX_RESPONSE_BYTES} bytes")
        return raw

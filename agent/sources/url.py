"""The manifest-URL source (``--manifest-url``): static pods from an HTTP endpoint.

Every ``--http-check-frequency`` the URL is fetched (GET, the
``--manifest-url-header`` headers, redirects followed, 10 s timeout, at most
10 MiB). A body holding a Pod or a PodList/List of pods, all of them valid,
replaces the source's set; as upstream, an empty body means no pods. Anything
else - a transport error, a status other than 200, a body that does not decode
or a pod that does not validate - keeps the last good set, is logged (the first
few times loudly, then at -v 4) and shows as a problem in ``/pods`` until the
next good fetch.

As upstream, the source counts as seen only after its first good fetch: an
unreachable URL at start must not be taken for "this URL has no pods", which
would let the agent clean up pods the URL still asks for.
"""

from __future__ import annotations

import asyncio
from typing import Mapping, Sequence

import aiohttp

from agent import logging as agent_logging
from agent import pods as podutil
from agent.pods import ManifestProblem, Op, PodSink, PodUpdate

from .decode import MAX_MANIFEST_BYTES, ManifestError, decode_document, make_static

__all__ = ["UrlSource"]

log = agent_logging.get_logger("sources")

_TIMEOUT_SECONDS = 10.0
_LOUD_FAILURES = 3  # failures logged as errors before dropping to -v 4 (upstream does the same)


class _FetchError(Exception):
    pass


class UrlSource:
    """Fetches static pod manifests from a URL and feeds the pod config merge (a :class:`PodSink`)."""

    def __init__(
        self, url: str, headers: Mapping[str, Sequence[str]], node_name: str, period: float, config: PodSink
    ) -> None:
        self.url = url
        self.headers = [(name, value) for name, values in headers.items() for value in values]
        self.node_name = node_name
        self.period = period if period > 0 else 1.0
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self._last_body: bytes | None = None  # the body of the set in force
        self._failures = 0

    async def run(self) -> None:
        """Forever: fetch, wait a period, fetch again. One HTTP session for the whole run."""
        async with self._new_session() as session:
            self._session = session
            try:
                while True:
                    await self.fetch_once()
                    await asyncio.sleep(self.period)
            finally:
                self._session = None

    def _new_session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_TIMEOUT_SECONDS))

    async def fetch_once(self) -> bool:
        """Fetch and apply the URL's pods once; True when a good set was taken
        (or the body is unchanged since the set in force)."""
        try:
            if self._session is not None:
                body = await self._get(self._session)
            else:
                async with self._new_session() as session:
                    body = await self._get(session)
            # Unchanged since the set in force: nothing to decode or send (as upstream).
            pods = None if body == self._last_body else self._decode(body)
        except _FetchError as exc:
            self._failed(str(exc))
            return False
        except ManifestError as exc:
            self._failed(exc.message)
            return False
        if self._failures:
            log.info("Successfully read pods from URL", url=self.url)
        self._failures = 0
        self.config.report_problems(podutil.SOURCE_HTTP, [])
        if pods is not None:
            self._last_body = body
            self.config.push(PodUpdate.make(Op.SET, podutil.SOURCE_HTTP, pods))
        return True

    async def _get(self, session: aiohttp.ClientSession) -> bytes:
        try:
            async with session.get(self.url, headers=self.headers, allow_redirects=True) as resp:
                body = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > MAX_MANIFEST_BYTES:
                        raise _FetchError(f"the response is larger than {MAX_MANIFEST_BYTES} bytes")
                if resp.status != 200:
                    raise _FetchError(f"GET returned {resp.status} {resp.reason or ''}".rstrip())
                return bytes(body)
        except asyncio.TimeoutError:
            raise _FetchError(f"no complete response within {_TIMEOUT_SECONDS:g}s") from None
        except aiohttp.ClientError as exc:
            raise _FetchError(f"GET failed: {exc or type(exc).__name__}") from None

    def _decode(self, body: bytes) -> list[dict]:
        if not body.strip():
            # Upstream: an empty body is an empty set (and it is worth a log line).
            log.info("Manifest URL returned an empty body, no pods from it", url=self.url)
            return []
        kind, raw = decode_document(body, self.url)
        pods = []
        for i, item in enumerate(raw):
            try:
                pods.append(make_static(item, node_name=self.node_name, source=podutil.SOURCE_HTTP, location=self.url))
            except ManifestError as exc:
                where = f"items[{i}]: " if kind != "Pod" else ""
                raise ManifestError(self.url, where + exc.message) from None
            except Exception as exc:  # a bug in defaulting/validation: keep the last good set
                log.error("Unexpected failure while checking a manifest", err=exc, url=self.url)
                raise ManifestError(self.url, f"internal error while checking the pod: {exc!r}") from None
        return pods

    def _failed(self, message: str) -> None:
        self._failures += 1
        if self._failures <= _LOUD_FAILURES:
            log.error("Failed to read pods from URL, keeping the last good set", url=self.url, err=message)
        elif self._failures == _LOUD_FAILURES + 1:
            log.error("Failed to read pods from URL; further failures are logged at -v 4", url=self.url, err=message)
        else:
            log.v(4).info("Failed to read pods from URL", url=self.url, err=message)
        self.config.report_problems(podutil.SOURCE_HTTP, [ManifestProblem(podutil.SOURCE_HTTP, self.url, message)])

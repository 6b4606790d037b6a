"""Webhook token authentication (``--authentication-token-webhook-*``).

A bearer token no other authenticator knows is POSTed to a backend as a
TokenReview (``authentication.orch.io/v1``, or ``v1beta1`` with
``--authentication-token-webhook-version``) holding the token and the audiences
asked for. The backend answers ``status.authenticated`` and the ``user``
(username, uid, groups, extra) and may narrow the ``audiences``; an answer whose
audiences share none with the ones asked is no user.

The backend is named by an orchconfig (the kubeconfig layout): the current
context's cluster gives the HTTPS URL and the CA, its user the credentials the
server presents (a client certificate and key, or a token).

Answers are cached for ``--authentication-token-webhook-cache-ttl`` (2m by
default), "yes" and "no" alike, by the SHA-256 of the token and the audiences.
A backend that cannot be reached or answers 429 or 5xx is asked again with a
growing delay (five tries in all, as upstream); one that still fails, or answers
nonsense, makes the token fail (401) and is logged; such failures are not cached.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import logging
import os
import ssl
import tempfile
import time
import urllib.parse
from typing import Any, Callable

import aiohttp
import orjson
import yaml

from ..api import names
from ..api.user import UserInfo
from .authenticator import AuthConfigError, TokenResult, Unauthorized

log = logging.getLogger("orch-apiserver.authn.webhook")

DEFAULT_CACHE_TTL_SECONDS = 120.0
VERSIONS = ("v1", "v1beta1")
REQUEST_TIMEOUT_SECONDS = 30.0
CACHE_SIZE = 4096
MAX_RESPONSE_BYTES = 1 << 20
RETRY_STEPS = 5
RETRY_INITIAL_SECONDS = 0.5
RETRY_FACTOR = 1.5


@dataclasses.dataclass(frozen=True)
class Backend:
    url: str
    ca_pem: bytes = b""
    cert_pem: bytes = b""
    key_pem: bytes = b""
    token: str = ""


def _file_or_data(entry: dict, key: str, base: str, where: str) -> bytes:
    if entry.get(key + "-data"):
        try:
            return base64.b64decode(str(entry[key + "-data"]), validate=True)
        except ValueError:
            raise AuthConfigError(f"{where}: {key}-data is not valid base64") from None
    if entry.get(key):
        path = str(entry[key])
        path = path if os.path.isabs(path) else os.path.join(base, path)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise AuthConfigError(f"{where}: {key} {path}: {exc.strerror or exc}") from None
    return b""


def load_backend(path: str) -> Backend:
    """The backend of a webhook orchconfig; AuthConfigError naming the file and problem."""
    where = f"--authentication-token-webhook-config-file {path}"
    try:
        with open(path, "rb") as fh:
            doc = yaml.safe_load(fh.read())
    except OSError as exc:
        raise AuthConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise AuthConfigError(f"{where}: not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise AuthConfigError(f"{where}: must be an orchconfig (apiVersion v1, kind Config)")

    def named(section: str, inner: str) -> dict[str, dict]:
        return {
            str(e.get("name")): e.get(inner) or {}
            for e in doc.get(section) or []
            if isinstance(e, dict) and isinstance(e.get(inner) or {}, dict)
        }

    contexts, clusters, users = named("contexts", "context"), named("clusters", "cluster"), named("users", "user")
    current = doc.get("current-context")
    if current and current in contexts:
        context = contexts[current]
    elif len(contexts) == 1:
        context = next(iter(contexts.values()))
    elif not contexts and len(clusters) == 1:
        context = {"cluster": next(iter(clusters)), "user": next(iter(users), "")}
    else:
        raise AuthConfigError(f"{where}: needs a current-context naming one of its contexts")
    cluster = clusters.get(str(context.get("cluster")))
    if not cluster or not cluster.get("server"):
        raise AuthConfigError(f"{where}: the current context's cluster has no server")
    url = str(cluster["server"])
    if urllib.parse.urlsplit(url).scheme != "https":
        raise AuthConfigError(f"{where}: the backend must be served over HTTPS, not {url}")
    base = os.path.dirname(os.path.abspath(path))
    user = users.get(str(context.get("user")), {})
    cert = _file_or_data(user, "client-certificate", base, where)
    key = _file_or_data(user, "client-key", base, where)
    if bool(cert) != bool(key):
        raise AuthConfigError(f"{where}: a client certificate needs its key, and a key its certificate")
    token = user.get("token") or ""
    if not isinstance(token, str):
        raise AuthConfigError(f"{where}: the user's token must be a string")
    return Backend(url, _file_or_data(cluster, "certificate-authority", base, where), cert, key, token)


def backend_ssl_context(backend: Backend) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=backend.ca_pem.decode("latin-1")) if backend.ca_pem else None
    ctx = ctx or ssl.create_default_context()
    if backend.cert_pem:
        # load_cert_chain reads files only: a private temporary file, removed at once.
        fd, tmp = tempfile.mkstemp(prefix="orch-authn-webhook-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(backend.cert_pem.rstrip(b"\n") + b"\n" + backend.key_pem)
            ctx.load_cert_chain(tmp)
        except ssl.SSLError as exc:
            raise AuthConfigError(f"the webhook client certificate or key cannot be used: {exc}") from None
        finally:
            os.unlink(tmp)
    return ctx


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


def user_from_status(status: dict) -> UserInfo:
    user = status.get("user") or {}
    if not isinstance(user, dict):
        raise ValueError("status.user must be an object")
    username, uid = user.get("username") or "", user.get("uid") or ""
    if not isinstance(username, str) or not isinstance(uid, str):
        raise ValueError("status.user.username and uid must be strings")
    extra_raw = user.get("extra") or {}
    if not isinstance(extra_raw, dict):
        raise ValueError("status.user.extra must be an object")
    extra = {str(k): _strings(v, f"status.user.extra[{k}]") for k, v in extra_raw.items()}
    return UserInfo(username, uid=uid, groups=_strings(user.get("groups"), "status.user.groups"), extra=extra)


class _Retryable(Exception):
    pass


class WebhookTokenAuthenticator:
    """Asks the backend about tokens (see the module doc)."""

    name = "webhook"

    def __init__(
        self,
        backend: Backend,
        version: str = "v1",
        cache_ttl: float = DEFAULT_CACHE_TTL_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        retry_backoff: float = RETRY_INITIAL_SECONDS,
    ):
        if version not in VERSIONS:
            raise AuthConfigError(
                f"invalid value {version!r} for flag --authentication-token-webhook-version: must be v1 or v1beta1"
            )
        self.backend = backend
        self.api_version = f"{names.AUTHENTICATION_GROUP}/{version}"
        self.cache_ttl = cache_ttl
        self.monotonic = monotonic
        self.retry_backoff = retry_backoff
        self._ssl = backend_ssl_context(backend)
        self._session: aiohttp.ClientSession | None = None
        # (sha256(token), audiences) -> (until, result or None for "not authenticated")
        self._cache: dict[tuple[bytes, tuple[str, ...]], tuple[float, TokenResult | None]] = {}
        self.calls = 0

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        key = (hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest(), tuple(audiences))
        now = self.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]
        result = await self._review(token, tuple(audiences))
        if self.cache_ttl > 0:
            if len(self._cache) >= CACHE_SIZE:
                del self._cache[next(iter(self._cache))]
            self._cache[key] = (now + self.cache_ttl, result)
        return result

    async def _post(self, body: bytes, headers: dict[str, str]) -> bytes:
        """POST the review; a connection error, 429 or 5xx is retried with a growing
        delay (upstream's backoff: 0.5 s, x1.5, RETRY_STEPS tries in all)."""
        delay = self.retry_backoff
        for attempt in range(RETRY_STEPS):
            self.calls += 1
            try:
                async with self._client().post(self.backend.url, data=body, headers=headers) as resp:
                    raw = await resp.content.read(MAX_RESPONSE_BYTES + 1)
                    if resp.status == 429 or resp.status >= 500:
                        raise _Retryable(f"HTTP {resp.status}")
                    if resp.status < 200 or resp.status >= 300:
                        raise ValueError(f"HTTP {resp.status}")
                    return raw
            except (aiohttp.ClientConnectionError, TimeoutError, _Retryable) as exc:
                if attempt + 1 >= RETRY_STEPS:
                    raise ValueError(str(exc) or type(exc).__name__) from None
            await asyncio.sleep(delay)
            delay *= RETRY_FACTOR
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _review(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = list(audiences)
        body = orjson.dumps({"apiVersion": self.api_version, "kind": "TokenReview", "metadata": {}, "spec": spec})
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.backend.token:
            headers["Authorization"] = "Bearer " + self.backend.token
        try:
            raw = await self._post(body, headers)
            if len(raw) > MAX_RESPONSE_BYTES:
                raise ValueError("response too large")
            review = orjson.loads(raw)
            if not isinstance(review, dict) or not isinstance(review.get("status") or {}, dict):
                raise ValueError("the response is not a TokenReview")
            status = review.get("status") or {}
            if status.get("authenticated") is not True:
                if status.get("error"):
                    log.info("the token webhook did not authenticate a token: %s", status.get("error"))
                return None
            user = user_from_status(status)
            answered = _strings(status.get("audiences"), "status.audiences")
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.warning("token webhook %s failed: %s", self.backend.url, exc or type(exc).__name__)
            raise Unauthorized(f"webhook: the token review backend failed: {exc or type(exc).__name__}") from None
        if not user.name:
            return None
        if audiences and answered:
            common = tuple(a for a in audiences if a in answered)
            if not common:
                log.info("the token webhook's audiences %s share none with %s", list(answered), list(audiences))
                return None
        else:
            common = audiences
        return TokenResult(user, common, still_valid=None)

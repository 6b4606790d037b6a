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

import hashlib
import logging
import time
from typing import Any, Callable

from ..api import names
from ..api.orchconfig import Target, WebhookConfigError, load_target
from ..api.user import UserInfo
from ..webhookclient.client import RETRY_INITIAL_SECONDS, CallError, JsonWebhook
from .authenticator import AuthConfigError, TokenResult, Unauthorized

log = logging.getLogger("orch-apiserver.authn.webhook")

DEFAULT_CACHE_TTL_SECONDS = 120.0
VERSIONS = ("v1", "v1beta1")
CACHE_SIZE = 4096

Backend = Target  # the token review backend: an orchconfig's cluster and user


def load_backend(path: str) -> Backend:
    """The backend of a webhook orchconfig; AuthConfigError naming the file and problem."""
    try:
        return load_target(path, f"--authentication-token-webhook-config-file {path}")
    except WebhookConfigError as exc:
        raise AuthConfigError(str(exc)) from None


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
        self.client = JsonWebhook(backend, retry_backoff)
        # (sha256(token), audiences) -> (until, result or None for "not authenticated")
        self._cache: dict[tuple[bytes, tuple[str, ...]], tuple[float, TokenResult | None]] = {}

    @property
    def calls(self) -> int:
        return self.client.calls

    async def close(self) -> None:
        await self.client.close()

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

    async def _review(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = list(audiences)
        doc = {"apiVersion": self.api_version, "kind": "TokenReview", "metadata": {}, "spec": spec}
        try:
            review = await self.client.post(doc)
            if not isinstance(review.get("status") or {}, dict):
                raise ValueError("the response is not a TokenReview")
            status = review.get("status") or {}
            if status.get("authenticated") is not True:
                if status.get("error"):
                    log.info("the token webhook did not authenticate a token: %s", status.get("error"))
                return None
            user = user_from_status(status)
            answered = _strings(status.get("audiences"), "status.audiences")
        except (CallError, ValueError) as exc:
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

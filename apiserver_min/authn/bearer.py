"""Bearer-token authentication: the token authenticators in order, with a cache of verified tokens."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any, Callable

from ..api.user import UserInfo
from .authenticator import (
    TOKEN_CACHE_SIZE,
    TOKEN_CACHE_TTL_SECONDS,
    TokenAuthenticator,
    TokenResult,
    Unauthorized,
    with_authenticated_group,
)


def bearer_token(request: Any) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, upstream's parse:
    other schemes and an empty token are no credential at all."""
    header = (request.headers.get("Authorization") or "").strip()
    if not header:
        return None
    parts = header.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class AudienceAgnostic:
    """Wraps a token authenticator whose tokens carry no audience (static and
    bootstrap tokens): they are good for this API's own audiences only, as
    upstream's WrapAudienceAgnosticToken."""

    def __init__(self, inner: TokenAuthenticator, api_audiences: tuple[str, ...]):
        self.inner = inner
        self.name = inner.name
        self.api_audiences = tuple(api_audiences)

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        res = await self.inner.authenticate_token(token, audiences)
        if res is None:
            return None
        wanted = audiences or self.api_audiences
        common = tuple(a for a in self.api_audiences if a in wanted)
        if not common:
            return None
        return dataclasses.replace(res, audiences=common)


class BearerTokenAuthenticator:
    """``Authorization: Bearer``: the token authenticators in order, first success wins.

    A bearer token that no authenticator accepts is an error ("invalid bearer
    token" when none had anything more specific to say)."""

    name = "bearer"

    def __init__(
        self,
        tokens: list[TokenAuthenticator],
        api_audiences: tuple[str, ...],
        cache_ttl: float = TOKEN_CACHE_TTL_SECONDS,
        cache_size: int = TOKEN_CACHE_SIZE,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.tokens = tokens
        self.api_audiences = tuple(api_audiences)
        self.cache_ttl = cache_ttl
        self.cache_size = cache_size
        self.monotonic = monotonic
        # (sha256(token), audiences) -> (result, its user with system:authenticated, reuse until)
        self._cache: dict[tuple[bytes, tuple[str, ...]], tuple[TokenResult, UserInfo, float]] = {}
        self.full_checks = 0  # tokens that went through the authenticators (the cache's misses)

    async def authenticate_token(self, token: str, audiences: tuple[str, ...] = ()) -> TokenResult:
        return (await self._lookup(token, tuple(audiences) or self.api_audiences))[0]

    async def _lookup(self, token: str, wanted: tuple[str, ...]) -> tuple[TokenResult, UserInfo]:
        key = (hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest(), wanted)
        hit = self._cache.get(key)
        if hit is not None:
            still_valid = hit[0].still_valid  # only results with a re-check are cached
            if self.monotonic() < hit[2] and still_valid is not None and still_valid():
                return hit[0], hit[1]
            self._cache.pop(key, None)
        self.full_checks += 1
        errors: list[str] = []
        for t in self.tokens:
            try:
                res = await t.authenticate_token(token, wanted)
            except Unauthorized as exc:
                errors.append(str(exc))
                continue
            if res is not None:
                user = with_authenticated_group(res.user)
                if res.still_valid is not None and self.cache_ttl > 0:
                    if len(self._cache) >= self.cache_size:
                        del self._cache[next(iter(self._cache))]
                    self._cache[key] = (res, user, self.monotonic() + self.cache_ttl)
                return res, user
        if not errors:
            raise Unauthorized("invalid bearer token")
        raise Unauthorized(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")

    async def authenticate(self, request: Any) -> UserInfo | None:
        token = bearer_token(request)
        if token is None:
            return None
        return (await self._lookup(token, self.api_audiences))[1]

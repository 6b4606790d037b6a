"""OpenID Connect ID tokens as bearer tokens (the ``--oidc-*`` flags).

One issuer is trusted. Its discovery document
(``<issuer>/.well-known/openid-configuration``) and its key set (``jwks_uri``) are
fetched over HTTPS when the server starts, and again only when a token names a key
id the set does not hold (at most once every ``REFRESH_INTERVAL_SECONDS``): the
provider is never asked about a single token.

A token is ours when its (unverified) ``iss`` is the issuer URL; any other token is
left to the next authenticator. One of ours must then be signed with one of the
allowed algorithms (``--oidc-signing-algs``; ``none`` never) by a key of the set,
name the client ID in ``aud``, and be inside ``exp``/``nbf``/``iat`` (with a small
leeway for clocks). The user is the username claim with its prefix, the groups
claim (a string or a list of strings) with its prefix; ``--oidc-required-claim``
pairs must all be present with exactly that value. With ``email`` as the username
claim, an ``email_verified`` claim that is present must be true (upstream's rule).

Verified tokens are remembered by the SHA-256 of their text until they expire, so
a client that sends the same token on every request pays for one signature check.
Why a token was refused goes to the log and TokenReview's error; a client only
ever sees 401.

PyJWT (the top-level ``jwt`` package, not this package's jwt.py, which signs and
verifies service-account tokens) does the JOSE part: signatures, key sets, iss and aud.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import ssl
import time
from typing import Any, Callable

import aiohttp
import jwt
import orjson

from ..api.user import UserInfo
from .authenticator import AuthConfigError, TokenResult, Unauthorized

log = logging.getLogger("orch-apiserver.authn.oidc")

DISCOVERY_PATH = "/.well-known/openid-configuration"
# Algorithms a provider may sign with (upstream's list); HMAC and none never.
SUPPORTED_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "ES256",
    "ES384",
    "ES512",
    "PS256",
    "PS384",
    "PS512",
)
DEFAULT_SIGNING_ALGS = ("RS256",)
LEEWAY_SECONDS = 30
REFRESH_INTERVAL_SECONDS = 10.0
FETCH_TIMEOUT_SECONDS = 10.0
CACHE_SIZE = 4096
MAX_DOCUMENT_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class OIDCConfig:
    issuer_url: str
    client_id: str
    username_claim: str = "sub"
    username_prefix: str | None = None  # None: the flag was not given
    groups_claim: str = ""
    groups_prefix: str = ""
    required_claims: tuple[tuple[str, str], ...] = ()
    ca_file: str = ""
    signing_algs: tuple[str, ...] = DEFAULT_SIGNING_ALGS

    def effective_username_prefix(self) -> str:
        """Upstream's defaulting: ``-`` disables the prefix; no prefix given means
        ``<issuer>#`` for every claim but ``email``."""
        if self.username_prefix == "-":
            return ""
        if not self.username_prefix and self.username_claim != "email":
            return self.issuer_url + "#"
        return self.username_prefix or ""


def ssl_context(ca_file: str) -> ssl.SSLContext:
    """The context for talking to the provider: its CA file, else the host's roots."""
    try:
        return ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise AuthConfigError(f"--oidc-ca-file {ca_file}: cannot load: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class _Verified:
    user: UserInfo
    exp: float


class ProviderKeys:
    """The issuer's discovery document and key set, fetched over HTTPS.

    ``fetch`` is what the network is for; tests hand in their own."""

    def __init__(
        self,
        issuer_url: str,
        ca_file: str = "",
        monotonic: Callable[[], float] = time.monotonic,
        refresh_interval: float = REFRESH_INTERVAL_SECONDS,
    ):
        self.issuer_url = issuer_url
        self.ssl = ssl_context(ca_file)
        self.monotonic = monotonic
        self.refresh_interval = refresh_interval
        self.keys: dict[str, jwt.PyJWK] = {}  # kid ("" for keys without one) -> key
        self.jwks_uri = ""
        self._last_attempt = float("-inf")
        self._lock = asyncio.Lock()
        self.fetches = 0  # key-set fetches, for tests and the benchmark

    async def _get_json(self, session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(url, ssl=self.ssl, allow_redirects=False) as resp:
            body = await resp.content.read(MAX_DOCUMENT_BYTES + 1)
            if resp.status != 200:
                raise ValueError(f"GET {url}: HTTP {resp.status}")
            if len(body) > MAX_DOCUMENT_BYTES:
                raise ValueError(f"GET {url}: document larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"GET {url}: not JSON: {exc}") from None

    async def _fetch(self) -> None:
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            if not self.jwks_uri:
                doc = await self._get_json(session, self.issuer_url.rstrip("/") + DISCOVERY_PATH)
                if not isinstance(doc, dict):
                    raise ValueError("the discovery document is not a JSON object")
                if doc.get("issuer") != self.issuer_url:
                    raise ValueError(
                        f"the discovery document names issuer {doc.get('issuer')!r}, not {self.issuer_url!r}"
                    )
                uri = doc.get("jwks_uri")
                if not isinstance(uri, str) or not uri.startswith("https://"):
                    raise ValueError(f"the discovery document's jwks_uri {uri!r} is not an HTTPS URL")
                self.jwks_uri = uri
            jwks = await self._get_json(session, self.jwks_uri)
        self.fetches += 1
        self.keys = parse_key_set(jwks)

    async def refresh(self, force: bool = False) -> bool:
        """Fetch the key set (and the discovery document the first time), unless one
        was attempted less than refresh_interval ago. True when a fetch succeeded."""
        async with self._lock:
            if not force:
                # Only refreshes asked for by tokens count: a token naming a new key right
                # after the start-up fetch still finds it.
                now = self.monotonic()
                if now - self._last_attempt < self.refresh_interval:
                    return False
                self._last_attempt = now
            try:
                await self._fetch()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
                log.warning("OIDC issuer %s: cannot fetch the signing keys: %s", self.issuer_url, exc)
                return False
            log.info("OIDC issuer %s: %d signing key(s) loaded from %s", self.issuer_url, len(self.keys), self.jwks_uri)
            return True

    async def key_for(self, kid: str) -> jwt.PyJWK | None:
        """The key a token names (or the only key, for a token without kid), fetching
        the set again (rate-limited) when it is not known."""
        key = self._pick(kid)
        if key is None and await self.refresh():
            key = self._pick(kid)
        return key

    def _pick(self, kid: str) -> jwt.PyJWK | None:
        if kid:
            return self.keys.get(kid)
        return next(iter(self.keys.values())) if len(self.keys) == 1 else None


def _numeric_date(claims: dict, key: str) -> float | None:
    v = claims.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unauthorized(f"oidc: verify token: the {key} claim is not a number")
    return float(v)


def check_times(claims: dict, now: float) -> None:
    """exp, nbf and iat against ``now``, each with LEEWAY_SECONDS for clock skew."""
    exp = _numeric_date(claims, "exp")
    if exp is not None and now > exp + LEEWAY_SECONDS:
        raise Unauthorized("oidc: verify token: the token has expired")
    for key in ("nbf", "iat"):
        t = _numeric_date(claims, key)
        if t is not None and now < t - LEEWAY_SECONDS:
            raise Unauthorized(f"oidc: verify token: the token is not valid yet ({key} in the future)")


def describe(exc: jwt.PyJWTError) -> str:
    """Why PyJWT refused a token, in this server's words (for the log and TokenReview)."""
    if isinstance(exc, jwt.InvalidAudienceError):
        return "the token's audience does not include the client ID"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "the token's issuer is not the issuer URL"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the token has no {exc.claim} claim"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "the signature does not verify with the issuer's key"
    return str(exc)


def parse_key_set(doc: Any) -> dict[str, jwt.PyJWK]:
    """The signing keys of a JWKS document by kid; keys meant for encryption and keys
    of unknown types are skipped, a set with no usable key is an error."""
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError("the key set is not a JSON object with a keys list")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in doc["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        if key.key_type not in ("RSA", "EC"):
            continue
        keys[str(entry.get("kid") or "")] = key
    if not keys:
        raise ValueError("the key set holds no usable RSA or EC signing key")
    return keys


class OIDCAuthenticator:
    """ID tokens of one OpenID Connect issuer (see the module doc)."""

    name = "oidc"

    def __init__(
        self,
        config: OIDCConfig,
        provider: ProviderKeys | None = None,
        clock: Callable[[], float] = time.time,
        cache_size: int = CACHE_SIZE,
    ):
        self.config = config
        self.provider = provider or ProviderKeys(config.issuer_url, config.ca_file)
        self.prefix = config.effective_username_prefix()
        self.clock = clock
        self.cache_size = cache_size
        self._verified: dict[bytes, _Verified] = {}
        self.signature_checks = 0

    async def start(self) -> None:
        """Load the keys when the server starts; a provider that is down is retried
        when the first token arrives (tokens are refused until then)."""
        await self.provider.refresh(force=True)

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        hit = self._verified.get(digest)
        if hit is not None:
            if self.clock() <= hit.exp + LEEWAY_SECONDS:
                return self._result(hit)
            del self._verified[digest]
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None  # not a JWT: another authenticator's token
        if unverified.get("iss") != self.config.issuer_url:
            return None  # another issuer's token
        alg = header.get("alg")
        if alg not in self.config.signing_algs:
            raise Unauthorized(
                f"oidc: token signed with {alg!r}, not one of the accepted algorithms "
                f"({', '.join(self.config.signing_algs)})"
            )
        kid = header.get("kid") or ""
        key = await self.provider.key_for(str(kid))
        if key is None:
            raise Unauthorized(f"oidc: no key with id {kid!r} in the issuer's key set")
        self.signature_checks += 1
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=list(self.config.signing_algs),
                audience=self.config.client_id,
                issuer=self.config.issuer_url,
                # The times are checked below, against this authenticator's clock.
                options={
                    "require": ["exp", "iss", "aud"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"oidc: verify token: {describe(exc)}") from None
        check_times(claims, self.clock())
        verified = _Verified(self.user_from_claims(claims), float(claims["exp"]))
        if len(self._verified) >= self.cache_size:
            del self._verified[next(iter(self._verified))]
        self._verified[digest] = verified
        return self._result(verified)

    def _result(self, v: _Verified) -> TokenResult:
        clock, not_after = self.clock, v.exp + LEEWAY_SECONDS
        return TokenResult(v.user, still_valid=lambda: clock() <= not_after)

    def user_from_claims(self, claims: dict) -> UserInfo:
        c = self.config
        if c.username_claim == "email" and "email_verified" in claims:
            verified = claims["email_verified"]
            if not isinstance(verified, bool):
                raise Unauthorized("oidc: parse 'email_verified' claim: not a boolean")
            if not verified:
                raise Unauthorized("oidc: email not verified")
        username = claims.get(c.username_claim)
        if not isinstance(username, str) or not username:
            raise Unauthorized(f"oidc: claim {c.username_claim!r} is missing or not a non-empty string")
        groups: tuple[str, ...] = ()
        if c.groups_claim and c.groups_claim in claims:
            raw = claims[c.groups_claim]
            if isinstance(raw, str):
                groups = (raw,)
            elif isinstance(raw, list) and all(isinstance(g, str) for g in raw):
                groups = tuple(raw)
            else:
                raise Unauthorized(f"oidc: claim {c.groups_claim!r} is neither a string nor a list of strings")
            groups = tuple(c.groups_prefix + g for g in groups)
        for key, want in c.required_claims:
            if key not in claims:
                raise Unauthorized(f"oidc: required claim {key} not present in ID token")
            if claims[key] != want:
                raise Unauthorized(f"oidc: required claim {key} does not have the required value")
        return UserInfo(self.prefix + username, groups=groups)

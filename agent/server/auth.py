"""Who may call the agent's HTTPS server, and what they may do there.

Authentication, in upstream's order (a union that stops at the first answer):

1. **x509**: a client certificate the TLS handshake verified against the client
   CA (``--client-ca-file``; in cluster mode the cluster CA of the connection
   config when the flag is not given) names the user (CN) and groups (O);
2. **bearer token** (``--authentication-token-webhook``): the token is sent to the
   API server in a ``TokenReview``; a yes is cached for
   ``--authentication-token-webhook-cache-ttl``. A token the server does not
   know, or a failed review, is a 401 - never anonymous (upstream's "invalid
   bearer token");
3. **anonymous** (``--anonymous-auth``): ``system:anonymous`` in
   ``system:unauthenticated``; without it a request with no credentials is a 401.

Authorization: ``AlwaysAllow``, or ``Webhook``: a ``SubjectAccessReview`` for
the request's attributes, with yes cached for
``--authorization-webhook-cache-authorized-ttl`` and no for
``--authorization-webhook-cache-unauthorized-ttl``. A review that cannot be made
is an authorization error (500), as upstream answers it.

The attributes of a request are upstream's (``GetRequestAttributes``): resource
``nodes``, name the node, API version ``v1``, subresource ``proxy`` except for
``/stats``, ``/metrics``, ``/logs`` and ``/spec`` (``stats``, ``metrics``,
``log``, ``spec``); the verb from the HTTP method (GET get, POST create, PUT
update, PATCH patch, DELETE delete, anything else the empty verb).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from typing import Any, Awaitable, Callable, Mapping

from apiserver_min.api import names

from .. import logging as agent_logging

__all__ = [
    "UserInfo",
    "ANONYMOUS",
    "RequestAttributes",
    "request_attributes",
    "http_verb",
    "subresource_for_path",
    "AuthenticationError",
    "AuthorizationError",
    "TTLCache",
    "X509Authenticator",
    "TokenWebhookAuthenticator",
    "Authenticator",
    "WebhookAuthorizer",
    "always_allow",
    "Review",
    "api_review",
    "TOKEN_REVIEW_PATH",
    "SUBJECT_ACCESS_REVIEW_PATH",
]

log = agent_logging.get_logger("serverauth")

TOKEN_REVIEW_PATH = f"/apis/{names.AUTHENTICATION_GROUP}/v1/tokenreviews"
SUBJECT_ACCESS_REVIEW_PATH = f"/apis/{names.AUTHORIZATION_GROUP}/v1/subjectaccessreviews"

# A review: POST this body to this path, the created object back (or an exception).
Review = Callable[[str, dict], Awaitable[dict]]


@dataclasses.dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict, hash=False, compare=False)


ANONYMOUS = UserInfo(names.USER_ANONYMOUS, (names.GROUP_UNAUTHENTICATED,))


class AuthenticationError(Exception):
    """Credentials were presented and cannot be accepted (always a 401)."""


class AuthorizationError(Exception):
    """No decision could be made (upstream answers 500 "Authorization error")."""


# --- request attributes -------------------------------------------------------------------

_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/spec", "spec"))


def http_verb(method: str) -> str:
    """The API verb of an HTTP method; other methods (HEAD, OPTIONS) get upstream's empty verb."""
    return _VERBS.get(method.upper(), "")


def subresource_for_path(path: str) -> str:
    for prefix, sub in _SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            return sub
    return "proxy"


@dataclasses.dataclass(frozen=True)
class RequestAttributes:
    user: UserInfo
    verb: str
    subresource: str
    name: str
    path: str
    resource: str = "nodes"
    api_group: str = ""
    api_version: str = "v1"
    namespace: str = ""

    def describe(self) -> str:
        return f"user={self.user.name}, verb={self.verb}, resource={self.resource}, subresource={self.subresource}"


def request_attributes(user: UserInfo, method: str, path: str, node_name: str) -> RequestAttributes:
    return RequestAttributes(
        user=user, verb=http_verb(method), subresource=subresource_for_path(path), name=node_name, path=path
    )


# --- a small expiring cache -----------------------------------------------------------------


class TTLCache:
    """Entries that expire after their own TTL; bounded (the oldest go first)."""

    def __init__(self, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self._data: dict[Any, tuple[float, Any]] = {}
        self.max_entries = max_entries
        self.clock = clock

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self._data.get(key)
        if hit is None:
            return False, None
        expires, value = hit
        if self.clock() >= expires:
            del self._data[key]
            return False, None
        return True, value

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._data) >= self.max_entries and key not in self._data:
            now = self.clock()
            for k in [k for k, (exp, _) in self._data.items() if exp <= now]:
                del self._data[k]
            while len(self._data) >= self.max_entries:
                del self._data[next(iter(self._data))]
        self._data[key] = (self.clock() + ttl, value)

    def __len__(self) -> int:
        return len(self._data)


# --- authenticators ---------------------------------------------------------------------------


# The subject of a certificate as the ``ssl`` module decodes it: a sequence of
# relative distinguished names, each a sequence of (attribute name, value) pairs.
Subject = tuple[tuple[tuple[str, str], ...], ...]


def _peer_subject(request) -> Subject | None:
    """The subject of the client's certificate, as the handshake verified it against
    the client CA (``getpeercert()`` answers with a decoded certificate only then)."""
    transport = getattr(request, "transport", None)
    sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
    if sslobj is None:
        return None
    try:
        cert = sslobj.getpeercert()
    except ValueError:  # the handshake is not done (cannot happen for a request)
        return None
    return tuple(cert.get("subject") or ()) if cert else None


class X509Authenticator:
    """The user of a client certificate. The handshake already verified the chain
    against the client CA (the server's SSL context trusts only that bundle, and a
    certificate that does not verify fails the handshake); here the subject
    becomes the user: CN the name, each O a group."""

    def __init__(self, peer_subject: Callable[[Any], Subject | None] = _peer_subject) -> None:
        self._peer = peer_subject

    def __call__(self, request) -> UserInfo | None:
        subject = self._peer(request)
        if not subject:
            return None
        attrs = [pair for rdn in subject for pair in rdn]
        cns = [str(v) for k, v in attrs if k == "commonName"]
        name = cns[0] if cns else ""
        if not name:
            raise AuthenticationError("the client certificate has no common name")
        groups = tuple(str(v) for k, v in attrs if k == "organizationName")
        return UserInfo(name, groups)


def _bearer_token(request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class TokenWebhookAuthenticator:
    """Bearer tokens checked with a ``TokenReview`` at the API server.

    Only successful reviews are cached (for ``ttl`` seconds): a rejected token may
    be valid a moment later (a new service account token), and upstream caches
    failures only briefly too."""

    def __init__(
        self, review: Review | None, ttl: float, *, audiences: tuple[str, ...] = (), cache: TTLCache | None = None
    ) -> None:
        self.review = review
        self.ttl = ttl
        self.audiences = audiences
        self.cache = cache if cache is not None else TTLCache()
        self.reviews = 0  # reviews sent (tests)

    async def __call__(self, request) -> UserInfo | None:
        token = _bearer_token(request)
        if token is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        hit, user = self.cache.get(key)
        if hit:
            return user
        if self.review is None:
            raise AuthenticationError("token review is not possible yet: no connection to the API server")
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        body = {"apiVersion": f"{names.AUTHENTICATION_GROUP}/v1", "kind": "TokenReview", "spec": spec}
        self.reviews += 1
        try:
            result = await self.review(TOKEN_REVIEW_PATH, body)
        except Exception as exc:  # noqa: BLE001 - any failure of the review is a 401, never a 500
            raise AuthenticationError(f"token review failed: {exc}") from exc
        status = result.get("status") or {}
        if not status.get("authenticated"):
            raise AuthenticationError(status.get("error") or "invalid bearer token")
        info = status.get("user") or {}
        extra = {k: tuple(v) for k, v in (info.get("extra") or {}).items() if isinstance(v, list)}
        user = UserInfo(str(info.get("username", "")), tuple(info.get("groups") or ()), str(info.get("uid", "")), extra)
        if not user.name:
            raise AuthenticationError("token review answered without a user name")
        self.cache.put(key, user, self.ttl)
        return user


class Authenticator:
    """The union: x509, then bearer token, then anonymous. ``None`` means 401."""

    def __init__(
        self,
        *,
        x509_auth: X509Authenticator | None = None,
        token_auth: TokenWebhookAuthenticator | None = None,
        anonymous: bool = False,
    ) -> None:
        self.x509 = x509_auth
        self.token = token_auth
        self.anonymous = anonymous

    async def __call__(self, request) -> UserInfo | None:
        try:
            if self.x509 is not None:
                user = self.x509(request)
                if user is not None:
                    return user
            if self.token is not None:
                user = await self.token(request)
                if user is not None:
                    return user
        except AuthenticationError as exc:
            log.v(2).info("Unable to authenticate the request", err=exc, path=request.path)
            return None
        return ANONYMOUS if self.anonymous else None


# --- authorizers ----------------------------------------------------------------------------


def always_allow(attrs: RequestAttributes) -> tuple[bool, str]:
    return True, ""


class WebhookAuthorizer:
    """``SubjectAccessReview`` at the API server, with upstream's two caches."""

    def __init__(
        self, review: Review | None, *, authorized_ttl: float, unauthorized_ttl: float, cache: TTLCache | None = None
    ) -> None:
        self.review = review
        self.authorized_ttl = authorized_ttl
        self.unauthorized_ttl = unauthorized_ttl
        self.cache = cache if cache is not None else TTLCache()
        self.reviews = 0
        self._inflight: dict[Any, asyncio.Future] = {}

    @staticmethod
    def review_body(attrs: RequestAttributes) -> dict:
        u = attrs.user
        spec: dict[str, Any] = {
            "user": u.name,
            "groups": list(u.groups),
            "resourceAttributes": {
                "namespace": attrs.namespace,
                "verb": attrs.verb,
                "group": attrs.api_group,
                "version": attrs.api_version,
                "resource": attrs.resource,
                "subresource": attrs.subresource,
                "name": attrs.name,
            },
        }
        if u.uid:
            spec["uid"] = u.uid
        if u.extra:
            spec["extra"] = {k: list(v) for k, v in u.extra.items()}
        return {"apiVersion": f"{names.AUTHORIZATION_GROUP}/v1", "kind": "SubjectAccessReview", "spec": spec}

    @staticmethod
    def _key(attrs: RequestAttributes) -> tuple:
        u = attrs.user
        return (
            u.name,
            u.groups,
            u.uid,
            tuple(sorted((k, tuple(v)) for k, v in u.extra.items())),
            attrs.verb,
            attrs.resource,
            attrs.subresource,
            attrs.name,
            attrs.namespace,
            attrs.api_group,
            attrs.api_version,
        )

    async def __call__(self, attrs: RequestAttributes) -> tuple[bool, str]:
        key = self._key(attrs)
        hit, decision = self.cache.get(key)
        if hit:
            return decision
        # Concurrent identical requests share one review.
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            decision = await self._ask(attrs)
            fut.set_result(decision)
            return decision
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            self._inflight.pop(key, None)

    async def _ask(self, attrs: RequestAttributes) -> tuple[bool, str]:
        if self.review is None:
            raise AuthorizationError("access review is not possible yet: no connection to the API server")
        self.reviews += 1
        try:
            result = await self.review(SUBJECT_ACCESS_REVIEW_PATH, self.review_body(attrs))
        except Exception as exc:  # noqa: BLE001 - any failure of the review is a refusal, never an answer
            raise AuthorizationError(f"subject access review failed: {exc}") from exc
        status = result.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        reason = str(status.get("reason") or status.get("evaluationError") or "")
        decision = (allowed, reason)
        self.cache.put(self._key(attrs), decision, self.authorized_ttl if allowed else self.unauthorized_ttl)
        return decision


def api_review(client_getter: Callable[[], Any]) -> Review:
    """A review through the agent's API client (JSON bodies: both review kinds are
    small and the server's protobuf decoders need not know them). ``client_getter``
    returns None until the agent has joined the cluster."""

    async def review(path: str, body: dict) -> dict:
        client = client_getter()
        if client is None:
            raise ConnectionError("the agent has no connection to the API server yet")
        return await client.request("POST", path, body=body, content_type=names.MEDIA_JSON, retry=False)

    return review

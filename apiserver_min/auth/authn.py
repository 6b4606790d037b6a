"""Authentication: who is asking. The chain every request passes before authorization.

Request authenticators (client certificate, bearer token) are asked in order; the
first that recognises the request decides. A credential that is presented but bad
(an unknown, expired, forged or revoked bearer token) makes the request 401 even
when anonymous requests are allowed, as upstream's fail-on-error union does. A
request with no credential at all becomes ``system:anonymous`` /
``system:unauthenticated`` when ``--anonymous-auth`` is on, else 401. Every
authenticated user is put in ``system:authenticated``.

Bearer tokens go through a second, inner chain of token authenticators (static
token file, bootstrap tokens, service-account JWTs), which ``TokenReview`` also
uses directly with the audiences the review asks about.

Lookups of API objects (bootstrap-token secrets, service accounts, pods) go to
the watch cache first; a miss is confirmed against storage so that an object
created a moment ago is seen and one deleted a moment ago is not.

Successful bearer-token results are cached briefly (upstream caches token
successes for 10 s), keyed by the SHA-256 of the token and the audiences, so a
client that sends the same token on every request pays for one full check. Unlike
a plain TTL cache, every hit also runs the result's own cheap re-check (the
watch-cache entries it rests on are unchanged, the token has not expired), so
deleting a bootstrap-token secret, a service account or a bound pod ends its
tokens as soon as the watch cache sees it. Failures are never cached. Client
certificates are verified here, not in the TLS handshake (tlsverify.py), and map
to users by their subject, remembered per certificate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from cryptography import x509
from cryptography.x509.oid import NameOID

from ..api import names
from ..api import status as st
from ..server.admission import UserInfo
from .tlsverify import CertificateError, ClientCertificateVerifier, peer_certificates

if TYPE_CHECKING:
    from ..api.kinds import Registry
    from ..server.store import Store
    from ..server.watchcache import Entry, WatchCache

log = logging.getLogger("orch-apiserver.authn")

ANONYMOUS = UserInfo(names.USER_ANONYMOUS, groups=(names.GROUP_UNAUTHENTICATED,))


class Unauthorized(Exception):
    """A credential was presented and is not valid. The message is for logs and
    TokenReview's status.error; clients of the 401 only see "Unauthorized"."""


class AuthConfigError(ValueError):
    """Authentication set-up that cannot work (a bad token file or key file); the
    message names the file and, where it helps, the line."""


@dataclasses.dataclass(frozen=True)
class TokenResult:
    user: UserInfo
    audiences: tuple[str, ...] = ()
    # For the bearer success cache: a cheap re-check that the result still holds (the
    # objects it rests on are unchanged in the watch cache, the token has not expired).
    # None: the result must not be cached (e.g. it rests on a storage read).
    still_valid: Callable[[], bool] | None = dataclasses.field(default=None, compare=False, repr=False)


def always_valid() -> bool:
    """still_valid of results that cannot go stale (the static token file is read once)."""
    return True


# Upstream's token success cache TTL; the per-hit re-check keeps revocation immediate,
# the TTL bounds how long a result is reused at all.
TOKEN_CACHE_TTL_SECONDS = 10.0
TOKEN_CACHE_SIZE = 4096
X509_CACHE_SIZE = 1024


class Authenticator(Protocol):
    """Looks at one request. None: nothing here for me (try the next one);
    raises Unauthorized for a credential it owns that is bad."""

    name: str

    async def authenticate(self, request: Any) -> UserInfo | None: ...


class TokenAuthenticator(Protocol):
    """Looks at one bearer token, for the given target audiences (never empty).
    None: not my kind of token; raises Unauthorized for one of mine that is bad."""

    name: str

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None: ...


def with_authenticated_group(user: UserInfo) -> UserInfo:
    """Upstream's AuthenticatedGroupAdder: add system:authenticated unless the user
    already carries it or system:unauthenticated."""
    if names.GROUP_AUTHENTICATED in user.groups or names.GROUP_UNAUTHENTICATED in user.groups:
        return user
    # The constructor, not dataclasses.replace: this runs on every authenticated request.
    return UserInfo(user.name, user.uid, tuple(user.groups) + (names.GROUP_AUTHENTICATED,), user.extra)


def go_list(values: Iterable[str]) -> str:
    """A string list as upstream's errors print it: ["a" "b"]."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


# --- client certificates ------------------------------------------------------------------------

class X509Authenticator:
    """The TLS client certificate: CN is the user name, each O a group.

    The handshake asks for a certificate without verifying it (tlsverify.py), so the
    certificate is verified here from its DER form against the client CA bundle, as
    upstream's x509 authenticator does: one that does not verify (another CA,
    expired, not yet valid, a CA certificate, no client-auth usage) is a bad
    credential, a 401 even when anonymous requests are allowed. A verified
    certificate without a common name is no opinion (upstream). ``getpeercert()``'s
    dict form is never used: it would describe a certificate nobody verified."""

    name = "x509"

    def __init__(self, verifier: ClientCertificateVerifier, cache_size: int = X509_CACHE_SIZE,
                 peer: Callable[[Any], tuple[bytes, tuple[bytes, ...]] | None] | None = None):
        self.verifier = verifier
        # SHA-256 of the verified DER -> user (with system:authenticated): the user depends
        # on the certificate alone; the verifier decides on every request whether it still holds.
        self._users: dict[bytes, UserInfo | None] = {}
        self.cache_size = cache_size
        self._peer = peer or (lambda request: peer_certificates(getattr(request, "transport", None)))

    async def authenticate(self, request: Any) -> UserInfo | None:
        presented = self._peer(request)
        if presented is None:
            return None
        try:
            verified = self.verifier.verify(presented[0], presented[1])
        except CertificateError as exc:
            raise Unauthorized(str(exc)) from None
        try:
            return self._users[verified.digest]
        except KeyError:
            pass
        user = user_from_certificate(verified.certificate)
        if user is not None:
            user = with_authenticated_group(user)
        if len(self._users) >= self.cache_size:
            del self._users[next(iter(self._users))]
        self._users[verified.digest] = user
        return user


def user_from_certificate(cert: x509.Certificate) -> UserInfo | None:
    """Upstream's CommonNameUserConversion: CN the user, each O a group (in order);
    no common name, no opinion."""
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(cns[0].value) if cns else ""
    if not cn:
        return None
    orgs = tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return UserInfo(cn, groups=orgs)


# --- bearer tokens ------------------------------------------------------------------------------

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

    def __init__(self, tokens: list[TokenAuthenticator], api_audiences: tuple[str, ...],
                 cache_ttl: float = TOKEN_CACHE_TTL_SECONDS, cache_size: int = TOKEN_CACHE_SIZE,
                 monotonic: Callable[[], float] = time.monotonic):
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
            if self.monotonic() < hit[2] and hit[0].still_valid():
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


# --- the chain ----------------------------------------------------------------------------------

class AuthenticationChain:
    """All request authenticators, the authenticated-group adder and anonymous."""

    def __init__(self, authenticators: list[Authenticator], bearer: BearerTokenAuthenticator,
                 anonymous: bool = True):
        self.authenticators = authenticators
        self.bearer = bearer
        self.anonymous = anonymous

    async def authenticate(self, request: Any) -> UserInfo:
        """The user of a request (ANONYMOUS when allowed and nothing was presented);
        Unauthorized otherwise."""
        errors: list[str] = []
        for a in self.authenticators:
            try:
                user = await a.authenticate(request)
            except Unauthorized as exc:
                errors.append(str(exc))
                continue
            if user is not None:
                return with_authenticated_group(user)
        if errors:
            raise Unauthorized("; ".join(errors))
        if self.anonymous:
            return ANONYMOUS
        raise Unauthorized("no credentials and anonymous requests are disabled (--anonymous-auth=false)")

    async def review_token(self, token: str, audiences: tuple[str, ...] = ()) -> TokenResult:
        """TokenReview: the bearer chain alone, for the asked audiences (default:
        this API's); Unauthorized when the token is not good for any of them."""
        res = await self.bearer.authenticate_token(token, tuple(audiences))
        return dataclasses.replace(res, user=with_authenticated_group(res.user))


async def authenticate_or_401(chain: AuthenticationChain, request: Any) -> UserInfo | None:
    """What the request path needs: the user (None for anonymous, which the
    authorizer treats as system:anonymous) or a 401 Status."""
    try:
        user = await chain.authenticate(request)
    except Unauthorized as exc:
        peer = request.remote if hasattr(request, "remote") else ""
        log.info("unable to authenticate the request from %s: %s", peer, exc)
        raise st.unauthorized("Unauthorized") from None
    return None if user is ANONYMOUS else user


# --- object lookups for authenticators -----------------------------------------------------------

class ObjectLookup:
    """Objects by namespace and name: the watch cache first, storage to confirm a miss.

    Authenticators run on every request, so the cache answers; but the cache
    trails storage by an event, and a token minted for an account created a moment
    ago must work, so a miss (or a uid that does not match) is read again from
    storage before it counts."""

    def __init__(self, cache: "WatchCache", registry: "Registry", store: "Store"):
        self.cache = cache
        self.registry = registry
        self.store = store

    def _kind(self, resource: str):
        kind = self.registry.by_resource("", "v1", resource)
        if kind is None:
            raise LookupError(f"no core kind for {resource}")
        return kind

    def cached(self, resource: str, namespace: str, name: str) -> "Entry | None":
        from ..server.store import key_prefix, object_key
        kind = self._kind(resource)
        return self.cache.cache(key_prefix(kind)).items.get(object_key(kind, namespace, name))

    def entry_getter(self, resource: str, namespace: str, name: str) -> Callable[[], "Entry | None"]:
        """A function answering the object's current watch-cache entry (None when absent),
        with the key worked out once: what cached authentication results re-check per hit."""
        from ..server.store import key_prefix, object_key
        kind = self._kind(resource)
        prefix, key, cache = key_prefix(kind), object_key(kind, namespace, name), self.cache
        return lambda: cache.cache(prefix).items.get(key)

    async def get(self, resource: str, namespace: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        e = self.cached(resource, namespace, name)
        if e is not None:
            return e.object()
        return await self.live(resource, namespace, name)

    async def live(self, resource: str, namespace: str, name: str) -> dict | None:
        try:
            return await self.store.get_object(self._kind(resource), namespace, name)
        except st.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    async def live_state(self, resource: str, namespace: str, name: str, uid: str) -> str:
        """"ok", "missing", "uid" (another object of that name) or "deleting", with a
        cache hit on the expected uid answering at once."""
        e = self.cached(resource, namespace, name)
        if e is not None and e.uid == uid:
            return "deleting" if e.deleting else "ok"
        obj = await self.live(resource, namespace, name)
        if obj is None:
            return "missing"
        md = obj.get("metadata") or {}
        if md.get("uid") != uid:
            return "uid"
        return "deleting" if md.get("deletionTimestamp") else "ok"


# --- the reviews: TokenReview and SelfSubjectReview ----------------------------------------------

REVIEW_RESOURCES = {"tokenreviews": "TokenReview", "selfsubjectreviews": "SelfSubjectReview"}
# kubectl auth whoami posts to the upstream group, an alias of ours (v1 from 1.28,
# v1beta1 / v1alpha1 before; only v1 is served on our spelling).
UPSTREAM_SELF_SUBJECT_REVIEW_VERSIONS = ("v1", "v1beta1", "v1alpha1")


def user_info_json(user: UserInfo) -> dict:
    out: dict[str, Any] = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra.items()}
    return out


def _str_list(value: Any, field: str, kind: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        from ..api.validation import FieldError
        from ..server.strategy import causes
        raise st.invalid(kind, "", causes([FieldError.invalid(field, value, "must be a list of strings")]),
                         names.AUTHENTICATION_GROUP)
    return tuple(value)


# --- the facade the server wires -----------------------------------------------------------------

class Authentication:
    """Everything authentication adds to the server: the request chain, the
    TokenReview / SelfSubjectReview endpoints and the TokenRequest sub-resource.

    Built from the flags when the server is built: the token file and key files
    are read now, so a bad one stops the start with a message naming it, and the
    service-account signing key is generated on first start when none was given."""

    def __init__(self, server: Any):
        from . import serviceaccount, tokens

        self.server = server
        opts = server.opts
        self.lookup = ObjectLookup(server.cache, server.registry, server.store)
        token_authenticators: list[Any] = []
        if opts.token_auth_file:
            token_authenticators.append(AudienceAgnostic(tokens.StaticTokens.from_file(opts.token_auth_file),
                                                         opts.api_audiences))
        if opts.enable_bootstrap_token_auth:
            token_authenticators.append(AudienceAgnostic(tokens.BootstrapTokens(self.lookup), opts.api_audiences))
        keys = serviceaccount.load_keys(opts)
        self.service_accounts = serviceaccount.ServiceAccountTokenAuthenticator(
            keys.verification_keys, opts.service_account_issuers,
            self.lookup if opts.service_account_lookup else None)
        token_authenticators.append(self.service_accounts)
        self.bearer = BearerTokenAuthenticator(token_authenticators, opts.api_audiences)
        # --client-ca-file, else the cluster CA (created after this, at start: read lazily).
        self.client_certificates = ClientCertificateVerifier(server.client_ca)
        self.chain = AuthenticationChain([X509Authenticator(self.client_certificates), self.bearer], self.bearer,
                                         anonymous=opts.anonymous_auth)
        issuer = (serviceaccount.TokenIssuer(keys.signing_key, opts.service_account_issuers[0])
                  if keys.signing_key is not None else None)
        self.token_requests = serviceaccount.TokenRequests(server, issuer, opts.api_audiences,
                                                           opts.service_account_max_token_expiration)

    async def authenticate(self, request: Any) -> UserInfo | None:
        """The request's user, None for anonymous; a 401 ApiError for bad credentials."""
        return await authenticate_or_401(self.chain, request)

    # --- reviews --------------------------------------------------------------------------------
    @staticmethod
    def handles(info: Any) -> bool:
        """True for the review endpoints: ours (also on the group's upstream alias), plus
        the older SelfSubjectReview versions kubectl hard-codes on the alias (served,
        but not listed in discovery)."""
        if not info.is_resource or info.resource not in REVIEW_RESOURCES or info.group != names.AUTHENTICATION_GROUP:
            return False
        if info.version == "v1" and info.kind is not None:  # registered and enabled
            return True
        return (info.alias is not None and info.resource == "selfsubjectreviews"
                and info.version in UPSTREAM_SELF_SUBJECT_REVIEW_VERSIONS)

    async def handle(self, request: Any, info: Any, user: UserInfo) -> Any:
        from aiohttp import web

        from ..server import codec

        kind = REVIEW_RESOURCES[info.resource]
        if info.verb != "create" or info.name or info.subresource:
            raise st.method_not_allowed(f"{info.verb} is not supported on {info.resource}: reviews are create-only")
        if info.namespace:
            raise st.ApiError(404, "NotFound", "the server could not find the requested resource")
        handlers = self.server.handlers
        api_version = f"{info.requested_group}/{info.version}"  # the spelling the client used
        if kind == "SelfSubjectReview":
            # The review needs no input; kubectl sends protobuf, which is read and ignored.
            await handlers._read_body(request)
            out: dict[str, Any] = {"kind": kind, "apiVersion": api_version,
                                   "metadata": {"creationTimestamp": None},
                                   "status": {"userInfo": user_info_json(user)}}
        else:
            kind_info = info.kind
            obj = await handlers._decode_object(request, kind_info, expect_kind=kind)
            spec = obj.get("spec")
            if not isinstance(spec, dict):
                raise st.bad_request("spec: must be an object")
            token = spec.get("token")
            if not isinstance(token, str) or not token:
                raise st.bad_request("token is required for TokenReview")
            audiences = _str_list(spec.get("audiences"), "spec.audiences", kind)
            status: dict[str, Any] = {"authenticated": False, "user": {}}
            try:
                res = await self.chain.review_token(token, audiences)
            except Unauthorized as exc:
                status["error"] = str(exc)
            else:
                status = {"authenticated": True, "user": user_info_json(res.user),
                          "audiences": list(res.audiences)}
            md = dict(obj.get("metadata") or {})
            md.setdefault("creationTimestamp", None)
            out = {"kind": kind, "apiVersion": api_version, "metadata": md, "spec": spec, "status": status}
        accept = request.headers.get("Accept") or ""
        if "yaml" in accept and "json" not in accept:
            resp = web.Response(body=codec.dump_yaml(out), status=201, content_type="application/yaml")
        else:
            resp = web.Response(body=codec.dumps(out), status=201, content_type="application/json")
        return handlers._with_warnings(request, resp)  # the body's field-validation warnings

    # --- serviceaccounts/token --------------------------------------------------------------------
    async def token_request(self, request: Any, info: Any, kind: Any, user: UserInfo) -> Any:
        return await self.token_requests.create(request, info, kind, user)

"""Service-account tokens: keys, signing and verifying
(the ServiceAccount admission plugin, TokenRequest and the controller that gives
every namespace its ``default`` account live in admission/, server/ and controllers/).

Tokens are upstream's bound service-account tokens: a JWT signed with the
server's key, with ``iss``, ``sub`` (``system:serviceaccount:<ns>:<name>``),
``aud``, ``exp``, ``iat``, ``nbf`` and a private ``orch.io`` claim naming the
namespace, the account (name, uid) and, for bound tokens, the pod or secret
(name, uid). With ``--service-account-lookup`` (default) a token is revoked as
soon as its account, pod or secret is gone or replaced by one with another uid.

Verified tokens are kept in a small LRU keyed by the token text, so a client
that sends the same token on every request costs one signature check; expiry
and the lookups are still checked on every use (cheap: watch-cache reads).

Keys: ``--service-account-signing-key-file`` signs; ``--service-account-key-file``
(repeatable) verifies, plus the signing key itself. With neither flag a key is
generated on first start at DATA_DIR/pki/sa.key and kept, so TokenRequest works
out of the box.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable

from cryptography.hazmat.primitives.asymmetric import rsa

from ..api import names
from ..api.user import UserInfo, service_account_groups, service_account_username
from ..api.validation import go_list
from ..pki import key_pem, write_private
from ..registry.lookup import ObjectLookup
from . import jwt
from .authenticator import AuthConfigError, TokenResult, Unauthorized

if TYPE_CHECKING:
    pass

log = logging.getLogger("orch-apiserver.serviceaccounts")

# Clock skew allowed on exp and nbf, as upstream's JWT library.
LEEWAY_SECONDS = 60
TOKEN_CACHE_SIZE = 4096
GENERATED_KEY_NAME = "sa.key"
GENERATED_KEY_BITS = 2048


def user_info(namespace: str, name: str, uid: str, pod: tuple[str, str] | None = None) -> UserInfo:
    extra: dict[str, tuple[str, ...]] = {}
    if pod is not None:
        extra = {names.USER_EXTRA_POD_NAME: (pod[0],), names.USER_EXTRA_POD_UID: (pod[1],)}
    return UserInfo(
        service_account_username(namespace, name),
        uid=uid,
        groups=service_account_groups(namespace),
        extra=extra,
    )


# --- keys ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class ServiceAccountKeys:
    signing_key: jwt.PrivateKey | None
    verification_keys: list[jwt.PublicKey]
    generated: str = ""  # the path of a key generated on this start


def _read(path: str, flag: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise AuthConfigError(f"{flag} {path}: cannot read: {exc}") from None


def load_keys(opts: Any) -> ServiceAccountKeys:
    """The signing key and the verification keys for the flags (see the module doc)."""
    signing: jwt.PrivateKey | None = None
    generated = ""
    try:
        if opts.service_account_signing_key_file:
            signing = jwt.load_private_key(
                _read(opts.service_account_signing_key_file, "--service-account-signing-key-file"),
                f"--service-account-signing-key-file {opts.service_account_signing_key_file}",
            )
        elif not opts.service_account_key_files:
            signing, generated = _generated_key(os.path.join(opts.data_dir, "pki", GENERATED_KEY_NAME))
        verification: list[jwt.PublicKey] = []
        for path in opts.service_account_key_files:
            verification += jwt.load_public_keys(
                _read(path, "--service-account-key-file"), f"--service-account-key-file {path}"
            )
        tls_key_file: str = getattr(opts, "tls_private_key_file", "")
        if not opts.service_account_key_files and tls_key_file:
            # The seed: the key files fall back to the TLS private key.
            try:
                verification += jwt.load_public_keys(
                    _read(tls_key_file, "--tls-private-key-file"), f"--tls-private-key-file {tls_key_file}"
                )
            except jwt.KeyFileError as exc:
                log.warning("the TLS key cannot verify service-account tokens: %s", exc)
    except jwt.KeyFileError as exc:
        raise AuthConfigError(str(exc)) from None
    if signing is not None:
        verification.insert(0, signing.public_key())
    unique: dict[str, jwt.PublicKey] = {}
    for k in verification:
        unique.setdefault(jwt.key_id(k), k)
    if signing is None:
        log.warning(
            "no service-account signing key (--service-account-signing-key-file): TokenRequest "
            "is unavailable; tokens are only verified"
        )
    return ServiceAccountKeys(signing, list(unique.values()), generated)


def _generated_key(path: str) -> tuple[jwt.PrivateKey, str]:
    if os.path.exists(path):
        try:
            return jwt.load_private_key(_read(path, "generated key"), path), ""
        except jwt.KeyFileError as exc:
            raise AuthConfigError(
                f"the generated service-account key {path} is unusable ({exc}); remove it "
                "to have a new one generated (tokens signed with it stop working)"
            ) from None
    pki_dir = os.path.dirname(path)
    os.makedirs(os.path.dirname(pki_dir), mode=0o700, exist_ok=True)  # DATA_DIR stays private
    os.makedirs(pki_dir, mode=0o700, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=GENERATED_KEY_BITS)
    write_private(path, key_pem(key))
    log.info("generated the service-account signing key %s", path)
    return key, path


# --- issuing -------------------------------------------------------------------------------------


class TokenIssuer:
    """Signs bound service-account tokens with one key for one issuer."""

    def __init__(self, key: jwt.PrivateKey, issuer: str, clock: Callable[[], float] = time.time):
        jwt.algorithm_for(key)
        self.key = key
        self.issuer = issuer
        self.clock = clock

    def issue(
        self,
        namespace: str,
        name: str,
        uid: str,
        audiences: tuple[str, ...] | list[str],
        expiration_seconds: int,
        pod: tuple[str, str] | None = None,
        secret: tuple[str, str] | None = None,
    ) -> tuple[str, int]:
        """(token, exp as Unix seconds)."""
        now = int(self.clock())
        exp = now + int(expiration_seconds)
        private: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}
        if pod is not None:
            private["pod"] = {"name": pod[0], "uid": pod[1]}
        if secret is not None:
            private["secret"] = {"name": secret[0], "uid": secret[1]}
        claims = {
            "aud": list(audiences),
            "exp": exp,
            "iat": now,
            "iss": self.issuer,
            "nbf": now,
            "sub": service_account_username(namespace, name),
            names.SERVICEACCOUNT_PRIVATE_CLAIM: private,
        }
        return jwt.encode(claims, self.key), exp


# --- verifying -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BoundClaims:
    namespace: str
    name: str
    uid: str
    audiences: tuple[str, ...]
    exp: float | None
    nbf: float | None
    pod: tuple[str, str] | None = None
    secret: tuple[str, str] | None = None


def _ref(value: Any, what: str) -> tuple[str, str] | None:
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("name"), str)
        or not isinstance(value.get("uid"), str)
        or not value["name"]
        or not value["uid"]
    ):
        raise Unauthorized(f"service account token claims are malformed: {what} must have a name and a uid")
    return value["name"], value["uid"]


def _numeric_date(claims: dict, key: str) -> float | None:
    v = claims.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unauthorized(f"service account token claims are malformed: {key} is not a number")
    return float(v)


def parse_claims(claims: dict) -> BoundClaims:
    private = claims.get(names.SERVICEACCOUNT_PRIVATE_CLAIM)
    if not isinstance(private, dict):
        raise Unauthorized("service account token claims could not be validated due to unexpected private claim")
    ns, sa = private.get("namespace"), private.get("serviceaccount")
    if not isinstance(ns, str) or not ns:
        raise Unauthorized("service account token claims are malformed: no namespace")
    name, uid = _ref(sa, "serviceaccount") or ("", "")
    if not name:
        raise Unauthorized("service account token claims are malformed: no service account")
    if claims.get("sub") != service_account_username(ns, name):
        raise Unauthorized("service account token claims are malformed: sub does not name the service account")
    aud = claims.get("aud")
    if isinstance(aud, str):
        auds: tuple[str, ...] = (aud,)
    elif isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        auds = tuple(aud)
    elif aud is None:
        auds = ()
    else:
        raise Unauthorized("service account token claims are malformed: aud")
    return BoundClaims(
        ns,
        name,
        uid,
        auds,
        _numeric_date(claims, "exp"),
        _numeric_date(claims, "nbf"),
        _ref(private.get("pod"), "pod"),
        _ref(private.get("secret"), "secret"),
    )


class ServiceAccountTokenAuthenticator:
    """Bearer JWTs from one of our issuers, signed by one of our keys."""

    name = "serviceaccount"

    def __init__(
        self,
        keys: list[jwt.PublicKey],
        issuers: tuple[str, ...] | list[str],
        lookup: ObjectLookup | None,
        clock: Callable[[], float] = time.time,
        cache_size: int = TOKEN_CACHE_SIZE,
    ):
        self.keys = list(keys)
        self.issuers = frozenset(issuers)
        self.lookup = lookup
        self.clock = clock
        self.cache_size = cache_size
        self._verified: collections.OrderedDict[str, BoundClaims] = collections.OrderedDict()
        self.signature_checks = 0  # how many tokens needed a signature check (the cache's misses)

    def _claims(self, token: str) -> BoundClaims | None:
        hit = self._verified.get(token)
        if hit is not None:
            self._verified.move_to_end(token)
            return hit
        try:
            _, unverified = jwt.decode_unverified(token)
        except jwt.JwtError:
            return None  # not a JWT: some other authenticator's token
        if unverified.get("iss") not in self.issuers:
            return None  # another issuer's token
        self.signature_checks += 1
        try:
            _, claims = jwt.verify(token, self.keys)
        except jwt.JwtError as exc:
            raise Unauthorized(f"service account token is invalid: {exc}") from None
        bound = parse_claims(claims)
        self._verified[token] = bound
        if len(self._verified) > self.cache_size:
            self._verified.popitem(last=False)
        return bound

    async def authenticate_token(self, token: str, audiences: tuple[str, ...]) -> TokenResult | None:
        c = self._claims(token)
        if c is None:
            return None
        now = self.clock()
        if c.exp is not None and now > c.exp + LEEWAY_SECONDS:
            self._verified.pop(token, None)
            raise Unauthorized("service account token has expired")
        if c.nbf is not None and now < c.nbf - LEEWAY_SECONDS:
            raise Unauthorized("service account token is not valid yet")
        token_auds = c.audiences or tuple(audiences)
        common = tuple(a for a in token_auds if a in audiences)
        if not common:
            raise Unauthorized(
                f"token audiences {go_list(token_auds)} is invalid for the target audiences {go_list(audiences)}"
            )
        if self.lookup is not None:
            await self._check_live(self.lookup, c)
        return TokenResult(user_info(c.namespace, c.name, c.uid, c.pod), common, still_valid=self._still_valid(c))

    @staticmethod
    def _live_checks(c: BoundClaims) -> list[tuple[str, str, str, str]]:
        """(resource, what, name, uid) of every object the token rests on."""
        checks = [("serviceaccounts", "service account", c.name, c.uid)]
        if c.pod is not None:
            checks.append(("pods", "pod", c.pod[0], c.pod[1]))
        if c.secret is not None:
            checks.append(("secrets", "secret", c.secret[0], c.secret[1]))
        return checks

    def _still_valid(self, c: BoundClaims) -> Callable[[], bool] | None:
        """The cached result's re-check: still inside exp/nbf (with the leeway) and, with
        --service-account-lookup, every object the token rests on is in the watch cache
        with the same uid and not being deleted. None when the lookup cannot tell."""
        getters: list[tuple[Callable[[], Any], str]] = []
        if self.lookup is not None:
            entry_getter = getattr(self.lookup, "entry_getter", None)
            if entry_getter is None:
                return None
            getters = [
                (entry_getter(resource, c.namespace, name), uid) for resource, _, name, uid in self._live_checks(c)
            ]
        clock = self.clock
        not_after = c.exp + LEEWAY_SECONDS if c.exp is not None else None
        not_before = c.nbf - LEEWAY_SECONDS if c.nbf is not None else None

        def still_valid() -> bool:
            now = clock()
            if (not_after is not None and now > not_after) or (not_before is not None and now < not_before):
                return False
            for current, uid in getters:
                e = current()
                if e is None or e.uid != uid or e.deleting:
                    return False
            return True

        return still_valid

    async def _check_live(self, lookup: ObjectLookup, c: BoundClaims) -> None:
        for resource, what, name, uid in self._live_checks(c):
            state = await lookup.live_state(resource, c.namespace, name, uid)
            if state == "missing":
                raise Unauthorized(f'{resource} "{name}" not found')
            if state == "uid":
                raise Unauthorized(
                    f"{what} UID ({uid}) does not match the {what} of that name: "
                    f"{c.namespace}/{name} was deleted and created again"
                )
            if state == "deleting":
                raise Unauthorized(f"{what} {c.namespace}/{name} has been deleted")

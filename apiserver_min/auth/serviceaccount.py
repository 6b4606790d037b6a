"""Service accounts: signed tokens, TokenRequest, the ServiceAccount admission
plugin and the controller that gives every namespace its ``default`` account and
``orch-root-ca.crt`` ConfigMap.

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

import asyncio
import collections
import dataclasses
import datetime as _dt
import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any, Callable

from cryptography.hazmat.primitives.asymmetric import rsa

from ..api import names
from ..api import status as st
from ..api.timeutil import format_rfc3339
from ..api.validation import FieldError
from ..pki import key_pem, write_private
from ..server.admission import SYSTEM_USER, Attributes, UserInfo
from . import jwt
from .authn import AuthConfigError, ObjectLookup, TokenResult, Unauthorized, go_list

if TYPE_CHECKING:
    from ..api.kinds import KindInfo
    from ..server.watchcache import CacheEvent, ResourceCache

log = logging.getLogger("orch-apiserver.serviceaccounts")

# TokenRequest limits and defaults (upstream's).
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
# The projected token's lifetime upstream's admission plugin writes into pods.
PROJECTED_TOKEN_EXPIRATION_SECONDS = 3607
PROJECTED_VOLUME_DEFAULT_MODE = 0o644
# Clock skew allowed on exp and nbf, as upstream's JWT library.
LEEWAY_SECONDS = 60
TOKEN_CACHE_SIZE = 4096
GENERATED_KEY_NAME = "sa.key"
GENERATED_KEY_BITS = 2048
# Upstream's admission plugin retries a missing "default" account this often: the
# controller creates it moments after its namespace.
DEFAULT_ACCOUNT_LOOKUPS = 10


def username(namespace: str, name: str) -> str:
    return f"{names.SERVICEACCOUNT_USER_PREFIX}{namespace}:{name}"


def user_info(namespace: str, name: str, uid: str, pod: tuple[str, str] | None = None) -> UserInfo:
    extra: dict[str, tuple[str, ...]] = {}
    if pod is not None:
        extra = {names.USER_EXTRA_POD_NAME: (pod[0],), names.USER_EXTRA_POD_UID: (pod[1],)}
    return UserInfo(username(namespace, name), uid=uid,
                    groups=(names.GROUP_SERVICEACCOUNTS, names.GROUP_SERVICEACCOUNTS_PREFIX + namespace),
                    extra=extra)


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
            signing = jwt.load_private_key(_read(opts.service_account_signing_key_file,
                                                 "--service-account-signing-key-file"),
                                           f"--service-account-signing-key-file {opts.service_account_signing_key_file}")
        elif not opts.service_account_key_files:
            signing, generated = _generated_key(os.path.join(opts.data_dir, "pki", GENERATED_KEY_NAME))
        verification: list[jwt.PublicKey] = []
        for path in opts.service_account_key_files:
            verification += jwt.load_public_keys(_read(path, "--service-account-key-file"),
                                                 f"--service-account-key-file {path}")
        if not opts.service_account_key_files and getattr(opts, "tls_private_key_file", ""):
            # The seed: the key files fall back to the TLS private key.
            try:
                verification += jwt.load_public_keys(_read(opts.tls_private_key_file, "--tls-private-key-file"),
                                                     f"--tls-private-key-file {opts.tls_private_key_file}")
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
        log.warning("no service-account signing key (--service-account-signing-key-file): TokenRequest "
                    "is unavailable; tokens are only verified")
    return ServiceAccountKeys(signing, list(unique.values()), generated)


def _generated_key(path: str) -> tuple[jwt.PrivateKey, str]:
    if os.path.exists(path):
        try:
            return jwt.load_private_key(_read(path, "generated key"), path), ""
        except jwt.KeyFileError as exc:
            raise AuthConfigError(f"the generated service-account key {path} is unusable ({exc}); remove it "
                                  "to have a new one generated (tokens signed with it stop working)") from None
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

    def issue(self, namespace: str, name: str, uid: str, audiences: tuple[str, ...] | list[str],
              expiration_seconds: int, pod: tuple[str, str] | None = None,
              secret: tuple[str, str] | None = None) -> tuple[str, int]:
        """(token, exp as Unix seconds)."""
        now = int(self.clock())
        exp = now + int(expiration_seconds)
        private: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}
        if pod is not None:
            private["pod"] = {"name": pod[0], "uid": pod[1]}
        if secret is not None:
            private["secret"] = {"name": secret[0], "uid": secret[1]}
        claims = {"aud": list(audiences), "exp": exp, "iat": now, "iss": self.issuer, "nbf": now,
                  "sub": username(namespace, name), names.SERVICEACCOUNT_PRIVATE_CLAIM: private}
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
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not isinstance(value.get("uid"), str) \
            or not value["name"] or not value["uid"]:
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
    if claims.get("sub") != username(ns, name):
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
    return BoundClaims(ns, name, uid, auds, _numeric_date(claims, "exp"), _numeric_date(claims, "nbf"),
                       _ref(private.get("pod"), "pod"), _ref(private.get("secret"), "secret"))


class ServiceAccountTokenAuthenticator:
    """Bearer JWTs from one of our issuers, signed by one of our keys."""

    name = "serviceaccount"

    def __init__(self, keys: list[jwt.PublicKey], issuers: tuple[str, ...] | list[str],
                 lookup: ObjectLookup | None, clock: Callable[[], float] = time.time,
                 cache_size: int = TOKEN_CACHE_SIZE):
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
            raise Unauthorized(f"token audiences {go_list(token_auds)} is invalid for the target audiences "
                               f"{go_list(audiences)}")
        if self.lookup is not None:
            await self._check_live(c)
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
            getters = [(entry_getter(resource, c.namespace, name), uid)
                       for resource, _, name, uid in self._live_checks(c)]
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

    async def _check_live(self, c: BoundClaims) -> None:
        for resource, what, name, uid in self._live_checks(c):
            state = await self.lookup.live_state(resource, c.namespace, name, uid)
            if state == "missing":
                raise Unauthorized(f'{resource} "{name}" not found')
            if state == "uid":
                raise Unauthorized(f"{what} UID ({uid}) does not match the {what} of that name: "
                                   f"{c.namespace}/{name} was deleted and created again")
            if state == "deleting":
                raise Unauthorized(f"{what} {c.namespace}/{name} has been deleted")


# --- TokenRequest: POST serviceaccounts/<name>/token ---------------------------------------------------

def _invalid(name: str, field: str, value: Any, detail: str) -> st.ApiError:
    from ..server.strategy import causes
    return st.invalid("TokenRequest", name, causes([FieldError.invalid(field, value, detail)]),
                      names.AUTHENTICATION_GROUP)


def decode_token_request_protobuf(body: bytes) -> tuple[dict, str]:
    """A protobuf TokenRequest (``kubectl create token`` sends nothing else) as its JSON
    form. Field numbers are upstream's generated.proto: TokenRequest {metadata 1, spec 2},
    TokenRequestSpec {audiences 1, boundObjectRef 3, expirationSeconds 4},
    BoundObjectReference {kind 1, apiVersion 2, name 3, uid 4}. Returns the object and
    the envelope's apiVersion."""
    from .reviews import ProtobufError, decode_envelope, fields

    def text(v: Any) -> str:
        if not isinstance(v, bytes):
            raise ProtobufError("expected a length-delimited string")
        return v.decode("utf-8")

    try:
        api_version, kind, raw = decode_envelope(body)
        if kind not in ("", "TokenRequest"):
            raise st.bad_request(f"the kind in the data ({kind}) does not match the expected kind (TokenRequest)")
        obj: dict[str, Any] = {"metadata": {}, "spec": {}}
        for n, _w, v in fields(raw):
            if n == 1:
                obj["metadata"] = {k: text(x) for num, _ww, x in fields(v)
                                   for k in ({1: "name", 3: "namespace"}.get(num),) if k}
            elif n == 2:
                spec = obj["spec"]
                for num, _ww, x in fields(v):
                    if num == 1:
                        spec.setdefault("audiences", []).append(text(x))
                    elif num == 4:
                        if not isinstance(x, int):
                            raise ProtobufError("expirationSeconds must be a varint")
                        spec["expirationSeconds"] = x
                    elif num == 3:
                        spec["boundObjectRef"] = {k: text(y) for m, _www, y in fields(x)
                                                  for k in ({1: "kind", 2: "apiVersion", 3: "name", 4: "uid"}.get(m),)
                                                  if k}
        return obj, api_version
    except (ProtobufError, UnicodeDecodeError) as exc:
        raise st.bad_request(f"the protobuf body of the TokenRequest could not be decoded: {exc}") from None


class TokenRequests:
    """The ``serviceaccounts/token`` sub-resource (``authentication.orch.io/v1``)."""

    def __init__(self, server: Any, issuer: TokenIssuer | None, api_audiences: tuple[str, ...],
                 max_expiration_seconds: float = 0.0):
        self.server = server
        self.issuer = issuer
        self.api_audiences = tuple(api_audiences)
        self.max_expiration_seconds = int(max_expiration_seconds)

    async def create(self, request: Any, info: Any, kind: "KindInfo", user: UserInfo) -> Any:
        from ..server.handlers import WriteParams
        from ..server.negotiation import JSON

        if self.issuer is None:
            raise st.ApiError(404, "NotFound", "serviceaccounts/token is not available: this server has no "
                                               "service-account signing key (--service-account-signing-key-file)")
        handlers = self.server.handlers
        store = self.server.store
        wp = WriteParams.parse(request)
        ns, name = info.namespace, info.name
        body, reply_api_version = await self._decode(request)
        md = body.get("metadata") or {}
        if md.get("name") not in (None, "") and md["name"] != name:
            raise st.bad_request(f"the name of the TokenRequest ({md['name']}) does not match the service "
                                 f"account name on the URL ({name})")
        if md.get("namespace") not in (None, "") and md["namespace"] != ns:
            raise st.bad_request("the namespace of the provided object does not match the namespace sent on "
                                 "the request")
        spec = body.get("spec")
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise _invalid(name, "spec", spec, "must be an object")
        audiences = spec.get("audiences")
        if audiences in (None, []):
            audiences = list(self.api_audiences)
        if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
            raise _invalid(name, "spec.audiences", audiences, "must be a list of non-empty strings")
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = DEFAULT_EXPIRATION_SECONDS
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise _invalid(name, "spec.expirationSeconds", seconds, "must be an integer")
        if seconds < MIN_EXPIRATION_SECONDS:
            raise _invalid(name, "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes")
        if seconds > MAX_EXPIRATION_SECONDS:
            raise _invalid(name, "spec.expirationSeconds", seconds,
                           "may not specify a duration larger than 2^32 seconds")
        sa = await store.get_object(kind, ns, name)
        sa_uid = (sa.get("metadata") or {}).get("uid", "")
        pod, secret = await self._bound_object(spec.get("boundObjectRef"), ns, name)
        # Admission sees the request as a create of serviceaccounts/token (NodeRestriction
        # lets a node ask only for tokens bound to its own pods).
        await store.admission.run(Attributes("CREATE", kind, ns, name, "token", body, None, user, wp.dry_run))
        if self.max_expiration_seconds and seconds > self.max_expiration_seconds:
            seconds = self.max_expiration_seconds
        out_spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": seconds}
        if spec.get("boundObjectRef") is not None:
            out_spec["boundObjectRef"] = spec["boundObjectRef"]
        now = self.issuer.clock()
        out: dict[str, Any] = {
            "kind": "TokenRequest", "apiVersion": reply_api_version,
            "metadata": {"name": name, "namespace": ns,
                         "creationTimestamp": format_rfc3339(_dt.datetime.fromtimestamp(int(now), _dt.timezone.utc))},
            "spec": out_spec,
        }
        if not wp.dry_run:
            token, exp = self.issuer.issue(ns, name, sa_uid, audiences, seconds, pod, secret)
            out["status"] = {"token": token, "expirationTimestamp":
                             format_rfc3339(_dt.datetime.fromtimestamp(exp, _dt.timezone.utc))}
        return handlers._respond_obj(request, out, 201, JSON if wp.target.form == "table" else wp.target)

    async def _decode(self, request: Any) -> tuple[dict, str]:
        """The TokenRequest body (JSON, YAML or protobuf) and the apiVersion to answer
        in: ours, or upstream's spelling when the client wrote that (kubectl decodes
        the reply only in the group it sent)."""
        from ..server import codec

        ours, upstream = f"{names.AUTHENTICATION_GROUP}/v1", f"{names.UPSTREAM_AUTHENTICATION_GROUP}/v1"
        ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        raw = await self.server.handlers._read_body(request)
        if ctype in (names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM):
            obj, api_version = decode_token_request_protobuf(raw)
        elif ctype in ("", "application/json", "application/yaml", "application/x-yaml", "text/yaml"):
            obj = codec.decode_body(raw, "application/json" if ctype in ("", "application/json") else "application/yaml")
            if not isinstance(obj, dict):
                raise st.bad_request("the request body must be a TokenRequest object")
            if obj.get("kind") not in (None, "", "TokenRequest"):
                raise st.bad_request(f"the kind in the data ({obj.get('kind')}) does not match the expected kind "
                                     "(TokenRequest)")
            api_version = obj.get("apiVersion") or ""
        else:
            raise st.unsupported_media_type(
                f"the body of the request was in an unknown format ({ctype}) - accepted media types include: "
                f"application/json, application/yaml, {names.MEDIA_PROTOBUF}")
        if api_version not in ("", ours, upstream):
            raise st.bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                                 f"version ({ours})")
        if obj.get("metadata") is not None and not isinstance(obj.get("metadata"), dict):
            raise st.bad_request("metadata: must be an object")
        return obj, api_version or ours

    async def _bound_object(self, ref: Any, ns: str, sa_name: str) -> tuple[tuple[str, str] | None,
                                                                             tuple[str, str] | None]:
        if ref is None:
            return None, None
        if not isinstance(ref, dict):
            raise _invalid(sa_name, "spec.boundObjectRef", ref, "must be an object")
        kind, api_version, ref_name, ref_uid = (ref.get("kind"), ref.get("apiVersion") or "", ref.get("name"),
                                                ref.get("uid") or "")
        if kind not in ("Pod", "Secret") or api_version != "v1":
            raise st.bad_request(f"cannot bind token to object of type {api_version}, Kind={kind}")
        if not isinstance(ref_name, str) or not ref_name:
            raise _invalid(sa_name, "spec.boundObjectRef.name", ref_name, "the bound object must be named")
        registry = self.server.registry
        obj = await self.server.store.get_object(registry.by_resource("", "v1", "pods" if kind == "Pod" else "secrets"),
                                                 ns, ref_name)
        uid = (obj.get("metadata") or {}).get("uid", "")
        if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != sa_name:
            raise st.bad_request(f'cannot bind token for serviceaccount "{sa_name}" to pod running with different '
                                 "serviceaccount name.")
        if ref_uid and ref_uid != uid:
            raise st.conflict(kind, ref_name, "", f"the UID in the bound object reference ({ref_uid}) does not match "
                                                  "the UID in record. The object might have been deleted and then "
                                                  "recreated")
        return ((ref_name, uid), None) if kind == "Pod" else (None, (ref_name, uid))


# --- the ServiceAccount admission plugin ---------------------------------------------------------------

def token_volume_source() -> dict:
    """The projected volume upstream's plugin adds: the token, the cluster CA, the namespace."""
    return {"defaultMode": PROJECTED_VOLUME_DEFAULT_MODE, "sources": [
        {"serviceAccountToken": {"expirationSeconds": PROJECTED_TOKEN_EXPIRATION_SECONDS, "path": "token"}},
        {"configMap": {"name": names.ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}


def _containers(spec: dict, key: str) -> list[dict]:
    items = spec.get(key)
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def mount_service_account_token(spec: dict, suffix: Callable[[], str]) -> None:
    """Mount the token volume read-only at the well-known path in every (init)
    container that has nothing there yet; add the volume if any container needs it."""
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    volume_name = ""
    for v in volumes:
        if isinstance(v, dict) and str(v.get("name", "")).startswith(names.SERVICEACCOUNT_VOLUME_PREFIX):
            volume_name = v["name"]
            break
    has_volume = bool(volume_name)
    volume_name = volume_name or names.SERVICEACCOUNT_VOLUME_PREFIX + suffix()
    needs_volume = False
    for key in ("initContainers", "containers"):
        for c in _containers(spec, key):
            mounts = c.get("volumeMounts") if isinstance(c.get("volumeMounts"), list) else []
            if any(isinstance(m, dict) and m.get("mountPath") == names.SERVICEACCOUNT_TOKEN_MOUNT_PATH for m in mounts):
                continue
            c["volumeMounts"] = mounts + [{"name": volume_name, "readOnly": True,
                                           "mountPath": names.SERVICEACCOUNT_TOKEN_MOUNT_PATH}]
            needs_volume = True
    if needs_volume and not has_volume:
        spec["volumes"] = volumes + [{"name": volume_name, "projected": token_volume_source()}]


def should_automount(sa: dict, pod_spec: dict) -> bool:
    if isinstance(pod_spec.get("automountServiceAccountToken"), bool):
        return pod_spec["automountServiceAccountToken"]
    if isinstance(sa.get("automountServiceAccountToken"), bool):
        return sa["automountServiceAccountToken"]
    return True


def _secret_names(spec: dict) -> bool:
    """Whether a pod spec references any secret (upstream's VisitPodSecretNames)."""
    if spec.get("imagePullSecrets"):
        return True
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        if v.get("secret"):
            return True
        for src in (v.get("projected") or {}).get("sources") or []:
            if isinstance(src, dict) and src.get("secret"):
                return True
        for plugin in ("azureFile", "cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos", "csi"):
            cfg = v.get(plugin)
            if isinstance(cfg, dict) and (cfg.get("secretRef") or cfg.get("secretName")
                                          or cfg.get("nodePublishSecretRef")):
                return True
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _containers(spec, key):
            for e in c.get("envFrom") or []:
                if isinstance(e, dict) and e.get("secretRef"):
                    return True
            for e in c.get("env") or []:
                if isinstance(e, dict) and ((e.get("valueFrom") or {}).get("secretKeyRef")):
                    return True
    return False


class ServiceAccountAdmission:
    """Upstream's ServiceAccount plugin, for pod creation.

    Mutating: default ``spec.serviceAccountName`` to ``default``; refuse a pod whose
    account does not exist; mount the projected token volume (unless the pod or
    the account turns automounting off); copy the account's image pull secrets
    when the pod names none. Validating: mirror pods (created by node agents for
    static pods) may not use service accounts, secrets or token projections, and
    are never changed."""

    name = "ServiceAccount"

    def __init__(self, server: Any):
        self.server = server
        self._lookup: ObjectLookup | None = None
        self.generate_suffix: Callable[[], str] | None = None

    @property
    def lookup(self) -> ObjectLookup:
        if self._lookup is None:
            self._lookup = ObjectLookup(self.server.cache, self.server.registry, self.server.store)
        return self._lookup

    @staticmethod
    def _applies(attrs: Attributes) -> dict | None:
        k = attrs.kind
        if attrs.operation != "CREATE" or attrs.subresource or k.group != "" or k.resource != "pods":
            return None
        pod = attrs.obj
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            return None
        return pod

    @staticmethod
    def _mirror(pod: dict) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations")
        return isinstance(annotations, dict) and names.ANNOTATION_CONFIG_MIRROR in annotations

    async def admit(self, attrs: Attributes) -> None:
        pod = self._applies(attrs)
        if pod is None or self._mirror(pod):
            return
        spec = pod["spec"]
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or names.DEFAULT_SERVICE_ACCOUNT
        # The deprecated spec.serviceAccount is read as a fallback but not written: upstream
        # fills it by conversion on every read, which this server does not have, and a
        # stored copy would make later updates without it look like spec changes.
        spec["serviceAccountName"] = account
        sa = await self._service_account(attrs, account)
        if should_automount(sa, spec):
            if self.generate_suffix is None:
                from ..server.strategy import generate_suffix
                self.generate_suffix = generate_suffix
            mount_service_account_token(spec, self.generate_suffix)
        if not spec.get("imagePullSecrets"):
            pulls = [{"name": s["name"]} for s in sa.get("imagePullSecrets") or []
                     if isinstance(s, dict) and s.get("name")]
            if pulls:
                spec["imagePullSecrets"] = pulls

    async def _service_account(self, attrs: Attributes, account: str) -> dict:
        ns = attrs.namespace
        sa = await self.lookup.get("serviceaccounts", ns, account)
        attempts = DEFAULT_ACCOUNT_LOOKUPS if account == names.DEFAULT_SERVICE_ACCOUNT else 1
        for _ in range(attempts - 1):
            if sa is not None:
                break
            await asyncio.sleep(random.uniform(0.1, 0.2))
            sa = await self.lookup.live("serviceaccounts", ns, account)
        if sa is None:
            raise st.forbidden("pods", attrs.name, "", f"error looking up service account {ns}/{account}: "
                                                       f'serviceaccount "{account}" not found')
        return sa

    async def validate(self, attrs: Attributes) -> None:
        pod = self._applies(attrs)
        if pod is None:
            return
        spec = pod["spec"]
        if self._mirror(pod):
            if spec.get("serviceAccountName") or spec.get("serviceAccount"):
                raise st.forbidden("pods", attrs.name, "", "a mirror pod may not reference service accounts")
            if _secret_names(spec):
                raise st.forbidden("pods", attrs.name, "", "a mirror pod may not reference secrets")
            for v in spec.get("volumes") or []:
                for src in ((v or {}).get("projected") or {}).get("sources") or []:
                    if isinstance(src, dict) and src.get("serviceAccountToken") is not None:
                        raise st.forbidden("pods", attrs.name, "",
                                           "a mirror pod may not use ServiceAccountToken volume projections")
            return
        if not spec.get("serviceAccountName"):
            raise st.forbidden("pods", attrs.name, "",
                               f"no service account specified for pod {attrs.namespace}/{attrs.name}")


# --- the default account and root CA publisher --------------------------------------------------------

ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the orch-apiserver when using internal "
                       "endpoints such as the internal service IP or orch.default.svc. No other usage is "
                       "guaranteed across distributions.")


class ServiceAccountsController:
    """Keeps a ``default`` ServiceAccount and the ``orch-root-ca.crt`` ConfigMap (key
    ``ca.crt``: the cluster CA) in every active namespace, as upstream's
    serviceaccount controller and root-ca-cert-publisher do: on namespace creation,
    at start for every namespace, and again when either object is deleted or the
    ConfigMap is changed."""

    def __init__(self, server: Any, ca_file: str | None = None):
        from ..server.controllers import KeyQueue
        from ..server.store import key_prefix

        self.server = server
        self.store = server.store
        reg = server.registry
        self.ns_kind = reg.by_resource("", "v1", "namespaces")
        self.sa_kind = reg.by_resource("", "v1", "serviceaccounts")
        self.cm_kind = reg.by_resource("", "v1", "configmaps")
        self.ns_prefix, self.sa_prefix, self.cm_prefix = (key_prefix(self.ns_kind), key_prefix(self.sa_kind),
                                                          key_prefix(self.cm_kind))
        self.ca_file = ca_file
        self._ca_pem: str | None = None
        self.queue = KeyQueue()

    def ca_pem(self) -> str:
        if self._ca_pem is None:
            path = self.ca_file or self.server.pki.ca_cert
            with open(path, encoding="ascii") as f:
                self._ca_pem = f.read()
        return self._ca_pem

    def on_event(self, cache: "ResourceCache | None", ev: "CacheEvent | None") -> None:
        if cache is None:
            for e in self.server.cache.cache(self.ns_prefix).items.values():
                if not e.deleting:
                    self.queue.add(e.name)
            return
        e = ev.entry
        if cache.prefix == self.ns_prefix:
            if ev.type != "DELETED" and not e.deleting:
                self.queue.add(e.name)
        elif cache.prefix == self.sa_prefix:
            if ev.type == "DELETED" and e.name == names.DEFAULT_SERVICE_ACCOUNT:
                self.queue.add(e.namespace)
        elif cache.prefix == self.cm_prefix:
            if e.name == names.ROOT_CA_CONFIGMAP and ev.type in ("DELETED", "MODIFIED"):
                self.queue.add(e.namespace)

    async def run(self) -> None:
        from ..server.controllers import RETRY_DELAY
        while True:
            ns = await self.queue.get()
            try:
                done = await self.sync(ns)
            except st.ApiError as exc:
                log.warning("namespace %s: %s", ns, exc.message)
                done = False
            except Exception:  # noqa: BLE001 - keep the controller alive; retry the item
                log.exception("namespace %s: service account sync failed", ns)
                done = False
            if not done:
                self.queue.add_after(ns, RETRY_DELAY)

    def _cached(self, prefix: str, key: str):
        return self.server.cache.cache(prefix).items.get(key)

    async def sync(self, ns: str) -> bool:
        """True when done (or nothing to do); False to retry later."""
        entry = self._cached(self.ns_prefix, f"{self.ns_prefix}{ns}")
        if entry is None or entry.deleting:
            return True
        await self._create(self.sa_kind, ns, {"metadata": {"name": names.DEFAULT_SERVICE_ACCOUNT}},
                           self._cached(self.sa_prefix, f"{self.sa_prefix}{ns}/{names.DEFAULT_SERVICE_ACCOUNT}"))
        data = {"ca.crt": self.ca_pem()}
        cm = self._cached(self.cm_prefix, f"{self.cm_prefix}{ns}/{names.ROOT_CA_CONFIGMAP}")
        if cm is None:
            await self._create(self.cm_kind, ns, {"metadata": {"name": names.ROOT_CA_CONFIGMAP, "annotations": {
                names.ANNOTATION_DESCRIPTION: ROOT_CA_DESCRIPTION}}, "data": data}, None)
            return True
        obj = cm.object()
        if obj.get("data") == data and ((obj.get("metadata") or {}).get("annotations") or {}).get(
                names.ANNOTATION_DESCRIPTION):
            return True

        def fix(current: dict) -> dict:
            current["data"] = dict(data)
            current.pop("binaryData", None)
            current["metadata"].setdefault("annotations", {})[names.ANNOTATION_DESCRIPTION] = ROOT_CA_DESCRIPTION
            return current

        try:
            await self.store.update(self.cm_kind, ns, names.ROOT_CA_CONFIGMAP, fix, SYSTEM_USER,
                                    field_manager=names.CONTROLLER_MANAGER_FIELD_MANAGER)
        except st.ApiError as exc:
            if exc.code not in (403, 404):
                raise
        return True

    async def _create(self, kind: "KindInfo", ns: str, obj: dict, cached: Any) -> None:
        if cached is not None:
            return
        try:
            await self.store.create(kind, ns, obj, SYSTEM_USER, field_manager=names.CONTROLLER_MANAGER_FIELD_MANAGER)
            log.info("created %s %s/%s", kind.kind, ns, obj["metadata"]["name"])
        except st.ApiError as exc:
            # 409: already there (the cache lagged); 403/404: the namespace is going away.
            if exc.code not in (409, 403, 404):
                raise

"""Bootstrap tokens and the signed ``cluster-info`` document: the contract the API
server (token CLI, bootstrap signer, token cleaner) and the node agent's ``join``
share.

A bootstrap token is ``<id>.<secret>`` (6 and 16 characters of ``[a-z0-9]``),
stored as the Secret ``bootstrap-token-<id>`` of type ``bootstrap.orch.io/token``
in ``orch-system``. The bootstrap signer publishes, for every unexpired token
marked for signing, a detached JWS of the ``cluster-info`` connection config:
``<b64url(header)>..<b64url(HMAC-SHA256)>`` with header
``{"alg":"HS256","kid":"<id>"}``, the full token as the HMAC key, and
``b64url(header) + "." + b64url(kubeconfig)`` as the signing input. A joining
node that knows the token reads ``cluster-info`` without trusting TLS, checks
the signature, then pins the CA by ``sha256:<hex of SHA-256 of the CA's DER
SubjectPublicKeyInfo>``.

Everything here is pure (no I/O) so both daemons and their tests can use it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import hashlib
import hmac
import json
import re
import secrets as _secrets
from typing import Any, Iterable, Mapping

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from . import names
from .timeutil import format_rfc3339, parse_rfc3339

TOKEN_ID_LENGTH = 6
TOKEN_SECRET_LENGTH = 16
TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
TOKEN_RE = re.compile(r"\A([a-z0-9]{6})\.([a-z0-9]{16})\Z")
TOKEN_ID_RE = re.compile(r"\A[a-z0-9]{6}\Z")
EXTRA_GROUP_RE = re.compile(r"\A" + re.escape(names.GROUP_BOOTSTRAPPERS_PREFIX) + r"[a-z0-9:-]{0,255}[a-z0-9]\Z")

# Keys of the bootstrap-token secret (the seed's table).
KEY_DESCRIPTION = "description"
KEY_TOKEN_ID = "token-id"
KEY_TOKEN_SECRET = "token-secret"
KEY_EXPIRATION = "expiration"
KEY_USAGE_PREFIX = "usage-bootstrap-"
KEY_USAGE_AUTHENTICATION = "usage-bootstrap-authentication"
KEY_USAGE_SIGNING = "usage-bootstrap-signing"
KEY_EXTRA_GROUPS = "auth-extra-groups"
USAGES = ("authentication", "signing")
DEFAULT_USAGES = ("signing", "authentication")

# The signed document.
CLUSTER_INFO_KUBECONFIG_KEY = "kubeconfig"
JWS_KEY_PREFIX = "jws-kubeconfig-"
JWS_ALGORITHM = "HS256"
CA_HASH_PREFIX = "sha256:"


class TokenError(ValueError):
    """A malformed token, token id, usage, group or secret (the message says which)."""


class JwsError(ValueError):
    """A detached signature that does not verify (the message says why)."""


# --- tokens -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Token:
    id: str
    secret: str

    def __str__(self) -> str:
        return f"{self.id}.{self.secret}"

    @property
    def secret_name(self) -> str:
        return names.BOOTSTRAP_TOKEN_SECRET_PREFIX + self.id


def _random(n: int) -> str:
    return "".join(_secrets.choice(TOKEN_ALPHABET) for _ in range(n))


def generate_token() -> Token:
    """A new random token from the ``secrets`` module's generator."""
    return Token(_random(TOKEN_ID_LENGTH), _random(TOKEN_SECRET_LENGTH))


def parse_token(value: str) -> Token:
    m = TOKEN_RE.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise TokenError(f"the token {value!r} does not match the format [a-z0-9]{{6}}.[a-z0-9]{{16}}")
    return Token(m.group(1), m.group(2))


def parse_token_id(value: str) -> str:
    """A token id, or the id of a full token (``token delete`` accepts either)."""
    if isinstance(value, str) and TOKEN_ID_RE.match(value):
        return value
    if isinstance(value, str) and TOKEN_RE.match(value):
        return value.split(".", 1)[0]
    raise TokenError(f"{value!r} is neither a token id ([a-z0-9]{{6}}) nor a token ([a-z0-9]{{6}}.[a-z0-9]{{16}})")


def token_id_from_secret_name(name: str) -> str | None:
    prefix = names.BOOTSTRAP_TOKEN_SECRET_PREFIX
    if not name.startswith(prefix):
        return None
    tid = name[len(prefix) :]
    return tid if TOKEN_ID_RE.match(tid) else None


def parse_usages(values: Iterable[str]) -> tuple[str, ...]:
    """``--usages`` entries (comma lists allowed): each ``authentication`` or ``signing``."""
    out: list[str] = []
    for v in values:
        for u in (p.strip() for p in v.split(",")):
            if not u:
                continue
            if u not in USAGES:
                raise TokenError(f"invalid bootstrap token usage {u!r}: valid usages are {', '.join(USAGES)}")
            if u not in out:
                out.append(u)
    return tuple(out)


def parse_groups(values: Iterable[str]) -> tuple[str, ...]:
    """``--groups`` entries (comma lists allowed): each must start with ``system:bootstrappers:``."""
    out: list[str] = []
    for v in values:
        for g in (p.strip() for p in v.split(",")):
            if not g:
                continue
            if not EXTRA_GROUP_RE.match(g):
                raise TokenError(
                    f"invalid bootstrap token group {g!r}: it must start with "
                    f"{names.GROUP_BOOTSTRAPPERS_PREFIX} and match "
                    f"{names.GROUP_BOOTSTRAPPERS_PREFIX}[a-z0-9:-]*[a-z0-9]"
                )
            if g not in out:
                out.append(g)
    return tuple(out)


# --- the secret ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TokenSecret:
    """What a bootstrap-token secret says, decoded."""

    token: Token
    expiration: _dt.datetime | None
    usages: tuple[str, ...]
    groups: tuple[str, ...]
    description: str = ""
    expiration_text: str = ""

    def expired(self, now: _dt.datetime) -> bool:
        return self.expiration is not None and now >= self.expiration

    def for_signing(self, now: _dt.datetime) -> bool:
        return "signing" in self.usages and not self.expired(now)


def secret_values(secret: Mapping[str, Any]) -> dict[str, str]:
    """A secret's values as text: ``data`` (base64) with ``stringData`` (plain) winning
    where both name a key, as upstream merges them on write."""
    out: dict[str, str] = {}
    data = secret.get("data")
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(v, str):
                try:
                    out[k] = base64.b64decode(v, validate=True).decode("utf-8")
                except (binascii.Error, ValueError):
                    continue
    string_data = secret.get("stringData")
    if isinstance(string_data, dict):
        out.update({k: v for k, v in string_data.items() if isinstance(v, str)})
    return out


def parse_expiration(text: str) -> _dt.datetime:
    try:
        return parse_rfc3339(text)
    except Exception as exc:  # noqa: BLE001 - timeutil raises its own error types
        raise TokenError(f"{KEY_EXPIRATION} {text!r} is not an RFC 3339 time: {exc}") from None


def token_from_secret(secret: Mapping[str, Any]) -> TokenSecret:
    """Decode a bootstrap-token secret; TokenError says what is wrong with it. An
    unparseable expiration is an error (upstream treats such a token as expired)."""
    md = secret.get("metadata") or {}
    name = str(md.get("name") or "")
    if secret.get("type") != names.BOOTSTRAP_TOKEN_SECRET_TYPE:
        raise TokenError(f"secret {name} has type {secret.get('type')!r}, not {names.BOOTSTRAP_TOKEN_SECRET_TYPE}")
    name_id = token_id_from_secret_name(name)
    if name_id is None:
        raise TokenError(f"secret name {name!r} is not {names.BOOTSTRAP_TOKEN_SECRET_PREFIX}<token-id>")
    values = secret_values(secret)
    tid, tsecret = values.get(KEY_TOKEN_ID, ""), values.get(KEY_TOKEN_SECRET, "")
    if tid != name_id:
        raise TokenError(f"secret {name}: {KEY_TOKEN_ID} is {tid!r}, not {name_id!r} as the name says")
    token = parse_token(f"{tid}.{tsecret}")
    exp_text = values.get(KEY_EXPIRATION, "")
    expiration = parse_expiration(exp_text) if exp_text else None
    usages = tuple(u for u in USAGES if values.get(KEY_USAGE_PREFIX + u) == "true")
    groups = tuple(g for g in (values.get(KEY_EXTRA_GROUPS, "") or "").split(",") if g)
    return TokenSecret(token, expiration, usages, groups, values.get(KEY_DESCRIPTION, ""), exp_text)


def secret_for_token(
    token: Token,
    *,
    ttl: _dt.timedelta | None = None,
    now: _dt.datetime | None = None,
    usages: Iterable[str] = DEFAULT_USAGES,
    groups: Iterable[str] = (),
    description: str = "",
) -> dict:
    """The Secret object for a token (values base64 in ``data``). ``ttl`` None or zero:
    the token never expires."""
    values = {KEY_TOKEN_ID: token.id, KEY_TOKEN_SECRET: token.secret}
    if ttl is not None and ttl.total_seconds() > 0:
        values[KEY_EXPIRATION] = format_rfc3339((now or _dt.datetime.now(_dt.timezone.utc)) + ttl)
    for u in parse_usages(usages):
        values[KEY_USAGE_PREFIX + u] = "true"
    groups = parse_groups(groups)
    if groups:
        values[KEY_EXTRA_GROUPS] = ",".join(groups)
    if description:
        values[KEY_DESCRIPTION] = description
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": token.secret_name, "namespace": names.NS_SYSTEM},
        "type": names.BOOTSTRAP_TOKEN_SECRET_TYPE,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


# --- detached JWS -----------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise JwsError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jws_header(token_id: str) -> str:
    """The protected header exactly as upstream's JOSE library writes it (keys sorted,
    no spaces)."""
    return json.dumps({"alg": JWS_ALGORITHM, "kid": token_id}, separators=(",", ":"), sort_keys=True)


def _mac(key: str, signing_input: str) -> bytes:
    return hmac.new(key.encode(), signing_input.encode("ascii"), hashlib.sha256).digest()


def sign_detached(content: str | bytes, token: Token | str) -> str:
    """``<b64url(header)>..<b64url(signature)>`` over ``content`` with the token."""
    tok = parse_token(token) if isinstance(token, str) else token
    payload = content.encode() if isinstance(content, str) else content
    header = b64url(jws_header(tok.id).encode())
    return f"{header}..{b64url(_mac(str(tok), header + '.' + b64url(payload)))}"


def verify_detached(signature: str, content: str | bytes, token: Token | str) -> None:
    """Verify per the seed: put b64url(content) between the two dots and check HS256
    with the full token as the key. The algorithm must be HS256 and a ``kid``, if
    present, must be the token's id. Raises JwsError."""
    tok = parse_token(token) if isinstance(token, str) else token
    if not isinstance(signature, str):
        raise JwsError("the signature is not a string")
    parts = signature.split(".")
    if len(parts) != 3 or parts[1] != "":
        raise JwsError("not a detached JWS in compact serialization (<header>..<signature>)")
    header_b64, _, sig_b64 = parts
    try:
        header = json.loads(b64url_decode(header_b64))
    except (JwsError, ValueError, binascii.Error):
        raise JwsError("the JWS header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise JwsError("the JWS header is not a JSON object")
    if header.get("alg") != JWS_ALGORITHM:
        raise JwsError(f"the JWS algorithm is {header.get('alg')!r}; only {JWS_ALGORITHM} is accepted")
    if "kid" in header and header["kid"] != tok.id:
        raise JwsError(f"the JWS key id is {header.get('kid')!r}, not the token id {tok.id!r}")
    payload = content.encode() if isinstance(content, str) else content
    try:
        got = b64url_decode(sig_b64)
    except (JwsError, binascii.Error):
        raise JwsError("the JWS signature is not base64url") from None
    want = _mac(str(tok), header_b64 + "." + b64url(payload))
    if not hmac.compare_digest(got, want):
        raise JwsError("the signature does not match the content and token")


# --- CA pinning -------------------------------------------------------------------------------------


def ca_cert_hash(cert: Any) -> str:
    """``sha256:<hex>`` of the certificate's DER SubjectPublicKeyInfo (a
    ``cryptography`` certificate, or PEM/DER bytes)."""

    if isinstance(cert, (bytes, bytearray)):
        data = bytes(cert)
        cert = x509.load_pem_x509_certificate(data) if b"-----BEGIN" in data else x509.load_der_x509_certificate(data)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return CA_HASH_PREFIX + hashlib.sha256(spki).hexdigest()


def parse_ca_hash(value: str) -> str:
    """A ``--discovery-token-ca-cert-hash`` value, normalised to lower case."""
    v = value.strip().lower() if isinstance(value, str) else ""
    if not re.fullmatch(re.escape(CA_HASH_PREFIX) + r"[0-9a-f]{64}", v):
        raise TokenError(f"the CA certificate hash {value!r} is not sha256:<64 hex digits>")
    return v


def ca_matches(cert: Any, pins: Iterable[str]) -> bool:
    got = ca_cert_hash(cert)
    return any(hmac.compare_digest(got, parse_ca_hash(p)) for p in pins)


# --- the cluster-info connection config ----------------------------------------------------------


def cluster_info_kubeconfig(server: str, ca_pem: bytes) -> str:
    """The ``kubeconfig`` value of ``cluster-info``: one cluster, no users (the shape
    upstream publishes), serialised deterministically so signatures are stable."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "", "cluster": {"certificate-authority-data": base64.b64encode(ca_pem).decode(), "server": server}}
        ],
        "contexts": [],
        "current-context": "",
        "preferences": {},
        "users": [],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def kubeconfig_cluster(content: str) -> tuple[str, bytes]:
    """(server, CA PEM) of the first cluster of a connection config; TokenError if absent."""
    try:
        doc = yaml.safe_load(content)
        cluster = doc["clusters"][0]["cluster"]
        return str(cluster["server"]), base64.b64decode(cluster["certificate-authority-data"], validate=True)
    except Exception as exc:  # noqa: BLE001 - any shape problem means the same to the caller
        raise TokenError(
            f"the connection config has no cluster with server and certificate-authority-data "
            f"({type(exc).__name__}: {exc})"
        ) from None


def join_command(server: str, token: Token | str, ca_hash: str) -> str:
    return f"{names.AGENT_NAME} join --server {server} --token {token} --discovery-token-ca-cert-hash {ca_hash}"

"""Compact JWS (JWT) signing and verification with RSA and ECDSA keys.

Service-account tokens are JWTs signed by the API server. Only what those tokens
need is here: the compact serialization, RS256/384/512 and ES256/384/512, key
loading from PEM files, and upstream's key id (base64url of the SHA-256 of the
DER public key), so tokens from one server verify on another with the same key.
Claim checks (issuer, expiry, audience) belong to the caller: this module only
answers "was this signed by one of these keys".

``cryptography`` does the primitives; writing the few lines of JOSE framing here
avoids another dependency.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Callable, Iterable, Union

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

PublicKey = Union[rsa.RSAPublicKey, ec.EllipticCurvePublicKey]
PrivateKey = Union[rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey]

_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
# An ECDSA key signs with the hash of its curve's size, as upstream picks the algorithm.
_EC_ALG = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_EC_SIZE = {"ES256": 32, "ES384": 48, "ES512": 66}
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.S)
MAX_TOKEN_BYTES = 64 * 1024  # far above any token we issue; bounds the work a stranger can cause


class JwtError(ValueError):
    """A token that is malformed or whose signature does not verify."""


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names the file."""


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise JwtError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise JwtError(f"not base64url: {exc}") from None


def key_id(key: PublicKey | PrivateKey) -> str:
    """Upstream's kid: base64url(SHA-256(DER SubjectPublicKeyInfo))."""
    pub = key.public_key() if isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)) else key
    der = pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return b64url_encode(hashlib.sha256(der).digest())


def algorithm_for(key: PrivateKey) -> str:
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        alg = _EC_ALG.get(key.curve.name)
        if alg is None:
            raise KeyFileError(f"ECDSA curve {key.curve.name} is not supported (use P-256, P-384 or P-521)")
        return alg
    raise KeyFileError(f"{type(key).__name__} keys cannot sign tokens (RSA or ECDSA only)")


def encode(claims: dict, key: PrivateKey, headers: dict | None = None) -> str:
    """Sign ``claims`` into a compact JWS with the algorithm the key implies."""
    alg = algorithm_for(key)
    header = {"alg": alg, "kid": key_id(key), **(headers or {})}
    signing_input = (b64url_encode(orjson.dumps(header)) + "." + b64url_encode(orjson.dumps(claims))).encode()
    digest = _HASHES[alg[2:]]()
    if isinstance(key, rsa.RSAPrivateKey):  # RS256 (algorithm_for)
        sig = key.sign(signing_input, padding.PKCS1v15(), digest)
    else:
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(digest)))
        size = _EC_SIZE[alg]
        sig = r.to_bytes(size, "big") + s.to_bytes(size, "big")
    return signing_input.decode() + "." + b64url_encode(sig)


def decode_unverified(token: str) -> tuple[dict, dict]:
    """Header and claims of a compact JWS, without checking the signature.

    Used to see whether a token is ours (its issuer) before spending a signature
    check on it; never trust what it returns."""
    header, claims, _, _ = _split(token)
    return header, claims


def _split(token: str) -> tuple[dict, dict, bytes, bytes]:
    if len(token) > MAX_TOKEN_BYTES:
        raise JwtError("token too large")
    parts = token.split(".")
    if len(parts) != 3:
        raise JwtError("compact JWS must have three parts")
    try:
        header = orjson.loads(b64url_decode(parts[0]))
        claims = orjson.loads(b64url_decode(parts[1]))
    except orjson.JSONDecodeError as exc:
        raise JwtError(f"malformed JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise JwtError("header and payload must be JSON objects")
    return header, claims, (parts[0] + "." + parts[1]).encode(), b64url_decode(parts[2])


def _verify_one(alg: str, key: PublicKey, signing_input: bytes, sig: bytes) -> bool:
    digest = _HASHES[alg[2:]]()
    try:
        if alg.startswith("RS"):
            if not isinstance(key, rsa.RSAPublicKey):
                return False
            key.verify(sig, signing_input, padding.PKCS1v15(), digest)
            return True
        if not isinstance(key, ec.EllipticCurvePublicKey) or _EC_ALG.get(key.curve.name) != alg:
            return False
        size = _EC_SIZE[alg]
        if len(sig) != 2 * size:
            return False
        der = encode_dss_signature(int.from_bytes(sig[:size], "big"), int.from_bytes(sig[size:], "big"))
        key.verify(der, signing_input, ec.ECDSA(digest))
        return True
    except InvalidSignature:
        return False


def verify(token: str, keys: Iterable[PublicKey]) -> tuple[dict, dict]:
    """Header and claims of a token signed by one of ``keys``; JwtError otherwise.

    Keys whose id matches the header's ``kid`` are tried first, then the rest: a
    token from another signer with the same key but no kid still verifies."""
    header, claims, signing_input, sig = _split(token)
    alg = header.get("alg")
    if not isinstance(alg, str) or alg[:2] not in ("RS", "ES") or alg[2:] not in _HASHES:
        raise JwtError(f"unsupported signing algorithm {alg!r}")
    if header.get("crit"):
        raise JwtError("critical header extensions are not supported")
    keys = list(keys)
    kid = header.get("kid")
    ordered = sorted(keys, key=lambda k: 0 if kid and key_id(k) == kid else 1)
    for key in ordered:
        if _verify_one(alg, key, signing_input, sig):
            return header, claims
    raise JwtError("the signature does not verify with any of the server's keys")


# --- keys from PEM files -------------------------------------------------------------------


def _public_of(key: PublicKey | PrivateKey) -> PublicKey:
    if isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
        return key.public_key()
    return key


def load_public_keys(data: bytes, source: str) -> list[PublicKey]:
    """Every RSA or ECDSA key in a PEM file (public or private blocks) as public keys.

    Upstream accepts the same blocks: ``PUBLIC KEY``, ``RSA PUBLIC KEY``, ``RSA PRIVATE
    KEY``, ``EC PRIVATE KEY`` and ``PRIVATE KEY``; other blocks (certificates, EC
    parameters) are skipped. No usable key at all is an error naming the file."""
    keys: list[PublicKey] = []
    for m in _PEM_BLOCK.finditer(data):
        label, block = m.group(1).decode(), m.group(0)
        key: PublicKeyTypes | PrivateKeyTypes
        try:
            if label in ("PUBLIC KEY", "RSA PUBLIC KEY"):
                key = serialization.load_pem_public_key(block)
            elif label in ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"):
                key = serialization.load_pem_private_key(block, password=None)
            else:
                continue
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"{source}: cannot parse the {label} block: {exc}") from None
        if not isinstance(
            key, (rsa.RSAPublicKey, rsa.RSAPrivateKey, ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)
        ):
            raise KeyFileError(f"{source}: {type(key).__name__} keys are not supported (RSA or ECDSA only)")
        keys.append(_public_of(key))
    if not keys:
        raise KeyFileError(f"{source}: no RSA or ECDSA public or private key in PEM form found")
    return keys


def load_private_key(data: bytes, source: str) -> PrivateKey:
    """The one RSA or ECDSA private key of a PEM file (the service-account signing key)."""
    found: list[PrivateKey] = []
    for m in _PEM_BLOCK.finditer(data):
        label, block = m.group(1).decode(), m.group(0)
        if label not in ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"):
            continue
        try:
            key = serialization.load_pem_private_key(block, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"{source}: cannot parse the {label} block: {exc}") from None
        if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
            raise KeyFileError(f"{source}: {type(key).__name__} keys cannot sign tokens (RSA or ECDSA only)")
        found.append(key)
    if not found:
        raise KeyFileError(f"{source}: no RSA or ECDSA private key in PEM form found")
    if len(found) > 1:
        raise KeyFileError(f"{source}: holds {len(found)} private keys; the signing key file must hold one")
    algorithm_for(found[0])  # an unsupported curve fails now, not at the first TokenRequest
    return found[0]

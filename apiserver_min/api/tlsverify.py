"""Client certificates checked by the x509 authenticator, not by the TLS handshake.

Upstream asks TLS clients for a certificate without verifying it during the
handshake and verifies it in its x509 authenticator, so that a forged, expired or
otherwise unusable client certificate gets a 401 Status like any other bad
credential instead of a failed handshake (which clients report as an obscure
connection error, and which would also refuse a request that carries a valid
bearer token next to a stale certificate).

Python's ``ssl`` module has no "request but do not verify" mode: CERT_OPTIONAL
verifies what the client sends and fails the handshake on error. The module's
SSLContext wraps an OpenSSL ``SSL_CTX``, though, and OpenSSL lets a verify
callback overrule every verification error. ``request_client_certificates``
installs a callback that accepts every certificate through ctypes, on the same
libssl that ``_ssl`` uses, after checking that it found the right ``SSL_CTX``
pointer; when any check fails it leaves the handshake verification in place
(the previous behaviour) and says so in one log line.

Whatever the handshake did, ``ClientCertificateVerifier`` verifies the peer
certificate from its DER form: issued by a certificate of the client CA bundle
(``--client-ca-file``, else the cluster CA), through intermediates the client sent
when the Python version exposes them (3.13+), within its validity period, with a
key usage and extended key usage that allow client authentication, and not a CA
certificate itself. Results are cached briefly per SHA-256 of the DER, so a client
that sends the same certificate on every request pays for one verification.

Never authenticate from ``getpeercert()``'s dict form: with the callback in place
it describes a certificate nobody verified.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime as _dt
import hashlib
import logging
import os
import ssl
import sys
import time
from typing import Any, Callable, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

log = logging.getLogger("orch-apiserver.tlsverify")

# OpenSSL's SSL_VERIFY_* bits (ssl.h; stable since 0.9).
SSL_VERIFY_NONE = 0x00
SSL_VERIFY_PEER = 0x01
SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x02

VERIFY_CACHE_TTL_SECONDS = 30.0
VERIFY_CACHE_SIZE = 1024
# How often the CA bundle file is looked at for changes (upstream re-reads
# --client-ca-file when it changes, without a restart).
BUNDLE_RECHECK_SECONDS = 5.0
MAX_INTERMEDIATES = 8


# --- the handshake: request a certificate, accept any -------------------------------------------

# int verify_callback(int preverify_ok, X509_STORE_CTX *ctx)
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _accept_any(preverify_ok: int, store_ctx: int) -> int:
    """Overrules every verification error: the x509 authenticator verifies instead."""
    return 1


# Module level, so the C callback outlives every context it is installed on.
ACCEPT_ANY_CALLBACK = _VERIFY_CALLBACK(_accept_any)


class _LibSsl:
    """The OpenSSL functions needed, looked up through the ``_ssl`` extension module's
    own handle so that they come from the very libssl/libcrypto it is linked with."""

    def __init__(self) -> None:
        import _ssl  # the extension module behind ssl

        path = getattr(_ssl, "__file__", None)
        # A statically linked _ssl lives in the interpreter itself.
        self.lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
        lib = self.lib
        self.version_num = lib.OpenSSL_version_num
        self.version_num.restype = ctypes.c_ulong
        self.version_num.argtypes = []
        self.get_verify_mode = lib.SSL_CTX_get_verify_mode
        self.get_verify_mode.restype = ctypes.c_int
        self.get_verify_mode.argtypes = [ctypes.c_void_p]
        self.get_verify_callback = lib.SSL_CTX_get_verify_callback
        self.get_verify_callback.restype = ctypes.c_void_p
        self.get_verify_callback.argtypes = [ctypes.c_void_p]
        self.set_verify = lib.SSL_CTX_set_verify
        self.set_verify.restype = None
        self.set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CALLBACK]


def _ssl_ctx_pointer(ctx: ssl.SSLContext) -> int:
    """The SSL_CTX* of a context: CPython's PySSLContext keeps it as the first field
    after PyObject_HEAD. Only read here; callers confirm it before any write."""
    import _ssl

    if sys.implementation.name != "cpython":
        raise RuntimeError(f"not CPython ({sys.implementation.name})")
    if not isinstance(ctx, _ssl._SSLContext):
        raise RuntimeError(f"{type(ctx).__name__} is not an _ssl._SSLContext")
    offset = object.__basicsize__
    if _ssl._SSLContext.__basicsize__ < offset + ctypes.sizeof(ctypes.c_void_p):
        raise RuntimeError("_ssl._SSLContext is smaller than PyObject_HEAD plus a pointer")
    ptr = ctypes.c_void_p.from_address(id(ctx) + offset).value
    if not ptr:
        raise RuntimeError("the SSL_CTX pointer is NULL")
    return ptr


def _install(ctx: ssl.SSLContext) -> None:
    """The checks and the write; RuntimeError/OSError/AttributeError name what failed."""
    lib = _LibSsl()
    runtime = lib.version_num()
    if runtime != ssl.OPENSSL_VERSION_NUMBER:
        raise RuntimeError(
            f"libssl found by ctypes is {runtime:#x}, the ssl module uses {ssl.OPENSSL_VERSION_NUMBER:#x}"
        )
    ptr = _ssl_ctx_pointer(ctx)
    # Confirm the pointer: what Python's verify_mode setter writes must show through it,
    # for two different settings (a coincidental match of one value is not enough).
    for mode, expected in (
        (ssl.CERT_REQUIRED, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT),
        (ssl.CERT_NONE, SSL_VERIFY_NONE),
        (ssl.CERT_OPTIONAL, SSL_VERIFY_PEER),
    ):
        ctx.verify_mode = mode
        seen = lib.get_verify_mode(ptr)
        if seen != expected:
            raise RuntimeError(
                f"SSL_CTX_get_verify_mode gave {seen} after verify_mode={mode.name} "
                f"(expected {expected}): not the context's SSL_CTX"
            )
    existing = lib.get_verify_callback(ptr)
    if existing and existing != ctypes.cast(ACCEPT_ANY_CALLBACK, ctypes.c_void_p).value:
        raise RuntimeError("the context already has a verify callback")
    lib.set_verify(ptr, SSL_VERIFY_PEER, ACCEPT_ANY_CALLBACK)
    if (
        lib.get_verify_mode(ptr) != SSL_VERIFY_PEER
        or lib.get_verify_callback(ptr) != ctypes.cast(ACCEPT_ANY_CALLBACK, ctypes.c_void_p).value
    ):
        raise RuntimeError("the verify callback did not stick")
    # Also on the context: the callback lives at least as long as the context does.
    ctx._orch_verify_callback = ACCEPT_ANY_CALLBACK  # type: ignore[attr-defined]


def request_client_certificates(ctx: ssl.SSLContext) -> bool:
    """Make a server context ask for a client certificate and accept any in the
    handshake (upstream's tls.RequestClientCert), leaving verification to the x509
    authenticator. True when done; False when it could not be done safely, in which
    case the context verifies certificates in the handshake (CERT_OPTIONAL against
    the locations already loaded) and one warning says so.

    Renegotiation is refused either way (upstream's TLS server has none): a connection's
    client certificate is then fixed for its life, so an outcome may be kept per
    connection (authn/x509.py)."""
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    try:
        _install(ctx)
        return True
    except (RuntimeError, OSError, AttributeError, TypeError, ValueError) as exc:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        log.warning(
            "client certificates stay verified in the TLS handshake (%s): a forged or expired client "
            "certificate fails the handshake instead of getting a 401",
            exc,
        )
        return False


def peer_certificates(transport: Any) -> tuple[bytes, tuple[bytes, ...]] | None:
    """The client's certificate (DER) and the further certificates it sent, from a
    TLS transport; None when there is no TLS or no client certificate. The further
    certificates are only available from Python 3.13 (get_unverified_chain)."""
    if transport is None:
        return None
    sslobj = transport.get_extra_info("ssl_object")
    if sslobj is None:
        return None
    try:
        der = sslobj.getpeercert(binary_form=True)
    except ValueError:  # the handshake is not done (cannot happen for a request)
        return None
    if not der:
        return None
    chain_of = getattr(sslobj, "get_unverified_chain", None)
    extra: tuple[bytes, ...] = ()
    if chain_of is not None:
        try:
            chain = chain_of() or []
        except (ValueError, ssl.SSLError):
            chain = []
        extra = tuple(bytes(c) for c in chain if bytes(c) != der)
    return der, extra


# --- verification from DER ------------------------------------------------------------------------


class CertificateError(Exception):
    """The client certificate is not acceptable; the message says why (for the log)."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        # Depends on the clock (validity period): not cached, it may change by itself.
        self.transient = transient


@dataclasses.dataclass(frozen=True)
class VerifiedCertificate:
    """A client certificate that verified: its parsed form and its DER's SHA-256."""

    certificate: x509.Certificate
    digest: bytes
    # The validity window of the whole chain (POSIX seconds): re-checked on cache hits.
    valid_from: float
    valid_until: float


def describe(cert: x509.Certificate) -> str:
    """Upstream's way to name a certificate in the log: serial, SKID, AKID."""

    def hexid(ext_type, attr) -> str:
        try:
            return getattr(cert.extensions.get_extension_for_class(ext_type).value, attr, b"").hex() or ""
        except (x509.ExtensionNotFound, ValueError):
            return ""

    return (
        f"SN={cert.serial_number}, SKID={hexid(x509.SubjectKeyIdentifier, 'digest')}, "
        f"AKID={hexid(x509.AuthorityKeyIdentifier, 'key_identifier')}"
    )


def _ext(cert: x509.Certificate, ext_type):
    try:
        return cert.extensions.get_extension_for_class(ext_type).value
    except x509.ExtensionNotFound:
        return None


def _fmt(t: _dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_time(cert: x509.Certificate, now: _dt.datetime, what: str) -> None:
    nb, na = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < nb:
        raise CertificateError(
            f"x509: {what} has expired or is not yet valid: current time {_fmt(now)} is before {_fmt(nb)}",
            transient=True,
        )
    if now > na:
        raise CertificateError(
            f"x509: {what} has expired or is not yet valid: current time {_fmt(now)} is after {_fmt(na)}",
            transient=True,
        )


def _check_critical(cert: x509.Certificate, what: str) -> None:
    for e in cert.extensions:
        if e.critical and isinstance(e.value, x509.UnrecognizedExtension):
            raise CertificateError(f"x509: {what} has an unhandled critical extension {e.oid.dotted_string}")


def _check_leaf(cert: x509.Certificate) -> None:
    bc = _ext(cert, x509.BasicConstraints)
    if bc is not None and bc.ca:
        raise CertificateError("a CA certificate cannot be used as a client certificate")
    ku = _ext(cert, x509.KeyUsage)
    # Signing (or key agreement) is how a TLS client proves it holds the key; the
    # handshake verification this replaces (OpenSSL's ssl_client purpose) asked the same.
    if ku is not None and not (ku.digital_signature or ku.key_agreement):
        raise CertificateError(
            "x509: certificate specifies an incompatible key usage "
            "(key usage allows neither digital signature nor key agreement)"
        )
    _check_eku(cert, "certificate")
    _check_critical(cert, "certificate")


def _check_eku(cert: x509.Certificate, what: str) -> None:
    eku = _ext(cert, x509.ExtendedKeyUsage)
    if (
        eku is not None
        and ExtendedKeyUsageOID.CLIENT_AUTH not in eku
        and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in eku
    ):
        raise CertificateError(
            f"x509: {what} specifies an incompatible key usage (extended key usage without client auth)"
        )


def _check_issuer(ca: x509.Certificate, below: int, now: _dt.datetime, what: str) -> None:
    """A certificate that signed another one: a CA (when it says), allowed to sign
    certificates, valid now, with room in its path length for ``below`` intermediates."""
    bc = _ext(ca, x509.BasicConstraints)
    if bc is not None and not bc.ca:
        raise CertificateError(f"x509: {what} {ca.subject.rfc4514_string()} is not a CA")
    if bc is not None and bc.path_length is not None and below > bc.path_length:
        raise CertificateError(
            f"x509: too many intermediates for the path length constraint of {what} {ca.subject.rfc4514_string()}"
        )
    ku = _ext(ca, x509.KeyUsage)
    if ku is not None and not ku.key_cert_sign:
        raise CertificateError(f"x509: {what} {ca.subject.rfc4514_string()} may not sign certificates")
    _check_time(ca, now, f"{what} {ca.subject.rfc4514_string()}")


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Issuer name and signature (RSA PKCS#1 v1.5 or PSS, ECDSA, Ed25519, Ed448)."""
    aki = _ext(cert, x509.AuthorityKeyIdentifier)
    ski = _ext(issuer, x509.SubjectKeyIdentifier)
    if aki is not None and aki.key_identifier and ski is not None and aki.key_identifier != ski.digest:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


class CaBundle:
    """The trust anchors: the certificates of one PEM file, by subject."""

    def __init__(self, certs: Sequence[x509.Certificate]):
        self.certs = tuple(certs)
        self.by_subject: dict[bytes, list[x509.Certificate]] = {}
        for c in self.certs:
            self.by_subject.setdefault(c.subject.public_bytes(), []).append(c)

    @classmethod
    def from_file(cls, path: str) -> "CaBundle":
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CertificateError(f"client CA bundle {path}: {exc.strerror or exc}") from None
        try:
            certs = x509.load_pem_x509_certificates(data)
        except ValueError:
            raise CertificateError(f"client CA bundle {path}: no readable PEM certificates") from None
        return cls(certs)

    def issuers_of(self, cert: x509.Certificate) -> list[x509.Certificate]:
        return self.by_subject.get(cert.issuer.public_bytes(), [])


def verify_chain(
    der: bytes, bundle: CaBundle, intermediates: Sequence[bytes] = (), now: _dt.datetime | None = None
) -> VerifiedCertificate:
    """Verifies one client certificate against the anchors of ``bundle``, through
    the given intermediates (DER) if needed. Raises CertificateError naming the
    certificate and the reason."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    try:
        leaf = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise CertificateError(f"unreadable client certificate: {exc}") from None
    try:
        return _verify_parsed(leaf, der, bundle, intermediates, now)
    except CertificateError as exc:
        raise CertificateError(f"verifying certificate {describe(leaf)} failed: {exc}", exc.transient) from None


def _verify_parsed(
    leaf: x509.Certificate, der: bytes, bundle: CaBundle, intermediates: Sequence[bytes], now: _dt.datetime
) -> VerifiedCertificate:
    _check_time(leaf, now, "certificate")
    _check_leaf(leaf)
    pool: list[x509.Certificate] = []
    for i, d in enumerate(intermediates[:MAX_INTERMEDIATES]):
        try:
            pool.append(x509.load_der_x509_certificate(d))
        except ValueError:
            log.debug("ignoring unreadable intermediate %d sent by the client", i)
    chain = [leaf]
    current = leaf
    while True:
        below = len(chain) - 1  # intermediates between this issuer and the leaf
        anchor_error: CertificateError | None = None
        for anchor in bundle.issuers_of(current):
            if not _signed_by(current, anchor):
                continue
            try:
                _check_issuer(anchor, below, now, "CA")
            except CertificateError as exc:  # another anchor of that name may do (CA rotation)
                anchor_error = anchor_error or exc
                continue
            chain.append(anchor)
            windows = [(c.not_valid_before_utc.timestamp(), c.not_valid_after_utc.timestamp()) for c in chain]
            return VerifiedCertificate(
                leaf, hashlib.sha256(der).digest(), max(w[0] for w in windows), min(w[1] for w in windows)
            )
        issuer = next(
            (c for c in pool if c not in chain and c.subject == current.issuer and _signed_by(current, c)), None
        )
        if issuer is None:
            raise anchor_error or CertificateError("x509: certificate signed by unknown authority")
        _check_issuer(issuer, below, now, "intermediate")
        _check_eku(issuer, f"intermediate {issuer.subject.rfc4514_string()}")
        _check_critical(issuer, f"intermediate {issuer.subject.rfc4514_string()}")
        chain.append(issuer)
        current = issuer


@dataclasses.dataclass
class _Entry:
    result: VerifiedCertificate | None
    error: str | None
    until: float
    generation: int


class ClientCertificateVerifier:
    """Verifies client certificates (DER) against the CA bundle in ``ca_file``.

    The bundle is read on first use (the server creates its CA after it is built)
    and re-read when the file changes; a bundle that cannot be read keeps the last
    good one (with a warning), or refuses every certificate when there is none.
    Outcomes are cached per SHA-256 of the DER (and the intermediates) for
    ``cache_ttl`` seconds; clock-dependent failures are not cached, and a cached
    success is re-checked against its validity window on every hit."""

    def __init__(
        self,
        ca_file: str,
        *,
        cache_ttl: float = VERIFY_CACHE_TTL_SECONDS,
        cache_size: int = VERIFY_CACHE_SIZE,
        recheck: float = BUNDLE_RECHECK_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.ca_file = ca_file
        self.cache_ttl = cache_ttl
        self.cache_size = cache_size
        self.recheck = recheck
        self.monotonic = monotonic
        self.wall = wall
        self._bundle: CaBundle | None = None
        self._bundle_error = ""
        self._stamp: tuple[int, int, int] | None = None
        self._checked_at = float("-inf")
        self.generation = 0  # bumped on every bundle (re)load: cached outcomes of older ones are void
        self._cache: dict[bytes, _Entry] = {}
        self.full_checks = 0  # verifications not answered from the cache

    def bundle(self) -> CaBundle:
        """The current CA bundle (re-read when the file changed), or CertificateError."""
        t = self.monotonic()
        if t - self._checked_at >= self.recheck or self._bundle is None:
            self._checked_at = t
            self._reload()
        if self._bundle is None:
            raise CertificateError(self._bundle_error or f"client CA bundle {self.ca_file}: not loaded")
        return self._bundle

    def _reload(self) -> None:
        try:
            st = os.stat(self.ca_file)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            stamp = None
            err = f"client CA bundle {self.ca_file}: {exc.strerror or exc}"
        if stamp is not None and stamp == self._stamp and self._bundle is not None:
            return
        try:
            if stamp is None:
                raise CertificateError(err)
            bundle = CaBundle.from_file(self.ca_file)
        except CertificateError as exc:
            if self._bundle_error != str(exc):
                log.warning("%s%s", exc, "; keeping the last good bundle" if self._bundle else "")
            self._bundle_error = str(exc)
            return
        self._bundle, self._stamp, self._bundle_error = bundle, stamp, ""
        self.generation += 1
        self._cache.clear()
        log.info("client CA bundle %s: %d certificate(s)", self.ca_file, len(bundle.certs))

    def verify(self, der: bytes, intermediates: Sequence[bytes] = ()) -> VerifiedCertificate:
        return self.check(der, intermediates)[0]

    def check(self, der: bytes, intermediates: Sequence[bytes] = ()) -> tuple[VerifiedCertificate, float]:
        """The verified certificate and the monotonic time until which this outcome may
        be reused (see :meth:`holds`); CertificateError when it does not verify."""
        bundle = self.bundle()
        h = hashlib.sha256(der)
        for d in intermediates:
            h.update(b"\0" + hashlib.sha256(d).digest())
        key = h.digest()
        entry = self._cache.get(key)
        if entry is not None and entry.generation == self.generation and self.monotonic() < entry.until:
            if entry.error is not None:
                raise CertificateError(entry.error)
            res = entry.result
            if res is not None and res.valid_from <= self.wall() <= res.valid_until:
                return res, entry.until
        self.full_checks += 1
        now = _dt.datetime.fromtimestamp(self.wall(), _dt.timezone.utc)
        try:
            res = verify_chain(der, bundle, intermediates, now)
        except CertificateError as exc:
            if not exc.transient:
                self._remember(key, _Entry(None, str(exc), self.monotonic() + self.cache_ttl, self.generation))
            else:
                self._cache.pop(key, None)
            raise
        until = self.monotonic() + self.cache_ttl
        self._remember(key, _Entry(res, None, until, self.generation))
        return res, until

    def holds(self, res: VerifiedCertificate, generation: int, until: float) -> bool:
        """Whether an outcome of :meth:`check` made under bundle ``generation`` may be
        reused now without looking at the certificate again (a TLS connection's peer
        certificate cannot change): the bundle is still that one (re-read when its file
        changed), the outcome's lifetime has not passed and the time is inside the
        chain's validity window. The same conditions as a hit in the verifier's cache."""
        try:
            self.bundle()
        except CertificateError:
            return False
        return (
            generation == self.generation
            and self.monotonic() < until
            and res.valid_from <= self.wall() <= res.valid_until
        )

    def _remember(self, key: bytes, entry: _Entry) -> None:
        if self.cache_ttl <= 0:
            return
        self._cache.pop(key, None)
        if len(self._cache) >= self.cache_size:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = entry

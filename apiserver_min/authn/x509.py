"""Client-certificate authentication: the user is the certificate's CN, the groups its O."""

from __future__ import annotations

import weakref
from typing import Any, Callable

from cryptography import x509
from cryptography.x509.oid import NameOID

from ..api.tlsverify import CertificateError, ClientCertificateVerifier, VerifiedCertificate, peer_certificates
from ..api.user import UserInfo
from .authenticator import X509_CACHE_SIZE, Unauthorized, with_authenticated_group


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

    def __init__(
        self,
        verifier: ClientCertificateVerifier,
        cache_size: int = X509_CACHE_SIZE,
        peer: Callable[[Any], tuple[bytes, tuple[bytes, ...]] | None] | None = None,
        connection: Callable[[Any], Any] | None = None,
    ):
        self.verifier = verifier
        # SHA-256 of the verified DER -> user (with system:authenticated): the user depends
        # on the certificate alone; the verifier decides on every request whether it still holds.
        self._users: dict[bytes, UserInfo | None] = {}
        self.cache_size = cache_size
        self._peer = peer or (lambda request: peer_certificates(getattr(request, "transport", None)))
        # The request's TLS connection (its ssl object; None: no TLS) -> the outcome for its
        # peer certificate, which cannot change on a connection (no renegotiation,
        # tlsverify.request_client_certificates): a request on a connection seen before
        # skips reading and hashing the certificate while the verifier says the outcome
        # holds. Entries go with their connection. Only with the default peer reader (an
        # injected one has no connection unless one is given too).
        if connection is None and peer is None:
            connection = _ssl_object
        self._connection = connection
        self._by_connection = _ByConnection()

    def connection_user(self, request: Any) -> UserInfo | None:
        """The user of the certificate the request's connection presented, when that
        connection's outcome is known and still holds (no await, nothing re-read); None
        otherwise (ask :meth:`authenticate`)."""
        conn = self._connection(request) if self._connection is not None else None
        if conn is None:
            return None
        seen = self._by_connection.get(conn)
        if (
            seen is not None
            and seen.user is not None
            and self.verifier.holds(seen.verified, seen.generation, seen.until)
        ):
            return seen.user
        return None

    async def authenticate(self, request: Any) -> UserInfo | None:
        conn = self._connection(request) if self._connection is not None else None
        if conn is not None:
            seen = self._by_connection.get(conn)
            if seen is not None and self.verifier.holds(seen.verified, seen.generation, seen.until):
                return seen.user
        presented = self._peer(request)
        if presented is None:
            return None
        try:
            verified, until = self.verifier.check(presented[0], presented[1])
        except CertificateError as exc:
            raise Unauthorized(str(exc)) from None
        generation = self.verifier.generation  # the bundle the check used (it is synchronous)
        try:
            user = self._users[verified.digest]
        except KeyError:
            user = user_from_certificate(verified.certificate)
            if user is not None:
                user = with_authenticated_group(user)
            if len(self._users) >= self.cache_size:
                del self._users[next(iter(self._users))]
            self._users[verified.digest] = user
        if conn is not None:
            self._by_connection[conn] = _Outcome(verified, generation, until, user)
        return user


class _Outcome:
    __slots__ = ("verified", "generation", "until", "user")

    def __init__(self, verified: VerifiedCertificate, generation: int, until: float, user: UserInfo | None):
        self.verified = verified
        self.generation = generation
        self.until = until
        self.user = user


class _ByConnection:
    """Outcomes by connection, each gone with its connection: a weak-keyed map whose
    lookup makes no weak reference (``WeakKeyDictionary.get`` makes one per call, and
    this is asked on every request). Keyed by ``id``; an entry holds a weak reference
    to its connection, so an id reused after a connection is gone never matches."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, _Outcome]] = {}

    def get(self, conn: Any) -> _Outcome | None:
        entry = self._entries.get(id(conn))
        if entry is None or entry[0]() is not conn:
            return None
        return entry[1]

    def __setitem__(self, conn: Any, outcome: _Outcome) -> None:
        key = id(conn)
        entries = self._entries

        def gone(ref: weakref.ref) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(conn, gone), outcome)

    def __len__(self) -> int:
        return len(self._entries)


def _ssl_object(request: Any) -> Any:
    """The ssl object of the request's connection (one per connection), or None."""
    transport = getattr(request, "transport", None)
    return transport.get_extra_info("ssl_object") if transport is not None else None


def user_from_certificate(cert: x509.Certificate) -> UserInfo | None:
    """Upstream's CommonNameUserConversion: CN the user, each O a group (in order);
    no common name, no opinion."""
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(cns[0].value) if cns else ""
    if not cn:
        return None
    orgs = tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return UserInfo(cn, groups=orgs)

"""Client-certificate authentication: the user is the certificate's CN, the groups its O."""

from __future__ import annotations

from typing import Any, Callable

from cryptography import x509
from cryptography.x509.oid import NameOID

from ..api.tlsverify import CertificateError, ClientCertificateVerifier, peer_certificates
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
    ):
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

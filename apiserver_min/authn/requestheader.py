"""Front-proxy authentication (``--requestheader-*``): an authenticating proxy in
front of the server names the user in request headers.

The headers are believed only on a request whose TLS client certificate verifies
against ``--requestheader-client-ca-file`` (and, when ``--requestheader-allowed-names``
is given, whose common name is one of those names). The user name is the first
non-empty ``--requestheader-username-headers`` header, the groups every value of
every ``--requestheader-group-headers`` header, and each header starting with
``--requestheader-extra-headers-prefix`` one extra key (the rest of the header
name, lower-cased and percent-decoded) with its values.

Whatever authenticated a request, the configured headers are removed from it before
anything downstream sees it (``strip``), so a client cannot smuggle them past the
proxy to a handler, an audit record or a relay.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from typing import Any, Callable

from cryptography.x509.oid import NameOID
from multidict import CIMultiDict

from ..api.tlsverify import CertificateError, ClientCertificateVerifier, peer_certificates
from ..api.user import UserInfo
from .authenticator import Unauthorized


@dataclasses.dataclass(frozen=True)
class RequestHeaderConfig:
    client_ca_file: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ()
    extra_headers_prefixes: tuple[str, ...] = ()

    def header_names(self) -> tuple[str, ...]:
        return tuple(h.lower() for h in self.username_headers + self.group_headers)

    def prefixes(self) -> tuple[str, ...]:
        return tuple(p.lower() for p in self.extra_headers_prefixes)


def published_data(client_ca_pem: str, config: RequestHeaderConfig | None, requestheader_ca_pem: str) -> dict[str, str]:
    """The data of the extension-apiserver-authentication ConfigMap, upstream's keys:
    the client CA, and with a front proxy its CA and its header settings (JSON lists),
    so that a server behind this one can check the same credentials."""
    data = {"client-ca-file": client_ca_pem}
    if config is not None:
        data.update(
            {
                "requestheader-client-ca-file": requestheader_ca_pem,
                "requestheader-allowed-names": json.dumps(list(config.allowed_names)),
                "requestheader-username-headers": json.dumps(list(config.username_headers)),
                "requestheader-group-headers": json.dumps(list(config.group_headers)),
                "requestheader-extra-headers-prefix": json.dumps(list(config.extra_headers_prefixes)),
            }
        )
    return data


class RequestHeaderAuthenticator:
    name = "requestheader"

    def __init__(
        self,
        config: RequestHeaderConfig,
        verifier: ClientCertificateVerifier | None = None,
        peer: Callable[[Any], tuple[bytes, tuple[bytes, ...]] | None] | None = None,
    ):
        self.config = config
        self.verifier = verifier or ClientCertificateVerifier(config.client_ca_file)
        self.allowed = frozenset(config.allowed_names)
        self._peer = peer or (lambda request: peer_certificates(getattr(request, "transport", None)))
        self._names = frozenset(config.header_names())
        self._prefixes = config.prefixes()

    async def authenticate(self, request: Any) -> UserInfo | None:
        headers = request.headers
        username = ""
        for h in self.config.username_headers:
            username = headers.get(h, "")
            if username:
                break
        if not username:
            return None  # nothing claimed: not the proxy's request (or the proxy sent no user)
        presented = self._peer(request)
        if presented is None:
            return None  # the headers of a client without a certificate are not believed
        try:
            verified = self.verifier.verify(presented[0], presented[1])
        except CertificateError as exc:
            raise Unauthorized(f"requestheader: the client certificate is not the front proxy's: {exc}") from None
        if self.allowed:
            cns = verified.certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            cn = str(cns[0].value) if cns else ""
            if cn not in self.allowed:
                raise Unauthorized(
                    f"requestheader: the client certificate's common name {cn!r} is not one of "
                    "--requestheader-allowed-names"
                )
        groups: list[str] = []
        for h in self.config.group_headers:
            groups += headers.getall(h, [])
        extra: dict[str, tuple[str, ...]] = {}
        for name in set(headers.keys()):
            lower = name.lower()
            for prefix in self._prefixes:
                if lower.startswith(prefix) and len(lower) > len(prefix):
                    key = urllib.parse.unquote(lower[len(prefix) :])
                    extra[key] = extra.get(key, ()) + tuple(headers.getall(name))
                    break
        return UserInfo(username, groups=tuple(groups), extra=extra)

    def carries_headers(self, request: Any) -> bool:
        for name in request.headers.keys():
            lower = name.lower()
            if lower in self._names or lower.startswith(self._prefixes):
                return True
        return False

    def strip(self, request: Any) -> Any:
        """The request without the configured headers (the same object when it has none)."""
        if not self.carries_headers(request):
            return request
        kept = [
            (k, v)
            for k, v in request.headers.items()
            if k.lower() not in self._names and not k.lower().startswith(self._prefixes)
        ]
        return request.clone(headers=CIMultiDict(kept))

"""Admission plugins guarding certificate signing requests.

- CertificateApproval: approving or denying (the ``approval`` sub-resource)
  needs the ``approve`` verb on resource ``signers`` named after the request's
  signer, or ``<signer domain>/*``, in group ``certificates.orch.io``.
- CertificateSigning: changing ``status.certificate`` needs ``sign`` the same way.
- CertificateSubjectRestriction: no request for the ``orch.io/apiserver-client``
  signer may carry the ``system:masters`` organization (that would mint
  unrestricted administrators).

``spec.request`` is the base64 (in JSON) of a PEM PKCS#10 request.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any, Callable

from cryptography import x509
from cryptography.x509.oid import NameOID

from ...api import names
from ...api import status as st
from ...api.user import UserInfo
from ...authz.authorizer import AuthzAttributes, Decision, Union
from ..chain import Attributes


class CsrParseError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class CsrSubject:
    common_name: str
    organizations: tuple[str, ...]


def parse_csr_request(request: Any) -> CsrSubject:
    """The subject of ``spec.request`` (base64 of PEM, or the PEM bytes themselves)."""
    if isinstance(request, str):
        try:
            data = base64.b64decode(request, validate=True)
        except (binascii.Error, ValueError):
            raise CsrParseError("spec.request is not valid base64") from None
    elif isinstance(request, (bytes, bytearray)):
        data = bytes(request)
    else:
        raise CsrParseError("spec.request is missing")
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError:
        try:
            csr = x509.load_der_x509_csr(data)
        except ValueError:
            raise CsrParseError("PEM block type must be CERTIFICATE REQUEST") from None
    cn = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = tuple(str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return CsrSubject(str(cn[0]) if cn else "", orgs)


async def authorized_for_signer(authorizer: Union, user: UserInfo, verb: str, signer: str) -> bool:
    """Upstream's IsAuthorizedForSignerName: the exact signer name, then ``<domain>/*``."""
    attrs = AuthzAttributes(
        user,
        verb,
        True,
        api_group=names.CERTIFICATES_GROUP,
        api_version="",
        resource=names.SIGNERS_RESOURCE,
        name=signer,
    )
    if (await authorizer.decide(attrs))[0] is Decision.ALLOW:
        return True
    domain = signer.split("/", 1)[0]
    return (await authorizer.decide(dataclasses.replace(attrs, name=f"{domain}/*")))[0] is Decision.ALLOW


def _is_csr(attrs: Attributes) -> bool:
    return attrs.kind.group == names.CERTIFICATES_GROUP and attrs.kind.resource == "certificatesigningrequests"


def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
    return st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, message)


def _signer(obj: dict | None) -> str:
    return str(((obj or {}).get("spec") or {}).get("signerName") or "")


CSR_RESOURCES = frozenset({(names.CERTIFICATES_GROUP, "certificatesigningrequests")})


class CertificateApproval:
    name = "CertificateApproval"
    resources = CSR_RESOURCES  # the chain asks it about nothing else

    def __init__(self, authorizer: Callable[[], Union]):
        self._authorizer = authorizer

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if not _is_csr(attrs) or attrs.subresource != "approval" or attrs.operation != "UPDATE":
            return
        # The new object's signer: a request may not change the signer while approving.
        signer = _signer(attrs.obj)
        if not await authorized_for_signer(self._authorizer(), attrs.user, "approve", signer):
            raise _forbidden(attrs, f'user not permitted to approve requests with signerName "{signer}"')


class CertificateSigning:
    name = "CertificateSigning"
    resources = CSR_RESOURCES  # the chain asks it about nothing else

    def __init__(self, authorizer: Callable[[], Union]):
        self._authorizer = authorizer

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if not _is_csr(attrs) or attrs.subresource != "status" or attrs.operation != "UPDATE":
            return
        new = ((attrs.obj or {}).get("status") or {}).get("certificate")
        old = ((attrs.old or {}).get("status") or {}).get("certificate")
        if new == old:
            return
        signer = _signer(attrs.old)
        if not await authorized_for_signer(self._authorizer(), attrs.user, "sign", signer):
            raise _forbidden(attrs, f'user not permitted to sign requests with signerName "{signer}"')


class CertificateSubjectRestriction:
    name = "CertificateSubjectRestriction"
    resources = CSR_RESOURCES  # the chain asks it about nothing else

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if not _is_csr(attrs) or attrs.subresource or attrs.operation != "CREATE":
            return
        signer = _signer(attrs.obj)
        if signer != names.SIGNER_APISERVER_CLIENT:
            return
        try:
            subject = parse_csr_request(((attrs.obj or {}).get("spec") or {}).get("request"))
        except CsrParseError as exc:
            raise _forbidden(attrs, f"failed to parse CSR: {exc}") from None
        if names.GROUP_MASTERS in subject.organizations:
            raise _forbidden(attrs, f"use of {signer} signer with {names.GROUP_MASTERS} group is not allowed")

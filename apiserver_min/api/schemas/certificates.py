"""``certificates.orch.io/v1`` (upstream ``certificates.k8s.io``): message package
``k8s.io.api.certificates.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META, List, Map
from . import core
from ._common import BYTES, I32, STR, STR_ATOMIC, TIME, F, enum, map_list, ptr, req, struct

PKG = "k8s.io.api.certificates.v1"
S = struct(PKG)

KEY_USAGE = enum(
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
)

# map<string, ExtraValue> on the wire, ExtraValue being {repeated string items = 1}.
EXTRA = Map(List(STR, wrapper=f"{PKG}.ExtraValue"))

CertificateSigningRequestSpec = S(
    "CertificateSigningRequestSpec",
    [
        req("request", BYTES, 1),
        req("signerName", STR, 7),
        ptr("expirationSeconds", I32, 8),
        F("usages", List(KEY_USAGE, "atomic"), 5),
        F("username", STR, 2),
        F("uid", STR, 3),
        F("groups", STR_ATOMIC, 4),
        F("extra", EXTRA, 6),
    ],
)

CertificateSigningRequestCondition = S(
    "CertificateSigningRequestCondition",
    [
        req("type", STR, 1),  # Approved | Denied | Failed (others allowed)
        req("status", core.CONDITION_STATUS, 6),
        F("reason", STR, 2),
        F("message", STR, 3),
        F("lastUpdateTime", TIME, 4),
        F("lastTransitionTime", TIME, 5),
    ],
)

CertificateSigningRequestStatus = S(
    "CertificateSigningRequestStatus",
    [
        F("conditions", map_list(CertificateSigningRequestCondition, "type"), 1),
        F("certificate", BYTES, 2),
    ],
)

CertificateSigningRequest = S(
    "CertificateSigningRequest",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", CertificateSigningRequestSpec, 2),
        F("status", CertificateSigningRequestStatus, 3),
    ],
)

KINDS = {"CertificateSigningRequest": CertificateSigningRequest}

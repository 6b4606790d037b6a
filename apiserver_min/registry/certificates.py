"""The certificates family: CertificateSigningRequest (its strategy serves the main
resource and its ``approval`` and ``status`` sub-resources, which the generic store
writes)."""

from __future__ import annotations

import base64
import binascii
import copy
import re
from typing import Any

from cryptography import x509

from ..api import names
from ..api import validation as v
from ..api.helpers import timestamp
from .strategy import PathNameStrategy


class CsrStrategy(PathNameStrategy):
    """CertificateSigningRequest (upstream's csr, approval and status strategies).

    Create: the requester's identity is filled in from the authenticated user (never
    from the body) and status starts empty, so nobody creates a pre-approved request.
    Main-resource updates change metadata only. The ``approval`` sub-resource changes
    only ``status.conditions``; the ``status`` sub-resource changes status but never
    adds or removes Approved/Denied conditions. No update may remove an Approved,
    Denied or Failed condition or change a certificate once set.

    The request's part (the requester on create, the rules of the ``approval`` and
    ``status`` sub-resources) is :meth:`prepare_for_request`, which the generic store
    calls with the user and the sub-resource.
    """

    KEY_USAGES = (
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
    CONDITION_STATUSES = ("False", "True", "Unknown")
    APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"
    MIN_EXPIRATION_SECONDS = 600
    REQUESTER_FIELDS = ("username", "uid", "groups", "extra")

    def initial_status(self, obj: dict) -> dict:
        return {}

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for f in self.REQUESTER_FIELDS:
                spec.pop(f, None)

    def prepare_for_request(self, obj: dict, old: dict | None, user: Any, subresource: str) -> None:
        if old is None:
            if not subresource and user is not None:
                self.set_requester(obj, user)
        elif subresource in ("approval", "status"):
            self.prepare_for_subresource(subresource, obj, old)

    @classmethod
    def set_requester(cls, obj: dict, user: Any) -> None:
        """Record who asked (upstream injects the request's user on create)."""
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        for f in cls.REQUESTER_FIELDS:
            spec.pop(f, None)
        spec["username"] = user.name
        if user.uid:
            spec["uid"] = user.uid
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = {k: list(vals) for k, vals in user.extra.items()}

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        if "spec" in old:
            new["spec"] = copy.deepcopy(old["spec"])
        new["metadata"]["generation"] = old["metadata"].get("generation", 1)

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        super().prepare_for_status_update(new, old)
        self.populate_condition_timestamps(new, old)

    def prepare_for_subresource(self, subresource: str, new: dict, old: dict) -> None:
        """What differs between the two status-like sub-resources: ``approval`` keeps
        everything but the conditions from the old object; ``status`` keeps the old
        Approved and Denied conditions exactly."""
        old_status = old.get("status")
        if not isinstance(old_status, dict):
            old_status = {}
        status = new.get("status")
        if not isinstance(status, dict):
            status = {}
        if subresource == "approval":
            merged = copy.deepcopy(old_status)
            if "conditions" in status:
                merged["conditions"] = status["conditions"]
            else:
                merged.pop("conditions", None)
            new["status"] = merged
        elif subresource == "status":
            keep = (self.APPROVED, self.DENIED)
            conds = [c for c in status.get("conditions") or [] if not (isinstance(c, dict) and c.get("type") in keep)]
            conds += [
                copy.deepcopy(c)
                for c in old_status.get("conditions") or []
                if isinstance(c, dict) and c.get("type") in keep
            ]
            if conds:
                status["conditions"] = conds
            else:
                status.pop("conditions", None)
            new["status"] = status

    @staticmethod
    def populate_condition_timestamps(new: dict, old: dict) -> None:
        """lastUpdateTime defaults to now; lastTransitionTime to the old condition's of
        the same type and status, else now (upstream populateConditionTimestamps)."""
        status = new.get("status")
        if not isinstance(status, dict) or not isinstance(status.get("conditions"), list):
            return
        stamp = timestamp()
        old_conds = [c for c in ((old.get("status") or {}).get("conditions") or []) if isinstance(c, dict)]
        for c in status["conditions"]:
            if not isinstance(c, dict):
                continue
            if not c.get("lastUpdateTime"):
                c["lastUpdateTime"] = stamp
            if not c.get("lastTransitionTime"):
                c["lastTransitionTime"] = next(
                    (
                        o["lastTransitionTime"]
                        for o in old_conds
                        if o.get("type") == c.get("type")
                        and o.get("status") == c.get("status")
                        and o.get("lastTransitionTime")
                    ),
                    stamp,
                )

    # --- validation -----------------------------------------------------------------
    def validate(self, obj: dict) -> list[v.FieldError]:
        return self.validate_metadata(obj) + self._validate_csr(obj, allow_legacy_signer=False)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = super().validate_update(new, old)
        # validate() applied the create rules; a request that already names the legacy
        # signer (stored before v1 refused it) stays updatable.
        old_signer = (old.get("spec") or {}).get("signerName") if isinstance(old.get("spec"), dict) else None
        if old_signer == names.SIGNER_LEGACY_UNKNOWN:
            errs = [e for e in errs if not (e.field == "spec.signerName" and e.value == names.SIGNER_LEGACY_UNKNOWN)]
        for t in (self.APPROVED, self.DENIED, self.FAILED):
            if len(self._conditions(new, t)) < len(self._conditions(old, t)):
                errs.append(
                    v.FieldError.forbidden(
                        "status.conditions", f"updates may not remove a condition of type {v.go_quote(t)}"
                    )
                )
        old_cert = (old.get("status") or {}).get("certificate") if isinstance(old.get("status"), dict) else None
        new_cert = (new.get("status") or {}).get("certificate") if isinstance(new.get("status"), dict) else None
        if old_cert and new_cert != old_cert:
            errs.append(
                v.FieldError.forbidden("status.certificate", "updates may not modify existing certificate content")
            )
        return errs

    @staticmethod
    def _conditions(obj: dict, ctype: str) -> list[dict]:
        status = obj.get("status")
        if not isinstance(status, dict):
            return []
        return [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == ctype]

    def _validate_csr(self, obj: dict, allow_legacy_signer: bool) -> list[v.FieldError]:
        errs: list[v.FieldError] = []
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [v.FieldError.required("spec")]
        problem = self.request_problem(spec.get("request"))
        if problem:
            errs.append(v.FieldError.invalid("spec.request", "<request data>", problem))
        usages = spec.get("usages")
        if not usages:
            errs.append(v.FieldError.required("spec.usages", "usages must be provided"))
        elif not isinstance(usages, list):
            errs.append(v.FieldError.type_invalid("spec.usages", usages, "must be a list of strings"))
        else:
            seen: set = set()
            for i, u in enumerate(usages):
                if u not in self.KEY_USAGES:
                    errs.append(v.FieldError.not_supported(f"spec.usages[{i}]", u, self.KEY_USAGES))
                if isinstance(u, str) and u in seen:
                    errs.append(v.FieldError.duplicate(f"spec.usages[{i}]", u))
                if isinstance(u, str):
                    seen.add(u)
        signer = spec.get("signerName")
        if signer == names.SIGNER_LEGACY_UNKNOWN and not allow_legacy_signer:
            errs.append(
                v.FieldError.invalid(
                    "spec.signerName", signer, "the legacy signerName is not allowed via this API version"
                )
            )
        else:
            errs += validate_signer_name("spec.signerName", signer)
        exp = spec.get("expirationSeconds")
        if exp is not None:
            if not isinstance(exp, int) or isinstance(exp, bool):
                errs.append(v.FieldError.type_invalid("spec.expirationSeconds", exp, "must be an integer"))
            elif exp < self.MIN_EXPIRATION_SECONDS:
                errs.append(
                    v.FieldError.invalid(
                        "spec.expirationSeconds", exp, "may not specify a duration less than 600 seconds (10 minutes)"
                    )
                )
        status = obj.get("status")
        if status is not None and not isinstance(status, dict):
            errs.append(v.FieldError.type_invalid("status", status, "must be an object"))
            return errs
        errs += self._validate_conditions((status or {}).get("conditions"))
        cert = (status or {}).get("certificate")
        if cert:
            problem = self.certificate_problem(cert)
            if problem:
                errs.append(v.FieldError.invalid("status.certificate", "<certificate data>", problem))
        return errs

    def _validate_conditions(self, conds: Any) -> list[v.FieldError]:
        if conds is None:
            return []
        if not isinstance(conds, list):
            return [v.FieldError.type_invalid("status.conditions", conds, "must be a list")]
        errs: list[v.FieldError] = []
        seen: set = set()
        approved = denied = False
        for i, c in enumerate(conds):
            p = f"status.conditions[{i}]"
            if not isinstance(c, dict):
                errs.append(v.FieldError.type_invalid(p, c, "must be an object"))
                continue
            ctype, cstatus = c.get("type"), c.get("status")
            if not ctype:
                errs.append(v.FieldError.required(f"{p}.type"))
            allowed = ("True",) if ctype in (self.APPROVED, self.DENIED) else self.CONDITION_STATUSES
            if not cstatus:
                errs.append(v.FieldError.required(f"{p}.status"))
            elif cstatus not in allowed:
                errs.append(v.FieldError.not_supported(f"{p}.status", cstatus, allowed))
            if ctype == self.APPROVED:
                approved = True
                if denied:
                    errs.append(
                        v.FieldError.invalid(
                            f"{p}.type", ctype, "Approved and Denied conditions are mutually exclusive"
                        )
                    )
            elif ctype == self.DENIED:
                denied = True
                if approved:
                    errs.append(
                        v.FieldError.invalid(
                            f"{p}.type", ctype, "Approved and Denied conditions are mutually exclusive"
                        )
                    )
            if isinstance(ctype, str):
                if ctype in seen:
                    errs.append(v.FieldError.duplicate(f"{p}.type", ctype))
                seen.add(ctype)
        return errs

    @staticmethod
    def decode_bytes(value: Any) -> bytes | None:
        """A ``bytes`` field as JSON carries it (base64 text); None if it is not that."""
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if not isinstance(value, str):
            return None
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None

    @classmethod
    def load_request(cls, value: Any):
        """The parsed PKCS#10 request of ``spec.request``; ValueError says what is wrong."""
        if not value:
            raise ValueError("spec.request is required")
        data = cls.decode_bytes(value)
        if data is None:
            raise ValueError("not base64-encoded data")
        blocks = _pem_blocks(data)
        if not blocks or blocks[0][0] != "CERTIFICATE REQUEST":
            raise ValueError("PEM block type must be CERTIFICATE REQUEST")
        try:
            csr = x509.load_der_x509_csr(blocks[0][2])
        except ValueError as exc:
            raise ValueError(f"x509: malformed certificate request: {exc}") from None
        if not csr.is_signature_valid:
            raise ValueError("x509: the certificate request's signature does not verify")
        return csr

    @classmethod
    def request_problem(cls, value: Any) -> str:
        try:
            cls.load_request(value)
        except ValueError as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - unsupported key types and the like
            return f"x509: cannot parse the certificate request: {exc}"
        return ""

    @classmethod
    def certificate_problem(cls, value: Any) -> str:
        """Upstream validateCertificate: one or more CERTIFICATE blocks without headers,
        each holding a parseable certificate; text around blocks is allowed."""
        data = cls.decode_bytes(value)
        if data is None:
            return "not base64-encoded data"
        blocks = _pem_blocks(data)
        if not blocks:
            return "must contain at least one CERTIFICATE PEM block"
        for kind, headers, der in blocks:
            if kind != "CERTIFICATE":
                return f"only CERTIFICATE PEM blocks are allowed, found {v.go_quote(kind)}"
            if headers:
                return "no PEM block headers are permitted"
            try:
                x509.load_der_x509_certificate(der)
            except ValueError as exc:
                return f"x509: malformed certificate: {exc}"
        return ""


def _pem_blocks(data: bytes) -> list[tuple[str, bool, bytes]]:
    """(type, has headers, DER bytes) of every well-formed PEM block, text around them
    skipped, as Go's pem.Decode loop sees them."""
    out = []
    for m in re.finditer(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", data, re.S):
        body = m.group(2)
        lines = body.splitlines()
        headers = any(b":" in line for line in lines)
        b64 = b"".join(line.strip() for line in lines if b":" not in line)
        try:
            der = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            continue
        out.append((m.group(1).decode(), headers, der))
    return out


def validate_signer_name(path: str, signer: Any) -> list[v.FieldError]:
    """Upstream ValidateSignerName: ``<domain with a dot>/<path>``, DNS labels each."""
    if not signer:
        return [v.FieldError.required(path)]
    if not isinstance(signer, str):
        return [v.FieldError.type_invalid(path, signer, "must be a string")]
    segments = signer.split("/")
    if len(segments) != 2:
        return [
            v.FieldError.invalid(
                path, signer, "must be a fully qualified domain and path of the form 'example.com/signer-name'"
            )
        ]
    errs: list[v.FieldError] = []
    domain, sub = segments
    if len(domain) > 253:
        errs.append(v.FieldError.too_long(path, domain, 253))
    labels = domain.split(".")
    for lbl in labels:
        problems = v.is_dns1123_label(lbl)
        if problems:
            errs += [v.FieldError.invalid(path, domain, f"validating label {v.go_quote(lbl)}: {p}") for p in problems]
            break
    if len(labels) < 2:
        errs.append(
            v.FieldError.invalid(path, domain, "should be a domain with at least two segments separated by dots")
        )
    for lbl in sub.split("."):
        problems = v.is_dns1123_label(lbl)
        if problems:
            errs += [v.FieldError.invalid(path, sub, f"validating label {v.go_quote(lbl)}: {p}") for p in problems]
            break
    max_path = 253 - len(domain) - 1
    if len(sub) > max_path:
        errs.append(v.FieldError.too_long(path, sub, max_path))
    return errs

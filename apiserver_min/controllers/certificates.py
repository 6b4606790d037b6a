"""Bundled certificate controllers: approver, signer and cleaner of
CertificateSigningRequests.

- Approver (upstream csrapproving): a request for ``orch.io/apiserver-client-node-agent``
  whose subject is ``system:node:<name>`` / ``system:nodes`` with exactly the node client
  usages is approved when a subject access review says its requester may create
  ``certificatesigningrequests/selfnodeclient`` (a node renewing its own certificate) or
  ``certificatesigningrequests/nodeclient`` (a bootstrapper). With
  ``--auto-approve-node-serving-certificates``, serving requests a node makes for itself
  whose alt-names are all among the node's reported addresses are approved too.
- Signer (upstream csrsigning): approved requests for the built-in signers are checked
  against their row of the signer table and signed with the cluster CA (or the
  ``--cluster-signing-*`` files); a request that breaks the rules gets a ``Failed``
  condition (reason ``SignerValidationFailure``). ``orch.io/legacy-unknown`` never signs.
- Cleaner (upstream csrcleaner): deletes approved, denied and failed requests one hour
  after their last condition update, pending ones after 24 hours, and issued ones once
  their certificate has expired.

All three react to informer events (a new request is usually approved and signed in
a few milliseconds) and write through their client as the certificate-controller's
service account, through the ``approval`` and ``status`` sub-resources, exactly as an
outside controller would.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as _dt
import ipaddress
import logging
import os
from typing import Any, Callable, Iterable

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed448, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from ..api import names
from ..api import status as st
from ..api.timeutil import format_rfc3339, parse_rfc3339
from ..api.user import UserInfo
from ..authz.authorizer import Authorizer, AuthzAttributes, Decision
from ..client.informer import InformerFactory
from ..client.interface import Client, DeleteOptions
from ..registry.certificates import CsrStrategy
from ..storage.cacher import CacheEvent
from .queue import RETRY_DELAY, KeyQueue

log = logging.getLogger("orch-apiserver.csr")

CSR_RESOURCE = "certificatesigningrequests"
REASON_AUTO_APPROVED = "AutoApproved"
REASON_SIGNER_FAILURE = "SignerValidationFailure"
MSG_SELF_NODE_CLIENT = "Auto approving self node-agent client certificate after SubjectAccessReview."
MSG_NODE_CLIENT = "Auto approving node-agent client certificate after SubjectAccessReview."
MSG_NODE_SERVING = "Auto approving node-agent serving certificate: every subject-alt-name is a reported node address."

BACKDATE = _dt.timedelta(minutes=5)
SHORT_LIFETIME = _dt.timedelta(hours=8)  # below it the end is not backdated (5 min is ~1% of 8 h)
MIN_LIFETIME = _dt.timedelta(minutes=10)
APPROVED_TTL = DENIED_TTL = FAILED_TTL = _dt.timedelta(hours=1)
PENDING_TTL = _dt.timedelta(hours=24)
CLEANER_SWEEP_SECONDS = 300.0

USAGES_NODE_CLIENT = frozenset({"digital signature", "key encipherment", "client auth"})
USAGES_NODE_CLIENT_NO_RSA = frozenset({"digital signature", "client auth"})
USAGES_NODE_SERVING = frozenset({"digital signature", "key encipherment", "server auth"})
USAGES_NODE_SERVING_NO_RSA = frozenset({"digital signature", "server auth"})
USAGES_APISERVER_CLIENT_OPTIONAL = frozenset({"digital signature", "key encipherment"})
BUILTIN_SIGNERS = (
    names.SIGNER_APISERVER_CLIENT,
    names.SIGNER_NODE_AGENT_CLIENT,
    names.SIGNER_NODE_AGENT_SERVING,
    names.SIGNER_LEGACY_UNKNOWN,
)

_KEY_USAGE_BITS = {
    "signing": "digital_signature",
    "digital signature": "digital_signature",
    "content commitment": "content_commitment",
    "key encipherment": "key_encipherment",
    "key agreement": "key_agreement",
    "data encipherment": "data_encipherment",
    "cert sign": "key_cert_sign",
    "crl sign": "crl_sign",
    "encipher only": "encipher_only",
    "decipher only": "decipher_only",
}
_EXT_KEY_USAGES = {
    "any": ObjectIdentifier("2.5.29.37.0"),
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
    "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "s/mime": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "ipsec end system": ObjectIdentifier("1.3.6.1.5.5.7.3.5"),
    "ipsec tunnel": ObjectIdentifier("1.3.6.1.5.5.7.3.6"),
    "ipsec user": ObjectIdentifier("1.3.6.1.5.5.7.3.7"),
    "timestamping": ExtendedKeyUsageOID.TIME_STAMPING,
    "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING,
    "microsoft sgc": ObjectIdentifier("1.3.6.1.4.1.311.10.3.3"),
    "netscape sgc": ObjectIdentifier("2.16.840.1.113730.4.1"),
}


# --- pure helpers -------------------------------------------------------------------------------


def conditions(obj: dict) -> list[dict]:
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    return [c for c in status.get("conditions") or [] if isinstance(c, dict)]


def has_condition(obj: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status", "True") == "True" for c in conditions(obj))


def certificate_of(obj: dict) -> str:
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    cert = status.get("certificate")
    return cert if isinstance(cert, str) else ""


def spec_of(obj: dict) -> dict:
    return obj.get("spec") if isinstance(obj.get("spec"), dict) else {}


def requester(obj: dict) -> UserInfo:
    spec = spec_of(obj)
    extra = spec.get("extra") if isinstance(spec.get("extra"), dict) else {}
    return UserInfo(
        str(spec.get("username") or ""),
        uid=str(spec.get("uid") or ""),
        groups=tuple(str(g) for g in spec.get("groups") or []),
        extra={str(k): tuple(str(x) for x in (vals or [])) for k, vals in extra.items()},
    )


@dataclasses.dataclass(frozen=True)
class Sans:
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    uris: tuple[str, ...] = ()


def request_sans(csr: x509.CertificateSigningRequest) -> Sans:
    try:
        ext = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return Sans()
    return Sans(
        tuple(ext.get_values_for_type(x509.DNSName)),
        tuple(str(ip) for ip in ext.get_values_for_type(x509.IPAddress)),
        tuple(ext.get_values_for_type(x509.RFC822Name)),
        tuple(ext.get_values_for_type(x509.UniformResourceIdentifier)),
    )


def _subject(csr: x509.CertificateSigningRequest) -> tuple[str, list[str]]:
    cn = [str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return (cn[0] if cn else ""), orgs


def node_client_problem(csr: x509.CertificateSigningRequest, usages: Iterable[str]) -> str:
    """Upstream ValidateKubeletClientCSR: '' when the request is a valid node client request."""
    cn, orgs = _subject(csr)
    if orgs != [names.GROUP_NODES]:
        return f"subject organization is not {names.GROUP_NODES}"
    sans = request_sans(csr)
    for kind, values in (("DNS", sans.dns), ("Email", sans.emails), ("IP", sans.ips), ("URI", sans.uris)):
        if values:
            return f"{kind} subjectAltNames are not allowed"
    if not cn.startswith(names.NODE_USER_PREFIX):
        return f"subject common name does not begin with {names.NODE_USER_PREFIX}"
    u = frozenset(usages)
    if u not in (USAGES_NODE_CLIENT, USAGES_NODE_CLIENT_NO_RSA):
        return f"usages did not match {sorted(USAGES_NODE_CLIENT)}"
    return ""


def node_serving_problem(csr: x509.CertificateSigningRequest, usages: Iterable[str]) -> str:
    """Upstream ValidateKubeletServingCSR: '' when the request is a valid node serving request."""
    cn, orgs = _subject(csr)
    if orgs != [names.GROUP_NODES]:
        return f"subject organization is not {names.GROUP_NODES}"
    sans = request_sans(csr)
    if not sans.dns and not sans.ips:
        return "DNS or IP subjectAltName is required"
    if sans.emails:
        return "Email subjectAltNames are not allowed"
    if sans.uris:
        return "URI subjectAltNames are not allowed"
    u = frozenset(usages)
    if u not in (USAGES_NODE_SERVING, USAGES_NODE_SERVING_NO_RSA):
        return f"usages did not match {sorted(USAGES_NODE_SERVING)}"
    if not cn.startswith(names.NODE_USER_PREFIX):
        return f"subject common name does not begin with {names.NODE_USER_PREFIX}"
    return ""


def apiserver_client_problem(usages: Iterable[str]) -> str:
    client_auth = False
    for u in usages:
        if u == "client auth":
            client_auth = True
        elif u not in USAGES_APISERVER_CLIENT_OPTIONAL:
            return f"invalid usage for client certificate: {u}"
    return "" if client_auth else "missing required usage for client certificate: client auth"


def signer_problem(signer: str, csr: x509.CertificateSigningRequest, usages: list[str]) -> str | None:
    """None: not a signer built in here (or one that never signs); '': sign; else why not."""
    if signer == names.SIGNER_NODE_AGENT_CLIENT:
        return node_client_problem(csr, usages)
    if signer == names.SIGNER_NODE_AGENT_SERVING:
        return node_serving_problem(csr, usages)
    if signer == names.SIGNER_APISERVER_CLIENT:
        return apiserver_client_problem(usages)
    return None


def lifetime(max_lifetime: _dt.timedelta, expiration_seconds: Any) -> _dt.timedelta:
    """Upstream's duration(): the requested lifetime when shorter than the maximum,
    never below 10 minutes."""
    if not isinstance(expiration_seconds, int) or isinstance(expiration_seconds, bool):
        return max_lifetime
    requested = _dt.timedelta(seconds=expiration_seconds)
    if requested > max_lifetime:
        return max_lifetime
    return max(requested, MIN_LIFETIME)


def validity(now: _dt.datetime, ttl: _dt.timedelta, ca_not_after: _dt.datetime) -> tuple[_dt.datetime, _dt.datetime]:
    """(not before, not after): backdated 5 minutes; a long-lived certificate's end is
    backdated too, a short one's is not; never past the CA's own end."""
    not_before = now - BACKDATE
    not_after = now + ttl if ttl < SHORT_LIFETIME else now + ttl - BACKDATE
    if not_after >= ca_not_after:
        not_after = ca_not_after
    if now >= ca_not_after:
        raise ValueError(f"refusing to sign a certificate that expired in the past: NotAfter={ca_not_after}")
    return not_before, not_after


def key_usage_extension(usages: Iterable[str]) -> tuple[x509.KeyUsage | None, list[ObjectIdentifier]]:
    bits = {v: False for v in _KEY_USAGE_BITS.values()}
    ekus: list[ObjectIdentifier] = []
    unknown = []
    for u in usages:
        if u in _KEY_USAGE_BITS:
            bits[_KEY_USAGE_BITS[u]] = True
        elif u in _EXT_KEY_USAGES:
            if _EXT_KEY_USAGES[u] not in ekus:
                ekus.append(_EXT_KEY_USAGES[u])
        else:
            unknown.append(u)
    if unknown:
        raise ValueError(f"unrecognized usage values: {unknown}")
    if not bits["key_agreement"]:
        bits["encipher_only"] = bits["decipher_only"] = False
    ku = x509.KeyUsage(**bits) if any(bits.values()) else None
    ekus.sort(key=lambda o: o.dotted_string)
    return ku, ekus


class CertificateAuthority:
    """A CA certificate and key from PEM files, re-read when either file changes (so a
    rotated signing CA is picked up without a restart)."""

    def __init__(self, cert_file: str, key_file: str):
        self.cert_file, self.key_file = cert_file, key_file
        self._stamp: tuple | None = None
        self._loaded: tuple[x509.Certificate, Any] | None = None

    def _file_stamp(self) -> tuple:
        out = []
        for p in (self.cert_file, self.key_file):
            s = os.stat(p)
            out.append((s.st_mtime_ns, s.st_size, s.st_ino))
        return tuple(out)

    def current(self) -> tuple[x509.Certificate, Any]:
        stamp = self._file_stamp()
        if self._loaded is None or stamp != self._stamp:
            with open(self.cert_file, "rb") as f:
                cert = x509.load_pem_x509_certificate(f.read())
            with open(self.key_file, "rb") as f:
                key = serialization.load_pem_private_key(f.read(), password=None)
            self._loaded, self._stamp = (cert, key), stamp
        return self._loaded

    def sign(
        self,
        csr: x509.CertificateSigningRequest,
        usages: list[str],
        ttl: _dt.timedelta,
        now: _dt.datetime | None = None,
    ) -> bytes:
        """The PEM certificate for ``csr``: its subject, key and alt-names; usages from the
        request object; no other extension of the request; never a CA."""
        ca_cert, ca_key = self.current()
        if not csr.is_signature_valid:
            raise ValueError("unable to verify certificate request signature")
        now = now or _dt.datetime.now(_dt.timezone.utc)
        not_before, not_after = validity(now, ttl, ca_cert.not_valid_after_utc)
        ku, ekus = key_usage_extension(usages)
        b = (
            x509.CertificateBuilder()
            .subject_name(csr.subject)
            .issuer_name(ca_cert.subject)
            .public_key(csr.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if ku is not None:
            b = b.add_extension(ku, critical=True)
        if ekus:
            b = b.add_extension(x509.ExtendedKeyUsage(ekus), critical=False)
        try:
            b = b.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                    ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
                ),
                critical=False,
            )
        except x509.ExtensionNotFound:
            pass
        try:
            sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            b = b.add_extension(sans, critical=False)
        except x509.ExtensionNotFound:
            pass
        algorithm = None if isinstance(ca_key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) else hashes.SHA256()
        return b.sign(ca_key, algorithm).public_bytes(serialization.Encoding.PEM)


def cleanup_deadline(obj: dict, now: _dt.datetime | None = None) -> _dt.datetime | None:
    """When the cleaner may delete this request (None: no rule applies yet)."""
    deadlines: list[_dt.datetime] = []
    decided = False
    for c in conditions(obj):
        ttl = {"Approved": APPROVED_TTL, "Denied": DENIED_TTL, "Failed": FAILED_TTL}.get(c.get("type"))
        if ttl is None:
            continue
        decided = True
        stamp = c.get("lastUpdateTime") or c.get("lastTransitionTime")
        try:
            deadlines.append(parse_rfc3339(stamp) + ttl)
        except Exception:  # noqa: BLE001 - no usable time: counts from now
            deadlines.append((now or _dt.datetime.now(_dt.timezone.utc)) + ttl)
    if not decided:
        created = (obj.get("metadata") or {}).get("creationTimestamp")
        try:
            deadlines.append(parse_rfc3339(created) + PENDING_TTL)
        except (AttributeError, TypeError, ValueError, OverflowError):  # no usable creationTimestamp
            pass
    cert = certificate_of(obj)
    if cert:
        try:
            for c in x509.load_pem_x509_certificates(base64.b64decode(cert)):
                deadlines.append(c.not_valid_after_utc)
        except (ValueError, TypeError):
            pass
    return min(deadlines) if deadlines else None


def node_addresses(node: dict) -> tuple[set[str], set[str]]:
    """(host names, IPs) a node reports: status.addresses plus its hostname label."""
    dns, ips = set(), set()
    for a in (node.get("status") or {}).get("addresses") or []:
        if not isinstance(a, dict) or not isinstance(a.get("address"), str):
            continue
        if a.get("type") in ("Hostname", "InternalDNS", "ExternalDNS"):
            dns.add(a["address"].lower())
        elif a.get("type") in ("InternalIP", "ExternalIP"):
            try:
                ips.add(str(ipaddress.ip_address(a["address"])))
            except ValueError:
                pass
    host = ((node.get("metadata") or {}).get("labels") or {}).get(names.LABEL_HOSTNAME)
    if isinstance(host, str) and host:
        dns.add(host.lower())
    return dns, ips


def serving_sans_match(csr: x509.CertificateSigningRequest, node: dict) -> bool:
    dns, ips = node_addresses(node)
    sans = request_sans(csr)
    return (
        all(d.lower() in dns for d in sans.dns)
        and all(str(ipaddress.ip_address(i)) in ips for i in sans.ips)
        and bool(sans.dns or sans.ips)
    )


# --- the controllers --------------------------------------------------------------------------------


class CsrControllers:
    """Approver, signer and cleaner sharing the CSR (and node) informers.

    ``authorizer`` answers the approver's subject access reviews (asked in process, as
    the review a remote approver would create); ``ca_files`` are the cluster CA's
    certificate and key, ``signing_files`` (signer, cert, key) per-signer overrides
    (``--cluster-signing-*``)."""

    def __init__(
        self,
        client: Client,
        informers: InformerFactory,
        authorizer: Authorizer,
        *,
        ca_files: tuple[str, str],
        signing_files: Iterable[tuple[str, str, str]] = (),
        max_lifetime_seconds: float = 365 * 86400.0,
        auto_approve_serving: bool = False,
    ):
        self.client = client
        self.authorizer = authorizer
        self.kind = informers.kind(names.CERTIFICATES_GROUP, "v1", CSR_RESOURCE)
        self.node_kind = informers.kind("", "v1", "nodes")
        self.csrs = informers.for_kind(self.kind)
        self.nodes = informers.for_kind(self.node_kind)
        self.max_lifetime = _dt.timedelta(seconds=max_lifetime_seconds)
        self.auto_approve_serving = auto_approve_serving
        self._cas: dict[str, CertificateAuthority] = {}
        self._ca_files = ca_files
        self._signing_files = {s: (c, k) for s, c, k in signing_files}
        self.approve_queue, self.sign_queue, self.clean_queue = KeyQueue(), KeyQueue(), KeyQueue()
        self._serving_by_node: dict[str, set[str]] = {}  # node -> pending serving CSR names

    def authority(self, signer: str) -> CertificateAuthority:
        files = self._signing_files.get(signer) or self._ca_files
        ca = self._cas.get(signer)
        if ca is None or (ca.cert_file, ca.key_file) != files:
            ca = self._cas[signer] = CertificateAuthority(*files)
        return ca

    # --- events ---------------------------------------------------------------------
    def start(self) -> list[asyncio.Task]:
        self.csrs.add_handler(self.on_csr)
        self.nodes.add_handler(self.on_node)
        return [
            asyncio.create_task(self._loop(self.approve_queue, self.approve, "approver"), name="csr-approver"),
            asyncio.create_task(self._loop(self.sign_queue, self.sign, "signer"), name="csr-signer"),
            asyncio.create_task(self._loop(self.clean_queue, self.clean, "cleaner"), name="csr-cleaner"),
            asyncio.create_task(self._sweep(), name="csr-cleaner-sweep"),
        ]

    def on_csr(self, ev: CacheEvent | None) -> None:
        if ev is None:
            self._serving_by_node.clear()
            for e in self.csrs.list():
                self._classify(e.name, e.object())
            return
        if ev.type == "DELETED":
            for pending in self._serving_by_node.values():
                pending.discard(ev.entry.name)
            return
        self._classify(ev.entry.name, orjson.loads(ev.entry.raw))

    def on_node(self, ev: CacheEvent | None) -> None:
        if ev is not None and self.auto_approve_serving and ev.type != "DELETED":
            for name in self._serving_by_node.get(ev.entry.name, ()):
                self.approve_queue.add(name)

    def _classify(self, name: str, obj: dict) -> None:
        """Queue the request with every controller that has something to do for it."""
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        approved, denied = has_condition(obj, "Approved"), has_condition(obj, "Denied")
        issued, failed = bool(certificate_of(obj)), has_condition(obj, "Failed")
        signer = spec_of(obj).get("signerName")
        if not approved and not denied and not issued:
            if signer == names.SIGNER_NODE_AGENT_CLIENT or (
                self.auto_approve_serving and signer == names.SIGNER_NODE_AGENT_SERVING
            ):
                self.approve_queue.add(name)
                if signer == names.SIGNER_NODE_AGENT_SERVING:
                    user = str(spec_of(obj).get("username") or "")
                    if user.startswith(names.NODE_USER_PREFIX):
                        self._serving_by_node.setdefault(user[len(names.NODE_USER_PREFIX) :], set()).add(name)
        else:
            for pending in self._serving_by_node.values():
                pending.discard(name)
        if approved and not issued and not failed and signer in BUILTIN_SIGNERS:
            self.sign_queue.add(name)
        self._schedule_cleanup(name, obj)

    def _schedule_cleanup(self, name: str, obj: dict) -> None:
        deadline = cleanup_deadline(obj)
        if deadline is None:
            return
        delay = (deadline - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
        if delay <= 0:
            self.clean_queue.add(name)
        elif delay < CLEANER_SWEEP_SECONDS:
            self.clean_queue.add_after(name, delay + 0.5)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(CLEANER_SWEEP_SECONDS)
            for e in self.csrs.list():
                self._schedule_cleanup(e.name, e.object())

    async def _loop(self, queue: KeyQueue, sync: Callable, what: str) -> None:
        while True:
            name = await queue.get()
            try:
                done = await sync(name)
            except st.ApiError as exc:
                log.warning("csr %s %s: %s", what, name, exc.message)
                done = exc.code in (404, 422)
            except Exception:  # noqa: BLE001 - keep the controller alive; retry the item
                log.exception("csr %s %s: sync failed", what, name)
                done = False
            if not done:
                queue.add_after(name, RETRY_DELAY)

    def _current(self, name: str) -> dict | None:
        e = self.csrs.get("", name)
        return e.object() if e is not None else None

    # --- approver -------------------------------------------------------------------
    def _allowed(self, user: UserInfo, subresource: str) -> bool:
        attrs = AuthzAttributes(
            user,
            "create",
            True,
            api_group=names.CERTIFICATES_GROUP,
            api_version="v1",
            resource=CSR_RESOURCE,
            subresource=subresource,
        )
        return self.authorizer.authorize(attrs)[0] is Decision.ALLOW

    def approval_message(self, obj: dict) -> str | None:
        """The approval message if this request is to be auto-approved, else None."""
        spec = spec_of(obj)
        try:
            csr = CsrStrategy.load_request(spec.get("request"))
        except ValueError:
            return None
        usages = [u for u in spec.get("usages") or [] if isinstance(u, str)]
        user = requester(obj)
        cn, _ = _subject(csr)
        signer = spec.get("signerName")
        if signer == names.SIGNER_NODE_AGENT_CLIENT:
            if node_client_problem(csr, usages):
                return None
            if user.name == cn and self._allowed(user, names.CSR_SUBRESOURCE_SELFNODECLIENT):
                return MSG_SELF_NODE_CLIENT
            if self._allowed(user, names.CSR_SUBRESOURCE_NODECLIENT):
                return MSG_NODE_CLIENT
            log.info(
                "csr %s: recognized as a node-agent client request but the subject access review did not allow %s",
                (obj.get("metadata") or {}).get("name"),
                user.name,
            )
            return None
        if signer == names.SIGNER_NODE_AGENT_SERVING and self.auto_approve_serving:
            if node_serving_problem(csr, usages) or user.name != cn or names.GROUP_NODES not in user.groups:
                return None
            node = self.nodes.get("", cn[len(names.NODE_USER_PREFIX) :])
            if node is not None and serving_sans_match(csr, node.object()):
                return MSG_NODE_SERVING
        return None

    async def approve(self, name: str) -> bool:
        obj = self._current(name)
        if obj is None or has_condition(obj, "Approved") or has_condition(obj, "Denied") or certificate_of(obj):
            return True
        message = self.approval_message(obj)
        if message is None:
            return True

        def compute(cur: dict) -> dict:
            if has_condition(cur, "Approved") or has_condition(cur, "Denied"):
                return cur
            status = cur.setdefault("status", {})
            status.setdefault("conditions", []).append(
                {
                    "type": "Approved",
                    "status": "True",
                    "reason": REASON_AUTO_APPROVED,
                    "message": message,
                    "lastUpdateTime": format_rfc3339(_dt.datetime.now(_dt.timezone.utc)),
                }
            )
            return cur

        await self.client.update(self.kind, "", name, compute, subresource="approval")
        log.info("csr %s: approved (%s)", name, message)
        return True

    # --- signer ---------------------------------------------------------------------
    async def sign(self, name: str) -> bool:
        obj = self._current(name)
        if obj is None or not has_condition(obj, "Approved") or has_condition(obj, "Failed") or certificate_of(obj):
            return True
        spec = spec_of(obj)
        signer = str(spec.get("signerName") or "")
        usages = [u for u in spec.get("usages") or [] if isinstance(u, str)]
        try:
            csr = CsrStrategy.load_request(spec.get("request"))
        except ValueError as exc:
            log.warning("csr %s: unable to parse the request: %s", name, exc)
            return True
        problem = signer_problem(signer, csr, usages)
        if problem is None:
            return True  # not ours to sign (legacy-unknown never signs)
        if problem:
            log.warning("csr %s: signer %s declines: %s", name, signer, problem)
            await self._set_status(name, failed=problem)
            return True
        ttl = lifetime(self.max_lifetime, spec.get("expirationSeconds"))
        try:
            pem = self.authority(signer).sign(csr, usages, ttl)
        except ValueError as exc:
            log.warning("csr %s: signing failed: %s", name, exc)
            await self._set_status(name, failed=str(exc))
            return True
        await self._set_status(name, certificate=base64.b64encode(pem).decode())
        log.info("csr %s: signed by %s for %s", name, signer, ttl)
        return True

    async def _set_status(self, name: str, *, certificate: str = "", failed: str = "") -> None:
        def compute(cur: dict) -> dict:
            if not has_condition(cur, "Approved") or has_condition(cur, "Failed") or certificate_of(cur):
                return cur
            status = cur.setdefault("status", {})
            if certificate:
                status["certificate"] = certificate
            else:
                status.setdefault("conditions", []).append(
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": REASON_SIGNER_FAILURE,
                        "message": failed,
                        "lastUpdateTime": format_rfc3339(_dt.datetime.now(_dt.timezone.utc)),
                    }
                )
            return cur

        await self.client.update(self.kind, "", name, compute, subresource="status")

    # --- cleaner --------------------------------------------------------------------
    async def clean(self, name: str) -> bool:
        e = self.csrs.get("", name)
        if e is None:
            return True
        deadline = cleanup_deadline(e.object())
        if deadline is None or deadline > _dt.datetime.now(_dt.timezone.utc):
            return True
        try:
            await self.client.delete(self.kind, "", name, DeleteOptions(preconditions_uid=e.uid or None))
        except st.ApiError as exc:
            if exc.code not in (404, 409):
                raise
            return True
        log.info("csr %s: deleted by the cleaner (deadline %s)", name, format_rfc3339(deadline))
        return True

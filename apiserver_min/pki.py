"""Certificates the API server makes for itself on first start.

With no certificates given, the server creates a cluster CA, a serving
certificate for the addresses it answers on, and an administrator's client
certificate wrapped in a connection config (kubeconfig shape) so that
``kubectl --kubeconfig DATA_DIR/admin.orchconfig`` works at once. Keys are
written mode 0600 and never overwritten once present.
"""

from __future__ import annotations

import base64
import datetime as _dt
import ipaddress
import os
import socket
from typing import Iterable

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .api import names
from .api.atomicfile import write_atomic

CA_LIFETIME = _dt.timedelta(days=3650)
LEAF_LIFETIME = _dt.timedelta(days=365)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def write_private(path: str, data: bytes) -> None:
    write_atomic(path, data, 0o600)


def write_public(path: str, data: bytes) -> None:
    write_atomic(path, data, 0o644)


def _name(cn: str, orgs: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def make_ca(cn: str = "orch-ca") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = new_key()
    now = _dt.datetime.now(_dt.timezone.utc)
    subject = _name(cn)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def sign_leaf(
    ca_cert: x509.Certificate,
    ca_key,
    public_key,
    cn: str,
    orgs: Iterable[str] = (),
    *,
    server: bool = False,
    client: bool = False,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    lifetime: _dt.timedelta = LEAF_LIFETIME,
) -> x509.Certificate:
    now = _dt.datetime.now(_dt.timezone.utc)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(min(now + lifetime, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256())


class Pki:
    """Paths and loading of the server's certificates under DATA_DIR/pki."""

    def __init__(self, data_dir: str):
        self.dir = os.path.join(data_dir, "pki")
        self.ca_cert = os.path.join(self.dir, "ca.crt")
        self.ca_key = os.path.join(self.dir, "ca.key")
        self.serving_cert = os.path.join(self.dir, "apiserver.crt")
        self.serving_key = os.path.join(self.dir, "apiserver.key")

    def ensure(self, hosts: Iterable[str]) -> list[str]:
        """Create what is missing; returns what was created (for the start-up log)."""
        created = []
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        if not (os.path.exists(self.ca_cert) and os.path.exists(self.ca_key)):
            cert, key = make_ca()
            write_private(self.ca_key, key_pem(key))
            write_public(self.ca_cert, cert_pem(cert))
            created.append(self.ca_cert)
            for p in (self.serving_cert, self.serving_key):
                if os.path.exists(p):
                    os.unlink(p)
        if not (os.path.exists(self.serving_cert) and os.path.exists(self.serving_key)):
            ca_cert, ca_key = self.load_ca()
            key = new_key()
            dns, ips = ["localhost", names.APISERVER_NAME, socket.gethostname()], ["127.0.0.1", "::1"]
            for h in hosts:
                try:
                    ipaddress.ip_address(h)
                    if h not in ("0.0.0.0", "::"):
                        ips.append(h)
                except ValueError:
                    dns.append(h)
            cert = sign_leaf(ca_cert, ca_key, key.public_key(), names.APISERVER_NAME, server=True, dns=dns, ips=ips)
            write_private(self.serving_key, key_pem(key))
            write_public(self.serving_cert, cert_pem(cert))
            created.append(self.serving_cert)
        return created

    def load_ca(self):
        with open(self.ca_cert, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        with open(self.ca_key, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        return cert, key


def connection_config(
    server: str,
    ca_pem: bytes,
    user: str,
    *,
    cert_pem_data: bytes | None = None,
    key_pem_data: bytes | None = None,
    token: str | None = None,
    cluster: str = "orch",
    context: str | None = None,
) -> dict:
    """A connection config in the kubeconfig shape, which kubectl reads as it is."""

    def b64(b):
        return base64.b64encode(b).decode()

    u: dict = {}
    if cert_pem_data:
        u["client-certificate-data"] = b64(cert_pem_data)
    if key_pem_data:
        u["client-key-data"] = b64(key_pem_data)
    if token:
        u["token"] = token
    ctx = context or f"{user}@{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": u}],
        "contexts": [{"name": ctx, "context": {"cluster": cluster, "user": user}}],
        "current-context": ctx,
        "preferences": {},
    }


def write_admin_config(pki: Pki, path: str, server: str) -> bool:
    """Write the administrator's connection config unless it exists; when it exists
    with another server address (the port or address changed), only the address
    is brought up to date. True if anything was written."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            cfg = yaml.safe_load(f) or {}
        changed = False
        for entry in cfg.get("clusters") or []:
            cluster = entry.get("cluster") or {}
            if cluster.get("server") != server:
                cluster["server"] = server
                changed = True
        if changed:
            write_private(path, yaml.safe_dump(cfg, sort_keys=False).encode())
        return changed
    ca_cert, ca_key = pki.load_ca()
    key = new_key()
    cert = sign_leaf(ca_cert, ca_key, key.public_key(), names.ADMIN_USER, [names.GROUP_MASTERS], client=True)
    cfg = connection_config(
        server, cert_pem(ca_cert), names.ADMIN_USER, cert_pem_data=cert_pem(cert), key_pem_data=key_pem(key)
    )
    write_private(path, yaml.safe_dump(cfg, sort_keys=False).encode())
    return True

"""The agent's self-signed serving certificate, made by a short-lived helper process.

    python -m agent.server.selfsigned CERT_PATH KEY_PATH NODE_NAME [DNS_OR_IP ...]

As upstream, a one-off CA (EC P-256) signs a serving certificate for the node name
and the given DNS names and IP addresses, valid for a year from five minutes ago
(clock skew between node and clients); the certificate file holds both, so a client
can trust the file itself; the key is written 0600. Both files are replaced
atomically.

Why a process of its own: making keys and certificates needs the ``cryptography``
library, which a running agent otherwise does not load without TLS bootstrap or
certificate rotation (about 10 MB of resident memory for as long as the daemon
lives). The agent reads the files back with the ``ssl`` module
(:mod:`agent.server.certinfo`) and runs this only when they are missing or unusable.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import sys
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver_min.api.atomicfile import write_atomic

__all__ = ["make_pair", "main", "VALIDITY"]

VALIDITY = _dt.timedelta(days=365)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        key_encipherment=not ca,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def make_pair(cert_path: str, key_path: str, node_name: str, dns: Sequence[str], ips: Sequence[str]) -> None:
    """Write a one-off CA's serving certificate (and the CA) to ``cert_path`` and its key to ``key_path``."""
    now = _dt.datetime.now(_dt.timezone.utc)
    not_before = now - _dt.timedelta(minutes=5)
    not_after = now + VALIDITY
    stamp = int(now.timestamp())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}-ca@{stamp}")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    write_atomic(
        key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600
    )
    write_atomic(cert_path, cert.public_bytes(pem) + ca_cert.public_bytes(pem), 0o644)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or not args[2]:
        print("usage: python -m agent.server.selfsigned CERT_PATH KEY_PATH NODE_NAME [DNS_OR_IP ...]", file=sys.stderr)
        return 2
    cert_path, key_path, node_name, names = args[0], args[1], args[2], args[3:]
    dns, ips = [], []
    for n in names:
        try:
            ips.append(str(ipaddress.ip_address(n)))
        except ValueError:
            dns.append(n)
    try:
        make_pair(cert_path, key_path, node_name, sorted(set(dns)), sorted(set(ips)))
    except (OSError, ValueError) as exc:
        print(f"cannot make the serving certificate {cert_path}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the agent's server needs to know of a certificate file, read with ``ssl`` alone.

The server checks its serving certificate at every start (still valid? naming every
host it must? matching its key?) and shows when it expires. The ``ssl`` module's
decoder answers all of that without the ``cryptography`` library, which a node
without TLS bootstrap or certificate rotation then never loads.
"""

from __future__ import annotations

import _ssl
import dataclasses
import ipaddress
import ssl
import time

__all__ = ["CertInfo", "read_certificate", "pair_matches"]


@dataclasses.dataclass(frozen=True)
class CertInfo:
    not_before: float  # epoch seconds
    not_after: float
    dns: frozenset[str]
    ips: frozenset[str]

    def valid_at(self, now: float | None = None, margin: float = 0.0) -> bool:
        """Valid at ``now`` and still ``margin`` seconds after it."""
        t = time.time() if now is None else now
        return self.not_before <= t < self.not_after - margin


# CPython's own certificate decoder (what getpeercert() answers with), for a file.
_decode_file = getattr(_ssl, "_test_decode_cert", None)


def read_certificate(path: str) -> CertInfo:
    """The first certificate of a PEM file. OSError when unreadable, ValueError when it
    is not a certificate (or this Python cannot decode one)."""
    if _decode_file is None:
        raise ValueError("this Python's ssl module cannot decode certificate files")
    with open(path, "rb"):  # OSError (missing, no permission) before the decoder's SSLError
        pass
    try:
        decoded = _decode_file(path)
        not_before = ssl.cert_time_to_seconds(decoded["notBefore"])
        not_after = ssl.cert_time_to_seconds(decoded["notAfter"])
    except (ssl.SSLError, KeyError, ValueError) as exc:
        raise ValueError(f"{path}: not a PEM certificate: {exc}") from None
    dns, ips = set(), set()
    for kind, value in decoded.get("subjectAltName", ()):
        if kind == "DNS":
            dns.add(value)
        elif kind == "IP Address":
            try:
                ips.add(str(ipaddress.ip_address(value.strip())))
            except ValueError:
                continue
    return CertInfo(not_before, not_after, frozenset(dns), frozenset(ips))


def pair_matches(cert_path: str, key_path: str) -> bool:
    """Whether the key belongs to the certificate (OpenSSL's check when loading the pair)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError):
        return False
    return True

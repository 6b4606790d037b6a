"""``--tls-cipher-suites`` and ``--tls-min-version`` on the server's TLS context.

The options take upstream's (Go crypto/tls) names; OpenSSL, under Python's
``ssl``, names the same suites differently. As upstream, the TLS 1.3 suites are
not configurable: they are accepted in the list and always on when TLS 1.3 is
allowed. A list naming no TLS 1.2 suite leaves only TLS 1.3.
"""

from __future__ import annotations

import ssl
from typing import Sequence

__all__ = ["apply_tls_options", "OPENSSL_CIPHER", "TLS13_SUITES", "TLSOptionError"]

TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})

OPENSSL_CIPHER = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
}

_VERSIONS = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}


class TLSOptionError(ValueError):
    pass


def apply_tls_options(ctx: ssl.SSLContext, cipher_suites: Sequence[str], min_version: str) -> None:
    """Restrict ``ctx`` to ``min_version`` (empty: TLS 1.2) and ``cipher_suites`` (empty: OpenSSL's defaults)."""
    if min_version and min_version not in _VERSIONS:
        raise TLSOptionError(f"--tls-min-version={min_version}: unknown TLS version")
    ctx.minimum_version = _VERSIONS.get(min_version, ssl.TLSVersion.TLSv1_2)
    if not cipher_suites:
        return
    unknown = [s for s in cipher_suites if s not in OPENSSL_CIPHER and s not in TLS13_SUITES]
    if unknown:
        raise TLSOptionError(f"--tls-cipher-suites: unknown cipher suite(s) {', '.join(unknown)}")
    tls12 = list(dict.fromkeys(OPENSSL_CIPHER[s] for s in cipher_suites if s in OPENSSL_CIPHER))
    if not tls12:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        return
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError as exc:
        raise TLSOptionError(
            f"--tls-cipher-suites: this node's TLS library offers none of {', '.join(cipher_suites)} ({exc})"
        ) from exc

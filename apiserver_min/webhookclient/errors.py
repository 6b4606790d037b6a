"""Why a webhook call failed, in the words of upstream's Go HTTP client.

Shared by every caller of webhooks (admission webhooks, the image policy backend, the
conversion webhooks of custom resources); depends on nothing of the project."""

from __future__ import annotations

import asyncio
import socket
import ssl

import aiohttp


def go_duration(seconds: float) -> str:
    """A timeout as Go prints a duration in a webhook URL's ``timeout`` query (``10s``)."""
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"


def describe_exception(exc: BaseException, address: str) -> str:
    """The cause in the words of upstream's Go client where there is a counterpart."""
    if isinstance(exc, asyncio.TimeoutError):
        return "context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        if isinstance(cert_error, ssl.SSLCertVerificationError):
            return f"tls: failed to verify certificate: x509: {cert_error.verify_message}"
        return f"tls: {cert_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return f"dial tcp {address}: connect: connection refused"
        return f"dial tcp {address}: {os_error.strerror or os_error}"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, asyncio.IncompleteReadError)):
        return "EOF"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"tls: failed to verify certificate: x509: {exc.verify_message}"
    if isinstance(exc, ConnectionRefusedError):
        return f"dial tcp {address}: connect: connection refused"
    if isinstance(exc, socket.gaierror):
        return f"dial tcp: lookup {address.rpartition(':')[0]}: no such host"
    if isinstance(exc, OSError) and exc.strerror:
        return f"dial tcp {address}: {exc.strerror.lower()}"
    return str(exc) or type(exc).__name__

"""Certificate rotation (``--rotate-certificates``, ``--rotate-server-certificates``).

A certificate is renewed at a random point between 70 % and 90 % of its
lifetime (upstream's jittered deadline: many nodes bootstrapped together do
not all renew at the same moment, and there is time left to retry). Renewal
is a new key and a new CertificateSigningRequest made with the agent's current
credentials, so the server's approver sees the node renewing its own
certificate (``selfnodeclient``). The new pair is stored next to the old one
and the ``-current.pem`` link moved (:class:`agent.certificates.bootstrap.PairStore`); the
client switches to it with :meth:`ApiClient.reload` without a restart.

A failed renewal is retried with back-off; it is logged as an error once the
certificate has expired, because the agent can then no longer reach the server
with it.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import random
from typing import Any, Awaitable, Callable, Iterable

from cryptography import x509

from apiserver_min.api import names

from .. import logging as agent_logging
from ..client.config import load_orchconfig, write_orchconfig
from ..client.rest import ApiClient, ApiConnectionError, ApiError
from .bootstrap import (
    BOOTSTRAP_TIMEOUT,
    CLIENT_USAGES,
    BootstrapError,
    PairStore,
    _split_addresses,
    client_store,
    obtain_pair,
    request_serving_certificate,
)

__all__ = ["rotation_deadline", "rotate_client_once", "rotate_client_certificate", "rotate_serving_certificate"]

log = agent_logging.get_logger("certrotation")

RETRY_MIN = 5.0
RETRY_MAX = 300.0
MIN_ROTATION_INTERVAL = 60.0

Clock = Callable[[], _dt.datetime]


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def rotation_deadline(cert: x509.Certificate, rng: random.Random | None = None) -> _dt.datetime:
    """A random moment between 70 % and 90 % of the certificate's lifetime."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    fraction = 0.7 + 0.2 * (rng or random).random()
    return start + (end - start) * fraction


async def _sleep_until(when: _dt.datetime, now: Clock, sleep: Callable[[float], Awaitable[Any]]) -> None:
    # Sleep in bounded steps: a suspended machine or a changed clock is noticed.
    while True:
        left = (when - now()).total_seconds()
        if left <= 0:
            return
        await sleep(min(left, 3600.0))


async def rotate_client_once(cfg, node_name: str, client: ApiClient, *, timeout: float = BOOTSTRAP_TIMEOUT) -> str:
    """Renew the client certificate now with the client's credentials, store the
    pair, make sure ``--orchconfig`` points at the current link and reload the
    client; the path of the new pair's link."""
    store = client_store(cfg)
    path = await obtain_pair(
        client, store, node_name, signer=names.SIGNER_NODE_AGENT_CLIENT, usages=CLIENT_USAGES, timeout=timeout
    )
    conn = load_orchconfig(cfg.orchconfig)
    if (conn.cert_file, conn.key_file) != (store.current_path, store.current_path):
        # The config carried the certificate itself (or other files): from now on it
        # names the link, which later rotations move.
        write_orchconfig(
            cfg.orchconfig,
            server=conn.server,
            ca_data=conn.ca_data,
            cert_file=store.current_path,
            key_file=store.current_path,
        )
        conn = load_orchconfig(cfg.orchconfig)
    client.reload(conn)
    return path


async def rotate_client_certificate(
    cfg,
    node_name: str,
    client: ApiClient,
    *,
    now: Clock = _utcnow,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> None:
    """Renew the client certificate at each rotation deadline, forever."""
    if not client.conn.has_client_certificate:
        log.info(
            "Client certificate rotation is on, but the connection uses no client certificate; nothing to rotate",
            orchconfig=cfg.orchconfig,
        )
        await asyncio.Event().wait()
    failures = 0
    rotated = False
    while True:
        cert = x509.load_pem_x509_certificate(client.conn.cert_data or b"")
        deadline = rotation_deadline(cert, rng)
        if rotated and deadline <= now():
            # A certificate that is due the moment it arrives (very short-lived, or
            # the clocks disagree): pause, or the loop would flood the signer.
            log.warning(
                "The new client certificate is already due for rotation; check the clocks and the signing duration",
                not_before=cert.not_valid_before_utc.isoformat(),
                expires=cert.not_valid_after_utc.isoformat(),
            )
            await sleep(MIN_ROTATION_INTERVAL)
        log.info(
            "Client certificate rotation scheduled",
            expires=cert.not_valid_after_utc.isoformat(),
            deadline=deadline.isoformat(),
        )
        await _sleep_until(deadline, now, sleep)
        while True:
            try:
                path = await rotate_client_once(cfg, node_name, client)
                log.info("Rotated the client certificate", path=path)
                failures = 0
                rotated = True
                break
            except (BootstrapError, ApiError, ApiConnectionError, OSError, ValueError) as exc:
                failures += 1
                expired = now() >= cert.not_valid_after_utc
                (log.error if expired else log.warning)(
                    "Client certificate rotation failed", err=exc, expired=expired, attempt=failures
                )
                await sleep(min(RETRY_MAX, RETRY_MIN * 2 ** (failures - 1)) * (0.5 + random.random() / 2))


async def rotate_serving_certificate(
    client: ApiClient,
    node_name: str,
    addresses: Callable[[], Iterable[str]],
    cert_dir: str,
    on_rotated: Callable[[str, str], Any],
    *,
    now: Clock = _utcnow,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> None:
    """Keep a serving certificate from ``orch.io/node-agent-serving`` current: request
    one when there is no valid pair in ``cert_dir``, then renew at each deadline.
    ``on_rotated(cert_path, key_path)`` is called after every new pair (the agent's
    server reloads its TLS context); ``addresses()`` gives the names to include."""
    store = PairStore(cert_dir, names.AGENT_SERVER_CERT_PREFIX)
    failures = 0
    first = True
    while True:
        pair = store.load()
        if pair is not None and now() < pair[0].not_valid_after_utc:
            dns, ips = _split_addresses(addresses())
            if _covers(pair[0], dns, ips):
                if first:
                    await _call(on_rotated, store.current_path, store.current_path)
                first = False
                await _sleep_until(rotation_deadline(pair[0], rng), now, sleep)
            else:
                # A pair made for other addresses is replaced at once.
                log.info("Serving certificate does not cover the node's addresses; requesting a new one")
        first = False
        try:
            cert_path, key_path = await request_serving_certificate(client, node_name, addresses(), cert_dir)
            failures = 0
            log.info("Rotated the serving certificate", path=cert_path)
            await _call(on_rotated, cert_path, key_path)
        except (BootstrapError, ApiError, ApiConnectionError, OSError, ValueError) as exc:
            failures += 1
            log.warning("Serving certificate request failed", err=exc, attempt=failures)
            await sleep(min(RETRY_MAX, RETRY_MIN * 2 ** (failures - 1)) * (0.5 + random.random() / 2))


async def _call(fn: Callable[[str, str], Any], cert_path: str, key_path: str) -> None:
    result = fn(cert_path, key_path)
    if asyncio.iscoroutine(result):
        await result


def _covers(cert: x509.Certificate, dns: list[str], ips: list[str]) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return not dns and not ips
    have_dns = set(san.get_values_for_type(x509.DNSName))
    have_ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
    return set(dns) <= have_dns and set(ips) <= have_ips

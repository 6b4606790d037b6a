"""TLS bootstrap: the agent obtains its client certificate from the API server.

:func:`ensure_client_certificate` decides which connection config the agent
uses, in upstream's order:

1. ``--orchconfig`` exists and its credentials are usable (a client certificate
   that is within its validity period, or a token): use it as it is;
2. otherwise, with ``--bootstrap-orchconfig``: a valid pair already in
   ``--cert-dir`` (``orch-agent-client-current.pem``) is reused, else a new ECDSA
   P-256 key and a CertificateSigningRequest for signer
   ``orch.io/apiserver-client-node-agent`` (CN ``system:node:<node>``, O
   ``system:nodes``) are sent with the bootstrap credentials, and the agent
   waits for approval and signing;
3. the certificate and key go into one file ``orch-agent-client-<timestamp>.pem``
   (mode 0600) with the symlink ``orch-agent-client-current.pem`` pointing at the
   newest, and ``--orchconfig`` is written to use that link for both certificate
   and key, so a rotated pair is picked up without rewriting the config.

The key of a request still pending is kept in ``--cert-dir`` and reused after a
restart, so a restarted agent does not leave a trail of keys nobody has.

:func:`request_certificate` (create a request, wait for the certificate) and
:class:`PairStore` are shared with certificate rotation and the serving
certificate (:mod:`agent.certificates.rotation`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as _dt
import ipaddress
import os
import secrets
import string
import tempfile
from typing import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver_min.api import names

from .. import logging as agent_logging
from ..client.config import Connection, OrchconfigError, load_orchconfig, write_orchconfig
from ..client.rest import ApiClient, ApiConnectionError, ApiError

__all__ = [
    "BootstrapError",
    "CLIENT_USAGES",
    "SERVING_USAGES",
    "CSR_PATH",
    "PairStore",
    "new_private_key",
    "private_key_pem",
    "make_csr",
    "csr_object",
    "request_certificate",
    "certificate_valid",
    "ensure_client_certificate",
    "request_serving_certificate",
]

log = agent_logging.get_logger("bootstrap")

CLIENT_USAGES = ("digital signature", "key encipherment", "client auth")
SERVING_USAGES = ("digital signature", "key encipherment", "server auth")
CSR_PATH = f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests"
BOOTSTRAP_TIMEOUT = 3600.0  # upstream waits up to an hour for an administrator to approve


class BootstrapError(RuntimeError):
    """The agent cannot get a usable client certificate; the message says what is missing."""


# --- keys, requests and files -----------------------------------------------------------


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def make_csr(key, node_name: str, *, dns: Iterable[str] = (), ips: Iterable[str] = ()) -> bytes:
    """A PEM PKCS#10 request for ``system:node:<node_name>`` in ``system:nodes``."""
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, names.GROUP_NODES),
            x509.NameAttribute(NameOID.COMMON_NAME, names.NODE_USER_PREFIX + node_name),
        ]
    )
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _random_suffix(n: int = 5) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(n))


def csr_object(
    name: str, csr_pem: bytes, signer: str, usages: Sequence[str], expiration_seconds: int | None = None
) -> dict:
    spec: dict = {
        "request": base64.b64encode(csr_pem).decode(),
        "signerName": signer,
        "usages": list(usages),
    }
    if expiration_seconds is not None:
        spec["expirationSeconds"] = int(expiration_seconds)
    return {
        "apiVersion": f"{names.CERTIFICATES_GROUP}/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


def _condition(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype and c.get("status", "True") == "True":
            return c
    return None


def _issued(obj: dict) -> bytes | None:
    """The signed certificate, or None while pending; BootstrapError when refused."""
    name = (obj.get("metadata") or {}).get("name", "")
    for ctype, verb in (("Denied", "denied"), ("Failed", "failed")):
        c = _condition(obj, ctype)
        if c is not None:
            raise BootstrapError(
                f"certificate signing request {name} was {verb}: reason {c.get('reason') or '-'}: "
                f"{c.get('message') or '(no message)'}"
            )
    if _condition(obj, "Approved") is None:
        return None
    data = (obj.get("status") or {}).get("certificate")
    if not data:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise BootstrapError(f"certificate signing request {name}: status.certificate is not base64") from None


async def request_certificate(
    client: ApiClient,
    csr_pem: bytes,
    *,
    signer: str,
    usages: Sequence[str],
    name_prefix: str = names.CSR_NAME_PREFIX,
    timeout: float = BOOTSTRAP_TIMEOUT,
    expiration_seconds: int | None = None,
) -> bytes:
    """Create a CertificateSigningRequest and wait for its certificate (PEM).

    Waiting is a watch on the one object (``fieldSelector=metadata.name=...``),
    re-opened from the last version when it ends. A timeout says whether
    approval or signing is missing; a Denied or Failed condition is reported
    with its reason and message at once.
    """
    created = await client.create(
        CSR_PATH, csr_object(f"{name_prefix}{_random_suffix()}", csr_pem, signer, usages, expiration_seconds)
    )
    name = created["metadata"]["name"]
    log.info("Requested a certificate", csr=name, signer=signer)
    last = created
    trouble = ""  # the last failure while waiting, for the timeout message
    try:
        async with asyncio.timeout(timeout):
            while True:
                cert = _issued(last)
                if cert is not None:
                    log.info("Certificate issued", csr=name, signer=signer)
                    return cert
                rv = (last.get("metadata") or {}).get("resourceVersion", "")
                try:
                    params = {
                        "fieldSelector": f"metadata.name={name}",
                        "resourceVersion": rv,
                        "timeoutSeconds": str(max(1, min(300, int(timeout)))),
                    }
                    async with contextlib.aclosing(client.watch(CSR_PATH, params=params)) as events:
                        async for ev_type, obj in events:
                            if ev_type == "DELETED":
                                raise BootstrapError(
                                    f"certificate signing request {name} was deleted before it was issued"
                                )
                            if ev_type in ("ADDED", "MODIFIED"):
                                last = obj
                                if _issued(last) is not None:
                                    break
                    continue
                except (ApiError, ApiConnectionError) as exc:
                    # 410 or a broken stream: read the object again and watch from there.
                    trouble = str(exc)
                    log.v(2).info("Watch of the certificate request ended", csr=name, err=trouble)
                await asyncio.sleep(1.0)
                try:
                    last = await client.get(f"{CSR_PATH}/{name}")
                except ApiError as exc:
                    if exc.status == 404:
                        raise BootstrapError(
                            f"certificate signing request {name} was deleted before it was issued"
                        ) from None
                    trouble = str(exc)
                except ApiConnectionError as exc:
                    trouble = str(exc)
    except TimeoutError:
        missing = (
            (f"signing (it is approved but status.certificate is empty: is the signer for {signer} running?)")
            if _condition(last, "Approved")
            else (
                "approval (no Approved condition: approve it, e.g. kubectl certificate approve, or check "
                "that the auto-approver may approve requests of this user)"
            )
        )
        also = f"; last error: {trouble}" if trouble else ""
        raise BootstrapError(
            f"timed out after {timeout:g}s waiting for certificate signing request {name}: missing {missing}{also}"
        ) from None


def certificate_valid(cert: x509.Certificate, now: _dt.datetime | None = None) -> bool:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def _load_pair(data: bytes) -> tuple[x509.Certificate, bytes]:
    """The first certificate and the private key PEM block of a combined file."""
    cert = x509.load_pem_x509_certificate(data)
    start = data.find(b"-----BEGIN", data.find(b"-----END CERTIFICATE-----"))
    key_start = -1
    while start >= 0:
        line_end = data.find(b"\n", start)
        if b"PRIVATE KEY" in data[start : line_end if line_end >= 0 else None]:
            key_start = start
            break
        start = data.find(b"-----BEGIN", start + 1)
    if key_start < 0:
        raise ValueError("no private key in the file")
    key_pem = data[key_start:]
    key = serialization.load_pem_private_key(key_pem, password=None)
    if key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        raise ValueError("the private key does not belong to the certificate")
    return cert, key_pem


class PairStore:
    """``<prefix>-<timestamp>.pem`` files (certificate then key, mode 0600) in a
    directory, and ``<prefix>-current.pem`` pointing at the newest (upstream's layout)."""

    def __init__(self, directory: str, prefix: str) -> None:
        self.directory = directory
        self.prefix = prefix

    @property
    def current_path(self) -> str:
        return os.path.join(self.directory, f"{self.prefix}-current.pem")

    @property
    def pending_key_path(self) -> str:
        return os.path.join(self.directory, f"{self.prefix}.key.tmp")

    def load(self) -> tuple[x509.Certificate, bytes] | None:
        """The current pair, or None when missing or unusable (with the reason logged)."""
        try:
            with open(self.current_path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        try:
            return _load_pair(data)
        except ValueError as exc:
            log.warning("Ignoring an unusable certificate file", path=self.current_path, err=exc)
            return None

    def pending_key(self):
        """The key of a request made before a restart, or a new one (saved first)."""
        try:
            with open(self.pending_key_path, "rb") as f:
                return serialization.load_pem_private_key(f.read(), password=None)
        except (OSError, ValueError, TypeError):
            pass
        key = new_private_key()
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        _write_private(self.pending_key_path, private_key_pem(key))
        return key

    def drop_pending_key(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pending_key_path)

    def update(self, cert_pem: bytes, key_pem: bytes) -> str:
        """Write a new pair and point the current link at it; the link's path."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d-%H-%M-%S")
        path = os.path.join(self.directory, f"{self.prefix}-{stamp}.pem")
        n = 0
        while os.path.exists(path):
            n += 1
            path = os.path.join(self.directory, f"{self.prefix}-{stamp}-{n}.pem")
        body = cert_pem if cert_pem.endswith(b"\n") else cert_pem + b"\n"
        _write_private(path, body + key_pem)
        # Replace the link atomically: a new link under a temporary name, renamed over.
        tmp = os.path.join(self.directory, f".{self.prefix}-current.{_random_suffix(8)}")
        os.symlink(os.path.abspath(path), tmp)
        os.replace(tmp, self.current_path)
        return self.current_path


def _write_private(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


async def obtain_pair(
    client: ApiClient,
    store: PairStore,
    node_name: str,
    *,
    signer: str,
    usages: Sequence[str],
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    name_prefix: str = names.CSR_NAME_PREFIX,
    timeout: float = BOOTSTRAP_TIMEOUT,
) -> str:
    """Request a certificate for a (reused pending or new) key and store the pair; the current link."""
    key = store.pending_key()
    csr = make_csr(key, node_name, dns=dns, ips=ips)
    cert_pem = await request_certificate(
        client, csr, signer=signer, usages=usages, name_prefix=name_prefix, timeout=timeout
    )
    try:
        cert = x509.load_pem_x509_certificates(cert_pem)[0]
    except (ValueError, IndexError) as exc:
        raise BootstrapError(f"the issued certificate is not PEM: {exc}") from None
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        raise BootstrapError("the issued certificate is not for the key the request was made with")
    path = store.update(cert_pem, private_key_pem(key))
    store.drop_pending_key()
    log.info(
        "Stored a new certificate",
        path=path,
        subject=cert.subject.rfc4514_string(),
        expires=cert.not_valid_after_utc.isoformat(),
    )
    return path


# --- the client certificate ---------------------------------------------------------------


def client_store(cfg) -> PairStore:
    return PairStore(cfg.cert_dir, names.AGENT_CLIENT_CERT_PREFIX)


def _usable(path: str) -> tuple[Connection | None, str]:
    """(the connection, "") when ``path`` can be used as it is, else (None, why not)."""
    try:
        conn = load_orchconfig(path)
    except OrchconfigError as exc:
        return None, str(exc)
    if conn.has_client_certificate:
        try:
            cert = x509.load_pem_x509_certificate(conn.cert_data or b"")
        except ValueError as exc:
            return None, f"{path}: the client certificate cannot be read: {exc}"
        if not certificate_valid(cert):
            return None, (
                f"{path}: the client certificate is not valid now (valid "
                f"{cert.not_valid_before_utc.isoformat()} to {cert.not_valid_after_utc.isoformat()})"
            )
        return conn, ""
    if conn.token:
        return conn, ""
    return None, f"{path}: has no client certificate and no token"


async def ensure_client_certificate(cfg, node_name: str, *, timeout: float = BOOTSTRAP_TIMEOUT) -> str:
    """The path of the connection config to use (see the module docstring)."""
    path = cfg.orchconfig
    if not path:
        raise BootstrapError("--orchconfig is required to work with the API server")
    if os.path.exists(path):
        conn, why = _usable(path)
        if conn is not None:
            return path
    else:
        why = f"{path} does not exist"
    if not cfg.bootstrap_orchconfig:
        raise BootstrapError(f"{why}, and no --bootstrap-orchconfig is given to obtain a client certificate")
    log.info("Client credentials need bootstrapping", reason=why, bootstrap=cfg.bootstrap_orchconfig)
    try:
        bootstrap = load_orchconfig(cfg.bootstrap_orchconfig)
    except OrchconfigError as exc:
        raise BootstrapError(f"cannot use --bootstrap-orchconfig: {exc}") from None

    store = client_store(cfg)
    pair = store.load()
    if pair is not None and certificate_valid(pair[0]):
        log.info("Using the client certificate already in the certificate directory", path=store.current_path)
    else:
        client = ApiClient(
            bootstrap, qps=cfg.orch_api_qps, burst=cfg.orch_api_burst, user_agent=f"{names.AGENT_NAME}/bootstrap"
        )
        try:
            await obtain_pair(
                client, store, node_name, signer=names.SIGNER_NODE_AGENT_CLIENT, usages=CLIENT_USAGES, timeout=timeout
            )
        except ApiError as exc:
            raise BootstrapError(
                f"the API server refused the certificate signing request "
                f"({bootstrap.server}, credentials of {cfg.bootstrap_orchconfig}): {exc}"
            ) from None
        except ApiConnectionError as exc:
            raise BootstrapError(f"cannot reach the API server for the TLS bootstrap: {exc}") from None
        finally:
            await client.close()
    write_orchconfig(
        path,
        server=bootstrap.server,
        ca_data=bootstrap.ca_data,
        cert_file=store.current_path,
        key_file=store.current_path,
    )
    log.info("Wrote the agent's connection config", path=path, certificate=store.current_path)
    return path


# --- the serving certificate ------------------------------------------------------------


def _split_addresses(addresses: Iterable[str]) -> tuple[list[str], list[str]]:
    dns: list[str] = []
    ips: list[str] = []
    for a in addresses:
        a = a.strip()
        if not a:
            continue
        try:
            ips.append(str(ipaddress.ip_address(a)))
        except ValueError:
            dns.append(a)
    return list(dict.fromkeys(dns)), list(dict.fromkeys(ips))


async def request_serving_certificate(
    client: ApiClient, node_name: str, addresses: Iterable[str], cert_dir: str, *, timeout: float = BOOTSTRAP_TIMEOUT
) -> tuple[str, str]:
    """A serving certificate from ``orch.io/node-agent-serving`` for the node's
    hostnames and IP addresses; (certificate path, key path), both the current
    link of ``orch-agent-server-*.pem`` in ``cert_dir``.

    The API server approves such requests only with its opt-in flag
    (``--auto-approve-node-serving-certificates``) and only when every name is
    among the node's reported addresses; otherwise an administrator must approve.
    """
    dns, ips = _split_addresses(addresses)
    if not dns and not ips:
        raise BootstrapError("a serving certificate needs at least one host name or IP address")
    store = PairStore(cert_dir, names.AGENT_SERVER_CERT_PREFIX)
    path = await obtain_pair(
        client,
        store,
        node_name,
        signer=names.SIGNER_NODE_AGENT_SERVING,
        usages=SERVING_USAGES,
        dns=dns,
        ips=ips,
        name_prefix=names.CSR_SERVING_NAME_PREFIX,
        timeout=timeout,
    )
    return path, path

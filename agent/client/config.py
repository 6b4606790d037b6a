"""Connection configs ("orchconfig"): the kubeconfig YAML shape, read and written.

The agent reads the same files kubectl reads (``apiVersion: v1``, ``kind:
Config``, ``clusters``/``users``/``contexts``, ``current-context``), so an
administrator can check a node's credentials with ``kubectl --kubeconfig``.

Only what the agent needs is read: the current context's cluster (``server``,
``certificate-authority`` or ``certificate-authority-data``, ``tls-server-name``)
and user (``client-certificate``/``client-key`` files or their ``-data`` forms,
``token`` or ``tokenFile``). Relative file paths are resolved against the
config file's directory, as kubectl does. TLS verification is always on: a
config without the cluster CA, or with ``insecure-skip-tls-verify``, is refused
rather than silently trusting whoever answers.

Every problem is an :class:`OrchconfigError` naming the file and the field.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import tempfile
from typing import Any
from urllib.parse import urlsplit

import yaml

__all__ = ["Connection", "OrchconfigError", "load_orchconfig", "write_orchconfig", "dump_orchconfig"]


class OrchconfigError(ValueError):
    """A connection config cannot be used; the message names the file and the field."""


@dataclasses.dataclass(frozen=True)
class Connection:
    """Everything needed to open a verified TLS connection to the API server.

    ``cert_file``/``key_file`` are set when the credentials came from files, so
    that a rotated certificate behind the same path (a symlink) is found again.
    """

    server: str
    ca_data: bytes
    cert_data: bytes | None
    key_data: bytes | None
    token: str | None
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""  # tls-server-name: the name to verify instead of the URL's host
    source: str = ""  # the file it was read from, for messages

    @property
    def has_client_certificate(self) -> bool:
        return bool(self.cert_data and self.key_data)


def _err(path: str, field: str, reason: str) -> OrchconfigError:
    return OrchconfigError(f"{path}: field {field}: {reason}" if field else f"{path}: {reason}")


def _named(doc: dict, section: str, name: str, path: str, inner: str) -> tuple[int, dict]:
    """The entry ``name`` of ``clusters``/``users``/``contexts`` and its index."""
    entries = doc.get(section)
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise _err(path, section, "expected a list")
    for i, entry in enumerate(entries):
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(inner)
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise _err(path, f"{section}[{i}].{inner}", "expected an object")
            return i, body
    raise _err(path, section, f"no entry named {name!r}")


def _b64(path: str, field: str, value: Any) -> bytes:
    if not isinstance(value, str):
        raise _err(path, field, "expected a base64 string")
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _err(path, field, "invalid base64") from None


def _read(path: str, field: str, file: Any, base: str) -> tuple[bytes, str]:
    if not isinstance(file, str) or not file:
        raise _err(path, field, "expected a file path")
    full = file if os.path.isabs(file) else os.path.normpath(os.path.join(base, file))
    try:
        with open(full, "rb") as f:
            return f.read(), full
    except OSError as exc:
        raise _err(path, field, f"cannot read {full}: {exc.strerror or exc}") from None


def _check_pem(path: str, field: str, data: bytes, what: str) -> None:
    """A quick shape check so that a wrong file is reported here and not as a TLS error."""
    marker = b"-----BEGIN CERTIFICATE-----" if what == "certificate" else b"PRIVATE KEY-----"
    if marker not in data:
        raise _err(path, field, f"does not contain a PEM {what}")


def load_orchconfig(path: str) -> Connection:
    """Read the connection of ``path``'s current context (see the module docstring)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise OrchconfigError(f"{path}: cannot read the connection config: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise OrchconfigError(f"{path}: {where}invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(doc, dict):
        raise OrchconfigError(
            f"{path}: not a connection config (expected a YAML object with clusters, users and contexts)"
        )
    kind = doc.get("kind")
    if kind not in (None, "Config"):
        raise _err(path, "kind", f'must be "Config", got {kind!r}')
    base = os.path.dirname(os.path.abspath(path))

    current = doc.get("current-context") or ""
    if not isinstance(current, str):
        raise _err(path, "current-context", "expected a string")
    if not current:
        contexts = doc.get("contexts") or []
        if isinstance(contexts, list) and len(contexts) == 1 and isinstance(contexts[0], dict):
            current = contexts[0].get("name") or ""
        if not current:
            raise _err(path, "current-context", "not set (and the file does not have exactly one context)")
    ci, context = _named(doc, "contexts", current, path, "context")
    cluster_name = context.get("cluster")
    if not cluster_name or not isinstance(cluster_name, str):
        raise _err(path, f"contexts[{ci}].context.cluster", "required")
    cli, cluster = _named(doc, "clusters", cluster_name, path, "cluster")
    cpath = f"clusters[{cli}].cluster"

    server = cluster.get("server")
    if not server or not isinstance(server, str):
        raise _err(path, f"{cpath}.server", "required")
    parts = urlsplit(server)
    if parts.scheme != "https" or not parts.hostname:
        raise _err(path, f"{cpath}.server", f"must be an https:// URL with a host, got {server!r}")
    if cluster.get("insecure-skip-tls-verify"):
        raise _err(
            path,
            f"{cpath}.insecure-skip-tls-verify",
            "is not supported: the agent always "
            "verifies the API server's certificate; give certificate-authority-data instead",
        )
    if cluster.get("certificate-authority-data"):
        ca = _b64(path, f"{cpath}.certificate-authority-data", cluster["certificate-authority-data"])
        ca_field = f"{cpath}.certificate-authority-data"
    elif cluster.get("certificate-authority"):
        ca, _ = _read(path, f"{cpath}.certificate-authority", cluster["certificate-authority"], base)
        ca_field = f"{cpath}.certificate-authority"
    else:
        raise _err(
            path,
            cpath,
            "has no certificate-authority or certificate-authority-data: the "
            "cluster CA is needed to verify the API server (TLS verification is always on)",
        )
    _check_pem(path, ca_field, ca, "certificate")
    server_name = cluster.get("tls-server-name") or ""
    if not isinstance(server_name, str):
        raise _err(path, f"{cpath}.tls-server-name", "expected a string")

    user_name = context.get("user")
    user: dict = {}
    upath = ""
    if user_name:
        ui, user = _named(doc, "users", user_name, path, "user")
        upath = f"users[{ui}].user"

    cert = key = None
    cert_file = key_file = ""
    if user.get("client-certificate-data"):
        cert = _b64(path, f"{upath}.client-certificate-data", user["client-certificate-data"])
    elif user.get("client-certificate"):
        cert, cert_file = _read(path, f"{upath}.client-certificate", user["client-certificate"], base)
    if user.get("client-key-data"):
        key = _b64(path, f"{upath}.client-key-data", user["client-key-data"])
    elif user.get("client-key"):
        key, key_file = _read(path, f"{upath}.client-key", user["client-key"], base)
    if (cert is None) != (key is None):
        missing = "client-key(-data)" if key is None else "client-certificate(-data)"
        raise _err(path, upath, f"a client certificate needs its key and the other way round: {missing} is missing")
    if cert is not None and key is not None:
        _check_pem(path, f"{upath}.client-certificate" + ("" if cert_file else "-data"), cert, "certificate")
        _check_pem(path, f"{upath}.client-key" + ("" if key_file else "-data"), key, "private key")

    token = user.get("token") or None
    if token is not None and not isinstance(token, str):
        raise _err(path, f"{upath}.token", "expected a string")
    if token is None and user.get("tokenFile"):
        data, _ = _read(path, f"{upath}.tokenFile", user["tokenFile"], base)
        token = data.decode("utf-8", "replace").strip() or None
        if token is None:
            raise _err(path, f"{upath}.tokenFile", "the token file is empty")
    return Connection(
        server=server.rstrip("/"),
        ca_data=ca,
        cert_data=cert,
        key_data=key,
        token=token,
        cert_file=cert_file,
        key_file=key_file,
        server_name=server_name,
        source=os.path.abspath(path),
    )


def dump_orchconfig(
    *,
    server: str,
    ca_data: bytes,
    cert_file: str = "",
    key_file: str = "",
    token: str = "",
    user: str = "default-auth",
    cluster: str = "default-cluster",
    context: str = "default-context",
) -> dict:
    """The document :func:`write_orchconfig` writes (names as upstream's node configs)."""
    u: dict[str, str] = {}
    if cert_file:
        u["client-certificate"] = cert_file
    if key_file:
        u["client-key"] = key_file
    if token:
        u["token"] = token
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_data).decode()},
            }
        ],
        "users": [{"name": user, "user": u}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
    }


def write_orchconfig(
    path: str,
    *,
    server: str,
    ca_data: bytes,
    cert_file: str = "",
    key_file: str = "",
    token: str = "",
    user: str = "default-auth",
) -> None:
    """Write a connection config, mode 0600, atomically (a reader never sees half a file)."""
    doc = dump_orchconfig(
        server=server, ca_data=ca_data, cert_file=cert_file, key_file=key_file, token=token, user=user
    )
    data = yaml.safe_dump(doc, sort_keys=False).encode()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".orchconfig-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

"""The credentials the server presents to admission backends.

The webhook plugins' configuration (``WebhookAdmissionConfiguration``) names a
``kubeConfigFile``: an orchconfig whose ``users`` entries are keyed by the backend's
host name (``svc.ns.svc``, ``host:port`` when the port is not 443, a leading ``*.``
wildcard, ``*`` the default). Each entry gives a client certificate and key, a token,
or a user name and password."""

from __future__ import annotations

import base64
import dataclasses
import os
from typing import Any, Mapping

from ...api import codec, names
from ..config import strict_fields

WEBHOOK_CONFIG_KINDS = {
    f"apiserver.config.{names.DOMAIN}/v1": "WebhookAdmissionConfiguration",
    f"apiserver.config.{names.DOMAIN}/v1alpha1": "WebhookAdmission",
}

_USER_FIELDS = (
    "client-certificate-data",
    "client-key-data",
    "client-certificate",
    "client-key",
    "token",
    "tokenFile",
    "username",
    "password",
)


@dataclasses.dataclass(frozen=True)
class ClientCredentials:
    cert_pem: bytes = b""
    key_pem: bytes = b""
    token: str = ""
    username: str = ""
    password: str = ""

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.username or self.password:
            raw = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {raw}"}
        return {}


NO_CREDENTIALS = ClientCredentials()


def _read(path: str, base: str, what: str) -> bytes:
    full = path if os.path.isabs(path) else os.path.join(base, path)
    try:
        with open(full, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ValueError(f"{what}: cannot read {full}: {exc.strerror or exc}") from None


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what}: must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError(f"{what}: not valid base64") from None


def parse_user(user: Mapping, where: str, base: str) -> ClientCredentials:
    """One ``users[].user`` entry; a field this server would not act on (exec plugins,
    auth providers, impersonation) is refused."""
    strict_fields(user, _USER_FIELDS, where)
    cert = key = b""
    if "client-certificate-data" in user:
        cert = _b64(user["client-certificate-data"], f"{where}.client-certificate-data")
    elif "client-certificate" in user:
        cert = _read(str(user["client-certificate"]), base, f"{where}.client-certificate")
    if "client-key-data" in user:
        key = _b64(user["client-key-data"], f"{where}.client-key-data")
    elif "client-key" in user:
        key = _read(str(user["client-key"]), base, f"{where}.client-key")
    if bool(cert) != bool(key):
        raise ValueError(f"{where}: a client certificate needs its key, and a key its certificate")
    token = user.get("token") or ""
    if not token and user.get("tokenFile"):
        token = _read(str(user["tokenFile"]), base, f"{where}.tokenFile").decode().strip()
    if not isinstance(token, str):
        raise ValueError(f"{where}.token: must be a string")
    username, password = user.get("username") or "", user.get("password") or ""
    if not isinstance(username, str) or not isinstance(password, str):
        raise ValueError(f"{where}: username and password must be strings")
    return ClientCredentials(cert, key, token, username, password)


def load_orchconfig(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            doc = codec.load_yaml(fh.read())
    except OSError as exc:
        raise ValueError(f"kubeConfigFile {path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"kubeConfigFile {path}: neither YAML nor JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"kubeConfigFile {path}: must be an orchconfig (apiVersion v1, kind Config)")
    return doc


class CredentialResolver:
    """Credentials by backend host name, with upstream's look-up order: the exact
    name, then ``*.`` wildcards from the most specific, then (for ``host:443``) the
    same without the port, then ``*``."""

    def __init__(self, by_name: Mapping[str, ClientCredentials] | None = None):
        self.by_name = dict(by_name or {})

    @classmethod
    def from_file(cls, path: str) -> "CredentialResolver":
        doc = load_orchconfig(path)
        users = doc.get("users") or []
        if not isinstance(users, list):
            raise ValueError(f"kubeConfigFile {path}: users must be a list")
        base = os.path.dirname(os.path.abspath(path))
        found: dict[str, ClientCredentials] = {}
        for i, entry in enumerate(users):
            where = f"kubeConfigFile {path}: users[{i}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
                raise ValueError(f"{where}: needs a name (the backend's host name) and a user")
            user = entry.get("user") or {}
            if not isinstance(user, dict):
                raise ValueError(f"{where}.user: must be an object")
            found[entry["name"]] = parse_user(user, f"{where}.user", base)
        return cls(found)

    def resolve(self, server: str) -> ClientCredentials:
        found = self._lookup(server)
        if found is not None:
            return found
        host, sep, port = server.rpartition(":")
        if sep and port == "443" and host:
            found = self._lookup(host)
            if found is not None:
                return found
        return self.by_name.get("*", NO_CREDENTIALS)

    def _lookup(self, server: str) -> ClientCredentials | None:
        if server in self.by_name:
            return self.by_name[server]
        steps = server.split(".")
        for i in range(1, len(steps)):
            wildcard = "*." + ".".join(steps[i:])
            if wildcard in self.by_name:
                return self.by_name[wildcard]
        return None


def parse_webhook_admission_config(doc: Mapping | None) -> str:
    """The webhook plugins' configuration: the absolute path of ``kubeConfigFile``, or
    "" when none is given (ValueError naming the problem)."""
    if doc is None:
        return ""
    strict_fields(doc, ("apiVersion", "kind", "kubeConfigFile"), "WebhookAdmissionConfiguration")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if WEBHOOK_CONFIG_KINDS.get(str(api_version)) != kind:
        wanted = ", ".join(f"{v} {k}" for v, k in WEBHOOK_CONFIG_KINDS.items())
        raise ValueError(f"apiVersion/kind {api_version}/{kind} is not supported (supported: {wanted})")
    path = doc.get("kubeConfigFile") or ""
    if not isinstance(path, str):
        raise ValueError("kubeConfigFile: must be a string")
    if path and not os.path.isabs(path):
        raise ValueError(f'kubeConfigFile: Invalid value: "{path}": must be an absolute file path')
    if path:
        CredentialResolver.from_file(path)  # a bad file is a start-up error
    return path

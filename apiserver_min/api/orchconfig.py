"""The backend a webhook flag names: an orchconfig file (the kubeconfig layout) whose
current context's cluster gives the URL and the CA, and whose user gives the
credentials the server presents (a client certificate and key, or a token).

The one reader of these files for the token review webhook
(``--authentication-token-webhook-config-file``), the authorization webhook
(``--authorization-webhook-config-file``) and the audit webhook
(``--audit-webhook-config-file``). It lives in the contract because it reads only
files (and builds the TLS context they describe): audit logging may depend on the
contract alone, and the webhook callers' shared client (``webhookclient``) sits on
the storage."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import ssl
import tempfile
import urllib.parse

from ..api import codec


class WebhookConfigError(ValueError):
    """A webhook configuration file that cannot be used; the text names the file."""


@dataclasses.dataclass(frozen=True)
class Target:
    url: str
    ca_pem: bytes = b""
    cert_pem: bytes = b""
    key_pem: bytes = b""
    token: str = ""


def _file_or_data(entry: dict, key: str, base: str, where: str) -> bytes:
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(str(entry[f"{key}-data"]), validate=True)
        except ValueError:
            raise WebhookConfigError(f"{where}: {key}-data is not valid base64") from None
    if entry.get(key):
        path = str(entry[key])
        full = path if os.path.isabs(path) else os.path.join(base, path)
        try:
            with open(full, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise WebhookConfigError(f"{where}: {key} {full}: {exc.strerror or exc}") from None
    return b""


def load_target(path: str, where: str, require_https: bool = True) -> Target:
    """The backend of the orchconfig at PATH; ``where`` (the flag and file) starts every
    error's text."""
    try:
        with open(path, "rb") as fh:
            doc = codec.load_yaml(fh.read())
    except OSError as exc:
        raise WebhookConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise WebhookConfigError(f"{where}: neither YAML nor JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WebhookConfigError(f"{where}: must be an orchconfig (apiVersion v1, kind Config)")

    def named(section: str, inner: str) -> dict[str, dict]:
        return {
            str(e.get("name")): e.get(inner) or {}
            for e in doc.get(section) or []
            if isinstance(e, dict) and isinstance(e.get(inner) or {}, dict)
        }

    contexts, clusters, users = named("contexts", "context"), named("clusters", "cluster"), named("users", "user")
    current = doc.get("current-context")
    if current and current in contexts:
        context = contexts[current]
    elif len(contexts) == 1:
        context = next(iter(contexts.values()))
    elif not contexts and len(clusters) == 1:
        context = {"cluster": next(iter(clusters)), "user": next(iter(users), "")}
    else:
        raise WebhookConfigError(f"{where}: needs a current-context naming one of its contexts")
    cluster = clusters.get(str(context.get("cluster")))
    if not cluster or not cluster.get("server"):
        raise WebhookConfigError(f"{where}: the current context's cluster has no server")
    url = str(cluster["server"])
    scheme = urllib.parse.urlsplit(url).scheme
    if require_https and scheme != "https":
        raise WebhookConfigError(f"{where}: the backend must be served over HTTPS, not {url}")
    if scheme not in ("https", "http"):
        raise WebhookConfigError(f"{where}: the server {url!r} is not an http(s) URL")
    base = os.path.dirname(os.path.abspath(path))
    user = users.get(str(context.get("user")), {})
    cert = _file_or_data(user, "client-certificate", base, where)
    key = _file_or_data(user, "client-key", base, where)
    if bool(cert) != bool(key):
        raise WebhookConfigError(f"{where}: a client certificate needs its key, and a key its certificate")
    token = user.get("token") or ""
    if not isinstance(token, str):
        raise WebhookConfigError(f"{where}: the user's token must be a string")
    if not token and user.get("tokenFile"):
        token = _file_or_data({"tokenFile": user["tokenFile"]}, "tokenFile", base, where).decode().strip()
    return Target(url, _file_or_data(cluster, "certificate-authority", base, where), cert, key, token)


def ssl_context(target: Target) -> ssl.SSLContext:
    """Verifies the backend with the file's CA (else the system roots) and presents its
    client certificate, if any."""
    ctx = ssl.create_default_context(cadata=target.ca_pem.decode("latin-1")) if target.ca_pem else None
    ctx = ctx or ssl.create_default_context()
    if target.cert_pem:
        # The ssl module loads a client certificate from a file only: a private one, removed at once.
        fd, tmp = tempfile.mkstemp(prefix="orch-webhook-client-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(target.cert_pem.rstrip(b"\n") + b"\n" + target.key_pem)
            ctx.load_cert_chain(tmp)
        except ssl.SSLError as exc:
            raise WebhookConfigError(f"the webhook client certificate or key cannot be used: {exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return ctx

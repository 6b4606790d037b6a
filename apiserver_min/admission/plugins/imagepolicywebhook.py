"""ImagePolicyWebhook: a backend decides whether a pod's images may run.

The plugin's configuration (``imagePolicy``: ``kubeConfigFile``, ``allowTTL`` and
``denyTTL`` in seconds, ``retryBackoff`` in milliseconds, ``defaultAllow``) names the
backend in an orchconfig (its current context's cluster and user; TLS required).
For a pod create or update (or its ephemeral containers) the backend gets an
``ImageReview`` (``imagepolicy.orch.io/v1alpha1``) with every image, the pod
annotations matching ``*.image-policy.orch.io/*`` and the namespace; answers are
cached for their TTL. When the backend fails, ``defaultAllow`` decides: admit (the
pod is annotated as failed open) or refuse. Refusals are 403 with upstream's words."""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import logging
import os
import ssl
import time
import urllib.parse
from typing import Any

import aiohttp
import orjson

from ...api import names
from ...api import status as st
from ...webhookclient.errors import describe_exception
from ..chain import Attributes
from ..config import strict_fields
from ..webhook.client import ssl_context
from ..webhook.credentials import ClientCredentials, load_orchconfig, parse_user

log = logging.getLogger("orch-apiserver.admission.imagepolicy")

CONFIG_KEY = "imagePolicy"
API_VERSION = f"{names.IMAGEPOLICY_GROUP}/v1alpha1"
CACHE_SIZE = 1024
CALL_TIMEOUT_SECONDS = 30.0
RETRY_STEPS = 5
RETRY_FACTOR = 1.5

# (name, unit in seconds, minimum, maximum, default) of the durations, in seconds.
_DURATIONS = {
    "retryBackoff": ("backoff", 0.001, 0.001, 300.0, 0.5),
    "allowTTL": ("allow cache", 1.0, 1.0, 1800.0, 300.0),
    "denyTTL": ("deny cache", 1.0, 1.0, 1800.0, 30.0),
}


def go_duration(seconds: float) -> str:
    """A duration as Go prints it (``500ms``, ``1s``, ``5m0s``, ``30m0s``)."""
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes:
        return f"{int(minutes)}m{rest:g}s"
    return f"{rest:g}s"


@dataclasses.dataclass(frozen=True)
class Backend:
    url: str
    ca_pem: bytes
    credentials: ClientCredentials


@dataclasses.dataclass(frozen=True)
class ImagePolicyConfig:
    backend: Backend
    allow_ttl: float
    deny_ttl: float
    retry_backoff: float
    default_allow: bool


def _duration(key: str, value: Any) -> float:
    name, unit, low, high, default = _DURATIONS[key]
    if value is None or value == 0:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{CONFIG_KEY}.{key}: must be a number")
    if value == -1:
        return 0.0  # disabled
    seconds = value * unit
    if seconds < low or seconds > high:
        raise ValueError(
            f"valid value is between {go_duration(low)} and {go_duration(high)}, got {go_duration(seconds)} for {name}"
        )
    return seconds


def _backend(path: str) -> Backend:
    doc = load_orchconfig(path)
    where = f"kubeConfigFile {path}"
    base = os.path.dirname(os.path.abspath(path))
    current = doc.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    clusters = {c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or [] if isinstance(c, dict)}
    users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or [] if isinstance(u, dict)}
    if current and current in contexts:
        context = contexts[current]
    elif len(contexts) == 1:
        context = next(iter(contexts.values()))
    else:
        raise ValueError(f"{where}: needs a current-context naming one of its contexts")
    cluster = clusters.get(context.get("cluster"))
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise ValueError(f"{where}: the current context's cluster has no server")
    url = str(cluster["server"])
    if urllib.parse.urlsplit(url).scheme != "https":
        raise ValueError(f"{where}: the image policy backend must be served over TLS (https), not {url}")
    ca = b""
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(str(cluster["certificate-authority-data"]))
    elif cluster.get("certificate-authority"):
        ca_path = str(cluster["certificate-authority"])
        try:
            with open(ca_path if os.path.isabs(ca_path) else os.path.join(base, ca_path), "rb") as fh:
                ca = fh.read()
        except OSError as exc:
            raise ValueError(f"{where}: certificate-authority: {exc.strerror or exc}") from None
    user = users.get(context.get("user")) or {}
    if not isinstance(user, dict):
        raise ValueError(f"{where}: the current context's user must be an object")
    return Backend(url, ca, parse_user(user, f"{where}: user", base))


def parse_configuration(doc: dict | None) -> ImagePolicyConfig:
    """The plugin's configuration; ValueError naming the problem (it has none by default)."""
    if doc is None:
        raise ValueError(f"no configuration: {CONFIG_KEY}.kubeConfigFile is required")
    strict_fields(doc, (CONFIG_KEY,), "ImagePolicyWebhook configuration")
    cfg = doc.get(CONFIG_KEY)
    if not isinstance(cfg, dict):
        raise ValueError(f"{CONFIG_KEY}: must be an object with kubeConfigFile, allowTTL, denyTTL, retryBackoff")
    strict_fields(cfg, ("kubeConfigFile", "allowTTL", "denyTTL", "retryBackoff", "defaultAllow"), CONFIG_KEY)
    path = cfg.get("kubeConfigFile")
    if not isinstance(path, str) or not path:
        raise ValueError(f"{CONFIG_KEY}.kubeConfigFile: required")
    if not os.path.isabs(path):
        raise ValueError(f'{CONFIG_KEY}.kubeConfigFile: Invalid value: "{path}": must be an absolute file path')
    default_allow = cfg.get("defaultAllow", False)
    if not isinstance(default_allow, bool):
        raise ValueError(f"{CONFIG_KEY}.defaultAllow: must be true or false")
    retry = _duration("retryBackoff", cfg.get("retryBackoff"))
    allow_ttl = _duration("allowTTL", cfg.get("allowTTL"))
    deny_ttl = _duration("denyTTL", cfg.get("denyTTL"))
    return ImagePolicyConfig(_backend(path), allow_ttl, deny_ttl, retry, default_allow)


class BackendError(Exception):
    """No usable answer from the backend."""


class _Retry(Exception):
    pass


class ImagePolicyWebhook:
    name = "ImagePolicyWebhook"
    resources = frozenset({("", "pods")})
    complete = True  # its only write is the failed-open annotation, a plain value

    def __init__(self, config: ImagePolicyConfig):
        self.config = config
        self._cache: collections.OrderedDict[bytes, tuple[float, dict]] = collections.OrderedDict()
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, server: Any, doc: dict | None) -> "ImagePolicyWebhook":
        return cls(parse_configuration(doc))

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if attrs.operation not in ("CREATE", "UPDATE") or attrs.subresource not in ("", "ephemeralcontainers"):
            return
        pod = attrs.obj
        if not isinstance(pod, dict):
            raise st.bad_request("Resource was marked with kind Pod but was unable to be converted")
        spec = pod.get("spec") or {}
        if attrs.subresource:
            containers = list(spec.get("ephemeralContainers") or [])
        else:
            containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
        md = pod.setdefault("metadata", {})
        annotations = {
            k: v for k, v in (md.get("annotations") or {}).items() if names.IMAGE_POLICY_ANNOTATION_DOMAIN in k
        }
        review_spec: dict[str, Any] = {
            "containers": [{"image": c.get("image") or ""} for c in containers if isinstance(c, dict)]
        }
        if annotations:
            review_spec["annotations"] = annotations
        if attrs.namespace:
            review_spec["namespace"] = attrs.namespace
        try:
            status = await self._review(review_spec)
        except BackendError as exc:
            log.info("error contacting the image policy backend: %s", exc)
            if self.config.default_allow:
                attrs.annotate(f"{names.IMAGE_POLICY_AUDIT_PREFIX}failed-open", "true")
                md.setdefault("annotations", {})[names.IMAGE_POLICY_FAILED_OPEN_ANNOTATION] = "true"
                return
            raise self._forbidden(attrs, str(exc)) from None
        audit = status.get("auditAnnotations")
        if isinstance(audit, dict):
            for k, v in audit.items():
                attrs.annotate(f"{names.IMAGE_POLICY_AUDIT_PREFIX}{k}", str(v))
        if status.get("allowed") is not True:
            reason = status.get("reason")
            if isinstance(reason, str) and reason:
                raise self._forbidden(attrs, f"image policy webhook backend denied one or more images: {reason}")
            raise self._forbidden(attrs, "one or more images rejected by webhook backend")

    @staticmethod
    def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
        name = attrs.name or "Unknown"
        return st.forbidden("pods", name, "", message)

    async def _review(self, spec: dict) -> dict:
        key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None:
            if cached[0] > now:
                self._cache.move_to_end(key)
                return cached[1]
            del self._cache[key]
        status = await self._call(spec)
        ttl = self.config.allow_ttl if status.get("allowed") is True else self.config.deny_ttl
        if ttl > 0:
            self._cache[key] = (now + ttl, status)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return status

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            backend = self.config.backend
            ctx = ssl_context(backend.ca_pem, backend.credentials)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx), cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def _call(self, spec: dict) -> dict:
        body = orjson.dumps({"apiVersion": API_VERSION, "kind": "ImageReview", "metadata": {}, "spec": spec})
        backoff = self.config.retry_backoff
        last = ""
        for attempt in range(RETRY_STEPS):
            try:
                return await self._post(body)
            except _Retry as exc:
                last = str(exc)
                if attempt + 1 < RETRY_STEPS:
                    await asyncio.sleep(backoff)
                    backoff *= RETRY_FACTOR
        raise BackendError(last)

    async def _post(self, body: bytes) -> dict:
        backend = self.config.backend
        url = backend.url
        address = urllib.parse.urlsplit(url).netloc
        headers = {"Content-Type": "application/json", "Accept": "application/json", **backend.credentials.headers()}
        try:
            async with self._client().post(
                url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_SECONDS)
            ) as resp:
                status = resp.status
                data = await resp.read()
        except (aiohttp.ServerDisconnectedError, ConnectionResetError) as exc:
            raise _Retry(f'Post "{url}": {describe_exception(exc, address)}') from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ssl.SSLError) as exc:
            raise BackendError(f'Post "{url}": {describe_exception(exc, address)}') from None
        if status == 429 or status >= 500:
            raise _Retry(f"Error contacting webhook: {status}")
        if status < 200 or status >= 300:
            raise BackendError(f"Error contacting webhook: {status}")
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BackendError(f"the backend's answer is not JSON: {exc}") from None
        result = doc.get("status") if isinstance(doc, dict) else None
        if not isinstance(result, dict):
            raise BackendError("the backend's answer has no status")
        return result

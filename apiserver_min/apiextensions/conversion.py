"""Converting custom resources between versions with a conversion webhook.

A definition with ``spec.conversion.strategy: Webhook`` has its objects converted by
an HTTPS endpoint it names: the server POSTs a ``ConversionReview`` (request ``uid``,
``desiredAPIVersion``, the ``objects``) and takes back ``convertedObjects``, which it
checks before using (as many as sent, in the desired version, the same kind, the
metadata unchanged but for labels and annotations). Objects already in the desired
version are not sent; a batch (a list) goes in one review.

Errors read as upstream's: ``conversion webhook for <group>/<version>, Kind=<kind>
failed: <cause>``; the server answers them as internal errors.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import urllib.parse
import uuid
from typing import Any

import aiohttp

from ..api import names
from ..api import status as st
from ..api import validation as v
from ..webhookclient.errors import describe_exception, go_duration
from ..webhookclient.lookup import ClusterLookup, ResolveError
from .definition import CONVERSION_REVIEW_VERSIONS

DEFAULT_TIMEOUT = 30.0
MAX_RESPONSE_BYTES = 3 * 1024 * 1024
REVIEW_API_VERSIONS = {ver: f"{names.APIEXTENSIONS_GROUP}/{ver}" for ver in CONVERSION_REVIEW_VERSIONS}


class ConversionError(Exception):
    """A conversion that did not give usable objects; the text is the whole message."""

    def api_error(self) -> st.ApiError:
        return st.ApiError(500, "InternalError", str(self), details={"causes": [{"message": str(self)}]})


def _gvk(api_version: str, kind: str) -> str:
    return f"{api_version}, Kind={kind}"


def _review_version(webhook: dict) -> str:
    """The first of the webhook's ConversionReview versions this server sends."""
    for ver in webhook.get("conversionReviewVersions") or ():
        if ver in REVIEW_API_VERSIONS:
            return ver
    return CONVERSION_REVIEW_VERSIONS[0]


def _address(client_config: dict, timeout: float) -> str:
    url = client_config.get("url")
    if not url:
        svc = client_config.get("service") or {}
        path = svc.get("path") or ""
        url = f"https://{svc.get('name')}.{svc.get('namespace')}.svc:{svc.get('port') or 443}{path}"
    return f"{url}{'&' if '?' in url else '?'}timeout={go_duration(timeout)}"


def _dialed(address: str) -> str:
    """host:port of a URL, as a dial error names it."""
    u = urllib.parse.urlsplit(address)
    return f"{u.hostname}:{u.port or 443}"


def _ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    if not ca_bundle:
        return ssl.create_default_context()
    return ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode("latin-1"))


def _restore_metadata(original: dict, converted: dict) -> dict:
    """The converted object's metadata: the original's, with the labels and annotations
    the webhook gave (the only metadata a webhook may change)."""
    got = converted.get("metadata")
    if got is not None and not isinstance(got, dict):
        raise ValueError("invalid metadata: must be an object")
    got = got or {}
    md = copy.deepcopy(original.get("metadata") or {})
    for field in ("labels", "annotations"):
        value = got.get(field)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(x, str) for x in (*value.keys(), *value.values()))
        ):
            raise ValueError(f"invalid metadata.{field}: must be a map of strings")
        if value:
            md[field] = value
        else:
            md.pop(field, None)
    errs = v.validate_labels(md.get("labels") or {}, "metadata.labels")
    errs += v.validate_annotations(md.get("annotations") or {}, "metadata.annotations")
    if errs:
        raise ValueError("; ".join(str(e) for e in errs))
    converted["metadata"] = md
    return converted


class WebhookConverter:
    """The conversion webhook of one definition (``spec.conversion.webhook``)."""

    def __init__(self, group: str, webhook: dict, timeout: float = DEFAULT_TIMEOUT):
        self.group = group
        self.client_config: dict = webhook.get("clientConfig") or {}
        self.review_version = _review_version(webhook)
        self.timeout = timeout
        self.lookup: ClusterLookup | None = None  # resolves a service reference (set by the server)
        self._ssl: ssl.SSLContext | None = None

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = _ssl_context(self.client_config.get("caBundle"))
        return self._ssl

    async def convert(self, objs: list[dict], desired_version: str, batch_gvk: str = "") -> list[dict]:
        """``objs`` in ``desired_version`` (new objects; the ones already in it as they are).
        ``batch_gvk``: how errors name what was converted (default: the first object)."""
        desired = f"{self.group}/{desired_version}"
        todo = [i for i, o in enumerate(objs) if o.get("apiVersion") != desired]
        if not todo:
            return objs
        first = objs[todo[0]]
        what = batch_gvk or _gvk(str(first.get("apiVersion", "")), str(first.get("kind", "")))
        try:
            converted = await self._call([objs[i] for i in todo], desired)
        except ConversionError as exc:
            raise ConversionError(f"conversion webhook for {what} failed: {exc}") from None
        if len(converted) != len(todo):
            raise ConversionError(
                f"conversion webhook for {what} returned {len(converted)} objects, expected {len(todo)}"
            )
        out = list(objs)
        for n, (i, new) in enumerate(zip(todo, converted, strict=True)):
            original = objs[i]
            prefix = f"conversion webhook for {what} returned invalid converted object at index {n}"
            if not isinstance(new, dict):
                raise ConversionError(f"{prefix}: must be an object")
            if new.get("apiVersion") != desired:
                raise ConversionError(
                    f"{prefix}: invalid groupVersion (expected {desired}, received {new.get('apiVersion', '')})"
                )
            if new.get("kind") != original.get("kind"):
                raise ConversionError(
                    f"{prefix}: invalid kind (expected {original.get('kind')}, received {new.get('kind', '')})"
                )
            got = new.get("metadata")
            got_md: dict = got if isinstance(got, dict) else {}
            want_md = original.get("metadata") or {}
            for field, word in (("name", "name"), ("namespace", "namespace"), ("uid", "UID")):
                if want_md.get(field, "") != got_md.get(field, ""):
                    raise ConversionError(
                        f"{prefix}: must have the same {word}: {want_md.get(field, '')} != {got_md.get(field, '')}"
                    )
            try:
                out[i] = _restore_metadata(original, new)
            except ValueError as exc:
                raise ConversionError(
                    f"conversion webhook for {what} returned invalid metadata in object at index {n}: {exc}"
                ) from None
        return out

    async def _call(self, objs: list[dict], desired: str) -> list[Any]:
        uid = str(uuid.uuid4())
        review_api_version = REVIEW_API_VERSIONS[self.review_version]
        review = {
            "kind": "ConversionReview",
            "apiVersion": review_api_version,
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objs},
        }
        address = _address(self.client_config, self.timeout)
        target, dialed = address, _dialed(address)
        headers = {"Accept": "application/json", "User-Agent": f"{names.APISERVER_NAME}/conversion"}
        server_name: str | None = None
        svc = self.client_config.get("service")
        if isinstance(svc, dict) and self.lookup is not None:
            # Called at a ready endpoint of the service, verified as the service's DNS name.
            given = svc.get("port")
            port = given if isinstance(given, int) else 443
            u = urllib.parse.urlsplit(address)
            try:
                ip, dial_port = self.lookup.resolve_service(str(svc.get("namespace")), str(svc.get("name")), port)
            except ResolveError as exc:
                raise ConversionError(f'Post "{address}": {exc}') from None
            host = f"[{ip}]" if ":" in ip else ip
            dialed = f"{host}:{dial_port}"
            target = urllib.parse.urlunsplit(("https", dialed, u.path, u.query, ""))
            server_name = u.hostname
            headers["Host"] = u.netloc
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session:
                async with session.post(
                    target, json=review, ssl=self._context(), headers=headers, server_hostname=server_name
                ) as resp:
                    data = await resp.content.read(MAX_RESPONSE_BYTES + 1)
                    if resp.status < 200 or resp.status > 299:
                        raise ConversionError(
                            f"the server responded with the status code {resp.status} but did not return more "
                            "information"
                        )
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ConversionError(f'Post "{address}": {describe_exception(exc, dialed)}') from None
        if len(data) > MAX_RESPONSE_BYTES:
            raise ConversionError("the response is too large")
        try:
            answer = json.loads(data) if data else None
        except ValueError as exc:
            raise ConversionError(f"invalid character in the response: {exc}") from None
        if not isinstance(answer, dict):
            raise ConversionError("the response is not a ConversionReview")
        want = _gvk(review_api_version, "ConversionReview")
        got = _gvk(str(answer.get("apiVersion", "")), str(answer.get("kind", "")))
        if got != want:
            raise ConversionError(f"expected webhook response of {want}, got {got}")
        response = answer.get("response")
        if not isinstance(response, dict):
            raise ConversionError("no response provided")
        if response.get("uid") != uid:
            raise ConversionError(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
        result = response.get("result") or {}
        if not isinstance(result, dict) or result.get("status") != "Success":
            message = result.get("message") if isinstance(result, dict) else None
            if message:
                raise ConversionError(str(message))
            status = result.get("status", "") if isinstance(result, dict) else ""
            raise ConversionError(f"response.result.status was '{status}', not 'Success'")
        converted = response.get("convertedObjects")
        return converted if isinstance(converted, list) else []

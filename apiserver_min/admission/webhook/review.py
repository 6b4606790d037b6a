"""The AdmissionReview a webhook receives, and the checks of the one it answers
(``admission.orch.io/v1``, or ``v1beta1`` for webhooks that list only that)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import orjson

from ...api import names
from .. import equivalence
from ..chain import Attributes
from ..equivalence import Equivalent

V1 = f"{names.ADMISSION_GROUP}/v1"
V1BETA1 = f"{names.ADMISSION_GROUP}/v1beta1"
KIND = "AdmissionReview"
KNOWN_VERSIONS = ("v1", "v1beta1")

_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


class InvalidResponse(Exception):
    """The webhook answered something this server cannot use."""


def review_version(hook: dict) -> str | None:
    """The first version of ``admissionReviewVersions`` this server speaks."""
    for v in hook.get("admissionReviewVersions") or []:
        if v in KNOWN_VERSIONS:
            return f"{names.ADMISSION_GROUP}/{v}"
    return None


def _options(attrs: Attributes) -> dict | None:
    kind = _OPTIONS_KIND.get(attrs.operation)
    if kind is None:
        return None
    opts: dict[str, Any] = {"kind": kind, "apiVersion": f"{names.META_GROUP}/v1"}
    if attrs.dry_run:
        opts["dryRun"] = ["All"]
    for key, value in attrs.options.items():
        if value is not None:
            opts[key] = value
    return opts


def build_request(attrs: Attributes, target: Equivalent | None = None, obj: Any = None, old: Any = None) -> dict:
    """The ``request`` of the review (without its ``uid``, given per call). With TARGET
    (an equivalent resource a rule named): ``kind`` and ``resource`` are TARGET's and
    ``obj``/``old`` the objects converted to it; ``requestKind`` and
    ``requestResource`` stay the request's own."""
    k = attrs.kind
    request_kind = equivalence.request_kind(attrs)
    request_resource = {"group": k.group, "version": k.version, "resource": k.resource}
    if target is None:
        kind, resource, obj, old = request_kind, request_resource, attrs.obj, attrs.old
    else:
        kind, resource = equivalence.kind_as(attrs, target), target.gvr()
    user = attrs.user
    user_info: dict[str, Any] = {"username": user.name}
    if user.uid:
        user_info["uid"] = user.uid
    if user.groups:
        user_info["groups"] = list(user.groups)
    if user.extra:
        user_info["extra"] = {key: list(v) for key, v in user.extra.items()}
    request: dict[str, Any] = {
        "kind": kind,
        "resource": resource,
        "requestKind": request_kind,
        "requestResource": request_resource,
        "operation": attrs.operation,
        "userInfo": user_info,
        "object": obj,
        "oldObject": old,
        "dryRun": attrs.dry_run,
    }
    if attrs.subresource:
        request["subResource"] = request["requestSubResource"] = attrs.subresource
    name = attrs.name or (((attrs.obj or {}).get("metadata") or {}).get("name") if isinstance(attrs.obj, dict) else "")
    if name:
        request["name"] = name
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    options = _options(attrs)
    if options is not None:
        request["options"] = options
    return request


def review_body(api_version: str, request: dict, uid: str) -> dict:
    return {"apiVersion": api_version, "kind": KIND, "request": {"uid": uid, **request}}


@dataclasses.dataclass
class Answer:
    allowed: bool
    status: dict | None
    patch: list | None
    warnings: list[str]
    audit_annotations: dict[str, str]


def read_answer(doc: Any, api_version: str, uid: str, mutating: bool) -> Answer:
    """Check and read the webhook's AdmissionReview (InvalidResponse with upstream's
    wording when it cannot be used)."""
    if not isinstance(doc, dict):
        raise InvalidResponse("the response is not an AdmissionReview object")
    if api_version == V1:
        got = f"{doc.get('apiVersion') or ''}, Kind={doc.get('kind') or ''}"
        if doc.get("apiVersion") != V1 or doc.get("kind") != KIND:
            raise InvalidResponse(f"expected webhook response of {V1}, Kind={KIND}, got {got}")
    response = doc.get("response")
    if not isinstance(response, dict):
        raise InvalidResponse("webhook response was absent")
    if api_version == V1 and response.get("uid") != uid:
        raise InvalidResponse(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    allowed = response.get("allowed")
    if not isinstance(allowed, bool):
        raise InvalidResponse("response.allowed must be a boolean")
    patch_type = response.get("patchType") or ""
    raw_patch = response.get("patch") or ""
    if api_version == V1:
        if raw_patch and not patch_type:
            raise InvalidResponse("webhook returned response.patch but not response.patchType")
        if patch_type and not raw_patch:
            raise InvalidResponse("webhook returned response.patchType but not response.patch")
    if patch_type and patch_type != "JSONPatch":
        raise InvalidResponse(f'webhook returned invalid response.patchType of "{patch_type}"')
    patch = None
    if raw_patch:
        if not mutating:
            raise InvalidResponse("validating webhook may not return response.patch")
        try:
            patch = orjson.loads(base64.b64decode(str(raw_patch), validate=True))
        except (ValueError, orjson.JSONDecodeError) as exc:
            raise InvalidResponse(f"response.patch is not a base64-encoded JSON patch: {exc}") from None
        if not isinstance(patch, list):
            raise InvalidResponse("response.patch is not a JSON patch (a list of operations)")
    status = response.get("status")
    warnings = response.get("warnings") or []
    annotations = response.get("auditAnnotations") or {}
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise InvalidResponse("response.warnings must be a list of strings")
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise InvalidResponse("response.auditAnnotations must map strings to strings")
    return Answer(allowed, status if isinstance(status, dict) else None, patch, warnings, annotations)

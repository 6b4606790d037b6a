"""Audit events: one per stage of a recorded request, built from what the server
knows of it. Secret and ConfigMap contents and the tokens of token reviews and token
requests never reach an event, whatever level the policy asks for."""

from __future__ import annotations

import datetime as _dt
import os
import re
from typing import Any

import orjson

from ..api import names
from ..api.user import UserInfo
from .policy import Decision, level_at_least

# A client's Audit-ID is kept when it is short and made of safe characters.
_AUDIT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

# Resources whose objects' contents never appear in an event: (group, resource) -> keys dropped.
_REDACTED_KEYS = {
    ("", "secrets"): ("data", "stringData"),
    ("", "configmaps"): ("data", "binaryData"),
}
_REDACTED_TOKEN_RESOURCES = {
    (names.AUTHENTICATION_GROUP, "tokenreviews", ""): ("spec", "token"),
    ("", "serviceaccounts", "token"): ("status", "token"),
}
REDACTED = "<redacted>"


def now_stamp() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# New IDs are made this many at a time (one read of the system's random source) and
# handed out one per request.
_ID_BATCH = 256
_ids: list[str] = []
os.register_at_fork(after_in_child=_ids.clear)  # a forked worker never repeats its parent's


def new_audit_id() -> str:
    """A random (version 4) UUID in its text form, as ``str(uuid.uuid4())`` gives, at a
    small part of its cost (every request gets one)."""
    try:
        return _ids.pop()
    except IndexError:
        pass
    raw = bytearray(os.urandom(16 * _ID_BATCH))
    raw[6::16] = bytes((b & 0x0F) | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes((b & 0x3F) | 0x80 for b in raw[8::16])  # the RFC 4122 variant
    h = raw.hex()
    _ids.extend(
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-{h[i + 12 : i + 16]}-{h[i + 16 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, len(h), 32)
    )
    return _ids.pop()


def audit_id(header: str | None) -> str:
    """The client's Audit-ID when valid, otherwise a new one."""
    if header and _AUDIT_ID_RE.fullmatch(header):
        return header
    return new_audit_id()


def user_info(user: UserInfo | None) -> dict[str, Any]:
    if user is None:
        return {"username": names.USER_ANONYMOUS, "groups": [names.GROUP_UNAUTHENTICATED]}
    out: dict[str, Any] = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra.items()}
    return out


def _redact_one(obj: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(obj, dict) or not any(k in obj for k in keys):
        return obj
    return {
        k: ({kk: REDACTED for kk in v} if isinstance(v, dict) else REDACTED) if k in keys else v for k, v in obj.items()
    }


def redact(obj: Any, group: str, resource: str, subresource: str) -> Any:
    """``obj`` (a request or response body) without the contents no event may hold."""
    if not isinstance(obj, dict):
        return obj
    keys = _REDACTED_KEYS.get((group, resource)) if not subresource else None
    if keys is None and obj.get("kind") in ("Secret", "SecretList", "ConfigMap", "ConfigMapList"):
        # Also when the body came by another route (a watch event, a list across a sub-resource).
        keys = ("data", "stringData") if obj["kind"].startswith("Secret") else ("data", "binaryData")
    if keys is not None:
        if isinstance(obj.get("items"), list):
            return {**obj, "items": [_redact_one(i, keys) for i in obj["items"]]}
        return _redact_one(obj, keys)
    where = _REDACTED_TOKEN_RESOURCES.get((group, resource, subresource))
    if where is not None:
        part, field = where
        inner = obj.get(part)
        if isinstance(inner, dict) and field in inner:
            return {**obj, part: {**inner, field: REDACTED}}
    return obj


def _may_need_redaction(group: str, resource: str) -> bool:
    return (group, resource) in _REDACTED_KEYS or any(
        (g, r) == (group, resource) for g, r, _ in _REDACTED_TOKEN_RESOURCES
    )


def _without_managed_fields(obj: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if isinstance(obj.get("items"), list):
        obj = {**obj, "items": [_without_managed_fields(i) for i in obj["items"]]}
    return obj


class RequestAudit:
    """The audit record of one request: its fixed fields, and the events of its stages."""

    __slots__ = (
        "decision",
        "id",
        "base",
        "annotations",
        "group",
        "resource",
        "subresource",
        "request_object",
        "response_object",
        "response_status",
        "started_sent",
    )

    def __init__(
        self,
        decision: Decision,
        audit_id_: str,
        *,
        verb: str,
        request_uri: str,
        user: UserInfo | None,
        source_ips: list[str],
        user_agent: str | None,
        object_ref: dict[str, str] | None,
    ):
        self.decision = decision
        self.id = audit_id_
        self.base: dict[str, Any] = {
            "kind": "Event",
            "apiVersion": names.AUDIT_API_VERSION,
            "level": decision.level,
            "auditID": audit_id_,
            "requestURI": request_uri,
            "verb": verb,
            "user": user_info(user),
            "sourceIPs": source_ips,
            "requestReceivedTimestamp": now_stamp(),
        }
        if user_agent:
            self.base["userAgent"] = user_agent
        if object_ref:
            self.base["objectRef"] = object_ref
        self.annotations: dict[str, str] = {}
        self.group = (object_ref or {}).get("apiGroup", "")
        self.resource = (object_ref or {}).get("resource", "")
        self.subresource = (object_ref or {}).get("subresource", "")
        self.request_object: Any = None
        self.response_object: Any = None
        self.response_status: dict[str, Any] | None = None
        self.started_sent = False

    def impersonated(self, real: UserInfo | None, as_user: UserInfo | None) -> None:
        """The request acts as ``as_user`` for ``real``: the event names both, as upstream."""
        self.base["user"] = user_info(real)
        self.base["impersonatedUser"] = user_info(as_user)

    def set_request_object(self, obj: Any) -> None:
        if level_at_least(self.decision.level, "Request"):
            self.request_object = obj

    def set_response_object(self, obj: Any) -> None:
        if level_at_least(self.decision.level, "RequestResponse"):
            self.response_object = obj

    def wants(self, stage: str) -> bool:
        return stage not in self.decision.omit_stages

    def event(self, stage: str) -> dict[str, Any]:
        ev = dict(self.base)
        ev["stage"] = stage
        ev["stageTimestamp"] = now_stamp()
        if self.response_status is not None and stage != "RequestReceived":
            ev["responseStatus"] = self.response_status
        if self.annotations:
            ev["annotations"] = dict(self.annotations)
        if self.request_object is not None and stage != "RequestReceived":
            ev["requestObject"] = self._clean(self.request_object)
        if self.response_object is not None and stage == "ResponseComplete":
            ev["responseObject"] = self._clean(self.response_object)
        return ev

    def _clean(self, obj: Any) -> Any:
        if isinstance(obj, bytes):  # a JSON body as served: spliced in whole unless something must go
            if not self.decision.omit_managed_fields and not _may_need_redaction(self.group, self.resource):
                return orjson.Fragment(obj)
            obj = orjson.loads(obj)
        obj = redact(obj, self.group, self.resource, self.subresource)
        if self.decision.omit_managed_fields:
            obj = _without_managed_fields(obj)
        return obj


def response_status(code: int, status: dict[str, Any] | None) -> dict[str, Any]:
    """The event's responseStatus: the code, and for failures the Status' message and reason."""
    out: dict[str, Any] = {"metadata": {}, "code": code}
    if status is not None and code >= 300:
        if status.get("status"):
            out["status"] = status["status"]
        if status.get("message"):
            out["message"] = status["message"]
        if status.get("reason"):
            out["reason"] = status["reason"]
    return out

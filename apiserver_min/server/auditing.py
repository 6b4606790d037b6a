"""The HTTP side of audit logging: the policy's facts and the event's fields taken
from an aiohttp request, the bodies at the Request and RequestResponse levels, and the
ResponseStarted stage of long-running requests when their headers go out."""

from __future__ import annotations

import contextvars
import json
from typing import Any

from aiohttp import web

from ..api import codec, names
from ..api.user import UserInfo
from ..audit.auditor import Auditor
from ..audit.event import RequestAudit, audit_id, response_status
from ..audit.policy import RequestFacts, level_at_least
from .routing import RequestInfo

# Sub-resources served as streams: their ResponseStarted stage is recorded, as a watch's.
_STREAMING_SUBRESOURCES = frozenset({"log", "exec", "attach", "portforward", "proxy"})

# Where the handlers leave the request body they read (aiohttp keeps no copy of a streamed body).
REQUEST_BODY_KEY = "orch.audit.request_body"
# The decoded request object (any wire format), and the response object (or its JSON bytes).
REQUEST_OBJECT_KEY = "orch.audit.request_object"
RESPONSE_OBJECT_KEY = "orch.audit.response_object"
# The request's audit ID: the client's Audit-ID header when valid, else a new one. Every
# response carries it, audited or not and auditing on or off, as upstream's outermost
# filter echoes it.
AUDIT_ID_KEY = "orch.audit.id"

# The audit record of the request being served, for the response-prepare hook.
CURRENT: contextvars.ContextVar[tuple[Auditor, RequestAudit, bool] | None] = contextvars.ContextVar(
    "orch_audit_current", default=None
)


def source_ips(request: web.Request) -> list[str]:
    ips: list[str] = []
    forwarded = request.headers.get("X-Forwarded-For")
    if forwarded:
        ips += [p.strip() for p in forwarded.split(",") if p.strip()]
    real = request.headers.get("X-Real-Ip")
    if real and real.strip() not in ips:
        ips.append(real.strip())
    remote = request.remote
    if remote and remote not in ips:
        ips.append(remote)
    return ips


def long_running(info: RequestInfo, request: web.Request) -> bool:
    if info.verb == "watch" or info.subresource in _STREAMING_SUBRESOURCES:
        return True
    return request.query.get("watch", "").lower() in ("1", "true")


def begin(auditor: Auditor, request: web.Request, info: RequestInfo, user: UserInfo | None) -> RequestAudit | None:
    """The request's audit record when the policy records it (its RequestReceived stage
    is emitted by the caller once impersonation is known)."""
    facts = RequestFacts(
        user=user.name if user is not None else names.USER_ANONYMOUS,
        groups=user.groups if user is not None else (names.GROUP_UNAUTHENTICATED,),
        verb=info.verb,
        is_resource=info.is_resource,
        path=request.path,
        group=info.group,
        resource=info.resource,
        subresource=info.subresource,
        namespace=info.namespace,
        name=info.name,
    )
    decision = auditor.decide(facts)
    if decision.level == "None":
        return None
    ref: dict[str, str] | None = None
    if info.is_resource:
        ref = {"resource": info.resource}
        if info.namespace:
            ref["namespace"] = info.namespace
        if info.name:
            ref["name"] = info.name
        if info.group:
            ref["apiGroup"] = info.group
        if info.version:
            ref["apiVersion"] = info.version
        if info.subresource:
            ref["subresource"] = info.subresource
    record = RequestAudit(
        decision,
        request.get(AUDIT_ID_KEY) or audit_id(request.headers.get(names.AUDIT_ID_HEADER)),
        verb=info.verb,
        request_uri=request.path_qs,
        user=user,
        source_ips=source_ips(request),
        user_agent=request.headers.get("User-Agent"),
        object_ref=ref,
    )
    CURRENT.set((auditor, record, long_running(info, request)))
    return record


def _decode(body: bytes | bytearray, content_type: str) -> Any:
    if not body:
        return None
    try:
        if "json" in content_type:
            return json.loads(body)
        if "yaml" in content_type:
            return codec.load_yaml(body)
    except ValueError:
        return None
    return None  # protobuf and other encodings are not recorded


def capture_bodies(record: RequestAudit, request: web.Request, resp: web.StreamResponse | None) -> None:
    """The request body (Request level and above) and the response body (RequestResponse)."""
    level = record.decision.level
    if level_at_least(level, "Request"):
        obj = request.get(REQUEST_OBJECT_KEY)
        body = request.get(REQUEST_BODY_KEY)
        one_line = isinstance(body, bytes) and b"\n" not in body and b"\r" not in body
        if obj is not None and one_line and "json" in request.content_type:
            obj = body  # decoded fine: recorded as the client sent it (see RequestAudit)
        elif obj is None and isinstance(body, bytes):
            obj = _decode(body, request.content_type)  # a patch, say
        record.set_request_object(obj)
    if level_at_least(level, "RequestResponse"):
        obj = request.get(RESPONSE_OBJECT_KEY)  # JSON bytes are kept as they are (see RequestAudit)
        if obj is None and isinstance(resp, web.Response) and isinstance(resp.body, (bytes, bytearray)):
            obj = _decode(resp.body, resp.content_type)  # an error's Status, a review's answer
        record.set_response_object(obj)


def records_response() -> bool:
    """Whether the request being served is audited at a level that records its response."""
    current = CURRENT.get()
    return current is not None and level_at_least(current[1].decision.level, "RequestResponse")


def complete(record: RequestAudit, code: int, status: dict[str, Any] | None) -> None:
    record.response_status = response_status(code, status)


def start(request: web.Request) -> None:
    """The request's audit ID, taken before anything else (every response names it)."""
    request[AUDIT_ID_KEY] = audit_id(request.headers.get(names.AUDIT_ID_HEADER))


def response_starting(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """As a response's headers go out (httpserver.ApiRequest): the Audit-ID header (one
    already set, by a proxied backend say, is kept), and a long-running request's
    ResponseStarted event."""
    value = request.get(AUDIT_ID_KEY)
    if value is not None and names.AUDIT_ID_HEADER not in response.headers:
        response.headers[names.AUDIT_ID_HEADER] = value
    current = CURRENT.get()
    if current is None:
        return
    auditor, record, streaming = current
    if streaming and not record.started_sent:
        record.started_sent = True
        record.response_status = response_status(response.status, None)
        auditor.emit(record, "ResponseStarted")

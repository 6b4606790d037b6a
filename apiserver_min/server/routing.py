"""Request information from the URL: what is asked for, and with which verb.

The same parse serves routing, authorization attributes and metrics labels,
so they can never disagree about what a request was.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import unquote

from ..api import status as st
from ..api.kinds import KindInfo, Registry


@dataclasses.dataclass
class RequestInfo:
    is_resource: bool
    path: str
    verb: str  # get list watch create update patch delete deletecollection (or http verb lowercased)
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    kind: KindInfo | None = None
    parts: tuple[str, ...] = ()


_HTTP_TO_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "GET": "get"}


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "")


def parse(method: str, path: str, query, registry: Registry, enabled) -> RequestInfo:
    segs = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
    info = RequestInfo(False, path, method.lower())
    if not segs or segs[0] not in ("api", "apis"):
        return info
    if segs[0] == "api":
        if len(segs) < 3:
            return info
        group, version, rest = "", segs[1], segs[2:]
    else:
        if len(segs) < 4:
            return info
        group, version, rest = segs[1], segs[2], segs[3:]
    info.group, info.version = group, version
    watch_path = False
    if rest and rest[0] == "watch":  # the deprecated /watch/ path form
        watch_path = True
        rest = rest[1:]
    if not rest:
        return info
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) >= 2:
        # /namespaces/<name>[/status|/finalize]: the namespace object itself.
        namespace = ""
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    sub = "/".join(rest[2:]) if len(rest) >= 3 else ""
    kind = registry.by_resource(group, version, resource)
    info.is_resource = True
    info.resource, info.name, info.subresource, info.namespace = resource, name, sub, namespace
    info.parts = tuple(rest)
    if kind is None or not enabled(group, version, resource):
        info.kind = None
    else:
        info.kind = kind
        if rest[0] == "namespaces" and kind.resource == "namespaces" and len(rest) >= 2:
            info.namespace = ""
    m = method.upper()
    if m in ("GET", "HEAD"):
        if watch_path or ("watch" in query and _truthy(query.get("watch"))):
            info.verb = "watch"
        elif name:
            info.verb = "get"
        else:
            info.verb = "list"
    elif m == "DELETE" and not name:
        info.verb = "deletecollection"
    elif m == "POST" and name and not sub:
        info.verb = "create"  # POST to a named resource is rejected later with 405
    else:
        info.verb = _HTTP_TO_VERB.get(m, m.lower())
    return info


def require_kind(info: RequestInfo) -> KindInfo:
    if info.kind is None:
        gv = f"{info.group}/{info.version}" if info.group else info.version
        raise st.ApiError(404, "NotFound", f"the server could not find the requested resource "
                                           f"({info.resource} in {gv})",
                          details={"causes": [{"reason": "UnexpectedServerResponse",
                                               "message": "404 page not found"}]})
    return info.kind

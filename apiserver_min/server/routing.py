"""Request information from the URL: what is asked for, and with which verb.

The same parse serves routing, authorization attributes and metrics labels,
so they can never disagree about what a request was.

Group aliases (``names.GROUP_ALIASES``): a path naming an upstream group that
kubectl hard-codes (``/apis/rbac.authorization.k8s.io/v1/...``) parses as the orch
group's kind, so authorization, admission and storage see only the orch group; the
request keeps a :class:`GroupAlias`, which only the edges consult (the body decoder
accepts the upstream ``apiVersion``, the response writers answer in it). On such a
path the upstream namespace spellings (``kube-node-lease``) name ours.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import unquote

from ..api import codec, names
from ..api import status as st
from ..api.kinds import KindInfo, Registry
from ..apiextensions import values
from ..apiextensions.conversion import ConversionError

# Request key (aiohttp request mapping) under which the server puts the GroupAlias of a
# request on an alias group (None for any other), for the body decoder and the response writers.
GROUP_ALIAS_KEY = "orch.group_alias"


@dataclasses.dataclass(frozen=True, slots=True)
class GroupAlias:
    """A request on an alias group (``names.GROUP_ALIASES``): the group the client
    named and the orch group that serves it, in one version. Everything between
    the edges sees only the orch group; the body decoder and the response writers
    use this to accept and answer in the client's spelling."""

    requested: str  # e.g. rbac.authorization.k8s.io
    served: str  # e.g. rbac.orch.io
    version: str

    @property
    def requested_api_version(self) -> str:
        return f"{self.requested}/{self.version}"

    @property
    def served_api_version(self) -> str:
        return f"{self.served}/{self.version}"

    def to_served(self, obj: Any) -> Any:
        """A request body in the requested spelling, in ours (in place): its
        ``apiVersion``, and the group references that name the group itself (an RBAC
        binding's ``roleRef`` and ``subjects``, which kubectl's create rolebinding fills in)."""
        if not isinstance(obj, dict):
            return obj
        if obj.get("apiVersion") == self.requested_api_version:
            obj["apiVersion"] = self.served_api_version
        subjects = obj.get("subjects")
        for ref in [obj.get("roleRef"), *(subjects if isinstance(subjects, list) else ())]:
            if isinstance(ref, dict) and ref.get("apiGroup") == self.requested:
                ref["apiGroup"] = self.served
        return obj

    def to_requested(self, obj: Any) -> Any:
        """A response object in the client's spelling (in place): the object's
        ``apiVersion``, a list's items', a Table's embedded objects' and a Status's
        ``details.group``. Nested references (owner references, managed fields)
        keep what is stored."""
        if not isinstance(obj, dict):
            return obj
        served, requested = self.served_api_version, self.requested_api_version
        if obj.get("apiVersion") == served:
            obj["apiVersion"] = requested
        kind = obj.get("kind")
        nested = (
            obj.get("items")
            if kind != "Table"
            else [r.get("object") for r in obj.get("rows") or () if isinstance(r, dict)]
        )
        if isinstance(nested, list):
            for item in nested:
                if isinstance(item, dict) and item.get("apiVersion") == served:
                    item["apiVersion"] = requested
        if kind == "Status":
            details = obj.get("details")
            if isinstance(details, dict) and details.get("group") == self.served:
                details["group"] = self.requested
        return obj

    def json_bytes(self, raw: bytes) -> bytes:
        """JSON bytes of an object or list, re-encoded in the client's spelling."""
        return codec.dumps(self.to_requested(codec.load_json(raw)))

    async def convert(self, obj: Any) -> Any:
        """``obj`` (an object, a list or a Table) with what it holds in the requested
        version, before :meth:`to_requested`; only a custom resource with a conversion
        webhook has anything to do (the objects are converted in one call)."""
        return obj

    async def watch_frame_converted(self, frame: bytes) -> bytes:
        """:meth:`watch_frame`, the event's object converted first."""
        event = codec.load_json(frame)
        event["object"] = self.to_requested(await self.convert(event.get("object")))
        return codec.dumps(event) + b"\n"

    def watch_frame(self, frame: bytes) -> bytes:
        """One JSON watch event line (``{"type":..,"object":..}``) in the client's spelling."""
        event = codec.load_json(frame)
        self.to_requested(event.get("object"))
        return codec.dumps(event) + b"\n"


@dataclasses.dataclass(frozen=True, slots=True)
class StorageVersionAlias(GroupAlias):
    """How a custom resource is read, where the stored bytes are not the answer as they
    are: in a version other than the one its objects are stored in (``served_version``),
    answers are rewritten from the stored ``apiVersion`` to the requested one, as an
    alias group's are (``None`` conversion: only ``apiVersion`` differs), or, for a
    definition with a conversion webhook (``converter``), converted by it first
    (:meth:`convert`, which the handlers await before :meth:`to_requested`); with a schema that declares defaults (``schema``), every object read is
    defaulted, so objects stored before a default was declared read with it. A body
    stays in the requested version, which the strategy validates by that version's
    schema and stores in the storage version."""

    served_version: str = ""
    schema: Any = None
    object_kind: str = ""
    converter: Any = None  # apiextensions.conversion.WebhookConverter, None: only apiVersion differs

    @property
    def served_api_version(self) -> str:
        return f"{self.served}/{self.served_version}"

    def to_served(self, obj: Any) -> Any:
        return obj

    async def convert(self, obj: Any) -> Any:
        if self.converter is None or not isinstance(obj, dict):
            return obj
        kind = obj.get("kind")
        if kind == self.object_kind:
            (converted,) = await self._converted([obj], f"{self.served}/{self.served_version}, Kind={kind}")
            return converted
        if kind == "Table":
            rows = [r for r in obj.get("rows") or () if isinstance(r, dict) and isinstance(r.get("object"), dict)]
            objs = await self._converted([r["object"] for r in rows], "")
            for row, new in zip(rows, objs, strict=True):
                row["object"] = new
            return obj
        items = obj.get("items")
        if isinstance(items, list):
            batch = [i for i in items if isinstance(i, dict) and i.get("kind") == self.object_kind]
            new_items = iter(await self._converted(batch, f"{self.served}/{self.served_version}, Kind={kind}"))
            obj["items"] = [
                next(new_items) if isinstance(i, dict) and i.get("kind") == self.object_kind else i for i in items
            ]
        return obj

    async def _converted(self, objs: list[dict], what: str) -> list[dict]:
        try:
            return await self.converter.convert(objs, self.version, what)
        except ConversionError as exc:
            raise exc.api_error() from None

    def to_requested(self, obj: Any) -> Any:
        obj = GroupAlias.to_requested(self, obj)
        if self.schema is not None and isinstance(obj, dict):
            kind = obj.get("kind")
            if kind == self.object_kind:
                nested = [obj]
            elif kind == "Table":
                nested = [r.get("object") for r in obj.get("rows") or () if isinstance(r, dict)]
            else:
                nested = obj.get("items") if isinstance(obj.get("items"), list) else []
            for item in nested:
                if isinstance(item, dict) and item.get("kind") == self.object_kind:
                    values.apply_defaults(item, self.schema)
        return obj


def storage_version_alias(info: "RequestInfo") -> GroupAlias | None:
    """How a request on a custom resource reads its objects (None: as they are stored)."""
    k = info.kind
    if k is None or not k.custom or info.alias is not None:
        return None
    stored = k.custom_storage_version or k.version
    if stored == k.version and info.verb in ("create", "update"):
        # The answer is the object just written in this very version: pruned and
        # defaulted by its schema already, nothing to convert.
        return None
    schema = k.custom_schema if values.has_defaults(k.custom_schema) else None
    if stored == k.version and schema is None:
        return None
    return StorageVersionAlias(k.group, k.group, k.version, stored, schema, k.kind, k.custom_converter)


@dataclasses.dataclass(slots=True)
class RequestInfo:
    is_resource: bool
    path: str
    verb: str  # get list watch create update patch delete deletecollection (or http verb lowercased)
    group: str = ""  # the orch group, also when the client named an alias of it
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    kind: KindInfo | None = None
    parts: tuple[str, ...] = ()
    alias: GroupAlias | None = None  # set when the path named an alias group

    @property
    def alias_group(self) -> str:
        """The alias group the client named, or ""."""
        return self.alias.requested if self.alias is not None else ""

    @property
    def requested_group(self) -> str:
        """The group as the client spelled it."""
        return self.alias.requested if self.alias is not None else self.group


_HTTP_TO_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "GET": "get"}
_PROXY_VERBS = {**_HTTP_TO_VERB, "HEAD": "get"}


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "")


def command_alias(info: RequestInfo, command: str | None) -> None:
    """Answer in the upstream spelling for a kubectl command that checks the group of
    what it reads (``names.KUBECTL_COMMAND_ALIASES``, from the ``Kubectl-Command``
    header): the request on the orch group gets the alias it would have had on the
    upstream path. Nothing else about the request changes."""
    if command is None or info.alias is not None or info.kind is None:
        return
    upstream = names.KUBECTL_COMMAND_ALIASES.get(command, {}).get(info.group)
    if upstream is not None:
        info.alias = GroupAlias(upstream, info.group, info.version)


def parse(method: str, path: str, query, registry: Registry, enabled) -> RequestInfo:
    """What a request asks for. ``enabled(group, version, resource)`` says whether a
    built-in kind is served (--runtime-config); a custom kind is served while its
    definition lasts."""
    trimmed = path.strip("/")
    segs = trimmed.split("/") if trimmed else []
    if "%" in trimmed:
        segs = [unquote(s) for s in segs]
    if not segs or segs[0] not in ("api", "apis"):
        return RequestInfo(False, path, method.lower())
    alias: GroupAlias | None = None
    if segs[0] == "api":
        if len(segs) < 3:
            return RequestInfo(False, path, method.lower())
        group, version, rest = "", segs[1], segs[2:]
    else:
        if len(segs) < 4:
            return RequestInfo(False, path, method.lower())
        group, version, rest = segs[1], segs[2], segs[3:]
        served = names.GROUP_ALIASES.get(group)
        if served is not None:
            # An upstream spelling kubectl hard-codes: served as the orch group from here on.
            alias = GroupAlias(group, served, version)
            group = served
    watch_path = False
    if rest and rest[0] == "watch":  # the deprecated /watch/ path form
        watch_path = True
        rest = rest[1:]
    if not rest:
        return RequestInfo(False, path, method.lower(), group, version, alias=alias)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    # (/namespaces/<name>[/status|/finalize] is the namespace object itself.)
    if alias is not None and namespace in names.NAMESPACE_ALIASES:
        namespace = names.NAMESPACE_ALIASES[namespace]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    sub = "/".join(rest[2:]) if len(rest) >= 3 else ""
    proxy = len(rest) >= 3 and rest[2] == "proxy"
    if proxy:
        sub = "proxy"  # what follows is the path on the target, not part of the sub-resource
    kind = registry.by_resource(group, version, resource)
    if kind is not None and not (kind.custom or enabled(group, version, resource)):
        kind = None
    if kind is not None and rest[0] == "namespaces" and kind.resource == "namespaces" and len(rest) >= 2:
        namespace = ""  # /namespaces/<ns>/namespaces/<name>: a namespace is not in one
    m = method.upper()
    if proxy:
        # One verb per HTTP method, as upstream's request info has it (no list or watch).
        verb = _PROXY_VERBS.get(m, m.lower())
    elif m in ("GET", "HEAD"):
        if watch_path or ("watch" in query and _truthy(query.get("watch"))):
            verb = "watch"
        elif name:
            verb = "get"
        else:
            verb = "list"
    elif m == "DELETE" and not name:
        verb = "deletecollection"
    elif m == "POST" and name and not sub:
        verb = "create"  # POST to a named resource is rejected later with 405
    else:
        verb = _HTTP_TO_VERB.get(m, m.lower())
    return RequestInfo(True, path, verb, group, version, resource, sub, namespace, name, kind, tuple(rest), alias)


def require_kind(info: RequestInfo) -> KindInfo:
    if info.kind is None:
        group = info.requested_group
        gv = f"{group}/{info.version}" if group else info.version
        raise st.ApiError(
            404,
            "NotFound",
            f"the server could not find the requested resource ({info.resource} in {gv})",
            details={"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]},
        )
    return info.kind

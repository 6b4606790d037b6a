"""OpenAPI documents generated from the kind schema declarations.

Clients read these documents instead of carrying their own copy of every kind:

* ``kubectl explain`` reads ``components.schemas`` of one group-version
  document (``/openapi/v3/api/v1``) and finds the kind by its
  ``x-kubernetes-group-version-kind``;
* kubectl's default ``--validate=strict`` looks, per group version, for the
  kind's ``patch`` operation carrying a ``fieldValidation`` parameter; when it
  is there, field validation is left to the server (no client-side check);
* client-side ``kubectl apply`` computes a strategic merge patch from the
  schema's ``x-kubernetes-patch-strategy``/``x-kubernetes-patch-merge-key``
  when the kind's ``patch`` operation accepts that patch type.

Everything here is derived from ``apiserver_min.api.schema`` declarations
(``apiserver_min.api.schemas``) and the kind registry (``kinds.py``): one
component per declared struct, named as upstream names its definitions
(``io.k8s.api.core.v1.Pod`` -- the proto message names are wire facts and keep
their upstream spelling while group names follow the naming rule), and paths
for exactly the verbs and sub-resources each kind declares (create-only review
kinds get ``POST`` only).

The documents are generated once, at the first request for each form (they
depend only on the declarations and ``--runtime-config``); custom resources'
group versions are added and removed as their definitions come and go
(``set_custom_kinds``: a v3 document each, built from the definition's schema,
and their part of v2; built again when next asked for). All are served from
memory with an ``ETag`` (upstream: the upper-case hex SHA-512 of the body), ``Last-Modified``,
conditional ``304`` answers, and, for URLs carrying the ``hash`` of the current
document (as ``/openapi/v3`` hands them out), ``Cache-Control: public,
immutable`` with a one-year ``Expires``; a stale ``hash`` is redirected (301)
to the current one. ``/openapi/v2`` (Swagger 2.0) is served as JSON (the default)
and, for an Accept naming ``application/com.github.proto-openapi.spec.v2.v1.0+protobuf``
or the spelling client-go still sends, ``...spec.v2@v1.0+protobuf``, as gnostic's
``openapi.v2.Document`` message, converted once (when first asked for) from the
JSON document (``openapi_pb``). As upstream: the protobuf answer's Content-Type is always the
``...spec.v2.v1.0+protobuf`` spelling (``@`` is no token character, and Go's
``mime.ParseMediaType`` in client-go rejects it), both forms carry the JSON
document's ETag (``Vary: Accept`` tells them apart), both are gzipped on request,
and an Accept neither form satisfies gets ``406``.

Measured with kubectl v1.32: ``explain``, ``create -f``/``apply -f`` fetch
``/openapi/v3`` and the kinds' group-version documents only. For a kind whose
group-version document has no ``patch`` operation (the create-only review
kinds) kubectl does not leave field validation to the server: its v3 check
fails ("Path not found for GVK") and it falls back to its v2 check, which
downloads ``/openapi/v2`` asking for protobuf alone and then lists
``customresourcedefinitions`` in ``apiextensions.k8s.io/v1`` (hard-coded in
kubectl) to see whether the kind is a custom resource. The server answers that
list with the definitions it serves (none defines a review kind), and kubectl
then validates the review client-side against the protobuf document: unknown
fields fail in kubectl, ``--validate=warn`` skips the check with a warning.
``explain --output=plaintext-openapiv2`` reads the same document.
"""

from __future__ import annotations

import dataclasses
import email.utils
import gzip
import hashlib
import logging
import time
from typing import Any, Callable, Iterable

import orjson
from aiohttp import web

from ..api import names
from ..api import schema as S
from ..api.kinds import KindInfo, Registry, Subresource
from ..api.schemas import KIND_SCHEMAS, list_schema, schema_for
from . import openapi_pb
from .discovery import version_info

log = logging.getLogger(__name__)

__all__ = [
    "OpenAPI",
    "SchemaBuilder",
    "group_version_document",
    "swagger_document",
    "gv_path",
    "definition_name",
    "MEDIA_OPENAPI_V2_PROTOBUF",
    "MEDIA_OPENAPI_V2_PROTOBUF_OLD",
    "MEDIA_OPENAPI_V3_PROTOBUF",
]

# Media types of upstream's OpenAPI handlers (wire facts, not product names). Of the two v2
# protobuf spellings kube-openapi calls the ``@`` one deprecated, but client-go asks for it;
# the answer always names the other (a valid Content-Type).
MEDIA_OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
MEDIA_OPENAPI_V2_PROTOBUF_OLD = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
MEDIA_OPENAPI_V3_PROTOBUF = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"

_V2_MEDIA = (names.MEDIA_JSON, MEDIA_OPENAPI_V2_PROTOBUF, MEDIA_OPENAPI_V2_PROTOBUF_OLD)

V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"

_RESPONSE_TYPES = (names.MEDIA_JSON, names.MEDIA_YAML, names.MEDIA_PROTOBUF)
_WATCH_TYPES = (
    names.MEDIA_JSON,
    names.MEDIA_YAML,
    names.MEDIA_PROTOBUF,
    "application/json;stream=watch",
    f"{names.MEDIA_PROTOBUF};stream=watch",
)
_PATCH_TYPES = (
    names.MEDIA_APPLY_PATCH,
    names.MEDIA_JSON_PATCH,
    names.MEDIA_MERGE_PATCH,
    names.MEDIA_STRATEGIC_MERGE_PATCH,
)

_CUSTOM_PATCH_TYPES = (names.MEDIA_APPLY_PATCH, names.MEDIA_JSON_PATCH, names.MEDIA_MERGE_PATCH)

_PATCH_DEF = f"{S.META}.Patch"
_WATCH_EVENT = S.Struct(
    f"{S.META}.WatchEvent",
    [
        S.Field("type", S.String(), 1, required=True),
        S.Field("object", S.Opaque(), 2, required=True),
    ],
)


def gv_path(group: str, version: str) -> str:
    """The group version's OpenAPI v3 key: ``api/v1`` or ``apis/<group>/<version>``."""
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def definition_name(message: str) -> str:
    """Upstream's OpenAPI definition name of a proto message (``k8s.io.api.core.v1.Pod``
    -> ``io.k8s.api.core.v1.Pod``)."""
    if not message.startswith("k8s.io."):
        return message
    # The definitions' package is a Go module path with a dash, which proto names cannot carry.
    return "io.k8s." + message[len("k8s.io.") :].replace("apiextensions_apiserver.", "apiextensions-apiserver.", 1)


# --- descriptions ------------------------------------------------------------------------
# Our words, shown by ``kubectl explain``. A field's description is declared with the field
# (``Field.description`` in ``apiserver_min.api.schema`` and ``schemas/*``); the generic
# words below fill in, by bare JSON name, for the fields every kind shares and no one
# struct owns (apiVersion and kind travel as TypeMeta, spec/status/items are per kind).

_COMMON_FIELDS = {
    "apiVersion": "The versioned schema of this representation of the object. The server converts "
    "recognised schemas to the latest internal value and may reject unrecognised ones.",
    "kind": "The kind of REST resource this object represents, in CamelCase. Servers may infer it from "
    "the endpoint the client submits requests to; it cannot be updated.",
    "spec": "The desired behaviour of the object, as the user declares it.",
    "status": "The most recently observed state of the object, written by the system. Read-only.",
    "items": "The objects of the list.",
}

_SCALAR_DESCRIPTIONS = {
    f"{S.META}.Time": "A timestamp in RFC 3339 form with whole seconds, always in UTC.",
    f"{S.META}.MicroTime": "A timestamp in RFC 3339 form with microseconds, always in UTC.",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "A fixed-point number with an optional suffix: binary (Ki, Mi, Gi, Ti, Pi, Ei), decimal SI "
    "(m, k, M, G, T, P, E) or a decimal exponent (e3). Serialised in canonical form.",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "A value that is either a 32-bit integer or a string (a name or a percentage).",
    S.RAW_EXTENSION: "An embedded object in its serialised form, kept as given.",
    S.FIELDS_V1: "A set of field paths (server-side apply), in its JSON form.",
    _PATCH_DEF: "The body of a PATCH request; its form depends on the Content-Type.",
}


def _describe(json_name: str, field: S.Field) -> str:
    return field.description or _COMMON_FIELDS.get(json_name, "")


def _gvk_index() -> dict[int, list[dict]]:
    """Struct identity -> every (group, version, kind) it is served as, lists included."""
    out: dict[int, list[dict]] = {}
    for (group, version, kind), struct in KIND_SCHEMAS.items():
        out.setdefault(id(struct), []).append({"group": group, "kind": kind, "version": version})
    return out


class SchemaBuilder:
    """Turns schema declarations into OpenAPI v3 component schemas.

    ``name(t)`` adds the definition of a struct (and, transitively, of every
    struct and named scalar it uses) to ``definitions`` and returns its name;
    ``value(t)`` is the schema of a value of type ``t`` where it appears (a
    list item, a map value). Definitions are only added once, so a builder per
    document yields exactly the components that document references.
    """

    def __init__(self, gvks: dict[int, list[dict]] | None = None):
        self.definitions: dict[str, dict] = {}
        self._gvks = gvks if gvks is not None else _gvk_index()
        self._extra_gvks: dict[int, list[dict]] = {}

    # -- named definitions ------------------------------------------------------------
    def add_gvk(self, struct: S.Struct, gvk: dict) -> None:
        """Mark ``struct`` as served as ``gvk`` too (``<Kind>List`` schemas)."""
        self._extra_gvks.setdefault(id(struct), []).append(gvk)

    def gvks(self, struct: S.Struct) -> list[dict]:
        return self._gvks.get(id(struct), []) + self._extra_gvks.get(id(struct), [])

    def name(self, t: S.Type) -> str:
        if isinstance(t, S.Struct):
            name = definition_name(t.name)
            if name not in self.definitions:
                self.definitions[name] = {}  # placeholder: breaks cycles
                self.definitions[name] = self._struct(t)
            return name
        message = getattr(t, "message", None)
        if not message:
            raise TypeError(f"{t!r} has no OpenAPI definition of its own")
        name = definition_name(message)
        if name not in self.definitions:
            self.definitions[name] = self._named_scalar(t, message)
        return name

    def _named_scalar(self, t: S.Type, message: str) -> dict:
        out: dict[str, Any] = {}
        desc = _SCALAR_DESCRIPTIONS.get(message)
        if desc:
            out["description"] = desc
        if isinstance(t, (S.Time, S.MicroTime)):
            out.update(type="string", format="date-time")
        elif isinstance(t, S.Quantity):
            out["oneOf"] = [{"type": "string"}, {"type": "number"}]
        elif isinstance(t, S.IntOrString):
            out.update(format="int-or-string", oneOf=[{"type": "integer"}, {"type": "string"}])
        elif isinstance(t, S.Duration):
            out["type"] = "string"
        else:  # Opaque: any JSON object, kept as given
            out["type"] = "object"
        return out

    def _struct(self, s: S.Struct) -> dict:
        gvks = self.gvks(s)
        props: dict[str, dict] = {}
        if gvks:  # a kind: apiVersion and kind travel in JSON (TypeMeta)
            props["apiVersion"] = {"type": "string", "description": _COMMON_FIELDS["apiVersion"]}
            props["kind"] = {"type": "string", "description": _COMMON_FIELDS["kind"]}
        for json_name, f in s.json_fields().items():
            props[json_name] = self.field(s, json_name, f)
        out: dict[str, Any] = {"type": "object", "properties": props}
        if s.description:
            out["description"] = s.description
        if s.required:
            out["required"] = list(s.required)
        if s.map_type == "atomic":
            out["x-kubernetes-map-type"] = "atomic"
        if gvks:
            out["x-kubernetes-group-version-kind"] = gvks
        return out

    # -- values and fields -------------------------------------------------------------
    def value(self, t: S.Type, *, element: bool = False) -> dict:
        """The schema of a value; ``element`` marks list items and map values, which
        upstream gives the zero-value default of non-pointer elements."""
        if isinstance(t, S.String):
            out: dict[str, Any] = {"type": "string"}
            if t.format:
                out["format"] = t.format
            if t.enum:
                out["enum"] = list(t.enum)
            if element:
                out["default"] = ""
            return out
        if isinstance(t, S.Integer):
            return {"type": "integer", "format": t.format, **({"default": 0} if element else {})}
        if isinstance(t, S.Number):
            return {"type": "number", "format": "double", **({"default": 0} if element else {})}
        if isinstance(t, S.Boolean):
            return {"type": "boolean", **({"default": False} if element else {})}
        if isinstance(t, S.Bytes):
            return {"type": "string", "format": "byte"}
        if isinstance(t, S.List):
            return self._list(t)
        if isinstance(t, S.Map):
            out = {"type": "object", "additionalProperties": self.value(t.value_type, element=True)}
            if t.map_type == "atomic":
                out["x-kubernetes-map-type"] = "atomic"
            return out
        ref = {"$ref": V3_REF + self.name(t)}
        if isinstance(t, S.Struct) and element:
            return {"default": {}, "allOf": [ref]}
        return ref

    def _list(self, t: S.List) -> dict:
        out: dict[str, Any] = {"type": "array", "items": self.value(t.item_type, element=True)}
        if t.marked:
            out["x-kubernetes-list-type"] = t.list_type
            if t.list_type == "map":
                out["x-kubernetes-list-map-keys"] = list(t.map_keys)
        if t.patch_merge_key:
            out["x-kubernetes-patch-merge-key"] = t.patch_merge_key
        if t.patch_strategy:
            out["x-kubernetes-patch-strategy"] = t.patch_strategy
        return out

    def field(self, owner: S.Struct, json_name: str, f: S.Field) -> dict:
        schema = self.value(f.type)
        extra: dict[str, Any] = {}
        desc = _describe(json_name, f)
        if desc:
            extra["description"] = desc
        if f.default is not None:
            extra["default"] = f.default
        elif f.required and not f.pointer:
            zero = _zero(f.type)
            if zero is not None:
                extra["default"] = zero
        elif isinstance(f.type, S.Struct) and not f.pointer:
            extra["default"] = {}
        if f.map_type is not None:
            extra["x-kubernetes-map-type"] = f.map_type
        if f.patch_strategy and not isinstance(f.type, S.List):
            extra["x-kubernetes-patch-strategy"] = f.patch_strategy
        if not extra:
            return schema
        if "$ref" in schema:  # a $ref's siblings are ignored in OpenAPI 3.0: wrap it
            return {"allOf": [schema], **extra}
        return {**schema, **extra}


def _zero(t: S.Type) -> Any:
    if isinstance(t, S.String):
        return ""
    if isinstance(t, (S.Integer, S.Number)):
        return 0
    if isinstance(t, S.Boolean):
        return False
    if isinstance(t, S.Struct):
        return {}
    return None


# --- paths -------------------------------------------------------------------------------


def _param(name: str, where: str, description: str, typ: str = "string", required: bool = False) -> dict:
    p: dict[str, Any] = {
        "name": name,
        "in": where,
        "description": description,
        "schema": {"type": typ, "uniqueItems": True},
    }
    if required:
        p["required"] = True
    return p


_PRETTY = _param("pretty", "query", "If 'true', the output is pretty printed.")
_NAMESPACE = _param("namespace", "path", "Object name and auth scope, such as for teams and projects.", required=True)
_DRY_RUN = _param(
    "dryRun",
    "query",
    "When present, the request is validated and admitted but nothing is persisted. The only valid value is All.",
)
_FIELD_MANAGER = _param(
    "fieldManager",
    "query",
    "Name of the actor making the change, recorded in "
    "managedFields. Required for apply patches; at most 128 printable characters.",
)
_FIELD_VALIDATION = _param(
    "fieldValidation",
    "query",
    "How the server treats unknown and duplicate fields in the request body: Ignore drops them "
    "silently, Warn (the default) adds one Warning header per field, Strict rejects the request "
    "with 400 naming every such field.",
)
_FORCE = _param(
    "force", "query", "Take ownership of conflicting fields on apply. Must be unset for other patch types.", "boolean"
)
_LIST_PARAMS = [
    _param(
        "allowWatchBookmarks",
        "query",
        "Ask for BOOKMARK events on a watch; the server may send them at any time.",
        "boolean",
    ),
    _param("continue", "query", "The continue token of a previous page, to get the next page."),
    _param("fieldSelector", "query", "Restrict the list to objects whose fields match. Defaults to everything."),
    _param("labelSelector", "query", "Restrict the list to objects whose labels match. Defaults to everything."),
    _param("limit", "query", "The most items to return; a continue token is returned when more exist.", "integer"),
    _param("resourceVersion", "query", "Which version of the data the request may be served from."),
    _param("resourceVersionMatch", "query", "How resourceVersion applies to a list: Exact or NotOlderThan."),
    _param(
        "sendInitialEvents",
        "query",
        "Start a watch with synthetic ADDED events for the current state, ended by a bookmark.",
        "boolean",
    ),
    _param("timeoutSeconds", "query", "Timeout of the list or watch call.", "integer"),
    _param("watch", "query", "Watch for changes and return them as a stream of events.", "boolean"),
]
_DELETE_PARAMS = [
    _DRY_RUN,
    _param("gracePeriodSeconds", "query", "Seconds before the object is deleted; zero means immediately.", "integer"),
    _param("orphanDependents", "query", "Deprecated: use propagationPolicy.", "boolean"),
    _param(
        "propagationPolicy",
        "query",
        "Whether and how dependents are garbage collected: Orphan, Background or Foreground.",
    ),
]
_LOG_PARAMS = [
    _param("container", "query", "The container to stream logs of; may be omitted when the pod has one."),
    _param("follow", "query", "Follow the log stream.", "boolean"),
    _param("insecureSkipTLSVerifyBackend", "query", "Do not verify the node agent's serving certificate.", "boolean"),
    _param("limitBytes", "query", "Stop after this many bytes.", "integer"),
    _param("previous", "query", "Logs of the previous, terminated container instance.", "boolean"),
    _param("sinceSeconds", "query", "Only logs newer than this many seconds.", "integer"),
    _param("tailLines", "query", "Only this many lines from the end of the log.", "integer"),
    _param("timestamps", "query", "Prefix every line with an RFC 3339 timestamp.", "boolean"),
]
_WRITE_PARAMS = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]


def _content(ref: str, types: Iterable[str] = _RESPONSE_TYPES) -> dict:
    return {t: {"schema": {"$ref": V3_REF + ref}} for t in types}


def _ok(ref: str, *codes: str, types: Iterable[str] = _RESPONSE_TYPES) -> dict:
    out = {
        c: {"description": {"200": "OK", "201": "Created", "202": "Accepted"}[c], "content": _content(ref, types)}
        for c in codes
    }
    out["401"] = {"description": "Unauthorized"}
    return out


def _tag(group: str, version: str) -> str:
    """``core_v1``, ``apps_v1``, ``rbac_v1``: the group's first label(s), our naming rule applied."""
    if not group:
        return f"core_{version}"
    short = group.removesuffix(".orch.io").removesuffix(".k8s.io")
    parts = short.split(".")
    return parts[0] + "".join(p.title() for p in parts[1:]) + f"_{version}"


def _op_group(group: str, version: str) -> str:
    tag = _tag(group, version).rsplit("_", 1)[0]
    return tag[:1].upper() + tag[1:] + version[:1].upper() + version[1:]


@dataclasses.dataclass
class _PathBuilder:
    """The paths of one group version, one kind at a time."""

    group: str
    version: str
    schemas: SchemaBuilder
    paths: dict[str, dict] = dataclasses.field(default_factory=dict)
    # Schemas of kinds that have no declaration (custom resources), by (group, version, kind).
    structs: dict[tuple[str, str, str], S.Struct] = dataclasses.field(default_factory=dict)
    # What PATCH accepts: custom resources take no strategic merge patch, and kubectl's
    # apply computes one only for kinds whose PATCH lists it.
    patch_types: tuple[str, ...] = _PATCH_TYPES

    def _schema_for(self, group: str, version: str, kind: str) -> S.Struct | None:
        return self.structs.get((group, version, kind)) or schema_for(group, version, kind)

    @property
    def base(self) -> str:
        return "/" + gv_path(self.group, self.version)

    def _path(self, path: str, params: list[dict]) -> dict:
        entry = self.paths.setdefault(path, {})
        entry["parameters"] = params
        return entry

    def _op(
        self,
        verb_id: str,
        gvk: dict | None,
        action: str,
        desc: str,
        responses: dict,
        params: list[dict] | None = None,
        body: dict | None = None,
    ) -> dict:
        op: dict[str, Any] = {
            "tags": [_tag(self.group, self.version)],
            "description": desc,
            "operationId": verb_id,
            "responses": responses,
            "x-kubernetes-action": action,
        }
        if params:
            op["parameters"] = params
        if body is not None:
            op["requestBody"] = body
        if gvk is not None:
            op["x-kubernetes-group-version-kind"] = gvk
        return op

    def add_kind(self, k: KindInfo) -> None:
        struct = self._schema_for(k.group, k.version, k.kind)
        if struct is None:
            raise ValueError(f"OpenAPI: kind {k.api_version} {k.kind} has no schema declaration")
        name = self.schemas.name(struct)
        gvk = {"group": k.group, "version": k.version, "kind": k.kind}
        lst = self.structs.get((k.group, k.version, k.list_kind)) or list_schema(k.group, k.version, k.kind)
        list_name = None
        if lst is not None and ("list" in k.verbs or "watch" in k.verbs):
            self.schemas.add_gvk(lst, {"group": k.group, "kind": k.list_kind, "version": k.version})
            list_name = self.schemas.name(lst)
        opg = _op_group(self.group, self.version)
        scope = "Namespaced" if k.namespaced else ""
        coll = f"{self.base}/namespaces/{{namespace}}/{k.resource}" if k.namespaced else f"{self.base}/{k.resource}"
        item = coll + "/{name}"
        name_param = _param("name", "path", f"Name of the {k.kind}.", required=True)
        coll_params = ([_NAMESPACE] if k.namespaced else []) + [_PRETTY]
        item_params = [name_param] + coll_params
        ops: dict[str, dict] = {}
        kid = f"{opg}{scope}{k.kind}"
        if "list" in k.verbs and list_name:
            ops["get"] = self._op(
                f"list{kid}",
                gvk,
                "list",
                f"List or watch objects of kind {k.kind}.",
                _ok(list_name, "200", types=_WATCH_TYPES),
                _LIST_PARAMS,
            )
        if "create" in k.verbs:
            ops["post"] = self._op(
                f"create{kid}",
                gvk,
                "post",
                f"Create a {k.kind}.",
                _ok(name, "200", "201", "202"),
                _WRITE_PARAMS,
                {"content": _content(name, ("*/*",)), "required": True},
            )
        if "deletecollection" in k.verbs:
            ops["delete"] = self._op(
                f"deletecollection{kid}",
                gvk,
                "deletecollection",
                f"Delete a collection of {k.kind}.",
                _ok(self.schemas.name(S.STATUS), "200"),
                _LIST_PARAMS + _DELETE_PARAMS[1:] + [_DRY_RUN],
                {"content": _content(self.schemas.name(S.DELETE_OPTIONS), ("*/*",))},
            )
        if ops:
            self._path(coll, coll_params).update(ops)
        ops = {}
        if "get" in k.verbs:
            ops["get"] = self._op(f"read{kid}", gvk, "get", f"Read the specified {k.kind}.", _ok(name, "200"))
        if "update" in k.verbs:
            ops["put"] = self._op(
                f"replace{kid}",
                gvk,
                "put",
                f"Replace the specified {k.kind}.",
                _ok(name, "200", "201"),
                _WRITE_PARAMS,
                {"content": _content(name, ("*/*",)), "required": True},
            )
        if "patch" in k.verbs:
            ops["patch"] = self._patch(f"patch{kid}", gvk, k.kind, name)
        if "delete" in k.verbs:
            ops["delete"] = self._op(
                f"delete{kid}",
                gvk,
                "delete",
                f"Delete a {k.kind}.",
                _ok(self.schemas.name(S.STATUS), "200", "202"),
                _DELETE_PARAMS,
                {"content": _content(self.schemas.name(S.DELETE_OPTIONS), ("*/*",))},
            )
        if ops:
            self._path(item, item_params).update(ops)
        if k.namespaced and "list" in k.verbs and list_name:
            self._path(f"{self.base}/{k.resource}", [_PRETTY])["get"] = self._op(
                f"list{opg}{k.kind}ForAllNamespaces",
                gvk,
                "list",
                f"List or watch objects of kind {k.kind} in all namespaces.",
                _ok(list_name, "200", types=_WATCH_TYPES),
                _LIST_PARAMS,
            )
        if "watch" in k.verbs:
            self._watch_paths(k, gvk, opg, scope, coll_params, item_params)
        for sub in k.subresources:
            self._subresource(k, sub, item, item_params, opg, scope)

    def _patch(self, op_id: str, gvk: dict, kind: str, ref: str) -> dict:
        patch_ref = self.schemas.name(S.Opaque(_PATCH_DEF))
        body = {"content": _content(patch_ref, self.patch_types), "required": True}
        return self._op(
            op_id,
            gvk,
            "patch",
            f"Partially update the specified {kind}.",
            _ok(ref, "200", "201"),
            _WRITE_PARAMS + [_FORCE],
            body,
        )

    def _watch_paths(self, k: KindInfo, gvk: dict, opg: str, scope: str, coll_params, item_params) -> None:
        event = self.schemas.name(_WATCH_EVENT)
        types = _WATCH_TYPES
        ns = "namespaces/{namespace}/" if k.namespaced else ""
        base = f"{self.base}/watch/{ns}{k.resource}"
        self._path(base, coll_params)["get"] = self._op(
            f"watch{opg}{scope}{k.kind}List",
            gvk,
            "watchlist",
            f"Deprecated: watch changes to a list of {k.kind}; use the watch parameter of a list instead.",
            _ok(event, "200", types=types),
            _LIST_PARAMS,
        )
        self._path(base + "/{name}", item_params)["get"] = self._op(
            f"watch{opg}{scope}{k.kind}",
            gvk,
            "watch",
            f"Deprecated: watch changes to an object of kind {k.kind}; use the watch parameter of a "
            "list with a field selector instead.",
            _ok(event, "200", types=types),
            _LIST_PARAMS,
        )
        if k.namespaced:
            self._path(f"{self.base}/watch/{k.resource}", [_PRETTY])["get"] = self._op(
                f"watch{opg}{k.kind}ListForAllNamespaces",
                gvk,
                "watchlist",
                f"Deprecated: watch changes to a list of {k.kind} in all namespaces.",
                _ok(event, "200", types=types),
                _LIST_PARAMS,
            )

    def _subresource(
        self, k: KindInfo, sub: Subresource, item: str, item_params: list[dict], opg: str, scope: str
    ) -> None:
        # A sub-resource names its kind's group version when it differs (scale, eviction, token).
        group, version = (sub.group, sub.version) if sub.version else (k.group, k.version)
        struct = self._schema_for(group, version, sub.kind)
        gvk = {"group": group, "version": version, "kind": sub.kind}
        title = sub.name.title().replace("containers", "Containers")
        path = f"{item}/{sub.name}"
        kid = f"{opg}{scope}{k.kind}{title}"
        if sub.name == "log":
            entry = self._path(path, item_params)
            entry["get"] = self._op(
                f"read{kid}",
                {"group": k.group, "version": k.version, "kind": k.kind},
                "get",
                f"Read the log of the specified {k.kind}.",
                {
                    "200": {
                        "description": "OK",
                        "content": {
                            t: {"schema": {"type": "string"}}
                            for t in ("text/plain", names.MEDIA_JSON, names.MEDIA_YAML, names.MEDIA_PROTOBUF)
                        },
                    },
                    "401": {"description": "Unauthorized"},
                },
                _LOG_PARAMS,
            )
            return
        if sub.name == "proxy" or struct is None:  # connect operations, passed through as they are
            entry = self._path(path, item_params[:-1] + [_param("path", "query", "Path to the resource.")])
            for verb in sub.verbs:
                method = {"create": "post", "update": "put", "get": "get", "delete": "delete", "patch": "patch"}[verb]
                entry[method] = self._op(
                    f"connect{opg}{method.title()}{scope}{k.kind}{title}",
                    gvk,
                    "connect",
                    f"Connect {method.upper()} requests to {sub.name} of {k.kind}.",
                    {
                        "200": {"description": "OK", "content": {"*/*": {"schema": {"type": "string"}}}},
                        "401": {"description": "Unauthorized"},
                    },
                )
            return
        ref = self.schemas.name(struct)
        entry = self._path(path, item_params)
        if "get" in sub.verbs:
            entry["get"] = self._op(
                f"read{kid}", gvk, "get", f"Read {sub.name} of the specified {k.kind}.", _ok(ref, "200")
            )
        if "update" in sub.verbs:
            entry["put"] = self._op(
                f"replace{kid}",
                gvk,
                "put",
                f"Replace {sub.name} of the specified {k.kind}.",
                _ok(ref, "200", "201"),
                _WRITE_PARAMS,
                {"content": _content(ref, ("*/*",)), "required": True},
            )
        if "patch" in sub.verbs:
            entry["patch"] = self._patch(f"patch{kid}", gvk, k.kind, ref)
        if "create" in sub.verbs:
            entry["post"] = self._op(
                f"create{kid}",
                gvk,
                "post",
                f"Create {sub.name} of a {k.kind}.",
                _ok(ref, "200", "201", "202"),
                _WRITE_PARAMS,
                {"content": _content(ref, ("*/*",)), "required": True},
            )


def _info(title_suffix: str = "") -> dict:

    return {"title": f"orch{title_suffix}", "version": version_info()["gitVersion"]}


_SECURITY_SCHEMES = {
    "BearerToken": {
        "type": "apiKey",
        "name": "authorization",
        "in": "header",
        "description": "Bearer token authentication",
    }
}


def _kinds(registry: Registry, group: str, version: str, enabled: Callable[[str, str, str], bool]) -> list[KindInfo]:
    """The declared kinds of a group version (custom resources have documents of their own)."""
    return [
        k for k in registry.in_group_version(group, version) if not k.custom and enabled(group, version, k.resource)
    ]


_CUSTOM_METADATA = "The object's metadata: its name, namespace, labels, annotations and what the system records."


def custom_definition_name(group: str, version: str, kind: str) -> str:
    """A custom kind's definition name, as upstream names it: the group reversed (``com.example.v1.CronTab``)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _without_v2_incompatible(node: Any) -> Any:
    """A custom schema without the junctors Swagger 2.0 cannot express (``anyOf``,
    ``oneOf``, ``not``), which upstream leaves out of ``/openapi/v2``."""
    if isinstance(node, list):
        return [_without_v2_incompatible(n) for n in node]
    if not isinstance(node, dict):
        return node
    return {k: _without_v2_incompatible(v) for k, v in node.items() if k not in ("anyOf", "oneOf", "not")}


def _custom_paths(
    group: str, version: str, kinds: list[KindInfo], schemas: SchemaBuilder, v2: bool = False
) -> _PathBuilder:
    """The paths of a custom group version; its kinds' schemas are their definitions' own
    (without what Swagger 2.0 cannot express, for ``v2``)."""
    pb = _PathBuilder(group, version, schemas, patch_types=_CUSTOM_PATCH_TYPES)
    meta = schemas.name(S.OBJECT_META)
    for k in kinds:
        placeholder = S.Struct(custom_definition_name(k.group, k.version, k.kind), [])
        pb.structs[(k.group, k.version, k.kind)] = placeholder
        pb.structs[(k.group, k.version, k.list_kind)] = S.Struct(
            custom_definition_name(k.group, k.version, k.list_kind),
            [S.Field("metadata", S.LIST_META, 1), S.Field("items", S.List(placeholder), 2, required=True)],
        )
    for k in kinds:
        pb.add_kind(k)
        name = definition_name(pb.structs[(k.group, k.version, k.kind)].name)
        schema = dict(k.custom_schema) if isinstance(k.custom_schema, dict) else {"type": "object"}
        if v2:
            schema = _without_v2_incompatible(schema)
        props = dict(schema.get("properties") or {})
        props["apiVersion"] = {"type": "string", "description": _COMMON_FIELDS["apiVersion"]}
        props["kind"] = {"type": "string", "description": _COMMON_FIELDS["kind"]}
        props["metadata"] = {"allOf": [{"$ref": V3_REF + meta}], "description": _CUSTOM_METADATA}
        schema["properties"] = props
        schema["x-kubernetes-group-version-kind"] = [{"group": k.group, "version": k.version, "kind": k.kind}]
        schemas.definitions[name] = schema
    return pb


def custom_group_version_document(group: str, version: str, kinds: list[KindInfo]) -> dict:
    """The OpenAPI v3 document of a custom resource group version."""
    schemas = SchemaBuilder({})
    pb = _custom_paths(group, version, kinds, schemas)
    return {
        "openapi": "3.0.0",
        "info": _info(),
        "paths": pb.paths,
        "components": {"schemas": schemas.definitions, "securitySchemes": _SECURITY_SCHEMES},
    }


def group_version_document(
    registry: Registry,
    group: str,
    version: str,
    enabled: Callable[[str, str, str], bool],
    gvks: dict[int, list[dict]] | None = None,
) -> dict:
    """The OpenAPI v3 document of one group version: paths of its enabled kinds and the
    component schemas they reference."""
    schemas = SchemaBuilder(gvks)
    paths = _PathBuilder(group, version, schemas)
    for k in _kinds(registry, group, version, enabled):
        paths.add_kind(k)
    return {
        "openapi": "3.0.0",
        "info": _info(),
        "paths": paths.paths,
        "components": {"schemas": schemas.definitions, "securitySchemes": _SECURITY_SCHEMES},
    }


# --- Swagger 2.0 ---------------------------------------------------------------------------

_V2_SCALARS = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
}


def _to_v2(node: Any) -> Any:
    """Rewrite an OpenAPI v3 schema fragment in Swagger 2.0 form: ``#/definitions/`` refs,
    ``$ref`` with siblings instead of a one-element ``allOf``, and no ``default`` beside a ref."""
    if isinstance(node, list):
        return [_to_v2(n) for n in node]
    if not isinstance(node, dict):
        return node
    allof = node.get("allOf")
    if isinstance(allof, list) and len(allof) == 1 and "$ref" in allof[0]:
        rest = {k: _to_v2(v) for k, v in node.items() if k not in ("allOf", "default")}
        return {"$ref": V2_REF + allof[0]["$ref"][len(V3_REF) :], **rest}
    out = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(V3_REF):
            out[key] = V2_REF + value[len(V3_REF) :]
        else:
            out[key] = _to_v2(value)
    return out


def _v2_operation(op: dict) -> dict:
    out = {k: v for k, v in op.items() if k not in ("parameters", "requestBody", "responses")}
    params = [_v2_param(p) for p in op.get("parameters", [])]
    body = op.get("requestBody")
    if body is not None:
        content = body["content"]
        schema = next(iter(content.values()))["schema"]
        params.insert(
            0, {"name": "body", "in": "body", "required": bool(body.get("required")), "schema": _to_v2(schema)}
        )
        out["consumes"] = list(content)
    produces: list[str] = []
    responses = {}
    for code, resp in op["responses"].items():
        r = {"description": resp["description"]}
        content = resp.get("content")
        if content:
            r["schema"] = _to_v2(next(iter(content.values()))["schema"])
            produces += [t for t in content if t not in produces]
        responses[code] = r
    if params:
        out["parameters"] = params
    out["produces"] = produces or [names.MEDIA_JSON]
    out["schemes"] = ["https"]
    out["responses"] = responses
    return out


def _v2_param(p: dict) -> dict:
    out = {k: v for k, v in p.items() if k != "schema"}
    out.update(p.get("schema", {}))
    return out


def _v2_paths(pb: _PathBuilder) -> dict[str, dict]:
    paths: dict[str, dict] = {}
    for path, entry in pb.paths.items():
        v2 = {m: _v2_operation(op) for m, op in entry.items() if m != "parameters"}
        v2["parameters"] = [_v2_param(p) for p in entry.get("parameters", [])]
        paths[path] = v2
    return paths


def _v2_definitions(schemas: SchemaBuilder) -> dict[str, dict]:
    return {
        name: (
            _to_v2(d)
            if name not in _V2_SCALARS
            else {**{k: v for k, v in d.items() if k == "description"}, **_V2_SCALARS[name]}
        )
        for name, d in schemas.definitions.items()
    }


def swagger_document(
    registry: Registry,
    group_versions: Iterable[tuple[str, str]],
    enabled: Callable[[str, str, str], bool],
    gvks: dict[int, list[dict]] | None = None,
) -> dict:
    """The Swagger 2.0 document of every enabled group version (upstream's ``/openapi/v2``)."""
    schemas = SchemaBuilder(gvks)
    paths: dict[str, dict] = {}
    for group, version in group_versions:
        pb = _PathBuilder(group, version, schemas)
        for k in _kinds(registry, group, version, enabled):
            pb.add_kind(k)
        paths.update(_v2_paths(pb))
    return {
        "swagger": "2.0",
        "info": _info(),
        "paths": paths,
        "definitions": _v2_definitions(schemas),
        "securityDefinitions": _SECURITY_SCHEMES,
        "security": [{"BearerToken": []}],
    }


# --- serving -----------------------------------------------------------------------------


def _etag(body: bytes) -> str:
    """Upstream's OpenAPI ETag: the upper-case hex SHA-512 of the served bytes."""
    return hashlib.sha512(body).hexdigest().upper()


@dataclasses.dataclass
class _Doc:
    body: bytes
    etag: str
    content_type: str = names.MEDIA_JSON
    _gzip: bytes | None = None

    def gzipped(self) -> bytes:
        if self._gzip is None:  # compressed on first demand, then kept
            self._gzip = gzip.compress(self.body, 6, mtime=0)
        return self._gzip


def _accepts(header: str | None) -> list[tuple[str, str]]:
    """Media ranges of an Accept header, by descending quality (q=0 dropped)."""
    ranges: list[tuple[float, int, str, str]] = []
    for i, part in enumerate((header or "*/*").split(",")):
        media, *params = [p.strip() for p in part.split(";")]
        if not media:
            continue
        q = 1.0
        for p in params:
            k, _, v = p.partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        typ, _, sub = media.lower().partition("/")
        ranges.append((-q, i, typ, sub or "*"))
    ranges.sort()
    return [(t, s) for _, _, t, s in ranges]


def _negotiate(header: str | None, offered: Iterable[str]) -> str | None:
    offered = list(offered)
    for typ, sub in _accepts(header):
        for media in offered:
            otyp, _, osub = media.partition("/")
            if typ in ("*", otyp) and sub in ("*", osub):
                return media
    return None


class OpenAPI:
    """The generated documents of one server, built on first demand and then served
    from memory: the v3 documents (and their index) together at the first request for
    any of them, the v2 document at the first ``/openapi/v2``, its protobuf form at the
    first request for that. Built, they hold about 5 MiB and their building leaves as
    much again of the allocator's pages behind; a server no client asks for them (kubectl
    reads v3 only for ``create``/``apply``/``explain``) keeps none, and starts sooner.

    ``docs`` maps a group version's key (``api/v1``, ``apis/apps/v1``) to its v3 document
    bytes; ``index()`` is ``/openapi/v3``; ``v2`` is the Swagger 2.0 document and
    ``v2_protobuf`` the same document as gnostic's ``openapi.v2.Document`` message (None
    if it could not be converted: then only JSON is offered). Each first build is timed
    and logged; ``build_seconds`` and ``total_bytes`` build what is missing and give the
    sum, the protobuf conversion's share is ``v2_protobuf_seconds``.
    """

    def __init__(
        self, registry: Registry, enabled: Callable[[str, str, str], bool], group_versions: list[tuple[str, str]]
    ):
        self._registry, self._enabled, self._group_versions = registry, enabled, group_versions
        self._custom: list[KindInfo] = []
        # The declared kinds' documents, once built (kept when custom resources come and go).
        self._builtin_v3: dict[str, _Doc] | None = None
        self._builtin_v2: bytes | None = None
        # The served documents, the custom kinds' parts included (None: to be built).
        self._v3: dict[str, _Doc] | None = None
        self._index: _Doc | None = None
        self._v2: _Doc | None = None
        self._v2_pb: _Doc | None = None
        self._v2_pb_stale = True
        self.v3_seconds = self.v2_seconds = self.v2_protobuf_seconds = 0.0
        self.last_modified = time.time()

    # -- building on demand ---------------------------------------------------------------

    def _v3_docs(self) -> dict[str, _Doc]:
        if self._v3 is not None:
            return self._v3
        if self._builtin_v3 is None:
            t0 = time.perf_counter()
            gvks = _gvk_index()
            built: dict[str, _Doc] = {}
            for g, v in self._group_versions:
                if not _kinds(self._registry, g, v, self._enabled):
                    continue
                doc = group_version_document(self._registry, g, v, self._enabled, gvks)
                body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
                built[gv_path(g, v)] = _Doc(body, _etag(body))
            self._builtin_v3 = built
            self.v3_seconds = time.perf_counter() - t0
            log.info(
                "OpenAPI v3 documents generated in %.0f ms: %d group versions, %d KiB",
                self.v3_seconds * 1000,
                len(built),
                sum(len(d.body) for d in built.values()) // 1024,
            )
        v3 = dict(self._builtin_v3)
        for (g, v), gv_kinds in self._custom_by_gv():
            body = orjson.dumps(custom_group_version_document(g, v, gv_kinds), option=orjson.OPT_SORT_KEYS)
            v3[gv_path(g, v)] = _Doc(body, _etag(body))
        self._v3 = v3
        index = orjson.dumps(self.index(), option=orjson.OPT_SORT_KEYS)
        self._index = _Doc(index, _etag(index))
        return v3

    def _custom_by_gv(self) -> list[tuple[tuple[str, str], list[KindInfo]]]:
        by_gv: dict[tuple[str, str], list[KindInfo]] = {}
        for k in self._custom:
            by_gv.setdefault((k.group, k.version), []).append(k)
        return sorted(by_gv.items())

    def _index_doc(self) -> _Doc:
        self._v3_docs()
        assert self._index is not None
        return self._index

    def _v2_doc(self) -> _Doc:
        if self._v2 is not None:
            return self._v2
        if self._builtin_v2 is None:
            t0 = time.perf_counter()
            doc = swagger_document(self._registry, self._group_versions, self._enabled, _gvk_index())
            # kept as bytes: parsed, it would hold about 5 MiB of small objects for good
            self._builtin_v2 = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
            self.v2_seconds = time.perf_counter() - t0
            log.info(
                "OpenAPI v2 document generated in %.0f ms: %d KiB",
                self.v2_seconds * 1000,
                len(self._builtin_v2) // 1024,
            )
        body = self._builtin_v2
        if self._custom:
            v2_paths: dict[str, dict] = {}
            v2_schemas = SchemaBuilder({})
            for (g, v), gv_kinds in self._custom_by_gv():
                v2_paths.update(_v2_paths(_custom_paths(g, v, gv_kinds, v2_schemas, v2=True)))
            doc = orjson.loads(body)
            doc["paths"] = {**doc["paths"], **v2_paths}
            doc["definitions"] = {**doc["definitions"], **_v2_definitions(v2_schemas)}
            body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        self._v2 = _Doc(body, _etag(body))
        return self._v2

    def _v2_protobuf_doc(self) -> _Doc | None:
        if self._v2_pb_stale:
            self._v2_pb_stale = False
            v2 = self._v2_doc()
            first = self.v2_protobuf_seconds == 0.0
            t0 = time.perf_counter()
            self._v2_pb = None
            try:
                data = openapi_pb.document_bytes(orjson.loads(v2.body))
            except ValueError:  # a declaration gnostic's schema cannot carry: JSON only, loudly
                log.exception("OpenAPI v2: the protobuf form is not served")
            else:
                # upstream re-uses the JSON document's ETag for the protobuf form
                self._v2_pb = _Doc(data, v2.etag, MEDIA_OPENAPI_V2_PROTOBUF_OLD)
            if first:
                self.v2_protobuf_seconds = time.perf_counter() - t0
                log.info(
                    "OpenAPI v2 protobuf form converted in %.0f ms: %d KiB",
                    self.v2_protobuf_seconds * 1000,
                    len(self._v2_pb.body if self._v2_pb else b"") // 1024,
                )
        return self._v2_pb

    # -- the documents ----------------------------------------------------------------------

    @property
    def docs(self) -> dict[str, bytes]:
        return {key: doc.body for key, doc in self._v3_docs().items()}

    @property
    def hashes(self) -> dict[str, str]:
        return {key: doc.etag for key, doc in self._v3_docs().items()}

    @property
    def v2(self) -> bytes:
        return self._v2_doc().body

    @property
    def v2_protobuf(self) -> bytes | None:
        doc = self._v2_protobuf_doc()
        return doc.body if doc is not None else None

    @property
    def build_seconds(self) -> float:
        """The time every document took to build the first time (built now if missing)."""
        self._v2_protobuf_doc()
        self._v3_docs()
        return self.v3_seconds + self.v2_seconds + self.v2_protobuf_seconds

    @property
    def total_bytes(self) -> int:
        """The size of every document served now (built now if missing)."""
        return (
            len(self.v2)
            + len(self.v2_protobuf or b"")
            + len(self._index_doc().body)
            + sum(len(b) for b in self.docs.values())
        )

    def set_custom_kinds(self, kinds: Iterable[KindInfo]) -> None:
        """Serve the custom resources' kinds (all of them, replacing those served before):
        a v3 document per group version, their paths and definitions in v2. The documents
        are built again when next asked for."""
        self._custom = list(kinds)
        self._v3, self._index, self._v2, self._v2_pb = None, None, None, None
        self._v2_pb_stale = True
        self.last_modified = time.time()

    def index(self) -> dict:
        """``/openapi/v3``: each group version's document URL, pinned by its hash."""
        return {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"} for p, h in self.hashes.items()}}

    def handles(self, path: str) -> bool:
        return path in ("/openapi/v2", "/openapi/v3") or path.startswith("/openapi/v3/")

    def handle(self, request: web.Request) -> web.Response | None:
        """Answer an ``/openapi/...`` request, or None when the path names no document (404)."""
        path = request.path
        if path == "/openapi/v3":
            return self._serve(request, self._index_doc(), names.MEDIA_JSON)
        if path.startswith("/openapi/v3/"):
            key = path[len("/openapi/v3/") :].strip("/")
            doc = self._v3_docs().get(key)
            if doc is None:
                return None
            media = _negotiate(request.headers.get("Accept"), (names.MEDIA_JSON,))
            if media is None:
                return self._not_acceptable(request, (names.MEDIA_JSON,))
            want = request.query.get("hash")
            if want is not None and want != "" and want != doc.etag:
                return web.Response(
                    status=301,
                    headers={
                        "Location": f"/openapi/v3/{key}?hash={doc.etag}",
                        "Vary": "Accept",
                        "Etag": f'"{doc.etag}"',
                    },
                )
            extra = {}
            if want:
                extra = {
                    "Cache-Control": "public, immutable",
                    "Expires": email.utils.formatdate(time.time() + 365 * 86400, usegmt=True),
                }
            return self._serve(request, doc, media, extra)
        if path == "/openapi/v2":
            # Upstream's order: JSON first (what */* gets), then both protobuf spellings.
            offered = (names.MEDIA_JSON,) if self._v2_pb is None and not self._v2_pb_stale else _V2_MEDIA
            media = _negotiate(request.headers.get("Accept"), offered)
            if media is None:
                return self._not_acceptable(request, offered)
            if media == names.MEDIA_JSON:
                return self._serve(request, self._v2_doc(), media)
            pb = self._v2_protobuf_doc()
            if pb is None:
                return self._not_acceptable(request, (names.MEDIA_JSON,))
            return self._serve(request, pb, MEDIA_OPENAPI_V2_PROTOBUF_OLD)
        return None

    def _not_acceptable(self, request: web.Request, offered: tuple[str, ...]) -> web.Response:
        # Upstream answers a bare 406; the body says what can be had.
        text = (
            f"none of the requested media types ({request.headers.get('Accept', '')}) can be served; "
            f"available: {', '.join(offered)}\n"
        )
        return web.Response(status=406, text=text, headers={"Vary": "Accept"})

    def _serve(self, request: web.Request, doc: _Doc, media: str, extra: dict | None = None) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="405 method not allowed\n", headers={"Allow": "GET, HEAD"})
        headers = {
            "Etag": f'"{doc.etag}"',
            "Vary": "Accept",
            "Last-Modified": email.utils.formatdate(self.last_modified, usegmt=True),
            **(extra or {}),
        }
        if _not_modified(request, doc.etag, self.last_modified):
            return web.Response(status=304, headers=headers)
        body = doc.body
        if "gzip" in request.headers.get("Accept-Encoding", "").lower() and len(body) > 1024:
            body = doc.gzipped()
            headers["Content-Encoding"] = "gzip"
            headers["Vary"] = "Accept, Accept-Encoding"
        resp = web.Response(body=body, headers=headers)  # aiohttp sends no body for HEAD
        resp.content_type = media
        return resp


def _not_modified(request: web.Request, etag: str, last_modified: float) -> bool:
    inm = request.headers.get("If-None-Match")
    if inm is not None:
        tags = [t.strip().removeprefix("W/") for t in inm.split(",")]
        return "*" in tags or f'"{etag}"' in tags
    ims = request.headers.get("If-Modified-Since")
    if ims:
        try:
            since = email.utils.parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError):
            return False
        return int(last_modified) <= since
    return False

"""OpenAPI v3 documents generated from the kind registry.

kubectl's default strict validation reads ``/openapi/v3`` and, per group
version, looks for each kind's ``patch`` operation tagged with
``x-kubernetes-group-version-kind`` and carrying a ``fieldValidation``
parameter; when it finds them it leaves field validation to the server.
``kubectl explain`` reads ``components.schemas``. Until the kinds carry full
field schemas, each kind's schema is the object envelope with the rest of the
object preserved as given.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import orjson

from ..api import names
from ..api.kinds import KindInfo, Registry


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_name(k: KindInfo) -> str:
    group = k.group or "core"
    return f"io.orch.api.{group}.{k.version}.{k.kind}"


def _gvk(k: KindInfo) -> list[dict]:
    return [{"group": k.group, "version": k.version, "kind": k.kind}]


_OBJECT_META = {
    "description": "Standard object metadata.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "generateName": {"type": "string", "description": "Prefix for a server-generated name."},
        "namespace": {"type": "string", "description": "Namespace of the object."},
        "uid": {"type": "string", "description": "Unique identifier, set by the server."},
        "resourceVersion": {"type": "string", "description": "Opaque version of the stored object."},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
        "finalizers": {"type": "array", "items": {"type": "string", "default": ""},
                       "x-kubernetes-list-type": "set"},
        "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"],
                            "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"},
        "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
}


def kind_schema(k: KindInfo) -> dict:
    return {
        "description": f"{k.kind} ({k.api_version}).",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": "Versioned schema of this representation."},
            "kind": {"type": "string", "description": "The kind of this object."},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/io.orch.api.meta.v1.ObjectMeta"}], "default": {}},
        },
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": _gvk(k),
    }


def _param(name: str, desc: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "description": desc, "schema": schema or {"type": "string"},
            "uniqueItems": True}


_WRITE_PARAMS = [
    _param("dryRun", "When present, modifications are not persisted. Valid value: All."),
    _param("fieldManager", "Name of the actor making the change."),
    _param("fieldValidation", "Ignore, Warn (default) or Strict handling of unknown and duplicate fields."),
]


def group_version_document(registry: Registry, group: str, version: str,
                           enabled: Callable[[str, str, str], bool]) -> dict:
    kinds = [k for k in registry.in_group_version(group, version) if enabled(group, version, k.resource)]
    schemas: dict[str, dict] = {"io.orch.api.meta.v1.ObjectMeta": _OBJECT_META}
    paths: dict[str, dict] = {}
    base = "/" + _gv_path(group, version)
    for k in kinds:
        ref = {"$ref": f"#/components/schemas/{_schema_name(k)}"}
        schemas[_schema_name(k)] = kind_schema(k)
        ok = {"content": {"application/json": {"schema": ref}, "application/yaml": {"schema": ref}},
              "description": "OK"}
        collection = f"{base}/namespaces/{{namespace}}/{k.resource}" if k.namespaced else f"{base}/{k.resource}"
        item = collection + "/{name}"
        ext = {"x-kubernetes-group-version-kind": _gvk(k)[0]}
        op_id = f"{k.kind}{group.replace('.', '')}{version}"
        paths[collection] = {
            "get": {"operationId": f"list{op_id}", "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "list", **ext},
            "post": {"operationId": f"create{op_id}", "parameters": _WRITE_PARAMS,
                     "requestBody": {"content": {"*/*": {"schema": ref}}, "required": True},
                     "responses": {"200": ok, "201": ok}, "x-kubernetes-action": "post", **ext},
        }
        paths[item] = {
            "get": {"operationId": f"read{op_id}", "responses": {"200": ok}, "x-kubernetes-action": "get", **ext},
            "put": {"operationId": f"replace{op_id}", "parameters": _WRITE_PARAMS,
                    "requestBody": {"content": {"*/*": {"schema": ref}}, "required": True},
                    "responses": {"200": ok, "201": ok}, "x-kubernetes-action": "put", **ext},
            "patch": {"operationId": f"patch{op_id}", "parameters": _WRITE_PARAMS + [_param("force", "Force apply.", {"type": "boolean"})],
                      "requestBody": {"content": {m: {"schema": {"type": "object"}} for m in (
                          names.MEDIA_JSON_PATCH, names.MEDIA_MERGE_PATCH, names.MEDIA_STRATEGIC_MERGE_PATCH,
                          names.MEDIA_APPLY_PATCH)}, "required": True},
                      "responses": {"200": ok, "201": ok}, "x-kubernetes-action": "patch", **ext},
            "delete": {"operationId": f"delete{op_id}", "responses": {"200": ok}, "x-kubernetes-action": "delete", **ext},
        }
    title = f"orch {group or 'core'}/{version}"
    return {"openapi": "3.0.0", "info": {"title": title, "version": version}, "paths": paths,
            "components": {"schemas": schemas}}


class OpenAPI:
    def __init__(self, registry: Registry, enabled: Callable[[str, str, str], bool],
                 group_versions: list[tuple[str, str]]):
        self.docs: dict[str, bytes] = {}
        self.hashes: dict[str, str] = {}
        for g, v in group_versions:
            path = _gv_path(g, v)
            body = orjson.dumps(group_version_document(registry, g, v, enabled))
            self.docs[path] = body
            self.hashes[path] = hashlib.sha512(body).hexdigest()[:64].upper()

    def index(self) -> dict:
        return {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"} for p, h in self.hashes.items()}}

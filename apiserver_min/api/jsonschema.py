"""A structural JSON schema (a custom resource definition's ``openAPIV3Schema``) seen
as the schema types of :mod:`.schema`, for what reads those: server-side apply's field
sets, list types (``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``) and map
types (``x-kubernetes-map-type``).

Field numbers are positions (custom resources have no protobuf form); a value kept as
given (``x-kubernetes-preserve-unknown-fields`` without properties, or no schema) is
opaque, so apply treats it as one value.
"""

from __future__ import annotations

from typing import Any

from . import schema as S

_OPAQUE = S.Opaque(upstream_wire=False)
_CACHE: dict[int, tuple[Any, S.Struct]] = {}


def _value(node: Any, name: str) -> S.Type:
    if not isinstance(node, dict):
        return _OPAQUE
    if node.get("x-kubernetes-int-or-string"):
        return S.IntOrString()
    typ = node.get("type")
    if typ == "object":
        props = node.get("properties")
        addl = node.get("additionalProperties")
        map_type = "atomic" if node.get("x-kubernetes-map-type") == "atomic" else "granular"
        if isinstance(props, dict) and props:
            return _struct(node, name)
        if isinstance(addl, dict):
            return S.Map(_value(addl, name + "Value"), map_type)
        return _OPAQUE
    if typ == "array":
        item = _value(node.get("items"), name + "Item")
        lt = node.get("x-kubernetes-list-type") or "atomic"
        keys = tuple(node.get("x-kubernetes-list-map-keys") or ()) if lt == "map" else ()
        return S.List(item, lt, keys)
    if typ == "string":
        return S.String(format=node.get("format") or None)
    if typ == "integer":
        return S.Integer(64)
    if typ == "number":
        return S.Number()
    if typ == "boolean":
        return S.Boolean()
    return _OPAQUE


def _struct(node: dict, name: str, root: bool = False) -> S.Struct:
    fields: list[S.Field] = []
    n = 0
    if root:
        n += 1
        fields.append(S.Field("metadata", S.OBJECT_META, n))
    required = set(node.get("required") or ())
    for key, sub in (node.get("properties") or {}).items():
        if root and key in ("metadata", "apiVersion", "kind"):
            continue
        n += 1
        fields.append(S.Field(key, _value(sub, f"{name}.{key}"), n, required=key in required))
    map_type = "atomic" if node.get("x-kubernetes-map-type") == "atomic" else "granular"
    return S.Struct(name, fields, map_type)


def kind_struct(schema: Any, name: str) -> S.Struct:
    """The struct of a custom kind's objects (built once per schema object)."""
    cached = _CACHE.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    struct = _struct(schema if isinstance(schema, dict) else {}, name, root=True)
    if len(_CACHE) > 1024:
        _CACHE.clear()
    _CACHE[id(schema)] = (schema, struct)
    return struct

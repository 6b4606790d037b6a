"""The rules a definition's ``openAPIV3Schema`` must follow to be served: a
*structural* schema (every field typed, unless its value is kept as given), only
the keywords and extensions this server implements, defaults that pass their own
schema.

The logical junctors ``allOf``/``anyOf``/``oneOf``/``not`` are *value validations*:
inside them a schema may only restrict values (no ``type``, ``default``,
``description``, ``title``, ``nullable``, ``additionalProperties`` or
``x-kubernetes-*`` extensions), and every property or item they name must be
specified by the structural part beside them (upstream's messages). Validation
rules (``x-kubernetes-validations``) are checked by ``rules``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from ..api import validation as v
from . import rules, values

# JSONSchemaProps fields (apiextensions v1) this server implements.
_KNOWN = frozenset(
    {
        "id",
        "$schema",
        "description",
        "type",
        "format",
        "title",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "properties",
        "additionalProperties",
        "externalDocs",
        "example",
        "nullable",
        values.PRESERVE,
        values.EMBEDDED,
        values.INT_OR_STRING,
        values.LIST_TYPE,
        values.LIST_MAP_KEYS,
        values.MAP_TYPE,
        rules.KEY,
    }
    | values.JUNCTORS
)
# Fields v1 forbids outright (upstream's messages).
_FORBIDDEN_V1 = {
    "$ref": "$ref is not supported",
    "patternProperties": "patternProperties is not supported",
    "dependencies": "dependencies is not supported",
    "additionalItems": "additionalItems cannot be set to false",
    "definitions": "definitions is not supported",
}
# What a schema inside a junctor must not say (upstream's messages), when it says it.
_NOT_IN_JUNCTORS: tuple[tuple[str, str], ...] = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    (values.PRESERVE, "must be undefined to be structural"),
    (values.EMBEDDED, "must be false to be structural"),
    (values.INT_OR_STRING, "must be false to be structural"),
    (values.LIST_MAP_KEYS, "must be empty to be structural"),
    (values.LIST_TYPE, "must be undefined to be structural"),
    (values.MAP_TYPE, "must be undefined to be structural"),
    (rules.KEY, "must be empty to be structural"),
)
# Keys whose mere presence counts (the others count when true or non-empty).
_SET_WHEN_PRESENT = frozenset({"additionalProperties", "default", values.PRESERVE, values.LIST_TYPE, values.MAP_TYPE})
_TYPES = ("array", "boolean", "integer", "number", "object", "string")


def validate_schema(schema: Any, path: str, stored_rules: frozenset[str] = frozenset()) -> list[v.FieldError]:
    """Every reason ``schema`` (the ``openAPIV3Schema`` at ``path``) cannot be served
    (``stored_rules``: the rules the stored definition holds, on an update)."""
    errs: list[v.FieldError] = []
    if not isinstance(schema, dict):
        return [v.FieldError.type_invalid(path, schema, "must be an object")]
    if schema.get("type") != "object":
        errs.append(
            v.FieldError.invalid(f"{path}.type", schema.get("type", ""), "must be object at the root")
            if schema.get("type")
            else v.FieldError.required(f"{path}.type", "must not be empty at the root")
        )
    for key in ("nullable",):
        if schema.get(key):
            errs.append(v.FieldError.forbidden(f"{path}.{key}", "must be false at the root"))
    if schema.get(values.EMBEDDED):
        errs.append(v.FieldError.forbidden(f"{path}.{values.EMBEDDED}", "must be false at the root"))
    _node(schema, path, errs, root=True, typed_parent=False)
    props = schema.get("properties")
    if isinstance(props, dict) and isinstance(props.get("metadata"), dict):
        _metadata(props["metadata"], f"{path}.properties[metadata]", errs)
    if not errs:
        errs += rules.validate_schema_rules(schema, path, stored_rules)
    if not errs:
        _defaults(schema, path, errs)
    return errs


def _keywords(node: Any, path: str, errs: list[v.FieldError]) -> bool:
    """Whether ``node`` is a schema object; its keywords v1 forbids or this server does
    not know are errors."""
    if not isinstance(node, dict):
        errs.append(v.FieldError.type_invalid(path, node, "must be an object (a JSON schema)"))
        return False
    for key in node:
        if key in _FORBIDDEN_V1:
            errs.append(v.FieldError.forbidden(f"{path}.{key}", _FORBIDDEN_V1[key]))
        elif key not in _KNOWN:
            errs.append(v.FieldError.forbidden(f"{path}.{key}", f"unknown schema field {key!r}"))
    return True


def _pattern(node: dict, path: str, errs: list[v.FieldError]) -> None:
    pattern = node.get("pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            errs.append(v.FieldError.invalid(f"{path}.pattern", pattern, f"must be a valid regular expression: {exc}"))


def _node(node: Any, path: str, errs: list[v.FieldError], root: bool = False, typed_parent: bool = True) -> None:
    if not _keywords(node, path, errs):
        return
    typ = node.get("type", "")
    preserve = bool(node.get(values.PRESERVE))
    int_or_string = bool(node.get(values.INT_OR_STRING))
    embedded = bool(node.get(values.EMBEDDED))
    if typ and typ not in _TYPES:
        errs.append(v.FieldError.not_supported(f"{path}.type", typ, _TYPES))
    if int_or_string:
        if typ:
            errs.append(
                v.FieldError.invalid(f"{path}.type", typ, "must be empty if x-kubernetes-int-or-string is true")
            )
    elif not typ and not preserve and not root:
        what = "specified object fields" if typed_parent else "fields"
        errs.append(v.FieldError.required(f"{path}.type", f"must not be empty for {what}"))
    if embedded and typ != "object":
        errs.append(
            v.FieldError.invalid(f"{path}.type", typ, "must be object if x-kubernetes-embedded-resource is true")
        )
    if preserve and node.get(values.PRESERVE) is not True:
        errs.append(
            v.FieldError.invalid(f"{path}.{values.PRESERVE}", node[values.PRESERVE], "must be true or undefined")
        )
    props, addl, items = node.get("properties"), node.get("additionalProperties"), node.get("items")
    if props is not None and addl is not None:
        errs.append(
            v.FieldError.forbidden(
                f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
            )
        )
    if isinstance(addl, bool) and addl is False:
        errs.append(v.FieldError.forbidden(f"{path}.additionalProperties", "must not be false"))
    if (props is not None or addl is not None) and typ and typ != "object":
        errs.append(
            v.FieldError.invalid(f"{path}.type", typ, "must be object if properties or additionalProperties are given")
        )
    if typ == "array" and items is None:
        errs.append(v.FieldError.required(f"{path}.items", "must be specified"))
    if items is not None:
        if isinstance(items, list):
            errs.append(v.FieldError.forbidden(f"{path}.items", "items must be a schema object and not an array"))
        else:
            _node(items, f"{path}.items", errs)
    if isinstance(props, dict):
        for name, sub in props.items():
            _node(sub, f"{path}.properties[{name}]", errs)
    elif props is not None:
        errs.append(v.FieldError.type_invalid(f"{path}.properties", props, "must be an object"))
    if isinstance(addl, dict):
        _node(addl, f"{path}.additionalProperties", errs)
    _pattern(node, path, errs)
    _list_markers(node, path, errs)
    _junctors(node, path, errs, int_or_string)
    for key in ("required",):
        req = node.get(key)
        if req is not None and not (isinstance(req, list) and all(isinstance(r, str) for r in req)):
            errs.append(v.FieldError.type_invalid(f"{path}.required", req, "must be a list of strings"))


def _junctor_schemas(node: dict, path: str, errs: list[v.FieldError]) -> list[tuple[str, str, Any]]:
    """(junctor, path, schema) of each schema the node's junctors hold; a junctor of the
    wrong shape is an error."""
    out: list[tuple[str, str, Any]] = []
    for key in ("allOf", "anyOf", "oneOf"):
        subs = node.get(key)
        if subs is None:
            continue
        if not isinstance(subs, list):
            errs.append(v.FieldError.type_invalid(f"{path}.{key}", subs, "must be a list of schemas"))
            continue
        out += [(key, f"{path}.{key}[{i}]", sub) for i, sub in enumerate(subs)]
    if "not" in node:
        out.append(("not", f"{path}.not", node["not"]))
    return out


def _is_int_or_string_any_of(subs: Any) -> bool:
    """The one shape of ``anyOf`` an int-or-string field may carry: exactly
    ``[{type: integer}, {type: string}]``."""
    return subs == [{"type": "integer"}, {"type": "string"}]


def _junctors(node: dict, path: str, errs: list[v.FieldError], int_or_string: bool) -> None:
    """The node's junctors: value validations only, naming only what the structural
    part specifies."""
    skip_any_of = int_or_string and _is_int_or_string_any_of(node.get("anyOf"))
    all_of = node.get("allOf")
    skip_first_all_of = (
        int_or_string
        and isinstance(all_of, list)
        and bool(all_of)
        and isinstance(all_of[0], dict)
        and _is_int_or_string_any_of(all_of[0].get("anyOf"))
    )
    for key, sub_path, sub in _junctor_schemas(node, path, errs):
        if key == "anyOf" and skip_any_of:
            continue
        first_all_of = key == "allOf" and sub_path.endswith(".allOf[0]")
        _nested(sub, sub_path, errs, skip_any_of=skip_first_all_of and first_all_of)
        _complete(sub, node, path, sub_path, errs)


def _nested(node: Any, path: str, errs: list[v.FieldError], skip_any_of: bool = False) -> None:
    """A schema inside a junctor: it may only restrict values."""
    if not _keywords(node, path, errs):
        return
    for key, sub_path, sub in _junctor_schemas(node, path, errs):
        if not (key == "anyOf" and skip_any_of):
            _nested(sub, sub_path, errs)
    items = node.get("items")
    if isinstance(items, list):
        errs.append(v.FieldError.forbidden(f"{path}.items", "items must be a schema object and not an array"))
    elif items is not None:
        _nested(items, f"{path}.items", errs)
    props = node.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            _nested(sub, f"{path}.properties[{name}]", errs)
    elif props is not None:
        errs.append(v.FieldError.type_invalid(f"{path}.properties", props, "must be an object"))
    for key, message in _NOT_IN_JUNCTORS:
        if key in node and (key in _SET_WHEN_PRESENT or node[key]):
            errs.append(v.FieldError.forbidden(f"{path}.{key}", message))
    _pattern(node, path, errs)


def _complete(vnode: Any, snode: Any, spath: str, vpath: str, errs: list[v.FieldError]) -> None:
    """Every property and item a junctor's schema (``vnode`` at ``vpath``) names must
    be specified in the structural schema beside it (``snode`` at ``spath``)."""
    if not isinstance(vnode, dict):
        return
    if not isinstance(snode, dict):
        errs.append(v.FieldError.required(spath, f"because it is defined in {vpath}"))
        return
    for _key, sub_path, sub in _junctor_schemas(vnode, vpath, []):
        _complete(sub, snode, spath, sub_path, errs)
    if vnode.get("items") is not None:
        _complete(vnode["items"], snode.get("items"), f"{spath}.items", f"{vpath}.items", errs)
    props = vnode.get("properties")
    if isinstance(props, dict):
        sprops = snode.get("properties") if isinstance(snode.get("properties"), dict) else {}
        for name, sub in props.items():
            spp, vpp = f"{spath}.properties[{name}]", f"{vpath}.properties[{name}]"
            if name not in sprops:
                errs.append(v.FieldError.required(spp, f"because it is defined in {vpp}"))
            else:
                _complete(sub, sprops[name], spp, vpp, errs)


def _list_markers(node: dict, path: str, errs: list[v.FieldError]) -> None:
    lt = node.get(values.LIST_TYPE)
    keys = node.get(values.LIST_MAP_KEYS)
    if lt is not None:
        if lt not in ("atomic", "set", "map"):
            errs.append(v.FieldError.not_supported(f"{path}.{values.LIST_TYPE}", lt, ("atomic", "set", "map")))
        elif node.get("type") != "array":
            errs.append(
                v.FieldError.invalid(
                    f"{path}.type", node.get("type", ""), f"must be array if {values.LIST_TYPE} is specified"
                )
            )
        elif lt == "map":
            items = node.get("items") or {}
            if not keys:
                errs.append(
                    v.FieldError.required(
                        f"{path}.{values.LIST_MAP_KEYS}", f"must not be empty if {values.LIST_TYPE} is map"
                    )
                )
            elif isinstance(items, dict):
                if items.get("type") != "object":
                    errs.append(
                        v.FieldError.invalid(
                            f"{path}.items.type",
                            items.get("type", ""),
                            f"must be object if parent array's {values.LIST_TYPE} is map",
                        )
                    )
                iprops = items.get("properties") or {}
                for key in keys:
                    if key not in iprops:
                        errs.append(
                            v.FieldError.required(
                                f"{path}.items.properties[{key}]",
                                f"entries for {values.LIST_MAP_KEYS} must be properties of the items",
                            )
                        )
    if keys is not None and lt != "map":
        errs.append(
            v.FieldError.forbidden(
                f"{path}.{values.LIST_MAP_KEYS}", f"must not be set if {values.LIST_TYPE} is not map"
            )
        )
    mt = node.get(values.MAP_TYPE)
    if mt is not None:
        if mt not in ("granular", "atomic"):
            errs.append(v.FieldError.not_supported(f"{path}.{values.MAP_TYPE}", mt, ("granular", "atomic")))
        elif node.get("type") != "object":
            errs.append(
                v.FieldError.invalid(
                    f"{path}.type", node.get("type", ""), f"must be object if {values.MAP_TYPE} is specified"
                )
            )


def _metadata(node: dict, path: str, errs: list[v.FieldError]) -> None:
    """``metadata`` at the root may say only that it is an object and restrict name
    and generateName (as upstream)."""
    if node.get("type") not in (None, "object"):
        errs.append(v.FieldError.invalid(f"{path}.type", node.get("type"), "must be object"))
    for key in node:
        if key not in ("type", "properties", "description"):
            errs.append(v.FieldError.forbidden(f"{path}.{key}", "must not be specified at the root's metadata"))
    props = node.get("properties")
    if isinstance(props, dict):
        for name in props:
            if name not in ("name", "generateName"):
                errs.append(
                    v.FieldError.forbidden(
                        f"{path}.properties[{name}]", "must not specify anything other than name and generateName"
                    )
                )
            else:
                sub = props[name]
                if isinstance(sub, dict) and sub.get("type") not in (None, "string"):
                    errs.append(
                        v.FieldError.invalid(f"{path}.properties[{name}].type", sub.get("type"), "must be string")
                    )


def _defaults(node: Any, path: str, errs: list[v.FieldError], root: bool = True, body: str = "") -> None:
    """Every ``default`` must pass its own schema once pruned and defaulted itself; an
    error names the default's path and says what is wrong with the value where it lands
    (``body``, the field's path in an object)."""
    if not isinstance(node, dict):
        return
    if "default" in node and not root:
        value = copy.deepcopy(node["default"])
        pruned = copy.deepcopy(value)
        values.prune(pruned, node, root=False)
        if pruned != value:
            errs.append(v.FieldError.invalid(f"{path}.default", node["default"], "must not have unknown fields"))
        else:
            values.apply_defaults(value, node)
            found = values.validate(value, node, body)
            if not found and rules.has_rules(node):
                # A default passes the rules of its field too (never transition rules).
                found = rules.Validator(node).validate(value, path=body, root=False)
            for e in found:
                errs.append(dataclasses.replace(e, field=f"{path}.default"))
    props = node.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            if root and name == "metadata":
                continue
            _defaults(sub, f"{path}.properties[{name}]", errs, False, f"{body}.{name}" if body else name)
    if isinstance(node.get("items"), dict):
        _defaults(node["items"], f"{path}.items", errs, False, f"{body}[*]")
    if isinstance(node.get("additionalProperties"), dict):
        _defaults(node["additionalProperties"], f"{path}.additionalProperties", errs, False, f"{body}[*]")

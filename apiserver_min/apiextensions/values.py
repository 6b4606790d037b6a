"""Objects against a definition's structural schema (an ``openAPIV3Schema`` node as
the definition gives it, a dict): pruning of unknown fields, defaults, and the value
checks with upstream's messages and field paths.

Paths are written as upstream writes them: ``spec.replicas``, ``spec.items[0]``,
``spec.labels[key]``; value errors read ``<path> in body should ...``.
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from typing import Any

from ..api import validation as v
from . import formats

PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
INT_OR_STRING = "x-kubernetes-int-or-string"
LIST_TYPE = "x-kubernetes-list-type"
LIST_MAP_KEYS = "x-kubernetes-list-map-keys"
MAP_TYPE = "x-kubernetes-map-type"
JUNCTORS = frozenset({"allOf", "anyOf", "oneOf", "not"})

# What every object keeps whatever its schema says (the root, and embedded resources).
_TYPE_META = ("apiVersion", "kind", "metadata")


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# --- pruning ------------------------------------------------------------------------------


def prune(obj: Any, schema: dict | None, root: bool = True) -> list[str]:
    """Drop, in place, the fields the schema does not specify (upstream's pruning),
    except under ``x-kubernetes-preserve-unknown-fields``. Returns the paths dropped."""
    pruned: list[str] = []
    if schema is not None:
        _prune(obj, _plan(schema), root, [], pruned, True)
    return pruned


def unknown_fields(obj: Any, schema: dict | None) -> list[str]:
    """The paths pruning would drop from ``obj`` (which is left as it is)."""
    found: list[str] = []
    if schema is not None:
        _prune(obj, _plan(schema), True, [], found, False)
    return found


def _path_text(steps: list[str | int], last: str) -> str:
    """``spec.items[0].name`` from the steps to a field (written only for a field pruned)."""
    out = ""
    for step in [*steps, last]:
        out = f"{out}[{step}]" if isinstance(step, int) else _child(out, step)
    return out


def _prune(obj: Any, p: "_Plan", root: bool, steps: list[str | int], pruned: list[str], drop: bool) -> None:
    if isinstance(obj, dict):
        if p.has_props or not p.preserve:
            if p.addl is not None:
                for key, value in obj.items():
                    if isinstance(value, (dict, list)):
                        steps.append(str(key))
                        _prune(value, p.addl, False, steps, pruned, drop)
                        steps.pop()
                return
            if p.addl_true:
                return
            keep_meta = root or p.embedded
            known = p.known
            for key in list(obj):
                if key not in known:
                    if not p.preserve and not (keep_meta and key in _TYPE_META):
                        if drop:
                            del obj[key]
                        pruned.append(_path_text(steps, key))
                    continue
                value = obj[key]
                sub = p.prop_map.get(key)
                if sub is not None and isinstance(value, (dict, list)) and not (keep_meta and key in _TYPE_META):
                    steps.append(key)
                    _prune(value, sub, False, steps, pruned, drop)
                    steps.pop()
    elif isinstance(obj, list):
        if p.items is not None:
            for i, item in enumerate(obj):
                if isinstance(item, (dict, list)):
                    steps.append(i)
                    _prune(item, p.items, False, steps, pruned, drop)
                    steps.pop()


# --- defaults -----------------------------------------------------------------------------

# Defaults that are never changed in place: set as they are, not copied.
_IMMUTABLE = (str, int, float, bool, type(None))


def apply_defaults(obj: Any, schema: dict | None) -> None:
    """Fill in, in place, the ``default`` of every absent (or null, where not nullable)
    property, from the top down: a default given is itself defaulted further."""
    if schema is None:
        return
    p = _plan(schema)
    if p.defaulted:
        _apply_defaults(obj, p)


def _apply_defaults(obj: Any, p: "_Plan") -> None:
    """Only the values under nodes with a default at or below them are walked."""
    if isinstance(obj, dict):
        for key, default, nullable in p.defaults:
            if key not in obj or (obj[key] is None and not nullable):
                obj[key] = default if isinstance(default, _IMMUTABLE) else copy.deepcopy(default)
        for key, sub in p.defaulted_props:
            value = obj.get(key)
            if isinstance(value, (dict, list)):
                _apply_defaults(value, sub)
        if p.addl is not None and p.addl.defaulted:
            for value in obj.values():
                _apply_defaults(value, p.addl)
    elif isinstance(obj, list):
        if p.items is not None and p.items.defaulted:
            for item in obj:
                _apply_defaults(item, p.items)


def has_defaults(schema: Any) -> bool:
    """Whether any node of the schema declares a ``default`` (remembered per schema object)."""
    return isinstance(schema, dict) and _plan(schema).defaulted


# --- value validation ---------------------------------------------------------------------


# The Python type of a decoded JSON value of each schema type (when it is exactly that,
# the value has the type; otherwise _is_type decides: an integral float is an integer).
_EXACT: dict[str, type] = {
    "string": str,
    "object": dict,
    "array": list,
    "boolean": bool,
    "integer": int,
    "number": float,
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _is_type(value: Any, typ: str) -> bool:
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _type_error(path: str, value: Any, typ: str) -> v.FieldError:
    got = _type_name(value)
    return v.FieldError.invalid(path, got, f"{path} in body must be of type {typ}: {v.go_quote(got)}")


@lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def _num(n: Any) -> str:
    if isinstance(n, float) and n.is_integer():
        return str(int(n))
    return str(n)


def validate(value: Any, schema: dict | None, path: str = "") -> list[v.FieldError]:
    """Every error of ``value`` against ``schema`` (the root object's own apiVersion,
    kind and metadata are not the schema's business)."""
    errs: list[v.FieldError] = []
    if schema is not None:
        _validate(value, _plan(schema), path, errs, root=True)
    return errs


class _Plan:
    """What pruning, defaulting and validation read of one schema node, read once per
    schema (``_plan``): which checks apply, and the plans of the nodes below."""

    __slots__ = (
        "schema",
        "typ",
        "exact",
        "int_or_string",
        "null_type",
        "enum",
        "enum_texts",
        "string",
        "max_length",
        "min_length",
        "pattern",
        "pattern_re",
        "format",
        "number",
        "array",
        "object",
        "props",
        "has_props",
        "prop_map",
        "known",
        "addl",
        "addl_true",
        "items",
        "preserve",
        "embedded",
        "defaults",
        "defaulted_props",
        "defaulted",
        "junctors",
        "ok",
    )

    def __init__(self, schema: dict):
        self.schema = schema
        typ = schema.get("type")
        self.typ = typ
        self.exact = _EXACT.get(typ) if isinstance(typ, str) else None
        self.int_or_string = bool(schema.get(INT_OR_STRING))
        # The type a null is refused as (None: null is allowed).
        self.null_type = None
        if not schema.get("nullable") and (typ or self.int_or_string):
            self.null_type = typ or "integer-or-string"
        enum = schema.get("enum")
        self.enum = enum if isinstance(enum, list) else None
        self.enum_texts = [_enum_text(e) for e in enum] if isinstance(enum, list) else []
        # Whether any check of a string, a number, a list or an object's own applies.
        self.string = any(k in schema for k in ("maxLength", "minLength", "pattern", "format"))
        self.max_length = schema.get("maxLength")
        self.min_length = schema.get("minLength")
        pattern = schema.get("pattern")
        self.pattern = pattern if isinstance(pattern, str) else None
        try:
            self.pattern_re = compile_pattern(pattern) if isinstance(pattern, str) else None
        except re.error:
            self.pattern_re = None
        fmt = schema.get("format")
        self.format = fmt if isinstance(fmt, str) else ""
        self.number = any(k in schema for k in ("maximum", "minimum", "multipleOf"))
        self.array = any(k in schema for k in ("maxItems", "minItems", "uniqueItems", LIST_TYPE))
        self.object = any(k in schema for k in ("maxProperties", "minProperties", "required", EMBEDDED))
        props = schema.get("properties")
        self.has_props = isinstance(props, dict)
        self.props = (
            [(key, _Plan(sub)) for key, sub in props.items() if isinstance(sub, dict)] if self.has_props else []
        )
        self.prop_map = dict(self.props)
        self.known = frozenset(props) if isinstance(props, dict) else frozenset()
        addl, items = schema.get("additionalProperties"), schema.get("items")
        self.addl = _Plan(addl) if isinstance(addl, dict) else None
        self.addl_true = addl is True
        self.items = _Plan(items) if isinstance(items, dict) else None
        self.preserve = bool(schema.get(PRESERVE))
        self.embedded = bool(schema.get(EMBEDDED))
        # Defaulting: the properties' defaults, the properties with defaults at or
        # below them, and whether this node has any at or below it.
        self.defaults = [
            (key, sub.schema["default"], bool(sub.schema.get("nullable")))
            for key, sub in self.props
            if "default" in sub.schema
        ]
        self.defaulted_props = [(key, sub) for key, sub in self.props if sub.defaulted]
        self.defaulted: bool = "default" in schema or any(
            c is not None and c.defaulted for c in (*(sub for _, sub in self.props), self.addl, self.items)
        )
        self.junctors: dict[str, Any] = {}
        for name in ("allOf", "anyOf", "oneOf"):
            subs = schema.get(name)
            if isinstance(subs, list) and subs:
                self.junctors[name] = [_Plan(sub) if isinstance(sub, dict) else None for sub in subs]
        if isinstance(schema.get("not"), dict):
            self.junctors["not"] = _Plan(schema["not"])
        self.ok = _leaf_check(self)


def _leaf_check(p: _Plan) -> Any:
    """For a scalar node with only plain checks (type, bounds, length, pattern): a test
    that a value certainly passes them all, so that the common case skips the
    validation call and its path text; None for any other node. A value failing the
    test is validated in full (for its errors)."""
    schema = p.schema
    if p.junctors or p.enum is not None or p.int_or_string or p.typ not in _EXACT or p.typ in ("object", "array"):
        return None
    if p.typ == "boolean":
        return lambda x: type(x) is bool
    if p.typ == "string":
        if p.format or (p.pattern is not None and p.pattern_re is None):
            return None
        if any(b is not None and type(b) is not int for b in (p.max_length, p.min_length)):
            return None
        search = p.pattern_re.search if p.pattern_re is not None else None
        return _string_check(p.max_length, p.min_length or 0, search)
    if "multipleOf" in schema or schema.get("exclusiveMaximum") or schema.get("exclusiveMinimum"):
        return None
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if any(b is not None and (type(b) not in (int, float)) for b in (lo, hi)):
        return None
    types = (int,) if p.typ == "integer" else (int, float)
    return lambda x: type(x) in types and (lo is None or x >= lo) and (hi is None or x <= hi)


def _string_check(longest: int | None, shortest: int, search: Any) -> Any:
    def ok(x: Any) -> bool:
        if type(x) is not str:
            return False
        n = len(x)
        return (longest is None or n <= longest) and n >= shortest and (search is None or search(x) is not None)

    return ok


_PLANS: dict[int, tuple[dict, _Plan]] = {}


def _plan(schema: dict) -> _Plan:
    """The plan of ``schema`` (remembered per schema object)."""
    cached = _PLANS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    plan = _Plan(schema)
    if len(_PLANS) > 1024:
        _PLANS.clear()
    _PLANS[id(schema)] = (schema, plan)
    return plan


def _validate(value: Any, p: _Plan, path: str, errs: list[v.FieldError], root: bool = False) -> None:
    if value is None:
        if p.null_type is not None:
            errs.append(v.FieldError.invalid(path, "null", f'{path} in body must be of type {p.null_type}: "null"'))
        return
    t = type(value)
    if p.int_or_string:
        if not (isinstance(value, str) or _is_type(value, "integer")):
            errs.append(_type_error(path, value, "integer-or-string"))
            return
    elif p.typ and t is not p.exact and not _is_type(value, p.typ):
        errs.append(_type_error(path, value, p.typ))
        return
    if p.enum is not None and value not in p.enum:
        errs.append(v.FieldError.not_supported(path, value, p.enum_texts))
    # Decoded JSON has exactly these types; the isinstance chain is for anything else.
    if t is str:
        if p.string:
            _validate_string(value, p, path, errs)
    elif t is dict:
        _validate_object(value, p, path, errs, root)
    elif t is list:
        _validate_array(value, p, path, errs)
    elif t is int or t is float:
        if p.number:
            _validate_number(value, p.schema, path, errs)
    elif t is bool:
        pass
    elif isinstance(value, str):
        _validate_string(value, p, path, errs)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(value, p.schema, path, errs)
    elif isinstance(value, list):
        _validate_array(value, p, path, errs)
    elif isinstance(value, dict):
        _validate_object(value, p, path, errs, root)
    if p.junctors:
        _validate_junctors(value, p.junctors, path, errs, root)


def _junctor_errors(value: Any, p: _Plan | None, path: str, root: bool) -> list[v.FieldError]:
    found: list[v.FieldError] = []
    if p is not None:
        _validate(value, p, path, found, root)
    return found


def _composite(path: str, text: str) -> v.FieldError:
    """A junctor's own error, as upstream reports it: on no field, the value's path quoted."""
    return v.FieldError.invalid("", "", f"{v.go_quote(path)} {text}")


def _validate_junctors(value: Any, junctors: dict[str, Any], path: str, errs: list[v.FieldError], root: bool) -> None:
    """``allOf`` (every schema), ``anyOf`` (at least one), ``oneOf`` (exactly one) and
    ``not`` (must fail), with upstream's messages: the junctor's own error, and the
    errors of the alternative that came nearest (the one with fewest errors)."""
    all_of = junctors.get("allOf")
    if all_of:
        passed = 0
        for sub in all_of:
            found = _junctor_errors(value, sub, path, root)
            passed += not found
            errs += found
        if passed != len(all_of):
            errs.append(
                _composite(path, "must validate all the schemas (allOf)" + (". None validated" if not passed else ""))
            )
    any_of = junctors.get("anyOf")
    if any_of:
        best: list[v.FieldError] | None = None
        for sub in any_of:
            found = _junctor_errors(value, sub, path, root)
            if not found:
                best = None
                break
            if best is None or len(found) < len(best):
                best = found
        else:
            errs.append(_composite(path, "must validate at least one schema (anyOf)"))
            errs += best or []
    one_of = junctors.get("oneOf")
    if one_of:
        valid = 0
        nearest: list[v.FieldError] | None = None
        for sub in one_of:
            found = _junctor_errors(value, sub, path, root)
            if not found:
                valid += 1
            elif nearest is None or len(found) < len(nearest):
                nearest = found
        if valid != 1:
            more = "Found none valid" if not valid else f"Found {valid} valid alternatives"
            errs.append(_composite(path, f"must validate one and only one schema (oneOf). {more}"))
            if not valid:
                errs += nearest or []
    if "not" in junctors and not _junctor_errors(value, junctors["not"], path, root):
        errs.append(_composite(path, "must not validate the schema (not)"))


def _enum_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _validate_string(value: str, p: _Plan, path: str, errs: list[v.FieldError]) -> None:
    n = len(value)
    if p.max_length is not None and n > p.max_length:
        errs.append(v.FieldError(v.FIELD_VALUE_TOO_LONG, path, value, f"may not be longer than {p.max_length}"))
    if p.min_length is not None and n < p.min_length:
        errs.append(v.FieldError.invalid(path, value, f"{path} in body should be at least {p.min_length} chars long"))
    # A pattern that does not compile was refused when the definition was written.
    if p.pattern_re is not None and p.pattern_re.search(value) is None:
        errs.append(v.FieldError.invalid(path, value, f"{path} in body should match '{p.pattern}'"))
    fmt = p.format
    if fmt and not formats.valid(fmt, value):
        errs.append(v.FieldError.invalid(path, value, f"{path} in body must be of type {fmt}: {v.go_quote(value)}"))


def _validate_number(value: float, schema: dict, path: str, errs: list[v.FieldError]) -> None:
    if "maximum" in schema:
        mx = schema["maximum"]
        if schema.get("exclusiveMaximum"):
            if value >= mx:
                errs.append(v.FieldError.invalid(path, value, f"{path} in body should be less than {_num(mx)}"))
        elif value > mx:
            errs.append(v.FieldError.invalid(path, value, f"{path} in body should be less than or equal to {_num(mx)}"))
    if "minimum" in schema:
        mn = schema["minimum"]
        if schema.get("exclusiveMinimum"):
            if value <= mn:
                errs.append(v.FieldError.invalid(path, value, f"{path} in body should be greater than {_num(mn)}"))
        elif value < mn:
            errs.append(
                v.FieldError.invalid(path, value, f"{path} in body should be greater than or equal to {_num(mn)}")
            )
    mult = schema.get("multipleOf")
    if isinstance(mult, (int, float)) and mult > 0:
        q = value / mult
        if abs(q - round(q)) > 1e-9:
            errs.append(v.FieldError.invalid(path, value, f"{path} in body should be a multiple of {_num(mult)}"))


def _canonical(value: Any) -> Any:
    """A key equal for equal JSON values (scalars keep their type: 1, 1.0 and true differ)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return type(value), value


def _validate_array(value: list, p: _Plan, path: str, errs: list[v.FieldError]) -> None:
    if p.array:
        _validate_list_bounds(value, p.schema, path, errs)
    items = p.items
    if items is not None:
        ok = items.ok
        for i, item in enumerate(value):
            if ok is not None and ok(item):
                continue
            _validate(item, items, f"{path}[{i}]", errs)


def _validate_list_bounds(value: list, schema: dict, path: str, errs: list[v.FieldError]) -> None:
    """A list's own checks: its length, and its items unique (a set, or a map by keys)."""
    n = len(value)
    if "maxItems" in schema and n > schema["maxItems"]:
        errs.append(v.FieldError(v.FIELD_VALUE_TOO_MANY, path, n, f"must have at most {schema['maxItems']} items"))
    if "minItems" in schema and n < schema["minItems"]:
        errs.append(v.FieldError.invalid(path, n, f"{path} in body should have at least {schema['minItems']} items"))
    list_type = schema.get(LIST_TYPE)
    if schema.get("uniqueItems") or list_type == "set":
        first = type(value[0]) if value else None
        if first in (str, int, bool) and all(type(x) is first for x in value) and len(set(value)) == n:
            return  # scalars of one type, all different (the common case, without keys per item)
        seen: set[Any] = set()
        for i, item in enumerate(value):
            c = _canonical(item)
            if c in seen:
                errs.append(v.FieldError.duplicate(f"{path}[{i}]", item))
            seen.add(c)
    elif list_type == "map":
        keys = schema.get(LIST_MAP_KEYS) or []
        seen_keys: set[Any] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            c = _canonical({k: item.get(k) for k in keys})
            if c in seen_keys:
                errs.append(v.FieldError.duplicate(f"{path}[{i}]", {k: item.get(k) for k in keys}))
            seen_keys.add(c)


def _validate_object(value: dict, p: _Plan, path: str, errs: list[v.FieldError], root: bool) -> None:
    if p.object:
        _validate_object_own(value, p.schema, path, errs, root)
    for key, sub in p.props:
        if key in value and not (root and key == "metadata"):
            item = value[key]
            if sub.ok is not None and sub.ok(item):
                continue
            _validate(item, sub, _child(path, key), errs)
    if p.addl is not None:
        for key, item in value.items():
            _validate(item, p.addl, f"{path}[{key}]" if path else key, errs)


def _validate_object_own(value: dict, schema: dict, path: str, errs: list[v.FieldError], root: bool) -> None:
    """An object's own checks: its property count, required and embedded fields."""
    if "maxProperties" in schema or "minProperties" in schema:
        n = len([k for k in value if not (root and k in _TYPE_META)])
        if "maxProperties" in schema and n > schema["maxProperties"]:
            errs.append(
                v.FieldError(v.FIELD_VALUE_TOO_MANY, path, n, f"must have at most {schema['maxProperties']} items")
            )
        if "minProperties" in schema and n < schema["minProperties"]:
            errs.append(
                v.FieldError.invalid(
                    path, n, f"{path} in body should have at least {schema['minProperties']} properties"
                )
            )
    for name in schema.get("required") or ():
        if name not in value:
            errs.append(v.FieldError.required(_child(path, name)))
    if schema.get(EMBEDDED):  # an embedded object names what it is
        for name in ("apiVersion", "kind"):
            if not value.get(name):
                errs.append(v.FieldError.required(_child(path, name), "must not be empty"))

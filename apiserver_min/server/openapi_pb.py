"""The Swagger 2.0 document in protobuf form: gnostic's ``openapi.v2.Document``.

kubectl's client-side validation (``--validate=strict`` for a kind whose
``patch`` operation carries no ``fieldValidation``, i.e. the create-only review
kinds) downloads ``/openapi/v2`` asking for
``application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` only and reads
it with ``proto.Unmarshal`` into gnostic's ``openapi_v2.Document``, then with
kube-openapi's ``util/proto`` parser (``definitions``, each schema's
``properties``/``items``/``additionalProperties``/``$ref``/``type`` and vendor
extensions such as ``x-kubernetes-group-version-kind``).

Upstream produces those bytes by parsing its JSON document with gnostic's
compiler (``openapi_v2.ParseDocument``) and marshalling the result. This module
follows the same JSON -> message mapping for a JSON document already in memory
(``swagger_document`` in ``openapi.py``):

* every object becomes its message, fields in field-number order, proto3
  zero values left out, a present object (``"properties": {}``) written even
  when empty -- kube-openapi tells a struct from a map by that presence;
* JSON maps become repeated ``Named<Value>{name=1, value=2}`` pairs in the
  document's key order (``definitions``, ``properties``, ``paths``, the
  ``responses`` codes, ``securityDefinitions`` ...);
* keys starting ``x-`` become ``vendor_extension`` ``NamedAny``s whose
  ``Any.yaml`` (field 2) is the value as YAML text; ``default``, ``example`` and
  each ``enum`` item are ``Any``s the same way;
* ``$ref`` is the ``_ref`` field; a schema's ``type`` is ``TypeItem{value}``,
  ``items`` is ``ItemsItem{schema}``, ``additionalProperties`` is the
  ``AdditionalPropertiesItem`` oneof (schema or boolean);
* the oneofs are chosen as gnostic's compiler chooses them: a parameter is a
  ``BodyParameter`` when ``in: body`` and otherwise a ``NonBodyParameter`` with
  the header/formData/query/path sub-schema; a parameter or response holding
  ``$ref`` is a ``JsonReference``; a response schema of ``type: file`` a
  ``FileSchema``; a security definition by its ``type`` (and oauth2 ``flow``).

A key gnostic would reject ("has invalid property") is a :class:`ValueError`
naming its JSON path, as is a value of the wrong JSON type: the document is
generated from declarations, so that is a bug to see at once, not a document
to serve half-converted.

The field numbers below are wire facts of gnostic's ``openapiv2/OpenAPIv2.proto``
(package ``openapi.v2``); nothing is generated from it.
"""

from __future__ import annotations

import json
import re
import struct as _struct
from typing import Any, Callable

from ..api.protobuf import uvarint

__all__ = ["document_bytes", "yaml_text"]

# --- field layouts -----------------------------------------------------------------------
# kinds of fields
STR, BOOL, DBL, I64, STRS, MSG, MSGS, ANY, ANYS, EXT = range(10)


class _Layout:
    """One message: its fields by JSON key (kind, number, message type), the number of its
    ``vendor_extension`` field (0: none) and the keys gnostic requires."""

    __slots__ = ("name", "fields", "ext", "required")

    def __init__(self, name: str, fields: list[tuple], ext: int = 0, required: tuple[str, ...] = ()):
        self.name = name
        self.fields = {f[0]: (f[1], f[2], f[3] if len(f) > 3 else None) for f in sorted(fields, key=lambda f: f[2])}
        self.ext = ext
        self.required = required


def _simple_schema_fields(base: int) -> list[tuple]:
    """The primitive-schema fields shared by the parameter sub-schemas, ``PrimitivesItems``
    and ``Header``, numbered from ``base`` (the number of ``type``)."""
    keys = [
        ("type", STR),
        ("format", STR),
        ("items", MSG, "PrimitivesItems"),
        ("collectionFormat", STR),
        ("default", ANY),
        ("maximum", DBL),
        ("exclusiveMaximum", BOOL),
        ("minimum", DBL),
        ("exclusiveMinimum", BOOL),
        ("maxLength", I64),
        ("minLength", I64),
        ("pattern", STR),
        ("maxItems", I64),
        ("minItems", I64),
        ("uniqueItems", BOOL),
        ("enum", ANYS),
        ("multipleOf", DBL),
    ]
    return [(k[0], k[1], base + i, *k[2:]) for i, k in enumerate(keys)]


def _param_sub_schema(name: str, allow_empty: bool, required: tuple[str, ...] = ()) -> _Layout:
    head = [("required", BOOL, 1), ("in", STR, 2), ("description", STR, 3), ("name", STR, 4)]
    if allow_empty:  # query and formData: allowEmptyValue = 5, type = 6 ... multipleOf = 22, ext 23
        head.append(("allowEmptyValue", BOOL, 5))
        return _Layout(name, head + _simple_schema_fields(6), 23, required)
    return _Layout(name, head + _simple_schema_fields(5), 22, required)  # header, path: ext 22


_LAYOUTS: dict[str, _Layout] = {
    layout.name: layout
    for layout in [
        _Layout(
            "Document",
            [
                ("swagger", STR, 1),
                ("info", MSG, 2, "Info"),
                ("host", STR, 3),
                ("basePath", STR, 4),
                ("schemes", STRS, 5),
                ("consumes", STRS, 6),
                ("produces", STRS, 7),
                ("paths", MSG, 8, "Paths"),
                ("definitions", MSG, 9, "Definitions"),
                ("parameters", MSG, 10, "ParameterDefinitions"),
                ("responses", MSG, 11, "ResponseDefinitions"),
                ("security", MSGS, 12, "SecurityRequirement"),
                ("securityDefinitions", MSG, 13, "SecurityDefinitions"),
                ("tags", MSGS, 14, "Tag"),
                ("externalDocs", MSG, 15, "ExternalDocs"),
            ],
            16,
            ("info", "paths", "swagger"),
        ),
        _Layout(
            "Info",
            [
                ("title", STR, 1),
                ("version", STR, 2),
                ("description", STR, 3),
                ("termsOfService", STR, 4),
                ("contact", MSG, 5, "Contact"),
                ("license", MSG, 6, "License"),
            ],
            7,
            ("title", "version"),
        ),
        _Layout("Contact", [("name", STR, 1), ("url", STR, 2), ("email", STR, 3)], 4),
        _Layout("License", [("name", STR, 1), ("url", STR, 2)], 3, ("name",)),
        _Layout("ExternalDocs", [("description", STR, 1), ("url", STR, 2)], 3, ("url",)),
        _Layout(
            "Tag", [("name", STR, 1), ("description", STR, 2), ("externalDocs", MSG, 3, "ExternalDocs")], 4, ("name",)
        ),
        _Layout(
            "Xml",
            [("name", STR, 1), ("namespace", STR, 2), ("prefix", STR, 3), ("attribute", BOOL, 4), ("wrapped", BOOL, 5)],
            6,
        ),
        _Layout(
            "PathItem",
            [
                ("$ref", STR, 1),
                ("get", MSG, 2, "Operation"),
                ("put", MSG, 3, "Operation"),
                ("post", MSG, 4, "Operation"),
                ("delete", MSG, 5, "Operation"),
                ("options", MSG, 6, "Operation"),
                ("head", MSG, 7, "Operation"),
                ("patch", MSG, 8, "Operation"),
                ("parameters", MSGS, 9, "ParametersItem"),
            ],
            10,
        ),
        _Layout(
            "Operation",
            [
                ("tags", STRS, 1),
                ("summary", STR, 2),
                ("description", STR, 3),
                ("externalDocs", MSG, 4, "ExternalDocs"),
                ("operationId", STR, 5),
                ("produces", STRS, 6),
                ("consumes", STRS, 7),
                ("parameters", MSGS, 8, "ParametersItem"),
                ("responses", MSG, 9, "Responses"),
                ("schemes", STRS, 10),
                ("deprecated", BOOL, 11),
                ("security", MSGS, 12, "SecurityRequirement"),
            ],
            13,
            ("responses",),
        ),
        _Layout(
            "BodyParameter",
            [
                ("description", STR, 1),
                ("name", STR, 2),
                ("in", STR, 3),
                ("required", BOOL, 4),
                ("schema", MSG, 5, "Schema"),
            ],
            6,
            ("in", "name", "schema"),
        ),
        _param_sub_schema("HeaderParameterSubSchema", False),
        _param_sub_schema("FormDataParameterSubSchema", True),
        _param_sub_schema("QueryParameterSubSchema", True),
        _param_sub_schema("PathParameterSubSchema", False, ("required",)),
        _Layout("PrimitivesItems", _simple_schema_fields(1), 18),
        _Layout("Header", _simple_schema_fields(1) + [("description", STR, 18)], 19, ("type",)),
        _Layout("JsonReference", [("$ref", STR, 1), ("description", STR, 2)], 0, ("$ref",)),
        _Layout(
            "Response",
            [
                ("description", STR, 1),
                ("schema", MSG, 2, "SchemaItem"),
                ("headers", MSG, 3, "Headers"),
                ("examples", MSG, 4, "Examples"),
            ],
            5,
            ("description",),
        ),
        _Layout(
            "Schema",
            [
                ("$ref", STR, 1),
                ("format", STR, 2),
                ("title", STR, 3),
                ("description", STR, 4),
                ("default", ANY, 5),
                ("multipleOf", DBL, 6),
                ("maximum", DBL, 7),
                ("exclusiveMaximum", BOOL, 8),
                ("minimum", DBL, 9),
                ("exclusiveMinimum", BOOL, 10),
                ("maxLength", I64, 11),
                ("minLength", I64, 12),
                ("pattern", STR, 13),
                ("maxItems", I64, 14),
                ("minItems", I64, 15),
                ("uniqueItems", BOOL, 16),
                ("maxProperties", I64, 17),
                ("minProperties", I64, 18),
                ("required", STRS, 19),
                ("enum", ANYS, 20),
                ("additionalProperties", MSG, 21, "AdditionalPropertiesItem"),
                ("type", MSG, 22, "TypeItem"),
                ("items", MSG, 23, "ItemsItem"),
                ("allOf", MSGS, 24, "Schema"),
                ("properties", MSG, 25, "Properties"),
                ("discriminator", STR, 26),
                ("readOnly", BOOL, 27),
                ("xml", MSG, 28, "Xml"),
                ("externalDocs", MSG, 29, "ExternalDocs"),
                ("example", ANY, 30),
            ],
            31,
        ),
        _Layout(
            "FileSchema",
            [
                ("format", STR, 1),
                ("title", STR, 2),
                ("description", STR, 3),
                ("default", ANY, 4),
                ("required", STRS, 5),
                ("type", STR, 6),
                ("readOnly", BOOL, 7),
                ("externalDocs", MSG, 8, "ExternalDocs"),
                ("example", ANY, 9),
            ],
            10,
            ("type",),
        ),
        _Layout("BasicAuthenticationSecurity", [("type", STR, 1), ("description", STR, 2)], 3, ("type",)),
        _Layout(
            "ApiKeySecurity",
            [("type", STR, 1), ("name", STR, 2), ("in", STR, 3), ("description", STR, 4)],
            5,
            ("in", "name", "type"),
        ),
        _Layout(
            "Oauth2ImplicitSecurity",
            [
                ("type", STR, 1),
                ("flow", STR, 2),
                ("scopes", MSG, 3, "Oauth2Scopes"),
                ("authorizationUrl", STR, 4),
                ("description", STR, 5),
            ],
            6,
            ("authorizationUrl", "flow", "type"),
        ),
        _Layout(
            "Oauth2PasswordSecurity",
            [
                ("type", STR, 1),
                ("flow", STR, 2),
                ("scopes", MSG, 3, "Oauth2Scopes"),
                ("tokenUrl", STR, 4),
                ("description", STR, 5),
            ],
            6,
            ("flow", "tokenUrl", "type"),
        ),
        _Layout(
            "Oauth2ApplicationSecurity",
            [
                ("type", STR, 1),
                ("flow", STR, 2),
                ("scopes", MSG, 3, "Oauth2Scopes"),
                ("tokenUrl", STR, 4),
                ("description", STR, 5),
            ],
            6,
            ("flow", "tokenUrl", "type"),
        ),
        _Layout(
            "Oauth2AccessCodeSecurity",
            [
                ("type", STR, 1),
                ("flow", STR, 2),
                ("scopes", MSG, 3, "Oauth2Scopes"),
                ("authorizationUrl", STR, 4),
                ("tokenUrl", STR, 5),
                ("description", STR, 6),
            ],
            7,
            ("authorizationUrl", "flow", "tokenUrl", "type"),
        ),
    ]
}

# JSON objects that are maps: the message's repeated Named<Value> field (number 1, or as
# given), the value's message type, and the keys that belong to it.
#   name -> (field number, value type, key pattern or None for every key, ext field number)
_MAPS: dict[str, tuple[int, str, re.Pattern | None, int]] = {
    "Definitions": (1, "Schema", None, 0),
    "Properties": (1, "Schema", None, 0),
    "ParameterDefinitions": (1, "Parameter", None, 0),
    "ResponseDefinitions": (1, "Response", None, 0),
    "SecurityDefinitions": (1, "SecurityDefinitionsItem", None, 0),
    "SecurityRequirement": (1, "StringArray", None, 0),
    "Headers": (1, "Header", None, 0),
    "Examples": (1, "<any>", None, 0),
    "Oauth2Scopes": (1, "<string>", None, 0),
    "Responses": (1, "ResponseValue", re.compile(r"^([0-9]{3})$|^(default)$"), 2),
    "Paths": (2, "PathItem", re.compile(r"^/"), 1),
}

# oneof members: message type -> field number inside its oneof holder
_SECURITY = {"basic": (1, "BasicAuthenticationSecurity"), "apiKey": (2, "ApiKeySecurity")}
_OAUTH2 = {
    "implicit": (3, "Oauth2ImplicitSecurity"),
    "password": (4, "Oauth2PasswordSecurity"),
    "application": (5, "Oauth2ApplicationSecurity"),
    "accessCode": (6, "Oauth2AccessCodeSecurity"),
}
_NON_BODY = {
    "header": (1, "HeaderParameterSubSchema"),
    "formData": (2, "FormDataParameterSubSchema"),
    "query": (3, "QueryParameterSubSchema"),
    "path": (4, "PathParameterSubSchema"),
}


# --- wire helpers -----------------------------------------------------------------------------


def _key(number: int, wire: int) -> bytes:
    return uvarint(number << 3 | wire)


def _ld(number: int, payload: bytes) -> bytes:
    return uvarint(number << 3 | 2) + uvarint(len(payload)) + payload


def _text(number: int, s: str) -> bytes:
    return _ld(number, s.encode("utf-8"))


def _varint64(n: int) -> bytes:
    return uvarint(n & 0xFFFFFFFFFFFFFFFF)


class _Converter:
    def __init__(self) -> None:
        self._yaml_cache: dict[str, bytes] = {}

    # -- errors ---------------------------------------------------------------------------
    @staticmethod
    def _fail(path: str, what: str) -> ValueError:
        return ValueError(f"OpenAPI v2 protobuf: {path or '#'}: {what}")

    # -- Any ------------------------------------------------------------------------------
    def _any(self, value: Any) -> bytes:
        """An ``Any{yaml=2}`` payload for a JSON value (memoised: the same small values recur)."""
        if isinstance(value, (dict, list)) and value:
            return _text(2, yaml_text(value))
        key = json.dumps(value)
        out = self._yaml_cache.get(key)
        if out is None:
            out = self._yaml_cache[key] = _text(2, yaml_text(value))
        return out

    def _extensions(self, number: int, obj: dict) -> list[bytes]:
        return [_ld(number, _text(1, k) + _ld(2, self._any(v))) for k, v in obj.items() if k.startswith("x-")]

    # -- messages -------------------------------------------------------------------------
    def message(self, value: Any, mtype: str, path: str) -> bytes:
        special = _SPECIAL.get(mtype)
        if special is not None:
            return special(self, value, path)
        if mtype in _MAPS:
            return self._map(value, mtype, path)
        layout = _LAYOUTS[mtype]
        if not isinstance(value, dict):
            raise self._fail(path, f"{mtype} must be an object, not {type(value).__name__}")
        fields = layout.fields
        for k in value:
            if k not in fields and not (layout.ext and k.startswith("x-")):
                raise self._fail(path, f"{mtype} has no property {k!r}")
        for k in layout.required:
            if k not in value:
                raise self._fail(path, f"{mtype} is missing required property {k!r}")
        out: list[bytes] = []
        for k, (kind, number, sub) in fields.items():
            if k not in value:
                continue
            v = value[k]
            if kind == STR:
                if not isinstance(v, str):
                    raise self._fail(f"{path}/{k}", f"must be a string, not {type(v).__name__}")
                if v:
                    out.append(_text(number, v))
            elif kind == MSG:
                out.append(_ld(number, self.message(v, sub, f"{path}/{k}")))
            elif kind == STRS:
                if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                    raise self._fail(f"{path}/{k}", "must be a list of strings")
                out.extend(_text(number, s) for s in v)
            elif kind == BOOL:
                if not isinstance(v, bool):
                    raise self._fail(f"{path}/{k}", f"must be a boolean, not {type(v).__name__}")
                if v:
                    out.append(_key(number, 0) + b"\x01")
            elif kind == ANY:
                out.append(_ld(number, self._any(v)))
            elif kind == ANYS:
                if not isinstance(v, list):
                    raise self._fail(f"{path}/{k}", "must be a list")
                out.extend(_ld(number, self._any(item)) for item in v)
            elif kind == MSGS:
                if not isinstance(v, list):
                    raise self._fail(f"{path}/{k}", "must be a list")
                out.extend(_ld(number, self.message(item, sub, f"{path}/{k}/{i}")) for i, item in enumerate(v))
            elif kind == DBL:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise self._fail(f"{path}/{k}", "must be a number")
                if v:
                    out.append(_key(number, 1) + _struct.pack("<d", float(v)))
            elif kind == I64:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise self._fail(f"{path}/{k}", "must be an integer")
                if v:
                    out.append(_key(number, 0) + _varint64(v))
        if layout.ext:
            out.extend(self._extensions(layout.ext, value))
        return b"".join(out)

    def _map(self, value: Any, mtype: str, path: str) -> bytes:
        number, vtype, pattern, ext = _MAPS[mtype]
        if not isinstance(value, dict):
            raise self._fail(path, f"{mtype} must be an object, not {type(value).__name__}")
        out: list[bytes] = []
        pairs: list[bytes] = []
        for k, v in value.items():
            if pattern is not None and not pattern.search(k):
                if ext and k.startswith("x-"):
                    continue
                raise self._fail(path, f"{mtype} has no property {k!r}")
            sub = f"{path}/{k.replace('~', '~0').replace('/', '~1')}"
            if vtype == "<any>":
                payload = _ld(2, self._any(v))
            elif vtype == "<string>":
                if not isinstance(v, str):
                    raise self._fail(sub, "must be a string")
                payload = _text(2, v) if v else b""
            else:
                payload = _ld(2, self.message(v, vtype, sub))
            pairs.append(_ld(number, (_text(1, k) if k else b"") + payload))
        if ext and ext < number:
            out.extend(self._extensions(ext, value))
        out.extend(pairs)
        if ext and ext > number:
            out.extend(self._extensions(ext, value))
        return b"".join(out)

    # -- oneofs and odd shapes --------------------------------------------------------------
    def _type_item(self, value: Any, path: str) -> bytes:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise self._fail(path, "type must be a string or a list of strings")
        return b"".join(_text(1, s) for s in items)

    def _items_item(self, value: Any, path: str) -> bytes:
        if isinstance(value, dict):
            return _ld(1, self.message(value, "Schema", path))
        if isinstance(value, list):
            return b"".join(_ld(1, self.message(v, "Schema", f"{path}/{i}")) for i, v in enumerate(value))
        raise self._fail(path, "items must be a schema or a list of schemas")

    def _additional_properties(self, value: Any, path: str) -> bytes:
        if isinstance(value, bool):  # a oneof member is written even when false
            return _key(2, 0) + (b"\x01" if value else b"\x00")
        if isinstance(value, dict):
            return _ld(1, self.message(value, "Schema", path))
        raise self._fail(path, "additionalProperties must be a schema or a boolean")

    def _parameter(self, value: Any, path: str) -> bytes:
        if not isinstance(value, dict):
            raise self._fail(path, "a parameter must be an object")
        where = value.get("in")
        if where == "body":
            return _ld(1, self.message(value, "BodyParameter", path))
        member = _NON_BODY.get(where) if isinstance(where, str) else None
        if member is None:
            raise self._fail(path, f"parameter 'in' must be body, header, formData, query or path, not {where!r}")
        for k in ("name", "type"):
            if k not in value:
                raise self._fail(path, f"a {where} parameter is missing required property {k!r}")
        number, sub = member
        return _ld(2, _ld(number, self.message(value, sub, path)))

    def _parameters_item(self, value: Any, path: str) -> bytes:
        if isinstance(value, dict) and "$ref" in value:
            return _ld(2, self.message(value, "JsonReference", path))
        return _ld(1, self._parameter(value, path))

    def _response_value(self, value: Any, path: str) -> bytes:
        if isinstance(value, dict) and "$ref" in value:
            return _ld(2, self.message(value, "JsonReference", path))
        return _ld(1, self.message(value, "Response", path))

    def _schema_item(self, value: Any, path: str) -> bytes:
        if (
            isinstance(value, dict)
            and value.get("type") == "file"
            and all(k in _LAYOUTS["FileSchema"].fields or k.startswith("x-") for k in value)
        ):
            return _ld(2, self.message(value, "FileSchema", path))
        return _ld(1, self.message(value, "Schema", path))

    def _security_item(self, value: Any, path: str) -> bytes:
        if not isinstance(value, dict):
            raise self._fail(path, "a security definition must be an object")
        kind = value.get("type")
        member = _SECURITY.get(kind) if kind != "oauth2" else _OAUTH2.get(value.get("flow"))
        if member is None:
            raise self._fail(path, f"unknown security definition type {kind!r} (flow {value.get('flow')!r})")
        number, sub = member
        return _ld(number, self.message(value, sub, path))

    def _string_array(self, value: Any, path: str) -> bytes:
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise self._fail(path, "must be a list of strings")
        return b"".join(_text(1, s) for s in value)


_SPECIAL: dict[str, Callable[[_Converter, Any, str], bytes]] = {
    "TypeItem": _Converter._type_item,
    "ItemsItem": _Converter._items_item,
    "AdditionalPropertiesItem": _Converter._additional_properties,
    "Parameter": _Converter._parameter,
    "ParametersItem": _Converter._parameters_item,
    "ResponseValue": _Converter._response_value,
    "SchemaItem": _Converter._schema_item,
    "SecurityDefinitionsItem": _Converter._security_item,
    "StringArray": _Converter._string_array,
}


def document_bytes(doc: dict) -> bytes:
    """gnostic's ``openapi.v2.Document`` bytes for a Swagger 2.0 JSON document (a dict as
    parsed from JSON, in the document's key order)."""
    return _Converter().message(doc, "Document", "#")


# --- YAML for Any values --------------------------------------------------------------------
# gnostic stores each Any as YAML (its compiler re-marshals the JSON node in block style).
# Readers parse it back (kubectl: yaml.v2 into map[string]string or interface{}), so what
# matters is that every value reads back as the same JSON value: a string that YAML 1.1
# would read as anything else (a number, bool, null, empty, or text needing quotes) is
# double-quoted.

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./,=+-]*\Z")
_YAML11_WORDS = frozenset(
    w
    for word in ("y", "yes", "n", "no", "true", "false", "on", "off", "null")
    for w in (word, word.capitalize(), word.upper())
)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return json.dumps(v)
    if isinstance(v, str):
        if _PLAIN.match(v) and v not in _YAML11_WORDS:
            return v
        return json.dumps(v, ensure_ascii=False)
    raise TypeError(f"not a JSON value: {v!r}")


def _block(v: Any, indent: str) -> list[str]:
    """Lines (without the final newline) of a non-empty mapping or sequence at ``indent``."""
    lines: list[str] = []
    if isinstance(v, dict):
        for k, item in v.items():
            head = f"{indent}{_scalar(str(k))}:"
            if isinstance(item, (dict, list)) and item:
                lines.append(head)
                lines.extend(_block(item, indent + "    "))
            else:
                lines.append(f"{head} {_flow_empty_or_scalar(item)}")
        return lines
    for item in v:
        if isinstance(item, (dict, list)) and item:
            inner = _block(item, "")
            lines.append(f"{indent}- {inner[0]}")
            lines.extend(f"{indent}  {ln}" for ln in inner[1:])
        else:
            lines.append(f"{indent}- {_flow_empty_or_scalar(item)}")
    return lines


def _flow_empty_or_scalar(v: Any) -> str:
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _scalar(v)


def yaml_text(value: Any) -> str:
    """A JSON value as block-style YAML text ending in a newline (gnostic's ``Any.yaml``)."""
    if isinstance(value, (dict, list)) and value:
        return "\n".join(_block(value, "")) + "\n"
    return _flow_empty_or_scalar(value) + "\n"

"""``/openapi/v2`` as gnostic's ``openapi.v2.Document`` protobuf message.

The bytes are decoded with the ``protobuf`` package through message descriptors
built here, independently of ``openapi_pb``'s own layout table, from the field
numbers of gnostic's ``openapiv2/OpenAPIv2.proto`` (package ``openapi.v2``).
The decoded message is turned back into Swagger 2.0 JSON the way gnostic's
``ToRawInfo`` does (proto3 zero values are not on the wire) and must equal the
JSON document the server serves, whole; the re-serialised message must equal
our bytes (canonical field order, presence of empty messages). Samples check
what kubectl reads: definitions found by ``x-kubernetes-group-version-kind``,
``$ref``/``type``/``items``/``properties``/``additionalProperties``, and the
``patch`` operation's ``fieldValidation`` query parameter.
"""

from __future__ import annotations

import gzip
import hashlib
import logging

import orjson
import pytest
import yaml
from aiohttp.test_utils import make_mocked_request
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from apiserver_min.api.kinds import REGISTRY
from apiserver_min.server import openapi as oa
from apiserver_min.server import openapi_pb

# --- gnostic's messages, as protobuf descriptors ------------------------------------------
# (json key or proto field name, number, type, label) -- label "" singular, "*" repeated,
# "|" member of the message's oneof. Lower-case types are scalars.

_SIMPLE = [
    ("type", 1, "string"),
    ("format", 2, "string"),
    ("items", 3, "PrimitivesItems"),
    ("collection_format", 4, "string"),
    ("default", 5, "Any"),
    ("maximum", 6, "double"),
    ("exclusive_maximum", 7, "bool"),
    ("minimum", 8, "double"),
    ("exclusive_minimum", 9, "bool"),
    ("max_length", 10, "int64"),
    ("min_length", 11, "int64"),
    ("pattern", 12, "string"),
    ("max_items", 13, "int64"),
    ("min_items", 14, "int64"),
    ("unique_items", 15, "bool"),
    ("enum", 16, "Any", "*"),
    ("multiple_of", 17, "double"),
]


def _shift(fields, by):
    return [(f[0], f[1] + by, *f[2:]) for f in fields]


_QUERY_LIKE = (
    [
        ("required", 1, "bool"),
        ("in", 2, "string"),
        ("description", 3, "string"),
        ("name", 4, "string"),
        ("allow_empty_value", 5, "bool"),
    ]
    + _shift(_SIMPLE, 5)
    + [("vendor_extension", 23, "NamedAny", "*")]
)
_PATH_LIKE = (
    [("required", 1, "bool"), ("in", 2, "string"), ("description", 3, "string"), ("name", 4, "string")]
    + _shift(_SIMPLE, 4)
    + [("vendor_extension", 22, "NamedAny", "*")]
)


def _named(value_type: str):
    return [("name", 1, "string"), ("value", 2, value_type)]


MESSAGES: dict[str, list[tuple]] = {
    "AdditionalPropertiesItem": [("schema", 1, "Schema", "|"), ("boolean", 2, "bool", "|")],
    "Any": [("yaml", 2, "string")],  # 1 is a google.protobuf.Any, never written
    "ApiKeySecurity": [
        ("type", 1, "string"),
        ("name", 2, "string"),
        ("in", 3, "string"),
        ("description", 4, "string"),
        ("vendor_extension", 5, "NamedAny", "*"),
    ],
    "BasicAuthenticationSecurity": [
        ("type", 1, "string"),
        ("description", 2, "string"),
        ("vendor_extension", 3, "NamedAny", "*"),
    ],
    "BodyParameter": [
        ("description", 1, "string"),
        ("name", 2, "string"),
        ("in", 3, "string"),
        ("required", 4, "bool"),
        ("schema", 5, "Schema"),
        ("vendor_extension", 6, "NamedAny", "*"),
    ],
    "Contact": [
        ("name", 1, "string"),
        ("url", 2, "string"),
        ("email", 3, "string"),
        ("vendor_extension", 4, "NamedAny", "*"),
    ],
    "Definitions": [("additional_properties", 1, "NamedSchema", "*")],
    "Document": [
        ("swagger", 1, "string"),
        ("info", 2, "Info"),
        ("host", 3, "string"),
        ("base_path", 4, "string"),
        ("schemes", 5, "string", "*"),
        ("consumes", 6, "string", "*"),
        ("produces", 7, "string", "*"),
        ("paths", 8, "Paths"),
        ("definitions", 9, "Definitions"),
        ("parameters", 10, "ParameterDefinitions"),
        ("responses", 11, "ResponseDefinitions"),
        ("security", 12, "SecurityRequirement", "*"),
        ("security_definitions", 13, "SecurityDefinitions"),
        ("tags", 14, "Tag", "*"),
        ("external_docs", 15, "ExternalDocs"),
        ("vendor_extension", 16, "NamedAny", "*"),
    ],
    "Examples": [("additional_properties", 1, "NamedAny", "*")],
    "ExternalDocs": [("description", 1, "string"), ("url", 2, "string"), ("vendor_extension", 3, "NamedAny", "*")],
    "FileSchema": [
        ("format", 1, "string"),
        ("title", 2, "string"),
        ("description", 3, "string"),
        ("default", 4, "Any"),
        ("required", 5, "string", "*"),
        ("type", 6, "string"),
        ("read_only", 7, "bool"),
        ("external_docs", 8, "ExternalDocs"),
        ("example", 9, "Any"),
        ("vendor_extension", 10, "NamedAny", "*"),
    ],
    "FormDataParameterSubSchema": _QUERY_LIKE,
    "Header": _SIMPLE + [("description", 18, "string"), ("vendor_extension", 19, "NamedAny", "*")],
    "HeaderParameterSubSchema": _PATH_LIKE,
    "Headers": [("additional_properties", 1, "NamedHeader", "*")],
    "Info": [
        ("title", 1, "string"),
        ("version", 2, "string"),
        ("description", 3, "string"),
        ("terms_of_service", 4, "string"),
        ("contact", 5, "Contact"),
        ("license", 6, "License"),
        ("vendor_extension", 7, "NamedAny", "*"),
    ],
    "ItemsItem": [("schema", 1, "Schema", "*")],
    "JsonReference": [("_ref", 1, "string"), ("description", 2, "string")],
    "License": [("name", 1, "string"), ("url", 2, "string"), ("vendor_extension", 3, "NamedAny", "*")],
    "NamedAny": _named("Any"),
    "NamedHeader": _named("Header"),
    "NamedParameter": _named("Parameter"),
    "NamedPathItem": _named("PathItem"),
    "NamedResponse": _named("Response"),
    "NamedResponseValue": _named("ResponseValue"),
    "NamedSchema": _named("Schema"),
    "NamedSecurityDefinitionsItem": _named("SecurityDefinitionsItem"),
    "NamedString": _named("string"),
    "NamedStringArray": _named("StringArray"),
    "NonBodyParameter": [
        ("header_parameter_sub_schema", 1, "HeaderParameterSubSchema", "|"),
        ("form_data_parameter_sub_schema", 2, "FormDataParameterSubSchema", "|"),
        ("query_parameter_sub_schema", 3, "QueryParameterSubSchema", "|"),
        ("path_parameter_sub_schema", 4, "PathParameterSubSchema", "|"),
    ],
    "Oauth2Scopes": [("additional_properties", 1, "NamedString", "*")],
    "Oauth2ImplicitSecurity": [
        ("type", 1, "string"),
        ("flow", 2, "string"),
        ("scopes", 3, "Oauth2Scopes"),
        ("authorization_url", 4, "string"),
        ("description", 5, "string"),
        ("vendor_extension", 6, "NamedAny", "*"),
    ],
    "Operation": [
        ("tags", 1, "string", "*"),
        ("summary", 2, "string"),
        ("description", 3, "string"),
        ("external_docs", 4, "ExternalDocs"),
        ("operation_id", 5, "string"),
        ("produces", 6, "string", "*"),
        ("consumes", 7, "string", "*"),
        ("parameters", 8, "ParametersItem", "*"),
        ("responses", 9, "Responses"),
        ("schemes", 10, "string", "*"),
        ("deprecated", 11, "bool"),
        ("security", 12, "SecurityRequirement", "*"),
        ("vendor_extension", 13, "NamedAny", "*"),
    ],
    "Parameter": [("body_parameter", 1, "BodyParameter", "|"), ("non_body_parameter", 2, "NonBodyParameter", "|")],
    "ParameterDefinitions": [("additional_properties", 1, "NamedParameter", "*")],
    "ParametersItem": [("parameter", 1, "Parameter", "|"), ("json_reference", 2, "JsonReference", "|")],
    "PathItem": [
        ("_ref", 1, "string"),
        ("get", 2, "Operation"),
        ("put", 3, "Operation"),
        ("post", 4, "Operation"),
        ("delete", 5, "Operation"),
        ("options", 6, "Operation"),
        ("head", 7, "Operation"),
        ("patch", 8, "Operation"),
        ("parameters", 9, "ParametersItem", "*"),
        ("vendor_extension", 10, "NamedAny", "*"),
    ],
    "PathParameterSubSchema": _PATH_LIKE,
    "Paths": [("vendor_extension", 1, "NamedAny", "*"), ("path", 2, "NamedPathItem", "*")],
    "PrimitivesItems": _SIMPLE + [("vendor_extension", 18, "NamedAny", "*")],
    "Properties": [("additional_properties", 1, "NamedSchema", "*")],
    "QueryParameterSubSchema": _QUERY_LIKE,
    "Response": [
        ("description", 1, "string"),
        ("schema", 2, "SchemaItem"),
        ("headers", 3, "Headers"),
        ("examples", 4, "Examples"),
        ("vendor_extension", 5, "NamedAny", "*"),
    ],
    "ResponseDefinitions": [("additional_properties", 1, "NamedResponse", "*")],
    "ResponseValue": [("response", 1, "Response", "|"), ("json_reference", 2, "JsonReference", "|")],
    "Responses": [("response_code", 1, "NamedResponseValue", "*"), ("vendor_extension", 2, "NamedAny", "*")],
    "Schema": [
        ("_ref", 1, "string"),
        ("format", 2, "string"),
        ("title", 3, "string"),
        ("description", 4, "string"),
        ("default", 5, "Any"),
        ("multiple_of", 6, "double"),
        ("maximum", 7, "double"),
        ("exclusive_maximum", 8, "bool"),
        ("minimum", 9, "double"),
        ("exclusive_minimum", 10, "bool"),
        ("max_length", 11, "int64"),
        ("min_length", 12, "int64"),
        ("pattern", 13, "string"),
        ("max_items", 14, "int64"),
        ("min_items", 15, "int64"),
        ("unique_items", 16, "bool"),
        ("max_properties", 17, "int64"),
        ("min_properties", 18, "int64"),
        ("required", 19, "string", "*"),
        ("enum", 20, "Any", "*"),
        ("additional_properties", 21, "AdditionalPropertiesItem"),
        ("type", 22, "TypeItem"),
        ("items", 23, "ItemsItem"),
        ("all_of", 24, "Schema", "*"),
        ("properties", 25, "Properties"),
        ("discriminator", 26, "string"),
        ("read_only", 27, "bool"),
        ("xml", 28, "Xml"),
        ("external_docs", 29, "ExternalDocs"),
        ("example", 30, "Any"),
        ("vendor_extension", 31, "NamedAny", "*"),
    ],
    "SchemaItem": [("schema", 1, "Schema", "|"), ("file_schema", 2, "FileSchema", "|")],
    "SecurityDefinitions": [("additional_properties", 1, "NamedSecurityDefinitionsItem", "*")],
    "SecurityDefinitionsItem": [
        ("basic_authentication_security", 1, "BasicAuthenticationSecurity", "|"),
        ("api_key_security", 2, "ApiKeySecurity", "|"),
        ("oauth2_implicit_security", 3, "Oauth2ImplicitSecurity", "|"),
    ],
    "SecurityRequirement": [("additional_properties", 1, "NamedStringArray", "*")],
    "StringArray": [("value", 1, "string", "*")],
    "Tag": [
        ("name", 1, "string"),
        ("description", 2, "string"),
        ("external_docs", 3, "ExternalDocs"),
        ("vendor_extension", 4, "NamedAny", "*"),
    ],
    "TypeItem": [("value", 1, "string", "*")],
    "Xml": [
        ("name", 1, "string"),
        ("namespace", 2, "string"),
        ("prefix", 3, "string"),
        ("attribute", 4, "bool"),
        ("wrapped", 5, "bool"),
        ("vendor_extension", 6, "NamedAny", "*"),
    ],
}

_SCALARS = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
}


def _message_classes() -> dict[str, type]:
    fd = descriptor_pb2.FileDescriptorProto(name="test_openapiv2.proto", package="openapi.v2", syntax="proto3")
    for name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=name)
        if any(f[3:] == ("|",) for f in fields):
            msg.oneof_decl.add(name="oneof")
        for f in fields:
            field, number, typ, label = f[0], f[1], f[2], (f[3] if len(f) > 3 else "")
            fp = msg.field.add(name=field, number=number)
            fp.label = (
                descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if label == "*"
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
            )
            if typ in _SCALARS:
                fp.type = _SCALARS[typ]
            else:
                fp.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                fp.type_name = f".openapi.v2.{typ}"
            if label == "|":
                fp.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"openapi.v2.{name}")) for name in MESSAGES
    }


PB = _message_classes()


# --- decoded message -> Swagger JSON, the way gnostic's ToRawInfo writes it -------------------


def _ext(msg, out: dict) -> dict:
    for na in getattr(msg, "vendor_extension", ()):
        out[na.name] = yaml.safe_load(na.value.yaml)
    return out


def _any(a):
    return yaml.safe_load(a.yaml)


def _plain(msg, keys: dict[str, str]) -> dict:
    """Scalar and repeated-string fields (JSON key -> proto field) that are set."""
    out = {}
    for key, field in keys.items():
        v = getattr(msg, field)
        if isinstance(v, (str, bool, int, float)):
            if v:
                out[key] = v
        elif len(v):
            out[key] = list(v)
    return out


def schema_json(s) -> dict:
    out = _plain(
        s,
        {
            "$ref": "_ref",
            "format": "format",
            "title": "title",
            "description": "description",
            "multipleOf": "multiple_of",
            "maximum": "maximum",
            "exclusiveMaximum": "exclusive_maximum",
            "minimum": "minimum",
            "exclusiveMinimum": "exclusive_minimum",
            "maxLength": "max_length",
            "minLength": "min_length",
            "pattern": "pattern",
            "maxItems": "max_items",
            "minItems": "min_items",
            "uniqueItems": "unique_items",
            "maxProperties": "max_properties",
            "minProperties": "min_properties",
            "required": "required",
            "discriminator": "discriminator",
            "readOnly": "read_only",
        },
    )
    if s.HasField("default"):
        out["default"] = _any(s.default)
    if s.HasField("example"):
        out["example"] = _any(s.example)
    if len(s.enum):
        out["enum"] = [_any(a) for a in s.enum]
    if s.HasField("additional_properties"):
        ap = s.additional_properties
        out["additionalProperties"] = ap.boolean if ap.WhichOneof("oneof") == "boolean" else schema_json(ap.schema)
    if s.HasField("type"):
        out["type"] = s.type.value[0] if len(s.type.value) == 1 else list(s.type.value)
    if s.HasField("items"):
        items = [schema_json(i) for i in s.items.schema]
        out["items"] = items[0] if len(items) == 1 else items
    if len(s.all_of):
        out["allOf"] = [schema_json(x) for x in s.all_of]
    if s.HasField("properties"):
        out["properties"] = {p.name: schema_json(p.value) for p in s.properties.additional_properties}
    return _ext(s, out)


_PARAM_KEYS = {
    "required": "required",
    "in": "in",
    "description": "description",
    "name": "name",
    "allowEmptyValue": "allow_empty_value",
    "type": "type",
    "format": "format",
    "collectionFormat": "collection_format",
    "maximum": "maximum",
    "minimum": "minimum",
    "maxLength": "max_length",
    "minLength": "min_length",
    "pattern": "pattern",
    "maxItems": "max_items",
    "minItems": "min_items",
    "uniqueItems": "unique_items",
    "multipleOf": "multiple_of",
}


def parameter_json(item) -> dict:
    if item.WhichOneof("oneof") == "json_reference":
        return _plain(item.json_reference, {"$ref": "_ref", "description": "description"})
    p = item.parameter
    if p.WhichOneof("oneof") == "body_parameter":
        b = p.body_parameter
        out = _plain(b, {"description": "description", "name": "name", "in": "in", "required": "required"})
        out["schema"] = schema_json(b.schema)
        return _ext(b, out)
    nb = p.non_body_parameter
    sub = getattr(nb, nb.WhichOneof("oneof"))
    out = _plain(sub, {k: f for k, f in _PARAM_KEYS.items() if f in sub.DESCRIPTOR.fields_by_name})
    if sub.HasField("default"):
        out["default"] = _any(sub.default)
    if len(sub.enum):
        out["enum"] = [_any(a) for a in sub.enum]
    return _ext(sub, out)


def operation_json(op) -> dict:
    out = _plain(
        op,
        {
            "tags": "tags",
            "summary": "summary",
            "description": "description",
            "operationId": "operation_id",
            "produces": "produces",
            "consumes": "consumes",
            "schemes": "schemes",
            "deprecated": "deprecated",
        },
    )
    if len(op.parameters):
        out["parameters"] = [parameter_json(p) for p in op.parameters]
    responses = {}
    for rc in op.responses.response_code:
        r = rc.value.response
        assert rc.value.WhichOneof("oneof") == "response"
        resp = _plain(r, {"description": "description"})
        if r.HasField("schema"):
            assert r.schema.WhichOneof("oneof") == "schema"
            resp["schema"] = schema_json(r.schema.schema)
        responses[rc.name] = _ext(r, resp)
    out["responses"] = responses
    return _ext(op, out)


def document_json(doc) -> dict:
    out = {"swagger": doc.swagger, "info": _ext(doc.info, _plain(doc.info, {"title": "title", "version": "version"}))}
    paths = {}
    for named in doc.paths.path:
        item = named.value
        entry = {}
        for method in ("get", "put", "post", "delete", "options", "head", "patch"):
            if item.HasField(method):
                entry[method] = operation_json(getattr(item, method))
        if len(item.parameters):
            entry["parameters"] = [parameter_json(p) for p in item.parameters]
        paths[named.name] = _ext(item, entry)
    out["paths"] = paths
    out["definitions"] = {n.name: schema_json(n.value) for n in doc.definitions.additional_properties}
    out["securityDefinitions"] = {}
    for n in doc.security_definitions.additional_properties:
        assert n.value.WhichOneof("oneof") == "api_key_security"
        k = n.value.api_key_security
        out["securityDefinitions"][n.name] = _plain(
            k, {"type": "type", "name": "name", "in": "in", "description": "description"}
        )
    out["security"] = [{n.name: list(n.value.value) for n in req.additional_properties} for req in doc.security]
    return _ext(doc, out)


def without_proto3_zeros(node, in_extension: bool = False):
    """The JSON document as proto3 carries it: ``false`` flags are not on the wire (gnostic's
    ToRawInfo leaves them out too). Vendor extension values are YAML and keep everything."""
    if isinstance(node, list):
        return [without_proto3_zeros(n, in_extension) for n in node]
    if not isinstance(node, dict):
        return node
    return {
        k: without_proto3_zeros(v, in_extension or k.startswith("x-") or k in ("default", "enum", "example"))
        for k, v in node.items()
        if in_extension or v is not False or k in ("additionalProperties", "default", "example")
    }


# --- fixtures ------------------------------------------------------------------------------------


def all_enabled(group: str, version: str, resource: str) -> bool:
    return True


@pytest.fixture(scope="module")
def api() -> oa.OpenAPI:
    return oa.OpenAPI(REGISTRY, all_enabled, REGISTRY.group_versions())


@pytest.fixture(scope="module")
def swagger(api) -> dict:
    return orjson.loads(api.v2)


@pytest.fixture(scope="module")
def decoded(api):
    assert api.v2_protobuf
    return PB["Document"].FromString(api.v2_protobuf)


def definition(doc, name: str):
    return next(n.value for n in doc.definitions.additional_properties if n.name == name)


def gvks(schema) -> list[dict]:
    return next(
        yaml.safe_load(e.value.yaml) for e in schema.vendor_extension if e.name == "x-kubernetes-group-version-kind"
    )


def prop(schema, name: str):
    return next(p.value for p in schema.properties.additional_properties if p.name == name)


def path_item(doc, path: str):
    return next(p.value for p in doc.paths.path if p.name == path)


# --- the whole document -----------------------------------------------------------------------


def test_whole_document_round_trips(api, swagger, decoded):
    assert document_json(decoded) == without_proto3_zeros(swagger)
    # our bytes are the canonical encoding of that message: fields in number order, empty
    # messages present where the JSON has the (empty) object
    assert decoded.SerializeToString(deterministic=True) == api.v2_protobuf


def test_map_order_follows_the_json_document(swagger, decoded):
    assert [n.name for n in decoded.definitions.additional_properties] == list(swagger["definitions"])
    assert [p.name for p in decoded.paths.path] == list(swagger["paths"])
    pod = definition(decoded, "io.k8s.api.core.v1.Pod")
    assert [p.name for p in pod.properties.additional_properties] == list(
        swagger["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]
    )


def test_top_level_fields(decoded):
    assert decoded.swagger == "2.0"
    assert decoded.info.title == "orch" and decoded.info.version
    key = decoded.security_definitions.additional_properties[0]
    assert key.name == "BearerToken"
    assert key.value.api_key_security.type == "apiKey" and key.value.api_key_security.name == "authorization"
    assert getattr(key.value.api_key_security, "in") == "header"
    assert [(n.name, list(n.value.value)) for n in decoded.security[0].additional_properties] == [("BearerToken", [])]


# --- what kubectl reads ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,gvk",
    [
        ("io.k8s.api.core.v1.Pod", {"group": "", "version": "v1", "kind": "Pod"}),
        ("io.k8s.api.apps.v1.Deployment", {"group": "apps", "version": "v1", "kind": "Deployment"}),
        (
            "io.k8s.api.authentication.v1.TokenReview",
            {"group": "authentication.orch.io", "version": "v1", "kind": "TokenReview"},
        ),
        (
            "io.k8s.api.authorization.v1.SubjectAccessReview",
            {"group": "authorization.orch.io", "version": "v1", "kind": "SubjectAccessReview"},
        ),
        ("io.k8s.api.rbac.v1.ClusterRole", {"group": "rbac.orch.io", "version": "v1", "kind": "ClusterRole"}),
    ],
)
def test_kinds_are_found_by_their_gvk_extension(decoded, name, gvk):
    schema = definition(decoded, name)
    assert gvk in gvks(schema)
    assert list(schema.type.value) == ["object"]
    assert {"apiVersion", "kind", "metadata"} <= {p.name for p in schema.properties.additional_properties}
    assert prop(schema, "metadata")._ref == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def test_review_spec_fields(decoded, swagger):
    tr = definition(decoded, "io.k8s.api.authentication.v1.TokenReview")
    spec_ref = prop(tr, "spec")._ref
    assert spec_ref == "#/definitions/io.k8s.api.authentication.v1.TokenReviewSpec"
    spec = definition(decoded, spec_ref[len("#/definitions/") :])
    assert list(prop(spec, "token").type.value) == ["string"]
    audiences = prop(spec, "audiences")
    assert list(audiences.type.value) == ["array"]
    assert [list(s.type.value) for s in audiences.items.schema] == [["string"]]
    assert list(tr.required) == swagger["definitions"]["io.k8s.api.authentication.v1.TokenReview"].get("required", [])


def test_pod_container_schema(decoded, swagger):
    container = definition(decoded, "io.k8s.api.core.v1.Container")
    assert "name" in container.required
    ports = prop(container, "ports")
    assert list(ports.type.value) == ["array"]
    assert [s._ref for s in ports.items.schema] == ["#/definitions/io.k8s.api.core.v1.ContainerPort"]
    ext = {e.name: yaml.safe_load(e.value.yaml) for e in ports.vendor_extension}
    assert ext["x-kubernetes-patch-merge-key"] == "containerPort"
    assert (
        ext["x-kubernetes-list-map-keys"]
        == swagger["definitions"]["io.k8s.api.core.v1.Container"]["properties"]["ports"]["x-kubernetes-list-map-keys"]
    )
    policy = prop(container, "imagePullPolicy")
    assert [yaml.safe_load(a.yaml) for a in policy.enum] == ["Always", "IfNotPresent", "Never"]
    resources = definition(decoded, "io.k8s.api.core.v1.ResourceRequirements")
    limits = prop(resources, "limits")
    assert list(limits.type.value) == ["object"]
    assert not limits.HasField("properties")  # a map, not a struct: kube-openapi tells them apart so
    assert limits.additional_properties.schema._ref == "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"


def test_properties_are_present_exactly_where_the_json_has_them(decoded, swagger):
    """kube-openapi reads a schema with ``properties`` (even empty: see the hand-made
    document below) as a kind and one without as a map or an arbitrary value."""
    for name, d in swagger["definitions"].items():
        assert definition(decoded, name).HasField("properties") == ("properties" in d), name


def test_defaults_and_scalars(decoded, swagger):
    for name, d in swagger["definitions"].items():
        for pname, p in d.get("properties", {}).items():
            if "default" in p:
                got = prop(definition(decoded, name), pname)
                assert yaml.safe_load(got.default.yaml) == p["default"], (name, pname)
    q = definition(decoded, "io.k8s.apimachinery.pkg.api.resource.Quantity")
    assert list(q.type.value) == ["string"]
    ios = definition(decoded, "io.k8s.apimachinery.pkg.util.intstr.IntOrString")
    assert ios.format == "int-or-string"


def test_patch_operation_carries_field_validation_as_kubectl_looks_for_it(decoded):
    """kubectl's v2 query-param verifier: the path whose patch operation has the kind's
    gvk extension, a parameter.non_body_parameter.query_parameter_sub_schema named
    fieldValidation."""
    item = path_item(decoded, "/api/v1/namespaces/{name}")
    patch = item.patch
    gvk = next(
        yaml.safe_load(e.value.yaml) for e in patch.vendor_extension if e.name == "x-kubernetes-group-version-kind"
    )
    assert gvk == {"group": "", "kind": "Namespace", "version": "v1"}
    names = [p.parameter.non_body_parameter.query_parameter_sub_schema.name for p in patch.parameters]
    assert "fieldValidation" in names
    body = [p.parameter.body_parameter for p in patch.parameters if p.parameter.WhichOneof("oneof") == "body_parameter"]
    assert body and body[0].required and body[0].schema._ref.endswith("meta.v1.Patch")
    assert "application/strategic-merge-patch+json" in patch.consumes
    # the path-level parameters: name (path, required) and pretty (query)
    subs = [p.parameter.non_body_parameter for p in item.parameters]
    assert subs[0].WhichOneof("oneof") == "path_parameter_sub_schema"
    assert subs[0].path_parameter_sub_schema.name == "name" and subs[0].path_parameter_sub_schema.required
    assert subs[-1].query_parameter_sub_schema.name == "pretty"


def test_review_kinds_have_post_only(decoded):
    item = path_item(decoded, "/apis/authentication.orch.io/v1/tokenreviews")
    assert item.HasField("post")
    assert not any(item.HasField(m) for m in ("get", "put", "patch", "delete"))
    codes = {rc.name: rc.value.response for rc in item.post.responses.response_code}
    assert set(codes) == {"200", "201", "202", "401"}
    assert codes["201"].schema.schema._ref == "#/definitions/io.k8s.api.authentication.v1.TokenReview"
    assert codes["401"].description == "Unauthorized" and not codes["401"].HasField("schema")
    ext = {e.name: yaml.safe_load(e.value.yaml) for e in item.post.vendor_extension}
    assert ext["x-kubernetes-action"] == "post"
    assert item.post.schemes == ["https"]


# --- converter rules on hand-made documents ------------------------------------------------------


def _doc(**extra) -> dict:
    return {"swagger": "2.0", "info": {"title": "t", "version": "v"}, "paths": {}, **extra}


def test_oneofs_and_odd_shapes():
    doc = _doc(
        paths={
            "/x": {
                "get": {
                    "parameters": [
                        {"$ref": "#/parameters/p"},
                        {"name": "h", "in": "header", "type": "string", "enum": ["a", "b"]},
                        {
                            "name": "f",
                            "in": "formData",
                            "type": "integer",
                            "maximum": 10,
                            "allowEmptyValue": True,
                            "default": 3,
                        },
                    ],
                    "responses": {
                        "200": {"description": "ok", "schema": {"type": "file"}},
                        "default": {"$ref": "#/responses/r"},
                        "x-r": 1,
                    },
                }
            },
            "x-paths": {"k": "v"},
        },
        definitions={
            "D": {
                "type": ["string", "null"],
                "items": [{"type": "integer"}, {"type": "string"}],
                "additionalProperties": False,
                "minLength": 2,
                "maximum": -1.5,
                "properties": {},
                "example": {"a": [1, "two"]},
            }
        },
        parameters={
            "p": {"name": "p", "in": "query", "type": "array", "items": {"type": "string"}, "collectionFormat": "csv"}
        },
        responses={"r": {"description": "r", "headers": {"H": {"type": "string"}}}},
        securityDefinitions={
            "b": {"type": "basic"},
            "o": {"type": "oauth2", "flow": "implicit", "authorizationUrl": "https://a", "scopes": {"read": "Read"}},
        },
        tags=[{"name": "t1", "externalDocs": {"url": "https://docs"}}],
        **{"x-top": [True]},
    )
    msg = PB["Document"].FromString(openapi_pb.document_bytes(doc))
    op = msg.paths.path[0].value.get
    assert [e.name for e in msg.paths.vendor_extension] == ["x-paths"]
    assert op.parameters[0].json_reference._ref == "#/parameters/p"
    h = op.parameters[1].parameter.non_body_parameter.header_parameter_sub_schema
    assert h.name == "h" and [yaml.safe_load(a.yaml) for a in h.enum] == ["a", "b"]
    f = op.parameters[2].parameter.non_body_parameter.form_data_parameter_sub_schema
    assert f.maximum == 10 and f.allow_empty_value and yaml.safe_load(f.default.yaml) == 3
    codes = {rc.name: rc.value for rc in op.responses.response_code}
    assert codes["200"].response.schema.WhichOneof("oneof") == "file_schema"
    assert codes["default"].json_reference._ref == "#/responses/r"
    assert [e.name for e in op.responses.vendor_extension] == ["x-r"]
    d = msg.definitions.additional_properties[0].value
    assert list(d.type.value) == ["string", "null"]
    assert [list(s.type.value) for s in d.items.schema] == [["integer"], ["string"]]
    assert d.additional_properties.WhichOneof("oneof") == "boolean" and d.additional_properties.boolean is False
    assert d.min_length == 2 and d.maximum == -1.5 and d.HasField("properties")
    assert yaml.safe_load(d.example.yaml) == {"a": [1, "two"]}
    p = msg.parameters.additional_properties[0].value.non_body_parameter.query_parameter_sub_schema
    assert p.type == "array" and p.items.type == "string" and p.collection_format == "csv"
    assert msg.responses.additional_properties[0].value.headers.additional_properties[0].value.type == "string"
    sec = {n.name: n.value for n in msg.security_definitions.additional_properties}
    assert sec["b"].WhichOneof("oneof") == "basic_authentication_security"
    assert sec["o"].oauth2_implicit_security.scopes.additional_properties[0].value == "Read"
    assert msg.tags[0].external_docs.url == "https://docs"
    assert [(e.name, yaml.safe_load(e.value.yaml)) for e in msg.vendor_extension] == [("x-top", [True])]
    assert msg.SerializeToString(deterministic=True) == openapi_pb.document_bytes(doc)


@pytest.mark.parametrize(
    "doc,where",
    [
        (_doc(definitions={"D": {"type": "object", "oneOf": []}}), "#/definitions/D: Schema has no property 'oneOf'"),
        (
            _doc(
                paths={
                    "/x": {"get": {"responses": {}, "parameters": [{"name": "a", "in": "cookie", "type": "string"}]}}
                }
            ),
            "#/paths/~1x/get/parameters/0: parameter 'in' must be",
        ),
        (_doc(paths={"/x": {"get": {}}}), "#/paths/~1x/get: Operation is missing required property 'responses'"),
        (_doc(paths={"x": {}}), "#/paths: Paths has no property 'x'"),
        (_doc(definitions={"D": {"required": "name"}}), "#/definitions/D/required: must be a list of strings"),
        ({"swagger": "2.0", "paths": {}}, "#: Document is missing required property 'info'"),
    ],
)
def test_what_gnostic_rejects_is_an_error_naming_the_path(doc, where):
    with pytest.raises(ValueError) as err:
        openapi_pb.document_bytes(doc)
    assert where in str(err.value)


@pytest.mark.parametrize(
    "value",
    [
        [{"group": "", "kind": "Pod", "version": "v1"}],
        "merge,retainKeys",
        "",
        "yes",
        "on",
        "0",
        "1.5",
        "null",
        "a: b",
        "- x",
        "#c",
        "line\nbreak",
        "é",
        0,
        1.25,
        False,
        None,
        {},
        [],
        {"a": {"b": [1, [2, 3], {"c": {}}]}},
    ],
)
def test_yaml_of_any_values_reads_back(value):
    text = openapi_pb.yaml_text(value)
    assert text.endswith("\n")
    assert yaml.safe_load(text) == value


def test_gvk_yaml_is_block_style():
    assert (
        openapi_pb.yaml_text([{"group": "", "kind": "Pod", "version": "v1"}])
        == '- group: ""\n  kind: Pod\n  version: v1\n'
    )


# --- serving ------------------------------------------------------------------------------------


def get(api, url: str, method: str = "GET", **headers):
    return api.handle(make_mocked_request(method, url, headers=headers))


@pytest.mark.parametrize(
    "accept",
    [
        oa.MEDIA_OPENAPI_V2_PROTOBUF,
        oa.MEDIA_OPENAPI_V2_PROTOBUF_OLD,
        f"application/json;q=0.5, {oa.MEDIA_OPENAPI_V2_PROTOBUF}",
        f"{oa.MEDIA_OPENAPI_V2_PROTOBUF_OLD}, application/json",
    ],
)
def test_protobuf_is_served_when_asked_for(api, accept):
    resp = get(api, "/openapi/v2", Accept=accept)
    assert resp.status == 200
    # upstream always names the dot spelling: '@' is no token character (Go's mime parser rejects it)
    assert resp.content_type == oa.MEDIA_OPENAPI_V2_PROTOBUF_OLD
    assert resp.body == api.v2_protobuf
    assert "Accept" in resp.headers["Vary"]


@pytest.mark.parametrize(
    "accept",
    [None, "*/*", "application/*", "application/json", f"{oa.MEDIA_OPENAPI_V2_PROTOBUF};q=0.2, application/json;q=0.9"],
)
def test_json_stays_the_default(api, accept):
    resp = get(api, "/openapi/v2", **({"Accept": accept} if accept else {}))
    assert resp.status == 200 and resp.content_type == "application/json"
    assert resp.body == api.v2


@pytest.mark.parametrize(
    "accept", ["application/yaml", "text/plain", oa.MEDIA_OPENAPI_V3_PROTOBUF, f"{oa.MEDIA_OPENAPI_V2_PROTOBUF};q=0"]
)
def test_what_neither_form_satisfies_is_406(api, accept):
    resp = get(api, "/openapi/v2", Accept=accept)
    assert resp.status == 406
    assert oa.MEDIA_OPENAPI_V2_PROTOBUF in resp.text


def test_etag_conditional_and_gzip(api):
    """As upstream: the protobuf form carries the JSON document's ETag (Vary: Accept keeps
    caches apart), answers If-None-Match with 304 and is gzipped on request."""
    js = get(api, "/openapi/v2")
    pb = get(api, "/openapi/v2", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF)
    etag = pb.headers["Etag"]
    assert etag == js.headers["Etag"] == '"' + hashlib.sha512(api.v2).hexdigest().upper() + '"'
    assert "Last-Modified" in pb.headers
    assert get(api, "/openapi/v2", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF, **{"If-None-Match": etag}).status == 304
    assert get(api, "/openapi/v2", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF, **{"If-None-Match": '"other"'}).status == 200
    zipped = get(api, "/openapi/v2", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF, **{"Accept-Encoding": "gzip"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.body) == api.v2_protobuf
    assert get(api, "/openapi/v2", "POST", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF).status == 405


def test_a_document_gnostic_would_reject_leaves_json_only(monkeypatch, caplog):
    def broken(doc):
        raise ValueError("OpenAPI v2 protobuf: #/definitions/X: Schema has no property 'oneOf'")

    monkeypatch.setattr(openapi_pb, "document_bytes", broken)
    with caplog.at_level(logging.ERROR, logger=oa.log.name):
        api = oa.OpenAPI(REGISTRY, all_enabled, REGISTRY.group_versions())
        assert api.v2_protobuf is None  # converted when first asked for
    assert "oneOf" in caplog.text
    assert get(api, "/openapi/v2", Accept=oa.MEDIA_OPENAPI_V2_PROTOBUF).status == 406
    assert get(api, "/openapi/v2").status == 200


def test_built_when_first_asked_for_and_measured(api):
    fresh = oa.OpenAPI(REGISTRY, all_enabled, REGISTRY.group_versions())
    assert fresh.v3_seconds == fresh.v2_seconds == fresh.v2_protobuf_seconds == 0  # nothing built at start
    assert get(fresh, "/openapi/v2").status == 200
    assert fresh.v2_seconds > 0 and fresh.v3_seconds == fresh.v2_protobuf_seconds == 0
    assert fresh.v2_protobuf is fresh.v2_protobuf  # converted once
    assert fresh.v2_protobuf_seconds > 0 and fresh.v3_seconds == 0
    assert api.build_seconds > api.v2_protobuf_seconds > 0
    assert api.total_bytes > len(api.v2) + len(api.v2_protobuf)
    # smaller than the JSON it comes from (names, not braces and quotes)
    assert len(api.v2_protobuf) < len(api.v2)

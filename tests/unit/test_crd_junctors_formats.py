"""Custom resources: the junctors (allOf/anyOf/oneOf/not) of a definition's schema —
their structural rules when the definition is written and the values they accept —
and the string formats custom objects are checked against."""

from __future__ import annotations

import pytest

from apiserver_min.apiextensions import formats, values
from apiserver_min.apiextensions.structural import validate_schema
from apiserver_min.server.openapi import _without_v2_incompatible


def spec_schema(**spec) -> dict:
    base = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    return {"type": "object", "properties": {"spec": {**base, **spec}}}


def schema_errors(schema: dict) -> list[str]:
    return [e.message() for e in validate_schema(schema, "S")]


def value_errors(spec: dict, schema: dict) -> list[str]:
    return [e.message() for e in values.validate({"apiVersion": "x/v1", "kind": "K", "spec": spec}, schema)]


# --- structural rules ---------------------------------------------------------------------


def test_junctors_restricting_values_are_accepted():
    schema = spec_schema(
        oneOf=[{"required": ["a"]}, {"required": ["b"]}],
        anyOf=[{"properties": {"a": {"pattern": "^x"}}}, {"properties": {"b": {"minimum": 3}}}],
        allOf=[{"properties": {"a": {"maxLength": 5}}}],
        **{"not": {"properties": {"a": {"enum": ["bad"]}}}},
    )
    assert schema_errors(schema) == []


@pytest.mark.parametrize(
    ("inner", "message"),
    [
        ({"type": "object"}, "S.properties[spec].allOf[0].type: Forbidden: must be empty to be structural"),
        ({"default": {}}, "S.properties[spec].allOf[0].default: Forbidden: must be undefined to be structural"),
        ({"description": "d"}, "S.properties[spec].allOf[0].description: Forbidden: must be empty to be structural"),
        ({"title": "t"}, "S.properties[spec].allOf[0].title: Forbidden: must be empty to be structural"),
        ({"nullable": True}, "S.properties[spec].allOf[0].nullable: Forbidden: must be false to be structural"),
        (
            {"additionalProperties": {"type": "string"}},
            "S.properties[spec].allOf[0].additionalProperties: Forbidden: must be undefined to be structural",
        ),
        (
            {"x-kubernetes-preserve-unknown-fields": True},
            "S.properties[spec].allOf[0].x-kubernetes-preserve-unknown-fields: Forbidden: must be undefined to be "
            "structural",
        ),
        (
            {"x-kubernetes-validations": [{"rule": "true"}]},
            "S.properties[spec].allOf[0].x-kubernetes-validations: Forbidden: must be empty to be structural",
        ),
        (
            {"properties": {"a": {"type": "string"}}},
            "S.properties[spec].allOf[0].properties[a].type: Forbidden: must be empty to be structural",
        ),
        (
            {"properties": {"c": {"minLength": 1}}},
            "S.properties[spec].properties[c]: Required value: because it is defined in "
            "S.properties[spec].allOf[0].properties[c]",
        ),
        (
            {"anyOf": [{"properties": {"d": {}}}]},
            "S.properties[spec].properties[d]: Required value: because it is defined in "
            "S.properties[spec].allOf[0].anyOf[0].properties[d]",
        ),
        ({"$ref": "#/x"}, "S.properties[spec].allOf[0].$ref: Forbidden: $ref is not supported"),
    ],
)
def test_junctor_structural_rules(inner, message):
    msgs = schema_errors(spec_schema(allOf=[inner]))
    assert message in msgs, msgs


def test_not_and_nested_items_must_be_specified():
    schema = {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": "string"}, "not": {"items": {"properties": {"a": {}}}}}
        },
    }
    assert schema_errors(schema) == [
        "S.properties[xs].items.properties[a]: Required value: because it is defined in "
        "S.properties[xs].not.items.properties[a]"
    ]


def test_int_or_string_may_carry_its_any_of_shape():
    ios = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert schema_errors({"type": "object", "properties": {"p": ios}}) == []
    ios_all = {"x-kubernetes-int-or-string": True, "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}]}
    assert schema_errors({"type": "object", "properties": {"p": ios_all}}) == []
    plain = {"type": "string", "anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert "S.properties[p].anyOf[0].type: Forbidden: must be empty to be structural" in schema_errors(
        {"type": "object", "properties": {"p": plain}}
    )


def test_a_default_must_pass_the_junctors_beside_it():
    schema = spec_schema()
    schema["properties"]["spec"]["properties"]["a"] = {"type": "string", "default": "y", "anyOf": [{"pattern": "^x"}]}
    msgs = schema_errors(schema)
    assert any(
        "must validate at least one schema (anyOf)" in m and m.startswith("S.properties[spec].properties[a].default")
        for m in msgs
    ), msgs


# --- values -------------------------------------------------------------------------------

ONE_OF = spec_schema(oneOf=[{"required": ["a"]}, {"required": ["b"]}])


def test_one_of_exactly_one():
    assert value_errors({"a": "x"}, ONE_OF) == []
    assert value_errors({"b": 1}, ONE_OF) == []
    assert value_errors({"a": "x", "b": 1}, ONE_OF) == [
        ': Invalid value: "": "spec" must validate one and only one schema (oneOf). Found 2 valid alternatives'
    ]
    assert value_errors({}, ONE_OF) == [
        ': Invalid value: "": "spec" must validate one and only one schema (oneOf). Found none valid',
        "spec.a: Required value",
    ]


def test_any_of_at_least_one_with_the_nearest_errors():
    schema = spec_schema(anyOf=[{"properties": {"a": {"pattern": "^x"}}, "required": ["a"]}, {"required": ["b"]}])
    assert value_errors({"a": "xy"}, schema) == []
    assert value_errors({"b": 2}, schema) == []
    assert value_errors({"a": "y"}, schema) == [
        ': Invalid value: "": "spec" must validate at least one schema (anyOf)',
        "spec.a: Invalid value: \"y\": spec.a in body should match '^x'",
    ]


def test_all_of_and_not():
    schema = spec_schema(
        allOf=[{"properties": {"a": {"maxLength": 3}}}, {"properties": {"a": {"pattern": "^x"}}}],
        **{"not": {"properties": {"b": {"enum": [13]}}, "required": ["b"]}},
    )
    assert value_errors({"a": "xy", "b": 1}, schema) == []
    assert value_errors({"a": "xyzw"}, schema) == [
        "spec.a: Too long: may not be longer than 3",
        ': Invalid value: "": "spec" must validate all the schemas (allOf)',
    ]
    assert value_errors({"a": "yyyy"}, schema)[-1] == (
        ': Invalid value: "": "spec" must validate all the schemas (allOf). None validated'
    )
    assert value_errors({"b": 13}, schema) == [': Invalid value: "": "spec" must not validate the schema (not)']


def test_junctors_on_items_name_the_item():
    schema = {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": "integer", "oneOf": [{"minimum": 5}, {"maximum": 0}]}}
        },
    }
    assert value_errors({}, schema) == []
    errs = [e.message() for e in values.validate({"xs": [6, 2]}, schema)]
    assert errs[0] == ': Invalid value: "": "xs[1]" must validate one and only one schema (oneOf). Found none valid'


def test_junctors_are_not_applied_to_null():
    # Upstream checks a null value against its type (nullable) and enum only, never
    # against the junctors: a nullable field whose junctors no null could satisfy
    # takes null, and a null where null is not allowed reads as the type error alone.
    junctors = {
        "allOf": [{"minimum": 5}],
        "anyOf": [{"minimum": 5}, {"maximum": -5}],
        "oneOf": [{"minimum": 5}],
        "not": {"maximum": 100},
    }
    nullable = {"type": "object", "properties": {"n": {"type": "integer", "nullable": True, **junctors}}}
    assert value_errors({"n": None}, spec_schema(properties=nullable["properties"])) == []
    failed = [m for m in value_errors({"n": 1}, spec_schema(properties=nullable["properties"])) if m.startswith(": ")]
    assert [m.split(" must ")[1].split(" (")[0] for m in failed] == [
        "validate all the schemas",
        "validate at least one schema",
        "validate one and only one schema",
        "not validate the schema",
    ]
    strict = {"n": {"type": "integer", **junctors}}
    assert value_errors({"n": None}, spec_schema(properties=strict)) == [
        'spec.n: Invalid value: "null": spec.n in body must be of type integer: "null"'
    ]
    assert schema_errors(spec_schema(properties=nullable["properties"])) == []


def test_v2_document_leaves_out_what_swagger_cannot_express():
    schema = spec_schema(oneOf=[{"required": ["a"]}], allOf=[{"required": ["a"]}], **{"not": {"required": ["b"]}})
    out = _without_v2_incompatible(schema)
    assert set(out["properties"]["spec"]) == {"type", "properties", "allOf"}


# --- formats ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date-time", ["2023-04-05T06:07:08Z", "2023-04-05T06:07:08.123+02:00"], ["2023-04-05", "yesterday"]),
        ("date", ["2023-04-05"], ["2023-13-01", "2023-04-05T00:00:00Z"]),
        ("byte", ["aGVsbG8=", ""], ["hello!", "aGVsbG8"]),
        ("uuid", ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"], ["123e4567"]),
        ("uuid3", ["a3bb189e-8bf9-3888-9912-ace4e6543002"], ["a3bb189e-8bf9-4888-9912-ace4e6543002"]),
        ("uuid4", ["9b2d6f1e-6d0c-4c3a-8d5e-2f1a3b4c5d6e"], ["9b2d6f1e-6d0c-4c3a-7d5e-2f1a3b4c5d6e"]),
        ("uuid5", ["74738ff5-5367-5958-9aee-98fffdcd1876"], ["74738ff5-5367-3958-9aee-98fffdcd1876"]),
        ("email", ["a@example.com", "Joe <joe@example.com>"], ["example.com", "a@"]),
        ("hostname", ["example.com", "localhost", "a-b.example.org"], ["-a.com", "a..b", "a_b.com", "x" * 256]),
        ("ipv4", ["10.0.0.1"], ["10.0.0.256", "::1", "10.0.0"]),
        ("ipv6", ["::1", "fe80::1"], ["10.0.0.1", "fe80::g"]),
        ("cidr", ["10.0.0.0/8", "fd00::/64"], ["10.0.0.0", "10.0.0.0/33"]),
        ("mac", ["01:23:45:67:89:ab", "01-23-45-67-89-ab", "0123.4567.89ab"], ["01:23:45:67:89", "0123456789ab"]),
        ("uri", ["https://example.com/x?y=1", "/abs/path"], ["relative/path", "http://a b", ""]),
        ("isbn", ["0-306-40615-2", "978-0-306-40615-7"], ["0-306-40615-3", "978-0-306-40615-8"]),
        ("creditcard", ["4111 1111 1111 1111", "5500-0000-0000-0004"], ["4111 1111 1111 1112", "1234"]),
        ("ssn", ["123-45-6789", "123456789"], ["12-345-6789"]),
        ("hexcolor", ["#fff", "a1b2c3"], ["#ffff", "#ggg"]),
        ("rgbcolor", ["rgb(0, 128, 255)"], ["rgb(256,0,0)", "rgb(1,2)"]),
        ("duration", ["1h30m", "3 days", "2w", "500ms"], ["forever", "3 fortnights"]),
        ("password", ["anything at all"], []),
        ("int32", ["not checked"], []),
        ("no-such-format", ["not checked"], []),
    ],
)
def test_formats(fmt, good, bad):
    for value in good:
        assert formats.valid(fmt, value), (fmt, value)
    for value in bad:
        assert not formats.valid(fmt, value), (fmt, value)


def test_format_error_message():
    schema = {"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}}}
    assert [e.message() for e in values.validate({"ip": "1.2.3"}, schema)] == [
        'ip: Invalid value: "1.2.3": ip in body must be of type ipv4: "1.2.3"'
    ]

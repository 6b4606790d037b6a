"""Field validation walk (apiserver_min/server/fieldvalidation.py) and the body
decoding it relies on (codec.decode_object_body, the YAML tracking loader)."""

from __future__ import annotations

import copy

import pytest

from apiserver_min.api import codec
from apiserver_min.api.schema import (
    Boolean,
    Bytes,
    Duration,
    Field,
    Integer,
    IntOrString,
    List,
    Map,
    Number,
    Opaque,
    Quantity,
    String,
    Struct,
    Time,
)
from apiserver_min.api.schemas import schema_for
from apiserver_min.api.status import ApiError
from apiserver_min.registry import fieldvalidation as fv

POD = schema_for("", "v1", "Pod")
CM = schema_for("", "v1", "ConfigMap")

INNER = Struct(
    "k8s.io.api.test.v1.Inner",
    [
        Field("name", String(), 1, required=True),
        Field("n", Integer(32), 2),
    ],
)
THING = Struct(
    "k8s.io.api.test.v1.Thing",
    [
        Field("metadata", schema_for("", "v1", "ConfigMap").field("metadata").type, 1),
        Field("s", String(), 2),
        Field("i32", Integer(32), 3),
        Field("i64", Integer(64), 4),
        Field("f", Number(), 5),
        Field("b", Boolean(), 6),
        Field("raw", Bytes(), 7),
        Field("t", Time(), 8),
        Field("d", Duration(), 9),
        Field("q", Quantity(), 10),
        Field("ios", IntOrString(), 11),
        Field("any", Opaque(), 12),
        Field("items", List(INNER), 13),
        Field("byName", Map(INNER), 14),
        Field("tags", List(String()), 15),
        Field("status", INNER, 16),
    ],
)


def check(obj: dict, schema: Struct = THING, level: str = "Strict", kind: str = "Thing") -> list[str]:
    return fv.validate_object(obj, schema, level, kind=kind, version="v1")


def fatal(obj: dict, schema: Struct = THING, level: str = "Ignore") -> str:
    with pytest.raises(ApiError) as info:
        check(obj, schema, level)
    assert info.value.code == 400, info.value
    return info.value.message


def decoded(body: bytes, schema: Struct, level: str, ctype: str = "application/json", kind: str = "Pod"):
    return fv.validate_decoded(codec.decode_object_body(body, ctype), schema, level, kind=kind, version="v1")


# --- types -------------------------------------------------------------------------------------


def test_go_type_names():
    spec = POD.field("spec").type
    assert fv.go_type_name(spec.field("containers").type) == "[]v1.Container"
    assert fv.go_type_name(CM.field("data").type) == "map[string]string"
    assert fv.go_type_name(Integer(64)) == "int64"
    assert fv.go_type_name(Bytes()) == "[]uint8"
    assert fv.go_type_name(POD.field("metadata").type) == "v1.ObjectMeta"


def test_valid_values_of_every_type_pass_unchanged():
    obj = {
        "apiVersion": "test/v1",
        "kind": "Thing",
        "metadata": {"name": "x", "labels": {"a": "b"}},
        "s": "x",
        "i32": -5,
        "i64": 1 << 40,
        "f": 1.5,
        "b": False,
        "raw": "aGVsbG8=",
        "t": "2024-05-01T12:00:00Z",
        "d": "1h2m",
        "q": "100m",
        "ios": "http",
        "any": {"x": [1, {"y": None}]},
        "items": [{"name": "a", "n": 1}],
        "byName": {"k": {"name": "b"}},
        "tags": ["p", "q"],
        "status": {"name": "s"},
    }
    before = repr(obj)
    assert check(obj) == []
    assert repr(obj) == before


def test_numbers_are_fine_for_quantities_and_int_or_string():
    assert check({"q": 2, "ios": 8080}) == []
    assert check({"q": 0.5}) == []


def test_nulls_are_accepted_anywhere():
    assert check({"s": None, "items": [None], "byName": {"k": None}, "tags": None}) == []


@pytest.mark.parametrize(
    "obj, fragment",
    [
        ({"s": 1}, "cannot unmarshal number into Go struct field Thing.s of type string"),
        ({"i32": "1"}, "cannot unmarshal string into Go struct field Thing.i32 of type int32"),
        ({"i32": 1.5}, "cannot unmarshal number 1.5 into Go struct field Thing.i32 of type int32"),
        ({"i32": 1 << 31}, f"cannot unmarshal number {1 << 31} into Go struct field Thing.i32 of type int32"),
        ({"i32": True}, "cannot unmarshal bool into Go struct field Thing.i32 of type int32"),
        ({"i64": "x"}, "of type int64"),
        ({"f": "1"}, "cannot unmarshal string into Go struct field Thing.f of type float64"),
        ({"b": "true"}, "cannot unmarshal string into Go struct field Thing.b of type bool"),
        ({"raw": "%%%"}, "raw: illegal base64 data"),
        ({"t": "yesterday"}, 't: parsing time "yesterday"'),
        ({"t": 5}, "cannot unmarshal number into Go struct field Thing.t of type v1.Time"),
        ({"d": "soon"}, "d: time: invalid duration"),
        ({"q": "1x"}, "q: quantities must match the regular expression"),
        ({"q": True}, "of type resource.Quantity"),
        ({"ios": 1.5}, "cannot unmarshal number 1.5 into Go struct field Thing.ios of type int32"),
        ({"ios": [1]}, "cannot unmarshal array"),
        ({"items": {"name": "a"}}, "cannot unmarshal object into Go struct field Thing.items of type []v1.Inner"),
        ({"items": ["a"]}, "cannot unmarshal string into Go struct field Thing.items of type v1.Inner"),
        ({"items": [{"name": "a", "n": "2"}]}, "Go struct field Inner.items.n of type int32"),
        ({"byName": {"k": {"name": 3}}}, "Go struct field Inner.byName.name of type string"),
        ({"byName": []}, "of type map[string]v1.Inner"),
        ({"tags": "a"}, "cannot unmarshal string into Go struct field Thing.tags of type []string"),
        ({"tags": ["a", 1]}, "cannot unmarshal number into Go struct field Thing.tags of type string"),
        ({"metadata": {"labels": {"a": 1}}}, "Go struct field ObjectMeta.metadata.labels of type string"),
        ({"kind": 3}, "Go struct field TypeMeta.kind of type string"),
    ],
)
def test_type_errors_are_fatal_at_every_level(obj, fragment):
    for level in fv.LEVELS:
        message = fatal(dict(obj), level=level)
        assert message.startswith('Thing in version "v1" cannot be handled as a Thing: '), message
        assert fragment in message, message


def test_integral_floats_become_integers():
    obj = {"i32": 3.0, "ios": 4.0}
    check(obj)
    assert obj["i32"] == 3 and type(obj["i32"]) is int


def test_type_error_wins_over_unknown_fields_even_under_strict():
    message = fatal({"bogus": 1, "s": 2}, level="Strict")
    assert "Thing.s" in message and "bogus" not in message


# --- unknown fields -------------------------------------------------------------------------


def test_unknown_fields_are_dropped_and_named_by_path():
    obj = {
        "apiVersion": "v1",
        "kind": "Thing",
        "zz": 1,
        "items": [{"name": "a"}, {"name": "b", "extra": {"d": 1}}],
        "byName": {"key.with.dots": {"name": "c", "what": 2}},
        "metadata": {"colour": "red"},
    }
    with pytest.raises(ApiError) as info:
        check(copy.deepcopy(obj), level="Strict")
    assert info.value.message == (
        'Thing in version "v1" cannot be handled as a Thing: strict decoding error: unknown field "zz", '
        'unknown field "items[1].extra", unknown field "byName.key.with.dots.what", '
        'unknown field "metadata.colour"'
    )
    warnings = check(obj, level="Warn")
    assert warnings == [
        'unknown field "zz"',
        'unknown field "items[1].extra"',
        'unknown field "byName.key.with.dots.what"',
        'unknown field "metadata.colour"',
    ]
    assert obj == {
        "apiVersion": "v1",
        "kind": "Thing",
        "items": [{"name": "a"}, {"name": "b"}],
        "byName": {"key.with.dots": {"name": "c"}},
        "metadata": {},
    }


def test_ignore_drops_silently():
    obj = {"zz": 1, "s": "x"}
    assert check(obj, level="Ignore") == []
    assert obj == {"s": "x"}


def test_opaque_values_keep_unknown_content():
    obj = {"any": {"zz": {"deeper": [1, "x", {"k": None}]}}}
    assert check(obj) == []
    assert obj["any"]["zz"]["deeper"][2] == {"k": None}


def test_real_pod_nested_unknown_field():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostIPP": "x"}]}]},
    }
    assert check(pod, POD, "Warn", "Pod") == ['unknown field "spec.containers[0].ports[0].hostIPP"']


# --- required fields -----------------------------------------------------------------------


def test_missing_required_fields_are_422_with_every_path():
    with pytest.raises(ApiError) as info:
        check({"metadata": {"name": "x"}, "items": [{"n": 1}, {"name": None}, {}], "byName": {"k": {}}})
    err = info.value
    assert err.code == 422 and err.reason == "Invalid"
    # An explicit null is a value (upstream's zero value, which its Go clients send).
    assert [c["field"] for c in err.details["causes"]] == ["items[0].name", "items[2].name", "byName.k.name"]
    assert err.message.startswith('Thing "x" is invalid: [items[0].name: Required value')


def test_required_fields_of_the_root_status_are_not_enforced():
    assert check({"status": {"n": 1}}) == []


def test_type_and_strict_errors_come_before_required_ones():
    assert "Thing.s" in fatal({"s": 1, "items": [{}]})
    with pytest.raises(ApiError) as info:
        check({"zz": 1, "items": [{}]}, level="Strict")
    assert info.value.code == 400 and "unknown field" in info.value.message


# --- duplicate keys: JSON ---------------------------------------------------------------------

POD_JSON = (
    b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"a":"x:y:z","t":"12:00"}},'
    b'"spec":{"containers":[{"name":"c","image":"reg:5000/i:1.0","resources":{"limits":{"cpu":"1"}}}]}}'
)


def test_json_without_duplicates_is_not_parsed_twice(monkeypatch):
    def boom(body):
        raise AssertionError("slow path taken")

    monkeypatch.setattr(codec, "decode_json_tracking_duplicates", boom)
    obj, warnings = decoded(POD_JSON, POD, "Strict")
    assert warnings == [] and obj["spec"]["containers"][0]["image"] == "reg:5000/i:1.0"
    # Spaces around colons do not matter either.
    obj, _ = decoded(b'{ "metadata" : { "name" : "a:b" } , "kind" : "Pod" }', POD, "Strict")
    assert obj["metadata"]["name"] == "a:b"


@pytest.mark.parametrize(
    "body, path",
    [
        (b'{"kind":"Pod","kind":"Pod","metadata":{"name":"p"}}', "kind"),
        (b'{"metadata":{"name":"p","labels":{"a":"1","a":"2"}}}', "metadata.labels.a"),
        (
            b'{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x:1","name":"d"}]}}',
            "spec.containers[0].name",
        ),
        # A \u escape could hide a colon: the count is not trusted, the slow parse decides.
        (b'{"metadata":{"name":"p","annotations":{"x":"\\u003a","x":"y"}}}', "metadata.annotations.x"),
    ],
)
def test_json_duplicates_are_named(body, path):
    obj, warnings = decoded(body, POD, "Warn")
    assert warnings == [f'duplicate field "{path}"']
    with pytest.raises(ApiError) as info:
        decoded(body, POD, "Strict")
    assert info.value.code == 400 and f'duplicate field "{path}"' in info.value.message


def test_json_duplicates_keep_the_last_value_and_ignore_skips_the_check(monkeypatch):
    body = b'{"metadata":{"name":"a","name":"b"}}'
    obj, warnings = decoded(body, POD, "Warn")
    assert obj["metadata"]["name"] == "b"
    monkeypatch.setattr(codec, "decode_json_tracking_duplicates", lambda b: pytest.fail("checked under Ignore"))
    obj, warnings = decoded(body, POD, "Ignore")
    assert warnings == [] and obj["metadata"]["name"] == "b"


def test_escaped_colon_without_duplicates_is_fine():
    obj, warnings = decoded(b'{"metadata":{"name":"p","annotations":{"x":"\\u003a"}}}', POD, "Strict")
    assert warnings == [] and obj["metadata"]["annotations"]["x"] == ":"


def test_duplicate_fields_of_a_patch_document():
    assert fv.duplicate_fields(b'{"data":{"a":"1:2"}}') == []
    assert fv.duplicate_fields(b'{"data":{"a":"1","a":"2"},"metadata":{"labels":{"x":"1","x":"2"}}}') == [
        'duplicate field "data.a"',
        'duplicate field "metadata.labels.x"',
    ]
    assert fv.duplicate_fields(b'[{"x":1,"x":2}]') == ['duplicate field "[0].x"']
    assert fv.duplicate_fields(b"{not json") == []


def test_duplicate_fields_of_an_apply_document():
    body = b"apiVersion: v1\nkind: ConfigMap\ndata:\n  a: '1'\n  a: '2'\n"
    assert fv.duplicate_fields(body, yaml=True) == ['duplicate field "data.a"']
    assert fv.duplicate_fields(b"data: {a: '1'}\n", yaml=True) == []


# --- duplicate keys: YAML ---------------------------------------------------------------------


def test_yaml_duplicates_are_recorded_and_the_last_value_kept():
    body = b"kind: ConfigMap\nmetadata:\n  name: a\n  name: b\ndata:\n  k: '1'\n  k: '2'\n  k: '3'\n"
    d = codec.decode_object_body(body, "application/yaml")
    assert d.media == "yaml"
    assert d.obj == {"kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "3"}}
    obj, warnings = fv.validate_decoded(d, CM, "Warn", kind="ConfigMap", version="v1")
    assert warnings == ['duplicate field "metadata.name"', 'duplicate field "data.k"']


def test_yaml_keys_are_strings_as_in_json():
    d = codec.decode_object_body(b"data:\n  1: a\n  true: b\n  null: c\n", "application/yaml")
    assert d.obj == {"data": {"1": "a", "true": "b", "null": "c"}}


def test_yaml_type_error_and_bad_yaml():
    with pytest.raises(ApiError) as info:
        decoded(b"metadata: {name: a}\ndata: {a: 1}\n", CM, "Ignore", "application/yaml", "ConfigMap")
    assert "Go struct field ConfigMap.data of type string" in info.value.message
    with pytest.raises(ApiError) as info:
        codec.decode_object_body(b"a: [\n", "application/yaml")
    assert info.value.code == 400 and "error decoding YAML body" in info.value.message


def test_agent_yaml_loader_still_rejects_duplicates():
    with pytest.raises(codec.DecodeError, match="duplicate field 'a'"):
        codec.load_yaml(b"a: 1\na: 2\n")


def test_empty_and_malformed_json_bodies():
    for body in (b"", b"  "):
        with pytest.raises(ApiError):
            codec.decode_object_body(body, "application/json")
    with pytest.raises(ApiError) as info:
        codec.decode_object_body(b"{nope", "application/json")
    assert "error decoding JSON body" in info.value.message


# --- headers ----------------------------------------------------------------------------------


def test_warning_header_form():
    assert fv.warning_header('unknown field "spec.foo"') == '299 - "unknown field \\"spec.foo\\""'
    assert fv.warning_header("a\\b") == '299 - "a\\\\b"'

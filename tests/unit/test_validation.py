"""Name, label and annotation validation must accept and reject what upstream does,
with upstream's wording, because clients show these messages verbatim."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver_min.api import validation as v
from apiserver_min.api.validation import FieldError

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
QNAME_TAIL = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


# --- string checks ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a", "0", "abc", "a-b", "a.b", "a--b", "1.2.3.4", "example.com", "a" * 253, ".".join(["a" * 63] * 3) + ".abcd"],
)
def test_dns1123_subdomain_valid(name):
    assert v.is_dns1123_subdomain(name) == []


@pytest.mark.parametrize(
    "name, expected",
    [
        ("", [SUBDOMAIN_MSG]),
        ("Foo", [SUBDOMAIN_MSG]),
        ("foo_bar", [SUBDOMAIN_MSG]),
        ("-a", [SUBDOMAIN_MSG]),
        ("a-", [SUBDOMAIN_MSG]),
        (".a", [SUBDOMAIN_MSG]),
        ("a..b", [SUBDOMAIN_MSG]),
        ("a.-b", [SUBDOMAIN_MSG]),
        ("a b", [SUBDOMAIN_MSG]),
        ("a\n", [SUBDOMAIN_MSG]),
        ("é", [SUBDOMAIN_MSG]),
        ("a" * 254, ["must be no more than 253 characters"]),
        ("A" * 254, ["must be no more than 253 characters", SUBDOMAIN_MSG]),
    ],
)
def test_dns1123_subdomain_invalid(name, expected):
    assert v.is_dns1123_subdomain(name) == expected


def test_length_is_counted_in_bytes_like_upstream():
    # 127 two-byte characters are 254 bytes: over the limit although 127 chars.
    assert "must be no more than 253 characters" in v.is_dns1123_subdomain("é" * 127)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("my-name", []),
        ("123-abc", []),
        ("a" * 63, []),
        ("a" * 64, ["must be no more than 63 characters"]),
        ("a.b", [LABEL_MSG]),
        ("My-name", [LABEL_MSG]),
        ("", [LABEL_MSG]),
        ("-", [LABEL_MSG]),
    ],
)
def test_dns1123_label(name, expected):
    assert v.is_dns1123_label(name) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        ("my-name", []),
        ("abc-123", []),
        ("a" * 63, []),
        ("a" * 64, ["must be no more than 63 characters"]),
        ("1abc", [DNS1035_MSG]),
        ("abc-", [DNS1035_MSG]),
        ("ABC", [DNS1035_MSG]),
    ],
)
def test_dns1035_label(name, expected):
    assert v.is_dns1035_label(name) == expected


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "A",
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "1234",
        "simple/simple",
        "now-with-dashes/simple",
        "now-with-dashes/now-with-dashes",
        "now.with.dots/simple",
        "now-with.dashes-and.dots/simple",
        "1-num.2-num/3-num",
        "1234/5678",
        "1.2.3.4/5678",
        "Uppercase_Is_OK_123",
        "example.com/Uppercase_Is_OK_123",
        "orch.io/hostname",
        "a" * 63,
        "a" * 253 + "/" + "b" * 63,
    ],
)
def test_qualified_name_valid(key):
    assert v.is_qualified_name(key) == []


@pytest.mark.parametrize(
    "key, expected",
    [
        ("", ["name part must be non-empty", "name part " + QNAME_TAIL]),
        ("nospecialchars%^=@", ["name part " + QNAME_TAIL]),
        ("cantendwithadash-", ["name part " + QNAME_TAIL]),
        ("-cantstartwithadash-", ["name part " + QNAME_TAIL]),
        ("only/one/slash", None),
        ("Example.com/abc", ["prefix part " + SUBDOMAIN_MSG]),
        ("example_com/abc", ["prefix part " + SUBDOMAIN_MSG]),
        ("example.com/", ["name part must be non-empty", "name part " + QNAME_TAIL]),
        ("/simple", ["prefix part must be non-empty"]),
        ("a" * 64, ["name part must be no more than 63 characters"]),
        ("a" * 254 + "/abc", ["prefix part must be no more than 253 characters"]),
        ("a" * 64 + "/abc", []),
    ],
)
def test_qualified_name_invalid(key, expected):
    errs = v.is_qualified_name(key)
    if expected is None:
        assert len(errs) == 1
        assert errs[0].startswith("a qualified name must consist of alphanumeric characters")
        assert errs[0].endswith("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
    else:
        assert errs == expected


@pytest.mark.parametrize(
    "value", ["", "simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "A", "a_b.c-d", "a" * 63]
)
def test_label_value_valid(value):
    assert v.is_valid_label_value(value) == []


@pytest.mark.parametrize(
    "value, expected",
    [
        ("nospecialchars%^=@", [LABEL_VALUE_MSG]),
        ("Tama-nui-te-rā", [LABEL_VALUE_MSG]),
        ("-starts", [LABEL_VALUE_MSG]),
        ("ends_", [LABEL_VALUE_MSG]),
        ("a/b", [LABEL_VALUE_MSG]),
        (" ", [LABEL_VALUE_MSG]),
        ("a" * 64, ["must be no more than 63 characters"]),
    ],
)
def test_label_value_invalid(value, expected):
    assert v.is_valid_label_value(value) == expected


def test_annotation_keys_ignore_case_where_label_keys_do_not():
    assert v.is_qualified_name("Example.com/foo") != []
    assert v.is_valid_annotation_key("Example.com/foo") == []
    assert v.is_valid_annotation_key("kubectl.kubernetes.io/last-applied-configuration") == []
    assert v.is_valid_annotation_key("a/b/c") != []


@pytest.mark.parametrize(
    "name, expected",
    [
        ("ok-name", []),
        ("UPPER:ok", []),
        (".", ["may not be '.'"]),
        ("..", ["may not be '..'"]),
        ("a/b", ["may not contain '/'"]),
        ("50%", ["may not contain '%'"]),
    ],
)
def test_path_segment_name(name, expected):
    assert v.is_valid_path_segment_name(name) == expected


# --- FieldError -----------------------------------------------------------------------


def test_field_error_message_matches_upstream_example():
    errs = v.validate_object_name("Foo_bar", "metadata.name")
    assert [e.message() for e in errs] == [
        'metadata.name: Invalid value: "Foo_bar": a lowercase RFC 1123 subdomain must consist of lower '
        "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ]
    assert errs[0].type == "FieldValueInvalid"
    assert errs[0].field == "metadata.name"
    assert errs[0].value == "Foo_bar"
    assert str(errs[0]) == errs[0].message()


@pytest.mark.parametrize(
    "err, text",
    [
        (FieldError.required("spec.x"), "spec.x: Required value"),
        (FieldError.required("spec.x", "must be set"), "spec.x: Required value: must be set"),
        (FieldError.forbidden("spec.x", "not allowed"), "spec.x: Forbidden: not allowed"),
        (FieldError.too_long("spec.x", "long value", 10), "spec.x: Too long: must have at most 10 bytes"),
        (FieldError.duplicate("spec.ports[1]", "http"), 'spec.ports[1]: Duplicate value: "http"'),
        (
            FieldError.not_supported("spec.policy", "Sometimes", ["Always", "Never"]),
            'spec.policy: Unsupported value: "Sometimes": supported values: "Always", "Never"',
        ),
        (FieldError.not_supported("spec.policy", "x"), 'spec.policy: Unsupported value: "x"'),
        (FieldError.invalid("spec.replicas", -1, "must be >= 0"), "spec.replicas: Invalid value: -1: must be >= 0"),
        (FieldError.invalid("spec.flag", True, "bad"), "spec.flag: Invalid value: true: bad"),
        (FieldError.invalid("spec.opt", None, "bad"), "spec.opt: Invalid value: null: bad"),
        (FieldError.invalid("spec.f", 1.5, "bad"), "spec.f: Invalid value: 1.5: bad"),
        (FieldError.invalid("spec.l", ["a", 1], "bad"), 'spec.l: Invalid value: ["a",1]: bad'),
        (
            FieldError.type_invalid("spec.n", "x", "must be an integer"),
            'spec.n: Invalid value: "x": must be an integer',
        ),
        (FieldError.invalid("spec.s", 'q"\\\n\x01é\u200b', ""), 'spec.s: Invalid value: "q\\"\\\\\\n\\x01é\\u200b"'),
    ],
)
def test_field_error_text(err, text):
    assert err.message() == text


def test_field_error_types_use_upstream_reasons():
    assert {
        FieldError.invalid("f", "", "").type,
        FieldError.required("f").type,
        FieldError.not_supported("f", "", []).type,
        FieldError.duplicate("f", "").type,
        FieldError.forbidden("f", "").type,
        FieldError.too_long("f", "", 1).type,
        FieldError.type_invalid("f", "", "").type,
    } == {
        "FieldValueInvalid",
        "FieldValueRequired",
        "FieldValueNotSupported",
        "FieldValueDuplicate",
        "FieldValueForbidden",
        "FieldValueTooLong",
        "FieldValueTypeInvalid",
    }


def test_field_error_is_frozen_and_hashable():
    e = FieldError.invalid("a", "b", "c")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.field = "x"  # type: ignore[misc]
    assert e == FieldError("FieldValueInvalid", "a", "b", "c")
    assert len({e, FieldError.invalid("a", "b", "c")}) == 1


# --- labels and annotations -------------------------------------------------------------


def test_validate_labels_valid_and_none():
    assert v.validate_labels(None, "metadata.labels") == []
    assert v.validate_labels({}, "metadata.labels") == []
    assert v.validate_labels({"orch.io/hostname": "node-1", "app": "", "A_b": "C.d"}, "metadata.labels") == []


def test_validate_labels_reports_key_and_value_at_the_path():
    errs = v.validate_labels({"bad key": "ok", "good": "-bad-value"}, "spec.template.metadata.labels")
    assert [e.message() for e in errs] == [
        'spec.template.metadata.labels: Invalid value: "bad key": name part ' + QNAME_TAIL,
        'spec.template.metadata.labels: Invalid value: "-bad-value": ' + LABEL_VALUE_MSG,
    ]
    assert all(e.type == "FieldValueInvalid" for e in errs)


def test_validate_labels_long_value_and_prefixed_key():
    errs = v.validate_labels({"Example.com/x": "a" * 64}, "metadata.labels")
    assert [e.detail for e in errs] == ["prefix part " + SUBDOMAIN_MSG, "must be no more than 63 characters"]
    assert [e.value for e in errs] == ["Example.com/x", "a" * 64]


def test_validate_labels_rejects_non_strings():
    errs = v.validate_labels({"a": 1}, "metadata.labels")
    assert [(e.type, e.field, e.value) for e in errs] == [("FieldValueTypeInvalid", "metadata.labels[a]", 1)]
    assert v.validate_labels(["a"], "metadata.labels")[0].type == "FieldValueTypeInvalid"


def test_validate_annotations_keys():
    assert v.validate_annotations(None, "metadata.annotations") == []
    assert v.validate_annotations({"Example.com/Some-Thing": "x" * 10000}, "metadata.annotations") == []
    errs = v.validate_annotations({"a/b/c": "x", "ok": "y", "/x": ""}, "metadata.annotations")
    assert [e.value for e in errs] == ["a/b/c", "/x"]
    assert errs[1].message() == 'metadata.annotations: Invalid value: "/x": prefix part must be non-empty'


def test_validate_annotations_total_size():
    limit = v.TOTAL_ANNOTATION_SIZE_LIMIT_B
    assert limit == 256 * 1024
    at_limit = {"k": "x" * (limit - 1)}
    assert v.validate_annotations(at_limit, "metadata.annotations") == []
    over = {"k": "x" * limit}
    errs = v.validate_annotations(over, "metadata.annotations")
    assert [e.message() for e in errs] == ["metadata.annotations: Too long: must have at most 262144 bytes"]
    assert errs[0].type == "FieldValueTooLong"
    # Spread over many keys and counted in bytes.
    many = {f"k{i}": "é" * 700 for i in range(200)}
    assert v.validate_annotations(many, "metadata.annotations")[-1].type == "FieldValueTooLong"


# --- object names -------------------------------------------------------------------------


def test_validate_object_name_required():
    errs = v.validate_object_name("", "metadata.name")
    assert [e.message() for e in errs] == ["metadata.name: Required value: name or generateName is required"]
    assert v.validate_object_name(None, "metadata.name")[0].type == "FieldValueRequired"


@pytest.mark.parametrize(
    "name, rule, ok",
    [
        ("my.app", "subdomain", True),
        ("my.app", "label", False),
        ("my-app", "label", True),
        ("1app", "label", True),
        ("1app", "dns1035", False),
        ("app1", "dns1035", True),
        ("system:node:Foo", "path_segment", True),
        ("..", "path_segment", False),
        ("a/b", "path_segment", False),
        ("a" * 253, "subdomain", True),
        ("a" * 254, "subdomain", False),
    ],
)
def test_validate_object_name_rules(name, rule, ok):
    errs = v.validate_object_name(name, "metadata.name", kind_rule=rule)
    assert (errs == []) is ok
    assert all(e.field == "metadata.name" and e.value == name for e in errs)


def test_validate_object_name_custom_rule_and_unknown_rule():
    def no_x(name: str, prefix: bool) -> list[str]:
        return ["must not contain x"] if "x" in name else []

    assert v.validate_object_name("box", "metadata.name", kind_rule=no_x)[0].message() == (
        'metadata.name: Invalid value: "box": must not contain x'
    )
    with pytest.raises(ValueError, match="unknown name rule"):
        v.validate_object_name("a", "metadata.name", kind_rule="nope")


@pytest.mark.parametrize(
    "prefix, rule, ok",
    [
        ("", "subdomain", True),
        ("web-", "subdomain", True),
        ("web", "subdomain", True),
        ("web.", "subdomain", False),
        ("Web-", "subdomain", False),
        ("-", "subdomain", False),
        ("a-", "label", True),
        ("a.b-", "label", False),
        ("1-", "dns1035", True),  # masked to "a"
        ("pod-", "dns1035", True),
        ("a/", "path_segment", False),
        ("..", "path_segment", True),
    ],
)
def test_validate_generate_name(prefix, rule, ok):
    errs = v.validate_generate_name(prefix, "metadata.generateName", kind_rule=rule)
    assert (errs == []) is ok
    assert all(e.field == "metadata.generateName" and e.value == prefix for e in errs)


def test_generate_name_mask_keeps_upstream_length_rule():
    # 253 chars ending in '-' are masked to 252: accepted, as upstream.
    assert v.validate_generate_name("a" * 252 + "-", "metadata.generateName") == []
    assert v.validate_generate_name("a" * 254 + "-", "metadata.generateName") != []


# --- properties ------------------------------------------------------------------------------

_label = st.from_regex(re.compile(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?"), fullmatch=True)
_subdomain = st.lists(_label, min_size=1, max_size=4).map(".".join)
_qname = st.from_regex(re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,30}[A-Za-z0-9])?"), fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(_subdomain)
def test_generated_subdomains_are_valid(name):
    assert v.is_dns1123_subdomain(name) == []
    assert v.validate_object_name(name, "metadata.name") == []


@settings(max_examples=150, deadline=None)
@given(_label)
def test_every_label_is_a_subdomain_and_a_label_value(name):
    assert v.is_dns1123_label(name) == []
    assert v.is_dns1123_subdomain(name) == []
    assert v.is_valid_label_value(name) == []
    assert v.is_qualified_name(name) == []


@settings(max_examples=150, deadline=None)
@given(_subdomain, _qname)
def test_prefixed_keys_are_valid_label_and_annotation_keys(prefix, name):
    key = f"{prefix}/{name}"
    assert v.is_qualified_name(key) == []
    assert v.is_valid_annotation_key(key) == []
    assert v.validate_labels({key: name}, "metadata.labels") == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_checks_agree_with_a_direct_reading_of_the_rules(s):
    lower_alnum = set("abcdefghijklmnopqrstuvwxyz0123456789")
    is_label = 0 < len(s) <= 63 and set(s) <= lower_alnum | {"-"} and s[0] in lower_alnum and s[-1] in lower_alnum
    assert (v.is_dns1123_label(s) == []) is is_label
    parts = s.split(".")
    is_sub = len(s.encode()) <= 253 and all(
        p and set(p) <= lower_alnum | {"-"} and p[0] in lower_alnum and p[-1] in lower_alnum for p in parts
    )
    assert (v.is_dns1123_subdomain(s) == []) is is_sub
    alnum = lower_alnum | set("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    is_value = s == "" or (len(s) <= 63 and set(s) <= alnum | set("-_.") and s[0] in alnum and s[-1] in alnum)
    assert (v.is_valid_label_value(s) == []) is is_value


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="aZ9-_./é", max_size=12))
def test_invalid_inputs_always_explain_themselves(s):
    for check in (
        v.is_dns1123_subdomain,
        v.is_dns1123_label,
        v.is_dns1035_label,
        v.is_qualified_name,
        v.is_valid_label_value,
    ):
        errs = check(s)
        assert all(isinstance(m, str) and m for m in errs)
    for err in v.validate_labels({s: s}, "metadata.labels"):
        assert err.message().startswith("metadata.labels: Invalid value: ")

"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), with the RFCs' own examples."""

from __future__ import annotations

import copy

import pytest

from apiserver_min.registry.patch import PatchApplyError, PatchError, json_patch, merge_patch

# RFC 7386, Appendix A: original, patch, result.
RFC7386_EXAMPLES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize("original, patch, result", RFC7386_EXAMPLES)
def test_merge_patch_rfc_examples(original, patch, result):
    before = copy.deepcopy(original)
    assert merge_patch(original, patch) == result
    assert original == before  # the target is not modified in place


def test_merge_patch_rfc_section3_example():
    target = {
        "title": "Goodbye!",
        "author": {"givenName": "John", "familyName": "Doe"},
        "tags": ["example", "sample"],
        "content": "This will be unchanged",
    }
    patch = {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None}, "tags": ["example"]}
    assert merge_patch(target, patch) == {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["example"],
        "content": "This will be unchanged",
        "phoneNumber": "+01-123-456-7890",
    }


def test_merge_patch_result_does_not_share_the_patch():
    patch = {"a": {"b": [1, 2]}}
    out = merge_patch({}, patch)
    out["a"]["b"].append(3)
    assert patch == {"a": {"b": [1, 2]}}


# RFC 6902, Appendix A -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, doc, ops, result",
    [
        (
            "A.1 add an object member",
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux"}],
            {"baz": "qux", "foo": "bar"},
        ),
        (
            "A.2 add an array element",
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        (
            "A.3 remove an object member",
            {"baz": "qux", "foo": "bar"},
            [{"op": "remove", "path": "/baz"}],
            {"foo": "bar"},
        ),
        (
            "A.4 remove an array element",
            {"foo": ["bar", "qux", "baz"]},
            [{"op": "remove", "path": "/foo/1"}],
            {"foo": ["bar", "baz"]},
        ),
        (
            "A.5 replace a value",
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            "A.6 move a value",
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            "A.7 move an array element",
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            "A.8 test a value: success",
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        (
            "A.10 add a nested member object",
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        (
            "A.11 ignore unrecognized elements",
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
            {"foo": "bar", "baz": "qux"},
        ),
        (
            "A.14 ~ escape ordering",
            {"/": 9, "~1": 10},
            [{"op": "test", "path": "/~01", "value": 10}],
            {"/": 9, "~1": 10},
        ),
        (
            "A.16 add an array value",
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
    ],
)
def test_json_patch_rfc_examples(name, doc, ops, result):
    before = copy.deepcopy(doc)
    assert json_patch(doc, ops) == result, name
    assert doc == before


def test_a9_test_a_value_error():
    with pytest.raises(PatchApplyError, match="test operation at '/baz' failed"):
        json_patch({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}])


def test_a12_add_to_a_nonexistent_target():
    with pytest.raises(PatchApplyError, match="/baz/bat"):
        json_patch({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}])


def test_a15_comparing_strings_and_numbers():
    with pytest.raises(PatchApplyError):
        json_patch({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}])


def test_test_compares_json_values_strictly():
    # JSON true is not the number 1 (Python says True == 1), but 1 and 1.0 are the same number.
    with pytest.raises(PatchApplyError):
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": True}])
    with pytest.raises(PatchApplyError):
        json_patch({"a": [0, False]}, [{"op": "test", "path": "/a", "value": [False, 0]}])
    with pytest.raises(PatchApplyError):
        json_patch({"a": {"x": 1}}, [{"op": "test", "path": "/a", "value": {"x": True}}])
    assert json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 1.0}]) == {"a": 1}
    assert json_patch({"a": {"x": [1, None]}}, [{"op": "test", "path": "/a", "value": {"x": [1, None]}}])


def test_operations_apply_in_order_and_whole_document():
    doc = {"metadata": {"labels": {"a": "1"}}, "spec": {"items": [1, 2, 3]}}
    ops = [
        {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/b"},
        {"op": "replace", "path": "/spec/items/0", "value": 10},
        {"op": "remove", "path": "/spec/items/2"},
        {"op": "add", "path": "/spec/items/-", "value": 4},
        {"op": "add", "path": "/spec/items/0", "value": 0},
        {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/annotations"},
    ]
    assert json_patch(doc, ops) == {
        "metadata": {"labels": {"b": "1"}, "annotations": "1"},
        "spec": {"items": [0, 10, 2, 4]},
    }
    assert json_patch(doc, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert json_patch(doc, [{"op": "add", "path": "", "value": {"x": 1}}]) == {"x": 1}
    assert json_patch(doc, []) == doc


def test_add_replaces_an_existing_member_and_copy_is_deep():
    assert json_patch({"a": 1}, [{"op": "add", "path": "/a", "value": 2}]) == {"a": 2}
    out = json_patch({"a": {"x": [1]}}, [{"op": "copy", "from": "/a", "path": "/b"}])
    out["b"]["x"].append(2)
    assert out["a"] == {"x": [1]}


@pytest.mark.parametrize(
    "ops, message",
    [
        ([{"op": "add", "path": "/a/5", "value": 1}], "out of bounds"),
        ([{"op": "add", "path": "/a/01", "value": 1}], "invalid array index '01'"),
        ([{"op": "add", "path": "/a/x", "value": 1}], "invalid array index 'x'"),
        ([{"op": "remove", "path": "/a/-"}], "invalid array index '-'"),
        ([{"op": "remove", "path": "/a/3"}], "out of bounds"),
        ([{"op": "remove", "path": "/missing"}], "cannot remove '/missing'"),
        ([{"op": "remove", "path": ""}], "cannot remove the whole document"),
        ([{"op": "replace", "path": "/missing", "value": 1}], "'/missing' does not exist"),
        ([{"op": "replace", "path": "/a/-", "value": 1}], "invalid array index '-'"),
        ([{"op": "move", "from": "/missing", "path": "/b"}], "/missing"),
        ([{"op": "move", "from": "/o", "path": "/o/child"}], "cannot move '/o' into its own child"),
        ([{"op": "copy", "from": "/a/9", "path": "/b"}], "out of bounds"),
        ([{"op": "test", "path": "/missing", "value": 1}], "'/missing' does not exist"),
        ([{"op": "add", "path": "/s/x", "value": 1}], "cannot add at '/s/x'"),
        ([{"op": "add", "path": "/s/x/y", "value": 1}], "cannot descend into a scalar"),
    ],
)
def test_operations_that_cannot_apply(ops, message):
    doc = {"a": [1, 2, 3], "o": {"k": "v"}, "s": "scalar"}
    with pytest.raises(PatchApplyError, match=message):
        json_patch(doc, ops)


@pytest.mark.parametrize(
    "ops, message",
    [
        ({"op": "add"}, "must be a JSON array"),
        (["add"], "operation 0 is not an object"),
        ([{"op": "add", "path": "/a"}], r"operation 0 \(add\) has no 'value'"),
        ([{"op": "replace", "path": "/a"}], r"operation 0 \(replace\) has no 'value'"),
        ([{"op": "test", "path": "/a"}], r"operation 0 \(test\) has no 'value'"),
        ([{"op": "remove"}], "'path' must be a string"),
        ([{"op": "remove", "path": "a"}], "must start with '/'"),
        (
            [{"op": "test", "path": "/a", "value": [1, 2, 3]}, {"op": "frobnicate", "path": "/a"}],
            "operation 1: unknown op 'frobnicate'",
        ),
        ([{"op": "move", "path": "/b"}], r"operation 0 \(move\) has no 'from'"),
        ([{"op": "copy", "path": "/b", "from": 3}], r"operation 0 \(copy\) has no 'from'"),
    ],
)
def test_malformed_patch_documents(ops, message):
    with pytest.raises(PatchError, match=message):
        json_patch({"a": [1, 2, 3]}, ops)

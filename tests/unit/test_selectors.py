"""Selectors must parse, print and match exactly as upstream's labels/fields packages,
since clients build the strings and the server's canonical form flows back to them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver_min.api.selectors import (
    DOES_NOT_EXIST,
    DOUBLE_EQUALS,
    EQUALS,
    EXISTS,
    GREATER_THAN,
    IN,
    LESS_THAN,
    NOT_EQUALS,
    NOT_IN,
    FieldRequirement,
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectorError,
    escape_field_value,
    label_selector_from_dict,
    new_requirement,
    parse_field_selector,
    parse_label_selector,
    unescape_field_value,
    validate_label_selector,
)

# --- label selector: parsing and printing ----------------------------------------------


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("", ""),
        ("   ", ""),
        ("x=a", "x=a"),
        ("x==a", "x==a"),
        ("x!=a", "x!=a"),
        ("x", "x"),
        ("!x", "!x"),
        ("! x", "!x"),
        ("x=", "x="),
        ("x=,z= ", "x=,z="),
        ("x= ,z= ", "x=,z="),
        ("x in (a)", "x in (a)"),
        ("x in (b,a)", "x in (a,b)"),
        ("x in (a,a,b)", "x in (a,b)"),
        ("x notin (a)", "x notin (a)"),
        ("x in ()", "x in ()"),
        ("x in (,)", "x in ()"),
        ("x in (,a)", "x in (,a)"),
        ("x in (a,)", "x in (,a)"),
        ("x in (a,,b)", "x in (,a,b)"),
        ("x in (a,a)", "x in (a)"),
        ("x in (,,)", None),  # upstream's parser rejects a second empty item
        ("x in (a,,)", None),
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("x>1", "x>1"),
        ("x<1", "x<1"),
        ("x>1,z<5", "x>1,z<5"),
        ("a=b,c!=d,e in (x,y),!f,g", "a=b,c!=d,e in (x,y),!f,g"),
        ("g,!f,e in (y,x),c!=d,a=b", "a=b,c!=d,e in (x,y),!f,g"),
        ("  a  =  b  ,\tc != d ,\n e in ( y , x ) , ! f , g ", "a=b,c!=d,e in (x,y),!f,g"),
        ("x=a,y!=b", "x=a,y!=b"),
        ("x=a,y!=b,z in (h,i,j)", "x=a,y!=b,z in (h,i,j)"),
        ("x=a||y=b", None),
        ("x in (x,y),z notin (w)", "x in (x,y),z notin (w)"),
        ("in in (in, notin)", "in in (in,notin)"),
        ("notin notin (in)", "notin notin (in)"),
        ("x=in", "x=in"),
        ("orch.io/hostname=node-1", "orch.io/hostname=node-1"),
        ("example.com/Key_1.2=Value-3", "example.com/Key_1.2=Value-3"),
        ("b,a", "a,b"),
        ("a,a", "a,a"),
    ],
)
def test_parse_and_print(text, canonical):
    if canonical is None:
        with pytest.raises(SelectorError):
            parse_label_selector(text)
        return
    sel = parse_label_selector(text)
    assert str(sel) == canonical
    assert parse_label_selector(str(sel)) == sel


@pytest.mark.parametrize(
    "text, message, token, position",
    [
        ("=a", "found '=', expected: !, identifier, or 'end of string'", "=", 0),
        ("x=a,", "found '', expected: identifier after ','", "", 4),
        (",x", "found ',', expected: !, identifier, or 'end of string'", ",", 0),
        ("x,,y", "found ',', expected: identifier after ','", ",", 2),
        ("x=b)", "found ')', expected: ',' or 'end of string'", ")", 3),
        ("x in (a))", "found ')', expected: ',' or 'end of string'", ")", 8),
        ("x=a b", "found 'b', expected: ',' or 'end of string'", "b", 4),
        ("!x=a", "found '=', expected: ',' or 'end of string'", "=", 2),
        ("x=a=b", "found '=', expected: ',' or 'end of string'", "=", 3),
        ("!", "unable to parse requirement: found '', expected: identifier", "", 1),
        ("!!x", "unable to parse requirement: found '!', expected: identifier", "!", 1),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'", "!=", 0),
        ("! =a", "unable to parse requirement: found '=', expected: identifier", "=", 2),
        ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt", "y", 2),
        ("x (a)", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt", "(", 2),
        ("x in a", "unable to parse requirement: found 'a' expected: '('", "a", 5),
        ("x in", "unable to parse requirement: found '' expected: '('", "", 4),
        ("x in (", "unable to parse requirement: found '', expected: ',', ')' or identifier", "", 6),
        ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'", "", 7),
        ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'", "b", 8),
        ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier", "=", 8),
        ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier", "=", 6),
        ("x=(a)", "unable to parse requirement: found '(', expected: identifier", "(", 2),
        ("x=!a", "unable to parse requirement: found '!', expected: identifier", "!", 2),
        ("x>a", "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: \"a\"", "a", 2),
        ("x<", "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: \"\"", "", 2),
        ("a=b,-bad=c", 'unable to parse requirement: invalid label key "-bad": name part must consist of', "-bad", 4),
        ("a/b/c", 'unable to parse requirement: invalid label key "a/b/c": a qualified name must consist', "a/b/c", 0),
        (
            "Bad.Prefix/x",
            'invalid label key "Bad.Prefix/x": prefix part a lowercase RFC 1123 subdomain',
            "Bad.Prefix/x",
            0,
        ),
        ("k" * 64, f'invalid label key "{"k" * 64}": name part must be no more than 63 characters', "k" * 64, 0),
        ("x=-a", 'unable to parse requirement: invalid label value "-a" for key "x": a valid label must be', "-a", 2),
        ("x in (ok, bad_)", 'invalid label value "bad_" for key "x"', "bad_", 10),
        ("x=" + "v" * 64, 'for key "x": must be no more than 63 characters', "v" * 64, 2),
        ("x=é", 'invalid label value "é" for key "x"', "é", 2),
    ],
)
def test_parse_errors_name_token_and_position(text, message, token, position):
    with pytest.raises(SelectorError) as info:
        parse_label_selector(text)
    err = info.value
    assert message in str(err)
    assert err.token == token
    assert err.position == position
    assert f"(at position {position})" in str(err)
    assert isinstance(err, ValueError)


def test_requirements_are_key_operator_values_tuples():
    sel = parse_label_selector("z notin (b,a),x,!y,w=1,v>3")
    assert sel.requirements == [
        ("v", GREATER_THAN, ("3",)),
        ("w", EQUALS, ("1",)),
        ("x", EXISTS, ()),
        ("y", DOES_NOT_EXIST, ()),
        ("z", NOT_IN, ("a", "b")),
    ]
    key, op, values = sel.requirements[-1]
    assert (key, op, values) == ("z", "notin", ("a", "b"))
    assert isinstance(sel.requirements[0], Requirement)


def test_equality_and_hash_ignore_spelling_but_not_operator():
    a = parse_label_selector("b in (y,x), a")
    b = parse_label_selector("a,b in (x,y,x)")
    assert a == b and hash(a) == hash(b)
    assert parse_label_selector("a=b") != parse_label_selector("a==b")
    assert parse_label_selector("a=b") != parse_label_selector("a in (b)")
    assert parse_label_selector("") == LabelSelector.everything()
    assert LabelSelector.nothing() != LabelSelector.everything()


# --- label selector: matching ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, labels, expected",
    [
        ("", {"x": "y"}, True),
        ("", {}, True),
        ("", None, True),
        ("x=y", {"x": "y"}, True),
        ("x=y", {"x": "z"}, False),
        ("x=y", {}, False),
        ("x==y", {"x": "y"}, True),
        ("x=", {"x": ""}, True),
        ("x=", {}, False),
        ("x!=y", {"x": "z"}, True),
        ("x!=y", {"x": "y"}, False),
        ("x!=y", {}, True),  # absent key satisfies !=
        ("x!=y", None, True),
        ("x in (a,b)", {"x": "b"}, True),
        ("x in (a,b)", {"x": "c"}, False),
        ("x in (a,b)", {}, False),
        ("x in ()", {"x": ""}, True),
        ("x in ()", {"x": "a"}, False),
        ("x notin (a,b)", {"x": "c"}, True),
        ("x notin (a,b)", {"x": "a"}, False),
        ("x notin (a,b)", {}, True),  # absent key satisfies notin
        ("x", {"x": ""}, True),
        ("x", {"y": "x"}, False),
        ("!x", {"y": "x"}, True),
        ("!x", {"x": ""}, False),
        ("x>1", {"x": "2"}, True),
        ("x>1", {"x": "1"}, False),
        ("x>1", {"x": "a"}, False),
        ("x>1", {}, False),
        ("x<1", {"x": "-5"}, True),
        ("x<1", {"x": "+0"}, True),
        ("x<1", {"x": "1_0"}, False),
        ("x<1", {"x": " 0"}, False),
        ("x>1", {"x": "99999999999999999999"}, False),  # beyond int64: not a number upstream
        ("x=a,y!=b,z in (h,i)", {"x": "a", "z": "i"}, True),
        ("x=a,y!=b,z in (h,i)", {"x": "a", "y": "b", "z": "i"}, False),
        ("x=a,!w", {"x": "a", "w": "q"}, False),
    ],
)
def test_matches(text, labels, expected):
    assert parse_label_selector(text).matches(labels) is expected


def test_empty_and_nothing():
    assert parse_label_selector("").empty
    assert parse_label_selector(" ").empty
    assert not parse_label_selector("a").empty
    nothing = LabelSelector.nothing()
    assert not nothing.empty and nothing.matches_nothing
    assert not nothing.matches({})
    assert str(nothing) == ""
    assert nothing.add(new_requirement("a", EXISTS)) == nothing


def test_exact_match_values():
    sel = parse_label_selector("a=x,b in (p,q),c!=r,d notin (s),e,!f,g==h")
    assert sel.exact_match_values("a") == {"x"}
    assert sel.exact_match_values("b") == {"p", "q"}
    assert sel.exact_match_values("g") == {"h"}
    for key in ("c", "d", "e", "f", "zzz"):
        assert sel.exact_match_values(key) is None
    assert parse_label_selector("a in (x,y),a in (y,z)").exact_match_values("a") == {"y"}
    assert parse_label_selector("a=x,a=y").exact_match_values("a") == set()


def test_from_set_add_and_requirement_builder():
    sel = LabelSelector.from_set({"b": "2", "a": "1"})
    assert str(sel) == "a=1,b=2"
    assert sel.matches({"a": "1", "b": "2", "c": "3"})
    assert LabelSelector.from_set({}).empty and LabelSelector.from_set(None).empty
    more = sel.add(new_requirement("c", NOT_IN, ["y", "x", "x"]))
    assert str(more) == "a=1,b=2,c notin (x,y)"
    assert str(sel) == "a=1,b=2"  # add() copies
    with pytest.raises(SelectorError, match='invalid label key "-x"'):
        LabelSelector.from_set({"-x": "1"})


@pytest.mark.parametrize(
    "key, op, values, message",
    [
        ("a", IN, [], "for 'in', 'notin' operators, values set can't be empty"),
        ("a", NOT_IN, [], "for 'in', 'notin' operators, values set can't be empty"),
        ("a", EQUALS, ["x", "y"], "exact-match compatibility requires one single value"),
        ("a", DOUBLE_EQUALS, [], "exact-match compatibility requires one single value"),
        ("a", NOT_EQUALS, [], "exact-match compatibility requires one single value"),
        ("a", EXISTS, ["x"], "values set must be empty for exists and does not exist"),
        ("a", DOES_NOT_EXIST, ["x"], "values set must be empty for exists and does not exist"),
        ("a", GREATER_THAN, ["1", "2"], "for 'Gt', 'Lt' operators, exactly one value is required"),
        ("a", LESS_THAN, ["x"], "for 'Gt', 'Lt' operators, the value must be an integer: \"x\""),
        ("a", "~", ["x"], 'unsupported operator "~"'),
        ("a b", EXISTS, [], 'invalid label key "a b"'),
        ("a", IN, ["x y"], 'invalid label value "x y" for key "a"'),
    ],
)
def test_requirement_builder_rejects_what_upstream_rejects(key, op, values, message):
    with pytest.raises(SelectorError) as info:
        new_requirement(key, op, values)
    assert message in str(info.value)
    assert info.value.position is None


# --- label selector: structured form ---------------------------------------------------------


def test_from_dict_builds_the_same_selector_as_the_string():
    d = {
        "matchLabels": {"app": "web", "tier": "front"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "zone", "operator": "NotIn", "values": ["z1"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "owner", "operator": "Exists", "values": []},
        ],
    }
    sel = label_selector_from_dict(d)
    assert str(sel) == "app=web,!canary,env in (dev,prod),owner,tier=front,zone notin (z1)"
    assert sel == parse_label_selector(str(sel))
    assert sel.matches({"app": "web", "tier": "front", "env": "dev", "owner": "me"})
    assert not sel.matches({"app": "web", "tier": "front", "env": "dev", "owner": "me", "zone": "z1"})
    assert sel.exact_match_values("app") == {"web"}


def test_from_dict_empty_and_null():
    assert label_selector_from_dict({}).empty
    assert label_selector_from_dict({"matchLabels": {}, "matchExpressions": []}).empty
    assert label_selector_from_dict({}).matches({"any": "thing"})
    none = label_selector_from_dict(None)
    assert not none.empty and not none.matches({})


@pytest.mark.parametrize(
    "d, messages",
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            ["matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"],
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn"}]},
            ["matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"],
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            [
                "matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or "
                "'DoesNotExist'"
            ],
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
            [
                "matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or "
                "'DoesNotExist'"
            ],
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]},
            ['matchExpressions[0].operator: Invalid value: "in": not a valid selector operator'],
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            ['matchExpressions[0].operator: Invalid value: "Gt": not a valid selector operator'],
        ),
        (
            {"matchExpressions": [{"key": "", "operator": "Exists"}]},
            [
                'matchExpressions[0].key: Invalid value: "": name part must be non-empty',
                'matchExpressions[0].key: Invalid value: "": name part must consist of',
            ],
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["ok", "-no"]}]},
            ['matchExpressions[0].values[1]: Invalid value: "-no": a valid label must be'],
        ),
        ({"matchLabels": {"a": "-no"}}, ['matchLabels: Invalid value: "-no": a valid label must be']),
        ({"matchLabels": {"a/b/c": "x"}}, ['matchLabels: Invalid value: "a/b/c": a qualified name']),
        ({"matchExpressions": "a"}, ['matchExpressions: Invalid value: "a": must be an array']),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}, ["must be an array of strings"]),
        ("a=b", ['selector: Invalid value: "a=b": must be an object']),
    ],
)
def test_from_dict_validation(d, messages):
    errs = validate_label_selector(d)
    assert len(errs) == len(messages)
    for err, msg in zip(errs, messages):
        assert msg in err.message()
    with pytest.raises(SelectorError) as info:
        label_selector_from_dict(d)
    for msg in messages:
        assert msg in str(info.value)


def test_validate_label_selector_prefixes_the_path():
    errs = validate_label_selector({"matchExpressions": [{"key": "a", "operator": "In"}]}, "spec.selector")
    assert [e.field for e in errs] == ["spec.selector.matchExpressions[0].values"]
    assert [e.type for e in errs] == ["FieldValueRequired"]
    assert validate_label_selector(None, "spec.selector") == []


# --- field selectors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, canonical, reqs",
    [
        ("", "", []),
        ("metadata.name=foo", "metadata.name=foo", [("metadata.name", "=", "foo")]),
        ("metadata.name==foo", "metadata.name=foo", [("metadata.name", "=", "foo")]),
        ("spec.nodeName!=", "spec.nodeName!=", [("spec.nodeName", "!=", "")]),
        ("a=", "a=", [("a", "=", "")]),
        ("b=2,a=1", "a=1,b=2", [("a", "=", "1"), ("b", "=", "2")]),
        ("a=1,,b=2,", "a=1,b=2", [("a", "=", "1"), ("b", "=", "2")]),
        (r"a=x\,y", r"a=x\,y", [("a", "=", "x,y")]),
        (r"a=x\=y", r"a=x\=y", [("a", "=", "x=y")]),
        (r"a=x\\y", r"a=x\\y", [("a", "=", "x\\y")]),
        (r"a=x\!y", "a=x!y", [("a", "=", "x!y")]),
        ("a=x!y", "a=x!y", [("a", "=", "x!y")]),
        ("a!=!x", "a!=!x", [("a", "!=", "!x")]),
        (r"a=\=\=", r"a=\=\=", [("a", "=", "==")]),
        ("a=b c", "a=b c", [("a", "=", "b c")]),
        ("a =b", "a =b", [("a ", "=", "b")]),
        (
            "status.phase!=Running,status.phase!=Pending",
            "status.phase!=Pending,status.phase!=Running",
            [("status.phase", "!=", "Pending"), ("status.phase", "!=", "Running")],
        ),
    ],
)
def test_field_selector_parse(text, canonical, reqs):
    sel = parse_field_selector(text)
    assert str(sel) == canonical
    assert sel.requirements == reqs
    assert all(isinstance(r, FieldRequirement) for r in sel.requirements)
    assert parse_field_selector(str(sel)) == sel


@pytest.mark.parametrize(
    "text, message, token, position",
    [
        ("a", "invalid field selector \"a\": expected a '=', '==' or '!=' operator in term \"a\"", "a", 0),
        (
            "x=1,abc",
            "invalid field selector \"x=1,abc\": expected a '=', '==' or '!=' operator in term \"abc\"",
            "abc",
            4,
        ),
        ("a=b=c", "invalid field selector: unescaped character in value: '='", "=", 3),
        ("a==b=c", "invalid field selector: unescaped character in value: '='", "=", 4),
        ("x=1,a!=b=c", "invalid field selector: unescaped character in value: '='", "=", 8),
        (r"a=\q", r"invalid field selector: invalid escape sequence: \q", r"\q", 2),
        ("a=b\\", "invalid field selector: invalid escape sequence: \\", "\\", 3),
        ("a=\\\\\\", "invalid field selector: invalid escape sequence: \\", "\\", 4),
    ],
)
def test_field_selector_errors(text, message, token, position):
    with pytest.raises(SelectorError) as info:
        parse_field_selector(text)
    assert message in str(info.value)
    assert info.value.token == token
    assert info.value.position == position


@pytest.mark.parametrize(
    "text, fields, expected",
    [
        ("", {}, True),
        ("metadata.name=foo", {"metadata.name": "foo"}, True),
        ("metadata.name=foo", {"metadata.name": "bar"}, False),
        ("metadata.name=foo", {}, False),
        ("spec.nodeName=", {}, True),  # absent compares as ""
        ("spec.nodeName!=", {}, False),
        ("spec.nodeName!=", {"spec.nodeName": "n1"}, True),
        ("spec.nodeName!=n1", {}, True),
        ("a=1,b!=2", {"a": "1", "b": "3"}, True),
        ("a=1,b!=2", {"a": "1", "b": "2"}, False),
        (r"a=x\,y", {"a": "x,y"}, True),
    ],
)
def test_field_selector_matches(text, fields, expected):
    assert parse_field_selector(text).matches(fields) is expected


def test_field_selector_exact_match_empty_and_validate():
    sel = parse_field_selector("metadata.namespace!=kube,metadata.name==web-1")
    assert sel.exact_match("metadata.name") == "web-1"
    assert sel.exact_match("metadata.namespace") is None
    assert sel.exact_match("spec.x") is None
    assert parse_field_selector("").empty and FieldSelector.everything().empty
    assert not sel.empty
    assert sel.validate_fields({"metadata.name", "metadata.namespace"}) is sel
    with pytest.raises(SelectorError) as info:
        parse_field_selector("metadata.name=a,spec.foo=b").validate_fields({"metadata.name"})
    assert str(info.value) == "field label not supported: spec.foo"
    assert info.value.token == "spec.foo"


def test_field_value_escaping_helpers():
    assert escape_field_value("a\\b,c=d!") == "a\\\\b\\,c\\=d!"
    assert unescape_field_value(escape_field_value("a\\b,c=d!")) == "a\\b,c=d!"
    assert unescape_field_value("plain") == "plain"


# --- properties ------------------------------------------------------------------------------

_LOWER = "abcdefghijklmnopqrstuvwxyz0123456789"
_ALNUM = _LOWER + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _word(ends: str, middle: str, max_middle: int) -> st.SearchStrategy[str]:
    # ends[middle*ends]: cheaper to draw than st.from_regex.
    edge = st.sampled_from(ends)
    longer = st.tuples(edge, st.text(alphabet=middle, max_size=max_middle), edge).map("".join)
    return st.one_of(edge, longer)


_dns_label = _word(_LOWER, _LOWER + "-", 6)
_name = _word(_ALNUM, _ALNUM + "-_.", 8)
_key = st.one_of(_name, st.tuples(st.lists(_dns_label, min_size=1, max_size=3).map(".".join), _name).map("/".join))
_value = st.one_of(st.just(""), _name, st.integers(0, 30).map(str))
_ints = st.integers(0, 30).map(str)
_WS = st.sampled_from(["", " ", "  ", "\t", "\n"])
_WS1 = st.sampled_from([" ", "  ", "\t", " \r\n"])


@st.composite
def _specs(draw):
    """A pool of keys and values plus requirement specs drawn over them, so that
    generated labels actually hit and miss the requirements."""
    keys = draw(st.lists(_key, min_size=1, max_size=4, unique=True))
    values = draw(st.lists(_value, min_size=1, max_size=4, unique=True))
    ops = st.sampled_from(
        [EQUALS, DOUBLE_EQUALS, NOT_EQUALS, IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GREATER_THAN, LESS_THAN]
    )
    specs = []
    for _ in range(draw(st.integers(0, 5))):
        key, op = draw(st.sampled_from(keys)), draw(ops)
        if op in (IN, NOT_IN):
            vals = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
        elif op in (GREATER_THAN, LESS_THAN):
            vals = [draw(_ints)]
        elif op in (EXISTS, DOES_NOT_EXIST):
            vals = []
        else:
            vals = [draw(st.sampled_from(values))]
        specs.append((key, op, vals))
    label_values = values + [str(i) for i in range(0, 31, 5)]
    labels = draw(st.dictionaries(st.sampled_from(keys), st.sampled_from(label_values)))
    return specs, labels


def _render(draw, specs) -> str:
    # Write the selector the way a person might: any order, any spacing that
    # the grammar allows (words next to words need at least one blank).
    parts = []
    for key, op, vals in draw(st.permutations(specs)):
        ws, ws1 = (lambda: draw(_WS)), (lambda: draw(_WS1))
        if op == EXISTS:
            parts.append(key)
        elif op == DOES_NOT_EXIST:
            parts.append("!" + ws() + key)
        elif op in (IN, NOT_IN):
            # Upstream rejects a second empty item ("(,,)", "(a,,)"), so an
            # empty value is written at most once; other repeats are fine.
            once = [v for i, v in enumerate(vals) if v or "" not in vals[:i]]
            inner = ("," + ws()).join(once)
            parts.append(f"{key}{ws1()}{op}{ws()}({ws()}{inner}{ws()})")
        else:
            sym = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
            parts.append(f"{key}{ws()}{sym}{ws()}{vals[0]}")
    return draw(_WS) + (draw(_WS) + "," + draw(_WS)).join(parts) + draw(_WS)


def _reference_match(specs, labels) -> bool:
    for key, op, vals in specs:
        present = key in labels
        have = labels.get(key)
        if op in (EQUALS, DOUBLE_EQUALS, IN):
            ok = present and have in vals
        elif op in (NOT_EQUALS, NOT_IN):
            ok = not present or have not in vals
        elif op == EXISTS:
            ok = present
        elif op == DOES_NOT_EXIST:
            ok = not present
        else:
            ok = (
                present
                and have.isdigit()
                and (int(have) > int(vals[0]) if op == GREATER_THAN else int(have) < int(vals[0]))
            )
        if not ok:
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_label_selector_round_trip_and_matching(data):
    specs, labels = data.draw(_specs())
    text = _render(data.draw, specs)
    sel = parse_label_selector(text)

    expected = sorted((k, op, tuple(sorted(set(vs)))) for k, op, vs in specs)
    assert sorted(sel.requirements) == expected
    assert [r.key for r in sel.requirements] == sorted(r.key for r in sel.requirements)
    assert sel.empty is (not specs)

    printed = str(sel)
    reparsed = parse_label_selector(printed)
    assert reparsed == sel
    assert str(reparsed) == printed

    assert sel.matches(labels) is _reference_match(specs, labels)
    assert reparsed.matches(labels) is sel.matches(labels)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_structured_selector_agrees_with_its_string_form(data):
    specs, labels = data.draw(_specs())
    structured_ops = {IN: "In", NOT_IN: "NotIn", EXISTS: "Exists", DOES_NOT_EXIST: "DoesNotExist"}
    exprs = [{"key": k, "operator": structured_ops[op], "values": vs} for k, op, vs in specs if op in structured_ops]
    match_labels = data.draw(st.dictionaries(st.sampled_from([k for k, _, _ in specs] or ["k"]), _value))
    sel = label_selector_from_dict({"matchLabels": match_labels, "matchExpressions": exprs})
    assert parse_label_selector(str(sel)) == sel
    reference = [(k, EQUALS, [v]) for k, v in match_labels.items()] + [
        (k, op, vs) for k, op, vs in specs if op in structured_ops
    ]
    assert sel.matches(labels) is _reference_match(reference, labels)


_field = st.lists(st.text(alphabet="abcxyzN", min_size=1, max_size=6), min_size=1, max_size=3).map(".".join)
_field_value = st.text(alphabet="ab ,=\\!-.é", max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_field_selector_round_trip_and_matching(data):
    fields = data.draw(st.lists(_field, min_size=1, max_size=3, unique=True))
    terms = data.draw(
        st.lists(st.tuples(st.sampled_from(fields), st.sampled_from(["=", "==", "!="]), _field_value), max_size=4)
    )
    text = ",".join(f"{f}{op}{escape_field_value(v)}" for f, op, v in terms)
    sel = parse_field_selector(text)

    expected = sorted((f, "!=" if op == "!=" else "=", v) for f, op, v in terms)
    assert sorted(sel.requirements) == expected
    printed = str(sel)
    assert parse_field_selector(printed) == sel
    assert str(parse_field_selector(printed)) == printed

    values = [v for _, _, v in terms] + ["", "a"]
    obj = data.draw(st.dictionaries(st.sampled_from(fields), st.sampled_from(values)))
    reference = all((obj.get(f, "") == v) if op in ("=", "==") else (obj.get(f, "") != v) for f, op, v in terms)
    assert sel.matches(obj) is reference

    # The first "=" term in printed (canonical) order decides, as upstream's andTerm.
    in_print_order = sorted(expected, key=lambda t: f"{t[0]}{t[1]}{escape_field_value(t[2])}")
    pinned = [v for f, op, v in in_print_order if f == fields[0] and op == "="]
    assert sel.exact_match(fields[0]) == (pinned[0] if pinned else None)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab01 =!(),<>in\t-_./", max_size=16))
def test_any_label_selector_text_parses_cleanly_or_raises_selector_error(text):
    try:
        sel = parse_label_selector(text)
    except SelectorError as err:
        assert err.position is not None and 0 <= err.position <= len(text)
        return
    assert parse_label_selector(str(sel)) == sel
    assert str(parse_label_selector(str(sel))) == str(sel)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab.=!,\\ ", max_size=12))
def test_any_field_selector_text_parses_cleanly_or_raises_selector_error(text):
    try:
        sel = parse_field_selector(text)
    except SelectorError as err:
        assert err.position is not None and 0 <= err.position < len(text)
        return
    assert parse_field_selector(str(sel)) == sel

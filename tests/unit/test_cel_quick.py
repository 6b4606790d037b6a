"""The quick check of expressions (``cel.quick``): it may answer only "certainly
true", and whenever it does the engine must say ``true`` too; it must also say so for
the plain cases it exists for, or it saves nothing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apiserver_min import cel
from apiserver_min.cel.quick import compile_quick

VARIABLES = ("self", "oldSelf")

# Each expression with a value on which it holds (the quick check must see that).
CORPUS = [
    ("self.a == 1", {"a": 1}),
    ("self.a < self.b", {"a": 1, "b": 2}),
    ("self.a + self.b > 3", {"a": 2, "b": 2}),
    ("self.a * 2 <= 10", {"a": 5}),
    ("self.a / self.b == -2", {"a": -7, "b": 3}),
    ("self.a % self.b == -1", {"a": -7, "b": 3}),
    ("self.a - self.b < 0", {"a": 1, "b": 2}),
    ("-self.a < 0", {"a": 4}),
    ("self.a == -9223372036854775808", {"a": -(2**63)}),
    ("self.a >= 1.5", {"a": 2.5}),
    ("self.a == true", {"a": True}),
    ("self.a != self.b", {"a": "x", "b": "y"}),
    ("self.a < self.b", {"a": "Z", "b": "a"}),
    ("!(self.a == 1)", {"a": 2}),
    ("self.name.startsWith('x')", {"name": "xy"}),
    ('self.name.endsWith("y")', {"name": "xy"}),
    ("self.name.contains('b')", {"name": "abc"}),
    ("self.name.matches('^[a-c]+$')", {"name": "cab"}),
    ("self.name.matches('b')", {"name": "abc"}),
    ("size(self.name) <= 3", {"name": "é€x"}),
    ("self.name.size() > 1", {"name": "ab"}),
    ("size(self) < 3", {"a": 1}),
    ("self.list.size() == 2", {"list": [1, 2]}),
    ("has(self.a) && self.a > 0", {"a": 1}),
    ("!has(self.a) || self.a == 2", {"b": 1}),
    ("has(self.a.b)", {"a": {"b": None}}),
    ("self.list.all(x, x > 0)", {"list": [1, 2]}),
    ("self.list.all(x, x > 0)", {"list": []}),
    ("self.list.exists(x, x == 'a')", {"list": ["b", "a"]}),
    ("self.a.all(k, self.a[k] == 1)", {"a": {"p": 1, "q": 1}}),
    ("self.list.all(x, x.exists(y, y == 1))", {"list": [[1], [2, 1]]}),
    ("self.list.all(x, self.list.exists(y, y == x))", {"list": [1, 2]}),
    ("self.a in [1, 2, 3]", {"a": 2}),
    ("'a' in self", {"a": 0}),
    ("self.name in self", {"name": "name"}),
    ("self.list[0] == 1", {"list": [1]}),
    ("self['a'] == true", {"a": True}),
    ("self.a + 'x' == 'yx'", {"a": "y"}),
    ("self.a == 'x' || self.b == 'y'", {"b": "y"}),
    ("(self.a > 1 && self.b < 2) || !has(self.c)", {"a": "s"}),
    ("self.a == 1 || self.a == 'one'", {"a": "one"}),
    ("self.a > 0 && self.b > 0", {"a": 1, "b": 1}),
    ("oldSelf.a <= self.a", {"a": 3}),
    ("self.a == 1\n  && self.b == 2", {"a": 1, "b": 2}),
]

UNSUPPORTED = [
    "self.a == 1 ? true : false",
    "self.a == 0x10",
    "self.a == 1u",
    "self.a == 1e3",
    "self.a == null",
    "self.a == b'x'",
    "self.a == r'x'",
    "self.a == 'a\\'b'",
    "self.a == '''x'''",
    "self.list.map(x, x + 1) == [2]",
    "self.list.filter(x, x > 1).size() == 1",
    "self.list.exists_one(x, x > 1)",
    "int(self.a) == 1",
    "string(self.a) == '1'",
    "self.a < self.b < self.c",
    "self.m == {'a': 1}",
    "type(self.a) == int",
    "other.a == 1",
    "self.a.lowerAscii() == 'x'",
    "has(self)",
    "self.list.all(self, true)",
    "self.a ==",
]


def engine_result(program: cel.Program, data: dict):
    try:
        return program.run(data)
    except cel.EvalError as exc:
        return exc


@pytest.fixture(scope="module")
def compiler():
    return cel.Compiler(VARIABLES, cost_limit=10**30)  # as validation rules (costs checked by the caller)


@pytest.mark.parametrize("expression, value", CORPUS)
def test_the_quick_check_answers_the_plain_cases(compiler, expression, value):
    program = compiler.compile(expression)
    assert program.quick is not None, expression
    data = {"self": value, "oldSelf": value}
    assert program.holds(data), expression
    assert engine_result(program, data) is True


@pytest.mark.parametrize("expression", UNSUPPORTED)
def test_parts_the_quick_check_lacks_leave_it_to_the_engine(expression):
    assert compile_quick(expression, frozenset(VARIABLES)) is None


def test_errors_are_absorbed_as_cel_absorbs_them(compiler):
    # A missing key is an error that `true ||` absorbs, and `&&` does not.
    assert compiler.compile("self.missing == 1 || self.a == 1").holds({"self": {"a": 1}})
    assert compiler.compile("self.a == 1 || self.missing == 1").holds({"self": {"a": 1}})
    assert not compiler.compile("self.missing == 1 && self.a == 1").holds({"self": {"a": 1}})
    # `all` is false when any item is false, an error otherwise; `exists` true when any is.
    assert compiler.compile("self.l.exists(x, x.b == 1)").holds({"self": {"l": [{}, {"b": 1}]}})
    assert not compiler.compile("self.l.all(x, x.b == 1)").holds({"self": {"l": [{}, {"b": 1}]}})


@pytest.mark.parametrize(
    "expression, value",
    [
        ("self.a + self.b > 0", {"a": 2**63 - 1, "b": 1}),  # overflow
        ("self.a * self.b != 0", {"a": 2**62, "b": 4}),
        ("self.a / self.b == 0", {"a": 1, "b": 0}),  # division by zero
        ("self.a % self.b == 0", {"a": -(2**63), "b": -1}),  # overflow
        ("-self.a > 0", {"a": -(2**63)}),
        ("self.a == 1", {"a": 2**64}),  # past 64 bits
        ("self.a in [1]", {"a": True}),
        ("self.a == 1", {"a": 1.0}),  # mixed types: the engine's rules
        ("self.a == 1", {"a": True}),
        ("self.a.matches('(')", {"a": "("}),  # RE2 refuses it
        ("self.a.b == 1", {"a": None}),
        ("self.l[3] == 1", {"l": [1]}),
        # The engine refuses the whole evaluation for an int it cannot hold, anywhere.
        ("'a' in self", {"a": -(2**63) - 1}),
        ("'a' in self", {"a": [{"b": 2**64}]}),
    ],
)
def test_values_the_quick_check_does_not_handle_are_not_known(compiler, expression, value):
    assert not compiler.compile(expression).holds({"self": value})


_KEYS = st.sampled_from(["a", "b", "c", "name", "list", "l"])
_INTS = st.one_of(
    st.integers(-5, 5), st.sampled_from([2**63 - 1, -(2**63), 2**63, 2**62, -1]), st.integers(-(2**70), 2**70)
)
_SCALAR_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from(["", "a", "b", "x", "xy", "abc", "name", "é€", "one"]),
    st.text(max_size=4),
)
_VALUES = st.recursive(
    _SCALAR_VALUES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)
_SELF = st.dictionaries(_KEYS, _VALUES, max_size=5)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(CORPUS) - 1), value=_SELF, old=_SELF)
def test_a_quick_true_is_the_engines_true(compiler, index, value, old):
    program = compiler.compile(CORPUS[index][0])
    data = {"self": value, "oldSelf": old}
    if program.holds(data):
        assert engine_result(program, data) is True, (program.expression, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_INTS, b=_INTS)
def test_integer_arithmetic_matches_the_engine(compiler, a, b):
    data = {"self": {"a": a, "b": b}}
    for op in ("+", "-", "*", "/", "%"):
        for result in (-1, 0, 1, 2):
            program = compiler.compile(f"self.a {op} self.b == {result}")
            if program.holds(data):
                assert engine_result(program, data) is True, (program.expression, data)
            elif engine_result(program, data) is True:
                # The quick check may give up, but only on values it does not handle.
                assert not all(-(2**63) <= x < 2**63 for x in (a, b)), (program.expression, data)

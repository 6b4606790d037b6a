"""The CEL room: compiling with declared variables, the program cache, evaluation and
its errors, the Kubernetes libraries and the cost limits."""

from __future__ import annotations

import datetime

import pytest

from apiserver_min import cel
from apiserver_min.cel import cost, library
from apiserver_min.cel.engine import read_paths

DEPLOYMENT = {
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {
        "replicas": 3,
        "template": {
            "spec": {
                "containers": [
                    {"name": "a", "image": "registry.local/a:1"},
                    {"name": "b", "image": "registry.local/b:1"},
                ]
            }
        },
    },
}


@pytest.fixture(scope="module")
def compiler():
    return cel.Compiler(("object", "oldObject", "self", "authorizer"))


def run(compiler, expression, **data):
    data.setdefault("object", DEPLOYMENT)
    return compiler.compile(expression).run(compiler.activation(data))


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("object.spec.replicas <= 5", True),
        ("has(object.metadata.labels) && 'app' in object.metadata.labels", True),
        ("has(object.metadata.annotations)", False),
        ("object.spec.template.spec.containers.all(c, c.image.startsWith('registry.local/'))", True),
        ("object.spec.template.spec.containers.exists_one(c, c.name == 'a')", True),
        ("object.spec.template.spec.containers.map(c, c.name)", ["a", "b"]),
        ("object.spec.template.spec.containers.filter(c, c.name != 'a').size()", 1),
        ("object.metadata.name.matches('^w[a-z]+$')", True),
        ("2u * 3u", 6),
        ("1.5 * 2.0", 3.0),
        ("duration('90s') == duration('1m30s')", True),
        ("'a,b'.split(',') == ['a', 'b'] && ' x '.trim() == 'x' && 'AbC'.lowerAscii() == 'abc'", True),
        ("['a', 'b'].join('-') == 'a-b' && 'hello'.substring(1, 3) == 'el' && 'abc'.charAt(1) == 'b'", True),
        ("'abcb'.indexOf('b') == 1 && 'abcb'.lastIndexOf('b') == 3", True),
        ("[1, 2, 3].isSorted() && ![3, 1].isSorted()", True),
        ("[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0", True),
        ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", True),
        ("['a', 'b', 'a'].indexOf('a') == 0 && ['a', 'b', 'a'].lastIndexOf('a') == 2 && [1].indexOf(5) == -1", True),
        ("'abc 123 45'.find('[0-9]+') == '123' && 'x'.find('[0-9]') == ''", True),
        ("'a1b2c3'.findAll('[0-9]') == ['1', '2', '3'] && 'a1b2c3'.findAll('[0-9]', 2) == ['1', '2']", True),
        ("isURL('https://example.com/x') && !isURL('not a url')", True),
        ("url('https://user@example.com:8443/a%20b?x=1&x=2').getScheme() == 'https'", True),
        ("url('https://example.com:8443/p').getHost() == 'example.com:8443'", True),
        ("url('https://[::1]:80/p').getHostname() == '::1' && url('https://[::1]:80/p').getPort() == '80'", True),
        ("url('https://example.com/a%20b').getEscapedPath() == '/a%20b'", True),
        ("url('https://example.com/?x=1&x=2&y=').getQuery() == {'x': ['1', '2'], 'y': ['']}", True),
        ("url('/absolute/path').getScheme() == ''", True),
        ("isQuantity('1Gi') && !isQuantity('1GG')", True),
        ("quantity('1Gi').isGreaterThan(quantity('1G')) && quantity('1G').isLessThan(quantity('1Gi'))", True),
        ("quantity('500m').add(quantity('500m')) == quantity('1')", True),
        ("quantity('2').sub(1) == quantity('1') && quantity('1').add(2).asInteger() == 3", True),
        ("quantity('1.5').isInteger() == false && quantity('-3').sign() == -1", True),
        ("quantity('1Ki').compareTo(quantity('1024')) == 0", True),
        ("quantity('250m').asApproximateFloat()", 0.25),
    ],
)
def test_expressions(compiler, expression, expected):
    value = run(compiler, expression)
    assert value == expected
    assert type(value) is type(expected)


def test_timestamps_come_back_as_datetimes(compiler):
    value = run(compiler, "timestamp('2023-01-01T00:00:00Z') + duration('1h')")
    assert value == datetime.datetime(2023, 1, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    "expression, message",
    [
        ("9223372036854775807 + 1", "integer overflow"),
        ("1 / 0", "division by zero"),
        ("5u - 6u", "unsigned integer overflow"),
        ("object.metadata.missing", "no such key: missing"),
        ("[].min()", "min called on empty list"),
        ("quantity('1GG')", "quantities must match"),
        ("url('::')", "URL parse error"),
        ("{}.getHost()", "no such overload"),
        ("quantity('1.5').asInteger()", "cannot convert value to integer"),
    ],
)
def test_evaluation_errors(compiler, expression, message):
    with pytest.raises(cel.EvalError) as err:
        run(compiler, expression)
    assert message in str(err.value)


def test_compile_errors_name_the_position(compiler):
    with pytest.raises(cel.CompileError) as err:
        compiler.compile("object.spec.(")
    assert err.value.detail.startswith("ERROR: <input>:1:13: Syntax error")
    assert "| object.spec.(" in err.value.detail
    with pytest.raises(cel.CompileError) as err:
        compiler.compile("params.limit > 1")
    assert "undeclared reference to 'params" in err.value.detail


def test_ip_and_cidr_are_unknown_functions_in_this_release(compiler):
    for expression in ("ip('10.0.0.1').family() == 4", "cidr('10.0.0.0/8').prefixLength() == 8"):
        with pytest.raises(cel.CompileError) as err:
            compiler.compile(expression)
        assert "undeclared reference to '" in err.value.detail


def test_programs_are_cached_by_expression(compiler):
    a = compiler.compile("object.spec.replicas > 0")
    assert compiler.compile("object.spec.replicas > 0") is a
    with pytest.raises(cel.CompileError) as first:
        compiler.compile("object.(")
    with pytest.raises(cel.CompileError) as second:
        compiler.compile("object.(")
    assert first.value is second.value


def test_only_the_parts_read_are_converted(compiler):
    assert read_paths(
        "object.spec.replicas > 1 && has(object.metadata.labels) && self.size() > 0", ["object", "self"]
    ) == {
        "object": frozenset({("spec", "replicas"), ("metadata", "labels")}),
        "self": frozenset({()}),
    }
    # A missing field reads as missing, not as a pruned-away one.
    assert run(compiler, "has(object.spec.paused)") is False
    with pytest.raises(cel.EvalError):
        run(compiler, "object.spec.paused")


def test_estimated_cost_refuses_nested_comprehensions_over_unbounded_lists(compiler):
    single = compiler.compile("object.spec.template.spec.containers.all(c, c.image.startsWith('registry.local/'))")
    assert single.estimated_cost <= cel.ESTIMATED_COST_LIMIT
    with pytest.raises(cel.CompileError) as err:
        compiler.compile("object.items.all(x, object.items.all(y, x != y))")
    assert err.value.cost_exceeded
    assert err.value.detail.startswith("estimated rule cost exceeds budget by factor of more than 100x")
    # Literal lists have known sizes.
    assert compiler.compile("[1, 2, 3].all(x, [4, 5].exists(y, x < y))").estimated_cost < 100


def test_runtime_cost_cancels_an_evaluation_over_the_budget(compiler):
    program = compiler.compile("object.items.all(x, x >= 0)")
    assert program.estimated_cost <= cel.ESTIMATED_COST_LIMIT
    assert program.run(compiler.activation({"object": {"items": list(range(1000))}})) is True
    with pytest.raises(cel.EvalError) as err:
        program.run(compiler.activation({"object": {"items": list(range(400_000))}}))
    assert str(err.value) == "operation cancelled: actual cost limit exceeded"


def test_cost_shape_scales_with_the_sizes():
    shape = cost.shape("object.a.all(x, x.matches('^a+$'))")
    assert shape.size_dependent
    assert shape.cost(10, 100) < shape.cost(10, 10_000)
    assert not cost.shape("object.a.b == 1").size_dependent


def test_authorizer_checks_through_the_injected_function(compiler):
    asked = []

    def check(request):
        asked.append(request)
        allowed = request.get("resource") == "deployments" and request["verb"] == "get"
        return allowed, "rbac said so" if allowed else "", ""

    token = cel.CURRENT_AUTHORIZER.set(check)
    try:
        az = cel.authorizer_value()
        assert run(
            compiler,
            "authorizer.group('apps').resource('deployments').namespace('ns').name('x').check('get').allowed()",
            authorizer=az,
        )
        assert (
            run(compiler, "authorizer.group('apps').resource('deployments').check('get').reason()", authorizer=az)
            == "rbac said so"
        )
        assert not run(compiler, "authorizer.path('/healthz').check('get').allowed()", authorizer=az)
        assert (
            run(
                compiler,
                "authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('list').allowed()",
                authorizer=az,
            )
            is False
        )
    finally:
        cel.CURRENT_AUTHORIZER.reset(token)
    assert asked[0] == {"group": "apps", "resource": "deployments", "namespace": "ns", "name": "x", "verb": "get"}
    assert asked[2] == {"path": "/healthz", "verb": "get"}
    assert asked[3]["user"] == "system:serviceaccount:ns:sa"


def test_regex_library_runs_in_linear_time_and_names_bad_patterns(compiler):
    # A pattern that makes a backtracking engine take exponential time: RE2 runs it.
    assert type(library.regex("(a+)+$")).__module__.startswith("re2")
    assert run(compiler, "object.s.find('(a+)+$')", object={"s": "a" * 22 + "b"}) == ""
    with pytest.raises(cel.EvalError) as err:
        run(compiler, "'x'.find('(')")
    assert str(err.value) == "error parsing regexp: missing ): ("


@pytest.mark.parametrize(
    "pattern, text, found",
    [
        ("^value-[0-9]+$", "value-12", True),
        ("^value-[0-9]+$", "value-12\n", False),  # RE2's $ is the end of the text
        ("é+x", "aééx", True),
        ("[0-9]", "abc", False),
        ("", "", True),
    ],
)
def test_regex_found_is_the_search_of_matches(compiler, pattern, text, found):
    assert library.regex_found(pattern, text) is found
    assert (library.regex(pattern).search(text) is not None) is found
    assert run(compiler, f"object.s.matches('{pattern}')", object={"s": text}) is found

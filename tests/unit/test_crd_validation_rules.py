"""Validation rules of custom resources (``x-kubernetes-validations``): checks when a
definition is written, and evaluation on writes of its objects (root, nested, lists,
messageExpression, transition rules, reason and fieldPath, cost limits)."""

from __future__ import annotations

import copy

import pytest

from apiserver_min.apiextensions import rules
from apiserver_min.apiextensions.resource import CustomResourceStrategy, Definition
from apiserver_min.apiextensions.structural import validate_schema

INT = {"type": "integer"}
STR = {"type": "string"}


def schema(spec: dict, root_rules: list | None = None, status: dict | None = None) -> dict:
    out: dict = {"type": "object", "properties": {"spec": spec}}
    if status is not None:
        out["properties"]["status"] = status
    if root_rules:
        out["x-kubernetes-validations"] = root_rules
    return out


def obj(spec: dict, **extra) -> dict:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec, **extra}


def messages(s: dict, new: dict, old: dict | None = None) -> list[str]:
    assert validate_schema(s, "X") == []
    return [e.message() for e in rules.Validator(s).validate(new, old)]


REPLICAS = {
    "type": "object",
    "properties": {"replicas": INT, "minReplicas": INT},
    "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.replicas", "message": "minReplicas too big"}],
}


def test_rule_on_an_object_reports_its_message_or_the_rule():
    s = schema(REPLICAS)
    assert messages(s, obj({"replicas": 3, "minReplicas": 1})) == []
    assert messages(s, obj({"replicas": 1, "minReplicas": 3})) == ['spec: Invalid value: "object": minReplicas too big']
    no_message = schema({**REPLICAS, "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.replicas"}]})
    assert messages(no_message, obj({"replicas": 1, "minReplicas": 3})) == [
        'spec: Invalid value: "object": failed rule: self.minReplicas <= self.replicas'
    ]


def test_rules_at_the_root_see_type_meta_and_name_only():
    s = schema(
        REPLICAS, root_rules=[{"rule": "self.metadata.name.startsWith('w') && !has(self.metadata.generateName)"}]
    )
    assert messages(s, obj({"replicas": 3, "minReplicas": 1})) == []
    labelled = obj({"replicas": 3, "minReplicas": 1})
    labelled["metadata"]["labels"] = {"a": "b"}
    assert messages(s, labelled) == []
    # Labels are not visible to rules: a rule naming them does not compile.
    s = schema(REPLICAS, root_rules=[{"rule": "!has(self.metadata.labels)"}])
    assert [e.message() for e in validate_schema(s, "X")] == [
        'X.x-kubernetes-validations[0].rule: Invalid value: "!has(self.metadata.labels)": compilation failed: '
        "ERROR: <input>:1:5: undefined field 'labels'\n | !has(self.metadata.labels)\n | ....^"
    ]
    s = schema(REPLICAS, root_rules=[{"rule": "self.kind == 'Gadget'"}])
    assert messages(s, obj({"replicas": 3, "minReplicas": 1})) == [
        "<nil>: Invalid value: \"object\": failed rule: self.kind == 'Gadget'"
    ]


def test_rules_nested_in_lists_and_maps():
    s = schema(
        {
            "type": "object",
            "properties": {
                "names": {
                    "type": "array",
                    "maxItems": 10,
                    "items": {"type": "string", "maxLength": 20, "x-kubernetes-validations": [{"rule": "self != ''"}]},
                    "x-kubernetes-validations": [{"rule": "self.all(n, n.startsWith('a'))", "message": "all a"}],
                },
                "limits": {
                    "type": "object",
                    "additionalProperties": {"type": "number", "x-kubernetes-validations": [{"rule": "self > 0.5"}]},
                },
                "dashed-name": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10"}]},
            },
            "x-kubernetes-validations": [{"rule": "!has(self.dashed__dash__name) || self.dashed__dash__name > 1"}],
        }
    )
    good = obj({"names": ["ab", "ac"], "limits": {"cpu": 1}, "dashed-name": 5})
    assert messages(s, good) == []
    bad = obj({"names": ["ab", "", "b"], "limits": {"cpu": 0.25}, "dashed-name": 20})
    assert messages(s, bad) == [
        'spec.names: Invalid value: "array": all a',
        "spec.names[1]: Invalid value: \"string\": failed rule: self != ''",
        'spec.limits[cpu]: Invalid value: "number": failed rule: self > 0.5',
        'spec.dashed-name: Invalid value: "integer": failed rule: self < 10',
    ]


def test_message_expression_and_its_fallbacks():
    s = schema(
        {
            "type": "object",
            "properties": {"replicas": INT},
            "x-kubernetes-validations": [
                {"rule": "self.replicas < 5", "messageExpression": "'replicas ' + string(self.replicas) + ' too many'"},
                {"rule": "self.replicas < 4", "message": "fallback", "messageExpression": "''"},
            ],
        }
    )
    assert messages(s, obj({"replicas": 7})) == [
        'spec: Invalid value: "object": replicas 7 too many',
        'spec: Invalid value: "object": fallback',
    ]


def test_transition_rules_run_only_with_an_old_value():
    s = schema(
        {
            "type": "object",
            "properties": {
                "size": {**INT, "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "cannot shrink"}]},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "properties": {"name": STR, "port": INT},
                        "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "immutable"}],
                    },
                },
            },
        }
    )
    new = obj({"size": 1, "ports": [{"name": "a", "port": 2}]})
    assert messages(s, new) == []  # a create: transition rules do not run
    old = obj({"size": 3, "ports": [{"name": "a", "port": 1}]})
    assert messages(s, new, old) == [
        'spec.size: Invalid value: "integer": cannot shrink',
        'spec.ports[0]: Invalid value: "object": immutable',
    ]
    old_without = obj({"ports": [{"name": "b", "port": 1}]})
    assert messages(s, new, old_without) == []  # nothing old at those places


def test_reason_and_field_path():
    s = schema(
        {
            "type": "object",
            "properties": {"a": STR, "b": STR},
            "x-kubernetes-validations": [
                {"rule": "has(self.a)", "reason": "FieldValueRequired", "fieldPath": ".a", "message": "a is needed"},
                {"rule": "!has(self.b)", "reason": "FieldValueForbidden", "fieldPath": "['b']", "message": "no b"},
                {"rule": "false", "reason": "FieldValueDuplicate"},
            ],
        }
    )
    assert messages(s, obj({"b": "x"})) == [
        "spec.a: Required value: a is needed",
        "spec.b: Forbidden: no b",
        'spec: Duplicate value: "object"',
    ]


@pytest.mark.parametrize(
    "rule,message",
    [
        (
            {"rule": "self.size( > 1"},
            'X.properties[spec].x-kubernetes-validations[0].rule: Invalid value: "self.size( > 1": compilation failed: '
            "ERROR: <input>:1:12: Syntax error:",
        ),
        (
            {"rule": "self.x", "messageExpression": "self.("},
            'X.properties[spec].x-kubernetes-validations[0].messageExpression: Invalid value: "self.(": '
            "messageExpression compilation failed: ERROR:",
        ),
        ({"rule": ""}, "X.properties[spec].x-kubernetes-validations[0].rule: Required value"),
        (
            {"rule": "true", "reason": "Nope"},
            'X.properties[spec].x-kubernetes-validations[0].reason: Unsupported value: "Nope": supported values: '
            '"FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"',
        ),
        (
            {"rule": "true", "fieldPath": ".missing"},
            'X.properties[spec].x-kubernetes-validations[0].fieldPath: Invalid value: ".missing": fieldPath must be '
            "a valid path",
        ),
        (
            {"rule": "true", "message": "two\nlines"},
            "X.properties[spec].x-kubernetes-validations[0].message: Invalid value:",
        ),
    ],
)
def test_rules_that_do_not_compile_are_refused(rule, message):
    s = schema({"type": "object", "properties": {"x": {"type": "boolean"}}, "x-kubernetes-validations": [rule]})
    msgs = [e.message() for e in validate_schema(s, "X")]
    assert any(m.startswith(message) for m in msgs), msgs


def test_estimated_cost_refused_and_reduced_by_size_bounds():
    expensive = {"rule": "self.all(x, self.all(y, x == y))"}
    unbounded = {"type": "array", "items": STR, "x-kubernetes-validations": [expensive]}
    msgs = [e.message() for e in validate_schema(schema(unbounded), "X")]
    assert (
        "X.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by "
        "factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where "
        "arrays, maps, and strings are declared)"
    ) in msgs
    assert any(m.startswith("X: Forbidden: x-kubernetes-validations estimated rule cost total") for m in msgs)
    assert validate_schema(schema({**unbounded, "maxItems": 100}), "X") == []
    # A cheap rule repeated in every item of huge nested lists passes each limit alone, not the total.
    cheap = {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() > 1 && self.size() < 5"}]}
    nested = {"type": "array", "items": {"type": "array", "items": cheap}}
    msgs = [e.message() for e in validate_schema(schema(nested), "X")]
    assert len(msgs) == 1 and "estimated rule cost total for entire OpenAPIv3 schema" in msgs[0], msgs


def definition(s: dict, status: bool = False) -> CustomResourceStrategy:
    crd = {
        "metadata": {"name": "widgets.example.com", "uid": "u"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": s},
                    "subresources": {"status": {}} if status else {},
                }
            ],
        },
    }
    d = Definition.from_object(crd)
    return CustomResourceStrategy(d.kinds()[0], d)


def test_strategy_runs_rules_after_defaults_and_schema_checks_and_on_status_writes():
    spec = copy.deepcopy(REPLICAS)
    spec["properties"]["minReplicas"] = {"type": "integer", "default": 2}
    status = {
        "type": "object",
        "properties": {"ready": INT},
        "x-kubernetes-validations": [{"rule": "self.ready >= 0", "message": "ready is negative"}],
    }
    strategy = definition(schema(spec, status=status), status=True)
    created = obj({"replicas": 1})
    strategy.prepare_for_create(created)
    assert [e.message() for e in strategy.validate(created)] == ['spec: Invalid value: "object": minReplicas too big']
    # A wrong type stops the rules from running, as upstream.
    wrong = obj({"replicas": "one", "minReplicas": 5})
    assert [e.message() for e in strategy.validate(wrong)][-1] == (
        '<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct '
        "the existing errors to complete validation"
    )
    stored = obj({"replicas": 3, "minReplicas": 1}, status={"ready": 1})
    stored["metadata"].update(uid="x", resourceVersion="1", generation=1)
    new = copy.deepcopy(stored)
    new["status"] = {"ready": -1}
    strategy.prepare_for_status_update(new, stored)
    assert [e.message() for e in strategy.validate_update(new, stored)] == [
        'status: Invalid value: "object": ready is negative'
    ]


def test_runtime_errors_and_cost_budget():
    s = schema({"type": "object", "properties": {"a": INT}, "x-kubernetes-validations": [{"rule": "self.a > 0"}]})
    assert messages(s, obj({})) == ['spec: Invalid value: "object": no such key: a evaluating rule: self.a > 0']
    many = schema(
        {
            "type": "array",
            "maxItems": 800,
            "items": {"type": "string", "maxLength": 3},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x == y || x != y))"}],
        }
    )
    assert validate_schema(many, "X") == []
    msgs = [e.message() for e in rules.Validator(many).validate(obj(["a"] * 800))]
    assert msgs == [
        "spec: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation "
        "rules will be run due to call cost exceeds limit for rule: self.all(x, self.all(y, x == y || x != y))"
    ]


def test_the_cost_budget_of_one_write_stops_further_rules(monkeypatch):
    s = schema(
        {
            "type": "array",
            "maxItems": 10,
            "items": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 100"}]},
        }
    )
    assert validate_schema(s, "X") == []
    validator = rules.Validator(s)
    assert len(validator.validate(obj(list(range(10))))) == 10
    monkeypatch.setattr(rules, "RUNTIME_BUDGET", 7)  # three runs of the rule (2 each: self and >)
    assert [e.message() for e in validator.validate(obj(list(range(10))))] == [
        'spec[0]: Invalid value: "integer": failed rule: self > 100',
        'spec[1]: Invalid value: "integer": failed rule: self > 100',
        'spec[2]: Invalid value: "integer": failed rule: self > 100',
        f'spec[3]: Invalid value: "integer": {rules.BUDGET_SPENT}',
    ]


def test_defaults_must_pass_the_rules_of_their_field():
    spec = {
        "type": "object",
        "properties": {
            "limits": {
                "type": "object",
                "properties": {"low": INT, "high": INT},
                "default": {"low": 5, "high": 1},
                "x-kubernetes-validations": [{"rule": "self.low <= self.high", "message": "low above high"}],
            },
            "size": {"type": "integer", "default": 1, "x-kubernetes-validations": [{"rule": "self >= oldSelf"}]},
        },
    }
    assert [e.message() for e in validate_schema(schema(spec), "X")] == [
        'X.properties[spec].properties[limits].default: Invalid value: "object": low above high'
    ]
    spec["properties"]["limits"]["default"] = {"low": 1, "high": 5}
    assert validate_schema(schema(spec), "X") == []


FIXED = schema(
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('^self-[a-z]+$')"}]},
            "tags": {
                "type": "array",
                "maxItems": 4,
                "items": STR,
                "x-kubernetes-validations": [{"rule": "self.all(x, x != 'self')", "message": "no self tag"}],
            },
            **REPLICAS["properties"],
        },
        "x-kubernetes-validations": REPLICAS["x-kubernetes-validations"],
    },
    root_rules=[{"rule": "self.metadata.name.startsWith('w')"}],
)


def test_rules_at_fixed_places_are_checked_in_one_evaluation_and_fail_one_by_one(monkeypatch):
    validator = rules.Validator(FIXED)
    good = obj({"name": "self-a", "tags": ["a"], "replicas": 3, "minReplicas": 1})
    assert validator.validate(good) == []
    assert list(validator._combined) == [(0, 1, 2, 3)]  # the root, spec, spec.name, spec.tags: one program
    assert validator.validate(obj({"replicas": 3, "minReplicas": 1})) == []  # absent fields: their rules do not run
    assert list(validator._combined) == [(0, 1, 2, 3), (0, 1)]
    bad = obj({"name": "other", "tags": ["self"], "replicas": 1, "minReplicas": 3})
    assert [e.message() for e in validator.validate(bad)] == [
        'spec: Invalid value: "object": minReplicas too big',
        "spec.name: Invalid value: \"string\": failed rule: self.matches('^self-[a-z]+$')",
        'spec.tags: Invalid value: "array": no self tag',
    ]
    # What would pass but for the budget is run one by one, with its error.
    monkeypatch.setattr(rules, "RUNTIME_BUDGET", 3)
    assert [e.message() for e in validator.validate(good)] == [f'<nil>: Invalid value: "object": {rules.BUDGET_SPENT}']


def test_rules_below_lists_or_reading_old_values_are_run_one_by_one():
    below = schema({"type": "array", "items": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]}})
    validator = rules.Validator(below)
    assert validator.validate(obj([1, 2])) == [] and validator._fixed is None
    transition = schema({"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf"}]})
    validator = rules.Validator(transition)
    assert [e.message() for e in validator.validate(obj(1), obj(2))] == [
        'spec: Invalid value: "integer": failed rule: self >= oldSelf'
    ]
    assert validator.validate(obj(1)) == [] and validator._combined == {}  # nothing runs without an old value


def test_joined_rules_read_self_as_a_variable_only():
    assert rules._renamed_self("self.x == 'self' && x.self == self", "v") == "v.x == 'self' && x.self == v"
    assert rules._renamed_self("'''it's self''' == self.a", "v") == "'''it's self''' == v.a"
    assert rules._renamed_self("rule_self_0 == self", "v") is None

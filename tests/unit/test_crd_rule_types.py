"""Validation rules are compiled with ``self``/``oldSelf`` typed by their schema node
when a definition is written: misuse of a field's type is refused with the
compiler's message, open parts of a schema stay dynamically typed."""

from __future__ import annotations

import asyncio
import copy
import dataclasses

import pytest

from apiserver_min.api.kinds import REGISTRY
from apiserver_min.apiextensions import celtypes, rules, values
from apiserver_min.apiextensions.definition import DefinitionStrategy, validate_spec
from apiserver_min.apiextensions.resource import CustomResourceStrategy, Definition
from apiserver_min.apiextensions.structural import validate_schema

SPEC = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer"},
        "name": {"type": "string"},
        "xs": {"type": "array", "items": {"type": "string"}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}},
        "ios": {"x-kubernetes-int-or-string": True},
        "foo-bar": {"type": "number"},
        "sub": {"type": "object", "properties": {"a": {"type": "boolean"}}},
        "when": {"type": "string", "format": "date-time"},
        "maybe": {"type": "integer", "nullable": True},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "a_b": {"type": "object", "additionalProperties": {"type": "string"}},
        "aB": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def rule_errors(rule: str) -> list[str]:
    schema = {"type": "object", "properties": {"spec": {**SPEC, "x-kubernetes-validations": [{"rule": rule}]}}}
    return [e.message() for e in validate_schema(schema, "X")]


@pytest.mark.parametrize(
    "rule",
    [
        "self.replicas > 1",
        "self.replicas == oldSelf.replicas",
        "self.xs.all(x, x.startsWith('a'))",
        "self.m.all(k, self.m[k] > 0)",
        "self.ios == 1 || self.ios == 'a'",
        "self.foo__dash__bar > 1.5",
        "self.sub.a",
        "has(self.sub) && size(self.xs) > 1 && self.xs.isSorted()",
        "self.name.matches('^a')",
        "self.when < 'z'",
        "self.free.anything == 1",
        "self.a_b['k'] == 'v' && self.aB['k'] == 'v'",
        "self.maybe == null || self.maybe > 1",
    ],
)
def test_rules_fitting_their_types_compile(rule):
    assert rule_errors(rule) == []


@pytest.mark.parametrize(
    ("rule", "detail"),
    [
        ("self.replicas > 'a'", "ERROR: <input>:1:15: found no matching overload for '_>_' applied to '(int, string)'"),
        ("self.nope == 1", "ERROR: <input>:1:5: undefined field 'nope'"),
        (
            "self.xs.all(x, x > 1)",
            "ERROR: <input>:1:18: found no matching overload for '_>_' applied to '(string, int)'",
        ),
        ("self.m['a'] == 'x'", "ERROR: <input>:1:13: found no matching overload for '_==_' applied to '(int, string)'"),
        ("self.sub.a == 1", "ERROR: <input>:1:12: found no matching overload for '_==_' applied to '(bool, int)'"),
    ],
)
def test_rules_misusing_types_are_refused(rule, detail):
    msgs = rule_errors(rule)
    assert len(msgs) == 1 and msgs[0].startswith(
        f'X.properties[spec].x-kubernetes-validations[0].rule: Invalid value: "{rule}": compilation failed: {detail}\n'
    ), msgs


def test_typed_result_must_be_bool():
    assert rule_errors("self.replicas") == [
        'X.properties[spec].x-kubernetes-validations[0].rule: Invalid value: "self.replicas": cel expression must '
        "evaluate to a bool"
    ]


def test_root_sees_type_meta_and_name():
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.kind == 'K' && self.metadata.name != '' && self.spec.replicas > 0"}
        ],
        "properties": {"spec": SPEC},
    }
    assert validate_schema(schema, "X") == []


def test_open_nodes_are_dynamic():
    assert celtypes.declare({"x-kubernetes-int-or-string": True}, rules.escape, False)[0] == ("dyn",)
    assert celtypes.declare({"type": "array", "items": {"type": "integer"}}, rules.escape, False)[0] == (
        "list",
        ("int",),
    )
    spec, _descriptor, probe = celtypes.declare(SPEC, rules.escape, False)
    assert spec[0] == "message" and probe == "has(self.replicas)"


# --- transition rules across versions ------------------------------------------------------


class FakeConverter:
    """v1 ``{host, port}`` <-> v2 ``{hostPort}``, as a conversion webhook would."""

    def __init__(self):
        self.calls = 0

    async def convert(self, objs, desired_version, batch_gvk=""):
        self.calls += 1
        out = []
        for o in objs:
            o = copy.deepcopy(o)
            spec = o.get("spec") or {}
            if desired_version == "v2" and "host" in spec:
                o["spec"] = {"hostPort": f"{spec['host']}:{spec.get('port', 0)}"}
            o["apiVersion"] = f"example.com/{desired_version}"
            out.append(o)
        return out


def two_version_strategy(converter) -> CustomResourceStrategy:
    v1 = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}}
        },
    }
    v2 = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "hostPort": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            {"rule": "self.startsWith(oldSelf.split(':')[0])", "message": "host is immutable"}
                        ],
                    },
                    "mode": {"type": "string", "default": "fast"},
                },
            }
        },
    }
    obj = {
        "apiVersion": "apiextensions.orch.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "endpoints.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "endpoints", "kind": "Endpoint"},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": v1}},
                {"name": "v2", "served": True, "storage": False, "schema": {"openAPIV3Schema": v2}},
            ],
        },
        "status": {"acceptedNames": {"plural": "endpoints", "kind": "Endpoint"}},
    }
    d = dataclasses.replace(Definition.from_object(obj), converter=converter)
    kind = next(k for k in d.kinds() if k.version == "v2")
    return CustomResourceStrategy(kind, d)


def endpoint(version: str, spec: dict) -> dict:
    md = {"name": "e", "namespace": "n", "uid": "u"}
    return {"apiVersion": f"example.com/{version}", "kind": "Endpoint", "metadata": md, "spec": spec}


def test_transition_rules_compare_with_the_stored_object_in_the_update_version():
    conv = FakeConverter()
    s = two_version_strategy(conv)
    stored = endpoint("v1", {"host": "a", "port": 1})
    keep = copy.deepcopy(stored)
    same_host = endpoint("v2", {"hostPort": "a:2", "mode": "fast"})
    seen = asyncio.run(s.old_for_validation(same_host, stored))
    assert seen["apiVersion"] == "example.com/v2" and seen["spec"] == {"hostPort": "a:1", "mode": "fast"}
    assert stored == keep and conv.calls == 1
    assert s.validate_update(same_host, seen) == []
    other_host = endpoint("v2", {"hostPort": "b:1"})
    seen = asyncio.run(s.old_for_validation(other_host, stored))
    assert [e.message() for e in s.validate_update(other_host, seen)] == [
        'spec.hostPort: Invalid value: "string": host is immutable'
    ]
    # In the same version (or without transition rules) nothing is converted.
    assert asyncio.run(s.old_for_validation(stored, stored)) is stored and conv.calls == 2


def test_none_conversion_relabels_and_defaults_the_stored_object():
    s = two_version_strategy(None)
    stored = endpoint("v1", {"hostPort": "a:1"})
    seen = asyncio.run(s.old_for_validation(endpoint("v2", {"hostPort": "a:2"}), stored))
    assert seen["apiVersion"] == "example.com/v2" and seen["spec"] == {"hostPort": "a:1", "mode": "fast"}
    assert stored["apiVersion"] == "example.com/v1" and "mode" not in stored["spec"]


def test_a_format_error_does_not_stop_the_rules_a_type_error_does():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self.n > 1", "message": "n too small"}],
                "properties": {"ip": {"type": "string", "format": "ipv4"}, "n": {"type": "integer"}},
            }
        },
    }
    errs = values.validate({"spec": {"ip": "x", "n": 0}}, schema)
    assert not rules.has_blocking_errors(errs)
    assert [e.message() for e in rules.Validator(schema).validate({"spec": {"ip": "x", "n": 0}})] == [
        'spec: Invalid value: "object": n too small'
    ]
    assert rules.has_blocking_errors(values.validate({"spec": {"ip": "1.2.3.4", "n": "zero"}}, schema))


def definition(*rule_texts: str) -> dict:
    spec = {**SPEC, "x-kubernetes-validations": [{"rule": r} for r in rule_texts]}
    return {
        "apiVersion": "apiextensions.orch.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "uid": "u1", "resourceVersion": "5"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
                }
            ],
        },
        "status": {"storedVersions": ["v1"]},
    }


def test_a_stored_rule_written_before_typed_checks_does_not_block_updates():
    # Stored before rules were type-checked: refused on create now, kept on update
    # (as upstream checks a definition's existing rules in its widest environment);
    # a new rule with the same misuse is refused on update too.
    strategy = DefinitionStrategy(REGISTRY.by_resource("apiextensions.orch.io", "v1", "customresourcedefinitions"))
    bad = "self.replicas > 'a'"
    stored = definition(bad)
    refused = [e.message() for e in validate_spec(stored)]
    assert len(refused) == 1 and "x-kubernetes-validations[0].rule" in refused[0] and "compilation failed" in refused[0]
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert strategy.validate_update(relabelled, stored) == []
    added = definition(bad, "self.name > 1")
    msgs = [e.message() for e in strategy.validate_update(added, stored)]
    assert len(msgs) == 1 and "x-kubernetes-validations[1].rule" in msgs[0], msgs
    # A status write checks metadata and status only, as upstream's status strategy.
    status = copy.deepcopy(added)
    status["status"]["conditions"] = [{"type": "Established", "status": "True"}]
    assert strategy.validate_subresource_update("status", status, added) == []

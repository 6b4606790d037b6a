"""Validating admission policies without a server: the strategies' validation and
status, matching, and the plugin over a watch cache filled by hand (Deny, Warn,
Audit, params, variables, match conditions, audit annotations, failure policy)."""

from __future__ import annotations

import json

import orjson
import pytest

from apiserver_min.admission import chain
from apiserver_min.admission.chain import Attributes
from apiserver_min.admission.equivalence import Equivalence
from apiserver_min.admission.plugins.validatingadmissionpolicy import (
    VALIDATION_FAILURE_ANNOTATION,
    ValidatingAdmissionPolicy,
)
from apiserver_min.admission.policy.matching import Matcher
from apiserver_min.admission.policy.source import PolicySource
from apiserver_min.admission.policy.validator import CompiledPolicy
from apiserver_min.api import defaults, names
from apiserver_min.api.kinds import REGISTRY, KindInfo
from apiserver_min.api.status import ApiError
from apiserver_min.api.user import UserInfo
from apiserver_min.authz.authorizer import Decision
from apiserver_min.registry.admissionregistration import (
    ValidatingAdmissionPolicyBindingStrategy,
    ValidatingAdmissionPolicyStrategy,
)
from apiserver_min.storage.cacher import ResourceCache
from apiserver_min.storage.keys import key_prefix, object_key

G = names.ADMISSIONREGISTRATION_GROUP
POLICY_KIND = REGISTRY.by_resource(G, "v1", "validatingadmissionpolicies")
BINDING_KIND = REGISTRY.by_resource(G, "v1", "validatingadmissionpolicybindings")
DEPLOYMENTS = REGISTRY.by_resource("apps", "v1", "deployments")
CONFIGMAPS = REGISTRY.by_resource("", "v1", "configmaps")
NAMESPACES = REGISTRY.by_resource("", "v1", "namespaces")
RULE = {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}


def make_policy(name="p", validations=None, **spec) -> dict:
    obj = {
        "apiVersion": f"{G}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": {"matchConstraints": {"resourceRules": [RULE]}, "validations": validations or [], **spec},
    }
    defaults.apply_defaults(G, "v1", "ValidatingAdmissionPolicy", obj)
    return obj


def make_binding(name="b", policy="p", actions=("Deny",), **spec) -> dict:
    obj = {
        "metadata": {"name": name},
        "spec": {"policyName": policy, "validationActions": list(actions), **spec},
    }
    defaults.apply_defaults(G, "v1", "ValidatingAdmissionPolicyBinding", obj)
    return obj


def deployment(replicas=3, labels=None) -> dict:
    return {"metadata": {"name": "web", "namespace": "ns", "labels": labels or {}}, "spec": {"replicas": replicas}}


class FakeCache:
    """The watch cache's read side, filled by ``put``."""

    def __init__(self):
        self.caches: dict[str, ResourceCache] = {}
        self.rv = 0

    def cache(self, prefix):
        return self.caches.setdefault(prefix, ResourceCache(None, prefix))

    def put(self, kind, obj):
        self.rv += 1
        prefix = key_prefix(kind)
        key = object_key(kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        c = self.cache(prefix)
        c.kind = kind
        c.items[key] = c.make_entry(key, orjson.dumps(obj), self.rv)


class FakeAuthorizer:
    name = "fake"

    def __init__(self):
        self.asked = []

    def authorize(self, attrs):
        self.asked.append(attrs)
        return (Decision.ALLOW if attrs.verb == "get" else Decision.NO_OPINION), "fake reason"


@pytest.fixture
def env():
    cache = FakeCache()
    cache.put(NAMESPACES, {"metadata": {"name": "ns", "labels": {"team": "a"}}})
    authorizer = FakeAuthorizer()
    plugin = ValidatingAdmissionPolicy(PolicySource(cache, REGISTRY), lambda: authorizer)
    return cache, plugin, authorizer


async def admit(plugin, obj, operation="CREATE", old=None, kind=DEPLOYMENTS, user=None):
    record, token = chain.begin_request()
    try:
        attrs = Attributes(
            operation,
            kind,
            "ns",
            obj["metadata"]["name"],
            "",
            obj,
            old,
            user or UserInfo("alice", groups=("dev",)),
            False,
        )
        await plugin.validate(attrs)
        return record
    finally:
        chain.end_request(token)


# --- the strategies -------------------------------------------------------------------


def errors(strategy_cls, kind, obj) -> list[str]:
    return [f"{e.field}: {e.type}: {e.detail}" for e in strategy_cls(kind).validate(obj)]


def test_policy_validation_names_field_and_expression():
    bad = make_policy(
        validations=[
            {"expression": "object.spec.("},
            {"expression": "object.spec.replicas", "reason": "Teapot", "message": "a\nb"},
            {"expression": "params.x > 1"},
            {"expression": "object.a.all(x, object.b.all(y, x == y))"},
            {"expression": "1 + 1"},
        ],
        variables=[{"name": "1bad", "expression": "1"}],
        auditAnnotations=[{"key": "k", "valueExpression": "'v'"}, {"key": "k", "valueExpression": "'w'"}],
    )
    errs = errors(ValidatingAdmissionPolicyStrategy, POLICY_KIND, bad)
    text = "\n".join(errs)
    assert (
        "spec.validations[0].expression: FieldValueInvalid: compilation failed: ERROR: <input>:1:13: Syntax error"
        in text
    )
    assert (
        'spec.validations[1].reason: FieldValueNotSupported: supported values: "Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"'
        in text
    )
    assert "spec.validations[1].message: FieldValueInvalid: message must not contain line breaks" in text
    assert (
        "spec.validations[2].expression: FieldValueInvalid: compilation failed: ERROR: <input>:1:7: undeclared reference to 'params"
        in text
    )
    assert "spec.validations[3].expression: FieldValueForbidden: estimated rule cost exceeds budget" in text
    assert "spec.validations[4].expression: FieldValueInvalid: compilation failed: must evaluate to bool" in text
    assert "spec.variables[0].name: FieldValueInvalid: name is not a valid CEL identifier" in text
    assert "spec.auditAnnotations[1].key: FieldValueDuplicate" in text


def test_policy_needs_rules_and_validations_and_params_need_a_param_kind():
    errs = errors(ValidatingAdmissionPolicyStrategy, POLICY_KIND, {"metadata": {"name": "p"}, "spec": {}})
    assert "spec.matchConstraints.resourceRules: FieldValueRequired: " in errs
    assert (
        "spec.validations: FieldValueRequired: validations or auditAnnotations must contain at least one item" in errs
    )
    good = make_policy(
        validations=[{"expression": "object.spec.replicas <= int(params.data.max)"}],
        paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
    )
    assert errors(ValidatingAdmissionPolicyStrategy, POLICY_KIND, good) == []


def test_binding_validation():
    errs = errors(
        ValidatingAdmissionPolicyBindingStrategy, BINDING_KIND, make_binding(actions=("Deny", "Warn", "Deny"))
    )
    assert "spec.validationActions[2]: FieldValueDuplicate: " in errs
    assert any(
        e.startswith('spec.validationActions: FieldValueInvalid: must not contain both "Deny" and "Warn"') for e in errs
    )
    errs = errors(ValidatingAdmissionPolicyBindingStrategy, BINDING_KIND, make_binding(actions=(), paramRef={}))
    assert "spec.validationActions: FieldValueRequired: at least one validation action is required" in errs
    assert "spec.paramRef: FieldValueRequired: one of name or selector must be specified" in errs
    both = make_binding(paramRef={"name": "x", "selector": {}})
    errs = errors(ValidatingAdmissionPolicyBindingStrategy, BINDING_KIND, both)
    assert "spec.paramRef.name: FieldValueForbidden: name and selector are mutually exclusive" in errs
    assert make_binding(paramRef={"name": "x"})["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"


def test_status_warns_of_request_fields_an_admission_request_lacks():
    strategy = ValidatingAdmissionPolicyStrategy(POLICY_KIND)
    obj = make_policy(
        validations=[
            {"expression": "request.userInfo.username != '' && request.operation == 'CREATE'"},
            {"expression": "request.user == 'x'"},
            {"expression": "request.userInfo.name == 'x'"},
        ]
    )
    warnings = strategy.initial_status(obj)["typeChecking"]["expressionWarnings"]
    assert warnings == [
        {"fieldRef": "spec.validations[1].expression", "warning": "ERROR: undefined field 'user' in request.user"},
        {
            "fieldRef": "spec.validations[2].expression",
            "warning": "ERROR: undefined field 'name' in request.userInfo.name",
        },
    ]


def test_a_new_generation_rewrites_the_type_check_and_keeps_the_conditions():
    strategy = ValidatingAdmissionPolicyStrategy(POLICY_KIND)
    old = make_policy(validations=[{"expression": "object.spec.replicas <= 5"}])
    condition = {"type": "Ready", "status": "True", "reason": "Set", "lastTransitionTime": "2023-01-01T00:00:00Z"}
    old["status"] = {"observedGeneration": 1, "typeChecking": {}, "conditions": [condition]}
    new = make_policy(validations=[{"expression": "object.spec.replicass <= 5"}])
    strategy.prepare_for_update(new, old)
    assert new["status"]["observedGeneration"] == 2
    assert new["status"]["conditions"] == [condition]
    assert new["status"]["typeChecking"]["expressionWarnings"][0]["fieldRef"] == "spec.validations[0].expression"


def test_status_warns_of_fields_the_matched_kind_does_not_declare():
    strategy = ValidatingAdmissionPolicyStrategy(POLICY_KIND)
    obj = make_policy(
        validations=[{"expression": "object.spec.replicass <= 5"}, {"expression": "object.spec.replicas <= 5"}]
    )
    status = strategy.initial_status(obj)
    assert status["observedGeneration"] == 1
    assert status["typeChecking"]["expressionWarnings"] == [
        {
            "fieldRef": "spec.validations[0].expression",
            "warning": "apps/v1, Kind=Deployment: undefined field 'replicass' in object.spec.replicass",
        }
    ]


# --- matching ---------------------------------------------------------------------------


def attrs_for(kind, operation="CREATE", obj=None, subresource="", name="web"):
    return Attributes(operation, kind, "ns", name, subresource, obj or {"metadata": {}}, None, UserInfo("u"), False)


def test_matching_rules_selectors_and_exclusions():
    labels = {"ns": {"team": "a"}}.get
    m = Matcher({"resourceRules": [RULE], "namespaceSelector": {"matchLabels": {"team": "a"}}})
    assert m.matches(attrs_for(DEPLOYMENTS), labels)
    assert not m.matches(attrs_for(DEPLOYMENTS, "DELETE"), labels)
    assert not m.matches(attrs_for(CONFIGMAPS), labels)
    assert not m.matches(attrs_for(DEPLOYMENTS, subresource="scale"), labels)
    assert not Matcher({"resourceRules": [RULE], "namespaceSelector": {"matchLabels": {"team": "b"}}}).matches(
        attrs_for(DEPLOYMENTS), labels
    )
    sub = dict(RULE, resources=["deployments/*"])
    assert Matcher({"resourceRules": [sub]}).matches(attrs_for(DEPLOYMENTS, subresource="scale"), labels)
    excluded = Matcher({"resourceRules": [RULE], "excludeResourceRules": [dict(RULE, resourceNames=["web"])]})
    assert not excluded.matches(attrs_for(DEPLOYMENTS), labels)
    assert excluded.matches(attrs_for(DEPLOYMENTS, name="api"), labels)
    selected = Matcher({"resourceRules": [RULE], "objectSelector": {"matchLabels": {"x": "y"}}})
    assert selected.matches(attrs_for(DEPLOYMENTS, obj={"metadata": {"labels": {"x": "y"}}}), labels)
    assert not selected.matches(attrs_for(DEPLOYMENTS), labels)
    # apps/v1beta1 is not served: nothing reaches deployments through it.
    other_version = dict(RULE, apiVersions=["v1beta1"])
    assert not Matcher({"resourceRules": [other_version], "matchPolicy": "Equivalent"}).matches(
        attrs_for(DEPLOYMENTS), labels, Equivalence(REGISTRY)
    )
    # No resource rules (a binding's matchResources with a selector only): every request
    # the selectors let through.
    assert Matcher({"namespaceSelector": {"matchLabels": {"team": "a"}}}).matches(attrs_for(CONFIGMAPS), labels)


WIDGETS = "stable.example.com"
WIDGET_V1 = KindInfo(WIDGETS, "v1", "widgets", "Widget", True, custom=True, custom_storage_version="v1")
WIDGET_V2 = KindInfo(WIDGETS, "v2", "widgets", "Widget", True, custom=True, custom_storage_version="v1")


async def test_a_policy_matched_as_an_equivalent_version_reads_the_object_converted_to_it(env):
    cache, _, authorizer = env
    registry = REGISTRY.copy()
    registry.replace(add=(WIDGET_V1, WIDGET_V2))
    v1_rule = {"apiGroups": [WIDGETS], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["widgets"]}
    expression = (
        f"object.apiVersion == '{WIDGETS}/v1' && request.kind.version == 'v1' && request.resource.version == 'v1'"
        " && request.requestKind.version == 'v2' && request.requestResource.version == 'v2'"
    )
    cache.put(
        POLICY_KIND,
        make_policy(
            validations=[{"expression": expression}, {"expression": "object.spec.size <= 5", "message": "too big"}],
            matchConstraints={"resourceRules": [v1_rule]},
        ),
    )
    cache.put(BINDING_KIND, make_binding())
    plugin = ValidatingAdmissionPolicy(PolicySource(cache, registry), lambda: authorizer, Equivalence(registry))

    def widget(size: int) -> dict:
        return {"apiVersion": f"{WIDGETS}/v2", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": size}}

    await admit(plugin, widget(3), kind=WIDGET_V2)
    with pytest.raises(ApiError) as err:
        await admit(plugin, widget(9), kind=WIDGET_V2)
    assert err.value.message.endswith("denied request: too big")
    # Exact: the v2 request is not the v1 the rule names.
    exact = make_policy(
        validations=[{"expression": "false"}], matchConstraints={"resourceRules": [v1_rule], "matchPolicy": "Exact"}
    )
    exact["metadata"]["generation"] = 2
    cache.put(POLICY_KIND, exact)
    await admit(plugin, widget(9), kind=WIDGET_V2)


# --- the plugin ---------------------------------------------------------------------------


async def test_deny_refuses_with_the_message_and_the_reason_code(env):
    cache, plugin, _ = env
    cache.put(
        POLICY_KIND, make_policy(validations=[{"expression": "object.spec.replicas <= 5", "message": "at most 5"}])
    )
    cache.put(BINDING_KIND, make_binding())
    await admit(plugin, deployment(3))
    with pytest.raises(ApiError) as err:
        await admit(plugin, deployment(6))
    assert (err.value.code, err.value.reason) == (422, "Invalid")
    assert err.value.message == (
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: at most 5"
    )
    assert err.value.details["causes"] == [
        {"message": "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: at most 5"}
    ]
    for generation, (reason, code) in enumerate(
        (("Forbidden", 403), ("Unauthorized", 401), ("RequestEntityTooLarge", 413))
    ):
        changed = make_policy(validations=[{"expression": "false", "reason": reason}])
        changed["metadata"]["generation"] = generation + 2  # a changed spec is a new generation
        cache.put(POLICY_KIND, changed)
        with pytest.raises(ApiError) as err:
            await admit(plugin, deployment(1))
        assert (err.value.code, err.value.reason) == (code, reason)
        assert err.value.message.endswith("denied request: failed expression: false")


async def test_warn_and_audit_admit_and_report(env):
    cache, plugin, _ = env
    cache.put(
        POLICY_KIND,
        make_policy(
            validations=[
                {
                    "expression": "object.spec.replicas <= 5",
                    "messageExpression": "'got ' + string(object.spec.replicas)",
                }
            ],
            auditAnnotations=[{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}],
        ),
    )
    cache.put(BINDING_KIND, make_binding(actions=("Warn", "Audit")))
    record = await admit(plugin, deployment(7))
    assert record.warnings == ["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': got 7"]
    assert record.audit_annotations["p/replicas"] == "7"
    assert json.loads(record.audit_annotations[VALIDATION_FAILURE_ANNOTATION]) == [
        {
            "message": "got 7",
            "policy": "p",
            "binding": "b",
            "expressionIndex": 0,
            "validationActions": ["Warn", "Audit"],
        }
    ]


async def test_errors_follow_the_failure_policy(env):
    cache, plugin, _ = env
    cache.put(POLICY_KIND, make_policy(validations=[{"expression": "object.spec.missing > 1"}]))
    cache.put(BINDING_KIND, make_binding())
    with pytest.raises(ApiError) as err:
        await admit(plugin, deployment())
    assert "denied request: expression 'object.spec.missing > 1' resulted in error: " in err.value.message
    assert err.value.message.endswith("resulted in error: no such key: missing")
    ignoring = make_policy(validations=[{"expression": "object.spec.missing > 1"}], failurePolicy="Ignore")
    ignoring["metadata"]["generation"] = 2
    cache.put(POLICY_KIND, ignoring)
    await admit(plugin, deployment())


async def test_params_by_name_and_selector_and_not_found(env):
    cache, plugin, _ = env
    cache.put(
        CONFIGMAPS,
        {"metadata": {"name": "limits", "namespace": "ns", "labels": {"kind": "limit"}}, "data": {"max": "2"}},
    )
    cache.put(
        CONFIGMAPS,
        {"metadata": {"name": "other", "namespace": "ns", "labels": {"kind": "limit"}}, "data": {"max": "4"}},
    )
    cache.put(
        POLICY_KIND,
        make_policy(
            validations=[
                {
                    "expression": "object.spec.replicas <= int(params.data.max)",
                    "messageExpression": "'max ' + params.data.max",
                }
            ],
            paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
        ),
    )
    cache.put(BINDING_KIND, make_binding(paramRef={"name": "limits"}))  # namespace: the request's
    await admit(plugin, deployment(2))
    with pytest.raises(ApiError, match="denied request: max 2"):
        await admit(plugin, deployment(3))
    cache.put(BINDING_KIND, make_binding(paramRef={"selector": {"matchLabels": {"kind": "limit"}}}))
    with pytest.raises(ApiError, match="denied request: max 2"):  # every selected object must pass
        await admit(plugin, deployment(3))
    cache.put(BINDING_KIND, make_binding(paramRef={"name": "absent"}))
    with pytest.raises(ApiError, match="no params found for policy binding with `Deny` parameterNotFoundAction"):
        await admit(plugin, deployment(1))
    cache.put(BINDING_KIND, make_binding(paramRef={"name": "absent", "parameterNotFoundAction": "Allow"}))
    await admit(plugin, deployment(100))


async def test_variables_match_conditions_and_the_request(env):
    cache, plugin, authorizer = env
    cache.put(
        POLICY_KIND,
        make_policy(
            matchConditions=[{"name": "not-admins", "expression": "!('admins' in request.userInfo.groups)"}],
            variables=[
                {"name": "replicas", "expression": "object.spec.replicas"},
                {"name": "limit", "expression": "namespaceObject.metadata.labels.team == 'a' ? 4 : 1"},
            ],
            validations=[
                {
                    "expression": "variables.replicas <= variables.limit",
                    "messageExpression": "'limit ' + string(variables.limit)",
                },
                {"expression": "authorizer.requestResource.check('get').allowed()"},
                {"expression": "request.operation == 'CREATE' && oldObject == null"},
            ],
        ),
    )
    cache.put(BINDING_KIND, make_binding())
    await admit(plugin, deployment(4))
    assert authorizer.asked[-1].resource == "deployments" and authorizer.asked[-1].user.name == "alice"
    with pytest.raises(ApiError, match="denied request: limit 4"):
        await admit(plugin, deployment(5))
    await admit(plugin, deployment(5), user=UserInfo("root", groups=("admins",)))  # not matched


async def test_changes_apply_at_once_and_programs_are_compiled_per_generation(env):
    cache, plugin, _ = env
    cache.put(POLICY_KIND, make_policy(validations=[{"expression": "object.spec.replicas <= 5"}]))
    await admit(plugin, deployment(9))  # no binding yet
    cache.put(BINDING_KIND, make_binding())
    with pytest.raises(ApiError):
        await admit(plugin, deployment(9))
    first = plugin.source.policy("p")
    cache.put(POLICY_KIND, make_policy(validations=[{"expression": "object.spec.replicas <= 5"}]))  # same generation
    assert plugin.source.policy("p") is first
    newer = make_policy(validations=[{"expression": "object.spec.replicas <= 10"}])
    newer["metadata"]["generation"] = 2
    cache.put(POLICY_KIND, newer)
    assert plugin.source.policy("p") is not first
    await admit(plugin, deployment(9))


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_match_condition_errors_are_upstreams_and_a_false_condition_wins(failure_policy):
    broken = {"name": "broken", "expression": "object.nope == 1"}
    false = {"name": "false", "expression": "false"}
    base = {"object": deployment(), "oldObject": None}
    outcome = CompiledPolicy(
        make_policy(validations=[{"expression": "false"}], matchConditions=[broken], failurePolicy=failure_policy)
    ).evaluate(base)
    expected = (
        ["expression 'object.nope == 1' resulted in error: no such key: nope"] if failure_policy == "Fail" else []
    )
    assert [f.message for f in outcome.failures] == expected
    outcome = CompiledPolicy(
        make_policy(
            validations=[{"expression": "false"}], matchConditions=[broken, false], failurePolicy=failure_policy
        )
    ).evaluate(base)
    assert (outcome.matched, outcome.failures) == (False, [])

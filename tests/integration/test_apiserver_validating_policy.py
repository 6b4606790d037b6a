"""Validating admission policies against a real ``orch-apiserver`` with kubectl: a
policy bound with Deny refuses a deployment over its replica limit with the policy's
message and admits one within it; bound with Warn, kubectl prints the warning; a
policy reads its limit from a ConfigMap through ``paramKind``/``paramRef``; a policy
whose expression costs too much is refused at create."""

from __future__ import annotations

import json

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, kubectl_binary
from tests.components import free_port
from tests.helpers import uniq, wait_for

GROUP = names.ADMISSIONREGISTRATION_GROUP
POLICIES = f"/apis/{GROUP}/v1/validatingadmissionpolicies"
BINDINGS = f"/apis/{GROUP}/v1/validatingadmissionpolicybindings"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    tmp = tmp_path_factory.mktemp("vap")
    with ApiServerProcess(tmp / "data", free_port()) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(server, tmp_path_factory):
    return Kubectl(server, tmp_path_factory.mktemp("kubectl-home"), binary=kubectl_binary("1.27"))


def make_namespace(server) -> str:
    name = uniq("vap")
    server.json("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {"policy-test": name}}}, expect=201)
    return name


def policy(name: str, ns_label: str, validations: list[dict], **spec) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["deployments"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"policy-test": ns_label}},
            },
            "validations": validations,
            **spec,
        },
    }


def binding(name: str, policy_name: str, actions: list[str], **spec) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy_name, "validationActions": actions, **spec},
    }


def deployment(name: str, replicas: int) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def create_deployment(kubectl, ns: str, name: str, replicas: int):
    return kubectl("create", "deployment", name, "-n", ns, "--image=i", f"--replicas={replicas}")


def wait_refused(kubectl, ns: str, replicas: int) -> object:
    """Policies apply as soon as the watch cache has them: retry briefly."""
    results = []

    def refused() -> bool:
        name = uniq("probe")
        result = create_deployment(kubectl, ns, name, replicas)
        results.append(result)
        return result.returncode != 0

    wait_for(refused, timeout=5, what="the policy to apply")
    return results[-1]


def test_deny_binding_refuses_over_the_limit_and_admits_within(server, kubectl):
    ns = make_namespace(server)
    name = uniq("max-replicas")
    server.json(
        "POST",
        POLICIES,
        policy(name, ns, [{"expression": "object.spec.replicas <= 5", "message": "replicas must be at most 5"}]),
        expect=201,
    )
    server.json("POST", BINDINGS, binding(name + "-b", name, ["Deny"]), expect=201)
    result = wait_refused(kubectl, ns, 6)
    assert (
        f"ValidatingAdmissionPolicy '{name}' with binding '{name}-b' denied request: replicas must be at most 5"
        in result.stderr
    ), result.stderr
    assert result.stderr.startswith("error: failed to create deployment: deployments.apps"), result.stderr
    ok = create_deployment(kubectl, ns, "three", 3)
    assert ok.returncode == 0, ok.stderr
    assert "deployment.apps/three created" in ok.stdout
    # The status: 422 Invalid with the message as its cause.
    status, doc = server.json("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("api-six", 6))
    assert status == 422, doc
    assert doc["reason"] == "Invalid"
    assert doc["message"] == (
        f"deployments.apps \"api-six\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding "
        f"'{name}-b' denied request: replicas must be at most 5"
    )
    # The policy's status: generation observed, no type warnings for declared fields.
    _, stored = server.json("GET", f"{POLICIES}/{name}", expect=200)
    assert stored["status"] == {"observedGeneration": 1, "typeChecking": {}}
    assert stored["spec"]["failurePolicy"] == "Fail"
    # A misspelt field: the policy is stored, its status warns.
    typo = uniq("typo")
    server.json("POST", POLICIES, policy(typo, ns, [{"expression": "object.spec.replicaz <= 5"}]), expect=201)
    out = kubectl("get", "validatingadmissionpolicy", typo, "-o", "jsonpath={.status.typeChecking}", check=True)
    assert json.loads(out.stdout) == {
        "expressionWarnings": [
            {
                "fieldRef": "spec.validations[0].expression",
                "warning": "apps/v1, Kind=Deployment: undefined field 'replicaz' in object.spec.replicaz",
            }
        ]
    }
    listed = kubectl("get", "validatingadmissionpolicies", name, check=True).stdout.split("\n")
    assert listed[0].split() == ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]
    assert listed[1].split()[:3] == [name, "1", "<unset>"]


def test_warn_binding_admits_with_a_kubectl_warning(server, kubectl):
    ns = make_namespace(server)
    name = uniq("warn-replicas")
    server.json(
        "POST",
        POLICIES,
        policy(
            name,
            ns,
            [
                {
                    "expression": "object.spec.replicas <= 5",
                    "messageExpression": "'too many replicas: ' + string(object.spec.replicas)",
                    "reason": "Forbidden",
                }
            ],
        ),
        expect=201,
    )
    server.json("POST", BINDINGS, binding(name + "-b", name, ["Warn"]), expect=201)

    def warned() -> bool:
        result = create_deployment(kubectl, ns, uniq("w"), 6)
        assert result.returncode == 0, result.stderr
        return "Warning:" in result.stderr

    wait_for(warned, timeout=5, what="the warning")
    result = create_deployment(kubectl, ns, "warned", 7)
    assert result.returncode == 0, result.stderr
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{name}' with binding '{name}-b': too many replicas: 7"
        in result.stderr
    ), result.stderr


def test_params_from_a_configmap(server, kubectl):
    ns = make_namespace(server)
    name = uniq("param-replicas")
    server.json(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "limits"}, "data": {"maxReplicas": "2"}},
        expect=201,
    )
    server.json(
        "POST",
        POLICIES,
        policy(
            name,
            ns,
            [
                {
                    "expression": "object.spec.replicas <= int(params.data.maxReplicas)",
                    "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas'",
                    "reason": "Forbidden",
                }
            ],
            paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
        ),
        expect=201,
    )
    server.json(
        "POST", BINDINGS, binding(name + "-b", name, ["Deny"], paramRef={"name": "limits", "namespace": ns}), expect=201
    )
    result = wait_refused(kubectl, ns, 3)
    assert f"with binding '{name}-b' denied request: at most 2 replicas" in result.stderr, result.stderr
    status, doc = server.json("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("api-three", 3))
    assert (status, doc["reason"], doc["code"]) == (403, "Forbidden", 403), doc
    assert create_deployment(kubectl, ns, "two", 2).returncode == 0
    # A new limit applies without touching the policy.
    server.json(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/limits",
        {"data": {"maxReplicas": "4"}},
        headers={"Content-Type": "application/merge-patch+json"},
        expect=200,
    )
    wait_for(lambda: create_deployment(kubectl, ns, uniq("four"), 4).returncode == 0, timeout=5, what="the new limit")
    # A binding naming a missing parameter object denies (parameterNotFoundAction: Deny
    # by default), or admits with Allow.
    merge = {"Content-Type": "application/merge-patch+json"}
    server.json("PATCH", f"{BINDINGS}/{name}-b", {"spec": {"paramRef": {"name": "nope"}}}, headers=merge, expect=200)
    result = wait_refused(kubectl, ns, 1)
    assert "no params found for policy binding with `Deny` parameterNotFoundAction" in result.stderr, result.stderr
    server.json(
        "PATCH",
        f"{BINDINGS}/{name}-b",
        {"spec": {"paramRef": {"parameterNotFoundAction": "Allow"}}},
        headers=merge,
        expect=200,
    )
    wait_for(lambda: create_deployment(kubectl, ns, uniq("any"), 9).returncode == 0, timeout=5, what="Allow")


def test_expression_over_the_cost_limit_is_refused_at_create(server, kubectl):
    name = uniq("costly")
    doc = policy(
        name,
        "none",
        [
            {
                "expression": "object.spec.template.spec.containers.all(c, "
                "object.spec.template.spec.containers.all(d, c.name != d.name || c == d))"
            }
        ],
    )
    result = kubectl("create", "-f", "-", input=json.dumps(doc))
    assert result.returncode != 0
    assert result.stderr.startswith(f'The ValidatingAdmissionPolicy "{name}" is invalid: '), result.stderr
    assert "spec.validations[0].expression: Forbidden: estimated rule cost exceeds budget by factor of" in result.stderr
    status, body = server.json("POST", POLICIES, doc)
    assert status == 422, body
    # A syntax error names the expression's field and the position.
    bad = policy(name, "none", [{"expression": "object.spec.("}])
    status, body = server.json("POST", POLICIES, bad)
    assert status == 422, body
    assert (
        'spec.validations[0].expression: Invalid value: "object.spec.(": compilation failed: ERROR: <input>:1:13: Syntax error'
        in body["message"]
    )

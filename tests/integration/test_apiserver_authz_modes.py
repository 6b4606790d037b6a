"""The Webhook and ABAC authorization modes and --request-timeout, end to end against a
real orch-apiserver (``--authorization-mode=Node,RBAC,ABAC,Webhook``).

The authorization backend is the test webhook server on loopback
(tests/webhook_server.py): it allows one user, denies another with a reason and has
no opinion on the rest. Users are played by the admin impersonating them. The same
server's ``/hang`` path is the slow admission webhook behind the 504."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from apiserver_min.api import names
from apiserver_min.server.timeouts import TIMEOUT_MESSAGE
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, Kubectl, kubectl_binary
from tests.components import free_port
from tests.webhook_server import SAR_ALLOWED_USER, SAR_BROKEN_USER, SAR_DENIED_USER, SAR_DENY_REASON, WebhookServer

ABAC_READER = "abac-reader"
RBAC_USER = "rbac-bob"
SLOW_LABEL = "slow-admission"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def as_user(name: str) -> dict:
    return {"Impersonate-User": name}


@pytest.fixture(scope="module")
def hooks():
    with WebhookServer() as w:
        w.hang_seconds = 4.0
        yield w


@pytest.fixture(scope="module")
def server(hooks, tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    d = tmp_path_factory.mktemp("authz-modes")
    orchconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "authz",
                "cluster": {
                    "server": hooks.url("/authorize"),
                    "certificate-authority-data": base64.b64encode(hooks.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "apiserver", "user": {"token": "authz-secret"}}],
        "contexts": [{"name": "authz", "context": {"cluster": "authz", "user": "apiserver"}}],
        "current-context": "authz",
    }
    (d / "authz.orchconfig").write_text(json.dumps(orchconfig))
    spec = {"user": ABAC_READER, "namespace": "default", "resource": "*", "apiGroup": "*", "readonly": True}
    policy = {"apiVersion": f"{names.ABAC_GROUP}/v1beta1", "kind": "Policy", "spec": spec}
    (d / "abac.jsonl").write_text(f"# the read-only user\n\n{json.dumps(policy)}\n")
    proc = ApiServerProcess(
        d / "data",
        free_port(),
        extra_args=[
            "--authorization-mode=Node,RBAC,ABAC,Webhook",
            f"--authorization-policy-file={d / 'abac.jsonl'}",
            f"--authorization-webhook-config-file={d / 'authz.orchconfig'}",
            "--authorization-webhook-cache-unauthorized-ttl=1m",
            "--request-timeout=2s",
        ],
    )
    with proc:
        yield proc


def reviews_of(hooks: WebhookServer, user: str) -> list[dict]:
    return [r for r in hooks.reviews_for("/authorize") if r["spec"].get("user") == user]


@pytest.mark.parametrize("version", ["default", "1.27"])
def test_webhook_allows_one_user_and_caches_its_answer(server, hooks, tmp_path, version):
    kubectl = Kubectl(server, tmp_path) if version == "default" else Kubectl(server, tmp_path, kubectl_binary(version))
    before = len(reviews_of(hooks, SAR_ALLOWED_USER))
    for _ in range(2):
        server.json("GET", f"{CONFIGMAPS}?limit=1", headers=as_user(SAR_ALLOWED_USER), expect=200)
    result = kubectl("--as", SAR_ALLOWED_USER, "get", "configmaps", "-n", "default", check=True)
    assert names.ROOT_CA_CONFIGMAP in result.stdout
    asked = reviews_of(hooks, SAR_ALLOWED_USER)[before:]
    lists = [r for r in asked if (r["spec"].get("resourceAttributes") or {}).get("resource") == "configmaps"]
    if version == "default":  # the first run asks once; the answer is cached for 5 minutes
        assert len(lists) == 1, lists
        review = lists[0]
        assert review["apiVersion"] == f"{names.AUTHORIZATION_GROUP}/v1" and review["kind"] == "SubjectAccessReview"
        assert review["spec"]["resourceAttributes"] == {
            "namespace": "default",
            "verb": "list",
            "version": "v1",
            "resource": "configmaps",
        }
        assert names.GROUP_AUTHENTICATED in review["spec"]["groups"]
        assert "Bearer authz-secret" in hooks.authorizations
    else:
        assert lists == []


def test_no_opinion_lets_rbac_decide(server, hooks):
    role = {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": {"name": "cm-reader", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "cm-reader", "namespace": "default"},
        "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "Role", "name": "cm-reader"},
        "subjects": [{"apiGroup": names.RBAC_GROUP, "kind": "User", "name": RBAC_USER}],
    }
    rbac = f"/apis/{names.RBAC_GROUP}/v1/namespaces/default"
    server.json("POST", f"{rbac}/roles", role, expect=201)
    server.json("POST", f"{rbac}/rolebindings", binding, expect=201)
    # RBAC allows (the index follows the watch cache: poll briefly)
    for _ in range(50):
        status, _ = server.json("GET", CONFIGMAPS, headers=as_user(RBAC_USER))
        if status == 200:
            break
    assert status == 200
    asked = reviews_of(hooks, RBAC_USER)
    status, doc = server.json("GET", "/api/v1/namespaces/default/secrets", headers=as_user(RBAC_USER))
    assert status == 403, doc
    # RBAC and ABAC had no opinion; the webhook was asked and had none either
    assert len(reviews_of(hooks, RBAC_USER)) == len(asked) + 1
    assert doc["message"].startswith(
        f'secrets is forbidden: User "{RBAC_USER}" cannot list resource "secrets" in API group "" '
        'in the namespace "default": '
    ), doc
    assert "No policy matched." in doc["message"], doc


@pytest.mark.parametrize("version", ["default", "1.27"])
def test_webhook_denial_carries_its_reason(server, tmp_path, version):
    status, doc = server.json("GET", CONFIGMAPS, headers=as_user(SAR_DENIED_USER))
    assert status == 403 and doc["reason"] == "Forbidden", doc
    assert doc["message"].endswith(f": {SAR_DENY_REASON}"), doc
    kubectl = Kubectl(server, tmp_path) if version == "default" else Kubectl(server, tmp_path, kubectl_binary(version))
    result = kubectl("--as", SAR_DENIED_USER, "get", "configmaps", "-n", "default")
    assert result.returncode != 0
    assert "Error from server (Forbidden)" in result.stderr and SAR_DENY_REASON in result.stderr


def test_abac_grants_read_only_access(server):
    server.json("GET", CONFIGMAPS, headers=as_user(ABAC_READER), expect=200)
    server.json("GET", "/api/v1/namespaces/default/pods", headers=as_user(ABAC_READER), expect=200)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "abac-write"}}
    status, doc = server.json("POST", CONFIGMAPS, cm, headers=as_user(ABAC_READER))
    assert status == 403 and "No policy matched." in doc["message"], doc
    status, _ = server.json("GET", "/api/v1/namespaces/orch-system/configmaps", headers=as_user(ABAC_READER))
    assert status == 403


def test_backend_failure_is_a_500_naming_it_when_nobody_allows(server, hooks):
    for _ in range(2):  # failures are not cached: asked again
        asked = len(reviews_of(hooks, SAR_BROKEN_USER))
        status, doc = server.json("GET", CONFIGMAPS, headers=as_user(SAR_BROKEN_USER))
        assert status == 500 and doc["reason"] == "InternalError", doc
        assert doc["message"] == (
            f'Internal Server Error: "{CONFIGMAPS}": Post "{hooks.url("/authorize")}": the server answered HTTP 400'
        ), doc
        assert len(reviews_of(hooks, SAR_BROKEN_USER)) == asked + 1
    review = {
        "apiVersion": f"{names.AUTHORIZATION_GROUP}/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": SAR_BROKEN_USER, "nonResourceAttributes": {"verb": "get", "path": "/x"}},
    }
    _, doc = server.json("POST", f"/apis/{names.AUTHORIZATION_GROUP}/v1/subjectaccessreviews", review, expect=201)
    assert doc["status"]["allowed"] is False and "HTTP 400" in doc["status"]["evaluationError"], doc


def test_access_review_asks_the_webhook(server):
    review = {
        "apiVersion": f"{names.AUTHORIZATION_GROUP}/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": SAR_DENIED_USER, "resourceAttributes": {"verb": "get", "resource": "pods"}},
    }
    _, doc = server.json("POST", f"/apis/{names.AUTHORIZATION_GROUP}/v1/subjectaccessreviews", review, expect=201)
    assert doc["status"] == {"allowed": False, "denied": True, "reason": SAR_DENY_REASON}


def test_slow_request_is_answered_504_and_not_stored(server, hooks):
    hook = {
        "name": "slow.hooks.orch.test",
        "clientConfig": hooks.client_config("/hang"),
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {SLOW_LABEL: "yes"}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }
    group = names.ADMISSIONREGISTRATION_GROUP
    cfg = {"apiVersion": f"{group}/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "slow"}}
    server.json("POST", f"/apis/{group}/v1/validatingwebhookconfigurations", {**cfg, "webhooks": [hook]}, expect=201)
    status, doc = 0, None
    for _ in range(20):  # until the configuration is in force (the cache follows storage)
        name = f"slow-{uuid.uuid4().hex[:6]}"
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {SLOW_LABEL: "yes"}}}
        status, doc = server.json("POST", CONFIGMAPS, cm)
        if status != 201:
            break
    assert status == 504, doc
    assert doc == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": TIMEOUT_MESSAGE,
        "reason": "Timeout",
        "code": 504,
    }
    server.json("GET", f"{CONFIGMAPS}/{name}", expect=404)  # cancelled before it was stored
    # a client's ?timeout= must be a duration; the server carries on
    status, doc = server.json("GET", f"{CONFIGMAPS}?timeout=soon")
    assert status == 400 and doc["message"].startswith("invalid timeout specified in the request URL - "), doc
    server.json("GET", f"{CONFIGMAPS}?timeout=5s", expect=200)

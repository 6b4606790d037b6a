"""The proxy sub-resources' rules that need no backend: discovery, authorization per
HTTP method, names, redirects and refusals (the forwarding itself is in
tests/e2e/test_service_proxy.py, which needs root for its network namespaces)."""

from __future__ import annotations

import pytest

from tests.apiserver_fixtures import create_namespace

NS = "proxy-rules"


@pytest.fixture(scope="module")
def ns(apiserver):
    create_namespace(apiserver, NS)
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }
    apiserver.json("POST", f"/api/v1/namespaces/{NS}/services", svc, expect=201)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    apiserver.json("POST", f"/api/v1/namespaces/{NS}/pods", pod, expect=201)
    return NS


def test_discovery_lists_the_proxy_subresources(apiserver):
    _, doc = apiserver.json("GET", "/api/v1", expect=200)
    listed = {r["name"]: r for r in doc["resources"]}
    for res in ("services/proxy", "pods/proxy", "nodes/proxy"):
        assert sorted(listed[res]["verbs"]) == ["create", "delete", "get", "patch", "update"], res


def test_authorized_per_http_method(apiserver, ns):
    role = {
        "apiVersion": "rbac.orch.io/v1",
        "kind": "Role",
        "metadata": {"name": "proxy-get", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]}],
    }
    binding = {
        "apiVersion": "rbac.orch.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "proxy-get", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.orch.io", "kind": "Role", "name": "proxy-get"},
        "subjects": [{"kind": "User", "name": "proxy-reader", "apiGroup": "rbac.orch.io"}],
    }
    apiserver.json("POST", f"/apis/rbac.orch.io/v1/namespaces/{ns}/roles", role, expect=201)
    apiserver.json("POST", f"/apis/rbac.orch.io/v1/namespaces/{ns}/rolebindings", binding, expect=201)
    as_reader = {"Impersonate-User": "proxy-reader"}
    base = f"/api/v1/namespaces/{ns}/services/web:80/proxy/some/path"
    # GET and HEAD are "get": allowed, and then 503 as the service has no endpoints.
    status, doc = apiserver.json("GET", base, headers=as_reader)
    assert status == 503 and doc["reason"] == "ServiceUnavailable", doc
    status, _, _ = apiserver.request("HEAD", base, headers=as_reader)
    assert status == 503
    # POST is "create", DELETE "delete", PUT "update", PATCH "patch": forbidden for this user.
    for method, verb in (("POST", "create"), ("DELETE", "delete"), ("PUT", "update"), ("PATCH", "patch")):
        status, doc = apiserver.json(method, base, headers=as_reader)
        assert status == 403, (method, doc)
        assert f'cannot {verb} resource "services/proxy"' in doc["message"], doc["message"]
    # The name authorized is the one in the path (scheme and port included).
    status, doc = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods/p/proxy/", headers=as_reader)
    assert status == 403 and 'resource "pods/proxy"' in doc["message"]


def test_names_paths_and_refusals(apiserver, ns):
    base = f"/api/v1/namespaces/{ns}"
    status, doc = apiserver.json("GET", f"{base}/services/a:b:c:d/proxy/")
    assert status == 400 and doc["message"] == 'invalid service request "a:b:c:d"'
    status, doc = apiserver.json("GET", f"{base}/services/missing/proxy/")
    assert status == 404 and doc["reason"] == "NotFound"
    status, hdrs, _ = apiserver.request("GET", f"{base}/services/web/proxy")
    assert status == 301 and hdrs["location"] == f"{base}/services/web/proxy/"
    # A pod without an IP: nothing to send to.
    status, doc = apiserver.json("GET", f"{base}/pods/p/proxy/")
    assert status == 400 and doc["message"] == "address not allowed"
    # Methods without a verb: 405.
    status, _, _ = apiserver.request("OPTIONS", f"{base}/services/web/proxy/")
    assert status in (403, 405)

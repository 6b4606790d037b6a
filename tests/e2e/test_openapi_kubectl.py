"""The OpenAPI documents as the real kubectl (v1.32, chosen by the server's /version)
uses them: ``explain`` over ``components.schemas``, and its default strict validation,
which reads ``/openapi/v3`` and each group version's document, finds the kind's
``patch`` operation with ``fieldValidation`` and then leaves validation to the
server (no ``/openapi/v2`` download). Plus the documents' HTTP caching as upstream
serves it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import uuid

import pytest
import yaml

from tests.apiserver_fixtures import create_namespace

MEDIA_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


@pytest.fixture
def ns(apiserver):
    name = f"oa-{uuid.uuid4().hex[:8]}"
    create_namespace(apiserver, name)
    return name


def manifests(ns: str) -> list[dict]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": ns, "labels": {"app": "p"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "command": ["sleep", "1"],
                        "ports": [{"containerPort": 80, "name": "http"}],
                        "resources": {"limits": {"memory": "64Mi", "cpu": "100m"}},
                    }
                ]
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "d"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "busybox", "ports": [{"containerPort": 8080, "name": "http"}]}
                        ]
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": ns},
            "spec": {"selector": {"app": "d"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}, "data": {"a": "1"}},
        {
            "apiVersion": "rbac.orch.io/v1",
            "kind": "Role",
            "metadata": {"name": "r", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    ]


# --- explain -------------------------------------------------------------------------------


def test_explain_pod_containers(kubectl):
    out = ok(kubectl("explain", "pod.spec.containers"))
    assert "KIND:       Pod" in out and "VERSION:    v1" in out
    assert "FIELD: containers <[]Container>" in out
    assert "name\t<string> -required-" in out
    assert "ports\t<[]ContainerPort>" in out
    assert "resources\t<ResourceRequirements>" in out
    assert "enum: Always, IfNotPresent, Never" in out
    assert "Container image name." in out  # descriptions are served


def test_explain_pod_container_ports(kubectl):
    out = ok(kubectl("explain", "pod.spec.containers.ports"))
    assert "FIELD: ports <[]ContainerPort>" in out
    assert "containerPort\t<integer> -required-" in out
    assert "protocol\t<string>" in out and "enum: SCTP, TCP, UDP" in out
    assert "hostIP\t<string>" in out
    assert "Port number on the pod's IP address" in out


def test_explain_deployment_spec_recursive(kubectl):
    out = ok(kubectl("explain", "deployment.spec", "--recursive"))
    assert "GROUP:      apps" in out and "KIND:       Deployment" in out
    lines = [ln.strip() for ln in out.splitlines()]
    for want in (
        "replicas\t<integer>",
        "selector\t<LabelSelector> -required-",
        "strategy\t<DeploymentStrategy>",
        "maxSurge\t<IntOrString>",
        "template\t<PodTemplateSpec> -required-",
        "containers\t<[]Container> -required-",
        "containerPort\t<integer> -required-",
        "limits\t<map[string]Quantity>",
    ):
        assert want in lines, want


def test_explain_kind_of_an_orch_group(kubectl):
    out = ok(kubectl("explain", "roles.rules"))
    assert "GROUP:      rbac.orch.io" in out
    assert "verbs\t<[]string> -required-" in out
    out = ok(kubectl("explain", "leases.spec.holderIdentity"))
    assert "GROUP:      coordination.orch.io" in out and "<string>" in out


# --- default validation ----------------------------------------------------------------------


def test_default_validation_reads_v3_and_leaves_checks_to_the_server(kubectl, ns):
    docs = manifests(ns)
    res = kubectl("create", "-f", "-", "-v=6", input=yaml.safe_dump_all(docs))
    out = ok(res)
    for want in (
        "pod/p created",
        "deployment.apps/d created",
        "service/s created",
        "configmap/cm created",
        "role.rbac.orch.io/r created",
    ):
        assert want in out, out
    # kubectl found each kind's patch operation with fieldValidation in the v3 documents
    # (a freshly cached index may skip the index GET; the v2 document is not needed for these
    # kinds -- see test_openapi_v2_kubectl for the review kinds that need it).
    assert "/openapi/v2" not in res.stderr
    assert "fieldValidation=Strict" in res.stderr


def test_apply_creates_and_reapply_is_unchanged(kubectl, apiserver, ns):
    text = yaml.safe_dump_all(manifests(ns))
    out = ok(kubectl("apply", "-f", "-", input=text))
    assert out.count(" created") == 5, out
    # The second apply computes its patch from the v3 schema's patch markers: nothing changed.
    out = ok(kubectl("apply", "-f", "-", input=text))
    assert out.count(" unchanged") == 5, out
    _, dep = apiserver.json("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/d", expect=200)
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "50%"


def test_reapply_patch_is_computed_from_the_schema_markers(kubectl, apiserver, ns):
    """Client-side apply builds its strategic merge patch from the v3 document's
    x-kubernetes-patch-merge-key markers: a removed container port (merge key
    containerPort) and a removed label reach the server as deletions."""
    dep = manifests(ns)[1]
    dep["metadata"]["labels"] = {"keep": "1", "drop": "2"}
    ports = dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    ports.append({"containerPort": 9090, "name": "metrics"})
    ok(kubectl("apply", "-f", "-", input=yaml.safe_dump(dep)))
    del dep["metadata"]["labels"]["drop"]
    ports.pop()
    res = kubectl("apply", "-f", "-", "-v=8", input=yaml.safe_dump(dep))
    ok(res)
    assert "$setElementOrder/ports" in res.stderr  # the patch was derived with the list's merge key
    _, got = apiserver.json("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/d", expect=200)
    assert got["metadata"]["labels"] == {"keep": "1"}
    assert [p["containerPort"] for p in got["spec"]["template"]["spec"]["containers"][0]["ports"]] == [8080]
    # kubectl's built-in types do not know rbac.orch.io: only the v3 document tells it that
    # finalizers is a merge list (otherwise it would send a JSON merge patch replacing it).
    role = manifests(ns)[4]
    role["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    ok(kubectl("apply", "-f", "-", input=yaml.safe_dump(role)))
    role["metadata"]["finalizers"] = ["example.com/a"]
    res = kubectl("apply", "-f", "-", "-v=8", input=yaml.safe_dump(role))
    ok(res)
    assert "application/strategic-merge-patch+json" in res.stderr
    assert "$deleteFromPrimitiveList/finalizers" in res.stderr
    _, got = apiserver.json("GET", f"/apis/rbac.orch.io/v1/namespaces/{ns}/roles/r", expect=200)
    assert got["metadata"]["finalizers"] == ["example.com/a"]
    apiserver.json(
        "PATCH",
        f"/apis/rbac.orch.io/v1/namespaces/{ns}/roles/r",
        {"metadata": {"finalizers": None}},
        {"Content-Type": "application/merge-patch+json"},
        expect=200,
    )


def test_validate_false_skips_openapi(kubectl, ns):
    cm = manifests(ns)[3]
    res = kubectl("create", "--validate=false", "-f", "-", "-v=6", input=yaml.safe_dump(cm))
    ok(res)
    assert "/openapi/" not in res.stderr


# --- HTTP ------------------------------------------------------------------------------------


def test_index_etag_and_not_modified(apiserver):
    status, headers, body = apiserver.request("GET", "/openapi/v3")
    assert status == 200 and headers["content-type"].startswith("application/json")
    etag = headers["etag"]
    assert etag == '"' + hashlib.sha512(body).hexdigest().upper() + '"'
    status, _, body304 = apiserver.request("GET", "/openapi/v3", headers={"If-None-Match": etag})
    assert status == 304 and body304 == b""
    index = json.loads(body)
    for gv in ("api/v1", "apis/apps/v1", "apis/rbac.orch.io/v1", "apis/authentication.orch.io/v1"):
        assert index["paths"][gv]["serverRelativeURL"].startswith(f"/openapi/v3/{gv}?hash=")


def test_group_version_document_caching(apiserver):
    _, _, body = apiserver.request("GET", "/openapi/v3")
    url = json.loads(body)["paths"]["apis/apps/v1"]["serverRelativeURL"]
    status, headers, doc = apiserver.request("GET", url, headers={"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["cache-control"] == "public, immutable" and "expires" in headers
    assert headers.get("content-encoding") == "gzip"
    doc = json.loads(gzip.decompress(doc))
    assert "io.k8s.api.apps.v1.Deployment" in doc["components"]["schemas"]
    status, headers, _ = apiserver.request("GET", "/openapi/v3/apis/apps/v1?hash=stale")
    assert status == 301 and headers["location"] == url
    assert apiserver.request("GET", "/openapi/v3/apis/nosuch/v1")[0] == 404


def test_v2_is_json_by_default_and_protobuf_when_asked(apiserver):
    status, headers, _ = apiserver.request("GET", "/openapi/v2", headers={"Accept": MEDIA_V2_PROTOBUF})
    assert status == 200 and headers["content-type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    status, headers, body = apiserver.request("GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert status == 200 and headers["content-type"].startswith("application/json")
    doc = json.loads(body)
    assert doc["swagger"] == "2.0"
    assert "io.k8s.api.core.v1.Pod" in doc["definitions"]
    assert "/apis/rbac.orch.io/v1/namespaces/{namespace}/roles/{name}" in doc["paths"]

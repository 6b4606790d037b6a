"""Group aliases over raw HTTPS against the real server: the upstream group names
kubectl compiles in (``rbac.authorization.k8s.io``, ``certificates.k8s.io``,
``coordination.k8s.io``, ...) serve the orch groups' objects, with ``apiVersion``
following the group the request named, authorized as the orch group, and never
listed in discovery. Also: discovery lists no sub-resource that is not served."""

from __future__ import annotations

import base64
import http.client
import json
import ssl

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver_min.api import names, protobuf
from apiserver_min.api.schemas import schema_for
from apiserver_min.pki import Pki, cert_pem, key_pem, new_key, sign_leaf
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq, wait_for

RBAC = f"/apis/{names.RBAC_GROUP}/v1"
RBAC_ALIAS = f"/apis/{names.UPSTREAM_RBAC_GROUP}/v1"
ORCH_AV = f"{names.RBAC_GROUP}/v1"
ALIAS_AV = f"{names.UPSTREAM_RBAC_GROUP}/v1"
CSR_ALIAS_AV = f"{names.UPSTREAM_CERTIFICATES_GROUP}/v1"
PROTOBUF = names.MEDIA_PROTOBUF_UPSTREAM
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def role(name: str, api_version: str = ALIAS_AV) -> dict:
    return {
        "apiVersion": api_version,
        "kind": "Role",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }


@pytest.fixture
def ns(apiserver):
    name = uniq("alias")
    create_namespace(apiserver, name)
    return name


# --- the rbac alias: every verb, every representation ------------------------------------------


def test_create_get_and_list_answer_in_the_requested_spelling(apiserver, ns):
    _, created = apiserver.json("POST", f"{RBAC_ALIAS}/namespaces/{ns}/roles", role("r1"), expect=201)
    assert created["apiVersion"] == ALIAS_AV and created["kind"] == "Role"
    # The body may name the group either way on the alias path; another group is refused.
    _, other = apiserver.json("POST", f"{RBAC_ALIAS}/namespaces/{ns}/roles", role("r2", ORCH_AV), expect=201)
    assert other["apiVersion"] == ALIAS_AV
    status, doc = apiserver.json("POST", f"{RBAC_ALIAS}/namespaces/{ns}/roles", role("r3", "rbac.example.com/v1"))
    assert status == 400 and "rbac.example.com/v1" in doc["message"], doc
    # Our own path keeps our spelling, for the same stored object.
    status, doc = apiserver.json("POST", f"{RBAC}/namespaces/{ns}/roles", role("r4", ALIAS_AV))
    assert status == 400, doc
    _, mine = apiserver.json("GET", f"{RBAC}/namespaces/{ns}/roles/r1", expect=200)
    assert mine["apiVersion"] == ORCH_AV and mine["metadata"]["uid"] == created["metadata"]["uid"]
    assert all(e["apiVersion"] == ORCH_AV for e in mine["metadata"]["managedFields"])

    _, got = apiserver.json("GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles/r1", expect=200)
    assert got["apiVersion"] == ALIAS_AV and got["rules"] == mine["rules"]
    _, lst = apiserver.json("GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles", expect=200)
    assert (lst["apiVersion"], lst["kind"]) == (ALIAS_AV, "RoleList")
    assert sorted(i["metadata"]["name"] for i in lst["items"]) == ["r1", "r2"]
    assert {i["apiVersion"] for i in lst["items"]} == {ALIAS_AV}
    _, everywhere = apiserver.json("GET", f"{RBAC_ALIAS}/roles?labelSelector=&limit=500", expect=200)
    assert everywhere["apiVersion"] == ALIAS_AV and {i["apiVersion"] for i in everywhere["items"]} == {ALIAS_AV}
    _, ours = apiserver.json("GET", f"{RBAC}/namespaces/{ns}/roles", expect=200)
    assert ours["apiVersion"] == ORCH_AV and {i["apiVersion"] for i in ours["items"]} == {ORCH_AV}

    _, pretty = apiserver.json("GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles/r1?pretty=true", expect=200)
    assert pretty["apiVersion"] == ALIAS_AV
    status, _, body = apiserver.request(
        "GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles/r1", headers={"Accept": "application/yaml"}
    )
    assert status == 200 and yaml.safe_load(body)["apiVersion"] == ALIAS_AV
    status, _, body = apiserver.request(
        "GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles?includeObject=Object", headers={"Accept": TABLE}
    )
    table = json.loads(body)
    assert status == 200 and table["kind"] == "Table"
    assert {r["object"]["apiVersion"] for r in table["rows"]} == {ALIAS_AV}


def test_protobuf_answers_in_the_requested_spelling(apiserver, ns):
    apiserver.json("POST", f"{RBAC}/namespaces/{ns}/roles", role("pb", ORCH_AV), expect=201)
    status, headers, body = apiserver.request(
        "GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles/pb", headers={"Accept": f"{PROTOBUF}, application/json"}
    )
    assert status == 200 and headers["content-type"].startswith(PROTOBUF)
    envelope = protobuf.decode_unknown(body)
    assert (envelope.api_version, envelope.kind) == (ALIAS_AV, "Role")
    status, headers, body = apiserver.request(
        "GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles", headers={"Accept": f"{PROTOBUF}, application/json"}
    )
    assert status == 200 and headers["content-type"].startswith(PROTOBUF)
    assert protobuf.decode_unknown(body).api_version == ALIAS_AV
    # A protobuf body in the upstream spelling, as kubectl create role sends it.
    body = protobuf.encode(role("pb2", ALIAS_AV), schema_for(names.RBAC_GROUP, "v1", "Role"))
    status, _, reply = apiserver.request(
        "POST",
        f"{RBAC_ALIAS}/namespaces/{ns}/roles",
        body,
        headers={"Content-Type": PROTOBUF, "Accept": f"{PROTOBUF}, application/json"},
    )
    assert status == 201, reply
    assert protobuf.decode_unknown(reply).api_version == ALIAS_AV


def test_update_patch_apply_and_delete_on_the_alias(apiserver, ns):
    path = f"{RBAC_ALIAS}/namespaces/{ns}/roles"
    _, created = apiserver.json("POST", path, role("u1"), expect=201)
    created["rules"][0]["verbs"] = ["get", "list"]
    _, updated = apiserver.json("PUT", f"{path}/u1", created, expect=200)
    assert updated["apiVersion"] == ALIAS_AV and updated["rules"][0]["verbs"] == ["get", "list"]
    status, _, body = apiserver.request(
        "PATCH",
        f"{path}/u1",
        json.dumps({"metadata": {"labels": {"a": "b"}}}),
        headers={"Content-Type": names.MEDIA_MERGE_PATCH},
    )
    assert status == 200 and json.loads(body)["apiVersion"] == ALIAS_AV
    applied = yaml.safe_dump(role("u2"))
    status, _, body = apiserver.request(
        "PATCH", f"{path}/u2?fieldManager=alias-test", applied, headers={"Content-Type": names.MEDIA_APPLY_PATCH}
    )
    assert status == 201, body
    assert json.loads(body)["apiVersion"] == ALIAS_AV
    _, stored = apiserver.json("GET", f"{RBAC}/namespaces/{ns}/roles/u2", expect=200)
    assert stored["apiVersion"] == ORCH_AV and stored["rules"] == role("u2")["rules"]
    assert [(e["manager"], e["operation"]) for e in stored["metadata"]["managedFields"]] == [("alias-test", "Apply")]
    _, gone = apiserver.json("DELETE", f"{path}/u1", expect=200)
    assert gone["kind"] == "Status" and gone["details"]["group"] == names.UPSTREAM_RBAC_GROUP
    assert apiserver.request("GET", f"{RBAC}/namespaces/{ns}/roles/u1")[0] == 404


def test_binding_references_in_the_upstream_spelling_are_ours(apiserver, ns):
    """kubectl create rolebinding names the group in roleRef and subjects."""
    binding = {
        "apiVersion": ALIAS_AV,
        "kind": "RoleBinding",
        "metadata": {"name": "b"},
        "roleRef": {"apiGroup": names.UPSTREAM_RBAC_GROUP, "kind": "Role", "name": "r"},
        "subjects": [
            {"apiGroup": names.UPSTREAM_RBAC_GROUP, "kind": "User", "name": "u"},
            {"kind": "ServiceAccount", "name": "default", "namespace": ns},
        ],
    }
    apiserver.json("POST", f"{RBAC_ALIAS}/namespaces/{ns}/rolebindings", binding, expect=201)
    _, stored = apiserver.json("GET", f"{RBAC}/namespaces/{ns}/rolebindings/b", expect=200)
    assert stored["roleRef"]["apiGroup"] == names.RBAC_GROUP
    assert [s.get("apiGroup", "") for s in stored["subjects"]] == [names.RBAC_GROUP, ""]


def test_watch_events_follow_the_requested_spelling(apiserver, ns):
    apiserver.json("POST", f"{RBAC}/namespaces/{ns}/roles", role("w0", ORCH_AV), expect=201)
    _, lst = apiserver.json("GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles", expect=200)
    rv = lst["metadata"]["resourceVersion"]
    base = f"namespaces/{ns}/roles?watch=true&timeoutSeconds=5"
    with (
        apiserver.watch(f"{RBAC_ALIAS}/{base}&resourceVersion={rv}&allowWatchBookmarks=true") as alias_watch,
        apiserver.watch(f"{RBAC}/{base}&resourceVersion={rv}") as orch_watch,
        apiserver.watch(f"{RBAC_ALIAS}/{base}&includeObject=Object", headers={"Accept": TABLE}) as tables,
        apiserver.watch(f"{RBAC_ALIAS}/{base}") as initial,
    ):
        assert alias_watch.status == orch_watch.status == tables.status == initial.status == 200
        first = initial.next()  # the initial ADDED of what exists
        assert first["type"] == "ADDED" and first["object"]["apiVersion"] == ALIAS_AV
        apiserver.json("POST", f"{RBAC}/namespaces/{ns}/roles", role("w1", ORCH_AV), expect=201)
        apiserver.json("DELETE", f"{RBAC}/namespaces/{ns}/roles/w1", expect=200)
        events = [e for e in alias_watch.events(2)]
        assert [e["type"] for e in events] == ["ADDED", "DELETED"]
        assert {e["object"]["apiVersion"] for e in events} == {ALIAS_AV}
        assert {e["object"]["apiVersion"] for e in orch_watch.events(2)} == {ORCH_AV}
        rows = [r for e in tables.events(3) for r in e["object"]["rows"]]
        assert {r["object"]["apiVersion"] for r in rows} == {ALIAS_AV}
        assert initial.next()["object"]["apiVersion"] == ALIAS_AV


# --- authorization ------------------------------------------------------------------------------


class _User:
    def __init__(self, server, cn: str):
        self.server = server
        ca_cert, ca_key = Pki(str(server.data_dir)).load_ca()
        key = new_key()
        cert = sign_leaf(ca_cert, ca_key, key.public_key(), cn, (), client=True)
        cert_path, key_path = server.data_dir / f"{cn}.crt", server.data_dir / f"{cn}.key"
        cert_path.write_bytes(cert_pem(cert))
        key_path.write_bytes(key_pem(key))
        self.ctx = ssl.create_default_context(cafile=str(server.ca_cert))
        self.ctx.load_cert_chain(str(cert_path), str(key_path))

    def json(self, method: str, path: str, body=None) -> tuple[int, dict]:
        conn = http.client.HTTPSConnection(self.server.host, self.server.port, timeout=10, context=self.ctx)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
        finally:
            conn.close()


def test_alias_requests_are_authorized_as_the_orch_group(apiserver, ns):
    cn = uniq("reader")
    user = _User(apiserver, cn)
    apiserver.json(
        "POST",
        f"{RBAC}/namespaces/{ns}/roles",
        {
            "metadata": {"name": "read-roles"},
            "rules": [{"apiGroups": [names.RBAC_GROUP], "resources": ["roles"], "verbs": ["get", "list"]}],
        },
        expect=201,
    )
    apiserver.json(
        "POST",
        f"{RBAC}/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": "read-roles"},
            "roleRef": {"apiGroup": names.RBAC_GROUP, "kind": "Role", "name": "read-roles"},
            "subjects": [{"apiGroup": names.RBAC_GROUP, "kind": "User", "name": cn}],
        },
        expect=201,
    )
    status, doc = wait_for(
        lambda: (lambda r: r if r[0] == 200 else None)(user.json("GET", f"{RBAC_ALIAS}/namespaces/{ns}/roles")),
        5,
        "the binding to take effect",
    )
    assert status == 200
    assert doc["apiVersion"] == ALIAS_AV
    status, doc = user.json("POST", f"{RBAC_ALIAS}/namespaces/{ns}/roles", role("nope"))
    assert status == 403 and f'in API group "{names.RBAC_GROUP}"' in doc["message"], doc
    status, doc = user.json("GET", f"{RBAC_ALIAS}/clusterroles")
    assert status == 403 and f'in API group "{names.RBAC_GROUP}"' in doc["message"], doc


# --- the other aliases kubectl needs ----------------------------------------------------------


def test_describe_node_reads_the_lease_on_the_upstream_path(apiserver):
    node = uniq("node")
    lease = {
        "apiVersion": f"{names.COORDINATION_GROUP}/v1",
        "kind": "Lease",
        "metadata": {"name": node},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40},
    }
    apiserver.json(
        "POST", f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{names.NS_NODE_LEASE}/leases", lease, expect=201
    )
    _, got = apiserver.json(
        "GET", f"/apis/{names.UPSTREAM_COORDINATION_GROUP}/v1/namespaces/kube-node-lease/leases/{node}", expect=200
    )
    assert got["apiVersion"] == f"{names.UPSTREAM_COORDINATION_GROUP}/v1" and got["spec"]["holderIdentity"] == node
    assert got["metadata"]["namespace"] == names.NS_NODE_LEASE


def _csr(name: str) -> dict:
    key = ec.generate_private_key(ec.SECP256R1())
    req = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    return {
        "apiVersion": f"{names.CERTIFICATES_GROUP}/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(req).decode(),
            "signerName": "example.com/custom",
            "usages": ["client auth"],
        },
    }


def test_certificate_approval_on_the_upstream_path(apiserver):
    """What kubectl certificate approve sends once it has the object: a protobuf GET and a
    protobuf PUT of the approval sub-resource, both on certificates.k8s.io."""
    name = uniq("csr")
    apiserver.json("POST", f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests", _csr(name), expect=201)
    path = f"/apis/{names.UPSTREAM_CERTIFICATES_GROUP}/v1/certificatesigningrequests/{name}"
    status, _, body = apiserver.request("GET", path, headers={"Accept": f"{PROTOBUF}, application/json"})
    assert status == 200 and protobuf.decode_unknown(body).api_version == CSR_ALIAS_AV
    csr = protobuf.decode(body, schema_for(names.CERTIFICATES_GROUP, "v1", "CertificateSigningRequest"))
    csr.setdefault("status", {})["conditions"] = [
        {"type": "Approved", "status": "True", "reason": "KubectlApprove", "message": "approved by a test"}
    ]
    pb = protobuf.encode(csr, schema_for(names.CERTIFICATES_GROUP, "v1", "CertificateSigningRequest"))
    status, headers, reply = apiserver.request(
        "PUT", f"{path}/approval", pb, headers={"Content-Type": PROTOBUF, "Accept": f"{PROTOBUF}, application/json"}
    )
    assert status == 200, reply
    assert protobuf.decode_unknown(reply).api_version == CSR_ALIAS_AV
    _, stored = apiserver.json(
        "GET", f"/apis/{names.CERTIFICATES_GROUP}/v1/certificatesigningrequests/{name}", expect=200
    )
    assert stored["apiVersion"] == f"{names.CERTIFICATES_GROUP}/v1"
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Approved"]


def test_discovery_lists_only_the_orch_groups(apiserver):
    _, groups = apiserver.json("GET", "/apis", expect=200)
    listed = {g["name"] for g in groups["groups"]}
    assert names.RBAC_GROUP in listed and not listed & (set(names.GROUP_ALIASES) - set(names.DISCOVERY_ALIAS_GROUPS))
    # ... and the aliases clients look for by name (kubectl top: metrics.k8s.io), in their spelling.
    assert names.UPSTREAM_METRICS_GROUP in listed
    _, metrics = apiserver.json("GET", f"/apis/{names.UPSTREAM_METRICS_GROUP}/v1beta1", expect=200)
    assert metrics["groupVersion"] == f"{names.UPSTREAM_METRICS_GROUP}/v1beta1"
    assert {r["name"] for r in metrics["resources"]} == {"nodes", "pods"}
    for alias in (names.UPSTREAM_RBAC_GROUP, names.UPSTREAM_CERTIFICATES_GROUP, names.UPSTREAM_COORDINATION_GROUP):
        assert apiserver.request("GET", f"/apis/{alias}")[0] == 404
        assert apiserver.request("GET", f"/apis/{alias}/v1")[0] == 404
    _, paths = apiserver.json("GET", "/", expect=200)
    assert not [p for p in paths["paths"] if any(a in p for a in names.GROUP_ALIASES)]


def test_aliases_of_groups_without_kinds(apiserver):
    # The resource metrics in the upstream spelling (no agent here, so no figures yet).
    _, doc = apiserver.json("GET", f"/apis/{names.UPSTREAM_METRICS_GROUP}/v1beta1/nodes", expect=200)
    assert doc["kind"] == "NodeMetricsList" and doc["apiVersion"] == f"{names.UPSTREAM_METRICS_GROUP}/v1beta1"
    assert doc["items"] == []
    status, doc = apiserver.json("GET", f"/apis/{names.UPSTREAM_METRICS_GROUP}/v1beta1/namespaces/default/pods/x")
    assert status == 404 and doc["reason"] == "NotFound", doc
    # kubectl's CRD lookup: the apiextensions alias serves the definitions (none in this module).
    _, crds = apiserver.json(
        "GET", f"/apis/{names.UPSTREAM_APIEXTENSIONS_GROUP}/v1/customresourcedefinitions", expect=200
    )
    assert crds["apiVersion"] == f"{names.UPSTREAM_APIEXTENSIONS_GROUP}/v1" and crds["items"] == []
    _, own = apiserver.json("GET", f"/apis/{names.APIEXTENSIONS_GROUP}/v1/customresourcedefinitions", expect=200)
    assert own["apiVersion"] == f"{names.APIEXTENSIONS_GROUP}/v1" and own["items"] == []


# --- discovery advertises only what is served ------------------------------------------------


def test_discovery_lists_no_subresource_that_is_not_found(apiserver, ns):
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    svc = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/services", svc, expect=201)
    node = uniq("node")
    apiserver.json("POST", "/api/v1/nodes", {"metadata": {"name": node}}, expect=201)
    items = {
        "pods": f"/api/v1/namespaces/{ns}/pods/p",
        "services": f"/api/v1/namespaces/{ns}/services/s",
        "nodes": f"/api/v1/nodes/{node}",
    }
    _, doc = apiserver.json("GET", "/api/v1", expect=200)
    listed = [r for r in doc["resources"] if r["name"].split("/")[0] in items and "/" in r["name"]]
    assert {r["name"] for r in listed} >= {"pods/status", "pods/log", "nodes/status", "services/status"}
    for r in listed:
        resource, sub = r["name"].split("/", 1)
        method = "GET" if "get" in r["verbs"] else "POST"
        # dryRun: an eviction must not remove the pod the later requests use.
        status, reply = apiserver.json(method, f"{items[resource]}/{sub}?dryRun=All", {} if method == "POST" else None)
        message = reply.get("message", "") if isinstance(reply, dict) else str(reply)
        assert not (status == 404 and "could not find the requested resource" in message), (r["name"], status, reply)


def test_endpointslices_by_upstream_group_and_label(apiserver, ns):
    """kubectl describe service (1.32) lists discovery.k8s.io EndpointSlices by the label
    kubernetes.io/service-name: both name ours."""
    eps = {
        "metadata": {"name": "web-abc", "labels": {names.LABEL_SERVICE_NAME: "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.2.3"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }
    apiserver.json("POST", f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/{ns}/endpointslices", eps, expect=201)
    other = dict(eps, metadata={"name": "db-abc", "labels": {names.LABEL_SERVICE_NAME: "db"}})
    apiserver.json("POST", f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/{ns}/endpointslices", other, expect=201)
    _, lst = apiserver.json(
        "GET",
        f"/apis/{names.UPSTREAM_ENDPOINTSLICE_GROUP}/v1/namespaces/{ns}/endpointslices"
        "?labelSelector=kubernetes.io%2Fservice-name%3Dweb",
        expect=200,
    )
    assert lst["apiVersion"] == f"{names.UPSTREAM_ENDPOINTSLICE_GROUP}/v1"
    assert [i["metadata"]["name"] for i in lst["items"]] == ["web-abc"]
    # On our own group the upstream key is just another label (nothing carries it).
    _, ours = apiserver.json(
        "GET",
        f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb",
        expect=200,
    )
    assert ours["items"] == []

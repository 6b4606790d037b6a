"""Server-side apply and field ownership against the real orch-apiserver: every row of
the spec's ownership table, the managedFields reset rules, create-through-apply,
dry-run, request checks, and the ``kubernetes`` Python client applying."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq

APPLY = {"Content-Type": "application/apply-patch+yaml"}
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


@pytest.fixture
def ns(apiserver):
    name = uniq("apply")
    create_namespace(apiserver, name)
    return name


def q(**params) -> str:
    return "?" + urlencode({k: ("true" if v is True else v) for k, v in params.items()})


def deploy_path(ns: str, name: str = "") -> str:
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    return f"{base}/{name}" if name else base


def cm_path(ns: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{ns}/configmaps"
    return f"{base}/{name}" if name else base


def deployment(name: str, replicas: int | None = None, containers=None, labels=None) -> dict:
    spec: dict = {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": containers or [{"name": "web", "image": "busybox:1"}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    md: dict = {"name": name}
    if labels is not None:
        md["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md, "spec": spec}


def configmap(name: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def apply(server, path: str, obj: dict, manager: str, expect=(200, 201), **params):
    return server.json("PATCH", path + q(fieldManager=manager, **params), json.dumps(obj), APPLY, expect=expect)[1]


def managers(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def owns(obj: dict, manager: str, op: str, *path: str) -> bool:
    node = managers(obj).get((manager, op))
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return False
        node = node[p]
    return node is not None


# --- the ownership table ------------------------------------------------------------------


def test_non_apply_writers_become_update_managers_without_conflicts(apiserver, ns):
    name = uniq("cm")
    _, created = apiserver.json(
        "POST", cm_path(ns) + q(fieldManager="creator"), configmap(name, {"a": "1"}), expect=201
    )
    assert managers(created) == {("creator", "Update"): {"f:data": {".": {}, "f:a": {}}}}
    e = created["metadata"]["managedFields"][0]
    assert e["apiVersion"] == "v1" and e["fieldsType"] == "FieldsV1" and e["time"].endswith("Z")
    applied = apply(apiserver, cm_path(ns, name), configmap(name, {"b": "2"}), "applier")
    # A merge patch changes a field the applier owns: no conflict, the patcher takes it.
    _, patched = apiserver.json(
        "PATCH", cm_path(ns, name) + q(fieldManager="patcher"), {"data": {"b": "3"}}, MERGE, expect=200
    )
    assert owns(patched, "patcher", "Update", "f:data", "f:b")
    assert not owns(patched, "applier", "Apply", "f:data", "f:b")
    assert ("applier", "Apply") not in managers(patched)  # it owned nothing else
    # PUT by a manager derived from the user agent.
    body = dict(patched, data={"a": "9", "b": "3"})
    _, put = apiserver.json("PUT", cm_path(ns, name), body, {"User-Agent": "my-tool/1.2 (linux)"}, expect=200)
    assert owns(put, "my-tool", "Update", "f:data", "f:a")
    assert not owns(put, "creator", "Update", "f:data", "f:a")
    assert applied["metadata"]["name"] == name


def test_apply_conflict_is_rejected_and_changes_nothing(apiserver, ns):
    name = uniq("d")
    first = apply(apiserver, deploy_path(ns, name), deployment(name, replicas=2), "alice")
    status, doc = apiserver.json(
        "PATCH", deploy_path(ns, name) + q(fieldManager="bob"), json.dumps(deployment(name, replicas=5)), APPLY
    )
    assert status == 409 and doc["kind"] == "Status" and doc["reason"] == "Conflict"
    assert doc["message"] == 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas'
    assert doc["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "type": "FieldManagerConflict",
            "message": 'conflict with "alice"',
            "field": ".spec.replicas",
        }
    ]
    _, now = apiserver.json("GET", deploy_path(ns, name), expect=200)
    assert now["spec"]["replicas"] == 2
    # (the deployment controller writes the status meanwhile: the spec's generation tells)
    assert now["metadata"]["generation"] == first["metadata"]["generation"]
    assert managers(now)[("alice", "Apply")] == managers(first)[("alice", "Apply")]
    assert not any(m == "bob" for m, _ in managers(now))


def test_force_takes_sole_ownership(apiserver, ns):
    name = uniq("d")
    apply(apiserver, deploy_path(ns, name), deployment(name, replicas=2), "alice")
    out = apply(apiserver, deploy_path(ns, name), deployment(name, replicas=5), "bob", force=True)
    assert out["spec"]["replicas"] == 5
    assert owns(out, "bob", "Apply", "f:spec", "f:replicas")
    assert not owns(out, "alice", "Apply", "f:spec", "f:replicas")


def test_equal_values_are_shared_and_a_later_change_conflicts(apiserver, ns):
    name = uniq("d")
    apply(apiserver, deploy_path(ns, name), deployment(name, replicas=3), "alice")
    shared = apply(apiserver, deploy_path(ns, name), deployment(name, replicas=3), "bob")
    assert owns(shared, "alice", "Apply", "f:spec", "f:replicas")
    assert owns(shared, "bob", "Apply", "f:spec", "f:replicas")
    status, doc = apiserver.json(
        "PATCH", deploy_path(ns, name) + q(fieldManager="alice"), json.dumps(deployment(name, replicas=4)), APPLY
    )
    assert status == 409 and '"bob"' in doc["message"] and ".spec.replicas" in doc["message"]


def test_omitted_field_without_other_owners_is_removed_or_reset_to_default(apiserver, ns):
    name = uniq("d")
    apply(apiserver, deploy_path(ns, name), deployment(name, replicas=3, labels={"team": "a"}), "alice")
    out = apply(apiserver, deploy_path(ns, name), deployment(name), "alice")
    assert out["spec"]["replicas"] == 1  # reset to the default
    assert "team" not in (out["metadata"].get("labels") or {})  # removed
    assert not owns(out, "alice", "Apply", "f:spec", "f:replicas")


def test_omitted_field_with_other_owners_is_kept_and_the_claim_dropped(apiserver, ns):
    name = uniq("cm")
    apply(apiserver, cm_path(ns, name), configmap(name, {"a": "1", "b": "2"}), "alice")
    apply(apiserver, cm_path(ns, name), configmap(name, {"b": "2"}), "bob")
    out = apply(apiserver, cm_path(ns, name), configmap(name, {"a": "1"}), "alice")
    assert out["data"] == {"a": "1", "b": "2"}
    assert not owns(out, "alice", "Apply", "f:data", "f:b")
    assert owns(out, "bob", "Apply", "f:data", "f:b")


def test_omitted_list_items_are_removed_unless_others_own_them(apiserver, ns):
    name = uniq("d")
    two = [
        {"name": "web", "image": "busybox:1", "ports": [{"containerPort": 80}, {"containerPort": 81}]},
        {"name": "side", "image": "busybox:1"},
    ]
    apply(apiserver, deploy_path(ns, name), deployment(name, containers=two), "alice")
    one = [{"name": "web", "image": "busybox:1", "ports": [{"containerPort": 80}]}]
    out = apply(apiserver, deploy_path(ns, name), deployment(name, containers=one), "alice")
    cs = out["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in cs] == ["web"]
    assert [p["containerPort"] for p in cs[0]["ports"]] == [80]
    # An item another manager also applied stays when this one drops it.
    apply(apiserver, deploy_path(ns, name), deployment(name, containers=two), "alice")
    apply(
        apiserver, deploy_path(ns, name), deployment(name, containers=[{"name": "side", "image": "busybox:1"}]), "bob"
    )
    out = apply(apiserver, deploy_path(ns, name), deployment(name, containers=one), "alice")
    assert sorted(c["name"] for c in out["spec"]["template"]["spec"]["containers"]) == ["side", "web"]


def test_manager_owning_nothing_is_removed_automatically(apiserver, ns):
    name = uniq("d")
    apply(apiserver, deploy_path(ns, name), deployment(name), "owner")
    apply(
        apiserver,
        deploy_path(ns, name),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": {"replicas": 4}},
        "handover",
    )
    _, out = apiserver.json(
        "PATCH", deploy_path(ns, name) + q(fieldManager="scaler"), {"spec": {"replicas": 6}}, MERGE, expect=200
    )
    assert ("handover", "Apply") not in managers(out)
    assert owns(out, "scaler", "Update", "f:spec", "f:replicas")


# --- reset rules, create-through-apply, dry run, request checks -----------------------------


def test_managed_fields_reset_by_merge_patch_and_json_patch(apiserver, ns):
    name = uniq("cm")
    apply(apiserver, cm_path(ns, name), configmap(name, {"a": "1"}), "alice")
    _, out = apiserver.json("PATCH", cm_path(ns, name), {"metadata": {"managedFields": []}}, MERGE, expect=200)
    assert ("alice", "Apply") in managers(out)  # an empty list does not reset
    _, out = apiserver.json(
        "PATCH",
        cm_path(ns, name) + q(fieldManager="resetter"),
        {"metadata": {"managedFields": [{}]}, "data": {"b": "2"}},
        MERGE,
        expect=200,
    )
    assert managers(out) == {("resetter", "Update"): {"f:data": {"f:b": {}}}}
    _, out = apiserver.json(
        "PATCH",
        cm_path(ns, name),
        [{"op": "replace", "path": "/metadata/managedFields", "value": [{}]}],
        JSONPATCH,
        expect=200,
    )
    assert "managedFields" not in out["metadata"]


def test_create_through_apply_dry_run_and_request_checks(apiserver, ns):
    name = uniq("cm")
    status, doc = apiserver.json("PATCH", cm_path(ns, name), json.dumps(configmap(name, {"a": "1"})), APPLY)
    assert status == 422 and "fieldManager" in doc["message"]
    dry = apply(apiserver, cm_path(ns, name), configmap(name, {"a": "1"}), "alice", expect=201, dryRun="All")
    assert dry["data"] == {"a": "1"}
    apiserver.json("GET", cm_path(ns, name), expect=404)
    created = apply(apiserver, cm_path(ns, name), configmap(name, {"a": "1"}), "alice", expect=201)
    assert managers(created) == {("alice", "Apply"): {"f:data": {"f:a": {}}}}
    dry = apply(apiserver, cm_path(ns, name), configmap(name, {"a": "2"}), "alice", expect=200, dryRun="All")
    assert dry["data"] == {"a": "2"}
    assert apiserver.json("GET", cm_path(ns, name), expect=200)[1]["data"] == {"a": "1"}
    bad = configmap(name, {"a": "1"})
    bad["metadata"]["managedFields"] = [{"manager": "x"}]
    status, doc = apiserver.json("PATCH", cm_path(ns, name) + q(fieldManager="alice"), json.dumps(bad), APPLY)
    assert status == 400 and "managedFields must be nil" in doc["message"]
    yaml_body = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: '3'\n"
    status, doc = apiserver.json("PATCH", cm_path(ns, name) + q(fieldManager="alice"), yaml_body, APPLY)
    assert status == 200 and doc["data"] == {"a": "3"}
    status, doc = apiserver.json(
        "PATCH",
        cm_path(ns, name) + q(fieldManager="alice"),
        json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}),
        APPLY,
    )
    assert status == 400


def test_kubernetes_python_client_server_side_apply(k8s_client, apiserver, ns):
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.client.CoreV1Api(k8s_client)
    name = uniq("cm")
    body = configmap(name, {"k": "v1"})
    # The generated client's PATCH sends the content type it is told to: apply.
    out = api.patch_namespaced_config_map(
        name, ns, body, field_manager="py-client", _content_type=APPLY["Content-Type"]
    )
    assert out.data == {"k": "v1"}
    assert [(e.manager, e.operation) for e in out.metadata.managed_fields] == [("py-client", "Apply")]
    body["data"] = {"k": "v2"}
    with pytest.raises(kubernetes.client.ApiException) as ei:
        api.patch_namespaced_config_map(name, ns, body, field_manager="other", _content_type=APPLY["Content-Type"])
    assert ei.value.status == 409 and ".data.k" in ei.value.body
    out = api.patch_namespaced_config_map(
        name, ns, body, field_manager="other", force=True, _content_type=APPLY["Content-Type"]
    )
    assert out.data == {"k": "v2"}
    assert [(e.manager, e.operation) for e in out.metadata.managed_fields] == [("other", "Apply")]
    patched = api.patch_namespaced_config_map(name, ns, {"data": {"k": "v3"}}, field_manager="py-merge")
    assert {(e.manager, e.operation) for e in patched.metadata.managed_fields} == {("py-merge", "Update")}

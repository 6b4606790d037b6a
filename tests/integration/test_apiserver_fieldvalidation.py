"""Field validation of submitted objects against the real orch-apiserver.

The spec's table: types are always checked (400 naming the first fatal error);
unknown and duplicate fields are dropped silently under ``fieldValidation=Ignore``,
answered with one ``Warning`` header entry each under Warn (the default), and
rejected with 400 listing all of them under Strict; on POST, PUT (including the
status sub-resource) and PATCH; for JSON and YAML bodies. kubectl's default
validation is Strict, ``--validate=warn`` prints the server's warnings.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from tests.apiserver_fixtures import KUBECTL, Kubectl, create_namespace
from tests.helpers import uniq

MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}
YAML = {"Content-Type": "application/yaml"}


def cm_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


def send(server, method: str, path: str, body, headers: dict | None = None) -> tuple[int, list[str], object]:
    """One request; returns (status, every Warning header value, decoded body).
    (The fixture's request() folds repeated headers into one.)"""
    headers = dict(headers or {})
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    if isinstance(body, str):
        body = body.encode()
    conn = server.connection(10, True)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        warnings = resp.msg.get_all("Warning") or []
        return resp.status, warnings, json.loads(data) if data else None
    finally:
        conn.close()


def get(server, path: str) -> dict:
    status, _, doc = send(server, "GET", path, b"")
    assert status == 200, doc
    return doc


def missing(server, path: str) -> bool:
    status, _, _ = send(server, "GET", path, b"")
    return status == 404


def assert_bad_request(status, doc, *fragments: str) -> None:
    assert status == 400, doc
    assert doc["kind"] == "Status" and doc["reason"] == "BadRequest" and doc["code"] == 400, doc
    for f in fragments:
        assert f in doc["message"], doc["message"]


@pytest.fixture(scope="module")
def ns(apiserver) -> str:
    name = uniq("fv")
    create_namespace(apiserver, name)
    return name


def cm(name: str, **extra) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}, **extra}


# --- POST --------------------------------------------------------------------------------


def test_strict_rejects_unknown_fields_listing_all(apiserver, ns):
    body = cm("strict", bogus=1)
    body["metadata"]["colour"] = "red"
    status, _, doc = send(apiserver, "POST", cm_path(ns) + "?fieldValidation=Strict", body)
    assert_bad_request(
        status,
        doc,
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: ',
        'unknown field "metadata.colour"',
        'unknown field "bogus"',
    )
    assert missing(apiserver, cm_path(ns, "strict"))


def test_warn_is_the_default_one_header_entry_per_field(apiserver, ns):
    body = (
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"warned","labels":{"x":"1","x":"2"}},'
        b'"bogus":{"deep":1},"data":{"a":"b"}}'
    )
    status, warnings, doc = send(apiserver, "POST", cm_path(ns), body)
    assert status == 201, doc
    assert sorted(warnings) == sorted(
        ['299 - "unknown field \\"bogus\\""', '299 - "duplicate field \\"metadata.labels.x\\""']
    )
    stored = get(apiserver, cm_path(ns, "warned"))
    assert "bogus" not in stored and "bogus" not in doc  # unknown fields are never stored
    assert stored["metadata"]["labels"] == {"x": "2"}  # the last duplicate wins


def test_ignore_drops_unknown_fields_silently(apiserver, ns):
    status, warnings, doc = send(apiserver, "POST", cm_path(ns) + "?fieldValidation=Ignore", cm("ignored", bogus=1))
    assert status == 201, doc
    assert warnings == []
    assert "bogus" not in get(apiserver, cm_path(ns, "ignored"))


def test_invalid_level_is_422(apiserver, ns):
    status, _, doc = send(apiserver, "POST", cm_path(ns) + "?fieldValidation=Loud", cm("lvl"))
    assert status == 422, doc
    assert doc["reason"] == "Invalid" and "fieldValidation: Unsupported value" in doc["message"], doc


@pytest.mark.parametrize("level", ["Ignore", "Warn", "Strict"])
def test_type_errors_are_fatal_at_every_level(apiserver, ns, level):
    name = uniq("types")
    status, _, doc = send(
        apiserver, "POST", cm_path(ns) + f"?fieldValidation={level}", {"metadata": {"name": name}, "data": {"a": 1}}
    )
    assert_bad_request(status, doc, "cannot unmarshal number into Go struct field ConfigMap.data of type string")
    assert missing(apiserver, cm_path(ns, name))


def test_only_the_first_fatal_error_is_named(apiserver, ns):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fatal"},
        "bogus": True,
        "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": "80"}]}]},
    }
    status, _, doc = send(apiserver, "POST", f"/api/v1/namespaces/{ns}/pods?fieldValidation=Strict", pod)
    assert_bad_request(status, doc, "Go struct field ContainerPort.spec.containers.ports.containerPort of type int32")
    assert "bogus" not in doc["message"] and "strict decoding" not in doc["message"]


def test_nested_unknown_field_path_in_a_named_group(apiserver, ns):
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "dep"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicyy": "x"}]},
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    status, _, doc = send(apiserver, "POST", path + "?fieldValidation=Strict", dep)
    assert_bad_request(status, doc, 'unknown field "spec.template.spec.containers[0].imagePullPolicyy"')
    status, warnings, doc = send(apiserver, "POST", path, dep)
    assert status == 201, doc
    assert warnings == ['299 - "unknown field \\"spec.template.spec.containers[0].imagePullPolicyy\\""']


def test_required_field_missing_is_422(apiserver, ns):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "noname"},
        "spec": {"containers": [{"image": "busybox"}]},
    }
    status, _, doc = send(apiserver, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert status == 422, doc
    assert doc["reason"] == "Invalid"
    assert {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].name"} in doc[
        "details"
    ]["causes"]


def test_secret_data_must_be_base64(apiserver, ns):
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "not base64!"}}
    status, _, doc = send(apiserver, "POST", f"/api/v1/namespaces/{ns}/secrets", body)
    assert_bad_request(status, doc, "data.k", "base64")


def test_opaque_values_keep_unknown_content(apiserver, ns):
    rev = {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": "rev"},
        "revision": 1,
        "data": {"anything": {"goes": [1, "two"]}},
    }
    status, warnings, doc = send(
        apiserver, "POST", f"/apis/apps/v1/namespaces/{ns}/controllerrevisions?fieldValidation=Strict", rev
    )
    assert status == 201, doc
    assert warnings == [] and doc["data"] == {"anything": {"goes": [1, "two"]}}


# --- YAML bodies -----------------------------------------------------------------------------

DUP_YAML = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: one\n  a: two\nbogus: 1\n"


def test_yaml_duplicates_strict(apiserver, ns):
    status, _, doc = send(apiserver, "POST", cm_path(ns) + "?fieldValidation=Strict", DUP_YAML.format(name="ys"), YAML)
    assert_bad_request(status, doc, 'duplicate field "data.a"', 'unknown field "bogus"')


def test_yaml_duplicates_warn_keep_the_last(apiserver, ns):
    status, warnings, doc = send(apiserver, "POST", cm_path(ns), DUP_YAML.format(name="yw"), YAML)
    assert status == 201, doc
    assert warnings == ['299 - "duplicate field \\"data.a\\""', '299 - "unknown field \\"bogus\\""']
    assert get(apiserver, cm_path(ns, "yw"))["data"] == {"a": "two"}


def test_yaml_type_error(apiserver, ns):
    status, _, doc = send(apiserver, "POST", cm_path(ns), "metadata: {name: yt}\ndata: {a: [1]}\n", YAML)
    assert_bad_request(status, doc, "cannot unmarshal array into Go struct field ConfigMap.data of type string")


# --- PUT, status, PATCH --------------------------------------------------------------------


def test_put_validates_fields(apiserver, ns):
    status, _, created = send(apiserver, "POST", cm_path(ns), cm("put"))
    assert status == 201
    body = dict(created, extra="x")
    status, _, doc = send(apiserver, "PUT", cm_path(ns, "put") + "?fieldValidation=Strict", body)
    assert_bad_request(status, doc, 'unknown field "extra"')
    status, warnings, doc = send(apiserver, "PUT", cm_path(ns, "put"), body)
    assert status == 200, doc
    assert warnings == ['299 - "unknown field \\"extra\\""'] and "extra" not in doc
    status, _, doc = send(apiserver, "PUT", cm_path(ns, "put"), dict(doc, data={"a": False}))
    assert_bad_request(status, doc, "ConfigMap.data")


def test_status_subresource_put_validates_fields(apiserver, ns):
    path = f"/api/v1/namespaces/{ns}/pods"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "st"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    status, _, created = send(apiserver, "POST", path, pod)
    assert status == 201, created
    created["metadata"].pop("resourceVersion")  # the scheduler may write meanwhile: unconditional PUT
    body = dict(created, status={"phase": "Pending", "mood": "calm"})
    status, _, doc = send(apiserver, "PUT", f"{path}/st/status?fieldValidation=Strict", body)
    assert_bad_request(status, doc, 'unknown field "status.mood"')
    status, warnings, doc = send(apiserver, "PUT", f"{path}/st/status", body)
    assert status == 200, doc
    assert warnings == ['299 - "unknown field \\"status.mood\\""'] and "mood" not in doc["status"]


def test_merge_patch_validates_the_result(apiserver, ns):
    send(apiserver, "POST", cm_path(ns), cm("mp"))
    path = cm_path(ns, "mp")
    status, _, doc = send(apiserver, "PATCH", path + "?fieldValidation=Strict", {"bogus": 1}, MERGE)
    assert_bad_request(status, doc, 'unknown field "bogus"')
    status, warnings, doc = send(apiserver, "PATCH", path, b'{"data":{"z":"1","z":"2"},"bogus":1}', MERGE)
    assert status == 200, doc
    assert warnings == ['299 - "duplicate field \\"data.z\\""', '299 - "unknown field \\"bogus\\""']
    assert doc["data"]["z"] == "2" and "bogus" not in get(apiserver, path)
    status, _, doc = send(apiserver, "PATCH", path, {"data": {"n": 5}}, MERGE)
    assert_bad_request(status, doc, "ConfigMap.data")


def test_json_patch_validates_the_result(apiserver, ns):
    send(apiserver, "POST", cm_path(ns), cm("jp"))
    path = cm_path(ns, "jp")
    ops = [{"op": "add", "path": "/metadata/nickname", "value": "x"}]
    status, _, doc = send(apiserver, "PATCH", path + "?fieldValidation=Strict", ops, JSONPATCH)
    assert_bad_request(status, doc, 'unknown field "metadata.nickname"')
    status, warnings, doc = send(apiserver, "PATCH", path + "?fieldValidation=Ignore", ops, JSONPATCH)
    assert status == 200 and warnings == [] and "nickname" not in doc["metadata"]


# --- kubectl -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubectl_client(apiserver, tmp_path_factory):
    if shutil.which(KUBECTL) is None and not os.path.exists(KUBECTL):
        pytest.skip(f"{KUBECTL} not installed")
    return Kubectl(apiserver, tmp_path_factory.mktemp("kubectl-home"))


def _manifest(name: str, ns: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "foo": "bar"},
        }
    )


def test_kubectl_create_unknown_field_fails_under_default_validation(apiserver, ns, kubectl_client):
    res = kubectl_client("create", "-f", "-", input=_manifest("kstrict", ns))
    assert res.returncode != 0, res.stdout
    assert 'unknown field "spec.foo"' in res.stderr, res.stderr
    assert missing(apiserver, f"/api/v1/namespaces/{ns}/pods/kstrict")


def test_kubectl_create_unknown_field_warns_with_validate_warn(apiserver, ns, kubectl_client):
    res = kubectl_client("create", "--validate=warn", "-f", "-", input=_manifest("kwarn", ns))
    assert res.returncode == 0, res.stderr
    assert "Warning:" in res.stderr and 'unknown field "spec.foo"' in res.stderr, res.stderr
    assert "foo" not in get(apiserver, f"/api/v1/namespaces/{ns}/pods/kwarn")["spec"]


def test_kubectl_configmap_with_a_number_is_rejected(apiserver, ns, kubectl_client):
    manifest = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "knum", "namespace": ns}, "data": {"a": 1}}
    )
    res = kubectl_client("create", "--validate=false", "-f", "-", input=manifest)
    assert res.returncode != 0
    assert "BadRequest" in res.stderr and "ConfigMap.data" in res.stderr, res.stderr


def test_strategic_merge_patch_validates_the_result(apiserver, ns):
    send(apiserver, "POST", cm_path(ns), cm("smp"))
    path = cm_path(ns, "smp")
    smp = {"Content-Type": "application/strategic-merge-patch+json"}
    status, _, doc = send(apiserver, "PATCH", path + "?fieldValidation=Strict", {"bogus": 1}, smp)
    assert_bad_request(status, doc, 'unknown field "bogus"')
    status, warnings, doc = send(apiserver, "PATCH", path, b'{"data":{"q":"1","q":"2"},"bogus":1}', smp)
    assert status == 200, doc
    assert warnings == ['299 - "duplicate field \\"data.q\\""', '299 - "unknown field \\"bogus\\""']
    assert doc["data"]["q"] == "2" and "bogus" not in doc


def test_apply_patch_validates_the_result(apiserver, ns):
    path = cm_path(ns, "applied") + "?fieldManager=fv-test"
    apply = {"Content-Type": "application/apply-patch+yaml"}
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: '1'\nbogus: 1\n"
    status, _, doc = send(apiserver, "PATCH", path + "&fieldValidation=Strict", manifest, apply)
    assert_bad_request(status, doc, 'unknown field "bogus"')
    status, warnings, doc = send(apiserver, "PATCH", path, manifest, apply)
    assert status == 201, doc
    assert warnings == ['299 - "unknown field \\"bogus\\""']
    assert doc["data"] == {"a": "1"} and "bogus" not in doc

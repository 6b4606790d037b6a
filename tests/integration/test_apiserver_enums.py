"""Enumerated fields over HTTPS against the real ``orch-apiserver``: a value upstream's
validation does not support is a 422 Invalid Status worded as upstream words it
(``Unsupported value: "Bogus": supported values: ...``), nothing is stored, and what
a mutating admission plugin adds to a pod (the service-account token volume, the
default tolerations) is validated and stored with the pod."""

from __future__ import annotations

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq


@pytest.fixture(scope="module")
def ns(apiserver):
    name = uniq("enums")
    create_namespace(apiserver, name)
    return name


def refused(server, path: str, body: dict) -> dict:
    status, doc = server.json("POST", path, body)
    assert status == 422, doc
    assert (doc["kind"], doc["status"], doc["reason"], doc["code"]) == ("Status", "Failure", "Invalid", 422), doc
    return doc


def test_service_type(apiserver, ns):
    doc = refused(
        apiserver,
        f"/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "web"}, "spec": {"type": "Bogus", "ports": [{"port": 80}]}},
    )
    message = 'Unsupported value: "Bogus": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'
    assert doc["details"]["causes"] == [{"reason": "FieldValueNotSupported", "message": message, "field": "spec.type"}]
    assert doc["message"] == f'Service "web" is invalid: spec.type: {message}'
    assert doc["details"]["name"] == "web" and doc["details"]["kind"] == "Service"
    status, _ = apiserver.json("GET", f"/api/v1/namespaces/{ns}/services/web")
    assert status == 404
    apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}},
        expect=201,
    )


def test_endpointslice_address_type(apiserver, ns):
    path = f"/apis/{names.DISCOVERY_GROUP}/v1/namespaces/{ns}/endpointslices"
    doc = refused(apiserver, path, {"metadata": {"name": "s"}, "addressType": "Bogus", "endpoints": []})
    assert doc["details"]["causes"] == [
        {
            "reason": "FieldValueNotSupported",
            "field": "addressType",
            "message": 'Unsupported value: "Bogus": supported values: "FQDN", "IPv4", "IPv6"',
        }
    ]
    apiserver.json("POST", path, {"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": []}, expect=201)


def test_event_type(apiserver, ns):
    path = f"/apis/{names.EVENTS_GROUP}/v1/namespaces/{ns}/events"
    event = {
        "metadata": {"name": "e"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "type": "Bogus",
        "reportingController": "example.com/c",
        "reportingInstance": "i",
        "action": "Act",
        "reason": "R",
        "regarding": {"kind": "Pod", "namespace": ns, "name": "p"},
    }
    doc = refused(apiserver, path, event)
    assert doc["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "type", "message": 'Invalid value: "": has invalid value: Bogus'}
    ]
    apiserver.json("POST", path, {**event, "type": "Normal"}, expect=201)
    # The core/v1 Event API keeps upstream's legacy rules: any type is stored.
    _, legacy = apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/events",
        {
            "metadata": {"name": "legacy"},
            "type": "Bogus",
            "reason": "R",
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p"},
        },
        expect=201,
    )
    assert legacy["type"] == "Bogus"


def test_workload_templates_and_dry_run(apiserver, ns):
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "strategy": {"type": "BlueGreen"},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "Sometimes"}]},
            },
        },
    }
    doc = refused(apiserver, path + "?dryRun=All", body)
    assert sorted((c["field"], c["reason"]) for c in doc["details"]["causes"]) == [
        ("spec.strategy", "FieldValueNotSupported"),
        ("spec.template.spec.containers[0].imagePullPolicy", "FieldValueNotSupported"),
    ]


def test_what_admission_adds_to_a_pod_is_validated_and_stored(apiserver, ns):
    _, pod = apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        expect=201,
    )
    spec = pod["spec"]
    token = [v for v in spec["volumes"] if v["name"].startswith(names.SERVICEACCOUNT_VOLUME_PREFIX)]
    assert len(token) == 1 and token[0]["projected"]["defaultMode"] == 0o644
    assert {t["key"] for t in spec["tolerations"]} == {names.TAINT_NOT_READY, names.TAINT_UNREACHABLE}
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    # A client toleration that breaks the rules is still refused next to the added ones.
    doc = refused(
        apiserver,
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": "q"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "tolerations": [{"key": "k", "operator": "Sometimes"}],
            },
        },
    )
    assert [c["field"] for c in doc["details"]["causes"]] == ["spec.tolerations[0].operator"]

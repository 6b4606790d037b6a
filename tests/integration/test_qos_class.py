"""The qosClass a real orch-apiserver stores equals the class the node agent computes."""

from __future__ import annotations

import copy

import pytest

from agent.cm import pod_qos_class as agent_qos
from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.unit.test_qos import CASES

NAMESPACE = "qos-classes"


@pytest.fixture(scope="module")
def namespace(apiserver):
    create_namespace(apiserver, NAMESPACE)
    return NAMESPACE


@pytest.mark.parametrize("name", list(CASES))
def test_stored_qos_class_matches_the_agent(apiserver, namespace, name):
    manifest, want = CASES[name]
    body = copy.deepcopy(manifest)
    body["metadata"] = {"name": name, "namespace": namespace}
    overhead = body["spec"].get("overhead")
    if overhead:
        # A pod's overhead comes from its RuntimeClass (the RuntimeClass admission plugin
        # refuses an overhead no class defines).
        rc = {"metadata": {"name": f"rc-{name}"}, "handler": "runc", "overhead": {"podFixed": overhead}}
        apiserver.json("POST", f"/apis/{names.NODE_GROUP}/v1/runtimeclasses", rc, expect=(201, 409))
        body["spec"]["runtimeClassName"] = f"rc-{name}"
    _, created = apiserver.json("POST", f"/api/v1/namespaces/{namespace}/pods", body, expect=201)
    assert created["status"]["qosClass"] == want
    _, stored = apiserver.json("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", expect=200)
    assert stored["status"]["qosClass"] == want
    assert agent_qos(stored) == want  # the agent, given the pod it receives from the server

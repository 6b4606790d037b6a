"""Against a running orch-apiserver: the bundled controllers write as their own service
accounts, authorized by their system:controller:* roles. Without the namespace
controller's ClusterRoleBinding a terminating namespace stays terminating (its
deletes are forbidden to system:serviceaccount:orch-system:namespace-controller);
with the binding back, it goes."""

from __future__ import annotations

import time

from apiserver_min.api import names
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq, wait_for

BINDING = f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings/{names.CONTROLLER_ROLE_PREFIX}namespace-controller"
NS_CONTROLLER = f"{names.SERVICEACCOUNT_USER_PREFIX}{names.NS_SYSTEM}:namespace-controller"


def test_namespace_deletion_is_authorized_as_the_namespace_controller(apiserver):
    name = uniq("ident")
    create_namespace(apiserver, name)
    apiserver.json("POST", f"/api/v1/namespaces/{name}/configmaps", {"metadata": {"name": "keep"}}, expect=201)
    _, binding = apiserver.json("GET", BINDING, expect=200)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "namespace-controller", "namespace": "orch-system"}
    ]
    apiserver.json("DELETE", BINDING, expect=200)
    try:
        apiserver.json("DELETE", f"/api/v1/namespaces/{name}", expect=200)
        time.sleep(3)  # the controller has tried (and retried) by now
        _, ns = apiserver.json("GET", f"/api/v1/namespaces/{name}", expect=200)
        assert ns["status"]["phase"] == "Terminating"
        apiserver.json("GET", f"/api/v1/namespaces/{name}/configmaps/keep", expect=200)
        wait_for(
            lambda: f'User "{NS_CONTROLLER}" cannot delete resource' in apiserver.log_path.read_text(errors="replace"),
            10,
            "the namespace controller's forbidden delete in the log",
        )
    finally:
        binding["metadata"] = {"name": binding["metadata"]["name"], "labels": binding["metadata"].get("labels", {})}
        apiserver.json("POST", f"/apis/{names.RBAC_GROUP}/v1/clusterrolebindings", binding, expect=201)
    wait_for(lambda: apiserver.request("GET", f"/api/v1/namespaces/{name}")[0] == 404, 20, f"namespace {name} gone")

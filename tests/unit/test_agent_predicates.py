"""The node's own check of a pod's fit beyond resources (upstream's general predicates)."""

from __future__ import annotations

import copy

import pytest

from agent.predicates import admit
from apiserver_min.api import names

NODE = {
    "metadata": {"name": "node-a", "labels": {names.LABEL_OS: "linux", "disk": "ssd", "zone": "z1"}},
    "spec": {"taints": [{"key": "maint", "effect": "NoExecute"}, {"key": "soft", "effect": "NoSchedule"}]},
}
TOLERATE_MAINT = [{"key": "maint", "operator": "Exists", "effect": "NoExecute"}]


def pod(name: str = "p", *, ports: tuple[int, ...] = (), **spec) -> dict:
    container = {"name": "c", "image": "i", "ports": [{"containerPort": p, "hostPort": p} for p in ports]}
    spec.setdefault("tolerations", TOLERATE_MAINT)
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {}}, "spec": {"containers": [container], **spec}}


def affinity(op: str, *values: str) -> dict:
    expr = {"key": "zone", "operator": op, "values": list(values)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        }
    }


@pytest.mark.parametrize(
    "changes, want",
    [
        ({}, ""),
        ({"nodeSelector": {"disk": "ssd"}, "affinity": affinity("In", "z1", "z2"), "nodeName": "node-a"}, ""),
        ({"nodeSelector": {"disk": "hdd"}}, "NodeAffinity"),
        ({"affinity": affinity("NotIn", "z1")}, "NodeAffinity"),
        ({"nodeName": "node-b"}, "NodeName"),
        ({"os": {"name": "windows"}}, "PodOSNotSupported"),
        ({"tolerations": []}, "TaintToleration"),  # the NoSchedule taint alone would not refuse
    ],
)
def test_predicates(changes, want):
    reason, message = admit(pod(**changes), NODE, [])
    assert reason == want
    if reason in ("NodeAffinity", "NodeName", "TaintToleration"):
        assert message == f"Predicate {reason} failed"


def test_os_label_host_ports_and_static_pods():
    windows = pod()
    windows["metadata"]["labels"][names.LABEL_OS] = "windows"
    assert admit(windows, NODE, []) == (
        "PodOSSelectorNodeLabelDoesNotMatch",
        f"Failed to admit pod as the `{names.LABEL_OS}` label doesn't match node label",
    )
    web = pod("web", ports=(8080,))
    assert admit(pod("other", ports=(8080,)), NODE, [web]) == ("NodePorts", "Predicate NodePorts failed")
    assert admit(pod("other", ports=(8081,)), NODE, [web]) == ("", "")
    static = pod("static", tolerations=[])
    static["metadata"]["annotations"] = {names.ANNOTATION_CONFIG_SOURCE: "file"}
    assert admit(static, NODE, []) == ("", "")  # a manifest's pod runs whatever the node's taints
    assert admit(copy.deepcopy(static), {"metadata": {"name": "node-a"}}, []) == ("", "")

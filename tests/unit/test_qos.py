"""One QoS classifier: the class the API server stores is the cgroup tier the agent uses.

Each case runs through the shared classifier (apiserver_min.api.qos), the
server's pod strategy (``status.qosClass`` on create), and the node agent's
names for it (agent.cm, the runtime's config builder, the status it reports).
"""

from __future__ import annotations

import copy

import pytest

from agent.cm import pod_qos_class as agent_cm_qos
from agent.runtime.container import pod_qos_class as agent_runtime_qos
from agent.status.podstatus import rejected_status
from apiserver_min.api import qos
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.registry.core import PodStrategy
from apiserver_min.registry.families import strategy_for

G, B, BE = "Guaranteed", "Burstable", "BestEffort"


def c(name="c", requests=None, limits=None):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources}


def pod(containers, init=None, **spec):
    s = {"containers": containers, **spec}
    if init:
        s["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": s}


FULL = {"cpu": "1", "memory": "1Gi"}

CASES = {
    # The defect: the same amounts spelled differently are equal (upstream compares values).
    "equal-values-different-spellings": (
        pod([c(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1000m", "memory": "1024Mi"})]),
        G,
    ),
    "decimal-cpu-and-plain-bytes": (
        pod([c(requests={"cpu": "0.5", "memory": "134217728"}, limits={"cpu": "500m", "memory": "128Mi"})]),
        G,
    ),
    "guaranteed-from-limits-alone": (pod([c(limits=FULL)]), G),
    "several-containers-summed": (
        pod(
            [
                c("a", limits={"cpu": "0.5", "memory": "128Mi"}),
                c("b", requests={"cpu": "500m", "memory": "134217728"}, limits={"cpu": "500m", "memory": "128Mi"}),
            ]
        ),
        G,
    ),
    "best-effort-nothing-set": (pod([c(), c("b")]), BE),
    "best-effort-zero-quantities": (pod([c(requests={"cpu": "0", "memory": "0Mi"})]), BE),
    "best-effort-only-other-resources": (
        pod([c(requests={"ephemeral-storage": "1Gi"}, limits={"ephemeral-storage": "1Gi", "example.com/gpu": "1"})]),
        BE,
    ),
    "burstable-partial-limits": (pod([c(limits={"cpu": "1"})]), B),
    "burstable-requests-only": (pod([c(requests={"memory": "1Gi"})]), B),
    "burstable-requests-below-limits": (
        pod([c(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})]),
        B,
    ),
    "burstable-one-container-unlimited": (pod([c("a", limits=FULL), c("b")]), B),
    "burstable-zero-memory-limit-ignored": (pod([c(limits={"cpu": "1", "memory": "0"})]), B),
    "init-container-unlimited": (pod([c(limits=FULL)], init=[c("init")]), B),
    "init-container-limited": (pod([c(limits=FULL)], init=[c("init", limits={"cpu": "1000m", "memory": "1024Mi"})]), G),
    "init-container-requests-only": (pod([c()], init=[c("init", requests={"cpu": "100m"})]), B),
    "overhead-not-counted": (pod([c(limits=FULL)], overhead={"cpu": "250m", "memory": "120Mi"}), G),
    "hugepages-not-counted": (pod([c(limits={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "64Mi"})]), G),
    "extended-resources-not-counted": (pod([c(limits={**FULL, "example.com/gpu": "2"})]), G),
}


def _server_qos(p: dict) -> str:
    strategy = strategy_for(REGISTRY.by_resource("", "v1", "pods"))
    assert isinstance(strategy, PodStrategy)
    obj = copy.deepcopy(p)
    strategy.prepare_for_create(obj)
    return obj["status"]["qosClass"]


@pytest.mark.parametrize("name", list(CASES))
def test_server_and_agent_agree_with_upstream(name):
    p, want = CASES[name]
    assert qos.pod_qos_class(copy.deepcopy(p)) == want
    assert _server_qos(p) == want
    assert agent_cm_qos(copy.deepcopy(p)) == want
    assert agent_runtime_qos(copy.deepcopy(p)) == want
    assert rejected_status(copy.deepcopy(p), "R", "m", now="x")["qosClass"] == want


def test_agent_and_server_use_the_one_classifier():
    assert agent_cm_qos is qos.pod_qos_class
    assert agent_runtime_qos is qos.pod_qos_class


def test_unparseable_quantity_is_left_to_validation():
    """The server classifies before it validates: a bad quantity must not crash the create."""
    p = pod([c(requests={"cpu": "lots", "memory": "1Gi"}, limits={"memory": "1Gi"})])
    assert qos.pod_qos_class(p) == B
    assert _server_qos(p) == B

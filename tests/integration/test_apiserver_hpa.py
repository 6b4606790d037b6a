"""Against a running orch-apiserver: HorizontalPodAutoscalers with the real kubectl.

``kubectl autoscale`` creates an ``autoscaling/v2`` autoscaler, ``kubectl get hpa``
prints upstream's columns, and the bundled controller reads the target's Scale and asks
the server's own resource metrics API for the pods' usage: no node agent runs, so there
are no metrics, which it reports as upstream does (ScalingActive False,
FailedGetResourceMetric).
"""

from __future__ import annotations

import pytest

from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq, wait_for

HPAS = "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"


@pytest.fixture(scope="module")
def ns(apiserver):
    name = uniq("hpa")
    create_namespace(apiserver, name)
    return name


def _deployment(name: str, replicas: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": "orch.local/busybox:1", "resources": {"requests": {"cpu": "100m"}}}
                    ]
                },
            },
        },
    }


def _condition(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def test_kubectl_autoscale_creates_an_autoscaler_the_controller_reports_on(apiserver, kubectl, ns):
    apiserver.json("POST", DEPLOYMENTS.format(ns=ns), _deployment("web", 2), expect=201)
    out = kubectl("autoscale", "deployment", "web", "--cpu-percent=50", "--min=1", "--max=5", "-n", ns, check=True)
    assert "autoscaled" in out.stdout
    _, hpa = apiserver.json("GET", HPAS.format(ns=ns) + "/web", expect=200)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 5)
    assert hpa["spec"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}
    ]

    def reported() -> dict | None:
        _, obj = apiserver.json("GET", HPAS.format(ns=ns) + "/web", expect=200)
        active = _condition(obj, "ScalingActive")
        return obj if active is not None else None

    hpa = wait_for(reported, timeout=20, what="the autoscaler's status")
    assert _condition(hpa, "AbleToScale")["reason"] == "SucceededGetScale"
    active = _condition(hpa, "ScalingActive")
    assert (active["status"], active["reason"]) == ("False", "FailedGetResourceMetric")
    assert "no metrics returned from resource metrics API" in active["message"]
    assert hpa["status"]["currentReplicas"] == 2

    table = kubectl("get", "hpa", "-n", ns, check=True).stdout.splitlines()
    assert table[0].split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert table[1].split()[:6] == ["web", "Deployment/web", "<unknown>/50%", "1", "5", "2"]
    # The short name and the "all" category.
    assert "horizontalpodautoscaler.autoscaling/web" in kubectl("get", "all", "-n", ns, "-o", "name", check=True).stdout

    # kubectl describe reads it (autoscaling/v2) with its conditions.
    described = kubectl("describe", "hpa", "web", "-n", ns, check=True).stdout
    assert "Deployment/web" in described and "FailedGetResourceMetric" in described
    # The v1 view of the same object.
    _, v1 = apiserver.json("GET", f"/apis/autoscaling/v1/namespaces/{ns}/horizontalpodautoscalers/web", expect=200)
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 50 and v1["status"]["currentReplicas"] == 2

    # The events name the failure as upstream's.
    events = kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=web", check=True).stdout
    assert "FailedGetResourceMetric" in events


def test_invalid_autoscalers_are_refused_with_upstreams_messages(apiserver, ns):
    body = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bad"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 4,
            "maxReplicas": 2,
        },
    }
    _, status = apiserver.json("POST", HPAS.format(ns=ns), body, expect=422)
    assert status["message"] == (
        'HorizontalPodAutoscaler.autoscaling "bad" is invalid: spec.maxReplicas: Invalid value: 2: '
        "must be greater than or equal to `minReplicas`"
    )

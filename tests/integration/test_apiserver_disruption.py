"""Disruption budgets in a real orch-apiserver: the disruption controller's status,
the pods/eviction sub-resource that honours it, and ``kubectl drain``.

No agent runs: pods are created bound to a Node written as admin, and their
readiness is written through pods/status as an agent would."""

from __future__ import annotations

import datetime as _dt

import pytest

from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq, wait_for

PDBS = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_node(server, name: str) -> None:
    server.json("POST", "/api/v1/nodes", {"metadata": {"name": name}}, expect=201)


def make_ready_pod(server, ns: str, name: str, node: str, labels: dict) -> None:
    pod = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "orch.local/busybox:1"}]},
    }
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    _, cur = server.json("GET", f"/api/v1/namespaces/{ns}/pods/{name}", expect=200)
    cur["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
    }
    server.json("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", cur, expect=200)


def budget(server, ns: str, name: str) -> dict:
    return server.json("GET", PDBS.format(ns=ns) + "/" + name, expect=200)[1]


def evict(server, ns: str, pod: str, **body) -> tuple[int, dict]:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}, **body}
    return server.json("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", eviction)


def healthy(server, ns: str, selector: str) -> list[str]:
    _, lst = server.json("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}", expect=200)
    return sorted(p["metadata"]["name"] for p in lst["items"] if not p["metadata"].get("deletionTimestamp"))


@pytest.fixture
def ns(apiserver):
    name = uniq("pdb")
    create_namespace(apiserver, name)
    return name


def test_budget_status_counts_pods(apiserver, ns):
    node = uniq("node")
    make_node(apiserver, node)
    for i in range(3):
        make_ready_pod(apiserver, ns, f"web-{i}", node, {"app": "web"})
    pdb = {"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
    apiserver.json("POST", PDBS.format(ns=ns), pdb, expect=201)

    def settled():
        st = budget(apiserver, ns, "web").get("status") or {}
        return st if st.get("observedGeneration") == 1 and st.get("currentHealthy") == 3 else None

    status = wait_for(settled, timeout=10, what="budget status")
    assert status["desiredHealthy"] == 2 and status["expectedPods"] == 3 and status["disruptionsAllowed"] == 1
    cond = next(c for c in status["conditions"] if c["type"] == "DisruptionAllowed")
    assert cond["status"] == "True" and cond["reason"] == "SufficientPods"


def test_eviction_honours_budget(apiserver, ns):
    node = uniq("node")
    make_node(apiserver, node)
    for i in range(3):
        make_ready_pod(apiserver, ns, f"web-{i}", node, {"app": "web"})
    pdb = {"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
    apiserver.json("POST", PDBS.format(ns=ns), pdb, expect=201)
    wait_for(lambda: (budget(apiserver, ns, "web").get("status") or {}).get("disruptionsAllowed") == 1, timeout=10)

    code, body = evict(apiserver, ns, "web-0")
    assert code == 201, body
    assert body["status"] == "Success"
    code, body = evict(apiserver, ns, "web-1")
    assert code == 429, body
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 2 healthy pods and has" in body["details"]["causes"][0]["message"]
    assert healthy(apiserver, ns, "app=web") == ["web-1", "web-2"]
    # The evicted pod carries the DisruptionTarget condition (or is already gone).
    code, pod = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods/web-0")
    if code == 200:
        conds = {c["type"]: c for c in pod["status"]["conditions"]}
        assert conds["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
    # Dry-run refuses as the real request would and changes nothing.
    code, body = apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/web-2/eviction?dryRun=All",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-2", "namespace": ns}},
    )
    assert code == 429
    assert healthy(apiserver, ns, "app=web") == ["web-1", "web-2"]


def test_eviction_without_budget_and_of_unready_pods(apiserver, ns):
    node = uniq("node")
    make_node(apiserver, node)
    make_ready_pod(apiserver, ns, "free", node, {"app": "free"})
    code, _ = evict(apiserver, ns, "free")
    assert code == 201
    # An unready pod is evicted when the budget is already satisfied (IfHealthyBudget).
    for i in range(2):
        make_ready_pod(apiserver, ns, f"db-{i}", node, {"app": "db"})
    apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": "db-unready", "labels": {"app": "db"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "orch.local/busybox:1"}]},
        },
        expect=201,
    )
    _, cur = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods/db-unready", expect=200)
    cur["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    apiserver.json("PUT", f"/api/v1/namespaces/{ns}/pods/db-unready/status", cur, expect=200)
    pdb = {"metadata": {"name": "db"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}}
    apiserver.json("POST", PDBS.format(ns=ns), pdb, expect=201)
    wait_for(lambda: (budget(apiserver, ns, "db").get("status") or {}).get("currentHealthy") == 2, timeout=10)
    assert budget(apiserver, ns, "db")["status"]["disruptionsAllowed"] == 0
    code, body = evict(apiserver, ns, "db-unready")
    assert code == 201, body
    code, _ = evict(apiserver, ns, "db-0")
    assert code == 429


def test_two_budgets_for_one_pod_are_refused(apiserver, ns):
    node = uniq("node")
    make_node(apiserver, node)
    make_ready_pod(apiserver, ns, "p", node, {"app": "x"})
    for name in ("a", "b"):
        pdb = {"metadata": {"name": name}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}}}
        apiserver.json("POST", PDBS.format(ns=ns), pdb, expect=201)
    code, body = evict(apiserver, ns, "p")
    assert code == 500
    assert "more than one PodDisruptionBudget" in body["message"]


def test_budget_validation(apiserver, ns):
    bad = {
        "metadata": {"name": "bad"},
        "spec": {"minAvailable": 1, "maxUnavailable": "150%", "selector": {"matchLabels": {"app": "x"}}},
    }
    code, body = apiserver.json("POST", PDBS.format(ns=ns), bad)
    assert code == 422
    fields = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert "minAvailable and maxUnavailable cannot be both set" in fields["spec"]
    assert "must not be greater than 100%" in fields["spec.maxUnavailable"]


def test_max_unavailable_without_controller_fails_safe(apiserver, ns):
    node = uniq("node")
    make_node(apiserver, node)
    make_ready_pod(apiserver, ns, "bare", node, {"app": "bare"})
    pdb = {"metadata": {"name": "bare"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "bare"}}}}
    apiserver.json("POST", PDBS.format(ns=ns), pdb, expect=201)

    def failed():
        st = budget(apiserver, ns, "bare").get("status") or {}
        conds = {c["type"]: c for c in st.get("conditions") or []}
        return conds.get("DisruptionAllowed", {}).get("reason") == "SyncFailed" and st

    status = wait_for(failed, timeout=10, what="SyncFailed")
    assert status["disruptionsAllowed"] == 0
    code, _ = evict(apiserver, ns, "bare")
    assert code == 429


def test_kubectl_drain_evicts_within_budget_then_waits(apiserver, kubectl, ns):
    node = uniq("node")
    make_node(apiserver, node)
    for i in range(3):
        make_ready_pod(apiserver, ns, f"web-{i}", node, {"app": "web"})
    pdb = {"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
    apiserver.json("POST", PDBS.format(ns=ns), pdb, expect=201)
    wait_for(lambda: (budget(apiserver, ns, "web").get("status") or {}).get("disruptionsAllowed") == 1, timeout=10)
    # Bare pods need --force; drain evicts one, then retries the refused ones until its timeout.
    res = kubectl("drain", node, "--force", "--ignore-daemonsets", "--timeout=8s", timeout=60)
    assert res.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in res.stderr
    assert len(healthy(apiserver, ns, "app=web")) == 2
    _, n = apiserver.json("GET", f"/api/v1/nodes/{node}", expect=200)
    assert n["spec"].get("unschedulable") is True
    kubectl("uncordon", node, check=True)
    _, n = apiserver.json("GET", f"/api/v1/nodes/{node}", expect=200)
    assert not n["spec"].get("unschedulable")

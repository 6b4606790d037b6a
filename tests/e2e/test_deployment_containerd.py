"""A Deployment on a real node: orch-apiserver, an orch-agent joined to it on the
session's containerd, and kubectl creating and scaling the Deployment."""

from __future__ import annotations

import pytest

from tests.apiserver_fixtures import ApiServerProcess
from tests.components import free_port
from tests.e2e.harness import NODE, Cluster, new_cgroup_root


@pytest.fixture(scope="module")
def cluster(containerd, cri_images, tmp_path_factory):
    work = tmp_path_factory.mktemp("deploy-cluster")
    (work / "manifests").mkdir()
    with ApiServerProcess(str(work / "api"), free_port(), extra_args=["--enable-bootstrap-token-auth"]) as api:
        c = Cluster(work, api, containerd, new_cgroup_root("orch-deploy"))
        c.start_agent(c.agent_argv(c.token()))
        c.wait(lambda: c.node_ready() == "True", 30, "node Ready")
        yield c
        c.stop_agent()
        c.cleanup()


def running(cluster: Cluster, n: int):
    pods = cluster.get("pods", "-l", "app=web")
    items = [p for p in (pods or {}).get("items", []) if not p["metadata"].get("deletionTimestamp")]
    ok = len(items) == n and all(
        p["status"].get("phase") == "Running"
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        for p in items
    )
    return items if ok else None


def test_deployment_runs_and_scales_on_containerd(cluster):
    cluster.kubectl(
        "create", "deployment", "web", "--image=orch.local/busybox:1", "--replicas=2", "--", "sleep", "3600"
    )
    pods = cluster.wait(lambda: running(cluster, 2), 60, "2 pods Running")
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    cluster.kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    cluster.kubectl("scale", "deployment/web", "--replicas=3")
    pods = cluster.wait(lambda: running(cluster, 3), 60, "3 pods Running")
    d = cluster.get("deployment", "web")
    assert d["status"]["readyReplicas"] == 3 and d["status"]["availableReplicas"] == 3
    ready = cluster.kubectl("get", "deployment", "web").stdout
    assert "3/3" in ready

    # Clean up quickly: `sleep` as PID 1 ignores SIGTERM, so take the pods off with a short grace.
    cluster.kubectl("delete", "deployment", "web", "--cascade=orphan")
    cluster.kubectl("delete", "replicasets", "-l", "app=web", "--cascade=orphan")
    cluster.kubectl("delete", "pods", "-l", "app=web", "--grace-period=1", timeout=90)
    cluster.wait(lambda: not (cluster.get("pods", "-l", "app=web") or {}).get("items"), 60, "pods gone")
